/* bench_m1_api.c - M1's cache.put and cache.get columns as the seed
 * measures them (../shared/BENCHMARKS.md M1, seed IGNITE-29109): through
 * the public API only (include/ember.h), nothing from src/.
 *
 * The seed's cache.put is IgniteCache.put of a Java object, marshalling
 * included, so cache.put here builds the row's value with the public
 * builder (ember_writer, into its reused buffer) and stores it with
 * ember_put, which validates the caller's bytes before they reach the
 * store.  cache.get is ember_get of an existing key into a caller-supplied
 * reused ember_buf: the bytes a caller of the public API gets back.  Key:
 * an int (03 + little-endian int32) cycling over 1 000 keys, all present
 * before timing, so every put overwrites.  The same operations on
 * pre-encoded bytes, straight into the store, are the internal.* rows
 * (bench_m1_store.c).
 */
#include "bench.h"
#include "ember.h"

#include <string.h>

enum { NKEYS = 1000 };
enum { R_HASHMAP, R_ARRAYLIST, R_TREEMAP, R_TREESET, R_TREEMAP12 };

static const char *const HOLDER[] = {
    "M1HashMapHolder", "M1ArrayListHolder", "M1TreeMapHolder", "M1TreeSetHolder",
    "M1TreeMap12Holder"};
static const int FIELD_CODE[] = {EMBER_T_MAP, EMBER_T_COLLECTION, EMBER_T_OBJ, EMBER_T_OBJ,
                                 EMBER_T_OBJ};
static const struct {
    const char *s;
    size_t len;
} VALS[12] = {{"value0", 6}, {"value1", 6}, {"value2", 6}, {"value3", 6}, {"value4", 6},
              {"value5", 6}, {"value6", 6}, {"value7", 6}, {"value8", 6}, {"value9", 6},
              {"value10", 7}, {"value11", 7}};

typedef struct m1a_ctx {
    int row;
    ember_types *types;
    const ember_type *type;
    ember_writer *w;
    ember_node *node;
    ember_cache *cache;
    ember_buf out;
    uint32_t next;
} m1a_ctx;

/* The row's value with the public builder, one function per value as a
 * caller writing a type would have (as bench_m1.c does for the cursor);
 * the bytes are valid until the next ember_writer_start. */
static __attribute__((noinline)) int m1a_w_container(ember_writer *w, const ember_type *t,
                                                     int map, const uint8_t **v, size_t *vlen)
{
    ember_writer_start(w);
    ember_begin_object(w, t);
    ember_write_field_idx(w, 0);
    if (map)
        ember_begin_map(w, EMBER_HASH_MAP);
    else
        ember_begin_collection(w, EMBER_ARRAY_LIST);
    ember_end(w);
    ember_end_object(w);
    return ember_writer_finish(w, v, vlen);   /* the first error of any call */
}

static __attribute__((noinline)) int m1a_w_tree(ember_writer *w, const ember_type *t, int map,
                                                const uint8_t **v, size_t *vlen)
{
    ember_writer_start(w);
    ember_begin_object(w, t);
    ember_write_field_idx(w, 0);
    if (map)
        ember_begin_treemap(w);
    else
        ember_begin_treeset(w);
    ember_end_tree(w);
    ember_end_object(w);
    return ember_writer_finish(w, v, vlen);
}

static __attribute__((noinline)) int m1a_w_tree12(ember_writer *w, const ember_type *t,
                                                  const uint8_t **v, size_t *vlen)
{
    ember_writer_start(w);
    ember_begin_object(w, t);
    ember_write_field_idx(w, 0);
    ember_begin_treemap(w);
    for (int i = 0; i < 12; i++) {
        ember_write_int(w, i);
        ember_write_string(w, VALS[i].s, VALS[i].len);
    }
    ember_end_tree(w);
    ember_end_object(w);
    return ember_writer_finish(w, v, vlen);
}

static int m1a_build(m1a_ctx *x, const uint8_t **v, size_t *vlen)
{
    switch (x->row) {
    case R_HASHMAP:   return m1a_w_container(x->w, x->type, 1, v, vlen);
    case R_ARRAYLIST: return m1a_w_container(x->w, x->type, 0, v, vlen);
    case R_TREEMAP:   return m1a_w_tree(x->w, x->type, 1, v, vlen);
    case R_TREESET:   return m1a_w_tree(x->w, x->type, 0, v, vlen);
    default:          return m1a_w_tree12(x->w, x->type, v, vlen);
    }
}

/* m1a_key: the int key's 5 bytes.  The int goes in with one 4-byte store,
 * as a caller encoding an int writes it: four byte stores would make the
 * 4-byte load that reads the key back wait for them to reach the cache
 * (a load cannot be forwarded from several stores). */
_Static_assert(__BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__, "the key's int is little-endian");
static void m1a_key(uint8_t k[5], uint32_t i)
{
    k[0] = EMBER_T_INT;
    memcpy(k + 1, &i, 4);
}

static void m1a_teardown(void *p)
{
    m1a_ctx *x = p;
    ember_node_close(x->node);
    ember_writer_free(x->w);
    ember_types_free(x->types);
    ember_buf_free(&x->out);
    memset(x, 0, sizeof *x);
}

static m1a_ctx ctxs[5];

static void *m1a_setup(int row)
{
    m1a_ctx *x = &ctxs[row];
    static const char *const fields[] = {"field"};
    const uint8_t *v;
    size_t vlen;
    x->row = row;
    if (!(x->types = ember_types_new()) ||
        ember_type_define(x->types, HOLDER[row], fields, &FIELD_CODE[row], 1, &x->type) ||
        !(x->w = ember_writer_new(x->types)) || ember_node_open(&x->node, NULL) ||
        ember_cache_create(x->node, "m1", NULL, &x->cache))
        goto fail;
    for (uint32_t i = 0; i < NKEYS; i++) {
        uint8_t k[5];
        m1a_key(k, i);
        if (m1a_build(x, &v, &vlen) || ember_put(x->cache, k, 5, v, vlen))
            goto fail;
    }
    return x;
fail:
    m1a_teardown(x);
    return NULL;
}

static int m1a_put(void *p, uint64_t n)
{
    m1a_ctx *x = p;
    const uint8_t *v;
    size_t vlen;
    uint8_t k[5];
    for (uint64_t i = 0; i < n; i++) {
        m1a_key(k, x->next);
        if (m1a_build(x, &v, &vlen) || ember_put(x->cache, k, 5, v, vlen))
            return 1;
        if (++x->next == NKEYS)
            x->next = 0;
    }
    return 0;
}

static int m1a_get(void *p, uint64_t n)
{
    m1a_ctx *x = p;
    uint8_t k[5];
    int found;
    for (uint64_t i = 0; i < n; i++) {
        m1a_key(k, x->next);
        x->out.len = 0;
        if (ember_get(x->cache, k, 5, &x->out, &found) || !found)
            return 1;
        bench_sink += x->out.len;
        if (++x->next == NKEYS)
            x->next = 0;
    }
    return 0;
}

/* toBinary through the public builder alone (the toBinary rows use the
 * writer's internal cursor, bench_m1.c): what cache.put spends before
 * ember_put. */
static int m1a_build_only(void *p, uint64_t n)
{
    m1a_ctx *x = p;
    const uint8_t *v;
    size_t vlen;
    for (uint64_t i = 0; i < n; i++) {
        if (m1a_build(x, &v, &vlen))
            return 1;
        bench_sink += vlen;
    }
    return 0;
}

static void *m1a_hm(void) { return m1a_setup(R_HASHMAP); }
static void *m1a_al(void) { return m1a_setup(R_ARRAYLIST); }
static void *m1a_tm(void) { return m1a_setup(R_TREEMAP); }
static void *m1a_ts(void) { return m1a_setup(R_TREESET); }
static void *m1a_t12(void) { return m1a_setup(R_TREEMAP12); }

/* Anchors: the seed's "fixed" columns (ns / B per op). */
BENCH_REGISTER(m1a_tb_hm, {"m1", "empty HashMap", "toBinary.api", "359 ns 480 B",
               m1a_build_only, m1a_hm, m1a_teardown, 0})
BENCH_REGISTER(m1a_tb_al, {"m1", "empty ArrayList", "toBinary.api", "243 ns 472 B",
               m1a_build_only, m1a_al, m1a_teardown, 0})
BENCH_REGISTER(m1a_tb_tm, {"m1", "empty TreeMap", "toBinary.api", "281 ns 516 B",
               m1a_build_only, m1a_tm, m1a_teardown, 0})
BENCH_REGISTER(m1a_tb_ts, {"m1", "empty TreeSet", "toBinary.api", "358 ns 528 B",
               m1a_build_only, m1a_ts, m1a_teardown, 0})
BENCH_REGISTER(m1a_tb_t12, {"m1", "TreeMap, 12 entries", "toBinary.api", "966 ns 728 B",
               m1a_build_only, m1a_t12, m1a_teardown, 0})
BENCH_REGISTER(m1a_put_hm, {"m1", "empty HashMap", "cache.put", "1209 ns 2224 B",
               m1a_put, m1a_hm, m1a_teardown, 0})
BENCH_REGISTER(m1a_put_al, {"m1", "empty ArrayList", "cache.put", "876 ns 2176 B",
               m1a_put, m1a_al, m1a_teardown, 0})
BENCH_REGISTER(m1a_put_tm, {"m1", "empty TreeMap", "cache.put", "992 ns 2256 B",
               m1a_put, m1a_tm, m1a_teardown, 0})
BENCH_REGISTER(m1a_put_ts, {"m1", "empty TreeSet", "cache.put", "988 ns 2288 B",
               m1a_put, m1a_ts, m1a_teardown, 0})
BENCH_REGISTER(m1a_put_t12, {"m1", "TreeMap, 12 entries", "cache.put", "1696 ns 2720 B",
               m1a_put, m1a_t12, m1a_teardown, 0})
BENCH_REGISTER(m1a_get_hm, {"m1", "empty HashMap", "cache.get", "995 ns 1240 B",
               m1a_get, m1a_hm, m1a_teardown, 0})
BENCH_REGISTER(m1a_get_al, {"m1", "empty ArrayList", "cache.get", "444 ns 1216 B",
               m1a_get, m1a_al, m1a_teardown, 0})
BENCH_REGISTER(m1a_get_tm, {"m1", "empty TreeMap", "cache.get", "532 ns 1416 B",
               m1a_get, m1a_tm, m1a_teardown, 0})
BENCH_REGISTER(m1a_get_ts, {"m1", "empty TreeSet", "cache.get", "533 ns 1464 B",
               m1a_get, m1a_ts, m1a_teardown, 0})
BENCH_REGISTER(m1a_get_t12, {"m1", "TreeMap, 12 entries", "cache.get", "1110 ns 4832 B",
               m1a_get, m1a_t12, m1a_teardown, 0})
