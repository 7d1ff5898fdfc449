/* test_binary_api.c - the public builder/reader of include/ember.h section
 * 2, and the robustness sweep over golden objects: every truncation is
 * rejected, every single-byte corruption is rejected or reads as a
 * well-formed object (all readers run over it). */
#include "test.h"

#include <stdlib.h>

#include "ember.h"
#include "binary/binary.h"
#include "util/err.h"
#include "util/mem.h"

static void build_order(ember_writer *w, const ember_type *order, int id)
{
    ember_writer_start(w);
    ember_begin_object(w, order);
    ember_write_field(w, "id");
    ember_write_long(w, id);
    ember_write_field(w, "customer");
    ember_write_string(w, "ACME", 4);
    ember_write_field(w, "lines");
    ember_begin_map(w, EMBER_HASH_MAP);
    ember_write_int(w, 1);
    ember_write_double(w, 9.5);
    ember_write_int(w, 2);
    ember_write_null(w);
    ember_end(w);
    ember_write_field(w, "tags");
    ember_begin_treeset(w);
    ember_write_string(w, "a", 1);
    ember_write_string(w, "b", 1);
    ember_end_tree(w);
    ember_end_object(w);
}

TEST(binary_public_api)
{
    ember_types *t = ember_types_new();
    REQUIRE(t);
    static const char *const f[] = {"id", "customer", "lines", "tags"};
    static const int c[] = {EMBER_T_LONG, EMBER_T_STRING, EMBER_T_MAP, EMBER_T_OBJ};
    const ember_type *order, *again;
    REQUIRE_OK(ember_type_define(t, "Order", f, c, 4, &order));
    REQUIRE_OK(ember_type_define(t, "Order", f, c, 4, &again));
    CHECK(order == again);
    CHECK_EQ(ember_type_id(order), ember_field_id("order"));
    static const int bad[] = {EMBER_T_INT, EMBER_T_STRING, EMBER_T_MAP, EMBER_T_OBJ};
    CHECK_EQ(ember_type_define(t, "Order", f, bad, 4, &again), EM_FIELDTYPE);
    ember_writer *w = ember_writer_new(t);
    REQUIRE(w);
    build_order(w, order, 42);
    const uint8_t *p;
    size_t n, len;
    REQUIRE_OK(ember_writer_finish(w, &p, &n));
    REQUIRE_OK(ember_validate(p, n, &len));
    CHECK_EQ(len, n);
    CHECK_EQ(ember_value_type(p), EMBER_T_OBJ);
    const uint8_t *v;
    int64_t id;
    REQUIRE_OK(ember_read_field(t, p, "id", &v));
    CHECK_OK(ember_read_long(v, &id));
    CHECK_EQ(id, 42);
    REQUIRE_OK(ember_read_field(t, p, "Customer", &v));
    const char *s;
    size_t sl;
    CHECK_OK(ember_read_string(v, &s, &sl));
    CHECK(sl == 4 && memcmp(s, "ACME", 4) == 0);
    CHECK_EQ(ember_read_field(t, p, "nope", &v), EMBER_ENOFIELD);
    REQUIRE_OK(ember_read_field(t, p, "lines", &v));
    ember_iter it;
    uint32_t cnt;
    REQUIRE_OK(ember_items_begin(&it, v, &cnt));
    CHECK_EQ(cnt, 2);
    const uint8_t *k, *val;
    double dv;
    REQUIRE(ember_items_next(&it, &k) && ember_items_next(&it, &val));
    CHECK_OK(ember_read_double(val, &dv));
    CHECK(dv == 9.5);
    REQUIRE_OK(ember_read_field(t, p, "tags", &v));
    REQUIRE_OK(ember_items_begin(&it, v, &cnt));
    CHECK_EQ(cnt, 2);
    int nf = 0;
    int32_t fid;
    REQUIRE_OK(ember_fields_begin(&it, t, p));
    while (ember_fields_next(&it, &fid, &v))
        nf++;
    CHECK_EQ(nf, 4);
    /* every nested object's hash is already Java's: normalising is a no-op */
    {
        em_buf sc = EM_BUF_INIT;
        bin_key nk;
        REQUIRE_OK(bin_key_prepare(p, n, &sc, &nk));
        CHECK(nk.p == p);
        CHECK_EQ(sc.len, 0);
        em_buf_free(&sc);
    }
    /* errors are sticky and reported by finish */
    ember_writer_start(w);
    ember_begin_object(w, order);
    CHECK_EQ(ember_write_int(w, 1), EM_BUILDER);
    CHECK_EQ(ember_writer_finish(w, &p, &n), EM_BUILDER);
    ember_writer_start(w);
    ember_begin_collection(w, EMBER_ARRAY_LIST);
    CHECK_EQ(ember_writer_finish(w, &p, &n), EM_BUILDER);      /* still open */
    /* steady state: building again allocates nothing */
    build_order(w, order, 1);
    em_mem_stats a = em_mem_thread();
    for (int i = 0; i < 1000; i++)
        build_order(w, order, i);
    em_mem_stats b = em_mem_thread();
    CHECK_EQ(b.allocs - a.allocs, 0);
    CHECK_OK(ember_writer_finish(w, &p, &n));
    ember_writer_free(w);
    ember_types_free(t);
}

/* read_all runs every reader over an accepted value; sanitizers catch any
 * read outside it. Returns a checksum so nothing is optimised away. */
static uint64_t read_all(bin_registry *r, const uint8_t *p, size_t n, unsigned depth)
{
    uint64_t sum = 0;
    if (depth > 80)
        return 0;
    const uint8_t *v = bin_rd_resolve(p);
    sum += v[0];
    if (v[0] == BIN_OBJ) {
        bin_fiter it;
        const bin_type *t = bin_registry_get(r, bin_rd_type_id(v));
        if (bin_fiter_init(&it, v, t) == 0) {
            int32_t fid;
            const uint8_t *fv;
            while (bin_fiter_next(&it, &fid, &fv)) {
                const uint8_t *again;
                if (bin_rd_field(v, t, fid, &again) == 0)
                    sum += (uint64_t)(again - v);
                sum += read_all(r, fv, bin_rd_len(fv), depth + 1);
            }
        }
        const uint8_t *raw;
        size_t rl;
        bin_rd_raw(v, &raw, &rl);
        sum += rl;
    }
    bin_seq s;
    if (bin_seq_init(&s, v, NULL) == 0) {
        const uint8_t *e;
        while (bin_seq_next(&s, &e))
            sum += s.elem_size ? e[0] : read_all(r, e, bin_rd_len(e), depth + 1);
    }
    em_buf sc = EM_BUF_INIT, out = EM_BUF_INIT;
    bin_key k;
    if (depth == 0) {
        if (bin_key_prepare(p, n, &sc, &k) == 0)
            sum += (uint32_t)k.hash + k.len;
        sum += (uint32_t)bin_hash(p);
        if (bin_wire_out(p, n, &out) == 0) {
            size_t len;
            if (bin_validate(out.p, out.len, &len, 0) != 0 || len != out.len)
                test_fail(__FILE__, __LINE__, "reply form does not validate");
        }
        const uint8_t *vp;
        size_t vl;
        if (bin_value_prepare(p, n, &sc, &vp, &vl) == 0 && vp[0] == BIN_OBJ) {
            size_t len;
            if (bin_validate(vp, vl, &len, 0) != 0)
                test_fail(__FILE__, __LINE__, "unwrapped value does not validate");
        }
    }
    em_buf_free(&sc);
    em_buf_free(&out);
    return sum;
}

static volatile uint64_t sink;

static void sweep(bin_registry *r, const uint8_t *obj, size_t n, int *accepted)
{
    size_t len;
    REQUIRE_OK(bin_validate(obj, n, &len, 0));
    REQUIRE_EQ(len, n);
    sink += read_all(r, obj, n, 0);
    uint8_t *b = em_malloc(n);
    REQUIRE(b);
    /* every truncation: copied into an exact-size block so ASan sees overreads */
    for (size_t i = 0; i < n; i++) {
        memcpy(b, obj, i);
        int rc = bin_validate(b, i, &len, 0);
        if (rc >= 0)
            test_fail(__FILE__, __LINE__, "truncation at %zu of %zu accepted", i, n);
    }
    static const uint8_t vals[] = {0x00, 0x01, 0x02, 0x03, 0x09, 0x18, 0x19, 0x1b, 0x20, 0x2b,
                                   0x65, 0x66, 0x67, 0x7f, 0x80, 0xfe, 0xff};
    for (size_t i = 0; i < n; i++)
        for (size_t k = 0; k < sizeof vals; k++) {
            memcpy(b, obj, n);
            if (b[i] == vals[k])
                continue;
            b[i] = vals[k];
            if (bin_validate(b, n, &len, 0) == 0) {
                (*accepted)++;
                sink += read_all(r, b, len, 0);
            }
        }
    em_free(b);
}

TEST(binary_corruption_sweep)
{
    bin_registry *r = bin_registry_new();
    REQUIRE(r);
    static const char *const f[] = {"id", "customer", "lines", "tags"};
    static const int32_t c[] = {BIN_LONG, BIN_STRING, BIN_MAP, BIN_OBJ};
    const bin_desc *d;
    REQUIRE_OK(bin_registry_define(r, "Order", f, c, 4, &d));
    em_buf b = EM_BUF_INIT;
    bin_writer w;
    bin_writer_init(&w, r, &b);
    int accepted = 0, objects = 0;
    for (int variant = 0; variant < 6; variant++) {
        em_buf_reset(&b);
        bin_writer_reset(&w, &b);
        w.full_footer = (uint8_t)(variant & 1);
        w.min_width = (uint8_t)(variant < 2 ? 1 : variant < 4 ? 2 : 4);
        bin_w_begin(&w, BIN_COLLECTION, 1);
        bin_w_obj_begin(&w, d);
        bin_w_field_idx(&w, 0); bin_w_long(&w, 5);
        bin_w_field_idx(&w, 1); bin_w_string(&w, "x\xC3\xA9", 3);
        bin_w_field_idx(&w, 2);
        bin_w_begin(&w, BIN_MAP, 1); bin_w_int(&w, 1); bin_w_null(&w); bin_w_end(&w);
        bin_w_field_idx(&w, 3);
        bin_w_treemap_begin(&w); bin_w_int(&w, 1); bin_w_string(&w, "one", 3); bin_w_tree_end(&w);
        bin_w_obj_end(&w);
        bin_w_string(&w, "tail", 4);
        bin_w_end(&w);
        REQUIRE_OK(w.err);
        em_buf sc = EM_BUF_INIT;
        bin_key nk;
        REQUIRE_OK(bin_key_prepare(b.p, b.len, &sc, &nk));
        CHECK(nk.p == b.p);                 /* the writer's nested hashes are Java's */
        em_buf_free(&sc);
        sweep(r, b.p, b.len, &accepted);
        objects++;
    }
    /* hand-made: handles, a 27 wrapper, raw data with a schema, typed arrays */
    static const uint8_t h[] = {24, 3, 0, 0, 0, 1, 9, 2, 0, 0, 0, 'a', 'b', 102, 7, 0, 0, 0,
                                20, 1, 0, 0, 0, 101};
    sweep(r, h, sizeof h, &accepted);
    em_buf_reset(&b);
    bin_writer_reset(&w, &b);
    bin_w_obj_begin(&w, d);
    bin_w_field_idx(&w, 0); bin_w_long(&w, 5);
    bin_w_raw(&w);
    bin_w_raw_int(&w, 77);
    bin_w_obj_end(&w);
    REQUIRE_OK(w.err);
    uint8_t wr[256];
    size_t wn = 0;
    wr[wn++] = 27; em_st32(wr + wn, (uint32_t)b.len); wn += 4;
    memcpy(wr + wn, b.p, b.len); wn += b.len;
    em_st32(wr + wn, 0); wn += 4;
    sweep(r, wr, wn, &accepted);
    sweep(r, b.p, b.len, &accepted);
    objects += 3;
    CHECK(accepted > 0);
    bin_writer_free(&w);
    em_buf_free(&b);
    bin_registry_free(r);
}

/* Seeds for tests/fuzz/corpus/fuzz_binary: each seed is checked here; with
 * EMBER_WRITE_CORPUS=dir set, they are also written there (how the stored
 * corpus was made). Mode byte first: see tests/fuzz/fuzz_binary.c. */
static int nseeds;

static void seed(const char *dir, uint8_t mode, const uint8_t *p, size_t n)
{
    size_t len;
    if (mode == 0 && (bin_validate(p, n, &len, 0) != 0 || len != n))
        test_fail(__FILE__, __LINE__, "seed %d does not validate", nseeds);
    if (mode != 0) {
        bin_type *t;
        if (bin_meta_decode(p, n, &t, &len) != 0)
            test_fail(__FILE__, __LINE__, "seed %d: bad metadata", nseeds);
        else
            bin_type_free(t);
    }
    nseeds++;
    if (!dir)
        return;
    char path[512];
    snprintf(path, sizeof path, "%s/seed-%02d", dir, nseeds);
    FILE *f = fopen(path, "wb");
    if (!f) {
        test_fail(__FILE__, __LINE__, "cannot write %s", path);
        return;
    }
    fputc(mode, f);
    fwrite(p, 1, n, f);
    fclose(f);
}

TEST(binary_fuzz_corpus_seeds)
{
    const char *dir = getenv("EMBER_WRITE_CORPUS");
    bin_registry *r = bin_registry_new();
    REQUIRE(r);
    static const char *const pf[] = {"id", "name"};
    static const int32_t pc[] = {BIN_INT, BIN_STRING};
    const bin_desc *person;
    REQUIRE_OK(bin_registry_define(r, "Person", pf, pc, 2, &person));
    em_buf b = EM_BUF_INIT, m = EM_BUF_INIT;
    bin_writer w;
    bin_writer_init(&w, r, &b);
#define ONE(code) do { em_buf_reset(&b); bin_writer_reset(&w, &b); code; \
        if (w.err) test_fail(__FILE__, __LINE__, "seed writer: %d", w.err); \
        seed(dir, 0, b.p, b.len); } while (0)
    ONE(bin_w_int(&w, 12345));
    ONE(bin_w_long(&w, -1));
    ONE(bin_w_string(&w, "abc", 3));
    ONE(bin_w_string(&w, "h\xC3\xA9llo \xF0\x9F\x98\x80", 11));
    ONE(bin_w_uuid(&w, 0xd57babad7bc14c82ULL, 0x9f9ce72841b92a85ULL));
    ONE(bin_w_timestamp(&w, 1700000000000LL, 5));
    ONE(bin_w_decimal(&w, 2, (const uint8_t *)"\x80\x01\x02", 3));
    ONE(bin_w_binary_enum(&w, 99, 1));
    ONE(bin_w_prim_array(&w, BIN_INT_ARR, "\1\0\0\0\2\0\0\0", 2));
    ONE((bin_w_begin(&w, BIN_STRING_ARR, 0), bin_w_string(&w, "a", 1), bin_w_null(&w), bin_w_end(&w)));
    ONE((bin_w_begin(&w, BIN_MAP, 1), bin_w_int(&w, 1), bin_w_string(&w, "x", 1), bin_w_end(&w)));
    for (int v = 0; v < 6; v++)
        ONE((w.full_footer = (uint8_t)(v & 1), w.min_width = (uint8_t)(v < 2 ? 1 : v < 4 ? 2 : 4),
             bin_w_obj_begin(&w, person), bin_w_field_idx(&w, 0), bin_w_int(&w, 7),
             bin_w_field_idx(&w, 1), bin_w_string(&w, "abc", 3), bin_w_obj_end(&w)));
    w.full_footer = 0;
    w.min_width = 1;
    ONE((bin_w_treemap_begin(&w), bin_w_int(&w, 1), bin_w_string(&w, "one", 3),
         bin_w_int(&w, 2), bin_w_null(&w), bin_w_tree_end(&w)));
    ONE((bin_w_treeset_begin(&w), bin_w_int(&w, 1), bin_w_tree_end(&w)));
    ONE((bin_w_begin(&w, BIN_COLLECTION, 1), bin_w_obj_begin(&w, person), bin_w_field_idx(&w, 0),
         bin_w_int(&w, 1), bin_w_obj_end(&w), bin_w_begin(&w, BIN_OBJ_ARR, -1),
         bin_w_obj_begin(&w, person), bin_w_field_idx(&w, 1), bin_w_string(&w, "n", 1),
         bin_w_obj_end(&w), bin_w_end(&w), bin_w_end(&w)));
    ONE((bin_w_obj_begin(&w, person), bin_w_field_idx(&w, 0), bin_w_int(&w, 3), bin_w_raw(&w),
         bin_w_raw_int(&w, 9), bin_w_string(&w, "raw", 3), bin_w_obj_end(&w)));
    ONE((bin_w_obj_begin(&w, person), bin_w_obj_end(&w)));
    ONE((bin_w_begin(&w, BIN_TIME_ARR, 0), bin_w_time(&w, 5), bin_w_null(&w), bin_w_end(&w)));
    ONE((bin_w_begin(&w, BIN_DECIMAL_ARR, 0), bin_w_decimal(&w, 0, (const uint8_t *)"\x05", 1),
         bin_w_end(&w)));
    ONE((bin_w_begin(&w, BIN_ENUM_ARR, 99), bin_w_enum(&w, 99, 0), bin_w_end(&w)));
    ONE((bin_w_begin(&w, BIN_MAP, 2), bin_w_string(&w, "k", 1), bin_w_treeset_begin(&w),
         bin_w_string(&w, "s", 1), bin_w_tree_end(&w), bin_w_end(&w)));
    ONE((bin_w_prim_array(&w, BIN_DOUBLE_ARR, "\0\0\0\0\0\0\xf0\x3f", 1)));
#undef ONE
    /* Node's Person with hash 1, a handle, a 27 wrapper, deep nesting */
    static const uint8_t node_person[] = {
        0x67, 0x01, 0x2b, 0x00, 0x55, 0x9b, 0xe3, 0xc4, 0x01, 0x00, 0x00, 0x00,
        0x27, 0x00, 0x00, 0x00, 0xf3, 0xf1, 0xdc, 0x39, 0x25, 0x00, 0x00, 0x00,
        0x03, 0x07, 0x00, 0x00, 0x00, 0x09, 0x03, 0x00, 0x00, 0x00, 0x61, 0x62, 0x63, 0x18, 0x1d};
    seed(dir, 0, node_person, sizeof node_person);
    uint8_t wr[64];
    size_t n = 0;
    wr[n++] = 27; em_st32(wr + n, sizeof node_person); n += 4;
    memcpy(wr + n, node_person, sizeof node_person); n += sizeof node_person;
    em_st32(wr + n, 0); n += 4;
    seed(dir, 0, wr, n);
    static const uint8_t h[] = {24, 2, 0, 0, 0, 1, 9, 2, 0, 0, 0, 'a', 'b', 102, 7, 0, 0, 0};
    seed(dir, 0, h, sizeof h);
    uint8_t deep[6 * 40];
    for (int i = 0; i < 40; i++) {
        deep[6 * i] = 24;
        em_st32(deep + 6 * i + 1, i == 39 ? 0 : 1);
        deep[6 * i + 5] = 1;
    }
    seed(dir, 0, deep, sizeof deep);
    /* metadata: Person from the registry, enum type, and meta + object */
    REQUIRE_OK(bin_meta_encode(bin_registry_get(r, person->type_id), &m));
    seed(dir, 2, m.p, m.len);
    bin_enum_val ev[] = {{"RED", 0}, {"GREEN", 1}};
    bin_type et = {.type_id = 55, .name = "Color", .is_enum = 1, .nenums = 2, .enums = ev};
    em_buf_reset(&m);
    REQUIRE_OK(bin_meta_encode(&et, &m));
    seed(dir, 2, m.p, m.len);
    static const char *const of[] = {"a", "b", "c"};
    static const int32_t oc[] = {BIN_LONG, BIN_DOUBLE, BIN_OBJ};
    const bin_desc *other;
    REQUIRE_OK(bin_registry_define(r, "Other", of, oc, 3, &other));
    em_buf_reset(&m);
    REQUIRE_OK(bin_meta_encode(bin_registry_get(r, other->type_id), &m));
    em_buf_reset(&b);
    bin_writer_reset(&w, &b);
    bin_w_obj_begin(&w, other);
    bin_w_field_idx(&w, 0); bin_w_long(&w, 1);
    bin_w_field_idx(&w, 1); bin_w_double(&w, 2.5);
    bin_w_field_idx(&w, 2); bin_w_obj_begin(&w, person); bin_w_field_idx(&w, 0);
    bin_w_int(&w, 1); bin_w_field_idx(&w, 1); bin_w_string(&w, "z", 1); bin_w_obj_end(&w);
    bin_w_obj_end(&w);
    REQUIRE_OK(w.err);
    REQUIRE_OK(em_buf_append(&m, b.p, b.len));
    seed(dir, 1, m.p, m.len);
    CHECK(nseeds >= 30);
    bin_writer_free(&w);
    em_buf_free(&b);
    em_buf_free(&m);
    bin_registry_free(r);
}
