/* binary.h - Ignite's binary object format: the entry points other layers use.
 *
 * Format reference: ../shared/reference/ignite-thin-protocol.md §3.  Every
 * function here treats its input as untrusted: it checks lengths, counts,
 * offsets, nesting depth, handles and UTF-8, and rejects the type codes that
 * imply executable classes (-2, 32, 35, 99) with EM_FORBIDDEN.
 *
 * Fixed interface (store/, proto/ and wal/ are written against it):
 *   bin_validate      - find the end of one data object, checking everything
 *   bin_key_prepare   - normalise a key (DESIGN §4) and compute its Java hash
 *   bin_value_prepare - normalise a value for storage (unwrap 27 where safe)
 *   bin_partition     - Ignite's rendezvous partition of a key hash
 */
#ifndef EM_BINARY_H
#define EM_BINARY_H

#include <stddef.h>
#include <stdint.h>

#include "util/buf.h"

/* Type codes (reference §3.1). */
enum bin_type_code {
    BIN_BYTE = 1, BIN_SHORT = 2, BIN_INT = 3, BIN_LONG = 4, BIN_FLOAT = 5,
    BIN_DOUBLE = 6, BIN_CHAR = 7, BIN_BOOL = 8, BIN_STRING = 9, BIN_UUID = 10,
    BIN_DATE = 11, BIN_BYTE_ARR = 12, BIN_SHORT_ARR = 13, BIN_INT_ARR = 14,
    BIN_LONG_ARR = 15, BIN_FLOAT_ARR = 16, BIN_DOUBLE_ARR = 17, BIN_CHAR_ARR = 18,
    BIN_BOOL_ARR = 19, BIN_STRING_ARR = 20, BIN_UUID_ARR = 21, BIN_DATE_ARR = 22,
    BIN_OBJ_ARR = 23, BIN_COLLECTION = 24, BIN_MAP = 25, BIN_WRAPPED = 27,
    BIN_ENUM = 28, BIN_ENUM_ARR = 29, BIN_DECIMAL = 30, BIN_DECIMAL_ARR = 31,
    BIN_CLASS = 32, BIN_TIMESTAMP = 33, BIN_TIMESTAMP_ARR = 34, BIN_PROXY = 35,
    BIN_TIME = 36, BIN_TIME_ARR = 37, BIN_BINARY_ENUM = 38, BIN_OBJ_ARR_WRAPPER = 39,
    BIN_PLATFORM_PROXY = 99, BIN_NULL = 101, BIN_HANDLE = 102, BIN_OBJ = 103,
    BIN_OPTM_MARSH = 254 /* -2 as an unsigned byte */
};

/* Complex object header (reference §3.2). */
enum {
    BIN_HDR_LEN = 24,
    BIN_FLAG_USER_TYPE = 0x0001, BIN_FLAG_HAS_SCHEMA = 0x0002,
    BIN_FLAG_HAS_RAW = 0x0004, BIN_FLAG_OFFSET_1 = 0x0008,
    BIN_FLAG_OFFSET_2 = 0x0010, BIN_FLAG_COMPACT = 0x0020,
    BIN_FLAG_DOTNET = 0x0040
};

#define BIN_MAX_DEPTH_DEFAULT 64

/* bin_validate checks that p[0..n) starts with one complete, well-formed data
 * object and stores its length in *len.  max_depth bounds nesting (0 = the
 * default, 64).  Returns 0, EM_TRUNCATED if the object runs past n, or the
 * distinct error code of the first violation found.  Never recurses without
 * a depth bound; never reads outside p[0..n). */
int bin_validate(const uint8_t *p, size_t n, size_t *len, unsigned max_depth);

/* A key ready for the store: canonical bytes, Java hash, nothing allocated
 * unless normalisation had to rewrite the bytes (into the caller's scratch). */
typedef struct bin_key {
    const uint8_t *p;    /* canonical bytes: points into the input or into scratch */
    uint32_t len;
    int32_t  hash;       /* Java hashCode of the key (reference §4.2 step 2) */
} bin_key;

/* bin_key_prepare normalises a validated key object (DESIGN §4): a 27-wrapped
 * complex object becomes its 103 bytes; every complex object's header hash is
 * recomputed from its data region (deepest first), so keys from clients that
 * write wrong hashes compare equal.  scratch is used only when bytes change
 * (reset by the caller; reused, so steady state allocates nothing). */
int bin_key_prepare(const uint8_t *p, size_t n, em_buf *scratch, bin_key *out);

/* bin_value_prepare: normalised stored form of a validated value.  A 27 wrapper
 * whose root object is self-contained is unwrapped to the plain 103 bytes;
 * anything else is returned unchanged.  *out points into p or into scratch. */
int bin_value_prepare(const uint8_t *p, size_t n, em_buf *scratch,
                      const uint8_t **out, size_t *out_len);

/* bin_partition: RendezvousAffinityFunction's partition for a key hash
 * (reference §4.2 step 3); parts in 1..65000. */
static inline uint32_t bin_partition(int32_t hash, uint32_t parts)
{
    if ((parts & (parts - 1)) == 0) {
        uint32_t h = (uint32_t)hash;
        return (h ^ (h >> 16)) & (parts - 1);
    }
    int32_t r = hash % (int32_t)parts;
    return (uint32_t)(r < 0 ? -r : r);
}

#endif
