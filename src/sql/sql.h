/* sql.h - SQL over ember's caches: a catalog of tables (from CREATE TABLE),
 * one SQLite virtual table per table reading the store and decoding binary
 * object fields, an H2->SQLite pre-pass, ember's own DDL parser, and cursors.
 *
 * Design and the Ignite behaviour it follows: ../shared/reference/sql.md
 * (§1.3 tables on caches, §3 SQLite, §4 this design).  sql/ sits above
 * store/ and binary/ and below proto/ (DESIGN §2); it never touches the wire
 * framing: results are appended as data objects to a caller's em_buf.
 *
 * Threads: an sq_engine (the catalog) is shared and locked inside; an
 * sq_sess (SQLite connections, statements, cursors) belongs to one client
 * connection and is used by one thread at a time.
 *
 * Files, in reading order: sq_lex.c (tokens, pre-pass), sq_ddl.c (DDL
 * parser), sq_cat.c (catalog, CREATE/DROP/ALTER TABLE, CREATE/DROP INDEX), sq_qe.c (tables
 * from QueryEntity), sq_type.c / sq_val.c (types, conversions), sq_vtab.c
 * (the virtual table), sq_index.c (secondary indexes), sq_func.c (H2 functions), sq_sess.c (connections),
 * sq_stmt.c (statement cache), sq_exec.c (running statements, pages).
 */
#ifndef EM_SQL_H
#define EM_SQL_H

#include <stddef.h>
#include <stdint.h>

#include "util/buf.h"

struct st_store;
struct bin_registry;

typedef struct sq_engine sq_engine;
typedef struct sq_sess sq_sess;
typedef struct sq_cursor sq_cursor;

/* Statement types of QUERY_SQL_FIELDS (reference sql.md §1.1). */
enum { SQ_STMT_ANY = 0, SQ_STMT_SELECT = 1, SQ_STMT_UPDATE = 2 };

/* Limits on hostile input. */
#define SQ_MAX_SQL      (1u << 20)  /* bytes of SQL text */
#define SQ_MAX_ARGS     1024        /* query parameters */
#define SQ_MAX_COLS     256         /* columns of a CREATE TABLE */
#define SQ_MAX_NAME     128         /* bytes of an identifier */
/* Work done by one call into SQLite when the client sets no timeout (under
 * emberd SQL runs on its own threads, proto/proto_sqlrun.c; this still
 * bounds how long one query holds one of them). */
#define SQ_DEFAULT_STEP_MS 10000
/* SQLite's process-wide heap cap (sqlite3_hard_heap_limit64). */
#define SQ_HEAP_LIMIT (1LL << 30)
/* The SQLite heap one query may hold (sorts, GROUP BY, DISTINCT, recursive
 * CTEs) unless set otherwise (sq_engine_set_query_memory): past it the
 * query fails with Ignite's "Query quota was exceeded" error. */
#define SQ_QUERY_MEM_DEFAULT (256LL << 20)

/* sq_engine_new: the catalog over st's caches; st and reg are borrowed and
 * must outlive the engine.  NULL when out of memory. */
sq_engine *sq_engine_new(struct st_store *st, struct bin_registry *reg);
void       sq_engine_free(sq_engine *e);
/* sq_engine_set_query_memory: the per-query quota in bytes (0 = none). */
void       sq_engine_set_query_memory(sq_engine *e, int64_t bytes);
/* sq_engine_set_direct_agg: whether whole-table aggregates (SELECT
 * COUNT/SUM/AVG/TOTAL/MIN/MAX ... FROM t) are computed over the scan (1, the
 * default) or through SQLite (0: tests and benchmarks compare the two). */
void       sq_engine_set_direct_agg(sq_engine *e, int on);
/* sq_engine_direct_aggs: how many queries were answered that way. */
uint64_t   sq_engine_direct_aggs(sq_engine *e);
/* sq_engine_set_persist: fn(arg, 1, record, n) makes a binary type the
 * catalog defined (CREATE TABLE, ALTER TABLE) durable before the statement
 * answers, in the PUT_BINARY_TYPE record layout; nonzero fails the
 * statement.  Set before any session runs. */
void       sq_engine_set_persist(sq_engine *e,
                                 int (*fn)(void *arg, int kind, const uint8_t *p, size_t n),
                                 void *arg);

/* sq_sess_new / sq_sess_free: per-connection SQL state; free closes every
 * cursor (cancel on disconnect). */
sq_sess *sq_sess_new(sq_engine *e);
void     sq_sess_free(sq_sess *s);

/* One query.  Strings are UTF-8, not NUL-terminated.  args: argc validated
 * data objects back to back. */
typedef struct sq_query {
    const char *schema;  size_t schema_len;   /* NULL = PUBLIC */
    const char *sql;     size_t sql_len;
    const uint8_t *args; size_t args_len;
    uint32_t argc;
    int      stmt_type;                       /* SQ_STMT_* */
    int64_t  timeout_ms;                      /* <= 0: SQ_DEFAULT_STEP_MS per call */
    const char *kv_type; size_t kv_type_len;  /* QUERY_SQL (2002): rows are
                                               * (key, value) of this type's
                                               * table; NULL for 2004 */
    /* budget_ns: run only if it is cheap - a SELECT whose first page
     * takes longer, or any DML or DDL, fails with EM_AGAIN having changed
     * nothing (its cursor is closed), to be run again elsewhere.  0: no
     * budget. */
    uint64_t budget_ns;
} sq_query;

/* sq_exec prepares and starts q.  DDL and DML run to completion here and
 * leave a cursor with the one UPDATED row.  On failure returns a negative
 * code and sq_errmsg(s) says why (Ignite's texts where known); EM_AGAIN
 * (no message) when q has a budget it cannot keep (sq_query.budget_ns),
 * from here or from the first sq_page. */
int sq_exec(sq_sess *s, const sq_query *q, int64_t id, sq_cursor **out);

/* Result shape. */
uint32_t    sq_cursor_ncols(const sq_cursor *c);
const char *sq_cursor_colname(const sq_cursor *c, uint32_t i);
int64_t     sq_cursor_id(const sq_cursor *c);

/* sq_page appends up to max_rows rows (each row ncols data objects, or a key
 * and a value for QUERY_SQL) to out, never letting the rows grow past
 * max_bytes (at least one row is sent if it fits at all).  *rows = rows
 * written, *more = rows remain.  Errors as sq_exec. */
int sq_page(sq_sess *s, sq_cursor *c, uint32_t max_rows, size_t max_bytes, em_buf *out,
            uint32_t *rows, int *more);

/* Cursors of this session: find by id (NULL if none), close, count. */
sq_cursor *sq_cursor_find(sq_sess *s, int64_t id);
void       sq_cursor_close(sq_sess *s, sq_cursor *c);
uint32_t   sq_sess_ncursors(const sq_sess *s);

/* On a cluster the entries of a table live on their owners: a session given
 * an sq_remote reads and writes through it instead of the local store -
 * point reads and writes at the key's primary (replicated as any client
 * write), full scans each partition once from its primary, CREATE TABLE and
 * DROP TABLE through the metadata group, the types CREATE TABLE defines to
 * every node; CREATE/DROP INDEX and ALTER TABLE change the cache's query
 * entities on every node (set_qe), where each builds its indexes over its
 * own entries.  As an index holds this node's entries only, such a session
 * plans no index scan.
 * Every call returns 0 or a code; a negative code's text is errmsg(ctx). */
struct st_cache;
struct st_scan;
struct st_cache_config;
typedef struct sq_remote {
    int  (*get)(void *ctx, struct st_cache *c, const uint8_t *k, size_t kl, em_buf *out,
                int *found);
    int  (*put)(void *ctx, struct st_cache *c, const uint8_t *k, size_t kl, const uint8_t *v,
                size_t vl, int if_absent, int *stored);
    int  (*remove)(void *ctx, struct st_cache *c, const uint8_t *k, size_t kl, int *removed);
    int  (*scan)(void *ctx, struct st_cache *c, struct st_scan **out);
    int  (*create)(void *ctx, const struct st_cache_config *cfg);
    int  (*destroy)(void *ctx, int32_t cache_id);
    int  (*type_put)(void *ctx, const uint8_t *rec, size_t n);
    /* set_qe: the cache's query entities become qe[0..n) on every node,
     * through the metadata group (each node then reads its tables again,
     * sq_cat_refresh: this one before the call returns). */
    int  (*set_qe)(void *ctx, struct st_cache *c, const uint8_t *qe, size_t n);
    /* sync: catch up with what the cluster confirmed (a cache another node
     * started just now), before a name is declared unknown. */
    void (*sync)(void *ctx);
    const char *(*errmsg)(void *ctx);
    void *ctx;
} sq_remote;

/* sq_cat_refresh: cache c's query entities changed (on a cluster, a
 * CACHE_CONFIG applied): its tables are read again, indexes built anew. */
void sq_cat_refresh(sq_engine *e, struct st_cache *c);

/* sq_sess_set_remote: the session's statements reach data through r from
 * now on (NULL: the local store); r is borrowed. */
void sq_sess_set_remote(sq_sess *s, const sq_remote *r);

/* sq_sess_set_txkv: on one node (no remote), the session's writes to
 * TRANSACTIONAL caches go through r's put and remove, which take the entry
 * locks transactions hold and wait for them, as Ignite's DML runs in an
 * implicit transaction; other caches are written directly.  r is borrowed. */
void sq_sess_set_txkv(sq_sess *s, const sq_remote *r);
/* sq_sess_cancelled: sq_sess_cancel was called (any thread). */
int  sq_sess_cancelled(const sq_sess *s);

/* sq_sess_cancel (any thread, while another uses s): what s runs stops at
 * SQLite's next progress check, and so does everything s runs after; for a
 * session whose connection closed. */
void sq_sess_cancel(sq_sess *s);

/* sq_errmsg: the message of the last failure in this session. */
const char *sq_errmsg(const sq_sess *s);

#endif
