/* cl_topo.h - a topology: what one applied state of the metadata group says
 * of the cluster (members in join order, the exchange's owner tables),
 * resolved to member indices, as an immutable, refcounted snapshot.
 *
 * cl_node publishes one per applied change (cl_node_topo_acquire); the
 * exchange, rebalancing and request routing read it; the ownership
 * simulation (tests/sim) builds its own from a state machine it drives.
 */
#ifndef EM_CL_TOPO_H
#define EM_CL_TOPO_H

#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

#include "cluster/cl_aff.h"
#include "cluster/cl_meta_fsm.h"

typedef struct cl_topo_member {
    cl_meta_uuid id;
    uint64_t     raft_id;          /* its server in the metadata group */
    uint64_t     order;
    uint8_t      state;            /* CL_META_JOINING or CL_META_ALIVE */
    const char  *cid;              /* consistent id */
    const char  *cluster_addr;     /* "ip:port" of its transport */
    const char  *thin_addr;        /* "ip:port" thin clients use, "" if none */
    uint64_t     host;             /* its neighbourhood (CL_TOPO_HOST_MASK bits, see
                                      cl_node_cfg.host_id) and CL_TOPO_EXCLUDE_NEIGHBORS */
    uint8_t      data;             /* 1: affinity may place partitions here (in the
                                      baseline, or there is none) */
} cl_topo_member;

/* A member's join entry carries, in its host field, the id of the machine
 * it runs on (the low 63 bits) and whether it asks for excludeNeighbors
 * (the top bit).  Affinity excludes neighbours when any member asks: all
 * members read the same member list, so they all compute the same table. */
#define CL_TOPO_HOST_MASK         0x7fffffffffffffffull
#define CL_TOPO_EXCLUDE_NEIGHBORS 0x8000000000000000ull

typedef struct cl_topo cl_topo;
struct cl_topo {
    uint64_t        major;
    uint32_t        minor;
    uint8_t         state;         /* CL_META_ACTIVE ... */
    uint32_t        n;             /* members not LEFT, in join order */
    cl_topo_member *m;
    int             self;          /* index of this node, -1 before it joined */
    /* The baseline (Ignite's baseline topology): the consistent ids
     * affinity is computed over, online or not; nbl 0 - none set - and
     * affinity follows the members, as an in-memory Ignite cluster's
     * baseline auto-adjusts at once. */
    uint32_t        nbl;
    const char    **bl;
};

/* CL_TOPO_NONE pads an affinity row whose baseline owners are not all
 * members (offline): rows keep their width, the online owners first. */
#define CL_TOPO_NONE 0xffffu

/* cl_topo_build: a snapshot of state s as member self sees it (self: -1
 * when it is no member); live (optional) counts snapshots not yet freed.
 * NULL when out of memory.  The caller holds one reference. */
cl_topo *cl_topo_build(const cl_meta_fsm *s, cl_meta_uuid self, _Atomic uint64_t *live);
/* cl_topo_empty: the snapshot before anything was applied. */
cl_topo *cl_topo_empty(void);
void     cl_topo_hold(cl_topo *t);
void     cl_topo_release(cl_topo *t);

/* cl_topo_affinity: the owners table for (parts, backups) on topology t,
 * computed once per topology and kept with it; NULL for an empty topology
 * or out of memory.  Valid while t is held.  With a baseline it is
 * computed over the baseline's nodes, and a row lists those that are
 * members (CL_TOPO_NONE after them): a baseline node that is down keeps its
 * partitions, which are not moved elsewhere (Ignite's baseline rule). */
const cl_aff_table *cl_topo_affinity(cl_topo *t, uint32_t parts, uint32_t backups);

/* cl_topo_owners: the owners of partition part of cache group grp on t,
 * primary first, as indices into t->m; returns how many (at most max).  The
 * exchange's committed owners when the group has them (0: none of them is a
 * member any more, or the partition is lost); before the group's first
 * exchange, its ideal owners (every member when replicated). */
uint32_t cl_topo_owners(cl_topo *t, int32_t grp, uint32_t parts, uint32_t backups,
                        int replicated, uint32_t part, uint32_t *idx, uint32_t max);
/* cl_topo_has_owners: 1 when the group has committed owners on t. */
int      cl_topo_has_owners(cl_topo *t, int32_t grp, uint32_t parts);
/* cl_topo_part_lost: 1 when the exchange declared the partition lost. */
int      cl_topo_part_lost(cl_topo *t, int32_t grp, uint32_t part);
/* cl_topo_data_nodes: the members that hold data (every member, or the
 * baseline's online ones), as indices into t->m; returns how many (<= max):
 * a replicated cache's owners. */
uint32_t cl_topo_data_nodes(const cl_topo *t, uint32_t *idx, uint32_t max);
/* cl_topo_baseline_offline: baseline nodes that are no member of t now. */
uint32_t cl_topo_baseline_offline(const cl_topo *t);
/* cl_topo_index: the metadata log index t was built at. */
uint64_t cl_topo_index(const cl_topo *t);

/* cl_topo_moving: the partition's MOVING copies (members loading it; they
 * get its writes but serve nothing yet) as indices into t->m. */
uint32_t cl_topo_moving(cl_topo *t, int32_t grp, uint32_t parts, uint32_t part, uint32_t *idx,
                        uint32_t max);
/* cl_topo_moving_count: MOVING copies of the group in all. */
uint32_t cl_topo_moving_count(cl_topo *t, int32_t grp);
/* cl_topo_lost_count: how many of the group's partitions are lost. */
uint32_t cl_topo_lost_count(cl_topo *t, int32_t grp);
/* cl_topo_part_dropped: 1 when some committed owner of the partition is no
 * longer a member (the next exchange decides again). */
int      cl_topo_part_dropped(cl_topo *t, int32_t grp, uint32_t part);
/* cl_topo_primary_dropped: 1 when the one that left was its primary. */
int      cl_topo_primary_dropped(cl_topo *t, int32_t grp, uint32_t part);

/* cl_topo_row_crc: the CRC-32C of the partition's committed row
 * (cl_meta_owners_row_crc), for an OWNERS_SET that must apply only over it;
 * 0 when the group has no table. */
uint32_t cl_topo_row_crc(cl_topo *t, int32_t grp, uint32_t part);
/* cl_topo_last_exchange: the id of the last exchange committed on t. */
uint64_t cl_topo_last_exchange(const cl_topo *t);

#endif
