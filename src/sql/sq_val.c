/* sq_val.c - column types and value conversion between Ignite's binary
 * format and SQLite (reference sql.md §3.1 "Type mapping"): UUIDs, dates,
 * times and timestamps travel through SQLite as canonical text (so they
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

/* ---- type names ------------------------------------------------------- */

static const struct { const char *name; int t; } ddl_names[] = {
    {"BOOLEAN", SQ_T_BOOL}, {"BOOL", SQ_T_BOOL}, {"BIT", SQ_T_BOOL},
    {"TINYINT", SQ_T_BYTE}, {"SMALLINT", SQ_T_SHORT}, {"INT2", SQ_T_SHORT},
    {"INT", SQ_T_INT}, {"INTEGER", SQ_T_INT}, {"MEDIUMINT", SQ_T_INT}, {"INT4", SQ_T_INT},
    {"SIGNED", SQ_T_INT}, {"BIGINT", SQ_T_LONG}, {"INT8", SQ_T_LONG}, {"LONG", SQ_T_LONG},
    {"REAL", SQ_T_FLOAT}, {"FLOAT4", SQ_T_FLOAT}, {"DOUBLE", SQ_T_DOUBLE},
    {"FLOAT", SQ_T_DOUBLE}, {"FLOAT8", SQ_T_DOUBLE},
    {"DECIMAL", SQ_T_DECIMAL}, {"NUMERIC", SQ_T_DECIMAL}, {"NUMBER", SQ_T_DECIMAL},
    {"DEC", SQ_T_DECIMAL},
    {"VARCHAR", SQ_T_STRING}, {"CHAR", SQ_T_STRING}, {"CHARACTER", SQ_T_STRING},
    {"VARCHAR2", SQ_T_STRING}, {"NVARCHAR", SQ_T_STRING}, {"NVARCHAR2", SQ_T_STRING},
    {"VARCHAR_CASESENSITIVE", SQ_T_STRING}, {"VARCHAR_IGNORECASE", SQ_T_STRING},
    {"LONGVARCHAR", SQ_T_STRING}, {"NCHAR", SQ_T_STRING}, {"TEXT", SQ_T_STRING},
    {"CLOB", SQ_T_STRING},
    {"UUID", SQ_T_UUID}, {"DATE", SQ_T_DATE}, {"TIME", SQ_T_TIME},
    {"TIMESTAMP", SQ_T_TIMESTAMP}, {"DATETIME", SQ_T_TIMESTAMP},
    {"SMALLDATETIME", SQ_T_TIMESTAMP},
    {"BINARY", SQ_T_BINARY}, {"VARBINARY", SQ_T_BINARY}, {"BLOB", SQ_T_BINARY},
    {"LONGVARBINARY", SQ_T_BINARY}, {"BYTEA", SQ_T_BINARY}, {"RAW", SQ_T_BINARY},
    {"OTHER", SQ_T_OBJECT},
};

int sq_type_parse(const char *name)
{
    for (size_t i = 0; i < sizeof ddl_names / sizeof ddl_names[0]; i++)
        if (!strcmp(name, ddl_names[i].name))
            return ddl_names[i].t;
    return 0;
}

/* Declared types: SQLite derives the affinity from the substrings INT,
 * TEXT, BLOB, REAL (sqlite.org datatype3 §3.1), and hands the text back in
 * sqlite3_column_decltype, which tells sq_val_out the wire type. */
static const char *const decls[] = {
    [SQ_T_BOOL] = "BOOLEAN", [SQ_T_BYTE] = "TINYINT", [SQ_T_SHORT] = "SMALLINT",
    [SQ_T_INT] = "INT", [SQ_T_LONG] = "BIGINT", [SQ_T_FLOAT] = "REAL",
    [SQ_T_DOUBLE] = "DOUBLE", [SQ_T_DECIMAL] = "DECIMAL", [SQ_T_STRING] = "VARCHAR_TEXT",
    [SQ_T_UUID] = "UUID_TEXT", [SQ_T_DATE] = "DATE_TEXT", [SQ_T_TIME] = "TIME_TEXT",
    [SQ_T_TIMESTAMP] = "TIMESTAMP_TEXT", [SQ_T_BINARY] = "BINARY_BLOB",
    [SQ_T_OBJECT] = "OTHER_BLOB",
};

const char *sq_type_decl(int t)
{
    return t > 0 && t <= SQ_T_OBJECT ? decls[t] : "OTHER_BLOB";
}

int sq_type_from_decl(const char *decl)
{
    if (!decl)
        return 0;
    for (int t = 1; t <= SQ_T_OBJECT; t++)
        if (!strcmp(decl, decls[t]))
            return t;
    return 0;
}

int32_t sq_type_code(int t)
{
    static const int32_t codes[] = {
        [SQ_T_BOOL] = BIN_BOOL, [SQ_T_BYTE] = BIN_BYTE, [SQ_T_SHORT] = BIN_SHORT,
        [SQ_T_INT] = BIN_INT, [SQ_T_LONG] = BIN_LONG, [SQ_T_FLOAT] = BIN_FLOAT,
        [SQ_T_DOUBLE] = BIN_DOUBLE, [SQ_T_DECIMAL] = BIN_DECIMAL, [SQ_T_STRING] = BIN_STRING,
        [SQ_T_UUID] = BIN_UUID, [SQ_T_DATE] = BIN_DATE, [SQ_T_TIME] = BIN_TIME,
        [SQ_T_TIMESTAMP] = BIN_TIMESTAMP, [SQ_T_BINARY] = BIN_BYTE_ARR, [SQ_T_OBJECT] = BIN_OBJ,
    };
    return t > 0 && t <= SQ_T_OBJECT ? codes[t] : BIN_OBJ;
}

const char *sq_type_java(int t)
{
    static const char *const j[] = {
        [SQ_T_BOOL] = "java.lang.Boolean", [SQ_T_BYTE] = "java.lang.Byte",
        [SQ_T_SHORT] = "java.lang.Short", [SQ_T_INT] = "java.lang.Integer",
        [SQ_T_LONG] = "java.lang.Long", [SQ_T_FLOAT] = "java.lang.Float",
        [SQ_T_DOUBLE] = "java.lang.Double", [SQ_T_DECIMAL] = "java.math.BigDecimal",
        [SQ_T_STRING] = "java.lang.String", [SQ_T_UUID] = "java.util.UUID",
        [SQ_T_DATE] = "java.sql.Date", [SQ_T_TIME] = "java.sql.Time",
        [SQ_T_TIMESTAMP] = "java.sql.Timestamp", [SQ_T_BINARY] = "[B",
        [SQ_T_OBJECT] = "java.lang.Object",
    };
    return t > 0 && t <= SQ_T_OBJECT ? j[t] : "java.lang.Object";
}

/* ---- text forms --------------------------------------------------------- */

/* utf8_ok: SQLite text can hold any bytes (CAST(x'ff' AS TEXT)); binary
 * strings must be well-formed UTF-8 (no overlongs or surrogates). */
static int utf8_ok(const unsigned char *s, size_t n)
{
    size_t i = 0;
    while (i < n) {
        unsigned c = s[i];
        size_t k = c < 0x80 ? 0 : (c & 0xe0) == 0xc0 ? 1 : (c & 0xf0) == 0xe0 ? 2 : (c & 0xf8) == 0xf0 ? 3 : 9;
        if (k == 9 || i + k >= n)
            return 0;
        uint32_t cp = k ? c & (0x3f >> k) : c;
        for (size_t j = 1; j <= k; j++) {
            if ((s[i + j] & 0xc0) != 0x80)
                return 0;
            cp = cp << 6 | (s[i + j] & 0x3f);
        }
        if ((k == 1 && cp < 0x80) || (k == 2 && cp < 0x800) || (k == 3 && (cp < 0x10000 || cp > 0x10ffff)) ||
            (cp >= 0xd800 && cp <= 0xdfff))
            return 0;
        i += k + 1;
    }
    return 1;
}

static int fmt_uuid(const uint8_t *p, char *out)
{
    uint64_t m = em_ld64(p), l = em_ld64(p + 8);
    return snprintf(out, 40, "%08x-%04x-%04x-%04x-%012llx", (unsigned)(m >> 32),
                    (unsigned)(m >> 16) & 0xffff, (unsigned)m & 0xffff,
                    (unsigned)(l >> 48), (unsigned long long)(l & 0xffffffffffffULL));
}

static int parse_uuid(const char *s, size_t n, uint64_t *m, uint64_t *l)
{
    if (n != 36 || s[8] != '-' || s[13] != '-' || s[18] != '-' || s[23] != '-')
        return EM_INVAL;
    uint64_t v[2] = {0, 0};
    int k = 0;
    for (size_t i = 0; i < n; i++) {
        if (s[i] == '-')
            continue;
        int c = tolower((unsigned char)s[i]);
        int d = isdigit(c) ? c - '0' : (c >= 'a' && c <= 'f') ? c - 'a' + 10 : -1;
        if (d < 0)
            return EM_INVAL;
        v[k / 16] = v[k / 16] << 4 | (uint64_t)d;
        k++;
    }
    *m = v[0];
    *l = v[1];
    return 0;
}

/* fmt_ts: "YYYY-MM-DD HH:MM:SS.fffffffff" in UTC (kind 't'), "YYYY-MM-DD"
 * ('d') or "HH:MM:SS.fff" ('h'). */
static int fmt_ts(int64_t ms, int32_t nanos, int kind, char *out, size_t sz)
{
    int64_t sec = ms / 1000, msr = ms % 1000;
    if (msr < 0) { msr += 1000; sec--; }
    time_t tt = (time_t)sec;
    struct tm tm;
    if (!gmtime_r(&tt, &tm))
        return snprintf(out, sz, "%lld", (long long)ms);
    if (kind == 'd')
        return snprintf(out, sz, "%04d-%02d-%02d", tm.tm_year + 1900, tm.tm_mon + 1, tm.tm_mday);
    if (kind == 'h')
        return snprintf(out, sz, "%02d:%02d:%02d.%03d", tm.tm_hour, tm.tm_min, tm.tm_sec, (int)msr);
    return snprintf(out, sz, "%04d-%02d-%02d %02d:%02d:%02d.%09lld", tm.tm_year + 1900,
                    tm.tm_mon + 1, tm.tm_mday, tm.tm_hour, tm.tm_min, tm.tm_sec,
                    (long long)(msr * 1000000 + (nanos > 0 && nanos < 1000000 ? nanos : 0)));
}

/* parse_ts accepts [YYYY-MM-DD][ |T][HH:MM[:SS[.f...]]]; *ms and *nanos
 * (below the millisecond). */
static int parse_ts(const char *s, size_t n, int64_t *ms, int32_t *nanos)
{
    char b[64];
    if (n >= sizeof b)
        return EM_INVAL;
    memcpy(b, s, n);
    b[n] = 0;
    int Y = 1970, M = 1, D = 1, h = 0, mi = 0, se = 0, used = 0;
    const char *p = b;
    if (sscanf(p, "%4d-%2d-%2d%n", &Y, &M, &D, &used) == 3) {
        p += used;
        if (*p == ' ' || *p == 'T')
            p++;
    }
    int64_t frac = 0;
    if (*p) {
        used = 0;
        if (sscanf(p, "%2d:%2d%n", &h, &mi, &used) != 2)
            return EM_INVAL;
        p += used;
        if (*p == ':') {
            used = 0;
            if (sscanf(p + 1, "%2d%n", &se, &used) != 1)
                return EM_INVAL;
            p += 1 + used;
        }
        if (*p == '.') {
            int digits = 0;
            for (p++; isdigit((unsigned char)*p); p++)
                if (digits < 9) {
                    frac = frac * 10 + (*p - '0');
                    digits++;
                }
            for (; digits < 9; digits++)
                frac *= 10;
        }
    }
    while (*p == ' ')
        p++;
    if (*p || M < 1 || M > 12 || D < 1 || D > 31 || h > 23 || mi > 59 || se > 60)
        return EM_INVAL;
    struct tm tm = {0};
    tm.tm_year = Y - 1900;
    tm.tm_mon = M - 1;
    tm.tm_mday = D;
    tm.tm_hour = h;
    tm.tm_min = mi;
    tm.tm_sec = se;
    *ms = (int64_t)timegm(&tm) * 1000 + frac / 1000000;
    *nanos = (int32_t)(frac % 1000000);
    return 0;
}

/* ---- decimals: scale + big-endian magnitude with a sign bit (§3.1) ------ */

__extension__ typedef unsigned __int128 u128;

/* dec_to_text: exact text of a decimal of up to 16 magnitude bytes. */
static int dec_to_text(const uint8_t *v, char *out, size_t sz)
{
    int32_t scale = (int32_t)em_ld32(v + 1), len = (int32_t)em_ld32(v + 5);
    const uint8_t *m = v + 9;
    /* 16 magnitude bytes are 39 digits; with |scale| <= 64 the text is at
     * most 1 + 2 + 64 + 39 bytes (callers pass 160). */
    if (len < 0 || len > 16 || scale < -64 || scale > 64 || sz < 160)
        return EM_RANGE;
    int neg = len && (m[0] & 0x80);
    u128 u = 0;
    for (int i = 0; i < len; i++)
        u = u << 8 | (i == 0 ? (m[i] & 0x7f) : m[i]);
    char d[64];
    int nd = 0;
    do { d[nd++] = (char)('0' + (int)(u % 10)); u /= 10; } while (u && nd < 60);
    size_t o = 0;
    if (neg) out[o++] = '-';
    if (scale <= 0) {
        for (int i = nd - 1; i >= 0; i--) out[o++] = d[i];
        for (int i = 0; i < -scale && o + 1 < sz; i++) out[o++] = '0';
    } else {
        int intd = nd - scale;
        if (intd <= 0) {
            out[o++] = '0';
            out[o++] = '.';
            for (int i = 0; i < -intd; i++) out[o++] = '0';
            for (int i = nd - 1; i >= 0; i--) out[o++] = d[i];
        } else {
            for (int i = nd - 1; i >= 0; i--) {
                out[o++] = d[i];
                if (i == scale) out[o++] = '.';
            }
        }
    }
    out[o] = 0;
    return 0;
}

/* dec_parse: "[-]digits[.digits][e[+-]n]" -> unscaled value and scale. */
static int dec_parse(const char *s, size_t n, int *neg, u128 *u, int32_t *scale)
{
    size_t i = 0;
    *neg = 0;
    *u = 0;
    *scale = 0;
    while (i < n && s[i] == ' ') i++;
    if (i < n && (s[i] == '-' || s[i] == '+')) *neg = s[i++] == '-';
    int digits = 0, point = 0;
    for (; i < n; i++) {
        if (s[i] == '.' && !point) { point = 1; continue; }
        if (!isdigit((unsigned char)s[i]))
            break;
        if (*u > ((u128)1 << 120) / 10)
            return EM_RANGE;
        *u = *u * 10 + (u128)(s[i] - '0');
        digits++;
        if (point) (*scale)++;
    }
    if (!digits)
        return EM_INVAL;
    if (i < n && (s[i] == 'e' || s[i] == 'E')) {
        char *end;
        char tmp[16];
        size_t l = n - i - 1 < 15 ? n - i - 1 : 15;
        memcpy(tmp, s + i + 1, l);
        tmp[l] = 0;
        long e = strtol(tmp, &end, 10);
        if (end == tmp || *end || e < -64 || e > 64)
            return EM_INVAL;
        *scale -= (int32_t)e;
        i = n;
    }
    while (i < n && s[i] == ' ') i++;
    if (i != n)
        return EM_INVAL;
    /* Positive exponent leftovers: fold a negative scale into the value. */
    while (*scale < 0) {
        if (*u > ((u128)1 << 120) / 10)
            return EM_RANGE;
        *u *= 10;
        (*scale)++;
    }
    return 0;
}

/* dec_bytes: big-endian magnitude, a leading byte kept for the sign bit. */
static uint32_t dec_bytes(int neg, u128 u, uint8_t *mag)
{
    uint8_t tmp[17];
    uint32_t n = 0;
    do { tmp[n++] = (uint8_t)u; u >>= 8; } while (u);
    if (tmp[n - 1] & 0x80)
        tmp[n++] = 0;
    for (uint32_t i = 0; i < n; i++)
        mag[i] = tmp[n - 1 - i];
    if (neg)
        mag[0] |= 0x80;
    return n;
}

/* ---- binary -> SQLite ---------------------------------------------------- */

void sq_val_result(sqlite3_context *ctx, const uint8_t *v, int t)
{
    char b[160];
    int64_t l;
    double d;
    switch (v[0]) {
    case BIN_NULL:
        sqlite3_result_null(ctx);
        return;
    case BIN_BYTE: case BIN_SHORT: case BIN_INT: case BIN_LONG: case BIN_CHAR:
        if (bin_rd_long(v, &l) == 0)
            sqlite3_result_int64(ctx, l);
        return;
    case BIN_FLOAT: case BIN_DOUBLE:
        if (bin_rd_double(v, &d) == 0)
            sqlite3_result_double(ctx, d);
        return;
    case BIN_BOOL:
        sqlite3_result_int(ctx, v[1] != 0);
        return;
    case BIN_STRING: {
        const char *s;
        size_t n;
        if (bin_rd_string(v, &s, &n) == 0)
            /* TRANSIENT: SQLite keeps text results across xNext (MIN/MAX). */
            sqlite3_result_text(ctx, s, (int)n, SQLITE_TRANSIENT);
        return;
    }
    case BIN_UUID:
        sqlite3_result_text(ctx, b, fmt_uuid(v + 1, b), SQLITE_TRANSIENT);
        return;
    case BIN_DATE: case BIN_TIMESTAMP: {
        int32_t ns = v[0] == BIN_TIMESTAMP ? (int32_t)em_ld32(v + 9) : 0;
        int n = fmt_ts((int64_t)em_ld64(v + 1), ns, t == SQ_T_DATE ? 'd' : 't', b, sizeof b);
        sqlite3_result_text(ctx, b, n, SQLITE_TRANSIENT);
        return;
    }
    case BIN_TIME: {
        int64_t ms = (int64_t)em_ld64(v + 1) % 86400000;
        int n = fmt_ts(ms < 0 ? ms + 86400000 : ms, 0, 'h', b, sizeof b);
        sqlite3_result_text(ctx, b, n, SQLITE_TRANSIENT);
        return;
    }
    case BIN_DECIMAL:
        if (dec_to_text(v, b, sizeof b) == 0) {
            if (!strchr(b, '.') && strlen(b) < 19)
                sqlite3_result_int64(ctx, strtoll(b, NULL, 10));
            else
                sqlite3_result_double(ctx, strtod(b, NULL));
        } else {
            sqlite3_result_null(ctx);
        }
        return;
    case BIN_BYTE_ARR:
        sqlite3_result_blob(ctx, v + 5, (int)em_ld32(v + 1), SQLITE_TRANSIENT);
        return;
    default:
        sqlite3_result_blob(ctx, v, (int)bin_rd_len(v), SQLITE_TRANSIENT);
        return;
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
        return sqlite3_bind_text(st, i, b, fmt_uuid(v + 1, b), SQLITE_TRANSIENT);
    case BIN_DATE: case BIN_TIMESTAMP: {
        int32_t ns = v[0] == BIN_TIMESTAMP ? (int32_t)em_ld32(v + 9) : 0;
        return sqlite3_bind_text(st, i, b, fmt_ts((int64_t)em_ld64(v + 1), ns, 't', b, sizeof b),
                                 SQLITE_TRANSIENT);
    }
    case BIN_TIME: {
        int64_t ms = (int64_t)em_ld64(v + 1) % 86400000;
        return sqlite3_bind_text(st, i, b, fmt_ts(ms < 0 ? ms + 86400000 : ms, 0, 'h', b, sizeof b),
                                 SQLITE_TRANSIENT);
    }
    case BIN_DECIMAL:
        /* As text: a DECIMAL column's numeric affinity converts it for
         * comparisons, and writes parse it exactly. */
        if (dec_to_text(v, b, sizeof b))
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
    u128 u;
    int32_t scale;
    int rc = dec_parse(s, n, &neg, &u, &scale);
    if (rc)
        return rc;
    uint8_t mag[17];
    uint32_t ml = dec_bytes(neg, u, mag);
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
        if (!utf8_ok((const unsigned char *)s, n)) {
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
        if (!s || parse_uuid(s, strlen(s), &m, &lo))
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
            if (!s || parse_ts(s, strlen(s), &ms, &ns))
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

static int out_decimal(em_buf *o, const char *s)
{
    int neg;
    u128 u;
    int32_t scale;
    if (dec_parse(s, strlen(s), &neg, &u, &scale))
        return 1;
    uint8_t mag[17];
    uint32_t ml = dec_bytes(neg, u, mag);
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
        if (t == SQ_T_FLOAT) {
            float f = (float)d;
            memcpy(b, &f, 4);
            return out_code(o, BIN_FLOAT, b, 4);
        }
        memcpy(b, &d, 8);
        return out_code(o, BIN_DOUBLE, b, 8);
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
            if (!parse_uuid(s, n, &m, &l)) {
                em_st64(b, m);
                em_st64(b + 8, l);
                return out_code(o, BIN_UUID, b, 16);
            }
            break;
        case SQ_T_DATE: case SQ_T_TIME: case SQ_T_TIMESTAMP:
            if (!parse_ts(s, n, &ms, &ns)) {
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
        if (!utf8_ok((const unsigned char *)s, n))
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
