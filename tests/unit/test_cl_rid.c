/* test_cl_rid.c - the window of recent request ids (src/cluster/cl_rid.c)
 * and PR_OP_RID_CALL on a member's forwarded-request connection: a write
 * forwarded twice under one origin request id runs once, and the retry
 * gets the first run's reply; an id learned from replication answers from
 * the update instead of deciding again.
 */
#include "test.h"
#include "proto_env.h"

#include <pthread.h>
#include <string.h>

#include "cluster/cl_rid.h"
#include "proto/proto.h"
#include "proto/proto_int.h"
#include "util/err.h"
#include "util/hash.h"

TEST(cl_rid_claim_finish_and_retry)
{
    cl_rids *w;
    REQUIRE(cl_rids_new(&w) == 0);
    cl_rid a = { 7, 1 }, b = { 7, 2 };
    cl_rid_res res;
    CHECK_EQ(cl_rids_claim(w, a, 1002, 0, &res), CL_RID_NEW);
    cl_rids_finish(w, a, 1, 0, (const uint8_t *)"\1", 1);
    memset(&res, 0, sizeof res);
    CHECK_EQ(cl_rids_claim(w, a, 1002, 0, &res), CL_RID_DONE);
    CHECK_EQ(res.status, 0);
    CHECK_EQ(res.len, 1);
    CHECK_EQ(res.data[0], 1);
    /* An error without effect is forgotten: the retry runs it. */
    CHECK_EQ(cl_rids_claim(w, b, 1001, 0, &res), CL_RID_NEW);
    cl_rids_finish(w, b, 0, 1, (const uint8_t *)"no", 2);
    CHECK_EQ(cl_rids_claim(w, b, 1001, 0, &res), CL_RID_NEW);
    /* ... an error after an effect is kept, message and status. */
    cl_rids_finish(w, b, 1, 1, (const uint8_t *)"timed out", 9);
    CHECK_EQ(cl_rids_claim(w, b, 1001, 0, &res), CL_RID_DONE);
    CHECK_EQ(res.status, 1);
    CHECK(res.len == 9 && memcmp(res.data, "timed out", 9) == 0);
    /* Still running: the retry waits, bounded, then says so. */
    cl_rid c = { 8, 1 };
    CHECK_EQ(cl_rids_claim(w, c, 1001, 0, &res), CL_RID_NEW);
    CHECK_EQ(cl_rids_claim(w, c, 1001, 20, &res), CL_RID_BUSY);
    /* Learned from replication. */
    cl_rid d = { 9, 1 };
    cl_rids_learn(w, d, 1016);
    CHECK_EQ(cl_rids_claim(w, d, 1016, 0, &res), CL_RID_APPLIED);
    CHECK_EQ(res.op, 1016);
    cl_rids_stats st;
    cl_rids_stats_get(w, &st);
    CHECK_EQ(st.retries_done, 2);
    CHECK_EQ(st.retries_applied, 1);
    CHECK_EQ(st.busy, 1);
    cl_rids_free(w);
}

typedef struct waiter_arg { cl_rids *w; cl_rid id; int rc; cl_rid_res res; } waiter_arg;
static void *claim_thread(void *arg)
{
    waiter_arg *a = arg;
    a->rc = cl_rids_claim(a->w, a->id, 1002, 60000, &a->res);
    return NULL;
}

TEST(cl_rid_retry_waits_for_the_running_first_attempt)
{
    cl_rids *w;
    REQUIRE(cl_rids_new(&w) == 0);
    waiter_arg a = { w, { 3, 3 }, -1, { 0 } };
    cl_rid_res res;
    CHECK_EQ(cl_rids_claim(w, a.id, 1002, 0, &res), CL_RID_NEW);
    pthread_t t;
    REQUIRE(pthread_create(&t, NULL, claim_thread, &a) == 0);
    /* Whether the waiter is asleep yet or not, it sees the outcome. */
    cl_rids_finish(w, a.id, 1, 0, (const uint8_t *)"\0", 1);
    pthread_join(t, NULL);
    CHECK_EQ(a.rc, CL_RID_DONE);
    CHECK(a.res.len == 1 && a.res.data[0] == 0);
    cl_rids_free(w);
}

TEST(cl_rid_window_is_bounded_oldest_first)
{
    cl_rids *w;
    REQUIRE(cl_rids_new(&w) == 0);
    cl_rid_res res;
    uint64_t n = (uint64_t)CL_RID_STRIPES * CL_RID_PER_STRIPE * 2;
    for (uint64_t i = 1; i <= n; i++)
        cl_rids_learn(w, (cl_rid){ 1, i }, 1001);
    cl_rids_stats st;
    cl_rids_stats_get(w, &st);
    CHECK(st.evicted >= n / 2);
    /* The newest are kept, the oldest are gone. */
    CHECK_EQ(cl_rids_claim(w, (cl_rid){ 1, n }, 1001, 0, &res), CL_RID_APPLIED);
    CHECK_EQ(cl_rids_claim(w, (cl_rid){ 1, 1 }, 1001, 0, &res), CL_RID_NEW);
    cl_rids_free(w);
}

/* ---- through the protocol ---- */

static const char CACHE[] = "rids";

static void key_req(em_buf *b, int op, int32_t k)
{
    em_buf_reset(b);
    em_buf_put_le16(b, (uint16_t)op);
    em_buf_put_le64(b, 77);
    em_buf_put_le32(b, (uint32_t)em_hash_java_str((const uint8_t *)CACHE, strlen(CACHE)));
    em_buf_put_u8(b, 0);
    em_buf_put_u8(b, 3);
    em_buf_put_le32(b, (uint32_t)k);
}

static void int_val(em_buf *b, int32_t v)
{
    em_buf_put_u8(b, 3);
    em_buf_put_le32(b, (uint32_t)v);
}

/* named: the request in inner wrapped as PR_OP_RID_CALL (origin 5, seq). */
static void named(em_buf *b, const em_buf *inner, uint64_t seq)
{
    em_buf_reset(b);
    em_buf_put_le16(b, PR_OP_RID_CALL);
    em_buf_put_le64(b, 78);
    em_buf_put_le64(b, 5);
    em_buf_put_le64(b, seq);
    em_buf_append(b, inner->p, inner->len);
}

/* run: body on the forwarded-request connection; the status, the payload
 * in *p / *n (a 1.7.0 reply: 14-byte header, no topology change here). */
static int run(pr_conn *c, const em_buf *body, em_buf *resp, const uint8_t **p, size_t *n)
{
    em_buf_reset(resp);
    if (pr_exec_on(c, body->p, body->len, resp) || resp->len < 14)
        return -1;
    uint16_t flags = em_ld16(resp->p + 12);
    size_t at = 14 + ((flags & 2) ? 12 : 0);
    if (flags & 1)
        return (int)em_ld32(resp->p + at);
    *p = resp->p + at;
    *n = resp->len - at;
    return 0;
}

static int has(const em_buf *b, const char *s)
{
    size_t n = strlen(s);
    for (size_t i = 0; i + n <= b->len; i++)
        if (memcmp(b->p + i, s, n) == 0)
            return 1;
    return 0;
}

static int32_t get_int(pr_conn *c, int32_t k, em_buf *req, em_buf *resp)
{
    const uint8_t *p;
    size_t n;
    key_req(req, 1000, k);
    if (run(c, req, resp, &p, &n) != 0 || n != 5 || p[0] != 3)
        return -1;
    return (int32_t)em_ld32(p + 1);
}

TEST(cl_rid_named_write_runs_once)
{
    pe_env e;
    REQUIRE(pe_open(&e, NULL) == 0);
    cl_rids *w;
    REQUIRE(cl_rids_new(&w) == 0);
    pr_server_set_rids(e.ps, w);
    st_cache_config cfg;
    st_cache_config_init(&cfg);
    cfg.name = (char *)CACHE;
    st_cache *sc;
    REQUIRE(st_cache_create(e.st, &cfg, &sc) == 0);
    pr_conn *c = pr_fwd_conn_new(e.ps);
    REQUIRE(c);
    em_buf in = EM_BUF_INIT, env = EM_BUF_INIT, resp = EM_BUF_INIT;
    const uint8_t *p;
    size_t n;

    /* put-if-absent, retried: the first run's "true", not a second run's
     * "false" (the key exists now). */
    key_req(&in, 1002, 1);
    int_val(&in, 10);
    named(&env, &in, 1);
    CHECK(run(c, &env, &resp, &p, &n) == 0 && n == 1 && p[0] == 1);
    CHECK(run(c, &env, &resp, &p, &n) == 0 && n == 1 && p[0] == 1);
    /* Without the id it decides again, as any new request would. */
    CHECK(run(c, &in, &resp, &p, &n) == 0 && n == 1 && p[0] == 0);

    /* A put retried after another write was acknowledged: not run again,
     * so it does not overwrite the later write. */
    key_req(&in, 1001, 2);
    int_val(&in, 20);
    named(&env, &in, 2);
    CHECK(run(c, &env, &resp, &p, &n) == 0 && n == 0);
    key_req(&in, 1001, 2);
    int_val(&in, 21);
    CHECK(run(c, &in, &resp, &p, &n) == 0);
    key_req(&in, 1001, 2);
    int_val(&in, 20);
    named(&env, &in, 2);
    CHECK(run(c, &env, &resp, &p, &n) == 0);
    CHECK_EQ(get_int(c, 2, &in, &resp), 21);

    /* get-and-put retried: the previous value of the first run. */
    key_req(&in, 1005, 1);
    int_val(&in, 11);
    named(&env, &in, 3);
    CHECK(run(c, &env, &resp, &p, &n) == 0 && n == 5 && em_ld32(p + 1) == 10);
    CHECK(run(c, &env, &resp, &p, &n) == 0 && n == 5 && em_ld32(p + 1) == 10);
    CHECK_EQ(get_int(c, 1, &in, &resp), 11);

    /* Learned from a former primary's update: answered from it, not run
     * (key 3 stays absent here, where the update was not applied). */
    cl_rids_learn(w, (cl_rid){ 5, 4 }, 1002);
    key_req(&in, 1002, 3);
    int_val(&in, 30);
    named(&env, &in, 4);
    CHECK(run(c, &env, &resp, &p, &n) == 0 && n == 1 && p[0] == 1);
    CHECK_EQ(get_int(c, 3, &in, &resp), -1);
    /* ... a get-and-* whose previous value was not kept: an error that
     * says it took effect, never a second run. */
    cl_rids_learn(w, (cl_rid){ 5, 5 }, 1007);
    key_req(&in, 1007, 1);
    named(&env, &in, 5);
    CHECK(run(c, &env, &resp, &p, &n) == 1);
    CHECK(has(&resp, "took effect"));
    CHECK_EQ(get_int(c, 1, &in, &resp), 11);

    /* Only single-key writes are named. */
    key_req(&in, 1000, 1);
    named(&env, &in, 6);
    CHECK(run(c, &env, &resp, &p, &n) == 1);

    /* A retried write allocates nothing once the buffers grew. */
    key_req(&in, 1002, 1);
    int_val(&in, 10);
    named(&env, &in, 1);
    CHECK(run(c, &env, &resp, &p, &n) == 0);
    em_mem_stats m0 = em_mem_thread();
    for (int i = 0; i < 100; i++)
        CHECK(run(c, &env, &resp, &p, &n) == 0 && n == 1 && p[0] == 1);
    em_mem_stats m1 = em_mem_thread();
    CHECK_EQ(m1.allocs - m0.allocs, 0);

    em_buf_free(&in);
    em_buf_free(&env);
    em_buf_free(&resp);
    pr_conn_free(c);
    pr_server_set_rids(e.ps, NULL);
    pe_close(&e);
    cl_rids_free(w);
}
