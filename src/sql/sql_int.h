/* sql_int.h - private types shared by the sq_*.c files: tokens, the DDL
 * statement, column types, the catalog's tables, engine and session state.
 */
#ifndef EM_SQL_INT_H
#define EM_SQL_INT_H

#include <pthread.h>
#include <stdatomic.h>
#include <sqlite3.h>

#include "binary/binary.h"
#include "sql/sql.h"
#include "store/store.h"

/* ---- tokens (sq_lex.c) ------------------------------------------------- */

enum sq_tok_kind {
    SQ_TK_END = 0, SQ_TK_WORD, SQ_TK_QUOTED, SQ_TK_STRING, SQ_TK_NUMBER,
    SQ_TK_PARAM, SQ_TK_PUNCT
};

typedef struct sq_tok {
    uint8_t  kind;
    uint32_t off, len;          /* in the source text; QUOTED/STRING include quotes */
} sq_tok;

typedef struct sq_lexed {
    const char *src;
    size_t      n;
    sq_tok     *t;              /* ntok tokens, then one SQ_TK_END */
    uint32_t    ntok;
} sq_lexed;

/* sq_lex splits src into tokens (comments and blanks dropped).  0, or
 * EM_INVAL with msg set (unterminated string, bad character, too long). */
int  sq_lex(const char *src, size_t n, sq_lexed *out, char *msg, size_t msgsz);
void sq_lexed_free(sq_lexed *l);

/* Statement classes. */
enum { SQ_CLS_QUERY = 1, SQ_CLS_DML, SQ_CLS_DDL };
/* sq_classify: the class of the lexed statement, or 0 if unsupported. */
int  sq_classify(const sq_lexed *l);
/* sq_word_is: token i is the unquoted word w (case-insensitive). */
int  sq_word_is(const sq_lexed *l, uint32_t i, const char *w);
/* sq_punct_is: token i is the one-character punctuation c. */
int  sq_punct_is(const sq_lexed *l, uint32_t i, char c);
/* sq_rewrite appends the SQLite form of a query or DML statement to out
 * (NUL-terminated): unquoted identifiers upper-cased, trailing commas
 * dropped, MINUS -> EXCEPT, MERGE INTO -> INSERT OR REPLACE INTO. */
int  sq_rewrite(const sq_lexed *l, em_buf *out, char *msg, size_t msgsz);
/* sq_ident copies token i as an identifier: unquoted upper-cased, quoted
 * exact.  EM_INVAL if it is not a name or is too long. */
int  sq_ident(const sq_lexed *l, uint32_t i, char *out, size_t outsz);

/* ---- column types (sq_type.c), values (sq_val.c) ---------------------- */

enum sq_type {
    SQ_T_BOOL = 1, SQ_T_BYTE, SQ_T_SHORT, SQ_T_INT, SQ_T_LONG, SQ_T_FLOAT,
    SQ_T_DOUBLE, SQ_T_DECIMAL, SQ_T_STRING, SQ_T_UUID, SQ_T_DATE, SQ_T_TIME,
    SQ_T_TIMESTAMP, SQ_T_BINARY, SQ_T_OBJECT
};

/* sq_type_parse: the type for a DDL type name (upper-cased), 0 if unknown. */
int         sq_type_parse(const char *name);
/* sq_type_decl: the declared SQLite type of a column (it carries the ember
 * type back in sqlite3_column_decltype and gives SQLite the affinity). */
const char *sq_type_decl(int t);
int         sq_type_from_decl(const char *decl);
int32_t     sq_type_code(int t);            /* binary type code written */
const char *sq_type_java(int t);            /* Java class name (QueryEntity) */

/* Text forms (sq_type.c).  Formatters return the length written. */
__extension__ typedef unsigned __int128 sq_u128;
int      sq_utf8_ok(const unsigned char *s, size_t n);
int      sq_uuid_fmt(const uint8_t *p16, char *out);             /* out: 40 bytes */
int      sq_uuid_parse(const char *s, size_t n, uint64_t *msb, uint64_t *lsb);
/* kind 't' timestamp, 'd' date, 'h' time of day */
int      sq_ts_fmt(int64_t ms, int32_t nanos, int kind, char *out, size_t sz);
int      sq_ts_parse(const char *s, size_t n, int64_t *ms, int32_t *nanos);
int      sq_dec_text(const uint8_t *v, char *out, size_t sz);    /* sz >= 160 */
int      sq_dec_parse(const char *s, size_t n, int *neg, sq_u128 *u, int32_t *scale);
uint32_t sq_dec_bytes(int neg, sq_u128 u, uint8_t *mag17);

/* sq_val_get: the SQLite value of data object v (validated, resolved) as
 * a column of type t: its storage class (SQLITE_NULL ... SQLITE_BLOB) and
 * the integer, double or bytes (into v, or into buf). */
typedef struct sq_sv {
    int         type;
    int64_t     i;
    double      d;
    const void *p;
    size_t      n;
    char        buf[160];
} sq_sv;
void sq_val_get(const uint8_t *v, int t, sq_sv *out);
/* sq_field reads field fid of object o (resolved; NULL if absent or o is
 * not an object).  The cache holds the registry's type for the last id
 * seen; a schema it does not know yet (registered after the lookup) makes
 * it look again. */
typedef struct sq_tycache { const bin_type *ty[2]; int32_t tid[2]; } sq_tycache;
const uint8_t *sq_field(bin_registry *reg, const bin_type **ty, int32_t *tid,
                        const uint8_t *o, int32_t fid);
/* sq_field_loc: sq_field through fl, which remembers where fid sat in the
 * last layout seen (a scan's rows share one: a compare and a load per
 * column instead of a footer search); sq_field_fill is its slow half. */
const uint8_t *sq_field_fill(bin_registry *reg, const bin_type **ty, int32_t *tid,
                             const uint8_t *o, int32_t fid, bin_floc *fl);
static inline const uint8_t *sq_field_loc(bin_registry *reg, const bin_type **ty, int32_t *tid,
                                          const uint8_t *o, int32_t fid, bin_floc *fl)
{
    const uint8_t *val;
    if (o[0] != BIN_OBJ)
        return NULL;
    int rc = bin_floc_get(o, fl, &val);
    if (rc == EM_AGAIN)
        return sq_field_fill(reg, ty, tid, o, fid, fl);
    if (rc)
        return NULL;
    return val[0] == BIN_HANDLE || val[0] == BIN_WRAPPED ? bin_rd_resolve(val) : val;
}
/* sq_belongs: only entries whose value is the table's type are its rows. */
static inline int sq_belongs(int val_sqtype, int32_t val_tid, const uint8_t *v)
{
    if (val_sqtype)
        return v[0] == sq_type_code(val_sqtype);
    return v[0] == BIN_OBJ && bin_rd_type_id(v) == val_tid;
}
/* sq_val_result: hands data object v (validated, resolved) to SQLite as
 * the value of a column of type t. */
void sq_val_result(sqlite3_context *ctx, const uint8_t *v, int t);
/* sq_val_bind binds data object v as parameter i. */
int  sq_val_bind(sqlite3_stmt *st, int i, const uint8_t *v, size_t n);
/* sq_val_write encodes SQLite value sv as a column of type t through the
 * writer (converting as H2 does).  EM_INVAL with msg on a bad value. */
int  sq_val_write(bin_writer *w, sqlite3_value *sv, int t, char *msg, size_t msgsz);
/* sq_val_out appends result column i of st as a data object typed by t
 * (0 = from the storage class). */
int  sq_val_out(sqlite3_stmt *st, int i, int t, em_buf *out);
/* sq_val_out_num: the same for a NULL, INTEGER or FLOAT value in sv, t
 * numeric or 0. */
int  sq_val_out_num(const sq_sv *sv, int t, em_buf *out);

/* ---- DDL (sq_ddl.c) ---------------------------------------------------- */

enum { SQ_DDL_CREATE_TABLE = 1, SQ_DDL_DROP_TABLE, SQ_DDL_CREATE_INDEX, SQ_DDL_DROP_INDEX,
       SQ_DDL_ADD_COLUMN, SQ_DDL_DROP_COLUMN };

#define SQ_MAX_DEFAULT 64       /* bytes of a DEFAULT literal */

typedef struct sq_coldef {
    char    name[SQ_MAX_NAME];
    int     type;
    uint8_t notnull, pk;
    char    dflt[SQ_MAX_DEFAULT];   /* the DEFAULT literal as SQL text, "" if none */
} sq_coldef;

typedef struct sq_ddl {
    int      kind;
    int      if_not_exists, if_exists;
    int      col_if;                /* ALTER: ADD ... IF NOT EXISTS / DROP ... IF EXISTS */
    char     schema[SQ_MAX_NAME];   /* "" = the current schema */
    char     table[SQ_MAX_NAME];
    char     index[SQ_MAX_NAME];    /* CREATE/DROP INDEX */
    uint32_t ncols;
    sq_coldef *cols;                /* SQ_MAX_COLS */
    /* WITH "..." parameters (reference sql.md §1.3) */
    int      template_replicated, backups, atomic_tx, wrap_key, wrap_value;
    char     cache_name[SQ_MAX_NAME], key_type[SQ_MAX_NAME], value_type[SQ_MAX_NAME];
    char     affinity_key[SQ_MAX_NAME], data_region[SQ_MAX_NAME], cache_group[SQ_MAX_NAME];
} sq_ddl;

/* sq_ddl_parse: a CREATE/DROP TABLE or CREATE/DROP INDEX statement.  0, or
 * EM_INVAL/EM_UNSUPPORTED with Ignite's message in msg. */
int  sq_ddl_parse(const sq_lexed *l, sq_ddl *d, char *msg, size_t msgsz);
void sq_ddl_free(sq_ddl *d);

/* ---- catalog (sq_cat.c) ------------------------------------------------ */

typedef struct sq_col {
    char    *name;              /* SQL column name */
    char    *field;             /* binary field name */
    int32_t  fid;
    int      type;
    uint8_t  key;               /* a field of the key (or the key itself) */
    uint8_t  notnull;
    uint8_t  alias;             /* SQ_ALIAS_KEY / _VAL: the column is _KEY / _VAL */
    char    *dflt;              /* DEFAULT literal (SQL text, validated), or NULL */
} sq_col;

enum { SQ_ALIAS_KEY = 1, SQ_ALIAS_VAL = 2 };

/* ---- secondary indexes (sq_index.c) ------------------------------------- */

enum { SQ_IXC_KEY = 1, SQ_IXC_VALOBJ, SQ_IXC_VAL, SQ_IXC_KFIELD, SQ_IXC_VFIELD };

typedef struct sq_ixcol {
    char     name[SQ_MAX_NAME]; /* the column, or _KEY / _VAL */
    int      col;               /* its position when the index was made */
    int      kind;              /* SQ_IXC_* */
    int      type;
    int32_t  fid;
} sq_ixcol;

typedef struct sq_ixset sq_ixset;
struct ixnode;
struct sq_table;

/* An index: refcounted (table versions hold it); its items are kept by
 * the ixset of its cache from sq_ix_attach until sq_ix_detach. */
typedef struct sq_index {
    _Atomic int refs;
    char       *schema, *name;
    uint32_t    ncols;
    sq_ixcol   *cols;
    int         val_sqtype;     /* the table's row test (sq_belongs) */
    int32_t     val_tid;
    int         key_raw;        /* _KEY is handed out as the key's bytes */
    sq_ixset   *set;            /* fixed once attached */
    _Atomic int ready, dead;
    _Atomic int broken;         /* an item could not be stored: never read */
    _Atomic uint64_t count;
    _Atomic uint64_t scans;     /* queries that read it (tests, EXPLAIN-less checks) */
    struct ixnode *head;
} sq_index;

#define SQ_MAX_INDEXES 64       /* per table */

/* sq_ix_new: an index over t's columns named cols (or _KEY, _VAL);
 * EM_NOTFOUND for an unknown column. */
int  sq_ix_new(const struct sq_table *t, const char *name, const char *const *cols,
               uint32_t ncols, sq_index **out);
void sq_ix_ref(sq_index *ix);
void sq_ix_unref(sq_index *ix);
/* sq_ix_attach starts keeping ix over cache c and fills it from the
 * entries c holds; sq_ix_detach stops and empties it (both under the
 * engine's lock).  sq_ix_free_all: every index and set (engine free). */
int  sq_ix_attach(sq_engine *e, st_cache *c, sq_index *ix);
void sq_ix_detach(sq_engine *e, sq_index *ix);
void sq_ix_free_all(sq_engine *e);
/* sq_ix_item encodes entry (k, raw value) as ix's item into out: 1 and the
 * column prefix's length, 0 if the entry is not a row of the table, or
 * EM_NOMEM. */
int  sq_ix_item(const sq_index *ix, bin_registry *reg, sq_tycache *tc, const uint8_t *k,
                uint32_t kl, const uint8_t *raw_v, em_buf *out, uint32_t *plen);
/* sq_ix_enc_bound appends the encoding of constraint value v compared with
 * column col (converted as SQLite's affinity would); 1 if it cannot bound
 * the column's items (a number against a text column: scan that side
 * unbounded), EM_NOMEM.  sq_ix_col_text: column col has text affinity,
 * the one kind whose bounds can fail so. */
int  sq_ix_enc_bound(const sq_index *ix, uint32_t col, sqlite3_value *v, em_buf *out);
int  sq_ix_col_text(const sq_index *ix, uint32_t col);
/* A range of items: from lo (inclusive or not) to hi (a prefix; inclusive
 * or not), and where the last page ended. */
typedef struct sq_ixrange {
    em_buf lo, hi, last;
    int    has_lo, lo_incl, has_hi, hi_incl, started;
} sq_ixrange;
/* sq_ix_page copies up to max items of r, after the last page, into items
 * (u32 len, u32 prefix length, item bytes); *more = 1 if more may follow.
 * EM_NOTFOUND once the index was dropped, EM_NOMEM once it is broken. */
int  sq_ix_page(sq_index *ix, sq_ixrange *r, uint32_t max, em_buf *items, int *more);
uint64_t sq_ix_count(const sq_index *ix);

/* A table.  Immutable once published; refcounted because virtual tables in
 * every session hold it while a DROP may remove it from the catalog. */
typedef struct sq_table {
    _Atomic int refs;
    uint64_t  serial;           /* unique per engine: names the virtual table */
    char     *schema, *name;
    char     *cache_name;
    int32_t   cache_id;
    st_cache *cache;
    char     *key_type, *val_type;
    int32_t   key_tid, val_tid;
    int       key_wrapped;      /* key = object of key_type with the key columns */
    int       key_col;          /* not wrapped: the column that is the key, or -1 */
    int       key_sqtype;       /* not wrapped: the key's SQL type */
    int       val_sqtype;       /* 0: the value is an object of val_type; else an
                                 * SQL-typed value (QueryEntity valueType) */
    int       val_col;          /* SQL-typed value: the column that is _VAL, or -1 */
    int       from_ddl;
    uint32_t  ncols;
    sq_col   *cols;
    const bin_desc *kdesc, *vdesc;
    uint32_t  nix;              /* its indexes (refs) */
    sq_index *ix[SQ_MAX_INDEXES];
    /* The QueryEntity's indexes, read with the table and built once it is
     * in the catalog (sq_cat_discover); NULL after that. */
    struct sq_qeix *qeix;
    uint32_t  nqeix;
} sq_table;

/* An index of a QueryEntity: its name and its columns (by SQL column
 * name, or _KEY / _VAL). */
typedef struct sq_qeix {
    char     *name;
    uint32_t  ncols;
    char    **cols;
} sq_qeix;
void sq_qeix_free(sq_qeix *x, uint32_t n);

/* sq_qe_encode appends the query entity list (int count, entities; the
 * layout sq_qe_tables reads) of the n tables t: fields by their binary
 * names, aliases where a column's name is not the field's, indexes. */
int  sq_qe_encode(sq_table *const *t, uint32_t n, em_buf *out);

void sq_table_ref(sq_table *t);
void sq_table_unref(sq_table *t);

struct sq_engine {
    st_store     *st;
    bin_registry *reg;
    /* persist (optional): binary types the catalog defines, as PUT_BINARY_TYPE
     * records (kind 1), made durable before the DDL answers. */
    int         (*persist)(void *arg, int kind, const uint8_t *p, size_t n);
    void         *persist_arg;
    int64_t       query_mem;    /* per-query SQLite heap quota (sq_mem.c), 0 = none */
    int           direct_agg;   /* whole-table aggregates skip SQLite (sq_agg.c) */
    _Atomic uint64_t direct_aggs;   /* ... answered that way (tests) */
    pthread_mutex_t mu;
    _Atomic uint64_t epoch;     /* bumped on every catalog change */
    uint64_t      next_serial;
    sq_table    **tab;
    uint32_t      ntab, captab;
    st_cache    **seen;         /* caches whose query entities were read */
    uint32_t      nseen, capseen;
    sq_ixset     *ixsets;       /* per indexed cache (sq_index.c), under mu */
};

/* sq_cat_snapshot: refs to every live table (dropping tables whose cache
 * was destroyed), for a session to sync with; free with sq_cat_release. */
int  sq_cat_snapshot(sq_engine *e, sq_table ***out, uint32_t *n, uint64_t *epoch);
void sq_cat_release(sq_table **t, uint32_t n);
sq_table *sq_cat_by_serial(sq_engine *e, uint64_t serial);    /* ref'd or NULL */
/* sq_cat_find: the one table of schema named name, case ignored as SQLite
 * ignores it (ref'd), or NULL. */
sq_table *sq_cat_find(sq_engine *e, const char *schema, const char *name);
/* sq_cat_by_type: the table in schema whose value type (or table) name is
 * type (QUERY_SQL), ref'd or NULL. */
sq_table *sq_cat_by_type(sq_engine *e, const char *schema, const char *type, size_t n);
/* sq_cat_schema_known: PUBLIC, a schema of a table, or a cache name. */
int  sq_cat_schema_known(sq_engine *e, const char *schema);
/* sq_cat_define registers t's value type (key = 0) or wrapped key type
 * (key = 1) with its columns as fields (persisted, or sent to every node
 * through r, when the schema is new); *out its descriptor. */
int  sq_cat_define(sq_engine *e, const sq_table *t, const sq_remote *r, int key,
                   const bin_desc **out);
/* DDL: 0 or a negative code with Ignite's message in msg. */
int  sq_cat_create(sq_engine *e, const sq_ddl *d, const char *schema, const sq_remote *r,
                   char *msg, size_t msgsz);
/* sq_cat_discover adds the tables of caches configured with query
 * entities (1053/1054, WAL recovery) that the catalog has not seen yet. */
void sq_cat_discover(sq_engine *e);
/* sq_qe_tables parses a cache's QueryEntity bytes (reference §2.4, with
 * precision and scale) into new tables (refs 1, serial 0); 0 or EM_*. */
int  sq_qe_tables(st_cache *ca, sq_table ***out, uint32_t *n);
void sq_table_free_new(sq_table *t);
int  sq_java_type(const char *name, size_t n);
/* sq_cat_alter: ALTER TABLE ADD/DROP COLUMN (the table gets a new version). */
int  sq_cat_alter(sq_engine *e, const sq_ddl *d, const char *schema, const sq_remote *r,
                  char *msg, size_t msgsz);
/* sq_cat_index: CREATE INDEX / DROP INDEX. */
int  sq_cat_index(sq_engine *e, const sq_ddl *d, const char *schema, const sq_remote *r,
                  char *msg, size_t msgsz);
int  sq_cat_drop(sq_engine *e, const sq_ddl *d, const char *schema, const sq_remote *r,
                 char *msg, size_t msgsz);

/* ---- virtual table (sq_vtab.c) ----------------------------------------- */

int sq_vtab_register(sqlite3 *db, sq_sess *s);

/* ---- per-query memory quota (sq_mem.c) ---------------------------------- */

/* sq_mem_install wraps SQLite's allocator (once, before SQLite starts).
 * sq_mem_enter .. sq_mem_leave bracket the steps of one statement on this
 * thread: its SQLite allocations net of frees add to *used, and one that
 * would take it past limit (> 0) fails; leave returns 1 if one did. */
typedef struct sq_memq {
    struct sq_memq *prev;
    int64_t *used;
    int64_t  limit;
    int      hit;
} sq_memq;
void sq_mem_install(void);
void sq_mem_enter(sq_memq *q, int64_t *used, int64_t limit);
int  sq_mem_leave(sq_memq *q);
/* sq_func_register adds the H2 functions SQLite lacks (sq_func.c). */
int sq_func_register(sqlite3 *db);

/* ---- session (sq_exec.c, sq_cursor.c) ----------------------------------- */

#define SQ_MAX_DBS 4            /* SQLite connections per session (one per schema) */
#define SQ_STMT_CACHE 32        /* prepared statements kept per connection */

/* A cached statement, keyed by the client's SQL text (sq_stmt.c): preparing
 * costs about 5x a point query (reference sql.md §3.5). */
typedef struct sq_stmt_ent {
    char         *sql;          /* NULL = free slot */
    size_t        len;
    sqlite3_stmt *st;
    int           cls;
    int           busy;         /* held by a cursor or a running statement */
    int           dead;         /* flushed while busy: finalize on release */
    int          *types;        /* result types not given by decltypes, or NULL */
    uint64_t      used;
    struct sq_aggq *agg;        /* a whole-table aggregate's shape (sq_agg.c), or NULL */
} sq_stmt_ent;

/* A column a statement reads, seen by the authorizer while it is prepared:
 * MIN(col)/MAX(col) results take col's type, as H2 gives them. */
typedef struct sq_read { char db[SQ_MAX_NAME], tab[SQ_MAX_NAME], col[SQ_MAX_NAME]; } sq_read;
#define SQ_MAX_READS 16

typedef struct sq_db {
    sqlite3  *db;
    char      schema[SQ_MAX_NAME];
    uint64_t  epoch;            /* catalog epoch last synced */
    uint64_t *serials;          /* virtual tables created in it */
    char    **names;            /* their "schema"."table" names */
    uint32_t  nser, capser;
    uint32_t  busy;             /* open cursors using it */
    uint64_t  used;             /* LRU tick */
    uint64_t  deadline_ns;      /* for the progress handler */
    uint64_t  budget_until;     /* a statement's inline budget (sq_query.budget_ns) */
    int       over_budget;      /* ... ran out: the interrupt is not a timeout */
    _Atomic int *cancel;        /* the session's (sq_sess_cancel) */
    int       internal;         /* ember's own schema statements are running */
    int       collect;          /* record SQLITE_READs into reads */
    uint32_t  nreads;
    sq_read   reads[SQ_MAX_READS];
    sq_stmt_ent cache[SQ_STMT_CACHE];
    uint64_t  tick;
} sq_db;

/* sq_stmt_find: a free cached statement for this text (marked busy), or
 * NULL.  sq_stmt_add caches st (busy) if a slot can be had; NULL if not.
 * sq_stmt_release resets a statement and frees its slot (or finalizes an
 * uncached one).  sq_stmt_clear finalizes them all. */
sq_stmt_ent *sq_stmt_find(sq_db *d, const char *sql, size_t len);
sq_stmt_ent *sq_stmt_add(sq_db *d, const char *sql, size_t len, sqlite3_stmt *st, int cls);
void         sq_stmt_release(sq_db *d, sq_stmt_ent *e, sqlite3_stmt *st);
void         sq_stmt_clear(sq_db *d);
/* sq_stmt_flush drops every cached statement after a schema change (a
 * cached statement's column list would be the old table's); busy ones go
 * when released. */
void         sq_stmt_flush(sq_db *d);

struct sq_cursor {
    int64_t       id;
    sq_db        *db;
    sqlite3_stmt *st;
    sq_stmt_ent  *ent;          /* st's cache slot, or NULL */
    uint32_t      ncols;
    char        **names;
    int          *types;        /* output type per column (sq_type or 0) */
    int           pending;      /* a stepped row not yet sent */
    int           done;
    int           kv;           /* QUERY_SQL: columns are _KEY, _VAL */
    int64_t       updated;      /* DML/DDL: the UPDATED value */
    int           is_update;    /* no statement: one UPDATED row */
    int64_t       timeout_ms;
    uint32_t      page;         /* rows per page, from the first request */
    uint64_t      budget_ns;    /* the first page's inline budget, or 0 */
    int64_t       mem_used;     /* SQLite heap its steps hold (sq_mem.c) */
    struct sq_aggrun *agg;      /* computed by sq_agg.c, st kept for a fallback */
};

struct sq_sess {
    sq_engine  *eng;
    sq_db       dbs[SQ_MAX_DBS];
    uint64_t    tick;
    sq_cursor **cur;
    uint32_t    ncur, capcur;
    em_buf      sqlbuf;
    char        msg[512];
    _Atomic int cancel;         /* sq_sess_cancel: stop what runs, for good */
    const sq_remote *rem;       /* a cluster's data (sq_sess_set_remote), or NULL */
    const sq_remote *txkv;      /* local writes to TRANSACTIONAL caches (sq_sess_set_txkv) */
};

/* ---- whole-table aggregates (sq_agg.c) ---------------------------------- */

#define SQ_AGG_MAX      16      /* results of one such query */
#define SQ_AGG_FALLBACK 1       /* sq_agg_page: let SQLite run the query instead */
#define SQ_CANCELLED    "The query was cancelled while executing."

typedef struct sq_aggq sq_aggq;
typedef struct sq_aggrun sq_aggrun;
/* sq_agg_parse: the shape of SELECT agg(col), ... FROM t read from the
 * lexed client text, or NULL if it is not one (or out of memory). */
sq_aggq   *sq_agg_parse(const sq_lexed *l);
void       sq_agg_free_q(sq_aggq *q);
/* sq_agg_start: a run of shape q against the catalog as it is now, or NULL
 * when SQLite must run it (a column not numeric, an index, ...). */
sq_aggrun *sq_agg_start(sq_sess *s, const sq_db *d, const sq_aggq *q);
void       sq_agg_free(sq_aggrun *r);
/* sq_agg_page: cursor c's one row (c->agg): 0 (the row, then no more),
 * SQ_AGG_FALLBACK (nothing written: step c->st instead), EM_AGAIN (over the
 * inline budget) or a failure with the session's message. */
int        sq_agg_page(sq_sess *s, sq_cursor *c, em_buf *out, uint32_t *rows, int *more);

/* sq_sess_db: the session's connection for schema, synced with the catalog. */
int sq_sess_db(sq_sess *s, const char *schema, sq_db **out);
int sq_fail(sq_sess *s, int rc, const char *fmt, ...) __attribute__((format(printf, 3, 4)));

#endif
