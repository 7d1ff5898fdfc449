/* cl_zip.c - the compressed message form (wire layout in cl_zip.h).
 *
 * The framing is checked in one walk over the chunk headers before any
 * DEFLATE work or allocation (cl_zip_scan): a hostile dataSize is refused
 * against the real compressed length, never after allocating it.  Then the
 * codec runs over the chunks where they lie in the receive buffer.
 *
 * Two codecs sit behind the same interface, chosen at build time
 * (Makefile CL_ZIP=libdeflate, the default, or CL_ZIP=zlib):
 *
 *  - zlib (deflateInit2, windowBits -15) streams: deflate writes straight
 *    into each chunk's payload in the output buffer, the chunk header is
 *    filled in place afterwards; inflate is fed chunk by chunk, where the
 *    chunks lie, into one buffer of exactly dataSize.  Compressed bytes are
 *    written once.
 *  - libdeflate is one-shot and needs contiguous buffers: it compresses the
 *    whole input into a reused scratch buffer, and the framing copies the
 *    compressed bytes once into chunks in an output sized exactly; on
 *    receive a multi-chunk stream is gathered into a reused buffer (one copy
 *    of the compressed bytes), a one-chunk stream is inflated where it lies,
 *    straight into the exactly sized output.
 *
 * Why libdeflate is the default: measured with `ember-bench m3 5` (thread
 * CPU clock) at commit 8c0ebf6 on this project's 2-core VM, each codec run
 * three times interleaved with the other; medians of the three, round trip
 * = encode + deflate + inflate + decode of the full map, ms per op:
 *
 *                          zlib 1.2.13   libdeflate 1.14   zlib / libdeflate
 *   30 groups, 3 nodes        5.91            2.04              2.9x
 *   30 groups, 16 nodes       6.29            2.89              2.2x
 *   500 groups, 3 nodes      99.5            35.8               2.8x
 *   500 groups, 16 nodes    105.9            51.0               2.1x
 *
 * zlib stays nearer its own floor (1.02-1.04x against 1.02-1.08x: it
 * streams with no extra copy), but its floor is 2-3x libdeflate's; the two
 * copies libdeflate needs, of the compressed bytes only (about a fifth to a
 * third of the encoded size), cost far less than its faster DEFLATE saves.
 * libdeflate's output is also ~4% smaller at level 1 (184 195 vs 192 776
 * bytes for the 30-group, 3-node map).
 */
#include "cluster/cl_zip.h"

#include <stdio.h>
#include <string.h>

#include "util/err.h"
#include "util/mem.h"

#ifdef CL_ZIP_ZLIB
#include <zlib.h>
#else
#include <libdeflate.h>
#include <pthread.h>
#endif

#define FRAME_HDR 5u    /* u8 0 | u32 len */

#define WHY(...) do { if (why && why_len) snprintf(why, why_len, __VA_ARGS__); } while (0)

struct cl_zip {
    int level;
#ifdef CL_ZIP_ZLIB
    z_stream d, i;
    int d_ok, i_ok;
#else
    struct libdeflate_compressor   *c;
    struct libdeflate_decompressor *u;
    em_buf gather;     /* a multi-chunk stream's compressed bytes, contiguous */
    em_buf scratch;    /* deflate output before framing */
#endif
};

uint32_t cl_zip_data_size(const uint8_t *p, size_t n)
{
    return n < 4 ? 0 : em_ld32(p);
}

const char *cl_zip_codec(void)
{
#ifdef CL_ZIP_ZLIB
    return "zlib " ZLIB_VERSION;
#else
    return "libdeflate " LIBDEFLATE_VERSION_STRING;
#endif
}

/* cl_zip_scan walks the framing of p[0..n): sets *ds, *comp (the chunks'
 * total) and *nchunks, or returns the error for the first thing wrong. */
static int cl_zip_scan(const uint8_t *p, size_t n, uint32_t *ds, uint64_t *comp,
                       size_t *nchunks, char *why, size_t why_len)
{
    if (n < 4) {
        WHY("compressed message: %zu bytes, under the 4-byte dataSize", n);
        return EM_TRUNCATED;
    }
    *ds = em_ld32(p);
    *comp = 0;
    *nchunks = 0;
    if (*ds == 0) {
        if (n > 4) {
            WHY("compressed message: %zu bytes after dataSize 0", n - 4);
            return EM_TRAILING;
        }
        return 0;
    }
    size_t off = 4;
    for (;;) {
        if (off == n) {
            WHY("compressed message ends after %zu chunks without its final flag", *nchunks);
            return EM_TRUNCATED;
        }
        uint8_t flag = p[off];
        if (flag == 1) {
            if (off + 1 != n) {
                WHY("compressed message: %zu bytes after the final flag", n - off - 1);
                return EM_TRAILING;
            }
            break;
        }
        if (flag != 0) {
            WHY("compressed message: chunk flag %u at offset %zu (0 or 1 expected)",
                (unsigned)flag, off);
            return EM_PROTO;
        }
        if (n - off < FRAME_HDR) {
            WHY("compressed message ends inside chunk %zu's length", *nchunks);
            return EM_TRUNCATED;
        }
        uint32_t len = em_ld32(p + off + 1);
        if (len == 0 || len > CL_ZIP_CHUNK) {
            WHY("compressed message: chunk %zu of %u bytes (1..%u)", *nchunks, len,
                CL_ZIP_CHUNK);
            return EM_BADLEN;
        }
        off += FRAME_HDR;
        if (n - off < len) {
            WHY("compressed message ends inside chunk %zu (%zu of %u bytes)", *nchunks,
                n - off, len);
            return EM_TRUNCATED;
        }
        off += len;
        *comp += len;
        (*nchunks)++;
    }
    if ((uint64_t)*ds > (uint64_t)CL_ZIP_MAX_RATIO * *comp + CL_ZIP_SLACK) {
        WHY("compressed message: dataSize %u over %u x %llu compressed bytes + %u", *ds,
            CL_ZIP_MAX_RATIO, (unsigned long long)*comp, CL_ZIP_SLACK);
        return EM_RANGE;
    }
    if (*comp == 0) {
        WHY("compressed message: dataSize %u but no chunks", *ds);
        return EM_TRUNCATED;
    }
    return 0;
}

/* chunk_next: the payload of the chunk at *off (framing already checked by
 * cl_zip_scan), advancing *off past it. */
static const uint8_t *chunk_next(const uint8_t *p, size_t *off, uint32_t *len)
{
    *len = em_ld32(p + *off + 1);
    const uint8_t *q = p + *off + FRAME_HDR;
    *off += FRAME_HDR + *len;
    return q;
}

#ifdef CL_ZIP_ZLIB

/* ---- zlib: streaming --------------------------------------------------- */

static voidpf z_alloc(voidpf opaque, uInt items, uInt size)
{
    (void)opaque;
    if (size && items > SIZE_MAX / size)
        return Z_NULL;
    return em_malloc((size_t)items * size);
}

static void z_free(voidpf opaque, voidpf p)
{
    (void)opaque;
    em_free(p);
}

int cl_zip_new(cl_zip **out, int level)
{
    if (level < 1 || level > 9)
        return EM_INVAL;
    cl_zip *z = em_calloc(1, sizeof *z);
    if (!z)
        return EM_NOMEM;
    z->level = level;
    z->d.zalloc = z->i.zalloc = z_alloc;
    z->d.zfree = z->i.zfree = z_free;
    if (deflateInit2(&z->d, level, Z_DEFLATED, -15, 8, Z_DEFAULT_STRATEGY) != Z_OK) {
        em_free(z);
        return EM_NOMEM;
    }
    z->d_ok = 1;
    if (inflateInit2(&z->i, -15) != Z_OK) {
        cl_zip_free(z);
        return EM_NOMEM;
    }
    z->i_ok = 1;
    *out = z;
    return 0;
}

void cl_zip_free(cl_zip *z)
{
    if (!z)
        return;
    if (z->d_ok)
        deflateEnd(&z->d);
    if (z->i_ok)
        inflateEnd(&z->i);
    em_free(z);
}

int cl_zip_deflate(cl_zip *z, em_buf *out, const uint8_t *p, size_t n)
{
    if (n > UINT32_MAX)
        return EM_TOOBIG;
    size_t start = out->len;
    if (n == 0)
        return em_buf_put_le32(out, 0) ? EM_NOMEM : 0;
    if (deflateReset(&z->d) != Z_OK)
        return EM_INVAL;
    /* One reservation for the worst case, so the buffer grows at most once
     * (and never in steady state). */
    size_t bound = deflateBound(&z->d, (uLong)n);
    size_t nch = bound / CL_ZIP_CHUNK + 1;
    int rc = em_buf_reserve_exact(out, 4 + bound + FRAME_HDR * nch + 1);
    if (rc)
        return rc;
    size_t pos = start + 4;
    em_st32(out->p + start, (uint32_t)n);
    z->d.next_in = (Bytef *)(uintptr_t)p;
    z->d.avail_in = (uInt)n;
    for (;;) {
        if (out->cap - pos < FRAME_HDR + 2) {
            out->len = pos;          /* grow keeps what is written so far */
            rc = em_buf_reserve(out, FRAME_HDR + CL_ZIP_CHUNK + 1);
            out->len = start;
            if (rc)
                return rc;
        }
        size_t room = out->cap - pos - FRAME_HDR - 1;
        uInt avail = (uInt)(room < CL_ZIP_CHUNK ? room : CL_ZIP_CHUNK);
        z->d.next_out = out->p + pos + FRAME_HDR;
        z->d.avail_out = avail;
        int zr = deflate(&z->d, Z_FINISH);
        if (zr != Z_OK && zr != Z_STREAM_END && zr != Z_BUF_ERROR) {
            out->len = start;
            return EM_INVAL;
        }
        uint32_t len = avail - z->d.avail_out;
        if (len) {
            out->p[pos] = 0;
            em_st32(out->p + pos + 1, len);
            pos += FRAME_HDR + len;
        }
        if (zr == Z_STREAM_END)
            break;
    }
    out->p[pos++] = 1;
    out->len = pos;
    return 0;
}

/* z_step: one inflate call into out[got..ds), or into a one-byte spare
 * when out is full, so output beyond dataSize is seen. */
static int z_step(cl_zip *z, em_buf *out, uint32_t ds, int *ended, char *why, size_t why_len)
{
    uint8_t spare;
    size_t got = (size_t)z->i.total_out;
    int full = got >= ds;
    if (full) {
        z->i.next_out = &spare;
        z->i.avail_out = 1;
    } else {
        z->i.next_out = out->p + got;
        z->i.avail_out = (uInt)(ds - got);
    }
    int zr = inflate(&z->i, Z_NO_FLUSH);
    if (full && z->i.avail_out == 0) {
        WHY("compressed message inflates past its dataSize %u", ds);
        return EM_TRAILING;
    }
    switch (zr) {
    case Z_STREAM_END:
        *ended = 1;
        return 0;
    case Z_OK:
    case Z_BUF_ERROR:
        return 0;
    case Z_MEM_ERROR:
        return EM_NOMEM;
    default:
        WHY("compressed message: bad DEFLATE data (%s) after %lu bytes", z->i.msg ? z->i.msg : "?",
            (unsigned long)z->i.total_out);
        return EM_CORRUPT;
    }
}

int cl_zip_inflate(cl_zip *z, const uint8_t *p, size_t n, em_buf *out, char *why,
                   size_t why_len)
{
    uint32_t ds;
    uint64_t comp;
    size_t nch;
    int rc = cl_zip_scan(p, n, &ds, &comp, &nch, why, why_len);
    if (rc)
        return rc;
    em_buf_reset(out);
    if (ds == 0)
        return 0;
    if ((rc = em_buf_reserve_exact(out, ds)))
        return rc;
    if (inflateReset(&z->i) != Z_OK)
        return EM_INVAL;
    int ended = 0;
    size_t off = 4;
    for (size_t c = 0; c < nch; c++) {
        uint32_t len;
        z->i.next_in = (Bytef *)(uintptr_t)chunk_next(p, &off, &len);
        z->i.avail_in = len;
        while (z->i.avail_in) {
            if (ended) {
                WHY("compressed message: %u bytes after the end of the DEFLATE stream",
                    z->i.avail_in);
                return EM_TRAILING;
            }
            uLong before = z->i.total_in + z->i.total_out;
            if ((rc = z_step(z, out, ds, &ended, why, why_len)))
                return rc;
            if (!ended && z->i.total_in + z->i.total_out == before) {
                WHY("compressed message: DEFLATE makes no progress");
                return EM_CORRUPT;
            }
        }
    }
    if (!ended) {
        /* All input consumed: the stream may still close (its last code was
         * read but not reported while out was full), or want more input. */
        z->i.next_in = Z_NULL;
        z->i.avail_in = 0;
        if ((rc = z_step(z, out, ds, &ended, why, why_len)))
            return rc;
        if (!ended) {
            WHY("compressed message ends inside its DEFLATE stream (%lu of %u bytes out)",
                (unsigned long)z->i.total_out, ds);
            return EM_TRUNCATED;
        }
    }
    if (z->i.total_out != ds) {
        WHY("compressed message inflates to %lu bytes, dataSize %u",
            (unsigned long)z->i.total_out, ds);
        return EM_TRUNCATED;
    }
    out->len = ds;
    return 0;
}

#else

/* ---- libdeflate: one-shot ---------------------------------------------- */

static pthread_once_t ldf_once = PTHREAD_ONCE_INIT;

/* The allocator hook is process-wide: every libdeflate allocation goes
 * through the counting allocator (mem.h). */
static void ldf_init(void)
{
    libdeflate_set_memory_allocator(em_malloc, em_free);
}

int cl_zip_new(cl_zip **out, int level)
{
    if (level < 1 || level > 9)
        return EM_INVAL;
    pthread_once(&ldf_once, ldf_init);
    cl_zip *z = em_calloc(1, sizeof *z);
    if (!z)
        return EM_NOMEM;
    z->level = level;
    z->c = libdeflate_alloc_compressor(level);
    z->u = libdeflate_alloc_decompressor();
    if (!z->c || !z->u) {
        cl_zip_free(z);
        return EM_NOMEM;
    }
    *out = z;
    return 0;
}

void cl_zip_free(cl_zip *z)
{
    if (!z)
        return;
    if (z->c)
        libdeflate_free_compressor(z->c);
    if (z->u)
        libdeflate_free_decompressor(z->u);
    em_buf_free(&z->gather);
    em_buf_free(&z->scratch);
    em_free(z);
}

int cl_zip_deflate(cl_zip *z, em_buf *out, const uint8_t *p, size_t n)
{
    if (n > UINT32_MAX)
        return EM_TOOBIG;
    if (n == 0)
        return em_buf_put_le32(out, 0) ? EM_NOMEM : 0;
    /* One-shot into the reused scratch (sized to the worst case once), then
     * framed into out at its exact size: the one copy of the compressed
     * bytes that a one-shot codec needs, and a wire buffer no larger than
     * the message. */
    size_t bound = libdeflate_deflate_compress_bound(z->c, n);
    em_buf_reset(&z->scratch);
    int rc = em_buf_reserve_exact(&z->scratch, bound);
    if (rc)
        return rc;
    size_t c = libdeflate_deflate_compress(z->c, p, n, z->scratch.p, bound);
    if (c == 0)
        return EM_INVAL;             /* cannot happen with the bound */
    size_t k = (c + CL_ZIP_CHUNK - 1) / CL_ZIP_CHUNK;
    if ((rc = em_buf_reserve_exact(out, 4 + FRAME_HDR * k + c + 1)))
        return rc;
    uint8_t *w = out->p + out->len;
    em_st32(w, (uint32_t)n);
    w += 4;
    for (size_t i = 0; i < k; i++) {
        size_t len = i + 1 < k ? CL_ZIP_CHUNK : c - i * CL_ZIP_CHUNK;
        w[0] = 0;
        em_st32(w + 1, (uint32_t)len);
        memcpy(w + FRAME_HDR, z->scratch.p + i * CL_ZIP_CHUNK, len);
        w += FRAME_HDR + len;
    }
    *w++ = 1;
    out->len = (size_t)(w - out->p);
    return 0;
}

int cl_zip_inflate(cl_zip *z, const uint8_t *p, size_t n, em_buf *out, char *why,
                   size_t why_len)
{
    uint32_t ds;
    uint64_t comp;
    size_t nch;
    int rc = cl_zip_scan(p, n, &ds, &comp, &nch, why, why_len);
    if (rc)
        return rc;
    em_buf_reset(out);
    if (ds == 0)
        return 0;
    if ((rc = em_buf_reserve_exact(out, ds)))
        return rc;
    const uint8_t *in = p + 4 + FRAME_HDR;
    if (nch > 1) {
        /* libdeflate needs its input contiguous: gather the chunks into the
         * reused buffer. */
        em_buf_reset(&z->gather);
        if ((rc = em_buf_reserve_exact(&z->gather, (size_t)comp)))
            return rc;
        size_t off = 4;
        for (size_t i = 0; i < nch; i++) {
            uint32_t len;
            const uint8_t *q = chunk_next(p, &off, &len);
            memcpy(z->gather.p + z->gather.len, q, len);
            z->gather.len += len;
        }
        in = z->gather.p;
    }
    size_t used_in = 0, used_out = 0;
    enum libdeflate_result r = libdeflate_deflate_decompress_ex(z->u, in, (size_t)comp, out->p,
                                                                ds, &used_in, &used_out);
    switch (r) {
    case LIBDEFLATE_SUCCESS:
        break;
    case LIBDEFLATE_INSUFFICIENT_SPACE:
        WHY("compressed message inflates past its dataSize %u", ds);
        return EM_TRAILING;
    default:
        /* libdeflate reports a DEFLATE stream cut short as bad data too. */
        WHY("compressed message: bad or incomplete DEFLATE data (%llu bytes, dataSize %u)",
            (unsigned long long)comp, ds);
        return EM_CORRUPT;
    }
    if (used_in != comp) {
        WHY("compressed message: %llu bytes after the end of the DEFLATE stream",
            (unsigned long long)(comp - used_in));
        return EM_TRAILING;
    }
    if (used_out != ds) {
        WHY("compressed message inflates to %zu bytes, dataSize %u", used_out, ds);
        return EM_TRUNCATED;
    }
    out->len = ds;
    return 0;
}

#endif
