/* proto_txp.c - a transaction's parts on their primaries, and the copies
 * of prepared parts their backups keep (PR_OP_TX_CALL; the coordinator's
 * half and the protocol's outline are in proto_txc.c, recovery without a
 * failed primary or coordinator in proto_txr.c, the shared tables in
 * proto_txp.h).
 *
 * A part is a cl_tx on the primary of the keys it holds, created by the
 * first op that reaches it.  Prepared (PREPARE, or COMMIT1 of a part whose
 * writes span several partitions), it sends its writes to every backup
 * owner and MOVING copy of their partitions (SHADOW) before it answers:
 * each keeps them as a *shadow*, with the keys' entry locks taken on its
 * own node.
 * Committed, the part applies its writes (streamed to the backups like any
 * write, FULL_SYNC acks awaited), hands those of partitions whose primary
 * moved since it prepared to the new primary (proto_txh.c), tells the
 * shadows (FINISH) and only then releases its locks; so no later write of
 * those keys can reach a backup while it still holds a shadow of them.
 *
 * A primary failing with a prepared part leaves its shadows: each backup
 * that holds one asks the coordinator for its decision (DECISION; an
 * undecided transaction is rolled back then), or, the coordinator gone,
 * every member what it knows (STATE); and applies the writes of the
 * partitions it is the primary of now (streamed to the rest), or drops
 * them.  A coordinator failing leaves its prepared parts: they decide the
 * same way.  The rule without a coordinator: commit if any part committed,
 * or if every part is known prepared (by itself or by a shadow of it);
 * roll back if a part is known not prepared, or if no member knows of it;
 * ask again later while a member does not answer.  Each node remembers the
 * outcome of its last TXP_RING parts and shadows to answer such questions.
 *
 * What is not covered: a part and every copy of its shadow failing
 * together (more failures than the cache has backups); parts and shadows
 * live in memory only (a whole-cluster restart forgets prepared ones).
 */
#include "proto/proto_txp.h"

#include <inttypes.h>
#include <stdio.h>
#include <string.h>

#include "cluster/cl_repl.h"
#include "cluster/cl_tx.h"
#include "util/clock.h"
#include "util/log.h"
#include "util/mem.h"

int pr_txp_init(pr_server *s)
{
    if (s->txbs)
        return 0;
    struct pr_txbs *x = em_calloc(1, sizeof *x);
    if (!x)
        return EM_NOMEM;
    pthread_mutex_init(&x->mu, NULL);
    s->txbs = x;
    return 0;
}

void pr_txp_txb_free(txb *b)
{
    cl_tx_free(b->tx);              /* rolls back what is still open */
    em_free(b->parts);
    em_free(b->holders);
    em_free(b);
}

void pr_txp_txs_free(txs *h)
{
    if (!h)
        return;                     /* (a FINISH or HANDOFF for no shadow here) */
    cl_tx_free(h->locks);
    em_free(h->parts);
    em_free(h->holders);
    em_buf_free(&h->data);
    em_free(h);
}

void pr_txp_free(pr_server *s)
{
    struct pr_txbs *x = s->txbs;
    if (!x)
        return;
    for (uint32_t i = 0; i < x->nb; i++)
        pr_txp_txb_free(x->b[i]);
    for (uint32_t i = 0; i < x->ns; i++)
        pr_txp_txs_free(x->s[i]);
    for (uint32_t i = 0; i < x->nspare; i++)
        pr_txp_txb_free(x->spare[i]);
    em_free(x->b);
    em_free(x->s);
    pthread_mutex_destroy(&x->mu);
    em_free(x);
    s->txbs = NULL;
}

/* ---- the tables (x->mu held) --------------------------------------------- */

txb *pr_txp_find(struct pr_txbs *x, cl_meta_uuid coord, uint64_t seq)
{
    for (uint32_t i = 0; i < x->nb; i++)
        if (x->b[i]->seq == seq && cl_meta_uuid_eq(x->b[i]->coord, coord))
            return x->b[i];
    return NULL;
}

txs *pr_txp_find_shadow(struct pr_txbs *x, cl_meta_uuid coord, uint64_t seq, cl_meta_uuid prim)
{
    for (uint32_t i = 0; i < x->ns; i++)
        if (x->s[i]->seq == seq && cl_meta_uuid_eq(x->s[i]->coord, coord) &&
            cl_meta_uuid_eq(x->s[i]->primary, prim))
            return x->s[i];
    return NULL;
}

static const cl_meta_uuid own_part = { 0, 0 };

/* ring_find: the remembered outcome of this node's part of (coord, seq),
 * or NULL (a copy's outcome is not the part's: a part missing here may
 * not answer a PREPARE with the COMMITTED of a copy it held). */
static const txo *ring_find(const struct pr_txbs *x, cl_meta_uuid coord, uint64_t seq)
{
    for (uint32_t i = 0; i < TXP_RING; i++)
        if (x->ring[i].st && x->ring[i].seq == seq && cl_meta_uuid_eq(x->ring[i].coord, coord) &&
            cl_meta_uuid_eq(x->ring[i].prim, own_part))
            return &x->ring[i];
    return NULL;
}

uint8_t pr_txp_ring_get(const struct pr_txbs *x, cl_meta_uuid coord, uint64_t seq)
{
    const txo *o = ring_find(x, coord, seq);
    return o ? o->st : TXS_UNKNOWN;
}

int pr_txp_ring_short(const struct pr_txbs *x, cl_meta_uuid coord, uint64_t seq)
{
    const txo *o = ring_find(x, coord, seq);
    return o ? o->shrt : 0;
}

static void ring_put(struct pr_txbs *x, cl_meta_uuid coord, cl_meta_uuid prim, uint64_t seq,
                     uint8_t st, uint8_t shrt)
{
    x->ring[x->ring_at] = (txo){ coord, prim, seq, st, shrt };
    x->ring_at = (x->ring_at + 1) % TXP_RING;
}

/* detach removes b from the table and remembers its outcome; the caller
 * then closes it (part_close) outside the lock. */
void pr_txp_detach(struct pr_txbs *x, txb *b, uint8_t outcome)
{
    for (uint32_t i = 0; i < x->nb; i++)
        if (x->b[i] == b) {
            x->b[i] = x->b[--x->nb];
            break;
        }
    ring_put(x, b->coord, own_part, b->seq, outcome, b->shrt);
}

void pr_txp_detach_shadow(struct pr_txbs *x, txs *h, uint8_t outcome)
{
    for (uint32_t i = 0; i < x->ns; i++)
        if (x->s[i] == h) {
            x->s[i] = x->s[--x->ns];
            break;
        }
    ring_put(x, h->coord, h->primary, h->seq, outcome, 0);
}

static int grow(void ***a, uint32_t *cap, uint32_t n)
{
    if (n < *cap)
        return 0;
    uint32_t c = *cap ? *cap * 2 : 16;
    void **na = em_realloc(*a, c * sizeof *na);
    if (!na)
        return EM_NOMEM;
    *a = na;
    *cap = c;
    return 0;
}

static int add(struct pr_txbs *x, pr_server *s, cl_meta_uuid coord, uint64_t seq, int conc,
               int iso, int64_t timeout, txb **out)
{
    if (x->nb + x->ns >= TXP_MAX)
        return EM_LIMIT;
    if (grow((void ***)&x->b, &x->capb, x->nb))
        return EM_NOMEM;
    txb *b;
    int rc;
    if (x->nspare) {
        /* an ended part's memory: its cl_tx, its id lists */
        b = x->spare[--x->nspare];
        if ((rc = cl_tx_restart(b->tx, conc, iso, timeout)) != 0) {
            x->spare[x->nspare++] = b;
            return rc;
        }
        b->busy = b->doomed = b->recovering = b->shrt = 0;
        b->nparts = b->nholders = 0;
    } else {
        if (!(b = em_calloc(1, sizeof *b)))
            return EM_NOMEM;
        if ((rc = cl_tx_begin(s->txm, conc, iso, timeout, &b->tx)) != 0) {
            em_free(b);
            return rc;
        }
    }
    b->coord = coord;
    b->seq = seq;
    b->state = TXS_ACTIVE;
    b->last_ms = em_now_ms();
    x->b[x->nb++] = b;
    *out = b;
    return 0;
}

/* ---- calls ------------------------------------------------------------------ */

/* call asks member `to` (the request in env): 0 with the reply's payload in
 * *pay, or nonzero (no answer, or an error answer). */
int pr_txc_ask(pr_conn *c, cl_meta_uuid to, const em_buf *env, em_buf *resp,
               const uint8_t **pay, size_t *pn, uint32_t ms)
{
    em_buf_reset(resp);
    int rc;
    if (cl_meta_uuid_eq(to, cl_node_id(c->srv->opt.cluster))) {
        /* this node (a coordinator asked about its own transaction): the
         * questions that may reach here never wait (pr_txc_inline) */
        if (!pr_txc_inline(env->p, env->len))
            return EM_INVAL;
        pr_conn *sub = pr_fwd_conn_new(c->srv);
        if (!sub)
            return EM_NOMEM;
        rc = pr_exec_request(sub, env->p, env->len, resp);
        pr_conn_free(sub);
    } else {
        rc = cl_node_call(c->srv->opt.cluster, to, env->p, env->len, resp, ms);
    }
    int32_t status;
    const uint8_t *m;
    size_t ml;
    if (!rc && (pr_reply_parse(c, resp->p, resp->len, &status, &m, &ml, pay, pn) || status))
        rc = EM_PROTO;
    return rc;
}

int pr_txp_call(pr_conn *c, cl_meta_uuid to, const em_buf *env, em_buf *resp,
                const uint8_t **pay, size_t *pn)
{
    return pr_txc_ask(c, to, env, resp, pay, pn, TXC_CALL_MS);
}

static int put_uuids(em_buf *b, const cl_meta_uuid *u, uint32_t n)
{
    int rc = em_buf_put_le32(b, n);
    for (uint32_t i = 0; !rc && i < n; i++)
        rc = pr_txc_put_id(b, u[i]);
    return rc;
}

/* ids_reserve: room for n ids in *a (capacity *cap), kept across reuse. */
static int ids_reserve(cl_meta_uuid **a, uint32_t *cap, uint32_t n)
{
    if (n <= *cap)
        return 0;
    uint32_t c = n < 4 ? 4 : n;
    cl_meta_uuid *na = em_realloc(*a, c * sizeof *na);
    if (!na)
        return EM_NOMEM;
    *a = na;
    *cap = c;
    return 0;
}

/* get_uuids reads u32 n and n ids (n <= TXC_MAX_PARTS) from p[0..len)
 * into *out (capacity *cap). */
static int get_uuids(const uint8_t **p, size_t *len, cl_meta_uuid **out, uint32_t *cap,
                     uint32_t *n)
{
    if (*len < 4)
        return EM_TRUNCATED;
    uint32_t k = em_ld32(*p);
    if (k > TXC_MAX_PARTS || *len - 4 < (size_t)k * 16)
        return EM_INVAL;
    if (ids_reserve(out, cap, k))
        return EM_NOMEM;
    for (uint32_t i = 0; i < k; i++)
        (*out)[i] = (cl_meta_uuid){ em_ld64(*p + 4 + 16 * i), em_ld64(*p + 12 + 16 * i) };
    *p += 4 + (size_t)k * 16;
    *len -= 4 + (size_t)k * 16;
    *n = k;
    return 0;
}

/* finish_shadows tells b's backups how it ended (FINISH), best effort: a
 * backup that does not hear it asks once this node has left. */
static void finish_shadows(pr_conn *c, txb *b, uint8_t outcome)
{
    if (!b->nholders)
        return;
    cl_node *n = c->srv->opt.cluster;
    em_buf env = EM_BUF_INIT, resp = EM_BUF_INIT;
    cl_meta_uuid self = cl_node_id(n);
    int rc = pr_txc_env(&env, NULL, b->coord, b->seq, TXC_FINISH, NULL);
    if (!rc && (rc = em_buf_put_le64(&env, self.msb)) == 0 &&
        (rc = em_buf_put_le64(&env, self.lsb)) == 0)
        rc = em_buf_put_u8(&env, outcome);
    for (uint32_t i = 0; !rc && i < b->nholders; i++) {
        const uint8_t *pay;
        size_t pn;
        (void)pr_txp_call(c, b->holders[i], &env, &resp, &pay, &pn);
    }
    em_buf_free(&env);
    em_buf_free(&resp);
    b->nholders = 0;
}

/* part_close: b, detached, ends: its shadows hear the outcome, its locks
 * go. */
void pr_txp_part_close(pr_conn *c, txb *b, uint8_t outcome)
{
    finish_shadows(c, b, outcome);
    cl_tx_rollback(b->tx);          /* what is still held goes now */
    struct pr_txbs *x = c->srv->txbs;
    pthread_mutex_lock(&x->mu);
    if (x->nspare < TXP_SPARE) {
        x->spare[x->nspare++] = b;
        b = NULL;
    }
    pthread_mutex_unlock(&x->mu);
    if (b)
        pr_txp_txb_free(b);
}

/* ---- shadows: sending ------------------------------------------------------- */

int pr_txp_put_write(em_buf *b, const st_update *u)
{
    int rc = em_buf_put_le32(b, (uint32_t)u->cache_id);
    if (!rc)
        rc = em_buf_put_le32(b, u->partition);
    if (!rc)
        rc = em_buf_put_u8(b, (uint8_t)u->kind);
    if (!rc)
        rc = em_buf_put_le64(b, (uint64_t)u->expire_at_ms);
    if (!rc)
        rc = em_buf_put_le32(b, u->klen);
    if (!rc)
        rc = em_buf_append(b, u->key, u->klen);
    if (!rc)
        rc = em_buf_put_le32(b, u->vlen);
    if (!rc && u->vlen)
        rc = em_buf_append(b, u->val, u->vlen);
    return rc;
}

/* get_write reads one write of a SHADOW (pointing into p): 0 or an error. */
int pr_txp_get_write(const uint8_t **p, size_t *len, st_update *u)
{
    const uint8_t *q = *p;
    size_t n = *len;
    if (n < 4 + 4 + 1 + 8 + 4)
        return EM_TRUNCATED;
    memset(u, 0, sizeof *u);
    u->cache_id = (int32_t)em_ld32(q);
    u->partition = em_ld32(q + 4);
    u->kind = q[8];
    u->expire_at_ms = (int64_t)em_ld64(q + 9);
    u->klen = em_ld32(q + 17);
    q += 21;
    n -= 21;
    if (u->klen > n || n - u->klen < 4)
        return EM_TRUNCATED;
    u->key = q;
    q += u->klen;
    n -= u->klen;
    u->vlen = em_ld32(q);
    q += 4;
    n -= 4;
    if (u->vlen > n || (u->kind != ST_UPD_PUT && u->kind != ST_UPD_REMOVE))
        return EM_INVAL;
    u->val = u->vlen ? q : NULL;
    *p = q + u->vlen;
    *len = n - u->vlen;
    return 0;
}

/* shadow_call sends member `to` a SHADOW of b's writes ups[i] with pick[i]
 * set, naming every member of hold[0..nh) that gets one (env, resp:
 * scratch), and records it among b's holders once taken: 0, or a status
 * (not taken).  The copies go out one at a time: a primary dying between
 * two leaves some taken and some not, and the list is how a copy's
 * recovery tells a part that finished preparing from one that did not
 * (proto_txr.c). */
static int shadow_call(pr_conn *c, txb *b, cl_meta_uuid to, const cl_meta_uuid *hold,
                       uint32_t nh, const st_update *ups, const uint8_t *pick, uint32_t nu,
                       em_buf *env, em_buf *resp)
{
    cl_meta_uuid self = cl_node_id(c->srv->opt.cluster);
    int rc = pr_txc_env(env, NULL, b->coord, b->seq, TXC_SHADOW, NULL);
    if (!rc && (rc = pr_txc_put_id(env, self)) == 0 &&
        (rc = put_uuids(env, b->parts, b->nparts)) == 0 && (rc = put_uuids(env, hold, nh)) == 0)
        rc = em_buf_put_le32(env, 0);
    if (rc)
        return rc;
    size_t cnt_at = env->len - 4;
    uint32_t cnt = 0;
    for (uint32_t i = 0; !rc && i < nu; i++)
        if (pick[i] && (rc = pr_txp_put_write(env, &ups[i])) == 0)
            cnt++;
    if (rc)
        return rc;
    em_st32(env->p + cnt_at, cnt);
    const uint8_t *pay;
    size_t pn;
    if (pr_txp_call(c, to, env, resp, &pay, &pn) != 0)
        return pr_fail(c, PR_ST_FAILED, "Transaction was rolled back: a backup of its keys "
                       "did not take its prepared state");
    /* recorded as each answers: a failure later drops those taken */
    if ((rc = ids_reserve(&b->holders, &b->capholders, b->nholders + 1)) == 0)
        b->holders[b->nholders++] = to;
    return rc;
}

/* copies: the members that keep a shadow of write u: its partition's
 * owners after the primary, and its MOVING copies with a link up (they
 * get the partition's stream too; one that becomes the primary before
 * the part commits holds the keys' locks from now, and the writes the
 * part hands it then: proto_txh.c). */
static uint32_t copies(pr_conn *c, cl_topo *t, const st_update *u, uint32_t *idx, uint32_t max)
{
    st_cache *sc = st_cache_find(c->srv->st, u->cache_id);
    if (!sc)
        return 0;
    const st_cache_config *cfg = st_cache_cfg(sc);
    uint32_t k = cl_repl_owners(t, cfg, u->cache_id, u->partition, idx, max);
    if (k < 1)
        return 0;
    uint32_t mv[64];
    uint32_t m = cl_topo_moving(t, u->cache_id, st_cache_parts(sc), u->partition, mv, 64);
    for (uint32_t i = 0; i < m && k < max; i++)
        if (cl_node_link_up(c->srv->opt.cluster, t->m[mv[i]].id))
            idx[k++] = mv[i];
    memmove(idx, idx + 1, (k - 1) * sizeof *idx);   /* the primary is not one */
    return k - 1;
}

/* send_shadows: b is prepared; every backup owner and MOVING copy of a
 * partition it writes gets those writes (SHADOW) and keeps them.  0, or a
 * status (b then rolls back: the members that took a shadow drop it). */
static int send_shadows(pr_conn *c, txb *b)
{
#ifdef EM_PLANT_NO_SHADOW
    /* Planted bug (tests/chaos/planted.sh): a prepared part's writes stay
     * on its primary only; one that fails before committing loses them
     * while the other parts commit. */
    (void)c;
    (void)b;
    return 0;
#endif
    const st_update *ups;
    uint32_t nu;
    int rc = cl_tx_updates(b->tx, &ups, &nu);
    if (rc || !nu)
        return rc;
    uint8_t small[64];
    uint8_t *pick = nu <= sizeof small ? small : em_malloc(nu);
    if (!pick)
        return EM_NOMEM;
    cl_topo *t = cl_node_topo_acquire(c->srv->opt.cluster);
    cl_meta_uuid hold[TXC_MAX_PARTS];
    uint32_t nh = 0;
    for (uint32_t i = 0; i < nu; i++) {
        uint32_t idx[64];
        uint32_t k = copies(c, t, &ups[i], idx, 64);
        for (uint32_t j = 0; j < k; j++) {
            uint32_t h = 0;
            while (h < nh && !cl_meta_uuid_eq(hold[h], t->m[idx[j]].id))
                h++;
            if (h == nh && nh < TXC_MAX_PARTS)
                hold[nh++] = t->m[idx[j]].id;
        }
    }
    em_buf env = EM_BUF_INIT, resp = EM_BUF_INIT;
    for (uint32_t h = 0; !rc && h < nh; h++) {
        for (uint32_t i = 0; i < nu; i++) {
            uint32_t idx[64];
            uint32_t k = copies(c, t, &ups[i], idx, 64);
            pick[i] = 0;
            for (uint32_t j = 0; j < k; j++)
                pick[i] |= cl_meta_uuid_eq(t->m[idx[j]].id, hold[h]);
        }
        rc = shadow_call(c, b, hold[h], hold, nh, ups, pick, nu, &env, &resp);
        if (!rc && h == 0 && nh > 1 && pr_txc_crash_armed(c->srv))
            pr_txc_crash_point(c->srv, "shadowed");     /* one copy taken, not the rest */
    }
    cl_node_topo_release(t);
    em_buf_free(&env);
    em_buf_free(&resp);
    if (pick != small)
        em_free(pick);
    return rc;
}

/* ---- shadows: keeping -------------------------------------------------------- */

/* member_now: who is a member in this node's topology.  A primary the
 * cluster failed may still run (cut off, then back): what it says of its
 * parts is not heard - its commits reached no other owner, and its backups
 * resolve its parts as if it had died. */
int pr_txp_member_now(pr_conn *c, cl_meta_uuid who)
{
    cl_topo *t = cl_node_topo_acquire(c->srv->opt.cluster);
    int m = pr_txc_is_member(t, who);
    cl_node_topo_release(t);
    return m;
}

static int take_shadow(pr_conn *c, cl_meta_uuid coord, uint64_t seq, const uint8_t *p,
                       size_t len)
{
    struct pr_txbs *x = c->srv->txbs;
    if (len < 16)
        return pr_bad_request(c, EM_TRUNCATED);
    cl_meta_uuid prim = { em_ld64(p), em_ld64(p + 8) };
    if (!pr_txp_member_now(c, prim))
        return pr_fail(c, PR_ST_FAILED, "The transaction's primary is not a member of the cluster");
    p += 16;
    len -= 16;
    txs *h = em_calloc(1, sizeof *h);
    if (!h)
        return EM_NOMEM;
    h->coord = coord;
    h->seq = seq;
    h->primary = prim;
    int rc = get_uuids(&p, &len, &h->parts, &h->capparts, &h->nparts);
    if (!rc)
        rc = get_uuids(&p, &len, &h->holders, &h->capholders, &h->nholders);
    if (!rc && len < 4)
        rc = EM_TRUNCATED;
    if (!rc) {
        h->nw = em_ld32(p);
        rc = em_buf_append(&h->data, p + 4, len - 4);
    }
    if (!rc)
        rc = cl_tx_begin(c->srv->txm, CL_TX_PESSIMISTIC, CL_TX_READ_COMMITTED, 0, &h->locks);
    /* The keys' locks here: once this node is their primary, no write of
     * them runs before the shadow is resolved. */
    const uint8_t *q = h->data.p;
    size_t ql = h->data.len;
    em_buf scratch = EM_BUF_INIT;
    for (uint32_t i = 0; !rc && i < h->nw; i++) {
        st_update u;
        if ((rc = pr_txp_get_write(&q, &ql, &u)) != 0)
            break;
        st_cache *sc = st_cache_find(c->srv->st, u.cache_id);
        int found;
        em_buf_reset(&scratch);
        if (sc && (rc = cl_tx_get(h->locks, sc, u.key, u.klen, 1, &scratch, &found)) != 0)
            rc = pr_fail(c, PR_ST_FAILED, "A key of the transaction is locked on its backup "
                         "(%s)", em_strerror(rc));
    }
    em_buf_free(&scratch);
    if (!rc)
        rc = cl_tx_prepare(h->locks);
    pthread_mutex_lock(&x->mu);
    txs *old = rc ? NULL : pr_txp_find_shadow(x, coord, seq, prim);
    /* Again, as it goes in: a copy that waited for its locks while its
     * primary was failed must not appear after a recovery asked this node
     * and heard it had none. */
    if (!rc && !old && !pr_txp_member_now(c, prim))
        rc = pr_fail(c, PR_ST_FAILED, "The transaction's primary is not a member of the cluster");
    if (!rc && !old) {
        if (x->nb + x->ns >= TXP_MAX)
            rc = pr_fail(c, PR_ST_FAILED, "Too many prepared transactions on a backup");
        else if (grow((void ***)&x->s, &x->caps, x->ns))
            rc = EM_NOMEM;
        else
            x->s[x->ns++] = h;
    }
    pthread_mutex_unlock(&x->mu);
    if (rc || old)
        pr_txp_txs_free(h);         /* refused, or a retry of one kept */
    if (rc < 0)
        rc = pr_fail(c, PR_ST_FAILED, "Malformed prepared state (%s)", em_strerror(rc));
    return rc;
}

static int finish_shadow(pr_conn *c, cl_meta_uuid coord, uint64_t seq, const uint8_t *p,
                         size_t len)
{
    struct pr_txbs *x = c->srv->txbs;
    if (len < 17)
        return pr_bad_request(c, EM_TRUNCATED);
    cl_meta_uuid prim = { em_ld64(p), em_ld64(p + 8) };
    if (!pr_txp_member_now(c, prim))
        return 0;                   /* a failed primary's word: the shadow decides without it */
    uint8_t outcome = p[16] == TXS_COMMITTED ? TXS_COMMITTED : TXS_ROLLED_BACK;
    pthread_mutex_lock(&x->mu);
    txs *h = pr_txp_find_shadow(x, coord, seq, prim);
    if (h && !h->busy)
        pr_txp_detach_shadow(x, h, outcome);
    else
        h = NULL;                   /* unknown, or being recovered: that decides */
    pthread_mutex_unlock(&x->mu);
    pr_txp_txs_free(h);
    return 0;
}

/* ---- a part's commit --------------------------------------------------------- */

#define SHORT_MSG "writes of the transaction may be missing on the new primary of their keys " \
                  "(a topology change while it committed; see the log of the part's node)"

/* commit_part applies b (busy, taken by this thread), waits for its
 * owners' acks as any write, tells its shadows, then releases its locks:
 * 0, EM_LOCKED (OPTIMISTIC COMMIT1: a lock is held, b goes on), or a
 * status; *applied says whether it committed. */
int pr_txp_commit_part(pr_conn *c, txb *b, int *applied)
{
    cl_repl *r = c->srv->opt.repl;
    if (r)
        cl_repl_begin();
    int rc = cl_tx_apply(b->tx);
    int wrc = r ? cl_repl_finish(r) : 0;
    *applied = rc == 0;
    if (rc == EM_LOCKED)
        return rc;
    if (rc)
        return pr_tx_fail_commit(c, b->tx, rc);
    if (pr_txc_crash_armed(c->srv) && b->nholders)
        pr_txc_crash_point(c->srv, "applied");
    /* writes of partitions whose primary moved since it prepared go there
     * (proto_txh.c) before the shadows end; a stream an owner refused was
     * fenced on a topology newer than the one the commit was planned on */
    int hrc = 0;
    if (c->srv->opt.cluster)
        hrc = pr_txp_handoff(c, b, wrc && wrc != EM_TIMEOUT ? cl_repl_tx_index() + 1 : 0);
    finish_shadows(c, b, TXS_COMMITTED);
    cl_tx_rollback(b->tx);          /* applied: this releases the locks */
    if (hrc) {                      /* applied here: a retried COMMIT hears it too */
        b->shrt = 1;
        char why[sizeof c->msg];
        memcpy(why, c->msg, sizeof why);
        return pr_fail(c, PR_ST_TXC_SHORT, "%s: %s", SHORT_MSG, why);
    }
    return wrc == EM_TIMEOUT ? pr_fail_repl_timeout(c) : 0;
}

/* writes: the (prepared) part writes something (crash points count only
 * those: a part that only read leaves nothing to resolve). */
static int writes(txb *b)
{
    const st_update *ups;
    uint32_t n;
    return cl_tx_updates(b->tx, &ups, &n) == 0 && n > 0;
}

/* spans: the part writes more than one partition (a COMMIT1 then needs its
 * backups' shadows: its writes reach them in several streams). */
static int spans(cl_tx *tx)
{
    const st_update *ups;
    uint32_t n;
    if (cl_tx_updates(tx, &ups, &n))
        return 0;
    for (uint32_t i = 1; i < n; i++)
        if (ups[i].partition != ups[0].partition || ups[i].cache_id != ups[0].cache_id)
            return 1;
    return 0;
}

/* still_primary: a part prepares only where it may commit - on the
 * primary of every partition it writes, in this node's topology now.  After
 * an affinity switch (rebalancing, a failure) its writes applied here would
 * not reach the new primary, which may already serve those keys. */
static int still_primary(pr_conn *c, txb *b)
{
    const st_update *ups;
    uint32_t n;
    int rc = cl_tx_updates(b->tx, &ups, &n);
    if (rc)
        return rc;
    cl_topo *t = cl_node_topo_acquire(c->srv->opt.cluster);
    for (uint32_t i = 0; !rc && i < n; i++) {
        st_cache *sc = st_cache_find(c->srv->st, ups[i].cache_id);
        uint32_t idx[64];
        if (sc && (cl_repl_owners(t, st_cache_cfg(sc), ups[i].cache_id, ups[i].partition, idx,
                                  64) < 1 || (int)idx[0] != t->self))
            rc = pr_fail(c, PR_ST_FAILED, "Transaction was rolled back: the primary of one of its "
                         "keys changed (topology change in progress); retry it");
    }
    cl_node_topo_release(t);
    return rc;
}

/* ---- PR_OP_TX_CALL ------------------------------------------------------------ */

/* uuids_len: the size of a u32-counted id list at p, or 0 if malformed. */
static size_t uuids_len(const uint8_t *p, size_t len)
{
    if (len < 4)
        return 0;
    uint32_t k = em_ld32(p);
    if (k > TXC_MAX_PARTS || len - 4 < (size_t)k * 16)
        return 0;
    return 4 + (size_t)k * 16;
}

/* writes_check: p[0..len) is exactly a u32 count and that many writes. */
static int writes_check(const uint8_t *p, size_t len)
{
    uint32_t nw = em_ld32(p);          /* len >= 4: the callers checked */
    p += 4;
    len -= 4;
    for (uint32_t i = 0; i < nw; i++) {
        st_update u;
        int rc = pr_txp_get_write(&p, &len, &u);
        if (rc)
            return rc;
    }
    return len == 0 ? 0 : EM_INVAL;
}

int pr_txc_check(const uint8_t *p, size_t len)
{
    if (len < TXC_HDR)
        return EM_TRUNCATED;
    int kind = p[24], conc = p[25], iso = p[26];
    if (kind > TXC_LAST || conc > 2 || iso > 2 || (int64_t)em_ld64(p + 27) < 0)
        return EM_INVAL;
    p += TXC_HDR;
    len -= TXC_HDR;
    size_t l;
    switch (kind) {
    case TXC_OP:
        return len >= 10 ? 0 : EM_TRUNCATED;        /* the op's own decoder reads it */
    case TXC_PREPARE:
        return (l = uuids_len(p, len)) != 0 && l == len ? 0 : EM_INVAL;
    case TXC_RECOVER:
        return conc != 1 || len >= 16 ? 0 : EM_TRUNCATED;
    case TXC_FINISH:
        return len >= 17 ? 0 : EM_TRUNCATED;
    case TXC_HANDOFF:
        return len < 29 ? EM_TRUNCATED : writes_check(p + 25, len - 25);
    case TXC_SHADOW: {
        size_t l2;
        if (len < 16 || (l = uuids_len(p + 16, len - 16)) == 0 ||
            (l2 = uuids_len(p + 16 + l, len - 16 - l)) == 0 || len - 16 - l - l2 < 4)
            return EM_TRUNCATED;
        return writes_check(p + 16 + l + l2, len - 16 - l - l2);
    }
    default:
        return 0;
    }
}

static int run_op(pr_conn *c, txb *b, const uint8_t *body, size_t len, em_buf *out)
{
    const uint8_t *ob = c->req_body;
    size_t ol = c->req_len;
    em_buf *resp = &c->rid_resp;
    em_buf_reset(resp);
    c->branch = b->tx;
    int rc = pr_exec_request(c, body, len, resp);
    c->branch = NULL;
    c->req_body = ob;
    c->req_len = ol;
    if (rc)
        return rc;
    int32_t status;
    const uint8_t *m, *pay;
    size_t ml, pn;
    if (pr_reply_parse(c, resp->p, resp->len, &status, &m, &ml, &pay, &pn))
        return pr_fail(c, PR_ST_FAILED, "Malformed reply of a transaction's op");
    if (status)
        return pr_fail(c, status, "%.*s", (int)ml, m ? (const char *)m : "");
    return em_buf_append(out, pay, pn);
}

int pr_txc_inline(const uint8_t *body, size_t len)
{
    if (len < 10 + TXC_HDR || em_ld16(body) != PR_OP_TX_CALL)
        return 0;
    int kind = body[10 + 24];
    return kind == TXC_SHADOW || kind == TXC_FINISH || kind == TXC_STATE ||
           kind == TXC_DECISION || kind == TXC_ALIVE || kind == TXC_WAITS || kind == TXC_WHERE;
}

int pr_op_tx_call(pr_conn *c, pr_rd *r, em_buf *out)
{
    pr_server *srv = c->srv;
    struct pr_txbs *x = srv->txbs;
    if (!x || !srv->opt.cluster)
        return pr_fail(c, PR_ST_FAILED, "Not a cluster member");
    const uint8_t *p = r->p + r->pos;
    int vrc = pr_txc_check(p, pr_rd_left(r));
    if (vrc)
        return pr_bad_request(c, vrc);
    cl_meta_uuid coord = { em_ld64(p), em_ld64(p + 8) };
    uint64_t seq = em_ld64(p + 16);
    int kind = p[24], conc = p[25], iso = p[26];
    int64_t timeout = (int64_t)em_ld64(p + 27);
    const uint8_t *rest = p + TXC_HDR;
    size_t nrest = pr_rd_left(r) - TXC_HDR;
    switch (kind) {
    case TXC_RECOVER:
        return pr_txp_recover(c, coord, seq, conc, rest, nrest);
    case TXC_SHADOW:
        return take_shadow(c, coord, seq, rest, nrest);
    case TXC_FINISH:
        return finish_shadow(c, coord, seq, rest, nrest);
    case TXC_HANDOFF:
        return pr_txp_take_handoff(c, coord, seq, rest, nrest, out);
    case TXC_STATE:
        return pr_txp_answer_state(c, coord, seq, out);
    case TXC_DECISION:
        return em_buf_put_u8(out, (uint8_t)pr_txc_decision(srv, seq));
    case TXC_ALIVE:
        return em_buf_put_u8(out, (uint8_t)pr_txc_alive(srv, seq));
    case TXC_WAITS: {
        cl_meta_uuid hc;
        uint64_t hs;
        if (!pr_txp_waits(srv, coord, seq, &hc, &hs))
            return em_buf_put_u8(out, 0);
        int rc = em_buf_put_u8(out, 1);
        if (!rc)
            rc = pr_txc_put_id(out, hc);
        return rc ? rc : em_buf_put_le64(out, hs);
    }
    case TXC_WHERE: {
        cl_meta_uuid at;
        if (!pr_txc_where(srv, seq, &at))
            return em_buf_put_u8(out, 0);
        int rc = em_buf_put_u8(out, 1);
        return rc ? rc : pr_txc_put_id(out, at);
    }
    default: {
        /* a coordinator the cluster failed may still be running: its parts
         * are being resolved without it, and it may not change them (not
         * even roll one back: the others may commit by the rule) */
        cl_topo *t = cl_node_topo_acquire(srv->opt.cluster);
        int m = pr_txc_is_member(t, coord) && t->self >= 0;
        cl_node_topo_release(t);
        if (!m && kind == TXC_ROLLBACK)
            return 0;
        if (!m)
            return pr_fail(c, PR_ST_TXC_GONE, "Transaction was rolled back: its coordinator is "
                           "not a member of the cluster");
    }
    }
    if ((kind == TXC_COMMIT || kind == TXC_COMMIT1) && nrest >= 8 && em_ld64(rest))
        /* the coordinator's topology at least (PR_OP_TX_CALL's COMMIT
         * carries its index), so a switch it knew of is known here */
        (void)cl_node_topo_wait(srv->opt.cluster, em_ld64(rest) - 1, TXC_TOPO_MS);
    pthread_mutex_lock(&x->mu);
    txb *b = pr_txp_find(x, coord, seq);
    int rc = 0;
    switch (kind) {
    case TXC_ROLLBACK:
        if (b && b->busy) {
            b->doomed = 1;
            b = NULL;
        } else if (b) {
            pr_txp_detach(x, b, TXS_ROLLED_BACK);
        } else if (!pr_txp_ring_get(x, coord, seq)) {
            /* before its first op arrived (that op waited in the queue
             * while its coordinator gave up): the op must not create it */
            ring_put(x, coord, own_part, seq, TXS_ROLLED_BACK, 0);
        }
        pthread_mutex_unlock(&x->mu);
        if (b)
            pr_txp_part_close(c, b, TXS_ROLLED_BACK);
        return 0;
    case TXC_OP:
        if (!b && pr_txp_ring_get(x, coord, seq) == TXS_ROLLED_BACK) {
            pthread_mutex_unlock(&x->mu);
            return pr_fail(c, PR_ST_TXC_GONE, "Transaction was rolled back on a node it spans");
        }
        if (!b && (rc = add(x, srv, coord, seq, conc, iso, timeout, &b)) != 0) {
            pthread_mutex_unlock(&x->mu);
            return rc == EM_LIMIT ? pr_fail(c, PR_ST_FAILED, "Too many transactions on this "
                                            "node (ember's limit is %d)", TXP_MAX) : rc;
        }
        break;
    case TXC_PREPARE:
    case TXC_COMMIT1:
        if (!b) {
            uint8_t st = pr_txp_ring_get(x, coord, seq);
            if (st == TXS_COMMITTED) {
                int shrt = pr_txp_ring_short(x, coord, seq);
                pthread_mutex_unlock(&x->mu);
                /* a retry of what committed */
                return shrt ? pr_fail(c, PR_ST_TXC_SHORT, "%s", SHORT_MSG) : 0;
            }
            if (st == TXS_ROLLED_BACK) {
                pthread_mutex_unlock(&x->mu);
                return pr_fail(c, PR_ST_TXC_GONE, "Transaction was rolled back on a node it "
                               "spans (its timeout)");
            }
            /* its ops failed before any ran here: an empty part */
            if ((rc = add(x, srv, coord, seq, conc, iso, timeout, &b)) != 0) {
                pthread_mutex_unlock(&x->mu);
                return rc == EM_LIMIT ? pr_fail(c, PR_ST_FAILED, "Too many transactions") : rc;
            }
        }
        break;
    default:                        /* TXC_COMMIT */
        if (!b) {
            uint8_t st = pr_txp_ring_get(x, coord, seq);
            int shrt = pr_txp_ring_short(x, coord, seq);
            pthread_mutex_unlock(&x->mu);
            if (st == TXS_COMMITTED)
                return shrt ? pr_fail(c, PR_ST_TXC_SHORT, "%s", SHORT_MSG) : 0;
            return pr_fail(c, PR_ST_TXC_GONE, "Transaction was rolled back on a node it spans "
                           "before it committed");
        }
        if (b->state != TXS_PREPARED) {
            pthread_mutex_unlock(&x->mu);
            return pr_fail(c, PR_ST_FAILED, "Transaction commit before prepare");
        }
        break;
    }
    if (b->busy || b->recovering) {
        pthread_mutex_unlock(&x->mu);
        return pr_fail(c, PR_ST_TXC_WAIT, "The transaction's part is busy");
    }
    if (kind == TXC_OP && b->state == TXS_PREPARED) {
        pthread_mutex_unlock(&x->mu);
        return pr_fail(c, PR_ST_FAILED, "Transaction is being committed");
    }
    b->busy = 1;
    b->last_ms = em_now_ms();
    pthread_mutex_unlock(&x->mu);
    if (kind == TXC_PREPARE &&
        (rc = get_uuids(&rest, &nrest, &b->parts, &b->capparts, &b->nparts)) != 0)
        rc = pr_bad_request(c, rc);
    if (kind == TXC_COMMIT1 && !b->nparts && ids_reserve(&b->parts, &b->capparts, 1) == 0) {
        b->parts[0] = cl_node_id(srv->opt.cluster);
        b->nparts = 1;
    }

    uint8_t fin = 0;                /* ends b with this outcome */
    uint8_t state = b->state;       /* b->state changes under x->mu (sweeps read it) */
    switch (rc ? -1 : kind) {
    case -1:
        break;
    case TXC_OP:
        rc = run_op(c, b, rest, nrest, out);
        if (!cl_tx_open(b->tx)) {
            fin = TXS_ROLLED_BACK;  /* its timeout or a deadlock */
            if (rc)
                rc = PR_ST_TXC_GONE;
        }
        break;
    case TXC_PREPARE:
    case TXC_COMMIT1:
        if (state != TXS_PREPARED) {
            if ((rc = cl_tx_prepare(b->tx)) == EM_LOCKED) {
                rc = pr_txc_wait(c, "The key is locked by another transaction");
                break;
            }
            if (!rc)
                rc = still_primary(c, b);
            if (!rc && (kind == TXC_PREPARE || spans(b->tx)))
                rc = send_shadows(c, b);
            if (rc) {
                fin = TXS_ROLLED_BACK;
                pr_tx_fail_commit(c, b->tx, rc);
                rc = PR_ST_TXC_GONE;
                break;
            }
            state = TXS_PREPARED;
            pthread_mutex_lock(&x->mu);
            b->state = TXS_PREPARED;
            pthread_mutex_unlock(&x->mu);
            if (pr_txc_crash_armed(srv) && kind == TXC_PREPARE && writes(b))
                pr_txc_crash_point(c->srv, "prepared");
        }
        if (kind == TXC_PREPARE)
            break;
        /* COMMIT1 commits now */
        /* fall through */
    default: {                      /* COMMIT */
        int applied;
        /* (a part of another node's transaction: its coordinator goes on) */
        if (pr_txc_crash_armed(srv) && kind == TXC_COMMIT && writes(b) &&
            !cl_meta_uuid_eq(b->coord, cl_node_id(srv->opt.cluster)))
            pr_txc_crash_point(c->srv, "committing");
        rc = pr_txp_commit_part(c, b, &applied);
        if (rc == EM_LOCKED)
            rc = pr_txc_wait(c, "The key is locked by another transaction");
        else
            fin = applied ? TXS_COMMITTED : TXS_ROLLED_BACK;
        break;
    }
    }
    pthread_mutex_lock(&x->mu);
    b->busy = 0;
    if (!fin && b->doomed)
        fin = TXS_ROLLED_BACK;
    if (fin)
        pr_txp_detach(x, b, fin);
    pthread_mutex_unlock(&x->mu);
    if (fin)
        pr_txp_part_close(c, b, fin);
    return rc;
}

int pr_txp_waits(pr_server *s, cl_meta_uuid coord, uint64_t seq, cl_meta_uuid *hc,
                 uint64_t *hs)
{
    struct pr_txbs *x = s->txbs;
    int found = 0;
    pthread_mutex_lock(&x->mu);
    txb *b = pr_txp_find(x, coord, seq);
    uint64_t h = b ? cl_tx_blocker(b->tx) : 0;
    /* the holder: a part here, or a backup copy (the same transaction's
     * part on another node, prepared) */
    for (uint32_t i = 0; h && !found && i < x->nb; i++)
        if (x->b[i] != b && cl_tx_owner(x->b[i]->tx) == h) {
            *hc = x->b[i]->coord;
            *hs = x->b[i]->seq;
            found = 1;
        }
    for (uint32_t i = 0; h && !found && i < x->ns; i++)
        if (x->s[i]->locks && cl_tx_owner(x->s[i]->locks) == h) {
            *hc = x->s[i]->coord;
            *hs = x->s[i]->seq;
            found = 1;
        }
    pthread_mutex_unlock(&x->mu);
    return found;
}

void pr_txc_stats_get(pr_server *s, pr_txc_stats *st)
{
    memset(st, 0, sizeof *st);
    struct pr_txbs *x = s->txbs;
    if (x) {
        pthread_mutex_lock(&x->mu);
        st->parts = x->nb;
        for (uint32_t i = 0; i < x->nb; i++)
            st->prepared += x->b[i]->state == TXS_PREPARED;
        st->copies = x->ns;
        pthread_mutex_unlock(&x->mu);
    }
    st->one_phase = atomic_load_explicit(&s->txc_one, memory_order_relaxed);
    st->two_phase = atomic_load_explicit(&s->txc_two, memory_order_relaxed);
    st->recovered_commit = atomic_load_explicit(&s->txc_rec_commit, memory_order_relaxed);
    st->recovered_rollback = atomic_load_explicit(&s->txc_rec_rollback, memory_order_relaxed);
    st->wakes_sent = atomic_load_explicit(&s->rwake_sent, memory_order_relaxed);
    st->wakes_got = atomic_load_explicit(&s->rwake_got, memory_order_relaxed);
    st->deadlocks = atomic_load_explicit(&s->txc_deadlocks, memory_order_relaxed);
    st->handed_off = atomic_load_explicit(&s->txc_handed, memory_order_relaxed);
}
