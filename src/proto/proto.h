/* proto.h - the Ignite thin-client protocol (versions 1.0.0 to 1.7.0): framing,
 * handshake, request decoding, response encoding, dispatch by op code.
 *
 * Wire reference: ../shared/reference/ignite-thin-protocol.md §1 (framing,
 * handshake, headers, status codes), §2 (ops), §4.1 (CACHE_PARTITIONS).
 * proto/ never touches sockets: pr_feed() takes bytes and appends replies to
 * a buffer, so the same code runs under net/ (emberd) and in the fuzz target.
 */
#ifndef EM_PROTO_H
#define EM_PROTO_H

#include <stddef.h>
#include <stdint.h>

#include "cluster/cl_pmap.h"
#include "util/buf.h"
#include "util/mem.h"

struct st_store;
struct bin_registry;
struct cl_node;
struct cl_meta_entry;
struct cl_meta_fsm;
struct cl_rids;

/* Status codes of reference §1.6. */
enum pr_status {
    PR_ST_SUCCESS = 0, PR_ST_FAILED = 1, PR_ST_INVALID_OP = 2,
    PR_ST_FUNCTIONALITY_DISABLED = 100, PR_ST_CACHE_NOT_FOUND = 1000,
    PR_ST_CACHE_EXISTS = 1001, PR_ST_TOO_MANY_CURSORS = 1010,
    PR_ST_RESOURCE_NOT_FOUND = 1011, PR_ST_SECURITY = 1012,
    PR_ST_TX_LIMIT_EXCEEDED = 1020, PR_ST_TX_NOT_FOUND = 1021,
    PR_ST_AUTH_FAILED = 2000
};

/* Cluster states: Ignite's ClusterState ordinals, as GET_STATE (5000) and
 * CHANGE_STATE (5001) carry them (reference §2.8). */
enum pr_cluster_state {
    PR_STATE_INACTIVE = 0, PR_STATE_ACTIVE = 1, PR_STATE_ACTIVE_READ_ONLY = 2
};

/* Most cache ids one CACHE_PARTITIONS (1101) request may name; more is
 * answered with status 1 (FAILED).  Clients ask for the caches they use,
 * a handful to hundreds; the bound keeps one request's scratch and reply
 * small (reliability.md §5.3). */
#define PR_MAX_PARTITION_CACHES 65536

/* Private op code answered only when pr_options.debug_ops is set (emberd
 * --debug-ops); otherwise it is an unknown op (status 2).  Request: no
 * payload.  Reply payload, five longs: allocation calls, bytes requested,
 * and frees, summed over every worker thread since start
 * (pr_options.debug_stats), then live bytes and live blocks of the process.
 * Tests read it before and after a run of requests: equal allocation
 * counts mean the requests allocated nothing. */
#define PR_OP_DEBUG_STATS 32000
/* ember's own op: string cache name -> int partitions reset (Ignite's
 * resetLostPartitions, which thin clients lack; ember-cli cluster reset-lost). */
#define PR_OP_RESET_LOST  32100
/* ember's operator ops (proto_ops.c has the layouts):
 *   PART_VERIFY   string cache -> per partition of this node's store: role,
 *                 update counter, size, content checksum (ember-cli idle-verify);
 *   CORRUPT       (debug_ops only) string cache, int partition -> bool: changes
 *                 one entry's value of that partition here without advancing
 *                 its update counter, as silent corruption would (tests);
 *   NODE_INFO     -> this node's facts (uptime, lease, caches, op counters);
 *   CLUSTER_INFO  byte format (0 JSON, 1 text) -> string: the whole cluster as
 *                 this node sees it, every member's NODE_INFO included. */
#define PR_OP_PART_VERIFY  32101
#define PR_OP_CORRUPT      32102
#define PR_OP_NODE_INFO    32103
#define PR_OP_CLUSTER_INFO 32104
/* Between members only (answered on forwarded requests, an unknown op to a
 * client): int cache id, int partition -> the partition's snapshot
 * (st_part_snapshot's records), from its primary, for a scan over the
 * cluster. */
#define PR_OP_PART_SNAPSHOT 32105
/* Between members only: u64 origin, u64 sequence, then a whole single-key
 * write request (op, id, payload) -> that request's reply.  The forwarder
 * names the write with an origin request id and keeps it through re-maps;
 * the owner runs it once, and answers a retry with the first run's outcome
 * (cluster/cl_rid.h). */
#define PR_OP_RID_CALL      32106
/* Between members only: a transaction's part on its primary (proto_txc.c
 * has the layout): an op in it, prepare, commit, rollback, its state. */
#define PR_OP_TX_CALL       32107
/* The baseline: show it, or set, add to, remove from, clear it
 * (proto_baseline.c has the layouts; ember-cli cluster baseline). */
#define PR_OP_BASELINE      32108

/* pr_auth_fn checks handshake credentials (user NULL when none were sent):
 * 0 = accept, EM_AUTH = wrong, EM_TOOMANY = refused by a failure limiter.
 * peer is the text given to pr_conn_set_peer ("" if none). */
typedef int (*pr_auth_fn)(void *arg, const char *peer, const uint8_t *user, size_t ulen,
                          const uint8_t *pw, size_t pwlen);

struct pr_stats;

typedef struct pr_options {
    uint32_t max_msg;             /* max frame length after the handshake (64 MiB) */
    uint32_t max_handshake_msg;   /* max frame length before it succeeds (1 MiB) */
    uint32_t max_cursors;         /* open scan cursors per connection (128) */
    uint32_t max_depth;           /* nesting limit for data objects (64) */
    int64_t  idle_timeout_ms;     /* reported by GET_IDLE_TIMEOUT (op 2) */
    uint8_t  node_id[16];         /* UUID sent in 1.4.0+ handshakes and 1101 */
    const char *username;         /* NULL = no authentication */
    const char *password;
    pr_auth_fn auth;              /* if set, replaces username/password */
    void    *auth_arg;
    int      debug_ops;           /* answer PR_OP_DEBUG_STATS */
    /* debug_stats fills allocation counters summed over the server's threads. */
    void   (*debug_stats)(void *arg, em_mem_stats *sum);
    void    *debug_arg;
    /* node_stats (optional): this node's request counters summed over its
     * workers, and its uptime, for NODE_INFO and the dashboard. */
    void   (*node_stats)(void *arg, struct pr_stats *sum, uint64_t *uptime_ms);
    /* persistent: some data region is persistent (informational; the WAL
     * state ops 5002/5003 answer per cache from the cache's own region). */
    int      persistent;
    /* meta_persist (optional): called after a binary type record (op 3003,
     * kind 1: the record bytes) or type name (op 3001, kind 2: byte
     * platform, int type id, name bytes) was registered and before the
     * reply; nonzero makes the reply an error. */
    int    (*meta_persist)(void *arg, int kind, const uint8_t *p, size_t n);
    void    *meta_arg;
    /* state: the cluster state at start (PR_STATE_ACTIVE). */
    int      state;
    /* state_persist (optional): called with a new cluster state before it
     * takes effect (changes are serialised); nonzero refuses the change. */
    int    (*state_persist)(void *arg, int state);
    /* cluster: this server is a member of a cluster (proto_cluster.c): cache
     * starts and stops, binary types and state changes go through the
     * metadata group, CACHE_PARTITIONS and the response header report the
     * cluster's affinity.  NULL = a single node.  Borrowed. */
    struct cl_node *cluster;
    /* repl: the cluster's replication (cluster/cl_repl.h), set with
     * pr_server_set_repl; NULL = no copies on other nodes.  Borrowed. */
    struct cl_repl *repl;
    /* take: partitions whose primary moved here, held until the old
     * primary answers (cluster/cl_take.h); set with pr_server_set_take.
     * Borrowed. */
    struct cl_take *take;
    /* exit_after_writes (tests only): the process exits at once after the
     * Nth write it ran for a PR_OP_RID_CALL took effect - replicated, its
     * reply not sent - so a test can fail a primary at the worst moment.
     * 0 = never. */
    uint32_t exit_after_writes;
    /* tx_crash (tests only): "POINT:N" - the process exits at the Nth time
     * a transaction reaches POINT here: "prepared" (a part with writes
     * whose backups took them, before it answers PREPARE), "committing" (a
     * prepared part with writes of another node's transaction told to
     * commit, before it applies), "applied" (a part that
     * applied its commit, before it tells its backups), "decided" (a
     * coordinator that decided COMMIT for a transaction with a part on
     * this node, before any part hears it).  "" = never. */
    char     tx_crash[32];
    /* write_hold (tests only): a file name; while the file exists, a write
     * a client sent here, mapped to this node as its key's primary, waits
     * before it runs (60 s at most), so a test can move the primary in
     * between.  "" = never. */
    char     write_hold[256];
    /* tx_hold (tests only): a file name; while it exists, a transaction
     * this node coordinates waits after it decided COMMIT, before any part
     * hears it (60 s at most), so a test can move a prepared part's primary
     * in between.  "" = never. */
    char     tx_hold[256];
    void    *state_arg;
    /* thin_host / thin_port: where this node serves thin clients, as the
     * cluster-group ops (5100-5102) report it on a single node ("" / 0:
     * not reported).  On a cluster each member's published thin_addr. */
    char     thin_host[64];
    int      thin_port;
    /* sql_query_memory: the SQLite heap one SQL query may hold (bytes;
     * 0 = SQ_QUERY_MEM_DEFAULT, < 0 = no quota). */
    int64_t  sql_query_memory;
} pr_options;

/* pr_options_default fills the defaults listed above (random node id). */
void pr_options_default(pr_options *o);

typedef struct pr_server pr_server;
typedef struct pr_conn pr_conn;

/* pr_server_new: shared, read-mostly state for all connections.  The store
 * and registry are borrowed and must outlive the server; strings in o are
 * copied. */
int  pr_server_new(pr_server **out, struct st_store *st, struct bin_registry *reg,
                   const pr_options *o);
void pr_server_free(pr_server *s);

/* pr_server_set_thin_port: the port the server really listens on (after
 * a start on port 0), for the cluster-group ops. */
void pr_server_set_thin_port(pr_server *s, int port);

/* pr_server_state: the current cluster state (enum pr_cluster_state). */
int  pr_server_state(const pr_server *s);
/* pr_server_adopt_state makes this node's state the cluster's (the
 * metadata group's), as an applied STATE_SET entry would: persisted, and
 * INACTIVE clears in-memory caches.  0 or the persist error. */
int  pr_server_adopt_state(pr_server *s, int state);

/* pr_server_set_cluster makes s a cluster member's (see pr_options.cluster);
 * before connections are served.  0 or EM_NOMEM. */
int  pr_server_set_cluster(pr_server *s, struct cl_node *node);

/* The partition map exchange's view of this node's caches (cl_pme_cfg):
 * pr_cluster_groups lists the started PARTITIONED and REPLICATED caches the
 * metadata group of node has started too, as groups (up to cap into out;
 * returns how many there are; node is passed, not read from s: the
 * exchange runs before pr_server_set_cluster names it);
 * pr_cluster_part_info reads one partition's counter and size. */
struct cl_plan_group;
struct cl_pme;
uint32_t pr_cluster_groups(pr_server *s, struct cl_node *node, struct cl_plan_group *out,
                           uint32_t cap);
int      pr_cluster_part_info(pr_server *s, int32_t grp, uint32_t part, uint64_t *cntr,
                              uint64_t *size);
/* pr_txc_sweep (on a cluster, called often; rate-limited inside): the
 * parts of transactions whose coordinator left the topology are rolled
 * back here, or, prepared, resolved by a PR_OP_TX_CALL request handed to
 * later(arg, request, len) to run on a forwarding worker, unanswered. */
void pr_txc_sweep(pr_server *s, void (*later)(void *arg, const uint8_t *p, size_t n),
                  void *arg);
/* Transactions across nodes as this node sees them (metrics). */
typedef struct pr_txc_stats {
    uint64_t parts, prepared;       /* parts held here now, of them prepared */
    uint64_t copies;                /* backup copies of prepared parts held here */
    uint64_t one_phase, two_phase;  /* commits this node coordinated */
    uint64_t recovered_commit, recovered_rollback;  /* resolved without their node */
    uint64_t wakes_sent, wakes_got; /* lock releases told to members whose requests
                                       waited here; told to this node */
    uint64_t deadlocks;             /* cycles of waits across nodes this node broke */
    uint64_t handed_off;            /* committed writes handed to their new primary */
} pr_txc_stats;
void pr_txc_stats_get(pr_server *s, pr_txc_stats *st);

/* pr_txc_inline: a forwarded request (body: op, id, payload) that never
 * waits and must run on the transport thread (pr_exec_forward) - the
 * questions a transaction's part asks its backups while a forwarding
 * worker waits for them. */
int  pr_txc_inline(const uint8_t *body, size_t len);
/* pr_txc_check validates a PR_OP_TX_CALL payload (after op and request
 * id) before anything of it runs: header, id lists, a backup copy's
 * writes.  0, EM_TRUNCATED or EM_INVAL (tests/fuzz/fuzz_txc.c). */
int  pr_txc_check(const uint8_t *p, size_t len);

/* What is left to rebalance here (proto_rebal.c), for /metrics and
 * NODE_INFO: pr_left_open takes the exchange's last full map once,
 * pr_left_entries estimates, for one cache, the entries this node's MOVING
 * copies still lack (0 when none loads here, or on a single node), and
 * pr_left_close frees what open took.  Never waits on a worker (NODE_INFO
 * runs on the transport thread). */
typedef struct pr_left {
    em_buf         buf;
    cl_pmap        map;
    cl_pmap_group *g;
    int            ok;
} pr_left;
struct st_cache;
void     pr_left_open(pr_server *s, pr_left *l);
uint64_t pr_left_entries(pr_server *s, pr_left *l, struct st_cache *sc);
void     pr_left_close(pr_left *l);

/* pr_server_set_pme: the exchange, for reset-lost (PR_OP_RESET_LOST). */
void     pr_server_set_pme(pr_server *s, struct cl_pme *pme);
/* pr_server_set_behind: fn(arg, cache, part) answers 1 while this node's
 * copy of the partition catches up with its primary (an owner that missed
 * updates: cl_rebal_copy_is_stale).  Such a copy does not count as OWNING:
 * a read from backups goes to the primary instead of being served from it. */
typedef int (*pr_behind_fn)(void *arg, int32_t cache, uint32_t part);
void     pr_server_set_behind(pr_server *s, pr_behind_fn fn, void *arg);

/* pr_cluster_apply makes an entry the metadata group applied take effect on
 * this node (a cache started or stopped, a binary type, a state change);
 * pr_cluster_restore does the same for a whole state (a snapshot installed).
 * Both run on the metadata thread; 0 or an error the caller logs. */
int  pr_cluster_apply(pr_server *s, const struct cl_meta_entry *e);
int  pr_cluster_restore(pr_server *s, const struct cl_meta_fsm *f);
/* pr_exec_forward runs a request another member forwarded (its body: op,
 * id, payload) as this node's own, appending the reply frame to resp; it
 * is never forwarded again.  One thread (the transport's).  0 or a code
 * that closes nothing. */
int  pr_exec_forward(pr_server *s, const uint8_t *body, size_t len, em_buf *resp);
/* pr_fwd_read_inline: a forwarded read (GET, GET_ALL, CONTAINS_KEY(S)) of
 * an ATOMIC cache this node has, outside a transaction: it never waits, so
 * the transport thread runs it (pr_exec_forward) instead of handing it to
 * a worker - two thread wake-ups fewer per forwarded read.  pr_fwd_stale:
 * the last pr_exec_forward was refused as not this node's to run (answer
 * EM_STALE: the sender looks again). */
int  pr_fwd_read_inline(pr_server *s, const uint8_t *body, size_t len);
int  pr_fwd_stale(pr_server *s);
/* pr_fwd_write_inline: a forwarded named single-key write of an ATOMIC
 * cache this node has, outside a transaction and without an expiry
 * policy: it runs on the transport thread too, its FULL_SYNC ack wait
 * handed over (pr_fwd_take_ack_wait, as pr_conn_take_ack_wait for that
 * thread's connection).  pr_fwd_handover: it could not run there (its
 * request id's first run still runs): queue it for a worker. */
int  pr_fwd_write_inline(pr_server *s, const uint8_t *body, size_t len);
/* pr_cluster_seed: this node created the metadata group over state it
 * restored (a whole persistent cluster restarting): it proposes every cache
 * and binary type it has, so a node that never had them learns them from
 * the group.  0 (*proposed: entries proposed and applied; one the group
 * refuses for good is skipped), or the first error that may pass (call
 * again: an entry the group has already applies as nothing). */
int  pr_cluster_seed(pr_server *s, uint32_t timeout_ms, uint32_t *proposed);
int  pr_fwd_handover(pr_server *s);
/* pr_fwd_conn_new: a connection that runs forwarded requests, one per
 * thread that runs them (server/srv_cluster.c's workers); run them with
 * pr_exec_on.  Free with pr_conn_free. */
pr_conn *pr_fwd_conn_new(pr_server *s);
int  pr_exec_on(pr_conn *c, const uint8_t *body, size_t len, em_buf *resp);
/* pr_conn_set_origin: the member (node id msb, lsb) whose request c runs
 * next; one told to wait for a lock here is woken when it is released.
 * has 0: a request of this node's own. */
void pr_conn_set_origin(pr_conn *c, int has, uint64_t msb, uint64_t lsb);
/* pr_conn_take_stale: 1 (once) when the last forwarded request was refused
 * because this node does not own its keys in its own topology; the worker
 * answers EM_STALE so the forwarding node looks for the owner again. */
int  pr_conn_take_stale(pr_conn *c);
/* FULL_SYNC acks without a waiting worker (proto_ackw.c).
 * pr_conn_set_ack_defer: c's writes may leave their ack wait to the
 * caller.  pr_conn_take_ack_wait, after pr_exec_on: 1 when the request did
 * - cl_repl_await_start must come next, on this thread, and the answer
 * waits for it - with what its settling needs in *info.
 * pr_fwd_ack_result, when it settled with rc: records a named write's
 * outcome and makes *frame (the reply built as if acked) what to answer;
 * returns the answer's status (0, or EM_STALE: the sender maps it again). */
typedef struct pr_fwd_ack {
    uint64_t rid_origin, rid_seq;
    int      effect;
    uint16_t op;
    uint8_t  named;
} pr_fwd_ack;
void pr_conn_set_ack_defer(pr_conn *c, int on);
int  pr_conn_take_ack_wait(pr_conn *c, pr_fwd_ack *info);
int  pr_fwd_ack_result(pr_server *s, const pr_fwd_ack *info, int rc, em_buf *frame);
int  pr_fwd_take_ack_wait(pr_server *s, pr_fwd_ack *info);
/* pr_server_set_repl: replication for this cluster member (before
 * requests are served); pr_server_wait_cache: the cache with this id,
 * waiting a bounded time for a cache start the metadata group has not
 * applied here yet (NULL if none). */
void pr_server_set_repl(pr_server *s, struct cl_repl *r);
/* pr_server_set_direct: how a reply a client's loop holds - a FULL_SYNC
 * write's waiting for acks (proto_ackw.c), a forwarded request's waiting
 * for the owner's answer (proto_cluster.c) - may be sent by the thread that
 * completes it instead of waking the loop for it: send writes a[0..an) and
 * then b[0..bn) as one frame to connection io from any thread (0, or an
 * error: the loop is woken to send it), idle tells on io's loop whether
 * none of its output waits.  pr_conn_set_io names c's connection; a
 * connection without one never takes this way.  pr_hold_pass_end, on a
 * client's loop at the end of each pass before the replication streams
 * leave: the replies held during the pass whose connections sent
 * everything before them may now go this way (proto_hold.c). */
typedef int (*pr_direct_fn)(void *arg, void *io, const void *a, size_t an, const void *b,
                            size_t bn);
void pr_server_set_direct(pr_server *s, pr_direct_fn send, int (*idle)(void *arg, void *io),
                          void *arg);
void pr_conn_set_io(pr_conn *c, void *io);
void pr_hold_pass_end(void);
/* pr_server_replies_direct: how many held FULL_SYNC replies the settling
 * thread sent; pr_server_fwd_replies_direct: how many forwarded requests'
 * replies the thread that got the owner's answer sent. */
uint64_t pr_server_replies_direct(pr_server *s);
uint64_t pr_server_fwd_replies_direct(pr_server *s);
void pr_server_set_take(pr_server *s, struct cl_take *k);
/* pr_server_set_rids: the window of recent request ids (cluster/cl_rid.h)
 * this member answers retried writes from, and the origin it names the
 * writes it forwards with (before requests run; NULL = none).  Borrowed. */
void pr_server_set_rids(pr_server *s, struct cl_rids *w);
struct st_store *pr_server_store(pr_server *s);
struct st_cache *pr_server_wait_cache(pr_server *s, int32_t id);

/* pr_cluster_topology: the cluster's topology version changed; the next
 * reply on every connection carries AFFINITY_TOPOLOGY_CHANGED (1.4.0+). */
void pr_cluster_topology(pr_server *s, uint64_t major, uint32_t minor);

/* pr_cluster_info renders the cluster as this node sees it (what
 * PR_OP_CLUSTER_INFO answers; the dashboard's /api/cluster): fmt 0 JSON, 1
 * text; self_only: this node alone (/api/node).  Any thread but the
 * transport's: it asks every other member (bounded by timeout_ms each).
 * 0 or EM_NOMEM. */
int  pr_cluster_info(pr_server *s, int fmt, int self_only, uint32_t timeout_ms, em_buf *out);

struct cl_topo;
/* pr_cluster_members records which nodes topology t has (metadata thread),
 * so CLUSTER_GROUP_GET_NODE_ENDPOINTS (5102) can answer what changed since
 * a recent version; the last PR_GROUP_HISTORY versions are kept. */
void pr_cluster_members(pr_server *s, const struct cl_topo *t);

/* pr_conn_new / pr_conn_free: per-connection protocol state (handshake,
 * negotiated version and features, cursors, scratch buffers). */
pr_conn *pr_conn_new(pr_server *s);
void     pr_conn_free(pr_conn *c);

/* Prefetch across connections (issue #22): a loop pass that read from many
 * connections gives each one's bytes to pr_pf_add before running any, then
 * calls pr_pf_run once, then pr_feed on each with the same p: the store
 * misses of the whole pass's single-key cache requests overlap (store.h
 * st_pf_*), even with one request per connection.  At most PR_PF_PASS
 * requests per pass; pr_feed prefetches the rest of a pipelined batch
 * itself.  The batch is the calling thread's; pr_pf_run empties it.  Hints
 * only: frames are walked by their lengths, nothing is decoded or changed. */
void pr_pf_add(pr_conn *c, const uint8_t *p, size_t n);
void pr_pf_run(void);

/* pr_feed consumes whole frames from p[0..n), appending one reply per
 * request to out, and stops early (leaving frames unconsumed) once out->len
 * exceeds out_cap.  *consumed = bytes used.  Returns 0, or a negative code
 * when the connection must be closed (bad length, not a handshake, a frame
 * that cannot be parsed); a reply may have been appended before the close. */
int pr_feed(pr_conn *c, const uint8_t *p, size_t n, em_buf *out, size_t out_cap,
            size_t *consumed);

/* pr_conn_set_peer: the client's address for the auth hook (copied). */
void pr_conn_set_peer(pr_conn *c, const char *peer);

/* pr_conn_set_stats: count this connection's handshake and requests in st
 * (proto_stats.h; the calling worker's block, which must outlive c).  NULL =
 * count nothing. */
void pr_conn_set_stats(pr_conn *c, struct pr_stats *st);

/* pr_conn_parked: requests of this connection wait for entry locks
 * (transactions; proto_tx.c): pr_feed consumed them and answers them
 * later, from pr_conn_resume, which the server calls after a wake (below)
 * and at least every few hundred ms (net_conn_park).  Their replies may
 * come after those of later requests (replies carry request ids). */
int pr_conn_parked(const pr_conn *c);
/* pr_conn_resume runs the waiting requests again, appending the replies of
 * those that could run to out (stops taking on more past out_cap).  0 or a
 * negative code that closes, as pr_feed's. */
int pr_conn_resume(pr_conn *c, em_buf *out, size_t out_cap);

/* pr_server_set_tx_wake: fn(arg) is called, on any thread, when locks some
 * parked request may wait for were released (emberd: net_wake_parked). */
void pr_server_set_tx_wake(pr_server *s, void (*fn)(void *arg), void *arg);
/* pr_server_tx_woken: a member released locks a request forwarded from
 * here was told to wait for (CL_NET_MSG_TX_WAKE): fn(arg) as above. */
void pr_server_tx_woken(pr_server *s);

/* pr_server_tx_stats: transactions open now, connections with requests
 * waiting for a lock, entry locks held - for /metrics. */
void pr_server_tx_stats(pr_server *s, uint64_t *open, uint64_t *waiting, uint64_t *locks);

/* pr_server_sql_start runs the SQL ops (2002-2005) of connections fed
 * through pr_feed on `threads` threads of their own, off the callers'
 * (proto_sqlrun.c): such a request's reply comes from a later
 * pr_conn_resume, after wake(arg) was called (any thread); commit(arg), if
 * set, runs on the SQL thread after each request, as the net layer's
 * before_send (nonzero: the reply never leaves, the connection closes).
 * pr_server_sql_stop joins the threads (pr_server_free calls it).
 * pr_server_sql_stats: requests run, cancelled by a closing connection,
 * queued now. */
int  pr_server_sql_start(pr_server *s, int threads, int (*commit)(void *arg),
                         void (*wake)(void *arg), void *arg);
void pr_server_sql_stop(pr_server *s);
void pr_server_sql_stats(pr_server *s, uint64_t *ran, uint64_t *cancelled, uint64_t *queued);
/* pr_server_sql_direct_aggs: whole-table aggregates answered over the scan
 * without SQLite (src/sql/sq_agg.c). */
uint64_t pr_server_sql_direct_aggs(pr_server *s);
/* pr_server_sql_mem_stats: the SQL threads' allocation counters, as each
 * published them after its last request (for PR_OP_DEBUG_STATS). */
void pr_server_sql_mem_stats(pr_server *s, em_mem_stats *sum);

/* Transaction limits (Ignite's ThinClientConfiguration default). */
#define PR_MAX_TX_PER_CONN 100

/* pr_conn_ready: 1 once a handshake has succeeded. */
int pr_conn_ready(const pr_conn *c);

/* pr_conn_version: negotiated version as major*10000 + minor*100 + patch. */
int pr_conn_version(const pr_conn *c);

#endif
