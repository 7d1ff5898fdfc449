/* sql_env.h - helpers of the SQL unit tests (test_sql.c, test_sql_index.c):
 * QUERY_SQL_FIELDS requests through the protocol layer in-process, rows
 * rendered as short text ("NAMES/a,b|c,d"), and the EXEC_OK / QUERY_IS /
 * FAILS_WITH checks.
 */
#ifndef EM_TEST_SQL_ENV_H
#define EM_TEST_SQL_ENV_H

#include "test.h"
#include "proto_env.h"

#include <stdio.h>
#include <string.h>

#include "binary/binary.h"
#include "proto/proto.h"
#include "util/err.h"

#define SQL_ENV_FN static __attribute__((unused))

SQL_ENV_FN int feed(pe_env *e, const void *p, size_t n)
{
    size_t u = 0;
    int rc = pr_feed(e->c, p, n, &e->out, SIZE_MAX / 2, &u);
    return rc ? rc : (u == n ? 0 : EM_AGAIN);
}

SQL_ENV_FN int open_env(pe_env *e)
{
    int rc = pe_open(e, NULL);
    if (rc)
        return rc;
    uint8_t hs[12] = { 8, 0, 0, 0, 1, 1, 0, 2, 0, 0, 0, 2 };   /* 1.2.0 like Node */
    return feed(e, hs, sizeof hs);
}

SQL_ENV_FN void req_begin(pe_env *e, int op)
{
    em_buf_reset(&e->req);
    em_buf_put_le32(&e->req, 0);
    em_buf_put_le16(&e->req, (uint16_t)op);
    em_buf_put_le64(&e->req, (uint64_t)++e->rid);
}

SQL_ENV_FN void put_str(em_buf *b, const char *s)
{
    if (!s) {
        em_buf_put_u8(b, 101);
        return;
    }
    em_buf_put_u8(b, 9);
    em_buf_put_le32(b, (uint32_t)strlen(s));
    em_buf_append(b, s, strlen(s));
}

/* send: frames e->req; *b = reply payload after rid + status; returns the
 * status (or -1 on a framing problem).  msg gets the error text. */
SQL_ENV_FN int send(pe_env *e, const uint8_t **b, size_t *n, char *msg)
{
    em_st32(e->req.p, (uint32_t)(e->req.len - 4));
    em_buf_reset(&e->out);
    if (feed(e, e->req.p, e->req.len) || e->out.len < 16)
        return -1;
    int st = (int)em_ld32(e->out.p + 12);
    *b = e->out.p + 16;
    *n = e->out.len - 16;
    if (st && msg) {
        uint32_t l = em_ld32(*b + 1);
        snprintf(msg, 300, "%.*s", (int)l, (const char *)*b + 5);
    }
    return st;
}

/* render appends a short text of data object v: "5", "'abc'", "null",
 * "L5" for longs, "D2.5" for doubles, "obj" for objects, "#code" else. */
SQL_ENV_FN size_t render(const uint8_t *v, char *o, size_t sz)
{
    int64_t l;
    double d;
    switch (v[0]) {
    case BIN_INT: bin_rd_long(v, &l); snprintf(o, sz, "%lld", (long long)l); return 5;
    case BIN_LONG: bin_rd_long(v, &l); snprintf(o, sz, "L%lld", (long long)l); return 9;
    case BIN_SHORT: bin_rd_long(v, &l); snprintf(o, sz, "S%lld", (long long)l); return 3;
    case BIN_BYTE: bin_rd_long(v, &l); snprintf(o, sz, "B%lld", (long long)l); return 2;
    case BIN_DOUBLE: bin_rd_double(v, &d); snprintf(o, sz, "D%g", d); return 9;
    case BIN_BOOL: snprintf(o, sz, v[1] ? "true" : "false"); return 2;
    case BIN_STRING: snprintf(o, sz, "'%.*s'", (int)em_ld32(v + 1), (const char *)v + 5);
        return 5 + em_ld32(v + 1);
    case BIN_NULL: snprintf(o, sz, "null"); return 1;
    case BIN_WRAPPED: snprintf(o, sz, "obj"); return 9 + em_ld32(v + 1);
    default: {
        size_t n = 0;
        bin_validate(v, 1u << 20, &n, 0);
        snprintf(o, sz, "#%d", v[0]);
        return n;
    }
    }
}

/* rows renders `int count, count x ncols objects, bool more` into txt as
 * "a,b|c,d"; returns the pointer after `more`. */
SQL_ENV_FN const uint8_t *rows(const uint8_t *p, uint32_t ncols, char *txt, size_t sz, int *more)
{
    uint32_t n = em_ld32(p);
    p += 4;
    size_t o = strlen(txt);
    for (uint32_t r = 0; r < n; r++) {
        for (uint32_t c = 0; c < ncols; c++) {
            char one[128];
            p += render(p, one, sizeof one);
            o += (size_t)snprintf(txt + o, sz - o, "%s%s", c ? "," : (o ? "|" : ""), one);
        }
    }
    *more = *p++;
    return p;
}

/* sqlf runs QUERY_SQL_FIELDS; txt gets "NAMES/rows" on success, the error
 * message on failure; returns the status.  args: count + objects. */
static int64_t g_timeout __attribute__((unused));           /* timeout sent by sqlf_args */

SQL_ENV_FN int sqlf_args(pe_env *e, const char *schema, int32_t cache_id, const char *sql, int page,
                     int stmt, const uint8_t *args, size_t alen, int argc, char *txt, int64_t *cur,
                     int *more)
{
    req_begin(e, 2004);
    em_buf_put_le32(&e->req, (uint32_t)cache_id);
    em_buf_put_u8(&e->req, 0);
    put_str(&e->req, schema);
    em_buf_put_le32(&e->req, (uint32_t)page);
    em_buf_put_le32(&e->req, (uint32_t)-1);
    put_str(&e->req, sql);
    em_buf_put_le32(&e->req, (uint32_t)argc);
    em_buf_append(&e->req, args, alen);
    em_buf_put_u8(&e->req, (uint8_t)stmt);
    for (int i = 0; i < 6; i++)
        em_buf_put_u8(&e->req, 0);
    em_buf_put_le64(&e->req, (uint64_t)g_timeout);
    em_buf_put_u8(&e->req, 1);
    const uint8_t *b;
    size_t n;
    txt[0] = 0;
    int st = send(e, &b, &n, txt);
    if (st)
        return st;
    if (cur)
        *cur = (int64_t)em_ld64(b);
    uint32_t nc = em_ld32(b + 8);
    const uint8_t *p = b + 12;
    size_t o = 0;
    for (uint32_t i = 0; i < nc; i++) {
        uint32_t l = em_ld32(p + 1);
        o += (size_t)snprintf(txt + o, 2048 - o, "%s%.*s", i ? "," : "", (int)l, (const char *)p + 5);
        p += 5 + l;
    }
    o += (size_t)snprintf(txt + o, 2048 - o, "/");
    int m;
    char rtxt[2048] = "";
    rows(p, nc, rtxt, sizeof rtxt, &m);
    snprintf(txt + o, 2048 - o, "%s", rtxt);
    if (more)
        *more = m;
    return 0;
}

SQL_ENV_FN int sqlf(pe_env *e, const char *sql, char *txt)
{
    return sqlf_args(e, NULL, 0, sql, 1024, 0, NULL, 0, 0, txt, NULL, NULL);
}

/* ---- a cache configured with a QueryEntity -------------------------------- */

/* qe_begin starts a list of one entity: its key and value type names,
 * table name, key and value field names (NULL: none). */
SQL_ENV_FN void qe_begin(em_buf *b, const char *kt, const char *vt, const char *table,
                         const char *kf, const char *vf)
{
    em_buf_put_le32(b, 1);
    put_str(b, kt);
    put_str(b, vt);
    put_str(b, table);
    put_str(b, kf);
    put_str(b, vf);
}

/* qe_field appends a field (no default, precision and scale unset). */
SQL_ENV_FN void qe_field(em_buf *b, const char *name, const char *type, int key)
{
    put_str(b, name);
    put_str(b, type);
    em_buf_put_u8(b, (uint8_t)key);
    em_buf_put_u8(b, 0);
    em_buf_put_u8(b, BIN_NULL);
    em_buf_put_le32(b, (uint32_t)-1);
    em_buf_put_le32(b, (uint32_t)-1);
}

/* qe_cache creates cache name (SQL schema schema) configured with the
 * entity list in qe, which it frees. */
SQL_ENV_FN int qe_cache(pe_env *e, const char *name, const char *schema, em_buf *qe, st_cache **out)
{
    st_cache_config cfg;
    st_cache_config_init(&cfg);
    cfg.name = (char *)name;
    cfg.sql_schema = (char *)schema;
    cfg.query_entities = qe->p;
    cfg.query_entities_len = (uint32_t)qe->len;
    int rc = st_cache_create(e->st, &cfg, out);
    em_buf_free(qe);
    return rc;
}

#define EXEC_OK(e, sql) do { char t_[2048]; int s_ = sqlf((e), (sql), t_); \
        if (s_) test_fail(__FILE__, __LINE__, "%s -> %d %s", (sql), s_, t_); } while (0)
#define QUERY_IS(e, sql, want) do { char t_[2048]; int s_ = sqlf((e), (sql), t_); \
        if (s_ || strcmp(t_, (want))) test_fail(__FILE__, __LINE__, "%s -> %d [%s] want [%s]", \
                                                (sql), s_, t_, (want)); } while (0)
#define FAILS_WITH(e, sql, sub) do { char t_[2048]; int s_ = sqlf((e), (sql), t_); \
        if (s_ != 1 || !strstr(t_, (sub))) test_fail(__FILE__, __LINE__, "%s -> %d [%s] want [%s]", \
                                                     (sql), s_, t_, (sub)); } while (0)

#endif
