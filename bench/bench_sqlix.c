/* bench_sqlix.c - SQL secondary indexes (issue 18), in process through the
 * SQL session API over the store (no protocol, no sockets): a range query
 * read through an index against the same query served by a full scan, and
 * what keeping an index costs a key-value put.
 *
 * Table: t (id INT PRIMARY KEY, age INT, pay DOUBLE), 100 000 rows, age =
 * id (unique), one index t_age ON t (age) in the "index" contexts.
 *   range, index     - SELECT count(*), sum(pay) WHERE age BETWEEN ? AND ?+99
 *                      (100 rows), parameters, the statement cached
 *   range, scan      - the same with `age + 0`, which no index can serve
 *   put, no index    - st_put overwriting a row with another row's value
 *   put, 1 index     - the same on the indexed table (the item moves)
 *   agg, ember       - SELECT count(*), sum(pay), avg(age) FROM t: the whole
 *                      table, computed over the store's scan (sq_agg.c)
 *   agg, via SQLite  - the same with that off: SQLite steps the virtual
 *                      table row by row (what any other query over the
 *                      whole table pays)
 *   agg, native      - the same query over the same rows in a plain SQLite
 *                      table (in memory, INTEGER PRIMARY KEY), same process:
 *                      the yardstick of issue 18 (ember at most 1.2x)
 * Run: build/ember-bench micro sqlix sqlagg (the agg rows are group sqlagg)
 */
#include "bench.h"

#include "binary/binary.h"
#include "sql/sql.h"
#include "store/store.h"
#include "util/buf.h"
#include "util/err.h"
#include "util/hash.h"
#include "util/mem.h"

#include <sqlite3.h>
#include <stdio.h>
#include <string.h>

enum { NROWS = 100000, NVALS = 1000 };

typedef struct sx_ctx {
    st_store     *st;
    bin_registry *reg;
    sq_engine    *eng;
    sq_sess      *ss;
    st_cache     *cache;
    em_buf        vals[NVALS];
    em_buf        page;
    uint32_t      next;
    sqlite3      *native;       /* agg, native: the same rows in SQLite */
    sqlite3_stmt *nagg;
} sx_ctx;

static void sx_teardown(void *p)
{
    sx_ctx *x = p;
    sqlite3_finalize(x->nagg);
    sqlite3_close(x->native);
    sq_sess_free(x->ss);
    sq_engine_free(x->eng);
    st_close(x->st);
    bin_registry_free(x->reg);
    for (int i = 0; i < NVALS; i++)
        em_buf_free(&x->vals[i]);
    em_buf_free(&x->page);
    em_free(x);
}

/* run executes sql to its end; the count of rows it returned, or -1. */
static int64_t run(sx_ctx *x, const char *sql, const uint8_t *args, size_t alen, uint32_t argc)
{
    sq_query q = {.sql = sql, .sql_len = strlen(sql), .args = args, .args_len = alen,
                  .argc = argc};
    sq_cursor *c = NULL;
    if (sq_exec(x->ss, &q, 1, &c)) {
        fprintf(stderr, "sqlix: %s: %s\n", sql, sq_errmsg(x->ss));
        return -1;
    }
    int64_t n = 0;
    int more = 1;
    while (more) {
        uint32_t rows = 0;
        em_buf_reset(&x->page);
        if (sq_page(x->ss, c, 1024, 1u << 20, &x->page, &rows, &more)) {
            sq_cursor_close(x->ss, c);
            return -1;
        }
        n += rows;
    }
    sq_cursor_close(x->ss, c);
    return n;
}

static void *setup(int index)
{
    sx_ctx *x = em_calloc(1, sizeof *x);
    st_options o;
    memset(&o, 0, sizeof o);
    if (!x || st_open(&x->st, &o) || !(x->reg = bin_registry_new()) ||
        !(x->eng = sq_engine_new(x->st, x->reg)) || !(x->ss = sq_sess_new(x->eng)) ||
        run(x, "CREATE TABLE t (id INT PRIMARY KEY, age INT, pay DOUBLE)", NULL, 0, 0) < 0)
        goto fail;
    static char sql[64 * 1000];
    for (int b = 0; b < NROWS / 1000; b++) {
        size_t o2 = (size_t)snprintf(sql, sizeof sql, "INSERT INTO t VALUES ");
        for (int i = b * 1000; i < (b + 1) * 1000; i++)
            o2 += (size_t)snprintf(sql + o2, sizeof sql - o2, "%s(%d, %d, %d.5)",
                                   i > b * 1000 ? "," : "", i, i, i % 5000);
        if (run(x, sql, NULL, 0, 0) < 0)
            goto fail;
    }
    if (index && run(x, "CREATE INDEX t_age ON t (age)", NULL, 0, 0) < 0)
        goto fail;
    x->cache = st_cache_find(x->st, em_hash_java_str((const uint8_t *)"SQL_PUBLIC_T", 12));
    for (int i = 0; x->cache && i < NVALS; i++) {
        uint8_t k[5] = {BIN_INT, 0, 0, 0, 0};
        em_st32(k + 1, (uint32_t)i);
        int found = 0;
        if (st_get(x->cache, NULL, k, 5, &x->vals[i], &found) || !found)
            goto fail;
    }
    if (x->cache)
        return x;
fail:
    if (x)
        sx_teardown(x);
    return NULL;
}

static void *setup_ix(void) { return setup(1); }
static void *setup_plain(void) { return setup(0); }

static int range(sx_ctx *x, uint64_t n, const char *sql)
{
    for (uint64_t i = 0; i < n; i++) {
        uint8_t a[10] = {BIN_INT, 0, 0, 0, 0, BIN_INT, 0, 0, 0, 0};
        uint32_t lo = (x->next = (x->next + 7919) % (NROWS - 100));
        em_st32(a + 1, lo);
        em_st32(a + 6, lo + 99);
        if (run(x, sql, a, sizeof a, 2) != 1)
            return -1;
    }
    return 0;
}

static int b_range_ix(void *p, uint64_t n)
{
    return range(p, n, "SELECT count(*), sum(pay) FROM t WHERE age BETWEEN ? AND ?");
}

static int b_range_scan(void *p, uint64_t n)
{
    return range(p, n, "SELECT count(*), sum(pay) FROM t WHERE age + 0 BETWEEN ? AND ?");
}

static int b_put(void *p, uint64_t n)
{
    sx_ctx *x = p;
    for (uint64_t i = 0; i < n; i++) {
        uint32_t k = x->next++ % NVALS;
        uint8_t kb[5] = {BIN_INT, 0, 0, 0, 0};
        em_st32(kb + 1, k);
        const em_buf *v = &x->vals[(k + 1 + (x->next / NVALS) % 2) % NVALS];
        if (st_put(x->cache, NULL, kb, 5, v->p, v->len))
            return -1;
    }
    return 0;
}

BENCH_REGISTER(sqlix_range_ix, {"sqlix", "range 100 of 100k rows, index", "query", NULL,
               b_range_ix, setup_ix, sx_teardown, 2000})
BENCH_REGISTER(sqlix_range_scan, {"sqlix", "range 100 of 100k rows, full scan", "query", NULL,
               b_range_scan, setup_ix, sx_teardown, 10})
BENCH_REGISTER(sqlix_put_plain, {"sqlix", "put, no index", "st_put", NULL, b_put, setup_plain,
               sx_teardown, 0})
BENCH_REGISTER(sqlix_put_ix, {"sqlix", "put, 1 index", "st_put", NULL, b_put, setup_ix,
               sx_teardown, 0})

#define AGG_SQL "SELECT count(*), sum(pay), avg(age) FROM t"

/* aggs runs the aggregate n times, computed directly (on) or by SQLite. */
static int aggs(void *p, uint64_t n, int on)
{
    sq_engine_set_direct_agg(((sx_ctx *)p)->eng, on);
    for (uint64_t i = 0; i < n; i++)
        if (run(p, AGG_SQL, NULL, 0, 0) != 1)
            return -1;
    return 0;
}

static int b_agg(void *p, uint64_t n) { return aggs(p, n, 1); }
static int b_agg_vtab(void *p, uint64_t n) { return aggs(p, n, 0); }

/* setup_native: the ember table too (same setup), and a native copy of it. */
static void *setup_native(void)
{
    sx_ctx *x = setup(0);
    if (!x)
        return NULL;
    if (sqlite3_open(":memory:", &x->native) != SQLITE_OK ||
        sqlite3_exec(x->native, "CREATE TABLE t (id INTEGER PRIMARY KEY, age INT, pay DOUBLE);"
                     "BEGIN", NULL, NULL, NULL) != SQLITE_OK)
        goto fail;
    sqlite3_stmt *ins;
    if (sqlite3_prepare_v2(x->native, "INSERT INTO t VALUES (?, ?, ?)", -1, &ins, NULL) != SQLITE_OK)
        goto fail;
    for (int i = 0; i < NROWS; i++) {       /* the rows setup() inserted */
        sqlite3_bind_int(ins, 1, i);
        sqlite3_bind_int(ins, 2, i);
        sqlite3_bind_double(ins, 3, (double)(i % 5000) + 0.5);
        if (sqlite3_step(ins) != SQLITE_DONE) {
            sqlite3_finalize(ins);
            goto fail;
        }
        sqlite3_reset(ins);
    }
    sqlite3_finalize(ins);
    if (sqlite3_exec(x->native, "COMMIT", NULL, NULL, NULL) != SQLITE_OK ||
        sqlite3_prepare_v2(x->native, AGG_SQL, -1, &x->nagg, NULL) != SQLITE_OK)
        goto fail;
    return x;
fail:
    sx_teardown(x);
    return NULL;
}

static int b_agg_native(void *p, uint64_t n)
{
    sx_ctx *x = p;
    for (uint64_t i = 0; i < n; i++) {
        if (sqlite3_step(x->nagg) != SQLITE_ROW || sqlite3_column_int64(x->nagg, 0) != NROWS)
            return -1;
        sqlite3_reset(x->nagg);
    }
    return 0;
}

/* b_scan: the store's scan of the same entries, nothing else - the part of
 * the ember row SQL does not add (each entry is its own allocation: a cache
 * miss each, where a native table reads packed pages). */
static int b_scan(void *p, uint64_t n)
{
    sx_ctx *x = p;
    for (uint64_t i = 0; i < n; i++) {
        st_scan *sc;
        const uint8_t *k, *v;
        uint32_t kl, vl, rows = 0;
        int rc;
        if (st_scan_open(x->cache, -1, &sc))
            return -1;
        while ((rc = st_scan_next(sc, &k, &kl, &v, &vl)) > 0)
            rows++;
        st_scan_close(sc);
        if (rc < 0 || rows != NROWS)
            return -1;
    }
    return 0;
}

BENCH_REGISTER(sqlix_agg_scan, {"sqlagg", "scan of the 100k entries, no SQL", "scan", NULL, b_scan,
               setup_native, sx_teardown, 20})
BENCH_REGISTER(sqlix_agg, {"sqlagg", "agg over 100k rows, ember table", "query", NULL, b_agg,
               setup_native, sx_teardown, 20})
BENCH_REGISTER(sqlix_agg_vtab, {"sqlagg", "agg over 100k rows, via SQLite", "query", NULL,
               b_agg_vtab, setup_native, sx_teardown, 20})
BENCH_REGISTER(sqlix_agg_native, {"sqlagg", "agg over 100k rows, native SQLite", "query", NULL,
               b_agg_native, setup_native, sx_teardown, 20})
