/* srv_cluster.c - the cluster settings as a running cl_node (srv_cluster.h).
 *
 * The metadata group's directory: `cluster_dir` when set (kept), else a
 * fresh temporary directory removed at stop - a node's membership lasts one
 * process (a restarted node joins again with a new id, as in Ignite).
 */
#include "server/srv_cluster.h"

#include <ftw.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cluster/cl_hist.h"
#include "cluster/cl_meta_fsm.h"
#include "cluster/cl_node.h"
#include "cluster/cl_pme.h"
#include "cluster/cl_rebal.h"
#include "cluster/cl_repl.h"
#include "cluster/cl_rid.h"
#include "cluster/cl_take.h"
#include "net/tls.h"
#include "proto/proto.h"
#include "server/metrics.h"
#include "server/srv.h"
#include "server/srv_meta.h"
#include "util/clock.h"
#include "util/err.h"
#include "util/hash.h"
#include "util/log.h"
#include "util/mem.h"
#include "wal/wal.h"

/* Forwarded requests run on FWD_WORKERS threads, not on the transport's
 * loop thread that receives them: a write to a FULL_SYNC cache waits for
 * REPL_ACKs, which arrive on that very loop thread, so running it there
 * would wait for itself (and any slow request would stall every link).
 * The transport hands each FWD_REQ over (cl_node's on_call_later); a worker
 * runs it with its own protocol connection and answers with
 * cl_node_answer.  Job blocks are pooled: a steady stream of forwarded
 * requests allocates nothing here. */
#define FWD_WORKERS   2
#define FWD_QUEUE_MAX 4096          /* queued requests; past it: EM_BUSY */
#define FWD_POOL_MAX  64

/* A forwarded write's answer waiting for its FULL_SYNC acks
 * (proto_ackw.c): the worker moves on, and the thread that settles the wait
 * - the transport's, receiving the last ack - answers.  Pooled as jobs. */
#define ACK_POOL_MAX 256
typedef struct fwd_ack {
    cl_repl_await aw;
    struct srv_cluster *sc;
    cl_node_call_id id;
    pr_fwd_ack info;
    em_buf   frame;                 /* the reply, built as if acked */
    struct fwd_ack *next;
} fwd_ack;

typedef struct fwd_job {
    struct fwd_job *next;
    struct srv_cluster *sc;         /* write_posted's */
    cl_node_call_id id;
    int      local;                 /* this node's own job: nobody to answer */
    size_t   len, cap;
    uint8_t  body[];
} fwd_job;

struct srv_cluster {
    cl_node *node;
    _Atomic(cl_pme *) pme;
    _Atomic(cl_rebal *) rebal;
    cl_repl *_Atomic repl;
    cl_take *_Atomic take;          /* set before the others start, freed after they stop */
    net_tls_ctx *tls;               /* cluster_tls: the transport's peer context */
    pthread_t workers[FWD_WORKERS];
    int       nworkers;
    pthread_mutex_t q_mu;
    pthread_cond_t  q_cv;
    fwd_job  *q_head, *q_tail, *pool;
    _Atomic uint64_t w_allocs[FWD_WORKERS], w_bytes[FWD_WORKERS], w_frees[FWD_WORKERS];
    uint32_t  q_len, npool;
    int       q_stop;
    pthread_mutex_t ack_mu;
    fwd_ack  *ack_pool;             /* under ack_mu */
    uint32_t  nack_pool;
    pr_server *ps;
    int     (*durable)(void *arg);  /* wait for the WAL's group commit, or NULL */
    void     *durable_arg;
    char     tmpdir[256];         /* "" when cluster_dir was given */
    uint32_t f_drop, f_dup, f_delay;/* cluster_fault: per mille of replication frames */
    struct cl_rids *rids;           /* recent request ids (replication and proto) */
    em_buf    inline_resp;          /* pr_txc_inline answers (transport thread) */
    uint64_t f_rng;                 /* its generator (transport thread only) */
    uint64_t last_major;
    uint32_t last_minor, last_n;
    struct srv_meta *_Atomic meta;  /* a persistent node's metadata log, or NULL */
    em_buf    bl_saved;             /* the baseline entry last logged (metadata thread) */
    int       bl_seen;              /* ... a baseline was seen since start */
    int       bl_seeded, bl_wait, bl_state; /* restoring one (maintenance thread) */
    int       bl_adjust;            /* baseline_auto_adjust */
    uint32_t  bl_timeout_ms;
    uint64_t  bl_sig, bl_since_ms;  /* the members' signature, and since when (maintenance) */
    /* This node created the metadata group at start and has not yet put
     * its own restored cluster state into it (srv_cluster_maintain). */
    _Atomic int seeding;
    int       seeded;               /* ... its caches and types are in (maintenance thread) */
    int       node_gone;            /* stopping: the node stopped (srv_cluster_stop's thread) */
};

int srv_cluster_enabled(const srv_config *c)
{
    return c->seeds[0] || c->bootstrap;
}

static const char *state_name(int st)
{
    return st == CL_META_ACTIVE ? "ACTIVE" : st == CL_META_INACTIVE ? "INACTIVE"
                                                                    : "ACTIVE_READ_ONLY";
}

/* baseline_persist logs the baseline when it changed (metadata thread).
 * Not while this node seeds a new group (which has none yet), and a group
 * without one replaces a logged one only once this node saw one set in it
 * (a node joining a restarted cluster before its creator put it back). */
static void baseline_persist(srv_cluster *sc, const cl_topo *t)
{
    srv_meta *m = atomic_load(&sc->meta);
    if (!m || t->self < 0 || atomic_load(&sc->seeding) || (!t->nbl && !sc->bl_seen))
        return;
    sc->bl_seen |= t->nbl != 0;
    cl_meta_bytes ids[CL_META_MAX_MEMBERS > 64 ? 64 : CL_META_MAX_MEMBERS];
    cl_meta_bytes *v = t->nbl <= 64 ? ids : em_malloc(sizeof *v * t->nbl);
    if (!v)
        return;
    for (uint32_t i = 0; i < t->nbl; i++)
        v[i] = (cl_meta_bytes){ (const uint8_t *)t->bl[i], (uint32_t)strlen(t->bl[i]) };
    em_buf e = EM_BUF_INIT;
    if (cl_meta_enc_baseline(&e, v, t->nbl) == 0 &&
        (e.len != sc->bl_saved.len || memcmp(e.p, sc->bl_saved.p, e.len))) {
        int rc = srv_meta_append(m, SRV_META_BASELINE, e.p, e.len);
        if (rc)
            EM_ERROR("the baseline was not logged: %s", em_strerror(rc));
        else {
            em_buf_reset(&sc->bl_saved);
            (void)em_buf_append(&sc->bl_saved, e.p, e.len);
        }
    }
    em_buf_free(&e);
    if (v != ids)
        em_free(v);
}

/* on_topology: one log line per new topology version (metadata thread). */
static void on_topology(void *arg, const cl_topo *t)
{
    srv_cluster *sc = arg;
    baseline_persist(sc, t);
    cl_pme *pme = atomic_load(&sc->pme);
    if (pme)
        cl_pme_kick(pme);
    cl_rebal *rb = atomic_load(&sc->rebal);
    if (rb)
        cl_rebal_kick(rb);
    cl_take_topology(atomic_load(&sc->take));  /* first: who holds what, before waiters wake */
    cl_repl *r = atomic_load(&sc->repl);
    if (r)
        cl_repl_topology(r);
    /* The cluster's state is the metadata group's: a member that restored
     * another one (a persistent node's own last state) takes the group's -
     * except the node that created the group, until it has put its own
     * restored state there (srv_cluster_maintain). */
    int st = pr_server_state(sc->ps);
    if (t->self >= 0 && st != t->state && !atomic_load(&sc->seeding) &&
        pr_server_adopt_state(sc->ps, t->state) == 0)
        EM_INFO("cluster state %s: the cluster's (this node had %s)", state_name(t->state),
                state_name(st));
    if (t->major == sc->last_major && t->minor == sc->last_minor && t->n == sc->last_n)
        return;
    sc->last_major = t->major;
    sc->last_minor = t->minor;
    sc->last_n = t->n;
    pr_cluster_members(sc->ps, t);
    pr_cluster_topology(sc->ps, t->major, t->minor);
    EM_INFO("cluster topology %llu.%u: %u member%s, state %s%s",
            (unsigned long long)t->major, t->minor, t->n, t->n == 1 ? "" : "s",
            state_name(t->state), t->self >= 0 ? "" : " (without this node)");
}

/* on_entry / on_restore: what the metadata group applied, on this node. */
static void on_entry(void *arg, const cl_meta_entry *e)
{
    srv_cluster *sc = arg;
    int rc = pr_cluster_apply(sc->ps, e);
    if (rc)
        EM_ERROR("cluster: applying %s on this node failed: %s (this node now differs "
                 "from the cluster's metadata; restart it to rejoin)",
                 cl_meta_entry_name(e->type), em_strerror(rc));
}

static void on_restore(void *arg, const cl_meta_fsm *f)
{
    srv_cluster *sc = arg;
    int rc = pr_cluster_restore(sc->ps, f);
    if (rc)
        EM_ERROR("cluster: installing the metadata snapshot on this node failed: %s",
                 em_strerror(rc));
}

static fwd_job *job_get(srv_cluster *sc, size_t len)
{
    fwd_job *j = NULL;
    for (fwd_job **p = &sc->pool; *p; p = &(*p)->next)
        if ((*p)->cap >= len) {
            j = *p;
            *p = j->next;
            sc->npool--;
            return j;
        }
    size_t cap = len < 256 ? 256 : len;
    if ((j = em_malloc(sizeof *j + cap)) != NULL)
        j->cap = cap;
    return j;
}

/* job_put returns a block to the pool (or frees it past FWD_POOL_MAX). */
static void job_put(srv_cluster *sc, fwd_job *j)
{
    pthread_mutex_lock(&sc->q_mu);
    if (sc->npool < FWD_POOL_MAX) {
        j->next = sc->pool;
        sc->pool = j;
        sc->npool++;
        j = NULL;
    }
    pthread_mutex_unlock(&sc->q_mu);
    em_free(j);
}

/* enqueue hands a request to the workers (any thread: it never waits). */
static int enqueue(srv_cluster *sc, cl_node_call_id id, int local, const uint8_t *p, size_t n)
{
    pthread_mutex_lock(&sc->q_mu);
    if (sc->q_stop || sc->q_len >= FWD_QUEUE_MAX) {
        pthread_mutex_unlock(&sc->q_mu);
        return EM_BUSY;
    }
    fwd_job *j = job_get(sc, n);
    if (!j) {
        pthread_mutex_unlock(&sc->q_mu);
        return EM_NOMEM;
    }
    j->next = NULL;
    j->id = id;
    j->local = local;
    j->len = n;
    memcpy(j->body, p, n);
    if (sc->q_tail)
        sc->q_tail->next = j;
    else
        sc->q_head = j;
    sc->q_tail = j;
    sc->q_len++;
    pthread_cond_signal(&sc->q_cv);
    pthread_mutex_unlock(&sc->q_mu);
    return 0;
}

static void acked_cb(void *arg, int rc);

static fwd_ack *ack_get(srv_cluster *sc)
{
    pthread_mutex_lock(&sc->ack_mu);
    fwd_ack *a = sc->ack_pool;
    if (a) {
        sc->ack_pool = a->next;
        sc->nack_pool--;
    }
    pthread_mutex_unlock(&sc->ack_mu);
    if (!a && (a = em_calloc(1, sizeof *a)) != NULL) {
        a->sc = sc;
        a->aw.done = acked_cb;
        a->aw.arg = a;
    }
    return a;
}

static void ack_put(srv_cluster *sc, fwd_ack *a)
{
    pthread_mutex_lock(&sc->ack_mu);
    if (sc->nack_pool < ACK_POOL_MAX) {
        a->next = sc->ack_pool;
        sc->ack_pool = a;
        sc->nack_pool++;
        a = NULL;
    }
    pthread_mutex_unlock(&sc->ack_mu);
    if (a) {
        em_buf_free(&a->frame);
        em_free(a);
    }
}

static void acks_free(srv_cluster *sc)
{
    while (sc->ack_pool) {
        fwd_ack *a = sc->ack_pool;
        sc->ack_pool = a->next;
        em_buf_free(&a->frame);
        em_free(a);
    }
    sc->nack_pool = 0;
    pthread_mutex_destroy(&sc->ack_mu);
}

/* acked_cb: a forwarded write's acks settled with rc: answer it (the
 * block is back in the pool only after: its frame is the answer). */
static void acked_cb(void *arg, int rc)
{
    fwd_ack *a = arg;
    srv_cluster *sc = a->sc;
    int status = pr_fwd_ack_result(sc->ps, &a->info, rc, &a->frame);
    if (!sc->node_gone)
        (void)cl_node_answer(sc->node, a->id, status, a->frame.p, a->frame.len);
    ack_put(sc, a);
}

/* ack_later hands a forwarded write's answer (resp, swapped out) to the
 * wait for its acks (worker or transport thread). */
static void ack_later(srv_cluster *sc, cl_node_call_id id, const pr_fwd_ack *info,
                      em_buf *resp)
{
    cl_repl *r = atomic_load(&sc->repl);
    fwd_ack *a = ack_get(sc);
    if (!a) {
        /* (never a wait here: this may be the thread the acks arrive on) */
        int st = pr_fwd_ack_result(sc->ps, info, EM_NOMEM, resp);
        cl_repl_begin();
        (void)cl_node_answer(sc->node, id, st, resp->p, resp->len);
        return;
    }
    a->id = id;
    a->info = *info;
    em_buf t = a->frame;
    a->frame = *resp;
    *resp = t;
    int rc;
    if (cl_repl_await_start(r, &a->aw, &rc))
        acked_cb(a, rc);
}

/* on_call_later: a request another member forwarded, queued for a worker
 * (transport thread: it never waits here). */
/* run_here runs a forwarded request on the transport thread and answers
 * it, or hands it to a worker after all (pr_fwd_handover: a write whose
 * first run is still going, a batch read whose acks a deferred wait cannot
 * hold); a FULL_SYNC wait - a write's, or a read's of a write not acked
 * yet (cl_repl.c, reads on the primary) - is handed over; cl_node_answer's
 * result. */
static int run_here(srv_cluster *sc, cl_node_call_id id, const uint8_t *p, size_t n)
{
    em_buf_reset(&sc->inline_resp);
    (void)pr_fwd_stale(sc->ps);
    int rc = pr_exec_forward(sc->ps, p, n, &sc->inline_resp);
    if (pr_fwd_handover(sc->ps)) {
        if ((rc = enqueue(sc, id, 0, p, n)) != 0)  /* not queued: nobody else answers */
            (void)cl_node_answer(sc->node, id, rc, NULL, 0);
        return 0;
    }
    pr_fwd_ack ack;
    int later = pr_fwd_take_ack_wait(sc->ps, &ack);
    if (!rc && pr_fwd_stale(sc->ps))
        rc = EM_STALE;              /* not this node's to run: the sender looks again */
    if (later && !rc) {
        ack_later(sc, id, &ack, &sc->inline_resp);
        return 0;
    }
    if (later) {
        (void)pr_fwd_ack_result(sc->ps, &ack, rc, &sc->inline_resp);
        cl_repl_begin();
    }
    return cl_node_answer(sc->node, id, rc, sc->inline_resp.p, sc->inline_resp.len);
}

/* write_posted: a forwarded write, run on the transport's loop thread but
 * outside the transport callback that received it - a write takes the
 * streams' locks, which a callback (holding the node's life lock) must
 * never wait for. */
static void write_posted(void *arg, int cancelled)
{
    fwd_job *j = arg;
    srv_cluster *sc = j->sc;
    if (!cancelled) {
        /* the cache may have gone since (its wait would hold this thread) */
        if (pr_fwd_write_inline(sc->ps, j->body, j->len)) {
            (void)run_here(sc, j->id, j->body, j->len);
        } else {
            int rc = enqueue(sc, j->id, 0, j->body, j->len);
            if (rc)                 /* not queued: nobody else will answer it */
                (void)cl_node_answer(sc->node, j->id, rc, NULL, 0);
        }
    }
    job_put(sc, j);
}

/* on_call_later: a request another member forwarded (transport thread: it
 * never waits here).  A transaction part's question to its backups and a
 * read never block, so they run at once (a read of a write not acked yet
 * hands its wait over, as a write does); an ATOMIC write whose
 * FULL_SYNC wait is handed over runs on this thread too, right after
 * (write_posted); the rest are queued for a worker.  The first two would
 * otherwise queue behind workers that may wait for them, and all three
 * save the two wake-ups of a worker's hop. */
static int on_call_later(void *arg, cl_node_call_id id, const uint8_t *p, size_t n)
{
    srv_cluster *sc = arg;
    if (pr_txc_inline(p, n) || pr_fwd_read_inline(sc->ps, p, n))
        return run_here(sc, id, p, n);
    if (!sc->durable && pr_fwd_write_inline(sc->ps, p, n)) {
        pthread_mutex_lock(&sc->q_mu);
        fwd_job *j = sc->q_stop ? NULL : job_get(sc, n);
        pthread_mutex_unlock(&sc->q_mu);
        if (j) {
            j->sc = sc;
            j->id = id;
            j->local = 0;
            j->len = n;
            memcpy(j->body, p, n);
            if (cl_node_post(sc->node, write_posted, j) == 0)
                return 0;
            job_put(sc, j);
        }
    }
    return enqueue(arg, id, 0, p, n);
}

/* run_later: a request of this node's own (a transaction's recovery,
 * proto_txc.c) for a worker; if the queue is full, the next sweep asks
 * again. */
static void run_later(void *arg, const uint8_t *p, size_t n)
{
    cl_node_call_id none = { { 0, 0 }, 0 };
    (void)enqueue(arg, none, 1, p, n);
}

/* worker: runs forwarded requests; durable before it answers when the WAL
 * is in FSYNC mode, as a client's own reply would be.  A FULL_SYNC write's
 * answer waits for its acks without the worker (ack_later). */
typedef struct worker_arg { srv_cluster *sc; int i; } worker_arg;

static void *worker(void *arg)
{
    pthread_setname_np(pthread_self(), "em-fwd");
    srv_cluster *sc = ((worker_arg *)arg)->sc;
    int wi = ((worker_arg *)arg)->i;
    em_free(arg);
    pr_conn *c = pr_fwd_conn_new(sc->ps);
    em_buf resp = EM_BUF_INIT;
    pthread_mutex_lock(&sc->q_mu);
    for (;;) {
        while (!sc->q_head && !sc->q_stop)
            pthread_cond_wait(&sc->q_cv, &sc->q_mu);
        fwd_job *j = sc->q_head;
        if (!j)
            break;                  /* stopping, queue drained */
        sc->q_head = j->next;
        if (!sc->q_head)
            sc->q_tail = NULL;
        sc->q_len--;
        pthread_mutex_unlock(&sc->q_mu);
        em_buf_reset(&resp);
        int rc = EM_NOMEM;
        pr_fwd_ack ack;
        int later = 0;
        if (c) {
            pr_conn_set_origin(c, !j->local, j->id.from.msb, j->id.from.lsb);
            pr_conn_set_ack_defer(c, !j->local);
            rc = pr_exec_on(c, j->body, j->len, &resp);
            later = pr_conn_take_ack_wait(c, &ack);
        }
        if (!rc && pr_conn_take_stale(c))
            rc = EM_STALE;          /* not the owner here: the sender looks again */
        if (!rc && sc->durable)
            rc = sc->durable(sc->durable_arg);
        if (later && rc) {
            /* not answered as it ran: its request id records the failure,
             * and nothing waits for its acks */
            (void)pr_fwd_ack_result(sc->ps, &ack, rc, &resp);
            cl_repl_begin();
            later = 0;
        }
        cl_node_call_id id = j->id;
        int local = j->local;
        /* The block goes back before the answer leaves: the sender's next
         * request may arrive before this thread runs again. */
        job_put(sc, j);
        if (later)
            ack_later(sc, id, &ack, &resp);
        else if (!local)
            (void)cl_node_answer(sc->node, id, rc, resp.p, resp.len);
        em_mem_stats m = em_mem_thread();
        atomic_store_explicit(&sc->w_allocs[wi], m.allocs, memory_order_relaxed);
        atomic_store_explicit(&sc->w_bytes[wi], m.bytes, memory_order_relaxed);
        atomic_store_explicit(&sc->w_frees[wi], m.frees, memory_order_relaxed);
        pthread_mutex_lock(&sc->q_mu);
    }
    pthread_mutex_unlock(&sc->q_mu);
    em_buf_free(&resp);
    if (c)
        pr_conn_free(c);
    return NULL;
}

static void workers_stop(srv_cluster *sc)
{
    pthread_mutex_lock(&sc->q_mu);
    sc->q_stop = 1;
    pthread_cond_broadcast(&sc->q_cv);
    pthread_mutex_unlock(&sc->q_mu);
    for (int i = 0; i < sc->nworkers; i++)
        pthread_join(sc->workers[i], NULL);
    sc->nworkers = 0;
}

/* pool_free: the job and answer blocks, once nothing can use them (the
 * workers and the node stopped: a write posted to the transport comes back
 * cancelled). */
static void pool_free(srv_cluster *sc)
{
    while (sc->pool) {
        fwd_job *j = sc->pool;
        sc->pool = j->next;
        em_free(j);
    }
    acks_free(sc);
}

/* on_repl / on_tick: replication's frames and its periodic send. */
static void on_repl(void *arg, cl_net_link *l, cl_meta_uuid from, uint16_t type,
                    const uint8_t *p, size_t n)
{
    srv_cluster *sc = arg;
    if (type == CL_NET_MSG_REPL_TAKEOVER || type == CL_NET_MSG_REPL_TAKEN) {
        cl_take_on_frame(atomic_load(&sc->take), from, type, p, n);
        return;
    }
    cl_repl *r = atomic_load(&sc->repl);
    if (r)
        cl_repl_on_frame(r, l, from, type, p, n);
}

/* take_send_after: cl_take's answer, behind the stream to that member. */
static int take_send_after(void *arg, cl_meta_uuid to, uint16_t type, const void *p, size_t n)
{
    srv_cluster *sc = arg;
    cl_repl *r = atomic_load(&sc->repl);
    return r ? cl_repl_send_after(r, to, type, p, n) : EM_BUSY;
}

static void on_tick(void *arg)
{
    srv_cluster *sc = arg;
    cl_take_tick(atomic_load(&sc->take));
    cl_repl *r = atomic_load(&sc->repl);
    if (r)
        cl_repl_flush(r);
    pr_txc_sweep(sc->ps, run_later, sc);
}

static st_cache *find_cache(void *arg, int32_t id)
{
    srv_cluster *sc = arg;
    return pr_server_wait_cache(sc->ps, id);
}

/* other_frame: the frames the exchange does not take - rebalancing's, and
 * a member's word that locks a request of ours waited for were released
 * (the parked requests run again now). */
static int other_frame(void *arg, cl_meta_uuid from, uint16_t type, const uint8_t *p, size_t n)
{
    srv_cluster *sc = arg;
    if (type == CL_NET_MSG_TX_WAKE) {
        pr_server_tx_woken(sc->ps);
        return 0;
    }
    cl_rebal *rb = atomic_load(&sc->rebal);
    return rb ? cl_rebal_on_frame(rb, from, type, p, n) : 0;
}

/* The exchange's view of this node's caches. */
static uint32_t pme_groups(void *arg, cl_plan_group *out, uint32_t cap)
{
    srv_cluster *sc = arg;
    return pr_cluster_groups(sc->ps, sc->node, out, cap);
}

/* A copy found stale reports counter 0 and MOVING (CL_PLAN_BEHIND): the
 * exchange never makes it the primary while a whole one is left. */
static int pme_part_info(void *arg, int32_t grp, uint32_t part, uint64_t *cntr, uint64_t *size)
{
    srv_cluster *sc = arg;
    int rc = pr_cluster_part_info(sc->ps, grp, part, cntr, size);
    cl_rebal *rb = atomic_load(&sc->rebal);
    if (!rc && rb && cl_rebal_copy_is_stale(rb, grp, part)) {
        *cntr = 0;
        rc = CL_PLAN_BEHIND;
    }
    return rc;
}

/* A copy catching up serves no reads from backups (pr_server_set_behind). */
static int copy_behind(void *arg, int32_t cache, uint32_t part)
{
    cl_rebal *rb = atomic_load(&((srv_cluster *)arg)->rebal);
    return rb && cl_rebal_copy_is_stale(rb, cache, part);
}

/* The exchange found this node's copy, or another member's, behind a new
 * primary: it catches up (cl_rebal_copy_stale, here or there), and this
 * node, the coordinator, does not promote it primary meanwhile. */
/* pme_left: cl_pme_cfg.left - replication stops hearing the member. */
static void pme_left(void *arg, cl_meta_uuid member, uint64_t exch)
{
    srv_cluster *sc = arg;
    cl_repl *r = atomic_load(&sc->repl);
    if (r)
        cl_repl_member_left(r, member, exch);
}

static void pme_behind(void *arg, cl_meta_uuid member, int32_t grp, uint32_t part,
                       uint64_t exch)
{
    srv_cluster *sc = arg;
    cl_rebal *rb = atomic_load(&sc->rebal);
    if (rb)
        cl_rebal_note_behind(rb, member, grp, part, exch);
    cl_topo *t = cl_node_topo_acquire(sc->node);
    int self = t->self >= 0 && cl_meta_uuid_eq(t->m[t->self].id, member);
    cl_node_topo_release(t);
    if (self && rb) {
        cl_rebal_copy_stale(rb, grp, part, 0);
    } else if (!self) {
        uint8_t b[8];
        em_st32(b, (uint32_t)grp);
        em_st32(b + 4, part);
        (void)cl_node_send(sc->node, member, CL_NET_MSG_REBAL_STALE, b, sizeof b);
    }
}

/* cluster_fault, a test hook: drop, duplicate or delay (1-50 ms, so they
 * arrive out of order) the given percent of outgoing replication frames,
 * the faults the stream's retransmission must make harmless.  Other frames
 * pass: their own retries are tested by real kills and partitions. */
static int fault_parse(srv_cluster *sc, const char *spec)
{
    sc->f_rng = (uint64_t)em_now_ms() * 0x9e3779b97f4a7c15ull | 1;
    for (const char *p = spec; *p;) {
        char key[16];
        double pct;
        int used = 0;
        if (sscanf(p, "%15[a-z]=%lf%n", key, &pct, &used) != 2 || pct < 0 || pct > 100)
            return EM_CONFIG;
        uint32_t pm = (uint32_t)(pct * 10 + 0.5);
        if (!strcmp(key, "drop"))
            sc->f_drop = pm;
        else if (!strcmp(key, "dup"))
            sc->f_dup = pm;
        else if (!strcmp(key, "delay"))
            sc->f_delay = pm;
        else
            return EM_CONFIG;
        p += used;
        if (*p == ',')
            p++;
        else if (*p)
            return EM_CONFIG;
    }
    return sc->f_drop + sc->f_dup + sc->f_delay <= 1000 ? 0 : EM_CONFIG;
}

static int fault_fn(void *arg, uint64_t to_msb, uint64_t to_lsb, uint16_t type,
                    uint32_t *delay_ms)
{
    (void)to_msb;
    (void)to_lsb;
    srv_cluster *sc = arg;
    if (type != CL_NET_MSG_REPL_UPDATE && type != CL_NET_MSG_REPL_ACK)
        return CL_NET_PASS;
    sc->f_rng ^= sc->f_rng << 13;
    sc->f_rng ^= sc->f_rng >> 7;
    sc->f_rng ^= sc->f_rng << 17;
    uint32_t x = (uint32_t)(sc->f_rng % 1000);
    if (x < sc->f_drop)
        return CL_NET_DROP;
    if ((x -= sc->f_drop) < sc->f_dup)
        return CL_NET_DUP;
    if ((x -= sc->f_dup) < sc->f_delay) {
        *delay_ms = 1 + (uint32_t)(sc->f_rng >> 32) % 50;
        return CL_NET_DELAY;
    }
    return CL_NET_PASS;
}

/* on_refused: a peer refused in its handshake, or one that refused us. */
static void on_refused(void *arg, const char *peer, const char *why)
{
    (void)arg;
    EM_WARN("cluster: link with %s refused: %s", peer, why);
}

/* baseline_adjust: with baseline_auto_adjust, the coordinator sets a set
 * baseline to the members once they differ from it and have stayed the
 * same for the timeout (Ignite's baseline auto-adjust). */
static void baseline_adjust(srv_cluster *sc)
{
    cl_topo *t = cl_node_topo_acquire(sc->node);
    uint64_t sig = 0;
    int differ = t->nbl != t->n;
    for (uint32_t i = 0; i < t->n; i++) {
        sig = em_mix64(sig ^ em_crc32c(0, t->m[i].cid, strlen(t->m[i].cid)));
        differ |= !t->m[i].data;
    }
    uint64_t now = em_now_ms();
    if (!t->nbl || t->self < 0 || !differ) {
        sc->bl_since_ms = 0;
    } else if (!sc->bl_since_ms || sig != sc->bl_sig) {
        sc->bl_sig = sig;
        sc->bl_since_ms = now;
    } else if (now - sc->bl_since_ms >= sc->bl_timeout_ms) {
        cl_meta_bytes *ids = em_malloc(sizeof *ids * t->n);
        em_buf b = EM_BUF_INIT;
        int rc = ids ? 0 : EM_NOMEM;
        for (uint32_t i = 0; ids && i < t->n; i++)
            ids[i] = (cl_meta_bytes){ (const uint8_t *)t->m[i].cid,
                                      (uint32_t)strlen(t->m[i].cid) };
        if (!rc)
            rc = cl_meta_enc_baseline(&b, ids, t->n);
        if (!rc)
            rc = cl_node_propose(sc->node, b.p, b.len, 2000);
        em_buf_free(&b);
        em_free(ids);
        if (!rc) {
            EM_INFO("baseline auto-adjusted to the %u members (they stayed the same %u ms)",
                    t->n, sc->bl_timeout_ms);
            sc->bl_since_ms = 0;
        }
    }
    cl_node_topo_release(t);
}

/* propose_state puts cluster state st into the metadata group: 0 once
 * applied here. */
static int propose_state(srv_cluster *sc, int st)
{
    em_buf b = EM_BUF_INIT;
    int rc = cl_meta_enc_state(&b, st);
    if (!rc)
        rc = cl_node_propose(sc->node, b.p, b.len, 2000);
    em_buf_free(&b);
    return rc;
}

/* baseline_put (the node that created the group, while seeding, before
 * it puts the caches): puts the baseline it logged into the group; until
 * every baseline node is a member the cluster is INACTIVE (Ignite: a
 * persistent cluster activates once its baseline is back), so no exchange
 * places a partition before the nodes holding it are back.  1: asked
 * again on the next pass. */
static int baseline_put(srv_cluster *sc, int st)
{
    srv_meta *m = atomic_load(&sc->meta);
    const uint8_t *p;
    size_t n = 0;
    if (m)
        srv_meta_baseline(m, &p, &n);
    if (!n)
        return 0;
    if (!sc->bl_seeded) {
        if (cl_node_propose(sc->node, p, n, 2000))
            return 1;
        sc->bl_seeded = 1;
        sc->bl_state = st;
        EM_INFO("cluster: this node created the metadata group and put the baseline it "
                "restored there");
    }
    if (sc->bl_wait || sc->bl_state == CL_META_INACTIVE)
        return 0;
    cl_topo *t = cl_node_topo_acquire(sc->node);
    uint32_t missing = cl_topo_baseline_offline(t);
    cl_node_topo_release(t);
    if (!missing)
        return 0;
    if (propose_state(sc, CL_META_INACTIVE))
        return 1;
    (void)pr_server_adopt_state(sc->ps, CL_META_INACTIVE);
    sc->bl_wait = 1;
    EM_WARN("cluster INACTIVE until the %u missing baseline node%s join (then %s), or an "
            "operator sets the state or the baseline", missing, missing == 1 ? "" : "s",
            state_name(sc->bl_state));
    return 0;
}

/* baseline_restore (after baseline_put and the caches): while the cluster
 * waits for its baseline, 1; once every baseline node is back, *st is the
 * state to put back - unless an operator set another state or baseline
 * meanwhile. */
static int baseline_restore(srv_cluster *sc, int *st)
{
    if (!sc->bl_wait)
        return 0;
    cl_topo *t = cl_node_topo_acquire(sc->node);
    uint32_t missing = cl_topo_baseline_offline(t), nbl = t->nbl;
    int group = t->state;
    cl_node_topo_release(t);
    if (group != CL_META_INACTIVE || nbl == 0) {
        /* An operator activated the cluster or changed the baseline. */
        sc->bl_wait = 0;
        atomic_store(&sc->seeding, 0);
        (void)pr_server_adopt_state(sc->ps, group);
        EM_INFO("cluster: the baseline wait ended by an operator (state %s)", state_name(group));
        return 1;
    }
    if (missing)
        return 1;
    sc->bl_wait = 0;
    *st = sc->bl_state;
    EM_INFO("cluster: every baseline node is back: state %s", state_name(*st));
    return 0;
}

void srv_cluster_set_meta(srv_cluster *sc, srv_meta *m)
{
    if (sc)
        atomic_store(&sc->meta, m);
}

void srv_cluster_maintain(srv_cluster *sc)
{
    if (sc && sc->node && sc->bl_adjust && cl_node_is_leader(sc->node))
        baseline_adjust(sc);
    if (!sc || !sc->node || !atomic_load(&sc->seeding) || !cl_node_is_leader(sc->node))
        return;
    cl_topo *t = cl_node_topo_acquire(sc->node);
    int joined = t->self >= 0, group = t->state;
    cl_node_topo_release(t);
    int st = pr_server_state(sc->ps);
    if (!joined)
        return;
    if (baseline_put(sc, st))
        return;                     /* asked again on the next pass */
    /* Restored INACTIVE: so is the group before the caches go in (a new
     * group starts ACTIVE, and its exchanges would place them). */
    if (!sc->seeded && st == CL_META_INACTIVE && group != CL_META_INACTIVE) {
        if (propose_state(sc, CL_META_INACTIVE))
            return;
        group = CL_META_INACTIVE;
    }
    /* The caches and binary types it restored, before the state: a node
     * joining later learns them from the group as from a live cluster. */
    uint32_t n = 0;
    if (!sc->seeded) {
        if (pr_cluster_seed(sc->ps, 2000, &n))
            return;                 /* asked again on the next pass */
        sc->seeded = 1;
        if (n)
            EM_INFO("cluster: this node created the metadata group and put the %u caches and "
                    "binary types it restored there", n);
    }
    if (baseline_restore(sc, &st))
        return;                     /* waiting for the baseline, or asked again */
    if (st != group) {
        /* A new group starts ACTIVE; a whole persistent cluster restarting
         * (each node a new member of a new group) keeps the state it had,
         * as this node restored it - read-only stays read-only. */
        if (propose_state(sc, st))
            return;                 /* asked again on the next pass */
        EM_INFO("cluster state %s: this node created the metadata group and put the state it "
                "restored there", state_name(st));
        /* Applied while this node was seeding, so not adopted there. */
        if (pr_server_state(sc->ps) != st)
            (void)pr_server_adopt_state(sc->ps, st);
    }
    atomic_store(&sc->seeding, 0);
}

int srv_cluster_leave(srv_cluster *sc)
{
    return sc && sc->node ? cl_node_leave(sc->node, 2000) : EM_INVAL;
}

static int rm_one(const char *path, const struct stat *st, int flag, struct FTW *f)
{
    (void)st; (void)flag; (void)f;
    return remove(path);
}

/* undo_early: a start refused by its configuration, before any thread ran. */
static int undo_early(srv_cluster *sc)
{
    pthread_cond_destroy(&sc->q_cv);
    pthread_mutex_destroy(&sc->q_mu);
    pthread_mutex_destroy(&sc->ack_mu);
    if (sc->tmpdir[0])
        nftw(sc->tmpdir, rm_one, 16, FTW_DEPTH | FTW_PHYS);
    em_free(sc);
    return EM_CONFIG;
}

/* ckpts: the WAL's checkpoints begun and completed (cl_rebal_cfg.ckpts). */
static void ckpts(void *arg, uint64_t *started, uint64_t *done)
{
    wal_stats st;
    wal_stats_get(arg, &st);
    *started = st.ckpt_started;
    *done = st.checkpoints;
}

static void ckpt_now(void *arg) { wal_checkpoint_soon(arg); }

int srv_cluster_start(srv_cluster **out, const srv_config *c, const uint8_t node_id[16],
                      const char *thin_addr, pr_server *ps, int (*durable)(void *arg),
                      void *durable_arg, const srv_cluster_persist *pe)
{
    *out = NULL;
    srv_cluster *sc = em_calloc(1, sizeof *sc);
    if (!sc)
        return EM_NOMEM;
    sc->ps = ps;
    pthread_mutex_init(&sc->q_mu, NULL);
    pthread_cond_init(&sc->q_cv, NULL);
    pthread_mutex_init(&sc->ack_mu, NULL);
    sc->durable = durable;
    sc->durable_arg = durable_arg;
    sc->bl_adjust = c->baseline_auto_adjust;
    sc->bl_timeout_ms = c->baseline_auto_adjust_timeout_ms;
    if (c->cluster_fault[0] && fault_parse(sc, c->cluster_fault)) {
        EM_ERROR("cluster: cluster_fault '%s': want drop=P,dup=P,delay=P (percent)",
                 c->cluster_fault);
        return undo_early(sc);
    }
    const char *dir = c->cluster_dir;
    if (!dir[0]) {
        /* Under $TMPDIR when set (a test harness gives each node its own,
         * so a node killed with -9 leaves nothing behind in /tmp). */
        const char *tmp = getenv("TMPDIR");
        if (!tmp || !tmp[0] || strlen(tmp) > sizeof sc->tmpdir - 32)
            tmp = "/tmp";
        snprintf(sc->tmpdir, sizeof sc->tmpdir, "%s/ember-cluster-XXXXXX", tmp);
        if (!mkdtemp(sc->tmpdir)) {
            EM_ERROR("cluster: cannot create a temporary directory for the metadata group");
            em_free(sc);
            return EM_IO;
        }
        dir = sc->tmpdir;
    }
    char err[CL_NODE_ERRMSG] = "";
    const char *host = c->cluster_host[0] ? c->cluster_host : c->host;
    cl_node_cfg nc = {
        .cluster_name = c->cluster_name,
        .secret = c->cluster_secret[0] ? c->cluster_secret : NULL,
        .host = host, .port = c->cluster_port, .raft_port = c->raft_port,
        .consistent_id = c->consistent_id[0] ? c->consistent_id : NULL,
        .seeds = c->seeds[0] ? c->seeds : NULL, .bootstrap = c->bootstrap,
        .dir = dir, .thin_addr = thin_addr,
        .failure_detection_ms = c->failure_detection_timeout_ms,
        .node_msb = em_ld64(node_id), .node_lsb = em_ld64(node_id + 8),
        .host_id = cl_node_host_id(c->host_id),
        .exclude_neighbors = c->exclude_neighbors,
        .arg = sc, .on_topology = on_topology, .on_refused = on_refused,
        .on_entry = on_entry, .on_restore = on_restore, .on_call_later = on_call_later,
        .on_repl = on_repl, .on_tick = on_tick, .on_pass_end = srv_cluster_pass_end, .errmsg = err,
    };
    if (c->cluster_tls) {
        /* The thin-client port's certificate settings, for both ends of every
         * link; every peer must present a certificate of the same CA. */
        net_tls_options to = {
            .cert_file = c->tls_cert[0] ? c->tls_cert : NULL,
            .key_file = c->tls_key[0] ? c->tls_key : NULL,
            .ca_file = c->tls_ca[0] ? c->tls_ca : NULL,
            .ciphers = c->tls_ciphers[0] ? c->tls_ciphers : NULL,
            .ciphersuites = c->tls_ciphersuites[0] ? c->tls_ciphersuites : NULL,
            .peer = 1,
        };
        char terr[512];
        if (net_tls_ctx_new(&to, &sc->tls, terr, sizeof terr) != 0) {
            EM_ERROR("cluster_tls: %s", terr);
            return undo_early(sc);
        }
        nc.tls = sc->tls;
    }
    if (c->cluster_fault[0]) {
        nc.fault = fault_fn;
        nc.fault_arg = sc;
        EM_WARN("cluster: fault hook on: %s of replication frames", c->cluster_fault);
    }
    for (int i = 0; i < FWD_WORKERS; i++) {
        worker_arg *wa = em_malloc(sizeof *wa);
        if (!wa)
            break;
        *wa = (worker_arg){ sc, sc->nworkers };
        if (pthread_create(&sc->workers[sc->nworkers], NULL, worker, wa) == 0)
            sc->nworkers++;
        else
            em_free(wa);
    }
    /* A bootstrap node does not take the group's state before it knows
     * whether it created the group (then its own restored state goes in). */
    atomic_store(&sc->seeding, c->bootstrap != 0);
    int rc = sc->nworkers ? cl_node_start(&sc->node, &nc) : EM_NOMEM;
    if (!rc && !cl_node_group_created(sc->node))
        atomic_store(&sc->seeding, 0);
    if (!rc) {
        cl_take_cfg tc = { .node = sc->node, .store = pr_server_store(ps),
                           .send_after = take_send_after, .arg = sc };
        cl_take *tk = NULL;
        if ((rc = cl_take_new(&tk, &tc)) != 0) {
            cl_node_stop(sc->node, 0);
            sc->node = NULL;
        } else {
            atomic_store(&sc->take, tk);
            pr_server_set_take(ps, tk);
        }
    }
    cl_rebal *rb = NULL;
    if (!rc) {
        cl_rebal_cfg rbc = { .node = sc->node, .store = pr_server_store(ps),
                             .take = atomic_load(&sc->take),
                             .hold = c->cluster_rebal_hold };
        char pset[600];
        if (pe && pe->wal) {
            rbc.ckpts = ckpts;
            rbc.ckpt_now = ckpt_now;
            rbc.ckpts_arg = pe->wal;
        }
        if (pe && pe->hist && pe->wal) {
            snprintf(pset, sizeof pset, "%s/rebal-partial", c->wal_path);
            rbc.hist = pe->hist;
            rbc.pset_path = pset;
        }
        if ((rc = cl_rebal_start(&rb, &rbc)) != 0) {
            cl_node_stop(sc->node, 0);
            sc->node = NULL;
        } else {
            atomic_store(&sc->rebal, rb);
        }
    }
    if (!rc) {
        /* A FULL_SYNC write waits for a dead owner until the members fail
         * it: the failure detection timeout counted from when its links
         * dropped, then the proposal's commit.  A write that began just
         * after the kill would time out at the same instant the owner is
         * failed, so the bound is the timeout and half of it again. */
        uint32_t fdt = c->failure_detection_timeout_ms ? c->failure_detection_timeout_ms : 10000;
        cl_repl_opts ro = {
            .node = sc->node, .store = pr_server_store(ps),
            .timeout_ms = fdt + fdt / 2,
            .durable = durable, .durable_arg = durable_arg,
            .find_cache = find_cache, .find_arg = sc,
            .on_apply = cl_rebal_on_apply, .on_apply_arg = rb,
            .on_stale = cl_rebal_copy_stale, .on_stale_arg = rb,
            .on_fenced = cl_rebal_copy_fenced, .on_fenced_arg = rb,
            .hist = pe ? pe->hist : NULL, .take = atomic_load(&sc->take),
            .hold = c->cluster_repl_hold[0] ? c->cluster_repl_hold : NULL,
        };
        cl_repl *r = NULL;
        if ((rc = cl_rids_new(&sc->rids)) == 0) {
            ro.rids = sc->rids;
            rc = cl_repl_start(&r, &ro);
        }
        if (rc) {
            cl_node_stop(sc->node, 0);
            sc->node = NULL;
            cl_rebal_stop(atomic_exchange(&sc->rebal, NULL));
        } else {
            pr_server_set_repl(ps, r);
            pr_server_set_rids(ps, sc->rids);
            pr_server_set_behind(ps, copy_behind, sc);
            atomic_store(&sc->repl, r);
        }
    }
    if (!rc) {
        cl_pme_cfg pc = { .arg = sc, .groups = pme_groups, .part_info = pme_part_info,
                          .other = other_frame, .other_arg = sc, .behind = pme_behind,
                          .left = pme_left };
        cl_pme *pme = NULL;
        if ((rc = cl_pme_start(&pme, sc->node, &pc)) != 0) {
            EM_ERROR("cluster: cannot start the partition map exchange: %s", em_strerror(rc));
            cl_node_stop(sc->node, 0);
            sc->node = NULL;
            cl_repl *r = atomic_exchange(&sc->repl, NULL);
            pr_server_set_repl(ps, NULL);
            pr_server_set_rids(ps, NULL);
            pr_server_set_behind(ps, NULL, NULL);
            cl_repl_stop(r);
            cl_rebal_stop(atomic_exchange(&sc->rebal, NULL));
        } else {
            pr_server_set_pme(ps, pme);
            atomic_store(&sc->pme, pme);
            cl_pme_kick(pme);
        }
    }
    if (rc) {
        workers_stop(sc);
        pool_free(sc);
        cl_rids_free(sc->rids);
        pr_server_set_take(ps, NULL);
        cl_take_free(atomic_exchange(&sc->take, NULL));
        EM_ERROR("%s", err[0] ? err : em_strerror(rc));
        if (sc->tmpdir[0])
            nftw(sc->tmpdir, rm_one, 16, FTW_DEPTH | FTW_PHYS);
        net_tls_ctx_free(sc->tls);
        em_free(sc);
        return rc;
    }
    /* Without a secret nothing after the handshake proves who a peer is. */
    if (!c->cluster_secret[0] && strncmp(host, "127.", 4) != 0 && strcmp(host, "::1") != 0)
        EM_WARN("cluster: no cluster_secret set: any process that reaches %s:%d can join the "
                "cluster or pose as a member; set cluster_secret on every node", host,
                c->cluster_port);
    char id[37];
    cl_meta_uuid_str((cl_meta_uuid){ em_ld64(node_id), em_ld64(node_id + 8) }, id);
    EM_INFO("cluster '%s': node %s, transport %s:%d%s, metadata group %s:%d%s, %s",
            c->cluster_name, id, host, c->cluster_port, sc->tls ? " (TLS)" : "", host,
            c->raft_port, sc->tls ? " (TLS)" : "",
            c->bootstrap ? "bootstrapping" : "joining through seeds");
    *out = sc;
    return 0;
}

void srv_cluster_pass_end(void *arg)
{
    (void)arg;
    pr_hold_pass_end();             /* before the streams leave: no ack is back yet */
    cl_repl_pass_end();
}

void srv_cluster_stop(srv_cluster *sc)
{
    if (!sc)
        return;
    cl_pme *pme = atomic_exchange(&sc->pme, NULL);
    pr_server_set_pme(sc->ps, NULL);
    cl_pme_stop(pme);
    /* Workers first (their answers go out through the node), then the
     * node, then replication (nothing calls it once the transport and the
     * request threads stopped). */
    workers_stop(sc);
    cl_repl_await_drain(atomic_load(&sc->repl));    /* answers still waiting for acks */
    cl_rebal *rb = atomic_load(&sc->rebal);
    cl_rebal_halt(rb);          /* it sends and proposes through the node */
    cl_node_stop(sc->node, 1);
    /* a write posted to the transport before it stopped may have handed
     * its wait over after the drain above: nobody to answer now */
    sc->node_gone = 1;
    cl_repl_await_drain(atomic_load(&sc->repl));
    cl_repl *r = atomic_load(&sc->repl);
    atomic_store(&sc->repl, NULL);
    pr_server_set_repl(sc->ps, NULL);
    pr_server_set_rids(sc->ps, NULL);
    pr_server_set_behind(sc->ps, NULL, NULL);
    cl_repl_stop(r);
    cl_rids_free(sc->rids);
    atomic_store(&sc->rebal, NULL);
    cl_rebal_stop(rb);
    pr_server_set_take(sc->ps, NULL);
    cl_take_free(atomic_exchange(&sc->take, NULL));
    pool_free(sc);
    pthread_cond_destroy(&sc->q_cv);
    pthread_mutex_destroy(&sc->q_mu);
    if (sc->tmpdir[0])
        nftw(sc->tmpdir, rm_one, 16, FTW_DEPTH | FTW_PHYS);
    net_tls_ctx_free(sc->tls);      /* after the transport that used it */
    em_buf_free(&sc->inline_resp);
    em_buf_free(&sc->bl_saved);
    em_free(sc);
}

cl_node *srv_cluster_node(srv_cluster *sc) { return sc ? sc->node : NULL; }

int srv_cluster_health(srv_cluster *sc, em_buf *out)
{
    if (!sc)
        return 0;
    /* Segmented first: such a node may still hold a lease a moment (a
     * heartbeat from before it was told), but it serves nothing. */
    static const char seg[] = "cluster: segmented: the cluster failed this node while it was "
                              "alive; serving no cache operations - restart it to join again\n";
    if (cl_node_segmented(sc->node))
        return em_buf_append(out, seg, sizeof seg - 1) ? EM_NOMEM : 1;
    if (cl_node_has_lease(sc->node))
        return 0;
    static const char msg[] = "cluster: no lease: cut off from the majority (no leader "
                              "reachable); serving no cache operations\n";
    return em_buf_append(out, msg, sizeof msg - 1) ? EM_NOMEM : 1;
}

void srv_cluster_mem_stats(srv_cluster *sc, em_mem_stats *sum)
{
    memset(sum, 0, sizeof *sum);
    if (!sc || !sc->node)
        return;
    cl_node_mem_stats(sc->node, sum);
    for (int i = 0; i < sc->nworkers; i++) {
        sum->allocs += atomic_load_explicit(&sc->w_allocs[i], memory_order_relaxed);
        sum->bytes += atomic_load_explicit(&sc->w_bytes[i], memory_order_relaxed);
        sum->frees += atomic_load_explicit(&sc->w_frees[i], memory_order_relaxed);
    }
}

/* moving_sum: the MOVING copies of every cache, and one labelled line per
 * cache in by_cache (what is left to rebalance, cache by cache); the
 * entries this node's loads still lack (pr_left_entries), in all and per
 * cache in left_by_cache. */
typedef struct moving_sum {
    cl_topo *t;
    pr_server *ps;
    pr_left left;
    uint64_t n, entries_left;
    em_buf *by_cache, *left_by_cache;
    int err;
} moving_sum;

/* labelled: NAME{cache="..."} v into out. */
static int labelled(em_buf *out, const char *name, const st_cache_config *cfg, uint64_t v)
{
    char tail[32];
    int l = snprintf(tail, sizeof tail, "\"} %llu\n", (unsigned long long)v);
    return em_buf_append(out, name, strlen(name)) || em_buf_append(out, "{cache=\"", 8) ||
           srv_metrics_label_value(out, cfg && cfg->name ? cfg->name : "") ||
           em_buf_append(out, tail, (size_t)l) ? EM_NOMEM : 0;
}

static void add_moving(void *arg, st_cache *c)
{
    moving_sum *m = arg;
    if (st_cache_destroyed(c))
        return;
    uint64_t k = cl_topo_moving_count(m->t, st_cache_id(c));
    uint64_t e = pr_left_entries(m->ps, &m->left, c);
    m->n += k;
    m->entries_left += e;
    const st_cache_config *cfg = st_cache_cfg(c);
    if (labelled(m->by_cache, "ember_cluster_cache_moving_partitions", cfg, k) ||
        labelled(m->left_by_cache, "ember_rebal_cache_entries_left", cfg, e))
        m->err = EM_NOMEM;
}

int srv_cluster_metrics(srv_cluster *sc, em_buf *out)
{
    if (!sc)
        return 0;
    cl_topo *t = cl_node_topo_acquire(sc->node);
    /* MOVING copies in the committed owner tables, every cache: 0 once
     * rebalancing is over (what an operator, or a benchmark, waits for). */
    em_buf by_cache = EM_BUF_INIT, left_by_cache = EM_BUF_INIT;
    moving_sum mv = { .t = t, .ps = sc->ps, .by_cache = &by_cache,
                      .left_by_cache = &left_by_cache };
    pr_left_open(sc->ps, &mv.left);
    st_cache_each(pr_server_store(sc->ps), add_moving, &mv);
    pr_left_close(&mv.left);
    char line[8192];                /* about 3.5 KB today: room for more without a check per line */
    int n = snprintf(line, sizeof line,
                     "# TYPE ember_cluster_members gauge\nember_cluster_members %u\n"
                     "# TYPE ember_cluster_topology_major gauge\nember_cluster_topology_major %llu\n"
                     "# TYPE ember_cluster_topology_minor gauge\nember_cluster_topology_minor %u\n"
                     "# TYPE ember_cluster_joined gauge\nember_cluster_joined %d\n"
                     "# TYPE ember_cluster_segmented gauge\nember_cluster_segmented %d\n"
                     "# TYPE ember_cluster_leader gauge\nember_cluster_leader %d\n"
                     "# TYPE ember_cluster_lease gauge\nember_cluster_lease %d\n"
                     "# TYPE ember_cluster_voters gauge\nember_cluster_voters %u\n"
                     "# TYPE ember_cluster_moving_partitions gauge\n"
                     "ember_cluster_moving_partitions %llu\n"
                     "# TYPE ember_rebal_entries_left gauge\nember_rebal_entries_left %llu\n",
                     t->n, (unsigned long long)t->major, t->minor,
                     t->self >= 0 && !cl_node_segmented(sc->node) ? 1 : 0,
                     cl_node_segmented(sc->node),
                     cl_node_is_leader(sc->node), cl_node_has_lease(sc->node),
                     cl_node_voters(sc->node), (unsigned long long)mv.n,
                     (unsigned long long)mv.entries_left);
    cl_node_topo_release(t);
    uint32_t up;
    uint64_t refused, opened;
    cl_node_links(sc->node, &up, &refused, &opened);
    n += snprintf(line + n, sizeof line - (size_t)n,
                  "# TYPE ember_cluster_links gauge\nember_cluster_links %u\n"
                  "# TYPE ember_cluster_links_refused counter\nember_cluster_links_refused %llu\n"
                  "# TYPE ember_cluster_links_opened counter\nember_cluster_links_opened %llu\n",
                  up, (unsigned long long)refused, (unsigned long long)opened);
    cl_pme *pme = atomic_load(&sc->pme);
    if (pme) {
        cl_pme_stats ps;
        cl_pme_stats_get(pme, &ps);
        n += snprintf(line + n, sizeof line - (size_t)n,
                      "# TYPE ember_pme_exchanges counter\nember_pme_exchanges %llu\n"
                      "# TYPE ember_pme_last_exchange_ms gauge\nember_pme_last_exchange_ms %llu\n"
                      "# TYPE ember_pme_map_exchange gauge\nember_pme_map_exchange %llu\n"
                      "# TYPE ember_pme_map_hash gauge\nember_pme_map_hash %llu\n"
                      "# TYPE ember_pme_map_bytes gauge\nember_pme_map_bytes %llu\n"
                      "# TYPE ember_pme_map_compressed_bytes gauge\n"
                      "ember_pme_map_compressed_bytes %llu\n"
                      "# TYPE ember_pme_lost_partitions gauge\nember_pme_lost_partitions %llu\n"
                      "# TYPE ember_pme_bad_frames counter\nember_pme_bad_frames %llu\n",
                      (unsigned long long)ps.exchanges, (unsigned long long)ps.last_ms,
                      (unsigned long long)ps.map_exch, (unsigned long long)ps.map_hash,
                      (unsigned long long)ps.map_bytes, (unsigned long long)ps.map_zbytes,
                      (unsigned long long)ps.lost, (unsigned long long)ps.bad_frames);
    }
    cl_repl *r = atomic_load(&sc->repl);
    if (r) {
        cl_repl_stats rs;
        cl_repl_stats_get(r, &rs);
        n += snprintf(line + n, sizeof line - (size_t)n,
                      "# TYPE ember_repl_updates_sent counter\nember_repl_updates_sent %llu\n"
                      "# TYPE ember_repl_frames_sent counter\nember_repl_frames_sent %llu\n"
                      "# TYPE ember_repl_updates_applied counter\nember_repl_updates_applied %llu\n"
                      "# TYPE ember_repl_refused counter\nember_repl_refused %llu\n"
                      "# TYPE ember_repl_sync_timeouts counter\nember_repl_sync_timeouts %llu\n"
                      "# TYPE ember_repl_resent counter\nember_repl_resent %llu\n"
                      "# TYPE ember_repl_gaps counter\nember_repl_gaps %llu\n"
                      "# TYPE ember_repl_gaps_skipped counter\nember_repl_gaps_skipped %llu\n"
                      "# TYPE ember_repl_windows_given_up counter\n"
                      "ember_repl_windows_given_up %llu\n"
                      "# TYPE ember_repl_fence_notices counter\n"
                      "ember_repl_fence_notices %llu\n"
                      "# TYPE ember_repl_writes_moved counter\n"
                      "ember_repl_writes_moved %llu\n"
                      "# TYPE ember_repl_read_waits counter\n"
                      "ember_repl_read_waits %llu\n"
                      "# TYPE ember_repl_replies_direct counter\n"
                      "ember_repl_replies_direct %llu\n"
                      "# TYPE ember_cluster_fwd_replies_direct counter\n"
                      "ember_cluster_fwd_replies_direct %llu\n",
                      (unsigned long long)rs.sent_updates, (unsigned long long)rs.sent_frames,
                      (unsigned long long)rs.applied, (unsigned long long)rs.refused,
                      (unsigned long long)rs.timeouts, (unsigned long long)rs.resent,
                      (unsigned long long)rs.nacks, (unsigned long long)rs.skipped,
                      (unsigned long long)rs.given_up, (unsigned long long)rs.fence_notices,
                      (unsigned long long)rs.moved, (unsigned long long)rs.read_waits,
                      (unsigned long long)pr_server_replies_direct(sc->ps),
                      (unsigned long long)pr_server_fwd_replies_direct(sc->ps));
    }
    cl_take *tk = atomic_load(&sc->take);
    if (tk) {
        cl_take_stats ts;
        cl_take_stats_get(tk, &ts);
        n += snprintf(line + n, sizeof line - (size_t)n,
                      "# TYPE ember_cluster_takeover_held counter\n"
                      "ember_cluster_takeover_held %llu\n"
                      "# TYPE ember_cluster_takeover_taken counter\n"
                      "ember_cluster_takeover_taken %llu\n"
                      "# TYPE ember_cluster_takeover_answered counter\n"
                      "ember_cluster_takeover_answered %llu\n"
                      "# TYPE ember_cluster_takeover_holding gauge\n"
                      "ember_cluster_takeover_holding %u\n",
                      (unsigned long long)ts.held, (unsigned long long)ts.taken,
                      (unsigned long long)ts.answered, ts.holding);
    }
    if (sc->rids) {
        cl_rids_stats ws;
        cl_rids_stats_get(sc->rids, &ws);
        n += snprintf(line + n, sizeof line - (size_t)n,
                      "# TYPE ember_rid_retries_answered counter\n"
                      "ember_rid_retries_answered{from=\"ran_here\"} %llu\n"
                      "ember_rid_retries_answered{from=\"replicated\"} %llu\n"
                      "# TYPE ember_rid_retries_busy counter\nember_rid_retries_busy %llu\n"
                      "# TYPE ember_rid_learned counter\nember_rid_learned %llu\n"
                      "# TYPE ember_rid_evicted counter\nember_rid_evicted %llu\n",
                      (unsigned long long)ws.retries_done, (unsigned long long)ws.retries_applied,
                      (unsigned long long)ws.busy, (unsigned long long)ws.learned,
                      (unsigned long long)ws.evicted);
    }
    cl_rebal *rb = atomic_load(&sc->rebal);
    if (rb) {
        cl_rebal_stats bs;
        cl_rebal_stats_get(rb, &bs);
        n += snprintf(line + n, sizeof line - (size_t)n,
                      "# TYPE ember_rebal_loading gauge\nember_rebal_loading %llu\n"
                      "# TYPE ember_rebal_loaded counter\nember_rebal_loaded %llu\n"
                      "# TYPE ember_rebal_entries_in counter\nember_rebal_entries_in %llu\n"
                      "# TYPE ember_rebal_bytes_in counter\nember_rebal_bytes_in %llu\n"
                      "# TYPE ember_rebal_batches_out counter\nember_rebal_batches_out %llu\n"
                      "# TYPE ember_rebal_evicted counter\nember_rebal_evicted %llu\n"
                      "# TYPE ember_rebal_owned counter\nember_rebal_owned %llu\n"
                      "# TYPE ember_rebal_stale counter\nember_rebal_stale %llu\n"
                      "# TYPE ember_rebal_caught_up counter\nember_rebal_caught_up %llu\n"
                      "# TYPE ember_rebal_catching_up gauge\nember_rebal_catching_up %llu\n"
                      "# TYPE ember_rebal_historical counter\nember_rebal_historical %llu\n"
                      "# TYPE ember_rebal_historical_updates_in counter\n"
                      "ember_rebal_historical_updates_in %llu\n"
                      "# TYPE ember_rebal_historical_served counter\n"
                      "ember_rebal_historical_served %llu\n",
                      (unsigned long long)bs.loading, (unsigned long long)bs.loaded,
                      (unsigned long long)bs.entries_in, (unsigned long long)bs.bytes_in,
                      (unsigned long long)bs.batches_out, (unsigned long long)bs.evicted,
                      (unsigned long long)bs.owned, (unsigned long long)bs.stale,
                      (unsigned long long)bs.caught_up, (unsigned long long)bs.catching_up,
                      (unsigned long long)bs.hist_loads,
                      (unsigned long long)bs.hist_entries_in,
                      (unsigned long long)bs.hist_served);
    }
    pr_txc_stats ts;
    pr_txc_stats_get(sc->ps, &ts);
    n += snprintf(line + n, sizeof line - (size_t)n,
                  "# TYPE ember_tx_parts gauge\nember_tx_parts %llu\n"
                  "# TYPE ember_tx_parts_prepared gauge\nember_tx_parts_prepared %llu\n"
                  "# TYPE ember_tx_backup_copies gauge\nember_tx_backup_copies %llu\n"
                  "# TYPE ember_tx_commits counter\n"
                  "ember_tx_commits{phases=\"one\"} %llu\nember_tx_commits{phases=\"two\"} %llu\n"
                  "# TYPE ember_tx_recovered counter\n"
                  "ember_tx_recovered{outcome=\"committed\"} %llu\n"
                  "ember_tx_recovered{outcome=\"rolled_back\"} %llu\n"
                  "# TYPE ember_tx_lock_wakes counter\n"
                  "ember_tx_lock_wakes{dir=\"sent\"} %llu\nember_tx_lock_wakes{dir=\"received\"} %llu\n"
                  "# TYPE ember_tx_deadlocks_across_nodes counter\n"
                  "ember_tx_deadlocks_across_nodes %llu\n"
                  "# TYPE ember_tx_writes_handed_off counter\nember_tx_writes_handed_off %llu\n",
                  (unsigned long long)ts.parts, (unsigned long long)ts.prepared,
                  (unsigned long long)ts.copies, (unsigned long long)ts.one_phase,
                  (unsigned long long)ts.two_phase, (unsigned long long)ts.recovered_commit,
                  (unsigned long long)ts.recovered_rollback, (unsigned long long)ts.wakes_sent,
                  (unsigned long long)ts.wakes_got, (unsigned long long)ts.deadlocks,
                  (unsigned long long)ts.handed_off);
    static const char fam[] = "# TYPE ember_cluster_cache_moving_partitions gauge\n";
    int rc = mv.err;
    if (!rc && n > 0 && (size_t)n < sizeof line)  /* cannot fail at this size; never read past line */
        rc = em_buf_append(out, line, (size_t)n);
    static const char lfam[] = "# TYPE ember_rebal_cache_entries_left gauge\n";
    if (!rc && by_cache.len)
        rc = em_buf_append(out, fam, sizeof fam - 1) ||
             em_buf_append(out, by_cache.p, by_cache.len) ? EM_NOMEM : 0;
    if (!rc && left_by_cache.len)
        rc = em_buf_append(out, lfam, sizeof lfam - 1) ||
             em_buf_append(out, left_by_cache.p, left_by_cache.len) ? EM_NOMEM : 0;
    em_buf_free(&by_cache);
    em_buf_free(&left_by_cache);
    return rc;
}
