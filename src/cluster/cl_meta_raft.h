/* cl_meta_raft.h - the libraft-facing half of cl_meta: the raft_fsm adapter
 * around cl_meta_fsm, the voter/standby planner and the membership-change
 * driver.  cl_meta.c runs them on its own thread under raft_uv; the tests run
 * the very same code under libraft's in-memory fixture.  Only cl_meta*.c and
 * their tests include this header (it pulls in <raft.h>).
 *
 * Everything here runs on the thread that drives the raft instance, except
 * cl_meta_node_read, which any thread may call.
 */
#ifndef EM_CL_META_RAFT_H
#define EM_CL_META_RAFT_H

#include <pthread.h>
#include <raft.h>
#include <stdatomic.h>

#include "cluster/cl_meta_fsm.h"

#define CL_META_MAX_SUBS 16

/* cl_meta_sub_cb: called for each applied entry, in log order, on the Raft
 * thread, after the state has changed (cl_meta_node_read already sees it).
 * e is NULL when a snapshot replaced the whole state (eff->index is the
 * snapshot's index, eff->type 0); e->type is 0 for an entry that did not
 * decode (eff->status says why).  e's views are valid during the call only.
 * It must not block. */
typedef void (*cl_meta_sub_cb)(void *arg, const cl_meta_entry *e,
                               const cl_meta_effect *eff);

typedef struct cl_meta_sub {
    cl_meta_sub_cb cb;
    void          *arg;
} cl_meta_sub;

/* cl_meta_node: one replica of the metadata state and its adapter.  Pass
 * &node->fsm to raft_init (or raft_fixture_grow), then cl_meta_node_bind the
 * raft instance before raft_start. */
typedef struct cl_meta_node {
    struct raft_fsm  fsm;
    struct raft     *raft;
    cl_meta_fsm      state;      /* written on the Raft thread under lock */
    pthread_rwlock_t lock;
    cl_meta_effect   last;       /* the result raft_apply callbacks receive */
    cl_meta_sub      subs[CL_META_MAX_SUBS];
    _Atomic unsigned n_subs;
    uint64_t         nomem;      /* applies deferred for want of memory */
    /* The raft_io guard (cl_meta_node_bind): the io's own methods, and
     * whether a reply that must not leave is being sent now. */
    int (*io_append)(struct raft_io *io, struct raft_io_append *req,
                     const struct raft_entry entries[], unsigned n, raft_io_append_cb cb);
    int (*io_send)(struct raft_io *io, struct raft_io_send *req,
                   const struct raft_message *message, raft_io_send_cb cb);
    int (*io_start)(struct raft_io *io, unsigned msecs, raft_io_tick_cb tick,
                    raft_io_recv_cb recv);
    raft_io_recv_cb  io_recv;
    int              quiet;
    uint64_t         verified;       /* an answer now may claim up to here (0: any) */
    uint64_t         stale_replies;  /* AppendEntries successes dropped (a new term) */
    uint64_t         capped_replies; /* ... whose claim was cut to what was checked */
    uint64_t         capped_commits; /* AppendEntries whose leader_commit was lowered */
    uint64_t         capped_old;     /* answers to a leader claiming older-term entries */
} cl_meta_node;

/* cl_meta_node_bind: n serves raft r (after raft_init, or the fixture's
 * grow; before raft_start).  It also guards r's raft_io against libraft
 * 0.15's stale follower reply (cl_meta_raft.c "The io guard"). */
/* cl_meta_node_init: 0 or EM_NOMEM.  cl_meta_node_free after raft_close. */
int  cl_meta_node_init(cl_meta_node *n);
void cl_meta_node_free(cl_meta_node *n);
void cl_meta_node_bind(cl_meta_node *n, struct raft *r);

/* cl_meta_node_subscribe adds a callback (there is no unsubscribe: callers
 * live as long as the node).  Any thread; 0 or EM_TOOMANY. */
int cl_meta_node_subscribe(cl_meta_node *n, cl_meta_sub_cb cb, void *arg);

/* cl_meta_node_read calls fn with the state under a read lock, from any
 * thread.  fn must not keep pointers into the state after it returns. */
void cl_meta_node_read(cl_meta_node *n, void (*fn)(void *arg, const cl_meta_fsm *s),
                       void *arg);

/* cl_meta_raft_buf copies an encoded entry into a raft_malloc'd buffer for
 * raft_apply, zero-padded to a multiple of 8 bytes: libraft 0.15's raft_uv
 * writes entries unpadded but reads them back as if padded (an assert that
 * Debian's build compiles out, src/uv_segment.c), so an odd-sized entry
 * corrupts the segment on reload.  The adapter's apply strips the padding.
 * Returns base NULL on EM_NOMEM. */
struct raft_buffer cl_meta_raft_buf(const void *entry, size_t len);

/* cl_meta_raft_err maps a libraft status to ember's codes. */
int cl_meta_raft_err(int raft_rv);

/* cl_meta_roles_next plans the next role change for configuration c whose
 * leader is `leader`: every spare becomes a standby, then voters move toward
 * min(CL_META_MAX_VOTERS, the largest odd number <= voters + standbys),
 * promoting the oldest standby or demoting the newest voter that is not the
 * leader (configuration order = join order).  Returns 1 with *id, *role for
 * raft_assign, or 0 when c needs no change. */
int cl_meta_roles_next(const struct raft_configuration *c, raft_id leader,
                       raft_id *id, int *role);

/* cl_meta_change: one membership operation on the leader, driven to the end:
 * ADD = raft_add (spare), then raft_assign as cl_meta_roles_next says until
 * it says nothing; REMOVE = raft_remove, then the same.  libraft allows one
 * change at a time, so callers run one cl_meta_change at a time per raft. */
enum { CL_META_CHANGE_ADD = 1, CL_META_CHANGE_REMOVE = 2, CL_META_CHANGE_ROLES = 3 };

typedef struct cl_meta_change cl_meta_change;
typedef void (*cl_meta_change_cb)(cl_meta_change *c, int status);

struct cl_meta_change {
    struct raft_change req;
    struct raft       *raft;
    int                kind;
    raft_id            id;
    char               addr[CL_META_MAX_ADDR + 1];
    unsigned           steps;     /* raft changes made so far */
    cl_meta_change_cb  done;      /* status 0 or an EM_* code, on the Raft thread */
    void              *data;      /* the caller's */
};

/* cl_meta_change_start begins c on leader r (the caller sets kind, id, addr
 * for ADD, done and data).  Returns 0 when started (done is then called
 * exactly once, from a later libraft callback), 1 when a ROLES change found
 * nothing to do, or an EM_* code (EM_NOTLEADER, ...; done not called). */
int cl_meta_change_start(cl_meta_change *c, struct raft *r);

#endif
