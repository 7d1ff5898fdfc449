/* test_wal_roll.c - segment rolls and checkpoints while writers keep
 * appending, in every WAL mode.  A checkpoint releases the log's lock while
 * it fsyncs; writes made in that window must land in the log in LSN order,
 * so every segment header names its first record's LSN and recovery (after
 * a clean close, a process crash or a power loss) ends in the live state -
 * or, where the mode allows losing a tail, at least starts.  The window is
 * hit deterministically: a file layer over the in-memory one runs a put from
 * inside the fsync the checkpoint waits on. */
#include "test.h"
#include "wal_env.h"

#include "store/store.h"
#include "util/err.h"
#include "util/mem.h"
#include "wal/wal.h"

#include <pthread.h>
#include <stdio.h>

static size_t ikey(uint8_t *b, int32_t v) { b[0] = 3; em_st32(b + 1, (uint32_t)v); return 5; }
static size_t sval(uint8_t *b, int32_t k, int32_t gen)
{
    int n = snprintf((char *)b + 5, 48, "value-%d-%d", k, gen);
    b[0] = 9;
    em_st32(b + 1, (uint32_t)n);
    return 5 + (size_t)n;
}

static int put(st_cache *c, int32_t k, int32_t gen)
{
    uint8_t kb[5], vb[64];
    return st_put(c, NULL, kb, ikey(kb, k), vb, sval(vb, k, gen));
}

/* ---- a file layer that runs a hook inside one fsync -------------------- */

typedef struct hook_fs {
    wal_fileops ops;
    const wal_fileops *base;
    /* armed > 0: the armed-th fsync from now runs fn(arg) after syncing */
    int armed;
    void (*fn)(void *arg);
    void *arg;
    int fired;
} hook_fs;

#define BASE(h) ((hook_fs *)(h))->base
static int h_open(void *c, const char *p, int f, int *fd) { return BASE(c)->open(BASE(c)->ctx, p, f, fd); }
static int h_close(void *c, int fd) { return BASE(c)->close(BASE(c)->ctx, fd); }
static int64_t h_pread(void *c, int fd, void *p, size_t n, uint64_t o) { return BASE(c)->pread(BASE(c)->ctx, fd, p, n, o); }
static int64_t h_pwrite(void *c, int fd, const void *p, size_t n, uint64_t o) { return BASE(c)->pwrite(BASE(c)->ctx, fd, p, n, o); }
static int h_ftruncate(void *c, int fd, uint64_t s) { return BASE(c)->ftruncate(BASE(c)->ctx, fd, s); }
static int h_size(void *c, int fd, uint64_t *s) { return BASE(c)->size(BASE(c)->ctx, fd, s); }
static int h_rename(void *c, const char *a, const char *b) { return BASE(c)->rename(BASE(c)->ctx, a, b); }
static int h_unlink(void *c, const char *p) { return BASE(c)->unlink(BASE(c)->ctx, p); }
static int h_mkdir(void *c, const char *p) { return BASE(c)->mkdir(BASE(c)->ctx, p); }
static int h_syncdir(void *c, const char *p) { return BASE(c)->syncdir(BASE(c)->ctx, p); }
static int h_list(void *c, const char *d, void (*fn)(void *, const char *), void *a) { return BASE(c)->list(BASE(c)->ctx, d, fn, a); }

static int h_fsync(void *c, int fd)
{
    hook_fs *h = c;
    int rc = h->base->fsync(h->base->ctx, fd);
    if (h->armed > 0 && --h->armed == 0) {
        h->fired++;
        h->fn(h->arg);
    }
    return rc;
}

static void hook_init(hook_fs *h, wal_memfs *fs)
{
    memset(h, 0, sizeof *h);
    h->base = wal_memfs_ops(fs);
    h->ops = (wal_fileops){h, h_open, h_close, h_pread, h_pwrite, h_fsync, h_ftruncate,
                           h_size, h_rename, h_unlink, h_mkdir, h_syncdir, h_list};
}

/* ---- the on-disk invariant ---------------------------------------------- */

typedef struct seg_names { uint64_t no[256]; int n; } seg_names;

static void name_cb(void *arg, const char *name)
{
    seg_names *s = arg;
    int is_ckpt;
    uint64_t no;
    if (wal_name_parse(name, &is_ckpt, &no) == 0 && !is_ckpt && s->n < 256)
        s->no[s->n++] = no;
}

static int first_cb(void *arg, size_t off, const wal_frame *f)
{
    (void)off;
    *(uint64_t *)arg = f->lsn;
    return 1;                           /* the first frame is all we need */
}

/* headers_match: every segment's header names the LSN of its first record. */
static int headers_match(wal_memfs *fs)
{
    const wal_fileops *ops = wal_memfs_ops(fs);
    seg_names s;
    s.n = 0;
    ops->list(ops->ctx, WE_DIR, name_cb, &s);
    em_buf b = EM_BUF_INIT;
    int ok = 1;
    for (int i = 0; i < s.n && ok; i++) {
        char path[64];
        snprintf(path, sizeof path, WE_DIR "/wal-%016" PRIx64 ".seg", s.no[i]);
        wal_seg_hdr h;
        uint64_t first = 0;
        wal_scan_res r;
        if (wal_read_file(ops, path, &b) || wal_seg_hdr_parse(b.p, b.len, &h)) {
            ok = 0;
            break;
        }
        wal_scan(b.p, b.len, WAL_SEG_HDR, 0, first_cb, &first, &r);
        if (first && first != h.first_lsn) {
            fprintf(stderr, "    %s: header first LSN %" PRIu64 ", first record %" PRIu64 "\n",
                    path, h.first_lsn, first);
            ok = 0;
        }
    }
    em_buf_free(&b);
    return ok;
}

/* same_keys: keys lo..hi-1 have the same value (or absence) in a and b. */
static int same_keys(st_cache *a, st_cache *b, int32_t lo, int32_t hi)
{
    em_buf va = EM_BUF_INIT, vb = EM_BUF_INIT;
    int same = 1;
    for (int32_t k = lo; k < hi && same; k++) {
        uint8_t kb[5];
        int fa = -1, fb = -2;
        em_buf_reset(&va);
        em_buf_reset(&vb);
        if (st_get(a, NULL, kb, ikey(kb, k), &va, &fa) || st_get(b, NULL, kb, ikey(kb, k), &vb, &fb) ||
            fa != fb || va.len != vb.len || (va.len && memcmp(va.p, vb.p, va.len))) {
            fprintf(stderr, "    key %d differs after recovery\n", k);
            same = 0;
        }
    }
    em_buf_free(&va);
    em_buf_free(&vb);
    return same;
}

/* ---- the scenario ------------------------------------------------------- */

typedef struct window_put { st_cache *c; int32_t next; int rc; } window_put;

/* Runs inside the checkpoint's fsync, with the log's lock released. */
static void put_in_window(void *arg)
{
    window_put *p = arg;
    for (int i = 0; i < 3 && !p->rc; i++, p->next++)
        p->rc = put(p->c, p->next, 5);
}

static int open_mode(hook_fs *h, wal_mode mode, st_store *s, wal **w)
{
    wal_options o;
    memset(&o, 0, sizeof o);
    o.mode = mode;
    o.segment_bytes = 4096;
    o.flush_ms = 3600 * 1000;           /* the background flusher stays out of the way */
    o.deferred_sync = mode == WAL_FSYNC;   /* as emberd: appends never wait in the hook */
    o.dir = WE_DIR;
    o.ops = &h->ops;
    int rc = wal_open(w, &o);
    if (rc)
        return rc;
    if ((rc = wal_recover(*w, s)) == 0)
        rc = wal_attach(*w, s);
    if (rc) {
        wal_close(*w);
        *w = NULL;
    }
    return rc;
}

/* ckpt_window: writes, checkpoints with writes inside the checkpoint's
 * fsync, writes across several segment rolls, then recovers (after a clean
 * close, or from what a process crash leaves: every written byte, no
 * unwritten ones) and compares with the live state. */
static void ckpt_window(wal_mode mode, int crash, uint64_t seed)
{
    wal_memfs *fs;
    REQUIRE_OK(wal_memfs_new(&fs));
    hook_fs h;
    hook_init(&h, fs);
    st_store *a = we_new_store(), *b = we_new_store();
    REQUIRE(a && b);
    wal *w;
    REQUIRE_OK(open_mode(&h, mode, a, &w));
    st_cache_config cfg;
    st_cache_config_init(&cfg);
    cfg.name = (char *)"win";
    cfg.partitions = 8;
    st_cache *c = NULL;
    REQUIRE_OK(st_cache_create(a, &cfg, &c));
    window_put wp = {c, 10000, 0};
    h.fn = put_in_window;
    h.arg = &wp;
    for (int round = 0; round < 4; round++) {
        for (int32_t k = 0; k < 60; k++)
            CHECK_OK(put(c, k + round * 7, round));
        h.armed = 1;
        CHECK_OK(wal_checkpoint(w, a));
        h.armed = 0;
        CHECK_OK(wp.rc);
    }
    CHECK_EQ(h.fired, 4);
    for (int32_t k = 0; k < 200; k++)   /* several rolls of 4 KiB segments */
        CHECK_OK(put(c, k, 9));
    if (mode == WAL_FSYNC)
        CHECK_OK(wal_commit_wait(w));
    wal_memfs *disk = fs, *after = NULL;
    if (crash) {
        /* 1, a process crash: what was written stays (the page cache), the
         * buffered modes lose what they had not written yet; 2, a power
         * loss: unsynced bytes survive in random amounts per file */
        REQUIRE_OK(wal_memfs_crash(fs, crash == 1 ? 1.0 : -1.0, seed, &after));
        disk = after;
    }
    CHECK_OK(wal_close(w));
    CHECK(headers_match(disk));
    hook_fs h2;
    hook_init(&h2, disk);
    REQUIRE_OK(open_mode(&h2, mode, b, &w));
    st_cache *r = st_cache_find(b, st_cache_id(c));
    REQUIRE(r);
    /* everything acknowledged is back, with its last value */
    if (!crash || mode == WAL_FSYNC || (mode == WAL_LOG_ONLY && crash == 1))
        CHECK(same_keys(c, r, 0, 200) && same_keys(c, r, 10000, wp.next));
    CHECK_OK(wal_close(w));
    st_close(a);
    st_close(b);
    if (after)
        wal_memfs_free(after);
    wal_memfs_free(fs);
}

TEST(wal_roll_ckpt_window_background) { ckpt_window(WAL_BACKGROUND, 0, 1); }
TEST(wal_roll_ckpt_window_background_crash) { ckpt_window(WAL_BACKGROUND, 1, 1); }
TEST(wal_roll_ckpt_window_none) { ckpt_window(WAL_NONE, 0, 1); }
TEST(wal_roll_ckpt_window_none_crash) { ckpt_window(WAL_NONE, 1, 1); }
TEST(wal_roll_ckpt_window_log_only) { ckpt_window(WAL_LOG_ONLY, 0, 1); }
TEST(wal_roll_ckpt_window_log_only_crash) { ckpt_window(WAL_LOG_ONLY, 1, 1); }
TEST(wal_roll_ckpt_window_fsync) { ckpt_window(WAL_FSYNC, 0, 1); }
TEST(wal_roll_ckpt_window_fsync_crash) { ckpt_window(WAL_FSYNC, 1, 1); }
TEST(wal_roll_ckpt_window_power_loss_all_modes)
{
    for (uint64_t seed = 1; seed <= 16 && !test_failed(); seed++)
        for (int m = WAL_FSYNC; m <= WAL_NONE && !test_failed(); m++)
            ckpt_window((wal_mode)m, 2, seed);
}
