/* test_badinput.c - hostile input over real sockets (reliability.md §5.3):
 * bad lengths, garbage before the handshake, truncated frames, slow senders,
 * oversized declared counts, deep nesting, bad handles, forbidden type codes,
 * invalid UTF-8, thousands of idle connections.  Each case must get an error
 * reply or a close within 1 s while a well-behaved client on another
 * connection keeps getting correct answers and the server stays up.
 */
#include "client.h"
#include "test.h"

#include "util/err.h"
#include "util/mem.h"

#include <errno.h>
#include <poll.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

/* A well-behaved client holds one connection open for the whole test (opened
 * before any hostile input) and checks it after each attack, besides opening
 * fresh connections (tc_sanity). */
static tc_conn good = {.fd = -1};
static int good_n;

static int good_open(int port)
{
    int rc = tc_open(&good, port);
    return rc ? rc : tc_create_cache(&good, "good");
}

static int good_check(void)
{
    char want[32], got[32];
    snprintf(want, sizeof want, "good-%d", good_n);
    int rc = tc_put_int_str(&good, "good", good_n % 7, want);
    if (rc)
        return rc;
    int g = tc_get_int_str(&good, "good", good_n % 7, got, sizeof got);
    good_n++;
    if (g < 0)
        return g;
    return g == 1 && strcmp(got, want) == 0 ? 0 : EM_PROTO;
}

#define START(s) tc_server s; REQUIRE_OK(tc_server_start(&s, NULL)); REQUIRE_OK(good_open(s.port))
#define START_ARGS(s, args) tc_server s; REQUIRE_OK(tc_server_start(&s, args)); REQUIRE_OK(good_open(s.port))
#define STOP(s) do { tc_close(&good); CHECK_EQ(tc_server_stop(&s), 0); } while (0)

/* outcome of one hostile exchange */
enum { GOT_ERROR = 1, GOT_CLOSE = 2, GOT_SUCCESS = 3, GOT_NOTHING = 4, GOT_JUNK = 5 };

static const char *outcome_name(int o)
{
    switch (o) {
    case GOT_ERROR: return "error reply";
    case GOT_CLOSE: return "close";
    case GOT_SUCCESS: return "SUCCESS reply";
    case GOT_NOTHING: return "nothing within 1 s";
    default: return "unparsable reply";
    }
}

/* answer waits up to ms for the server's reaction on c. */
static int answer(tc_conn *c, int ms, int handshaken)
{
    int rc = tc_recv_frame(c, ms);
    if (rc == EM_CLOSED)
        return GOT_CLOSE;
    if (rc == EM_TIMEOUT)
        return GOT_NOTHING;
    if (rc)
        return GOT_JUNK;
    if (!handshaken)
        return c->in.len >= 1 && c->in.p[0] == 0 ? GOT_ERROR : GOT_SUCCESS;
    tc_reply r;
    if (tc_parse_reply(c, &r))
        return GOT_JUNK;
    return r.status ? GOT_ERROR : GOT_SUCCESS;
}

/* check_rejected: the reaction must be an error or a close; on a failure the
 * request bytes are printed so the report can name them. */
#define CHECK_REJECTED(o, what, bytes, n) do {                                  \
        int o_ = (o);                                                           \
        if (o_ != GOT_ERROR && o_ != GOT_CLOSE) {                               \
            char hx_[200];                                                      \
            test_fail(__FILE__, __LINE__, "%s: got %s; request starts %s", (what), \
                      outcome_name(o_), tc_hex((bytes), (n) < 64 ? (n) : 64, hx_, sizeof hx_)); \
        }                                                                       \
    } while (0)

/* server_ok: the server runs and serves a well-behaved client. */
#define CHECK_SERVER_OK(s) do {                                                 \
        CHECK(tc_server_alive(&(s)));                                           \
        CHECK_OK(good_check());                                                 \
        CHECK_OK(tc_sanity((s).port));                                          \
    } while (0)

/* send_raw_fresh: new connection, optional 1.2.0 handshake, raw bytes; returns
 * the outcome. */
static int send_raw_fresh(int port, int handshake, const void *p, size_t n)
{
    tc_conn c;
    if (tc_connect(&c, port))
        return GOT_JUNK;
    if (handshake && tc_handshake(&c, 1, 2, 0, NULL, 0) != 1) {
        tc_close(&c);
        return GOT_JUNK;
    }
    int o = tc_send(&c, p, n) ? GOT_CLOSE : answer(&c, 1000, handshake);
    tc_close(&c);
    return o;
}

/* ---- lengths ------------------------------------------------------------ */

TEST(bad_length_before_handshake)
{
    START(s);
    const uint32_t lens[] = {0xffffffffu, 0x80000000u, 0, 0x7fffffffu, 2u << 20 /* > 1 MiB cap */};
    for (size_t i = 0; i < sizeof lens / sizeof lens[0]; i++) {
        uint8_t m[12] = {0};
        em_st32(m, lens[i]);
        m[4] = 1; m[5] = 1; m[7] = 2;   /* the start of a 1.2.0 handshake */
        int o = send_raw_fresh(s.port, 0, m, sizeof m);
        CHECK_REJECTED(o, "length before handshake", m, sizeof m);
        CHECK_SERVER_OK(s);
    }
    STOP(s);
}

TEST(bad_length_after_handshake)
{
    START(s);
    const uint32_t lens[] = {0xffffffffu, 0x80000000u, 0, 0x7fffffffu, (64u << 20) + 1, 1, 9};
    for (size_t i = 0; i < sizeof lens / sizeof lens[0]; i++) {
        uint8_t m[14] = {0};
        em_st32(m, lens[i]);
        em_st16(m + 4, 1000);
        int64_t t0 = tc_now_ms();
        int o = send_raw_fresh(s.port, 1, m, lens[i] < 10 ? 4 + lens[i] : sizeof m);
        CHECK_REJECTED(o, "length after handshake", m, sizeof m);
        CHECK(tc_now_ms() - t0 < 1500);
        CHECK_SERVER_OK(s);
    }
    STOP(s);
}

/* The huge declared length must not be allocated up front: many connections
 * each declaring 60 MiB (under the 64 MiB cap) and sending nothing more must
 * not grow the server by 60 MiB each. */
TEST(bad_length_declared_not_preallocated)
{
    START(s);
    enum { N = 40 };
    tc_conn cs[N];
    int n = 0;
    for (; n < N; n++) {
        if (tc_connect(&cs[n], s.port) || tc_handshake(&cs[n], 1, 2, 0, NULL, 0) != 1)
            break;
        uint8_t m[14] = {0};
        em_st32(m, 60u << 20);
        em_st16(m + 4, 1001);
        CHECK_OK(tc_send(&cs[n], m, sizeof m));
    }
    CHECK_EQ(n, N);
    tc_sleep_ms(200);
    /* 40 x 60 MiB = 2.4 GiB: a server that preallocated would be in trouble;
     * check it still answers and its RSS stayed small */
    CHECK_SERVER_OK(s);
    char path[64], line[256];
    snprintf(path, sizeof path, "/proc/%d/status", (int)s.pid);
    FILE *f = fopen(path, "r");
    long rss_kb = -1;
    while (f && fgets(line, sizeof line, f))
        if (strncmp(line, "VmRSS:", 6) == 0)
            rss_kb = atol(line + 6);
    if (f)
        fclose(f);
    CHECK(rss_kb > 0 && rss_kb < 512 * 1024);
    for (int i = 0; i < n; i++)
        tc_close(&cs[i]);
    STOP(s);
}

/* ---- garbage and truncation ------------------------------------------------ */

TEST(bad_garbage_before_handshake)
{
    START(s);
    const char *http = "GET / HTTP/1.1\r\nHost: localhost\r\n\r\n";
    int o = send_raw_fresh(s.port, 0, http, strlen(http));
    CHECK_REJECTED(o, "HTTP request", http, strlen(http));
    CHECK_SERVER_OK(s);

    /* well-framed but not a handshake: handshake code 7 */
    uint8_t m1[] = {8, 0, 0, 0, 7, 1, 0, 2, 0, 0, 0, 2};
    o = send_raw_fresh(s.port, 0, m1, sizeof m1);
    CHECK_REJECTED(o, "handshake code 7", m1, sizeof m1);
    /* client code 1 (JDBC) and 9 (unknown) */
    uint8_t m2[] = {8, 0, 0, 0, 1, 1, 0, 2, 0, 0, 0, 1};
    o = send_raw_fresh(s.port, 0, m2, sizeof m2);
    CHECK_REJECTED(o, "client code 1", m2, sizeof m2);
    uint8_t m3[] = {8, 0, 0, 0, 1, 1, 0, 2, 0, 0, 0, 9};
    o = send_raw_fresh(s.port, 0, m3, sizeof m3);
    CHECK_REJECTED(o, "client code 9", m3, sizeof m3);
    /* handshake frame too short to hold the version */
    uint8_t m4[] = {3, 0, 0, 0, 1, 1, 0};
    o = send_raw_fresh(s.port, 0, m4, sizeof m4);
    CHECK_REJECTED(o, "3-byte handshake", m4, sizeof m4);
    /* 1.7.0 with a feature array declaring 1e9 bytes */
    uint8_t m5[] = {13, 0, 0, 0, 1, 1, 0, 7, 0, 0, 0, 2, 12, 0x00, 0xca, 0x9a, 0x3b};
    o = send_raw_fresh(s.port, 0, m5, sizeof m5);
    CHECK_REJECTED(o, "feature array of 1e9 bytes", m5, sizeof m5);
    /* random bytes */
    uint8_t rnd[256];
    srand(12345);
    for (int round = 0; round < 20; round++) {
        for (size_t i = 0; i < sizeof rnd; i++)
            rnd[i] = (uint8_t)rand();
        rnd[0] = (uint8_t)(rnd[0] % 64); rnd[1] = rnd[2] = rnd[3] = 0; /* small length */
        o = send_raw_fresh(s.port, 0, rnd, sizeof rnd);
        CHECK_REJECTED(o, "random bytes", rnd, sizeof rnd);
    }
    CHECK_SERVER_OK(s);
    STOP(s);
}

TEST(bad_truncated_frames_then_close)
{
    START(s);
    for (int round = 0; round < 50; round++) {
        tc_conn c;
        REQUIRE_OK(tc_connect(&c, s.port));
        if (round % 2) {
            REQUIRE_EQ(tc_handshake(&c, 1, 2, 0, NULL, 0), 1);
            uint8_t m[20] = {100, 0, 0, 0, 0xe9, 0x03};
            CHECK_OK(tc_send(&c, m, (size_t)(2 + round % 18)));
        } else {
            uint8_t m[] = {8, 0, 0, 0, 1, 1, 0, 2};
            CHECK_OK(tc_send(&c, m, (size_t)(1 + round % 8)));
        }
        tc_close(&c);
    }
    CHECK_SERVER_OK(s);
    STOP(s);
}

/* A frame whose length is right but whose payload ends inside a value. */
TEST(bad_truncated_values_inside_frame)
{
    START(s);
    tc_conn c;
    REQUIRE_OK(tc_open(&c, s.port));
    REQUIRE_OK(tc_create_cache(&c, "trunc"));
    tc_close(&c);
    int32_t cid = tc_cache_id("trunc");
    em_buf b = EM_BUF_INIT;
    tc_conn d = {.rid = 1};
    for (int k = 0; k < 6; k++) {
        tc_req_begin(&d, &b, k < 3 ? 1001 : 1000);
        tc_cache_hdr(&b, cid, 0);
        switch (k) {
        case 0: tc_v_int(&b, 1); tc_put_u8(&b, 9); tc_put_i32(&b, 100); tc_put_bytes(&b, "abc", 3); break;
        case 1: tc_v_int(&b, 1); tc_put_u8(&b, 4); tc_put_i32(&b, 7); break;   /* long cut short */
        case 2: tc_v_int(&b, 1); break;                                         /* no value */
        case 3: tc_put_u8(&b, 3); tc_put_i16(&b, 1); break;                     /* int cut short */
        case 4: break;                                                          /* no key */
        case 5: b.len -= 2; break;                                              /* cache header cut */
        }
        tc_req_end(&b);
        int o = send_raw_fresh(s.port, 1, b.p, b.len);
        CHECK_REJECTED(o, "truncated value", b.p, b.len);
    }
    em_buf_free(&b);
    CHECK_SERVER_OK(s);
    STOP(s);
}

/* ---- slow senders and idle connections ------------------------------------- */

TEST(bad_slow_sender_closed_at_handshake_timeout)
{
    const char *args[] = {TC_FLAG_HANDSHAKE_TIMEOUT, "500", NULL};
    START_ARGS(s, args);
    tc_conn c;
    REQUIRE_OK(tc_connect(&c, s.port));
    int64_t t0 = tc_now_ms();
    uint8_t m[] = {8, 0, 0, 0, 1, 1, 0, 2, 0, 0, 0, 2};
    int closed_at = -1;
    for (size_t i = 0; i < sizeof m; i++) {
        if (tc_send(&c, m + i, 1)) {
            closed_at = (int)(tc_now_ms() - t0);
            break;
        }
        if (tc_wait_closed(&c, 100)) {
            closed_at = (int)(tc_now_ms() - t0);
            break;
        }
        if (i == 3)
            CHECK_OK(good_check());        /* others are served meanwhile */
    }
    /* 12 bytes at 100 ms each take 1.2 s; the 500 ms timeout must cut it */
    CHECK(closed_at >= 400);
    CHECK(closed_at >= 0 && closed_at <= 1500);
    tc_close(&c);
    CHECK_SERVER_OK(s);
    STOP(s);
}

/* 5 000 connections that never handshake: the server keeps serving a good
 * client and closes them all at the handshake timeout. */
TEST(bad_5000_idle_connections)
{
    enum { N = 5000 };
    struct rlimit rl;
    REQUIRE(getrlimit(RLIMIT_NOFILE, &rl) == 0);
    rlim_t want = 2 * N + 200;
    if (rl.rlim_cur < want) {
        rl.rlim_cur = want < rl.rlim_max ? want : rl.rlim_max;
        REQUIRE(setrlimit(RLIMIT_NOFILE, &rl) == 0);
    }
    REQUIRE(rl.rlim_cur >= (rlim_t)N + 100);
    /* emberd inherits the raised limit; it needs N + a few fds too */
    const char *args[] = {TC_FLAG_HANDSHAKE_TIMEOUT, "2000", TC_FLAG_MAX_CONNS, "20000", NULL};
    START_ARGS(s, args);
    int *fds = em_malloc(sizeof(int) * N);
    REQUIRE(fds);
    int n = 0;
    int64_t t0 = tc_now_ms();
    for (; n < N; n++) {
        tc_conn c;
        if (tc_connect(&c, s.port))
            break;
        fds[n] = c.fd;
        if (n % 1000 == 999) {
            CHECK_OK(tc_sanity(s.port));
            CHECK_OK(good_check());
        }
    }
    int64_t t_open = tc_now_ms() - t0;
    CHECK_EQ(n, N);
    CHECK_OK(tc_sanity(s.port));
    /* after the timeout (+1 s slack) every idle connection is closed */
    int64_t deadline = t0 + 2000 + 1000 + t_open;
    int open_left = n;
    while (open_left > 0 && tc_now_ms() < deadline + 1000) {
        open_left = 0;
        for (int i = 0; i < n; i++) {
            if (fds[i] < 0)
                continue;
            struct pollfd pf = {fds[i], POLLIN, 0};
            if (poll(&pf, 1, 0) == 1) {
                char junk[16];
                ssize_t r = recv(fds[i], junk, sizeof junk, MSG_DONTWAIT);
                if (r == 0 || (r < 0 && errno != EAGAIN)) {
                    close(fds[i]);
                    fds[i] = -1;
                    continue;
                }
            }
            open_left++;
        }
        if (open_left)
            tc_sleep_ms(100);
    }
    CHECK_EQ(open_left, 0);
    CHECK(tc_now_ms() <= deadline + 1000);
    for (int i = 0; i < n; i++)
        if (fds[i] >= 0)
            close(fds[i]);
    em_free(fds);
    CHECK_SERVER_OK(s);
    STOP(s);
}

/* ---- declared counts larger than the payload ----------------------------------- */

TEST(bad_declared_counts_too_large)
{
    START(s);
    tc_conn c;
    REQUIRE_OK(tc_open(&c, s.port));
    REQUIRE_OK(tc_create_cache(&c, "counts"));
    tc_close(&c);
    int32_t cid = tc_cache_id("counts");
    em_buf b = EM_BUF_INIT;
    tc_conn d = {.rid = 1};
    const int32_t big = 1000000000;
    for (int k = 0; k < 14; k++) {
        const char *what = "";
        int op = 1001;
        switch (k) {
        case 0: op = 1003; what = "GET_ALL n=1e9"; break;
        case 1: op = 1004; what = "PUT_ALL n=1e9"; break;
        case 2: op = 1012; what = "CONTAINS_KEYS n=1e9"; break;
        case 3: op = 1018; what = "REMOVE_KEYS n=1e9"; break;
        case 4: op = 1015; what = "CLEAR_KEYS n=-1"; break;
        case 5: op = 1020; what = "GET_SIZE n=1e9 modes"; break;
        default: what = "PUT with oversized value count"; break;
        }
        tc_req_begin(&d, &b, op);
        tc_cache_hdr(&b, cid, 0);
        switch (k) {
        case 0: case 2: case 3: tc_put_i32(&b, big); tc_v_int(&b, 1); break;
        case 1: tc_put_i32(&b, big); tc_v_int(&b, 1); tc_v_int(&b, 2); break;
        case 4: tc_put_i32(&b, -1); tc_v_int(&b, 1); break;
        case 5: tc_put_i32(&b, big); tc_put_u8(&b, 0); break;
        case 6: tc_v_int(&b, 1); tc_put_u8(&b, 12); tc_put_i32(&b, big); tc_put_bytes(&b, "abc", 3); break;
        case 7: tc_v_int(&b, 1); tc_put_u8(&b, 15); tc_put_i32(&b, big / 4); tc_put_i64(&b, 1); break;
        case 8: tc_v_int(&b, 1); tc_put_u8(&b, 24); tc_put_i32(&b, big); tc_put_u8(&b, 1); tc_v_int(&b, 1); break;
        case 9: tc_v_int(&b, 1); tc_put_u8(&b, 25); tc_put_i32(&b, big); tc_put_u8(&b, 1); tc_v_int(&b, 1); tc_v_int(&b, 2); break;
        case 10: tc_v_int(&b, 1); tc_put_u8(&b, 23); tc_put_i32(&b, -1); tc_put_i32(&b, big); tc_v_int(&b, 1); break;
        case 11: tc_v_int(&b, 1); tc_put_u8(&b, 20); tc_put_i32(&b, big); tc_v_str(&b, "a"); break;
        case 12: tc_v_int(&b, 1); tc_put_u8(&b, 9); tc_put_i32(&b, big); tc_put_bytes(&b, "abc", 3); break;
        case 13: tc_v_int(&b, 1); tc_put_u8(&b, 24); tc_put_i32(&b, -5); tc_put_u8(&b, 1); break;
        }
        tc_req_end(&b);
        int64_t t0 = tc_now_ms();
        int o = send_raw_fresh(s.port, 1, b.p, b.len);
        CHECK_REJECTED(o, what, b.p, b.len);
        CHECK(tc_now_ms() - t0 < 1500);
        CHECK_OK(good_check());
    }
    em_buf_free(&b);
    CHECK_SERVER_OK(s);
    STOP(s);
}

/* ---- nesting -------------------------------------------------------------- */

/* nested builds a value nested depth levels deep: kind 0 collections, 1 object
 * arrays, 2 maps (value side), ending in int 7. */
static void nested(em_buf *b, int kind, int depth)
{
    for (int i = 0; i < depth; i++) {
        switch (kind) {
        case 0: tc_put_u8(b, 24); tc_put_i32(b, 1); tc_put_u8(b, 1); break;
        case 1: tc_put_u8(b, 23); tc_put_i32(b, -1); tc_put_i32(b, 1); break;
        default: tc_put_u8(b, 25); tc_put_i32(b, 1); tc_put_u8(b, 1); tc_v_int(b, i); break;
        }
    }
    tc_v_int(b, 7);
}

static int put_value(int port, const char *cache, const em_buf *val, em_buf *b)
{
    tc_conn d = {.rid = 1};
    tc_req_begin(&d, b, 1001);
    tc_cache_hdr(b, tc_cache_id(cache), 0);
    tc_v_int(b, 1);
    tc_put_bytes(b, val->p, val->len);
    tc_req_end(b);
    return send_raw_fresh(port, 1, b->p, b->len);
}

TEST(bad_deep_nesting)
{
    START(s);
    tc_conn c;
    REQUIRE_OK(tc_open(&c, s.port));
    REQUIRE_OK(tc_create_cache(&c, "deep"));
    tc_close(&c);
    em_buf v = EM_BUF_INIT, b = EM_BUF_INIT;
    const int depths[] = {1000, 100000};
    for (int kind = 0; kind < 3; kind++) {
        for (size_t di = 0; di < 2; di++) {
            em_buf_reset(&v);
            nested(&v, kind, depths[di]);
            int o = put_value(s.port, "deep", &v, &b);
            CHECK_REJECTED(o, kind == 0 ? "nested collections" : kind == 1 ? "nested arrays" : "nested maps",
                           b.p, b.len);
            CHECK(tc_server_alive(&s));
            CHECK_OK(good_check());
        }
        /* a shallow value of the same shape is fine and comes back intact */
        em_buf_reset(&v);
        nested(&v, kind, 10);
        CHECK_EQ(put_value(s.port, "deep", &v, &b), GOT_SUCCESS);
        tc_conn g;
        REQUIRE_OK(tc_open(&g, s.port));
        tc_reply r;
        tc_req_begin(&g, &b, 1000);
        tc_cache_hdr(&b, tc_cache_id("deep"), 0);
        tc_v_int(&b, 1);
        tc_req_end(&b);
        REQUIRE_OK(tc_call(&g, &b, &r));
        CHECK_EQ(r.status, 0);
        CHECK_EQ(r.n, v.len);
        if (r.n == v.len)
            CHECK_MEM(r.p, v.p, v.len);
        tc_close(&g);
    }
    em_buf_free(&v);
    em_buf_free(&b);
    CHECK_SERVER_OK(s);
    STOP(s);
}

/* ---- handles --------------------------------------------------------------- */

TEST(bad_handles)
{
    START(s);
    tc_conn c;
    REQUIRE_OK(tc_open(&c, s.port));
    REQUIRE_OK(tc_create_cache(&c, "handles"));
    tc_close(&c);
    em_buf v = EM_BUF_INIT, b = EM_BUF_INIT;
    for (int k = 0; k < 6; k++) {
        em_buf_reset(&v);
        const char *what = "";
        switch (k) {
        case 0: /* top-level handle pointing at itself */
            what = "self handle"; tc_put_u8(&v, 102); tc_put_i32(&v, 0); break;
        case 1: /* top-level handle pointing before the value */
            what = "handle outside the value"; tc_put_u8(&v, 102); tc_put_i32(&v, 1000); break;
        case 2: /* forward handle inside a collection: points at the next element */
            what = "forward handle";
            tc_put_u8(&v, 24); tc_put_i32(&v, 2); tc_put_u8(&v, 1);
            tc_put_u8(&v, 102); tc_put_i32(&v, -5);
            tc_v_str(&v, "x");
            break;
        case 3: /* element handle to the enclosing collection: a cycle */
            what = "handle cycle to the container";
            tc_put_u8(&v, 24); tc_put_i32(&v, 1); tc_put_u8(&v, 1);
            tc_put_u8(&v, 102); tc_put_i32(&v, 6);
            break;
        case 4: /* two collections whose handles point at each other */
            what = "mutual handle cycle";
            tc_put_u8(&v, 24); tc_put_i32(&v, 2); tc_put_u8(&v, 1);        /* outer @0 */
            tc_put_u8(&v, 24); tc_put_i32(&v, 1); tc_put_u8(&v, 1);        /* inner @6 */
            tc_put_u8(&v, 102); tc_put_i32(&v, 12);                        /* @12 -> outer */
            tc_put_u8(&v, 102); tc_put_i32(&v, 11);                        /* @17 -> inner */
            break;
        case 5: /* handle into the middle of a value (not a type byte) */
            what = "handle into a value's bytes";
            tc_put_u8(&v, 24); tc_put_i32(&v, 2); tc_put_u8(&v, 1);
            tc_v_int(&v, 0x67676767);                                      /* @6 */
            tc_put_u8(&v, 102); tc_put_i32(&v, 4);                         /* @11 -> 7 */
            break;
        }
        int o = put_value(s.port, "handles", &v, &b);
        CHECK_REJECTED(o, what, b.p, b.len);
        CHECK(tc_server_alive(&s));
        CHECK_OK(good_check());
    }
    em_buf_free(&v);
    em_buf_free(&b);
    CHECK_SERVER_OK(s);
    STOP(s);
}

/* A valid back-reference (Java writes these for repeated objects) is data,
 * not an attack: it must be stored and returned unchanged. */
TEST(bad_handles_valid_back_reference_kept)
{
    START(s);
    tc_conn c;
    REQUIRE_OK(tc_open(&c, s.port));
    REQUIRE_OK(tc_create_cache(&c, "handles2"));
    em_buf v = EM_BUF_INIT, b = EM_BUF_INIT;
    tc_put_u8(&v, 24); tc_put_i32(&v, 2); tc_put_u8(&v, 1);
    tc_v_str(&v, "repeated");                                  /* @6 */
    tc_put_u8(&v, 102); tc_put_i32(&v, 13);                    /* @19 -> 6 */
    CHECK_EQ(put_value(s.port, "handles2", &v, &b), GOT_SUCCESS);
    tc_reply r;
    tc_req_begin(&c, &b, 1000);
    tc_cache_hdr(&b, tc_cache_id("handles2"), 0);
    tc_v_int(&b, 1);
    tc_req_end(&b);
    REQUIRE_OK(tc_call(&c, &b, &r));
    CHECK_EQ(r.status, 0);
    CHECK_EQ(r.n, v.len);
    if (r.n == v.len)
        CHECK_MEM(r.p, v.p, v.len);
    em_buf_free(&v);
    em_buf_free(&b);
    tc_close(&c);
    STOP(s);
}

/* ---- type codes, UTF-8, complex object headers -------------------------------- */

TEST(bad_forbidden_and_unknown_type_codes)
{
    START(s);
    tc_conn c;
    REQUIRE_OK(tc_open(&c, s.port));
    REQUIRE_OK(tc_create_cache(&c, "codes"));
    tc_close(&c);
    const uint8_t codes[] = {0xfe /* -2 */, 32, 35, 99, 0, 26, 40, 77, 100, 104, 200, 255};
    em_buf b = EM_BUF_INIT;
    tc_conn d = {.rid = 1};
    for (size_t i = 0; i < sizeof codes; i++) {
        for (int as_key = 0; as_key < 2; as_key++) {
            tc_req_begin(&d, &b, as_key ? 1000 : 1001);
            tc_cache_hdr(&b, tc_cache_id("codes"), 0);
            if (!as_key)
                tc_v_int(&b, 1);
            tc_put_u8(&b, codes[i]);
            tc_put_i32(&b, 4);                       /* something that looks like a length */
            tc_put_bytes(&b, "\x01\x02\x03\x04", 4);
            tc_req_end(&b);
            int o = send_raw_fresh(s.port, 1, b.p, b.len);
            CHECK_REJECTED(o, as_key ? "type code as key" : "type code as value", b.p, b.len);
        }
    }
    em_buf_free(&b);
    CHECK_SERVER_OK(s);
    STOP(s);
}

TEST(bad_invalid_utf8)
{
    START(s);
    tc_conn c;
    REQUIRE_OK(tc_open(&c, s.port));
    REQUIRE_OK(tc_create_cache(&c, "utf8"));
    tc_close(&c);
    static const char *bad[] = {
        "\xc3\x28", "\xff", "\xc0\xaf", "\xed\xa0\x80", "\xf4\x90\x80\x80", "abc\xe2\x82",
    };
    em_buf b = EM_BUF_INIT;
    tc_conn d = {.rid = 1};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        /* as a value */
        tc_req_begin(&d, &b, 1001);
        tc_cache_hdr(&b, tc_cache_id("utf8"), 0);
        tc_v_int(&b, 1);
        tc_v_str(&b, bad[i]);
        tc_req_end(&b);
        int o = send_raw_fresh(s.port, 1, b.p, b.len);
        CHECK_REJECTED(o, "invalid UTF-8 value", b.p, b.len);
        /* as a cache name */
        tc_req_begin(&d, &b, 1052);
        tc_v_str(&b, bad[i]);
        tc_req_end(&b);
        o = send_raw_fresh(s.port, 1, b.p, b.len);
        CHECK_REJECTED(o, "invalid UTF-8 cache name", b.p, b.len);
        /* inside a string array */
        tc_req_begin(&d, &b, 1001);
        tc_cache_hdr(&b, tc_cache_id("utf8"), 0);
        tc_v_int(&b, 2);
        tc_put_u8(&b, 20);
        tc_put_i32(&b, 2);
        tc_v_str(&b, "ok");
        tc_v_str(&b, bad[i]);
        tc_req_end(&b);
        o = send_raw_fresh(s.port, 1, b.p, b.len);
        CHECK_REJECTED(o, "invalid UTF-8 in string array", b.p, b.len);
    }
    /* valid multi-byte UTF-8 is accepted */
    REQUIRE_OK(tc_open(&c, s.port));
    CHECK_OK(tc_put_int_str(&c, "utf8", 3, "h\xc3\xa9llo \xe2\x9c\x93 \xf0\x9f\x98\x80"));
    char got[64];
    CHECK_EQ(tc_get_int_str(&c, "utf8", 3, got, sizeof got), 1);
    CHECK(strcmp(got, "h\xc3\xa9llo \xe2\x9c\x93 \xf0\x9f\x98\x80") == 0);
    tc_close(&c);
    em_buf_free(&b);
    CHECK_SERVER_OK(s);
    STOP(s);
}

/* complex object (103) with a header that lies: total length beyond the
 * message, schema offset outside the object, field offsets out of range. */
static void complex_obj(em_buf *v, int32_t total, int32_t schema_off, uint8_t field_off, uint16_t flags)
{
    tc_put_u8(v, 103);
    tc_put_u8(v, 1);
    tc_put_i16(v, (int16_t)flags);
    tc_put_i32(v, 12345);          /* type id */
    tc_put_i32(v, 0);              /* hash */
    tc_put_i32(v, total);
    tc_put_i32(v, 777);            /* schema id */
    tc_put_i32(v, schema_off);
    tc_v_int(v, 5);                /* field @24, 5 bytes */
    tc_put_i32(v, 3355);           /* full footer: field id + 1-byte offset */
    tc_put_u8(v, field_off);
}

TEST(bad_complex_object_headers)
{
    START(s);
    tc_conn c;
    REQUIRE_OK(tc_open(&c, s.port));
    REQUIRE_OK(tc_create_cache(&c, "complex"));
    tc_close(&c);
    const uint16_t fl = 0x0001 | 0x0002 | 0x0008; /* user type, schema, 1-byte offsets, full footer */
    struct { int32_t total, schema_off; uint8_t field_off; const char *what; } cases[] = {
        {1000, 29, 24, "total length beyond the message"},
        {10, 29, 24, "total length shorter than the header"},
        {-1, 29, 24, "negative total length"},
        {34, 200, 24, "schema offset beyond the object"},
        {34, 3, 24, "schema offset inside the header"},
        {34, 29, 250, "field offset beyond the object"},
        {34, 29, 2, "field offset inside the header"},
    };
    em_buf v = EM_BUF_INIT, b = EM_BUF_INIT;
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        em_buf_reset(&v);
        complex_obj(&v, cases[i].total, cases[i].schema_off, cases[i].field_off, fl);
        int o = put_value(s.port, "complex", &v, &b);
        CHECK_REJECTED(o, cases[i].what, b.p, b.len);
    }
    /* 27 wrapper whose inner offset points outside its bytes */
    em_buf_reset(&v);
    tc_put_u8(&v, 27);
    tc_put_i32(&v, 34);
    complex_obj(&v, 34, 29, 24, fl);
    tc_put_i32(&v, 500);
    int o = put_value(s.port, "complex", &v, &b);
    CHECK_REJECTED(o, "27 wrapper offset outside", b.p, b.len);
    /* 27 wrapper whose length exceeds the message */
    em_buf_reset(&v);
    tc_put_u8(&v, 27);
    tc_put_i32(&v, 0x10000000);
    complex_obj(&v, 34, 29, 24, fl);
    tc_put_i32(&v, 0);
    o = put_value(s.port, "complex", &v, &b);
    CHECK_REJECTED(o, "27 wrapper length beyond the message", b.p, b.len);
    em_buf_free(&v);
    em_buf_free(&b);
    CHECK_SERVER_OK(s);
    STOP(s);
}

/* Pipelined requests sent without reading replies: the server applies
 * backpressure instead of buffering without bound; after we read, every
 * reply arrives in order. */
TEST(bad_pipelined_flood_without_reading)
{
    START(s);
    tc_conn c;
    REQUIRE_OK(tc_open(&c, s.port));
    REQUIRE_OK(tc_create_cache(&c, "flood"));
    REQUIRE_OK(tc_put_int_str(&c, "flood", 1, "v"));
    em_buf one = EM_BUF_INIT, many = EM_BUF_INIT;
    enum { N = 20000 };
    int64_t first = c.rid;
    for (int i = 0; i < N; i++) {
        tc_req_begin(&c, &one, 1000);
        tc_cache_hdr(&one, tc_cache_id("flood"), 0);
        tc_v_int(&one, 1);
        tc_req_end(&one);
        tc_put_bytes(&many, one.p, one.len);
    }
    /* send in a child-free way: non-blocking chunks interleaved with reads */
    size_t sent = 0;
    int got = 0, bad = 0;
    while (got < N) {
        if (sent < many.len) {
            ssize_t w = send(c.fd, many.p + sent, many.len - sent, MSG_DONTWAIT | MSG_NOSIGNAL);
            if (w > 0)
                sent += (size_t)w;
            else if (w < 0 && errno != EAGAIN && errno != EWOULDBLOCK)
                break;
        }
        struct pollfd pf = {c.fd, POLLIN, 0};
        if (poll(&pf, 1, sent < many.len ? 0 : 2000) <= 0) {
            if (sent < many.len)
                continue;
            break;
        }
        if (tc_recv_frame(&c, 2000))
            break;
        tc_reply r;
        if (tc_parse_reply(&c, &r) || r.status || r.rid != first + got)
            bad++;
        got++;
    }
    CHECK_EQ(got, N);
    CHECK_EQ(bad, 0);
    em_buf_free(&one);
    em_buf_free(&many);
    tc_close(&c);
    CHECK_SERVER_OK(s);
    STOP(s);
}

/* A reader that never reads: 1 MiB values requested 2 000 times (2 GiB of
 * replies).  The server must bound what it queues for that connection
 * (backpressure or close), keep its memory small and keep serving others. */
static long rss_kb_of(pid_t pid)
{
    char path[64], line[256];
    snprintf(path, sizeof path, "/proc/%d/status", (int)pid);
    FILE *f = fopen(path, "r");
    long kb = -1;
    while (f && fgets(line, sizeof line, f))
        if (strncmp(line, "VmRSS:", 6) == 0)
            kb = atol(line + 6);
    if (f)
        fclose(f);
    return kb;
}

TEST(bad_slow_reader_bounded_memory)
{
    START(s);
    tc_conn c;
    REQUIRE_OK(tc_open(&c, s.port));
    REQUIRE_OK(tc_create_cache(&c, "big"));
    em_buf b = EM_BUF_INIT, many = EM_BUF_INIT;
    tc_reply r;
    tc_req_begin(&c, &b, 1001);
    tc_cache_hdr(&b, tc_cache_id("big"), 0);
    tc_v_int(&b, 1);
    tc_v_bytes(&b, 1 << 20, 0x5a);
    tc_req_end(&b);
    REQUIRE_OK(tc_call(&c, &b, &r));
    REQUIRE_EQ(r.status, 0);
    long rss0 = rss_kb_of(s.pid);
    for (int i = 0; i < 2000; i++) {
        tc_req_begin(&c, &b, 1000);
        tc_cache_hdr(&b, tc_cache_id("big"), 0);
        tc_v_int(&b, 1);
        tc_req_end(&b);
        tc_put_bytes(&many, b.p, b.len);
    }
    /* push requests until the server stops taking them for 500 ms */
    size_t sent = 0;
    int64_t stalled_since = -1;
    while (sent < many.len) {
        ssize_t w = send(c.fd, many.p + sent, many.len - sent, MSG_DONTWAIT | MSG_NOSIGNAL);
        if (w > 0) {
            sent += (size_t)w;
            stalled_since = -1;
            continue;
        }
        if (w < 0 && errno != EAGAIN && errno != EWOULDBLOCK)
            break;                          /* closed by the server: fine */
        if (stalled_since < 0)
            stalled_since = tc_now_ms();
        else if (tc_now_ms() - stalled_since > 500)
            break;
        tc_sleep_ms(10);
    }
    tc_sleep_ms(1000);
    long rss1 = rss_kb_of(s.pid);
    /* 2 GiB of replies must not be queued: allow the 256 MiB hard cap plus slack */
    CHECK(rss1 > 0 && rss1 - rss0 < 320 * 1024);
    CHECK_SERVER_OK(s);
    /* the connection is not wedged: reading resumes the replies (or the
     * server has closed it) */
    int got = 0, rc = 0;
    while (got < 50 && (rc = tc_recv_frame(&c, 5000)) == 0) {
        if (tc_parse_reply(&c, &r) || r.status || r.n != 5 + (1u << 20))
            break;
        got++;
    }
    CHECK(got == 50 || rc == EM_CLOSED);
    tc_close(&c);
    tc_sleep_ms(200);
    CHECK_SERVER_OK(s);
    em_buf_free(&b);
    em_buf_free(&many);
    STOP(s);
}
