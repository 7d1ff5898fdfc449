/* hash.h - Java-compatible hashes and CRC32C.
 *
 * Ignite identifies caches, types and fields by Java's String.hashCode, which
 * runs over UTF-16 code units; ember receives UTF-8, so these functions decode
 * UTF-8 and split supplementary code points into surrogate pairs on the fly
 * (reference: ignite-thin-protocol.md §3.3).
 */
#ifndef EM_HASH_H
#define EM_HASH_H

#include <stddef.h>
#include <stdint.h>

/* em_hash_java_str: String.hashCode of the UTF-8 string s[0..n).  Input must be
 * valid UTF-8 (the binary validator guarantees it for wire data). */
int32_t em_hash_java_str(const uint8_t *s, size_t n);

/* em_hash_java_str_lower: hashCode of the lower-cased string, Ignite's rule for
 * type and field ids.  Folds ASCII and Latin-1 as Character.toLowerCase does. */
int32_t em_hash_java_str_lower(const uint8_t *s, size_t n);

/* em_hash_bytes31: h = 1; h = 31*h + (signed)b for each byte - Java's
 * Arrays.hashCode(byte[]) and the complex-object identity hash. */
int32_t em_hash_bytes31(const uint8_t *p, size_t n);

/* em_hash_bytes31_from: the same hash continued from state h (h = 1 starts it). */
int32_t em_hash_bytes31_from(uint32_t h, const uint8_t *p, size_t n);

/* em_hash_long: Java Long.hashCode. */
static inline int32_t em_hash_long(int64_t v)
{
    uint64_t u = (uint64_t)v;
    return (int32_t)(uint32_t)(u ^ (u >> 32));
}

/* em_crc32c: CRC-32C (Castagnoli) of p[0..n), continuing from crc (0 to start). */
uint32_t em_crc32c(uint32_t crc, const void *p, size_t n);

/* em_mix64: a fast 64-bit mixer for ember's own hash tables (not Java-visible). */
static inline uint64_t em_mix64(uint64_t x)
{
    x ^= x >> 33; x *= 0xff51afd7ed558ccdULL;
    x ^= x >> 33; x *= 0xc4ceb9fe1a85ec53ULL;
    x ^= x >> 33;
    return x;
}

#endif
