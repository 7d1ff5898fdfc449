/* test_store_api.c - the public embedded API (include/ember.h section 3). */
#include "test.h"

#include "ember.h"
#include "util/buf.h"
#include "util/err.h"
#include "util/mem.h"

static size_t ikey(uint8_t *b, int32_t v) { b[0] = 3; em_st32(b + 1, (uint32_t)v); return 5; }
static size_t lval(uint8_t *b, int64_t v) { b[0] = 4; em_st64(b + 1, (uint64_t)v); return 9; }

static int count_fn(void *arg, const uint8_t *k, size_t klen, const uint8_t *v, size_t vlen)
{
    (void)k; (void)v;
    *(int *)arg += klen == 5 && vlen == 9;
    return 0;
}

TEST(store_api_embedded)
{
    ember_node *n;
    REQUIRE_OK(ember_node_open(&n, NULL));
    ember_cache *c, *c2;
    REQUIRE_OK(ember_cache_create(n, "people", NULL, &c));
    CHECK_EQ(ember_cache_create(n, "people", NULL, &c2), EMBER_ECACHEEXISTS);
    REQUIRE_OK(ember_cache_get_or_create(n, "people", NULL, &c2));
    CHECK(c2 == c);
    CHECK(ember_cache_get(n, "people") == c);
    CHECK(ember_cache_get(n, "nobody") == NULL);

    uint8_t k[5], v[9], w[9];
    ember_buf out = {0};
    int f;
    CHECK_OK(ember_put(c, k, ikey(k, 1), v, lval(v, 10)));
    CHECK_OK(ember_get(c, k, 5, &out, &f));
    CHECK(f && out.len == 9 && memcmp(out.data, v, 9) == 0);
    /* invalid objects are refused before they reach the store */
    uint8_t bad[3] = {3, 1, 2};
    CHECK_EQ(ember_put(c, bad, 3, v, 9), EM_TRUNCATED);
    CHECK_EQ(ember_put(c, k, 5, v, 8), EM_TRUNCATED);
    uint8_t two[10];
    ikey(two, 1);
    ikey(two + 5, 2);
    CHECK_EQ(ember_put(c, two, 10, v, 9), EM_TRAILING);

    CHECK_OK(ember_put_if_absent(c, k, 5, w, lval(w, 11), &f));
    CHECK_EQ(f, 0);
    CHECK_OK(ember_replace_if_equals(c, k, 5, v, 9, w, 9, &f));
    CHECK_EQ(f, 1);
    out.len = 0;
    CHECK_OK(ember_get_and_put(c, k, 5, v, 9, &out, &f));
    CHECK(f && memcmp(out.data, w, 9) == 0);
    CHECK_OK(ember_replace(c, k, 5, w, 9, &f));
    CHECK_EQ(f, 1);
    CHECK_OK(ember_remove_if_equals(c, k, 5, v, 9, &f));
    CHECK_EQ(f, 0);
    CHECK_OK(ember_contains(c, k, 5, &f));
    CHECK_EQ(f, 1);
    out.len = 0;
    CHECK_OK(ember_get_and_remove(c, k, 5, &out, &f));
    CHECK(f && memcmp(out.data, w, 9) == 0);
    CHECK_OK(ember_remove(c, k, 5, &f));
    CHECK_EQ(f, 0);

    for (int i = 0; i < 300; i++)
        CHECK_OK(ember_put(c, k, ikey(k, i), v, lval(v, i)));
    int64_t sz;
    CHECK_OK(ember_size(c, &sz));
    CHECK_EQ(sz, 300);
    int seen = 0;
    CHECK_OK(ember_scan(c, -1, count_fn, &seen));
    CHECK_EQ(seen, 300);
    ember_cache_stats st;
    ember_cache_stats_get(c, &st);
    CHECK_EQ(st.entries, 300);
    CHECK(st.mem_bytes > 300 * 14);

    ember_expiry e0 = {0, 0, -2};
    CHECK_OK(ember_put_expiring(c, k, ikey(k, 5), v, 9, &e0));
    CHECK_OK(ember_contains(c, k, 5, &f));
    CHECK_EQ(f, 0);

    CHECK_OK(ember_clear(c));
    CHECK_OK(ember_size(c, &sz));
    CHECK_EQ(sz, 0);
    CHECK_OK(ember_cache_destroy(n, "people"));
    CHECK_EQ(ember_cache_destroy(n, "people"), EMBER_ENOCACHE);
    CHECK_EQ(ember_put(c, k, 5, v, 9), EMBER_ENOCACHE);
    CHECK(ember_cache_get(n, "people") == NULL);
    ember_buf_free(&out);
    ember_node_close(n);
}

TEST(store_api_memlimit)
{
    ember_node_config nc = {32 * 1024, 0};
    ember_node *n;
    REQUIRE_OK(ember_node_open(&n, &nc));
    ember_cache_options co = {16, 0, NULL};
    ember_cache *c;
    REQUIRE_OK(ember_cache_create(n, "small", &co, &c));
    uint8_t k[5], v[9];
    int rc = 0, i;
    for (i = 0; i < 100000 && !rc; i++)
        rc = ember_put(c, k, ikey(k, i), v, lval(v, i));
    CHECK_EQ(rc, EMBER_EMEMLIMIT);
    CHECK(strlen(ember_strerror(rc)) > 0);
    ember_node_close(n);
}
