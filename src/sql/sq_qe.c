/* sq_qe.c - tables from a cache's QueryEntity list (reference sql.md §1.3,
 * layout ignite-thin-protocol.md §2.4, as the store keeps it: with
 * precision and scale).  Ignite's normalisation: the schema is the cache's
 * sqlSchema (upper-cased unless quoted) or the cache name; the table is
 * tableName, else the value type's simple name with '.'/'$' as '_',
 * upper-cased; a column is named by its alias or the field name's last path
 * segment, upper-cased, and reads the binary field by its original name.  A
 * key or value of an SQL type (Integer, String, ...) is the entry itself;
 * keyFieldName/valueFieldName name the columns that alias _KEY/_VAL.
 */
#include "sql/sql_int.h"

#include <ctype.h>
#include <string.h>

#include "util/err.h"
#include "util/mem.h"

typedef struct rd { const uint8_t *p; size_t n, pos; } rd;

static int rd_i32(rd *r, int32_t *v)
{
    if (r->n - r->pos < 4) return EM_TRUNCATED;
    *v = (int32_t)em_ld32(r->p + r->pos);
    r->pos += 4;
    return 0;
}

static int rd_u8(rd *r, uint8_t *v)
{
    if (r->n - r->pos < 1) return EM_TRUNCATED;
    *v = r->p[r->pos++];
    return 0;
}

/* rd_str: a typed string or null (*s = NULL) copied NUL-terminated. */
static int rd_str(rd *r, char **s)
{
    *s = NULL;
    uint8_t t;
    if (rd_u8(r, &t))
        return EM_TRUNCATED;
    if (t == BIN_NULL)
        return 0;
    int32_t l;
    if (t != BIN_STRING || rd_i32(r, &l) || l < 0 || (size_t)l > r->n - r->pos || l >= 4096)
        return EM_BADLEN;
    if (!(*s = em_strndup((const char *)r->p + r->pos, (size_t)l)))
        return EM_NOMEM;
    r->pos += (size_t)l;
    return 0;
}

int sq_java_type(const char *n, size_t len)
{
    static const struct { const char *name; int t; } j[] = {
        {"java.lang.Integer", SQ_T_INT}, {"int", SQ_T_INT}, {"java.lang.Long", SQ_T_LONG},
        {"long", SQ_T_LONG}, {"java.lang.String", SQ_T_STRING}, {"java.lang.Boolean", SQ_T_BOOL},
        {"boolean", SQ_T_BOOL}, {"java.lang.Byte", SQ_T_BYTE}, {"byte", SQ_T_BYTE},
        {"java.lang.Short", SQ_T_SHORT}, {"short", SQ_T_SHORT}, {"java.lang.Float", SQ_T_FLOAT},
        {"float", SQ_T_FLOAT}, {"java.lang.Double", SQ_T_DOUBLE}, {"double", SQ_T_DOUBLE},
        {"java.math.BigDecimal", SQ_T_DECIMAL}, {"java.util.UUID", SQ_T_UUID},
        {"java.sql.Date", SQ_T_DATE}, {"java.sql.Time", SQ_T_TIME},
        {"java.sql.Timestamp", SQ_T_TIMESTAMP}, {"java.util.Date", SQ_T_TIMESTAMP},
        {"[B", SQ_T_BINARY},
    };
    for (size_t i = 0; i < sizeof j / sizeof j[0]; i++)
        if (strlen(j[i].name) == len && !memcmp(j[i].name, n, len))
            return j[i].t;
    return 0;
}

static char *upper_last(const char *s)
{
    const char *d = strrchr(s, '.');
    d = d ? d + 1 : s;
    char *u = em_strndup(d, strlen(d));
    for (char *c = u; c && *c; c++)
        *c = *c == '$' ? '_' : (char)toupper((unsigned char)*c);
    return u;
}

static void schema_of(const st_cache *ca, char *out, size_t sz)
{
    const st_cache_config *cfg = st_cache_cfg(ca);
    const char *s = cfg->sql_schema && *cfg->sql_schema ? cfg->sql_schema : NULL;
    size_t n;
    if (!s) {
        n = strlen(cfg->name) < sz - 1 ? strlen(cfg->name) : sz - 1;
        memcpy(out, cfg->name, n);
    } else if ((n = strlen(s)) >= 2 && s[0] == '"' && s[n - 1] == '"') {
        n = n - 2 < sz - 1 ? n - 2 : sz - 1;
        memcpy(out, s + 1, n);
    } else {
        n = n < sz - 1 ? n : sz - 1;
        for (size_t i = 0; i < n; i++)
            out[i] = (char)toupper((unsigned char)s[i]);
    }
    out[n] = 0;
}

typedef struct qfield { char *name, *type; uint8_t key, notnull; } qfield;

void sq_qeix_free(sq_qeix *x, uint32_t n)
{
    for (uint32_t i = 0; x && i < n; i++) {
        em_free(x[i].name);
        for (uint32_t j = 0; j < x[i].ncols; j++)
            em_free(x[i].cols[j]);
        em_free(x[i].cols);
    }
}

static int entities(rd *r0, st_cache *ca, int32_t cnt, sq_table **t, sq_table ***out, uint32_t *n);

static int one_entity(rd *r, const st_cache *ca, sq_table **out)
{
    char *kt = NULL, *vt = NULL, *tn = NULL, *kf = NULL, *vf = NULL;
    qfield *f = NULL;
    int32_t nf = 0, na = 0, ni = 0;
    char **alias = NULL;            /* per field: its alias or NULL */
    sq_table *t = NULL;
    int rc = rd_str(r, &kt);
    if (!rc) rc = rd_str(r, &vt);
    if (!rc) rc = rd_str(r, &tn);
    if (!rc) rc = rd_str(r, &kf);
    if (!rc) rc = rd_str(r, &vf);
    if (!rc) rc = rd_i32(r, &nf);
    if (!rc && (nf < 0 || nf > SQ_MAX_COLS))
        rc = EM_BADLEN;
    if (!rc && nf && (!(f = em_calloc((size_t)nf, sizeof *f)) || !(alias = em_calloc((size_t)nf, sizeof *alias))))
        rc = EM_NOMEM;
    for (int32_t i = 0; !rc && i < nf; i++) {
        int32_t prec, scale;
        size_t dl = 0;
        rc = rd_str(r, &f[i].name);
        if (!rc) rc = rd_str(r, &f[i].type);
        if (!rc) rc = rd_u8(r, &f[i].key);
        if (!rc) rc = rd_u8(r, &f[i].notnull);
        if (!rc && (r->pos >= r->n || bin_validate(r->p + r->pos, r->n - r->pos, &dl, 0)))
            rc = EM_BADLEN;
        r->pos += dl;               /* the default value: not applied yet */
        if (!rc) rc = rd_i32(r, &prec);
        if (!rc) rc = rd_i32(r, &scale);
        if (!rc && (!f[i].name || !f[i].type))
            rc = EM_INVAL;
    }
    if (!rc) rc = rd_i32(r, &na);
    if (!rc && (na < 0 || na > 4 * SQ_MAX_COLS))
        rc = EM_BADLEN;
    for (int32_t i = 0; !rc && i < na; i++) {
        char *fn = NULL, *al = NULL;
        rc = rd_str(r, &fn);
        if (!rc) rc = rd_str(r, &al);
        for (int32_t j = 0; !rc && fn && al && j < nf; j++)
            if (!strcmp(f[j].name, fn) && !alias[j]) {
                alias[j] = al;
                al = NULL;
            }
        em_free(fn);
        em_free(al);
    }
    if (!rc) rc = rd_i32(r, &ni);
    if (!rc && (ni < 0 || ni > 1024))
        rc = EM_BADLEN;
    sq_qeix *ix = NULL;
    uint32_t nix = 0;
    if (!rc && ni && !(ix = em_calloc((size_t)ni, sizeof *ix)))
        rc = EM_NOMEM;
    for (int32_t i = 0; !rc && i < ni; i++) {
        char *s = NULL;
        uint8_t kind, desc;
        int32_t inl, nfi;
        sq_qeix *x = &ix[nix++];
        rc = rd_str(r, &x->name);
        if (!rc) rc = rd_u8(r, &kind);
        if (!rc) rc = rd_i32(r, &inl);
        if (!rc) rc = rd_i32(r, &nfi);
        if (!rc && (nfi < 0 || nfi > SQ_MAX_COLS))
            rc = EM_BADLEN;
        if (!rc && nfi && !(x->cols = em_calloc((size_t)nfi, sizeof *x->cols)))
            rc = EM_NOMEM;
        /* Ignite's default name (QueryUtils.indexName): the table, then
         * each field with asc/desc, lower-cased, then "idx". */
        em_buf dn = EM_BUF_INIT;
        for (int32_t j = 0; !rc && j < nfi; j++) {
            rc = rd_str(r, &s);
            if (!rc) rc = rd_u8(r, &desc);
            if (!rc && !s)
                rc = EM_INVAL;
            if (!rc && !x->name)
                rc = em_buf_append(&dn, s, strlen(s)) || em_buf_append(&dn, desc ? "_desc_" : "_asc_", desc ? 6 : 5)
                     ? EM_NOMEM : 0;
            if (!rc)
                x->cols[x->ncols++] = s;
            else
                em_free(s);
        }
        if (!rc && !x->name && nfi) {
            char *tname = tn ? upper_last(tn) : upper_last(vt ? vt : "");
            size_t tl = tname ? strlen(tname) : 0;
            if (tname && (x->name = em_malloc(tl + 1 + dn.len + 4)) != NULL) {
                memcpy(x->name, tname, tl);
                x->name[tl] = '_';
                memcpy(x->name + tl + 1, dn.p, dn.len);
                memcpy(x->name + tl + 1 + dn.len, "idx", 4);
                for (char *c = x->name; *c; c++)
                    *c = isspace((unsigned char)*c) ? '_' : (char)tolower((unsigned char)*c);
            }
            em_free(tname);
            if (!x->name)
                rc = EM_NOMEM;
        }
        em_buf_free(&dn);
        /* Only ordered (SORTED) indexes exist here: a FULLTEXT or
         * GEOSPATIAL one is left out, as are empty ones. */
        if (!rc && (kind != 0 || !x->ncols)) {
            sq_qeix_free(x, 1);
            memset(x, 0, sizeof *x);
            nix--;
        }
    }
    if (!rc && !vt)
        rc = EM_INVAL;
    if (!rc && !(t = em_calloc(1, sizeof *t)))
        rc = EM_NOMEM;
    if (!rc) {
        char schema[SQ_MAX_NAME];
        schema_of(ca, schema, sizeof schema);
        atomic_store(&t->refs, 1);
        t->key_col = t->val_col = -1;
        t->schema = em_strndup(schema, strlen(schema));
        t->name = tn ? upper_last(tn) : upper_last(vt);
        t->cache_name = em_strndup(st_cache_cfg(ca)->name, strlen(st_cache_cfg(ca)->name));
        t->cache = (st_cache *)ca;
        t->cache_id = st_cache_id(ca);
        t->val_type = vt;
        vt = NULL;
        /* No key type (Node's SqlQueryEntriesExample): any key, kept as
         * its own bytes in _KEY. */
        t->key_sqtype = kt ? sq_java_type(kt, strlen(kt)) : SQ_T_OBJECT;
        t->key_wrapped = !t->key_sqtype;
        t->val_sqtype = sq_java_type(t->val_type, strlen(t->val_type));
        if (t->key_wrapped) {
            t->key_type = kt;
            kt = NULL;
            t->key_tid = bin_type_id(t->key_type, strlen(t->key_type));
        }
        t->val_tid = bin_type_id(t->val_type, strlen(t->val_type));
        t->cols = nf ? em_calloc((size_t)nf, sizeof *t->cols) : NULL;
        if (!t->schema || !t->name || !t->cache_name || (nf && !t->cols))
            rc = EM_NOMEM;
    }
    for (int32_t i = 0; !rc && i < nf; i++) {
        sq_col *c = &t->cols[t->ncols];
        c->name = alias[i] ? em_strndup(alias[i], strlen(alias[i])) : upper_last(f[i].name);
        for (char *p = c->name; p && *p; p++)
            *p = (char)toupper((unsigned char)*p);
        c->field = f[i].name;
        f[i].name = NULL;
        t->ncols++;
        if (!c->name)
            rc = EM_NOMEM;
        else {
            c->fid = bin_field_id(c->field, strlen(c->field));
            c->type = sq_java_type(f[i].type, strlen(f[i].type));
            if (!c->type)
                c->type = SQ_T_OBJECT;
            c->notnull = f[i].notnull;
            c->key = t->key_wrapped && f[i].key;
            if (kf && !strcmp(c->field, kf) && !t->key_wrapped) {
                c->alias = SQ_ALIAS_KEY;
                c->key = 1;
                c->type = t->key_sqtype;
                t->key_col = (int)t->ncols - 1;
            } else if (vf && !strcmp(c->field, vf) && t->val_sqtype) {
                c->alias = SQ_ALIAS_VAL;
                c->type = t->val_sqtype;
                t->val_col = (int)t->ncols - 1;
            }
        }
    }
    /* Index fields name binary fields (or aliases): as column names. */
    for (uint32_t i = 0; !rc && i < nix; i++)
        for (uint32_t j = 0; !rc && j < ix[i].ncols; j++) {
            const char *fn = ix[i].cols[j];
            const sq_col *hit = NULL;
            for (uint32_t k = 0; k < t->ncols && !hit; k++)
                if (!strcmp(t->cols[k].field, fn) || !strcasecmp(t->cols[k].name, fn))
                    hit = &t->cols[k];
            if (hit) {
                char *cn = em_strndup(hit->name, strlen(hit->name));
                if (!cn)
                    rc = EM_NOMEM;
                else {
                    em_free(ix[i].cols[j]);
                    ix[i].cols[j] = cn;
                }
            }
        }
    if (!rc && nix) {
        t->qeix = ix;
        t->nqeix = nix;
        ix = NULL;
    }
    sq_qeix_free(ix, nix);
    em_free(ix);
    for (int32_t i = 0; f && i < nf; i++) {
        em_free(f[i].name);
        em_free(f[i].type);
        em_free(alias[i]);
    }
    em_free(f);
    em_free(alias);
    em_free(kt);
    em_free(vt);
    em_free(tn);
    em_free(kf);
    em_free(vf);
    if (rc) {
        if (t)
            sq_table_free_new(t);
        return rc;
    }
    *out = t;
    return 0;
}

int sq_qe_tables(st_cache *ca, sq_table ***out, uint32_t *n)
{
    *out = NULL;
    *n = 0;
    st_cache_config cfg;            /* DDL may change the entities meanwhile */
    if (st_cache_cfg_copy(ca, &cfg))
        return EM_NOMEM;
    rd r = { cfg.query_entities, cfg.query_entities_len, 0 };
    int32_t cnt;
    sq_table **t = NULL;
    int rc = 0;
    if (!r.p || rd_i32(&r, &cnt) || cnt <= 0)
        goto out;
    rc = cnt > 64 ? EM_BADLEN : (t = em_calloc((size_t)cnt, sizeof *t)) ? 0 : EM_NOMEM;
    if (rc)
        goto out;
    rc = entities(&r, ca, cnt, t, out, n);
out:
    st_cache_config_free(&cfg);
    return rc;
}

static int entities(rd *r0, st_cache *ca, int32_t cnt, sq_table **t, sq_table ***out, uint32_t *n)
{
    rd r = *r0;
    uint32_t k = 0;
    int rc = 0;
    for (int32_t i = 0; i < cnt && !rc; i++)
        if ((rc = one_entity(&r, ca, &t[k])) == 0)
            k++;
    if (rc) {
        for (uint32_t i = 0; i < k; i++)
            sq_table_free_new(t[i]);
        em_free(t);
        return rc;
    }
    *out = t;
    *n = k;
    return 0;
}

/* ---- encoding: the catalog's tables back into query entities ------------ */

static int put_str(em_buf *b, const char *s)
{
    if (!s)
        return em_buf_put_u8(b, BIN_NULL);
    size_t n = strlen(s);
    if (em_buf_put_u8(b, BIN_STRING) || em_buf_put_le32(b, (uint32_t)n) || em_buf_append(b, s, n))
        return EM_NOMEM;
    return 0;
}

/* needs_alias: the column's name is not the one one_entity would give its
 * field without an alias. */
static int needs_alias(const sq_col *c)
{
    char *u = upper_last(c->field);
    int diff = !u || strcmp(u, c->name);
    em_free(u);
    return diff;
}

static int one_encode(const sq_table *t, em_buf *b)
{
    /* No key type (any key, kept as its own bytes) stays without one. */
    const char *kt = t->key_wrapped ? t->key_type
                     : t->key_col >= 0 ? sq_type_java(t->cols[t->key_col].type)
                     : t->key_sqtype == SQ_T_OBJECT ? NULL : sq_type_java(t->key_sqtype);
    int rc = put_str(b, kt) || put_str(b, t->val_type) || put_str(b, t->name) ||
             put_str(b, !t->key_wrapped && t->key_col >= 0 ? t->cols[t->key_col].field : NULL) ||
             put_str(b, t->val_col >= 0 ? t->cols[t->val_col].field : NULL) ||
             em_buf_put_le32(b, t->ncols);
    uint32_t na = 0;
    for (uint32_t i = 0; !rc && i < t->ncols; i++) {
        const sq_col *c = &t->cols[i];
        rc = put_str(b, c->field) || put_str(b, sq_type_java(c->type)) ||
             em_buf_put_u8(b, c->key) || em_buf_put_u8(b, c->notnull) ||
             em_buf_put_u8(b, BIN_NULL) || em_buf_put_le32(b, (uint32_t)-1) ||
             em_buf_put_le32(b, (uint32_t)-1);
        na += needs_alias(c);
    }
    rc = rc || em_buf_put_le32(b, na);
    for (uint32_t i = 0; !rc && i < t->ncols; i++)
        if (needs_alias(&t->cols[i]))
            rc = put_str(b, t->cols[i].field) || put_str(b, t->cols[i].name);
    rc = rc || em_buf_put_le32(b, t->nix);
    for (uint32_t i = 0; !rc && i < t->nix; i++) {
        const sq_index *ix = t->ix[i];
        rc = put_str(b, ix->name) || em_buf_put_u8(b, 0) ||        /* SORTED */
             em_buf_put_le32(b, (uint32_t)-1) || em_buf_put_le32(b, ix->ncols);
        for (uint32_t j = 0; !rc && j < ix->ncols; j++) {
            /* a column by its field's name (_KEY and _VAL as they are) */
            const char *fn = ix->cols[j].name;
            for (uint32_t k = 0; k < t->ncols; k++)
                if (!strcmp(t->cols[k].name, fn))
                    fn = t->cols[k].field;
            rc = put_str(b, fn) || em_buf_put_u8(b, 0);             /* ascending */
        }
    }
    return rc ? EM_NOMEM : 0;
}

int sq_qe_encode(sq_table *const *t, uint32_t n, em_buf *out)
{
    int rc = em_buf_put_le32(out, n) ? EM_NOMEM : 0;
    for (uint32_t i = 0; !rc && i < n; i++)
        rc = one_encode(t[i], out);
    return rc;
}
