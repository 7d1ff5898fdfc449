/* sq_func.c - H2 functions SQLite lacks (reference sql.md §1.5 item 9,
 * §3.2 "Also"): CONCAT, NVL, LCASE/UCASE, CASEWHEN, LOCATE, TRUNCATE,
 * RANDOM_UUID, NOW/CURRENT_TIMESTAMP() and SYSDATE, registered on every
 * connection.  Deterministic ones say so, so SQLite may fold them.
 */
#include "sql/sql_int.h"

#include <math.h>
#include <stdio.h>
#include <string.h>
#include <sys/random.h>
#include <time.h>

/* CONCAT(a, b, ...): NULLs are skipped, as in H2. */
static void f_concat(sqlite3_context *ctx, int argc, sqlite3_value **argv)
{
    sqlite3_str *s = sqlite3_str_new(sqlite3_context_db_handle(ctx));
    for (int i = 0; i < argc; i++) {
        const unsigned char *t = sqlite3_value_text(argv[i]);
        if (t)
            sqlite3_str_append(s, (const char *)t, sqlite3_value_bytes(argv[i]));
    }
    int n = sqlite3_str_length(s);
    char *r = sqlite3_str_finish(s);
    if (!r && n) {
        sqlite3_result_error_nomem(ctx);
        return;
    }
    sqlite3_result_text(ctx, r ? r : "", n, r ? sqlite3_free : SQLITE_STATIC);
}

static void f_nvl(sqlite3_context *ctx, int argc, sqlite3_value **argv)
{
    (void)argc;
    sqlite3_result_value(ctx, sqlite3_value_type(argv[0]) != SQLITE_NULL ? argv[0] : argv[1]);
}

static void f_casewhen(sqlite3_context *ctx, int argc, sqlite3_value **argv)
{
    (void)argc;
    int t = sqlite3_value_type(argv[0]) != SQLITE_NULL && sqlite3_value_double(argv[0]) != 0;
    sqlite3_result_value(ctx, t ? argv[1] : argv[2]);
}

static void f_case(sqlite3_context *ctx, int argc, sqlite3_value **argv)
{
    (void)argc;
    const unsigned char *t = sqlite3_value_text(argv[0]);
    if (!t) {
        sqlite3_result_null(ctx);
        return;
    }
    int n = sqlite3_value_bytes(argv[0]);
    char *r = sqlite3_malloc(n + 1);
    if (!r) {
        sqlite3_result_error_nomem(ctx);
        return;
    }
    int up = sqlite3_user_data(ctx) != NULL;
    for (int i = 0; i < n; i++) {
        char c = (char)t[i];
        r[i] = up ? (c >= 'a' && c <= 'z' ? c - 32 : c) : (c >= 'A' && c <= 'Z' ? c + 32 : c);
    }
    r[n] = 0;
    sqlite3_result_text(ctx, r, n, sqlite3_free);
}

static int chars_before(const char *s, const char *end)
{
    int n = 0;
    for (; s < end; s++)
        if (((unsigned char)*s & 0xc0) != 0x80)
            n++;
    return n;
}

/* LOCATE(search, s[, start]): 1-based position in characters, 0 if none. */
static void f_locate(sqlite3_context *ctx, int argc, sqlite3_value **argv)
{
    const char *needle = (const char *)sqlite3_value_text(argv[0]);
    const char *hay = (const char *)sqlite3_value_text(argv[1]);
    if (!needle || !hay) {
        sqlite3_result_null(ctx);
        return;
    }
    int start = argc > 2 ? sqlite3_value_int(argv[2]) : 1;
    const char *p = hay;
    for (int k = 1; *p && k < start; k++) {
        p++;
        while (((unsigned char)*p & 0xc0) == 0x80)
            p++;
    }
    const char *f = strstr(p, needle);
    sqlite3_result_int(ctx, f ? chars_before(hay, f) + 1 : 0);
}

static void f_truncate(sqlite3_context *ctx, int argc, sqlite3_value **argv)
{
    double d = sqlite3_value_double(argv[0]);
    int digits = argc > 1 ? sqlite3_value_int(argv[1]) : 0;
    if (digits > 15) digits = 15;
    if (digits < -15) digits = -15;
    double m = pow(10, digits);
    sqlite3_result_double(ctx, trunc(d * m) / m);
}

static void f_uuid(sqlite3_context *ctx, int argc, sqlite3_value **argv)
{
    (void)argc; (void)argv;
    uint8_t r[16] = {0};
    if (getrandom(r, sizeof r, 0) != (ssize_t)sizeof r)
        sqlite3_randomness(sizeof r, r);
    r[6] = (uint8_t)((r[6] & 0x0f) | 0x40);
    r[8] = (uint8_t)((r[8] & 0x3f) | 0x80);
    char b[40];
    snprintf(b, sizeof b, "%02x%02x%02x%02x-%02x%02x-%02x%02x-%02x%02x-%02x%02x%02x%02x%02x%02x",
             r[0], r[1], r[2], r[3], r[4], r[5], r[6], r[7], r[8], r[9], r[10], r[11], r[12], r[13],
             r[14], r[15]);
    sqlite3_result_text(ctx, b, 36, SQLITE_TRANSIENT);
}

/* NOW(): the timestamp text form sq_val.c uses (UTC). */
static void f_now(sqlite3_context *ctx, int argc, sqlite3_value **argv)
{
    (void)argc; (void)argv;
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    struct tm tm;
    time_t t = ts.tv_sec;
    gmtime_r(&t, &tm);
    char b[48];
    int n = snprintf(b, sizeof b, "%04d-%02d-%02d %02d:%02d:%02d.%09ld", tm.tm_year + 1900,
                     tm.tm_mon + 1, tm.tm_mday, tm.tm_hour, tm.tm_min, tm.tm_sec,
                     (long)(ts.tv_nsec / 1000000 * 1000000));
    sqlite3_result_text(ctx, b, n, SQLITE_TRANSIENT);
}

int sq_func_register(sqlite3 *db)
{
    static const int DET = SQLITE_UTF8 | SQLITE_DETERMINISTIC | SQLITE_INNOCUOUS;
    static char up = 1;
    static const struct {
        const char *name;
        int argc, flags;
        void (*fn)(sqlite3_context *, int, sqlite3_value **);
        void *arg;
    } f[] = {
        {"CONCAT", -1, DET, f_concat, NULL}, {"NVL", 2, DET, f_nvl, NULL},
        {"CASEWHEN", 3, DET, f_casewhen, NULL}, {"LCASE", 1, DET, f_case, NULL},
        {"UCASE", 1, DET, f_case, &up}, {"LOCATE", 2, DET, f_locate, NULL},
        {"LOCATE", 3, DET, f_locate, NULL}, {"TRUNCATE", 1, DET, f_truncate, NULL},
        {"TRUNCATE", 2, DET, f_truncate, NULL}, {"TRUNC", 2, DET, f_truncate, NULL},
        {"RANDOM_UUID", 0, SQLITE_UTF8, f_uuid, NULL}, {"UUID", 0, SQLITE_UTF8, f_uuid, NULL},
        {"NOW", 0, SQLITE_UTF8, f_now, NULL}, {"SYSDATE", 0, SQLITE_UTF8, f_now, NULL},
        {"CURRENT_TIMESTAMP", 0, SQLITE_UTF8, f_now, NULL},
    };
    for (size_t i = 0; i < sizeof f / sizeof f[0]; i++) {
        int rc = sqlite3_create_function_v2(db, f[i].name, f[i].argc, f[i].flags, f[i].arg, f[i].fn,
                                            NULL, NULL, NULL);
        if (rc != SQLITE_OK)
            return rc;
    }
    return SQLITE_OK;
}
