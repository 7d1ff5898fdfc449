/* store_ops.c - the key-value operations: per-partition open-addressing
 * tables of single-allocation entries, expiry (check on access + per-partition
 * min-heap reclaimed incrementally), memory accounting with random-2-LRU
 * eviction, and the write observer calls.  Layouts: store_int.h.  Semantics
 * of the operations: store.h and reference §2.3.
 */
#include "store/store_int.h"

#include "binary/binary.h"
#include "util/clock.h"
#include "util/err.h"
#include "util/hash.h"
#include "util/mem.h"

#include <string.h>

/* ---- helpers ---------------------------------------------------------- */

static inline int64_t lazy_now(int64_t *now)
{
    if (!*now)
        *now = em_wall_ms();
    return *now;
}

static inline int is_expired(const st_entry *e, int64_t *now)
{
    return e->expire_at && e->expire_at <= lazy_now(now);
}

static inline uint32_t key_tag(int32_t hash, uint32_t len)
{
    return (uint32_t)em_mix64(((uint64_t)len << 32) | (uint32_t)hash);
}

/* Value capacity: room for modest growth, so a slightly larger overwrite is
 * still done in place. */
static inline uint32_t value_cap(size_t vlen)
{
    size_t c = vlen + vlen / 8;
    c = (c + 7) & ~(size_t)7;
    return (uint32_t)(c < 8 ? 8 : c);
}

static _Thread_local uint64_t rng_state;

static uint64_t rng_next(void)
{
    if (!rng_state)
        rng_state = em_mix64(em_now_ns() ^ (uint64_t)(uintptr_t)&rng_state) | 1;
    rng_state ^= rng_state << 13;
    rng_state ^= rng_state >> 7;
    rng_state ^= rng_state << 17;
    return rng_state;
}

/* bytes_eq: equality of short byte strings without a libc call (keys are
 * mostly 5-17 bytes: ints, longs, short strings). */
static inline int bytes_eq(const uint8_t *a, const uint8_t *b, uint32_t n)
{
    if (n >= 8) {
        if (n > 64)
            return memcmp(a, b, n) == 0;
        uint32_t i = 0;
        for (; i + 8 < n; i += 8)
            if (em_ld64(a + i) != em_ld64(b + i))
                return 0;
        return em_ld64(a + n - 8) == em_ld64(b + n - 8);
    }
    if (n >= 4)
        return em_ld32(a) == em_ld32(b) && em_ld32(a + n - 4) == em_ld32(b + n - 4);
    for (uint32_t i = 0; i < n; i++)
        if (a[i] != b[i])
            return 0;
    return 1;
}

/* buf_drop: em_buf_free without the call in the common (never used) case. */
static inline void buf_drop(em_buf *b)
{
    if (b->p)
        em_buf_free(b);
}

/* A prepared key: normalised bytes, Java hash, partition, slot tag. */
typedef struct kprep {
    bin_key  k;
    uint32_t part;
    uint32_t tag;
    em_buf   own;       /* used only when normalisation rewrites bytes */
} kprep;

static inline __attribute__((always_inline)) int key_prep(st_cache *c, const st_opctx *o,
                                                         const uint8_t *k, size_t klen, kprep *x)
{
    x->own = (em_buf)EM_BUF_INIT;
    em_buf *scratch = &x->own;
    if (o && o->scratch) {
        scratch = o->scratch;
        em_buf_reset(scratch);
    }
    int rc;
    if (klen == 5 && k[0] == BIN_INT) {
        /* bin_key_prepare's int case, without the call: the common key */
        x->k = (bin_key){k, 5, (int32_t)em_ld32(k + 1)};
    } else if ((rc = bin_key_prepare(k, klen, scratch, &x->k)) != 0) {
        return rc;
    }
    x->part = bin_partition(x->k.hash, c->nparts);
    x->tag = key_tag(x->k.hash, x->k.len);
    return 0;
}

/* ---- slot table ------------------------------------------------------- */

static inline __attribute__((always_inline)) uint32_t slot_find(const st_part *p, uint32_t tag,
                                                              const uint8_t *k, uint32_t klen)
{
    if (!p->slots)
        return UINT32_MAX;
    for (uint32_t i = tag & p->mask;; i = (i + 1) & p->mask) {
        const st_slot *s = &p->slots[i];
        if (!s->e)
            return UINT32_MAX;
        if (s->tag == tag && s->e->klen == klen && bytes_eq(s->e->data, k, klen))
            return i;
    }
}

/* slot_of finds e by identity, probing from its tag (passed separately: e
 * may already be freed when an evictor looks for a sampled entry, so it is
 * compared, never dereferenced). */
static uint32_t slot_of(const st_part *p, const st_entry *e, uint32_t tag)
{
    if (!p->slots)
        return UINT32_MAX;
    for (uint32_t i = tag & p->mask;; i = (i + 1) & p->mask) {
        if (p->slots[i].e == e)
            return i;
        if (!p->slots[i].e)
            return UINT32_MAX;
    }
}

static void slot_place(st_slot *slots, uint32_t mask, uint32_t tag, st_entry *e)
{
    uint32_t i = tag & mask;
    while (slots[i].e)
        i = (i + 1) & mask;
    slots[i].tag = tag;
    slots[i].e = e;
}

/* Makes room for one more entry (load factor <= 3/4). */
static int slot_reserve(st_part *p)
{
    uint32_t cap = p->slots ? p->mask + 1 : 0;
    if ((p->count + 1) * 4 <= cap * 3)
        return 0;
    uint32_t ncap = cap ? cap * 2 : 4;
    st_slot *ns = em_calloc(ncap, sizeof *ns);
    if (!ns)
        return EM_NOMEM;
    for (uint32_t i = 0; i < cap; i++)
        if (p->slots[i].e)
            slot_place(ns, ncap - 1, p->slots[i].tag, p->slots[i].e);
    em_free(p->slots);
    p->slots = ns;
    p->mask = ncap - 1;
    return 0;
}

/* Backward-shift deletion keeps probe chains intact without tombstones. */
static void slot_delete(st_part *p, uint32_t i)
{
    uint32_t mask = p->mask, j = i;
    for (;;) {
        p->slots[i].e = NULL;
        for (;;) {
            j = (j + 1) & mask;
            if (!p->slots[j].e)
                return;
            uint32_t h = p->slots[j].tag & mask;
            int stays = i <= j ? (i < h && h <= j) : (i < h || h <= j);
            if (!stays)
                break;
        }
        p->slots[i] = p->slots[j];
        i = j;
    }
}

/* ---- expiry heap ------------------------------------------------------ */

static inline void heap_set(st_part *p, uint32_t i, st_entry *e)
{
    p->heap[i] = e;
    e->heap_idx = i;
}

static void heap_up(st_part *p, uint32_t i)
{
    st_entry *e = p->heap[i];
    while (i) {
        uint32_t q = (i - 1) / 2;
        if (p->heap[q]->expire_at <= e->expire_at)
            break;
        heap_set(p, i, p->heap[q]);
        i = q;
    }
    heap_set(p, i, e);
}

static void heap_down(st_part *p, uint32_t i)
{
    st_entry *e = p->heap[i];
    for (;;) {
        uint32_t l = 2 * i + 1, m = i;
        int64_t best = e->expire_at;
        if (l < p->heap_n && p->heap[l]->expire_at < best)
            m = l, best = p->heap[l]->expire_at;
        if (l + 1 < p->heap_n && p->heap[l + 1]->expire_at < best)
            m = l + 1;
        if (m == i)
            break;
        heap_set(p, i, p->heap[m]);
        i = m;
    }
    heap_set(p, i, e);
}

static inline void heap_hint(st_part *p)
{
    atomic_store_explicit(&p->next_expire, p->heap_n ? p->heap[0]->expire_at : 0,
                          memory_order_relaxed);
}

static int heap_reserve(st_part *p)
{
    if (p->heap_n < p->heap_cap)
        return 0;
    uint32_t ncap = p->heap_cap ? p->heap_cap * 2 : 8;
    st_entry **nh = em_realloc(p->heap, ncap * sizeof *nh);
    if (!nh)
        return EM_NOMEM;
    p->heap = nh;
    p->heap_cap = ncap;
    return 0;
}

static void heap_del(st_part *p, st_entry *e)
{
    uint32_t i = e->heap_idx;
    st_entry *last = p->heap[--p->heap_n];
    if (last != e) {
        heap_set(p, i, last);
        heap_up(p, i);
        heap_down(p, last->heap_idx);
    }
    e->heap_idx = ST_NO_HEAP;
    heap_hint(p);
}

/* set_expire moves e to its new deadline (0 = never).  Adding to the heap
 * needs heap_reserve() first. */
static void set_expire(st_part *p, st_entry *e, int64_t at)
{
    int in = e->heap_idx != ST_NO_HEAP;
    e->expire_at = at;
    if (in && !at) {
        heap_del(p, e);
    } else if (!in && at) {
        heap_set(p, p->heap_n++, e);
        heap_up(p, e->heap_idx);
        heap_hint(p);
    } else if (in) {
        heap_up(p, e->heap_idx);
        heap_down(p, e->heap_idx);
        heap_hint(p);
    }
}

/* ---- memory accounting ------------------------------------------------ */

static int region_reserve(st_region *r, uint64_t bytes)
{
    uint64_t cur = atomic_load_explicit(&r->used, memory_order_relaxed);
    do {
        if (cur + bytes > r->max_bytes)
            return EM_MEMLIMIT;
    } while (!atomic_compare_exchange_weak_explicit(&r->used, &cur, cur + bytes,
                                                    memory_order_relaxed, memory_order_relaxed));
    return 0;
}

static inline void region_release(st_region *r, uint64_t bytes)
{
    if (r->max_bytes && bytes)
        atomic_fetch_sub_explicit(&r->used, bytes, memory_order_relaxed);
}

/* Removes the entry in slot i and frees it (partition locked). */
static void entry_drop(st_cache *c, st_part *p, uint32_t i)
{
    st_entry *e = p->slots[i].e;
    size_t bytes = st_entry_bytes(e);
    st_hook(c, e->data, e->klen, st_entry_val(e), e->vlen, NULL, 0);
    slot_delete(p, i);
    if (e->heap_idx != ST_NO_HEAP)
        heap_del(p, e);
    p->count--;
    ST_BUMP(p->st.entries, -1);
    ST_BUMP(p->st.mem, -(uint64_t)bytes);
    region_release(c->region, bytes);
    em_free(e);
}

void st_part_free_all(st_cache *c, st_part *p)
{
    uint64_t bytes = 0;
    for (uint32_t i = 0; p->slots && i <= p->mask; i++) {
        st_entry *e = p->slots[i].e;
        if (e) {
            bytes += st_entry_bytes(e);
            em_free(e);
            p->slots[i].e = NULL;
        }
    }
    region_release(c->region, bytes);
    p->count = 0;
    p->heap_n = 0;
    heap_hint(p);
    atomic_store_explicit(&p->st.entries, 0, memory_order_relaxed);
    atomic_store_explicit(&p->st.mem, 0, memory_order_relaxed);
}

int st_part_purge_expired(st_cache *c, st_part *p, int64_t now, uint32_t budget)
{
    int n = 0;
    while (budget-- && p->heap_n && p->heap[0]->expire_at <= now) {
        uint32_t i = slot_of(p, p->heap[0], p->heap[0]->tag);
        if (i == UINT32_MAX) {      /* cannot happen: heap and table agree */
            heap_del(p, p->heap[0]);
            continue;
        }
        entry_drop(c, p, i);
        ST_BUMP(p->st.expirations, 1);
        n++;
    }
    return n;
}

/* Finds a live entry (dropping it if it has expired). */
static inline __attribute__((always_inline)) uint32_t lookup(st_cache *c, st_part *p, const kprep *x,
                                                           int64_t *now)
{
    uint32_t i = slot_find(p, x->tag, x->k.p, x->k.len);
    if (i != UINT32_MAX && is_expired(p->slots[i].e, now)) {
        entry_drop(c, p, i);
        ST_BUMP(p->st.expirations, 1);
        i = UINT32_MAX;
    }
    return i;
}

/* advance: a write applied to p with nobody to tell moves its counter. */
static inline void advance(st_part *p)
{
    ST_BUMP(p->st.upd, 1);
}

/* notify tells the observer of an update of partition u->partition with the
 * counter it gives the partition, which advances only if the observer takes
 * it (a write the log refused did not happen). */
static inline int notify(st_cache *c, st_update *u)
{
    st_part *p = &c->parts[u->partition];
    u->cntr = atomic_load_explicit(&p->st.upd, memory_order_relaxed) + 1;
    int rc = st_observe(c->store, u);
    if (!rc)
        atomic_store_explicit(&p->st.upd, u->cntr, memory_order_relaxed);
    return rc;
}

static int notify_remove(st_cache *c, uint32_t pi, const st_entry *e, int in_tx, int evict)
{
    if (!st_has_observer(c->store)) {
        advance(&c->parts[pi]);
        return 0;
    }
    st_update u = {.kind = ST_UPD_REMOVE, .cache_id = c->id, .partition = pi,
                   .key = e->data, .klen = e->klen, .in_tx = (uint8_t)in_tx,
                   .evict = (uint8_t)evict};
    return notify(c, &u);
}

/* replayed: a write replayed (or received) with the counter its origin gave
 * it raises the partition's counter to that; without one it advances. */
static inline void replayed(st_part *p, uint64_t cntr)
{
    uint64_t cur = atomic_load_explicit(&p->st.upd, memory_order_relaxed);
    if (!cntr)
        cntr = cur + 1;
    if (cntr > cur)
        atomic_store_explicit(&p->st.upd, cntr, memory_order_relaxed);
}

int st_part_info(st_cache *c, uint32_t part, uint64_t *cntr, uint64_t *size)
{
    if (part >= c->nparts)
        return EM_RANGE;
    st_part *p = &c->parts[part];
    if (st_cache_destroyed(c))
        return EM_NOCACHE;
    *cntr = atomic_load_explicit(&p->st.upd, memory_order_relaxed);
    *size = atomic_load_explicit(&p->st.entries, memory_order_relaxed);
    return 0;
}

uint32_t st_cache_parts(const st_cache *c) { return c->nparts; }

static int part_counter(st_cache *c, uint32_t part, uint64_t cntr, int lower)
{
    if (part >= c->nparts)
        return EM_RANGE;
    st_part *p = &c->parts[part];
    st_lock_acquire(&p->lock);
    int rc = st_part_dead(c, p) ? EM_NOCACHE : 0;
    /* Not replayed(): its 0 means "one more", and a copy loaded from an
     * owner whose counter is 0 (an empty partition) must stay at 0, not
     * differ from that owner by one. */
    if (!rc && (lower || cntr > atomic_load_explicit(&p->st.upd, memory_order_relaxed)))
        atomic_store_explicit(&p->st.upd, cntr, memory_order_relaxed);
    st_lock_release(&p->lock);
    return rc;
}

int st_part_raise(st_cache *c, uint32_t part, uint64_t cntr)
{
    return part_counter(c, part, cntr, 0);
}

int st_part_set(st_cache *c, uint32_t part, uint64_t cntr)
{
    return part_counter(c, part, cntr, 1);
}

/* ---- eviction --------------------------------------------------------- */

/* Picks a random occupied slot of a random partition; returns its partition
 * or -1 (partitions sampled empty). */
static int64_t sample(st_cache *c, st_entry **e, uint64_t *stamp, uint32_t *tag)
{
    for (int tries = 0; tries < 16; tries++) {
        uint64_t r = rng_next();
        uint32_t pi = (uint32_t)(r % c->nparts);
        st_part *p = &c->parts[pi];
        st_lock_acquire(&p->lock);
        if (!st_part_dead(c, p) && p->count) {
            for (uint32_t i = (uint32_t)(r >> 32) & p->mask;; i = (i + 1) & p->mask) {
                if (p->slots[i].e) {
                    *e = p->slots[i].e;
                    *stamp = (*e)->access;
                    *tag = p->slots[i].tag;
                    break;
                }
            }
            st_lock_release(&p->lock);
            return pi;
        }
        st_lock_release(&p->lock);
    }
    return -1;
}

/* Random-2-LRU: sample two entries, evict the one accessed least recently.
 * Called with no partition lock held (it locks one at a time). */
static int evict_one(st_cache *c)
{
    st_entry *e1 = NULL, *e2 = NULL;
    int rc = 0;
    uint64_t s1 = 0, s2 = 0;
    uint32_t t1 = 0, t2 = 0;
    int64_t p1 = sample(c, &e1, &s1, &t1);
    if (p1 < 0)
        return EM_MEMLIMIT;
    int64_t p2 = sample(c, &e2, &s2, &t2);
    if (p2 >= 0 && s2 < s1) {
        p1 = p2;
        e1 = e2;
        t1 = t2;
    }
    st_part *p = &c->parts[p1];
    st_lock_acquire(&p->lock);
    if (!st_part_dead(c, p) && p->count) {
        /* The sampled entry may be gone by now; then evict whatever the
         * partition offers at a random slot (still a random choice). */
        uint32_t i = slot_of(p, e1, t1);
        if (i == UINT32_MAX)
            for (i = (uint32_t)rng_next() & p->mask; !p->slots[i].e; i = (i + 1) & p->mask)
                ;
        /* An eviction the log cannot record is not made (replay would bring
         * the entry back); the write that needed the room fails instead. */
        rc = notify_remove(c, (uint32_t)p1, p->slots[i].e, 0, 1);
        if (!rc) {
            entry_drop(c, p, i);
            ST_BUMP(p->st.evictions, 1);
            atomic_fetch_add_explicit(&c->region->evictions, 1, memory_order_relaxed);
        }
    }
    st_lock_release(&p->lock);
    return rc;
}

/* ---- writes ----------------------------------------------------------- */

enum { W_ALWAYS, W_IF_ABSENT, W_IF_PRESENT, W_IF_EQUALS };

typedef struct wreq {
    int mode;
    const st_expiry *pol;        /* NULL: eternal create, unchanged update */
    int notify;                  /* 0 for WAL replay */
    int has_abs;                 /* replay: absolute deadline below */
    int64_t abs_at;
    uint64_t cntr;               /* replay: the update's counter (0 = none) */
    int keep_cntr;               /* a loaded entry: the counter stays (rebalancing) */
    const uint8_t *expect; size_t elen;
    em_buf *out;                 /* previous/existing value, or NULL */
    int *found;
    int *done;
    int in_tx;                   /* a committed transaction's update (st_tx_apply) */
} wreq;

static const st_expiry *policy(const st_cache *c, const st_opctx *o)
{
    if (o && o->expiry)
        return o->expiry;
    return c->has_expiry ? &c->cfg.expiry : NULL;
}

/* Deadline for a duration: returns 1 if the entry must not be stored
 * (duration 0), else sets *at (0 = never; keep = unchanged). */
static int deadline(int64_t d, int64_t cur, int64_t *now, int64_t *at)
{
    if (d == 0)
        return 1;
    if (d == -2)
        *at = cur;
    else if (d < 0)
        *at = 0;
    else
        *at = lazy_now(now) + d;
    return 0;
}

#define MAX_EVICT_ROUNDS 64

static int do_write(st_cache *c, const kprep *x, const uint8_t *v, size_t vlen, wreq *w)
{
    st_part *p = &c->parts[x->part];
    int64_t now = 0;
    int rc = 0, rounds = 0;
    if (w->found)
        *w->found = 0;
    if (w->done)
        *w->done = 0;
    if (vlen > UINT32_MAX / 2 || x->k.len > UINT32_MAX / 2)
        return EM_TOOBIG;
retry:
    st_lock_acquire(&p->lock);
    if (st_part_dead(c, p)) {
        rc = EM_NOCACHE;
        goto out;
    }
    if (p->heap_n && p->heap[0]->expire_at <= lazy_now(&now))
        st_part_purge_expired(c, p, now, 2);
    uint32_t i = lookup(c, p, x, &now);
    st_entry *e = i == UINT32_MAX ? NULL : p->slots[i].e;

    if ((w->mode == W_IF_ABSENT && e) || (w->mode == W_IF_PRESENT && !e) ||
        (w->mode == W_IF_EQUALS && (!e || e->vlen != w->elen ||
                                    !bytes_eq(st_entry_val(e), w->expect, (uint32_t)w->elen)))) {
        if (e && w->mode == W_IF_ABSENT && w->out) {
            if ((rc = em_buf_append(w->out, st_entry_val(e), e->vlen)) != 0)
                goto out;
            *w->found = 1;
        }
        goto out;
    }

    int64_t at = 0;
    int gone;
    if (w->has_abs) {
        at = w->abs_at;
        gone = at && at <= lazy_now(&now);
    } else if (e) {
        gone = deadline(w->pol ? w->pol->update_ms : -2, e->expire_at, &now, &at);
    } else {
        gone = deadline(w->pol ? w->pol->create_ms : -1, 0, &now, &at);
    }

    if (e && w->out) {
        if ((rc = em_buf_append(w->out, st_entry_val(e), e->vlen)) != 0)
            goto out;
        *w->found = 1;
    }

    if (gone) {
        /* Duration 0: the write happens and is expired at once - the
         * previous value (if any) goes, nothing becomes visible. */
        if (e) {
            if (w->notify && (rc = notify_remove(c, x->part, e, w->in_tx, 0)) != 0)
                goto out;
            entry_drop(c, p, i);
            ST_BUMP(p->st.expirations, 1);
        }
        if (!w->notify && !w->keep_cntr)
            replayed(p, w->cntr);
        if (w->done)
            *w->done = 1;
        goto out;
    }

    /* The observer hears of the write only once nothing can fail any more
     * (memory reserved, allocations made), so every record it gets is an
     * update that happened; its own failure still leaves the store as it
     * was. */
    int observe = w->notify && st_has_observer(c->store);
#define PUT_UPDATE(u) st_update u = {.kind = ST_UPD_PUT, .cache_id = c->id,                \
                                     .partition = x->part, .key = x->k.p,                 \
                                     .klen = x->k.len, .val = v, .vlen = (uint32_t)vlen, \
                                     .expire_at_ms = at, .in_tx = (uint8_t)w->in_tx}

    if (e && vlen <= e->cap) {
        /* In place: no allocation, no accounting change. */
        if (at && e->heap_idx == ST_NO_HEAP && (rc = heap_reserve(p)) != 0)
            goto out;
        if (observe) {
            PUT_UPDATE(u);
            if ((rc = notify(c, &u)) != 0)
                goto out;
        }
        st_hook(c, x->k.p, x->k.len, st_entry_val(e), e->vlen, v, (uint32_t)vlen);
        memcpy(st_entry_val(e), v, vlen);
        e->vlen = (uint32_t)vlen;
        if (at != e->expire_at)
            set_expire(p, e, at);
        if (c->evictable)
            e->access = em_now_ns();
    } else {
        uint32_t cap = value_cap(vlen);
        size_t bytes = sizeof(st_entry) + x->k.len + cap;
        size_t old = e ? st_entry_bytes(e) : 0;
        if (c->region->max_bytes && bytes > old &&
            (rc = region_reserve(c->region, bytes - old)) != 0) {
            if (!c->evictable || rounds++ >= MAX_EVICT_ROUNDS)
                goto out;
            st_lock_release(&p->lock);
            if ((rc = evict_one(c)) != 0)
                return rc;
            goto retry;
        }
        st_entry *ne = em_malloc(bytes);
        rc = (!ne || (!e && slot_reserve(p)) || (at && heap_reserve(p))) ? EM_NOMEM : 0;
        if (!rc && observe) {
            PUT_UPDATE(u);
            rc = notify(c, &u);
        }
        if (rc) {
            em_free(ne);
            if (c->region->max_bytes && bytes > old)
                region_release(c->region, bytes - old);
            goto out;
        }
        st_hook(c, x->k.p, x->k.len, e ? st_entry_val(e) : NULL, e ? e->vlen : 0, v, (uint32_t)vlen);
        ne->expire_at = 0;
        ne->access = c->evictable ? em_now_ns() : 0;
        ne->hash = x->k.hash;
        ne->tag = x->tag;
        ne->klen = x->k.len;
        ne->vlen = (uint32_t)vlen;
        ne->cap = cap;
        ne->heap_idx = ST_NO_HEAP;
        memcpy(ne->data, x->k.p, x->k.len);
        memcpy(ne->data + x->k.len, v, vlen);
        if (e) {
            /* Grown value: the new entry takes the old one's slot and heap
             * position. */
            ne->expire_at = e->expire_at;
            if (e->heap_idx != ST_NO_HEAP)
                heap_set(p, e->heap_idx, ne);
            p->slots[i].e = ne;
            em_free(e);
            if (c->region->max_bytes && bytes < old)
                region_release(c->region, old - bytes);
            ST_BUMP(p->st.mem, (uint64_t)bytes - old);
        } else {
            slot_place(p->slots, p->mask, x->tag, ne);
            p->count++;
            ST_BUMP(p->st.entries, 1);
            ST_BUMP(p->st.mem, bytes);
        }
        if (at != ne->expire_at)
            set_expire(p, ne, at);
    }
#undef PUT_UPDATE
    if (!observe) {
        if (w->notify)
            advance(p);
        else if (!w->keep_cntr)
            replayed(p, w->cntr);
    }
    ST_BUMP(p->puts, 1);
    if (w->done)
        *w->done = 1;
out:
    st_lock_release(&p->lock);
    return rc;
}

/* Runs one write: prepares key, value and expected value, then do_write. */
static inline __attribute__((always_inline)) int write_op(st_cache *c, const st_opctx *o,
                                                         const uint8_t *k, size_t klen,
                                                         const uint8_t *v, size_t vlen, wreq *w)
{
    kprep x;
    em_buf vs = EM_BUF_INIT, es = EM_BUF_INIT;
    const uint8_t *vp = v, *ep = w->expect;
    size_t vpl = vlen, epl = w->elen;
    int rc = key_prep(c, o, k, klen, &x);
    if (!rc && vlen && v[0] == BIN_WRAPPED)   /* anything else is stored as it is */
        rc = bin_value_prepare(v, vlen, &vs, &vp, &vpl);
    if (!rc && w->expect)
        rc = bin_value_prepare(w->expect, w->elen, &es, &ep, &epl);
    if (!rc) {
        w->pol = policy(c, o);
        w->notify = 1;
        w->expect = ep;
        w->elen = epl;
        rc = do_write(c, &x, vp, vpl, w);
        st_seen(c, x.part);
    }
    buf_drop(&x.own);
    buf_drop(&vs);
    buf_drop(&es);
    return rc;
}

int st_put(st_cache *c, const st_opctx *o, const uint8_t *k, size_t klen, const uint8_t *v, size_t vlen)
{
    wreq w = {.mode = W_ALWAYS};
    return write_op(c, o, k, klen, v, vlen, &w);
}

int st_get_and_put(st_cache *c, const st_opctx *o, const uint8_t *k, size_t klen,
                   const uint8_t *v, size_t vlen, em_buf *out, int *found)
{
    wreq w = {.mode = W_ALWAYS, .out = out, .found = found};
    return write_op(c, o, k, klen, v, vlen, &w);
}

int st_get_and_replace(st_cache *c, const st_opctx *o, const uint8_t *k, size_t klen,
                       const uint8_t *v, size_t vlen, em_buf *out, int *found)
{
    wreq w = {.mode = W_IF_PRESENT, .out = out, .found = found};
    return write_op(c, o, k, klen, v, vlen, &w);
}

int st_put_if_absent(st_cache *c, const st_opctx *o, const uint8_t *k, size_t klen,
                     const uint8_t *v, size_t vlen, int *stored)
{
    wreq w = {.mode = W_IF_ABSENT, .done = stored};
    return write_op(c, o, k, klen, v, vlen, &w);
}

int st_get_and_put_if_absent(st_cache *c, const st_opctx *o, const uint8_t *k, size_t klen,
                             const uint8_t *v, size_t vlen, em_buf *out, int *found)
{
    wreq w = {.mode = W_IF_ABSENT, .out = out, .found = found};
    return write_op(c, o, k, klen, v, vlen, &w);
}

int st_replace(st_cache *c, const st_opctx *o, const uint8_t *k, size_t klen,
               const uint8_t *v, size_t vlen, int *replaced)
{
    wreq w = {.mode = W_IF_PRESENT, .done = replaced};
    return write_op(c, o, k, klen, v, vlen, &w);
}

int st_replace_if_equals(st_cache *c, const st_opctx *o, const uint8_t *k, size_t klen,
                         const uint8_t *expect, size_t elen, const uint8_t *v, size_t vlen,
                         int *replaced)
{
    wreq w = {.mode = W_IF_EQUALS, .expect = expect, .elen = elen, .done = replaced};
    return write_op(c, o, k, klen, v, vlen, &w);
}

int st_put_all(st_cache *c, const st_opctx *o, const st_slice *keys, const st_slice *vals, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        int rc = st_put(c, o, keys[i].p, keys[i].len, vals[i].p, vals[i].len);
        if (rc)
            return rc;
    }
    return 0;
}

int st_apply_put(st_cache *c, const st_update *u)
{
    kprep x;
    int rc = key_prep(c, NULL, u->key, u->klen, &x);
    if (!rc) {
        wreq w = {.mode = W_ALWAYS, .has_abs = 1, .abs_at = u->expire_at_ms,
                  .cntr = u->cntr};
        rc = do_write(c, &x, u->val, u->vlen, &w);
    }
    buf_drop(&x.own);
    return rc;
}

/* drop_prepared removes a prepared key without telling the observer: a
 * replayed or received REMOVE (the partition takes its counter cntr), or a
 * loaded one (keep_cntr: the counter stays).  *done = 1 when it was there. */
static int drop_prepared(st_cache *c, kprep *x, int keep_cntr, uint64_t cntr, int *done)
{
    st_part *p = &c->parts[x->part];
    int64_t now = 0;
    int rc = 0;
    *done = 0;
    st_lock_acquire(&p->lock);
    if (st_part_dead(c, p)) {
        rc = EM_NOCACHE;
    } else {
        uint32_t i = lookup(c, p, x, &now);
        if (i != UINT32_MAX) {
            entry_drop(c, p, i);
            ST_BUMP(p->st.removals, 1);
            *done = 1;
        }
        if (!keep_cntr)
            replayed(p, cntr);
    }
    st_lock_release(&p->lock);
    return rc;
}

int st_apply_load(st_store *s, const st_update *u, int overwrite, int *done)
{
    *done = 0;
    if (u->kind != ST_UPD_PUT && u->kind != ST_UPD_REMOVE)
        return EM_INVAL;
    st_cache *c = st_cache_find(s, u->cache_id);
    if (!c)
        return EM_NOCACHE;
    kprep x;
    int rc = key_prep(c, NULL, u->key, u->klen, &x);
    if (!rc && u->kind == ST_UPD_PUT) {
        wreq w = {.mode = overwrite ? W_ALWAYS : W_IF_ABSENT, .has_abs = 1,
                  .abs_at = u->expire_at_ms, .done = done, .keep_cntr = 1};
        rc = do_write(c, &x, u->val, u->vlen, &w);
    } else if (!rc) {
        rc = drop_prepared(c, &x, 1, 0, done);
    }
    buf_drop(&x.own);
    return rc;
}

/* ---- reads ------------------------------------------------------------ */

enum { R_GET, R_PEEK, R_CONTAINS };

/* Applies the access part of the policy after a hit (partition locked). */
static void touch(st_cache *c, st_part *p, uint32_t i, const st_expiry *pol, int64_t *now)
{
    st_entry *e = p->slots[i].e;
    if (c->evictable)
        e->access = em_now_ns();
    if (!pol || pol->access_ms == -2)
        return;
    int64_t at;
    if (deadline(pol->access_ms, e->expire_at, now, &at)) {
        entry_drop(c, p, i);       /* read once, then expired */
        ST_BUMP(p->st.expirations, 1);
        return;
    }
    if (at != e->expire_at && (!at || e->heap_idx != ST_NO_HEAP || heap_reserve(p) == 0))
        set_expire(p, e, at);
}

/* ---- peek modes ---------------------------------------------------------
 *
 * Ignite's CachePeekMode splits into two questions: which copies (NEAR,
 * PRIMARY, BACKUP) and which storage (ONHEAP, OFFHEAP); a copy counts when
 * both its kind and its storage were asked for.  st_peek_parse follows
 * GridCacheAdapter.parsePeekModes: ALL (or no mode) asks for everything, and
 * a question left unanswered (no kind, or no storage, named) means all of
 * that question.  Where a partition's entries stand is part_copy's answer;
 * the store keeps every value off the heap (Ignite's page memory with
 * onheapCacheEnabled off: its on-heap entries are transient), and a server
 * has no near copies. */

void st_peek_parse(int mask, st_peek *pm)
{
    int all = mask == 0 || (mask & (1 << ST_PEEK_ALL));
    pm->near = all || (mask & (1 << ST_PEEK_NEAR));
    pm->primary = all || (mask & (1 << ST_PEEK_PRIMARY));
    pm->backup = all || (mask & (1 << ST_PEEK_BACKUP));
    pm->onheap = all || (mask & (1 << ST_PEEK_ONHEAP));
    pm->offheap = all || (mask & (1 << ST_PEEK_OFFHEAP));
    if (!pm->onheap && !pm->offheap)
        pm->onheap = pm->offheap = 1;
    if (!pm->near && !pm->primary && !pm->backup)
        pm->near = pm->primary = pm->backup = 1;
}

/* part_copy: what this node holds of partition pi.  Alone, a node owns
 * every partition as its primary; on a cluster cluster/ answers from the
 * partition's owners (primary, backup, or no copy at all). */
static int part_copy(const st_cache *c, uint32_t pi)
{
    st_store *s = c->store;
    st_copy_fn fn = atomic_load_explicit(&s->copy_fn, memory_order_acquire);
    if (!fn)
        return ST_COPY_PRIMARY;
    return fn(atomic_load_explicit(&s->copy_arg, memory_order_relaxed), &c->cfg, c->id, pi);
}

/* peek_counts: do pi's entries count for pm? */
static int peek_counts(const st_cache *c, uint32_t pi, const st_peek *pm)
{
    int copy = part_copy(c, pi);
    int kind = copy == ST_COPY_PRIMARY ? pm->primary : copy == ST_COPY_BACKUP ? pm->backup : 0;
    return kind && pm->offheap;     /* primaries and backups live off the heap */
}

/* ---- batch prefetch (store.h) ---------------------------------------- */

int st_pf_key(st_cache *c, const uint8_t *k, size_t avail, st_pf *pf)
{
    int32_t hash;
    uint32_t len;
    if (avail >= 5 && k[0] == BIN_INT) {
        hash = (int32_t)em_ld32(k + 1);
        len = 5;
    } else if (avail >= 9 && k[0] == BIN_LONG) {
        hash = em_hash_long((int64_t)em_ld64(k + 1));
        len = 9;
    } else if (avail >= 5 && k[0] == BIN_STRING && em_ld32(k + 1) <= avail - 5 &&
               em_ld32(k + 1) <= 256) {
        /* ASCII only: then String.hashCode is 31*h + byte, as
         * bin_key_prepare computes it for the validated key later. */
        uint32_t n = em_ld32(k + 1), h = 0;
        for (uint32_t i = 0; i < n; i++) {
            if (k[5 + i] & 0x80)
                return 0;
            h = 31 * h + k[5 + i];
        }
        hash = (int32_t)h;
        len = 5 + n;
    } else {
        return 0;
    }
    pf->part = bin_partition(hash, c->nparts);
    pf->tag = key_tag(hash, len);
    __builtin_prefetch(&c->parts[pf->part]);
    return 1;
}

void st_pf_slot(st_cache *c, const st_pf *pf)
{
    st_part *p = &c->parts[pf->part];
    st_lock_acquire(&p->lock);
    if (!st_part_dead(c, p) && p->slots)
        __builtin_prefetch(&p->slots[pf->tag & p->mask]);
    st_lock_release(&p->lock);
}

/* pf_probe: under p's lock, the first entry from pf's home slot whose tag
 * matches (what slot_find will compare first), or NULL.  Reads slots only. */
static st_entry *pf_probe(st_cache *c, st_part *p, const st_pf *pf)
{
    if (st_part_dead(c, p) || !p->slots)
        return NULL;
    for (uint32_t i = pf->tag & p->mask, n = 0; n <= p->mask; i = (i + 1) & p->mask, n++) {
        const st_slot *s = &p->slots[i];
        if (!s->e)
            return NULL;
        if (s->tag == pf->tag)
            return s->e;
    }
    return NULL;
}

void st_pf_entry(st_cache *c, const st_pf *pf, size_t value_hint)
{
    st_part *p = &c->parts[pf->part];
    st_lock_acquire(&p->lock);
    st_entry *e = pf_probe(c, p, pf);
    st_lock_release(&p->lock);
    if (!e)
        return;
    /* Addresses only from here: e is not read (it may be freed by now, and
     * a prefetch of a stale address is harmless).  The header and key into
     * L1, the value's further lines into L2 (prefetcht1): into L1 they
     * stalled this loop on the core's few outstanding-miss slots (87 % of
     * st_pf_entry's samples at 1 KiB, P16) while the copy still missed;
     * with L2 the copy's share fell from 10.4 % to 5.5 % of emberd's CPU
     * (docs/profile-net.md).  At most 1 KiB: the hardware prefetcher
     * follows a longer copy by itself. */
    const uint8_t *a = (const uint8_t *)e;
    size_t end = sizeof *e + 32 + (value_hint < 1024 ? value_hint : 1024);
    __builtin_prefetch(a, 1);
    __builtin_prefetch(a + 64, 1);
    for (size_t off = 128; off < end + 63; off += 64)
        __builtin_prefetch(a + off, 0, 2);
}

/* read_op: GET, LOCAL_PEEK (pm: the peek modes) or CONTAINS_KEY. */
static int read_op(st_cache *c, const st_opctx *o, const uint8_t *k, size_t klen,
                   int mode, const st_peek *pm, em_buf *out, int *found)
{
    kprep x;
    int64_t now = 0;
    *found = 0;
    int rc = key_prep(c, o, k, klen, &x);
    if (rc) {
        buf_drop(&x.own);
        return rc;
    }
    st_part *p = &c->parts[x.part];
    st_lock_acquire(&p->lock);
    if (st_part_dead(c, p)) {
        rc = EM_NOCACHE;
    } else if (mode == R_PEEK && !peek_counts(c, x.part, pm)) {
        /* no copy of the asked-for kind here: nothing to see */
    } else {
        uint32_t i = lookup(c, p, &x, &now);
        if (mode != R_CONTAINS)
            ST_BUMP(p->gets, 1);
        if (i != UINT32_MAX) {
            st_entry *e = p->slots[i].e;
            if (mode != R_CONTAINS) {
                rc = em_buf_append(out, st_entry_val(e), e->vlen);
                ST_BUMP(p->hits, 1);
            }
            if (!rc) {
                *found = 1;
                if (mode == R_GET)
                    touch(c, p, i, policy(c, o), &now);
            }
        }
    }
    st_lock_release(&p->lock);
    if (mode != R_PEEK)
        st_seen(c, x.part);
    buf_drop(&x.own);
    return rc;
}

int st_get(st_cache *c, const st_opctx *o, const uint8_t *k, size_t klen, em_buf *out, int *found)
{
    return read_op(c, o, k, klen, R_GET, NULL, out, found);
}

int st_local_peek(st_cache *c, const st_opctx *o, int peek_mode_mask, const uint8_t *k,
                  size_t klen, em_buf *out, int *found)
{
    st_peek pm;
    st_peek_parse(peek_mode_mask, &pm);
    return read_op(c, o, k, klen, R_PEEK, &pm, out, found);
}

int st_contains(st_cache *c, const st_opctx *o, const uint8_t *k, size_t klen, int *found)
{
    return read_op(c, o, k, klen, R_CONTAINS, NULL, NULL, found);
}

int st_contains_all(st_cache *c, const st_opctx *o, const st_slice *keys, size_t n, int *all)
{
    *all = 1;
    for (size_t i = 0; i < n; i++) {
        int f, rc = st_contains(c, o, keys[i].p, keys[i].len, &f);
        if (rc)
            return rc;
        if (!f) {
            *all = 0;
            return 0;
        }
    }
    return 0;
}

int st_get_all(st_cache *c, const st_opctx *o, const st_slice *keys, size_t n, st_kv_fn fn, void *arg)
{
    const st_expiry *pol = policy(c, o);
    for (size_t j = 0; j < n; j++) {
        kprep x;
        int64_t now = 0;
        int rc = key_prep(c, o, keys[j].p, keys[j].len, &x);
        if (rc) {
            buf_drop(&x.own);
            return rc;
        }
        st_part *p = &c->parts[x.part];
        st_lock_acquire(&p->lock);
        if (st_part_dead(c, p)) {
            rc = EM_NOCACHE;
        } else {
            uint32_t i = lookup(c, p, &x, &now);
            ST_BUMP(p->gets, 1);
            if (i != UINT32_MAX) {
                st_entry *e = p->slots[i].e;
                ST_BUMP(p->hits, 1);
                rc = fn(arg, e->data, e->klen, st_entry_val(e), e->vlen);
                if (!rc)
                    touch(c, p, i, pol, &now);
            }
        }
        st_lock_release(&p->lock);
        st_seen(c, x.part);
        buf_drop(&x.own);
        if (rc)
            return rc;
    }
    return 0;
}

/* ---- removals --------------------------------------------------------- */

/* tx_ctx marks a remove made by st_tx_apply (a committed transaction's). */
static const st_opctx tx_ctx;

static int remove_op(st_cache *c, const st_opctx *o, const uint8_t *k, size_t klen,
                     const uint8_t *expect, size_t elen, em_buf *out, int *removed)
{
    kprep x;
    em_buf es = EM_BUF_INIT;
    int64_t now = 0;
    *removed = 0;
    int rc = key_prep(c, o, k, klen, &x);
    if (!rc && expect)
        rc = bin_value_prepare(expect, elen, &es, &expect, &elen);
    if (rc)
        goto done;
    st_part *p = &c->parts[x.part];
    st_lock_acquire(&p->lock);
    if (st_part_dead(c, p)) {
        rc = EM_NOCACHE;
    } else {
        uint32_t i = lookup(c, p, &x, &now);
        st_entry *e = i == UINT32_MAX ? NULL : p->slots[i].e;
        if (e && expect && (e->vlen != elen || memcmp(st_entry_val(e), expect, elen) != 0))
            e = NULL;
        if (e && out)
            rc = em_buf_append(out, st_entry_val(e), e->vlen);
        if (e && !rc)
            rc = notify_remove(c, x.part, e, o == &tx_ctx, 0);
        if (e && !rc) {
            entry_drop(c, p, i);
            ST_BUMP(p->st.removals, 1);
            *removed = 1;
        }
    }
    st_lock_release(&p->lock);
    if (o != &tx_ctx)
        st_seen(c, x.part);
done:
    buf_drop(&x.own);
    buf_drop(&es);
    return rc;
}

int st_remove(st_cache *c, const st_opctx *o, const uint8_t *k, size_t klen, int *removed)
{
    return remove_op(c, o, k, klen, NULL, 0, NULL, removed);
}

int st_remove_if_equals(st_cache *c, const st_opctx *o, const uint8_t *k, size_t klen,
                        const uint8_t *expect, size_t elen, int *removed)
{
    return remove_op(c, o, k, klen, expect, elen, NULL, removed);
}

int st_get_and_remove(st_cache *c, const st_opctx *o, const uint8_t *k, size_t klen,
                      em_buf *out, int *found)
{
    return remove_op(c, o, k, klen, NULL, 0, out, found);
}

int st_remove_keys(st_cache *c, const st_opctx *o, const st_slice *keys, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        int r, rc = st_remove(c, o, keys[i].p, keys[i].len, &r);
        if (rc)
            return rc;
    }
    return 0;
}

int st_tx_apply(st_cache *c, const st_update *u)
{
    if (u->kind == ST_UPD_REMOVE) {
        int removed;
        return remove_op(c, &tx_ctx, u->key, u->klen, NULL, 0, NULL, &removed);
    }
    kprep x;
    int rc = key_prep(c, NULL, u->key, u->klen, &x);
    if (!rc) {
        wreq w = {.mode = W_ALWAYS, .has_abs = 1, .abs_at = u->expire_at_ms, .notify = 1,
                  .in_tx = 1};
        rc = do_write(c, &x, u->val, u->vlen, &w);
    }
    buf_drop(&x.own);
    return rc;
}

int st_apply_remove(st_cache *c, const st_update *u)
{
    kprep x;
    int done, rc = key_prep(c, NULL, u->key, u->klen, &x);
    if (!rc)
        rc = drop_prepared(c, &x, 0, u->cntr, &done);
    buf_drop(&x.own);
    return rc;
}

int st_clear_part(st_cache *c, uint32_t pi, int notify_obs)
{
    st_part *p = &c->parts[pi];
    int rc = 0;
    st_lock_acquire(&p->lock);
    if (st_part_dead(c, p)) {
        rc = EM_NOCACHE;
    } else if (p->count) {
        if (notify_obs && st_has_observer(c->store)) {
            st_update u = {.kind = ST_UPD_CLEAR, .cache_id = c->id, .partition = pi};
            rc = notify(c, &u);
        } else if (notify_obs) {
            advance(p);
        }
        /* notify_obs 0 (a replayed CLEAR, a copy dropped): the counter
         * stays, so a copy loaded again later takes its supplier's. */
        if (!rc) {
            ST_BUMP(p->st.removals, p->count);
            for (uint32_t i = 0; atomic_load_explicit(&c->hook, memory_order_relaxed) && i <= p->mask; i++) {
                st_entry *e = p->slots[i].e;
                if (e)
                    st_hook(c, e->data, e->klen, st_entry_val(e), e->vlen, NULL, 0);
            }
            st_part_free_all(c, p);
        }
    }
    st_lock_release(&p->lock);
    return rc;
}

void st_cache_set_hook(st_cache *c, st_hook_fn fn, void *arg)
{
    atomic_store_explicit(&c->hook, NULL, memory_order_release);
    /* Barrier: a hook call runs under a partition lock, so once every lock
     * was taken after the store above, no call of the old hook is left. */
    for (uint32_t i = 0; i < c->nparts; i++) {
        st_lock_acquire(&c->parts[i].lock);
        st_lock_release(&c->parts[i].lock);
    }
    if (fn) {
        atomic_store_explicit(&c->hook_arg, arg, memory_order_relaxed);
        atomic_store_explicit(&c->hook, fn, memory_order_release);
    }
}

int st_cache_each_locked(st_cache *c, st_kv_fn fn, void *arg)
{
    int rc = 0;
    for (uint32_t pi = 0; !rc && pi < c->nparts; pi++) {
        st_part *p = &c->parts[pi];
        int64_t now = 0;
        st_lock_acquire(&p->lock);
        if (st_part_dead(c, p))
            rc = EM_NOCACHE;
        for (uint32_t i = 0; !rc && p->slots && i <= p->mask; i++) {
            st_entry *e = p->slots[i].e;
            if (e && !is_expired(e, &now))
                rc = fn(arg, e->data, e->klen, st_entry_val(e), e->vlen);
        }
        st_lock_release(&p->lock);
    }
    return rc;
}

int st_clear(st_cache *c)
{
    for (uint32_t i = 0; i < c->nparts; i++) {
        int rc = st_clear_part(c, i, 1);
        if (rc)
            return rc;
    }
    return 0;
}

/* st_size counts the live entries of the partitions whose copies the peek
 * modes ask for (peek_counts); every partition is still visited, so a
 * destroyed cache answers EM_NOCACHE whatever the modes. */
int st_size(st_cache *c, int peek_mode_mask, int64_t *size)
{
    *size = 0;
    st_peek pm;
    st_peek_parse(peek_mode_mask, &pm);
    int64_t now = em_wall_ms(), n = 0;
    for (uint32_t i = 0; i < c->nparts; i++) {
        st_part *p = &c->parts[i];
        st_lock_acquire(&p->lock);
        if (st_part_dead(c, p)) {
            st_lock_release(&p->lock);
            return EM_NOCACHE;
        }
        if (peek_counts(c, i, &pm)) {
            st_part_purge_expired(c, p, now, UINT32_MAX);
            n += p->count;
        }
        st_lock_release(&p->lock);
    }
    *size = n;
    return 0;
}
