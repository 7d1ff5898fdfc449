/* proto_txr.c - resolving a transaction's parts and backup copies
 * without the node that should have told them (the protocol is outlined in
 * proto_txc.c and proto_txp.c): what this node knows of a transaction
 * (TXC_STATE), the rule that decides without a coordinator, recovery of a
 * prepared part whose coordinator left or of a backup copy whose primary
 * left (TXC_RECOVER, run on a forwarding worker), and the sweep that finds
 * them and queues that work. */
#include "proto/proto_txp.h"

#include <inttypes.h>
#include <string.h>

#include "cluster/cl_repl.h"
#include "util/clock.h"
#include "util/log.h"
#include "util/mem.h"

/* ---- what this node knows (STATE) ----------------------------------------- */

typedef struct known { cl_meta_uuid who; uint8_t st; } known;
#define KNOWN_MAX 128               /* entries of one STATE answer */

/* knowledge appends what this node knows of (coord, seq): its own part's
 * state (or outcome); for each copy it holds, its primary's PREPARED and
 * a HOLDS for each member that primary sent a copy to; and the outcome of
 * each copy it held and resolved, under its primary. */
static int knowledge(pr_server *s, cl_meta_uuid coord, uint64_t seq, known *k, uint32_t cap)
{
    struct pr_txbs *x = s->txbs;
    uint32_t n = 0;
    cl_meta_uuid self = cl_node_id(s->opt.cluster), none = { 0, 0 };
    pthread_mutex_lock(&x->mu);
    txb *b = pr_txp_find(x, coord, seq);
    uint8_t st = b ? b->state : pr_txp_ring_get(x, coord, seq);
    if (st && n < cap)
        k[n++] = (known){ self, st };
    for (uint32_t i = 0; i < x->ns && n < cap; i++) {
        const txs *h = x->s[i];
        if (h->seq != seq || !cl_meta_uuid_eq(h->coord, coord))
            continue;
        k[n++] = (known){ h->primary, TXS_PREPARED };
        for (uint32_t j = 0; j < h->nholders && n < cap; j++)
            k[n++] = (known){ h->holders[j], TXS_HOLDS };
    }
    for (uint32_t i = 0; i < TXP_RING && n < cap; i++) {
        const txo *o = &x->ring[i];
        if (o->st && o->seq == seq && cl_meta_uuid_eq(o->coord, coord) &&
            !cl_meta_uuid_eq(o->prim, none))
            k[n++] = (known){ o->prim, o->st };
    }
    pthread_mutex_unlock(&x->mu);
    return (int)n;
}

int pr_txp_answer_state(pr_conn *c, cl_meta_uuid coord, uint64_t seq, em_buf *out)
{
    known k[KNOWN_MAX];
    int n = knowledge(c->srv, coord, seq, k, KNOWN_MAX);
    int rc = em_buf_put_le32(out, (uint32_t)n);
    for (int i = 0; !rc && i < n; i++)
        if ((rc = em_buf_put_le64(out, k[i].who.msb)) == 0 &&
            (rc = em_buf_put_le64(out, k[i].who.lsb)) == 0)
            rc = em_buf_put_u8(out, k[i].st);
    return rc;
}

/* member_bit: m's bit among the members mem[0..nm) (at most 64), or 0. */
static uint64_t member_bit(const cl_meta_uuid *mem, uint32_t nm, cl_meta_uuid who)
{
    for (uint32_t i = 0; i < nm; i++)
        if (cl_meta_uuid_eq(mem[i], who))
            return 1ull << i;
    return 0;
}

/* decide_by_members: the rule without a coordinator (proto_txp.c's
 * comment): TXS_COMMITTED, TXS_ROLLED_BACK, or TXS_UNKNOWN (ask again
 * later).  A part counts as prepared when it says so itself, or when every
 * member its copies went to (as each copy lists them) holds one: a primary
 * that died between two copies finished no prepare, and the one copy taken
 * proves nothing of the others. */
static int decide_by_members(pr_conn *c, cl_meta_uuid coord, uint64_t seq,
                             const cl_meta_uuid *parts, uint32_t np)
{
    cl_node *n = c->srv->opt.cluster;
    uint8_t own[TXC_MAX_PARTS] = { 0 };
    uint64_t held[TXC_MAX_PARTS] = { 0 }, has[TXC_MAX_PARTS] = { 0 }, silent = 0;
    int commit = 0, abort_ = 0;
    known k[KNOWN_MAX];
    em_buf env = EM_BUF_INIT, resp = EM_BUF_INIT;
    cl_topo *t = cl_node_topo_acquire(n);
    uint32_t nm = t->n < 64 ? t->n : 64;
    cl_meta_uuid mem[64];
    for (uint32_t i = 0; i < nm; i++)
        mem[i] = t->m[i].id;
    int self = t->self;
    cl_node_topo_release(t);
    if (self < 0)
        return TXS_UNKNOWN;         /* failed itself: its word counts for nothing now */
    for (int m = 0; m < (int)nm; m++) {
        int nk;
        if (m == self)
            nk = knowledge(c->srv, coord, seq, k, KNOWN_MAX);
        else {
            const uint8_t *pay;
            size_t pn;
            if (pr_txc_env(&env, NULL, coord, seq, TXC_STATE, NULL) ||
                pr_txp_call(c, mem[m], &env, &resp, &pay, &pn) || pn < 4) {
                silent |= 1ull << m;
                continue;
            }
            uint32_t cnt = em_ld32(pay);
            nk = 0;
            for (uint32_t i = 0; i < cnt && i < KNOWN_MAX && pn >= 4 + 17 * (size_t)(i + 1); i++) {
                const uint8_t *e = pay + 4 + 17 * i;
                k[nk++] = (known){ { em_ld64(e), em_ld64(e + 8) }, e[16] };
            }
        }
        int copy_of = -1;           /* the part whose copy the HOLDS that follow list */
        for (int i = 0; i < nk; i++) {
            if (k[i].st == TXS_COMMITTED)
                commit = 1;
            if (k[i].st == TXS_HOLDS) {
                if (copy_of >= 0)
                    held[copy_of] |= member_bit(mem, nm, k[i].who);
                continue;
            }
            copy_of = -1;
            for (uint32_t p = 0; p < np; p++)
                if (cl_meta_uuid_eq(parts[p], k[i].who)) {
                    if (k[i].st == TXS_PREPARED && cl_meta_uuid_eq(k[i].who, mem[m]))
                        own[p] = 1;
                    else if (k[i].st == TXS_PREPARED) {
                        has[p] |= 1ull << m;
                        copy_of = (int)p;
                    } else if (k[i].st == TXS_ACTIVE || k[i].st == TXS_ROLLED_BACK)
                        abort_ = 1;
                }
        }
    }
    em_buf_free(&env);
    em_buf_free(&resp);
    if (commit)
        return TXS_COMMITTED;
    if (abort_)
        return TXS_ROLLED_BACK;
    int all = 1;
    for (uint32_t p = 0; p < np; p++)
        all &= own[p] || (has[p] && !(held[p] & ~has[p]));
    if (all)
        return TXS_COMMITTED;
    return silent ? TXS_UNKNOWN : TXS_ROLLED_BACK;
}

/* ---- recovery ------------------------------------------------------------------ */

/* shadow_owner: who is the primary of a write's partition now: 1 this
 * node, 0 another live member, -1 nobody yet (the failed primary is still
 * named until the exchange commits new owners). */
static int shadow_owner(pr_conn *c, cl_topo *t, const st_update *u)
{
    st_cache *sc = st_cache_find(c->srv->st, u->cache_id);
    if (!sc)
        return 0;                   /* destroyed: nothing to write */
    uint32_t idx[64];
    if (cl_repl_owners(t, st_cache_cfg(sc), u->cache_id, u->partition, idx, 64) < 1)
        return -1;
    if ((int)idx[0] == t->self)
        return 1;
    return t->m[idx[0]].state == CL_META_ALIVE ? 0 : -1;
}

/* pr_txp_apply_writes writes the nw writes at q (SHADOW's list) of the
 * partitions this node is the primary of now, as one transaction (streamed
 * to their other owners); the rest reach their new primaries' own shadows.
 * A partition without a live primary yet: strict, EM_AGAIN and nothing
 * written (asked again); else its writes are left out.  *napplied (may be
 * NULL): the writes applied. */
int pr_txp_apply_writes(pr_conn *c, const uint8_t *q, size_t ql, uint32_t nw, int strict,
                        uint32_t *napplied)
{
    st_update *ups = em_malloc((nw ? nw : 1) * sizeof *ups);
    if (!ups)
        return EM_NOMEM;
    uint32_t n = 0;
    cl_topo *t = cl_node_topo_acquire(c->srv->opt.cluster);
    int rc = 0;
    for (uint32_t i = 0; !rc && i < nw; i++) {
        st_update u;
        if ((rc = pr_txp_get_write(&q, &ql, &u)) != 0)
            break;
        int o = shadow_owner(c, t, &u);
        if (o < 0 && strict)
            rc = EM_AGAIN;
        else if (o > 0)
            ups[n++] = u;
    }
    cl_node_topo_release(t);
    cl_repl *r = c->srv->opt.repl;
    if (!rc && n) {
        if (r)
            cl_repl_begin();
        rc = st_tx_commit(c->srv->st, ups, n);
        if (r)
            (void)cl_repl_finish(r);
    }
    if (napplied)
        *napplied = rc ? 0 : n;
    em_free(ups);
    return rc;
}

/* still_open: an open part its coordinator has not called for a while -
 * a call lost in a queue may have created it after the coordinator gave it
 * up; rolled back unless the coordinator still has it open. */
static int still_open(pr_conn *c, cl_meta_uuid coord, uint64_t seq)
{
    struct pr_txbs *x = c->srv->txbs;
    pthread_mutex_lock(&x->mu);
    txb *b = pr_txp_find(x, coord, seq);
    if (!b || b->busy || b->state != TXS_ACTIVE) {
        if (b)
            b->recovering = 0;
        pthread_mutex_unlock(&x->mu);
        return 0;
    }
    b->busy = 1;
    pthread_mutex_unlock(&x->mu);
    em_buf env = EM_BUF_INIT, resp = EM_BUF_INIT;
    const uint8_t *pay;
    size_t pn;
    int open = 1;
    if (!pr_txc_env(&env, NULL, coord, seq, TXC_ALIVE, NULL) &&
        !pr_txp_call(c, coord, &env, &resp, &pay, &pn) && pn == 1)
        open = pay[0];
    em_buf_free(&env);
    em_buf_free(&resp);
    pthread_mutex_lock(&x->mu);
    b->busy = b->recovering = 0;
    b->last_ms = em_now_ms();
    if (!open)
        pr_txp_detach(x, b, TXS_ROLLED_BACK);
    pthread_mutex_unlock(&x->mu);
    if (!open)
        pr_txp_part_close(c, b, TXS_ROLLED_BACK);
    return 0;
}

int pr_txp_recover(pr_conn *c, cl_meta_uuid coord, uint64_t seq, int shadow,
                   const uint8_t *p, size_t len)
{
    struct pr_txbs *x = c->srv->txbs;
    cl_node *n = c->srv->opt.cluster;
    if (shadow == 2)
        return still_open(c, coord, seq);
    cl_meta_uuid prim = { 0, 0 };
    if (shadow) {
        if (len < 16)
            return pr_bad_request(c, EM_TRUNCATED);
        prim = (cl_meta_uuid){ em_ld64(p), em_ld64(p + 8) };
    }
    pthread_mutex_lock(&x->mu);
    txb *b = shadow ? NULL : pr_txp_find(x, coord, seq);
    txs *h = shadow ? pr_txp_find_shadow(x, coord, seq, prim) : NULL;
    if ((!b && !h) || (b && (b->busy || b->state != TXS_PREPARED)) || (h && h->busy)) {
        if (b)
            b->recovering = 0;
        if (h)
            h->recovering = 0;
        pthread_mutex_unlock(&x->mu);
        return 0;
    }
    if (b)
        b->busy = 1;
    else
        h->busy = 1;
    uint32_t np = b ? b->nparts : h->nparts;
    cl_meta_uuid ps[TXC_MAX_PARTS];
    memcpy(ps, b ? b->parts : h->parts, np * sizeof *ps);
    pthread_mutex_unlock(&x->mu);

    /* The coordinator alive (a shadow whose primary failed): its decision. */
    int d = TXS_UNKNOWN;
    cl_topo *t = cl_node_topo_acquire(n);
    int coord_up = pr_txc_is_member(t, coord);
    cl_node_topo_release(t);
    if (coord_up) {
        em_buf env = EM_BUF_INIT, resp = EM_BUF_INIT;
        const uint8_t *pay;
        size_t pn;
        if (!pr_txc_env(&env, NULL, coord, seq, TXC_DECISION, NULL) &&
            !pr_txp_call(c, coord, &env, &resp, &pay, &pn) && pn == 1)
            d = pay[0];
        else
            d = -1;                 /* unheard: ask again later */
        em_buf_free(&env);
        em_buf_free(&resp);
    }
    if (d == TXS_UNKNOWN)
        d = decide_by_members(c, coord, seq, ps, np);
    else if (d == TXS_COMMITTED && h)
        /* A part that commits in one phase is decided before it prepares:
         * its copies may be incomplete (its primary died between two).
         * Its own evidence decides then - and a part that finished
         * preparing has every copy, so this never undoes a decision the
         * part acted on (it applies nothing before its last copy). */
        d = decide_by_members(c, coord, seq, &prim, 1);
    uint8_t fin = 0;
    const char *how = "";
    if (d == TXS_COMMITTED) {
        int applied = 1, arc = 0;
        if (b)
            (void)pr_txp_commit_part(c, b, &applied);
        else
            applied = (arc = pr_txp_apply_writes(c, h->data.p, h->data.len, h->nw, 1, NULL)) == 0;
        fin = applied ? TXS_COMMITTED : arc == EM_AGAIN ? 0 : TXS_ROLLED_BACK;
        how = applied ? "committed" : "failed to commit";
    } else if (d == TXS_ROLLED_BACK) {
        fin = TXS_ROLLED_BACK;
        how = "rolled back";
    }
    if (fin)
        atomic_fetch_add_explicit(fin == TXS_COMMITTED ? &c->srv->txc_rec_commit
                                                       : &c->srv->txc_rec_rollback, 1,
                                  memory_order_relaxed);
    if (fin)
        EM_WARN("transaction %016" PRIx64 "%016" PRIx64 ":%" PRIu64 ": its %s left; %s its "
                "%s here", coord.msb, coord.lsb, seq, b ? "coordinator" : "primary", how,
                b ? "part" : "backup copy");
    pthread_mutex_lock(&x->mu);
    if (b) {
        b->busy = b->recovering = 0;
        if (fin)
            pr_txp_detach(x, b, fin);
    } else {
        h->busy = h->recovering = 0;
        if (fin)
            pr_txp_detach_shadow(x, h, fin);
    }
    pthread_mutex_unlock(&x->mu);
    if (fin && b)
        pr_txp_part_close(c, b, fin);
    if (fin && h)
        pr_txp_txs_free(h);
    return 0;
}

void pr_txc_sweep(pr_server *s, void (*later)(void *arg, const uint8_t *p, size_t n),
                  void *arg)
{
    if (!atomic_load_explicit(&s->cluster_ready, memory_order_acquire))
        return;
    struct pr_txbs *x = s->txbs;
    uint64_t now = em_now_ms();
    pthread_mutex_lock(&x->mu);
    if ((!x->nb && !x->ns) || now - x->swept_ms < TXP_SWEEP_MS) {
        pthread_mutex_unlock(&x->mu);
        return;
    }
    x->swept_ms = now;
    cl_topo *t = cl_node_topo_acquire(s->opt.cluster);
    if (t->self < 0) {
        cl_node_topo_release(t);
        pthread_mutex_unlock(&x->mu);
        return;
    }
    uint8_t env[2 + 8 + TXC_HDR + 16] = { 0 };
    em_st16(env, PR_OP_TX_CALL);
    env[34] = TXC_RECOVER;
    for (uint32_t i = 0; i < x->nb;) {
        txb *b = x->b[i];
        if (b->busy || b->recovering) {
            i++;
            continue;
        }
        if (pr_txc_is_member(t, b->coord)) {
            if (b->state == TXS_ACTIVE && now - b->last_ms > TXP_IDLE_MS) {
                em_st64(env + 10, b->coord.msb);
                em_st64(env + 18, b->coord.lsb);
                em_st64(env + 26, b->seq);
                env[35] = 2;
                b->recovering = 1;
                later(arg, env, 2 + 8 + TXC_HDR);
            }
            i++;
            continue;
        }
        if (b->state != TXS_PREPARED) {
            /* unprepared: nothing of it may commit now (no shadow, no
             * holder); it frees here without waiting */
            pr_txp_detach(x, b, TXS_ROLLED_BACK);
            pr_txp_txb_free(b);
            continue;
        }
        em_st64(env + 10, b->coord.msb);
        em_st64(env + 18, b->coord.lsb);
        em_st64(env + 26, b->seq);
        env[35] = 0;
        b->recovering = 1;
        later(arg, env, 2 + 8 + TXC_HDR);
        i++;
    }
    for (uint32_t i = 0; i < x->ns; i++) {
        txs *h = x->s[i];
        if (h->busy || h->recovering || pr_txc_is_member(t, h->primary))
            continue;
        em_st64(env + 10, h->coord.msb);
        em_st64(env + 18, h->coord.lsb);
        em_st64(env + 26, h->seq);
        env[35] = 1;
        em_st64(env + 10 + TXC_HDR, h->primary.msb);
        em_st64(env + 18 + TXC_HDR, h->primary.lsb);
        h->recovering = 1;
        later(arg, env, sizeof env);
    }
    cl_node_topo_release(t);
    pthread_mutex_unlock(&x->mu);
}
