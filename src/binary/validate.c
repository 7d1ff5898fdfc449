/* validate.c - bin_validate: the one gate untrusted binary data passes.
 *
 * Checks one data object (reference §3.1-§3.5) completely: every length,
 * count and offset against the bytes that hold it, nesting depth, UTF-8,
 * handles (102) and the forbidden codes (-2, 32, 35, 99).  Also bin_skip, the
 * trusted length-of-object walk every reader uses after validation.
 *
 * Handles are checked in a second pass only when the first pass saw any:
 * the pass marks every object start in a bitmap, so a handle must land on
 * the start of an earlier object that is already complete (not an open
 * ancestor), which rules out forward references and cycles.
 */
#include "binary/binary_int.h"

#include "util/err.h"
#include "util/mem.h"

#include <string.h>

typedef struct vctx {
    const uint8_t *p;
    size_t   n;           /* end of the top-level bytes */
    size_t   base;        /* handles may not point before this (27 roots) */
    unsigned max_depth;
    unsigned handles;     /* handles seen (pass 1) */
    uint8_t *starts;      /* pass 2: bitmap of object starts; NULL in pass 1 */
    size_t  *anc;         /* pass 2: open objects by depth (pass 1 needs none) */
} vctx;

int bin_utf8_ok(const uint8_t *s, size_t n)
{
    size_t i = 0;
    /* ASCII first: 8 bytes at a time, then the tail as one overlapping load
     * (short strings as two), so most strings (keys, names, short values)
     * end here without a per-byte loop. */
    if (n >= 8) {
        for (; i + 8 <= n; i += 8)
            if (em_ld64(s + i) & 0x8080808080808080ULL)
                break;
        if (i + 8 > n && !(em_ld64(s + n - 8) & 0x8080808080808080ULL))
            return 1;
    } else {
        uint32_t acc;
        if (n >= 4)
            acc = em_ld32(s) | em_ld32(s + n - 4);
        else if (n >= 2)
            acc = (uint32_t)em_ld16(s) | em_ld16(s + n - 2);
        else
            acc = n ? s[0] : 0;
        if (!(acc & 0x80808080u))
            return 1;
    }
    while (i < n) {
        if (n - i >= 8 && !(em_ld64(s + i) & 0x8080808080808080ULL)) {
            i += 8;
            continue;
        }
        uint8_t c = s[i];
        if (c < 0x80) {
            i++;
        } else if (c < 0xC2) {
            return 0;
        } else if (c < 0xE0) {
            if (n - i < 2 || (s[i + 1] & 0xC0) != 0x80)
                return 0;
            i += 2;
        } else if (c < 0xF0) {
            if (n - i < 3 || (s[i + 1] & 0xC0) != 0x80 || (s[i + 2] & 0xC0) != 0x80)
                return 0;
            if ((c == 0xE0 && s[i + 1] < 0xA0) || (c == 0xED && s[i + 1] >= 0xA0))
                return 0;   /* overlong, or a UTF-16 surrogate */
            i += 3;
        } else if (c < 0xF5) {
            if (n - i < 4 || (s[i + 1] & 0xC0) != 0x80 || (s[i + 2] & 0xC0) != 0x80 ||
                (s[i + 3] & 0xC0) != 0x80)
                return 0;
            if ((c == 0xF0 && s[i + 1] < 0x90) || (c == 0xF4 && s[i + 1] >= 0x90))
                return 0;   /* overlong, or past U+10FFFF */
            i += 4;
        } else {
            return 0;
        }
    }
    return 1;
}

/* A value that runs past the top-level bytes is truncated (more bytes may
 * fix it); one that runs past an enclosing object's own length is bad. */
static inline int short_err(const vctx *c, size_t end)
{
    return end == c->n ? EM_TRUNCATED : EM_BADLEN;
}

static int v_obj(vctx *c, size_t pos, size_t end, unsigned depth, size_t *next);

/* ascii_short: 1 if s[0..n) is 4..16 ASCII bytes (most keys, names and
 * short values), from two overlapping words and without a call; 0 means
 * "ask bin_utf8_ok", not "invalid". */
static inline __attribute__((always_inline)) int ascii_short(const uint8_t *s, size_t n)
{
    if (n - 4 > 12)
        return 0;
    /* as selects, not a branch: see v_leaf_run */
    const size_t w = n >= 8 ? 4 : 0;
    uint64_t a = em_ld32(s) | (uint64_t)em_ld32(s + w) << 32;
    uint64_t b = em_ld32(s + n - 4) | (uint64_t)em_ld32(s + n - 4 - w) << 32;
    return !((a | b) & 0x8080808080808080ULL);
}

/* Reads a non-negative int count/length at q; checks q+4 <= end. */
static inline int v_count(const vctx *c, size_t q, size_t end, int32_t *out)
{
    if (end - q < 4)
        return short_err(c, end);
    int32_t v = (int32_t)em_ld32(c->p + q);
    if (v < 0)
        return EM_BADLEN;
    *out = v;
    return 0;
}

static inline __attribute__((always_inline)) int v_string_payload(const vctx *c, size_t q, size_t end,
                                                                 size_t *next)
{
    int32_t len;
    int rc = v_count(c, q, end, &len);
    if (rc)
        return rc;
    q += 4;
    if ((size_t)len > end - q)
        return short_err(c, end);
    if (!ascii_short(c->p + q, (size_t)len) && !bin_utf8_ok(c->p + q, (size_t)len))
        return EM_BADUTF8;
    *next = q + (size_t)len;
    return 0;
}

/* A type id of 0 in 23/28/29/38 is followed by a class name (typed string). */
static int v_type_id(const vctx *c, size_t q, size_t end, size_t *next)
{
    if (end - q < 4)
        return short_err(c, end);
    if (em_ld32(c->p + q) != 0) {
        *next = q + 4;
        return 0;
    }
    q += 4;
    if (q >= end)
        return short_err(c, end);
    if (c->p[q] != BIN_STRING)
        return EM_BADTYPE;
    return v_string_payload(c, q + 1, end, next);
}

/* Payload size + 1 of the fixed-size leaf codes v_item checks inline; 0 for
 * every other code (enums carry a type id that may need a class name). */
static const uint8_t leaf_size1[256] = {
    [BIN_BYTE] = 2, [BIN_BOOL] = 2, [BIN_SHORT] = 3, [BIN_CHAR] = 3,
    [BIN_INT] = 5, [BIN_FLOAT] = 5, [BIN_LONG] = 9, [BIN_DOUBLE] = 9,
    [BIN_DATE] = 9, [BIN_TIME] = 9, [BIN_TIMESTAMP] = 13, [BIN_UUID] = 17,
    [BIN_NULL] = 1,
};

/* v_item: v_obj for one element of a container or object.  Most elements
 * are primitives and strings: those are checked here, with the same checks
 * and results as v_obj, without its call and dispatch.  The handle pass
 * (c->starts set) and anything else take the full path. */
static int v_cplx(vctx *c, size_t pos, size_t end, unsigned depth, size_t *next);
static int v_container(vctx *c, size_t pos, size_t end, unsigned depth, size_t *next);

/* v_item_other: v_item's cases that are not leaves.  In pass 1 v_obj would
 * only record pos in anc[] (read by pass 2 alone) and dispatch, so objects
 * and containers go to their checks themselves. */
static __attribute__((noinline)) int v_item_other(vctx *c, size_t pos, size_t end,
                                                  unsigned depth, size_t *next)
{
    if (pos < end && depth <= c->max_depth && !c->starts) {
        uint8_t t = c->p[pos];
        if (t == BIN_OBJ)
            return v_cplx(c, pos, end, depth, next);
        if (t == BIN_COLLECTION || t == BIN_MAP)
            return v_container(c, pos, end, depth, next);
    }
    return v_obj(c, pos, end, depth, next);
}

/* v_leaf: a fixed-size value, null or string at pos < end, checked as v_obj
 * checks it (same results); 1 if the value is none of those. */
static inline __attribute__((always_inline)) int v_leaf(const vctx *c, size_t pos, size_t end,
                                                        size_t *next)
{
    uint8_t t = c->p[pos];
    size_t f = leaf_size1[t];
    if (f) {
        if (end - pos < f)
            return short_err(c, end);
        *next = pos + f;
        return 0;
    }
    if (t == BIN_STRING)
        return v_string_payload(c, pos + 1, end, next);
    return 1;
}

static inline __attribute__((always_inline)) int v_item(vctx *c, size_t pos, size_t end,
                                                        unsigned depth, size_t *next)
{
    if (pos < end && depth <= c->max_depth && !c->starts) {
        int rc = v_leaf(c, pos, end, next);
        if (rc <= 0)
            return rc;
    }
    return v_item_other(c, pos, end, depth, next);
}

/* V_ITEMS(leaf_ok, q, end, depth, on_err): v_item for the element at q in
 * a loop that tested q < end already, advancing q; on_err(rc) on failure.
 * leaf_ok (loop-invariant) says v_item's leaf path applies at this depth
 * in this pass.  q stays a register: only nx_, on the complete path, has
 * its address taken. */
#define V_ITEMS(leaf_ok, q, end, depth, on_err)                               \
    do {                                                                      \
        int rc_ = 1;                                                          \
        size_t nx_;                                                           \
        if (leaf_ok) {                                                        \
            size_t l_;                                                        \
            rc_ = v_leaf(c, (q), (end), &l_);                                 \
            if (rc_ == 0)                                                     \
                (q) = l_;                                                     \
        }                                                                     \
        if (rc_ > 0) {                                                        \
            rc_ = v_item_other(c, (q), (end), (depth), &nx_);                 \
            if (!rc_)                                                         \
                (q) = nx_;                                                    \
        }                                                                     \
        if (rc_)                                                              \
            on_err(rc_);                                                      \
    } while (0)
#define V_RETURN(rc) return (rc)

/* v_leaf_run: checks up to `left` consecutive elements from *qp while each
 * is a fixed-size value, a null or a string that v_leaf accepts (ASCII
 * strings of 4..16 bytes from two words, others by bin_utf8_ok), and
 * returns how many it took, *qp past them.  It stops at anything else -
 * another kind of value, or one v_leaf would reject - and leaves that
 * element to v_leaf / v_item_other, which give the precise result, so it
 * accepts exactly what they accept.  The loop behind the containers and
 * tree types of leaves (the M1 12-entry TreeMap): no calls, nothing in
 * memory. */
static inline __attribute__((always_inline)) int64_t v_leaf_run(const vctx *c, size_t *qp,
                                                                 size_t end, int64_t left)
{
    const uint8_t *p = c->p;
    size_t q = *qp;
    int64_t n = left;
    /* At least 5 bytes left: an int, a string's code and length, and any
     * shorter leaf fit, so the paths below test no room of their own; the
     * last elements of a region go to the per-element path. */
    for (; n && end - q >= 5; n--) {
        const uint8_t t = p[q];
        /* The next element's position is what the loop waits for: for an
         * int it is q + 5 from a branch the predictor knows, not from a
         * load of the size table (which would add a load's latency per
         * element to the chain). */
        if (t == BIN_INT) {
            q += 5;
            continue;
        }
        if (t == BIN_STRING) {
            /* short ASCII strings: one range test covers the sign and the
             * word loads, one comparison the room (l <= 16, so q + 5 + l
             * cannot wrap) */
            const uint32_t l = em_ld32(p + q + 1);
            const size_t nq = q + 5 + (size_t)l;
            if (l - 4 <= 12 && nq <= end) {
                const uint8_t *u = p + q + 5;
                /* two words that cover the string: four bytes at each end
                 * up to 8 bytes (the straight path: short values and
                 * names), eight from 9 to 16 */
                uint64_t a, b;
                if (__builtin_expect(l <= 8, 1)) {
                    a = em_ld32(u);
                    b = em_ld32(u + l - 4);
                } else {
                    a = em_ld64(u);
                    b = em_ld64(u + l - 8);
                }
                if (!((a | b) & 0x8080808080808080ULL)) {
                    q = nq;
                    continue;
                }
            }
            if (l > 0x7FFFFFFFu || l > end - q - 5)
                break;
            if (!ascii_short(p + q + 5, l) && !bin_utf8_ok(p + q + 5, l))
                break;
            q += 5 + (size_t)l;
            continue;
        }
        const size_t f = leaf_size1[t];
        if (!f || end - q < f)
            break;
        q += f;
    }
    *qp = q;
    return left - n;
}

/* count elements, each of code `want` or null (typed arrays 20-22, 29, ...). */
static int v_elems(vctx *c, size_t q, size_t end, unsigned depth, int64_t count,
                   uint8_t want, uint8_t want2, size_t *next)
{
    if ((uint64_t)count > end - q)
        return short_err(c, end);
    const int leaf_ok = depth + 1 <= c->max_depth && !c->starts;
    for (int64_t i = 0; i < count; i++) {
        if (leaf_ok && !want && (i += v_leaf_run(c, &q, end, count - i)) == count)
            break;
        if (q >= end)
            return short_err(c, end);
        uint8_t t = c->p[q];
        if (want && t != want && t != want2 && t != BIN_NULL)
            return EM_BADTYPE;
        V_ITEMS(leaf_ok, q, end, depth + 1, V_RETURN);
    }
    *next = q;
    return 0;
}

/* Collections (24) and maps (25): count, subtype, the elements. */
static int v_container(vctx *c, size_t pos, size_t end, unsigned depth, size_t *next)
{
    const uint8_t t = c->p[pos];
    size_t q = pos + 1;
    int32_t count;
    int rc;
    if ((rc = v_count(c, q, end, &count)))
        return rc;
    q += 4;
    if (q >= end)
        return short_err(c, end);
    q++;                         /* subtype: a hint only */
    if (count == 0) {
        *next = q;               /* empty (a holder's fresh HashMap, ArrayList) */
        return 0;
    }
    if (t == BIN_MAP && (size_t)count > (end - q) / 2)
        return short_err(c, end);
    return v_elems(c, q, end, depth, t == BIN_MAP ? (int64_t)count * 2 : count, 0, 0, next);
}

/* Raw content of BinaryTreeMap/BinaryTreeSet (reference §3.5):
 * comparator object, int size, size entries (pairs for the map). */
static int v_tree_raw(vctx *c, size_t q0, size_t end, unsigned depth, int map)
{
    size_t q;
    int rc = v_item(c, q0, end, depth + 1, &q);
    if (rc)
        return rc;
    int32_t size;
    if ((rc = v_count(c, q, end, &size)))
        return rc == EM_TRUNCATED ? EM_BADLEN : rc;
    q += 4;
    if ((size_t)size > end - q)
        return EM_BADLEN;
    int64_t items = (int64_t)size * (map ? 2 : 1);
    const int leaf_ok = depth + 1 <= c->max_depth && !c->starts;
    size_t qr = q;                       /* q's address went to v_item above */
    for (int64_t i = 0; i < items; i++) {
        if (leaf_ok && (i += v_leaf_run(c, &qr, end, items - i)) == items)
            break;
        if (qr >= end)
            return EM_BADLEN;
        V_ITEMS(leaf_ok, qr, end, depth + 1, V_RETURN);
    }
    return qr == end ? 0 : EM_BADOFFSET;
}

static int v_cplx(vctx *c, size_t pos, size_t end, unsigned depth, size_t *next)
{
    const uint8_t *o = c->p + pos;
    if (end - pos < BIN_HDR_LEN)
        return short_err(c, end);
    uint16_t flags = em_ld16(o + 2);
    if (o[1] != 1 || (flags & ~0x7Fu) ||
        ((flags & BIN_FLAG_OFFSET_1) && (flags & BIN_FLAG_OFFSET_2)))
        return EM_BADHEADER;
    if (em_ld32(o + 4) == 0)
        return EM_BADHEADER;     /* Java's "unregistered class name" escape: not supported */
    uint32_t len = em_ld32(o + 12);
    if (len < BIN_HDR_LEN || len > 0x7FFFFFFFu)
        return EM_BADLEN;
    if (len > end - pos)
        return short_err(c, end);
    uint32_t soff = em_ld32(o + 20);
    int rc;
    if ((flags & (BIN_FLAG_HAS_SCHEMA | BIN_FLAG_HAS_RAW | BIN_FLAG_OFFSET_1 | BIN_FLAG_OFFSET_2 |
                  BIN_FLAG_COMPACT)) == (BIN_FLAG_HAS_SCHEMA | BIN_FLAG_OFFSET_1 | BIN_FLAG_COMPACT) &&
        soff >= BIN_HDR_LEN && soff < len) {
        /* The layout of most objects (the writer's, Java's for small ones):
         * a compact footer of 1-byte offsets, no raw data.  The checks of
         * the general path below in its order, with what that layout fixes
         * already known (footer = [soff, len), one byte an entry, data up
         * to soff); the first irregularity goes to the general path, which
         * finds it again and names it. */
        size_t cur = BIN_HDR_LEN;
        for (uint32_t i = soff; i < len; i++) {
            if (o[i] != cur || cur >= soff)
                goto general;
            size_t nx;
            /* a nested object (a holder's usual field: another object, a
             * tree type) straight to its checks, as v_item_other would */
            if (o[cur] == BIN_OBJ && depth + 1 <= c->max_depth && !c->starts)
                rc = v_cplx(c, pos + cur, pos + soff, depth + 1, &nx);
            else
                rc = v_item(c, pos + cur, pos + soff, depth + 1, &nx);
            if (rc)
                return rc == EM_TRUNCATED ? EM_BADLEN : rc;
            cur = nx - pos;
        }
        if (cur != soff)
            goto general;
        *next = pos + len;
        return 0;
    }
general:
    if (flags & BIN_FLAG_HAS_SCHEMA) {
        uint32_t fend = len;
        uint32_t raw = 0;
        if (flags & BIN_FLAG_HAS_RAW) {
            if (len < BIN_HDR_LEN + 4)
                return EM_BADOFFSET;
            fend = len - 4;
            raw = em_ld32(o + fend);
        }
        if (soff < BIN_HDR_LEN || soff > fend)
            return EM_BADOFFSET;
        if (raw && (raw < BIN_HDR_LEN || raw > soff))
            return EM_BADOFFSET;
        if ((flags & BIN_FLAG_HAS_RAW) && raw == 0)
            return EM_BADOFFSET;
        bin_hdr h;
        bin_hdr_read(o, &h);
        uint32_t flen = fend - soff;
        if (flen == 0 || flen % h.esz)
            return EM_BADSCHEMA;
        /* Fields are stored in footer order, back to back. */
        size_t cur = BIN_HDR_LEN;
        for (uint32_t i = 0; i < h.nfields; i++) {
            if (bin_hdr_off(o, &h, i) != cur || cur >= h.data_end)
                return EM_BADOFFSET;
            size_t nx;
            if ((rc = v_item(c, pos + cur, pos + h.data_end, depth + 1, &nx)))
                return rc == EM_TRUNCATED ? EM_BADLEN : rc;
            cur = nx - pos;
        }
        if (cur != h.data_end)
            return EM_BADOFFSET;
    } else if (flags & BIN_FLAG_HAS_RAW) {
        if (soff != BIN_HDR_LEN)
            return EM_BADOFFSET;
        int32_t tid = (int32_t)em_ld32(o + 4);
        if (tid == BIN_TYPE_TREEMAP || tid == BIN_TYPE_TREESET) {
            if ((rc = v_tree_raw(c, pos + BIN_HDR_LEN, pos + len, depth, tid == BIN_TYPE_TREEMAP)))
                return rc == EM_TRUNCATED ? EM_BADLEN : rc;
        }
        /* Other raw data is written by the type's own code: opaque bytes. */
    } else if (len != BIN_HDR_LEN) {
        return EM_BADLEN;        /* no fields and no raw data: header only */
    }
    *next = pos + len;
    return 0;
}

static int v_wrapped(vctx *c, size_t pos, size_t end, unsigned depth, size_t *next)
{
    int32_t len;
    size_t q = pos + 1;
    int rc = v_count(c, q, end, &len);
    if (rc)
        return rc;
    q += 4;
    if ((size_t)len > end - q || end - q - (size_t)len < 4)
        return short_err(c, end);
    size_t inner = q, iend = q + (size_t)len;
    int32_t root = (int32_t)em_ld32(c->p + iend);
    if (root < 0 || (size_t)root >= (size_t)len)
        return EM_BADOFFSET;
    if (c->p[inner + (size_t)root] != BIN_OBJ)
        return EM_BADTYPE;
    /* The root's handles must stay inside the root: it is then
     * self-contained and can be unwrapped or moved. */
    size_t save = c->base, rend;
    c->base = inner + (size_t)root;
    rc = v_obj(c, inner + (size_t)root, iend, depth + 1, &rend);
    c->base = save;
    if (rc)
        return rc == EM_TRUNCATED ? EM_BADLEN : rc;
    *next = iend + 4;
    return 0;
}

static int v_obj(vctx *c, size_t pos, size_t end, unsigned depth, size_t *next)
{
    if (pos >= end)
        return short_err(c, end);
    if (depth > c->max_depth)
        return EM_DEPTH;
    if (c->starts) {
        c->starts[pos >> 3] |= (uint8_t)(1u << (pos & 7));
        c->anc[depth] = pos;
    }
    uint8_t t = c->p[pos];
    size_t q = pos + 1;
    int32_t count;
    int rc;
    int fs = bin_fixed_size(t);
    if (fs >= 0 && t != BIN_ENUM && t != BIN_BINARY_ENUM) {
        if (end - q < (size_t)fs)
            return short_err(c, end);
        *next = q + (size_t)fs;
        return 0;
    }
    int es = bin_prim_elem_size(t);
    if (es) {
        if ((rc = v_count(c, q, end, &count)))
            return rc;
        q += 4;
        if ((uint64_t)count * (uint64_t)es > end - q)
            return short_err(c, end);
        *next = q + (size_t)count * (size_t)es;
        return 0;
    }
    switch (t) {
    case BIN_STRING:
        return v_string_payload(c, q, end, next);
    case BIN_ENUM:
    case BIN_BINARY_ENUM:
        if ((rc = v_type_id(c, q, end, &q)))
            return rc;
        if (end - q < 4)
            return short_err(c, end);
        *next = q + 4;
        return 0;
    case BIN_STRING_ARR: case BIN_UUID_ARR: case BIN_DATE_ARR: case BIN_DECIMAL_ARR:
    case BIN_TIMESTAMP_ARR: case BIN_TIME_ARR: {
        static const uint8_t elem[] = {
            [BIN_STRING_ARR] = BIN_STRING, [BIN_UUID_ARR] = BIN_UUID,
            [BIN_DATE_ARR] = BIN_DATE, [BIN_DECIMAL_ARR] = BIN_DECIMAL,
            [BIN_TIMESTAMP_ARR] = BIN_TIMESTAMP, [BIN_TIME_ARR] = BIN_TIME};
        if ((rc = v_count(c, q, end, &count)))
            return rc;
        return v_elems(c, q + 4, end, depth, count, elem[t], elem[t], next);
    }
    case BIN_ENUM_ARR:
        if ((rc = v_type_id(c, q, end, &q)) || (rc = v_count(c, q, end, &count)))
            return rc;
        return v_elems(c, q + 4, end, depth, count, BIN_ENUM, BIN_BINARY_ENUM, next);
    case BIN_OBJ_ARR:
    case BIN_OBJ_ARR_WRAPPER:
        if ((rc = v_type_id(c, q, end, &q)) || (rc = v_count(c, q, end, &count)))
            return rc;
        return v_elems(c, q + 4, end, depth, count, 0, 0, next);
    case BIN_COLLECTION:
    case BIN_MAP:
        return v_container(c, pos, end, depth, next);
    case BIN_DECIMAL:
        if (end - q < 4)
            return short_err(c, end);
        q += 4;                      /* scale */
        if ((rc = v_count(c, q, end, &count)))
            return rc;
        q += 4;
        if ((size_t)count > end - q)
            return short_err(c, end);
        *next = q + (size_t)count;
        return 0;
    case BIN_WRAPPED:
        return v_wrapped(c, pos, end, depth, next);
    case BIN_OBJ:
        return v_cplx(c, pos, end, depth, next);
    case BIN_HANDLE: {
        if (end - q < 4)
            return short_err(c, end);
        int32_t off = (int32_t)em_ld32(c->p + q);
        if (off <= 0 || (size_t)off > pos - c->base)
            return EM_BADHANDLE;
        size_t tgt = pos - (size_t)off;
        c->handles++;
        if (c->starts) {
            if (!(c->starts[tgt >> 3] & (1u << (tgt & 7))))
                return EM_BADHANDLE;          /* not the start of an object */
            for (unsigned d = 1; d < depth; d++)
                if (c->anc[d] == tgt)
                    return EM_BADHANDLE;      /* an enclosing object: a cycle */
        }
        *next = q + 4;
        return 0;
    }
    case BIN_OPTM_MARSH: case BIN_CLASS: case BIN_PROXY: case BIN_PLATFORM_PROXY:
        return EM_FORBIDDEN;
    default:
        return EM_BADTYPE;
    }
}

/* v_pass2: the second pass, once pass 1 saw handles: prove each lands on
 * an earlier, completed object.  Only the bytes of this object (next of
 * them) need a bitmap.  Its own frame holds the bitmap and the ancestors,
 * so pass 1 (every object without handles) sets up neither. */
static __attribute__((noinline)) int v_pass2(vctx *c, size_t next, size_t *len)
{
    uint8_t small[1024];
    size_t anc[BIN_MAX_DEPTH_HARD + 2];
    size_t bm = (next + 7) / 8;
    uint8_t *bits = bm <= sizeof small ? small : em_malloc(bm);
    if (!bits)
        return EM_NOMEM;
    memset(bits, 0, bm);
    c->starts = bits;
    c->anc = anc;
    c->handles = 0;
    c->base = 0;
    int rc = v_obj(c, 0, next, 1, &next);
    if (bits != small)
        em_free(bits);
    if (!rc)
        *len = next;
    return rc;
}

/* v_top: bin_validate past its fast paths, pass 1. */
static inline int v_top(const uint8_t *p, size_t n, size_t *len, unsigned max_depth)
{
    vctx c;
    c.p = p;
    c.n = n;
    c.base = 0;
    c.max_depth = max_depth == 0 ? BIN_MAX_DEPTH_DEFAULT
                : max_depth > BIN_MAX_DEPTH_HARD ? BIN_MAX_DEPTH_HARD : max_depth;
    c.handles = 0;
    c.starts = NULL;
    c.anc = NULL;
    size_t next;
    /* Pass 1 at a complex object goes straight to its checks (v_obj would
     * only record it in anc[], which pass 2 alone reads). */
    int rc = p[0] == BIN_OBJ ? v_cplx(&c, 0, n, 1, &next) : v_obj(&c, 0, n, 1, &next);
    if (rc || c.handles == 0) {
        if (!rc)
            *len = next;
        return rc;
    }
    return v_pass2(&c, next, len);
}

int bin_validate(const uint8_t *p, size_t n, size_t *len, unsigned max_depth)
{
    if (n == 0)
        return EM_TRUNCATED;
    /* Fast paths for the common keys: a primitive or a string. */
    uint8_t t = p[0];
    if (t == BIN_INT || t == BIN_LONG) {
        size_t l = t == BIN_INT ? 5 : 9;
        if (n < l)
            return EM_TRUNCATED;
        *len = l;
        return 0;
    }
    if (t == BIN_STRING && n >= 5) {
        int32_t sl = (int32_t)em_ld32(p + 1);
        if (sl >= 0 && (size_t)sl <= n - 5) {
            if (!ascii_short(p + 5, (size_t)sl) && !bin_utf8_ok(p + 5, (size_t)sl))
                return EM_BADUTF8;
            *len = 5 + (size_t)sl;
            return 0;
        }
    }
    return v_top(p, n, len, max_depth);
}

/* ---- trusted walk ---- */

static size_t skip_type_id(const uint8_t *p, size_t q)
{
    if (em_ld32(p + q) != 0)
        return q + 4;
    q += 5;                                  /* type id 0, string code */
    return q + 4 + em_ld32(p + q);
}

static size_t skip_at(const uint8_t *p, size_t pos)
{
    uint8_t t = p[pos];
    size_t q = pos + 1;
    int fs = bin_fixed_size(t);
    if (fs >= 0 && t != BIN_ENUM && t != BIN_BINARY_ENUM)
        return q + (size_t)fs;
    int es = bin_prim_elem_size(t);
    if (es)
        return q + 4 + (size_t)em_ld32(p + q) * (size_t)es;
    uint32_t count;
    switch (t) {
    case BIN_STRING:
        return q + 4 + em_ld32(p + q);
    case BIN_ENUM:
    case BIN_BINARY_ENUM:
        return skip_type_id(p, q) + 4;
    case BIN_DECIMAL:
        return q + 8 + em_ld32(p + q + 4);
    case BIN_WRAPPED:
        return q + 4 + em_ld32(p + q) + 4;
    case BIN_OBJ:
        return pos + em_ld32(p + pos + 12);
    case BIN_HANDLE:
        return q + 4;
    case BIN_ENUM_ARR:
    case BIN_OBJ_ARR:
    case BIN_OBJ_ARR_WRAPPER:
        q = skip_type_id(p, q);
        /* fall through */
    case BIN_STRING_ARR: case BIN_UUID_ARR: case BIN_DATE_ARR: case BIN_DECIMAL_ARR:
    case BIN_TIMESTAMP_ARR: case BIN_TIME_ARR:
        count = em_ld32(p + q);
        q += 4;
        break;
    case BIN_COLLECTION:
        count = em_ld32(p + q);
        q += 5;
        break;
    case BIN_MAP:
        count = em_ld32(p + q) * 2;
        q += 5;
        break;
    default:
        return q;   /* unreachable for validated data */
    }
    for (uint32_t i = 0; i < count; i++)
        q = skip_at(p, q);
    return q;
}

size_t bin_skip(const uint8_t *p)
{
    return skip_at(p, 0);
}
