/* test_oom_wal.c - allocation failures during WAL recovery (reliability.md
 * §3 "compound failures", goal B4): a log with a checkpoint and segment
 * records is built on the in-memory file system, then wal_open + wal_recover
 * run with the 1st, 2nd, ... Nth allocation failing until one run completes.
 * Each failed run must return an error, leak nothing, and leave the files
 * intact: a second, unhooked recovery of the same files must find every
 * acknowledged write.  A run that succeeds must have recovered everything.
 */
#include "test.h"

#include "store/store.h"
#include "util/buf.h"
#include "util/err.h"
#include "util/hash.h"
#include "util/mem.h"
#include "wal/wal.h"

#include <stdlib.h>

#define NKEYS 60
#define REMOVED_KEY 3

static int32_t cid_c(void) { return em_hash_java_str((const uint8_t *)"c", 1); }

static size_t val_of(uint8_t *v, int i)
{
    char s[32];
    int n = snprintf(s, sizeof s, "value-%d", i);
    v[0] = 9;
    em_st32(v + 1, (uint32_t)n);
    memcpy(v + 5, s, (size_t)n);
    return 5 + (size_t)n;
}

static void opts(wal_options *o, wal_memfs *fs)
{
    memset(o, 0, sizeof *o);
    o->dir = "/w";
    o->mode = WAL_FSYNC;
    o->segment_bytes = 1024;        /* several segments */
    o->ops = wal_memfs_ops(fs);
}

/* build_log writes: cache "c", keys 0..NKEYS/2-1, a checkpoint, the rest of
 * the keys (over several segments), then a remove. */
static int build_log(wal_memfs *fs)
{
    wal_options o;
    opts(&o, fs);
    wal *w = NULL;
    st_store *st = NULL;
    st_cache *c = NULL;
    int rc = wal_open(&w, &o);
    if (!rc) rc = st_open(&st, NULL);
    if (!rc) rc = wal_recover(w, st);
    if (!rc) rc = wal_attach(w, st);
    if (!rc) {
        st_cache_config cfg;
        st_cache_config_init(&cfg);
        cfg.name = em_strndup("c", 1);
        rc = cfg.name ? st_cache_create(st, &cfg, &c) : EM_NOMEM;
        st_cache_config_free(&cfg);
    }
    for (int i = 0; i < NKEYS && !rc; i++) {
        uint8_t k[5], v[32];
        k[0] = 3;
        em_st32(k + 1, (uint32_t)i);
        size_t vl = val_of(v, i);
        rc = st_put(c, NULL, k, 5, v, vl);
        if (!rc && i == NKEYS / 2)
            rc = wal_checkpoint(w, st);
    }
    if (!rc) {
        uint8_t k[5] = {3, REMOVED_KEY, 0, 0, 0};
        int removed;
        rc = st_remove(c, NULL, k, 5, &removed);
    }
    int rc2 = w ? wal_close(w) : 0;
    if (st)
        st_close(st);
    return rc ? rc : rc2;
}

/* check_store: 0 if st holds exactly what build_log acknowledged. */
static int check_store(st_store *st)
{
    st_cache *c = st_cache_find(st, cid_c());
    if (!c)
        return -1;
    em_buf out = EM_BUF_INIT;
    int bad = 0;
    for (int i = 0; i < NKEYS && !bad; i++) {
        uint8_t k[5], v[32];
        k[0] = 3;
        em_st32(k + 1, (uint32_t)i);
        size_t vl = val_of(v, i);
        int found = 0;
        em_buf_reset(&out);
        if (st_get(c, NULL, k, 5, &out, &found))
            bad = 1;
        else if (i == REMOVED_KEY)
            bad = found;
        else
            bad = !found || out.len != vl || memcmp(out.p, v, vl) != 0;
        if (bad)
            bad = i + 1;
    }
    em_buf_free(&out);
    return bad;
}

/* recover_into: wal_open + wal_recover + wal_close into a new store; with
 * fail_n > 0 the fail_n-th allocation of wal_open + wal_recover fails
 * (*injected says whether it did).  The content check runs unhooked. */
static int recover_into(wal_memfs *fs, int *content, int fail_n, int *injected)
{
    wal_options o;
    opts(&o, fs);
    wal *w = NULL;
    st_store *st = NULL;
    int rc = st_open(&st, NULL);
    uint64_t f0 = em_mem_failures();
    if (fail_n > 0)
        em_mem_fail_after((uint64_t)fail_n, 0);
    if (!rc) rc = wal_open(&w, &o);
    if (!rc) rc = wal_recover(w, st);
    em_mem_fail_after(0, 0);
    if (injected)
        *injected = em_mem_failures() > f0;
    if (content)
        *content = rc ? -1 : check_store(st);
    if (w) {
        int rc2 = wal_close(w);
        if (!rc)
            rc = rc2;
    }
    if (st)
        st_close(st);
    return rc;
}

TEST(oom_wal_recovery)
{
    int done = 0, runs = 0, errors = 0;
    for (int n = 1; n <= 20000 && !done; n++) {
        int64_t b0 = em_mem_live_bytes(), k0 = em_mem_live_blocks();
        wal_memfs *fs = NULL;
        REQUIRE_OK(wal_memfs_new(&fs));
        int rc = build_log(fs);
        if (rc) {
            test_fail(__FILE__, __LINE__, "building the log: %s", em_errname(rc));
            wal_memfs_free(fs);
            return;
        }
        int content = 0, injected = 0;
        rc = recover_into(fs, &content, n, &injected);
        runs++;
        if (!injected) {
            done = 1;
            CHECK_OK(rc);
            if (content)
                test_fail(__FILE__, __LINE__, "clean recovery: key %d wrong", content - 1);
        } else if (rc == 0) {
            /* the failure was absorbed: the result must still be complete */
            if (content)
                test_fail(__FILE__, __LINE__, "allocation %d failed, recovery said OK but key %d"
                          " is wrong", n, content - 1);
        } else {
            errors++;
        }
        /* whatever happened, the files must still hold every write */
        int again = 0;
        int rc2 = recover_into(fs, &again, 0, NULL);
        if (rc2 || again)
            test_fail(__FILE__, __LINE__, "after allocation %d failed during recovery (%s), a"
                      " second recovery gives %s, key check %d", n, em_errname(rc),
                      em_errname(rc2), again);
        wal_memfs_free(fs);
        int64_t db = em_mem_live_bytes() - b0, dk = em_mem_live_blocks() - k0;
        if (db || dk)
            test_fail(__FILE__, __LINE__, "allocation %d failed during recovery: leak of %lld"
                      " bytes in %lld blocks", n, (long long)db, (long long)dk);
        if (test_failed())
            return;
    }
    CHECK(done);
    if (getenv("EM_OOM_VERBOSE"))
        printf("    wal recovery: %d runs, %d ended in an error\n", runs, errors);
}
