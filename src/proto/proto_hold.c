/* proto_hold.c - a reply a client's loop holds that another thread may
 * send.
 *
 * Two replies wait on something outside the loop: a FULL_SYNC write's for
 * its acks (proto_ackw.c), a forwarded request's for the owner's answer
 * (proto_cluster.c).  Waking the loop to send each one costs an eventfd
 * write, a wake-up and a second look at the connection, so the thread that
 * completes the wait sends the reply itself, when two things hold:
 *
 *  - direct: the loop's pass has sent everything the connection answered
 *    before it.  The loop sets it at the end of its pass (pr_hold_pass_end,
 *    before the pass's streams leave, so before any answer can come back)
 *    when the connection's output is idle;
 *  - not behind: no frame of the connection waits behind the reply (queued,
 *    or left unread).  Those need the loop, and it sends the reply with
 *    them.
 *
 * `behind` (set by the loop) and `settled` (set by the completing thread)
 * are each stored before the other is read, on both sides, so that at
 * least one side sees the other: either the completing thread sees behind
 * and wakes the loop, or the loop sees settled and wakes itself.
 */
#include "proto/proto_int.h"

#include <stdatomic.h>

#include "util/clock.h"

/* The holds this loop thread started during its pass. */
static _Thread_local pr_hold *tl_pass;

void pr_hold_start(pr_hold *h, pr_conn *c, int busy)
{
    atomic_store_explicit(&h->settled, 0, memory_order_relaxed);
    atomic_store_explicit(&h->direct, 0, memory_order_relaxed);
    atomic_store_explicit(&h->behind, 0, memory_order_relaxed);
    h->srv = c->srv;
    h->conn = c;
    h->io = c->io;
    h->busy = busy;
    h->t0 = c->req_t0;              /* before the wait: its end reads it */
    if (!c->io || !c->srv->direct_send || h->in_pass)
        return;
    h->in_pass = 1;
    h->pass_next = tl_pass;
    tl_pass = h;
}

void pr_hold_pass_end(void)
{
    while (tl_pass) {
        pr_hold *h = tl_pass;
        tl_pass = h->pass_next;
        h->in_pass = 0;
        /* (done within the pass already: nothing is held any more) */
        if (h->conn->fwd_busy == h->busy && h->srv->out_idle(h->srv->direct_arg, h->io))
            atomic_store(&h->direct, 1);
    }
}

void pr_hold_unpass(pr_hold *h)
{
    if (!h->in_pass)
        return;
    for (pr_hold **p = &tl_pass; *p; p = &(*p)->pass_next)
        if (*p == h) {
            *p = h->pass_next;
            break;
        }
    h->in_pass = 0;
}

int pr_hold_may_send(pr_hold *h)
{
    return atomic_load(&h->direct) && !atomic_load(&h->behind);
}

int pr_hold_settle(pr_hold *h, int sent)
{
    if (sent && h->t0)
        h->t_sent = em_now_ns();    /* published by settled */
    atomic_store(&h->settled, 1);
    return !sent || atomic_load(&h->behind);
}

int pr_hold_settled(const pr_conn *c, pr_hold *h)
{
    return c->fwd_busy == h->busy && atomic_load_explicit(&h->settled, memory_order_acquire);
}

int pr_hold_take(pr_hold *h)
{
    if (!atomic_load_explicit(&h->settled, memory_order_acquire))
        return 0;
    atomic_store_explicit(&h->settled, 0, memory_order_relaxed);
    return 1;
}

uint64_t pr_hold_ns(const pr_hold *h, int sent)
{
    if (!h->t0)
        return PR_STATS_UNTIMED;
    return (sent ? h->t_sent : em_now_ns()) - h->t0;
}

void pr_hold_behind(pr_conn *c, pr_hold *h)
{
    if (c->fwd_busy != h->busy || atomic_load_explicit(&h->behind, memory_order_relaxed))
        return;
    atomic_store(&h->behind, 1);
    if (atomic_load(&h->settled) && c->srv->tx_wake)
        c->srv->tx_wake(c->srv->tx_wake_arg);   /* settled meanwhile: resume it */
}
