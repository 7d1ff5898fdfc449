/* proto_txp.h - the parts and backup copies a node holds, shared by their
 * two files: proto_txp.c (the parts' calls, the copies kept, a part's
 * commit) and proto_txr.c (what a node knows of a transaction, recovery
 * without a failed primary or coordinator, the sweep that starts it).
 * Internal to proto/. */
#ifndef EM_PROTO_TXP_H
#define EM_PROTO_TXP_H

#include "proto/proto_txc.h"
#include "cluster/cl_tx.h"

#define TXP_MAX  8192               /* parts and shadows held on one node */
#define TXP_RING 4096               /* outcomes remembered */
#define TXP_SWEEP_MS 500
#define TXP_SPARE 64                /* ended parts kept for reuse (0 B per transaction) */
#define TXP_IDLE_MS 10000           /* an open part unheard of this long: is it open there? */

typedef struct txb {                /* a part */
    cl_meta_uuid coord;
    uint64_t     seq;
    cl_tx       *tx;
    uint8_t      state;             /* TXS_ACTIVE or TXS_PREPARED */
    uint8_t      busy;              /* a worker runs something of it */
    uint8_t      doomed;            /* rolled back while busy: ends when released */
    uint8_t      recovering;        /* a RECOVER job is queued or running */
    uint8_t      shrt;              /* committed, writes not taken by a new primary */
    uint64_t     last_ms;           /* its coordinator's last call */
    uint32_t     nparts, nholders, capparts, capholders;
    cl_meta_uuid *parts;            /* every part of the transaction (its primaries) */
    cl_meta_uuid *holders;          /* the backups holding its shadow */
} txb;

typedef struct txs {                /* a shadow: a backup's copy of a prepared part */
    cl_meta_uuid coord, primary;
    uint64_t     seq;
    cl_tx       *locks;             /* holds the keys' locks here */
    uint32_t     nparts, nw, capparts, nholders, capholders;
    cl_meta_uuid *parts;
    cl_meta_uuid *holders;          /* every member its primary sent a copy to */
    em_buf       data;              /* the writes, as SHADOW carries them */
    uint8_t      busy, recovering;
} txs;

/* An ended part's or shadow's outcome; prim: a shadow's primary (zero for
 * this node's own part); shrt: a part that committed but whose handoff no
 * new primary took (a retried COMMIT hears it again). */
typedef struct txo { cl_meta_uuid coord, prim; uint64_t seq; uint8_t st, shrt; } txo;

/* A HANDOFF taken here (proto_txh.c), by its transaction, sender and the
 * digest of the writes it carried: a repeat (its caller timed out and
 * asked again, or a copy left in a queue) gets the first one's answer and
 * applies nothing.  Only one that applied every write it carried is kept. */
#define TXP_HANDS 256
typedef struct txho {
    cl_meta_uuid coord, from;
    uint64_t     seq, digest;
    uint32_t     applied;
    uint8_t      used, busy;
} txho;

struct pr_txbs {
    pthread_mutex_t mu;
    txb    **b;
    txs    **s;
    uint32_t nb, capb, ns, caps;
    txo      ring[TXP_RING];
    uint32_t ring_at;
    uint64_t swept_ms;
    txb     *spare[TXP_SPARE];      /* ended parts, their memory kept */
    uint32_t nspare;
    txho     hands[TXP_HANDS];
    uint32_t hand_at;
};

/* The tables (x->mu held): a part, a backup copy, an ended one's outcome;
 * detach takes one out of its table with its outcome remembered. */
txb    *pr_txp_find(struct pr_txbs *x, cl_meta_uuid coord, uint64_t seq);
txs    *pr_txp_find_shadow(struct pr_txbs *x, cl_meta_uuid coord, uint64_t seq,
                           cl_meta_uuid prim);
uint8_t pr_txp_ring_get(const struct pr_txbs *x, cl_meta_uuid coord, uint64_t seq);
int     pr_txp_ring_short(const struct pr_txbs *x, cl_meta_uuid coord, uint64_t seq);
void    pr_txp_detach(struct pr_txbs *x, txb *b, uint8_t outcome);
void    pr_txp_detach_shadow(struct pr_txbs *x, txs *h, uint8_t outcome);
void    pr_txp_txb_free(txb *b);
void    pr_txp_txs_free(txs *h);

/* pr_txp_call: one question to member `to` (this node answers itself): 0
 * with the reply's payload in *pay, or an error (TXC_CALL_MS bound). */
int  pr_txp_call(pr_conn *c, cl_meta_uuid to, const em_buf *env, em_buf *resp,
                 const uint8_t **pay, size_t *pn);
/* pr_txp_get_write reads one write of a SHADOW's list into u. */
int  pr_txp_get_write(const uint8_t **p, size_t *len, st_update *u);
/* pr_txp_commit_part applies b (busy, this thread's) and tells its copies;
 * pr_txp_part_close ends b (detached) with its outcome. */
int  pr_txp_commit_part(pr_conn *c, txb *b, int *applied);
void pr_txp_part_close(pr_conn *c, txb *b, uint8_t outcome);

/* pr_txp_member_now: who is a member in this node's topology. */
int  pr_txp_member_now(pr_conn *c, cl_meta_uuid who);
/* pr_txp_put_write appends one write as SHADOW and HANDOFF carry it;
 * pr_txp_get_write (above) reads it back. */
int  pr_txp_put_write(em_buf *b, const st_update *u);
/* pr_txp_apply_writes (proto_txr.c): of nw writes at q, those of the
 * partitions this node is the primary of now, applied as theirs; strict:
 * EM_AGAIN, nothing applied, while a partition has no live primary. */
int  pr_txp_apply_writes(pr_conn *c, const uint8_t *q, size_t ql, uint32_t nw, int strict,
                         uint32_t *napplied);
/* proto_txh.c: after b applied its commit, its writes of partitions whose
 * primary is another member now (an affinity switch since it prepared)
 * go to that primary (HANDOFF); newer != 0: an owner fenced the commit's
 * stream, so a topology at log index newer or later is waited for first.
 * 0, or a status.  pr_txp_take_handoff answers HANDOFF. */
int  pr_txp_handoff(pr_conn *c, txb *b, uint64_t newer);
int  pr_txp_take_handoff(pr_conn *c, cl_meta_uuid coord, uint64_t seq, const uint8_t *p,
                         size_t len, em_buf *out);

/* proto_txr.c: TXC_STATE's answer, and TXC_RECOVER (shadow 0: a prepared
 * part whose coordinator left; 1: a backup copy whose primary left, its id
 * in p; 2: an open part unheard of for long). */
int  pr_txp_answer_state(pr_conn *c, cl_meta_uuid coord, uint64_t seq, em_buf *out);
int  pr_txp_recover(pr_conn *c, cl_meta_uuid coord, uint64_t seq, int shadow,
                    const uint8_t *p, size_t len);

#endif
