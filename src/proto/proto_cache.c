/* proto_cache.c - key-value cache ops 1000-1021, scan queries (2000, 2001)
 * with per-connection cursors, and RESOURCE_CLOSE (0).
 *
 * Layouts: ../shared/reference/ignite-thin-protocol.md §2.2 (cache header),
 * §2.3 (key-value ops), §2.5 (scan and cursors), §3.4 (27 wrapping).
 */
#include "proto/proto_int.h"

#include "cluster/cl_repl.h"

#include <errno.h>
#include <string.h>

#include "binary/binary.h"
#include "util/mem.h"

/* ---- cache header and store errors ------------------------------------ */

int pr_cache_header(pr_conn *c, pr_rd *r, pr_cache_hdr *h)
{
    memset(h, 0, sizeof *h);
    if (pr_rd_i32(r, &h->cache_id) || pr_rd_u8(r, &h->flags))
        return pr_bad_request(c, EM_TRUNCATED);
    if (h->flags & 0x04) {
        if (pr_rd_i64(r, &h->expiry.create_ms) || pr_rd_i64(r, &h->expiry.update_ms) ||
            pr_rd_i64(r, &h->expiry.access_ms))
            return pr_bad_request(c, EM_TRUNCATED);
        h->ctx.expiry = &h->expiry;
    }
    if (h->flags & 0x02) {
        /* the transaction's id follows the expiry policy (ClientCacheRequest
         * reads the policy, ClientCacheDataRequest the id); Ignite looks the
         * transaction up before the cache */
        if (pr_rd_i32(r, &h->tx_id))
            return pr_bad_request(c, EM_TRUNCATED);
        int rc = pr_tx_lookup(c, h->tx_id, &h->tx);
        if (rc)
            return rc;
    }
    h->cache = st_cache_find(c->srv->st, h->cache_id);
    if (!h->cache && c->forwarded)
        h->cache = pr_cluster_wait_cache(c, h->cache_id);
    else if (!h->cache && pr_cluster_sync(c))
        h->cache = st_cache_find(c->srv->st, h->cache_id);
    if (!h->cache)
        return pr_fail(c, PR_ST_CACHE_NOT_FOUND, "Cache does not exist [cacheId= %d]", h->cache_id);
    /* Ignite finds the cache's descriptor first (1000 if none), then its
     * proxy, which an inactive cluster refuses. */
    h->state = pr_state(c);
    if (h->state == PR_STATE_INACTIVE)
        return pr_refuse_inactive(c);
    if (h->tx && st_cache_cfg(h->cache)->atomicity_mode != ST_ATOMICITY_TRANSACTIONAL)
        return pr_fail(c, PR_ST_FAILED, "Transaction spans operations on atomic cache (don't "
                       "use atomic cache inside transaction or set up flag by "
                       "cache.allowedAtomicOpsInTx()).");
    em_buf_reset(&c->kscratch);
    h->ctx.scratch = &c->kscratch;
    return 0;
}

int pr_st_err(pr_conn *c, const pr_cache_hdr *h, int rc)
{
    if (rc == EM_NOCACHE)
        return pr_fail(c, PR_ST_CACHE_NOT_FOUND, "Cache does not exist [cacheId= %d]", h->cache_id);
    if (rc == EM_NOMEM)
        return rc;
    if (rc == EM_READONLY || rc == -EIO || rc == -ENOSPC) {
        const char *region = st_cache_region(h->cache);
        return pr_fail(c, PR_ST_FAILED,
                       "Persistence failed (%s): data region %s no longer accepts writes",
                       em_strerror(rc), region ? region : "default");
    }
    return pr_fail(c, PR_ST_FAILED, "Operation failed: %s", em_strerror(rc));
}

/* ---- request pieces ---------------------------------------------------- */

static int rd_key(pr_conn *c, pr_rd *r, const uint8_t **k, size_t *kl)
{
    int rc = pr_rd_obj(c, r, k, kl);
    if (rc)
        return pr_fail(c, PR_ST_FAILED, "Invalid key: %s", em_strerror(rc));
    if ((*k)[0] == BIN_NULL)
        return pr_fail(c, PR_ST_FAILED, "Key must not be null");
    return 0;
}

/* rd_val reads a value and normalises it for storage (27 unwrapped). */
static int rd_val(pr_conn *c, pr_rd *r, em_buf *scratch, const uint8_t **v, size_t *vl)
{
    const uint8_t *p;
    size_t n;
    int rc = pr_rd_obj(c, r, &p, &n);
    if (rc)
        return pr_fail(c, PR_ST_FAILED, "Invalid value: %s", em_strerror(rc));
    if (p[0] == BIN_NULL)
        return pr_fail(c, PR_ST_FAILED, "Value must not be null");
    em_buf_reset(scratch);
    rc = bin_value_prepare(p, n, scratch, v, vl);
    if (rc)
        return pr_fail(c, PR_ST_FAILED, "Invalid value: %s", em_strerror(rc));
    return 0;
}

/* ---- batches (GET_ALL, PUT_ALL, CONTAINS_KEYS, CLEAR_KEYS, REMOVE_KEYS) ---
 *
 * A batch is decoded twice: first every key (and value) is validated, so a
 * malformed request is refused before anything is applied, as before; then
 * the validated bytes are cut into slices PR_BATCH at a time and applied a
 * chunk at a time.  The slices of a whole 64 MiB request (16 bytes per key
 * of 5, keys and values) would be several times the request itself; a
 * chunk is 128 KiB, allocated once per connection.
 */
#define PR_BATCH 4096

typedef pr_batch batch;

static int slices_reserve(pr_conn *c, size_t n)
{
    if (n <= c->slices_cap)
        return 0;
    st_slice *ks = em_realloc(c->ks, n * sizeof *ks);
    if (!ks)
        return EM_NOMEM;
    c->ks = ks;
    st_slice *vs = em_realloc(c->vs, n * sizeof *vs);
    if (!vs)
        return EM_NOMEM;
    c->vs = vs;
    c->slices_cap = n;
    return 0;
}

/* rd_batch validates `int n, n keys` (or pairs) and leaves b at the first
 * item; the count is bounded by the bytes present. */
static int rd_batch(pr_conn *c, pr_rd *r, int pairs, batch *b)
{
    int32_t v;
    if (pr_rd_i32(r, &v))
        return pr_bad_request(c, EM_TRUNCATED);
    if (v < 0 || (size_t)v > pr_rd_left(r) / (pairs ? 2 : 1))
        return pr_fail(c, PR_ST_FAILED, "Malformed request: count %d exceeds the message", v);
    b->p = r->p + r->pos;
    b->left = (size_t)v;
    b->pairs = pairs;
    for (int32_t i = 0; i < v; i++) {
        const uint8_t *k, *val;
        size_t kl, vl;
        int rc = rd_key(c, r, &k, &kl);
        if (!rc && pairs)
            rc = rd_val(c, r, &c->tmp, &val, &vl);
        if (rc)
            return rc;
    }
    return slices_reserve(c, b->left < PR_BATCH ? b->left : PR_BATCH);
}

/* batch_next slices the next chunk into c->ks (and c->vs, values in their
 * stored form); returns its size, 0 at the end.  Values normalisation
 * rewrote are gathered in c->vscratch; their slices hold offsets until the
 * chunk is complete (the buffer may move while it grows). */
int pr_batch_next(pr_conn *c, pr_batch *b, size_t *m)
{
    size_t n = b->left < PR_BATCH ? b->left : PR_BATCH;
    em_buf_reset(&c->vscratch);
    em_buf_reset(&c->escratch);     /* indexes of moved values (uint32 each) */
    for (size_t i = 0; i < n; i++) {
        size_t kl = bin_rd_len(b->p);
        c->ks[i] = (st_slice){ b->p, kl };
        b->p += kl;
        if (!b->pairs)
            continue;
        size_t raw = bin_rd_len(b->p);
        const uint8_t *v;
        size_t vl;
        em_buf_reset(&c->tmp);
        int rc = bin_value_prepare(b->p, raw, &c->tmp, &v, &vl);
        if (rc)
            return rc;              /* it passed rd_batch: cannot happen */
        if (v >= b->p && v < b->p + raw) {
            c->vs[i].p = v;
        } else {
            size_t off = c->vscratch.len;
            if (em_buf_append(&c->vscratch, v, vl) || em_buf_put_le32(&c->escratch, (uint32_t)i))
                return EM_NOMEM;
            c->vs[i].p = (const uint8_t *)(uintptr_t)off;
        }
        c->vs[i].len = vl;
        b->p += raw;
    }
    for (size_t j = 0; j + 4 <= c->escratch.len; j += 4) {
        uint32_t i = em_ld32(c->escratch.p + j);
        c->vs[i].p = c->vscratch.p + (uintptr_t)c->vs[i].p;
    }
    b->left -= n;
    *m = n;
    return 0;
}

static int rd_peek_modes(pr_conn *c, pr_rd *r, int *mask)
{
    int32_t n;
    if (pr_rd_i32(r, &n))
        return pr_bad_request(c, EM_TRUNCATED);
    if (n < 0 || (size_t)n > pr_rd_left(r))
        return pr_fail(c, PR_ST_FAILED, "Malformed request: %d peek modes", n);
    *mask = 0;
    for (int32_t i = 0; i < n; i++) {
        uint8_t m = r->p[r->pos++];
        if (m > 5)
            return pr_fail(c, PR_ST_FAILED, "Unknown peek mode: %d", m);
        *mask |= 1 << m;
    }
    return 0;
}

/* ---- key-value ops ----------------------------------------------------- */

/* pr_op_writes: refused when the cluster is ACTIVE_READ_ONLY. */
int pr_op_writes(int op)
{
    switch (op) {
    case 1000: case 1003: case 1011: case 1012: case 1020: case 1021:
        return 0;
    default:
        return 1;
    }
}

typedef struct emit_ctx {
    pr_conn *c;
    em_buf  *out;
    int32_t  count;
} emit_ctx;

static int emit_kv(void *arg, const uint8_t *k, size_t klen, const uint8_t *v, size_t vlen)
{
    emit_ctx *e = arg;
    int rc = pr_put_stored(e->c, e->out, k, klen);
    if (!rc)
        rc = pr_put_stored(e->c, e->out, v, vlen);
    if (!rc)
        e->count++;
    return rc;
}

const char *pr_repl_msg(int op, int rc)
{
    int w = pr_op_writes(op);
    if (rc == EM_TIMEOUT)
        return w ? PR_REPL_TIMEOUT_MSG : PR_REPL_READ_TIMEOUT_MSG;
    if (rc == EM_STALE)
        return w ? PR_REPL_STALE_MSG : PR_REPL_READ_STALE_MSG;
    return NULL;
}

int pr_fail_repl_timeout(pr_conn *c)
{
    return pr_fail(c, PR_ST_FAILED, "%s", pr_repl_msg(c->req_op, EM_TIMEOUT));
}

/* map_again: a keyed op whose primary moved while it ran here goes to the
 * new primary: forwarded, the sender maps it again (*done, an error that
 * says so); from a client, this node does (pr_cluster_reroute). */
static int map_again(pr_conn *c, int op, st_cache *sc, const uint8_t *k, size_t kl,
                     const batch *bt, const uint8_t *kend, em_buf *out, int *done)
{
    if (c->forwarded) {
        c->stale = 1;
        *done = 1;
        return pr_fail(c, PR_ST_FAILED, "%s", PR_REPL_MOVED_MSG);
    }
    return k ? pr_cluster_reroute(c, op, sc, k, k + kl, 1, 0, out, done)
             : pr_cluster_reroute(c, op, sc, bt->p, kend, (int)bt->left, bt->pairs, out, done);
}

int pr_op_cache(pr_conn *c, int op, pr_rd *r, em_buf *out)
{
    pr_cache_hdr h;
    int rc = pr_cache_header(c, r, &h);
    if (rc)
        return rc;
    st_cache *sc = h.cache;
    if (h.state == PR_STATE_ACTIVE_READ_ONLY && pr_op_writes(op))
        return pr_refuse_read_only(c, "cache", st_cache_cfg(sc)->group_name,
                                   st_cache_cfg(sc)->name);
    const st_opctx *o = &h.ctx;
    const uint8_t *k = NULL, *v = NULL, *e = NULL;
    size_t kl = 0, vl = 0, el = 0, n = 0, pos;
    int flag = 0;
    batch bt = {0};

    /* Decode the request (reference §2.3). */
    switch (op) {
    case 1000: case 1007: case 1011: case 1014: case 1016:
        rc = rd_key(c, r, &k, &kl);
        break;
    case 1001: case 1002: case 1005: case 1006: case 1008: case 1009:
        rc = rd_key(c, r, &k, &kl);
        if (!rc)
            rc = rd_val(c, r, &c->vscratch, &v, &vl);
        break;
    case 1010:
        rc = rd_key(c, r, &k, &kl);
        if (!rc)
            rc = rd_val(c, r, &c->escratch, &e, &el);
        if (!rc)
            rc = rd_val(c, r, &c->vscratch, &v, &vl);
        break;
    case 1017:
        rc = rd_key(c, r, &k, &kl);
        if (!rc)
            rc = rd_val(c, r, &c->escratch, &e, &el);
        break;
    case 1003: case 1012: case 1015: case 1018:
        rc = rd_batch(c, r, 0, &bt);
        break;
    case 1004:
        rc = rd_batch(c, r, 1, &bt);
        break;
    case 1020:
        rc = rd_peek_modes(c, r, &flag);
        break;
    case 1021:
        rc = rd_key(c, r, &k, &kl);
        if (!rc)
            rc = rd_peek_modes(c, r, &flag);
        break;
    default:
        break;
    }
    if (rc)
        return rc;
    if (h.tx && (rc = pr_tx_refuse_nontx(c, op)) != 0)
        return rc;
    c->fanout_sum = 0;
    int txl = h.tx || st_cache_cfg(sc)->atomicity_mode == ST_ATOMICITY_TRANSACTIONAL;
    if (c->srv->opt.cluster && c->forwarded && (k || bt.p)) {
        /* The forwarding node chose this one from its topology; a write run
         * here while this node's topology names another primary would not
         * be streamed to the owners (or be fenced): send it back. */
        const uint8_t *kend = r->p + r->pos;
        rc = k ? pr_cluster_owner_check(c, op, sc, k, k + kl, 1, 0)
               : pr_cluster_owner_check(c, op, sc, bt.p, kend, (int)bt.left, bt.pairs);
        if (rc)
            return rc;
    }
    if (c->owner_probe) {
        c->probe_ok = 1;            /* decoded, owned here: nothing runs */
        return 0;
    }
    if (h.tx && c->srv->opt.cluster && !c->forwarded && (k || bt.p)) {
        /* an explicit transaction's keys: in its parts on their primaries */
        int done = 0;
        const uint8_t *kend = r->p + r->pos;
        rc = k ? pr_txc_route(c, op, &h, k, k + kl, 1, 0, out, &done)
               : pr_txc_route(c, op, &h, bt.p, kend, (int)bt.left, bt.pairs, out, &done);
        if (done || rc)
            return rc;
    } else if (c->srv->opt.cluster && !c->forwarded && op != 1021) {
        int done = 0;
        const uint8_t *kend = r->p + r->pos;
        if (k)
            rc = pr_cluster_route(c, op, sc, k, k + kl, 1, 0, out, &done);
        else if (bt.p)
            rc = pr_cluster_route(c, op, sc, bt.p, kend, (int)bt.left, bt.pairs, out, &done);
        else
            rc = pr_cluster_route(c, op, sc, NULL, NULL, 0, 0, out, &done);
        if (done || rc)
            return rc;
    }
    if (txl && op != 1020 && op != 1021) {
        pr_kv d = { k, v, e, kl, vl, el, flag, bt };
        if (!c->srv->opt.repl)
            return pr_tx_cache_op(c, op, &h, &d, out);
        /* a one-op transaction commits here: its owners ack it as any
         * write, and it commits only while this node is still its keys'
         * primary (cl_repl_primary_only; else EM_STALE, nothing applied) */
        int one = c->srv->opt.cluster && !h.tx && (k || bt.p);
        cl_repl_begin();
        if (one)
            cl_repl_primary_only(1);
        rc = pr_tx_cache_op(c, op, &h, &d, out);
        if (one)
            cl_repl_primary_only(0);
        if (rc == EM_STALE) {
            cl_repl_begin();
            int done = 0;
            rc = map_again(c, op, sc, k, kl, &bt, r->p + r->pos, out, &done);
            return done || rc ? rc : pr_fail(c, PR_ST_FAILED, "%s", PR_REPL_MOVED_MSG);
        }
        if (rc == PR_PARK) {
            cl_repl_begin();        /* it waits for a lock, nothing changed: what it
                                       read so far is read again when it runs */
            return rc;
        }
        int wrc = cl_repl_finish(c->srv->opt.repl);
        return !rc && wrc == EM_TIMEOUT ? pr_fail_repl_timeout(c) : rc;
    }

    /* Run it, appending the reply payload.  What it changes is streamed to
     * the partitions' other owners (cl_repl's observer); repl_done below
     * sends it and waits for the acks a FULL_SYNC cache asks for. */
    /* A keyed write mapped here as its primary runs only while this node
     * still is (cl_repl_primary_only): the primary may move in between. */
    int mapped = c->srv->opt.repl && c->srv->opt.cluster && (k || bt.p);
    if (c->srv->opt.repl)
        cl_repl_begin();
    if (mapped)
        cl_repl_primary_only(1);
    size_t out_at = out->len;
    switch (op) {
    case 1000:      /* GET */
        if ((rc = pr_val_begin(out, &pos)) == 0 &&
            (rc = st_get(sc, o, k, kl, out, &flag)) == 0) {
            c->pf_vlen = (uint32_t)(out->len - pos);
            rc = pr_val_end(c, out, pos, flag);
        }
        break;
    case 1001:      /* PUT */
        c->pf_vlen = (uint32_t)vl;
        rc = st_put(sc, o, k, kl, v, vl);
        break;
    case 1002:      /* PUT_IF_ABSENT -> bool stored */
        if ((rc = st_put_if_absent(sc, o, k, kl, v, vl, &flag)) == 0)
            rc = pr_put_bool(out, flag);
        break;
    case 1003: {    /* GET_ALL -> int m, m x (key, value) */
        emit_ctx ec = { c, out, 0 };
        size_t cnt = out->len;
        rc = em_buf_put_le32(out, 0);
        while (!rc && bt.left && (rc = pr_batch_next(c, &bt, &n)) == 0)
            rc = st_get_all(sc, o, c->ks, n, emit_kv, &ec);
        if (!rc)
            em_st32(out->p + cnt, (uint32_t)ec.count);
        break;
    }
    case 1004:      /* PUT_ALL */
        while (!rc && bt.left && (rc = pr_batch_next(c, &bt, &n)) == 0)
            rc = st_put_all(sc, o, c->ks, c->vs, n);
        break;
    case 1005:      /* GET_AND_PUT */
        if ((rc = pr_val_begin(out, &pos)) == 0 &&
            (rc = st_get_and_put(sc, o, k, kl, v, vl, out, &flag)) == 0)
            rc = pr_val_end(c, out, pos, flag);
        break;
    case 1006:      /* GET_AND_REPLACE */
        if ((rc = pr_val_begin(out, &pos)) == 0 &&
            (rc = st_get_and_replace(sc, o, k, kl, v, vl, out, &flag)) == 0)
            rc = pr_val_end(c, out, pos, flag);
        break;
    case 1007:      /* GET_AND_REMOVE */
        if ((rc = pr_val_begin(out, &pos)) == 0 &&
            (rc = st_get_and_remove(sc, o, k, kl, out, &flag)) == 0)
            rc = pr_val_end(c, out, pos, flag);
        break;
    case 1008:      /* GET_AND_PUT_IF_ABSENT */
        if ((rc = pr_val_begin(out, &pos)) == 0 &&
            (rc = st_get_and_put_if_absent(sc, o, k, kl, v, vl, out, &flag)) == 0)
            rc = pr_val_end(c, out, pos, flag);
        break;
    case 1009:      /* REPLACE -> bool */
        if ((rc = st_replace(sc, o, k, kl, v, vl, &flag)) == 0)
            rc = pr_put_bool(out, flag);
        break;
    case 1010:      /* REPLACE_IF_EQUALS -> bool */
        if ((rc = st_replace_if_equals(sc, o, k, kl, e, el, v, vl, &flag)) == 0)
            rc = pr_put_bool(out, flag);
        break;
    case 1011:      /* CONTAINS_KEY -> bool */
        if ((rc = st_contains(sc, o, k, kl, &flag)) == 0)
            rc = pr_put_bool(out, flag);
        break;
    case 1012:      /* CONTAINS_KEYS -> bool (all present) */
        flag = 1;
        while (!rc && flag && bt.left && (rc = pr_batch_next(c, &bt, &n)) == 0)
            rc = st_contains_all(sc, o, c->ks, n, &flag);
        if (!rc)
            rc = pr_put_bool(out, flag);
        break;
    case 1013:      /* CLEAR */
    case 1019:      /* REMOVE_ALL: same as CLEAR without listeners or stores */
        rc = st_clear(sc);
        break;
    case 1014:      /* CLEAR_KEY */
        rc = st_remove(sc, o, k, kl, &flag);
        break;
    case 1015:      /* CLEAR_KEYS */
    case 1018:      /* REMOVE_KEYS */
        while (!rc && bt.left && (rc = pr_batch_next(c, &bt, &n)) == 0)
            rc = st_remove_keys(sc, o, c->ks, n);
        break;
    case 1016:      /* REMOVE_KEY -> bool */
        if ((rc = st_remove(sc, o, k, kl, &flag)) == 0)
            rc = pr_put_bool(out, flag);
        break;
    case 1017:      /* REMOVE_IF_EQUALS -> bool */
        if ((rc = st_remove_if_equals(sc, o, k, kl, e, el, &flag)) == 0)
            rc = pr_put_bool(out, flag);
        break;
    case 1020: {    /* GET_SIZE -> long */
        int64_t size = 0;
        /* No peek mode: Ignite counts primary copies across the cluster. */
        if (!flag && c->srv->opt.cluster)
            flag = 1 << ST_PEEK_PRIMARY;
        if ((rc = st_size(sc, flag, &size)) == 0)
            rc = em_buf_put_le64(out, (uint64_t)(size + c->fanout_sum));
        break;
    }
    case 1021: {    /* LOCAL_PEEK: flag holds the peek modes */
        int found = 0;
        if ((rc = pr_val_begin(out, &pos)) == 0 &&
            (rc = st_local_peek(sc, o, flag, k, kl, out, &found)) == 0)
            rc = pr_val_end(c, out, pos, found);
        break;
    }
    default:
        if (mapped)
            cl_repl_primary_only(0);
        return pr_fail(c, PR_ST_INVALID_OP, "Invalid request op code: %d", op);
    }
    if (mapped)
        cl_repl_primary_only(0);
    if (mapped && rc == EM_STALE) {
        /* The key's primary moved after the request was mapped here: the
         * write was refused before it applied (a batch: its keys before
         * it did apply).  Forwarded, the sender maps it again; from a
         * client, this node does, once its topology names the new
         * primary - any single-key op (nothing ran), an idempotent batch.
         * What a batch streamed leaves with the next send; its error or
         * its second run answers it, not its acks. */
        cl_repl_begin();
        out->len = out_at;
        int done = 0;
        rc = k || pr_cluster_idempotent(op) ? map_again(c, op, sc, k, kl, &bt, r->p + r->pos, out, &done)
                                           : 0;
        return done || rc ? rc : pr_fail(c, PR_ST_FAILED, "%s", PR_REPL_MOVED_MSG);
    }
    if (c->srv->opt.repl) {
        int wrc = pr_cache_repl_finish(c, (uint16_t)op);
        if (!rc && wrc == EM_TIMEOUT)
            return pr_fail_repl_timeout(c);
        if (!rc && wrc == EM_STALE && (k || bt.p) && pr_cluster_idempotent(op)) {
            /* The partition's primary moved (an affinity switch after
             * rebalancing) while this ran here as its primary: an op that
             * may run twice runs again on the new primary, whose stream
             * then brings this node's copy in line.  Forwarded, the sender
             * maps it again; from a client, this node does. */
            out->len = out_at;
            int done = 0;
            rc = map_again(c, op, sc, k, kl, &bt, r->p + r->pos, out, &done);
            if (done || rc)
                return rc;
        }
        if (!rc && wrc == EM_STALE)
            return pr_fail(c, PR_ST_FAILED, "%s", pr_repl_msg(op, EM_STALE));
        if (!rc && wrc)
            rc = wrc;
    }
    return rc ? pr_st_err(c, &h, rc) : 0;
}

/* ---- scan queries and cursors ------------------------------------------ */

static pr_cursor *cursor_find(pr_conn *c, int64_t id, uint32_t *idx)
{
    for (uint32_t i = 0; i < c->ncur; i++)
        if (c->cur[i].id == id) {
            *idx = i;
            return &c->cur[i];
        }
    return NULL;
}

static void cursor_drop(pr_conn *c, uint32_t idx)
{
    st_scan_close(c->cur[idx].sc);
    c->cur[idx] = c->cur[--c->ncur];
}

void pr_cursors_close(pr_conn *c)
{
    while (c->ncur)
        cursor_drop(c, c->ncur - 1);
}

/* scan_page appends `int count, rows, bool more`; returns more in *more. */
static int scan_page(pr_conn *c, st_scan *sc, uint32_t page, em_buf *out, int *more)
{
    emit_ctx ec = { c, out, 0 };
    size_t cnt = out->len;
    int rc = em_buf_put_le32(out, 0);
    if (!rc)
        rc = st_scan_next_page(sc, page, emit_kv, &ec, more);
    if (rc)
        return rc;
    em_st32(out->p + cnt, (uint32_t)ec.count);
    return pr_put_bool(out, *more);
}

int pr_op_scan(pr_conn *c, pr_rd *r, em_buf *out)
{
    pr_cache_hdr h;
    int rc = pr_cache_header(c, r, &h);
    if (rc)
        return rc;
    const uint8_t *f;
    size_t fl;
    if ((rc = pr_rd_obj(c, r, &f, &fl)) != 0)
        return pr_fail(c, PR_ST_FAILED, "Invalid scan filter: %s", em_strerror(rc));
    if (f[0] != BIN_NULL)
        return pr_fail(c, PR_ST_FAILED, "Scan query filters are not supported by ember yet");
    int32_t page, part;
    uint8_t local;
    if (pr_rd_i32(r, &page) || pr_rd_i32(r, &part) || pr_rd_u8(r, &local))
        return pr_bad_request(c, EM_TRUNCATED);
    if (page <= 0)
        page = 1024;                /* Ignite's default page size */
    int cluster;
    if ((rc = pr_cluster_scan_mode(c, local, &cluster)) != 0)
        return rc;
    uint32_t maxc = c->srv->opt.max_cursors;
    if (maxc && c->ncur >= maxc)
        return pr_fail(c, PR_ST_TOO_MANY_CURSORS,
                       "Too many open cursors (limit %u per connection)", maxc);
    if (c->ncur == c->capcur) {
        uint32_t cap = c->capcur ? c->capcur * 2 : 8;
        pr_cursor *nc = em_realloc(c->cur, cap * sizeof *nc);
        if (!nc)
            return EM_NOMEM;
        c->cur = nc;
        c->capcur = cap;
    }
    st_scan *sc;
    rc = cluster ? st_scan_open_via(h.cache, part < 0 ? -1 : part, pr_cluster_scan_fetch, c, &sc)
                 : st_scan_open(h.cache, part < 0 ? -1 : part, &sc);
    if (rc)
        return pr_st_err(c, &h, rc);
    int64_t id = atomic_fetch_add(&c->srv->next_cursor, 1);
    int more = 0;
    rc = em_buf_put_le64(out, (uint64_t)id);
    if (!rc)
        rc = scan_page(c, sc, (uint32_t)page, out, &more);
    if (rc || !more) {
        st_scan_close(sc);          /* the last page was sent: free it now */
        return rc > 0 ? rc : rc ? pr_st_err(c, &h, rc) : 0;     /* > 0: a member's answer */
    }
    c->cur[c->ncur++] = (pr_cursor){ id, sc, (uint32_t)page };
    return 0;
}

int pr_op_scan_page(pr_conn *c, pr_rd *r, em_buf *out)
{
    int64_t id;
    if (pr_rd_i64(r, &id))
        return pr_bad_request(c, EM_TRUNCATED);
    uint32_t idx;
    pr_cursor *cu = cursor_find(c, id, &idx);
    if (!cu)
        return pr_fail(c, PR_ST_RESOURCE_NOT_FOUND, "Failed to find resource with id: %lld",
                       (long long)id);
    if (pr_state(c) == PR_STATE_INACTIVE)
        return pr_refuse_inactive(c);
    int more = 0;
    int rc = scan_page(c, cu->sc, cu->page, out, &more);
    if (rc || !more)
        cursor_drop(c, idx);
    if (rc == EM_NOCACHE)
        return pr_fail(c, PR_ST_CACHE_NOT_FOUND, "Cache was destroyed during the scan");
    return rc == EM_NOMEM || rc >= 0 ? rc : pr_fail(c, PR_ST_FAILED, "Scan failed: %s", em_strerror(rc));
}

int pr_op_resource_close(pr_conn *c, pr_rd *r, em_buf *out)
{
    (void)out;
    int64_t id;
    if (pr_rd_i64(r, &id))
        return pr_bad_request(c, EM_TRUNCATED);
    uint32_t idx;
    if (!cursor_find(c, id, &idx))
        return pr_fail(c, PR_ST_RESOURCE_NOT_FOUND, "Failed to find resource with id: %lld",
                       (long long)id);
    cursor_drop(c, idx);
    return 0;
}
