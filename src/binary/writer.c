/* writer.c - bin_writer: every type code of reference §3.1 into a reused
 * em_buf; complex objects (§3.2) with footers, offset widths, schema ids and
 * hashes computed at bin_w_obj_end; writer descriptors (bin_desc), built
 * once per type and kept in the registry; the predefined BinaryTreeMap and
 * BinaryTreeSet (§3.5) registered at start-up.
 *
 * Complex objects are written in place: the 24-byte header is reserved at
 * begin and filled at end, when the field offsets (kept in w->fields, a
 * reused array) give the footer, so no value is ever copied twice.
 *
 * The bin_w_* functions here are the complete versions: every check, every
 * layout.  The cursor interface (wcursor.h) inlines the common cases and
 * falls back to them.
 * Every function that changes the writer's state ends with sync(), which
 * keeps w->vmode and w->top (what the cursor loads) in step with it.
 */
#include "binary/binary_int.h"

#include "util/err.h"
#include "util/hash.h"
#include "util/mem.h"

#include <string.h>

enum { KIND_TREEMAP = BIN_WK_TREEMAP, KIND_TREESET = BIN_WK_TREESET };
/* Objects up to FOLD_MIN bytes are not folded into their parent's hash sum
 * (bin_w_obj_end): the vectorised hash rehashes them for fewer instructions
 * than folding costs (two powers, the header's sum and the parent prefix). */
enum { FOLD_MIN = BIN_W_FOLD_MIN };

/* ---- descriptor table (lives in the registry, locked by its lock) ---- */

struct bin_desc_tab {
    bin_desc **slots;
    uint32_t cap, count;
};

struct bin_desc_tab **bin_registry_desc_tab(bin_registry *r);
void bin_registry_wrlock(bin_registry *r, int lock);
void bin_registry_rdlock(bin_registry *r);
void bin_desc_tab_free(struct bin_desc_tab *t);
int  bin_predefined_init(bin_registry *r);

static void desc_free(bin_desc *d)
{
    while (d) {
        bin_desc *o = d->older;
        em_free(d);
        d = o;
    }
}

void bin_desc_tab_free(struct bin_desc_tab *t)
{
    if (!t)
        return;
    for (uint32_t i = 0; i < t->cap; i++)
        desc_free(t->slots[i]);
    em_free(t->slots);
    em_free(t);
}

static bin_desc **desc_slot(bin_desc **tab, uint32_t cap, int32_t id)
{
    uint32_t i = (uint32_t)em_mix64((uint32_t)id) & (cap - 1);
    while (tab[i] && tab[i]->type_id != id)
        i = (i + 1) & (cap - 1);
    return &tab[i];
}

const bin_desc *bin_registry_desc(bin_registry *r, int32_t type_id)
{
    const bin_desc *d = NULL;
    bin_registry_rdlock(r);
    struct bin_desc_tab *t = *bin_registry_desc_tab(r);
    if (t && t->cap)
        d = *desc_slot(t->slots, t->cap, type_id);
    bin_registry_wrlock(r, 0);
    return d;
}

/* desc_new lays out one block: bin_desc, fids, codes, name pointers, names. */
static bin_desc *desc_new(const char *name, const char *const *fields, const int32_t *codes,
                          uint32_t n, uint16_t flags, int raw)
{
    size_t sz = sizeof(bin_desc) + (size_t)n * (8 + sizeof(char *)) + strlen(name) + 1;
    for (uint32_t i = 0; i < n; i++)
        sz += strlen(fields[i]) + 1;
    uint8_t *m = em_malloc(sz);
    if (!m)
        return NULL;
    bin_desc *d = (bin_desc *)m;
    const char **names = (const char **)(d + 1);
    int32_t *fids = (int32_t *)(names + n);
    int32_t *cds = fids + n;
    char *s = (char *)(cds + n);
    memset(d, 0, sizeof *d);
    size_t l = strlen(name);
    memcpy(s, name, l + 1);
    d->name = s;
    s += l + 1;
    for (uint32_t i = 0; i < n; i++) {
        l = strlen(fields[i]);
        memcpy(s, fields[i], l + 1);
        names[i] = s;
        s += l + 1;
        fids[i] = bin_field_id(fields[i], l);
        cds[i] = codes[i];
    }
    d->type_id = bin_type_id(name, strlen(name));
    d->flags = flags;
    d->raw = (uint8_t)raw;
    d->nfields = n;
    d->fids = fids;
    d->codes = cds;
    d->names = names;
    d->schema_id = bin_schema_id(fids, n);
    const uint64_t h = BIN_OBJ | 1u << 8 | (uint64_t)(uint32_t)d->type_id << 32;
    const uint32_t c = (uint32_t)flags | BIN_FLAG_COMPACT;
    d->hdr_fields = h | (uint64_t)(c | BIN_FLAG_HAS_SCHEMA | BIN_FLAG_OFFSET_1) << 16;
    d->hdr_empty = h | (uint64_t)c << 16;
    d->hdr_raw = h | (uint64_t)(c | BIN_FLAG_HAS_RAW) << 16;
    d->q_hdr_raw = bin_q31_u64(d->hdr_raw);
    return d;
}

static int desc_same(const bin_desc *a, const bin_desc *b)
{
    if (a->nfields != b->nfields || a->raw != b->raw || strcmp(a->name, b->name))
        return 0;
    for (uint32_t i = 0; i < a->nfields; i++)
        if (a->fids[i] != b->fids[i] || a->codes[i] != b->codes[i])
            return 0;
    return 1;
}

/* desc_publish installs d unless an identical descriptor exists; *out gets
 * the one in the table. Takes ownership of d. */
static int desc_publish(bin_registry *r, bin_desc *d, const bin_desc **out)
{
    int rc = 0;
    bin_registry_wrlock(r, 1);
    struct bin_desc_tab **tp = bin_registry_desc_tab(r), *t = *tp;
    if (!t && !(t = *tp = em_calloc(1, sizeof *t))) {
        rc = EM_NOMEM;
        goto done;
    }
    if ((t->count + 1) * 2 > t->cap) {
        uint32_t nc = t->cap ? t->cap * 2 : 64;
        bin_desc **n = em_calloc(nc, sizeof *n);
        if (!n) {
            rc = EM_NOMEM;
            goto done;
        }
        for (uint32_t i = 0; i < t->cap; i++)
            if (t->slots[i])
                *desc_slot(n, nc, t->slots[i]->type_id) = t->slots[i];
        em_free(t->slots);
        t->slots = n;
        t->cap = nc;
    }
    bin_desc **slot = desc_slot(t->slots, t->cap, d->type_id);
    if (*slot && desc_same(*slot, d)) {
        em_free(d);
        d = *slot;
    } else {
        if (!*slot)
            t->count++;
        d->older = *slot;
        *slot = d;
    }
    *out = d;
    d = NULL;
done:
    bin_registry_wrlock(r, 0);
    em_free(d);
    return rc;
}

int bin_registry_define(bin_registry *r, const char *name, const char *const *fields,
                        const int32_t *codes, uint32_t n, const bin_desc **out)
{
    bin_desc *d = desc_new(name, fields, codes, n, BIN_FLAG_USER_TYPE, 0);
    if (!d)
        return EM_NOMEM;
    /* The metadata a client would PUT: the fields and the declared schema. */
    bin_field_meta fm[64], *f = n <= 64 ? fm : em_malloc((size_t)n * sizeof *f);
    if (!f) {
        em_free(d);
        return EM_NOMEM;
    }
    for (uint32_t i = 0; i < n; i++)
        f[i] = (bin_field_meta){d->names[i], d->fids[i], d->codes[i]};
    bin_schema s = {d->schema_id, n, d->fids};
    bin_type t;
    memset(&t, 0, sizeof t);
    t.type_id = d->type_id;
    t.name = d->name;
    t.nfields = n;
    t.fields = f;
    t.nschemas = n ? 1 : 0;
    t.schemas = &s;
    int rc = bin_registry_put(r, &t, NULL);
    if (f != fm)
        em_free(f);
    if (rc) {
        em_free(d);
        return rc;
    }
    return desc_publish(r, d, out);
}

int bin_predefined_init(bin_registry *r)
{
    static const char *const names[] = {"BinaryTreeMap", "BinaryTreeSet"};
    for (int i = 0; i < 2; i++) {
        /* System types: no USER_TYPE flag, raw mode, no metadata fields. */
        bin_desc *d = desc_new(names[i], NULL, NULL, 0, 0, 1);
        if (!d)
            return EM_NOMEM;
        bin_type t;
        memset(&t, 0, sizeof t);
        t.type_id = d->type_id;
        t.name = d->name;
        int rc = bin_registry_put(r, &t, NULL);
        if (rc) {
            em_free(d);
            return rc;
        }
        const bin_desc *out;
        if ((rc = desc_publish(r, d, &out)))     /* takes d either way */
            return rc;
    }
    return 0;
}

/* ---- the writer ---- */

/* sync recomputes vmode and top from the state. */
static inline __attribute__((always_inline)) void sync(bin_writer *w)
{
    bin_wframe *f = w->top = &w->fr[w->depth];
    if (w->err) {
        w->vmode = BIN_WM_SLOW;
        return;
    }
    if (!w->depth) {
        w->vmode = BIN_WM_TOP;
        return;
    }
    uint8_t k = f->kind;
    if (k >= BIN_WK_TREEMAP || (uint8_t)(k - BIN_OBJ_ARR) <= BIN_MAP - BIN_OBJ_ARR)
        w->vmode = BIN_WM_COUNT;
    else if (k != BIN_OBJ)
        w->vmode = BIN_WM_SLOW;           /* typed arrays check each element */
    else if (f->raw_pos)
        w->vmode = BIN_WM_RAW;
    else
        w->vmode = w->named ? BIN_WM_FIELD : BIN_WM_NEEDNAME;
}

void bin_writer_init(bin_writer *w, bin_registry *reg, em_buf *out)
{
    memset(w, 0, offsetof(bin_writer, fr));
    memset(&w->fr[0], 0, sizeof w->fr[0]);   /* the depth-0 sentinel */
    w->reg = reg;
    w->out = out;
    w->min_width = 1;
    sync(w);
    if (reg) {
        w->treemap = bin_registry_desc(reg, BIN_TYPE_TREEMAP_ID);
        w->treeset = bin_registry_desc(reg, BIN_TYPE_TREESET_ID);
    }
}

void bin_writer_free(bin_writer *w)
{
    em_free(w->fields);
    w->fields = NULL;
    w->capf = w->nf = 0;
    sync(w);
}

static inline int fail(bin_writer *w, int rc)
{
    if (!w->err)
        w->err = rc;
    w->vmode = BIN_WM_SLOW;
    return w->err;
}

/* Is a value of type code c allowed as the next element of frame f? */
static inline int elem_ok(uint8_t kind, uint8_t c)
{
    switch (kind) {
    case BIN_STRING_ARR:    return c == BIN_STRING || c == BIN_NULL;
    case BIN_UUID_ARR:      return c == BIN_UUID || c == BIN_NULL;
    case BIN_DATE_ARR:      return c == BIN_DATE || c == BIN_NULL;
    case BIN_DECIMAL_ARR:   return c == BIN_DECIMAL || c == BIN_NULL;
    case BIN_TIMESTAMP_ARR: return c == BIN_TIMESTAMP || c == BIN_NULL;
    case BIN_TIME_ARR:      return c == BIN_TIME || c == BIN_NULL;
    case BIN_ENUM_ARR:      return c == BIN_ENUM || c == BIN_BINARY_ENUM || c == BIN_NULL;
    default:                return 1;
    }
}

/* vstart accounts for one value of code c about to be written. */
static inline __attribute__((always_inline)) int vstart(bin_writer *w, uint8_t c)
{
    if (w->err)
        return w->err;
    if (w->depth == 0)
        return 0;
    bin_wframe *f = w->top;
    if (f->kind == BIN_OBJ) {
        if (f->raw_pos)
            return 0;                       /* raw data: unnamed values */
        if (!w->named)
            return fail(w, EM_BUILDER);     /* a field value needs a name first */
        w->named = 0;                       /* its offset was taken with the name */
        w->vmode = BIN_WM_NEEDNAME;
        return 0;
    }
    if (!elem_ok(f->kind, c))
        return fail(w, EM_BADTYPE);
    f->count++;
    return 0;
}

/* put_slow: put when the mode alone does not settle the value (an error,
 * a typed array's element check, a missing field name) or the buffer must
 * grow. */
static __attribute__((noinline)) uint8_t *put_slow(bin_writer *w, uint8_t c, size_t n)
{
    if (vstart(w, c))
        return NULL;
    if (em_buf_reserve(w->out, 1 + n)) {
        fail(w, EM_NOMEM);
        return NULL;
    }
    uint8_t *p = w->out->p + w->out->len;
    p[0] = c;
    w->out->len += 1 + n;
    return p + 1;
}

/* put reserves 1 + n bytes for a value of code c and returns the payload. */
static inline __attribute__((always_inline)) uint8_t *put(bin_writer *w, uint8_t c, size_t n)
{
    uint8_t *p = bin_w__put_fast(w, c, n);
    return p ? p : put_slow(w, c, n);
}

#define PUT_FIXED(c, n, store) do {                 \
        uint8_t *p_ = put(w, (c), (n));                \
        if (!p_)                                       \
            return w->err;                             \
        store;                                         \
        return 0;                                      \
    } while (0)

/* W_FIXED defines bin_w_NAME for a value of code c with an n-byte payload
 * that `store` writes at p_: the fast path, and a tail call of the
 * complete one otherwise. */
#define W_FIXED(name, params, args, c, n, store)                              \
    static __attribute__((noinline)) int w_##name##_slow params              \
    {                                                                         \
        uint8_t *p_ = put_slow(w, (c), (n));                                  \
        if (!p_)                                                              \
            return w->err;                                                    \
        store;                                                                \
        return 0;                                                             \
    }                                                                         \
    int bin_w_##name params                                                   \
    {                                                                         \
        uint8_t *p_ = bin_w__put_fast(w, (c), (n));                                  \
        if (__builtin_expect(!p_, 0))                                         \
            return w_##name##_slow args;                                      \
        store;                                                                \
        return 0;                                                             \
    }

W_FIXED(byte, (bin_writer *w, int8_t v), (w, v), BIN_BYTE, 1, p_[0] = (uint8_t)v)
W_FIXED(short, (bin_writer *w, int16_t v), (w, v), BIN_SHORT, 2, em_st16(p_, (uint16_t)v))
W_FIXED(int, (bin_writer *w, int32_t v), (w, v), BIN_INT, 4, em_st32(p_, (uint32_t)v))
W_FIXED(long, (bin_writer *w, int64_t v), (w, v), BIN_LONG, 8, em_st64(p_, (uint64_t)v))
W_FIXED(char, (bin_writer *w, uint16_t v), (w, v), BIN_CHAR, 2, em_st16(p_, v))
W_FIXED(bool, (bin_writer *w, int v), (w, v), BIN_BOOL, 1, p_[0] = v ? 1 : 0)
W_FIXED(date, (bin_writer *w, int64_t ms), (w, ms), BIN_DATE, 8, em_st64(p_, (uint64_t)ms))
W_FIXED(time, (bin_writer *w, int64_t ms), (w, ms), BIN_TIME, 8, em_st64(p_, (uint64_t)ms))
W_FIXED(null, (bin_writer *w), (w), BIN_NULL, 0, (void)p_)

int bin_w_float(bin_writer *w, float v)
{
    uint32_t u;
    memcpy(&u, &v, 4);
    PUT_FIXED(BIN_FLOAT, 4, em_st32(p_, u));
}

int bin_w_double(bin_writer *w, double v)
{
    uint64_t u;
    memcpy(&u, &v, 8);
    PUT_FIXED(BIN_DOUBLE, 8, em_st64(p_, u));
}

int bin_w_uuid(bin_writer *w, uint64_t msb, uint64_t lsb)
{
    PUT_FIXED(BIN_UUID, 16, (em_st64(p_, msb), em_st64(p_ + 8, lsb)));
}

int bin_w_timestamp(bin_writer *w, int64_t ms, int32_t nanos)
{
    PUT_FIXED(BIN_TIMESTAMP, 12, (em_st64(p_, (uint64_t)ms), em_st32(p_ + 8, (uint32_t)nanos)));
}

int bin_w_enum(bin_writer *w, int32_t type_id, int32_t ordinal)
{
    if (type_id == 0)
        return fail(w, EM_INVAL);
    PUT_FIXED(BIN_ENUM, 8, (em_st32(p_, (uint32_t)type_id), em_st32(p_ + 4, (uint32_t)ordinal)));
}

int bin_w_binary_enum(bin_writer *w, int32_t type_id, int32_t ordinal)
{
    if (type_id == 0)
        return fail(w, EM_INVAL);
    PUT_FIXED(BIN_BINARY_ENUM, 8, (em_st32(p_, (uint32_t)type_id), em_st32(p_ + 4, (uint32_t)ordinal)));
}

/* Short strings dominate (keys, names): copy them with overlapping word
 * moves rather than a libc call. */
static inline void small_copy(uint8_t *d, const uint8_t *s, size_t n)
{
    if (n >= 8 && n <= 16) {
        em_st64(d, em_ld64(s));
        em_st64(d + n - 8, em_ld64(s + n - 8));
    } else if (n >= 4 && n < 8) {
        em_st32(d, em_ld32(s));
        em_st32(d + n - 4, em_ld32(s + n - 4));
    } else if (n < 4) {
        for (size_t i = 0; i < n; i++)
            d[i] = s[i];
    } else {
        memcpy(d, s, n);
    }
}

static __attribute__((noinline)) int w_string_slow(bin_writer *w, const char *s, size_t len)
{
    const uint8_t *u = (const uint8_t *)s;
    if (len >= 4 && len <= 16) {
        /* the two overlapping words small_copy moves also prove ASCII */
        uint64_t a = len >= 8 ? em_ld64(u) : em_ld32(u);
        uint64_t b = len >= 8 ? em_ld64(u + len - 8) : em_ld32(u + len - 4);
        if (((a | b) & 0x8080808080808080ULL) && !bin_utf8_ok(u, len))
            return fail(w, EM_BADUTF8);
    } else if (len > 0x7FFFFFFF) {
        return fail(w, EM_TOOBIG);
    } else if (!bin_utf8_ok(u, len)) {
        return fail(w, EM_BADUTF8);
    }
    uint8_t *p = put(w, BIN_STRING, 4 + len);
    if (!p)
        return w->err;
    em_st32(p, (uint32_t)len);
    small_copy(p + 4, u, len);
    return 0;
}

int bin_w_string(bin_writer *w, const char *s, size_t len)
{
    return bin_w__string_fast(w, s, len) ? 0 : w_string_slow(w, s, len);
}

int bin_w_decimal(bin_writer *w, int32_t scale, const uint8_t *mag, uint32_t len)
{
    if (len > 0x7FFFFFF0u)
        return fail(w, EM_TOOBIG);
    uint8_t *p = put(w, BIN_DECIMAL, 8 + (size_t)len);
    if (!p)
        return w->err;
    em_st32(p, (uint32_t)scale);
    em_st32(p + 4, len);
    if (len)
        memcpy(p + 8, mag, len);
    return 0;
}

int bin_w_prim_array(bin_writer *w, uint8_t code, const void *elems, uint32_t count)
{
    int es = bin_prim_elem_size(code);
    if (!es || count > 0x7FFFFFFFu)
        return fail(w, EM_INVAL);
    size_t n = (size_t)count * (size_t)es;
    uint8_t *p = put(w, code, 4 + n);
    if (!p)
        return w->err;
    em_st32(p, count);
    if (n)
        memcpy(p + 4, elems, n);
    return 0;
}

int bin_w_value(bin_writer *w, const uint8_t *v, size_t len)
{
    if (len == 0)
        return fail(w, EM_INVAL);
    uint8_t *p = put(w, v[0], len - 1);
    if (!p)
        return w->err;
    memcpy(p, v + 1, len - 1);
    return 0;
}

static inline bin_wframe *push(bin_writer *w, uint8_t kind, size_t start)
{
    if (w->depth >= BIN_W_MAX_DEPTH) {
        fail(w, EM_DEPTH);
        return NULL;
    }
    sync(w);                               /* the parent after this value */
    uint8_t pmode = w->vmode;
    bin_wframe *f = &w->fr[++w->depth];
    f->kind = kind;
    f->start = start;
    f->count = 0;
    f->raw_pos = 0;
    f->desc = NULL;
    f->f0 = w->nf;
    f->in_order = 1;
    f->hpos = BIN_HDR_LEN;
    f->hq = 0;
    f->pmode = pmode;
    sync(w);
    return f;
}

int bin_w_begin(bin_writer *w, uint8_t code, int32_t arg)
{
    if (code == BIN_COLLECTION || code == BIN_MAP) {
        /* the common containers: a container frame needs kind, start, count */
        if (w->depth >= BIN_W_MAX_DEPTH)
            return fail(w, EM_DEPTH);
        uint8_t *p = put(w, code, 5);
        if (!p)
            return w->err;
        sync(w);
        uint8_t pmode = w->vmode;
        bin_wframe *f = &w->fr[++w->depth];
        f->kind = code;
        f->start = (size_t)(p - w->out->p);
        f->count = 0;
        f->pmode = pmode;
        p[4] = (uint8_t)arg;
        sync(w);
        return 0;
    }
    size_t n;
    switch (code) {
    case BIN_COLLECTION: case BIN_MAP: n = 5; break;
    case BIN_OBJ_ARR: case BIN_ENUM_ARR: n = 8; break;
    case BIN_STRING_ARR: case BIN_UUID_ARR: case BIN_DATE_ARR: case BIN_DECIMAL_ARR:
    case BIN_TIMESTAMP_ARR: case BIN_TIME_ARR: n = 4; break;
    default: return fail(w, EM_INVAL);
    }
    if ((code == BIN_OBJ_ARR || code == BIN_ENUM_ARR) && arg == 0)
        return fail(w, EM_INVAL);           /* 0 would mean "class name follows" */
    uint8_t *p = put(w, code, n);
    if (!p)
        return w->err;
    size_t cpos;
    if (code == BIN_OBJ_ARR || code == BIN_ENUM_ARR) {
        em_st32(p, (uint32_t)arg);
        cpos = (size_t)(p + 4 - w->out->p);
    } else {
        cpos = (size_t)(p - w->out->p);
        if (n == 5)
            p[4] = (uint8_t)arg;
    }
    return push(w, code, cpos) ? 0 : w->err;
}

int bin_w_end(bin_writer *w)
{
    if (w->err)
        return w->err;
    if (w->depth == 0)
        return fail(w, EM_BUILDER);
    bin_wframe *f = w->top;
    if (f->kind == BIN_OBJ || f->kind == KIND_TREEMAP || f->kind == KIND_TREESET)
        return fail(w, EM_BUILDER);
    uint32_t c = f->count;
    if (f->kind == BIN_MAP) {
        if (c & 1)
            return fail(w, EM_BUILDER);     /* a key without its value */
        c /= 2;
    }
    em_st32(w->out->p + f->start, c);
    w->depth--;
    sync(w);
    return 0;
}

int bin_w_obj_begin(bin_writer *w, const bin_desc *d)
{
    if (!d)
        return fail(w, EM_INVAL);
    uint8_t *p = put(w, BIN_OBJ, BIN_HDR_LEN - 1);
    if (!p)
        return w->err;
    bin_wframe *f = push(w, BIN_OBJ, (size_t)(p - 1 - w->out->p));
    if (!f)
        return w->err;
    f->desc = d;
    return 0;
}

int bin_w_field(bin_writer *w, int32_t fid)
{
    if (w->err)
        return w->err;
    if (w->depth == 0)
        return fail(w, EM_BUILDER);
    bin_wframe *f = w->top;
    if (f->kind != BIN_OBJ || f->raw_pos || w->named)
        return fail(w, EM_BUILDER);
    if (w->nf == w->capf) {
        uint32_t nc = w->capf ? w->capf * 2 : 32;
        bin_wfield *n = em_realloc(w->fields, (size_t)nc * sizeof *n);
        if (!n)
            return fail(w, EM_NOMEM);
        w->fields = n;
        w->capf = nc;
    }
    uint32_t idx = w->nf - f->f0;
    if (f->in_order && (idx >= f->desc->nfields || f->desc->fids[idx] != fid))
        f->in_order = 0;
    /* the value is the next thing appended: it starts here */
    w->fields[w->nf++] = (bin_wfield){fid, (uint32_t)(w->out->len - f->start)};
    w->named = 1;
    sync(w);
    return 0;
}

int bin_w_field_idx(bin_writer *w, uint32_t idx)
{
    if (w->err)
        return w->err;
    if (w->depth == 0 || w->top->kind != BIN_OBJ)
        return fail(w, EM_BUILDER);
    const bin_desc *d = w->top->desc;
    if (idx >= d->nfields)
        return fail(w, EM_NOFIELD);
    return bin_w_field(w, d->fids[idx]);
}

int bin_w_raw(bin_writer *w)
{
    if (w->err)
        return w->err;
    if (w->depth == 0)
        return fail(w, EM_BUILDER);
    bin_wframe *f = w->top;
    if (f->kind != BIN_OBJ || w->named)
        return fail(w, EM_BUILDER);
    if (!f->raw_pos)
        f->raw_pos = (uint32_t)(w->out->len - f->start);
    sync(w);
    return 0;
}

int bin_w_raw_int(bin_writer *w, int32_t v)
{
    if (w->err)
        return w->err;
    if (w->depth == 0 || !w->top->raw_pos)
        return fail(w, EM_BUILDER);
    return em_buf_put_le32(w->out, (uint32_t)v) ? fail(w, EM_NOMEM) : 0;
}

/* ensure_schema registers a field order not declared with the type (the
 * first time it is seen), so a compact footer can be decoded.  Returns 1 if
 * the registry knows the schema afterwards. */
static int ensure_schema(bin_writer *w, const bin_desc *d, int32_t sid, uint32_t f0, uint32_t n)
{
    if (!w->reg)
        return 0;
    const bin_type *t = bin_registry_get(w->reg, d->type_id);
    if (t && bin_type_schema(t, sid))
        return 1;
    int32_t ids[64], *fids = n <= 64 ? ids : em_malloc((size_t)n * 4);
    if (!fids)
        return 0;
    for (uint32_t i = 0; i < n; i++)
        fids[i] = w->fields[f0 + i].fid;
    bin_schema s = {sid, n, fids};
    bin_type nt;
    memset(&nt, 0, sizeof nt);
    nt.type_id = d->type_id;
    nt.name = d->name;
    nt.nschemas = 1;
    nt.schemas = &s;
    int rc = bin_registry_put(w->reg, &nt, NULL);
    if (fids != ids)
        em_free(fids);
    return rc == 0;
}

/* write_footer stores nfl entries; one loop per layout so the width test
 * is not repeated per field. Returns the end of what it wrote. */
static uint8_t *write_footer(uint8_t *q, const bin_wfield *fl, uint32_t nfl, int compact,
                             uint8_t width)
{
    if (compact) {
        switch (width) {
        case 1: for (uint32_t i = 0; i < nfl; i++) *q++ = (uint8_t)fl[i].off; break;
        case 2: for (uint32_t i = 0; i < nfl; i++, q += 2) em_st16(q, (uint16_t)fl[i].off); break;
        default: for (uint32_t i = 0; i < nfl; i++, q += 4) em_st32(q, fl[i].off); break;
        }
        return q;
    }
    for (uint32_t i = 0; i < nfl; i++) {
        em_st32(q, (uint32_t)fl[i].fid);
        q += 4;
        if (width == 1) *q = (uint8_t)fl[i].off;
        else if (width == 2) em_st16(q, (uint16_t)fl[i].off);
        else em_st32(q, fl[i].off);
        q += width;
    }
    return q;
}

/* the general end of an object (bin_wc_obj_end in wcursor.h inlines the
 * common case) */
int bin_w_obj_end(bin_writer *w)
{
    if (w->err)
        return w->err;
    if (w->depth == 0)
        return fail(w, EM_BUILDER);
    /* Everything is read into locals first: the byte stores below alias
     * all memory, and would otherwise force the compiler to reload it. */
    bin_wframe *f = w->top;
    const uint32_t f0 = f->f0, nfl = w->nf - f0;
    const uint32_t raw_pos = f->raw_pos, hpos0 = f->hpos, hq0 = f->hq;
    const int in_order = f->in_order;
    const bin_desc *d = f->desc;
    const size_t start = f->start;
    em_buf *out = w->out;
    if (f->kind != BIN_OBJ)
        return fail(w, EM_BUILDER);
    const bin_wfield *fl = w->fields + f0;
    if (w->named)
        return fail(w, EM_BUILDER);         /* a named field without a value */
    const uint32_t end = (uint32_t)(out->len - start);
    uint16_t flags = d->flags;
    uint32_t soff = 0;
    int32_t sid = 0;
    if (nfl) {
        uint32_t last = fl[nfl - 1].off;
        uint8_t width = (last < 0x100 && w->min_width <= 1) ? 1
                      : (last < 0x10000 && w->min_width <= 2) ? 2 : 4;
        int declared = in_order && nfl == d->nfields;
        if (declared) {
            sid = d->schema_id;
        } else {
            uint32_t s = 0x811C9DC5u;
            for (uint32_t i = 0; i < nfl; i++) {
                uint32_t v = (uint32_t)fl[i].fid;
                s = (s ^ (v & 0xFF)) * 0x01000193u;
                s = (s ^ ((v >> 8) & 0xFF)) * 0x01000193u;
                s = (s ^ ((v >> 16) & 0xFF)) * 0x01000193u;
                s = (s ^ (v >> 24)) * 0x01000193u;
            }
            sid = (int32_t)s;
        }
        int compact = !w->full_footer &&
                      ((declared && w->reg) || ensure_schema(w, d, sid, f0, nfl));
        size_t fsz = (size_t)nfl * (width + (compact ? 0 : 4)) + (raw_pos ? 4 : 0);
        if (em_buf_reserve(out, fsz))
            return fail(w, EM_NOMEM);
        uint8_t *q = write_footer(out->p + out->len, fl, nfl, compact, width);
        if (raw_pos) {
            em_st32(q, raw_pos);
            flags |= BIN_FLAG_HAS_RAW;
        }
        out->len += fsz;
        soff = end;
        flags |= BIN_FLAG_HAS_SCHEMA | (compact ? BIN_FLAG_COMPACT : 0) |
                 (width == 1 ? BIN_FLAG_OFFSET_1 : width == 2 ? BIN_FLAG_OFFSET_2 : 0);
    } else {
        if (raw_pos) {
            soff = raw_pos;
            flags |= BIN_FLAG_HAS_RAW;
        }
        if (!w->full_footer)
            flags |= BIN_FLAG_COMPACT;     /* as Java writes an empty schema */
    }
    const uint32_t hend = end;             /* region = [24, footer start or end) */
    uint8_t *o = out->p + start;
    const uint32_t total = (uint32_t)(out->len - start);
    /* Region hash: nested objects were folded into hq when they ended, so
     * only the bytes after the last of them are hashed now. */
    uint32_t hash, q;
    if (hpos0 == BIN_HDR_LEN) {
        hash = (uint32_t)bin_hash31_after(o + BIN_HDR_LEN, hend - BIN_HDR_LEN);
        q = hash - bin_pow31(hend - BIN_HDR_LEN);
    } else {
        q = hq0 * bin_pow31(hend - hpos0) + bin_q31_after(o + hpos0, hend - hpos0);
        hash = bin_pow31(hend - BIN_HDR_LEN) + q;
    }
    const int32_t tid = d->type_id;
    w->nf = f0;
    unsigned depth = --w->depth;
    o[1] = 1;
    em_st16(o + 2, flags);
    em_st32(o + 4, (uint32_t)tid);
    em_st32(o + 8, hash);
    em_st32(o + 12, total);
    em_st32(o + 16, (uint32_t)sid);
    em_st32(o + 20, soff);
    /* Fold a large object's bytes into its parent's sum, so its region is
     * not hashed twice (Java's hash covers nested bytes); rehashing a small
     * one is cheaper than folding it (FOLD_MIN).  Only into the parent
     * itself: a container between the two still has its count to patch,
     * and the bytes folded now would miss it.  A tree type's size is zero
     * while folded and added by bin_w_tree_end. */
    bin_wframe *e = &w->fr[depth];
    if (total > FOLD_MIN && depth > 0 &&
        (e->kind == BIN_OBJ || e->kind == KIND_TREEMAP || e->kind == KIND_TREESET)) {
        const uint8_t *eo = out->p + e->start;
        uint32_t xs = (uint32_t)(start - e->start), ehpos = e->hpos;
        uint32_t qx = bin_q31_after(o, BIN_HDR_LEN) * bin_pow31(total - BIN_HDR_LEN)
                    + q * bin_pow31(total - hend) + bin_q31_after(o + hend, total - hend);
        uint32_t eq = e->hq * bin_pow31(xs - ehpos) + bin_q31_after(eo + ehpos, xs - ehpos);
        e->hq = eq * bin_pow31(total) + qx;
        e->hpos = xs + total;
    }
    sync(w);
    return 0;
}

static int tree_begin(bin_writer *w, int32_t tid, uint8_t kind)
{
    if (w->err)
        return w->err;
    const bin_desc *d = tid == BIN_TYPE_TREEMAP_ID ? w->treemap : w->treeset;
    if (!d)
        return fail(w, EM_INVAL);
    int rc = bin_w_obj_begin(w, d);
    if (rc)
        return rc;
    bin_wframe *f = w->top;
    f->raw_pos = BIN_HDR_LEN;
    /* null comparator, then the size (patched at the end) */
    if (em_buf_reserve(w->out, 5))
        return fail(w, EM_NOMEM);
    /* the size stays zero until the end: hashes folded meanwhile see 0 */
    w->out->p[w->out->len] = BIN_NULL;
    em_st32(w->out->p + w->out->len + 1, 0);
    w->out->len += 5;
    f->kind = kind;
    sync(w);
    return 0;
}

int bin_w_treemap_begin(bin_writer *w) { return tree_begin(w, BIN_TYPE_TREEMAP_ID, KIND_TREEMAP); }
int bin_w_treeset_begin(bin_writer *w) { return tree_begin(w, BIN_TYPE_TREESET_ID, KIND_TREESET); }

int bin_w_tree_end(bin_writer *w)
{
    if (w->err)
        return w->err;
    if (w->depth == 0)
        return fail(w, EM_BUILDER);
    bin_wframe *f = w->top;
    if (f->kind != KIND_TREEMAP && f->kind != KIND_TREESET)
        return fail(w, EM_BUILDER);
    uint32_t c = f->count;
    if (f->kind == KIND_TREEMAP) {
        if (c & 1)
            return fail(w, EM_BUILDER);
        c /= 2;
    }
    em_st32(w->out->p + f->start + BIN_HDR_LEN + 1, c);
    if (f->hpos > BIN_HDR_LEN)             /* folded into hq while it was 0 */
        f->hq += bin_q31_tcount(c, f->hpos);
    f->kind = BIN_OBJ;
    return bin_w_obj_end(w);
}
