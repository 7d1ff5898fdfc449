/* test_proto.c - protocol tests against a real emberd for what the Node.js
 * client never sends: handshakes at 1.0.0-1.7.0, feature negotiation, the
 * >= 1.4.0 response header, version retry on one socket, CACHE_PARTITIONS,
 * expiry policy, heartbeat, unknown and unimplemented op codes.
 * Layouts: shared/reference/ignite-thin-protocol.md §1, §2, §4.
 */
#include "client.h"
#include "test.h"

#include "util/err.h"
#include "util/mem.h"

#include <stdlib.h>
#include <string.h>
#include <time.h>

#define START(s) tc_server s; REQUIRE_OK(tc_server_start(&s, NULL))
#define STOP(s) CHECK_EQ(tc_server_stop(&s), 0)

/* get_names: CACHE_GET_NAMES; returns the status (0) or a negative code and
 * fills *r. */
static int get_names(tc_conn *c, tc_reply *r)
{
    em_buf b = EM_BUF_INIT;
    tc_req_begin(c, &b, 1050);
    tc_req_end(&b);
    int rc = tc_call(c, &b, r);
    em_buf_free(&b);
    return rc;
}

/* Versions before 1.4.0 answer success with exactly 01000000 01 and use the
 * old header (request id + int status). */
static void check_old_version(int minor)
{
    START(s);
    tc_conn c;
    REQUIRE_OK(tc_connect(&c, s.port));
    em_buf m = EM_BUF_INIT;
    tc_handshake_msg(&m, 1, minor, 0, NULL, 0);
    CHECK_OK(tc_send(&c, m.p, m.len));
    em_buf_free(&m);
    int rc = tc_recv_frame(&c, 2000);
    CHECK_OK(rc);
    if (rc == 0) {
        CHECK_EQ(c.in.len, 1);
        CHECK_EQ(c.in.p[0], 1);
    }
    c.ver = TC_VER(1, minor, 0);
    tc_reply r;
    rc = get_names(&c, &r);
    CHECK_OK(rc);
    if (rc == 0) {
        CHECK_EQ(r.status, 0);
        tc_rd d = tc_rd_of(&r);
        int32_t n = tc_rd_i32(&d);
        CHECK(n >= 0);
        CHECK(!d.err);
    }
    tc_close(&c);
    STOP(s);
}

TEST(proto_handshake_1_0_0) { check_old_version(0); }
TEST(proto_handshake_1_1_0) { check_old_version(1); }
TEST(proto_handshake_1_2_0) { check_old_version(2); }
TEST(proto_handshake_1_3_0) { check_old_version(3); }

/* 1.4.0: reply = 01 + typed UUID; first response carries
 * AFFINITY_TOPOLOGY_CHANGED + version, later ones do not; one node id for
 * every connection. */
TEST(proto_handshake_1_4_0_flags_header)
{
    START(s);
    tc_conn c, c2;
    REQUIRE_OK(tc_connect(&c, s.port));
    REQUIRE_EQ(tc_handshake(&c, 1, 4, 0, NULL, 0), 1);
    CHECK(c.has_node_id);
    CHECK_EQ(c.in.len, 18);
    tc_reply r;
    REQUIRE_OK(get_names(&c, &r));
    CHECK_EQ(r.flags & 1, 0);
    CHECK_EQ(r.topo_changed, 1);
    CHECK(r.topo_major >= 1);
    tc_rd d = tc_rd_of(&r);
    CHECK(tc_rd_i32(&d) >= 0);
    CHECK(!d.err);
    REQUIRE_OK(get_names(&c, &r));
    CHECK_EQ(r.flags, 0);
    CHECK_EQ(r.topo_changed, 0);

    /* error replies in the flags format: flag 1 + status + message */
    em_buf b = EM_BUF_INIT;
    tc_req_begin(&c, &b, 1000);
    tc_cache_hdr(&b, tc_cache_id("no-such-cache-14"), 0);
    tc_v_int(&b, 1);
    tc_req_end(&b);
    REQUIRE_OK(tc_call(&c, &b, &r));
    CHECK_EQ(r.flags & 1, 1);
    CHECK_EQ(r.status, 1000);
    CHECK(r.msg[0] != 0);
    CHECK_EQ(r.n, 0);
    em_buf_free(&b);

    REQUIRE_OK(tc_connect(&c2, s.port));
    REQUIRE_EQ(tc_handshake(&c2, 1, 4, 0, NULL, 0), 1);
    CHECK_MEM(c.node_id, c2.node_id, 16);
    REQUIRE_OK(get_names(&c2, &r));
    CHECK_EQ(r.topo_changed, 1);
    tc_close(&c2);
    tc_close(&c);
    STOP(s);
}

TEST(proto_handshake_1_5_0_and_1_6_0)
{
    START(s);
    for (int minor = 5; minor <= 6; minor++) {
        tc_conn c;
        REQUIRE_OK(tc_connect(&c, s.port));
        REQUIRE_EQ(tc_handshake(&c, 1, minor, 0, NULL, 0), 1);
        CHECK(c.has_node_id);
        CHECK_OK(tc_create_cache(&c, "v15"));
        CHECK_OK(tc_put_int_str(&c, "v15", minor, "x"));
        char got[16];
        CHECK_EQ(tc_get_int_str(&c, "v15", minor, got, sizeof got), 1);
        tc_close(&c);
    }
    STOP(s);
}

/* 1.7.0: the reply's feature array is the intersection of the client's and
 * the server's sets.  Learn the server's set with (almost) all bits, then
 * check exact intersections with narrower masks. */
TEST(proto_handshake_1_7_0_features)
{
    START(s);
    tc_conn c;
    /* bit 0 (USER_ATTRIBUTES) would need an attribute map: leave it out */
    uint8_t all[4] = {0xfe, 0xff, 0xff, 0xff};
    REQUIRE_OK(tc_connect(&c, s.port));
    REQUIRE_EQ(tc_handshake(&c, 1, 7, 0, all, 4), 1);
    CHECK(c.has_node_id);
    uint8_t srv[16] = {0};
    int nsrv = c.nfeatures;
    memcpy(srv, c.features, (size_t)nsrv);
    CHECK(nsrv <= 4);
    /* the issue requires heartbeat (11); cluster states (2) is what pyignite sends */
    CHECK(nsrv >= 2 && (srv[1] & 0x08));
    tc_close(&c);

    const uint8_t masks[][4] = {
        {0x04, 0x00, 0x00, 0x00},          /* pyignite: cluster states only */
        {0x00, 0x08, 0x00, 0x00},          /* heartbeat only */
        {0x04, 0x08, 0x00, 0x40},          /* + an unknown bit 30 */
        {0x00, 0x00, 0x00, 0x80},          /* only an unknown bit */
    };
    for (size_t i = 0; i < sizeof masks / sizeof masks[0]; i++) {
        REQUIRE_OK(tc_connect(&c, s.port));
        REQUIRE_EQ(tc_handshake(&c, 1, 7, 0, masks[i], 4), 1);
        for (int k = 0; k < 4; k++) {
            uint8_t want = masks[i][k] & (k < nsrv ? srv[k] : 0);
            uint8_t got = k < c.nfeatures ? c.features[k] : 0;
            if (got != want)
                test_fail(__FILE__, __LINE__, "mask %zu byte %d: got %02x want %02x",
                          i, k, got, want);
        }
        for (int k = 4; k < c.nfeatures; k++)
            CHECK_EQ(c.features[k], 0);
        tc_reply r;
        CHECK_OK(get_names(&c, &r));
        tc_close(&c);
    }
    /* an empty feature array is valid */
    REQUIRE_OK(tc_connect(&c, s.port));
    REQUIRE_EQ(tc_handshake(&c, 1, 7, 0, NULL, 0), 1);
    for (int k = 0; k < c.nfeatures; k++)
        CHECK_EQ(c.features[k], 0);
    tc_close(&c);
    STOP(s);
}

/* An unsupported version gets a failure naming a version the server speaks;
 * the client retries on the same socket and succeeds. */
static void check_retry(int a, int b, int cc)
{
    START(s);
    tc_conn c;
    REQUIRE_OK(tc_connect(&c, s.port));
    int rc = tc_handshake(&c, a, b, cc, NULL, 0);
    REQUIRE_EQ(rc, 0);
    tc_rd d = {c.in.p, c.in.len, 0, 0};
    CHECK_EQ(tc_rd_u8(&d), 0);
    int ma = tc_rd_i16(&d), mi = tc_rd_i16(&d), pa = tc_rd_i16(&d);
    char msg[256];
    tc_rd_str(&d, msg, sizeof msg);
    CHECK(!d.err);
    CHECK(msg[0] != 0);
    if (TC_VER(a, b, cc) >= TC_VER(1, 1, 0)) {
        int32_t status = tc_rd_i32(&d);
        CHECK(!d.err);
        CHECK_EQ(status, 1);
    }
    CHECK_EQ(d.pos, c.in.len);
    CHECK_EQ(ma, 1);
    CHECK(mi >= 0 && mi <= 7);
    CHECK_EQ(pa, 0);
    rc = tc_handshake(&c, ma, mi, pa, NULL, 0);
    CHECK_EQ(rc, 1);
    if (rc == 1) {
        CHECK_OK(tc_create_cache(&c, "retry"));
        CHECK_OK(tc_put_int_str(&c, "retry", 1, "one"));
        char got[16];
        CHECK_EQ(tc_get_int_str(&c, "retry", 1, got, sizeof got), 1);
        CHECK(strcmp(got, "one") == 0);
    }
    tc_close(&c);
    STOP(s);
}

TEST(proto_version_1_99_0_retry_same_socket) { check_retry(1, 99, 0); }
TEST(proto_version_2_0_0_retry_same_socket) { check_retry(2, 0, 0); }
TEST(proto_version_1_8_0_retry_same_socket) { check_retry(1, 8, 0); }

/* Node 1.0.0's own fallback: after a failure it resends 1.1.0 on the socket. */
TEST(proto_version_retry_with_1_1_0)
{
    START(s);
    tc_conn c;
    REQUIRE_OK(tc_connect(&c, s.port));
    REQUIRE_EQ(tc_handshake(&c, 3, 0, 0, NULL, 0), 0);
    CHECK_EQ(tc_handshake(&c, 1, 1, 0, NULL, 0), 1);
    CHECK_OK(tc_create_cache(&c, "retry110"));
    tc_close(&c);
    STOP(s);
}

/* CACHE_PARTITIONS (1101) on one node: one applicable group containing the
 * cache, one node (the handshake's node id) owning every partition exactly
 * once; and keys really live in the partition §4.2 computes (checked with a
 * partition-restricted scan). */
static int32_t int_partition(int32_t h, int32_t parts)
{
    if ((parts & (parts - 1)) == 0)
        return (int32_t)(((uint32_t)h ^ ((uint32_t)h >> 16)) & (uint32_t)(parts - 1));
    int32_t p = h % parts;
    return p < 0 ? -p : p;
}

/* scan_count: rows of a scan over one partition (page size 100). */
static int scan_count(tc_conn *c, const char *cache, int32_t part, int32_t *first_key)
{
    em_buf b = EM_BUF_INIT;
    tc_reply r;
    tc_req_begin(c, &b, 2000);
    tc_cache_hdr(&b, tc_cache_id(cache), 0);
    tc_v_null(&b);
    tc_put_i32(&b, 100);
    tc_put_i32(&b, part);
    tc_put_u8(&b, 0);
    tc_req_end(&b);
    int rc = tc_call(c, &b, &r);
    em_buf_free(&b);
    if (rc)
        return rc;
    if (r.status)
        return EM_PROTO;
    tc_rd d = tc_rd_of(&r);
    tc_rd_i64(&d);
    int32_t rows = tc_rd_i32(&d);
    if (rows > 0 && first_key) {
        if (tc_rd_u8(&d) == 3)
            *first_key = tc_rd_i32(&d);
    }
    return d.err ? EM_TRUNCATED : rows;
}

TEST(proto_cache_partitions_single_node)
{
    START(s);
    tc_conn c;
    REQUIRE_OK(tc_connect(&c, s.port));
    REQUIRE_EQ(tc_handshake(&c, 1, 4, 0, NULL, 0), 1);
    REQUIRE_OK(tc_create_cache(&c, "parts"));
    int32_t cid = tc_cache_id("parts");
    em_buf b = EM_BUF_INIT;
    tc_reply r;
    tc_req_begin(&c, &b, 1101);
    tc_put_i32(&b, 1);
    tc_put_i32(&b, cid);
    tc_req_end(&b);
    REQUIRE_OK(tc_call(&c, &b, &r));
    em_buf_free(&b);
    REQUIRE_EQ(r.status, 0);
    tc_rd d = tc_rd_of(&r);
    int64_t tmaj = tc_rd_i64(&d);
    tc_rd_i32(&d);
    CHECK(tmaj >= 1);
    int32_t groups = tc_rd_i32(&d);
    CHECK(groups >= 1);
    int found = 0, nparts = 0;
    uint8_t *seen = NULL;
    for (int g = 0; g < groups && !d.err; g++) {
        int applicable = tc_rd_u8(&d);
        int32_t ncaches = tc_rd_i32(&d);
        int has = 0;
        for (int i = 0; i < ncaches && !d.err; i++) {
            int32_t id = tc_rd_i32(&d);
            if (id == cid)
                has = 1;
            if (applicable) {
                int32_t nk = tc_rd_i32(&d);
                CHECK_EQ(nk, 0);
                for (int k = 0; k < nk && !d.err; k++) {
                    tc_rd_i32(&d);
                    tc_rd_i32(&d);
                }
            }
        }
        if (has) {
            found = 1;
            CHECK(applicable);
        }
        if (!applicable)
            continue;
        int32_t nodes = tc_rd_i32(&d);
        if (has)
            CHECK_EQ(nodes, 1);
        for (int nd = 0; nd < nodes && !d.err; nd++) {
            CHECK_EQ(tc_rd_u8(&d), 10);
            uint8_t uuid[16];
            for (int k = 0; k < 16; k++)
                uuid[k] = tc_rd_u8(&d);
            CHECK_MEM(uuid, c.node_id, 16);
            int32_t np = tc_rd_i32(&d);
            if (has) {
                CHECK(np > 0 && np <= 65000);
                nparts = np;
                seen = em_calloc((size_t)(np > 0 ? np : 1), 1);
            }
            for (int k = 0; k < np && !d.err; k++) {
                int32_t p = tc_rd_i32(&d);
                if (has && seen && p >= 0 && p < np)
                    seen[p]++;
                else if (has)
                    test_fail(__FILE__, __LINE__, "partition %d out of range", p);
            }
        }
    }
    CHECK(!d.err);
    CHECK_EQ(d.pos, r.n);
    CHECK(found);
    if (seen) {
        for (int p = 0; p < nparts; p++)
            if (seen[p] != 1)
                test_fail(__FILE__, __LINE__, "partition %d listed %d times", p, seen[p]);
        em_free(seen);
    }
    REQUIRE(nparts > 0);
    if (nparts == 1024) {
        /* reference §4.2 examples */
        CHECK_EQ(int_partition(1, 1024), 1);
        CHECK_EQ(int_partition(12345, 1024), 57);
        CHECK_EQ(int_partition(-1, 1024), 0);
    }
    /* keys are stored where a partition-aware client sends them */
    const int32_t keys[] = {1, 12345, -1, 77777, 2000000000};
    for (size_t i = 0; i < sizeof keys / sizeof keys[0]; i++) {
        REQUIRE_OK(tc_put_int_str(&c, "parts", keys[i], "v"));
        int32_t p = int_partition(keys[i], nparts);
        int32_t k0 = 0;
        int n = scan_count(&c, "parts", p, &k0);
        CHECK_EQ(n, 1);
        CHECK_EQ(k0, keys[i]);
        CHECK_EQ(scan_count(&c, "parts", (p + 1) % nparts, NULL), 0);
        em_buf rb = EM_BUF_INIT;
        tc_req_begin(&c, &rb, 1016);
        tc_cache_hdr(&rb, cid, 0);
        tc_v_int(&rb, keys[i]);
        tc_req_end(&rb);
        CHECK_OK(tc_call(&c, &rb, &r));
        em_buf_free(&rb);
    }
    tc_close(&c);
    STOP(s);
}

/* Unknown op codes: status 2, "Invalid request op code", connection usable. */
static void check_unknown_op(int minor)
{
    START(s);
    tc_conn c;
    REQUIRE_OK(tc_connect(&c, s.port));
    REQUIRE_EQ(tc_handshake(&c, 1, minor, 0, NULL, 0), 1);
    const int ops[] = {3, 999, 1099, 12345, -5, 32767};
    for (size_t i = 0; i < sizeof ops / sizeof ops[0]; i++) {
        em_buf b = EM_BUF_INIT;
        tc_reply r;
        int64_t rid = tc_req_begin(&c, &b, ops[i]);
        tc_put_i32(&b, 42); /* some payload the server must skip */
        tc_req_end(&b);
        int rc = tc_call(&c, &b, &r);
        em_buf_free(&b);
        CHECK_OK(rc);
        if (rc)
            break;
        CHECK_EQ(r.rid, rid);
        CHECK_EQ(r.status, 2);
        CHECK(strstr(r.msg, "Invalid request op code") != NULL);
        CHECK_EQ(r.n, 0);
    }
    CHECK_OK(tc_create_cache(&c, "after-unknown"));
    CHECK_OK(tc_put_int_str(&c, "after-unknown", 5, "five"));
    tc_close(&c);
    STOP(s);
}

TEST(proto_unknown_op_code_1_2_0) { check_unknown_op(2); }
TEST(proto_unknown_op_code_1_7_0) { check_unknown_op(7); }

/* SQL works (QUERY_SQL_FIELDS as Node sends it); QUERY_SQL for an unknown
 * type, transactions, compute, services: an error reply, never a hang or a
 * dropped connection. */
TEST(proto_unimplemented_ops_error_reply)
{
    START(s);
    tc_conn c;
    REQUIRE_OK(tc_connect(&c, s.port));
    REQUIRE_EQ(tc_handshake(&c, 1, 7, 0, NULL, 0), 1);
    REQUIRE_OK(tc_create_cache(&c, "sql"));
    em_buf b = EM_BUF_INIT;
    tc_reply r;
    /* QUERY_SQL_FIELDS exactly as Node 1.0.0 sends it (reference §8) */
    tc_req_begin(&c, &b, 2004);
    tc_cache_hdr(&b, tc_cache_id("sql"), 0);
    tc_v_null(&b);
    tc_put_i32(&b, 1024);
    tc_put_i32(&b, -1);
    tc_v_str(&b, "SELECT 5 AS A");
    tc_put_i32(&b, 0);
    for (int i = 0; i < 7; i++)
        tc_put_u8(&b, 0);
    tc_put_i64(&b, 0);
    tc_put_u8(&b, 1);
    tc_req_end(&b);
    REQUIRE_OK(tc_call(&c, &b, &r));
    CHECK_EQ(r.status, 0);
    /* QUERY_SQL (2002) of a type with no table */
    tc_req_begin(&c, &b, 2002);
    tc_cache_hdr(&b, tc_cache_id("sql"), 0);
    tc_v_str(&b, "Person");
    tc_v_str(&b, "age > ?");
    tc_put_i32(&b, 1);
    tc_v_int(&b, 3);
    tc_put_u8(&b, 0);
    tc_put_u8(&b, 0);
    tc_put_u8(&b, 0);
    tc_put_i32(&b, 100);
    tc_put_i64(&b, 0);
    tc_req_end(&b);
    REQUIRE_OK(tc_call(&c, &b, &r));
    CHECK(r.status != 0);
    /* TX_START (4000) is supported now (test_tx.c): an id, then rolled back */
    tc_req_begin(&c, &b, 4000);
    tc_put_u8(&b, 1);
    tc_put_u8(&b, 1);
    tc_put_i64(&b, 0);
    tc_v_null(&b);
    tc_req_end(&b);
    REQUIRE_OK(tc_call(&c, &b, &r));
    CHECK_EQ(r.status, 0);
    CHECK_EQ(r.n, 4);
    int32_t txid = r.n == 4 ? (int32_t)em_ld32(r.p) : 0;
    tc_req_begin(&c, &b, 4001);
    tc_put_i32(&b, txid);
    tc_put_u8(&b, 0);
    tc_req_end(&b);
    REQUIRE_OK(tc_call(&c, &b, &r));
    CHECK_EQ(r.status, 0);
    /* COMPUTE_TASK_EXECUTE (6000), SERVICE_INVOKE (7000) */
    const int ops[] = {6000, 7000, 2006, 8000, 9000};
    for (size_t i = 0; i < sizeof ops / sizeof ops[0]; i++) {
        tc_req_begin(&c, &b, ops[i]);
        tc_put_i32(&b, 0);
        tc_put_i64(&b, 0);
        tc_req_end(&b);
        int rc = tc_call(&c, &b, &r);
        CHECK_OK(rc);
        if (rc)
            break;
        CHECK(r.status != 0);
        CHECK(r.msg[0] != 0);
    }
    em_buf_free(&b);
    CHECK_OK(tc_put_int_str(&c, "sql", 1, "still-here"));
    tc_close(&c);
    CHECK_OK(tc_sanity(s.port));
    STOP(s);
}

/* Request ids are echoed, whatever their order (Node sends rid 3 before 2). */
TEST(proto_request_ids_echoed)
{
    START(s);
    tc_conn c;
    REQUIRE_OK(tc_open(&c, s.port));
    const int64_t ids[] = {5, 3, 3, -1, 0x7fffffffffffffffLL, 0};
    for (size_t i = 0; i < sizeof ids / sizeof ids[0]; i++) {
        em_buf b = EM_BUF_INIT;
        tc_reply r;
        tc_req_begin(&c, &b, 1050);
        tc_req_end(&b);
        em_st64(b.p + 6, (uint64_t)ids[i]);
        CHECK_OK(tc_call(&c, &b, &r));
        CHECK_EQ(r.rid, ids[i]);
        em_buf_free(&b);
    }
    tc_close(&c);
    STOP(s);
}

/* 1.6.0: cache-op flag 0x04 + expiry policy (create, update, access ms). */
TEST(proto_expiry_policy_1_6_0)
{
    START(s);
    tc_conn c;
    REQUIRE_OK(tc_connect(&c, s.port));
    REQUIRE_EQ(tc_handshake(&c, 1, 6, 0, NULL, 0), 1);
    REQUIRE_OK(tc_create_cache(&c, "ttl"));
    int32_t cid = tc_cache_id("ttl");
    em_buf b = EM_BUF_INIT;
    tc_reply r;
    tc_req_begin(&c, &b, 1001);
    tc_cache_hdr(&b, cid, 0x04);
    tc_put_i64(&b, 1000); /* create: expires 1 s after creation */
    tc_put_i64(&b, -2);   /* update: unchanged */
    tc_put_i64(&b, -2);   /* access: unchanged */
    tc_v_int(&b, 1);
    tc_v_str(&b, "short-lived");
    tc_req_end(&b);
    REQUIRE_OK(tc_call(&c, &b, &r));
    CHECK_EQ(r.status, 0);
    em_buf_free(&b);
    REQUIRE_OK(tc_put_int_str(&c, "ttl", 2, "eternal"));
    char got[32];
    CHECK_EQ(tc_get_int_str(&c, "ttl", 1, got, sizeof got), 1);
    int gone = 0;
    for (int i = 0; i < 80 && !gone; i++) {
        tc_sleep_ms(50);
        int g = tc_get_int_str(&c, "ttl", 1, got, sizeof got);
        CHECK(g >= 0);
        gone = g == 0;
    }
    CHECK(gone);
    CHECK_EQ(tc_get_int_str(&c, "ttl", 2, got, sizeof got), 1);
    tc_close(&c);
    STOP(s);
}

/* Heartbeat (1) and GET_IDLE_TIMEOUT (2) when feature 11 was negotiated. */
TEST(proto_heartbeat_feature_11)
{
    START(s);
    tc_conn c;
    uint8_t f[2] = {0x00, 0x08};
    REQUIRE_OK(tc_connect(&c, s.port));
    REQUIRE_EQ(tc_handshake(&c, 1, 7, 0, f, 2), 1);
    REQUIRE(c.nfeatures >= 2 && (c.features[1] & 0x08));
    em_buf b = EM_BUF_INIT;
    tc_reply r;
    for (int i = 0; i < 3; i++) {
        tc_req_begin(&c, &b, 1);
        tc_req_end(&b);
        REQUIRE_OK(tc_call(&c, &b, &r));
        CHECK_EQ(r.flags & 1, 0);
        CHECK_EQ(r.n, 0);
    }
    tc_req_begin(&c, &b, 2);
    tc_req_end(&b);
    REQUIRE_OK(tc_call(&c, &b, &r));
    CHECK_EQ(r.flags & 1, 0);
    CHECK_EQ(r.n, 8);
    tc_rd d = tc_rd_of(&r);
    CHECK(tc_rd_i64(&d) >= 0);
    em_buf_free(&b);
    tc_close(&c);
    STOP(s);
}

/* Cluster state (5000), which clients call on connect: ACTIVE. */
TEST(proto_cluster_state)
{
    START(s);
    tc_conn c;
    uint8_t f[1] = {0x04};
    REQUIRE_OK(tc_connect(&c, s.port));
    REQUIRE_EQ(tc_handshake(&c, 1, 7, 0, f, 1), 1);
    em_buf b = EM_BUF_INIT;
    tc_reply r;
    tc_req_begin(&c, &b, 5000);
    tc_req_end(&b);
    REQUIRE_OK(tc_call(&c, &b, &r));
    CHECK_EQ(r.flags & 1, 0);
    CHECK_EQ(r.n, 1);
    if (r.n == 1)
        CHECK_EQ(r.p[0], 1);
    em_buf_free(&b);
    tc_close(&c);
    STOP(s);
}

/* RESOURCE_CLOSE of an unknown cursor: 1011, connection usable. */
TEST(proto_resource_close_unknown)
{
    START(s);
    tc_conn c;
    REQUIRE_OK(tc_open(&c, s.port));
    em_buf b = EM_BUF_INIT;
    tc_reply r;
    tc_req_begin(&c, &b, 0);
    tc_put_i64(&b, 987654321);
    tc_req_end(&b);
    REQUIRE_OK(tc_call(&c, &b, &r));
    CHECK_EQ(r.status, 1011);
    tc_req_begin(&c, &b, 2001);
    tc_put_i64(&b, 987654321);
    tc_req_end(&b);
    REQUIRE_OK(tc_call(&c, &b, &r));
    CHECK_EQ(r.status, 1011);
    em_buf_free(&b);
    CHECK_OK(tc_create_cache(&c, "rc"));
    tc_close(&c);
    STOP(s);
}

/* A cache op before the handshake is not accepted. */
TEST(proto_no_op_before_handshake)
{
    START(s);
    tc_conn c;
    REQUIRE_OK(tc_connect(&c, s.port));
    em_buf b = EM_BUF_INIT;
    tc_req_begin(&c, &b, 1052);
    tc_v_str(&b, "sneaky");
    tc_req_end(&b);
    CHECK_OK(tc_send(&c, b.p, b.len));
    em_buf_free(&b);
    /* either a handshake failure reply (first byte 0) or a close */
    int rc = tc_recv_frame(&c, 1000);
    if (rc == 0)
        CHECK(c.in.len >= 1 && c.in.p[0] == 0);
    else
        CHECK(rc == EM_CLOSED);
    tc_close(&c);
    /* the cache was not created */
    REQUIRE_OK(tc_open(&c, s.port));
    tc_reply r;
    REQUIRE_OK(get_names(&c, &r));
    tc_rd d = tc_rd_of(&r);
    int32_t n = tc_rd_i32(&d);
    for (int i = 0; i < n && !d.err; i++) {
        char name[64];
        tc_rd_str(&d, name, sizeof name);
        CHECK(strcmp(name, "sneaky") != 0);
    }
    tc_close(&c);
    STOP(s);
}

/* Handshake and requests arriving one byte at a time (within the handshake
 * timeout) are reassembled; several requests in one write are all answered,
 * in order. */
TEST(proto_fragmented_and_batched_requests)
{
    START(s);
    tc_conn c;
    REQUIRE_OK(tc_connect(&c, s.port));
    em_buf m = EM_BUF_INIT;
    tc_handshake_msg(&m, 1, 2, 0, NULL, 0);
    for (size_t i = 0; i < m.len; i++) {
        REQUIRE_OK(tc_send(&c, m.p + i, 1));
        tc_sleep_ms(5);
    }
    REQUIRE_OK(tc_recv_frame(&c, 2000));
    REQUIRE_EQ(c.in.len, 1);
    CHECK_EQ(c.in.p[0], 1);
    REQUIRE_OK(tc_create_cache(&c, "frag"));
    /* a PUT byte by byte */
    tc_req_begin(&c, &m, 1001);
    tc_cache_hdr(&m, tc_cache_id("frag"), 0);
    tc_v_int(&m, 1);
    tc_v_str(&m, "pieces");
    tc_req_end(&m);
    int64_t rid = (int64_t)em_ld64(m.p + 6);
    for (size_t i = 0; i < m.len; i++) {
        REQUIRE_OK(tc_send(&c, m.p + i, 1));
        tc_sleep_ms(2);
    }
    tc_reply r;
    REQUIRE_OK(tc_recv_frame(&c, 2000));
    REQUIRE_OK(tc_parse_reply(&c, &r));
    CHECK_EQ(r.rid, rid);
    CHECK_EQ(r.status, 0);
    /* ten GETs in one write, the last one split from the rest */
    em_buf all = EM_BUF_INIT;
    int64_t first = c.rid;
    for (int i = 0; i < 10; i++) {
        tc_req_begin(&c, &m, 1000);
        tc_cache_hdr(&m, tc_cache_id("frag"), 0);
        tc_v_int(&m, i % 2 ? 1 : 2);
        tc_req_end(&m);
        tc_put_bytes(&all, m.p, m.len);
    }
    REQUIRE_OK(tc_send(&c, all.p, all.len - 7));
    tc_sleep_ms(50);
    REQUIRE_OK(tc_send(&c, all.p + all.len - 7, 7));
    for (int i = 0; i < 10; i++) {
        REQUIRE_OK(tc_recv_frame(&c, 2000));
        REQUIRE_OK(tc_parse_reply(&c, &r));
        CHECK_EQ(r.rid, first + i);
        CHECK_EQ(r.status, 0);
        if (i % 2)
            CHECK(r.n == 11 && memcmp(r.p, "\x09\x06\x00\x00\x00" "pieces", 11) == 0);
        else
            CHECK(r.n == 1 && r.p[0] == 101);
    }
    em_buf_free(&all);
    em_buf_free(&m);
    tc_close(&c);
    STOP(s);
}

/* LOCAL_PEEK (1021), which Node 1.0.0 lacks: value or null. */
TEST(proto_local_peek)
{
    START(s);
    tc_conn c;
    REQUIRE_OK(tc_connect(&c, s.port));
    REQUIRE_EQ(tc_handshake(&c, 1, 4, 0, NULL, 0), 1);
    REQUIRE_OK(tc_create_cache(&c, "peek"));
    REQUIRE_OK(tc_put_int_str(&c, "peek", 1, "seen"));
    em_buf b = EM_BUF_INIT;
    tc_reply r;
    for (int k = 1; k <= 2; k++) {
        tc_req_begin(&c, &b, 1021);
        tc_cache_hdr(&b, tc_cache_id("peek"), 0);
        tc_v_int(&b, k);
        tc_put_i32(&b, 1);
        tc_put_u8(&b, 0);
        tc_req_end(&b);
        REQUIRE_OK(tc_call(&c, &b, &r));
        CHECK_EQ(r.flags & 1, 0);
        if (k == 1)
            CHECK(r.n == 9 && memcmp(r.p, "\x09\x04\x00\x00\x00" "seen", 9) == 0);
        else
            CHECK(r.n == 1 && r.p[0] == 101);
    }
    em_buf_free(&b);
    tc_close(&c);
    STOP(s);
}

/* A scan with a (Java) filter cannot run here: error reply, not a close.
 * A cache op naming a transaction this connection does not have (1021) likewise. */
TEST(proto_scan_filter_and_tx_flag_refused)
{
    START(s);
    tc_conn c;
    REQUIRE_OK(tc_connect(&c, s.port));
    REQUIRE_EQ(tc_handshake(&c, 1, 6, 0, NULL, 0), 1);
    REQUIRE_OK(tc_create_cache(&c, "flt"));
    REQUIRE_OK(tc_put_int_str(&c, "flt", 1, "x"));
    em_buf b = EM_BUF_INIT;
    tc_reply r;
    tc_req_begin(&c, &b, 2000);
    tc_cache_hdr(&b, tc_cache_id("flt"), 0);
    tc_v_str(&b, "org.example.MyFilter");
    tc_put_u8(&b, 1);           /* platform JAVA */
    tc_put_i32(&b, 10);
    tc_put_i32(&b, -1);
    tc_put_u8(&b, 0);
    tc_req_end(&b);
    REQUIRE_OK(tc_call(&c, &b, &r));
    CHECK(r.status != 0);
    CHECK(r.msg[0] != 0);
    tc_req_begin(&c, &b, 1000);
    tc_cache_hdr(&b, tc_cache_id("flt"), 0x02);
    tc_put_i32(&b, 1);          /* tx id */
    tc_v_int(&b, 1);
    tc_req_end(&b);
    REQUIRE_OK(tc_call(&c, &b, &r));
    CHECK(r.status != 0);
    char got[8];
    CHECK_EQ(tc_get_int_str(&c, "flt", 1, got, sizeof got), 1);
    em_buf_free(&b);
    tc_close(&c);
    STOP(s);
}

/* 1.7.0 with USER_ATTRIBUTES (feature 0): the handshake carries an attribute
 * map (or null) after the features; the server must read past it. */
TEST(proto_handshake_user_attributes)
{
    START(s);
    for (int variant = 0; variant < 2; variant++) {
        tc_conn c;
        REQUIRE_OK(tc_connect(&c, s.port));
        em_buf m = EM_BUF_INIT;
        tc_put_i32(&m, 0);
        tc_put_u8(&m, 1);
        tc_put_i16(&m, 1);
        tc_put_i16(&m, 7);
        tc_put_i16(&m, 0);
        tc_put_u8(&m, 2);
        tc_put_u8(&m, 12);
        tc_put_i32(&m, 2);
        tc_put_u8(&m, 0x01);          /* USER_ATTRIBUTES */
        tc_put_u8(&m, 0x08);          /* HEARTBEAT */
        if (variant == 0) {
            tc_put_u8(&m, 25);
            tc_put_i32(&m, 2);
            tc_put_u8(&m, 1);
            tc_v_str(&m, "app");
            tc_v_str(&m, "ember-tests");
            tc_v_str(&m, "n");
            tc_v_int(&m, 7);
        } else {
            tc_v_null(&m);
        }
        em_st32(m.p, (uint32_t)(m.len - 4));
        CHECK_OK(tc_send(&c, m.p, m.len));
        em_buf_free(&m);
        REQUIRE_OK(tc_recv_frame(&c, 2000));
        REQUIRE(c.in.len >= 1);
        CHECK_EQ(c.in.p[0], 1);
        /* 01, typed byte array of the intersection, typed UUID */
        tc_rd d = {c.in.p, c.in.len, 1, 0};
        CHECK_EQ(tc_rd_u8(&d), 12);
        int32_t nf = tc_rd_i32(&d);
        CHECK(nf >= 2);
        if (nf >= 2 && !d.err) {
            tc_rd_u8(&d);                  /* bit 0: server's choice */
            CHECK_EQ(tc_rd_u8(&d), 0x08);
            for (int i = 2; i < nf; i++)
                CHECK_EQ(tc_rd_u8(&d), 0);
        }
        CHECK_EQ(tc_rd_u8(&d), 10);
        c.ver = TC_VER(1, 7, 0);
        c.flags_hdr = 1;
        tc_reply r;
        CHECK_OK(get_names(&c, &r));
        tc_close(&c);
    }
    STOP(s);
}

/* CACHE_PARTITIONS for several caches and an unknown id: every known cache
 * appears exactly once, the unknown one not at all. */
TEST(proto_cache_partitions_several_caches)
{
    START(s);
    tc_conn c;
    REQUIRE_OK(tc_connect(&c, s.port));
    REQUIRE_EQ(tc_handshake(&c, 1, 4, 0, NULL, 0), 1);
    REQUIRE_OK(tc_create_cache(&c, "pa"));
    REQUIRE_OK(tc_create_cache(&c, "pb"));
    int32_t ids[3] = {tc_cache_id("pa"), 987654, tc_cache_id("pb")};
    em_buf b = EM_BUF_INIT;
    tc_reply r;
    tc_req_begin(&c, &b, 1101);
    tc_put_i32(&b, 3);
    for (int i = 0; i < 3; i++)
        tc_put_i32(&b, ids[i]);
    tc_req_end(&b);
    REQUIRE_OK(tc_call(&c, &b, &r));
    em_buf_free(&b);
    REQUIRE_EQ(r.status, 0);
    tc_rd d = tc_rd_of(&r);
    tc_rd_i64(&d);
    tc_rd_i32(&d);
    int32_t groups = tc_rd_i32(&d);
    int count[3] = {0, 0, 0};
    for (int g = 0; g < groups && !d.err; g++) {
        int applicable = tc_rd_u8(&d);
        int32_t nc = tc_rd_i32(&d);
        for (int i = 0; i < nc && !d.err; i++) {
            int32_t id = tc_rd_i32(&d);
            for (int k = 0; k < 3; k++)
                if (id == ids[k])
                    count[k]++;
            if (applicable) {
                int32_t nk = tc_rd_i32(&d);
                for (int k = 0; k < nk && !d.err; k++) {
                    tc_rd_i32(&d);
                    tc_rd_i32(&d);
                }
            }
        }
        if (!applicable)
            continue;
        int32_t nodes = tc_rd_i32(&d);
        for (int n = 0; n < nodes && !d.err; n++) {
            tc_rd_u8(&d);
            tc_rd_i64(&d);
            tc_rd_i64(&d);
            int32_t np = tc_rd_i32(&d);
            for (int k = 0; k < np && !d.err; k++)
                tc_rd_i32(&d);
        }
    }
    CHECK(!d.err);
    CHECK_EQ(d.pos, r.n);
    CHECK_EQ(count[0], 1);
    CHECK_EQ(count[1], 0);
    CHECK_EQ(count[2], 1);
    tc_close(&c);
    STOP(s);
}
