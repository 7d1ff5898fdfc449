/* test_registry_bounds.c - the type registry under hostile metadata: the
 * merge rules kept by the linear (indexed) merge, the per-type bounds
 * (BIN_MAX_TYPE_*, EM_LIMIT), versions that share memory instead of copying
 * it, failed allocations that leave the registry as it was, and readers
 * walking old versions while a writer grows the type.  Rules: reference
 * §2.6; bounds: reliability.md §5.3.
 */
#include "test.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>

#include "binary/binary.h"
#include "util/err.h"
#include "util/mem.h"

/* A type under construction with n fields "f<i>" (int) and no schemas. */
typedef struct tbuild {
    char (*names)[24];
    bin_field_meta *f;
    bin_schema *s;
    int32_t *fids;
    bin_type t;
} tbuild;

static int tb_init(tbuild *b, int32_t type_id, const char *name, uint32_t from, uint32_t n)
{
    memset(b, 0, sizeof *b);
    b->names = em_malloc((size_t)(n ? n : 1) * sizeof *b->names);
    b->f = em_malloc((size_t)(n ? n : 1) * sizeof *b->f);
    if (!b->names || !b->f)
        return EM_NOMEM;
    for (uint32_t i = 0; i < n; i++) {
        snprintf(b->names[i], sizeof b->names[i], "f%u", from + i);
        b->f[i] = (bin_field_meta){b->names[i], (int32_t)(from + i + 1), BIN_INT};
    }
    b->t.type_id = type_id;
    b->t.name = name;
    b->t.nfields = n;
    b->t.fields = b->f;
    return 0;
}

/* tb_schemas gives b n schemas with ids from, from + 1, ... of one field. */
static int tb_schemas(tbuild *b, uint32_t from, uint32_t n)
{
    b->s = em_malloc((size_t)(n ? n : 1) * sizeof *b->s);
    b->fids = em_malloc((size_t)(n ? n : 1) * sizeof *b->fids);
    if (!b->s || !b->fids)
        return EM_NOMEM;
    for (uint32_t i = 0; i < n; i++) {
        b->fids[i] = (int32_t)(from + i + 1);
        b->s[i] = (bin_schema){(int32_t)(from + i + 1), 1, &b->fids[i]};
    }
    b->t.nschemas = n;
    b->t.schemas = b->s;
    return 0;
}

static void tb_free(tbuild *b)
{
    em_free(b->names);
    em_free(b->f);
    em_free(b->s);
    em_free(b->fids);
}

static void put_str(em_buf *b, const char *s)
{
    em_buf_put_u8(b, BIN_STRING);
    em_buf_put_le32(b, (uint32_t)strlen(s));
    em_buf_append(b, s, strlen(s));
}

TEST(registry_merge_rules_with_indexes)
{
    bin_registry *r = bin_registry_new();
    REQUIRE(r);
    tbuild a, b;
    REQUIRE_OK(tb_init(&a, 700, "Wide", 0, 2000));
    REQUIRE_OK(tb_schemas(&a, 0, 300));
    const bin_type *v1, *v2;
    REQUIRE_OK(bin_registry_put(r, &a.t, &v1));
    CHECK_EQ(v1->nfields, 2000);
    CHECK_EQ(v1->nschemas, 300);
    /* all of it again plus 500 new fields and schemas, some repeated twice */
    REQUIRE_OK(tb_init(&b, 700, "Wide", 1500, 1000));
    REQUIRE_OK(tb_schemas(&b, 200, 300));
    b.s[299] = b.s[250];                /* a schema twice in one put */
    REQUIRE_OK(bin_registry_put(r, &b.t, &v2));
    CHECK_EQ(v2->nfields, 2500);
    CHECK_EQ(v2->nschemas, 499);
    CHECK_EQ(v1->nfields, 2000);        /* the old version is unchanged */
    CHECK(strcmp(v2->fields[2499].name, "f2499") == 0);
    CHECK(bin_type_schema(v2, 499) != NULL);
    CHECK(bin_type_schema(v2, 500) == NULL);
    /* registration order kept: old items first, new in put order */
    CHECK(strcmp(v2->fields[2000].name, "f2000") == 0);
    CHECK_EQ(v2->schemas[300].id, 301);
    /* the same put again changes nothing */
    const bin_type *v3;
    REQUIRE_OK(bin_registry_put(r, &b.t, &v3));
    CHECK(v3 == v2);
    /* a field far back that changes type fails the whole put */
    b.f[0].type_code = BIN_LONG;        /* f1500 */
    b.f[999] = (bin_field_meta){"brand-new", 99999, BIN_INT};
    CHECK_EQ(bin_registry_put(r, &b.t, &v3), EM_FIELDTYPE);
    CHECK(bin_registry_get(r, 700) == v2);
    /* one name twice in one put with two type codes */
    b.f[0].type_code = BIN_INT;
    b.f[998] = (bin_field_meta){"brand-new", 99999, BIN_STRING};
    CHECK_EQ(bin_registry_put(r, &b.t, &v3), EM_FIELDTYPE);
    CHECK(bin_registry_get(r, 700) == v2);
    /* name and enum flag must match */
    b.t.name = "Wider";
    CHECK_EQ(bin_registry_put(r, &b.t, NULL), EM_TYPECONFLICT);
    b.t.name = "Wide";
    b.t.is_enum = 1;
    CHECK_EQ(bin_registry_put(r, &b.t, NULL), EM_TYPECONFLICT);
    b.t.is_enum = 0;
    /* affinity field: set once, then fixed */
    bin_type aff = {.type_id = 700, .name = "Wide", .affinity_field = "f3"};
    REQUIRE_OK(bin_registry_put(r, &aff, &v3));
    CHECK(v3->affinity_field && strcmp(v3->affinity_field, "f3") == 0);
    CHECK_EQ(v3->nfields, 2500);
    aff.affinity_field = "f4";
    CHECK_EQ(bin_registry_put(r, &aff, NULL), EM_TYPECONFLICT);
    tb_free(&a);
    tb_free(&b);
    bin_registry_free(r);
}

TEST(registry_enum_rules_with_indexes)
{
    bin_registry *r = bin_registry_new();
    REQUIRE(r);
    bin_enum_val e[] = {{"A", 1}, {"B", 2}, {"A", 1}};
    bin_type t = {.type_id = 71, .name = "E", .is_enum = 1, .nenums = 3, .enums = e};
    const bin_type *v;
    REQUIRE_OK(bin_registry_put(r, &t, &v));
    CHECK_EQ(v->nenums, 2);             /* the repeat is kept once */
    bin_enum_val same_ord[] = {{"C", 3}, {"D", 3}};
    t.enums = same_ord;
    t.nenums = 2;
    CHECK_EQ(bin_registry_put(r, &t, NULL), EM_TYPECONFLICT);
    bin_enum_val same_name[] = {{"C", 3}, {"C", 4}};
    t.enums = same_name;
    CHECK_EQ(bin_registry_put(r, &t, NULL), EM_TYPECONFLICT);
    bin_enum_val vs_old[] = {{"C", 3}, {"A", 2}};
    t.enums = vs_old;
    CHECK_EQ(bin_registry_put(r, &t, NULL), EM_TYPECONFLICT);
    CHECK_EQ(bin_registry_get(r, 71)->nenums, 2);
    bin_enum_val more[] = {{"C", 3}, {"B", 2}};
    t.enums = more;
    REQUIRE_OK(bin_registry_put(r, &t, &v));
    CHECK_EQ(v->nenums, 3);
    CHECK(strcmp(v->enums[2].name, "C") == 0);
    bin_registry_free(r);
}

/* A metadata record (§2.6) with n fields "f<i>", the last one named like
 * the first when dup is set. */
static void record(em_buf *b, int32_t nfields, uint32_t real, int dup, int32_t nschemas)
{
    em_buf_reset(b);
    em_buf_put_le32(b, 900);
    put_str(b, "Rec");
    em_buf_put_u8(b, BIN_NULL);
    em_buf_put_le32(b, (uint32_t)nfields);
    for (uint32_t i = 0; i < real; i++) {
        char n[24];
        snprintf(n, sizeof n, "f%u", dup && i == real - 1 ? 0 : i);
        put_str(b, n);
        em_buf_put_le32(b, BIN_INT);
        em_buf_put_le32(b, i + 1);
    }
    em_buf_put_u8(b, 0);
    em_buf_put_le32(b, (uint32_t)nschemas);
}

TEST(registry_decode_bounds_and_duplicates)
{
    em_buf b = EM_BUF_INIT;
    bin_type *t = NULL;
    size_t used;
    /* a repeated name far apart is still found */
    record(&b, 3000, 3000, 1, 0);
    CHECK_EQ(bin_meta_decode(b.p, b.len, &t, &used), EM_BADSCHEMA);
    record(&b, 3000, 3000, 0, 0);
    REQUIRE_OK(bin_meta_decode(b.p, b.len, &t, &used));
    CHECK_EQ(t->nfields, 3000);
    bin_type_free(t);
    /* counts past the per-type bounds are refused before any allocation,
     * even when the bytes would hold them */
    record(&b, BIN_MAX_TYPE_FIELDS + 1, BIN_MAX_TYPE_FIELDS + 1, 0, 0);
    em_mem_stats m0 = em_mem_thread();
    CHECK_EQ(bin_meta_decode(b.p, b.len, &t, &used), EM_LIMIT);
    CHECK_EQ(em_mem_thread().allocs - m0.allocs, 0);
    record(&b, BIN_MAX_TYPE_FIELDS, BIN_MAX_TYPE_FIELDS, 0, 0);
    REQUIRE_OK(bin_meta_decode(b.p, b.len, &t, &used));
    bin_type_free(t);
    record(&b, 0, 0, 0, BIN_MAX_TYPE_SCHEMAS + 1);
    for (uint32_t i = 0; i <= BIN_MAX_TYPE_SCHEMAS; i++) {
        em_buf_put_le32(&b, i + 1);
        em_buf_put_le32(&b, 0);
    }
    CHECK_EQ(bin_meta_decode(b.p, b.len, &t, &used), EM_LIMIT);
    em_buf_free(&b);
}

TEST(registry_type_bounds)
{
    bin_registry *r = bin_registry_new();
    REQUIRE(r);
    tbuild a;
    /* one put past the field bound */
    REQUIRE_OK(tb_init(&a, 800, "Big", 0, BIN_MAX_TYPE_FIELDS + 1));
    CHECK_EQ(bin_registry_put(r, &a.t, NULL), EM_LIMIT);
    CHECK(bin_registry_get(r, 800) == NULL);
    /* up to the bound in two puts, then one more field */
    a.t.nfields = BIN_MAX_TYPE_FIELDS - 10;
    REQUIRE_OK(bin_registry_put(r, &a.t, NULL));
    a.t.fields = a.f + BIN_MAX_TYPE_FIELDS - 10;
    a.t.nfields = 10;
    REQUIRE_OK(bin_registry_put(r, &a.t, NULL));
    CHECK_EQ(bin_registry_get(r, 800)->nfields, BIN_MAX_TYPE_FIELDS);
    a.t.fields = a.f + BIN_MAX_TYPE_FIELDS;
    a.t.nfields = 1;
    CHECK_EQ(bin_registry_put(r, &a.t, NULL), EM_LIMIT);
    tb_free(&a);
    /* schemas */
    tbuild s;
    REQUIRE_OK(tb_init(&s, 801, "Shapes", 0, 0));
    REQUIRE_OK(tb_schemas(&s, 0, BIN_MAX_TYPE_SCHEMAS + 1));
    s.t.nschemas = BIN_MAX_TYPE_SCHEMAS;
    REQUIRE_OK(bin_registry_put(r, &s.t, NULL));
    s.t.schemas = s.s + BIN_MAX_TYPE_SCHEMAS;
    s.t.nschemas = 1;
    CHECK_EQ(bin_registry_put(r, &s.t, NULL), EM_LIMIT);
    CHECK_EQ(bin_registry_get(r, 801)->nschemas, BIN_MAX_TYPE_SCHEMAS);
    tb_free(&s);
    /* bytes kept: long names run into BIN_MAX_TYPE_BYTES */
    size_t nl = (size_t)1 << 20;
    char *name = em_malloc(nl + 1);
    REQUIRE(name);
    int rc = 0;
    uint32_t i;
    for (i = 0; i < 64 && !rc; i++) {
        memset(name, 'a' + (int)(i % 26), nl);
        name[nl] = 0;
        name[0] = (char)('A' + (int)(i / 26));
        bin_field_meta f = {name, (int32_t)i, BIN_INT};
        bin_type t = {.type_id = 802, .name = "Names", .nfields = 1, .fields = &f};
        rc = bin_registry_put(r, &t, NULL);
    }
    CHECK_EQ(rc, EM_LIMIT);
    CHECK_EQ(i - 1, BIN_MAX_TYPE_BYTES / (nl + 1));
    em_free(name);
    bin_registry_free(r);
}

/* Adding one field at a time keeps every version, but the versions share
 * their arrays: memory grows with the fields, not with fields squared (the
 * copy-per-version registry held ~240 MB here). */
TEST(registry_versions_share_memory)
{
    bin_registry *r = bin_registry_new();
    REQUIRE(r);
    tbuild a;
    REQUIRE_OK(tb_init(&a, 810, "Grow", 0, 4000));
    int64_t live0 = em_mem_live_bytes();
    const bin_type *v10 = NULL, *v;
    a.t.nfields = 1;
    for (uint32_t i = 0; i < 4000; i++) {
        a.t.fields = a.f + i;
        REQUIRE_OK(bin_registry_put(r, &a.t, &v));
        if (i == 9)
            v10 = v;
    }
    int64_t grown = em_mem_live_bytes() - live0;
    CHECK(grown < 4000 * 256);
    CHECK_EQ(v->nfields, 4000);
    CHECK_EQ(v10->nfields, 10);         /* old versions stay readable */
    CHECK(strcmp(v10->fields[9].name, "f9") == 0);
    CHECK(bin_type_field(v, 4000) != NULL);
    CHECK(bin_type_field(v10, 11) == NULL);
    tb_free(&a);
    bin_registry_free(r);
}

/* Every allocation of a put may fail; a failed put changes nothing. */
TEST(registry_put_fails_cleanly)
{
    bin_registry *r = bin_registry_new();
    REQUIRE(r);
    tbuild a, b;
    REQUIRE_OK(tb_init(&a, 820, "Oom", 0, 100));
    REQUIRE_OK(tb_schemas(&a, 0, 50));
    REQUIRE_OK(bin_registry_put(r, &a.t, NULL));
    REQUIRE_OK(tb_init(&b, 820, "Oom", 90, 500));
    REQUIRE_OK(tb_schemas(&b, 40, 500));
    int rc = EM_NOMEM;
    uint64_t n;
    for (n = 1; n < 200 && rc == EM_NOMEM; n++) {
        const bin_type *before = bin_registry_get(r, 820);
        em_mem_fail_after(n, 0);
        rc = bin_registry_put(r, &b.t, NULL);
        em_mem_fail_after(0, 0);
        if (rc == EM_NOMEM) {
            CHECK(bin_registry_get(r, 820) == before);
            CHECK_EQ(before->nfields, 100);
        }
    }
    CHECK_OK(rc);
    CHECK(n > 2);
    const bin_type *v = bin_registry_get(r, 820);
    CHECK_EQ(v->nfields, 590);
    CHECK_EQ(v->nschemas, 540);
    tb_free(&a);
    tb_free(&b);
    bin_registry_free(r);
}

/* Readers walk whatever version they got while a writer grows the type
 * (and its arrays move); entries they can see never change. */
typedef struct rd_arg {
    bin_registry *r;
    atomic_int stop;
    int bad;
    uint64_t reads;
} rd_arg;

static void *reader_main(void *p)
{
    rd_arg *a = p;
    while (!atomic_load(&a->stop)) {
        const bin_type *t = bin_registry_get(a->r, 830);
        if (!t)
            continue;
        for (uint32_t i = 0; i < t->nfields; i++) {
            char n[24];
            snprintf(n, sizeof n, "f%u", i);
            if (t->fields[i].id != (int32_t)i + 1 || strcmp(t->fields[i].name, n) != 0)
                a->bad++;
        }
        for (uint32_t i = 0; i < t->nschemas; i++)
            if (t->schemas[i].id != (int32_t)i + 1 || t->schemas[i].fids[0] != (int32_t)i + 1)
                a->bad++;
        a->reads++;
    }
    return NULL;
}

TEST(registry_readers_during_growth)
{
    bin_registry *r = bin_registry_new();
    REQUIRE(r);
    tbuild a;
    REQUIRE_OK(tb_init(&a, 830, "Live", 0, 1500));
    REQUIRE_OK(tb_schemas(&a, 0, 1500));
    rd_arg arg = {.r = r};
    pthread_t th;
    REQUIRE(pthread_create(&th, NULL, reader_main, &arg) == 0);
    a.t.nfields = 1;
    a.t.nschemas = 1;
    for (uint32_t i = 0; i < 1500; i++) {
        a.t.fields = a.f + i;
        a.t.schemas = a.s + i;
        CHECK_OK(bin_registry_put(r, &a.t, NULL));
    }
    atomic_store(&arg.stop, 1);
    pthread_join(th, NULL);
    CHECK_EQ(arg.bad, 0);
    CHECK_EQ(bin_registry_get(r, 830)->nfields, 1500);
    tb_free(&a);
    bin_registry_free(r);
}
