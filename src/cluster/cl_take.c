/* cl_take.c - holding a partition whose primary moved here until the old
 * primary answers (protocol in cl_take.h).
 *
 * State under mu: per cache, the primary each partition had in the last
 * topology looked at and, when held, the peer it is held for; per peer,
 * the index this node needs it to answer for (need) and the index it asked
 * this node to answer for (ask).  `seen` and `holding` are read without
 * the lock by cl_take_held, so a request pays one atomic load when nothing
 * is held.
 */
#include "cluster/cl_take.h"

#include <pthread.h>
#include <stdatomic.h>
#include <string.h>

#include "cluster/cl_net.h"
#include "cluster/cl_plan.h"
#include "util/clock.h"
#include "util/err.h"
#include "util/mem.h"

#define TK_PEERS  64                /* members held for or asking at once */
#define ASK_MS    100               /* a question unanswered this long goes again */
#define ANSWER_WAIT_MS 20           /* on a new topology: older ones released, at most */

typedef struct tk_peer {
    cl_meta_uuid id;
    uint64_t need;                  /* its answer for this index ends holds (0: none) */
    uint64_t asked_ms;              /* when it was last asked (0: ask now) */
    uint64_t ask;                   /* it asked this node to answer for this index */
} tk_peer;

typedef struct tk_cache {
    int32_t       id;
    uint32_t      parts;
    cl_meta_uuid *prim;             /* the primary in the last topology looked at */
    uint8_t      *held;             /* peer index + 1 it is held for; 0: not held */
    struct tk_cache *next;
} tk_cache;

struct cl_take {
    cl_take_cfg     cfg;
    pthread_mutex_t mu;
    tk_cache       *caches;
    tk_peer         peers[TK_PEERS];
    uint32_t        npeers;
    _Atomic uint64_t seen;          /* index of the last topology looked at */
    _Atomic uint32_t holding;       /* partitions held now */
    uint64_t        st_held, st_taken, st_answered;
};

static const cl_meta_uuid none = { 0, 0 };

static int in_topo(const cl_topo *t, cl_meta_uuid id)
{
    for (uint32_t i = 0; i < t->n; i++)
        if (cl_meta_uuid_eq(t->m[i].id, id))
            return 1;
    return 0;
}

/* ---- tables (mu held) ------------------------------------------------------- */

static tk_cache *cache_find(cl_take *k, int32_t id, uint32_t parts)
{
    for (tk_cache *c = k->caches; c; c = c->next)
        if (c->id == id && (!parts || c->parts == parts))
            return c;
    return NULL;
}

static tk_cache *cache_get(cl_take *k, int32_t id, uint32_t parts)
{
    tk_cache *c = cache_find(k, id, parts);
    if (c)
        return c;
    if (!(c = em_calloc(1, sizeof *c)))
        return NULL;
    c->id = id;
    c->parts = parts;
    c->prim = em_calloc(parts, sizeof *c->prim);
    c->held = em_calloc(parts, 1);
    if (!c->prim || !c->held) {
        em_free(c->prim);
        em_free(c->held);
        em_free(c);
        return NULL;
    }
    c->next = k->caches;            /* newest first: a recreated cache's shadows the old */
    k->caches = c;
    return c;
}

static int peer_find(cl_take *k, cl_meta_uuid id)
{
    for (uint32_t i = 0; i < k->npeers; i++)
        if (cl_meta_uuid_eq(k->peers[i].id, id))
            return (int)i;
    return -1;
}

/* peer_get: id's entry, made (or one without state reused); -1 when the
 * table is full - the partition is then not held (as before this module). */
static int peer_get(cl_take *k, cl_meta_uuid id)
{
    int i = peer_find(k, id);
    if (i >= 0)
        return i;
    if (k->npeers < TK_PEERS)
        i = (int)k->npeers++;
    else
        for (uint32_t j = 0; j < TK_PEERS && i < 0; j++)
            if (!k->peers[j].need && !k->peers[j].ask)
                i = (int)j;
    if (i >= 0)
        k->peers[i] = (tk_peer){ .id = id };
    return i;
}

/* recount: holding, and the needs no held partition refers to any more. */
static void recount(cl_take *k)
{
    uint32_t n = 0;
    uint8_t used[TK_PEERS] = { 0 };
    for (tk_cache *c = k->caches; c; c = c->next)
        for (uint32_t p = 0; p < c->parts; p++)
            if (c->held[p]) {
                n++;
                used[c->held[p] - 1] = 1;
            }
    for (uint32_t i = 0; i < k->npeers; i++)
        if (!used[i])
            k->peers[i].need = 0;
    atomic_store_explicit(&k->holding, n, memory_order_release);
}

/* ---- looking at a topology ---------------------------------------------------- */

typedef struct look_ctx { cl_take *k; cl_topo *t; uint64_t index; } look_ctx;

static void look_cache(void *arg, st_cache *sc)
{
    look_ctx *x = arg;
    cl_take *k = x->k;
    cl_topo *t = x->t;
    const st_cache_config *cfg = st_cache_cfg(sc);
    if (cfg->cache_mode == 0)
        return;                     /* LOCAL: no primary elsewhere */
    int32_t id = st_cache_id(sc);
    uint32_t parts = cfg->partitions ? cfg->partitions : 1024;
    tk_cache *c = cache_get(k, id, parts);
    if (!c)
        return;                     /* out of memory: not held, as before */
    cl_plan_group g = cl_plan_group_of(cfg, id, parts);
    for (uint32_t p = 0; p < parts; p++) {
        uint32_t idx[1];
        uint32_t n = t->n > 1 && t->self >= 0 ? cl_plan_owners(t, &g, p, idx, 1) : 0;
        cl_meta_uuid now = n ? t->m[idx[0]].id : none, was = c->prim[p];
        c->prim[p] = now;
        uint8_t h = c->held[p];
        int mine = n && (int)idx[0] == t->self;
        if (!mine) {
            h = 0;
        } else if (!cl_meta_uuid_eq(was, none) && !cl_meta_uuid_eq(was, now) && in_topo(t, was)) {
            /* It moved here from a member that is still one. */
            int pi = peer_get(k, was);
            h = pi < 0 ? 0 : (uint8_t)(pi + 1);
            if (pi >= 0) {
                if (k->peers[pi].need < x->index) {
                    k->peers[pi].need = x->index;
                    k->peers[pi].asked_ms = 0;
                }
                k->st_held++;
            }
        } else if (h && !in_topo(t, k->peers[h - 1].id)) {
            h = 0;                  /* the old primary left: failed, its lease is over */
        }
        c->held[p] = h;
    }
}

static void send_asks(cl_take *k, int all);
static void try_answer(cl_take *k, uint32_t wait_ms);

/* look: this node's current topology, once per index. */
static void look(cl_take *k)
{
    cl_topo *t = cl_node_topo_acquire(k->cfg.node);
    uint64_t index = cl_topo_index(t);
    pthread_mutex_lock(&k->mu);
    if (index > atomic_load_explicit(&k->seen, memory_order_relaxed)) {
        look_ctx x = { k, t, index };
        st_cache_each(k->cfg.store, look_cache, &x);
        recount(k);
        atomic_store_explicit(&k->seen, index, memory_order_release);
    }
    pthread_mutex_unlock(&k->mu);
    cl_node_topo_release(t);
}

void cl_take_topology(cl_take *k)
{
    if (!k)
        return;
    look(k);
    send_asks(k, 0);
    try_answer(k, ANSWER_WAIT_MS);
}

int cl_take_held(cl_take *k, const cl_topo *t, int32_t cache, uint32_t part)
{
    if (!k)
        return 0;
    if (cl_topo_index(t) > atomic_load_explicit(&k->seen, memory_order_acquire))
        look(k);                    /* published, not looked at yet: look now */
    return cl_take_holds(k, cache, part);
}

int cl_take_holds(cl_take *k, int32_t cache, uint32_t part)
{
    if (!k || !atomic_load_explicit(&k->holding, memory_order_acquire))
        return 0;
    pthread_mutex_lock(&k->mu);
    tk_cache *c = cache_find(k, cache, 0);
    int h = c && part < c->parts && c->held[part];
    pthread_mutex_unlock(&k->mu);
    return h;
}

int cl_take_from(cl_take *k, int32_t cache, uint32_t part, cl_meta_uuid from)
{
    if (!k || !atomic_load_explicit(&k->holding, memory_order_acquire))
        return 0;
    pthread_mutex_lock(&k->mu);
    tk_cache *c = cache_find(k, cache, 0);
    int h = c && part < c->parts && c->held[part] &&
            cl_meta_uuid_eq(k->peers[c->held[part] - 1].id, from);
    pthread_mutex_unlock(&k->mu);
    return h;
}

/* ---- asking and answering --------------------------------------------------- */

/* send_asks asks every peer this node waits for, those never asked (all:
 * and those asked ASK_MS ago). */
static void send_asks(cl_take *k, int all)
{
    struct { cl_meta_uuid id; uint64_t need; } q[TK_PEERS];
    uint32_t n = 0;
    uint64_t now = em_now_ms();
    pthread_mutex_lock(&k->mu);
    for (uint32_t i = 0; i < k->npeers; i++) {
        tk_peer *p = &k->peers[i];
        if (p->need && (!p->asked_ms || (all && now - p->asked_ms >= ASK_MS))) {
            p->asked_ms = now ? now : 1;
            q[n].id = p->id;
            q[n++].need = p->need;
        }
    }
    pthread_mutex_unlock(&k->mu);
    for (uint32_t i = 0; i < n; i++) {
        uint8_t b[8];
        em_st64(b, q[i].need);
        (void)cl_node_send(k->cfg.node, q[i].id, CL_NET_MSG_REPL_TAKEOVER, b, sizeof b);
    }
}

/* try_answer answers the peers that asked, once this node's topology is
 * at their index and no request holds an older one (waiting for that up to
 * wait_ms); what cannot be answered now is on the next tick. */
static void try_answer(cl_take *k, uint32_t wait_ms)
{
    struct { cl_meta_uuid id; uint64_t ask; } q[TK_PEERS];
    uint32_t n = 0;
    pthread_mutex_lock(&k->mu);
    for (uint32_t i = 0; i < k->npeers; i++)
        if (k->peers[i].ask) {
            q[n].id = k->peers[i].id;
            q[n++].ask = k->peers[i].ask;
        }
    pthread_mutex_unlock(&k->mu);
    if (!n)
        return;
    cl_topo *t = cl_node_topo_acquire(k->cfg.node);
    uint64_t index = cl_topo_index(t);
    cl_node_topo_release(t);
    if (cl_node_release_wait(k->cfg.node, NULL, wait_ms) != 0)
        return;
    for (uint32_t i = 0; i < n; i++) {
        if (index < q[i].ask)
            continue;               /* not there yet: its topology comes */
        uint8_t b[8];
        em_st64(b, q[i].ask);
        int rc = k->cfg.send_after(k->cfg.arg, q[i].id, CL_NET_MSG_REPL_TAKEN, b, sizeof b);
        if (rc == EM_BUSY)
            continue;
        pthread_mutex_lock(&k->mu);
        int pi = peer_find(k, q[i].id);
        if (pi >= 0 && k->peers[pi].ask == q[i].ask)
            k->peers[pi].ask = 0;   /* (lost with its link: the peer asks again) */
        k->st_answered += rc == 0;  /* answers sent, not attempts */
        pthread_mutex_unlock(&k->mu);
    }
}

void cl_take_on_frame(cl_take *k, cl_meta_uuid from, uint16_t type, const uint8_t *p,
                      size_t n)
{
    if (!k || n < 8)
        return;
    uint64_t index = em_ld64(p);
    if (type == CL_NET_MSG_REPL_TAKEOVER) {
        pthread_mutex_lock(&k->mu);
        int pi = peer_get(k, from);
        if (pi >= 0 && index > k->peers[pi].ask)
            k->peers[pi].ask = index;
        pthread_mutex_unlock(&k->mu);
        try_answer(k, 0);
        return;
    }
    if (type != CL_NET_MSG_REPL_TAKEN)
        return;
    pthread_mutex_lock(&k->mu);
    int pi = peer_find(k, from);
    if (pi >= 0 && k->peers[pi].need && index >= k->peers[pi].need) {
        for (tk_cache *c = k->caches; c; c = c->next)
            for (uint32_t q = 0; q < c->parts; q++)
                if (c->held[q] == pi + 1)
                    c->held[q] = 0;
        k->st_taken++;
        recount(k);
    }
    pthread_mutex_unlock(&k->mu);
}

void cl_take_tick(cl_take *k)
{
    if (!k)
        return;
    look(k);                        /* a publication this module missed (started after it) */
    send_asks(k, 1);
    try_answer(k, 0);
}

/* ---- life ------------------------------------------------------------------ */

int cl_take_new(cl_take **out, const cl_take_cfg *cfg)
{
    cl_take *k = em_calloc(1, sizeof *k);
    if (!k)
        return EM_NOMEM;
    k->cfg = *cfg;
    pthread_mutex_init(&k->mu, NULL);
    look(k);
    *out = k;
    return 0;
}

void cl_take_free(cl_take *k)
{
    if (!k)
        return;
    while (k->caches) {
        tk_cache *c = k->caches;
        k->caches = c->next;
        em_free(c->prim);
        em_free(c->held);
        em_free(c);
    }
    pthread_mutex_destroy(&k->mu);
    em_free(k);
}

void cl_take_stats_get(cl_take *k, cl_take_stats *s)
{
    memset(s, 0, sizeof *s);
    if (!k)
        return;
    pthread_mutex_lock(&k->mu);
    s->held = k->st_held;
    s->taken = k->st_taken;
    s->answered = k->st_answered;
    pthread_mutex_unlock(&k->mu);
    s->holding = atomic_load(&k->holding);
}
