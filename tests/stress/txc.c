/* txc.c - ember-txc: transactions across cluster nodes, over the wire,
 * against real emberd processes (tests/chaos/cluster_tx.sh starts them).
 *
 *   test   every concurrency x isolation pair on a TRANSACTIONAL cache with
 *          one backup whose keys span every node: commit (each node then
 *          reads the values), rollback, read-your-writes, isolation from
 *          another node's connection, a PESSIMISTIC transaction waiting for
 *          another's lock and finishing once it is released, an implicit
 *          put waiting for a transaction's lock (on any key's primary),
 *          cycles of lock waits across 2 and 3 nodes without timeouts (one
 *          transaction fails "Deadlock detected"), a lock timeout,
 *          an OPTIMISTIC SERIALIZABLE conflict, rollback when the
 *          coordinator's client disconnects, batches across primaries,
 *          OPTIMISTIC transactions writing in opposite orders at once.
 *   bank   clients on every node move amounts between accounts in
 *          transactions for --duration seconds; every few transfers a
 *          client reads all accounts in a PESSIMISTIC REPEATABLE_READ
 *          transaction and the total must be the initial one.  Afterwards
 *          (and with `bank-check` alone) every node must read the same
 *          accounts with that total.  Exit 1 on any violation.
 *   put    one PESSIMISTIC REPEATABLE_READ transaction through the first node
 *          putting --value at each of the int --keys, committed; exit 0
 *          once it committed, else 1 with the error (a test that moves a
 *          primary while the transaction is held runs it).
 *   bench  BENCHMARKS.md M5's TRANSACTIONAL row: --clients connections to
 *          the first node, each putting its own int keys in one-key
 *          PESSIMISTIC REPEATABLE_READ transactions (TX_START, PUT, TX_END)
 *          for --duration seconds after a warm-up as long; transactions
 *          per second, p50/p99 of a whole transaction, and B/op and
 *          allocs/op summed over every node's counting allocator (op 32000,
 *          emberd --debug-ops).  --plain 1: the same puts without a
 *          transaction (the implicit one-op transaction) for comparison.
 *
 * Layouts: shared/reference/ignite-thin-protocol.md §2.2 (cache header,
 * transaction flag), §2.7 (TX_START, TX_END).
 */
#include "stress.h"
#include "binary/binary.h"
#include "util/err.h"
#include "util/mem.h"

#include <poll.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define MAX_NODES 8
#define MAX_CLIENTS 32
static int g_call_ms = 30000;       /* a reply's bound (--call-ms) */

enum { OPT = 0, PES = 1 };
enum { RC = 0, RR = 1, SER = 2 };
static const char *const conc_s[] = { "OPTIMISTIC", "PESSIMISTIC" };
static const char *const iso_s[] = { "READ_COMMITTED", "REPEATABLE_READ", "SERIALIZABLE" };

typedef struct node_addr { char ip[64]; int port; } node_addr;
static node_addr g_nodes[MAX_NODES];
static int g_nnodes;
static const char *g_cache = "txc";
static int g_pass, g_fail;

static void ok(const char *what) { g_pass++; printf("ok   %s\n", what); fflush(stdout); }
static void bad(const char *what, const char *why)
{
    g_fail++;
    printf("FAIL %s%s%s\n", what, why ? ": " : "", why ? why : "");
    fflush(stdout);
}

static int parse_nodes(const char *s)
{
    char buf[1024];
    snprintf(buf, sizeof buf, "%s", s);
    for (char *save = NULL, *t = strtok_r(buf, ",", &save); t; t = strtok_r(NULL, ",", &save)) {
        char *colon = strrchr(t, ':');
        if (!colon || g_nnodes == MAX_NODES)
            return -1;
        *colon = 0;
        snprintf(g_nodes[g_nnodes].ip, sizeof g_nodes[0].ip, "%s", t);
        g_nodes[g_nnodes].port = atoi(colon + 1);
        if (g_nodes[g_nnodes].port <= 0)
            return -1;
        g_nnodes++;
    }
    return g_nnodes ? 0 : -1;
}

static int open_node(sx_conn *c, int i)
{
    return sx_open_addr(c, g_nodes[i % g_nnodes].ip, g_nodes[i % g_nnodes].port, 5000, 1, 7, 0);
}

/* ---- requests ------------------------------------------------------------ */

/* err_text: the message of the error reply in c->in. */
static const char *err_text(const sx_conn *c, char *buf, size_t cap)
{
    const uint8_t *p = c->in.p;
    size_t n = c->in.len, pos = 8 + 2;
    buf[0] = 0;
    if (n < pos)
        return buf;
    if (em_ld16(p + 8) & 2)
        pos += 12;
    pos += 4;
    if (pos + 5 <= n && p[pos] == 9) {
        uint32_t l = em_ld32(p + pos + 1);
        if (l <= n - pos - 5)
            snprintf(buf, cap, "%.*s", (int)l, (const char *)p + pos + 5);
    }
    return buf;
}

static void hdr(em_buf *b, int32_t tx)
{
    sx_put_i32(b, sx_cache_id(g_cache));
    sx_put_u8(b, tx ? 0x02 : 0);
    if (tx)
        sx_put_i32(b, tx);
}

/* call sends c->out; 0 (reply in r), the error status, or a negative code
 * (no reply: the connection is lost). */
static int call(sx_conn *c, sx_reply *r)
{
    int rc = sx_call(c, r, g_call_ms);
    return rc ? (rc < 0 ? rc : -rc) : r->status;
}

static int g_backups = 1;

static int create_cache(sx_conn *c)
{
    em_buf_reset(&c->out);
    size_t s = sx_req_begin(&c->out, 1054, c->rid++);    /* GET_OR_CREATE_WITH_CONFIGURATION */
    size_t len_at = c->out.len;
    sx_put_i32(&c->out, 0);
    sx_put_i16(&c->out, 4);
    sx_put_i16(&c->out, 0);
    sx_v_str(&c->out, g_cache);
    sx_put_i16(&c->out, 2);                 /* ATOMICITY_MODE: TRANSACTIONAL */
    sx_put_i32(&c->out, 0);
    sx_put_i16(&c->out, 3);                 /* BACKUPS */
    sx_put_i32(&c->out, g_backups);
    sx_put_i16(&c->out, 4);                 /* WRITE_SYNCHRONIZATION_MODE: FULL_SYNC */
    sx_put_i32(&c->out, 0);
    em_st32(c->out.p + len_at, (uint32_t)(c->out.len - len_at));
    sx_req_end(&c->out, s);
    sx_reply r;
    return call(c, &r);
}

static int tx_start(sx_conn *c, int conc, int iso, int64_t timeout, int32_t *id)
{
    em_buf_reset(&c->out);
    size_t s = sx_req_begin(&c->out, 4000, c->rid++);
    sx_put_u8(&c->out, (uint8_t)conc);
    sx_put_u8(&c->out, (uint8_t)iso);
    sx_put_i64(&c->out, timeout);
    sx_v_str(&c->out, "txc");
    sx_req_end(&c->out, s);
    sx_reply r;
    int rc = call(c, &r);
    if (!rc) {
        sx_rd d = { r.p, r.n, 0, 0 };
        *id = sx_rd_i32(&d);
        rc = d.err ? EM_TRUNCATED : 0;
    }
    return rc;
}

static void end_msg(sx_conn *c, int32_t id, int commit)
{
    em_buf_reset(&c->out);
    size_t s = sx_req_begin(&c->out, 4001, c->rid++);
    sx_put_i32(&c->out, id);
    sx_put_u8(&c->out, (uint8_t)commit);
    sx_req_end(&c->out, s);
}

static int tx_end(sx_conn *c, int32_t id, int commit)
{
    end_msg(c, id, commit);
    sx_reply r;
    return call(c, &r);
}

static void put_msg(sx_conn *c, int32_t tx, int32_t k, int32_t v)
{
    em_buf_reset(&c->out);
    size_t s = sx_req_begin(&c->out, SX_OP_PUT, c->rid++);
    hdr(&c->out, tx);
    sx_v_int(&c->out, k);
    sx_v_int(&c->out, v);
    sx_req_end(&c->out, s);
}

static int put(sx_conn *c, int32_t tx, int32_t k, int32_t v)
{
    put_msg(c, tx, k, v);
    sx_reply r;
    return call(c, &r);
}

/* get: 0 and *v (INT32_MIN when absent), or the status. */
static int get(sx_conn *c, int32_t tx, int32_t k, int32_t *v)
{
    em_buf_reset(&c->out);
    size_t s = sx_req_begin(&c->out, SX_OP_GET, c->rid++);
    hdr(&c->out, tx);
    sx_v_int(&c->out, k);
    sx_req_end(&c->out, s);
    sx_reply r;
    int rc = call(c, &r);
    if (rc)
        return rc;
    sx_rd d = { r.p, r.n, 0, 0 };
    uint8_t t = sx_rd_u8(&d);
    *v = t == 3 ? sx_rd_i32(&d) : INT32_MIN;
    return d.err || (t != 3 && t != 101) ? EM_TRUNCATED : 0;
}

static int put_all(sx_conn *c, int32_t tx, int32_t k0, int n, int32_t v)
{
    em_buf_reset(&c->out);
    size_t s = sx_req_begin(&c->out, SX_OP_PUT_ALL, c->rid++);
    hdr(&c->out, tx);
    sx_put_i32(&c->out, n);
    for (int i = 0; i < n; i++) {
        sx_v_int(&c->out, k0 + i);
        sx_v_int(&c->out, v + i);
    }
    sx_req_end(&c->out, s);
    sx_reply r;
    return call(c, &r);
}

/* get_all reads keys k0..k0+n-1 into v[] (INT32_MIN absent): 0 or status. */
static int get_all(sx_conn *c, int32_t tx, int32_t k0, int n, int32_t *v)
{
    em_buf_reset(&c->out);
    size_t s = sx_req_begin(&c->out, SX_OP_GET_ALL, c->rid++);
    hdr(&c->out, tx);
    sx_put_i32(&c->out, n);
    for (int i = 0; i < n; i++)
        sx_v_int(&c->out, k0 + i);
    sx_req_end(&c->out, s);
    sx_reply r;
    int rc = call(c, &r);
    if (rc)
        return rc;
    for (int i = 0; i < n; i++)
        v[i] = INT32_MIN;
    sx_rd d = { r.p, r.n, 0, 0 };
    int32_t m = sx_rd_i32(&d);
    for (int32_t i = 0; i < m && !d.err; i++) {
        int32_t k = sx_rd_u8(&d) == 3 ? sx_rd_i32(&d) : (d.err = 1, 0);
        int32_t val = sx_rd_u8(&d) == 3 ? sx_rd_i32(&d) : (d.err = 1, 0);
        if (k >= k0 && k < k0 + n)
            v[k - k0] = val;
    }
    return d.err ? EM_TRUNCATED : 0;
}

/* ---- test ---------------------------------------------------------------- */

#define KEYS 30                     /* int keys 0..29: primaries on every node */

/* same_everywhere: each node reads keys k0..k0+n-1 as want + i (plain GET). */
static int same_everywhere(int32_t k0, int n, int32_t want, char *why, size_t cap)
{
    for (int nd = 0; nd < g_nnodes; nd++) {
        sx_conn c;
        if (open_node(&c, nd)) {
            snprintf(why, cap, "node %d: cannot connect", nd + 1);
            return -1;
        }
        for (int i = 0; i < n; i++) {
            int32_t v;
            int rc = get(&c, 0, k0 + i, &v);
            if (rc || v != want + i) {
                snprintf(why, cap, "node %d reads key %d as %d (want %d, rc %d)", nd + 1,
                         k0 + i, v, want + i, rc);
                sx_close(&c);
                return -1;
            }
        }
        sx_close(&c);
    }
    return 0;
}

static void t_commit_rollback(sx_conn *a, sx_conn *b, int conc, int iso, int32_t base)
{
    char what[160], why[256], e[256];
    int32_t id, v;
    snprintf(what, sizeof what, "%s %s: commit across nodes, read-your-writes, isolation",
             conc_s[conc], iso_s[iso]);
    int rc = tx_start(a, conc, iso, 10000, &id);
    for (int i = 0; !rc && i < KEYS; i++)
        rc = put(a, id, i, base + i);
    if (!rc && ((rc = get(a, id, 7, &v)) != 0 || v != base + 7)) {
        bad(what, "the transaction does not read its own write");
        tx_end(a, id, 0);
        return;
    }
    /* another node's connection sees the committed values only */
    int32_t seen;
    if (!rc && get(b, 0, 7, &seen) == 0 && seen == base + 7) {
        bad(what, "another connection read an uncommitted value");
        tx_end(a, id, 0);
        return;
    }
    if (!rc)
        rc = tx_end(a, id, 1);
    if (rc) {
        snprintf(why, sizeof why, "status %d: %s", rc, err_text(a, e, sizeof e));
        bad(what, why);
        return;
    }
    if (same_everywhere(0, KEYS, base, why, sizeof why))
        bad(what, why);
    else
        ok(what);

    snprintf(what, sizeof what, "%s %s: rollback across nodes", conc_s[conc], iso_s[iso]);
    rc = tx_start(a, conc, iso, 10000, &id);
    for (int i = 0; !rc && i < KEYS; i++)
        rc = put(a, id, i, base + 1000 + i);
    if (!rc)
        rc = tx_end(a, id, 0);
    if (rc) {
        snprintf(why, sizeof why, "status %d: %s", rc, err_text(a, e, sizeof e));
        bad(what, why);
    } else if (same_everywhere(0, KEYS, base, why, sizeof why)) {
        bad(what, why);
    } else {
        ok(what);
    }
}

/* t_wait: b's PESSIMISTIC put waits for a's lock on a key another node
 * owns, and goes on once a commits. */
static void t_wait(sx_conn *a, sx_conn *b, int iso)
{
    char what[160], why[256], e[256];
    snprintf(what, sizeof what, "PESSIMISTIC %s: a transaction waits for another's lock, both "
             "finish", iso_s[iso]);
    int32_t ta, tb, v;
    int rc = tx_start(a, PES, iso, 0, &ta);
    if (!rc)
        rc = put(a, ta, 11, 111);
    if (!rc)
        rc = tx_start(b, PES, iso, 0, &tb);
    if (rc) {
        bad(what, "setup");
        return;
    }
    put_msg(b, tb, 11, 222);
    if (sx_write_all(b->fd, b->out.p, b->out.len, g_call_ms)) {
        bad(what, "send");
        return;
    }
    /* b's put is waiting now (it cannot have the lock) */
    struct timespec ts = { 0, 300 * 1000000L };
    nanosleep(&ts, NULL);
    if ((rc = tx_end(a, ta, 1)) != 0) {
        snprintf(why, sizeof why, "a's commit: %d %s", rc, err_text(a, e, sizeof e));
        bad(what, why);
        return;
    }
    if ((rc = sx_read_frame(b->fd, &b->in, g_call_ms, 1 << 20)) != 0) {
        bad(what, "b's put never answered");
        return;
    }
    sx_reply r;
    if (sx_parse_reply(b->in.p, b->in.len, 1, &r) || r.status) {
        snprintf(why, sizeof why, "b's put failed: %s", err_text(b, e, sizeof e));
        bad(what, why);
        tx_end(b, tb, 0);
        return;
    }
    if ((rc = tx_end(b, tb, 1)) != 0 || (rc = get(a, 0, 11, &v)) != 0 || v != 222) {
        snprintf(why, sizeof why, "after both: key 11 = %d (want 222), rc %d", v, rc);
        bad(what, why);
        return;
    }
    ok(what);
}

/* t_implicit_wait: an implicit (no transaction) put of a key a transaction
 * holds waits for it and then applies, wherever the key's primary is: on
 * the node b talks to (a local lock wait) or on another one (the owner
 * answers "wait", b's node parks the put and runs it again when the owner
 * releases the lock). */
static void t_implicit_wait(sx_conn *a, sx_conn *b)
{
    const char *what = "an implicit put of a key a PESSIMISTIC transaction holds waits for the "
                       "commit and applies (keys on every node)";
    char why[256], e[256];
    for (int32_t k = 21; k <= 26; k++) {
        int32_t ta, v;
        int rc = tx_start(a, PES, RR, 0, &ta);
        if (!rc)
            rc = put(a, ta, k, 1);
        if (rc) {
            snprintf(why, sizeof why, "key %d: setup %d %s", k, rc, err_text(a, e, sizeof e));
            bad(what, why);
            return;
        }
        put_msg(b, 0, k, 2);
        if (sx_write_all(b->fd, b->out.p, b->out.len, g_call_ms)) {
            bad(what, "send");
            return;
        }
        /* let b's put reach the lock (it waits there; arriving after the
         * commit it would just apply) */
        struct timespec ts = { 0, 100 * 1000000L };
        nanosleep(&ts, NULL);
        if ((rc = tx_end(a, ta, 1)) != 0) {
            snprintf(why, sizeof why, "key %d: a's commit: %d %s", k, rc, err_text(a, e, sizeof e));
            bad(what, why);
            return;
        }
        sx_reply r;
        if (sx_read_frame(b->fd, &b->in, g_call_ms, 1 << 20) ||
            sx_parse_reply(b->in.p, b->in.len, 1, &r) || r.status) {
            snprintf(why, sizeof why, "key %d: b's put failed: %s", k, err_text(b, e, sizeof e));
            bad(what, why);
            return;
        }
        if (get(a, 0, k, &v) || v != 2) {
            snprintf(why, sizeof why, "key %d = %d after both (want 2: b's put last)", k, v);
            bad(what, why);
            return;
        }
    }
    ok(what);
}

/* pick_keys: n int keys from 40 up whose primaries are n different nodes
 * (CACHE_PARTITIONS and the key's partition, as a client with partition
 * awareness finds them).  0, or -1. */
static int pick_keys(sx_conn *c, int32_t *k, int n)
{
    static uint64_t own[4096][2];
    static uint8_t have[4096];
    int32_t maxp;
    if (sx_part_owners(c, sx_cache_id(g_cache), g_call_ms, own, have, 4096, &maxp) || maxp < 0)
        return -1;
    uint32_t parts = (uint32_t)maxp + 1;
    int got = 0;
    for (int32_t key = 40; key < 100000 && got < n; key++) {
        uint32_t p = bin_partition(key, parts);
        int dup = !have[p];
        for (int i = 0; i < got && !dup; i++) {
            uint32_t q = bin_partition(k[i], parts);
            dup = own[p][0] == own[q][0] && own[p][1] == own[q][1];
        }
        if (!dup)
            k[got++] = key;
    }
    return got == n ? 0 : -1;
}

/* t_deadlock: n PESSIMISTIC transactions without a timeout, through n
 * nodes, each locking a key whose primary is another node, then each
 * writing the next one's key: a cycle of waits no node sees whole.  One
 * must fail with "Deadlock detected" (the probe across nodes) and the
 * others finish, each committing once its write got through. */
static void t_deadlock(sx_conn *cs, int n)
{
    char what[160], why[256], e[256];
    snprintf(what, sizeof what, "PESSIMISTIC, no timeout: a cycle of lock waits across %d "
             "nodes fails one transaction (deadlock detected), the others commit", n);
    int32_t k[3], id[3];
    if (pick_keys(&cs[0], k, n)) {
        bad(what, "no keys with distinct primaries (CACHE_PARTITIONS)");
        return;
    }
    for (int i = 0; i < n; i++) {
        int rc = tx_start(&cs[i], PES, RR, 0, &id[i]);
        if (!rc)
            rc = put(&cs[i], id[i], k[i], 100 + i);
        if (rc) {
            snprintf(why, sizeof why, "setup %d: %d %s", i, rc, err_text(&cs[i], e, sizeof e));
            bad(what, why);
            return;
        }
    }
    for (int i = 0; i < n; i++) {
        put_msg(&cs[i], id[i], k[(i + 1) % n], 200 + i);
        if (sx_write_all(cs[i].fd, cs[i].out.p, cs[i].out.len, g_call_ms)) {
            bad(what, "send");
            return;
        }
    }
    /* answers as they come: a survivor commits at once (the next one in
     * the cycle waits for that) */
    int victim = -1, left = n, answered[3] = { 0, 0, 0 };
    while (left > 0) {
        struct pollfd pf[3];
        for (int i = 0; i < n; i++)
            pf[i] = (struct pollfd){ answered[i] ? -1 : cs[i].fd, POLLIN, 0 };
        if (poll(pf, (nfds_t)n, g_call_ms) <= 0) {
            bad(what, "no answer: the transactions still wait for each other");
            return;
        }
        for (int i = 0; i < n; i++) {
            if (answered[i] || !(pf[i].revents & (POLLIN | POLLHUP | POLLERR)))
                continue;
            sx_reply r;
            if (sx_read_frame(cs[i].fd, &cs[i].in, g_call_ms, 1 << 20) ||
                sx_parse_reply(cs[i].in.p, cs[i].in.len, 1, &r)) {
                bad(what, "connection lost");
                return;
            }
            answered[i] = 1;
            left--;
            if (r.status) {
                err_text(&cs[i], e, sizeof e);
                if (!strstr(e, "Deadlock detected") || victim >= 0) {
                    snprintf(why, sizeof why, "transaction %d failed: %s", i, e);
                    bad(what, why);
                    return;
                }
                victim = i;
                (void)tx_end(&cs[i], id[i], 0);
            } else if (tx_end(&cs[i], id[i], 1) != 0) {
                snprintf(why, sizeof why, "transaction %d's commit: %s", i,
                         err_text(&cs[i], e, sizeof e));
                bad(what, why);
                return;
            }
        }
    }
    if (victim < 0) {
        bad(what, "every transaction went through: there was no cycle");
        return;
    }
    /* each key: the previous transaction's second write, or, the previous
     * one rolled back, its own first write */
    for (int j = 0; j < n; j++) {
        int prev = (j + n - 1) % n;
        int32_t v, want = prev == victim ? 100 + j : 200 + prev;
        if (get(&cs[0], 0, k[j], &v) || v != want) {
            snprintf(why, sizeof why, "key %d = %d, want %d (victim %d)", k[j], v, want, victim);
            bad(what, why);
            return;
        }
    }
    ok(what);
}

static void t_timeout(sx_conn *a, sx_conn *b)
{
    const char *what = "PESSIMISTIC REPEATABLE_READ: a lock wait past the timeout fails and "
                       "rolls back; the holder commits";
    char why[256], e[256];
    int32_t ta, tb, v;
    int rc = tx_start(a, PES, RR, 0, &ta);
    if (!rc)
        rc = put(a, ta, 12, 121);
    if (!rc)
        rc = tx_start(b, PES, RR, 500, &tb);
    if (rc) {
        bad(what, "setup");
        return;
    }
    rc = put(b, tb, 12, 122);
    err_text(b, e, sizeof e);
    int trc = tx_end(b, tb, 1);
    if (rc <= 0 || !strstr(e, "timeout") || trc == 0) {
        snprintf(why, sizeof why, "b's put: rc %d \"%s\", b's commit rc %d", rc, e, trc);
        bad(what, why);
        tx_end(a, ta, 0);
        return;
    }
    if ((rc = tx_end(a, ta, 1)) != 0 || get(b, 0, 12, &v) || v != 121) {
        snprintf(why, sizeof why, "a's commit %d, key 12 = %d", rc, v);
        bad(what, why);
        return;
    }
    ok(what);
}

static void t_conflict(sx_conn *a, sx_conn *b)
{
    const char *what = "OPTIMISTIC SERIALIZABLE: a value read that changed fails the commit";
    char why[256], e[256];
    int32_t ta, v;
    int rc = put(b, 0, 13, 130);
    if (!rc)
        rc = tx_start(a, OPT, SER, 10000, &ta);
    if (!rc)
        rc = get(a, ta, 13, &v);
    if (!rc)
        rc = put(b, 0, 13, 131);
    if (!rc)
        rc = put(a, ta, 13, v + 100);
    if (rc) {
        bad(what, "setup");
        return;
    }
    rc = tx_end(a, ta, 1);
    err_text(a, e, sizeof e);
    if (rc <= 0 || !strstr(e, "conflict") || get(b, 0, 13, &v) || v != 131) {
        snprintf(why, sizeof why, "commit rc %d \"%s\", key 13 = %d", rc, e, v);
        bad(what, why);
        return;
    }
    ok(what);
}

static void t_disconnect(sx_conn *b)
{
    const char *what = "a transaction's locks on other nodes go when its client disconnects";
    char why[256], e[256];
    sx_conn a;
    int32_t ta, tb, v;
    if (open_node(&a, 0)) {
        bad(what, "connect");
        return;
    }
    int rc = tx_start(&a, PES, RR, 0, &ta);
    for (int i = 0; !rc && i < KEYS; i++)
        rc = put(&a, ta, i, 7000 + i);
    sx_close(&a);
    if (!rc)
        rc = tx_start(b, PES, RR, 20000, &tb);
    for (int i = 0; !rc && i < KEYS; i++)
        rc = put(b, tb, i, 8000 + i);
    if (!rc)
        rc = tx_end(b, tb, 1);
    if (rc) {
        snprintf(why, sizeof why, "rc %d: %s", rc, err_text(b, e, sizeof e));
        bad(what, why);
        return;
    }
    if (get(b, 0, 3, &v) || v != 8003)
        bad(what, "value");
    else
        ok(what);
}

static void t_batches(sx_conn *a)
{
    const char *what = "PUT_ALL and GET_ALL across primaries inside a transaction";
    char why[256], e[256];
    int32_t id, v[KEYS];
    int rc = tx_start(a, PES, RR, 10000, &id);
    if (!rc)
        rc = put_all(a, id, 0, KEYS, 500);
    if (!rc)
        rc = get_all(a, id, 0, KEYS, v);
    for (int i = 0; !rc && i < KEYS; i++)
        if (v[i] != 500 + i)
            rc = EM_INVAL;
    if (!rc)
        rc = tx_end(a, id, 1);
    if (rc) {
        snprintf(why, sizeof why, "rc %d: %s", rc, err_text(a, e, sizeof e));
        bad(what, why);
    } else if (same_everywhere(0, KEYS, 500, why, sizeof why)) {
        bad(what, why);
    } else {
        ok(what);
    }
}

/* t_opt_orders: two OPTIMISTIC transactions write the same keys in opposite
 * orders and commit at once: locks are taken in key order at prepare, so
 * neither deadlocks; both commit (REPEATABLE_READ), in some order. */
static void t_opt_orders(sx_conn *a, sx_conn *b)
{
    const char *what = "OPTIMISTIC REPEATABLE_READ: opposite write orders commit at once, no "
                       "deadlock";
    char why[256], e[256];
    int32_t ta, tb;
    int rc = tx_start(a, OPT, RR, 20000, &ta);
    if (!rc)
        rc = tx_start(b, OPT, RR, 20000, &tb);
    for (int i = 0; !rc && i < KEYS; i++)
        if ((rc = put(a, ta, i, 900 + i)) == 0)
            rc = put(b, tb, KEYS - 1 - i, 900 + KEYS - 1 - i);
    if (rc) {
        bad(what, "setup");
        return;
    }
    end_msg(a, ta, 1);
    end_msg(b, tb, 1);
    sx_reply ra, rb;
    int wa = sx_write_all(a->fd, a->out.p, a->out.len, g_call_ms);
    int wb = sx_write_all(b->fd, b->out.p, b->out.len, g_call_ms);
    int fa = wa ? wa : sx_read_frame(a->fd, &a->in, g_call_ms, 1 << 20);
    int fb = wb ? wb : sx_read_frame(b->fd, &b->in, g_call_ms, 1 << 20);
    if (fa || fb || sx_parse_reply(a->in.p, a->in.len, 1, &ra) ||
        sx_parse_reply(b->in.p, b->in.len, 1, &rb) || ra.status || rb.status) {
        snprintf(why, sizeof why, "commits: %d/%d \"%s\"", fa ? fa : ra.status,
                 fb ? fb : rb.status, err_text(ra.status ? a : b, e, sizeof e));
        bad(what, why);
        return;
    }
    if (same_everywhere(0, KEYS, 900, why, sizeof why))
        bad(what, why);
    else
        ok(what);
}

/* t_nontx: CLEAR, CLEAR_KEY, CLEAR_KEYS and REMOVE_ALL inside a transaction
 * fail with Ignite's message and touch nothing on any node; the
 * transaction stays open and commits what it wrote. */
static void t_nontx(sx_conn *a)
{
    const char *what = "CLEAR, CLEAR_KEY, CLEAR_KEYS, REMOVE_ALL in a transaction: refused "
                       "as Ignite does, nothing cleared anywhere";
    static const int ops[] = { 1013, 1014, 1015, 1019 };
    char why[256], e[256];
    int32_t id;
    int rc = put_all(a, 0, 5000, KEYS, 5000);
    if (!rc)
        rc = tx_start(a, PES, RC, 10000, &id);
    if (!rc)
        rc = put_all(a, id, 5100, KEYS, 5100);
    for (size_t i = 0; !rc && i < sizeof ops / sizeof ops[0]; i++) {
        em_buf_reset(&a->out);
        size_t st = sx_req_begin(&a->out, (uint16_t)ops[i], a->rid++);
        hdr(&a->out, id);
        if (ops[i] == 1014) {
            sx_v_int(&a->out, 5000);
        } else if (ops[i] == 1015) {
            sx_put_i32(&a->out, 2);
            sx_v_int(&a->out, 5001);
            sx_v_int(&a->out, 5101);
        }
        sx_req_end(&a->out, st);
        sx_reply r;
        int st2 = call(a, &r);
        const char *want = ops[i] == 1019 ? "non-transactional IgniteCache removeAll operation"
                                          : "non-transactional IgniteCache clear operation";
        if (st2 != 1 || !strstr(err_text(a, e, sizeof e), want)) {
            snprintf(why, sizeof why, "op %d: status %d \"%s\"", ops[i], st2, e);
            bad(what, why);
            tx_end(a, id, 0);
            return;
        }
    }
    if (!rc)
        rc = tx_end(a, id, 1);
    if (rc) {
        snprintf(why, sizeof why, "rc %d: %s", rc, err_text(a, e, sizeof e));
        bad(what, why);
    } else if (same_everywhere(5000, KEYS, 5000, why, sizeof why) ||
               same_everywhere(5100, KEYS, 5100, why, sizeof why)) {
        bad(what, why);
    } else {
        ok(what);
    }
}

static int cmd_test(void)
{
    sx_conn a, b;
    if (open_node(&a, 0) || open_node(&b, g_nnodes > 1 ? 1 : 0)) {
        fprintf(stderr, "ember-txc: cannot connect\n");
        return 2;
    }
    int rc = create_cache(&a);
    if (rc) {
        fprintf(stderr, "ember-txc: cannot create cache %s: %d\n", g_cache, rc);
        return 2;
    }
    int32_t base = 100;
    for (int conc = 0; conc < 2; conc++)
        for (int iso = 0; iso < 3; iso++, base += 100)
            t_commit_rollback(&a, &b, conc, iso, base);
    t_wait(&a, &b, RR);
    t_wait(&a, &b, SER);
    t_implicit_wait(&a, &b);
    if (g_nnodes >= 2) {
        sx_conn cs[3];
        int n = g_nnodes >= 3 ? 3 : 2, opened = 0;
        while (opened < n && open_node(&cs[opened], opened) == 0)
            opened++;
        if (opened == n) {
            t_deadlock(cs, 2);
            t_deadlock(cs, n);
        } else {
            bad("deadlock across nodes", "cannot connect");
        }
        for (int i = 0; i < opened; i++)
            sx_close(&cs[i]);
    }
    t_timeout(&a, &b);
    t_conflict(&a, &b);
    t_disconnect(&b);
    t_batches(&a);
    t_opt_orders(&a, &b);
    t_nontx(&a);
    sx_close(&a);
    sx_close(&b);
    printf("%d passed, %d failed\n", g_pass, g_fail);
    return g_fail ? 1 : 0;
}

/* ---- bank ------------------------------------------------------------------ */

#define BALANCE 100

/* any_order: every transfer PESSIMISTIC REPEATABLE_READ without a timeout,
 * locking its two accounts in the order it reads them (from, then to):
 * transfers in opposite directions deadlock, on one node or across nodes,
 * and only deadlock detection ends them. */
typedef struct bank_opts { int accounts, clients, check, any_order; double duration_s; } bank_opts;

typedef struct teller {
    const bank_opts *o;
    int      id, node, open;
    uint64_t rng;
    sx_conn  c;
    long     committed, failed, lost, reads, bad_reads;
    int32_t  bad_total;
    char     why[200];              /* the first failure's message */
} teller;

static atomic_int g_stop;

static int teller_open(teller *t)
{
    for (int tries = 0; !t->open && tries < g_nnodes; tries++) {
        if (open_node(&t->c, t->node) == 0)
            t->open = 1;
        else
            t->node++;
    }
    return t->open ? 0 : -1;
}

static void teller_drop(teller *t)
{
    if (t->open)
        sx_close(&t->c);
    t->open = 0;
    t->node++;
}

/* transfer: one transaction; 1 committed, 0 failed (rolled back), -1 the
 * connection was lost (outcome unknown). */
static int transfer(teller *t)
{
    sx_conn *c = &t->c;
    int n = t->o->accounts;
    int32_t from = (int32_t)(sx_rand(&t->rng) % (uint64_t)n);
    int32_t to = (int32_t)((from + 1 + sx_rand(&t->rng) % (uint64_t)(n - 1)) % (uint64_t)n);
    int32_t amt = (int32_t)(sx_rand(&t->rng) % 10) + 1;
    int any = t->o->any_order;
    int opt = !any && sx_rand(&t->rng) % 4 == 0;
    int32_t id, a, b;
    /* Locks in account order (PESSIMISTIC locks on read): two transfers
     * between the same accounts never wait for each other in a cycle -
     * unless any_order, where they do and nothing but deadlock detection
     * (no timeout) ends the cycle. */
    int first = any || from < to;
    int rc = tx_start(c, opt ? OPT : PES, opt ? SER : RR, any ? 0 : 5000, &id);
    if (!rc)
        rc = first ? get(c, id, from, &a) : get(c, id, to, &b);
    if (!rc)
        rc = first ? get(c, id, to, &b) : get(c, id, from, &a);
    if (!rc && (a == INT32_MIN || b == INT32_MIN))
        rc = EM_INVAL;
    if (!rc)
        rc = put(c, id, from, a - amt);
    if (!rc)
        rc = put(c, id, to, b + amt);
    if (!rc)
        rc = tx_end(c, id, 1);
    else if (rc > 0 && tx_end(c, id, 0) < 0)
        rc = -1;
    if (rc > 0 && !t->why[0])
        err_text(c, t->why, sizeof t->why);
    return rc < 0 ? -1 : rc == 0;
}

/* audit: every account in one OPTIMISTIC SERIALIZABLE transaction, which
 * commits only if nothing it read changed meanwhile: what it read is then
 * one consistent state, whose total must be the initial one.  (A
 * PESSIMISTIC read of all accounts would lock them node by node, an order
 * the transfers' key order crosses: deadlocks, ended by timeouts.) */
static int audit(teller *t)
{
    sx_conn *c = &t->c;
    int n = t->o->accounts;
    int32_t id, v[256];
    int rc = tx_start(c, OPT, SER, 5000, &id);
    if (!rc)
        rc = get_all(c, id, 0, n, v);
    if (!rc)
        rc = tx_end(c, id, 1);
    else if (rc > 0 && tx_end(c, id, 0) < 0)
        rc = -1;
    if (!rc) {
        int64_t sum = 0;
        for (int i = 0; i < n; i++)
            sum += v[i] == INT32_MIN ? 0 : v[i];
        t->reads++;
        if (sum != (int64_t)n * BALANCE) {
            t->bad_reads++;
            t->bad_total = (int32_t)sum;
        }
    }
    return rc < 0 ? -1 : 2;
}

static void *teller_main(void *arg)
{
    teller *t = arg;
    uint64_t end = (uint64_t)(sx_now_s() * 1e3 + t->o->duration_s * 1e3);
    while (!atomic_load(&g_stop) && (uint64_t)(sx_now_s() * 1e3) < end) {
        if (teller_open(t)) {
            usleep(50000);
            continue;
        }
        int r = sx_rand(&t->rng) % 5 == 0 ? audit(t) : transfer(t);
        if (r < 0) {
            t->lost++;
            teller_drop(t);
        } else if (r == 1) {
            t->committed++;
        } else if (r == 2) {
            /* an audit (counted in reads when it committed) */
        } else {
            t->failed += 1;
        }
    }
    return NULL;
}

/* bank_check: every node reads the same accounts, summing to the total. */
static int bank_check(const bank_opts *o)
{
    int32_t first[256], v[256];
    int bad_nodes = 0, seen = 0;
    for (int nd = 0; nd < g_nnodes; nd++) {
        sx_conn c;
        if (open_node(&c, nd)) {
            printf("bank-check: node %d not reachable (skipped)\n", nd + 1);
            continue;
        }
        int rc = get_all(&c, 0, 0, o->accounts, v);
        sx_close(&c);
        if (rc) {
            printf("bank-check: node %d: GET_ALL failed (%d)\n", nd + 1, rc);
            bad_nodes++;
            continue;
        }
        int64_t sum = 0;
        for (int i = 0; i < o->accounts; i++)
            sum += v[i] == INT32_MIN ? 0 : v[i];
        if (sum != (int64_t)o->accounts * BALANCE) {
            printf("bank-check: node %d reads a total of %lld (want %d)\n", nd + 1,
                   (long long)sum, o->accounts * BALANCE);
            bad_nodes++;
        }
        if (seen && memcmp(first, v, (size_t)o->accounts * sizeof v[0])) {
            printf("bank-check: node %d reads other balances than the first node\n", nd + 1);
            bad_nodes++;
        }
        if (!seen)
            memcpy(first, v, (size_t)o->accounts * sizeof v[0]);
        seen = 1;
    }
    if (!seen)
        bad_nodes++;
    printf("bank-check: %d accounts, %s\n", o->accounts, bad_nodes ? "VIOLATED" : "total kept");
    return bad_nodes ? 1 : 0;
}

static int cmd_bank(const bank_opts *o, int run)
{
    if (!run)
        return bank_check(o);
    sx_conn c;
    int rc = -1;
    for (int nd = 0; nd < g_nnodes && rc; nd++)
        if (open_node(&c, nd) == 0) {
            if ((rc = create_cache(&c)) == 0)
                rc = put_all(&c, 0, 0, o->accounts, 0);     /* values i: rewritten below */
            if (!rc) {
                int32_t id;
                rc = tx_start(&c, PES, RR, 10000, &id);
                for (int i = 0; !rc && i < o->accounts; i++)
                    rc = put(&c, id, i, BALANCE);
                if (!rc)
                    rc = tx_end(&c, id, 1);
            }
            sx_close(&c);
        }
    if (rc) {
        fprintf(stderr, "ember-txc: cannot set up the accounts (%d)\n", rc);
        return 2;
    }
    teller *ts = em_calloc((size_t)o->clients, sizeof *ts);
    pthread_t *th = em_calloc((size_t)o->clients, sizeof *th);
    if (!ts || !th)
        return 2;
    for (int i = 0; i < o->clients; i++) {
        ts[i] = (teller){ .o = o, .id = i, .node = i, .rng = 0x9e3779b97f4a7c15ull * (uint64_t)(i + 7) };
        pthread_create(&th[i], NULL, teller_main, &ts[i]);
    }
    long committed = 0, failed = 0, lost = 0, reads = 0, bad_reads = 0;
    int32_t bad_total = 0;
    for (int i = 0; i < o->clients; i++) {
        pthread_join(th[i], NULL);
        committed += ts[i].committed;
        failed += ts[i].failed;
        lost += ts[i].lost;
        reads += ts[i].reads;
        bad_reads += ts[i].bad_reads;
        if (ts[i].bad_reads)
            bad_total = ts[i].bad_total;
        if (ts[i].why[0] && i == 0)
            printf("bank: client 0's first failure: %s\n", ts[i].why);
        teller_drop(&ts[i]);
    }
    em_free(ts);
    em_free(th);
    printf("bank: %d clients, %d accounts: %ld transfers committed, %ld failed, %ld unknown "
           "(connection lost); %ld audits committed, %ld saw a wrong total%s\n", o->clients, o->accounts,
           committed, failed, lost, reads, bad_reads, bad_reads ? "" : " (0)");
    if (bad_reads)
        printf("bank: an audit read a total of %d (want %d)\n", bad_total,
               o->accounts * BALANCE);
    rc = o->check ? bank_check(o) : 0;
    if (o->any_order && lost)
        printf("bank: %ld transfers never ended (the client gave up on them): a deadlock "
               "nobody broke\n", lost);
    return bad_reads || rc || !committed || (o->any_order && lost) ? 1 : 0;
}

/* ---- bench ------------------------------------------------------------------ */

typedef struct bencher {
    int      id, plain;
    double   until_s;
    sx_conn  c;
    uint32_t *lat_us;
    size_t   n, cap;
    long     errors;
} bencher;

static void *bencher_main(void *arg)
{
    bencher *b = arg;
    int32_t k = 0;
    while (sx_now_s() < b->until_s) {
        double t0 = sx_now_s();
        int32_t key = b->id * 1000000 + (k++ % 1000), id;
        int rc;
        if (b->plain) {
            rc = put(&b->c, 0, key, k);
        } else {
            rc = tx_start(&b->c, PES, RR, 0, &id);
            if (!rc)
                rc = put(&b->c, id, key, k);
            if (!rc)
                rc = tx_end(&b->c, id, 1);
        }
        if (rc < 0)
            break;
        if (rc) {
            b->errors++;
            continue;
        }
        if (b->n == b->cap) {
            size_t cap = b->cap ? b->cap * 2 : 4096;
            uint32_t *l = realloc(b->lat_us, cap * sizeof *l);
            if (!l)
                break;
            b->lat_us = l;
            b->cap = cap;
        }
        b->lat_us[b->n++] = (uint32_t)((sx_now_s() - t0) * 1e6);
    }
    return NULL;
}

/* mem_all: allocations and bytes summed over every node (op 32000). */
static int mem_all(sx_conn *m, int64_t *allocs, int64_t *bytes)
{
    *allocs = *bytes = 0;
    for (int i = 0; i < g_nnodes; i++) {
        em_buf_reset(&m[i].out);
        size_t s = sx_req_begin(&m[i].out, 32000, m[i].rid++);
        sx_req_end(&m[i].out, s);
        sx_reply r;
        if (call(&m[i], &r) || r.n < 40)
            return -1;
        *allocs += (int64_t)em_ld64(r.p + r.n - 40);
        *bytes += (int64_t)em_ld64(r.p + r.n - 32);
    }
    return 0;
}

static int u32cmp(const void *a, const void *b)
{
    uint32_t x = *(const uint32_t *)a, y = *(const uint32_t *)b;
    return x < y ? -1 : x > y;
}

static int bench_round(int clients, int plain, double secs, long *ops, double *rate,
                       uint32_t *p50, uint32_t *p99, long *errors)
{
    bencher *bs = calloc((size_t)clients, sizeof *bs);
    pthread_t *th = calloc((size_t)clients, sizeof *th);
    if (!bs || !th)
        return -1;
    double until = sx_now_s() + secs;
    int rc = 0;
    for (int i = 0; i < clients && !rc; i++) {
        bs[i] = (bencher){ .id = i + 1, .plain = plain, .until_s = until };
        rc = open_node(&bs[i].c, 0);
    }
    double t0 = sx_now_s();
    for (int i = 0; i < clients && !rc; i++)
        pthread_create(&th[i], NULL, bencher_main, &bs[i]);
    size_t total = 0;
    *errors = 0;
    for (int i = 0; i < clients && !rc; i++) {
        pthread_join(th[i], NULL);
        total += bs[i].n;
        *errors += bs[i].errors;
    }
    double t1 = sx_now_s();
    uint32_t *all = malloc((total ? total : 1) * sizeof *all);
    size_t at = 0;
    for (int i = 0; i < clients; i++) {
        if (all && bs[i].n)
            memcpy(all + at, bs[i].lat_us, bs[i].n * sizeof *all);
        at += bs[i].n;
        free(bs[i].lat_us);
        sx_close(&bs[i].c);
    }
    if (all && total) {
        qsort(all, total, sizeof *all, u32cmp);
        *p50 = all[total / 2];
        *p99 = all[total * 99 / 100];
    }
    *ops = (long)total;
    *rate = total / (t1 - t0);
    free(all);
    free(bs);
    free(th);
    return rc || !all ? -1 : 0;
}

static int cmd_bench(const bank_opts *o, int plain)
{
    sx_conn c, m[MAX_NODES];
    if (open_node(&c, 0) || create_cache(&c)) {
        fprintf(stderr, "ember-txc: cannot create cache %s\n", g_cache);
        return 2;
    }
    sx_close(&c);
    for (int i = 0; i < g_nnodes; i++)
        if (open_node(&m[i], i)) {
            fprintf(stderr, "ember-txc: cannot connect to node %d\n", i + 1);
            return 2;
        }
    long ops, errors;
    double rate;
    uint32_t p50 = 0, p99 = 0;
    int64_t a0, b0, a1, b1;
    if (bench_round(o->clients, plain, o->duration_s, &ops, &rate, &p50, &p99, &errors) ||
        mem_all(m, &a0, &b0) ||
        bench_round(o->clients, plain, o->duration_s, &ops, &rate, &p50, &p99, &errors) ||
        mem_all(m, &a1, &b1) || !ops) {
        fprintf(stderr, "ember-txc: bench failed (no --debug-ops on a node?)\n");
        return 2;
    }
    printf("%s,%d,%ld,%.0f,%u,%u,%.3f,%.4f,%ld\n", plain ? "put" : "tx", o->clients, ops, rate,
           p50, p99, (double)(b1 - b0) / (double)ops, (double)(a1 - a0) / (double)ops, errors);
    for (int i = 0; i < g_nnodes; i++)
        sx_close(&m[i]);
    return 0;
}

/* next_key parses the key at k in a comma-separated list: the position
 * after it (past its comma), or NULL when k holds no integer key. */
static const char *next_key(const char *k, long *v)
{
    char *end;
    *v = strtol(k, &end, 10);
    if (end == k || (*end && *end != ','))
        return NULL;
    return *end ? end + 1 : end;
}

/* keys_ok: keys is a comma-separated list of integers. */
static int keys_ok(const char *keys)
{
    long v;
    for (const char *k = keys; k && *k;)
        if (!(k = next_key(k, &v)))
            return 0;
    return 1;
}

/* put_once runs one transaction putting value at every key in keys (checked
 * by keys_ok): 0 or the first failure's code (why holds a server's text). */
static int put_once(sx_conn *c, const char *keys, int32_t value, char *why, size_t cap)
{
    int32_t id = 0;
    long v;
    int rc = tx_start(c, 1, 1, 0, &id);
    for (const char *k = keys; !rc && *k;) {
        k = next_key(k, &v);
        rc = put(c, id, (int32_t)v, value);
    }
    if (!rc)
        rc = tx_end(c, id, 1);
    why[0] = 0;
    if (rc > 0)
        err_text(c, why, cap);
    return rc;
}

/* cmd_put, the `put` command (see the top): one transaction, run again (up to 5 times) when the server
 * rolled it back because the topology changed while it prepared - what
 * Ignite's clients are told to retry, and what a join under way causes. */
static int cmd_put(const char *keys, int32_t value)
{
    sx_conn c;
    char why[256];
    if (!keys_ok(keys)) {
        fprintf(stderr, "put: bad --keys '%s'\n", keys);
        return 2;
    }
    int rc = open_node(&c, 0);
    if (rc) {
        fprintf(stderr, "put: cannot connect: %s\n", em_strerror(rc));
        return 1;
    }
    if ((rc = create_cache(&c)) == 0)
        for (int attempt = 0;; attempt++) {
            rc = put_once(&c, keys, value, why, sizeof why);
            if (rc <= 0 || attempt == 4 || !strstr(why, "topology changed"))
                break;
            fprintf(stderr, "put: retried: %s\n", why);
        }
    if (rc)
        fprintf(stderr, "put: failed (%d): %s\n", rc, rc > 0 ? why : "");
    else
        printf("put: committed\n");
    sx_close(&c);
    return rc ? 1 : 0;
}

static void usage(void)
{
    fprintf(stderr, "usage: ember-txc test --nodes IP:PORT[,...] [--cache NAME]\n"
                    "       ember-txc bank|bank-check --nodes IP:PORT[,...] [--cache NAME]\n"
                    "         [--accounts N] [--clients N] [--duration SECONDS]\n"
                    "         [--check 0]  (bank: no final check; run bank-check later)\n"
                    "         [--any-order 1]  (bank: PESSIMISTIC, no timeout, accounts locked in\n"
                    "                          any order: only deadlock detection ends cycles)\n"
                    "         [--call-ms MS]  (a reply's bound, 30000)\n"
                    "       ember-txc put --nodes IP:PORT --cache NAME --keys K[,K...] --value V\n"
                    "       ember-txc bench --nodes IP:PORT[,...] [--cache NAME] [--backups N]\n"
                    "         [--clients N] [--duration SECONDS] [--plain 1]\n"
                    "         (prints: kind,clients,ops,ops/s,p50 us,p99 us,B/op,allocs/op,errors)\n");
}

int main(int argc, char **argv)
{
    if (argc < 2) {
        usage();
        return 2;
    }
    bank_opts o = { .accounts = 8, .clients = 6, .check = 1, .duration_s = 5 };
    int plain = 0;
    const char *keys = NULL;
    int32_t value = 0;
    for (int i = 2; i < argc; i += 2) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!v) { usage(); return 2; }
        if (!strcmp(a, "--nodes")) { if (parse_nodes(v)) { usage(); return 2; } }
        else if (!strcmp(a, "--cache")) g_cache = v;
        else if (!strcmp(a, "--accounts")) o.accounts = atoi(v);
        else if (!strcmp(a, "--clients")) o.clients = atoi(v);
        else if (!strcmp(a, "--duration")) o.duration_s = atof(v);
        else if (!strcmp(a, "--check")) o.check = atoi(v);
        else if (!strcmp(a, "--any-order")) o.any_order = atoi(v);
        else if (!strcmp(a, "--backups")) g_backups = atoi(v);
        else if (!strcmp(a, "--plain")) plain = atoi(v);
        else if (!strcmp(a, "--call-ms")) g_call_ms = atoi(v);
        else if (!strcmp(a, "--keys")) keys = v;
        else if (!strcmp(a, "--value")) value = atoi(v);
        else { usage(); return 2; }
    }
    if (!g_nnodes || o.accounts < 2 || o.accounts > 256 || o.clients < 1 ||
        o.clients > MAX_CLIENTS) {
        usage();
        return 2;
    }
    if (!strcmp(argv[1], "test"))
        return cmd_test();
    if (!strcmp(argv[1], "bank"))
        return cmd_bank(&o, 1);
    if (!strcmp(argv[1], "bank-check"))
        return cmd_bank(&o, 0);
    if (!strcmp(argv[1], "put") && keys)
        return cmd_put(keys, value);
    if (!strcmp(argv[1], "bench"))
        return cmd_bench(&o, plain);
    usage();
    return 2;
}
