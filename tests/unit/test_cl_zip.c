/* test_cl_zip.c - the compressed message form (src/cluster/cl_zip.c):
 * round trips at the chunk boundaries, every rejection on streams built by
 * hand, inflating across arbitrary chunk splits, and no allocation in a
 * steady-state round trip. */
#include "test.h"

#include "cluster/cl_zip.h"
#include "util/err.h"
#include "util/mem.h"

static uint64_t rng = 0x243f6a8885a308d3ULL;

static void fill_random(uint8_t *p, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        rng ^= rng << 13;
        rng ^= rng >> 7;
        rng ^= rng << 17;
        p[i] = (uint8_t)rng;
    }
}

/* check_framing: the stream is dataSize, chunks of 1..10 KiB (every one
 * but the last exactly 10 KiB), the final flag, and nothing after it. */
static void check_framing(const em_buf *w, size_t n)
{
    REQUIRE(w->len >= 4);
    CHECK_EQ(em_ld32(w->p), n);
    CHECK_EQ(cl_zip_data_size(w->p, w->len), n);
    if (n == 0) {
        CHECK_EQ(w->len, 4);
        return;
    }
    size_t off = 4, chunks = 0, last = 0;
    while (off < w->len && w->p[off] == 0) {
        REQUIRE(off + 5 <= w->len);
        uint32_t len = em_ld32(w->p + off + 1);
        CHECK(len >= 1 && len <= CL_ZIP_CHUNK);
        if (chunks && last != CL_ZIP_CHUNK)
            test_fail(__FILE__, __LINE__, "chunk %zu of %zu bytes before the last", chunks - 1, last);
        last = len;
        off += 5 + len;
        chunks++;
    }
    CHECK(chunks >= 1);
    REQUIRE_EQ(off + 1, w->len);
    CHECK_EQ(w->p[off], 1);
}

static void round_trip(cl_zip *z, const uint8_t *p, size_t n)
{
    em_buf w = EM_BUF_INIT, out = EM_BUF_INIT;
    char why[160] = "";
    REQUIRE_OK(cl_zip_deflate(z, &w, p, n));
    check_framing(&w, n);
    int rc = cl_zip_inflate(z, w.p, w.len, &out, why, sizeof why);
    if (rc)
        test_fail(__FILE__, __LINE__, "%zu bytes: %s: %s", n, em_errname(rc), why);
    CHECK_EQ(out.len, n);
    if (out.len == n && n)
        CHECK_MEM(out.p, p, n);
    em_buf_free(&w);
    em_buf_free(&out);
}

TEST(cl_zip_round_trips)
{
    cl_zip *z;
    REQUIRE_OK(cl_zip_new(&z, CL_ZIP_LEVEL));
    enum { BIG = 300 * 1024 };
    uint8_t *r = em_malloc(BIG), *t = em_malloc(BIG);
    REQUIRE(r && t);
    fill_random(r, BIG);
    for (size_t i = 0; i < BIG; i++)
        t[i] = (uint8_t)("OWNING NONE MOVING "[i % 19] ^ (i / 4096));
    round_trip(z, r, 0);
    round_trip(z, r, 1);
    round_trip(z, t, 1);
    round_trip(z, r, CL_ZIP_CHUNK - 1);
    round_trip(z, r, CL_ZIP_CHUNK);        /* random: compresses to > 10 KiB, 2 chunks */
    round_trip(z, t, CL_ZIP_CHUNK);        /* text: one chunk */
    round_trip(z, r, CL_ZIP_CHUNK + 1);
    round_trip(z, r, BIG);                 /* incompressible, ~30 chunks */
    round_trip(z, t, BIG);                 /* compressible, several chunks */
    /* the same state again and again, and appending after other bytes */
    em_buf w = EM_BUF_INIT, out = EM_BUF_INIT;
    REQUIRE_OK(em_buf_append(&w, "abc", 3));
    REQUIRE_OK(cl_zip_deflate(z, &w, t, 5000));
    REQUIRE_OK(cl_zip_inflate(z, w.p + 3, w.len - 3, &out, NULL, 0));
    CHECK_EQ(out.len, 5000);
    CHECK_MEM(out.p, t, 5000);
    CHECK(strncmp(cl_zip_codec(), "libdeflate", 10) == 0 || strncmp(cl_zip_codec(), "zlib", 4) == 0);
    em_buf_free(&w);
    em_buf_free(&out);
    em_free(r);
    em_free(t);
    cl_zip_free(z);
}

TEST(cl_zip_levels)
{
    cl_zip *z = NULL;
    CHECK_EQ(cl_zip_new(&z, 0), EM_INVAL);
    CHECK_EQ(cl_zip_new(&z, 10), EM_INVAL);
    uint8_t t[4000];
    for (size_t i = 0; i < sizeof t; i++)
        t[i] = (uint8_t)(i % 13);
    for (int lv = 1; lv <= 9; lv += 4) {
        REQUIRE_OK(cl_zip_new(&z, lv));
        round_trip(z, t, sizeof t);
        cl_zip_free(z);
    }
    cl_zip_free(NULL);
}

/* ---- streams built by hand ---------------------------------------------- */

typedef struct hs { uint8_t p[4096]; size_t n; } hs;

static void hs_u32(hs *s, uint32_t v) { em_st32(s->p + s->n, v); s->n += 4; }
static void hs_chunk(hs *s, const void *b, uint32_t len)
{
    s->p[s->n++] = 0;
    hs_u32(s, len);
    memcpy(s->p + s->n, b, len);
    s->n += len;
}
static void hs_final(hs *s) { s->p[s->n++] = 1; }

/* A stored DEFLATE block: BFINAL in bit 0, BTYPE 00, LEN, NLEN, the bytes.
 * Valid raw DEFLATE whatever the codec. */
static size_t stored(uint8_t *o, int final, const char *data, uint16_t len)
{
    o[0] = (uint8_t)(final ? 1 : 0);
    em_st16(o + 1, len);
    em_st16(o + 3, (uint16_t)~len);
    memcpy(o + 5, data, len);
    return 5u + len;
}

static int inflate_hs(cl_zip *z, const hs *s, em_buf *out, char *why, size_t wl)
{
    /* an exact copy, so a read past the stream shows under ASan */
    uint8_t *p = em_malloc(s->n);
    if (!p)
        return EM_NOMEM;
    memcpy(p, s->p, s->n);
    why[0] = 0;
    int rc = cl_zip_inflate(z, p, s->n, out, why, wl);
    em_free(p);
    return rc;
}

#define EXPECT_REJECT(z, s, out, code) do {                                      \
        char why_[160];                                                         \
        int rc_ = inflate_hs((z), (s), (out), why_, sizeof why_);               \
        if (rc_ != (code))                                                      \
            test_fail(__FILE__, __LINE__, "got %s (%s), want %s", em_errname(rc_), why_, #code); \
        else if (!why_[0])                                                      \
            test_fail(__FILE__, __LINE__, "%s without a why line", #code);      \
    } while (0)

TEST(cl_zip_hand_built_accepts)
{
    cl_zip *z;
    REQUIRE_OK(cl_zip_new(&z, 1));
    em_buf out = EM_BUF_INIT;
    char why[160];
    uint8_t blk[64];
    size_t bl = stored(blk, 1, "hello, exchange", 15);
    /* split the one DEFLATE stream at every point into two chunks, and into
     * chunks of one byte: inflate must carry its state across slices */
    for (size_t cut = 1; cut < bl; cut++) {
        hs s = {{0}, 0};
        hs_u32(&s, 15);
        hs_chunk(&s, blk, (uint32_t)cut);
        hs_chunk(&s, blk + cut, (uint32_t)(bl - cut));
        hs_final(&s);
        int rc = inflate_hs(z, &s, &out, why, sizeof why);
        if (rc)
            test_fail(__FILE__, __LINE__, "cut %zu: %s %s", cut, em_errname(rc), why);
        else
            CHECK_MEM(out.p, "hello, exchange", 15);
    }
    hs s = {{0}, 0};
    hs_u32(&s, 15);
    for (size_t i = 0; i < bl; i++)
        hs_chunk(&s, blk + i, 1);
    hs_final(&s);
    CHECK_OK(inflate_hs(z, &s, &out, why, sizeof why));
    CHECK_EQ(out.len, 15);
    /* two blocks, the first not final */
    s.n = 0;
    hs_u32(&s, 10);
    uint8_t two[64];
    size_t tl = stored(two, 0, "abcde", 5);
    tl += stored(two + tl, 1, "fghij", 5);
    hs_chunk(&s, two, (uint32_t)tl);
    hs_final(&s);
    CHECK_OK(inflate_hs(z, &s, &out, why, sizeof why));
    CHECK_MEM(out.p, "abcdefghij", 10);
    /* dataSize 0: nothing follows */
    s.n = 0;
    hs_u32(&s, 0);
    CHECK_OK(inflate_hs(z, &s, &out, why, sizeof why));
    CHECK_EQ(out.len, 0);
    /* exactly at the ratio bound: a 1-byte chunk announcing 1032 + 64 bytes
     * passes the bound (and then fails as DEFLATE, not as the bound) */
    s.n = 0;
    hs_u32(&s, CL_ZIP_MAX_RATIO + CL_ZIP_SLACK);
    hs_chunk(&s, blk, 1);
    hs_final(&s);
    CHECK(inflate_hs(z, &s, &out, why, sizeof why) != EM_RANGE);
    em_buf_free(&out);
    cl_zip_free(z);
}

TEST(cl_zip_rejections)
{
    cl_zip *z;
    REQUIRE_OK(cl_zip_new(&z, 1));
    em_buf out = EM_BUF_INIT;
    uint8_t blk[64];
    size_t bl = stored(blk, 1, "0123456789", 10);
    hs s;

    /* dataSize over 1032 x compressed + 64 */
    s.n = 0;
    hs_u32(&s, (uint32_t)(CL_ZIP_MAX_RATIO * bl + CL_ZIP_SLACK + 1));
    hs_chunk(&s, blk, (uint32_t)bl);
    hs_final(&s);
    EXPECT_REJECT(z, &s, &out, EM_RANGE);
    s.n = 0;
    hs_u32(&s, 0xffffffffu);                 /* before any allocation of it */
    hs_chunk(&s, blk, (uint32_t)bl);
    hs_final(&s);
    EXPECT_REJECT(z, &s, &out, EM_RANGE);
    s.n = 0;
    hs_u32(&s, 65);                          /* no chunks at all */
    hs_final(&s);
    EXPECT_REJECT(z, &s, &out, EM_RANGE);

    /* ends early: under 4 bytes, before the final flag, inside a chunk
     * header, inside a chunk's bytes */
    s.n = 0;
    hs_u32(&s, 10);
    hs_chunk(&s, blk, (uint32_t)bl);
    hs_final(&s);
    hs full = s;
    for (size_t n = 0; n < full.n; n++) {
        s = full;
        s.n = n;
        char why[160];
        int rc = inflate_hs(z, &s, &out, why, sizeof why);
        if (rc != EM_TRUNCATED || (n && !why[0]))
            test_fail(__FILE__, __LINE__, "cut at %zu: %s (%s)", n, em_errname(rc), why);
    }
    s = full;
    CHECK_OK(inflate_hs(z, &s, &out, (char[160]){0}, 160));
    s.n = 0;
    hs_u32(&s, 12);                          /* no chunks, no flag */
    EXPECT_REJECT(z, &s, &out, EM_TRUNCATED);
    /* ends early: the DEFLATE stream is whole but yields fewer bytes */
    s.n = 0;
    hs_u32(&s, 11);
    hs_chunk(&s, blk, (uint32_t)bl);
    hs_final(&s);
    EXPECT_REJECT(z, &s, &out, EM_TRUNCATED);

    /* bytes after the end: after the final flag; after dataSize 0 */
    s = full;
    s.p[s.n++] = 0;
    EXPECT_REJECT(z, &s, &out, EM_TRAILING);
    s.n = 0;
    hs_u32(&s, 0);
    hs_final(&s);
    EXPECT_REJECT(z, &s, &out, EM_TRAILING);
    /* DEFLATE output beyond dataSize */
    s.n = 0;
    hs_u32(&s, 9);
    hs_chunk(&s, blk, (uint32_t)bl);
    hs_final(&s);
    EXPECT_REJECT(z, &s, &out, EM_TRAILING);
    /* compressed bytes after the DEFLATE stream's end: in the same chunk,
     * and as a chunk of their own */
    s.n = 0;
    hs_u32(&s, 10);
    uint8_t more[80];
    memcpy(more, blk, bl);
    more[bl] = 0x03;
    hs_chunk(&s, more, (uint32_t)bl + 1);
    hs_final(&s);
    EXPECT_REJECT(z, &s, &out, EM_TRAILING);
    s.n = 0;
    hs_u32(&s, 10);
    hs_chunk(&s, blk, (uint32_t)bl);
    hs_chunk(&s, blk, (uint32_t)bl);
    hs_final(&s);
    EXPECT_REJECT(z, &s, &out, EM_TRAILING);

    /* chunk lengths: 0 and over 10 KiB (checked before the bytes are) */
    s.n = 0;
    hs_u32(&s, 10);
    hs_chunk(&s, blk, 0);
    hs_final(&s);
    EXPECT_REJECT(z, &s, &out, EM_BADLEN);
    s.n = 0;
    hs_u32(&s, 10);
    s.p[s.n++] = 0;
    hs_u32(&s, CL_ZIP_CHUNK + 1);
    EXPECT_REJECT(z, &s, &out, EM_BADLEN);
    /* a flag other than 0 or 1 */
    s.n = 0;
    hs_u32(&s, 10);
    s.p[s.n++] = 2;
    EXPECT_REJECT(z, &s, &out, EM_PROTO);

    /* bad DEFLATE: reserved block type 11; a stored block whose NLEN is
     * not ~LEN */
    s.n = 0;
    hs_u32(&s, 10);
    hs_chunk(&s, "\x07\x00\x00\x00", 4);
    hs_final(&s);
    EXPECT_REJECT(z, &s, &out, EM_CORRUPT);
    s.n = 0;
    hs_u32(&s, 10);
    uint8_t bad[64];
    memcpy(bad, blk, bl);
    bad[3] ^= 1;
    hs_chunk(&s, bad, (uint32_t)bl);
    hs_final(&s);
    EXPECT_REJECT(z, &s, &out, EM_CORRUPT);

    /* the DEFLATE stream cut short (framing whole): zlib sees it end early;
     * libdeflate cannot tell it from bad data */
#ifdef CL_ZIP_ZLIB
    const int cut_code = EM_TRUNCATED;
#else
    const int cut_code = EM_CORRUPT;
#endif
    s.n = 0;
    hs_u32(&s, 10);
    hs_chunk(&s, blk, (uint32_t)bl - 3);
    hs_final(&s);
    EXPECT_REJECT(z, &s, &out, cut_code);
    s.n = 0;
    hs_u32(&s, 5);                           /* a non-final block only */
    uint8_t nf[16];
    size_t nl = stored(nf, 0, "abcde", 5);
    hs_chunk(&s, nf, (uint32_t)nl);
    hs_final(&s);
    EXPECT_REJECT(z, &s, &out, cut_code);

    /* a why pointer of NULL is fine */
    s = full;
    s.p[s.n++] = 9;
    CHECK_EQ(cl_zip_inflate(z, s.p, s.n, &out, NULL, 0), EM_TRAILING);
    CHECK_EQ(cl_zip_data_size(s.p, 3), 0);
    /* and the state still works after all that */
    s = full;
    CHECK_OK(inflate_hs(z, &s, &out, (char[160]){0}, 160));
    CHECK_MEM(out.p, "0123456789", 10);
    em_buf_free(&out);
    cl_zip_free(z);
}

/* 1-byte changes all over a real multi-chunk stream (framing and DEFLATE
 * bytes alike): an error code, or exactly dataSize bytes - never a crash or
 * a read outside the stream.  (Raw DEFLATE has no checksum: a changed
 * literal inflates to other bytes of the right length; the transport's
 * integrity is the link's.) */
TEST(cl_zip_every_byte_flipped)
{
    cl_zip *z;
    REQUIRE_OK(cl_zip_new(&z, 1));
    enum { N = 3 * CL_ZIP_CHUNK };
    uint8_t *r = em_malloc(N);
    REQUIRE(r);
    fill_random(r, N);
    for (size_t i = 0; i < N; i += 3)
        r[i] = 0;
    em_buf w = EM_BUF_INIT, out = EM_BUF_INIT;
    REQUIRE_OK(cl_zip_deflate(z, &w, r, N));
    for (size_t i = 0; i < w.len; i += (i < 64 || i + 64 > w.len) ? 1 : 97) {
        w.p[i] ^= 0x41;
        int rc = cl_zip_inflate(z, w.p, w.len, &out, NULL, 0);
        if (rc == 0 && out.len != N)
            test_fail(__FILE__, __LINE__, "flip at %zu: %zu bytes accepted", i, out.len);
        w.p[i] ^= 0x41;
    }
    REQUIRE_OK(cl_zip_inflate(z, w.p, w.len, &out, NULL, 0));
    CHECK_MEM(out.p, r, N);
    em_buf_free(&w);
    em_buf_free(&out);
    em_free(r);
    cl_zip_free(z);
}

TEST(cl_zip_steady_state_allocates_nothing)
{
    cl_zip *z;
    REQUIRE_OK(cl_zip_new(&z, CL_ZIP_LEVEL));
    enum { N = 200 * 1024 };
    uint8_t *t = em_malloc(N);
    REQUIRE(t);
    fill_random(t, N);
    for (size_t i = 0; i < N; i++)
        t[i] &= 0x0f;
    em_buf w = EM_BUF_INIT, out = EM_BUF_INIT;
    REQUIRE_OK(cl_zip_deflate(z, &w, t, N));
    REQUIRE_OK(cl_zip_inflate(z, w.p, w.len, &out, NULL, 0));
    /* the inflate target was sized exactly */
    CHECK_EQ(out.cap, N);
    em_mem_stats a = em_mem_thread();
    for (int i = 0; i < 5; i++) {
        em_buf_reset(&w);
        REQUIRE_OK(cl_zip_deflate(z, &w, t, N));
        REQUIRE_OK(cl_zip_inflate(z, w.p, w.len, &out, NULL, 0));
    }
    CHECK_EQ(em_mem_thread().allocs - a.allocs, 0);
    CHECK_EQ(out.len, N);
    CHECK_MEM(out.p, t, N);
    em_buf_free(&w);
    em_buf_free(&out);
    em_free(t);
    cl_zip_free(z);
}
