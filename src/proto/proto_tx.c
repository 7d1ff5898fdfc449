/* proto_tx.c - thin-client transactions: TX_START (4000), TX_END (4001),
 * cache ops carrying a transaction (cache header flag 0x02 + tx id), and
 * ops on TRANSACTIONAL caches without one (implicit one-op transactions).
 *
 * Layouts: ../shared/reference/ignite-thin-protocol.md §2.7; behaviour and
 * texts: Ignite's ClientTxStartRequest, ClientTxEndRequest,
 * ClientConnectionContext (100 per connection, TX_LIMIT_EXCEEDED 1020,
 * TX_NOT_FOUND 1021; rolling back an unknown id succeeds).  Semantics of the
 * transactions: cluster/cl_tx.h.
 *
 * Waiting for a lock.  A worker loop serves many connections, so a request
 * that needs a lock another transaction holds must not sleep on the worker
 * thread: two connections on one loop would wait for each other until a
 * timeout (or forever without one), and every other connection of that loop
 * would stall meanwhile.  Such a request is *parked* instead: the handler
 * returns PR_PARK having changed nothing visible, pr_feed copies the frame
 * into the connection's queue of waiting requests (c->pq) and goes on with
 * the next frames, and the server's loop runs the queue again
 * (pr_conn_resume) when some transaction releases locks (cl_txm wake ->
 * net_wake_parked; on a cluster also a release on the member that answered
 * "wait", CL_NET_MSG_TX_WAKE) or at the next timer scan (about 200 ms,
 * which is what enforces the transaction's timeout while it waits).  The
 * retry runs the whole request again; every transactional op is written to
 * be repeatable (locks it already took are kept, buffered writes are
 * overwritten with the same bytes).
 *
 * Later requests do not wait behind a waiting one, because Ignite's server
 * does not either (it runs a connection's requests concurrently, replies
 * carry request ids): a client may hold a transaction and, on the same
 * connection, run an implicit operation or a second transaction that waits
 * for its lock; serialising them would deadlock the connection with itself.
 * Only requests of the same transaction keep their order (Ignite serialises
 * them too, ClientTxContext.acquire): a frame naming a transaction that has
 * a waiting request queues behind it.
 */
#include "proto/proto_int.h"

#include <inttypes.h>
#include <stdio.h>
#include <string.h>

#include "binary/binary.h"
#include "cluster/cl_node.h"
#include "cluster/cl_tx.h"
#include "util/mem.h"


static const char *conc_name(int c) { return c ? "PESSIMISTIC" : "OPTIMISTIC"; }
static const char *iso_name(int i)
{
    return i == 0 ? "READ_COMMITTED" : i == 1 ? "REPEATABLE_READ" : "SERIALIZABLE";
}

pr_txslot *pr_tx_slot(pr_conn *c, const cl_tx *tx)
{
    for (uint32_t i = 0; i < c->ntxs; i++)
        if (c->txs[i].tx == tx)
            return &c->txs[i];
    return NULL;
}

/* tx_desc: Ignite prints the transaction in its errors; ember's summary. */
static const char *tx_desc(pr_conn *c, const cl_tx *tx, char *buf, size_t n)
{
    const pr_txslot *s = pr_tx_slot(c, tx);
    snprintf(buf, n, "GridNearTxLocal [txId=%d, concurrency=%s, isolation=%s, timeout=%" PRId64
             ", label=%s]", s ? s->id : 0, conc_name(cl_tx_concurrency(tx)),
             iso_name(cl_tx_isolation(tx)), cl_tx_timeout(tx),
             s && s->label[0] ? s->label : "null");
    return buf;
}

/* fail_timed_out: an operation or commit of a transaction that is over -
 * rolled back at its timeout, or as a deadlock's victim. */
int pr_tx_fail_timed_out(pr_conn *c, const cl_tx *tx)
{
    char d[200];
    const pr_txslot *s = pr_tx_slot(c, tx);
    if (s && s->why == PR_TX_WHY_DEADLOCK)
        return pr_fail(c, PR_ST_FAILED, "Transaction has been rolled back (deadlock detected): "
                       "%s", tx_desc(c, tx, d, sizeof d));
    return pr_fail(c, PR_ST_FAILED, "Cache transaction timed out: %s", tx_desc(c, tx, d, sizeof d));
}

int pr_tx_fail_lock_timeout(pr_conn *c, cl_tx *tx)
{
    pr_txslot *s = pr_tx_slot(c, tx);
    if (s)
        s->why = PR_TX_WHY_TIMEOUT;
    char d[200];
    return pr_fail(c, PR_ST_FAILED, "Failed to acquire lock within provided timeout for "
                   "transaction [timeout=%" PRId64 ", tx=%s]", cl_tx_timeout(tx),
                   tx_desc(c, tx, d, sizeof d));
}

/* key_text renders a normalised key for a message: ints, longs and strings
 * as Java would print them, anything else by type and size. */
static void key_text(const uint8_t *k, size_t n, char *buf, size_t cap, const char **cls)
{
    if (n == 5 && k[0] == BIN_INT) {
        snprintf(buf, cap, "%d", (int32_t)em_ld32(k + 1));
        *cls = "java.lang.Integer";
    } else if (n == 9 && k[0] == 4) {
        snprintf(buf, cap, "%" PRId64, (int64_t)em_ld64(k + 1));
        *cls = "java.lang.Long";
    } else if (n >= 5 && k[0] == 9 && em_ld32(k + 1) <= n - 5) {
        uint32_t l = em_ld32(k + 1);
        snprintf(buf, cap, "%.*s", (int)(l > 64 ? 64 : l), (const char *)k + 5);
        *cls = "java.lang.String";
    } else {
        snprintf(buf, cap, "<binary type %d, %zu bytes>", k[0], n);
        *cls = "org.apache.ignite.binary.BinaryObject";
    }
}

int pr_tx_fail_conflict(pr_conn *c, cl_tx *tx)
{
    int32_t cid;
    const uint8_t *k;
    size_t kl;
    cl_tx_conflict(tx, &cid, &k, &kl);
    char kt[96] = "null";
    const char *cls = "null";
    if (k)
        key_text(k, kl, kt, sizeof kt, &cls);
    st_cache *sc = st_cache_find(c->srv->st, cid);
    return pr_fail(c, PR_ST_FAILED, "Failed to prepare transaction, read/write conflict [key=%s, "
                   "keyCls=%s, cache=%s]", kt, cls, sc ? st_cache_cfg(sc)->name : "?");
}

int pr_tx_fail_deadlock(pr_conn *c, cl_tx *tx)
{
    int32_t cid;
    const uint8_t *k;
    size_t kl;
    cl_tx_conflict(tx, &cid, &k, &kl);
    char kt[96] = "null", d[200];
    const char *cls = "null";
    if (k)
        key_text(k, kl, kt, sizeof kt, &cls);
    st_cache *sc = st_cache_find(c->srv->st, cid);
    pr_txslot *s = pr_tx_slot(c, tx);
    if (s)
        s->why = PR_TX_WHY_DEADLOCK;
    return pr_fail(c, PR_ST_FAILED, "Deadlock detected: the transaction waited for the lock of "
                   "[key=%s, keyCls=%s, cache=%s] held by a transaction waiting for it; rolled "
                   "back [tx=%s]", kt, cls, sc ? st_cache_cfg(sc)->name : "?",
                   tx_desc(c, tx, d, sizeof d));
}

/* ---- per-connection table ---------------------------------------------- */

int pr_tx_lookup(pr_conn *c, int32_t id, cl_tx **tx)
{
    if (c->branch) {
        *tx = c->branch;            /* PR_OP_TX_CALL: the part here */
        return 0;
    }
    for (uint32_t i = 0; i < c->ntxs; i++)
        if (c->txs[i].id == id) {
            *tx = c->txs[i].tx;
            return 0;
        }
    return pr_fail(c, PR_ST_TX_NOT_FOUND, "Transaction with id %d not found.", id);
}

/* slot_drop ends s (rolled back if still open) and keeps its transaction
 * for the next TX_START: a steady stream of transactions on a connection
 * reuses their memory instead of allocating it each time. */
static void slot_drop(pr_conn *c, pr_txslot *s)
{
    if (s->seq)
        (void)pr_txc_end(c, s, 0);  /* its parts on the cluster roll back */
    if (s->parts && !c->spare_parts) {
        c->spare_parts = s->parts;  /* the next mapped transaction's */
        c->spare_capparts = s->capparts;
    } else {
        em_free(s->parts);
    }
    if (c->nspare < sizeof c->spare / sizeof c->spare[0]) {
        cl_tx_rollback(s->tx);
        c->spare[c->nspare++] = s->tx;
    } else {
        cl_tx_free(s->tx);
    }
    *s = c->txs[--c->ntxs];
}

void pr_txs_close(pr_conn *c)
{
    while (c->ntxs)
        slot_drop(c, &c->txs[c->ntxs - 1]);
    em_free(c->txs);
    c->txs = NULL;
    cl_tx_free(c->implicit);
    c->implicit = NULL;
    while (c->nspare)
        cl_tx_free(c->spare[--c->nspare]);
    em_free(c->spare_parts);
    c->spare_parts = NULL;
    em_buf_free(&c->txenv);
    em_buf_free(&c->txscratch);
    em_buf_free(&c->txbuf);
    em_buf_free(&c->pq);
    em_buf_free(&c->pq2);
    c->npq = 0;
    pr_tx_sync_waiting(c);
}

void pr_tx_sync_waiting(pr_conn *c)
{
    /* not frames behind an SQL request, nor a forward's own parked frame
     * (its answer resumes it, not a released lock; after a reply the
     * answering thread sent, it stays until the client's next frame) */
    int w = c->npq && !c->job_busy && !(c->fwd_busy == PR_OUT_FWD && c->npq == 1);
    if (w && !c->waiting) {
        c->waiting = 1;
        cl_txm_wait(c->srv->txm);
    } else if (!w && c->waiting) {
        c->waiting = 0;
        cl_txm_unwait(c->srv->txm);
    }
}

int32_t pr_tx_frame_id(const uint8_t *body, size_t len)
{
    if (len < 10)
        return 0;
    int op = (uint16_t)em_ld16(body);
    const uint8_t *p = body + 10;
    size_t n = len - 10;
    if (op == 4001)
        return n >= 4 ? (int32_t)em_ld32(p) : 0;
    if (!((op >= 1000 && op <= 1025) || op == 2000 || op == 2002 || op == 2004 || op == 2008))
        return 0;
    if (n < 5 || !(p[4] & 0x02))
        return 0;
    size_t at = 5 + ((p[4] & 0x04) ? 24 : 0);
    return n >= at + 4 ? (int32_t)em_ld32(p + at) : 0;
}

/* ---- TX_START / TX_END ------------------------------------------------- */

static int tx_start(pr_conn *c, pr_rd *r, em_buf *out)
{
    uint8_t conc, iso;
    int64_t timeout;
    const uint8_t *lb;
    size_t lbl;
    if (pr_rd_u8(r, &conc) || pr_rd_u8(r, &iso) || pr_rd_i64(r, &timeout))
        return pr_bad_request(c, EM_TRUNCATED);
    int rc = pr_rd_str(c, r, &lb, &lbl);
    if (rc)
        return rc;
    if (conc > 1)
        return pr_fail(c, PR_ST_FAILED, "Invalid transaction concurrency: %d", conc);
    if (iso > 2)
        return pr_fail(c, PR_ST_FAILED, "Invalid transaction isolation: %d", iso);
    if (timeout < 0)
        return pr_fail(c, PR_ST_FAILED, "Transaction timeout must not be negative: %" PRId64,
                       timeout);
    if (c->ntxs >= PR_MAX_TX_PER_CONN)
        return pr_fail(c, PR_ST_TX_LIMIT_EXCEEDED, "Active transactions per connection limit "
                       "(%d) exceeded. To start a new transaction you need to wait for some of "
                       "currently active transactions complete. To change the limit set up "
                       "ThinClientConfiguration.MaxActiveTxPerConnection property.",
                       PR_MAX_TX_PER_CONN);
    if (!c->txs && !(c->txs = em_calloc(PR_MAX_TX_PER_CONN, sizeof *c->txs)))
        return EM_NOMEM;
    cl_tx *tx;
    if (c->nspare) {
        tx = c->spare[c->nspare - 1];
        if ((rc = cl_tx_restart(tx, conc, iso, timeout)) != 0)
            return rc;
        c->nspare--;
    } else if ((rc = cl_tx_begin(c->srv->txm, conc, iso, timeout, &tx)) != 0) {
        return rc;
    }
    /* ids are per connection (Ignite's ClientConnectionContext.nextTxId),
     * never 0 and never one still open */
    int32_t id;
    do {
        id = ++c->next_tx;
        if (id <= 0)
            id = c->next_tx = 1;
        cl_tx *dup;
        if (pr_tx_lookup(c, id, &dup) != 0)
            break;
    } while (1);
    c->msg[0] = 0;
    pr_txslot *s = &c->txs[c->ntxs++];
    memset(s, 0, sizeof *s);
    s->id = id;
    s->tx = tx;
    if (lb)
        snprintf(s->label, sizeof s->label, "%.*s", (int)(lbl < 47 ? lbl : 47), (const char *)lb);
    return em_buf_put_le32(out, (uint32_t)id);
}

static int tx_end(pr_conn *c, pr_rd *r, em_buf *out)
{
    (void)out;
    int32_t id;
    uint8_t commit;
    if (pr_rd_i32(r, &id) || pr_rd_u8(r, &commit))
        return pr_bad_request(c, EM_TRUNCATED);
    pr_txslot *s = NULL;
    for (uint32_t i = 0; i < c->ntxs; i++)
        if (c->txs[i].id == id)
            s = &c->txs[i];
    if (!s)
        return commit ? pr_fail(c, PR_ST_TX_NOT_FOUND, "Transaction with id %d not found.", id)
                      : 0;
    cl_tx *tx = s->tx;
    if (!commit) {
        slot_drop(c, s);
        return 0;
    }
    if (s->seq) {
        /* mapped on a cluster: its parts commit on their primaries */
        int rc = pr_txc_end(c, s, 1);
        if (rc == PR_PARK)
            return rc;              /* a part waits for a lock: asked again later */
        pr_txc_forget(c->srv, s->seq);  /* its decision stays answerable */
        s->seq = 0;                 /* ended there, whatever the outcome */
        slot_drop(c, s);
        return rc;
    }
    if (!cl_tx_open(tx)) {
        int rc = pr_tx_fail_timed_out(c, tx);
        slot_drop(c, s);
        return rc;
    }
    int rc = cl_tx_commit(tx);
    if (rc == EM_LOCKED) {
        if (!c->forwarded)
            return PR_PARK;         /* OPTIMISTIC: waits for a lock, in key order */
        cl_tx_rollback(tx);
        rc = EM_TIMEOUT;
    }
    rc = pr_tx_fail_commit(c, tx, rc);
    slot_drop(c, s);                /* Ignite forgets it whatever the outcome */
    return rc;
}

int pr_tx_fail_commit(pr_conn *c, cl_tx *tx, int rc)
{
    if (rc == EM_TIMEOUT)
        return pr_tx_fail_timed_out(c, tx);
    if (rc == EM_DEADLOCK)
        return pr_tx_fail_deadlock(c, tx);
    if (rc == EM_TXCONFLICT)
        return pr_tx_fail_conflict(c, tx);
    if (rc == EM_NOMEM)
        return pr_fail(c, PR_ST_FAILED, "Failed to commit transaction: out of memory");
    if (rc < 0)
        return pr_fail(c, PR_ST_FAILED, "Failed to commit transaction: %s", em_strerror(rc));
    return rc;
}

int pr_op_tx(pr_conn *c, int op, pr_rd *r, em_buf *out)
{
    if (c->forwarded)
        return pr_fail(c, PR_ST_FAILED, "TX_START and TX_END are not forwarded between members");
    return op == 4000 ? tx_start(c, r, out) : tx_end(c, r, out);
}

/* ---- cache ops in a transaction ---------------------------------------- */

static int equals(const em_buf *b, const uint8_t *e, size_t el)
{
    return b->len == el && memcmp(b->p, e, el) == 0;
}

/* run_op runs one key-value op in tx.  0, a status (message set), or a
 * cl_tx code: EM_LOCKED (park), EM_TIMEOUT (rolled back) for the caller. */
static int run_op(pr_conn *c, int op, pr_cache_hdr *h, pr_kv *d, cl_tx *tx, em_buf *out)
{
    st_cache *sc = h->cache;
    em_buf *tb = &c->txbuf;
    size_t pos, n;
    int found = 0, rc = 0;
    em_buf_reset(tb);
    switch (op) {
    case 1000:      /* GET */
        if ((rc = pr_val_begin(out, &pos)) == 0 &&
            (rc = cl_tx_get(tx, sc, d->k, d->kl, 0, out, &found)) == 0)
            rc = pr_val_end(c, out, pos, found);
        return rc;
    case 1001:      /* PUT */
        return cl_tx_put(tx, sc, d->k, d->kl, d->v, d->vl);
    case 1002:      /* PUT_IF_ABSENT -> bool */
        if ((rc = cl_tx_get(tx, sc, d->k, d->kl, 1, tb, &found)) == 0 && !found)
            rc = cl_tx_put(tx, sc, d->k, d->kl, d->v, d->vl);
        return rc ? rc : pr_put_bool(out, !found);
    case 1003: {    /* GET_ALL -> int m, m x (key, value) */
        size_t cnt = out->len;
        int32_t m = 0;
        if ((rc = em_buf_put_le32(out, 0)) != 0)
            return rc;
        while (!rc && d->bt.left && (rc = pr_batch_next(c, &d->bt, &n)) == 0) {
            for (size_t i = 0; !rc && i < n; i++) {
                em_buf_reset(tb);
                if ((rc = cl_tx_get(tx, sc, c->ks[i].p, c->ks[i].len, 0, tb, &found)) == 0 &&
                    found && (rc = pr_put_stored(c, out, c->ks[i].p, c->ks[i].len)) == 0 &&
                    (rc = pr_put_stored(c, out, tb->p, tb->len)) == 0)
                    m++;
            }
        }
        if (!rc)
            em_st32(out->p + cnt, (uint32_t)m);
        return rc;
    }
    case 1004:      /* PUT_ALL */
        while (!rc && d->bt.left && (rc = pr_batch_next(c, &d->bt, &n)) == 0)
            for (size_t i = 0; !rc && i < n; i++)
                rc = cl_tx_put(tx, sc, c->ks[i].p, c->ks[i].len, c->vs[i].p, c->vs[i].len);
        return rc;
    case 1005:      /* GET_AND_PUT */
    case 1006:      /* GET_AND_REPLACE */
    case 1007:      /* GET_AND_REMOVE */
    case 1008:      /* GET_AND_PUT_IF_ABSENT */
        if ((rc = pr_val_begin(out, &pos)) != 0 ||
            (rc = cl_tx_get(tx, sc, d->k, d->kl, 1, out, &found)) != 0)
            return rc;
        if (op == 1005 || (op == 1006 && found) || (op == 1008 && !found))
            rc = cl_tx_put(tx, sc, d->k, d->kl, d->v, d->vl);
        else if (op == 1007 && found)
            rc = cl_tx_remove(tx, sc, d->k, d->kl);
        return rc ? rc : pr_val_end(c, out, pos, found);
    case 1009:      /* REPLACE -> bool */
        if ((rc = cl_tx_get(tx, sc, d->k, d->kl, 1, tb, &found)) == 0 && found)
            rc = cl_tx_put(tx, sc, d->k, d->kl, d->v, d->vl);
        return rc ? rc : pr_put_bool(out, found);
    case 1010:      /* REPLACE_IF_EQUALS -> bool */
        if ((rc = cl_tx_get(tx, sc, d->k, d->kl, 1, tb, &found)) != 0)
            return rc;
        found = found && equals(tb, d->e, d->el);
        if (found && (rc = cl_tx_put(tx, sc, d->k, d->kl, d->v, d->vl)) != 0)
            return rc;
        return pr_put_bool(out, found);
    case 1011:      /* CONTAINS_KEY -> bool */
        if ((rc = cl_tx_get(tx, sc, d->k, d->kl, 0, tb, &found)) != 0)
            return rc;
        return pr_put_bool(out, found);
    case 1012: {    /* CONTAINS_KEYS -> bool (all present) */
        int all = 1;
        while (!rc && d->bt.left && (rc = pr_batch_next(c, &d->bt, &n)) == 0)
            for (size_t i = 0; !rc && i < n; i++) {
                em_buf_reset(tb);
                rc = cl_tx_get(tx, sc, c->ks[i].p, c->ks[i].len, 0, tb, &found);
                all = all && found;
            }
        return rc ? rc : pr_put_bool(out, all);
    }
    case 1014:      /* CLEAR_KEY (implicit transactions only, as 1015) */
        return cl_tx_remove(tx, sc, d->k, d->kl);
    case 1015:      /* CLEAR_KEYS */
    case 1018:      /* REMOVE_KEYS */
        while (!rc && d->bt.left && (rc = pr_batch_next(c, &d->bt, &n)) == 0)
            for (size_t i = 0; !rc && i < n; i++)
                rc = cl_tx_remove(tx, sc, c->ks[i].p, c->ks[i].len);
        return rc;
    case 1016:      /* REMOVE_KEY -> bool */
        if ((rc = cl_tx_get(tx, sc, d->k, d->kl, 1, tb, &found)) == 0 && found)
            rc = cl_tx_remove(tx, sc, d->k, d->kl);
        return rc ? rc : pr_put_bool(out, found);
    case 1017:      /* REMOVE_IF_EQUALS -> bool */
        if ((rc = cl_tx_get(tx, sc, d->k, d->kl, 1, tb, &found)) != 0)
            return rc;
        found = found && equals(tb, d->e, d->el);
        if (found && (rc = cl_tx_remove(tx, sc, d->k, d->kl)) != 0)
            return rc;
        return pr_put_bool(out, found);
    default:
        return pr_fail(c, PR_ST_INVALID_OP, "Invalid request op code: %d", op);
    }
}

int pr_tx_refuse_nontx(pr_conn *c, int op)
{
    int clear = op == 1013 || op == 1014 || op == 1015;
    if (!clear && op != 1019)
        return 0;
    /* Ignite refuses them inside a transaction (since 2.17: the clears
     * were never transactional, and removeAll runs as a job of its own);
     * the transaction stays open and its writes are kept. */
    return pr_fail(c, PR_ST_FAILED, "Failed to invoke a non-transactional IgniteCache %s "
                   "operation within a transaction.", clear ? "clear" : "removeAll");
}

int pr_tx_cache_op(pr_conn *c, int op, pr_cache_hdr *h, pr_kv *d, em_buf *out)
{
    size_t start = out->len;
    pr_batch bt0 = d->bt;           /* a retry re-slices the batch from here */
    int rc;
    if (op == 1013 || op == 1019) {
        /* Outside one they clear the cache as on an ATOMIC cache, without
         * waiting for the locks of running transactions. */
        rc = st_clear(h->cache);
        return rc ? pr_st_err(c, h, rc) : 0;
    }
    cl_tx *tx = h->tx;
    if (tx) {
        if (!cl_tx_open(tx))
            return pr_tx_fail_timed_out(c, tx);
        rc = run_op(c, op, h, d, tx, out);
        if (rc == EM_LOCKED) {
            out->len = start;
            d->bt = bt0;
            if (!c->forwarded)
                return PR_PARK;
            if (c->branch)          /* its coordinator parks and asks again */
                return pr_txc_wait(c, "The key is locked by another transaction");
            cl_tx_rollback(tx);
            rc = EM_TIMEOUT;
        }
        if (rc == EM_TIMEOUT) {
            out->len = start;
            return pr_tx_fail_lock_timeout(c, tx);
        }
        if (rc == EM_DEADLOCK) {
            out->len = start;
            return pr_tx_fail_deadlock(c, tx);
        }
        if (rc == EM_LIMIT)
            return pr_fail(c, PR_ST_FAILED, "Transaction touches too many keys (ember's limit "
                           "is %u per transaction)", CL_TX_MAX_KEYS);
        return rc > 0 ? rc : rc ? pr_st_err(c, h, rc) : 0;
    }
    /* Implicit: one PESSIMISTIC READ_COMMITTED transaction around the op,
     * so it waits for (and takes) the locks of the keys it writes and its
     * writes reach the WAL as one unit.  Nothing of it survives a park. */
    if (!c->implicit)
        rc = cl_tx_begin(c->srv->txm, CL_TX_PESSIMISTIC, CL_TX_READ_COMMITTED, 0, &c->implicit);
    else
        rc = cl_tx_restart(c->implicit, CL_TX_PESSIMISTIC, CL_TX_READ_COMMITTED, 0);
    if (rc)
        return rc;
    tx = c->implicit;
    rc = run_op(c, op, h, d, tx, out);
    if (!rc)
        rc = cl_tx_commit(tx);
    else
        cl_tx_rollback(tx);
    if (rc == EM_STALE) {
        /* refused whole before it applied: its keys' primary moved after
         * the request was mapped here (the caller maps it again) */
        out->len = start;
        return rc;
    }
    if (rc == EM_LOCKED || rc == EM_DEADLOCK) {
        /* an implicit transaction holds nothing while it waits (rolled
         * back above), so its "deadlock" only means: try again later */
        out->len = start;
        if (!c->forwarded)
            return PR_PARK;
        /* the member that forwarded it parks it, woken when locks here
         * are released (or by its timer scan) */
        return pr_txc_wait(c, "Failed to acquire lock: the key is locked by a transaction "
                           "on its owner node");
    }
    if (rc > 0)
        return rc;
    if (rc) {
        out->len = start;
        return pr_st_err(c, h, rc);
    }
    return 0;
}
