/* test_cl_keyset.c - the rebalancing key set: membership by bytes, growth
 * past the first table, reset for the next load. */
#include "test.h"

#include "cluster/cl_keyset.h"
#include "util/err.h"

TEST(cl_keyset_add_has_reset)
{
    cl_keyset s = {0};
    uint8_t k[8];
    CHECK(!cl_keyset_has(&s, (const uint8_t *)"a", 1));
    for (uint32_t i = 0; i < 5000; i++) {
        em_st32(k, i);
        em_st32(k + 4, ~i);
        REQUIRE_OK(cl_keyset_add(&s, k, 8));
    }
    CHECK_EQ(s.cnt, 5000);
    em_st32(k, 17);
    em_st32(k + 4, ~17u);
    REQUIRE_OK(cl_keyset_add(&s, k, 8));          /* there already */
    CHECK_EQ(s.cnt, 5000);
    CHECK(cl_keyset_has(&s, k, 8));
    CHECK(!cl_keyset_has(&s, k, 7));              /* a prefix is another key */
    em_st32(k, 5000);
    em_st32(k + 4, ~5000u);
    CHECK(!cl_keyset_has(&s, k, 8));
    cl_keyset_reset(&s);
    CHECK_EQ(s.cnt, 0);
    em_st32(k, 17);
    em_st32(k + 4, ~17u);
    CHECK(!cl_keyset_has(&s, k, 8));
    REQUIRE_OK(cl_keyset_add(&s, k, 8));
    CHECK(cl_keyset_has(&s, k, 8));
    cl_keyset_free(&s);
    CHECK(!cl_keyset_has(&s, k, 8));
}
