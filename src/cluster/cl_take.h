/* cl_take.h - a primary change without two primaries: the member a
 * partition's primary moves to serves it only once the member it moves
 * from has applied the change and streamed every write it made as primary.
 *
 * Members apply a committed topology a moment apart.  When an affinity
 * switch (or a promotion) moves a partition's primary from X to N while X
 * stays a member, N may apply it first and serve the partition while X,
 * not there yet, still runs writes and reads as its primary: a read on X
 * of a write N never gets, then a read on N without it - a history no
 * single copy could give.  (A primary that fails is another matter: the
 * lease makes it stop before the others fail it, cl_node.c.)
 *
 * So, on N, each partition whose primary became this node while the one
 * before, X, is still a member is *held*:
 *  - requests do not run on it as its primary (cl_take_held: routing
 *    waits, a forwarded request is sent back to map again), and it supplies
 *    no copy to rebalancing;
 *  - X's updates of it are applied, not fenced as a deposed primary's
 *    (cl_take_from): X may have acknowledged them to readers already;
 *  - N asks X (REPL_TAKEOVER, the topology's log index), every tick until
 *    answered.  X answers (REPL_TAKEN) once its own topology reached that
 *    index (it no longer maps anything of N's partitions to itself), no
 *    request holds an older topology (every write it mapped as primary has
 *    queued its updates), and its stream to N is sent and settled; the
 *    answer leaves behind that stream on the one link, so N has applied
 *    all of X's updates when it reads it;
 *  - the hold ends with the answer, or when X leaves the topology.
 * A topology published and not looked at yet (cl_take_topology runs just
 * after its publication) is looked at by the first request that needs it.
 *
 * Wire (little-endian): REPL_TAKEOVER and REPL_TAKEN carry u64 the
 * metadata log index of the topology that made the asker the primary.
 */
#ifndef EM_CL_TAKE_H
#define EM_CL_TAKE_H

#include <stddef.h>
#include <stdint.h>

#include "cluster/cl_node.h"
#include "store/store.h"

typedef struct cl_take cl_take;

typedef struct cl_take_cfg {
    cl_node  *node;
    st_store *store;
    /* send_after sends a frame to `to` behind every update queued for it
     * and once they are all settled (cl_repl_send_after): 0, EM_BUSY (not
     * now: ask again on the next tick), or another error. */
    int     (*send_after)(void *arg, cl_meta_uuid to, uint16_t type, const void *p, size_t n);
    void     *arg;
} cl_take_cfg;

typedef struct cl_take_stats {
    uint64_t held;                  /* partitions held since start */
    uint64_t taken;                 /* answers that ended holds */
    uint64_t answered;              /* answers this node gave */
    uint32_t holding;               /* partitions held now */
} cl_take_stats;

/* cl_take_new: EM_NOMEM or 0; it looks at the current topology at once.
 * cl_take_free(NULL) is a no-op. */
int  cl_take_new(cl_take **out, const cl_take_cfg *cfg);
void cl_take_free(cl_take *k);

/* cl_take_topology: a topology was published (cl_node's on_topology). */
void cl_take_topology(cl_take *k);

/* cl_take_held: 1 when this node, the primary of (cache, part) in t, may
 * not serve it as such yet; t not looked at yet is looked at first (takes
 * the store's registry lock: not under a partition lock).  Cheap when
 * nothing is held.  cl_take_holds: the same from what was looked at last,
 * for callers under a partition lock. */
int  cl_take_held(cl_take *k, const cl_topo *t, int32_t cache, uint32_t part);
int  cl_take_holds(cl_take *k, int32_t cache, uint32_t part);

/* cl_take_from: 1 when `from` is the primary this node takes (cache, part)
 * over from and has not answered yet: its updates are applied. */
int  cl_take_from(cl_take *k, int32_t cache, uint32_t part, cl_meta_uuid from);

/* cl_take_on_frame: a REPL_TAKEOVER or REPL_TAKEN (transport thread). */
void cl_take_on_frame(cl_take *k, cl_meta_uuid from, uint16_t type, const uint8_t *p,
                      size_t n);

/* cl_take_tick: asks again, answers what could not be answered at once
 * (transport thread). */
void cl_take_tick(cl_take *k);

void cl_take_stats_get(cl_take *k, cl_take_stats *s);

#endif
