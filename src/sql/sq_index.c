/* sq_index.c - secondary indexes (CREATE INDEX, QueryEntity indexes): an
 * ordered set of items per index, kept in step with the cache by the
 * store's entry-change hook, read by the virtual table for equality and
 * range constraints and for ORDER BY.
 *
 * Item: the indexed columns' values in an order-preserving byte encoding,
 * then the entry's key bytes (so items are unique and memcmp orders them
 * as SQLite orders the values: NULL < numbers < text < blobs, text and
 * blobs by bytes, as the BINARY collation does).  A column's value is the
 * one the virtual table's xColumn hands SQLite (sq_val_get), so the index
 * and a scan can never disagree about a row.
 *
 *   NULL     0x05
 *   number   0x10, the value as a double (sign-flipped big-endian bits, so
 *            memcmp orders them), then as an int64 (clamped; sign bit
 *            flipped): the second part orders integers a double cannot
 *            tell apart, and equal values encode equally whatever their
 *            storage class (SQLite compares 3 and 3.0 equal)
 *   text     0x20, bytes with 0x00 as 00 01, then 00 00
 *   blob     0x30, the same
 *
 * The structure is a skip list under one read-write lock per cache (the
 * ixset): writes to an indexed cache take it exclusively from inside the
 * partition lock (lock order: partition, then ixset); readers copy a batch
 * of items under the shared lock, release it, and only then read the
 * entries from the store, so a reader never holds the ixset while it
 * waits for a partition.  Our own structure rather than a native SQLite
 * table: SQLite connections are per thread, and the hook runs on whichever
 * thread writes, inside the store's lock.
 *
 * A row read through an index is checked against its item (the entry may
 * have changed after the item was copied): a row whose current item
 * differs is skipped, it is found (or was) at its new position.  So rows
 * come out in index order, and SQLite can take the order as given.
 */
#include "sql/sql_int.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "util/err.h"
#include "util/mem.h"

#define IX_MAX_LEVEL 24

typedef struct ixnode {
    uint32_t len;               /* item bytes */
    uint32_t plen;              /* of which the column prefix */
    uint32_t h;                 /* levels */
    struct ixnode *next[];      /* h pointers, then the item bytes */
} ixnode;

static inline uint8_t *node_item(ixnode *n) { return (uint8_t *)&n->next[n->h]; }

struct sq_ixset {
    pthread_rwlock_t lock;
    st_cache     *cache;
    bin_registry *reg;
    sq_index    **ix;
    uint32_t      n, cap;
    em_buf        a, b;         /* encoding scratch (write lock) */
    sq_tycache    tc;
    uint64_t      rng;
    /* One per index that points here (dropped at the index's last unref)
     * and one while the set is on the engine's list (while it keeps an
     * index): readers reach a set through an index they hold. */
    _Atomic int   refs;
    sq_ixset     *next;         /* the engine's list */
};

static void set_unref(sq_ixset *s);

void sq_ix_ref(sq_index *ix) { atomic_fetch_add(&ix->refs, 1); }

static void nodes_free(sq_index *ix)
{
    ixnode *n = ix->head->next[0];
    while (n) {
        ixnode *nx = n->next[0];
        em_free(n);
        n = nx;
    }
    for (uint32_t i = 0; i < IX_MAX_LEVEL; i++)
        ix->head->next[i] = NULL;
    atomic_store_explicit(&ix->count, 0, memory_order_relaxed);
}

void sq_ix_unref(sq_index *ix)
{
    if (!ix || atomic_fetch_sub(&ix->refs, 1) != 1)
        return;
    if (ix->head)
        nodes_free(ix);
    if (ix->set)
        set_unref(ix->set);
    em_free(ix->head);
    em_free(ix->cols);
    em_free(ix->schema);
    em_free(ix->name);
    em_free(ix);
}

/* ---- encoding ----------------------------------------------------------- */

static int put_be64(em_buf *o, uint64_t v)
{
    uint8_t b[8];
    for (int i = 0; i < 8; i++)
        b[i] = (uint8_t)(v >> (56 - 8 * i));
    return em_buf_append(o, b, 8);
}

static int enc_num(em_buf *o, double d, int64_t i)
{
    if (d == 0)
        d = 0;                  /* -0.0 equals 0.0 */
    uint64_t bits;
    memcpy(&bits, &d, 8);
    bits = (bits >> 63) ? ~bits : bits | (1ull << 63);
    uint8_t tag = 0x10;
    if (em_buf_append(o, &tag, 1) || put_be64(o, bits))
        return EM_NOMEM;
    return put_be64(o, (uint64_t)i ^ (1ull << 63));
}

static int enc_bytes(em_buf *o, uint8_t tag, const uint8_t *p, size_t n)
{
    if (em_buf_append(o, &tag, 1))
        return EM_NOMEM;
    for (size_t i = 0; i < n;) {
        const uint8_t *z = memchr(p + i, 0, n - i);
        size_t run = z ? (size_t)(z - (p + i)) : n - i;
        if (em_buf_append(o, p + i, run))
            return EM_NOMEM;
        i += run;
        if (z) {
            static const uint8_t esc[2] = {0, 1};
            if (em_buf_append(o, esc, 2))
                return EM_NOMEM;
            i++;
        }
    }
    static const uint8_t end[2] = {0, 0};
    return em_buf_append(o, end, 2);
}

static int64_t clamp64(double d)
{
    if (d >= 9223372036854775807.0)
        return INT64_MAX;
    if (d <= -9223372036854775808.0)
        return INT64_MIN;
    return (int64_t)d;
}

int sq_ix_enc_sv(em_buf *o, const sq_sv *v)
{
    switch (v->type) {
    case SQLITE_INTEGER: return enc_num(o, (double)v->i, v->i);
    case SQLITE_FLOAT:   return enc_num(o, v->d, clamp64(v->d));
    case SQLITE_TEXT:    return enc_bytes(o, 0x20, v->p, v->n);
    case SQLITE_BLOB:    return enc_bytes(o, 0x30, v->p, v->n);
    default: {
        uint8_t tag = 0x05;
        return em_buf_append(o, &tag, 1);
    }
    }
}

/* col_sv: the value xColumn gives column c of entry (k, v resolved). */
static void col_sv(const sq_index *ix, bin_registry *reg, sq_tycache *tc, const sq_ixcol *c,
                   const uint8_t *k, uint32_t kl, const uint8_t *v, sq_sv *out)
{
    const uint8_t *f;
    switch (c->kind) {
    case SQ_IXC_KEY:
        if (ix->key_raw) {
            out->type = SQLITE_BLOB;
            out->p = k;
            out->n = kl;
        } else {
            sq_val_get(bin_rd_resolve(k), c->type, out);
        }
        return;
    case SQ_IXC_VALOBJ:
        out->type = SQLITE_BLOB;
        out->p = v;
        out->n = bin_rd_len(v);
        return;
    case SQ_IXC_VAL:
        sq_val_get(v, c->type, out);
        return;
    default:
        f = sq_field(reg, &tc->ty[c->kind == SQ_IXC_KFIELD ? 0 : 1],
                     &tc->tid[c->kind == SQ_IXC_KFIELD ? 0 : 1],
                     c->kind == SQ_IXC_KFIELD ? bin_rd_resolve(k) : v, c->fid);
        if (f)
            sq_val_get(f, c->type, out);
        else
            out->type = SQLITE_NULL;
        return;
    }
}

int sq_ix_item(const sq_index *ix, bin_registry *reg, sq_tycache *tc, const uint8_t *k,
               uint32_t kl, const uint8_t *raw_v, em_buf *out, uint32_t *plen)
{
    const uint8_t *v = bin_rd_resolve(raw_v);
    em_buf_reset(out);
    if (!sq_belongs(ix->val_sqtype, ix->val_tid, v))
        return 0;
    for (uint32_t i = 0; i < ix->ncols; i++) {
        sq_sv sv;
        col_sv(ix, reg, tc, &ix->cols[i], k, kl, v, &sv);
        if (sq_ix_enc_sv(out, &sv))
            return EM_NOMEM;
    }
    *plen = (uint32_t)out->len;
    return em_buf_append(out, k, kl) ? EM_NOMEM : 1;
}

/* ---- skip list ---------------------------------------------------------- */

static int cmp(const uint8_t *a, size_t al, const uint8_t *b, size_t bl)
{
    int c = memcmp(a, b, al < bl ? al : bl);
    return c ? c : (al > bl) - (al < bl);
}

/* find fills up[] with the last node before key at each level; returns the
 * first node >= key (or > key with after). */
static ixnode *find(sq_index *ix, const uint8_t *key, size_t kl, int after, ixnode **up)
{
    ixnode *x = ix->head;
    for (int lv = IX_MAX_LEVEL - 1; lv >= 0; lv--) {
        for (ixnode *n = x->next[lv]; n; n = x->next[lv]) {
            int c = cmp(node_item(n), n->len, key, kl);
            if (c < 0 || (after && c == 0))
                x = n;
            else
                break;
        }
        if (up)
            up[lv] = x;
    }
    return x->next[0];
}

static int sl_insert(sq_ixset *s, sq_index *ix, const uint8_t *item, uint32_t len, uint32_t plen)
{
    ixnode *up[IX_MAX_LEVEL];
    ixnode *at = find(ix, item, len, 0, up);
    if (at && at->len == len && !memcmp(node_item(at), item, len))
        return 0;
    /* Levels with p = 1/4 (xorshift; under the write lock). */
    s->rng ^= s->rng << 13;
    s->rng ^= s->rng >> 7;
    s->rng ^= s->rng << 17;
    uint64_t r = s->rng;
    uint32_t h = 1;
    while (h < IX_MAX_LEVEL && (r & 3) == 0) {
        h++;
        r >>= 2;
    }
    ixnode *n = em_malloc(sizeof *n + h * sizeof n->next[0] + len);
    if (!n)
        return EM_NOMEM;
    n->len = len;
    n->plen = plen;
    n->h = h;
    memcpy(node_item(n), item, len);
    for (uint32_t lv = 0; lv < h; lv++) {
        n->next[lv] = up[lv]->next[lv];
        up[lv]->next[lv] = n;
    }
    atomic_fetch_add_explicit(&ix->count, 1, memory_order_relaxed);
    return 0;
}

static void sl_remove(sq_index *ix, const uint8_t *item, uint32_t len)
{
    ixnode *up[IX_MAX_LEVEL];
    ixnode *at = find(ix, item, len, 0, up);
    if (!at || at->len != len || memcmp(node_item(at), item, len))
        return;
    for (uint32_t lv = 0; lv < at->h; lv++)
        if (up[lv]->next[lv] == at)
            up[lv]->next[lv] = at->next[lv];
    atomic_fetch_sub_explicit(&ix->count, 1, memory_order_relaxed);
    em_free(at);
}

/* ---- maintenance ---------------------------------------------------------- */

/* change moves entry k's item in ix from old value ov to nv (write lock). */
static void change(sq_ixset *s, sq_index *ix, const uint8_t *k, uint32_t kl, const uint8_t *ov,
                   const uint8_t *nv)
{
    uint32_t pa = 0, pb = 0;
    int ha = ov ? sq_ix_item(ix, s->reg, &s->tc, k, kl, ov, &s->a, &pa) : 0;
    int hb = nv ? sq_ix_item(ix, s->reg, &s->tc, k, kl, nv, &s->b, &pb) : 0;
    if (ha < 0 || hb < 0) {
        atomic_store(&ix->broken, 1);   /* out of memory: never read again */
        return;
    }
    if (ha && hb && s->a.len == s->b.len && !memcmp(s->a.p, s->b.p, s->a.len))
        return;
    if (ha)
        sl_remove(ix, s->a.p, (uint32_t)s->a.len);
    if (hb && sl_insert(s, ix, s->b.p, (uint32_t)s->b.len, pb))
        atomic_store(&ix->broken, 1);
}

static void hook(void *arg, const uint8_t *k, uint32_t kl, const uint8_t *ov, uint32_t ol,
                 const uint8_t *nv, uint32_t nl)
{
    (void)ol;
    (void)nl;
    sq_ixset *s = arg;
    pthread_rwlock_wrlock(&s->lock);
    for (uint32_t i = 0; i < s->n; i++)
        if (!atomic_load_explicit(&s->ix[i]->broken, memory_order_relaxed))
            change(s, s->ix[i], k, kl, ov, nv);
    pthread_rwlock_unlock(&s->lock);
}

typedef struct build { sq_ixset *s; sq_index *ix; } build;

static int build_one(void *arg, const uint8_t *k, size_t kl, const uint8_t *v, size_t vl)
{
    (void)vl;
    build *b = arg;
    pthread_rwlock_wrlock(&b->s->lock);
    change(b->s, b->ix, k, (uint32_t)kl, NULL, v);
    pthread_rwlock_unlock(&b->s->lock);
    return atomic_load(&b->ix->broken) ? EM_NOMEM : 0;
}

static void set_unref(sq_ixset *s);

/* unlist takes an empty set off the engine's list (its hook is gone). */
static void unlist(sq_engine *e, sq_ixset *s)
{
    for (sq_ixset **pp = &e->ixsets; *pp; pp = &(*pp)->next)
        if (*pp == s) {
            *pp = s->next;
            break;
        }
    set_unref(s);
}

static sq_ixset *set_of(sq_engine *e, st_cache *c)
{
    for (sq_ixset *s = e->ixsets; s; s = s->next)
        if (s->cache == c)
            return s;
    return NULL;
}

static void set_unref(sq_ixset *s)
{
    if (atomic_fetch_sub(&s->refs, 1) != 1)
        return;
    em_buf_free(&s->a);
    em_buf_free(&s->b);
    em_free(s->ix);
    pthread_rwlock_destroy(&s->lock);
    em_free(s);
}

int sq_ix_attach(sq_engine *e, st_cache *c, sq_index *ix)
{
    sq_ixset *s = set_of(e, c);
    if (!s) {
        if (!(s = em_calloc(1, sizeof *s)))
            return EM_NOMEM;
        pthread_rwlock_init(&s->lock, NULL);
        atomic_store(&s->refs, 1);                  /* the list's */
        s->cache = c;
        s->reg = e->reg;
        s->rng = 0x9e3779b97f4a7c15ull ^ (uint64_t)(uintptr_t)s;
        s->next = e->ixsets;
        e->ixsets = s;
    }
    pthread_rwlock_wrlock(&s->lock);
    int rc = 0, fresh = s->n == 0;
    if (s->n == s->cap) {
        uint32_t nc = s->cap ? s->cap * 2 : 4;
        sq_index **np = em_realloc(s->ix, nc * sizeof *np);
        if (np) {
            s->ix = np;
            s->cap = nc;
        } else {
            rc = EM_NOMEM;
        }
    }
    if (!rc) {
        s->ix[s->n++] = ix;
        sq_ix_ref(ix);
        ix->set = s;
        atomic_fetch_add(&s->refs, 1);
    }
    pthread_rwlock_unlock(&s->lock);
    if (rc) {
        if (fresh)
            unlist(e, s);
        return rc;
    }
    /* The hook first, then the fill: a write after the hook is in maintains
     * the index itself, and the fill sees each partition under its lock. */
    if (fresh)
        st_cache_set_hook(c, hook, s);
    build b = {s, ix};
    rc = st_cache_each_locked(c, build_one, &b);
    if (rc) {
        sq_ix_detach(e, ix);
        return rc;
    }
    atomic_store(&ix->ready, 1);
    return 0;
}

void sq_ix_detach(sq_engine *e, sq_index *ix)
{
    sq_ixset *s = ix->set;
    if (!s || atomic_load(&ix->dead))
        return;
    pthread_rwlock_wrlock(&s->lock);
    for (uint32_t i = 0; i < s->n; i++)
        if (s->ix[i] == ix) {
            s->ix[i] = s->ix[--s->n];
            break;
        }
    atomic_store(&ix->dead, 1);
    atomic_store(&ix->ready, 0);
    nodes_free(ix);
    uint32_t left = s->n;
    pthread_rwlock_unlock(&s->lock);
    if (!left) {
        st_cache_set_hook(s->cache, NULL, NULL);     /* waits out running hooks */
        unlist(e, s);
    }
    sq_ix_unref(ix);
}

void sq_ix_free_all(sq_engine *e)
{
    while (e->ixsets) {
        sq_ixset *s = e->ixsets;
        if (s->n)
            sq_ix_detach(e, s->ix[0]);      /* the last one unlists s */
        else
            unlist(e, s);
    }
}

/* ---- reading -------------------------------------------------------------- */

int sq_ix_new(const sq_table *t, const char *name, const char *const *cols, uint32_t ncols,
              sq_index **out)
{
    sq_index *ix = em_calloc(1, sizeof *ix);
    if (!ix)
        return EM_NOMEM;
    atomic_store(&ix->refs, 1);
    ix->schema = em_strndup(t->schema, strlen(t->schema));
    ix->name = em_strndup(name, strlen(name));
    ix->cols = em_calloc(ncols ? ncols : 1, sizeof *ix->cols);
    ix->head = em_calloc(1, sizeof *ix->head + IX_MAX_LEVEL * sizeof ix->head->next[0]);
    if (!ix->schema || !ix->name || !ix->cols || !ix->head) {
        sq_ix_unref(ix);
        return EM_NOMEM;
    }
    ix->head->h = IX_MAX_LEVEL;
    ix->ncols = ncols;
    ix->val_sqtype = t->val_sqtype;
    ix->val_tid = t->val_tid;
    ix->key_raw = t->key_wrapped || t->key_sqtype == SQ_T_OBJECT;
    for (uint32_t i = 0; i < ncols; i++) {
        sq_ixcol *c = &ix->cols[i];
        c->col = -1;
        snprintf(c->name, sizeof c->name, "%s", cols[i]);
        if (!strcmp(cols[i], "_KEY")) {
            c->kind = SQ_IXC_KEY;
            c->type = ix->key_raw ? SQ_T_OBJECT : t->key_sqtype;
            continue;
        }
        if (!strcmp(cols[i], "_VAL")) {
            c->kind = t->val_sqtype ? SQ_IXC_VAL : SQ_IXC_VALOBJ;
            c->type = t->val_sqtype ? t->val_sqtype : SQ_T_OBJECT;
            continue;
        }
        for (uint32_t j = 0; j < t->ncols; j++)
            if (!strcmp(t->cols[j].name, cols[i]))
                c->col = (int)j;
        if (c->col < 0) {
            sq_ix_unref(ix);
            return EM_NOTFOUND;
        }
        const sq_col *tc = &t->cols[c->col];
        c->type = tc->type;
        c->fid = tc->fid;
        c->kind = tc->alias == SQ_ALIAS_KEY ? SQ_IXC_KEY
                : tc->alias == SQ_ALIAS_VAL ? SQ_IXC_VAL
                : tc->key ? SQ_IXC_KFIELD : SQ_IXC_VFIELD;
        if (c->kind == SQ_IXC_KEY && ix->key_raw)
            c->type = SQ_T_OBJECT;
    }
    *out = ix;
    return 0;
}

/* Column affinity (sq_type_decl): which storage class a bound must have to
 * compare as SQLite compares it with the column. */
static int affinity(int t)
{
    switch (t) {
    case SQ_T_STRING: case SQ_T_UUID: case SQ_T_DATE: case SQ_T_TIME: case SQ_T_TIMESTAMP:
        return SQLITE_TEXT;
    case SQ_T_BINARY: case SQ_T_OBJECT:
        return SQLITE_BLOB;     /* no affinity: compared as it comes */
    default:
        return SQLITE_INTEGER;  /* numeric */
    }
}

int sq_ix_col_text(const sq_index *ix, uint32_t col)
{
    return affinity(ix->cols[col].type) == SQLITE_TEXT;
}

/* The bound is the value SQLite compares the column with: numeric affinity
 * turns a numeric-looking text into a number for a numeric column, text
 * affinity a number into text for a text column; then the item encoding of
 * whatever class results orders exactly as SQLite's comparison (NULL <
 * numbers < text < blobs).  One case stays open: a text column compared
 * with an operand of numeric affinity (another table's INT column, a CAST)
 * is compared as numbers ('05' = 5), and xFilter cannot tell that operand
 * from a plain literal 5 (compared as text '5'): a numeric bound on a text
 * column bounds nothing. */
int sq_ix_enc_bound(const sq_index *ix, uint32_t col, sqlite3_value *v, em_buf *out)
{
    int aff = affinity(ix->cols[col].type), ty = sqlite3_value_type(v);
    if (aff == SQLITE_TEXT && (ty == SQLITE_INTEGER || ty == SQLITE_FLOAT))
        return 1;
    sqlite3_value *d = sqlite3_value_dup(v);
    if (!d)
        return EM_NOMEM;
    if (aff == SQLITE_INTEGER && ty == SQLITE_TEXT)
        ty = sqlite3_value_numeric_type(d);
    sq_sv sv = {.type = ty};
    if (ty == SQLITE_INTEGER || ty == SQLITE_FLOAT) {
        sv.i = sqlite3_value_int64(d);
        sv.d = sqlite3_value_double(d);
        if (ty == SQLITE_FLOAT && isnan(sv.d))
            sv.type = SQLITE_NULL;
    } else if (ty == SQLITE_TEXT || ty == SQLITE_BLOB) {
        sv.p = ty == SQLITE_TEXT ? (const void *)sqlite3_value_text(d) : sqlite3_value_blob(d);
        sv.n = (size_t)sqlite3_value_bytes(d);
    }
    int rc = (sv.type == SQLITE_TEXT && !sv.p) || sq_ix_enc_sv(out, &sv) ? EM_NOMEM : 0;
    sqlite3_value_free(d);
    return rc;
}

/* past_hi: item is beyond the upper bound hi (a prefix of encoded values). */
static int past_hi(const uint8_t *it, size_t il, const sq_ixrange *r)
{
    if (!r->has_hi)
        return 0;
    size_t n = il < r->hi.len ? il : r->hi.len;
    int c = memcmp(it, r->hi.p, n);
    if (c == 0 && il >= r->hi.len)
        return !r->hi_incl;     /* starts with hi */
    return c > 0;
}

int sq_ix_page(sq_index *ix, sq_ixrange *r, uint32_t max, em_buf *items, int *more)
{
    *more = 0;
    em_buf_reset(items);
    sq_ixset *s = ix->set;
    if (!s || !atomic_load(&ix->ready))
        return EM_NOTFOUND;
    pthread_rwlock_rdlock(&s->lock);
    int gone = atomic_load(&ix->dead) ? EM_NOTFOUND : atomic_load(&ix->broken) ? EM_NOMEM : 0;
    if (gone) {
        pthread_rwlock_unlock(&s->lock);
        return gone;
    }
    ixnode *n;
    if (r->started)
        n = find(ix, r->last.p, r->last.len, 1, NULL);
    else if (r->has_lo)
        n = find(ix, r->lo.p, r->lo.len, 0, NULL);
    else
        n = ix->head->next[0];
    int rc = 0;
    uint32_t got = 0;
    for (; n; n = n->next[0]) {
        const uint8_t *it = node_item(n);
        if (!r->started && r->has_lo && !r->lo_incl && n->len >= r->lo.len &&
            !memcmp(it, r->lo.p, r->lo.len))
            continue;           /* > lo: skip the items equal to it */
        if (past_hi(it, n->len, r))
            break;
        if (got == max) {
            *more = 1;
            break;
        }
        if (em_buf_put_le32(items, n->len) || em_buf_put_le32(items, n->plen) ||
            em_buf_append(items, it, n->len)) {
            rc = EM_NOMEM;
            break;
        }
        got++;
    }
    /* Remember the last item copied: the next page starts after it. */
    if (!rc && got) {
        const uint8_t *p = items->p, *lastp = NULL;
        uint32_t lastl = 0;
        while (p < items->p + items->len) {
            lastl = em_ld32(p);
            lastp = p + 8;
            p += 8 + lastl;
        }
        em_buf_reset(&r->last);
        if (em_buf_append(&r->last, lastp, lastl))
            rc = EM_NOMEM;
        r->started = 1;
    }
    pthread_rwlock_unlock(&s->lock);
    return rc;
}

uint64_t sq_ix_count(const sq_index *ix) { return atomic_load_explicit(&ix->count, memory_order_relaxed); }
