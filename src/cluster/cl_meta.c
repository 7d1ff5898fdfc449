/* cl_meta.c - the metadata group's thread: libraft with raft_uv and
 * raft_uv_tcp on a private libuv loop, fed by a queue that any thread posts
 * to (cl_meta.h has the thread contract).
 *
 * Life of a proposal: cl_meta_propose copies the entry into a raft_malloc'd
 * buffer (padded, cl_meta_raft_buf), queues an op and wakes the loop with
 * uv_async_send; the loop queues it behind the apply window and calls
 * raft_apply; libraft's apply callback (after the FSM applied the entry on
 * this node) calls the caller's cb with the FSM's verdict and frees the op.
 * Membership changes queue separately, since libraft runs one at a time.
 */
#include "cluster/cl_meta.h"
#include "cluster/cl_meta_auth.h"

#include <pthread.h>
#include <raft.h>
#include <raft/uv.h>
#include <stdio.h>
#include <string.h>
#include <uv.h>

#include "cluster/cl_meta_raft.h"
#include "util/err.h"
#include "util/log.h"
#include "util/mem.h"

enum { OP_PROPOSE = 1, OP_BARRIER, OP_ADD, OP_REMOVE };

/* One proposal in libraft at a time.  libraft 0.15 crashes (a NULL deref in
 * the log's reference table: appendLeaderCb truncates the log after the
 * first cancelled append, then releases a later batch's entries that the
 * truncation already dropped) when raft_close cancels more than one leader
 * append in flight; seen under TSan in cl_meta_uv_snapshot_restart_and_stop.
 * Metadata entries are few, so one commit round trip per entry costs
 * nothing that matters; stop also drains what is in flight first. */
#define CL_META_APPLY_WINDOW 1u
#define CL_META_DRAIN_ELECTIONS 3u
#define CL_META_DRAIN_IO_MS     30000u

typedef struct meta_op meta_op;
struct meta_op {
    meta_op           *next;
    cl_meta           *m;
    int                kind;
    cl_meta_done_cb    cb;
    void              *arg;
    struct raft_buffer buf;     /* OP_PROPOSE: raft_malloc'd copy */
    struct raft_apply  req;
    struct raft_barrier bar;    /* OP_BARRIER */
    meta_op           *also;    /* OP_BARRIER: later ones this one answers */
    cl_meta_change     ch;      /* OP_ADD / OP_REMOVE */
};

struct cl_meta {
    cl_meta_cfg     cfg;
    char           *addr, *dir;
    pthread_t       thread;

    pthread_mutex_t mu;         /* guards the fields to the next blank line */
    pthread_cond_t  cv;
    meta_op        *q_head, **q_tail;
    int             closing;    /* cl_meta_stop called: refuse new ops */
    int             started, start_rc;

    /* Metadata thread only. */
    uv_loop_t                loop;
    uv_async_t               async;
    uv_timer_t               timer;
    struct raft_uv_transport transport;     /* libraft's TCP transport */
    cl_meta_auth             auth;          /* around it, with a secret */
    struct raft_io           io;
    struct raft              raft;
    cl_meta_node             node;
    meta_op                 *prop_head, **prop_tail;   /* waiting for the window */
    unsigned                 props_inflight;
    meta_op                 *chg_head, **chg_tail, *chg_cur;
    int                      shutting;       /* new ops complete with EM_CLOSED */
    int                      close_started;  /* raft_close called */
    uint64_t                 drain_deadline; /* loop time at which to close anyway */
    struct raft_transfer     transfer;       /* leadership hand-over at stop */
    struct raft_barrier      barrier;        /* a new leader's first entry */
    raft_term                barrier_term;   /* the term it was written in */
    int                      barrier_busy;
    int                      transfer_tried, transferring;
    int                      prune_soon;     /* a member left: prune_gone next pass */

    pthread_mutex_t info_mu;
    cl_meta_info    info;
    int             created;    /* raft_bootstrap made a new group at start */
};

/* ---- info ---- */

/* publish_info copies this server's view for other threads; applied is the
 * index being applied right now (libraft advances last_applied after). */
static void publish_info_at(cl_meta *m, uint64_t applied)
{
    cl_meta_info in;
    memset(&in, 0, sizeof in);
    struct raft *r = &m->raft;
    switch (raft_state(r)) {
    case RAFT_FOLLOWER:  in.role = CL_META_ROLE_FOLLOWER; break;
    case RAFT_CANDIDATE: in.role = CL_META_ROLE_CANDIDATE; break;
    case RAFT_LEADER:    in.role = CL_META_ROLE_LEADER; break;
    default:             in.role = CL_META_ROLE_NONE; break;
    }
    in.term = r->current_term;
    raft_id lid = 0;
    const char *laddr = NULL;
    raft_leader(r, &lid, &laddr);
    in.leader_id = lid;
    if (laddr) {
        strncpy(in.leader_addr, laddr, sizeof in.leader_addr - 1);
    }
    in.last_applied = raft_last_applied(r);
    in.created = m->created;
    if (applied > in.last_applied)
        in.last_applied = applied;
    for (unsigned i = 0; i < r->configuration.n; i++) {
        int role = r->configuration.servers[i].role;
        if (role == RAFT_VOTER && in.voters < 8)
            in.voter_ids[in.voters++] = r->configuration.servers[i].id;
        else if (role == RAFT_VOTER)
            in.voters++;
        else if (role == RAFT_STANDBY)
            in.standbys++;
        else
            in.spares++;
    }
    pthread_mutex_lock(&m->info_mu);
    m->info = in;
    pthread_mutex_unlock(&m->info_mu);
}

static void publish_info(cl_meta *m) { publish_info_at(m, 0); }

void cl_meta_get_info(cl_meta *m, cl_meta_info *out)
{
    pthread_mutex_lock(&m->info_mu);
    *out = m->info;
    pthread_mutex_unlock(&m->info_mu);
}

/* prune_later: prune_gone on the loop's next pass, outside the libraft
 * callback this is called from (one that fires while a leader steps down
 * runs before its leader state is gone: a change started there would use
 * what is being torn down). */
static void prune_later(cl_meta *m)
{
    m->prune_soon = 1;
    pthread_mutex_lock(&m->mu);
    if (!m->closing)
        uv_async_send(&m->async);
    pthread_mutex_unlock(&m->mu);
}

static void info_sub(void *arg, const cl_meta_entry *e, const cl_meta_effect *eff)
{
    cl_meta *m = arg;
    publish_info_at(m, eff->index);
    /* A member left: its server leaves the configuration at once, not a
     * tick later - members stopped one after the other (each leave needs a
     * majority) must not outrun the removals.  Not from inside libraft's
     * apply: on the next pass of the loop. */
    if (e && eff->status == 0 &&
        (e->type == CL_META_E_NODE_LEAVE || e->type == CL_META_E_NODE_FAIL))
        prune_later(m);
}

static void barrier_cb(struct raft_barrier *req, int status)
{
    cl_meta *m = req->data;
    m->barrier_busy = 0;
    if (status)
        m->barrier_term = 0;        /* failed: the next tick writes another */
}

/* A leader commits the entries of earlier terms only under one of its own
 * (cl_meta_raft.c's io guard holds libraft to that rule), so a new leader
 * writes a barrier at once: what its predecessors left commits now, not at
 * the next proposal. */
static void lead_barrier(cl_meta *m)
{
    struct raft *r = &m->raft;
    if (m->shutting || m->barrier_busy || raft_state(r) != RAFT_LEADER ||
        m->barrier_term == r->current_term)
        return;
    m->barrier.data = m;
    if (raft_barrier(r, &m->barrier, barrier_cb) == 0) {
        m->barrier_busy = 1;
        m->barrier_term = r->current_term;
    }
}

static void prune_gone(cl_meta *m);
static meta_op *op_new(int kind, cl_meta_done_cb cb, void *arg);

static void timer_cb(uv_timer_t *t)
{
    publish_info(t->data);
    lead_barrier(t->data);
    prune_gone(t->data);
}

/* ---- operations, on the metadata thread ---- */

static void op_finish(meta_op *op, int status, const cl_meta_effect *eff)
{
    for (meta_op *a = op->also, *next; a; a = next) {
        next = a->also;
        a->cb(a->arg, status, eff);
        em_free(a);
    }
    op->cb(op->arg, status, eff);
    em_free(op);
}

static void pump_proposals(cl_meta *m);
static void maybe_close(cl_meta *m);

/* prop_done ends a proposal or barrier libraft took (status: libraft's). */
static void prop_done(cl_meta *m, meta_op *op, int status, const cl_meta_effect *eff)
{
    m->props_inflight--;
    if (status == 0)
        op_finish(op, eff->status, eff);
    else
        op_finish(op, cl_meta_raft_err(status), NULL);
    if (m->shutting) {
        /* the drain timer closes (never from inside libraft: see maybe_close) */
    } else if (status != 0) {
        /* libraft fails its pending requests while it steps down, before
         * its leader state is gone: a raft_apply from inside that callback
         * dereferenced what was being torn down (TSan saw the SEGV).  The
         * proposals still waiting were never handed to it: they fail as
         * "not the leader" (never appended, so callers may retry). */
        while (m->prop_head) {
            meta_op *w = m->prop_head;
            m->prop_head = w->next;
            raft_free(w->buf.base);
            op_finish(w, EM_NOTLEADER, NULL);
        }
        m->prop_tail = &m->prop_head;
    } else {
        pump_proposals(m);
    }
}

static void apply_cb(struct raft_apply *req, int status, void *result)
{
    meta_op *op = req->data;
    prop_done(op->m, op, status, result);
}

/* A barrier's callback runs once it committed and this server applied every
 * entry before it: the leader proved it still leads, and its state is the
 * group's as of that index. */
static void op_barrier_cb(struct raft_barrier *req, int status)
{
    meta_op *op = req->data;
    cl_meta_effect eff = { .index = req->index };
    prop_done(op->m, op, status, &eff);
}

/* prop_pop takes the first waiting proposal (there is one). */
static meta_op *prop_pop(cl_meta *m)
{
    meta_op *op = m->prop_head;
    m->prop_head = op->next;
    if (!m->prop_head)
        m->prop_tail = &m->prop_head;
    return op;
}

/* pump_proposals hands waiting proposals to libraft, CL_META_APPLY_WINDOW
 * at a time (see the top of the file for why the window is 1). */
static void pump_proposals(cl_meta *m)
{
    while (m->props_inflight < CL_META_APPLY_WINDOW && m->prop_head) {
        meta_op *op = prop_pop(m);
        int rv;
        if (op->kind == OP_BARRIER) {
            /* Barriers waiting together are answered by one: each asks for
             * everything committed before it was posted.  So a flood of
             * syncs costs one log entry per commit round trip. */
            for (meta_op **t = &op->also; m->prop_head && m->prop_head->kind == OP_BARRIER;
                 t = &(*t)->also)
                *t = prop_pop(m);   /* its own also is NULL: queued ops have none */
            op->bar.data = op;
            rv = raft_barrier(&m->raft, &op->bar, op_barrier_cb);
        } else {
            op->req.data = op;
            rv = raft_apply(&m->raft, &op->req, &op->buf, 1, apply_cb);
        }
        if (rv) {
            raft_free(op->buf.base);    /* not taken by libraft on failure */
            op_finish(op, cl_meta_raft_err(rv), NULL);
            continue;
        }
        m->props_inflight++;
    }
}

static void run_changes(cl_meta *m);

/* log_change: an add or remove of a server, done or failed (roles changes,
 * the planner's own steps, are not logged).  Rare (a join or a member
 * gone) and, when one hangs or fails, the only trace of why a node never
 * became a member. */
static void log_change(const cl_meta_change *c, int status)
{
    if (c->kind == CL_META_CHANGE_ROLES)
        return;
    const char *what = c->kind == CL_META_CHANGE_ADD ? "adding" : "removing";
    if (status)
        EM_WARN("metadata group: %s server %llu failed after %u steps: %s", what,
                (unsigned long long)c->id, c->steps, em_strerror(status));
    else
        EM_INFO("metadata group: %s server %llu done in %u steps", what,
                (unsigned long long)c->id, c->steps);
}

static void change_done(cl_meta_change *c, int status)
{
    meta_op *op = c->data;
    cl_meta *m = op->m;
    m->chg_cur = NULL;
    log_change(c, status);
    publish_info(m);            /* before the callback, so it sees the roles */
    op_finish(op, status, NULL);
    if (!m->shutting) {             /* else the drain timer closes (maybe_close) */
        run_changes(m);
        prune_later(m);         /* the next one, if any, without a tick's wait */
    }
}

/* run_changes starts queued membership changes until one is in flight. */
static void run_changes(cl_meta *m)
{
    while (!m->chg_cur && m->chg_head) {
        meta_op *op = m->chg_head;
        m->chg_head = op->next;
        if (!m->chg_head)
            m->chg_tail = &m->chg_head;
        op->ch.done = change_done;
        op->ch.data = op;
        int rc = cl_meta_change_start(&op->ch, &m->raft);
        if (rc == 0) {
            m->chg_cur = op;
        } else {
            log_change(&op->ch, rc == 1 ? 0 : rc);
            op_finish(op, rc == 1 ? 0 : rc, NULL);
        }
    }
}

static void enqueue(meta_op ***tail, meta_op *op)
{
    op->next = NULL;
    **tail = op;
    *tail = &op->next;
}

static void op_fail(meta_op *op, int status)
{
    if (op->kind == OP_PROPOSE)
        raft_free(op->buf.base);
    op_finish(op, status, NULL);
}

static void op_run(cl_meta *m, meta_op *op)
{
    if (m->shutting) {
        op_fail(op, EM_CLOSED);
        return;
    }
    if (op->kind == OP_PROPOSE || op->kind == OP_BARRIER) {
        if (raft_state(&m->raft) != RAFT_LEADER) {
            op_fail(op, EM_NOTLEADER);
            return;
        }
        enqueue(&m->prop_tail, op);
        pump_proposals(m);
        return;
    }
    enqueue(&m->chg_tail, op);
    run_changes(m);
}

/* ---- servers of members that left ------------------------------------------ */

typedef struct gone_q {
    const struct raft_configuration *c;
    raft_id self, found;
} gone_q;

/* find_gone: a server of the configuration whose member left the group (a
 * LEFT tombstone with its raft id, no member alive with it). */
static void find_gone(void *arg, const cl_meta_fsm *s)
{
    gone_q *q = arg;
    for (uint32_t k = 0; k < s->n_members && !q->found; k++) {
        const cl_meta_member *mb = &s->members[k];
        if (mb->state != CL_META_LEFT || mb->raft_id == q->self)
            continue;
        int in_config = 0, live = 0;
        for (unsigned i = 0; i < q->c->n; i++)
            in_config |= q->c->servers[i].id == mb->raft_id;
        for (uint32_t j = 0; in_config && j < s->n_members; j++)
            live |= s->members[j].raft_id == mb->raft_id && s->members[j].state != CL_META_LEFT;
        if (in_config && !live)
            q->found = mb->raft_id;
    }
}

static void prune_done(void *arg, int status, const cl_meta_effect *eff)
{
    (void)arg; (void)status; (void)eff;     /* the next tick looks again */
}

/* prune_gone: on the leader, with no membership change queued, removes one
 * server whose member left.  A member that fails or leaves must leave the
 * Raft configuration too, or it keeps counting toward the quorum and keeps
 * its address: a restarted node on that address is refused
 * (RAFT_DUPLICATEADDRESS) until it is gone.  The node layer used to post
 * that removal once, when the FAIL applied on the leader; a removal refused
 * then (another change in progress) or a leader change right after left
 * the dead server in for good, and the restarted node never joined again
 * (cluster_nemesis under ASan, 3 of about 50 runs).  So the leader looks
 * when a LEAVE or FAIL applies, when a change ends, and on every tick,
 * until none is left. */
static void prune_gone(cl_meta *m)
{
    struct raft *r = &m->raft;
    if (m->shutting || m->chg_cur || m->chg_head || raft_state(r) != RAFT_LEADER)
        return;
    gone_q q = { &r->configuration, r->id, 0 };
    cl_meta_node_read(&m->node, find_gone, &q);
    if (!q.found)
        return;
    meta_op *op = op_new(OP_REMOVE, prune_done, NULL);
    if (!op)
        return;
    op->m = m;
    op->ch.kind = CL_META_CHANGE_REMOVE;
    op->ch.id = q.found;
    op_run(m, op);
}

static void handle_close_cb(uv_handle_t *h) { (void)h; }

static void meta_raft_closed(struct raft *r)
{
    cl_meta *m = r->data;
    raft_uv_close(&m->io);
    raft_uv_tcp_close(&m->transport);
    uv_close((uv_handle_t *)&m->async, handle_close_cb);
    uv_close((uv_handle_t *)&m->timer, handle_close_cb);
}

/* maybe_close calls raft_close once nothing is in flight - our proposals and
 * changes, a snapshot, appends not yet stored - or once the drain deadline
 * passed (a leader without a majority never finishes).  Besides the append
 * crash above, libraft 0.15's raft_uv closes a segment writer twice when
 * raft_close runs inside the callbacks of a finished disk write (libuv's
 * uv_poll_stop assertion, an abort at shutdown seen under TSan): a leader's
 * proposal and membership change complete there, when its own write commits
 * them, and the write's handler then finalizes the segment the close
 * already did.  So maybe_close runs only from the drain timer and from
 * begin_shutdown (the loop's own callbacks), never from libraft's; closing
 * while idle matters too. */
static unsigned other_voters(const struct raft *r)
{
    unsigned n = 0;
    for (unsigned i = 0; i < r->configuration.n; i++)
        n += r->configuration.servers[i].role == RAFT_VOTER &&
             r->configuration.servers[i].id != r->id;
    return n;
}

/* transfer_cb: libraft's answer to raft_transfer (a voter took over, or an
 * election timeout passed); either way, the drain timer's next run closes. */
static void transfer_cb(struct raft_transfer *req)
{
    cl_meta *m = req->data;
    m->transferring = 0;
}

static void maybe_close(cl_meta *m)
{
    if (m->close_started)
        return;
    struct raft *r = &m->raft;
    /* Disk writes always finish: they are waited for past the deadline
     * (up to CL_META_DRAIN_IO_MS more), since closing under one is what
     * crashes; proposals only until the deadline (without a majority they
     * never finish).  A busy machine (TSan in CI) took longer than the
     * deadline to store 20 appends and crashed in the close. */
    int io = r->snapshot.pending.term != 0 ||          /* snapshot being taken/put */
             r->last_stored < raft_last_index(r);      /* entries not yet on disk */
    int busy = io || m->props_inflight || m->chg_cur;
    uint64_t now = uv_now(&m->loop);
    int late = now >= m->drain_deadline;
    if ((busy && !late) || (io && now < m->drain_deadline + CL_META_DRAIN_IO_MS))
        return;
    /* A leader hands over first (cluster.md §3.3), so the group does not
     * wait an election timeout for a successor. */
    if (!m->transfer_tried && !late && raft_state(r) == RAFT_LEADER && other_voters(r)) {
        m->transfer_tried = 1;
        m->transfer.data = m;
        if (raft_transfer(r, &m->transfer, 0, transfer_cb) == 0)
            m->transferring = 1;
    }
    if (m->transferring && !late)
        return;
    m->close_started = 1;
    uv_timer_stop(&m->timer);
    raft_close(&m->raft, meta_raft_closed);
}

static void drain_cb(uv_timer_t *t) { maybe_close(t->data); }

static void begin_shutdown(cl_meta *m)
{
    m->shutting = 1;
    /* Proposals and membership changes not yet handed to libraft never
     * will be; those in flight get CL_META_DRAIN_ELECTIONS election
     * timeouts to finish, then raft_close fails them. */
    while (m->prop_head) {
        meta_op *op = m->prop_head;
        m->prop_head = op->next;
        op_fail(op, EM_CLOSED);
    }
    m->prop_tail = &m->prop_head;
    while (m->chg_head) {
        meta_op *op = m->chg_head;
        m->chg_head = op->next;
        op_finish(op, EM_CLOSED, NULL);
    }
    m->chg_tail = &m->chg_head;
    unsigned et = m->cfg.election_ms ? m->cfg.election_ms : 1000;
    m->drain_deadline = uv_now(&m->loop) + (uint64_t)et * CL_META_DRAIN_ELECTIONS;
    uv_timer_stop(&m->timer);
    uv_timer_start(&m->timer, drain_cb, 5, 5);
    maybe_close(m);
}

static void async_cb(uv_async_t *a)
{
    cl_meta *m = a->data;
    pthread_mutex_lock(&m->mu);
    meta_op *list = m->q_head;
    m->q_head = NULL;
    m->q_tail = &m->q_head;
    int closing = m->closing;
    pthread_mutex_unlock(&m->mu);
    if (closing && !m->shutting)
        begin_shutdown(m);
    while (list) {
        meta_op *op = list;
        list = op->next;
        op_run(m, op);          /* EM_CLOSED once shutting */
    }
    if (m->prune_soon) {
        m->prune_soon = 0;
        prune_gone(m);
    }
}

/* ---- start and stop ---- */

/* meta_open sets up the loop, I/O and Raft on the metadata thread.  On
 * failure it undoes what it did (running the loop until handles close). */
static int meta_open(cl_meta *m)
{
    int rc = uv_loop_init(&m->loop);
    if (rc)
        return rc;
    uv_async_init(&m->loop, &m->async, async_cb);
    m->async.data = m;
    uv_timer_init(&m->loop, &m->timer);
    m->timer.data = m;
    int rv;
    if ((rv = raft_uv_tcp_init(&m->transport, &m->loop)) != 0)
        goto fail_handles;
    struct raft_uv_transport *tp = &m->transport;
    if ((m->cfg.secret && m->cfg.secret_len) || m->cfg.tls) {
        if ((rv = cl_meta_auth_init(&m->auth, &m->transport, &m->loop, m->cfg.secret,
                                    m->cfg.secret ? m->cfg.secret_len : 0, m->cfg.tls)) != 0) {
            rv = RAFT_INVALID;
            goto fail_tcp;
        }
        tp = &m->auth.outer;
    }
    if ((rv = raft_uv_init(&m->io, &m->loop, m->dir, tp)) != 0)
        goto fail_tcp;
    if (m->cfg.segment_size)
        raft_uv_set_segment_size(&m->io, m->cfg.segment_size);
    if ((rv = raft_init(&m->raft, &m->io, &m->node.fsm, m->cfg.raft_id, m->addr)) != 0)
        goto fail_uv;
    m->raft.data = m;
    cl_meta_node_bind(&m->node, &m->raft);
    if (m->cfg.bootstrap) {
        struct raft_configuration conf;
        raft_configuration_init(&conf);
        rv = raft_configuration_add(&conf, m->cfg.raft_id, m->addr, RAFT_VOTER);
        if (rv == 0 && (rv = raft_bootstrap(&m->raft, &conf)) == 0)
            m->created = 1;
        raft_configuration_close(&conf);
        if (rv == RAFT_CANTBOOTSTRAP)
            rv = 0;                     /* the directory already holds a group */
        if (rv)
            goto fail_raft;
    }
    raft_set_election_timeout(&m->raft, m->cfg.election_ms ? m->cfg.election_ms : 1000);
    raft_set_heartbeat_timeout(&m->raft, m->cfg.heartbeat_ms ? m->cfg.heartbeat_ms : 100);
    raft_set_pre_vote(&m->raft, true);
    if (m->cfg.snapshot_threshold)
        raft_set_snapshot_threshold(&m->raft, m->cfg.snapshot_threshold);
    if (m->cfg.snapshot_trailing)
        raft_set_snapshot_trailing(&m->raft, m->cfg.snapshot_trailing);
    if ((rv = raft_start(&m->raft)) != 0)
        goto fail_raft;
    unsigned hb = m->cfg.heartbeat_ms ? m->cfg.heartbeat_ms : 100;
    uv_timer_start(&m->timer, timer_cb, hb, hb);
    publish_info(m);
    return 0;

fail_raft:
    rc = cl_meta_raft_err(rv);
    if (m->cfg.errmsg)
        snprintf(m->cfg.errmsg, CL_META_ERRMSG, "%s", raft_errmsg(&m->raft));
    raft_close(&m->raft, meta_raft_closed);   /* closes io, tcp and handles */
    uv_run(&m->loop, UV_RUN_DEFAULT);
    uv_loop_close(&m->loop);
    return rc;
fail_uv:
    if (m->cfg.errmsg)
        snprintf(m->cfg.errmsg, CL_META_ERRMSG, "%s", m->raft.errmsg);
    raft_uv_close(&m->io);
fail_tcp:
    raft_uv_tcp_close(&m->transport);
fail_handles:
    uv_close((uv_handle_t *)&m->async, handle_close_cb);
    uv_close((uv_handle_t *)&m->timer, handle_close_cb);
    uv_run(&m->loop, UV_RUN_DEFAULT);
    uv_loop_close(&m->loop);
    return rv ? cl_meta_raft_err(rv) : EM_IO;
}

static void *meta_main(void *arg)
{
    cl_meta *m = arg;
    pthread_setname_np(pthread_self(), "em-meta");
    int rc = meta_open(m);
    pthread_mutex_lock(&m->mu);
    m->started = 1;
    m->start_rc = rc;
    pthread_cond_broadcast(&m->cv);
    pthread_mutex_unlock(&m->mu);
    if (rc)
        return NULL;
    uv_run(&m->loop, UV_RUN_DEFAULT);
    uv_loop_close(&m->loop);
    return NULL;
}

static void meta_free(cl_meta *m)
{
    cl_meta_node_free(&m->node);
    pthread_mutex_destroy(&m->mu);
    pthread_cond_destroy(&m->cv);
    pthread_mutex_destroy(&m->info_mu);
    em_free(m->addr);
    em_free(m->dir);
    em_free(m);
}

int cl_meta_start(cl_meta **out, const cl_meta_cfg *cfg)
{
    *out = NULL;
    if (!cfg->raft_id || !cfg->raft_addr || !cfg->dir ||
        strlen(cfg->raft_addr) > CL_META_MAX_ADDR)
        return EM_INVAL;
    cl_meta *m = em_calloc(1, sizeof *m);
    if (!m)
        return EM_NOMEM;
    m->cfg = *cfg;
    m->addr = em_strndup(cfg->raft_addr, strlen(cfg->raft_addr));
    m->dir = em_strndup(cfg->dir, strlen(cfg->dir));
    if (!m->addr || !m->dir || cl_meta_node_init(&m->node)) {
        em_free(m->addr);
        em_free(m->dir);
        em_free(m);
        return EM_NOMEM;
    }
    m->cfg.raft_addr = m->addr;
    m->cfg.dir = m->dir;
    pthread_mutex_init(&m->mu, NULL);
    pthread_cond_init(&m->cv, NULL);
    pthread_mutex_init(&m->info_mu, NULL);
    m->q_tail = &m->q_head;
    m->chg_tail = &m->chg_head;
    m->prop_tail = &m->prop_head;
    /* First subscriber: keep cl_meta_get_info current after every apply. */
    cl_meta_node_subscribe(&m->node, info_sub, m);
    if (cfg->on_apply)
        cl_meta_node_subscribe(&m->node, cfg->on_apply, cfg->on_apply_arg);
    if (pthread_create(&m->thread, NULL, meta_main, m)) {
        meta_free(m);
        return EM_NOMEM;
    }
    pthread_mutex_lock(&m->mu);
    while (!m->started)
        pthread_cond_wait(&m->cv, &m->mu);
    int rc = m->start_rc;
    pthread_mutex_unlock(&m->mu);
    if (rc) {
        pthread_join(m->thread, NULL);
        meta_free(m);
        return rc;
    }
    *out = m;
    return 0;
}

void cl_meta_stop(cl_meta *m)
{
    if (!m)
        return;
    pthread_mutex_lock(&m->mu);
    m->closing = 1;
    pthread_mutex_unlock(&m->mu);
    uv_async_send(&m->async);
    pthread_join(m->thread, NULL);
    meta_free(m);
}

/* post queues op for the metadata thread: 0, or EM_CLOSED after stop. */
static int post(cl_meta *m, meta_op *op)
{
    op->next = NULL;
    op->m = m;
    pthread_mutex_lock(&m->mu);
    if (m->closing) {
        pthread_mutex_unlock(&m->mu);
        return EM_CLOSED;
    }
    *m->q_tail = op;
    m->q_tail = &op->next;
    /* Sent under the lock, so stop's async_send cannot overtake it and the
     * handle cannot be closed under us. */
    uv_async_send(&m->async);
    pthread_mutex_unlock(&m->mu);
    return 0;
}

static meta_op *op_new(int kind, cl_meta_done_cb cb, void *arg)
{
    meta_op *op = em_calloc(1, sizeof *op);
    if (op) {
        op->kind = kind;
        op->cb = cb;
        op->arg = arg;
    }
    return op;
}

int cl_meta_propose(cl_meta *m, const void *entry, size_t len,
                    cl_meta_done_cb cb, void *arg)
{
    meta_op *op = op_new(OP_PROPOSE, cb, arg);
    if (!op)
        return EM_NOMEM;
    op->buf = cl_meta_raft_buf(entry, len);
    if (!op->buf.base) {
        em_free(op);
        return EM_NOMEM;
    }
    int rc = post(m, op);
    if (rc) {
        raft_free(op->buf.base);
        em_free(op);
    }
    return rc;
}

int cl_meta_barrier(cl_meta *m, cl_meta_done_cb cb, void *arg)
{
    meta_op *op = op_new(OP_BARRIER, cb, arg);
    if (!op)
        return EM_NOMEM;
    int rc = post(m, op);
    if (rc)
        em_free(op);
    return rc;
}

static int post_change(cl_meta *m, int kind, uint64_t id, const char *addr,
                       cl_meta_done_cb cb, void *arg)
{
    if (id == 0 || (addr && strlen(addr) > CL_META_MAX_ADDR))
        return EM_INVAL;
    meta_op *op = op_new(kind == CL_META_CHANGE_ADD ? OP_ADD : OP_REMOVE, cb, arg);
    if (!op)
        return EM_NOMEM;
    op->ch.kind = kind;
    op->ch.id = id;
    if (addr)
        memcpy(op->ch.addr, addr, strlen(addr) + 1);
    int rc = post(m, op);
    if (rc)
        em_free(op);
    return rc;
}

int cl_meta_add(cl_meta *m, uint64_t raft_id, const char *raft_addr,
                cl_meta_done_cb cb, void *arg)
{
    if (!raft_addr)
        return EM_INVAL;
    return post_change(m, CL_META_CHANGE_ADD, raft_id, raft_addr, cb, arg);
}

int cl_meta_remove(cl_meta *m, uint64_t raft_id, cl_meta_done_cb cb, void *arg)
{
    return post_change(m, CL_META_CHANGE_REMOVE, raft_id, NULL, cb, arg);
}

void cl_meta_read(cl_meta *m, void (*fn)(void *arg, const cl_meta_fsm *s), void *arg)
{
    cl_meta_node_read(&m->node, fn, arg);
}

int cl_meta_subscribe(cl_meta *m, cl_meta_sub_cb cb, void *arg)
{
    pthread_mutex_lock(&m->mu);
    int rc = cl_meta_node_subscribe(&m->node, cb, arg);
    pthread_mutex_unlock(&m->mu);
    return rc;
}
