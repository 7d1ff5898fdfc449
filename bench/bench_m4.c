/* bench_m4.c - BENCHMARKS.md §M4: marshal/unmarshal of the update command
 * (src/wal/wal_codec.c) with Ignite 3's benchmark fields: payload 128, 2048,
 * 8192 bytes; single (one row) or updateAll (100 rows keyed by UUID).
 * `ember-bench micro m4` prints the rows (wall clock, the common harness);
 * `ember-bench m4` adds ops/ms, the seed's anchors (IGNITE-22544 "after"),
 * the ratio and the memcpy floor of the bytes a marshal writes, timed with
 * the thread CPU clock so a busy shared machine does not distort them.
 * `ember-bench wal` (end of file) measures the log itself: FSYNC group
 * commit under 1 and 50 writers, and recovery time.
 */
#include "bench.h"

#include "store/store.h"
#include "util/clock.h"
#include "util/err.h"
#include "util/hash.h"
#include "util/mem.h"
#include "wal/wal.h"

#include <inttypes.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define UPDATE_ALL_ROWS 100

typedef struct m4ctx {
    uint32_t payload;
    int all;
    uint8_t *bytes;           /* payload source, one per row */
    wal_row rows[UPDATE_ALL_ROWS];
    wal_cmd cmd;
    em_buf out;               /* reused marshal target */
    em_buf enc;               /* one encoded command, for unmarshal */
    em_buf copy;              /* memcpy floor target */
} m4ctx;

static const char COORD[] = "node_foo_bar_123_yes";

static void *m4_setup(uint32_t payload, int all)
{
    m4ctx *c = em_calloc(1, sizeof *c);
    if (!c)
        return NULL;
    uint32_t n = all ? UPDATE_ALL_ROWS : 1;
    c->payload = payload;
    c->all = all;
    /* Rows' payloads are separate arrays in Ignite's benchmark: keep them
     * apart here too (a gap after each), so no copy can merge them. */
    size_t stride = (size_t)payload + 64;
    c->bytes = em_malloc(stride * n);
    if (!c->bytes) {
        em_free(c);
        return NULL;
    }
    for (size_t i = 0; i < stride * n; i++)
        c->bytes[i] = (uint8_t)(i * 131 + 7);
    for (uint32_t i = 0; i < n; i++)
        c->rows[i] = (wal_row){{0x9e3779b97f4a7c15ULL * (i + 1), 0xbf58476d1ce4e5b9ULL ^ i},
                               1700000000000LL << 16 | i, 128, c->bytes + stride * i, payload};
    c->cmd = (wal_cmd){ST_UPD_PUT, (uint8_t)all, {0x1234567890abcdefULL, 0x0fedcba987654321ULL},
                       1700000000000LL << 16, 1700000000001LL << 16, 10000, 10000, 2048,
                       COORD, (uint32_t)strlen(COORD), n, c->rows, NULL, 0, NULL};
    if (wal_cmd_marshal(&c->enc, &c->cmd) || em_buf_reserve(&c->copy, c->enc.len)) {
        em_buf_free(&c->enc);
        em_free(c->bytes);
        em_free(c);
        return NULL;
    }
    return c;
}

static void m4_teardown(void *p)
{
    m4ctx *c = p;
    em_buf_free(&c->out);
    em_buf_free(&c->enc);
    em_buf_free(&c->copy);
    em_free(c->bytes);
    em_free(c);
}

static int op_marshal(void *p, uint64_t n)
{
    m4ctx *c = p;
    for (uint64_t i = 0; i < n; i++) {
        em_buf_reset(&c->out);
        if (wal_cmd_marshal(&c->out, &c->cmd))
            return 1;
        bench_sink += c->out.p[c->out.len - 1];
    }
    return 0;
}

static int op_unmarshal(void *p, uint64_t n)
{
    m4ctx *c = p;
    wal_cmd d;
    for (uint64_t i = 0; i < n; i++) {
        /* a view over the bytes; rows are validated, and for updateAll each
         * row's id is read, as a consumer would */
        if (wal_cmd_unmarshal(c->enc.p, c->enc.len, &d))
            return 1;
        if (d.update_all) {
            wal_row_iter pos = {0, 0};
            wal_row r;
            while (wal_cmd_next_row(&d, &pos, &r))
                bench_sink += r.id.lsb;
        }
        bench_sink += d.nrows;
    }
    return 0;
}

/* The floor for marshal: copying the same number of bytes once. */
static int op_memcpy(void *p, uint64_t n)
{
    m4ctx *c = p;
    for (uint64_t i = 0; i < n; i++) {
        memcpy(c->copy.p, c->enc.p, c->enc.len);
        bench_sink += c->copy.p[i % c->enc.len];
    }
    return 0;
}

#define M4_SETUP(id, size, all)                                               \
    static void *setup_##id(void) { return m4_setup(size, all); }

M4_SETUP(s128, 128, 0)
M4_SETUP(s2048, 2048, 0)
M4_SETUP(s8192, 8192, 0)
M4_SETUP(a128, 128, 1)
M4_SETUP(a2048, 2048, 1)
M4_SETUP(a8192, 8192, 1)

/* Ops per round: single commands take tens of ns, so rounds of 20 000 last
 * under a millisecond and one descheduling on a shared machine skews them -
 * longer rounds; rounds of 20 000 updateAll ops of 800 KiB would take
 * minutes - shorter ones. */
#define M4_ROWS(id, name, ops, am, au)                                        \
    BENCH_REGISTER(m4m_##id, {"m4", name, "marshal", am, op_marshal, setup_##id, m4_teardown, ops}) \
    BENCH_REGISTER(m4u_##id, {"m4", name, "unmarshal", au, op_unmarshal, setup_##id, m4_teardown, ops})

M4_ROWS(s128, "128 single", 200000, "4389.8 ops/ms", "2782.6 ops/ms")
M4_ROWS(s2048, "2048 single", 100000, "2754.5 ops/ms", "2752.6 ops/ms")
M4_ROWS(s8192, "8192 single", 50000, "1066.4 ops/ms", "2676.3 ops/ms")
M4_ROWS(a128, "128 updateAll", 5000, "79.7 ops/ms", "70.0 ops/ms")
M4_ROWS(a2048, "2048 updateAll", 1000, "17.4 ops/ms", "63.7 ops/ms")
M4_ROWS(a8192, "8192 updateAll", 300, "3.4 ops/ms", "62.1 ops/ms")

static uint64_t cpu_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

/* cpu_measure: like bench_measure (warm-up, median of 5 rounds, exact
 * allocation counts) but timed with this thread's CPU clock, so time spent
 * descheduled on a shared machine is not charged to the code. */
static bench_result cpu_measure(const bench_row *row)
{
    bench_result r = {0, 0, 0, 0};
    uint64_t n = row->ops_per_round ? row->ops_per_round : 20000;
    void *ctx = row->setup();
    if (!ctx || row->fn(ctx, n)) {
        r.error = 1;
        if (ctx)
            row->teardown(ctx);
        return r;
    }
    double ns[5];
    em_mem_stats m0 = em_mem_thread();
    for (int i = 0; i < 5 && !r.error; i++) {
        uint64_t t0 = cpu_ns();
        r.error = row->fn(ctx, n);
        ns[i] = (double)(cpu_ns() - t0) / (double)n;
    }
    em_mem_stats m1 = em_mem_thread();
    qsort(ns, 5, sizeof ns[0], bench_cmp_double);
    r.ns_op = ns[2];
    r.b_op = (double)(m1.bytes - m0.bytes) / (double)(n * 5);
    r.allocs_op = (double)(m1.allocs - m0.allocs) / (double)(n * 5);
    row->teardown(ctx);
    return r;
}

/* `ember-bench m4`: the table of §M4 with ops/ms beside the anchors. */
static int m4_table(int argc, char **argv)
{
    (void)argc;
    (void)argv;
    static const struct {
        const char *name;
        void *(*setup)(void);
        uint64_t ops;
        double am, au;
    } t[] = {
        {"128 single", setup_s128, 200000, 4389.8, 2782.6},
        {"2048 single", setup_s2048, 100000, 2754.5, 2752.6},
        {"8192 single", setup_s8192, 50000, 1066.4, 2676.3},
        {"128 updateAll", setup_a128, 5000, 79.7, 70.0},
        {"2048 updateAll", setup_a2048, 1000, 17.4, 63.7},
        {"8192 updateAll", setup_a8192, 300, 3.4, 62.1},
    };
    printf("# ember-bench m4: source %s, load average %s\n", bench_source(), bench_loadavg());
    printf("%-15s %-9s %9s %12s %10s %7s %12s %9s %6s %6s\n", "row", "op", "bytes", "ops/ms",
           "anchor", "x", "memcpy/ms", "%floor", "B/op", "alloc");
    for (size_t i = 0; i < sizeof t / sizeof t[0]; i++) {
        m4ctx *probe = t[i].setup();
        if (!probe)
            return 1;
        size_t bytes = probe->enc.len;
        m4_teardown(probe);
        bench_row floor = {"m4", t[i].name, "memcpy", NULL, op_memcpy, t[i].setup, m4_teardown, t[i].ops};
        bench_result f = cpu_measure(&floor);
        for (int op = 0; op < 2; op++) {
            bench_row r = {"m4", t[i].name, op ? "unmarshal" : "marshal", NULL,
                           op ? op_unmarshal : op_marshal, t[i].setup, m4_teardown, t[i].ops};
            bench_result res = cpu_measure(&r);
            if (res.error || f.error)
                return 1;
            double opsms = 1e6 / res.ns_op, anchor = op ? t[i].au : t[i].am;
            double fms = 1e6 / f.ns_op;
            if (op)
                printf("%-15s %-9s %9zu %12.1f %10.1f %6.1fx %12s %9s %6.1f %6.2f\n", t[i].name,
                       "unmarshal", bytes, opsms, anchor, opsms / anchor, "-", "-", res.b_op,
                       res.allocs_op);
            else
                printf("%-15s %-9s %9zu %12.1f %10.1f %6.1fx %12.1f %8.0f%% %6.1f %6.2f\n",
                       t[i].name, "marshal", bytes, opsms, anchor, opsms / anchor, fms,
                       100.0 * opsms / fms, res.b_op, res.allocs_op);
        }
    }
    printf("target: >= 10x every anchor, or >= 80%% of the memcpy floor where 10x is impossible\n");
    return 0;
}

BENCH_COMMAND(m4, "m4", "m4   (M4 table: ops/ms beside IGNITE-22544's anchors and the memcpy floor)", m4_table)

/* ---- `ember-bench wal`: the log under load, in process ------------------
 * Not M4, but the same record: FSYNC group-commit throughput for 1 and 50
 * concurrent writers (each a thread doing st_put through the store with the
 * WAL attached), and the recovery time of 1 million entries from the WAL
 * alone and from a checkpoint.  The network comparison with redis
 * (appendfsync always) needs emberd's persistence flags; see README. */

typedef struct wal_node { st_store *s; wal *w; st_cache *c; } wal_node;

static int node_open(wal_node *n, const char *dir, wal_mode mode, int create)
{
    st_options so = {{"default", 0, 0}};
    memset(n, 0, sizeof *n);
    int rc = st_open(&n->s, &so);
    if (rc)
        return rc;
    wal_options o;
    memset(&o, 0, sizeof o);
    o.dir = dir;
    o.mode = mode;
    if ((rc = wal_open(&n->w, &o)) || (rc = wal_recover(n->w, n->s)) || (rc = wal_attach(n->w, n->s)))
        return rc;
    st_cache_config cfg;
    st_cache_config_init(&cfg);
    cfg.name = (char *)"bench";
    if (create)
        return st_cache_get_or_create(n->s, &cfg, &n->c);
    n->c = st_cache_find(n->s, em_hash_java_str((const uint8_t *)"bench", 5));
    return n->c ? 0 : EM_NOCACHE;
}

static void node_close(wal_node *n)
{
    if (n->w)
        wal_close(n->w);
    if (n->s)
        st_close(n->s);
}

static size_t kv(uint8_t *kb, uint8_t *vb, int32_t k, size_t vlen)
{
    kb[0] = 3;
    em_st32(kb + 1, (uint32_t)k);
    vb[0] = 9;
    em_st32(vb + 1, (uint32_t)vlen);
    memset(vb + 5, 'a' + k % 26, vlen);
    return 5 + vlen;
}

typedef struct wal_thr { st_cache *c; int32_t base; volatile int *stop; uint64_t ops; int rc; } wal_thr;

static void *wal_thr_main(void *p)
{
    wal_thr *t = p;
    uint8_t kb[5], vb[128];
    while (!*t->stop && !t->rc) {
        size_t vl = kv(kb, vb, t->base + (int32_t)t->ops, 100);
        t->rc = st_put(t->c, NULL, kb, 5, vb, vl);
        t->ops++;
    }
    return NULL;
}

static int rm_rf(const char *dir)
{
    char cmd[512];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    return system(cmd);
}

static int wal_bench(int argc, char **argv)
{
    const char *base = "/tmp";
    double secs = 3;
    int entries = 1000000;
    for (int i = 1; i + 1 < argc; i += 2) {
        if (!strcmp(argv[i], "--dir"))
            base = argv[i + 1];
        else if (!strcmp(argv[i], "--seconds"))
            secs = atof(argv[i + 1]);
        else if (!strcmp(argv[i], "--entries"))
            entries = atoi(argv[i + 1]);
    }
    char dir[512];
    static const int threads[] = {1, 50};
    printf("# ember-bench wal: source %s, load average %s\n", bench_source(), bench_loadavg());
    printf("FSYNC group commit, st_put of 100-byte values, %.0f s each, dir %s\n", secs, base);
    for (size_t ti = 0; ti < 2; ti++) {
        snprintf(dir, sizeof dir, "%s/ember-wal-bench-XXXXXX", base);
        if (!mkdtemp(dir))
            return 1;
        wal_node n;
        int rc = node_open(&n, dir, WAL_FSYNC, 1);
        if (rc) {
            fprintf(stderr, "open: %s\n", em_strerror(rc));
            return 1;
        }
        int nt = threads[ti];
        wal_thr t[50];
        pthread_t th[50];
        volatile int stop = 0;
        uint64_t t0 = em_now_ns();
        for (int i = 0; i < nt; i++) {
            t[i] = (wal_thr){n.c, i * 10000000, &stop, 0, 0};
            pthread_create(&th[i], NULL, wal_thr_main, &t[i]);
        }
        struct timespec ts = {(time_t)secs, (long)((secs - (double)(time_t)secs) * 1e9)};
        nanosleep(&ts, NULL);
        stop = 1;
        uint64_t ops = 0;
        for (int i = 0; i < nt; i++) {
            pthread_join(th[i], NULL);
            ops += t[i].ops;
            rc |= t[i].rc;
        }
        double el = (double)(em_now_ns() - t0) / 1e9;
        wal_stats st;
        wal_stats_get(n.w, &st);
        printf("  %2d writers: %9.0f acknowledged puts/s, %7.0f fsyncs/s, %6.1f puts per fsync%s\n",
               nt, (double)ops / el, (double)st.fsyncs / el,
               st.fsyncs ? (double)st.appends / (double)st.fsyncs : 0.0, rc ? "  (errors!)" : "");
        node_close(&n);
        rm_rf(dir);
    }

    /* Recovery of `entries` entries: load through the WAL (BACKGROUND mode
     * to load quickly; recovery reads the same records either way). */
    snprintf(dir, sizeof dir, "%s/ember-wal-bench-XXXXXX", base);
    if (!mkdtemp(dir))
        return 1;
    wal_node n;
    if (node_open(&n, dir, WAL_BACKGROUND, 1))
        return 1;
    uint8_t kb[5], vb[128];
    for (int32_t k = 0; k < entries; k++) {
        size_t vl = kv(kb, vb, k, 100);
        if (st_put(n.c, NULL, kb, 5, vb, vl))
            return 1;
    }
    node_close(&n);
    for (int pass = 0; pass < 2; pass++) {
        struct timespec c0, c1;
        clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &c0);
        uint64_t t0 = em_now_ns();
        if (node_open(&n, dir, WAL_BACKGROUND, 0))
            return 1;
        double el = (double)(em_now_ns() - t0) / 1e6;
        clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &c1);
        double cpu = (double)(c1.tv_sec - c0.tv_sec) * 1e3 + (double)(c1.tv_nsec - c0.tv_nsec) / 1e6;
        wal_stats st;
        wal_stats_get(n.w, &st);
        int64_t size = 0;
        st_size(n.c, 0, &size);
        printf("recovery of %" PRId64 " entries from %s: %.0f ms wall, %.0f ms CPU (%" PRIu64
               " records replayed)\n", size, pass ? "a checkpoint" : "the WAL alone", el, cpu, st.replayed);
        if (!pass && wal_checkpoint(n.w, n.s))
            return 1;
        node_close(&n);
    }
    rm_rf(dir);
    return 0;
}

BENCH_COMMAND(walb, "wal", "wal  [--dir D] [--seconds S] [--entries N]   (FSYNC group commit 1/50 writers; recovery time)", wal_bench)
