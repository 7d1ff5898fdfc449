/* test_concurrency.c - many clients on several emberd worker threads at
 * once: atomic compare-and-set (REPLACE_IF_EQUALS), single winners of
 * PUT_IF_ABSENT, no lost GET_AND_PUT values, and scans while writers run.
 * Ops: shared/reference/ignite-thin-protocol.md §2.3, §2.5.
 */
#include "client.h"
#include "test.h"

#include "util/err.h"

#include <pthread.h>
#include <string.h>

enum { THREADS = 8 };

struct worker {
    int port, idx, iters;
    int ok, errors, wins;
    int64_t sum;
};

static int call_bool(tc_conn *c, em_buf *b, int *out)
{
    tc_reply r;
    int rc = tc_call(c, b, &r);
    if (rc)
        return rc;
    if (r.status || r.n != 1)
        return EM_PROTO;
    *out = r.p[0] != 0;
    return 0;
}

/* get_long: value of int key k as a long (type 4), or -1 if absent. */
static int get_long(tc_conn *c, em_buf *b, const char *cache, int32_t k, int64_t *v)
{
    tc_reply r;
    tc_req_begin(c, b, 1000);
    tc_cache_hdr(b, tc_cache_id(cache), 0);
    tc_v_int(b, k);
    tc_req_end(b);
    int rc = tc_call(c, b, &r);
    if (rc)
        return rc;
    if (r.status)
        return EM_PROTO;
    if (r.n == 1 && r.p[0] == 101) {
        *v = -1;
        return 0;
    }
    if (r.n != 9 || r.p[0] != 4)
        return EM_PROTO;
    *v = (int64_t)em_ld64(r.p + 1);
    return 0;
}

/* cas_worker: increments the shared counter iters times with a
 * read / REPLACE_IF_EQUALS(old, old+1) loop. */
static void *cas_worker(void *arg)
{
    struct worker *w = arg;
    tc_conn c;
    if (tc_open(&c, w->port)) {
        w->errors++;
        return NULL;
    }
    em_buf b = EM_BUF_INIT;
    for (int i = 0; i < w->iters; i++) {
        for (;;) {
            int64_t v;
            if (get_long(&c, &b, "cas", 0, &v)) {
                w->errors++;
                goto out;
            }
            tc_req_begin(&c, &b, 1010);
            tc_cache_hdr(&b, tc_cache_id("cas"), 0);
            tc_v_int(&b, 0);
            tc_v_long(&b, v);
            tc_v_long(&b, v + 1);
            tc_req_end(&b);
            int done;
            if (call_bool(&c, &b, &done)) {
                w->errors++;
                goto out;
            }
            if (done)
                break;
        }
        w->ok++;
    }
out:
    em_buf_free(&b);
    tc_close(&c);
    return NULL;
}

/* start_with_cache: emberd with 4 event loops, a connection, a cache. */
static int start_with_cache(tc_server *s, tc_conn *c, const char *cache)
{
    const char *args[] = {TC_FLAG_THREADS, "4", NULL};
    int rc = tc_server_start(s, args);
    if (!rc)
        rc = tc_open(c, s->port);
    if (!rc)
        rc = tc_create_cache(c, cache);
    return rc;
}

TEST(conc_replace_if_equals_is_atomic)
{
    tc_server s;
    tc_conn c;
    REQUIRE_OK(start_with_cache(&s, &c, "cas"));
    em_buf b = EM_BUF_INIT;
    tc_reply r;
    tc_req_begin(&c, &b, 1001);
    tc_cache_hdr(&b, tc_cache_id("cas"), 0);
    tc_v_int(&b, 0);
    tc_v_long(&b, 0);
    tc_req_end(&b);
    REQUIRE_OK(tc_call(&c, &b, &r));
    struct worker w[THREADS];
    pthread_t th[THREADS];
    for (int i = 0; i < THREADS; i++) {
        w[i] = (struct worker){.port = s.port, .idx = i, .iters = 300};
        REQUIRE(pthread_create(&th[i], NULL, cas_worker, &w[i]) == 0);
    }
    int total = 0, errors = 0;
    for (int i = 0; i < THREADS; i++) {
        pthread_join(th[i], NULL);
        total += w[i].ok;
        errors += w[i].errors;
    }
    CHECK_EQ(errors, 0);
    CHECK_EQ(total, THREADS * 300);
    int64_t v;
    REQUIRE_OK(get_long(&c, &b, "cas", 0, &v));
    CHECK_EQ(v, THREADS * 300);
    em_buf_free(&b);
    tc_close(&c);
    CHECK_EQ(tc_server_stop(&s), 0);
}

/* Every worker tries PUT_IF_ABSENT on the same 500 keys: exactly one wins
 * each key, and the stored value names the winner. */
static void *pia_worker(void *arg)
{
    struct worker *w = arg;
    tc_conn c;
    if (tc_open(&c, w->port)) {
        w->errors++;
        return NULL;
    }
    em_buf b = EM_BUF_INIT;
    for (int k = 0; k < w->iters; k++) {
        tc_req_begin(&c, &b, 1002);
        tc_cache_hdr(&b, tc_cache_id("pia"), 0);
        tc_v_int(&b, k);
        tc_v_long(&b, w->idx);
        tc_req_end(&b);
        int won;
        if (call_bool(&c, &b, &won)) {
            w->errors++;
            break;
        }
        if (won) {
            w->wins++;
            w->sum += (int64_t)k * 16 + w->idx;
        }
    }
    em_buf_free(&b);
    tc_close(&c);
    return NULL;
}

TEST(conc_put_if_absent_single_winner)
{
    tc_server s;
    tc_conn c;
    REQUIRE_OK(start_with_cache(&s, &c, "pia"));
    enum { KEYS = 500 };
    struct worker w[THREADS];
    pthread_t th[THREADS];
    for (int i = 0; i < THREADS; i++) {
        w[i] = (struct worker){.port = s.port, .idx = i, .iters = KEYS};
        REQUIRE(pthread_create(&th[i], NULL, pia_worker, &w[i]) == 0);
    }
    int wins = 0, errors = 0;
    int64_t sum = 0;
    for (int i = 0; i < THREADS; i++) {
        pthread_join(th[i], NULL);
        wins += w[i].wins;
        errors += w[i].errors;
        sum += w[i].sum;
    }
    CHECK_EQ(errors, 0);
    CHECK_EQ(wins, KEYS);
    /* the stored value of each key is its winner */
    em_buf b = EM_BUF_INIT;
    int64_t stored = 0;
    for (int k = 0; k < KEYS; k++) {
        int64_t v;
        REQUIRE_OK(get_long(&c, &b, "pia", k, &v));
        CHECK(v >= 0 && v < THREADS);
        stored += (int64_t)k * 16 + v;
    }
    CHECK_EQ(stored, sum);
    em_buf_free(&b);
    tc_close(&c);
    CHECK_EQ(tc_server_stop(&s), 0);
}

/* Writers overwrite their own keys while readers scan: every scan sees
 * each key exactly once (no duplicates, nothing missing). */
struct scanner {
    int port, rounds, errors, bad;
};

static void *writer(void *arg)
{
    struct worker *w = arg;
    tc_conn c;
    if (tc_open(&c, w->port)) {
        w->errors++;
        return NULL;
    }
    em_buf b = EM_BUF_INIT;
    tc_reply r;
    for (int i = 0; i < w->iters; i++) {
        tc_req_begin(&c, &b, 1001);
        tc_cache_hdr(&b, tc_cache_id("scanw"), 0);
        tc_v_int(&b, w->idx * 100 + i % 100);
        tc_v_long(&b, i);
        tc_req_end(&b);
        if (tc_call(&c, &b, &r) || r.status) {
            w->errors++;
            break;
        }
    }
    em_buf_free(&b);
    tc_close(&c);
    return NULL;
}

static void *scanner_main(void *arg)
{
    struct scanner *sc = arg;
    tc_conn c;
    if (tc_open(&c, sc->port)) {
        sc->errors++;
        return NULL;
    }
    em_buf b = EM_BUF_INIT;
    tc_reply r;
    uint8_t seen[400];
    for (int round = 0; round < sc->rounds; round++) {
        memset(seen, 0, sizeof seen);
        int64_t cur = 0;
        int more = 1, first = 1, rows_total = 0;
        while (more) {
            if (first) {
                tc_req_begin(&c, &b, 2000);
                tc_cache_hdr(&b, tc_cache_id("scanw"), 0);
                tc_v_null(&b);
                tc_put_i32(&b, 17);
                tc_put_i32(&b, -1);
                tc_put_u8(&b, 0);
            } else {
                tc_req_begin(&c, &b, 2001);
                tc_put_i64(&b, cur);
            }
            tc_req_end(&b);
            if (tc_call(&c, &b, &r) || r.status) {
                sc->errors++;
                goto out;
            }
            tc_rd d = tc_rd_of(&r);
            if (first)
                cur = tc_rd_i64(&d);
            first = 0;
            int32_t rows = tc_rd_i32(&d);
            for (int i = 0; i < rows && !d.err; i++) {
                tc_rd_u8(&d);
                int32_t k = tc_rd_i32(&d);
                tc_rd_u8(&d);
                tc_rd_i64(&d);
                if (k >= 0 && k < 400)
                    seen[k]++;
                else
                    sc->bad++;
            }
            more = tc_rd_u8(&d);
            rows_total += rows;
            if (d.err) {
                sc->errors++;
                goto out;
            }
        }
        for (int k = 0; k < 400; k++)
            if (seen[k] != 1)
                sc->bad++;
        (void)rows_total;
    }
out:
    em_buf_free(&b);
    tc_close(&c);
    return NULL;
}

TEST(conc_scan_while_overwriting)
{
    tc_server s;
    tc_conn c;
    REQUIRE_OK(start_with_cache(&s, &c, "scanw"));
    /* 4 writers x 100 keys, all present before scanning starts */
    struct worker w[4];
    pthread_t th[6];
    for (int i = 0; i < 4; i++) {
        w[i] = (struct worker){.port = s.port, .idx = i, .iters = 100};
        writer(&w[i]);
        CHECK_EQ(w[i].errors, 0);
        w[i].iters = 3000;
    }
    struct scanner sc[2] = {{s.port, 20, 0, 0}, {s.port, 20, 0, 0}};
    for (int i = 0; i < 4; i++)
        REQUIRE(pthread_create(&th[i], NULL, writer, &w[i]) == 0);
    for (int i = 0; i < 2; i++)
        REQUIRE(pthread_create(&th[4 + i], NULL, scanner_main, &sc[i]) == 0);
    for (int i = 0; i < 6; i++)
        pthread_join(th[i], NULL);
    for (int i = 0; i < 4; i++)
        CHECK_EQ(w[i].errors, 0);
    for (int i = 0; i < 2; i++) {
        CHECK_EQ(sc[i].errors, 0);
        CHECK_EQ(sc[i].bad, 0);
    }
    tc_close(&c);
    CHECK_EQ(tc_server_stop(&s), 0);
}
