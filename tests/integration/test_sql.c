/* test_sql.c - SQL against a real emberd over the wire: a runaway query is
 * cut off by its timeout while another connection's key-value request is
 * answered afterwards, cursors left open by a client that disconnects are
 * freed (the server keeps serving), and DDL made on one connection is seen
 * by another.  Layouts: shared/reference/sql.md §1.1.
 */
#include "client.h"
#include "test.h"

#include "util/err.h"
#include "util/mem.h"

#include <stdlib.h>
#include <string.h>

#define START(s) tc_server s; REQUIRE_OK(tc_server_start(&s, NULL))
#define STOP(s) CHECK_EQ(tc_server_stop(&s), 0)

/* fields runs a QUERY_SQL_FIELDS request (tc_sql_fields_msg). */
static int fields(tc_conn *c, const char *sql, int32_t page, int64_t timeout_ms, tc_reply *r)
{
    em_buf b = EM_BUF_INIT;
    tc_sql_fields_msg(c, &b, sql, page, timeout_ms);
    int rc = tc_call(c, &b, r);
    em_buf_free(&b);
    return rc;
}

TEST(sql_wire_timeout_disconnect_and_ddl_between_connections)
{
    START(s);
    tc_conn a, b;
    REQUIRE_OK(tc_open(&a, s.port));
    REQUIRE_OK(tc_open(&b, s.port));
    tc_reply r;
    REQUIRE_OK(fields(&a, "CREATE TABLE w (id INT PRIMARY KEY, v VARCHAR)", 10, 0, &r));
    CHECK_EQ(r.status, 0);
    REQUIRE_OK(fields(&b, "INSERT INTO w VALUES (1, 'a'), (2, 'b'), (3, 'c')", 10, 0, &r));
    CHECK_EQ(r.status, 0);
    /* A query that never ends on its own is cancelled by its timeout. */
    REQUIRE_OK(fields(&a, "WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM c) "
                          "SELECT count(*) FROM c", 10, 100, &r));
    CHECK_EQ(r.status, 1);
    CHECK(strstr(r.msg, "The query was cancelled while executing.") != NULL);
    /* ... and the other connection is served. */
    REQUIRE_OK(tc_put_int_str(&b, "SQL_PUBLIC_W", 9, "not a row"));
    char v[32];
    CHECK_EQ(tc_get_int_str(&b, "SQL_PUBLIC_W", 9, v, sizeof v), 1);
    CHECK(!strcmp(v, "not a row"));
    /* Open cursors die with their connection. */
    for (int i = 0; i < 20; i++) {
        REQUIRE_OK(fields(&a, "SELECT id FROM w", 1, 0, &r));
        CHECK_EQ(r.status, 0);
    }
    tc_close(&a);
    REQUIRE_OK(fields(&b, "SELECT count(*) FROM w", 10, 0, &r));
    CHECK_EQ(r.status, 0);
    tc_rd d = tc_rd_of(&r);
    tc_rd_i64(&d);                  /* cursor id */
    CHECK_EQ(tc_rd_i32(&d), 1);     /* columns */
    CHECK_EQ(tc_rd_i32(&d), 1);     /* rows */
    CHECK_EQ(tc_rd_u8(&d), 4);      /* a long: the string value is not a row */
    CHECK_EQ(tc_rd_i64(&d), 3);
    CHECK(!d.err);
    tc_close(&b);
    CHECK_OK(tc_sanity(s.port));
    STOP(s);
}

/* SQL runs off the event loop (emberd's sql_threads): while one connection's
 * query runs (for 10 minutes, unless cancelled), other connections - on the
 * same loop: a 2-core machine runs one - are served; closing the connection
 * cancels its query (otherwise the next query would queue behind it on the
 * one SQL thread for those 10 minutes and the reads below time out); a
 * pipelined SQL query and GET on one connection are answered in order. */
TEST(sql_wire_slow_query_does_not_stall_other_connections)
{
    START(s);
    tc_conn a, b;
    REQUIRE_OK(tc_open(&a, s.port));
    REQUIRE_OK(tc_open(&b, s.port));
    em_buf m = EM_BUF_INIT;
    tc_sql_fields_msg(&a, &m, "WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM c) "
                       "SELECT count(*) FROM c", 10, 600000);
    REQUIRE_OK(tc_send(&a, m.p, m.len));
    REQUIRE_OK(tc_create_cache(&b, "side"));
    char v[32], want[32];
    for (int i = 0; i < 200; i++) {
        snprintf(want, sizeof want, "v%d", i);
        REQUIRE_OK(tc_put_int_str(&b, "side", i, want));
        CHECK_EQ(tc_get_int_str(&b, "side", i, v, sizeof v), 1);
        CHECK(!strcmp(v, want));
    }
    /* a's query still runs: no reply yet */
    CHECK_EQ(tc_recv_frame(&a, 0), EM_TIMEOUT);
    tc_close(&a);
    /* A new connection's SQL and a GET in one write: the query was
     * cancelled with its connection, so the one SQL thread is free. */
    tc_conn d;
    REQUIRE_OK(tc_open(&d, s.port));
    em_buf two = EM_BUF_INIT;
    tc_sql_fields_msg(&d, &m, "SELECT 41 + 1", 10, 0);
    int64_t rid_sql = (int64_t)em_ld64(m.p + 6);
    em_buf_append(&two, m.p, m.len);
    tc_req_begin(&d, &m, 1000);
    tc_cache_hdr(&m, tc_cache_id("side"), 0);
    tc_v_int(&m, 7);
    tc_req_end(&m);
    int64_t rid_get = (int64_t)em_ld64(m.p + 6);
    em_buf_append(&two, m.p, m.len);
    REQUIRE_OK(tc_send(&d, two.p, two.len));
    tc_reply r;
    REQUIRE_OK(tc_recv_frame(&d, 60000));
    REQUIRE_OK(tc_parse_reply(&d, &r));
    CHECK_EQ(r.rid, rid_sql);
    CHECK_EQ(r.status, 0);
    tc_rd q = tc_rd_of(&r);
    tc_rd_i64(&q);
    CHECK_EQ(tc_rd_i32(&q), 1);     /* columns */
    CHECK_EQ(tc_rd_i32(&q), 1);     /* rows */
    CHECK_EQ(tc_rd_u8(&q), 4);      /* long 42 */
    CHECK_EQ(tc_rd_i64(&q), 42);
    REQUIRE_OK(tc_recv_frame(&d, 60000));
    REQUIRE_OK(tc_parse_reply(&d, &r));
    CHECK_EQ(r.rid, rid_get);
    CHECK_EQ(r.status, 0);
    CHECK(r.n >= 1 && r.p[0] == 9);  /* the string "v7" */
    tc_close(&d);
    tc_close(&b);
    em_buf_free(&m);
    em_buf_free(&two);
    CHECK_OK(tc_sanity(s.port));
    STOP(s);
}

/* ---- DDL in a persistent region outlives the process ---------------------- */

/* text renders a fields reply's rows as "a,b|c,d" (ints, longs, strings,
 * null) into out; 0, or -1 on a failed or unreadable reply. */
static int text(const tc_reply *r, char *out, size_t cap)
{
    if (r->status)
        return -1;
    tc_rd d = tc_rd_of(r);
    tc_rd_i64(&d);
    int32_t nc = tc_rd_i32(&d), nr = tc_rd_i32(&d);
    size_t o = 0;
    out[0] = 0;
    for (int32_t i = 0; i < nr && !d.err; i++)
        for (int32_t j = 0; j < nc && !d.err; j++) {
            const char *sep = j ? "," : i ? "|" : "";
            uint8_t t = tc_rd_u8(&d);
            if (t == 3)
                o += (size_t)snprintf(out + o, cap - o, "%s%d", sep, tc_rd_i32(&d));
            else if (t == 4)
                o += (size_t)snprintf(out + o, cap - o, "%s%lld", sep, (long long)tc_rd_i64(&d));
            else if (t == 101)
                o += (size_t)snprintf(out + o, cap - o, "%snull", sep);
            else if (t == 9) {
                char s[64];
                d.pos--;
                tc_rd_str(&d, s, sizeof s);
                o += (size_t)snprintf(out + o, cap - o, "%s'%s'", sep, s);
            } else
                return -1;
        }
    return d.err ? -1 : 0;
}

static int ok(tc_conn *c, const char *sql)
{
    tc_reply r;
    int rc = fields(c, sql, 100, 0, &r);
    if (!rc && r.status)
        test_fail(__FILE__, __LINE__, "%s: %s", sql, r.msg);
    return rc ? rc : r.status;
}

static int query_is(tc_conn *c, const char *sql, const char *want)
{
    tc_reply r;
    char got[512];
    int rc = fields(c, sql, 100, 0, &r);
    if (rc || text(&r, got, sizeof got) || strcmp(got, want)) {
        test_fail(__FILE__, __LINE__, "%s: got [%s] (%s), want [%s]", sql, rc ? "" : got,
                  r.msg, want);
        return -1;
    }
    return 0;
}

static int start_persistent(tc_server *s, const char *dir)
{
    const char *args[] = { "--persistence", "true", "--wal-path", dir, "--wal-mode", "FSYNC",
                           "--log-level", "error", NULL };
    return tc_server_start(s, args);
}

/* CREATE TABLE, ALTER TABLE ADD COLUMN and CREATE INDEX, then kill -9:
 * the restarted server has the table with its added column (rows written
 * before and after the ALTER read back, each with its own schema), the
 * index (creating it again fails), and a DROP INDEX also outlives a kill. */
TEST(sql_wire_ddl_survives_kill9)
{
    char dir[64] = "/tmp/ember-sqlddl-XXXXXX";
    REQUIRE(mkdtemp(dir) != NULL);
    tc_server s;
    REQUIRE_OK(start_persistent(&s, dir));
    tc_conn a;
    REQUIRE_OK(tc_open(&a, s.port));
    CHECK_OK(ok(&a, "CREATE TABLE p (id INT PRIMARY KEY, name VARCHAR)"));
    CHECK_OK(ok(&a, "INSERT INTO p VALUES (1, 'a')"));
    CHECK_OK(ok(&a, "ALTER TABLE p ADD COLUMN age INT"));
    CHECK_OK(ok(&a, "INSERT INTO p VALUES (2, 'b', 30)"));
    CHECK_OK(ok(&a, "CREATE INDEX p_age ON p (age)"));
    tc_close(&a);
    tc_server_kill9(&s);

    REQUIRE_OK(start_persistent(&s, dir));
    REQUIRE_OK(tc_open(&a, s.port));
    query_is(&a, "SELECT id, name, age FROM p ORDER BY id", "1,'a',null|2,'b',30");
    query_is(&a, "SELECT id FROM p WHERE age > 10", "2");
    tc_reply r;
    REQUIRE_OK(fields(&a, "CREATE INDEX p_age ON p (name)", 10, 0, &r));
    CHECK_EQ(r.status, 1);
    CHECK(strstr(r.msg, "Index already exists: P_AGE") != NULL);
    CHECK_OK(ok(&a, "DROP INDEX p_age"));
    CHECK_OK(ok(&a, "INSERT INTO p VALUES (3, 'c', 40)"));
    tc_close(&a);
    tc_server_kill9(&s);

    REQUIRE_OK(start_persistent(&s, dir));
    REQUIRE_OK(tc_open(&a, s.port));
    CHECK_OK(ok(&a, "CREATE INDEX p_age ON p (age)"));     /* gone: made anew */
    query_is(&a, "SELECT id, age FROM p WHERE age >= 30 ORDER BY age", "2,30|3,40");
    tc_close(&a);
    STOP(s);
    tc_rm_dir(dir);
}

/* --sql-query-memory: a query past it fails with Ignite's quota error, the
 * connection and the server go on. */
TEST(sql_wire_query_memory_quota)
{
    const char *ex[] = {"--sql-query-memory", "4m", NULL};
    tc_server s;
    REQUIRE_OK(tc_server_start(&s, ex));
    tc_conn a;
    REQUIRE_OK(tc_open(&a, s.port));
    tc_reply r;
    REQUIRE_OK(fields(&a, "WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM c "
                          "WHERE x < 100000) SELECT count(*) FROM (SELECT DISTINCT x, "
                          "randomblob(200) FROM c)", 10, 0, &r));
    CHECK_EQ(r.status, 1);
    CHECK(strstr(r.msg, "Query quota was exceeded") != NULL);
    query_is(&a, "SELECT 6 * 7", "42");
    tc_close(&a);
    CHECK_OK(tc_sanity(s.port));
    STOP(s);
}
