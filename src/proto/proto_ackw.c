/* proto_ackw.c - FULL_SYNC writes whose reply waits for acks without a
 * thread waiting.
 *
 * A write to a FULL_SYNC cache is answered once every owner acked it
 * (cl_repl).  Waiting for that on the thread that ran it costs a sleep and
 * a wake-up per write, and holds the thread: a client's loop serves none of
 * its other connections meanwhile, and a forwarding worker none of the
 * queued forwarded writes.  So where the thread can hand the wait over, the
 * handler ends with cl_repl_finish_defer instead (pr_cache_repl_finish),
 * the reply is built as if the acks were in, and:
 *
 *  - on a client's loop (ackw_hold), the reply is held in the connection,
 *    which parks with every later frame waiting behind it; the await's done
 *    (it records and wakes the loops; a cancel waits for it) lets
 *    pr_conn_resume send it (ackw_poll).  When it may (proto_hold.c), a
 *    successful reply is instead sent by the settling thread itself, and
 *    the loop is woken only when frames wait behind it: the transport's
 *    wake-up of the loop per acked write was, with the stream's hand-off,
 *    what a replicated put cost over Redis's;
 *  - on a forwarding worker (server/srv_cluster.c), the worker moves on; the
 *    thread that settles the await (the transport's, receiving the last
 *    ack) answers the forwarder (pr_fwd_ack_result builds what to answer).
 *
 * What the acks decide is the blocking path's: a timeout or a refusal turns
 * the held reply into the same error, a named write's request id records
 * the outcome only then, and an op that may run twice whose primary moved
 * runs again (client side, with the wait) or is sent back (forwarded).
 */
#include "proto/proto_int.h"

#include <stdatomic.h>
#include <stdio.h>
#include <string.h>

#include "cluster/cl_repl.h"
#include "cluster/cl_rid.h"
#include "util/mem.h"

struct pr_ackw {
    cl_repl_await aw;
    pr_hold  hold;
    em_buf   reply;                 /* the reply frame, built as if acked */
    em_buf   frame;                 /* its request, to run again */
    int      sent;                  /* the settling thread sent it (read after settled) */
    int      rc;                    /* the await's result, once settled */
    int      op, status;            /* the request's, for its count */
};

int pr_cache_repl_finish(pr_conn *c, uint16_t op)
{
    cl_repl *r = c->srv->opt.repl;
    if (!c->in_loop && !c->ack_defer)
        return cl_repl_finish(r);
    if (c->no_wait && !cl_repl_ticket_fits()) {
        /* The transport thread must not wait (a batch read of more
         * partitions with writes unacked than a deferred wait holds): a
         * worker runs the request again (pr_fwd_handover). */
        cl_repl_begin();
        c->handover = 1;
        return EM_BUSY;
    }
    /* on a client's loop, and on the transport thread (pass_flush), the
     * streams leave at the end of the thread's pass (net.h on_pass_end,
     * srv_cluster_pass_end), with the other writes of the pass */
    int rc = c->in_loop || c->pass_flush ? cl_repl_finish_pass(r) : cl_repl_finish_defer(r);
    if (rc != CL_REPL_DEFERRED)
        return rc;
    c->ack_deferred = 1;
    c->ack_op = op;
    return 0;
}

/* ack_msg: the error a request's reply becomes when its acks say rc. */
static const char *ack_msg(int op, int rc, char *buf, size_t n)
{
    const char *m = pr_repl_msg(op, rc);
    if (m)
        return m;
    snprintf(buf, n, "Request failed: %s", em_strerror(rc));
    return buf;
}

/* fail_frame rewrites the reply frame in b as a failure with msg, keeping
 * its request id and topology version (ver: the connection's). */
static int fail_frame(em_buf *b, int ver, const char *msg)
{
    size_t hdr = ver < PR_VER(1, 4, 0) ? 12 : 14;
    if (b->len < hdr)
        return EM_PROTO;
    if (ver >= PR_VER(1, 4, 0)) {
        uint16_t flags = em_ld16(b->p + 12);
        if (flags & 2)
            hdr += 12;
        if (b->len < hdr)
            return EM_PROTO;
        em_st16(b->p + 12, (uint16_t)(flags | 1));
    }
    b->len = hdr;
    if (em_buf_put_le32(b, (uint32_t)PR_ST_FAILED) || pr_put_str(b, msg))
        return EM_NOMEM;
    em_st32(b->p, (uint32_t)(b->len - 4));
    return 0;
}

/* ---- client side ----------------------------------------------------------- */

static void ackw_done(void *arg, int rc)
{
    struct pr_ackw *a = arg;
    pr_server *srv = a->hold.srv;   /* once settled is seen, a may be freed */
    a->rc = rc;
    /* a's connection is closing at worst (its close cancels the await under the
     * lock this runs under, and the send then fails).  With frames behind
     * the reply the loop must run anyway: it sends the reply too, with
     * what follows (a pipelining client). */
    a->sent = !rc && pr_hold_may_send(&a->hold) &&
              srv->direct_send(srv->direct_arg, a->hold.io, a->reply.p, a->reply.len, NULL, 0) == 0;
    if (a->sent)
        atomic_fetch_add_explicit(&srv->replies_direct, 1, memory_order_relaxed);
    if (pr_hold_settle(&a->hold, a->sent) && srv->tx_wake)
        srv->tx_wake(srv->tx_wake_arg);     /* the loops resume parked connections */
}

uint64_t pr_server_replies_direct(pr_server *s)
{
    return atomic_load_explicit(&s->replies_direct, memory_order_relaxed);
}

int pr_ackw_settled(const pr_conn *c)
{
    return c->ackw && pr_hold_settled(c, &c->ackw->hold);
}

void pr_ackw_behind(pr_conn *c)
{
    if (c->ackw)
        pr_hold_behind(c, &c->ackw->hold);
}

void pr_ackw_unpass(pr_conn *c)
{
    if (c->ackw)
        pr_hold_unpass(&c->ackw->hold);
}

/* ackw_count counts the held request (pr_ackw_hold), timed whole: from its
 * decoding to its reply (sent: by the settling thread), with the acks'
 * verdict rc. */
static void ackw_count(pr_conn *c, int rc, int sent)
{
    struct pr_ackw *a = c->ackw;
    if (c->stats)
        pr_stats_req(c->stats, a->op, rc ? PR_ST_FAILED : a->status, pr_hold_ns(&a->hold, sent));
}

/* ackw_deliver appends what the settled write answers: its reply, the
 * error its acks made of it, or - an op that may run twice whose primary
 * moved - its run again, with the wait (as the blocking path reroutes it;
 * that run is counted as it runs). */
static int ackw_deliver(pr_conn *c, int rc, em_buf *out)
{
    struct pr_ackw *a = c->ackw;
    if (rc == EM_STALE && a->frame.len >= 2 && pr_cluster_idempotent(em_ld16(a->frame.p))) {
        int r2 = pr_exec_request(c, a->frame.p, a->frame.len, out);
        if (r2 != PR_PARK && r2 != PR_OFFLOAD)
            return r2;
        /* (an ATOMIC write neither waits for a lock nor goes to SQL) */
    }
    ackw_count(c, rc, 0);
    char buf[160];
    if (rc && fail_frame(&a->reply, c->ver, ack_msg(a->op, rc, buf, sizeof buf)))
        return EM_NOMEM;
    return em_buf_append(out, a->reply.p, a->reply.len);
}

int pr_ackw_hold(pr_conn *c, int rc, const uint8_t *body, size_t len, em_buf *out, size_t at)
{
    c->ack_deferred = 0;
    if (rc) {
        cl_repl_begin();            /* no reply to hold: nothing waits for the acks */
        return rc;
    }
    if (!c->ackw) {
        if (!(c->ackw = em_calloc(1, sizeof *c->ackw))) {
            cl_repl_begin();        /* the kept ticket: nothing can wait for it */
            return EM_NOMEM;
        }
        c->ackw->aw.done = ackw_done;
        c->ackw->aw.arg = c->ackw;
        c->ackw->aw.cancel_waits = 1;
    }
    struct pr_ackw *a = c->ackw;
    em_buf_reset(&a->reply);
    em_buf_reset(&a->frame);
    if (em_buf_append(&a->reply, out->p + at, out->len - at) ||
        em_buf_append(&a->frame, body, len)) {
        cl_repl_begin();
        return EM_NOMEM;
    }
    out->len = at;
    pr_hold_start(&a->hold, c, PR_OUT_ACKS);
    a->sent = 0;
    a->op = c->req_op;              /* request() left its count to the acks */
    a->status = c->last_status;
    if (cl_repl_await_start(c->srv->opt.repl, &a->aw, &rc))
        return ackw_deliver(c, rc, out);    /* the acks were in already */
    c->fwd_busy = PR_OUT_ACKS;      /* later frames wait behind it */
    return 0;
}

int pr_ackw_poll(pr_conn *c, em_buf *out, int *rc)
{
    struct pr_ackw *a = c->ackw;
    if (!a || !pr_hold_take(&a->hold))
        return 0;
    c->fwd_busy = 0;
    if (a->sent && c->stats) {      /* (what the server counts went through out) */
        ackw_count(c, 0, 1);
        pr_stats_bytes(c->stats, 0, a->reply.len);
    }
    *rc = a->sent ? 0 : ackw_deliver(c, a->rc, out);
    return 1;
}

void pr_ackw_free(pr_conn *c)
{
    struct pr_ackw *a = c->ackw;
    if (!a)
        return;
    /* Waiting: it is taken out and never settles; settled: done has
     * returned (cancel_waits: the cancel waits for it).
     * Always, not only while the connection waits: done stores settled
     * before it reads behind, and the loop may have taken the settled
     * reply, and closed, in between. */
    if (c->srv->opt.repl)
        (void)cl_repl_await_cancel(c->srv->opt.repl, &a->aw);
    pr_hold_unpass(&a->hold);
    em_buf_free(&a->reply);
    em_buf_free(&a->frame);
    em_free(a);
    c->ackw = NULL;
}

/* ---- forwarding workers ----------------------------------------------------- */

int pr_conn_take_ack_wait(pr_conn *c, pr_fwd_ack *info)
{
    if (!c->ack_deferred)
        return 0;
    c->ack_deferred = 0;
    info->op = c->ack_op;
    info->named = c->ack_named;
    info->effect = c->ack_effect;
    info->rid_origin = c->ack_rid_origin;
    info->rid_seq = c->ack_rid_seq;
    c->ack_named = 0;
    return 1;
}

void pr_conn_set_ack_defer(pr_conn *c, int on) { c->ack_defer = (uint8_t)on; }

int pr_frame_split(const em_buf *b, int32_t *status, const uint8_t **p, size_t *n)
{
    if (b->len < 14)
        return EM_PROTO;
    uint16_t flags = em_ld16(b->p + 12);
    size_t at = 14 + ((flags & 2) ? 12 : 0);
    *status = 0;
    if ((flags & 1) && b->len >= at + 4) {
        *status = (int32_t)em_ld32(b->p + at);
        at += 4;
        /* the message: a typed string (9, length, bytes), or null */
        if (b->len >= at + 5 && b->p[at] == 9 && em_ld32(b->p + at + 1) <= b->len - at - 5) {
            *p = b->p + at + 5;
            *n = em_ld32(b->p + at + 1);
        } else {
            *p = NULL;
            *n = 0;
        }
        return *status ? 0 : EM_PROTO;
    }
    if (b->len < at || (flags & 1))
        return EM_PROTO;
    *p = b->p + at;
    *n = b->len - at;
    return 0;
}

int pr_fwd_ack_result(pr_server *s, const pr_fwd_ack *info, int rc, em_buf *frame)
{
    cl_rids *w = info->named ? s->rids : NULL;
    cl_rid id = { info->rid_origin, info->rid_seq };
    const uint8_t *p;
    size_t n;
    int32_t st;
    if (!rc && pr_frame_split(frame, &st, &p, &n) == 0) {
        /* acked: the reply as built - a failure too (a batch that wrote
         * some of its keys), whose status and message its id records */
        if (w)
            cl_rids_finish(w, id, info->effect, st, p, n);
        return 0;
    }
    if (rc == EM_STALE && pr_cluster_idempotent(info->op)) {
        /* not this node's to have run: the sender maps it again */
        if (w)
            cl_rids_finish(w, id, 0, PR_ST_FAILED, (const uint8_t *)PR_REPL_MOVED_MSG,
                           sizeof PR_REPL_MOVED_MSG - 1);
        return EM_STALE;
    }
    char buf[160];
    const char *m = rc ? ack_msg(info->op, rc, buf, sizeof buf) : "Malformed reply";
    if (w)
        cl_rids_finish(w, id, info->effect, PR_ST_FAILED, (const uint8_t *)m, strlen(m));
    return fail_frame(frame, PR_VER(1, 7, 0), m);
}
