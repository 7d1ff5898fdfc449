/* test_proto.c - the thin-client protocol layer in-process (no sockets):
 * framing limits, handshakes of every era, both response headers, the Node
 * 1.0.0 wire captures of reference §8, error replies, scan cursors, the
 * configuration echo per version, and zero-allocation GET/PUT.
 */
#include "test.h"
#include "proto_env.h"

#include <string.h>

#include "binary/binary.h"
#include "proto/proto.h"
#include "store/store.h"
#include "util/err.h"
#include "util/hash.h"
#include "util/mem.h"


/* feed runs bytes through pr_feed; returns its code, *used = consumed. */
static int feed(pe_env *e, const void *p, size_t n, size_t *used)
{
    size_t u = 0;
    int rc = pr_feed(e->c, p, n, &e->out, SIZE_MAX / 2, &u);
    if (used)
        *used = u;
    return rc;
}

static int feed_hex(pe_env *e, const char *hex)
{
    uint8_t b[512];
    size_t n = 0;
    for (const char *h = hex; h[0] && h[1];) {
        if (*h == ' ') { h++; continue; }
        unsigned v;
        sscanf(h, "%2x", &v);
        b[n++] = (uint8_t)v;
        h += 2;
    }
    size_t used;
    int rc = feed(e, b, n, &used);
    return rc ? rc : (used == n ? 0 : EM_AGAIN);
}

/* The request under construction: op, fresh request id, payload. */
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

static void put_int(em_buf *b, int32_t v)
{
    em_buf_put_u8(b, 3);
    em_buf_put_le32(b, (uint32_t)v);
}

static void cache_hdr(em_buf *b, const char *name)
{
    em_buf_put_le32(b, (uint32_t)em_hash_java_str((const uint8_t *)name, strlen(name)));
    em_buf_put_u8(b, 0);
}

/* req_send frames and feeds the request; the reply body (without its
 * length) starts at *body in e->out. */
static int req_send(pe_env *e, const uint8_t **body, size_t *blen)
{
    em_st32(e->req.p, (uint32_t)(e->req.len - 4));
    em_buf_reset(&e->out);
    size_t used;
    int rc = feed(e, e->req.p, e->req.len, &used);
    if (rc)
        return rc;
    if (used != e->req.len || e->out.len < 4)
        return EM_AGAIN;
    uint32_t l = em_ld32(e->out.p);
    if (l + 4 != e->out.len)
        return EM_BADLEN;
    *body = e->out.p + 4;
    *blen = l;
    return 0;
}

/* Pre-1.4.0 reply: long rid, int status, then payload or message. */
static int32_t status_of(const uint8_t *b) { return (int32_t)em_ld32(b + 8); }

static int hs_ok(pe_env *e, int minor)
{
    uint8_t m[12] = { 8, 0, 0, 0, 1, 1, 0, (uint8_t)minor, 0, 0, 0, 2 };
    em_buf_reset(&e->out);
    return feed(e, m, sizeof m, NULL);
}

static void create_cache(pe_env *e, const char *name)
{
    const uint8_t *b;
    size_t n;
    req_begin(e, 1052);
    put_str(&e->req, name);
    if (req_send(e, &b, &n) == 0)
        CHECK_EQ(pr_conn_version(e->c) >= 10400 ? em_ld16(b + 8) & 1 : status_of(b), 0);
}

TEST(proto_handshake_node_capture)
{
    pe_env e;
    REQUIRE_OK(pe_open(&e, NULL));
    /* Reference §8: Node 1.0.0 opens with 1.2.0; the reply is 01000000 01. */
    CHECK_OK(feed_hex(&e, "08000000 01 0100 0200 0000 02"));
    CHECK_EQ(e.out.len, 5);
    CHECK_MEM(e.out.p, "\x01\x00\x00\x00\x01", 5);
    CHECK(pr_conn_ready(e.c));
    CHECK_EQ(pr_conn_version(e.c), 10200);
    pe_close(&e);
}

TEST(proto_handshake_retry_same_socket)
{
    pe_env e;
    REQUIRE_OK(pe_open(&e, NULL));
    CHECK_OK(feed_hex(&e, "08000000 01 0100 0900 0000 02"));   /* 1.9.0 */
    REQUIRE(e.out.len > 11);
    CHECK_EQ(e.out.p[4], 0);                                   /* failure */
    CHECK_EQ(em_ld16(e.out.p + 5), 1);
    CHECK_EQ(em_ld16(e.out.p + 7), 7);                         /* names 1.7.0 */
    CHECK_EQ(em_ld16(e.out.p + 9), 0);
    CHECK_EQ(e.out.p[11], 9);                                  /* message */
    uint32_t ml = em_ld32(e.out.p + 12);
    CHECK_EQ(em_ld32(e.out.p + 16 + ml), 1);                   /* status (client >= 1.1.0) */
    CHECK(!pr_conn_ready(e.c));
    em_buf_reset(&e.out);
    CHECK_OK(feed_hex(&e, "08000000 01 0100 0100 0000 02"));   /* retry 1.1.0 */
    CHECK_EQ(e.out.len, 5);
    CHECK(pr_conn_ready(e.c));
    pe_close(&e);
}

TEST(proto_handshake_170_features_and_node_id)
{
    pr_options o;
    pr_options_default(&o);
    memset(o.node_id, 0xab, 16);
    pe_env e;
    REQUIRE_OK(pe_open(&e, &o));
    /* features: every bit of bytes 0-2 except USER_ATTRIBUTES (bit 0) */
    CHECK_OK(feed_hex(&e, "10000000 01 0100 0700 0000 02 0c 03000000 feffff"));
    /* 01 | 0c len=2 {1c 09} (CLUSTER_STATES, CLUSTER_GROUP_GET_NODES_ENDPOINTS,
     * CLUSTER_GROUPS; BINARY_CONFIGURATION, HEARTBEAT) | 0a uuid */
    REQUIRE_EQ(e.out.len, 4 + 1 + 5 + 2 + 17);
    CHECK_MEM(e.out.p + 4, "\x01\x0c\x02\x00\x00\x00\x1c\x09\x0a", 9);
    CHECK_EQ(e.out.p[13], 0xab);
    pe_close(&e);
}

TEST(proto_handshake_user_attributes_and_credentials)
{
    pe_env e;
    pr_options o;
    pr_options_default(&o);
    o.username = "ignite";
    o.password = "ignite";
    REQUIRE_OK(pe_open(&e, &o));
    /* 1.7.0, feature USER_ATTRIBUTES, empty map attributes, wrong password */
    CHECK_OK(feed_hex(&e, "27000000 01 0100 0700 0000 02 0c 01000000 01 19 00000000 01 "
                          "09 06000000 69676e697465 09 03000000 626164"));
    REQUIRE(e.out.len > 11);
    CHECK_EQ(e.out.p[4], 0);
    CHECK_EQ(em_ld16(e.out.p + 5), 0);                         /* auth failure: 0.0.0 */
    uint32_t ml = em_ld32(e.out.p + 12);
    CHECK_EQ(em_ld32(e.out.p + 16 + ml), 2000);
    em_buf_reset(&e.out);
    /* Node capture with ignite/ignite at 1.2.0 succeeds */
    CHECK_OK(feed_hex(&e, "1e000000 01 0100 0200 0000 02 09 06000000 69676e697465 "
                          "09 06000000 69676e697465"));
    CHECK_EQ(e.out.len, 5);
    CHECK(pr_conn_ready(e.c));
    pe_close(&e);
}

TEST(proto_framing_rejects_bad_lengths_without_allocating)
{
    pe_env e;
    REQUIRE_OK(pe_open(&e, NULL));
    em_mem_stats a = em_mem_thread();
    CHECK(feed_hex(&e, "fbffffff") == EM_BADLEN);              /* negative */
    CHECK(feed_hex(&e, "00000000") == EM_BADLEN);              /* zero */
    CHECK(feed_hex(&e, "01001000") == EM_BADLEN);              /* 1 MiB + 1 before handshake */
    CHECK(feed_hex(&e, "08000000 47") == EM_PROTO);            /* not a handshake */
    CHECK(feed_hex(&e, "4745") == EM_AGAIN);                   /* too short to judge yet */
    em_mem_stats b = em_mem_thread();
    CHECK_EQ(b.allocs - a.allocs, 0);
    CHECK_OK(hs_ok(&e, 2));
    CHECK(feed_hex(&e, "ffffff7f") == EM_BADLEN);              /* 2 GiB after */
    CHECK(feed_hex(&e, "05000000 0000000000") == EM_PROTO);    /* no room for a request id */
    pe_close(&e);
}

TEST(proto_framing_byte_at_a_time)
{
    pe_env e;
    REQUIRE_OK(pe_open(&e, NULL));
    static const uint8_t hs[] = { 8, 0, 0, 0, 1, 1, 0, 2, 0, 0, 0, 2 };
    size_t have = 0;
    uint8_t buf[32];
    /* Keep unconsumed bytes as a network layer would. */
    for (size_t i = 0; i < sizeof hs; i++) {
        buf[have++] = hs[i];
        size_t used;
        REQUIRE_OK(feed(&e, buf, have, &used));
        memmove(buf, buf + used, have - used);
        have -= used;
    }
    CHECK_EQ(have, 0);
    CHECK(pr_conn_ready(e.c));
    pe_close(&e);
}

TEST(proto_node_capture_put_get_and_errors)
{
    pe_env e;
    REQUIRE_OK(pe_open(&e, NULL));
    CHECK_OK(hs_ok(&e, 2));
    em_buf_reset(&e.out);
    /* §8: GET_OR_CREATE_WITH_NAME "myCache", then PUT 2 -> "x" (rid 4) */
    CHECK_OK(feed_hex(&e, "16000000 1c04 0100000000000000 09 07000000 6d794361636865"));
    CHECK_EQ(e.out.len, 16);
    CHECK_MEM(e.out.p, "\x0c\x00\x00\x00\x01\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00", 16);
    em_buf_reset(&e.out);
    CHECK_OK(feed_hex(&e, "1a000000 e903 0400000000000000 365d5f58 00 03 02000000 09 01000000 78"));
    CHECK_EQ(e.out.len, 16);
    CHECK_EQ(em_ld64(e.out.p + 4), 4);
    const uint8_t *b;
    size_t n;
    req_begin(&e, 1000);
    cache_hdr(&e.req, "myCache");
    put_int(&e.req, 2);
    REQUIRE_OK(req_send(&e, &b, &n));
    CHECK_EQ(status_of(b), 0);
    REQUIRE_EQ(n, 12 + 6);
    CHECK_MEM(b + 12, "\x09\x01\x00\x00\x00x", 6);
    /* missing cache: status 1000 and the message Node shows */
    req_begin(&e, 1000);
    em_buf_put_le32(&e.req, 1);
    em_buf_put_u8(&e.req, 0);
    put_int(&e.req, 2);
    REQUIRE_OK(req_send(&e, &b, &n));
    CHECK_EQ(status_of(b), 1000);
    static const char msg[] = "Cache does not exist [cacheId= 1]";
    REQUIRE_EQ(n, 12 + 5 + strlen(msg));
    CHECK_MEM(b + 17, msg, strlen(msg));
    /* unknown op code: status 2 */
    req_begin(&e, 4242);
    REQUIRE_OK(req_send(&e, &b, &n));
    CHECK_EQ(status_of(b), 2);
    CHECK(memmem(b, n, "Invalid request op code: 4242", 29) != NULL);
    /* a truncated SQL request: a clear error, connection stays usable */
    req_begin(&e, 2004);
    REQUIRE_OK(req_send(&e, &b, &n));
    CHECK_EQ(status_of(b), 1);
    CHECK(memmem(b, n, "Malformed request", 17) != NULL);
    /* create an existing cache: 1001; destroy a missing one: 1000 */
    req_begin(&e, 1051);
    put_str(&e.req, "myCache");
    REQUIRE_OK(req_send(&e, &b, &n));
    CHECK_EQ(status_of(b), 1001);
    req_begin(&e, 1056);
    em_buf_put_le32(&e.req, 12345);
    REQUIRE_OK(req_send(&e, &b, &n));
    CHECK_EQ(status_of(b), 1000);
    /* transactional flag naming no transaction of this connection: 1021 */
    req_begin(&e, 1000);
    em_buf_put_le32(&e.req, (uint32_t)em_hash_java_str((const uint8_t *)"myCache", 7));
    em_buf_put_u8(&e.req, 2);
    em_buf_put_le32(&e.req, 7);
    put_int(&e.req, 2);
    REQUIRE_OK(req_send(&e, &b, &n));
    CHECK_EQ(status_of(b), 1021);
    CHECK(memmem(b, n, "Transaction with id 7 not found.", 32) != NULL);
    pe_close(&e);
}

TEST(proto_header_140_topology_flag_once)
{
    pe_env e;
    REQUIRE_OK(pe_open(&e, NULL));
    CHECK_OK(hs_ok(&e, 4));
    CHECK_EQ(e.out.len, 4 + 1 + 17);                           /* success + node uuid */
    create_cache(&e, "c");
    /* first reply: flags 2 + topology (1, 0); the create above was it */
    CHECK_EQ(em_ld16(e.out.p + 12), 2);
    CHECK_EQ(em_ld64(e.out.p + 14), 1);
    CHECK_EQ(em_ld32(e.out.p + 22), 0);
    const uint8_t *b;
    size_t n;
    req_begin(&e, 1000);
    cache_hdr(&e.req, "c");
    put_int(&e.req, 1);
    REQUIRE_OK(req_send(&e, &b, &n));
    CHECK_EQ(em_ld16(b + 8), 0);                               /* no flags now */
    CHECK_EQ(n, 8 + 2 + 1);
    CHECK_EQ(b[10], 101);
    req_begin(&e, 1000);
    em_buf_put_le32(&e.req, 98765);
    em_buf_put_u8(&e.req, 0);
    put_int(&e.req, 1);
    REQUIRE_OK(req_send(&e, &b, &n));
    CHECK_EQ(em_ld16(b + 8), 1);                               /* ERROR */
    CHECK_EQ(em_ld32(b + 10), 1000);
    pe_close(&e);
}

TEST(proto_heartbeat_needs_feature)
{
    pe_env e;
    REQUIRE_OK(pe_open(&e, NULL));
    CHECK_OK(hs_ok(&e, 7 * 0 + 2));
    const uint8_t *b;
    size_t n;
    req_begin(&e, 1);
    REQUIRE_OK(req_send(&e, &b, &n));
    CHECK_EQ(status_of(b), 2);                                 /* not negotiated */
    pe_close(&e);
    REQUIRE_OK(pe_open(&e, NULL));
    CHECK_OK(feed_hex(&e, "0f000000 01 0100 0700 0000 02 0c 02000000 0008"));
    REQUIRE(pr_conn_ready(e.c));
    req_begin(&e, 2);
    REQUIRE_OK(req_send(&e, &b, &n));
    REQUIRE_EQ(n, 8 + 2 + 12 + 8);
    CHECK_EQ(em_ld64(b + 22), 0);                              /* idle timeout off */
    req_begin(&e, 1);
    REQUIRE_OK(req_send(&e, &b, &n));
    CHECK_EQ(n, 10);
    pe_close(&e);
}

TEST(proto_scan_pages_and_cursors)
{
    pr_options o;
    pr_options_default(&o);
    o.max_cursors = 2;
    pe_env e;
    REQUIRE_OK(pe_open(&e, &o));
    CHECK_OK(hs_ok(&e, 2));
    create_cache(&e, "s");
    const uint8_t *b;
    size_t n;
    for (int i = 0; i < 25; i++) {
        req_begin(&e, 1001);
        cache_hdr(&e.req, "s");
        put_int(&e.req, i);
        put_int(&e.req, i * 10);
        REQUIRE_OK(req_send(&e, &b, &n));
        REQUIRE_EQ(status_of(b), 0);
    }
    req_begin(&e, 2000);
    cache_hdr(&e.req, "s");
    em_buf_put_u8(&e.req, 101);
    em_buf_put_le32(&e.req, 10);
    em_buf_put_le32(&e.req, (uint32_t)-1);
    em_buf_put_u8(&e.req, 0);
    REQUIRE_OK(req_send(&e, &b, &n));
    REQUIRE_EQ(status_of(b), 0);
    int64_t cur = (int64_t)em_ld64(b + 12);
    CHECK_EQ(em_ld32(b + 20), 10);
    CHECK_EQ(b[n - 1], 1);                                     /* more */
    int total = 10, pages = 1;
    for (;;) {
        req_begin(&e, 2001);
        em_buf_put_le64(&e.req, (uint64_t)cur);
        REQUIRE_OK(req_send(&e, &b, &n));
        REQUIRE_EQ(status_of(b), 0);
        total += (int)em_ld32(b + 12);
        pages++;
        if (!b[n - 1])
            break;
        REQUIRE(pages < 10);
    }
    CHECK_EQ(total, 25);
    CHECK_EQ(pages, 3);
    /* auto-closed after the last page */
    req_begin(&e, 0);
    em_buf_put_le64(&e.req, (uint64_t)cur);
    REQUIRE_OK(req_send(&e, &b, &n));
    CHECK_EQ(status_of(b), 1011);
    /* cursor limit: 2 open, the third is refused with 1010 */
    for (int i = 0; i < 3; i++) {
        req_begin(&e, 2000);
        cache_hdr(&e.req, "s");
        em_buf_put_u8(&e.req, 101);
        em_buf_put_le32(&e.req, 1);
        em_buf_put_le32(&e.req, (uint32_t)-1);
        em_buf_put_u8(&e.req, 0);
        REQUIRE_OK(req_send(&e, &b, &n));
        CHECK_EQ(status_of(b), i < 2 ? 0 : 1010);
    }
    /* a filter is refused */
    req_begin(&e, 2000);
    cache_hdr(&e.req, "s");
    put_int(&e.req, 1);
    em_buf_put_u8(&e.req, 1);
    em_buf_put_le32(&e.req, 1);
    em_buf_put_le32(&e.req, (uint32_t)-1);
    em_buf_put_u8(&e.req, 0);
    REQUIRE_OK(req_send(&e, &b, &n));
    CHECK_EQ(status_of(b), 1);
    pe_close(&e);                                             /* open cursors freed */
}

/* The CREATE_WITH_CONFIGURATION body Node 1.0.0 sent (reference §2.4). */
static const char node_cfg_hex[] =
    "65000000 0400 0300 01000000 cb00 09 06000000 505542 4c4943 c800 01000000 "
    "09 03000000 494e54 09 01000000 50 65 65 65 01000000 09 02000000 6964 "
    "09 03000000 494e54 01 00 65 ffffffff ffffffff 00000000 00000000 "
    "0000 09 08000000 63666743616368 65";

static size_t get_config(pe_env *e, int minor, const uint8_t **b)
{
    size_t n = 0;
    req_begin(e, 1055);
    cache_hdr(&e->req, "cfgCache");
    (void)minor;
    if (req_send(e, b, &n))
        return 0;
    return n;
}

TEST(proto_config_round_trip_per_version)
{
    size_t len[3];
    static const int minors[3] = { 1, 2, 6 };
    for (int v = 0; v < 3; v++) {
        pe_env e;
        REQUIRE_OK(pe_open(&e, NULL));
        CHECK_OK(hs_ok(&e, minors[v]));
        req_begin(&e, 1053);
        size_t at = e.req.len;
        char hex[sizeof node_cfg_hex];
        strcpy(hex, node_cfg_hex);
        if (minors[v] < 2) {        /* before 1.2.0 fields carry no precision/scale */
            char *ps = strstr(hex, "ffffffff ffffffff ");
            memmove(ps, ps + 18, strlen(ps + 18) + 1);
        }
        for (char *h = hex; h[0] && h[1];) {
            if (*h == ' ') { h++; continue; }
            unsigned x;
            sscanf(h, "%2x", &x);
            em_buf_put_u8(&e.req, (uint8_t)x);
            h += 2;
        }
        (void)at;
        const uint8_t *b;
        size_t n;
        REQUIRE_OK(req_send(&e, &b, &n));
        int hdr = minors[v] >= 4 ? 10 + 12 : 12;
        if (minors[v] < 4 && status_of(b))
            fprintf(stderr, "%.*s\n", (int)(n - 17), (const char *)b + 17);
        REQUIRE_EQ(minors[v] >= 4 ? em_ld16(b + 8) & 1 : status_of(b), 0);
        n = get_config(&e, minors[v], &b);
        REQUIRE(n > 12);
        hdr = minors[v] >= 4 ? 10 : 12;
        if (minors[v] >= 4)
            REQUIRE_EQ(em_ld16(b + 8), 0);
        else
            REQUIRE_EQ(status_of(b), 0);
        const uint8_t *p = b + hdr;
        CHECK_EQ(em_ld32(p) + 4, n - (size_t)hdr);
        CHECK_EQ(em_ld32(p + 4), 1);                           /* ATOMIC */
        CHECK_EQ(em_ld32(p + 8), 1);                           /* backups = 1 */
        CHECK(memmem(p, n - (size_t)hdr, "cfgCache", 8) != NULL);
        CHECK(memmem(p, n - (size_t)hdr, "PUBLIC", 6) != NULL);
        len[v] = n - (size_t)hdr;
        pe_close(&e);
    }
    /* 1.2.0 adds precision + scale (8 bytes for the one field); 1.6.0 adds
     * the expiry policy bool. */
    CHECK_EQ(len[1] - len[0], 8);
    CHECK_EQ(len[2] - len[1], 1);
}

TEST(proto_partitions_single_node)
{
    pr_options o;
    pr_options_default(&o);
    memset(o.node_id, 0x11, 16);
    pe_env e;
    REQUIRE_OK(pe_open(&e, &o));
    CHECK_OK(hs_ok(&e, 4));
    create_cache(&e, "p");
    const uint8_t *b;
    size_t n;
    req_begin(&e, 1101);
    em_buf_put_le32(&e.req, 2);
    em_buf_put_le32(&e.req, (uint32_t)em_hash_java_str((const uint8_t *)"p", 1));
    em_buf_put_le32(&e.req, 777);                              /* unknown: skipped */
    REQUIRE_OK(req_send(&e, &b, &n));
    const uint8_t *p = b + 10;
    CHECK_EQ(em_ld64(p), 1);
    CHECK_EQ(em_ld32(p + 12), 1);                              /* one group */
    CHECK_EQ(p[16], 1);                                        /* applicable */
    CHECK_EQ(em_ld32(p + 17), 1);                              /* one cache */
    CHECK_EQ(em_ld32(p + 25), 0);                              /* no key configs */
    CHECK_EQ(em_ld32(p + 29), 1);                              /* one node */
    CHECK_EQ(p[33], 10);
    CHECK_EQ(p[34], 0x11);
    CHECK_EQ(em_ld32(p + 50), 1024);
    CHECK_EQ(em_ld32(p + 54 + 4 * 1023), 1023);
    CHECK_EQ(n, 10 + 54 + 4 * 1024);
    pe_close(&e);
}

/* create_mode: GET_OR_CREATE_WITH_CONFIGURATION with a cache mode
 * (2 = PARTITIONED, 1 = REPLICATED). */
static void create_mode(pe_env *e, const char *name, int32_t mode)
{
    const uint8_t *b;
    size_t n;
    req_begin(e, 1054);
    size_t at = e->req.len;
    em_buf_put_le32(&e->req, 0);
    em_buf_put_le16(&e->req, 2);
    em_buf_put_le16(&e->req, 0);
    put_str(&e->req, name);
    em_buf_put_le16(&e->req, 1);
    em_buf_put_le32(&e->req, (uint32_t)mode);
    em_st32(e->req.p + at, (uint32_t)(e->req.len - at - 4));
    if (req_send(e, &b, &n) == 0)
        CHECK_EQ(em_ld16(b + 8) & 1, 0);
}

static int32_t cid(const char *name)
{
    return em_hash_java_str((const uint8_t *)name, strlen(name));
}

/* CACHE_PARTITIONS with repeats behind many unknown ids (the layout that
 * made the old duplicate check quadratic): each cache is reported once, in
 * its group; more than PR_MAX_PARTITION_CACHES ids is refused with status 1. */
TEST(proto_partitions_repeats_and_bound)
{
    pe_env e;
    REQUIRE_OK(pe_open(&e, NULL));
    CHECK_OK(hs_ok(&e, 4));
    create_mode(&e, "pp", 2);
    create_mode(&e, "pq", 2);
    create_mode(&e, "pr", 1);
    const uint8_t *b;
    size_t n;
    req_begin(&e, 1101);
    em_buf_put_le32(&e.req, 4000);
    for (int i = 0; i < 2000; i++)
        em_buf_put_le32(&e.req, 0x5000 + (uint32_t)i);            /* unknown */
    for (int i = 0; i < 2000; i++)
        em_buf_put_le32(&e.req, (uint32_t)cid(i % 3 == 0 ? "pq" : i % 3 == 1 ? "pr" : "pp"));
    REQUIRE_OK(req_send(&e, &b, &n));
    REQUIRE_EQ(em_ld16(b + 8) & 1, 0);
    const uint8_t *p = b + 10, *end = b + n;
    CHECK_EQ(em_ld32(p + 12), 2);                              /* applicable + others */
    p += 16;
    REQUIRE(p[0] == 1);
    REQUIRE_EQ(em_ld32(p + 1), 2);                             /* pq then pp, once each */
    CHECK_EQ((int32_t)em_ld32(p + 5), cid("pq"));
    CHECK_EQ((int32_t)em_ld32(p + 13), cid("pp"));
    p += 5 + 2 * 8;
    CHECK_EQ(em_ld32(p), 1);                                   /* one node */
    p += 4 + 17;
    REQUIRE_EQ(em_ld32(p), 1024);
    p += 4 + 4 * 1024;
    REQUIRE(end - p == 9);
    CHECK_EQ(p[0], 0);                                         /* not applicable */
    CHECK_EQ(em_ld32(p + 1), 1);
    CHECK_EQ((int32_t)em_ld32(p + 5), cid("pr"));
    /* the bound */
    for (int over = 0; over < 2; over++) {
        uint32_t cnt = PR_MAX_PARTITION_CACHES + (uint32_t)over;
        req_begin(&e, 1101);
        em_buf_put_le32(&e.req, cnt);
        for (uint32_t i = 0; i < cnt; i++)
            em_buf_put_le32(&e.req, (uint32_t)cid("pp"));
        REQUIRE_OK(req_send(&e, &b, &n));
        CHECK_EQ(em_ld16(b + 8) & 1, over);
        if (over) {
            CHECK_EQ(em_ld32(b + 10), 1);                      /* FAILED */
            CHECK(memmem(b, n, "at most 65536", 13) != NULL);
        }
    }
    pe_close(&e);
}

/* A GET_ALL of many keys is sliced a chunk at a time: it allocates far
 * less than its slices would take (8 MiB here), and keeps nothing after
 * (the slice arrays stayed at 4 MiB). */
TEST(proto_big_batch_scratch_released)
{
    pe_env e;
    REQUIRE_OK(pe_open(&e, NULL));
    CHECK_OK(hs_ok(&e, 2));
    create_cache(&e, "big");
    const uint8_t *b;
    size_t n;
    int64_t before = 0;
    em_mem_stats m0 = {0}, m1 = {0};
    for (int round = 0; round < 2; round++) {
        uint32_t cnt = round ? 100000 : 100;
        req_begin(&e, 1003);
        cache_hdr(&e.req, "big");
        em_buf_put_le32(&e.req, cnt);
        for (uint32_t i = 0; i < cnt; i++)
            put_int(&e.req, (int32_t)i);
        em_st32(e.req.p, (uint32_t)(e.req.len - 4));
        size_t used;
        m0 = em_mem_thread();
        REQUIRE_OK(pr_feed(e.c, e.req.p, e.req.len, &e.out, SIZE_MAX / 2, &used));
        m1 = em_mem_thread();
        CHECK_EQ(status_of(e.out.p + 4), 0);
        em_buf_free(&e.req);            /* the test's own buffers do not count */
        em_buf_free(&e.out);
        if (round == 0)
            before = em_mem_live_bytes();
    }
    (void)b;
    (void)n;
    CHECK(m1.bytes - m0.bytes < (1 << 20));
    CHECK(em_mem_live_bytes() - before < (1 << 20));
    pe_close(&e);
}

/* PUT_BINARY_TYPE past the per-type bounds: status 1 with a message that
 * names them, for a record too big on its own and for growth past them. */
TEST(proto_binary_type_bounds_reply)
{
    pe_env e;
    REQUIRE_OK(pe_open(&e, NULL));
    CHECK_OK(hs_ok(&e, 2));
    const uint8_t *b;
    size_t n;
    for (int round = 0; round < 3; round++) {
        /* 8193 fields at once; then 8192, then one more */
        uint32_t from = round == 2 ? 8192 : 0, cnt = round == 0 ? 8193 : round == 1 ? 8192 : 1;
        req_begin(&e, 3003);
        em_buf_put_le32(&e.req, 4242);
        put_str(&e.req, "Bounded");
        em_buf_put_u8(&e.req, 101);
        em_buf_put_le32(&e.req, cnt);
        for (uint32_t i = from; i < from + cnt; i++) {
            char name[16];
            snprintf(name, sizeof name, "f%u", i);
            put_str(&e.req, name);
            em_buf_put_le32(&e.req, 3);
            em_buf_put_le32(&e.req, i + 1);
        }
        em_buf_put_u8(&e.req, 0);
        em_buf_put_le32(&e.req, 0);
        REQUIRE_OK(req_send(&e, &b, &n));
        CHECK_EQ(status_of(b), round == 1 ? 0 : 1);
        if (round != 1)
            CHECK(memmem(b, n, "at most 8192 fields", 19) != NULL);
    }
    pe_close(&e);
}

/* Person{id:7, name:"abc"} as Node 1.0.0 writes it (reference §3.2). */
static const uint8_t PERSON[39] = {
    0x67, 0x01, 0x2b, 0x00, 0x55, 0x9b, 0xe3, 0xc4, 0x01, 0x00, 0x00, 0x00,
    0x27, 0x00, 0x00, 0x00, 0xf3, 0xf1, 0xdc, 0x39, 0x25, 0x00, 0x00, 0x00,
    0x03, 0x07, 0x00, 0x00, 0x00, 0x09, 0x03, 0x00, 0x00, 0x00, 0x61, 0x62,
    0x63, 0x18, 0x1d
};

/* Batches longer than a chunk (PR_BATCH, 4096) behave as one: every pair
 * stored, found and removed; a bad key at the very end refuses the whole
 * request before anything is applied. */
TEST(proto_batches_in_chunks)
{
    pe_env e;
    REQUIRE_OK(pe_open(&e, NULL));
    CHECK_OK(hs_ok(&e, 2));
    create_cache(&e, "ch");
    const uint8_t *b;
    size_t n;
    const uint32_t cnt = 10000;
    for (int bad = 1; bad >= 0; bad--) {
        req_begin(&e, 1004);
        cache_hdr(&e.req, "ch");
        em_buf_put_le32(&e.req, cnt);
        for (uint32_t i = 0; i < cnt; i++) {
            if (bad && i == cnt - 1)
                em_buf_put_u8(&e.req, 101);            /* null key */
            else
                put_int(&e.req, (int32_t)i);
            if (i % 3 == 0) {                          /* a 27-wrapped Person value */
                em_buf_put_u8(&e.req, 27);
                em_buf_put_le32(&e.req, sizeof PERSON);
                em_buf_append(&e.req, PERSON, sizeof PERSON);
                em_buf_put_le32(&e.req, 0);
            } else {
                put_int(&e.req, (int32_t)i * 2);
            }
        }
        REQUIRE_OK(req_send(&e, &b, &n));
        CHECK_EQ(status_of(b) != 0, bad);
        req_begin(&e, 1020);
        cache_hdr(&e.req, "ch");
        em_buf_put_le32(&e.req, 0);
        REQUIRE_OK(req_send(&e, &b, &n));
        CHECK_EQ(em_ld64(b + 12), bad ? 0 : cnt);
    }
    /* GET_ALL over every key plus some missing ones */
    req_begin(&e, 1003);
    cache_hdr(&e.req, "ch");
    em_buf_put_le32(&e.req, cnt + 50);
    for (uint32_t i = 0; i < cnt + 50; i++)
        put_int(&e.req, (int32_t)i);
    REQUIRE_OK(req_send(&e, &b, &n));
    REQUIRE_EQ(status_of(b), 0);
    CHECK_EQ(em_ld32(b + 12), cnt);
    CHECK(memmem(b, n, PERSON + 24, sizeof PERSON - 24) != NULL);
    /* CONTAINS_KEYS: all, then one missing after the first chunk */
    for (int miss = 0; miss < 2; miss++) {
        req_begin(&e, 1012);
        cache_hdr(&e.req, "ch");
        em_buf_put_le32(&e.req, cnt);
        for (uint32_t i = 0; i < cnt; i++)
            put_int(&e.req, (int32_t)(miss && i == 5000 ? 777777 : i));
        REQUIRE_OK(req_send(&e, &b, &n));
        REQUIRE_EQ(status_of(b), 0);
        CHECK_EQ(b[12], !miss);
    }
    /* REMOVE_KEYS of all of them */
    req_begin(&e, 1018);
    cache_hdr(&e.req, "ch");
    em_buf_put_le32(&e.req, cnt);
    for (uint32_t i = 0; i < cnt; i++)
        put_int(&e.req, (int32_t)i);
    REQUIRE_OK(req_send(&e, &b, &n));
    CHECK_EQ(status_of(b), 0);
    req_begin(&e, 1020);
    cache_hdr(&e.req, "ch");
    em_buf_put_le32(&e.req, 0);
    REQUIRE_OK(req_send(&e, &b, &n));
    CHECK_EQ(em_ld64(b + 12), 0);
    pe_close(&e);
}

TEST(proto_get_put_allocate_nothing_in_steady_state)
{
    pe_env e;
    REQUIRE_OK(pe_open(&e, NULL));
    CHECK_OK(hs_ok(&e, 2));
    create_cache(&e, "a");
    const uint8_t *b;
    size_t n;
    char val[101];
    memset(val, 'v', 100);
    val[100] = 0;
    em_mem_stats before = {0};
    for (int round = 0; round < 2; round++) {
        if (round == 1)
            before = em_mem_thread();
        for (int i = 0; i < 500; i++) {
            req_begin(&e, 1001);
            cache_hdr(&e.req, "a");
            put_int(&e.req, i % 50);
            put_str(&e.req, val);
            REQUIRE_OK(req_send(&e, &b, &n));
            REQUIRE_EQ(status_of(b), 0);
            req_begin(&e, 1000);
            cache_hdr(&e.req, "a");
            put_int(&e.req, i % 50);
            REQUIRE_OK(req_send(&e, &b, &n));
            REQUIRE_EQ(n, 12 + 105);
        }
    }
    em_mem_stats after = em_mem_thread();
    CHECK_EQ(after.allocs - before.allocs, 0);
    CHECK_EQ(after.bytes - before.bytes, 0);
    pe_close(&e);
}

/* Cluster state: a change the server cannot record is refused and changes
 * nothing; read-only refuses PUT but a GET still allocates nothing. */
static int refuse_state(void *arg, int state)
{
    int *calls = arg;
    ++*calls;
    return state == PR_STATE_INACTIVE ? EM_IO : 0;
}

static int change_state(pe_env *e, int st)
{
    const uint8_t *b;
    size_t n;
    req_begin(e, 5001);
    em_buf_put_u8(&e->req, (uint8_t)st);
    int rc = req_send(e, &b, &n);
    return rc ? rc : status_of(b);
}

TEST(proto_cluster_state_change_and_read_only_get)
{
    pr_options o;
    pr_options_default(&o);
    int calls = 0;
    o.state_persist = refuse_state;
    o.state_arg = &calls;
    pe_env e;
    REQUIRE_OK(pe_open(&e, &o));
    CHECK_OK(hs_ok(&e, 2));
    create_cache(&e, "a");
    CHECK_EQ(change_state(&e, PR_STATE_INACTIVE), 1);      /* not recorded: refused */
    CHECK_EQ(pr_server_state(e.ps), PR_STATE_ACTIVE);
    CHECK_EQ(change_state(&e, PR_STATE_ACTIVE), 0);         /* no change: not recorded */
    CHECK_EQ(calls, 1);
    CHECK_EQ(change_state(&e, PR_STATE_ACTIVE_READ_ONLY), 0);
    CHECK_EQ(pr_server_state(e.ps), PR_STATE_ACTIVE_READ_ONLY);
    CHECK_EQ(calls, 2);
    const uint8_t *b;
    size_t n;
    req_begin(&e, 1001);
    cache_hdr(&e.req, "a");
    put_int(&e.req, 1);
    put_str(&e.req, "v");
    REQUIRE_OK(req_send(&e, &b, &n));
    CHECK_EQ(status_of(b), 1);
    em_mem_stats before = {0};
    for (int round = 0; round < 2; round++) {
        if (round == 1)
            before = em_mem_thread();
        for (int i = 0; i < 200; i++) {
            req_begin(&e, 1000);
            cache_hdr(&e.req, "a");
            put_int(&e.req, i % 50);
            REQUIRE_OK(req_send(&e, &b, &n));
            REQUIRE_EQ(status_of(b), 0);
        }
    }
    em_mem_stats after = em_mem_thread();
    CHECK_EQ(after.allocs - before.allocs, 0);
    CHECK_EQ(after.bytes - before.bytes, 0);
    pe_close(&e);
}

TEST(proto_output_cap_stops_early)
{
    pe_env e;
    REQUIRE_OK(pe_open(&e, NULL));
    CHECK_OK(hs_ok(&e, 2));
    create_cache(&e, "o");
    /* three pipelined GETs, cap lets only the first reply out */
    em_buf pipe = EM_BUF_INIT;
    for (int i = 0; i < 3; i++) {
        req_begin(&e, 1000);
        cache_hdr(&e.req, "o");
        put_int(&e.req, i);
        em_st32(e.req.p, (uint32_t)(e.req.len - 4));
        em_buf_append(&pipe, e.req.p, e.req.len);
    }
    em_buf_reset(&e.out);
    size_t used;
    CHECK_OK(pr_feed(e.c, pipe.p, pipe.len, &e.out, 1, &used));
    CHECK_EQ(used, pipe.len / 3);
    CHECK_OK(pr_feed(e.c, pipe.p + used, pipe.len - used, &e.out, SIZE_MAX / 2, &used));
    CHECK_EQ(used, pipe.len / 3 * 2);
    CHECK_EQ(e.out.len, 3 * 17);
    em_buf_free(&pipe);
    pe_close(&e);
}

TEST(proto_binary_type_ops)
{
    pe_env e;
    REQUIRE_OK(pe_open(&e, NULL));
    CHECK_OK(hs_ok(&e, 2));
    const uint8_t *b;
    size_t n;
    /* §2.6: Node's PUT_BINARY_TYPE for Person{id:int, name:string} */
    static const char person[] =
        "559be3c4 09 06000000 506572736f6e 65 02000000 09 02000000 6964 03000000 1b0d0000 "
        "09 04000000 6e616d65 09000000 8b7a3300 00 01000000 f3f1dc39 02000000 1b0d0000 8b7a3300";
    req_begin(&e, 3003);
    for (const char *h = person; h[0] && h[1];) {
        if (*h == ' ') { h++; continue; }
        unsigned x;
        sscanf(h, "%2x", &x);
        em_buf_put_u8(&e.req, (uint8_t)x);
        h += 2;
    }
    REQUIRE_OK(req_send(&e, &b, &n));
    CHECK_EQ(status_of(b), 0);
    req_begin(&e, 3002);
    em_buf_put_le32(&e.req, 0xc4e39b55u);
    REQUIRE_OK(req_send(&e, &b, &n));
    REQUIRE_EQ(status_of(b), 0);
    CHECK_EQ(b[12], 1);
    CHECK(memmem(b, n, "Person", 6) != NULL);
    req_begin(&e, 3002);
    em_buf_put_le32(&e.req, 12345);
    REQUIRE_OK(req_send(&e, &b, &n));
    CHECK_EQ(n, 13);
    CHECK_EQ(b[12], 0);
    /* type names: register -> bool true, then read back */
    req_begin(&e, 3001);
    em_buf_put_u8(&e.req, 0);
    em_buf_put_le32(&e.req, 42);
    put_str(&e.req, "org.example.Foo");
    REQUIRE_OK(req_send(&e, &b, &n));
    CHECK_EQ(status_of(b), 0);
    CHECK_EQ(b[12], 1);
    req_begin(&e, 3000);
    em_buf_put_u8(&e.req, 0);
    em_buf_put_le32(&e.req, 42);
    REQUIRE_OK(req_send(&e, &b, &n));
    CHECK_EQ(status_of(b), 0);
    CHECK(memmem(b, n, "org.example.Foo", 15) != NULL);
    pe_close(&e);
}
