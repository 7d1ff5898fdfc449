/* test_wal_recover.c - the WAL writer and recovery on the in-memory crash
 * file system (src/wal/wal_file.c): segments, torn tails at every byte,
 * bit flips, power loss per mode, EIO/ENOSPC, group commit, checkpoints. */
#include "test.h"

#include "util/err.h"
#include "util/mem.h"
#include "wal/wal.h"

#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <unistd.h>

#define DIR "/db"
#define SEG0 "/db/wal-0000000000000000.seg"
#define SEG1 "/db/wal-0000000000000001.seg"

/* What replay handed back, in order. */
typedef struct model {
    uint32_t n, cap;
    struct { int kind; uint32_t key, val; } *e;
    int fail_at;           /* fail the apply of this record (1-based), 0 = never */
} model;

static int collect(void *arg, const st_update *u)
{
    model *m = arg;
    if (m->fail_at && (int)m->n + 1 == m->fail_at)
        return EM_NOMEM;
    if (m->n == m->cap) {
        m->cap = m->cap ? m->cap * 2 : 64;
        m->e = em_realloc(m->e, m->cap * sizeof *m->e);
        if (!m->e)
            return EM_NOMEM;
    }
    uint32_t k = 0, v = 0;
    if (u->klen == 5)                   /* int key, byte-array value: see put */
        k = em_ld32(u->key + 1);
    if (u->vlen >= 9)
        v = em_ld32(u->val + 5);
    m->e[m->n].kind = u->kind;
    m->e[m->n].key = k;
    m->e[m->n].val = v;
    m->n++;
    return 0;
}

static void model_free(model *m)
{
    em_free(m->e);
    memset(m, 0, sizeof *m);
}

static int open_log(wal_memfs *fs, wal_mode mode, uint64_t seg, wal **w, model *m)
{
    wal_options o;
    memset(&o, 0, sizeof o);
    o.dir = DIR;
    o.mode = mode;
    o.segment_bytes = seg;
    o.flush_ms = 10;
    o.ops = wal_memfs_ops(fs);
    int rc = wal_open(w, &o);
    if (rc)
        return rc;
    rc = wal_replay(*w, collect, m);
    if (rc) {
        wal_close(*w);
        *w = NULL;
    }
    return rc;
}

/* put logs key -> val as recovery accepts them, whole data objects: an int
 * key (type 3) and a byte-array value (type 12) of vlen bytes in all,
 * starting with val. */
static int put(wal *w, uint32_t key, uint32_t val, uint32_t vlen)
{
    uint8_t k[5], v[256];
    vlen = vlen < 9 ? 9 : vlen > sizeof v ? (uint32_t)sizeof v : vlen;
    k[0] = 3;
    em_st32(k + 1, key);
    memset(v, (int)(val & 0xff), sizeof v);
    v[0] = 12;
    em_st32(v + 1, vlen - 5);
    em_st32(v + 5, val);
    st_update u;
    memset(&u, 0, sizeof u);
    u.kind = ST_UPD_PUT;
    u.cache_id = 42;
    u.partition = key % 1024;
    u.key = k;
    u.klen = sizeof k;
    u.val = v;
    u.vlen = vlen;
    return wal_append(w, &u);
}

/* check_prefix: the first n records replayed are puts key i -> val i*3+1. */
static int check_prefix(const model *m, uint32_t n)
{
    if (m->n < n)
        return 0;
    for (uint32_t i = 0; i < n; i++)
        if (m->e[i].kind != ST_UPD_PUT || m->e[i].key != i || m->e[i].val != i * 3 + 1)
            return 0;
    return 1;
}

static int write_n(wal *w, uint32_t from, uint32_t n)
{
    for (uint32_t i = from; i < from + n; i++) {
        int rc = put(w, i, i * 3 + 1, 20 + i % 50);
        if (rc)
            return rc;
    }
    return 0;
}

TEST(wal_replay_after_clean_close_all_modes)
{
    for (int mode = WAL_FSYNC; mode <= WAL_NONE; mode++) {
        wal_memfs *fs;
        REQUIRE_OK(wal_memfs_new(&fs));
        wal *w;
        model m = {0};
        REQUIRE_OK(open_log(fs, (wal_mode)mode, 0, &w, &m));
        CHECK_EQ(m.n, 0);
        REQUIRE_OK(write_n(w, 0, 300));
        REQUIRE_OK(wal_close(w));
        REQUIRE_OK(open_log(fs, (wal_mode)mode, 0, &w, &m));
        CHECK_EQ(m.n, 300);
        CHECK(check_prefix(&m, 300));
        /* appending after a replay continues the LSN sequence */
        REQUIRE_OK(write_n(w, 300, 5));
        REQUIRE_OK(wal_close(w));
        model m2 = {0};
        REQUIRE_OK(open_log(fs, (wal_mode)mode, 0, &w, &m2));
        CHECK_EQ(m2.n, 305);
        CHECK(check_prefix(&m2, 305));
        wal_close(w);
        model_free(&m);
        model_free(&m2);
        wal_memfs_free(fs);
    }
}

TEST(wal_segments_roll_and_replay_in_order)
{
    wal_memfs *fs;
    REQUIRE_OK(wal_memfs_new(&fs));
    wal *w;
    model m = {0};
    REQUIRE_OK(open_log(fs, WAL_LOG_ONLY, 2048, &w, &m));
    REQUIRE_OK(write_n(w, 0, 500));
    wal_stats st;
    wal_stats_get(w, &st);
    CHECK(st.segment > 10);
    CHECK_EQ(st.next_lsn, 501);
    REQUIRE_OK(wal_close(w));
    uint8_t *p;
    size_t len;
    REQUIRE_OK(wal_memfs_file(fs, SEG1, &p, &len));
    CHECK(len <= 2048);
    REQUIRE_OK(open_log(fs, WAL_LOG_ONLY, 2048, &w, &m));
    CHECK_EQ(m.n, 500);
    CHECK(check_prefix(&m, 500));
    wal_close(w);
    model_free(&m);
    wal_memfs_free(fs);
}

/* A synced copy of a log holding n records in segment 0; *ends gets each
 * record's end offset. */
static int make_log(wal_memfs **out, uint32_t n, size_t *ends)
{
    wal_memfs *fs;
    int rc = wal_memfs_new(&fs);
    if (rc)
        return rc;
    wal *w;
    model m = {0};
    rc = open_log(fs, WAL_FSYNC, 0, &w, &m);
    for (uint32_t i = 0; !rc && i < n; i++) {
        rc = put(w, i, i * 3 + 1, 20 + i % 50);
        uint8_t *p;
        size_t len;
        if (!rc && ends && !(rc = wal_memfs_file(fs, SEG0, &p, &len)))
            ends[i] = len;
    }
    if (w)
        wal_close(w);
    model_free(&m);
    if (rc) {
        wal_memfs_free(fs);
        return rc;
    }
    *out = fs;
    return 0;
}

TEST(wal_torn_tail_at_every_byte_of_the_last_records)
{
    enum { N = 12 };
    size_t ends[N];
    wal_memfs *base;
    REQUIRE_OK(make_log(&base, N, ends));
    /* cut anywhere from the start of record N-4 to the end of the file */
    for (size_t cut = ends[N - 5]; cut <= ends[N - 1]; cut++) {
        wal_memfs *fs;
        REQUIRE_OK(wal_memfs_crash(base, 1.0, 0, &fs));
        REQUIRE_OK(wal_memfs_set_len(fs, SEG0, cut));
        uint32_t whole = 0;
        while (whole < N && ends[whole] <= cut)
            whole++;
        wal *w;
        model m = {0};
        int rc = open_log(fs, WAL_FSYNC, 0, &w, &m);
        if (rc) {
            test_fail(__FILE__, __LINE__, "cut %zu: %s", cut, em_errname(rc));
            wal_memfs_free(fs);
            break;
        }
        CHECK_EQ(m.n, whole);
        CHECK(check_prefix(&m, whole));
        wal_stats st;
        wal_stats_get(w, &st);
        CHECK_EQ(st.cut_bytes, cut - (whole ? ends[whole - 1] : 32));
        /* the cut log takes new records and replays them after the old */
        CHECK_OK(put(w, whole, whole * 3 + 1, 10));
        wal_close(w);
        model m2 = {0};
        REQUIRE_OK(open_log(fs, WAL_FSYNC, 0, &w, &m2));
        CHECK_EQ(m2.n, whole + 1);
        CHECK(check_prefix(&m2, whole + 1));
        wal_close(w);
        model_free(&m);
        model_free(&m2);
        wal_memfs_free(fs);
    }
    wal_memfs_free(base);
}

/* Outcome table for a flipped bit (documented in the report):
 *   in the segment header            -> EM_CORRUPT (records follow it)
 *   in a record that is not the last -> EM_CORRUPT naming file and offset
 *   in the last record               -> indistinguishable from a torn write:
 *                                       that record is cut, the rest replays */
TEST(wal_bit_flips_in_the_last_records)
{
    enum { N = 6 };
    size_t ends[N];
    wal_memfs *base;
    REQUIRE_OK(make_log(&base, N, ends));
    size_t from = ends[N - 4];
    for (size_t bit = 0; bit < ends[N - 1] * 8; bit++) {
        size_t byte = bit / 8;
        if (byte >= 32 && byte < from)
            continue;           /* header bits and the last three records */
        wal_memfs *fs;
        REQUIRE_OK(wal_memfs_crash(base, 1.0, 0, &fs));
        uint8_t *p;
        size_t len;
        REQUIRE_OK(wal_memfs_file(fs, SEG0, &p, &len));
        p[byte] ^= (uint8_t)(1u << (bit % 8));
        wal *w = NULL;
        model m = {0};
        int rc = open_log(fs, WAL_FSYNC, 0, &w, &m);
        if (byte < 32 || byte < ends[N - 2]) {
            CHECK_EQ(rc, EM_CORRUPT);
        } else {
            CHECK_EQ(rc, 0);
            CHECK_EQ(m.n, N - 1);
            CHECK(check_prefix(&m, N - 1));
        }
        if (w)
            wal_close(w);
        model_free(&m);
        wal_memfs_free(fs);
        if (test_failed())
            break;
    }
    wal_memfs_free(base);
}

TEST(wal_corruption_message_names_file_and_offset)
{
    enum { N = 5 };
    size_t ends[N];
    wal_memfs *fs;
    REQUIRE_OK(make_log(&fs, N, ends));
    uint8_t *p;
    size_t len;
    REQUIRE_OK(wal_memfs_file(fs, SEG0, &p, &len));
    p[ends[1] + 26] ^= 1;          /* inside record 3's body */
    wal_options o;
    memset(&o, 0, sizeof o);
    o.dir = DIR;
    o.ops = wal_memfs_ops(fs);
    wal *w;
    REQUIRE_OK(wal_open(&w, &o));
    CHECK_EQ(wal_replay(w, NULL, NULL), EM_CORRUPT);
    char want[128];
    snprintf(want, sizeof want, "%s: corrupt record at offset %zu followed by a valid record at offset %zu",
             SEG0, ends[1], ends[2]);
    CHECK(strcmp(wal_errmsg(w), want) == 0);
    if (strcmp(wal_errmsg(w), want))
        printf("got: %s\n", wal_errmsg(w));
    wal_close(w);
    wal_memfs_free(fs);
}

TEST(wal_damage_in_a_non_last_segment_refuses_to_start)
{
    wal_memfs *fs;
    REQUIRE_OK(wal_memfs_new(&fs));
    wal *w;
    model m = {0};
    REQUIRE_OK(open_log(fs, WAL_FSYNC, 1024, &w, &m));
    REQUIRE_OK(write_n(w, 0, 60));
    wal_close(w);
    /* cut the end of segment 0: a torn tail there is damage, not a crash */
    uint8_t *p;
    size_t len;
    REQUIRE_OK(wal_memfs_file(fs, SEG0, &p, &len));
    REQUIRE_OK(wal_memfs_set_len(fs, SEG0, len - 3));
    CHECK_EQ(open_log(fs, WAL_FSYNC, 1024, &w, &m), EM_CORRUPT);
    /* and a missing segment in the middle is refused too */
    REQUIRE_OK(wal_memfs_set_len(fs, SEG0, len));
    REQUIRE_OK(wal_memfs_ops(fs)->unlink(fs, SEG1));
    CHECK_EQ(open_log(fs, WAL_FSYNC, 1024, &w, &m), EM_CORRUPT);
    model_free(&m);
    wal_memfs_free(fs);
}

TEST(wal_replay_stops_on_apply_error)
{
    wal_memfs *fs;
    REQUIRE_OK(make_log(&fs, 10, NULL));
    wal *w;
    model m = {0};
    m.fail_at = 4;
    CHECK_EQ(open_log(fs, WAL_FSYNC, 0, &w, &m), EM_NOMEM);
    model_free(&m);
    wal_memfs_free(fs);
}

/* Writers append; the test records which appends were acknowledged; then the
 * power fails with a random part of each file's unsynced bytes kept. */
static void power_loss(wal_mode mode, uint64_t seg, int seeds)
{
    for (int seed = 1; seed <= seeds; seed++) {
        wal_memfs *fs, *after;
        REQUIRE_OK(wal_memfs_new(&fs));
        wal *w;
        model m = {0};
        REQUIRE_OK(open_log(fs, mode, seg, &w, &m));
        uint32_t acked = 0, n = 50 + (uint32_t)seed * 7;
        for (uint32_t i = 0; i < n; i++)
            if (put(w, i, i * 3 + 1, 20 + i % 50) == 0)
                acked = i + 1;
        CHECK_EQ(acked, n);
        double keep = seed % 3 == 0 ? 0.0 : -1.0;
        REQUIRE_OK(wal_memfs_crash(fs, keep, (uint64_t)seed * 7919, &after));
        /* the writer is abandoned as the crash left it */
        wal_close(w);
        wal_memfs_free(fs);
        REQUIRE_OK(open_log(after, mode, seg, &w, &m));
        if (mode == WAL_FSYNC)
            CHECK_EQ(m.n, acked);               /* nothing acknowledged is lost */
        CHECK(m.n <= acked);
        CHECK(check_prefix(&m, m.n));           /* only a suffix is lost, never garbage */
        wal_close(w);
        model_free(&m);
        wal_memfs_free(after);
        if (test_failed())
            return;
    }
}

TEST(wal_power_loss_fsync_loses_nothing_acknowledged)
{
    power_loss(WAL_FSYNC, 0, 20);
    power_loss(WAL_FSYNC, 1500, 20);
}

TEST(wal_power_loss_log_only_loses_only_a_suffix)
{
    power_loss(WAL_LOG_ONLY, 0, 20);
    power_loss(WAL_LOG_ONLY, 1500, 20);
    power_loss(WAL_BACKGROUND, 1500, 10);
    power_loss(WAL_NONE, 1500, 10);
}

TEST(wal_background_mode_flushes_on_its_own)
{
    wal_memfs *fs, *after;
    REQUIRE_OK(wal_memfs_new(&fs));
    wal *w;
    model m = {0};
    REQUIRE_OK(open_log(fs, WAL_BACKGROUND, 0, &w, &m));
    REQUIRE_OK(write_n(w, 0, 20));
    usleep(100 * 1000);                 /* flush_ms is 10 */
    REQUIRE_OK(wal_memfs_crash(fs, 0.0, 1, &after));
    wal_close(w);
    wal_memfs_free(fs);
    REQUIRE_OK(open_log(after, WAL_BACKGROUND, 0, &w, &m));
    CHECK_EQ(m.n, 20);
    wal_close(w);
    model_free(&m);
    wal_memfs_free(after);
}

TEST(wal_none_mode_writes_at_close_only)
{
    wal_memfs *fs, *after;
    REQUIRE_OK(wal_memfs_new(&fs));
    wal *w;
    model m = {0};
    REQUIRE_OK(open_log(fs, WAL_NONE, 0, &w, &m));
    REQUIRE_OK(write_n(w, 0, 20));
    REQUIRE_OK(wal_memfs_crash(fs, 1.0, 1, &after));
    wal_close(w);
    wal *w2;
    REQUIRE_OK(open_log(after, WAL_NONE, 0, &w2, &m));
    CHECK_EQ(m.n, 0);                   /* a crash loses it all, as Ignite says */
    wal_close(w2);
    REQUIRE_OK(open_log(fs, WAL_NONE, 0, &w2, &m));
    CHECK_EQ(m.n, 20);                  /* a graceful close keeps it all */
    wal_close(w2);
    model_free(&m);
    wal_memfs_free(after);
    wal_memfs_free(fs);
}

static void io_fault(wal_mode mode, int what, int err, int torn)
{
    wal_memfs *fs, *after;
    REQUIRE_OK(wal_memfs_new(&fs));
    wal *w;
    model m = {0};
    REQUIRE_OK(open_log(fs, mode, 0, &w, &m));
    REQUIRE_OK(write_n(w, 0, 10));
    wal_memfs_fault(fs, what, 1, err, torn, 0);
    uint32_t acked = 10;
    int rc = put(w, 10, 31, 40);
    if (mode == WAL_FSYNC || what == WAL_FAULT_WRITE) {
        CHECK_EQ(rc, -err);                 /* never acknowledged */
    } else {
        CHECK_EQ(rc, 0);                    /* LOG_ONLY acks after write(2) */
        acked++;
        CHECK_EQ(wal_flush(w), -err);       /* the fsync that fails */
    }
    CHECK_EQ(wal_error(w), -err);
    CHECK(strstr(wal_errmsg(w), "takes no more writes") != NULL);
    /* the fault is gone, yet the log refuses: a failed fsync may have
     * dropped pages, so nothing after it can be trusted (fsyncgate) */
    CHECK_EQ(put(w, 11, 34, 40), EM_READONLY);
    CHECK_EQ(wal_flush(w), EM_READONLY);
    REQUIRE_OK(wal_memfs_crash(fs, -1.0, 3, &after));
    CHECK_EQ(wal_close(w), -err);
    REQUIRE_OK(open_log(after, mode, 0, &w, &m));
    CHECK(m.n >= (mode == WAL_FSYNC ? 10u : 0u));
    CHECK(m.n <= acked);
    CHECK(check_prefix(&m, m.n));
    wal_close(w);
    model_free(&m);
    wal_memfs_free(after);
    wal_memfs_free(fs);
}

TEST(wal_eio_and_enospc_are_never_acknowledged)
{
    io_fault(WAL_FSYNC, WAL_FAULT_WRITE, EIO, 0);
    io_fault(WAL_FSYNC, WAL_FAULT_WRITE, ENOSPC, 1);
    io_fault(WAL_FSYNC, WAL_FAULT_FSYNC, EIO, 0);
    io_fault(WAL_FSYNC, WAL_FAULT_FSYNC, ENOSPC, 0);
    io_fault(WAL_LOG_ONLY, WAL_FAULT_WRITE, EIO, 1);
    io_fault(WAL_LOG_ONLY, WAL_FAULT_FSYNC, EIO, 0);
}

TEST(wal_fault_at_every_io_step)
{
    /* SQLite-style: fail the nth write, then the nth fsync, for every n a
     * short run performs; the log must refuse and recover a prefix. */
    for (int what = WAL_FAULT_WRITE; what <= WAL_FAULT_FSYNC; what++)
        for (uint64_t nth = 1; nth <= 40; nth++) {
            wal_memfs *fs, *after;
            REQUIRE_OK(wal_memfs_new(&fs));
            wal *w;
            model m = {0};
            REQUIRE_OK(open_log(fs, WAL_FSYNC, 700, &w, &m));
            wal_memfs_fault(fs, what, nth, EIO, (int)(nth & 1), 0);
            uint32_t acked = 0;
            for (uint32_t i = 0; i < 30; i++) {
                if (put(w, i, i * 3 + 1, 20 + i % 50))
                    break;
                acked = i + 1;
            }
            REQUIRE_OK(wal_memfs_crash(fs, -1.0, nth, &after));
            wal_close(w);
            wal_memfs_free(fs);
            int rc = open_log(after, WAL_FSYNC, 700, &w, &m);
            CHECK_OK(rc);
            if (!rc) {
                CHECK(m.n >= acked);
                CHECK(check_prefix(&m, m.n));
                wal_close(w);
            }
            model_free(&m);
            wal_memfs_free(after);
            if (test_failed())
                return;
        }
}

typedef struct gc_arg { wal *w; uint32_t base, n; int rc; } gc_arg;

static void *gc_writer(void *p)
{
    gc_arg *a = p;
    for (uint32_t i = 0; i < a->n && !a->rc; i++)
        a->rc = put(a->w, a->base + i, (a->base + i) * 3 + 1, 30);
    return NULL;
}

/* run_writers: T threads append PER records each to a fresh FSYNC log with
 * segments of seg bytes (0 = default), then the log is reopened and every
 * writer's records must come back, in its own order.  *fsyncs gets the count. */
static void run_writers(uint64_t seg, uint64_t *fsyncs)
{
    enum { T = 8, PER = 100 };
    wal_memfs *fs;
    REQUIRE_OK(wal_memfs_new(&fs));
    wal_memfs_slow_fsync(fs, 300);
    wal *w;
    model m = {0};
    REQUIRE_OK(open_log(fs, WAL_FSYNC, seg, &w, &m));
    pthread_t th[T];
    gc_arg args[T];
    for (int t = 0; t < T; t++) {
        args[t] = (gc_arg){w, (uint32_t)t * 1000, PER, 0};
        pthread_create(&th[t], NULL, gc_writer, &args[t]);
    }
    for (int t = 0; t < T; t++) {
        pthread_join(th[t], NULL);
        CHECK_OK(args[t].rc);
    }
    wal_stats st;
    wal_stats_get(w, &st);
    CHECK_EQ(st.appends, T * PER);
    *fsyncs = st.fsyncs;
    REQUIRE_OK(wal_close(w));
    REQUIRE_OK(open_log(fs, WAL_FSYNC, seg, &w, &m));
    CHECK_EQ(m.n, T * PER);
    uint32_t next[T] = {0};
    for (uint32_t i = 0; i < m.n; i++) {
        uint32_t t = m.e[i].key / 1000;
        REQUIRE(t < T);
        CHECK_EQ(m.e[i].key, t * 1000 + next[t]);
        next[t]++;
    }
    wal_close(w);
    model_free(&m);
    wal_memfs_free(fs);
}

TEST(wal_group_commit_shares_fsyncs)
{
    uint64_t fsyncs = 0;
    run_writers(0, &fsyncs);
    /* one fsync per append would be 800; sharing needs far fewer */
    CHECK(fsyncs < 800 / 2);
    printf("    group commit: 800 appends, %" PRIu64 " fsyncs\n", fsyncs);
}

/* A fake cache: the last value of keys 0..K-1 (0 = absent), filled into the
 * checkpoint as one cache. */
typedef struct fake { uint32_t k, *val; } fake;

static int fake_fill(void *arg, wal_ckpt_writer *cw)
{
    fake *f = arg;
    st_cache_config cfg;
    memset(&cfg, 0, sizeof cfg);
    cfg.name = (char *)"c";
    st_update u;
    memset(&u, 0, sizeof u);
    u.kind = ST_UPD_CACHE_CREATE;
    u.cache_id = 42;
    u.cfg = &cfg;
    int rc = wal_ckpt_put(cw, &u);
    for (uint32_t i = 0; !rc && i < f->k; i++) {
        if (!f->val[i])
            continue;
        uint8_t k[5] = {3}, v[9] = {12, 4};
        em_st32(k + 1, i);
        em_st32(v + 5, f->val[i]);
        st_update p;
        memset(&p, 0, sizeof p);
        p.kind = ST_UPD_PUT;
        p.cache_id = 42;
        p.key = k;
        p.klen = sizeof k;
        p.val = v;
        p.vlen = sizeof v;
        rc = wal_ckpt_put(cw, &p);
    }
    return rc;
}

static int seg_count(wal_memfs *fs, int *ckpts)
{
    int n = 0;
    *ckpts = 0;
    char p[64];
    for (int i = 0; i < 200; i++) {
        uint8_t *b;
        size_t l;
        snprintf(p, sizeof p, DIR "/wal-%016x.seg", i);
        n += wal_memfs_file(fs, p, &b, &l) == 0;
        snprintf(p, sizeof p, DIR "/ckpt-%016x.ckpt", i);
        *ckpts += wal_memfs_file(fs, p, &b, &l) == 0;
    }
    return n;
}

TEST(wal_checkpoint_then_replay_equals_live_state)
{
    enum { K = 100 };
    uint32_t val[K] = {0};
    fake f = {K, val};
    wal_memfs *fs;
    REQUIRE_OK(wal_memfs_new(&fs));
    wal *w;
    model m = {0};
    REQUIRE_OK(open_log(fs, WAL_FSYNC, 1024, &w, &m));
    for (uint32_t i = 0; i < 300; i++) {
        uint32_t k = (i * 7) % K;
        REQUIRE_OK(put(w, k, i + 1, 4));
        val[k] = i + 1;
    }
    int ck;
    int before = seg_count(fs, &ck);
    CHECK(before > 3);
    REQUIRE_OK(wal_checkpoint_run(w, fake_fill, &f));
    int after = seg_count(fs, &ck);
    CHECK_EQ(after, 1);                  /* only the segment after P is left */
    CHECK_EQ(ck, 1);
    for (uint32_t i = 300; i < 350; i++) {
        uint32_t k = (i * 11) % K;
        REQUIRE_OK(put(w, k, i + 1, 4));
        val[k] = i + 1;
    }
    REQUIRE_OK(wal_checkpoint_run(w, fake_fill, &f));
    seg_count(fs, &ck);
    CHECK_EQ(ck, 1);                     /* the older checkpoint went */
    for (uint32_t i = 350; i < 400; i++) {
        uint32_t k = (i * 13) % K;
        REQUIRE_OK(put(w, k, i + 1, 4));
        val[k] = i + 1;
    }
    wal_memfs *crashed;
    REQUIRE_OK(wal_memfs_crash(fs, 0.0, 5, &crashed));
    wal_close(w);
    REQUIRE_OK(open_log(crashed, WAL_FSYNC, 1024, &w, &m));
    CHECK_EQ(m.e[0].kind, ST_UPD_CACHE_CREATE);
    uint32_t got[K] = {0};
    for (uint32_t i = 0; i < m.n; i++)
        if (m.e[i].kind == ST_UPD_PUT)
            got[m.e[i].key] = m.e[i].val;
    CHECK_MEM(got, val, sizeof got);
    wal_stats st;
    wal_stats_get(w, &st);
    CHECK_EQ(st.replayed, m.n);
    CHECK_EQ(st.next_lsn, 401);          /* LSNs continue across checkpoints */
    wal_close(w);
    model_free(&m);
    wal_memfs_free(crashed);
    wal_memfs_free(fs);
}

TEST(wal_damaged_checkpoint_refuses_to_start)
{
    uint32_t val[10] = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10};
    fake f = {10, val};
    wal_memfs *fs;
    REQUIRE_OK(wal_memfs_new(&fs));
    wal *w;
    model m = {0};
    REQUIRE_OK(open_log(fs, WAL_FSYNC, 0, &w, &m));
    REQUIRE_OK(write_n(w, 0, 10));
    REQUIRE_OK(wal_checkpoint_run(w, fake_fill, &f));
    wal_close(w);
    const char *ck = DIR "/ckpt-0000000000000001.ckpt";
    uint8_t *p;
    size_t len;
    REQUIRE_OK(wal_memfs_file(fs, ck, &p, &len));
    /* every truncation and a flip in the middle are refused, never half-loaded */
    for (size_t cut = 0; cut < len; cut += 7) {
        wal_memfs *c;
        REQUIRE_OK(wal_memfs_crash(fs, 1.0, 0, &c));
        REQUIRE_OK(wal_memfs_set_len(c, ck, cut));
        CHECK_EQ(open_log(c, WAL_FSYNC, 0, &w, &m), EM_CORRUPT);
        wal_memfs_free(c);
    }
    p[len / 2] ^= 0x10;
    CHECK_EQ(open_log(fs, WAL_FSYNC, 0, &w, &m), EM_CORRUPT);
    model_free(&m);
    wal_memfs_free(fs);
}

TEST(wal_posix_files_round_trip)
{
    char dir[] = "/tmp/ember-wal-test-XXXXXX";
    REQUIRE(mkdtemp(dir) != NULL);
    wal_options o;
    memset(&o, 0, sizeof o);
    o.dir = dir;
    o.mode = WAL_FSYNC;
    o.segment_bytes = 4096;
    wal *w;
    model m = {0};
    REQUIRE_OK(wal_open(&w, &o));
    REQUIRE_OK(wal_replay(w, collect, &m));
    REQUIRE_OK(write_n(w, 0, 200));
    REQUIRE_OK(wal_close(w));
    REQUIRE_OK(wal_open(&w, &o));
    REQUIRE_OK(wal_replay(w, collect, &m));
    CHECK_EQ(m.n, 200);
    CHECK(check_prefix(&m, 200));
    wal_close(w);
    model_free(&m);
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
    CHECK_EQ(system(cmd), 0);
}

/* Power loss in the middle of a checkpoint: the fill callback crashes the
 * file system halfway through writing the snapshot.  The half-written
 * .tmp is never loaded; the previous checkpoint + WAL give the state. */
typedef struct mid_ckpt { fake f; wal_memfs *fs, *crashed; int emitted; } mid_ckpt;

static int crash_mid_fill(void *arg, wal_ckpt_writer *cw)
{
    mid_ckpt *m = arg;
    int rc = fake_fill(&m->f, cw);
    if (!rc && !m->crashed)
        rc = wal_memfs_crash(m->fs, -1.0, 77, &m->crashed);
    return rc;
}

TEST(wal_power_loss_during_checkpoint)
{
    enum { K = 60 };
    uint32_t val[K] = {0};
    wal_memfs *fs;
    REQUIRE_OK(wal_memfs_new(&fs));
    wal *w;
    model m = {0};
    REQUIRE_OK(open_log(fs, WAL_FSYNC, 1024, &w, &m));
    fake f = {K, val};
    for (uint32_t i = 0; i < 200; i++) {
        uint32_t k = (i * 7) % K;
        REQUIRE_OK(put(w, k, i + 1, 4));
        val[k] = i + 1;
        if (i == 100)
            REQUIRE_OK(wal_checkpoint_run(w, fake_fill, &f));
    }
    mid_ckpt mc = {f, fs, NULL, 0};
    REQUIRE_OK(wal_checkpoint_run(w, crash_mid_fill, &mc));
    REQUIRE(mc.crashed);
    wal_close(w);
    REQUIRE_OK(open_log(mc.crashed, WAL_FSYNC, 1024, &w, &m));
    uint32_t got[K] = {0};
    for (uint32_t i = 0; i < m.n; i++)
        if (m.e[i].kind == ST_UPD_PUT)
            got[m.e[i].key] = m.e[i].val;
    CHECK_MEM(got, val, sizeof got);
    wal_close(w);
    model_free(&m);
    wal_memfs_free(mc.crashed);
    wal_memfs_free(fs);
}

/* A crash after the checkpoint's rename but before the old segments were
 * deleted leaves segments the checkpoint already holds: they are skipped,
 * not replayed over it and not mistaken for a gap. */
TEST(wal_leftover_segments_before_a_checkpoint_are_skipped)
{
    uint32_t val[20] = {0};
    fake f = {20, val};
    wal_memfs *fs, *before;
    REQUIRE_OK(wal_memfs_new(&fs));
    wal *w;
    model m = {0};
    REQUIRE_OK(open_log(fs, WAL_FSYNC, 0, &w, &m));
    for (uint32_t i = 0; i < 20; i++) {
        REQUIRE_OK(put(w, i, i + 1, 4));
        val[i] = i + 1;
    }
    REQUIRE_OK(wal_memfs_crash(fs, 1.0, 0, &before));
    REQUIRE_OK(wal_checkpoint_run(w, fake_fill, &f));
    REQUIRE_OK(put(w, 3, 999, 4));
    val[3] = 999;
    wal_close(w);
    uint8_t *p, *q;
    size_t len, qlen;
    REQUIRE(wal_memfs_file(fs, SEG0, &q, &qlen) != 0);      /* deleted */
    REQUIRE_OK(wal_memfs_file(before, SEG0, &p, &len));
    const wal_fileops *ops = wal_memfs_ops(fs);
    int fd;
    REQUIRE_OK(ops->open(ops->ctx, SEG0, WAL_O_WRITE | WAL_O_CREATE, &fd));
    CHECK_EQ(ops->pwrite(ops->ctx, fd, p, len, 0), (int64_t)len);
    ops->close(ops->ctx, fd);
    REQUIRE_OK(open_log(fs, WAL_FSYNC, 0, &w, &m));
    uint32_t got[20] = {0};
    uint32_t puts = 0;
    for (uint32_t i = 0; i < m.n; i++)
        if (m.e[i].kind == ST_UPD_PUT) {
            got[m.e[i].key] = m.e[i].val;
            puts++;
        }
    CHECK_EQ(puts, 21);                  /* 20 from the checkpoint, 1 from the WAL */
    CHECK_MEM(got, val, sizeof got);
    wal_close(w);
    model_free(&m);
    wal_memfs_free(before);
    wal_memfs_free(fs);
}

TEST(wal_failed_checkpoint_leaves_the_log_working)
{
    uint32_t val[10] = {0};
    fake f = {10, val};
    wal_memfs *fs;
    REQUIRE_OK(wal_memfs_new(&fs));
    wal *w;
    model m = {0};
    REQUIRE_OK(open_log(fs, WAL_LOG_ONLY, 0, &w, &m));
    REQUIRE_OK(write_n(w, 0, 10));
    /* fsyncs in this checkpoint: the log's flush, the old segment's at the
     * roll, the new segment's, then the checkpoint file's - fail that one */
    wal_memfs_fault(fs, WAL_FAULT_FSYNC, 4, EIO, 0, 0);
    CHECK_EQ(wal_checkpoint_run(w, fake_fill, &f), -EIO);
    CHECK_EQ(wal_error(w), 0);
    REQUIRE_OK(write_n(w, 10, 5));
    REQUIRE_OK(wal_close(w));
    int ck;
    seg_count(fs, &ck);
    CHECK_EQ(ck, 0);
    REQUIRE_OK(open_log(fs, WAL_LOG_ONLY, 0, &w, &m));
    CHECK_EQ(m.n, 15);
    CHECK(check_prefix(&m, 15));
    wal_close(w);
    model_free(&m);
    wal_memfs_free(fs);
}

typedef struct dw_arg { wal *w; uint32_t base; int rc, waits; } dw_arg;

/* A server-like thread: a "pass" appends several records without waiting,
 * then one wal_commit_wait acknowledges them all. */
static void *deferred_writer(void *p)
{
    dw_arg *a = p;
    for (uint32_t pass = 0; pass < 20 && !a->rc; pass++) {
        for (uint32_t i = 0; i < 5 && !a->rc; i++) {
            uint32_t k = a->base + pass * 5 + i;
            a->rc = put(a->w, k, k * 3 + 1, 30);
        }
        if (!a->rc)
            a->rc = wal_commit_wait(a->w);
        a->waits++;
    }
    return NULL;
}

TEST(wal_deferred_sync_commit_wait_covers_a_pass)
{
    enum { T = 4 };
    wal_memfs *fs, *after;
    REQUIRE_OK(wal_memfs_new(&fs));
    wal_memfs_slow_fsync(fs, 200);
    wal_options o;
    memset(&o, 0, sizeof o);
    o.dir = DIR;
    o.mode = WAL_FSYNC;
    o.deferred_sync = 1;
    o.ops = wal_memfs_ops(fs);
    wal *w;
    model m = {0};
    REQUIRE_OK(wal_open(&w, &o));
    REQUIRE_OK(wal_replay(w, NULL, NULL));
    /* before the wait nothing is promised; after it everything is */
    REQUIRE_OK(put(w, 900000, 1, 8));
    wal_stats st;
    wal_stats_get(w, &st);
    CHECK_EQ(st.fsyncs, 0);
    REQUIRE_OK(wal_commit_wait(w));
    wal_stats_get(w, &st);
    CHECK_EQ(st.fsyncs, 1);
    CHECK_OK(wal_commit_wait(w));        /* nothing new: no fsync */
    wal_stats_get(w, &st);
    CHECK_EQ(st.fsyncs, 1);
    pthread_t th[T];
    dw_arg args[T];
    for (int t = 0; t < T; t++) {
        args[t] = (dw_arg){w, (uint32_t)t * 1000, 0, 0};
        pthread_create(&th[t], NULL, deferred_writer, &args[t]);
    }
    for (int t = 0; t < T; t++) {
        pthread_join(th[t], NULL);
        CHECK_OK(args[t].rc);
    }
    wal_stats_get(w, &st);
    CHECK(st.fsyncs <= 1 + T * 20);      /* at most one per pass, never one per record */
    REQUIRE_OK(wal_memfs_crash(fs, 0.0, 3, &after));
    wal_close(w);
    o.ops = wal_memfs_ops(after);
    REQUIRE_OK(wal_open(&w, &o));
    REQUIRE_OK(wal_replay(w, collect, &m));
    CHECK_EQ(m.n, 1 + T * 100);          /* every waited-for record survived */
    /* a failed fsync fails the wait, and the log */
    wal_memfs_fault(after, WAL_FAULT_FSYNC, 1, EIO, 0, 0);
    REQUIRE_OK(put(w, 5, 16, 8));
    CHECK_EQ(wal_commit_wait(w), -EIO);
    CHECK_EQ(put(w, 6, 19, 8), EM_READONLY);
    wal_close(w);
    model_free(&m);
    wal_memfs_free(after);
    wal_memfs_free(fs);
}

/* Segments rolled while another thread's fsync runs: every record keeps a
 * unique LSN and every segment header matches its first record, so the log
 * reopens (a roll used to release the lock with the record's LSN taken). */
TEST(wal_roll_during_group_commit_keeps_lsns_in_sequence)
{
    uint64_t fsyncs = 0;
    run_writers(4096, &fsyncs);
}
