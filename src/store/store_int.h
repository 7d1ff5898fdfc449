/* store_int.h - private structures of the store (store.c, store_ops.c,
 * store_scan.c).  Layouts of an entry and a partition are below; the public
 * contract is store.h.
 *
 * Entry: ONE allocation: header, key bytes, value bytes with spare capacity,
 * so an overwrite whose value fits `cap` is done in place (0 allocations).
 */
#ifndef EM_STORE_INT_H
#define EM_STORE_INT_H

#include "store/store.h"

#include <pthread.h>
#include <stdint.h>
#include <stdatomic.h>

/* Entry header, then data[klen] key bytes, then data[klen..klen+cap) value.
 *
 *   field      size  notes
 *   expire_at  8     wall-clock ms; 0 = never (the WAL record's encoding)
 *   access     8     last-access stamp (ns), kept only in evicting regions
 *   hash       4     Java hash of the normalised key (partition source)
 *   tag        4     mixed hash for the slot table
 *   klen       4
 *   vlen       4
 *   cap        4     value capacity
 *   heap_idx   4     position in the partition's expiry heap, NO_HEAP if none
 */
typedef struct st_entry {
    int64_t  expire_at;
    uint64_t access;
    int32_t  hash;
    uint32_t tag;
    uint32_t klen, vlen, cap;
    uint32_t heap_idx;
    uint8_t  data[];
} st_entry;

#define ST_NO_HEAP UINT32_MAX

static inline uint8_t *st_entry_val(st_entry *e) { return e->data + e->klen; }
static inline size_t st_entry_bytes(const st_entry *e)
{
    return sizeof(st_entry) + e->klen + e->cap;
}

/* Open-addressing slot: the entry and its tag (so probing touches no entry
 * unless the tags match).  Linear probing, backward-shift deletion: no
 * tombstones. */
typedef struct st_slot {
    uint32_t  tag;
    st_entry *e;
} st_slot;

/* Per-partition counters: written only under the partition lock (plain
 * load + store, no lock prefix), read lock-free by stats (relaxed). */
typedef struct st_pstats {
    _Atomic uint64_t entries, mem, evictions, expirations, removals;
    /* upd: the partition's update counter (reference/cluster.md §3.5):
     * every applied write advances it under the partition lock; the
     * exchange reads it without the lock. */
    _Atomic uint64_t upd;
    uint64_t pad_[1];
} st_pstats;

/* st_lock: a 4-byte mutex (Drepper's futex mutex: 0 free, 1 locked, 2
 * locked with waiters) with a short spin before sleeping.  Chosen over
 * pthread_mutex_t (40 bytes) so a partition's lock, table pointer and hot
 * counters share one cache line, and over a pure spinlock because this runs
 * on machines with fewer cores than threads, where a preempted holder would
 * make spinners burn their whole time slice. */
typedef struct st_lock { _Atomic uint32_t v; } st_lock;

void st_lock_wait(st_lock *l);      /* store.c: contended path */
void st_lock_wake(st_lock *l);

static inline void st_lock_acquire(st_lock *l)
{
    uint32_t z = 0;
    if (!atomic_compare_exchange_strong_explicit(&l->v, &z, 1, memory_order_acquire,
                                                 memory_order_relaxed))
        st_lock_wait(l);
}

static inline void st_lock_release(st_lock *l)
{
    if (atomic_fetch_sub_explicit(&l->v, 1, memory_order_release) != 1)
        st_lock_wake(l);
}

/* One partition: the unit of locking.  The first cache line holds what
 * every operation touches (lock, table, get/put counters); the second what
 * inserts, removals and expiry touch.  Whole cache lines (the array is
 * aligned by hand: em_malloc aligns to 16 only), so neighbouring partitions
 * never share a line. */
typedef struct st_part {
    st_lock   lock;
    uint32_t  mask;           /* capacity - 1 */
    uint32_t  count;
    uint32_t  heap_n;
    uint32_t  gen;            /* owning cache's gen; else (0 after a destroy, or a
                               * later owner's) dead for that cache: EM_NOCACHE */
    uint32_t  heap_cap;
    st_slot  *slots;          /* NULL until the first insert */
    st_entry **heap;          /* expiry min-heap on expire_at */
    _Atomic uint64_t puts, gets, hits;
    /* second line */
    _Atomic int64_t next_expire;  /* heap top's expire_at, 0 = none (tick hint) */
    st_pstats st;
} st_part;
_Static_assert(sizeof(st_part) == 128, "st_part is two cache lines");

typedef struct st_region {
    char     *name;
    uint64_t  max_bytes;      /* 0 = unlimited */
    uint8_t   eviction;
    uint8_t   in_memory;      /* not persistent: observers are told so */
    _Atomic uint64_t used;    /* maintained only when max_bytes != 0 */
    _Atomic uint64_t evictions;
} st_region;

struct st_cache {
    st_store       *store;
    int32_t         id;
    uint32_t        nparts;
    st_cache_config cfg;
    st_region      *region;
    int             evictable;    /* region evicts and the cache allows it */
    int             has_expiry;   /* cfg carries a policy (else eternal/unchanged) */
    _Atomic int     destroyed;
    uint32_t        gen;          /* store-unique, fixed for the struct's life */
    st_cache       *next_all;     /* every cache ever created (freed at close) */
    st_part        *parts;        /* nparts partitions, 64-byte aligned */
    struct st_parr *arr;          /* the array parts lives in (owned while live) */
    _Atomic(st_hook_fn) hook;     /* entry-change hook (st_cache_set_hook) */
    _Atomic(void *) hook_arg;
    /* Guards cfg.query_entities, the one part of cfg that changes after
     * creation (st_cache_set_qe); readers of it take st_cache_cfg_copy. */
    pthread_mutex_t cfg_mu;
};

/* A partition array.  Destroyed caches hand theirs back for the next cache
 * with the same partition count: the 128 B per partition is most of a
 * cache, so create/destroy loops reuse it instead of growing.  Arrays live
 * until st_close, because a destroyed cache's struct (kept, so old pointers
 * stay valid) still points at its old array: its ops lock a partition and
 * find p->gen != c->gen, the same EM_NOCACHE as before the reuse. */
typedef struct st_parr {
    struct st_parr *next;
    void     *mem;            /* the allocation parts points into */
    st_part  *parts;
    uint32_t  nparts;
    st_cache *owner;          /* live cache using it, NULL = free */
} st_parr;

/* st_part_dead: under p's lock, c no longer owns p (destroyed). */
static inline int st_part_dead(const st_cache *c, const st_part *p)
{
    return p->gen != c->gen;
}

/* Cache registry: open addressing on the cache id, read lock-free.  Slots
 * hold cache pointers (the id is read from the cache); a removed slot holds
 * ST_TOMB.  Writers serialise on reg_lock and publish a grown table with a
 * release store; old tables are kept until st_close (readers may be in
 * them). */
typedef struct st_regtab {
    uint32_t mask;
    uint32_t used;            /* live + tombstones */
    struct st_regtab *older;  /* retired tables */
    _Atomic(st_cache *) slot[];
} st_regtab;

struct st_store {
    st_region        region;      /* the default data region */
    st_region       *regions;     /* named regions (st_options.regions) */
    size_t           nregions;
    pthread_mutex_t  reg_lock;
    _Atomic(st_regtab *) reg;
    st_cache        *all;         /* every cache, live or destroyed */
    uint32_t         ncaches;
    uint32_t         next_gen;    /* under reg_lock; cache gens start at 1 */
    st_parr         *arrays;      /* every partition array (freed at close) */
    _Atomic(st_observer_fn) obs;  /* set arg first, then fn (release) */
    _Atomic(void *)  obs_arg;
    _Atomic(st_copy_fn) copy_fn;  /* set arg first, then fn (release) */
    _Atomic(void *)  seen_arg;    /* st_seen_fn's; the same order */
    _Atomic(st_seen_fn) seen_fn;
    _Atomic(void *)  copy_arg;
    _Atomic uint32_t tick_cache;  /* round-robin position of st_expire_tick */
    _Atomic uint32_t tick_part;
    struct st_locktab *locks;     /* entry locks of TRANSACTIONAL caches (store_lock.c) */
    /* Transaction commits hold it shared from their WAL record until every
     * update is in memory; a checkpoint holds it exclusively while it fixes
     * its WAL position (st_commit_gate_*), so no commit straddles that
     * position with its record before it and its updates after the scan. */
    pthread_rwlock_t commit_gate;
};

extern st_cache st_tomb_;

/* st_observe reports u to the write observer, if any (0 if none). */
static inline int st_observe(st_store *s, const st_update *u)
{
    st_observer_fn fn = atomic_load_explicit(&s->obs, memory_order_acquire);
    return fn ? fn(atomic_load_explicit(&s->obs_arg, memory_order_relaxed), u) : 0;
}

/* st_seen tells the read observer, if any, that a request looked at part. */
static inline void st_seen(st_cache *c, uint32_t part)
{
    st_seen_fn fn = atomic_load_explicit(&c->store->seen_fn, memory_order_acquire);
    if (fn)
        fn(atomic_load_explicit(&c->store->seen_arg, memory_order_relaxed), c, part);
}

static inline int st_has_observer(const st_store *s)
{
    return atomic_load_explicit(&s->obs, memory_order_relaxed) != NULL;
}
#define ST_TOMB (&st_tomb_)

/* st_hook tells c's hook, if any, that entry k changed from old to new
 * (either NULL: absent).  Called under the entry's partition lock. */
static inline void st_hook(st_cache *c, const uint8_t *k, uint32_t klen, const uint8_t *ov,
                           uint32_t ol, const uint8_t *nv, uint32_t nl)
{
    st_hook_fn fn = atomic_load_explicit(&c->hook, memory_order_acquire);
    if (fn)
        fn(atomic_load_explicit(&c->hook_arg, memory_order_relaxed), k, klen, ov, ol, nv, nl);
}

/* Relaxed counter bump for a field owned by a held partition lock. */
#define ST_BUMP(field, d) atomic_store_explicit(&(field), \
        atomic_load_explicit(&(field), memory_order_relaxed) + (d), memory_order_relaxed)

/* store_lock.c: the lock table's life (st_open / st_close). */
int  st_locks_new(st_store *s);
void st_locks_free(st_store *s);

/* store_ops.c: partition internals shared with store.c and store_scan.c. */
void st_part_free_all(st_cache *c, st_part *p);      /* under lock: drop every entry */
int  st_part_purge_expired(st_cache *c, st_part *p, int64_t now, uint32_t budget);
int  st_apply_put(st_cache *c, const st_update *u);
int  st_apply_remove(st_cache *c, const st_update *u);
/* st_tx_apply applies one PUT or REMOVE of a committed transaction (u
 * from st_tx_commit), telling the observer as a live write (u->in_tx). */
int  st_tx_apply(st_cache *c, const st_update *u);
int  st_clear_part(st_cache *c, uint32_t pi, int notify);

#endif
