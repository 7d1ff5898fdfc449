/* buf.h - growable byte buffers and little-endian load/store helpers.
 *
 * em_buf is reused across operations: em_buf_reset() keeps the capacity, so
 * a steady-state writer allocates nothing.  All multi-byte values in Ignite's
 * formats are little-endian; the ld/st helpers compile to plain moves on x86.
 */
#ifndef EM_BUF_H
#define EM_BUF_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>

typedef struct em_buf {
    uint8_t *p;
    size_t   len;
    size_t   cap;
} em_buf;

#define EM_BUF_INIT {NULL, 0, 0}

void em_buf_free(em_buf *b);
/* em_buf_grow makes room for at least extra more bytes; 0 or EM_NOMEM. */
int  em_buf_grow(em_buf *b, size_t extra);

static inline void em_buf_reset(em_buf *b) { b->len = 0; }

static inline int em_buf_reserve(em_buf *b, size_t extra)
{
    return (b->cap - b->len >= extra) ? 0 : em_buf_grow(b, extra);
}

/* em_buf_grow_exact makes the capacity exactly len + extra (no doubling):
 * for one write whose size is known, e.g. an encoded message. */
int  em_buf_grow_exact(em_buf *b, size_t extra);

static inline int em_buf_reserve_exact(em_buf *b, size_t extra)
{
    return (b->cap - b->len >= extra) ? 0 : em_buf_grow_exact(b, extra);
}

static inline int em_buf_append(em_buf *b, const void *p, size_t n)
{
    int rc = em_buf_reserve(b, n);
    if (rc)
        return rc;
    if (n)
        memcpy(b->p + b->len, p, n);
    b->len += n;
    return 0;
}

static inline uint16_t em_ld16(const uint8_t *p) { uint16_t v; memcpy(&v, p, 2); return v; }
static inline uint32_t em_ld32(const uint8_t *p) { uint32_t v; memcpy(&v, p, 4); return v; }
static inline uint64_t em_ld64(const uint8_t *p) { uint64_t v; memcpy(&v, p, 8); return v; }
static inline void em_st16(uint8_t *p, uint16_t v) { memcpy(p, &v, 2); }
static inline void em_st32(uint8_t *p, uint32_t v) { memcpy(p, &v, 4); }
static inline void em_st64(uint8_t *p, uint64_t v) { memcpy(p, &v, 8); }

#if __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "ember assumes a little-endian host (the wire format is little-endian)"
#endif

static inline int em_buf_put_u8(em_buf *b, uint8_t v)
{
    if (em_buf_reserve(b, 1)) return -30001;
    b->p[b->len++] = v;
    return 0;
}
static inline int em_buf_put_le16(em_buf *b, uint16_t v)
{
    if (em_buf_reserve(b, 2)) return -30001;
    em_st16(b->p + b->len, v); b->len += 2;
    return 0;
}
static inline int em_buf_put_le32(em_buf *b, uint32_t v)
{
    if (em_buf_reserve(b, 4)) return -30001;
    em_st32(b->p + b->len, v); b->len += 4;
    return 0;
}
static inline int em_buf_put_le64(em_buf *b, uint64_t v)
{
    if (em_buf_reserve(b, 8)) return -30001;
    em_st64(b->p + b->len, v); b->len += 8;
    return 0;
}

#endif
