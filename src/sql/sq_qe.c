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
    for (int32_t i = 0; !rc && i < ni; i++) {
        char *s = NULL;
        uint8_t b;
        int32_t inl, nfi;
        rc = rd_str(r, &s);
        em_free(s);
        if (!rc) rc = rd_u8(r, &b);
        if (!rc) rc = rd_i32(r, &inl);
        if (!rc) rc = rd_i32(r, &nfi);
        if (!rc && (nfi < 0 || nfi > SQ_MAX_COLS))
            rc = EM_BADLEN;
        for (int32_t j = 0; !rc && j < nfi; j++) {
            rc = rd_str(r, &s);
            em_free(s);
            if (!rc) rc = rd_u8(r, &b);
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
    const st_cache_config *cfg = st_cache_cfg(ca);
    *out = NULL;
    *n = 0;
    rd r = { cfg->query_entities, cfg->query_entities_len, 0 };
    int32_t cnt;
    if (!r.p || rd_i32(&r, &cnt) || cnt <= 0)
        return 0;
    if (cnt > 64)
        return EM_BADLEN;
    sq_table **t = em_calloc((size_t)cnt, sizeof *t);
    if (!t)
        return EM_NOMEM;
    int rc = 0;
    uint32_t k = 0;
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
