/* wcursor.h - bin_wc, the binary writer's hot-loop interface.
 *
 * The bin_w_* calls (binary.h) keep all state in the bin_writer, so each
 * value loads the buffer length, the count and the frame that the previous
 * value just stored, and the compiler cannot keep any of it in registers
 * because the byte stores into the output may alias anything.  A bin_wc
 * cursor is the same state held in the caller's locals: the write position
 * and limit, the mode, the count, and the innermost BIN_WC_DEPTH frames.
 * Every call is inline and the locals' addresses never reach a function
 * that is not, so the compiler keeps them in registers, knows the depth and
 * most frame fields as constants where the calls are written one after the
 * other, and a value's calls compile into straight-line stores.
 *
 *   BIN_WC_DECL(c);                      (declares c and its frames)
 *   bin_wc_reset(&c, w, out);            (or bin_wc_load(&c, w) to go on)
 *   bin_wc_obj_begin(&c, desc);
 *   bin_wc_field_idx(&c, 0); bin_wc_int(&c, 42);
 *   bin_wc_obj_end(&c);
 *   rc = bin_wc_store(&c);               (the first error, or 0)
 *
 * Between bin_wc_store and bin_wc_load any bin_w_* call may be made.  Each
 * fast path handles only the common case (no error, room in the buffer, a
 * frame that needs no element check, depth within the cursor's frames);
 * otherwise the cursor gives its state to the writer, turns to mode SLOW
 * and from then on makes the complete bin_w_* calls, so the bytes and
 * errors are the same whichever path ran.  It is not loaded again after a
 * complete call, since the compiler would then lose what it knew; a caller
 * writing a long run can bin_wc_sync to use the fast paths again (after a
 * buffer growth, say).  Every call returns 0 or the sticky error.
 */
#ifndef EM_BINARY_WCURSOR_H
#define EM_BINARY_WCURSOR_H

#include "binary/binary_int.h"

/* Frames the cursor keeps itself; deeper nesting goes to the complete path. */
#define BIN_WC_DEPTH 4

typedef struct bin_wc {
    bin_writer *w;
    uint8_t *p;           /* next byte: out->p + out->len */
    uint8_t *lim;         /* out->p + out->cap */
    uint8_t *base;        /* out->p */
    uint32_t d;           /* innermost frame: fr[d] */
    uint32_t d0;          /* the writer's depth of fr[0] */
    uint32_t cnt;         /* mode COUNT: values in fr[d] so far (its count is stale) */
    uint32_t mode;        /* BIN_WM_*; BIN_WM_SLOW: the writer holds the state */
    uint32_t nf;          /* the writer's nf */
    uint32_t plain;       /* compact footers, 1-byte offsets allowed, a registry */
    bin_wframe *fr;       /* BIN_WC_DEPTH + 1 frames; fr[d] innermost */
} bin_wc;

/* BIN_WC_DECL(c): declares a cursor c and the frames it keeps as two
 * locals.  Apart, the cursor's fields can be registers from the start,
 * its depth then a constant where the calls were inlined, and the frames,
 * read and written only at constant indices, registers too.  In one
 * struct, the first frame access with a depth not yet known would keep
 * all of it in memory. */
#define BIN_WC_DECL(c)                                                                   \
    bin_wframe c##_frames_[BIN_WC_DEPTH + 1];                                            \
    bin_wc c = {.fr = c##_frames_}

/* bin_wc_load takes the writer's state into c. */
static inline __attribute__((always_inline)) void bin_wc_load(bin_wc *c, bin_writer *w)
{
    em_buf *o = w->out;
    c->w = w;
    c->base = o->p;
    c->p = o->p + o->len;
    c->lim = o->p + o->cap;
    c->d = 0;
    c->d0 = w->depth;
    c->fr[0] = *w->top;
    c->cnt = w->top->count;
    c->mode = w->vmode;
    c->nf = w->nf;
    c->plain = (w->full_footer == 0) & (w->min_width <= 1) & (w->reg != NULL);
}

/* bin_wc__put gives the cursor's frames and position to the writer.  The
 * copies are spelled out, not looped: with c->d a constant where this was
 * inlined, only those frames are copied and the compiler keeps seeing
 * every frame access at a constant index. */
static inline __attribute__((always_inline)) void bin_wc__put(bin_wc *c)
{
    bin_writer *w = c->w;
    bin_wframe *t = w->fr + c->d0;
    const uint32_t d = c->d;
    c->fr[d].count = c->cnt;            /* unused by frames that do not count */
    t[0] = c->fr[0];
    if (d >= 1) t[1] = c->fr[1];
    if (d >= 2) t[2] = c->fr[2];
    if (d >= 3) t[3] = c->fr[3];
    if (d >= 4) t[4] = c->fr[4];
    w->out->len = (size_t)(c->p - c->base);
    w->top = t + d;
    w->depth = c->d0 + d;
    w->vmode = (uint8_t)c->mode;
    w->named = c->mode == BIN_WM_FIELD;
    w->nf = c->nf;
}

/* bin_wc_store gives the state back to the writer; returns its error.  In
 * mode SLOW the writer has it already. */
static inline __attribute__((always_inline)) int bin_wc_store(bin_wc *c)
{
    bin_writer *w = c->w;
    if (c->mode == BIN_WM_SLOW)
        return w->err;
    if (c->d == 0 && c->d0 == 0) {
        /* A value from bin_wc_reset, done: the sentinel frame needs only
         * its count back.  bin_wc__put here, copying the whole frame,
         * measured 15 -> 23 ns on the M1 empty-container rows. */
        w->fr[0].count = c->cnt;
        w->out->len = (size_t)(c->p - c->base);
        w->top = &w->fr[0];
        w->depth = 0;
        w->vmode = (uint8_t)c->mode;
        w->named = 0;
        w->nf = c->nf;
    } else {
        bin_wc__put(c);
    }
    return w->err;
}

/* bin_wc_sync: store and load again, so that a cursor that took the
 * complete path uses its fast paths again (see BIN_WC__SLOW). */
static inline __attribute__((always_inline)) void bin_wc_sync(bin_wc *c)
{
    bin_wc_store(c);
    bin_wc_load(c, c->w);
}

/* bin_wc_reset: a fresh value; the sentinel frame is known here, so the
 * compiler can drop the tests that look for a parent. */
static inline __attribute__((always_inline)) void bin_wc_reset(bin_wc *c, bin_writer *w, em_buf *out)
{
    bin_writer_reset(w, out);
    c->w = w;
    c->base = out->p;
    c->p = out->p + out->len;
    c->lim = out->p + out->cap;
    c->d = 0;
    c->d0 = 0;
    c->fr[0] = (bin_wframe){0};
    c->cnt = 0;
    c->mode = BIN_WM_TOP;
    c->nf = 0;
    c->plain = (w->full_footer == 0) & (w->min_width <= 1) & (w->reg != NULL);
}

/* BIN_WC__SLOW: the complete path.  The first time, the cursor's state
 * goes to the writer and the cursor turns to mode SLOW: from then on every
 * call is the bin_w_* call, until bin_wc_store (or bin_wc_sync).  The
 * cursor is not loaded again after the call, so its depth and frames
 * stay what the compiler can see: dd is the change of depth the call
 * makes when it succeeds, applied within the cursor's frames whatever
 * happened (mode SLOW never reads them). */
#define BIN_WC__SLOW(c, call, dd) (bin_wc__slow_enter((c), (dd)), (call))
static inline __attribute__((always_inline)) void bin_wc__slow_enter(bin_wc *c, int dd)
{
    if (c->mode != BIN_WM_SLOW) {
        bin_wc__put(c);
        c->mode = BIN_WM_SLOW;
    }
    if (dd > 0 && c->d < BIN_WC_DEPTH)
        c->d++;
    else if (dd < 0 && c->d > 0)
        c->d--;
}
#define BIN_WC__LIKELY(x) __builtin_expect(!!(x), 1)

/* bin_wc__account: one value starts (mode below NEEDNAME).  The count is
 * kept in every mode (only containers and tree types read it), which
 * saves a test per value. */
static inline __attribute__((always_inline)) void bin_wc__account(bin_wc *c)
{
    c->cnt++;
    if (c->mode == BIN_WM_FIELD)
        c->mode = BIN_WM_NEEDNAME;
}

/* bin_wc__room: at least n bytes of capacity left. */
static inline __attribute__((always_inline)) int bin_wc__room(const bin_wc *c, size_t n)
{
    return (size_t)(c->lim - c->p) >= n;
}

static inline __attribute__((always_inline)) int bin_wc_int(bin_wc *c, int32_t v)
{
    if (BIN_WC__LIKELY(c->mode < BIN_WM_NEEDNAME && bin_wc__room(c, 5))) {
        bin_wc__account(c);
        c->p[0] = BIN_INT;
        em_st32(c->p + 1, (uint32_t)v);
        c->p += 5;
        return 0;
    }
    return BIN_WC__SLOW(c, bin_w_int(c->w, v), 0);
}

/* Strings of 4..16 ASCII bytes: two overlapping words prove ASCII and copy
 * them; anything else takes the complete path (UTF-8 check, memcpy). */
static inline __attribute__((always_inline)) int bin_wc_string(bin_wc *c, const char *s, size_t len)
{
    const uint8_t *u = (const uint8_t *)s;
    if (BIN_WC__LIKELY(len >= 4 && len <= 16 && c->mode < BIN_WM_NEEDNAME && bin_wc__room(c, 5 + len))) {
        uint64_t a = len >= 8 ? em_ld64(u) : em_ld32(u);
        uint64_t b = len >= 8 ? em_ld64(u + len - 8) : em_ld32(u + len - 4);
        if (BIN_WC__LIKELY(!((a | b) & 0x8080808080808080ULL))) {
            bin_wc__account(c);
            uint8_t *p = c->p;
            p[0] = BIN_STRING;
            em_st32(p + 1, (uint32_t)len);
            if (len >= 8) {
                em_st64(p + 5, a);
                em_st64(p + 5 + len - 8, b);
            } else {
                em_st32(p + 5, (uint32_t)a);
                em_st32(p + 1 + len, (uint32_t)b);
            }
            c->p = p + 5 + len;
            return 0;
        }
    }
    return BIN_WC__SLOW(c, bin_w_string(c->w, s, len), 0);
}

/* bin_wc__push: a new frame for the value starting at c->p (already
 * accounted to its parent); the parent's count is saved in the parent. */
static inline __attribute__((always_inline)) bin_wframe *bin_wc__push(bin_wc *c, uint8_t kind,
                                                                     size_t start)
{
    c->fr[c->d].count = c->cnt;
    bin_wframe *f = &c->fr[++c->d];
    f->kind = kind;
    f->start = start;
    f->pmode = (uint8_t)c->mode;
    return f;
}

/* bin_wc__pop: back to the parent frame, its mode and count. */
static inline __attribute__((always_inline)) void bin_wc__pop(bin_wc *c)
{
    c->mode = c->fr[c->d].pmode;
    c->d--;
    c->cnt = c->fr[c->d].count;
}

static inline __attribute__((always_inline)) int bin_wc__can_push(const bin_wc *c)
{
    return c->d < BIN_WC_DEPTH && c->d0 + c->d < BIN_W_MAX_DEPTH;
}

static inline __attribute__((always_inline)) int bin_wc_begin(bin_wc *c, uint8_t code, int32_t arg)
{
    if (BIN_WC__LIKELY((code == BIN_COLLECTION || code == BIN_MAP) && c->mode < BIN_WM_NEEDNAME &&
                       bin_wc__room(c, 6) && bin_wc__can_push(c))) {
        bin_wc__account(c);
        uint8_t *p = c->p;
        p[0] = code;
        p[5] = (uint8_t)arg;
        bin_wc__push(c, code, (size_t)(p + 1 - c->base));
        c->p = p + 6;
        c->mode = BIN_WM_COUNT;
        c->cnt = 0;
        return 0;
    }
    return BIN_WC__SLOW(c, bin_w_begin(c->w, code, arg), 1);
}

/* bin_wc__hash_short: Java's 31*h+b hash of n < 16 bytes, 4 at a step;
 * byte loads, as the bytes were just stored in pieces (a wide load over
 * several pending stores cannot be forwarded and stalls).  The loop of
 * em_hash_bytes31_from (util/hash.c) specialised to short regions: inline
 * and with a switch for the tail, since calling that one, even made
 * inline, measured +2 ns per value on the empty-container M1 rows. */
static inline uint32_t bin_wc__hash_short(const uint8_t *p, uint32_t n)
{
    uint32_t h = 1;
    for (; n >= 4; n -= 4, p += 4)
        h = h * 923521u + (uint32_t)(int32_t)(int8_t)p[0] * 29791u +
            (uint32_t)(int32_t)(int8_t)p[1] * 961u + (uint32_t)(int32_t)(int8_t)p[2] * 31u +
            (uint32_t)(int32_t)(int8_t)p[3];
    switch (n) {
    case 3:
        return h * 29791u + (uint32_t)(int32_t)(int8_t)p[0] * 961u +
               (uint32_t)(int32_t)(int8_t)p[1] * 31u + (uint32_t)(int32_t)(int8_t)p[2];
    case 2:
        return h * 961u + (uint32_t)(int32_t)(int8_t)p[0] * 31u + (uint32_t)(int32_t)(int8_t)p[1];
    case 1:
        return h * 31u + (uint32_t)(int32_t)(int8_t)p[0];
    default:
        return h;
    }
}

/* bin_wc__q: the polynomial part of the hash of p[0..n) (the hash without
 * 31^n); 16 readable bytes precede p. */
static inline __attribute__((always_inline)) uint32_t bin_wc__q(const uint8_t *p, uint32_t n)
{
    if (n == 0)
        return 0;
    if (n < 16)
        return bin_wc__hash_short(p, n) - bin_pow31(n);
    return bin_q31_after(p, n);
}

/* bin_wc__parent_real: fr[d - 1] is a frame, not the writer's sentinel */
static inline __attribute__((always_inline)) int bin_wc__parent_real(const bin_wc *c)
{
    return c->d0 + c->d >= 2;
}

static inline __attribute__((always_inline)) int bin_wc__objlike(const bin_wframe *f)
{
    return f->kind == BIN_OBJ || f->kind >= BIN_WK_TREEMAP;
}

/* bin_wc__fold: the value of len bytes at offset xs of object frame e,
 * whose polynomial sum is qx, joins e's hash sum, so e does not hash those
 * bytes again when it ends (and does not read them back just after they
 * were stored).  e's bytes between its last fold and xs are hashed now. */
static inline __attribute__((always_inline)) void bin_wc__fold(const bin_wc *c, bin_wframe *e,
                                                               uint32_t xs, uint32_t len,
                                                               uint32_t qx)
{
    const uint32_t ph = e->hpos;
    uint32_t eq = e->hq;
    if (xs != ph)
        eq = eq * bin_pow31(xs - ph) + bin_wc__q(c->base + e->start + ph, xs - ph);
    e->hq = eq * bin_pow31(len) + qx;
    e->hpos = xs + len;
}

/* bin_wc_end: inside an object, the container is folded into the
 * object's hash sum with its code, size and subtype from registers. */
static inline __attribute__((always_inline)) int bin_wc_end(bin_wc *c)
{
    if (BIN_WC__LIKELY(c->mode == BIN_WM_COUNT && c->d >= 1)) {
        bin_wframe *f = &c->fr[c->d];
        const uint8_t k = f->kind;
        if (BIN_WC__LIKELY(k == BIN_COLLECTION || (k == BIN_MAP && !(c->cnt & 1)))) {
            const uint32_t n = k == BIN_MAP ? c->cnt / 2 : c->cnt;
            uint8_t *q = c->base + f->start;        /* the size; the code precedes it */
            em_st32(q, n);
            bin_wframe *e = f - 1;
            if (bin_wc__parent_real(c) && bin_wc__objlike(e)) {
                const uint32_t len = (uint32_t)(c->p - q) + 1;
                /* code, size, subtype: 6 bytes, then the elements */
                const uint32_t q6 = ((uint32_t)k * 923521u + bin_q31_u32(n)) * 31u +
                                    (uint32_t)(int32_t)(int8_t)q[4];
                const uint32_t qx = q6 * bin_pow31(len - 6) + bin_wc__q(q + 5, len - 6);
                bin_wc__fold(c, e, (uint32_t)(f->start - 1 - e->start), len, qx);
            }
            bin_wc__pop(c);
            return 0;
        }
    }
    return BIN_WC__SLOW(c, bin_w_end(c->w), -1);
}

/* The fast paths below are each a test that changes nothing and a body
 * that cannot fail: a body that could still bail out would join the
 * complete path with the cursor half changed, and the compiler could no
 * longer see the cursor's depth and frames as the constants they are. */

/* bin_wc__obj_can: a complex object of d with `extra` more bytes may start
 * on the fast path. */
static inline __attribute__((always_inline)) int bin_wc__obj_can(const bin_wc *c,
                                                                 const bin_desc *d, size_t extra)
{
    return d && c->mode < BIN_WM_NEEDNAME && bin_wc__room(c, BIN_HDR_LEN + extra) &&
           bin_wc__can_push(c);
}

/* bin_wc__obj_push: starts it (after bin_wc__obj_can). */
static inline __attribute__((always_inline)) bin_wframe *bin_wc__obj_push(bin_wc *c,
                                                                         const bin_desc *d)
{
    bin_wc__account(c);
    uint8_t *p = c->p;
    p[0] = BIN_OBJ;
    bin_wframe *f = bin_wc__push(c, BIN_OBJ, (size_t)(p - c->base));
    f->desc = d;
    f->f0 = c->nf;
    f->count = 0;
    f->raw_pos = 0;
    f->hpos = BIN_HDR_LEN;
    f->hq = 0;
    f->in_order = 1;
    c->p = p + BIN_HDR_LEN;
    c->mode = BIN_WM_NEEDNAME;
    return f;
}

static inline __attribute__((always_inline)) int bin_wc_obj_begin(bin_wc *c, const bin_desc *d)
{
    if (BIN_WC__LIKELY(bin_wc__obj_can(c, d, 0))) {
        bin_wc__obj_push(c, d);
        return 0;
    }
    return BIN_WC__SLOW(c, bin_w_obj_begin(c->w, d), 1);
}

/* bin_wc__name: records field fid, the pos-th named in this object, whose
 * value starts at c->p. */
static inline __attribute__((always_inline)) void bin_wc__name(bin_wc *c, bin_wframe *f,
                                                              uint32_t nf, int32_t fid)
{
    bin_writer *w = c->w;
    w->fields[nf] = (bin_wfield){fid, (uint32_t)((size_t)(c->p - c->base) - f->start)};
    c->nf = nf + 1;
    c->mode = BIN_WM_FIELD;
}

static inline __attribute__((always_inline)) int bin_wc_field(bin_wc *c, int32_t fid)
{
    const uint32_t nf = c->nf;
    if (BIN_WC__LIKELY(c->mode == BIN_WM_NEEDNAME && nf != c->w->capf)) {
        bin_wframe *f = &c->fr[c->d];
        const bin_desc *d = f->desc;
        const uint32_t pos = nf - f->f0;
        if (f->in_order && (pos >= d->nfields || d->fids[pos] != fid))
            f->in_order = 0;
        bin_wc__name(c, f, nf, fid);
        return 0;
    }
    return BIN_WC__SLOW(c, bin_w_field(c->w, fid), 0);
}

/* by index in the descriptor: in declared order when idx is the position
 * (the in-order test then passes by itself) */
static inline __attribute__((always_inline)) int bin_wc_field_idx(bin_wc *c, uint32_t idx)
{
    if (BIN_WC__LIKELY(c->mode == BIN_WM_NEEDNAME && idx < c->fr[c->d].desc->nfields))
        return bin_wc_field(c, c->fr[c->d].desc->fids[idx]);
    return BIN_WC__SLOW(c, bin_w_field_idx(c->w, idx), 0);
}

/* bin_wc__region_hash: Java's hash of the object at o's region [24, end):
 * the bytes after the last value folded into f->hq, hashed now, on top of
 * that sum. */
static inline __attribute__((always_inline)) uint32_t bin_wc__region_hash(const bin_wframe *f,
                                                                         const uint8_t *o,
                                                                         uint32_t end)
{
    const uint32_t hpos = f->hpos, n = end - hpos;
    if (__builtin_expect(hpos == BIN_HDR_LEN, 0))
        return n < 16 ? bin_wc__hash_short(o + hpos, n) : (uint32_t)bin_hash31_after(o + hpos, n);
    uint32_t q = f->hq;                    /* all folded: the usual case here */
    if (n)
        q = q * bin_pow31(n) + bin_wc__q(o + hpos, n);
    return bin_pow31(end - BIN_HDR_LEN) + q;
}

/* bin_wc__obj_close_ok: the object in fr[d] (d >= 1) has the common end -
 * no raw data, every declared field in declared order (or none), compact
 * footer, 1-byte offsets, and small enough or at the top not to be folded
 * into a parent. */
static inline __attribute__((always_inline)) int bin_wc__obj_close_ok(const bin_wc *c)
{
    const bin_wframe *f = &c->fr[c->d];
    if (f->raw_pos || !c->plain)
        return 0;
    const uint32_t nfl = c->nf - f->f0;
    const uint32_t end = (uint32_t)((size_t)(c->p - c->base) - f->start);
    if (nfl && (!f->in_order || nfl != f->desc->nfields ||
                c->w->fields[c->nf - 1].off >= 0x100 || !bin_wc__room(c, nfl)))
        return 0;
    return end + nfl <= BIN_W_FOLD_MIN || c->d0 + c->d <= 1;
}

/* bin_wc__obj_close: ends it (after bin_wc__obj_close_ok); the bytes are
 * exactly what bin_w_obj_end writes in that case. */
static inline __attribute__((always_inline)) void bin_wc__obj_close(bin_wc *c)
{
    bin_wframe *f = &c->fr[c->d];
    const bin_desc *d = f->desc;
    const uint32_t f0 = f->f0, nfl = c->nf - f0;
    const size_t start = f->start;
    const uint32_t end = (uint32_t)((size_t)(c->p - c->base) - start);
    uint64_t h0 = d->hdr_empty, h2 = 0;
    if (nfl) {
        const bin_wfield *fl = c->w->fields + f0;
        uint8_t *q = c->p;
        for (uint32_t i = 0; i < nfl; i++)
            q[i] = (uint8_t)fl[i].off;
        h0 = d->hdr_fields;
        h2 = (uint32_t)d->schema_id | (uint64_t)end << 32;
    }
    const uint32_t total = end + nfl;
    uint8_t *o = c->base + start;
    const uint32_t hash = bin_wc__region_hash(f, o, end);
    c->p = o + total;
    c->nf = f0;
    bin_wc__pop(c);
    em_st64(o, h0);
    em_st64(o + 8, hash | (uint64_t)total << 32);
    em_st64(o + 16, h2);
}

static inline __attribute__((always_inline)) int bin_wc_obj_end(bin_wc *c)
{
    if (BIN_WC__LIKELY(c->mode == BIN_WM_NEEDNAME && c->d >= 1 && c->fr[c->d].kind == BIN_OBJ &&
                       bin_wc__obj_close_ok(c))) {
        bin_wc__obj_close(c);
        return 0;
    }
    return BIN_WC__SLOW(c, bin_w_obj_end(c->w), -1);
}

/* bin_wc__tree_close_ok: the tree type in fr[d] (d >= 1) may end on the
 * fast path: compact footers, no named fields, and folded here if large. */
static inline __attribute__((always_inline)) int bin_wc__tree_close_ok(const bin_wc *c)
{
    const bin_wframe *f = &c->fr[c->d];
    if (!c->plain || c->nf != f->f0)
        return 0;
    const uint32_t end = (uint32_t)((size_t)(c->p - c->base) - f->start);
    /* a large tree not folded here is folded further up by the complete path */
    return end <= BIN_W_FOLD_MIN || !bin_wc__parent_real(c) || bin_wc__objlike(f - 1);
}

/* bin_wc__tree_close: ends it (after bin_wc__tree_close_ok) with `count`
 * entries.  Its region is the null comparator, the size and the entries;
 * the first two are hashed from registers (the size is stored now) and
 * only the entries are read back.  Inside an object (the usual holder of a
 * TreeMap field) the tree is folded into the object's sum with its header
 * from registers, so the object does not hash its bytes again. */
static inline __attribute__((always_inline)) void bin_wc__tree_close(bin_wc *c, uint32_t count)
{
    bin_wframe *f = &c->fr[c->d];
    const size_t start = f->start;
    const uint32_t end = (uint32_t)((size_t)(c->p - c->base) - start);
    bin_wframe *e = f - 1;
    const int fold = bin_wc__parent_real(c) && bin_wc__objlike(e);
    uint8_t *o = c->base + start;
    const uint32_t n = end - BIN_HDR_LEN;
    uint32_t q;
    if (__builtin_expect(f->hpos == BIN_HDR_LEN, 1))
        q = ((uint32_t)BIN_NULL * 923521u + bin_q31_u32(count)) * bin_pow31(n - 5) +
            bin_wc__q(o + BIN_HDR_LEN + 5, n - 5);
    else                                   /* entries were folded in with the size 0 */
        q = bin_wc__region_hash(f, o, end) - bin_pow31(n) + bin_q31_tcount(count, end);
    const uint32_t pn = bin_pow31(n), hash = pn + q;
    em_st32(o + BIN_HDR_LEN + 1, count);
    const bin_desc *d = f->desc;
    em_st64(o, d->hdr_raw);
    em_st64(o + 8, hash | (uint64_t)end << 32);
    em_st64(o + 16, (uint64_t)BIN_HDR_LEN << 32);
    bin_wc__pop(c);
    if (fold) {
        /* the header: code..type id (the descriptor's), hash, length,
         * schema id 0, raw offset 24 */
        const uint32_t p4 = 31u * 31u * 31u * 31u, p8 = p4 * p4;
        /* everything but the hash's own bytes first: they end the chain */
        const uint32_t rest = (d->q_hdr_raw * p8 * p8 + bin_q31_u32(end) * p8 +
                               (uint32_t)BIN_HDR_LEN * 29791u) * pn + q;
        bin_wc__fold(c, e, (uint32_t)(start - e->start), end,
                     bin_q31_u32(hash) * (p8 * p4 * pn) + rest);
    }
    c->p = o + end;
}

/* The tree types: a raw object with the null comparator and the size
 * (after bin_wc__obj_can(c, d, 5)). */
static inline __attribute__((always_inline)) void bin_wc__tree_begin(bin_wc *c, const bin_desc *d,
                                                                    uint8_t kind)
{
    bin_wframe *f = bin_wc__obj_push(c, d);
    f->raw_pos = BIN_HDR_LEN;
    f->kind = kind;
    c->p[0] = BIN_NULL;
    em_st32(c->p + 1, 0);                 /* the size: stored at the end */
    c->p += 5;
    c->mode = BIN_WM_COUNT;
    c->cnt = 0;
}

static inline __attribute__((always_inline)) int bin_wc_treemap_begin(bin_wc *c)
{
    const bin_desc *d = c->w->treemap;
    if (BIN_WC__LIKELY(bin_wc__obj_can(c, d, 5))) {
        bin_wc__tree_begin(c, d, BIN_WK_TREEMAP);
        return 0;
    }
    return BIN_WC__SLOW(c, bin_w_treemap_begin(c->w), 1);
}

static inline __attribute__((always_inline)) int bin_wc_treeset_begin(bin_wc *c)
{
    const bin_desc *d = c->w->treeset;
    if (BIN_WC__LIKELY(bin_wc__obj_can(c, d, 5))) {
        bin_wc__tree_begin(c, d, BIN_WK_TREESET);
        return 0;
    }
    return BIN_WC__SLOW(c, bin_w_treeset_begin(c->w), 1);
}

static inline __attribute__((always_inline)) int bin_wc_tree_end(bin_wc *c)
{
    if (BIN_WC__LIKELY(c->mode == BIN_WM_COUNT && c->d >= 1)) {
        const uint8_t k = c->fr[c->d].kind;
        if (BIN_WC__LIKELY((k == BIN_WK_TREESET || (k == BIN_WK_TREEMAP && !(c->cnt & 1))) &&
                           bin_wc__tree_close_ok(c))) {
            bin_wc__tree_close(c, k == BIN_WK_TREEMAP ? c->cnt / 2 : c->cnt);
            return 0;
        }
    }
    return BIN_WC__SLOW(c, bin_w_tree_end(c->w), -1);
}

#endif
