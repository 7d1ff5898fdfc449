/* cl_rebal.c - rebalancing (protocol and rules in cl_rebal.h).
 *
 * One thread per node: it starts and times out this node's loads, serves
 * the demands of others (paging a scan cursor into batches), drops
 * partitions this node no longer holds a copy of, and, on the coordinator,
 * turns loaded copies into owners through the metadata group.  The
 * transport thread files demands and DONE reports, applies SUPPLY batches
 * and records the live stream's removals (cl_rebal_on_apply); both sides
 * meet under mu.
 *
 * Why a supplier needs no partition release before its snapshot: the
 * primary's write observer reads the topology under the partition's lock
 * when it streams a write, and the snapshot is copied under the same lock
 * after the supplier's topology has the demander MOVING, so a write ordered
 * after the copy reads that topology (or a later one) and streams to it.
 */
#include "cluster/cl_rebal.h"

#include <pthread.h>
#include <stdatomic.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "cluster/cl_hist.h"
#include "cluster/cl_keyset.h"
#include "cluster/cl_meta_fsm.h"
#include "cluster/cl_net.h"
#include "cluster/cl_plan.h"
#include "cluster/cl_pset.h"
#include "cluster/cl_rmsg.h"
#include "cluster/cl_take.h"
#include "util/clock.h"
#include "util/err.h"
#include "util/hash.h"
#include "util/log.h"
#include "util/mem.h"
#include "wal/wal.h"

#define BATCH_DEFAULT   (512u << 10)
#define MAX_LOADS       4096        /* partitions loading here at once */
#define IX_CAP          (2 * MAX_LOADS) /* the loads' index: a power of two, half full at most */
#define MAX_QUEUE       4096        /* demands / reports waiting */
#define RETRY_MS        2000        /* a demand unanswered this long goes again */
#define DONE_EVERY_MS   300         /* a loaded copy reports until it owns */
#define MAX_OWN         256
#define MAX_UP          256         /* members whose links the rebalancer tracks */
#define MAX_STALE       4096        /* stale copies reported at once */
#define STALE_WAIT_MS   5000        /* a stale copy waits this long to stop being primary */
#define MAX_BEHIND      4096        /* coordinator: owners its last decision found behind */
#define MAX_OWNER_DONE  256         /* caught-up owners whose report waits for a checkpoint */
#define OWNER_DONE_MS   60000       /* ... this long at most (then the next exchange switches) */
#define MAX_MOVING_GRPS 512         /* groups whose rebalancing the coordinator times */
#define MAX_PREFETCH    16          /* batches sent ahead of the demands, at most */
#define MAX_THROTTLE_MS 10000       /* pause between two batches, at most */
#define F_LAST          CL_RMSG_F_LAST
#define F_AGAIN         CL_RMSG_F_AGAIN
#define F_HIST          CL_RMSG_F_HIST
/* A DEMAND's seq: the load's pass in the high byte, the batch below it.
 * Each start from the first batch is a new pass, so a batch still in
 * flight from an earlier snapshot never joins the new one's (keys between
 * the two snapshots' batch boundaries would be missed). */
#define SEQ_BATCH       0x00ffffffu

/* A MOVING copy that already holds entries (a demoted owner's, an earlier
 * load's, one the coordinator was told is whole) is never cleared: it may be
 * an owner in a row committed from a stale view, or the only copy of
 * acknowledged writes; it loads as a merge (catching up, below), which
 * ends equal to the supplier's snapshot plus the live stream, as a load
 * into an empty copy does.  (Clearing first made owners with counters and
 * no entries, primaries among them, under TSan: the exchange's and the
 * rebalancer's owner rows are each computed from the view they had.) */
enum { L_DEMANDING = 1, L_LOADED = 2 };

typedef struct load {
    int32_t      grp;
    uint32_t     part;
    cl_meta_uuid supplier;
    uint32_t     seq;           /* the SUPPLY expected next (pass << 24 | batch) */
    int          state;
    uint64_t     sent_ms;       /* last DEMAND (or DONE) sent */
    uint64_t     gen;           /* the kick it was last confirmed in */
    int          restart;       /* the live stream skipped updates: load again */
    int          merge;         /* an owned copy catching up (see catch-up below) */
    /* reported: this copy sent DONE, and the coordinator may make it an
     * owner whenever a report arrives - even one sent before the copy
     * missed updates.  It is never emptied again: it catches up in place
     * (a merge), then reports again. */
    int          reported;
    int          moving;        /* a MOVING copy's load: reports DONE once whole */
    cl_keyset    live;          /* keys the live stream removed (merge: or wrote) */
    cl_keyset    seen;          /* merge: keys the supplier sent */
    int          seen_full;     /* merge: seen overflowed, no sweep */
    uint64_t     live_max;      /* merge: the highest counter the live stream brought */
    /* Historical: the copy's claim (cl_hist.h), sent opening each pass
     * while has_claim; pgen, the partial set's generation that holds this
     * partition (nothing applies before the file has it). */
    int          has_claim;
    cl_hist_claim claim;
    uint64_t     pgen;
    uint64_t     unlogged;      /* entries it changed that the WAL does not have */
    uint64_t     ckpt_need;     /* loaded: reports once this many checkpoints completed */
} load;

typedef struct demand {
    cl_meta_uuid from;
    cl_meta_uuid sup;           /* REBAL_DONE: the member the copy loaded from */
    int32_t grp;
    uint32_t part, seq;
    int has_claim;
    cl_hist_claim claim;
} demand;

typedef struct send {
    cl_meta_uuid to;
    int32_t      grp;
    uint32_t     part, seq;
    uint64_t     cntr;          /* the partition's counter when the snapshot began */
    st_scan     *sc;            /* a snapshot's scan, or */
    em_buf       hist;          /* records from the log (historical), */
    size_t       hist_at;       /*   sent up to here */
    struct send *next;
} send;

struct cl_rebal {
    cl_rebal_cfg cfg;
    pthread_t    th;
    int          started;
    pthread_mutex_t mu;
    pthread_cond_t  cv;
    int          stop, kicked;
    uint64_t     gen;
    load        *loads;
    uint32_t     nloads;
    /* ix: open addressing over (group, partition), load index + 1; every
     * partition scan and every live update looks a load up, so a linear
     * search (4096 loads x every partition of every cache) held mu, and
     * with it the transport thread, for seconds.  Rebuilt after drops. */
    uint32_t     ix[IX_CAP];
    int          ix_stale;
    demand       dq[MAX_QUEUE];
    uint32_t     ndq;
    demand       done_q[MAX_QUEUE];   /* coordinator: REBAL_DONE reports */
    uint32_t     ndone;
    send        *sends;             /* rebalancing thread only */
    /* Frames decided under mu go out after it is released (flush): a send
     * enters the node, and a thread inside the node (the metadata thread
     * publishing a topology, the transport delivering a frame) may be
     * waiting for mu - sending under it would order the two locks both ways. */
    /* Frames decided under mu, sent after it: room for a demand per load
     * and the reports beside them (a join makes thousands of loads at once;
     * a queue of 256 dropped the rest until their 2 s retry). */
    struct outq {
        cl_meta_uuid to;
        uint16_t type;
        uint8_t n;
        uint8_t b[CL_RMSG_DEMAND + CL_RMSG_CLAIM];      /* the largest: a DEMAND with a claim */
    } oq[MAX_LOADS + 256];
    uint32_t     noq;
    cl_meta_uuid up[MAX_UP];    /* members with a link up (links_refresh) */
    uint32_t     nup;
    /* Copies of this node found stale (cl_rebal_copy_stale), until
     * stale_begin starts their catching up. */
    /* avoid: not from this node (a deposed primary, cl_rebal_copy_fenced) */
    struct stale { int32_t grp; uint32_t part; uint64_t at_ms; cl_meta_uuid avoid; } stale[MAX_STALE];
    uint32_t     nstale;
    /* Coordinator: the owners its last decision found behind a new
     * primary (cl_rebal_note_behind), until each reports caught up; the
     * promotions do not make one of them primary meanwhile. */
    struct behind { cl_meta_uuid m; int32_t grp; uint32_t part; uint64_t exch; } *behind;
    uint32_t     nbehind;
    /* Caught-up owners of persistent caches whose report waits for a
     * checkpoint (durable_wait), sent by the pass once it completed. */
    struct owner_done { int32_t grp; uint32_t part; cl_meta_uuid sup; uint64_t ckpt_need, at_ms; }
                 owner_done[MAX_OWNER_DONE];
    uint32_t     nowner_done;
    _Atomic int  quiet;             /* nothing stale, merging or waiting to report,
                                       as of the last unlock */
    int          stale_full;        /* the stale list overflowed once (logged) */
    _Atomic uint32_t nmerge;        /* merge loads: the live stream's writes are recorded */
    /* Historical rebalancing: the partitions whose copy on disk may be
     * incomplete (a load applied to them, and no checkpoint begun after it
     * finished has completed: need, its number; 0 while loading), mirrored
     * in cfg.pset_path before a load applies anything (pgen_durable). */
    struct partial { int32_t grp; uint32_t part; uint64_t gen, need; int dirty; } *partial;
    uint32_t     npartial, partial_cap;
    uint64_t     pgen, pgen_durable;
    uint64_t     ckpt_asked_ms;     /* a checkpoint last asked for (durable_wait) */
    int          pdirty;            /* entries dropped since the file was written */
    int          no_claims;         /* the file was missing or bad: no history this life */
    int          partial_all;       /* the set overflowed: the file says "every partition" */
    int          pset_warned;
    char         pset_path[1024];
    char         hold[256];     /* cfg.hold, copied */
    em_buf       out;               /* rebalancing thread: a SUPPLY being built */
    /* Groups seen with MOVING copies (rebalancing thread, under mu): the
     * coordinator logs one line when one has none left (finished). */
    struct mgrp { int32_t grp; uint64_t since_ms, gen; } mgrp[MAX_MOVING_GRPS];
    uint32_t     nmgrp;
    cl_rebal_stats st;
};

static int in_list(const uint32_t *a, uint32_t n, int self)
{
    for (uint32_t i = 0; i < n; i++)
        if ((int)a[i] == self)
            return 1;
    return 0;
}

static void lock(cl_rebal *r) { pthread_mutex_lock(&r->mu); }
/* unlock mirrors "no copy catches up" (nothing stale, merging or waiting
 * to report) into quiet, so cl_rebal_copy_is_stale (every read from
 * backups asks) takes no lock in the steady state, nor while MOVING copies
 * load: those are not owners, and reads never reach them. */
static void unlock(cl_rebal *r)
{
    atomic_store_explicit(&r->quiet, !r->nstale && !r->nowner_done &&
                          !atomic_load_explicit(&r->nmerge, memory_order_relaxed),
                          memory_order_relaxed);
    pthread_mutex_unlock(&r->mu);
}

/* ---- historical rebalancing: claims and the partial set ----
 *
 * A persistent copy that comes back (its node restarted) claims, when its
 * load opens, the last counter its WAL's replay brought and a digest of the
 * updates before it (cl_hist_get_claim); a supplier whose log holds the
 * same updates at those counters and every one after sends those only
 * (F_HIST batches: update records, applied as a merge - a key the live
 * stream touched since the demand is left alone - with no sweep), else the
 * whole partition as before.
 *
 * A claim is only as good as the copy on disk under it: a load applies
 * entries the WAL does not log, so until a checkpoint begun after the load
 * finished has completed, the copy on disk is not whole, and a restart
 * must not claim it.  Those partitions are kept in a file (cl_pset), which
 * has each before its load applies anything (pgen_durable); at start the
 * file's partitions get no claim.  A missing or unreadable file: no claims
 * this process life (every returning partition loads whole, and the file
 * is right from here on). */

#define ALL_GRP INT32_MIN           /* in the file: the set overflowed, no claims */

static int hist_on(const cl_rebal *r)
{
    return r->cfg.hist && r->cfg.ckpts && r->pset_path[0];
}

static int persistent(cl_rebal *r, int32_t grp)
{
    st_cache *c = st_cache_find(r->cfg.store, grp);
    return c && !st_cache_in_memory(c);
}

static struct partial *partial_find(cl_rebal *r, int32_t grp, uint32_t part)
{
    for (uint32_t i = 0; i < r->npartial; i++)
        if (r->partial[i].grp == grp && r->partial[i].part == part)
            return &r->partial[i];
    return NULL;
}

/* take_claim: what l's copy claims, if it can (under mu, before
 * partial_add ends the partition's run). */
static void take_claim(cl_rebal *r, load *l)
{
    l->has_claim = hist_on(r) && !r->no_claims && persistent(r, l->grp) &&
                   !partial_find(r, l->grp, l->part) &&
                   cl_hist_get_claim(r->cfg.hist, l->grp, l->part, &l->claim) == 0;
}

/* partial_add: l's copy is about to change by a load (under mu): it joins
 * the partial set and its history run ends. */
static void partial_add(cl_rebal *r, load *l)
{
    l->pgen = 0;
    if (!hist_on(r) || !persistent(r, l->grp))
        return;
    cl_hist_reset(r->cfg.hist, l->grp, l->part);
    struct partial *p = partial_find(r, l->grp, l->part);
    if (p) {
        p->need = 0;                /* loading again */
        l->pgen = p->gen;
        return;
    }
    if (r->npartial == r->partial_cap && r->npartial < CL_PSET_MAX - 1) {
        uint32_t cap = r->partial_cap ? 2 * r->partial_cap : 256;
        struct partial *np = em_realloc(r->partial, sizeof *np * cap);
        if (np) {
            r->partial = np;
            r->partial_cap = cap;
        }
    }
    if (r->npartial == r->partial_cap) {
        /* No room: the file says "every partition" until a restart. */
        if (!r->partial_all)
            r->pgen++;
        r->partial_all = 1;
        r->no_claims = 1;
        l->pgen = r->pgen;
        return;
    }
    r->partial[r->npartial++] = (struct partial){ l->grp, l->part, ++r->pgen, 0, 0 };
    l->pgen = r->pgen;
}

/* partial_mark: what l applied that the WAL does not have keeps its
 * partition in the set until a checkpoint takes it (under mu; a load that
 * ends or is dropped). */
static void partial_mark(cl_rebal *r, load *l)
{
    struct partial *p = l->unlogged && hist_on(r) ? partial_find(r, l->grp, l->part) : NULL;
    if (p)
        p->dirty = 1;
    l->unlogged = 0;
}

/* partial_done: l's load finished (under mu): its partition leaves the set
 * once the next checkpoint to begin has completed - at once when no load
 * since it entered changed anything (an empty supplier): the WAL has all
 * the copy holds. */
static void partial_done(cl_rebal *r, load *l)
{
    partial_mark(r, l);
    struct partial *p = hist_on(r) ? partial_find(r, l->grp, l->part) : NULL;
    if (p && !p->dirty) {
        *p = r->partial[--r->npartial];
        r->pdirty = 1;
    } else if (p) {
        uint64_t started = 0, done = 0;
        r->cfg.ckpts(r->cfg.ckpts_arg, &started, &done);
        p->need = started + 1;
    }
}

/* ckpts_done: the checkpoints completed so far (*started: begun), 0 without persistence. */
static uint64_t ckpts_done(cl_rebal *r, uint64_t *started)
{
    uint64_t s = 0, done = 0;
    if (r->cfg.ckpts)
        r->cfg.ckpts(r->cfg.ckpts_arg, &s, &done);
    if (started)
        *started = s;
    return done;
}

/* durable_wait: l's load finished (under mu, before partial_done).  What
 * it applied to a persistent cache is not in the WAL: until a checkpoint
 * begun after now has completed, a power loss would take it, and the
 * copies this one replaces are evicted once it owns the partition.  So it
 * reports itself loaded only then (durable), as Ignite's rebalanced
 * partitions own after the checkpoint that follows; one is asked for now. */
static void durable_wait(cl_rebal *r, load *l)
{
    if (!l->unlogged || !r->cfg.ckpts || !persistent(r, l->grp))
        return;                     /* (a wait already set stays) */
    uint64_t started = 0;
    (void)ckpts_done(r, &started);
    if (l->ckpt_need < started + 1)
        l->ckpt_need = started + 1;
    r->ckpt_asked_ms = em_now_ms();
    if (r->cfg.ckpt_now)
        r->cfg.ckpt_now(r->cfg.ckpts_arg);
}

/* durable: l's copy may report (done: the checkpoints completed, read
 * once by the caller). */
static int durable(load *l, uint64_t done)
{
    if (done < l->ckpt_need)
        return 0;
    l->ckpt_need = 0;
    return 1;
}

/* ckpt_again (the pass, under mu): loads wait for a checkpoint and none is
 * running - the one asked for failed (it leaves no error behind), or never
 * ran: ask again, once a second at most. */
static void ckpt_again(cl_rebal *r, uint64_t started, uint64_t done, int waiting)
{
    uint64_t now = em_now_ms();
    if (!waiting || started != done || !r->cfg.ckpt_now || now - r->ckpt_asked_ms < 1000)
        return;
    r->ckpt_asked_ms = now;
    r->cfg.ckpt_now(r->cfg.ckpts_arg);
}

/* load_finished: l's copy is whole in memory (under mu). */
static void load_finished(cl_rebal *r, load *l)
{
    durable_wait(r, l);
    partial_done(r, l);
}

/* partial_sync (rebalancing thread, not under mu): drops the partitions a
 * checkpoint made whole on disk and writes the file when the set changed. */
static void partial_sync(cl_rebal *r)
{
    if (!hist_on(r))
        return;
    uint64_t started = 0, done = 0;
    r->cfg.ckpts(r->cfg.ckpts_arg, &started, &done);
    lock(r);
    for (uint32_t i = 0; i < r->npartial;) {
        if (r->partial[i].need && done >= r->partial[i].need) {
            r->partial[i] = r->partial[--r->npartial];
            r->pdirty = 1;
        } else {
            i++;
        }
    }
    if (!r->pdirty && r->pgen_durable == r->pgen) {
        unlock(r);
        return;
    }
    uint32_t n = r->npartial;
    cl_pset_item *v = em_malloc(sizeof *v * (n + 1));
    if (!v) {
        unlock(r);
        return;
    }
    for (uint32_t i = 0; i < n; i++)
        v[i] = (cl_pset_item){ r->partial[i].grp, r->partial[i].part };
    if (r->partial_all)
        v[n++] = (cl_pset_item){ ALL_GRP, UINT32_MAX };
    uint64_t gen = r->pgen;
    r->pdirty = 0;
    unlock(r);
    int rc = cl_pset_save(r->pset_path, v, n);
    em_free(v);
    lock(r);
    if (rc) {
        r->pdirty = 1;
        if (!r->pset_warned)
            EM_WARN("rebalancing: cannot write %s: %s; loads of persistent caches wait for it",
                    r->pset_path, em_strerror(rc));
        r->pset_warned = 1;
    } else if (gen > r->pgen_durable) {
        r->pgen_durable = gen;
    }
    unlock(r);
}

/* partial_open reads the file at start: its partitions claim nothing. */
static void partial_open(cl_rebal *r)
{
    cl_pset_item *v = NULL;
    uint32_t n = 0;
    int rc = cl_pset_load(r->pset_path, &v, &n);
    if (rc) {
        if (rc != EM_NOTFOUND)
            EM_WARN("rebalancing: %s unreadable (%s): no historical rebalancing until the "
                    "next restart", r->pset_path, em_strerror(rc));
        r->no_claims = 1;
        r->pdirty = 1;              /* written on the first pass */
        return;
    }
    for (uint32_t i = 0; i < n; i++) {
        if (v[i].cache == ALL_GRP) {
            r->no_claims = 1;
            r->pdirty = 1;
            continue;
        }
        if (r->npartial == r->partial_cap) {
            uint32_t cap = r->partial_cap ? 2 * r->partial_cap : 256;
            struct partial *np = em_realloc(r->partial, sizeof *np * cap);
            if (!np) {
                r->no_claims = 1;
                break;
            }
            r->partial = np;
            r->partial_cap = cap;
        }
        r->partial[r->npartial++] = (struct partial){ v[i].cache, v[i].part, 0, 0, 1 };
        cl_hist_reset(r->cfg.hist, v[i].cache, v[i].part);
    }
    em_free(v);
    EM_INFO("rebalancing: %u partitions loaded since their copy was last whole on disk; "
            "historical rebalancing %s", r->npartial, r->no_claims ? "off until a restart" : "on");
}

/* load_reset forgets what a load learnt: it starts over, a new pass from
 * its first batch. */
static void load_reset(load *l)
{
    cl_keyset_reset(&l->live);
    cl_keyset_reset(&l->seen);
    l->seen_full = 0;
    l->live_max = 0;
    l->seq = ((l->seq >> 24) + 1) << 24;
}

static uint32_t ix_slot(int32_t grp, uint32_t part)
{
    return ((uint32_t)grp * 0x9E3779B1u ^ (part + 1) * 0x85EBCA77u) & (IX_CAP - 1);
}

static void ix_add(cl_rebal *r, uint32_t i)
{
    uint32_t h = ix_slot(r->loads[i].grp, r->loads[i].part);
    while (r->ix[h])
        h = (h + 1) & (IX_CAP - 1);
    r->ix[h] = i + 1;
}

static load *load_find(cl_rebal *r, int32_t grp, uint32_t part)
{
    if (r->ix_stale) {
        memset(r->ix, 0, sizeof r->ix);
        for (uint32_t i = 0; i < r->nloads; i++)
            ix_add(r, i);
        r->ix_stale = 0;
    }
    for (uint32_t h = ix_slot(grp, part); r->ix[h]; h = (h + 1) & (IX_CAP - 1)) {
        load *l = &r->loads[r->ix[h] - 1];
        if (l->grp == grp && l->part == part)
            return l;
    }
    return NULL;
}

/* load_new: a fresh load of (grp, part), which load_find did not find. */
static load *load_new(cl_rebal *r, int32_t grp, uint32_t part)
{
    if (r->nloads >= MAX_LOADS)
        return NULL;
    load *l = &r->loads[r->nloads];
    memset(l, 0, sizeof *l);
    l->grp = grp;
    l->part = part;
    if (!r->ix_stale)
        ix_add(r, r->nloads);
    r->nloads++;
    return l;
}

static void load_drop(cl_rebal *r, load *l)
{
    partial_mark(r, l);             /* what it applied stays on the copy */
    if (l->merge)
        atomic_fetch_sub(&r->nmerge, 1);
    cl_keyset_free(&l->live);
    cl_keyset_free(&l->seen);
    *l = r->loads[--r->nloads];
    r->ix_stale = 1;
}

/* ---- messages ---- */

/* queue: a frame to send once mu is released (under mu).  A full queue
 * drops it: the sender's timer sends it again. */
static void queue(cl_rebal *r, cl_meta_uuid to, uint16_t type, const uint8_t *b, uint8_t n)
{
    if (r->noq >= sizeof r->oq / sizeof r->oq[0] || n > sizeof r->oq[0].b)
        return;
    struct outq *q = &r->oq[r->noq++];
    q->to = to;
    q->type = type;
    q->n = n;
    memcpy(q->b, b, n);
}

/* flush sends what was queued (not under mu). */
static void flush(cl_rebal *r)
{
    struct outq q[256];
    for (;;) {
        lock(r);
        uint32_t n = r->noq < 256 ? r->noq : 256;
        memcpy(q, r->oq, sizeof q[0] * n);
        memmove(r->oq, r->oq + n, sizeof q[0] * (r->noq - n));
        r->noq -= n;
        unlock(r);
        if (!n)
            return;
        for (uint32_t i = 0; i < n; i++)
            (void)cl_node_send(r->cfg.node, q[i].to, q[i].type, q[i].b, q[i].n);
    }
}

static void send_demand(cl_rebal *r, load *l)
{
    uint8_t b[CL_RMSG_DEMAND + CL_RMSG_CLAIM];
    cl_rmsg_demand d = { l->grp, l->part, l->seq, 0, { 0, 0, 0 } };
    if (l->has_claim && !(l->seq & SEQ_BATCH)) {    /* opening a pass: the claim */
        d.has_claim = 1;
        d.claim = l->claim;
    }
    size_t n = cl_rmsg_demand_put(b, &d);
    l->sent_ms = em_now_ms();
    queue(r, l->supplier, CL_NET_MSG_REBAL_DEMAND, b, (uint8_t)n);
}

/* demand_when_up: send_demand once this node has a link to the supplier;
 * without one (a joined node's mesh is still forming) the frame would be
 * dropped and wait out RETRY_MS, so the load asks again 100 ms later (as
 * it does while cfg.hold's file exists).  r->up is the rebalancer thread's
 * view of the links (refreshed before it takes mu: cl_node_link_up takes
 * the node's lock). */
static void demand_when_up(cl_rebal *r, load *l)
{
    int held = r->hold[0] && access(r->hold, F_OK) == 0;   /* tests: cfg.hold */
    for (uint32_t i = 0; i < r->nup && !held; i++)
        if (cl_meta_uuid_eq(r->up[i], l->supplier)) {
            send_demand(r, l);
            return;
        }
    l->sent_ms = em_now_ms() - RETRY_MS + 100;
}

/* links_refresh fills r->up with the members this node has a link to (not
 * under mu). */
static void links_refresh(cl_rebal *r)
{
    cl_meta_uuid up[MAX_UP];
    uint32_t n = 0;
    cl_topo *t = cl_node_topo_acquire(r->cfg.node);
    for (uint32_t i = 0; i < t->n && n < MAX_UP; i++)
        if ((int)i != t->self && cl_node_link_up(r->cfg.node, t->m[i].id))
            up[n++] = t->m[i].id;
    cl_node_topo_release(t);
    lock(r);
    memcpy(r->up, up, sizeof up[0] * n);
    r->nup = n;
    unlock(r);
}

/* send_done reports a loaded copy to the coordinator (under mu).  The
 * coordinator's own copies are filed here: the transport has no link to
 * itself, and a report sent there was dropped, so a copy the coordinator
 * loaded stayed MOVING for good. */
static void send_report(cl_rebal *r, int32_t grp, uint32_t part, cl_meta_uuid sup,
                        cl_meta_uuid leader)
{
    uint8_t b[CL_RMSG_DONE];
    cl_rmsg_done_put(b, grp, part, sup.msb, sup.lsb);
    cl_meta_uuid self = cl_node_id(r->cfg.node);
    if (!cl_meta_uuid_eq(leader, self))
        queue(r, leader, CL_NET_MSG_REBAL_DONE, b, sizeof b);
    else if (r->ndone < MAX_QUEUE)
        r->done_q[r->ndone++] = (demand){ .from = self, .sup = sup, .grp = grp, .part = part };
}

static void send_done(cl_rebal *r, load *l, cl_meta_uuid leader)
{
    l->reported = 1;
    l->sent_ms = em_now_ms();
    send_report(r, l->grp, l->part, l->supplier, leader);
}

/* owner_done_pass (the pass, under mu): the caught-up owners whose report
 * waited for a checkpoint (or a leader) send it now; 1 while one still
 * waits for a checkpoint. */
static int owner_done_pass(cl_rebal *r, uint64_t done, int have_lid, cl_meta_uuid lid,
                           uint64_t now)
{
    int waiting = 0;
    for (uint32_t i = 0; i < r->nowner_done; i++) {
        struct owner_done *o = &r->owner_done[i];
        int ready = have_lid && done >= o->ckpt_need;
        if (ready)
            send_report(r, o->grp, o->part, o->sup, lid);
        if (ready || now - o->at_ms >= OWNER_DONE_MS)
            r->owner_done[i--] = r->owner_done[--r->nowner_done];
        else
            waiting |= done < o->ckpt_need;
    }
    return waiting;
}

/* ---- catching up ----
 *
 * A backup's copy that misses updates (its stream gave up a gap or refused
 * one; the exchange found it behind the new primary after a failover)
 * still holds every acknowledged write - a FULL_SYNC write is acknowledged
 * only once every owner applied it - so it stays an owner (it still counts
 * for FULL_SYNC and can be promoted) and catches up in place: a merge load
 * from the primary.  While it runs, every key the live stream writes or
 * removes is recorded (live); a supplied entry overwrites the copy's unless
 * the live stream touched its key since the demand (the stream then holds
 * something at least as new), and at the last batch the keys the copy has
 * that were neither supplied nor touched are dropped.  The stream and the
 * supplies of one primary arrive in order over one link and are applied on
 * the transport thread, so no live write slips between a check and a
 * store.  Until it is done, the copy reports counter 0 to the exchange. */

/* merge_begin makes l a merge load from supplier, from its first batch. */
static void merge_begin(cl_rebal *r, load *l, cl_meta_uuid supplier)
{
    if (!l->merge) {
        l->merge = 1;
        atomic_fetch_add(&r->nmerge, 1);
    }
    l->supplier = supplier;
    l->state = L_DEMANDING;
    l->restart = 0;
    load_reset(l);
    take_claim(r, l);
    partial_add(r, l);
    demand_when_up(r, l);
}

/* stale_begin starts what the stale copies reported since need (under mu):
 * a merge load for a backup owner's copy, a fresh start for a loading one.
 * One whose partition still waits for the exchange's decision waits, and
 * so, for STALE_WAIT_MS, does one this node is the primary of (a deposed
 * primary hears of it before its topology says so); then it is dropped.
 * One told by a deposed primary (avoid) waits as long while that node is
 * the primary here, then catches up from whoever is. */
static void stale_begin(cl_rebal *r, cl_topo *t, uint64_t now)
{
    for (uint32_t i = 0; i < r->nstale;) {
        struct stale *x = &r->stale[i];
        st_cache *c = st_cache_find(r->cfg.store, x->grp);
        uint32_t own[MAX_OWN], no = 0;
        if (c && t->self >= 0)
            no = cl_topo_owners(t, x->grp, st_cache_parts(c), 0, 0, x->part, own, MAX_OWN);
        int avoided = no && cl_meta_uuid_eq(t->m[own[0]].id, x->avoid);
        if (c && (cl_topo_part_dropped(t, x->grp, x->part) ||
                  (no && ((int)own[0] == t->self || avoided) && now - x->at_ms < STALE_WAIT_MS))) {
            i++;
            continue;
        }
        load *l = load_find(r, x->grp, x->part);
        if (l && !l->merge && l->state != L_LOADED) {
            l->restart = 1;               /* MOVING: its load starts over (a merge: never emptied) */
            r->kicked = 1;
        } else if (l && (!l->merge || l->reported)) {
            /* Loaded and reported: it may be made an owner any moment, so
             * it is never emptied again - it catches up instead (again, if
             * it was catching up: its pass may predate the skipped update),
             * from the primary. */
            merge_begin(r, l, no && (int)own[0] != t->self ? t->m[own[0]].id : l->supplier);
        } else if (no >= 2 && (int)own[0] != t->self && in_list(own, no, t->self)) {
            if (!l)
                l = load_new(r, x->grp, x->part);
            if (l) {
                l->gen = r->gen;
                merge_begin(r, l, t->m[own[0]].id);
            }
        }
        *x = r->stale[--r->nstale];
    }
}

/* sweep_key collects a key of the copy that the merge neither was sent nor
 * saw the live stream touch. */
typedef struct sweep_ctx { const load *l; em_buf *drop; int err; } sweep_ctx;
static int sweep_key(void *arg, const uint8_t *k, size_t kl, const uint8_t *v, size_t vl,
                     int64_t exp)
{
    (void)v, (void)vl, (void)exp;
    sweep_ctx *x = arg;
    if (cl_keyset_has(&x->l->seen, k, (uint32_t)kl) || cl_keyset_has(&x->l->live, k, (uint32_t)kl))
        return 0;
    uint8_t h[4];
    em_st32(h, (uint32_t)kl);
    if (em_buf_append(x->drop, h, 4) || em_buf_append(x->drop, k, kl))
        x->err = EM_NOMEM;
    return x->err;
}

/* merge_sweep drops the keys the primary no longer has (the last batch of
 * a merge load; transport thread, under mu). */
static int merge_sweep(cl_rebal *r, load *l, st_cache *c)
{
    if (l->seen_full) {
        EM_WARN("rebalancing: cache %d partition %u caught up without dropping removed keys "
                "(more than %u keys)", l->grp, l->part, CL_KEYSET_MAX);
        return 0;
    }
    em_buf drop = EM_BUF_INIT;
    st_scan *sc = NULL;
    sweep_ctx x = { l, &drop, 0 };
    int more = 1, rc = st_scan_open(c, (int32_t)l->part, &sc);
    while (!rc && more && !x.err)
        rc = st_scan_next_page_exp(sc, 256, sweep_key, &x, &more);
    if (sc)
        st_scan_close(sc);
    rc = rc ? rc : x.err;
    for (size_t at = 0; !rc && at + 4 <= drop.len;) {
        uint32_t kl = em_ld32(drop.p + at);
        st_update u = {.kind = ST_UPD_REMOVE, .cache_id = l->grp, .partition = l->part,
                       .key = drop.p + at + 4, .klen = kl};
        int done = 0;
        rc = st_apply_load(r->cfg.store, &u, 0, &done);
        l->unlogged += (uint64_t)done;
        at += 4u + kl;
    }
    em_buf_free(&drop);
    return rc == EM_NOCACHE ? 0 : rc;   /* the cache went meanwhile */
}

/* apply_supply applies one SUPPLY batch to load l (checked first). */
static int apply_supply(cl_rebal *r, load *l, const uint8_t *p, size_t n, uint32_t cnt)
{
    size_t off = 0;
    cl_rmsg_entry e;
    for (uint32_t i = 0; i < cnt; i++) {
        if (cl_rmsg_entry_next(p, n, &off, &e) != 1)
            return EM_TRUNCATED;
        if (cl_keyset_has(&l->live, e.key, e.klen))
            continue;               /* the live stream removed (merge: or wrote) it meanwhile */
        if (l->merge && !l->seen_full && cl_keyset_add(&l->seen, e.key, e.klen))
            l->seen_full = 1;
        st_update u = {.kind = ST_UPD_PUT, .cache_id = l->grp, .partition = l->part,
                       .key = e.key, .klen = e.klen, .val = e.val, .vlen = e.vlen,
                       .expire_at_ms = e.expire_at_ms};
        int done = 0, rc = st_apply_load(r->cfg.store, &u, l->merge, &done);
        if (rc && rc != EM_NOCACHE)
            return rc;
        r->st.entries_in += (uint64_t)done;
        l->unlogged += (uint64_t)done;
    }
    return off == n ? 0 : EM_TRAILING;
}

/* primary_here: this node is the partition's primary on its topology now
 * (takes the node's lock: never under mu). */
static int primary_here(cl_rebal *r, int32_t grp, uint32_t part)
{
    st_cache *c = st_cache_find(r->cfg.store, grp);
    if (!c)
        return 0;
    cl_topo *t = cl_node_topo_acquire(r->cfg.node);
    uint32_t own[MAX_OWN];
    uint32_t no = t->self >= 0
                      ? cl_topo_owners(t, grp, st_cache_parts(c), 0, 0, part, own, MAX_OWN) : 0;
    int p = no && (int)own[0] == t->self;
    cl_node_topo_release(t);
    return p;
}

/* apply_hist applies one F_HIST batch (update records from the supplier's
 * log) to merge load l: a key the live stream touched since the demand is
 * left alone, as in a merge. */
static int apply_hist(cl_rebal *r, load *l, const uint8_t *p, size_t n, uint32_t cnt)
{
    size_t off = 0;
    for (uint32_t i = 0; i < cnt; i++) {
        const uint8_t *rec;
        uint32_t len;
        if (cl_rmsg_rec_next(p, n, &off, &rec, &len) != 1)
            return EM_TRUNCATED;
        wal_cmd cmd;
        st_update u;
        st_cache_config vcfg;
        int rc = wal_cmd_unmarshal(rec, len, &cmd);
        if (!rc)
            rc = wal_decode_update(&cmd, &u, &vcfg);
        if (rc || u.cache_id != l->grp || u.partition != l->part ||
            (u.kind != ST_UPD_PUT && u.kind != ST_UPD_REMOVE))
            return EM_PROTO;
        if (cl_keyset_has(&l->live, u.key, u.klen))
            continue;
        int done = 0;
        rc = st_apply_load(r->cfg.store, &u, 1, &done);
        if (rc && rc != EM_NOCACHE)
            return rc;
        r->st.entries_in += (uint64_t)done;
        l->unlogged += (uint64_t)done;
        r->st.hist_entries_in++;
    }
    return off == n ? 0 : EM_TRAILING;
}

static int on_supply(cl_rebal *r, cl_meta_uuid from, const uint8_t *p, size_t n)
{
    cl_rmsg_supply m;
    int rc = cl_rmsg_supply_decode(p, n, &m);
    if (rc)
        return rc;
    int32_t grp = m.grp;
    uint32_t part = m.part, seq = m.seq;
    uint8_t flags = m.flags;
    cl_meta_uuid lid;
    int have_lid = cl_node_leader(r->cfg.node, &lid) == 0;
    int prim = primary_here(r, grp, part);  /* (the node's lock: not under mu) */
    lock(r);
    load *l = load_find(r, grp, part);
    if (l && l->state == L_DEMANDING && cl_meta_uuid_eq(l->supplier, from) && l->seq == seq) {
        if (flags & F_AGAIN) {
            load_reset(l);          /* not ready there, or it started over: again later */
            l->sent_ms = em_now_ms() - RETRY_MS + 100;
        } else if (l->pgen > r->pgen_durable) {
            /* The partial set's file does not have this partition yet:
             * nothing applies before it does (again shortly). */
            load_reset(l);
            l->sent_ms = em_now_ms() - RETRY_MS + 100;
        } else if (l->merge && prim) {
            /* Made primary while catching up (promoted on a report it sent
             * before): the cluster takes this copy as whole, and writes
             * here no longer come through the live stream, so a merge
             * would overwrite or sweep them.  It stops. */
            l->merge = 0;
            atomic_fetch_sub(&r->nmerge, 1);
            l->state = L_LOADED;
            load_reset(l);
            load_finished(r, l);
            EM_WARN("rebalancing: cache %d partition %u: made primary while catching up; "
                    "the catch-up stops", grp, part);
        } else {
            if (!(flags & F_LAST)) {
                l->seq = seq + 1;
                send_demand(r, l);  /* the next batch travels while this one applies */
            }
            if (flags & F_HIST) {
                rc = l->merge ? apply_hist(r, l, m.body, m.blen, m.cnt) : EM_PROTO;
            } else {
                l->has_claim = 0;   /* the supplier could not vouch: whole, from here on */
                rc = apply_supply(r, l, m.body, m.blen, m.cnt);
            }
            r->st.batches_in++;
            r->st.bytes_in += n;
            st_cache *c = !rc && (flags & F_LAST) ? st_cache_find(r->cfg.store, grp) : NULL;
            if (c && l->merge && ((flags & F_HIST) || (rc = merge_sweep(r, l, c)) == 0)) {
                /* Caught up: an owner as it was, equal to the primary -
                 * its counter too, even below the one it had (updates the
                 * primary never had count no more).  From the log, the
                 * copy held every update up to its claim: no sweep. */
                uint64_t sc = m.ctr;
                (void)st_part_set(c, part, l->live_max > sc ? l->live_max : sc);
                r->st.caught_up++;
                load_finished(r, l);
                if (flags & F_HIST) {
                    r->st.hist_loads++;
                    EM_INFO("rebalancing: cache %d partition %u caught up with its primary "
                            "from its log (counter %llu to %llu)", grp, part,
                            (unsigned long long)l->claim.last, (unsigned long long)sc);
                } else {
                    EM_INFO("rebalancing: cache %d partition %u caught up with its primary",
                            grp, part);
                }
                l->has_claim = 0;
                if (l->reported || l->moving) {
                    /* A MOVING copy (or a loaded one that missed updates
                     * before it owned): whole, it reports (the scan drops
                     * the load if it owns the partition by now). */
                    l->merge = 0;
                    atomic_fetch_sub(&r->nmerge, 1);
                    l->state = L_LOADED;
                    load_reset(l);
                    if (have_lid && durable(l, ckpts_done(r, NULL)))
                        send_done(r, l, lid);
                } else {
                    /* An owner behind a failover's successor: the ideal
                     * order may wait for it to make it primary
                     * (cl_plan_promote takes this report). */
                    if (have_lid && durable(l, ckpts_done(r, NULL)))
                        send_done(r, l, lid);
                    else if (r->nowner_done < MAX_OWNER_DONE)   /* the pass sends it */
                        r->owner_done[r->nowner_done++] = (struct owner_done){
                            grp, part, l->supplier, l->ckpt_need, em_now_ms() };
                    load_drop(r, l);
                }
            } else if (c && !l->merge) {
                /* The copy is whole: it takes the supplier's counter (the
                 * live stream raises it past that from here). */
                (void)st_part_raise(c, part, m.ctr);
                l->state = L_LOADED;
                r->st.loaded++;
                load_finished(r, l);
                load_reset(l);
                if (have_lid && durable(l, ckpts_done(r, NULL)))   /* else the pass does */
                    send_done(r, l, lid);
            }
            if (rc && rc != EM_NOMEM) {
                unlock(r);
                flush(r);
                return rc;          /* a malformed batch: the link closes */
            }
            if (rc) {
                load_reset(l);      /* out of memory: start over later */
                l->sent_ms = em_now_ms();
            }
        }
    }
    unlock(r);
    flush(r);
    return 0;
}

int cl_rebal_on_frame(cl_rebal *r, cl_meta_uuid from, uint16_t type, const uint8_t *p, size_t n)
{
    switch (type) {
    case CL_NET_MSG_REBAL_STALE: {
        int32_t grp;
        uint32_t part;
        size_t at = 0;
        if (n != CL_RMSG_PART || !cl_rmsg_part_next(p, n, &at, &grp, &part))
            return EM_BADLEN;
        cl_rebal_copy_stale(r, grp, part, 0);
        return 0;
    }
    case CL_NET_MSG_REBAL_DEMAND:
    case CL_NET_MSG_REBAL_DONE: {
        cl_rmsg_demand m = { 0, 0, 0, 0, { 0, 0, 0 } };
        uint64_t sup[2] = { 0, 0 };
        if (type == CL_NET_MSG_REBAL_DEMAND ? cl_rmsg_demand_decode(p, n, &m) != 0
                                            : cl_rmsg_done_decode(p, n, &m.grp, &m.part, sup) != 0)
            return EM_BADLEN;
        demand d = { from, { sup[0], sup[1] }, m.grp, m.part, m.seq, m.has_claim, m.claim };
        lock(r);
        if (type == CL_NET_MSG_REBAL_DEMAND && r->ndq < MAX_QUEUE)
            r->dq[r->ndq++] = d;
        else if (type == CL_NET_MSG_REBAL_DONE && r->ndone < MAX_QUEUE)
            r->done_q[r->ndone++] = d;
        pthread_cond_broadcast(&r->cv);
        unlock(r);
        return 0;
    }
    case CL_NET_MSG_REBAL_SUPPLY:
        return on_supply(r, from, p, n);
    default:
        return 0;
    }
}

void cl_rebal_on_apply(void *arg, const st_update *u)
{
    cl_rebal *r = arg;
    if (u->kind == ST_UPD_PUT && !atomic_load_explicit(&r->nmerge, memory_order_relaxed))
        return;                     /* only a merge load records writes */
    lock(r);
    load *l = load_find(r, u->cache_id, u->partition);
    if (l && l->merge && u->cntr > l->live_max)
        l->live_max = u->cntr;
    if (l && l->state == L_DEMANDING && (l->merge || u->kind != ST_UPD_PUT)) {
        /* A CLEAR (or a key past the bound) while loading: what the
         * supplier sends next may predate it, so the load starts over. */
        if (u->kind == ST_UPD_CLEAR || cl_keyset_add(&l->live, u->key, u->klen)) {
            load_reset(l);
            send_demand(r, l);
        }
    }
    unlock(r);
    flush(r);
}

/* ---- the supplier ---- */

typedef struct batch_ctx { em_buf *b; uint32_t n; int err; } batch_ctx;

static int add_entry(void *arg, const uint8_t *k, size_t kl, const uint8_t *v, size_t vl,
                     int64_t exp)
{
    batch_ctx *c = arg;
    cl_rmsg_entry e = { k, v, (uint32_t)kl, (uint32_t)vl, exp };
    if (cl_rmsg_entry_add(c->b, &e))
        c->err = EM_NOMEM;
    else
        c->n++;
    return c->err;
}

static void supply_reply(cl_rebal *r, const demand *d, uint8_t flags)
{
    uint8_t b[CL_RMSG_SUP_HDR];
    cl_rmsg_supply_put(b, &(cl_rmsg_supply){ .grp = d->grp, .part = d->part, .seq = d->seq,
                                             .flags = flags });
    (void)cl_node_send(r->cfg.node, d->from, CL_NET_MSG_REBAL_SUPPLY, b, sizeof b);
}

static void send_close(send *s)
{
    if (s->sc)
        st_scan_close(s->sc);
    em_buf_free(&s->hist);
    em_free(s);
}

/* hist_batch sends s's next batch of log records (a historical stream):
 * whole records up to limit bytes, one at least; 1 when it was the last. */
static int hist_batch(cl_rebal *r, const demand *d, send *s, uint32_t limit)
{
    em_buf *b = &r->out;
    em_buf_reset(b);
    size_t end = s->hist_at;
    uint32_t n = 0;
    const uint8_t *rec;
    uint32_t len;
    while ((!n || end - s->hist_at < limit) &&
           cl_rmsg_rec_next(s->hist.p, s->hist.len, &end, &rec, &len) == 1)
        n++;
    int last = end == s->hist.len;
    uint8_t h[CL_RMSG_SUP_HDR];
    cl_rmsg_supply_put(h, &(cl_rmsg_supply){ .grp = d->grp, .part = d->part, .seq = s->seq,
                                             .flags = (uint8_t)(F_HIST | (last ? F_LAST : 0)),
                                             .cnt = n, .ctr = s->cntr });
    if (em_buf_append(b, h, sizeof h) || em_buf_append(b, s->hist.p + s->hist_at, end - s->hist_at)) {
        demand again = *d;
        again.seq = s->seq;
        supply_reply(r, &again, F_AGAIN);
        return 1;
    }
    (void)cl_node_send(r->cfg.node, d->from, CL_NET_MSG_REBAL_SUPPLY, b->p, b->len);
    lock(r);
    r->st.batches_out++;
    r->st.entries_out += n;
    unlock(r);
    s->hist_at = end;
    s->seq++;
    return last;
}

/* supply_batch sends s's next batch (seq s->seq) to d's sender: 1 when
 * the stream is over (that was its last batch, or it broke: F_AGAIN). */
static int supply_batch(cl_rebal *r, const demand *d, send *s, uint32_t limit)
{
    if (!s->sc)
        return hist_batch(r, d, s, limit);
    em_buf *b = &r->out;
    em_buf_reset(b);
    uint8_t h[CL_RMSG_SUP_HDR] = { 0 };
    batch_ctx bc = { b, 0, 0 };
    int more = 1, rc = em_buf_append(b, h, sizeof h);
    /* Pages of 64 entries; fewer when batches are small (a page is never
     * split between two batches), down to one. */
    uint32_t page = limit / 4096 < 1 ? 1 : limit / 4096 > 64 ? 64 : limit / 4096;
    while (!rc && more && (!bc.n || b->len < limit) && !bc.err)   /* an entry at least */
        rc = st_scan_next_page_exp(s->sc, page, add_entry, &bc, &more);
    if (rc || bc.err) {
        demand again = *d;
        again.seq = s->seq;
        supply_reply(r, &again, F_AGAIN);
        return 1;
    }
    cl_rmsg_supply_put(b->p, &(cl_rmsg_supply){ .grp = d->grp, .part = d->part, .seq = s->seq,
                                                .flags = more ? 0 : F_LAST, .cnt = bc.n,
                                                .ctr = s->cntr });
    (void)cl_node_send(r->cfg.node, d->from, CL_NET_MSG_REBAL_SUPPLY, b->p, b->len);
    lock(r);                        /* serve runs outside mu; the stats are read under it */
    r->st.batches_out++;
    r->st.entries_out += bc.n;
    unlock(r);
    s->seq++;
    return !more;
}

static void serve(cl_rebal *r, const demand *d)
{
    send **pp = &r->sends, *s = NULL;
    for (; *pp; pp = &(*pp)->next)
        if (cl_meta_uuid_eq((*pp)->to, d->from) && (*pp)->grp == d->grp && (*pp)->part == d->part) {
            s = *pp;
            break;
        }
    st_cache *c = st_cache_find(r->cfg.store, d->grp);
    if ((d->seq & SEQ_BATCH) == 0) {
        if (s) {
            *pp = s->next;
            send_close(s);
            s = NULL;
        }
        /* Only once this node's topology has the demander loading the
         * partition: every write after the snapshot then streams to it. */
        cl_topo *t = cl_node_topo_acquire(r->cfg.node);
        uint32_t mv[MAX_OWN], own[MAX_OWN];
        int ok = c && t->self >= 0;
        uint32_t parts = c ? st_cache_parts(c) : 0;
        if (ok) {
            /* The demander loads (MOVING) or catches up (a backup owner). */
            uint32_t nm = cl_topo_moving(t, d->grp, parts, d->part, mv, MAX_OWN);
            uint32_t no = cl_topo_owners(t, d->grp, parts, 0, 0, d->part, own, MAX_OWN);
            ok = 0;
            for (uint32_t i = 0; i < nm; i++)
                ok |= cl_meta_uuid_eq(t->m[mv[i]].id, d->from);
            for (uint32_t i = 1; i < no; i++)
                ok |= cl_meta_uuid_eq(t->m[own[i]].id, d->from);
            ok = ok && no >= 1 && (int)own[0] == t->self &&
                 !cl_take_held(r->cfg.take, t, d->grp, d->part);
        }
        cl_node_topo_release(t);
        /* A claim this node's log can answer: the updates after it only.
         * Read after the topology above has the demander: a write this log
         * does not have yet streams to it (cl_repl notes a write in the log
         * before it streams it). */
        int hist = 0;
        if (ok && (s = em_calloc(1, sizeof *s)) != NULL && d->has_claim && r->cfg.hist &&
            !st_cache_in_memory(c)) {
            uint32_t hn;
            hist = cl_hist_since(r->cfg.hist, d->grp, d->part, &d->claim, &s->hist, &hn,
                                 &s->cntr) == 0;
            if (!hist)
                em_buf_reset(&s->hist);
        }
        if (!ok || !s || (!hist && st_scan_open(c, (int32_t)d->part, &s->sc))) {
            if (s)
                send_close(s);
            supply_reply(r, d, F_AGAIN);
            return;
        }
        if (hist) {
            lock(r);
            r->st.hist_served++;
            unlock(r);
        } else {
            uint64_t size;
            (void)st_part_info(c, d->part, &s->cntr, &size);
        }
        s->to = d->from;
        s->grp = d->grp;
        s->part = d->part;
        s->seq = d->seq;
        s->next = r->sends;
        r->sends = s;
    } else if (!s || !c || (s->seq & ~SEQ_BATCH) != (d->seq & ~SEQ_BATCH) || d->seq > s->seq) {
        supply_reply(r, d, F_AGAIN);    /* a stream this node lost: start over */
        return;
    }
    /* Ignite's cache settings: the batch size, batches sent ahead of the
     * demands (a demand for batch b says b - 1 arrived: batches up to
     * b - 1 + prefetch may travel), and a pause between two batches. */
    const st_cache_config *cfg = st_cache_cfg(c);
    uint32_t limit = cfg->rebalance_batch_size > 0 ? (uint32_t)cfg->rebalance_batch_size
                     : r->cfg.batch_bytes ? r->cfg.batch_bytes : BATCH_DEFAULT;
    uint32_t ahead = cfg->rebalance_batches_prefetch_count < 1 ? 1
                     : cfg->rebalance_batches_prefetch_count > MAX_PREFETCH
                         ? MAX_PREFETCH : (uint32_t)cfg->rebalance_batches_prefetch_count;
    uint64_t pause_ms = cfg->rebalance_throttle > 0 ? (uint64_t)cfg->rebalance_throttle
                        : r->cfg.throttle_ms;
    if (pause_ms > MAX_THROTTLE_MS)
        pause_ms = MAX_THROTTLE_MS;
    uint32_t upto = d->seq + ahead - 1;
    while (s && s->seq <= upto) {
        if ((s->seq & SEQ_BATCH) && pause_ms) {  /* between two batches of a stream */
            struct timespec ts = { (time_t)(pause_ms / 1000), (long)(pause_ms % 1000) * 1000000L };
            nanosleep(&ts, NULL);
        }
        if (supply_batch(r, d, s, limit)) {
            for (pp = &r->sends; *pp; pp = &(*pp)->next)
                if (*pp == s) {
                    *pp = s->next;
                    break;
                }
            send_close(s);
            s = NULL;
        }
    }
}

/* ---- this node's loads and evictions ---- */

/* evict: (i32 group, u32 partition) pairs the scan found to clear, cleared
 * after mu is released (clearing a large partition under it would hold up
 * the transport thread, which takes mu for every live update). */
typedef struct scan_ctx { cl_rebal *r; cl_topo *t; uint64_t gen; em_buf evict; } scan_ctx;

static void part_entry(em_buf *b, int32_t grp, uint32_t part)
{
    uint8_t e[8];
    em_st32(e, (uint32_t)grp);
    em_st32(e + 4, part);
    (void)em_buf_append(b, e, sizeof e);
}

/* moving_seen: group grp has MOVING copies in this scan (gen). */
static void moving_seen(cl_rebal *r, int32_t grp, uint64_t gen)
{
    uint32_t i = 0;
    while (i < r->nmgrp && r->mgrp[i].grp != grp)
        i++;
    if (i == r->nmgrp) {
        if (i == MAX_MOVING_GRPS)
            return;                 /* untimed: only its finish line is missed */
        r->mgrp[r->nmgrp++] = (struct mgrp){ grp, em_now_ms(), 0 };
    }
    r->mgrp[i].gen = gen;
}

/* moving_done: the groups that had MOVING copies and have none in scan gen
 * on t: rebalanced.  The coordinator logs each (under mu). */
static void moving_done(cl_rebal *r, cl_topo *t, uint64_t gen, int leader)
{
    for (uint32_t i = 0; i < r->nmgrp;) {
        struct mgrp *m = &r->mgrp[i];
        if (m->gen == gen) {
            i++;
            continue;
        }
        st_cache *c = st_cache_find(r->cfg.store, m->grp);
        const st_cache_config *cfg = c ? st_cache_cfg(c) : NULL;
        if (leader && c && !st_cache_destroyed(c) && cfg)
            EM_INFO("rebalancing: cache '%s' finished: every partition owned by its ideal "
                    "owners (topology %llu.%u, %llu ms)", cfg->name ? cfg->name : "",
                    (unsigned long long)t->major, t->minor,
                    (unsigned long long)(em_now_ms() - m->since_ms));
        *m = r->mgrp[--r->nmgrp];
    }
}

/* load_begin: a MOVING copy's load from l->supplier: into an empty copy,
 * or as a merge into one holding entries (never cleared: see L_DEMANDING). */
static void load_begin(cl_rebal *r, st_cache *c, load *l)
{
    uint64_t cntr, size;
    l->moving = 1;
    if (l->merge || (st_part_info(c, l->part, &cntr, &size) == 0 && size)) {
        merge_begin(r, l, l->supplier);
        return;
    }
    l->state = L_DEMANDING;
    l->has_claim = 0;
    partial_add(r, l);
    demand_when_up(r, l);
}

static void scan_cache(void *arg, st_cache *c)
{
    scan_ctx *x = arg;
    cl_rebal *r = x->r;
    cl_topo *t = x->t;
    int32_t grp = st_cache_id(c);
    uint32_t parts = st_cache_parts(c);
    if (st_cache_destroyed(c) || !cl_topo_has_owners(t, grp, parts))
        return;
    int any_moving = cl_topo_moving_count(t, grp) != 0;
    if (any_moving)
        moving_seen(r, grp, x->gen);
    int pending = (t->major << 32 | t->minor) > cl_topo_last_exchange(t);
    uint32_t own[MAX_OWN], mv[MAX_OWN];
    for (uint32_t part = 0; part < parts; part++) {
        uint32_t no = cl_topo_owners(t, grp, parts, 0, 0, part, own, MAX_OWN);
        uint32_t nm = any_moving ? cl_topo_moving(t, grp, parts, part, mv, MAX_OWN) : 0;
        int owner = in_list(own, no, t->self), moving = in_list(mv, nm, t->self);
        load *l = load_find(r, grp, part);
        if (moving && no) {
            if (!l && (l = load_new(r, grp, part)) != NULL) {
                l->supplier = t->m[own[0]].id;
                load_begin(r, c, l);
            } else if (l && (l->reported || l->state == L_LOADED)) {
                /* Never emptied (see reported): a copy catching up does so
                 * from the current primary, and so does one loaded from a
                 * primary that is one no more - a failover's successor may
                 * have writes the old one had not sent it, and a deposed
                 * one writes its successor fenced (the simulation finds
                 * such copies promoted short). */
                if (!cl_meta_uuid_eq(l->supplier, t->m[own[0]].id))
                    merge_begin(r, l, t->m[own[0]].id);
            } else if (l && ((!cl_meta_uuid_eq(l->supplier, t->m[own[0]].id) &&
                              l->state != L_LOADED) || l->restart || (l->merge && !l->moving))) {
                /* The primary changed (what the old one sent may hold
                 * writes the new one never had), the live stream skipped
                 * updates, or a copy catching up is no owner any more:
                 * start over from the primary (a merge if it holds
                 * entries). */
                l->supplier = t->m[own[0]].id;
                l->restart = 0;
                load_reset(l);
                load_begin(r, c, l);
            }
            if (l)
                l->gen = x->gen;
        } else if (owner && l && (l->merge || l->state != L_LOADED) &&
                   (int)own[0] != t->self) {
            /* Catching up goes on (as the primary, it would be dropped:
             * no copy is more whole); from a new primary, from the start.
             * A load this node was made an owner before it finished (an
             * earlier pass was reported) catches up too. */
            if (!l->merge || !cl_meta_uuid_eq(l->supplier, t->m[own[0]].id))
                merge_begin(r, l, t->m[own[0]].id);
            l->gen = x->gen;
        } else if (!owner && !moving && !cl_topo_part_lost(t, grp, part) && !pending) {
            /* (Not before the exchange of this topology: a member that just
             * rejoined is in no row yet, and the copy its WAL restored is
             * what it will claim, or load into as a merge.) */
            uint64_t cntr, size;
            if (st_part_info(c, part, &cntr, &size) == 0 && size)
                part_entry(&x->evict, grp, part);   /* no copy of it is this node's */
        }
    }
}

/* evict clears the partitions the scan listed (not under mu). */
static void evict(cl_rebal *r, const em_buf *ev)
{
    uint64_t n = 0;
    for (size_t at = 0; at + 8 <= ev->len; at += 8) {
        st_cache *c = st_cache_find(r->cfg.store, (int32_t)em_ld32(ev->p + at));
        if (c && st_clear_part(c, em_ld32(ev->p + at + 4), 0) == 0)
            n++;
    }
    if (n) {
        lock(r);
        r->st.evicted += n;
        unlock(r);
    }
}

/* ---- the coordinator's owners behind ---- */

void cl_rebal_note_behind(cl_rebal *r, cl_meta_uuid member, int32_t grp, uint32_t part,
                          uint64_t exch)
{
    lock(r);
    if (r->nbehind && r->behind[0].exch < exch)
        r->nbehind = 0;         /* a newer decision's list replaces the older one's */
    if (r->nbehind < MAX_BEHIND)
        r->behind[r->nbehind++] = (struct behind){ member, grp, part, exch };
    unlock(r);
}

/* behind_take: (member, grp, part) is no longer behind (it reported). */
static void behind_take(cl_rebal *r, cl_meta_uuid member, int32_t grp, uint32_t part)
{
    lock(r);
    for (uint32_t i = 0; i < r->nbehind; i++)
        if (r->behind[i].grp == grp && r->behind[i].part == part &&
            cl_meta_uuid_eq(r->behind[i].m, member))
            r->behind[i--] = r->behind[--r->nbehind];
    unlock(r);
}

/* behind_has: cl_plan_behind_fn over the list. */
static int behind_has(void *arg, cl_meta_uuid member, int32_t grp, uint32_t part)
{
    cl_rebal *r = arg;
    int found = 0;
    lock(r);
    for (uint32_t i = 0; i < r->nbehind && !found; i++)
        found = r->behind[i].grp == grp && r->behind[i].part == part &&
                cl_meta_uuid_eq(r->behind[i].m, member);
    unlock(r);
    return found;
}

/* coordinate turns the reported loaded copies into owners through the
 * metadata group (coordinator). */
static void coordinate(cl_rebal *r, demand *q, uint32_t nq)
{
    /* Not while an exchange decides (it may take seconds; this thread
     * also supplies loads): the reports come again every DONE_EVERY_MS. */
    if (!cl_node_decide_trylock(r->cfg.node))
        return;
    cl_topo *t = cl_node_topo_acquire(r->cfg.node);
    lock(r);
    if (r->nbehind && r->behind[0].exch < cl_topo_last_exchange(t))
        r->nbehind = 0;         /* another exchange decided since: its singles rule */
    unlock(r);
    em_buf e = EM_BUF_INIT;
    cl_meta_owners_enc enc;
    int rc = cl_meta_enc_owners_begin(&enc, &e, cl_topo_last_exchange(t));
    uint32_t made = 0;
    for (uint32_t i = 0; i < nq && !rc; i++) {
        st_cache *c = st_cache_find(r->cfg.store, q[i].grp);
        if (!c)
            continue;
        cl_plan_group g = cl_plan_group_of(st_cache_cfg(c), q[i].grp, st_cache_parts(c));
        if (!cl_plan_report_current(t, &g, q[i].sup, q[i].part))
            continue;       /* loaded from a primary that is one no more: it loads again */
        behind_take(r, q[i].from, q[i].grp, q[i].part);     /* whole, it reported */
        int got = cl_plan_promote(t, &enc, &g, q[i].from, q[i].sup, q[i].part, behind_has, r);
        if (got <= 0) {
            rc = got;
            continue;
        }
        made++;
        if (!rc && cl_meta_enc_owners_size(&enc) > (256u << 10))
            break;
    }
    cl_node_topo_release(t);
    if (!rc && made && !(rc = cl_meta_enc_owners_end(&enc)))
        rc = cl_node_propose(r->cfg.node, e.p, e.len, 10000);
    if (!rc && made) {
        lock(r);
        r->st.owned += made;
        unlock(r);
    } else if (rc && rc != EM_NOTLEADER) {
        EM_WARN("rebalancing: committing %u loaded copies failed: %s", made, em_strerror(rc));
    }
    cl_node_decide_unlock(r->cfg.node);
    em_buf_free(&e);
}

static void *run(void *arg)
{
    cl_rebal *r = arg;
    pthread_setname_np(pthread_self(), "em-rebal");
    uint64_t last_scan = 0;
    demand *q = em_malloc(sizeof *q * MAX_QUEUE);
    demand *dn = em_malloc(sizeof *dn * MAX_QUEUE);
    for (;;) {
        lock(r);
        if (!r->stop && !r->kicked && !r->ndq && !r->ndone) {
            struct timespec ts;
            clock_gettime(CLOCK_REALTIME, &ts);
            ts.tv_nsec += 100 * 1000000L;
            if (ts.tv_nsec >= 1000000000L) {
                ts.tv_sec++;
                ts.tv_nsec -= 1000000000L;
            }
            pthread_cond_timedwait(&r->cv, &r->mu, &ts);
        }
        if (r->stop) {
            unlock(r);
            break;
        }
        int kicked = r->kicked;
        r->kicked = 0;
        uint32_t nq = 0, nd = 0;
        if (q && dn) {
            nq = r->ndq;
            memcpy(q, r->dq, sizeof *q * nq);
            r->ndq = 0;
            nd = r->ndone;
            memcpy(dn, r->done_q, sizeof *dn * nd);
            r->ndone = 0;
        }
        unlock(r);
        for (uint32_t i = 0; i < nq; i++)
            serve(r, &q[i]);
        if (nd && cl_node_is_leader(r->cfg.node))
            coordinate(r, dn, nd);
        uint64_t now = em_now_ms();
        links_refresh(r);
        if (kicked || now - last_scan >= 1000) {
            last_scan = now;
            cl_topo *t = cl_node_topo_acquire(r->cfg.node);
            if (t->self >= 0) {
                int leader = cl_node_is_leader(r->cfg.node);
                lock(r);
                scan_ctx x = { r, t, ++r->gen, EM_BUF_INIT };
                st_cache_each(r->cfg.store, scan_cache, &x);
                moving_done(r, t, x.gen, leader);
                /* Loads this node is no longer asked for (it owns the
                 * partition now, or the exchange dropped the copy). */
                for (uint32_t i = 0; i < r->nloads;)
                    if (r->loads[i].gen != x.gen)
                        load_drop(r, &r->loads[i]);
                    else
                        i++;
                unlock(r);
                evict(r, &x.evict);
                em_buf_free(&x.evict);
            }
            cl_node_topo_release(t);
        }
        cl_meta_uuid lid;
        int have_lid = cl_node_leader(r->cfg.node, &lid) == 0;
        cl_topo *t = cl_node_topo_acquire(r->cfg.node);
        uint64_t started = 0, done = ckpts_done(r, &started);
        lock(r);
        uint64_t loading = 0;
        int waiting = 0;
        for (uint32_t i = 0; i < r->nloads; i++) {
            load *l = &r->loads[i];
            loading += l->state != L_LOADED;
            waiting |= l->state == L_LOADED && done < l->ckpt_need;
            if (now - l->sent_ms < (l->state == L_LOADED ? DONE_EVERY_MS : RETRY_MS))
                continue;
            if (l->state == L_DEMANDING) {
                load_reset(l);              /* silence: start over */
                demand_when_up(r, l);
            } else if (l->state == L_LOADED && have_lid && durable(l, done)) {
                send_done(r, l, lid);
            }
        }
        waiting |= owner_done_pass(r, done, have_lid, lid, now);
        ckpt_again(r, started, done, waiting);
        r->st.loading = loading;
        if (t->self >= 0)
            stale_begin(r, t, now);
        unlock(r);
        cl_node_topo_release(t);
        partial_sync(r);
        flush(r);
    }
    em_free(q);
    em_free(dn);
    return NULL;
}

int cl_rebal_start(cl_rebal **out, const cl_rebal_cfg *cfg)
{
    *out = NULL;
    cl_rebal *r = em_calloc(1, sizeof *r);
    if (!r)
        return EM_NOMEM;
    r->cfg = *cfg;
    r->cfg.pset_path = NULL;
    if (cfg->pset_path && strlen(cfg->pset_path) < sizeof r->pset_path)
        strcpy(r->pset_path, cfg->pset_path);
    r->cfg.hold = NULL;
    if (cfg->hold && strlen(cfg->hold) < sizeof r->hold)
        strcpy(r->hold, cfg->hold);
    if (hist_on(r))
        partial_open(r);
    r->loads = em_calloc(MAX_LOADS, sizeof *r->loads);
    r->behind = em_calloc(MAX_BEHIND, sizeof *r->behind);
    if (!r->loads || !r->behind) {
        em_free(r->loads);
        em_free(r->behind);
        em_free(r);
        return EM_NOMEM;
    }
    pthread_mutex_init(&r->mu, NULL);
    pthread_cond_init(&r->cv, NULL);
    if (pthread_create(&r->th, NULL, run, r) != 0) {
        cl_rebal_stop(r);
        return EM_NOMEM;
    }
    r->started = 1;
    *out = r;
    return 0;
}

void cl_rebal_halt(cl_rebal *r)
{
    if (!r)
        return;
    lock(r);
    r->stop = 1;
    pthread_cond_broadcast(&r->cv);
    unlock(r);
    if (r->started)
        pthread_join(r->th, NULL);
    r->started = 0;
}

void cl_rebal_stop(cl_rebal *r)
{
    if (!r)
        return;
    cl_rebal_halt(r);
    while (r->nloads)
        load_drop(r, &r->loads[0]);
    em_free(r->loads);
    em_free(r->behind);
    while (r->sends) {
        send *s = r->sends;
        r->sends = s->next;
        send_close(s);
    }
    em_buf_free(&r->out);
    em_free(r->partial);
    pthread_cond_destroy(&r->cv);
    pthread_mutex_destroy(&r->mu);
    em_free(r);
}

void cl_rebal_kick(cl_rebal *r)
{
    lock(r);
    r->kicked = 1;
    pthread_cond_broadcast(&r->cv);
    unlock(r);
}

static void copy_stale(cl_rebal *r, int32_t grp, uint32_t part, int skipped,
                       cl_meta_uuid avoid);

void cl_rebal_copy_stale(void *arg, int32_t grp, uint32_t part, int skipped)
{
    copy_stale(arg, grp, part, skipped, (cl_meta_uuid){ 0, 0 });
}

/* A loading copy starts over, as after skipped updates: what it loaded
 * may hold the deposed primary's fenced writes. */
void cl_rebal_copy_fenced(void *arg, int32_t grp, uint32_t part, cl_meta_uuid deposed)
{
    copy_stale(arg, grp, part, 1, deposed);
}

static void copy_stale(cl_rebal *r, int32_t grp, uint32_t part, int skipped,
                       cl_meta_uuid avoid)
{
    lock(r);
    load *l = skipped ? NULL : load_find(r, grp, part);
    if (l && l->state != L_LOADED) {
        unlock(r);                  /* loading or catching up: it will be whole */
        return;
    }
    /* A loaded copy (reporting, or made an owner any moment) loads no more:
     * what it missed comes from no snapshot, so it catches up (stale_begin). */
    uint32_t i = 0;
    while (i < r->nstale && !(r->stale[i].grp == grp && r->stale[i].part == part))
        i++;
    int fresh = i == r->nstale && i < MAX_STALE;
    if (i < r->nstale && (avoid.msb || avoid.lsb))
        r->stale[i].avoid = avoid;
    if (i == MAX_STALE && !r->stale_full) {
        r->stale_full = 1;
        EM_WARN("rebalancing: more than %u copies wait to catch up; the rest are not tracked "
                "(idle-verify will show them)", MAX_STALE);
    }
    if (fresh) {
        r->stale[r->nstale++] = (struct stale){ grp, part, em_now_ms(), avoid };
        r->st.stale++;
        pthread_cond_broadcast(&r->cv);
    }
    unlock(r);
    if (fresh)
        EM_WARN("rebalancing: cache %d partition %u: the copy here missed updates; it "
                "catches up with its primary", grp, part);
}

int cl_rebal_copy_is_stale(cl_rebal *r, int32_t grp, uint32_t part)
{
    if (atomic_load_explicit(&r->quiet, memory_order_relaxed))
        return 0;
    lock(r);
    int found = 0;
    for (uint32_t i = 0; i < r->nstale && !found; i++)
        found = r->stale[i].grp == grp && r->stale[i].part == part;
    load *l = found ? NULL : load_find(r, grp, part);
    found = found || (l && l->merge);
    /* caught up, but what it merged is not on disk yet: not whole after a
     * power loss, so not made primary by the exchange either */
    for (uint32_t i = 0; i < r->nowner_done && !found; i++)
        found = r->owner_done[i].grp == grp && r->owner_done[i].part == part;
    unlock(r);
    return found;
}

void cl_rebal_stats_get(cl_rebal *r, cl_rebal_stats *s)
{
    lock(r);
    *s = r->st;
    s->catching_up = r->nstale + r->nowner_done;
    for (uint32_t i = 0; i < r->nloads; i++)
        s->catching_up += r->loads[i].merge && !r->loads[i].moving;
    unlock(r);
}
