/* cl_rebal.c - rebalancing (protocol and rules in cl_rebal.h).
 *
 * One thread per node: it starts and times out this node's loads, serves
 * the demands of others (paging a scan cursor into batches), drops
 * partitions this node no longer holds a copy of, and, on the coordinator,
 * turns loaded copies into owners through the metadata group.  The
 * transport thread files demands and DONE reports, applies SUPPLY batches
 * and records the live stream's removals (cl_rebal_on_apply); both sides
 * meet under mu.
 *
 * Why a supplier needs no partition release before its snapshot: the
 * primary's write observer reads the topology under the partition's lock
 * when it streams a write, and the snapshot is copied under the same lock
 * after the supplier's topology has the demander MOVING, so a write ordered
 * after the copy reads that topology (or a later one) and streams to it.
 */
#include "cluster/cl_rebal.h"

#include <pthread.h>
#include <stdatomic.h>
#include <string.h>
#include <time.h>

#include "cluster/cl_meta_fsm.h"
#include "cluster/cl_net.h"
#include "util/clock.h"
#include "util/err.h"
#include "util/hash.h"
#include "util/log.h"
#include "util/mem.h"

#define BATCH_DEFAULT   (512u << 10)
#define MAX_LOADS       4096        /* partitions loading here at once */
#define IX_CAP          (2 * MAX_LOADS) /* the loads' index: a power of two, half full at most */
#define MAX_QUEUE       4096        /* demands / reports waiting */
#define RETRY_MS        2000        /* a demand unanswered this long goes again */
#define DONE_EVERY_MS   300         /* a loaded copy reports until it owns */
#define MAX_REMOVED     (1u << 20)  /* removed keys remembered per load */
#define MAX_OWN         256
#define MAX_UP          256         /* members whose links the rebalancer tracks */
#define SUP_HDR         25    /* ... | u32 n | u64 the supplier's counter at its snapshot */
#define F_LAST          1
#define F_AGAIN         2

enum { L_DEMANDING = 1, L_LOADED = 2 };

typedef struct load {
    int32_t      grp;
    uint32_t     part;
    cl_meta_uuid supplier;
    uint32_t     seq;           /* the SUPPLY expected next */
    int          state;
    uint64_t     sent_ms;       /* last DEMAND (or DONE) sent */
    uint64_t     gen;           /* the kick it was last confirmed in */
    em_buf       keys;          /* removed keys: u32 len | bytes, back to back */
    uint32_t    *tab;           /* open addressing: offset + 1 into keys */
    uint32_t     cap, cnt;
} load;

typedef struct demand { cl_meta_uuid from; int32_t grp; uint32_t part, seq; } demand;

typedef struct send {
    cl_meta_uuid to;
    int32_t      grp;
    uint32_t     part, seq;
    uint64_t     cntr;          /* the partition's counter when the snapshot began */
    st_scan     *sc;
    struct send *next;
} send;

struct cl_rebal {
    cl_rebal_cfg cfg;
    pthread_t    th;
    int          started;
    pthread_mutex_t mu;
    pthread_cond_t  cv;
    int          stop, kicked;
    uint64_t     gen;
    load        *loads;
    uint32_t     nloads;
    /* ix: open addressing over (group, partition), load index + 1; every
     * partition scan and every live update looks a load up, so a linear
     * search (4096 loads x every partition of every cache) held mu, and
     * with it the transport thread, for seconds.  Rebuilt after drops. */
    uint32_t     ix[IX_CAP];
    int          ix_stale;
    demand       dq[MAX_QUEUE];
    uint32_t     ndq;
    demand       done_q[MAX_QUEUE];   /* coordinator: REBAL_DONE reports */
    uint32_t     ndone;
    send        *sends;             /* rebalancing thread only */
    /* Frames decided under mu go out after it is released (flush): a send
     * enters the node, and a thread inside the node (the metadata thread
     * publishing a topology, the transport delivering a frame) may be
     * waiting for mu - sending under it would order the two locks both ways. */
    /* Frames decided under mu, sent after it: room for a demand per load
     * and the reports beside them (a join makes thousands of loads at once;
     * a queue of 256 dropped the rest until their 2 s retry). */
    struct outq { cl_meta_uuid to; uint16_t type; uint8_t n; uint8_t b[12]; } oq[MAX_LOADS + 256];
    uint32_t     noq;
    cl_meta_uuid up[MAX_UP];    /* members with a link up (links_refresh) */
    uint32_t     nup;
    em_buf       out;               /* rebalancing thread: a SUPPLY being built */
    cl_rebal_stats st;
};

static void lock(cl_rebal *r) { pthread_mutex_lock(&r->mu); }
static void unlock(cl_rebal *r) { pthread_mutex_unlock(&r->mu); }

/* ---- removed keys of a load ---- */

static uint32_t key_hash(const uint8_t *k, size_t n) { return em_crc32c(0x52454241u, k, n); }

static int removed_has(const load *l, const uint8_t *k, uint32_t n)
{
    if (!l->cap)
        return 0;
    for (uint32_t i = key_hash(k, n) & (l->cap - 1);; i = (i + 1) & (l->cap - 1)) {
        uint32_t at = l->tab[i];
        if (!at)
            return 0;
        const uint8_t *e = l->keys.p + at - 1;
        if (em_ld32(e) == n && memcmp(e + 4, k, n) == 0)
            return 1;
    }
}

static int removed_add(load *l, const uint8_t *k, uint32_t n)
{
    if (removed_has(l, k, n))
        return 0;
    if (l->cnt >= MAX_REMOVED || l->keys.len + 4 + n > UINT32_MAX - 1)
        return EM_LIMIT;
    if ((l->cnt + 1) * 2 > l->cap) {
        uint32_t cap = l->cap ? l->cap * 2 : 256;
        uint32_t *t = em_calloc(cap, sizeof *t);
        if (!t)
            return EM_NOMEM;
        for (uint32_t i = 0; i < l->cap; i++)
            if (l->tab[i]) {
                const uint8_t *e = l->keys.p + l->tab[i] - 1;
                uint32_t j = key_hash(e + 4, em_ld32(e)) & (cap - 1);
                while (t[j])
                    j = (j + 1) & (cap - 1);
                t[j] = l->tab[i];
            }
        em_free(l->tab);
        l->tab = t;
        l->cap = cap;
    }
    uint32_t at = (uint32_t)l->keys.len + 1;
    uint8_t h[4];
    em_st32(h, n);
    if (em_buf_append(&l->keys, h, 4) || em_buf_append(&l->keys, k, n))
        return EM_NOMEM;
    uint32_t j = key_hash(k, n) & (l->cap - 1);
    while (l->tab[j])
        j = (j + 1) & (l->cap - 1);
    l->tab[j] = at;
    l->cnt++;
    return 0;
}

static void removed_reset(load *l)
{
    em_buf_reset(&l->keys);
    if (l->cap)
        memset(l->tab, 0, sizeof *l->tab * l->cap);
    l->cnt = 0;
}

static uint32_t ix_slot(int32_t grp, uint32_t part)
{
    return ((uint32_t)grp * 0x9E3779B1u ^ (part + 1) * 0x85EBCA77u) & (IX_CAP - 1);
}

static void ix_add(cl_rebal *r, uint32_t i)
{
    uint32_t h = ix_slot(r->loads[i].grp, r->loads[i].part);
    while (r->ix[h])
        h = (h + 1) & (IX_CAP - 1);
    r->ix[h] = i + 1;
}

static load *load_find(cl_rebal *r, int32_t grp, uint32_t part)
{
    if (r->ix_stale) {
        memset(r->ix, 0, sizeof r->ix);
        for (uint32_t i = 0; i < r->nloads; i++)
            ix_add(r, i);
        r->ix_stale = 0;
    }
    for (uint32_t h = ix_slot(grp, part); r->ix[h]; h = (h + 1) & (IX_CAP - 1)) {
        load *l = &r->loads[r->ix[h] - 1];
        if (l->grp == grp && l->part == part)
            return l;
    }
    return NULL;
}

/* load_new: a fresh load of (grp, part), which load_find did not find. */
static load *load_new(cl_rebal *r, int32_t grp, uint32_t part)
{
    if (r->nloads >= MAX_LOADS)
        return NULL;
    load *l = &r->loads[r->nloads];
    memset(l, 0, sizeof *l);
    l->grp = grp;
    l->part = part;
    if (!r->ix_stale)
        ix_add(r, r->nloads);
    r->nloads++;
    return l;
}

static void load_drop(cl_rebal *r, load *l)
{
    em_buf_free(&l->keys);
    em_free(l->tab);
    *l = r->loads[--r->nloads];
    r->ix_stale = 1;
}

/* ---- messages ---- */

/* queue: a frame to send once mu is released (under mu).  A full queue
 * drops it: the sender's timer sends it again. */
static void queue(cl_rebal *r, cl_meta_uuid to, uint16_t type, const uint8_t *b, uint8_t n)
{
    if (r->noq >= sizeof r->oq / sizeof r->oq[0])
        return;
    struct outq *q = &r->oq[r->noq++];
    q->to = to;
    q->type = type;
    q->n = n;
    memcpy(q->b, b, n);
}

/* flush sends what was queued (not under mu). */
static void flush(cl_rebal *r)
{
    struct outq q[256];
    for (;;) {
        lock(r);
        uint32_t n = r->noq < 256 ? r->noq : 256;
        memcpy(q, r->oq, sizeof q[0] * n);
        memmove(r->oq, r->oq + n, sizeof q[0] * (r->noq - n));
        r->noq -= n;
        unlock(r);
        if (!n)
            return;
        for (uint32_t i = 0; i < n; i++)
            (void)cl_node_send(r->cfg.node, q[i].to, q[i].type, q[i].b, q[i].n);
    }
}

static void send_demand(cl_rebal *r, load *l)
{
    uint8_t b[12];
    em_st32(b, (uint32_t)l->grp);
    em_st32(b + 4, l->part);
    em_st32(b + 8, l->seq);
    l->sent_ms = em_now_ms();
    queue(r, l->supplier, CL_NET_MSG_REBAL_DEMAND, b, sizeof b);
}

/* demand_when_up: send_demand once this node has a link to the supplier;
 * without one (a joined node's mesh is still forming) the frame would be
 * dropped and wait out RETRY_MS, so the load asks again 100 ms later.
 * r->up is the rebalancer thread's view of the links (refreshed before it
 * takes mu: cl_node_link_up takes the node's lock). */
static void demand_when_up(cl_rebal *r, load *l)
{
    for (uint32_t i = 0; i < r->nup; i++)
        if (cl_meta_uuid_eq(r->up[i], l->supplier)) {
            send_demand(r, l);
            return;
        }
    l->sent_ms = em_now_ms() - RETRY_MS + 100;
}

/* links_refresh fills r->up with the members this node has a link to (not
 * under mu). */
static void links_refresh(cl_rebal *r)
{
    cl_meta_uuid up[MAX_UP];
    uint32_t n = 0;
    cl_topo *t = cl_node_topo_acquire(r->cfg.node);
    for (uint32_t i = 0; i < t->n && n < MAX_UP; i++)
        if ((int)i != t->self && cl_node_link_up(r->cfg.node, t->m[i].id))
            up[n++] = t->m[i].id;
    cl_node_topo_release(t);
    lock(r);
    memcpy(r->up, up, sizeof up[0] * n);
    r->nup = n;
    unlock(r);
}

static void send_done(cl_rebal *r, load *l, cl_meta_uuid leader)
{
    uint8_t b[8];
    em_st32(b, (uint32_t)l->grp);
    em_st32(b + 4, l->part);
    l->sent_ms = em_now_ms();
    queue(r, leader, CL_NET_MSG_REBAL_DONE, b, sizeof b);
}

/* apply_supply applies one SUPPLY batch to load l (checked first). */
static int apply_supply(cl_rebal *r, load *l, const uint8_t *p, size_t n, uint32_t cnt)
{
    size_t off = 0;
    for (uint32_t i = 0; i < cnt; i++) {
        if (n - off < 4)
            return EM_TRUNCATED;
        uint32_t kl = em_ld32(p + off);
        if (kl == 0 || n - off - 4 < (size_t)kl + 4)
            return EM_TRUNCATED;
        const uint8_t *k = p + off + 4;
        uint32_t vl = em_ld32(k + kl);
        if (n - off - 8 - kl < (size_t)vl + 8)
            return EM_TRUNCATED;
        const uint8_t *v = k + kl + 4;
        int64_t exp = (int64_t)em_ld64(v + vl);
        off += 16u + kl + vl;
        if (removed_has(l, k, kl))
            continue;               /* the live stream removed it meanwhile */
        st_update u = {.kind = ST_UPD_PUT, .cache_id = l->grp, .partition = l->part,
                       .key = k, .klen = kl, .val = v, .vlen = vl, .expire_at_ms = exp};
        int done = 0, rc = st_apply_absent(r->cfg.store, &u, &done);
        if (rc && rc != EM_NOCACHE)
            return rc;
        r->st.entries_in += (uint64_t)done;
    }
    return off == n ? 0 : EM_TRAILING;
}

static int on_supply(cl_rebal *r, cl_meta_uuid from, const uint8_t *p, size_t n)
{
    if (n < SUP_HDR)
        return EM_TRUNCATED;
    int32_t grp = (int32_t)em_ld32(p);
    uint32_t part = em_ld32(p + 4), seq = em_ld32(p + 8), cnt = em_ld32(p + 13);
    uint8_t flags = p[12];
    if (flags & ~(F_LAST | F_AGAIN))
        return EM_PROTO;
    cl_meta_uuid lid;
    int have_lid = cl_node_leader(r->cfg.node, &lid) == 0;
    lock(r);
    load *l = load_find(r, grp, part);
    int rc = 0;
    if (l && l->state == L_DEMANDING && cl_meta_uuid_eq(l->supplier, from) && l->seq == seq) {
        if (flags & F_AGAIN) {
            l->seq = 0;             /* not ready there, or it started over: again later */
            l->sent_ms = em_now_ms() - RETRY_MS + 100;
        } else {
            if (!(flags & F_LAST)) {
                l->seq = seq + 1;
                send_demand(r, l);  /* the next batch travels while this one applies */
            }
            rc = apply_supply(r, l, p + SUP_HDR, n - SUP_HDR, cnt);
            r->st.batches_in++;
            r->st.bytes_in += n;
            if (!rc && (flags & F_LAST)) {
                /* The copy is whole: it takes the supplier's counter (the
                 * live stream raises it past that from here). */
                st_cache *c = st_cache_find(r->cfg.store, grp);
                if (c)
                    (void)st_part_raise(c, part, em_ld64(p + 17));
                l->state = L_LOADED;
                r->st.loaded++;
                removed_reset(l);
                if (have_lid)
                    send_done(r, l, lid);
            }
            if (rc && rc != EM_NOMEM) {
                unlock(r);
                flush(r);
                return rc;          /* a malformed batch: the link closes */
            }
            if (rc) {
                l->seq = 0;         /* out of memory: start over later */
                l->sent_ms = em_now_ms();
            }
        }
    }
    unlock(r);
    flush(r);
    return 0;
}

int cl_rebal_on_frame(cl_rebal *r, cl_meta_uuid from, uint16_t type, const uint8_t *p, size_t n)
{
    switch (type) {
    case CL_NET_MSG_REBAL_DEMAND:
    case CL_NET_MSG_REBAL_DONE: {
        size_t want = type == CL_NET_MSG_REBAL_DEMAND ? 12 : 8;
        if (n != want)
            return EM_BADLEN;
        demand d = { from, (int32_t)em_ld32(p), em_ld32(p + 4),
                     type == CL_NET_MSG_REBAL_DEMAND ? em_ld32(p + 8) : 0 };
        lock(r);
        if (type == CL_NET_MSG_REBAL_DEMAND && r->ndq < MAX_QUEUE)
            r->dq[r->ndq++] = d;
        else if (type == CL_NET_MSG_REBAL_DONE && r->ndone < MAX_QUEUE)
            r->done_q[r->ndone++] = d;
        pthread_cond_broadcast(&r->cv);
        unlock(r);
        return 0;
    }
    case CL_NET_MSG_REBAL_SUPPLY:
        return on_supply(r, from, p, n);
    default:
        return 0;
    }
}

void cl_rebal_on_apply(void *arg, const st_update *u)
{
    cl_rebal *r = arg;
    if (u->kind != ST_UPD_REMOVE && u->kind != ST_UPD_CLEAR)
        return;
    lock(r);
    load *l = load_find(r, u->cache_id, u->partition);
    if (l && l->state == L_DEMANDING) {
        /* A CLEAR (or a removal past the bound) while loading: what the
         * supplier sends next may predate it, so the load starts over. */
        if (u->kind == ST_UPD_CLEAR || removed_add(l, u->key, u->klen)) {
            removed_reset(l);
            l->seq = 0;
            send_demand(r, l);
        }
    }
    unlock(r);
    flush(r);
}

/* ---- the supplier ---- */

typedef struct batch_ctx { em_buf *b; uint32_t n; int err; } batch_ctx;

static int add_entry(void *arg, const uint8_t *k, size_t kl, const uint8_t *v, size_t vl,
                     int64_t exp)
{
    batch_ctx *c = arg;
    uint8_t h[8];
    em_st32(h, (uint32_t)kl);
    int rc = em_buf_append(c->b, h, 4) || em_buf_append(c->b, k, kl);
    em_st32(h, (uint32_t)vl);
    rc = rc || em_buf_append(c->b, h, 4) || em_buf_append(c->b, v, vl);
    em_st64(h, (uint64_t)exp);
    rc = rc || em_buf_append(c->b, h, 8);
    if (rc)
        c->err = EM_NOMEM;
    else
        c->n++;
    return c->err;
}

static void supply_reply(cl_rebal *r, const demand *d, uint8_t flags)
{
    uint8_t b[SUP_HDR];
    em_st32(b, (uint32_t)d->grp);
    em_st32(b + 4, d->part);
    em_st32(b + 8, d->seq);
    b[12] = flags;
    em_st32(b + 13, 0);
    em_st64(b + 17, 0);
    (void)cl_node_send(r->cfg.node, d->from, CL_NET_MSG_REBAL_SUPPLY, b, sizeof b);
}

static void send_close(send *s)
{
    if (s->sc)
        st_scan_close(s->sc);
    em_free(s);
}

static void serve(cl_rebal *r, const demand *d)
{
    send **pp = &r->sends, *s = NULL;
    for (; *pp; pp = &(*pp)->next)
        if (cl_meta_uuid_eq((*pp)->to, d->from) && (*pp)->grp == d->grp && (*pp)->part == d->part) {
            s = *pp;
            break;
        }
    st_cache *c = st_cache_find(r->cfg.store, d->grp);
    if (d->seq == 0) {
        if (s) {
            *pp = s->next;
            send_close(s);
            s = NULL;
        }
        /* Only once this node's topology has the demander loading the
         * partition: every write after the snapshot then streams to it. */
        cl_topo *t = cl_node_topo_acquire(r->cfg.node);
        uint32_t mv[MAX_OWN], own[1];
        int ok = c && t->self >= 0;
        uint32_t parts = c ? st_cache_parts(c) : 0;
        if (ok) {
            uint32_t nm = cl_topo_moving(t, d->grp, parts, d->part, mv, MAX_OWN);
            ok = 0;
            for (uint32_t i = 0; i < nm; i++)
                ok |= cl_meta_uuid_eq(t->m[mv[i]].id, d->from);
            ok = ok && cl_topo_owners(t, d->grp, parts, 0, 0, d->part, own, 1) == 1 &&
                 (int)own[0] == t->self;
        }
        cl_node_topo_release(t);
        if (!ok || !(s = em_calloc(1, sizeof *s)) || st_scan_open(c, (int32_t)d->part, &s->sc)) {
            if (s)
                send_close(s);
            supply_reply(r, d, F_AGAIN);
            return;
        }
        uint64_t size;
        (void)st_part_info(c, d->part, &s->cntr, &size);
        s->to = d->from;
        s->grp = d->grp;
        s->part = d->part;
        s->next = r->sends;
        r->sends = s;
    } else if (!s || s->seq != d->seq || !c) {
        supply_reply(r, d, F_AGAIN);    /* a stream this node lost: start over */
        return;
    }
    em_buf *b = &r->out;
    em_buf_reset(b);
    uint8_t h[SUP_HDR] = { 0 };
    em_st32(h, (uint32_t)d->grp);
    em_st32(h + 4, d->part);
    em_st32(h + 8, d->seq);
    batch_ctx bc = { b, 0, 0 };
    int more = 1, rc = em_buf_append(b, h, sizeof h);
    uint32_t limit = r->cfg.batch_bytes ? r->cfg.batch_bytes : BATCH_DEFAULT;
    while (!rc && more && b->len < limit && !bc.err)
        rc = st_scan_next_page_exp(s->sc, 64, add_entry, &bc, &more);
    if (rc || bc.err) {
        supply_reply(r, d, F_AGAIN);
        return;
    }
    b->p[12] = more ? 0 : F_LAST;
    em_st32(b->p + 13, bc.n);
    em_st64(b->p + 17, s->cntr);
    (void)cl_node_send(r->cfg.node, d->from, CL_NET_MSG_REBAL_SUPPLY, b->p, b->len);
    lock(r);                        /* serve runs outside mu; the stats are read under it */
    r->st.batches_out++;
    r->st.entries_out += bc.n;
    unlock(r);
    s->seq = d->seq + 1;
    if (!more) {
        for (pp = &r->sends; *pp; pp = &(*pp)->next)
            if (*pp == s) {
                *pp = s->next;
                break;
            }
        send_close(s);
    }
    if (r->cfg.throttle_ms) {
        struct timespec ts = { r->cfg.throttle_ms / 1000, (long)(r->cfg.throttle_ms % 1000) * 1000000L };
        nanosleep(&ts, NULL);
    }
}

/* ---- this node's loads and evictions ---- */

/* evict: (i32 group, u32 partition) pairs the scan found to clear, cleared
 * after mu is released (clearing a large partition under it would hold up
 * the transport thread, which takes mu for every live update). */
typedef struct scan_ctx { cl_rebal *r; cl_topo *t; uint64_t gen; em_buf evict; } scan_ctx;

static int in_list(const uint32_t *a, uint32_t n, int self)
{
    for (uint32_t i = 0; i < n; i++)
        if ((int)a[i] == self)
            return 1;
    return 0;
}

static void scan_cache(void *arg, st_cache *c)
{
    scan_ctx *x = arg;
    cl_rebal *r = x->r;
    cl_topo *t = x->t;
    int32_t grp = st_cache_id(c);
    uint32_t parts = st_cache_parts(c);
    if (st_cache_destroyed(c) || !cl_topo_has_owners(t, grp, parts))
        return;
    int any_moving = cl_topo_moving_count(t, grp) != 0;
    uint32_t own[MAX_OWN], mv[MAX_OWN];
    for (uint32_t part = 0; part < parts; part++) {
        uint32_t no = cl_topo_owners(t, grp, parts, 0, 0, part, own, MAX_OWN);
        uint32_t nm = any_moving ? cl_topo_moving(t, grp, parts, part, mv, MAX_OWN) : 0;
        int owner = in_list(own, no, t->self), moving = in_list(mv, nm, t->self);
        load *l = load_find(r, grp, part);
        if (moving && no) {
            if (!l && (l = load_new(r, grp, part)) != NULL) {
                l->supplier = t->m[own[0]].id;
                l->state = L_DEMANDING;
                demand_when_up(r, l);
            } else if (l && !cl_meta_uuid_eq(l->supplier, t->m[own[0]].id) &&
                       l->state == L_DEMANDING) {
                l->supplier = t->m[own[0]].id;      /* the primary changed: start over */
                l->seq = 0;
                removed_reset(l);
                demand_when_up(r, l);
            }
            if (l)
                l->gen = x->gen;
        } else if (!owner && !moving && !cl_topo_part_lost(t, grp, part)) {
            uint64_t cntr, size;
            if (st_part_info(c, part, &cntr, &size) == 0 && size) {
                /* No copy of this partition is this node's any more. */
                uint8_t e[8];
                em_st32(e, (uint32_t)grp);
                em_st32(e + 4, part);
                (void)em_buf_append(&x->evict, e, sizeof e);
            }
        }
    }
}

/* evict clears the partitions the scan listed (not under mu). */
static void evict(cl_rebal *r, const em_buf *ev)
{
    uint64_t n = 0;
    for (size_t at = 0; at + 8 <= ev->len; at += 8) {
        st_cache *c = st_cache_find(r->cfg.store, (int32_t)em_ld32(ev->p + at));
        if (c && st_clear_part(c, em_ld32(ev->p + at + 4), 0) == 0)
            n++;
    }
    if (n) {
        lock(r);
        r->st.evicted += n;
        unlock(r);
    }
}

/* coordinate turns the reported loaded copies into owners (coordinator). */
static void coordinate(cl_rebal *r, demand *q, uint32_t nq)
{
    cl_topo *t = cl_node_topo_acquire(r->cfg.node);
    em_buf e = EM_BUF_INIT;
    cl_meta_owners_enc enc;
    int rc = cl_meta_enc_owners_begin(&enc, &e, cl_topo_last_exchange(t));
    uint32_t made = 0;
    for (uint32_t i = 0; i < nq && !rc; i++) {
        st_cache *c = st_cache_find(r->cfg.store, q[i].grp);
        if (!c)
            continue;
        const st_cache_config *cfg = st_cache_cfg(c);
        uint32_t parts = st_cache_parts(c), own[MAX_OWN], mv[MAX_OWN];
        uint32_t no = cl_topo_owners(t, q[i].grp, parts, 0, 0, q[i].part, own, MAX_OWN);
        uint32_t nm = cl_topo_moving(t, q[i].grp, parts, q[i].part, mv, MAX_OWN);
        int at = -1;
        for (uint32_t k = 0; k < nm; k++)
            if (cl_meta_uuid_eq(t->m[mv[k]].id, q[i].from))
                at = (int)k;
        if (at < 0 || no == 0)
            continue;               /* not loading it (any more), or lost */
        own[no++] = mv[at];
        mv[at] = mv[--nm];
        /* Every ideal owner owns it now: the ideal order, nobody else. */
        const cl_aff_table *a = cfg->cache_mode == 1 ? NULL
                                : cl_topo_affinity(t, parts, cfg->backups > 0
                                                             ? (uint32_t)cfg->backups : 0);
        uint32_t idl[MAX_OWN], ni = 0;
        if (cfg->cache_mode == 1) {
            for (uint32_t k = 0; k < t->n && ni < MAX_OWN; k++)
                idl[ni++] = k;
        } else if (a) {
            for (; ni < a->copies; ni++)
                idl[ni] = cl_aff_owners(a, q[i].part)[ni];
        }
        int all = ni > 0;
        for (uint32_t k = 0; k < ni && all; k++)
            all = in_list(own, no, (int)idl[k]);
        if (all) {
            if (own[0] != idl[0])
                cl_meta_enc_owners_switch(&enc);   /* a new primary: clients refetch */
            memcpy(own, idl, ni * sizeof *own);
            no = ni;
            uint32_t keep = 0;
            for (uint32_t k = 0; k < nm; k++)
                if (in_list(idl, ni, (int)mv[k]))
                    mv[keep++] = mv[k];
            nm = keep;
        }
        uint64_t ord[MAX_OWN];
        for (uint32_t k = 0; k < no; k++)
            ord[k] = t->m[own[k]].order;
        for (uint32_t k = 0; k < nm; k++)
            ord[no + k] = t->m[mv[k]].order;
        /* One group per report keeps the entry valid whatever the order. */
        rc = cl_meta_enc_owners_group(&enc, q[i].grp, parts);
        if (!rc)
            rc = cl_meta_enc_owners_part(&enc, q[i].part, 0, ord, no + nm, nm);
        made++;
        if (!rc && cl_meta_enc_owners_size(&enc) > (256u << 10))
            break;
    }
    cl_node_topo_release(t);
    if (!rc && made && !(rc = cl_meta_enc_owners_end(&enc)))
        rc = cl_node_propose(r->cfg.node, e.p, e.len, 10000);
    if (!rc && made) {
        lock(r);
        r->st.owned += made;
        unlock(r);
    } else if (rc && rc != EM_NOTLEADER) {
        EM_WARN("rebalancing: committing %u loaded copies failed: %s", made, em_strerror(rc));
    }
    em_buf_free(&e);
}

static void *run(void *arg)
{
    cl_rebal *r = arg;
    pthread_setname_np(pthread_self(), "em-rebal");
    uint64_t last_scan = 0;
    demand *q = em_malloc(sizeof *q * MAX_QUEUE);
    demand *dn = em_malloc(sizeof *dn * MAX_QUEUE);
    for (;;) {
        lock(r);
        if (!r->stop && !r->kicked && !r->ndq && !r->ndone) {
            struct timespec ts;
            clock_gettime(CLOCK_REALTIME, &ts);
            ts.tv_nsec += 100 * 1000000L;
            if (ts.tv_nsec >= 1000000000L) {
                ts.tv_sec++;
                ts.tv_nsec -= 1000000000L;
            }
            pthread_cond_timedwait(&r->cv, &r->mu, &ts);
        }
        if (r->stop) {
            unlock(r);
            break;
        }
        int kicked = r->kicked;
        r->kicked = 0;
        uint32_t nq = 0, nd = 0;
        if (q && dn) {
            nq = r->ndq;
            memcpy(q, r->dq, sizeof *q * nq);
            r->ndq = 0;
            nd = r->ndone;
            memcpy(dn, r->done_q, sizeof *dn * nd);
            r->ndone = 0;
        }
        unlock(r);
        for (uint32_t i = 0; i < nq; i++)
            serve(r, &q[i]);
        if (nd && cl_node_is_leader(r->cfg.node))
            coordinate(r, dn, nd);
        uint64_t now = em_now_ms();
        links_refresh(r);
        if (kicked || now - last_scan >= 1000) {
            last_scan = now;
            cl_topo *t = cl_node_topo_acquire(r->cfg.node);
            if (t->self >= 0) {
                lock(r);
                scan_ctx x = { r, t, ++r->gen, EM_BUF_INIT };
                st_cache_each(r->cfg.store, scan_cache, &x);
                /* Loads this node is no longer asked for (it owns the
                 * partition now, or the exchange dropped the copy). */
                for (uint32_t i = 0; i < r->nloads;)
                    if (r->loads[i].gen != x.gen)
                        load_drop(r, &r->loads[i]);
                    else
                        i++;
                unlock(r);
                evict(r, &x.evict);
                em_buf_free(&x.evict);
            }
            cl_node_topo_release(t);
        }
        cl_meta_uuid lid;
        int have_lid = cl_node_leader(r->cfg.node, &lid) == 0;
        lock(r);
        uint64_t loading = 0;
        for (uint32_t i = 0; i < r->nloads; i++) {
            load *l = &r->loads[i];
            loading += l->state == L_DEMANDING;
            if (now - l->sent_ms < (l->state == L_LOADED ? DONE_EVERY_MS : RETRY_MS))
                continue;
            if (l->state == L_DEMANDING) {
                l->seq = 0;                 /* silence: start over */
                removed_reset(l);
                demand_when_up(r, l);
            } else if (have_lid) {
                send_done(r, l, lid);
            }
        }
        r->st.loading = loading;
        unlock(r);
        flush(r);
    }
    em_free(q);
    em_free(dn);
    return NULL;
}

int cl_rebal_start(cl_rebal **out, const cl_rebal_cfg *cfg)
{
    *out = NULL;
    cl_rebal *r = em_calloc(1, sizeof *r);
    if (!r)
        return EM_NOMEM;
    r->cfg = *cfg;
    r->loads = em_calloc(MAX_LOADS, sizeof *r->loads);
    if (!r->loads) {
        em_free(r);
        return EM_NOMEM;
    }
    pthread_mutex_init(&r->mu, NULL);
    pthread_cond_init(&r->cv, NULL);
    if (pthread_create(&r->th, NULL, run, r) != 0) {
        cl_rebal_stop(r);
        return EM_NOMEM;
    }
    r->started = 1;
    *out = r;
    return 0;
}

void cl_rebal_halt(cl_rebal *r)
{
    if (!r)
        return;
    lock(r);
    r->stop = 1;
    pthread_cond_broadcast(&r->cv);
    unlock(r);
    if (r->started)
        pthread_join(r->th, NULL);
    r->started = 0;
}

void cl_rebal_stop(cl_rebal *r)
{
    if (!r)
        return;
    cl_rebal_halt(r);
    while (r->nloads)
        load_drop(r, &r->loads[0]);
    em_free(r->loads);
    while (r->sends) {
        send *s = r->sends;
        r->sends = s->next;
        send_close(s);
    }
    em_buf_free(&r->out);
    pthread_cond_destroy(&r->cv);
    pthread_mutex_destroy(&r->mu);
    em_free(r);
}

void cl_rebal_kick(cl_rebal *r)
{
    lock(r);
    r->kicked = 1;
    pthread_cond_broadcast(&r->cv);
    unlock(r);
}

void cl_rebal_stats_get(cl_rebal *r, cl_rebal_stats *s)
{
    lock(r);
    *s = r->st;
    unlock(r);
}
