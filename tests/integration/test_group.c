/* test_group.c - cluster-group discovery on one emberd over the wire:
 * CLUSTER_GROUP_GET_NODE_IDS (5100) with projections, _GET_NODE_INFO (5101)
 * and _GET_NODE_ENDPOINTS (5102) report the one local node, its id (the
 * handshake's), its thin address and port; hostile counts and unknown
 * projection codes are refused with a message.  Layouts: the table in
 * src/proto/proto_group.c (Ignite's ClientClusterGroup* classes).  The
 * 3-node case is tests/chaos/cluster_group.sh.
 */
#include "client.h"
#include "test.h"

#include "util/buf.h"
#include "util/err.h"

#include <stdio.h>
#include <string.h>

/* open17: 1.7.0 asking for CLUSTER_GROUP_GET_NODES_ENDPOINTS (3) and CLUSTER_GROUPS (4). */
static int open17(tc_conn *c, int port) { return tc_open_features(c, port, 0x18); }

TEST(group_features_offered)
{
    tc_server s;
    REQUIRE_OK(tc_server_start(&s, NULL));
    tc_conn c;
    REQUIRE_OK(open17(&c, s.port));
    CHECK(c.nfeatures >= 1);
    CHECK_EQ(c.features[0] & 0x18, 0x18);
    tc_close(&c);
    CHECK_EQ(tc_server_stop(&s), 0);
}

TEST(group_node_ids_and_projections)
{
    tc_server s;
    REQUIRE_OK(tc_server_start(&s, NULL));
    tc_conn c;
    REQUIRE_OK(open17(&c, s.port));
    REQUIRE(c.has_node_id);
    em_buf b = EM_BUF_INIT;
    tc_reply r;

    /* No projection, any version older than the current (1). */
    tc_put_i64(&b, -1);
    tc_put_i32(&b, 0);
    REQUIRE_EQ(tc_op(&c, 5100, &b, &r), 0);
    REQUIRE_EQ(r.n, 1u + 8 + 4 + 16);
    tc_rd d = tc_rd_of(&r);
    CHECK_EQ(tc_rd_u8(&d), 1);
    CHECK_EQ(tc_rd_i64(&d), 1);
    CHECK_EQ(tc_rd_i32(&d), 1);
    CHECK_MEM(r.p + d.pos, c.node_id, 16);

    /* Up to date: false and nothing else. */
    em_buf_reset(&b);
    tc_put_i64(&b, 1);
    tc_put_i32(&b, 0);
    REQUIRE_EQ(tc_op(&c, 5100, &b, &r), 0);
    CHECK_EQ(r.n, 1u);
    CHECK_EQ(r.p[0], 0);

    /* forServers: the node; forClients: none. */
    for (int srv = 0; srv <= 1; srv++) {
        em_buf_reset(&b);
        tc_put_i64(&b, 0);
        tc_put_i32(&b, 1);
        tc_put_i16(&b, 2);
        tc_put_u8(&b, (uint8_t)srv);
        REQUIRE_EQ(tc_op(&c, 5100, &b, &r), 0);
        d = tc_rd_of(&r);
        CHECK_EQ(tc_rd_u8(&d), 1);
        tc_rd_i64(&d);
        CHECK_EQ(tc_rd_i32(&d), srv);
    }

    /* forAttribute: equal value, other value, null value (exists), absent. */
    struct { const char *name, *val; int n; } at[] = {
        {"org.apache.ignite.ips", "127.0.0.1", 1}, {"org.apache.ignite.ips", "10.9.9.9", 0},
        {"org.apache.ignite.ips", NULL, 1}, {"no.such.attribute", NULL, 0},
        {"clientListenerPort", NULL, 1},
    };
    for (size_t i = 0; i < sizeof at / sizeof at[0]; i++) {
        em_buf_reset(&b);
        tc_put_i64(&b, 0);
        tc_put_i32(&b, 2);
        tc_put_i16(&b, 2);
        tc_put_u8(&b, 1);
        tc_put_i16(&b, 1);
        tc_v_str(&b, at[i].name);
        if (at[i].val)
            tc_v_str(&b, at[i].val);
        else
            tc_v_null(&b);
        REQUIRE_EQ(tc_op(&c, 5100, &b, &r), 0);
        d = tc_rd_of(&r);
        CHECK_EQ(tc_rd_u8(&d), 1);
        tc_rd_i64(&d);
        CHECK_EQ(tc_rd_i32(&d), at[i].n);
    }

    /* Unknown item code, hostile item count, truncated item. */
    em_buf_reset(&b);
    tc_put_i64(&b, 0);
    tc_put_i32(&b, 1);
    tc_put_i16(&b, 7);
    CHECK_EQ(tc_op(&c, 5100, &b, &r), 1);
    CHECK(strstr(r.msg, "Unknown code: 7") != NULL);
    em_buf_reset(&b);
    tc_put_i64(&b, 0);
    tc_put_i32(&b, 0x7fffffff);
    CHECK_EQ(tc_op(&c, 5100, &b, &r), 1);
    CHECK(strstr(r.msg, "projection") != NULL);
    em_buf_reset(&b);
    tc_put_i64(&b, 0);
    tc_put_i32(&b, 1);
    tc_put_i16(&b, 1);
    CHECK_EQ(tc_op(&c, 5100, &b, &r), 1);

    em_buf_free(&b);
    CHECK_OK(tc_sanity(s.port));
    tc_close(&c);
    CHECK_EQ(tc_server_stop(&s), 0);
}

/* skip_str_col reads a collection of typed strings; the first into first. */
static int read_str_col(tc_rd *d, char *first, size_t cap)
{
    first[0] = 0;
    if (tc_rd_u8(d) != 24)
        return -1;
    int32_t n = tc_rd_i32(d);
    tc_rd_u8(d);
    char tmp[256];
    for (int32_t i = 0; i < n && !d->err; i++)
        tc_rd_str(d, i ? tmp : first, i ? sizeof tmp : cap);
    return n;
}

TEST(group_node_info)
{
    tc_server s;
    REQUIRE_OK(tc_server_start(&s, NULL));
    tc_conn c;
    REQUIRE_OK(open17(&c, s.port));
    em_buf b = EM_BUF_INIT;
    tc_reply r;

    /* The node's own id, an unknown id and the node again: one node. */
    tc_put_i32(&b, 3);
    tc_put_bytes(&b, c.node_id, 16);
    uint8_t other[16];
    memset(other, 0x5a, 16);
    tc_put_bytes(&b, other, 16);
    tc_put_bytes(&b, c.node_id, 16);
    REQUIRE_EQ(tc_op(&c, 5101, &b, &r), 0);
    tc_rd d = tc_rd_of(&r);
    REQUIRE_EQ(tc_rd_i32(&d), 1);
    CHECK_EQ(tc_rd_u8(&d), 10);
    REQUIRE(d.pos + 16 <= r.n);
    CHECK_MEM(r.p + d.pos, c.node_id, 16);
    d.pos += 16;
    int32_t na = tc_rd_i32(&d);
    CHECK(na >= 2 && na < 16);
    int port_attr = 0;
    char name[128], val[128];
    for (int32_t i = 0; i < na && !d.err; i++) {
        tc_rd_str(&d, name, sizeof name);
        uint8_t t = tc_rd_u8(&d);
        if (t == 3) {
            int32_t v = tc_rd_i32(&d);
            if (!strcmp(name, "clientListenerPort"))
                port_attr = v;
        } else {
            CHECK_EQ(t, 9);
            d.pos--;
            tc_rd_str(&d, val, sizeof val);
        }
    }
    CHECK_EQ(port_attr, s.port);
    char addr[128];
    CHECK_EQ(read_str_col(&d, addr, sizeof addr), 1);
    CHECK(strcmp(addr, "127.0.0.1") == 0);
    CHECK_EQ(read_str_col(&d, addr, sizeof addr), 0);
    CHECK_EQ(tc_rd_i64(&d), 1);     /* order */
    CHECK_EQ(tc_rd_u8(&d), 1);      /* isLocal */
    CHECK_EQ(tc_rd_u8(&d), 0);      /* isDaemon */
    CHECK_EQ(tc_rd_u8(&d), 0);      /* isClient */
    char cid[128], want[128];
    tc_rd_str(&d, cid, sizeof cid);
    snprintf(want, sizeof want, "127.0.0.1:%d", s.port);
    CHECK(strcmp(cid, want) == 0);
    CHECK_EQ(tc_rd_u8(&d), 2);
    tc_rd_u8(&d);
    tc_rd_u8(&d);
    tc_rd_str(&d, val, sizeof val);
    tc_rd_i64(&d);
    CHECK_EQ(tc_rd_u8(&d), 12);
    int32_t hl = tc_rd_i32(&d);
    CHECK_EQ(hl, 20);
    d.pos += (size_t)hl;
    CHECK(!d.err);
    CHECK_EQ(d.pos, r.n);

    /* Only unknown ids: none.  A count the request cannot hold: refused. */
    em_buf_reset(&b);
    tc_put_i32(&b, 1);
    tc_put_bytes(&b, other, 16);
    REQUIRE_EQ(tc_op(&c, 5101, &b, &r), 0);
    CHECK_EQ(r.n, 4u);
    CHECK_EQ(em_ld32(r.p), 0u);
    em_buf_reset(&b);
    tc_put_i32(&b, 1 << 30);
    tc_put_bytes(&b, other, 16);
    CHECK_EQ(tc_op(&c, 5101, &b, &r), 1);
    CHECK(strstr(r.msg, "count") != NULL);
    em_buf_reset(&b);
    tc_put_i32(&b, -1);
    CHECK_EQ(tc_op(&c, 5101, &b, &r), 1);

    em_buf_free(&b);
    tc_close(&c);
    CHECK_EQ(tc_server_stop(&s), 0);
}

TEST(group_node_endpoints)
{
    tc_server s;
    REQUIRE_OK(tc_server_start(&s, NULL));
    tc_conn c;
    REQUIRE_OK(open17(&c, s.port));
    em_buf b = EM_BUF_INIT;
    tc_reply r;

    /* Every node. */
    tc_put_i64(&b, -1);
    tc_put_i64(&b, -1);
    REQUIRE_EQ(tc_op(&c, 5102, &b, &r), 0);
    tc_rd d = tc_rd_of(&r);
    CHECK_EQ(tc_rd_i64(&d), 1);
    REQUIRE_EQ(tc_rd_i32(&d), 1);
    REQUIRE(d.pos + 16 <= r.n);
    CHECK_MEM(r.p + d.pos, c.node_id, 16);
    d.pos += 16;
    CHECK_EQ(tc_rd_i32(&d), s.port);
    CHECK_EQ(tc_rd_i32(&d), 1);
    char addr[64];
    tc_rd_str(&d, addr, sizeof addr);
    CHECK(strcmp(addr, "127.0.0.1") == 0);
    CHECK_EQ(tc_rd_i32(&d), 0);
    CHECK(!d.err);
    CHECK_EQ(d.pos, r.n);

    /* Since the current version: nothing added or removed. */
    em_buf_reset(&b);
    tc_put_i64(&b, 1);
    tc_put_i64(&b, -1);
    REQUIRE_EQ(tc_op(&c, 5102, &b, &r), 0);
    CHECK_EQ(r.n, 16u);
    d = tc_rd_of(&r);
    CHECK_EQ(tc_rd_i64(&d), 1);
    CHECK_EQ(tc_rd_i32(&d), 0);
    CHECK_EQ(tc_rd_i32(&d), 0);

    /* Versions not kept: refused with Ignite's words. */
    int64_t bad[][2] = {{0, -1}, {-1, 7}, {9, -1}, {-5, -1}};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        em_buf_reset(&b);
        tc_put_i64(&b, bad[i][0]);
        tc_put_i64(&b, bad[i][1]);
        CHECK_EQ(tc_op(&c, 5102, &b, &r), 1);
        CHECK(strstr(r.msg, "Topology history not found") != NULL);
    }
    /* Truncated. */
    em_buf_reset(&b);
    tc_put_i64(&b, -1);
    CHECK_EQ(tc_op(&c, 5102, &b, &r), 1);

    em_buf_free(&b);
    CHECK_OK(tc_sanity(s.port));
    tc_close(&c);
    CHECK_EQ(tc_server_stop(&s), 0);
}
