/* test_alloc.c - GET and PUT allocate 0 bytes inside emberd in steady state
 * (DESIGN.md §3 rule 5).  emberd started with the debug-ops flag answers the
 * private op PR_OP_DEBUG_STATS (32000, src/proto/proto.h) with its counting
 * allocator's totals: long allocs, long bytes, long frees, long live bytes,
 * long live blocks, summed over its worker threads.
 */
#include "client.h"
#include "test.h"

#include "util/err.h"

#include <string.h>

#define OP_DEBUG_STATS 32000

typedef struct srv_mem {
    int64_t allocs, bytes, frees, live_bytes, live_blocks;
} srv_mem;

static int read_stats(tc_conn *c, srv_mem *m)
{
    em_buf b = EM_BUF_INIT;
    tc_reply r;
    tc_req_begin(c, &b, OP_DEBUG_STATS);
    tc_req_end(&b);
    int rc = tc_call(c, &b, &r);
    em_buf_free(&b);
    if (rc)
        return rc;
    if (r.status || r.n != 40)
        return EM_PROTO;
    tc_rd d = tc_rd_of(&r);
    m->allocs = tc_rd_i64(&d);
    m->bytes = tc_rd_i64(&d);
    m->frees = tc_rd_i64(&d);
    m->live_bytes = tc_rd_i64(&d);
    m->live_blocks = tc_rd_i64(&d);
    return 0;
}

/* value kinds: 0 string of 100 bytes, 1 byte array of 1000, 2 complex object */
static void value(em_buf *b, int kind, int variant)
{
    char s[101];
    switch (kind) {
    case 0:
        memset(s, 'a' + variant % 26, 100);
        tc_v_strn(b, s, 100);
        break;
    case 1:
        tc_v_bytes(b, 1000, (uint8_t)variant);
        break;
    default:
        /* Person{id:int, name:string(3)} with a full footer (no metadata needed) */
        tc_put_u8(b, 103); tc_put_u8(b, 1);
        tc_put_i16(b, 0x0001 | 0x0002 | 0x0008);
        tc_put_i32(b, (int32_t)0xC4E39B55);
        tc_put_i32(b, 0);
        tc_put_i32(b, 24 + 5 + 8 + 10);
        tc_put_i32(b, 0x39DCF1F3);
        tc_put_i32(b, 24 + 5 + 8);
        tc_v_int(b, variant);
        tc_v_strn(b, "abc", 3);
        tc_put_i32(b, 3355); tc_put_u8(b, 24);
        tc_put_i32(b, 3373707); tc_put_u8(b, 29);
        break;
    }
}

static int op(tc_conn *c, em_buf *b, int opcode, int32_t key, int kind, int variant)
{
    tc_reply r;
    tc_req_begin(c, b, opcode);
    tc_cache_hdr(b, tc_cache_id("alloc"), 0);
    tc_v_int(b, key);
    if (opcode == 1001)
        value(b, kind, variant);
    tc_req_end(b);
    int rc = tc_call(c, b, &r);
    if (rc)
        return rc;
    if (r.status)
        return EM_PROTO;
    if (opcode == 1000 && r.n < 2)
        return EM_PROTO;
    return 0;
}

static void check_zero_alloc(int kind)
{
    const char *args[] = {TC_FLAG_THREADS, "1", TC_FLAG_DEBUG_OPS, NULL};
    tc_server s;
    REQUIRE_OK(tc_server_start(&s, args));
    tc_conn c;
    REQUIRE_OK(tc_open(&c, s.port));
    REQUIRE_OK(tc_create_cache(&c, "alloc"));
    em_buf b = EM_BUF_INIT;
    srv_mem m0, m1, m2;
    /* warm up: every key exists, buffers have grown to size */
    for (int i = 0; i < 2000; i++) {
        REQUIRE_OK(op(&c, &b, 1001, i % 16, kind, i));
        REQUIRE_OK(op(&c, &b, 1000, i % 16, kind, i));
    }
    REQUIRE_OK(read_stats(&c, &m0));
    REQUIRE_OK(read_stats(&c, &m0));
    for (int i = 0; i < 10000; i++)
        REQUIRE_OK(op(&c, &b, 1001, i % 16, kind, i + 1));
    REQUIRE_OK(read_stats(&c, &m1));
    for (int i = 0; i < 10000; i++)
        REQUIRE_OK(op(&c, &b, 1000, i % 16, kind, 0));
    REQUIRE_OK(read_stats(&c, &m2));
    if (m1.allocs != m0.allocs || m1.bytes != m0.bytes)
        test_fail(__FILE__, __LINE__, "10000 PUTs allocated %lld times, %lld bytes",
                  (long long)(m1.allocs - m0.allocs), (long long)(m1.bytes - m0.bytes));
    if (m2.allocs != m1.allocs || m2.bytes != m1.bytes)
        test_fail(__FILE__, __LINE__, "10000 GETs allocated %lld times, %lld bytes",
                  (long long)(m2.allocs - m1.allocs), (long long)(m2.bytes - m1.bytes));
    CHECK_EQ(m2.live_bytes, m0.live_bytes);
    /* the counters are live: creating a cache and new keys does allocate */
    REQUIRE_OK(tc_create_cache(&c, "alloc-other"));
    for (int i = 100; i < 200; i++)
        REQUIRE_OK(op(&c, &b, 1001, i, kind, i));
    REQUIRE_OK(read_stats(&c, &m1));
    CHECK(m1.allocs > m2.allocs);
    em_buf_free(&b);
    tc_close(&c);
    CHECK_EQ(tc_server_stop(&s), 0);
}

TEST(alloc_get_put_zero_string_values) { check_zero_alloc(0); }
TEST(alloc_get_put_zero_byte_array_values) { check_zero_alloc(1); }
TEST(alloc_get_put_zero_complex_values) { check_zero_alloc(2); }

/* Without the flag the private op is just an unknown op code. */
TEST(alloc_debug_op_off_by_default)
{
    tc_server s;
    REQUIRE_OK(tc_server_start(&s, NULL));
    tc_conn c;
    REQUIRE_OK(tc_open(&c, s.port));
    em_buf b = EM_BUF_INIT;
    tc_reply r;
    tc_req_begin(&c, &b, OP_DEBUG_STATS);
    tc_req_end(&b);
    REQUIRE_OK(tc_call(&c, &b, &r));
    CHECK_EQ(r.status, 2);
    em_buf_free(&b);
    tc_close(&c);
    CHECK_EQ(tc_server_stop(&s), 0);
}
