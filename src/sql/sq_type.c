/* sq_type.c - column types (DDL names, declared SQLite types, binary type
 * codes, Java class names) and the text forms values take inside SQLite
 * (reference sql.md §3.1 "Type mapping"): UUIDs as canonical lower-case
 * 8-4-4-4-12, timestamps as "YYYY-MM-DD HH:MM:SS.fffffffff" UTC, dates
 * "YYYY-MM-DD", times "HH:MM:SS.fff", decimals exactly as digits.
 */
#include "sql/sql_int.h"

#include <ctype.h>
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

/* sq_utf8_ok: SQLite text can hold any bytes (CAST(x'ff' AS TEXT)); binary
 * strings must be well-formed UTF-8 (no overlongs or surrogates). */
int sq_utf8_ok(const unsigned char *s, size_t n)
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

int sq_uuid_fmt(const uint8_t *p, char *out)
{
    uint64_t m = em_ld64(p), l = em_ld64(p + 8);
    return snprintf(out, 40, "%08x-%04x-%04x-%04x-%012llx", (unsigned)(m >> 32),
                    (unsigned)(m >> 16) & 0xffff, (unsigned)m & 0xffff,
                    (unsigned)(l >> 48), (unsigned long long)(l & 0xffffffffffffULL));
}

int sq_uuid_parse(const char *s, size_t n, uint64_t *m, uint64_t *l)
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

/* sq_ts_fmt: "YYYY-MM-DD HH:MM:SS.fffffffff" in UTC (kind 't'), "YYYY-MM-DD"
 * ('d') or "HH:MM:SS.fff" ('h'). */
int sq_ts_fmt(int64_t ms, int32_t nanos, int kind, char *out, size_t sz)
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

/* sq_ts_parse accepts [YYYY-MM-DD][ |T][HH:MM[:SS[.f...]]]; *ms and *nanos
 * (below the millisecond). */
int sq_ts_parse(const char *s, size_t n, int64_t *ms, int32_t *nanos)
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


/* sq_dec_text: exact text of a decimal of up to 16 magnitude bytes. */
int sq_dec_text(const uint8_t *v, char *out, size_t sz)
{
    int32_t scale = (int32_t)em_ld32(v + 1), len = (int32_t)em_ld32(v + 5);
    const uint8_t *m = v + 9;
    /* 16 magnitude bytes are 39 digits; with |scale| <= 64 the text is at
     * most 1 + 2 + 64 + 39 bytes (callers pass 160). */
    if (len < 0 || len > 16 || scale < -64 || scale > 64 || sz < 160)
        return EM_RANGE;
    int neg = len && (m[0] & 0x80);
    sq_u128 u = 0;
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

/* sq_dec_parse: "[-]digits[.digits][e[+-]n]" -> unscaled value and scale. */
int sq_dec_parse(const char *s, size_t n, int *neg, sq_u128 *u, int32_t *scale)
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
        if (*u > ((sq_u128)1 << 120) / 10)
            return EM_RANGE;
        *u = *u * 10 + (sq_u128)(s[i] - '0');
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
        if (*u > ((sq_u128)1 << 120) / 10)
            return EM_RANGE;
        *u *= 10;
        (*scale)++;
    }
    return 0;
}

/* sq_dec_bytes: big-endian magnitude, a leading byte kept for the sign bit. */
uint32_t sq_dec_bytes(int neg, sq_u128 u, uint8_t *mag)
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

