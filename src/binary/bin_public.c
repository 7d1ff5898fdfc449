/* bin_public.c - section 2 of include/ember.h (binary objects): the public
 * ember_* builder and reader, thin wrappers over bin_writer, bin_registry
 * and the reader in this module.  Format: reference §3.
 *
 * The builder's structural calls (objects, fields, containers, tree types)
 * run the writer's cursor (wcursor.h) over the writer's own
 * frames for one call each (PC_CALL), so a public call costs what the
 * cursor's fast path costs plus a load and a store of the position; the
 * cursor hands anything uncommon to the complete bin_w_* call, so the
 * bytes and errors are the bin_w_* ones (tests/unit/test_binary_cursor.c
 * runs random programs through both). */
#include "ember.h"

#include "binary/binary_int.h"
#include "binary/wcursor.h"
#include "util/err.h"
#include "util/mem.h"

#include <string.h>

/* The public handles are the internal structures under other names
 * (struct ember_writer: binary_int.h). */

_Static_assert(sizeof(bin_fiter) <= sizeof(ember_iter), "ember_iter too small");
_Static_assert(sizeof(bin_seq) <= sizeof(ember_iter), "ember_iter too small");
_Static_assert((int)EMBER_ENOFIELD == (int)EM_NOFIELD &&
               (int)EMBER_ETRUNCATED == (int)EM_TRUNCATED &&
               (int)EMBER_EFORBIDDEN == (int)EM_FORBIDDEN, "public error codes");

#define REG(t) ((bin_registry *)(t))
#define DESC(t) ((const bin_desc *)(t))

ember_types *ember_types_new(void) { return (ember_types *)bin_registry_new(); }
void ember_types_free(ember_types *t) { bin_registry_free(REG(t)); }

int ember_type_define(ember_types *t, const char *name, const char *const *fields,
                      const int *codes, unsigned n, const ember_type **out)
{
    int32_t c[64] = {0}, *cp = n <= 64 ? c : em_malloc((size_t)n * 4);
    if (!cp)
        return EM_NOMEM;
    for (unsigned i = 0; i < n; i++)
        cp[i] = codes[i];
    const bin_desc *d = NULL;
    int rc = bin_registry_define(REG(t), name, fields, cp, n, &d);
    if (cp != c)
        em_free(cp);
    if (!rc)
        *out = (const ember_type *)d;
    return rc;
}

int32_t ember_type_id(const ember_type *type) { return DESC(type)->type_id; }
int32_t ember_field_id(const char *name) { return bin_field_id(name, strlen(name)); }

ember_writer *ember_writer_new(ember_types *t)
{
    ember_writer *w = em_calloc(1, sizeof *w);
    if (w)
        bin_writer_init(&w->w, REG(t), &w->out);
    return w;
}

void ember_writer_free(ember_writer *w)
{
    if (!w)
        return;
    bin_writer_free(&w->w);
    em_buf_free(&w->out);
    em_free(w);
}

void ember_writer_start(ember_writer *w)
{
    em_buf_reset(&w->out);
    bin_writer_reset(&w->w, &w->out);
}

int ember_writer_finish(ember_writer *w, const uint8_t **data, size_t *len)
{
    if (w->w.err)
        return w->w.err;
    if (w->w.depth != 0 || w->out.len == 0)
        return EM_BUILDER;
    *data = w->out.p;
    *len = w->out.len;
    return 0;
}

/* pc_load: a cursor over the writer's frames in place - fr[0] is the
 * parent of the innermost frame (fr[1]), or the depth-0 sentinel - so
 * nothing is copied in and the cursor's ends can fold into the parent.
 * Pushes write the writer's next frame, which always exists
 * (bin_wc__can_push bounds the depth by BIN_W_MAX_DEPTH). */
static inline __attribute__((always_inline)) void pc_load(bin_wc *c, bin_writer *w, uint32_t d)
{
    em_buf *o = w->out;
    c->w = w;
    c->base = o->p;
    c->p = o->p + o->len;
    c->lim = o->p + o->cap;
    c->d = d;
    c->d0 = w->depth - d;
    c->fr = w->top - d;
    c->cnt = w->top->count;
    c->mode = w->vmode;
    c->nf = w->nf;
    c->plain = (w->full_footer == 0) & (w->min_width <= 1) & (w->reg != NULL);
}

/* pc_store: the cursor's position, depth and mode back to the writer; the
 * frames are the writer's already.  In mode SLOW the complete call has
 * left the writer's state as it should be. */
static inline __attribute__((always_inline)) int pc_store(bin_wc *c)
{
    bin_writer *w = c->w;
    if (c->mode == BIN_WM_SLOW)
        return w->err;
    c->fr[c->d].count = c->cnt;
    w->out->len = (size_t)(c->p - c->base);
    w->top = c->fr + c->d;
    w->depth = c->d0 + c->d;
    w->vmode = (uint8_t)c->mode;
    w->named = c->mode == BIN_WM_FIELD;
    w->nf = c->nf;
    return w->err;
}

/* PC_CALL(w, call): one cursor call on ember_writer w (its cursor is c),
 * written out for depth 0 and for any other depth, so that in each the
 * cursor's depth is a constant (as where a cursor's calls are inlined one
 * after the other) and the compiler drops the tests that depend on it. */
#define PC_CALL(ew, call)                                                     \
    do {                                                                      \
        bin_writer *w_ = &(ew)->w;                                            \
        bin_wc c;                                                             \
        if (__builtin_expect(w_->depth != 0, 1)) {                            \
            pc_load(&c, w_, 1);                                               \
            (void)(call);                                                     \
            return pc_store(&c);                                              \
        }                                                                     \
        pc_load(&c, w_, 0);                                                   \
        (void)(call);                                                         \
        return pc_store(&c);                                                  \
    } while (0)

int ember_write_byte(ember_writer *w, int8_t v) { return bin_w_byte(&w->w, v); }
int ember_write_short(ember_writer *w, int16_t v) { return bin_w_short(&w->w, v); }
/* The common values with the writer's fast path here, so a call is one
 * call; anything else is the bin_w_* call (which tests again and takes its
 * complete path). */
int ember_write_int(ember_writer *w, int32_t v)
{
    uint8_t *p = bin_w__put_fast(&w->w, BIN_INT, 4);
    if (__builtin_expect(!p, 0))
        return bin_w_int(&w->w, v);
    em_st32(p, (uint32_t)v);
    return 0;
}
int ember_write_long(ember_writer *w, int64_t v) { return bin_w_long(&w->w, v); }
int ember_write_float(ember_writer *w, float v) { return bin_w_float(&w->w, v); }
int ember_write_double(ember_writer *w, double v) { return bin_w_double(&w->w, v); }
int ember_write_char(ember_writer *w, uint16_t v) { return bin_w_char(&w->w, v); }
int ember_write_bool(ember_writer *w, int v) { return bin_w_bool(&w->w, v); }
int ember_write_string(ember_writer *w, const char *s, size_t len)
{
    return bin_w__string_fast(&w->w, s, len) ? 0 : bin_w_string(&w->w, s, len);
}
int ember_write_uuid(ember_writer *w, uint64_t msb, uint64_t lsb) { return bin_w_uuid(&w->w, msb, lsb); }
int ember_write_date(ember_writer *w, int64_t ms) { return bin_w_date(&w->w, ms); }
int ember_write_timestamp(ember_writer *w, int64_t ms, int32_t nanos) { return bin_w_timestamp(&w->w, ms, nanos); }
int ember_write_time(ember_writer *w, int64_t ms) { return bin_w_time(&w->w, ms); }
int ember_write_decimal(ember_writer *w, int32_t scale, const uint8_t *mag, uint32_t len)
{
    return bin_w_decimal(&w->w, scale, mag, len);
}
int ember_write_enum(ember_writer *w, int32_t type_id, int32_t ordinal)
{
    return bin_w_binary_enum(&w->w, type_id, ordinal);
}
int ember_write_null(ember_writer *w) { return bin_w_null(&w->w); }
int ember_write_array(ember_writer *w, int code, const void *elems, uint32_t count)
{
    return bin_w_prim_array(&w->w, (uint8_t)code, elems, count);
}

/* The begins and the field name straight on the writer: they need neither
 * the parent frame nor a hash, so the cursor's load and store would be
 * most of their cost.  Each fast path is the state the complete call
 * leaves (writer.c's put, push and sync), taken only in the modes where
 * that call cannot fail; anything else is the complete call. */

/* pub_push: a new innermost frame for the value of code `kind` that starts
 * at out->len, accounted to its parent in mode m (< BIN_WM_NEEDNAME); the
 * caller has checked the room and the depth. */
static inline __attribute__((always_inline)) bin_wframe *pub_push(bin_writer *w, uint8_t kind,
                                                                 uint8_t m, size_t start)
{
    w->top->count++;
    if (m == BIN_WM_FIELD) {
        w->named = 0;                 /* the value takes the name ... */
        m = BIN_WM_NEEDNAME;          /* ... and the parent needs the next */
    }
    bin_wframe *f = w->top + 1;
    f->kind = kind;
    f->start = start;
    f->count = 0;
    f->pmode = m;
    w->top = f;
    w->depth++;
    return f;
}

/* pub_obj_push: pub_push of a complex object of d, header reserved. */
static inline __attribute__((always_inline)) bin_wframe *pub_obj_push(bin_writer *w,
                                                                     const bin_desc *d, uint8_t m)
{
    em_buf *o = w->out;
    const size_t start = o->len;
    o->p[start] = BIN_OBJ;
    o->len = start + BIN_HDR_LEN;
    bin_wframe *f = pub_push(w, BIN_OBJ, m, start);
    f->desc = d;
    f->f0 = w->nf;
    f->raw_pos = 0;
    f->hpos = BIN_HDR_LEN;
    f->hq = 0;
    f->in_order = 1;
    return f;
}

static inline __attribute__((always_inline)) int pub_can_begin(const bin_writer *w, size_t room)
{
    const em_buf *o = w->out;
    return w->vmode < BIN_WM_NEEDNAME && o->cap - o->len >= room && w->depth < BIN_W_MAX_DEPTH;
}

int ember_begin_object(ember_writer *ew, const ember_type *t)
{
    bin_writer *w = &ew->w;
    const bin_desc *d = DESC(t);
    if (__builtin_expect(d && pub_can_begin(w, BIN_HDR_LEN), 1)) {
        pub_obj_push(w, d, w->vmode);
        w->vmode = BIN_WM_NEEDNAME;
        return 0;
    }
    return bin_w_obj_begin(w, d);
}

static inline __attribute__((always_inline)) int pub_tree_begin(ember_writer *ew, int map)
{
    bin_writer *w = &ew->w;
    const bin_desc *d = map ? w->treemap : w->treeset;
    if (__builtin_expect(d && pub_can_begin(w, BIN_HDR_LEN + 5), 1)) {
        bin_wframe *f = pub_obj_push(w, d, w->vmode);
        em_buf *o = w->out;
        uint8_t *p = o->p + o->len;
        p[0] = BIN_NULL;              /* comparator; the size is stored at the end */
        em_st32(p + 1, 0);
        o->len += 5;
        f->raw_pos = BIN_HDR_LEN;
        f->kind = map ? BIN_WK_TREEMAP : BIN_WK_TREESET;
        w->vmode = BIN_WM_COUNT;
        return 0;
    }
    return map ? bin_w_treemap_begin(w) : bin_w_treeset_begin(w);
}

static inline __attribute__((always_inline)) int pub_begin(ember_writer *ew, uint8_t code, int arg)
{
    bin_writer *w = &ew->w;
    if (__builtin_expect(pub_can_begin(w, 6), 1)) {
        em_buf *o = w->out;
        uint8_t *p = o->p + o->len;
        p[0] = code;
        p[5] = (uint8_t)arg;          /* subtype; the count is stored at the end */
        pub_push(w, code, w->vmode, o->len + 1);
        o->len += 6;
        w->vmode = BIN_WM_COUNT;
        return 0;
    }
    return bin_w_begin(w, code, arg);
}
int ember_write_field(ember_writer *w, const char *name)
{
    PC_CALL(w, bin_wc_field(&c, bin_field_id(name, strlen(name))));
}
int ember_write_field_idx(ember_writer *ew, unsigned idx)
{
    bin_writer *w = &ew->w;
    /* NEEDNAME: an object frame, no raw data, no name pending, no error */
    if (__builtin_expect(w->vmode == BIN_WM_NEEDNAME && w->nf != w->capf, 1)) {
        bin_wframe *f = w->top;
        const bin_desc *d = f->desc;
        if (__builtin_expect(idx < d->nfields, 1)) {
            const int32_t fid = d->fids[idx];
            const uint32_t nf = w->nf, pos = nf - f->f0;
            if (f->in_order && (pos >= d->nfields || d->fids[pos] != fid))
                f->in_order = 0;
            /* the value is the next thing appended: it starts here */
            w->fields[nf] = (bin_wfield){fid, (uint32_t)(w->out->len - f->start)};
            w->nf = nf + 1;
            w->named = 1;
            w->vmode = BIN_WM_FIELD;
            return 0;
        }
    }
    return bin_w_field_idx(w, idx);
}
/* ember_end_object: the cursor's common end of an object (wcursor.h,
 * bin_wc__obj_close_ok / bin_wc__obj_close: declared fields in order or
 * none, compact footer, 1-byte offsets, not folded into a parent) straight
 * on the writer; any other end is the cursor's, in place. */
int ember_end_object(ember_writer *ew)
{
    bin_writer *w = &ew->w;
    /* NEEDNAME: an object frame (depth >= 1), no raw data, no name
     * pending, no error */
    if (__builtin_expect(w->vmode == BIN_WM_NEEDNAME && !w->full_footer && w->min_width <= 1 &&
                         w->reg != NULL, 1)) {
        bin_wframe *f = w->top;
        const bin_desc *d = f->desc;
        em_buf *out = w->out;
        const uint32_t f0 = f->f0, nfl = w->nf - f0;
        const size_t start = f->start;
        const uint32_t end = (uint32_t)(out->len - start);
        if ((!nfl || (f->in_order && nfl == d->nfields && w->fields[w->nf - 1].off < 0x100 &&
                      out->cap - out->len >= nfl)) &&
            (end + nfl <= BIN_W_FOLD_MIN || w->depth <= 1)) {
            uint8_t *o = out->p + start;
            uint64_t h0 = d->hdr_empty, h2 = 0;
            if (nfl) {
                const bin_wfield *fl = w->fields + f0;
                uint8_t *q = o + end;
                for (uint32_t i = 0; i < nfl; i++)
                    q[i] = (uint8_t)fl[i].off;
                h0 = d->hdr_fields;
                h2 = (uint32_t)d->schema_id | (uint64_t)end << 32;
            }
            const uint32_t total = end + nfl;
            const uint32_t hash = bin_wc__region_hash(f, o, end);
            out->len = start + total;
            w->nf = f0;
            w->vmode = f->pmode;          /* never FIELD: the value took the name */
            w->top = f - 1;
            w->depth--;
            em_st64(o, h0);
            em_st64(o + 8, hash | (uint64_t)total << 32);
            em_st64(o + 16, h2);
            return 0;
        }
    }
    PC_CALL(ew, bin_wc_obj_end(&c));
}
int ember_begin_collection(ember_writer *w, int subtype) { return pub_begin(w, BIN_COLLECTION, subtype); }
int ember_begin_map(ember_writer *w, int subtype) { return pub_begin(w, BIN_MAP, subtype); }
int ember_begin_array(ember_writer *w, int32_t elem_type_id) { return bin_w_begin(&w->w, BIN_OBJ_ARR, elem_type_id); }
int ember_end(ember_writer *w) { PC_CALL(w, bin_wc_end(&c)); }
int ember_begin_treemap(ember_writer *w) { return pub_tree_begin(w, 1); }
int ember_begin_treeset(ember_writer *w) { return pub_tree_begin(w, 0); }
/* ember_end_tree: the cursor's tree end (bin_wc__tree_close_ok /
 * bin_wc__tree_close, folded into an enclosing object as it does) straight
 * on the writer; any other end is the cursor's, in place. */
int ember_end_tree(ember_writer *ew)
{
    bin_writer *w = &ew->w;
    /* COUNT: a container or tree frame (depth >= 1), no error */
    if (__builtin_expect(w->vmode == BIN_WM_COUNT && !w->full_footer && w->min_width <= 1 &&
                         w->reg != NULL, 1)) {
        bin_wframe *f = w->top, *e = f - 1;
        const uint8_t k = f->kind;
        const uint32_t cnt = f->count;
        em_buf *out = w->out;
        const size_t start = f->start;
        const uint32_t end = (uint32_t)(out->len - start);
        const int parent_real = w->depth >= 2;
        if ((k == BIN_WK_TREESET || (k == BIN_WK_TREEMAP && !(cnt & 1))) && w->nf == f->f0 &&
            (end <= BIN_W_FOLD_MIN || !parent_real || bin_wc__objlike(e))) {
            const uint32_t count = k == BIN_WK_TREEMAP ? cnt / 2 : cnt;
            const int fold = parent_real && bin_wc__objlike(e);
            uint8_t *o = out->p + start;
            const uint32_t n = end - BIN_HDR_LEN;
            uint32_t q;
            if (__builtin_expect(f->hpos == BIN_HDR_LEN, 1))
                q = ((uint32_t)BIN_NULL * 923521u + bin_q31_u32(count)) * bin_pow31(n - 5) +
                    bin_wc__q(o + BIN_HDR_LEN + 5, n - 5);
            else                          /* entries were folded in with the size 0 */
                q = bin_wc__region_hash(f, o, end) - bin_pow31(n) + bin_q31_tcount(count, end);
            const uint32_t pn = bin_pow31(n), hash = pn + q;
            em_st32(o + BIN_HDR_LEN + 1, count);
            const bin_desc *d = f->desc;
            em_st64(o, d->hdr_raw);
            em_st64(o + 8, hash | (uint64_t)end << 32);
            em_st64(o + 16, (uint64_t)BIN_HDR_LEN << 32);
            w->vmode = f->pmode;
            w->top = e;
            w->depth--;
            if (fold) {
                /* bin_wc__tree_close's fold: the header from registers,
                 * the hash's own bytes last */
                const uint32_t p4 = 31u * 31u * 31u * 31u, p8 = p4 * p4;
                const uint32_t rest = (d->q_hdr_raw * p8 * p8 + bin_q31_u32(end) * p8 +
                                       (uint32_t)BIN_HDR_LEN * 29791u) * pn + q;
                bin_wc c;                 /* bin_wc__fold reads only its base */
                c.base = out->p;
                bin_wc__fold(&c, e, (uint32_t)(start - e->start), end,
                             bin_q31_u32(hash) * (p8 * p4 * pn) + rest);
            }
            return 0;
        }
    }
    PC_CALL(ew, bin_wc_tree_end(&c));
}

int ember_validate(const uint8_t *p, size_t n, size_t *len) { return bin_validate(p, n, len, 0); }
const uint8_t *ember_resolve(const uint8_t *v) { return bin_rd_resolve(v); }
int ember_value_type(const uint8_t *v) { return v[0]; }

int ember_read_field(ember_types *t, const uint8_t *obj, const char *name, const uint8_t **val)
{
    return ember_read_field_id(t, obj, bin_field_id(name, strlen(name)), val);
}

int ember_read_field_id(ember_types *t, const uint8_t *obj, int32_t fid, const uint8_t **val)
{
    obj = bin_rd_resolve(obj);
    if (obj[0] != BIN_OBJ)
        return EM_BADTYPE;
    const bin_type *bt = t ? bin_registry_get(REG(t), bin_rd_type_id(obj)) : NULL;
    return bin_rd_field(obj, bt, fid, val);
}

int ember_read_long(const uint8_t *v, int64_t *out) { return bin_rd_long(v, out); }
int ember_read_double(const uint8_t *v, double *out) { return bin_rd_double(v, out); }
int ember_read_bool(const uint8_t *v, int *out) { return bin_rd_bool(v, out); }
int ember_read_string(const uint8_t *v, const char **s, size_t *len) { return bin_rd_string(v, s, len); }

int ember_fields_begin(ember_iter *it, ember_types *t, const uint8_t *obj)
{
    obj = bin_rd_resolve(obj);
    if (obj[0] != BIN_OBJ)
        return EM_BADTYPE;
    const bin_type *bt = t ? bin_registry_get(REG(t), bin_rd_type_id(obj)) : NULL;
    return bin_fiter_init((bin_fiter *)(void *)it, obj, bt);
}

int ember_fields_next(ember_iter *it, int32_t *field_id, const uint8_t **val)
{
    return bin_fiter_next((bin_fiter *)(void *)it, field_id, val);
}

int ember_items_begin(ember_iter *it, const uint8_t *v, uint32_t *count)
{
    return bin_seq_init((bin_seq *)(void *)it, bin_rd_resolve(v), count);
}

int ember_items_next(ember_iter *it, const uint8_t **item)
{
    return bin_seq_next((bin_seq *)(void *)it, item);
}
