/* proto_txc.c - transactions across cluster nodes: two-phase commit over
 * the members' forwarding calls (reference/cluster.md §1.6, §3.11); this
 * file is the coordinator, proto_txp.c the parts and their backups.
 *
 * The node that got TX_START coordinates.  On a cluster every cache op of
 * the transaction runs in the transaction's *part* on its keys' primary - a
 * cl_tx there, created by the first op that reaches it - so locks are
 * taken where the keys live: PESSIMISTIC on access, OPTIMISTIC at prepare
 * in key order, each part's reads and buffered writes its own.  The
 * coordinator keeps the list of parts (pr_txslot.parts) and the topology
 * the transaction was mapped on; a change of it before every part is
 * prepared fails the transaction with a retriable error, as Ignite's remap
 * does.
 *
 * TX_END: one part - COMMIT1, prepare and commit in one message; several -
 * PREPARE to each in node id order (a part takes and pins its locks,
 * checks SERIALIZABLE reads, and leaves its writes with its backups), then
 * the decision (COMMIT, kept in this node's table of decisions, which the
 * backups of a part whose primary failed ask), then COMMIT to each.  A part
 * that waits for a lock answers PR_ST_TXC_WAIT and the coordinator parks
 * the client's request (proto_tx.c "Waiting for a lock") and asks again;
 * parts already prepared stay prepared.  A part that rolled back on its own
 * (its timeout, a deadlock) answers PR_ST_TXC_GONE with the reason, and
 * the coordinator rolls back the rest.  A part's node that fails once the
 * decision is COMMIT is no failure of the transaction: its backups apply
 * its writes.  A part whose partition moved to another primary between
 * the decision and its commit hands those writes over (proto_txh.c).
 *
 * A part's node remembers the members it told to wait (pr_txc_wait) and
 * tells them when it releases locks (CL_NET_MSG_TX_WAKE): their parked
 * requests run again at once, as for a release on their own node; the
 * timer scan is left for a word lost with its link.  Implicit (no
 * transaction) ops forwarded to a key's primary wait there the same way.
 * A cycle of waits through several nodes is found by a probe (below,
 * "Deadlocks across nodes") and one transaction of it rolled back.
 *
 * PR_OP_TX_CALL payload: proto_txc.h's header, then for OP the op's whole
 * request (op, id, payload), for PREPARE u32 n and n participant ids, for
 * the rest what proto_txp.c reads.
 */
#include "proto/proto_txc.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cluster/cl_net.h"
#include "cluster/cl_node.h"
#include "cluster/cl_repl.h"
#include "cluster/cl_tx.h"
#include "util/clock.h"
#include "util/log.h"
#include "util/mem.h"

#define TXC_COMMIT_TRIES 50         /* ~5 s of a participant's link flapping */
#define TXC_DRING 4096              /* decisions remembered */
#define OWNERS_AWAIT_MS 3000        /* a just-started cache's first owners, at most */

void pr_txc_crash_point(pr_server *s, const char *point)
{
    const char *spec = s->opt.tx_crash;
    size_t pl = strlen(point);
    if (strncmp(spec, point, pl) != 0 || spec[pl] != ':')
        return;
    uint32_t n = (uint32_t)strtoul(spec + pl + 1, NULL, 10);
    if (atomic_fetch_add_explicit(&s->tx_crash_seen, 1, memory_order_relaxed) + 1 != n)
        return;
    char m[96];
    int l = snprintf(m, sizeof m, "tx_crash: exiting at '%s' (time %u)\n", point, n);
    (void)!write(2, m, (size_t)l);
    _exit(9);
}

/* ---- waiting for a lock on another node ----------------------------------- */

int pr_txc_wait(pr_conn *c, const char *why)
{
    pr_server *s = c->srv;
    if (c->has_from) {
        pthread_mutex_lock(&s->rwait_mu);
        uint32_t i = 0;
        while (i < s->nrwait && (s->rwait[i][0] != c->from[0] || s->rwait[i][1] != c->from[1]))
            i++;
        if (i == s->nrwait && i < PR_RWAIT_MAX) {
            /* counted as a waiter: a release then calls the wake */
            s->rwait[i][0] = c->from[0];
            s->rwait[i][1] = c->from[1];
            s->nrwait++;
            cl_txm_wait(s->txm);
        }       /* else known already, or too many: its timer scan retries */
        pthread_mutex_unlock(&s->rwait_mu);
    }
    return pr_fail(c, PR_ST_TXC_WAIT, "%s", why);
}

void pr_txc_wake_waiters(pr_server *s)
{
    uint64_t w[PR_RWAIT_MAX][2];
    pthread_mutex_lock(&s->rwait_mu);
    uint32_t n = s->nrwait;
    memcpy(w, s->rwait, n * sizeof w[0]);
    s->nrwait = 0;
    pthread_mutex_unlock(&s->rwait_mu);
    cl_node *node = s->opt.cluster;
    for (uint32_t i = 0; i < n; i++) {
        cl_txm_unwait(s->txm);
        /* lost with its link: the member's scan retries */
        if (node)
            (void)cl_node_send(node, (cl_meta_uuid){ w[i][0], w[i][1] }, CL_NET_MSG_TX_WAKE,
                               NULL, 0);
        atomic_fetch_add_explicit(&s->rwake_sent, 1, memory_order_relaxed);
    }
}

/* ---- decisions ---------------------------------------------------------- */

typedef struct txd {
    uint64_t     seq;
    uint8_t      st;
    uint8_t      waiting;           /* a part of it waits for a lock, on member `at` */
    cl_meta_uuid at;
} txd;

struct pr_txcd {
    pthread_mutex_t mu;
    txd     *a;                     /* open: TXS_ACTIVE (undecided) or decided */
    uint32_t n, cap;
    txd      ring[TXC_DRING];       /* ended */
    uint32_t at;
};

int pr_txc_decisions_init(pr_server *s)
{
    if (s->txcd)
        return 0;
    struct pr_txcd *d = em_calloc(1, sizeof *d);
    if (!d)
        return EM_NOMEM;
    pthread_mutex_init(&d->mu, NULL);
    s->txcd = d;
    return 0;
}

void pr_txc_decisions_free(pr_server *s)
{
    struct pr_txcd *d = s->txcd;
    if (!d)
        return;
    em_free(d->a);
    pthread_mutex_destroy(&d->mu);
    em_free(d);
    s->txcd = NULL;
}

int pr_txc_init(pr_server *s)
{
    int rc = pr_txc_decisions_init(s);
    return rc ? rc : pr_txp_init(s);
}

void pr_txc_free(pr_server *s)
{
    pr_txp_free(s);
    pr_txc_decisions_free(s);
}

static txd *dfind(struct pr_txcd *d, uint64_t seq)
{
    for (uint32_t i = 0; i < d->n; i++)
        if (d->a[i].seq == seq)
            return &d->a[i];
    return NULL;
}

/* decide records st for seq (TXS_ACTIVE: opened, undecided) and answers
 * the decision that stands: a COMMIT loses to a ROLLBACK already given
 * to a part's backups (pr_txc_decision). */
static int decide(pr_server *s, uint64_t seq, uint8_t st)
{
    struct pr_txcd *d = s->txcd;
    pthread_mutex_lock(&d->mu);
    txd *e = dfind(d, seq);
    if (!e) {
        if (d->n == d->cap) {
            uint32_t cap = d->cap ? d->cap * 2 : 16;
            txd *na = em_realloc(d->a, cap * sizeof *na);
            if (!na) {
                pthread_mutex_unlock(&d->mu);
                return TXS_ROLLED_BACK;     /* cannot record it: it does not commit */
            }
            d->a = na;
            d->cap = cap;
        }
        e = &d->a[d->n++];
        *e = (txd){ .seq = seq, .st = TXS_ACTIVE };
    }
    if (st != TXS_ACTIVE && !(e->st == TXS_ROLLED_BACK && st == TXS_COMMITTED))
        e->st = st;
    int r = e->st;
    pthread_mutex_unlock(&d->mu);
    return r;
}

/* decided: the transaction is over here; its decision stays answerable. */
static void decided(pr_server *s, uint64_t seq)
{
    struct pr_txcd *d = s->txcd;
    pthread_mutex_lock(&d->mu);
    txd *e = dfind(d, seq);
    if (e) {
        d->ring[d->at] = *e;
        d->at = (d->at + 1) % TXC_DRING;
        *e = d->a[--d->n];
    }
    pthread_mutex_unlock(&d->mu);
}

int pr_txc_decision(pr_server *s, uint64_t seq)
{
    struct pr_txcd *d = s->txcd;
    if (!d)
        return TXS_UNKNOWN;
    pthread_mutex_lock(&d->mu);
    txd *e = dfind(d, seq);
    int r = TXS_UNKNOWN;
    if (e) {
        if (e->st == TXS_ACTIVE)
            e->st = TXS_ROLLED_BACK;        /* asked before deciding: it will not commit */
        r = e->st;
    } else {
        for (uint32_t i = 0; i < TXC_DRING; i++)
            if (d->ring[i].st && d->ring[i].seq == seq)
                r = d->ring[i].st;
    }
    pthread_mutex_unlock(&d->mu);
    return r == TXS_ACTIVE ? TXS_UNKNOWN : r;
}

/* ---- messages ------------------------------------------------------------ */

int pr_txc_env(em_buf *b, const uint8_t *id8, cl_meta_uuid coord, uint64_t seq, int kind,
               const cl_tx *tx)
{
    static const uint8_t zero[8];
    em_buf_reset(b);
    /* what is left of its timeout: a part created now expires with it */
    int64_t left = tx ? cl_tx_remaining(tx) : 0;
    int rc = em_buf_put_le16(b, PR_OP_TX_CALL);
    if (!rc)
        rc = em_buf_append(b, id8 ? id8 : zero, 8);
    if (!rc)
        rc = em_buf_put_le64(b, coord.msb);
    if (!rc)
        rc = em_buf_put_le64(b, coord.lsb);
    if (!rc)
        rc = em_buf_put_le64(b, seq);
    if (!rc)
        rc = em_buf_put_u8(b, (uint8_t)kind);
    if (!rc)
        rc = em_buf_put_u8(b, tx ? (uint8_t)cl_tx_concurrency(tx) : 0);
    if (!rc)
        rc = em_buf_put_u8(b, tx ? (uint8_t)cl_tx_isolation(tx) : 0);
    if (!rc)
        rc = em_buf_put_le64(b, (uint64_t)left);
    return rc;
}

int pr_txc_put_id(em_buf *b, cl_meta_uuid id)
{
    int rc = em_buf_put_le64(b, id.msb);
    return rc ? rc : em_buf_put_le64(b, id.lsb);
}

int pr_txc_wrap(pr_conn *c, const uint8_t *body, size_t len, em_buf *dst)
{
    pr_txslot *s = c->txc_slot;
    if (!s || len < 10)
        return EM_INVAL;
    int rc = pr_txc_env(dst, body + 2, cl_node_id(c->srv->opt.cluster), s->seq, TXC_OP, s->tx);
    return rc ? rc : em_buf_append(dst, body, len);
}

int pr_txc_touch(pr_conn *c, cl_meta_uuid who)
{
    pr_txslot *s = c->txc_slot;
    for (uint32_t i = 0; i < s->nparts; i++)
        if (cl_meta_uuid_eq(s->parts[i].id, who))
            return 0;
    if (s->nparts >= TXC_MAX_PARTS)
        return pr_fail(c, PR_ST_FAILED, "Transaction spans too many nodes");
    if (!s->parts && c->spare_parts) {
        s->parts = c->spare_parts;
        s->capparts = c->spare_capparts;
        c->spare_parts = NULL;
    }
    if (s->nparts == s->capparts) {
        uint32_t cap = s->capparts ? s->capparts * 2 : 4;
        pr_txpart *p = em_realloc(s->parts, cap * sizeof *p);
        if (!p)
            return EM_NOMEM;
        s->parts = p;
        s->capparts = cap;
    }
    s->parts[s->nparts++] = (pr_txpart){ who, PR_TXP_ACTIVE };
    return 0;
}

/* part_call sends one control message of s to participant p: 0, a
 * status (message set), EM_STALE or EM_NOMEM. */
static int part_call(pr_conn *c, pr_txslot *s, const pr_txpart *p, int kind, em_buf *out)
{
    cl_node *n = c->srv->opt.cluster;
    em_buf *b = &c->txenv;
    int rc = pr_txc_env(b, NULL, cl_node_id(n), s->seq, kind, s->tx);
    for (uint32_t i = 0; !rc && kind == TXC_PREPARE && i <= s->nparts; i++)
        rc = i == 0 ? em_buf_put_le32(b, s->nparts)
                    : pr_txc_put_id(b, s->parts[i - 1].id);
    if (!rc && (kind == TXC_COMMIT || kind == TXC_COMMIT1)) {
        /* the topology this node knows: the part commits on it or a newer
         * one (a switch this node saw is seen there too: proto_txh.c) */
        cl_topo *t = cl_node_topo_acquire(n);
        rc = em_buf_put_le64(b, cl_topo_index(t));
        cl_node_topo_release(t);
    }
    if (rc)
        return rc;
    return pr_cluster_tx_run(c, p->id, cl_meta_uuid_eq(p->id, cl_node_id(n)), b->p, b->len, out);
}

/* rollback_parts: every part not ended yet rolls back (best effort: a part
 * that does not hear it is rolled back by its node once this one leaves
 * the topology, or by its own timeout), and so does s's own record here. */
static void rollback_parts(pr_conn *c, pr_txslot *s)
{
    char keep[sizeof c->msg];
    memcpy(keep, c->msg, sizeof keep);
    em_buf scratch = EM_BUF_INIT;
    for (uint32_t i = 0; i < s->nparts; i++)
        if (s->parts[i].st != PR_TXP_DONE) {
            em_buf_reset(&scratch);
            (void)part_call(c, s, &s->parts[i], TXC_ROLLBACK, &scratch);
            s->parts[i].st = PR_TXP_DONE;
        }
    em_buf_free(&scratch);
    memcpy(c->msg, keep, sizeof keep);
    cl_tx_rollback(s->tx);
}

/* ---- deadlocks across nodes ----------------------------------------------
 *
 * A part waiting on its node for a lock another transaction's part holds
 * is an edge of the wait-for graph.  Each node sees its own edges and ends
 * a cycle among them when it forms (cl_tx.c); a cycle through several
 * nodes is looked for by the coordinator of a transaction whose request
 * has waited TXC_PROBE_MS: it follows the edges - WAITS to the node its
 * part waits on (which transaction holds that lock?), WHERE to the
 * holder's coordinator (where does that one wait?) - for at most
 * TXC_PROBE_HOPS holders.  Back at its own transaction it has found a
 * cycle, and the transaction with the highest id in it is rolled back:
 * every coordinator in the cycle probes, and only that one finds itself
 * the highest, so one transaction fails, not all of them.  A probe that
 * meets a holder that does not wait ends: no cycle through this one now.
 * Edges change while a probe follows them (a lock just released whose
 * waiter has not run again yet): a cycle seen that way costs one
 * transaction a retry, no more.  Ignite looks for deadlocks only once a
 * timeout fires; without a timeout its transactions would wait forever. */

#define TXC_PROBE_MS 300            /* a request waits this long before a probe */
#define TXC_PROBE_HOPS 16           /* holders followed */
#define TXC_PROBE_CALL_MS 1000      /* one step's answer (a paused node: no cycle now) */

typedef struct txid { cl_meta_uuid coord; uint64_t seq; } txid;

static int txid_cmp(txid a, txid b)
{
    if (a.coord.msb != b.coord.msb)
        return a.coord.msb < b.coord.msb ? -1 : 1;
    if (a.coord.lsb != b.coord.lsb)
        return a.coord.lsb < b.coord.lsb ? -1 : 1;
    return a.seq < b.seq ? -1 : a.seq > b.seq;
}

static void note_wait(pr_server *s, uint64_t seq, int waiting, cl_meta_uuid at)
{
    struct pr_txcd *d = s->txcd;
    pthread_mutex_lock(&d->mu);
    txd *e = dfind(d, seq);
    if (e) {
        e->waiting = (uint8_t)waiting;
        e->at = at;
    }
    pthread_mutex_unlock(&d->mu);
}

int pr_txc_where(pr_server *s, uint64_t seq, cl_meta_uuid *at)
{
    struct pr_txcd *d = s->txcd;
    if (!d)
        return 0;
    pthread_mutex_lock(&d->mu);
    txd *e = dfind(d, seq);
    int r = e && e->waiting;
    if (r)
        *at = e->at;
    pthread_mutex_unlock(&d->mu);
    return r;
}

/* probe_ask: one step's question about t to member `to` (this node
 * answers itself without a message): 1 with want bytes of answer in *ans,
 * 0 for "none" or no answer. */
static int probe_ask(pr_conn *c, cl_meta_uuid to, int kind, txid t, em_buf *env, em_buf *resp,
                     const uint8_t **ans, size_t want)
{
    const uint8_t *pay;
    size_t pn;
    if (pr_txc_env(env, NULL, t.coord, t.seq, kind, NULL) ||
        pr_txc_ask(c, to, env, resp, &pay, &pn, TXC_PROBE_CALL_MS) || pn != 1 + want || !pay[0])
        return 0;
    *ans = pay + 1;
    return 1;
}

/* waits_for: the transaction whose lock t's part on member `at` waits for. */
static int waits_for(pr_conn *c, cl_meta_uuid at, txid t, txid *h, em_buf *env, em_buf *resp)
{
    if (cl_meta_uuid_eq(at, cl_node_id(c->srv->opt.cluster)))
        return pr_txp_waits(c->srv, t.coord, t.seq, &h->coord, &h->seq);
    const uint8_t *a;
    if (!probe_ask(c, at, TXC_WAITS, t, env, resp, &a, 24))
        return 0;
    *h = (txid){ { em_ld64(a), em_ld64(a + 8) }, em_ld64(a + 16) };
    return 1;
}

/* waits_at: the member t (another coordinator's, or this node's) waits on. */
static int waits_at(pr_conn *c, txid t, cl_meta_uuid *at, em_buf *env, em_buf *resp)
{
    if (cl_meta_uuid_eq(t.coord, cl_node_id(c->srv->opt.cluster)))
        return pr_txc_where(c->srv, t.seq, at);
    const uint8_t *a;
    if (!probe_ask(c, t.coord, TXC_WHERE, t, env, resp, &a, 16))
        return 0;
    *at = (cl_meta_uuid){ em_ld64(a), em_ld64(a + 8) };
    return 1;
}

/* deadlocked: s waits in a cycle of waits across nodes and has the
 * highest id in it (it is the one to give way). */
static int deadlocked(pr_conn *c, pr_txslot *s)
{
    txid seen[TXC_PROBE_HOPS + 1];
    uint32_t n = 0;
    seen[n++] = (txid){ cl_node_id(c->srv->opt.cluster), s->seq };
    txid cur = seen[0];
    cl_meta_uuid at = c->txc_wait_at;
    em_buf env = EM_BUF_INIT, resp = EM_BUF_INIT;
    int cycle = 0;
    for (;;) {
        txid h;
        if (!waits_for(c, at, cur, &h, &env, &resp))
            break;
        if (txid_cmp(h, seen[0]) == 0) {
            cycle = 1;
            break;
        }
        uint32_t i = 1;
        while (i < n && txid_cmp(h, seen[i]) != 0)
            i++;
        if (i < n || n == TXC_PROBE_HOPS + 1)
            break;                  /* a cycle s is not in (its own probe ends it), or too long */
        seen[n++] = h;
        if (!waits_at(c, h, &at, &env, &resp))
            break;
        cur = h;
    }
    em_buf_free(&env);
    em_buf_free(&resp);
    for (uint32_t i = 1; cycle && i < n; i++)
        if (txid_cmp(seen[i], seen[0]) > 0)
            return 0;
    return cycle;
}

/* unwait: s's part answered: it no longer waits. */
static void unwait(pr_conn *c, pr_txslot *s)
{
    if (s->waiting) {
        s->waiting = 0;
        note_wait(c->srv, s->seq, 0, (cl_meta_uuid){ 0, 0 });
    }
}

static void abandon(pr_conn *c, pr_txslot *s);
static void rollback_parts(pr_conn *c, pr_txslot *s);

/* parked: a part of s waits for a lock on c->txc_wait_at: the request
 * parks (PR_PARK), unless s has waited long enough to probe and is the
 * transaction of a cycle that gives way (rolled back: its failure). */
static int parked(pr_conn *c, pr_txslot *s, int ending)
{
    uint64_t now = em_now_ms();
    if (!s->waiting) {
        s->waiting = 1;
        s->wait_ms = now;
        s->probe_ms = 0;
    }
    note_wait(c->srv, s->seq, 1, c->txc_wait_at);
    if (now - s->wait_ms < TXC_PROBE_MS || now - s->probe_ms < TXC_PROBE_MS)
        return PR_PARK;
    s->probe_ms = now;
    if (!deadlocked(c, s))
        return PR_PARK;
    atomic_fetch_add_explicit(&c->srv->txc_deadlocks, 1, memory_order_relaxed);
    unwait(c, s);                   /* rolled back: no probe may find it waiting */
    if (ending)
        abandon(c, s);
    else
        rollback_parts(c, s);
    s->why = PR_TX_WHY_DEADLOCK;
    return pr_fail(c, PR_ST_FAILED, "Deadlock detected: the transaction waited for a lock on "
                   "another node held by a transaction that waits, through others, for one of "
                   "its own locks; it was rolled back (the others go on)");
}

/* ---- the coordinator ----------------------------------------------------- */

static int fail_topology(pr_conn *c, pr_txslot *s, const cl_topo *t)
{
    rollback_parts(c, s);
    s->why = PR_TX_WHY_TOPOLOGY;
    return pr_fail(c, PR_ST_FAILED, "Transaction was rolled back: the cluster topology changed "
                   "(%" PRIu64 ".%u -> %" PRIu64 ".%u) while it ran; retry it", s->major, s->minor,
                   t->major, t->minor);
}

/* check_open: 0 while s may go on, else the failure (s rolled back). */
static int check_open(pr_conn *c, pr_txslot *s)
{
    if (cl_tx_open(s->tx) && !cl_tx_expired(s->tx))
        return 0;
    rollback_parts(c, s);
    if (s->why == PR_TX_WHY_TOPOLOGY)
        return pr_fail(c, PR_ST_FAILED, "Transaction was rolled back: the cluster topology "
                       "changed while it ran; retry it");
    return pr_tx_fail_timed_out(c, s->tx);
}

/* outcome maps a part's answer for the client: waits park, a part gone
 * (or a key's owner changed) rolls back the rest. */
static int outcome(pr_conn *c, pr_txslot *s, int rc)
{
    if (rc == PR_ST_TXC_WAIT)
        return parked(c, s, 0);
    unwait(c, s);
    if (rc == EM_STALE) {
        rollback_parts(c, s);
        s->why = PR_TX_WHY_TOPOLOGY;
        return pr_fail(c, PR_ST_FAILED, "Transaction was rolled back: a key's owner changed "
                       "(topology change in progress); retry it");
    }
    if (rc == PR_ST_TXC_GONE) {
        rollback_parts(c, s);
        return PR_ST_FAILED;        /* the part's message stands */
    }
    if (rc == PR_ST_TXC_SHORT)
        return PR_ST_FAILED;        /* committed; the part's message says what is short */
    return rc;
}

int pr_txc_route(pr_conn *c, int op, pr_cache_hdr *h, const uint8_t *kp, const uint8_t *kend,
                 int nkeys, int pairs, em_buf *out, int *done)
{
    *done = 0;
    pr_txslot *s = pr_tx_slot(c, h->tx);
    if (!s)
        return 0;
    *done = 1;
    int rc = check_open(c, s);
    if (rc)
        return rc;
    cl_node *n = c->srv->opt.cluster;
    cl_topo *t = cl_node_topo_acquire(n);
    if (t->n > 1 && !cl_topo_has_owners(t, st_cache_id(h->cache), st_cache_parts(h->cache))) {
        /* A cache started on another node a moment ago: its owners may not
         * be decided here yet (its other requests wait for them too). */
        cl_node_topo_release(t);
        (void)pr_cluster_await_owners(c->srv, h->cache, OWNERS_AWAIT_MS);
        t = cl_node_topo_acquire(n);
    }
    if (t->self < 0 || cl_node_segmented(n)) {
        cl_node_topo_release(t);
        return pr_fail(c, PR_ST_FAILED, "This node is not a member of the cluster now (it is "
                       "joining, or the others failed it; restart it to rejoin): use another node");
    }
    if (!s->seq) {
        s->seq = atomic_fetch_add_explicit(&c->srv->txc_seq, 1, memory_order_relaxed) + 1;
        s->major = t->major;
        s->minor = t->minor;
        /* open here from now on: its parts may ask (TXC_ALIVE) */
        if (decide(c->srv, s->seq, TXS_ACTIVE) != TXS_ACTIVE) {
            cl_node_topo_release(t);
            return EM_NOMEM;
        }
    } else if (t->major != s->major || t->minor != s->minor) {
        rc = fail_topology(c, s, t);
        cl_node_topo_release(t);
        return rc;
    }
    size_t start = out->len;
    c->txc_slot = s;
    rc = pr_cluster_tx_route(c, t, op, h->cache, kp, kend, nkeys, pairs, out);
    c->txc_slot = NULL;
    cl_node_topo_release(t);
    if (rc)
        out->len = start;
    return outcome(c, s, rc);
}

static int part_cmp(const void *a, const void *b)
{
    const cl_meta_uuid *x = &((const pr_txpart *)a)->id, *y = &((const pr_txpart *)b)->id;
    if (x->msb != y->msb)
        return x->msb < y->msb ? -1 : 1;
    return x->lsb < y->lsb ? -1 : x->lsb > y->lsb;
}

/* part_gone: member `who` left the topology (its backups now speak for
 * its part). */
static int part_gone(cl_node *n, cl_meta_uuid who)
{
    cl_topo *t = cl_node_topo_acquire(n);
    int m = pr_txc_is_member(t, who);
    cl_node_topo_release(t);
    return !m;
}

/* abandon: s rolls back everywhere and its decision says so. */
static void abandon(pr_conn *c, pr_txslot *s)
{
    (void)decide(c->srv, s->seq, TXS_ROLLED_BACK);
    decided(c->srv, s->seq);
    rollback_parts(c, s);
}

void pr_txc_forget(pr_server *s, uint64_t seq)
{
    decided(s, seq);
}

int pr_txc_alive(pr_server *s, uint64_t seq)
{
    struct pr_txcd *d = s->txcd;
    pthread_mutex_lock(&d->mu);
    int r = dfind(d, seq) != NULL;
    pthread_mutex_unlock(&d->mu);
    return r;
}

int pr_txc_end(pr_conn *c, pr_txslot *s, int commit)
{
    if (!commit) {
        abandon(c, s);
        return 0;
    }
    int rc = check_open(c, s);
    if (rc)
        return rc;
    cl_node *n = c->srv->opt.cluster;
    /* A topology change before every part is prepared fails it (the
     * primaries it locked at may have moved). */
    int all = 1;
    for (uint32_t i = 0; i < s->nparts; i++)
        all &= s->parts[i].st == PR_TXP_PREPARED;
    if (!all) {
        cl_topo *t = cl_node_topo_acquire(n);
        if (t->major != s->major || t->minor != s->minor)
            rc = fail_topology(c, s, t);
        cl_node_topo_release(t);
        if (rc)
            return rc;
    }
    em_buf *scratch = &c->txscratch;     /* the parts' answers: none kept */
    em_buf_reset(scratch);
    if (s->nparts == 1) {
        /* Decided before it is sent: the part commits if it can, and its
         * backups, if it fails meanwhile, finish what it began. */
        (void)decide(c->srv, s->seq, TXS_COMMITTED);
        rc = part_call(c, s, &s->parts[0], TXC_COMMIT1, scratch);
        if (rc == PR_ST_TXC_WAIT)
            return parked(c, s, 1);
        if (!rc)                    /* once, not per retry after a wait */
            atomic_fetch_add_explicit(&c->srv->txc_one, 1, memory_order_relaxed);
        s->parts[0].st = PR_TXP_DONE;   /* committed, or rolled back there */
        if (rc == PR_ST_TXC_GONE || rc == EM_STALE)
            (void)decide(c->srv, s->seq, TXS_ROLLED_BACK);
        decided(c->srv, s->seq);
        return rc == PR_ST_TXC_GONE ? PR_ST_FAILED : outcome(c, s, rc);
    }
    /* Phase one, parts in node id order (and each part's locks in key
     * order): two OPTIMISTIC transactions then take their locks in one
     * global order and never wait for each other in a cycle. */
    qsort(s->parts, s->nparts, sizeof *s->parts, part_cmp);
    for (uint32_t i = 0; i < s->nparts; i++) {
        if (s->parts[i].st == PR_TXP_PREPARED)
            continue;
        em_buf_reset(scratch);
        if ((rc = part_call(c, s, &s->parts[i], TXC_PREPARE, scratch)) != 0) {
            if (rc == PR_ST_TXC_WAIT)
                return parked(c, s, 1);     /* the prepared ones stay prepared */
            if (rc != PR_ST_TXC_GONE)
                s->parts[i].st = PR_TXP_PREPARED;   /* unknown: told to roll back too */
            abandon(c, s);
            return rc == PR_ST_TXC_GONE || rc == EM_STALE ? PR_ST_FAILED : rc;
        }
        s->parts[i].st = PR_TXP_PREPARED;
    }
    unwait(c, s);
    /* The topology once more: a primary that moved after its part was
     * prepared would apply writes the new primary never sees. */
    cl_topo *t = cl_node_topo_acquire(n);
    int moved = t->major != s->major || t->minor != s->minor;
    if (moved) {
        abandon(c, s);
        rc = pr_fail(c, PR_ST_FAILED, "Transaction was rolled back: the cluster topology changed "
                     "(%" PRIu64 ".%u -> %" PRIu64 ".%u) while it was being prepared; retry it",
                     s->major, s->minor, t->major, t->minor);
    }
    cl_node_topo_release(t);
    if (moved)
        return rc;
    /* The decision.  A part's backups that asked before it (their primary
     * failed while it was prepared) were told ROLLBACK, which stands. */
    if (decide(c->srv, s->seq, TXS_COMMITTED) != TXS_COMMITTED) {
        abandon(c, s);
        return pr_fail(c, PR_ST_FAILED, "Transaction was rolled back: a node it spans failed "
                       "while it was being prepared; retry it");
    }
    atomic_fetch_add_explicit(&c->srv->txc_two, 1, memory_order_relaxed);
    for (uint32_t i = 0; pr_txc_crash_armed(c->srv) && i < s->nparts; i++)
        if (cl_meta_uuid_eq(s->parts[i].id, cl_node_id(n)))
            pr_txc_crash_point(c->srv, "decided");  /* with a part of its own */
    if (c->srv->opt.tx_hold[0])
        pr_test_hold(c->srv->opt.tx_hold, "tx_hold: a transaction decided here");
    /* Phase two. */
    int first_rc = 0;
    char first_msg[sizeof c->msg] = "";
    for (uint32_t i = 0; i < s->nparts; i++) {
        pr_txpart *p = &s->parts[i];
        if (p->st == PR_TXP_DONE)
            continue;
        for (int tries = 0;; tries++) {
            em_buf_reset(scratch);
            rc = part_call(c, s, p, TXC_COMMIT, scratch);
            if (!rc || rc == EM_NOMEM || rc == PR_ST_TXC_GONE || rc == PR_ST_TXC_SHORT ||
                tries == TXC_COMMIT_TRIES)
                break;
            if (part_gone(n, p->id)) {
                rc = 0;             /* its backups commit its part (proto_txp.c) */
                break;
            }
            /* its link flaps: while it is a member it is asked again */
            struct timespec ts = { 0, 100 * 1000000L };
            nanosleep(&ts, NULL);
        }
        p->st = PR_TXP_DONE;
        if (rc && !first_rc) {
            first_rc = rc;
            memcpy(first_msg, c->msg, sizeof first_msg);
        }
    }
    decided(c->srv, s->seq);
    cl_tx_rollback(s->tx);          /* ended: nothing of it is held here */
    if (first_rc)
        return pr_fail(c, PR_ST_FAILED, "Transaction commit failed on one of its nodes after "
                       "every node prepared it (the others committed): %s", first_msg);
    return 0;
}
