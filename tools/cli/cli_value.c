/* cli_value.c - ember-cli's typed values: "type:text" arguments to Ignite
 * data objects and back, with bounds and UTF-8 checks on every server byte.
 * Type codes and payload layouts: shared/reference/ignite-thin-protocol.md
 * §3.1 (UUID = most-significant long LE, then least-significant long LE).
 */
#include "cli.h"

#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

/* ---- helpers ------------------------------------------------------------- */

int cli_utf8_valid(const uint8_t *s, size_t n)
{
    size_t i = 0;
    while (i < n) {
        uint8_t c = s[i];
        if (c < 0x80) {
            i++;
            continue;
        }
        size_t k;
        uint32_t cp;
        if (c >= 0xc2 && c <= 0xdf) { k = 1; cp = c & 0x1f; }
        else if (c >= 0xe0 && c <= 0xef) { k = 2; cp = c & 0x0f; }
        else if (c >= 0xf0 && c <= 0xf4) { k = 3; cp = c & 0x07; }
        else return 0;
        if (n - i <= k)
            return 0;
        for (size_t j = 1; j <= k; j++) {
            if ((s[i + j] & 0xc0) != 0x80)
                return 0;
            cp = (cp << 6) | (s[i + j] & 0x3f);
        }
        /* overlong forms, surrogates and values past U+10FFFF */
        if ((k == 2 && cp < 0x800) || (k == 3 && cp < 0x10000) || cp > 0x10ffff ||
            (cp >= 0xd800 && cp <= 0xdfff))
            return 0;
        i += k + 1;
    }
    return 1;
}

int cli_typed_string(const uint8_t *p, size_t n, size_t *pos, const uint8_t **s, uint32_t *len)
{
    if (*pos >= n)
        return -1;
    if (p[*pos] == 101) {
        *s = NULL;
        *len = 0;
        *pos += 1;
        return 0;
    }
    if (p[*pos] != 9 || n - *pos < 5)
        return -1;
    int32_t l = (int32_t)em_ld32(p + *pos + 1);
    if (l < 0 || (size_t)l > n - *pos - 5)
        return -1;
    if (!cli_utf8_valid(p + *pos + 5, (size_t)l))
        return -1;
    *s = p + *pos + 5;
    *len = (uint32_t)l;
    *pos += 5 + (size_t)l;
    return 0;
}

void cli_json_str(em_buf *out, const char *s, size_t n)
{
    em_buf_put_u8(out, '"');
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)s[i];
        char esc[8];
        if (c == '"' || c == '\\') {
            esc[0] = '\\';
            esc[1] = (char)c;
            em_buf_append(out, esc, 2);
        } else if (c < 0x20 || c == 0x7f) {
            snprintf(esc, sizeof esc, "\\u%04x", c);
            em_buf_append(out, esc, 6);
        } else {
            em_buf_put_u8(out, c);
        }
    }
    em_buf_put_u8(out, '"');
}

static void put_fmt(em_buf *out, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void put_fmt(em_buf *out, const char *fmt, ...)
{
    char tmp[128];
    va_list ap;
    va_start(ap, fmt);
    int k = vsnprintf(tmp, sizeof tmp, fmt, ap);
    va_end(ap);
    if (k > 0)
        em_buf_append(out, tmp, (size_t)k < sizeof tmp ? (size_t)k : sizeof tmp - 1);
}

static void put_hex(em_buf *out, const uint8_t *p, size_t n)
{
    static const char hx[] = "0123456789abcdef";
    for (size_t i = 0; i < n; i++) {
        em_buf_put_u8(out, (uint8_t)hx[p[i] >> 4]);
        em_buf_put_u8(out, (uint8_t)hx[p[i] & 15]);
    }
}

/* shortest %g text that reads back as the same double */
static void put_double(em_buf *out, double d)
{
    char tmp[40];
    for (int prec = 1; prec <= 17; prec++) {
        snprintf(tmp, sizeof tmp, "%.*g", prec, d);
        if (strtod(tmp, NULL) == d)
            break;
    }
    em_buf_append(out, tmp, strlen(tmp));
}

static int parse_i64(const char *s, int64_t lo, int64_t hi, int64_t *v)
{
    if (!*s)
        return -1;
    char *end;
    errno = 0;
    long long x = strtoll(s, &end, 0);
    if (errno || *end || x < lo || x > hi)
        return -1;
    *v = x;
    return 0;
}

static int hexval(int c)
{
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
}

/* parse_uuid reads 8-4-4-4-12 hex into 16 big-endian bytes. */
static int parse_uuid(const char *s, uint8_t be[16])
{
    if (strlen(s) != 36)
        return -1;
    int j = 0;
    for (int i = 0; i < 36; i++) {
        if (i == 8 || i == 13 || i == 18 || i == 23) {
            if (s[i] != '-')
                return -1;
            continue;
        }
        int h = hexval((unsigned char)s[i]), l = hexval((unsigned char)s[i + 1]);
        if (h < 0 || l < 0)
            return -1;
        be[j++] = (uint8_t)(h * 16 + l);
        i++;
    }
    return 0;
}

static uint64_t ld_be64(const uint8_t *p)
{
    uint64_t v = 0;
    for (int i = 0; i < 8; i++)
        v = (v << 8) | p[i];
    return v;
}

/* ---- parsing arguments ---------------------------------------------------- */

int cli_value_parse(const char *text, em_buf *out, char *err, size_t errlen)
{
    static const char *types[] = {"byte", "short", "int", "long", "float", "double",
                                  "char", "bool", "string", "uuid", "date", NULL};
    const char *colon = strchr(text, ':');
    const char *type = "string", *val = text;
    size_t tl = 0;
    if (colon) {
        tl = (size_t)(colon - text);
        for (int i = 0; types[i]; i++)
            if (strlen(types[i]) == tl && strncasecmp(text, types[i], tl) == 0) {
                type = types[i];
                val = colon + 1;
                break;
            }
    }
    /* An unknown prefix ("http://x") is part of a plain string. */
    int64_t v;
    if (!strcmp(type, "string")) {
        size_t n = strlen(val);
        if (!cli_utf8_valid((const uint8_t *)val, n)) {
            snprintf(err, errlen, "string is not valid UTF-8");
            return -1;
        }
        cli_put_str(out, val, n);
        return 0;
    }
    if (!strcmp(type, "byte")) {
        if (parse_i64(val, INT8_MIN, UINT8_MAX, &v)) goto bad;
        em_buf_put_u8(out, 1);
        em_buf_put_u8(out, (uint8_t)v);
    } else if (!strcmp(type, "short")) {
        if (parse_i64(val, INT16_MIN, INT16_MAX, &v)) goto bad;
        em_buf_put_u8(out, 2);
        em_buf_put_le16(out, (uint16_t)v);
    } else if (!strcmp(type, "int")) {
        if (parse_i64(val, INT32_MIN, INT32_MAX, &v)) goto bad;
        em_buf_put_u8(out, 3);
        em_buf_put_le32(out, (uint32_t)v);
    } else if (!strcmp(type, "long") || !strcmp(type, "date")) {
        if (parse_i64(val, INT64_MIN, INT64_MAX, &v)) goto bad;
        em_buf_put_u8(out, type[0] == 'l' ? 4 : 11);
        em_buf_put_le64(out, (uint64_t)v);
    } else if (!strcmp(type, "float") || !strcmp(type, "double")) {
        char *end;
        errno = 0;
        double d = strtod(val, &end);
        if (!*val || *end || errno == ERANGE) goto bad;
        if (type[0] == 'f') {
            float f = (float)d;
            uint32_t u;
            memcpy(&u, &f, 4);
            em_buf_put_u8(out, 5);
            em_buf_put_le32(out, u);
        } else {
            uint64_t u;
            memcpy(&u, &d, 8);
            em_buf_put_u8(out, 6);
            em_buf_put_le64(out, u);
        }
    } else if (!strcmp(type, "char")) {
        /* one UTF-16 code unit: a single character from the Basic Plane */
        size_t n = strlen(val);
        const uint8_t *u = (const uint8_t *)val;
        uint32_t cp;
        if (n == 1 && u[0] < 0x80) cp = u[0];
        else if (n == 2 && cli_utf8_valid(u, 2)) cp = ((u[0] & 0x1fu) << 6) | (u[1] & 0x3fu);
        else if (n == 3 && cli_utf8_valid(u, 3))
            cp = ((u[0] & 0x0fu) << 12) | ((u[1] & 0x3fu) << 6) | (u[2] & 0x3fu);
        else goto bad;
        em_buf_put_u8(out, 7);
        em_buf_put_le16(out, (uint16_t)cp);
    } else if (!strcmp(type, "bool")) {
        int b;
        if (!strcasecmp(val, "true") || !strcmp(val, "1")) b = 1;
        else if (!strcasecmp(val, "false") || !strcmp(val, "0")) b = 0;
        else goto bad;
        em_buf_put_u8(out, 8);
        em_buf_put_u8(out, (uint8_t)b);
    } else { /* uuid */
        uint8_t be[16];
        if (parse_uuid(val, be)) goto bad;
        em_buf_put_u8(out, 10);
        em_buf_put_le64(out, ld_be64(be));
        em_buf_put_le64(out, ld_be64(be + 8));
    }
    return 0;
bad:
    snprintf(err, errlen, "bad %s value '%s'", type, val);
    return -1;
}

/* ---- formatting replies ----------------------------------------------------- */

static void begin(em_buf *out, int json, const char *type)
{
    if (json) {
        em_buf_append(out, "{\"type\":\"", 9);
        em_buf_append(out, type, strlen(type));
        em_buf_append(out, "\",\"value\":", 10);
    } else {
        em_buf_append(out, type, strlen(type));
        em_buf_put_u8(out, ':');
    }
}

static const size_t fixed_len[12] = {0, 1, 2, 4, 8, 4, 8, 2, 1, 0, 16, 8};

int cli_value_format(const uint8_t *p, size_t n, int json, em_buf *out, char *err, size_t errlen)
{
    if (n == 0) {
        snprintf(err, errlen, "empty value");
        return -1;
    }
    uint8_t t = p[0];
    const uint8_t *d = p + 1;
    size_t dn = n - 1;
    if (t >= 1 && t <= 11 && t != 9 && dn != fixed_len[t]) {
        snprintf(err, errlen, "value of type %u has %zu bytes, expected %zu", t, dn, fixed_len[t]);
        return -1;
    }
    switch (t) {
    case 101:
        if (dn) goto trailing;
        em_buf_append(out, "null", 4);
        break;
    case 1: begin(out, json, "byte"); put_fmt(out, "%d", (int8_t)d[0]); goto close;
    case 2: begin(out, json, "short"); put_fmt(out, "%d", (int16_t)em_ld16(d)); goto close;
    case 3: begin(out, json, "int"); put_fmt(out, "%" PRId32, (int32_t)em_ld32(d)); goto close;
    case 4: begin(out, json, "long"); put_fmt(out, "%" PRId64, (int64_t)em_ld64(d)); goto close;
    case 11: begin(out, json, "date"); put_fmt(out, "%" PRId64, (int64_t)em_ld64(d)); goto close;
    case 5: case 6: {
        double v;
        if (t == 5) {
            float f;
            uint32_t u = em_ld32(d);
            memcpy(&f, &u, 4);
            v = f;
        } else {
            uint64_t u = em_ld64(d);
            memcpy(&v, &u, 8);
        }
        begin(out, json, t == 5 ? "float" : "double");
        if (json && !isfinite(v)) {
            const char *s = isnan(v) ? "\"NaN\"" : v > 0 ? "\"Infinity\"" : "\"-Infinity\"";
            em_buf_append(out, s, strlen(s));
        } else {
            put_double(out, v);
        }
        goto close;
    }
    case 7: {
        uint16_t u = em_ld16(d);
        begin(out, json, "char");
        char tmp[8];
        int k;
        if (u >= 0xd800 && u <= 0xdfff) {
            /* a lone surrogate cannot be shown as UTF-8 */
            k = snprintf(tmp, sizeof tmp, "\\u%04x", u);
            if (json) cli_json_str(out, tmp, (size_t)k);
            else em_buf_append(out, tmp, (size_t)k);
            goto close;
        }
        if (u < 0x80) { tmp[0] = (char)u; k = 1; }
        else if (u < 0x800) { tmp[0] = (char)(0xc0 | (u >> 6)); tmp[1] = (char)(0x80 | (u & 0x3f)); k = 2; }
        else { tmp[0] = (char)(0xe0 | (u >> 12)); tmp[1] = (char)(0x80 | ((u >> 6) & 0x3f));
               tmp[2] = (char)(0x80 | (u & 0x3f)); k = 3; }
        if (json) cli_json_str(out, tmp, (size_t)k);
        else em_buf_append(out, tmp, (size_t)k);
        goto close;
    }
    case 8:
        begin(out, json, "bool");
        if (d[0]) em_buf_append(out, "true", 4);
        else em_buf_append(out, "false", 5);
        goto close;
    case 9: {
        size_t pos = 0;
        const uint8_t *s;
        uint32_t sl;
        if (cli_typed_string(p, n, &pos, &s, &sl)) {
            snprintf(err, errlen, "malformed string value");
            return -1;
        }
        if (pos != n) goto trailing;
        begin(out, json, "string");
        if (json) cli_json_str(out, (const char *)s, sl);
        else em_buf_append(out, s, sl);
        goto close;
    }
    case 10: {
        uint64_t hi = em_ld64(d), lo = em_ld64(d + 8);
        begin(out, json, "uuid");
        put_fmt(out, "%s%08" PRIx64 "-%04" PRIx64 "-%04" PRIx64 "-%04" PRIx64 "-%012" PRIx64 "%s",
                json ? "\"" : "", hi >> 32, (hi >> 16) & 0xffff, hi & 0xffff, lo >> 48,
                lo & UINT64_C(0xffffffffffff), json ? "\"" : "");
        goto close;
    }
    case 12: {
        if (dn < 4 || em_ld32(d) != dn - 4) {
            snprintf(err, errlen, "malformed byte array");
            return -1;
        }
        begin(out, json, "bytes");
        if (json) em_buf_put_u8(out, '"');
        put_hex(out, d + 4, dn - 4);
        if (json) em_buf_put_u8(out, '"');
        goto close;
    }
    default: {
        /* Anything else (objects, collections, ...) is shown as its bytes:
         * the CLI does not need to understand it to display it. */
        char name[32];
        snprintf(name, sizeof name, "type%u", t);
        if (t == 103 && dn >= 7)
            snprintf(name, sizeof name, "object%08" PRIx32, em_ld32(d + 3));
        begin(out, json, name);
        if (json) em_buf_put_u8(out, '"');
        put_hex(out, p, n);
        if (json) em_buf_put_u8(out, '"');
        goto close;
    }
    }
    em_buf_put_u8(out, 0);
    return 0;
close:
    if (json)
        em_buf_put_u8(out, '}');
    em_buf_put_u8(out, 0);
    return 0;
trailing:
    snprintf(err, errlen, "bytes left after the value");
    return -1;
}
