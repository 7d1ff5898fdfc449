/* sq_exec.c - running a statement (reference sql.md §4.3): schema check,
 * statement-type check, DDL through ember's parser, queries and DML through
 * the pre-pass and SQLite, parameters, timeouts, pages with a lookahead row
 * and cursors.  QUERY_SQL's (2002) SQL is generated here as H2Utils
 * .generateFieldsQueryString does (§1.3 end).
 *
 * SQL runs on the calling thread - for emberd the network loop thread (a
 * first cut): each call into SQLite is bounded by the query timeout, or
 * SQ_DEFAULT_STEP_MS when the client sets none, so one query cannot stall
 * the loop's other clients forever.  Moving SQL to its own threads is the
 * follow-up (§4.6).
 */
#include "sql/sql_int.h"

#include <ctype.h>
#include <stdio.h>
#include <string.h>

#include "util/clock.h"
#include "util/err.h"
#include "util/mem.h"

/* ---- cursors -------------------------------------------------------------- */

static int cursor_add(sq_sess *s, sq_cursor *c)
{
    if (s->ncur == s->capcur) {
        uint32_t nc = s->capcur ? s->capcur * 2 : 8;
        sq_cursor **n = em_realloc(s->cur, nc * sizeof *n);
        if (!n)
            return EM_NOMEM;
        s->cur = n;
        s->capcur = nc;
    }
    s->cur[s->ncur++] = c;
    return 0;
}

static void cursor_free(sq_cursor *c)
{
    if (c->st) {
        sq_stmt_release(c->db, c->ent, c->st);
        c->db->busy--;
    }
    for (uint32_t i = 0; c->names && i < c->ncols; i++)
        em_free(c->names[i]);
    em_free(c->names);
    em_free(c->types);
    sq_agg_free(c->agg);
    em_free(c);
}

void sq_cursor_close(sq_sess *s, sq_cursor *c)
{
    for (uint32_t i = 0; i < s->ncur; i++)
        if (s->cur[i] == c) {
            s->cur[i] = s->cur[--s->ncur];
            break;
        }
    cursor_free(c);
}

sq_cursor *sq_cursor_find(sq_sess *s, int64_t id)
{
    for (uint32_t i = 0; i < s->ncur; i++)
        if (s->cur[i]->id == id)
            return s->cur[i];
    return NULL;
}

uint32_t    sq_sess_ncursors(const sq_sess *s) { return s->ncur; }
uint32_t    sq_cursor_ncols(const sq_cursor *c) { return c->ncols; }
const char *sq_cursor_colname(const sq_cursor *c, uint32_t i) { return c->names[i]; }
int64_t     sq_cursor_id(const sq_cursor *c) { return c->id; }

static sq_cursor *cursor_new(int64_t id, uint32_t ncols)
{
    sq_cursor *c = em_calloc(1, sizeof *c);
    if (!c)
        return NULL;
    c->id = id;
    c->ncols = ncols;
    c->names = em_calloc(ncols ? ncols : 1, sizeof *c->names);
    c->types = em_calloc(ncols ? ncols : 1, sizeof *c->types);
    if (!c->names || !c->types) {
        cursor_free(c);
        return NULL;
    }
    return c;
}

/* update_cursor: the DML/DDL result, one column UPDATED (java.lang.Long). */
static int update_cursor(sq_sess *s, int64_t id, int64_t n, sq_cursor **out)
{
    sq_cursor *c = cursor_new(id, 1);
    if (!c || !(c->names[0] = em_strndup("UPDATED", 7))) {
        if (c) cursor_free(c);
        return sq_fail(s, EM_NOMEM, "Out of memory");
    }
    c->is_update = 1;
    c->updated = n;
    c->types[0] = SQ_T_LONG;
    if (cursor_add(s, c)) {
        cursor_free(c);
        return sq_fail(s, EM_NOMEM, "Out of memory");
    }
    *out = c;
    return 0;
}

/* ---- errors ------------------------------------------------------------- */

static int step_fail(sq_sess *s, sqlite3 *db, int rc)
{
    if (rc == SQLITE_INTERRUPT)
        return sq_fail(s, EM_TIMEOUT, "%s", SQ_CANCELLED);
    if (rc == SQLITE_NOMEM)
        return sq_fail(s, EM_NOMEM, "Out of memory");
    return sq_fail(s, EM_INVAL, "%s", sqlite3_errmsg(db));
}

/* quota_fail: the query's SQLite heap passed its quota (sq_mem.c); Ignite's
 * words for its own per-query memory quota. */
static int quota_fail(sq_sess *s)
{
    return sq_fail(s, EM_MEMLIMIT, "SQL query ran out of memory: Query quota was exceeded "
                   "(limit %lld bytes per query).", (long long)s->eng->query_mem);
}

static void arm(sq_db *d, int64_t timeout_ms)
{
    int64_t ms = timeout_ms > 0 ? timeout_ms : SQ_DEFAULT_STEP_MS;
    d->deadline_ns = em_now_ns() + (uint64_t)ms * 1000000u;
}

/* ---- QUERY_SQL: SELECT <t>._KEY, <t>._VAL FROM <t> [WHERE] <rest> -------- */

static int gen_kv_sql(sq_sess *s, const sq_query *q, const char *schema, em_buf *out)
{
    sq_table *t = sq_cat_by_type(s->eng, schema, q->kv_type, q->kv_type_len);
    if (!t) {
        if (s->rem)
            s->rem->sync(s->rem->ctx);
        sq_cat_discover(s->eng);
        t = sq_cat_by_type(s->eng, schema, q->kv_type, q->kv_type_len);
    }
    if (!t)
        return sq_fail(s, EM_NOTFOUND, "Failed to find SQL table for type: %.*s",
                       (int)(q->kv_type_len < 128 ? q->kv_type_len : 128), q->kv_type);
    const char *p = q->sql, *e = q->sql + q->sql_len;
    while (p < e && isspace((unsigned char)*p)) p++;
    char alias[SQ_MAX_NAME] = "";
    if (e - p >= 6 && !strncasecmp(p, "SELECT", 6)) {
        const char *r = p + 6;
        while (r < e && isspace((unsigned char)*r)) r++;
        if (r < e && *r == '*') {
            p = r + 1;
        } else {
            const char *a = r;
            while (r < e && (isalnum((unsigned char)*r) || *r == '_')) r++;
            if (r > a && r + 1 < e && r[0] == '.' && r[1] == '*' && (size_t)(r - a) < sizeof alias) {
                memcpy(alias, a, (size_t)(r - a));
                alias[r - a] = 0;
                p = r + 2;
            } else {
                sq_table_unref(t);
                return sq_fail(s, EM_INVAL, "Only queries starting with 'SELECT *' and "
                               "'SELECT alias.*' are supported (rewrite your query or use "
                               "SqlFieldsQuery instead): %.*s", (int)(q->sql_len < 200 ? q->sql_len : 200),
                               q->sql);
            }
        }
        while (p < e && isspace((unsigned char)*p)) p++;
    }
    char from[3 * SQ_MAX_NAME];
    snprintf(from, sizeof from, "\"%s\".\"%s\"", t->schema, t->name);
    int rc = 0;
    em_buf_reset(out);
    char head[4 * SQ_MAX_NAME];
    snprintf(head, sizeof head, "SELECT %s._KEY, %s._VAL ", alias[0] ? alias : from,
             alias[0] ? alias : from);
    rc = em_buf_append(out, head, strlen(head));
    size_t rl = (size_t)(e - p);
    if (!rc && !(rl >= 4 && !strncasecmp(p, "FROM", 4) && (rl == 4 || !isalnum((unsigned char)p[4])))) {
        int kw = (rl >= 5 && !strncasecmp(p, "WHERE", 5)) || (rl >= 5 && !strncasecmp(p, "ORDER", 5)) ||
                 (rl >= 5 && !strncasecmp(p, "LIMIT", 5));
        rc = em_buf_append(out, "FROM ", 5) || em_buf_append(out, from, strlen(from)) ||
             em_buf_append(out, kw || !rl ? " " : " WHERE ", kw || !rl ? 1 : 7);
    }
    if (!rc)
        rc = em_buf_append(out, p, rl);
    sq_table_unref(t);
    return rc ? sq_fail(s, EM_NOMEM, "Out of memory") : 0;
}

/* ---- result types of MIN/MAX ------------------------------------------------ */

/* agg_type: for a result named MIN(col) or MAX(col) (as written, no alias),
 * the type of col among the columns the statement reads, if they agree;
 * SQLite types only direct column references (decltype). */
static int agg_type(sq_db *d, const char *name)
{
    if (!name || (strncmp(name, "MIN(", 4) && strncmp(name, "MAX(", 4)))
        return 0;
    const char *p = name + 4, *id;
    while (*p == ' ') p++;
    id = p;
    while (isalnum((unsigned char)*p) || *p == '_' || *p == '.') p++;
    const char *end = p;
    while (*p == ' ') p++;
    if (end == id || p[0] != ')' || p[1])
        return 0;
    for (const char *q = id; q < end; q++)
        if (*q == '.')
            id = q + 1;
    int t = 0;
    for (uint32_t k = 0; k < d->nreads; k++) {
        const sq_read *r = &d->reads[k];
        const char *decl = NULL;
        if (strlen(r->col) != (size_t)(end - id) || strncasecmp(r->col, id, (size_t)(end - id)) ||
            sqlite3_table_column_metadata(d->db, r->db, r->tab, r->col, &decl, NULL, NULL, NULL,
                                          NULL) != SQLITE_OK)
            continue;
        int tt = sq_type_from_decl(decl);
        if (t && tt != t)
            return 0;
        t = tt;
    }
    return t;
}

/* agg_types: per result column, agg_type or 0; NULL if none applies. */
static int *agg_types(sq_db *d, sqlite3_stmt *st)
{
    int n = sqlite3_column_count(st), any = 0;
    int *t = n ? em_calloc((size_t)n, sizeof *t) : NULL;
    for (int i = 0; t && i < n; i++)
        if (!sqlite3_column_decltype(st, i))
            any |= (t[i] = agg_type(d, sqlite3_column_name(st, i))) != 0;
    if (!any) {
        em_free(t);
        t = NULL;
    }
    return t;
}

/* ---- exec ------------------------------------------------------------------ */

static int run_ddl(sq_sess *s, const sq_lexed *l, const char *schema, int64_t id, sq_cursor **out)
{
    sq_ddl d;
    int rc = sq_ddl_parse(l, &d, s->msg, sizeof s->msg);
    if (rc)
        return rc;
    /* DDL may name a QueryEntity table; on a cluster it reads and changes
     * what the metadata group agreed: catch up with it first. */
    if (s->rem)
        s->rem->sync(s->rem->ctx);
    sq_cat_discover(s->eng);
    switch (d.kind) {
    case SQ_DDL_CREATE_TABLE:
        rc = sq_cat_create(s->eng, &d, schema, s->rem, s->msg, sizeof s->msg);
        break;
    case SQ_DDL_DROP_TABLE:
        rc = sq_cat_drop(s->eng, &d, schema, s->rem, s->msg, sizeof s->msg);
        break;
    case SQ_DDL_ADD_COLUMN: case SQ_DDL_DROP_COLUMN:
        rc = sq_cat_alter(s->eng, &d, schema, s->rem, s->msg, sizeof s->msg);
        break;
    default:
        rc = sq_cat_index(s->eng, &d, schema, s->rem, s->msg, sizeof s->msg);
        break;
    }
    sq_ddl_free(&d);
    if (rc == EM_NOMEM && !s->msg[0])
        sq_fail(s, rc, "Out of memory");
    return rc ? rc : update_cursor(s, id, 0, out);
}

static int bind_args(sq_sess *s, sqlite3_stmt *st, const sq_query *q)
{
    int np = sqlite3_bind_parameter_count(st);
    const uint8_t *p = q->args;
    for (uint32_t i = 0; i < q->argc && (int)i < np; i++) {
        size_t n = bin_rd_len(p);
        if (sq_val_bind(st, (int)i + 1, p, n) != SQLITE_OK)
            return sq_fail(s, EM_INVAL, "Failed to bind query parameter %u", i + 1);
        p += n;
    }
    return 0;
}

int sq_exec(sq_sess *s, const sq_query *q, int64_t id, sq_cursor **out)
{
    s->msg[0] = 0;
    char schema[SQ_MAX_NAME];
    if (!q->schema) {
        strcpy(schema, "PUBLIC");
    } else {
        if (q->schema_len >= sizeof schema || !q->schema_len || memchr(q->schema, 0, q->schema_len))
            return sq_fail(s, EM_INVAL, "Failed to set schema for DB connection for thread "
                           "[schema=%.*s]", (int)(q->schema_len < 128 ? q->schema_len : 128), q->schema);
        memcpy(schema, q->schema, q->schema_len);
        schema[q->schema_len] = 0;
    }
    /* Tables of caches configured with query entities are looked for only
     * when a name is missing (unknown schema, table or type), not per
     * statement: the walk over every cache is not free. */
    if (!sq_cat_schema_known(s->eng, schema)) {
        if (s->rem)
            s->rem->sync(s->rem->ctx);
        sq_cat_discover(s->eng);
    }
    if (!sq_cat_schema_known(s->eng, schema))
        return sq_fail(s, EM_NOTFOUND, "Failed to set schema for DB connection for thread "
                       "[schema=%s]", schema);
    if (q->sql_len > SQ_MAX_SQL)
        return sq_fail(s, EM_INVAL, "SQL text too long (limit %u bytes)", SQ_MAX_SQL);
    if (q->argc > SQ_MAX_ARGS)
        return sq_fail(s, EM_INVAL, "Too many query parameters (limit %d)", SQ_MAX_ARGS);
    const char *text = q->sql;
    size_t tlen = q->sql_len;
    em_buf gen = EM_BUF_INIT;
    int *fresh = NULL;              /* MIN/MAX types of an uncached statement */
    sq_aggq *aggq = NULL;           /* its whole-table aggregate shape */
    int rc;
    if (q->kv_type) {
        if ((rc = gen_kv_sql(s, q, schema, &gen)) != 0) {
            em_buf_free(&gen);
            return rc;
        }
        text = (const char *)gen.p;
        tlen = gen.len;
    }
    sq_lexed l = { 0 };
    sq_db *d;
    if ((rc = sq_sess_db(s, schema, &d)) != 0)
        goto done;
    sqlite3_stmt *st = NULL;
    sq_stmt_ent *ent = sq_stmt_find(d, text, tlen);
    int cls;
    if (ent) {
        st = ent->st;
        cls = ent->cls;
    } else {
        if ((rc = sq_lex(text, tlen, &l, s->msg, sizeof s->msg)) != 0)
            goto done;
        cls = sq_classify(&l);
        if (!cls) {
            rc = sq_fail(s, EM_UNSUPPORTED, "Failed to parse query. Unsupported statement: %.*s",
                         (int)(tlen < 60 ? tlen : 60), text);
            goto done;
        }
    }
    if ((q->stmt_type == SQ_STMT_SELECT && cls != SQ_CLS_QUERY) ||
        (q->stmt_type == SQ_STMT_UPDATE && cls == SQ_CLS_QUERY)) {
        rc = sq_fail(s, EM_INVAL, "Given statement type does not match that declared by JDBC driver");
        goto release;
    }
    if (cls == SQ_CLS_DDL) {
        rc = q->budget_ns ? EM_AGAIN : run_ddl(s, &l, schema, id, out);
        goto done;
    }
    if (!ent) {
        em_buf_reset(&s->sqlbuf);
        if ((rc = sq_rewrite(&l, &s->sqlbuf, s->msg, sizeof s->msg)) != 0)
            goto done;
        const char *tail = NULL;
        d->collect = 1;
        d->nreads = 0;
        int src = sqlite3_prepare_v3(d->db, (const char *)s->sqlbuf.p, (int)s->sqlbuf.len,
                                     SQLITE_PREPARE_PERSISTENT, &st, &tail);
        d->collect = 0;
        /* A name not known here: a table of a cache configured with query
         * entities not read yet or, on a cluster, a table or column
         * another node made a moment ago (then any parse error: catching
         * up is one metadata round trip, shared with other syncs). */
        if (src == SQLITE_ERROR && (s->rem || !strncmp(sqlite3_errmsg(d->db), "no such table", 13))) {
            uint64_t ep = atomic_load(&s->eng->epoch);
            if (s->rem)
                s->rem->sync(s->rem->ctx);
            sq_cat_discover(s->eng);
            if (ep != atomic_load(&s->eng->epoch) && (rc = sq_sess_db(s, schema, &d)) == 0) {
                d->collect = 1;
                d->nreads = 0;
                src = sqlite3_prepare_v3(d->db, (const char *)s->sqlbuf.p, (int)s->sqlbuf.len,
                                         SQLITE_PREPARE_PERSISTENT, &st, &tail);
                d->collect = 0;
            }
            if (rc)
                goto done;
        }
        if (src != SQLITE_OK) {
            rc = src == SQLITE_NOMEM ? sq_fail(s, EM_NOMEM, "Out of memory")
                                     : sq_fail(s, EM_INVAL, "Failed to parse query. %s", sqlite3_errmsg(d->db));
            goto done;
        }
        while (tail && (isspace((unsigned char)*tail) || *tail == ';'))
            tail++;
        if (!st || (tail && *tail)) {
            sqlite3_finalize(st);
            rc = sq_fail(s, EM_INVAL, st ? "Multiple statements queries are not supported"
                                         : "Failed to parse query. Empty statement");
            goto done;
        }
        fresh = agg_types(d, st);
        if (cls == SQ_CLS_QUERY && !q->kv_type)
            aggq = sq_agg_parse(&l);
        if ((ent = sq_stmt_add(d, text, tlen, st, cls)) != NULL) {
            ent->types = fresh;
            ent->agg = aggq;
            fresh = NULL;
            aggq = NULL;
        }
    }
    if ((rc = bind_args(s, st, q)) != 0)
        goto release;
    if (cls == SQ_CLS_DML && q->budget_ns) {
        rc = EM_AGAIN;              /* writes run where they may take long */
        goto release;
    }
    if (cls == SQ_CLS_DML) {
        arm(d, q->timeout_ms);
        int r;
        int64_t used = 0;
        sq_memq mq;
        sq_mem_enter(&mq, &used, s->eng->query_mem);
        while ((r = sqlite3_step(st)) == SQLITE_ROW)
            ;
        int hit = sq_mem_leave(&mq);
        d->deadline_ns = 0;
        int64_t n = sqlite3_changes64(d->db);
        rc = r == SQLITE_DONE ? 0 : hit ? quota_fail(s) : step_fail(s, d->db, r);
        sq_stmt_release(d, ent, st);
        if (!rc)
            rc = update_cursor(s, id, n, out);
        goto done;
    }
    uint32_t nc = (uint32_t)sqlite3_column_count(st);
    sq_cursor *c = cursor_new(id, nc);
    if (!c) {
        rc = sq_fail(s, EM_NOMEM, "Out of memory");
        goto release;
    }
    c->st = st;
    c->ent = ent;
    c->db = d;
    d->busy++;
    c->kv = q->kv_type != NULL;
    c->timeout_ms = q->timeout_ms;
    c->budget_ns = q->budget_ns;
    for (uint32_t i = 0; i < nc; i++) {
        const char *n = sqlite3_column_name(st, (int)i);
        c->names[i] = em_strndup(n ? n : "", n ? strlen(n) : 0);
        c->types[i] = sq_type_from_decl(sqlite3_column_decltype(st, (int)i));
        if (!c->types[i])
            c->types[i] = ent && ent->types ? ent->types[i] : fresh ? fresh[i] : 0;
        if (!c->names[i]) {
            cursor_free(c);
            rc = sq_fail(s, EM_NOMEM, "Out of memory");
            goto done;
        }
    }
    c->agg = sq_agg_start(s, d, ent ? ent->agg : aggq);
    if (cursor_add(s, c)) {
        cursor_free(c);
        rc = sq_fail(s, EM_NOMEM, "Out of memory");
        goto done;
    }
    *out = c;
    goto done;
release:
    if (st)
        sq_stmt_release(d, ent, st);
done:
    em_free(fresh);
    sq_agg_free_q(aggq);
    sq_lexed_free(&l);
    em_buf_free(&gen);
    return rc;
}

int sq_page(sq_sess *s, sq_cursor *c, uint32_t max_rows, size_t max_bytes, em_buf *out,
            uint32_t *rows, int *more)
{
    *rows = 0;
    *more = 0;
    if (c->is_update) {
        if (!c->done) {
            uint8_t b[9] = { BIN_LONG };
            em_st64(b + 1, (uint64_t)c->updated);
            if (em_buf_append(out, b, 9))
                return sq_fail(s, EM_NOMEM, "Out of memory");
            *rows = 1;
            c->done = 1;
        }
        return 0;
    }
    if (c->agg) {
        int rc = sq_agg_page(s, c, out, rows, more);
        if (rc != SQ_AGG_FALLBACK) {
            c->budget_ns = 0;
            return rc;
        }
        sq_agg_free(c->agg);        /* SQLite answers, from the first row */
        c->agg = NULL;
    }
    /* Later pages (2003/2005) pass 0: they use the query's page size. */
    if (!max_rows)
        max_rows = c->page ? c->page : 1024;
    else
        c->page = max_rows;
    size_t start = out->len;
    sq_memq mq;
    sq_mem_enter(&mq, &c->mem_used, s->eng->query_mem);
    arm(c->db, c->timeout_ms);
    c->db->over_budget = 0;
    c->db->budget_until = c->budget_ns ? em_now_ns() + c->budget_ns : 0;
    c->budget_ns = 0;               /* later pages run without one */
    int rc = 0;
    while (!c->done && *rows < max_rows) {
        if (!c->pending) {
            int r = sqlite3_step(c->st);
            if (r == SQLITE_DONE) {
                c->done = 1;
                break;
            }
            if (r != SQLITE_ROW) {
                rc = step_fail(s, c->db->db, r);
                break;
            }
            c->pending = 1;
        }
        size_t before = out->len;
        for (uint32_t i = 0; i < c->ncols && !rc; i++)
            rc = sq_val_out(c->st, (int)i, c->types[i], out);
        if (rc) {
            rc = sq_fail(s, rc, "Out of memory");
            break;
        }
        if (out->len - start > max_bytes) {
            out->len = before;      /* the row stays pending for the next page */
            if (!*rows)
                rc = sq_fail(s, EM_TOOBIG, "A result row is larger than the maximum message size");
            break;
        }
        c->pending = 0;
        (*rows)++;
    }
    if (!rc && !c->done && !c->pending) {
        /* Look ahead one row so the page can say whether more follow. */
        int r = sqlite3_step(c->st);
        if (r == SQLITE_ROW)
            c->pending = 1;
        else if (r == SQLITE_DONE)
            c->done = 1;
        else
            rc = step_fail(s, c->db->db, r);
    }
    c->db->deadline_ns = 0;
    c->db->budget_until = 0;
    if (sq_mem_leave(&mq) && rc)
        rc = quota_fail(s);
    else if (rc && c->db->over_budget)
        rc = EM_AGAIN;              /* the interrupt was the budget's */
    *more = !c->done;
    return rc;
}
