/* cl_rmsg.c - replication and rebalancing payloads (layouts in cl_rmsg.h).
 * Every length is checked against what is left of the frame before it is
 * used; sums are formed only after each term is known to fit.
 */
#include "cluster/cl_rmsg.h"

#include "util/buf.h"
#include "util/err.h"

#define UPD_FLAGS (CL_RMSG_UPD_RESTART | CL_RMSG_UPD_RID)

int cl_rmsg_upd_next(const uint8_t *p, size_t n, size_t *at, cl_rmsg_upd *u)
{
    size_t o = *at;
    if (o >= n)
        return 0;
    if (n - o < CL_RMSG_UPD_HDR)
        return EM_TRUNCATED;
    const uint8_t *h = p + o;
    uint32_t lf = em_ld32(h + 32);
    u->cache = (int32_t)em_ld32(h);
    u->part = em_ld32(h + 4);
    u->ctr = em_ld64(h + 8);
    u->prev = em_ld64(h + 16);
    u->epoch = em_ld64(h + 24);
    u->restart = (lf & CL_RMSG_UPD_RESTART) != 0;
    u->has_rid = (lf & CL_RMSG_UPD_RID) != 0;
    u->len = lf & ~UPD_FLAGS;
    size_t left = n - o - CL_RMSG_UPD_HDR;
    size_t ext = u->has_rid ? CL_RMSG_RID_EXT : 0;
    if (ext > left || u->len > left - ext || u->len > CL_RMSG_MAX_REC)
        return EM_TRUNCATED;
    u->rid = (cl_rid){ 0, 0 };
    u->rid_op = 0;
    if (ext) {
        u->rid.origin = em_ld64(h + CL_RMSG_UPD_HDR);
        u->rid.seq = em_ld64(h + CL_RMSG_UPD_HDR + 8);
        u->rid_op = em_ld16(h + CL_RMSG_UPD_HDR + 16);
    }
    u->rec = h + CL_RMSG_UPD_HDR + ext;
    *at = o + CL_RMSG_UPD_HDR + ext + u->len;
    return 1;
}

size_t cl_rmsg_upd_put(uint8_t *h, const cl_rmsg_upd *u)
{
    em_st32(h, (uint32_t)u->cache);
    em_st32(h + 4, u->part);
    em_st64(h + 8, u->ctr);
    em_st64(h + 16, u->prev);
    em_st64(h + 24, u->epoch);
    em_st32(h + 32, u->len | (u->restart ? CL_RMSG_UPD_RESTART : 0) |
                        (u->has_rid ? CL_RMSG_UPD_RID : 0));
    if (!u->has_rid)
        return CL_RMSG_UPD_HDR;
    em_st64(h + CL_RMSG_UPD_HDR, u->rid.origin);
    em_st64(h + CL_RMSG_UPD_HDR + 8, u->rid.seq);
    em_st16(h + CL_RMSG_UPD_HDR + 16, u->rid_op);
    return CL_RMSG_UPD_HDR + CL_RMSG_RID_EXT;
}

void cl_rmsg_upd_set_prev(uint8_t *h, uint64_t prev, int restart)
{
    em_st64(h + 16, prev);
    if (restart)
        em_st32(h + 32, em_ld32(h + 32) | CL_RMSG_UPD_RESTART);
}

size_t cl_rmsg_upd_size(const uint8_t *h)
{
    uint32_t lf = em_ld32(h + 32);
    return CL_RMSG_UPD_HDR + (lf & CL_RMSG_UPD_RID ? CL_RMSG_RID_EXT : 0) + (lf & ~UPD_FLAGS);
}

int cl_rmsg_ack_next(const uint8_t *p, size_t n, size_t *at, cl_rmsg_ack *a)
{
    size_t o = *at;
    if (o > n || n - o < CL_RMSG_ACK)
        return 0;
    a->cache = (int32_t)em_ld32(p + o);
    a->part = em_ld32(p + o + 4);
    a->ctr = em_ld64(p + o + 8);
    a->from = em_ld64(p + o + 16);
    a->status = (int32_t)em_ld32(p + o + 24);
    *at = o + CL_RMSG_ACK;
    return 1;
}

void cl_rmsg_ack_put(uint8_t *e, const cl_rmsg_ack *a)
{
    em_st32(e, (uint32_t)a->cache);
    em_st32(e + 4, a->part);
    em_st64(e + 8, a->ctr);
    em_st64(e + 16, a->from);
    em_st32(e + 24, (uint32_t)a->status);
}

int cl_rmsg_part_next(const uint8_t *p, size_t n, size_t *at, int32_t *cache, uint32_t *part)
{
    size_t o = *at;
    if (o > n || n - o < CL_RMSG_PART)
        return 0;
    *cache = (int32_t)em_ld32(p + o);
    *part = em_ld32(p + o + 4);
    *at = o + CL_RMSG_PART;
    return 1;
}

void cl_rmsg_part_put(uint8_t *e, int32_t cache, uint32_t part)
{
    em_st32(e, (uint32_t)cache);
    em_st32(e + 4, part);
}

int cl_rmsg_done_decode(const uint8_t *p, size_t n, int32_t *cache, uint32_t *part,
                        uint64_t sup[2])
{
    size_t at = 0;
    if (n != CL_RMSG_DONE || !cl_rmsg_part_next(p, n, &at, cache, part))
        return EM_BADLEN;
    sup[0] = em_ld64(p + at);
    sup[1] = em_ld64(p + at + 8);
    return 0;
}

void cl_rmsg_done_put(uint8_t *e, int32_t cache, uint32_t part, uint64_t msb, uint64_t lsb)
{
    cl_rmsg_part_put(e, cache, part);
    em_st64(e + CL_RMSG_PART, msb);
    em_st64(e + CL_RMSG_PART + 8, lsb);
}

int cl_rmsg_demand_decode(const uint8_t *p, size_t n, cl_rmsg_demand *d)
{
    if (n != CL_RMSG_DEMAND && n != CL_RMSG_DEMAND + CL_RMSG_CLAIM)
        return EM_BADLEN;
    d->grp = (int32_t)em_ld32(p);
    d->part = em_ld32(p + 4);
    d->seq = em_ld32(p + 8);
    d->has_claim = n > CL_RMSG_DEMAND;
    d->claim = (cl_hist_claim){ 0, 0, 0 };
    if (d->has_claim)
        d->claim = (cl_hist_claim){ em_ld64(p + 12), em_ld32(p + 20), em_ld64(p + 24) };
    return 0;
}

size_t cl_rmsg_demand_put(uint8_t *b, const cl_rmsg_demand *d)
{
    em_st32(b, (uint32_t)d->grp);
    em_st32(b + 4, d->part);
    em_st32(b + 8, d->seq);
    if (!d->has_claim)
        return CL_RMSG_DEMAND;
    em_st64(b + 12, d->claim.last);
    em_st32(b + 20, d->claim.k);
    em_st64(b + 24, d->claim.digest);
    return CL_RMSG_DEMAND + CL_RMSG_CLAIM;
}

int cl_rmsg_supply_decode(const uint8_t *p, size_t n, cl_rmsg_supply *s)
{
    if (n < CL_RMSG_SUP_HDR)
        return EM_TRUNCATED;
    s->grp = (int32_t)em_ld32(p);
    s->part = em_ld32(p + 4);
    s->seq = em_ld32(p + 8);
    s->flags = p[12];
    s->cnt = em_ld32(p + 13);
    s->ctr = em_ld64(p + 17);
    s->body = p + CL_RMSG_SUP_HDR;
    s->blen = n - CL_RMSG_SUP_HDR;
    if (s->flags & ~(CL_RMSG_F_LAST | CL_RMSG_F_AGAIN | CL_RMSG_F_HIST))
        return EM_PROTO;
    return 0;
}

void cl_rmsg_supply_put(uint8_t *h, const cl_rmsg_supply *s)
{
    em_st32(h, (uint32_t)s->grp);
    em_st32(h + 4, s->part);
    em_st32(h + 8, s->seq);
    h[12] = s->flags;
    em_st32(h + 13, s->cnt);
    em_st64(h + 17, s->ctr);
}

int cl_rmsg_entry_next(const uint8_t *p, size_t n, size_t *at, cl_rmsg_entry *e)
{
    size_t o = *at;
    if (o >= n)
        return 0;
    if (n - o < 4)
        return EM_TRUNCATED;
    size_t left = n - o - 4;
    uint32_t kl = em_ld32(p + o);
    if (kl == 0 || kl > left || left - kl < 4)
        return EM_TRUNCATED;
    left -= (size_t)kl + 4;
    uint32_t vl = em_ld32(p + o + 4 + kl);
    if (vl > left || left - vl < 8)
        return EM_TRUNCATED;
    e->key = p + o + 4;
    e->klen = kl;
    e->val = e->key + kl + 4;
    e->vlen = vl;
    e->expire_at_ms = (int64_t)em_ld64(e->val + vl);
    *at = o + 16u + kl + vl;
    return 1;
}

int cl_rmsg_entry_add(em_buf *b, const cl_rmsg_entry *e)
{
    uint8_t h[8];
    em_st32(h, e->klen);
    int rc = em_buf_append(b, h, 4) || em_buf_append(b, e->key, e->klen);
    em_st32(h, e->vlen);
    rc = rc || em_buf_append(b, h, 4) || em_buf_append(b, e->val, e->vlen);
    em_st64(h, (uint64_t)e->expire_at_ms);
    rc = rc || em_buf_append(b, h, 8);
    return rc ? EM_NOMEM : 0;
}

int cl_rmsg_rec_next(const uint8_t *p, size_t n, size_t *at, const uint8_t **rec,
                     uint32_t *len)
{
    size_t o = *at;
    if (o >= n)
        return 0;
    if (n - o < 4 || n - o - 4 < em_ld32(p + o))
        return EM_TRUNCATED;
    *len = em_ld32(p + o);
    *rec = p + o + 4;
    *at = o + 4u + *len;
    return 1;
}
