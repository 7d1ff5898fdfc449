/* test_binmeta.c - binary type ops over a real emberd: PUT_BINARY_TYPE
 * (3003) merge semantics, GET_BINARY_TYPE (3002) returning every schema with
 * its field order, field type conflicts, enums, and the type-name ops
 * 3000/3001.  Layouts: shared/reference/ignite-thin-protocol.md §2.6, §3.3.
 */
#include "client.h"
#include "test.h"

#include "util/err.h"

#include <string.h>

#define PERSON_ID ((int32_t)0xC4E39B55)   /* hash("person") */
#define F_ID 3355                         /* hash("id") */
#define F_NAME 3373707                    /* hash("name") */
#define F_AGE 96511                       /* hash("age") */

static int32_t schema_id(const int32_t *ids, int n)
{
    uint32_t s = 0x811C9DC5u;
    for (int i = 0; i < n; i++)
        for (int k = 0; k < 4; k++) {
            s ^= ((uint32_t)ids[i] >> (8 * k)) & 0xff;
            s *= 0x01000193u;
        }
    return (int32_t)s;
}

struct fld { const char *name; int32_t type_code, id; };

/* put_type sends PUT_BINARY_TYPE for "Person" with the given fields and one
 * schema made of them; returns the status (or a negative code). */
static int put_type(tc_conn *c, const struct fld *f, int n)
{
    em_buf b = EM_BUF_INIT;
    tc_reply r;
    tc_req_begin(c, &b, 3003);
    tc_put_i32(&b, PERSON_ID);
    tc_v_str(&b, "Person");
    tc_v_null(&b);
    tc_put_i32(&b, n);
    int32_t ids[8];
    for (int i = 0; i < n; i++) {
        tc_v_str(&b, f[i].name);
        tc_put_i32(&b, f[i].type_code);
        tc_put_i32(&b, f[i].id);
        ids[i] = f[i].id;
    }
    tc_put_u8(&b, 0);                /* not an enum */
    tc_put_i32(&b, 1);
    tc_put_i32(&b, schema_id(ids, n));
    tc_put_i32(&b, n);
    for (int i = 0; i < n; i++)
        tc_put_i32(&b, ids[i]);
    tc_req_end(&b);
    int rc = tc_call(c, &b, &r);
    em_buf_free(&b);
    return rc ? rc : r.status;
}

/* get_type: GET_BINARY_TYPE into *r (payload in c->in). */
static int get_type(tc_conn *c, int32_t type_id, tc_reply *r)
{
    em_buf b = EM_BUF_INIT;
    tc_req_begin(c, &b, 3002);
    tc_put_i32(&b, type_id);
    tc_req_end(&b);
    int rc = tc_call(c, &b, r);
    em_buf_free(&b);
    return rc ? rc : r->status;
}

TEST(binmeta_node_put_bytes_and_merge)
{
    tc_server s;
    REQUIRE_OK(tc_server_start(&s, NULL));
    tc_conn c;
    REQUIRE_OK(tc_open(&c, s.port));
    /* exactly what Node 1.0.0 sends for Person{id:int, name:string} (§2.6) */
    static const uint8_t node_put[] = {
        0x55, 0x9b, 0xe3, 0xc4, 0x09, 0x06, 0, 0, 0, 'P', 'e', 'r', 's', 'o', 'n', 0x65,
        0x02, 0, 0, 0,
        0x09, 0x02, 0, 0, 0, 'i', 'd', 0x03, 0, 0, 0, 0x1b, 0x0d, 0, 0,
        0x09, 0x04, 0, 0, 0, 'n', 'a', 'm', 'e', 0x09, 0, 0, 0, 0x8b, 0x7a, 0x33, 0,
        0x00, 0x01, 0, 0, 0, 0xf3, 0xf1, 0xdc, 0x39, 0x02, 0, 0, 0, 0x1b, 0x0d, 0, 0,
        0x8b, 0x7a, 0x33, 0,
    };
    em_buf b = EM_BUF_INIT;
    tc_reply r;
    tc_req_begin(&c, &b, 3003);
    tc_put_bytes(&b, node_put, sizeof node_put);
    tc_req_end(&b);
    REQUIRE_OK(tc_call(&c, &b, &r));
    CHECK_EQ(r.status, 0);
    CHECK_EQ(r.n, 0);
    em_buf_free(&b);
    /* a second schema adding "age" (Node only sends the new part) */
    struct fld age[] = {{"age", 3, F_AGE}};
    CHECK_EQ(put_type(&c, age, 1), 0);
    /* re-registering an existing schema is harmless */
    struct fld both[] = {{"id", 3, F_ID}, {"name", 9, F_NAME}};
    CHECK_EQ(put_type(&c, both, 2), 0);
    tc_close(&c);

    /* another connection sees the merged type */
    REQUIRE_OK(tc_open(&c, s.port));
    REQUIRE_EQ(get_type(&c, PERSON_ID, &r), 0);
    tc_rd d = tc_rd_of(&r);
    CHECK_EQ(tc_rd_u8(&d), 1);
    CHECK_EQ(tc_rd_i32(&d), PERSON_ID);
    char str[64];
    tc_rd_str(&d, str, sizeof str);
    CHECK(strcmp(str, "Person") == 0);
    CHECK_EQ(tc_rd_u8(&d), 101);                  /* no affinity key */
    int32_t nf = tc_rd_i32(&d);
    CHECK_EQ(nf, 3);
    int have_id = 0, have_name = 0, have_age = 0;
    for (int i = 0; i < nf && !d.err; i++) {
        tc_rd_str(&d, str, sizeof str);
        int32_t tcode = tc_rd_i32(&d), fid = tc_rd_i32(&d);
        if (!strcmp(str, "id")) have_id = tcode == 3 && fid == F_ID;
        if (!strcmp(str, "name")) have_name = tcode == 9 && fid == F_NAME;
        if (!strcmp(str, "age")) have_age = tcode == 3 && fid == F_AGE;
    }
    CHECK(have_id && have_name && have_age);
    CHECK_EQ(tc_rd_u8(&d), 0);                    /* not an enum */
    int32_t ns = tc_rd_i32(&d);
    CHECK_EQ(ns, 2);
    const int32_t ids2[] = {F_ID, F_NAME}, ids1[] = {F_AGE};
    int seen2 = 0, seen1 = 0;
    for (int i = 0; i < ns && !d.err; i++) {
        int32_t sid = tc_rd_i32(&d), cnt = tc_rd_i32(&d);
        int32_t f[8] = {0};
        for (int k = 0; k < cnt && k < 8; k++)
            f[k] = tc_rd_i32(&d);
        if (sid == (int32_t)0x39DCF1F3) {
            seen2++;
            CHECK_EQ(cnt, 2);
            CHECK(!memcmp(f, ids2, sizeof ids2));   /* footer order kept */
        } else if (sid == schema_id(ids1, 1)) {
            seen1++;
            CHECK_EQ(cnt, 1);
            CHECK_EQ(f[0], F_AGE);
        } else {
            test_fail(__FILE__, __LINE__, "unexpected schema id %d", sid);
        }
    }
    CHECK_EQ(seen2, 1);
    CHECK_EQ(seen1, 1);
    CHECK(!d.err);
    CHECK_EQ(d.pos, r.n);

    /* unknown type: bool false and nothing else */
    REQUIRE_EQ(get_type(&c, 424242, &r), 0);
    CHECK_EQ(r.n, 1);
    if (r.n)
        CHECK_EQ(r.p[0], 0);
    tc_close(&c);
    CHECK_EQ(tc_server_stop(&s), 0);
}

TEST(binmeta_field_type_conflict)
{
    tc_server s;
    REQUIRE_OK(tc_server_start(&s, NULL));
    tc_conn c;
    REQUIRE_OK(tc_open(&c, s.port));
    struct fld id_int[] = {{"id", 3, F_ID}};
    struct fld id_str[] = {{"id", 9, F_ID}, {"name", 9, F_NAME}};
    CHECK_EQ(put_type(&c, id_int, 1), 0);
    int st = put_type(&c, id_str, 2);
    CHECK(st > 0);                                 /* an error status, not a close */
    /* the type is unchanged: one field, id:int */
    tc_reply r;
    REQUIRE_EQ(get_type(&c, PERSON_ID, &r), 0);
    tc_rd d = tc_rd_of(&r);
    tc_rd_u8(&d);
    tc_rd_i32(&d);
    char str[32];
    tc_rd_str(&d, str, sizeof str);
    tc_rd_u8(&d);
    CHECK_EQ(tc_rd_i32(&d), 1);
    tc_rd_str(&d, str, sizeof str);
    CHECK_EQ(tc_rd_i32(&d), 3);
    CHECK_OK(tc_create_cache(&c, "still-fine"));
    tc_close(&c);
    CHECK_EQ(tc_server_stop(&s), 0);
}

TEST(binmeta_enum_type)
{
    tc_server s;
    REQUIRE_OK(tc_server_start(&s, NULL));
    tc_conn c;
    REQUIRE_OK(tc_open(&c, s.port));
    int32_t tid = 12345678;
    em_buf b = EM_BUF_INIT;
    tc_reply r;
    tc_req_begin(&c, &b, 3003);
    tc_put_i32(&b, tid);
    tc_v_str(&b, "Color");
    tc_v_null(&b);
    tc_put_i32(&b, 0);
    tc_put_u8(&b, 1);
    tc_put_i32(&b, 3);
    const char *names[] = {"RED", "GREEN", "BLUE"};
    for (int i = 0; i < 3; i++) {
        tc_v_str(&b, names[i]);
        tc_put_i32(&b, i);
    }
    tc_put_i32(&b, 0);
    tc_req_end(&b);
    REQUIRE_OK(tc_call(&c, &b, &r));
    CHECK_EQ(r.status, 0);
    REQUIRE_EQ(get_type(&c, tid, &r), 0);
    tc_rd d = tc_rd_of(&r);
    CHECK_EQ(tc_rd_u8(&d), 1);
    CHECK_EQ(tc_rd_i32(&d), tid);
    char str[32];
    tc_rd_str(&d, str, sizeof str);
    CHECK(strcmp(str, "Color") == 0);
    tc_rd_str(&d, str, sizeof str);
    CHECK_EQ(tc_rd_i32(&d), 0);
    CHECK_EQ(tc_rd_u8(&d), 1);
    REQUIRE_EQ(tc_rd_i32(&d), 3);
    for (int i = 0; i < 3; i++) {
        tc_rd_str(&d, str, sizeof str);
        CHECK(strcmp(str, names[i]) == 0);
        CHECK_EQ(tc_rd_i32(&d), i);
    }
    CHECK_EQ(tc_rd_i32(&d), 0);
    CHECK(!d.err);
    CHECK_EQ(d.pos, r.n);
    /* an enum value (28) of that type round-trips through a cache */
    REQUIRE_OK(tc_create_cache(&c, "enums"));
    tc_req_begin(&c, &b, 1001);
    tc_cache_hdr(&b, tc_cache_id("enums"), 0);
    tc_v_int(&b, 1);
    tc_put_u8(&b, 28);
    tc_put_i32(&b, tid);
    tc_put_i32(&b, 2);
    tc_req_end(&b);
    REQUIRE_OK(tc_call(&c, &b, &r));
    CHECK_EQ(r.status, 0);
    tc_req_begin(&c, &b, 1000);
    tc_cache_hdr(&b, tc_cache_id("enums"), 0);
    tc_v_int(&b, 1);
    tc_req_end(&b);
    REQUIRE_OK(tc_call(&c, &b, &r));
    CHECK_EQ(r.status, 0);
    REQUIRE_EQ(r.n, 9);
    CHECK(r.p[0] == 28 || r.p[0] == 38);
    CHECK_EQ((int32_t)em_ld32(r.p + 1), tid);
    CHECK_EQ((int32_t)em_ld32(r.p + 5), 2);
    em_buf_free(&b);
    tc_close(&c);
    CHECK_EQ(tc_server_stop(&s), 0);
}

TEST(binmeta_type_name_ops)
{
    tc_server s;
    REQUIRE_OK(tc_server_start(&s, NULL));
    tc_conn c;
    REQUIRE_OK(tc_open(&c, s.port));
    em_buf b = EM_BUF_INIT;
    tc_reply r;
    /* REGISTER_BINARY_TYPE_NAME -> bool true */
    tc_req_begin(&c, &b, 3001);
    tc_put_u8(&b, 0);
    tc_put_i32(&b, 777);
    tc_v_str(&b, "org.example.Thing");
    tc_req_end(&b);
    REQUIRE_OK(tc_call(&c, &b, &r));
    CHECK_EQ(r.status, 0);
    CHECK_EQ(r.n, 1);
    if (r.n == 1)
        CHECK_EQ(r.p[0], 1);
    /* GET_BINARY_TYPE_NAME -> typed string */
    tc_req_begin(&c, &b, 3000);
    tc_put_u8(&b, 0);
    tc_put_i32(&b, 777);
    tc_req_end(&b);
    REQUIRE_OK(tc_call(&c, &b, &r));
    CHECK_EQ(r.status, 0);
    tc_rd d = tc_rd_of(&r);
    char str[64];
    tc_rd_str(&d, str, sizeof str);
    CHECK(strcmp(str, "org.example.Thing") == 0);
    CHECK_EQ(d.pos, r.n);
    /* unknown id: an error reply, connection fine */
    tc_req_begin(&c, &b, 3000);
    tc_put_u8(&b, 0);
    tc_put_i32(&b, 778);
    tc_req_end(&b);
    REQUIRE_OK(tc_call(&c, &b, &r));
    CHECK(r.status != 0);
    em_buf_free(&b);
    CHECK_OK(tc_create_cache(&c, "names-ok"));
    tc_close(&c);
    CHECK_EQ(tc_server_stop(&s), 0);
}
