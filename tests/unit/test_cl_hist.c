/* test_cl_hist.c - the history log of historical rebalancing (cl_hist.h):
 * a copy replayed from its WAL claims its last counter, a supplier holding
 * the same updates answers with exactly the ones after it, and every way
 * the answer could be wrong makes it refuse instead: other updates at the
 * claimed counters, a log not reaching back far enough, a gap, a run begun
 * by a counter jump (never claimable), a clear among the updates. */
#include "test.h"

#include <stdio.h>
#include <string.h>

#include "cluster/cl_hist.h"
#include "util/err.h"
#include "wal/wal.h"

/* put: PUT key "k<i % 40>" = "v<i><tag>" with counter i into (7, part). */
static void put(cl_hist *h, uint32_t part, uint64_t i, const char *tag, int replay)
{
    char k[16], v[32];
    snprintf(k, sizeof k, "k%llu", (unsigned long long)(i % 40));
    snprintf(v, sizeof v, "v%llu%s", (unsigned long long)i, tag);
    st_update u = {.kind = ST_UPD_PUT, .cache_id = 7, .partition = part,
                   .key = (const uint8_t *)k, .klen = (uint32_t)strlen(k),
                   .val = (const uint8_t *)v, .vlen = (uint32_t)strlen(v), .cntr = i};
    if (replay)
        cl_hist_note_replayed(h, &u);
    else
        cl_hist_note(h, &u);
}

/* The counters of the records in an answer, checked in order. */
static int answer_is(const em_buf *b, uint32_t n, uint64_t from)
{
    size_t at = 0;
    for (uint32_t i = 0; i < n; i++) {
        if (b->len - at < 4)
            return 0;
        uint32_t l = em_ld32(b->p + at);
        wal_cmd c;
        st_update u;
        st_cache_config cfg;
        if (b->len - at - 4 < l || wal_cmd_unmarshal(b->p + at + 4, l, &c) ||
            wal_decode_update(&c, &u, &cfg) || u.cntr != from + i || u.kind != ST_UPD_PUT)
            return 0;
        at += 4 + l;
    }
    return at == b->len;
}

TEST(cl_hist_claim_and_answer)
{
    cl_hist *d, *s;
    REQUIRE_OK(cl_hist_new(&d, 1u << 20));
    REQUIRE_OK(cl_hist_new(&s, 1u << 20));
    /* The returning copy replayed 1..100; the supplier has 1..160. */
    for (uint64_t i = 1; i <= 100; i++)
        put(d, 3, i, "", 1);
    for (uint64_t i = 1; i <= 160; i++)
        put(s, 3, i, "", 0);
    cl_hist_claim c;
    REQUIRE_OK(cl_hist_get_claim(d, 7, 3, &c));
    CHECK_EQ(c.last, 100);
    CHECK_EQ(c.k, CL_HIST_TAIL);
    em_buf b = EM_BUF_INIT;
    uint32_t n;
    uint64_t last;
    REQUIRE_OK(cl_hist_since(s, 7, 3, &c, &b, &n, &last));
    CHECK_EQ(n, 60);
    CHECK_EQ(last, 160);
    CHECK(answer_is(&b, n, 101));
    /* A run noted live is no claim (what came before it is not known). */
    cl_hist_claim all;
    CHECK_EQ(cl_hist_get_claim(s, 7, 3, &all), EM_NOTFOUND);
    /* Nothing missed: an empty answer, not a refusal. */
    for (uint64_t i = 101; i <= 160; i++)
        put(d, 3, i, "", 0);
    REQUIRE_OK(cl_hist_get_claim(d, 7, 3, &all));
    CHECK_EQ(all.last, 160);
    em_buf_reset(&b);
    REQUIRE_OK(cl_hist_since(s, 7, 3, &all, &b, &n, &last));
    CHECK_EQ(n, 0);
    CHECK_EQ(last, 160);
    CHECK_EQ(b.len, 0);
    all.digest ^= 1;               /* other updates at those counters */
    CHECK_EQ(cl_hist_since(s, 7, 3, &all, &b, &n, &last), EM_NOTFOUND);
    /* Another partition, unknown cache: refused. */
    CHECK_EQ(cl_hist_since(s, 7, 4, &c, &b, &n, &last), EM_NOTFOUND);
    CHECK_EQ(cl_hist_since(s, 8, 3, &c, &b, &n, &last), EM_NOTFOUND);
    em_buf_free(&b);
    cl_hist_free(d);
    cl_hist_free(s);
}

TEST(cl_hist_refuses_what_it_cannot_vouch_for)
{
    cl_hist *d, *s;
    REQUIRE_OK(cl_hist_new(&d, 1u << 20));
    REQUIRE_OK(cl_hist_new(&s, 1u << 20));
    /* A deposed primary's tail: 91..100 are writes the supplier never had;
     * its 91..100 are others. */
    for (uint64_t i = 1; i <= 100; i++)
        put(d, 0, i, i > 90 ? "deposed" : "", 1);
    for (uint64_t i = 1; i <= 120; i++)
        put(s, 0, i, "", 0);
    cl_hist_claim c;
    REQUIRE_OK(cl_hist_get_claim(d, 7, 0, &c));
    em_buf b = EM_BUF_INIT;
    uint32_t n;
    uint64_t last;
    CHECK_EQ(cl_hist_since(s, 7, 0, &c, &b, &n, &last), EM_NOTFOUND);
    CHECK_EQ(b.len, 0);
    /* Ahead of the supplier: refused. */
    cl_hist *s2;
    REQUIRE_OK(cl_hist_new(&s2, 1u << 20));
    for (uint64_t i = 1; i <= 95; i++)
        put(s2, 0, i, "", 0);
    cl_hist_claim c2 = c;
    c2.last = 100;
    CHECK_EQ(cl_hist_since(s2, 7, 0, &c2, &b, &n, &last), EM_NOTFOUND);
    /* A supplier whose run does not reach back to the claimed tail (it
     * starts at 95 after a jump): refused. */
    cl_hist *s3;
    REQUIRE_OK(cl_hist_new(&s3, 1u << 20));
    for (uint64_t i = 95; i <= 130; i++)
        put(s3, 0, i, "", 0);
    cl_hist *d3;
    REQUIRE_OK(cl_hist_new(&d3, 1u << 20));
    for (uint64_t i = 1; i <= 100; i++)
        put(d3, 0, i, "", 1);
    REQUIRE_OK(cl_hist_get_claim(d3, 7, 0, &c));
    CHECK_EQ(cl_hist_since(s3, 7, 0, &c, &b, &n, &last), EM_NOTFOUND);
    /* A jump on the returning copy: what it holds before is unknown. */
    put(d3, 0, 105, "", 0);
    CHECK_EQ(cl_hist_get_claim(d3, 7, 0, &c), EM_NOTFOUND);
    /* A reset (a load left it incomplete): no claim, even as it goes on. */
    cl_hist *d4;
    REQUIRE_OK(cl_hist_new(&d4, 1u << 20));
    for (uint64_t i = 1; i <= 50; i++)
        put(d4, 0, i, "", 1);
    cl_hist_reset(d4, 7, 0);
    put(d4, 0, 51, "", 0);
    CHECK_EQ(cl_hist_get_claim(d4, 7, 0, &c), EM_NOTFOUND);
    /* A clear among the updates to send: refused (it cannot be merged). */
    cl_hist *s5, *d5;
    REQUIRE_OK(cl_hist_new(&s5, 1u << 20));
    REQUIRE_OK(cl_hist_new(&d5, 1u << 20));
    for (uint64_t i = 1; i <= 40; i++) {
        put(d5, 0, i, "", 1);
        put(s5, 0, i, "", 0);
    }
    st_update clr = {.kind = ST_UPD_CLEAR, .cache_id = 7, .partition = 0, .cntr = 41};
    cl_hist_note(s5, &clr);
    put(s5, 0, 42, "", 0);
    REQUIRE_OK(cl_hist_get_claim(d5, 7, 0, &c));
    CHECK_EQ(cl_hist_since(s5, 7, 0, &c, &b, &n, &last), EM_NOTFOUND);
    em_buf_free(&b);
    cl_hist_free(d);
    cl_hist_free(s);
    cl_hist_free(s2);
    cl_hist_free(s3);
    cl_hist_free(d3);
    cl_hist_free(d4);
    cl_hist_free(s5);
    cl_hist_free(d5);
}

TEST(cl_hist_ring_evicts_oldest_and_keeps_runs_true)
{
    cl_hist *s, *d;
    REQUIRE_OK(cl_hist_new(&s, 64u << 10));
    REQUIRE_OK(cl_hist_new(&d, 1u << 20));
    /* 4 partitions interleaved, far more than 64 KiB: only the newest
     * stay, and every partition's run shrinks from its old end. */
    for (uint64_t i = 1; i <= 3000; i++)
        for (uint32_t p = 0; p < 4; p++)
            put(s, p, i, "", 0);
    cl_hist_stats st;
    cl_hist_stats_get(s, &st);
    CHECK(st.evicted > 0);
    CHECK(st.bytes <= 64u << 10);
    CHECK_EQ(st.parts, 4);
    for (uint64_t i = 1; i <= 2990; i++)
        put(d, 2, i, "", 1);
    cl_hist_claim c;
    REQUIRE_OK(cl_hist_get_claim(d, 7, 2, &c));
    em_buf b = EM_BUF_INIT;
    uint32_t n;
    uint64_t last;
    REQUIRE_OK(cl_hist_since(s, 7, 2, &c, &b, &n, &last));
    CHECK_EQ(n, 10);
    CHECK(answer_is(&b, n, 2991));
    /* Long gone from the ring: refused. */
    cl_hist *d2;
    REQUIRE_OK(cl_hist_new(&d2, 1u << 20));
    for (uint64_t i = 1; i <= 100; i++)
        put(d2, 2, i, "", 1);
    REQUIRE_OK(cl_hist_get_claim(d2, 7, 2, &c));
    em_buf_reset(&b);
    CHECK_EQ(cl_hist_since(s, 7, 2, &c, &b, &n, &last), EM_NOTFOUND);
    em_buf_free(&b);
    cl_hist_free(s);
    cl_hist_free(d);
    cl_hist_free(d2);
}
