/* proto_cluster.c - the thin protocol on a cluster member: what a request
 * changes cluster-wide goes through the metadata group, and what the group
 * applies takes effect here (cluster/cl_node.h).
 *
 * Through the group, each waiting for its entry to apply on this node before
 * the reply: cache starts (the configuration's request bytes, decoded by
 * every node alike) and stops, binary types and type names (after this node
 * registered them, so a bad one is refused before it spreads), and cluster
 * state changes.  A proposal blocks the worker for one round trip to the
 * leader and one commit: these are configuration changes, not the data path.
 *
 * Binary types in the group's state are keyed by type id for records and by
 * the id's complement for names, so a node restoring a snapshot gets both.
 */
#include "proto/proto_int.h"

#include <stdio.h>
#include <string.h>
#include <sys/random.h>
#include <time.h>
#include <unistd.h>

#include "binary/binary.h"
#include "cluster/cl_meta_fsm.h"
#include "cluster/cl_node.h"
#include "cluster/cl_plan.h"
#include "cluster/cl_pme.h"
#include "util/clock.h"
#include "util/hash.h"
#include "util/log.h"
#include "cluster/cl_repl.h"
#include "cluster/cl_rid.h"
#include "cluster/cl_take.h"
#include "util/mem.h"

#define PROPOSE_TIMEOUT_MS 30000
#define LOST_SYNC_MS       3000     /* a lost partition's refusal waits this for the leader */

int pr_cluster_propose(pr_conn *c, const void *entry, size_t len, const char *what)
{
    int rc = cl_node_propose_wait(c->srv->opt.cluster, entry, len, PROPOSE_TIMEOUT_MS);
    switch (rc) {
    case 0:
        return 0;
    case EM_NOMEM:
        return rc;
    case EM_CACHEEXISTS:
        return pr_fail(c, PR_ST_CACHE_EXISTS, "Failed to start cache (a cache with the same "
                       "name is already started with another configuration)");
    case EM_STALE:
        return pr_fail(c, PR_ST_FAILED, "Failed to %s: another change of the same cache came "
                       "first; retry", what);
    case EM_NOTLEADER:
        return pr_fail(c, PR_ST_FAILED, "Failed to %s: the cluster has no coordinator now "
                       "(no majority of its metadata group is reachable); retry", what);
    case EM_TIMEOUT:
    case EM_LOSTLEADER:
        return pr_fail(c, PR_ST_FAILED, "Failed to %s: the cluster did not confirm it within "
                       "%d ms (it may still take effect); retry", what, PROPOSE_TIMEOUT_MS);
    default:
        return pr_fail(c, PR_ST_FAILED, "Failed to %s: %s", what, em_strerror(rc));
    }
}

int pr_cluster_sync(pr_conn *c)
{
    /* Never from a forwarded request: it runs on the transport thread, the
     * thread that would have to deliver the leader's answer. */
    return c->srv->opt.cluster && !c->forwarded &&
           cl_node_sync(c->srv->opt.cluster, PROPOSE_TIMEOUT_MS) == 0;
}

/* A key's owner may not have applied a cache start the origin has (the
 * origin's create returned once it applied there): the entry reaches the
 * owner through the metadata group, on its own thread, within a heartbeat
 * or so; the transport thread waits for it, at most FORWARD_CACHE_WAIT_MS. */
#define FORWARD_CACHE_WAIT_MS 3000

st_cache *pr_server_wait_cache(pr_server *s, int32_t id)
{
    struct timespec end;
    clock_gettime(CLOCK_MONOTONIC, &end);
    end.tv_sec += FORWARD_CACHE_WAIT_MS / 1000;
    end.tv_nsec += (long)(FORWARD_CACHE_WAIT_MS % 1000) * 1000000L;
    if (end.tv_nsec >= 1000000000L) {
        end.tv_sec++;
        end.tv_nsec -= 1000000000L;
    }
    pthread_mutex_lock(&s->apply_mu);
    st_cache *sc;
    while (!(sc = st_cache_find(s->st, id)) &&
           pthread_cond_timedwait(&s->apply_cv, &s->apply_mu, &end) == 0)
        ;
    pthread_mutex_unlock(&s->apply_mu);
    return sc ? sc : st_cache_find(s->st, id);
}

st_cache *pr_cluster_wait_cache(pr_conn *c, int32_t id)
{
    return pr_server_wait_cache(c->srv, id);
}

static void applied(pr_server *s)
{
    pthread_mutex_lock(&s->apply_mu);
    pthread_cond_broadcast(&s->apply_cv);
    pthread_mutex_unlock(&s->apply_mu);
}

int pr_cluster_type_put(pr_conn *c, int kind, int32_t type_id, const uint8_t *p, size_t n)
{
    if (!c->srv->opt.cluster)
        return 0;
    uint8_t *blob = em_malloc(n + 1);
    if (!blob)
        return EM_NOMEM;
    blob[0] = (uint8_t)kind;
    memcpy(blob + 1, p, n);
    em_buf b = EM_BUF_INIT;
    int rc = cl_meta_enc_type_put(&b, kind == 1 ? type_id : ~type_id, blob, n + 1);
    em_free(blob);
    if (rc == 0)
        rc = pr_cluster_propose(c, b.p, b.len, "register the binary type cluster-wide");
    else if (rc != EM_NOMEM)
        rc = pr_fail(c, PR_ST_FAILED, "Binary type too large for the cluster: %s",
                     em_strerror(rc));
    em_buf_free(&b);
    return rc;
}

/* apply_type registers a TYPE_PUT blob (kind byte, then the record or the
 * name record of proto_meta.c) and persists it as this node's own put does. */
static int apply_type(pr_server *s, const uint8_t *p, size_t n)
{
    if (n < 1)
        return EM_TRUNCATED;
    int kind = p[0];
    p++;
    n--;
    int rc;
    if (kind == 1) {
        bin_type *t = NULL;
        size_t used = 0;
        if ((rc = bin_meta_decode(p, n, &t, &used)) != 0)
            return rc;
        rc = bin_registry_put(s->reg, t, NULL);
        bin_type_free(t);
        n = used;
    } else if (kind == 2) {
        if (n < 5)
            return EM_TRUNCATED;
        rc = bin_registry_name_put(s->reg, p[0], (int32_t)em_ld32(p + 1),
                                   (const char *)p + 5, n - 5);
    } else {
        return EM_BADTYPE;
    }
    if (!rc && s->opt.meta_persist)
        rc = s->opt.meta_persist(s->opt.meta_arg, kind, p, n);
    return rc;
}

static int apply_entry(pr_server *s, const cl_meta_entry *e)
{
    switch (e->type) {
    case CL_META_E_CACHE_START:
        if (st_cache_find(s->st, e->u.cache.id))
            return 0;
        return pr_cfg_apply_start(s, e->u.cache.blob.p, e->u.cache.blob.len);
    case CL_META_E_CACHE_STOP: {
        int rc = st_cache_destroy(s->st, e->u.cache.id);
        return rc == EM_NOCACHE ? 0 : rc;
    }
    case CL_META_E_CACHE_CONFIG:
        return pr_cfg_apply_config(s, e->u.cache.blob.p, e->u.cache.blob.len);
    case CL_META_E_TYPE_PUT:
        return apply_type(s, e->u.type_put.blob.p, e->u.type_put.blob.len);
    case CL_META_E_STATE_SET:
        return pr_change_state(s, e->u.state);
    default:
        return 0;
    }
}

int pr_cluster_apply(pr_server *s, const cl_meta_entry *e)
{
    int rc = apply_entry(s, e);
    applied(s);
    return rc;
}

int pr_cluster_restore(pr_server *s, const cl_meta_fsm *f)
{
    int first = 0;
    for (uint32_t i = 0; i < f->n_types; i++) {
        int rc = apply_type(s, f->types[i].p, f->types[i].len);
        if (rc && !first)
            first = rc;
    }
    for (uint32_t i = 0; i < f->n_caches; i++) {
        /* A cache this node has may have changed since (CACHE_CONFIG). */
        int rc = st_cache_find(s->st, f->caches[i].id)
                 ? pr_cfg_apply_config(s, f->caches[i].p, f->caches[i].len)
                 : pr_cfg_apply_start(s, f->caches[i].p, f->caches[i].len);
        if (rc && !first)
            first = rc;
    }
    int rc = pr_change_state(s, f->state);
    applied(s);
    return first ? first : rc;
}

/* afwd_answered: a forward that did not wait was answered (below). */
static void afwd_answered(void *arg)
{
    pr_server *s = arg;
    if (s->tx_wake)
        s->tx_wake(s->tx_wake_arg);     /* the loops resume their parked connections */
}

int pr_server_set_cluster(pr_server *s, cl_node *node)
{
    if (!s->apply_conn && !(s->apply_conn = pr_conn_new(s)))
        return EM_NOMEM;
    if (!s->fwd_conn && !(s->fwd_conn = pr_conn_new(s)))
        return EM_NOMEM;
    /* Forwarded requests arrive decoded as a 1.7.0 client's would be: the
     * request layouts of the cache ops are the same in every version. */
    s->fwd_conn->ready = 1;
    s->fwd_conn->ver = PR_VER(1, 7, 0);
    s->fwd_conn->forwarded = 1;
    /* It runs on the transport thread, which must never wait: a FULL_SYNC
     * write's acks arrive there, and so does the answer to a retry. */
    s->fwd_conn->ack_defer = 1;
    s->fwd_conn->no_wait = 1;
    /* and calls cl_repl_pass_end at the end of each pass (on_pass_end):
     * the streams of the writes it ran in a pass leave together */
    s->fwd_conn->pass_flush = 1;
    /* Cache configurations in entries are decoded as a 1.2.0+ client wrote
     * them (query entities with precision and scale): the proposer refuses
     * the older layout (create_cluster). */
    s->apply_conn->ver = PR_VER(1, 7, 0);
    int rc = pr_txc_init(s);
    if (rc)
        return rc;
    s->opt.cluster = node;
    if (node)
        cl_node_set_answer_hook(node, afwd_answered, s);
    atomic_store_explicit(&s->cluster_ready, 1, memory_order_release);
    return 0;
}

/* ---- the data path on a cluster --------------------------------------------
 *
 * Every key has one primary, the first owner of its partition in the
 * topology the members share (cl_repl_owners); reads of a cache that reads
 * from backups are served by any owner, so by this node when it holds a
 * copy.  A single-key op on another member's key is forwarded whole - the
 * client's request bytes - and answered with what the owner answered
 * (FORWARD_TIMEOUT_MS at most): from a client's connection without holding
 * its loop (afwd_start above), elsewhere (SQL's calls, a retry, a batch)
 * with the worker waiting for it.  A batch whose keys all
 * have one owner goes there; a batch across owners is split per owner
 * (split).  GET_SIZE, CLEAR and REMOVE_ALL ask every member and sum.
 * Forwarded requests run on the owner's forwarding workers
 * (server/srv_cluster.c), are never forwarded again, and are sent back
 * (EM_STALE) when the owner's topology names another owner: the two views
 * differ during a topology change, and the forwarding node looks again.
 * What a write changes is streamed to the other owners by cluster/cl_repl
 * (proto_cache.c waits for it under FULL_SYNC). */

#define FORWARD_TIMEOUT_MS 10000

/* Ignite's PartitionLossPolicy ordinals. */
enum { LOSS_READ_ONLY_SAFE = 0, LOSS_READ_ONLY_ALL = 1, LOSS_READ_WRITE_SAFE = 2,
       LOSS_READ_WRITE_ALL = 3, LOSS_IGNORE = 4 };


/* lost_refusal: the error Ignite gives for an operation on a lost partition
 * (GridDhtTopologyFutureAdapter's validation), or 0 when the cache's policy
 * lets it through. */
static int lost_refusal(pr_conn *c, st_cache *sc, int read, uint32_t part)
{
    const st_cache_config *g = st_cache_cfg(sc);
    int plc = g->partition_loss_policy;
    if (!read) {
        if (plc == LOSS_READ_ONLY_SAFE || plc == LOSS_READ_ONLY_ALL)
            return pr_fail(c, PR_ST_FAILED, "Failed to write to cache (cache is moved to a "
                           "read-only state): %s", g->name);
        if (plc != LOSS_READ_WRITE_SAFE)
            return 0;
    } else if (plc != LOSS_READ_ONLY_SAFE && plc != LOSS_READ_WRITE_SAFE) {
        return 0;
    }
    c->lost_refused = 1;
    return pr_fail(c, PR_ST_FAILED, "Failed to execute the cache operation (all partition "
                   "owners have left the grid, partition data has been lost) [cacheName=%s, "
                   "partition=%u] (once owners are back: ember-cli cluster reset-lost %s)",
                   g->name, part, g->name);
}

/* copy_behind: this node's copy of (cache, part) is catching up with its
 * primary (pr_server_set_behind). */
static int copy_behind(pr_server *s, int32_t cache, uint32_t part)
{
    pr_behind_fn fn = atomic_load_explicit(&s->behind, memory_order_acquire);
    return fn && fn(s->behind_arg, cache, part);
}

/* target_of: the member index that serves key k (validated bytes) of cache
 * sc: the partition's primary (cl_repl_owners: the exchange's committed
 * owners), or this node when it holds a whole copy (not one catching up)
 * and the op is a read of a cache that reads from backups.  EM_AGAIN when the partition has no owner
 * now (every owner left; the exchange is deciding new ones); a lost
 * partition is this node's when the loss policy lets the op through, else
 * the policy's refusal is the reply (PR_ST_FAILED). */
static int target_of(pr_conn *c, cl_topo *t, st_cache *sc, int read, const uint8_t *k,
                     size_t kl, int *target)
{
    const st_cache_config *g = st_cache_cfg(sc);
    uint32_t parts = g->partitions ? g->partitions : 1024;
    bin_key bk;
    em_buf_reset(&c->tmp);
    int rc = bin_key_prepare(k, kl, &c->tmp, &bk);
    if (rc)
        return rc;
    uint32_t part = bin_partition(bk.hash, parts);
    int32_t id = st_cache_id(sc);
    int plc = g->partition_loss_policy;
    if (!read && (plc == LOSS_READ_ONLY_SAFE || plc == LOSS_READ_ONLY_ALL) &&
        cl_topo_lost_count(t, id))
        return lost_refusal(c, sc, read, part);   /* the whole cache turns read-only */
    if (cl_topo_part_lost(t, id, part)) {
        if ((rc = lost_refusal(c, sc, read, part)) != 0)
            return rc;
        *target = t->self;
        return 0;
    }
    uint32_t idx[64];
    uint32_t n = cl_repl_owners(t, g, id, part, idx, 64);
    if (!n)
        return EM_AGAIN;
    if ((int)idx[0] == t->self && cl_take_held(c->srv->opt.take, t, id, part))
        return EM_AGAIN;            /* the old primary has not answered (cl_take.h) */
    *target = (int)idx[0];
    if (c->owner_probe && (int)idx[0] == t->self &&
        (cl_topo_primary_dropped(t, id, part) || copy_behind(c->srv, id, part)))
        c->probe_unsure = 1;        /* see owner_probe */
    if (read && g->read_from_backup)
        for (uint32_t i = 1; i < n; i++)
            if ((int)idx[i] == t->self && !copy_behind(c->srv, id, part))
                *target = t->self;
    return 0;
}

/* ---- forwarding without a wait ---------------------------------------------
 *
 * A single-key request forwarded from a client's connection does not hold
 * its loop for the round trip: the request goes out (cl_node_call_start),
 * the handler parks it (PR_PARK, the frame kept in the connection's queue,
 * fwd_busy set so every later frame of the connection waits behind it and
 * keeps its order), and the loop serves its other connections.  The answer
 * wakes the loops (the node's answer hook); pr_conn_resume sees the call
 * over and runs the frame again, and this time the forward takes the
 * answer instead of sending (afwd_take): the reply is built, counted and
 * sent exactly as a blocking forward's, and whatever the answer asks for -
 * map again, wait for a cache, wait for a lock - goes on from there as it
 * would have.  Only requests whose second run is harmless go this way:
 * reads, idempotent writes and named writes (the second run keeps the
 * name, so the owner that ran it answers from its window).
 *
 * A successful answer needs none of that: the reply is the header the
 * loop built when it parked the request and the owner's payload.  When it
 * may (proto_hold.c), the transport thread that receives the answer sends
 * the reply itself (afwd_answered_direct, before the call shows as over,
 * while a cancel waits for it) and does not wake the loop: the wake-up and the
 * second run were a forwarded put's largest cost on the near node.  The
 * frame is then dropped unrun when the connection next resumes
 * (pr_afwd_skip). */
static int call_rc(pr_conn *c, int rc);

struct pr_afwd {
    cl_node_acall call;             /* first: the answer callback's pointer */
    em_buf   resp;                  /* the owner's answer */
    em_buf   env;                   /* a named write's envelope as sent */
    em_buf   hdr;                   /* the success reply's header, as if answered */
    uint64_t rid;                   /* the client's request id */
    uint64_t topo;                  /* the topology version hdr reports (0: none) */
    cl_meta_uuid to;                /* the member asked */
    pr_hold  hold;
    int      op;
    int      rc;                    /* the call's result, once over */
    uint8_t  have;                  /* over: the frame's next run takes it */
    uint8_t  named;
    uint8_t  sent;                  /* the answering thread sent the reply
                                     * (written before the call shows as
                                     * over, which the node's lock orders) */
};

/* frame_rid: the client's request id, also at bytes 2..10 of an envelope */
static uint64_t frame_rid(const uint8_t *body) { return em_ld64(body + 2); }

static int afwd_mine(const pr_conn *c)
{
    const struct pr_afwd *a = c->afwd;
    return a && a->have && a->op == c->req_op && a->rid == frame_rid(c->req_body);
}

/* afwd_answered_direct (cl_node_acall's answered, on the transport thread,
 * while the call is answering): the reply, when it may go from here. */
static int afwd_answered_direct(cl_node_acall *call, int status)
{
    struct pr_afwd *a = (struct pr_afwd *)call;
    pr_server *srv = a->hold.srv;
    const uint8_t *pay;
    size_t n;
    int32_t st;
    /* a's connection is closing at worst: its close cancels the call
     * under the lock this runs under, and the send then fails */
    a->sent = !status && pr_hold_may_send(&a->hold) &&
              pr_frame_split(&a->resp, &st, &pay, &n) == 0 && st == 0 &&
              a->hdr.len - 4 + n <= INT32_MAX;
    if (a->sent) {
        em_st32(a->hdr.p, (uint32_t)(a->hdr.len - 4 + n));
        a->sent = srv->direct_send(srv->direct_arg, a->hold.io, a->hdr.p, a->hdr.len, pay, n) == 0;
    }
    if (a->sent)
        atomic_fetch_add_explicit(&srv->fwd_direct, 1, memory_order_relaxed);
    return !pr_hold_settle(&a->hold, a->sent);
}

uint64_t pr_server_fwd_replies_direct(pr_server *s)
{
    return atomic_load_explicit(&s->fwd_direct, memory_order_relaxed);
}

/* afwd_direct_prep: the success reply's header and the flags, before the
 * call can be answered; 1 when the reply may go the direct way. */
static int afwd_direct_prep(pr_conn *c, struct pr_afwd *a)
{
    pr_hold_start(&a->hold, c, PR_OUT_FWD);   /* (the first run's start too) */
    a->sent = 0;
    if (!c->io || !c->srv->direct_send)
        return 0;
    uint64_t tv = atomic_load_explicit(&c->srv->topo_ver, memory_order_relaxed);
    a->topo = tv != c->topo_seen && c->ver >= PR_VER(1, 4, 0) ? tv : 0;
    em_buf_reset(&a->hdr);
    return pr_reply_header(c, &a->hdr, (int64_t)frame_rid(c->req_body), a->topo) == 0;
}

/* afwd_start sends c->req_body (the envelope when named) to `to` without a
 * wait: 0 (the caller parks the request) or nonzero (it forwards as
 * before, blocking). */
static int afwd_start(pr_conn *c, cl_meta_uuid to, int named, size_t frame_len)
{
    if (!c->in_loop || c->fwd_busy || (c->afwd && c->afwd->have) ||
        !(named || pr_cluster_idempotent(c->req_op)) || c->npq + 1 >= PR_MAX_WAITING ||
        c->pq.len + frame_len + 4 > PR_MAX_WAITING_BYTES)
        return EM_BUSY;
    if (!c->afwd && !(c->afwd = em_calloc(1, sizeof *c->afwd)))
        return EM_NOMEM;
    struct pr_afwd *a = c->afwd;
    em_buf_reset(&a->resp);
    int direct = afwd_direct_prep(c, a);
    int rc = cl_node_call_start(c->srv->opt.cluster, &a->call, to, c->req_body, c->req_len,
                                &a->resp, FORWARD_TIMEOUT_MS,
                                direct ? afwd_answered_direct : NULL);
    if (rc)
        return rc;
    if (c->stats)
        pr_stats_forwarded(c->stats, c->req_op);
    a->rid = frame_rid(c->req_body);
    a->to = to;
    a->op = c->req_op;
    a->named = (uint8_t)named;
    if (named) {                    /* kept for the next run: no copy */
        em_buf t = a->env;
        a->env = c->rid_env;
        c->rid_env = t;
    }
    c->fwd_busy = PR_OUT_FWD;
    return 0;
}

void pr_afwd_unpass(pr_conn *c)
{
    if (c->afwd)
        pr_hold_unpass(&c->afwd->hold);
}

int pr_afwd_settled(const pr_conn *c)
{
    return c->afwd && pr_hold_settled(c, &c->afwd->hold);
}

void pr_afwd_behind(pr_conn *c)
{
    if (c->afwd)
        pr_hold_behind(c, &c->afwd->hold);
}

int pr_afwd_skip(pr_conn *c, const uint8_t *body, size_t len)
{
    struct pr_afwd *a = c->afwd;
    if (c->fwd_busy != PR_OUT_READY || !a || !a->sent || !pr_afwd_frame(c, body, len))
        return 0;
    /* what the frame's second run would have left behind it */
    if (a->named) {                 /* the envelope's buffer back, as afwd_named */
        em_buf t = c->rid_env;
        c->rid_env = a->env;
        a->env = t;
    }
    em_buf t = c->fwd_resp;         /* and the answer's, as afwd_take: both stay grown */
    c->fwd_resp = a->resp;
    a->resp = t;
    a->have = a->named = a->sent = 0;
    c->fwd_busy = 0;
    c->last_status = 0;
    if (a->topo)
        c->topo_seen = a->topo;
    if (c->stats) {
        pr_stats_req(c->stats, a->op, 0, pr_hold_ns(&a->hold, 1));
        pr_stats_bytes(c->stats, 0, (size_t)em_ld32(a->hdr.p) + 4);  /* the frame sent */
    }
    return 1;
}

uint64_t pr_afwd_t0(const pr_conn *c, const uint8_t *body, size_t len)
{
    return c->fwd_busy == PR_OUT_READY && pr_afwd_frame(c, body, len) ? c->afwd->hold.t0 : 0;
}
/* afwd_named: the request's earlier run forwarded it named: its envelope
 * is c->rid_env again, and 1. */
static int afwd_named(pr_conn *c)
{
    if (!afwd_mine(c) || !c->afwd->named)
        return 0;
    em_buf t = c->rid_env;
    c->rid_env = c->afwd->env;
    c->afwd->env = t;
    c->afwd->named = 0;
    return 1;
}

/* afwd_take: the request's earlier run forwarded it and the answer is in:
 * it becomes resp, *rc the call's result as forward's, and 1. */
static int afwd_take(pr_conn *c, em_buf *resp, int *rc)
{
    if (!afwd_mine(c))
        return 0;
    struct pr_afwd *a = c->afwd;
    em_buf t = *resp;
    *resp = a->resp;
    a->resp = t;
    a->have = 0;
    if (c->fwd_busy == PR_OUT_READY)
        c->fwd_busy = 0;            /* later frames may run */
    *rc = call_rc(c, a->rc);
    return 1;
}

int pr_afwd_frame(const pr_conn *c, const uint8_t *body, size_t len)
{
    const struct pr_afwd *a = c->afwd;
    return a && a->have && len >= 10 && a->rid == frame_rid(body) &&
           a->op == (em_ld16(body) & 0xffff);
}

int pr_afwd_poll(pr_conn *c)
{
    struct pr_afwd *a = c->afwd;
    if (!cl_node_call_poll(c->srv->opt.cluster, &a->call, &a->rc))
        return 1;
    c->fwd_busy = PR_OUT_READY;     /* until its frame runs again */
    a->have = 1;
    return 0;
}

void pr_afwd_end(pr_conn *c, const uint8_t *body)
{
    struct pr_afwd *a = c->afwd;
    if (a->have && a->rid == frame_rid(body)) {
        a->have = a->named = a->sent = 0;  /* it ended before taking the answer */
        if (c->fwd_busy == PR_OUT_READY)
            c->fwd_busy = 0;
    }
}

void pr_afwd_free(pr_conn *c)
{
    struct pr_afwd *a = c->afwd;
    if (!a)
        return;
    /* Always, not only while the connection waits: the answering thread
     * (which the cancel waits for: cl_node_call_cancel) stores settled
     * before it reads behind, and the loop may have taken the answer, and
     * closed, in between. */
    if (c->srv->opt.cluster)
        cl_node_call_cancel(c->srv->opt.cluster, &a->call);
    pr_hold_unpass(&a->hold);
    em_buf_free(&a->resp);
    em_buf_free(&a->env);
    em_buf_free(&a->hdr);
    em_free(a);
    c->afwd = NULL;
}

/* parse_reply takes a forwarded request's reply (a 1.7.0 response frame):
 * its payload is appended to out, or its error becomes this reply's. */
static int parse_reply(pr_conn *c, const uint8_t *p, size_t n, em_buf *out)
{
    int32_t status;
    const uint8_t *m, *pay;
    size_t ml, pn;
    if (pr_reply_parse(c, p, n, &status, &m, &ml, &pay, &pn))
        return pr_fail(c, PR_ST_FAILED, "Malformed reply from the key's owner");
    if (status)
        return pr_fail(c, status, "%.*s", (int)ml, m ? (const char *)m : "");
    return em_buf_append(out, pay, pn);
}

/* call_rc: what a forward's cl_node_call result means for the client. */
static int call_rc(pr_conn *c, int rc)
{
    if (rc == EM_NOMEM || rc == EM_STALE)
        return rc;                  /* EM_STALE: the caller looks again */
    if ((rc == EM_CLOSED && c->route_idem) || (rc == EM_NOLINK && c->route_remap))
        return EM_CLOSED;           /* the caller re-maps it on the next topology */
    if (rc == EM_NOLINK)
        return pr_fail(c, PR_ST_FAILED, "The node owning this key is not reachable from this "
                       "node (no link to it); the request did not run");
    if (rc == EM_CLOSED || rc == EM_TIMEOUT)
        return pr_fail(c, PR_ST_FAILED, "The node owning this key did not answer (%s); "
                       "the request may or may not have run there", em_strerror(rc));
    if (rc)
        return pr_fail(c, PR_ST_FAILED, "The node owning this key failed the request: %s",
                       em_strerror(rc));
    return 0;
}

static int forward(pr_conn *c, cl_meta_uuid to, em_buf *resp)
{
    em_buf_reset(resp);
    if (c->stats)
        pr_stats_forwarded(c->stats, c->req_op);
    return call_rc(c, cl_node_call(c->srv->opt.cluster, to, c->req_body, c->req_len, resp,
                                   FORWARD_TIMEOUT_MS));
}

/* ask forwards the request to `to` and takes its reply into out.  The
 * owner may not have applied a cache start this node already has (it
 * cannot wait for one on its transport thread): it answers "cache does not
 * exist", and the request goes again, a bounded number of times, while the
 * owner catches up (within a heartbeat or two). */
static int ask(pr_conn *c, cl_meta_uuid to, em_buf *resp, em_buf *out)
{
    size_t at = out->len;
    int rc;
    for (int tries = 0;; tries++) {
        if (tries || !afwd_take(c, resp, &rc))
            rc = forward(c, to, resp);
        if (!rc)
            rc = parse_reply(c, resp->p, resp->len, out);
        if (rc != PR_ST_CACHE_NOT_FOUND || tries == 50)
            return rc;
        out->len = at;
        struct timespec ts = { 0, 10 * 1000000L };
        nanosleep(&ts, NULL);
    }
}

/* fan_out: GET_SIZE, CLEAR and REMOVE_ALL on every other member, sent to
 * CL_NODE_CALL_ALL_MAX of them at once; the handler then runs its own part
 * here (GET_SIZE adds c->fanout_sum). */
static int fan_out(pr_conn *c, int op, cl_topo *t)
{
    cl_meta_uuid to[CL_NODE_CALL_ALL_MAX];
    em_buf req[CL_NODE_CALL_ALL_MAX], resp[CL_NODE_CALL_ALL_MAX];
    int rcs[CL_NODE_CALL_ALL_MAX];
    em_buf part = EM_BUF_INIT;
    int64_t sum = 0;
    int rc = 0;
    for (uint32_t i = 0; i < t->n && !rc;) {
        uint32_t k = 0;
        for (; i < t->n && k < CL_NODE_CALL_ALL_MAX; i++) {
            if ((int)i == t->self)
                continue;
            to[k] = t->m[i].id;
            req[k] = (em_buf){ (uint8_t *)c->req_body, c->req_len, c->req_len };
            resp[k++] = (em_buf)EM_BUF_INIT;
            if (c->stats)
                pr_stats_forwarded(c->stats, c->req_op);
        }
        if (!k)
            break;
        cl_node_call_all(c->srv->opt.cluster, k, to, req, resp, rcs, FORWARD_TIMEOUT_MS, NULL,
                         NULL);
        for (uint32_t j = 0; j < k && !rc; j++) {
            em_buf_reset(&part);
            if ((rc = call_rc(c, rcs[j])) == 0)
                rc = parse_reply(c, resp[j].p, resp[j].len, &part);
            if (rc == PR_ST_CACHE_NOT_FOUND) {
                em_buf_reset(&part);    /* not started there yet: ask() waits for it */
                rc = ask(c, to[j], &resp[j], &part);
            }
            if (!rc && op == 1020) {
                if (part.len != 8)
                    rc = pr_fail(c, PR_ST_FAILED, "Malformed size from a member");
                else
                    sum += (int64_t)em_ld64(part.p);
            }
        }
        for (uint32_t j = 0; j < k; j++)
            em_buf_free(&resp[j]);
    }
    em_buf_free(&part);
    c->fanout_sum = sum;
    return rc;
}

int pr_cluster_scan_mode(pr_conn *c, int local, int *cluster)
{
    *cluster = 0;
    if (!c->srv->opt.cluster || c->forwarded || local)
        return 0;
    cl_topo *t = cl_node_topo_acquire(c->srv->opt.cluster);
    uint32_t n = t->n;
    int self = t->self;
    cl_node_topo_release(t);
    if (self < 0)
        return pr_fail(c, PR_ST_FAILED, "This node is not a member of the cluster now: use "
                       "another node");
    *cluster = n > 1;
    return 0;
}

#define SCAN_FETCH_MS   30000       /* one partition's fetch, retries included */
#define SCAN_PIECE_MAX  (CL_NET_MAX_FRAME_DEFAULT - 4096)

/* pr_cluster_scan_fetch (st_snap_fn): partition `part` from its primary in
 * the topology of the moment - here when this node is it, else over the
 * transport (PR_OP_PART_SNAPSHOT) - so each partition is read once, from
 * one copy, wherever owners move during the scan.  An owner that moved, is
 * not decided yet or did not answer is looked up again on the next
 * topology, SCAN_FETCH_MS at most. */
int pr_cluster_scan_fetch(void *arg, st_cache *sc, uint32_t part, em_buf *snap)
{
    pr_conn *c = arg;
    cl_node *node = c->srv->opt.cluster;
    const st_cache_config *g = st_cache_cfg(sc);
    int32_t id = st_cache_id(sc);
    uint8_t req[18];
    em_st16(req, PR_OP_PART_SNAPSHOT);
    em_st64(req + 2, 1);
    em_st32(req + 10, (uint32_t)id);
    em_st32(req + 14, part);
    uint64_t end = em_now_ms() + SCAN_FETCH_MS;
    for (;;) {
        cl_topo *t = cl_node_topo_acquire(node);
        uint32_t idx[64];
        int lost = cl_topo_part_lost(t, id, part);
        uint32_t n = lost ? 0 : cl_repl_owners(t, g, id, part, idx, 64);
        int self = t->self, primary = n ? (int)idx[0] : -1;
        cl_meta_uuid to = n ? t->m[idx[0]].id : (cl_meta_uuid){ 0, 0 };
        uint64_t seen = cl_topo_index(t);
        cl_node_topo_release(t);
        if (lost)
            return pr_fail(c, PR_ST_FAILED, "Failed to run the scan: partition %u of cache %s "
                           "is lost (every owner left)", part, g->name);
        if (primary == self)
            return st_part_snapshot(sc, part, snap);
        int rc = EM_AGAIN;
        if (n) {
            em_buf_reset(&c->fwd_resp);
            rc = cl_node_call(node, to, req, sizeof req, &c->fwd_resp, FORWARD_TIMEOUT_MS);
            if (!rc)
                return parse_reply(c, c->fwd_resp.p, c->fwd_resp.len, snap);
        }
        if (rc == EM_NOMEM)
            return rc;
        if (em_now_ms() >= end)
            return pr_fail(c, PR_ST_FAILED, "The primary of partition %u of cache %s did not "
                           "answer the scan (%s); retry", part, g->name, em_strerror(rc));
        (void)cl_node_topo_wait(node, seen, 200);
    }
}

int pr_op_part_snapshot(pr_conn *c, pr_rd *r, em_buf *out)
{
    int32_t id, part;
    if (pr_rd_i32(r, &id) || pr_rd_i32(r, &part))
        return pr_bad_request(c, EM_TRUNCATED);
    st_cache *sc = pr_cluster_wait_cache(c, id);
    if (!sc)
        return pr_fail(c, PR_ST_CACHE_NOT_FOUND, "Cache does not exist [cacheId= %d]", id);
    const st_cache_config *g = st_cache_cfg(sc);
    uint32_t parts = g->partitions ? g->partitions : 1024;
    if (part < 0 || (uint32_t)part >= parts)
        return pr_fail(c, PR_ST_FAILED, "Invalid partition %d", part);
    cl_topo *t = cl_node_topo_acquire(c->srv->opt.cluster);
    uint32_t idx[1];
    uint32_t n = cl_repl_owners(t, g, id, (uint32_t)part, idx, 1);
    int mine = n && (int)idx[0] == t->self;
    cl_node_topo_release(t);
    if (!mine) {
        c->stale = 1;               /* the scanning node looks again */
        return pr_fail(c, PR_ST_FAILED, "This node is not the partition's primary in its topology");
    }
    size_t at = out->len;
    int rc = st_part_snapshot(sc, (uint32_t)part, out);
    if (!rc && out->len - at > SCAN_PIECE_MAX)
        rc = pr_fail(c, PR_ST_FAILED, "Partition %d of cache %s holds more than a cluster scan "
                     "moves in one piece (%u MiB)", part, g->name, SCAN_PIECE_MAX >> 20);
    else if (rc == EM_NOCACHE)
        rc = pr_fail(c, PR_ST_CACHE_NOT_FOUND, "Cache was destroyed during the scan");
    else if (rc && rc != EM_NOMEM)
        rc = pr_fail(c, PR_ST_FAILED, "Scan failed: %s", em_strerror(rc));
    if (rc)
        out->len = at;
    return rc;
}

/* route_keys: the member serving every key of the request (*owner), -1 for
 * no key, -2 when the keys have several. */
static int route_keys(pr_conn *c, cl_topo *t, st_cache *sc, int read, const uint8_t *kp,
                      const uint8_t *kend, int nkeys, int pairs, int *owner)
{
    int rc = 0;
    *owner = -1;
    const uint8_t *p = kp;
    for (int i = 0; i < nkeys && !rc; i++) {
        size_t len;
        if ((rc = bin_validate(p, (size_t)(kend - p), &len, c->srv->opt.max_depth)) != 0)
            break;
        int o;
        if ((rc = target_of(c, t, sc, read, p, len, &o)) != 0)
            break;
        if (*owner >= 0 && o != *owner) {
            *owner = -2;
            break;
        }
        *owner = o;
        p += len;
        if (pairs) {
            if ((rc = bin_validate(p, (size_t)(kend - p), &len, c->srv->opt.max_depth)) != 0)
                break;
            p += len;
        }
    }
    return rc;
}

#define OWNERS_AWAIT_MS 1000       /* a peer's first decision for a cache, at most */
#define STALE_TRIES 300
#define REMAP_TRIES 3
#define REMAP_WAIT_MS 15000
#define REROUTE_WAIT_MS 2000

/* pr_cluster_idempotent: ops whose second run changes nothing and answers
 * the same (conditional ops and get-and-* are not: they would need the
 * origin request's outcome, which is not replicated yet). */
int pr_cluster_idempotent(int op)
{
    switch (op) {
    case 1000: case 1001: case 1003: case 1004: case 1011: case 1012:
    case 1014: case 1015: case 1018:
        return 1;
    default:
        return 0;
    }
}

/* sub_request builds, in b, the request c is handling restricted to the
 * keys (and values) that member `who` serves: the same header, the new
 * count, those entries, whatever followed the batch. */
static int sub_request(pr_conn *c, cl_topo *t, st_cache *sc, int read, const uint8_t *kp,
                       const uint8_t *kend, int nkeys, int pairs, int who, em_buf *b,
                       int *count)
{
    em_buf_reset(b);
    const uint8_t *body = c->req_body, *bend = c->req_body + c->req_len;
    if (kp < body + 4 || kend > bend)
        return EM_INVAL;
    int rc = em_buf_append(b, body, (size_t)(kp - 4 - body));
    size_t cnt_at = b->len;
    if (!rc)
        rc = em_buf_put_le32(b, 0);
    *count = 0;
    const uint8_t *p = kp;
    for (int i = 0; i < nkeys && !rc; i++) {
        size_t len, vlen = 0;
        if ((rc = bin_validate(p, (size_t)(kend - p), &len, c->srv->opt.max_depth)) != 0)
            break;
        if (pairs && (rc = bin_validate(p + len, (size_t)(kend - p - len), &vlen,
                                        c->srv->opt.max_depth)) != 0)
            break;
        int o;
        if ((rc = target_of(c, t, sc, read, p, len, &o)) != 0)
            break;
        if (o == who) {
            rc = em_buf_append(b, p, len + vlen);
            (*count)++;
        }
        p += len + vlen;
    }
    if (!rc)
        rc = em_buf_append(b, kend, (size_t)(bend - kend));
    if (!rc)
        em_st32(b->p + cnt_at, (uint32_t)*count);
    return rc;
}

/* split runs a batch whose keys several members serve (GET_ALL, PUT_ALL,
 * CONTAINS_KEYS, CLEAR_KEYS, REMOVE_KEYS): each member gets its subset as a
 * request of its own (this node's subset runs here, as a forwarded request
 * would), and the replies merge: GET_ALL's entries concatenate,
 * CONTAINS_KEYS is true when every part is.  The parts run in parallel:
 * every other member's is sent before this node runs its own, and the
 * answers are awaited after it, so a batch over n members costs one round
 * trip, not n - 1.  (A transaction's batch goes part after part: each
 * part joins the transaction at its primary first.)  The first failure in
 * member order is the reply; the other parts stay run (a batch is not
 * atomic in Ignite's ATOMIC caches either). */
typedef struct split_part {
    cl_meta_uuid to;
    int          self, count, rc;
    em_buf       req, resp, out;
} split_part;

typedef struct split_self { pr_conn *c; split_part *p; } split_self;

static void split_run_self(void *arg)
{
    split_self *x = arg;
    if (x->p)
        x->p->rc = pr_cluster_tx_run(x->c, x->p->to, 1, x->p->req.p, x->p->req.len, &x->p->out);
}

/* split_remote finishes part p from its call's result (parallel path). */
static int split_remote(pr_conn *c, split_part *p, int rc)
{
    if ((rc = call_rc(c, rc)) == 0)
        rc = parse_reply(c, p->resp.p, p->resp.len, &p->out);
    if (rc == PR_ST_CACHE_NOT_FOUND) {
        /* the member has not applied the cache's start yet: ask() waits */
        em_buf_reset(&p->out);
        rc = pr_cluster_tx_run(c, p->to, 0, p->req.p, p->req.len, &p->out);
    }
    return rc;
}

static int split(pr_conn *c, int op, cl_topo *t, st_cache *sc, int read, const uint8_t *kp,
                 const uint8_t *kend, int nkeys, int pairs, em_buf *out)
{
    if (op != 1003 && op != 1004 && op != 1012 && op != 1015 && op != 1018)
        return pr_fail(c, PR_ST_FAILED, "This request names keys owned by several nodes");
    if (!c->sub && !(c->sub = pr_fwd_conn_new(c->srv)))
        return EM_NOMEM;
    split_part *parts = em_calloc(t->n, sizeof *parts);    /* a part per member at most */
    if (!parts)
        return EM_NOMEM;
    uint32_t np = 0;
    int rc = 0;
    for (uint32_t m = 0; m < t->n && !rc; m++) {
        split_part *p = &parts[np];
        memset(p, 0, sizeof *p);
        if ((rc = sub_request(c, t, sc, read, kp, kend, nkeys, pairs, (int)m, &p->req,
                              &p->count)) != 0) {
            em_buf_free(&p->req);
            if (rc == EM_AGAIN)
                rc = pr_fail(c, PR_ST_FAILED, "No node owns some of these keys' partitions now "
                             "(the cluster is deciding new owners); retry");
            else if (rc != EM_NOMEM && rc != PR_ST_FAILED)
                rc = pr_fail(c, PR_ST_FAILED, "Invalid key: %s", em_strerror(rc));
            break;
        }
        if (!p->count) {
            em_buf_free(&p->req);
            continue;
        }
        p->to = t->m[m].id;
        p->self = (int)m == t->self;
        np++;
    }
    if (!rc && c->txc_slot) {
        /* a transaction's batch: each primary's subset in its part */
        for (uint32_t i = 0; i < np && !rc; i++) {
            split_part *p = &parts[i];
            if ((rc = pr_txc_touch(c, p->to)) != 0 ||
                (rc = pr_txc_wrap(c, p->req.p, p->req.len, &c->txenv)) != 0)
                break;
            rc = p->rc = pr_cluster_tx_run(c, p->to, p->self, c->txenv.p, c->txenv.len, &p->out);
        }
    } else if (!rc) {
        /* CL_NODE_CALL_ALL_MAX members' parts at a time */
        cl_meta_uuid to[CL_NODE_CALL_ALL_MAX];
        em_buf req[CL_NODE_CALL_ALL_MAX], resp[CL_NODE_CALL_ALL_MAX];
        int rcs[CL_NODE_CALL_ALL_MAX];
        uint32_t at[CL_NODE_CALL_ALL_MAX];
        for (uint32_t i = 0; i < np;) {
            uint32_t k = 0;
            split_self me = { c, NULL };
            for (; i < np && k < CL_NODE_CALL_ALL_MAX; i++) {
                if (parts[i].self) {
                    me.p = &parts[i];
                    continue;
                }
                to[k] = parts[i].to;
                req[k] = parts[i].req;
                resp[k] = (em_buf)EM_BUF_INIT;
                at[k++] = i;
                if (c->stats)
                    pr_stats_forwarded(c->stats, c->req_op);
            }
            cl_node_call_all(c->srv->opt.cluster, k, to, req, resp, rcs, FORWARD_TIMEOUT_MS,
                             split_run_self, &me);
            for (uint32_t j = 0; j < k; j++) {
                split_part *p = &parts[at[j]];
                p->resp = resp[j];
                p->rc = split_remote(c, p, rcs[j]);
            }
        }
        for (uint32_t i = 0; i < np && !rc; i++)
            rc = parts[i].rc;
    }
    if (rc == EM_STALE && !c->txc_slot)
        rc = pr_fail(c, PR_ST_FAILED, "The owner of these keys is changing (topology "
                     "change in progress); retry");
    /* the merge, in member order */
    int32_t total = 0;
    int all = 1;
    size_t cnt_at = out->len;
    if (!rc && op == 1003)
        rc = em_buf_put_le32(out, 0);
    for (uint32_t i = 0; i < np && !rc; i++) {
        em_buf *part = &parts[i].out;
        if (op == 1003) {
            if (part->len < 4) {
                rc = pr_fail(c, PR_ST_FAILED, "Malformed reply from a member");
                break;
            }
            total += (int32_t)em_ld32(part->p);
            rc = em_buf_append(out, part->p + 4, part->len - 4);
        } else if (op == 1012) {
            all &= part->len >= 1 && part->p[0] != 0;
        }
    }
    if (!rc && op == 1003)
        em_st32(out->p + cnt_at, (uint32_t)total);
    if (!rc && op == 1012)
        rc = pr_put_bool(out, all);
    for (uint32_t i = 0; i < np; i++) {
        em_buf_free(&parts[i].req);
        em_buf_free(&parts[i].resp);
        em_buf_free(&parts[i].out);
    }
    em_free(parts);
    return rc;
}

/* ---- transactions (proto_txc.c drives them) ---- */

int pr_cluster_tx_run(pr_conn *c, cl_meta_uuid to, int self, const uint8_t *env, size_t len,
                      em_buf *out)
{
    em_buf *resp = &c->fwd_resp;
    int rc;
    em_buf_reset(resp);
    if (self) {
        if (!c->sub && !(c->sub = pr_fwd_conn_new(c->srv)))
            return EM_NOMEM;
        if ((rc = pr_exec_request(c->sub, env, len, resp)) != 0)
            return rc;
        if (pr_conn_take_stale(c->sub))
            return EM_STALE;
        rc = parse_reply(c, resp->p, resp->len, out);
        if (rc == PR_ST_TXC_WAIT)
            c->txc_wait_at = to;
        return rc;
    }
    const uint8_t *ob = c->req_body;
    size_t ol = c->req_len;
    c->req_body = env;
    c->req_len = len;
    rc = ask(c, to, resp, out);
    c->req_body = ob;
    c->req_len = ol;
    if (rc == PR_ST_TXC_WAIT)
        c->txc_wait_at = to;        /* where it waits: a deadlock probe starts there */
    return rc;
}

int pr_cluster_await_owners(pr_server *s, st_cache *sc, uint32_t timeout_ms)
{
    cl_node *n = s->opt.cluster;
    if (!n)
        return 0;
    const st_cache_config *g = st_cache_cfg(sc);
    uint64_t end = em_now_ms() + timeout_ms;
    for (;;) {
        cl_topo *t = cl_node_topo_acquire(n);
        int ready = t->n <= 1 || g->cache_mode == 0 ||
                    cl_topo_has_owners(t, st_cache_id(sc), st_cache_parts(sc));
        uint64_t seen = cl_topo_index(t);
        cl_node_topo_release(t);
        uint64_t now = em_now_ms();
        if (ready || st_cache_destroyed(sc))
            return 0;
        if (now >= end)
            return EM_TIMEOUT;
        (void)cl_node_topo_wait(n, seen, (uint32_t)(end - now < 100 ? end - now : 100));
    }
}

int pr_cluster_tx_route(pr_conn *c, cl_topo *t, int op, st_cache *sc, const uint8_t *kp,
                        const uint8_t *kend, int nkeys, int pairs, em_buf *out)
{
    int owner;
    /* read = 0: a transaction reads at the primary, where its locks are */
    int rc = route_keys(c, t, sc, 0, kp, kend, nkeys, pairs, &owner);
    if (rc == EM_AGAIN)
        return pr_fail(c, PR_ST_FAILED, "No node owns this key's partition now (the cluster is "
                       "deciding new owners); retry");
    if (rc)
        return rc == EM_NOMEM || rc == PR_ST_FAILED ? rc
                                                    : pr_fail(c, PR_ST_FAILED, "Invalid key: %s",
                                                              em_strerror(rc));
    if (owner == -2)
        return split(c, op, t, sc, 0, kp, kend, nkeys, pairs, out);
    if (owner < 0)
        owner = t->self;
    if ((rc = pr_txc_touch(c, t->m[owner].id)) != 0 ||
        (rc = pr_txc_wrap(c, c->req_body, c->req_len, &c->txenv)) != 0)
        return rc;
    return pr_cluster_tx_run(c, t->m[owner].id, owner == t->self, c->txenv.p, c->txenv.len, out);
}

/* ---- origin request ids (cluster/cl_rid.h) ---- */

/* rid_op: the single-key writes a forwarder names with an origin request
 * id, which PR_OP_RID_CALL runs once.  Reads need none (they change nothing); batches are
 * split per owner and keep the re-run rule of idempotent ops. */
static int rid_op(int op)
{
    switch (op) {
    case 1001: case 1002: case 1005: case 1006: case 1007: case 1008: case 1009:
    case 1010: case 1014: case 1016: case 1017:
        return 1;
    default:
        return 0;
    }
}

void pr_server_set_rids(pr_server *s, struct cl_rids *w)
{
    uint64_t o = 0;
    if (w && getrandom(&o, sizeof o, 0) != (ssize_t)sizeof o)
        o = em_now_ns() ^ ((uint64_t)getpid() << 40);
    s->rid_origin = o;
    s->rids = w;
}

/* rid_envelope builds, in c->rid_env, the request c handles under a new
 * origin request id: PR_OP_RID_CALL, the request's own id, origin,
 * sequence, the request. */
static int rid_envelope(pr_conn *c)
{
    em_buf *b = &c->rid_env;
    em_buf_reset(b);
    uint64_t seq = atomic_fetch_add_explicit(&c->srv->rid_seq, 1, memory_order_relaxed) + 1;
    int rc = em_buf_put_le16(b, PR_OP_RID_CALL);
    if (!rc)
        rc = em_buf_append(b, c->req_body + 2, 8);
    if (!rc)
        rc = em_buf_put_le64(b, c->srv->rid_origin);
    if (!rc)
        rc = em_buf_put_le64(b, seq);
    if (!rc)
        rc = em_buf_append(b, c->req_body, c->req_len);
    return rc;
}

/* rid_here runs c->rid_env on this node, as a forwarded request: 0 (the
 * reply's payload appended to out), its error, or EM_STALE (this node is
 * not the key's owner in its own topology either). */
static int rid_here(pr_conn *c, em_buf *resp, em_buf *out)
{
    if (!c->sub && !(c->sub = pr_fwd_conn_new(c->srv)))
        return EM_NOMEM;
    em_buf_reset(resp);
    int rc = pr_exec_request(c->sub, c->rid_env.p, c->rid_env.len, resp);
    if (rc)
        return rc;
    if (pr_conn_take_stale(c->sub))
        return EM_STALE;
    return parse_reply(c, resp->p, resp->len, out);
}

/* applied_reply: the reply of a write that took effect on a former
 * primary, rebuilt from what its update told this copy. */
static int applied_reply(pr_conn *c, uint16_t op, em_buf *out)
{
    switch (op) {
    case 1001: case 1014:
        return 0;                   /* no payload */
    case 1002: case 1009: case 1010: case 1016: case 1017:
        return pr_put_bool(out, 1); /* the condition held: it took effect */
    case 1008:
        return em_buf_put_u8(out, 101);     /* it stored: no previous value */
    default:
        return pr_fail(c, PR_ST_FAILED, "The request ran on the key's former primary, which "
                       "failed before answering: it took effect (its update reached this "
                       "node) and was not run again, but its previous value was not kept; "
                       "read the key for its current value");
    }
}

/* owner_probe decodes the forwarded write and checks that this node is its
 * key's primary (the op's own check, nothing run): 0, or the reply that
 * sends the forwarder to map it again. */
static int owner_probe(pr_conn *c, const uint8_t *body, size_t len)
{
    const uint8_t *ob = c->req_body;
    size_t ol = c->req_len;
    em_buf *resp = &c->rid_resp;
    em_buf_reset(resp);
    c->owner_probe = 1;
    c->probe_ok = c->probe_unsure = 0;
    int rc = pr_exec_request(c, body, len, resp);
    int ok = c->probe_ok;
    c->owner_probe = c->probe_ok = c->probe_unsure = 0;
    c->req_body = ob;
    c->req_len = ol;
    if (rc == EM_NOMEM)
        return rc;
    if (c->stale || !ok) {
        /* Not the owner here, or refused before the ownership check (the
         * partition lost, no owner decided yet, the cluster inactive): the
         * forwarder maps it again and asks the owner it finds. */
        c->stale = 1;
        return pr_fail(c, PR_ST_FAILED, "This node does not own the key in its topology");
    }
    return 0;
}

/* The forwarder waits FORWARD_TIMEOUT_MS for an answer: a retry waiting
 * for its first run answers before that. */
#define RID_WAIT_MS (FORWARD_TIMEOUT_MS - 1000)

int pr_op_rid_call(pr_conn *c, pr_rd *r, em_buf *out)
{
    if (r->n - r->pos < 16 + 10)
        return pr_bad_request(c, EM_TRUNCATED);
    cl_rid id = { em_ld64(r->p + r->pos), em_ld64(r->p + r->pos + 8) };
    const uint8_t *body = r->p + r->pos + 16;
    size_t len = r->n - r->pos - 16;
    int op = em_ld16(body);
    if (!rid_op(op))
        return pr_fail(c, PR_ST_FAILED, "Malformed forwarded write (op %d)", op);
    cl_rids *w = c->srv->rids;
    if (w) {
        cl_rid_res res;
        switch (cl_rids_claim(w, id, (uint16_t)op, c->no_wait ? 0 : RID_WAIT_MS, &res)) {
        case CL_RID_DONE:
            if (res.status)
                return pr_fail(c, res.status, "%.*s", (int)res.len, (const char *)res.data);
            if (res.big)
                return pr_fail(c, PR_ST_FAILED, "The request ran on the key's owner, which lost "
                               "the link before answering: it took effect and was not run "
                               "again, but its reply was too large to keep; read the key");
            return em_buf_append(out, res.data, res.len);
        case CL_RID_APPLIED:
            /* Learned from a stream, never answered: the write may have
             * been refused by another owner (a primary deposed while it
             * ran).  Only the key's primary here, whose copy every other
             * one follows, may say it took effect; elsewhere the forwarder
             * maps it again.  Not a primary the exchange has still to
             * confirm (the last one left: a copy with a higher counter may
             * be chosen) nor one catching up (it reports counter 0 to the
             * exchange): a copy lacking this write could be made primary,
             * and this one would then merge from it and drop the write it
             * had just acknowledged.  The forwarder asks again once the
             * exchange decided, or the copy caught up. */
            {
                int prc = owner_probe(c, body, len);
                return prc ? prc : applied_reply(c, res.op, out);
            }
        case CL_RID_BUSY:
            if (c->no_wait) {
                c->handover = 1;    /* to a thread that may wait for the first run */
                return pr_fail(c, PR_ST_FAILED, "Handed over");
            }
            return pr_fail(c, PR_ST_FAILED, "The request still runs on the key's owner (its "
                           "first attempt lost the link); it may or may not take effect");
        default:
            break;                  /* CL_RID_NEW: ours to run */
        }
    }
    const uint8_t *ob = c->req_body;
    size_t ol = c->req_len;
    em_buf *resp = &c->rid_resp;
    em_buf_reset(resp);
    cl_rid_set_current(&id, (uint16_t)op);
    int rc = pr_exec_request(c, body, len, resp);
    int effect = cl_rid_effect();
    cl_rid_set_current(NULL, 0);
    c->req_body = ob;
    c->req_len = ol;
    size_t at = out->len;
    if (!rc)
        rc = parse_reply(c, resp->p, resp->len, out);
    else if (rc != EM_NOMEM)
        rc = pr_fail(c, PR_ST_FAILED, "Request failed: %s", em_strerror(rc));
    if (w && c->ack_deferred) {
        /* recorded once its acks settle (pr_fwd_ack_result) */
        c->ack_named = 1;
        c->ack_effect = effect;
        c->ack_rid_origin = id.origin;
        c->ack_rid_seq = id.seq;
    } else if (w) {
        if (!rc)
            cl_rids_finish(w, id, effect, 0, out->p + at, out->len - at);
        else    /* refused as stale: it did not run (a retry runs it) */
            cl_rids_finish(w, id, effect && !c->stale, rc > 0 ? rc : PR_ST_FAILED,
                           (const uint8_t *)c->msg, strlen(c->msg));
    }
    uint32_t ex = c->srv->opt.exit_after_writes;
    if (ex && effect &&
        atomic_fetch_add_explicit(&c->srv->rid_ran, 1, memory_order_relaxed) + 1 == ex) {
        /* Tests only: fail this node now, the write applied and replicated,
         * its reply not sent (a wait for its acks handed over is done
         * here: the ticket is still this thread's). */
        if (c->ack_deferred)
            (void)cl_repl_finish(c->srv->opt.repl);
        static const char m[] = "exit_after_writes: exiting after a forwarded write ran\n";
        (void)!write(2, m, sizeof m - 1);
        _exit(9);
    }
    return rc;
}

void pr_test_hold(const char *file, const char *what)
{
    if (access(file, F_OK) != 0)
        return;
    EM_WARN("%s waits while %s exists", what, file);
    for (int i = 0; i < 6000 && access(file, F_OK) == 0; i++) {
        struct timespec ts = { 0, 10 * 1000000L };
        nanosleep(&ts, NULL);
    }
}

int pr_cluster_route(pr_conn *c, int op, st_cache *sc, const uint8_t *kp, const uint8_t *kend,
                     int nkeys, int pairs, em_buf *out, int *done)
{
    *done = 0;
    cl_topo *t = cl_node_topo_acquire(c->srv->opt.cluster);
    /* The request's answer is in (it was forwarded without a wait): its
     * first forward takes it, whatever this node's view is now - as if the
     * loop had waited for it - and only what the answer asks for (map
     * again, look again) goes through the checks and the mapping below. */
    int answered = afwd_mine(c);
    if (answered)
        goto route;
    if (t->self < 0 || cl_node_segmented(c->srv->opt.cluster)) {
        /* Not a member (still joining, or failed by the others): serving
         * its own store would split the cluster's data. */
        cl_node_topo_release(t);
        return pr_fail(c, PR_ST_FAILED, "This node is not a member of the cluster now (it is "
                       "joining, or the others failed it; restart it to rejoin): use another node");
    }
    if (!cl_node_lease_wait(c->srv->opt.cluster)) {
        cl_node_topo_release(t);
        return pr_fail(c, PR_ST_FAILED, "This node has no lease: it is cut off from the "
                       "cluster's majority (no leader reachable) and serves no cache "
                       "operations until it is back; use another node");
    }
    if (t->n <= 1) {
        cl_node_topo_release(t);
        return 0;
    }
    if (!kp) {
        int rc = 0;
        if (op == 1020 || op == 1013 || op == 1019)
            rc = fan_out(c, op, t);
        cl_node_topo_release(t);
        return rc;
    }
route:;
    int rc = 0;
    int read = op == 1000 || op == 1003 || op == 1011 || op == 1012;
    em_buf *resp = &c->fwd_resp;    /* reused: a forwarded op allocates nothing */
    int remaps = 0, lost_synced = 0;
    int named = afwd_named(c);      /* c->rid_env holds the write under its id */
    for (int tries = 0;; tries++) {
        int owner;
        cl_meta_uuid to;
        uint64_t seen;
        size_t at = out->len;
        if (!tries && answered) {
            to = c->afwd->to;
            seen = cl_topo_index(t);
            cl_node_topo_release(t);
            goto ask;
        }
        if ((rc = route_keys(c, t, sc, read, kp, kend, nkeys, pairs, &owner)) == EM_AGAIN) {
            /* A partition without an owner now: every owner left and the
             * exchange has not committed new ones yet.  Map again on the
             * next topology (bounded like a stale owner). */
            cl_node_topo_release(t);
            if (tries == STALE_TRIES) {
                rc = pr_fail(c, PR_ST_FAILED, "No node owns this key's partition now (the "
                             "cluster is deciding new owners); retry");
                *done = 1;
                break;
            }
            struct timespec ts = { 0, 10 * 1000000L };
            nanosleep(&ts, NULL);
            t = cl_node_topo_acquire(c->srv->opt.cluster);
            continue;
        }
        if (rc == PR_ST_FAILED && c->lost_refused && !lost_synced && !c->forwarded) {
            /* A lost partition: a reset that completed through another
             * node is committed but may not be applied here yet.  Catch up
             * with the leader once and map again before refusing, so a
             * reset is in effect on every node once it returned (Ignite's
             * completes with its exchange, everywhere). */
            c->lost_refused = 0;
            lost_synced = 1;
            cl_node_topo_release(t);
            (void)cl_node_sync(c->srv->opt.cluster, LOST_SYNC_MS);
            t = cl_node_topo_acquire(c->srv->opt.cluster);
            continue;
        }
        c->lost_refused = 0;
        if (rc) {
            cl_node_topo_release(t);
            if (rc != EM_NOMEM && rc != PR_ST_FAILED)
                rc = pr_fail(c, PR_ST_FAILED, "Invalid key: %s", em_strerror(rc));
            break;
        }
        if (owner == -2) {
            rc = split(c, op, t, sc, read, kp, kend, nkeys, pairs, out);
            cl_node_topo_release(t);
            *done = 1;
            break;
        }
        if ((owner < 0 || owner == t->self) && !named) {
            cl_node_topo_release(t);
            if (!read && c->srv->opt.write_hold[0])
                pr_test_hold(c->srv->opt.write_hold, "write_hold: a write mapped here");
            break;                  /* run here */
        }
        if (owner < 0 || owner == t->self) {
            /* A named write re-mapped to this node (its owner failed and
             * this node's copy took over): it runs here under its id, as
             * the owner would run it, so a first run that reached this
             * copy is not run again. */
            cl_node_topo_release(t);
            rc = rid_here(c, resp, out);
            *done = 1;
            goto stale;
        }
        to = t->m[owner].id;
        seen = cl_topo_index(t);
        cl_node_topo_release(t);
        /* Every single-key write is named, PUT and CLEAR_KEY too: run
         * again, an idempotent write could overwrite one acknowledged in
         * between.  A copy that missed its first run loads again
         * (cl_rebal's stale copies, the exchange's demotions). */
        if (!named && nkeys == 1 && rid_op(op) && c->srv->rids) {
            if ((rc = rid_envelope(c)) != 0) {
                *done = 1;
                break;
            }
            named = 1;
        }
    ask:
        /* A named write may always be re-mapped (bounded): the owner that
         * ran it answers again from its window, or a copy that took over
         * does. */
        c->route_idem = (named || pr_cluster_idempotent(op)) && remaps < REMAP_TRIES;
        c->route_remap = remaps < REMAP_TRIES;
        const uint8_t *ob = c->req_body;
        size_t ol = c->req_len;
        if (named) {
            c->req_body = c->rid_env.p;
            c->req_len = c->rid_env.len;
        }
        if (!tries && !remaps && afwd_start(c, to, named, ol) == 0)
            rc = PR_PARK;           /* the answer wakes it (above) */
        else
            rc = ask(c, to, resp, out);
        c->req_body = ob;
        c->req_len = ol;
        c->route_idem = c->route_remap = 0;
        *done = 1;
        if (rc == PR_PARK)
            return rc;
        if (rc == EM_CLOSED) {
            /* The owner's link went down before it answered, and the
             * request may run twice harmlessly (or it was never sent):
             * wait for a topology without that owner (or its link back),
             * then map again, a bounded number of times - invisible to the
             * client, as Ignite's remap is. */
            out->len = at;
            *done = 0;
            remaps++;
            uint64_t end = em_now_ms() + REMAP_WAIT_MS;
            for (;;) {
                t = cl_node_topo_acquire(c->srv->opt.cluster);
                int member = 0;
                for (uint32_t i = 0; i < t->n; i++)
                    member |= cl_meta_uuid_eq(t->m[i].id, to);
                if (!member || cl_node_link_up(c->srv->opt.cluster, to) || em_now_ms() >= end)
                    break;
                seen = cl_topo_index(t);
                cl_node_topo_release(t);
                (void)cl_node_topo_wait(c->srv->opt.cluster, seen, 200);
            }
            continue;
        }
    stale:
        if (rc != EM_STALE)
            break;
        /* The member asked is not the key's owner in its own topology: one
         * of the two views is behind.  Look again once ours may have moved
         * on (bounded: a topology change completes within a heartbeat or
         * two, a failure within the failure detection timeout). */
        out->len = at;
        *done = 0;
        if (tries == STALE_TRIES) {
            rc = pr_fail(c, PR_ST_FAILED, "The owner of this key is changing (topology change "
                         "in progress); retry");
            *done = 1;
            break;
        }
        struct timespec ts = { 0, 10 * 1000000L };
        nanosleep(&ts, NULL);
        t = cl_node_topo_acquire(c->srv->opt.cluster);
    }
    /* The key's owner found it locked by a transaction: the request waits
     * here, parked, as it would for a lock of this node's, and runs again
     * when the owner says locks were released (pr_txc_wake_waiters) or at
     * the next timer scan. */
    if (rc == PR_ST_TXC_WAIT)
        return PR_PARK;
    return rc;
}

int pr_cluster_reroute(pr_conn *c, int op, st_cache *sc, const uint8_t *kp, const uint8_t *kend,
                       int nkeys, int pairs, em_buf *out, int *done)
{
    /* The topology that moved the primary may not have reached this node
     * yet (the refusing owner applied it first): wait for it, bounded. */
    cl_node *n = c->srv->opt.cluster;
    cl_topo *t = cl_node_topo_acquire(n);
    uint64_t seen = cl_topo_index(t);
    cl_node_topo_release(t);
    uint64_t end = em_now_ms() + REROUTE_WAIT_MS;
    c->in_loop = 0;                 /* it ran here once: forward it with a wait */
    for (;;) {
        *done = 0;
        int rc = pr_cluster_route(c, op, sc, kp, kend, nkeys, pairs, out, done);
        if (*done || rc || em_now_ms() >= end)
            return rc;          /* not done: this node is still the primary here */
        (void)cl_node_topo_wait(n, seen, 50);
        t = cl_node_topo_acquire(n);
        seen = cl_topo_index(t);
        cl_node_topo_release(t);
    }
}

int pr_cluster_owner_check(pr_conn *c, int op, st_cache *sc, const uint8_t *kp,
                           const uint8_t *kend, int nkeys, int pairs)
{
    int owner, self, rc;
    int read = op == 1000 || op == 1003 || op == 1011 || op == 1012;
    for (int waited = 0;; waited = 1) {
        cl_topo *t = cl_node_topo_acquire(c->srv->opt.cluster);
        owner = -1;
        rc = 0;
        if (t->n > 1 && t->self >= 0)
            rc = route_keys(c, t, sc, read, kp, kend, nkeys, pairs, &owner);
        else if (t->self >= 0)
            owner = t->self;    /* the only member: every key's owner */
        self = t->self;
        int decided = rc != EM_AGAIN || cl_topo_has_owners(t, st_cache_id(sc), st_cache_parts(sc));
        cl_node_topo_release(t);
        if (decided || waited)
            break;
        /* A cache's first decision the forwarder applied and this node
         * not yet (they apply the same commit a moment apart): wait for it
         * here, bounded, rather than send the request back. */
        (void)pr_cluster_await_owners(c->srv, sc, OWNERS_AWAIT_MS);
    }
    if (rc == EM_AGAIN) {
        /* No owner here: every owner left since the forwarder mapped, or
         * the first decision is still not here.  Run here, a FULL_SYNC
         * write would stream to nobody. */
        c->stale = 1;
        return pr_fail(c, PR_ST_FAILED, "This node has no owner for the key in its topology");
    }
    if (rc == PR_ST_FAILED && c->lost_refused) {
        /* Lost here, not at the forwarder (it refuses a lost key itself):
         * one view is behind - a reset-lost this node has not applied yet
         * (it cannot wait for the leader on the transport thread), or a
         * loss the forwarder has not seen.  The forwarder looks again,
         * bounded, until the views agree. */
        c->lost_refused = 0;
        c->stale = c->forwarded;
    }
    if (rc)
        return rc == EM_NOMEM || rc == PR_ST_FAILED ? rc
                                                    : pr_fail(c, PR_ST_FAILED, "Invalid key: %s",
                                                              em_strerror(rc));
    if (owner == self && c->owner_probe && c->probe_unsure) {
        c->stale = 1;
        return pr_fail(c, PR_ST_FAILED, "The owner of this key is changing (topology change "
                       "in progress); retry");
    }
    if (owner == self || (owner == -1 && !c->owner_probe))
        return 0;               /* a probe needs this node named the owner */
    c->stale = 1;
    return pr_fail(c, PR_ST_FAILED, "This node does not own the key in its topology");
}

int pr_conn_take_stale(pr_conn *c)
{
    int s = c->stale;
    c->stale = 0;
    return s;
}

pr_conn *pr_fwd_conn_new(pr_server *s)
{
    pr_conn *c = pr_conn_new(s);
    if (!c)
        return NULL;
    /* As fwd_conn: decoded as a 1.7.0 client's request, never routed. */
    c->ready = 1;
    c->ver = PR_VER(1, 7, 0);
    c->forwarded = 1;
    return c;
}

void pr_conn_set_origin(pr_conn *c, int has, uint64_t msb, uint64_t lsb)
{
    c->has_from = has != 0;
    c->from[0] = msb;
    c->from[1] = lsb;
}

int pr_exec_on(pr_conn *c, const uint8_t *body, size_t len, em_buf *resp)
{
    return pr_exec_request(c, body, len, resp);
}

void pr_server_set_repl(pr_server *s, struct cl_repl *r)
{
    s->opt.repl = r;
}

void pr_server_set_take(pr_server *s, struct cl_take *k)
{
    s->opt.take = k;
}

struct st_store *pr_server_store(pr_server *s) { return s->st; }

int pr_exec_forward(pr_server *s, const uint8_t *body, size_t len, em_buf *resp)
{
    if (!atomic_load_explicit(&s->cluster_ready, memory_order_acquire) || !s->fwd_conn)
        return EM_UNSUPPORTED;
    return pr_exec_request(s->fwd_conn, body, len, resp);
}

int pr_fwd_read_inline(pr_server *s, const uint8_t *body, size_t len)
{
    if (len < 15)
        return 0;
    int op = em_ld16(body);
    if (op != 1000 && op != 1003 && op != 1011 && op != 1012)
        return 0;
    if (body[14])
        return 0;                   /* a transaction (its locks may make it wait), or an
                                       expiry policy (a read may then write: the WAL) */
    st_cache *c = st_cache_find(s->st, (int32_t)em_ld32(body + 10));
    /* not started here yet: a worker waits for the metadata group's entry */
    if (!c || st_cache_destroyed(c))
        return 0;
    const st_cache_config *cfg = st_cache_cfg(c);
    return cfg->atomicity_mode != ST_ATOMICITY_TRANSACTIONAL &&
           (!cfg->has_expiry || cfg->expiry.access_ms < 0);
}

int pr_fwd_write_inline(pr_server *s, const uint8_t *body, size_t len)
{
    /* a named single-key write: PR_OP_RID_CALL, request id, origin id,
     * then the write (op, request id, cache id, flags, key, ...) */
    if (len < 26 + 15 || em_ld16(body) != PR_OP_RID_CALL || s->opt.exit_after_writes)
        return 0;
    const uint8_t *w = body + 26;
    if (!rid_op(em_ld16(w)) || w[14])
        return 0;                   /* a transaction's, or with an expiry policy */
    st_cache *c = st_cache_find(s->st, (int32_t)em_ld32(w + 10));
    if (!c || st_cache_destroyed(c))
        return 0;
    return st_cache_cfg(c)->atomicity_mode != ST_ATOMICITY_TRANSACTIONAL;
}

int pr_fwd_handover(pr_server *s)
{
    int h = s->fwd_conn && s->fwd_conn->handover;
    if (h)
        s->fwd_conn->handover = 0;
    return h;
}

int pr_fwd_take_ack_wait(pr_server *s, pr_fwd_ack *info)
{
    return s->fwd_conn && pr_conn_take_ack_wait(s->fwd_conn, info);
}

int pr_fwd_stale(pr_server *s)
{
    return s->fwd_conn && pr_conn_take_stale(s->fwd_conn);
}

/* ---- a new group seeded with what this node restored ----------------------- */

/* A seed collects entries [u32 length][entry] first (under the store's and
 * the registry's locks), then proposes them one by one. */
typedef struct seed_ctx { em_buf entries, tmp; int rc; bin_registry *base; } seed_ctx;

static int seed_add(seed_ctx *x)
{
    size_t at = x->entries.len;
    if (em_buf_put_le32(&x->entries, 0) || em_buf_append(&x->entries, x->tmp.p, x->tmp.len))
        return EM_NOMEM;
    em_st32(x->entries.p + at, (uint32_t)x->tmp.len);
    return 0;
}

static void seed_cache(void *arg, st_cache *sc)
{
    seed_ctx *x = arg;
    if (x->rc || st_cache_destroyed(sc))
        return;
    em_buf props = EM_BUF_INIT;
    em_buf_reset(&x->tmp);
    x->rc = pr_cfg_encode_props(st_cache_cfg(sc), &props);
    if (!x->rc)
        x->rc = cl_meta_enc_cache_start(&x->tmp, st_cache_id(sc), props.p, props.len);
    if (!x->rc)
        x->rc = seed_add(x);
    em_buf_free(&props);
}

static int seed_type(void *arg, const bin_type *t)
{
    seed_ctx *x = arg;
    if (x->base && bin_registry_get(x->base, t->type_id))
        return 0;                   /* predefined: every node has it */
    em_buf rec = EM_BUF_INIT;
    em_buf_reset(&x->tmp);
    int rc = em_buf_put_u8(&rec, 1) ? EM_NOMEM : bin_meta_encode(t, &rec);
    if (!rc)
        rc = cl_meta_enc_type_put(&x->tmp, t->type_id, rec.p, rec.len);
    if (!rc)
        rc = seed_add(x);
    em_buf_free(&rec);
    return rc;
}

static int seed_name(void *arg, uint8_t platform, int32_t type_id, const char *name, size_t len)
{
    seed_ctx *x = arg;
    em_buf rec = EM_BUF_INIT;
    em_buf_reset(&x->tmp);
    int rc = em_buf_put_u8(&rec, 2) || em_buf_put_u8(&rec, platform) ||
             em_buf_put_le32(&rec, (uint32_t)type_id) ||
             em_buf_append(&rec, name, len) ? EM_NOMEM : 0;
    if (!rc)
        rc = cl_meta_enc_type_put(&x->tmp, ~type_id, rec.p, rec.len);
    if (!rc)
        rc = seed_add(x);
    em_buf_free(&rec);
    return rc;
}

int pr_cluster_seed(pr_server *s, uint32_t timeout_ms, uint32_t *proposed)
{
    seed_ctx x = { EM_BUF_INIT, EM_BUF_INIT, 0, bin_registry_new() };
    *proposed = 0;
    st_cache_each(s->st, seed_cache, &x);
    int rc = x.base ? x.rc : EM_NOMEM;
    if (!rc)
        rc = bin_registry_each(s->reg, seed_type, seed_name, &x);
    for (size_t at = 0; !rc && at + 4 <= x.entries.len;) {
        uint32_t n = em_ld32(x.entries.p + at);
        rc = cl_node_propose(s->opt.cluster, x.entries.p + at + 4, n, timeout_ms);
        if (!rc)
            (*proposed)++;
        else if (rc != EM_TIMEOUT && rc != EM_NOTLEADER && rc != EM_LOSTLEADER &&
                 rc != EM_NOMEM && rc != EM_CLOSED)
            rc = 0;     /* refused for good (a cache there already under another
                           configuration - the group's stands - or past a bound) */
        at += 4 + (size_t)n;
    }
    em_buf_free(&x.entries);
    em_buf_free(&x.tmp);
    bin_registry_free(x.base);
    return rc;
}

int pr_server_adopt_state(pr_server *s, int state)
{
    return pr_change_state(s, state);
}

void pr_cluster_topology(pr_server *s, uint64_t major, uint32_t minor)
{
    atomic_store_explicit(&s->topo_ver, major << 32 | minor, memory_order_relaxed);
}

/* ---- the exchange's view of this node ---- */

typedef struct groups_ctx { cl_plan_group *out; uint32_t cap, n; cl_node *node; } groups_ctx;

static void group_one(void *arg, st_cache *sc)
{
    groups_ctx *g = arg;
    const st_cache_config *cfg = st_cache_cfg(sc);
    if (st_cache_destroyed(sc) || (cfg->cache_mode != 1 && cfg->cache_mode != 2))
        return;
    /* Only caches the metadata group has started: a persistent node's
     * restored caches are its own until then (the node creating a new
     * group puts them in once the group waits, INACTIVE, for its
     * baseline; an exchange placing them before would put every partition
     * on it alone). */
    if (g->node && !cl_node_cache_crc(g->node, st_cache_id(sc)))
        return;
    if (g->n < g->cap)
        g->out[g->n] = cl_plan_group_of(cfg, st_cache_id(sc), st_cache_parts(sc));
    g->n++;
}

uint32_t pr_cluster_groups(pr_server *s, cl_node *node, cl_plan_group *out, uint32_t cap)
{
    groups_ctx g = { out, cap, 0, node };
    st_cache_each(s->st, group_one, &g);
    return g.n;
}

int pr_cluster_part_info(pr_server *s, int32_t grp, uint32_t part, uint64_t *cntr, uint64_t *size)
{
    st_cache *sc = st_cache_find(s->st, grp);
    return sc ? st_part_info(sc, part, cntr, size) : EM_NOCACHE;
}

void pr_server_set_pme(pr_server *s, cl_pme *pme) { s->pme = pme; }

void pr_server_set_behind(pr_server *s, pr_behind_fn fn, void *arg)
{
    if (fn)                         /* kept when cleared: a reader may hold the old fn */
        s->behind_arg = arg;
    atomic_store_explicit(&s->behind, fn, memory_order_release);
}

int pr_op_reset_lost(pr_conn *c, pr_rd *r, em_buf *out)
{
    const uint8_t *name;
    size_t nl;
    if (pr_rd_str(c, r, &name, &nl) || !name)
        return pr_bad_request(c, EM_TRUNCATED);
    if (!c->srv->pme)
        return pr_fail(c, PR_ST_FAILED, "This node is not a cluster member: no partitions are "
                       "ever lost on a single node");
    int32_t id = em_hash_java_str(name, nl);
    uint32_t reset = 0;
    int rc = cl_pme_reset_lost(c->srv->pme, id, &reset);
    if (rc == EM_NOCACHE)
        return pr_fail(c, PR_ST_CACHE_NOT_FOUND, "Cache does not exist [name=%.*s]", (int)nl,
                       (const char *)name);
    if (rc == EM_NOMEM)
        return rc;
    if (rc)
        return pr_fail(c, PR_ST_FAILED, "Resetting the lost partitions failed: %s",
                       em_strerror(rc));
    return em_buf_put_le32(out, reset);
}
