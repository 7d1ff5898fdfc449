/* test_wal_ckpt_expiry.c - checkpoints keep expiry deadlines
 * (src/wal/wal_store.c through st_scan_next_page_exp, src/store/store_scan.c):
 * an entry restored from a checkpoint alone (its WAL segments dropped) keeps
 * the absolute deadline it had, and an eternal one stays eternal. */
#include "test.h"
#include "wal_env.h"

#include "store/store.h"
#include "util/clock.h"
#include "util/err.h"
#include "util/mem.h"
#include "wal/wal.h"

#include <string.h>
#include <time.h>


static size_t ikey(uint8_t *b, int32_t v) { b[0] = 3; em_st32(b + 1, (uint32_t)v); return 5; }
static size_t sval(uint8_t *b, int32_t k)
{
    int n = snprintf((char *)b + 5, 48, "value-%d", k);
    b[0] = 9;
    em_st32(b + 1, (uint32_t)n);
    return 5 + (size_t)n;
}

static int open_wal(wal_memfs *fs, st_store *s, wal **w)
{
    wal_options o;
    memset(&o, 0, sizeof o);
    o.mode = WAL_LOG_ONLY;
    return we_open(fs, &o, s, w);
}

/* Deadlines by int key (keys 0..7), -1 = absent. */
typedef struct deadlines { int64_t at[8]; int bad; } deadlines;

static int note(void *arg, const uint8_t *k, size_t klen, const uint8_t *v, size_t vlen,
                int64_t expire_at_ms)
{
    deadlines *d = arg;
    (void)v; (void)vlen;
    int32_t key = klen == 5 && k[0] == 3 ? (int32_t)em_ld32(k + 1) : -1;
    if (key < 0 || key >= 8 || d->at[key] != -1)
        d->bad = 1;
    else
        d->at[key] = expire_at_ms;
    return 0;
}

static int read_deadlines(st_cache *c, deadlines *d)
{
    for (int i = 0; i < 8; i++)
        d->at[i] = -1;
    d->bad = 0;
    st_scan *sc;
    int rc = st_scan_open(c, -1, &sc), more = 1;
    while (!rc && more)
        rc = st_scan_next_page_exp(sc, 3, note, d, &more);
    st_scan_close(sc);
    return rc ? rc : d->bad ? EM_INVAL : 0;
}

TEST(scan_exp_reports_deadlines)
{
    st_store *s = we_new_store();
    REQUIRE(s);
    st_cache_config cfg;
    st_cache_config_init(&cfg);
    cfg.name = "ttl";
    cfg.partitions = 4;
    st_cache *c;
    REQUIRE_OK(st_cache_create(s, &cfg, &c));
    st_expiry ex = {60000, -1, -1};
    st_opctx o = {&ex, NULL};
    uint8_t kb[5], vb[64];
    int64_t t0 = em_wall_ms();
    CHECK_OK(st_put(c, &o, kb, ikey(kb, 1), vb, sval(vb, 1)));
    int64_t t1 = em_wall_ms();
    CHECK_OK(st_put(c, NULL, kb, ikey(kb, 2), vb, sval(vb, 2)));
    deadlines d;
    CHECK_OK(read_deadlines(c, &d));
    CHECK(d.at[1] >= t0 + 60000 && d.at[1] <= t1 + 60000);
    CHECK_EQ(d.at[2], 0);
    CHECK_EQ(d.at[0], -1);
    st_close(s);
}

TEST(wal_ckpt_restored_entry_keeps_its_deadline)
{
    wal_memfs *fs;
    REQUIRE_OK(wal_memfs_new(&fs));
    st_store *a = we_new_store(), *b = we_new_store();
    REQUIRE(a && b);
    wal *w;
    REQUIRE_OK(open_wal(fs, a, &w));
    st_cache_config cfg;
    st_cache_config_init(&cfg);
    cfg.name = "ttl";
    cfg.partitions = 8;
    st_cache *c;
    REQUIRE_OK(st_cache_create(a, &cfg, &c));
    st_expiry ex = {300, -1, -1};        /* expires 300 ms after creation */
    st_opctx o = {&ex, NULL};
    uint8_t kb[5], vb[64];
    CHECK_OK(st_put(c, &o, kb, ikey(kb, 1), vb, sval(vb, 1)));
    CHECK_OK(st_put(c, NULL, kb, ikey(kb, 2), vb, sval(vb, 2)));
    deadlines before;
    CHECK_OK(read_deadlines(c, &before));
    CHECK(before.at[1] > 0);
    CHECK_EQ(before.at[2], 0);
    /* The checkpoint drops the segments holding the puts: recovery sees
     * the entries only through the checkpoint. */
    REQUIRE_OK(wal_checkpoint(w, a));
    REQUIRE_OK(wal_close(w));
    REQUIRE_OK(open_wal(fs, b, &w));
    st_cache *r = st_cache_find(b, st_cache_id(c));
    REQUIRE(r);
    deadlines after;
    CHECK_OK(read_deadlines(r, &after));
    if (em_wall_ms() < before.at[1])     /* not yet due: must be there, same deadline */
        CHECK_EQ(after.at[1], before.at[1]);
    CHECK_EQ(after.at[2], 0);
    /* Past the deadline the restored entry is gone, the eternal one stays. */
    while (em_wall_ms() <= before.at[1] + 5) {
        struct timespec ts = {0, 20 * 1000000L};
        nanosleep(&ts, NULL);
    }
    int found = -1;
    CHECK_OK(st_contains(r, NULL, kb, ikey(kb, 1), &found));
    CHECK_EQ(found, 0);
    CHECK_OK(st_contains(r, NULL, kb, ikey(kb, 2), &found));
    CHECK_EQ(found, 1);
    wal_close(w);
    st_close(a);
    st_close(b);
    wal_memfs_free(fs);
}
