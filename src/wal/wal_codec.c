/* wal_codec.c - the update command: one static serializer for the record
 * that goes to the WAL, to replicas, and back through recovery (STYLE habit
 * 9).  Fields follow Ignite 3's UpdateCommand / UpdateAllCommand as measured
 * by BENCHMARKS.md §M4; ember's st_update maps onto it (table = cache id).
 *
 * Command layout (little-endian; varint = unsigned LEB128, at most 5 bytes
 * for 32-bit fields):
 *
 *   OFFSET SIZE  FIELD
 *   0      1     op: st_update_kind (1 PUT, 2 REMOVE, 3 CLEAR, 4 CACHE_CREATE, 5 CACHE_DESTROY)
 *   1      1     flags: bit 0 = updateAll (rows keyed by UUID), others 0
 *   2      16    tx id: most significant 64 bits, then least significant
 *   18     8     lease start time (int64)
 *   26     8     safe time (int64)
 *   34     1-5   required catalog version (varint of uint32)
 *   .      4     table id (int32; ember: cache id)
 *   .      1-5   partition (varint of uint32)
 *   .      1-5   coordinator id length L (varint), then L bytes
 *   .      1-5   row count N (varint; a single command has N <= 1)
 *   then N row headers:
 *   0      16    row id (msb, lsb)
 *   16     8     row timestamp (int64)
 *   24     1-5   schema version (varint of uint32)
 *   .      1-5   payload length P (varint)
 *   then the N payloads back to back, in row order, ending the command.
 * Headers before payloads: a reader validates a 100-row command by walking
 * ~3 KB of headers instead of striding through every payload (the payloads
 * are only summed against the bytes left), and a writer copies the payloads
 * in one sweep.
 *
 * ember row payloads (one row per st_update):
 *   PUT           varint klen | key | varint expire_at_ms (0 = never) | value (rest)
 *   REMOVE        varint klen | key
 *   CACHE_CREATE  the cache configuration, fields in CFG_FIELDS order below:
 *                 int32 = zigzag varint, int64 = zigzag varint, uint8 = 1 byte,
 *                 uint32 = varint, string = varint (len+1, 0 = NULL) | bytes | NUL,
 *                 bytes = varint (len+1, 0 = NULL) | bytes
 *   CLEAR, CACHE_DESTROY: no rows.
 * The row id's high half carries the partition's update counter after the
 * update (st_update.cntr; 0 in records written before counters existed).
 */
#include "wal/wal.h"

#include "util/err.h"

#include <string.h>

#define CMD_FIXED 34          /* op .. safe time */
#define ROW_FIXED 24          /* row id + timestamp */
#define FLAG_UPDATE_ALL 1u
#define PAYLOAD_FIRST 1024    /* single rows this large: payload copied first */

static inline size_t vlen32(uint32_t v)
{
    return v < (1u << 7) ? 1 : v < (1u << 14) ? 2 : v < (1u << 21) ? 3 : v < (1u << 28) ? 4 : 5;
}

static inline size_t vlen64(uint64_t v)
{
    size_t n = 1;
    while (v >= 0x80) { v >>= 7; n++; }
    return n;
}

static inline uint8_t *put_v32(uint8_t *d, uint32_t v)
{
    if (v < 0x80) {
        *d = (uint8_t)v;
        return d + 1;
    }
    if (v < 0x4000) {         /* both bytes in one 16-bit store */
        em_st16(d, (uint16_t)((v & 0x7f) | 0x80 | (v << 1 & 0x7f00)));
        return d + 2;
    }
    while (v >= 0x80) { *d++ = (uint8_t)(v | 0x80); v >>= 7; }
    *d++ = (uint8_t)v;
    return d;
}

static inline uint8_t *put_v64(uint8_t *d, uint64_t v)
{
    while (v >= 0x80) { *d++ = (uint8_t)(v | 0x80); v >>= 7; }
    *d++ = (uint8_t)v;
    return d;
}

/* get_v32 reads a varint of at most 5 bytes that must fit 32 bits. */
static inline int get_v32(const uint8_t **pp, const uint8_t *end, uint32_t *out)
{
    const uint8_t *p = *pp;
    if (p < end && *p < 0x80) {       /* the common one- and two-byte cases */
        *out = *p;
        *pp = p + 1;
        return 0;
    }
    if (end - p >= 2 && p[1] < 0x80) {
        *out = (uint32_t)(p[0] & 0x7f) | (uint32_t)p[1] << 7;
        *pp = p + 2;
        return 0;
    }
    uint32_t v = 0;
    for (int shift = 0; shift < 35; shift += 7) {
        if (p >= end)
            return EM_TRUNCATED;
        uint8_t b = *p++;
        if (shift == 28 && b > 0x0f)
            return EM_BADLEN;
        v |= (uint32_t)(b & 0x7f) << shift;
        if (!(b & 0x80)) {
            *out = v;
            *pp = p;
            return 0;
        }
    }
    return EM_BADLEN;
}

static inline int get_v64(const uint8_t **pp, const uint8_t *end, uint64_t *out)
{
    const uint8_t *p = *pp;
    uint64_t v = 0;
    for (int shift = 0; shift < 70; shift += 7) {
        if (p >= end)
            return EM_TRUNCATED;
        uint8_t b = *p++;
        if (shift == 63 && b > 1)
            return EM_BADLEN;
        v |= (uint64_t)(b & 0x7f) << shift;
        if (!(b & 0x80)) {
            *out = v;
            *pp = p;
            return 0;
        }
    }
    return EM_BADLEN;
}

static inline uint8_t *put_uuid(uint8_t *d, wal_uuid u)
{
    em_st64(d, u.msb);
    em_st64(d + 8, u.lsb);
    return d + 16;
}

/* cmd_head_size: bytes of the command before its rows. */
static size_t cmd_head_size(const wal_cmd *c, uint32_t nrows)
{
    return CMD_FIXED + vlen32((uint32_t)c->catalog_version) + 4 + vlen32((uint32_t)c->partition) +
           vlen32(c->coord_len) + c->coord_len + vlen32(nrows);
}

/* copy_small: short copies (coordinator ids, small payloads) as two
 * overlapping fixed-size moves the compiler inlines, instead of a call into
 * the general memcpy. */
static inline void copy_small(uint8_t *d, const uint8_t *s, size_t n)
{
    if (n > 256) {            /* payloads: straight to memcpy, no ladder */
        memcpy(d, s, n);
    } else if (n >= 16 && n <= 32) {
        memcpy(d, s, 16);
        memcpy(d + n - 16, s + n - 16, 16);
    } else if (n >= 8 && n < 16) {
        memcpy(d, s, 8);
        memcpy(d + n - 8, s + n - 8, 8);
    } else if (n < 8) {
        for (size_t i = 0; i < n; i++)
            d[i] = s[i];
    } else {
        size_t i = 0;
        for (; i + 32 <= n; i += 32) {
            memcpy(d + i, s + i, 16);
            memcpy(d + i + 16, s + i + 16, 16);
        }
        if (i < n) {
            memcpy(d + n - 32, s + n - 32, 16);
            memcpy(d + n - 16, s + n - 16, 16);
        }
    }
}

/* The writers load every field into locals before the first store: stores
 * through a uint8_t pointer may alias anything, so reading c->... between
 * them would reload each field from memory after every byte written. */
static inline __attribute__((always_inline)) uint8_t *put_cmd_head(uint8_t *d, const wal_cmd *c,
                                                                    uint32_t nrows)
{
    uint8_t op = c->op, fl = c->update_all ? FLAG_UPDATE_ALL : 0;
    wal_uuid tx = c->tx_id;
    uint64_t lease = (uint64_t)c->lease_start, safe = (uint64_t)c->safe_time;
    uint32_t cat = (uint32_t)c->catalog_version, table = (uint32_t)c->table_id;
    uint32_t part = (uint32_t)c->partition, clen = c->coord_len;
    const uint8_t *coord = (const uint8_t *)c->coord;
    em_st16(d, (uint16_t)(op | fl << 8));
    put_uuid(d + 2, tx);
    em_st64(d + 18, lease);
    em_st64(d + 26, safe);
    d = put_v32(d + CMD_FIXED, cat);
    em_st32(d, table);
    d = put_v32(d + 4, part);
    d = put_v32(d, clen);
    copy_small(d, coord, clen);
    d += clen;
    return put_v32(d, nrows);
}

static inline size_t row_head_size(const wal_row *r, uint32_t plen)
{
    return ROW_FIXED + vlen32((uint32_t)r->schema_version) + vlen32(plen);
}

static inline uint8_t *put_row_head(uint8_t *d, const wal_row *r, uint32_t plen)
{
    wal_uuid id = r->id;
    uint64_t ts = (uint64_t)r->timestamp;
    uint32_t sv = (uint32_t)r->schema_version;
    put_uuid(d, id);
    em_st64(d + 16, ts);
    d = put_v32(d + ROW_FIXED, sv);
    return put_v32(d, plen);
}

/* cmd_op: a command op code (a single update's kind; TX has a record type
 * of its own). */
static int cmd_op(int op)
{
    return (op >= ST_UPD_PUT && op <= ST_UPD_CACHE_DESTROY) || op == ST_UPD_CACHE_CONFIG;
}

int wal_cmd_marshal(em_buf *out, const wal_cmd *c)
{
    if (!cmd_op(c->op) || c->nrows > WAL_MAX_ROWS ||
        (!c->update_all && c->nrows > 1))
        return EM_INVAL;
    const wal_row *rows = c->rows;
    uint32_t n = c->nrows;
    if (n == 1 && rows->len >= PAYLOAD_FIRST) {
        /* One large payload: copy it first, to its final offset behind the
         * headers, and write the headers after.  The copy is bound by
         * stores, the header code by its dependency chains; in this order
         * the header's work overlaps the draining copy stores instead of
         * running before them (measured ~76 -> ~72 ns for a 2 KiB row).
         * Sizing the header exactly first costs a few ns, which is why
         * small rows take the front-to-back path below.  Same bytes. */
        uint32_t len = rows->len;
        size_t hs = cmd_head_size(c, 1) + row_head_size(rows, len);
        int rc1 = em_buf_reserve(out, hs + len);
        if (rc1)
            return rc1;
        uint8_t *d1 = out->p + out->len;
        copy_small(d1 + hs, rows->payload, len);
        put_row_head(put_cmd_head(d1, c, 1), rows, len);
        out->len += hs + len;
        return 0;
    }
    /* Reserve the worst case once (every varint at 5 bytes), then plain
     * stores: no size pass over the varints, and the write loops never
     * check capacity (IGNITE-22544's "low-level stuff in direct stream"). */
    if (n == 1) {             /* small single row: no loops */
        const uint8_t *src = rows->payload;
        uint32_t len = rows->len;
        size_t need1 = CMD_FIXED + 4 + 4 * 5 + (size_t)c->coord_len + ROW_FIXED + 10 + len;
        int rc1 = em_buf_reserve(out, need1);
        if (rc1)
            return rc1;
        uint8_t *d1 = put_row_head(put_cmd_head(out->p + out->len, c, 1), rows, len);
        out->len = (size_t)(d1 - out->p) + len;
        copy_small(d1, src, len);
        return 0;
    }
    /* updateAll: headers, then the payloads in one sweep.  (Payloads first
     * measured slower here: sizing 100 row headers up front costs more
     * than the overlap wins.) */
    uint64_t need = CMD_FIXED + 4 + 4 * 5 + (uint64_t)c->coord_len + (uint64_t)n * (ROW_FIXED + 10);
    uint64_t pay = 0;
    for (uint32_t i = 0; i < n; i++)
        pay += rows[i].len;
    need += pay;
    if (need > SIZE_MAX / 2)
        return EM_TOOBIG;
    int rc = em_buf_reserve(out, (size_t)need);
    if (rc)
        return rc;
    uint8_t *d = put_cmd_head(out->p + out->len, c, n);
    for (uint32_t i = 0; i < n; i++)
        d = put_row_head(d, &rows[i], rows[i].len);
    /* The length is known before the payloads go in: store it first, so
     * the copies end the function and nothing waits on them. */
    out->len = (size_t)(d - out->p) + (size_t)pay;
    for (uint32_t i = 0; i < n; i++) {
        const uint8_t *src = rows[i].payload;
        uint32_t len = rows[i].len;
        copy_small(d, src, len);
        d += len;
    }
    return 0;
}

/* read_row_head parses one row header at *pp (bounds end). */
static inline int read_row_head(const uint8_t **pp, const uint8_t *end, wal_row *r)
{
    const uint8_t *p = *pp;
    if ((size_t)(end - p) < ROW_FIXED + 2)
        return EM_TRUNCATED;
    r->id.msb = em_ld64(p);
    r->id.lsb = em_ld64(p + 8);
    r->timestamp = (int64_t)em_ld64(p + 16);
    p += ROW_FIXED;
    uint32_t sv, plen;
    int rc = get_v32(&p, end, &sv);
    if (rc == 0)
        rc = get_v32(&p, end, &plen);
    if (rc)
        return rc;
    r->schema_version = (int32_t)sv;
    r->len = plen;
    *pp = p;
    return 0;
}

int wal_cmd_unmarshal(const uint8_t *p, size_t n, wal_cmd *c)
{
    const uint8_t *end = p + n;
    if (n < CMD_FIXED)
        return EM_TRUNCATED;
    c->op = p[0];
    if (!cmd_op(c->op))
        return EM_BADTYPE;
    if (p[1] & ~FLAG_UPDATE_ALL)
        return EM_BADTYPE;
    c->update_all = p[1] & FLAG_UPDATE_ALL;
    c->tx_id.msb = em_ld64(p + 2);
    c->tx_id.lsb = em_ld64(p + 10);
    c->lease_start = (int64_t)em_ld64(p + 18);
    c->safe_time = (int64_t)em_ld64(p + 26);
    p += CMD_FIXED;
    uint32_t v;
    int rc = get_v32(&p, end, &v);
    if (rc)
        return rc;
    c->catalog_version = (int32_t)v;
    if (end - p < 4)
        return EM_TRUNCATED;
    c->table_id = (int32_t)em_ld32(p);
    p += 4;
    if ((rc = get_v32(&p, end, &v)))
        return rc;
    c->partition = (int32_t)v;
    if ((rc = get_v32(&p, end, &c->coord_len)))
        return rc;
    if ((size_t)(end - p) < c->coord_len)
        return EM_TRUNCATED;
    c->coord = (const char *)p;
    p += c->coord_len;
    if ((rc = get_v32(&p, end, &c->nrows)))
        return rc;
    if (c->nrows > WAL_MAX_ROWS || (!c->update_all && c->nrows > 1))
        return EM_BADLEN;
    /* Each row header takes at least ROW_FIXED + 2 bytes: reject impossible
     * counts before walking them. */
    if ((uint64_t)c->nrows * (ROW_FIXED + 2) > (uint64_t)(end - p))
        return EM_TRUNCATED;
    c->rows = NULL;
    c->rows_p = p;
    /* Validation walks only what bounds the rows: the fixed part is
     * skipped, the two varints read; rows are decoded later, on demand. */
    uint64_t total = 0;
    for (uint32_t i = 0; i < c->nrows; i++) {
        uint32_t sv, plen;
        if ((size_t)(end - p) < ROW_FIXED + 2)
            return EM_TRUNCATED;
        p += ROW_FIXED;
        if ((rc = get_v32(&p, end, &sv)) || (rc = get_v32(&p, end, &plen)))
            return rc;
        total += plen;
    }
    c->rows_len = (size_t)(p - c->rows_p);
    c->pay_p = p;
    if (total > (uint64_t)(end - p))
        return EM_TRUNCATED;
    return total == (uint64_t)(end - p) ? 0 : EM_TRAILING;
}

int wal_cmd_next_row(const wal_cmd *c, wal_row_iter *it, wal_row *row)
{
    if (it->hdr >= c->rows_len)
        return 0;
    const uint8_t *p = c->rows_p + it->hdr;
    if (read_row_head(&p, c->rows_p + c->rows_len, row))
        return 0;           /* cannot happen for an unmarshalled command */
    row->payload = c->pay_p + it->pay;
    it->hdr = (size_t)(p - c->rows_p);
    it->pay += row->len;
    return 1;
}

/* ---- ember's st_update <-> command ------------------------------------- */

static inline uint32_t zz32(int32_t v) { return ((uint32_t)v << 1) ^ (uint32_t)(v >> 31); }
static inline int32_t unzz32(uint32_t v) { return (int32_t)(v >> 1) ^ -(int32_t)(v & 1); }
static inline uint64_t zz64(int64_t v) { return ((uint64_t)v << 1) ^ (uint64_t)(v >> 63); }
static inline int64_t unzz64(uint64_t v) { return (int64_t)(v >> 1) ^ -(int64_t)(v & 1); }

/* The configuration, field by field, in wire order.  One list drives size,
 * encode and decode so they cannot disagree. */
#define CFG_FIELDS(S, I32, I64, U8, U32, B)                                 \
    S(name) I32(cache_mode) I32(atomicity_mode) I32(backups)                \
    I32(write_sync_mode) U8(copy_on_read) U8(read_from_backup)              \
    S(data_region_name) U8(onheap_cache_enabled) I32(query_parallelism)     \
    I32(query_detail_metrics_size) S(sql_schema)                            \
    I32(sql_index_inline_max_size) U8(sql_escape_all)                       \
    I32(max_query_iterators) I32(rebalance_mode) I64(rebalance_delay)       \
    I64(rebalance_timeout) I32(rebalance_batch_size)                        \
    I64(rebalance_batches_prefetch_count) I32(rebalance_order)              \
    I64(rebalance_throttle) S(group_name) I64(default_lock_timeout)         \
    I32(max_concurrent_async_ops) I32(partition_loss_policy) U8(eager_ttl)  \
    U8(statistics_enabled) U8(has_expiry) I64(expiry.create_ms)             \
    I64(expiry.update_ms) I64(expiry.access_ms) U32(partitions)             \
    U8(eviction_enabled) B(key_configs, key_configs_len)                    \
    B(query_entities, query_entities_len)

static size_t cfg_size(const st_cache_config *c)
{
    size_t n = 0;
#define SZ_S(f)   { size_t l_ = c->f ? strlen(c->f) : 0; n += vlen64(c->f ? l_ + 1 : 0) + (c->f ? l_ + 1 : 0); }
#define SZ_I32(f) n += vlen32(zz32(c->f));
#define SZ_I64(f) n += vlen64(zz64(c->f));
#define SZ_U8(f)  n += 1;
#define SZ_U32(f) n += vlen32(c->f);
#define SZ_B(f, l) n += vlen64(c->f ? (uint64_t)c->l + 1 : 0) + (c->f ? c->l : 0);
    CFG_FIELDS(SZ_S, SZ_I32, SZ_I64, SZ_U8, SZ_U32, SZ_B)
    return n;
}

static uint8_t *cfg_put(uint8_t *d, const st_cache_config *c)
{
#define PUT_S(f)   { if (c->f) { size_t l_ = strlen(c->f); d = put_v64(d, l_ + 1); memcpy(d, c->f, l_ + 1); d += l_ + 1; } else *d++ = 0; }
#define PUT_I32(f) d = put_v32(d, zz32(c->f));
#define PUT_I64(f) d = put_v64(d, zz64(c->f));
#define PUT_U8(f)  *d++ = c->f;
#define PUT_U32(f) d = put_v32(d, c->f);
#define PUT_B(f, l) { if (c->f) { d = put_v64(d, (uint64_t)c->l + 1); memcpy(d, c->f, c->l); d += c->l; } else *d++ = 0; }
    CFG_FIELDS(PUT_S, PUT_I32, PUT_I64, PUT_U8, PUT_U32, PUT_B)
    return d;
}

/* cfg_get decodes a view: strings and arrays point into p (the encoder
 * stored each string's NUL, so they are usable C strings in place). */
static int cfg_get(const uint8_t *p, const uint8_t *end, st_cache_config *c)
{
    uint32_t v32;
    uint64_t v64;
    memset(c, 0, sizeof *c);
#define GET_S(f) {                                                           \
        if (get_v64(&p, end, &v64)) return EM_TRUNCATED;                     \
        if (v64 == 0) c->f = NULL; else {                                    \
            if (v64 > (uint64_t)(end - p) || p[v64 - 1] != 0 ||              \
                memchr(p, 0, v64 - 1)) return EM_BADLEN;                     \
            c->f = (char *)(uintptr_t)p; p += v64; } }
#define GET_I32(f) { if (get_v32(&p, end, &v32)) return EM_TRUNCATED; c->f = unzz32(v32); }
#define GET_I64(f) { if (get_v64(&p, end, &v64)) return EM_TRUNCATED; c->f = unzz64(v64); }
#define GET_U8(f)  { if (p >= end) return EM_TRUNCATED; c->f = *p++; }
#define GET_U32(f) { if (get_v32(&p, end, &v32)) return EM_TRUNCATED; c->f = v32; }
#define GET_B(f, l) {                                                        \
        if (get_v64(&p, end, &v64)) return EM_TRUNCATED;                     \
        if (v64 == 0) { c->f = NULL; c->l = 0; } else {                      \
            if (v64 - 1 > (uint64_t)(end - p) || v64 - 1 > UINT32_MAX)       \
                return EM_BADLEN;                                            \
            c->f = (uint8_t *)(uintptr_t)p; c->l = (uint32_t)(v64 - 1);      \
            p += v64 - 1; } }
    CFG_FIELDS(GET_S, GET_I32, GET_I64, GET_U8, GET_U32, GET_B)
    if (!c->name)
        return EM_BADLEN;
    return p == end ? 0 : EM_TRAILING;
}

int wal_encode_update(em_buf *out, const st_update *u, int64_t ts)
{
    wal_cmd c;
    memset(&c, 0, sizeof c);
    c.op = (uint8_t)u->kind;
    c.safe_time = ts;
    c.catalog_version = 1;
    c.table_id = u->cache_id;
    c.partition = (int32_t)u->partition;
    wal_row r;
    memset(&r, 0, sizeof r);
    r.timestamp = ts;
    r.schema_version = 1;
    r.id.msb = u->cntr;        /* the partition's update counter (row id, high half) */
    uint64_t exp = u->expire_at_ms > 0 ? (uint64_t)u->expire_at_ms : 0;
    uint64_t plen;
    switch (u->kind) {
    case ST_UPD_PUT:
        plen = vlen32(u->klen) + (uint64_t)u->klen + vlen64(exp) + u->vlen;
        break;
    case ST_UPD_REMOVE:
        plen = vlen32(u->klen) + (uint64_t)u->klen;
        break;
    case ST_UPD_CACHE_CREATE:
    case ST_UPD_CACHE_CONFIG:
        if (!u->cfg || !u->cfg->name)
            return EM_INVAL;
        plen = cfg_size(u->cfg);
        break;
    case ST_UPD_CLEAR:
    case ST_UPD_CACHE_DESTROY:
        plen = 0;
        break;
    default:
        return EM_INVAL;
    }
    if (plen > WAL_MAX_BODY)
        return EM_TOOBIG;
    uint32_t nrows = (u->kind == ST_UPD_CLEAR || u->kind == ST_UPD_CACHE_DESTROY) ? 0 : 1;
    size_t need = cmd_head_size(&c, nrows) + (nrows ? row_head_size(&r, (uint32_t)plen) + plen : 0);
    int rc = em_buf_reserve(out, need);
    if (rc)
        return rc;
    uint8_t *d = put_cmd_head(out->p + out->len, &c, nrows);
    if (nrows) {
        d = put_row_head(d, &r, (uint32_t)plen);
        if (u->kind == ST_UPD_CACHE_CREATE || u->kind == ST_UPD_CACHE_CONFIG) {
            d = cfg_put(d, u->cfg);
        } else {
            d = put_v32(d, u->klen);
            if (u->klen)
                memcpy(d, u->key, u->klen);
            d += u->klen;
            if (u->kind == ST_UPD_PUT) {
                d = put_v64(d, exp);
                if (u->vlen)
                    memcpy(d, u->val, u->vlen);
                d += u->vlen;
            }
        }
    }
    out->len += need;
    return 0;
}

int wal_decode_update(const wal_cmd *c, st_update *u, st_cache_config *cfg)
{
    memset(u, 0, sizeof *u);
    u->kind = (enum st_update_kind)c->op;
    u->cache_id = c->table_id;
    u->partition = (uint32_t)c->partition;
    int want_row = !(c->op == ST_UPD_CLEAR || c->op == ST_UPD_CACHE_DESTROY);
    if (c->update_all || c->nrows != (uint32_t)want_row)
        return EM_BADLEN;
    if (!want_row)
        return 0;
    wal_row r;
    wal_row_iter pos = {0, 0};
    if (!wal_cmd_next_row(c, &pos, &r))
        return EM_TRUNCATED;
    const uint8_t *p = r.payload, *end = r.payload + r.len;
    u->cntr = r.id.msb;
    if (c->op == ST_UPD_CACHE_CREATE || c->op == ST_UPD_CACHE_CONFIG) {
        int rc = cfg_get(p, end, cfg);
        if (rc)
            return rc;
        u->cfg = cfg;
        return 0;
    }
    uint32_t klen;
    int rc = get_v32(&p, end, &klen);
    if (rc)
        return rc;
    if ((size_t)(end - p) < klen)
        return EM_TRUNCATED;
    u->key = p;
    u->klen = klen;
    p += klen;
    if (c->op == ST_UPD_REMOVE)
        return p == end ? 0 : EM_TRAILING;
    uint64_t exp;
    if ((rc = get_v64(&p, end, &exp)))
        return rc;
    if (exp > INT64_MAX)
        return EM_RANGE;
    u->expire_at_ms = (int64_t)exp;
    u->val = p;
    u->vlen = (uint32_t)(end - p);
    return 0;
}

int wal_encode_tx(em_buf *out, const st_update *u, int64_t ts,
                  int (*skip)(void *arg, int32_t cache_id), void *arg, uint32_t *count)
{
    size_t start = out->len;
    uint32_t n = 0;
    int rc = em_buf_put_le32(out, 0);
    for (uint32_t i = 0; !rc && i < u->nbatch; i++) {
        const st_update *x = &u->batch[i];
        if (x->kind != ST_UPD_PUT && x->kind != ST_UPD_REMOVE) {
            rc = EM_INVAL;
            break;
        }
        if (skip && skip(arg, x->cache_id))
            continue;
        size_t at = out->len;
        if ((rc = em_buf_put_le32(out, 0)) != 0 || (rc = wal_encode_update(out, x, ts)) != 0)
            break;
        em_st32(out->p + at, (uint32_t)(out->len - at - 4));
        n++;
    }
    if (rc) {
        out->len = start;
        return rc;
    }
    em_st32(out->p + start, n);
    *count = n;
    return 0;
}
