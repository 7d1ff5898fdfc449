/* cl_pme.h - the partition map exchange (reference/cluster.md §3.5).
 *
 * On every new topology version (a member joined, left or failed; a cache
 * started or stopped; the state changed) the leader of the metadata group,
 * the coordinator, runs one exchange:
 *
 *   1. it asks every member for its single message (PME_SREQ: u64 exchange
 *      id, u32 k, the k member ids of its topology); a member on an older
 *      topology stops hearing replication from the members it knows and
 *      the request does not name (cl_pme_cfg.left), and every member
 *      first waits until no request mapped on an older topology is still
 *      running (bounded), then answers PME_SINGLE
 *      (u64 exchange id | the single message, compressed: cl_zip.h);
 *   2. it merges them with the committed owner tables and decides
 *      (cl_plan_decide): a new group gets its ideal owners, or keeps the
 *      members that already hold entries of a partition; a partition whose
 *      owners all left is LOST (or, under the IGNORE policy, gets its ideal
 *      owners afresh); when a primary left, the surviving owner with the
 *      highest update counter becomes primary (ties: the old order; when it
 *      is not the first survivor, where requests went meanwhile, the
 *      decision is an affinity switch: a new topology version fences that
 *      one's writes), and owners behind it are told to catch up
 *      (cl_pme_cfg.behind); ideal owners without a copy become MOVING, and
 *      once every ideal owner owns a partition the others are dropped;
 *   3. it commits only the decision (OWNERS_SET entries, changed partitions
 *      only, then EXCH_DONE) through the metadata group, so routing on every
 *      node changes with the log - under the node's decide lock, from its
 *      snapshot to EXCH_DONE, so no promotion commits in between - and
 *   4. broadcasts the full map (PME_FULL: the map, compressed) to every
 *      member; a member whose map is older than the last committed exchange
 *      asks the leader for it (PME_FREQ: u64 the exchange id it has).
 *
 * A newer topology while an exchange runs abandons it (the next one covers
 * both).  A member that does not answer within the collect timeout is left
 * out of the map (its committed ownership stands until the group fails it).
 */
#ifndef EM_CL_PME_H
#define EM_CL_PME_H

#include <stddef.h>
#include <stdint.h>

#include "cluster/cl_node.h"
#include "cluster/cl_plan.h"
#include "cluster/cl_pmap.h"


typedef struct cl_pme_cfg {
    void *arg;
    /* groups: the started caches, up to cap of them into out; returns how
     * many there are (call again with more room when that is above cap). */
    uint32_t (*groups)(void *arg, cl_plan_group *out, uint32_t cap);
    /* part_info: a local partition's update counter and entry count; 0,
     * CL_PLAN_BEHIND (a copy catching up, counter 0) or an error (< 0: the
     * group is gone here). */
    int (*part_info)(void *arg, int32_t grp, uint32_t part, uint64_t *cntr, uint64_t *size);
    /* other (optional): frames of types the exchange does not handle
     * (rebalancing's), on the transport thread; nonzero closes the link. */
    int (*other)(void *arg, cl_meta_uuid from, uint16_t type, const uint8_t *p, size_t n);
    void *other_arg;
    /* behind (optional): after a decision that replaced a dead primary, an
     * owner of the partition whose counter was below the new primary's
     * (it missed writes only the dead one had sent) must catch up; called
     * on the exchange's thread, once exchange exch is committed. */
    void (*behind)(void *arg, cl_meta_uuid member, int32_t grp, uint32_t part, uint64_t exch);
    /* left (optional): a single request for an exchange on a topology this
     * node has not applied yet names the members it has, and this node
     * knows one it does not (it left); called for each on the transport
     * thread, before the request is answered. */
    void (*left)(void *arg, cl_meta_uuid member, uint64_t exch);
    uint32_t collect_ms;     /* how long the coordinator waits for singles; 0 = 5000 */
    uint32_t release_ms;     /* bound on the partition release wait; 0 = 2000 */
} cl_pme_cfg;

typedef struct cl_pme cl_pme;

/* A single request (CL_NET_MSG_PME_SREQ): u64 exchange id, u32 k, then the
 * exchange topology's k member ids (16 bytes each).  cl_pme_sreq_check: 0
 * when n bytes at b are exactly that. */
int  cl_pme_sreq_check(const uint8_t *b, size_t n);

int  cl_pme_start(cl_pme **out, cl_node *node, const cl_pme_cfg *cfg);
void cl_pme_stop(cl_pme *p);

/* cl_pme_kick: a new topology was published (any thread). */
void cl_pme_kick(cl_pme *p);

/* cl_pme_reset_lost: the group's lost partitions get the current members
 * that ideally own them, empty (Ignite's resetLostPartitions), through the
 * metadata group.  0, EM_NOCACHE (no such group), EM_NOTLEADER, EM_TIMEOUT.
 * *reset gets how many partitions came back.  Not on the transport thread. */
int  cl_pme_reset_lost(cl_pme *p, int32_t grp, uint32_t *reset);

typedef struct cl_pme_stats {
    uint64_t exchanges;          /* exchanges this node coordinated */
    uint64_t last_ms;            /* the last one's duration */
    uint64_t map_exch;           /* the exchange id of the full map held here */
    uint64_t map_hash;           /* a hash of that map (equal maps, equal hashes) */
    uint64_t map_bytes, map_zbytes;  /* its size encoded and compressed */
    uint64_t lost;               /* partitions the map says are lost */
    uint64_t bad_frames;         /* exchange frames refused */
} cl_pme_stats;
void cl_pme_stats_get(cl_pme *p, cl_pme_stats *s);

/* cl_pme_map_copy appends the full map held here (encoded, cl_pmap.h; nothing
 * before the first exchange) to out, for operators' views: 0 or EM_NOMEM. */
int  cl_pme_map_copy(cl_pme *p, em_buf *out);

#endif
