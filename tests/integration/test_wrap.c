/* test_wrap.c - complex objects on the wire: returned 27-wrapped at top level
 * and inside arrays, collections and maps (reference §3.4, §5.4 quirk 2);
 * accepted both plain (103) and wrapped (27); keys compared after
 * normalisation, so a wrong client hash or a 27 wrapper still finds the key
 * (DESIGN.md §4, reference §3.3 hash rule).
 */
#include "client.h"
#include "test.h"

#include "util/err.h"
#include "util/hash.h"

#include <string.h>

/* person appends Person{id, name(3 chars)} with a full footer and the given
 * header hash; returns its length (47). */
static size_t person(em_buf *b, int32_t id, const char *name3, int32_t hash)
{
    size_t start = b->len;
    tc_put_u8(b, 103); tc_put_u8(b, 1);
    tc_put_i16(b, 0x0001 | 0x0002 | 0x0008);      /* user type, schema, 1-byte offsets */
    tc_put_i32(b, (int32_t)0xC4E39B55);
    tc_put_i32(b, hash);
    tc_put_i32(b, 47);
    tc_put_i32(b, 0x39DCF1F3);
    tc_put_i32(b, 37);
    tc_v_int(b, id);
    tc_v_strn(b, name3, 3);
    tc_put_i32(b, 3355); tc_put_u8(b, 24);
    tc_put_i32(b, 3373707); tc_put_u8(b, 29);
    return b->len - start;
}

/* java_hash: the hash Java computes over the data region [24, 37). */
static int32_t java_hash(const uint8_t *obj)
{
    return em_hash_bytes31(obj + 24, 37 - 24);
}

static int put_kv(tc_conn *c, const char *cache, const em_buf *k, const em_buf *v)
{
    em_buf b = EM_BUF_INIT;
    tc_reply r;
    tc_req_begin(c, &b, 1001);
    tc_cache_hdr(&b, tc_cache_id(cache), 0);
    tc_put_bytes(&b, k->p, k->len);
    tc_put_bytes(&b, v->p, v->len);
    tc_req_end(&b);
    int rc = tc_call(c, &b, &r);
    em_buf_free(&b);
    return rc ? rc : r.status;
}

/* get_k: GET with key bytes k; r->p/n hold the value. */
static int get_k(tc_conn *c, const char *cache, const em_buf *k, tc_reply *r)
{
    em_buf b = EM_BUF_INIT;
    tc_req_begin(c, &b, 1000);
    tc_cache_hdr(&b, tc_cache_id(cache), 0);
    tc_put_bytes(&b, k->p, k->len);
    tc_req_end(&b);
    int rc = tc_call(c, &b, r);
    em_buf_free(&b);
    return rc ? rc : r->status;
}

/* check_wrapped: p holds 27 + len + object + offset 0 whose object equals
 * want (hash: see below).  Returns bytes consumed. */
static size_t check_wrapped(const uint8_t *p, size_t n, const uint8_t *want, size_t wlen)
{
    if (n < 9 + wlen) {
        test_fail(__FILE__, __LINE__, "wrapped object: only %zu bytes", n);
        return n;
    }
    CHECK_EQ(p[0], 27);
    CHECK_EQ((int32_t)em_ld32(p + 1), (int64_t)wlen);
    const uint8_t *o = p + 5;
    CHECK_MEM(o, want, 8);
    /* values: the hash as sent, or recomputed the Java way (DESIGN §4
     * normalises, a Java server keeps it); anything else is corruption */
    int32_t h = (int32_t)em_ld32(o + 8);
    CHECK(h == java_hash(want) || h == (int32_t)em_ld32(want + 8));
    CHECK_MEM(o + 12, want + 12, wlen - 12);
    CHECK_EQ((int32_t)em_ld32(p + 5 + wlen), 0);
    return 9 + wlen;
}

TEST(wrap_top_level_values)
{
    tc_server s;
    REQUIRE_OK(tc_server_start(&s, NULL));
    tc_conn c;
    REQUIRE_OK(tc_open(&c, s.port));
    REQUIRE_OK(tc_create_cache(&c, "wrap"));
    em_buf k = EM_BUF_INIT, v = EM_BUF_INIT, want = EM_BUF_INIT;
    tc_reply r;
    /* plain 103 with a wrong hash (Node writes 1) */
    person(&want, 7, "abc", 1);
    tc_v_int(&k, 1);
    tc_put_bytes(&v, want.p, want.len);
    REQUIRE_EQ(put_kv(&c, "wrap", &k, &v), 0);
    REQUIRE_EQ(get_k(&c, "wrap", &k, &r), 0);
    CHECK_EQ(check_wrapped(r.p, r.n, want.p, want.len), r.n);
    /* sent already wrapped (what Java clients send) */
    em_buf_reset(&v);
    tc_put_u8(&v, 27);
    tc_put_i32(&v, (int32_t)want.len);
    tc_put_bytes(&v, want.p, want.len);
    tc_put_i32(&v, 0);
    em_buf_reset(&k);
    tc_v_int(&k, 2);
    REQUIRE_EQ(put_kv(&c, "wrap", &k, &v), 0);
    REQUIRE_EQ(get_k(&c, "wrap", &k, &r), 0);
    CHECK_EQ(check_wrapped(r.p, r.n, want.p, want.len), r.n);
    /* GET_AND_PUT returns the previous value wrapped too */
    em_buf b = EM_BUF_INIT;
    tc_req_begin(&c, &b, 1005);
    tc_cache_hdr(&b, tc_cache_id("wrap"), 0);
    tc_v_int(&b, 2);
    tc_v_int(&b, 0);
    tc_req_end(&b);
    REQUIRE_OK(tc_call(&c, &b, &r));
    REQUIRE_EQ(r.status, 0);
    CHECK_EQ(check_wrapped(r.p, r.n, want.p, want.len), r.n);
    /* GET_ALL rows */
    tc_req_begin(&c, &b, 1003);
    tc_cache_hdr(&b, tc_cache_id("wrap"), 0);
    tc_put_i32(&b, 1);
    tc_v_int(&b, 1);
    tc_req_end(&b);
    REQUIRE_OK(tc_call(&c, &b, &r));
    REQUIRE_EQ(r.status, 0);
    REQUIRE(r.n > 9);
    CHECK_EQ((int32_t)em_ld32(r.p), 1);
    CHECK_EQ(r.p[4], 3);
    CHECK_EQ(4 + 5 + check_wrapped(r.p + 9, r.n - 9, want.p, want.len), r.n);
    em_buf_free(&b);
    em_buf_free(&k);
    em_buf_free(&v);
    em_buf_free(&want);
    tc_close(&c);
    CHECK_EQ(tc_server_stop(&s), 0);
}

TEST(wrap_inside_containers)
{
    tc_server s;
    REQUIRE_OK(tc_server_start(&s, NULL));
    tc_conn c;
    REQUIRE_OK(tc_open(&c, s.port));
    REQUIRE_OK(tc_create_cache(&c, "wrapc"));
    em_buf p1 = EM_BUF_INIT, p2 = EM_BUF_INIT, k = EM_BUF_INIT, v = EM_BUF_INIT;
    person(&p1, 1, "one", 1);
    person(&p2, 2, "two", 12345);
    tc_reply r;
    for (int kind = 0; kind < 3; kind++) {
        em_buf_reset(&k);
        em_buf_reset(&v);
        tc_v_int(&k, kind);
        size_t hdr;
        if (kind == 0) {             /* object array of Person */
            tc_put_u8(&v, 23); tc_put_i32(&v, (int32_t)0xC4E39B55); tc_put_i32(&v, 2);
            hdr = 9;
        } else if (kind == 1) {      /* ArrayList */
            tc_put_u8(&v, 24); tc_put_i32(&v, 2); tc_put_u8(&v, 1);
            hdr = 6;
        } else {                     /* HashMap string -> Person */
            tc_put_u8(&v, 25); tc_put_i32(&v, 2); tc_put_u8(&v, 1);
            hdr = 6;
        }
        if (kind == 2)
            tc_v_str(&v, "a");
        tc_put_bytes(&v, p1.p, p1.len);
        if (kind == 2)
            tc_v_str(&v, "b");
        tc_put_bytes(&v, p2.p, p2.len);
        REQUIRE_EQ(put_kv(&c, "wrapc", &k, &v), 0);
        REQUIRE_EQ(get_k(&c, "wrapc", &k, &r), 0);
        REQUIRE(r.n > hdr);
        CHECK_MEM(r.p, v.p, hdr);
        size_t pos = hdr;
        if (kind == 2) {
            CHECK_MEM(r.p + pos, "\x09\x01\x00\x00\x00" "a", 6);
            pos += 6;
        }
        pos += check_wrapped(r.p + pos, r.n - pos, p1.p, p1.len);
        if (kind == 2) {
            CHECK_MEM(r.p + pos, "\x09\x01\x00\x00\x00" "b", 6);
            pos += 6;
        }
        pos += check_wrapped(r.p + pos, r.n - pos, p2.p, p2.len);
        CHECK_EQ(pos, r.n);
    }
    em_buf_free(&p1);
    em_buf_free(&p2);
    em_buf_free(&k);
    em_buf_free(&v);
    tc_close(&c);
    CHECK_EQ(tc_server_stop(&s), 0);
}

/* Complex keys: the same logical key with another (wrong) hash, or wrapped
 * in 27, is the same key. */
TEST(wrap_complex_keys_normalised)
{
    tc_server s;
    REQUIRE_OK(tc_server_start(&s, NULL));
    tc_conn c;
    REQUIRE_OK(tc_open(&c, s.port));
    REQUIRE_OK(tc_create_cache(&c, "wrapk"));
    em_buf k = EM_BUF_INIT, v = EM_BUF_INIT, obj = EM_BUF_INIT;
    tc_reply r;
    person(&k, 5, "key", 1);
    tc_v_str(&v, "found");
    REQUIRE_EQ(put_kv(&c, "wrapk", &k, &v), 0);
    /* other hash values */
    const int32_t hashes[] = {242781947, 1764691734, 0, -1};
    for (size_t i = 0; i < sizeof hashes / sizeof hashes[0]; i++) {
        em_buf_reset(&k);
        person(&k, 5, "key", hashes[i]);
        REQUIRE_EQ(get_k(&c, "wrapk", &k, &r), 0);
        CHECK_EQ(r.n, 10);
        if (r.n == 10)
            CHECK_MEM(r.p, "\x09\x05\x00\x00\x00" "found", 10);
    }
    /* 27-wrapped key */
    person(&obj, 5, "key", 77);
    em_buf_reset(&k);
    tc_put_u8(&k, 27);
    tc_put_i32(&k, (int32_t)obj.len);
    tc_put_bytes(&k, obj.p, obj.len);
    tc_put_i32(&k, 0);
    REQUIRE_EQ(get_k(&c, "wrapk", &k, &r), 0);
    CHECK_EQ(r.n, 10);
    /* a different key is not found */
    em_buf_reset(&k);
    person(&k, 6, "key", 1);
    REQUIRE_EQ(get_k(&c, "wrapk", &k, &r), 0);
    CHECK_EQ(r.n, 1);
    if (r.n == 1)
        CHECK_EQ(r.p[0], 101);
    /* overwriting through a differently-hashed key keeps one entry */
    em_buf_reset(&k);
    person(&k, 5, "key", 999);
    REQUIRE_EQ(put_kv(&c, "wrapk", &k, &v), 0);
    em_buf b = EM_BUF_INIT;
    tc_req_begin(&c, &b, 1020);
    tc_cache_hdr(&b, tc_cache_id("wrapk"), 0);
    tc_put_i32(&b, 0);
    tc_req_end(&b);
    REQUIRE_OK(tc_call(&c, &b, &r));
    REQUIRE_EQ(r.n, 8);
    CHECK_EQ((int64_t)em_ld64(r.p), 1);
    em_buf_free(&b);
    em_buf_free(&k);
    em_buf_free(&v);
    em_buf_free(&obj);
    tc_close(&c);
    CHECK_EQ(tc_server_stop(&s), 0);
}
