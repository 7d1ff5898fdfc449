/* binary_int.h - private helpers shared by the files of the binary module.
 *
 * Everything here works on bytes bin_validate() has accepted: lengths and
 * offsets are trusted to be consistent, so the helpers do no bounds checks of
 * their own.  Format: ../shared/reference/ignite-thin-protocol.md §3.
 */
#ifndef EM_BINARY_INT_H
#define EM_BINARY_INT_H

#include "binary/binary.h"
#include "util/buf.h"
#include "util/hash.h"

/* Hard cap on nesting whatever max_depth a caller asks for: recursion in
 * the validator and walkers is bounded by it (a few hundred bytes a level). */
#define BIN_MAX_DEPTH_HARD 256

/* Type ids of the predefined raw-mode tree types (reference §3.5). */
#define BIN_TYPE_TREEMAP ((int32_t)-526400035)
#define BIN_TYPE_TREESET ((int32_t)-526394141)

/* Decoded 24-byte header of a validated complex object at o. */
typedef struct bin_hdr {
    uint16_t flags;
    int32_t  type_id;
    int32_t  hash;
    uint32_t len;         /* total length */
    int32_t  schema_id;
    uint32_t data_end;    /* end of named field values (= raw offset or footer) */
    uint32_t raw_off;     /* 0 if no raw data */
    uint32_t raw_end;     /* end of raw data (footer start or len) */
    uint32_t footer;      /* footer start, 0 if no schema */
    uint32_t nfields;     /* footer entries */
    uint8_t  width;       /* offset width 1/2/4 */
    uint8_t  esz;         /* footer entry size */
} bin_hdr;

static inline void bin_hdr_read(const uint8_t *o, bin_hdr *h)
{
    h->flags = em_ld16(o + 2);
    h->type_id = (int32_t)em_ld32(o + 4);
    h->hash = (int32_t)em_ld32(o + 8);
    h->len = em_ld32(o + 12);
    h->schema_id = (int32_t)em_ld32(o + 16);
    uint32_t soff = em_ld32(o + 20);
    h->width = (h->flags & BIN_FLAG_OFFSET_1) ? 1 : (h->flags & BIN_FLAG_OFFSET_2) ? 2 : 4;
    h->esz = (uint8_t)(h->width + ((h->flags & BIN_FLAG_COMPACT) ? 0 : 4));
    if (h->flags & BIN_FLAG_HAS_SCHEMA) {
        uint32_t fend = (h->flags & BIN_FLAG_HAS_RAW) ? h->len - 4 : h->len;
        h->footer = soff;
        h->nfields = (fend - soff) / h->esz;
        h->raw_off = (h->flags & BIN_FLAG_HAS_RAW) ? em_ld32(o + h->len - 4) : 0;
        h->data_end = h->raw_off ? h->raw_off : soff;
        h->raw_end = soff;
    } else {
        h->footer = 0;
        h->nfields = 0;
        h->raw_off = (h->flags & BIN_FLAG_HAS_RAW) ? soff : 0;
        h->data_end = h->raw_off ? h->raw_off : BIN_HDR_LEN;
        h->raw_end = h->len;
    }
}

/* bin_hdr_off: offset of footer entry i (from the object start). */
static inline uint32_t bin_hdr_off(const uint8_t *o, const bin_hdr *h, uint32_t i)
{
    const uint8_t *e = o + h->footer + (size_t)i * h->esz + ((h->flags & BIN_FLAG_COMPACT) ? 0 : 4);
    switch (h->width) {
    case 1: return e[0];
    case 2: return em_ld16(e);
    default: return em_ld32(e);
    }
}

/* bin_hash31: em_hash_bytes31 (Java's h = 31*h + b from 1), vectorised
 * where the CPU allows (hash31.c). */
int32_t bin_hash31(const uint8_t *p, size_t n);
/* bin_hash31_after: the same, for p whose 16 preceding bytes are readable
 * (any content, e.g. the header before an object's data region): reads no
 * byte past p + n and has no per-byte loop (hash31.c). */
int32_t bin_hash31_after(const uint8_t *p, size_t n);
/* bin_pow31: 31^e mod 2^32.  With it hashes of concatenations combine:
 * hash(AB) = hash(A) * 31^|B| + (hash(B) - 31^|B|). */
#define BIN_PW31_MAX 4096
extern uint32_t bin_pw31_tab[BIN_PW31_MAX + 1];
uint32_t bin_pow31_slow(size_t e);
static inline uint32_t bin_pow31(size_t e)
{
    return e <= BIN_PW31_MAX ? bin_pw31_tab[e] : bin_pow31_slow(e);
}
/* bin_q31: the polynomial part of bin_hash31 (the sum without 31^n). */
static inline uint32_t bin_q31(const uint8_t *p, size_t n)
{
    return (uint32_t)bin_hash31(p, n) - bin_pow31(n);
}
static inline uint32_t bin_q31_after(const uint8_t *p, size_t n)
{
    return (uint32_t)bin_hash31_after(p, n) - bin_pow31(n);
}
/* bin_q31_u32: the polynomial part of the hash of x's 4 little-endian
 * bytes (Java bytes, signed), from a register: the products are independent,
 * so this is a multiply and three adds deep. */
static inline uint32_t bin_q31_u32(uint32_t x)
{
    if (x < 0x80)                 /* sizes and lengths: one non-zero byte */
        return x * 29791u;
    return (uint32_t)(int32_t)(int8_t)x * 29791u + (uint32_t)(int32_t)(int8_t)(x >> 8) * 961u +
           (uint32_t)(int32_t)(int8_t)(x >> 16) * 31u + (uint32_t)(int32_t)(int8_t)(x >> 24);
}
/* bin_q31_u64: the same for 8 bytes. */
static inline uint32_t bin_q31_u64(uint64_t x)
{
    return bin_q31_u32((uint32_t)x) * 923521u + bin_q31_u32((uint32_t)(x >> 32));
}
/* bin_q31_tcount: what a tree type's size (stored little-endian at region
 * offset 1..4, zero while the entries were hashed) adds to the polynomial
 * sum of a region whose last byte is at offset hend - 1 from the object
 * start: its bytes sit at 25..28 and weigh 31^(hend - 26 - j). */
static inline uint32_t bin_q31_tcount(uint32_t count, uint32_t hend)
{
    return bin_q31_u32(count) * bin_pow31(hend - 29);
}

/* bin_hash_region: Java's identity hash of a complex object (reference §3.3):
 * bytes from 24 to the footer start (or the total length). */
static inline int32_t bin_hash_region(const uint8_t *o, const bin_hdr *h)
{
    uint32_t end = h->footer ? h->footer : h->len;
    return bin_hash31(o + BIN_HDR_LEN, end - BIN_HDR_LEN);
}

/* bin_w__put_fast (writer.c's put): reserves 1 + n bytes for a value of
 * code c and returns the payload, for the modes that cannot fail when the buffer has room,
 * or NULL having changed nothing.  w->vmode, which sync() keeps in step
 * with the state, says what vstart would do (the cursor's test,
 * wcursor.h), so the public builder's one call per value (bin_public.c)
 * costs a test, the accounting and the stores.  Callers go to the complete
 * bin_w_* call otherwise, by a tail call, which keeps the fast path free of
 * saved registers. */
static inline __attribute__((always_inline)) uint8_t *bin_w__put_fast(bin_writer *w, uint8_t c,
                                                                     size_t n)
{
    em_buf *o = w->out;
    const uint8_t m = w->vmode;
    if (__builtin_expect(m >= BIN_WM_NEEDNAME || o->cap - o->len <= n, 0))
        return NULL;
    /* Counted in every mode, as the cursor does (bin_wc__account): only
     * containers and tree types read a frame's count, so this is a store
     * where a test and a branch would be. */
    const size_t len = o->len;
    uint8_t *p = o->p + len;
    o->len = len + 1 + n;
    w->top->count++;
    if (m == BIN_WM_FIELD) {
        w->named = 0;                       /* its offset was taken with the name */
        w->vmode = BIN_WM_NEEDNAME;
    }
    p[0] = c;
    return p + 1;
}

/* bin_w__string_fast: bin_w_string for ASCII strings of 4..16 bytes (most
 * keys, names and short values): the two overlapping words prove ASCII and
 * are the copy (bin_wc_string's path).  1 if written; 0, with nothing
 * changed, if the complete bin_w_string must decide. */
static inline __attribute__((always_inline)) int bin_w__string_fast(bin_writer *w, const char *s,
                                                                    size_t len)
{
    const uint8_t *u = (const uint8_t *)s;
    if (__builtin_expect(len - 4 > 12, 0))
        return 0;
    uint8_t *p;
    if (__builtin_expect(len <= 8, 1)) {
        /* 4..8 bytes (short values and names): two 4-byte words, the
         * straight path */
        const uint32_t a = em_ld32(u), b = em_ld32(u + len - 4);
        if (__builtin_expect((a | b) & 0x80808080u, 0) ||
            !(p = bin_w__put_fast(w, BIN_STRING, 4 + len)))
            return 0;
        em_st32(p, (uint32_t)len);
        em_st32(p + 4, a);
        em_st32(p + len, b);
        return 1;
    }
    const uint64_t a = em_ld64(u), b = em_ld64(u + len - 8);
    if (__builtin_expect((a | b) & 0x8080808080808080ULL, 0) ||
        !(p = bin_w__put_fast(w, BIN_STRING, 4 + len)))
        return 0;
    em_st32(p, (uint32_t)len);
    em_st64(p + 4, a);
    em_st64(p + 4 + len - 8, b);
    return 1;
}

/* The public builder (include/ember.h, bin_public.c): a writer and the
 * buffer it reuses.  Here so that tests can drive its writer directly. */
struct ember_writer {
    bin_writer w;
    em_buf out;
};

/* bin_skip: length of the validated data object at p. */
size_t bin_skip(const uint8_t *p);

/* bin_fixed_size: payload size of a fixed-size type code, or -1. */
static inline int bin_fixed_size(uint8_t t)
{
    switch (t) {
    case BIN_BYTE: case BIN_BOOL: return 1;
    case BIN_SHORT: case BIN_CHAR: return 2;
    case BIN_INT: case BIN_FLOAT: return 4;
    case BIN_LONG: case BIN_DOUBLE: case BIN_DATE: case BIN_TIME: return 8;
    case BIN_ENUM: case BIN_BINARY_ENUM: return 8;
    case BIN_TIMESTAMP: return 12;
    case BIN_UUID: return 16;
    case BIN_NULL: return 0;
    default: return -1;
    }
}

/* bin_prim_elem_size: element size of primitive arrays 12..19, or 0. */
static inline int bin_prim_elem_size(uint8_t t)
{
    switch (t) {
    case BIN_BYTE_ARR: case BIN_BOOL_ARR: return 1;
    case BIN_SHORT_ARR: case BIN_CHAR_ARR: return 2;
    case BIN_INT_ARR: case BIN_FLOAT_ARR: return 4;
    case BIN_LONG_ARR: case BIN_DOUBLE_ARR: return 8;
    default: return 0;
    }
}

#endif
