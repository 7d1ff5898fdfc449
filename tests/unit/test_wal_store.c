/* test_wal_store.c - the WAL with the real store (src/wal/wal_store.c):
 * every update goes through the observer, recovery through st_apply equals
 * the live state, checkpoints taken under concurrent writers, and a failed
 * WAL write fails the store operation. */
#include "test.h"
#include "wal_env.h"

#include "store/store.h"
#include "util/err.h"
#include "util/mem.h"
#include "wal/wal.h"

#include <errno.h>
#include <pthread.h>


static size_t ikey(uint8_t *b, int32_t v) { b[0] = 3; em_st32(b + 1, (uint32_t)v); return 5; }
static size_t sval(uint8_t *b, int32_t k, int32_t gen)
{
    int n = snprintf((char *)b + 5, 48, "value-%d-%d", k, gen);
    b[0] = 9;
    em_st32(b + 1, (uint32_t)n);
    return 5 + (size_t)n;
}

static int open_wal(wal_memfs *fs, wal_mode mode, uint64_t seg, st_store *s, wal **w)
{
    wal_options o;
    memset(&o, 0, sizeof o);
    o.mode = mode;
    o.segment_bytes = seg;
    return we_open(fs, &o, s, w);
}

static st_cache *make_cache(st_store *s, const char *name, uint32_t parts, int32_t backups)
{
    st_cache_config cfg;
    st_cache_config_init(&cfg);
    cfg.name = (char *)name;
    cfg.partitions = parts;
    cfg.backups = backups;
    st_cache *c = NULL;
    return st_cache_create(s, &cfg, &c) == 0 ? c : NULL;
}

static int put(st_cache *c, int32_t k, int32_t gen)
{
    uint8_t kb[5], vb[64];
    return st_put(c, NULL, kb, ikey(kb, k), vb, sval(vb, k, gen));
}

/* same_cache: every key 0..n-1 has the same value (or absence) in a and b. */
static int same_cache(st_cache *a, st_cache *b, int32_t n)
{
    em_buf va = EM_BUF_INIT, vb = EM_BUF_INIT;
    int same = 1;
    for (int32_t k = 0; k < n && same; k++) {
        uint8_t kb[5];
        int fa, fb;
        em_buf_reset(&va);
        em_buf_reset(&vb);
        if (st_get(a, NULL, kb, ikey(kb, k), &va, &fa) || st_get(b, NULL, kb, ikey(kb, k), &vb, &fb))
            same = 0;
        else if (fa != fb || va.len != vb.len || (va.len && memcmp(va.p, vb.p, va.len)))
            same = 0;
    }
    int64_t sa = -1, sb = -2;
    st_size(a, 0, &sa);
    st_size(b, 0, &sb);
    em_buf_free(&va);
    em_buf_free(&vb);
    return same && sa == sb;
}

TEST(wal_store_recovery_equals_live_state)
{
    wal_memfs *fs;
    REQUIRE_OK(wal_memfs_new(&fs));
    st_store *a = we_new_store(), *b = we_new_store();
    REQUIRE(a && b);
    wal *w;
    REQUIRE_OK(open_wal(fs, WAL_FSYNC, 4096, a, &w));
    st_cache *c1 = make_cache(a, "people", 64, 2), *c2 = make_cache(a, "cleared", 8, 0),
             *c3 = make_cache(a, "dropped", 8, 0);
    REQUIRE(c1 && c2 && c3);
    for (int32_t k = 0; k < 500; k++) {
        CHECK_OK(put(c1, k, 1));
        CHECK_OK(put(c2, k, 1));
        CHECK_OK(put(c3, k, 1));
    }
    for (int32_t k = 0; k < 500; k += 7) {
        uint8_t kb[5];
        int removed;
        CHECK_OK(st_remove(c1, NULL, kb, ikey(kb, k), &removed));
    }
    for (int32_t k = 0; k < 500; k += 3)
        CHECK_OK(put(c1, k, 2));
    st_slice ks[3], vs[3];
    uint8_t kbuf[3][5], vbuf[3][64];
    for (int i = 0; i < 3; i++) {
        ks[i] = (st_slice){kbuf[i], ikey(kbuf[i], 1000 + i)};
        vs[i] = (st_slice){vbuf[i], sval(vbuf[i], 1000 + i, 3)};
    }
    CHECK_OK(st_put_all(c1, NULL, ks, vs, 3));
    CHECK_OK(st_clear(c2));
    CHECK_OK(put(c2, 5, 9));
    CHECK_OK(st_cache_destroy(a, st_cache_id(c3)));
    REQUIRE_OK(wal_close(w));

    REQUIRE_OK(open_wal(fs, WAL_FSYNC, 4096, b, &w));
    st_cache *r1 = st_cache_find(b, st_cache_id(c1)), *r2 = st_cache_find(b, st_cache_id(c2));
    REQUIRE(r1 && r2);
    CHECK(st_cache_find(b, st_cache_id(c3)) == NULL);
    CHECK(same_cache(c1, r1, 1100));
    CHECK(same_cache(c2, r2, 600));
    CHECK_EQ(st_cache_cfg(r1)->backups, 2);
    CHECK_EQ(st_cache_cfg(r1)->partitions, 64);
    CHECK(strcmp(st_cache_cfg(r1)->name, "people") == 0);
    wal_close(w);
    st_close(a);
    st_close(b);
    wal_memfs_free(fs);
}

typedef struct writer_arg { st_cache *c; int32_t base; int n; int rc; } writer_arg;

static void *writer(void *p)
{
    writer_arg *a = p;
    uint64_t s = (uint64_t)a->base * 2654435761u + 1;
    for (int i = 0; i < a->n && !a->rc; i++) {
        s ^= s << 13; s ^= s >> 7; s ^= s << 17;
        int32_t k = a->base + (int32_t)(s % 400);
        if (s % 5 == 0) {
            uint8_t kb[5];
            int removed;
            a->rc = st_remove(a->c, NULL, kb, ikey(kb, k), &removed);
        } else {
            a->rc = put(a->c, k, i);
        }
    }
    return NULL;
}

TEST(wal_store_checkpoints_under_concurrent_writers_then_power_loss)
{
    wal_memfs *fs, *after;
    REQUIRE_OK(wal_memfs_new(&fs));
    st_store *a = we_new_store(), *b = we_new_store();
    REQUIRE(a && b);
    wal *w;
    REQUIRE_OK(open_wal(fs, WAL_FSYNC, 16384, a, &w));
    st_cache *c = make_cache(a, "hot", 32, 0);
    REQUIRE(c);
    enum { T = 3 };
    pthread_t th[T];
    writer_arg args[T];
    for (int t = 0; t < T; t++) {
        args[t] = (writer_arg){c, t * 400, 3000, 0};
        pthread_create(&th[t], NULL, writer, &args[t]);
    }
    int ckpts = 0;
    for (int i = 0; i < 4; i++)
        ckpts += wal_checkpoint(w, a) == 0;
    for (int t = 0; t < T; t++) {
        pthread_join(th[t], NULL);
        CHECK_OK(args[t].rc);
    }
    CHECK_EQ(ckpts, 4);
    REQUIRE_OK(wal_checkpoint(w, a));
    for (int32_t k = 0; k < 50; k++)
        CHECK_OK(put(c, k, 77));
    /* FSYNC: every acknowledged write survives losing all unsynced bytes */
    REQUIRE_OK(wal_memfs_crash(fs, 0.0, 9, &after));
    wal_close(w);
    wal_stats st;
    REQUIRE_OK(open_wal(after, WAL_FSYNC, 16384, b, &w));
    wal_stats_get(w, &st);
    CHECK(st.replayed > 50);
    st_cache *r = st_cache_find(b, st_cache_id(c));
    REQUIRE(r);
    CHECK(same_cache(c, r, T * 400));
    wal_close(w);
    st_close(a);
    st_close(b);
    wal_memfs_free(after);
    wal_memfs_free(fs);
}

TEST(wal_store_failed_fsync_fails_the_operation)
{
    wal_memfs *fs;
    REQUIRE_OK(wal_memfs_new(&fs));
    st_store *a = we_new_store();
    REQUIRE(a);
    wal *w;
    REQUIRE_OK(open_wal(fs, WAL_FSYNC, 0, a, &w));
    st_cache *c = make_cache(a, "c", 16, 0);
    REQUIRE(c);
    CHECK_OK(put(c, 1, 1));
    wal_memfs_fault(fs, WAL_FAULT_FSYNC, 1, EIO, 0, 0);
    CHECK_EQ(put(c, 2, 1), -EIO);
    CHECK_EQ(put(c, 3, 1), EM_READONLY);
    CHECK(make_cache(a, "d", 16, 0) == NULL);
    /* reads still work; the failed writes were not applied */
    uint8_t kb[5];
    int found = -1;
    CHECK_OK(st_contains(c, NULL, kb, ikey(kb, 1), &found));
    CHECK_EQ(found, 1);
    CHECK_OK(st_contains(c, NULL, kb, ikey(kb, 2), &found));
    CHECK_EQ(found, 0);
    CHECK_EQ(wal_close(w), -EIO);
    st_close(a);
    wal_memfs_free(fs);
}

TEST(wal_store_expiry_survives_recovery)
{
    wal_memfs *fs;
    REQUIRE_OK(wal_memfs_new(&fs));
    st_store *a = we_new_store(), *b = we_new_store();
    REQUIRE(a && b);
    wal *w;
    REQUIRE_OK(open_wal(fs, WAL_LOG_ONLY, 0, a, &w));
    st_cache *c = make_cache(a, "ttl", 8, 0);
    REQUIRE(c);
    st_expiry ex = {1, -1, -1};          /* expires 1 ms after creation */
    st_opctx o = {&ex, NULL};
    uint8_t kb[5], vb[64];
    CHECK_OK(st_put(c, &o, kb, ikey(kb, 1), vb, sval(vb, 1, 1)));
    CHECK_OK(put(c, 2, 1));
    REQUIRE_OK(wal_close(w));
    struct timespec ts = {0, 20 * 1000000L};
    nanosleep(&ts, NULL);
    REQUIRE_OK(open_wal(fs, WAL_LOG_ONLY, 0, b, &w));
    st_cache *r = st_cache_find(b, st_cache_id(c));
    REQUIRE(r);
    int found = -1;
    CHECK_OK(st_contains(r, NULL, kb, ikey(kb, 1), &found));
    CHECK_EQ(found, 0);                  /* its deadline passed while down */
    CHECK_OK(st_contains(r, NULL, kb, ikey(kb, 2), &found));
    CHECK_EQ(found, 1);
    wal_close(w);
    st_close(a);
    st_close(b);
    wal_memfs_free(fs);
}

/* A cache's query entities changed after creation (SQL DDL) come back after
 * recovery, from the log and from a checkpoint taken after the change; a
 * later change logged after that checkpoint wins. */
TEST(wal_store_cache_config_change_recovers)
{
    wal_memfs *fs;
    REQUIRE_OK(wal_memfs_new(&fs));
    st_store *a = we_new_store(), *b = we_new_store(), *c = we_new_store();
    REQUIRE(a && b && c);
    wal *w;
    REQUIRE_OK(open_wal(fs, WAL_FSYNC, 4096, a, &w));
    st_cache *ca = make_cache(a, "tables", 16, 0);
    REQUIRE(ca);
    static const uint8_t qe1[] = {1, 0, 0, 0, 0xAA}, qe2[] = {1, 0, 0, 0, 0xBB, 0xCC};
    REQUIRE_OK(st_cache_set_qe(ca, qe1, sizeof qe1));
    CHECK_OK(put(ca, 1, 1));
    REQUIRE_OK(wal_close(w));
    REQUIRE_OK(open_wal(fs, WAL_FSYNC, 4096, b, &w));
    st_cache *rb = st_cache_find(b, st_cache_id(ca));
    REQUIRE(rb);
    st_cache_config cfg;
    REQUIRE_OK(st_cache_cfg_copy(rb, &cfg));
    CHECK(cfg.query_entities_len == sizeof qe1 && !memcmp(cfg.query_entities, qe1, sizeof qe1));
    st_cache_config_free(&cfg);
    /* checkpoint holding qe1, then qe2 in the log after it */
    REQUIRE_OK(wal_checkpoint(w, b));
    REQUIRE_OK(st_cache_set_qe(rb, qe2, sizeof qe2));
    REQUIRE_OK(wal_close(w));
    REQUIRE_OK(open_wal(fs, WAL_FSYNC, 4096, c, &w));
    st_cache *rcc = st_cache_find(c, st_cache_id(ca));
    REQUIRE(rcc);
    REQUIRE_OK(st_cache_cfg_copy(rcc, &cfg));
    CHECK(cfg.query_entities_len == sizeof qe2 && !memcmp(cfg.query_entities, qe2, sizeof qe2));
    CHECK_EQ(cfg.partitions, 16);
    st_cache_config_free(&cfg);
    CHECK(same_cache(ca, rcc, 10));
    wal_close(w);
    st_close(a);
    st_close(b);
    st_close(c);
    wal_memfs_free(fs);
}
