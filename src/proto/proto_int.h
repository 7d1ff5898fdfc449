/* proto_int.h - private state and helpers shared by the proto_*.c files:
 * the bounds-checked request reader, reply framing and the per-connection
 * state.  Layouts: ../shared/reference/ignite-thin-protocol.md §1.4-§1.5.
 */
#ifndef EM_PROTO_INT_H
#define EM_PROTO_INT_H

#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>

#include "proto/proto.h"
#include "cluster/cl_node.h"
#include "proto/proto_stats.h"
#include "store/store.h"
#include "util/err.h"
#include "util/hash.h"

#define PR_VER(a, b, c) ((a) * 10000 + (b) * 100 + (c))

/* Feature ids of reference §1.8 that ember implements. */
enum {
    PR_FEAT_USER_ATTRIBUTES = 0, PR_FEAT_CLUSTER_STATES = 2,
    PR_FEAT_CLUSTER_GROUP_GET_NODES_ENDPOINTS = 3, PR_FEAT_CLUSTER_GROUPS = 4,
    PR_FEAT_BINARY_CONFIGURATION = 8, PR_FEAT_HEARTBEAT = 11
};
#define PR_FEAT_BYTES 4             /* feature ids 0..31 are tracked */
#define PR_RWAIT_MAX 64             /* members told to wait, remembered (more: the scan) */

struct pr_server {
    struct st_store *st;
    struct cl_pme   *pme;          /* the exchange, on a cluster member */
    _Atomic(pr_behind_fn) behind;  /* pr_server_set_behind; NULL: no copy is behind */
    void            *behind_arg;
    struct bin_registry *reg;
    pr_options opt;
    char *username, *password;
    _Atomic int64_t next_cursor;
    /* The cluster state (enum pr_cluster_state).  Every cache op reads it
     * once, relaxed: a plain load on x86 and ARM, no lock, no allocation.
     * Changes are rare and serialised by state_mu. */
    _Atomic int state;
    pthread_mutex_t state_mu;
    /* Topology version as major << 32 | minor: (1, 0) on a single node; on
     * a cluster, the latest (pr_cluster_topology).  A connection reports it
     * in the next response header when it differs from what it last saw. */
    _Atomic uint64_t topo_ver;
    pr_conn *apply_conn;            /* decodes applied entries (metadata thread) */
    pr_conn *fwd_conn;              /* runs forwarded requests (transport thread) */
    struct sq_engine *sql;          /* SQL catalog (proto_sql.c) */
    struct pr_sqlx *sqlx;           /* SQL threads (proto_sqlrun.c), or NULL: inline */
    /* Node sets of recent topology versions (proto_group.c). */
    pthread_mutex_t hist_mu;
    _Atomic int thin_port;          /* opt.thin_port, or the bound one */
    /* Broadcast after each entry the metadata group applied here, for
     * forwarded requests waiting on a cache (pr_cluster_wait_cache). */
    pthread_mutex_t apply_mu;
    pthread_cond_t  apply_cv;
    struct pr_group_hist *hist;
    struct cl_txm *txm;             /* transactions (cluster/cl_tx.h) */
    struct pr_txbs *txbs;           /* transactions' parts and backup copies held
                                       here (proto_txp.c), on a cluster */
    struct pr_txcd *txcd;           /* decisions of those this node coordinates */
    _Atomic uint64_t txc_seq;       /* names the transactions this node coordinates */
    _Atomic int cluster_ready;      /* pr_server_set_cluster done (the transport's
                                       threads run before it) */
    struct cl_rids *rids;           /* recent request ids (cluster/cl_rid.h) */
    uint64_t rid_origin;            /* names the writes this node forwards */
    _Atomic uint64_t rid_seq;
    _Atomic uint32_t rid_ran;       /* writes run for PR_OP_RID_CALL (exit_after_writes) */
    _Atomic uint32_t tx_crash_seen; /* opt.tx_crash's point reached so far */
    _Atomic uint64_t txc_one, txc_two, txc_rec_commit, txc_rec_rollback, txc_deadlocks;
    _Atomic uint64_t txc_handed;    /* writes of parts handed to a new primary (proto_txh.c) */
    /* Members whose forwarded requests were told to wait for a lock here
     * (PR_ST_TXC_WAIT): told in turn (CL_NET_MSG_TX_WAKE) when locks are
     * released, so their parked requests run again now rather than at
     * their next timer scan (proto_txc.c pr_txc_note_waiter). */
    pthread_mutex_t rwait_mu;
    uint64_t rwait[PR_RWAIT_MAX][2];
    uint32_t nrwait;
    _Atomic uint64_t rwake_sent, rwake_got;
    void (*tx_wake)(void *arg);     /* pr_server_set_tx_wake's */
    void *tx_wake_arg;
    /* pr_server_set_direct's: a settled FULL_SYNC reply sent by the thread
     * that settled it (proto_ackw.c), a forward's by the thread that got
     * its answer (proto_cluster.c) */
    pr_direct_fn direct_send;
    int  (*out_idle)(void *arg, void *io);
    void *direct_arg;
    _Atomic uint64_t replies_direct; /* FULL_SYNC replies so sent */
    _Atomic uint64_t fwd_direct;     /* forwards' replies so sent */
};

typedef struct pr_cursor {
    int64_t  id;
    st_scan *sc;
    uint32_t page;                  /* page size from the scan request */
} pr_cursor;

struct pr_conn {
    pr_server *srv;
    int        ready;
    int        ver;                 /* PR_VER of the negotiated version */
    uint8_t    feat[PR_FEAT_BYTES]; /* negotiated feature bits */
    uint64_t   topo_seen;           /* topology version last reported (0: none) */
    const uint8_t *req_body;        /* the request being handled (op, id, payload) */
    size_t     req_len;
    int        req_op;              /* its op code (a forward may send an envelope) */
    int        forwarded;           /* runs requests other members sent: never routes */
    uint8_t    has_from;            /* forwarded: the member that sent the request */
    uint64_t   from[2];             /* ... its node id (msb, lsb) */
    int        stale;               /* forwarded: refused, not the key's owner here */
    int        lost_refused;        /* routing refused a key of a lost partition */
    int        owner_probe;         /* PR_OP_RID_CALL: decode and check ownership only */
    int        probe_ok;            /* ... and the op got past its checks: owned here */
    int        probe_unsure;        /* ... by a primary that may yet be outranked */
    pr_conn   *sub;                 /* runs this node's part of a split batch */
    em_buf     fwd_resp;            /* a forwarded request's answer (reused) */
    struct pr_afwd *afwd;           /* a forward in flight without a wait (proto_cluster.c) */
    uint8_t    fwd_busy;            /* PR_OUT_*: a request is out, later frames wait in pq */
    uint8_t    in_loop;             /* the request runs on a loop that resumes parked ones */
    /* FULL_SYNC acks awaited without a thread (proto_ackw.c) */
    uint8_t    ack_defer;           /* a forwarding worker's: it hands the wait over */
    uint8_t    no_wait;             /* the transport thread's: nothing may wait */
    uint8_t    pass_flush;          /* its thread calls cl_repl_pass_end per pass */
    uint8_t    handover;            /* ... and this request would have: a worker runs it */
    uint8_t    ack_deferred;        /* this request's write did (pr_cache_repl_finish) */
    uint8_t    ack_named;           /* ... under a request id (pr_op_rid_call) */
    uint16_t   ack_op;
    int        ack_effect;
    uint64_t   ack_rid_origin, ack_rid_seq;
    struct pr_ackw *ackw;           /* a client's reply held for its acks */
    void      *io;                  /* pr_conn_set_io's: the connection below */
    em_buf     rid_env, rid_resp;   /* a PR_OP_RID_CALL sent, a write's reply (reused) */
    int64_t    fanout_sum;          /* GET_SIZE: the other members' counts */
    uint8_t    route_idem;          /* the request routed now may run twice harmlessly */
    uint8_t    route_remap;         /* ... or may be mapped again if it was not sent */
    pr_cursor *cur;
    uint32_t   ncur, capcur;
    em_buf     kscratch, vscratch, escratch, tmp;
    st_slice  *ks, *vs;             /* reused slice arrays for batch ops */
    size_t     slices_cap;
    char       msg[512];            /* error message of the current request */
    pr_stats  *stats;               /* the worker's counters, or NULL */
    uint32_t   stats_left;          /* requests until the next timed one */
    uint64_t   req_t0;              /* the running request's start, when timed (else 0) */
    uint32_t   pf_vlen;             /* last value GET read or PUT wrote: how much
                                       of each entry the batch prefetch fetches */
    const uint8_t *pf_from, *pf_to; /* bytes pr_pf_add prefetched this pass */
    char       peer[64];            /* client address, for the auth hook */
    struct sq_sess *sql;            /* SQL cursors and connections, lazily */
    struct pr_txslot *txs;          /* open transactions (proto_tx.c), lazily */
    uint32_t   ntxs;
    int32_t    next_tx;             /* last transaction id given */
    struct cl_tx *implicit;         /* reused for one-op transactions */
    struct cl_tx *branch;           /* PR_OP_TX_CALL: the part the op runs in */
    em_buf     txenv;               /* a PR_OP_TX_CALL sent (reused) */
    em_buf     txscratch;           /* its answers when nothing of them is kept */
    struct pr_txslot *txc_slot;     /* the transaction an op is routed for */
    cl_meta_uuid txc_wait_at;       /* the member whose part answered "wait" last */
    struct pr_txpart *spare_parts;  /* an ended transaction's list of parts, reused */
    uint32_t   spare_capparts;
    struct cl_tx *spare[4];         /* ended ones, reused by TX_START */
    uint32_t   nspare;
    em_buf     txbuf;               /* values read inside transactions */
    /* Requests waiting for a lock (proto_tx.c, "Waiting for a lock"):
     * frames [u32 length][body], in arrival order, run again by
     * pr_conn_resume; pq2 is the spare the kept ones are copied into. */
    em_buf     pq, pq2;
    uint32_t   npq;
    uint8_t    waiting;             /* counted in the manager's waiters */
    /* An SQL request running on the SQL threads (proto_sqlrun.c): while
     * job_busy, every later frame waits in pq. */
    struct pr_sqljob *job;
    uint8_t    job_busy;
    uint8_t    pooled;              /* running on an SQL thread now */
    pr_conn   *sqlkv;               /* SQL's key-value calls on a cluster (proto_sql.c) */
    struct sq_remote *sqlrem;       /* ... as the SQL session's sq_remote */
    uint64_t   sql_slow[16];        /* statements that ran over the inline budget */
    int        last_status;         /* the status of the last request's reply */
};

static inline int pr_has_feat(const pr_conn *c, int f)
{
    return f / 8 < PR_FEAT_BYTES && (c->feat[f / 8] >> (f % 8)) & 1;
}

/* ---- request reader: every read is bounds-checked --------------------- */

typedef struct pr_rd {
    const uint8_t *p;
    size_t n, pos;
} pr_rd;

static inline size_t pr_rd_left(const pr_rd *r) { return r->n - r->pos; }

static inline int pr_rd_u8(pr_rd *r, uint8_t *v)
{
    if (r->n - r->pos < 1) return EM_TRUNCATED;
    *v = r->p[r->pos++];
    return 0;
}
static inline int pr_rd_i16(pr_rd *r, int16_t *v)
{
    if (r->n - r->pos < 2) return EM_TRUNCATED;
    *v = (int16_t)em_ld16(r->p + r->pos); r->pos += 2;
    return 0;
}
static inline int pr_rd_i32(pr_rd *r, int32_t *v)
{
    if (r->n - r->pos < 4) return EM_TRUNCATED;
    *v = (int32_t)em_ld32(r->p + r->pos); r->pos += 4;
    return 0;
}
static inline int pr_rd_i64(pr_rd *r, int64_t *v)
{
    if (r->n - r->pos < 8) return EM_TRUNCATED;
    *v = (int64_t)em_ld64(r->p + r->pos); r->pos += 8;
    return 0;
}

/* pr_rd_obj: one complete, validated data object (bin_validate). */
int pr_rd_obj(pr_conn *c, pr_rd *r, const uint8_t **p, size_t *len);
/* pr_rd_str: typed string (9) or null (101); *s = NULL for null.  UTF-8 is
 * validated. */
int pr_rd_str(pr_conn *c, pr_rd *r, const uint8_t **s, size_t *len);

/* ---- replies ------------------------------------------------------------ */

/* pr_fail records the error message of the current request and returns the
 * status, for `return pr_fail(c, PR_ST_FAILED, "...")` in handlers. */
int pr_fail(pr_conn *c, int status, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
/* pr_bad_request: a request that could not be decoded (status 1). */
int pr_bad_request(pr_conn *c, int code);

/* Reply value helpers.  pr_val_begin marks where the store appends a stored
 * value; pr_val_end turns what was appended into its reply form (null if
 * !found, 27-wrapped if complex), in place for plain values. */
int pr_val_begin(em_buf *out, size_t *pos);
int pr_val_end(pr_conn *c, em_buf *out, size_t pos, int found);
/* pr_put_stored appends a stored key or value in reply form. */
int pr_put_stored(pr_conn *c, em_buf *out, const uint8_t *v, size_t n);
/* pr_reply_parse reads a whole reply frame in the 1.4.0+ layout (int
 * length, long request id, short flags, [topology], [int status, string
 * message]) - what a member or a routing connection of this node answers:
 * status 0 on success (an error reply's status is at least 1), its message
 * (msg, ml), the payload (pay, pn).  0, or EM_PROTO for a frame that does
 * not hold that much. */
int pr_reply_parse(pr_conn *c, const uint8_t *p, size_t n, int32_t *status, const uint8_t **msg,
                   size_t *ml, const uint8_t **pay, size_t *pn);
/* pr_put_str appends a typed string (NULL = 101). */
int pr_put_str(em_buf *out, const char *s);
int pr_put_strn(em_buf *out, const uint8_t *s, size_t n);
static inline int pr_put_bool(em_buf *out, int v) { return em_buf_put_u8(out, v ? 1 : 0); }

/* ---- handlers (return 0, a status > 0 with c->msg set, or < 0 to close) -- */

/* The cache header (§2.2) decoded, plus the cache it names. */
typedef struct pr_cache_hdr {
    int32_t   cache_id;
    int32_t   tx_id;                /* flag 0x02: the transaction's id */
    struct cl_tx *tx;               /* ... and the transaction, else NULL */
    uint8_t   flags;
    int       state;                /* cluster state when the op began */
    st_expiry expiry;
    st_opctx  ctx;
    st_cache *cache;
} pr_cache_hdr;

/* pr_cache_header decodes the header, finds the cache and reads the cluster
 * state once: an INACTIVE node refuses here (pr_refuse_inactive); whether
 * the op may write in h->state is the handler's to decide. */
int pr_cache_header(pr_conn *c, pr_rd *r, pr_cache_hdr *h);

/* pr_state: the cluster state, one relaxed load. */
static inline int pr_state(const pr_conn *c)
{
    return atomic_load_explicit(&c->srv->state, memory_order_relaxed);
}
/* Ignite's refusals, status 1 (FAILED: its thin server has no code for
 * them).  pr_refuse_inactive: IgniteKernal.checkClusterState's text.
 * pr_refuse_read_only: GridCacheProcessor's read-only format for a cache
 * operation (what = "cache") or a cache start (what = "start cache"). */
int pr_refuse_inactive(pr_conn *c);
int pr_refuse_read_only(pr_conn *c, const char *what, const char *group, const char *cache);

int pr_op_cache(pr_conn *c, int op, pr_rd *r, em_buf *out);     /* 1000-1021 */
/* pr_st_err turns a store error into the reply's status and message. */
int pr_st_err(pr_conn *c, const pr_cache_hdr *h, int rc);

/* A validated batch (GET_ALL, PUT_ALL, ...): pr_batch_next slices the next
 * chunk into c->ks (and c->vs) and returns its size in *m. */
typedef struct pr_batch {
    const uint8_t *p;       /* next undecoded item (validated bytes) */
    size_t left;            /* items not yet sliced */
    int pairs;              /* (key, value) pairs, else keys */
} pr_batch;
int pr_batch_next(pr_conn *c, pr_batch *b, size_t *m);

/* ---- transactions (proto_tx.c) ----------------------------------------- */

/* A decoded key-value request (pr_op_cache): key, value and expected value
 * in stored form, peek modes in flag, or a batch. */
typedef struct pr_kv {
    const uint8_t *k, *v, *e;
    size_t kl, vl, el;
    int flag;
    pr_batch bt;
} pr_kv;

/* SQL off the network loops (proto_sqlrun.c).  pr_sqlx_take: 1 if the
 * frame is an SQL request and was queued for the SQL threads (no reply
 * now), 0 if it runs here, or EM_NOMEM.  pr_sqlx_deliver: 1 if the job's
 * reply was appended to out, 0 if it is not done, negative to close (its
 * writes could not be made durable).  pr_sqlx_release, from pr_conn_free:
 * 1 if the SQL thread now owns c (its job runs; it was cancelled and the
 * thread frees c after), else the job is freed and 0. */
typedef struct pr_sqljob pr_sqljob;
typedef struct pr_sqlx pr_sqlx;
#define PR_SQL_MAX_THREADS 16
#define PR_SQL_LOCK_WAIT_MS 60000   /* a DML row waits this long for a transaction's lock */
int  pr_sqlx_take(pr_conn *c, const uint8_t *body, size_t len);
/* pr_sql_sess: c's SQL session, made on first use (on a cluster wired to
 * reach the owners of the data, proto_sql.c); NULL when out of memory. */
struct sq_sess *pr_sql_sess(pr_conn *c);
/* pr_sqlx_inline: the SQL handler runs its query here under a budget (1), or
 * must return PR_OFFLOAD at once (0: a page request, or this statement ran
 * over the budget before); 2 on an SQL thread or with no pool: no budget.
 * pr_sqlx_note_slow remembers a statement that ran over it. */
int  pr_sqlx_inline(pr_conn *c, int op, const char *sql, size_t len);
void pr_sqlx_note_slow(pr_conn *c, const char *sql, size_t len);
int  pr_sqlx_deliver(pr_conn *c, em_buf *out);
int  pr_sqlx_release(pr_conn *c);

/* A handler's return that parks the request: it is left unconsumed and run
 * again later (pr_feed, net_conn_park); it changed nothing visible. */
#define PR_PARK 0x7ffffff0
/* A handler's return that hands the request to the SQL threads
 * (proto_sqlrun.c): it changed nothing visible and runs there again. */
#define PR_OFFLOAD 0x7ffffff1
/* How long an SQL query may run on the event loop before it is handed to
 * the SQL threads (proto_sqlrun.c says why). */
#define PR_SQL_INLINE_NS 200000u

/* Atomicity modes of st_cache_config.atomicity_mode. */
enum { ST_ATOMICITY_TRANSACTIONAL = 0, ST_ATOMICITY_ATOMIC = 1 };

int  pr_op_tx(pr_conn *c, int op, pr_rd *r, em_buf *out);       /* 4000, 4001 */

/* A participant of a transaction across cluster nodes, as its coordinator
 * tracks it (proto_txc.c). */
typedef struct pr_txpart {
    cl_meta_uuid id;
    uint8_t      st;                /* PR_TXP_ACTIVE, PR_TXP_PREPARED, PR_TXP_DONE */
} pr_txpart;
enum { PR_TXP_ACTIVE = 0, PR_TXP_PREPARED = 1, PR_TXP_DONE = 2 };

/* An open transaction of a connection.  On a cluster (seq != 0) its keys'
 * work runs in parts on their primaries and tx only keeps its parameters
 * and deadline. */
enum { PR_TX_WHY_TIMEOUT = 1, PR_TX_WHY_DEADLOCK = 2, PR_TX_WHY_TOPOLOGY = 3 };
typedef struct pr_txslot {
    int32_t id;
    struct cl_tx *tx;
    int     why;                    /* rolled back by: PR_TX_WHY_* */
    char    label[48];
    uint64_t seq;                   /* cluster: this node's name for it, 0 = unmapped */
    uint64_t major;                 /* ... the topology it is mapped on */
    uint32_t minor;
    uint32_t nparts, capparts;
    pr_txpart *parts;
    uint8_t  waiting;               /* a part answered "wait" (proto_txc.c) */
    uint64_t wait_ms, probe_ms;     /* since when; its last deadlock probe */
} pr_txslot;

/* pr_tx_lookup: the connection's transaction with this id (status 1021 if
 * none); a PR_OP_TX_CALL's op gets the part it runs in. */
int  pr_tx_lookup(pr_conn *c, int32_t id, struct cl_tx **tx);
pr_txslot *pr_tx_slot(pr_conn *c, const struct cl_tx *tx);
/* Messages of a failed transaction (proto_tx.c). */
int  pr_tx_fail_timed_out(pr_conn *c, const struct cl_tx *tx);
int  pr_tx_fail_lock_timeout(pr_conn *c, struct cl_tx *tx);
int  pr_tx_fail_conflict(pr_conn *c, struct cl_tx *tx);
int  pr_tx_fail_deadlock(pr_conn *c, struct cl_tx *tx);
/* pr_tx_fail_commit: the message for a failed commit (or prepare) of tx
 * (a cl_tx code; a status passes through). */
int  pr_tx_fail_commit(pr_conn *c, struct cl_tx *tx, int rc);

/* Transactions across cluster nodes (proto_txc.c). */
/* Private statuses between members: the part waits for a lock (the
 * coordinator parks the request and asks again); the part is gone (rolled
 * back there: the coordinator rolls back the rest); the part committed but
 * writes of it may be missing on a partition's new primary (proto_txh.c:
 * not asked again, the client hears it). */
#define PR_ST_TXC_WAIT 0x7ffffe01
#define PR_ST_TXC_GONE 0x7ffffe02
#define PR_ST_TXC_SHORT 0x7ffffe03
int  pr_txc_init(pr_server *s);
/* pr_fail_repl_timeout: a write applied here that not every owner acked in
 * time under FULL_SYNC, or a read of one (proto_cache.c). */
int  pr_fail_repl_timeout(pr_conn *c);
void pr_txc_free(pr_server *s);
/* pr_txc_route runs a cache op of an explicit transaction on a cluster: on
 * the keys' primaries, in the transaction's part there (*done = 1), or
 * refuses it.  *done = 0: not a cluster of several nodes, run it here. */
int  pr_txc_route(pr_conn *c, int op, pr_cache_hdr *h, const uint8_t *kp, const uint8_t *kend,
                  int nkeys, int pairs, em_buf *out, int *done);
/* pr_txc_end commits or rolls back a mapped transaction (TX_END, or its
 * connection closing with commit = 0). */
int  pr_txc_end(pr_conn *c, pr_txslot *s, int commit);
/* pr_txc_forget: the transaction ended here (its decision, if any, stays
 * answerable for a while); pr_txc_alive: it is still open here. */
void pr_txc_forget(pr_server *s, uint64_t seq);
int  pr_txc_alive(pr_server *s, uint64_t seq);
/* pr_txc_wait answers a forwarded request that must wait for a lock here
 * with PR_ST_TXC_WAIT (the sender parks it) and remembers its sender, whom
 * pr_txc_wake_waiters (after locks are released) tells to run it again. */
int  pr_txc_wait(pr_conn *c, const char *why);
void pr_txc_wake_waiters(pr_server *s);
int  pr_op_tx_call(pr_conn *c, pr_rd *r, em_buf *out);          /* PR_OP_TX_CALL */
/* pr_txc_wrap builds, in dst, body as an op of s's part on a member. */
int  pr_txc_wrap(pr_conn *c, const uint8_t *body, size_t len, em_buf *dst);
/* pr_txc_touch records member `who` as a participant of the op's
 * transaction (c->txc_slot). */
int  pr_txc_touch(pr_conn *c, cl_meta_uuid who);
/* pr_cluster_tx_run sends a PR_OP_TX_CALL to member `to` (run here when
 * self): 0 with the reply's payload appended to out, the reply's status
 * (message set), EM_STALE or EM_NOMEM. */
int  pr_cluster_tx_run(pr_conn *c, cl_meta_uuid to, int self, const uint8_t *env, size_t len,
                       em_buf *out);
/* pr_cluster_tx_route runs c's cache op, in c->txc_slot's parts, on its
 * keys' primaries in t (a batch split per primary). */
int  pr_cluster_tx_route(pr_conn *c, cl_topo *t, int op, st_cache *sc, const uint8_t *kp,
                         const uint8_t *kend, int nkeys, int pairs, em_buf *out);

/* pr_tx_cache_op runs a decoded cache op in h->tx, or on a TRANSACTIONAL
 * cache without one as an implicit one-op transaction; EM_STALE (nothing
 * applied, no reply) when that commit was refused because its keys'
 * primary moved (cl_repl_primary_only). */
int  pr_tx_cache_op(pr_conn *c, int op, pr_cache_hdr *h, pr_kv *d, em_buf *out);
/* pr_tx_refuse_nontx: the failure reply for an op a transaction may not
 * run (CLEAR, CLEAR_KEY, CLEAR_KEYS, REMOVE_ALL: Ignite's refusal), or 0. */
int  pr_tx_refuse_nontx(pr_conn *c, int op);
/* pr_txs_close rolls back and frees the connection's transactions. */
void pr_txs_close(pr_conn *c);
/* pr_tx_frame_id: the transaction a request frame body (op, id, payload)
 * names - a cache op's header tx id, TX_END's id - or 0. */
int32_t pr_tx_frame_id(const uint8_t *body, size_t len);
/* pr_tx_sync_waiting counts the connection as a lock waiter while it has
 * waiting requests. */
void pr_tx_sync_waiting(pr_conn *c);

/* Waiting requests per connection: more are answered with an error. */
#define PR_MAX_WAITING 1024
#define PR_MAX_WAITING_BYTES (16u << 20)

/* Forwarding without a wait (proto_cluster.c): pr_afwd_poll, on resume,
 * says whether the forward in flight is still out (1: the connection stays
 * parked); pr_afwd_end, after a request ran, drops an answer it did not
 * take; pr_afwd_free, on close, ends the call. */
/* c->fwd_busy: a forward out, an ack wait out, or the forward answered and
 * its frame not run again yet (only that frame may run: pr_afwd_frame).
 * While one is out, a connection takes at most PR_OUT_QUEUE frames more;
 * the rest stay unread (the net layer stops reading past a bound). */
enum { PR_OUT_FWD = 1, PR_OUT_ACKS = 2, PR_OUT_READY = 3 };
#define PR_OUT_QUEUE 256
int  pr_afwd_poll(pr_conn *c);
int  pr_afwd_frame(const pr_conn *c, const uint8_t *body, size_t len);
void pr_afwd_end(pr_conn *c, const uint8_t *body);
void pr_afwd_free(pr_conn *c);
/* The reply a forward's answering thread sent itself (proto_cluster.c):
 * pr_afwd_settled, the forward was answered (resume the connection);
 * pr_afwd_behind, frames wait behind it (queued, or left unread), so the
 * answer must wake the loop; pr_afwd_skip, on the frame's second run: 1
 * when its reply went out that way (the frame is done, unrun);
 * pr_reply_header appends a success reply's header (length 0) for c. */
int  pr_afwd_settled(const pr_conn *c);
void pr_afwd_behind(pr_conn *c);
int  pr_afwd_skip(pr_conn *c, const uint8_t *body, size_t len);
int  pr_reply_header(pr_conn *c, em_buf *out, int64_t rid, uint64_t topo);
/* pr_afwd_t0: for the second run of an answered forward whose first run
 * was timed, that run's start (the latency is the whole forward's); else 0. */
uint64_t pr_afwd_t0(const pr_conn *c, const uint8_t *body, size_t len);
/* pr_afwd_unpass, pr_ackw_unpass: c leaves this thread's pass list
 * (pr_conn_free, on the loop's thread, even when an SQL thread frees c). */
void pr_afwd_unpass(pr_conn *c);
void pr_ackw_unpass(pr_conn *c);

/* A reply a client's loop holds that the thread completing its wait may
 * send (proto_hold.c: why, and how no wake-up is lost).  pr_hold_start, on
 * the loop before the wait can complete: c's reply is held while
 * c->fwd_busy is busy; it may go direct once this pass ends
 * (pr_hold_pass_end, net.h's on_pass_end).  pr_hold_unpass: h leaves the
 * pass list (before h is freed).  On the completing thread:
 * pr_hold_may_send, whether it may send the reply; pr_hold_settle after,
 * 1 when the loop must be woken (not sent, or frames behind it).  On the
 * loop: pr_hold_settled, it completed (resume c); pr_hold_take, the same
 * for the holder, which takes the result (clears settled); pr_hold_behind,
 * frames of c wait behind it; pr_hold_ns, the request's time from its
 * decoding (c->req_t0 at the start) to its reply - sent by the completing
 * thread, or now - or PR_STATS_UNTIMED. */
typedef struct pr_hold {
    pr_server  *srv;
    pr_conn    *conn;
    void       *io;                 /* c's connection (pr_conn_set_io) */
    int         busy;               /* c->fwd_busy while it is held */
    uint8_t     in_pass;            /* on this loop thread's pass list */
    _Atomic int direct;             /* the completing thread may send it */
    _Atomic int behind;             /* frames of c wait behind it */
    _Atomic int settled;            /* its wait completed */
    uint64_t    t0;                 /* the request's start, when timed (else 0) */
    uint64_t    t_sent;             /* when the completing thread sent it (timed) */
    struct pr_hold *pass_next;
} pr_hold;
void pr_hold_start(pr_hold *h, pr_conn *c, int busy);
void pr_hold_unpass(pr_hold *h);
int  pr_hold_may_send(pr_hold *h);
int  pr_hold_settle(pr_hold *h, int sent);
int  pr_hold_settled(const pr_conn *c, pr_hold *h);
int  pr_hold_take(pr_hold *h);
void pr_hold_behind(pr_conn *c, pr_hold *h);
uint64_t pr_hold_ns(const pr_hold *h, int sent);
/* pr_frame_split (proto_ackw.c): a 1.7.0 reply frame's status (0 =
 * success), and its payload or, for a failure, its message's bytes; any
 * thread (it reads b only). */
int  pr_frame_split(const em_buf *b, int32_t *status, const uint8_t **p, size_t *n);

/* FULL_SYNC replies without a waiting thread (proto_ackw.c).
 * pr_cache_repl_finish ends a cache op's replication: cl_repl_finish, or,
 * on a client's loop or a forwarding worker, its deferred form (0 with
 * c->ack_deferred set: the caller hands the wait over).  pr_ackw_hold, on
 * a client's loop right after such a request (rc: the request's result):
 * its reply (out[at..)) is held until the acks settle; 0 or a closing code.  pr_ackw_poll, on resume: 1
 * once settled (the reply or its error appended, *rc the append's result),
 * 0 while not.  pr_ackw_free: on close. */
#define PR_REPL_TIMEOUT_MSG "The write was applied on the primary but not every owner of " \
    "the key acknowledged it in time (FULL_SYNC): it may or may not survive a failure of " \
    "the primary; retry"
#define PR_REPL_STALE_MSG "The write was applied on this node but an owner refused it (the " \
    "partition's primary changed): it may or may not stay; retry"
#define PR_REPL_MOVED_MSG "The partition's primary changed while the write ran here"
#define PR_REPL_READ_TIMEOUT_MSG "What was read is not yet acknowledged by every owner " \
    "of the key (FULL_SYNC: a write to its partition still waits for them, and would " \
    "not survive a failure of the primary yet); retry"
#define PR_REPL_READ_STALE_MSG "What was read here was refused by another owner of the " \
    "key (the partition's primary changed); retry"
/* pr_op_writes: does cache op 1000-1021 modify the cache?  Reads: GET,
 * GET_ALL, CONTAINS_KEY(S), GET_SIZE, LOCAL_PEEK (and any other op: 1). */
int  pr_op_writes(int op);
/* pr_repl_msg: what a request of op becomes when its acks say rc
 * (EM_TIMEOUT or EM_STALE): a write's words or a read's; NULL otherwise. */
const char *pr_repl_msg(int op, int rc);
int  pr_cache_repl_finish(pr_conn *c, uint16_t op);
int  pr_ackw_hold(pr_conn *c, int rc, const uint8_t *body, size_t len, em_buf *out, size_t at);
int  pr_ackw_poll(pr_conn *c, em_buf *out, int *rc);
void pr_ackw_free(pr_conn *c);
/* pr_ackw_settled: c's held reply has settled (pr_ackw_poll would take
 * it).  pr_ackw_behind: frames of c wait behind its held reply (queued, or
 * left unread), so its settling must wake the loop even when the settling
 * thread sent the reply itself. */
int  pr_ackw_settled(const pr_conn *c);
void pr_ackw_behind(pr_conn *c);
int pr_op_scan(pr_conn *c, pr_rd *r, em_buf *out);              /* 2000 */
int pr_op_scan_page(pr_conn *c, pr_rd *r, em_buf *out);         /* 2001 */
int pr_op_resource_close(pr_conn *c, pr_rd *r, em_buf *out);    /* 0 */
void pr_cursors_close(pr_conn *c);

int pr_op_config(pr_conn *c, int op, pr_rd *r, em_buf *out);    /* 1050-1056 */
int pr_op_binary(pr_conn *c, int op, pr_rd *r, em_buf *out);    /* 3000-3004 */
int pr_op_partitions(pr_conn *c, pr_rd *r, em_buf *out);        /* 1101 */
int pr_op_reset_lost(pr_conn *c, pr_rd *r, em_buf *out);        /* PR_OP_RESET_LOST */
int pr_op_baseline(pr_conn *c, pr_rd *r, em_buf *out);          /* PR_OP_BASELINE */
/* pr_baseline_default: with no baseline set, the members become it (0, or
 * the error reply sent). */
int pr_baseline_default(pr_conn *c);
int pr_op_ops(pr_conn *c, int op, pr_rd *r, em_buf *out);       /* 32101-32104 (proto_ops.c) */
/* pr_node_info_check decodes a NODE_INFO payload as CLUSTER_INFO does a
 * member's (tests): 0, EM_PROTO or EM_NOMEM. */
int pr_node_info_check(const uint8_t *p, size_t n);

/* ---- cluster (proto_cluster.c) ----------------------------------------- */

/* pr_change_state applies a state on this node (persisted, in-memory caches
 * cleared on deactivation); proto.c. */
int pr_change_state(pr_server *s, int to);
/* pr_cfg_apply_start: create the cache of an applied CACHE_START (config
 * bytes as CACHE_CREATE_WITH_CONFIGURATION carries them); proto_cfg.c. */
int pr_cfg_apply_start(pr_server *s, const uint8_t *cfg, size_t len);
/* pr_cfg_apply_config: an applied CACHE_CONFIG (the cache's configuration
 * as it is now): its query entities replace the cache's, and SQL reads its
 * tables again.  pr_cfg_encode_props appends g in the property layout
 * CACHE_CREATE_WITH_CONFIGURATION sends and the members decode. */
int pr_cfg_apply_config(pr_server *s, const uint8_t *cfg, size_t len);
int pr_cfg_encode_props(const st_cache_config *g, em_buf *b);
/* pr_cluster_await_owners waits (bounded) until this node's topology has
 * the exchange's first decision for cache sc - until then no request is
 * routed to any member (cl_plan_owners) - as Ignite's cache start returns
 * after its exchange: 0, or EM_TIMEOUT.  At once when alone or not
 * clustered. */
int pr_cluster_await_owners(pr_server *s, st_cache *sc, uint32_t timeout_ms);

/* pr_cluster_propose sends an entry through the metadata group and waits
 * for it to apply here; on failure the reply's message is set and the
 * status returned. */
int pr_cluster_propose(pr_conn *c, const void *entry, size_t len, const char *what);
/* pr_test_hold (test hooks write_hold, tx_hold): while file exists, at
 * most 60 s, the caller waits; the log says "<what> waits while <file>
 * exists" once. */
void pr_test_hold(const char *file, const char *what);
/* pr_cluster_route decides where a decoded cache op runs on a cluster: 0 =
 * here (run it); else it was answered by the member(s) that own its keys
 * (*done = 1) with rc = what the handler returns.  keys = the op's key
 * items ([kp, kend): one key, or a batch's items, pairs when pairs). */
int pr_cluster_route(pr_conn *c, int op, st_cache *sc, const uint8_t *kp, const uint8_t *kend,
                     int nkeys, int pairs, em_buf *out, int *done);
/* pr_cluster_reroute: pr_cluster_route for an idempotent op that ran here
 * as the primary while the primary moved: waits (bounded) until this
 * node's topology sends it elsewhere, then routes it there (*done = 1).
 * *done = 0: still the primary here after the wait. */
int pr_cluster_reroute(pr_conn *c, int op, st_cache *sc, const uint8_t *kp, const uint8_t *kend,
                       int nkeys, int pairs, em_buf *out, int *done);
/* pr_cluster_idempotent: 1 for ops that may run twice harmlessly. */
int pr_cluster_idempotent(int op);
/* pr_cluster_owner_check: on a forwarded request, is this node the one
 * that serves its keys in its own topology?  0, or a failure reply with
 * c->stale set (the forwarding node looks again: pr_conn_take_stale). */
int pr_cluster_owner_check(pr_conn *c, int op, st_cache *sc, const uint8_t *kp,
                           const uint8_t *kend, int nkeys, int pairs);
/* pr_cluster_scan_mode: *cluster = 1 when a scan must cover the members'
 * partitions (a cluster of several members, not a local scan, not a
 * forwarded request); 0, or a failure status (this node is no member). */
int pr_cluster_scan_mode(pr_conn *c, int local, int *cluster);
/* pr_cluster_scan_fetch: the st_snap_fn of a cluster scan (arg: the pr_conn
 * that owns the cursor); pr_op_part_snapshot answers PR_OP_PART_SNAPSHOT,
 * a partition's snapshot, on the partition's primary (forwarded only). */
int pr_cluster_scan_fetch(void *arg, st_cache *sc, uint32_t part, em_buf *snap);
int pr_op_part_snapshot(pr_conn *c, pr_rd *r, em_buf *out);
/* pr_op_rid_call answers PR_OP_RID_CALL (forwarded only): the write runs
 * once per origin request id. */
int pr_op_rid_call(pr_conn *c, pr_rd *r, em_buf *out);
/* pr_exec_request runs one request frame body on c (proto.c). */
int pr_exec_request(pr_conn *c, const uint8_t *body, size_t len, em_buf *out);
/* pr_cluster_sync: on a cluster member, catch up with every change the
 * cluster has confirmed (a cache another node just started); 1 if it did,
 * 0 on a single node or when the cluster could not be asked. */
int pr_cluster_sync(pr_conn *c);
/* pr_cluster_wait_cache: on a forwarded request, the cache the origin
 * already had, once its start applies here (bounded); NULL if it did not. */
st_cache *pr_cluster_wait_cache(pr_conn *c, int32_t id);
/* pr_cluster_type_put spreads a registered binary type record (kind 1) or
 * type name (kind 2) to the cluster. */
int pr_cluster_type_put(pr_conn *c, int kind, int32_t type_id, const uint8_t *p, size_t n);

/* ---- cluster groups (proto_group.c) ------------------------------------ */

/* CLUSTER_GROUP_GET_NODE_IDS (5100), _GET_NODE_INFO (5101) and
 * _GET_NODE_ENDPOINTS (5102). */
int  pr_op_group(pr_conn *c, int op, pr_rd *r, em_buf *out);
/* pr_group_free frees the topology history (pr_server_free). */
void pr_group_free(pr_server *s);

int pr_op_sql(pr_conn *c, pr_rd *r, em_buf *out);               /* 2002 */
int pr_op_sql_fields(pr_conn *c, pr_rd *r, em_buf *out);        /* 2004 */
int pr_op_sql_page(pr_conn *c, pr_rd *r, em_buf *out);          /* 2003, 2005 */
int pr_op_close_any(pr_conn *c, pr_rd *r, em_buf *out);         /* 0 */

#endif
