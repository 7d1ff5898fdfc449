/* test_cl_node.c - nodes forming one topology through the metadata group
 * over real loopback sockets (cluster/cl_node.c): bootstrap and join by
 * seeds, failure detection of a node that vanished, a clean leave, a new
 * node joining, proposals from a follower, and the affinity every member
 * computes alike.  Waits are for conditions, bounded generously. */
#include "test.h"

#include <pthread.h>

#include "cluster/cl_node.h"
#include "cluster/cl_meta_fsm.h"
#include "util/clock.h"
#include "util/err.h"
#include "util/mem.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#define WAIT_MS 90000

static int free_port(void)
{
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in a = { .sin_family = AF_INET };
    inet_pton(AF_INET, "127.0.0.1", &a.sin_addr);
    socklen_t l = sizeof a;
    int port = -1;
    if (bind(fd, (struct sockaddr *)&a, sizeof a) == 0 &&
        getsockname(fd, (struct sockaddr *)&a, &l) == 0)
        port = ntohs(a.sin_port);
    close(fd);
    return port;
}

typedef struct tnode {
    cl_node *n;
    char     dir[128];
} tnode;

static int on_call_later(void *arg, cl_node_call_id id, const uint8_t *p, size_t n);

static char g_seed[64];

/* The members' call handler: "slow" is taken and never answered (its
 * caller sees the link go); anything else is echoed back after "re:". */
static int on_call_later(void *arg, cl_node_call_id id, const uint8_t *p, size_t n)
{
    cl_node **self = arg;
    if (n == 4 && memcmp(p, "slow", 4) == 0)
        return 0;
    uint8_t b[64];
    if (n > sizeof b - 3)
        return EM_TOOBIG;
    memcpy(b, "re:", 3);
    memcpy(b + 3, p, n);
    return cl_node_answer(*self, id, 0, b, n + 3);
}

static int start(tnode *t, int bootstrap, int i)
{
    snprintf(t->dir, sizeof t->dir, "/tmp/ember-clnode-%d-%d", (int)getpid(), i);
    char cmd[200];
    snprintf(cmd, sizeof cmd, "rm -rf %s && mkdir -p %s", t->dir, t->dir);
    if (system(cmd) != 0)
        return -1;
    char err[CL_NODE_ERRMSG] = "";
    for (int attempt = 0; attempt < 5; attempt++) {
        cl_node_cfg c = {
            .cluster_name = "t", .host = "127.0.0.1", .port = 0, .raft_port = free_port(),
            .seeds = bootstrap ? NULL : g_seed, .bootstrap = bootstrap, .dir = t->dir,
            .failure_detection_ms = 2000, .election_ms = 600, .heartbeat_ms = 100,
            .errmsg = err, .arg = &t->n, .on_call_later = on_call_later,
        };
        int rc = cl_node_start(&t->n, &c);
        if (rc == 0)
            return 0;
        fprintf(stderr, "# start %d: %s\n", i, err);   /* a raced port: retry */
    }
    return -1;
}

static void stop(tnode *t, int leave)
{
    cl_node_stop(t->n, leave);
    t->n = NULL;
    char cmd[200];
    snprintf(cmd, sizeof cmd, "rm -rf %s", t->dir);
    (void)!system(cmd);
}

/* members: the member count of t's topology once it includes t itself. */
static uint32_t members(tnode *t)
{
    cl_topo *tp = cl_node_topo_acquire(t->n);
    uint32_t n = tp->self >= 0 ? tp->n : 0;
    cl_node_topo_release(tp);
    return n;
}

static int wait_members(tnode *ts, int cnt, uint32_t want)
{
    uint64_t end = em_now_ms() + WAIT_MS;
    while (em_now_ms() < end) {
        int all = 1;
        for (int i = 0; i < cnt; i++)
            all &= members(&ts[i]) == want;
        if (all)
            return 1;
        usleep(20000);
    }
    for (int i = 0; i < cnt; i++)
        fprintf(stderr, "# node %d sees %u members\n", i, members(&ts[i]));
    return 0;
}

static void seed_from(tnode *t)
{
    cl_topo *tp = cl_node_topo_acquire(t->n);
    snprintf(g_seed, sizeof g_seed, "%s", tp->self >= 0 ? tp->m[tp->self].cluster_addr : "");
    cl_node_topo_release(tp);
}

/* same_view: every node has the same version and the same primaries. */
static int same_view(tnode *ts, int cnt)
{
    cl_topo *t0 = cl_node_topo_acquire(ts[0].n);
    const cl_aff_table *a0 = cl_topo_affinity(t0, 1024, 1);
    int same = a0 != NULL;
    for (int i = 1; i < cnt && same; i++) {
        cl_topo *ti = cl_node_topo_acquire(ts[i].n);
        const cl_aff_table *ai = cl_topo_affinity(ti, 1024, 1);
        same = ai && ti->major == t0->major && ti->minor == t0->minor && ti->n == t0->n;
        for (uint32_t p = 0; same && p < 1024; p++)
            for (uint32_t k = 0; k < a0->copies; k++)
                same = cl_meta_uuid_eq(t0->m[cl_aff_owners(a0, p)[k]].id,
                                       ti->m[cl_aff_owners(ai, p)[k]].id);
        cl_node_topo_release(ti);
    }
    cl_node_topo_release(t0);
    return same;
}

/* form: cnt nodes (directories numbered from base), the first bootstrapping
 * and the others joining through it; 1 once all see cnt members. */
static int form(tnode *ts, int cnt, int base)
{
    memset(ts, 0, (size_t)cnt * sizeof *ts);
    if (start(&ts[0], 1, base) || !wait_members(ts, 1, 1))
        return 0;
    seed_from(&ts[0]);
    for (int i = 1; i < cnt; i++)
        if (start(&ts[i], 0, base + i))
            return 0;
    return wait_members(ts, cnt, (uint32_t)cnt);
}

TEST(cl_node_three_form_fail_leave_and_join)
{
    tnode ts[4];
    memset(ts, 0, sizeof ts);
    REQUIRE(form(ts, 3, 0));
    uint64_t end = em_now_ms() + WAIT_MS;
    while (!same_view(ts, 3) && em_now_ms() < end)
        usleep(20000);
    CHECK(same_view(ts, 3));

    /* A proposal from a follower applies everywhere before it returns here. */
    int follower = cl_node_is_leader(ts[1].n) ? 2 : 1;
    em_buf b = EM_BUF_INIT;
    static const uint8_t cfg[] = "cache-config-bytes";
    REQUIRE_OK(cl_meta_enc_cache_start(&b, 777, cfg, sizeof cfg));
    CHECK_OK(cl_node_propose(ts[follower].n, b.p, b.len, WAIT_MS));
    em_buf_free(&b);

    /* A node that vanishes (no leave) is failed by the leader. */
    int victim = cl_node_is_leader(ts[2].n) ? 1 : 2;
    stop(&ts[victim], 0);
    tnode rest[2] = { ts[0], ts[victim == 1 ? 2 : 1] };
    CHECK(wait_members(rest, 2, 2));
    /* The failed node leaves the Raft configuration too: two servers keep
     * one voter.  The log now ends with that change, an entry no
     * subscriber sees; a follower's sync still returns (it once waited
     * for an index its replica never reports, until its timeout). */
    int lead = cl_node_is_leader(rest[0].n) ? 0 : 1;
    end = em_now_ms() + WAIT_MS;
    while (cl_node_voters(rest[lead].n) != 1 && em_now_ms() < end)
        usleep(20000);
    CHECK_EQ(cl_node_voters(rest[lead].n), 1);
    CHECK_OK(cl_node_sync(rest[1 - lead].n, 5000));
    CHECK_OK(cl_node_sync(rest[lead].n, 5000));

    /* A new node joins through the first node's address. */
    REQUIRE_OK(start(&ts[3], 0, 3));
    tnode three[3] = { rest[0], rest[1], ts[3] };
    CHECK(wait_members(three, 3, 3));
    end = em_now_ms() + WAIT_MS;
    while (!same_view(three, 3) && em_now_ms() < end)
        usleep(20000);
    CHECK(same_view(three, 3));

    /* A clean leave of a follower. */
    int leaver = cl_node_is_leader(three[1].n) ? 2 : 1;
    stop(&three[leaver], 1);
    tnode two[2] = { three[0], three[leaver == 1 ? 2 : 1] };
    CHECK(wait_members(two, 2, 2));
    stop(&two[0], 0);
    stop(&two[1], 0);
}

static _Atomic int g_answers;

static void answered(void *arg)
{
    (void)arg;
    atomic_fetch_add(&g_answers, 1);
}

/* A call's own answered callback: it sees the answer before any poll,
 * and tells the node nobody needs waking for it. */
static em_buf *g_seen_resp;
static _Atomic int g_seen;
static int quiet_answered(cl_node_acall *a, int status)
{
    (void)a;
    if (!status && g_seen_resp->len == 10 && memcmp(g_seen_resp->p, "re:direct", 9) == 0)
        atomic_store(&g_seen, 1);
    return 1;
}

/* slow_answered: a quiet answer that holds until the test lets it go, so a
 * poll (or a cancel) comes while it runs. */
static _Atomic int g_in_answer, g_release, g_cancelled;
static int slow_answered(cl_node_acall *a, int status)
{
    (void)a;
    (void)status;
    atomic_store(&g_in_answer, 1);
    uint64_t end = em_now_ms() + WAIT_MS;
    while (!atomic_load(&g_release) && em_now_ms() < end)
        usleep(200);
    /* a cancel waits for this to end: the caller's storage stays whole */
    if (atomic_load(&g_cancelled))
        atomic_store(&g_in_answer, 2);
    return 1;
}

typedef struct cancel_arg { cl_node *n; cl_node_acall *a; } cancel_arg;
static void *cancel_thread(void *arg)
{
    cancel_arg *c = arg;
    cl_node_call_cancel(c->n, c->a);
    atomic_store(&g_cancelled, 1);
    return NULL;
}

/* start_held starts a call answered by slow_answered and waits until that
 * callback runs: 1, or 0 when it never came. */
static int start_held(cl_node *n, cl_node_acall *a, cl_meta_uuid to, em_buf *resp)
{
    em_buf_reset(resp);
    atomic_store(&g_in_answer, 0);
    atomic_store(&g_release, 0);
    atomic_store(&g_cancelled, 0);
    if (cl_node_call_start(n, a, to, "held", 4, resp, WAIT_MS, slow_answered) != 0)
        return 0;
    uint64_t end = em_now_ms() + WAIT_MS;
    while (!atomic_load(&g_in_answer) && em_now_ms() < end)
        usleep(200);
    return atomic_load(&g_in_answer);
}

/* poll_until: the call's result once it is over (bounded). */
static int poll_until(cl_node *n, cl_node_acall *a)
{
    int rc = EM_TIMEOUT;
    uint64_t end = em_now_ms() + WAIT_MS;
    while (!cl_node_call_poll(n, a, &rc) && em_now_ms() < end)
        usleep(1000);
    return rc;
}

/* Calls without a waiting thread (cl_node_call_start): the answer lands in
 * the caller's buffer and runs the answer hook; a call to a member with no
 * link fails at once; a cancelled call's answer is dropped; a call whose
 * member goes away ends with EM_CLOSED. */
TEST(cl_node_call_without_a_wait)
{
    tnode ts[2];
    REQUIRE(form(ts, 2, 10));
    cl_node_set_answer_hook(ts[0].n, answered, NULL);
    cl_topo *t = cl_node_topo_acquire(ts[0].n);
    cl_meta_uuid other = t->m[t->self == 0 ? 1 : 0].id;
    cl_node_topo_release(t);
    /* The link comes up right after the join: a blocking call waits for it. */
    em_buf resp = EM_BUF_INIT;
    REQUIRE_OK(cl_node_call(ts[0].n, other, "warm", 4, &resp, WAIT_MS));

    cl_node_acall a;
    em_buf_reset(&resp);
    atomic_store(&g_answers, 0);
    REQUIRE_OK(cl_node_call_start(ts[0].n, &a, other, "hello", 5, &resp, WAIT_MS, NULL));
    CHECK_OK(poll_until(ts[0].n, &a));
    CHECK(resp.len == 8 && memcmp(resp.p, "re:hello", 8) == 0);
    CHECK(atomic_load(&g_answers) >= 1);

    cl_meta_uuid nobody = { 12345, 67890 };
    CHECK(cl_node_call_start(ts[0].n, &a, nobody, "x", 1, &resp, WAIT_MS, NULL) == EM_NOLINK);

    /* Cancelled at once: its answer, when it comes, touches nothing. */
    em_buf gone = EM_BUF_INIT;
    cl_node_acall c;
    REQUIRE_OK(cl_node_call_start(ts[0].n, &c, other, "bye", 3, &gone, WAIT_MS, NULL));
    cl_node_call_cancel(ts[0].n, &c);
    memset(&c, 0xa5, sizeof c);     /* the caller may reuse it at once */
    em_buf_reset(&resp);
    REQUIRE_OK(cl_node_call_start(ts[0].n, &a, other, "again", 5, &resp, WAIT_MS, NULL));
    CHECK_OK(poll_until(ts[0].n, &a));
    CHECK(resp.len == 8 && memcmp(resp.p, "re:again", 8) == 0);

    /* Its own callback took the answer: no answer hook ran for it, and a
     * poll still reports it over, with the answer. */
    em_buf_reset(&resp);
    g_seen_resp = &resp;
    atomic_store(&g_seen, 0);
    atomic_store(&g_answers, 0);
    REQUIRE_OK(cl_node_call_start(ts[0].n, &a, other, "direct!", 7, &resp, WAIT_MS,
                                  quiet_answered));
    CHECK_OK(poll_until(ts[0].n, &a));
    CHECK(atomic_load(&g_seen) == 1);
    CHECK(resp.len == 10 && memcmp(resp.p, "re:direct!", 10) == 0);
    CHECK(atomic_load(&g_answers) == 0);

    /* Answered quietly, but polled while its callback ran (outside the
     * node's lock): the poll saw it in flight, so the answer hook runs to
     * make its poller look again; the next poll reports it over. */
    atomic_store(&g_answers, 0);
    REQUIRE(start_held(ts[0].n, &a, other, &resp));
    int prc = 0;
    CHECK(!cl_node_call_poll(ts[0].n, &a, &prc));
    atomic_store(&g_release, 1);
    CHECK_OK(poll_until(ts[0].n, &a));
    CHECK(resp.len == 7 && memcmp(resp.p, "re:held", 7) == 0);
    CHECK(atomic_load(&g_answers) == 1);
    /* A cancel while the callback runs returns only after it ended. */
    REQUIRE(start_held(ts[0].n, &a, other, &resp));
    pthread_t ct;
    cancel_arg ca = { ts[0].n, &a };
    REQUIRE(pthread_create(&ct, NULL, cancel_thread, &ca) == 0);
    atomic_store(&g_release, 1);
    pthread_join(ct, NULL);
    CHECK(atomic_load(&g_in_answer) == 1);    /* it ended before the cancel did */

    /* Never answered, then the member vanishes: the link's loss ends it. */
    REQUIRE_OK(cl_node_call_start(ts[0].n, &a, other, "slow", 4, &resp, WAIT_MS, NULL));
    int rc = 0;
    CHECK(!cl_node_call_poll(ts[0].n, &a, &rc));
    stop(&ts[1], 0);
    CHECK(poll_until(ts[0].n, &a) == EM_CLOSED);
    em_buf_free(&resp);
    em_buf_free(&gone);
    stop(&ts[0], 0);
}
