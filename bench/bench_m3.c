/* bench_m3.c - BENCHMARKS.md §M3: the exchange's full map through its
 * compressed form (src/cluster/cl_pmap.c, cl_zip.c), seed IGNITE-28853.
 *
 * Cases: 30 and 500 cache groups x 1024 partitions on 3 and 16 nodes.
 * Content: each partition has 2 owners (primary and one backup by a simple
 * rotation), OWNING there and NONE elsewhere; one partition in 64 has its
 * backup MOVING; update counters grow with the group's activity, sizes are a
 * bit under them; one partition in 100 has a backup lagging behind (a
 * per-node diff).
 *
 * Round trip = encode the full map, deflate it into 10 KiB chunks, "receive"
 * (the chunks stay where they are in the wire buffer), inflate into an
 * exactly sized buffer, decode (validating every state) and read one entry.
 * Floor = the same encoded bytes through the codec alone: one compress into
 * a flat buffer and one decompress, no framing, no map code.
 *
 * `ember-bench micro m3` runs the rows through the common harness (wall
 * clock): "floor" the codec alone, "roundtrip" with its buffers reused (the
 * steady state: B/op 0), "rt cold" from empty buffers every op (what a
 * message costs when nothing is pooled: 2 x encoded + wire), "rt cold rx"
 * with the sender's encode buffer reused and the receive side's wire and
 * inflate buffers new (encoded + wire).  Each row's note gives the sizes or
 * the ratio to the floor row before it.
 * `ember-bench m3 [RUNS]` prints the M3 table: the four measured back to
 * back RUNS times (default 5) on the thread CPU clock, medians, the median
 * of the per-run ratios to the floor, and the encoded and wire sizes.
 */
#include "bench.h"

#include "cluster/cl_pmap.h"
#include "cluster/cl_zip.h"
#include "util/err.h"
#include "util/mem.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#ifdef CL_ZIP_ZLIB
#include <zlib.h>
#else
#include <libdeflate.h>
#endif

#define M3_PARTS 1024u

typedef struct m3ctx {
    uint32_t nodes, groups;
    uint8_t *state;            /* groups x nodes x parts */
    uint64_t *cntr, *size;     /* groups x parts */
    cl_pmap_diff *diff;        /* groups x parts at most */
    cl_meta_uuid *ids;
    cl_pmap_group *g, *dg;     /* to encode; decoded views */
    cl_pmap m;
    cl_zip *z;
    em_buf enc, wire, infl;    /* the round trip's reused buffers */
    em_buf fz, fout;           /* the floor's */
#ifdef CL_ZIP_ZLIB
    z_stream zd, zi;
#else
    struct libdeflate_compressor *lc;
    struct libdeflate_decompressor *lu;
#endif
    size_t enc_len, wire_len;
} m3ctx;

static uint64_t rng_next(uint64_t *s)
{
    *s ^= *s << 13;
    *s ^= *s >> 7;
    *s ^= *s << 17;
    return *s;
}

static void m3_teardown(void *p)
{
    m3ctx *c = p;
    if (!c)
        return;
    cl_zip_free(c->z);
    em_buf_free(&c->enc);
    em_buf_free(&c->wire);
    em_buf_free(&c->infl);
    em_buf_free(&c->fz);
    em_buf_free(&c->fout);
#ifdef CL_ZIP_ZLIB
    deflateEnd(&c->zd);
    inflateEnd(&c->zi);
#else
    if (c->lc)
        libdeflate_free_compressor(c->lc);
    if (c->lu)
        libdeflate_free_decompressor(c->lu);
#endif
    em_free(c->state);
    em_free(c->cntr);
    em_free(c->size);
    em_free(c->diff);
    em_free(c->ids);
    em_free(c->g);
    em_free(c->dg);
    em_free(c);
}

#ifdef CL_ZIP_ZLIB
static voidpf zb_alloc(voidpf o, uInt n, uInt s) { (void)o; return em_malloc((size_t)n * s); }
static void zb_free(voidpf o, voidpf p) { (void)o; em_free(p); }
#endif

static void *m3_setup(uint32_t groups, uint32_t nodes)
{
    m3ctx *c = em_calloc(1, sizeof *c);
    if (!c)
        return NULL;
    c->nodes = nodes;
    c->groups = groups;
    size_t gp = (size_t)groups * M3_PARTS;
    c->state = em_malloc(gp * nodes);
    c->cntr = em_malloc(gp * 8);
    c->size = em_malloc(gp * 8);
    c->diff = em_malloc(gp * sizeof *c->diff);
    c->ids = em_malloc(nodes * sizeof *c->ids);
    c->g = em_calloc(groups, sizeof *c->g);
    c->dg = em_calloc(groups, sizeof *c->dg);
    if (!c->state || !c->cntr || !c->size || !c->diff || !c->ids || !c->g || !c->dg ||
        cl_zip_new(&c->z, CL_ZIP_LEVEL))
        goto fail;
    uint64_t s = 0x9e3779b97f4a7c15ULL ^ ((uint64_t)groups << 32 | nodes);
    for (uint32_t i = 0; i < nodes; i++)
        c->ids[i] = (cl_meta_uuid){rng_next(&s), rng_next(&s)};
    size_t nd = 0;
    for (uint32_t g = 0; g < groups; g++) {
        uint8_t *st = c->state + (size_t)g * nodes * M3_PARTS;
        uint64_t *cn = c->cntr + (size_t)g * M3_PARTS, *sz = c->size + (size_t)g * M3_PARTS;
        memset(st, CL_PS_NONE, (size_t)nodes * M3_PARTS);
        uint64_t activity = 1 + g % 7;
        uint32_t nd0 = (uint32_t)nd;
        for (uint32_t p = 0; p < M3_PARTS; p++) {
            uint32_t pri = (p + g) % nodes, bak = (p + g + 1) % nodes;
            st[(size_t)pri * M3_PARTS + p] = CL_PS_OWNING;
            st[(size_t)bak * M3_PARTS + p] = p % 64 == 63 ? CL_PS_MOVING : CL_PS_OWNING;
            cn[p] = activity * (5000 + rng_next(&s) % 20000);
            sz[p] = cn[p] - cn[p] / 4 - rng_next(&s) % 50;
            if (p % 100 == 7)
                c->diff[nd++] = (cl_pmap_diff){bak, p, cn[p] - 1 - rng_next(&s) % 20};
        }
        c->g[g] = (cl_pmap_group){(int32_t)(0x5000 + g * 7919), M3_PARTS, (uint32_t)nd - nd0, st,
                                  cn, sz, c->diff + nd0};
    }
    c->m = (cl_pmap){42, 17, 1, nodes, c->ids, NULL, groups, c->g};
    if (cl_pmap_encode(&c->enc, &c->m) || cl_zip_deflate(c->z, &c->wire, c->enc.p, c->enc.len))
        goto fail;
    c->enc_len = c->enc.len;
    c->wire_len = c->wire.len;
#ifdef CL_ZIP_ZLIB
    c->zd.zalloc = c->zi.zalloc = zb_alloc;
    c->zd.zfree = c->zi.zfree = zb_free;
    if (deflateInit2(&c->zd, CL_ZIP_LEVEL, Z_DEFLATED, -15, 8, Z_DEFAULT_STRATEGY) != Z_OK ||
        inflateInit2(&c->zi, -15) != Z_OK)
        goto fail;
    size_t bound = deflateBound(&c->zd, c->enc_len);
#else
    c->lc = libdeflate_alloc_compressor(CL_ZIP_LEVEL);
    c->lu = libdeflate_alloc_decompressor();
    if (!c->lc || !c->lu)
        goto fail;
    size_t bound = libdeflate_deflate_compress_bound(c->lc, c->enc_len);
#endif
    if (em_buf_reserve(&c->fz, bound) || em_buf_reserve(&c->fout, c->enc_len))
        goto fail;
    return c;
fail:
    m3_teardown(c);
    return NULL;
}

/* One round trip through the buffers given; returns nonzero on any error. */
static int round_trip(m3ctx *c, em_buf *enc, em_buf *wire, em_buf *infl)
{
    char why[160];
    em_buf_reset(enc);
    em_buf_reset(wire);
    if (cl_pmap_encode(enc, &c->m) || cl_zip_deflate(c->z, wire, enc->p, enc->len))
        return 1;
    if (cl_zip_inflate(c->z, wire->p, wire->len, infl, why, sizeof why)) {
        fprintf(stderr, "m3: %s\n", why);
        return 1;
    }
    cl_pmap d;
    d.g = c->dg;
    if (cl_pmap_decode(infl->p, infl->len, &d, c->groups))
        return 1;
    cl_pmap_group *g = &d.g[d.ngroups - 1];
    bench_sink += cl_pmap_cntr(g, g->parts - 1) + cl_pmap_state(&d, g, d.nodes - 1, 0);
    return 0;
}

static int op_warm(void *p, uint64_t n)
{
    m3ctx *c = p;
    for (uint64_t i = 0; i < n; i++)
        if (round_trip(c, &c->enc, &c->wire, &c->infl))
            return 1;
    return 0;
}

/* Every op from empty buffers: what one message costs when nothing is
 * pooled (the codec state stays: it is per thread). */
static int op_cold(void *p, uint64_t n)
{
    m3ctx *c = p;
    for (uint64_t i = 0; i < n; i++) {
        em_buf enc = EM_BUF_INIT, wire = EM_BUF_INIT, infl = EM_BUF_INIT;
        int rc = round_trip(c, &enc, &wire, &infl);
        em_buf_free(&enc);
        em_buf_free(&wire);
        em_buf_free(&infl);
        if (rc)
            return 1;
    }
    return 0;
}

/* The sender's encode buffer pooled, the wire and inflate buffers new every
 * op: what the receiving side allocates for a message (Ignite's JMH counts
 * the receive round trip's heap), encoded + wire bytes. */
static int op_cold_rx(void *p, uint64_t n)
{
    m3ctx *c = p;
    for (uint64_t i = 0; i < n; i++) {
        em_buf wire = EM_BUF_INIT, infl = EM_BUF_INIT;
        int rc = round_trip(c, &c->enc, &wire, &infl);
        em_buf_free(&wire);
        em_buf_free(&infl);
        if (rc)
            return 1;
    }
    return 0;
}

/* The codec alone: compress the encoded bytes into a flat buffer, inflate
 * them into one exactly sized buffer. */
static int op_floor(void *p, uint64_t n)
{
    m3ctx *c = p;
    for (uint64_t i = 0; i < n; i++) {
#ifdef CL_ZIP_ZLIB
        if (deflateReset(&c->zd) != Z_OK)
            return 1;
        c->zd.next_in = c->enc.p;
        c->zd.avail_in = (uInt)c->enc_len;
        c->zd.next_out = c->fz.p;
        c->zd.avail_out = (uInt)c->fz.cap;
        if (deflate(&c->zd, Z_FINISH) != Z_STREAM_END)
            return 1;
        size_t clen = c->fz.cap - c->zd.avail_out;
        if (inflateReset(&c->zi) != Z_OK)
            return 1;
        c->zi.next_in = c->fz.p;
        c->zi.avail_in = (uInt)clen;
        c->zi.next_out = c->fout.p;
        c->zi.avail_out = (uInt)c->enc_len;
        if (inflate(&c->zi, Z_FINISH) != Z_STREAM_END || c->zi.avail_out != 0)
            return 1;
#else
        size_t clen = libdeflate_deflate_compress(c->lc, c->enc.p, c->enc_len, c->fz.p, c->fz.cap);
        if (!clen || libdeflate_deflate_decompress(c->lu, c->fz.p, clen, c->fout.p, c->enc_len,
                                                   NULL) != LIBDEFLATE_SUCCESS)
            return 1;
#endif
        bench_sink += c->fout.p[c->enc_len - 1] + clen;
    }
    return 0;
}

/* What `micro m3` prints beside each row: the sizes (from the row's setup)
 * and the round trip's ratio to the floor row measured just before it. */
typedef struct m3case { size_t enc, wire; double floor_ns; } m3case;
static m3case m3_cases[4];

static void note_floor(m3case *k, const bench_result *r, char *buf, size_t cap)
{
    k->floor_ns = r->ns_op;
    snprintf(buf, cap, "encoded %zu B, wire %zu B (%.1fx)", k->enc, k->wire,
             k->wire ? (double)k->enc / (double)k->wire : 0.0);
}

static void note_rt(m3case *k, const bench_result *r, char *buf, size_t cap)
{
    if (k->floor_ns > 0)
        snprintf(buf, cap, "%.3fx floor, encoded + wire = %zu B", r->ns_op / k->floor_ns,
                 k->enc + k->wire);
    else
        snprintf(buf, cap, "floor row not run");
}

#define M3_CASE(id, idx, g, nodes)                                                     \
    static void *setup_##id(void)                                                      \
    {                                                                                  \
        m3ctx *c = m3_setup(g, nodes);                                                 \
        if (c) {                                                                       \
            m3_cases[idx].enc = c->enc_len;                                            \
            m3_cases[idx].wire = c->wire_len;                                          \
        }                                                                              \
        return c;                                                                      \
    }                                                                                  \
    static void nf_##id(const bench_result *r, char *b, size_t n) { note_floor(&m3_cases[idx], r, b, n); } \
    static void nr_##id(const bench_result *r, char *b, size_t n) { note_rt(&m3_cases[idx], r, b, n); }
M3_CASE(g30n3, 0, 30, 3)
M3_CASE(g30n16, 1, 30, 16)
M3_CASE(g500n3, 2, 500, 3)
M3_CASE(g500n16, 3, 500, 16)

/* Ops per round: one op of the 30-group map takes a few ms, the 500-group
 * one on 16 nodes ~50 ms (16 MB encoded). */
#define M3_ROWS(id, name, ops, anchor)                                                  \
    BENCH_REGISTER_NOTE(m3f_##id, nf_##id, {"m3", name, "floor", NULL, op_floor, setup_##id, m3_teardown, ops}) \
    BENCH_REGISTER_NOTE(m3w_##id, nr_##id, {"m3", name, "roundtrip", anchor, op_warm, setup_##id, m3_teardown, ops}) \
    BENCH_REGISTER_NOTE(m3c_##id, nr_##id, {"m3", name, "rt cold", NULL, op_cold, setup_##id, m3_teardown, ops}) \
    BENCH_REGISTER_NOTE(m3r_##id, nr_##id, {"m3", name, "rt cold rx", NULL, op_cold_rx, setup_##id, m3_teardown, ops})

M3_ROWS(g30n3, "30 groups, 3 nodes", 40, "100.9 K ops/s, 25.2 KB/op")
M3_ROWS(g30n16, "30 groups, 16 nodes", 10, "100.9 K ops/s, 25.2 KB/op")
M3_ROWS(g500n3, "500 groups, 3 nodes", 4, "5.76 K ops/s, 431 KB/op")
M3_ROWS(g500n16, "500 groups, 16 nodes", 1, "5.76 K ops/s, 431 KB/op")

/* ---- `ember-bench m3`: the table ---------------------------------------- */

static uint64_t cpu_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

/* measure: one warm-up op, then the median of 5 rounds of n ops on the
 * thread CPU clock; B/op and allocs/op exact over the 5 rounds. */
static bench_result measure(m3ctx *c, bench_op_fn fn, uint64_t n)
{
    bench_result r = {0, 0, 0, 0};
    if (fn(c, 1)) {
        r.error = 1;
        return r;
    }
    double ns[5];
    em_mem_stats m0 = em_mem_thread();
    for (int i = 0; i < 5 && !r.error; i++) {
        uint64_t t0 = cpu_ns();
        r.error = fn(c, n);
        ns[i] = (double)(cpu_ns() - t0) / (double)n;
    }
    em_mem_stats m1 = em_mem_thread();
    qsort(ns, 5, sizeof ns[0], bench_cmp_double);
    r.ns_op = ns[2];
    r.b_op = (double)(m1.bytes - m0.bytes) / (double)(n * 5);
    r.allocs_op = (double)(m1.allocs - m0.allocs) / (double)(n * 5);
    return r;
}

static double median(double *v, int n)
{
    qsort(v, (size_t)n, sizeof v[0], bench_cmp_double);
    return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

#define M3_MAX_RUNS 31

static int m3_table(int argc, char **argv)
{
    int runs = argc > 1 ? atoi(argv[1]) : 5;
    if (runs < 1 || runs > M3_MAX_RUNS)
        runs = 5;
    static const struct {
        const char *name;
        void *(*setup)(void);
        uint64_t ops;
        const char *anchor;
    } t[] = {
        {"30 groups, 3 nodes", setup_g30n3, 20, "100.9 K"},
        {"30 groups, 16 nodes", setup_g30n16, 5, "100.9 K"},
        {"500 groups, 3 nodes", setup_g500n3, 2, "5.76 K"},
        {"500 groups, 16 nodes", setup_g500n16, 1, "5.76 K"},
    };
    printf("# ember-bench m3: source %s, load average %s, codec %s level %d, thread CPU clock, "
           "%d runs\n", bench_source(), bench_loadavg(), cl_zip_codec(), CL_ZIP_LEVEL, runs);
    printf("%-21s %9s %8s %6s %10s %10s %9s %7s %9s %6s %9s %6s %9s %6s %8s\n", "case",
           "encoded", "wire", "ratio", "floor ns", "rt ns", "rt ops/s", "xfloor", "warm B/op",
           "allocs", "cold B/op", "allocs", "rx B/op", "allocs", "anchor");
    for (size_t i = 0; i < sizeof t / sizeof t[0]; i++) {
        m3ctx *c = t[i].setup();
        if (!c)
            return 1;
        double f[M3_MAX_RUNS], w[M3_MAX_RUNS], k[M3_MAX_RUNS], x[M3_MAX_RUNS];
        bench_result wr = {0, 0, 0, 0}, cr = wr, rr = wr;
        for (int r = 0; r < runs; r++) {
            bench_result fr = measure(c, op_floor, t[i].ops);
            wr = measure(c, op_warm, t[i].ops);
            cr = measure(c, op_cold, t[i].ops);
            rr = measure(c, op_cold_rx, t[i].ops);
            if (fr.error || wr.error || cr.error || rr.error) {
                m3_teardown(c);
                return 1;
            }
            f[r] = fr.ns_op;
            w[r] = wr.ns_op;
            k[r] = cr.ns_op;
            x[r] = wr.ns_op / fr.ns_op;
        }
        double fm = median(f, runs), wm = median(w, runs), xm = median(x, runs);
        (void)median(k, runs);
        printf("%-21s %9zu %8zu %5.1fx %10.0f %10.0f %9.1f %6.3fx %9.1f %6.2f %9.0f %6.2f %9.0f "
               "%6.2f %8s\n", t[i].name, c->enc_len, c->wire_len,
               (double)c->enc_len / (double)c->wire_len, fm, wm, 1e9 / wm, xm, wr.b_op,
               wr.allocs_op, cr.b_op, cr.allocs_op, rr.b_op, rr.allocs_op, t[i].anchor);
        m3_teardown(c);
    }
    printf("xfloor: median of the per-run ratios warm round trip / floor (target <= 1.15); "
           "B/op: warm = all buffers reused, cold = all new every op, rx = encode buffer "
           "reused, wire and inflate buffers new (target: encoded + wire + a constant)\n");
    return 0;
}
BENCH_COMMAND(m3, "m3", "m3 [RUNS]   (M3 table: full-map round trip vs the codec floor)", m3_table)
