/* cl_zip.h - the compressed message form of Ignite's `@Compress` fields
 * (CompressedMessage, after IGNITE-28853), used for the exchange's single
 * messages and full maps (reference/cluster.md §1.3, §3.5).
 *
 * Wire form (little-endian):
 *
 *   u32 dataSize                 bytes once inflated; 0 = nothing follows
 *   repeated:  u8 0 | u32 len | len bytes    one chunk, 1..CL_ZIP_CHUNK bytes
 *   u8 1                         the final flag: the stream ends here
 *
 * The chunks' concatenation is raw DEFLATE (no zlib header or trailer) of
 * the dataSize bytes, level 1 by default.  A receiver rejects a dataSize
 * above CL_ZIP_MAX_RATIO x compressed + CL_ZIP_SLACK (no real DEFLATE stream
 * expands more), a stream that ends before dataSize bytes or before its
 * final flag, and one with bytes after its end.
 */
#ifndef EM_CL_ZIP_H
#define EM_CL_ZIP_H

#include <stddef.h>
#include <stdint.h>

#include "util/buf.h"

#define CL_ZIP_CHUNK       (10u * 1024u)
#define CL_ZIP_MAX_RATIO   1032u
#define CL_ZIP_SLACK       64u
#define CL_ZIP_LEVEL       1

typedef struct cl_zip cl_zip;

/* cl_zip_new: a reusable codec state (compressor and decompressor) at the
 * given level (1..9).  One per thread; a steady-state round trip through
 * it allocates nothing beyond the output buffers' growth. */
int  cl_zip_new(cl_zip **out, int level);
void cl_zip_free(cl_zip *z);

/* cl_zip_deflate appends the compressed form of p[0..n) to out, writing the
 * compressed bytes once, straight into their chunks.  0, EM_NOMEM, EM_TOOBIG
 * (n over UINT32_MAX). */
int cl_zip_deflate(cl_zip *z, em_buf *out, const uint8_t *p, size_t n);

/* cl_zip_inflate checks the compressed form at p[0..n) (the whole of it:
 * trailing bytes are an error) and inflates it into out, which is reset and
 * sized to exactly dataSize.  Chunks are read where they lie in p.  The
 * framing is checked whole before any inflating or allocation.  0, or
 * EM_TRUNCATED (ends early: before the final flag, inside a chunk, or a
 * DEFLATE stream that yields fewer than dataSize bytes or - zlib - stops
 * unfinished), EM_TRAILING (bytes after the final flag, DEFLATE output past
 * dataSize, or chunk bytes after the DEFLATE stream's end), EM_RANGE
 * (dataSize over the ratio bound), EM_BADLEN (a chunk length of 0 or over
 * CL_ZIP_CHUNK), EM_PROTO (a chunk flag other than 0 or 1), EM_CORRUPT (bad
 * DEFLATE data; libdeflate also reports a DEFLATE stream cut short so),
 * EM_NOMEM; why (may be NULL) gets a line for the log. */
int cl_zip_inflate(cl_zip *z, const uint8_t *p, size_t n, em_buf *out, char *why,
                   size_t why_len);

/* cl_zip_codec: the codec compiled in ("libdeflate 1.14", "zlib 1.2.13"). */
const char *cl_zip_codec(void);

/* cl_zip_data_size: the dataSize a stream announces (0 if under 4 bytes). */
uint32_t cl_zip_data_size(const uint8_t *p, size_t n);

#endif
