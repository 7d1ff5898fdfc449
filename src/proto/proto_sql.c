/* proto_sql.c - SQL ops: QUERY_SQL (2002), QUERY_SQL_CURSOR_GET_PAGE (2003),
 * QUERY_SQL_FIELDS (2004), QUERY_SQL_FIELDS_CURSOR_GET_PAGE (2005), and
 * RESOURCE_CLOSE (0) for SQL cursors.  Decoding and framing only; the
 * work is sql/ (sql/sql.h).
 *
 * Layouts: ../shared/reference/sql.md §1.1 and
 * ../shared/reference/ignite-thin-protocol.md §2.5.  SQL cursors count
 * against the same per-connection limit as scan cursors (1010), close
 * themselves after the page that says more = false, and die with the
 * connection (pr_conn_free -> sq_sess_free).
 */
#include "proto/proto_int.h"

#include <ctype.h>
#include <string.h>
#include <time.h>

#include "binary/binary.h"
#include "cluster/cl_meta_fsm.h"
#include "cluster/cl_node.h"
#include "sql/sql.h"
#include "store/store.h"
#include "util/clock.h"
#include "util/err.h"
#include "util/mem.h"

/* ---- SQL on a cluster: the data's owners through key-value requests ----
 *
 * A session on a cluster member reaches entries as a client would: its
 * point reads and writes run as GET, PUT, PUT_IF_ABSENT and REMOVE_KEY
 * requests on a connection of its own (c->sqlkv), which routes each to the
 * key's primary (retries, request ids and replication included); full scans
 * fetch each partition once from its primary (pr_cluster_scan_fetch);
 * CREATE/DROP TABLE start and destroy the cache through the metadata group
 * (1053, 1056) and the types a table defines go to every node (3003).  Such
 * requests wait for other members, so these sessions run on the SQL
 * threads (pr_sqlx_inline). */

static pr_conn *kv_conn(pr_conn *c)
{
    if (!c->sqlkv && (c->sqlkv = pr_conn_new(c->srv)) != NULL) {
        c->sqlkv->ready = 1;        /* a 1.7.0 client that routes */
        c->sqlkv->ver = PR_VER(1, 7, 0);
    }
    return c->sqlkv;
}

/* kv_call runs request body on c->sqlkv; *p, *n: the reply's payload.
 * 0, a negative code whose text is the sub-connection's message, or
 * EM_NOMEM. */
static int kv_call(pr_conn *c, em_buf *body, const uint8_t **p, size_t *n)
{
    pr_conn *k = kv_conn(c);
    if (!k)
        return EM_NOMEM;
    int rc;
    uint64_t end = 0;
    for (long ms = 1;; ms = ms < 16 ? ms * 2 : 16) {
        em_buf_reset(&c->fwd_resp);
        rc = pr_exec_request(k, body->p, body->len, &c->fwd_resp);
        if (rc != PR_PARK)
            break;
        /* A transaction holds the row's lock (here or on its primary).
         * DML runs on an SQL thread, never on a loop (proto_sqlrun.c), so
         * it waits here, as Ignite's DML waits in its implicit
         * transaction; bounded, and cut short when the client leaves. */
        uint64_t now = em_now_ms();
        if (!end)
            end = now + PR_SQL_LOCK_WAIT_MS;
        if (now >= end || (c->sql && sq_sess_cancelled(c->sql))) {
            pr_fail(k, PR_ST_FAILED, "Failed to acquire lock within %d ms: a transaction holds "
                    "the row's lock", PR_SQL_LOCK_WAIT_MS);
            return EM_REMOTE;
        }
        struct timespec ts = { 0, ms * 1000000L };
        nanosleep(&ts, NULL);
    }
    if (rc)
        return rc < 0 ? rc : EM_REMOTE;
    int32_t st;
    const uint8_t *m;
    size_t ml;
    if (pr_reply_parse(k, c->fwd_resp.p, c->fwd_resp.len, &st, &m, &ml, p, n))
        return EM_PROTO;
    /* an error's text is k->msg already: the request failed on k */
    return !st ? 0 : st == PR_ST_CACHE_NOT_FOUND ? EM_NOCACHE
           : st == PR_ST_CACHE_EXISTS ? EM_CACHEEXISTS : EM_REMOTE;
}

static int kv_begin(em_buf *b, int op, int32_t cache_id)
{
    em_buf_reset(b);
    return em_buf_put_le16(b, (uint16_t)op) || em_buf_put_le64(b, 1) ||
           (cache_id && (em_buf_put_le32(b, (uint32_t)cache_id) || em_buf_put_u8(b, 0)))
           ? EM_NOMEM : 0;
}

static int kv_key_op(pr_conn *c, int op, st_cache *sc, const uint8_t *k, size_t kl,
                     const uint8_t *v, size_t vl, const uint8_t **p, size_t *n)
{
    em_buf *b = &c->rid_env;        /* a request buffer SQL's calls may reuse */
    if (kv_begin(b, op, st_cache_id(sc)) || em_buf_append(b, k, kl) ||
        (v && em_buf_append(b, v, vl)))
        return EM_NOMEM;
    return kv_call(c, b, p, n);
}

static int r_get(void *ctx, st_cache *sc, const uint8_t *k, size_t kl, em_buf *out, int *found)
{
    const uint8_t *p;
    size_t n;
    int rc = kv_key_op(ctx, 1000, sc, k, kl, NULL, 0, &p, &n);
    *found = 0;
    if (rc || !n || p[0] == BIN_NULL)
        return rc;
    *found = 1;
    return em_buf_append(out, p, n) ? EM_NOMEM : 0;
}

static int r_put(void *ctx, st_cache *sc, const uint8_t *k, size_t kl, const uint8_t *v,
                 size_t vl, int if_absent, int *stored)
{
    const uint8_t *p;
    size_t n;
    int rc = kv_key_op(ctx, if_absent ? 1002 : 1001, sc, k, kl, v, vl, &p, &n);
    *stored = !rc && (!if_absent || (n >= 1 && p[0]));
    return rc;
}

static int r_remove(void *ctx, st_cache *sc, const uint8_t *k, size_t kl, int *removed)
{
    const uint8_t *p;
    size_t n;
    int rc = kv_key_op(ctx, 1016, sc, k, kl, NULL, 0, &p, &n);
    *removed = !rc && n >= 1 && p[0];
    return rc;
}

static int r_scan(void *ctx, st_cache *sc, st_scan **out)
{
    pr_conn *k = kv_conn(ctx);
    return k ? st_scan_open_via(sc, -1, pr_cluster_scan_fetch, k, out) : EM_NOMEM;
}

/* put_prop_str: property code and typed string (skipped when s is NULL). */
static int put_prop_str(em_buf *b, int code, const char *s, int *count)
{
    if (!s)
        return 0;
    (*count)++;
    return em_buf_put_le16(b, (uint16_t)code) || pr_put_str(b, s) ? EM_NOMEM : 0;
}

static int put_prop_i32(em_buf *b, int code, int32_t v, int *count)
{
    (*count)++;
    return em_buf_put_le16(b, (uint16_t)code) || em_buf_put_le32(b, (uint32_t)v) ? EM_NOMEM : 0;
}

/* r_create: CACHE_CREATE_WITH_CONFIGURATION of what CREATE TABLE sets. */
static int r_create(void *ctx, const st_cache_config *cfg)
{
    pr_conn *c = ctx;
    em_buf *b = &c->rid_env;
    int count = 0;
    if (kv_begin(b, 1053, 0) || em_buf_put_le32(b, 0) || em_buf_put_le16(b, 0))
        return EM_NOMEM;
    size_t len_at = 10, cnt_at = 14;
    int rc = put_prop_str(b, 0, cfg->name, &count) ||
             put_prop_i32(b, 1, cfg->cache_mode, &count) ||
             put_prop_i32(b, 2, cfg->atomicity_mode, &count) ||
             put_prop_i32(b, 3, cfg->backups, &count) ||
             put_prop_str(b, 203, cfg->sql_schema, &count) ||
             put_prop_str(b, 100, cfg->data_region_name, &count) ||
             put_prop_str(b, 400, cfg->group_name, &count);
    if (!rc && cfg->query_entities) {
        count++;
        rc = em_buf_put_le16(b, 200) ||
             em_buf_append(b, cfg->query_entities, cfg->query_entities_len);
    }
    if (rc)
        return EM_NOMEM;
    em_st32(b->p + len_at, (uint32_t)(b->len - len_at - 4));
    em_st16(b->p + cnt_at, (uint16_t)count);
    const uint8_t *p;
    size_t n;
    return kv_call(c, b, &p, &n);
}

static int r_destroy(void *ctx, int32_t cache_id)
{
    pr_conn *c = ctx;
    em_buf *b = &c->rid_env;
    const uint8_t *p;
    size_t n;
    if (kv_begin(b, 1056, 0) || em_buf_put_le32(b, (uint32_t)cache_id))
        return EM_NOMEM;
    return kv_call(c, b, &p, &n);
}

static int r_type_put(void *ctx, const uint8_t *rec, size_t len)
{
    pr_conn *c = ctx;
    em_buf *b = &c->rid_env;
    const uint8_t *p;
    size_t n;
    if (kv_begin(b, 3003, 0) || em_buf_append(b, rec, len))
        return EM_NOMEM;
    return kv_call(c, b, &p, &n);
}

/* r_set_qe: the cache's configuration with these query entities, to every
 * node as a CACHE_CONFIG entry (each applies it: pr_cfg_apply_config). */
static int r_set_qe(void *ctx, st_cache *sc, const uint8_t *qe, size_t len)
{
    pr_conn *c = ctx, *k = kv_conn(c);
    st_cache_config cfg;
    if (!k || st_cache_cfg_copy(sc, &cfg))
        return EM_NOMEM;
    em_free(cfg.query_entities);
    cfg.query_entities = len ? em_memdup(qe, len) : NULL;
    cfg.query_entities_len = cfg.query_entities ? (uint32_t)len : 0;
    em_buf props = EM_BUF_INIT, entry = EM_BUF_INIT;
    int rc = len && !cfg.query_entities ? EM_NOMEM : pr_cfg_encode_props(&cfg, &props);
    if (!rc)
        rc = cl_meta_enc_cache_config(&entry, st_cache_id(sc), props.p, props.len,
                                      cl_node_cache_crc(c->srv->opt.cluster, st_cache_id(sc)));
    if (!rc) {
        k->msg[0] = 0;
        rc = pr_cluster_propose(k, entry.p, entry.len, "change the cache's query entities");
        if (rc > 0)
            rc = EM_REMOTE;         /* k->msg says why */
    }
    em_buf_free(&props);
    em_buf_free(&entry);
    st_cache_config_free(&cfg);
    return rc;
}

static void r_sync(void *ctx)
{
    (void)pr_cluster_sync(ctx);
}

static const char *r_errmsg(void *ctx)
{
    pr_conn *c = ctx;
    return c->sqlkv && c->sqlkv->msg[0] ? c->sqlkv->msg
           : c->srv->opt.cluster ? "the cluster refused the request" : "the write failed";
}

sq_sess *pr_sql_sess(pr_conn *c)
{
    if (c->sql)
        return c->sql;
    if (!c->sqlrem) {
        /* On a cluster every call; on one node the writes to TRANSACTIONAL
         * caches, as cache ops that take (and wait for) the entry locks. */
        if (!(c->sqlrem = em_calloc(1, sizeof *c->sqlrem)))
            return NULL;
        *c->sqlrem = (sq_remote){ .get = r_get, .put = r_put, .remove = r_remove,
                                  .scan = r_scan, .create = r_create, .destroy = r_destroy,
                                  .type_put = r_type_put, .set_qe = r_set_qe, .sync = r_sync,
                                  .errmsg = r_errmsg, .ctx = c };
    }
    if ((c->sql = sq_sess_new(c->srv->sql)) != NULL) {
        if (c->srv->opt.cluster)
            sq_sess_set_remote(c->sql, c->sqlrem);
        else
            sq_sess_set_txkv(c->sql, c->sqlrem);
    }
    return c->sql;
}

static int sess(pr_conn *c, sq_sess **out)
{
    if (!c->srv->sql)
        return pr_fail(c, PR_ST_FAILED, "SQL is not available on this server");
    if (!pr_sql_sess(c))
        return EM_NOMEM;
    *out = c->sql;
    return 0;
}

/* page_budget: bytes of rows one reply may carry (the frame limit less room
 * for the header and counts). */
static size_t page_budget(const pr_conn *c)
{
    size_t m = c->srv->opt.max_msg;
    return m > (1u << 17) ? m - (1u << 16) : m / 2;
}

static int sql_err(pr_conn *c, sq_sess *s)
{
    const char *m = sq_errmsg(s);
    return pr_fail(c, PR_ST_FAILED, "%s", m[0] ? m : "SQL query failed");
}

/* cache_schema: the cache's SQL schema as Ignite normalises it (quoted ->
 * exact, else upper-cased), or the cache name when none is set. */
static void cache_schema(const st_cache *ca, char *out, size_t sz)
{
    const st_cache_config *cfg = st_cache_cfg(ca);
    const char *s = cfg->sql_schema;
    size_t n;
    if (!s || !*s) {
        n = strlen(cfg->name);
        n = n < sz - 1 ? n : sz - 1;
        memcpy(out, cfg->name, n);
        out[n] = 0;
        return;
    }
    n = strlen(s);
    if (n >= 2 && s[0] == '"' && s[n - 1] == '"') {
        s++;
        n -= 2;
        n = n < sz - 1 ? n : sz - 1;
        memcpy(out, s, n);
    } else {
        n = n < sz - 1 ? n : sz - 1;
        for (size_t i = 0; i < n; i++)
            out[i] = (char)toupper((unsigned char)s[i]);
    }
    out[n] = 0;
}

/* rd_args reads `int argc` + argc validated data objects. */
static int rd_args(pr_conn *c, pr_rd *r, sq_query *q)
{
    int32_t argc;
    if (pr_rd_i32(r, &argc))
        return pr_bad_request(c, EM_TRUNCATED);
    if (argc < 0 || argc > SQ_MAX_ARGS)
        return pr_fail(c, PR_ST_FAILED, "Invalid number of query parameters: %d", argc);
    q->args = r->p + r->pos;
    for (int32_t i = 0; i < argc; i++) {
        const uint8_t *a;
        size_t al;
        int rc = pr_rd_obj(c, r, &a, &al);
        if (rc)
            return pr_fail(c, PR_ST_FAILED, "Invalid query parameter %d: %s", i + 1, em_strerror(rc));
    }
    q->args_len = (size_t)(r->p + r->pos - q->args);
    q->argc = (uint32_t)argc;
    return 0;
}

static int check_cursor_room(pr_conn *c, sq_sess *s)
{
    uint32_t maxc = c->srv->opt.max_cursors;
    if (maxc && c->ncur + sq_sess_ncursors(s) >= maxc)
        return pr_fail(c, PR_ST_TOO_MANY_CURSORS, "Too many open cursors (limit %u per connection)",
                       maxc);
    return 0;
}

/* first_page runs q and appends the reply from the column count (fields)
 * or the row count (2002) on. */
static int run_query(pr_conn *c, sq_sess *s, sq_query *q, int32_t page, int names,
                     int fields, em_buf *out)
{
    int op = fields ? 2004 : 2002;
    int here = pr_sqlx_inline(c, op, q->sql, q->sql_len);
    if (!here)
        return PR_OFFLOAD;
    q->budget_ns = here == 1 ? PR_SQL_INLINE_NS : 0;
    int rc = check_cursor_room(c, s);
    if (rc)
        return rc;
    int64_t id = atomic_fetch_add(&c->srv->next_cursor, 1);
    sq_cursor *cu;
    if ((rc = sq_exec(s, q, id, &cu)) == EM_AGAIN && q->budget_ns)
        return PR_OFFLOAD;          /* DML or DDL: run where it may take long */
    if (rc)
        return rc == EM_NOMEM && !sq_errmsg(s)[0] ? rc : sql_err(c, s);
    size_t start = out->len;
    rc = em_buf_put_le64(out, (uint64_t)id);
    if (fields) {
        uint32_t n = sq_cursor_ncols(cu);
        rc = rc || em_buf_put_le32(out, n);
        for (uint32_t i = 0; !rc && names && i < n; i++)
            rc = pr_put_str(out, sq_cursor_colname(cu, i));
    }
    size_t cnt = out->len;
    rc = rc || em_buf_put_le32(out, 0);
    if (rc) {
        sq_cursor_close(s, cu);
        return EM_NOMEM;
    }
    uint32_t rows;
    int more;
    size_t budget = page_budget(c);
    budget = budget > out->len - start ? budget - (out->len - start) : 1;
    rc = sq_page(s, cu, page > 0 ? (uint32_t)page : 1024, budget, out, &rows, &more);
    if (rc || !more)
        sq_cursor_close(s, cu);     /* the last page was sent: free it now */
    if (rc == EM_AGAIN && q->budget_ns) {
        pr_sqlx_note_slow(c, q->sql, q->sql_len);
        return PR_OFFLOAD;          /* over the budget: nothing was sent */
    }
    if (rc)
        return sql_err(c, s);
    em_st32(out->p + cnt, rows);
    return pr_put_bool(out, more);
}

int pr_op_sql_fields(pr_conn *c, pr_rd *r, em_buf *out)
{
    sq_sess *s = NULL;
    int rc = sess(c, &s);
    if (rc)
        return rc;
    int32_t cache_id;
    uint8_t flags;
    if (pr_rd_i32(r, &cache_id) || pr_rd_u8(r, &flags))
        return pr_bad_request(c, EM_TRUNCATED);
    if (flags & 0x02)
        return pr_fail(c, PR_ST_FAILED, "Transactions are not supported by ember yet "
                       "(cache operation has the transactional flag)");
    if (flags & 0x04) {             /* an expiry policy: meaningless for SQL */
        if (pr_rd_left(r) < 24)
            return pr_bad_request(c, EM_TRUNCATED);
        r->pos += 24;
    }
    char schema[SQ_MAX_NAME];
    sq_query q;
    memset(&q, 0, sizeof q);
    st_cache *ca = NULL;
    if (cache_id != 0 && !(ca = st_cache_find(c->srv->st, cache_id)))
        return pr_fail(c, PR_ST_CACHE_NOT_FOUND, "Cache does not exist [cacheId= %d]", cache_id);
    const uint8_t *sch, *sql;
    size_t schl, sqll;
    int32_t page, max_rows;
    if ((rc = pr_rd_str(c, r, &sch, &schl)) != 0 || (rc = pr_rd_i32(r, &page)) != 0 ||
        (rc = pr_rd_i32(r, &max_rows)) != 0 || (rc = pr_rd_str(c, r, &sql, &sqll)) != 0)
        return pr_bad_request(c, rc);
    if (!sql)
        return pr_fail(c, PR_ST_FAILED, "SQL query must not be null");
    if ((rc = rd_args(c, r, &q)) != 0)
        return rc;
    uint8_t st, b[6], names;
    int64_t timeout;
    if (pr_rd_u8(r, &st))
        return pr_bad_request(c, EM_TRUNCATED);
    for (int i = 0; i < 6; i++)     /* distributedJoins .. lazy: one node ignores them */
        if (pr_rd_u8(r, &b[i]))
            return pr_bad_request(c, EM_TRUNCATED);
    if (pr_rd_i64(r, &timeout) || pr_rd_u8(r, &names))
        return pr_bad_request(c, EM_TRUNCATED);
    if (st > 2)
        return pr_fail(c, PR_ST_FAILED, "Invalid statement type: %d", st);
    if (sch) {
        q.schema = (const char *)sch;
        q.schema_len = schl;
    } else if (ca) {
        cache_schema(ca, schema, sizeof schema);
        q.schema = schema;
        q.schema_len = strlen(schema);
    }
    q.sql = (const char *)sql;
    q.sql_len = sqll;
    q.stmt_type = st;
    /* Java casts the timeout to int and applies it only when positive. */
    q.timeout_ms = (int32_t)timeout > 0 ? (int32_t)timeout : 0;
    (void)max_rows;                 /* read and ignored, as Java does */
    return run_query(c, s, &q, page, names, 1, out);
}

int pr_op_sql(pr_conn *c, pr_rd *r, em_buf *out)
{
    sq_sess *s = NULL;
    int rc = sess(c, &s);
    if (rc)
        return rc;
    pr_cache_hdr h;
    if ((rc = pr_cache_header(c, r, &h)) != 0)
        return rc;
    const uint8_t *type, *sql;
    size_t tl, sl;
    if ((rc = pr_rd_str(c, r, &type, &tl)) != 0 || (rc = pr_rd_str(c, r, &sql, &sl)) != 0)
        return pr_bad_request(c, rc);
    if (!type || !sql)
        return pr_fail(c, PR_ST_FAILED, "SQL query type and text must not be null");
    sq_query q;
    memset(&q, 0, sizeof q);
    if ((rc = rd_args(c, r, &q)) != 0)
        return rc;
    uint8_t b[3];
    int32_t page;
    int64_t timeout;
    for (int i = 0; i < 3; i++)
        if (pr_rd_u8(r, &b[i]))
            return pr_bad_request(c, EM_TRUNCATED);
    if (pr_rd_i32(r, &page) || pr_rd_i64(r, &timeout))
        return pr_bad_request(c, EM_TRUNCATED);
    char schema[SQ_MAX_NAME];
    cache_schema(h.cache, schema, sizeof schema);
    q.schema = schema;
    q.schema_len = strlen(schema);
    q.sql = (const char *)sql;
    q.sql_len = sl;
    q.kv_type = (const char *)type;
    q.kv_type_len = tl;
    q.stmt_type = SQ_STMT_SELECT;
    q.timeout_ms = (int32_t)timeout > 0 ? (int32_t)timeout : 0;
    return run_query(c, s, &q, page, 0, 0, out);
}

/* 2003 and 2005: long cursor id -> int rows, rows, bool more. */
int pr_op_sql_page(pr_conn *c, pr_rd *r, em_buf *out)
{
    if (!pr_sqlx_inline(c, 2003, NULL, 0))
        return PR_OFFLOAD;          /* pages of a query are read off the loop */
    int64_t id;
    if (pr_rd_i64(r, &id))
        return pr_bad_request(c, EM_TRUNCATED);
    sq_cursor *cu = c->sql ? sq_cursor_find(c->sql, id) : NULL;
    if (!cu)
        return pr_fail(c, PR_ST_RESOURCE_NOT_FOUND, "Failed to find resource with id: %lld",
                       (long long)id);
    size_t cnt = out->len;
    if (em_buf_put_le32(out, 0))
        return EM_NOMEM;
    uint32_t rows;
    int more;
    int rc = sq_page(c->sql, cu, 0, page_budget(c), out, &rows, &more);
    if (rc || !more)
        sq_cursor_close(c->sql, cu);
    if (rc)
        return sql_err(c, c->sql);
    em_st32(out->p + cnt, rows);
    return pr_put_bool(out, more);
}

/* RESOURCE_CLOSE: an SQL cursor, else whatever proto_cache.c owns. */
int pr_op_close_any(pr_conn *c, pr_rd *r, em_buf *out)
{
    int64_t id;
    size_t pos = r->pos;
    if (c->sql && pr_rd_i64(r, &id) == 0) {
        sq_cursor *cu = sq_cursor_find(c->sql, id);
        if (cu) {
            sq_cursor_close(c->sql, cu);
            return 0;
        }
    }
    r->pos = pos;
    return pr_op_resource_close(c, r, out);
}
