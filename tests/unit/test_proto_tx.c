/* test_proto_tx.c - transactions in the protocol layer in-process (no
 * sockets): requests that wait for a lock are consumed and answered later
 * by pr_conn_resume (replies by request id, a transaction's own requests in
 * order), the per-connection bound on waiting requests, and the
 * allocations of implicit and explicit transactions in steady state.
 */
#include "test.h"
#include "proto_env.h"

#include <string.h>

#include "proto/proto.h"
#include "store/store.h"
#include "util/err.h"
#include "util/hash.h"
#include "util/mem.h"

#define CACHE "ptx"
#define PR_MAX_WAITING_TEST 1030     /* proto_int.h PR_MAX_WAITING (1024) + 6 */

typedef struct tconn {
    pr_conn *c;
    em_buf out, req;
    int64_t rid;
} tconn;

static int32_t cid(void) { return em_hash_java_str((const uint8_t *)CACHE, strlen(CACHE)); }

static int tc_init(tconn *t, pe_env *e)
{
    memset(t, 0, sizeof *t);
    t->c = pr_conn_new(e->ps);
    /* handshake 1.6.0: flags-style response header, no features */
    uint8_t m[12] = { 8, 0, 0, 0, 1, 1, 0, 6, 0, 0, 0, 2 };
    size_t used;
    return t->c && pr_feed(t->c, m, sizeof m, &t->out, SIZE_MAX / 2, &used) == 0 &&
           pr_conn_ready(t->c) ? 0 : EM_PROTO;
}

static void tc_fini(tconn *t)
{
    pr_conn_free(t->c);
    em_buf_free(&t->out);
    em_buf_free(&t->req);
}

/* frame appends one request to t->req (several may be queued) and returns
 * its request id. */
static int64_t frame(tconn *t, int op, int32_t tx, int32_t k, int32_t v, int kv)
{
    size_t at = t->req.len;
    int64_t rid = ++t->rid;
    em_buf_put_le32(&t->req, 0);
    em_buf_put_le16(&t->req, (uint16_t)op);
    em_buf_put_le64(&t->req, (uint64_t)rid);
    if (kv) {
        em_buf_put_le32(&t->req, (uint32_t)cid());
        em_buf_put_u8(&t->req, tx ? 2 : 0);
        if (tx)
            em_buf_put_le32(&t->req, (uint32_t)tx);
        em_buf_put_u8(&t->req, 3);
        em_buf_put_le32(&t->req, (uint32_t)k);
        if (kv > 1) {
            em_buf_put_u8(&t->req, 3);
            em_buf_put_le32(&t->req, (uint32_t)v);
        }
    }
    em_st32(t->req.p + at, (uint32_t)(t->req.len - at - 4));
    return rid;
}

static int64_t f_put(tconn *t, int32_t tx, int32_t k, int32_t v) { return frame(t, 1001, tx, k, v, 2); }
static int64_t f_get(tconn *t, int32_t tx, int32_t k) { return frame(t, 1000, tx, k, 0, 1); }

static int64_t f_start(tconn *t, int conc, int iso)
{
    size_t at = t->req.len;
    int64_t rid = ++t->rid;
    em_buf_put_le32(&t->req, 0);
    em_buf_put_le16(&t->req, 4000);
    em_buf_put_le64(&t->req, (uint64_t)rid);
    em_buf_put_u8(&t->req, (uint8_t)conc);
    em_buf_put_u8(&t->req, (uint8_t)iso);
    em_buf_put_le64(&t->req, 0);
    em_buf_put_u8(&t->req, 101);
    em_st32(t->req.p + at, (uint32_t)(t->req.len - at - 4));
    return rid;
}

static int64_t f_end(tconn *t, int32_t tx, int commit)
{
    size_t at = t->req.len;
    int64_t rid = ++t->rid;
    em_buf_put_le32(&t->req, 0);
    em_buf_put_le16(&t->req, 4001);
    em_buf_put_le64(&t->req, (uint64_t)rid);
    em_buf_put_le32(&t->req, (uint32_t)tx);
    em_buf_put_u8(&t->req, (uint8_t)commit);
    em_st32(t->req.p + at, (uint32_t)(t->req.len - at - 4));
    return rid;
}

/* send feeds every queued request; all must be consumed. */
static int send(tconn *t)
{
    size_t used;
    em_buf_reset(&t->out);
    int rc = pr_feed(t->c, t->req.p, t->req.len, &t->out, SIZE_MAX / 2, &used);
    size_t n = t->req.len;
    em_buf_reset(&t->req);
    return rc ? rc : used == n ? 0 : EM_AGAIN;
}

/* Replies in t->out: (rid, status, payload) of the i-th. */
typedef struct rep { int64_t rid; int status; const uint8_t *p; size_t n; } rep;

static int replies(const em_buf *out, rep *r, int max)
{
    int n = 0;
    for (size_t at = 0; at + 4 <= out->len && n < max; n++) {
        uint32_t len = em_ld32(out->p + at);
        const uint8_t *b = out->p + at + 4;
        r[n].rid = (int64_t)em_ld64(b);
        int flags = em_ld16(b + 8);
        size_t pos = 10 + ((flags & 2) ? 12 : 0);   /* topology changed: long + int */
        r[n].status = (flags & 1) ? (int32_t)em_ld32(b + pos) : 0;
        r[n].p = b + pos;
        r[n].n = len - pos;
        at += 4 + (size_t)len;
    }
    return n;
}

static int32_t start_tx(tconn *t, int conc, int iso)
{
    f_start(t, conc, iso);
    rep r[1];
    if (send(t) || replies(&t->out, r, 1) != 1 || r[0].status || r[0].n != 4)
        return 0;
    return (int32_t)em_ld32(r[0].p);
}

static int setup(pe_env *e, tconn *a, tconn *b)
{
    int rc = pe_open(e, NULL);
    if (rc)
        return rc;
    st_cache_config cfg;
    st_cache_config_init(&cfg);
    cfg.name = (char *)CACHE;
    cfg.atomicity_mode = 0;
    st_cache *c;
    if ((rc = st_cache_create(e->st, &cfg, &c)) != 0)
        return rc;
    if ((rc = tc_init(a, e)) != 0)
        return rc;
    return tc_init(b, e);
}

TEST(proto_tx_waiting_requests_resume_by_id)
{
    pe_env e;
    tconn a, b;
    REQUIRE_OK(setup(&e, &a, &b));
    rep r[8];
    int32_t t1 = start_tx(&a, 1, 1);
    REQUIRE(t1 != 0);
    f_put(&a, t1, 1, 10);
    REQUIRE_OK(send(&a));
    /* b: its tx's PUT waits, the same tx's GET queues behind it, an
     * unrelated GET of another key runs now */
    int32_t t2 = start_tx(&b, 1, 1);
    REQUIRE(t2 != 0);
    int64_t r_put = f_put(&b, t2, 1, 20);
    int64_t r_get = f_get(&b, t2, 1);
    int64_t r_other = f_get(&b, 0, 2);
    REQUIRE_OK(send(&b));
    REQUIRE_EQ(replies(&b.out, r, 8), 1);
    CHECK_EQ(r[0].rid, r_other);
    CHECK(pr_conn_parked(b.c));
    em_buf_reset(&b.out);
    CHECK_OK(pr_conn_resume(b.c, &b.out, SIZE_MAX / 2));   /* still locked */
    CHECK_EQ(b.out.len, 0);
    f_end(&a, t1, 1);
    REQUIRE_OK(send(&a));
    em_buf_reset(&b.out);
    CHECK_OK(pr_conn_resume(b.c, &b.out, SIZE_MAX / 2));
    REQUIRE_EQ(replies(&b.out, r, 8), 2);
    CHECK_EQ(r[0].rid, r_put);
    CHECK_EQ(r[0].status, 0);
    CHECK_EQ(r[1].rid, r_get);
    CHECK(r[1].n == 5 && em_ld32(r[1].p + 1) == 20);       /* its own write */
    CHECK(!pr_conn_parked(b.c));
    f_end(&b, t2, 1);
    REQUIRE_OK(send(&b));
    tc_fini(&a);
    tc_fini(&b);
    pe_close(&e);
}

TEST(proto_tx_waiting_requests_bounded)
{
    pe_env e;
    tconn a, b;
    REQUIRE_OK(setup(&e, &a, &b));
    int32_t t1 = start_tx(&a, 1, 0);
    REQUIRE(t1 != 0);
    f_put(&a, t1, 1, 10);
    REQUIRE_OK(send(&a));
    enum { N = PR_MAX_WAITING_TEST };
    for (int i = 0; i < N; i++)
        f_put(&b, 0, 1, i);
    REQUIRE_OK(send(&b));                   /* every frame consumed */
    static rep r[N];
    int n = replies(&b.out, r, N);
    CHECK_EQ(n, N - 1024);                  /* the ones past the bound: errors */
    for (int i = 0; i < n; i++)
        CHECK_EQ(r[i].status, 1);
    f_end(&a, t1, 1);
    REQUIRE_OK(send(&a));
    em_buf_reset(&b.out);
    CHECK_OK(pr_conn_resume(b.c, &b.out, SIZE_MAX / 2));
    CHECK_EQ(replies(&b.out, r, N), 1024);
    CHECK(!pr_conn_parked(b.c));
    tc_fini(&a);
    tc_fini(&b);
    pe_close(&e);
}

/* Steady state: an implicit PUT on a TRANSACTIONAL cache and a whole
 * explicit transaction (start, put, commit) allocate nothing. */
TEST(proto_tx_zero_alloc_steady_state)
{
    pe_env e;
    tconn a, b;
    REQUIRE_OK(setup(&e, &a, &b));
    for (int round = 0; round < 2; round++) {
        em_mem_stats m0 = em_mem_thread();
        for (int i = 0; i < 200; i++) {
            f_put(&a, 0, i % 50, i);
            REQUIRE_OK(send(&a));
            int32_t t = start_tx(&a, i % 2, i % 3);
            REQUIRE(t != 0);
            f_put(&a, t, i % 50, i);
            f_end(&a, t, 1);
            REQUIRE_OK(send(&a));
        }
        em_mem_stats m1 = em_mem_thread();
        if (round == 1)                     /* the first round warmed up */
            CHECK_EQ(m1.allocs - m0.allocs, 0);
    }
    tc_fini(&a);
    tc_fini(&b);
    pe_close(&e);
}
