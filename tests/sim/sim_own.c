/* sim_own.c - ember-sim-own: a deterministic simulation of partition
 * ownership - the exchange's decisions and rebalancing's promotions -
 * under seeded faults and interleavings (issue 16).
 *
 * The code under test is the code the servers run: the metadata state
 * machine (cl_meta_fsm, cl_meta_owners), the topology built from it
 * (cl_topo) and the decisions (cl_plan: single messages, cl_plan_decide,
 * cl_plan_promote, the routing of requests and the stream's fencing).
 * Around it, a model of what the threads and the network do with them, one
 * seeded choice per step:
 *
 *   - members join (empty: ember's caches are in memory), are killed
 *     (their data gone, frames already sent may still arrive) and failed
 *     by the group some steps later;
 *   - clients write: the primary on the newest topology applies the write
 *     with its next update counter and streams it, one FIFO per link, to
 *     every other owner and MOVING copy, which take it or fence it by the
 *     replication stream's rule (cl_plan_fenced); the write is acknowledged
 *     once every owner and every MOVING copy it reached applied it
 *     (FULL_SYNC, as cl_repl waits);
 *   - the coordinator runs an exchange per new topology version: snapshot,
 *     single messages from the living members (built on their own view),
 *     cl_plan_decide on the snapshot, its entries committed one per step,
 *     then EXCH_DONE and the catch-up orders for owners behind;
 *   - MOVING copies load from the primary, report loaded, and the
 *     coordinator promotes them (cl_plan_promote on a snapshot, committed
 *     some steps later); owners told to catch up merge from the primary;
 *     copies nobody owns are evicted;
 *   - an operator changes the baseline (ember-cli cluster baseline: set to
 *     the live members, add a live member, remove a failed node, clear):
 *     a failed baseline node keeps its place, so its copies stay missing
 *     until it is removed - kills are budgeted over copies, not members.
 *
 * Entries are applied straight to one state machine in commit order (the
 * metadata group's consensus has its own simulation, sim_meta.c); what is
 * modelled here is everything that races around it.
 *
 * Checked after every step:
 *   - the primary of every partition (when alive) holds every acknowledged
 *     write of it - reads see them;
 *   - no partition is declared lost: members are killed only while fewer
 *     than `backups` were killed since the cluster last settled (every
 *     partition on its ideal owners, whole, nothing moving);
 * and at the end, with faults over and every pending action run:
 *   - the cluster settles (ideal owners, nothing moving or dropped);
 *   - the owners of every partition agree: the same writes, acknowledged
 *     or not, and no other member keeps a copy.
 *
 *   ember-sim-own [--seeds A:B] [--seed N] [--steps K] [-v]
 *
 * The planted build (build/plant/ember-sim-own-no_switch: cl_plan.c
 * giving a partition a new primary without a new topology version, so the
 * old primary's writes in flight are not fenced) must fail:
 * tests/scripts/sim.sh checks it does.
 */
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cluster/cl_meta_fsm.h"
#include "cluster/cl_plan.h"
#include "cluster/cl_pmap.h"
#include "cluster/cl_topo.h"
#include "util/buf.h"
#include "util/err.h"
#include "util/hash.h"
#include "util/mem.h"
#include "sim_lib.h"

#define MAXM   12                  /* members over a run (a restart is a new member) */
#define MAXLIVE 6                  /* members alive at once */
#define NG     2
#define MAXP   12                  /* partitions per group */
#define MAXW   256                 /* writes per partition per run */
#define QCAP   64                  /* frames in flight per link */
#define NOTICE_ROOM 8              /* of them kept for notices (writes stop short) */
#define MAXQ   64                  /* reports, catch-ups waiting */

typedef struct copy {
    uint64_t cntr;
    uint8_t  has[MAXW / 8];
} copy;

/* A frame is a write (cntr > 0) or a notice (cntr 0): its sender's write of
 * g p was fenced by an owner, and the receiver, which may have applied it
 * before it knew of the new primary, catches up. */
typedef struct frame { uint8_t g, p; uint16_t w; uint64_t cntr, epoch; } frame;
typedef struct link { frame q[QCAP]; unsigned head, n; } link;

typedef struct member {
    cl_meta_uuid id;
    char     cid[8];
    int      joined, alive, fail_pending;
    copy     c[NG][MAXP];
    uint8_t  load[NG][MAXP];       /* 0 none, 1 loading, 2 loaded (reporting) */
    uint8_t  supplier[NG][MAXP];
} member;

typedef struct wrec { uint16_t need, got; uint8_t live, acked; } wrec;

typedef struct task { uint8_t m, g, p; uint64_t v; uint8_t sup; } task;   /* sup: reports */

typedef struct sim {
    sim_base    b;
    cl_meta_fsm f;
    uint64_t    index;
    cl_topo    *cur;
    cl_plan_group grp[NG];
    member      m[MAXM];
    unsigned    nm;
    link        ln[MAXM][MAXM];
    wrec        w[NG][MAXP][MAXW];
    unsigned    nw[NG][MAXP];
    uint8_t     acked[NG][MAXP][MAXW / 8];
    unsigned    kills_unsettled;
    uint64_t    bl_changes;         /* baseline entries applied */
    /* the exchange */
    int         ex_state;          /* 0 idle, 1 collecting, 2 committing */
    cl_topo    *ex_t;
    uint64_t    ex_id, ex_done_id;
    em_buf      ex_e, ex_behind;
    size_t      ex_at;
    /* promotions */
    task        rep[MAXQ];
    unsigned    nrep;
    cl_topo    *pr_t;
    task        pr[MAXQ];
    unsigned    npr;
    task        up[MAXQ];          /* owners to catch up */
    unsigned    nup;
    task        cb[MAXQ];          /* the coordinator's owners behind (v: the exchange) */
    unsigned    ncb;
    uint64_t    acks, writes, kills, joins, exchanges, promotions;
    uint64_t    diverged;          /* owners holding other unacknowledged writes than
                                      their primary at the end */
} sim;

static sim S;

static uint64_t rnd(sim *s) { return sim_rnd(&s->b); }

static unsigned pick(sim *s, unsigned n) { return n ? (unsigned)(rnd(s) % n) : 0; }

#define violation(s, ...) sim_violation(&(s)->b, __VA_ARGS__)
#define note(s, ...) sim_note(&(s)->b, -1, __VA_ARGS__)

static int bit(const uint8_t *b, unsigned i) { return b[i / 8] >> (i % 8) & 1; }
static void set_bit(uint8_t *b, unsigned i) { b[i / 8] |= (uint8_t)(1u << (i % 8)); }

/* ---- the state machine and its topology ---- */

static uint64_t version(const sim *s) { return s->f.major << 32 | s->f.minor; }

static void deliver(sim *s, unsigned from, unsigned to);
static uint64_t version(const sim *s);

/* apply commits one entry.  First, frames mapped two topology versions ago
 * arrive: a frame crosses at most one change - the network delivers in
 * microseconds what an exchange or a promotion takes milliseconds to
 * commit (an unbounded delay would let a primary deposed and reinstated
 * take its own old writes for current ones). */
static void apply(sim *s, const em_buf *e)
{
    for (unsigned i = 0; i < s->nm; i++)
        for (unsigned j = 0; j < s->nm; j++)
            while (s->ln[i][j].n && s->ln[i][j].q[s->ln[i][j].head].epoch < version(s))
                deliver(s, i, j);
    cl_meta_effect eff;
    if (cl_meta_fsm_apply(&s->f, ++s->index, e->p, e->len, NULL, &eff)) {
        violation(s, "out of memory applying an entry");
        return;
    }
    if (eff.status)
        violation(s, "entry %d at %" PRIu64 " refused: %s", eff.type, s->index,
                  em_strerror(eff.status));
    cl_topo_release(s->cur);
    s->cur = cl_topo_build(&s->f, (cl_meta_uuid){ 0, 0 }, NULL);
    if (!s->cur)
        violation(s, "out of memory building a topology");
}

/* who: the sim member behind topology index i of t. */
static int who(const sim *s, const cl_topo *t, uint32_t i)
{
    for (unsigned k = 0; k < s->nm; k++)
        if (cl_meta_uuid_eq(s->m[k].id, t->m[i].id))
            return (int)k;
    return -1;
}

/* owners: partition p's owners and MOVING copies on t, as sim members,
 * routed as the servers route (cl_plan_owners). */
static uint32_t owners(sim *s, cl_topo *t, unsigned g, unsigned p, uint32_t *own, uint32_t *nmv,
                       uint32_t *mv)
{
    const cl_plan_group *gr = &s->grp[g];
    uint32_t n = cl_plan_owners(t, gr, p, own, CL_PLAN_MAX_OWNERS);
    *nmv = cl_topo_moving(t, gr->grp, gr->parts, p, mv, CL_PLAN_MAX_OWNERS);
    for (uint32_t i = 0; i < n; i++)
        own[i] = (uint32_t)who(s, t, own[i]);
    for (uint32_t i = 0; i < *nmv; i++)
        mv[i] = (uint32_t)who(s, t, mv[i]);
    return n;
}

static int in(const uint32_t *a, uint32_t n, uint32_t x)
{
    for (uint32_t i = 0; i < n; i++)
        if (a[i] == x)
            return 1;
    return 0;
}

/* ---- members ---- */

static void join(sim *s)
{
    member *m = &s->m[s->nm];
    memset(m, 0, sizeof *m);
    m->id = (cl_meta_uuid){ 0x5151000000000000ull | s->nm, rnd(s) | 1 };
    snprintf(m->cid, sizeof m->cid, "m%u", s->nm);
    cl_meta_node_info ni = { .id = m->id, .raft_id = s->nm + 1u, .host = s->nm + 1u,
                             .cid = { (const uint8_t *)m->cid, (uint32_t)strlen(m->cid) },
                             .raft_addr = { (const uint8_t *)"r", 1 } };
    em_buf e = EM_BUF_INIT;
    if (cl_meta_enc_join(&e, &ni) == 0)
        apply(s, &e);
    em_buf_free(&e);
    m->joined = m->alive = 1;
    note(s, "join m%u", s->nm);
    s->nm++;
    s->joins++;
}

static void kill_member(sim *s, unsigned k)
{
    member *m = &s->m[k];
    m->alive = 0;
    m->fail_pending = 1;
    memset(m->c, 0, sizeof m->c);
    /* Frames that left its socket still arrive - before the group fails
     * it (A_FAIL waits for them): failure detection takes seconds, a frame
     * in a kernel's buffer microseconds.  The rest are gone, and so are
     * frames to it. */
    for (unsigned j = 0; j < s->nm; j++) {
        link *l = &s->ln[k][j];
        if (l->n && (rnd(s) & 1))
            l->n = pick(s, l->n + 1);
        s->ln[j][k].n = 0;
    }
    s->kills++;
    s->kills_unsettled++;
    note(s, "kill m%u", k);
}

static void fail_member(sim *s, unsigned k)
{
    em_buf e = EM_BUF_INIT;
    if (cl_meta_enc_fail(&e, s->m[k].id) == 0)
        apply(s, &e);
    em_buf_free(&e);
    s->m[k].fail_pending = 0;
    note(s, "NODE_FAIL m%u", k);
}

/* ---- the baseline ---- */

static int in_bl(const sim *s, const char *cid)
{
    for (uint32_t i = 0; i < s->cur->nbl; i++)
        if (!strcmp(s->cur->bl[i], cid))
            return 1;
    return 0;
}

/* baseline_change: what an operator does with ember-cli cluster baseline
 * (proto_baseline.c's rules): set it to the live members, add a live
 * member, remove an offline node, or clear it. */
static void baseline_change(sim *s)
{
    cl_meta_bytes ids[MAXM + 8];
    uint32_t n = 0;
    unsigned what = pick(s, 4), k = pick(s, s->nm);
    member *m = &s->m[k];
    if (what == 0 || !s->cur->nbl) {
        for (unsigned j = 0; j < s->nm; j++)
            if (s->m[j].alive)
                ids[n++] = (cl_meta_bytes){ (const uint8_t *)s->m[j].cid,
                                            (uint32_t)strlen(s->m[j].cid) };
        what = 0;
    } else if (what == 3) {
        n = 0;
    } else {
        if (what == 1 && (!m->alive || in_bl(s, m->cid)))
            return;                 /* add: a live member outside it */
        int online = 0, live_left = 0;
        for (uint32_t j = 0; j < s->cur->n; j++)
            online |= !strcmp(s->cur->m[j].cid, m->cid);
        if (what == 2 && (online || !in_bl(s, m->cid)))
            return;                 /* remove: an offline node in it */
        for (uint32_t i = 0; i < s->cur->nbl; i++) {
            if (what == 2 && !strcmp(s->cur->bl[i], m->cid))
                continue;
            ids[n++] = (cl_meta_bytes){ (const uint8_t *)s->cur->bl[i],
                                        (uint32_t)strlen(s->cur->bl[i]) };
            for (unsigned j = 0; j < s->nm; j++)
                live_left |= s->m[j].alive && !strcmp(s->m[j].cid, s->cur->bl[i]);
        }
        if (what == 1)
            ids[n++] = (cl_meta_bytes){ (const uint8_t *)m->cid, (uint32_t)strlen(m->cid) };
        if (what == 2 && !live_left)
            return;                 /* never a baseline without a live node */
    }
    if (what == 0 && !n)
        return;
    /* The ids point into the topology; the entry copies them first. */
    em_buf e = EM_BUF_INIT;
    if (cl_meta_enc_baseline(&e, ids, n) == 0)
        apply(s, &e);
    em_buf_free(&e);
    static const char *const names[] = { "set to the live members", "add", "remove", "clear" };
    s->bl_changes++;
    note(s, "baseline %s%s%s (%u nodes)", names[what], what == 1 || what == 2 ? " " : "",
         what == 1 || what == 2 ? m->cid : "", n);
}

/* ---- writes ---- */

static void write_one(sim *s, unsigned g, unsigned p)
{
    uint32_t own[CL_PLAN_MAX_OWNERS], mv[CL_PLAN_MAX_OWNERS], nmv;
    uint32_t n = owners(s, s->cur, g, p, own, &nmv, mv);
    if (!n || s->nw[g][p] >= MAXW || cl_topo_part_lost(s->cur, s->grp[g].grp, p))
        return;
    member *pr = &s->m[own[0]];
    if (!pr->alive)
        return;                        /* the client's call fails: unknown */
    for (uint32_t i = 1; i < n + nmv; i++) {
        uint32_t d = i < n ? own[i] : mv[i - n];
        if (s->m[d].alive && s->ln[own[0]][d].n >= QCAP - NOTICE_ROOM)
            return;                    /* back-pressure: the call is refused */
    }
    unsigned w = s->nw[g][p]++;
    uint64_t c = ++pr->c[g][p].cntr;
    set_bit(pr->c[g][p].has, w);
    wrec *r = &s->w[g][p][w];
    memset(r, 0, sizeof *r);
    r->live = 1;
    for (uint32_t i = 1; i < n + nmv; i++) {
        uint32_t d = i < n ? own[i] : mv[i - n];
        if (i < n || s->m[d].alive)
            r->need |= (uint16_t)(1u << d);  /* owners, and MOVING copies it reaches */
        if (!s->m[d].alive)
            continue;
        link *l = &s->ln[own[0]][d];
        l->q[(l->head + l->n++) % QCAP] = (frame){ (uint8_t)g, (uint8_t)p, (uint16_t)w, c,
                                                   version(s) };
    }
    s->writes++;
    note(s, "write g%u p%u w%u cntr %" PRIu64 " at m%u", g, p, w, c, own[0]);
}

static void ack_check(sim *s, unsigned g, unsigned p, unsigned w)
{
    wrec *r = &s->w[g][p][w];
    if (r->live && !r->acked && (r->need & ~r->got) == 0) {
        r->acked = 1;
        set_bit(s->acked[g][p], w);
        s->acks++;
        note(s, "ack g%u p%u w%u", g, p, w);
    }
}

static void catch_up_later(sim *s, unsigned k, unsigned g, unsigned p)
{
    if (s->nup < MAXQ)
        s->up[s->nup++] = (task){ (uint8_t)k, (uint8_t)g, (uint8_t)p, 0, 0 };
}

/* notify_fenced: the refusal of f reached its sender, which tells the other
 * copies it sent f to (need), after f on each link, to catch up too
 * (cl_repl's fence notice): one may have applied f before it knew of the
 * new primary, which never had it. */
static void notify_fenced(sim *s, unsigned from, unsigned by, const frame *f, uint16_t need)
{
    for (unsigned d = 0; d < s->nm; d++) {
        if (d == from || d == by || !(need & (1u << d)) || !s->m[d].alive)
            continue;
        link *l = &s->ln[from][d];
        const frame *last = l->n ? &l->q[(l->head + l->n - 1) % QCAP] : NULL;
        if (last && !last->cntr && last->g == f->g && last->p == f->p)
            continue;                  /* one notice already waits there */
        if (l->n >= QCAP) {
            violation(s, "no room for a fence notice m%u -> m%u", from, d);
            return;
        }
        l->q[(l->head + l->n++) % QCAP] = (frame){ f->g, f->p, f->w, 0, f->epoch };
    }
}

/* owns: member k is an owner of (g, p) on the current topology. */
static int owns(sim *s, unsigned k, unsigned g, unsigned p)
{
    uint32_t own[CL_PLAN_MAX_OWNERS], mv[CL_PLAN_MAX_OWNERS], nmv;
    uint32_t n = owners(s, s->cur, g, p, own, &nmv, mv);
    for (uint32_t i = 0; i < n; i++)
        if (own[i] == k)
            return 1;
    return 0;
}

static void deliver(sim *s, unsigned from, unsigned to)
{
    link *l = &s->ln[from][to];
    frame f = l->q[l->head];
    l->head = (l->head + 1) % QCAP;
    l->n--;
    if (!s->m[to].alive)
        return;
    if (!f.cntr) {
        catch_up_later(s, to, f.g, f.p);
        note(s, "m%u told by m%u to catch up on g%u p%u", to, from, f.g, f.p);
        return;
    }
    wrec *r = &s->w[f.g][f.p][f.w];
    if (cl_plan_fenced(s->cur, &s->grp[f.g], f.p, f.epoch, s->m[from].id)) {
        /* Fenced (cl_repl's rule): from a primary deposed since it mapped
         * the write; the call fails, this copy catches up, and so does the
         * sender when the refusal reaches it (it applied the write). */
        r->live = 0;
        catch_up_later(s, to, f.g, f.p);
        note(s, "m%u fences g%u p%u w%u from m%u", to, f.g, f.p, f.w, from);
        if (s->m[from].alive) {
            catch_up_later(s, from, f.g, f.p);
            notify_fenced(s, from, to, &f, r->need);
        }
        return;
    }
    copy *c = &s->m[to].c[f.g][f.p];
    /* cl_repl's jump rule: a counter that does not follow the copy's last
     * means it missed writes of another stream (a primary that died with
     * writes in flight) or holds some the sender never had. */
    if ((c->cntr && f.cntr != c->cntr + 1) || (!c->cntr && f.cntr > 1 && owns(s, to, f.g, f.p))) {
        catch_up_later(s, to, f.g, f.p);
        note(s, "m%u: g%u p%u cntr %" PRIu64 " after %" PRIu64 ", catches up", to, f.g, f.p,
             f.cntr, c->cntr);
    }
    set_bit(c->has, f.w);
    if (f.cntr > c->cntr)
        c->cntr = f.cntr;
    r->got |= (uint16_t)(1u << to);
    /* The sender is alive to take the acknowledgement, or the call is
     * unknown to the client. */
    if (s->m[from].alive)
        ack_check(s, f.g, f.p, f.w);
    else
        r->live = 0;
}

/* ---- the exchange ---- */

static int info(void *arg, int32_t grp, uint32_t part, uint64_t *cntr, uint64_t *size)
{
    const member *m = arg;
    unsigned g = grp == S.grp[0].grp ? 0 : 1;
    *cntr = m->c[g][part].cntr;
    int rc = 0;
    for (unsigned i = 0; i < S.nup; i++)      /* catching up: counter 0 (srv_cluster.c) */
        if (S.up[i].m == (unsigned)(m - S.m) && S.up[i].g == g && S.up[i].p == part) {
            *cntr = 0;
            rc = CL_PLAN_BEHIND;
        }
    *size = 0;
    for (unsigned i = 0; i < MAXW / 8; i++)
        *size += (uint64_t)__builtin_popcount(m->c[g][part].has[i]);
    return rc;
}

static void ex_start(sim *s)
{
    s->ex_t = s->cur;
    cl_topo_hold(s->ex_t);
    s->ex_id = version(s);
    s->ex_state = 1;
    note(s, "exchange %" PRIx64 " starts", s->ex_id);
}

static void ex_abandon(sim *s)
{
    cl_topo_release(s->ex_t);
    s->ex_t = NULL;
    s->ex_state = 0;
    em_buf_reset(&s->ex_e);
    em_buf_reset(&s->ex_behind);
}

/* ex_collect: the singles (each member builds its own on its current view,
 * which here is the newest topology), then the decision on the snapshot. */
static void ex_collect(sim *s)
{
    if (version(s) != s->ex_id) {
        note(s, "exchange %" PRIx64 " abandoned: a newer topology", s->ex_id);
        ex_abandon(s);
        return;
    }
    cl_topo *t = s->ex_t;
    cl_plan_single *v = em_calloc(t->n + 1u, sizeof *v);
    em_buf raw[MAXM];
    for (uint32_t i = 0; i < t->n; i++) {
        raw[i] = (em_buf)EM_BUF_INIT;
        int k = who(s, t, i);
        if (k < 0 || !s->m[k].alive || !(rnd(s) % 16))
            continue;                  /* dead, or its single came too late */
        cl_topo *mine = s->cur;
        int self = mine->self;
        for (uint32_t j = 0; j < mine->n; j++)
            if (cl_meta_uuid_eq(mine->m[j].id, s->m[k].id))
                mine->self = (int)j;
        int rc = cl_plan_single_build(mine, s->grp, NG, s->m[k].id, s->ex_id, info, &s->m[k],
                                      &raw[i]);
        mine->self = self;
        uint32_t cap = rc ? 0 : cl_psingle_peek_groups(raw[i].p, raw[i].len);
        v[i].s.g = em_malloc(sizeof *v[i].s.g * (cap ? cap : 1));
        v[i].ok = !rc && v[i].s.g && cl_psingle_decode(raw[i].p, raw[i].len, &v[i].s, cap) == 0;
        if (!v[i].ok)
            violation(s, "member m%d's single message does not decode", k);
    }
    em_buf_reset(&s->ex_e);
    em_buf_reset(&s->ex_behind);
    if (cl_plan_decide(t, s->grp, NG, v, s->ex_id, &s->ex_e, &s->ex_behind))
        violation(s, "cl_plan_decide failed");
    for (uint32_t i = 0; i < t->n; i++) {
        em_free(v[i].s.g);
        em_buf_free(&raw[i]);
    }
    em_free(v);
    s->ex_at = 0;
    s->ex_state = 2;
    note(s, "exchange %" PRIx64 " decided: %zu bytes of entries, %zu behind", s->ex_id,
         s->ex_e.len, s->ex_behind.len / 12);
}

/* ex_commit: one entry of the decision per step, then EXCH_DONE. */
static void ex_commit(sim *s)
{
    if (s->ex_at < s->ex_e.len) {
        size_t n = 8 + (size_t)em_ld32(s->ex_e.p + s->ex_at + 4);
        em_buf one = EM_BUF_INIT;
        (void)em_buf_append(&one, s->ex_e.p + s->ex_at, n);
        apply(s, &one);
        em_buf_free(&one);
        s->ex_at += n;
        note(s, "exchange %" PRIx64 ": owners committed", s->ex_id);
        return;
    }
    em_buf e = EM_BUF_INIT;
    if (cl_meta_enc_exch(&e, s->ex_id, s->ex_t->major, s->ex_t->minor) == 0)
        apply(s, &e);
    em_buf_free(&e);
    for (size_t at = 0; at + 12 <= s->ex_behind.len; at += 12) {
        int k = who(s, s->ex_t, em_ld32(s->ex_behind.p + at));
        int32_t grp = (int32_t)em_ld32(s->ex_behind.p + at + 4);
        if (k >= 0) {
            catch_up_later(s, (unsigned)k, grp == s->grp[0].grp ? 0 : 1,
                           em_ld32(s->ex_behind.p + at + 8));
            /* cl_rebal_note_behind: a newer decision's list replaces */
            if (s->ncb && s->cb[0].v < s->ex_id)
                s->ncb = 0;
            if (s->ncb < MAXQ)
                s->cb[s->ncb++] = (task){ (uint8_t)k, grp == s->grp[0].grp ? 0 : 1,
                                          (uint8_t)em_ld32(s->ex_behind.p + at + 8), s->ex_id, 0 };
            note(s, "m%d behind on g%u p%u", k, grp == s->grp[0].grp ? 0 : 1,
                 em_ld32(s->ex_behind.p + at + 8));
        }
    }
    s->ex_done_id = s->ex_id;
    s->exchanges++;
    note(s, "exchange %" PRIx64 " done", s->ex_id);
    ex_abandon(s);
}

/* ---- rebalancing ---- */

/* take: a catch-up ends with the supplier's copy (cl_rebal's merge load
 * sweeps what the supplier no longer has). */
static void take(copy *dst, const copy *src) { *dst = *src; }

/* load_into: a MOVING copy's load adds the supplier's entries and never
 * overwrites or drops what the live stream wrote meanwhile (cl_rebal). */
static void load_into(copy *dst, const copy *src)
{
    for (unsigned i = 0; i < MAXW / 8; i++)
        dst->has[i] |= src->has[i];
    if (src->cntr > dst->cntr)
        dst->cntr = src->cntr;
}

/* load_step: member k's copy of (g, p) while it is MOVING: start a load
 * from the primary, finish it (the primary's entries merged in), or report
 * it loaded to the coordinator. */
static void load_step(sim *s, unsigned k, unsigned g, unsigned p, const uint32_t *own)
{
    member *m = &s->m[k];
    switch (m->load[g][p]) {
    case 0:
        m->load[g][p] = 1;
        m->supplier[g][p] = (uint8_t)own[0];
        note(s, "m%u loads g%u p%u from m%u", k, g, p, own[0]);
        break;
    case 1:
        if (m->supplier[g][p] != own[0]) {
            m->load[g][p] = 0;      /* from the new primary, from the start */
            note(s, "m%u's load of g%u p%u starts over: m%u is no longer the primary", k, g,
                 p, m->supplier[g][p]);
            break;
        }
        load_into(&m->c[g][p], &s->m[own[0]].c[g][p]);
        m->load[g][p] = 2;
        note(s, "m%u loaded g%u p%u", k, g, p);
        break;
    default:
        if (m->supplier[g][p] != own[0]) {
            /* Loaded from a primary that is no longer one (it may lack
             * writes the new one has, or hold some it never had): the copy
             * merges from the new primary (cl_rebal), reporting goes on. */
            take(&m->c[g][p], &s->m[own[0]].c[g][p]);
            m->supplier[g][p] = (uint8_t)own[0];
            note(s, "m%u merges g%u p%u from m%u, the new primary", k, g, p, own[0]);
        }
        if (s->nrep < MAXQ)
            s->rep[s->nrep++] = (task){ (uint8_t)k, (uint8_t)g, (uint8_t)p, version(s),
                                        m->supplier[g][p] };
        break;
    }
}

/* promote_start: the coordinator takes the reports in and a snapshot to
 * decide on (its entry commits some steps later, other commits may come
 * first).  A report may have been sent on an older topology version than
 * the snapshot (it waited in the coordinator's queue through an exchange,
 * or was sent before the copy applied the change): cl_plan_promote takes
 * it only when the copy loaded from the partition's primary on the
 * snapshot. */
static void promote_start(sim *s)
{
    s->pr_t = s->cur;
    cl_topo_hold(s->pr_t);
    s->npr = 0;
    for (unsigned i = 0; i < s->nrep; i++)
        s->pr[s->npr++] = s->rep[i];
    s->nrep = 0;
}

/* cb_has: cl_plan_behind_fn over the coordinator's list (cl_rebal's). */
static int cb_has(void *arg, cl_meta_uuid id, int32_t grp, uint32_t part)
{
    sim *s = arg;
    for (unsigned i = 0; i < s->ncb; i++)
        if (cl_meta_uuid_eq(s->m[s->cb[i].m].id, id) &&
            s->grp[s->cb[i].g].grp == grp && s->cb[i].p == part)
            return 1;
    return 0;
}

static void promote_commit(sim *s)
{
    em_buf e = EM_BUF_INIT;
    cl_meta_owners_enc enc;
    unsigned made = 0;
    int rc = cl_meta_enc_owners_begin(&enc, &e, cl_topo_last_exchange(s->pr_t));
    if (s->ncb && s->cb[0].v < cl_topo_last_exchange(s->pr_t))
        s->ncb = 0;
    for (unsigned i = 0; i < s->npr && !rc; i++) {
        for (unsigned j = 0; j < s->ncb; j++)      /* it reported: whole */
            if (s->cb[j].m == s->pr[i].m && s->cb[j].g == s->pr[i].g && s->cb[j].p == s->pr[i].p)
                s->cb[j--] = s->cb[--s->ncb];
        int got = cl_plan_promote(s->pr_t, &enc, &s->grp[s->pr[i].g], s->m[s->pr[i].m].id,
                                  s->m[s->pr[i].sup].id, s->pr[i].p, cb_has, s);
        if (got < 0)
            rc = got;
        else if (got) {
            made++;
            note(s, "promote m%u for g%u p%u", s->pr[i].m, s->pr[i].g, s->pr[i].p);
        }
    }
    if (!rc && made && !(rc = cl_meta_enc_owners_end(&enc)))
        apply(s, &e);
    if (rc)
        violation(s, "promotion failed: %s", em_strerror(rc));
    s->promotions += made;
    em_buf_free(&e);
    cl_topo_release(s->pr_t);
    s->pr_t = NULL;
    s->npr = 0;
}

/* catch_up: an owner behind a new primary merges from it. */
static void catch_up(sim *s, unsigned i)
{
    task t = s->up[i];
    s->up[i] = s->up[--s->nup];
    uint32_t own[CL_PLAN_MAX_OWNERS], mv[CL_PLAN_MAX_OWNERS], nmv;
    uint32_t n = owners(s, s->cur, t.g, t.p, own, &nmv, mv);
    if (!n || !s->m[t.m].alive || !s->m[own[0]].alive || own[0] == t.m)
        return;
    take(&s->m[t.m].c[t.g][t.p], &s->m[own[0]].c[t.g][t.p]);
    note(s, "m%u caught up on g%u p%u from m%u", t.m, t.g, t.p, own[0]);
    if (s->nrep < MAXQ)         /* the ideal order may wait for it (cl_plan_promote) */
        s->rep[s->nrep++] = (task){ (uint8_t)t.m, (uint8_t)t.g, (uint8_t)t.p, version(s),
                                    (uint8_t)own[0] };
}

/* ---- one step ---- */

enum { A_WRITE, A_DELIVER, A_KILL, A_FAIL, A_JOIN, A_EXCH, A_LOAD, A_EVICT, A_PROMOTE,
       A_CATCHUP, A_BASELINE, A_N };

typedef struct act { uint8_t kind, a, b, c; } act;

static unsigned alive_count(const sim *s)
{
    unsigned n = 0;
    for (unsigned k = 0; k < s->nm; k++)
        n += s->m[k].alive;
    return n;
}

static int has_data(const copy *c)
{
    for (unsigned i = 0; i < MAXW / 8; i++)
        if (c->has[i])
            return 1;
    return 0;
}

/* settled: every partition on its ideal owners in their order, nothing
 * moving or pending. */
static int settled(sim *s, char *why, size_t wn)
{
    if (s->ex_state || s->nup || s->nrep || s->pr_t || version(s) != s->ex_done_id) {
        snprintf(why, wn, "work pending (exchange %d, %u catch-ups, %u reports)", s->ex_state,
                 s->nup, s->nrep);
        return 0;
    }
    for (unsigned k = 0; k < s->nm; k++)
        if (s->m[k].fail_pending) {
            snprintf(why, wn, "m%u not failed yet", k);
            return 0;
        }
    for (unsigned g = 0; g < NG; g++)
        for (unsigned p = 0; p < s->grp[g].parts; p++) {
            uint32_t own[CL_PLAN_MAX_OWNERS], mv[CL_PLAN_MAX_OWNERS], idl[CL_PLAN_MAX_OWNERS];
            uint32_t nmv, n = owners(s, s->cur, g, p, own, &nmv, mv);
            uint32_t ni = cl_plan_ideal(s->cur, &s->grp[g], p, idl);
            if (nmv || n != ni || cl_topo_part_dropped(s->cur, s->grp[g].grp, p)) {
                snprintf(why, wn, "g%u p%u: %u owners (ideal %u), %u moving%s", g, p, n, ni,
                         nmv, cl_topo_part_dropped(s->cur, s->grp[g].grp, p) ? ", dropped" : "");
                return 0;
            }
            for (uint32_t i = 0; i < n; i++)
                if ((int)own[i] != who(s, s->cur, idl[i]) || !s->m[own[i]].alive) {
                    snprintf(why, wn, "g%u p%u: owner %u is m%u, ideally m%d%s", g, p, i,
                             own[i], who(s, s->cur, idl[i]), s->m[own[i]].alive ? "" : " (dead)");
                    return 0;
                }
        }
    return 1;
}

/* actions: what may happen now (faults only when allowed). */
static unsigned actions(sim *s, act *a, int faults)
{
    unsigned n = 0;
    if (faults) {
        for (unsigned g = 0; g < NG; g++)
            a[n++] = (act){ A_WRITE, (uint8_t)g, (uint8_t)pick(s, s->grp[g].parts), 0 };
        unsigned alive = alive_count(s);
        /* Members outside the baseline hold nothing: only the others count
         * towards the copies a kill may take. */
        unsigned holders = 0;
        for (uint32_t j = 0; j < s->cur->n; j++)
            holders += s->cur->m[j].data && s->m[who(s, s->cur, j)].alive;
        if (s->kills_unsettled < s->grp[0].backups && holders > s->grp[0].backups + 1)
            for (unsigned k = 0; k < s->nm; k++)
                if (s->m[k].alive)
                    a[n++] = (act){ A_KILL, (uint8_t)k, 0, 0 };
        if (s->nm < MAXM && alive < MAXLIVE)
            a[n++] = (act){ A_JOIN, 0, 0, 0 };
        if (!pick(s, 4))
            a[n++] = (act){ A_BASELINE, 0, 0, 0 };
    }
    for (unsigned i = 0; i < s->nm; i++)
        for (unsigned j = 0; j < s->nm; j++)
            if (s->ln[i][j].n)
                a[n++] = (act){ A_DELIVER, (uint8_t)i, (uint8_t)j, 0 };
    for (unsigned k = 0; k < s->nm; k++) {
        unsigned out = 0;
        for (unsigned j = 0; j < s->nm; j++)
            out += s->ln[k][j].n;
        if (s->m[k].fail_pending && !out)
            a[n++] = (act){ A_FAIL, (uint8_t)k, 0, 0 };
    }
    /* The coordinator's exchange and its promotions exclude each other
     * (cl_node_decide_lock): neither decides on a snapshot the other is
     * about to change. */
    if ((s->ex_state || version(s) != s->ex_done_id) && !s->pr_t)
        a[n++] = (act){ A_EXCH, 0, 0, 0 };
    if ((s->nrep || s->pr_t) && !s->ex_state)
        a[n++] = (act){ A_PROMOTE, 0, 0, 0 };
    for (unsigned i = 0; i < s->nup; i++)
        a[n++] = (act){ A_CATCHUP, (uint8_t)i, 0, 0 };
    for (unsigned g = 0; g < NG; g++)
        for (unsigned p = 0; p < s->grp[g].parts; p++) {
            uint32_t own[CL_PLAN_MAX_OWNERS], mv[CL_PLAN_MAX_OWNERS], nmv;
            uint32_t no = owners(s, s->cur, g, p, own, &nmv, mv);
            int lost = cl_topo_part_lost(s->cur, s->grp[g].grp, p);
            for (unsigned k = 0; k < s->nm; k++) {
                member *m = &s->m[k];
                if (!m->alive)
                    continue;
                if (no && !lost && in(mv, nmv, k) && s->m[own[0]].alive) {
                    a[n++] = (act){ A_LOAD, (uint8_t)k, (uint8_t)g, (uint8_t)p };
                } else if (!in(mv, nmv, k)) {
                    m->load[g][p] = 0;     /* not loading it (any more) */
                    if (!in(own, no, k) && !lost && has_data(&m->c[g][p]))
                        a[n++] = (act){ A_EVICT, (uint8_t)k, (uint8_t)g, (uint8_t)p };
                }
            }
        }
    return n;
}

static void run(sim *s, const act *x)
{
    switch (x->kind) {
    case A_WRITE: write_one(s, x->a, x->b); break;
    case A_DELIVER: deliver(s, x->a, x->b); break;
    case A_KILL: kill_member(s, x->a); break;
    case A_FAIL: fail_member(s, x->a); break;
    case A_JOIN: join(s); break;
    case A_EXCH:
        if (s->ex_state == 0)
            ex_start(s);
        else if (s->ex_state == 1)
            ex_collect(s);
        else
            ex_commit(s);
        break;
    case A_LOAD: {
        uint32_t own[CL_PLAN_MAX_OWNERS], mv[CL_PLAN_MAX_OWNERS], nmv;
        (void)owners(s, s->cur, x->b, x->c, own, &nmv, mv);
        load_step(s, x->a, x->b, x->c, own);
        break;
    }
    case A_EVICT:
        memset(&s->m[x->a].c[x->b][x->c], 0, sizeof(copy));
        note(s, "m%u evicts g%u p%u", x->a, x->b, x->c);
        break;
    case A_PROMOTE:
        if (!s->pr_t)
            promote_start(s);
        else
            promote_commit(s);
        break;
    case A_CATCHUP: catch_up(s, x->a); break;
    case A_BASELINE: baseline_change(s); break;
    }
}

/* check: the invariants that hold after every step. */
static void check(sim *s)
{
    for (unsigned g = 0; g < NG; g++)
        for (unsigned p = 0; p < s->grp[g].parts; p++) {
            if (cl_topo_part_lost(s->cur, s->grp[g].grp, p)) {
                violation(s, "g%u p%u declared lost with %u kill(s) since the cluster "
                          "last settled (backups %u)", g, p, s->kills_unsettled,
                          s->grp[g].backups);
                continue;
            }
            uint32_t own[CL_PLAN_MAX_OWNERS], mv[CL_PLAN_MAX_OWNERS], nmv;
            uint32_t n = owners(s, s->cur, g, p, own, &nmv, mv);
            if (!n || !s->m[own[0]].alive)
                continue;
            const copy *c = &s->m[own[0]].c[g][p];
            for (unsigned w = 0; w < s->nw[g][p]; w++)
                if (bit(s->acked[g][p], w) && !bit(c->has, w)) {
                    violation(s, "acknowledged write w%u of g%u p%u is not on its primary m%u",
                              w, g, p, own[0]);
                    return;
                }
        }
}

/* final: faults over and everything run, the cluster settled and every
 * partition's owners hold the same writes; nobody else holds any. */
static void final(sim *s)
{
    char why[160];
    if (!settled(s, why, sizeof why)) {
        violation(s, "the cluster did not settle once the faults stopped: %s", why);
        return;
    }
    for (unsigned g = 0; g < NG; g++)
        for (unsigned p = 0; p < s->grp[g].parts; p++) {
            uint32_t own[CL_PLAN_MAX_OWNERS], mv[CL_PLAN_MAX_OWNERS], nmv;
            uint32_t n = owners(s, s->cur, g, p, own, &nmv, mv);
            for (uint32_t i = 0; i < n; i++)
                for (unsigned w = 0; w < s->nw[g][p]; w++)
                    if (bit(s->acked[g][p], w) && !bit(s->m[own[i]].c[g][p].has, w)) {
                        violation(s, "owner m%u of g%u p%u misses acknowledged write w%u",
                                  own[i], g, p, w);
                        return;
                    }
            for (uint32_t i = 1; i < n; i++)
                if (memcmp(s->m[own[i]].c[g][p].has, s->m[own[0]].c[g][p].has, MAXW / 8)) {
                    s->diverged++;
                    for (unsigned w = 0; w < s->nw[g][p]; w++)
                        if (bit(s->m[own[i]].c[g][p].has, w) != bit(s->m[own[0]].c[g][p].has, w))
                            note(s, "g%u p%u: m%u %s unacknowledged w%u, its primary m%u %s", g,
                                 p, own[i], bit(s->m[own[i]].c[g][p].has, w) ? "has" : "lacks",
                                 w, own[0], bit(s->m[own[0]].c[g][p].has, w) ? "has" : "lacks");
                }
            for (unsigned k = 0; k < s->nm; k++)
                if (s->m[k].alive && !in(own, n, k) && has_data(&s->m[k].c[g][p])) {
                    violation(s, "m%u keeps a copy of g%u p%u it does not own", k, g, p);
                    return;
                }
        }
}

static int run_seed(sim *s, uint64_t seed, unsigned steps, int verbose)
{
    cl_topo_release(s->cur);
    cl_meta_fsm_free(&s->f);
    em_buf_free(&s->ex_e);
    em_buf_free(&s->ex_behind);
    memset(s, 0, sizeof *s);
    sim_seed(&s->b, seed, verbose);
    cl_meta_fsm_init(&s->f);
    s->cur = cl_topo_empty();
    /* A partitioned group with 1 or 2 backups and a replicated one. */
    s->grp[0] = (cl_plan_group){ 101, 4 + pick(s, MAXP - 3), 1 + pick(s, 2), 0, 0 };
    s->grp[1] = (cl_plan_group){ 202, 2 + pick(s, 4), 0, 1, 0 };
    unsigned start = s->grp[0].backups + 2 + pick(s, 2);
    for (unsigned k = 0; k < start; k++)
        join(s);
    for (unsigned g = 0; g < NG; g++) {
        em_buf e = EM_BUF_INIT;
        if (cl_meta_enc_cache_start(&e, s->grp[g].grp, "cfg", 3) == 0)
            apply(s, &e);
        em_buf_free(&e);
    }
    act a[MAXM * MAXM + NG * MAXP * MAXM + 3 * MAXQ + 64];
    for (unsigned i = 0; i < steps && !s->b.violations; i++) {
        char why[160];
        /* Settled with a baseline node down is not whole: its copies stay
         * missing until it is removed from the baseline. */
        if (settled(s, why, sizeof why) && !cl_topo_baseline_offline(s->cur))
            s->kills_unsettled = 0;
        unsigned n = actions(s, a, 1);
        run(s, &a[pick(s, n)]);
        check(s);
    }
    /* Heal: no more faults or writes; every pending action runs. */
    unsigned quiet = 0;
    for (unsigned i = 0; i < 20000 && !s->b.violations; i++) {
        unsigned n = actions(s, a, 0);
        if (!n)
            break;
        run(s, &a[pick(s, n)]);
        check(s);
        quiet = i;
    }
    if (!s->b.violations)
        final(s);
    if (verbose)
        printf("seed %" PRIu64 ": trace %016" PRIx64 ", %" PRIu64 " writes, %" PRIu64
               " acknowledged, %" PRIu64 " joins, %" PRIu64 " kills, %" PRIu64
               " exchanges, %" PRIu64 " promotions, healed in %u steps%s\n", seed, s->b.trace,
               s->writes, s->acks, s->joins, s->kills, s->exchanges, s->promotions, quiet,
               s->diverged ? ", owners differ" : "");
    return s->b.violations ? 1 : 0;
}

static uint64_t tot_acks, tot_kills, tot_promos, tot_diverged, tot_bl;

static int run_one(uint64_t seed, unsigned steps, int verbose)
{
    int rc = run_seed(&S, seed, steps, verbose);
    tot_acks += S.acks;
    tot_kills += S.kills;
    tot_promos += S.promotions;
    tot_diverged += S.diverged;
    tot_bl += S.bl_changes;
    return rc;
}

static sim_base *base(void) { return &S.b; }

static void done(unsigned ran, unsigned steps, unsigned failed)
{
    cl_topo_release(S.cur);
    cl_meta_fsm_free(&S.f);
    em_buf_free(&S.ex_e);
    em_buf_free(&S.ex_behind);
    printf("sim-own: %u seeds, %u steps each: %" PRIu64 " acknowledged writes, %" PRIu64
           " kills, %" PRIu64 " promotions, %" PRIu64 " baseline changes, %" PRIu64
           " owners left with other unacknowledged writes than their primary: %u failed\n", ran,
           steps, tot_acks, tot_kills, tot_promos, tot_bl, tot_diverged, failed);
}

int main(int argc, char **argv)
{
    static const sim_def d = { "ember-sim-own", run_one, base, done };
    return sim_main(argc, argv, &d);
}
