/* sq_vtab.c - the SQLite virtual-table module "ember" over one catalog
 * table (reference sql.md §3.1): hidden _KEY and _VAL columns, then the
 * table's columns, read on demand from the entry's key or value object;
 * EQ on _KEY (or the unwrapped PK column) is one store get, anything else
 * a scan that skips entries of other value types.  xUpdate turns INSERT
 * into put-if-absent (INSERT OR REPLACE, i.e. MERGE, into put), UPDATE into
 * a rebuilt value (unchanged fields keep their bytes), DELETE into remove.
 * Declared as WITHOUT ROWID with PRIMARY KEY(_KEY), so xUpdate gets keys.
 */
#include "sql/sql_int.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "util/err.h"
#include "util/mem.h"

typedef struct vt {
    sqlite3_vtab base;
    sqlite3     *db;
    sq_engine   *e;
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
    const bin_type *ty[2];      /* registry types of the last key/value ... */
    int32_t   tid[2];           /* ... and their ids: rows share types */
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
    sq_engine *e = aux;
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

static int x_close(sqlite3_vtab_cursor *cur)
{
    vc *c = (vc *)cur;
    if (c->sc)
        st_scan_close(c->sc);
    em_buf_free(&c->page);
    sqlite3_free(c);
    return SQLITE_OK;
}

static int add_entry(void *arg, const uint8_t *k, size_t kl, const uint8_t *v, size_t vl)
{
    em_buf *b = arg;
    if (em_buf_put_le32(b, (uint32_t)kl) || em_buf_append(b, k, kl) ||
        em_buf_put_le32(b, (uint32_t)vl) || em_buf_append(b, v, vl))
        return EM_NOMEM;
    return 0;
}

/* belongs: only entries whose value is the table's type are its rows. */
static int belongs(const sq_table *t, const uint8_t *v)
{
    if (t->val_sqtype)
        return v[0] == sq_type_code(t->val_sqtype);
    return v[0] == BIN_OBJ && bin_rd_type_id(v) == t->val_tid;
}

/* advance moves to the next row of this table, refilling from the scan. */
static int advance(vc *c)
{
    sq_table *t = VT(c->base.pVtab)->t;
    for (;;) {
        while (c->pos + 8 <= c->page.len) {
            const uint8_t *p = c->page.p + c->pos;
            uint32_t kl = em_ld32(p), vl = em_ld32(p + 4 + kl);
            c->k = p + 4;
            c->kl = kl;
            c->v = bin_rd_resolve(p + 8 + kl);
            c->vl = vl;
            c->pos += 8 + (size_t)kl + vl;
            if (belongs(t, c->v))
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
        int rc = st_scan_next_page(c->sc, c->batch, add_entry, &c->page, &c->more);
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
    em_buf_reset(&c->page);
    c->pos = 0;
    c->more = 0;
    c->eof = 0;
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
            rc = st_get(v->t->cache, NULL, kb.p, kb.len, &c->page, &found);
            if (rc == EM_NOCACHE) {
                em_buf_free(&kb);
                return vt_err(cur->pVtab, SQLITE_ERROR, "Table doesn't exist: %s", v->t->name);
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
    int rc = st_scan_open(v->t->cache, -1, &c->sc);
    if (rc == EM_NOCACHE)
        return vt_err(cur->pVtab, SQLITE_ERROR, "Table doesn't exist: %s", v->t->name);
    if (rc)
        return SQLITE_NOMEM;
    c->more = 1;
    c->batch = 64;
    return advance(c);
}

static int x_next(sqlite3_vtab_cursor *cur) { return advance((vc *)cur); }
static int x_eof(sqlite3_vtab_cursor *cur) { return ((vc *)cur)->eof; }

/* field reads field fid of object o (NULL if absent).  *ty caches the
 * registry's type for id *tid; a schema it does not know yet (registered
 * after the lookup) makes it look again. */
static const uint8_t *field(vt *v, const bin_type **ty, int32_t *tid, const uint8_t *o, int32_t fid)
{
    if (o[0] != BIN_OBJ)
        return NULL;
    int32_t id = bin_rd_type_id(o);
    if (!*ty || *tid != id) {
        *ty = bin_registry_get(v->e->reg, id);
        *tid = id;
    }
    const uint8_t *val;
    int rc = bin_rd_field(o, *ty, fid, &val);
    if (rc == EM_BADSCHEMA) {
        *ty = bin_registry_get(v->e->reg, id);
        rc = bin_rd_field(o, *ty, fid, &val);
    }
    return rc ? NULL : bin_rd_resolve(val);
}

static int x_column(sqlite3_vtab_cursor *cur, sqlite3_context *ctx, int i)
{
    vc *c = (vc *)cur;
    vt *v = VT(cur->pVtab);
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
    const uint8_t *f = col->key ? field(v, &c->ty[0], &c->tid[0], bin_rd_resolve(c->k), col->fid)
                                : field(v, &c->ty[1], &c->tid[1], c->v, col->fid);
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
    bin_writer w;
    bin_writer_init(&w, v->e->reg, out);
    const bin_type *ty = NULL;
    int32_t tid = 0;
    int rc = bin_w_obj_begin(&w, key ? t->kdesc : t->vdesc);
    uint32_t fi = 0;
    for (uint32_t i = 0; !rc && i < t->ncols; i++) {
        const sq_col *c = &t->cols[i];
        if (c->key != key || c->alias)
            continue;
        if ((rc = bin_w_field_idx(&w, fi++)) != 0)
            break;
        sqlite3_value *sv = argv[4 + i];
        if (old && sqlite3_value_nochange(sv)) {
            const uint8_t *f = field(v, &ty, &tid, old, c->fid);
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
            rc = st_remove(t->cache, NULL, kb.p, kb.len, &removed);
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
            if (sqlite3_vtab_on_conflict(v->db) == SQLITE_REPLACE) {
                rc = st_put(t->cache, NULL, kb.p, kb.len, vb.p, vb.len);
            } else {
                int stored = 0;
                rc = st_put_if_absent(t->cache, NULL, kb.p, kb.len, vb.p, vb.len, &stored);
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
            rc = st_get(t->cache, NULL, kb.p, kb.len, &ob, &found);
            if (!rc && found) {
                const uint8_t *old = bin_rd_resolve(ob.p);
                rc = build_val(v, argv, old, &vb, msg, sizeof msg);
                if (!rc)
                    rc = st_put(t->cache, NULL, kb.p, kb.len, vb.p, vb.len);
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

int sq_vtab_register(sqlite3 *db, sq_engine *e)
{
    return sqlite3_create_module_v2(db, "ember", &ember_module, e, NULL);
}
