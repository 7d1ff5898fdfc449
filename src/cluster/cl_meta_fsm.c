/* cl_meta_fsm.c - the metadata state machine: entry codec, apply, snapshot.
 *
 * Entry layouts and effects are in cl_meta_fsm.h.  Snapshot layout (one
 * buffer; little-endian; the header follows STYLE.md's rule for anything that
 * reaches a disk: magic, version, length, checksum):
 *
 *   offset size  field
 *   0      4     magic "EMMS"
 *   4      2     version, 2 (1: without owner tables)
 *   6      2     reserved, 0
 *   8      8     body length n (<= CL_META_MAX_SNAPSHOT)
 *   16     4     CRC-32C of the body
 *   20     4     reserved, 0
 *   24     n     body:
 *     u64 last_index | u64 major | u32 minor | u8 state | u64 last_exch
 *     u32 n_members, each: uuid | u64 raft_id | u64 host | u64 order |
 *         u64 join_major | u8 state | str cid | str raft_addr | u8 n | n x str
 *     u8 n_voters, each uuid
 *     u32 n_baseline | u32 raw_len | raw (the BASELINE_SET list)
 *     u32 n_caches, each: i32 id | u32 len | bytes     (ids strictly increasing)
 *     u32 n_types, each: i32 id | u32 len | bytes      (ids strictly increasing)
 *     u32 n_owners, each: i32 group | u32 len | table  (version 2; ids increasing)
 *
 * Apply is all-or-nothing: every allocation an entry needs is made before
 * the state is touched, so EM_NOMEM leaves the state as it was.
 */
#include "cluster/cl_meta_fsm.h"

#include <stdio.h>
#include <string.h>

#include "util/err.h"
#include "util/hash.h"
#include "util/mem.h"

#define ENTRY_HDR   8
#define ENTRY_VER   1
#define SNAP_HDR    24
#define SNAP_MAGIC  0x534d4d45u     /* "EMMS" little-endian */
#define SNAP_VER    2

const char *cl_meta_entry_name(int type)
{
    switch (type) {
#define CL_META_E_NAME_(name, code) case code: return #name;
    CL_META_ENTRIES(CL_META_E_NAME_)
#undef CL_META_E_NAME_
    default: return "?";
    }
}

/* ---- reading: a cursor whose first error sticks ---- */

typedef struct rd {
    const uint8_t *p;
    size_t         n, off;
    int            err;
} rd;

static int rd_need(rd *r, size_t k)
{
    if (r->err)
        return 0;
    if (r->n - r->off < k) {
        r->err = EM_TRUNCATED;
        return 0;
    }
    return 1;
}
static uint8_t rd_u8(rd *r) { return rd_need(r, 1) ? r->p[r->off++] : 0; }
static uint16_t rd_u16(rd *r)
{
    if (!rd_need(r, 2)) return 0;
    uint16_t v = em_ld16(r->p + r->off); r->off += 2; return v;
}
static uint32_t rd_u32(rd *r)
{
    if (!rd_need(r, 4)) return 0;
    uint32_t v = em_ld32(r->p + r->off); r->off += 4; return v;
}
static uint64_t rd_u64(rd *r)
{
    if (!rd_need(r, 8)) return 0;
    uint64_t v = em_ld64(r->p + r->off); r->off += 8; return v;
}
static cl_meta_uuid rd_uuid(rd *r)
{
    cl_meta_uuid u;
    u.msb = rd_u64(r);
    u.lsb = rd_u64(r);
    return u;
}
static cl_meta_bytes rd_bytes(rd *r, size_t len)
{
    cl_meta_bytes b = { NULL, 0 };
    if (!rd_need(r, len))
        return b;
    b.p = r->p + r->off;
    b.len = (uint32_t)len;
    r->off += len;
    return b;
}
static void rd_fail(rd *r, int err)
{
    if (!r->err)
        r->err = err;
}

/* Strict UTF-8 (no overlongs, surrogates or code points past U+10FFFF):
 * consistent ids feed Java's String.hashCode in cl_aff. */
static int utf8_ok(const uint8_t *s, size_t n)
{
    size_t i = 0;
    while (i < n) {
        uint8_t c = s[i];
        if (c < 0x80) { i++; continue; }
        size_t k;
        uint32_t cp, min;
        if ((c & 0xe0) == 0xc0)      { k = 1; cp = c & 0x1f; min = 0x80; }
        else if ((c & 0xf0) == 0xe0) { k = 2; cp = c & 0x0f; min = 0x800; }
        else if ((c & 0xf8) == 0xf0) { k = 3; cp = c & 0x07; min = 0x10000; }
        else return 0;
        if (n - i <= k)
            return 0;
        for (size_t j = 1; j <= k; j++) {
            if ((s[i + j] & 0xc0) != 0x80)
                return 0;
            cp = cp << 6 | (s[i + j] & 0x3f);
        }
        if (cp < min || cp > 0x10ffff || (cp >= 0xd800 && cp <= 0xdfff))
            return 0;
        i += k + 1;
    }
    return 1;
}

static cl_meta_bytes rd_str(rd *r, uint32_t min, uint32_t max, int utf8)
{
    uint16_t len = rd_u16(r);
    if (!r->err && (len < min || len > max))
        rd_fail(r, EM_BADLEN);
    cl_meta_bytes b = rd_bytes(r, len);
    if (!r->err && utf8 && !utf8_ok(b.p, b.len))
        rd_fail(r, EM_BADUTF8);
    return b;
}

/* A node record: shared by NODE_JOIN and the snapshot's members. */
static void rd_node(rd *r, cl_meta_node_info *n)
{
    n->id = rd_uuid(r);
    n->raft_id = rd_u64(r);
    n->host = rd_u64(r);
    n->cid = rd_str(r, 1, CL_META_MAX_CID, 1);
    n->raft_addr = rd_str(r, 0, CL_META_MAX_ADDR, 0);
    n->n_addrs = rd_u8(r);
    if (!r->err && n->n_addrs > CL_META_MAX_ADDRS)
        rd_fail(r, EM_BADLEN);
    for (uint32_t i = 0; i < n->n_addrs && !r->err; i++)
        n->addrs[i] = rd_str(r, 0, CL_META_MAX_ADDR, 0);
    if (!r->err && n->raft_id == 0)
        rd_fail(r, EM_INVAL);
}

/* rd_baseline checks n encoded consistent ids and returns their bytes. */
static cl_meta_bytes rd_baseline(rd *r, uint32_t n)
{
    size_t start = r->off;
    if (!r->err && n > CL_META_MAX_MEMBERS)
        rd_fail(r, EM_BADLEN);
    for (uint32_t i = 0; i < n && !r->err; i++)
        (void)rd_str(r, 1, CL_META_MAX_CID, 1);
    cl_meta_bytes b = { r->p + start, (uint32_t)(r->off - start) };
    return r->err ? (cl_meta_bytes){ NULL, 0 } : b;
}

int cl_meta_baseline_next(cl_meta_bytes raw, uint32_t *off, cl_meta_bytes *cid)
{
    if (*off + 2 > raw.len)
        return 0;
    uint16_t len = em_ld16(raw.p + *off);
    if (*off + 2 + len > raw.len)
        return 0;
    cid->p = raw.p + *off + 2;
    cid->len = len;
    *off += 2 + len;
    return 1;
}

int cl_meta_entry_decode(const uint8_t *p, size_t n, cl_meta_entry *e)
{
    memset(e, 0, sizeof *e);
    if (n < ENTRY_HDR)
        return EM_TRUNCATED;
    uint8_t type = p[0];
    if (p[1] != ENTRY_VER || em_ld16(p + 2) != 0)
        return EM_BADTYPE;
    uint32_t body = em_ld32(p + 4);
    if (body > CL_META_MAX_BODY)
        return EM_BADLEN;
    if (n - ENTRY_HDR < body)
        return EM_TRUNCATED;
    if (n - ENTRY_HDR > body)
        return EM_TRAILING;
    rd r = { p + ENTRY_HDR, body, 0, 0 };
    e->type = type;
    switch (type) {
    case CL_META_E_NODE_JOIN:
        rd_node(&r, &e->u.join);
        break;
    case CL_META_E_NODE_LEAVE:
    case CL_META_E_NODE_FAIL:
        e->u.node = rd_uuid(&r);
        break;
    case CL_META_E_CACHE_START:
    case CL_META_E_CACHE_CONFIG:
    case CL_META_E_TYPE_PUT: {
        int32_t id = (int32_t)rd_u32(&r);
        uint32_t len = rd_u32(&r);
        if (!r.err && (len == 0 || len > CL_META_MAX_BLOB))
            rd_fail(&r, EM_BADLEN);
        cl_meta_bytes blob = rd_bytes(&r, len);
        if (type == CL_META_E_CACHE_CONFIG)
            e->u.cache.prev = rd_u32(&r);
        if (type != CL_META_E_TYPE_PUT) {
            e->u.cache.id = id;
            e->u.cache.blob = blob;
        } else {
            e->u.type_put.id = id;
            e->u.type_put.blob = blob;
        }
        break;
    }
    case CL_META_E_CACHE_STOP:
        e->u.cache.id = (int32_t)rd_u32(&r);
        break;
    case CL_META_E_BASELINE_SET:
        e->u.baseline.n = rd_u32(&r);
        e->u.baseline.raw = rd_baseline(&r, e->u.baseline.n);
        break;
    case CL_META_E_STATE_SET:
        e->u.state = rd_u8(&r);
        if (!r.err && e->u.state > CL_META_ACTIVE_READ_ONLY)
            rd_fail(&r, EM_RANGE);
        break;
    case CL_META_E_VOTERS_SET:
        e->u.voters.n = rd_u8(&r);
        if (!r.err && e->u.voters.n > CL_META_MAX_VOTERS)
            rd_fail(&r, EM_BADLEN);
        for (uint32_t i = 0; i < e->u.voters.n && !r.err; i++) {
            e->u.voters.id[i] = rd_uuid(&r);
            for (uint32_t j = 0; j < i && !r.err; j++)
                if (cl_meta_uuid_eq(e->u.voters.id[j], e->u.voters.id[i]))
                    rd_fail(&r, EM_INVAL);
        }
        break;
    case CL_META_E_EXCH_DONE:
        e->u.exch.id = rd_u64(&r);
        e->u.exch.major = rd_u64(&r);
        e->u.exch.minor = rd_u32(&r);
        break;
    case CL_META_E_OWNERS_SET: {
        int rc = cl_meta_owners_check(r.p, r.n, &e->u.owners.exch, &e->u.owners.ngroups,
                                      &e->u.owners.sw, &e->u.owners.raw);
        if (rc)
            rd_fail(&r, rc);
        else
            r.off = r.n;
        break;
    }
    default:
        e->type = 0;
        return EM_BADTYPE;
    }
    if (!r.err && r.off != r.n)
        r.err = EM_TRAILING;
    if (r.err)
        e->type = 0;
    return r.err;
}

/* ---- encoding ---- */

static uint8_t *enc_begin(em_buf *out, int type, size_t body)
{
    if (em_buf_reserve(out, ENTRY_HDR + body))
        return NULL;
    uint8_t *h = out->p + out->len;
    h[0] = (uint8_t)type;
    h[1] = ENTRY_VER;
    em_st16(h + 2, 0);
    em_st32(h + 4, (uint32_t)body);
    out->len += ENTRY_HDR;
    return h;
}
/* The writers below run only after enc_begin reserved the whole entry. */
static void w_u8(em_buf *b, uint8_t v) { b->p[b->len++] = v; }
static void w_u16(em_buf *b, uint16_t v) { em_st16(b->p + b->len, v); b->len += 2; }
static void w_u32(em_buf *b, uint32_t v) { em_st32(b->p + b->len, v); b->len += 4; }
static void w_u64(em_buf *b, uint64_t v) { em_st64(b->p + b->len, v); b->len += 8; }
static void w_uuid(em_buf *b, cl_meta_uuid u) { w_u64(b, u.msb); w_u64(b, u.lsb); }
static void w_raw(em_buf *b, const void *p, size_t n)
{
    if (n)
        memcpy(b->p + b->len, p, n);
    b->len += n;
}
static void w_str(em_buf *b, cl_meta_bytes s) { w_u16(b, (uint16_t)s.len); w_raw(b, s.p, s.len); }

static int node_check(const cl_meta_node_info *n, size_t *body)
{
    if (n->raft_id == 0 || n->n_addrs > CL_META_MAX_ADDRS)
        return EM_INVAL;
    if (n->cid.len == 0 || n->cid.len > CL_META_MAX_CID || n->raft_addr.len > CL_META_MAX_ADDR)
        return EM_BADLEN;
    if (!utf8_ok(n->cid.p, n->cid.len))
        return EM_BADUTF8;
    size_t k = 16 + 8 + 8 + 2 + n->cid.len + 2 + n->raft_addr.len + 1;
    for (uint32_t i = 0; i < n->n_addrs; i++) {
        if (n->addrs[i].len > CL_META_MAX_ADDR)
            return EM_BADLEN;
        k += 2 + n->addrs[i].len;
    }
    *body = k;
    return 0;
}

static void w_node(em_buf *b, const cl_meta_node_info *n)
{
    w_uuid(b, n->id);
    w_u64(b, n->raft_id);
    w_u64(b, n->host);
    w_str(b, n->cid);
    w_str(b, n->raft_addr);
    w_u8(b, (uint8_t)n->n_addrs);
    for (uint32_t i = 0; i < n->n_addrs; i++)
        w_str(b, n->addrs[i]);
}

int cl_meta_enc_join(em_buf *out, const cl_meta_node_info *n)
{
    size_t body;
    int rc = node_check(n, &body);
    if (rc)
        return rc;
    if (!enc_begin(out, CL_META_E_NODE_JOIN, body))
        return EM_NOMEM;
    w_node(out, n);
    return 0;
}

static int enc_uuid(em_buf *out, int type, cl_meta_uuid id)
{
    if (!enc_begin(out, type, 16))
        return EM_NOMEM;
    w_uuid(out, id);
    return 0;
}
int cl_meta_enc_leave(em_buf *out, cl_meta_uuid id) { return enc_uuid(out, CL_META_E_NODE_LEAVE, id); }
int cl_meta_enc_fail(em_buf *out, cl_meta_uuid id) { return enc_uuid(out, CL_META_E_NODE_FAIL, id); }

static int enc_blob(em_buf *out, int type, int32_t id, const void *p, size_t len)
{
    if (len == 0 || len > CL_META_MAX_BLOB)
        return EM_BADLEN;
    if (!enc_begin(out, type, 8 + len))
        return EM_NOMEM;
    w_u32(out, (uint32_t)id);
    w_u32(out, (uint32_t)len);
    w_raw(out, p, len);
    return 0;
}
int cl_meta_enc_cache_start(em_buf *out, int32_t cache_id, const void *cfg, size_t len)
{
    return enc_blob(out, CL_META_E_CACHE_START, cache_id, cfg, len);
}
int cl_meta_enc_cache_config(em_buf *out, int32_t cache_id, const void *cfg, size_t len,
                             uint32_t prev_crc)
{
    if (len == 0 || len > CL_META_MAX_BLOB)
        return EM_BADLEN;
    if (!enc_begin(out, CL_META_E_CACHE_CONFIG, 12 + len))
        return EM_NOMEM;
    w_u32(out, (uint32_t)cache_id);
    w_u32(out, (uint32_t)len);
    w_raw(out, cfg, len);
    w_u32(out, prev_crc);
    return 0;
}
int cl_meta_enc_type_put(em_buf *out, int32_t type_id, const void *meta, size_t len)
{
    return enc_blob(out, CL_META_E_TYPE_PUT, type_id, meta, len);
}

int cl_meta_enc_cache_stop(em_buf *out, int32_t cache_id)
{
    if (!enc_begin(out, CL_META_E_CACHE_STOP, 4))
        return EM_NOMEM;
    w_u32(out, (uint32_t)cache_id);
    return 0;
}

int cl_meta_enc_baseline(em_buf *out, const cl_meta_bytes *cids, uint32_t n)
{
    if (n > CL_META_MAX_MEMBERS)
        return EM_BADLEN;
    size_t body = 4;
    for (uint32_t i = 0; i < n; i++) {
        if (cids[i].len == 0 || cids[i].len > CL_META_MAX_CID)
            return EM_BADLEN;
        if (!utf8_ok(cids[i].p, cids[i].len))
            return EM_BADUTF8;
        body += 2 + cids[i].len;
    }
    if (body > CL_META_MAX_BODY)
        return EM_BADLEN;
    if (!enc_begin(out, CL_META_E_BASELINE_SET, body))
        return EM_NOMEM;
    w_u32(out, n);
    for (uint32_t i = 0; i < n; i++)
        w_str(out, cids[i]);
    return 0;
}

int cl_meta_enc_state(em_buf *out, int state)
{
    if (state < CL_META_INACTIVE || state > CL_META_ACTIVE_READ_ONLY)
        return EM_RANGE;
    if (!enc_begin(out, CL_META_E_STATE_SET, 1))
        return EM_NOMEM;
    w_u8(out, (uint8_t)state);
    return 0;
}

int cl_meta_enc_voters(em_buf *out, const cl_meta_uuid *ids, uint32_t n)
{
    if (n > CL_META_MAX_VOTERS)
        return EM_BADLEN;
    for (uint32_t i = 0; i < n; i++)
        for (uint32_t j = 0; j < i; j++)
            if (cl_meta_uuid_eq(ids[i], ids[j]))
                return EM_INVAL;
    if (!enc_begin(out, CL_META_E_VOTERS_SET, 1 + 16 * (size_t)n))
        return EM_NOMEM;
    w_u8(out, (uint8_t)n);
    for (uint32_t i = 0; i < n; i++)
        w_uuid(out, ids[i]);
    return 0;
}

int cl_meta_enc_exch(em_buf *out, uint64_t exch_id, uint64_t major, uint32_t minor)
{
    if (!enc_begin(out, CL_META_E_EXCH_DONE, 20))
        return EM_NOMEM;
    w_u64(out, exch_id);
    w_u64(out, major);
    w_u32(out, minor);
    return 0;
}

/* ---- the state ---- */

void cl_meta_fsm_init(cl_meta_fsm *f)
{
    memset(f, 0, sizeof *f);
    f->state = CL_META_ACTIVE;
}

void cl_meta_fsm_free(cl_meta_fsm *f)
{
    for (uint32_t i = 0; i < f->n_members; i++)
        em_free(f->members[i].str);
    for (uint32_t i = 0; i < f->n_caches; i++)
        em_free(f->caches[i].p);
    for (uint32_t i = 0; i < f->n_types; i++)
        em_free(f->types[i].p);
    for (uint32_t i = 0; i < f->n_owners; i++)
        em_free(f->owners[i].p);
    em_free(f->owners);
    em_free(f->members);
    em_free(f->caches);
    em_free(f->types);
    em_free((void *)f->baseline.p);
    cl_meta_fsm_init(f);
}

cl_meta_bytes cl_meta_member_addr(const cl_meta_member *m, uint32_t i)
{
    if (i >= m->n_addrs)
        return (cl_meta_bytes){ NULL, 0 };
    size_t off = (size_t)m->cid_len + m->raft_addr_len;
    for (uint32_t k = 0; k < i; k++)
        off += m->addr_len[k];
    return (cl_meta_bytes){ m->str + off, m->addr_len[i] };
}

static int bytes_eq(cl_meta_bytes a, cl_meta_bytes b)
{
    return a.len == b.len && (a.len == 0 || memcmp(a.p, b.p, a.len) == 0);
}

static int32_t member_find(const cl_meta_fsm *f, cl_meta_uuid id)
{
    for (uint32_t i = 0; i < f->n_members; i++)
        if (cl_meta_uuid_eq(f->members[i].id, id))
            return (int32_t)i;
    return -1;
}

const cl_meta_member *cl_meta_fsm_member(const cl_meta_fsm *f, cl_meta_uuid id)
{
    int32_t i = member_find(f, id);
    return i < 0 ? NULL : &f->members[i];
}

/* blob_find: index of id, or -(insertion point) - 1. */
static int64_t blob_find(const cl_meta_blob *a, uint32_t n, int32_t id)
{
    uint32_t lo = 0, hi = n;
    while (lo < hi) {
        uint32_t mid = lo + (hi - lo) / 2;
        if (a[mid].id == id)
            return mid;
        if (a[mid].id < id)
            lo = mid + 1;
        else
            hi = mid;
    }
    return -(int64_t)lo - 1;
}

const cl_meta_blob *cl_meta_fsm_cache(const cl_meta_fsm *f, int32_t cache_id)
{
    int64_t i = blob_find(f->caches, f->n_caches, cache_id);
    return i < 0 ? NULL : &f->caches[i];
}

const cl_meta_blob *cl_meta_fsm_type(const cl_meta_fsm *f, int32_t type_id)
{
    int64_t i = blob_find(f->types, f->n_types, type_id);
    return i < 0 ? NULL : &f->types[i];
}

/* grow makes room for one more element; 0 or EM_NOMEM (array unchanged). */
static int grow(void **arr, uint32_t n, uint32_t *cap, size_t elem)
{
    if (n < *cap)
        return 0;
    uint32_t nc = *cap ? *cap * 2 : 8;
    void *p = em_realloc(*arr, (size_t)nc * elem);
    if (!p)
        return EM_NOMEM;
    *arr = p;
    *cap = nc;
    return 0;
}

/* member_make fills m from n; allocates m->str (0 or EM_NOMEM). */
static int member_make(cl_meta_member *m, const cl_meta_node_info *n)
{
    size_t len = (size_t)n->cid.len + n->raft_addr.len;
    for (uint32_t i = 0; i < n->n_addrs; i++)
        len += n->addrs[i].len;
    memset(m, 0, sizeof *m);
    m->str = em_malloc(len ? len : 1);
    if (!m->str)
        return EM_NOMEM;
    m->id = n->id;
    m->raft_id = n->raft_id;
    m->host = n->host;
    m->cid_len = (uint16_t)n->cid.len;
    m->raft_addr_len = (uint16_t)n->raft_addr.len;
    m->n_addrs = (uint8_t)n->n_addrs;
    uint8_t *o = m->str;
    memcpy(o, n->cid.p, n->cid.len);
    o += n->cid.len;
    if (n->raft_addr.len)
        memcpy(o, n->raft_addr.p, n->raft_addr.len);
    o += n->raft_addr.len;
    for (uint32_t i = 0; i < n->n_addrs; i++) {
        m->addr_len[i] = (uint16_t)n->addrs[i].len;
        if (n->addrs[i].len)
            memcpy(o, n->addrs[i].p, n->addrs[i].len);
        o += n->addrs[i].len;
    }
    return 0;
}

/* member_same: does m say exactly what n says? */
static int member_same(const cl_meta_member *m, const cl_meta_node_info *n)
{
    if (m->raft_id != n->raft_id || m->host != n->host || m->n_addrs != n->n_addrs ||
        !bytes_eq(cl_meta_member_cid(m), n->cid) ||
        !bytes_eq(cl_meta_member_raft_addr(m), n->raft_addr))
        return 0;
    for (uint32_t i = 0; i < n->n_addrs; i++)
        if (!bytes_eq(cl_meta_member_addr(m, i), n->addrs[i]))
            return 0;
    return 1;
}

/* remove_oldest_tombstone keeps the LEFT members bounded. */
static void remove_oldest_tombstone(cl_meta_fsm *f)
{
    for (uint32_t i = 0; i < f->n_members; i++) {
        if (f->members[i].state != CL_META_LEFT)
            continue;
        em_free(f->members[i].str);
        memmove(&f->members[i], &f->members[i + 1],
                (f->n_members - i - 1) * sizeof *f->members);
        f->n_members--;
        f->n_left--;
        return;
    }
}

static void bump_major(cl_meta_fsm *f) { f->major++; f->minor = 0; }

/* Each apply_* returns a status for eff (0 or the refusal), sets *changed,
 * or returns EM_NOMEM through *nomem with nothing changed. */

static int apply_join(cl_meta_fsm *f, uint64_t index, const cl_meta_node_info *n,
                      int *changed)
{
    int32_t at = member_find(f, n->id);
    if (at >= 0) {
        const cl_meta_member *m = &f->members[at];
        if (m->state != CL_META_LEFT && member_same(m, n))
            return 0;                       /* a repeat */
        return EM_INVAL;                    /* a left id, or other data */
    }
    for (uint32_t i = 0; i < f->n_members; i++) {
        const cl_meta_member *m = &f->members[i];
        if (m->state == CL_META_LEFT)
            continue;
        /* Ignite refuses a second live node with one consistent id. */
        if (m->raft_id == n->raft_id || bytes_eq(cl_meta_member_cid(m), n->cid))
            return EM_INVAL;
    }
    if (f->n_members - f->n_left >= CL_META_MAX_MEMBERS)
        return EM_TOOMANY;
    cl_meta_member m;
    if (grow((void **)&f->members, f->n_members, &f->cap_members, sizeof m) ||
        member_make(&m, n))
        return EM_NOMEM;
    bump_major(f);
    m.order = index;
    m.join_major = f->major;
    m.state = CL_META_JOINING;
    f->members[f->n_members++] = m;
    *changed = 1;
    return 0;
}

static int apply_leave(cl_meta_fsm *f, cl_meta_uuid id, int *changed)
{
    int32_t at = member_find(f, id);
    if (at < 0)
        return EM_NOTFOUND;
    if (f->members[at].state == CL_META_LEFT)
        return 0;
    f->members[at].state = CL_META_LEFT;
    f->n_left++;
    if (f->n_left > CL_META_MAX_TOMBSTONES)
        remove_oldest_tombstone(f);
    bump_major(f);
    *changed = 1;
    return 0;
}

/* apply_blob_put: CACHE_START (replace = 0) and TYPE_PUT (replace = 1). */
static int apply_blob_put(cl_meta_blob **arr, uint32_t *n, uint32_t *cap, uint32_t max,
                          int32_t id, cl_meta_bytes blob, int replace, int *changed)
{
    int64_t at = blob_find(*arr, *n, id);
    if (at >= 0) {
        cl_meta_blob *b = &(*arr)[at];
        if (bytes_eq((cl_meta_bytes){ b->p, b->len }, blob))
            return 0;
        if (!replace)
            return EM_CACHEEXISTS;
        uint8_t *p = em_memdup(blob.p, blob.len);
        if (!p)
            return EM_NOMEM;
        em_free(b->p);
        b->p = p;
        b->len = blob.len;
        *changed = 1;
        return 0;
    }
    if (*n >= max)
        return EM_TOOMANY;
    if (grow((void **)arr, *n, cap, sizeof **arr))
        return EM_NOMEM;
    uint8_t *p = em_memdup(blob.p, blob.len);
    if (!p)
        return EM_NOMEM;
    uint32_t pos = (uint32_t)(-at - 1);
    memmove(&(*arr)[pos + 1], &(*arr)[pos], (*n - pos) * sizeof **arr);
    (*arr)[pos] = (cl_meta_blob){ id, blob.len, p };
    (*n)++;
    *changed = 1;
    return 0;
}

static int apply_cache_stop(cl_meta_fsm *f, int32_t id, int *changed)
{
    int64_t at = blob_find(f->caches, f->n_caches, id);
    if (at < 0)
        return EM_NOCACHE;
    em_free(f->caches[at].p);
    memmove(&f->caches[at], &f->caches[at + 1],
            (f->n_caches - (uint32_t)at - 1) * sizeof *f->caches);
    f->n_caches--;
    f->minor++;
    cl_meta_owners_drop(f, id);
    *changed = 1;
    return 0;
}

static int apply_baseline(cl_meta_fsm *f, uint32_t n, cl_meta_bytes raw, int *changed)
{
    if (n == f->n_baseline && bytes_eq(raw, f->baseline))
        return 0;
    uint8_t *p = NULL;
    if (raw.len && !(p = em_memdup(raw.p, raw.len)))
        return EM_NOMEM;
    em_free((void *)f->baseline.p);
    f->baseline = (cl_meta_bytes){ p, raw.len };
    f->n_baseline = n;
    f->minor++;
    *changed = 1;
    return 0;
}

static int apply_voters(cl_meta_fsm *f, uint32_t n, const cl_meta_uuid *ids, int *changed)
{
    if (n == f->n_voters && (n == 0 || memcmp(ids, f->voters, n * sizeof *ids) == 0))
        return 0;
    memcpy(f->voters, ids, n * sizeof *ids);
    f->n_voters = n;
    *changed = 1;
    return 0;
}

static int apply_exch(cl_meta_fsm *f, uint64_t id, uint64_t major, uint32_t minor,
                      int *changed)
{
    if (id <= f->last_exch)
        return 0;
    if (major > f->major || (major == f->major && minor > f->minor))
        return EM_RANGE;            /* names a version that does not exist yet */
    f->last_exch = id;
    for (uint32_t i = 0; i < f->n_members; i++)
        if (f->members[i].state == CL_META_JOINING && f->members[i].join_major <= major)
            f->members[i].state = CL_META_ALIVE;
    *changed = 1;
    return 0;
}

int cl_meta_fsm_apply(cl_meta_fsm *f, uint64_t index, const uint8_t *p, size_t n,
                      cl_meta_entry *out, cl_meta_effect *eff)
{
    cl_meta_entry local;
    cl_meta_entry *e = out ? out : &local;
    cl_meta_effect dummy;
    if (!eff)
        eff = &dummy;
    memset(eff, 0, sizeof *eff);
    eff->index = index;

    int status = cl_meta_entry_decode(p, n, e);
    int changed = 0;
    if (index <= f->last_index) {
        /* Applied before the snapshot we restored: nothing to do. */
        status = 0;
    } else if (status == 0) {
        switch (e->type) {
        case CL_META_E_NODE_JOIN:
            status = apply_join(f, index, &e->u.join, &changed);
            break;
        case CL_META_E_NODE_LEAVE:
        case CL_META_E_NODE_FAIL:
            status = apply_leave(f, e->u.node, &changed);
            break;
        case CL_META_E_CACHE_START:
            status = apply_blob_put(&f->caches, &f->n_caches, &f->cap_caches,
                                    CL_META_MAX_CACHES, e->u.cache.id,
                                    e->u.cache.blob, 0, &changed);
            if (changed)
                f->minor++;
            break;
        case CL_META_E_CACHE_STOP:
            status = apply_cache_stop(f, e->u.cache.id, &changed);
            break;
        case CL_META_E_CACHE_CONFIG: {
            /* A compare-and-set: two nodes changing one cache's tables at
             * once must not lose one change to the other. */
            int64_t at = blob_find(f->caches, f->n_caches, e->u.cache.id);
            status = at < 0 ? EM_NOCACHE
                     : em_crc32c(0, f->caches[at].p, f->caches[at].len) != e->u.cache.prev ? EM_STALE
                     : apply_blob_put(&f->caches, &f->n_caches, &f->cap_caches,
                                      CL_META_MAX_CACHES, e->u.cache.id, e->u.cache.blob, 1,
                                      &changed);
            break;
        }
        case CL_META_E_TYPE_PUT:
            status = apply_blob_put(&f->types, &f->n_types, &f->cap_types,
                                    CL_META_MAX_TYPES, e->u.type_put.id,
                                    e->u.type_put.blob, 1, &changed);
            break;
        case CL_META_E_BASELINE_SET:
            status = apply_baseline(f, e->u.baseline.n, e->u.baseline.raw, &changed);
            break;
        case CL_META_E_STATE_SET:
            if (e->u.state != f->state) {
                f->state = e->u.state;
                f->minor++;
                changed = 1;
            }
            break;
        case CL_META_E_VOTERS_SET:
            status = apply_voters(f, e->u.voters.n, e->u.voters.id, &changed);
            break;
        case CL_META_E_EXCH_DONE:
            status = apply_exch(f, e->u.exch.id, e->u.exch.major, e->u.exch.minor,
                                &changed);
            break;
        case CL_META_E_OWNERS_SET:
            status = cl_meta_owners_apply(f, e->u.owners.ngroups, e->u.owners.raw, &changed);
            if (changed && e->u.owners.sw)
                f->minor++;
            break;
        }
        if (status == EM_NOMEM)
            return EM_NOMEM;
        f->last_index = index;
    } else {
        f->last_index = index;      /* malformed: refused alike everywhere */
    }
    eff->type = e->type;
    eff->status = status;
    eff->changed = changed;
    eff->major = f->major;
    eff->minor = f->minor;
    return 0;
}

/* ---- snapshot ---- */

/* Size of the snapshot body, so it is reserved once. */
static size_t snap_body_size(const cl_meta_fsm *f)
{
    size_t k = 8 + 8 + 4 + 1 + 8 + 4;
    for (uint32_t i = 0; i < f->n_members; i++) {
        const cl_meta_member *m = &f->members[i];
        k += 16 + 8 * 4 + 1 + 2 + m->cid_len + 2 + m->raft_addr_len + 1;
        for (uint32_t j = 0; j < m->n_addrs; j++)
            k += 2 + m->addr_len[j];
    }
    k += 1 + 16 * (size_t)f->n_voters;
    k += 8 + f->baseline.len;
    k += 4;
    for (uint32_t i = 0; i < f->n_caches; i++)
        k += 8 + f->caches[i].len;
    k += 4;
    for (uint32_t i = 0; i < f->n_types; i++)
        k += 8 + f->types[i].len;
    k += 4;
    for (uint32_t i = 0; i < f->n_owners; i++)
        k += 8 + f->owners[i].len;
    return k;
}

int cl_meta_fsm_snapshot(const cl_meta_fsm *f, em_buf *out)
{
    size_t body = snap_body_size(f);
    if (em_buf_reserve(out, SNAP_HDR + body))
        return EM_NOMEM;
    size_t start = out->len;
    out->len += SNAP_HDR;
    w_u64(out, f->last_index);
    w_u64(out, f->major);
    w_u32(out, f->minor);
    w_u8(out, f->state);
    w_u64(out, f->last_exch);
    w_u32(out, f->n_members);
    for (uint32_t i = 0; i < f->n_members; i++) {
        const cl_meta_member *m = &f->members[i];
        w_uuid(out, m->id);
        w_u64(out, m->raft_id);
        w_u64(out, m->host);
        w_u64(out, m->order);
        w_u64(out, m->join_major);
        w_u8(out, m->state);
        w_str(out, cl_meta_member_cid(m));
        w_str(out, cl_meta_member_raft_addr(m));
        w_u8(out, m->n_addrs);
        for (uint32_t j = 0; j < m->n_addrs; j++)
            w_str(out, cl_meta_member_addr(m, j));
    }
    w_u8(out, (uint8_t)f->n_voters);
    for (uint32_t i = 0; i < f->n_voters; i++)
        w_uuid(out, f->voters[i]);
    w_u32(out, f->n_baseline);
    w_u32(out, f->baseline.len);
    w_raw(out, f->baseline.p, f->baseline.len);
    w_u32(out, f->n_caches);
    for (uint32_t i = 0; i < f->n_caches; i++) {
        w_u32(out, (uint32_t)f->caches[i].id);
        w_u32(out, f->caches[i].len);
        w_raw(out, f->caches[i].p, f->caches[i].len);
    }
    w_u32(out, f->n_types);
    for (uint32_t i = 0; i < f->n_types; i++) {
        w_u32(out, (uint32_t)f->types[i].id);
        w_u32(out, f->types[i].len);
        w_raw(out, f->types[i].p, f->types[i].len);
    }
    w_u32(out, f->n_owners);
    for (uint32_t i = 0; i < f->n_owners; i++) {
        w_u32(out, (uint32_t)f->owners[i].id);
        w_u32(out, f->owners[i].len);
        w_raw(out, f->owners[i].p, f->owners[i].len);
    }
    uint8_t *h = out->p + start;
    body = out->len - start - SNAP_HDR;     /* equals the reservation */
    em_st32(h, SNAP_MAGIC);
    em_st16(h + 4, SNAP_VER);
    em_st16(h + 6, 0);
    em_st64(h + 8, body);
    em_st32(h + 16, em_crc32c(0, h + SNAP_HDR, body));
    em_st32(h + 20, 0);
    return 0;
}

/* rd_blobs reads n (id, bytes) pairs with strictly increasing ids into a new
 * array; 0, EM_NOMEM, or r->err set. */
static int rd_blobs(rd *r, cl_meta_blob **arr, uint32_t *n_out, uint32_t *cap, uint32_t max)
{
    uint32_t n = rd_u32(r);
    if (r->err)
        return 0;
    /* Each element takes at least 9 bytes: a hostile count cannot make us
     * allocate more than the snapshot's own size. */
    if (n > max || (uint64_t)n * 9 > r->n - r->off) {
        rd_fail(r, EM_BADLEN);
        return 0;
    }
    if (n == 0)
        return 0;
    *arr = em_calloc(n, sizeof **arr);
    if (!*arr)
        return EM_NOMEM;
    *cap = n;
    for (uint32_t i = 0; i < n && !r->err; i++) {
        int32_t id = (int32_t)rd_u32(r);
        uint32_t len = rd_u32(r);
        if (!r->err && (len == 0 || len > CL_META_MAX_BLOB))
            rd_fail(r, EM_BADLEN);
        if (!r->err && i > 0 && id <= (*arr)[i - 1].id)
            rd_fail(r, EM_INVAL);
        cl_meta_bytes b = rd_bytes(r, len);
        if (r->err)
            break;
        uint8_t *p = em_memdup(b.p, b.len);
        if (!p)
            return EM_NOMEM;
        (*arr)[i] = (cl_meta_blob){ id, len, p };
        (*n_out)++;
    }
    return 0;
}

static int snap_members(rd *r, cl_meta_fsm *t)
{
    uint32_t n = rd_u32(r);
    if (r->err)
        return 0;
    if (n > CL_META_MAX_MEMBERS + CL_META_MAX_TOMBSTONES ||
        (uint64_t)n * (16 + 32 + 1 + 2 + 1 + 2 + 1) > r->n - r->off) {
        rd_fail(r, EM_BADLEN);
        return 0;
    }
    if (n == 0)
        return 0;
    t->members = em_calloc(n, sizeof *t->members);
    if (!t->members)
        return EM_NOMEM;
    t->cap_members = n;
    for (uint32_t i = 0; i < n && !r->err; i++) {
        cl_meta_node_info ni;
        ni.id = rd_uuid(r);
        ni.raft_id = rd_u64(r);
        ni.host = rd_u64(r);
        uint64_t order = rd_u64(r);
        uint64_t join_major = rd_u64(r);
        uint8_t state = rd_u8(r);
        ni.cid = rd_str(r, 1, CL_META_MAX_CID, 1);
        ni.raft_addr = rd_str(r, 0, CL_META_MAX_ADDR, 0);
        ni.n_addrs = rd_u8(r);
        if (!r->err && ni.n_addrs > CL_META_MAX_ADDRS)
            rd_fail(r, EM_BADLEN);
        for (uint32_t j = 0; j < ni.n_addrs && !r->err; j++)
            ni.addrs[j] = rd_str(r, 0, CL_META_MAX_ADDR, 0);
        if (r->err)
            break;
        if (ni.raft_id == 0 || state < CL_META_JOINING || state > CL_META_LEFT ||
            order == 0 || order > t->last_index || join_major == 0 ||
            join_major > t->major || (i > 0 && order <= t->members[i - 1].order)) {
            rd_fail(r, EM_INVAL);
            break;
        }
        for (uint32_t j = 0; j < i; j++) {
            const cl_meta_member *o = &t->members[j];
            if (cl_meta_uuid_eq(o->id, ni.id) ||
                (state != CL_META_LEFT && o->state != CL_META_LEFT &&
                 (o->raft_id == ni.raft_id || bytes_eq(cl_meta_member_cid(o), ni.cid)))) {
                rd_fail(r, EM_INVAL);
                break;
            }
        }
        if (r->err)
            break;
        cl_meta_member *m = &t->members[i];
        if (member_make(m, &ni))
            return EM_NOMEM;
        m->order = order;
        m->join_major = join_major;
        m->state = state;
        t->n_members++;
        if (state == CL_META_LEFT)
            t->n_left++;
    }
    if (!r->err && (t->n_left > CL_META_MAX_TOMBSTONES ||
                    t->n_members - t->n_left > CL_META_MAX_MEMBERS))
        rd_fail(r, EM_BADLEN);
    return 0;
}

static int snap_decode(rd *r, cl_meta_fsm *t, int ver)
{
    int rc;
    t->last_index = rd_u64(r);
    t->major = rd_u64(r);
    t->minor = rd_u32(r);
    t->state = rd_u8(r);
    t->last_exch = rd_u64(r);
    if (!r->err && t->state > CL_META_ACTIVE_READ_ONLY)
        rd_fail(r, EM_RANGE);
    if ((rc = snap_members(r, t)))
        return rc;
    t->n_voters = rd_u8(r);
    if (!r->err && t->n_voters > CL_META_MAX_VOTERS)
        rd_fail(r, EM_BADLEN);
    for (uint32_t i = 0; i < t->n_voters && !r->err; i++) {
        t->voters[i] = rd_uuid(r);
        for (uint32_t j = 0; j < i; j++)
            if (cl_meta_uuid_eq(t->voters[i], t->voters[j]))
                rd_fail(r, EM_INVAL);
    }
    if (r->err)
        t->n_voters = 0;
    uint32_t nb = rd_u32(r);
    uint32_t raw_len = rd_u32(r);
    if (!r->err && raw_len > r->n - r->off)
        rd_fail(r, EM_TRUNCATED);
    if (!r->err) {
        /* Check the list on its own bytes: it must hold exactly nb ids. */
        rd sub = { r->p + r->off, raw_len, 0, 0 };
        cl_meta_bytes raw = rd_baseline(&sub, nb);
        if (!sub.err && sub.off != raw_len)
            sub.err = EM_TRAILING;
        if (sub.err) {
            rd_fail(r, sub.err);
        } else {
            r->off += raw_len;
            if (raw_len) {
                uint8_t *p = em_memdup(raw.p, raw_len);
                if (!p)
                    return EM_NOMEM;
                t->baseline = (cl_meta_bytes){ p, raw_len };
            }
            t->n_baseline = nb;
        }
    }
    if ((rc = rd_blobs(r, &t->caches, &t->n_caches, &t->cap_caches, CL_META_MAX_CACHES)))
        return rc;
    if ((rc = rd_blobs(r, &t->types, &t->n_types, &t->cap_types, CL_META_MAX_TYPES)))
        return rc;
    if (ver >= 2) {
        if ((rc = rd_blobs(r, &t->owners, &t->n_owners, &t->cap_owners, CL_META_MAX_CACHES)))
            return rc;
        for (uint32_t i = 0; i < t->n_owners && !r->err; i++)
            if ((rc = cl_meta_owners_table_check(t->owners[i].p, t->owners[i].len)) != 0)
                rd_fail(r, rc);
    }
    if (!r->err && r->off != r->n)
        rd_fail(r, EM_TRAILING);
    return 0;
}

/* restore_body decodes into a fresh state and swaps it in only when whole. */
static int restore_body(cl_meta_fsm *f, const uint8_t *p, size_t n, int ver)
{
    cl_meta_fsm t;
    cl_meta_fsm_init(&t);
    rd r = { p, n, 0, 0 };
    int rc = snap_decode(&r, &t, ver);
    if (!rc)
        rc = r.err;
    if (rc) {
        cl_meta_fsm_free(&t);
        return rc;
    }
    cl_meta_fsm_free(f);
    *f = t;
    return 0;
}

int cl_meta_fsm_restore(cl_meta_fsm *f, const uint8_t *p, size_t n)
{
    if (n < SNAP_HDR)
        return EM_TRUNCATED;
    int ver = em_ld16(p + 4);
    if (em_ld32(p) != SNAP_MAGIC || ver < 1 || ver > SNAP_VER ||
        em_ld16(p + 6) != 0 || em_ld32(p + 20) != 0)
        return EM_CORRUPT;
    uint64_t body = em_ld64(p + 8);
    if (body > CL_META_MAX_SNAPSHOT)
        return EM_BADLEN;
    if (n - SNAP_HDR < body)
        return EM_TRUNCATED;
    if (n - SNAP_HDR > body)
        return EM_TRAILING;
    if (em_crc32c(0, p + SNAP_HDR, body) != em_ld32(p + 16))
        return EM_CORRUPT;
    return restore_body(f, p + SNAP_HDR, (size_t)body, ver);
}

void cl_meta_uuid_str(cl_meta_uuid u, char out[37])
{
    snprintf(out, 37, "%08x-%04x-%04x-%04x-%012llx", (unsigned)(u.msb >> 32),
             (unsigned)(u.msb >> 16) & 0xffff, (unsigned)u.msb & 0xffff,
             (unsigned)(u.lsb >> 48) & 0xffff, (unsigned long long)(u.lsb & 0xffffffffffffULL));
}
