/* bench_m1.c - M1's toBinary column (../shared/BENCHMARKS.md M1, seed
 * IGNITE-29109): build the row's value with the binary writer into a reused
 * buffer.  The holder types and the predefined tree types are defined once
 * (DESIGN rule 1), so the target is 0 B/op and 0 allocs/op.  Also the M1
 * value builder other M1 columns use (bench_m1.h).  This row writes through
 * the writer's internal cursor (binary/wcursor.h, inlined into the caller);
 * toBinary.api (bench_m1_api.c) builds the same bytes with the public
 * ember_writer calls, the builder cache.put uses.
 */
#include "bench_m1.h"

#include "bench.h"
#include "binary/wcursor.h"
#include "util/err.h"
#include "util/mem.h"

#include <string.h>

const char *const m1_row_names[M1_ROWS] = {
    "empty HashMap", "empty ArrayList", "empty TreeMap", "empty TreeSet",
    "TreeMap, 12 entries"};

static const char *const HOLDER[M1_ROWS] = {
    "M1HashMapHolder", "M1ArrayListHolder", "M1TreeMapHolder", "M1TreeSetHolder",
    "M1TreeMap12Holder"};
static const int32_t FIELD_CODE[M1_ROWS] = {BIN_MAP, BIN_COLLECTION, BIN_OBJ, BIN_OBJ, BIN_OBJ};
/* the map's values, with their lengths as a caller holding strings has them */
static const struct {
    const char *s;
    size_t len;
} VALS[12] = {{"value0", 6}, {"value1", 6}, {"value2", 6}, {"value3", 6}, {"value4", 6},
              {"value5", 6}, {"value6", 6}, {"value7", 6}, {"value8", 6}, {"value9", 6},
              {"value10", 7}, {"value11", 7}};

int m1_builder_init(m1_builder *b)
{
    memset(b, 0, sizeof *b);
    if (!(b->reg = bin_registry_new()))
        return EM_NOMEM;
    static const char *const fields[] = {"field"};
    for (int i = 0; i < M1_ROWS; i++) {
        int rc = bin_registry_define(b->reg, HOLDER[i], fields, &FIELD_CODE[i], 1, &b->desc[i]);
        if (rc) {
            bin_registry_free(b->reg);
            return rc;
        }
    }
    bin_writer_init(&b->w, b->reg, NULL);
    return 0;
}

void m1_builder_free(m1_builder *b)
{
    bin_writer_free(&b->w);
    bin_registry_free(b->reg);
}

/* The M1 values, written with the writer's cursor interface
 * (binary/wcursor.h), the one hot loops use; the bin_w_* calls build the
 * same bytes (tests/unit/test_binary_cursor.c).  One function per value, as
 * a caller writing a type would have: each gets its own registers. */
static inline int m1_w_container(bin_writer *w, const bin_desc *d, uint8_t code, em_buf *out)
{
    BIN_WC_DECL(c);
    bin_wc_reset(&c, w, out);
    bin_wc_obj_begin(&c, d);
    bin_wc_field_idx(&c, 0);
    bin_wc_begin(&c, code, 1);
    bin_wc_end(&c);
    bin_wc_obj_end(&c);
    return bin_wc_store(&c);
}

static __attribute__((noinline)) int m1_w_hashmap(bin_writer *w, const bin_desc *d, em_buf *out)
{
    return m1_w_container(w, d, BIN_MAP, out);
}

static __attribute__((noinline)) int m1_w_arraylist(bin_writer *w, const bin_desc *d, em_buf *out)
{
    return m1_w_container(w, d, BIN_COLLECTION, out);
}

static __attribute__((noinline)) int m1_w_treemap(bin_writer *w, const bin_desc *d, em_buf *out)
{
    BIN_WC_DECL(c);
    bin_wc_reset(&c, w, out);
    bin_wc_obj_begin(&c, d);
    bin_wc_field_idx(&c, 0);
    bin_wc_treemap_begin(&c);
    bin_wc_tree_end(&c);
    bin_wc_obj_end(&c);
    return bin_wc_store(&c);
}

static __attribute__((noinline)) int m1_w_treeset(bin_writer *w, const bin_desc *d, em_buf *out)
{
    BIN_WC_DECL(c);
    bin_wc_reset(&c, w, out);
    bin_wc_obj_begin(&c, d);
    bin_wc_field_idx(&c, 0);
    bin_wc_treeset_begin(&c);
    bin_wc_tree_end(&c);
    bin_wc_obj_end(&c);
    return bin_wc_store(&c);
}

static __attribute__((noinline)) int m1_w_tree12(bin_writer *w, const bin_desc *d, em_buf *out)
{
    BIN_WC_DECL(c);
    bin_wc_reset(&c, w, out);
    bin_wc_obj_begin(&c, d);
    bin_wc_field_idx(&c, 0);
    bin_wc_treemap_begin(&c);
    for (int i = 0; i < 12; i++) {
        bin_wc_int(&c, i);
        bin_wc_string(&c, VALS[i].s, VALS[i].len);
    }
    bin_wc_tree_end(&c);
    bin_wc_obj_end(&c);
    return bin_wc_store(&c);
}

int m1_write(m1_builder *b, int row, em_buf *out)
{
    const bin_desc *d = b->desc[row];
    switch (row) {
    case M1_HASHMAP:   return m1_w_hashmap(&b->w, d, out);
    case M1_ARRAYLIST: return m1_w_arraylist(&b->w, d, out);
    case M1_TREEMAP:   return m1_w_treemap(&b->w, d, out);
    case M1_TREESET:   return m1_w_treeset(&b->w, d, out);
    default:           return m1_w_tree12(&b->w, d, out);
    }
}

int m1_build_value(int row, em_buf *out)
{
    m1_builder b;
    int rc = m1_builder_init(&b);
    if (rc)
        return rc;
    rc = m1_write(&b, row, out);
    m1_builder_free(&b);
    return rc;
}

typedef struct m1ctx {
    m1_builder b;
    em_buf out;
    int row;
} m1ctx;

static void *m1_setup(int row)
{
    m1ctx *c = em_calloc(1, sizeof *c);
    if (!c)
        return NULL;
    if (m1_builder_init(&c->b)) {
        em_free(c);
        return NULL;
    }
    c->row = row;
    /* one build outside the timing grows the buffer and checks the bytes */
    size_t len;
    if (m1_write(&c->b, row, &c->out) || bin_validate(c->out.p, c->out.len, &len, 0)) {
        m1_builder_free(&c->b);
        em_buf_free(&c->out);
        em_free(c);
        return NULL;
    }
    return c;
}

static void m1_teardown(void *p)
{
    m1ctx *c = p;
    m1_builder_free(&c->b);
    em_buf_free(&c->out);
    em_free(c);
}

static int m1_to_binary(void *p, uint64_t n)
{
    m1ctx *c = p;
    for (uint64_t i = 0; i < n; i++) {
        em_buf_reset(&c->out);
        if (m1_write(&c->b, c->row, &c->out))
            return 1;
        bench_sink += c->out.len;
    }
    return 0;
}

static void *m1_hm(void) { return m1_setup(M1_HASHMAP); }
static void *m1_al(void) { return m1_setup(M1_ARRAYLIST); }
static void *m1_tm(void) { return m1_setup(M1_TREEMAP); }
static void *m1_ts(void) { return m1_setup(M1_TREESET); }
static void *m1_t12(void) { return m1_setup(M1_TREEMAP12); }

/* Anchors: the seed's "fixed" toBinary column (ns / B per op). */
BENCH_REGISTER(m1_tb_hm, {"m1", "empty HashMap", "toBinary", "359 ns 480 B",
               m1_to_binary, m1_hm, m1_teardown, 0})
BENCH_REGISTER(m1_tb_al, {"m1", "empty ArrayList", "toBinary", "243 ns 472 B",
               m1_to_binary, m1_al, m1_teardown, 0})
BENCH_REGISTER(m1_tb_tm, {"m1", "empty TreeMap", "toBinary", "281 ns 516 B",
               m1_to_binary, m1_tm, m1_teardown, 0})
BENCH_REGISTER(m1_tb_ts, {"m1", "empty TreeSet", "toBinary", "358 ns 528 B",
               m1_to_binary, m1_ts, m1_teardown, 0})
BENCH_REGISTER(m1_tb_t12, {"m1", "TreeMap, 12 entries", "toBinary", "966 ns 728 B",
               m1_to_binary, m1_t12, m1_teardown, 0})
