/* cl_pme.c - the partition map exchange driver (protocol in cl_pme.h).
 *
 * One thread per node runs the exchange's slow steps: answering a single
 * request (after the partition release wait), and on the coordinator the
 * whole exchange (collect, decide, commit, broadcast).  The transport thread
 * only files what arrives: a single request, a single message (inflated and
 * checked there, into the collecting slot of its sender), a full map.
 *
 * Threads: transport (on_frame), exchange (run), workers (reset_lost,
 * stats).  mu guards everything below it in struct cl_pme.
 */
#include "cluster/cl_pme.h"

#include <pthread.h>
#include <stdatomic.h>
#include <string.h>
#include <time.h>

#include "cluster/cl_net.h"
#include "cluster/cl_plan.h"
#include "cluster/cl_zip.h"
#include "util/clock.h"
#include "util/err.h"
#include "util/hash.h"
#include "util/log.h"
#include "util/mem.h"

#define PROPOSE_MS      10000
#define FREQ_EVERY_MS   500

typedef struct slot {
    cl_meta_uuid node;
    int          have;
    em_buf       raw;                  /* the inflated single message */
} slot;

struct cl_pme {
    cl_node   *node;
    cl_pme_cfg cfg;
    pthread_t  th;
    int        started;
    cl_zip    *zip_tx;                 /* exchange thread */
    cl_zip    *zip_rx;                 /* transport thread */
    em_buf     rx;                     /* transport thread: inflation scratch */

    pthread_mutex_t mu;
    pthread_cond_t  cv;
    int        stop, kicked;
    int        sreq;                   /* a single request to answer */
    uint64_t   sreq_exch;
    cl_meta_uuid sreq_from;
    uint64_t   coll_exch;              /* the exchange collecting singles (0: none) */
    slot      *slots;
    uint32_t   nslots;
    em_buf     map;                    /* the full map held here, encoded */
    em_buf     map_z;                  /* the same, compressed (answers PME_FREQ) */
    uint64_t   map_exch, map_hash, lost;
    uint64_t   exchanges, last_ms, bad;
};

static void lock(cl_pme *p) { pthread_mutex_lock(&p->mu); }
static void unlock(cl_pme *p) { pthread_mutex_unlock(&p->mu); }

static uint64_t exch_of(const cl_topo *t) { return t->major << 32 | t->minor; }

static uint64_t map_hash(const uint8_t *b, size_t n)
{
    /* Two CRCs over the halves' interleaving would do; one CRC-32C per
     * half, mixed, is cheap and enough to tell maps apart in tests. */
    uint32_t a = em_crc32c(0, b, n / 2), c = em_crc32c(0x9e3779b9u, b + n / 2, n - n / 2);
    return em_mix64((uint64_t)a << 32 | c);
}

/* ---- what the upper layers know ---- */

/* groups_get: the started groups, in a fresh array (*n of them). */
static cl_plan_group *groups_get(cl_pme *p, uint32_t *n)
{
    uint32_t cap = 64;
    for (;;) {
        cl_plan_group *g = em_malloc(sizeof *g * cap);
        if (!g)
            return NULL;
        uint32_t k = p->cfg.groups(p->cfg.arg, g, cap);
        if (k <= cap) {
            *n = k;
            return g;
        }
        em_free(g);
        cap = k;
    }
}


/* ---- the single message ---- */

static int build_single(cl_pme *p, cl_topo *t, uint64_t exch, em_buf *out)
{
    uint32_t ng = 0;
    cl_plan_group *g = groups_get(p, &ng);
    if (!g)
        return EM_NOMEM;
    int rc = cl_plan_single_build(t, g, ng, cl_node_id(p->node), exch, p->cfg.part_info,
                                  p->cfg.arg, out);
    em_free(g);
    return rc;
}

static void answer_sreq(cl_pme *p, uint64_t exch, cl_meta_uuid to)
{
    /* This node may not have applied the change the exchange is for yet (a
     * follower learns of a commit with the leader's next message): it does
     * not wait for it.  What it reports - its partitions' states under the
     * committed owners, and their counters - does not depend on it, once
     * the members that left are heard no more (sreq_left, when the request
     * came). */
    /* Partition release: requests mapped on the old topology finish first,
     * so the counters reported include every write they made. */
    if (cl_node_release_wait(p->node, NULL, p->cfg.release_ms))
        EM_WARN("exchange %llu: requests on an older topology still running after %u ms; "
                "reporting anyway", (unsigned long long)exch, p->cfg.release_ms);
    cl_topo *t = cl_node_topo_acquire(p->node);
    em_buf raw = EM_BUF_INIT, msg = EM_BUF_INIT;
    int rc = build_single(p, t, exch, &raw);
    cl_node_topo_release(t);
    uint8_t h[8];
    em_st64(h, exch);
    if (!rc)
        rc = em_buf_append(&msg, h, 8);
    if (!rc)
        rc = cl_zip_deflate(p->zip_tx, &msg, raw.p, raw.len);
    if (!rc)
        rc = cl_node_send(p->node, to, CL_NET_MSG_PME_SINGLE, msg.p, msg.len);
    if (rc)
        EM_WARN("exchange %llu: cannot send this node's single message: %s",
                (unsigned long long)exch, em_strerror(rc));
    em_buf_free(&raw);
    em_buf_free(&msg);
}

/* ---- frames (transport thread) ---- */

/* refuse: a malformed exchange frame is logged and counted; the caller
 * returns nonzero so the node closes that link. */
static int refuse(cl_pme *p, const char *what, const char *why)
{
    lock(p);
    p->bad++;
    unlock(p);
    EM_WARN("exchange: refused a %s (closing the link): %s", what, why);
    return EM_PROTO;
}

static int take_single(cl_pme *p, cl_meta_uuid from, const uint8_t *b, size_t n)
{
    uint64_t exch = em_ld64(b);
    lock(p);
    int want = exch == p->coll_exch && exch != 0;
    unlock(p);
    if (!want)
        return 0;                   /* late: an exchange that is over */
    char why[160] = "";
    int rc = cl_zip_inflate(p->zip_rx, b + 8, n - 8, &p->rx, why, sizeof why);
    if (rc)
        return refuse(p, "single message", why[0] ? why : em_strerror(rc));
    cl_psingle s;
    uint32_t cap = cl_psingle_peek_groups(p->rx.p, p->rx.len);
    cl_psingle_group *g = em_malloc(sizeof *g * (cap ? cap : 1));
    if (!g)
        return 0;
    s.g = g;
    rc = cl_psingle_decode(p->rx.p, p->rx.len, &s, cap);
    em_free(g);
    if (rc || s.exch_id != exch || !cl_meta_uuid_eq(s.node, from))
        return refuse(p, "single message",
                      rc ? em_strerror(rc) : "not the sender's or not this exchange's");
    lock(p);
    for (uint32_t i = 0; i < p->nslots && exch == p->coll_exch; i++)
        if (cl_meta_uuid_eq(p->slots[i].node, from) && !p->slots[i].have) {
            em_buf_reset(&p->slots[i].raw);
            if (em_buf_append(&p->slots[i].raw, p->rx.p, p->rx.len) == 0)
                p->slots[i].have = 1;
            pthread_cond_broadcast(&p->cv);
        }
    unlock(p);
    return 0;
}

/* install: a full map (encoded bytes, checked) becomes this node's. */
static void install(cl_pme *p, const uint8_t *map, size_t n, const uint8_t *z, size_t zn,
                    uint64_t exch, uint64_t lost)
{
    lock(p);
    if (exch > p->map_exch) {
        em_buf_reset(&p->map);
        em_buf_reset(&p->map_z);
        if (em_buf_append(&p->map, map, n) == 0 && em_buf_append(&p->map_z, z, zn) == 0) {
            p->map_exch = exch;
            p->map_hash = map_hash(map, n);
            p->lost = lost;
        }
    }
    unlock(p);
}

static uint64_t count_lost(const cl_pmap *m)
{
    uint64_t lost = 0;
    for (uint32_t g = 0; g < m->ngroups; g++)
        for (uint32_t part = 0; part < m->g[g].parts; part++)
            for (uint32_t i = 0; i < m->nodes; i++)
                if (cl_pmap_state(m, &m->g[g], i, part) == CL_PS_LOST) {
                    lost++;
                    break;
                }
    return lost;
}

static int take_full(cl_pme *p, const uint8_t *b, size_t n)
{
    char why[160] = "";
    int rc = cl_zip_inflate(p->zip_rx, b, n, &p->rx, why, sizeof why);
    if (rc)
        return refuse(p, "full map", why[0] ? why : em_strerror(rc));
    uint32_t cap = cl_pmap_peek_groups(p->rx.p, p->rx.len);
    cl_pmap m;
    cl_pmap_group *g = em_malloc(sizeof *g * (cap ? cap : 1));
    if (!g)
        return 0;
    m.g = g;
    rc = cl_pmap_decode(p->rx.p, p->rx.len, &m, cap);
    if (rc) {
        em_free(g);
        return refuse(p, "full map", em_strerror(rc));
    }
    uint64_t lost = count_lost(&m);
    em_free(g);
    install(p, p->rx.p, p->rx.len, b, n, m.exch_id, lost);
    return 0;
}

int cl_pme_sreq_check(const uint8_t *b, size_t n)
{
    return n >= 12 && (n - 12) % 16 == 0 && (n - 12) / 16 == em_ld32(b + 8) ? 0 : EM_BADLEN;
}

/* sreq_left: single request b names the members of exchange exch's
 * topology.  On a topology older than that here, a member this node knows
 * and the request does not name left: a replication frame it sent before
 * it died may still be on its way here, and would apply (it is still the
 * named primary here) after this node reported its counters - the copy one
 * update ahead of its report, and the exchange may make another copy with
 * the reported counter the primary, the two never brought together.  So
 * replication refuses its frames from now (cl_pme_cfg.left), on this
 * thread, which also applies them: what came before the request is in the
 * report, nothing after it. */
static void sreq_left(cl_pme *p, const uint8_t *b, size_t n)
{
    if (!p->cfg.left)
        return;
    uint64_t exch = em_ld64(b);
    uint32_t k = (uint32_t)((n - 12) / 16);
    cl_topo *t = cl_node_topo_acquire(p->node);
    if (exch_of(t) < exch)
        for (uint32_t i = 0; i < t->n; i++) {
            uint32_t j = 0;
            while (j < k && !(em_ld64(b + 12 + 16 * j) == t->m[i].id.msb &&
                              em_ld64(b + 20 + 16 * j) == t->m[i].id.lsb))
                j++;
            if (j == k)
                p->cfg.left(p->cfg.arg, t->m[i].id, exch);
        }
    cl_node_topo_release(t);
}

static int on_frame(void *arg, cl_meta_uuid from, uint16_t type, const uint8_t *b, size_t n)
{
    cl_pme *p = arg;
    switch (type) {
    case CL_NET_MSG_PME_SREQ:
        if (cl_pme_sreq_check(b, n))
            return refuse(p, "single request", "bad length");
        sreq_left(p, b, n);
        lock(p);
        p->sreq = 1;
        p->sreq_exch = em_ld64(b);
        p->sreq_from = from;
        pthread_cond_broadcast(&p->cv);
        unlock(p);
        break;
    case CL_NET_MSG_PME_SINGLE:
        if (n < 12)
            return refuse(p, "single message", "too short");
        return take_single(p, from, b, n);
    case CL_NET_MSG_PME_FULL:
        return take_full(p, b, n);
    case CL_NET_MSG_PME_FREQ:
        if (n != 8)
            return refuse(p, "map request", "bad length");
        lock(p);
        if (p->map_exch > em_ld64(b) && p->map_z.len && cl_node_is_leader(p->node))
            (void)cl_node_send(p->node, from, CL_NET_MSG_PME_FULL, p->map_z.p, p->map_z.len);
        unlock(p);
        break;
    default:
        if (p->cfg.other)
            return p->cfg.other(p->cfg.other_arg, from, type, b, n);
        break;
    }
    return 0;
}

/* ---- the coordinator ---- */

/* decide commits the exchange's decision (cl_plan_decide), then EXCH_DONE;
 * owners behind a new primary are told to catch up once it is committed.
 * An INACTIVE cluster decides nothing (as Ignite's runs no cache exchange
 * until activated): a persistent cluster restarting waits INACTIVE for its
 * baseline, and owners decided before every baseline node is back would
 * place the partitions of those missing on the others, which would then
 * be the primaries the returning copies catch up with - and empty them.
 * Nor does an exchange whose topology is no longer the newest (EM_AGAIN:
 * the newer one's exchange follows): the groups are read when it decides,
 * and may be ones its topology did not have, under a state it did not
 * have (a restarting cluster's first node puts its caches in once it has
 * gone INACTIVE). */
static int decide(cl_pme *p, cl_topo *t, const cl_plan_group *g, uint32_t ng,
                  const cl_plan_single *v, uint64_t exch)
{
    cl_topo *now = cl_node_topo_acquire(p->node);
    int moved = exch_of(now) != exch_of(t);
    cl_node_topo_release(now);
    if (moved)
        return EM_AGAIN;
    em_buf e = EM_BUF_INIT, behind = EM_BUF_INIT;
    int rc = t->state == CL_META_INACTIVE ? 0 : cl_plan_decide(t, g, ng, v, exch, &e, &behind);
    for (size_t at = 0; !rc && at + 8 <= e.len;) {
        size_t n = 8 + (size_t)em_ld32(e.p + at + 4);
        rc = cl_node_propose(p->node, e.p + at, n, PROPOSE_MS);
        at += n;
    }
    em_buf_reset(&e);
    if (!rc)
        rc = cl_meta_enc_exch(&e, exch, t->major, t->minor);
    if (!rc)
        rc = cl_node_propose(p->node, e.p, e.len, PROPOSE_MS);
    em_buf_free(&e);
    for (size_t at = 0; !rc && p->cfg.behind && at + 12 <= behind.len; at += 12)
        p->cfg.behind(p->cfg.arg, t->m[em_ld32(behind.p + at)].id,
                      (int32_t)em_ld32(behind.p + at + 4), em_ld32(behind.p + at + 8), exch);
    em_buf_free(&behind);
    return rc;
}


/* collect waits for every member's single (bounded); 0 when the topology
 * is still t's, EM_AGAIN when a newer one arrived meanwhile. */
static int collect(cl_pme *p, cl_topo *t)
{
    uint64_t end = em_now_ms() + p->cfg.collect_ms;
    lock(p);
    for (;;) {
        uint32_t have = 0;
        for (uint32_t i = 0; i < p->nslots; i++)
            have += (uint32_t)p->slots[i].have;
        if (have == p->nslots || p->stop)
            break;
        cl_topo *now = cl_node_topo_acquire(p->node);
        int newer = exch_of(now) != exch_of(t) || cl_topo_index(now) < cl_topo_index(t);
        cl_node_topo_release(now);
        if (newer) {
            unlock(p);
            return EM_AGAIN;
        }
        uint64_t left = end > em_now_ms() ? end - em_now_ms() : 0;
        if (!left) {
            EM_WARN("exchange %llu: %u of %u members answered within %u ms; deciding "
                    "without the others", (unsigned long long)exch_of(t), have, p->nslots,
                    p->cfg.collect_ms);
            break;
        }
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        uint64_t ns = (uint64_t)ts.tv_nsec + (left < 20 ? left : 20) * 1000000ull;
        ts.tv_sec += (time_t)(ns / 1000000000ull);
        ts.tv_nsec = (long)(ns % 1000000000ull);
        pthread_cond_timedwait(&p->cv, &p->mu, &ts);
    }
    unlock(p);
    return 0;
}

static void coordinate(cl_pme *p, cl_topo *t)
{
    uint64_t exch = exch_of(t), t0 = em_now_ms();
    /* Slots: one per member, this node's filled locally. */
    lock(p);
    for (uint32_t i = 0; i < p->nslots; i++)
        em_buf_free(&p->slots[i].raw);
    em_free(p->slots);
    p->slots = em_calloc(t->n, sizeof *p->slots);
    p->nslots = p->slots ? t->n : 0;
    for (uint32_t i = 0; i < p->nslots; i++)
        p->slots[i].node = t->m[i].id;
    p->coll_exch = exch;
    unlock(p);
    if (!p->nslots)
        return;
    /* The request: the exchange, and the members it is among (a member
     * that has not applied this topology yet learns who left: sreq_left). */
    em_buf req = EM_BUF_INIT;
    int qrc = em_buf_put_le64(&req, exch);
    if (!qrc)
        qrc = em_buf_put_le32(&req, t->n);
    for (uint32_t i = 0; !qrc && i < t->n; i++)
        if ((qrc = em_buf_put_le64(&req, t->m[i].id.msb)) == 0)
            qrc = em_buf_put_le64(&req, t->m[i].id.lsb);
    for (uint32_t i = 0; !qrc && i < t->n; i++)
        if ((int)i != t->self)
            (void)cl_node_send(p->node, t->m[i].id, CL_NET_MSG_PME_SREQ, req.p, req.len);
    em_buf_free(&req);
    em_buf own = EM_BUF_INIT;
    (void)cl_node_release_wait(p->node, t, p->cfg.release_ms);
    int rc = build_single(p, t, exch, &own);
    lock(p);
    if (!rc) {
        p->slots[t->self].raw = own;
        p->slots[t->self].have = 1;
    } else {
        em_buf_free(&own);
    }
    unlock(p);
    if (rc || collect(p, t))
        goto done;
    uint64_t t_coll = em_now_ms();

    /* Decode the singles (the slots are this thread's now: coll_exch stops
     * the transport from touching them once cleared). */
    lock(p);
    p->coll_exch = 0;
    unlock(p);
    uint32_t ng = 0;
    cl_plan_group *g = groups_get(p, &ng);
    cl_plan_single *v = em_calloc(t->n, sizeof *v);
    uint32_t *slot_of = em_malloc(sizeof *slot_of * t->n);
    if (!g || !v || !slot_of) {
        rc = EM_NOMEM;
    } else {
        for (uint32_t i = 0; i < t->n; i++) {
            slot_of[i] = i;
            if (!p->slots[i].have)
                continue;
            uint32_t cap = cl_psingle_peek_groups(p->slots[i].raw.p, p->slots[i].raw.len);
            v[i].s.g = em_malloc(sizeof *v[i].s.g * (cap ? cap : 1));
            v[i].ok = v[i].s.g && cl_psingle_decode(p->slots[i].raw.p, p->slots[i].raw.len,
                                                    &v[i].s, cap) == 0;
        }
        rc = decide(p, t, g, ng, v, exch);
    }
    uint64_t t_dec = em_now_ms();
    if (!rc) {
        /* The committed decision is on a newer snapshot: wait for it. */
        cl_topo *t2 = cl_node_topo_acquire(p->node);
        while (cl_topo_last_exchange(t2) < exch && !p->stop) {
            uint64_t idx = cl_topo_index(t2);
            cl_node_topo_release(t2);
            if (cl_node_topo_wait(p->node, idx, 1000)) {
                t2 = NULL;
                rc = EM_TIMEOUT;
                break;
            }
            t2 = cl_node_topo_acquire(p->node);
        }
        if (t2 && !rc && t2->n == t->n) {
            em_buf map = EM_BUF_INIT, z = EM_BUF_INIT;
            for (uint32_t i = 0; i < t2->n; i++)
                slot_of[i] = cl_meta_uuid_eq(t2->m[i].id, t->m[i].id) ? i : t->n;
            /* slot_of beyond t->n reads as "no single": v has t->n entries. */
            cl_plan_single *v2 = em_calloc(t->n + 1u, sizeof *v2);
            if (v2) {
                memcpy(v2, v, sizeof *v * t->n);
                rc = cl_plan_full_map(t2, g, ng, v2, slot_of, exch, &map);
                em_free(v2);
            } else {
                rc = EM_NOMEM;
            }
            if (!rc)
                rc = cl_zip_deflate(p->zip_tx, &z, map.p, map.len);
            if (!rc) {
                for (uint32_t i = 0; i < t2->n; i++)
                    if ((int)i != t2->self)
                        (void)cl_node_send(p->node, t2->m[i].id, CL_NET_MSG_PME_FULL, z.p, z.len);
                cl_pmap m;
                uint32_t cap = cl_pmap_peek_groups(map.p, map.len);
                m.g = em_malloc(sizeof *m.g * (cap ? cap : 1));
                uint64_t lost = m.g && cl_pmap_decode(map.p, map.len, &m, cap) == 0
                                ? count_lost(&m) : 0;
                em_free(m.g);
                install(p, map.p, map.len, z.p, z.len, exch, lost);
            }
            em_buf_free(&map);
            em_buf_free(&z);
        }
        if (t2)
            cl_node_topo_release(t2);
    }
    for (uint32_t i = 0; v && i < t->n; i++)
        em_free(v[i].s.g);
    em_free(v);
    em_free(slot_of);
    em_free(g);
    if (!rc) {
        lock(p);
        p->exchanges++;
        p->last_ms = em_now_ms() - t0;
        unlock(p);
        EM_INFO("exchange %llu (topology %llu.%u, %u members) done in %llu ms (collect %llu, "
                "commit %llu, map %llu)", (unsigned long long)exch,
                (unsigned long long)t->major, t->minor, t->n,
                (unsigned long long)(em_now_ms() - t0), (unsigned long long)(t_coll - t0),
                (unsigned long long)(t_dec - t_coll), (unsigned long long)(em_now_ms() - t_dec));
    } else if (rc != EM_NOTLEADER && rc != EM_AGAIN) {
        EM_WARN("exchange %llu failed: %s", (unsigned long long)exch, em_strerror(rc));
    }
done:
    lock(p);
    p->coll_exch = 0;
    unlock(p);
}

/* ---- the thread ---- */

static void *run(void *arg)
{
    cl_pme *p = arg;
    pthread_setname_np(pthread_self(), "em-pme");
    uint64_t last_freq = 0;
    for (;;) {
        lock(p);
        if (!p->stop && !p->kicked && !p->sreq) {
            struct timespec ts;
            clock_gettime(CLOCK_REALTIME, &ts);
            ts.tv_nsec += 200 * 1000000L;
            if (ts.tv_nsec >= 1000000000L) {
                ts.tv_sec++;
                ts.tv_nsec -= 1000000000L;
            }
            pthread_cond_timedwait(&p->cv, &p->mu, &ts);
        }
        if (p->stop) {
            unlock(p);
            break;
        }
        p->kicked = 0;
        int sreq = p->sreq;
        uint64_t sreq_exch = p->sreq_exch;
        cl_meta_uuid from = p->sreq_from;
        p->sreq = 0;
        uint64_t have = p->map_exch;
        unlock(p);
        if (sreq)
            answer_sreq(p, sreq_exch, from);
        cl_topo *t = cl_node_topo_acquire(p->node);
        int leader = cl_node_is_leader(p->node);
        if (leader && t->self >= 0 && t->n && exch_of(t) > cl_topo_last_exchange(t)) {
            /* The snapshot is taken under the decide lock: a promotion
             * committed before it is in it, none commits until EXCH_DONE. */
            cl_node_topo_release(t);
            cl_node_decide_lock(p->node);
            t = cl_node_topo_acquire(p->node);
            if (t->self >= 0 && t->n && exch_of(t) > cl_topo_last_exchange(t))
                coordinate(p, t);
            cl_node_decide_unlock(p->node);
        } else if (!leader && t->self >= 0 && have < cl_topo_last_exchange(t) &&
                   em_now_ms() - last_freq >= FREQ_EVERY_MS) {
            cl_meta_uuid lid;
            if (cl_node_leader(p->node, &lid) == 0) {
                uint8_t h[8];
                em_st64(h, have);
                (void)cl_node_send(p->node, lid, CL_NET_MSG_PME_FREQ, h, 8);
            }
            last_freq = em_now_ms();
        }
        cl_node_topo_release(t);
    }
    return NULL;
}

int cl_pme_start(cl_pme **out, cl_node *node, const cl_pme_cfg *cfg)
{
    *out = NULL;
    cl_pme *p = em_calloc(1, sizeof *p);
    if (!p)
        return EM_NOMEM;
    p->node = node;
    p->cfg = *cfg;
    if (!p->cfg.collect_ms)
        p->cfg.collect_ms = 5000;
    if (!p->cfg.release_ms)
        p->cfg.release_ms = 2000;
    pthread_mutex_init(&p->mu, NULL);
    pthread_cond_init(&p->cv, NULL);
    int rc = cl_zip_new(&p->zip_tx, CL_ZIP_LEVEL);
    if (!rc)
        rc = cl_zip_new(&p->zip_rx, CL_ZIP_LEVEL);
    if (!rc && pthread_create(&p->th, NULL, run, p) != 0)
        rc = EM_NOMEM;
    if (rc) {
        cl_pme_stop(p);
        return rc;
    }
    p->started = 1;
    cl_node_set_frame_hook(node, on_frame, p);
    *out = p;
    return 0;
}

void cl_pme_stop(cl_pme *p)
{
    if (!p)
        return;
    cl_node_set_frame_hook(p->node, NULL, NULL);
    lock(p);
    p->stop = 1;
    pthread_cond_broadcast(&p->cv);
    unlock(p);
    if (p->started)
        pthread_join(p->th, NULL);
    for (uint32_t i = 0; i < p->nslots; i++)
        em_buf_free(&p->slots[i].raw);
    em_free(p->slots);
    em_buf_free(&p->map);
    em_buf_free(&p->map_z);
    em_buf_free(&p->rx);
    cl_zip_free(p->zip_tx);
    cl_zip_free(p->zip_rx);
    pthread_cond_destroy(&p->cv);
    pthread_mutex_destroy(&p->mu);
    em_free(p);
}

void cl_pme_kick(cl_pme *p)
{
    lock(p);
    p->kicked = 1;
    pthread_cond_broadcast(&p->cv);
    unlock(p);
}

int cl_pme_reset_lost(cl_pme *p, int32_t grp, uint32_t *reset)
{
    *reset = 0;
    uint32_t ng = 0;
    cl_plan_group *g = groups_get(p, &ng);
    if (!g)
        return EM_NOMEM;
    const cl_plan_group *gr = NULL;
    for (uint32_t i = 0; i < ng; i++)
        if (g[i].grp == grp)
            gr = &g[i];
    if (!gr) {
        em_free(g);
        return EM_NOCACHE;
    }
    /* The partitions to reset are the ones lost on the leader's state: a
     * node that has not applied every exchange the leader has would leave
     * out those it does not know lost yet, and the reset would return with
     * them still refused everywhere.  A leader change while the entry
     * commits (an election on a loaded machine) is tried again: the entry
     * may have committed, and the next pass then finds fewer, or none, to
     * reset (the count is the larger of the two). */
    uint64_t end = em_now_ms() + PROPOSE_MS;
    int rc;
    for (;;) {
        uint64_t now = em_now_ms();
        uint32_t left = now < end ? (uint32_t)(end - now) : 0, n = 0;
        if ((rc = cl_node_sync(p->node, left)) != 0)
            break;
        now = em_now_ms();          /* the proposal gets what the sync left */
        left = now < end ? (uint32_t)(end - now) : 0;
        cl_node_decide_lock(p->node);
        cl_topo *t = cl_node_topo_acquire(p->node);
        em_buf e = EM_BUF_INIT;
        rc = cl_plan_reset_lost(t, gr, &e, &n);
        cl_node_topo_release(t);
        if (!rc && n)
            rc = cl_node_propose_wait(p->node, e.p, e.len, left);
        cl_node_decide_unlock(p->node);
        em_buf_free(&e);
        if (n > *reset)
            *reset = n;
        if ((rc != EM_LOSTLEADER && rc != EM_NOTLEADER) || em_now_ms() + 100 >= end)
            break;
    }
    em_free(g);
    if (!rc && *reset)
        EM_INFO("exchange: %u lost partitions of group %d reset", *reset, grp);
    return rc;
}

void cl_pme_stats_get(cl_pme *p, cl_pme_stats *s)
{
    memset(s, 0, sizeof *s);
    lock(p);
    s->exchanges = p->exchanges;
    s->last_ms = p->last_ms;
    s->map_exch = p->map_exch;
    s->map_hash = p->map_hash;
    s->map_bytes = p->map.len;
    s->map_zbytes = p->map_z.len;
    s->lost = p->lost;
    s->bad_frames = p->bad;
    unlock(p);
}

int cl_pme_map_copy(cl_pme *p, em_buf *out)
{
    lock(p);
    int rc = em_buf_append(out, p->map.p, p->map.len);
    unlock(p);
    return rc;
}
