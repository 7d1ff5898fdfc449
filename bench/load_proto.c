/* load_proto.c - requests and responses of `ember-bench load` for three
 * protocols, written into and parsed from caller-owned reused buffers.
 * Ignite thin client: ../shared/reference/ignite-thin-protocol.md §1.1-1.5
 * (framing, handshake, headers) and §2.2-2.3 (cache header, GET/PUT);
 * RESP: Redis's request/reply protocol; memcached: its binary protocol
 * (24-byte header, big-endian).  All layouts are tabled next to the code.
 */
#include "load.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Ignite op codes (§2.1). */
#define OP_GET 1000
#define OP_PUT 1001
#define OP_GET_OR_CREATE_WITH_NAME 1052
/* Ignite type codes (§3.1). */
#define T_INT 3
#define T_STRING 9
#define T_BYTE_ARR 12
#define T_NULL 101
/* memcached binary protocol. */
#define MC_REQ 0x80
#define MC_RES 0x81
#define MC_GET 0x00
#define MC_SET 0x01
#define MC_KEY_NOT_FOUND 0x0001

static void le16(uint8_t *p, uint16_t v) { p[0] = (uint8_t)v; p[1] = (uint8_t)(v >> 8); }
static void le32(uint8_t *p, uint32_t v)
{
    p[0] = (uint8_t)v; p[1] = (uint8_t)(v >> 8); p[2] = (uint8_t)(v >> 16); p[3] = (uint8_t)(v >> 24);
}
static void le64(uint8_t *p, uint64_t v) { le32(p, (uint32_t)v); le32(p + 4, (uint32_t)(v >> 32)); }
static void be16(uint8_t *p, uint16_t v) { p[0] = (uint8_t)(v >> 8); p[1] = (uint8_t)v; }
static void be32(uint8_t *p, uint32_t v)
{
    p[0] = (uint8_t)(v >> 24); p[1] = (uint8_t)(v >> 16); p[2] = (uint8_t)(v >> 8); p[3] = (uint8_t)v;
}
static uint16_t rd_le16(const uint8_t *p) { return (uint16_t)(p[0] | p[1] << 8); }
static uint32_t rd_le32(const uint8_t *p)
{
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}
static uint64_t rd_le64(const uint8_t *p) { return rd_le32(p) | (uint64_t)rd_le32(p + 4) << 32; }
static uint16_t rd_be16(const uint8_t *p) { return (uint16_t)(p[0] << 8 | p[1]); }
static uint32_t rd_be32(const uint8_t *p)
{
    return (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 | (uint32_t)p[3];
}

void ld_key_text(uint32_t key, uint8_t out[LD_KEY_LEN])
{
    memcpy(out, "key:", 4);
    for (int i = LD_KEY_LEN - 1; i >= 4; i--) {
        out[i] = (uint8_t)('0' + key % 10);
        key /= 10;
    }
}

void ld_filler(uint8_t *dst, uint32_t n)
{
    uint64_t seed = 0x5eed0000u + n;
    for (uint32_t i = 0; i < n; i++)
        dst[i] = (uint8_t)('a' + ld_rnd(&seed) % 26);
}

/* The value every writer stores under key: the key as 8 LE bytes (cut to the
 * value size), then the run's filler.  Deterministic per key, so a GET can be
 * verified whichever connection's PUT won. */
static void put_value(const ld_cfg *cfg, uint8_t *dst, uint32_t key)
{
    uint8_t k8[8];
    le64(k8, key);
    uint32_t vs = cfg->value_size, head = vs < 8 ? vs : 8;
    memcpy(dst, k8, head);
    if (vs > head)
        memcpy(dst + head, cfg->filler + head, vs - head);
}

int ld_value_ok(const ld_cfg *cfg, uint32_t key, const uint8_t *p, size_t n)
{
    if (n != cfg->value_size)
        return 0;
    uint8_t k8[8];
    le64(k8, key);
    size_t head = n < 8 ? n : 8;
    return memcmp(p, k8, head) == 0 && memcmp(p + head, cfg->filler + head, n - head) == 0;
}

/* Decimal text of v at dst; returns its length. */
static size_t put_dec(uint8_t *dst, uint64_t v)
{
    char tmp[24];
    size_t n = 0;
    do {
        tmp[n++] = (char)('0' + v % 10);
        v /= 10;
    } while (v);
    for (size_t i = 0; i < n; i++)
        dst[i] = (uint8_t)tmp[n - 1 - i];
    return n;
}

size_t ld_max_request(const ld_cfg *cfg)
{
    return 128 + LD_KEY_LEN + cfg->value_size;
}

size_t ld_max_response(const ld_cfg *cfg)
{
    /* Ignite with topology-changed flag: 4+8+2+12 + 5 + value; RESP bulk
     * header; memcached 24 + 4 extras.  Error replies can be longer; the
     * reader grows its buffer for those (rare, off the hot path). */
    return 64 + cfg->value_size;
}

/* ---- Ignite thin client ----
 *
 * Request (§1.4, §2.2, §2.3):
 * | off | size | field                                   |
 * |   0 |    4 | length of the rest                      |
 * |   4 |    2 | op code (1000 GET, 1001 PUT)            |
 * |   6 |    8 | request id (echoed)                     |
 * |  14 |    4 | cache id = String.hashCode(cache name)  |
 * |  18 |    1 | flags (0)                               |
 * |  19 |    - | key: 03 int32 | 09 int32 len + UTF-8    |
 * |   - |    - | PUT only: value: 0c int32 len + bytes   |
 */
static size_t ig_header(uint8_t *dst, uint16_t op, uint64_t rid)
{
    le16(dst + 4, op);
    le64(dst + 6, rid);
    return 14;
}

static size_t ig_key(const ld_cfg *cfg, uint8_t *dst, uint32_t key)
{
    if (cfg->int_keys) {
        dst[0] = T_INT;
        le32(dst + 1, key);
        return 5;
    }
    dst[0] = T_STRING;
    le32(dst + 1, LD_KEY_LEN);
    ld_key_text(key, dst + 5);
    return 5 + LD_KEY_LEN;
}

static size_t ig_cache_op(const ld_cfg *cfg, uint8_t *dst, uint16_t op, uint64_t rid,
                          uint32_t key)
{
    size_t n = ig_header(dst, op, rid);
    le32(dst + n, (uint32_t)cfg->cache_id);
    dst[n + 4] = 0;
    n += 5;
    n += ig_key(cfg, dst + n, key);
    return n;
}

/* ---- RESP ----
 * GET: *2\r\n$3\r\nGET\r\n$14\r\n<key>\r\n
 * SET: *3\r\n$3\r\nSET\r\n$14\r\n<key>\r\n$<len>\r\n<value>\r\n
 * ---- memcached binary request header (big-endian) ----
 * | off | size | field                         |
 * |   0 |    1 | magic 0x80                    |
 * |   1 |    1 | opcode (0 GET, 1 SET)         |
 * |   2 |    2 | key length                    |
 * |   4 |    1 | extras length (SET: 8)        |
 * |   5 |    1 | data type (0)                 |
 * |   6 |    2 | vbucket (0)                   |
 * |   8 |    4 | body length (extras+key+value)|
 * |  12 |    4 | opaque (echoed)               |
 * |  16 |    8 | CAS (0)                       |
 * SET extras: flags u32, expiration u32 (both 0).
 */
static size_t mc_header(uint8_t *dst, uint8_t op, uint8_t extlen, uint32_t body, uint32_t opaque)
{
    dst[0] = MC_REQ;
    dst[1] = op;
    be16(dst + 2, LD_KEY_LEN);
    dst[4] = extlen;
    dst[5] = 0;
    be16(dst + 6, 0);
    be32(dst + 8, body);
    be32(dst + 12, opaque);
    memset(dst + 16, 0, 8);
    return 24;
}

size_t ld_enc_get(const ld_cfg *cfg, uint8_t *dst, uint64_t rid, uint32_t key)
{
    size_t n;
    switch (cfg->proto) {
    case LD_IGNITE:
        n = ig_cache_op(cfg, dst, OP_GET, rid, key);
        le32(dst, (uint32_t)(n - 4));
        return n;
    case LD_RESP:
        memcpy(dst, "*2\r\n$3\r\nGET\r\n$14\r\n", 18);
        ld_key_text(key, dst + 18);
        memcpy(dst + 18 + LD_KEY_LEN, "\r\n", 2);
        return 20 + LD_KEY_LEN;
    default:
        n = mc_header(dst, MC_GET, 0, LD_KEY_LEN, (uint32_t)rid);
        ld_key_text(key, dst + n);
        return n + LD_KEY_LEN;
    }
}

size_t ld_enc_put(const ld_cfg *cfg, uint8_t *dst, uint64_t rid, uint32_t key)
{
    size_t n, vs = cfg->value_size;
    switch (cfg->proto) {
    case LD_IGNITE:
        n = ig_cache_op(cfg, dst, OP_PUT, rid, key);
        dst[n] = T_BYTE_ARR;
        le32(dst + n + 1, (uint32_t)vs);
        put_value(cfg, dst + n + 5, key);
        n += 5 + vs;
        le32(dst, (uint32_t)(n - 4));
        return n;
    case LD_RESP:
        memcpy(dst, "*3\r\n$3\r\nSET\r\n$14\r\n", 18);
        n = 18;
        ld_key_text(key, dst + n);
        n += LD_KEY_LEN;
        memcpy(dst + n, "\r\n$", 3);
        n += 3;
        n += put_dec(dst + n, vs);
        memcpy(dst + n, "\r\n", 2);
        n += 2;
        put_value(cfg, dst + n, key);
        n += vs;
        memcpy(dst + n, "\r\n", 2);
        n += 2;
        if (cfg->resp_wait) {
            /* Redis's synchronous replication: the SET is acknowledged once
             * WAIT reports resp_wait replicas (timeout 0 = no bound). */
            memcpy(dst + n, "*3\r\n$4\r\nWAIT\r\n$", 15);
            n += 15;
            char w[16];
            int wl = snprintf(w, sizeof w, "%d", cfg->resp_wait);
            n += put_dec(dst + n, (size_t)wl);
            memcpy(dst + n, "\r\n", 2);
            n += 2;
            memcpy(dst + n, w, (size_t)wl);
            n += (size_t)wl;
            memcpy(dst + n, "\r\n$1\r\n0\r\n", 9);
            n += 9;
        }
        return n;
    default:
        n = mc_header(dst, MC_SET, 8, (uint32_t)(8 + LD_KEY_LEN + vs), (uint32_t)rid);
        memset(dst + n, 0, 8);
        n += 8;
        ld_key_text(key, dst + n);
        n += LD_KEY_LEN;
        put_value(cfg, dst + n, key);
        return n + vs;
    }
}

/* ---- Ignite handshake (§1.2, §1.3) ----
 * | off | size | field                                        |
 * |   0 |    4 | length                                       |
 * |   4 |    1 | 1 = handshake                                |
 * |   5 |    6 | major, minor, patch (int16 each)             |
 * |  11 |    1 | 2 = thin client                              |
 * |  12 |    5 | >= 1.7.0 only: features 0c + int32 0 (none)  |
 * Reply: length, byte success; on failure int16 x3 server version + string.
 */
static int ig_ver_ge(const ld_cfg *cfg, int ma, int mi)
{
    return cfg->ver_major > ma || (cfg->ver_major == ma && cfg->ver_minor >= mi);
}

size_t ld_enc_handshake(const ld_cfg *cfg, uint8_t *dst)
{
    size_t n = 4;
    dst[n++] = 1;
    le16(dst + n, (uint16_t)cfg->ver_major);
    le16(dst + n + 2, (uint16_t)cfg->ver_minor);
    le16(dst + n + 4, (uint16_t)cfg->ver_patch);
    n += 6;
    dst[n++] = 2;
    if (ig_ver_ge(cfg, 1, 7)) {
        dst[n++] = T_BYTE_ARR;
        le32(dst + n, 0);
        n += 4;
    }
    le32(dst, (uint32_t)(n - 4));
    return n;
}

long ld_parse_handshake(const ld_cfg *cfg, const uint8_t *p, size_t n, char *err, size_t errlen)
{
    (void)cfg;
    if (n < 4)
        return 0;
    uint32_t len = rd_le32(p);
    if (len < 1 || len > (1u << 20)) {
        snprintf(err, errlen, "handshake reply has bad length %u", len);
        return -1;
    }
    if (n < 4 + (size_t)len)
        return 0;
    if (p[4] == 1)
        return 1;
    if (len >= 7 + 5 && p[11] == T_STRING) {
        uint32_t ml = rd_le32(p + 12);
        if (ml > len - 12)
            ml = len - 12;
        snprintf(err, errlen, "handshake rejected (server prefers %u.%u.%u): %.*s",
                 rd_le16(p + 5), rd_le16(p + 7), rd_le16(p + 9), (int)ml, (const char *)p + 16);
    } else {
        snprintf(err, errlen, "handshake rejected");
    }
    return -1;
}

/* GET_OR_CREATE_WITH_NAME (1052): header + typed string cache name. */
size_t ld_enc_get_or_create(const ld_cfg *cfg, uint8_t *dst, uint64_t rid)
{
    size_t nl = strlen(cfg->cache_name);
    size_t n = ig_header(dst, OP_GET_OR_CREATE_WITH_NAME, rid);
    dst[n] = T_STRING;
    le32(dst + n + 1, (uint32_t)nl);
    memcpy(dst + n + 5, cfg->cache_name, nl);
    n += 5 + nl;
    le32(dst, (uint32_t)(n - 4));
    return n;
}

/* Ignite response (§1.5):
 * 1.0.0-1.3.0: length, long request id, int status, [string message if
 *              status != 0], payload
 * >= 1.4.0:    length, long request id, short flags (1 ERROR, 2 TOPOLOGY
 *              CHANGED), [long + int topology version if 2], [int status +
 *              string message if 1], payload
 * Payloads here: PUT/1052 nothing; GET 101 (null) or 0c int32 len + bytes. */
static long ig_parse(const ld_cfg *cfg, const uint8_t *p, size_t n, ld_resp *r)
{
    if (n < 4)
        return 0;
    uint32_t len = rd_le32(p);
    if (len < 8 || len > (64u << 20)) {
        r->what = "Ignite response with a bad length";
        return -1;
    }
    if (n < 4 + (size_t)len)
        return 0;
    const uint8_t *q = p + 12, *end = p + 4 + len;
    r->rid = rd_le64(p + 4);
    int err = 0;
    if (ig_ver_ge(cfg, 1, 4)) {
        if (end - q < 2)
            goto short_frame;
        uint16_t flags = rd_le16(q);
        q += 2;
        if (flags & 2)
            q += 12;
        err = flags & 1;
        if (err) {
            if (end - q < 4)
                goto short_frame;
            r->status = (int)rd_le32(q);
            if (r->status == 0)
                r->status = -1;   /* ERROR flag with status 0 is still an error */
            q += 4;
        }
    } else {
        if (end - q < 4)
            goto short_frame;
        r->status = (int)rd_le32(q);
        q += 4;
        err = r->status != 0;
    }
    if (q > end)
        goto short_frame;
    if (err) {
        if (end - q >= 5 && q[0] == T_STRING) {
            uint32_t ml = rd_le32(q + 1);
            if (ml <= (size_t)(end - q - 5)) {
                r->msg = q + 5;
                r->msglen = ml;
            }
        }
        return (long)(4 + len);
    }
    if (q == end) {
        r->is_ok = 1;
    } else if (end - q == 1 && q[0] == T_NULL) {
        r->is_nil = 1;
    } else if (end - q >= 5 && q[0] == T_BYTE_ARR && rd_le32(q + 1) == (size_t)(end - q - 5)) {
        r->is_value = 1;
        r->val = q + 5;
        r->vlen = (size_t)(end - q - 5);
    } else {
        r->what = "unexpected Ignite response payload";
    }
    return (long)(4 + len);
short_frame:
    r->what = "Ignite response shorter than its header";
    return -1;
}

/* RESP replies: +OK, -ERR text, $len bulk, $-1 nil (one line each). */
static long resp_parse(const uint8_t *p, size_t n, ld_resp *r)
{
    if (n < 3)
        return 0;
    const uint8_t *nl = memchr(p, '\n', n);
    if (!nl)
        return 0;
    size_t line = (size_t)(nl - p) + 1;   /* including \r\n */
    if (line < 3 || nl[-1] != '\r') {
        r->what = "RESP line without CRLF";
        return -1;
    }
    switch (p[0]) {
    case '+':
        r->is_ok = line == 5 && p[1] == 'O' && p[2] == 'K';
        if (!r->is_ok)
            r->what = "unexpected RESP status line";
        return (long)line;
    case '-':
        r->status = 1;
        r->msg = p + 1;
        r->msglen = line - 3;
        return (long)line;
    case '$': {
        if (p[1] == '-') {
            r->is_nil = 1;
            return (long)line;
        }
        uint64_t len = 0;
        for (const uint8_t *d = p + 1; d < nl - 1; d++) {
            if (*d < '0' || *d > '9' || len > (1u << 30)) {
                r->what = "bad RESP bulk length";
                return -1;
            }
            len = len * 10 + (uint64_t)(*d - '0');
        }
        if (n < line + len + 2)
            return 0;
        if (p[line + len] != '\r' || p[line + len + 1] != '\n') {
            r->what = "RESP bulk not followed by CRLF";
            return -1;
        }
        r->is_value = 1;
        r->val = p + line;
        r->vlen = (size_t)len;
        return (long)(line + len + 2);
    }
    case ':':
        r->what = "unexpected RESP integer reply";
        return (long)line;
    default:
        r->what = "unknown RESP reply type";
        return -1;
    }
}

/* memcached binary response: magic 0x81, opcode, key length (2), extras
 * length (1), data type (1), status (2), body length (4), opaque (4), CAS (8);
 * body = extras + key + value.  GET hit: 4 bytes of flags as extras. */
static long mc_parse(const uint8_t *p, size_t n, ld_resp *r)
{
    if (n < 24)
        return 0;
    if (p[0] != MC_RES) {
        r->what = "memcached response with bad magic";
        return -1;
    }
    uint32_t body = rd_be32(p + 8);
    if (body > (64u << 20)) {
        r->what = "memcached response with a bad body length";
        return -1;
    }
    if (n < 24 + (size_t)body)
        return 0;
    uint16_t keylen = rd_be16(p + 2), status = rd_be16(p + 6);
    uint8_t extlen = p[4];
    r->mc_opcode = p[1];
    r->rid = rd_be32(p + 12);
    if ((size_t)extlen + keylen > body) {
        r->what = "memcached response: extras and key exceed body";
        return -1;
    }
    if (status == MC_KEY_NOT_FOUND && p[1] == MC_GET) {
        r->is_nil = 1;
    } else if (status != 0) {
        r->status = status;
        r->msg = p + 24;
        r->msglen = body;
    } else if (p[1] == MC_GET) {
        r->is_value = 1;
        r->val = p + 24 + extlen + keylen;
        r->vlen = body - extlen - keylen;
    } else if (body == 0) {
        r->is_ok = 1;
    } else {
        r->what = "unexpected memcached SET response body";
    }
    return (long)(24 + body);
}

long ld_parse(const ld_cfg *cfg, const uint8_t *p, size_t n, ld_resp *r)
{
    memset(r, 0, sizeof *r);
    switch (cfg->proto) {
    case LD_IGNITE: return ig_parse(cfg, p, n, r);
    case LD_RESP: {
        long m = resp_parse(p, n, r);
        if (m <= 0 || !cfg->resp_wait || !r->is_ok)
            return m;
        /* SET's +OK, then WAIT's integer: the replicas that acknowledged. */
        const uint8_t *q = p + m, *nl = memchr(q, '\n', n - (size_t)m);
        if (!nl)
            return 0;
        if (q[0] != ':' || nl - q < 3 || nl[-1] != '\r') {
            r->is_ok = 0;
            r->what = "WAIT did not answer an integer";
            return -1;
        }
        long acks = strtol((const char *)q + 1, NULL, 10);
        if (acks < cfg->resp_wait) {
            r->is_ok = 0;
            r->status = 1;
            r->what = "WAIT: fewer replicas acknowledged than asked";
        }
        return m + (long)(nl - q) + 1;
    }
    default:        return mc_parse(p, n, r);
    }
}
