/* test_proto_ops.c - ember's operator ops (src/proto/proto_ops.c) on a
 * single node, in-process: PART_VERIFY's checksums do not depend on the
 * order entries were written in and change with one value; CORRUPT exists
 * only with debug_ops and changes content without the update counter;
 * NODE_INFO and CLUSTER_INFO describe the node (JSON and text).
 */
#include "test.h"
#include "proto_env.h"

#include <string.h>

#include "proto/proto.h"
#include "proto/proto_int.h"
#include "proto/proto_stats.h"
#include "util/err.h"
#include "util/hash.h"

static void req_begin(pe_env *e, int op)
{
    em_buf_reset(&e->req);
    em_buf_put_le32(&e->req, 0);
    em_buf_put_le16(&e->req, (uint16_t)op);
    em_buf_put_le64(&e->req, (uint64_t)++e->rid);
}

static void put_str(em_buf *b, const char *s)
{
    em_buf_put_u8(b, 9);
    em_buf_put_le32(b, (uint32_t)strlen(s));
    em_buf_append(b, s, strlen(s));
}

/* send: the request framed and fed; *p / *n = the 1.2.0 reply's payload,
 * returns its status (-1: no whole reply). */
static int send_req(pe_env *e, const uint8_t **p, size_t *n)
{
    em_st32(e->req.p, (uint32_t)(e->req.len - 4));
    em_buf_reset(&e->out);
    size_t used = 0;
    if (pr_feed(e->c, e->req.p, e->req.len, &e->out, SIZE_MAX / 2, &used) || used != e->req.len ||
        e->out.len < 16 || em_ld32(e->out.p) + 4 != e->out.len)
        return -1;
    *p = e->out.p + 16;
    *n = e->out.len - 16;
    return (int)em_ld32(e->out.p + 12);
}

/* fake_stats: what a server's workers would have counted. */
static void fake_stats(void *arg, pr_stats *sum, uint64_t *uptime_ms)
{
    (void)arg;
    pr_counter_add(&sum->requests[PR_STATS_SLOT_CACHE_PUT], 5);
    pr_counter_add(&sum->lat[PR_STATS_SLOT_CACHE_PUT][3], 2);
    *uptime_ms = 1234;
}

static int open_env(pe_env *e, int debug_ops)
{
    pr_options o;
    pr_options_default(&o);
    o.debug_ops = debug_ops;
    o.node_stats = fake_stats;
    int rc = pe_open(e, &o);
    if (rc)
        return rc;
    uint8_t hs[12] = { 8, 0, 0, 0, 1, 1, 0, 2, 0, 0, 0, 2 };     /* 1.2.0 */
    size_t used;
    return pr_feed(e->c, hs, sizeof hs, &e->out, SIZE_MAX / 2, &used);
}

static void put_kv(pe_env *e, const char *cache, int32_t k, const char *v)
{
    const uint8_t *p;
    size_t n;
    req_begin(e, 1001);
    em_buf_put_le32(&e->req, (uint32_t)em_hash_java_str((const uint8_t *)cache, strlen(cache)));
    em_buf_put_u8(&e->req, 0);
    em_buf_put_u8(&e->req, 3);
    em_buf_put_le32(&e->req, (uint32_t)k);
    put_str(&e->req, v);
    CHECK_EQ(send_req(e, &p, &n), 0);
}

static void create(pe_env *e, const char *name)
{
    const uint8_t *p;
    size_t n;
    req_begin(e, 1052);
    put_str(&e->req, name);
    CHECK_EQ(send_req(e, &p, &n), 0);
}

/* verify: PART_VERIFY of cache into out (parts x 26 bytes); status. */
static int verify(pe_env *e, const char *cache, em_buf *out)
{
    const uint8_t *p;
    size_t n;
    req_begin(e, PR_OP_PART_VERIFY);
    put_str(&e->req, cache);
    int st = send_req(e, &p, &n);
    em_buf_reset(out);
    if (st == 0 && n >= 4 && n == 4 + (size_t)em_ld32(p) * 26)
        em_buf_append(out, p + 4, n - 4);
    return st;
}

TEST(ops_part_verify_checksums_are_order_independent)
{
    pe_env a, b;
    REQUIRE_OK(open_env(&a, 0));
    REQUIRE_OK(open_env(&b, 0));
    create(&a, "v");
    create(&b, "v");
    for (int32_t k = 1; k <= 50; k++)
        put_kv(&a, "v", k, "value");
    for (int32_t k = 50; k >= 1; k--)
        put_kv(&b, "v", k, "value");
    em_buf va = EM_BUF_INIT, vb = EM_BUF_INIT;
    CHECK_EQ(verify(&a, "v", &va), 0);
    CHECK_EQ(verify(&b, "v", &vb), 0);
    REQUIRE(va.len == 1024 * 26);
    REQUIRE(vb.len == va.len);
    CHECK(memcmp(va.p, vb.p, va.len) == 0);
    uint64_t entries = 0;
    int nonzero = 0;
    for (uint32_t i = 0; i < 1024; i++) {
        const uint8_t *r = va.p + (size_t)i * 26;
        CHECK_EQ(r[0], 1);                  /* a single node is every partition's primary */
        CHECK_EQ(r[1], 1);                  /* stable */
        entries += em_ld64(r + 10);
        nonzero += em_ld64(r + 18) != 0;
        if (em_ld64(r + 10) == 0)
            CHECK_EQ(em_ld64(r + 18), 0);   /* empty: checksum 0 */
    }
    CHECK_EQ(entries, 50);
    CHECK(nonzero > 0);
    /* one other value: one partition differs, and only in its checksum and
     * counter */
    put_kv(&b, "v", 7, "other");
    CHECK_EQ(verify(&b, "v", &vb), 0);
    int diff = 0;
    for (uint32_t i = 0; i < 1024; i++) {
        const uint8_t *x = va.p + (size_t)i * 26, *y = vb.p + (size_t)i * 26;
        if (memcmp(x, y, 26) == 0)
            continue;
        diff++;
        CHECK_EQ(em_ld64(y + 2), em_ld64(x + 2) + 1);
        CHECK_EQ(em_ld64(y + 10), em_ld64(x + 10));
        CHECK(em_ld64(y + 18) != em_ld64(x + 18));
    }
    CHECK_EQ(diff, 1);
    CHECK_EQ(verify(&a, "nope", &va), 1000);
    em_buf_free(&va);
    em_buf_free(&vb);
    pe_close(&a);
    pe_close(&b);
}

TEST(ops_corrupt_needs_debug_ops_and_keeps_the_counter)
{
    pe_env e;
    const uint8_t *p;
    size_t n;
    REQUIRE_OK(open_env(&e, 0));
    create(&e, "c");
    req_begin(&e, PR_OP_CORRUPT);
    put_str(&e.req, "c");
    em_buf_put_le32(&e.req, 0);
    CHECK_EQ(send_req(&e, &p, &n), 2);      /* unknown op without debug_ops */
    pe_close(&e);

    REQUIRE_OK(open_env(&e, 1));
    create(&e, "c");
    put_kv(&e, "c", 42, "v42");
    em_buf before = EM_BUF_INIT, after = EM_BUF_INIT;
    CHECK_EQ(verify(&e, "c", &before), 0);
    REQUIRE(before.len == 1024 * 26);
    uint32_t part = 0;
    while (part < 1024 && em_ld64(before.p + (size_t)part * 26 + 10) == 0)
        part++;
    REQUIRE(part < 1024);
    req_begin(&e, PR_OP_CORRUPT);
    put_str(&e.req, "c");
    em_buf_put_le32(&e.req, part);
    CHECK_EQ(send_req(&e, &p, &n), 0);
    CHECK(n == 1 && p[0] == 1);
    CHECK_EQ(verify(&e, "c", &after), 0);
    const uint8_t *x = before.p + (size_t)part * 26, *y = after.p + (size_t)part * 26;
    CHECK_EQ(em_ld64(y + 2), em_ld64(x + 2));       /* counter */
    CHECK_EQ(em_ld64(y + 10), em_ld64(x + 10));     /* size */
    CHECK(em_ld64(y + 18) != em_ld64(x + 18));      /* content */
    /* an empty partition: nothing to change */
    uint32_t empty = part == 0 ? 1 : 0;
    req_begin(&e, PR_OP_CORRUPT);
    put_str(&e.req, "c");
    em_buf_put_le32(&e.req, empty);
    CHECK_EQ(send_req(&e, &p, &n), 0);
    CHECK(n == 1 && p[0] == 0);
    req_begin(&e, PR_OP_CORRUPT);
    put_str(&e.req, "c");
    em_buf_put_le32(&e.req, 1024);
    CHECK_EQ(send_req(&e, &p, &n), 1);              /* no such partition */
    em_buf_free(&before);
    em_buf_free(&after);
    pe_close(&e);
}

TEST(ops_node_and_cluster_info_on_a_single_node)
{
    pe_env e;
    const uint8_t *p;
    size_t n;
    REQUIRE_OK(open_env(&e, 0));
    create(&e, "info");
    put_kv(&e, "info", 1, "x");
    req_begin(&e, PR_OP_NODE_INFO);
    CHECK_EQ(send_req(&e, &p, &n), 0);
    REQUIRE(n > 14);
    CHECK_EQ(p[0], 2);                              /* layout version */
    CHECK_EQ(p[9], 3);                              /* lease, leader, no cluster */
    CHECK_EQ(em_ld32(p + 10), 1);                   /* one cache */
    req_begin(&e, PR_OP_CLUSTER_INFO);
    em_buf_put_u8(&e.req, 0);
    CHECK_EQ(send_req(&e, &p, &n), 0);
    REQUIRE(n > 5 && p[0] == 9 && em_ld32(p + 1) == n - 5);
    em_buf j = EM_BUF_INIT;
    em_buf_append(&j, p + 5, n - 5);
    em_buf_put_u8(&j, 0);
    const char *s = (const char *)j.p;
    CHECK(strstr(s, "{\"cluster\":false,\"state\":\"ACTIVE\"") == s);
    CHECK(strstr(s, "\"caches\":[{\"name\":\"info\",\"size\":1,\"entries_left\":0}]") != NULL);
    CHECK(strstr(s, "\"mode\":\"PARTITIONED\",\"backups\":0,\"partitions\":1024") != NULL);
    CHECK(strstr(s, "\"counts\":{\"primary\":1024,\"backup\":0,") != NULL);
    CHECK(strstr(s, "\"uptime_ms\":1234,\"lease\":true,") != NULL);
    CHECK(strstr(s, "\"ops\":[{\"op\":\"CACHE_PUT\",\"requests\":5,\"errors\":0,"
                    "\"latency_buckets\":[0,0,0,2,0,") != NULL);
    CHECK(strstr(s, "\"rebalance\":{\"in_progress\":false,\"partitions_moving\":0,\"entries_left\":0}") != NULL);
    req_begin(&e, PR_OP_CLUSTER_INFO);
    em_buf_put_u8(&e.req, 1);
    CHECK_EQ(send_req(&e, &p, &n), 0);
    em_buf_reset(&j);
    em_buf_append(&j, p + 5, n > 5 ? n - 5 : 0);
    em_buf_put_u8(&j, 0);
    s = (const char *)j.p;
    CHECK(strstr(s, "cache info: PARTITIONED, 0 backups, 1024 partitions\n") != NULL);
    CHECK(strstr(s, "lost partitions: 0\nrebalance: none in progress\n") != NULL);
    req_begin(&e, PR_OP_CLUSTER_INFO);
    em_buf_put_u8(&e.req, 7);
    CHECK_EQ(send_req(&e, &p, &n), 1);              /* unknown format */
    em_buf_free(&j);
    pe_close(&e);
}

/* A member's NODE_INFO is input from the network: every truncation, a
 * trailing byte, and counts larger than the bytes are refused. */
TEST(ops_node_info_decode_refuses_malformed)
{
    pe_env e;
    const uint8_t *p;
    size_t n;
    REQUIRE_OK(open_env(&e, 0));
    create(&e, "a");
    create(&e, "b");
    req_begin(&e, PR_OP_NODE_INFO);
    REQUIRE(send_req(&e, &p, &n) == 0);
    em_buf b = EM_BUF_INIT;
    em_buf_append(&b, p, n);
    CHECK_OK(pr_node_info_check(b.p, b.len));
    for (size_t k = 0; k < b.len; k++)
        CHECK_EQ(pr_node_info_check(b.p, k), EM_PROTO);
    em_buf_put_u8(&b, 0);
    CHECK_EQ(pr_node_info_check(b.p, b.len), EM_PROTO);
    b.len--;
    uint8_t save = b.p[10];
    b.p[10] = 0xff;                                 /* cache count 255 + ... */
    CHECK_EQ(pr_node_info_check(b.p, b.len), EM_PROTO);
    b.p[10] = save;
    b.p[0] = 3;                                     /* another layout */
    CHECK_EQ(pr_node_info_check(b.p, b.len), EM_PROTO);
    /* Layout 1 (before entries left): one cache of 23 bytes and its name. */
    static const uint8_t v1[] = { 1, 0, 0, 0, 0, 0, 0, 0, 0, 4, 1, 0, 0, 0,
                                  7, 0, 0, 0, 2, 1, 0, 0, 0, 0, 4, 0, 0, 9, 0, 0, 0, 0, 0,
                                  0, 0, 1, 0, 'a', 0, 0, 0, 0 };
    CHECK_OK(pr_node_info_check(v1, sizeof v1));
    CHECK_EQ(pr_node_info_check(v1, sizeof v1 - 1), EM_PROTO);
    em_buf_free(&b);
    pe_close(&e);
}
