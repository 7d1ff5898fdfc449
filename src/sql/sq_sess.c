/* sq_sess.c - a session's SQLite connections (reference sql.md §3.3, §3.4):
 * one in-memory connection per current schema, with that schema ATTACHed
 * first so unqualified names resolve to it and the others reachable as
 * SCHEMA.TABLE; each connection catches up with the catalog lazily before
 * a statement (CREATE/DROP of its virtual tables).  Connections are
 * hardened: no double-quoted strings, defensive mode, no extensions, an
 * authorizer that lets only ember's own statements change schemas, limits
 * on SQL length, variables and depth, and a progress handler for timeouts.
 * Sorts, DISTINCT and temporary b-trees stay in memory (temp_store=MEMORY)
 * under the per-query quota (sq_mem.c) instead of spilling to files on a
 * disk a hostile query could fill.
 */
#include "sql/sql_int.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "util/clock.h"
#include "util/err.h"
#include "util/mem.h"

int sq_fail(sq_sess *s, int rc, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(s->msg, sizeof s->msg, fmt, ap);
    va_end(ap);
    return rc;
}

const char *sq_errmsg(const sq_sess *s) { return s->msg; }

static int progress(void *arg)
{
    sq_db *d = arg;
    if (atomic_load_explicit(d->cancel, memory_order_relaxed))
        return 1;
    if (!d->deadline_ns && !d->budget_until)
        return 0;
    uint64_t now = em_now_ns();
    if (d->budget_until && now > d->budget_until) {
        d->over_budget = 1;
        return 1;
    }
    return d->deadline_ns && now > d->deadline_ns;
}

void sq_sess_set_remote(sq_sess *s, const sq_remote *r)
{
    s->rem = r;
}

void sq_sess_set_txkv(sq_sess *s, const sq_remote *r)
{
    s->txkv = r;
}

int sq_sess_cancelled(const sq_sess *s)
{
    return atomic_load_explicit(&s->cancel, memory_order_relaxed);
}

void sq_sess_cancel(sq_sess *s)
{
    atomic_store(&s->cancel, 1);
}

static int authorize(void *arg, int op, const char *a, const char *b, const char *c, const char *e)
{
    (void)a; (void)b; (void)c; (void)e;
    sq_db *d = arg;
    if (d->internal)
        return SQLITE_OK;
    if (op == SQLITE_READ && d->collect && d->nreads < SQ_MAX_READS && a && b) {
        sq_read *r = &d->reads[d->nreads++];
        snprintf(r->db, sizeof r->db, "%s", c ? c : "main");
        snprintf(r->tab, sizeof r->tab, "%s", a);
        snprintf(r->col, sizeof r->col, "%s", b);
    }
    switch (op) {
    case SQLITE_ATTACH: case SQLITE_DETACH: case SQLITE_PRAGMA:
    case SQLITE_CREATE_INDEX: case SQLITE_CREATE_TABLE: case SQLITE_CREATE_TEMP_INDEX:
    case SQLITE_CREATE_TEMP_TABLE: case SQLITE_CREATE_TEMP_TRIGGER: case SQLITE_CREATE_TEMP_VIEW:
    case SQLITE_CREATE_TRIGGER: case SQLITE_CREATE_VIEW: case SQLITE_CREATE_VTABLE:
    case SQLITE_DROP_INDEX: case SQLITE_DROP_TABLE: case SQLITE_DROP_TEMP_INDEX:
    case SQLITE_DROP_TEMP_TABLE: case SQLITE_DROP_TEMP_TRIGGER: case SQLITE_DROP_TEMP_VIEW:
    case SQLITE_DROP_TRIGGER: case SQLITE_DROP_VIEW: case SQLITE_DROP_VTABLE:
    case SQLITE_ALTER_TABLE: case SQLITE_TRANSACTION: case SQLITE_SAVEPOINT:
    case SQLITE_ANALYZE: case SQLITE_REINDEX:
        return SQLITE_DENY;
    default:
        return SQLITE_OK;
    }
}

static int run(sq_db *d, const char *sql)
{
    d->internal = 1;
    int rc = sqlite3_exec(d->db, sql, NULL, NULL, NULL);
    d->internal = 0;
    return rc;
}

static void db_close(sq_db *d)
{
    sq_stmt_clear(d);
    if (d->db)
        sqlite3_close_v2(d->db);
    for (uint32_t i = 0; i < d->nser; i++)
        sqlite3_free(d->names[i]);
    em_free(d->serials);
    em_free(d->names);
    memset(d, 0, sizeof *d);
}

static int db_open(sq_sess *s, sq_db *d, const char *schema)
{
    memset(d, 0, sizeof *d);
    int rc = sqlite3_open_v2(":memory:", &d->db, SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE |
                             SQLITE_OPEN_MEMORY | SQLITE_OPEN_NOMUTEX | SQLITE_OPEN_PRIVATECACHE,
                             NULL);
    if (rc != SQLITE_OK) {
        db_close(d);
        return sq_fail(s, EM_NOMEM, "Failed to open an SQL connection");
    }
    sqlite3 *db = d->db;
    sqlite3_db_config(db, SQLITE_DBCONFIG_DQS_DML, 0, NULL);
    sqlite3_db_config(db, SQLITE_DBCONFIG_DQS_DDL, 0, NULL);
    sqlite3_db_config(db, SQLITE_DBCONFIG_DEFENSIVE, 1, NULL);
    sqlite3_db_config(db, SQLITE_DBCONFIG_TRUSTED_SCHEMA, 0, NULL);
    sqlite3_db_config(db, SQLITE_DBCONFIG_ENABLE_LOAD_EXTENSION, 0, NULL);
    sqlite3_limit(db, SQLITE_LIMIT_SQL_LENGTH, (int)SQ_MAX_SQL * 2);
    sqlite3_limit(db, SQLITE_LIMIT_VARIABLE_NUMBER, SQ_MAX_ARGS);
    sqlite3_limit(db, SQLITE_LIMIT_EXPR_DEPTH, 200);
    sqlite3_limit(db, SQLITE_LIMIT_COMPOUND_SELECT, 100);
    sqlite3_limit(db, SQLITE_LIMIT_LENGTH, 64 << 20);
    snprintf(d->schema, sizeof d->schema, "%s", schema);
    char *att = sqlite3_mprintf("PRAGMA case_sensitive_like=ON; PRAGMA temp_store=MEMORY; ATTACH ':memory:' AS \"%w\"", schema);
    if (!att || sq_vtab_register(db, s) != SQLITE_OK || sq_func_register(db) != SQLITE_OK ||
        run(d, att) != SQLITE_OK) {
        sqlite3_free(att);
        db_close(d);
        return sq_fail(s, EM_NOMEM, "Failed to open an SQL connection");
    }
    sqlite3_free(att);
    sqlite3_set_authorizer(db, authorize, d);
    d->cancel = &s->cancel;
    sqlite3_progress_handler(db, 1000, progress, d);
    return 0;
}

/* attached: is schema attached to d? (schema names are case-sensitive in
 * ember's catalog; SQLite compares them without case.) */
static int attached(sq_db *d, const char *schema)
{
    for (int i = 0;; i++) {
        const char *n = sqlite3_db_name(d->db, i);
        if (!n)
            return 0;
        if (!strcmp(n, schema))
            return 1;
    }
}

/* sync brings d's virtual tables to the catalog's current set.  A table
 * that cannot be dropped now (a cursor reads it) is retried next time. */
static int sync(sq_sess *s, sq_db *d)
{
    uint64_t ep = atomic_load(&s->eng->epoch);
    if (d->epoch == ep)
        return 0;
    sq_table **t;
    uint32_t n;
    int rc = sq_cat_snapshot(s->eng, &t, &n, &ep);
    if (rc)
        return sq_fail(s, rc, "Out of memory");
    sq_stmt_flush(d);
    int clean = 1;
    for (uint32_t i = 0; i < d->nser;) {
        int live = 0;
        for (uint32_t j = 0; j < n && !live; j++)
            live = t[j]->serial == d->serials[i];
        if (live) {
            i++;
            continue;
        }
        char *sql = sqlite3_mprintf("DROP TABLE %s", d->names[i]);
        int r = sql ? run(d, sql) : SQLITE_NOMEM;
        sqlite3_free(sql);
        if (r != SQLITE_OK) {
            clean = 0;
            i++;
            continue;
        }
        sqlite3_free(d->names[i]);
        d->names[i] = d->names[d->nser - 1];
        d->serials[i] = d->serials[--d->nser];
    }
    for (uint32_t j = 0; j < n; j++) {
        int have = 0;
        for (uint32_t i = 0; i < d->nser && !have; i++)
            have = d->serials[i] == t[j]->serial;
        if (have)
            continue;
        if (!attached(d, t[j]->schema)) {
            char *sql = sqlite3_mprintf("ATTACH ':memory:' AS \"%w\"", t[j]->schema);
            int r = sql ? run(d, sql) : SQLITE_NOMEM;
            sqlite3_free(sql);
            if (r != SQLITE_OK) {
                clean = 0;          /* over SQLite's 10 attached schemas */
                continue;
            }
        }
        if (d->nser == d->capser) {
            uint32_t nc = d->capser ? d->capser * 2 : 8;
            uint64_t *ns = em_realloc(d->serials, nc * sizeof *ns);
            if (ns) d->serials = ns;
            char **nn = ns ? em_realloc(d->names, nc * sizeof *nn) : NULL;
            if (nn) d->names = nn;
            if (!ns || !nn) {
                rc = sq_fail(s, EM_NOMEM, "Out of memory");
                break;
            }
            d->capser = nc;
        }
        char *name = sqlite3_mprintf("\"%w\".\"%w\"", t[j]->schema, t[j]->name);
        char *sql = name ? sqlite3_mprintf("CREATE VIRTUAL TABLE %s USING ember(%llu)", name,
                                           (unsigned long long)t[j]->serial) : NULL;
        int r = sql ? run(d, sql) : SQLITE_NOMEM;
        sqlite3_free(sql);
        if (r != SQLITE_OK) {
            sqlite3_free(name);
            clean = 0;
            continue;
        }
        d->serials[d->nser] = t[j]->serial;
        d->names[d->nser++] = name;
    }
    sq_cat_release(t, n);
    if (clean && !rc)
        d->epoch = ep;
    return rc;
}

/* sq_sess_db: the connection for schema, opened or recycled, synced. */
int sq_sess_db(sq_sess *s, const char *schema, sq_db **out)
{
    sq_db *d = NULL, *lru = NULL;
    for (int i = 0; i < SQ_MAX_DBS && !d; i++) {
        sq_db *x = &s->dbs[i];
        if (x->db && !strcmp(x->schema, schema))
            d = x;
        else if (!x->db && (!lru || lru->db))
            lru = x;
        else if (x->db && !x->busy && (!lru || (lru->db && x->used < lru->used)))
            lru = x;
    }
    if (!d) {
        if (!lru)
            return sq_fail(s, EM_TOOMANY, "Too many schemas in use by open cursors (limit %d)",
                           SQ_MAX_DBS);
        db_close(lru);
        int rc = db_open(s, lru, schema);
        if (rc)
            return rc;
        d = lru;
    }
    d->used = ++s->tick;
    int rc = sync(s, d);
    if (rc)
        return rc;
    *out = d;
    return 0;
}

sq_sess *sq_sess_new(sq_engine *e)
{
    sq_sess *s = em_calloc(1, sizeof *s);
    if (s)
        s->eng = e;
    return s;
}

void sq_sess_free(sq_sess *s)
{
    if (!s)
        return;
    while (s->ncur)
        sq_cursor_close(s, s->cur[s->ncur - 1]);
    em_free(s->cur);
    for (int i = 0; i < SQ_MAX_DBS; i++)
        db_close(&s->dbs[i]);
    em_buf_free(&s->sqlbuf);
    em_free(s);
}
