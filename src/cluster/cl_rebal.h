/* cl_rebal.h - rebalancing: a member the exchange made a MOVING copy of a
 * partition loads its entries from the partition's primary while it
 * already receives the partition's live writes (reference/cluster.md §3.10).
 *
 *   demander                            supplier (the partition's primary)
 *   REBAL_DEMAND(grp, part, seq 0)  ->  snapshot of the partition (a scan
 *                                       cursor), once its own topology has
 *                                       the demander MOVING (so every write
 *                                       after the snapshot streams to it)
 *                                   <-  REBAL_SUPPLY(seq 0, entries...)
 *                                   <-  REBAL_SUPPLY(seq 1) ... up to the
 *                                       cache's rebalanceBatchesPrefetchCount
 *                                       (2) ahead of the demands
 *   REBAL_DEMAND(seq 1) at once (batch 0 arrived; the supplier may send up
 *   to seq 1 + prefetch - 1)        ...  REBAL_SUPPLY(seq k, last)
 *   Batches are the cache's rebalanceBatchSize (512 KiB) of entries, and a
 *   supplier pauses its rebalanceThrottle (0 ms) between two of a stream.
 *   REBAL_DONE(grp, part, supplier) -> the coordinator, which commits the
 *   copy as an owner (OWNERS_SET, cl_plan_promote) if its supplier is still
 *   the partition's primary there; when every ideal owner of the
 *   partition owns it, the partition switches to its ideal order and the
 *   others drop it.  The row applies only over the row it was decided on
 *   (CL_META_OWN_EXPECT), and never while an exchange decides (the node's
 *   decide lock): a report that loses either race comes again.
 *
 * A loaded entry never overwrites what the live stream wrote: it is stored
 * only if its key is absent, and keys the live stream removed while the
 * load ran are remembered and skipped; a live CLEAR restarts the load.  A
 * MOVING copy that holds entries (an earlier load's, a demoted owner's) is
 * never cleared: it loads as a merge (see catching up) and reports once
 * whole.
 * A member that neither owns nor loads a partition it holds entries of
 * drops them (RENTING -> EVICTED).
 *
 * A backup owner whose copy no longer equals the primary's (its stream
 * skipped updates, an update's partition counter did not follow its own,
 * the exchange found it behind a new primary) catches up in place with the
 * same DEMAND/SUPPLY exchange, staying an owner: see "catching up" in
 * cl_rebal.c.
 *
 * Wire (little-endian):
 *   REBAL_DEMAND  i32 grp | u32 part | u32 seq
 *   REBAL_SUPPLY  i32 grp | u32 part | u32 seq | u8 flags (1 last, 2 not
 *                 yet: ask again) | u32 n | u64 the supplier's partition counter at
 *                 its snapshot | n x { u32 klen | key | u32 vlen
 *                 | value | i64 expire_at_ms }
 *   REBAL_DONE    i32 grp | u32 part | u64 msb | u64 lsb (the supplier)
 *   REBAL_STALE   i32 grp | u32 part (coordinator -> a backup owner the
 *                 exchange found behind the new primary: catch up)
 */
#ifndef EM_CL_REBAL_H
#define EM_CL_REBAL_H

#include <stddef.h>
#include <stdint.h>

#include "cluster/cl_node.h"
#include "store/store.h"

typedef struct cl_rebal cl_rebal;

typedef struct cl_rebal_cfg {
    cl_node  *node;
    st_store *store;
    uint32_t  batch_bytes;      /* a SUPPLY's entries; 0 = 512 KiB (Ignite's default) */
    uint32_t  throttle_ms;      /* pause between two batches a supplier sends; 0 = none */
    /* With persistence: ckpts, the checkpoints begun and completed so far
     * - a loaded copy is whole on disk once one begun after the load
     * finished has completed, and only then does it report itself loaded;
     * ckpt_now asks for one. */
    void    (*ckpts)(void *arg, uint64_t *started, uint64_t *done);
    void    (*ckpt_now)(void *arg);
    void     *ckpts_arg;
    /* Historical rebalancing of persistent caches (both, or neither):
     * hist, this node's history log (cl_hist.h), already fed the WAL's
     * replay; pset_path, the file of partitions whose copy on disk may be
     * incomplete (cl_pset.h). */
    struct cl_hist *hist;
    const char *pset_path;
    /* take (optional): a partition held here (its primary moved here, the
     * old one has not answered: cl_take.h) supplies nothing yet - the old
     * primary's last writes may still be on their way. */
    struct cl_take *take;
    /* hold (tests only, optional): a file name; while the file exists, a
     * load asks its supplier for nothing (its partition stays MOVING with
     * its entries left to load, for a test to see). */
    const char *hold;
} cl_rebal_cfg;

int  cl_rebal_start(cl_rebal **out, const cl_rebal_cfg *cfg);
/* cl_rebal_halt stops the thread (what the transport calls stays valid);
 * cl_rebal_stop also frees, once nothing calls it any more. */
void cl_rebal_halt(cl_rebal *r);
void cl_rebal_stop(cl_rebal *r);
/* cl_rebal_kick: a new topology (any thread). */
void cl_rebal_kick(cl_rebal *r);

/* cl_rebal_on_frame: a REBAL_* frame (transport thread); nonzero closes
 * the link (a malformed frame). */
int  cl_rebal_on_frame(cl_rebal *r, cl_meta_uuid from, uint16_t type, const uint8_t *p,
                       size_t n);
/* cl_rebal_on_apply: the live stream applied u here (transport thread). */
void cl_rebal_on_apply(void *r, const st_update *u);
/* cl_rebal_copy_stale: this node's copy of (grp, part) missed updates that
 * nobody will send again (any thread).  A backup owner's copy catches up
 * in place (a merge load from the primary: it stays an owner, since it
 * still holds every acknowledged write); a loading copy starts over when
 * its stream skipped updates (skipped), and is left alone otherwise.
 * Until then - and, for a persistent cache, until a checkpoint holds what
 * the merge brought - cl_rebal_copy_is_stale answers 1, so the exchange
 * does not make it primary while a whole copy is left. */
void cl_rebal_copy_stale(void *r, int32_t grp, uint32_t part, int skipped);
/* cl_rebal_copy_fenced: a deposed primary says a new one fenced its updates
 * of (grp, part), which this copy may have applied: as a stale copy that
 * skipped updates, except that it waits (STALE_WAIT_MS at most) while this
 * node's topology still has `deposed` the primary, not to catch up from it. */
void cl_rebal_copy_fenced(void *r, int32_t grp, uint32_t part, cl_meta_uuid deposed);
int  cl_rebal_copy_is_stale(cl_rebal *r, int32_t grp, uint32_t part);
/* cl_rebal_note_behind (the coordinator, once exchange exch is committed):
 * member's copy of (grp, part) is behind the new primary.  Until it
 * reports caught up (or an exchange after exch is decided), promotions
 * (cl_plan_promote) do not make it primary. */
void cl_rebal_note_behind(cl_rebal *r, cl_meta_uuid member, int32_t grp, uint32_t part,
                          uint64_t exch);

typedef struct cl_rebal_stats {
    uint64_t loading;            /* partitions loading here now */
    uint64_t loaded;             /* partitions loaded here since start */
    uint64_t entries_in, bytes_in, batches_in;
    uint64_t batches_out, entries_out;
    uint64_t evicted;            /* partitions dropped here */
    uint64_t owned;              /* MOVING copies the coordinator made owners */
    uint64_t stale;              /* copies here found stale (cl_rebal_copy_stale) */
    uint64_t hist_loads;         /* copies caught up from a supplier's log (historical) */
    uint64_t hist_entries_in;    /* updates those brought */
    uint64_t hist_served;        /* demands this node answered from its log */
    uint64_t caught_up;          /* stale owned copies that caught up in place */
    uint64_t catching_up;        /* copies here that do not count as OWNING now:
                                    stale, merging, or caught up and not yet on disk */
} cl_rebal_stats;
void cl_rebal_stats_get(cl_rebal *r, cl_rebal_stats *s);

#endif
