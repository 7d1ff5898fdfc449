/* test_store_regions.c - named data regions in the store (src/store/store.c,
 * st_open_regions): caches live in the region they name, memory limits and
 * eviction are accounted per region, unknown regions are refused. */
#include "test.h"

#include "store/store.h"
#include "util/err.h"

#include <stdio.h>
#include <string.h>

static size_t ikey(uint8_t *b, int32_t v) { b[0] = 3; em_st32(b + 1, (uint32_t)v); return 5; }

/* bval: a string value of n bytes of payload. */
static size_t bval(uint8_t *b, size_t n)
{
    b[0] = 9;
    em_st32(b + 1, (uint32_t)n);
    memset(b + 5, 'x', n);
    return 5 + n;
}

static int open3(st_store **s, uint64_t small_max, int small_evict)
{
    st_region_spec def = {.cfg = {.name = "default"}};
    st_region_spec r[2] = {
        {.cfg = {.name = "small", .max_bytes = small_max, .eviction = (uint8_t)small_evict}},
        {.cfg = {.name = "big"}, .in_memory = 1},
    };
    return st_open_regions(s, &def, r, 2);
}

static st_cache *make(st_store *s, const char *name, const char *region, int *rc)
{
    st_cache_config cfg;
    st_cache_config_init(&cfg);
    cfg.name = (char *)name;
    cfg.data_region_name = (char *)region;
    cfg.partitions = 8;
    st_cache *c = NULL;
    *rc = st_cache_create(s, &cfg, &c);
    return c;
}

/* open3, then caches a in "small", b in "big" and d in the default region */
static int open_abd(st_store **s, uint64_t small_max, int small_evict, st_cache **a,
                    st_cache **b, st_cache **d)
{
    int rc = open3(s, small_max, small_evict);
    if (!rc)
        *a = make(*s, "a", "small", &rc);
    if (!rc)
        *b = make(*s, "b", "big", &rc);
    if (!rc)
        *d = make(*s, "d", NULL, &rc);
    return rc;
}

static int fill(st_cache *c, int n)
{
    uint8_t kb[5], vb[1100];
    for (int k = 0; k < n; k++) {
        int rc = st_put(c, NULL, kb, ikey(kb, k), vb, bval(vb, 1000));
        if (rc)
            return rc;
    }
    return 0;
}

TEST(store_regions_cache_uses_named_region)
{
    st_store *s;
    st_cache *a, *b, *d;
    REQUIRE_OK(open_abd(&s, 64 << 10, 0, &a, &b, &d));
    int rc;
    st_cache *e = make(s, "e", "default", &rc);
    REQUIRE_OK(rc);
    CHECK(!strcmp(st_cache_region(a), "small"));
    CHECK(!strcmp(st_cache_region(b), "big"));
    CHECK(!strcmp(st_cache_region(d), "default"));
    CHECK(!strcmp(st_cache_region(e), "default"));
    CHECK_EQ(st_cache_in_memory(a), 0);
    CHECK_EQ(st_cache_in_memory(b), 1);
    CHECK_EQ(st_region_in_memory(s, "big"), 1);
    CHECK_EQ(st_region_in_memory(s, NULL), 0);
    CHECK_EQ(st_region_exists(s, "small"), 1);
    CHECK_EQ(st_region_exists(s, "nope"), 0);
    st_close(s);
}

TEST(store_regions_unknown_region_refused)
{
    st_store *s;
    REQUIRE_OK(open3(&s, 0, 0));
    int rc;
    CHECK(make(s, "x", "nope", &rc) == NULL);
    CHECK_EQ(rc, EM_CONFIG);
    st_cache_config cfg;
    st_cache_config_init(&cfg);
    cfg.name = (char *)"x";
    cfg.data_region_name = (char *)"nope";
    st_cache *c = NULL;
    CHECK_EQ(st_cache_get_or_create(s, &cfg, &c), EM_CONFIG);
    CHECK(st_cache_find(s, st_cache_id(make(s, "y", NULL, &rc))) != NULL);
    st_close(s);
}

TEST(store_regions_bad_specs)
{
    st_store *s = NULL;
    st_region_spec dup[2] = {{.cfg = {.name = "r"}}, {.cfg = {.name = "r"}}};
    CHECK_EQ(st_open_regions(&s, NULL, dup, 2), EM_CONFIG);
    CHECK(s == NULL);
    st_region_spec dflt[1] = {{.cfg = {.name = "default"}}};
    CHECK_EQ(st_open_regions(&s, NULL, dflt, 1), EM_CONFIG);
    st_region_spec empty[1] = {{.cfg = {.name = ""}}};
    CHECK_EQ(st_open_regions(&s, NULL, empty, 1), EM_CONFIG);
    CHECK_OK(st_open_regions(&s, NULL, NULL, 0));
    st_close(s);
}

TEST(store_regions_limit_is_per_region)
{
    st_store *s;
    st_cache *a, *b, *d;
    REQUIRE_OK(open_abd(&s, 64 << 10, 0, &a, &b, &d));
    /* 64 KiB hold fewer than 64 values of 1 KB: the small region fills */
    CHECK_EQ(fill(a, 200), EM_MEMLIMIT);
    /* the other regions are not charged for it */
    CHECK_OK(fill(b, 200));
    CHECK_OK(fill(d, 200));
    st_region_stats rs, rb, rd;
    st_region_stats_get(s, "small", &rs);
    st_region_stats_get(s, "big", &rb);
    st_region_stats_get(s, NULL, &rd);
    CHECK_EQ(rs.max_bytes, (uint64_t)64 << 10);
    CHECK(rs.used_bytes > 32 << 10 && rs.used_bytes <= 64 << 10);
    CHECK_EQ(rb.max_bytes, 0);
    CHECK(rb.used_bytes >= 200 * 1000);
    CHECK(rd.used_bytes >= 200 * 1000 && rd.used_bytes < 2 * 200 * 1100);
    st_region_stats none;
    st_region_stats_get(s, "nope", &none);
    CHECK_EQ(none.used_bytes + none.max_bytes + none.evictions, 0);
    st_close(s);
}

TEST(store_regions_eviction_is_per_region)
{
    st_store *s;
    st_cache *a, *b, *d;
    REQUIRE_OK(open_abd(&s, 64 << 10, 1, &a, &b, &d));
    CHECK_OK(fill(a, 200));       /* evicts instead of failing */
    CHECK_OK(fill(d, 50));
    st_region_stats rs, rd;
    st_region_stats_get(s, "small", &rs);
    st_region_stats_get(s, "default", &rd);
    CHECK(rs.evictions > 0);
    CHECK(rs.used_bytes <= 64 << 10);
    CHECK_EQ(rd.evictions, 0);
    int64_t n;
    CHECK_OK(st_size(d, 0, &n));
    CHECK_EQ(n, 50);
    CHECK_OK(st_size(a, 0, &n));
    CHECK(n < 200 && n > 0);
    st_close(s);
}
