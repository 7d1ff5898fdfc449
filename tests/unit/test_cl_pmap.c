/* test_cl_pmap.c - the exchange's full map and single message codecs
 * (src/cluster/cl_pmap.c): round trips, every decoder limit, malformed and
 * truncated input, and no allocation on either path. */
#include "test.h"

#include "cluster/cl_pmap.h"
#include "cluster/cl_zip.h"
#include "util/err.h"
#include "util/mem.h"

#define NODES 3
#define GROUPS 2

/* A small map: group 0 with 4 partitions, group 1 with 7, 2 diffs in 1. */
typedef struct small_map {
    cl_meta_uuid ids[NODES];
    uint8_t st0[NODES * 4], st1[NODES * 7];
    uint64_t c0[4], s0[4], c1[7], s1[7];
    cl_pmap_diff d1[2];
    cl_pmap_group g[GROUPS];
    cl_pmap m;
} small_map;

static void small_init(small_map *s)
{
    memset(s, 0, sizeof *s);
    for (int i = 0; i < NODES; i++)
        s->ids[i] = (cl_meta_uuid){0x1111000000000000ULL + (uint64_t)i, 0xabcdef00ULL + (uint64_t)i};
    for (int i = 0; i < NODES * 4; i++)
        s->st0[i] = (uint8_t)(i % CL_PS_COUNT);
    for (int i = 0; i < NODES * 7; i++)
        s->st1[i] = (uint8_t)((i * 5) % CL_PS_COUNT);
    for (int p = 0; p < 4; p++) {
        s->c0[p] = 1000u + (uint64_t)p;
        s->s0[p] = 900u + (uint64_t)p;
    }
    for (int p = 0; p < 7; p++) {
        s->c1[p] = 0x0102030405060708ULL + (uint64_t)p;
        s->s1[p] = (uint64_t)p;
    }
    s->d1[0] = (cl_pmap_diff){2, 6, 77};
    s->d1[1] = (cl_pmap_diff){0, 0, 0xffffffffffffffffULL};
    s->g[0] = (cl_pmap_group){-5, 4, 0, s->st0, s->c0, s->s0, NULL};
    s->g[1] = (cl_pmap_group){0x7fffffff, 7, 2, s->st1, s->c1, s->s1, s->d1};
    s->m = (cl_pmap){0x0123456789abcdefULL, 99, 3, NODES, s->ids, NULL, GROUPS, s->g};
}

static void check_same(const cl_pmap *a, const cl_pmap *b)
{
    CHECK_EQ(a->exch_id, b->exch_id);
    CHECK_EQ(a->major, b->major);
    CHECK_EQ(a->minor, b->minor);
    REQUIRE_EQ(a->nodes, b->nodes);
    REQUIRE_EQ(a->ngroups, b->ngroups);
    for (uint32_t i = 0; i < a->nodes; i++) {
        cl_meta_uuid x = cl_pmap_node(a, i), y = cl_pmap_node(b, i);
        CHECK(x.msb == y.msb && x.lsb == y.lsb);
    }
    for (uint32_t g = 0; g < a->ngroups; g++) {
        const cl_pmap_group *x = &a->g[g], *y = &b->g[g];
        CHECK_EQ(x->grp, y->grp);
        REQUIRE_EQ(x->parts, y->parts);
        REQUIRE_EQ(x->ndiff, y->ndiff);
        for (uint32_t p = 0; p < x->parts; p++) {
            CHECK_EQ(cl_pmap_cntr(x, p), cl_pmap_cntr(y, p));
            CHECK_EQ(cl_pmap_size(x, p), cl_pmap_size(y, p));
            for (uint32_t n = 0; n < a->nodes; n++)
                CHECK_EQ(cl_pmap_state(a, x, n, p), cl_pmap_state(b, y, n, p));
        }
        for (uint32_t k = 0; k < x->ndiff; k++) {
            cl_pmap_diff dx = ((const cl_pmap_diff *)x->diff)[k], dy = cl_pmap_diff_at(y, k);
            CHECK(dx.node == dy.node && dx.part == dy.part && dx.cntr == dy.cntr);
        }
    }
}

TEST(cl_pmap_ps_names)
{
    CHECK(strcmp(cl_ps_name(CL_PS_MOVING), "MOVING") == 0);
    CHECK(strcmp(cl_ps_name(CL_PS_OWNING), "OWNING") == 0);
    CHECK(strcmp(cl_ps_name(CL_PS_LOST), "LOST") == 0);
    CHECK(strcmp(cl_ps_name(CL_PS_NONE), "NONE") == 0);
    CHECK(strcmp(cl_ps_name(6), "?") == 0);
    CHECK(strcmp(cl_ps_name(-1), "?") == 0);
}

TEST(cl_pmap_round_trip)
{
    small_map s;
    small_init(&s);
    em_buf b = EM_BUF_INIT;
    REQUIRE_OK(em_buf_append(&b, "xy", 2));    /* encode appends */
    REQUIRE_OK(cl_pmap_encode(&b, &s.m));
    size_t sz = cl_pmap_size_of(&s.m);
    CHECK_EQ(sz, CL_PMAP_HDR + 16 * NODES + (12 + 3 * 4 + 16 * 4) + (12 + 3 * 7 + 16 * 7 + 16 * 2));
    REQUIRE_EQ(b.len, sz + 2);
    CHECK_MEM(b.p + 2, "EMPF", 4);
    CHECK_EQ(cl_pmap_peek_groups(b.p + 2, sz), GROUPS);
    cl_pmap_group dg[GROUPS];
    cl_pmap d;
    d.g = dg;
    REQUIRE_OK(cl_pmap_decode(b.p + 2, sz, &d, GROUPS));
    CHECK(d.node == NULL);
    check_same(&s.m, &d);
    /* the views point into the bytes */
    CHECK(d.g[0].state >= b.p && d.g[0].state < b.p + b.len);
    CHECK_EQ(cl_pmap_decode(b.p + 2, sz, &d, GROUPS - 1), EM_RANGE);   /* over cap */
    em_buf_free(&b);
}

TEST(cl_pmap_no_groups)
{
    small_map s;
    small_init(&s);
    s.m.ngroups = 0;
    s.m.g = NULL;
    em_buf b = EM_BUF_INIT;
    REQUIRE_OK(cl_pmap_encode(&b, &s.m));
    CHECK_EQ(b.len, CL_PMAP_HDR + 16 * NODES);
    cl_pmap d;
    d.g = NULL;
    REQUIRE_OK(cl_pmap_decode(b.p, b.len, &d, 0));
    CHECK_EQ(d.ngroups, 0);
    CHECK_EQ(cl_pmap_node(&d, 2).lsb, 0xabcdef02ULL);
    em_buf_free(&b);
}

TEST(cl_pmap_truncated_at_every_offset)
{
    small_map s;
    small_init(&s);
    em_buf b = EM_BUF_INIT;
    REQUIRE_OK(cl_pmap_encode(&b, &s.m));
    cl_pmap_group dg[GROUPS];
    cl_pmap d;
    d.g = dg;
    for (size_t n = 0; n < b.len; n++) {
        /* a copy of exactly n bytes, so ASan sees any read past them */
        uint8_t *p = em_malloc(n ? n : 1);
        REQUIRE(p);
        memcpy(p, b.p, n);
        int rc = cl_pmap_decode(p, n, &d, GROUPS);
        if (rc != EM_TRUNCATED)
            test_fail(__FILE__, __LINE__, "truncated at %zu: %s", n, em_errname(rc));
        em_free(p);
    }
    REQUIRE_OK(em_buf_put_u8(&b, 0));
    CHECK_EQ(cl_pmap_decode(b.p, b.len, &d, GROUPS), EM_TRAILING);
    em_buf_free(&b);
}

/* poke: decode a copy of the map with one u32 (or byte) changed. */
static int poke32(const em_buf *b, size_t off, uint32_t v)
{
    uint8_t tmp[1024];
    memcpy(tmp, b->p, b->len);
    em_st32(tmp + off, v);
    cl_pmap_group dg[GROUPS];
    cl_pmap d;
    d.g = dg;
    return cl_pmap_decode(tmp, b->len, &d, GROUPS);
}

static int poke8(const em_buf *b, size_t off, uint8_t v)
{
    uint8_t tmp[1024];
    memcpy(tmp, b->p, b->len);
    tmp[off] = v;
    cl_pmap_group dg[GROUPS];
    cl_pmap d;
    d.g = dg;
    return cl_pmap_decode(tmp, b->len, &d, GROUPS);
}

TEST(cl_pmap_malformed)
{
    small_map s;
    small_init(&s);
    em_buf b = EM_BUF_INIT;
    REQUIRE_OK(cl_pmap_encode(&b, &s.m));
    REQUIRE(b.len < 1024);
    size_t g0 = CL_PMAP_HDR + 16 * NODES;           /* group 0's header */
    size_t g1 = g0 + 12 + 3 * 4 + 16 * 4;           /* group 1's header */
    size_t d1 = g1 + 12 + 3 * 7 + 16 * 7;           /* group 1's diffs */
    CHECK_EQ(poke8(&b, 0, 'X'), EM_PROTO);
    CHECK_EQ(poke32(&b, 24, 0), EM_RANGE);                       /* no nodes */
    CHECK_EQ(poke32(&b, 24, CL_PMAP_MAX_NODES + 1), EM_RANGE);
    CHECK(poke32(&b, 24, 4) != 0);                               /* the rest misread */
    CHECK_EQ(poke32(&b, 24, 40), EM_TRUNCATED);                  /* more ids than bytes */
    CHECK_EQ(poke32(&b, 28, CL_PMAP_MAX_GROUPS + 1), EM_RANGE);
    CHECK_EQ(poke32(&b, 28, 3), EM_RANGE);                       /* over cap */
    CHECK_EQ(poke32(&b, 28, 1), EM_TRAILING);                    /* group 1 left over */
    CHECK_EQ(poke32(&b, g0 + 4, 0), EM_RANGE);                   /* no partitions */
    CHECK_EQ(poke32(&b, g0 + 4, CL_PMAP_MAX_PARTS + 1), EM_RANGE);
    CHECK(poke32(&b, g0 + 4, 5) != 0);
    CHECK_EQ(poke32(&b, g1 + 4, 8), EM_TRUNCATED);               /* more than the bytes */
    CHECK_EQ(poke32(&b, g1 + 8, 3 * 7 + 1), EM_RANGE);           /* diffs over n x P */
    CHECK_EQ(poke32(&b, g1 + 8, 3 * 7), EM_TRUNCATED);
    CHECK_EQ(poke32(&b, g1 + 8, 1), EM_TRAILING);
    CHECK_EQ(poke8(&b, g0 + 12, CL_PS_NONE + 1), EM_RANGE);      /* a state */
    CHECK_EQ(poke8(&b, g1 + 12 + 20, 0xff), EM_RANGE);           /* the last state */
    CHECK_OK(poke8(&b, g1 + 12 + 20, CL_PS_NONE));
    CHECK_EQ(poke32(&b, d1, NODES), EM_RANGE);                   /* diff node */
    CHECK_EQ(poke32(&b, d1 + 16 + 4, 7), EM_RANGE);              /* diff partition */
    CHECK_OK(poke32(&b, d1 + 16 + 4, 6));
    CHECK_EQ(cl_pmap_peek_groups(b.p, CL_PMAP_HDR - 1), 0);
    /* a count the bytes cannot hold (each group >= 12 + 3 + 16 bytes here) */
    uint8_t hdr[CL_PMAP_HDR + 16 * NODES + 2 * 31];
    memcpy(hdr, b.p, sizeof hdr);
    CHECK_EQ(cl_pmap_peek_groups(hdr, sizeof hdr), 2);
    CHECK_EQ(cl_pmap_peek_groups(hdr, sizeof hdr - 1), 0);
    em_st32(hdr + 28, 3);
    CHECK_EQ(cl_pmap_peek_groups(hdr, sizeof hdr), 0);
    em_st32(hdr + 24, 0);
    em_st32(hdr + 28, 0);
    CHECK_EQ(cl_pmap_peek_groups(hdr, sizeof hdr), 0);
    em_buf_free(&b);
}

/* Every byte value at every position of a state block (the decoder checks
 * 8 bytes at a time): rejected iff over CL_PS_NONE. */
TEST(cl_pmap_every_state_byte)
{
    enum { P = 45 };
    uint8_t st[P];
    uint64_t c[P] = {0}, sz[P] = {0};
    cl_meta_uuid id = {1, 2};
    memset(st, CL_PS_OWNING, sizeof st);
    cl_pmap_group g = {1, P, 0, st, c, sz, NULL};
    cl_pmap m = {1, 1, 0, 1, &id, NULL, 1, &g};
    em_buf b = EM_BUF_INIT;
    REQUIRE_OK(cl_pmap_encode(&b, &m));
    size_t st_off = CL_PMAP_HDR + 16 + CL_PMAP_GRP_HDR;
    cl_pmap_group dg;
    cl_pmap d;
    d.g = &dg;
    for (size_t pos = 0; pos < P; pos++) {
        for (int v = 0; v < 256; v++) {
            b.p[st_off + pos] = (uint8_t)v;
            int rc = cl_pmap_decode(b.p, b.len, &d, 1);
            if ((v > CL_PS_NONE) != (rc == EM_RANGE) || (v <= CL_PS_NONE && rc != 0))
                test_fail(__FILE__, __LINE__, "state %d at %zu: %s", v, pos, em_errname(rc));
        }
        b.p[st_off + pos] = CL_PS_OWNING;
    }
    /* the encoder refuses what the decoder would */
    st[44] = 6;
    size_t len = b.len;
    CHECK_EQ(cl_pmap_encode(&b, &m), EM_RANGE);
    CHECK_EQ(b.len, len);
    em_buf_free(&b);
}

TEST(cl_pmap_encode_limits)
{
    small_map s;
    small_init(&s);
    em_buf b = EM_BUF_INIT;
    s.m.nodes = 0;
    CHECK_EQ(cl_pmap_encode(&b, &s.m), EM_RANGE);
    small_init(&s);
    s.g[0].parts = 0;
    CHECK_EQ(cl_pmap_encode(&b, &s.m), EM_RANGE);
    small_init(&s);
    s.d1[1].node = NODES;
    CHECK_EQ(cl_pmap_encode(&b, &s.m), EM_RANGE);
    small_init(&s);
    s.d1[0].part = 7;
    CHECK_EQ(cl_pmap_encode(&b, &s.m), EM_RANGE);
    small_init(&s);
    s.g[1].ndiff = NODES * 7 + 1;
    CHECK_EQ(cl_pmap_encode(&b, &s.m), EM_RANGE);
    CHECK_EQ(b.len, 0);
    em_buf_free(&b);
}

TEST(cl_pmap_no_allocation)
{
    small_map s;
    small_init(&s);
    em_buf b = EM_BUF_INIT;
    REQUIRE_OK(cl_pmap_encode(&b, &s.m));
    /* the one reservation was exact */
    CHECK_EQ(b.cap, cl_pmap_size_of(&s.m));
    cl_pmap_group dg[GROUPS];
    cl_pmap d;
    d.g = dg;
    em_mem_stats a = em_mem_thread();
    for (int i = 0; i < 100; i++) {
        em_buf_reset(&b);
        REQUIRE_OK(cl_pmap_encode(&b, &s.m));
        REQUIRE_OK(cl_pmap_decode(b.p, b.len, &d, GROUPS));
    }
    CHECK_EQ(em_mem_thread().allocs - a.allocs, 0);
    em_buf_free(&b);
}

/* ---- the single message ------------------------------------------------ */

static void single_init(cl_psingle *s, cl_psingle_group *g, cl_psingle_part *p)
{
    p[0] = (cl_psingle_part){0, CL_PS_OWNING, 10, 1, 9, 2};
    p[1] = (cl_psingle_part){3, CL_PS_MOVING, 0xffffffffffffffffULL, 0, 0, 0};
    p[2] = (cl_psingle_part){1023, CL_PS_RENTING, 5, 5, 5, 5};
    g[0] = (cl_psingle_group){7, 1024, 3, p, NULL};
    g[1] = (cl_psingle_group){-1, 16, 0, NULL, NULL};
    *s = (cl_psingle){0xfeedULL, {0xaaaa, 0xbbbb}, 2, g};
}

TEST(cl_psingle_round_trip)
{
    cl_psingle s, d;
    cl_psingle_group g[2], dg[2];
    cl_psingle_part p[3];
    single_init(&s, g, p);
    em_buf b = EM_BUF_INIT;
    REQUIRE_OK(cl_psingle_encode(&b, &s));
    REQUIRE_EQ(b.len, cl_psingle_size_of(&s));
    CHECK_EQ(b.len, CL_PSINGLE_HDR + 2 * CL_PSINGLE_GRP_HDR + 3 * CL_PSINGLE_PART);
    CHECK_EQ(cl_psingle_peek_groups(b.p, b.len), 2);
    CHECK_EQ(cl_pmap_peek_groups(b.p, b.len), 0);      /* not a full map */
    CHECK_EQ(cl_psingle_peek_groups(b.p, CL_PSINGLE_HDR + 2 * CL_PSINGLE_GRP_HDR), 2);
    CHECK_EQ(cl_psingle_peek_groups(b.p, CL_PSINGLE_HDR + 2 * CL_PSINGLE_GRP_HDR - 1), 0);
    d.g = dg;
    REQUIRE_OK(cl_psingle_decode(b.p, b.len, &d, 2));
    CHECK_EQ(d.exch_id, 0xfeed);
    CHECK(d.node.msb == 0xaaaa && d.node.lsb == 0xbbbb);
    REQUIRE_EQ(d.ngroups, 2);
    CHECK_EQ(d.g[0].grp, 7);
    CHECK_EQ(d.g[0].parts, 1024);
    REQUIRE_EQ(d.g[0].k, 3);
    for (uint32_t i = 0; i < 3; i++) {
        cl_psingle_part q = cl_psingle_part_at(&d.g[0], i);
        CHECK(q.part == p[i].part && q.state == p[i].state && q.cntr == p[i].cntr &&
              q.init_cntr == p[i].init_cntr && q.size == p[i].size &&
              q.hist_cntr == p[i].hist_cntr);
    }
    CHECK_EQ(d.g[1].grp, -1);
    CHECK_EQ(d.g[1].k, 0);
    CHECK_EQ(cl_psingle_decode(b.p, b.len, &d, 1), EM_RANGE);
    CHECK_EQ(cl_pmap_decode(b.p, b.len, &(cl_pmap){.g = NULL}, 0), EM_PROTO);
    for (size_t n = 0; n < b.len; n++) {
        uint8_t *t = em_malloc(n ? n : 1);
        REQUIRE(t);
        memcpy(t, b.p, n);
        int rc = cl_psingle_decode(t, n, &d, 2);
        if (rc != EM_TRUNCATED)
            test_fail(__FILE__, __LINE__, "truncated at %zu: %s", n, em_errname(rc));
        em_free(t);
    }
    em_mem_stats a = em_mem_thread();
    em_buf_reset(&b);
    REQUIRE_OK(cl_psingle_encode(&b, &s));
    REQUIRE_OK(cl_psingle_decode(b.p, b.len, &d, 2));
    CHECK_EQ(em_mem_thread().allocs - a.allocs, 0);
    em_buf_free(&b);
}

static int single_poke(const em_buf *b, size_t off, uint32_t v, int width)
{
    uint8_t tmp[512];
    memcpy(tmp, b->p, b->len);
    if (width == 1)
        tmp[off] = (uint8_t)v;
    else
        em_st32(tmp + off, v);
    cl_psingle d;
    cl_psingle_group dg[2];
    d.g = dg;
    return cl_psingle_decode(tmp, b->len, &d, 2);
}

TEST(cl_psingle_malformed)
{
    cl_psingle s;
    cl_psingle_group g[2];
    cl_psingle_part p[3];
    single_init(&s, g, p);
    em_buf b = EM_BUF_INIT;
    REQUIRE_OK(cl_psingle_encode(&b, &s));
    size_t g0 = CL_PSINGLE_HDR, p0 = g0 + CL_PSINGLE_GRP_HDR;
    size_t p1 = p0 + CL_PSINGLE_PART, p2 = p1 + CL_PSINGLE_PART;
    CHECK_EQ(single_poke(&b, 0, 'Z', 1), EM_PROTO);
    CHECK_EQ(single_poke(&b, 28, CL_PMAP_MAX_GROUPS + 1, 4), EM_RANGE);
    CHECK_EQ(single_poke(&b, 28, 1, 4), EM_TRAILING);
    CHECK_EQ(single_poke(&b, g0 + 4, 0, 4), EM_RANGE);                /* P = 0 */
    CHECK_EQ(single_poke(&b, g0 + 4, CL_PMAP_MAX_PARTS + 1, 4), EM_RANGE);
    CHECK_EQ(single_poke(&b, g0 + 4, 2, 4), EM_RANGE);                /* k > P */
    CHECK_EQ(single_poke(&b, g0 + 8, 4, 4), EM_TRUNCATED);
    CHECK_EQ(single_poke(&b, p2, 1024, 4), EM_RANGE);                 /* part >= P */
    CHECK_EQ(single_poke(&b, p1, 0, 4), EM_RANGE);                    /* not ascending */
    CHECK_EQ(single_poke(&b, p2, 3, 4), EM_RANGE);                    /* duplicate */
    CHECK_EQ(single_poke(&b, p1 + 4, CL_PS_NONE + 1, 1), EM_RANGE);   /* state */
    CHECK_OK(single_poke(&b, p1, 2, 4));
    /* the encoder refuses the same */
    p[1].part = 0;
    size_t len = b.len;
    CHECK_EQ(cl_psingle_encode(&b, &s), EM_RANGE);
    p[1].part = 3;
    p[2].state = 9;
    CHECK_EQ(cl_psingle_encode(&b, &s), EM_RANGE);
    p[2].state = 0;
    g[0].k = 3;
    g[0].parts = 2;
    CHECK_EQ(cl_psingle_encode(&b, &s), EM_RANGE);
    CHECK_EQ(b.len, len);
    em_buf_free(&b);
}

/* The whole path a full map takes between two nodes. */
TEST(cl_pmap_through_zip)
{
    small_map s;
    small_init(&s);
    cl_zip *z;
    REQUIRE_OK(cl_zip_new(&z, CL_ZIP_LEVEL));
    em_buf enc = EM_BUF_INIT, wire = EM_BUF_INIT, out = EM_BUF_INIT;
    REQUIRE_OK(cl_pmap_encode(&enc, &s.m));
    REQUIRE_OK(cl_zip_deflate(z, &wire, enc.p, enc.len));
    char why[128] = "";
    REQUIRE_OK(cl_zip_inflate(z, wire.p, wire.len, &out, why, sizeof why));
    cl_pmap_group dg[GROUPS];
    cl_pmap d;
    d.g = dg;
    REQUIRE_OK(cl_pmap_decode(out.p, out.len, &d, cl_pmap_peek_groups(out.p, out.len)));
    check_same(&s.m, &d);
    em_buf_free(&enc);
    em_buf_free(&wire);
    em_buf_free(&out);
    cl_zip_free(z);
}
