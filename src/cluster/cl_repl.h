/* cl_repl.h - replication: the primary streams every applied update of a
 * partition to the partition's other owners, which apply it and ack
 * (reference/cluster.md §3.6; issue 14).
 *
 * Primary side.  cl_repl is the store's write observer, chained in front of
 * the one installed before it (the WAL): each update is logged first, then,
 * when this node is the partition's primary (cl_topo_owners), it takes the
 * partition's next update counter and is encoded once - the WAL's update
 * record (wal_encode_update) behind a small header - and appended to the
 * outgoing stream of every other owner.  Conditional ops were decided by
 * the store before it reported their outcome, so replicating what the
 * observer sees keeps every op's meaning (and each PUT's expiry deadline).
 * The thread that ran the request sends the streams when it finishes
 * (cl_repl_finish): what several threads appended meanwhile leaves in one
 * REPL_UPDATE frame per peer.  Under FULL_SYNC it then waits until every
 * owner the update was sent to acked it, dropping owners that left the
 * topology, at most timeout_ms.  A request that read a partition here as
 * its primary (the store's read observer) waits the same way for what the
 * partition streamed before it read, so nothing it answers dies with this
 * node (see "reads on the primary" in cl_repl.c).
 *
 * Owner side (transport thread).  A REPL_UPDATE is applied with st_apply
 * (which does not call the observer) and then logged through the chained
 * observer (the WAL, which skips in-memory regions), so every owner logs its
 * copy once; then the WAL's group commit, then REPL_ACK: per partition the
 * highest contiguous counter applied (cumulative, one entry per partition
 * per frame).
 *
 * Epoch fencing.  Every update carries the primary's epoch (today the
 * topology major version; the partition map exchange will supply primary
 * epochs).  An owner refuses an update whose epoch is older than its own
 * topology's unless the sender is still the partition's primary there (the
 * primary epoch would not have changed); the refusal travels back in the
 * ack and fails a FULL_SYNC write waiting for it.
 *
 * Lost frames.  A primary keeps each update it sent until the owner acks
 * or refuses it and sends the kept window again when the owner reports a
 * gap (every update names the counter sent to that owner before it) or
 * when nothing was settled for a retransmit interval; owners skip what
 * they have.  An owner never applies past a gap, and refuses the missing
 * updates only after waiting timeout_ms for them (on_update in cl_repl.c).
 *
 * Wire (little-endian).  REPL_UPDATE payload: one or more updates, each
 *   i32 cache id | u32 partition | u64 counter | u64 previous counter sent
 *   to this owner | u64 epoch | u32 len (bit 31: epoch changed; bit 30: the
 *   write's origin request id follows) | [u64 origin | u64 seq | u16 op] |
 *   record
 * REPL_ACK payload: one or more entries, each
 *   i32 cache id | u32 partition | u64 counter | u64 from | i32 status
 *   (0: applied up to counter; EM_AGAIN: a gap from..counter, send again;
 *   another EM_*: from..counter refused)
 */
#ifndef EM_CL_REPL_H
#define EM_CL_REPL_H

#include <stddef.h>
#include <stdint.h>

#include "cluster/cl_node.h"
#include "store/store.h"

typedef struct cl_repl cl_repl;

typedef struct cl_repl_opts {
    cl_node  *node;
    st_store *store;
    uint32_t  timeout_ms;           /* FULL_SYNC wait bound; 0 = 10 000 */
    /* durable (optional): the WAL's group commit for what this thread
     * appended, before an owner acks. */
    int     (*durable)(void *arg);
    void     *durable_arg;
    /* find_cache (optional): the cache with this id, waiting a bounded time
     * for a cache start the metadata group has not applied here yet. */
    st_cache *(*find_cache)(void *arg, int32_t id);
    void     *find_arg;
    /* on_apply (optional): an update of the live stream applied here
     * (rebalancing remembers removals of partitions it is loading). */
    void    (*on_apply)(void *arg, const st_update *u);
    void     *on_apply_arg;
    /* on_stale (optional): this copy of a partition no longer equals the
     * primary's and must catch up (cl_rebal): skipped 1 when its stream
     * went past updates it never applied (a gap given up, an update
     * refused), 0 when an update's partition counter did not follow the
     * copy's (it missed another stream's updates, or has some the primary
     * never had; a copy still loading is expected to). */
    void    (*on_stale)(void *arg, int32_t cache, uint32_t part, int skipped);
    void     *on_stale_arg;
    /* on_fenced (optional): a deposed primary, `from`, says a new one
     * fenced its updates of the partition, which this copy may have
     * applied first: it catches up from the new primary, never from
     * `from` (cl_rebal_copy_fenced). */
    void    (*on_fenced)(void *arg, int32_t cache, uint32_t part, cl_meta_uuid from);
    void     *on_fenced_arg;
    /* rids (optional): the window of recent request ids, which learns the
     * id of every update that carries one (cl_rid.h). */
    struct cl_rids *rids;
    /* hist (optional): the history log every update of a persistent cache
     * applied here goes into (cl_hist.h). */
    struct cl_hist *hist;
    /* take (optional): partitions whose primary moved here and are held
     * until the old primary answers (cl_take.h): no write runs here as
     * their primary, and the old primary's updates are not fenced. */
    struct cl_take *take;
    /* hold (tests only, optional): a file name; while the file exists, the
     * updates this node streams stay queued, unsent - a primary that
     * applied writes and has not sent them yet, for as long as a test
     * needs to read them there or kill it. */
    const char *hold;
} cl_repl_opts;

/* cl_repl_start chains the observer in front of the store's current one and
 * answers the store's question of which copy a partition is here.  0 or
 * EM_NOMEM.  cl_repl_stop restores the previous observer; call it after the
 * threads that run requests stopped. */
int  cl_repl_start(cl_repl **out, const cl_repl_opts *o);
void cl_repl_stop(cl_repl *r);

/* cl_repl_on_frame: a REPL_UPDATE or REPL_ACK from `from` (cl_node's
 * on_repl, transport thread). */
void cl_repl_on_frame(cl_repl *r, cl_net_link *l, cl_meta_uuid from, uint16_t type,
                      const uint8_t *p, size_t n);

/* cl_repl_topology: the topology changed (wakes FULL_SYNC waiters, which
 * drop owners that left). */
void cl_repl_topology(cl_repl *r);

/* cl_repl_begin forgets what this thread replicated before; call it when a
 * request starts.  cl_repl_finish sends the streams and, when an update the
 * request made belongs to a FULL_SYNC cache, waits for its owners' acks:
 * 0, EM_TIMEOUT (not every owner acked in time), EM_STALE (an owner refused
 * the update: another primary or a lost update).  The request's updates are
 * applied on this node either way. */
void cl_repl_begin(void);
int  cl_repl_finish(cl_repl *r);

/* cl_repl_primary_only (per thread): on while a request runs the writes it
 * mapped to this node as their keys' primary.  A PUT or REMOVE of a key
 * whose primary is another member by then fails with EM_STALE, nothing
 * applied, and the request maps again. */
void cl_repl_primary_only(int on);
/* cl_repl_member_left: member id left the topology, as exchange exch says
 * before this node applied that (transport thread, before its single
 * message reports the counters): its updates still in flight here are
 * refused until this node's topology reaches exch (cl_plan_fenced refuses
 * them from then on).  Otherwise, applied after the report, one would
 * leave this copy an update ahead of what it reported, and the exchange
 * could make another copy with the reported counter the primary. */
void cl_repl_member_left(cl_repl *r, cl_meta_uuid id, uint64_t exch);
/* cl_repl_tx_index (per thread): the metadata log index of the topology
 * this thread's last one-unit commit (st_tx_commit) planned its owners on. */
uint64_t cl_repl_tx_index(void);

/* FULL_SYNC without a waiting thread.  cl_repl_finish_defer is
 * cl_repl_finish, except that when the request's acks must be waited for
 * and it touched at most CL_REPL_AWAIT_MAX partitions, it sends the streams
 * and returns CL_REPL_DEFERRED, keeping what to wait for on this thread for
 * cl_repl_await_start (call it before this thread's next request). */
#define CL_REPL_DEFERRED  1
#define CL_REPL_AWAIT_MAX 4
int  cl_repl_finish_defer(cl_repl *r);
/* cl_repl_ticket_fits: 1 when what this thread's request waits for (if
 * anything) fits a deferred wait, so cl_repl_finish_defer cannot block. */
int  cl_repl_ticket_fits(void);
/* cl_repl_finish_pass is cl_repl_finish_defer for a loop thread that calls
 * cl_repl_pass_end at the end of each pass: the streams leave then, once
 * for every write of the pass (the backups get one frame, and ack once,
 * for all of them).  It sends at once when it must wait itself. */
int  cl_repl_finish_pass(cl_repl *r);
void cl_repl_pass_end(void);

/* An await: the caller's storage, owned by cl_repl from a start that
 * returned 0 until done runs or a cancel returns 1.  done(arg, rc) runs
 * once, rc as cl_repl_finish's or EM_CLOSED (cl_repl_await_drain), on the
 * thread that settled it (the transport's, mostly; never with the waits'
 * lock held).  With cancel_waits, a cancel and a new start on the same
 * storage wait until done has returned, which makes cancel exact; done may
 * then only record and wake, never call into cl_repl or the node. */
typedef struct cl_repl_await {
    void   (*done)(void *arg, int rc);
    void    *arg;
    int      cancel_waits;
    /* cl_repl.c's */
    struct { void *c; uint32_t part; uint64_t ctr; int read; } e[CL_REPL_AWAIT_MAX];
    uint32_t n, at;                 /* entries; the first not acked yet */
    uint64_t end_ms;
    int      rc;                    /* its result, from settling to done */
    uint8_t  settling;              /* cancel_waits: settled, done not returned */
    struct cl_repl_await *next;
} cl_repl_await;

/* cl_repl_await_start takes over what cl_repl_finish_defer kept: 0 (done
 * runs later), or 1 with *rc the result when it is known at once (the acks
 * were in already; done does not run). */
int  cl_repl_await_start(cl_repl *r, cl_repl_await *a, int *rc);
/* cl_repl_await_cancel: 1 when a was still waiting (done never runs), 0
 * when it was settled (with cancel_waits, done has returned). */
int  cl_repl_await_cancel(cl_repl *r, cl_repl_await *a);
/* cl_repl_await_drain settles every await still waiting with EM_CLOSED
 * (stopping: before the node stops, since done may answer through it). */
void cl_repl_await_drain(cl_repl *r);

/* cl_repl_flush sends what is queued for every peer whose stream is not
 * busy (the transport's tick calls it, for updates made outside requests;
 * a busy stream's writer sends it). */
void cl_repl_flush(cl_repl *r);

/* cl_repl_send_after sends frame (type, p, n) to `to` behind every update
 * queued for it, once all it was sent is settled (acked or refused): 0,
 * EM_BUSY (its stream is busy or unsettled: try again later), or the send's
 * error.  Any thread; the stream lock is only tried. */
int  cl_repl_send_after(cl_repl *r, cl_meta_uuid to, uint16_t type, const void *p, size_t n);

/* cl_repl_copy: which copy of partition part of cache c this node holds now
 * (ST_COPY_PRIMARY, ST_COPY_BACKUP, ST_COPY_NONE); primary when alone. */
int  cl_repl_copy(cl_repl *r, const st_cache_config *cfg, int32_t cache_id, uint32_t part);

/* cl_repl_owners: owners of partition part of a cache (cl_plan_owners with
 * the cache's mode and backups), as indices into t->m. */
uint32_t cl_repl_owners(cl_topo *t, const st_cache_config *cfg, int32_t cache_id,
                        uint32_t part, uint32_t *idx, uint32_t max);

typedef struct cl_repl_stats {
    uint64_t sent_updates, sent_frames, applied, acks_in, refused, waits, timeouts;
    uint64_t resent;                /* windows sent again (asked for, or no progress) */
    uint64_t nacks;                 /* updates this owner answered "gap, send again" */
    uint64_t skipped;               /* gaps given up on: the missing updates refused */
    uint64_t given_up;              /* windows dropped unsettled (peer gone or too far behind) */
    uint64_t fence_notices;         /* copies told their updates from here were fenced */
    uint64_t moved;                 /* writes refused here: the primary moved after mapping */
    uint64_t read_waits;            /* requests that waited for the acks of what they read */
} cl_repl_stats;
void cl_repl_stats_get(const cl_repl *r, cl_repl_stats *s);

#endif
