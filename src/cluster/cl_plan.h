/* cl_plan.h - the exchange's decisions as pure functions: a topology and
 * the members' reports in, metadata entries and maps out.  No threads, no
 * I/O, no clock: cl_pme and cl_rebal run them and commit what they return,
 * and the ownership simulation (tests/sim/sim_own.c) runs the very same
 * code under seeded faults and interleavings.
 */
#ifndef EM_CL_PLAN_H
#define EM_CL_PLAN_H

#include <stddef.h>
#include <stdint.h>

#include "cluster/cl_meta_fsm.h"
#include "cluster/cl_pmap.h"
#include "cluster/cl_topo.h"
#include "store/store.h"
#include "util/buf.h"

#define CL_PLAN_MAX_OWNERS  256
#define CL_PLAN_ENTRY_SPLIT (512u << 10)  /* decision entries stay well under the log's bound */

/* What a node's upper layers know of one cache group. */
typedef struct cl_plan_group {
    int32_t  grp;            /* group id (ember: the cache id) */
    uint32_t parts;
    uint32_t backups;
    uint8_t  replicated;
    uint8_t  loss_policy;    /* Ignite's PartitionLossPolicy ordinal */
} cl_plan_group;

/* cl_plan_group_of: cache id's group (ember keeps one partition space per
 * cache) from its configuration, with parts partitions. */
cl_plan_group cl_plan_group_of(const st_cache_config *cfg, int32_t id, uint32_t parts);

/* cl_plan_ideal: the group's ideal owners of part on t (primary first), as
 * indices into t->m; returns how many (at most CL_PLAN_MAX_OWNERS). */
uint32_t cl_plan_ideal(cl_topo *t, const cl_plan_group *g, uint32_t part, uint32_t *o);

/* cl_plan_owners: the owners requests for part are routed to, primary
 * first, as indices into t->m: the group's committed owners (cl_topo_owners);
 * before its first decision, its ideal owners while t has a single member
 * (it serves alone) and none while it has more: which member holds what is
 * that decision's to say, and a member may join before it commits (routing
 * on the ideal owners of each topology would move the primary away from
 * the writes).  Requests wait for the decision (the exchange that follows
 * a cache's start). */
uint32_t cl_plan_owners(cl_topo *t, const cl_plan_group *g, uint32_t part, uint32_t *idx,
                        uint32_t max);

/* cl_plan_fenced: the replication stream's rule - may an update mapped at
 * topology version epoch (major << 32 | minor) by member `from` apply to a
 * copy of part on t?  Not when t is newer and `from` is no longer the
 * partition's primary there: a primary deposed since, whose writes the new
 * one may not have (the copy catches up instead). */
int cl_plan_fenced(cl_topo *t, const cl_plan_group *g, uint32_t part, uint64_t epoch,
                   cl_meta_uuid from);

/* info: a local partition's update counter and entry count; 0,
 * CL_PLAN_BEHIND when the copy here catches up with its primary (its
 * counter is given as 0), or an error (< 0) when the group is gone here. */
#define CL_PLAN_BEHIND 1
typedef int (*cl_plan_info_fn)(void *arg, int32_t grp, uint32_t part, uint64_t *cntr,
                               uint64_t *size);

/* cl_plan_single_build: member self's single message for exchange exch on t
 * (every partition it owns, or holds entries of), encoded into out. */
int cl_plan_single_build(cl_topo *t, const cl_plan_group *g, uint32_t ng, cl_meta_uuid self,
                         uint64_t exch, cl_plan_info_fn info, void *arg, em_buf *out);

/* A member's decoded single message (ok = 0: none arrived). */
typedef struct cl_plan_single { cl_psingle s; int ok; } cl_plan_single;

/* cl_plan_decide: exchange exch's decision on t, v[i] being what t->m[i]
 * reported (see cl_pme.h for the rules).  Appends to e the OWNERS_SET
 * entries to commit, in order (each complete, split near
 * CL_PLAN_ENTRY_SPLIT; none when nothing changes), and to behind
 * u32 member index | i32 group | u32 partition per owner that must catch up
 * with a new primary once they are committed.  0 or EM_NOMEM / an encoder's
 * error. */
int cl_plan_decide(cl_topo *t, const cl_plan_group *g, uint32_t ng, const cl_plan_single *v,
                   uint64_t exch, em_buf *e, em_buf *behind);

/* cl_plan_full_map: the map of the committed exchange exch on t (which
 * holds its decision); slot_of[i] is where t->m[i]'s single is in v (an
 * index past the singles reads as none). */
int cl_plan_full_map(cl_topo *t, const cl_plan_group *g, uint32_t ng, const cl_plan_single *v,
                     const uint32_t *slot_of, uint64_t exch, em_buf *out);

/* behind: 1 while member's copy of (grp, part) is known to catch up with
 * the primary (the coordinator's record of its last decision's behind
 * list), so it must not be made primary yet. */
typedef int (*cl_plan_behind_fn)(void *arg, cl_meta_uuid member, int32_t grp, uint32_t part);

/* cl_plan_promote: member `from` reports partition part of group g loaded.
 * When it is one of the partition's MOVING copies on t, appends the
 * partition's new row to enc (the reporter owns it; once every ideal owner
 * does, the ideal order and nobody else - unless that would make primary
 * an owner still catching up (behind, optional): then the reporter joins
 * the owners as they are, and the ideal primary's own report switches
 * later) and returns 1; 0 when it is not loading it there (any more) or
 * nothing is left to own.  sup is the primary the copy loaded (or caught
 * up) from: a report of a load from another one than the partition's
 * primary on t, or one made while the primary left and the exchange has not
 * chosen the next (a copy with a higher counter may hold acknowledged
 * writes this one's supplier never sent), is not taken - the copy loads
 * from the new primary and reports again. */
int cl_plan_promote(cl_topo *t, cl_meta_owners_enc *enc, const cl_plan_group *g,
                    cl_meta_uuid from, cl_meta_uuid sup, uint32_t part,
                    cl_plan_behind_fn behind, void *barg);
/* cl_plan_report_current: 1 when sup is the primary of part on t and the
 * exchange has not still to choose the next one (see cl_plan_promote). */
int cl_plan_report_current(cl_topo *t, const cl_plan_group *g, cl_meta_uuid sup, uint32_t part);

/* cl_plan_reset_lost: the group's lost partitions on t get their ideal
 * owners, empty (Ignite's resetLostPartitions): appends one OWNERS_SET entry
 * to e when there are any; *reset gets how many. */
int cl_plan_reset_lost(cl_topo *t, const cl_plan_group *g, em_buf *e, uint32_t *reset);

#endif
