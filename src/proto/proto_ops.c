/* proto_ops.c - ember's operator ops (proto.h PR_OP_PART_VERIFY ..
 * PR_OP_CLUSTER_INFO): what ember-cli idle-verify, ember-cli cluster and the
 * dashboard (/api/cluster) read.  Layouts (all integers little-endian):
 *
 *   PART_VERIFY  request: string cache name.
 *                reply:   int P, then P x { byte role (0 none, 1 primary,
 *                         2 backup: this node's place among the partition's
 *                         owners), byte stable (1: the update counter did not
 *                         move while the partition was read), long update
 *                         counter, long size, long checksum }.
 *                The checksum is the sum (mod 2^64) of one 64-bit hash per
 *                entry over its normalised key and stored value bytes: equal
 *                contents give equal sums whatever the order entries sit in.
 *   CORRUPT      request: string cache name, int partition.  reply: bool.
 *                Only with debug_ops: rewrites the first entry of the
 *                partition on this node to another value through st_apply
 *                with the partition's current counter, so the counter does
 *                not move and nothing is logged - a silent corruption that
 *                only a content comparison finds.
 *   NODE_INFO    request: nothing.  reply: byte 2 (layout version), long
 *                uptime ms, byte flags (1 lease, 2 leader, 4 cluster member),
 *                int C caches { int id, byte mode, int backups, int parts,
 *                long size, long entries left to load (pr_left_entries;
 *                absent in version 1), short n, n name bytes }, int K ops { byte n,
 *                n name bytes, long requests, long errors, 22 x long latency
 *                bucket counts (proto_stats.h buckets) }: only ops seen.
 *   CLUSTER_INFO request: byte format (0 JSON, 1 text).  reply: string.
 *
 * CLUSTER_INFO asks every other member for NODE_INFO through the cluster
 * transport (cl_node_call), which runs it on that member's transport thread:
 * NODE_INFO only reads counters and the store's registry, never waits.
 * PART_VERIFY reads whole partitions, so it is not sent over the transport
 * (it would stall heartbeats there): ember-cli asks each node itself.
 */
#include "proto/proto_int.h"

#include "cluster/cl_node.h"
#include "cluster/cl_pme.h"
#include "cluster/cl_pmap.h"
#include "util/mem.h"

#include <inttypes.h>
#include <stdio.h>
#include <string.h>

#define OPS_MAX_CACHES 4096u        /* NODE_INFO: more caches are refused */
#define OPS_MAX_OWNERS 256u
#define OPS_SCAN_PAGE  1024u

/* ---- checksums ---------------------------------------------------------- */

static uint64_t bytes_hash(const uint8_t *p, size_t n, uint64_t seed)
{
    uint64_t h = em_mix64(seed ^ (uint64_t)n);
    size_t i = 0;
    for (; i + 8 <= n; i += 8)
        h = em_mix64(h ^ em_ld64(p + i)) + 0x9e3779b97f4a7c15ULL;
    uint64_t t = 0;
    for (size_t k = 0; i < n; i++, k++)
        t |= (uint64_t)p[i] << (8 * k);
    return em_mix64(h ^ t);
}

uint64_t pr_entry_hash(const uint8_t *k, size_t kl, const uint8_t *v, size_t vl);
uint64_t pr_entry_hash(const uint8_t *k, size_t kl, const uint8_t *v, size_t vl)
{
    uint64_t hk = bytes_hash(k, kl, 0x6b6579), hv = bytes_hash(v, vl, 0x76616c);
    return em_mix64(hk ^ (hv * 0xff51afd7ed558ccdULL));
}

typedef struct sum_ctx { uint64_t sum, n; } sum_ctx;

static int sum_one(void *arg, const uint8_t *k, size_t kl, const uint8_t *v, size_t vl)
{
    sum_ctx *s = arg;
    s->sum += pr_entry_hash(k, kl, v, vl);
    s->n++;
    return 0;
}

static int part_checksum(st_cache *sc, uint32_t part, uint64_t *sum)
{
    st_scan *scan;
    int rc = st_scan_open(sc, (int32_t)part, &scan);
    if (rc)
        return rc;
    sum_ctx s = { 0, 0 };
    int more = 1;
    while (more && !rc)
        rc = st_scan_next_page(scan, OPS_SCAN_PAGE, sum_one, &s, &more);
    st_scan_close(scan);
    *sum = s.sum;
    return rc;
}

/* this node's role for partition part: 1 primary, 2 backup, 0 none. */
static int role_of(pr_server *s, cl_topo *t, st_cache *sc, uint32_t part)
{
    if (!t)
        return 1;
    if (t->self < 0)
        return 0;
    const st_cache_config *g = st_cache_cfg(sc);
    uint32_t idx[OPS_MAX_OWNERS];
    uint32_t n = cl_topo_owners(t, st_cache_id(sc), st_cache_parts(sc),
                                g->backups > 0 ? (uint32_t)g->backups : 0, g->cache_mode == 1,
                                part, idx, OPS_MAX_OWNERS);
    (void)s;
    for (uint32_t i = 0; i < n && i < OPS_MAX_OWNERS; i++)
        if ((int)idx[i] == t->self)
            return i == 0 ? 1 : 2;
    return 0;
}

static st_cache *named_cache(pr_conn *c, pr_rd *r, int *rc)
{
    const uint8_t *name;
    size_t nl;
    if (pr_rd_str(c, r, &name, &nl) || !name) {
        *rc = pr_bad_request(c, EM_TRUNCATED);
        return NULL;
    }
    st_cache *sc = st_cache_find(c->srv->st, em_hash_java_str(name, nl));
    if (!sc || st_cache_destroyed(sc)) {
        *rc = pr_fail(c, PR_ST_CACHE_NOT_FOUND, "Cache does not exist [name=%.*s]", (int)nl,
                      (const char *)name);
        return NULL;
    }
    return sc;
}

static int op_part_verify(pr_conn *c, pr_rd *r, em_buf *out)
{
    int rc = 0;
    st_cache *sc = named_cache(c, r, &rc);
    if (!sc)
        return rc;
    uint32_t parts = st_cache_parts(sc);
    if (em_buf_reserve(out, 4 + (size_t)parts * 26))
        return EM_NOMEM;
    cl_topo *t = c->srv->opt.cluster ? cl_node_topo_acquire(c->srv->opt.cluster) : NULL;
    em_buf_put_le32(out, parts);
    for (uint32_t p = 0; p < parts && !rc; p++) {
        uint64_t c0 = 0, c1 = 0, size = 0, sum = 0;
        if ((rc = st_part_info(sc, p, &c0, &size)) != 0 || (rc = part_checksum(sc, p, &sum)) != 0 ||
            (rc = st_part_info(sc, p, &c1, &size)) != 0)
            break;
        uint8_t b[26];
        b[0] = (uint8_t)role_of(c->srv, t, sc, p);
        b[1] = c0 == c1;
        em_st64(b + 2, c1);
        em_st64(b + 10, size);
        em_st64(b + 18, sum);
        rc = em_buf_append(out, b, sizeof b);
    }
    if (t)
        cl_node_topo_release(t);
    if (rc == EM_NOMEM)
        return rc;
    if (rc)
        return pr_fail(c, PR_ST_FAILED, "Reading the partitions failed: %s", em_strerror(rc));
    return 0;
}

/* ---- the corruption hook (debug_ops) --------------------------------------- */

typedef struct first_ctx { em_buf *k, *v; int got; } first_ctx;

static int first_one(void *arg, const uint8_t *k, size_t kl, const uint8_t *v, size_t vl)
{
    first_ctx *f = arg;
    if (f->got)
        return 0;
    f->got = 1;
    if (em_buf_append(f->k, k, kl) || em_buf_append(f->v, v, vl))
        return EM_NOMEM;
    return 0;
}

static int op_corrupt(pr_conn *c, pr_rd *r, em_buf *out)
{
    int rc = 0;
    st_cache *sc = named_cache(c, r, &rc);
    if (!sc)
        return rc;
    int32_t part;
    if (pr_rd_i32(r, &part))
        return pr_bad_request(c, EM_TRUNCATED);
    if (part < 0 || (uint32_t)part >= st_cache_parts(sc))
        return pr_fail(c, PR_ST_FAILED, "No partition %d", part);
    em_buf k = EM_BUF_INIT, v = EM_BUF_INIT;
    first_ctx f = { &k, &v, 0 };
    st_scan *scan;
    if ((rc = st_scan_open(sc, part, &scan)) == 0) {
        int more;
        rc = st_scan_next_page(scan, 1, first_one, &f, &more);
        st_scan_close(scan);
    }
    int done = 0;
    if (!rc && f.got) {
        /* Another string value: "corrupted:" and the old value's length. */
        char txt[48];
        int tl = snprintf(txt, sizeof txt, "corrupted:%zu", v.len);
        uint8_t val[64];
        val[0] = 9;
        em_st32(val + 1, (uint32_t)tl);
        memcpy(val + 5, txt, (size_t)tl);
        uint64_t cntr = 0, size = 0;
        st_part_info(sc, (uint32_t)part, &cntr, &size);
        st_update u = { .kind = ST_UPD_PUT, .cache_id = st_cache_id(sc),
                        .partition = (uint32_t)part, .key = k.p, .klen = (uint32_t)k.len,
                        .val = val, .vlen = (uint32_t)(5 + tl), .cntr = cntr };
        rc = st_apply(c->srv->st, &u);
        done = rc == 0;
    }
    em_buf_free(&k);
    em_buf_free(&v);
    if (rc == EM_NOMEM)
        return rc;
    if (rc)
        return pr_fail(c, PR_ST_FAILED, "Corrupting the partition failed: %s", em_strerror(rc));
    return pr_put_bool(out, done);
}

/* ---- NODE_INFO ---------------------------------------------------------------- */

typedef struct ni_cache {
    int32_t  id, backups;
    uint8_t  mode;
    uint32_t parts;
    int64_t  size, left;
    char     name[256];
} ni_cache;

typedef struct ni_op {
    char     name[48];
    uint64_t n, err, lat[PR_STATS_BUCKETS];
} ni_op;

typedef struct ninfo {
    int      answered;
    char     why[128];
    uint64_t uptime_ms;
    uint8_t  flags;
    uint32_t nc, nop;
    ni_cache *c;
    ni_op    *op;
} ninfo;

enum { NI_LEASE = 1, NI_LEADER = 2, NI_MEMBER = 4 };
enum { NI_VERSION = 2, NI_CACHE_V1 = 23, NI_CACHE = 31 };  /* a cache's bytes before its name */

typedef struct enc_ctx { pr_server *s; pr_left left; em_buf *out; uint32_t n; int rc; } enc_ctx;

static void enc_cache(void *arg, st_cache *sc)
{
    enc_ctx *e = arg;
    if (e->rc || st_cache_destroyed(sc) || e->n >= OPS_MAX_CACHES)
        return;
    const st_cache_config *g = st_cache_cfg(sc);
    /* The partitions' entry counts, read without their locks: NODE_INFO
     * runs on the transport thread, which must not wait for a worker (an
     * expired entry not yet reclaimed still counts). */
    int64_t size = 0;
    for (uint32_t p = 0; p < st_cache_parts(sc); p++) {
        uint64_t cntr, n;
        if (st_part_info(sc, p, &cntr, &n) == 0)
            size += (int64_t)n;
    }
    size_t nl = strlen(g->name);
    if (nl > 255)
        nl = 255;
    uint8_t b[NI_CACHE];
    em_st32(b, (uint32_t)st_cache_id(sc));
    b[4] = (uint8_t)g->cache_mode;
    em_st32(b + 5, (uint32_t)g->backups);
    em_st32(b + 9, st_cache_parts(sc));
    em_st64(b + 13, (uint64_t)size);
    em_st64(b + 21, pr_left_entries(e->s, &e->left, sc));
    em_st16(b + 29, (uint16_t)nl);
    if (em_buf_append(e->out, b, NI_CACHE) || em_buf_append(e->out, g->name, nl))
        e->rc = EM_NOMEM;
    e->n++;
}

/* node_info_encode: this node's NODE_INFO payload. */
static int node_info_encode(pr_server *s, em_buf *out)
{
    /* pr_stats is 64-byte aligned (one cache line per worker block); the
     * allocator gives 16: align inside a slightly larger block. */
    void *raw = em_calloc(1, sizeof(pr_stats) + 64);
    if (!raw)
        return EM_NOMEM;
    pr_stats *sum = (pr_stats *)(((uintptr_t)raw + 63) & ~(uintptr_t)63);
    uint64_t up = 0;
    if (s->opt.node_stats)
        s->opt.node_stats(s->opt.debug_arg, sum, &up);
    uint8_t flags = 0;
    if (s->opt.cluster) {
        flags |= NI_MEMBER;
        if (cl_node_has_lease(s->opt.cluster))
            flags |= NI_LEASE;
        if (cl_node_is_leader(s->opt.cluster))
            flags |= NI_LEADER;
    } else
        flags |= NI_LEASE | NI_LEADER;
    uint8_t h[10];
    h[0] = NI_VERSION;
    em_st64(h + 1, up);
    h[9] = flags;
    int rc = em_buf_append(out, h, sizeof h);
    size_t at = out->len;
    rc = rc ? rc : em_buf_put_le32(out, 0);
    enc_ctx e = { .s = s, .out = out, .rc = rc };
    if (!rc) {
        pr_left_open(s, &e.left);
        st_cache_each(s->st, enc_cache, &e);
        pr_left_close(&e.left);
    }
    rc = e.rc;
    if (!rc)
        em_st32(out->p + at, e.n);
    at = out->len;
    uint32_t nop = 0;
    rc = rc ? rc : em_buf_put_le32(out, 0);
    for (int k = 0; k < PR_STATS_SLOTS && !rc; k++) {
        uint64_t n = atomic_load_explicit(&sum->requests[k], memory_order_relaxed);
        if (!n)
            continue;
        const char *name = pr_stats_op_name(k);
        size_t nl = strlen(name);
        if (nl > 47)
            nl = 47;
        uint8_t b[8 * (2 + PR_STATS_BUCKETS)];
        em_st64(b, n);
        em_st64(b + 8, atomic_load_explicit(&sum->errors[k], memory_order_relaxed));
        for (int i = 0; i < PR_STATS_BUCKETS; i++)
            em_st64(b + 16 + 8 * i, atomic_load_explicit(&sum->lat[k][i], memory_order_relaxed));
        if (em_buf_put_u8(out, (uint8_t)nl) || em_buf_append(out, name, nl) ||
            em_buf_append(out, b, sizeof b))
            rc = EM_NOMEM;
        nop++;
    }
    if (!rc)
        em_st32(out->p + at, nop);
    em_free(raw);
    return rc;
}

static void ninfo_free(ninfo *n)
{
    em_free(n->c);
    em_free(n->op);
    memset(n, 0, sizeof *n);
}

/* node_info_decode: a member's NODE_INFO payload, every count checked
 * against the bytes present.  0 or EM_PROTO / EM_NOMEM. */
static int node_info_decode(const uint8_t *p, size_t n, ninfo *ni)
{
    pr_rd r = { p, n, 0 };
    uint8_t ver;
    int64_t up;
    int32_t nc, nop;
    if (pr_rd_u8(&r, &ver) || (ver != 1 && ver != NI_VERSION) || pr_rd_i64(&r, &up) ||
        pr_rd_u8(&r, &ni->flags) || pr_rd_i32(&r, &nc) || nc < 0 ||
        (uint32_t)nc > OPS_MAX_CACHES ||
        (size_t)nc > pr_rd_left(&r) / (ver == 1 ? NI_CACHE_V1 : NI_CACHE))
        return EM_PROTO;
    ni->uptime_ms = (uint64_t)up;
    ni->c = em_calloc((size_t)nc + 1, sizeof *ni->c);
    if (!ni->c)
        return EM_NOMEM;
    for (int32_t i = 0; i < nc; i++) {
        ni_cache *c = &ni->c[i];
        int32_t parts;
        int64_t size;
        int16_t nl;
        int64_t left = 0;
        if (pr_rd_i32(&r, &c->id) || pr_rd_u8(&r, &c->mode) || pr_rd_i32(&r, &c->backups) ||
            pr_rd_i32(&r, &parts) || pr_rd_i64(&r, &size) ||
            (ver != 1 && (pr_rd_i64(&r, &left) || left < 0)) || pr_rd_i16(&r, &nl) ||
            nl < 0 || nl > 255 || (size_t)nl > pr_rd_left(&r))
            return EM_PROTO;
        c->left = left;
        c->parts = (uint32_t)parts;
        c->size = size;
        memcpy(c->name, r.p + r.pos, (size_t)nl);
        c->name[nl] = 0;
        r.pos += (size_t)nl;
    }
    ni->nc = (uint32_t)nc;
    const size_t each = 1 + 8 * (2 + PR_STATS_BUCKETS);
    if (pr_rd_i32(&r, &nop) || nop < 0 || nop > 1024 || (size_t)nop > pr_rd_left(&r) / each)
        return EM_PROTO;
    ni->op = em_calloc((size_t)nop + 1, sizeof *ni->op);
    if (!ni->op)
        return EM_NOMEM;
    for (int32_t i = 0; i < nop; i++) {
        ni_op *o = &ni->op[i];
        uint8_t nl;
        if (pr_rd_u8(&r, &nl) || nl > 47 || (size_t)nl + each - 1 > pr_rd_left(&r))
            return EM_PROTO;
        memcpy(o->name, r.p + r.pos, nl);
        o->name[nl] = 0;
        for (size_t k = 0; k < nl; k++)     /* op names are [A-Z_]: keep JSON plain */
            if (!((o->name[k] >= 'A' && o->name[k] <= 'Z') || o->name[k] == '_' ||
                  (o->name[k] >= '0' && o->name[k] <= '9')))
                o->name[k] = '_';
        r.pos += nl;
        int64_t v = 0;
        pr_rd_i64(&r, &v); o->n = (uint64_t)v;
        pr_rd_i64(&r, &v); o->err = (uint64_t)v;
        for (int k = 0; k < PR_STATS_BUCKETS; k++) {
            pr_rd_i64(&r, &v);
            o->lat[k] = (uint64_t)v;
        }
    }
    ni->nop = (uint32_t)nop;
    if (pr_rd_left(&r))
        return EM_PROTO;
    ni->answered = 1;
    return 0;
}

int pr_node_info_check(const uint8_t *p, size_t n)
{
    ninfo ni;
    memset(&ni, 0, sizeof ni);
    int rc = node_info_decode(p, n, &ni);
    ninfo_free(&ni);
    return rc;
}

/* ask_member: NODE_INFO from member `to` over the cluster transport. */
static void ask_member(pr_server *s, cl_meta_uuid to, uint32_t timeout_ms, ninfo *ni)
{
    uint8_t req[10];
    em_st16(req, PR_OP_NODE_INFO);
    em_st64(req + 2, 1);
    em_buf resp = EM_BUF_INIT;
    int rc = cl_node_call(s->opt.cluster, to, req, sizeof req, &resp, timeout_ms);
    if (rc) {
        snprintf(ni->why, sizeof ni->why, "no answer: %s", em_strerror(rc));
        em_buf_free(&resp);
        return;
    }
    /* A 1.7.0 response frame: length, request id, flags [, topology], then
     * the payload or an error. */
    const uint8_t *p = resp.p;
    size_t n = resp.len, pos = 14;
    uint16_t fl = n >= 14 ? em_ld16(p + 12) : 0;
    if (fl & 2)
        pos += 12;
    if (n < 14 || pos > n || (fl & 1))
        snprintf(ni->why, sizeof ni->why, "refused NODE_INFO");
    else if ((rc = node_info_decode(p + pos, n - pos, ni)) != 0) {
        ninfo_free(ni);
        snprintf(ni->why, sizeof ni->why, "malformed NODE_INFO: %s", em_strerror(rc));
    }
    em_buf_free(&resp);
}

/* ---- CLUSTER_INFO ---------------------------------------------------------------- */

static void json_str(em_buf *o, const char *s)
{
    em_buf_put_u8(o, '"');
    for (; *s; s++) {
        unsigned char ch = (unsigned char)*s;
        if (ch == '"' || ch == '\\') {
            em_buf_put_u8(o, '\\');
            em_buf_put_u8(o, ch);
        } else if (ch < 0x20) {
            char e[8];
            snprintf(e, sizeof e, "\\u%04x", ch);
            em_buf_append(o, e, 6);
        } else
            em_buf_put_u8(o, ch);
    }
    em_buf_put_u8(o, '"');
}

static void putf(em_buf *o, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void putf(em_buf *o, const char *fmt, ...)
{
    char b[1024];
    va_list ap;
    va_start(ap, fmt);
    int k = vsnprintf(b, sizeof b, fmt, ap);
    va_end(ap);
    if (k > 0)
        em_buf_append(o, b, (size_t)k < sizeof b ? (size_t)k : sizeof b - 1);
}

static const char *mode_name(int m)
{
    return m == 0 ? "LOCAL" : m == 1 ? "REPLICATED" : m == 2 ? "PARTITIONED" : "?";
}

/* Heat-map cell codes: P primary, B backup (both OWNING), M moving,
 * R renting, E evicted, L lost, '.' no copy. */
#define CELL_KINDS "PBMREL."
static const char *const cell_names[] = { "primary", "backup", "moving", "renting", "evicted",
                                          "lost", "none" };

typedef struct view {
    pr_server *s;
    cl_topo   *t;               /* NULL on a single node */
    cl_pmap    map;             /* decoded full map, map.nodes = 0 if none */
    em_buf     mapbuf;
    cl_pmap_group *mg;
    uint32_t   n;               /* nodes shown */
    ninfo     *ni;
    int        leader;          /* index of the leader, -1 unknown */
    st_cache **caches;          /* partitioned / replicated caches here */
    uint32_t   ncaches;
} view;

typedef struct list_ctx { st_cache **a; uint32_t n, cap; } list_ctx;

static void list_one(void *arg, st_cache *sc)
{
    list_ctx *l = arg;
    if (st_cache_destroyed(sc))
        return;
    if (l->n < l->cap)
        l->a[l->n] = sc;
    l->n++;
}

/* cells: node i's cell codes for every partition of sc into out (parts bytes). */
static void cells(view *v, st_cache *sc, uint32_t i, char *out)
{
    uint32_t parts = st_cache_parts(sc);
    const st_cache_config *g = st_cache_cfg(sc);
    int32_t id = st_cache_id(sc);
    if (!v->t || g->cache_mode == 0) {
        memset(out, g->cache_mode == 0 && v->t && (int)i != v->t->self ? '.' : 'P', parts);
        return;
    }
    const cl_pmap_group *mgr = NULL;
    int mnode = -1;
    for (uint32_t k = 0; k < v->map.ngroups; k++)
        if (v->mg[k].grp == id && v->mg[k].parts == parts)
            mgr = &v->mg[k];
    for (uint32_t k = 0; mgr && k < v->map.nodes; k++) {
        cl_meta_uuid u = cl_pmap_node(&v->map, k);
        if (u.msb == v->t->m[i].id.msb && u.lsb == v->t->m[i].id.lsb)
            mnode = (int)k;
    }
    uint32_t backups = g->backups > 0 ? (uint32_t)g->backups : 0;
    for (uint32_t p = 0; p < parts; p++) {
        uint32_t idx[OPS_MAX_OWNERS];
        uint32_t no = cl_topo_owners(v->t, id, parts, backups, g->cache_mode == 1, p, idx,
                                     OPS_MAX_OWNERS);
        int pos = -1;
        for (uint32_t k = 0; k < no && k < OPS_MAX_OWNERS; k++)
            if (idx[k] == i)
                pos = (int)k;
        char ch = pos < 0 ? '.' : pos == 0 ? 'P' : 'B';
        if (mnode >= 0) {
            int st = cl_pmap_state(&v->map, mgr, (uint32_t)mnode, p);
            ch = st == CL_PS_MOVING ? 'M' : st == CL_PS_RENTING ? 'R' : st == CL_PS_EVICTED ? 'E'
               : st == CL_PS_LOST ? 'L' : st == CL_PS_NONE ? '.' : pos == 0 ? 'P' : 'B';
        }
        out[p] = ch;
    }
}

static int view_open(view *v, pr_server *s, int self_only, uint32_t timeout_ms)
{
    memset(v, 0, sizeof *v);
    v->s = s;
    v->leader = -1;
    if (s->opt.cluster) {
        v->t = cl_node_topo_acquire(s->opt.cluster);
        v->n = v->t->n;
        cl_meta_uuid lid;
        if (cl_node_leader(s->opt.cluster, &lid) == 0)
            for (uint32_t i = 0; i < v->t->n; i++)
                if (v->t->m[i].id.msb == lid.msb && v->t->m[i].id.lsb == lid.lsb)
                    v->leader = (int)i;
        if (s->pme && cl_pme_map_copy(s->pme, &v->mapbuf) == 0 && v->mapbuf.len) {
            uint32_t cap = cl_pmap_peek_groups(v->mapbuf.p, v->mapbuf.len);
            v->mg = em_calloc(cap ? cap : 1, sizeof *v->mg);
            v->map.g = v->mg;
            if (!v->mg || cl_pmap_decode(v->mapbuf.p, v->mapbuf.len, &v->map, cap))
                memset(&v->map, 0, sizeof v->map);
        }
    } else {
        v->n = 1;
        v->leader = 0;
    }
    v->ni = em_calloc(v->n ? v->n : 1, sizeof *v->ni);
    if (!v->ni)
        return EM_NOMEM;
    for (uint32_t i = 0; i < v->n; i++) {
        int self = !v->t || (int)i == v->t->self;
        if (!self && self_only)
            continue;
        if (self) {
            em_buf b = EM_BUF_INIT;
            int rc = node_info_encode(s, &b);
            if (!rc)
                rc = node_info_decode(b.p, b.len, &v->ni[i]);
            em_buf_free(&b);
            if (rc)
                return rc;
        } else
            ask_member(s, v->t->m[i].id, timeout_ms, &v->ni[i]);
    }
    list_ctx l = { NULL, 0, 0 };
    st_cache_each(s->st, list_one, &l);
    l.cap = l.n + 16;
    l.a = em_calloc(l.cap, sizeof *l.a);
    if (!l.a)
        return EM_NOMEM;
    l.n = 0;
    st_cache_each(s->st, list_one, &l);
    v->caches = l.a;
    v->ncaches = l.n < l.cap ? l.n : l.cap;
    return 0;
}

static void view_close(view *v)
{
    if (v->t)
        cl_node_topo_release(v->t);
    for (uint32_t i = 0; v->ni && i < v->n; i++)
        ninfo_free(&v->ni[i]);
    em_free(v->ni);
    em_free(v->mg);
    em_free(v->caches);
    em_buf_free(&v->mapbuf);
}

static const ni_cache *node_cache(const ninfo *ni, int32_t id)
{
    for (uint32_t k = 0; k < ni->nc; k++)
        if (ni->c[k].id == id)
            return &ni->c[k];
    return NULL;
}

static void node_id_of(view *v, uint32_t i, char id[37])
{
    if (v->t)
        cl_meta_uuid_str(v->t->m[i].id, id);
    else {
        cl_meta_uuid u = { em_ld64(v->s->opt.node_id), em_ld64(v->s->opt.node_id + 8) };
        cl_meta_uuid_str(u, id);
    }
}

static void render_json(view *v, em_buf *o, char *cellbuf)
{
    pr_server *s = v->s;
    int st = pr_server_state(s);
    static const char *const states[] = { "INACTIVE", "ACTIVE", "ACTIVE_READ_ONLY" };
    char id[37];
    putf(o, "{\"cluster\":%s,\"state\":\"%s\",\"topology\":{\"major\":%llu,\"minor\":%u},",
         v->t ? "true" : "false", states[st >= 0 && st <= 2 ? st : 0],
         (unsigned long long)(v->t ? v->t->major : 1), v->t ? v->t->minor : 0);
    putf(o, "\"map_exchange\":%llu,\"leader\":",
         (unsigned long long)(v->map.nodes ? v->map.exch_id : 0));
    if (v->leader >= 0) {
        node_id_of(v, (uint32_t)v->leader, id);
        putf(o, "\"%s\"", id);
    } else
        putf(o, "null");
    putf(o, ",\"nodes\":[");
    for (uint32_t i = 0; i < v->n; i++) {
        const ninfo *ni = &v->ni[i];
        node_id_of(v, i, id);
        const cl_topo_member *m = v->t ? &v->t->m[i] : NULL;
        int self = !v->t || (int)i == v->t->self;
        putf(o, "%s{\"id\":\"%s\",\"self\":%s,\"order\":%llu,\"consistent_id\":", i ? "," : "",
             id, self ? "true" : "false", (unsigned long long)(m ? m->order : 1));
        json_str(o, m ? m->cid : "");
        putf(o, ",\"cluster_addr\":");
        json_str(o, m ? m->cluster_addr : "");
        putf(o, ",\"thin_addr\":");
        if (m)
            json_str(o, m->thin_addr);
        else {
            char a[96];
            snprintf(a, sizeof a, "%s:%d", s->opt.thin_host,
                     atomic_load_explicit(&s->thin_port, memory_order_relaxed));
            json_str(o, a);
        }
        putf(o, ",\"member_state\":\"%s\",\"leader\":%s,\"answered\":%s",
             !m ? "ALIVE" : m->state == CL_META_ALIVE ? "ALIVE" : "JOINING",
             (int)i == v->leader ? "true" : "false", ni->answered ? "true" : "false");
        if (!ni->answered) {
            putf(o, ",\"error\":");
            json_str(o, ni->why[0] ? ni->why : "not asked");
            putf(o, "}");
            continue;
        }
        putf(o, ",\"uptime_ms\":%llu,\"lease\":%s,\"caches\":[",
             (unsigned long long)ni->uptime_ms, ni->flags & NI_LEASE ? "true" : "false");
        for (uint32_t k = 0; k < ni->nc; k++) {
            putf(o, "%s{\"name\":", k ? "," : "");
            json_str(o, ni->c[k].name);
            putf(o, ",\"size\":%lld,\"entries_left\":%lld}", (long long)ni->c[k].size,
                 (long long)ni->c[k].left);
        }
        putf(o, "],\"ops\":[");
        for (uint32_t k = 0; k < ni->nop; k++) {
            putf(o, "%s{\"op\":\"%s\",\"requests\":%llu,\"errors\":%llu,\"latency_buckets\":[",
                 k ? "," : "", ni->op[k].name, (unsigned long long)ni->op[k].n,
                 (unsigned long long)ni->op[k].err);
            for (int b = 0; b < PR_STATS_BUCKETS; b++)
                putf(o, "%s%llu", b ? "," : "", (unsigned long long)ni->op[k].lat[b]);
            putf(o, "]}");
        }
        putf(o, "]}");
    }
    putf(o, "],\"latency_bucket_le_ns\":[");
    for (int b = 0; b < PR_STATS_BUCKETS; b++) {
        if (b == PR_STATS_BUCKETS - 1)
            putf(o, ",null");
        else
            putf(o, "%s%llu", b ? "," : "", 1ULL << (10 + b));
    }
    putf(o, "],\"caches\":[");
    uint64_t moving = 0, left = 0;
    for (uint32_t c = 0; c < v->ncaches; c++) {
        st_cache *sc = v->caches[c];
        const st_cache_config *g = st_cache_cfg(sc);
        uint32_t parts = st_cache_parts(sc);
        int32_t cid = st_cache_id(sc);
        putf(o, "%s{\"name\":", c ? "," : "");
        json_str(o, g->name);
        putf(o, ",\"id\":%d,\"mode\":\"%s\",\"backups\":%d,\"partitions\":%u,\"nodes\":[",
             cid, mode_name(g->cache_mode), g->backups, parts);
        for (uint32_t i = 0; i < v->n; i++) {
            node_id_of(v, i, id);
            const ni_cache *nc = node_cache(&v->ni[i], cid);
            cells(v, sc, i, cellbuf);
            uint32_t cnt[7] = { 0 };
            for (uint32_t p = 0; p < parts; p++) {
                const char *k = strchr(CELL_KINDS, cellbuf[p]);
                cnt[k ? k - CELL_KINDS : 6]++;
            }
            moving += cnt[2];
            left += nc ? (uint64_t)nc->left : 0;
            putf(o, "%s{\"id\":\"%s\",\"size\":", i ? "," : "", id);
            if (nc)
                putf(o, "%lld,\"entries_left\":%lld", (long long)nc->size, (long long)nc->left);
            else
                putf(o, "null,\"entries_left\":null");
            putf(o, ",\"counts\":{");
            for (int k = 0; k < 7; k++)
                putf(o, "%s\"%s\":%u", k ? "," : "", cell_names[k], cnt[k]);
            putf(o, "},\"cells\":\"");
            em_buf_append(o, cellbuf, parts);
            putf(o, "\"}");
        }
        putf(o, "],\"lost\":[");
        uint32_t nl = 0;
        for (uint32_t p = 0; v->t && p < parts; p++)
            if (cl_topo_part_lost(v->t, cid, p))
                putf(o, "%s%u", nl++ ? "," : "", p);
        putf(o, "]}");
    }
    /* MOVING copies: ideal owners the full map says do not own their
     * partition yet.  What is left to load; a reader that keeps the most it
     * saw has the progress (the page does). */
    putf(o, "],\"rebalance\":{\"in_progress\":%s,\"partitions_moving\":%llu,"
         "\"entries_left\":%llu},\"cell_codes\":{", moving ? "true" : "false",
         (unsigned long long)moving, (unsigned long long)left);
    for (int k = 0; k < 7; k++)
        putf(o, "%s\"%c\":\"%s\"", k ? "," : "", CELL_KINDS[k], cell_names[k]);
    putf(o, "}}\n");
}

static void render_text(view *v, em_buf *o, char *cellbuf)
{
    char id[37];
    putf(o, "leader: ");
    if (v->leader >= 0) {
        node_id_of(v, (uint32_t)v->leader, id);
        putf(o, "%s\n", id);
    } else
        putf(o, "unknown\n");
    putf(o, "%-36s  %-12s  %-6s  %-5s  %s\n", "NODE ID", "UPTIME", "LEADER", "LEASE", "STATE");
    for (uint32_t i = 0; i < v->n; i++) {
        const ninfo *ni = &v->ni[i];
        node_id_of(v, i, id);
        const cl_topo_member *m = v->t ? &v->t->m[i] : NULL;
        char up[32] = "-";
        if (ni->answered) {
            uint64_t sec = ni->uptime_ms / 1000;
            snprintf(up, sizeof up, "%lluh%02llum%02llus", (unsigned long long)(sec / 3600),
                     (unsigned long long)(sec / 60 % 60), (unsigned long long)(sec % 60));
        }
        putf(o, "%-36s  %-12s  %-6s  %-5s  %s%s%s\n", id, up,
             (int)i == v->leader ? "yes" : "no",
             !ni->answered ? "?" : ni->flags & NI_LEASE ? "yes" : "no",
             !m || m->state == CL_META_ALIVE ? "ALIVE" : "JOINING",
             ni->answered ? "" : ": ", ni->answered ? "" : ni->why);
    }
    uint64_t moving = 0, lost_total = 0, left = 0;
    for (uint32_t c = 0; c < v->ncaches; c++) {
        st_cache *sc = v->caches[c];
        const st_cache_config *g = st_cache_cfg(sc);
        uint32_t parts = st_cache_parts(sc);
        int32_t cid = st_cache_id(sc);
        putf(o, "cache %s: %s, %d backup%s, %u partitions\n", g->name, mode_name(g->cache_mode),
             g->backups, g->backups == 1 ? "" : "s", parts);
        putf(o, "  %-36s  %10s  %7s  %7s  %6s  %7s  %4s\n", "NODE", "SIZE", "PRIMARY", "BACKUP",
             "MOVING", "RENTING", "LOST");
        for (uint32_t i = 0; i < v->n; i++) {
            node_id_of(v, i, id);
            const ni_cache *nc = node_cache(&v->ni[i], cid);
            cells(v, sc, i, cellbuf);
            uint32_t cnt[7] = { 0 };
            for (uint32_t p = 0; p < parts; p++) {
                const char *k = strchr(CELL_KINDS, cellbuf[p]);
                cnt[k ? k - CELL_KINDS : 6]++;
            }
            moving += cnt[2];
            char sz[24] = "?";
            if (nc)
                snprintf(sz, sizeof sz, "%lld", (long long)nc->size);
            putf(o, "  %-36s  %10s  %7u  %7u  %6u  %7u  %4u\n", id, sz, cnt[0], cnt[1], cnt[2],
                 cnt[3], cnt[5]);
        }
        uint64_t cleft = 0;
        for (uint32_t i = 0; i < v->n; i++) {
            const ni_cache *nc = node_cache(&v->ni[i], cid);
            cleft += nc ? (uint64_t)nc->left : 0;
        }
        if (cleft)
            putf(o, "  rebalancing: about %llu entries left to load\n", (unsigned long long)cleft);
        left += cleft;
        uint32_t nl = 0;
        for (uint32_t p = 0; v->t && p < parts; p++)
            if (cl_topo_part_lost(v->t, cid, p)) {
                if (!nl)
                    putf(o, "  lost partitions:");
                if (nl < 64)
                    putf(o, " %u", p);
                nl++;
            }
        if (nl)
            putf(o, nl > 64 ? " ... (%u in all)\n" : "\n", nl);
        lost_total += nl;
    }
    putf(o, "lost partitions: %llu\n", (unsigned long long)lost_total);
    if (moving)
        putf(o, "rebalance: %llu partition copies MOVING (not yet owned by their ideal "
             "owners), about %llu entries left to load\n", (unsigned long long)moving,
             (unsigned long long)left);
    else
        putf(o, "rebalance: none in progress\n");
}

int pr_cluster_info(pr_server *s, int fmt, int self_only, uint32_t timeout_ms, em_buf *out)
{
    view v;
    int rc = view_open(&v, s, self_only, timeout_ms);
    uint32_t maxp = 1;
    for (uint32_t c = 0; !rc && c < v.ncaches; c++)
        if (st_cache_parts(v.caches[c]) > maxp)
            maxp = st_cache_parts(v.caches[c]);
    char *cellbuf = rc ? NULL : em_malloc(maxp);
    if (!rc && !cellbuf)
        rc = EM_NOMEM;
    if (!rc) {
        size_t at = out->len;
        if (fmt == 1)
            render_text(&v, out, cellbuf);
        else
            render_json(&v, out, cellbuf);
        /* putf drops what does not fit in memory: check the end arrived. */
        if (out->len == at || out->p[out->len - 1] != '\n')
            rc = EM_NOMEM;
    }
    em_free(cellbuf);
    view_close(&v);
    return rc;
}

/* ---- dispatch ------------------------------------------------------------------ */

int pr_op_ops(pr_conn *c, int op, pr_rd *r, em_buf *out)
{
    switch (op) {
    case PR_OP_PART_VERIFY:
        return op_part_verify(c, r, out);
    case PR_OP_CORRUPT:
        return op_corrupt(c, r, out);
    case PR_OP_NODE_INFO:
        return node_info_encode(c->srv, out);
    case PR_OP_CLUSTER_INFO: {
        uint8_t fmt = 0;
        if (pr_rd_u8(r, &fmt) || fmt > 1)
            return pr_fail(c, PR_ST_FAILED, "CLUSTER_INFO: format byte 0 (JSON) or 1 (text)");
        if (c->forwarded)
            return pr_fail(c, PR_ST_FAILED, "CLUSTER_INFO is not answered for another member");
        em_buf b = EM_BUF_INIT;
        int rc = pr_cluster_info(c->srv, fmt, 0, 1000, &b);
        if (!rc)
            rc = pr_put_strn(out, b.p, b.len);
        em_buf_free(&b);
        return rc;
    }
    }
    return pr_fail(c, PR_ST_INVALID_OP, "Invalid request op code: %d", op);
}
