/* fuzz_rmsg.c - libFuzzer target for the replication and rebalancing
 * payload decoders (src/cluster/cl_rmsg.c): the input is read as frames of
 * the cluster port, as a link consumes them, and each REPL_* / REBAL_*
 * payload goes through the decoders cl_repl.c and cl_rebal.c use, then its
 * update records through the WAL decoder, as a copy applies them.  Checks:
 * nothing read lies outside the payload, offsets only move forward, and
 * whatever decodes encodes back to the same bytes.  Seeds:
 * tests/fuzz/corpus/fuzz_rmsg/.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "cluster/cl_net.h"
#include "cluster/cl_rmsg.h"
#include "store/store.h"
#include "util/buf.h"
#include "util/err.h"
#include "wal/wal.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void inside(const uint8_t *p, size_t n, const uint8_t *q, size_t len)
{
    if (q < p || len > n || (size_t)(q - p) > n - len)
        abort();
}

/* A record is decoded as a copy would before applying it. */
static void record(const uint8_t *rec, uint32_t len)
{
    wal_cmd cmd;
    st_update u;
    st_cache_config cfg;
    if (wal_cmd_unmarshal(rec, len, &cmd) == 0 && wal_decode_update(&cmd, &u, &cfg) == 0 &&
        u.klen && !u.key)
        abort();
}

static void updates(const uint8_t *p, size_t n)
{
    cl_rmsg_upd u;
    uint8_t h[CL_RMSG_UPD_HDR + CL_RMSG_RID_EXT];
    size_t at = 0, was = 0;
    while (cl_rmsg_upd_next(p, n, &at, &u) == 1) {
        if (at <= was || at > n)
            abort();
        inside(p, n, u.rec, u.len);
        size_t hl = cl_rmsg_upd_put(h, &u);
        if (hl + u.len != at - was || memcmp(h, p + was, hl) != 0 ||
            cl_rmsg_upd_size(p + was) != at - was)
            abort();
        record(u.rec, u.len);
        was = at;
    }
}

static void acks(const uint8_t *p, size_t n)
{
    cl_rmsg_ack a;
    uint8_t e[CL_RMSG_ACK];
    for (size_t at = 0, was = 0; cl_rmsg_ack_next(p, n, &at, &a); was = at) {
        cl_rmsg_ack_put(e, &a);
        if (at != was + CL_RMSG_ACK || memcmp(e, p + was, CL_RMSG_ACK) != 0)
            abort();
    }
}

static void parts(const uint8_t *p, size_t n)
{
    int32_t cache;
    uint32_t part;
    uint8_t e[CL_RMSG_PART];
    for (size_t at = 0, was = 0; cl_rmsg_part_next(p, n, &at, &cache, &part); was = at) {
        cl_rmsg_part_put(e, cache, part);
        if (at != was + CL_RMSG_PART || memcmp(e, p + was, CL_RMSG_PART) != 0)
            abort();
    }
}

/* done: a REBAL_DONE decodes only at its exact size, and encodes back. */
static void done(const uint8_t *p, size_t n)
{
    int32_t cache;
    uint32_t part;
    uint64_t sup[2];
    uint8_t e[CL_RMSG_DONE];
    if (cl_rmsg_done_decode(p, n, &cache, &part, sup) != 0) {
        if (n == CL_RMSG_DONE)
            abort();
        return;
    }
    cl_rmsg_done_put(e, cache, part, sup[0], sup[1]);
    if (n != CL_RMSG_DONE || memcmp(e, p, CL_RMSG_DONE) != 0)
        abort();
}

static void demand(const uint8_t *p, size_t n)
{
    cl_rmsg_demand d;
    uint8_t b[CL_RMSG_DEMAND + CL_RMSG_CLAIM];
    if (cl_rmsg_demand_decode(p, n, &d) == 0 &&
        (cl_rmsg_demand_put(b, &d) != n || memcmp(b, p, n) != 0))
        abort();
}

static void supply(const uint8_t *p, size_t n, em_buf *b)
{
    cl_rmsg_supply s;
    uint8_t h[CL_RMSG_SUP_HDR];
    if (cl_rmsg_supply_decode(p, n, &s) != 0)
        return;
    cl_rmsg_supply_put(h, &s);
    if (memcmp(h, p, sizeof h) != 0)
        abort();
    inside(p, n, s.body, s.blen);
    size_t at = 0;
    if (s.flags & CL_RMSG_F_HIST) {
        const uint8_t *rec;
        uint32_t len;
        for (uint32_t i = 0; i < s.cnt && cl_rmsg_rec_next(s.body, s.blen, &at, &rec, &len) == 1;
             i++) {
            inside(s.body, s.blen, rec, len);
            record(rec, len);
        }
        return;
    }
    /* Entries: what decodes, appended again, is the body read so far. */
    em_buf_reset(b);
    cl_rmsg_entry e;
    for (uint32_t i = 0; i < s.cnt && cl_rmsg_entry_next(s.body, s.blen, &at, &e) == 1; i++) {
        inside(s.body, s.blen, e.key, e.klen);
        inside(s.body, s.blen, e.val, e.vlen);
        if (!e.klen || cl_rmsg_entry_add(b, &e) != 0)
            abort();
    }
    if (b->len != at || (at && memcmp(b->p, s.body, at) != 0))
        abort();
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    em_buf b = EM_BUF_INIT;
    size_t off = 0;
    for (int frames = 0; frames < 64 && off < size; frames++) {
        cl_net_frame f;
        if (cl_net_frame_parse(data + off, size - off, 1u << 20, &f) != 0)
            break;
        switch (f.type) {
        case CL_NET_MSG_REPL_UPDATE: updates(f.payload, f.len); break;
        case CL_NET_MSG_REPL_ACK: acks(f.payload, f.len); break;
        case CL_NET_MSG_REPL_FENCED:
        case CL_NET_MSG_REBAL_STALE: parts(f.payload, f.len); break;
        case CL_NET_MSG_REBAL_DONE: done(f.payload, f.len); break;
        case CL_NET_MSG_REBAL_DEMAND: demand(f.payload, f.len); break;
        case CL_NET_MSG_REBAL_SUPPLY: supply(f.payload, f.len, &b); break;
        default: break;
        }
        off += f.total;
    }
    em_buf_free(&b);
    return 0;
}
