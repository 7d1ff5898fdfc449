/* cl_rid.h - the window of recent request ids: a forwarded write that ran
 * once is never run again when its forwarder retries it (issue 15).
 *
 * A node that forwards a single-key write to the key's primary names it
 * with an origin request id - its own random origin and a sequence number -
 * and keeps that id through every re-map after a link or an owner was lost.
 * The primary claims the id before it runs the write: a retry of a write
 * still running waits for it, a retry of one that finished gets the
 * original reply (payload, or error status and message).  The updates the
 * write makes carry the id through replication (cl_repl's update header),
 * and every other owner learns the id as it applies them, so after a
 * failover the new primary answers a retry with the outcome the write had -
 * "true" for a conditional op that took effect - instead of deciding again
 * on data the write already changed (a put-if-absent answering false, or a
 * put overwriting a later acknowledged write).
 *
 * The window is bounded: CL_RID_STRIPES stripes of CL_RID_PER_STRIPE
 * entries, each stripe a ring (the oldest entry is reused) with a chained
 * hash index, under its own mutex.  One window per node rather than per
 * partition: it holds the newest writes whatever their partitions, so its
 * reach in time is the same for a hot partition as for a cold one (131 072
 * writes: about 10 s at 13 000 forwarded writes per second, as long as a
 * forwarder's re-map waits by default).  About 15 MiB, calloc'd: touched only
 * as used.
 */
#ifndef EM_CL_RID_H
#define EM_CL_RID_H

#include <stddef.h>
#include <stdint.h>

#define CL_RID_STRIPES    64u
#define CL_RID_PER_STRIPE 2048u
#define CL_RID_INLINE     80u       /* reply bytes kept per entry */

typedef struct cl_rid { uint64_t origin, seq; } cl_rid;

typedef struct cl_rids cl_rids;

/* What a claim found. */
enum cl_rid_state {
    CL_RID_NEW = 0,     /* not seen: run it (the caller finishes the claim) */
    CL_RID_DONE,        /* ran here: res holds its reply */
    CL_RID_APPLIED,     /* ran on another primary; its update reached this node */
    CL_RID_BUSY         /* still running here after the wait */
};

typedef struct cl_rid_res {
    uint16_t op;        /* the thin-client op code of the write */
    int32_t  status;    /* DONE: 0, or the error status of the reply */
    int      big;       /* DONE: the reply did not fit (not kept) */
    uint32_t len;       /* DONE: reply payload (status 0) or message */
    uint8_t  data[CL_RID_INLINE];
} cl_rid_res;

/* cl_rids_new: an empty window (EM_NOMEM).  cl_rids_free(NULL) is a no-op. */
int  cl_rids_new(cl_rids **out);
void cl_rids_free(cl_rids *w);

/* cl_rids_claim looks id up.  Not seen: it is recorded as running here
 * and CL_RID_NEW is returned; the caller runs the write and must call
 * cl_rids_finish.  Running here: waits up to wait_ms for it to finish.  The
 * others fill res. */
int  cl_rids_claim(cl_rids *w, cl_rid id, uint16_t op, uint32_t wait_ms, cl_rid_res *res);

/* cl_rids_finish ends a claim: with effect 0 and an error status the write
 * changed nothing (it may run again: the entry goes); otherwise its reply -
 * the payload (status 0) or the error message - is kept for retries. */
void cl_rids_finish(cl_rids *w, cl_rid id, int effect, int32_t status, const uint8_t *p,
                    size_t n);

/* cl_rids_learn: an update of write id (op) from its primary was applied
 * here (replication's owner side). */
void cl_rids_learn(cl_rids *w, cl_rid id, uint16_t op);

/* The write the current thread runs for a claim, read by replication when
 * the write's updates are streamed: cl_rid_set_current (NULL clears),
 * cl_rid_current (0 when none), cl_rid_note_effect (an update was made),
 * cl_rid_effect. */
void cl_rid_set_current(const cl_rid *id, uint16_t op);
int  cl_rid_current(cl_rid *id, uint16_t *op);
void cl_rid_note_effect(void);
int  cl_rid_effect(void);

typedef struct cl_rids_stats {
    uint64_t claims, retries_done, retries_applied, busy, learned, evicted;
} cl_rids_stats;
void cl_rids_stats_get(cl_rids *w, cl_rids_stats *out);

#endif
