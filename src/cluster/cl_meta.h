/* cl_meta.h - the metadata group: one Raft group (Debian's libraft 0.15)
 * holding members, topology version, cache configurations, binary types,
 * cluster state and baseline (reference/cluster.md §3.2), behind an
 * interface of our own - propose, read, subscribe - so the library can be
 * swapped (cowsql/raft has the same API).  The state and its entries are in
 * cl_meta_fsm.h.
 *
 * Threads.  Each cl_meta owns one thread running its own libuv loop with
 * raft_uv (segmented log and snapshots in cfg.dir) and raft_uv_tcp.  Every
 * libraft call happens on that thread.  Other threads post work through a
 * queue and uv_async_send.  Every callback registered here - propose and
 * membership completions, subscribers - is called ON THE METADATA THREAD;
 * it must not block (hand results to a worker through its own eventfd or
 * queue).  It may call cl_meta_propose / cl_meta_read / cl_meta_info.
 *
 * Roles.  Up to 5 voters, kept odd; every other member is a RAFT_STANDBY
 * that still receives and applies the log.  The Raft leader is the
 * coordinator.  A node bootstraps a new group only when cfg.bootstrap is set
 * (and its directory holds no group); otherwise it waits to be added by the
 * leader (cl_meta_add), so two nodes cannot each create a cluster.
 */
#ifndef EM_CL_META_H
#define EM_CL_META_H

#include <stddef.h>
#include <stdint.h>

#include "cluster/cl_meta_fsm.h"

typedef struct cl_meta cl_meta;

typedef struct cl_meta_cfg {
    uint64_t    raft_id;        /* this server's Raft id, != 0 */
    const char *raft_addr;      /* "ip:port" it listens on and peers dial */
    const char *dir;            /* an existing directory for the log */
    int         bootstrap;      /* 1: create a one-voter group if dir is pristine */
    unsigned    election_ms;    /* 0: 1000 (randomised 1x-2x by libraft) */
    unsigned    heartbeat_ms;   /* 0: 100 */
    size_t      segment_size;   /* 0: libraft's 8 MiB; tests use less */
    unsigned    snapshot_threshold;  /* 0: 1024 entries */
    unsigned    snapshot_trailing;   /* 0: 128 */
    char       *errmsg;         /* NULL, or CL_META_ERRMSG bytes: why start failed */
    /* The cluster secret (NULL: none): every connection of the group then
     * proves it before libraft reads from it (cl_meta_auth.c). */
    const char *secret;
    size_t      secret_len;
    /* The cluster's TLS peer context (NULL: none): every connection of the
     * group is then encrypted with it (cl_meta_tls.c). */
    struct net_tls_ctx *tls;
    /* A subscriber registered before raft_start, so it also sees the
     * snapshot restored and the entries replayed while starting (NULL: none). */
    void      (*on_apply)(void *arg, const struct cl_meta_entry *e,
                          const struct cl_meta_effect *eff);
    void       *on_apply_arg;
} cl_meta_cfg;

#define CL_META_ERRMSG 256

/* cl_meta_done_cb: completion of a proposal or membership change.  status 0,
 * the FSM's refusal (see cl_meta_fsm.h), EM_NOTLEADER (not proposed here),
 * EM_LOSTLEADER (outcome unknown: it may still commit), EM_CLOSED, ...  eff
 * is the entry's effect for a committed proposal, else NULL. */
typedef void (*cl_meta_done_cb)(void *arg, int status, const cl_meta_effect *eff);

/* cl_meta_sub_cb: see cl_meta_raft.h (each applied entry, in log order;
 * e == NULL when a snapshot replaced the state). */
typedef void (*cl_meta_sub_cb)(void *arg, const cl_meta_entry *e,
                               const cl_meta_effect *eff);

/* cl_meta_start starts the thread, opens dir, bootstraps if asked and starts
 * Raft.  Returns 0 with *out, or an EM_* / -errno code. */
int  cl_meta_start(cl_meta **out, const cl_meta_cfg *cfg);

/* cl_meta_stop refuses new requests (EM_CLOSED), completes the ones still
 * queued with EM_CLOSED, gives those already in libraft up to three
 * election timeouts to finish, hands leadership to another voter if this
 * server leads, closes Raft, joins the thread and frees m.
 * Every callback has run when it returns.  Not from the metadata thread. */
void cl_meta_stop(cl_meta *m);

/* cl_meta_propose copies entry (an encoded cl_meta entry) and proposes it.
 * 0: cb will be called exactly once (metadata thread).  Else EM_NOMEM or
 * EM_CLOSED and cb is not called.  Only the leader accepts proposals
 * (EM_NOTLEADER otherwise: forward to cl_meta_info's leader). */
int  cl_meta_propose(cl_meta *m, const void *entry, size_t len,
                     cl_meta_done_cb cb, void *arg);

/* cl_meta_barrier appends a no-op entry and completes, as a proposal does,
 * once it committed and this server applied everything before it (eff has
 * only its index).  It proves leadership: a deposed leader that has not
 * heard of its successor answers EM_LOSTLEADER, not stale state. */
int  cl_meta_barrier(cl_meta *m, cl_meta_done_cb cb, void *arg);

/* cl_meta_read calls fn with the applied state under a read lock (any
 * thread; fn must not block or keep pointers into the state). */
void cl_meta_read(cl_meta *m, void (*fn)(void *arg, const cl_meta_fsm *s), void *arg);

/* cl_meta_subscribe registers cb for every entry applied from now on (any
 * thread; 14 at most besides cfg.on_apply; no unsubscribe: cb must outlive
 * m).  Entries applied while starting are seen only through cfg.on_apply. */
int  cl_meta_subscribe(cl_meta *m, cl_meta_sub_cb cb, void *arg);

/* cl_meta_add adds server (raft_id, raft_addr) on the leader: it joins as a
 * spare, becomes a standby, and the voters are rebalanced (<= 5, odd).
 * cl_meta_remove removes one (not the leader itself) and rebalances.  One
 * change runs at a time; later ones wait in order.  Completion as for
 * cl_meta_propose (eff NULL).  These change the Raft configuration only: the
 * NODE_JOIN / NODE_LEAVE entries are proposed separately (cluster.md §3.3). */
int  cl_meta_add(cl_meta *m, uint64_t raft_id, const char *raft_addr,
                 cl_meta_done_cb cb, void *arg);
int  cl_meta_remove(cl_meta *m, uint64_t raft_id, cl_meta_done_cb cb, void *arg);

/* cl_meta_info: this server's view, refreshed by the metadata thread after
 * every apply, every membership change and every heartbeat period.
 * CL_META_ROLE_NONE after a successful start means libraft stopped this
 * server for good (0.15 does so on a disk error, or when the FSM ran out of
 * memory applying an entry on a follower): its state is a consistent prefix;
 * cl_meta_stop and cl_meta_start on the same directory replay the log. */
enum { CL_META_ROLE_NONE = 0, CL_META_ROLE_FOLLOWER, CL_META_ROLE_CANDIDATE,
       CL_META_ROLE_LEADER };
typedef struct cl_meta_info {
    int      role;                 /* CL_META_ROLE_* */
    uint64_t term;
    uint64_t leader_id;            /* 0 if unknown */
    char     leader_addr[CL_META_MAX_ADDR + 1];
    uint64_t last_applied;
    unsigned voters, standbys, spares;
    uint64_t voter_ids[8];         /* the first (at most 8) voters' raft ids */
    int      created;              /* this server created the group when it started
                                      (bootstrap into a pristine directory) */
} cl_meta_info;
void cl_meta_get_info(cl_meta *m, cl_meta_info *out);

#endif
