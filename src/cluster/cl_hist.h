/* cl_hist.h - this node's log of recent updates per partition, for
 * historical rebalancing: a copy that comes back (a persistent node
 * restarted with its WAL) is sent only the updates it missed, from an
 * owner's log, when that log still holds all of them.
 *
 * Every update applied here with a partition counter is noted: a primary's
 * writes, a backup's stream, the WAL's records replayed at recovery, the
 * updates a historical load brings.  The log keeps their records in one
 * ring of a fixed size (the oldest go first) and, per partition, the run of
 * consecutive counters it holds and the newest record's place; records of
 * one partition are chained newest to oldest.
 *
 * Safety: a counter alone does not say which update it was.  A deposed
 * primary's last writes, never replicated, have counters the new primary
 * gives other writes; a copy holding them would keep them if it were sent
 * only what came after.  So the returning copy claims its last counter
 * together with a digest of its last (up to CL_HIST_TAIL) updates, and the
 * supplier answers with history only when its own log has the same updates
 * at those counters; otherwise the copy loads whole.
 *
 * Thread-safe (one mutex); noting allocates nothing once the ring and the
 * partition table have grown to their size. */
#ifndef EM_CL_HIST_H
#define EM_CL_HIST_H

#include <stddef.h>
#include <stdint.h>

#include "store/store.h"
#include "util/buf.h"

#define CL_HIST_TAIL 16u              /* updates a claim's digest covers, at most */

typedef struct cl_hist cl_hist;

/* cl_hist_new: a log of `bytes` (records beyond it push the oldest out).
 * 0, EM_NOMEM or EM_INVAL (bytes under 64 KiB). */
int  cl_hist_new(cl_hist **out, size_t bytes);
void cl_hist_free(cl_hist *h);

/* cl_hist_note: u (a PUT, REMOVE or CLEAR of one partition, with its
 * counter; others are ignored) was applied here.  A counter that does not
 * follow the partition's last starts its run over.  NULL h: nothing. */
void cl_hist_note(cl_hist *h, const st_update *u);
/* cl_hist_note_replayed: the same for an update replayed from this node's
 * WAL at recovery (its runs can be claimed, see cl_hist.c). */
void cl_hist_note_replayed(cl_hist *h, const st_update *u);
/* cl_hist_reset: (cache, part) changed other than by noted updates (a
 * load): its run starts over with the next update. */
void cl_hist_reset(cl_hist *h, int32_t cache, uint32_t part);

typedef struct cl_hist_claim {
    uint64_t last;                    /* the partition's last counter here */
    uint32_t k;                       /* updates the digest covers (1..CL_HIST_TAIL) */
    uint64_t digest;                  /* of updates last-k+1 .. last */
} cl_hist_claim;

/* cl_hist_get_claim: what this copy of (cache, part) claims to hold: every
 * update up to claim->last.  0, or EM_NOTFOUND when it cannot say (no run
 * replayed from the WAL, or one broken since). */
int  cl_hist_get_claim(cl_hist *h, int32_t cache, uint32_t part, cl_hist_claim *out);

/* cl_hist_since: when this log holds every update of (cache, part) from
 * claim->last - claim->k + 1 on, consecutively, and the digest of those up
 * to claim->last matches: appends the records after claim->last, oldest
 * first, each as u32 length | wal update record, to out; *n = how many,
 * *last = the counter of the newest (claim->last when none).  EM_NOTFOUND
 * when the log cannot say (not that far back, a gap, other updates),
 * EM_NOMEM. */
int  cl_hist_since(cl_hist *h, int32_t cache, uint32_t part, const cl_hist_claim *claim,
                   em_buf *out, uint32_t *n, uint64_t *last);

typedef struct cl_hist_stats {
    uint64_t noted, evicted, bytes, parts;
} cl_hist_stats;
void cl_hist_stats_get(cl_hist *h, cl_hist_stats *s);

#endif
