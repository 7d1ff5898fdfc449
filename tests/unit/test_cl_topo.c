/* test_cl_topo.c - a topology's affinity under a baseline (cl_topo.h): a
 * member outside the baseline owns nothing; a baseline node that goes down
 * keeps its place, so every row loses it and nothing else changes (no
 * partition moves); clearing the baseline puts affinity back on the members.
 */
#include "test.h"

#include <string.h>

#include "cluster/cl_meta_fsm.h"
#include "cluster/cl_plan.h"
#include "cluster/cl_topo.h"
#include "util/buf.h"

#define PARTS 256u

typedef struct fx {
    cl_meta_fsm  f;
    uint64_t     index;
    cl_meta_uuid id[4];
    char         cid[4][8];
} fx;

static int apply(fx *x, const em_buf *e)
{
    cl_meta_effect eff;
    return cl_meta_fsm_apply(&x->f, ++x->index, e->p, e->len, NULL, &eff) || eff.status;
}

static int join(fx *x, unsigned k)
{
    x->id[k] = (cl_meta_uuid){ 0x7070000000000000ull | k, 0x1234u + k };
    snprintf(x->cid[k], sizeof x->cid[k], "n%u", k);
    /* Two machines: n0, n3 on one, n1, n2 on the other; excludeNeighbors
     * (a down n2 must stay n1's neighbour, or rows without it change). */
    cl_meta_node_info ni = { .id = x->id[k], .raft_id = k + 1u,
                             .host = (k == 0 || k == 3 ? 1u : 2u) | CL_TOPO_EXCLUDE_NEIGHBORS,
                             .cid = { (const uint8_t *)x->cid[k], (uint32_t)strlen(x->cid[k]) },
                             .raft_addr = { (const uint8_t *)"r", 1 } };
    em_buf e = EM_BUF_INIT;
    int rc = cl_meta_enc_join(&e, &ni) || apply(x, &e);
    em_buf_free(&e);
    return rc;
}

static int baseline(fx *x, const unsigned *ks, uint32_t n)
{
    cl_meta_bytes ids[4];
    for (uint32_t i = 0; i < n; i++)
        ids[i] = (cl_meta_bytes){ (const uint8_t *)x->cid[ks[i]],
                                  (uint32_t)strlen(x->cid[ks[i]]) };
    em_buf e = EM_BUF_INIT;
    int rc = cl_meta_enc_baseline(&e, ids, n) || apply(x, &e);
    em_buf_free(&e);
    return rc;
}

static int fail(fx *x, unsigned k)
{
    em_buf e = EM_BUF_INIT;
    int rc = cl_meta_enc_fail(&e, x->id[k]) || apply(x, &e);
    em_buf_free(&e);
    return rc;
}

/* rows: every partition's ideal owners on t as consistent ids, "a,b;" each. */
static void rows(cl_topo *t, char *out, size_t cap)
{
    cl_plan_group g = { .grp = 1, .parts = PARTS, .backups = 1 };
    size_t at = 0;
    out[0] = 0;
    for (uint32_t p = 0; p < PARTS; p++) {
        uint32_t o[CL_PLAN_MAX_OWNERS];
        uint32_t n = cl_plan_ideal(t, &g, p, o);
        for (uint32_t i = 0; i < n && at + 8 < cap; i++)
            at += (size_t)snprintf(out + at, cap - at, "%s%s", i ? "," : "", t->m[o[i]].cid);
        if (at + 2 < cap)
            at += (size_t)snprintf(out + at, cap - at, ";");
    }
}

/* without: row text with cid dropped from each row. */
static void without(const char *in, const char *cid, char *out)
{
    size_t cl = strlen(cid);
    char *o = out;
    while (*in) {
        const char *end = in + strcspn(in, ",;");
        if (!((size_t)(end - in) == cl && !memcmp(in, cid, cl))) {
            if (o > out && o[-1] != ';')
                *o++ = ',';
            memcpy(o, in, (size_t)(end - in));
            o += end - in;
        }
        if (*end == ';')
            *o++ = ';';
        in = *end ? end + 1 : end;
    }
    *o = 0;
}

TEST(cl_topo_baseline_placement)
{
    static fx x;
    static char r_all[PARTS * 16], r_bl[PARTS * 16], r_down[PARTS * 16], want[PARTS * 16];
    memset(&x, 0, sizeof x);
    cl_meta_fsm_init(&x.f);
    for (unsigned k = 0; k < 4; k++)
        CHECK(join(&x, k) == 0);
    cl_topo *t = cl_topo_build(&x.f, x.id[0], NULL);
    REQUIRE(t);
    CHECK(t->nbl == 0 && t->n == 4);
    uint32_t dn[8];
    CHECK(cl_topo_data_nodes(t, dn, 8) == 4);
    rows(t, r_all, sizeof r_all);
    cl_topo_release(t);

    /* Baseline n0, n1, n2: n3 owns nothing, replicated caches skip it too. */
    const unsigned b3[] = { 0, 1, 2 };
    CHECK(baseline(&x, b3, 3) == 0);
    t = cl_topo_build(&x.f, x.id[0], NULL);
    REQUIRE(t);
    CHECK(t->nbl == 3 && t->n == 4);
    CHECK(cl_topo_data_nodes(t, dn, 8) == 3 && !t->m[3].data);
    rows(t, r_bl, sizeof r_bl);
    CHECK(strstr(r_bl, "n3") == NULL);
    CHECK(strcmp(r_bl, r_all) != 0);
    cl_topo_release(t);

    /* n2 goes down: every row loses it, no other owner changes. */
    CHECK(fail(&x, 2) == 0);
    t = cl_topo_build(&x.f, x.id[0], NULL);
    REQUIRE(t);
    CHECK(t->n == 3 && t->nbl == 3);
    rows(t, r_down, sizeof r_down);
    without(r_bl, "n2", want);
    CHECK(strcmp(r_down, want) == 0);
    /* Rows keep their width: the gap is padding, the owners first. */
    const cl_aff_table *a = cl_topo_affinity(t, PARTS, 1);
    int padded = 0;
    for (uint32_t p = 0; a && p < PARTS; p++) {
        const uint16_t *row = cl_aff_owners(a, p);
        CHECK(row[0] != CL_TOPO_NONE || row[1] == CL_TOPO_NONE);
        padded += row[1] == CL_TOPO_NONE;
    }
    CHECK(a && padded > 0);
    cl_topo_release(t);

    /* Cleared: affinity follows the members (n0, n1, n3) again. */
    CHECK(baseline(&x, NULL, 0) == 0);
    t = cl_topo_build(&x.f, x.id[0], NULL);
    REQUIRE(t);
    CHECK(t->nbl == 0 && cl_topo_data_nodes(t, dn, 8) == 3);
    rows(t, r_down, sizeof r_down);
    CHECK(strstr(r_down, "n3") != NULL && strstr(r_down, "n2") == NULL);
    cl_topo_release(t);
    cl_meta_fsm_free(&x.f);
}

/* owners: commits partition p's row of group 1 - or, with all, every
 * partition's (a group's first entry has them all) - members ks[0..n) in
 * order, the last nm of them MOVING. */
static int owners(fx *x, uint32_t p, const unsigned *ks, uint32_t n, uint32_t nm, int all)
{
    cl_topo *t = cl_topo_build(&x->f, x->id[0], NULL);
    if (!t)
        return -1;
    uint64_t ord[4];
    for (uint32_t i = 0; i < n; i++)
        for (uint32_t m = 0; m < t->n; m++)
            if (cl_meta_uuid_eq(t->m[m].id, x->id[ks[i]]))
                ord[i] = t->m[m].order;
    em_buf e = EM_BUF_INIT;
    cl_meta_owners_enc enc;
    int rc = cl_meta_enc_owners_begin(&enc, &e, cl_topo_last_exchange(t)) ||
             cl_meta_enc_owners_group(&enc, 1, PARTS);
    for (uint32_t q = all ? 0 : p; q <= (all ? PARTS - 1 : p) && !rc; q++)
        rc = cl_meta_enc_owners_part(&enc, q, 0, ord, n, nm);
    rc = rc || cl_meta_enc_owners_end(&enc) || apply(x, &e);
    em_buf_free(&e);
    cl_topo_release(t);
    return rc;
}

/* A loaded copy's report is taken only when it loaded from the partition's
 * primary, and not while that primary has left and the exchange has still
 * to choose the next (the copy may lack writes a surviving owner has). */
TEST(cl_plan_promote_takes_reports_from_the_primary_only)
{
    static fx x;
    memset(&x, 0, sizeof x);
    cl_meta_fsm_init(&x.f);
    for (unsigned k = 0; k < 3; k++)
        CHECK(join(&x, k) == 0);
    cl_plan_group g = { .grp = 1, .parts = PARTS, .backups = 2 };
    em_buf e = EM_BUF_INIT;
    REQUIRE(cl_meta_enc_cache_start(&e, 1, "c", 1) == 0 && apply(&x, &e) == 0);
    em_buf_free(&e);
    const unsigned row[] = { 0, 2, 1 };         /* n0 primary, n2 backup, n1 MOVING */
    REQUIRE(owners(&x, 7, row, 3, 1, 1) == 0);
    cl_topo *t = cl_topo_build(&x.f, x.id[0], NULL);
    REQUIRE(t);
    e = (em_buf)EM_BUF_INIT;
    cl_meta_owners_enc enc;
    CHECK(cl_plan_report_current(t, &g, x.id[0], 7) == 1);
    CHECK(cl_plan_report_current(t, &g, x.id[2], 7) == 0);
    CHECK(cl_meta_enc_owners_begin(&enc, &e, cl_topo_last_exchange(t)) == 0);
    CHECK(cl_plan_promote(t, &enc, &g, x.id[1], x.id[2], 7, NULL, NULL) == 0);
    CHECK(cl_plan_promote(t, &enc, &g, x.id[1], x.id[0], 7, NULL, NULL) == 1);
    cl_topo_release(t);
    em_buf_free(&e);

    /* The primary leaves: n2 heads the row until the exchange decides, and
     * a report from n2 (or from n0, before) is not taken meanwhile. */
    CHECK(fail(&x, 0) == 0);
    t = cl_topo_build(&x.f, x.id[1], NULL);
    REQUIRE(t);
    CHECK(cl_topo_primary_dropped(t, 1, 7) == 1);
    CHECK(cl_plan_report_current(t, &g, x.id[2], 7) == 0);
    e = (em_buf)EM_BUF_INIT;
    CHECK(cl_meta_enc_owners_begin(&enc, &e, cl_topo_last_exchange(t)) == 0);
    CHECK(cl_plan_promote(t, &enc, &g, x.id[1], x.id[2], 7, NULL, NULL) == 0);
    CHECK(cl_plan_promote(t, &enc, &g, x.id[1], x.id[0], 7, NULL, NULL) == 0);
    cl_topo_release(t);
    em_buf_free(&e);

    /* The exchange's row, n2 primary: its reports are taken again. */
    const unsigned row2[] = { 2, 1 };
    REQUIRE(owners(&x, 7, row2, 2, 1, 0) == 0);
    t = cl_topo_build(&x.f, x.id[1], NULL);
    REQUIRE(t);
    CHECK(cl_topo_primary_dropped(t, 1, 7) == 0);
    CHECK(cl_plan_report_current(t, &g, x.id[2], 7) == 1);
    e = (em_buf)EM_BUF_INIT;
    CHECK(cl_meta_enc_owners_begin(&enc, &e, cl_topo_last_exchange(t)) == 0);
    CHECK(cl_plan_promote(t, &enc, &g, x.id[1], x.id[2], 7, NULL, NULL) == 1);
    cl_topo_release(t);
    em_buf_free(&e);
    cl_meta_fsm_free(&x.f);
}
