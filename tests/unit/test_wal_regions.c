/* test_wal_regions.c - persistence per data region (src/wal/wal_store.c):
 * only persistent regions are logged and checkpointed, and after a failed
 * fsync (the fault-injecting wal_memfs of src/wal/wal_file.c) persistent
 * regions refuse writes while reads and memory-only regions keep working;
 * wal_commit_wait reports the failure once, to the writes that waited. */
#include "test.h"
#include "wal_env.h"

#include "store/store.h"
#include "util/err.h"
#include "wal/wal.h"

#include <errno.h>
#include <string.h>


static size_t ikey(uint8_t *b, int32_t v) { b[0] = 3; em_st32(b + 1, (uint32_t)v); return 5; }

static int put(st_cache *c, int32_t k)
{
    uint8_t kb[5], vb[9] = {3};
    em_st32(vb + 1, (uint32_t)k);
    return st_put(c, NULL, kb, ikey(kb, k), vb, 5);
}

static int has(st_cache *c, int32_t k)
{
    uint8_t kb[5];
    int found = -1;
    return st_contains(c, NULL, kb, ikey(kb, k), &found) ? -1 : found;
}

/* Default region persistent, "mem" memory-only. */
static st_store *new_store(void)
{
    st_region_spec def = {.cfg = {.name = "default"}};
    st_region_spec r[1] = {{.cfg = {.name = "mem"}, .in_memory = 1}};
    st_store *s = NULL;
    return st_open_regions(&s, &def, r, 1) == 0 ? s : NULL;
}

static int open_wal(wal_memfs *fs, st_store *s, int deferred, wal **w)
{
    wal_options o;
    memset(&o, 0, sizeof o);
    o.mode = WAL_FSYNC;
    o.deferred_sync = deferred;
    return we_open(fs, &o, s, w);
}

static st_cache *make(st_store *s, const char *name, const char *region)
{
    st_cache_config cfg;
    st_cache_config_init(&cfg);
    cfg.name = (char *)name;
    cfg.data_region_name = (char *)region;
    cfg.partitions = 4;
    st_cache *c = NULL;
    return st_cache_create(s, &cfg, &c) == 0 ? c : NULL;
}

TEST(wal_regions_only_persistent_logged)
{
    wal_memfs *fs;
    REQUIRE_OK(wal_memfs_new(&fs));
    st_store *a = new_store();
    REQUIRE(a);
    wal *w;
    REQUIRE_OK(open_wal(fs, a, 0, &w));
    st_cache *p = make(a, "p", NULL), *m = make(a, "m", "mem");
    REQUIRE(p && m);
    wal_stats before, after;
    wal_stats_get(w, &before);
    for (int k = 0; k < 20; k++) {
        CHECK_OK(put(p, k));
        CHECK_OK(put(m, k));
    }
    wal_stats_get(w, &after);
    CHECK_EQ(after.appends - before.appends, 20);
    /* a checkpoint leaves the memory-only cache out too */
    CHECK_OK(wal_checkpoint(w, a));
    CHECK_OK(put(p, 100));
    CHECK_OK(st_cache_destroy(a, st_cache_id(m)));
    CHECK_OK(wal_close(w));

    st_store *b = new_store();
    REQUIRE(b);
    REQUIRE_OK(open_wal(fs, b, 0, &w));
    st_cache *rp = st_cache_find(b, st_cache_id(p));
    REQUIRE(rp);
    CHECK(st_cache_find(b, st_cache_id(m)) == NULL);
    CHECK_EQ(has(rp, 7), 1);
    CHECK_EQ(has(rp, 100), 1);
    CHECK_OK(wal_close(w));
    st_close(a);
    st_close(b);
    wal_memfs_free(fs);
}

TEST(wal_regions_failed_fsync_only_stops_persistent_writes)
{
    wal_memfs *fs;
    REQUIRE_OK(wal_memfs_new(&fs));
    st_store *a = new_store();
    REQUIRE(a);
    wal *w;
    REQUIRE_OK(open_wal(fs, a, 1, &w));
    st_cache *p = make(a, "p", NULL), *m = make(a, "m", "mem");
    REQUIRE(p && m);
    CHECK_OK(put(p, 1));
    CHECK_OK(wal_commit_wait(w));
    CHECK_OK(put(p, 2));               /* written, waits for the group fsync */
    wal_memfs_fault(fs, WAL_FAULT_FSYNC, 1, EIO, 0, 0);
    CHECK_EQ(wal_commit_wait(w), -EIO);   /* that write is never acknowledged */
    CHECK_EQ(wal_error(w), -EIO);
    /* reported once: later passes have nothing waiting */
    CHECK_OK(wal_commit_wait(w));
    CHECK_EQ(put(p, 3), EM_READONLY);
    CHECK(make(a, "q", NULL) == NULL);
    CHECK_OK(put(m, 3));               /* the memory-only region still takes writes */
    CHECK(make(a, "m2", "mem") != NULL);
    CHECK_OK(wal_commit_wait(w));
    CHECK_EQ(has(p, 1), 1);            /* reads still work */
    CHECK_EQ(has(p, 3), 0);
    CHECK_EQ(has(m, 3), 1);
    CHECK_EQ(wal_close(w), -EIO);
    st_close(a);
    wal_memfs_free(fs);
}
