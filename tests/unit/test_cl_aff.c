/* test_cl_aff.c - rendezvous affinity against the vectors of
 * reference/cluster.md §3.4 (computed there with a Java transcription under
 * OpenJDK 17's arithmetic). */
#include "test.h"

#include "cluster/cl_aff.h"
#include "util/err.h"
#include "util/hash.h"
#include "util/mem.h"

#define CHECK_STR(a, b) do {                                                 \
        if (strcmp((a), (b)) != 0) test_fail(__FILE__, __LINE__, "%s: \"%s\" != \"%s\"", #a, (a), (b)); \
    } while (0)

#include <stdio.h>

static void make_nodes(cl_aff_node *nodes, char ids[][32], uint32_t n,
                       const char *fmt, int base)
{
    for (uint32_t i = 0; i < n; i++) {
        snprintf(ids[i], 32, fmt, (int)i + base);
        nodes[i] = (cl_aff_node){ ids[i], strlen(ids[i]), 0, i + 1, i };
    }
}

/* rows_str writes partitions 0..3 as digit strings, e.g. "10,12,02,12". */
static void rows_str(const cl_aff_table *t, char *out)
{
    char *o = out;
    for (uint32_t p = 0; p < 4; p++) {
        if (p)
            *o++ = ',';
        for (uint32_t k = 0; k < t->copies; k++)
            *o++ = (char)('0' + cl_aff_owners(t, p)[k]);
    }
    *o = 0;
}

static void check_primaries(const cl_aff_table *t, const uint32_t *want)
{
    uint32_t cnt[16] = { 0 };
    for (uint32_t p = 0; p < t->parts; p++)
        cnt[cl_aff_owners(t, p)[0]]++;
    for (uint32_t i = 0; i < t->nodes; i++)
        CHECK_EQ(cnt[i], want[i]);
}

TEST(cl_aff_mix_matches_java)
{
    /* "node-a".hashCode() with partition 0, from the reference. */
    CHECK_EQ(em_hash_java_str((const uint8_t *)"node-a", 6), -1040172202);
    CHECK_EQ((int64_t)cl_aff_mix(-1040172202, 0), 2735935638374601795LL);
}

TEST(cl_aff_three_nodes_one_and_two_backups)
{
    cl_aff_node nodes[3];
    const char *names[3] = { "node-a", "node-b", "node-c" };
    for (int i = 0; i < 3; i++)
        nodes[i] = (cl_aff_node){ names[i], 6, 0, (uint64_t)i + 1, (uint64_t)i };
    cl_aff_table t;
    char s[64];
    static const uint32_t prim[3] = { 325, 367, 332 };

    REQUIRE_OK(cl_aff_compute(&t, nodes, 3, 1024, 1, 0));
    rows_str(&t, s);
    CHECK_STR(s, "10,12,02,12");
    check_primaries(&t, prim);
    cl_aff_free(&t);

    REQUIRE_OK(cl_aff_compute(&t, nodes, 3, 1024, 2, 0));
    rows_str(&t, s);
    CHECK_STR(s, "102,120,021,120");
    check_primaries(&t, prim);
    cl_aff_free(&t);
}

TEST(cl_aff_five_address_ids)
{
    cl_aff_node nodes[5];
    char ids[5][32];
    make_nodes(nodes, ids, 5, "127.0.0.1:%d", 47500);
    cl_aff_table t;
    char s[64];
    static const uint32_t prim[5] = { 206, 197, 222, 208, 191 };
    REQUIRE_OK(cl_aff_compute(&t, nodes, 5, 1024, 1, 0));
    rows_str(&t, s);
    CHECK_STR(s, "34,14,03,01");
    check_primaries(&t, prim);
    cl_aff_free(&t);
}

TEST(cl_aff_eight_nodes_4096_parts_three_backups)
{
    cl_aff_node nodes[8];
    char ids[8][32];
    make_nodes(nodes, ids, 8, "n%d", 1);
    cl_aff_table t;
    char s[64];
    static const uint32_t prim[8] = { 564, 502, 506, 505, 495, 516, 508, 500 };
    REQUIRE_OK(cl_aff_compute(&t, nodes, 8, 4096, 3, 0));
    rows_str(&t, s);
    CHECK_STR(s, "5046,6174,0527,5401");
    check_primaries(&t, prim);
    cl_aff_free(&t);
}

TEST(cl_aff_replicated_rows_hold_every_node)
{
    cl_aff_node nodes[5];
    char ids[5][32];
    make_nodes(nodes, ids, 5, "127.0.0.1:%d", 47500);
    cl_aff_table one, all;
    REQUIRE_OK(cl_aff_compute(&one, nodes, 5, 1024, 0, 0));
    REQUIRE_OK(cl_aff_compute(&all, nodes, 5, 1024, CL_AFF_REPLICATED, 1));
    CHECK_EQ(all.copies, 5);
    for (uint32_t p = 0; p < 1024; p++) {
        unsigned seen = 0;
        for (uint32_t k = 0; k < 5; k++)
            seen |= 1u << cl_aff_owners(&all, p)[k];
        CHECK_EQ(seen, 0x1f);
        /* The primary is the same whatever the backups. */
        CHECK_EQ(cl_aff_owners(&all, p)[0], cl_aff_owners(&one, p)[0]);
    }
    cl_aff_free(&one);
    cl_aff_free(&all);
}

TEST(cl_aff_exclude_neighbours_spreads_hosts_and_falls_back)
{
    cl_aff_node nodes[6];
    char ids[6][32];
    make_nodes(nodes, ids, 6, "node-%d", 0);
    for (int i = 0; i < 6; i++)
        nodes[i].host = (uint64_t)(i % 3);       /* three hosts, two nodes each */
    cl_aff_table t;
    REQUIRE_OK(cl_aff_compute(&t, nodes, 6, 512, 2, 1));
    for (uint32_t p = 0; p < 512; p++) {
        const uint16_t *r = cl_aff_owners(&t, p);
        CHECK(nodes[r[0]].host != nodes[r[1]].host);
        CHECK(nodes[r[0]].host != nodes[r[2]].host);
        CHECK(nodes[r[1]].host != nodes[r[2]].host);
    }
    cl_aff_free(&t);

    /* One host for all: neighbourhood cannot be honoured, rows stay full and
     * equal to the plain order. */
    for (int i = 0; i < 6; i++)
        nodes[i].host = 7;
    cl_aff_table plain;
    REQUIRE_OK(cl_aff_compute(&t, nodes, 6, 512, 2, 1));
    REQUIRE_OK(cl_aff_compute(&plain, nodes, 6, 512, 2, 0));
    CHECK(memcmp(t.owner, plain.owner, 512 * 3 * sizeof(uint16_t)) == 0);
    cl_aff_free(&t);
    cl_aff_free(&plain);
}

TEST(cl_aff_ties_break_by_uuid_and_args_are_checked)
{
    /* Two nodes with the same consistent id hash: the order is the UUIDs',
     * compared as signed longs, so the negative msb sorts first. */
    cl_aff_node nodes[2] = {
        { "same", 4, 1, 0, 0 },
        { "same", 4, 0x8000000000000000ull, 0, 1 },
    };
    cl_aff_table t;
    REQUIRE_OK(cl_aff_compute(&t, nodes, 2, 16, 1, 0));
    for (uint32_t p = 0; p < 16; p++)
        CHECK_EQ(cl_aff_owners(&t, p)[0], 1);
    cl_aff_free(&t);

    CHECK_EQ(cl_aff_compute(&t, nodes, 0, 16, 1, 0), EM_INVAL);
    CHECK_EQ(cl_aff_compute(&t, nodes, 2, 0, 1, 0), EM_INVAL);
    CHECK_EQ(cl_aff_compute(&t, nodes, 2, CL_AFF_MAX_PARTS + 1, 1, 0), EM_INVAL);
    em_mem_fail_after(1, 0);
    CHECK_EQ(cl_aff_compute(&t, nodes, 2, 16, 1, 0), EM_NOMEM);
    em_mem_fail_after(0, 0);
    CHECK(t.owner == NULL);
}
