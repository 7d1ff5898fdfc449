/* test_config.c - cache configuration ops from C: CREATE_WITH_CONFIGURATION
 * (1053) and GET_CONFIGURATION (1055) echoed in the layout of each
 * negotiated version (precision/scale from 1.2.0, expiry policy from 1.6.0),
 * and the expiry policy of a cache configuration (property 407).
 * Layouts: shared/reference/ignite-thin-protocol.md §2.4.
 */
#include "client.h"
#include "test.h"

#include "util/err.h"

#include <string.h>
#include <time.h>

/* Expiry durations after creation: update and access of the layout tests;
 * the expiry test uses -2 (unchanged) so that reads do not extend the life. */
static int64_t exp_update = 2000, exp_access = 3000;

/* build_config appends a configuration (int length, short count, props) for
 * cache name with backups 1, schema "S", one query entity and, if ttl_ms > 0,
 * an expiry policy (create = ttl_ms, update/access as above). */
static void build_config(em_buf *b, const char *name, int64_t ttl_ms, int with_precision)
{
    size_t start = b->len;
    tc_put_i32(b, 0);
    int nprops = ttl_ms > 0 ? 5 : 4;
    tc_put_i16(b, (int16_t)nprops);
    tc_put_i16(b, 3);                  /* backups */
    tc_put_i32(b, 1);
    tc_put_i16(b, 203);                /* SQL schema */
    tc_v_str(b, "S");
    tc_put_i16(b, 200);                /* query entities */
    tc_put_i32(b, 1);
    tc_v_str(b, "java.lang.Integer");
    tc_v_str(b, "P");
    tc_v_str(b, "T");
    tc_v_null(b);
    tc_v_null(b);
    tc_put_i32(b, 1);                  /* one field */
    tc_v_str(b, "id");
    tc_v_str(b, "java.math.BigDecimal");
    tc_put_u8(b, 1);
    tc_put_u8(b, 0);
    tc_v_null(b);
    if (with_precision) {
        tc_put_i32(b, 7);
        tc_put_i32(b, 2);
    }
    tc_put_i32(b, 0);                  /* aliases */
    tc_put_i32(b, 0);                  /* indexes */
    if (ttl_ms > 0) {
        tc_put_i16(b, 407);
        tc_put_u8(b, 1);
        tc_put_i64(b, ttl_ms);
        tc_put_i64(b, exp_update);
        tc_put_i64(b, exp_access);
    }
    tc_put_i16(b, 0);                  /* name, last as Node does */
    tc_v_str(b, name);
    em_st32(b->p + start, (uint32_t)(b->len - start));
}

static int create_with_config(tc_conn *c, const char *name, int64_t ttl_ms)
{
    em_buf b = EM_BUF_INIT;
    tc_reply r;
    tc_req_begin(c, &b, 1053);
    build_config(&b, name, ttl_ms, c->ver >= TC_VER(1, 2, 0));
    tc_req_end(&b);
    int rc = tc_call(c, &b, &r);
    em_buf_free(&b);
    if (rc)
        return rc;
    return r.status;
}

static void skip_str(tc_rd *d, char *out, size_t cap) { tc_rd_str(d, out, cap); }

/* check_config reads GET_CONFIGURATION on connection c and checks the whole
 * layout for c's version. */
static void check_config(tc_conn *c, const char *name, int64_t ttl_ms)
{
    em_buf b = EM_BUF_INIT;
    tc_reply r;
    tc_req_begin(c, &b, 1055);
    tc_cache_hdr(&b, tc_cache_id(name), 0);
    tc_req_end(&b);
    int rc = tc_call(c, &b, &r);
    em_buf_free(&b);
    REQUIRE_OK(rc);
    REQUIRE_EQ(r.status, 0);
    tc_rd d = tc_rd_of(&r);
    char s[128];
    int32_t len = tc_rd_i32(&d);
    CHECK_EQ(len, (int64_t)r.n - 4);
    CHECK_EQ(tc_rd_i32(&d), 1);        /* atomicity ATOMIC */
    CHECK_EQ(tc_rd_i32(&d), 1);        /* backups */
    CHECK_EQ(tc_rd_i32(&d), 2);        /* cache mode PARTITIONED */
    tc_rd_u8(&d);                      /* copy on read */
    skip_str(&d, s, sizeof s);         /* data region */
    tc_rd_u8(&d);                      /* eager ttl */
    tc_rd_u8(&d);                      /* statistics */
    skip_str(&d, s, sizeof s);         /* group */
    tc_rd_i64(&d);                     /* lock timeout */
    tc_rd_i32(&d);                     /* max async ops */
    tc_rd_i32(&d);                     /* max query iterators */
    skip_str(&d, s, sizeof s);
    CHECK(strcmp(s, name) == 0);       /* name */
    tc_rd_u8(&d);                      /* onheap */
    tc_rd_i32(&d);                     /* loss policy */
    tc_rd_i32(&d);                     /* detail metrics */
    tc_rd_i32(&d);                     /* parallelism */
    tc_rd_u8(&d);                      /* read from backup */
    tc_rd_i32(&d);                     /* rebalance batch size */
    tc_rd_i64(&d);                     /* prefetch */
    tc_rd_i64(&d);                     /* delay */
    tc_rd_i32(&d);                     /* mode */
    tc_rd_i32(&d);                     /* order */
    tc_rd_i64(&d);                     /* throttle */
    tc_rd_i64(&d);                     /* timeout */
    tc_rd_u8(&d);                      /* escape all */
    tc_rd_i32(&d);                     /* inline max size */
    skip_str(&d, s, sizeof s);
    CHECK(strcmp(s, "S") == 0);        /* schema */
    tc_rd_i32(&d);                     /* write sync mode */
    CHECK_EQ(tc_rd_i32(&d), 0);        /* key configurations */
    REQUIRE_EQ(tc_rd_i32(&d), 1);      /* query entities */
    skip_str(&d, s, sizeof s);
    CHECK(strcmp(s, "java.lang.Integer") == 0);
    skip_str(&d, s, sizeof s);
    CHECK(strcmp(s, "P") == 0);
    skip_str(&d, s, sizeof s);
    CHECK(strcmp(s, "T") == 0);
    skip_str(&d, s, sizeof s);
    skip_str(&d, s, sizeof s);
    REQUIRE_EQ(tc_rd_i32(&d), 1);
    skip_str(&d, s, sizeof s);
    CHECK(strcmp(s, "id") == 0);
    skip_str(&d, s, sizeof s);
    CHECK(strcmp(s, "java.math.BigDecimal") == 0);
    CHECK_EQ(tc_rd_u8(&d), 1);
    CHECK_EQ(tc_rd_u8(&d), 0);
    CHECK_EQ(tc_rd_u8(&d), 101);       /* default value null */
    if (c->ver >= TC_VER(1, 2, 0)) {
        CHECK_EQ(tc_rd_i32(&d), 7);
        CHECK_EQ(tc_rd_i32(&d), 2);
    }
    CHECK_EQ(tc_rd_i32(&d), 0);        /* aliases */
    CHECK_EQ(tc_rd_i32(&d), 0);        /* indexes */
    if (c->ver >= TC_VER(1, 6, 0)) {
        int present = tc_rd_u8(&d);
        CHECK_EQ(present, ttl_ms > 0);
        if (present) {
            CHECK_EQ(tc_rd_i64(&d), ttl_ms);
            CHECK_EQ(tc_rd_i64(&d), exp_update);
            CHECK_EQ(tc_rd_i64(&d), exp_access);
        }
    }
    CHECK(!d.err);
    CHECK_EQ(d.pos, r.n);
}

static int open_ver(tc_conn *c, int port, int minor)
{
    int rc = tc_connect(c, port);
    if (rc)
        return rc;
    rc = tc_handshake(c, 1, minor, 0, NULL, 0);
    if (rc != 1) {
        tc_close(c);
        return rc ? rc : EM_PROTO;
    }
    return 0;
}

TEST(config_layout_per_version)
{
    tc_server s;
    REQUIRE_OK(tc_server_start(&s, NULL));
    tc_conn w;
    REQUIRE_OK(open_ver(&w, s.port, 6));
    REQUIRE_EQ(create_with_config(&w, "layout", 60000), 0);
    /* exists now: 1001 */
    CHECK_EQ(create_with_config(&w, "layout", 60000), 1001);
    tc_close(&w);
    const int minors[] = {0, 1, 2, 3, 4, 5, 6, 7};
    for (size_t i = 0; i < sizeof minors / sizeof minors[0]; i++) {
        tc_conn c;
        REQUIRE_OK(open_ver(&c, s.port, minors[i]));
        check_config(&c, "layout", 60000);
        tc_close(&c);
    }
    CHECK_EQ(tc_server_stop(&s), 0);
}

/* A configuration sent at 1.0.0 (no precision/scale) is read correctly. */
TEST(config_create_at_1_0_0)
{
    tc_server s;
    REQUIRE_OK(tc_server_start(&s, NULL));
    tc_conn w;
    REQUIRE_OK(open_ver(&w, s.port, 0));
    REQUIRE_EQ(create_with_config(&w, "old", 0), 0);
    check_config(&w, "old", 0);
    CHECK_OK(tc_put_int_str(&w, "old", 1, "x"));
    tc_close(&w);
    CHECK_EQ(tc_server_stop(&s), 0);
}

/* The cache's expiry policy (property 407) applies to plain puts. */
TEST(config_expiry_policy_applies)
{
    tc_server s;
    REQUIRE_OK(tc_server_start(&s, NULL));
    tc_conn c;
    REQUIRE_OK(open_ver(&c, s.port, 7));
    exp_update = -2;
    exp_access = -2;
    REQUIRE_EQ(create_with_config(&c, "ttlcfg", 1000), 0);
    REQUIRE_OK(tc_put_int_str(&c, "ttlcfg", 1, "soon gone"));
    int64_t t0 = tc_now_ms();
    char got[32];
    CHECK_EQ(tc_get_int_str(&c, "ttlcfg", 1, got, sizeof got), 1);
    int gone = 0;
    for (int i = 0; i < 80 && !gone; i++) {
        tc_sleep_ms(50);
        gone = tc_get_int_str(&c, "ttlcfg", 1, got, sizeof got) == 0;
    }
    CHECK(gone);
    CHECK(tc_now_ms() - t0 >= 900);
    /* access expiry: every read restarts the clock (here 1000 ms) */
    exp_access = 1000;
    REQUIRE_EQ(create_with_config(&c, "ttlaccess", 1000), 0);
    REQUIRE_OK(tc_put_int_str(&c, "ttlaccess", 1, "kept alive by reads"));
    for (int i = 0; i < 15; i++) {
        tc_sleep_ms(100);
        CHECK_EQ(tc_get_int_str(&c, "ttlaccess", 1, got, sizeof got), 1);
    }
    /* no polling here: each read would extend the life again */
    tc_sleep_ms(1600);
    CHECK_EQ(tc_get_int_str(&c, "ttlaccess", 1, got, sizeof got), 0);
    tc_close(&c);
    CHECK_EQ(tc_server_stop(&s), 0);
}

/* DESTROY (1056): missing cache -> 1000; after destroy the id is unknown. */
TEST(config_destroy)
{
    tc_server s;
    REQUIRE_OK(tc_server_start(&s, NULL));
    tc_conn c;
    REQUIRE_OK(tc_open(&c, s.port));
    REQUIRE_OK(tc_create_cache(&c, "gone"));
    REQUIRE_OK(tc_put_int_str(&c, "gone", 1, "x"));
    em_buf b = EM_BUF_INIT;
    tc_reply r;
    for (int i = 0; i < 2; i++) {
        tc_req_begin(&c, &b, 1056);
        tc_put_i32(&b, tc_cache_id("gone"));
        tc_req_end(&b);
        REQUIRE_OK(tc_call(&c, &b, &r));
        CHECK_EQ(r.status, i == 0 ? 0 : 1000);
    }
    tc_req_begin(&c, &b, 1000);
    tc_cache_hdr(&b, tc_cache_id("gone"), 0);
    tc_v_int(&b, 1);
    tc_req_end(&b);
    REQUIRE_OK(tc_call(&c, &b, &r));
    CHECK_EQ(r.status, 1000);
    /* CREATE_WITH_NAME twice: 1001 */
    for (int i = 0; i < 2; i++) {
        tc_req_begin(&c, &b, 1051);
        tc_v_str(&b, "twice");
        tc_req_end(&b);
        REQUIRE_OK(tc_call(&c, &b, &r));
        CHECK_EQ(r.status, i == 0 ? 0 : 1001);
    }
    em_buf_free(&b);
    tc_close(&c);
    CHECK_EQ(tc_server_stop(&s), 0);
}
