/* bench_m1_store.c - M1's internal rows (../shared/BENCHMARKS.md M1, seed
 * IGNITE-29109): what the store alone costs under the public cache.put and
 * cache.get columns (bench_m1_api.c), which are the ones compared with the
 * seed.
 *
 * Value: a user-type complex object with one field holding, per row, an empty
 * HashMap, empty ArrayList, empty TreeMap, empty TreeSet, or a TreeMap of 12
 * entries (int 0..11 -> short strings), built once in setup with the
 * toBinary column's builder (bench_m1.h).  Key: int cycling over 1 000
 * keys, all present before timing, so every put overwrites.
 *
 * internal.put / internal.get time st_put / st_get on encoded, validated
 * bytes (into one reused buffer): what every front end pays once the value
 * is bytes it has checked.  api.put is ember_put of the same pre-built
 * bytes: the public call without the building, validation included.
 */
#include "bench.h"
#include "bench_m1.h"

#include "binary/binary.h"
#include "ember.h"
#include "store/store.h"
#include "util/buf.h"
#include "util/mem.h"

#include <stdio.h>
#include <string.h>

enum { NKEYS = 1000 };

typedef struct m1s_ctx {
    ember_node *node;
    ember_cache *cache;
    uint8_t keys[NKEYS][5];
    em_buf val;
    ember_buf out;
    uint32_t next;
} m1s_ctx;

/* The row's value, built by the toBinary column's builder (bench_m1.h), and
 * checked once: the store is given only valid objects. */
static int m1s_build_value(int row, em_buf *out)
{
    size_t len;
    int rc = m1_build_value(row, out);
    if (!rc)
        rc = bin_validate(out->p, out->len, &len, 0);
    return rc ? rc : (len == out->len ? 0 : -1);
}

static void m1s_teardown(void *p)
{
    m1s_ctx *x = p;
    ember_node_close(x->node);
    em_buf_free(&x->val);
    ember_buf_free(&x->out);
    em_free(x);
}

static void *m1s_setup(int kind)
{
    m1s_ctx *x = em_calloc(1, sizeof *x);
    if (!x)
        return NULL;
    if (m1s_build_value(kind, &x->val) || ember_node_open(&x->node, NULL) ||
        ember_cache_create(x->node, "m1", NULL, &x->cache)) {
        m1s_teardown(x);
        return NULL;
    }
    for (int i = 0; i < NKEYS; i++) {
        x->keys[i][0] = 3;
        em_st32(x->keys[i] + 1, (uint32_t)i);
        if (ember_put(x->cache, x->keys[i], 5, x->val.p, x->val.len)) {
            m1s_teardown(x);
            return NULL;
        }
    }
    return x;
}

static int m1s_put(void *p, uint64_t n)
{
    m1s_ctx *x = p;
    for (uint64_t i = 0; i < n; i++) {
        if (ember_put(x->cache, x->keys[x->next], 5, x->val.p, x->val.len))
            return 1;
        if (++x->next == NKEYS)
            x->next = 0;
    }
    return 0;
}

static int m1s_st_put(void *p, uint64_t n)
{
    m1s_ctx *x = p;
    st_cache *c = (st_cache *)(void *)x->cache;   /* ember_cache is a st_cache */
    for (uint64_t i = 0; i < n; i++) {
        if (st_put(c, NULL, x->keys[x->next], 5, x->val.p, x->val.len))
            return 1;
        if (++x->next == NKEYS)
            x->next = 0;
    }
    return 0;
}

static int m1s_st_get(void *p, uint64_t n)
{
    m1s_ctx *x = p;
    st_cache *c = (st_cache *)(void *)x->cache;
    em_buf *out = (em_buf *)(void *)&x->out;     /* ember_buf mirrors em_buf */
    int found;
    for (uint64_t i = 0; i < n; i++) {
        out->len = 0;
        if (st_get(c, NULL, x->keys[x->next], 5, out, &found) || !found)
            return 1;
        bench_sink += out->len;
        if (++x->next == NKEYS)
            x->next = 0;
    }
    return 0;
}

static void *m1s_hashmap(void) { return m1s_setup(M1_HASHMAP); }
static void *m1s_arraylist(void) { return m1s_setup(M1_ARRAYLIST); }
static void *m1s_treemap(void) { return m1s_setup(M1_TREEMAP); }
static void *m1s_treeset(void) { return m1s_setup(M1_TREESET); }
static void *m1s_treemap12(void) { return m1s_setup(M1_TREEMAP12); }

/* No anchors: the seed has no column these compare with. */
BENCH_REGISTER(m1s_cache_put_hm, {"m1", "empty HashMap", "internal.put", NULL,
               m1s_st_put, m1s_hashmap, m1s_teardown, 0})
BENCH_REGISTER(m1s_cache_put_al, {"m1", "empty ArrayList", "internal.put", NULL,
               m1s_st_put, m1s_arraylist, m1s_teardown, 0})
BENCH_REGISTER(m1s_cache_put_tm, {"m1", "empty TreeMap", "internal.put", NULL,
               m1s_st_put, m1s_treemap, m1s_teardown, 0})
BENCH_REGISTER(m1s_cache_put_ts, {"m1", "empty TreeSet", "internal.put", NULL,
               m1s_st_put, m1s_treeset, m1s_teardown, 0})
BENCH_REGISTER(m1s_cache_put_t12, {"m1", "TreeMap, 12 entries", "internal.put", NULL,
               m1s_st_put, m1s_treemap12, m1s_teardown, 0})
BENCH_REGISTER(m1s_cache_get_hm, {"m1", "empty HashMap", "internal.get", NULL,
               m1s_st_get, m1s_hashmap, m1s_teardown, 0})
BENCH_REGISTER(m1s_cache_get_al, {"m1", "empty ArrayList", "internal.get", NULL,
               m1s_st_get, m1s_arraylist, m1s_teardown, 0})
BENCH_REGISTER(m1s_cache_get_tm, {"m1", "empty TreeMap", "internal.get", NULL,
               m1s_st_get, m1s_treemap, m1s_teardown, 0})
BENCH_REGISTER(m1s_cache_get_ts, {"m1", "empty TreeSet", "internal.get", NULL,
               m1s_st_get, m1s_treeset, m1s_teardown, 0})
BENCH_REGISTER(m1s_cache_get_t12, {"m1", "TreeMap, 12 entries", "internal.get", NULL,
               m1s_st_get, m1s_treemap12, m1s_teardown, 0})
BENCH_REGISTER(m1s_api_put_hm, {"m1", "empty HashMap", "api.put", NULL,
               m1s_put, m1s_hashmap, m1s_teardown, 0})
BENCH_REGISTER(m1s_api_put_al, {"m1", "empty ArrayList", "api.put", NULL,
               m1s_put, m1s_arraylist, m1s_teardown, 0})
BENCH_REGISTER(m1s_api_put_tm, {"m1", "empty TreeMap", "api.put", NULL,
               m1s_put, m1s_treemap, m1s_teardown, 0})
BENCH_REGISTER(m1s_api_put_ts, {"m1", "empty TreeSet", "api.put", NULL,
               m1s_put, m1s_treeset, m1s_teardown, 0})
BENCH_REGISTER(m1s_api_put_t12, {"m1", "TreeMap, 12 entries", "api.put", NULL,
               m1s_put, m1s_treemap12, m1s_teardown, 0})
