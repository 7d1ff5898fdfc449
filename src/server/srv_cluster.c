/* srv_cluster.c - the cluster settings as a running cl_node (srv_cluster.h).
 *
 * The metadata group's directory: `cluster_dir` when set (kept), else a
 * fresh temporary directory removed at stop - a node's membership lasts one
 * process (a restarted node joins again with a new id, as in Ignite).
 */
#include "server/srv_cluster.h"

#include <ftw.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cluster/cl_meta_fsm.h"
#include "cluster/cl_node.h"
#include "cluster/cl_pme.h"
#include "proto/proto.h"
#include "server/srv.h"
#include "util/err.h"
#include "util/log.h"
#include "util/mem.h"

struct srv_cluster {
    cl_node *node;
    _Atomic(cl_pme *) pme;
    pr_server *ps;
    int     (*durable)(void *arg);  /* wait for the WAL's group commit, or NULL */
    void     *durable_arg;
    char     tmpdir[256];         /* "" when cluster_dir was given */
    uint64_t last_major;
    uint32_t last_minor, last_n;
};

int srv_cluster_enabled(const srv_config *c)
{
    return c->seeds[0] || c->bootstrap;
}

static const char *state_name(int st)
{
    return st == CL_META_ACTIVE ? "ACTIVE" : st == CL_META_INACTIVE ? "INACTIVE"
                                                                    : "ACTIVE_READ_ONLY";
}

/* on_topology: one log line per new topology version (metadata thread). */
static void on_topology(void *arg, const cl_topo *t)
{
    srv_cluster *sc = arg;
    cl_pme *pme = atomic_load(&sc->pme);
    if (pme)
        cl_pme_kick(pme);
    if (t->major == sc->last_major && t->minor == sc->last_minor && t->n == sc->last_n)
        return;
    sc->last_major = t->major;
    sc->last_minor = t->minor;
    sc->last_n = t->n;
    pr_cluster_members(sc->ps, t);
    pr_cluster_topology(sc->ps, t->major, t->minor);
    EM_INFO("cluster topology %llu.%u: %u member%s, state %s%s",
            (unsigned long long)t->major, t->minor, t->n, t->n == 1 ? "" : "s",
            state_name(t->state), t->self >= 0 ? "" : " (without this node)");
}

/* on_entry / on_restore: what the metadata group applied, on this node. */
static void on_entry(void *arg, const cl_meta_entry *e)
{
    srv_cluster *sc = arg;
    int rc = pr_cluster_apply(sc->ps, e);
    if (rc)
        EM_ERROR("cluster: applying %s on this node failed: %s (this node now differs "
                 "from the cluster's metadata; restart it to rejoin)",
                 cl_meta_entry_name(e->type), em_strerror(rc));
}

static void on_restore(void *arg, const cl_meta_fsm *f)
{
    srv_cluster *sc = arg;
    int rc = pr_cluster_restore(sc->ps, f);
    if (rc)
        EM_ERROR("cluster: installing the metadata snapshot on this node failed: %s",
                 em_strerror(rc));
}

/* on_call: a request another member forwarded; durable before it answers
 * when the WAL is in FSYNC mode, as a client's own reply would be. */
static int on_call(void *arg, const uint8_t *p, size_t n, em_buf *resp)
{
    srv_cluster *sc = arg;
    int rc = pr_exec_forward(sc->ps, p, n, resp);
    if (!rc && sc->durable)
        rc = sc->durable(sc->durable_arg);
    return rc;
}

/* The exchange's view of this node's caches. */
static uint32_t pme_groups(void *arg, cl_pme_group *out, uint32_t cap)
{
    return pr_cluster_groups(arg, out, cap);
}

static int pme_part_info(void *arg, int32_t grp, uint32_t part, uint64_t *cntr, uint64_t *size)
{
    return pr_cluster_part_info(arg, grp, part, cntr, size);
}

/* on_refused: a peer refused in its handshake, or one that refused us. */
static void on_refused(void *arg, const char *peer, const char *why)
{
    (void)arg;
    EM_WARN("cluster: link with %s refused: %s", peer, why);
}

static int rm_one(const char *path, const struct stat *st, int flag, struct FTW *f)
{
    (void)st; (void)flag; (void)f;
    return remove(path);
}

int srv_cluster_start(srv_cluster **out, const srv_config *c, const uint8_t node_id[16],
                      const char *thin_addr, pr_server *ps, int (*durable)(void *arg),
                      void *durable_arg)
{
    *out = NULL;
    srv_cluster *sc = em_calloc(1, sizeof *sc);
    if (!sc)
        return EM_NOMEM;
    sc->ps = ps;
    sc->durable = durable;
    sc->durable_arg = durable_arg;
    const char *dir = c->cluster_dir;
    if (!dir[0]) {
        snprintf(sc->tmpdir, sizeof sc->tmpdir, "/tmp/ember-cluster-XXXXXX");
        if (!mkdtemp(sc->tmpdir)) {
            EM_ERROR("cluster: cannot create a temporary directory for the metadata group");
            em_free(sc);
            return EM_IO;
        }
        dir = sc->tmpdir;
    }
    char err[CL_NODE_ERRMSG] = "";
    const char *host = c->cluster_host[0] ? c->cluster_host : c->host;
    cl_node_cfg nc = {
        .cluster_name = c->cluster_name,
        .secret = c->cluster_secret[0] ? c->cluster_secret : NULL,
        .host = host, .port = c->cluster_port, .raft_port = c->raft_port,
        .consistent_id = c->consistent_id[0] ? c->consistent_id : NULL,
        .seeds = c->seeds[0] ? c->seeds : NULL, .bootstrap = c->bootstrap,
        .dir = dir, .thin_addr = thin_addr,
        .failure_detection_ms = c->failure_detection_timeout_ms,
        .node_msb = em_ld64(node_id), .node_lsb = em_ld64(node_id + 8),
        .arg = sc, .on_topology = on_topology, .on_refused = on_refused,
        .on_entry = on_entry, .on_restore = on_restore, .on_call = on_call, .errmsg = err,
    };
    int rc = cl_node_start(&sc->node, &nc);
    if (rc) {
        EM_ERROR("%s", err[0] ? err : em_strerror(rc));
        if (sc->tmpdir[0])
            nftw(sc->tmpdir, rm_one, 16, FTW_DEPTH | FTW_PHYS);
        em_free(sc);
        return rc;
    }
    cl_pme_cfg pc = { .arg = ps, .groups = pme_groups, .part_info = pme_part_info };
    cl_pme *pme = NULL;
    if ((rc = cl_pme_start(&pme, sc->node, &pc)) != 0) {
        EM_ERROR("cluster: cannot start the partition map exchange: %s", em_strerror(rc));
        cl_node_stop(sc->node, 1);
        if (sc->tmpdir[0])
            nftw(sc->tmpdir, rm_one, 16, FTW_DEPTH | FTW_PHYS);
        em_free(sc);
        return rc;
    }
    pr_server_set_pme(ps, pme);
    atomic_store(&sc->pme, pme);
    cl_pme_kick(pme);
    /* Without a secret nothing after the handshake proves who a peer is. */
    if (!c->cluster_secret[0] && strncmp(host, "127.", 4) != 0 && strcmp(host, "::1") != 0)
        EM_WARN("cluster: no cluster_secret set: any process that reaches %s:%d can join the "
                "cluster or pose as a member; set cluster_secret on every node", host,
                c->cluster_port);
    EM_INFO("cluster '%s': transport %s:%d, metadata group %s:%d, %s", c->cluster_name, host,
            c->cluster_port, host, c->raft_port,
            c->bootstrap ? "bootstrapping" : "joining through seeds");
    *out = sc;
    return 0;
}

void srv_cluster_stop(srv_cluster *sc)
{
    if (!sc)
        return;
    cl_pme *pme = atomic_exchange(&sc->pme, NULL);
    pr_server_set_pme(sc->ps, NULL);
    cl_pme_stop(pme);
    cl_node_stop(sc->node, 1);
    if (sc->tmpdir[0])
        nftw(sc->tmpdir, rm_one, 16, FTW_DEPTH | FTW_PHYS);
    em_free(sc);
}

cl_node *srv_cluster_node(srv_cluster *sc) { return sc ? sc->node : NULL; }

int srv_cluster_health(srv_cluster *sc, em_buf *out)
{
    if (!sc || cl_node_has_lease(sc->node))
        return 0;
    static const char msg[] = "cluster: no lease: cut off from the majority (no leader "
                              "reachable); serving no cache operations\n";
    return em_buf_append(out, msg, sizeof msg - 1) ? EM_NOMEM : 1;
}

int srv_cluster_metrics(srv_cluster *sc, em_buf *out)
{
    if (!sc)
        return 0;
    cl_topo *t = cl_node_topo_acquire(sc->node);
    char line[2560];
    int n = snprintf(line, sizeof line,
                     "# TYPE ember_cluster_members gauge\nember_cluster_members %u\n"
                     "# TYPE ember_cluster_topology_major gauge\nember_cluster_topology_major %llu\n"
                     "# TYPE ember_cluster_topology_minor gauge\nember_cluster_topology_minor %u\n"
                     "# TYPE ember_cluster_joined gauge\nember_cluster_joined %d\n"
                     "# TYPE ember_cluster_leader gauge\nember_cluster_leader %d\n"
                     "# TYPE ember_cluster_lease gauge\nember_cluster_lease %d\n",
                     t->n, (unsigned long long)t->major, t->minor, t->self >= 0 ? 1 : 0,
                     cl_node_is_leader(sc->node), cl_node_has_lease(sc->node));
    cl_node_topo_release(t);
    uint32_t up;
    uint64_t refused;
    cl_node_links(sc->node, &up, &refused);
    n += snprintf(line + n, sizeof line - (size_t)n,
                  "# TYPE ember_cluster_links gauge\nember_cluster_links %u\n"
                  "# TYPE ember_cluster_links_refused counter\nember_cluster_links_refused %llu\n",
                  up, (unsigned long long)refused);
    cl_pme *pme = atomic_load(&sc->pme);
    if (pme) {
        cl_pme_stats ps;
        cl_pme_stats_get(pme, &ps);
        n += snprintf(line + n, sizeof line - (size_t)n,
                      "# TYPE ember_pme_exchanges counter\nember_pme_exchanges %llu\n"
                      "# TYPE ember_pme_last_exchange_ms gauge\nember_pme_last_exchange_ms %llu\n"
                      "# TYPE ember_pme_map_exchange gauge\nember_pme_map_exchange %llu\n"
                      "# TYPE ember_pme_map_hash gauge\nember_pme_map_hash %llu\n"
                      "# TYPE ember_pme_map_bytes gauge\nember_pme_map_bytes %llu\n"
                      "# TYPE ember_pme_map_compressed_bytes gauge\n"
                      "ember_pme_map_compressed_bytes %llu\n"
                      "# TYPE ember_pme_lost_partitions gauge\nember_pme_lost_partitions %llu\n"
                      "# TYPE ember_pme_bad_frames counter\nember_pme_bad_frames %llu\n",
                      (unsigned long long)ps.exchanges, (unsigned long long)ps.last_ms,
                      (unsigned long long)ps.map_exch, (unsigned long long)ps.map_hash,
                      (unsigned long long)ps.map_bytes, (unsigned long long)ps.map_zbytes,
                      (unsigned long long)ps.lost, (unsigned long long)ps.bad_frames);
    }
    return em_buf_append(out, line, (size_t)n);
}
