/* reader.c - the cursor over validated binary data (reference §3.1-§3.5):
 * field lookup by id or name without decoding the rest, field iteration,
 * sequences (arrays, collections, maps, tree types), scalar getters, and
 * bin_wire_out, which writes a stored value in the form Java servers reply
 * with (27-wrapped complex objects, §3.4 and §5.4 item 2).
 *
 * Field lookup is one code path for every footer encoding: the flags pick
 * the entry size and offset width (data, not a function per layout), so a
 * mix of encodings costs the same as one (DESIGN rule 2, benchmark M2).
 */
#include "binary/binary_int.h"

#include "util/err.h"

#include <string.h>

const uint8_t *bin_rd_resolve(const uint8_t *v)
{
    for (;;) {
        if (v[0] == BIN_HANDLE)
            v -= em_ld32(v + 1);
        else if (v[0] == BIN_WRAPPED)
            v += 5 + em_ld32(v + 5 + em_ld32(v + 1));
        else
            return v;
    }
}

size_t bin_rd_len(const uint8_t *v)
{
    return bin_skip(v);
}

static inline uint32_t foff(const uint8_t *e, uint8_t width)
{
    switch (width) {
    case 1: return e[0];
    case 2: return em_ld16(e);
    default: return em_ld32(e);
    }
}

/* Footer layout by flags bits 3..5 (OFFSET_1, OFFSET_2, COMPACT; OFFSET_1
 * wins when both are set, as in bin_hdr_read).  bin_rd_field reads its
 * geometry from this table instead of branching on the flags: objects of
 * one type written with different encodings arrive in any order (a scan
 * over a cache), and a branch per encoding choice would mispredict on every
 * change of encoding (benchmark M2).
 *
 *   width  offset width in bytes
 *   shift  right shift that keeps the top `width` bytes of a 4-byte load
 *          ending at the offset's last byte (so no load runs past it)
 *   esz    footer entry size (full: id + offset; compact: offset only)
 *   ooff   offset's position within an entry
 *   compact 1 if the ids come from the schema (compact footer)
 *   istride distance between field ids (schema array: 4; footer: esz) */
typedef struct foot_geom {
    uint8_t width, shift, esz, ooff, compact, istride;
} foot_geom;

static const foot_geom foot_tab[8] = {
    {4, 0, 8, 4, 0, 8}, {1, 24, 5, 4, 0, 5}, {2, 16, 6, 4, 0, 6}, {1, 24, 5, 4, 0, 5},
    {4, 0, 4, 0, 1, 4}, {1, 24, 1, 0, 1, 4}, {2, 16, 2, 0, 1, 4}, {1, 24, 1, 0, 1, 4},
};

int bin_rd_field(const uint8_t *o, const bin_type *t, int32_t fid, const uint8_t **val)
{
    uint16_t flags = em_ld16(o + 2);
    if (!(flags & BIN_FLAG_HAS_SCHEMA))
        return EM_NOFIELD;
    const foot_geom g = foot_tab[(flags >> 3) & 7];
    uint32_t len = em_ld32(o + 12);
    uint32_t soff = em_ld32(o + 20);
    uint32_t fend = len - ((flags & BIN_FLAG_HAS_RAW) ? 4u : 0u);
    uint32_t flen = fend - soff;
    /* The schema is looked up for full footers too (it is then unused): one
     * path for both keeps the choice out of the branch history. */
    const bin_schema *s = NULL;
    if (t) {
        /* bin_type_schema inline: the call would spill the geometry above */
        int32_t sid = (int32_t)em_ld32(o + 16);
        for (uint32_t i = t->nschemas; i-- > 0;)
            if (t->schemas[i].id == sid) {
                s = &t->schemas[i];
                break;
            }
    }
    const int32_t *fids = s ? s->fids : NULL;
    uint32_t nf = s ? s->nfields : 0;
    if (g.compact & ((s == NULL) | (nf * g.width != flen)))
        return EM_BADSCHEMA;
    /* Field ids: the schema's array (stride 4) or the footer (stride esz). */
    const uint8_t *ids[2] = {o + soff, (const uint8_t *)fids};
    const uint8_t *ip = ids[g.compact];
    uint32_t istride = g.istride;
    const uint8_t *op = o + soff + g.ooff + g.width - 4;
    for (uint32_t pos = 0, i = 0; pos < flen; pos += g.esz, i += istride)
        if ((int32_t)em_ld32(ip + i) == fid) {
            *val = o + (em_ld32(op + pos) >> g.shift);
            return 0;
        }
    return EM_NOFIELD;
}

int bin_floc_fill(const uint8_t *o, const bin_type *t, int32_t fid, bin_floc *fl,
                  const uint8_t **val)
{
    int rc = bin_rd_field(o, t, fid, val);
    if (rc != 0 && rc != EM_NOFIELD)
        return rc;
    uint16_t flags = em_ld16(o + 2);
    const foot_geom g = foot_tab[(flags >> 3) & 7];
    uint32_t soff = em_ld32(o + 20);
    fl->known = 0;
    if (rc == EM_NOFIELD && (!(flags & BIN_FLAG_HAS_SCHEMA) || !g.compact))
        return rc;                  /* absent from a full footer: not cached (see bin_floc) */
    fl->tid = (int32_t)em_ld32(o + 4);
    fl->sid = (int32_t)em_ld32(o + 16);
    fl->tail = em_ld32(o + 12) - soff;
    fl->flags = flags;
    fl->shift = g.shift;
    fl->fid = fid;
    fl->present = 0;
    fl->idoff = -1;
    if (rc == 0) {
        /* the entry bin_rd_field found: its offset is the one *val came from */
        uint32_t flen = em_ld32(o + 12) - ((flags & BIN_FLAG_HAS_RAW) ? 4u : 0u) - soff;
        for (uint32_t pos = 0; pos < flen; pos += g.esz) {
            int32_t at = (int32_t)(g.ooff + g.width) - 4 + (int32_t)pos;
            if (o + (em_ld32(o + (ptrdiff_t)soff + at) >> g.shift) != *val)
                continue;
            if (!g.compact && (int32_t)em_ld32(o + soff + pos) != fid)
                continue;
            fl->off = at;
            fl->idoff = g.compact ? -1 : (int32_t)pos;
            fl->present = 1;
            break;
        }
        if (!fl->present)
            return 0;               /* not found again (cannot happen): stays unknown */
    }
    fl->known = 1;
    return rc;
}

int bin_rd_field_name(const uint8_t *o, bin_registry *r, const char *name, size_t len,
                      const uint8_t **val)
{
    const bin_type *t = NULL;
    if (em_ld16(o + 2) & BIN_FLAG_COMPACT) {
        if (!r || !(t = bin_registry_get(r, bin_rd_type_id(o))))
            return EM_BADSCHEMA;
    }
    return bin_rd_field(o, t, bin_field_id(name, len), val);
}

int bin_fiter_init(bin_fiter *it, const uint8_t *o, const bin_type *t)
{
    bin_hdr h;
    bin_hdr_read(o, &h);
    memset(it, 0, sizeof *it);
    it->o = o;
    it->flags = h.flags;
    it->footer = h.footer;
    it->width = h.width;
    it->esz = h.esz;
    it->n = h.nfields;
    if (h.nfields && (h.flags & BIN_FLAG_COMPACT)) {
        const bin_schema *s = t ? bin_type_schema(t, h.schema_id) : NULL;
        if (!s || s->nfields != h.nfields)
            return EM_BADSCHEMA;
        it->fids = s->fids;
    }
    return 0;
}

int bin_fiter_next(bin_fiter *it, int32_t *fid, const uint8_t **val)
{
    if (it->i >= it->n)
        return 0;
    const uint8_t *e = it->o + it->footer + (size_t)it->i * it->esz;
    if (it->fids) {
        *fid = it->fids[it->i];
    } else {
        *fid = (int32_t)em_ld32(e);
        e += 4;
    }
    *val = it->o + foff(e, it->width);
    it->i++;
    return 1;
}

void bin_rd_raw(const uint8_t *o, const uint8_t **raw, size_t *len)
{
    bin_hdr h;
    bin_hdr_read(o, &h);
    *raw = o + (h.raw_off ? h.raw_off : h.len);
    *len = h.raw_off ? h.raw_end - h.raw_off : 0;
}

int bin_seq_init(bin_seq *s, const uint8_t *v, uint32_t *count)
{
    uint8_t t = v[0];
    const uint8_t *q = v + 1;
    memset(s, 0, sizeof *s);
    s->code = t;
    int es = bin_prim_elem_size(t);
    uint32_t n;
    switch (t) {
    case BIN_BYTE_ARR: case BIN_SHORT_ARR: case BIN_INT_ARR: case BIN_LONG_ARR:
    case BIN_FLOAT_ARR: case BIN_DOUBLE_ARR: case BIN_CHAR_ARR: case BIN_BOOL_ARR:
        s->elem_size = (uint8_t)es;
        n = em_ld32(q);
        q += 4;
        break;
    case BIN_STRING_ARR: case BIN_UUID_ARR: case BIN_DATE_ARR: case BIN_DECIMAL_ARR:
    case BIN_TIMESTAMP_ARR: case BIN_TIME_ARR:
        n = em_ld32(q);
        q += 4;
        break;
    case BIN_OBJ_ARR: case BIN_OBJ_ARR_WRAPPER: case BIN_ENUM_ARR:
        if (em_ld32(q) == 0)
            q += 5 + em_ld32(q + 5);         /* class name */
        q += 4;
        n = em_ld32(q);
        q += 4;
        break;
    case BIN_COLLECTION:
    case BIN_MAP:
        n = em_ld32(q);
        s->subtype = (int8_t)q[4];
        q += 5;
        break;
    case BIN_OBJ: {
        int32_t tid = bin_rd_type_id(v);
        uint16_t flags = em_ld16(v + 2);
        if ((tid != BIN_TYPE_TREEMAP && tid != BIN_TYPE_TREESET) ||
            (flags & BIN_FLAG_HAS_SCHEMA) || !(flags & BIN_FLAG_HAS_RAW))
            return EM_BADTYPE;
        q = v + BIN_HDR_LEN;
        q += bin_skip(q);                     /* comparator */
        n = em_ld32(q);
        q += 4;
        if (tid == BIN_TYPE_TREEMAP)
            s->code = BIN_MAP;
        else
            s->code = BIN_COLLECTION;
        t = s->code;
        break;
    }
    default:
        return EM_BADTYPE;
    }
    s->p = q;
    s->left = t == BIN_MAP ? n * 2 : n;
    if (count)
        *count = n;
    return 0;
}

int bin_seq_next(bin_seq *s, const uint8_t **elem)
{
    if (s->left == 0)
        return 0;
    *elem = s->p;
    s->p += s->elem_size ? s->elem_size : bin_skip(s->p);
    s->left--;
    return 1;
}

int bin_rd_long(const uint8_t *v, int64_t *out)
{
    const uint8_t *q = v + 1;
    switch (v[0]) {
    case BIN_BYTE:  *out = (int8_t)q[0]; return 0;
    case BIN_SHORT: *out = (int16_t)em_ld16(q); return 0;
    case BIN_CHAR:  *out = em_ld16(q); return 0;
    case BIN_INT:   *out = (int32_t)em_ld32(q); return 0;
    case BIN_LONG:  *out = (int64_t)em_ld64(q); return 0;
    default: return EM_BADTYPE;
    }
}

int bin_rd_double(const uint8_t *v, double *out)
{
    if (v[0] == BIN_DOUBLE) {
        uint64_t u = em_ld64(v + 1);
        memcpy(out, &u, 8);
        return 0;
    }
    if (v[0] == BIN_FLOAT) {
        uint32_t u = em_ld32(v + 1);
        float f;
        memcpy(&f, &u, 4);
        *out = f;
        return 0;
    }
    return EM_BADTYPE;
}

int bin_rd_bool(const uint8_t *v, int *out)
{
    if (v[0] != BIN_BOOL)
        return EM_BADTYPE;
    *out = v[1] != 0;
    return 0;
}

int bin_rd_string(const uint8_t *v, const char **s, size_t *len)
{
    if (v[0] != BIN_STRING)
        return EM_BADTYPE;
    *len = em_ld32(v + 1);
    *s = (const char *)v + 5;
    return 0;
}

/* ---- reply form ---- */

static int is_container(uint8_t t)
{
    return t == BIN_OBJ_ARR || t == BIN_OBJ_ARR_WRAPPER || t == BIN_COLLECTION || t == BIN_MAP;
}

/* scan reports, for container v, whether any element (at any container
 * depth) is a complex object (bit 1) and whether v holds a handle anywhere,
 * including inside those objects (bit 2).  *next = the end of v, unless the
 * answer was settled early (then every caller stops too).  Elements are
 * walked once: advancing by bin_skip as well re-walked every nested
 * container at each level (size times depth). */
static int settled(int r, int in_obj) { return (r & 2) && (in_obj || (r & 1)); }

static int scan(const uint8_t *v, int in_obj, unsigned depth, const uint8_t **next)
{
    int r = 0;
    if (depth > BIN_MAX_DEPTH_HARD)
        return 3;                             /* cannot happen for validated data */
    switch (v[0]) {
    case BIN_HANDLE:
        *next = v + 5;
        return 2;
    case BIN_OBJ: {
        bin_hdr h;
        bin_hdr_read(v, &h);
        *next = v + h.len;
        r = in_obj ? 0 : 1;
        for (const uint8_t *q = v + BIN_HDR_LEN; q < v + h.data_end && !(r & 2);)
            r |= scan(q, 1, depth + 1, &q) & 2;
        if (!(r & 2) && h.raw_off && !(h.flags & BIN_FLAG_HAS_SCHEMA) &&
            (h.type_id == BIN_TYPE_TREEMAP || h.type_id == BIN_TYPE_TREESET)) {
            bin_seq s;
            bin_seq_init(&s, v, NULL);
            const uint8_t *q = s.p;
            for (uint32_t i = 0; i < s.left && !(r & 2); i++)
                r |= scan(q, 1, depth + 1, &q) & 2;
        }
        return r;
    }
    case BIN_WRAPPED: {
        const uint8_t *e;
        *next = v + bin_skip(v);
        return (in_obj ? 0 : 1) | (scan(bin_rd_resolve(v), 1, depth + 1, &e) & 2);
    }
    default:
        break;
    }
    if (!is_container(v[0])) {
        *next = v + bin_skip(v);
        return 0;
    }
    bin_seq s;
    bin_seq_init(&s, v, NULL);
    const uint8_t *q = s.p;
    for (uint32_t i = 0; i < s.left; i++) {
        r |= scan(q, in_obj, depth + 1, &q);
        if (settled(r, in_obj))
            return r;
    }
    *next = q;
    return r;
}

static int wrap_obj(const uint8_t *o, uint32_t len, em_buf *out)
{
    if (em_buf_reserve(out, 9 + (size_t)len))
        return EM_NOMEM;
    uint8_t *p = out->p + out->len;
    p[0] = BIN_WRAPPED;
    em_st32(p + 1, len);
    memcpy(p + 5, o, len);
    em_st32(p + 5 + len, 0);
    out->len += 9 + (size_t)len;
    return 0;
}

/* emit appends v in reply form; *next = the end of v (one walk, as scan). */
static int emit(const uint8_t *v, em_buf *out, const uint8_t **next)
{
    if (v[0] == BIN_OBJ) {
        uint32_t len = em_ld32(v + 12);
        *next = v + len;
        return wrap_obj(v, len, out);
    }
    if (!is_container(v[0])) {
        size_t n = bin_skip(v);
        *next = v + n;
        return em_buf_append(out, v, n);
    }
    bin_seq s;
    bin_seq_init(&s, v, NULL);
    int rc = em_buf_append(out, v, (size_t)(s.p - v));     /* code, ids, count, subtype */
    const uint8_t *q = s.p;
    for (uint32_t i = 0; !rc && i < s.left; i++)
        rc = emit(q, out, &q);
    *next = q;
    return rc;
}

int bin_wire_out(const uint8_t *v, size_t n, em_buf *out)
{
    if (n == 0)
        return EM_INVAL;
    if (v[0] == BIN_OBJ)
        return wrap_obj(v, em_ld32(v + 12), out);
    const uint8_t *end;
    if (is_container(v[0]) && scan(v, 0, 0, &end) == 1) {
        size_t before = out->len;
        int rc = emit(v, out, &end);
        if (rc)
            out->len = before;
        return rc;
    }
    return em_buf_append(out, v, n);
}
