/* cl_rmsg.h - the payloads of the replication frames (REPL_UPDATE,
 * REPL_ACK, REPL_FENCED; cl_repl.c) and the rebalancing frames
 * (REBAL_DEMAND, REBAL_SUPPLY, REBAL_DONE, REBAL_STALE; cl_rebal.c).
 *
 * They come from another process: the decoders here are pure functions of
 * the bytes, check every length before they read, allocate nothing, and
 * are what tests/fuzz/fuzz_rmsg.c explores.  Integers are little-endian,
 * as every frame of the cluster port (cl_net.h).
 *
 * REPL_UPDATE: updates back to back, each
 *   i32 cache | u32 part | u64 ctr | u64 prev | u64 epoch | u32 len+flags
 *   [ u64 origin | u64 seq | u16 op ]   when flags has CL_RMSG_UPD_RID
 *   record (len bytes: a WAL update record, wal_encode_update)
 * REPL_ACK: entries of i32 cache | u32 part | u64 ctr | u64 from | i32 status
 * REPL_FENCED, REBAL_STALE: entries of i32 cache | u32 part
 * REBAL_DONE: i32 cache | u32 part | u64 msb | u64 lsb (the member the
 *   copy loaded from)
 * REBAL_DEMAND: i32 group | u32 part | u32 seq [ u64 last | u32 k | u64 digest ]
 * REBAL_SUPPLY: i32 group | u32 part | u32 seq | u8 flags | u32 n |
 *   u64 the supplier's counter, then n entries (u32 klen | key | u32 vlen |
 *   value | i64 expiry) or, with CL_RMSG_F_HIST, n log records
 *   (u32 len | WAL update record).
 */
#ifndef EMBER_CL_RMSG_H
#define EMBER_CL_RMSG_H

#include <stddef.h>
#include <stdint.h>

#include "cluster/cl_hist.h"
#include "cluster/cl_rid.h"
#include "util/buf.h"

#define CL_RMSG_UPD_HDR      36u
#define CL_RMSG_UPD_RESTART  0x80000000u  /* the epoch changed since prev was sent */
#define CL_RMSG_UPD_RID      0x40000000u  /* the origin request id follows the header */
#define CL_RMSG_RID_EXT      18u
#define CL_RMSG_MAX_REC      (64u << 20)  /* one update record, at most */
#define CL_RMSG_ACK          28u
#define CL_RMSG_PART         8u
#define CL_RMSG_DONE         24u
#define CL_RMSG_DEMAND       12u
#define CL_RMSG_CLAIM        20u
#define CL_RMSG_SUP_HDR      25u
#define CL_RMSG_F_LAST       1u
#define CL_RMSG_F_AGAIN      2u           /* not ready, or started over: demand again later */
#define CL_RMSG_F_HIST       4u           /* records from the supplier's log (historical) */

typedef struct cl_rmsg_upd {
    int32_t        cache;
    uint32_t       part;
    uint64_t       ctr, prev, epoch;
    int            restart;
    int            has_rid;
    cl_rid         rid;
    uint16_t       rid_op;
    const uint8_t *rec;              /* into the frame */
    uint32_t       len;
} cl_rmsg_upd;

/* cl_rmsg_upd_next: the update at *at of p[0..n): 1 and *at past it, 0 at
 * the end, EM_TRUNCATED when the rest is not an update (dropped). */
int    cl_rmsg_upd_next(const uint8_t *p, size_t n, size_t *at, cl_rmsg_upd *u);
/* cl_rmsg_upd_put writes u's header (and request id) at h: the bytes
 * before u->len bytes of record; returns how many. */
size_t cl_rmsg_upd_put(uint8_t *h, const cl_rmsg_upd *u);
/* cl_rmsg_upd_set_prev: the prev and restart of the header at h, which
 * differ per owner the update goes to. */
void   cl_rmsg_upd_set_prev(uint8_t *h, uint64_t prev, int restart);
/* cl_rmsg_upd_size: one update's bytes, header to end of record, from the
 * header at h (one this process wrote). */
size_t cl_rmsg_upd_size(const uint8_t *h);

typedef struct cl_rmsg_ack {
    int32_t  cache;
    uint32_t part;
    uint64_t ctr, from;
    int32_t  status;
} cl_rmsg_ack;

/* cl_rmsg_ack_next / cl_rmsg_part_next: the entry at *at; 1 and *at past
 * it, or 0 when no whole entry is left (a partial one is ignored). */
int  cl_rmsg_ack_next(const uint8_t *p, size_t n, size_t *at, cl_rmsg_ack *a);
void cl_rmsg_ack_put(uint8_t *e, const cl_rmsg_ack *a);
int  cl_rmsg_part_next(const uint8_t *p, size_t n, size_t *at, int32_t *cache, uint32_t *part);
void cl_rmsg_part_put(uint8_t *e, int32_t cache, uint32_t part);
/* cl_rmsg_done_decode: a REBAL_DONE payload (exactly CL_RMSG_DONE bytes);
 * 0 or EM_BADLEN.  sup[0], sup[1]: the supplier's id (msb, lsb). */
int  cl_rmsg_done_decode(const uint8_t *p, size_t n, int32_t *cache, uint32_t *part,
                         uint64_t sup[2]);
void cl_rmsg_done_put(uint8_t *e, int32_t cache, uint32_t part, uint64_t msb, uint64_t lsb);

typedef struct cl_rmsg_demand {
    int32_t       grp;
    uint32_t      part, seq;
    int           has_claim;
    cl_hist_claim claim;
} cl_rmsg_demand;

/* cl_rmsg_demand_decode: 0, or EM_BADLEN. */
int    cl_rmsg_demand_decode(const uint8_t *p, size_t n, cl_rmsg_demand *d);
/* cl_rmsg_demand_put: into b (CL_RMSG_DEMAND + CL_RMSG_CLAIM bytes at
 * least); returns the length. */
size_t cl_rmsg_demand_put(uint8_t *b, const cl_rmsg_demand *d);

typedef struct cl_rmsg_supply {
    int32_t        grp;
    uint32_t       part, seq;
    uint8_t        flags;
    uint32_t       cnt;
    uint64_t       ctr;              /* the supplier's counter at its snapshot */
    const uint8_t *body;             /* the cnt entries or records */
    size_t         blen;
} cl_rmsg_supply;

/* cl_rmsg_supply_decode: the header; 0, EM_TRUNCATED, or EM_PROTO for
 * unknown flags.  The body is read with the _next functions below. */
int  cl_rmsg_supply_decode(const uint8_t *p, size_t n, cl_rmsg_supply *s);
void cl_rmsg_supply_put(uint8_t *h, const cl_rmsg_supply *s);    /* CL_RMSG_SUP_HDR bytes */

typedef struct cl_rmsg_entry {
    const uint8_t *key, *val;
    uint32_t       klen, vlen;
    int64_t        expire_at_ms;
} cl_rmsg_entry;

/* cl_rmsg_entry_next / cl_rmsg_rec_next: the entry (a non-empty key) or
 * log record at *at of a SUPPLY body: 1 and *at past it, 0 at the end,
 * EM_TRUNCATED. */
int cl_rmsg_entry_next(const uint8_t *p, size_t n, size_t *at, cl_rmsg_entry *e);
/* cl_rmsg_entry_add appends e to a SUPPLY body: 0 or EM_NOMEM. */
int cl_rmsg_entry_add(em_buf *b, const cl_rmsg_entry *e);
int cl_rmsg_rec_next(const uint8_t *p, size_t n, size_t *at, const uint8_t **rec,
                     uint32_t *len);

#endif
