/* cl_node.c - join, leave, failure detection and the published topology
 * (protocol in cl_node.h).
 *
 * Threads: cl_net callbacks and the periodic tick run on the transport's
 * loop thread; cl_meta completions and subscribers on the metadata thread;
 * cl_node_propose and the topology readers on any thread.  n->mu guards
 * what they share (topology pointer, member bookkeeping, pending requests);
 * nothing blocks while holding it.
 *
 * Frames (cl_net.h types): JOIN_REQ = an encoded NODE_JOIN entry;
 * META = u64 request id | entry, answered by META_RESP = u64 request id |
 * i32 status | u64 log index; LEAVE_REQ = u64 request id | encoded
 * NODE_LEAVE, answered like META.
 */
#include "cluster/cl_node.h"

#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "cluster/cl_meta.h"
#include "cluster/cl_net.h"
#include "util/buf.h"
#include "util/clock.h"
#include "util/err.h"
#include "util/hash.h"
#include "util/log.h"
#include "util/mem.h"

#define RETRY_MS      1000        /* joins, seed and member connects */
#define MAX_TRACKED   256         /* members the leader watches at once */
#define MAX_SEEDS     16

/* What the leader knows of a member's link. */
typedef struct watch {
    cl_meta_uuid id;
    uint64_t     raft_id;
    uint64_t     seen_ms;         /* last time a link was up */
    uint64_t     failing_ms;      /* NODE_FAIL last proposed (0: never) */
    uint64_t     tried_ms;        /* last connect attempt (any node) */
} watch;

/* A proposal waiting for the leader's answer and for the local apply, or
 * a call waiting for a member's answer (resp set; cl_node.h's struct). */
typedef cl_node_acall pending;

typedef struct seed { char ip[64]; int port; } seed;


struct cl_node {
    cl_node_cfg   cfg;
    cl_meta_uuid  id;
    uint64_t      raft_id;
    unsigned      elect_ms;       /* the metadata group's election timeout */
    char          host[64];
    char          cid[CL_META_MAX_CID + 1];
    char          cluster_addr[96];
    char          raft_addr[96];
    char          thin_addr[CL_META_MAX_ADDR + 1];
    char          dir[512];
    em_buf        join_entry;     /* our NODE_JOIN, encoded once */
    seed          seeds[MAX_SEEDS];
    int           nseeds;
    cl_net       *net;
    cl_meta      *meta;

    /* life: every callback from the transport or metadata thread holds it
     * shared and returns at once when stopping is set; cl_node_stop sets
     * stopping under it exclusively, so once it is set nothing touches net
     * or meta while they shut down. */
    pthread_rwlock_t life;
    pthread_mutex_t pub_mu;       /* serialises republish */
    pthread_mutex_t decide_mu;    /* cl_node_decide_lock */
    pthread_mutex_t mu;
    /* topo_mu: n->topo changes under mu and topo_mu both, so that taking a
     * snapshot (every cache operation, on the client loop) needs only
     * topo_mu - two instructions long - and never waits on mu, which the
     * transport thread holds to finish each forwarded call's answer
     * (through one node, these collisions were 0.1 futex sleeps per put). */
    pthread_mutex_t topo_mu;
    pthread_cond_t  cv;
    cl_topo      *topo;
    uint64_t      applied;        /* last index applied here */
    int           member;         /* our NODE_JOIN applied */
    int           proposing_self;
    uint64_t      last_join_ms, last_seed_ms;
    watch         w[MAX_TRACKED];
    uint32_t      nw;
    cl_meta_uuid  up[MAX_TRACKED];   /* peers with the canonical link up */
    uint32_t      nup;
    cl_meta_uuid  linked[MAX_TRACKED]; /* an entry per up link, canonical or not */
    uint32_t      nlinked;
    uint64_t      joins_inflight[8];
    pending      *pend;
    void        (*answer_hook)(void *arg);  /* asynchronous calls (cl_node_set_answer_hook) */
    void         *answer_arg;
    uint64_t      next_req;
    uint32_t      answer_waits;   /* cancels waiting for an `answered` to end */
    _Atomic int   stopping;
    _Atomic int   ready;          /* set once net and meta are both up */
    _Atomic(cl_node_frame_fn) frame_fn;
    _Atomic(void *) frame_arg;
    _Atomic uint64_t live_topos;  /* topology snapshots not yet freed */
    _Atomic int   lease;          /* on_tick's last verdict, for its log line */
    _Atomic uint64_t lease_until; /* ms: serves while em_now_ms() is below it */
    /* Failed by the cluster while alive (not_member); read without mu on
     * every cache operation (pr_cluster_route). */
    _Atomic int   segmented;
};

static int  is_up(const cl_node *n, cl_meta_uuid id);
static int  leader_id(cl_node *n, cl_meta_uuid *out);

/* tl_transport: set while this thread runs a transport callback, where a
 * wait for a peer's answer would wait for this very thread. */
static _Thread_local int tl_transport;
static void timespec_in(struct timespec *ts, uint64_t ms);
static uint32_t fd_ms(const cl_node_cfg *cfg);

/* enter/leave: a callback's hold on the node (0 = stopping: return). */
static int enter(cl_node *n)
{
    pthread_rwlock_rdlock(&n->life);
    if (atomic_load(&n->stopping) || !atomic_load(&n->ready)) {
        pthread_rwlock_unlock(&n->life);
        return 0;
    }
    return 1;
}

static void leave_cb(cl_node *n) { pthread_rwlock_unlock(&n->life); }

/* ---- topology snapshots (cl_topo.c) -------------------------------------------- */

cl_topo *cl_node_topo_acquire(cl_node *n)
{
    pthread_mutex_lock(&n->topo_mu);
    cl_topo *t = n->topo;
    cl_topo_hold(t);
    pthread_mutex_unlock(&n->topo_mu);
    return t;
}

void cl_node_topo_release(cl_topo *t) { cl_topo_release(t); }

void cl_node_decide_lock(cl_node *n) { pthread_mutex_lock(&n->decide_mu); }
int  cl_node_decide_trylock(cl_node *n) { return pthread_mutex_trylock(&n->decide_mu) == 0; }
void cl_node_decide_unlock(cl_node *n) { pthread_mutex_unlock(&n->decide_mu); }


int cl_node_link_up(cl_node *n, cl_meta_uuid id)
{
    pthread_mutex_lock(&n->mu);
    int up = is_up(n, id);
    pthread_mutex_unlock(&n->mu);
    return up;
}

void cl_node_set_frame_hook(cl_node *n, cl_node_frame_fn fn, void *arg)
{
    if (fn) {
        atomic_store_explicit(&n->frame_arg, arg, memory_order_relaxed);
        atomic_store_explicit(&n->frame_fn, fn, memory_order_release);
        return;
    }
    /* Unhooking: the caller frees what arg points to next, so wait out a
     * callback already inside the hook.  Callbacks hold life shared; taking
     * it exclusively once returns only after they left.  Never from the
     * transport thread itself, which holds it. */
    atomic_store_explicit(&n->frame_fn, NULL, memory_order_release);
    if (!tl_transport) {
        pthread_rwlock_wrlock(&n->life);
        pthread_rwlock_unlock(&n->life);
    }
    atomic_store_explicit(&n->frame_arg, NULL, memory_order_relaxed);
}

int cl_node_send(cl_node *n, cl_meta_uuid to, uint16_t type, const void *p, size_t len)
{
    if (!enter(n))
        return EM_CLOSED;
    int rc = cl_net_send(n->net, to.msb, to.lsb, type, p, len);
    leave_cb(n);
    return rc;
}

int cl_node_leader(cl_node *n, cl_meta_uuid *out)
{
    return leader_id(n, out) ? 0 : EM_NOTLEADER;
}

int cl_node_release_wait(cl_node *n, const cl_topo *held, uint32_t timeout_ms)
{
    uint64_t end = em_now_ms() + timeout_ms;
    /* The current snapshot is one; any other is held by a request mapped
     * on an older topology.  Polled: requests hold snapshots for
     * microseconds, and this runs once per exchange. */
    for (;;) {
        pthread_mutex_lock(&n->mu);
        uint64_t allowed = 1 + (held && n->topo != held);
        pthread_mutex_unlock(&n->mu);
        if (atomic_load(&n->live_topos) <= allowed)
            break;
        if (em_now_ms() >= end || atomic_load(&n->stopping))
            return EM_TIMEOUT;
        struct timespec ts = { 0, 1000000L };
        nanosleep(&ts, NULL);
    }
    return 0;
}

int cl_node_topo_wait(cl_node *n, uint64_t index, uint32_t timeout_ms)
{
    struct timespec ts;
    timespec_in(&ts, timeout_ms);
    int rc = 0;
    pthread_mutex_lock(&n->mu);
    while (cl_topo_index(n->topo) <= index && !atomic_load(&n->stopping) && rc == 0)
        rc = pthread_cond_timedwait(&n->cv, &n->mu, &ts);
    int ok = cl_topo_index(n->topo) > index;
    pthread_mutex_unlock(&n->mu);
    return ok ? 0 : EM_TIMEOUT;
}


typedef struct build_arg { cl_node *n; cl_topo *t; } build_arg;

static void build_cb(void *arg, const cl_meta_fsm *s)
{
    build_arg *b = arg;
    b->t = cl_topo_build(s, b->n->id, &b->n->live_topos);
}

/* republish builds a new topology from the applied state and swaps it in. */
static void republish(cl_node *n)
{
    /* One at a time (the start thread and the metadata thread both call
     * it), and never older than what is published: on_topology sees the
     * versions in order. */
    pthread_mutex_lock(&n->pub_mu);
    build_arg b = { n, NULL };
    cl_meta_read(n->meta, build_cb, &b);
    cl_topo *r = b.t;
    if (!r) {
        pthread_mutex_unlock(&n->pub_mu);
        return;
    }
    pthread_mutex_lock(&n->mu);
    cl_topo *old = n->topo;
    int stale = cl_topo_index(old) && cl_topo_index(r) < cl_topo_index(old);
    if (!stale) {
        pthread_mutex_lock(&n->topo_mu);
        n->topo = r;
        pthread_mutex_unlock(&n->topo_mu);
        n->member = r->self >= 0 && !atomic_load(&n->segmented);
        pthread_cond_broadcast(&n->cv);
    }
    pthread_mutex_unlock(&n->mu);
    if (stale) {
        cl_topo_release(r);
    } else {
        cl_topo_release(old);
        if (n->cfg.on_topology)
            n->cfg.on_topology(n->cfg.arg, r);  /* n->topo holds a ref; pub_mu keeps it */
    }
    pthread_mutex_unlock(&n->pub_mu);
}

/* ---- metadata subscriber (metadata thread) --------------------------------- */

static void restore_cb(void *arg, const cl_meta_fsm *s)
{
    cl_node *n = arg;
    n->cfg.on_restore(n->cfg.arg, s);
}

static void on_applied(void *arg, const cl_meta_entry *e, const cl_meta_effect *eff)
{
    cl_node *n = arg;
    if (!enter(n))
        return;
    /* The layers above act first: a proposer waiting for this index then
     * finds the cache, type or state in place. */
    if (e && eff->status == 0 && e->type && n->cfg.on_entry)
        n->cfg.on_entry(n->cfg.arg, e);
    else if (!e && n->cfg.on_restore)
        cl_meta_read(n->meta, restore_cb, n);
    /* And the topology before the index: a proposer (or cl_node_sync) that
     * waited for this index maps requests on a topology that has it - a
     * reset-lost returned, then refused as lost on the topology before it. */
    if (!e || e->type != CL_META_E_TYPE_PUT)
        republish(n);
    pthread_mutex_lock(&n->mu);
    if (eff->index > n->applied)
        n->applied = eff->index;
    pthread_cond_broadcast(&n->cv);
    pthread_mutex_unlock(&n->mu);
    /* A member that left leaves the Raft configuration too: cl_meta's
     * leader removes the server of every LEFT member (prune_gone). */
    leave_cb(n);
}

/* ---- proposals through the leader ------------------------------------------ */

static pending *pend_find(cl_node *n, uint64_t req)
{
    for (pending *p = n->pend; p; p = p->next)
        if (p->req == req)
            return p;
    return NULL;
}

/* pend_unlink removes p from n->pend if it is there (n->mu held). */
static void pend_unlink(cl_node *n, pending *p)
{
    for (pending **x = &n->pend; *x; x = &(*x)->next)
        if (*x == p) {
            *x = p->next;
            return;
        }
}

/* pend_wait waits (unless rc is already an error) until p is done - and,
 * with applied, until this replica applied p's index - or end passes, then
 * unlinks p (registered in n->pend by the caller).  The result: rc, the
 * pending's status, or EM_TIMEOUT. */
static int pend_wait(cl_node *n, pending *p, int rc, uint64_t end, int applied)
{
    pthread_mutex_lock(&n->mu);
    while (!rc && (!p->done || (applied && p->status == 0 && n->applied < p->index))) {
        if (em_now_ms() >= end) {
            rc = EM_TIMEOUT;
            break;
        }
        struct timespec ts;
        timespec_in(&ts, 50);
        pthread_cond_timedwait(p->cv ? p->cv : &n->cv, &n->mu, &ts);
    }
    if (!rc)
        rc = p->status;
    pend_unlink(n, p);
    pthread_mutex_unlock(&n->mu);
    return rc;
}

/* call_finish completes a cl_node_call with the answer bytes. */
static void call_finish(cl_node *n, cl_meta_uuid from, uint64_t req, int status,
                        const uint8_t *p, size_t len)
{
    pthread_mutex_lock(&n->mu);
    pending *q = pend_find(n, req);
    int hook = 0;
    if (q && q->resp && !q->done && !q->answering && cl_meta_uuid_eq(q->to, from)) {
        q->status = status;
        if (!status && len && em_buf_append(q->resp, p, len))
            q->status = EM_NOMEM;
        /* before done: a poll that sees the call over sees what it did.
         * Without mu: it sends a client's reply, and the client loop takes
         * mu to start and poll every forward (through one node, 0.2 futex
         * sleeps or wake-ups per put waited on that send).  `answering`
         * keeps the call meanwhile: not over for a poll, not failed by
         * its link going down, and a cancel waits for it. */
        int quiet = 0;
        if (q->answered) {
            q->answering = 1;
            pthread_mutex_unlock(&n->mu);
            quiet = q->answered(q, q->status);
            pthread_mutex_lock(&n->mu);
            q->answering = 0;
            if (n->answer_waits)
                pthread_cond_broadcast(&n->cv);
        }
        q->done = 1;
        /* (a poll that came while it answered saw it in flight, and its
         * poller waits for the hook to look again) */
        hook = q->async && (!quiet || q->polled);
        /* Nobody is woken to poll it soon: out of the list now, so calls
         * over but unpolled do not lengthen every later answer's search
         * (a poll reads done from the caller's storage). */
        if (quiet)
            pend_unlink(n, q);
        /* Only this caller: many calls wait at once under load. */
        if (q->cv)
            pthread_cond_signal(q->cv);
    }
    pthread_mutex_unlock(&n->mu);
    if (hook && n->answer_hook)
        n->answer_hook(n->answer_arg);
}

/* up_wait: how long a call waits for its member's link to come up - a
 * failure detection timeout at most. */
static uint64_t up_wait(const cl_node *n, uint32_t timeout_ms)
{
    return fd_ms(&n->cfg) < timeout_ms ? fd_ms(&n->cfg) : timeout_ms;
}

/* call_begin registers q (resp, to and cv set) and sends p[0..len) to q->to:
 * 0, EM_TOOBIG, EM_NOLINK (nothing registered) or a send error (q is
 * registered: call_end removes it). */
static int call_begin(cl_node *n, pending *q, const void *p, size_t len, uint64_t wait)
{
    if (len + 8 + CL_NET_HDR > CL_NET_MAX_FRAME_DEFAULT)
        return EM_TOOBIG;
    pthread_mutex_lock(&n->mu);
    /* A member joins the topology before every link to it is up (the
     * smaller id dials it on its next tick): a call to it waits for the
     * link, up to `wait` ms, and is not sent if none comes up. */
    uint64_t t0 = em_now_ms();
    int up;
    while (!(up = is_up(n, q->to)) && !n->stopping && em_now_ms() - t0 < wait) {
        struct timespec ts;
        timespec_in(&ts, 50);
        pthread_cond_timedwait(&n->cv, &n->mu, &ts);
    }
    q->req = ++n->next_req;
    if (up) {
        q->next = n->pend;
        n->pend = q;
    }
    pthread_mutex_unlock(&n->mu);
    if (!up)
        return EM_NOLINK;
    /* Request id and request in one send block (cl_net_send copies it):
     * from the stack when small, so a forwarded op allocates nothing. */
    uint8_t stack[4096];
    int rc = 0;
    if (len + 8 <= sizeof stack) {
        em_st64(stack, q->req);
        memcpy(stack + 8, p, len);
        rc = cl_net_send(n->net, q->to.msb, q->to.lsb, CL_NET_MSG_FWD_REQ, stack, len + 8);
    } else {
        em_buf b = EM_BUF_INIT;
        rc = em_buf_put_le64(&b, q->req);
        if (!rc)
            rc = em_buf_append(&b, p, len);
        if (!rc)
            rc = cl_net_send(n->net, q->to.msb, q->to.lsb, CL_NET_MSG_FWD_REQ, b.p, b.len);
        em_buf_free(&b);
    }
    return rc;
}

int cl_node_call(cl_node *n, cl_meta_uuid to, const void *p, size_t len, em_buf *resp,
                 uint32_t timeout_ms)
{
    if (tl_transport)
        return EM_BUSY;             /* it would wait for its own thread */
    pending q = { 0 };
    q.resp = resp;
    q.to = to;
    q.remote = 1;
    pthread_cond_t cv;              /* the clock of timespec_in, as n->cv */
    pthread_cond_init(&cv, NULL);
    q.cv = &cv;
    int rc = call_begin(n, &q, p, len, up_wait(n, timeout_ms));
    if (rc != EM_TOOBIG && rc != EM_NOLINK)
        rc = pend_wait(n, &q, rc, em_now_ms() + timeout_ms, 0);
    pthread_cond_destroy(&cv);
    return rc;
}

void cl_node_call_all(cl_node *n, uint32_t k, const cl_meta_uuid *to, const em_buf *req,
                      em_buf *resp, int *rcs, uint32_t timeout_ms, void (*mid)(void *arg),
                      void *arg)
{
    pending qs[CL_NODE_CALL_ALL_MAX];
    if (tl_transport || k > CL_NODE_CALL_ALL_MAX) {
        for (uint32_t i = 0; i < k; i++)
            rcs[i] = tl_transport ? EM_BUSY : EM_RANGE;
        if (mid)
            mid(arg);
        return;
    }
    pthread_cond_t cv;              /* shared: each wait checks its own call */
    pthread_cond_init(&cv, NULL);
    uint64_t end = em_now_ms() + timeout_ms;
    for (uint32_t i = 0; i < k; i++) {
        memset(&qs[i], 0, sizeof qs[i]);
        qs[i].resp = &resp[i];
        qs[i].to = to[i];
        qs[i].remote = 1;
        qs[i].cv = &cv;
        rcs[i] = call_begin(n, &qs[i], req[i].p, req[i].len, up_wait(n, timeout_ms));
    }
    if (mid)
        mid(arg);                   /* the caller's own part, while these run */
    for (uint32_t i = 0; i < k; i++)
        if (rcs[i] != EM_TOOBIG && rcs[i] != EM_NOLINK)
            rcs[i] = pend_wait(n, &qs[i], rcs[i], end, 0);
    pthread_cond_destroy(&cv);
}

int cl_node_post(cl_node *n, void (*fn)(void *arg, int cancelled), void *arg)
{
    if (!enter(n))
        return EM_CLOSED;
    int rc = cl_net_post(n->net, fn, arg);
    leave_cb(n);
    return rc;
}

void cl_node_set_answer_hook(cl_node *n, void (*fn)(void *arg), void *arg)
{
    n->answer_hook = fn;
    n->answer_arg = arg;
}

int cl_node_call_start(cl_node *n, cl_node_acall *a, cl_meta_uuid to, const void *p,
                       size_t len, em_buf *resp, uint32_t timeout_ms,
                       int (*answered)(cl_node_acall *a, int status))
{
    if (tl_transport)
        return EM_BUSY;
    memset(a, 0, sizeof *a);
    a->answered = answered;
    a->resp = resp;
    a->to = to;
    a->remote = 1;
    a->async = 1;
    a->end_ms = em_now_ms() + timeout_ms;
    /* No wait for a link that is not up: the caller takes its blocking
     * path, which does. */
    int rc = call_begin(n, a, p, len, 0);
    if (rc && rc != EM_TOOBIG && rc != EM_NOLINK)
        cl_node_call_cancel(n, a);
    return rc;
}

int cl_node_call_poll(cl_node *n, cl_node_acall *a, int *rc)
{
    pthread_mutex_lock(&n->mu);
    int over = !a->answering && (a->done || em_now_ms() >= a->end_ms);
    if (a->answering)
        a->polled = 1;
    if (over) {
        *rc = a->done ? a->status : EM_TIMEOUT;
        pend_unlink(n, a);
    }
    pthread_mutex_unlock(&n->mu);
    return over;
}

void cl_node_call_cancel(cl_node *n, cl_node_acall *a)
{
    pthread_mutex_lock(&n->mu);
    n->answer_waits++;
    while (a->answering)
        pthread_cond_wait(&n->cv, &n->mu);
    n->answer_waits--;
    pend_unlink(n, a);
    pthread_mutex_unlock(&n->mu);
}

int cl_node_answer(cl_node *n, cl_node_call_id id, int status, const void *p, size_t len)
{
    if (status)
        len = 0;
    if (len + 12 + CL_NET_HDR > CL_NET_MAX_FRAME_DEFAULT) {
        status = EM_TOOBIG;     /* an answer the link would not carry */
        len = 0;
    }
    if (!enter(n))
        return EM_CLOSED;
    /* Header and answer in one pooled send block: small answers go out
     * from a stack buffer, larger ones through one temporary buffer. */
    uint8_t stack[4096];
    uint8_t *b = len + 12 <= sizeof stack ? stack : em_malloc(len + 12);
    int rc = EM_NOMEM;
    if (b) {
        em_st64(b, id.req);
        em_st32(b + 8, (uint32_t)status);
        if (len)
            memcpy(b + 12, p, len);
        rc = cl_net_send(n->net, id.from.msb, id.from.lsb, CL_NET_MSG_FWD_RESP, b, len + 12);
        if (b != stack)
            em_free(b);
    }
    leave_cb(n);
    return rc;
}

void cl_node_mem_stats(cl_node *n, em_mem_stats *sum)
{
    memset(sum, 0, sizeof *sum);
    if (!enter(n))
        return;
    cl_net_mem_stats(n->net, sum);
    leave_cb(n);
}


static void pend_finish(cl_node *n, cl_meta_uuid from, uint64_t req, int status,
                        uint64_t index)
{
    pthread_mutex_lock(&n->mu);
    pending *p = pend_find(n, req);
    if (p && !p->resp && cl_meta_uuid_eq(p->to, from)) {
        p->done = 1;
        p->status = status;
        p->index = index;
        pthread_cond_broadcast(&n->cv);
    }
    pthread_mutex_unlock(&n->mu);
}

/* A proposal made here for a peer: answer it with META_RESP. */
typedef struct relay {
    cl_node     *n;
    cl_meta_uuid to;
    uint64_t     req;
} relay;

static void relay_answer(relay *r, int st, uint64_t index)
{
    uint8_t b[20];
    em_st64(b, r->req);
    em_st32(b + 8, (uint32_t)st);
    em_st64(b + 12, index);
    if (cl_meta_uuid_eq(r->to, r->n->id))
        pend_finish(r->n, r->n->id, r->req, st, index);
    else
        (void)cl_net_send(r->n->net, r->to.msb, r->to.lsb, CL_NET_MSG_META_RESP, b, sizeof b);
}

static void relay_done(void *arg, int status, const cl_meta_effect *eff)
{
    relay *r = arg;
    if (enter(r->n)) {
        relay_answer(r, status ? status : (eff ? eff->status : 0), eff ? eff->index : 0);
        leave_cb(r->n);
    }
    em_free(r);
}

/* A sync's barrier committed: every entry before it has been through
 * on_applied here (same thread), so the answer is the last index that
 * did - what the asker's own replica counts - not the barrier's, which no
 * subscriber ever sees. */
static void relay_sync_done(void *arg, int status, const cl_meta_effect *eff)
{
    relay *r = arg;
    (void)eff;
    if (enter(r->n)) {
        pthread_mutex_lock(&r->n->mu);
        uint64_t applied = r->n->applied;
        pthread_mutex_unlock(&r->n->mu);
        relay_answer(r, status, status ? 0 : applied);
        leave_cb(r->n);
    }
    em_free(r);
}

/* propose_for proposes entry for `to` (this node or a peer) and answers it
 * when it applied; an empty entry is a sync, proposed as a barrier. */
static int propose_for(cl_node *n, cl_meta_uuid to, uint64_t req, const uint8_t *entry,
                       size_t len)
{
    relay *r = em_malloc(sizeof *r);
    if (!r)
        return EM_NOMEM;
    *r = (relay){ n, to, req };
    int rc = len ? cl_meta_propose(n->meta, entry, len, relay_done, r)
                 : cl_meta_barrier(n->meta, relay_sync_done, r);
    if (rc)
        em_free(r);
    return rc;
}

typedef struct by_raft { uint64_t rid; cl_meta_uuid id; int found; } by_raft;

static void find_by_raft(void *arg, const cl_meta_fsm *s)
{
    by_raft *q = arg;
    for (uint32_t i = 0; i < s->n_members; i++)
        if (s->members[i].raft_id == q->rid && s->members[i].state != CL_META_LEFT) {
            q->id = s->members[i].id;
            q->found = 1;
        }
}

/* leader_id: the node id of the metadata group's leader, if it is a member. */
static int leader_id(cl_node *n, cl_meta_uuid *out)
{
    cl_meta_info info;
    cl_meta_get_info(n->meta, &info);
    if (!info.leader_id)
        return 0;
    by_raft q = { info.leader_id, { 0, 0 }, 0 };
    cl_meta_read(n->meta, find_by_raft, &q);
    *out = q.id;
    return q.found;
}

static void timespec_in(struct timespec *ts, uint64_t ms)
{
    clock_gettime(CLOCK_REALTIME, ts);
    ts->tv_sec += (time_t)(ms / 1000);
    ts->tv_nsec += (long)(ms % 1000) * 1000000L;
    if (ts->tv_nsec >= 1000000000L) {
        ts->tv_sec++;
        ts->tv_nsec -= 1000000000L;
    }
}

typedef struct crc_q { int32_t id; uint32_t crc; } crc_q;

static void cache_crc_cb(void *arg, const cl_meta_fsm *f)
{
    crc_q *q = arg;
    const cl_meta_blob *b = cl_meta_fsm_cache(f, q->id);
    q->crc = b ? em_crc32c(0, b->p, b->len) : 0;
}

uint32_t cl_node_cache_crc(cl_node *n, int32_t id)
{
    crc_q q = { id, 0 };
    cl_meta_read(n->meta, cache_crc_cb, &q);
    return q.crc;
}

/* propose_until: cl_node_propose, asked again every 100 ms while there is
 * no leader or no link to it (an election, a link coming back on a busy
 * machine), until end (ms). */
static int propose_until(cl_node *n, const void *entry, size_t len, uint64_t end)
{
    uint64_t now = em_now_ms();
    for (;;) {
        int rc = cl_node_propose(n, entry, len, (uint32_t)(end > now ? end - now : 0));
        now = em_now_ms();
        if (rc != EM_NOTLEADER || now + 100 >= end)
            return rc;
        struct timespec ts = { 0, 100 * 1000000L };
        nanosleep(&ts, NULL);
        if ((now = em_now_ms()) >= end)
            return EM_NOTLEADER;
    }
}

/* A sync is a barrier at the leader, even when that is this node: a leader
 * deposed without knowing it yet (a pause, a partition) would otherwise
 * answer from a state the group has moved past. */
int cl_node_sync(cl_node *n, uint32_t timeout_ms)
{
    uint64_t end = em_now_ms() + timeout_ms;
    int rc;
    do      /* a barrier lost with its leader is harmless to ask again */
        rc = propose_until(n, NULL, 0, end);
    while (rc == EM_LOSTLEADER && em_now_ms() < end);
    return rc;
}

int cl_node_propose(cl_node *n, const void *entry, size_t len, uint32_t timeout_ms)
{
    pending p = { 0 };
    if (tl_transport)
        return EM_BUSY;             /* it would wait for its own thread */
    p.to = n->id;
    pthread_mutex_lock(&n->mu);
    p.req = ++n->next_req;
    p.next = n->pend;
    n->pend = &p;
    pthread_mutex_unlock(&n->mu);

    uint64_t end = em_now_ms() + timeout_ms;
    int rc = 0;
    if (cl_node_is_leader(n)) {
        rc = propose_for(n, n->id, p.req, entry, len);
    } else {
        cl_meta_uuid lid;
        em_buf b = EM_BUF_INIT;
        int known = leader_id(n, &lid);
        pthread_mutex_lock(&n->mu);
        int up = known && is_up(n, lid);
        if (up) {
            p.to = lid;             /* only the leader's answer counts */
            p.remote = 1;
        }
        pthread_mutex_unlock(&n->mu);
        if (!up) {
            rc = EM_NOTLEADER;      /* no leader, or no link to it now */
        } else if ((rc = em_buf_put_le64(&b, p.req)) == 0 &&
                   (!len || (rc = em_buf_append(&b, entry, len)) == 0)) {
            rc = cl_net_send(n->net, lid.msb, lid.lsb, CL_NET_MSG_META, b.p, b.len);
        }
        em_buf_free(&b);
    }
    /* First the leader's answer, then our own replica reaching its index:
     * the caller's next read here sees what it proposed. */
    return pend_wait(n, &p, rc, end, 1);
}

uint64_t cl_node_host_id(const char *name)
{
    char b[256] = "";
    if (name && *name) {
        snprintf(b, sizeof b, "%s", name);
    } else {
        FILE *f = fopen("/etc/machine-id", "r");
        if (!f || !fgets(b, sizeof b, f))
            (void)gethostname(b, sizeof b - 1);
        if (f)
            fclose(f);
    }
    uint64_t h = 0xcbf29ce484222325ull;         /* FNV-1a */
    for (const char *p = b; *p && *p != '\n'; p++)
        h = (h ^ (uint8_t)*p) * 0x100000001b3ull;
    return h & CL_TOPO_HOST_MASK ? h & CL_TOPO_HOST_MASK : 1;
}

static uint32_t fd_ms(const cl_node_cfg *cfg)
{
    return cfg->failure_detection_ms ? cfg->failure_detection_ms : 10000;
}

int cl_node_propose_wait(cl_node *n, const void *entry, size_t len, uint32_t timeout_ms)
{
    uint64_t now = em_now_ms(), end = now + timeout_ms;
    uint64_t elect = now + 2 * (uint64_t)fd_ms(&n->cfg);
    if (elect < end)
        end = elect;
    return propose_until(n, entry, len, end);
}

/* ---- join (leader side) ------------------------------------------------------ */

typedef struct join_ctx {
    cl_node *n;
    uint64_t key;                 /* its joins_inflight slot */
    size_t   len;
    uint8_t  entry[];
} join_ctx;

/* joins_done frees the in-flight slot of one join. */
static void joins_done(cl_node *n, uint64_t key)
{
    pthread_mutex_lock(&n->mu);
    for (int i = 0; i < 8; i++)
        if (n->joins_inflight[i] == key)
            n->joins_inflight[i] = 0;
    pthread_mutex_unlock(&n->mu);
}

static void join_proposed(void *arg, int status, const cl_meta_effect *eff)
{
    (void)arg; (void)status; (void)eff;
}

/* self_proposed: our own join as the leader; on failure the tick retries. */
static void self_proposed(void *arg, int status, const cl_meta_effect *eff)
{
    cl_node *n = arg;
    (void)eff;
    if (status) {
        pthread_mutex_lock(&n->mu);
        n->proposing_self = 0;
        pthread_mutex_unlock(&n->mu);
    }
}

static void join_added(void *arg, int status, const cl_meta_effect *eff)
{
    join_ctx *j = arg;
    (void)eff;
    if (!enter(j->n)) {
        em_free(j);
        return;
    }
    /* Already in the configuration (a retried JOIN_REQ: EM_INVAL for a
     * duplicate id) is as good as added. */
    if (status == 0 || status == EM_INVAL) {
        (void)cl_meta_propose(j->n->meta, j->entry, j->len, join_proposed, NULL);
    } else {
        /* Its next JOIN_REQ (a second later) tries again. */
        EM_WARN("cluster: a joining node's metadata group change failed: %s%s; "
                "tried again on its next request", em_strerror(status),
                status == EM_BUSY ? " (or its address is still its old process's)" : "");
    }
    joins_done(j->n, j->key);
    leave_cb(j->n);
    em_free(j);
}

typedef struct join_q {
    cl_meta_uuid id;
    const uint8_t *cid; uint32_t cid_len;
    int present;
    cl_meta_uuid same_cid;
    int have_same;
} join_q;

static void join_lookup(void *arg, const cl_meta_fsm *s)
{
    join_q *q = arg;
    for (uint32_t i = 0; i < s->n_members; i++) {
        const cl_meta_member *m = &s->members[i];
        if (cl_meta_uuid_eq(m->id, q->id))
            q->present = 1;
        else if (m->state != CL_META_LEFT && m->cid_len == q->cid_len &&
                 memcmp(m->str, q->cid, q->cid_len) == 0) {
            q->same_cid = m->id;
            q->have_same = 1;
        }
    }
}

/* leader_join handles a JOIN_REQ on the leader. */
static void leader_join(cl_node *n, const uint8_t *p, size_t len)
{
    cl_meta_entry e;
    if (cl_meta_entry_decode(p, len, &e) != 0 || e.type != CL_META_E_NODE_JOIN)
        return;
    join_q q = { e.u.join.id, e.u.join.cid.p, e.u.join.cid.len, 0, { 0, 0 }, 0 };
    cl_meta_read(n->meta, join_lookup, &q);
    if (q.present)
        return;
    uint64_t key = e.u.join.id.msb ^ e.u.join.id.lsb;
    pthread_mutex_lock(&n->mu);
    int busy = 0;
    for (int i = 0; i < 8; i++)
        busy |= n->joins_inflight[i] == key;
    if (!busy)
        for (int i = 0; i < 8; i++)
            if (!n->joins_inflight[i]) {
                n->joins_inflight[i] = key;
                break;
            }
    pthread_mutex_unlock(&n->mu);
    if (busy)
        return;
    char who[37];
    cl_meta_uuid_str(e.u.join.id, who);
    EM_INFO("cluster: node %s asks to join%s: adding it to the metadata group", who,
            q.have_same ? " (a restart: its old process is failed)" : "");
    if (q.have_same) {
        /* The same consistent id again: a restart.  The old process is gone
         * (or about to be): fail it so affinity never sees two of it. */
        em_buf b = EM_BUF_INIT;
        if (cl_meta_enc_fail(&b, q.same_cid) == 0)
            (void)cl_meta_propose(n->meta, b.p, b.len, join_proposed, NULL);
        em_buf_free(&b);
    }
    join_ctx *j = em_malloc(sizeof *j + len);
    if (!j) {
        joins_done(n, key);
        return;
    }
    j->n = n;
    j->key = key;
    j->len = len;
    memcpy(j->entry, p, len);
    char addr[CL_META_MAX_ADDR + 1];
    snprintf(addr, sizeof addr, "%.*s", (int)e.u.join.raft_addr.len, e.u.join.raft_addr.p);
    if (cl_meta_add(n->meta, e.u.join.raft_id, addr, join_added, j) != 0) {
        joins_done(n, key);
        em_free(j);
    }
}

/* ---- transport callbacks (transport thread) -------------------------------- */

/* Up links, by peer id: the tick's view of who is reachable.  A member counts as up (cl_node_link_up, calls, proposals, replication to
 * MOVING copies, rebalancing demands) only over the canonical link: data
 * on the other one is lost when it closes as the duplicate.  Frames still
 * flow on either (a join request goes out on the link to a seed). */
static void on_up(void *arg, cl_net_link *l, const cl_net_hello *h)
{
    cl_node *n = arg;
    cl_meta_uuid id = { h->node_msb, h->node_lsb };
    pthread_mutex_lock(&n->mu);
    if (n->nlinked < MAX_TRACKED)
        n->linked[n->nlinked++] = id;
    /* A joiner's first request went out before any link was up: the next
     * tick asks again over this one rather than a retry period later. */
    if (!n->member)
        n->last_join_ms = 0;
    if (cl_net_link_canonical(l) && n->nup < MAX_TRACKED) {
        n->up[n->nup++] = id;
        pthread_cond_broadcast(&n->cv);     /* calls waiting for the link */
    }
    pthread_mutex_unlock(&n->mu);
}

/* id_drop removes one entry equal to id from a[0..*n) (order not kept). */
static void id_drop(cl_meta_uuid *a, uint32_t *n, cl_meta_uuid id)
{
    for (uint32_t i = 0; i < *n; i++)
        if (cl_meta_uuid_eq(a[i], id)) {
            a[i] = a[--*n];
            return;
        }
}

static void on_down(void *arg, cl_net_link *l, int was_up, const char *why)
{
    cl_node *n = arg;
    if (!was_up) {
        /* A connect that failed closes with no reason: not a refusal. */
        if (n->cfg.on_refused && strcmp(why, "connection closed") != 0) {
            char peer[64];
            cl_net_link_addr(l, peer, sizeof peer);
            n->cfg.on_refused(n->cfg.arg, peer, why);
        }
        return;
    }
    uint64_t msb, lsb;
    cl_net_link_peer(l, &msb, &lsb);
    cl_meta_uuid id = { msb, lsb };
    if (cl_net_link_canonical(l)) {
        /* Calls and replication to the member wait for the next link: an
         * operator reads here why the last one went. */
        char peer[64];
        cl_net_link_addr(l, peer, sizeof peer);
        if (strcmp(why, "duplicate link") == 0)
            EM_INFO("cluster: link with %s closed: %s (another link to it stays)", peer, why);
        else
            EM_WARN("cluster: link with %s closed: %s", peer, why);
    }
    pthread_mutex_lock(&n->mu);
    id_drop(n->linked, &n->nlinked, id);
    if (!cl_net_link_canonical(l)) {
        pthread_mutex_unlock(&n->mu);
        return;                     /* never counted up (on_up) */
    }
    id_drop(n->up, &n->nup, id);
    /* Calls waiting on that member will get no answer over this link. */
    int woke = 0, hook = 0;
    for (pending *q = n->pend; q; q = q->next)
        if (q->remote && !q->done && !q->answering && q->to.msb == msb && q->to.lsb == lsb) {
            q->status = q->resp ? EM_CLOSED : EM_LOSTLEADER;
            q->done = 1;
            if (q->cv)
                pthread_cond_signal(q->cv);
            woke = 1;
            hook |= q->async;
        }
    if (woke)
        pthread_cond_broadcast(&n->cv);
    pthread_mutex_unlock(&n->mu);
    if (hook && n->answer_hook)
        n->answer_hook(n->answer_arg);
}

static int is_up(const cl_node *n, cl_meta_uuid id)
{
    for (uint32_t i = 0; i < n->nup; i++)
        if (cl_meta_uuid_eq(n->up[i], id))
            return 1;
    return 0;
}

/* not_member: the leader `from`, at topology major.minor, counts this node
 * out.  A member failed while it could not answer (stopped, hung, cut off)
 * hears nothing more from the metadata group, which left it out of its
 * configuration too, so its own topology would keep it a member - and
 * serving, on owners long gone - for ever.  Only a leader sends it, to a
 * linked peer its topology does not hold; believed from a member of this
 * node's topology whose topology is newer (a joiner, or a member whose join
 * the sender has not applied yet, is no member here either): this node
 * stops being one, which ends its lease, and stays out (Ignite's default
 * segmentation policy stops the node; this one stays up to say why). */
static void not_member(cl_node *n, cl_meta_uuid from, uint64_t major, uint32_t minor)
{
    pthread_mutex_lock(&n->mu);
    const cl_topo *t = n->topo;
    int known = 0;
    for (uint32_t i = 0; i < t->n && !known; i++)
        known = (int)i != t->self && cl_meta_uuid_eq(t->m[i].id, from);
    int was = known && n->member && t->self >= 0 && major > t->major;
    if (was) {
        n->member = 0;
        atomic_store(&n->segmented, 1);
    }
    pthread_mutex_unlock(&n->mu);
    if (was)
        EM_ERROR("cluster: segmented - the cluster failed this node (topology %llu.%u): it "
                 "serves no cache operations any more; restart it to join again as a new "
                 "member (a node id, once failed, never comes back, as in Ignite)",
                 (unsigned long long)major, minor);
}

static void on_frame(void *arg, cl_net_link *l, uint16_t type, const uint8_t *p, size_t len)
{
    cl_node *n = arg;
    uint64_t msb, lsb;
    cl_net_link_peer(l, &msb, &lsb);
    cl_meta_uuid from = { msb, lsb };
    if (!enter(n))
        return;
    tl_transport = 1;
    switch (type) {
    case CL_NET_MSG_JOIN_REQ:
        if (cl_node_is_leader(n)) {
            leader_join(n, p, len);
        } else {
            cl_meta_uuid lid;
            if (leader_id(n, &lid) && !cl_meta_uuid_eq(lid, from))
                (void)cl_net_send(n->net, lid.msb, lid.lsb, CL_NET_MSG_JOIN_REQ, p, len);
        }
        break;
    case CL_NET_MSG_META:
        if (len >= 8) {
            /* 8 bytes: a sync (cl_node_sync), answered after a barrier. */
            uint64_t req = em_ld64(p);
            int rc = cl_node_is_leader(n) ? propose_for(n, from, req, p + 8, len - 8)
                                          : EM_NOTLEADER;
            if (rc) {
                uint8_t b[20];
                em_st64(b, req);
                em_st32(b + 8, (uint32_t)rc);
                em_st64(b + 12, 0);
                (void)cl_net_link_send(l, CL_NET_MSG_META_RESP, b, sizeof b);
            }
        }
        break;
    case CL_NET_MSG_META_RESP:
        if (len == 20)
            pend_finish(n, from, em_ld64(p), (int32_t)em_ld32(p + 8), em_ld64(p + 12));
        break;
    case CL_NET_MSG_NOT_MEMBER:
        if (len == 12)
            not_member(n, from, em_ld64(p), em_ld32(p + 8));
        break;
    case CL_NET_MSG_FWD_REQ:
        if (len >= 8 && n->cfg.on_call_later) {
            cl_node_call_id id = { from, em_ld64(p) };
            int rc = n->cfg.on_call_later(n->cfg.arg, id, p + 8, len - 8);
            if (rc) {
                uint8_t e[12];
                em_st64(e, id.req);
                em_st32(e + 8, (uint32_t)rc);
                (void)cl_net_link_send(l, CL_NET_MSG_FWD_RESP, e, sizeof e);
            }
        } else if (len >= 8) {
            em_buf resp = EM_BUF_INIT;
            int rc = em_buf_put_le64(&resp, em_ld64(p));
            if (!rc)
                rc = em_buf_put_le32(&resp, 0);
            if (!rc)
                rc = n->cfg.on_call ? n->cfg.on_call(n->cfg.arg, p + 8, len - 8, &resp)
                                    : EM_UNSUPPORTED;
            if (!rc && resp.len + CL_NET_HDR > CL_NET_MAX_FRAME_DEFAULT)
                rc = EM_TOOBIG;     /* an answer the link would not carry */
            if (rc) {
                uint8_t e[12];      /* the request id and the error alone */
                em_st64(e, em_ld64(p));
                em_st32(e + 8, (uint32_t)rc);
                (void)cl_net_link_send(l, CL_NET_MSG_FWD_RESP, e, sizeof e);
            } else {
                (void)cl_net_link_send(l, CL_NET_MSG_FWD_RESP, resp.p, resp.len);
            }
            em_buf_free(&resp);
        }
        break;
    case CL_NET_MSG_REPL_UPDATE:
    case CL_NET_MSG_REPL_ACK:
    case CL_NET_MSG_REPL_FENCED:
    case CL_NET_MSG_REPL_TAKEOVER:
    case CL_NET_MSG_REPL_TAKEN:
        if (n->cfg.on_repl)
            n->cfg.on_repl(n->cfg.arg, l, from, type, p, len);
        break;
    case CL_NET_MSG_FWD_RESP:
        if (len >= 12)
            call_finish(n, from, em_ld64(p), (int32_t)em_ld32(p + 8), p + 12, len - 12);
        break;
    default: {
        /* Frames of the modules built on the node (the exchange, ...). */
        cl_node_frame_fn fn = atomic_load_explicit(&n->frame_fn, memory_order_acquire);
        if (fn && fn(atomic_load_explicit(&n->frame_arg, memory_order_relaxed), from, type, p,
                     len))
            cl_net_link_close(l, "malformed exchange frame");
        break;
    }
    }
    tl_transport = 0;
    leave_cb(n);
}

/* ---- the tick (transport thread) ---------------------------------------------- */

static int parse_addr(const char *s, size_t len, char *ip, size_t iplen, int *port)
{
    const char *colon = memchr(s, ':', len);
    if (!colon || (size_t)(colon - s) >= iplen)
        return -1;
    memcpy(ip, s, (size_t)(colon - s));
    ip[colon - s] = 0;
    *port = atoi(colon + 1);
    return *port > 0 && *port < 65536 ? 0 : -1;
}

static int id_less(cl_meta_uuid a, cl_meta_uuid b)
{
    if (a.msb != b.msb)
        return (int64_t)a.msb < (int64_t)b.msb;
    return (int64_t)a.lsb < (int64_t)b.lsb;
}

/* tick_members: keep the mesh (the smaller id connects), and as the leader
 * fail members not heard from (no frame) for failure_detection_ms. */
static void tick_members(cl_node *n, uint64_t now, int leader)
{
    uint32_t fd = fd_ms(&n->cfg);
    cl_topo *t = cl_node_topo_acquire(n);
    struct { char ip[64]; int port; } dial[16];
    int ndial = 0;
    cl_meta_uuid fail[16];
    int nfail = 0;
    pthread_mutex_lock(&n->mu);
    watch nw[MAX_TRACKED];
    uint32_t k = 0;
    for (uint32_t i = 0; i < t->n && k < MAX_TRACKED; i++) {
        if (cl_meta_uuid_eq(t->m[i].id, n->id))
            continue;
        watch w = { t->m[i].id, t->m[i].raft_id, now, 0, 0 };
        for (uint32_t j = 0; j < n->nw; j++)
            if (cl_meta_uuid_eq(n->w[j].id, w.id))
                w = n->w[j];
        /* Every member keeps these hearings, leader or not: a member elected
         * after the coordinator died fails it a timeout after its own link
         * to it went down, not a timeout after the election (which made a
         * coordinator's failover an election longer than a primary's). */
        if (is_up(n, w.id)) {
            /* Up is not alive: the link of a stopped or hung member stays
             * up (its kernel still acks) until the link timeout (10 s).  A
             * link silent for the failure detection timeout counts as down
             * from then on (heartbeats come every timeout / 8), so such a
             * member is failed after twice the timeout; a closed link (a
             * killed process) after once.  Not once for both: after a cut
             * of under the timeout, TCP's retransmission backoff can keep
             * a link silent for well over it. */
            uint64_t rx = cl_net_peer_rx_ms(n->net, w.id.msb, w.id.lsb);
            uint64_t heard = rx && rx + fd < now ? rx + fd : now;
            if (heard > w.seen_ms)
                w.seen_ms = heard;
        } else if (id_less(n->id, w.id) && now - w.tried_ms >= RETRY_MS && ndial < 16) {
            const char *a = t->m[i].cluster_addr;
            if (parse_addr(a, strlen(a), dial[ndial].ip, sizeof dial[0].ip,
                           &dial[ndial].port) == 0)
                ndial++;
            w.tried_ms = now;
        }
        /* Failed by a leader that holds its lease right now (one that was
         * stopped itself has heard from nobody and must not fail them);
         * proposed again a timeout later if it did not take (the proposal
         * can fail while leadership moves). */
        if (leader && now < atomic_load_explicit(&n->lease_until, memory_order_relaxed) &&
            now - w.seen_ms >= fd && nfail < 16 && (!w.failing_ms || now - w.failing_ms >= fd)) {
            w.failing_ms = now;
            fail[nfail++] = w.id;
        }
        nw[k++] = w;
    }
    memcpy(n->w, nw, k * sizeof *nw);
    n->nw = k;
    /* The leader tells a linked peer its topology does not hold that it is
     * no member (not_member: only one that believes it is acts on it). */
    cl_meta_uuid outs[16];
    uint32_t nout = 0;
    for (uint32_t j = 0; leader && j < n->nlinked && nout < 16; j++) {
        int in = 0;
        for (uint32_t i = 0; i < t->n && !in; i++)
            in = cl_meta_uuid_eq(t->m[i].id, n->linked[j]);
        if (!in)
            outs[nout++] = n->linked[j];
    }
    uint8_t ver[12];
    em_st64(ver, t->major);
    em_st32(ver + 8, t->minor);
    pthread_mutex_unlock(&n->mu);
    cl_node_topo_release(t);
    for (uint32_t i = 0; i < nout; i++)
        (void)cl_net_send(n->net, outs[i].msb, outs[i].lsb, CL_NET_MSG_NOT_MEMBER, ver, sizeof ver);
    for (int i = 0; i < ndial; i++)
        (void)cl_net_connect(n->net, dial[i].ip, dial[i].port);
    for (int i = 0; i < nfail; i++) {
        em_buf b = EM_BUF_INIT;
        if (cl_meta_enc_fail(&b, fail[i]) == 0)
            (void)cl_meta_propose(n->meta, b.p, b.len, join_proposed, NULL);
        em_buf_free(&b);
    }
}

/* tick_join: until our own NODE_JOIN has applied. */
static void tick_join(cl_node *n, uint64_t now, int leader)
{
    pthread_mutex_lock(&n->mu);
    int go = leader && !n->proposing_self;
    if (go)
        n->proposing_self = 1;
    cl_meta_uuid to[MAX_TRACKED];
    uint32_t nto = 0;
    int retry = !leader && now - n->last_join_ms >= RETRY_MS;
    if (retry) {
        n->last_join_ms = now;
        nto = n->nlinked;           /* a seed's link is often not the canonical one */
        memcpy(to, n->linked, nto * sizeof *to);
    }
    pthread_mutex_unlock(&n->mu);
    if (go)
        (void)cl_meta_propose(n->meta, n->join_entry.p, n->join_entry.len, self_proposed, n);
    if (!retry)
        return;
    /* Every seed, every retry, until a member: two joiners linked to each
     * other must still reach the node that can take them in. */
    for (int i = 0; i < n->nseeds; i++)
        (void)cl_net_connect(n->net, n->seeds[i].ip, n->seeds[i].port);
    for (uint32_t i = 0; i < nto; i++)
        (void)cl_net_send(n->net, to[i].msb, to[i].lsb, CL_NET_MSG_JOIN_REQ,
                          n->join_entry.p, n->join_entry.len);
}

/* lease_window: how long a member may serve after it last heard from the
 * leader (or the leader from a majority): half the failure detection
 * timeout. */
static uint64_t lease_window(const cl_node *n)
{
    uint32_t fd = fd_ms(&n->cfg);
    return fd / 2;
}

static void on_pass_end(void *arg)
{
    cl_node *n = arg;
    if (n->cfg.on_pass_end)
        n->cfg.on_pass_end(n->cfg.arg);
}

static void on_tick(void *arg, uint64_t now)
{
    cl_node *n = arg;
    if (!enter(n))
        return;
    int leader = cl_node_is_leader(n);
    pthread_mutex_lock(&n->mu);
    int member = n->member, segmented = atomic_load(&n->segmented);
    if (!leader && !member)
        n->proposing_self = 0;
    pthread_mutex_unlock(&n->mu);
    if (!member && !segmented)
        tick_join(n, now, leader);
    tick_members(n, now, leader);
    /* The lease (reference/cluster.md §3.9): a follower serves while it has
     * heard from the leader within lease_ms; the leader while it has heard
     * from a majority of the voters within it.  lease_ms is half the
     * failure detection timeout, and the leader fails a member only a
     * whole timeout after its link went down (links close after at least
     * that long of silence), so a node cut off stops serving well before
     * the majority fails it and gives its partitions to others. */
    uint64_t lease_ms = lease_window(n);
    uint64_t until = 0;         /* the lease ends lease_ms after the last hearing */
    if (member && leader) {
        /* A majority of the voters, as Raft counts it (a 2-node cluster
         * has one voter: its leader alone): the lease lasts from the
         * hearing of the voter that completes the majority, most recent
         * first. */
        cl_meta_info info;
        cl_meta_get_info(n->meta, &info);
        cl_topo *t = cl_node_topo_acquire(n);
        uint32_t nv = info.voters < 8 ? info.voters : 8, nh = 0;
        uint64_t rx[8];
        for (uint32_t v = 0; v < nv; v++) {
            uint64_t r = 0;
            if (info.voter_ids[v] == n->raft_id)
                r = now;
            for (uint32_t i = 0; i < t->n && !r; i++)
                if (t->m[i].raft_id == info.voter_ids[v])
                    r = cl_net_peer_rx_ms(n->net, t->m[i].id.msb, t->m[i].id.lsb);
            uint32_t j = nh++;
            for (; j > 0 && rx[j - 1] < r; j--)
                rx[j] = rx[j - 1];
            rx[j] = r;
        }
        cl_node_topo_release(t);
        uint64_t r = nv == 0 ? now : rx[nv / 2];
        until = r ? r + lease_ms : 0;
    } else if (member) {
        cl_meta_uuid lid;
        uint64_t rx = leader_id(n, &lid) ? cl_net_peer_rx_ms(n->net, lid.msb, lid.lsb) : 0;
        until = rx ? rx + lease_ms : 0;
    }
    /* A deadline, not a flag: a member that was stopped (SIGSTOP, a stall)
     * holds no lease the moment it runs again, before this tick comes. */
    atomic_store_explicit(&n->lease_until, until, memory_order_relaxed);
    int lease = now < until;
    if (atomic_exchange(&n->lease, lease) != lease && member)
        EM_WARN("cluster: %s", lease ? "lease regained: serving cache operations again"
                                     : "lease lost (the leader or a majority not heard from): "
                                       "this node stops serving cache operations until it "
                                       "hears from them again");
    if (n->cfg.on_tick)
        n->cfg.on_tick(n->cfg.arg);
    leave_cb(n);
}

int cl_node_has_lease(cl_node *n)
{
    return em_now_ms() < atomic_load_explicit(&n->lease_until, memory_order_relaxed);
}

int cl_node_segmented(cl_node *n)
{
    return atomic_load_explicit(&n->segmented, memory_order_relaxed);
}

int cl_node_lease_wait(cl_node *n)
{
    /* A lease window, and the election that follows a leader's death
     * (libraft waits one to two election timeouts) with a heartbeat to
     * spare: a request that meets the coordinator's failover waits it out,
     * as Ignite's wait for the exchange, rather than fail. */
    uint64_t end = em_now_ms() + lease_window(n) + 2ull * n->elect_ms + 200;
    while (!cl_node_has_lease(n)) {
        if (em_now_ms() >= end)
            return 0;
        struct timespec ts = { 0, 10 * 1000000L };
        nanosleep(&ts, NULL);
    }
    return 1;
}

/* ---- lifecycle ------------------------------------------------------------------ */

cl_meta_uuid cl_node_id(const cl_node *n) { return n->id; }

void cl_node_links(cl_node *n, uint32_t *up, uint64_t *refused, uint64_t *opened)
{
    cl_net_stats st;
    cl_net_stats_get(n->net, &st);
    pthread_mutex_lock(&n->mu);
    *up = n->nup;
    pthread_mutex_unlock(&n->mu);
    *refused = st.refused;
    *opened = st.links_up;
}

int cl_node_is_leader(cl_node *n)
{
    cl_meta_info info;
    cl_meta_get_info(n->meta, &info);
    return info.role == CL_META_ROLE_LEADER;
}

unsigned cl_node_voters(cl_node *n)
{
    cl_meta_info info;
    cl_meta_get_info(n->meta, &info);
    return info.voters;
}

int cl_node_group_created(cl_node *n)
{
    cl_meta_info info;
    cl_meta_get_info(n->meta, &info);
    return info.created;
}

static int parse_seeds(cl_node *n, const char *s)
{
    if (!s)
        return 0;
    const char *p = s;
    while (*p) {
        const char *e = strchr(p, ',');
        size_t len = e ? (size_t)(e - p) : strlen(p);
        if (len) {
            if (n->nseeds == MAX_SEEDS)
                return EM_CONFIG;
            seed *sd = &n->seeds[n->nseeds];
            if (parse_addr(p, len, sd->ip, sizeof sd->ip, &sd->port) != 0)
                return EM_CONFIG;
            n->nseeds++;
        }
        p += len + (e ? 1 : 0);
    }
    return 0;
}

static void set_err(const cl_node_cfg *cfg, const char *fmt, const char *what)
{
    if (cfg->errmsg)
        snprintf(cfg->errmsg, CL_NODE_ERRMSG, fmt, what);
}

static uint32_t hb_ms(const cl_node_cfg *cfg)
{
    uint32_t hb = fd_ms(cfg) / 8;
    return hb < 50 ? 50 : hb > 1000 ? 1000 : hb;
}

int cl_node_start(cl_node **out, const cl_node_cfg *cfg)
{
    *out = NULL;
    if (!cfg->host || !cfg->dir || cfg->raft_port <= 0) {
        set_err(cfg, "cluster: %s", "host, dir and raft port are required");
        return EM_CONFIG;
    }
    cl_node *n = em_calloc(1, sizeof *n);
    if (!n)
        return EM_NOMEM;
    n->cfg = *cfg;
    pthread_rwlock_init(&n->life, NULL);
    pthread_mutex_init(&n->pub_mu, NULL);
    pthread_mutex_init(&n->decide_mu, NULL);
    pthread_mutex_init(&n->mu, NULL);
    pthread_mutex_init(&n->topo_mu, NULL);
    pthread_cond_init(&n->cv, NULL);
    n->topo = cl_topo_empty();
    int rc = n->topo ? parse_seeds(n, cfg->seeds) : EM_NOMEM;
    if (rc) {
        set_err(cfg, "cluster: bad seeds list '%s'", cfg->seeds ? cfg->seeds : "");
        goto fail;
    }
    n->id.msb = cfg->node_msb;
    n->id.lsb = cfg->node_lsb;
    if (!n->id.msb && !n->id.lsb) {
        uint8_t r[16];
        if (getrandom(r, sizeof r, 0) != (ssize_t)sizeof r) {
            rc = -errno;
            goto fail;
        }
        r[6] = (uint8_t)((r[6] & 0x0f) | 0x40);      /* UUID version 4 */
        r[8] = (uint8_t)((r[8] & 0x3f) | 0x80);      /* IETF variant */
        n->id.msb = em_ld64(r);
        n->id.lsb = em_ld64(r + 8);
    }
    /* Raft ids are 64-bit and must be non-zero and unique: the node id's
     * halves folded, which a fresh random id makes unique in practice. */
    n->raft_id = (n->id.msb ^ (n->id.lsb * 0x9e3779b97f4a7c15ull)) | 1;
    snprintf(n->host, sizeof n->host, "%s", cfg->host);
    snprintf(n->thin_addr, sizeof n->thin_addr, "%s", cfg->thin_addr ? cfg->thin_addr : "");

    cl_net_opts no = {
        .host = cfg->host, .port = cfg->port,
        .cluster = cfg->cluster_name ? cfg->cluster_name : "ember",
        .secret = cfg->secret, .secret_len = cfg->secret ? strlen(cfg->secret) : 0,
        .node_msb = n->id.msb, .node_lsb = n->id.lsb,
        .consistent = "pending",
        .arg = n, .on_up = on_up, .on_frame = on_frame, .on_down = on_down, .on_tick = on_tick,
        .on_pass_end = on_pass_end,
        .fault = cfg->fault, .fault_arg = cfg->fault_arg, .tls = cfg->tls,
        /* A connection that has not finished its handshake within the
         * failure detection timeout (10 s at most) is closed: Ignite bounds
         * its network waits by that timeout, and an idle or trickling peer
         * holds no slot for longer. */
        .handshake_ms = fd_ms(cfg) < 10000 ? fd_ms(cfg) : 10000,
        /* Heartbeats often enough that a lease (half the failure detection
         * timeout) spans several.  A silent link closes after the
         * transport's own timeout (10 s), not sooner: a busy machine must
         * not lose links to scheduling delays. */
        .heartbeat_ms = hb_ms(cfg),
    };
    /* The consistent id defaults to the transport address, known only once
     * it is bound: bind first when the port is 0 (tests). */
    if (cfg->consistent_id) {
        snprintf(n->cid, sizeof n->cid, "%s", cfg->consistent_id);
        no.consistent = n->cid;
    }
    rc = cl_net_start(&n->net, &no);
    if (rc) {
        set_err(cfg, "cluster: cannot listen on the cluster port (%s)", em_strerror(rc));
        goto fail;
    }
    snprintf(n->cluster_addr, sizeof n->cluster_addr, "%s:%d", cfg->host, cl_net_port(n->net));
    if (!cfg->consistent_id)
        snprintf(n->cid, sizeof n->cid, "%s", n->cluster_addr);
    snprintf(n->raft_addr, sizeof n->raft_addr, "%s:%d", cfg->host, cfg->raft_port);

    uint64_t host = (cfg->host_id ? cfg->host_id : cl_node_host_id(NULL)) & CL_TOPO_HOST_MASK;
    cl_meta_node_info ji = {
        .id = n->id, .raft_id = n->raft_id,
        .host = host | (cfg->exclude_neighbors ? CL_TOPO_EXCLUDE_NEIGHBORS : 0),
        .cid = { (const uint8_t *)n->cid, (uint32_t)strlen(n->cid) },
        .raft_addr = { (const uint8_t *)n->raft_addr, (uint32_t)strlen(n->raft_addr) },
        .n_addrs = 2,
        .addrs = { { (const uint8_t *)n->cluster_addr, (uint32_t)strlen(n->cluster_addr) },
                   { (const uint8_t *)n->thin_addr, (uint32_t)strlen(n->thin_addr) } },
    };
    if (!ji.addrs[1].len)
        ji.n_addrs = 1;
    if ((rc = cl_meta_enc_join(&n->join_entry, &ji)) != 0) {
        set_err(cfg, "cluster: %s", "consistent id or addresses too long");
        goto fail;
    }
    snprintf(n->dir, sizeof n->dir, "%s/meta-%016llx", cfg->dir, (unsigned long long)n->raft_id);
    if (mkdir(n->dir, 0700) != 0 && errno != EEXIST) {
        rc = -errno;
        set_err(cfg, "cluster: cannot create %s", n->dir);
        goto fail;
    }
    char merr[CL_META_ERRMSG] = "";
    /* The election timeout follows a short failure detection timeout: a
     * coordinator killed under fd 1 s is replaced (libraft waits 1x-2x the
     * timeout) and the new one fails it within about 2 s; 1000 ms, libraft's
     * own default, from fd 3 s up. */
    unsigned elect = cfg->election_ms;
    if (!elect) {
        elect = fd_ms(cfg) / 3;
        elect = elect < 300 ? 300 : elect > 1000 ? 1000 : elect;
    }
    n->elect_ms = elect;
    cl_meta_cfg mc = {
        .raft_id = n->raft_id, .raft_addr = n->raft_addr, .dir = n->dir,
        .bootstrap = cfg->bootstrap, .election_ms = elect,
        .heartbeat_ms = cfg->heartbeat_ms, .segment_size = 1u << 20, .errmsg = merr,
        .secret = cfg->secret, .secret_len = cfg->secret ? strlen(cfg->secret) : 0,
        .tls = cfg->tls,
    };
    rc = cl_meta_start(&n->meta, &mc);
    if (rc) {
        set_err(cfg, "cluster: metadata group: %s", merr[0] ? merr : em_strerror(rc));
        goto fail;
    }
    if ((rc = cl_meta_subscribe(n->meta, on_applied, n)) != 0)
        goto fail;
    atomic_store(&n->ready, 1);
    republish(n);                 /* whatever applied before ready was set */
    /* And its index: a snapshot restored at start, or entries applied
     * before ready, never came through on_applied, and a sync answered
     * with this count must not go below them. */
    pthread_mutex_lock(&n->mu);
    if (n->topo && cl_topo_index(n->topo) > n->applied)
        n->applied = cl_topo_index(n->topo);
    pthread_mutex_unlock(&n->mu);
    *out = n;
    return 0;
fail:
    atomic_store(&n->stopping, 1);
    if (n->meta)
        cl_meta_stop(n->meta);
    if (n->net)
        cl_net_stop(n->net);
    if (n->topo)
        cl_topo_release(n->topo);
    em_buf_free(&n->join_entry);
    pthread_cond_destroy(&n->cv);
    pthread_mutex_destroy(&n->mu);
    pthread_mutex_destroy(&n->topo_mu);
    pthread_mutex_destroy(&n->pub_mu);
    pthread_mutex_destroy(&n->decide_mu);
    pthread_rwlock_destroy(&n->life);
    em_free(n);
    return rc;
}

int cl_node_leave(cl_node *n, uint32_t timeout_ms)
{
    em_buf b = EM_BUF_INIT;
    int rc = cl_meta_enc_leave(&b, n->id);
    if (!rc)
        rc = cl_node_propose(n, b.p, b.len, timeout_ms);
    em_buf_free(&b);
    return rc;
}

void cl_node_stop(cl_node *n, int leave)
{
    if (!n)
        return;
    pthread_mutex_lock(&n->mu);
    int member = n->member;
    pthread_mutex_unlock(&n->mu);
    /* Bounded short: with no leader reachable (the whole cluster stopping)
     * the leave cannot commit, and failure detection removes this node
     * anyway. */
    if (leave && member)
        (void)cl_node_leave(n, 2000);
    pthread_rwlock_wrlock(&n->life);
    atomic_store(&n->stopping, 1);
    pthread_rwlock_unlock(&n->life);
    cl_net_stop(n->net);
    cl_meta_stop(n->meta);
    cl_node_topo_release(n->topo);
    em_buf_free(&n->join_entry);
    pthread_cond_destroy(&n->cv);
    pthread_mutex_destroy(&n->mu);
    pthread_mutex_destroy(&n->topo_mu);
    pthread_mutex_destroy(&n->pub_mu);
    pthread_mutex_destroy(&n->decide_mu);
    pthread_rwlock_destroy(&n->life);
    em_free(n);
}
