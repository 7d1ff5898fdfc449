/* cl_node.h - this process as a member of a cluster: the transport (cl_net)
 * and the metadata group (cl_meta) wired into join, leave, failure detection
 * and a published topology (reference/cluster.md §3.1-§3.3).
 *
 * Join: a node started with `bootstrap` on a pristine directory creates the
 * metadata group and, once it leads, proposes its own NODE_JOIN.  Any other
 * node connects to its seeds and sends JOIN_REQ (its NODE_JOIN entry, one
 * encoding) until its own join is applied; whoever receives it forwards it to
 * the leader, which adds the node to the Raft configuration, then proposes
 * the entry.  Members keep a link to every other member (the smaller id
 * connects, the transport keeps one link per pair).
 *
 * Failure: the leader proposes NODE_FAIL for a member it has had no link to
 * for failure_detection_ms (a link silent that long counts as none), and
 * removes it from the Raft configuration; a clean stop proposes NODE_LEAVE
 * first.  A member failed while alive hears it from the leader (NOT_MEMBER)
 * and is segmented: it serves nothing until restarted.  A restarted process is a new member
 * (a new node id, as in Ignite); the leader fails the old member that had the
 * same consistent id when the new one joins.
 *
 * Topology: a refcounted snapshot rebuilt on every applied membership or
 * state change; readers hold it across a request with acquire/release.
 */
#ifndef EM_CL_NODE_H
#define EM_CL_NODE_H

#include <pthread.h>
#include <stddef.h>
#include <stdint.h>

#include "cluster/cl_aff.h"
#include "cluster/cl_meta_fsm.h"
#include "cluster/cl_net.h"
#include "cluster/cl_topo.h"

typedef struct cl_node cl_node;

/* cl_node_host_id: the neighbourhood id of a machine name (NULL or "":
 * this machine's /etc/machine-id, or its host name); never 0. */
uint64_t cl_node_host_id(const char *name);

/* A forwarded request answered later (on_call_later / cl_node_answer). */
typedef struct cl_node_call_id {
    cl_meta_uuid from;
    uint64_t     req;
} cl_node_call_id;

typedef struct cl_net_link cl_net_link;

typedef struct cl_node_cfg {
    const char *cluster_name;      /* NULL = "ember" */
    const char *secret;            /* NULL = none */
    const char *host;              /* transport and Raft address (numeric) */
    int         port;              /* transport port (0 = any free) */
    int         raft_port;         /* metadata group port (required) */
    const char *consistent_id;     /* NULL = "host:port" */
    const char *seeds;             /* "ip:port,..." transport addresses, or NULL */
    int         bootstrap;         /* create the group if the directory is new */
    const char *dir;               /* existing directory: dir/meta-<node id>/ is made */
    const char *thin_addr;         /* "ip:port" published for clients, or NULL */
    uint32_t    failure_detection_ms;  /* 0 = 10 000 */
    unsigned    election_ms;       /* 0 = a third of failure_detection_ms, 300..1000 */
    unsigned    heartbeat_ms;      /* 0 = libraft's 100 */
    uint64_t    node_msb, node_lsb;/* 0, 0 = a random UUID v4 */
    /* The machine this node runs on, for excludeNeighbors (nodes with the
     * same id are neighbours): 0 = derived from /etc/machine-id (or the
     * host name).  exclude_neighbors: a partition's primary and backups
     * go to different machines while there are enough (Ignite's
     * RendezvousAffinityFunction.excludeNeighbors), in every cache. */
    uint64_t    host_id;
    int         exclude_neighbors;
    void       *arg;
    /* on_topology (optional): a new topology, on the metadata thread; t is
     * valid during the call (cl_node_topo_acquire to keep one). */
    void (*on_topology)(void *arg, const cl_topo *t);
    /* on_entry (optional): each entry applied here (a committed, accepted
     * one), in log order, before cl_node_propose returns for it; on_restore
     * for a whole state installed from a snapshot.  Metadata thread. */
    void (*on_entry)(void *arg, const cl_meta_entry *e);
    void (*on_restore)(void *arg, const cl_meta_fsm *f);
    /* on_call (optional): a request another member sent with cl_node_call;
     * append the answer to resp and return 0 (or an error code the caller
     * receives).  Transport thread: it must not wait on other members. */
    int  (*on_call)(void *arg, const uint8_t *p, size_t n, em_buf *resp);
    /* on_call_later (optional, replaces on_call when set): the same request
     * taken for an answer later, so the transport thread never waits (a
     * FULL_SYNC write waits for REPL_ACKs that arrive on that very thread).
     * Return 0 and answer once with cl_node_answer(id, ...) from any thread,
     * or an error code answered at once. */
    int  (*on_call_later)(void *arg, cl_node_call_id id, const uint8_t *p, size_t n);
    /* on_repl (optional): a REPL_UPDATE or REPL_ACK frame from member
     * `from` on link l (transport thread; reply with cl_net_link_send). */
    void (*on_repl)(void *arg, cl_net_link *l, cl_meta_uuid from, uint16_t type,
                    const uint8_t *p, size_t n);
    /* on_tick (optional): the transport's timer scan (about 200 ms). */
    void (*on_tick)(void *arg);
    /* on_pass_end (optional): the end of each pass of the transport's loop
     * (transport thread, no lock of the node's held). */
    void (*on_pass_end)(void *arg);
    /* on_refused (optional): a link refused in its handshake, either way,
     * with the peer's address and why (transport thread). */
    void (*on_refused)(void *arg, const char *peer, const char *why);
    /* fault (optional, tests): the transport's fault hook (cl_net_opts). */
    cl_net_fault_fn fault;
    void       *fault_arg;
    struct net_tls_ctx *tls;       /* the transport in TLS (cl_net_opts), or NULL */
    char       *errmsg;            /* NULL or CL_NODE_ERRMSG bytes */
} cl_node_cfg;

#define CL_NODE_ERRMSG 256

/* cl_node_start starts transport and metadata group and begins to join.
 * 0 or an error (errmsg says why). */
int  cl_node_start(cl_node **out, const cl_node_cfg *cfg);

/* cl_node_stop: with leave, propose NODE_LEAVE and wait for it to apply
 * (bounded by failure_detection_ms), then stop everything. */
void cl_node_stop(cl_node *n, int leave);
/* cl_node_leave proposes this member's NODE_LEAVE and waits (up to
 * timeout_ms) for it to commit: 0 or an error (no leader reachable, ...).
 * The node runs on, a member no more. */
int  cl_node_leave(cl_node *n, uint32_t timeout_ms);

/* cl_node_topo_acquire: the current topology (never NULL after start; an
 * empty one before the first join applies); release each acquire. */
cl_topo *cl_node_topo_acquire(cl_node *n);
void     cl_node_topo_release(cl_topo *t);

/* cl_node_topo_wait waits (bounded) until a topology built after index is
 * published: 0 or EM_TIMEOUT.  Not on the transport or metadata thread. */
int      cl_node_topo_wait(cl_node *n, uint64_t index, uint32_t timeout_ms);

/* Modules built on the node (the exchange) get the frames whose types the
 * node does not handle itself, on the transport thread (from: the sender);
 * a nonzero return closes the link the frame came on (a malformed frame:
 * that link, nothing else). */
typedef int (*cl_node_frame_fn)(void *arg, cl_meta_uuid from, uint16_t type,
                                const uint8_t *p, size_t n);
void cl_node_set_frame_hook(cl_node *n, cl_node_frame_fn fn, void *arg);
/* cl_node_send queues one frame for member `to` (see cl_net_send). */
int  cl_node_send(cl_node *n, cl_meta_uuid to, uint16_t type, const void *p, size_t len);
/* cl_node_link_up: 1 when a link to member id is up now. */
int  cl_node_link_up(cl_node *n, cl_meta_uuid id);
/* cl_node_leader: the leader's node id when known: 0 or EM_NOTLEADER. */
int  cl_node_leader(cl_node *n, cl_meta_uuid *out);
/* cl_node_release_wait waits (bounded) until no request holds a topology
 * older than the current one (held: one the caller holds itself, or NULL):
 * 0 or EM_TIMEOUT. */
int  cl_node_release_wait(cl_node *n, const cl_topo *held, uint32_t timeout_ms);

/* cl_node_has_lease: 1 while this member may serve cache operations: it
 * heard from the leader (the leader: from a majority of the voters) within
 * half the failure detection timeout.  Renewed every transport tick, and
 * a deadline, so a member resumed after a stop has none until it hears
 * again. */
int cl_node_has_lease(cl_node *n);

/* cl_node_segmented: 1 once the leader told this node that the cluster
 * failed it while it was alive (stopped, hung or cut off for longer than
 * the failure detection timeout).  Its node id is spent: it serves nothing
 * and joins no more; a restart makes it a new member. */
int cl_node_segmented(cl_node *n);

/* cl_node_lease_wait: 1 once this member holds a lease, waiting at most a
 * lease window and two election timeouts (a member that just joined, a
 * transport that stalled, the metadata group electing a new leader); 0
 * when it still has none. */
int cl_node_lease_wait(cl_node *n);

/* cl_node_id: this node's id. */
cl_meta_uuid cl_node_id(const cl_node *n);

/* cl_node_mem_stats: allocation counters of the transport's loop thread
 * (where owners apply replicated updates), for the counting allocator's
 * per-op figures; zeros once stopping. */
struct em_mem_stats;
void cl_node_mem_stats(cl_node *n, struct em_mem_stats *sum);

/* The decide lock: held by whoever decides partition owners on this node
 * (the exchange, from its snapshot to its EXCH_DONE; rebalancing's
 * promotions, from their snapshot to their commit; a reset of lost
 * partitions), so no decision is taken on a snapshot another is about to
 * change (tests/sim/sim_own.c finds what happens otherwise).  trylock: 1
 * when taken.  Not on the transport thread. */
void cl_node_decide_lock(cl_node *n);
int  cl_node_decide_trylock(cl_node *n);
void cl_node_decide_unlock(cl_node *n);

/* cl_node_is_leader: 1 when this node leads the metadata group (the
 * coordinator). */
int cl_node_is_leader(cl_node *n);
/* cl_node_voters: the metadata group's voters in this node's view of its
 * configuration (up to 5, kept odd: how many may fail is (voters - 1) / 2). */
unsigned cl_node_voters(cl_node *n);
/* cl_node_group_created: this node created the metadata group when it
 * started (bootstrap into a new directory), rather than joining one. */
int cl_node_group_created(cl_node *n);

/* cl_node_links: peers with an up link now; refused: handshakes refused
 * (either side) since start; opened: links that completed their handshake
 * since start (more than one per peer means links were lost or redialed). */
void cl_node_links(cl_node *n, uint32_t *up, uint64_t *refused, uint64_t *opened);

/* cl_node_propose proposes an entry through the leader and waits for it to
 * apply on this node (bounded by timeout_ms): 0, the FSM's refusal code,
 * EM_TIMEOUT, EM_NOTLEADER when no leader is known. */
int cl_node_propose(cl_node *n, const void *entry, size_t len, uint32_t timeout_ms);

/* cl_node_propose_wait is cl_node_propose for an operator's or a client's
 * request: while no leader is known (an election after the coordinator
 * left) it tries again, for at most twice the failure detection timeout
 * within timeout_ms, instead of failing at once.  EM_NOTLEADER means the
 * entry was never appended, so trying again cannot apply it twice.  Not
 * for the coordinator's own decisions: those must not reach a newer
 * leader. */
int cl_node_propose_wait(cl_node *n, const void *entry, size_t len, uint32_t timeout_ms);

/* cl_node_call sends p[0..n) to member `to` (on_call there) and waits for
 * its answer, appended to resp: 0, the remote's error code, EM_CLOSED when
 * no link to it is up (or it went down meanwhile), EM_TIMEOUT, EM_TOOBIG,
 * EM_BUSY from a transport callback (which would wait for itself).  Only an
 * answer from `to` itself completes it. */
int cl_node_call(cl_node *n, cl_meta_uuid to, const void *p, size_t len, em_buf *resp,
                 uint32_t timeout_ms);

/* cl_node_call_all makes k calls at once (to[i], request req[i], answer
 * appended to resp[i], result in rcs[i] as cl_node_call's): every request
 * is sent before any answer is awaited, mid(arg) (may be NULL) runs between
 * the sends and the waits - the caller's own share of the work - and the
 * waits share one timeout_ms.  At most CL_NODE_CALL_ALL_MAX calls. */
#define CL_NODE_CALL_ALL_MAX 32
void cl_node_call_all(cl_node *n, uint32_t k, const cl_meta_uuid *to, const em_buf *req,
                      em_buf *resp, int *rcs, uint32_t timeout_ms, void (*mid)(void *arg),
                      void *arg);

/* An asynchronous call: cl_node_call without a thread waiting for it.
 * The caller owns the storage and leaves it alone (its fields are
 * cl_node.c's) from cl_node_call_start until cl_node_call_poll reports the
 * call over or cl_node_call_cancel ends it. */
typedef struct cl_node_acall {
    uint64_t req;
    int      done;
    int      status;
    uint64_t index;
    em_buf  *resp;
    cl_meta_uuid to;
    int      remote;
    pthread_cond_t *cv;
    uint64_t end_ms;             /* asynchronous calls: when poll says EM_TIMEOUT */
    uint8_t  async;              /* completing it runs the node's answer hook */
    uint8_t  answering;          /* `answered` is running */
    uint8_t  polled;             /* ... and a poll found it so: run the hook */
    /* cl_node_call_start's `answered`: runs on the transport thread when the
     * member's answer completes the call (status, resp filled), before a
     * poll can see the call over and while a cancel waits; nonzero: nobody
     * needs the answer hook. */
    int    (*answered)(struct cl_node_acall *a, int status);
    struct cl_node_acall *next;
} cl_node_acall;

/* cl_node_set_answer_hook: fn(arg) runs, on the thread that completed it
 * (the transport's), each time an asynchronous call is answered or its
 * member's link goes down.  It must only wake whoever polls.  Set before
 * the first call. */
void cl_node_set_answer_hook(cl_node *n, void (*fn)(void *arg), void *arg);

/* cl_node_call_start sends p[0..len) to `to` as cl_node_call does and
 * returns at once: 0 (in flight; the answer will be appended to resp),
 * EM_NOLINK (no link to `to` is up now: nothing sent, where cl_node_call
 * would wait for one), EM_TOOBIG, EM_BUSY (a transport callback), or a
 * send error (nothing left in flight).  answered (may be NULL): see
 * cl_node_acall; it must not call into the node. */
int cl_node_call_start(cl_node *n, cl_node_acall *a, cl_meta_uuid to, const void *p,
                       size_t len, em_buf *resp, uint32_t timeout_ms,
                       int (*answered)(cl_node_acall *a, int status));
/* cl_node_call_poll: 0 while the call is in flight; 1 once it is over,
 * with *rc its result as cl_node_call's (EM_TIMEOUT once timeout_ms passed
 * unanswered). */
int cl_node_call_poll(cl_node *n, cl_node_acall *a, int *rc);
/* cl_node_call_cancel ends a call in flight; an answer that comes later is
 * dropped.  Harmless on a call that is over. */
void cl_node_call_cancel(cl_node *n, cl_node_acall *a);

/* cl_node_post runs fn(arg, 0) on the transport's loop thread, outside any
 * transport callback (so without the node's life lock held), after what was
 * posted before; fn(arg, 1) instead when the node stops first.  0 or an
 * error (fn never runs). */
int cl_node_post(cl_node *n, void (*fn)(void *arg, int cancelled), void *arg);

/* cl_node_answer answers a request on_call_later took: status 0 and the
 * answer p[0..len), or an error code (p ignored).  Any thread; once per id.
 * 0, EM_NOMEM, EM_TOOBIG, EM_CLOSED (stopping). */
int cl_node_answer(cl_node *n, cl_node_call_id id, int status, const void *p, size_t len);

/* cl_node_sync waits until this node has applied every entry committed
 * before it asked (so every proposal that completed anywhere): the leader
 * answers after a barrier entry commits, which a deposed leader cannot do.
 * Each costs a log entry (syncs waiting together share one), so it is for
 * misses - a cache or type not known here - not for every request.
 * 0, EM_TIMEOUT, EM_NOTLEADER (no leader known), EM_LOSTLEADER (lost at
 * the deadline), EM_CLOSED, EM_NOMEM; EM_BUSY on the transport thread. */
int cl_node_sync(cl_node *n, uint32_t timeout_ms);

/* cl_node_cache_crc: the CRC-32C of cache id's configuration as the
 * metadata group applied it here (0 when not started): what a CACHE_CONFIG
 * proposal names as the configuration it replaces. */
uint32_t cl_node_cache_crc(cl_node *n, int32_t id);

#endif
