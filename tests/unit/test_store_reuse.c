/* test_store_reuse.c - destroyed caches hand their partition arrays to the
 * next cache of the same size (src/store/store.c, st_parr): create/destroy
 * loops do not grow by a partition array per cycle, an old pointer to a
 * destroyed cache keeps returning EM_NOCACHE after its array was reused,
 * and operations racing create/destroy/reuse never reach another cache
 * (run under ThreadSanitizer too: BUILD=... SAN=-fsanitize=thread). */
#include "test.h"

#include "store/store.h"
#include "util/err.h"
#include "util/hash.h"
#include "util/mem.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>

static size_t ikey(uint8_t *b, int32_t v) { b[0] = 3; em_st32(b + 1, (uint32_t)v); return 5; }

static int32_t name_id(const char *n) { return em_hash_java_str((const uint8_t *)n, strlen(n)); }

static int create(st_store *s, const char *name, uint32_t parts, st_cache **c)
{
    st_cache_config cfg;
    st_cache_config_init(&cfg);
    cfg.name = (char *)name;
    cfg.partitions = parts;
    return st_cache_create(s, &cfg, c);
}

TEST(store_reuse_create_destroy_loop_bounded)
{
    st_store *s;
    REQUIRE_OK(st_open(&s, NULL));
    uint8_t kb[5], vb[5];
    char name[32];
    int64_t base = 0, one = 0;
    enum { CYCLES = 2000 };
    for (int i = 0; i < CYCLES; i++) {
        st_cache *c;
        snprintf(name, sizeof name, "loop-%d", i);
        int64_t before = em_mem_live_bytes();
        REQUIRE_OK(create(s, name, 0, &c));          /* 1024 partitions */
        if (i == 0)
            one = em_mem_live_bytes() - before;       /* one fresh cache */
        REQUIRE_OK(st_put(c, NULL, kb, ikey(kb, i), vb, ikey(vb, i)));
        REQUIRE_OK(st_cache_destroy(s, name_id(name)));
        if (i == 0)
            base = em_mem_live_bytes();
    }
    int64_t growth = em_mem_live_bytes() - base;
    /* What stays per destroyed cache is its struct (old pointers stay
     * valid, include/ember.h), not its 128 KiB partition array. */
    printf("# one cache %lld B; %d more cycles grew %lld B (%lld B/cycle)\n",
           (long long)one, CYCLES - 1, (long long)growth, (long long)(growth / (CYCLES - 1)));
    CHECK(one >= 1024 * 128);
    CHECK(growth / (CYCLES - 1) < 1024);
    CHECK(growth < one * (CYCLES - 1) / 100);
    st_close(s);
}

TEST(store_reuse_old_pointer_sees_nocache)
{
    st_store *s;
    REQUIRE_OK(st_open(&s, NULL));
    st_cache *a, *b, *other;
    uint8_t kb[5], vb[5];
    em_buf out = EM_BUF_INIT;
    int f = -1;
    REQUIRE_OK(create(s, "a", 8, &a));
    REQUIRE_OK(st_put(a, NULL, kb, ikey(kb, 1), vb, ikey(vb, 11)));
    REQUIRE_OK(st_cache_destroy(s, name_id("a")));
    REQUIRE_OK(create(s, "other-size", 16, &other));  /* cannot take a's array */
    REQUIRE_OK(create(s, "b", 8, &b));                /* takes a's array */
    REQUIRE_OK(st_put(b, NULL, kb, ikey(kb, 1), vb, ikey(vb, 22)));
    CHECK_EQ(st_put(a, NULL, kb, ikey(kb, 2), vb, ikey(vb, 33)), EM_NOCACHE);
    CHECK_EQ(st_get(a, NULL, kb, ikey(kb, 1), &out, &f), EM_NOCACHE);
    CHECK_EQ(st_remove(a, NULL, kb, ikey(kb, 1), &f), EM_NOCACHE);
    int64_t n = -1;
    CHECK_EQ(st_size(a, 0, &n), EM_NOCACHE);
    st_cache_stats cs;
    st_cache_stats_get(a, &cs);
    CHECK_EQ(cs.entries, 0);
    st_scan *sc;
    CHECK_EQ(st_scan_open(a, -1, &sc), EM_NOCACHE);
    /* b is untouched by all that */
    CHECK_OK(st_size(b, 0, &n));
    CHECK_EQ(n, 1);
    em_buf_reset(&out);
    CHECK_OK(st_get(b, NULL, kb, ikey(kb, 1), &out, &f));
    CHECK_EQ(f, 1);
    CHECK(out.len == 5 && em_ld32(out.p + 1) == 22);
    CHECK_OK(st_get(b, NULL, kb, ikey(kb, 2), &out, &f));
    CHECK_EQ(f, 0);
    st_cache_stats_get(b, &cs);
    CHECK_EQ(cs.entries, 1);
    CHECK_EQ(cs.puts, 1);
    em_buf_free(&out);
    st_close(s);
}

/* ---- ops racing create / destroy / reuse ------------------------------ */

enum { NAMES = 4 };

struct rz_ctx {
    st_store *s;
    int32_t ids[NAMES];
    atomic_int stop;
    atomic_int bad;
    atomic_long ops, nocache;
};

struct rz_arg { struct rz_ctx *x; int seed; };

static void *rz_worker(void *arg)
{
    struct rz_arg *a = arg;
    struct rz_ctx *x = a->x;
    em_buf out = EM_BUF_INIT;
    uint8_t kb[5], vb[5];
    unsigned r = (unsigned)a->seed * 2654435761u + 1;
    while (!atomic_load(&x->stop)) {
        r = r * 1103515245u + 12345u;
        int ni = (int)((r >> 16) % NAMES);
        st_cache *c = st_cache_find(x->s, x->ids[ni]);
        if (!c)
            continue;
        /* Keep the pointer for a while: its cache may be destroyed and its
         * array handed to another name meanwhile.  A value is the name's
         * index, so a value of another name would show an op that reached
         * the wrong cache. */
        for (int j = 0; j < 40; j++) {
            int f = 0, rc;
            size_t kl = ikey(kb, (int32_t)((r >> 8) % 64) + j);
            rc = st_put(c, NULL, kb, kl, vb, ikey(vb, ni));
            if (!rc) {
                em_buf_reset(&out);
                rc = st_get(c, NULL, kb, kl, &out, &f);
                if (!rc && f && (out.len != 5 || (int32_t)em_ld32(out.p + 1) != ni))
                    atomic_fetch_add(&x->bad, 1);
            }
            if (!rc && j % 8 == 0)
                rc = st_remove(c, NULL, kb, kl, &f);
            if (!rc && j % 13 == 0) {
                int64_t n;
                rc = st_size(c, 0, &n);
            }
            if (rc == EM_NOCACHE)
                atomic_fetch_add(&x->nocache, 1);
            else if (rc)
                atomic_fetch_add(&x->bad, 1);
            atomic_fetch_add(&x->ops, 1);
        }
    }
    em_buf_free(&out);
    return NULL;
}

TEST(store_reuse_ops_race_create_destroy)
{
    struct rz_ctx x;
    memset(&x, 0, sizeof x);
    REQUIRE_OK(st_open(&x.s, NULL));
    char names[NAMES][8];
    for (int i = 0; i < NAMES; i++) {
        snprintf(names[i], sizeof names[i], "rz%d", i);
        x.ids[i] = name_id(names[i]);
    }
    pthread_t t[3];
    struct rz_arg args[3];
    for (int i = 0; i < 3; i++) {
        args[i] = (struct rz_arg){&x, i};
        REQUIRE(pthread_create(&t[i], NULL, rz_worker, &args[i]) == 0);
    }
    /* Every name has 8 partitions, so each create reuses an array some
     * other name (or an earlier incarnation) gave back. */
    int live[NAMES] = {0};
    unsigned r = 7;
    /* 1200 rounds at least, and on a loaded machine as many more as it takes
     * for the workers to have run ops against them (they may not have been
     * scheduled at all during the first 1200). */
    for (int round = 0; round < 1200 || (atomic_load(&x.ops) < 20000 && round < 2000000);
         round++) {
        r = r * 1103515245u + 12345u;
        int ni = (int)((r >> 16) % NAMES);
        st_cache *c;
        if (live[ni]) {
            CHECK_OK(st_cache_destroy(x.s, x.ids[ni]));
            live[ni] = 0;
        } else {
            CHECK_OK(create(x.s, names[ni], 8, &c));
            live[ni] = 1;
        }
        for (volatile int spin = 0; spin < 5000; spin++)
            ;
    }
    atomic_store(&x.stop, 1);
    for (int i = 0; i < 3; i++)
        pthread_join(t[i], NULL);
    CHECK_EQ(atomic_load(&x.bad), 0);
    CHECK(atomic_load(&x.ops) > 0);
    printf("# %ld ops, %ld saw EM_NOCACHE\n", atomic_load(&x.ops), atomic_load(&x.nocache));
    st_close(x.s);
}
