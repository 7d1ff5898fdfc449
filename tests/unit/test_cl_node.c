/* test_cl_node.c - nodes forming one topology through the metadata group
 * over real loopback sockets (cluster/cl_node.c): bootstrap and join by
 * seeds, failure detection of a node that vanished, a clean leave, a new
 * node joining, proposals from a follower, and the affinity every member
 * computes alike.  Waits are for conditions, bounded generously. */
#include "test.h"

#include "cluster/cl_node.h"
#include "cluster/cl_meta_fsm.h"
#include "util/clock.h"
#include "util/err.h"
#include "util/mem.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
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

static char g_seed[64];

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
            .errmsg = err,
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

TEST(cl_node_three_form_fail_leave_and_join)
{
    tnode ts[4];
    memset(ts, 0, sizeof ts);
    REQUIRE_OK(start(&ts[0], 1, 0));
    REQUIRE(wait_members(ts, 1, 1));
    seed_from(&ts[0]);
    REQUIRE_OK(start(&ts[1], 0, 1));
    REQUIRE_OK(start(&ts[2], 0, 2));
    REQUIRE(wait_members(ts, 3, 3));
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
