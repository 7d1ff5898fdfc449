/* sq_cat.c - the catalog: tables over caches, as Ignite lays them out
 * (reference sql.md §1.3): CREATE TABLE makes cache SQL_<SCHEMA>_<TABLE>
 * (or CACHE_NAME) with sqlSchema = the schema, a value type named
 * VALUE_TYPE or SQL_<SCHEMA>_<TABLE>_<uuid>, upper-cased column names as
 * binary field names, and a key that is the raw PK value or (composite,
 * KEY_TYPE, WRAP_KEY) an object of <valueType>_KEY.  The binary types are
 * registered at DDL time, so key-value clients can read and write the same
 * entries at once.  The cache configuration carries the QueryEntity, so
 * GET_CONFIGURATION (1055) describes the table.
 *
 * The store has no cache lifecycle hooks yet, so a table whose cache was
 * destroyed by key-value DESTROY (1056) leaves the catalog lazily, at the
 * next snapshot.
 */
#include "sql/sql_int.h"

#include <stdio.h>
#include <string.h>
#include <strings.h>
#include <sys/random.h>

#include "util/err.h"
#include "util/hash.h"
#include "util/log.h"
#include "util/mem.h"

void sq_table_ref(sq_table *t) { atomic_fetch_add(&t->refs, 1); }

static void table_free(sq_table *t)
{
    for (uint32_t i = 0; i < t->ncols; i++) {
        em_free(t->cols[i].name);
        em_free(t->cols[i].field);
        em_free(t->cols[i].dflt);
    }
    em_free(t->cols);
    for (uint32_t i = 0; i < t->nix; i++)
        sq_ix_unref(t->ix[i]);
    sq_qeix_free(t->qeix, t->nqeix);
    em_free(t->qeix);
    em_free(t->schema);
    em_free(t->name);
    em_free(t->cache_name);
    em_free(t->key_type);
    em_free(t->val_type);
    em_free(t);
}

void sq_table_free_new(sq_table *t) { table_free(t); }

void sq_table_unref(sq_table *t)
{
    if (t && atomic_fetch_sub(&t->refs, 1) == 1)
        table_free(t);
}

sq_engine *sq_engine_new(st_store *st, bin_registry *reg)
{
    sq_engine *e = em_calloc(1, sizeof *e);
    if (!e)
        return NULL;
    e->st = st;
    e->reg = reg;
    e->next_serial = 1;
    e->query_mem = SQ_QUERY_MEM_DEFAULT;
    e->direct_agg = 1;
    sq_mem_install();               /* before SQLite's first use */
    /* SQLite's heap cap is process-wide: set it once unless the embedding
     * program chose one.  A query that needs more fails with SQLITE_NOMEM
     * instead of taking the node's memory (sorts, GROUP BY, recursive CTEs). */
    if (sqlite3_hard_heap_limit64(-1) == 0)
        sqlite3_hard_heap_limit64(SQ_HEAP_LIMIT);
    atomic_store(&e->epoch, 1);
    pthread_mutex_init(&e->mu, NULL);
    return e;
}

void sq_engine_free(sq_engine *e)
{
    if (!e)
        return;
    for (uint32_t i = 0; i < e->ntab; i++)
        sq_table_unref(e->tab[i]);
    em_free(e->tab);
    em_free(e->seen);
    sq_ix_free_all(e);
    pthread_mutex_destroy(&e->mu);
    em_free(e);
}

static void drop_table_indexes(sq_engine *e, const sq_table *t)
{
    for (uint32_t i = 0; i < t->nix; i++)
        sq_ix_detach(e, t->ix[i]);
}

/* drop_tables (under mu) takes the tables of cache c (NULL: of every
 * destroyed cache) out of the catalog. */
static void drop_tables(sq_engine *e, const st_cache *c)
{
    for (uint32_t i = 0; i < e->ntab;) {
        if (c ? e->tab[i]->cache == c : st_cache_destroyed(e->tab[i]->cache)) {
            drop_table_indexes(e, e->tab[i]);
            sq_table_unref(e->tab[i]);
            e->tab[i] = e->tab[--e->ntab];
            atomic_fetch_add(&e->epoch, 1);
        } else {
            i++;
        }
    }
}

/* prune drops tables whose cache is gone (caller holds mu). */
static void prune(sq_engine *e)
{
    for (uint32_t i = 0; i < e->nseen;)
        if (st_cache_destroyed(e->seen[i]))
            e->seen[i] = e->seen[--e->nseen];
        else
            i++;
    drop_tables(e, NULL);
}

int sq_cat_snapshot(sq_engine *e, sq_table ***out, uint32_t *n, uint64_t *epoch)
{
    pthread_mutex_lock(&e->mu);
    prune(e);
    sq_table **t = e->ntab ? em_malloc(e->ntab * sizeof *t) : NULL;
    if (e->ntab && !t) {
        pthread_mutex_unlock(&e->mu);
        return EM_NOMEM;
    }
    for (uint32_t i = 0; i < e->ntab; i++) {
        t[i] = e->tab[i];
        sq_table_ref(t[i]);
    }
    *out = t;
    *n = e->ntab;
    *epoch = atomic_load(&e->epoch);
    pthread_mutex_unlock(&e->mu);
    return 0;
}

void sq_cat_release(sq_table **t, uint32_t n)
{
    for (uint32_t i = 0; i < n; i++)
        sq_table_unref(t[i]);
    em_free(t);
}

static sq_table *find_locked(sq_engine *e, const char *schema, const char *name)
{
    for (uint32_t i = 0; i < e->ntab; i++)
        if (!strcmp(e->tab[i]->schema, schema) && !strcmp(e->tab[i]->name, name))
            return e->tab[i];
    return NULL;
}

static int grow(void **p, uint32_t *cap, uint32_t n, size_t elem)
{
    if (n < *cap)
        return 0;
    uint32_t nc = *cap ? *cap * 2 : 8;
    void *np = em_realloc(*p, nc * elem);
    if (!np)
        return EM_NOMEM;
    *p = np;
    *cap = nc;
    return 0;
}

static int seen(sq_engine *e, st_cache *c)
{
    for (uint32_t i = 0; i < e->nseen; i++)
        if (e->seen[i] == c)
            return 1;
    return 0;
}

static int mark_seen(sq_engine *e, st_cache *c)
{
    if (grow((void **)&e->seen, &e->capseen, e->nseen, sizeof *e->seen))
        return EM_NOMEM;
    e->seen[e->nseen++] = c;
    return 0;
}

static int define_types(sq_engine *e, sq_table *t, const sq_remote *r);
static int col_index(const sq_table *t, const char *name);
static sq_table *find_index(const sq_engine *e, const char *schema, const char *name, uint32_t *at);

/* add_qe_tables (under mu, from st_cache_each): a cache not seen yet gets
 * its QueryEntity tables.  A cache named SQL_<SCHEMA>_<TABLE> is taken for
 * one CREATE TABLE made (e.g. recovered from the WAL), so DROP TABLE works
 * on it; one with CACHE_NAME is not recognised yet. */
typedef struct discover_ctx {
    sq_engine *e;
    sq_table  *pend[64];            /* added tables whose entity lists indexes */
    uint32_t   npend;
} discover_ctx;

static void add_qe_tables(void *arg, st_cache *c)
{
    discover_ctx *x = arg;
    sq_engine *e = x->e;
    if (seen(e, c) || mark_seen(e, c))
        return;
    sq_table **t;
    uint32_t n;
    if (sq_qe_tables(c, &t, &n))
        return;                     /* a malformed entity list makes no table */
    for (uint32_t i = 0; i < n; i++) {
        char ddl_name[3 * SQ_MAX_NAME];
        snprintf(ddl_name, sizeof ddl_name, "SQL_%s_%s", t[i]->schema, t[i]->name);
        t[i]->from_ddl = !strcmp(ddl_name, t[i]->cache_name);
        /* A CREATE TABLE's types are registered by ember, not by a client,
         * so after a restart nothing else brings their metadata back:
         * define them again from the QueryEntity (same fields, same order,
         * so the same schema the stored values were written with).  Other
         * entities' types belong to their clients: registering them here
         * could make a client's own registration conflict. */
        if (t[i]->from_ddl && !t[i]->val_sqtype)
            define_types(e, t[i], NULL);
        if (find_locked(e, t[i]->schema, t[i]->name) ||
            grow((void **)&e->tab, &e->captab, e->ntab, sizeof *e->tab)) {
            sq_table_unref(t[i]);
            continue;
        }
        t[i]->serial = e->next_serial++;
        e->tab[e->ntab++] = t[i];
        atomic_fetch_add(&e->epoch, 1);
        if (t[i]->nqeix && x->npend < 64)
            x->pend[x->npend++] = t[i];
    }
    em_free(t);
}

static int index_add(sq_engine *e, sq_table *t, const char *name, const char *const *names,
                     uint32_t ncols, int persist, sq_table **out, char *msg, size_t msgsz);

/* build_qe_indexes (under mu) builds the indexes a table's entity lists,
 * outside the cache walk (building takes partition locks).  One that
 * cannot be built (an unknown column, a duplicate name) is left out and
 * logged: the table serves without it, as it did before it existed. */
static void build_qe_indexes(sq_engine *e, sq_table *t)
{
    sq_qeix *x = t->qeix;
    uint32_t nx = t->nqeix;
    t->qeix = NULL;                 /* t is released once a new version is out */
    t->nqeix = 0;
    for (uint32_t i = 0; i < nx; i++) {
        char msg[256] = "";
        uint32_t at;
        int rc = find_index(e, t->schema, x[i].name, &at) ? EM_INVAL : 0;
        if (!rc)
            rc = index_add(e, t, x[i].name, (const char *const *)x[i].cols, x[i].ncols, 0, &t,
                           msg, sizeof msg);
        if (rc)
            EM_WARN("SQL: index %s of table %s.%s left out: %s", x[i].name, t->schema, t->name,
                    msg[0] ? msg : em_strerror(rc));
    }
    sq_qeix_free(x, nx);
    em_free(x);
}

void sq_cat_refresh(sq_engine *e, st_cache *c)
{
    pthread_mutex_lock(&e->mu);
    drop_tables(e, c);
    for (uint32_t i = 0; i < e->nseen; i++)
        if (e->seen[i] == c) {
            e->seen[i] = e->seen[--e->nseen];
            break;
        }
    pthread_mutex_unlock(&e->mu);
    sq_cat_discover(e);             /* its tables again, from the new entities */
}

void sq_cat_discover(sq_engine *e)
{
    discover_ctx x = {.e = e};
    pthread_mutex_lock(&e->mu);
    prune(e);
    st_cache_each(e->st, add_qe_tables, &x);
    for (uint32_t i = 0; i < x.npend; i++)
        build_qe_indexes(e, x.pend[i]);
    pthread_mutex_unlock(&e->mu);
}

sq_table *sq_cat_by_serial(sq_engine *e, uint64_t serial)
{
    sq_table *r = NULL;
    pthread_mutex_lock(&e->mu);
    for (uint32_t i = 0; i < e->ntab && !r; i++)
        if (e->tab[i]->serial == serial)
            r = e->tab[i];
    if (r)
        sq_table_ref(r);
    pthread_mutex_unlock(&e->mu);
    return r;
}

sq_table *sq_cat_find(sq_engine *e, const char *schema, const char *name)
{
    sq_table *r = NULL;
    int n = 0;
    pthread_mutex_lock(&e->mu);
    for (uint32_t i = 0; i < e->ntab; i++)
        if (!strcasecmp(e->tab[i]->schema, schema) && !strcasecmp(e->tab[i]->name, name)) {
            r = e->tab[i];
            n++;
        }
    if (n != 1)
        r = NULL;
    if (r)
        sq_table_ref(r);
    pthread_mutex_unlock(&e->mu);
    return r;
}

sq_table *sq_cat_by_type(sq_engine *e, const char *schema, const char *type, size_t n)
{
    /* The simple name, '.' and '$' as '_', upper-cased: Ignite's table name
     * for a value type without a table name (QueryUtils.tableName). */
    char simple[SQ_MAX_NAME];
    const char *dot = type;
    for (size_t i = 0; i < n; i++)
        if (type[i] == '.')
            dot = type + i + 1;
    size_t sl = (size_t)(type + n - dot);
    if (sl >= sizeof simple)
        return NULL;
    for (size_t i = 0; i < sl; i++) {
        char c = dot[i] == '$' ? '_' : dot[i];
        simple[i] = (char)(c >= 'a' && c <= 'z' ? c - 32 : c);
    }
    simple[sl] = 0;
    sq_table *r = NULL;
    pthread_mutex_lock(&e->mu);
    prune(e);
    for (uint32_t i = 0; i < e->ntab && !r; i++) {
        sq_table *t = e->tab[i];
        if (strcmp(t->schema, schema))
            continue;
        if ((strlen(t->val_type) == n && !strncasecmp(t->val_type, type, n)) ||
            !strcmp(t->name, simple))
            r = t;
    }
    if (r)
        sq_table_ref(r);
    pthread_mutex_unlock(&e->mu);
    return r;
}

int sq_cat_schema_known(sq_engine *e, const char *schema)
{
    if (!strcmp(schema, "PUBLIC"))
        return 1;
    int known = 0;
    pthread_mutex_lock(&e->mu);
    for (uint32_t i = 0; i < e->ntab && !known; i++)
        known = !strcmp(e->tab[i]->schema, schema);
    pthread_mutex_unlock(&e->mu);
    /* Ignite makes a schema per cache with query entities; accepting every
     * cache's name is harmless (reference sql.md §1.3 "Schema"). */
    return known || st_cache_find(e->st, em_hash_java_str((const uint8_t *)schema, strlen(schema))) != NULL;
}

/* ---- CREATE TABLE -------------------------------------------------------- */

static char *sdup(const char *s) { return em_strndup(s, strlen(s)); }

/* persist_type makes a type the catalog defined durable, as a client's
 * PUT_BINARY_TYPE is: its metadata holds every schema its rows were
 * written with (ALTER TABLE adds one), so they stay readable after a
 * restart. */
static int persist_type(sq_engine *e, int32_t type_id, const sq_remote *r)
{
    if (!e->persist && !r)
        return 0;
    const bin_type *bt = bin_registry_get(e->reg, type_id);
    if (!bt)
        return EM_NOTFOUND;
    em_buf b = EM_BUF_INIT;
    int rc = bin_meta_encode(bt, &b);
    /* On a cluster every node needs the type (and persists it itself). */
    if (!rc)
        rc = r ? r->type_put(r->ctx, b.p, b.len) : e->persist(e->persist_arg, 1, b.p, b.len);
    em_buf_free(&b);
    return rc;
}

void sq_engine_set_query_memory(sq_engine *e, int64_t bytes)
{
    e->query_mem = bytes;
}

void sq_engine_set_direct_agg(sq_engine *e, int on)
{
    e->direct_agg = on;
}

uint64_t sq_engine_direct_aggs(sq_engine *e)
{
    return atomic_load_explicit(&e->direct_aggs, memory_order_relaxed);
}

void sq_engine_set_persist(sq_engine *e, int (*fn)(void *arg, int kind, const uint8_t *p, size_t n),
                           void *arg)
{
    e->persist = fn;
    e->persist_arg = arg;
}

/* define_types registers the value type and (wrapped) key type. */
int sq_cat_define(sq_engine *e, const sq_table *t, const sq_remote *r, int key,
                  const bin_desc **out)
{
    const char *names[SQ_MAX_COLS];
    int32_t codes[SQ_MAX_COLS], fids[SQ_MAX_COLS];
    uint32_t n = 0;
    for (uint32_t i = 0; i < t->ncols; i++)
        if (t->cols[i].key == key && !t->cols[i].alias) {
            names[n] = t->cols[i].field;
            codes[n++] = sq_type_code(t->cols[i].type);
        }
    /* Persisted only when this schema is new to the registry (after a
     * restart the log already holds it). */
    const char *tn = key ? t->key_type : t->val_type;
    if (!tn)
        return EM_NOTYPE;
    for (uint32_t i = 0; i < n; i++)
        fids[i] = bin_field_id(names[i], strlen(names[i]));
    const bin_type *had = bin_registry_get(e->reg, bin_type_id(tn, strlen(tn)));
    int known = had && bin_type_schema(had, bin_schema_id(fids, n)) != NULL;
    int rc = bin_registry_define(e->reg, tn, names, codes, n, out);
    if (!rc && !known)
        rc = persist_type(e, (*out)->type_id, r);
    return rc;
}

static int define_types(sq_engine *e, sq_table *t, const sq_remote *r)
{
    int rc = sq_cat_define(e, t, r, 0, &t->vdesc);
    if (!rc && t->key_wrapped)
        rc = sq_cat_define(e, t, r, 1, &t->kdesc);
    return rc;
}

static sq_table *table_from_ddl(const sq_ddl *d, const char *schema)
{
    sq_table *t = em_calloc(1, sizeof *t);
    if (!t)
        return NULL;
    atomic_store(&t->refs, 1);
    t->from_ddl = 1;
    t->key_col = -1;
    t->val_col = -1;
    char buf[3 * SQ_MAX_NAME + 64];
    t->schema = sdup(schema);
    t->name = sdup(d->table);
    snprintf(buf, sizeof buf, "SQL_%s_%s", schema, d->table);
    t->cache_name = sdup(d->cache_name[0] ? d->cache_name : buf);
    if (d->value_type[0]) {
        t->val_type = sdup(d->value_type);
    } else {
        uint8_t r[16] = {0};
        if (getrandom(r, sizeof r, 0) != (ssize_t)sizeof r)
            memcpy(r, &t, sizeof t);
        size_t l = strlen(buf);
        snprintf(buf + l, sizeof buf - l, "_%02x%02x%02x%02x_%02x%02x_%02x%02x_%02x%02x_"
                 "%02x%02x%02x%02x%02x%02x", r[0], r[1], r[2], r[3], r[4], r[5], (r[6] & 0x0f) | 0x40,
                 r[7], (r[8] & 0x3f) | 0x80, r[9], r[10], r[11], r[12], r[13], r[14], r[15]);
        t->val_type = sdup(buf);
    }
    uint32_t npk = 0;
    for (uint32_t i = 0; i < d->ncols; i++)
        npk += d->cols[i].pk;
    t->key_wrapped = d->wrap_key || d->key_type[0] || npk > 1;
    if (t->key_wrapped) {
        if (d->key_type[0]) {
            t->key_type = sdup(d->key_type);
        } else {
            snprintf(buf, sizeof buf, "%s_KEY", t->val_type);
            t->key_type = sdup(buf);
        }
    }
    t->cols = em_calloc(d->ncols, sizeof *t->cols);
    if (!t->schema || !t->name || !t->cache_name || !t->val_type || !t->cols ||
        (t->key_wrapped && !t->key_type)) {
        table_free(t);
        return NULL;
    }
    t->ncols = d->ncols;
    for (uint32_t i = 0; i < d->ncols; i++) {
        sq_col *c = &t->cols[i];
        c->name = sdup(d->cols[i].name);
        c->field = sdup(d->cols[i].name);
        c->dflt = d->cols[i].dflt[0] ? sdup(d->cols[i].dflt) : NULL;
        if (!c->name || !c->field || (d->cols[i].dflt[0] && !c->dflt)) {
            table_free(t);
            return NULL;
        }
        c->fid = bin_field_id(c->field, strlen(c->field));
        c->type = d->cols[i].type;
        c->key = d->cols[i].pk;
        c->notnull = d->cols[i].notnull || d->cols[i].pk;
        if (c->key && !t->key_wrapped) {
            t->key_col = (int)i;
            t->key_sqtype = c->type;
            c->alias = SQ_ALIAS_KEY;
        }
    }
    t->val_tid = bin_type_id(t->val_type, strlen(t->val_type));
    if (t->key_wrapped)
        t->key_tid = bin_type_id(t->key_type, strlen(t->key_type));
    return t;
}

static int cat_fail(char *msg, size_t msgsz, int rc, const char *fmt, const char *arg)
{
    snprintf(msg, msgsz, fmt, arg);
    return rc;
}

int sq_cat_create(sq_engine *e, const sq_ddl *d, const char *schema, const sq_remote *r,
                  char *msg, size_t msgsz)
{
    if (d->schema[0])
        schema = d->schema;
    if (!d->wrap_value)
        return cat_fail(msg, msgsz, EM_UNSUPPORTED, "%s",
                        "WRAP_VALUE=false is not supported by ember yet");
    sq_table *t = table_from_ddl(d, schema);
    if (!t)
        return EM_NOMEM;
    pthread_mutex_lock(&e->mu);
    prune(e);
    int rc = 0;
    if (find_locked(e, t->schema, t->name)) {
        rc = d->if_not_exists ? 0 : cat_fail(msg, msgsz, EM_INVAL, "Table already exists: %s", t->name);
        goto out;
    }
    if (e->ntab == e->captab) {
        uint32_t nc = e->captab ? e->captab * 2 : 8;
        sq_table **nt = em_realloc(e->tab, nc * sizeof *nt);
        if (!nt) {
            rc = EM_NOMEM;
            goto out;
        }
        e->tab = nt;
        e->captab = nc;
    }
    if ((rc = define_types(e, t, r)) != 0) {
        cat_fail(msg, msgsz, rc, "Failed to register binary type %s", t->val_type);
        goto out;
    }
    st_cache_config cfg;
    st_cache_config_init(&cfg);
    em_buf qe = EM_BUF_INIT;
    int said = 0;
    cfg.name = t->cache_name;
    cfg.cache_mode = d->template_replicated ? 1 : 2;
    cfg.backups = d->backups;
    cfg.atomicity_mode = d->atomic_tx ? 0 : 1;
    cfg.sql_schema = t->schema;
    cfg.data_region_name = d->data_region[0] ? (char *)d->data_region : NULL;
    cfg.group_name = d->cache_group[0] ? (char *)d->cache_group : NULL;
    if ((rc = sq_qe_encode(&t, 1, &qe)) == 0) {
        cfg.query_entities = qe.p;
        cfg.query_entities_len = (uint32_t)qe.len;
        if (!r) {
            rc = st_cache_create(e->st, &cfg, &t->cache);
        } else if ((rc = r->create(r->ctx, &cfg)) == 0) {
            /* started on every node, this one before the call returned */
            t->cache = st_cache_find(e->st, em_hash_java_str((const uint8_t *)cfg.name,
                                                             strlen(cfg.name)));
            rc = t->cache ? 0 : EM_NOCACHE;
        } else if (rc != EM_NOMEM) {
            snprintf(msg, msgsz, "%s", r->errmsg(r->ctx));
            said = 1;
        }
    }
    em_buf_free(&qe);               /* st_cache_create copied cfg */
    if (said)
        ;                           /* the cluster's words */
    else if (rc == EM_CACHEEXISTS)
        cat_fail(msg, msgsz, rc, "Cache already exists: %s", t->cache_name);
    else if (rc == EM_CONFIG)
        cat_fail(msg, msgsz, rc, "Failed to create cache %s: data region is not configured",
                 t->cache_name);
    else if (rc)
        cat_fail(msg, msgsz, rc, "Failed to create cache %s", t->cache_name);
    if (rc)
        goto out;
    t->cache_id = st_cache_id(t->cache);
    mark_seen(e, t->cache);         /* its QueryEntity is this table */
    t->serial = e->next_serial++;
    e->tab[e->ntab++] = t;
    t = NULL;
    atomic_fetch_add(&e->epoch, 1);
out:
    pthread_mutex_unlock(&e->mu);
    sq_table_unref(t);
    return rc;
}

/* ---- indexes -------------------------------------------------------------- */

/* find_index: the table of schema holding index name, and its position. */
static sq_table *find_index(const sq_engine *e, const char *schema, const char *name, uint32_t *at)
{
    for (uint32_t i = 0; i < e->ntab; i++) {
        sq_table *t = e->tab[i];
        if (strcmp(t->schema, schema))
            continue;
        for (uint32_t j = 0; j < t->nix; j++)
            if (!strcmp(t->ix[j]->name, name)) {
                *at = j;
                return t;
            }
    }
    return NULL;
}

static sq_table *table_copy(const sq_table *t, uint32_t extra);

/* publish replaces table t by its new version n (serial, epoch). */
static void publish(sq_engine *e, sq_table *t, sq_table *n)
{
    n->serial = e->next_serial++;
    for (uint32_t i = 0; i < e->ntab; i++)
        if (e->tab[i] == t)
            e->tab[i] = n;
    sq_table_unref(t);
    atomic_fetch_add(&e->epoch, 1);
}

/* qe_list appends the query entities of cache c as they will be once table
 * t is replaced by n (t NULL: n is new; n NULL: t goes).  Caller holds mu. */
static int qe_list(sq_engine *e, st_cache *c, const sq_table *t, sq_table *n, em_buf *out)
{
    sq_table *list[64];
    uint32_t k = 0;
    for (uint32_t i = 0; i < e->ntab && k < 64; i++)
        if (e->tab[i]->cache == c)
            list[k++] = e->tab[i] == t ? n : e->tab[i];
    if (!t && n && k < 64)
        list[k++] = n;
    uint32_t m = 0;
    for (uint32_t i = 0; i < k; i++)
        if (list[i])
            list[m++] = list[i];
    return sq_qe_encode(list, m, out);
}

/* qe_persist writes that list into the cache's configuration:
 * GET_CONFIGURATION shows it and, in a persistent region, the WAL logs it,
 * so the tables come back after a restart with their columns and indexes
 * (as Ignite keeps its schema with the cache).  Called before the change
 * is published, so a failure leaves both as they were. */
static int qe_persist(sq_engine *e, st_cache *c, const sq_table *t, sq_table *n)
{
    em_buf b = EM_BUF_INIT;
    int rc = qe_list(e, c, t, n, &b);
    if (!rc)
        rc = st_cache_set_qe(c, b.p, (uint32_t)b.len);
    em_buf_free(&b);
    return rc;
}

/* remote_change (called with mu held, returns with it released): on a
 * cluster, DDL that changes a table does not publish it here: the new
 * entity list goes to every node through the metadata group, and each
 * node (this one before set_qe returns) reads the cache's tables again. */
static int remote_change(sq_engine *e, const sq_remote *r, sq_table *t, sq_table *n,
                         char *msg, size_t msgsz)
{
    em_buf b = EM_BUF_INIT;
    st_cache *c = t->cache;
    int rc = qe_list(e, c, t, n, &b);
    pthread_mutex_unlock(&e->mu);
    if (!rc && (rc = r->set_qe(r->ctx, c, b.p, b.len)) != 0 && rc != EM_NOMEM)
        snprintf(msg, msgsz, "%s", r->errmsg(r->ctx));
    em_buf_free(&b);
    return rc;
}

/* index_add (under mu) builds index name over t's columns and publishes the
 * table's new version holding it (*out; t is then released).  Filled from
 * the entries the cache holds before it returns: writes go on, each
 * partition waits only while its own entries are read.  persist: write
 * the new entity list to the cache's configuration first. */
/* index_check: t can take an index over these columns. */
static int index_check(const sq_table *t, const char *const *names, uint32_t ncols, char *msg,
                       size_t msgsz)
{
    for (uint32_t i = 0; i < ncols; i++) {
        if (col_index(t, names[i]) < 0 && strcmp(names[i], "_KEY") && strcmp(names[i], "_VAL"))
            return cat_fail(msg, msgsz, EM_NOTFOUND, "Column doesn't exist: %s", names[i]);
        for (uint32_t j = 0; j < i; j++)
            if (!strcmp(names[j], names[i]))
                return cat_fail(msg, msgsz, EM_INVAL, "Column already indexed: %s", names[i]);
    }
    if (t->nix >= SQ_MAX_INDEXES)
        return cat_fail(msg, msgsz, EM_INVAL, "Too many indexes on table %s (limit 64)", t->name);
    return 0;
}

static int index_add(sq_engine *e, sq_table *t, const char *name, const char *const *names,
                     uint32_t ncols, int persist, sq_table **out, char *msg, size_t msgsz)
{
    int rc0 = index_check(t, names, ncols, msg, msgsz);
    if (rc0)
        return rc0;
    sq_index *ix = NULL;
    sq_table *n = NULL;
    int rc = sq_ix_new(t, name, names, ncols, &ix);
    if (!rc && !(n = table_copy(t, 0)))
        rc = EM_NOMEM;
    if (!rc && (rc = sq_ix_attach(e, t->cache, ix)) != 0 && rc == EM_NOMEM)
        cat_fail(msg, msgsz, rc, "Out of memory building index %s", name);
    if (!rc) {
        n->ix[n->nix++] = ix;
        sq_ix_ref(ix);
        if (persist && (rc = qe_persist(e, t->cache, t, n)) != 0) {
            cat_fail(msg, msgsz, rc, "Failed to save the index in the cache configuration (%s)",
                     em_strerror(rc));
            n->nix--;
            sq_ix_unref(ix);
            sq_ix_detach(e, ix);
        }
    }
    if (!rc) {
        publish(e, t, n);
        *out = n;
        n = NULL;
    }
    sq_ix_unref(ix);
    if (n)
        table_free(n);
    return rc;
}

/* CREATE INDEX and DROP INDEX make a new version of the table holding the
 * index and write the cache's query entities anew (qe_persist). */
int sq_cat_index(sq_engine *e, const sq_ddl *d, const char *schema, const sq_remote *r,
                 char *msg, size_t msgsz)
{
    if (d->schema[0])
        schema = d->schema;
    pthread_mutex_lock(&e->mu);
    prune(e);
    uint32_t at = 0;
    int rc = 0;
    sq_table *holder = find_index(e, schema, d->index, &at), *n = NULL;
    if (d->kind == SQ_DDL_DROP_INDEX) {
        if (!holder) {
            rc = d->if_exists ? 0 : cat_fail(msg, msgsz, EM_NOTFOUND, "Index doesn't exist: %s", d->index);
            goto out;
        }
        if (!(n = table_copy(holder, 0))) {
            rc = EM_NOMEM;
            goto out;
        }
        sq_index *ix = n->ix[at];
        n->ix[at] = n->ix[--n->nix];
        if (r) {
            rc = remote_change(e, r, holder, n, msg, msgsz);    /* unlocks */
            sq_ix_unref(ix);        /* the copy's ref, out of its array */
            table_free(n);
            return rc;
        }
        if ((rc = qe_persist(e, holder->cache, holder, n)) != 0) {
            cat_fail(msg, msgsz, rc, "Failed to save the cache configuration (%s)", em_strerror(rc));
            n->ix[n->nix++] = ix;   /* table_free drops this copy's ref */
            goto out;
        }
        publish(e, holder, n);
        n = NULL;
        sq_ix_detach(e, ix);
        sq_ix_unref(ix);
        goto out;
    }
    sq_table *t = find_locked(e, schema, d->table);
    if (!t) {
        rc = cat_fail(msg, msgsz, EM_NOTFOUND, "Table doesn't exist: %s", d->table);
        goto out;
    }
    const char *names[SQ_MAX_COLS];
    for (uint32_t i = 0; i < d->ncols; i++)
        names[i] = d->cols[i].name;
    if (holder) {
        /* the columns first, as before: an unknown one is the error */
        for (uint32_t i = 0; i < d->ncols; i++)
            if (col_index(t, names[i]) < 0 && strcmp(names[i], "_KEY") && strcmp(names[i], "_VAL")) {
                rc = cat_fail(msg, msgsz, EM_NOTFOUND, "Column doesn't exist: %s", names[i]);
                goto out;
            }
        rc = d->if_not_exists ? 0 : cat_fail(msg, msgsz, EM_INVAL, "Index already exists: %s", d->index);
        goto out;
    }
    if (r) {
        /* the entity list with the index: each node builds it itself */
        sq_index *ix = NULL;
        if ((rc = index_check(t, names, d->ncols, msg, msgsz)) != 0 ||
            (rc = sq_ix_new(t, d->index, names, d->ncols, &ix)) != 0)
            goto out;
        if (!(n = table_copy(t, 0))) {
            sq_ix_unref(ix);
            rc = EM_NOMEM;
            goto out;
        }
        n->ix[n->nix++] = ix;       /* the copy holds it from here */
        rc = remote_change(e, r, t, n, msg, msgsz);    /* unlocks */
        table_free(n);
        return rc;
    }
    sq_table *nt;
    rc = index_add(e, t, d->index, names, d->ncols, 1, &nt, msg, msgsz);
out:
    pthread_mutex_unlock(&e->mu);
    if (n)
        table_free(n);
    return rc;
}

int sq_cat_drop(sq_engine *e, const sq_ddl *d, const char *schema, const sq_remote *r,
                char *msg, size_t msgsz)
{
    if (d->schema[0])
        schema = d->schema;
    pthread_mutex_lock(&e->mu);
    prune(e);
    int rc = 0;
    sq_table *t = find_locked(e, schema, d->table);
    if (!t) {
        rc = d->if_exists ? 0 : cat_fail(msg, msgsz, EM_NOTFOUND, "Table doesn't exist: %s", d->table);
    } else if (!t->from_ddl) {
        rc = cat_fail(msg, msgsz, EM_INVAL, "Only cache created with CREATE TABLE may be removed "
                      "with DROP TABLE [cacheName=%s]", t->cache_name);
    } else {
        rc = r ? r->destroy(r->ctx, t->cache_id) : st_cache_destroy(e->st, t->cache_id);
        if (rc == EM_NOCACHE)
            rc = 0;
        if (rc && r && rc != EM_NOMEM) {
            snprintf(msg, msgsz, "%s", r->errmsg(r->ctx));
        } else if (rc) {
            cat_fail(msg, msgsz, rc, "Failed to destroy cache %s", t->cache_name);
        } else {
            for (uint32_t i = 0; i < e->ntab; i++)
                if (e->tab[i] == t) {
                    e->tab[i] = e->tab[--e->ntab];
                    break;
                }
            drop_table_indexes(e, t);
            sq_table_unref(t);
            atomic_fetch_add(&e->epoch, 1);
        }
    }
    pthread_mutex_unlock(&e->mu);
    return rc;
}

/* ---- ALTER TABLE ---------------------------------------------------------- */

/* table_copy: a new version of t with room for extra more columns. */
static sq_table *table_copy(const sq_table *t, uint32_t extra)
{
    sq_table *n = em_calloc(1, sizeof *n);
    if (!n)
        return NULL;
    *n = *t;
    atomic_store(&n->refs, 1);
    n->qeix = NULL;                 /* built already: the original's to free */
    n->nqeix = 0;
    n->schema = sdup(t->schema);
    n->name = sdup(t->name);
    n->cache_name = sdup(t->cache_name);
    n->key_type = t->key_type ? sdup(t->key_type) : NULL;
    n->val_type = sdup(t->val_type);
    n->cols = em_calloc(t->ncols + extra, sizeof *n->cols);
    n->ncols = 0;
    for (uint32_t i = 0; i < n->nix; i++)
        sq_ix_ref(n->ix[i]);
    int bad = !n->schema || !n->name || !n->cache_name || !n->val_type || !n->cols ||
              (t->key_type && !n->key_type);
    for (uint32_t i = 0; !bad && i < t->ncols; i++) {
        n->cols[i] = t->cols[i];
        n->cols[i].name = sdup(t->cols[i].name);
        n->cols[i].field = sdup(t->cols[i].field);
        n->cols[i].dflt = t->cols[i].dflt ? sdup(t->cols[i].dflt) : NULL;
        n->ncols++;
        bad = !n->cols[i].name || !n->cols[i].field || (t->cols[i].dflt && !n->cols[i].dflt);
    }
    if (bad) {
        table_free(n);
        return NULL;
    }
    return n;
}

static int col_index(const sq_table *t, const char *name)
{
    for (uint32_t i = 0; i < t->ncols; i++)
        if (!strcmp(t->cols[i].name, name))
            return (int)i;
    return -1;
}

/* alter_cols applies d to the copy n; 0, 1 (nothing to do) or an error. */
static int alter_cols(sq_table *n, const sq_ddl *d, char *msg, size_t msgsz)
{
    int changed = 0;
    for (uint32_t j = 0; j < d->ncols; j++) {
        const char *cn = d->cols[j].name;
        int ci = col_index(n, cn);
        if (d->kind == SQ_DDL_ADD_COLUMN) {
            if (ci >= 0) {
                if (d->col_if)
                    continue;
                return cat_fail(msg, msgsz, EM_INVAL, "Column already exists: %s", cn);
            }
            sq_col *c = &n->cols[n->ncols];
            memset(c, 0, sizeof *c);
            c->name = sdup(cn);
            c->field = sdup(cn);
            if (!c->name || !c->field) {
                em_free(c->name);
                em_free(c->field);
                return EM_NOMEM;
            }
            c->fid = bin_field_id(c->field, strlen(c->field));
            c->type = d->cols[j].type;
            c->notnull = d->cols[j].notnull;
            n->ncols++;
            if (d->cols[j].dflt[0] && !(c->dflt = sdup(d->cols[j].dflt)))
                return EM_NOMEM;
        } else {
            if (ci < 0) {
                if (d->col_if)
                    continue;
                return cat_fail(msg, msgsz, EM_INVAL, "Column doesn't exist: %s", cn);
            }
            if (n->cols[ci].key || n->cols[ci].alias)
                return cat_fail(msg, msgsz, EM_INVAL, "Cannot drop column \"%s\" because it is a part "
                                "of the cache key", cn);
            for (uint32_t x = 0; x < n->nix; x++)
                for (uint32_t y = 0; y < n->ix[x]->ncols; y++)
                    if (!strcmp(n->ix[x]->cols[y].name, cn)) {
                        snprintf(msg, msgsz, "Cannot drop column \"%s\" because an index exists "
                                 "(\"%s\") that uses the column.", cn, n->ix[x]->name);
                        return EM_INVAL;
                    }
            em_free(n->cols[ci].name);
            em_free(n->cols[ci].field);
            em_free(n->cols[ci].dflt);
            memmove(&n->cols[ci], &n->cols[ci + 1], (n->ncols - (uint32_t)ci - 1) * sizeof *n->cols);
            n->ncols--;
            if (n->key_col > ci)
                n->key_col--;
            if (n->val_col > ci)
                n->val_col--;
        }
        changed = 1;
    }
    uint32_t nval = 0;
    for (uint32_t i = 0; i < n->ncols; i++)
        nval += !n->cols[i].key && !n->cols[i].alias;
    if (!nval && !n->val_sqtype)
        return cat_fail(msg, msgsz, EM_INVAL, "%s", "Cannot drop column: the table must keep at "
                        "least one non PRIMARY KEY column");
    return changed ? 0 : 1;
}

int sq_cat_alter(sq_engine *e, const sq_ddl *d, const char *schema, const sq_remote *r,
                 char *msg, size_t msgsz)
{
    if (d->schema[0])
        schema = d->schema;
    pthread_mutex_lock(&e->mu);
    prune(e);
    int rc = 0;
    sq_table *t = find_locked(e, schema, d->table), *n = NULL;
    if (!t) {
        rc = d->if_exists ? 0 : cat_fail(msg, msgsz, EM_NOTFOUND, "Table doesn't exist: %s", d->table);
        goto out;
    }
    if (t->val_sqtype) {
        rc = cat_fail(msg, msgsz, EM_UNSUPPORTED, "%s", "ALTER TABLE on a table whose value is an "
                      "SQL type is not supported");
        goto out;
    }
    if (!(n = table_copy(t, d->ncols))) {
        rc = EM_NOMEM;
        goto out;
    }
    if ((rc = alter_cols(n, d, msg, msgsz)) != 0) {
        if (rc == 1)
            rc = 0;                 /* IF [NOT] EXISTS made it a no-op */
        goto out;
    }
    /* Ignite adds the field to the binary type (the metadata is a union:
     * dropped fields stay in it, entries keep their bytes). */
    if ((rc = define_types(e, n, r)) != 0) {
        cat_fail(msg, msgsz, rc, "Failed to register binary type %s (a field of that name has "
                 "another type)", n->val_type);
        goto out;
    }
    if (r) {
        rc = remote_change(e, r, t, n, msg, msgsz);    /* unlocks */
        table_free(n);
        return rc;
    }
    if ((rc = qe_persist(e, t->cache, t, n)) != 0) {
        cat_fail(msg, msgsz, rc, "Failed to save the cache configuration (%s)", em_strerror(rc));
        goto out;
    }
    publish(e, t, n);
    n = NULL;
out:
    pthread_mutex_unlock(&e->mu);
    if (n)
        table_free(n);
    return rc;
}
