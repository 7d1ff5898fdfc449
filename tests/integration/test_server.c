/* test_server.c - emberd limits and process behaviour over real sockets:
 * scan cursor paging and the per-connection cursor cap, idle timeout and
 * heartbeats, max connections, message size and nesting limits, the config
 * file, authentication, and clean SIGTERM shutdown with clients attached.
 * Layouts: shared/reference/ignite-thin-protocol.md §1.3, §2.5, §6.
 */
#include "client.h"
#include "test.h"

#include "util/err.h"

#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

/* scan_rows reads a scan page's row count, (int key, string value) rows and
 * the more flag from d, counting keys in seen; EM_PROTO on a bad layout. */
static int scan_rows(tc_rd *d, int *rows, int *more, uint8_t *seen, int nkeys)
{
    *rows = tc_rd_i32(d);
    for (int i = 0; i < *rows && !d->err; i++) {
        if (tc_rd_u8(d) != 3)
            return EM_PROTO;
        int32_t k = tc_rd_i32(d);
        char v[32];
        tc_rd_str(d, v, sizeof v);
        if (seen && k >= 0 && k < nkeys)
            seen[k]++;
    }
    *more = tc_rd_u8(d);
    return d->err || d->pos != d->n ? EM_PROTO : 0;
}

/* scan_open: QUERY_SCAN with page size ps; fills cursor id, rows, more. */
static int scan_open(tc_conn *c, const char *cache, int ps, int64_t *cur, int *rows, int *more,
                     uint8_t *seen, int nkeys)
{
    em_buf b = EM_BUF_INIT;
    tc_reply r;
    tc_req_begin(c, &b, 2000);
    tc_cache_hdr(&b, tc_cache_id(cache), 0);
    tc_v_null(&b);
    tc_put_i32(&b, ps);
    tc_put_i32(&b, -1);
    tc_put_u8(&b, 0);
    tc_req_end(&b);
    int rc = tc_call(c, &b, &r);
    em_buf_free(&b);
    if (rc)
        return rc;
    if (r.status)
        return r.status;
    tc_rd d = tc_rd_of(&r);
    *cur = tc_rd_i64(&d);
    return scan_rows(&d, rows, more, seen, nkeys);
}

/* scan_page: QUERY_SCAN_CURSOR_GET_PAGE; rows + more, no cursor id. */
static int scan_page(tc_conn *c, int64_t cur, int *rows, int *more, uint8_t *seen, int nkeys)
{
    em_buf b = EM_BUF_INIT;
    tc_reply r;
    tc_req_begin(c, &b, 2001);
    tc_put_i64(&b, cur);
    tc_req_end(&b);
    int rc = tc_call(c, &b, &r);
    em_buf_free(&b);
    if (rc)
        return rc;
    if (r.status)
        return r.status;
    tc_rd d = tc_rd_of(&r);
    return scan_rows(&d, rows, more, seen, nkeys);
}

static int resource_close(tc_conn *c, int64_t id)
{
    em_buf b = EM_BUF_INIT;
    tc_reply r;
    tc_req_begin(c, &b, 0);
    tc_put_i64(&b, id);
    tc_req_end(&b);
    int rc = tc_call(c, &b, &r);
    em_buf_free(&b);
    return rc ? rc : r.status;
}

TEST(srv_scan_paging_layout_and_autoclose)
{
    tc_server s;
    REQUIRE_OK(tc_server_start(&s, NULL));
    tc_conn c;
    REQUIRE_OK(tc_open(&c, s.port));
    REQUIRE_OK(tc_create_cache(&c, "pages"));
    enum { N = 103 };
    for (int i = 0; i < N; i++)
        REQUIRE_OK(tc_put_int_str(&c, "pages", i, "v"));
    uint8_t seen[N] = {0};
    int64_t cur;
    int rows, more, total = 0, pages = 1;
    REQUIRE_OK(scan_open(&c, "pages", 10, &cur, &rows, &more, seen, N));
    CHECK_EQ(rows, 10);
    CHECK_EQ(more, 1);
    total += rows;
    while (more) {
        REQUIRE_OK(scan_page(&c, cur, &rows, &more, seen, N));
        CHECK(rows <= 10);
        total += rows;
        pages++;
        REQUIRE(pages < 100);
    }
    CHECK_EQ(total, N);
    CHECK_EQ(pages, 11);
    for (int i = 0; i < N; i++)
        if (seen[i] != 1)
            test_fail(__FILE__, __LINE__, "key %d seen %d times", i, seen[i]);
    /* closed by the server after the last page */
    CHECK_EQ(scan_page(&c, cur, &rows, &more, NULL, 0), 1011);
    CHECK_EQ(resource_close(&c, cur), 1011);
    /* a cursor closed early by the client */
    REQUIRE_OK(scan_open(&c, "pages", 5, &cur, &rows, &more, NULL, 0));
    CHECK_EQ(more, 1);
    CHECK_EQ(resource_close(&c, cur), 0);
    CHECK_EQ(scan_page(&c, cur, &rows, &more, NULL, 0), 1011);
    /* a page size covering everything: one page, more = false */
    REQUIRE_OK(scan_open(&c, "pages", 1000, &cur, &rows, &more, NULL, 0));
    CHECK_EQ(rows, N);
    CHECK_EQ(more, 0);
    /* cursors belong to their connection */
    REQUIRE_OK(scan_open(&c, "pages", 5, &cur, &rows, &more, NULL, 0));
    tc_conn o;
    REQUIRE_OK(tc_open(&o, s.port));
    CHECK_EQ(scan_page(&o, cur, &rows, &more, NULL, 0), 1011);
    tc_close(&o);
    tc_close(&c);
    CHECK_EQ(tc_server_stop(&s), 0);
}

TEST(srv_cursor_cap_128)
{
    tc_server s;
    REQUIRE_OK(tc_server_start(&s, NULL));
    tc_conn c;
    REQUIRE_OK(tc_open(&c, s.port));
    REQUIRE_OK(tc_create_cache(&c, "cur"));
    for (int i = 0; i < 5; i++)
        REQUIRE_OK(tc_put_int_str(&c, "cur", i, "v"));
    int64_t ids[128], cur;
    int rows, more;
    for (int i = 0; i < 128; i++) {
        REQUIRE_OK(scan_open(&c, "cur", 1, &ids[i], &rows, &more, NULL, 0));
        CHECK_EQ(more, 1);
    }
    CHECK_EQ(scan_open(&c, "cur", 1, &cur, &rows, &more, NULL, 0), 1010);
    /* another connection has its own budget */
    tc_conn o;
    REQUIRE_OK(tc_open(&o, s.port));
    CHECK_OK(scan_open(&o, "cur", 1, &cur, &rows, &more, NULL, 0));
    tc_close(&o);
    /* closing one frees a slot */
    CHECK_EQ(resource_close(&c, ids[17]), 0);
    CHECK_OK(scan_open(&c, "cur", 1, &cur, &rows, &more, NULL, 0));
    CHECK_EQ(scan_open(&c, "cur", 1, &cur, &rows, &more, NULL, 0), 1010);
    tc_close(&c);
    CHECK_EQ(tc_server_stop(&s), 0);
}

TEST(srv_idle_timeout_and_heartbeat)
{
    const char *args[] = {"--idle-timeout", "500", NULL};
    tc_server s;
    REQUIRE_OK(tc_server_start(&s, args));
    uint8_t f[2] = {0x00, 0x08};
    tc_conn idle, hb;
    REQUIRE_OK(tc_connect(&idle, s.port));
    REQUIRE_EQ(tc_handshake(&idle, 1, 7, 0, f, 2), 1);
    REQUIRE_OK(tc_connect(&hb, s.port));
    REQUIRE_EQ(tc_handshake(&hb, 1, 7, 0, f, 2), 1);
    em_buf b = EM_BUF_INIT;
    tc_reply r;
    tc_req_begin(&hb, &b, 2);
    tc_req_end(&b);
    REQUIRE_OK(tc_call(&hb, &b, &r));
    tc_rd d = tc_rd_of(&r);
    CHECK_EQ(tc_rd_i64(&d), 500);
    int64_t t0 = tc_now_ms();
    int idle_closed_at = -1;
    while (tc_now_ms() - t0 < 1500) {
        tc_req_begin(&hb, &b, 1);
        tc_req_end(&b);
        CHECK_OK(tc_call(&hb, &b, &r));
        if (idle_closed_at < 0 && tc_wait_closed(&idle, 150))
            idle_closed_at = (int)(tc_now_ms() - t0);
    }
    CHECK(idle_closed_at >= 400 && idle_closed_at <= 1300);
    /* the heartbeating connection is still served after 1.5 s */
    tc_req_begin(&hb, &b, 1050);
    tc_req_end(&b);
    CHECK_OK(tc_call(&hb, &b, &r));
    CHECK_EQ(r.flags & 1, 0);
    em_buf_free(&b);
    tc_close(&idle);
    tc_close(&hb);
    CHECK_EQ(tc_server_stop(&s), 0);
}

TEST(srv_max_connections)
{
    const char *args[] = {TC_FLAG_MAX_CONNS, "5", NULL};
    tc_server s;
    REQUIRE_OK(tc_server_start(&s, args));
    tc_sleep_ms(100);                       /* the start-up probe connection is gone */
    tc_conn cs[5], extra;
    for (int i = 0; i < 5; i++)
        REQUIRE_OK(tc_open(&cs[i], s.port));
    REQUIRE_OK(tc_connect(&extra, s.port));
    int64_t t0 = tc_now_ms();
    CHECK(tc_wait_closed(&extra, 1000));
    CHECK(tc_now_ms() - t0 < 1000);
    tc_close(&extra);
    /* the five keep working; freeing one admits a new client */
    for (int i = 0; i < 5; i++)
        CHECK_OK(tc_create_cache(&cs[i], "mc"));
    tc_close(&cs[0]);
    tc_sleep_ms(100);
    CHECK_OK(tc_sanity(s.port));
    for (int i = 1; i < 5; i++)
        tc_close(&cs[i]);
    CHECK_EQ(tc_server_stop(&s), 0);
}

TEST(srv_max_message_size_and_depth_flags)
{
    const char *args[] = {"--max-message-size", "4096", "--max-depth", "8", NULL};
    tc_server s;
    REQUIRE_OK(tc_server_start(&s, args));
    tc_conn c;
    REQUIRE_OK(tc_open(&c, s.port));
    REQUIRE_OK(tc_create_cache(&c, "lim"));
    em_buf b = EM_BUF_INIT;
    tc_reply r;
    /* 3000-byte value: fine */
    tc_req_begin(&c, &b, 1001);
    tc_cache_hdr(&b, tc_cache_id("lim"), 0);
    tc_v_int(&b, 1);
    tc_v_bytes(&b, 3000, 7);
    tc_req_end(&b);
    REQUIRE_OK(tc_call(&c, &b, &r));
    CHECK_EQ(r.status, 0);
    /* nesting 7 deep: fine; 9 deep: error */
    for (int depth = 7; depth <= 9; depth += 2) {
        tc_req_begin(&c, &b, 1001);
        tc_cache_hdr(&b, tc_cache_id("lim"), 0);
        tc_v_int(&b, 2);
        for (int i = 0; i < depth; i++) {
            tc_put_u8(&b, 24);
            tc_put_i32(&b, 1);
            tc_put_u8(&b, 1);
        }
        tc_v_int(&b, 0);
        tc_req_end(&b);
        int rc = tc_call(&c, &b, &r);
        if (depth == 7) {
            REQUIRE_OK(rc);
            CHECK_EQ(r.status, 0);
        } else {
            CHECK(rc == EM_CLOSED || (rc == 0 && r.status != 0));
        }
    }
    tc_close(&c);
    /* 5000-byte frame: closed */
    REQUIRE_OK(tc_open(&c, s.port));
    tc_req_begin(&c, &b, 1001);
    tc_cache_hdr(&b, tc_cache_id("lim"), 0);
    tc_v_int(&b, 1);
    tc_v_bytes(&b, 5000, 7);
    tc_req_end(&b);
    int rc = tc_call(&c, &b, &r);
    CHECK(rc == EM_CLOSED || (rc == 0 && r.status != 0));
    tc_close(&c);
    em_buf_free(&b);
    CHECK_OK(tc_sanity(s.port));
    CHECK_EQ(tc_server_stop(&s), 0);
}

TEST(srv_config_file)
{
    char path[] = "/tmp/ember-it-config-XXXXXX";
    int fd = mkstemp(path);
    REQUIRE(fd >= 0);
    const char *ini = "# test config\nhandshake_timeout = 300\nmax_cursors = 2\n";
    REQUIRE(write(fd, ini, strlen(ini)) == (ssize_t)strlen(ini));
    close(fd);
    const char *args[] = {"--config", path, NULL};
    tc_server s;
    int rc = tc_server_start(&s, args);
    unlink(path);
    REQUIRE_OK(rc);
    tc_conn c;
    REQUIRE_OK(tc_connect(&c, s.port));
    int64_t t0 = tc_now_ms();
    CHECK(tc_wait_closed(&c, 2000));
    int64_t dt = tc_now_ms() - t0;
    CHECK(dt >= 200 && dt <= 1300);
    tc_close(&c);
    REQUIRE_OK(tc_open(&c, s.port));
    REQUIRE_OK(tc_create_cache(&c, "cfgfile"));
    for (int i = 0; i < 3; i++)
        REQUIRE_OK(tc_put_int_str(&c, "cfgfile", i, "v"));
    int64_t cur;
    int rows, more;
    CHECK_OK(scan_open(&c, "cfgfile", 1, &cur, &rows, &more, NULL, 0));
    CHECK_OK(scan_open(&c, "cfgfile", 1, &cur, &rows, &more, NULL, 0));
    CHECK_EQ(scan_open(&c, "cfgfile", 1, &cur, &rows, &more, NULL, 0), 1010);
    tc_close(&c);
    CHECK_EQ(tc_server_stop(&s), 0);
}

/* handshake with user name and password (>= 1.1.0): typed strings after the
 * client code. */
static int auth_handshake(tc_conn *c, int minor, const char *user, const char *pass)
{
    em_buf m = EM_BUF_INIT;
    tc_put_i32(&m, 0);
    tc_put_u8(&m, 1);
    tc_put_i16(&m, 1);
    tc_put_i16(&m, (int16_t)minor);
    tc_put_i16(&m, 0);
    tc_put_u8(&m, 2);
    if (minor >= 7) {
        tc_put_u8(&m, 12);
        tc_put_i32(&m, 0);
    }
    if (user) {
        tc_v_str(&m, user);
        tc_v_str(&m, pass);
    }
    em_st32(m.p, (uint32_t)(m.len - 4));
    int rc = tc_send(c, m.p, m.len);
    em_buf_free(&m);
    if (rc)
        return rc;
    rc = tc_recv_frame(c, 2000);
    if (rc)
        return rc;
    return c->in.len >= 1 && c->in.p[0] == 1;
}

TEST(srv_authentication)
{
    const char *args[] = {"--username", "ignite", "--password", "secret", NULL};
    tc_server s;
    REQUIRE_OK(tc_server_start(&s, args));
    struct { const char *u, *p; int ok; } cases[] = {
        {NULL, NULL, 0}, {"ignite", "wrong", 0}, {"other", "secret", 0}, {"ignite", "secret", 1},
    };
    for (int minor = 2; minor <= 7; minor += 5) {
        for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
            tc_conn c;
            REQUIRE_OK(tc_connect(&c, s.port));
            int rc = auth_handshake(&c, minor, cases[i].u, cases[i].p);
            CHECK_EQ(rc, cases[i].ok);
            if (rc == 0) {
                /* failure: version 0.0.0, message, status 2000 */
                tc_rd d = {c.in.p, c.in.len, 0, 0};
                tc_rd_u8(&d);
                CHECK_EQ(tc_rd_i16(&d), 0);
                CHECK_EQ(tc_rd_i16(&d), 0);
                CHECK_EQ(tc_rd_i16(&d), 0);
                char msg[128];
                tc_rd_str(&d, msg, sizeof msg);
                CHECK_EQ(tc_rd_i32(&d), 2000);
                CHECK(!d.err);
                /* no cache op is accepted on it */
                em_buf b = EM_BUF_INIT;
                tc_req_begin(&c, &b, 1052);
                tc_v_str(&b, "unauth");
                tc_req_end(&b);
                if (tc_send(&c, b.p, b.len) == 0) {
                    int r2 = tc_recv_frame(&c, 1000);
                    CHECK(r2 == EM_CLOSED || (r2 == 0 && c.in.len >= 1 && c.in.p[0] == 0));
                }
                em_buf_free(&b);
            } else if (rc == 1) {
                c.ver = TC_VER(1, minor, 0);
                c.flags_hdr = minor >= 4;
                CHECK_OK(tc_create_cache(&c, "authed"));
            }
            tc_close(&c);
        }
    }
    CHECK_EQ(tc_server_stop(&s), 0);
}

/* SIGTERM with clients attached (idle, mid-frame, mid-cursor): exit 0 fast. */
TEST(srv_sigterm_with_open_connections)
{
    tc_server s;
    REQUIRE_OK(tc_server_start(&s, NULL));
    enum { N = 60 };
    tc_conn cs[N];
    for (int i = 0; i < N; i++) {
        REQUIRE_OK(tc_connect(&cs[i], s.port));
        if (i % 3 == 0)
            continue;                             /* never handshakes */
        REQUIRE_EQ(tc_handshake(&cs[i], 1, 2, 0, NULL, 0), 1);
        if (i % 3 == 1) {
            uint8_t part[] = {50, 0, 0, 0, 0xe9, 0x03, 1}; /* half a frame */
            CHECK_OK(tc_send(&cs[i], part, sizeof part));
        } else {
            CHECK_OK(tc_create_cache(&cs[i], "term"));
            CHECK_OK(tc_put_int_str(&cs[i], "term", i, "v"));
            int64_t cur;
            int rows, more;
            CHECK_OK(scan_open(&cs[i], "term", 1, &cur, &rows, &more, NULL, 0));
        }
    }
    int64_t t0 = tc_now_ms();
    CHECK_EQ(tc_server_stop(&s), 0);
    CHECK(tc_now_ms() - t0 < 3000);
    /* every client sees the close */
    int closed = 0;
    for (int i = 0; i < N; i++) {
        closed += tc_wait_closed(&cs[i], 500);
        tc_close(&cs[i]);
    }
    CHECK_EQ(closed, N);
}

/* SIGINT is a clean shutdown too. */
TEST(srv_sigint_clean_exit)
{
    tc_server s;
    REQUIRE_OK(tc_server_start(&s, NULL));
    CHECK_OK(tc_sanity(s.port));
    kill(s.pid, SIGINT);
    int st = 0;
    pid_t r = 0;
    for (int i = 0; i < 500 && (r = waitpid(s.pid, &st, WNOHANG)) == 0; i++)
        tc_sleep_ms(10);
    if (r == 0) {
        kill(s.pid, SIGKILL);
        waitpid(s.pid, &st, 0);
        test_fail(__FILE__, __LINE__, "emberd ignored SIGINT for 5 s");
    } else {
        CHECK(WIFEXITED(st) && WEXITSTATUS(st) == 0);
    }
    s.pid = -1;
}

/* --help prints usage and exits 0; an unknown flag exits non-zero. */
TEST(srv_help_and_bad_flag)
{
    char cmd[1200];
    snprintf(cmd, sizeof cmd, "%s --help >/dev/null 2>&1", tc_emberd_path());
    int st = system(cmd);
    CHECK(WIFEXITED(st) && WEXITSTATUS(st) == 0);
    snprintf(cmd, sizeof cmd, "%s --no-such-flag 1 >/dev/null 2>&1", tc_emberd_path());
    st = system(cmd);
    CHECK(WIFEXITED(st) && WEXITSTATUS(st) != 0);
}
