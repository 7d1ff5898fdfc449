/* proto_txh.c - a committed part's writes handed to the new primary of
 * their partitions (TXC_HANDOFF; the protocol is outlined in proto_txc.c
 * and proto_txp.c).
 *
 * A part prepares only where it is the primary of every partition it
 * writes (still_primary), and its coordinator decides only on the topology
 * the transaction was mapped on.  An affinity switch may still land between
 * the decision and the part's commit (a coordinator held up, a slow link):
 * the part's node then applies the writes as a backup's, which streams
 * them to nobody, or streams them as the primary it was and the new primary
 * refuses them as from a deposed one (fencing).  Either way the new primary
 * would never have a write of a committed transaction.  Ignite's exchange
 * waits for prepared transactions before it switches; ember's switch does
 * not wait for them, so the part hands those writes over instead:
 *  - the part commits on the topology its coordinator knew when it sent
 *    COMMIT, or a newer one (COMMIT carries its index; the part's node
 *    waits for it), so a switch the coordinator saw is seen here;
 *  - after applying, it looks up each written partition's primary (once an
 *    owner refused the stream, on a topology newer than the one the commit
 *    was planned on: the refusing owner knew one);
 *  - HANDOFF gives each such primary those writes; it waits to know the
 *    topology the part knew, applies the ones of partitions it is the
 *    primary of as their primary (numbered and streamed to every owner,
 *    this node too) in one unit, drops its shadow of the part once all of
 *    them applied (its locks kept those keys from other writes until then:
 *    MOVING copies get shadows too, so a copy that loads while the part is
 *    prepared and becomes the primary holds them) and answers how many it
 *    applied.  A repeat of a HANDOFF (the same writes from the same part:
 *    its caller timed out) that applied them all gets the first one's
 *    answer and applies nothing.
 * A write applied twice - streamed to the new primary before the switch,
 * then handed over - writes the same value again under the same locks.
 * A new primary that takes fewer of them than it was handed (the topology
 * moved once more in between) or does not answer is asked again on the
 * topology of the moment, for about 3 s; after that the part answers its
 * coordinator PR_ST_TXC_SHORT (its outcome remembers it, so a COMMIT the
 * coordinator sends again hears it too: the client hears that the commit
 * failed on one of its nodes) and logs an error.
 *
 * Not covered: a copy that started loading after the part prepared and
 * became the primary before it committed holds no shadow, so a write a
 * client made there in between may be overwritten by the handoff; and
 * under PRIMARY_SYNC or FULL_ASYNC a part's node a few milliseconds behind
 * the owners (a switch landing after its coordinator sent COMMIT) does not
 * hear that its stream was fenced, since it waits for no ack.
 */
#include "proto/proto_txp.h"

#include <string.h>
#include <time.h>

#include "cluster/cl_repl.h"
#include "util/clock.h"
#include "util/log.h"
#include "util/mem.h"

#define HANDOFF_MS 3000             /* rounds 100 ms apart for so long (a call: TXC_CALL_MS) */

static void drop_holder(txb *b, cl_meta_uuid who)
{
    for (uint32_t i = 0; i < b->nholders; i++)
        if (cl_meta_uuid_eq(b->holders[i], who)) {
            b->holders[i] = b->holders[--b->nholders];
            return;
        }
}

/* handoff_call: HANDOFF of b's writes ups[i] with pick[i] set (want of
 * them) to `to`. */
static int handoff_call(pr_conn *c, txb *b, cl_meta_uuid to, uint64_t index,
                        const st_update *ups, const uint8_t *pick, uint32_t nu, uint32_t want)
{
    cl_meta_uuid self = cl_node_id(c->srv->opt.cluster);
    em_buf env = EM_BUF_INIT, resp = EM_BUF_INIT;
    int rc = pr_txc_env(&env, NULL, b->coord, b->seq, TXC_HANDOFF, NULL);
    if (!rc && (rc = pr_txc_put_id(&env, self)) == 0 &&
        (rc = em_buf_put_u8(&env, TXS_COMMITTED)) == 0 &&
        (rc = em_buf_put_le64(&env, index)) == 0)
        rc = em_buf_put_le32(&env, want);
    for (uint32_t i = 0; !rc && i < nu; i++)
        if (pick[i])
            rc = pr_txp_put_write(&env, &ups[i]);
    const uint8_t *pay = NULL;
    size_t pn = 0;
    if (!rc && (pr_txp_call(c, to, &env, &resp, &pay, &pn) != 0 || pn != 4 ||
                em_ld32(pay) < want))
        rc = pr_fail(c, PR_ST_FAILED, "the new primary of some of its keys (a topology change "
                     "since it prepared) did not apply them");
    em_buf_free(&env);
    em_buf_free(&resp);
    return rc;
}

/* new_primary: the member (index into t->m) that is u's partition's live
 * primary now when that is not this node; -1 when it is this node, or no
 * live member is (a primary that failed: its backups' shadows decide). */
static int new_primary(pr_conn *c, cl_topo *t, const st_update *u)
{
    st_cache *sc = st_cache_find(c->srv->st, u->cache_id);
    uint32_t idx[64];
    if (!sc || cl_repl_owners(t, st_cache_cfg(sc), u->cache_id, u->partition, idx, 64) < 1 ||
        (int)idx[0] == t->self || t->m[idx[0]].state != CL_META_ALIVE)
        return -1;
    return (int)idx[0];
}

/* hand_round hands the writes not yet handed (done[i] 0) of partitions
 * whose primary is another member now to that primary, marking those
 * taken: 0 when none is left, else a status. */
static int hand_round(pr_conn *c, txb *b, const st_update *ups, uint32_t nu, int32_t *dest,
                      uint8_t *pick, uint8_t *done)
{
    cl_meta_uuid to[TXC_MAX_PARTS];
    uint32_t want[TXC_MAX_PARTS], nt = 0;
    cl_topo *t = cl_node_topo_acquire(c->srv->opt.cluster);
    uint64_t index = cl_topo_index(t);
    for (uint32_t i = 0; i < nu; i++) {
        int m = done[i] ? -1 : new_primary(c, t, &ups[i]);
        dest[i] = -1;
        if (m < 0)
            continue;
        cl_meta_uuid p = t->m[m].id;
        uint32_t j = 0;
        while (j < nt && !cl_meta_uuid_eq(to[j], p))
            j++;
        if (j == nt) {
            if (nt == TXC_MAX_PARTS)
                continue;
            to[nt] = p;
            want[nt++] = 0;
        }
        dest[i] = (int32_t)j;
        want[j]++;
    }
    cl_node_topo_release(t);
    int rc = 0;
    for (uint32_t j = 0; j < nt; j++) {
        for (uint32_t i = 0; i < nu; i++)
            pick[i] = dest[i] == (int32_t)j;
        int r = handoff_call(c, b, to[j], index, ups, pick, nu, want[j]);
        if (r) {
            rc = r;
            continue;
        }
        for (uint32_t i = 0; i < nu; i++)
            done[i] |= pick[i];
        drop_holder(b, to[j]);          /* its shadow ended there */
        atomic_fetch_add_explicit(&c->srv->txc_handed, want[j], memory_order_relaxed);
        EM_INFO("transaction %016llx%016llx:%llu: %u write(s) of its part here handed to "
                "their new primary %016llx%016llx", (unsigned long long)b->coord.msb,
                (unsigned long long)b->coord.lsb, (unsigned long long)b->seq, want[j],
                (unsigned long long)to[j].msb, (unsigned long long)to[j].lsb);
    }
    return rc;
}

int pr_txp_handoff(pr_conn *c, txb *b, uint64_t newer)
{
    const st_update *ups;
    uint32_t nu;
    if (cl_tx_updates(b->tx, &ups, &nu) || !nu)
        return 0;
    cl_node *n = c->srv->opt.cluster;
    if (newer)          /* an owner fenced the stream: it knew a newer topology */
        (void)cl_node_topo_wait(n, newer - 1, TXC_TOPO_MS);
    /* A first pass over the owners, allocating nothing, finds whether any
     * write moved (almost never). */
    cl_topo *t = cl_node_topo_acquire(n);
    uint32_t moved = 0;
    for (uint32_t i = 0; i < nu; i++)
        moved += new_primary(c, t, &ups[i]) >= 0;
    cl_node_topo_release(t);
    if (!moved)
        return 0;
    int32_t *dest = em_malloc(nu * sizeof *dest);
    uint8_t *pick = em_malloc(nu), *done = em_calloc(nu, 1);
    int rc = dest && pick && done ? 0 : EM_NOMEM;
    /* A primary that did not take them (the topology moved again, a link
     * down): asked again on the topology of the moment, a while. */
    uint64_t end = em_now_ms() + HANDOFF_MS;
    while (!rc) {
        if ((rc = hand_round(c, b, ups, nu, dest, pick, done)) == 0 || em_now_ms() >= end)
            break;
        rc = 0;
        struct timespec ts = { 0, 100 * 1000000L };
        nanosleep(&ts, NULL);
    }
    if (rc)
        EM_ERROR("transaction %016llx%016llx:%llu: writes of its part here were not taken by "
                 "their partitions' new primary: %s", (unsigned long long)b->coord.msb,
                 (unsigned long long)b->coord.lsb, (unsigned long long)b->seq,
                 rc > 0 ? c->msg : em_strerror(rc));
    em_free(dest);
    em_free(pick);
    em_free(done);
    return rc;
}

/* digest: FNV-1a over a HANDOFF's writes - which writes it carried. */
static uint64_t digest(const uint8_t *p, size_t n)
{
    uint64_t h = 0xcbf29ce484222325ull;
    for (size_t i = 0; i < n; i++)
        h = (h ^ p[i]) * 0x100000001b3ull;
    return h;
}

static int hand_is(const txho *e, cl_meta_uuid coord, uint64_t seq, cl_meta_uuid from,
                   uint64_t dg)
{
    return e->used && e->seq == seq && e->digest == dg && cl_meta_uuid_eq(e->coord, coord) &&
           cl_meta_uuid_eq(e->from, from);
}

/* hand_find: the HANDOFF taken here, or NULL (x->mu). */
static txho *hand_find(struct pr_txbs *x, cl_meta_uuid coord, uint64_t seq, cl_meta_uuid from,
                       uint64_t dg)
{
    for (uint32_t i = 0; i < TXP_HANDS; i++)
        if (hand_is(&x->hands[i], coord, seq, from, dg))
            return &x->hands[i];
    return NULL;
}

int pr_txp_take_handoff(pr_conn *c, cl_meta_uuid coord, uint64_t seq, const uint8_t *p,
                        size_t len, em_buf *out)
{
    if (len < 29 || p[16] != TXS_COMMITTED)     /* pr_txc_check read the writes */
        return pr_bad_request(c, EM_INVAL);
    cl_meta_uuid prim = { em_ld64(p), em_ld64(p + 8) };
    uint64_t index = em_ld64(p + 17);
    uint32_t nw = em_ld32(p + 25);
    if (!pr_txp_member_now(c, prim))
        return pr_fail(c, PR_ST_FAILED, "The transaction's primary is not a member of the "
                       "cluster");
    struct pr_txbs *x = c->srv->txbs;
    uint64_t dg = digest(p + 25, len - 25);
    pthread_mutex_lock(&x->mu);
    txho *e = hand_find(x, coord, seq, prim, dg);
    if (e) {
        int busy = e->busy;
        uint32_t applied = e->applied;
        pthread_mutex_unlock(&x->mu);
        if (busy)
            return pr_fail(c, PR_ST_FAILED, "The transaction's handed writes are being applied");
        return em_buf_put_le32(out, applied);   /* a repeat: applied once */
    }
    uint32_t slot = x->hand_at;
    x->hand_at = (x->hand_at + 1) % TXP_HANDS;
    x->hands[slot] = (txho){ .coord = coord, .from = prim, .seq = seq, .digest = dg, .used = 1,
                             .busy = 1 };
    pthread_mutex_unlock(&x->mu);

    if (index)                      /* the topology the part's node knew, at least */
        (void)cl_node_topo_wait(c->srv->opt.cluster, index - 1, TXC_TOPO_MS);
    uint32_t applied = 0;
    int rc = pr_txp_apply_writes(c, p + 29, len - 29, nw, 0, &applied);
    pthread_mutex_lock(&x->mu);
    e = &x->hands[slot];
    if (hand_is(e, coord, seq, prim, dg)) {
        e->busy = 0;
        e->applied = applied;
        /* kept only whole: after a failure or a part applied (this node is
         * not the primary of some), the next one tries again */
        e->used = !rc && applied == nw;
    }
    /* Its shadow here, if any, is done once all of them applied: its keys'
     * locks go (else the part's FINISH ends it). */
    txs *h = rc || applied < nw ? NULL : pr_txp_find_shadow(x, coord, seq, prim);
    if (h && !h->busy)
        pr_txp_detach_shadow(x, h, TXS_COMMITTED);
    else
        h = NULL;                   /* being recovered: that decides */
    pthread_mutex_unlock(&x->mu);
    pr_txp_txs_free(h);
    if (rc)
        return pr_fail(c, PR_ST_FAILED, "Applying a transaction's handed writes failed: %s",
                       em_strerror(rc));
    return em_buf_put_le32(out, applied);
}
