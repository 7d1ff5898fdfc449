/* test_binary_rw.c - type registry, metadata codec, writer, reader and
 * reply form (bin_wire_out), with the golden values of
 * ../shared/reference/ignite-thin-protocol.md §2.6, §3.2, §3.3, §3.5. */
#include "test.h"

#include "binary/binary.h"
#include "util/err.h"
#include "util/hash.h"
#include "util/mem.h"

/* Node 1.0.0 PUT_BINARY_TYPE for Person{id:int, name:string} (§2.6). */
static const uint8_t PERSON_META[] = {
    0x55, 0x9b, 0xe3, 0xc4, 0x09, 0x06, 0, 0, 0, 'P', 'e', 'r', 's', 'o', 'n', 0x65,
    0x02, 0, 0, 0, 0x09, 0x02, 0, 0, 0, 'i', 'd', 0x03, 0, 0, 0, 0x1b, 0x0d, 0, 0,
    0x09, 0x04, 0, 0, 0, 'n', 'a', 'm', 'e', 0x09, 0, 0, 0, 0x8b, 0x7a, 0x33, 0,
    0x00, 0x01, 0, 0, 0, 0xf3, 0xf1, 0xdc, 0x39, 0x02, 0, 0, 0, 0x1b, 0x0d, 0, 0,
    0x8b, 0x7a, 0x33, 0};

/* §3.2 Person bytes with Java's hash instead of Node's 1. */
static const uint8_t PERSON_JAVA[] = {
    0x67, 0x01, 0x2b, 0x00, 0x55, 0x9b, 0xe3, 0xc4, 0xb7, 0x20, 0xe1, 0x28,
    0x27, 0x00, 0x00, 0x00, 0xf3, 0xf1, 0xdc, 0x39, 0x25, 0x00, 0x00, 0x00,
    0x03, 0x07, 0x00, 0x00, 0x00, 0x09, 0x03, 0x00, 0x00, 0x00, 0x61, 0x62, 0x63,
    0x18, 0x1d};

static const char *const PERSON_F[] = {"id", "name"};
static const int32_t PERSON_C[] = {BIN_INT, BIN_STRING};

TEST(binary_ids_golden)
{
    CHECK_EQ(bin_type_id("Person", 6), -991716523);
    CHECK_EQ(bin_field_id("id", 2), 3355);
    CHECK_EQ(bin_field_id("name", 4), 3373707);
    int32_t f[] = {3355, 3373707};
    CHECK_EQ(bin_schema_id(f, 2), 0x39DCF1F3);
    CHECK_EQ(bin_schema_id(f, 0), 0);
    CHECK_EQ(bin_type_id("BinaryTreeMap", 13), -526400035);
    CHECK_EQ(bin_type_id("binarytreeset", 13), -526394141);
}

TEST(binary_writer_person_golden)
{
    bin_registry *r = bin_registry_new();
    REQUIRE(r);
    const bin_desc *d;
    REQUIRE_OK(bin_registry_define(r, "Person", PERSON_F, PERSON_C, 2, &d));
    CHECK_EQ(d->type_id, -991716523);
    CHECK_EQ(d->schema_id, 0x39DCF1F3);
    em_buf b = EM_BUF_INIT;
    bin_writer w;
    bin_writer_init(&w, r, &b);
    CHECK_OK(bin_w_obj_begin(&w, d));
    CHECK_OK(bin_w_field_idx(&w, 0));
    CHECK_OK(bin_w_int(&w, 7));
    CHECK_OK(bin_w_field(&w, bin_field_id("name", 4)));
    CHECK_OK(bin_w_string(&w, "abc", 3));
    CHECK_OK(bin_w_obj_end(&w));
    REQUIRE_EQ(b.len, sizeof PERSON_JAVA);
    CHECK_MEM(b.p, PERSON_JAVA, sizeof PERSON_JAVA);
    /* full footer: field id + 1-byte offset each */
    em_buf_reset(&b);
    w.full_footer = 1;
    CHECK_OK(bin_w_obj_begin(&w, d));
    CHECK_OK(bin_w_field_idx(&w, 0));
    CHECK_OK(bin_w_int(&w, 7));
    CHECK_OK(bin_w_field_idx(&w, 1));
    CHECK_OK(bin_w_string(&w, "abc", 3));
    CHECK_OK(bin_w_obj_end(&w));
    CHECK_EQ(b.len, 37 + 10);
    CHECK_EQ(em_ld16(b.p + 2), 0x0B);
    size_t len;
    CHECK_OK(bin_validate(b.p, b.len, &len, 0));
    /* out of order: the new schema is registered and a compact footer used */
    em_buf_reset(&b);
    w.full_footer = 0;
    CHECK_OK(bin_w_obj_begin(&w, d));
    CHECK_OK(bin_w_field_idx(&w, 1));
    CHECK_OK(bin_w_string(&w, "abc", 3));
    CHECK_OK(bin_w_field_idx(&w, 0));
    CHECK_OK(bin_w_int(&w, 7));
    CHECK_OK(bin_w_obj_end(&w));
    const bin_type *t = bin_registry_get(r, d->type_id);
    REQUIRE(t);
    CHECK_EQ(t->nschemas, 2);
    const uint8_t *v;
    int64_t iv;
    CHECK_OK(bin_rd_field(b.p, t, 3355, &v));
    CHECK_OK(bin_rd_long(v, &iv));
    CHECK_EQ(iv, 7);
    /* builder misuse */
    bin_writer_reset(&w, &b);
    CHECK_OK(bin_w_obj_begin(&w, d));
    CHECK_EQ(bin_w_int(&w, 1), EM_BUILDER);              /* no field name */
    bin_writer_reset(&w, &b);
    CHECK_EQ(bin_w_end(&w), EM_BUILDER);
    bin_writer_reset(&w, &b);
    CHECK_OK(bin_w_begin(&w, BIN_STRING_ARR, 0));
    CHECK_EQ(bin_w_int(&w, 1), EM_BADTYPE);
    bin_writer_free(&w);
    em_buf_free(&b);
    bin_registry_free(r);
}

TEST(binary_meta_codec_and_merge)
{
    bin_type *t;
    size_t used;
    REQUIRE_OK(bin_meta_decode(PERSON_META, sizeof PERSON_META, &t, &used));
    CHECK_EQ(used, sizeof PERSON_META);
    CHECK_EQ(t->type_id, -991716523);
    CHECK(strcmp(t->name, "Person") == 0);
    CHECK(t->affinity_field == NULL);
    REQUIRE_EQ(t->nfields, 2);
    CHECK(strcmp(t->fields[1].name, "name") == 0);
    CHECK_EQ(t->fields[1].type_code, 9);
    CHECK_EQ(t->fields[1].id, 3373707);
    REQUIRE_EQ(t->nschemas, 1);
    CHECK_EQ(t->schemas[0].id, 0x39DCF1F3);
    CHECK_EQ(t->schemas[0].fids[1], 3373707);
    em_buf b = EM_BUF_INIT;
    REQUIRE_OK(bin_meta_encode(t, &b));
    REQUIRE_EQ(b.len, sizeof PERSON_META);
    CHECK_MEM(b.p, PERSON_META, sizeof PERSON_META);
    for (size_t i = 0; i < sizeof PERSON_META; i++) {
        bin_type *x = NULL;
        CHECK(bin_meta_decode(PERSON_META, i, &x, &used) < 0);
        CHECK(x == NULL);
    }
    /* merging: registry keeps the union, old pointers stay valid */
    bin_registry *r = bin_registry_new();
    REQUIRE(r);
    const bin_type *v1, *v2;
    REQUIRE_OK(bin_registry_put(r, t, &v1));
    CHECK(bin_registry_get(r, t->type_id) == v1);
    REQUIRE_OK(bin_registry_put(r, t, &v2));
    CHECK(v1 == v2);                      /* nothing new: same version */
    /* a second PUT with a new field "age" and a new schema {age} */
    bin_field_meta af = {"age", bin_field_id("age", 3), BIN_INT};
    int32_t afid = af.id;
    bin_schema as = {bin_schema_id(&afid, 1), 1, &afid};
    bin_type t2 = {.type_id = t->type_id, .name = "Person", .nfields = 1, .fields = &af,
                   .nschemas = 1, .schemas = &as};
    REQUIRE_OK(bin_registry_put(r, &t2, &v2));
    CHECK(v1 != v2);
    CHECK_EQ(v2->nfields, 3);
    CHECK_EQ(v2->nschemas, 2);
    CHECK_EQ(v1->nfields, 2);             /* the old version is untouched */
    CHECK(bin_type_schema(v2, 0x39DCF1F3) != NULL);
    CHECK(bin_type_field(v2, afid) != NULL);
    /* GET reply carries everything, in registration order */
    em_buf_reset(&b);
    REQUIRE_OK(bin_meta_encode(v2, &b));
    bin_type *back;
    REQUIRE_OK(bin_meta_decode(b.p, b.len, &back, &used));
    CHECK_EQ(back->nschemas, 2);
    CHECK_EQ(back->schemas[1].fids[0], afid);
    bin_type_free(back);
    /* a field changing type is rejected */
    af.type_code = BIN_STRING;
    CHECK_EQ(bin_registry_put(r, &t2, NULL), EM_FIELDTYPE);
    /* another name under the same id */
    t2.name = "Persona";
    af.type_code = BIN_INT;
    CHECK_EQ(bin_registry_put(r, &t2, NULL), EM_TYPECONFLICT);
    /* untrusted counts */
    uint8_t bad[sizeof PERSON_META];
    memcpy(bad, PERSON_META, sizeof bad);
    em_st32(bad + 16, 0x7FFFFFFF);
    CHECK(bin_meta_decode(bad, sizeof bad, &back, &used) < 0);
    em_st32(bad + 16, (uint32_t)-1);
    CHECK_EQ(bin_meta_decode(bad, sizeof bad, &back, &used), EM_BADLEN);
    bin_type_free(t);
    em_buf_free(&b);
    bin_registry_free(r);
}

TEST(binary_enum_meta_merge)
{
    bin_registry *r = bin_registry_new();
    REQUIRE(r);
    bin_enum_val e1[] = {{"RED", 0}, {"GREEN", 1}};
    bin_type t = {.type_id = 55, .name = "Color", .is_enum = 1, .nenums = 2, .enums = e1};
    const bin_type *v;
    REQUIRE_OK(bin_registry_put(r, &t, &v));
    bin_enum_val e2[] = {{"BLUE", 2}};
    t.enums = e2;
    t.nenums = 1;
    REQUIRE_OK(bin_registry_put(r, &t, &v));
    CHECK_EQ(v->nenums, 3);
    bin_enum_val e3[] = {{"PINK", 1}};
    t.enums = e3;
    CHECK_EQ(bin_registry_put(r, &t, &v), EM_TYPECONFLICT);
    t.is_enum = 0;
    t.nenums = 0;
    CHECK_EQ(bin_registry_put(r, &t, &v), EM_TYPECONFLICT);
    em_buf b = EM_BUF_INIT;
    v = bin_registry_get(r, 55);
    REQUIRE_OK(bin_meta_encode(v, &b));
    bin_type *back;
    size_t used;
    REQUIRE_OK(bin_meta_decode(b.p, b.len, &back, &used));
    CHECK_EQ(back->nenums, 3);
    CHECK(strcmp(back->enums[2].name, "BLUE") == 0);
    bin_type_free(back);
    em_buf_free(&b);
    bin_registry_free(r);
}

TEST(binary_type_names)
{
    bin_registry *r = bin_registry_new();
    REQUIRE(r);
    size_t len;
    CHECK(bin_registry_name_get(r, 0, 5, &len) == NULL);
    CHECK_OK(bin_registry_name_put(r, 0, 5, "com.x.Person", 12));
    CHECK_OK(bin_registry_name_put(r, 0, 5, "com.x.Person", 12));
    CHECK_EQ(bin_registry_name_put(r, 0, 5, "com.y.Person", 12), EM_TYPECONFLICT);
    CHECK_OK(bin_registry_name_put(r, 1, 5, "X.Person", 8));
    const char *n = bin_registry_name_get(r, 0, 5, &len);
    REQUIRE(n);
    CHECK(len == 12 && strcmp(n, "com.x.Person") == 0);
    n = bin_registry_name_get(r, 1, 5, &len);
    CHECK(n && strcmp(n, "X.Person") == 0);
    for (int i = 0; i < 500; i++) {
        char s[16];
        int l = snprintf(s, sizeof s, "T%d", i);
        CHECK_OK(bin_registry_name_put(r, 0, 1000 + i, s, (size_t)l));
    }
    n = bin_registry_name_get(r, 0, 1499, &len);
    CHECK(n && strcmp(n, "T499") == 0);
    bin_registry_free(r);
}

/* write_person writes Person {id 7, name "abc"} into b with the given
 * footer offset width and a full (1) or compact (0) footer. */
static void write_person(bin_writer *w, em_buf *b, const bin_desc *d, int width, int full)
{
    em_buf_reset(b);
    w->min_width = (uint8_t)width;
    w->full_footer = (uint8_t)full;
    CHECK_OK(bin_w_obj_begin(w, d));
    CHECK_OK(bin_w_field_idx(w, 0));
    CHECK_OK(bin_w_int(w, 7));
    CHECK_OK(bin_w_field_idx(w, 1));
    CHECK_OK(bin_w_string(w, "abc", 3));
    CHECK_OK(bin_w_obj_end(w));
}

TEST(binary_reader_fields)
{
    bin_registry *r = bin_registry_new();
    REQUIRE(r);
    const bin_desc *d;
    REQUIRE_OK(bin_registry_define(r, "Person", PERSON_F, PERSON_C, 2, &d));
    const uint8_t *v;
    const char *s;
    size_t sl;
    int64_t iv;
    REQUIRE_OK(bin_rd_field_name(PERSON_JAVA, r, "name", 4, &v));
    REQUIRE_OK(bin_rd_string(v, &s, &sl));
    CHECK(sl == 3 && memcmp(s, "abc", 3) == 0);
    REQUIRE_OK(bin_rd_field_name(PERSON_JAVA, r, "ID", 2, &v));   /* names fold case */
    REQUIRE_OK(bin_rd_long(v, &iv));
    CHECK_EQ(iv, 7);
    CHECK_EQ(bin_rd_field_name(PERSON_JAVA, r, "age", 3, &v), EM_NOFIELD);
    CHECK_EQ(bin_rd_field(PERSON_JAVA, NULL, 3355, &v), EM_BADSCHEMA);
    bin_fiter it;
    int32_t fid;
    REQUIRE_OK(bin_fiter_init(&it, PERSON_JAVA, bin_registry_get(r, d->type_id)));
    CHECK(bin_fiter_next(&it, &fid, &v) && fid == 3355 && v == PERSON_JAVA + 24);
    CHECK(bin_fiter_next(&it, &fid, &v) && fid == 3373707 && v == PERSON_JAVA + 29);
    CHECK(!bin_fiter_next(&it, &fid, &v));
    /* every footer width, compact and full, reads the same */
    em_buf b = EM_BUF_INIT;
    bin_writer w;
    bin_writer_init(&w, r, &b);
    const bin_type *t = bin_registry_get(r, d->type_id);
    for (int width = 1; width <= 4; width *= 2)
        for (int full = 0; full < 2; full++) {
            write_person(&w, &b, d, width, full);
            size_t len;
            REQUIRE_OK(bin_validate(b.p, b.len, &len, 0));
            uint16_t fl = em_ld16(b.p + 2);
            CHECK_EQ(!!(fl & BIN_FLAG_COMPACT), !full);
            CHECK_EQ(!!(fl & BIN_FLAG_OFFSET_1), width == 1);
            CHECK_EQ(!!(fl & BIN_FLAG_OFFSET_2), width == 2);
            CHECK_EQ((int32_t)em_ld32(b.p + 8), 0x28E120B7);
            REQUIRE_OK(bin_rd_field(b.p, full ? NULL : t, 3373707, &v));
            REQUIRE_OK(bin_rd_string(v, &s, &sl));
            CHECK(sl == 3 && memcmp(s, "abc", 3) == 0);
        }
    bin_writer_free(&w);
    em_buf_free(&b);
    bin_registry_free(r);
}

/* bin_floc answers what bin_rd_field answers, for every footer encoding,
 * and never trusts a cached slot for an object that only claims the layout. */
TEST(binary_floc_matches_field)
{
    bin_registry *r = bin_registry_new();
    REQUIRE(r);
    const bin_desc *d;
    REQUIRE_OK(bin_registry_define(r, "Person", PERSON_F, PERSON_C, 2, &d));
    const bin_type *t = bin_registry_get(r, d->type_id);
    em_buf b = EM_BUF_INIT;
    bin_writer w;
    bin_writer_init(&w, r, &b);
    static const int32_t fids[] = {3355, 3373707, 96511};   /* id, name, absent */
    for (int width = 1; width <= 4; width *= 2)
        for (int full = 0; full < 2; full++) {
            write_person(&w, &b, d, width, full);
            for (int f = 0; f < 3; f++) {
                bin_floc fl;
                memset(&fl, 0, sizeof fl);
                const uint8_t *want = NULL, *got = NULL;
                int rc = bin_rd_field(b.p, t, fids[f], &want);
                CHECK_EQ(bin_floc_get(b.p, &fl, &got), EM_AGAIN);
                CHECK_EQ(bin_floc_fill(b.p, t, fids[f], &fl, &got), rc);
                CHECK(rc != 0 || got == want);
                int again = bin_floc_get(b.p, &fl, &got);
                /* absent from a full footer: asked again each time */
                CHECK_EQ(again, rc == EM_NOFIELD && full ? EM_AGAIN : rc);
                CHECK(rc != 0 || got == want);
                if (!full || rc != 0)
                    continue;
                /* The same header with the footer's two entries swapped:
                 * the cached slot now holds the other field. */
                em_buf sw = EM_BUF_INIT;
                REQUIRE_OK(em_buf_append(&sw, b.p, b.len));
                uint32_t soff = em_ld32(sw.p + 20), esz = 4u + (uint32_t)width;
                uint8_t tmp[8];
                memcpy(tmp, sw.p + soff, esz);
                memmove(sw.p + soff, sw.p + soff + esz, esz);
                memcpy(sw.p + soff + esz, tmp, esz);
                CHECK_EQ(bin_floc_get(sw.p, &fl, &got), EM_AGAIN);
                REQUIRE_OK(bin_rd_field(sw.p, t, fids[f], &want));
                CHECK_OK(bin_floc_fill(sw.p, t, fids[f], &fl, &got));
                CHECK(got == want);
                /* another type id: another layout */
                em_st32(sw.p + 4, em_ld32(sw.p + 4) + 1);
                CHECK_EQ(bin_floc_get(sw.p, &fl, &got), EM_AGAIN);
                em_buf_free(&sw);
            }
        }
    bin_writer_free(&w);
    em_buf_free(&b);
    bin_registry_free(r);
}

/* writes one value of every type code inside an object array */
static void write_all(bin_writer *w, const bin_desc *d)
{
    static const int32_t ints[] = {1, -2, 3};
    static const uint8_t bytes[] = {1, 2, 3, 4};
    static const uint8_t mag[] = {0x80, 15};
    bin_w_begin(w, BIN_OBJ_ARR, -1);
    bin_w_byte(w, -5);
    bin_w_short(w, -300);
    bin_w_int(w, 70000);
    bin_w_long(w, -5000000000LL);
    bin_w_float(w, 1.5f);
    bin_w_double(w, -2.25);
    bin_w_char(w, 0x263A);
    bin_w_bool(w, 1);
    bin_w_string(w, "h\xC3\xA9llo", 6);
    bin_w_uuid(w, 0xd57babad7bc14c82ULL, 0x9f9ce72841b92a85ULL);
    bin_w_date(w, 1700000000000LL);
    bin_w_prim_array(w, BIN_BYTE_ARR, bytes, 4);
    bin_w_prim_array(w, BIN_SHORT_ARR, bytes, 2);
    bin_w_prim_array(w, BIN_INT_ARR, ints, 3);
    bin_w_prim_array(w, BIN_LONG_ARR, ints, 1);
    bin_w_prim_array(w, BIN_FLOAT_ARR, ints, 2);
    bin_w_prim_array(w, BIN_DOUBLE_ARR, ints, 1);
    bin_w_prim_array(w, BIN_CHAR_ARR, bytes, 2);
    bin_w_prim_array(w, BIN_BOOL_ARR, bytes, 4);
    bin_w_begin(w, BIN_STRING_ARR, 0); bin_w_string(w, "a", 1); bin_w_null(w); bin_w_end(w);
    bin_w_begin(w, BIN_UUID_ARR, 0); bin_w_uuid(w, 1, 2); bin_w_end(w);
    bin_w_begin(w, BIN_DATE_ARR, 0); bin_w_date(w, 3); bin_w_null(w); bin_w_end(w);
    bin_w_begin(w, BIN_OBJ_ARR, 77); bin_w_int(w, 1); bin_w_end(w);
    bin_w_begin(w, BIN_COLLECTION, 1); bin_w_int(w, 1); bin_w_string(w, "x", 1); bin_w_end(w);
    bin_w_begin(w, BIN_MAP, 1); bin_w_int(w, 1); bin_w_null(w); bin_w_end(w);
    bin_w_enum(w, 99, 2);
    bin_w_begin(w, BIN_ENUM_ARR, 99); bin_w_enum(w, 99, 1); bin_w_binary_enum(w, 99, 0); bin_w_end(w);
    bin_w_decimal(w, 1, mag, 2);
    bin_w_begin(w, BIN_DECIMAL_ARR, 0); bin_w_decimal(w, 0, mag + 1, 1); bin_w_end(w);
    bin_w_timestamp(w, 1700000000000LL, 999999);
    bin_w_begin(w, BIN_TIMESTAMP_ARR, 0); bin_w_timestamp(w, 1, 2); bin_w_end(w);
    bin_w_time(w, 3600000);
    bin_w_begin(w, BIN_TIME_ARR, 0); bin_w_time(w, 1); bin_w_end(w);
    bin_w_binary_enum(w, 99, 3);
    bin_w_null(w);
    bin_w_obj_begin(w, d);
    bin_w_field_idx(w, 0); bin_w_int(w, 7);
    bin_w_field_idx(w, 1); bin_w_string(w, "abc", 3);
    bin_w_obj_end(w);
    bin_w_treemap_begin(w); bin_w_int(w, 1); bin_w_string(w, "one", 3); bin_w_tree_end(w);
    bin_w_treeset_begin(w); bin_w_int(w, 1); bin_w_tree_end(w);
    bin_w_end(w);
}

TEST(binary_roundtrip_every_type)
{
    bin_registry *r = bin_registry_new();
    REQUIRE(r);
    const bin_desc *d;
    REQUIRE_OK(bin_registry_define(r, "Person", PERSON_F, PERSON_C, 2, &d));
    em_buf b = EM_BUF_INIT;
    bin_writer w;
    bin_writer_init(&w, r, &b);
    write_all(&w, d);
    REQUIRE_OK(w.err);
    size_t len;
    REQUIRE_OK(bin_validate(b.p, b.len, &len, 0));
    CHECK_EQ(len, b.len);
    bin_seq s;
    uint32_t n;
    REQUIRE_OK(bin_seq_init(&s, b.p, &n));
    CHECK_EQ(n, 38);
    static const uint8_t codes[] = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17,
                                    18, 19, 20, 21, 22, 23, 24, 25, 28, 29, 30, 31, 33, 34, 36,
                                    37, 38, 101, 103, 103, 103};
    const uint8_t *e;
    for (size_t i = 0; i < sizeof codes; i++) {
        REQUIRE(bin_seq_next(&s, &e));
        CHECK_EQ(e[0], codes[i]);
        size_t el;
        CHECK_OK(bin_validate(e, bin_rd_len(e), &el, 0));
    }
    /* spot-check values */
    REQUIRE_OK(bin_seq_init(&s, b.p, &n));
    int64_t iv;
    double dv;
    bin_seq_next(&s, &e); CHECK_OK(bin_rd_long(e, &iv)); CHECK_EQ(iv, -5);
    bin_seq_next(&s, &e); CHECK_OK(bin_rd_long(e, &iv)); CHECK_EQ(iv, -300);
    bin_seq_next(&s, &e); CHECK_OK(bin_rd_long(e, &iv)); CHECK_EQ(iv, 70000);
    bin_seq_next(&s, &e); CHECK_OK(bin_rd_long(e, &iv)); CHECK_EQ(iv, -5000000000LL);
    bin_seq_next(&s, &e); CHECK_OK(bin_rd_double(e, &dv)); CHECK(dv == 1.5);
    bin_seq_next(&s, &e); CHECK_OK(bin_rd_double(e, &dv)); CHECK(dv == -2.25);
    bin_seq_next(&s, &e); CHECK_OK(bin_rd_long(e, &iv)); CHECK_EQ(iv, 0x263A);
    int bv;
    bin_seq_next(&s, &e); CHECK_OK(bin_rd_bool(e, &bv)); CHECK_EQ(bv, 1);
    /* UUID byte order (§3.1): d57babad-7bc1-4c82-9f9c-e72841b92a85 */
    bin_seq_next(&s, &e);
    bin_seq_next(&s, &e);
    static const uint8_t uu[] = {0x82, 0x4c, 0xc1, 0x7b, 0xad, 0xab, 0x7b, 0xd5,
                                 0x85, 0x2a, 0xb9, 0x41, 0x28, 0xe7, 0x9c, 0x9f};
    CHECK_MEM(e + 1, uu, 16);
    bin_seq_next(&s, &e);
    bin_seq_next(&s, &e);                      /* byte[] */
    bin_seq ps;
    REQUIRE_OK(bin_seq_init(&ps, e, &n));
    CHECK_EQ(n, 4);
    const uint8_t *pe;
    bin_seq_next(&ps, &pe); bin_seq_next(&ps, &pe);
    CHECK_EQ(*pe, 2);
    /* tree map walk */
    REQUIRE_OK(bin_seq_init(&s, b.p, &n));
    for (int i = 0; i < 37; i++)
        bin_seq_next(&s, &e);
    CHECK_EQ(bin_rd_type_id(e), BIN_TYPE_TREEMAP_ID);
    CHECK_EQ(em_ld16(e + 2) & BIN_FLAG_USER_TYPE, 0);
    REQUIRE_OK(bin_seq_init(&ps, e, &n));
    CHECK_EQ(n, 1);
    bin_seq_next(&ps, &pe); CHECK_OK(bin_rd_long(pe, &iv)); CHECK_EQ(iv, 1);
    bin_seq_next(&ps, &pe);
    const char *str;
    size_t sl;
    CHECK_OK(bin_rd_string(pe, &str, &sl));
    CHECK(sl == 3 && memcmp(str, "one", 3) == 0);
    CHECK(!bin_seq_next(&ps, &pe));
    bin_writer_free(&w);
    em_buf_free(&b);
    bin_registry_free(r);
}

TEST(binary_predefined_no_rebuild)
{
    bin_registry *r = bin_registry_new();
    REQUIRE(r);
    const bin_desc *tm = bin_registry_desc(r, BIN_TYPE_TREEMAP_ID);
    const bin_desc *ts = bin_registry_desc(r, BIN_TYPE_TREESET_ID);
    REQUIRE(tm && ts);
    CHECK_EQ(tm->type_id, -526400035);
    CHECK_EQ(ts->type_id, -526394141);
    em_buf b = EM_BUF_INIT;
    bin_writer w;
    bin_writer_init(&w, r, &b);
    em_mem_stats before = {0, 0, 0};
    for (int i = 0; i < 10000; i++) {
        if (i == 1)
            before = em_mem_thread();
        em_buf_reset(&b);
        CHECK(bin_registry_desc(r, BIN_TYPE_TREEMAP_ID) == tm);
        CHECK(bin_registry_desc(r, BIN_TYPE_TREESET_ID) == ts);
        bin_w_treemap_begin(&w);
        for (int k = 0; k < 12; k++) {
            bin_w_int(&w, k);
            bin_w_string(&w, "value", 5);
        }
        bin_w_tree_end(&w);
        bin_w_treeset_begin(&w);
        bin_w_int(&w, i);
        bin_w_tree_end(&w);
        if (w.err)
            break;
    }
    em_mem_stats after = em_mem_thread();
    CHECK_OK(w.err);
    CHECK_EQ(after.allocs - before.allocs, 0);
    CHECK_EQ(after.bytes - before.bytes, 0);
    size_t len;
    CHECK_OK(bin_validate(b.p, b.len, &len, 0));
    bin_writer_free(&w);
    em_buf_free(&b);
    bin_registry_free(r);
}

TEST(binary_wire_out)
{
    em_buf o = EM_BUF_INIT;
    size_t len;
    /* top level: 27 + len + bytes + 0 */
    REQUIRE_OK(bin_wire_out(PERSON_JAVA, sizeof PERSON_JAVA, &o));
    REQUIRE_EQ(o.len, sizeof PERSON_JAVA + 9);
    CHECK_EQ(o.p[0], 27);
    CHECK_EQ(em_ld32(o.p + 1), sizeof PERSON_JAVA);
    CHECK_MEM(o.p + 5, PERSON_JAVA, sizeof PERSON_JAVA);
    CHECK_EQ(em_ld32(o.p + 5 + sizeof PERSON_JAVA), 0);
    CHECK_OK(bin_validate(o.p, o.len, &len, 0));
    /* collection [Person, 5, [Person]] -> elements wrapped at any depth */
    uint8_t c[128];
    size_t n = 0;
    c[n++] = 24; em_st32(c + n, 3); n += 4; c[n++] = 1;
    memcpy(c + n, PERSON_JAVA, sizeof PERSON_JAVA); n += sizeof PERSON_JAVA;
    c[n++] = 3; em_st32(c + n, 5); n += 4;
    c[n++] = 23; em_st32(c + n, (uint32_t)-1); n += 4; em_st32(c + n, 1); n += 4;
    memcpy(c + n, PERSON_JAVA, sizeof PERSON_JAVA); n += sizeof PERSON_JAVA;
    REQUIRE_OK(bin_validate(c, n, &len, 0));
    em_buf_reset(&o);
    REQUIRE_OK(bin_wire_out(c, n, &o));
    CHECK_EQ(o.len, n + 18);
    REQUIRE_OK(bin_validate(o.p, o.len, &len, 0));
    CHECK_EQ(len, o.len);
    CHECK_EQ(o.p[6], 27);
    bin_seq s;
    const uint8_t *e;
    uint32_t cnt;
    REQUIRE_OK(bin_seq_init(&s, o.p, &cnt));
    CHECK_EQ(cnt, 3);
    bin_seq_next(&s, &e);
    CHECK(bin_rd_resolve(e)[0] == 103);
    CHECK_MEM(bin_rd_resolve(e), PERSON_JAVA, sizeof PERSON_JAVA);
    bin_seq_next(&s, &e);
    bin_seq_next(&s, &e);
    CHECK_EQ(e[9], 27);
    /* a handle inside: written unchanged */
    c[n++] = 0;
    em_st32(c + 1, 4);
    n--;
    c[n] = 102; em_st32(c + n + 1, (uint32_t)(n - 6)); n += 5;
    REQUIRE_OK(bin_validate(c, n, &len, 0));
    em_buf_reset(&o);
    REQUIRE_OK(bin_wire_out(c, n, &o));
    CHECK_EQ(o.len, n);
    CHECK_MEM(o.p, c, n);
    /* anything else: unchanged */
    uint8_t i5[] = {3, 5, 0, 0, 0};
    em_buf_reset(&o);
    REQUIRE_OK(bin_wire_out(i5, 5, &o));
    CHECK(o.len == 5 && memcmp(o.p, i5, 5) == 0);
    em_buf_free(&o);
}

/* Elements after a nested container are found where its walk ended:
 * [[5, Person, "x"], Person, [[Person]]] -> all three wrapped; a handle
 * after the nested containers still keeps the value unchanged. */
TEST(binary_wire_out_after_nested_containers)
{
    uint8_t c[256];
    size_t n = 0, len;
    c[n++] = 24; em_st32(c + n, 3); n += 4; c[n++] = 1;
    c[n++] = 24; em_st32(c + n, 3); n += 4; c[n++] = 1;
    c[n++] = 3; em_st32(c + n, 5); n += 4;
    memcpy(c + n, PERSON_JAVA, sizeof PERSON_JAVA); n += sizeof PERSON_JAVA;
    c[n++] = 9; em_st32(c + n, 1); n += 4; c[n++] = 'x';
    memcpy(c + n, PERSON_JAVA, sizeof PERSON_JAVA); n += sizeof PERSON_JAVA;
    c[n++] = 24; em_st32(c + n, 1); n += 4; c[n++] = 1;
    c[n++] = 24; em_st32(c + n, 1); n += 4; c[n++] = 1;
    size_t last = n;
    memcpy(c + n, PERSON_JAVA, sizeof PERSON_JAVA); n += sizeof PERSON_JAVA;
    REQUIRE_OK(bin_validate(c, n, &len, 0));
    REQUIRE_EQ(len, n);
    em_buf o = EM_BUF_INIT;
    REQUIRE_OK(bin_wire_out(c, n, &o));
    REQUIRE_EQ(o.len, n + 27);
    REQUIRE_OK(bin_validate(o.p, o.len, &len, 0));
    CHECK_EQ(len, o.len);
    CHECK_EQ(o.p[12 + 5], 27);                       /* first Person */
    CHECK_EQ(o.p[12 + 5 + 9 + sizeof PERSON_JAVA + 6], 27);   /* second */
    CHECK_EQ(o.p[last + 18], 27);                    /* third, two levels down */
    CHECK_MEM(o.p + last + 18 + 5, PERSON_JAVA, sizeof PERSON_JAVA);
    /* a handle at the end (to the first Person): everything unchanged */
    em_st32(c + 1, 4);
    c[n] = 102; em_st32(c + n + 1, (uint32_t)(n - 17)); n += 5;
    REQUIRE_OK(bin_validate(c, n, &len, 0));
    em_buf_reset(&o);
    REQUIRE_OK(bin_wire_out(c, n, &o));
    CHECK_EQ(o.len, n);
    CHECK_MEM(o.p, c, n);
    em_buf_free(&o);
}
