/* sq_vtab.c - the SQLite virtual-table module "ember" over one catalog
 * table (reference sql.md §3.1): hidden _KEY and _VAL columns, then the
 * table's columns, read on demand from the entry's key or value object;
 * EQ on _KEY (or the unwrapped PK column) is one store get; equality and
 * ranges on an index's leading columns (and ORDER BY them) read the index
 * (sq_index.c); anything else is a scan that skips entries of other value
 * types.  xUpdate turns INSERT
 * into put-if-absent (INSERT OR REPLACE, i.e. MERGE, into put), UPDATE into
 * a rebuilt value (unchanged fields keep their bytes), DELETE into remove.
 * Declared as WITHOUT ROWID with PRIMARY KEY(_KEY), so xUpdate gets keys.
 */
#include "sql/sql_int.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "util/err.h"
#include "util/mem.h"

typedef struct vt {
    sqlite3_vtab base;
    sqlite3     *db;
    sq_engine   *e;
    sq_sess     *ss;            /* the session owning db (its sq_remote) */
    sq_table    *t;
} vt;

typedef struct vc {
    sqlite3_vtab_cursor base;
    st_scan  *sc;
    em_buf    page;             /* entries: u32 klen, key, u32 vlen, value */
    size_t    pos;
    int       more, eof;
    const uint8_t *k, *v;       /* current entry (v resolved) */
    uint32_t  kl, vl;
    uint32_t  batch;            /* entries per refill: fewer when they are big */
    sq_tycache tc;              /* registry types of the last key/value: rows share types */
    sq_index *ix;               /* an index scan (ref'd): its range, */
    sq_ixrange r;
    em_buf    items, item;      /* a page of items, one row's item */
    sq_tycache itc;
    bin_floc *floc;             /* a scan's: per column, where its field sits */
    uint32_t  nfloc;
} vc;

#define VT(p) ((vt *)(p))

static int vt_err(sqlite3_vtab *b, int code, const char *fmt, const char *arg)
{
    sqlite3_free(b->zErrMsg);
    b->zErrMsg = sqlite3_mprintf(fmt, arg);
    return code;
}

/* ---- connect ------------------------------------------------------------ */

static int x_connect(sqlite3 *db, void *aux, int argc, const char *const *argv,
                     sqlite3_vtab **out, char **err)
{
    sq_sess *ss = aux;
    sq_engine *e = ss->eng;
    if (argc < 4) {
        *err = sqlite3_mprintf("ember: table serial missing");
        return SQLITE_ERROR;
    }
    sq_table *t = sq_cat_by_serial(e, strtoull(argv[3], NULL, 10));
    if (!t) {
        *err = sqlite3_mprintf("Table doesn't exist: %s", argv[2]);
        return SQLITE_ERROR;
    }
    sqlite3_str *s = sqlite3_str_new(db);
    sqlite3_str_appendf(s, "CREATE TABLE x(_KEY %s HIDDEN NOT NULL, _VAL OTHER_BLOB HIDDEN",
                        t->key_wrapped ? "OTHER_BLOB" : sq_type_decl(t->key_sqtype));
    for (uint32_t i = 0; i < t->ncols; i++) {
        sqlite3_str_appendf(s, ", \"%w\" %s", t->cols[i].name, sq_type_decl(t->cols[i].type));
    }
    sqlite3_str_appendall(s, ", PRIMARY KEY(_KEY)) WITHOUT ROWID");
    char *sql = sqlite3_str_finish(s);
    int rc = sql ? sqlite3_declare_vtab(db, sql) : SQLITE_NOMEM;
    sqlite3_free(sql);
    vt *v = rc == SQLITE_OK ? sqlite3_malloc(sizeof *v) : NULL;
    if (!v) {
        sq_table_unref(t);
        return rc == SQLITE_OK ? SQLITE_NOMEM : rc;
    }
    memset(v, 0, sizeof *v);
    v->db = db;
    v->e = e;
    v->ss = ss;
    v->t = t;
    sqlite3_vtab_config(db, SQLITE_VTAB_CONSTRAINT_SUPPORT, 1);
    *out = &v->base;
    return SQLITE_OK;
}

static int x_disconnect(sqlite3_vtab *b)
{
    sq_table_unref(VT(b)->t);
    sqlite3_free(b);
    return SQLITE_OK;
}

/* is_key_col: is SQLite column i the whole key? */
static int is_key_col(const sq_table *t, int i)
{
    return i == 0 || (i >= 2 && t->cols[i - 2].alias == SQ_ALIAS_KEY);
}

/* ix_on: constraint or ORDER BY column i (SQLite's numbering) reads index
 * column c. */
static int ix_on(const sq_table *t, const sq_index *ix, uint32_t c, int i)
{
    const sq_ixcol *x = &ix->cols[c];
    if (x->col >= 0) {
        /* By name: a dropped column before it moves it. */
        if (i >= 2 && (uint32_t)i - 2 < t->ncols && !strcmp(t->cols[i - 2].name, x->name))
            return 1;
        return x->kind == SQ_IXC_KEY && i == 0;
    }
    return x->kind == SQ_IXC_KEY ? i == 0 : i == 1;
}

static int binary_coll(sqlite3_index_info *ii, int i)
{
    const char *coll = sqlite3_vtab_collation(ii, i);
    return !coll || !sqlite3_stricmp(coll, "BINARY");
}

/* find_con: a usable constraint with operator op (or op2) on index column
 * c, or -1. */
static int find_con(sqlite3_index_info *ii, const sq_table *t, const sq_index *ix, uint32_t c,
                    int op, int op2)
{
    for (int i = 0; i < ii->nConstraint; i++) {
        const struct sqlite3_index_constraint *k = &ii->aConstraint[i];
        if (k->usable && (k->op == op || k->op == op2) && ix_on(t, ix, c, k->iColumn) &&
            binary_coll(ii, i))
            return i;
    }
    return -1;
}

/* A plan through index j: equality on its first neq columns, then an
 * optional range on the next; idxNum packs it (2 | lo << 2 | hi << 4 |
 * j << 8 | neq << 16; lo/hi 1 inclusive, 2 exclusive). */
typedef struct ixplan {
    double cost, rows;
    int    j, neq, lo, hi, con_lo, con_hi, ord;
    int    eq[SQ_MAX_COLS];
} ixplan;

static void plan_index(sqlite3_index_info *ii, const sq_table *t, const sq_index *ix, int j,
                       double n, ixplan *p)
{
    memset(p, 0, sizeof *p);
    p->j = j;
    p->con_lo = p->con_hi = -1;
    double rows = n + 1;
    while ((uint32_t)p->neq < ix->ncols) {
        int i = find_con(ii, t, ix, (uint32_t)p->neq, SQLITE_INDEX_CONSTRAINT_EQ, -1);
        if (i < 0)
            break;
        p->eq[p->neq++] = i;
        rows = rows / 50 + 1;
    }
    if ((uint32_t)p->neq < ix->ncols) {
        p->con_lo = find_con(ii, t, ix, (uint32_t)p->neq, SQLITE_INDEX_CONSTRAINT_GT,
                             SQLITE_INDEX_CONSTRAINT_GE);
        p->con_hi = find_con(ii, t, ix, (uint32_t)p->neq, SQLITE_INDEX_CONSTRAINT_LT,
                             SQLITE_INDEX_CONSTRAINT_LE);
        if (p->con_lo >= 0) {
            p->lo = ii->aConstraint[p->con_lo].op == SQLITE_INDEX_CONSTRAINT_GE ? 1 : 2;
            rows = rows / 4 + 1;
        }
        if (p->con_hi >= 0) {
            p->hi = ii->aConstraint[p->con_hi].op == SQLITE_INDEX_CONSTRAINT_LE ? 1 : 2;
            rows = rows / 4 + 1;
        }
    }
    /* Rows come out in index order: ORDER BY the columns after the
     * equalities (or from the first), ascending, is given for free - after
     * equalities only if none is on a text column, whose bound xFilter may
     * have to drop (sq_ix_enc_bound), leaving those columns unfixed. */
    int ord = ii->nOrderBy > 0;
    for (int k = 0; ord && k < p->neq; k++)
        ord = !sq_ix_col_text(ix, (uint32_t)k);     /* its bound may bound nothing */
    for (int k = 0; ord && k < ii->nOrderBy; k++) {
        const struct sqlite3_index_orderby *o = &ii->aOrderBy[k];
        ord = !o->desc && ((uint32_t)(p->neq + k) < ix->ncols && ix_on(t, ix, (uint32_t)(p->neq + k), o->iColumn));
    }
    if (!ord && ii->nOrderBy > 0) {
        ord = 1;
        for (int k = 0; ord && k < ii->nOrderBy; k++) {
            const struct sqlite3_index_orderby *o = &ii->aOrderBy[k];
            ord = !o->desc && (uint32_t)k < ix->ncols && ix_on(t, ix, (uint32_t)k, o->iColumn);
        }
    }
    p->ord = ord;
    p->rows = rows;
    /* A row read through an index costs a skip-list step and a hash
     * lookup; a scanned one a step through the table (cost 1 per row). */
    p->cost = (p->neq || p->lo || p->hi || ord) ? rows * 2 + 1 : -1;
}

static int x_best_index(sqlite3_vtab *b, sqlite3_index_info *ii)
{
    sq_table *t = VT(b)->t;
    for (int i = 0; i < ii->nConstraint; i++) {
        const struct sqlite3_index_constraint *c = &ii->aConstraint[i];
        if (c->usable && c->op == SQLITE_INDEX_CONSTRAINT_EQ && is_key_col(t, c->iColumn)) {
            ii->aConstraintUsage[i].argvIndex = 1;
            ii->aConstraintUsage[i].omit = 1;
            ii->idxNum = 1;
            ii->idxFlags = SQLITE_INDEX_SCAN_UNIQUE;
            ii->estimatedCost = 1;
            ii->estimatedRows = 1;
            return SQLITE_OK;
        }
    }
    st_cache_stats cs;
    st_cache_stats_get(t->cache, &cs);
    double n = (double)cs.entries;
    ixplan best, p;
    memset(&best, 0, sizeof best);
    best.cost = -1;
    /* An index holds this node's entries only: none serves a cluster. */
    for (uint32_t j = 0; !VT(b)->ss->rem && j < t->nix; j++) {
        if (!atomic_load(&t->ix[j]->ready) || atomic_load(&t->ix[j]->broken))
            continue;
        plan_index(ii, t, t->ix[j], (int)j, n, &p);
        /* An index that gives the order competes with a scan plus a sort. */
        double scan = n + 10 + (p.ord ? n * (n > 2 ? log2(n) : 1) / 4 : 0);
        if (p.cost >= 0 && p.cost < scan && (best.cost < 0 || p.cost < best.cost))
            best = p;
    }
    if (best.cost >= 0) {
        int argv = 1;
        for (int k = 0; k < best.neq; k++)
            ii->aConstraintUsage[best.eq[k]].argvIndex = argv++;
        if (best.con_lo >= 0)
            ii->aConstraintUsage[best.con_lo].argvIndex = argv++;
        if (best.con_hi >= 0)
            ii->aConstraintUsage[best.con_hi].argvIndex = argv++;
        /* omit stays 0: SQLite checks every constraint again on the row. */
        ii->idxNum = 2 | best.lo << 2 | best.hi << 4 | best.j << 8 | best.neq << 16;
        ii->orderByConsumed = best.ord;
        ii->estimatedCost = best.cost;
        ii->estimatedRows = (sqlite3_int64)best.rows;
        return SQLITE_OK;
    }
    ii->idxNum = 0;
    ii->estimatedRows = (sqlite3_int64)cs.entries + 1;
    ii->estimatedCost = (double)cs.entries + 10;
    return SQLITE_OK;
}

/* ---- cursor --------------------------------------------------------------- */

static int x_open(sqlite3_vtab *b, sqlite3_vtab_cursor **out)
{
    (void)b;
    vc *c = sqlite3_malloc(sizeof *c);
    if (!c)
        return SQLITE_NOMEM;
    memset(c, 0, sizeof *c);
    *out = &c->base;
    return SQLITE_OK;
}

static void ix_end(vc *c)
{
    sq_ix_unref(c->ix);
    c->ix = NULL;
}

static int x_close(sqlite3_vtab_cursor *cur)
{
    vc *c = (vc *)cur;
    if (c->sc)
        st_scan_close(c->sc);
    ix_end(c);
    em_buf_free(&c->page);
    em_buf_free(&c->items);
    em_buf_free(&c->item);
    em_buf_free(&c->r.lo);
    em_buf_free(&c->r.hi);
    em_buf_free(&c->r.last);
    sqlite3_free(c->floc);
    sqlite3_free(c);
    return SQLITE_OK;
}

/* ---- data: the local store, or a cluster's owners (sq_remote) ---------- */

static int kv_get(vt *v, const uint8_t *k, size_t kl, em_buf *out, int *found)
{
    const sq_remote *r = v->ss->rem;
    return r ? r->get(r->ctx, v->t->cache, k, kl, out, found)
             : st_get(v->t->cache, NULL, k, kl, out, found);
}

/* writer: who writes v's rows - a cluster's owners, on one node the
 * transaction-aware path for a TRANSACTIONAL cache (its entry locks), else
 * NULL: the local store directly. */
static const sq_remote *writer(const vt *v)
{
    const sq_remote *r = v->ss->rem;
    if (!r && v->ss->txkv && st_cache_cfg(v->t->cache)->atomicity_mode == 0)
        r = v->ss->txkv;
    return r;
}

static int kv_put(vt *v, const uint8_t *k, size_t kl, const uint8_t *val, size_t vl,
                  int if_absent, int *stored)
{
    const sq_remote *r = writer(v);
    if (r)
        return r->put(r->ctx, v->t->cache, k, kl, val, vl, if_absent, stored);
    *stored = 1;
    return if_absent ? st_put_if_absent(v->t->cache, NULL, k, kl, val, vl, stored)
                     : st_put(v->t->cache, NULL, k, kl, val, vl);
}

static int kv_remove(vt *v, const uint8_t *k, size_t kl, int *removed)
{
    const sq_remote *r = writer(v);
    return r ? r->remove(r->ctx, v->t->cache, k, kl, removed)
             : st_remove(v->t->cache, NULL, k, kl, removed);
}

/* kv_fail: SQLite's error for a failed data call (the cluster's or the
 * transaction path's text). */
static int kv_fail(vt *v, int rc)
{
    const sq_remote *r = writer(v);
    if (rc == EM_NOMEM)
        return SQLITE_NOMEM;
    if (rc == EM_NOCACHE)
        return vt_err(&v->base, SQLITE_ERROR, "Table doesn't exist: %s", v->t->name);
    /* the adapter's text for its own failures (on one node reads are the
     * store's, and so are their errors) */
    int theirs = r && rc < 0 && (v->ss->rem || rc == EM_REMOTE);
    return vt_err(&v->base, SQLITE_ERROR, "%s", theirs ? r->errmsg(r->ctx) : em_strerror(rc));
}

/* ix_refill reads the rows of the next page of index items into the page:
 * each item's entry, if it is still there and still has that item (else
 * it moved and is read at its new place). */
static int ix_refill(vc *c, vt *v)
{
    int rc = sq_ix_page(c->ix, &c->r, c->batch, &c->items, &c->more);
    for (size_t pos = 0; !rc && pos + 8 <= c->items.len;) {
        const uint8_t *it = c->items.p + pos;
        uint32_t len = em_ld32(it), plen = em_ld32(it + 4);
        pos += 8 + (size_t)len;
        const uint8_t *k = it + 8 + plen;
        uint32_t kl = len - plen;
        size_t at0 = c->page.len, at;
        int found = 0;
        if (em_buf_put_le32(&c->page, kl) || em_buf_append(&c->page, k, kl) ||
            (at = c->page.len, em_buf_put_le32(&c->page, 0)))
            return EM_NOMEM;
        rc = kv_get(v, k, kl, &c->page, &found);
        if (rc || !found) {
            c->page.len = at0;
            continue;
        }
        uint32_t vl = (uint32_t)(c->page.len - at - 4), pl = 0;
        em_st32(c->page.p + at, vl);
        int has = sq_ix_item(c->ix, v->e->reg, &c->itc, k, kl, c->page.p + at + 4, &c->item, &pl);
        if (has < 0)
            return EM_NOMEM;
        if (!has || c->item.len != len || memcmp(c->item.p, c->items.p + pos - len, len))
            c->page.len = at0;
    }
    return rc;
}

/* ix_fail: the SQLite error for a failed index read (0 if rc is not the
 * index's own). */
static int ix_fail(vc *c, int rc)
{
    if (rc == EM_NOTFOUND)
        return vt_err(c->base.pVtab, SQLITE_ERROR, "Index %s was dropped while the query ran; "
                      "run it again", c->ix->name);
    if (atomic_load(&c->ix->broken))
        return vt_err(c->base.pVtab, SQLITE_ERROR, "Index %s could not be kept up to date (out "
                      "of memory); drop it and create it again", c->ix->name);
    return 0;
}

/* advance moves to the next row of this table, refilling from the scan. */
static int advance(vc *c)
{
    sq_table *t = VT(c->base.pVtab)->t;
    if (c->sc) {
        /* A full scan reads the scan's snapshot in place: no page copy. */
        for (;;) {
            const uint8_t *k, *v;
            uint32_t kl, vl;
            int rc = st_scan_next(c->sc, &k, &kl, &v, &vl);
            if (rc == 0) {
                c->eof = 1;
                return SQLITE_OK;
            }
            if (rc < 0)
                return kv_fail(VT(c->base.pVtab), rc);
            c->k = k;
            c->kl = kl;
            c->v = bin_rd_resolve(v);
            c->vl = vl;
            if (sq_belongs(t->val_sqtype, t->val_tid, c->v))
                return SQLITE_OK;
        }
    }
    for (;;) {
        while (c->pos + 8 <= c->page.len) {
            const uint8_t *p = c->page.p + c->pos;
            uint32_t kl = em_ld32(p), vl = em_ld32(p + 4 + kl);
            c->k = p + 4;
            c->kl = kl;
            c->v = bin_rd_resolve(p + 8 + kl);
            c->vl = vl;
            c->pos += 8 + (size_t)kl + vl;
            if (sq_belongs(t->val_sqtype, t->val_tid, c->v))
                return SQLITE_OK;
        }
        if (!c->more) {
            c->eof = 1;
            return SQLITE_OK;
        }
        em_buf_reset(&c->page);
        c->pos = 0;
        /* A cursor a client leaves open keeps its page: keep it near 1 MiB
         * however large the values are. */
        int rc = ix_refill(c, VT(c->base.pVtab));
        if (rc && (rc = ix_fail(c, rc)) != 0)
            return rc;
        if (c->page.len > (1u << 20))
            c->batch = c->batch > 4 ? c->batch / 4 : 1;
        else if (c->page.len < (1u << 18) && c->batch < 256)
            c->batch *= 2;
        if (rc == EM_NOCACHE)
            return vt_err(c->base.pVtab, SQLITE_ERROR, "Table doesn't exist: %s", t->name);
        if (rc)
            return rc == EM_NOMEM ? SQLITE_NOMEM : SQLITE_ERROR;
    }
}

/* key_bytes encodes SQLite value sv as the table's key into out. */
static int key_bytes(vt *v, sqlite3_value *sv, em_buf *out, char *msg, size_t msgsz)
{
    sq_table *t = v->t;
    if (t->key_wrapped) {
        if (sqlite3_value_type(sv) != SQLITE_BLOB)
            return EM_INVAL;
        const uint8_t *b = sqlite3_value_blob(sv);
        size_t n = (size_t)sqlite3_value_bytes(sv), vl = 0;
        if (!b || bin_validate(b, n, &vl, 0) || vl != n)
            return EM_INVAL;
        return em_buf_append(out, b, n);
    }
    bin_writer w;
    bin_writer_init(&w, v->e->reg, out);
    int rc = sq_val_write(&w, sv, t->key_sqtype, msg, msgsz);
    bin_writer_free(&w);
    return rc;
}

/* ix_bounds sets c->r from the plan in idx and its values. */
static int ix_bounds(vc *c, int idx, int argc, sqlite3_value **argv)
{
    sq_ixrange *r = &c->r;
    int lo = (idx >> 2) & 3, hi = (idx >> 4) & 3, neq = (idx >> 16) & 0x3ff, rc = 0;
    if (argc != neq + (lo != 0) + (hi != 0))
        return EM_INVAL;
    em_buf_reset(&r->lo);
    em_buf_reset(&r->hi);
    em_buf_reset(&r->last);
    r->started = r->has_lo = r->has_hi = 0;
    int k = 0;
    for (; k < neq; k++)
        if ((rc = sq_ix_enc_bound(c->ix, (uint32_t)k, argv[k], &r->lo)) != 0)
            break;
    if (rc < 0)
        return rc;
    if (k < neq)                    /* a value that bounds nothing: the prefix so far */
        lo = hi = 0;
    if (r->lo.len && em_buf_append(&r->hi, r->lo.p, r->lo.len))
        return EM_NOMEM;
    r->has_lo = r->has_hi = r->lo.len > 0;
    r->lo_incl = r->hi_incl = 1;
    size_t pre = r->lo.len;
    if (lo) {
        rc = sq_ix_enc_bound(c->ix, (uint32_t)neq, argv[neq], &r->lo);
        if (rc < 0)
            return rc;
        if (rc == 0) {
            r->has_lo = 1;
            r->lo_incl = lo == 1;
        } else {
            r->lo.len = pre;
        }
    }
    if (hi) {
        rc = sq_ix_enc_bound(c->ix, (uint32_t)neq, argv[neq + (lo != 0)], &r->hi);
        if (rc < 0)
            return rc;
        if (rc == 0) {
            r->has_hi = 1;
            r->hi_incl = hi == 1;
        } else {
            r->hi.len = pre;
        }
    }
    return 0;
}

static int ix_filter(vc *c, vt *v, int idx, int argc, sqlite3_value **argv)
{
    uint32_t j = (uint32_t)(idx >> 8) & 0xff;
    if (j >= v->t->nix)
        return vt_err(c->base.pVtab, SQLITE_ERROR, "%s", "bad index plan");
    sq_ix_ref(v->t->ix[j]);
    c->ix = v->t->ix[j];
    if (!atomic_load(&c->ix->ready) || atomic_load(&c->ix->broken))
        return ix_fail(c, atomic_load(&c->ix->broken) ? EM_NOMEM : EM_NOTFOUND);
    sq_index *ix = c->ix;
    atomic_fetch_add_explicit(&ix->scans, 1, memory_order_relaxed);
    int rc = ix_bounds(c, idx, argc, argv);
    if (rc)
        return rc == EM_NOMEM ? SQLITE_NOMEM : vt_err(c->base.pVtab, SQLITE_ERROR, "%s", "bad index plan");
    c->more = 1;
    c->batch = 64;
    return advance(c);
}

static int x_filter(sqlite3_vtab_cursor *cur, int idx, const char *idxs, int argc,
                    sqlite3_value **argv)
{
    (void)idxs;
    vc *c = (vc *)cur;
    vt *v = VT(cur->pVtab);
    if (c->sc) {
        st_scan_close(c->sc);
        c->sc = NULL;
    }
    ix_end(c);
    em_buf_reset(&c->page);
    c->pos = 0;
    c->more = 0;
    c->eof = 0;
    if ((idx & 3) == 2)
        return ix_filter(c, v, idx, argc, argv);
    if (idx == 1 && argc == 1) {
        /* Point lookup: a key that cannot be converted matches nothing. */
        char msg[160];
        em_buf kb = EM_BUF_INIT;
        int rc = key_bytes(v, argv[0], &kb, msg, sizeof msg);
        if (rc == 0 && sqlite3_value_type(argv[0]) != SQLITE_NULL) {
            int found = 0;
            size_t at = 0;
            if (em_buf_put_le32(&c->page, (uint32_t)kb.len) || em_buf_append(&c->page, kb.p, kb.len) ||
                (at = c->page.len, em_buf_put_le32(&c->page, 0))) {
                em_buf_free(&kb);
                return SQLITE_NOMEM;
            }
            rc = kv_get(v, kb.p, kb.len, &c->page, &found);
            if (rc && rc != EM_NOMEM) {
                em_buf_free(&kb);
                return kv_fail(v, rc);
            }
            if (rc == 0 && found)
                em_st32(c->page.p + at, (uint32_t)(c->page.len - at - 4));
            else
                em_buf_reset(&c->page);
        }
        em_buf_free(&kb);
        if (rc == EM_NOMEM)
            return SQLITE_NOMEM;
        return advance(c);
    }
    if (!c->floc && v->t->ncols) {
        /* A scan reads many rows of one layout: remember where each
         * column's field sits (point and index reads do without). */
        if (!(c->floc = sqlite3_malloc64(sizeof *c->floc * v->t->ncols)))
            return SQLITE_NOMEM;
        memset(c->floc, 0, sizeof *c->floc * v->t->ncols);
        c->nfloc = v->t->ncols;
    }
    const sq_remote *r = v->ss->rem;
    int rc = r ? r->scan(r->ctx, v->t->cache, &c->sc) : st_scan_open(v->t->cache, -1, &c->sc);
    if (rc)
        return kv_fail(v, rc);
    return advance(c);              /* reads the scan itself: no page, no batch */
}

static int x_next(sqlite3_vtab_cursor *cur) { return advance((vc *)cur); }
static int x_eof(sqlite3_vtab_cursor *cur) { return ((vc *)cur)->eof; }

static int column(vc *c, sqlite3_context *ctx, int i);

/* x_column: a scan's value field of a known layout and a common type
 * without a call, anything else through column(). */
static int x_column(sqlite3_vtab_cursor *cur, sqlite3_context *ctx, int i)
{
    vc *c = (vc *)cur;
    uint32_t ci = (uint32_t)i - 2;
    if (ci < c->nfloc && !sqlite3_vtab_nochange(ctx)) {
        const sq_col *col = &VT(cur->pVtab)->t->cols[ci];
        const uint8_t *f;
        if (!col->key && !col->alias && c->v[0] == BIN_OBJ &&
            bin_floc_get(c->v, &c->floc[ci], &f) == 0) {
            if (f[0] == BIN_INT) {
                sqlite3_result_int64(ctx, (int32_t)em_ld32(f + 1));
                return SQLITE_OK;
            }
            if (f[0] == BIN_DOUBLE) {
                double d;
                memcpy(&d, f + 1, 8);
                if (!isnan(d)) {
                    sqlite3_result_double(ctx, d);
                    return SQLITE_OK;
                }
            }
        }
    }
    return column(c, ctx, i);
}

static int column(vc *c, sqlite3_context *ctx, int i)
{
    vt *v = VT(c->base.pVtab);
    sq_table *t = v->t;
    if (sqlite3_vtab_nochange(ctx))
        return SQLITE_OK;           /* UPDATE: xUpdate copies unchanged fields */
    if (is_key_col(t, i)) {
        if (t->key_wrapped || t->key_sqtype == SQ_T_OBJECT)
            sqlite3_result_blob(ctx, c->k, (int)c->kl, SQLITE_TRANSIENT);
        else
            sq_val_result(ctx, bin_rd_resolve(c->k), t->key_sqtype);
        return SQLITE_OK;
    }
    if (i >= 2 && t->cols[i - 2].alias == SQ_ALIAS_VAL) {
        sq_val_result(ctx, c->v, t->cols[i - 2].type);
        return SQLITE_OK;
    }
    if (i == 1) {
        sqlite3_result_blob(ctx, c->v, (int)bin_rd_len(c->v), SQLITE_TRANSIENT);
        return SQLITE_OK;
    }
    const sq_col *col = &t->cols[i - 2];
    int kv = col->key ? 0 : 1;
    const uint8_t *o = kv ? c->v : bin_rd_resolve(c->k), *f;
    if ((uint32_t)(i - 2) < c->nfloc)
        f = sq_field_loc(v->e->reg, &c->tc.ty[kv], &c->tc.tid[kv], o, col->fid, &c->floc[i - 2]);
    else
        f = sq_field(v->e->reg, &c->tc.ty[kv], &c->tc.tid[kv], o, col->fid);
    if (f)
        sq_val_result(ctx, f, col->type);
    else
        sqlite3_result_null(ctx);
    return SQLITE_OK;
}

static int x_rowid(sqlite3_vtab_cursor *cur, sqlite3_int64 *r)
{
    (void)cur;
    *r = 0;
    return SQLITE_ERROR;            /* WITHOUT ROWID */
}

/* ---- writes ------------------------------------------------------------- */

/* write_default writes column c's DEFAULT literal.  SQLite hands a virtual
 * table NULL for an omitted INSERT column, so a NULL is taken for "use the
 * default" (unlike H2, an explicit NULL into such a column gets the
 * default too).  The literal was checked by the DDL parser; SQLite turns
 * it into a value on this same connection. */
static int write_default(vt *v, bin_writer *w, const sq_col *c, char *msg, size_t msgsz)
{
    char sql[SQ_MAX_DEFAULT + 16];
    snprintf(sql, sizeof sql, "SELECT %s", c->dflt);
    sqlite3_stmt *st = NULL;
    int rc = sqlite3_prepare_v2(v->db, sql, -1, &st, NULL);
    if (rc == SQLITE_OK && sqlite3_step(st) == SQLITE_ROW)
        rc = sq_val_write(w, sqlite3_column_value(st, 0), c->type, msg, msgsz);
    else
        rc = rc == SQLITE_NOMEM ? EM_NOMEM : EM_INVAL;
    sqlite3_finalize(st);
    return rc;
}

/* build_obj writes the key (key = 1) or value object from argv (column i
 * at argv[4 + i]); old (may be NULL) supplies fields SQLite did not change. */
static int build_obj(vt *v, int key, sqlite3_value **argv, const uint8_t *old, em_buf *out,
                     char *msg, size_t msgsz)
{
    sq_table *t = v->t;
    /* A QueryEntity's types are its clients': the first SQL write defines
     * them from the entity's fields, as Ignite's SQL builds the object. */
    const bin_desc *d = key ? t->kdesc : t->vdesc;
    if (!d) {
        int rc = sq_cat_define(v->e, t, v->ss->rem, key, &d);
        if (rc && rc != EM_NOMEM) {
            snprintf(msg, msgsz, "Failed to register binary type %s for table %s: %s",
                     key ? (t->key_type ? t->key_type : "?") : t->val_type, t->name,
                     em_strerror(rc));
            return rc;
        }
        if (rc)
            return rc;
    }
    bin_writer w;
    bin_writer_init(&w, v->e->reg, out);
    const bin_type *ty = NULL;
    int32_t tid = 0;
    int rc = bin_w_obj_begin(&w, d);
    uint32_t fi = 0;
    for (uint32_t i = 0; !rc && i < t->ncols; i++) {
        const sq_col *c = &t->cols[i];
        if (c->key != key || c->alias)
            continue;
        if ((rc = bin_w_field_idx(&w, fi++)) != 0)
            break;
        sqlite3_value *sv = argv[4 + i];
        if (old && sqlite3_value_nochange(sv)) {
            const uint8_t *f = sq_field(v->e->reg, &ty, &tid, old, c->fid);
            rc = f ? bin_w_value(&w, f, bin_rd_len(f)) : bin_w_null(&w);
            continue;
        }
        if (!old && c->dflt && sqlite3_value_type(sv) == SQLITE_NULL) {
            rc = write_default(v, &w, c, msg, msgsz);
            continue;
        }
        if (c->notnull && sqlite3_value_type(sv) == SQLITE_NULL) {
            snprintf(msg, msgsz, "Null value is not allowed for column '%s'", c->name);
            rc = EM_INVAL;
            break;
        }
        rc = sq_val_write(&w, sv, c->type, msg, msgsz);
    }
    if (!rc)
        rc = bin_w_obj_end(&w);
    bin_writer_free(&w);
    return rc;
}

/* build_val: the value for INSERT/UPDATE; an SQL-typed value is its
 * column (or _VAL) itself. */
static int build_val(vt *v, sqlite3_value **argv, const uint8_t *old, em_buf *out,
                     char *msg, size_t msgsz)
{
    sq_table *t = v->t;
    if (!t->val_sqtype)
        return build_obj(v, 0, argv, old, out, msg, msgsz);
    sqlite3_value *sv = t->val_col >= 0 ? argv[4 + t->val_col] : argv[3];
    if (t->val_col >= 0 && old && sqlite3_value_nochange(sv))
        return em_buf_append(out, old, bin_rd_len(old));
    if (sqlite3_value_type(sv) == SQLITE_NULL) {
        snprintf(msg, msgsz, "Null value is not allowed for column '%s'",
                 t->val_col >= 0 ? t->cols[t->val_col].name : "_VAL");
        return EM_INVAL;
    }
    bin_writer w;
    bin_writer_init(&w, v->e->reg, out);
    int rc = sq_val_write(&w, sv, t->val_sqtype, msg, msgsz);
    bin_writer_free(&w);
    return rc;
}

/* key_text prints a key for "Duplicate key during INSERT [key=...]". */
static void key_text(vt *v, const uint8_t *k, char *out, size_t sz)
{
    int64_t l;
    const char *s;
    size_t n;
    if (bin_rd_long(k, &l) == 0)
        snprintf(out, sz, "%lld", (long long)l);
    else if (bin_rd_string(k, &s, &n) == 0)
        snprintf(out, sz, "%.*s", (int)(n < 100 ? n : 100), s);
    else
        snprintf(out, sz, "%s", v->t->key_wrapped ? v->t->key_type : "?");
}

static int x_update(sqlite3_vtab *b, int argc, sqlite3_value **argv, sqlite3_int64 *rowid)
{
    (void)rowid;
    vt *v = VT(b);
    sq_table *t = v->t;
    char msg[256] = "";
    em_buf kb = EM_BUF_INIT, vb = EM_BUF_INIT, ob = EM_BUF_INIT;
    int rc = 0, code = SQLITE_ERROR;
    if (argc == 1) {                                    /* DELETE */
        if ((rc = key_bytes(v, argv[0], &kb, msg, sizeof msg)) == 0) {
            int removed;
            rc = kv_remove(v, kb.p, kb.len, &removed);
        }
    } else if (sqlite3_value_type(argv[0]) == SQLITE_NULL) {    /* INSERT */
        if (sqlite3_value_type(argv[2]) != SQLITE_NULL)
            rc = key_bytes(v, argv[2], &kb, msg, sizeof msg);
        else if (t->key_wrapped)
            rc = build_obj(v, 1, argv, NULL, &kb, msg, sizeof msg);
        else if (t->key_col < 0 || sqlite3_value_type(argv[4 + t->key_col]) == SQLITE_NULL) {
            snprintf(msg, sizeof msg, "Null value is not allowed for column '%s'",
                     t->key_col >= 0 ? t->cols[t->key_col].name : "_KEY");
            rc = EM_INVAL;
        } else
            rc = key_bytes(v, argv[4 + t->key_col], &kb, msg, sizeof msg);
        if (!rc)
            rc = build_val(v, argv, NULL, &vb, msg, sizeof msg);
        if (!rc) {
            int stored = 0;
            if (sqlite3_vtab_on_conflict(v->db) == SQLITE_REPLACE) {
                rc = kv_put(v, kb.p, kb.len, vb.p, vb.len, 0, &stored);
            } else {
                rc = kv_put(v, kb.p, kb.len, vb.p, vb.len, 1, &stored);
                if (!rc && !stored) {
                    char kt[128];
                    key_text(v, kb.p, kt, sizeof kt);
                    snprintf(msg, sizeof msg, "Duplicate key during INSERT [key=%s]", kt);
                    rc = EM_INVAL;
                    code = SQLITE_CONSTRAINT;
                }
            }
        }
    } else {                                            /* UPDATE */
        int key_changed = !sqlite3_value_nochange(argv[2]) &&
                          sqlite3_value_type(argv[2]) != SQLITE_NULL;
        for (uint32_t i = 0; i < t->ncols; i++)
            if (t->cols[i].key && !sqlite3_value_nochange(argv[4 + i]))
                key_changed = 1;
        if (key_changed) {
            snprintf(msg, sizeof msg, "SQL UPDATE can't modify key or its fields");
            rc = EM_INVAL;
        } else if ((rc = key_bytes(v, argv[0], &kb, msg, sizeof msg)) == 0) {
            int found = 0;
            rc = kv_get(v, kb.p, kb.len, &ob, &found);
            if (!rc && found) {
                const uint8_t *old = bin_rd_resolve(ob.p);
                int stored;
                rc = build_val(v, argv, old, &vb, msg, sizeof msg);
                if (!rc)
                    rc = kv_put(v, kb.p, kb.len, vb.p, vb.len, 0, &stored);
            }
        }
    }
    em_buf_free(&kb);
    em_buf_free(&vb);
    em_buf_free(&ob);
    if (!rc)
        return SQLITE_OK;
    if (rc == EM_NOMEM)
        return SQLITE_NOMEM;
    if (rc == EM_NOCACHE)
        return vt_err(b, SQLITE_ERROR, "Table doesn't exist: %s", t->name);
    if (!msg[0] && rc < 0 && v->ss->rem)
        return kv_fail(v, rc);
    if (!msg[0])
        snprintf(msg, sizeof msg, "Failed to update table %s: %s", t->name, em_strerror(rc));
    return vt_err(b, code, "%s", msg);
}

static const sqlite3_module ember_module = {
    .iVersion = 2,
    .xCreate = x_connect, .xConnect = x_connect,
    .xBestIndex = x_best_index,
    .xDisconnect = x_disconnect, .xDestroy = x_disconnect,
    .xOpen = x_open, .xClose = x_close,
    .xFilter = x_filter, .xNext = x_next, .xEof = x_eof,
    .xColumn = x_column, .xRowid = x_rowid, .xUpdate = x_update,
};

int sq_vtab_register(sqlite3 *db, sq_sess *s)
{
    return sqlite3_create_module_v2(db, "ember", &ember_module, s, NULL);
}
