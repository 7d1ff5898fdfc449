/* cl_repl.c - primary/backup streams, acks, FULL_SYNC waits and epoch
 * fencing (protocol in cl_repl.h).
 *
 * State, all allocated once and reused (a replicated overwrite allocates
 * nothing in steady state, on the primary or on an owner):
 *  - caches: a fixed hash of per-cache records, insert-only and read without
 *    a lock; each holds the partitions' next update counters (primary side,
 *    written under the store's partition lock), the highest contiguous
 *    counter applied per partition and the epoch it was applied in (owner
 *    side, transport thread only), and per peer slot an array of
 *    {sent, acked} counters and the last refused range per partition
 *    (read by FULL_SYNC waiters);
 *  - peers: slots by node id, insert-only (a restarted node has a new id);
 *    each has an outgoing stream buffer under its own mutex.  The buffer is
 *    sent while that mutex is held, so frames to one peer leave in the order
 *    updates were appended, and a partition's updates (appended under its
 *    lock) reach each owner in counter order over the one FIFO link;
 *  - per thread: the ticket of what the current request replicated.
 */
#include "cluster/cl_repl.h"

#include <pthread.h>
#include <stdatomic.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "cluster/cl_hist.h"
#include "cluster/cl_net.h"
#include "cluster/cl_plan.h"
#include "cluster/cl_rid.h"
#include "cluster/cl_rmsg.h"
#include "cluster/cl_take.h"
#include "util/clock.h"
#include "util/err.h"
#include "util/mem.h"
#include "wal/wal.h"

#define MAX_PEERS       1024u        /* node ids met in one process life */
#define CACHE_BUCKETS   256u
#define MAX_OWNERS      64u          /* owners looked at per partition */
#define TICKET_MAX      256u
#define SEND_CHUNK      (4u << 20)   /* a resent window leaves in frames of about this */
#define MAX_RETAIN      (64u << 20)  /* unsettled bytes kept per peer before giving up */
#define MAX_NOTES       64u          /* fence notices waiting per peer (one per partition) */

/* Planted bugs, compiled in only for tests/chaos/planted.sh (the Makefile's
 * build/plant/emberd-*): each is a defect a checker of the fault-injection
 * suite must catch before that checker is trusted.
 *   EM_PLANT_ACK_EARLY  a FULL_SYNC write is answered before it is
 *                       replicated (the tick sends it later): the set
 *                       workload under kill -9 must find acknowledged
 *                       writes lost;
 *   EM_PLANT_NO_RESEND  lost frames are never sent again and an owner skips
 *                       a gap at once: under the fault hook, idle-verify
 *                       must find copies that differ. */
#ifdef EM_PLANT_NO_RESEND
#define PLANT_NO_RESEND 1
#else
#define PLANT_NO_RESEND 0
#endif

typedef struct ackv {
    _Atomic uint64_t sent, acked;
    _Atomic uint64_t settled;           /* acked or refused: its copy need not be kept */
    uint64_t sent_epoch;                /* epoch of the last update sent (partition lock) */
    uint64_t refused_lo, refused_hi;    /* the last refused range (under wait_mu) */
} ackv;

typedef struct rcache {
    int32_t  id;
    uint32_t parts;
    _Atomic uint64_t *ctr;          /* primary: last counter taken, per partition */
    uint64_t *applied;              /* owner: highest contiguous counter applied */
    uint64_t *epoch;                /* owner: epoch those were applied in */
    uint32_t *src;                  /* owner: peer slot + 1 of applied's sender */
    uint64_t *gap_ms;               /* owner: when the stream's current gap began */
    uint64_t *last;                 /* owner: the partition counter of the last update applied */
    _Atomic(ackv *) ack[MAX_PEERS]; /* per peer slot: parts entries, lazily */
    struct rcache *_Atomic next;
} rcache;

/* A peer's stream.  out holds [head, sent): updates sent that the peer has
 * neither acked nor refused, kept to send again, and [sent, len): updates
 * queued.  A frame lost with a link (or dropped by the loop for want of
 * one) is sent again when the peer asks for it (it saw a gap) or when the
 * oldest kept update waited a retransmit interval (the loss was the last
 * frame); the peer skips what it already has. */
typedef struct peer {
    cl_meta_uuid    id;
    uint32_t        slot;
    pthread_mutex_t mu;
    em_buf          out;            /* REPL_UPDATE payload */
    size_t          head, sent;
    uint64_t        moved_ms;       /* when head last moved (or the window opened) */
    uint64_t        resent_ms;      /* the last retransmission */
    _Atomic int     nack;           /* the peer asked for a retransmission */
    /* Fence notices for the peer (fence_notify), sent after its stream by
     * peer_send.  nmu is a leaf lock: the transport thread takes it. */
    pthread_mutex_t nmu;
    struct fnote { int32_t cache; uint32_t part; } note[MAX_NOTES];
    _Atomic uint32_t nnote;         /* (read without nmu: most sends have none) */
} peer;

/* A FULL_SYNC waiter: it sleeps on its own condition until the ack it
 * waits for next (c, part, ctr) arrives, so an ack wakes only the writers
 * it can complete, not every waiting thread. */
typedef struct waiter {
    pthread_cond_t cv;
    rcache  *c;
    uint32_t part;
    uint64_t ctr;
    struct waiter *next;
} waiter;

#define LEFT_MAX 256

struct cl_repl {
    cl_repl_opts    o;
    st_observer_fn  down;           /* the observer before us (the WAL) */
    void           *down_arg;
    rcache *_Atomic caches[CACHE_BUCKETS];
    pthread_mutex_t reg_mu;         /* inserts into caches and peers */
    peer           *peers[MAX_PEERS];
    _Atomic uint32_t npeers;
    pthread_mutex_t wait_mu;        /* FULL_SYNC waiters */
    waiter         *waiters;
    cl_repl_await  *awaits;         /* ... and awaits (no thread waits for them) */
    pthread_cond_t  settle_cv;      /* a cancel_waits await's done returned */
    uint32_t        settle_waits;   /* threads waiting on settle_cv */
    em_buf          ack_out;        /* transport thread: acks of one frame */
    _Atomic uint64_t st[14];        /* by S_*, S_N of them */
    /* Members an exchange under way says left (cl_repl_member_left), the
     * last LEFT_MAX of them, until this node's topology reaches left_exch
     * (then the topology's own rule fences them): their updates are
     * refused.  Both sides run on the transport thread; the lock is for
     * the record. */
    pthread_mutex_t left_mu;
    cl_meta_uuid    left[LEFT_MAX];
    uint32_t        left_at;
    uint64_t        left_exch;
    _Atomic uint32_t nleft;
    char            hold[256];      /* o.hold, copied: the caller's may not outlive start */
};
enum { S_SENT, S_FRAMES, S_APPLIED, S_ACKS, S_REFUSED, S_WAITS, S_TIMEOUTS, S_RESENT,
       S_NACKS, S_SKIPPED, S_GIVEUP, S_NOTICES, S_MOVED, S_READ_WAITS, S_N };
_Static_assert(S_N == sizeof ((cl_repl *)0)->st / sizeof ((cl_repl *)0)->st[0],
               "one counter per S_* value");
static void count(cl_repl *r, int i, uint64_t d)
{
    atomic_fetch_add_explicit(&r->st[i], d, memory_order_relaxed);
}

/* ---- per thread ----------------------------------------------------------- */

/* read: the entry is what a request read (seen), not a write of its own:
 * a refusal settles it (see "reads on the primary"). */
typedef struct tk_entry { rcache *c; uint32_t part; uint64_t ctr; int read; } tk_entry;
typedef struct ticket {
    uint32_t n;
    int      full_sync;             /* some entry is of a FULL_SYNC cache */
    int      overflow;              /* more than TICKET_MAX entries: wait for all */
    cl_repl *r;
    tk_entry e[TICKET_MAX];
} ticket;

static _Thread_local ticket tl_ticket;
void cl_repl_begin(void)
{
    tl_ticket.n = 0;
    tl_ticket.full_sync = 0;
    tl_ticket.overflow = 0;
}

/* ---- caches and peers ----------------------------------------------------- */

static uint32_t cfg_parts(const st_cache_config *cfg)
{
    return cfg->partitions ? cfg->partitions : 1024;
}

static void rcache_free(rcache *c)
{
    for (uint32_t i = 0; i < MAX_PEERS; i++)
        em_free(atomic_load(&c->ack[i]));
    em_free(c->ctr);
    em_free(c->applied);
    em_free(c->epoch);
    em_free(c->src);
    em_free(c->gap_ms);
    em_free(c->last);
    em_free(c);
}

static rcache *cache_find(cl_repl *r, int32_t id)
{
    rcache *c = atomic_load_explicit(&r->caches[(uint32_t)id % CACHE_BUCKETS],
                                     memory_order_acquire);
    while (c && c->id != id)
        c = atomic_load_explicit(&c->next, memory_order_acquire);
    return c;
}

/* cache_get: the record of cache id with parts partitions (made on first
 * use; a cache recreated with another partition count gets a new one). */
static rcache *cache_get(cl_repl *r, int32_t id, uint32_t parts)
{
    rcache *c = cache_find(r, id);
    if (c && c->parts == parts)
        return c;
    pthread_mutex_lock(&r->reg_mu);
    _Atomic(rcache *) *head = &r->caches[(uint32_t)id % CACHE_BUCKETS];
    for (c = atomic_load(head); c; c = atomic_load(&c->next))
        if (c->id == id && c->parts == parts)
            break;
    if (!c && (c = em_calloc(1, sizeof *c)) != NULL) {
        c->id = id;
        c->parts = parts;
        c->ctr = em_calloc(parts, sizeof *c->ctr);
        c->applied = em_calloc(parts, sizeof *c->applied);
        c->epoch = em_calloc(parts, sizeof *c->epoch);
        c->src = em_calloc(parts, sizeof *c->src);
        c->gap_ms = em_calloc(parts, sizeof *c->gap_ms);
        c->last = em_calloc(parts, sizeof *c->last);
        if (!c->ctr || !c->applied || !c->epoch || !c->src || !c->gap_ms || !c->last) {
            rcache_free(c);
            c = NULL;
        } else {
            /* Newest first: a recreated cache's record shadows the old. */
            atomic_store(&c->next, atomic_load(head));
            atomic_store_explicit(head, c, memory_order_release);
        }
    }
    pthread_mutex_unlock(&r->reg_mu);
    return c;
}

static ackv *cache_ack(cl_repl *r, rcache *c, uint32_t slot)
{
    ackv *a = atomic_load_explicit(&c->ack[slot], memory_order_acquire);
    if (a)
        return a;
    pthread_mutex_lock(&r->reg_mu);
    a = atomic_load(&c->ack[slot]);
    if (!a && (a = em_calloc(c->parts, sizeof *a)) != NULL)
        atomic_store_explicit(&c->ack[slot], a, memory_order_release);
    pthread_mutex_unlock(&r->reg_mu);
    return a;
}

/* peer_slot: the slot of node id, made when make is set; -1 if none. */
static int peer_slot(cl_repl *r, cl_meta_uuid id, int make)
{
    uint32_t n = atomic_load_explicit(&r->npeers, memory_order_acquire);
    for (uint32_t i = 0; i < n; i++)
        if (cl_meta_uuid_eq(r->peers[i]->id, id))
            return (int)i;
    if (!make)
        return -1;
    pthread_mutex_lock(&r->reg_mu);
    n = atomic_load(&r->npeers);
    int slot = -1;
    for (uint32_t i = 0; i < n && slot < 0; i++)
        if (cl_meta_uuid_eq(r->peers[i]->id, id))
            slot = (int)i;
    if (slot < 0 && n < MAX_PEERS) {
        peer *p = em_calloc(1, sizeof *p);
        if (p) {
            p->id = id;
            p->slot = n;
            pthread_mutex_init(&p->mu, NULL);
            pthread_mutex_init(&p->nmu, NULL);
            r->peers[n] = p;
            atomic_store_explicit(&r->npeers, n + 1, memory_order_release);
            slot = (int)n;
        }
    }
    pthread_mutex_unlock(&r->reg_mu);
    return slot;
}

/* Retransmission: after rto_ms without progress the window goes again, and
 * after twice the FULL_SYNC bound (or MAX_RETAIN bytes) it is given up (the
 * peer left, or is too far behind: it refuses what it lacks once it has
 * waited the bound, see on_update). */
static uint64_t rto_ms(const cl_repl *r)
{
    uint64_t t = r->o.timeout_ms / 8;
    return t < 100 ? 100 : t > 1000 ? 1000 : t;
}


/* prune drops from the window the updates the peer settled (acked or
 * refused), oldest first; p->mu held. */
static void prune(cl_repl *r, peer *p, uint64_t now)
{
    size_t h = p->head;
    while (h < p->sent) {
        cl_rmsg_upd x;
        size_t at = h;
        if (cl_rmsg_upd_next(p->out.p, p->sent, &at, &x) != 1)
            break;                  /* cannot be: replicate queues none it would not read */
        rcache *c = cache_find(r, x.cache);
        ackv *a = c && x.part < c->parts
                      ? atomic_load_explicit(&c->ack[p->slot], memory_order_acquire) : NULL;
        if (a && atomic_load_explicit(&a[x.part].settled, memory_order_acquire) < x.ctr)
            break;
        h = at;
    }
    if (h != p->head) {
        p->head = h;
        p->moved_ms = now;
    } else if (p->sent > p->head && (now - p->moved_ms > 2ull * r->o.timeout_ms ||
                                     p->sent - p->head > MAX_RETAIN)) {
        p->head = p->sent;
        p->moved_ms = now;
        count(r, S_GIVEUP, 1);
    }
    if (p->head == p->out.len) {
        em_buf_reset(&p->out);
        p->head = p->sent = 0;
    } else if (p->head && p->head >= p->out.len - p->head) {
        /* What is left is no larger than what goes: moving it down costs
         * no more than the appends did, and the buffer stays as large as
         * the window, not as the stream. */
        memmove(p->out.p, p->out.p + p->head, p->out.len - p->head);
        p->out.len -= p->head;
        p->sent -= p->head;
        p->head = 0;
    }
}

/* send_range sends out[from, to) in frames of whole updates. */
static void send_range(cl_repl *r, peer *p, size_t from, size_t to)
{
    while (from < to) {
        size_t end = from;
        while (end < to) {
            size_t one = cl_rmsg_upd_size(p->out.p + end);
            if (end > from && end + one - from > SEND_CHUNK)
                break;
            end += one;
        }
        if (cl_node_send(r->o.node, p->id, CL_NET_MSG_REPL_UPDATE, p->out.p + from,
                         end - from) == 0)
            count(r, S_FRAMES, 1);
        from = end;
    }
}

/* send_notes sends p's fence notices: after every update queued for p so
 * far, which the link delivers first (p->mu held). */
static void send_notes(cl_repl *r, peer *p)
{
    if (!atomic_load_explicit(&p->nnote, memory_order_acquire))
        return;                     /* every send calls this: no lock without notices */
    uint8_t b[MAX_NOTES * CL_RMSG_PART];
    pthread_mutex_lock(&p->nmu);
    uint32_t n = p->nnote;
    for (uint32_t i = 0; i < n; i++)
        cl_rmsg_part_put(b + i * CL_RMSG_PART, p->note[i].cache, p->note[i].part);
    p->nnote = 0;
    pthread_mutex_unlock(&p->nmu);
    if (n)
        (void)cl_node_send(r->o.node, p->id, CL_NET_MSG_REPL_FENCED, b, n * CL_RMSG_PART);
}

/* peer_send sends p's queued updates, and its whole window again when the
 * peer asked or the window made no progress for rto_ms, then its fence
 * notices; p->mu held. */
static void window_send(cl_repl *r, peer *p);
static void peer_send(cl_repl *r, peer *p)
{
    if (r->hold[0] && access(r->hold, F_OK) == 0)
        return;                     /* tests only: the stream is held back */
    if (p->head != p->out.len)
        window_send(r, p);
    send_notes(r, p);
}

static void window_send(cl_repl *r, peer *p)
{
    uint64_t now = em_now_ms();
    prune(r, p, now);
    int again = atomic_exchange_explicit(&p->nack, 0, memory_order_acq_rel);
    /* Timed out: again only over a link that is up (a peer about to be
     * failed would make every interval copy the whole window for nothing). */
    if (p->sent > p->head && !again && now - p->moved_ms >= rto_ms(r) &&
        now - p->resent_ms >= rto_ms(r) && cl_node_link_up(r->o.node, p->id))
        again = 1;
    if (PLANT_NO_RESEND)
        again = 0;
    size_t from = p->sent;
    if (again && p->sent > p->head) {
        from = p->head;
        p->resent_ms = now;
        count(r, S_RESENT, 1);
    }
    if (p->head == p->sent)
        p->moved_ms = now;          /* the window opens with what leaves now */
    send_range(r, p, from, p->out.len);
    p->sent = p->out.len;
}

static void flush_peers(cl_repl *r, int try)
{
    uint32_t n = atomic_load_explicit(&r->npeers, memory_order_acquire);
    for (uint32_t i = 0; i < n; i++) {
        peer *p = r->peers[i];
        if (try) {
            if (pthread_mutex_trylock(&p->mu) != 0)
                continue;           /* a writer holds it and sends it itself */
        } else {
            pthread_mutex_lock(&p->mu);
        }
        peer_send(r, p);
        pthread_mutex_unlock(&p->mu);
    }
}

/* From the transport's tick, which runs inside the node's life lock: a
 * writer holding a stream lock takes that lock (shared) to send, so here
 * the stream locks are only tried - blocking would order the two locks
 * both ways, a deadlock once cl_node_stop waits for the life lock. */
static void await_tick(cl_repl *r);

void cl_repl_flush(cl_repl *r)
{
    flush_peers(r, 1);
    await_tick(r);
}

int cl_repl_send_after(cl_repl *r, cl_meta_uuid to, uint16_t type, const void *p, size_t n)
{
    int slot = peer_slot(r, to, 0);
    if (slot < 0)                   /* nothing ever streamed to it */
        return cl_node_send(r->o.node, to, type, p, n);
    peer *pe = r->peers[slot];
    if (pthread_mutex_trylock(&pe->mu) != 0)
        return EM_BUSY;
    peer_send(r, pe);
    prune(r, pe, em_now_ms());
    int rc = pe->head == pe->out.len ? cl_node_send(r->o.node, to, type, p, n) : EM_BUSY;
    pthread_mutex_unlock(&pe->mu);
    return rc;
}

/* ---- owners --------------------------------------------------------------- */

uint32_t cl_repl_owners(cl_topo *t, const st_cache_config *cfg, int32_t cache_id,
                        uint32_t part, uint32_t *idx, uint32_t max)
{
    cl_plan_group g = cl_plan_group_of(cfg, cache_id, cfg_parts(cfg));
    return cl_plan_owners(t, &g, part, idx, max);
}

int cl_repl_copy(cl_repl *r, const st_cache_config *cfg, int32_t cache_id, uint32_t part)
{
    cl_topo *t = cl_node_topo_acquire(r->o.node);
    int copy = ST_COPY_PRIMARY;
    if (t->self >= 0 && t->n > 1) {
        uint32_t idx[MAX_OWNERS];
        uint32_t k = cl_repl_owners(t, cfg, cache_id, part, idx, MAX_OWNERS);
        copy = ST_COPY_NONE;
        for (uint32_t i = 0; i < k; i++)
            if ((int)idx[i] == t->self)
                copy = i == 0 ? ST_COPY_PRIMARY : ST_COPY_BACKUP;
    }
    cl_node_topo_release(t);
    return copy;
}

static int copy_fn(void *arg, const st_cache_config *cfg, int32_t cache_id, uint32_t part)
{
    return cl_repl_copy(arg, cfg, cache_id, part);
}

/* ---- primary side: the observer ------------------------------------------- */

static void ticket_add(cl_repl *r, rcache *c, uint32_t part, uint64_t ctr, int full_sync,
                       int read)
{
    ticket *tk = &tl_ticket;
    tk->r = r;
    tk->full_sync |= full_sync;
    if (!full_sync)
        return;                     /* nothing to wait for */
    /* One entry per partition: batches usually touch a partition once, and
     * the last entry is the common repeat (a partition's keys together). */
    if (tk->n && tk->e[tk->n - 1].c == c && tk->e[tk->n - 1].part == part) {
        tk->e[tk->n - 1].ctr = ctr;
        tk->e[tk->n - 1].read &= read;
        return;
    }
    if (tk->n == TICKET_MAX) {
        tk->overflow = 1;
        return;
    }
    tk->e[tk->n++] = (tk_entry){ c, part, ctr, read };
}

/* The owners an update of this node's goes to, decided once before the log
 * hears of it: t is held until replicate is done with it (NULL: nothing to
 * stream - a LOCAL cache, a single member, not the primary here). */
typedef struct plan {
    cl_topo *t;
    const st_cache_config *cfg;
    uint32_t parts, k;
    uint32_t idx[MAX_OWNERS];
} plan;

static _Thread_local int tl_primary;
void cl_repl_primary_only(int on) { tl_primary = on; }

/* tl_pin: the topology a one-unit commit (st_tx_commit) runs on, from its
 * ST_UPD_TX to its ST_UPD_TX_END: its primary check (tx_moved) and every
 * write it then applies plan their owners on this one.  Planned on the
 * topology each write meets, a switch landing between the check and a
 * write would apply that write as a backup's - streamed to no one - after
 * the commit was let through as the primary's.  Held, it also keeps the
 * exchange's partition release waiting for the commit's last write. */
static _Thread_local cl_topo *tl_pin;
static _Thread_local uint64_t tl_pin_index;   /* cl_repl_tx_index */

uint64_t cl_repl_tx_index(void) { return tl_pin_index; }

static void tx_unpin(void)
{
    if (tl_pin)
        cl_node_topo_release(tl_pin);
    tl_pin = NULL;
}

static cl_topo *topo_now(cl_repl *r)
{
    if (!tl_pin)
        return cl_node_topo_acquire(r->o.node);
    cl_topo_hold(tl_pin);
    return tl_pin;
}

/* plan_owners fills pl for u (check: only the refusal below, pl->t stays
 * NULL): 0, or EM_STALE when a request's write meets
 * a topology in which this node no longer is the key's primary (it was
 * when the request was mapped: the primary moved in between).  Applied
 * here it would reach no other owner, and the primary would never have
 * it; refused, the store is left as it was and the request maps again.
 * A copy's own evictions, a CLEAR, a transaction's commit and a write to a
 * lost partition (under a policy that allows it) are not refused. */
static int plan_owners(cl_repl *r, const st_update *u, plan *pl, int check)
{
    pl->t = NULL;
    st_cache *sc = st_cache_find(r->o.store, u->cache_id);
    if (!sc)
        return 0;                   /* destroyed meanwhile: owners drop it too */
    pl->cfg = st_cache_cfg(sc);
    if (pl->cfg->cache_mode == 0)
        return 0;                   /* LOCAL: this node only */
    pl->parts = cfg_parts(pl->cfg);
    if (u->partition >= pl->parts)
        return 0;
    cl_topo *t = topo_now(r);
    uint32_t *idx = pl->idx;
    uint32_t k = t->n > 1 && t->self >= 0
                     ? cl_repl_owners(t, pl->cfg, u->cache_id, u->partition, idx, MAX_OWNERS) : 0;
    /* Held (cl_take.h): the primary here, but the one before has not
     * answered yet - refused as if the primary were elsewhere. */
    if (k >= 1 && tl_primary && !u->in_tx && !u->evict &&
        (u->kind == ST_UPD_PUT || u->kind == ST_UPD_REMOVE) &&
        ((int)idx[0] != t->self || cl_take_holds(r->o.take, u->cache_id, u->partition)) &&
        !cl_topo_part_lost(t, u->cache_id, u->partition)) {     /* lost: written anywhere */
        cl_node_topo_release(t);
        count(r, S_MOVED, 1);
        return EM_STALE;
    }
    if (check) {
        cl_node_topo_release(t);
        return 0;
    }
    /* MOVING copies get every write too (they load the rest meanwhile),
     * and a FULL_SYNC write waits for them as for any owner. */
    if (k >= 1 && (int)idx[0] == t->self) {
        /* Only those with a link up: one that has none yet loads what it
         * missed with its snapshot, which this node takes over that link
         * after this write (a FULL_SYNC write must not wait for it). */
        uint32_t mv[MAX_OWNERS];
        uint32_t m = cl_topo_moving(t, u->cache_id, pl->parts, u->partition, mv, MAX_OWNERS - k);
        for (uint32_t i = 0; i < m; i++)
            if (cl_node_link_up(r->o.node, t->m[mv[i]].id))
                idx[k++] = mv[i];
    }
    if (k < 2 || (int)idx[0] != t->self) {
        /* No other owner, or not the primary here (a clear every member
         * runs on its own copies, an eviction): only a primary streams. */
        cl_node_topo_release(t);
        return 0;
    }
    pl->t = t;
    pl->k = k;
    return 0;
}

static int replicate(cl_repl *r, const st_update *u, plan *pl)
{
    cl_topo *t = pl->t;
    const st_cache_config *cfg = pl->cfg;
    uint32_t parts = pl->parts, k = pl->k;
    const uint32_t *idx = pl->idx;
    int rc = EM_NOMEM;
    rcache *c = cache_get(r, u->cache_id, parts);
    if (!c)
        goto out;
    /* The other owners' slots, ascending: their stream locks are taken in
     * that order (a global order, so two writers never deadlock). */
    uint32_t slots[MAX_OWNERS], ns = 0;
    for (uint32_t i = 1; i < k; i++) {
        int slot = peer_slot(r, t->m[idx[i]].id, 1);
        if (slot < 0 || !cache_ack(r, c, (uint32_t)slot))
            goto out;
        uint32_t j = ns++;
        while (j && slots[j - 1] > (uint32_t)slot) {
            slots[j] = slots[j - 1];
            j--;
        }
        slots[j] = (uint32_t)slot;
    }
    size_t was[MAX_OWNERS];
    for (uint32_t i = 0; i < ns; i++) {
        pthread_mutex_lock(&r->peers[slots[i]]->mu);
        was[i] = r->peers[slots[i]]->out.len;
    }
    /* Under the partition's lock: the only writer of this counter. */
    uint64_t ctr = atomic_load_explicit(&c->ctr[u->partition], memory_order_relaxed) + 1;
    /* Header, then the WAL record, encoded once - straight into the first
     * owner's stream - and copied into the others'. */
    em_buf *first = &r->peers[slots[0]]->out;
    size_t at = first->len;
    /* A write a forwarder may retry carries its origin request id, so every
     * owner can answer the retry after a failover (cl_rid.h). */
    cl_rmsg_upd hd = {.cache = u->cache_id, .part = u->partition, .ctr = ctr};
    hd.has_rid = u->kind != ST_UPD_CLEAR && cl_rid_current(&hd.rid, &hd.rid_op);
    size_t hlen = CL_RMSG_UPD_HDR + (hd.has_rid ? CL_RMSG_RID_EXT : 0);
    rc = em_buf_reserve(first, hlen);
    if (!rc) {
        first->len += hlen;
        rc = wal_encode_update(first, u, em_wall_ms());
    }
    hd.epoch = t->major << 32 | t->minor;           /* the epoch: the topology version */
    if (!rc && first->len - at - hlen > CL_RMSG_MAX_REC)
        rc = EM_TOOBIG;             /* the owners would refuse it: the write fails here */
    if (!rc) {
        hd.len = (uint32_t)(first->len - at - hlen);
        (void)cl_rmsg_upd_put(first->p + at, &hd);
        for (uint32_t i = 1; i < ns && !rc; i++)
            rc = em_buf_append(&r->peers[slots[i]]->out, first->p + at, first->len - at);
    }
    /* Per owner: the counter last sent to it for this partition, so it can
     * tell a lost update from one that was never its own, and whether the
     * epoch changed since (a new stream may begin here). */
    for (uint32_t i = 0; i < ns && !rc; i++) {
        ackv *a = atomic_load_explicit(&c->ack[slots[i]], memory_order_acquire);
        cl_rmsg_upd_set_prev(r->peers[slots[i]]->out.p + was[i],
                             atomic_load_explicit(&a[u->partition].sent, memory_order_relaxed),
                             a[u->partition].sent_epoch != hd.epoch);
    }
    if (rc) {
        for (uint32_t i = 0; i < ns; i++)   /* nothing half-appended stays queued */
            r->peers[slots[i]]->out.len = was[i];
    } else {
        for (uint32_t i = 0; i < ns; i++) {
            ackv *a = atomic_load_explicit(&c->ack[slots[i]], memory_order_acquire);
            atomic_store_explicit(&a[u->partition].sent, ctr, memory_order_release);
            a[u->partition].sent_epoch = hd.epoch;
        }
        /* After every owner's sent: a reader (seen) that loads this counter
         * finds it in each owner's sent, never an older one. */
        atomic_store_explicit(&c->ctr[u->partition], ctr, memory_order_release);
        count(r, S_SENT, ns);
    }
    /* Nothing is sent from here: the partition lock is held, and sending
     * takes the node's life lock, which the transport holds while it
     * applies updates under partition locks.  The request's finish (or the
     * tick) sends; a stream is as large as one request's updates. */
    for (uint32_t i = ns; i-- > 0;)
        pthread_mutex_unlock(&r->peers[slots[i]]->mu);
    if (!rc)
        ticket_add(r, c, u->partition, ctr, cfg->write_sync_mode == 0, 0);
out:
    cl_node_topo_release(t);
    return rc;
}

/* hist_note: an update applied here goes into the history log when its
 * cache is persistent (only a copy that survives a restart comes back for
 * history). */
static void hist_note(cl_repl *r, const st_update *u)
{
    if (!r->o.hist)
        return;
    st_cache *c = st_cache_find(r->o.store, u->cache_id);
    if (c && !st_cache_in_memory(c))
        cl_hist_note(r->o.hist, u);
}

/* tx_moved: a request's one-unit commit (an implicit transaction's, its
 * writes mapped here as their keys' primary) is refused whole, before the
 * WAL hears of it, when one of its keys has another primary by now - as
 * plan_owners refuses a single write.  Its writes are then applied one by
 * one (in_tx), each streamed on the topology checked here (tl_pin). */
static int tx_moved(cl_repl *r, const st_update *u)
{
    int rc = 0;
    for (uint32_t i = 0; tl_primary && !rc && i < u->nbatch; i++) {
        plan pl;
        rc = plan_owners(r, &u->batch[i], &pl, 1);
    }
    return rc;
}

static int observe(void *arg, const st_update *u)
{
    cl_repl *r = arg;
    if (u->kind == ST_UPD_TX_END) {
        tx_unpin();
        return 0;
    }
    if (u->kind == ST_UPD_TX) {
        tx_unpin();                 /* none is left over; defensive */
        tl_pin = cl_node_topo_acquire(r->o.node);
        tl_pin_index = cl_topo_index(tl_pin);
    }
    int data = u->kind == ST_UPD_PUT || u->kind == ST_UPD_REMOVE || u->kind == ST_UPD_CLEAR;
    plan pl = { .t = NULL };
    int rc = data ? plan_owners(r, u, &pl, 0) : u->kind == ST_UPD_TX ? tx_moved(r, u) : 0;
    if (rc)
        return rc;                  /* before the WAL: the write did not happen */
    if (r->down && !u->in_tx && (rc = r->down(r->down_arg, u)) != 0) {
        if (pl.t)
            cl_node_topo_release(pl.t);
        return rc;                  /* a write the WAL refused is not streamed */
    }
    if (!data)
        return 0;                   /* cache starts and stops: the metadata group */
    if (u->kind != ST_UPD_CLEAR)
        cl_rid_note_effect();       /* a retried write must not run again */
    /* Into the log before the stream (under the partition's lock): a
     * supplier answering from its log after its topology has a new copy
     * finds there every write not streamed to that copy (cl_rebal serve).
     * A write the stream then refuses leaves its counter to the next one,
     * which the log takes as a break in the partition's run. */
    hist_note(r, u);
    return pl.t ? replicate(r, u, &pl) : 0;
}

/* ---- reads on the primary --------------------------------------------------
 *
 * The primary applies a write before any other owner has it, and a read
 * here sees it at once.  Answered then, the read may show a value that
 * dies with this node: killed before its stream leaves, the new primary
 * never had it, and the next read goes back to the value before - a
 * history no copy gives (a register read there is not linearizable).  So
 * a request that looked at a partition it runs on as the primary (the
 * store's read observer, after the partition's lock: every update it can
 * have seen has taken its counter) waits, under FULL_SYNC, as a write
 * would: until every owner settled the partition's counter as it is now.
 * Settled, not acked: a refusal is never undone, and waiting on it would
 * leave the partition unreadable here until its next write.  The ticket
 * carries it, so a read on a client's loop is held like a write's reply,
 * with no thread waiting (the transport thread hands a batch read that
 * would wait for more than a deferred wait holds to a worker).  A write's
 * own entry already covers what it saw.  Nothing to wait for - no update
 * unsettled, the common case - costs a few loads.  Reads inside explicit
 * transactions, scans and SQL are not held. */

/* read_settled: 1 when every owner that was sent partition part's update
 * ctr settled it - acked it, or refused it (a refusal fences a deposed
 * primary, which has no lease by then or handed the partition over, or
 * makes the refusing copy catch up from this one) - 0 while one has not.
 * On t: its members (an owner that left is not waited for); NULL: every
 * peer slot, without the topology (the first, cheap look). */
static int read_settled(cl_repl *r, const cl_topo *t, rcache *c, uint32_t part, uint64_t ctr)
{
    uint32_t n = t ? t->n : atomic_load_explicit(&r->npeers, memory_order_acquire);
    for (uint32_t i = 0; i < n; i++) {
        int slot = (int)i;
        if (t && ((int)i == t->self || (slot = peer_slot(r, t->m[i].id, 0)) < 0))
            continue;
        ackv *a = atomic_load_explicit(&c->ack[slot], memory_order_acquire);
        if (a && atomic_load_explicit(&a[part].sent, memory_order_acquire) >= ctr &&
            atomic_load_explicit(&a[part].settled, memory_order_acquire) < ctr)
            return 0;
    }
    return 1;
}

static void seen(void *arg, st_cache *sc, uint32_t part)
{
    cl_repl *r = arg;
    if (!tl_primary)
        return;                     /* not a request mapped to this node's copy */
    const st_cache_config *cfg = st_cache_cfg(sc);
    if (cfg->write_sync_mode != 0)
        return;                     /* not FULL_SYNC: nothing waits for the owners */
    int32_t cache_id = st_cache_id(sc);
    rcache *c = cache_find(r, cache_id);
    if (!c || part >= c->parts)
        return;                     /* nothing ever written here as its primary */
    ticket *tk = &tl_ticket;
    if (tk->r == r && tk->n && tk->e[tk->n - 1].c == c && tk->e[tk->n - 1].part == part)
        return;                     /* this request's own write, later than what it saw */
    uint64_t ctr = atomic_load_explicit(&c->ctr[part], memory_order_acquire);
    if (!ctr || read_settled(r, NULL, c, part, ctr))
        return;                     /* every owner sent the counter settled it */
    /* Only as the primary (a backup's counter is the one it took when it
     * last was the primary), and only for the owners there now. */
    cl_topo *t = topo_now(r);
    uint32_t idx[MAX_OWNERS];
    uint32_t k = t->n > 1 && t->self >= 0
                     ? cl_repl_owners(t, cfg, cache_id, part, idx, MAX_OWNERS) : 0;
    int wait = k >= 1 && (int)idx[0] == t->self && !read_settled(r, t, c, part, ctr);
    cl_node_topo_release(t);
    if (!wait)
        return;
    ticket_add(r, c, part, ctr, 1, 1);
    count(r, S_READ_WAITS, 1);
}

/* ---- FULL_SYNC ------------------------------------------------------------- */

/* entry_state: 1 when every owner (on t, excluding this node) that was sent
 * e's update acked it, 0 while one has not, EM_STALE when one refused it
 * (read: what a request read, settled by a refusal - read_settled).
 * Owners that left t are not asked: they are dropped from the wait. */
static int entry_state(cl_repl *r, cl_topo *t, rcache *c, uint32_t part, uint64_t ctr, int read)
{
    if (read)
        return read_settled(r, t, c, part, ctr);
    for (uint32_t i = 0; i < t->n; i++) {
        if ((int)i == t->self)
            continue;
        int slot = peer_slot(r, t->m[i].id, 0);
        if (slot < 0)
            continue;
        ackv *a = atomic_load_explicit(&c->ack[slot], memory_order_acquire);
        if (!a)
            continue;
        if (atomic_load_explicit(&a[part].sent, memory_order_acquire) < ctr)
            continue;               /* not an owner when it was written */
        if (a[part].refused_lo <= ctr && ctr <= a[part].refused_hi)
            return EM_STALE;        /* (under wait_mu, as on_ack writes it) */
        if (atomic_load_explicit(&a[part].acked, memory_order_acquire) < ctr)
            return 0;
    }
    return 1;
}

static int ticket_state(cl_repl *r, cl_topo *t, ticket *tk, waiter *w)
{
    for (uint32_t i = 0; i < tk->n; i++) {
        int st = entry_state(r, t, tk->e[i].c, tk->e[i].part, tk->e[i].ctr, tk->e[i].read);
        if (st != 1) {
            w->c = tk->e[i].c;
            w->part = tk->e[i].part;
            w->ctr = tk->e[i].ctr;
            return st;
        }
    }
    if (tk->overflow && tk->n) {
        /* Past TICKET_MAX partitions: every partition of the cache up to
         * what was sent when the wait began. */
        rcache *c = tk->e[0].c;
        for (uint32_t p = 0; p < c->parts; p++) {
            uint64_t ctr = atomic_load_explicit(&c->ctr[p], memory_order_relaxed);
            if (!ctr)
                continue;
            int st = entry_state(r, t, c, p, ctr, 0);
            if (st != 1) {
                w->c = c;
                w->part = p;
                w->ctr = ctr;
                return st;
            }
        }
    }
    return 1;
}

/* The streams a loop thread's writes filled during its pass, sent once at
 * its end (cl_repl_pass_end): one REPL_UPDATE per peer for all of them. */
static _Thread_local cl_repl *tl_owed;

/* finish_send sends this thread's streams (later: leaves them to
 * cl_repl_pass_end): 1 when its request must then wait for acks (the
 * ticket kept), 0 when not (the ticket cleared). */
static int finish_send(cl_repl *r, int later)
{
    ticket *tk = &tl_ticket;
    if (tk->r != r) {
        cl_repl_begin();
        return 0;
    }
#ifdef EM_PLANT_ACK_EARLY
    cl_repl_begin();
    tk->r = NULL;
    return 0;
#endif
    if (later)
        tl_owed = r;
    else
        flush_peers(r, 0);
    if (!tk->full_sync || !tk->n) {
        cl_repl_begin();
        tk->r = NULL;
        return 0;
    }
    return 1;
}

/* ticket_wait waits for the acks of this thread's ticket (finish_send
 * said 1), then clears it. */
static int ticket_wait(cl_repl *r)
{
    ticket *tk = &tl_ticket;
    count(r, S_WAITS, 1);
    uint64_t end = em_now_ms() + r->o.timeout_ms;
    int rc;
    waiter w = { .next = NULL };
    pthread_condattr_t ca;
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    pthread_cond_init(&w.cv, &ca);
    pthread_condattr_destroy(&ca);
    pthread_mutex_lock(&r->wait_mu);
    w.next = r->waiters;
    r->waiters = &w;
    for (;;) {
        cl_topo *t = cl_node_topo_acquire(r->o.node);
        int st = ticket_state(r, t, tk, &w);
        cl_node_topo_release(t);
        if (st == 1) {
            rc = 0;
            break;
        }
        if (st < 0) {
            rc = st;
            break;
        }
        uint64_t now = em_now_ms();
        if (now >= end) {
            rc = EM_TIMEOUT;
            count(r, S_TIMEOUTS, 1);
            break;
        }
        /* The ack for (w.c, w.part, w.ctr), a refusal or a topology change
         * signals; the bound covers a missed wake-up as well. */
        struct timespec ts;
        clock_gettime(CLOCK_MONOTONIC, &ts);
        uint64_t ms = end - now < 100 ? end - now : 100;
        ts.tv_nsec += (long)(ms * 1000000u);
        ts.tv_sec += ts.tv_nsec / 1000000000L;
        ts.tv_nsec %= 1000000000L;
        pthread_cond_timedwait(&w.cv, &r->wait_mu, &ts);
    }
    for (waiter **x = &r->waiters; *x; x = &(*x)->next)
        if (*x == &w) {
            *x = w.next;
            break;
        }
    pthread_mutex_unlock(&r->wait_mu);
    pthread_cond_destroy(&w.cv);
    cl_repl_begin();
    tk->r = NULL;
    return rc;
}

int cl_repl_finish(cl_repl *r)
{
    return finish_send(r, 0) ? ticket_wait(r) : 0;
}

static int finish_defer(cl_repl *r, int later)
{
    if (!finish_send(r, later))
        return 0;
    ticket *tk = &tl_ticket;
    if (tk->n <= CL_REPL_AWAIT_MAX && !tk->overflow)
        return CL_REPL_DEFERRED;
    cl_repl_pass_end();             /* what it waits for must leave first */
    return ticket_wait(r);
}

int cl_repl_finish_defer(cl_repl *r) { return finish_defer(r, 0); }

int cl_repl_ticket_fits(void)
{
    const ticket *tk = &tl_ticket;
    return !tk->r || (tk->n <= CL_REPL_AWAIT_MAX && !tk->overflow);
}
int cl_repl_finish_pass(cl_repl *r) { return finish_defer(r, 1); }

void cl_repl_pass_end(void)
{
    cl_repl *r = tl_owed;
    if (r) {
        tl_owed = NULL;
        flush_peers(r, 0);
    }
}

/* ---- awaits ---------------------------------------------------------------
 *
 * The same wait without a thread: an await holds the few (cache, partition,
 * counter) a request must see acked, starting at the first one not acked
 * yet.  Whatever may settle one looks at the awaits under wait_mu: an ack
 * (only those whose next entry it names), a topology change and the tick
 * (all of them; the tick also times them out). */

/* await_state: 1 when every entry is acked (a->at moves past the acked
 * ones), 0 while one is not, EM_STALE when one was refused. */
static int await_state(cl_repl *r, cl_topo *t, cl_repl_await *a)
{
    for (; a->at < a->n; a->at++) {
        int st = entry_state(r, t, a->e[a->at].c, a->e[a->at].part, a->e[a->at].ctr,
                             a->e[a->at].read);
        if (st != 1)
            return st;
    }
    return 1;
}

/* await_settle unlinks *x (wait_mu held) with result rc and pushes it on
 * *later: its done runs after the unlock (run_later).  A cancel_waits
 * await's done sends a client's reply, and the client loop takes wait_mu
 * for every FULL_SYNC write it holds: under the lock, that send made the
 * loop sleep on it (through one node, 0.07 futex calls per put).  It is
 * marked settling instead, until its done has returned: a cancel, or a new
 * start on the same storage, waits for that. */
static void await_settle(cl_repl *r, cl_repl_await **x, int rc, cl_repl_await **later)
{
    cl_repl_await *a = *x;
    *x = a->next;
    if (rc == EM_TIMEOUT)
        count(r, S_TIMEOUTS, 1);
    a->settling = (uint8_t)(a->cancel_waits != 0);
    a->rc = rc;                     /* carried to run_later */
    a->next = *later;
    *later = a;
}

static void run_later(cl_repl *r, cl_repl_await *later)
{
    while (later) {
        cl_repl_await *a = later;
        later = a->next;
        int cw = a->cancel_waits;
        a->done(a->arg, a->rc);
        if (cw) {                   /* (a stays the owner's until settling is 0) */
            pthread_mutex_lock(&r->wait_mu);
            a->settling = 0;
            if (r->settle_waits)
                pthread_cond_broadcast(&r->settle_cv);
            pthread_mutex_unlock(&r->wait_mu);
        }
    }
}

/* settled_wait: until a's done (cancel_waits) has returned; wait_mu held. */
static void settled_wait(cl_repl *r, cl_repl_await *a)
{
    while (a->settling) {
        r->settle_waits++;
        pthread_cond_wait(&r->settle_cv, &r->wait_mu);
        r->settle_waits--;
    }
}

/* await_scan settles the awaits that can be (wait_mu held): with c set,
 * only those waiting next for (c, part, up to ctr); now != 0 also times
 * out the late ones. */
static void await_scan(cl_repl *r, cl_topo *t, rcache *c, uint32_t part, uint64_t ctr,
                       uint64_t now, cl_repl_await **later)
{
    for (cl_repl_await **x = &r->awaits; *x;) {
        cl_repl_await *a = *x;
        if (c && (a->e[a->at].c != c || a->e[a->at].part != part || a->e[a->at].ctr > ctr)) {
            x = &a->next;
            continue;
        }
        int st = await_state(r, t, a);
        if (st == 0 && now && now >= a->end_ms)
            st = EM_TIMEOUT;
        if (st == 0)
            x = &a->next;
        else
            await_settle(r, x, st == 1 ? 0 : st, later);
    }
}

int cl_repl_await_start(cl_repl *r, cl_repl_await *a, int *rc)
{
    ticket *tk = &tl_ticket;
    a->n = a->at = 0;
    for (uint32_t i = 0; i < tk->n && i < CL_REPL_AWAIT_MAX; i++) {
        a->e[i].c = tk->e[i].c;
        a->e[i].part = tk->e[i].part;
        a->e[i].ctr = tk->e[i].ctr;
        a->e[i].read = tk->e[i].read;
        a->n++;
    }
    cl_repl_begin();
    tk->r = NULL;
    count(r, S_WAITS, 1);
    a->end_ms = em_now_ms() + r->o.timeout_ms;
    cl_topo *t = cl_node_topo_acquire(r->o.node);
    pthread_mutex_lock(&r->wait_mu);
    settled_wait(r, a);
    int st = await_state(r, t, a);
    if (st == 0) {
        a->next = r->awaits;
        r->awaits = a;
    }
    pthread_mutex_unlock(&r->wait_mu);
    cl_node_topo_release(t);
    if (st == 0)
        return 0;
    *rc = st == 1 ? 0 : st;
    return 1;
}

/* await_tick: the awaits' backstop on the tick - one whose ack was missed,
 * or that ran late. */
static void await_tick(cl_repl *r)
{
    cl_repl_await *later = NULL;
    cl_topo *t = cl_node_topo_acquire(r->o.node);
    pthread_mutex_lock(&r->wait_mu);
    if (r->awaits)
        await_scan(r, t, NULL, 0, 0, em_now_ms(), &later);
    pthread_mutex_unlock(&r->wait_mu);
    cl_node_topo_release(t);
    run_later(r, later);
}

int cl_repl_await_cancel(cl_repl *r, cl_repl_await *a)
{
    int found = 0;
    pthread_mutex_lock(&r->wait_mu);
    settled_wait(r, a);
    for (cl_repl_await **x = &r->awaits; *x; x = &(*x)->next)
        if (*x == a) {
            *x = a->next;
            found = 1;
            break;
        }
    pthread_mutex_unlock(&r->wait_mu);
    return found;
}

void cl_repl_await_drain(cl_repl *r)
{
    if (!r)
        return;
    cl_repl_await *later = NULL;
    pthread_mutex_lock(&r->wait_mu);
    while (r->awaits)
        await_settle(r, &r->awaits, EM_CLOSED, &later);
    pthread_mutex_unlock(&r->wait_mu);
    run_later(r, later);
}

void cl_repl_topology(cl_repl *r)
{
    cl_repl_await *later = NULL;
    cl_topo *t = cl_node_topo_acquire(r->o.node);
    pthread_mutex_lock(&r->wait_mu);
    for (waiter *w = r->waiters; w; w = w->next)
        pthread_cond_signal(&w->cv);
    await_scan(r, t, NULL, 0, 0, 0, &later);
    pthread_mutex_unlock(&r->wait_mu);
    cl_node_topo_release(t);
    run_later(r, later);
}

/* ---- owner side ------------------------------------------------------------ */

/* ack_put records in this frame's answer, per partition, the highest
 * contiguous counter applied (status 0, cumulative) or a refused range
 * [from, ctr] (status EM_*), merging entries of one partition and kind. */
static int ack_put(cl_repl *r, int32_t cache, uint32_t part, uint64_t from, uint64_t ctr,
                   int status)
{
    em_buf *b = &r->ack_out;
    cl_rmsg_ack e;
    for (size_t at = 0, was = 0; cl_rmsg_ack_next(b->p, b->len, &at, &e); was = at)
        if (e.cache == cache && e.part == part && e.status == status) {
            e.ctr = ctr > e.ctr ? ctr : e.ctr;
            e.from = from < e.from ? from : e.from;
            cl_rmsg_ack_put(b->p + was, &e);
            return 0;
        }
    int rc = em_buf_reserve(b, CL_RMSG_ACK);
    if (rc)
        return rc;
    cl_rmsg_ack_put(b->p + b->len, &(cl_rmsg_ack){ cache, part, ctr, from, status });
    b->len += CL_RMSG_ACK;
    return 0;
}

/* fenced: the stream rule (cl_plan_fenced) for cache's group. */
static int fenced(cl_topo *t, const st_cache_config *cfg, int32_t cache,
                  uint32_t part, uint64_t epoch, cl_meta_uuid from)
{
    cl_plan_group g = cl_plan_group_of(cfg, cache, cfg_parts(cfg));
    return cl_plan_fenced(t, &g, part, epoch, from);
}

/* fresh_owner: this node owns (cache, part) on t - not as a MOVING copy -
 * and its copy never had an update (store counter 0).  An update numbered
 * past 1 then follows updates it never got (a primary that died with them
 * in flight, whose successor had them): the counter-jump rule's case with
 * nothing applied before it. */
static int fresh_owner(cl_topo *t, st_cache *sc, int32_t cache, uint32_t part)
{
    uint64_t cntr = 0, size = 0;
    if (t->self < 0 || st_part_info(sc, part, &cntr, &size) != 0 || cntr)
        return 0;
    const st_cache_config *cfg = st_cache_cfg(sc);
    cl_plan_group g = cl_plan_group_of(cfg, cache, cfg_parts(cfg));
    uint32_t own[MAX_OWNERS];
    uint32_t n = cl_plan_owners(t, &g, part, own, MAX_OWNERS);
    for (uint32_t i = 0; i < n; i++)
        if (own[i] == (uint32_t)t->self)
            return 1;
    return 0;
}

/* stale: the copy catches up (never under EM_PLANT_NO_RESEND, whose skipped
 * updates idle-verify must find). */
static void stale(cl_repl *r, int32_t cache, uint32_t part, int skipped)
{
    if (r->o.on_stale && !PLANT_NO_RESEND)
        r->o.on_stale(r->o.on_stale_arg, cache, part, skipped);
}

void cl_repl_member_left(cl_repl *r, cl_meta_uuid id, uint64_t exch)
{
    pthread_mutex_lock(&r->left_mu);
    uint32_t n = atomic_load_explicit(&r->nleft, memory_order_relaxed), i = 0;
    while (i < n && !cl_meta_uuid_eq(r->left[i], id))
        i++;
    if (i == n) {
        r->left[r->left_at] = id;
        r->left_at = (r->left_at + 1) % LEFT_MAX;
        if (n < LEFT_MAX)
            atomic_store_explicit(&r->nleft, n + 1, memory_order_release);
    }
    if (exch > r->left_exch)
        r->left_exch = exch;
    pthread_mutex_unlock(&r->left_mu);
}

/* has_left: an exchange under way said member `from` left, and t is older
 * than that exchange's topology (once t is not, the list is cleared). */
static int has_left(cl_repl *r, cl_topo *t, cl_meta_uuid from)
{
    if (!atomic_load_explicit(&r->nleft, memory_order_acquire))
        return 0;
    int found = 0;
    pthread_mutex_lock(&r->left_mu);
    if ((t->major << 32 | t->minor) >= r->left_exch) {
        atomic_store_explicit(&r->nleft, 0, memory_order_relaxed);
        r->left_at = 0;
        r->left_exch = 0;
    } else {
        uint32_t n = atomic_load_explicit(&r->nleft, memory_order_relaxed);
        for (uint32_t i = 0; i < n && !found; i++)
            found = cl_meta_uuid_eq(r->left[i], from);
    }
    pthread_mutex_unlock(&r->left_mu);
    return found;
}

/* The stream rules, per partition, for an update (ctr, prev) from the
 * sender with slot + 1 = src:
 *  - from the sender of what was applied: a duplicate when ctr <= applied,
 *    next when prev <= applied (counters between were not this owner's),
 *    else a gap: something this owner should have is missing;
 *  - from another sender: a new stream when prev is 0 (its first update to
 *    this owner) or the epoch changed since prev (a new primary, or a copy
 *    loading again: what came before is the exchange's and rebalancing's to
 *    bring), else a gap.
 * A gap is answered EM_AGAIN, nothing applied, and the primary sends its
 * window again.  Only when it lasts timeout_ms (the primary no longer has
 * the updates) are the missing ones refused - their writers get an error,
 * never an ack - and the stream goes on, so one lost frame cannot stop a
 * partition's writes for good; the copy, now short of them, loads again
 * (on_stale). */
static void on_update(cl_repl *r, cl_net_link *l, cl_meta_uuid from, const uint8_t *p,
                      size_t n)
{
    em_buf_reset(&r->ack_out);
    int slot = peer_slot(r, from, 1);
    uint32_t src = slot < 0 ? 0 : (uint32_t)slot + 1;
    cl_topo *t = cl_node_topo_acquire(r->o.node);
    uint64_t now = 0;
    int any = 0;
    size_t at = 0;
    cl_rmsg_upd m;
    while (cl_rmsg_upd_next(p, n, &at, &m) == 1) {     /* malformed: the rest is dropped */
        int32_t cache = m.cache;
        uint32_t part = m.part;
        uint64_t ctr = m.ctr, prev = m.prev, epoch = m.epoch;
        st_cache *sc = st_cache_find(r->o.store, cache);
        if (!sc && r->o.find_cache)
            sc = r->o.find_cache(r->o.find_arg, cache);
        int status = 0;
        rcache *c = NULL;
        if (!sc) {
            status = EM_NOCACHE;
        } else {
            const st_cache_config *cfg = st_cache_cfg(sc);
            uint32_t parts = cfg_parts(cfg);
            if (part >= parts || !ctr || prev >= ctr || !src)
                status = EM_PROTO;
            else if (!(c = cache_get(r, cache, parts)))
                status = EM_AGAIN;  /* out of memory: ask again later */
            else if (has_left(r, t, from))
                /* A member that left, whose update was late here: this copy
                 * reported its counter without it (cl_repl_member_left);
                 * refused, not applied, nothing to catch up. */
                status = EM_FENCED;
        }
        int same = c && c->src[part] == src;
        if (!status && same && ctr <= c->applied[part]) {
            (void)ack_put(r, cache, part, 0, c->applied[part], 0);   /* a duplicate */
            continue;
        }
        /* (a primary this node takes the partition over from is not
         * fenced until it answered: its writes may have been read there) */
        if (!status && ((fenced(t, st_cache_cfg(sc), cache, part, epoch, from) &&
                         !cl_take_from(r->o.take, cache, part, from)) ||
                        epoch < c->epoch[part])) {
            /* From a deposed primary: other owners may have applied it (and
             * the new primary with them) - this copy catches up. */
            status = EM_FENCED;
            stale(r, cache, part, 0);
        }
        if (!status) {
            int gap = same ? prev > c->applied[part] : !(m.restart || prev == 0);
            if (gap) {
                if (!now)
                    now = em_now_ms();
                if (!c->gap_ms[part])
                    c->gap_ms[part] = now;
                if (!PLANT_NO_RESEND && now - c->gap_ms[part] < r->o.timeout_ms) {
                    (void)ack_put(r, cache, part, same ? c->applied[part] + 1 : prev, prev,
                                  EM_AGAIN);
                    count(r, S_NACKS, 1);
                    continue;
                }
                if (same)           /* given up: refused, never acked */
                    (void)ack_put(r, cache, part, c->applied[part] + 1, prev, EM_STALE);
                count(r, S_SKIPPED, 1);
                stale(r, cache, part, 1);
            }
            if (!same || gap) {
                c->src[part] = src;
                c->applied[part] = ctr - 1;
            }
            c->gap_ms[part] = 0;
            if (epoch > c->epoch[part])
                c->epoch[part] = epoch;
            wal_cmd cmd;
            st_update u;
            st_cache_config vcfg;
            status = wal_cmd_unmarshal(m.rec, m.len, &cmd);
            if (!status)
                status = wal_decode_update(&cmd, &u, &vcfg);
            if (!status && (u.cache_id != cache || u.partition != part ||
                            (u.kind != ST_UPD_PUT && u.kind != ST_UPD_REMOVE &&
                             u.kind != ST_UPD_CLEAR)))
                status = EM_PROTO;
            /* The partition's own counter, which every update carries:
             * one that does not follow the last this copy applied from a
             * stream means it missed updates of another stream (a primary
             * deposed with writes in flight, one that died) or holds some
             * the new primary never had - it catches up (on_stale).  The
             * store's counter is not the reference: a copy's own evictions
             * move it. */
            int jump = !status && u.cntr &&
                       (c->last[part] ? u.cntr != c->last[part] + 1
                                      : u.cntr > 1 && fresh_owner(t, sc, cache, part));
            if (!status) {
                status = st_apply(r->o.store, &u);
                /* The owner's own log: st_apply does not call the
                 * observer, so the WAL hears of it once, here. */
                if (!status && r->down)
                    status = r->down(r->down_arg, &u);
                if (!status && r->o.on_apply)
                    r->o.on_apply(r->o.on_apply_arg, &u);
                if (!status)
                    hist_note(r, &u);
                if (!status && m.has_rid && r->o.rids)
                    cl_rids_learn(r->o.rids, m.rid, m.rid_op);
                if (!status && jump)
                    stale(r, cache, part, 0);
                if (!status && u.cntr)
                    c->last[part] = u.cntr;
            }
            if (!status) {
                c->applied[part] = ctr;
                any = 1;
                count(r, S_APPLIED, 1);
                (void)ack_put(r, cache, part, 0, ctr, 0);
                continue;
            }
            if (status == EM_NOMEM) {
                status = EM_AGAIN;  /* not applied: the window brings it again */
            } else {
                c->applied[part] = ctr; /* refused, settled: the stream goes past it */
                stale(r, cache, part, 1);
            }
        }
        count(r, S_REFUSED, 1);
        (void)ack_put(r, cache, part, ctr, ctr, status);
    }
    cl_node_topo_release(t);
    if (any && r->o.durable) {
        int rc = r->o.durable(r->o.durable_arg);
        if (rc)
            return;                 /* not durable: no ack (the primary times out) */
    }
    if (r->ack_out.len)
        (void)cl_net_link_send(l, CL_NET_MSG_REPL_ACK, r->ack_out.p, r->ack_out.len);
}

/* fence_notify: owner `by` refused this node's updates of (c, part) from
 * lo on as from a deposed primary.  The other copies they were sent to may
 * have applied them before they knew of the new primary, which never had
 * them; nothing else would tell them (the new primary may write that
 * partition no more), so each is told to catch up - after those updates,
 * on the same link (send_notes).  Transport thread: the notice waits in
 * the peer's list, and goes now only when its stream lock is free. */
static void fence_notify(cl_repl *r, rcache *c, uint32_t part, uint64_t lo, int by)
{
    uint32_t n = atomic_load_explicit(&r->npeers, memory_order_acquire);
    for (uint32_t i = 0; i < n; i++) {
        ackv *a = atomic_load_explicit(&c->ack[i], memory_order_acquire);
        if ((int)i == by || !a || atomic_load_explicit(&a[part].sent, memory_order_relaxed) < lo)
            continue;
        peer *pe = r->peers[i];
        pthread_mutex_lock(&pe->nmu);
        uint32_t k = 0;
        while (k < pe->nnote && !(pe->note[k].cache == c->id && pe->note[k].part == part))
            k++;
        if (k == pe->nnote && k < MAX_NOTES)
            pe->note[pe->nnote++] = (struct fnote){ c->id, part };
        pthread_mutex_unlock(&pe->nmu);
        count(r, S_NOTICES, 1);
        if (pthread_mutex_trylock(&pe->mu) == 0) {
            peer_send(r, pe);
            pthread_mutex_unlock(&pe->mu);
        }                           /* else its holder, or the next tick, sends it */
    }
}

static void on_ack(cl_repl *r, cl_meta_uuid from, const uint8_t *p, size_t n)
{
    int slot = peer_slot(r, from, 0);
    if (slot < 0)
        return;
    int nack = 0;
    cl_repl_await *later = NULL;
    cl_topo *t = NULL;
    pthread_mutex_lock(&r->wait_mu);
    cl_rmsg_ack e;
    for (size_t at = 0; cl_rmsg_ack_next(p, n, &at, &e);) {
        int32_t cache = e.cache, status = e.status;
        uint32_t part = e.part;
        uint64_t ctr = e.ctr, lo = e.from;
        rcache *c = cache_find(r, cache);
        if (!c || part >= c->parts)
            continue;
        ackv *a = atomic_load_explicit(&c->ack[slot], memory_order_acquire);
        if (!a)
            continue;
        if (status == EM_AGAIN) {
            /* A gap there: the window goes again (below, or with the next
             * send when a writer holds the stream). */
            atomic_store_explicit(&r->peers[slot]->nack, 1, memory_order_release);
            nack = 1;
            continue;
        }
        if (status) {
            a[part].refused_lo = lo;
            a[part].refused_hi = ctr;
            /* Refused as from a deposed primary: this node applied those
             * updates, the new primary may not have - once this node's
             * topology has it a backup, its copy catches up (a leaf lock). */
            if (status == EM_FENCED) {
                stale(r, cache, part, 0);
                fence_notify(r, c, part, lo, slot);
            }
        } else if (atomic_load_explicit(&a[part].acked, memory_order_relaxed) < ctr) {
            atomic_store_explicit(&a[part].acked, ctr, memory_order_release);
        }
        if (atomic_load_explicit(&a[part].settled, memory_order_relaxed) < ctr)
            atomic_store_explicit(&a[part].settled, ctr, memory_order_release);
        count(r, S_ACKS, 1);
        /* Wake the writers this ack (or refusal) may complete. */
        for (waiter *w = r->waiters; w; w = w->next)
            if (w->c == c && w->part == part && w->ctr <= ctr)
                pthread_cond_signal(&w->cv);
        if (r->awaits) {
            if (!t)
                t = cl_node_topo_acquire(r->o.node);
            await_scan(r, t, c, part, ctr, 0, &later);
        }
    }
    pthread_mutex_unlock(&r->wait_mu);
    if (t)
        cl_node_topo_release(t);
    run_later(r, later);
    /* Transport thread, inside the node's life lock: only tried, as in
     * cl_repl_flush. */
    peer *pe = r->peers[slot];
    if (nack && pthread_mutex_trylock(&pe->mu) == 0) {
        peer_send(r, pe);
        pthread_mutex_unlock(&pe->mu);
    }
}

/* on_fenced: the sender's updates of these partitions were fenced by a new
 * primary, and this copy may have applied some: it catches up, not from
 * the sender (cl_repl_opts.on_fenced), or as on_stale when that is not set. */
static void on_fenced(cl_repl *r, cl_meta_uuid from, const uint8_t *p, size_t n)
{
    int32_t cache;
    uint32_t part;
    for (size_t at = 0; cl_rmsg_part_next(p, n, &at, &cache, &part);) {
        rcache *c = cache_find(r, cache);
        if (!c || part >= c->parts || PLANT_NO_RESEND)
            continue;
        if (r->o.on_fenced)
            r->o.on_fenced(r->o.on_fenced_arg, cache, part, from);
        else
            stale(r, cache, part, 1);
    }
}

void cl_repl_on_frame(cl_repl *r, cl_net_link *l, cl_meta_uuid from, uint16_t type,
                      const uint8_t *p, size_t n)
{
    if (type == CL_NET_MSG_REPL_UPDATE)
        on_update(r, l, from, p, n);
    else if (type == CL_NET_MSG_REPL_ACK)
        on_ack(r, from, p, n);
    else if (type == CL_NET_MSG_REPL_FENCED)
        on_fenced(r, from, p, n);
}

/* ---- life ------------------------------------------------------------------ */

int cl_repl_start(cl_repl **out, const cl_repl_opts *o)
{
    *out = NULL;
    cl_repl *r = em_calloc(1, sizeof *r);
    if (!r)
        return EM_NOMEM;
    r->o = *o;
    r->o.hold = NULL;
    if (o->hold && strlen(o->hold) < sizeof r->hold)
        strcpy(r->hold, o->hold);
    if (!r->o.timeout_ms)
        r->o.timeout_ms = 10000;
    pthread_mutex_init(&r->reg_mu, NULL);
    pthread_mutex_init(&r->wait_mu, NULL);
    pthread_cond_init(&r->settle_cv, NULL);
    pthread_mutex_init(&r->left_mu, NULL);
    st_get_observer(o->store, &r->down, &r->down_arg);
    st_set_observer(o->store, observe, r);
    st_set_copy_fn(o->store, copy_fn, r);
    st_set_seen_fn(o->store, seen, r);
    *out = r;
    return 0;
}

void cl_repl_stop(cl_repl *r)
{
    if (!r)
        return;
    st_set_seen_fn(r->o.store, NULL, NULL);
    st_set_copy_fn(r->o.store, NULL, NULL);
    st_set_observer(r->o.store, r->down, r->down_arg);
    for (uint32_t b = 0; b < CACHE_BUCKETS; b++) {
        rcache *c = atomic_load(&r->caches[b]);
        while (c) {
            rcache *next = atomic_load(&c->next);
            rcache_free(c);
            c = next;
        }
    }
    uint32_t n = atomic_load(&r->npeers);
    for (uint32_t i = 0; i < n; i++) {
        pthread_mutex_destroy(&r->peers[i]->mu);
        pthread_mutex_destroy(&r->peers[i]->nmu);
        em_buf_free(&r->peers[i]->out);
        em_free(r->peers[i]);
    }
    em_buf_free(&r->ack_out);
    pthread_mutex_destroy(&r->wait_mu);
    pthread_cond_destroy(&r->settle_cv);
    pthread_mutex_destroy(&r->reg_mu);
    pthread_mutex_destroy(&r->left_mu);
    em_free(r);
}

void cl_repl_stats_get(const cl_repl *r, cl_repl_stats *s)
{
    s->sent_updates = atomic_load_explicit(&r->st[S_SENT], memory_order_relaxed);
    s->sent_frames = atomic_load_explicit(&r->st[S_FRAMES], memory_order_relaxed);
    s->applied = atomic_load_explicit(&r->st[S_APPLIED], memory_order_relaxed);
    s->acks_in = atomic_load_explicit(&r->st[S_ACKS], memory_order_relaxed);
    s->refused = atomic_load_explicit(&r->st[S_REFUSED], memory_order_relaxed);
    s->waits = atomic_load_explicit(&r->st[S_WAITS], memory_order_relaxed);
    s->timeouts = atomic_load_explicit(&r->st[S_TIMEOUTS], memory_order_relaxed);
    s->resent = atomic_load_explicit(&r->st[S_RESENT], memory_order_relaxed);
    s->nacks = atomic_load_explicit(&r->st[S_NACKS], memory_order_relaxed);
    s->skipped = atomic_load_explicit(&r->st[S_SKIPPED], memory_order_relaxed);
    s->given_up = atomic_load_explicit(&r->st[S_GIVEUP], memory_order_relaxed);
    s->fence_notices = atomic_load_explicit(&r->st[S_NOTICES], memory_order_relaxed);
    s->moved = atomic_load_explicit(&r->st[S_MOVED], memory_order_relaxed);
    s->read_waits = atomic_load_explicit(&r->st[S_READ_WAITS], memory_order_relaxed);
}
