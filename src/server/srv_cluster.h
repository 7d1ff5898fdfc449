/* srv_cluster.h - emberd as a cluster member: the cluster settings turned
 * into a cl_node, its metadata directory, and what /metrics and the log say
 * about the topology.  A server with neither `seeds` nor `bootstrap` set is
 * not in a cluster and starts none of this.
 */
#ifndef EM_SRV_CLUSTER_H
#define EM_SRV_CLUSTER_H

#include <stdint.h>

#include "util/buf.h"

struct srv_config;
struct cl_node;
struct pr_server;

typedef struct srv_cluster srv_cluster;

/* What persistence lends the cluster for historical rebalancing (NULL, or
 * hist NULL: none): the history log the WAL's replay fed (owned by the
 * caller, freed after srv_cluster_stop) and the WAL, whose checkpoints say
 * when a loaded copy is whole on disk. */
struct cl_hist;
struct wal;
typedef struct srv_cluster_persist {
    struct cl_hist *hist;
    struct wal     *wal;
} srv_cluster_persist;

/* srv_cluster_enabled: the settings ask for a cluster. */
int srv_cluster_enabled(const struct srv_config *c);

/* srv_cluster_start joins (or bootstraps) the cluster as node_id (the UUID
 * bytes the thin protocol sends), publishing thin_addr for clients; what the
 * metadata group applies is handed to ps; forwarded writes wait on durable
 * (the WAL's group commit, or NULL) before their answer leaves, as a
 * client's reply would.  0 or an error, logged. */
int  srv_cluster_start(srv_cluster **out, const struct srv_config *c,
                       const uint8_t node_id[16], const char *thin_addr, struct pr_server *ps,
                       int (*durable)(void *arg), void *durable_arg,
                       const struct srv_cluster_persist *pe);
/* srv_cluster_leave: this member leaves the cluster but the process runs
 * on (its persistence failed: as a member it would hold up every write its
 * partitions take, as Ignite's failure handler stops such a node).  It
 * then serves no cache operations; a restart rejoins.  0 once the leave is
 * committed, else an error (no leader now: call again later). */
int  srv_cluster_leave(srv_cluster *sc);
/* srv_cluster_maintain: periodic (srv_maintain) - a node that created the
 * metadata group puts the cluster state it restored into it (and the
 * baseline: the state only once every baseline node is back, INACTIVE
 * until then unless an operator changes it). */
void srv_cluster_maintain(srv_cluster *sc);
/* srv_cluster_set_meta: a persistent node's metadata log - the baseline
 * is kept there as it changes, and put back by the node that creates the
 * metadata group after a whole restart. */
struct srv_meta;
void srv_cluster_set_meta(srv_cluster *sc, struct srv_meta *m);
/* srv_cluster_pass_end: the end of a client loop's pass (net.h
 * on_pass_end) - the replication streams its writes filled leave now. */
void srv_cluster_pass_end(void *arg);
/* srv_cluster_stop leaves the cluster (clean stop) and frees everything. */
void srv_cluster_stop(srv_cluster *sc);
struct cl_node *srv_cluster_node(srv_cluster *sc);
/* srv_cluster_mem_stats: allocation counters of the cluster's threads (the
 * transport loop, the forwarding workers), zeros without a cluster. */
struct em_mem_stats;
void srv_cluster_mem_stats(srv_cluster *sc, struct em_mem_stats *sum);

/* srv_cluster_health: 0 while this member holds its lease; else a line in
 * out and 1 (a failed check). */
int srv_cluster_health(srv_cluster *sc, em_buf *out);

/* srv_cluster_metrics appends the cluster gauges in Prometheus text. */
int srv_cluster_metrics(srv_cluster *sc, em_buf *out);

#endif
