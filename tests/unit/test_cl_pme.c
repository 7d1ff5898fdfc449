/* test_cl_pme.c - the partition map exchange between in-process nodes over
 * real loopback sockets (cluster/cl_pme.c): every member ends with the same
 * full map of the last committed exchange; owners are kept across a join;
 * the only owner vanishing makes its partitions lost until reset-lost; a
 * malformed exchange frame closes that link alone and is counted, and the
 * next exchange still completes.  Waits are for conditions, bounded. */
#include "test.h"

#include "cluster/cl_meta_fsm.h"
#include "cluster/cl_net.h"
#include "cluster/cl_node.h"
#include "cluster/cl_pme.h"
#include "util/clock.h"
#include "util/err.h"
#include "util/mem.h"

#include <arpa/inet.h>
#include <stdatomic.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/socket.h>
#include <unistd.h>

#define WAIT_MS 90000
#define GRP     4242
#define PARTS   64

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

typedef struct pnode {
    cl_node *n;
    cl_pme  *x;
    int      idx;
    char     dir[128];
} pnode;

static char g_seed[64];
static _Atomic int g_have_group;
/* A copy catching up (CL_PLAN_BEHIND): node idx's partition part, as
 * idx * PARTS + part + 1; 0 = none. */
static _Atomic int g_behind;

/* One group (a cache without backups) once the test started its cache. */
static uint32_t groups(void *arg, cl_plan_group *out, uint32_t cap)
{
    (void)arg;
    if (!atomic_load(&g_have_group))
        return 0;
    if (cap >= 1)
        out[0] = (cl_plan_group){ GRP, PARTS, 0, 0, 2 };
    return 1;
}

/* Counters differ per node and partition, so the map carries real values -
 * once the group has owners: before its first decision a cache of several
 * members is empty everywhere (nothing routes to it yet). */
static int part_info(void *arg, int32_t grp, uint32_t part, uint64_t *cntr, uint64_t *size)
{
    pnode *p = arg;
    if (grp != GRP || part >= PARTS)
        return EM_NOCACHE;
    cl_topo *t = cl_node_topo_acquire(p->n);
    int decided = cl_topo_has_owners(t, GRP, PARTS);
    cl_node_topo_release(t);
    *cntr = decided ? 1000u * (uint64_t)p->idx + part : 0;
    *size = decided ? part % 3 : 0;
    if (atomic_load(&g_behind) == p->idx * PARTS + (int)part + 1) {
        *cntr = 0;
        return CL_PLAN_BEHIND;
    }
    return 0;
}

static void on_topology(void *arg, const cl_topo *t)
{
    pnode *p = arg;
    (void)t;
    if (p->x)
        cl_pme_kick(p->x);
}

static int start(pnode *t, int bootstrap, int i)
{
    t->idx = i;
    snprintf(t->dir, sizeof t->dir, "/tmp/ember-clpme-%d-%d", (int)getpid(), i);
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
            .arg = t, .on_topology = on_topology, .errmsg = err,
        };
        if (cl_node_start(&t->n, &c) == 0) {
            cl_pme_cfg pc = { .arg = t, .groups = groups, .part_info = part_info,
                              .collect_ms = 3000 };
            return cl_pme_start(&t->x, t->n, &pc);
        }
        fprintf(stderr, "# start %d: %s\n", i, err);
    }
    return -1;
}

static void stop(pnode *t, int leave)
{
    cl_pme_stop(t->x);
    t->x = NULL;
    cl_node_stop(t->n, leave);
    t->n = NULL;
    char cmd[200];
    snprintf(cmd, sizeof cmd, "rm -rf %s", t->dir);
    (void)!system(cmd);
}

static uint32_t members(pnode *t)
{
    cl_topo *tp = cl_node_topo_acquire(t->n);
    uint32_t n = tp->self >= 0 ? tp->n : 0;
    cl_node_topo_release(tp);
    return n;
}

/* agree: every node holds the full map of the exchange its own metadata
 * last committed, and the maps are the same. */
static int agree(pnode **ts, int cnt, uint64_t *exch)
{
    cl_pme_stats s0;
    cl_pme_stats_get(ts[0]->x, &s0);
    for (int i = 0; i < cnt; i++) {
        cl_pme_stats s;
        cl_pme_stats_get(ts[i]->x, &s);
        cl_topo *t = cl_node_topo_acquire(ts[i]->n);
        int ok = t->self >= 0 && (uint32_t)t->n == (uint32_t)cnt &&
                 s.map_exch == cl_topo_last_exchange(t) && s.map_exch == (t->major << 32 | t->minor);
        cl_node_topo_release(t);
        if (!ok || s.map_exch != s0.map_exch || s.map_hash != s0.map_hash)
            return 0;
    }
    *exch = s0.map_exch;
    return 1;
}

static int wait_agree(pnode **ts, int cnt, uint64_t *exch)
{
    uint64_t end = em_now_ms() + WAIT_MS;
    while (em_now_ms() < end) {
        if (agree(ts, cnt, exch))
            return 1;
        usleep(20000);
    }
    for (int i = 0; i < cnt; i++) {
        cl_pme_stats s;
        cl_pme_stats_get(ts[i]->x, &s);
        fprintf(stderr, "# node %d: %u members, map %llx hash %llx\n", ts[i]->idx,
                members(ts[i]), (unsigned long long)s.map_exch, (unsigned long long)s.map_hash);
    }
    return 0;
}

/* owners_on: the owner ids of every partition on node t (primary first). */
static void owners_on(pnode *t, cl_meta_uuid *out)
{
    cl_topo *tp = cl_node_topo_acquire(t->n);
    for (uint32_t p = 0; p < PARTS; p++) {
        uint32_t o;
        out[p] = cl_topo_owners(tp, GRP, PARTS, 0, 0, p, &o, 1) ? tp->m[o].id
                                                              : (cl_meta_uuid){ 0, 0 };
    }
    cl_node_topo_release(tp);
}

TEST(cl_pme_exchange_join_loss_reset_and_bad_frames)
{
    pnode ts[4];
    memset(ts, 0, sizeof ts);
    atomic_store(&g_have_group, 0);
    REQUIRE_OK(start(&ts[0], 1, 0));
    uint64_t end = em_now_ms() + WAIT_MS;
    while (members(&ts[0]) != 1 && em_now_ms() < end)
        usleep(20000);
    cl_topo *tp = cl_node_topo_acquire(ts[0].n);
    snprintf(g_seed, sizeof g_seed, "%s", tp->m[tp->self].cluster_addr);
    cl_node_topo_release(tp);
    REQUIRE_OK(start(&ts[1], 0, 1));
    REQUIRE_OK(start(&ts[2], 0, 2));
    pnode *three[3] = { &ts[0], &ts[1], &ts[2] };
    uint64_t exch = 0;
    REQUIRE(wait_agree(three, 3, &exch));

    /* A cache: its exchange gives it its ideal owners, the same everywhere. */
    atomic_store(&g_have_group, 1);
    em_buf b = EM_BUF_INIT;
    REQUIRE_OK(cl_meta_enc_cache_start(&b, GRP, "cfg", 3));
    REQUIRE_OK(cl_node_propose(ts[1].n, b.p, b.len, WAIT_MS));
    em_buf_free(&b);
    uint64_t before = exch;
    end = em_now_ms() + WAIT_MS;
    while ((!wait_agree(three, 3, &exch) || exch == before) && em_now_ms() < end)
        usleep(20000);
    CHECK(exch != before);
    cl_meta_uuid o0[PARTS], o1[PARTS];
    owners_on(&ts[0], o0);
    owners_on(&ts[2], o1);
    CHECK(memcmp(o0, o1, sizeof o0) == 0);
    tp = cl_node_topo_acquire(ts[0].n);
    CHECK(cl_topo_has_owners(tp, GRP, PARTS));
    cl_node_topo_release(tp);
    cl_pme_stats st;
    cl_pme_stats_get(ts[2].x, &st);
    CHECK(st.map_bytes > 3u * PARTS && st.map_zbytes > 0 && st.lost == 0);

    /* A malformed full map from a member: that link closes, is counted,
     * and the cluster goes on (the next exchange completes everywhere). */
    static const uint8_t junk[] = { 0xff, 0xff, 0xff, 0x7f, 0, 1, 2, 3, 4, 5 };
    cl_pme_stats sb;
    cl_pme_stats_get(ts[1].x, &sb);
    REQUIRE_OK(cl_node_send(ts[2].n, cl_node_id(ts[1].n), CL_NET_MSG_PME_FULL, junk,
                            sizeof junk));
    end = em_now_ms() + WAIT_MS;
    do {
        cl_pme_stats_get(ts[1].x, &st);
        usleep(10000);
    } while (st.bad_frames == sb.bad_frames && em_now_ms() < end);
    CHECK(st.bad_frames == sb.bad_frames + 1);

    /* A join: owners stay where they are (nothing has moved the data).
     * The owner of partition 5 reports its copy catching up
     * (CL_PLAN_BEHIND): it stays the committed owner, OWNING in the map,
     * but its counter there is 0 - what keeps the exchange from making it
     * primary while a whole copy is left. */
    int behind = -1;
    for (int i = 0; i < 3; i++)
        if (cl_meta_uuid_eq(cl_node_id(ts[i].n), o0[5]))
            behind = i;
    REQUIRE(behind >= 0);
    atomic_store(&g_behind, behind * PARTS + 5 + 1);
    REQUIRE_OK(start(&ts[3], 0, 3));
    pnode *four[4] = { &ts[0], &ts[1], &ts[2], &ts[3] };
    CHECK(wait_agree(four, 4, &exch));
    owners_on(&ts[3], o1);
    CHECK(memcmp(o0, o1, sizeof o0) == 0);
    em_buf mb = EM_BUF_INIT;
    REQUIRE_OK(cl_pme_map_copy(ts[3].x, &mb));
    cl_pmap_group mg[4];
    cl_pmap m = { .g = mg };
    REQUIRE_OK(cl_pmap_decode(mb.p, mb.len, &m, 4));
    int gi = -1, ni = -1, nj = -1, jdx = -1;
    for (int i = 0; i < 3; i++)
        if (cl_meta_uuid_eq(cl_node_id(ts[i].n), o0[6]))
            jdx = ts[i].idx;
    for (uint32_t g = 0; g < m.ngroups; g++)
        if (m.g[g].grp == GRP)
            gi = (int)g;
    for (uint32_t k = 0; k < m.nodes; k++) {
        if (cl_meta_uuid_eq(cl_pmap_node(&m, k), o0[5]))
            ni = (int)k;
        if (cl_meta_uuid_eq(cl_pmap_node(&m, k), o0[6]))
            nj = (int)k;
    }
    REQUIRE(gi >= 0 && ni >= 0 && nj >= 0 && jdx >= 0);
    CHECK_EQ(cl_pmap_state(&m, &m.g[gi], (uint32_t)ni, 5), CL_PS_OWNING);
    CHECK_EQ(cl_pmap_cntr(&m.g[gi], 5), 0);
    CHECK_EQ(cl_pmap_state(&m, &m.g[gi], (uint32_t)nj, 6), CL_PS_OWNING);
    CHECK_EQ(cl_pmap_cntr(&m.g[gi], 6), 1000u * (uint64_t)jdx + 6);
    em_buf_free(&mb);
    atomic_store(&g_behind, 0);

    /* The only owner of a third of the partitions vanishes: they are lost,
     * in the committed owners and in every node's full map. */
    int victim = cl_node_is_leader(ts[1].n) ? 2 : 1;
    cl_meta_uuid gone = cl_node_id(ts[victim].n);
    uint32_t victim_parts = 0;
    for (uint32_t p = 0; p < PARTS; p++)
        victim_parts += cl_meta_uuid_eq(o0[p], gone);
    REQUIRE(victim_parts > 0);
    stop(&ts[victim], 0);
    pnode *rest[3] = { &ts[0], &ts[victim == 1 ? 2 : 1], &ts[3] };
    CHECK(wait_agree(rest, 3, &exch));
    tp = cl_node_topo_acquire(ts[3].n);
    uint32_t lost = 0;
    for (uint32_t p = 0; p < PARTS; p++)
        lost += (uint32_t)cl_topo_part_lost(tp, GRP, p);
    cl_node_topo_release(tp);
    CHECK_EQ(lost, victim_parts);
    cl_pme_stats_get(rest[1]->x, &st);
    CHECK_EQ(st.lost, victim_parts);

    /* reset-lost gives them owners again, on every node. */
    uint32_t reset = 0;
    CHECK_OK(cl_pme_reset_lost(ts[3].x, GRP, &reset));
    CHECK_EQ(reset, victim_parts);
    end = em_now_ms() + WAIT_MS;
    for (;;) {
        uint32_t left = 0;
        for (int i = 0; i < 3; i++) {
            tp = cl_node_topo_acquire(rest[i]->n);
            for (uint32_t p = 0; p < PARTS; p++) {
                uint32_t o;
                left += cl_topo_part_lost(tp, GRP, p) ||
                        !cl_topo_owners(tp, GRP, PARTS, 0, 0, p, &o, 1);
            }
            cl_node_topo_release(tp);
        }
        if (!left || em_now_ms() > end) {
            CHECK_EQ(left, 0);
            break;
        }
        usleep(20000);
    }
    CHECK_EQ(cl_pme_reset_lost(ts[3].x, 999, &reset), EM_NOCACHE);
    for (int i = 0; i < 3; i++)
        stop(rest[i], 0);
}
