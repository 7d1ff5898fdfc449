/* sq_val.c - value conversion between Ignite's binary format and SQLite
 * (reference sql.md §3.1 "Type mapping"): UUIDs, dates, times and
 * timestamps travel through SQLite as canonical text (sq_type.c; so they
 * compare correctly and `uuid_col = 'string'` works), decimals as numbers,
 * byte[] as blobs and any other object as a blob of its bytes.
 */
#include "sql/sql_int.h"

#include <ctype.h>
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "util/err.h"

/* ---- binary -> SQLite ---------------------------------------------------- */

void sq_val_get(const uint8_t *v, int t, sq_sv *o)
{
    o->type = SQLITE_NULL;
    switch (v[0]) {
    case BIN_BYTE: case BIN_SHORT: case BIN_INT: case BIN_LONG: case BIN_CHAR:
        if (bin_rd_long(v, &o->i) == 0)
            o->type = SQLITE_INTEGER;
        return;
    case BIN_FLOAT: case BIN_DOUBLE:
        if (bin_rd_double(v, &o->d) == 0)
            o->type = isnan(o->d) ? SQLITE_NULL : SQLITE_FLOAT;     /* SQLite: NaN is NULL */
        return;
    case BIN_BOOL:
        o->type = SQLITE_INTEGER;
        o->i = v[1] != 0;
        return;
    case BIN_STRING: {
        const char *s;
        if (bin_rd_string(v, &s, &o->n) == 0) {
            o->type = SQLITE_TEXT;
            o->p = s;
        }
        return;
    }
    case BIN_UUID:
        o->type = SQLITE_TEXT;
        o->n = (size_t)sq_uuid_fmt(v + 1, o->buf);
        o->p = o->buf;
        return;
    case BIN_DATE: case BIN_TIMESTAMP: {
        int32_t ns = v[0] == BIN_TIMESTAMP ? (int32_t)em_ld32(v + 9) : 0;
        o->type = SQLITE_TEXT;
        o->n = (size_t)sq_ts_fmt((int64_t)em_ld64(v + 1), ns, t == SQ_T_DATE ? 'd' : 't',
                                 o->buf, sizeof o->buf);
        o->p = o->buf;
        return;
    }
    case BIN_TIME: {
        int64_t ms = (int64_t)em_ld64(v + 1) % 86400000;
        o->type = SQLITE_TEXT;
        o->n = (size_t)sq_ts_fmt(ms < 0 ? ms + 86400000 : ms, 0, 'h', o->buf, sizeof o->buf);
        o->p = o->buf;
        return;
    }
    case BIN_DECIMAL:
        if (sq_dec_text(v, o->buf, sizeof o->buf) == 0) {
            if (!strchr(o->buf, '.') && strlen(o->buf) < 19) {
                o->type = SQLITE_INTEGER;
                o->i = strtoll(o->buf, NULL, 10);
            } else {
                o->type = SQLITE_FLOAT;
                o->d = strtod(o->buf, NULL);
            }
        }
        return;
    case BIN_NULL:
        return;
    case BIN_BYTE_ARR:
        o->type = SQLITE_BLOB;
        o->p = v + 5;
        o->n = em_ld32(v + 1);
        return;
    default:
        o->type = SQLITE_BLOB;
        o->p = v;
        o->n = bin_rd_len(v);
        return;
    }
}

void sq_val_result(sqlite3_context *ctx, const uint8_t *v, int t)
{
    /* The common column types first, without the general conversion. */
    switch (v[0]) {
    case BIN_INT:
        sqlite3_result_int64(ctx, (int32_t)em_ld32(v + 1));
        return;
    case BIN_LONG:
        sqlite3_result_int64(ctx, (int64_t)em_ld64(v + 1));
        return;
    case BIN_DOUBLE: {
        double d;
        memcpy(&d, v + 1, 8);
        if (isnan(d))
            sqlite3_result_null(ctx);       /* SQLite: NaN is NULL */
        else
            sqlite3_result_double(ctx, d);
        return;
    }
    default:
        break;
    }
    sq_sv sv;
    sq_val_get(v, t, &sv);
    switch (sv.type) {
    case SQLITE_INTEGER: sqlite3_result_int64(ctx, sv.i); return;
    case SQLITE_FLOAT:   sqlite3_result_double(ctx, sv.d); return;
    /* TRANSIENT: SQLite keeps text results across xNext (MIN/MAX). */
    case SQLITE_TEXT:    sqlite3_result_text(ctx, sv.p, (int)sv.n, SQLITE_TRANSIENT); return;
    case SQLITE_BLOB:    sqlite3_result_blob(ctx, sv.p, (int)sv.n, SQLITE_TRANSIENT); return;
    default:             sqlite3_result_null(ctx); return;
    }
}

int sq_val_bind(sqlite3_stmt *st, int i, const uint8_t *v, size_t n)
{
    char b[160];
    int64_t l;
    double d;
    v = bin_rd_resolve(v);
    switch (v[0]) {
    case BIN_NULL:
        return sqlite3_bind_null(st, i);
    case BIN_BYTE: case BIN_SHORT: case BIN_INT: case BIN_LONG: case BIN_CHAR:
        bin_rd_long(v, &l);
        return sqlite3_bind_int64(st, i, l);
    case BIN_FLOAT: case BIN_DOUBLE:
        bin_rd_double(v, &d);
        return sqlite3_bind_double(st, i, d);
    case BIN_BOOL:
        return sqlite3_bind_int(st, i, v[1] != 0);
    case BIN_STRING:
        return sqlite3_bind_text(st, i, (const char *)v + 5, (int)em_ld32(v + 1), SQLITE_TRANSIENT);
    case BIN_UUID:
        return sqlite3_bind_text(st, i, b, sq_uuid_fmt(v + 1, b), SQLITE_TRANSIENT);
    case BIN_DATE: case BIN_TIMESTAMP: {
        int32_t ns = v[0] == BIN_TIMESTAMP ? (int32_t)em_ld32(v + 9) : 0;
        return sqlite3_bind_text(st, i, b, sq_ts_fmt((int64_t)em_ld64(v + 1), ns, 't', b, sizeof b),
                                 SQLITE_TRANSIENT);
    }
    case BIN_TIME: {
        int64_t ms = (int64_t)em_ld64(v + 1) % 86400000;
        return sqlite3_bind_text(st, i, b, sq_ts_fmt(ms < 0 ? ms + 86400000 : ms, 0, 'h', b, sizeof b),
                                 SQLITE_TRANSIENT);
    }
    case BIN_DECIMAL:
        /* As text: a DECIMAL column's numeric affinity converts it for
         * comparisons, and writes parse it exactly. */
        if (sq_dec_text(v, b, sizeof b))
            return SQLITE_RANGE;
        return sqlite3_bind_text(st, i, b, -1, SQLITE_TRANSIENT);
    case BIN_BYTE_ARR:
        return sqlite3_bind_blob(st, i, v + 5, (int)em_ld32(v + 1), SQLITE_TRANSIENT);
    default:
        (void)n;
        return sqlite3_bind_blob(st, i, v, (int)bin_rd_len(v), SQLITE_TRANSIENT);
    }
}

/* ---- SQLite -> binary ---------------------------------------------------- */

static int conv_fail(char *msg, size_t msgsz, sqlite3_value *sv, int t)
{
    const unsigned char *s = sqlite3_value_text(sv);
    snprintf(msg, msgsz, "Data conversion error converting \"%.64s\" to %s",
             s ? (const char *)s : "?", sq_type_java(t));
    return EM_INVAL;
}

/* to_long: an integer from any storage class; H2 rounds doubles. */
static int to_long(sqlite3_value *sv, int64_t *out)
{
    switch (sqlite3_value_type(sv)) {
    case SQLITE_INTEGER:
        *out = sqlite3_value_int64(sv);
        return 0;
    case SQLITE_FLOAT: {
        double d = sqlite3_value_double(sv);
        if (!(d > -9.3e18 && d < 9.3e18))
            return EM_RANGE;
        *out = (int64_t)floor(d + 0.5);
        return 0;
    }
    case SQLITE_TEXT: {
        const char *s = (const char *)sqlite3_value_text(sv);
        char *end;
        errno = 0;
        long long v = strtoll(s, &end, 10);
        if (end == s || *end || errno)
            return EM_INVAL;
        *out = v;
        return 0;
    }
    default:
        return EM_INVAL;
    }
}

/* write_decimal from any value's text form (exact for text and integers). */
static int write_decimal(bin_writer *w, const char *s, size_t n)
{
    int neg;
    sq_u128 u;
    int32_t scale;
    int rc = sq_dec_parse(s, n, &neg, &u, &scale);
    if (rc)
        return rc;
    uint8_t mag[17];
    uint32_t ml = sq_dec_bytes(neg, u, mag);
    return bin_w_decimal(w, scale, mag, ml);
}

int sq_val_write(bin_writer *w, sqlite3_value *sv, int t, char *msg, size_t msgsz)
{
    int st = sqlite3_value_type(sv);
    if (st == SQLITE_NULL)
        return bin_w_null(w);
    int64_t l = 0;
    int rc = 0;
    switch (t) {
    case SQ_T_BOOL:
        if (st == SQLITE_TEXT) {
            const char *s = (const char *)sqlite3_value_text(sv);
            if (!strcasecmp(s, "true")) return bin_w_bool(w, 1);
            if (!strcasecmp(s, "false")) return bin_w_bool(w, 0);
        }
        if (to_long(sv, &l))
            return conv_fail(msg, msgsz, sv, t);
        return bin_w_bool(w, l != 0);
    case SQ_T_BYTE: case SQ_T_SHORT: case SQ_T_INT: case SQ_T_LONG:
        if (to_long(sv, &l))
            return conv_fail(msg, msgsz, sv, t);
        if (t == SQ_T_BYTE) {
            if (l < -128 || l > 127) return conv_fail(msg, msgsz, sv, t);
            return bin_w_byte(w, (int8_t)l);
        }
        if (t == SQ_T_SHORT) {
            if (l < -32768 || l > 32767) return conv_fail(msg, msgsz, sv, t);
            return bin_w_short(w, (int16_t)l);
        }
        if (t == SQ_T_INT) {
            if (l < INT32_MIN || l > INT32_MAX) return conv_fail(msg, msgsz, sv, t);
            return bin_w_int(w, (int32_t)l);
        }
        return bin_w_long(w, l);
    case SQ_T_FLOAT: case SQ_T_DOUBLE: {
        if (st == SQLITE_BLOB)
            return conv_fail(msg, msgsz, sv, t);
        if (st == SQLITE_TEXT) {
            const char *s = (const char *)sqlite3_value_text(sv);
            char *end;
            double d = strtod(s, &end);
            if (end == s || *end)
                return conv_fail(msg, msgsz, sv, t);
            return t == SQ_T_FLOAT ? bin_w_float(w, (float)d) : bin_w_double(w, d);
        }
        double d = sqlite3_value_double(sv);
        return t == SQ_T_FLOAT ? bin_w_float(w, (float)d) : bin_w_double(w, d);
    }
    case SQ_T_DECIMAL: {
        if (st == SQLITE_BLOB)
            return conv_fail(msg, msgsz, sv, t);
        const char *s = (const char *)sqlite3_value_text(sv);
        if (!s || (rc = write_decimal(w, s, strlen(s))) != 0)
            return rc == EM_NOMEM ? rc : conv_fail(msg, msgsz, sv, t);
        return 0;
    }
    case SQ_T_STRING: {
        const char *s = (const char *)sqlite3_value_text(sv);
        if (!s)
            return EM_NOMEM;
        size_t n = (size_t)sqlite3_value_bytes(sv);
        if (!sq_utf8_ok((const unsigned char *)s, n)) {
            snprintf(msg, msgsz, "Data conversion error: the value for a %s column is not valid UTF-8",
                     sq_type_java(t));
            return EM_INVAL;
        }
        return bin_w_string(w, s, n);
    }
    case SQ_T_UUID: {
        uint64_t m, lo;
        if (st == SQLITE_BLOB && sqlite3_value_bytes(sv) == 16) {
            const uint8_t *b = sqlite3_value_blob(sv);
            return bin_w_uuid(w, em_ld64(b), em_ld64(b + 8));
        }
        const char *s = (const char *)sqlite3_value_text(sv);
        if (!s || sq_uuid_parse(s, strlen(s), &m, &lo))
            return conv_fail(msg, msgsz, sv, t);
        return bin_w_uuid(w, m, lo);
    }
    case SQ_T_DATE: case SQ_T_TIME: case SQ_T_TIMESTAMP: {
        int64_t ms = 0;
        int32_t ns = 0;
        if (st == SQLITE_INTEGER) {
            ms = sqlite3_value_int64(sv);
        } else {
            const char *s = (const char *)sqlite3_value_text(sv);
            if (!s || sq_ts_parse(s, strlen(s), &ms, &ns))
                return conv_fail(msg, msgsz, sv, t);
        }
        if (t == SQ_T_DATE) return bin_w_date(w, ms);
        if (t == SQ_T_TIME) return bin_w_time(w, ms);
        return bin_w_timestamp(w, ms, ns);
    }
    case SQ_T_BINARY: {
        const void *b = st == SQLITE_BLOB ? sqlite3_value_blob(sv) : sqlite3_value_text(sv);
        return bin_w_prim_array(w, BIN_BYTE_ARR, b ? b : "", (uint32_t)sqlite3_value_bytes(sv));
    }
    default: {
        /* An object column takes the bytes of a data object. */
        if (st != SQLITE_BLOB)
            return conv_fail(msg, msgsz, sv, t);
        const uint8_t *b = sqlite3_value_blob(sv);
        size_t n = (size_t)sqlite3_value_bytes(sv), vl = 0;
        if (!b || bin_validate(b, n, &vl, 0) || vl != n)
            return conv_fail(msg, msgsz, sv, t);
        return bin_w_value(w, b, n);
    }
    }
}

/* ---- SQLite result -> wire data object ------------------------------------ */

static int out_code(em_buf *o, uint8_t code, const void *p, size_t n)
{
    if (em_buf_reserve(o, 1 + n))
        return EM_NOMEM;
    o->p[o->len++] = code;
    memcpy(o->p + o->len, p, n);
    o->len += n;
    return 0;
}

static int out_long(em_buf *o, int t, int64_t v)
{
    uint8_t b[8];
    switch (t) {
    case SQ_T_BOOL: b[0] = v != 0; return out_code(o, BIN_BOOL, b, 1);
    case SQ_T_BYTE: b[0] = (uint8_t)v; return out_code(o, BIN_BYTE, b, 1);
    case SQ_T_SHORT: em_st16(b, (uint16_t)v); return out_code(o, BIN_SHORT, b, 2);
    case SQ_T_INT: em_st32(b, (uint32_t)v); return out_code(o, BIN_INT, b, 4);
    case SQ_T_FLOAT: { float f = (float)v; memcpy(b, &f, 4); return out_code(o, BIN_FLOAT, b, 4); }
    case SQ_T_DOUBLE: { double d = (double)v; memcpy(b, &d, 8); return out_code(o, BIN_DOUBLE, b, 8); }
    default: em_st64(b, (uint64_t)v); return out_code(o, BIN_LONG, b, 8);
    }
}

/* out_real: a double result, FLOAT when the column is one. */
static int out_real(em_buf *o, int t, double d)
{
    uint8_t b[8];
    if (t == SQ_T_FLOAT) {
        float f = (float)d;
        memcpy(b, &f, 4);
        return out_code(o, BIN_FLOAT, b, 4);
    }
    memcpy(b, &d, 8);
    return out_code(o, BIN_DOUBLE, b, 8);
}

int sq_val_out_num(const sq_sv *sv, int t, em_buf *o)
{
    switch (sv->type) {
    case SQLITE_INTEGER: return out_long(o, t, sv->i);
    case SQLITE_FLOAT:   return out_real(o, t, sv->d);
    default:             return em_buf_put_u8(o, BIN_NULL);
    }
}

static int out_decimal(em_buf *o, const char *s)
{
    int neg;
    sq_u128 u;
    int32_t scale;
    if (sq_dec_parse(s, strlen(s), &neg, &u, &scale))
        return 1;
    uint8_t mag[17];
    uint32_t ml = sq_dec_bytes(neg, u, mag);
    if (em_buf_reserve(o, 9 + ml))
        return EM_NOMEM;
    o->p[o->len] = BIN_DECIMAL;
    em_st32(o->p + o->len + 1, (uint32_t)scale);
    em_st32(o->p + o->len + 5, ml);
    memcpy(o->p + o->len + 9, mag, ml);
    o->len += 9 + ml;
    return 0;
}

static int out_string(em_buf *o, const char *s, size_t n)
{
    if (em_buf_reserve(o, 5 + n))
        return EM_NOMEM;
    o->p[o->len] = BIN_STRING;
    em_st32(o->p + o->len + 1, (uint32_t)n);
    memcpy(o->p + o->len + 5, s, n);
    o->len += 5 + n;
    return 0;
}

int sq_val_out(sqlite3_stmt *st, int i, int t, em_buf *o)
{
    uint8_t b[16];
    switch (sqlite3_column_type(st, i)) {
    case SQLITE_NULL:
        return em_buf_put_u8(o, BIN_NULL);
    case SQLITE_INTEGER: {
        int64_t v = sqlite3_column_int64(st, i);
        if (t == SQ_T_DECIMAL) {
            char s[32];
            snprintf(s, sizeof s, "%lld", (long long)v);
            return out_decimal(o, s);
        }
        if (t == SQ_T_STRING) {
            const char *s = (const char *)sqlite3_column_text(st, i);
            return out_string(o, s, (size_t)sqlite3_column_bytes(st, i));
        }
        if (t == SQ_T_DATE || t == SQ_T_TIMESTAMP || t == SQ_T_TIME) {
            em_st64(b, (uint64_t)v);
            em_st32(b + 8, 0);
            return out_code(o, t == SQ_T_DATE ? BIN_DATE : t == SQ_T_TIME ? BIN_TIME : BIN_TIMESTAMP,
                            b, t == SQ_T_TIMESTAMP ? 12 : 8);
        }
        return out_long(o, t, v);
    }
    case SQLITE_FLOAT: {
        double d = sqlite3_column_double(st, i);
        if (t == SQ_T_DECIMAL) {
            const char *s = (const char *)sqlite3_column_text(st, i);
            if (s && out_decimal(o, s) == 0)
                return 0;
        }
        return out_real(o, t, d);
    }
    case SQLITE_TEXT: {
        const char *s = (const char *)sqlite3_column_text(st, i);
        size_t n = (size_t)sqlite3_column_bytes(st, i);
        if (!s)
            return EM_NOMEM;
        uint64_t m, l;
        int64_t ms;
        int32_t ns;
        int rc;
        switch (t) {
        case SQ_T_UUID:
            if (!sq_uuid_parse(s, n, &m, &l)) {
                em_st64(b, m);
                em_st64(b + 8, l);
                return out_code(o, BIN_UUID, b, 16);
            }
            break;
        case SQ_T_DATE: case SQ_T_TIME: case SQ_T_TIMESTAMP:
            if (!sq_ts_parse(s, n, &ms, &ns)) {
                em_st64(b, (uint64_t)ms);
                em_st32(b + 8, (uint32_t)ns);
                return out_code(o, t == SQ_T_DATE ? BIN_DATE : t == SQ_T_TIME ? BIN_TIME : BIN_TIMESTAMP,
                                b, t == SQ_T_TIMESTAMP ? 12 : 8);
            }
            break;
        case SQ_T_DECIMAL:
            if ((rc = out_decimal(o, s)) <= 0)
                return rc;
            break;
        }
        if (!sq_utf8_ok((const unsigned char *)s, n))
            break;                  /* not a valid string: sent as byte[] */
        return out_string(o, s, n);
    }
    default:
        break;
    }
    {
        const uint8_t *p = sqlite3_column_blob(st, i);
        size_t n = (size_t)sqlite3_column_bytes(st, i), vl = 0;
        if (t == SQ_T_OBJECT && p && bin_validate(p, n, &vl, 0) == 0 && vl == n)
            return bin_wire_out(p, n, o);
        if (em_buf_reserve(o, 5 + n))
            return EM_NOMEM;
        o->p[o->len] = BIN_BYTE_ARR;
        em_st32(o->p + o->len + 1, (uint32_t)n);
        if (n)
            memcpy(o->p + o->len + 5, p, n);
        o->len += 5 + n;
        return 0;
    }
}

/* ---- fields -------------------------------------------------------------- */

const uint8_t *sq_field_fill(bin_registry *reg, const bin_type **ty, int32_t *tid,
                             const uint8_t *o, int32_t fid, bin_floc *fl)
{
    int32_t id = bin_rd_type_id(o);
    if (!*ty || *tid != id) {
        *ty = bin_registry_get(reg, id);
        *tid = id;
    }
    const uint8_t *val;
    int rc = bin_floc_fill(o, *ty, fid, fl, &val);
    if (rc == EM_BADSCHEMA) {
        *ty = bin_registry_get(reg, id);
        rc = bin_floc_fill(o, *ty, fid, fl, &val);
    }
    return rc ? NULL : bin_rd_resolve(val);
}

const uint8_t *sq_field(bin_registry *reg, const bin_type **ty, int32_t *tid,
                        const uint8_t *o, int32_t fid)
{
    if (o[0] != BIN_OBJ)
        return NULL;
    int32_t id = bin_rd_type_id(o);
    if (!*ty || *tid != id) {
        *ty = bin_registry_get(reg, id);
        *tid = id;
    }
    const uint8_t *val;
    int rc = bin_rd_field(o, *ty, fid, &val);
    if (rc == EM_BADSCHEMA) {
        *ty = bin_registry_get(reg, id);
        rc = bin_rd_field(o, *ty, fid, &val);
    }
    return rc ? NULL : bin_rd_resolve(val);
}
