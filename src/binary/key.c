/* key.c - key and value normalisation (DESIGN §4) and Java-compatible hashes
 * of every data object (reference §3.3 and §4.2).
 *
 * A key's identity is its normalised bytes: 27 wrappers unwrapped, every
 * complex object's header hash recomputed from its data region, deepest
 * first, because some clients (Node 1.0.0, reference §5.4) write wrong,
 * position-dependent hashes.  Keys whose hashes are already right are used in
 * place; only keys that must change are copied into the caller's scratch.
 */
#include "binary/binary_int.h"

#include "util/err.h"
#include "util/hash.h"

#include <string.h>

/* hwalk visits the validated object at b[pos] and every complex object inside
 * it (named fields, tree raw content, container elements, 27 roots).  With
 * fix = 0 it returns 1 as soon as one header hash differs from the computed
 * one (b is not written); with fix = 1 it rewrites the hashes bottom-up, so a
 * parent's hash is computed over children that are already fixed.  *next is
 * the end of the value (unless check mode returned 1): the walk advances by
 * what it visited, never by a second walk (bin_skip) over each element,
 * which made nested containers cost their size times their depth. */
static int hwalk(uint8_t *b, size_t pos, int fix, unsigned depth, size_t *next)
{
    if (depth > BIN_MAX_DEPTH_HARD) {
        *next = pos + bin_skip(b + pos);
        return 0;
    }
    uint8_t t = b[pos];
    size_t q = pos + 1;
    uint32_t count;
    int wrong = 0;
    switch (t) {
    case BIN_OBJ: {
        bin_hdr h;
        bin_hdr_read(b + pos, &h);
        size_t end = pos + h.data_end;
        for (q = pos + BIN_HDR_LEN; q < end;) {
            wrong |= hwalk(b, q, fix, depth + 1, &q);
            if (wrong && !fix)
                return 1;
        }
        if (!(h.flags & BIN_FLAG_HAS_SCHEMA) && h.raw_off &&
            (h.type_id == BIN_TYPE_TREEMAP || h.type_id == BIN_TYPE_TREESET)) {
            q = pos + BIN_HDR_LEN;
            wrong |= hwalk(b, q, fix, depth + 1, &q);    /* comparator */
            if (wrong && !fix)
                return 1;
            count = em_ld32(b + q);
            q += 4;
            if (h.type_id == BIN_TYPE_TREEMAP)
                count *= 2;
            for (uint32_t i = 0; i < count; i++) {
                wrong |= hwalk(b, q, fix, depth + 1, &q);
                if (wrong && !fix)
                    return 1;
            }
        }
        int32_t hc = bin_hash_region(b + pos, &h);
        if (hc != h.hash) {
            wrong = 1;
            if (fix)
                em_st32(b + pos + 8, (uint32_t)hc);
        }
        *next = pos + h.len;
        return wrong;
    }
    case BIN_WRAPPED: {
        uint32_t len = em_ld32(b + q);
        uint32_t root = em_ld32(b + q + 4 + len);
        size_t rend;
        *next = q + 4 + len + 4;
        return hwalk(b, q + 4 + root, fix, depth + 1, &rend);
    }
    case BIN_OBJ_ARR:
    case BIN_OBJ_ARR_WRAPPER:
        q = pos + 1 + 4;
        if (em_ld32(b + pos + 1) == 0)
            q += 5 + em_ld32(b + q + 1);        /* class name */
        count = em_ld32(b + q);
        q += 4;
        break;
    case BIN_COLLECTION:
        count = em_ld32(b + q);
        q += 5;
        break;
    case BIN_MAP:
        count = em_ld32(b + q) * 2;
        q += 5;
        break;
    default:
        *next = pos + bin_skip(b + pos);
        return 0;
    }
    for (uint32_t i = 0; i < count; i++) {
        wrong |= hwalk(b, q, fix, depth + 1, &q);
        if (wrong && !fix)
            return 1;
    }
    *next = q;
    return wrong;
}

/* BigDecimal.hashCode = 31 * unscaled.hashCode() + scale, where
 * BigInteger.hashCode folds the big-endian 32-bit magnitude words. */
static int32_t hash_decimal(const uint8_t *q)
{
    int32_t scale = (int32_t)em_ld32(q);
    uint32_t n = em_ld32(q + 4);
    const uint8_t *m = q + 8;
    int neg = n > 0 && (m[0] & 0x80);
    size_t i = 0;
    /* skip leading zero bytes of the magnitude (sign bit masked off) */
    while (i < n && (i == 0 ? (m[0] & 0x7F) : m[i]) == 0)
        i++;
    uint32_t h = 0;
    size_t left = n - i;
    while (left > 0) {
        size_t take = left % 4 ? left % 4 : 4;
        uint32_t w = 0;
        for (size_t k = 0; k < take; k++, i++)
            w = (w << 8) | (i == 0 ? (m[0] & 0x7Fu) : m[i]);
        h = 31u * h + w;
        left -= take;
    }
    if (neg)
        h = (uint32_t)0 - h;
    return (int32_t)(31u * h + (uint32_t)scale);
}

static int32_t hash_at(const uint8_t *p, unsigned depth, const uint8_t **next);

/* Java's List.hashCode / Set.hashCode / Map.hashCode over the elements;
 * *next = the end of the container (each element is walked once). */
static int32_t hash_container(const uint8_t *p, unsigned depth, const uint8_t **next)
{
    uint32_t count = em_ld32(p + 1);
    int8_t sub = (int8_t)p[5];
    const uint8_t *q = p + 6;
    uint32_t h;
    if (p[0] == BIN_MAP) {
        h = 0;
        for (uint32_t i = 0; i < count; i++) {
            uint32_t hk = (uint32_t)hash_at(q, depth + 1, &q);
            uint32_t hv = (uint32_t)hash_at(q, depth + 1, &q);
            h += hk ^ hv;
        }
        *next = q;
        return (int32_t)h;
    }
    int set = sub == -1 || sub == 3 || sub == 4;
    h = set ? 0 : 1;
    for (uint32_t i = 0; i < count; i++) {
        uint32_t he = (uint32_t)hash_at(q, depth + 1, &q);
        h = set ? h + he : 31u * h + he;
    }
    *next = q;
    return (int32_t)h;
}

/* hash_at: Java's hashCode of the value at p; *next (if not NULL) = its end. */
static int32_t hash_at(const uint8_t *p, unsigned depth, const uint8_t **next)
{
    const uint8_t *q = p + 1;
    uint32_t u;
    uint64_t v;
    size_t n = 0;                           /* the value's length, once known */
    if ((p[0] == BIN_COLLECTION || p[0] == BIN_MAP) && depth < BIN_MAX_DEPTH_HARD) {
        const uint8_t *e;
        int32_t h = hash_container(p, depth, &e);
        if (next)
            *next = e;
        return h;
    }
    if (next) {
        n = bin_skip(p);
        *next = p + n;
    }
    switch (p[0]) {
    case BIN_BYTE:  return (int8_t)q[0];
    case BIN_SHORT: return (int16_t)em_ld16(q);
    case BIN_CHAR:  return em_ld16(q);
    case BIN_INT:   return (int32_t)em_ld32(q);
    case BIN_BOOL:  return q[0] ? 1231 : 1237;
    case BIN_LONG: case BIN_DATE: case BIN_TIME: case BIN_TIMESTAMP:
        return em_hash_long((int64_t)em_ld64(q));
    case BIN_FLOAT:
        u = em_ld32(q);
        if ((u & 0x7F800000u) == 0x7F800000u && (u & 0x007FFFFFu))
            u = 0x7FC00000u;                 /* floatToIntBits' canonical NaN */
        return (int32_t)u;
    case BIN_DOUBLE:
        v = em_ld64(q);
        if ((v & 0x7FF0000000000000ULL) == 0x7FF0000000000000ULL && (v & 0x000FFFFFFFFFFFFFULL))
            v = 0x7FF8000000000000ULL;
        return em_hash_long((int64_t)v);
    case BIN_STRING:
        return em_hash_java_str(q + 4, em_ld32(q));
    case BIN_UUID:
        v = em_ld64(q) ^ em_ld64(q + 8);
        return (int32_t)((uint32_t)(v >> 32) ^ (uint32_t)v);
    case BIN_ENUM: case BIN_BINARY_ENUM: {
        int32_t tid = (int32_t)em_ld32(q);
        const uint8_t *o = q + 4;
        if (tid == 0)
            o += 5 + em_ld32(o + 1);
        return (int32_t)(31u * (uint32_t)tid + em_ld32(o));
    }
    case BIN_DECIMAL:
        return hash_decimal(q);
    case BIN_OBJ:
        return (int32_t)em_ld32(p + 8);
    case BIN_WRAPPED: {
        uint32_t len = em_ld32(q);
        return (int32_t)em_ld32(q + 4 + em_ld32(q + 4 + len) + 8);
    }
    default:
        /* Arrays (identity hash in Java, so no client can predict it),
         * containers nested past the hard depth, and anything else: a
         * deterministic hash of the bytes. */
        return em_hash_bytes31(p, n ? n : bin_skip(p));
    }
}

int32_t bin_hash(const uint8_t *p)
{
    return hash_at(p, 0, NULL);
}

static int key_cplx(const uint8_t *o, em_buf *scratch, bin_key *out)
{
    uint32_t len = em_ld32(o + 12);
    out->len = len;
    size_t end;
    if (!hwalk((uint8_t *)o, 0, 0, 0, &end)) {   /* check mode never writes */
        out->p = o;
        out->hash = (int32_t)em_ld32(o + 8);
        return 0;
    }
    size_t at = scratch->len;
    int rc = em_buf_append(scratch, o, len);
    if (rc)
        return rc;
    uint8_t *b = scratch->p + at;
    hwalk(b, 0, 1, 0, &end);
    out->p = b;
    out->hash = (int32_t)em_ld32(b + 8);
    return 0;
}

int bin_key_prepare(const uint8_t *p, size_t n, em_buf *scratch, bin_key *out)
{
    if (n == 0)
        return EM_INVAL;
    const uint8_t *q = p + 1;
    switch (p[0]) {
    case BIN_INT:
        out->p = p; out->len = 5; out->hash = (int32_t)em_ld32(q);
        return 0;
    case BIN_LONG:
        out->p = p; out->len = 9; out->hash = em_hash_long((int64_t)em_ld64(q));
        return 0;
    case BIN_STRING: {
        uint32_t l = em_ld32(q);
        out->p = p; out->len = 5 + l; out->hash = em_hash_java_str(q + 4, l);
        return 0;
    }
    case BIN_NULL:
        return EM_INVAL;        /* Ignite rejects null keys */
    case BIN_OBJ:
        return key_cplx(p, scratch, out);
    case BIN_WRAPPED: {
        uint32_t len = em_ld32(q);
        return key_cplx(q + 4 + em_ld32(q + 4 + len), scratch, out);
    }
    case BIN_COLLECTION: case BIN_MAP: case BIN_OBJ_ARR: case BIN_OBJ_ARR_WRAPPER: {
        size_t len = bin_skip(p);
        if (len > n)
            return EM_INVAL;
        out->len = (uint32_t)len;
        out->p = p;
        size_t end;
        if (hwalk((uint8_t *)p, 0, 0, 0, &end)) {
            size_t at = scratch->len;
            int rc = em_buf_append(scratch, p, len);
            if (rc)
                return rc;
            out->p = scratch->p + at;
            hwalk(scratch->p + at, 0, 1, 0, &end);
        }
        out->hash = hash_at(out->p, 0, NULL);
        return 0;
    }
    default: {
        size_t len = bin_skip(p);
        if (len > n)
            return EM_INVAL;
        out->p = p;
        out->len = (uint32_t)len;
        out->hash = hash_at(p, 0, NULL);
        return 0;
    }
    }
}

int bin_value_prepare(const uint8_t *p, size_t n, em_buf *scratch,
                      const uint8_t **out, size_t *out_len)
{
    (void)scratch;   /* unwrapping is a sub-range: nothing to rewrite */
    if (n > 0 && p[0] == BIN_WRAPPED) {
        /* bin_validate only accepts 27 whose root is a 103 with no handle
         * leaving it, so the root bytes stand on their own. */
        uint32_t len = em_ld32(p + 1);
        const uint8_t *root = p + 5 + em_ld32(p + 5 + len);
        *out = root;
        *out_len = em_ld32(root + 12);
        return 0;
    }
    *out = p;
    *out_len = n;
    return 0;
}
