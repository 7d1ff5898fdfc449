/* test_sqlrun.c - SQL requests on the SQL threads (proto_sqlrun.c): DML,
 * DDL and SELECTs over the inline budget are handed over - the feeding
 * call answers nothing for them and later frames of the connection wait;
 * the replies come from pr_conn_resume after the wake, in request order,
 * each after the commit hook ran on the SQL thread; a cheap SELECT is
 * answered at once; a connection freed while its query runs cancels the
 * query, and the SQL thread frees what it used.
 */
#include "test.h"
#include "proto_env.h"
#include "sql_env.h"

#include <pthread.h>
#include <sched.h>

#include "proto/proto_int.h"
#include "util/hash.h"

typedef struct waker {
    pthread_mutex_t mu;
    pthread_cond_t  cv;
    int             wakes, commits;
    pthread_t       commit_thread;
    int             commit_off_caller;
} waker;

static void wake(void *arg)
{
    waker *w = arg;
    pthread_mutex_lock(&w->mu);
    w->wakes++;
    pthread_cond_broadcast(&w->cv);
    pthread_mutex_unlock(&w->mu);
}

static pthread_t g_caller;

static int commit(void *arg)
{
    waker *w = arg;
    pthread_mutex_lock(&w->mu);
    w->commits++;
    if (!pthread_equal(pthread_self(), g_caller))
        w->commit_off_caller++;
    pthread_mutex_unlock(&w->mu);
    return 0;
}

static void waker_init(waker *w)
{
    memset(w, 0, sizeof *w);
    pthread_mutex_init(&w->mu, NULL);
    pthread_cond_init(&w->cv, NULL);
    g_caller = pthread_self();
}

/* drain resumes c after each wake until nothing of it waits. */
static int drain(pe_env *e, waker *w)
{
    while (pr_conn_parked(e->c)) {
        pthread_mutex_lock(&w->mu);
        int seen = w->wakes;
        pthread_mutex_unlock(&w->mu);
        int rc = pr_conn_resume(e->c, &e->out, SIZE_MAX / 2);
        if (rc)
            return rc;
        if (!pr_conn_parked(e->c))
            break;
        pthread_mutex_lock(&w->mu);
        while (w->wakes == seen)
            pthread_cond_wait(&w->cv, &w->mu);
        pthread_mutex_unlock(&w->mu);
    }
    return 0;
}

/* frame_fields appends a QUERY_SQL_FIELDS frame with request id rid. */
static void frame_fields(em_buf *b, int64_t rid, const char *sql, int64_t timeout_ms)
{
    size_t at = b->len;
    em_buf_put_le32(b, 0);
    em_buf_put_le16(b, 2004);
    em_buf_put_le64(b, (uint64_t)rid);
    em_buf_put_le32(b, 0);          /* cache id */
    em_buf_put_u8(b, 0);
    put_str(b, NULL);               /* schema */
    em_buf_put_le32(b, 100);        /* page */
    em_buf_put_le32(b, (uint32_t)-1);
    put_str(b, sql);
    em_buf_put_le32(b, 0);          /* no arguments */
    em_buf_put_u8(b, 0);
    for (int i = 0; i < 6; i++)
        em_buf_put_u8(b, 0);
    em_buf_put_le64(b, (uint64_t)timeout_ms);
    em_buf_put_u8(b, 0);
    em_st32(b->p + at, (uint32_t)(b->len - at - 4));
}

/* frame_get appends a CACHE_GET (1000) of int key k in cache name. */
static void frame_get(em_buf *b, int64_t rid, const char *cache, int32_t k)
{
    size_t at = b->len;
    em_buf_put_le32(b, 0);
    em_buf_put_le16(b, 1000);
    em_buf_put_le64(b, (uint64_t)rid);
    em_buf_put_le32(b, (uint32_t)em_hash_java_str((const uint8_t *)cache, strlen(cache)));
    em_buf_put_u8(b, 0);
    em_buf_put_u8(b, 3);            /* int */
    em_buf_put_le32(b, (uint32_t)k);
    em_st32(b->p + at, (uint32_t)(b->len - at - 4));
}

static void wait_taken(pr_server *ps)
{
    uint64_t ran, cancelled, queued = 1;
    while (queued) {
        pr_server_sql_stats(ps, &ran, &cancelled, &queued);
        sched_yield();
    }
}

TEST(sqlrun_replies_in_order_from_the_sql_thread)
{
    pe_env e;
    waker w;
    waker_init(&w);
    REQUIRE_OK(open_env(&e));
    REQUIRE_OK(pr_server_sql_start(e.ps, 1, commit, wake, &w));
    em_buf b = EM_BUF_INIT;
    frame_fields(&b, 1, "CREATE TABLE t (id INT PRIMARY KEY, v INT)", 0);
    frame_fields(&b, 2, "INSERT INTO t VALUES (7, 70)", 0);
    frame_get(&b, 3, "SQL_PUBLIC_T", 7);        /* not SQL: still waits its turn */
    frame_fields(&b, 4, "SELECT v FROM t WHERE id = 7", 0);     /* cheap: runs here */
    em_buf_reset(&e.out);
    size_t used = 0;
    REQUIRE_OK(pr_feed(e.c, b.p, b.len, &e.out, SIZE_MAX / 2, &used));
    CHECK_EQ(used, b.len);          /* every frame taken ... */
    CHECK_EQ(e.out.len, 0);         /* ... none answered by the feeding call */
    CHECK(pr_conn_parked(e.c));
    REQUIRE_OK(drain(&e, &w));
    /* Four replies, in request order, all successful. */
    size_t at = 0;
    for (int64_t rid = 1; rid <= 4; rid++) {
        REQUIRE(at + 16 <= e.out.len);
        uint32_t len = em_ld32(e.out.p + at);
        CHECK_EQ((int64_t)em_ld64(e.out.p + at + 4), rid);
        CHECK_EQ(em_ld32(e.out.p + at + 12), 0);
        if (rid == 3) {             /* the GET sees the row the INSERT wrote */
            REQUIRE(len >= 12 + 5);
            CHECK(e.out.p[at + 16] != 101);     /* a value, not null */
        }
        if (rid == 4) {             /* cursor, 1 column, 1 row: int 70 */
            const uint8_t *p = e.out.p + at + 16 + 8;
            CHECK_EQ(em_ld32(p), 1);
            CHECK_EQ(em_ld32(p + 4), 1);
            CHECK_EQ(p[8], 3);
            CHECK_EQ(em_ld32(p + 9), 70);
        }
        at += 4 + len;
    }
    CHECK_EQ(at, e.out.len);
    pthread_mutex_lock(&w.mu);
    CHECK_EQ(w.commits, 2);         /* once per request handed over: DDL, DML */
    CHECK_EQ(w.commit_off_caller, 2);
    pthread_mutex_unlock(&w.mu);
    uint64_t ran, cancelled, queued;
    pr_server_sql_stats(e.ps, &ran, &cancelled, &queued);
    CHECK_EQ(ran, 2);
    CHECK_EQ(cancelled, 0);
    CHECK_EQ(queued, 0);
    /* A cheap SELECT alone is answered by the feeding call itself; one
     * over the budget is handed over, and so is its next run at once. */
    em_buf_reset(&b);
    em_buf_reset(&e.out);
    frame_fields(&b, 5, "SELECT v FROM t WHERE id = 7", 0);
    REQUIRE_OK(pr_feed(e.c, b.p, b.len, &e.out, SIZE_MAX / 2, &used));
    CHECK(e.out.len > 0 && !pr_conn_parked(e.c));
    const char *slow = "WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM c "
                       "WHERE x < 200000) SELECT count(*) FROM c";
    for (int64_t rid = 6; rid <= 7; rid++) {
        em_buf_reset(&b);
        em_buf_reset(&e.out);
        frame_fields(&b, rid, slow, 0);
        REQUIRE_OK(pr_feed(e.c, b.p, b.len, &e.out, SIZE_MAX / 2, &used));
        CHECK_EQ(e.out.len, 0);
        CHECK(pr_conn_parked(e.c));
        REQUIRE_OK(drain(&e, &w));
        CHECK_EQ((int64_t)em_ld64(e.out.p + 4), rid);
        CHECK_EQ(em_ld32(e.out.p + 12), 0);
    }
    pr_server_sql_stats(e.ps, &ran, &cancelled, &queued);
    CHECK_EQ(ran, 4);
    int remembered = 0;             /* the second run went over at once */
    for (int i = 0; i < 16; i++)
        remembered += e.c->sql_slow[i] != 0;
    CHECK_EQ(remembered, 1);
    em_buf_free(&b);
    pe_close(&e);
}

/* A connection that goes away while its query runs: the query stops (it
 * would run 10 minutes), the SQL thread frees the connection, the pool
 * stops. */
TEST(sqlrun_free_while_running_cancels)
{
    pe_env e;
    waker w;
    waker_init(&w);
    REQUIRE_OK(open_env(&e));
    REQUIRE_OK(pr_server_sql_start(e.ps, 1, NULL, wake, &w));
    em_buf b = EM_BUF_INIT;
    frame_fields(&b, 1, "WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM c) "
                        "SELECT count(*) FROM c", 600000);
    frame_fields(&b, 2, "SELECT 1", 0);        /* waits behind it, never runs */
    size_t used = 0;
    em_buf_reset(&e.out);
    REQUIRE_OK(pr_feed(e.c, b.p, b.len, &e.out, SIZE_MAX / 2, &used));
    CHECK_EQ(e.out.len, 0);
    /* Wait until the SQL thread took the job (it runs then). */
    wait_taken(e.ps);
    pr_conn_free(e.c);
    e.c = NULL;
    pr_server_sql_stop(e.ps);       /* joins: returns once the query stopped */
    em_buf_free(&b);
    pe_close(&e);
    CHECK_EQ(w.wakes, 0);           /* nothing to deliver to a closed connection */
}

/* Two connections on one SQL thread: while the first one's query runs, the
 * second one's waits in the queue; the second connection going away takes
 * its job out (counted as cancelled, never run), the first's then too. */
TEST(sqlrun_queued_job_of_a_closed_connection_is_dropped)
{
    pe_env e;
    waker w;
    waker_init(&w);
    REQUIRE_OK(open_env(&e));
    REQUIRE_OK(pr_server_sql_start(e.ps, 1, NULL, wake, &w));
    pr_conn *c2 = pr_conn_new(e.ps);
    REQUIRE(c2 != NULL);
    uint8_t hs[12] = { 8, 0, 0, 0, 1, 1, 0, 2, 0, 0, 0, 2 };
    size_t used = 0;
    em_buf o2 = EM_BUF_INIT;
    REQUIRE_OK(pr_feed(c2, hs, sizeof hs, &o2, SIZE_MAX / 2, &used));
    em_buf_reset(&o2);
    em_buf b = EM_BUF_INIT;
    frame_fields(&b, 1, "WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM c) "
                        "SELECT count(*) FROM c", 600000);
    REQUIRE_OK(pr_feed(e.c, b.p, b.len, &e.out, SIZE_MAX / 2, &used));
    wait_taken(e.ps);
    em_buf_reset(&b);
    frame_fields(&b, 9, "WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x + 2 FROM c) "
                        "SELECT count(*) FROM c", 600000);      /* over the budget */
    REQUIRE_OK(pr_feed(c2, b.p, b.len, &o2, SIZE_MAX / 2, &used));
    CHECK_EQ(o2.len, 0);
    uint64_t ran, cancelled, queued;
    pr_server_sql_stats(e.ps, &ran, &cancelled, &queued);
    CHECK_EQ(queued, 1);
    pr_conn_free(c2);
    pr_server_sql_stats(e.ps, &ran, &cancelled, &queued);
    CHECK_EQ(ran, 0);
    CHECK_EQ(cancelled, 1);
    CHECK_EQ(queued, 0);
    pr_conn_free(e.c);              /* cancels the running one */
    e.c = NULL;
    pr_server_sql_stop(e.ps);
    em_buf_free(&b);
    em_buf_free(&o2);
    pe_close(&e);
    CHECK_EQ(w.wakes, 0);
}
