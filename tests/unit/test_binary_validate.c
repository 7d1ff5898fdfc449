/* test_binary_validate.c - bin_validate, bin_key_prepare, bin_value_prepare,
 * bin_hash and bin_partition against hand-made bytes and the examples of
 * ../shared/reference/ignite-thin-protocol.md §3 and §4.2. */
#include "test.h"

#include "binary/binary.h"
#include "util/err.h"
#include "util/hash.h"
#include "util/mem.h"

/* Observed Node 1.0.0 Person{id:7, name:"abc"} (reference §3.2), hash 1. */
static const uint8_t PERSON[] = {
    0x67, 0x01, 0x2b, 0x00, 0x55, 0x9b, 0xe3, 0xc4, 0x01, 0x00, 0x00, 0x00,
    0x27, 0x00, 0x00, 0x00, 0xf3, 0xf1, 0xdc, 0x39, 0x25, 0x00, 0x00, 0x00,
    0x03, 0x07, 0x00, 0x00, 0x00, 0x09, 0x03, 0x00, 0x00, 0x00, 0x61, 0x62, 0x63,
    0x18, 0x1d};

/* mk_obj writes a complex object: fields (back-to-back data objects, offsets
 * given relative to the data start), footer of the given width (1/2/4) and
 * kind, optional raw bytes. Returns the length. */
static size_t mk_obj(uint8_t *o, int32_t tid, const uint8_t *data, size_t dlen,
                     const uint32_t *offs, const int32_t *fids, int nf, int width,
                     int compact, const uint8_t *raw, size_t rawlen)
{
    uint16_t flags = BIN_FLAG_USER_TYPE;
    size_t pos = 24;
    if (dlen)
        memcpy(o + pos, data, dlen);
    pos += dlen;
    uint32_t rawoff = 0;
    if (rawlen) {
        rawoff = (uint32_t)pos;
        memcpy(o + pos, raw, rawlen);
        pos += rawlen;
        flags |= BIN_FLAG_HAS_RAW;
    }
    uint32_t soff = 0, sid = 0;
    if (nf) {
        flags |= BIN_FLAG_HAS_SCHEMA;
        if (compact)
            flags |= BIN_FLAG_COMPACT;
        if (width == 1) flags |= BIN_FLAG_OFFSET_1;
        if (width == 2) flags |= BIN_FLAG_OFFSET_2;
        soff = (uint32_t)pos;
        sid = 0x811C9DC5u;
        for (int i = 0; i < nf; i++) {
            for (int k = 0; k < 4; k++) {
                sid ^= ((uint32_t)fids[i] >> (8 * k)) & 0xFF;
                sid *= 0x01000193u;
            }
            if (!compact) {
                em_st32(o + pos, (uint32_t)fids[i]);
                pos += 4;
            }
            uint32_t off = offs[i] + 24;
            if (width == 1) o[pos] = (uint8_t)off;
            else if (width == 2) em_st16(o + pos, (uint16_t)off);
            else em_st32(o + pos, off);
            pos += (size_t)width;
        }
        if (rawlen) {
            em_st32(o + pos, rawoff);
            pos += 4;
        }
    } else if (rawlen) {
        soff = rawoff;
    }
    o[0] = 0x67;
    o[1] = 1;
    em_st16(o + 2, flags);
    em_st32(o + 4, (uint32_t)tid);
    em_st32(o + 12, (uint32_t)pos);
    em_st32(o + 16, sid);
    em_st32(o + 20, soff);
    uint32_t hend = nf ? soff : (uint32_t)pos;
    em_st32(o + 8, (uint32_t)em_hash_bytes31(o + 24, hend - 24));
    return pos;
}

static const uint8_t PERSON_DATA[] = {0x03, 0x07, 0, 0, 0, 0x09, 0x03, 0, 0, 0, 'a', 'b', 'c'};
static const uint32_t PERSON_OFFS[] = {0, 5};
static const int32_t PERSON_FIDS[] = {3355, 3373707};

static size_t vlen(const uint8_t *p, size_t n)
{
    size_t len = 0;
    int rc = bin_validate(p, n, &len, 0);
    return rc ? 0 : len;
}

TEST(binary_validate_primitives)
{
    uint8_t b[32] = {0};
    size_t len;
    static const struct { uint8_t code; size_t len; } fx[] = {
        {1, 2}, {2, 3}, {3, 5}, {4, 9}, {5, 5}, {6, 9}, {7, 3}, {8, 2}, {10, 17},
        {11, 9}, {33, 13}, {36, 9}, {28, 9}, {38, 9}, {101, 1}};
    for (size_t i = 0; i < sizeof fx / sizeof fx[0]; i++) {
        b[0] = fx[i].code;
        em_st32(b + 1, 5);       /* enum type id must be non-zero for 28/38 */
        CHECK_OK(bin_validate(b, sizeof b, &len, 0));
        CHECK_EQ(len, fx[i].len);
        CHECK_EQ(bin_validate(b, fx[i].len - 1, &len, 0), fx[i].len == 1 ? EM_TRUNCATED : EM_TRUNCATED);
    }
    CHECK_EQ(bin_validate(b, 0, &len, 0), EM_TRUNCATED);
}

TEST(binary_validate_strings_utf8)
{
    uint8_t b[16] = {9, 3, 0, 0, 0, 'a', 'b', 'c'};
    size_t len;
    CHECK_OK(bin_validate(b, 8, &len, 0));
    CHECK_EQ(len, 8);
    CHECK_EQ(bin_validate(b, 7, &len, 0), EM_TRUNCATED);
    em_st32(b + 1, (uint32_t)-1);
    CHECK_EQ(bin_validate(b, 8, &len, 0), EM_BADLEN);
    static const uint8_t bad[][4] = {
        {0xC0, 0x80}, {0xED, 0xA0, 0x80}, {0xF5, 0x80, 0x80, 0x80}, {0xE0, 0x80, 0x80},
        {0xF4, 0x90, 0x80, 0x80}, {0x80}, {0xE2, 0x82}};
    static const int badlen[] = {2, 3, 4, 3, 4, 1, 2};
    for (int i = 0; i < 7; i++) {
        b[0] = 9;
        em_st32(b + 1, (uint32_t)badlen[i]);
        memcpy(b + 5, bad[i], (size_t)badlen[i]);
        CHECK_EQ(bin_validate(b, 5 + (size_t)badlen[i], &len, 0), EM_BADUTF8);
    }
    static const uint8_t good[] = {0xC3, 0xA9, 0xE2, 0x82, 0xAC, 0xF0, 0x9F, 0x98, 0x80};
    em_st32(b + 1, sizeof good);
    memcpy(b + 5, good, sizeof good);
    CHECK_OK(bin_validate(b, 5 + sizeof good, &len, 0));
}

TEST(binary_validate_forbidden_and_unknown)
{
    uint8_t b[16] = {0};
    size_t len;
    static const uint8_t forb[] = {254, 32, 35, 99};
    for (int i = 0; i < 4; i++) {
        b[0] = forb[i];
        CHECK_EQ(bin_validate(b, sizeof b, &len, 0), EM_FORBIDDEN);
    }
    static const uint8_t unk[] = {0, 26, 40, 98, 100, 104, 200, 255};
    for (int i = 0; i < 8; i++) {
        b[0] = unk[i];
        CHECK_EQ(bin_validate(b, sizeof b, &len, 0), EM_BADTYPE);
    }
    /* forbidden inside a collection is found too */
    uint8_t c[] = {24, 1, 0, 0, 0, 1, 32};
    CHECK_EQ(bin_validate(c, sizeof c, &len, 0), EM_FORBIDDEN);
}

TEST(binary_validate_person_golden)
{
    CHECK_EQ(vlen(PERSON, sizeof PERSON), sizeof PERSON);
    for (size_t i = 0; i < sizeof PERSON; i++) {
        size_t len;
        int rc = bin_validate(PERSON, i, &len, 0);
        CHECK(rc < 0);
    }
    uint8_t o[128];
    size_t n = mk_obj(o, -991716523, PERSON_DATA, sizeof PERSON_DATA, PERSON_OFFS,
                      PERSON_FIDS, 2, 1, 1, NULL, 0);
    CHECK_EQ(n, sizeof PERSON);
    CHECK_EQ((int32_t)em_ld32(o + 16), 0x39DCF1F3);
    CHECK_EQ((int32_t)em_ld32(o + 8), 0x28E120B7);   /* Java's hash (reference §3.2) */
    /* every footer variant */
    for (int w = 1; w <= 4; w *= 2)
        for (int compact = 0; compact < 2; compact++) {
            n = mk_obj(o, -991716523, PERSON_DATA, sizeof PERSON_DATA, PERSON_OFFS,
                       PERSON_FIDS, 2, w, compact, NULL, 0);
            CHECK_EQ(vlen(o, n), n);
            uint8_t raw[] = {1, 2, 3, 4, 5};
            n = mk_obj(o, -991716523, PERSON_DATA, sizeof PERSON_DATA, PERSON_OFFS,
                       PERSON_FIDS, 2, w, compact, raw, sizeof raw);
            CHECK_EQ(vlen(o, n), n);
        }
}

TEST(binary_validate_complex_errors)
{
    uint8_t o[128], b[128];
    size_t n = mk_obj(o, 7, PERSON_DATA, sizeof PERSON_DATA, PERSON_OFFS,
                      PERSON_FIDS, 2, 1, 1, NULL, 0), len;
    memcpy(b, o, n); b[1] = 2;
    CHECK_EQ(bin_validate(b, n, &len, 0), EM_BADHEADER);
    memcpy(b, o, n); b[3] = 0x80;
    CHECK_EQ(bin_validate(b, n, &len, 0), EM_BADHEADER);
    memcpy(b, o, n); em_st16(b + 2, em_ld16(b + 2) | BIN_FLAG_OFFSET_2);
    CHECK_EQ(bin_validate(b, n, &len, 0), EM_BADHEADER);
    memcpy(b, o, n); em_st32(b + 12, 23);
    CHECK_EQ(bin_validate(b, n, &len, 0), EM_BADLEN);
    memcpy(b, o, n); em_st32(b + 12, 200);
    CHECK_EQ(bin_validate(b, n, &len, 0), EM_TRUNCATED);
    memcpy(b, o, n); em_st32(b + 20, 60);
    CHECK_EQ(bin_validate(b, n, &len, 0), EM_BADOFFSET);
    memcpy(b, o, n); b[n - 1] = 30;        /* second field offset off by one */
    CHECK_EQ(bin_validate(b, n, &len, 0), EM_BADOFFSET);
    memcpy(b, o, n); em_st32(b + 20, 36);  /* footer of 3 one-byte entries: data cut short */
    CHECK(bin_validate(b, n, &len, 0) < 0);
    /* field string whose length runs past the field region */
    memcpy(b, o, n); b[30] = 9;
    CHECK_EQ(bin_validate(b, n, &len, 0), EM_BADLEN);
    /* an empty object is header only */
    n = mk_obj(o, 7, NULL, 0, NULL, NULL, 0, 1, 1, NULL, 0);
    CHECK_EQ(n, 24);
    CHECK_EQ(vlen(o, n), 24);
    o[12] = 25; o[24] = 101;
    CHECK_EQ(bin_validate(o, 25, &len, 0), EM_BADLEN);
}

TEST(binary_validate_raw_only_and_tree)
{
    uint8_t o[128];
    uint8_t raw[] = {9, 9, 9};
    size_t n = mk_obj(o, 77, NULL, 0, NULL, NULL, 0, 1, 1, raw, sizeof raw);
    CHECK_EQ(vlen(o, n), n);
    /* BinaryTreeMap: null comparator, size 1, (int 5 -> "x") */
    uint8_t tm[] = {101, 1, 0, 0, 0, 3, 5, 0, 0, 0, 9, 1, 0, 0, 0, 'x'};
    n = mk_obj(o, -526400035, NULL, 0, NULL, NULL, 0, 1, 1, tm, sizeof tm);
    CHECK_EQ(vlen(o, n), n);
    /* size says 2: the raw content is inconsistent */
    tm[1] = 2;
    n = mk_obj(o, -526400035, NULL, 0, NULL, NULL, 0, 1, 1, tm, sizeof tm);
    CHECK(bin_validate(o, n, &(size_t){0}, 0) < 0);
    /* a set with a leftover byte */
    uint8_t ts[] = {101, 1, 0, 0, 0, 3, 5, 0, 0, 0, 7};
    n = mk_obj(o, -526394141, NULL, 0, NULL, NULL, 0, 1, 1, ts, sizeof ts);
    CHECK_EQ(bin_validate(o, n, &(size_t){0}, 0), EM_BADOFFSET);
    n = mk_obj(o, -526394141, NULL, 0, NULL, NULL, 0, 1, 1, ts, sizeof ts - 1);
    CHECK_EQ(vlen(o, n), n);
}

TEST(binary_validate_containers)
{
    size_t len;
    uint8_t col[] = {24, 2, 0, 0, 0, 1, 3, 1, 0, 0, 0, 101};
    CHECK_EQ(vlen(col, sizeof col), sizeof col);
    uint8_t map[] = {25, 1, 0, 0, 0, 1, 3, 1, 0, 0, 0, 9, 0, 0, 0, 0};
    CHECK_EQ(vlen(map, sizeof map), sizeof map);
    map[1] = 0xFF; map[2] = 0xFF; map[3] = 0xFF; map[4] = 0x7F;
    CHECK_EQ(bin_validate(map, sizeof map, &len, 0), EM_TRUNCATED);
    uint8_t arr[] = {23, 0xFF, 0xFF, 0xFF, 0xFF, 1, 0, 0, 0, 3, 1, 0, 0, 0};
    CHECK_EQ(vlen(arr, sizeof arr), sizeof arr);
    uint8_t sarr[] = {20, 2, 0, 0, 0, 9, 1, 0, 0, 0, 'a', 101};
    CHECK_EQ(vlen(sarr, sizeof sarr), sizeof sarr);
    sarr[11] = 3;               /* an int in a string[] */
    CHECK_EQ(bin_validate(sarr, sizeof sarr, &len, 0), EM_BADTYPE);
    uint8_t iarr[] = {14, 2, 0, 0, 0, 1, 0, 0, 0, 2, 0, 0, 0};
    CHECK_EQ(vlen(iarr, sizeof iarr), sizeof iarr);
    CHECK_EQ(bin_validate(iarr, sizeof iarr - 1, &len, 0), EM_TRUNCATED);
    em_st32(iarr + 1, 0x40000000);
    CHECK_EQ(bin_validate(iarr, sizeof iarr, &len, 0), EM_TRUNCATED);
    em_st32(iarr + 1, (uint32_t)-2);
    CHECK_EQ(bin_validate(iarr, sizeof iarr, &len, 0), EM_BADLEN);
    uint8_t dec[] = {30, 1, 0, 0, 0, 1, 0, 0, 0, 15};
    CHECK_EQ(vlen(dec, sizeof dec), sizeof dec);
    /* unregistered enum: type id 0 + class name */
    uint8_t en[] = {28, 0, 0, 0, 0, 9, 1, 0, 0, 0, 'E', 2, 0, 0, 0};
    CHECK_EQ(vlen(en, sizeof en), sizeof en);
    uint8_t earr[] = {29, 5, 0, 0, 0, 2, 0, 0, 0, 38, 5, 0, 0, 0, 1, 0, 0, 0, 101};
    CHECK_EQ(vlen(earr, sizeof earr), sizeof earr);
}

/* Nested collections d levels deep, innermost empty. */
static size_t nest(uint8_t *b, int d)
{
    size_t n = 0;
    for (int i = 0; i < d; i++) {
        b[n++] = 24;
        em_st32(b + n, i == d - 1 ? 0 : 1);
        n += 4;
        b[n++] = 1;
    }
    return n;
}

TEST(binary_validate_depth)
{
    static uint8_t b[6 * 300];
    size_t len, n = nest(b, 64);
    CHECK_OK(bin_validate(b, n, &len, 0));
    n = nest(b, 65);
    CHECK_EQ(bin_validate(b, n, &len, 0), EM_DEPTH);
    CHECK_OK(bin_validate(b, n, &len, 100));
    n = nest(b, 300);
    CHECK_EQ(bin_validate(b, n, &len, 100000), EM_DEPTH);   /* hard cap */
    CHECK_EQ(bin_validate(b, n, &len, 3), EM_DEPTH);
}

TEST(binary_validate_handles)
{
    size_t len;
    /* [ "ab", handle -> "ab" ] : handle at 13, string at 6 */
    uint8_t ok[] = {24, 2, 0, 0, 0, 1, 9, 2, 0, 0, 0, 'a', 'b', 102, 7, 0, 0, 0};
    CHECK_EQ(vlen(ok, sizeof ok), sizeof ok);
    uint8_t b[sizeof ok];
    memcpy(b, ok, sizeof b); b[14] = 6;              /* into the string's length */
    CHECK_EQ(bin_validate(b, sizeof b, &len, 0), EM_BADHANDLE);
    memcpy(b, ok, sizeof b); b[14] = 0;              /* itself */
    CHECK_EQ(bin_validate(b, sizeof b, &len, 0), EM_BADHANDLE);
    memcpy(b, ok, sizeof b); em_st32(b + 14, (uint32_t)-3);   /* forward */
    CHECK_EQ(bin_validate(b, sizeof b, &len, 0), EM_BADHANDLE);
    memcpy(b, ok, sizeof b); b[14] = 14;             /* before the value */
    CHECK_EQ(bin_validate(b, sizeof b, &len, 0), EM_BADHANDLE);
    memcpy(b, ok, sizeof b); b[14] = 13;             /* the enclosing collection: a cycle */
    CHECK_EQ(bin_validate(b, sizeof b, &len, 0), EM_BADHANDLE);
    /* a top-level handle has nothing to point to */
    uint8_t h[] = {102, 1, 0, 0, 0};
    CHECK_EQ(bin_validate(h, sizeof h, &len, 0), EM_BADHANDLE);
    /* a complex object whose field is a handle to the object itself */
    uint8_t data[] = {102, 24, 0, 0, 0};
    uint32_t offs[] = {0};
    int32_t fids[] = {1};
    uint8_t o[64];
    size_t n = mk_obj(o, 5, data, sizeof data, offs, fids, 1, 1, 1, NULL, 0);
    CHECK_EQ(bin_validate(o, n, &len, 0), EM_BADHANDLE);
    /* big value with a handle: the bitmap comes from the allocator */
    static uint8_t big[20000];
    size_t p = 0;
    big[p++] = 24; em_st32(big + p, 3); p += 4; big[p++] = 1;
    size_t s0 = p;
    big[p++] = 12; em_st32(big + p, 19000); p += 4; p += 19000;
    big[p++] = 102; em_st32(big + p, (uint32_t)(p - 1 - s0)); p += 4;
    big[p++] = 101;
    CHECK_EQ(vlen(big, p), p);
}

TEST(binary_validate_wrapped)
{
    uint8_t w[128];
    size_t n = 0, len;
    w[n++] = 27;
    em_st32(w + n, sizeof PERSON + 3); n += 4;
    w[n++] = 1; w[n++] = 2; w[n++] = 3;         /* prefix bytes before the root */
    memcpy(w + n, PERSON, sizeof PERSON); n += sizeof PERSON;
    em_st32(w + n, 3); n += 4;
    CHECK_EQ(vlen(w, n), n);
    em_st32(w + n - 4, 2);
    CHECK_EQ(bin_validate(w, n, &len, 0), EM_BADTYPE);
    em_st32(w + n - 4, 200);
    CHECK_EQ(bin_validate(w, n, &len, 0), EM_BADOFFSET);
    em_st32(w + n - 4, 3);
    for (size_t i = 0; i < n; i++)
        CHECK(bin_validate(w, i, &len, 0) < 0);
    /* value_prepare unwraps to the root */
    const uint8_t *out;
    size_t olen;
    em_buf s = EM_BUF_INIT;
    CHECK_OK(bin_value_prepare(w, n, &s, &out, &olen));
    CHECK_EQ(olen, sizeof PERSON);
    CHECK(out == w + 8);
    CHECK_OK(bin_value_prepare(PERSON, sizeof PERSON, &s, &out, &olen));
    CHECK(out == PERSON && olen == sizeof PERSON);
    em_buf_free(&s);
}

TEST(binary_partition_examples)
{
    em_buf s = EM_BUF_INIT;
    bin_key k;
    uint8_t b[16];
    static const struct { int32_t v; uint32_t part; } ex[] = {{1, 1}, {12345, 57}, {-1, 0}};
    for (int i = 0; i < 3; i++) {
        b[0] = 3;
        em_st32(b + 1, (uint32_t)ex[i].v);
        REQUIRE_OK(bin_key_prepare(b, 5, &s, &k));
        CHECK_EQ(k.hash, ex[i].v);
        CHECK_EQ(bin_partition(k.hash, 1024), ex[i].part);
        CHECK(k.p == b && k.len == 5);
    }
    uint8_t abc[] = {9, 3, 0, 0, 0, 'a', 'b', 'c'};
    REQUIRE_OK(bin_key_prepare(abc, sizeof abc, &s, &k));
    CHECK_EQ(k.hash, 96354);
    CHECK_EQ(bin_partition(k.hash, 1024), 99);
    CHECK_EQ(bin_partition(-7, 1000), 7);
    CHECK_EQ(bin_partition(INT32_MIN, 1000), 648);
    CHECK_EQ(s.len, 0);
    em_buf_free(&s);
}

TEST(binary_key_prepare_no_alloc)
{
    em_buf s = EM_BUF_INIT;
    bin_key k;
    uint8_t i[] = {3, 1, 2, 3, 4};
    uint8_t str[] = {9, 5, 0, 0, 0, 'h', 0xC3, 0xA9, 'l', 'o'};
    em_mem_stats a = em_mem_thread();
    for (int r = 0; r < 1000; r++) {
        CHECK_OK(bin_key_prepare(i, sizeof i, &s, &k));
        CHECK_OK(bin_key_prepare(str, sizeof str, &s, &k));
    }
    em_mem_stats b = em_mem_thread();
    CHECK_EQ(b.allocs - a.allocs, 0);
    CHECK_EQ(k.hash, em_hash_java_str((const uint8_t *)"h\xC3\xA9lo", 5));
    CHECK_EQ(k.len, sizeof str);
}

TEST(binary_key_prepare_recomputes_hash)
{
    em_buf s = EM_BUF_INIT;
    bin_key k;
    /* Node's hash 1 is replaced by Java's 0x28E120B7 */
    REQUIRE_OK(bin_key_prepare(PERSON, sizeof PERSON, &s, &k));
    CHECK_EQ(k.hash, 0x28E120B7);
    CHECK_EQ(k.len, sizeof PERSON);
    CHECK(k.p == s.p);
    CHECK_MEM(k.p + 12, PERSON + 12, sizeof PERSON - 12);
    CHECK_EQ((int32_t)em_ld32(k.p + 8), 0x28E120B7);
    /* an object with a right hash is used in place */
    uint8_t fixed[sizeof PERSON];
    memcpy(fixed, k.p, sizeof fixed);
    em_buf_reset(&s);
    REQUIRE_OK(bin_key_prepare(fixed, sizeof fixed, &s, &k));
    CHECK(k.p == fixed);
    CHECK_EQ(s.len, 0);
    /* a 27-wrapped Person normalises to the same bytes */
    uint8_t w[64];
    size_t n = 0;
    w[n++] = 27; em_st32(w + n, sizeof PERSON); n += 4;
    memcpy(w + n, PERSON, sizeof PERSON); n += sizeof PERSON;
    em_st32(w + n, 0); n += 4;
    REQUIRE_OK(bin_key_prepare(w, n, &s, &k));
    CHECK_EQ(k.len, sizeof PERSON);
    CHECK_MEM(k.p, fixed, sizeof fixed);
    em_buf_free(&s);
}

TEST(binary_key_prepare_nested_deepest_first)
{
    /* Outer{inner: Person (hash 1), x: int 9}, both hashes wrong. */
    uint8_t data[64];
    memcpy(data, PERSON, sizeof PERSON);
    data[sizeof PERSON] = 3;
    em_st32(data + sizeof PERSON + 1, 9);
    uint32_t offs[] = {0, sizeof PERSON};
    int32_t fids[] = {100, 101};
    uint8_t o[128];
    size_t n = mk_obj(o, 42, data, sizeof PERSON + 5, offs, fids, 2, 1, 1, NULL, 0);
    em_st32(o + 8, 12345);
    size_t len;
    REQUIRE_OK(bin_validate(o, n, &len, 0));
    em_buf s = EM_BUF_INIT;
    bin_key k;
    REQUIRE_OK(bin_key_prepare(o, n, &s, &k));
    CHECK_EQ((int32_t)em_ld32(k.p + 24 + 8), 0x28E120B7);
    /* outer hash over the region with the fixed inner hash */
    CHECK_EQ(k.hash, em_hash_bytes31(k.p + 24, sizeof PERSON + 5));
    CHECK(k.hash != em_hash_bytes31(o + 24, sizeof PERSON + 5));
    /* normalising twice is stable */
    uint8_t again[128];
    memcpy(again, k.p, k.len);
    em_buf_reset(&s);
    REQUIRE_OK(bin_key_prepare(again, n, &s, &k));
    CHECK(k.p == again);
    /* a collection key holding a wrong-hash object is fixed as well */
    uint8_t col[64] = {24, 1, 0, 0, 0, 1};
    memcpy(col + 6, PERSON, sizeof PERSON);
    em_buf_reset(&s);
    REQUIRE_OK(bin_key_prepare(col, 6 + sizeof PERSON, &s, &k));
    CHECK_EQ((int32_t)em_ld32(k.p + 6 + 8), 0x28E120B7);
    CHECK_EQ(k.hash, 31 + 0x28E120B7);                /* List.hashCode */
    em_buf_free(&s);
}

/* Values after a nested container are found where the walk ended (it no
 * longer re-skips each element): [[5, Person, "x"], Person], both Persons
 * with Node's wrong hash. */
TEST(binary_key_prepare_after_nested_containers)
{
    uint8_t k0[160];
    size_t n = 0;
    k0[n++] = 24; em_st32(k0 + n, 2); n += 4; k0[n++] = 1;
    k0[n++] = 24; em_st32(k0 + n, 3); n += 4; k0[n++] = 1;
    k0[n++] = 3; em_st32(k0 + n, 5); n += 4;
    size_t p1 = n;
    memcpy(k0 + n, PERSON, sizeof PERSON); n += sizeof PERSON;
    k0[n++] = 9; em_st32(k0 + n, 1); n += 4; k0[n++] = 'x';
    size_t p2 = n;
    memcpy(k0 + n, PERSON, sizeof PERSON); n += sizeof PERSON;
    size_t len;
    REQUIRE_OK(bin_validate(k0, n, &len, 0));
    REQUIRE_EQ(len, n);
    em_buf s = EM_BUF_INIT;
    bin_key k;
    REQUIRE_OK(bin_key_prepare(k0, n, &s, &k));
    CHECK_EQ(k.len, n);
    CHECK_EQ((int32_t)em_ld32(k.p + p1 + 8), 0x28E120B7);
    CHECK_EQ((int32_t)em_ld32(k.p + p2 + 8), 0x28E120B7);
    uint32_t inner = ((31u + 5u) * 31u + 0x28E120B7u) * 31u + 'x';
    CHECK_EQ(k.hash, (int32_t)((31u + inner) * 31u + 0x28E120B7u));
    CHECK_EQ(bin_hash(k.p), k.hash);
    em_buf_free(&s);
}

static int32_t h_of(const uint8_t *b, size_t n)
{
    em_buf s = EM_BUF_INIT;
    bin_key k;
    size_t len;
    int rc = bin_validate(b, n, &len, 0);
    if (rc || len != n || bin_key_prepare(b, n, &s, &k))
        test_fail(__FILE__, __LINE__, "bad test object");
    em_buf_free(&s);
    if (k.hash != bin_hash(b) && b[0] != 103)
        test_fail(__FILE__, __LINE__, "bin_hash disagrees");
    return k.hash;
}

TEST(binary_java_hashes)
{
    uint8_t b[32];
    b[0] = 4; em_st64(b + 1, (uint64_t)-1);
    CHECK_EQ(h_of(b, 9), 0);
    em_st64(b + 1, 1ULL << 32);
    CHECK_EQ(h_of(b, 9), 1);
    b[0] = 8; b[1] = 1;
    CHECK_EQ(h_of(b, 2), 1231);
    b[1] = 0;
    CHECK_EQ(h_of(b, 2), 1237);
    b[0] = 1; b[1] = 0xFF;
    CHECK_EQ(h_of(b, 2), -1);
    b[0] = 2; em_st16(b + 1, 0xFFFE);
    CHECK_EQ(h_of(b, 3), -2);
    b[0] = 7; em_st16(b + 1, 0xFFFE);
    CHECK_EQ(h_of(b, 3), 0xFFFE);
    b[0] = 6; em_st64(b + 1, 0x3FF0000000000000ULL);          /* 1.0 */
    CHECK_EQ(h_of(b, 9), 1072693248);
    em_st64(b + 1, 0x7FF0000000000123ULL);                     /* a NaN */
    CHECK_EQ(h_of(b, 9), 0x7FF80000);
    b[0] = 5; em_st32(b + 1, 0x3F800000);                      /* 1.0f */
    CHECK_EQ(h_of(b, 5), 0x3F800000);
    /* UUID d57babad-7bc1-4c82-9f9c-e72841b92a85 as on the wire (§3.1) */
    static const uint8_t uu[] = {10, 0x82, 0x4c, 0xc1, 0x7b, 0xad, 0xab, 0x7b, 0xd5,
                                 0x85, 0x2a, 0xb9, 0x41, 0x28, 0xe7, 0x9c, 0x9f};
    CHECK_EQ(em_ld64(uu + 1), 0xd57babad7bc14c82ULL);
    CHECK_EQ(em_ld64(uu + 9), 0x9f9ce72841b92a85ULL);
    uint64_t x = 0xd57babad7bc14c82ULL ^ 0x9f9ce72841b92a85ULL;
    CHECK_EQ(h_of(uu, sizeof uu), (int32_t)((uint32_t)(x >> 32) ^ (uint32_t)x));
    b[0] = 11; em_st64(b + 1, 1000);
    CHECK_EQ(h_of(b, 9), 1000);
    b[0] = 33; em_st64(b + 1, 1000); em_st32(b + 9, 5);
    CHECK_EQ(h_of(b, 13), 1000);
    b[0] = 38; em_st32(b + 1, 100); em_st32(b + 5, 2);
    CHECK_EQ(h_of(b, 9), 3102);
    /* BigDecimal("1.5"): 31*15 + 1; "-1.5": 31*-15 + 1; 2^32 scale 0: 961 */
    uint8_t d1[] = {30, 1, 0, 0, 0, 1, 0, 0, 0, 15};
    CHECK_EQ(h_of(d1, sizeof d1), 466);
    uint8_t d2[] = {30, 1, 0, 0, 0, 2, 0, 0, 0, 0x80, 15};
    CHECK_EQ(h_of(d2, sizeof d2), -464);
    uint8_t d3[] = {30, 0, 0, 0, 0, 6, 0, 0, 0, 0, 1, 0, 0, 0, 0};
    CHECK_EQ(h_of(d3, sizeof d3), 961);
    /* Map.hashCode: sum of key ^ value */
    uint8_t m[] = {25, 2, 0, 0, 0, 1, 3, 1, 0, 0, 0, 3, 2, 0, 0, 0, 3, 4, 0, 0, 0, 3, 4, 0, 0, 0};
    CHECK_EQ(h_of(m, sizeof m), (1 ^ 2) + (4 ^ 4));
    /* Set.hashCode: sum */
    uint8_t st[] = {24, 2, 0, 0, 0, 3, 3, 5, 0, 0, 0, 3, 6, 0, 0, 0};
    CHECK_EQ(h_of(st, sizeof st), 11);
    uint8_t nul[] = {101};
    em_buf s = EM_BUF_INIT;
    bin_key k;
    CHECK_EQ(bin_key_prepare(nul, 1, &s, &k), EM_INVAL);
}

#include "binary/binary_int.h"

TEST(binary_hash31_matches_java)
{
    static uint8_t b[9000];
    uint32_t x = 12345;
    for (size_t i = 0; i < sizeof b; i++) {
        x = x * 1103515245u + 12345u;
        b[i] = (uint8_t)(x >> 16);
    }
    for (size_t n = 0; n <= 300; n++)
        for (size_t off = 0; off < 3; off++)
            if (bin_hash31(b + off, n) != em_hash_bytes31(b + off, n))
                test_fail(__FILE__, __LINE__, "length %zu offset %zu", n, off);
    CHECK_EQ(bin_hash31(b, sizeof b), em_hash_bytes31(b, sizeof b));
    CHECK_EQ(bin_hash31(b + 1, 4096), em_hash_bytes31(b + 1, 4096));
    CHECK_EQ(bin_hash31(b + 1, 4097), em_hash_bytes31(b + 1, 4097));
    /* the writer's variant: 16 readable bytes before p, any content */
    for (size_t n = 0; n <= 300; n++)
        for (size_t off = 16; off < 19; off++)
            if (bin_hash31_after(b + off, n) != em_hash_bytes31(b + off, n))
                test_fail(__FILE__, __LINE__, "after: length %zu offset %zu", n, off);
    for (size_t n = 4000; n <= 4100; n += 7)
        CHECK_EQ(bin_hash31_after(b + 17, n), em_hash_bytes31(b + 17, n));
    memset(b, 0xFF, 200);
    CHECK_EQ(bin_hash31(b, 200), em_hash_bytes31(b, 200));
    CHECK_EQ(bin_hash31_after(b + 16, 184), em_hash_bytes31(b + 16, 184));
    memset(b, 0x80, 200);
    CHECK_EQ(bin_hash31_after(b + 16, 184), em_hash_bytes31(b + 16, 184));
}
