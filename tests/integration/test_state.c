/* test_state.c - cluster-level behaviour of one emberd over the wire:
 * cluster states (GET_STATE 5000, CHANGE_STATE 5001) with Ignite's refusals
 * in ACTIVE_READ_ONLY and INACTIVE, the state kept across restarts with
 * persistence; WAL state ops (5002/5003) answered per cache from its data
 * region; peek modes agreeing between LOCAL_PEEK (1021) and GET_SIZE (1020);
 * the message for a cache naming an unconfigured data region.
 * Layouts: shared/reference/ignite-thin-protocol.md §2.3, §2.8; behaviour:
 * src/proto/proto.c (op_cluster), src/store/store.h (peek modes).
 */
#include "client.h"
#include "test.h"

#include "util/buf.h"
#include "util/err.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#define INACTIVE_MSG "Can not perform the operation because the cluster is inactive. Note, " \
    "that the cluster is considered inactive by default if Ignite Persistent Store is used to " \
    "let all the nodes join the cluster. To activate the cluster call Ignite.active(true)."

/* open17: 1.7.0 asking for CLUSTER_STATES (2). */
static int open17(tc_conn *c, int port) { return tc_open_features(c, port, 0x04); }

static int get_state(tc_conn *c)
{
    tc_reply r;
    int rc = tc_op(c, 5000, NULL, &r);
    if (rc)
        return rc < 0 ? rc : -1000 - rc;
    return r.n == 1 ? r.p[0] : -1;
}

static int set_state(tc_conn *c, int st)
{
    em_buf b = EM_BUF_INIT;
    tc_put_u8(&b, (uint8_t)st);
    tc_reply r;
    int rc = tc_op(c, 5001, &b, &r);
    em_buf_free(&b);
    return rc;
}

/* kv_op: a cache op on an int key (and, if val, a string value), with
 * optional extra bytes after them; returns the status, message in *r. */
static int kv_op(tc_conn *c, int op, const char *cache, int32_t key, const char *val,
                 const em_buf *extra, tc_reply *r)
{
    em_buf b = EM_BUF_INIT;
    tc_cache_hdr(&b, tc_cache_id(cache), 0);
    if (key != INT32_MIN)
        tc_v_int(&b, key);
    if (val)
        tc_v_str(&b, val);
    if (extra)
        tc_put_bytes(&b, extra->p, extra->len);
    int rc = tc_op(c, op, &b, r);
    em_buf_free(&b);
    return rc;
}

#define NOKEY INT32_MIN

/* create_cfg: CREATE_WITH_CONFIGURATION (1053) with name and, unless NULL,
 * DATA_REGION_NAME (property 100). */
static int create_cfg(tc_conn *c, const char *name, const char *region, tc_reply *r)
{
    em_buf v = EM_BUF_INIT;
    tc_put_i32(&v, 0);
    tc_put_i16(&v, region ? 2 : 1);
    if (region) {
        tc_put_i16(&v, 100);
        tc_v_str(&v, region);
    }
    tc_put_i16(&v, 0);
    tc_v_str(&v, name);
    em_st32(v.p, (uint32_t)(v.len - 4));
    int rc = tc_op(c, 1053, &v, r);
    em_buf_free(&v);
    return rc;
}

/* goc: GET_OR_CREATE_WITH_NAME (1052). */
static int goc(tc_conn *c, const char *name, tc_reply *r)
{
    em_buf b = EM_BUF_INIT;
    tc_v_str(&b, name);
    int rc = tc_op(c, 1052, &b, r);
    em_buf_free(&b);
    return rc;
}

static int wal_op(tc_conn *c, int op, const char *cache, int en, tc_reply *r)
{
    em_buf b = EM_BUF_INIT;
    tc_v_str(&b, cache);
    if (op == 5002)
        tc_put_u8(&b, (uint8_t)en);
    int rc = tc_op(c, op, &b, r);
    em_buf_free(&b);
    return rc;
}

/* ---- 4: unconfigured data region ---------------------------------------- */

TEST(state_unknown_region_named_in_error)
{
    tc_server s;
    const char *args[] = { "--region:r1:max-size", "1m", "--log-level", "error", NULL };
    REQUIRE_OK(tc_server_start(&s, args));
    tc_conn c;
    REQUIRE_OK(tc_open(&c, s.port));
    tc_reply r;
    CHECK_EQ(create_cfg(&c, "a", "r1", &r), 0);
    CHECK_EQ(create_cfg(&c, "b", "nosuch", &r), 1);
    CHECK(strcmp(r.msg, "Requested DataRegion is not configured: nosuch") == 0);
    if (strcmp(r.msg, "Requested DataRegion is not configured: nosuch"))
        fprintf(stderr, "  got: %s\n", r.msg);
    tc_close(&c);
    CHECK_EQ(tc_server_stop(&s), 0);
}

/* ---- 2: WAL state per cache ---------------------------------------------- */

TEST(state_wal_state_per_region)
{
    char dir[] = "/tmp/ember-state-wal-XXXXXX";
    REQUIRE(mkdtemp(dir));
    tc_server s;
    const char *args[] = { "--wal-path", dir, "--region:durable:persistence", "true",
                           "--log-level", "error", NULL };
    REQUIRE_OK(tc_server_start(&s, args));
    tc_conn c;
    REQUIRE_OK(open17(&c, s.port));
    tc_reply r;
    REQUIRE_EQ(set_state(&c, 1), 0);            /* a persistent node starts inactive */
    REQUIRE_EQ(create_cfg(&c, "dur", "durable", &r), 0);
    REQUIRE_EQ(create_cfg(&c, "mem", NULL, &r), 0);
    CHECK_EQ(wal_op(&c, 5003, "dur", 0, &r), 0);
    CHECK(r.n == 1 && r.p[0] == 1);
    CHECK_EQ(wal_op(&c, 5003, "mem", 0, &r), 0);
    CHECK(r.n == 1 && r.p[0] == 0);             /* memory-only region: no WAL */
    CHECK_EQ(wal_op(&c, 5002, "dur", 1, &r), 0);
    CHECK(r.n == 1 && r.p[0] == 0);             /* already on */
    /* Ignite refuses WAL changes for a group without persistence */
    CHECK_EQ(wal_op(&c, 5002, "mem", 1, &r), 1);
    CHECK(strcmp(r.msg, "Cannot change WAL mode because persistence is not enabled for "
                        "cache(s) [caches=[mem], dataRegion=null]") == 0);
    CHECK_EQ(wal_op(&c, 5002, "mem", 0, &r), 1);
    CHECK(strstr(r.msg, "persistence is not enabled") != NULL);
    CHECK_EQ(wal_op(&c, 5003, "nosuch", 0, &r), 1000);
    tc_close(&c);
    CHECK_EQ(tc_server_stop(&s), 0);
    tc_rm_dir(dir);
}

/* ---- 3: peek modes -------------------------------------------------------- */

/* peek_and_size: LOCAL_PEEK of key 1 and GET_SIZE with the same modes;
 * *found = 1 if the peek returned a value. */
static void peek_and_size(tc_conn *c, const uint8_t *modes, int n, int *found, int64_t *size)
{
    em_buf m = EM_BUF_INIT;
    tc_put_i32(&m, n);
    for (int i = 0; i < n; i++)
        tc_put_u8(&m, modes[i]);
    tc_reply r;
    *found = -1;
    *size = -1;
    if (kv_op(c, 1021, "peek", 1, NULL, &m, &r) == 0)
        *found = !(r.n == 1 && r.p[0] == 101);
    if (kv_op(c, 1020, "peek", NOKEY, NULL, &m, &r) == 0 && r.n == 8) {
        tc_rd d = tc_rd_of(&r);
        *size = tc_rd_i64(&d);
    }
    em_buf_free(&m);
}

TEST(state_peek_modes_agree)
{
    tc_server s;
    REQUIRE_OK(tc_server_start(&s, NULL));
    tc_conn c;
    REQUIRE_OK(tc_open(&c, s.port));
    REQUIRE_OK(tc_create_cache(&c, "peek"));
    REQUIRE_OK(tc_put_int_str(&c, "peek", 1, "v"));
    REQUIRE_OK(tc_put_int_str(&c, "peek", 2, "w"));
    /* One node, everything off-heap: every entry is a primary copy, none is
     * a backup or near copy, none is on the heap. */
    static const struct { uint8_t m[3]; int n; int counted; } cases[] = {
        {{0}, 0, 1},            /* no modes = ALL */
        {{0}, 1, 1},            /* ALL */
        {{2}, 1, 1},            /* PRIMARY */
        {{5}, 1, 1},            /* OFFHEAP */
        {{3}, 1, 0},            /* BACKUP */
        {{1}, 1, 0},            /* NEAR */
        {{4}, 1, 0},            /* ONHEAP */
        {{1, 3}, 2, 0},         /* NEAR + BACKUP */
        {{2, 4}, 2, 0},         /* PRIMARY on the heap */
        {{3, 5}, 2, 0},         /* BACKUP off the heap */
        {{2, 5}, 2, 1},         /* PRIMARY off the heap */
        {{4, 5}, 2, 1},         /* ONHEAP + OFFHEAP = every copy */
        {{2, 3}, 2, 1},         /* PRIMARY + BACKUP */
        {{0, 4}, 2, 1},         /* ALL with anything */
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        int found;
        int64_t size;
        peek_and_size(&c, cases[i].m, cases[i].n, &found, &size);
        if (found != cases[i].counted || size != (cases[i].counted ? 2 : 0)) {
            test_fail(__FILE__, __LINE__, "case %zu: peek found %d, size %lld, want %d", i,
                      found, (long long)size, cases[i].counted);
        }
    }
    tc_close(&c);
    CHECK_EQ(tc_server_stop(&s), 0);
}

/* ---- 1: cluster states ------------------------------------------------------ */

/* EXPECT_REFUSED: the call (its reply in R) refused with status 1 and a message starting with want. */
#define EXPECT_REFUSED(call_, want) do {                                          \
        int st_ = (call_);                                                        \
        if (st_ != 1 || strncmp(R.msg, (want), strlen(want)) != 0)                \
            test_fail(__FILE__, __LINE__, "%s: status %d, msg '%s'", #call_, st_, R.msg); \
    } while (0)

#define RO_MSG(cache) "Failed to perform cache operation (cluster is in read-only mode) " \
    "[cacheGrp=null, cache=" cache "]"

TEST(state_read_only_refuses_writes)
{
    tc_server s;
    REQUIRE_OK(tc_server_start(&s, NULL));
    tc_conn c;
    REQUIRE_OK(open17(&c, s.port));
    tc_reply R;
    REQUIRE_EQ(get_state(&c), 1);
    REQUIRE_OK(tc_create_cache(&c, "ro"));
    REQUIRE_OK(tc_put_int_str(&c, "ro", 1, "one"));
    REQUIRE_EQ(set_state(&c, 2), 0);
    CHECK_EQ(get_state(&c), 2);

    /* reads work */
    char out[16];
    CHECK_EQ(tc_get_int_str(&c, "ro", 1, out, sizeof out), 1);
    CHECK_EQ(kv_op(&c, 1011, "ro", 1, NULL, NULL, &R), 0);     /* CONTAINS_KEY */
    em_buf m = EM_BUF_INIT;
    tc_put_i32(&m, 0);
    CHECK_EQ(kv_op(&c, 1020, "ro", NOKEY, NULL, &m, &R), 0);   /* GET_SIZE */
    CHECK_EQ(kv_op(&c, 1021, "ro", 1, NULL, &m, &R), 0);       /* LOCAL_PEEK */
    em_buf_free(&m);
    em_buf k1 = EM_BUF_INIT;                                   /* int 1, key 1 */
    tc_put_i32(&k1, 1);
    tc_v_int(&k1, 1);
    CHECK_EQ(kv_op(&c, 1003, "ro", NOKEY, NULL, &k1, &R), 0);  /* GET_ALL */
    CHECK_EQ(kv_op(&c, 1012, "ro", NOKEY, NULL, &k1, &R), 0);  /* CONTAINS_KEYS */
    em_buf scan = EM_BUF_INIT;                                 /* null filter, page, part, local */
    tc_v_null(&scan);
    tc_put_i32(&scan, 10);
    tc_put_i32(&scan, -1);
    tc_put_u8(&scan, 0);
    CHECK_EQ(kv_op(&c, 2000, "ro", NOKEY, NULL, &scan, &R), 0);
    CHECK_EQ(tc_op(&c, 1050, NULL, &R), 0);                     /* GET_NAMES */

    /* every modifying op is refused, and changes nothing */
    em_buf kv = EM_BUF_INIT;                                   /* PUT_ALL: 1 pair */
    tc_put_i32(&kv, 1);
    tc_v_int(&kv, 5);
    tc_v_str(&kv, "five");
    em_buf ev = EM_BUF_INIT;                                   /* new value after expected */
    tc_v_str(&ev, "uno");
    static const int with_val[] = {1001, 1002, 1005, 1006, 1008, 1009};
    for (size_t i = 0; i < sizeof with_val / sizeof with_val[0]; i++)
        EXPECT_REFUSED(kv_op(&c, with_val[i], "ro", 1, "x", NULL, &R), RO_MSG("ro"));
    EXPECT_REFUSED(kv_op(&c, 1010, "ro", 1, "one", &ev, &R), RO_MSG("ro"));  /* REPLACE_IF_EQUALS */
    EXPECT_REFUSED(kv_op(&c, 1017, "ro", 1, "one", NULL, &R), RO_MSG("ro")); /* REMOVE_IF_EQUALS */
    static const int key_only[] = {1007, 1014, 1016};
    for (size_t i = 0; i < sizeof key_only / sizeof key_only[0]; i++)
        EXPECT_REFUSED(kv_op(&c, key_only[i], "ro", 1, NULL, NULL, &R), RO_MSG("ro"));
    EXPECT_REFUSED(kv_op(&c, 1004, "ro", NOKEY, NULL, &kv, &R), RO_MSG("ro"));
    EXPECT_REFUSED(kv_op(&c, 1015, "ro", NOKEY, NULL, &k1, &R), RO_MSG("ro"));
    EXPECT_REFUSED(kv_op(&c, 1018, "ro", NOKEY, NULL, &k1, &R), RO_MSG("ro"));
    EXPECT_REFUSED(kv_op(&c, 1013, "ro", NOKEY, NULL, NULL, &R), RO_MSG("ro"));
    EXPECT_REFUSED(kv_op(&c, 1019, "ro", NOKEY, NULL, NULL, &R), RO_MSG("ro"));
    CHECK_EQ(tc_get_int_str(&c, "ro", 1, out, sizeof out), 1);
    CHECK(!strcmp(out, "one"));
    CHECK_EQ(tc_get_int_str(&c, "ro", 5, out, sizeof out), 0);

    /* a new cache cannot start; an existing one is found; destroy is allowed */
    EXPECT_REFUSED(create_cfg(&c, "fresh", NULL, &R),
                   "Failed to perform start cache operation (cluster is in read-only mode) "
                   "[cacheGrp=null, cache=fresh]");
    CHECK_EQ(tc_create_cache(&c, "ro"), 0);                    /* GET_OR_CREATE, exists */
    CHECK_EQ(create_cfg(&c, "ro", NULL, &R), 1001);            /* CREATE, exists */

    /* back to ACTIVE: writes work again */
    REQUIRE_EQ(set_state(&c, 1), 0);
    CHECK_EQ(get_state(&c), 1);
    CHECK_EQ(tc_put_int_str(&c, "ro", 5, "five"), 0);
    CHECK_EQ(set_state(&c, 3), 1);                             /* no such state */
    CHECK_EQ(get_state(&c), 1);
    em_buf_free(&k1);
    em_buf_free(&kv);
    em_buf_free(&ev);
    em_buf_free(&scan);
    tc_close(&c);
    CHECK_EQ(tc_server_stop(&s), 0);
}

TEST(state_inactive_refuses_cache_ops)
{
    tc_server s;
    REQUIRE_OK(tc_server_start(&s, NULL));
    tc_conn c, old;
    REQUIRE_OK(open17(&c, s.port));
    REQUIRE_OK(tc_open(&old, s.port));          /* 1.2.0: no CLUSTER_STATES feature */
    tc_reply R;
    REQUIRE_OK(tc_create_cache(&c, "in"));
    REQUIRE_OK(tc_put_int_str(&c, "in", 1, "one"));
    REQUIRE_EQ(set_state(&c, 2), 0);
    CHECK_EQ(get_state(&old), 1);               /* the bool "active" for old clients */
    REQUIRE_EQ(set_state(&c, 0), 0);
    CHECK_EQ(get_state(&c), 0);
    CHECK_EQ(get_state(&old), 0);

    EXPECT_REFUSED(kv_op(&c, 1000, "in", 1, NULL, NULL, &R), INACTIVE_MSG);
    EXPECT_REFUSED(kv_op(&c, 1001, "in", 1, "x", NULL, &R), INACTIVE_MSG);
    EXPECT_REFUSED(kv_op(&old, 1000, "in", 1, NULL, NULL, &R), INACTIVE_MSG);
    em_buf m = EM_BUF_INIT;
    tc_put_i32(&m, 0);
    EXPECT_REFUSED(kv_op(&c, 1020, "in", NOKEY, NULL, &m, &R), INACTIVE_MSG);
    em_buf_free(&m);
    EXPECT_REFUSED(tc_op(&c, 1050, NULL, &R), INACTIVE_MSG);
    EXPECT_REFUSED(goc(&c, "other", &R), INACTIVE_MSG);
    EXPECT_REFUSED(create_cfg(&c, "other", NULL, &R), INACTIVE_MSG);
    em_buf id = EM_BUF_INIT;
    tc_put_i32(&id, tc_cache_id("in"));
    EXPECT_REFUSED(tc_op(&c, 1056, &id, &R), INACTIVE_MSG);    /* DESTROY */
    em_buf_free(&id);
    /* cluster and binary-type ops still answer */
    CHECK_EQ(get_state(&c), 0);

    /* Reactivation: Ignite's deactivation dropped the in-memory data; the
     * cache itself is back, empty. */
    REQUIRE_EQ(set_state(&c, 1), 0);
    CHECK_EQ(get_state(&old), 1);
    char out[16];
    CHECK_EQ(tc_get_int_str(&c, "in", 1, out, sizeof out), 0);
    CHECK_EQ(tc_put_int_str(&c, "in", 1, "again"), 0);
    CHECK_EQ(tc_get_int_str(&c, "in", 1, out, sizeof out), 1);
    tc_close(&old);
    tc_close(&c);
    CHECK_EQ(tc_server_stop(&s), 0);
}

/* A persistent node starts INACTIVE the first time (Ignite: no baseline
 * yet), and after that in the state it was last set to. */
TEST(state_persistent_start_and_restore)
{
    char dir[] = "/tmp/ember-state-p-XXXXXX";
    REQUIRE(mkdtemp(dir));
    const char *args[] = { "--persistence", "true", "--wal-path", dir, "--log-level", "error",
                           NULL };
    tc_server s;
    REQUIRE_OK(tc_server_start(&s, args));
    tc_conn c;
    tc_reply R;
    REQUIRE_OK(open17(&c, s.port));
    CHECK_EQ(get_state(&c), 0);
    EXPECT_REFUSED(goc(&c, "p", &R), INACTIVE_MSG);
    REQUIRE_EQ(set_state(&c, 1), 0);
    REQUIRE_OK(tc_create_cache(&c, "p"));
    REQUIRE_OK(tc_put_int_str(&c, "p", 1, "one"));
    REQUIRE_EQ(set_state(&c, 2), 0);
    tc_close(&c);
    tc_server_kill9(&s);

    REQUIRE_OK(tc_server_start(&s, args));
    REQUIRE_OK(open17(&c, s.port));
    CHECK_EQ(get_state(&c), 2);                 /* read-only survived a crash */
    char out[16];
    CHECK_EQ(tc_get_int_str(&c, "p", 1, out, sizeof out), 1);
    EXPECT_REFUSED(kv_op(&c, 1001, "p", 2, "two", NULL, &R), RO_MSG("p"));
    REQUIRE_EQ(set_state(&c, 0), 0);
    tc_close(&c);
    CHECK_EQ(tc_server_stop(&s), 0);

    REQUIRE_OK(tc_server_start(&s, args));
    REQUIRE_OK(open17(&c, s.port));
    CHECK_EQ(get_state(&c), 0);                 /* deactivated stays so */
    REQUIRE_EQ(set_state(&c, 1), 0);
    CHECK_EQ(tc_get_int_str(&c, "p", 1, out, sizeof out), 1);   /* persistent data kept */
    tc_close(&c);
    CHECK_EQ(tc_server_stop(&s), 0);

    REQUIRE_OK(tc_server_start(&s, args));
    REQUIRE_OK(open17(&c, s.port));
    CHECK_EQ(get_state(&c), 1);
    CHECK_EQ(tc_put_int_str(&c, "p", 2, "two"), 0);
    tc_close(&c);
    CHECK_EQ(tc_server_stop(&s), 0);
    tc_rm_dir(dir);
}

/* cli: runs $EMBER_BUILD/ember-cli --port port args; its first output line
 * in out and its exit code. */
static int cli(int port, const char *args, char *out, size_t cap)
{
    const char *b = getenv("EMBER_BUILD");
    char cmd[1024];
    snprintf(cmd, sizeof cmd, "%s/ember-cli --port %d %s 2>&1", b && *b ? b : "build", port, args);
    FILE *f = popen(cmd, "r");
    if (!f)
        return -1;
    out[0] = 0;
    if (fgets(out, (int)cap, f))
        out[strcspn(out, "\n")] = 0;
    char skip[256];
    while (fgets(skip, sizeof skip, f))
        ;
    int st = pclose(f);
    return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

/* An operator activates a persistent emberd with ember-cli (Node 1.0.0 has
 * no cluster API). */
TEST(state_cli_reads_and_sets_the_state)
{
    char dir[] = "/tmp/ember-state-cli-XXXXXX";
    REQUIRE(mkdtemp(dir));
    const char *args[] = { "--persistence", "true", "--wal-path", dir, "--log-level", "error",
                           NULL };
    tc_server s;
    REQUIRE_OK(tc_server_start(&s, args));
    char out[256];
    CHECK_EQ(cli(s.port, "state", out, sizeof out), 0);
    CHECK(!strcmp(out, "INACTIVE"));
    CHECK_EQ(cli(s.port, "create x", out, sizeof out), 1);      /* refused while inactive */
    CHECK_EQ(cli(s.port, "state active_read_only", out, sizeof out), 0);
    CHECK(!strcmp(out, "ACTIVE_READ_ONLY"));
    CHECK_EQ(cli(s.port, "--json state ACTIVE", out, sizeof out), 0);
    CHECK(!strcmp(out, "{\"ok\":true,\"state\":\"ACTIVE\"}"));
    CHECK_EQ(cli(s.port, "create x", out, sizeof out), 0);
    CHECK_EQ(cli(s.port, "state BOGUS", out, sizeof out), 2);
    CHECK_EQ(cli(s.port, "state ACTIVE INACTIVE", out, sizeof out), 2);
    CHECK_EQ(cli(s.port, "--protocol 1.2.0 state", out, sizeof out), 0);
    CHECK(!strncmp(out, "ACTIVE", 6));
    CHECK_EQ(tc_server_stop(&s), 0);
    tc_rm_dir(dir);
}
