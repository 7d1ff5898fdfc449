/* test_tx.c - thin-client transactions on one node over the wire (issue 17):
 * TX_START (4000) / TX_END (4001), cache ops with the transaction flag,
 * every concurrency x isolation pair: commit, rollback, read-your-writes,
 * isolation from other connections, a pessimistic transaction waiting for
 * another's lock (also with both connections on one event loop), timeouts,
 * optimistic transactions committing concurrently, optimistic serializable
 * conflicts, rollback when the connection closes, implicit operations
 * respecting locks, deadlock detection, one connection with two
 * transactions, a bank workload (transfers keep the total, in every read),
 * Ignite's limit (100 per connection) and status codes.
 * Layouts: shared/reference/ignite-thin-protocol.md §2.2, §2.7.
 */
#include "client.h"
#include "test.h"

#include "util/err.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define CACHE  "txc"
#define ACACHE "atomicc"

enum { OPT = 0, PES = 1 };
enum { RC = 0, RR = 1, SER = 2 };
static const char *const conc_s[] = { "OPTIMISTIC", "PESSIMISTIC" };
static const char *const iso_s[] = { "READ_COMMITTED", "REPEATABLE_READ", "SERIALIZABLE" };

static int start_server(tc_server *s, const char *threads)
{
    const char *args[] = { "--log-level", "error", TC_FLAG_THREADS, threads, NULL };
    return tc_server_start(s, args);
}

static int open_conn(tc_conn *c, int port)
{
    return tc_open_features(c, port, 0);
}

/* create: CACHE_CREATE_WITH_CONFIGURATION with atomicity mode (0
 * TRANSACTIONAL, 1 ATOMIC) and the name. */
static int create(tc_conn *c, const char *name, int atomicity)
{
    em_buf b = EM_BUF_INIT;
    tc_reply r;
    tc_req_begin(c, &b, 1053);
    size_t start = b.len;
    tc_put_i32(&b, 0);
    tc_put_i16(&b, 2);
    tc_put_i16(&b, 2);
    tc_put_i32(&b, atomicity);
    tc_put_i16(&b, 0);
    tc_v_str(&b, name);
    em_st32(b.p + start, (uint32_t)(b.len - start));
    tc_req_end(&b);
    int rc = tc_call(c, &b, &r);
    em_buf_free(&b);
    return rc ? rc : r.status;
}

/* tx_start: 0 and *id, or the status (reply in *r). */
static int tx_start(tc_conn *c, int conc, int iso, int64_t timeout, int32_t *id, tc_reply *r)
{
    em_buf b = EM_BUF_INIT;
    tc_req_begin(c, &b, 4000);
    tc_put_u8(&b, (uint8_t)conc);
    tc_put_u8(&b, (uint8_t)iso);
    tc_put_i64(&b, timeout);
    tc_v_str(&b, "test");
    tc_req_end(&b);
    int rc = tc_call(c, &b, r);
    em_buf_free(&b);
    if (rc)
        return rc;
    if (r->status)
        return r->status;
    tc_rd d = tc_rd_of(r);
    *id = tc_rd_i32(&d);
    return d.err ? EM_TRUNCATED : 0;
}

static void tx_end_msg(em_buf *b, tc_conn *c, int32_t id, int commit)
{
    tc_req_begin(c, b, 4001);
    tc_put_i32(b, id);
    tc_put_u8(b, (uint8_t)commit);
    tc_req_end(b);
}

static int tx_end(tc_conn *c, int32_t id, int commit, tc_reply *r)
{
    em_buf b = EM_BUF_INIT;
    tx_end_msg(&b, c, id, commit);
    int rc = tc_call(c, &b, r);
    em_buf_free(&b);
    return rc ? rc : r->status;
}

static void hdr(em_buf *b, const char *cache, int32_t tx)
{
    tc_cache_hdr(b, tc_cache_id(cache), tx ? 0x02 : 0);
    if (tx)
        tc_put_i32(b, tx);
}

static void put_msg(em_buf *b, tc_conn *c, const char *cache, int32_t tx, int32_t k, int32_t v)
{
    tc_req_begin(c, b, 1001);
    hdr(b, cache, tx);
    tc_v_int(b, k);
    tc_v_int(b, v);
    tc_req_end(b);
}

/* put: PUT k -> v (int values) in tx (0 = none); the status. */
static int put(tc_conn *c, const char *cache, int32_t tx, int32_t k, int32_t v, tc_reply *r)
{
    em_buf b = EM_BUF_INIT;
    put_msg(&b, c, cache, tx, k, v);
    int rc = tc_call(c, &b, r);
    em_buf_free(&b);
    return rc ? rc : r->status;
}

/* get: GET k in tx; *v = the int value or -1 if absent; the status. */
static int get(tc_conn *c, const char *cache, int32_t tx, int32_t k, int32_t *v, tc_reply *r)
{
    em_buf b = EM_BUF_INIT;
    tc_req_begin(c, &b, 1000);
    hdr(&b, cache, tx);
    tc_v_int(&b, k);
    tc_req_end(&b);
    int rc = tc_call(c, &b, r);
    em_buf_free(&b);
    if (rc || r->status)
        return rc ? rc : r->status;
    tc_rd d = tc_rd_of(r);
    uint8_t t = tc_rd_u8(&d);
    *v = t == 101 ? -1 : t == 3 ? tc_rd_i32(&d) : -2;
    return 0;
}

static int32_t get_now(tc_conn *c, int32_t k)
{
    tc_reply r;
    int32_t v = -3;
    if (get(c, CACHE, 0, k, &v, &r) != 0)
        return -3;
    return v;
}

/* remove_key: REMOVE_KEY (1016) in tx; *removed. */
static int remove_key(tc_conn *c, int32_t tx, int32_t k, int *removed, tc_reply *r)
{
    em_buf b = EM_BUF_INIT;
    tc_req_begin(c, &b, 1016);
    hdr(&b, CACHE, tx);
    tc_v_int(&b, k);
    tc_req_end(&b);
    int rc = tc_call(c, &b, r);
    em_buf_free(&b);
    if (rc || r->status)
        return rc ? rc : r->status;
    tc_rd d = tc_rd_of(r);
    *removed = tc_rd_u8(&d);
    return 0;
}

/* recv_reply: the reply to a request sent earlier, within ms. */
static int recv_reply(tc_conn *c, int ms, tc_reply *r)
{
    int rc = tc_recv_frame(c, ms);
    return rc ? rc : tc_parse_reply(c, r);
}

static int setup(tc_server *s, tc_conn *a, tc_conn *b, const char *threads)
{
    int rc = start_server(s, threads);
    if (rc)
        return rc;
    if ((rc = open_conn(a, s->port)) || (rc = open_conn(b, s->port)) ||
        (rc = create(a, CACHE, 0)) || (rc = create(a, ACACHE, 1)))
        return rc;
    return 0;
}

static void teardown(tc_server *s, tc_conn *a, tc_conn *b)
{
    tc_close(a);
    tc_close(b);
    CHECK_EQ(tc_server_stop(s), 0);
}

/* ---- commit, rollback, read-your-writes, isolation ---------------------- */

TEST(tx_commit_rollback_every_mode)
{
    tc_server s;
    tc_conn a, b;
    REQUIRE_OK(setup(&s, &a, &b, "2"));
    tc_reply r;
    int32_t k = 100;
    for (int conc = 0; conc < 2; conc++) {
        for (int iso = 0; iso < 3; iso++, k += 10) {
            int32_t id = 0, v = 0;
            REQUIRE_EQ(put(&a, CACHE, 0, k + 1, 1, &r), 0);
            /* commit: writes visible to the tx at once, to others after */
            REQUIRE_EQ(tx_start(&a, conc, iso, 0, &id, &r), 0);
            CHECK(id != 0);
            CHECK_EQ(put(&a, CACHE, id, k, 7, &r), 0);
            CHECK_EQ(get(&a, CACHE, id, k, &v, &r), 0);
            CHECK_EQ(v, 7);                         /* read your own write */
            int removed = 0;
            CHECK_EQ(remove_key(&a, id, k + 1, &removed, &r), 0);
            CHECK_EQ(removed, 1);
            CHECK_EQ(get(&a, CACHE, id, k + 1, &v, &r), 0);
            CHECK_EQ(v, -1);                        /* its own removal too */
            CHECK_EQ(get_now(&b, k), -1);           /* not visible outside yet */
            CHECK_EQ(get_now(&b, k + 1), 1);
            CHECK_EQ(tx_end(&a, id, 1, &r), 0);
            CHECK_EQ(get_now(&b, k), 7);
            CHECK_EQ(get_now(&b, k + 1), -1);
            /* rollback: nothing of it stays */
            REQUIRE_EQ(tx_start(&a, conc, iso, 0, &id, &r), 0);
            CHECK_EQ(put(&a, CACHE, id, k, 8, &r), 0);
            CHECK_EQ(put(&a, CACHE, id, k + 2, 9, &r), 0);
            CHECK_EQ(get(&a, CACHE, id, k, &v, &r), 0);
            CHECK_EQ(v, 8);
            CHECK_EQ(tx_end(&a, id, 0, &r), 0);
            CHECK_EQ(get_now(&b, k), 7);
            CHECK_EQ(get_now(&b, k + 2), -1);
            /* the id is gone after TX_END */
            CHECK_EQ(put(&a, CACHE, id, k, 8, &r), 1021);
            if (test_failed())
                fprintf(stderr, "  failed in %s %s\n", conc_s[conc], iso_s[iso]);
        }
    }
    teardown(&s, &a, &b);
}

/* Compound ops inside a transaction see the transaction's own writes. */
TEST(tx_compound_ops_read_own_writes)
{
    tc_server s;
    tc_conn a, b;
    REQUIRE_OK(setup(&s, &a, &b, "2"));
    tc_reply r;
    int32_t id = 0;
    for (int conc = 0; conc < 2; conc++) {
        REQUIRE_EQ(tx_start(&a, conc, RR, 0, &id, &r), 0);
        /* PUT_IF_ABSENT on a key the tx wrote: false; REPLACE: true */
        CHECK_EQ(put(&a, CACHE, id, 500 + conc, 1, &r), 0);
        em_buf m = EM_BUF_INIT;
        tc_req_begin(&a, &m, 1002);
        hdr(&m, CACHE, id);
        tc_v_int(&m, 500 + conc);
        tc_v_int(&m, 2);
        tc_req_end(&m);
        REQUIRE_OK(tc_call(&a, &m, &r));
        CHECK_EQ(r.status, 0);
        CHECK(r.n == 1 && r.p[0] == 0);
        tc_req_begin(&a, &m, 1009);
        hdr(&m, CACHE, id);
        tc_v_int(&m, 500 + conc);
        tc_v_int(&m, 3);
        tc_req_end(&m);
        REQUIRE_OK(tc_call(&a, &m, &r));
        CHECK(r.n == 1 && r.p[0] == 1);
        /* GET_AND_PUT returns the buffered 3 */
        tc_req_begin(&a, &m, 1005);
        hdr(&m, CACHE, id);
        tc_v_int(&m, 500 + conc);
        tc_v_int(&m, 4);
        tc_req_end(&m);
        REQUIRE_OK(tc_call(&a, &m, &r));
        CHECK(r.n == 5 && r.p[0] == 3 && em_ld32(r.p + 1) == 3);
        /* GET_ALL sees it as well */
        tc_req_begin(&a, &m, 1003);
        hdr(&m, CACHE, id);
        tc_put_i32(&m, 2);
        tc_v_int(&m, 500 + conc);
        tc_v_int(&m, 999);
        tc_req_end(&m);
        REQUIRE_OK(tc_call(&a, &m, &r));
        CHECK(r.n == 4 + 10 && em_ld32(r.p) == 1 && em_ld32(r.p + 10) == 4);
        em_buf_free(&m);
        CHECK_EQ(get_now(&b, 500 + conc), -1);
        CHECK_EQ(tx_end(&a, id, 1, &r), 0);
        CHECK_EQ(get_now(&b, 500 + conc), 4);
    }
    teardown(&s, &a, &b);
}

/* ---- status codes and limits ------------------------------------------ */

TEST(tx_errors_and_limit)
{
    tc_server s;
    tc_conn a, b;
    REQUIRE_OK(setup(&s, &a, &b, "2"));
    tc_reply r;
    int32_t id;
    /* an unknown id: 1021 for a cache op and a commit; a rollback is fine */
    CHECK_EQ(put(&a, CACHE, 12345, 1, 1, &r), 1021);
    CHECK(strcmp(r.msg, "Transaction with id 12345 not found.") == 0);
    CHECK_EQ(tx_end(&a, 12345, 1, &r), 1021);
    CHECK_EQ(tx_end(&a, 12345, 0, &r), 0);
    /* another connection's id is unknown here */
    REQUIRE_EQ(tx_start(&a, PES, RR, 0, &id, &r), 0);
    CHECK_EQ(put(&b, CACHE, id, 1, 1, &r), 1021);
    /* an ATOMIC cache refuses a transactional op */
    CHECK_EQ(put(&a, ACACHE, id, 1, 1, &r), 1);
    CHECK(strncmp(r.msg, "Transaction spans operations on atomic cache", 44) == 0);
    CHECK_EQ(tx_end(&a, id, 0, &r), 0);
    /* CLEAR, CLEAR_KEY, CLEAR_KEYS and REMOVE_ALL are refused inside one
     * with Ignite's message; the transaction goes on and commits */
    REQUIRE_EQ(put(&a, CACHE, 0, 78, 8, &r), 0);
    REQUIRE_EQ(tx_start(&a, PES, RR, 0, &id, &r), 0);
    CHECK_EQ(put(&a, CACHE, id, 77, 7, &r), 0);
    static const int nontx[] = { 1013, 1014, 1015, 1019 };
    for (int i = 0; i < 4; i++) {
        em_buf m = EM_BUF_INIT;
        tc_req_begin(&a, &m, nontx[i]);
        hdr(&m, CACHE, id);
        if (nontx[i] == 1014) {
            tc_v_int(&m, 78);
        } else if (nontx[i] == 1015) {
            tc_put_i32(&m, 1);
            tc_v_int(&m, 77);
        }
        tc_req_end(&m);
        CHECK_EQ(tc_call(&a, &m, &r), 0);
        CHECK_EQ(r.status, 1);
        CHECK(strcmp(r.msg, nontx[i] == 1019
                     ? "Failed to invoke a non-transactional IgniteCache removeAll operation "
                       "within a transaction."
                     : "Failed to invoke a non-transactional IgniteCache clear operation within "
                       "a transaction.") == 0);
        em_buf_free(&m);
    }
    CHECK_EQ(tx_end(&a, id, 1, &r), 0);
    CHECK_EQ(get_now(&b, 77), 7);
    CHECK_EQ(get_now(&b, 78), 8);
    /* bad concurrency / isolation */
    CHECK_EQ(tx_start(&a, 2, 0, 0, &id, &r), 1);
    CHECK_EQ(tx_start(&a, 0, 3, 0, &id, &r), 1);
    /* 100 per connection, then 1020; ending one makes room */
    int32_t ids[100];
    for (int i = 0; i < 100; i++)
        REQUIRE_EQ(tx_start(&a, i % 2, i % 3, 0, &ids[i], &r), 0);
    CHECK_EQ(tx_start(&a, OPT, RC, 0, &id, &r), 1020);
    CHECK(strncmp(r.msg, "Active transactions per connection limit (100) exceeded.", 56) == 0);
    CHECK_EQ(tx_start(&b, OPT, RC, 0, &id, &r), 0);    /* per connection */
    CHECK_EQ(tx_end(&a, ids[50], 1, &r), 0);
    CHECK_EQ(tx_start(&a, OPT, RC, 0, &id, &r), 0);
    for (int i = 0; i < 100; i++)
        if (i != 50)
            CHECK_EQ(tx_end(&a, ids[i], 0, &r), 0);
    teardown(&s, &a, &b);
}

/* ---- pessimistic waits -------------------------------------------------- */

/* b's pessimistic tx writes a key a's pessimistic tx locked: b's PUT waits
 * (no reply) until a commits, then both finish and b's value wins. */
static void pessimistic_wait(const char *threads)
{
    tc_server s;
    tc_conn a, b, c3;
    REQUIRE_OK(setup(&s, &a, &b, threads));
    REQUIRE_OK(open_conn(&c3, s.port));
    tc_reply r;
    for (int iso = 0; iso < 3; iso++) {
        int32_t k = 1000 + iso, ta, tb, v;
        REQUIRE_EQ(tx_start(&a, PES, iso, 0, &ta, &r), 0);
        REQUIRE_EQ(tx_start(&b, PES, iso, 0, &tb, &r), 0);
        CHECK_EQ(put(&a, CACHE, ta, k, 1, &r), 0);
        em_buf m = EM_BUF_INIT;
        put_msg(&m, &b, CACHE, tb, k, 2);
        REQUIRE_OK(tc_send(&b, m.p, m.len));
        /* b is parked: no reply while a holds the lock... */
        CHECK_EQ(tc_recv_frame(&b, 300), EM_TIMEOUT);
        /* ...and the loop still serves everyone else (one loop: a, b and c3
         * share it), a's tx included */
        CHECK_EQ(get_now(&c3, k), -1);
        CHECK_EQ(get(&a, CACHE, ta, k, &v, &r), 0);
        CHECK_EQ(v, 1);
        CHECK_EQ(tx_end(&a, ta, 1, &r), 0);
        REQUIRE_OK(recv_reply(&b, 10000, &r));
        CHECK_EQ(r.status, 0);
        CHECK_EQ(get(&b, CACHE, tb, k, &v, &r), 0);
        CHECK_EQ(v, 2);
        CHECK_EQ(tx_end(&b, tb, 1, &r), 0);
        CHECK_EQ(get_now(&c3, k), 2);
        em_buf_free(&m);
    }
    /* reads lock under REPEATABLE_READ and SERIALIZABLE, not READ_COMMITTED */
    for (int iso = 0; iso < 3; iso++) {
        int32_t k = 1100 + iso, ta, v;
        REQUIRE_EQ(tx_start(&a, PES, iso, 0, &ta, &r), 0);
        CHECK_EQ(get(&a, CACHE, ta, k, &v, &r), 0);
        em_buf m = EM_BUF_INIT;
        put_msg(&m, &b, CACHE, 0, k, 5);   /* an implicit write */
        REQUIRE_OK(tc_send(&b, m.p, m.len));
        if (iso == RC) {
            REQUIRE_OK(recv_reply(&b, 10000, &r));
        } else {
            CHECK_EQ(tc_recv_frame(&b, 300), EM_TIMEOUT);
            CHECK_EQ(get(&a, CACHE, ta, k, &v, &r), 0);
            CHECK_EQ(v, -1);                    /* repeatable */
            CHECK_EQ(tx_end(&a, ta, 0, &r), 0);
            REQUIRE_OK(recv_reply(&b, 10000, &r));
        }
        CHECK_EQ(r.status, 0);
        if (iso == RC)
            CHECK_EQ(tx_end(&a, ta, 1, &r), 0);
        CHECK_EQ(get_now(&c3, k), 5);
        em_buf_free(&m);
    }
    tc_close(&c3);
    teardown(&s, &a, &b);
}

TEST(tx_pessimistic_wait) { pessimistic_wait("2"); }
/* One worker loop: the waiting request must not block the connection that
 * holds the lock (it would never commit). */
TEST(tx_pessimistic_wait_one_loop) { pessimistic_wait("1"); }

/* ---- timeouts ----------------------------------------------------------- */

TEST(tx_timeout)
{
    tc_server s;
    tc_conn a, b;
    REQUIRE_OK(setup(&s, &a, &b, "1"));
    tc_reply r;
    int32_t ta, tb, v;
    for (int iso = 0; iso < 3; iso++) {
        int32_t k = 2000 + iso;
        /* a waiter with a timeout gives up: timeout error, rolled back */
        REQUIRE_EQ(tx_start(&a, PES, iso, 0, &ta, &r), 0);
        CHECK_EQ(put(&a, CACHE, ta, k, 1, &r), 0);
        REQUIRE_EQ(tx_start(&b, PES, iso, 400, &tb, &r), 0);
        CHECK_EQ(put(&b, CACHE, tb, k + 100, 9, &r), 0);
        int64_t t0 = tc_now_ms();
        CHECK_EQ(put(&b, CACHE, tb, k, 2, &r), 1);
        CHECK(strncmp(r.msg, "Failed to acquire lock within provided timeout for transaction "
                      "[timeout=400", 75) == 0);
        CHECK(tc_now_ms() - t0 >= 300);
        CHECK_EQ(tx_end(&b, tb, 1, &r), 1);    /* rolled back: commit fails */
        CHECK(strncmp(r.msg, "Cache transaction timed out", 27) == 0);
        CHECK_EQ(tx_end(&a, ta, 1, &r), 0);
        CHECK_EQ(get_now(&b, k), 1);
        CHECK_EQ(get_now(&b, k + 100), -1);     /* b's other write is gone */
        /* a holder that times out loses its locks: an untimed waiter gets
         * the key once the holder's time is up; the holder cannot commit */
        REQUIRE_EQ(tx_start(&a, PES, iso, 300, &ta, &r), 0);
        CHECK_EQ(put(&a, CACHE, ta, k, 3, &r), 0);
        REQUIRE_EQ(tx_start(&b, PES, iso, 0, &tb, &r), 0);
        CHECK_EQ(put(&b, CACHE, tb, k, 4, &r), 0);   /* waits ~300 ms */
        CHECK_EQ(tx_end(&b, tb, 1, &r), 0);
        CHECK_EQ(tx_end(&a, ta, 1, &r), 1);
        CHECK(strncmp(r.msg, "Cache transaction timed out", 27) == 0);
        CHECK_EQ(get_now(&b, k), 4);
        /* an optimistic commit waiting for a lock times out too (SERIALIZABLE
         * does not wait: tx_optimistic_serializable_no_wait) */
        if (iso != SER) {
            REQUIRE_EQ(tx_start(&a, PES, RR, 0, &ta, &r), 0);
            CHECK_EQ(put(&a, CACHE, ta, k, 6, &r), 0);
            REQUIRE_EQ(tx_start(&b, OPT, iso, 300, &tb, &r), 0);
            CHECK_EQ(put(&b, CACHE, tb, k + 200, 7, &r), 0);
            CHECK_EQ(put(&b, CACHE, tb, k, 7, &r), 0);
            CHECK_EQ(tx_end(&b, tb, 1, &r), 1);
            CHECK(strncmp(r.msg, "Cache transaction timed out", 27) == 0);
            CHECK_EQ(tx_end(&a, ta, 0, &r), 0);
            CHECK_EQ(get_now(&b, k + 200), -1);
            CHECK_EQ(get_now(&b, k), 4);
        }
        /* an operation after the timeout fails too (optimistic as well) */
        REQUIRE_EQ(tx_start(&a, OPT, iso, 100, &ta, &r), 0);
        CHECK_EQ(put(&a, CACHE, ta, k, 5, &r), 0);
        int64_t until = tc_now_ms() + 150;
        while (tc_now_ms() < until)
            tc_sleep_ms(10);
        CHECK_EQ(get(&a, CACHE, ta, k, &v, &r), 1);
        CHECK_EQ(tx_end(&a, ta, 1, &r), 1);
        CHECK_EQ(get_now(&b, k), 4);
    }
    teardown(&s, &a, &b);
}

/* Two pessimistic transactions lock two keys in opposite orders: a
 * deadlock.  The one whose wait closes the cycle fails at once with the
 * deadlock error and is rolled back, the other gets the lock and commits -
 * without any timeout set. */
TEST(tx_deadlock_detected)
{
    tc_server s;
    tc_conn a, b;
    REQUIRE_OK(setup(&s, &a, &b, "1"));
    tc_reply r;
    for (int iso = RR; iso <= SER; iso++) {
        int32_t ta, tb, k = 3000 + iso * 10;
        REQUIRE_EQ(tx_start(&a, PES, iso, 0, &ta, &r), 0);
        REQUIRE_EQ(tx_start(&b, PES, iso, 0, &tb, &r), 0);
        CHECK_EQ(put(&a, CACHE, ta, k, 1, &r), 0);
        CHECK_EQ(put(&b, CACHE, tb, k + 1, 2, &r), 0);
        em_buf ma = EM_BUF_INIT;
        put_msg(&ma, &a, CACHE, ta, k + 1, 1);
        REQUIRE_OK(tc_send(&a, ma.p, ma.len));
        CHECK_EQ(tc_recv_frame(&a, 200), EM_TIMEOUT);  /* a waits for b */
        int32_t v;
        CHECK_EQ(get(&b, CACHE, tb, k, &v, &r), 1);     /* b would wait for a */
        CHECK(strncmp(r.msg, "Deadlock detected", 17) == 0);
        REQUIRE_OK(recv_reply(&a, 10000, &r));          /* b rolled back: a goes on */
        CHECK_EQ(r.status, 0);
        CHECK_EQ(tx_end(&a, ta, 1, &r), 0);
        CHECK_EQ(tx_end(&b, tb, 1, &r), 1);             /* b is over */
        CHECK(strncmp(r.msg, "Transaction has been rolled back (deadlock detected)", 52) == 0);
        CHECK_EQ(get_now(&a, k), 1);
        CHECK_EQ(get_now(&a, k + 1), 1);
        em_buf_free(&ma);
    }
    teardown(&s, &a, &b);
}

/* Three transactions in a cycle of waits (a -> b -> c -> a): the last
 * wait is refused; timeouts still bound waits that are not deadlocks. */
TEST(tx_deadlock_cycle_of_three)
{
    tc_server s;
    tc_conn a, b, c;
    REQUIRE_OK(setup(&s, &a, &b, "2"));
    REQUIRE_OK(open_conn(&c, s.port));
    tc_reply r;
    int32_t ta, tb, tc_, v;
    REQUIRE_EQ(tx_start(&a, PES, RR, 0, &ta, &r), 0);
    REQUIRE_EQ(tx_start(&b, PES, RR, 0, &tb, &r), 0);
    REQUIRE_EQ(tx_start(&c, PES, RR, 0, &tc_, &r), 0);
    CHECK_EQ(put(&a, CACHE, ta, 3100, 1, &r), 0);
    CHECK_EQ(put(&b, CACHE, tb, 3101, 2, &r), 0);
    CHECK_EQ(put(&c, CACHE, tc_, 3102, 3, &r), 0);
    em_buf ma = EM_BUF_INIT, mb = EM_BUF_INIT;
    put_msg(&ma, &a, CACHE, ta, 3101, 1);
    REQUIRE_OK(tc_send(&a, ma.p, ma.len));
    CHECK_EQ(tc_recv_frame(&a, 200), EM_TIMEOUT);
    put_msg(&mb, &b, CACHE, tb, 3102, 2);
    REQUIRE_OK(tc_send(&b, mb.p, mb.len));
    CHECK_EQ(tc_recv_frame(&b, 200), EM_TIMEOUT);
    CHECK_EQ(get(&c, CACHE, tc_, 3100, &v, &r), 1);
    CHECK(strncmp(r.msg, "Deadlock detected", 17) == 0);
    REQUIRE_OK(recv_reply(&b, 10000, &r));              /* c let go of 3102 */
    CHECK_EQ(r.status, 0);
    CHECK_EQ(tx_end(&b, tb, 1, &r), 0);
    REQUIRE_OK(recv_reply(&a, 10000, &r));
    CHECK_EQ(r.status, 0);
    CHECK_EQ(tx_end(&a, ta, 1, &r), 0);
    CHECK_EQ(get_now(&c, 3101), 1);
    CHECK_EQ(get_now(&c, 3102), 2);
    em_buf_free(&ma);
    em_buf_free(&mb);
    tc_close(&c);
    teardown(&s, &a, &b);
}

/* ---- optimistic --------------------------------------------------------- */

TEST(tx_optimistic_concurrent)
{
    tc_server s;
    tc_conn a, b;
    REQUIRE_OK(setup(&s, &a, &b, "1"));
    tc_reply r, ra, rb;
    for (int iso = 0; iso < 3; iso++) {
        int32_t k = 4000 + iso * 10, ta, tb, v;
        /* writes in opposite orders, commits pipelined together: both
         * commit (locks are taken in key order at commit: no deadlock) */
        REQUIRE_EQ(tx_start(&a, OPT, iso, 5000, &ta, &r), 0);
        REQUIRE_EQ(tx_start(&b, OPT, iso, 5000, &tb, &r), 0);
        CHECK_EQ(put(&a, CACHE, ta, k, 1, &r), 0);
        CHECK_EQ(put(&a, CACHE, ta, k + 1, 1, &r), 0);
        CHECK_EQ(put(&b, CACHE, tb, k + 1, 2, &r), 0);
        CHECK_EQ(put(&b, CACHE, tb, k, 2, &r), 0);
        CHECK_EQ(get_now(&a, k), -1);           /* buffered until commit */
        em_buf ma = EM_BUF_INIT, mb = EM_BUF_INIT;
        tx_end_msg(&ma, &a, ta, 1);
        tx_end_msg(&mb, &b, tb, 1);
        REQUIRE_OK(tc_send(&a, ma.p, ma.len));
        REQUIRE_OK(tc_send(&b, mb.p, mb.len));
        REQUIRE_OK(recv_reply(&a, 10000, &ra));
        REQUIRE_OK(recv_reply(&b, 10000, &rb));
        CHECK_EQ(ra.status, 0);
        CHECK_EQ(rb.status, 0);
        int32_t x = get_now(&a, k), y = get_now(&a, k + 1);
        CHECK(x == y && (x == 1 || x == 2));    /* one whole, then the other */
        em_buf_free(&ma);
        em_buf_free(&mb);
        /* a read then changed by another commit */
        REQUIRE_EQ(tx_start(&a, OPT, iso, 0, &ta, &r), 0);
        CHECK_EQ(get(&a, CACHE, ta, k + 5, &v, &r), 0);
        CHECK_EQ(v, -1);
        CHECK_EQ(put(&b, CACHE, 0, k + 5, 7, &r), 0);
        CHECK_EQ(get(&a, CACHE, ta, k + 5, &v, &r), 0);
        CHECK_EQ(v, iso == RC ? 7 : -1);        /* RR/SER repeat the first read */
        CHECK_EQ(put(&a, CACHE, ta, k + 5, 8, &r), 0);
        int st = tx_end(&a, ta, 1, &r);
        if (iso == SER) {
            CHECK_EQ(st, 1);
            CHECK(strncmp(r.msg, "Failed to prepare transaction, read/write conflict "
                          "[key=", 56) == 0);
            CHECK_EQ(get_now(&b, k + 5), 7);
        } else {
            CHECK_EQ(st, 0);
            CHECK_EQ(get_now(&b, k + 5), 8);
        }
    }
    teardown(&s, &a, &b);
}

/* Optimistic serializable transactions never wait: a held lock fails the
 * commit with the optimistic error at once. */
TEST(tx_optimistic_serializable_no_wait)
{
    tc_server s;
    tc_conn a, b;
    REQUIRE_OK(setup(&s, &a, &b, "1"));
    tc_reply r;
    int32_t ta, tb;
    REQUIRE_EQ(tx_start(&a, PES, RR, 0, &ta, &r), 0);
    CHECK_EQ(put(&a, CACHE, ta, 4500, 1, &r), 0);
    REQUIRE_EQ(tx_start(&b, OPT, SER, 0, &tb, &r), 0);
    CHECK_EQ(put(&b, CACHE, tb, 4500, 2, &r), 0);
    CHECK_EQ(tx_end(&b, tb, 1, &r), 1);
    CHECK(strncmp(r.msg, "Failed to prepare transaction, read/write conflict", 50) == 0);
    /* an optimistic REPEATABLE_READ commit waits instead */
    REQUIRE_EQ(tx_start(&b, OPT, RR, 0, &tb, &r), 0);
    CHECK_EQ(put(&b, CACHE, tb, 4500, 3, &r), 0);
    em_buf m = EM_BUF_INIT;
    tx_end_msg(&m, &b, tb, 1);
    REQUIRE_OK(tc_send(&b, m.p, m.len));
    CHECK_EQ(tc_recv_frame(&b, 300), EM_TIMEOUT);
    CHECK_EQ(tx_end(&a, ta, 1, &r), 0);
    REQUIRE_OK(recv_reply(&b, 10000, &r));
    CHECK_EQ(r.status, 0);
    CHECK_EQ(get_now(&a, 4500), 3);
    em_buf_free(&m);
    teardown(&s, &a, &b);
}

/* ---- disconnects and implicit operations -------------------------------- */

TEST(tx_rollback_on_disconnect)
{
    tc_server s;
    tc_conn a, b;
    REQUIRE_OK(setup(&s, &a, &b, "1"));
    tc_reply r;
    for (int conc = 0; conc < 2; conc++) {
        for (int iso = 0; iso < 3; iso++) {
            int32_t k = 5000 + conc * 10 + iso, ta, tb;
            tc_conn x;
            REQUIRE_OK(open_conn(&x, s.port));
            REQUIRE_EQ(tx_start(&x, conc, iso, 0, &ta, &r), 0);
            CHECK_EQ(put(&x, CACHE, ta, k, 1, &r), 0);
            /* b waits for x's lock (pessimistic), or just goes (optimistic) */
            REQUIRE_EQ(tx_start(&b, PES, iso, 0, &tb, &r), 0);
            em_buf m = EM_BUF_INIT;
            put_msg(&m, &b, CACHE, tb, k, 2);
            REQUIRE_OK(tc_send(&b, m.p, m.len));
            if (conc == PES)
                CHECK_EQ(tc_recv_frame(&b, 200), EM_TIMEOUT);
            tc_close(&x);                       /* rolls x back, frees its lock */
            REQUIRE_OK(recv_reply(&b, 10000, &r));
            CHECK_EQ(r.status, 0);
            CHECK_EQ(tx_end(&b, tb, 1, &r), 0);
            CHECK_EQ(get_now(&a, k), 2);
            em_buf_free(&m);
        }
    }
    teardown(&s, &a, &b);
}

/* A plain PUT on a TRANSACTIONAL cache is a one-op transaction: it waits
 * for a pessimistic transaction's lock. */
TEST(tx_implicit_ops_respect_locks)
{
    tc_server s;
    tc_conn a, b;
    REQUIRE_OK(setup(&s, &a, &b, "2"));
    tc_reply r;
    int32_t ta, v;
    REQUIRE_EQ(tx_start(&a, PES, RC, 0, &ta, &r), 0);
    CHECK_EQ(put(&a, CACHE, ta, 6000, 1, &r), 0);
    em_buf m = EM_BUF_INIT;
    put_msg(&m, &b, CACHE, 0, 6000, 2);
    REQUIRE_OK(tc_send(&b, m.p, m.len));
    CHECK_EQ(tc_recv_frame(&b, 300), EM_TIMEOUT);
    CHECK_EQ(get(&a, CACHE, 0, 6000, &v, &r), 0);   /* reads do not wait */
    CHECK_EQ(v, -1);
    CHECK_EQ(tx_end(&a, ta, 1, &r), 0);
    REQUIRE_OK(recv_reply(&b, 10000, &r));
    CHECK_EQ(r.status, 0);
    CHECK_EQ(get_now(&a, 6000), 2);
    em_buf_free(&m);
    /* an ATOMIC cache takes no locks at all */
    CHECK_EQ(put(&a, ACACHE, 0, 1, 1, &r), 0);
    teardown(&s, &a, &b);
}

/* sql runs a statement (QUERY_SQL_FIELDS) and answers its status, or the
 * first column of its first row as an int in *v (INT or BIGINT). */
static int sql(tc_conn *c, const char *text, int64_t *v)
{
    em_buf b = EM_BUF_INIT;
    tc_reply r;
    tc_sql_fields_msg(c, &b, text, 100, 0);
    int rc = tc_call(c, &b, &r);
    em_buf_free(&b);
    if (rc || r.status)
        return rc ? rc : r.status;
    if (v) {
        tc_rd d = tc_rd_of(&r);
        tc_rd_i64(&d);
        int32_t nc = tc_rd_i32(&d), nr = tc_rd_i32(&d);
        uint8_t t = nc > 0 && nr > 0 ? tc_rd_u8(&d) : 0;
        *v = t == 3 ? tc_rd_i32(&d) : t == 4 ? tc_rd_i64(&d) : -100;
    }
    return 0;
}

/* SQL DML on a TRANSACTIONAL table takes the rows' entry locks as Ignite's
 * implicit transaction does: an UPDATE of a row a PESSIMISTIC transaction
 * holds waits for its commit and then applies (it would otherwise be
 * overwritten by the commit, or break the transaction's REPEATABLE_READ);
 * rows nobody holds are written at once. */
TEST(tx_sql_dml_waits_for_locks)
{
    tc_server s;
    tc_conn a, b;
    REQUIRE_OK(setup(&s, &a, &b, "2"));
    tc_reply r;
    int64_t n;
    REQUIRE_EQ(sql(&a, "CREATE TABLE tl (id INT PRIMARY KEY, v INT) WITH \"ATOMICITY=TRANSACTIONAL\"",
                   NULL), 0);
    REQUIRE_EQ(sql(&a, "INSERT INTO tl VALUES (1, 10), (2, 20)", NULL), 0);
    int32_t ta, v;
    REQUIRE_EQ(tx_start(&a, PES, RR, 0, &ta, &r), 0);
    CHECK_EQ(get(&a, "SQL_PUBLIC_TL", ta, 1, &v, &r), 0);    /* row 1 locked by the read */
    CHECK_EQ(sql(&b, "UPDATE tl SET v = 22 WHERE id = 2", &n), 0);   /* not held: at once */
    CHECK_EQ(n, 1);
    em_buf m = EM_BUF_INIT;
    tc_sql_fields_msg(&b, &m, "UPDATE tl SET v = 11 WHERE id = 1", 100, 0);
    REQUIRE_OK(tc_send(&b, m.p, m.len));
    CHECK_EQ(tc_recv_frame(&b, 300), EM_TIMEOUT);
    CHECK_EQ(sql(&a, "SELECT v FROM tl WHERE id = 1", &n), 0);  /* reads do not wait */
    CHECK_EQ(n, 10);
    CHECK_EQ(tx_end(&a, ta, 1, &r), 0);
    REQUIRE_OK(recv_reply(&b, 10000, &r));
    CHECK_EQ(r.status, 0);
    CHECK_EQ(sql(&a, "SELECT v FROM tl WHERE id = 1", &n), 0);
    CHECK_EQ(n, 11);
    em_buf_free(&m);
    teardown(&s, &a, &b);
}

/* One connection, two transactions (as a multi-threaded Java client runs
 * them): the second waits for the first's lock without holding up the
 * connection - the first commits on it meanwhile, replies come by request
 * id.  Requests of the waiting transaction stay in order behind it; a plain
 * PUT of the locked key on the same connection waits too, and does not
 * block the commit that frees it. */
TEST(tx_one_connection_two_transactions)
{
    tc_server s;
    tc_conn a, b;
    REQUIRE_OK(setup(&s, &a, &b, "1"));
    tc_reply r;
    int32_t t1, t2, v;
    REQUIRE_EQ(tx_start(&a, PES, RR, 0, &t1, &r), 0);
    REQUIRE_EQ(tx_start(&a, PES, RR, 0, &t2, &r), 0);
    CHECK_EQ(put(&a, CACHE, t1, 7000, 1, &r), 0);
    em_buf m = EM_BUF_INIT;
    put_msg(&m, &a, CACHE, t2, 7000, 2);        /* waits for t1 */
    int64_t rid_put = (int64_t)em_ld64(m.p + 6);
    REQUIRE_OK(tc_send(&a, m.p, m.len));
    tc_req_begin(&a, &m, 1000);                 /* t2's next request: after it */
    hdr(&m, CACHE, t2);
    tc_v_int(&m, 7000);
    tc_req_end(&m);
    int64_t rid_get = (int64_t)em_ld64(m.p + 6);
    REQUIRE_OK(tc_send(&a, m.p, m.len));
    put_msg(&m, &a, CACHE, 0, 7000, 3);         /* implicit: waits too */
    int64_t rid_imp = (int64_t)em_ld64(m.p + 6);
    REQUIRE_OK(tc_send(&a, m.p, m.len));
    CHECK_EQ(tc_recv_frame(&a, 300), EM_TIMEOUT);
    tx_end_msg(&m, &a, t1, 1);                  /* not held up by them */
    int64_t rid_end = (int64_t)em_ld64(m.p + 6);
    REQUIRE_OK(tc_send(&a, m.p, m.len));
    REQUIRE_OK(recv_reply(&a, 10000, &r));
    CHECK_EQ(r.rid, rid_end);
    CHECK_EQ(r.status, 0);
    REQUIRE_OK(recv_reply(&a, 10000, &r));
    CHECK_EQ(r.rid, rid_put);                   /* t2 got the lock */
    CHECK_EQ(r.status, 0);
    REQUIRE_OK(recv_reply(&a, 10000, &r));
    CHECK_EQ(r.rid, rid_get);                   /* in order, reading its write */
    CHECK(r.n == 5 && em_ld32(r.p + 1) == 2);
    CHECK_EQ(tc_recv_frame(&a, 200), EM_TIMEOUT);   /* the implicit PUT waits for t2 */
    CHECK_EQ(tx_end(&a, t2, 1, &r), 0);
    REQUIRE_OK(recv_reply(&a, 10000, &r));
    CHECK_EQ(r.rid, rid_imp);
    CHECK_EQ(r.status, 0);
    CHECK_EQ(get(&b, CACHE, 0, 7000, &v, &r), 0);
    CHECK_EQ(v, 3);
    em_buf_free(&m);
    teardown(&s, &a, &b);
}

/* ---- bank: transfers between accounts keep the total ------------------- */

#define ACCOUNTS 8
#define BANK_TOTAL (ACCOUNTS * 100)

typedef struct bank_arg {
    int port, idx, mode;            /* mode: 0 PESSIMISTIC RR, 1 OPTIMISTIC SER, 2 mixed */
    int done, retries, bad_sums, errors;
    char err[256];
} bank_arg;

/* one transfer (or, for readers, one read of every account in a
 * transaction); 0 committed, 1 refused by the server (retry), < 0 I/O */
static int bank_step(tc_conn *c, bank_arg *ba, unsigned *seed, int reader)
{
    tc_reply r;
    int32_t id, v1, v2;
    int pes = ba->mode == 0 || (ba->mode == 2 && (rand_r(seed) & 1));
    int rc = tx_start(c, pes ? PES : OPT, pes ? RR : SER, 2000, &id, &r);
    if (rc < 0)
        return rc;
    if (rc)
        return 1;
    if (reader) {
        int32_t sum = 0;
        for (int32_t k = 0; k < ACCOUNTS && !rc; k++) {
            rc = get(c, CACHE, id, 9000 + k, &v1, &r);
            sum += v1;
        }
        if (!rc && (rc = tx_end(c, id, 1, &r)) == 0 && sum != BANK_TOTAL)
            ba->bad_sums++;
    } else {
        int32_t from = (int32_t)(rand_r(seed) % ACCOUNTS), to = (int32_t)(rand_r(seed) % ACCOUNTS);
        if (to == from)
            to = (to + 1) % ACCOUNTS;
        int32_t amount = (int32_t)(rand_r(seed) % 10);
        if ((rc = get(c, CACHE, id, 9000 + from, &v1, &r)) == 0 &&
            (rc = get(c, CACHE, id, 9000 + to, &v2, &r)) == 0 &&
            (rc = put(c, CACHE, id, 9000 + from, v1 - amount, &r)) == 0 &&
            (rc = put(c, CACHE, id, 9000 + to, v2 + amount, &r)) == 0)
            rc = tx_end(c, id, 1, &r);
    }
    if (rc > 0) {
        tc_reply r2;
        tx_end(c, id, 0, &r2);          /* after a failure: gone or rolled back */
        if (!strstr(r.msg, "Deadlock detected") && !strstr(r.msg, "read/write conflict") &&
            !strstr(r.msg, "timeout") && !strstr(r.msg, "timed out")) {
            snprintf(ba->err, sizeof ba->err, "%s", r.msg);
            ba->errors++;
        }
        return 1;
    }
    return rc;
}

static void *bank_worker(void *p)
{
    bank_arg *ba = p;
    tc_conn c;
    if (open_conn(&c, ba->port)) {
        ba->errors++;
        return NULL;
    }
    unsigned seed = (unsigned)ba->idx * 7919u + 1;
    int64_t until = tc_now_ms() + 3000;
    while (tc_now_ms() < until && ba->errors == 0) {
        int rc = bank_step(&c, ba, &seed, ba->idx == 0);
        if (rc < 0) {
            ba->errors++;
            snprintf(ba->err, sizeof ba->err, "I/O %d", rc);
        } else if (rc) {
            ba->retries++;
        } else {
            ba->done++;
        }
    }
    tc_close(&c);
    return NULL;
}

static void bank(int mode)
{
    tc_server s;
    tc_conn a, b;
    REQUIRE_OK(setup(&s, &a, &b, "2"));
    tc_reply r;
    for (int32_t k = 0; k < ACCOUNTS; k++)
        REQUIRE_EQ(put(&a, CACHE, 0, 9000 + k, 100, &r), 0);
    enum { W = 6 };
    bank_arg args[W];
    pthread_t th[W];
    memset(args, 0, sizeof args);
    for (int i = 0; i < W; i++) {
        args[i].port = s.port;
        args[i].idx = i;
        args[i].mode = mode;
        REQUIRE(pthread_create(&th[i], NULL, bank_worker, &args[i]) == 0);
    }
    int done = 0, retries = 0;
    for (int i = 0; i < W; i++) {
        pthread_join(th[i], NULL);
        CHECK_EQ(args[i].errors, 0);
        if (args[i].errors)
            fprintf(stderr, "  worker %d: %s\n", i, args[i].err);
        CHECK_EQ(args[i].bad_sums, 0);
        done += args[i].done;
        retries += args[i].retries;
    }
    int32_t sum = 0;
    for (int32_t k = 0; k < ACCOUNTS; k++)
        sum += get_now(&a, 9000 + k);
    CHECK_EQ(sum, BANK_TOTAL);
    CHECK(args[0].done > 0);            /* the reader read consistent totals */
    CHECK(done > W);
    fprintf(stderr, "  bank mode %d: %d transactions committed, %d retried, %d reads\n", mode,
            done, retries, args[0].done);
    teardown(&s, &a, &b);
}

TEST(tx_bank_pessimistic) { bank(0); }
TEST(tx_bank_optimistic_serializable) { bank(1); }
TEST(tx_bank_mixed) { bank(2); }
