/* proto_txc.h - what the two halves of transactions across cluster nodes
 * share: the coordinator (proto_txc.c) and the parts and their backups'
 * copies (proto_txp.c).  Internal to proto/. */
#ifndef EM_PROTO_TXC_H
#define EM_PROTO_TXC_H

#include "proto/proto_int.h"

/* PR_OP_TX_CALL kinds.  SHADOW, FINISH, STATE, DECISION, ALIVE, WAITS and
 * WHERE never wait and run on the receiver's transport thread
 * (pr_txc_inline): a part's prepare, on a forwarding worker, waits for its
 * backups' SHADOW answers, which must not need a worker there.  WAITS (to
 * a part's node: which transaction holds the lock the part waits for?) and
 * WHERE (to a coordinator: on which node does its transaction wait?) are a
 * deadlock probe's steps (proto_txc.c "Deadlocks across nodes").  HANDOFF
 * (proto_txh.c) applies, on a forwarding worker, a committed part's writes
 * of partitions whose primary moved. */
enum { TXC_OP = 0, TXC_PREPARE = 1, TXC_COMMIT = 2, TXC_ROLLBACK = 3, TXC_COMMIT1 = 4,
       TXC_STATE = 5, TXC_RECOVER = 6, TXC_SHADOW = 7, TXC_FINISH = 8, TXC_DECISION = 9,
       TXC_ALIVE = 10, TXC_WAITS = 11, TXC_WHERE = 12, TXC_HANDOFF = 13,
       TXC_LAST = TXC_HANDOFF };
/* What a node knows of a transaction (or of one of its parts).  TXS_HOLDS
 * is only a STATE answer's entry: after a copy's PREPARED, one member its
 * primary sent a copy to (proto_txr.c). */
enum { TXS_UNKNOWN = 0, TXS_ACTIVE = 1, TXS_PREPARED = 2, TXS_COMMITTED = 3,
       TXS_ROLLED_BACK = 4, TXS_HOLDS = 5 };

/* Header: op u16, request id 8, coordinator id 16, sequence u64, kind u8,
 * concurrency u8, isolation u8, timeout i64 (ms left, 0 = none).  COMMIT
 * and COMMIT1 then carry u64: the coordinator's topology's log index. */
#define TXC_HDR (16 + 8 + 3 + 8)
#define TXC_MAX_PARTS 256           /* members one transaction spans */
#define TXC_CALL_MS 5000            /* a part's calls to its backups, recovery's questions */
#define TXC_TOPO_MS 2000            /* to learn a topology another member knew */

/* pr_txc_env starts, in b, a PR_OP_TX_CALL of kind for (coord, seq) with
 * tx's parameters (tx NULL: zeros). */
int pr_txc_env(em_buf *b, const uint8_t *id8, cl_meta_uuid coord, uint64_t seq, int kind,
               const struct cl_tx *tx);

/* The coordinator's decisions (proto_txc.c): a prepared part's backups
 * whose primary failed ask it.  pr_txc_decision: TXS_COMMITTED,
 * TXS_ROLLED_BACK (an undecided transaction is decided so now: it will not
 * commit), or TXS_UNKNOWN. */
int  pr_txc_decision(pr_server *s, uint64_t seq);
/* pr_txc_where: 1 and *at, the member a part of transaction seq (this
 * node's) waits for a lock on; 0 when it waits for none. */
int  pr_txc_where(pr_server *s, uint64_t seq, cl_meta_uuid *at);
/* pr_txp_waits: 1 and the holder's (coordinator, sequence) when the part
 * (coord, seq) here waits for a lock a part or backup copy of another
 * transaction holds; 0 otherwise. */
int  pr_txp_waits(pr_server *s, cl_meta_uuid coord, uint64_t seq, cl_meta_uuid *hc,
                  uint64_t *hs);
/* pr_txc_ask sends env (a PR_OP_TX_CALL of an inline kind) to member `to`,
 * this node included, waiting up to ms: 0 with the reply's payload in
 * *pay (inside resp), or an error. */
int  pr_txc_ask(pr_conn *c, cl_meta_uuid to, const em_buf *env, em_buf *resp,
                const uint8_t **pay, size_t *pn, uint32_t ms);
int  pr_txc_decisions_init(pr_server *s);
void pr_txc_decisions_free(pr_server *s);

/* pr_txc_crash_point (tests only, opt.tx_crash): exits the process when
 * this is the Nth time POINT ("prepared", "committing", "applied",
 * "decided") is reached.  Callers test pr_txc_crash_armed first, so the
 * conditions that pick a point cost nothing in a normal run. */
void pr_txc_crash_point(pr_server *s, const char *point);
static inline int pr_txc_crash_armed(const pr_server *s) { return s->opt.tx_crash[0] != 0; }

/* pr_txc_put_id appends a member id (msb, lsb) as the messages carry it. */
int  pr_txc_put_id(em_buf *b, cl_meta_uuid id);

/* The parts and backup copies of this node (proto_txp.c). */
int  pr_txp_init(pr_server *s);
void pr_txp_free(pr_server *s);

static inline int pr_txc_is_member(const cl_topo *t, cl_meta_uuid id)
{
    for (uint32_t i = 0; i < t->n; i++)
        if (cl_meta_uuid_eq(t->m[i].id, id))
            return 1;
    return 0;
}

#endif
