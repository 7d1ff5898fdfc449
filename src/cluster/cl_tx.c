/* cl_tx.c - transactions on one node: the per-transaction key set (reads
 * remembered, writes buffered, locks held), commit through st_tx_commit.
 * Semantics: cl_tx.h.
 *
 * A transaction's keys live in one array of entries with an open-addressing
 * index over it; key and value bytes are copied into one arena buffer and
 * named by offset (the arena may move as it grows).  A rewritten value is
 * appended again: transactions are short, the arena is dropped at the end.
 */
#include "cluster/cl_tx.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "binary/binary.h"
#include "util/clock.h"
#include "util/err.h"
#include "util/hash.h"
#include "util/mem.h"

/* Wait-for edges (deadlock detection): which owner waits for which, one
 * entry per transaction waiting now.  Touched only when a lock is busy. */
typedef struct tx_wait { uint64_t owner, holder; } tx_wait;

struct cl_txm {
    st_store *st;
    void    (*wake)(void *arg);
    void     *wake_arg;
    _Atomic uint32_t waiters;
    _Atomic uint64_t active;
    _Atomic uint64_t open;          /* begun (restarted) and not yet ended */
    pthread_mutex_t wmu;
    tx_wait  *w;
    uint32_t  nw, capw;
};

/* Owner ids for the lock table: unique for the process's life. */
static _Atomic uint64_t next_owner = 1;

enum { W_NONE = 0, W_PUT = 1, W_REMOVE = 2 };

typedef struct tx_ent {
    st_cache *c;
    int32_t   cache_id, hash;
    uint32_t  koff, klen;
    uint32_t  voff, vlen;       /* buffered value (W_PUT) */
    uint32_t  roff, rlen;       /* first value read (OPTIMISTIC RR/SER) */
    uint8_t   locked, wkind, rseen, rfound;
} tx_ent;

static void wait_clear(cl_txm *m, uint64_t owner);

struct cl_tx {
    cl_txm   *m;
    uint64_t  owner;
    int       waiting;          /* has a wait-for edge in m */
    int       conc, iso;
    int64_t   timeout;
    uint64_t  deadline;         /* em_now_ms, 0 = none */
    int       open;
    int       prepared;         /* cl_tx_prepare done: locks pinned, checked */
    tx_ent   *e;
    uint32_t  n, cap;
    uint32_t *idx;              /* entry index + 1, 0 = empty; icap slots */
    uint32_t  icap;
    uint32_t  conflict;         /* entry of the last EM_TXCONFLICT */
    uint32_t *order;            /* OPTIMISTIC commit: entries in key order */
    uint32_t  norder, locked_upto, ordercap;
    st_update *ups;
    uint32_t  upcap;
    em_buf    arena;
    em_buf    kscratch;         /* key normalisation */
    em_buf    rd;               /* SERIALIZABLE re-reads at commit */
};

/* ---- manager ----------------------------------------------------------- */

int cl_txm_new(cl_txm **out, st_store *s)
{
    cl_txm *m = em_calloc(1, sizeof *m);
    if (!m)
        return EM_NOMEM;
    m->st = s;
    pthread_mutex_init(&m->wmu, NULL);
    *out = m;
    return 0;
}

void cl_txm_free(cl_txm *m)
{
    if (!m)
        return;
    pthread_mutex_destroy(&m->wmu);
    em_free(m->w);
    em_free(m);
}

void cl_txm_set_wake(cl_txm *m, void (*fn)(void *arg), void *arg)
{
    m->wake = fn;
    m->wake_arg = arg;
}

void cl_txm_wait(cl_txm *m) { atomic_fetch_add(&m->waiters, 1); }
void cl_txm_unwait(cl_txm *m) { atomic_fetch_sub(&m->waiters, 1); }
uint32_t cl_txm_waiters(const cl_txm *m) { return atomic_load(&m->waiters); }
uint64_t cl_txm_active(const cl_txm *m) { return atomic_load(&m->active); }
uint64_t cl_txm_open(const cl_txm *m) { return atomic_load(&m->open); }

/* ---- life -------------------------------------------------------------- */

static void reset_state(cl_tx *tx)
{
    tx->n = 0;
    tx->norder = tx->locked_upto = 0;
    tx->prepared = 0;
    tx->conflict = UINT32_MAX;
    if (tx->idx)
        memset(tx->idx, 0, tx->icap * sizeof *tx->idx);
    em_buf_reset(&tx->arena);
}

int cl_tx_restart(cl_tx *tx, int concurrency, int isolation, int64_t timeout_ms)
{
    if ((concurrency != CL_TX_OPTIMISTIC && concurrency != CL_TX_PESSIMISTIC) ||
        isolation < CL_TX_READ_COMMITTED || isolation > CL_TX_SERIALIZABLE || timeout_ms < 0)
        return EM_INVAL;
    if (tx->open)
        cl_tx_rollback(tx);
    reset_state(tx);
    tx->owner = atomic_fetch_add(&next_owner, 1);
    tx->conc = concurrency;
    tx->iso = isolation;
    tx->timeout = timeout_ms;
    tx->deadline = timeout_ms ? em_now_ms() + (uint64_t)timeout_ms : 0;
    tx->open = 1;
    atomic_fetch_add_explicit(&tx->m->open, 1, memory_order_relaxed);
    return 0;
}

int cl_tx_begin(cl_txm *m, int concurrency, int isolation, int64_t timeout_ms, cl_tx **out)
{
    cl_tx *tx = em_calloc(1, sizeof *tx);
    if (!tx)
        return EM_NOMEM;
    tx->m = m;
    int rc = cl_tx_restart(tx, concurrency, isolation, timeout_ms);
    if (rc) {
        em_free(tx);
        return rc;
    }
    atomic_fetch_add(&m->active, 1);
    *out = tx;
    return 0;
}

void cl_tx_free(cl_tx *tx)
{
    if (!tx)
        return;
    if (tx->open)
        cl_tx_rollback(tx);
    atomic_fetch_sub(&tx->m->active, 1);
    em_free(tx->e);
    em_free(tx->idx);
    em_free(tx->order);
    em_free(tx->ups);
    em_buf_free(&tx->arena);
    em_buf_free(&tx->kscratch);
    em_buf_free(&tx->rd);
    em_free(tx);
}

int      cl_tx_concurrency(const cl_tx *tx) { return tx->conc; }
int      cl_tx_isolation(const cl_tx *tx) { return tx->iso; }
int64_t  cl_tx_timeout(const cl_tx *tx) { return tx->timeout; }
uint64_t cl_tx_owner(const cl_tx *tx) { return tx->owner; }
int      cl_tx_open(const cl_tx *tx) { return tx->open; }
uint32_t cl_tx_entries(const cl_tx *tx) { return tx->n; }

int64_t cl_tx_remaining(const cl_tx *tx)
{
    if (!tx->deadline)
        return 0;
    uint64_t now = em_now_ms();
    return now >= tx->deadline ? 1 : (int64_t)(tx->deadline - now);
}

int cl_tx_expired(const cl_tx *tx)
{
    return tx->deadline && em_now_ms() >= tx->deadline;
}

void cl_tx_conflict(const cl_tx *tx, int32_t *cache_id, const uint8_t **k, size_t *klen)
{
    if (tx->conflict >= tx->n) {
        *cache_id = 0;
        *k = NULL;
        *klen = 0;
        return;
    }
    const tx_ent *e = &tx->e[tx->conflict];
    *cache_id = e->cache_id;
    *k = tx->arena.p + e->koff;
    *klen = e->klen;
}

/* ---- the key set ------------------------------------------------------- */

static inline const uint8_t *ekey(const cl_tx *tx, const tx_ent *e)
{
    return tx->arena.p + e->koff;
}

static inline uint32_t slot_hash(int32_t cache_id, int32_t hash)
{
    return (uint32_t)em_mix64(((uint64_t)(uint32_t)cache_id << 32) | (uint32_t)hash);
}

static int index_grow(cl_tx *tx)
{
    uint32_t cap = tx->icap ? tx->icap * 2 : 16;
    uint32_t *idx = em_calloc(cap, sizeof *idx);
    if (!idx)
        return EM_NOMEM;
    for (uint32_t i = 0; i < tx->n; i++) {
        uint32_t s = slot_hash(tx->e[i].cache_id, tx->e[i].hash) & (cap - 1);
        while (idx[s])
            s = (s + 1) & (cap - 1);
        idx[s] = i + 1;
    }
    em_free(tx->idx);
    tx->idx = idx;
    tx->icap = cap;
    return 0;
}

/* entry_get: the entry of (c, normalised key), created if missing. */
static int entry_get(cl_tx *tx, st_cache *c, const bin_key *k, tx_ent **out)
{
    int32_t cid = st_cache_id(c);
    if (tx->icap) {
        uint32_t s = slot_hash(cid, k->hash) & (tx->icap - 1);
        for (uint32_t i; (i = tx->idx[s]) != 0; s = (s + 1) & (tx->icap - 1)) {
            tx_ent *e = &tx->e[i - 1];
            if (e->cache_id == cid && e->hash == k->hash && e->klen == k->len &&
                memcmp(ekey(tx, e), k->p, k->len) == 0) {
                *out = e;
                return 0;
            }
        }
    }
    if (tx->arena.len + k->len > UINT32_MAX)
        return EM_TOOBIG;
    if (tx->n >= CL_TX_MAX_KEYS)
        return EM_LIMIT;
    if ((tx->n + 1) * 2 > tx->icap && index_grow(tx))
        return EM_NOMEM;
    if (tx->n == tx->cap) {
        uint32_t cap = tx->cap ? tx->cap * 2 : 8;
        tx_ent *ne = em_realloc(tx->e, cap * sizeof *ne);
        if (!ne)
            return EM_NOMEM;
        tx->e = ne;
        tx->cap = cap;
    }
    uint32_t koff = (uint32_t)tx->arena.len;
    if (em_buf_append(&tx->arena, k->p, k->len))
        return EM_NOMEM;
    tx_ent *e = &tx->e[tx->n];
    memset(e, 0, sizeof *e);
    e->c = c;
    e->cache_id = cid;
    e->hash = k->hash;
    e->koff = koff;
    e->klen = k->len;
    uint32_t s = slot_hash(cid, k->hash) & (tx->icap - 1);
    while (tx->idx[s])
        s = (s + 1) & (tx->icap - 1);
    tx->idx[s] = ++tx->n;
    *out = e;
    return 0;
}

/* find_entry: prepares k and finds (or makes) its entry. */
static int find_entry(cl_tx *tx, st_cache *c, const uint8_t *k, size_t klen, tx_ent **out)
{
    if (!tx->open)
        return EM_INVAL;
    if (cl_tx_expired(tx)) {
        cl_tx_rollback(tx);
        return EM_TIMEOUT;
    }
    bin_key bk;
    em_buf_reset(&tx->kscratch);
    int rc = bin_key_prepare(k, klen, &tx->kscratch, &bk);
    return rc ? rc : entry_get(tx, c, &bk, out);
}

/* ---- deadlock detection ------------------------------------------------
 *
 * A transaction that finds a lock held records "I wait for its holder" and
 * follows the holders' own edges: reaching itself means a cycle that no
 * release will ever break, so it fails now (EM_DEADLOCK, rolled back)
 * instead of at a timeout, or never without one.  Ignite looks for cycles
 * only once a timeout fires; failing at once is the cheaper promise here
 * (one short walk per busy lock, nothing on the uncontended path). */

static void wait_clear(cl_txm *m, uint64_t owner)
{
    pthread_mutex_lock(&m->wmu);
    for (uint32_t i = 0; i < m->nw; i++)
        if (m->w[i].owner == owner) {
            m->w[i] = m->w[--m->nw];
            break;
        }
    pthread_mutex_unlock(&m->wmu);
}

uint64_t cl_tx_blocker(const cl_tx *tx)
{
    cl_txm *m = tx->m;
    uint64_t h = 0;
    pthread_mutex_lock(&m->wmu);
    for (uint32_t i = 0; i < m->nw && !h; i++)
        if (m->w[i].owner == tx->owner)
            h = m->w[i].holder;
    pthread_mutex_unlock(&m->wmu);
    return h;
}

/* wait_for records owner -> holder; 1 if that closes a cycle (the edge is
 * then not kept). */
static int wait_for(cl_tx *tx, uint64_t holder)
{
    cl_txm *m = tx->m;
    int cycle = 0;
    pthread_mutex_lock(&m->wmu);
    uint32_t me = UINT32_MAX;
    for (uint32_t i = 0; i < m->nw; i++)
        if (m->w[i].owner == tx->owner)
            me = i;
    uint64_t cur = holder;
    for (uint32_t steps = 0; steps <= m->nw && !cycle; steps++) {
        uint32_t i = 0;
        while (i < m->nw && m->w[i].owner != cur)
            i++;
        if (i == m->nw || i == me)
            break;
        cur = m->w[i].holder;
        cycle = cur == tx->owner;
    }
    if (cycle) {
        if (me != UINT32_MAX)
            m->w[me] = m->w[--m->nw];
        tx->waiting = 0;
    } else if (me != UINT32_MAX) {
        m->w[me].holder = holder;
    } else {
        if (m->nw == m->capw) {
            uint32_t cap = m->capw ? m->capw * 2 : 16;
            tx_wait *nw = em_realloc(m->w, cap * sizeof *nw);
            if (nw) {
                m->w = nw;
                m->capw = cap;
            }
        }
        if (m->nw < m->capw) {      /* out of memory: detection skips this edge */
            m->w[m->nw++] = (tx_wait){tx->owner, holder};
            tx->waiting = 1;
        }
    }
    pthread_mutex_unlock(&m->wmu);
    return cycle;
}

/* lock_entry takes e's entry lock for tx (no-op if held). */
static int lock_entry(cl_tx *tx, tx_ent *e)
{
    if (e->locked)
        return 0;
    uint64_t holder = 0;
    int rc = st_entry_lock(tx->m->st, e->cache_id, e->hash, ekey(tx, e), e->klen, tx->owner,
                           tx->deadline, &holder);
    if (rc == EM_LOCKED && cl_tx_expired(tx)) {
        cl_tx_rollback(tx);
        return EM_TIMEOUT;
    }
    if (rc == EM_LOCKED && wait_for(tx, holder)) {
        tx->conflict = (uint32_t)(e - tx->e);
        cl_tx_rollback(tx);
        return EM_DEADLOCK;
    }
    if (!rc) {
        e->locked = 1;
        if (tx->waiting) {
            tx->waiting = 0;
            wait_clear(tx->m, tx->owner);
        }
    }
    return rc;
}

static void release_locks(cl_tx *tx)
{
    int any = 0;
    for (uint32_t i = 0; i < tx->n; i++) {
        tx_ent *e = &tx->e[i];
        if (e->locked) {
            st_entry_unlock(tx->m->st, e->cache_id, e->hash, ekey(tx, e), e->klen, tx->owner);
            e->locked = 0;
            any = 1;
        }
    }
    if (any && tx->m->wake && atomic_load_explicit(&tx->m->waiters, memory_order_relaxed))
        tx->m->wake(tx->m->wake_arg);
}

void cl_tx_rollback(cl_tx *tx)
{
    if (tx->waiting) {
        tx->waiting = 0;
        wait_clear(tx->m, tx->owner);
    }
    if (!tx->open)
        return;
    release_locks(tx);
    tx->open = 0;
    atomic_fetch_sub_explicit(&tx->m->open, 1, memory_order_relaxed);
}

/* ---- operations -------------------------------------------------------- */

int cl_tx_get(cl_tx *tx, st_cache *c, const uint8_t *k, size_t klen, int for_write,
              em_buf *out, int *found)
{
    tx_ent *e;
    int rc = find_entry(tx, c, k, klen, &e);
    if (rc)
        return rc;
    *found = 0;
    uint32_t ei = (uint32_t)(e - tx->e);
    if (tx->conc == CL_TX_PESSIMISTIC && (for_write || tx->iso != CL_TX_READ_COMMITTED) &&
        (rc = lock_entry(tx, e)) != 0)
        return rc;
    e = &tx->e[ei];
    if (e->wkind) {                     /* read your own write */
        if (e->wkind == W_PUT) {
            *found = 1;
            return em_buf_append(out, tx->arena.p + e->voff, e->vlen);
        }
        return 0;
    }
    if (e->rseen) {                     /* OPTIMISTIC RR/SER: the first read */
        if (e->rfound) {
            *found = 1;
            return em_buf_append(out, tx->arena.p + e->roff, e->rlen);
        }
        return 0;
    }
    size_t at = out->len;
    rc = st_get(c, NULL, ekey(tx, e), e->klen, out, found);
    if (rc || tx->conc != CL_TX_OPTIMISTIC || tx->iso == CL_TX_READ_COMMITTED)
        return rc;
    /* Remember it: later reads repeat it, SERIALIZABLE checks it at commit.
     * (out may alias nothing of ours: it is the reply buffer.) */
    size_t vl = out->len - at;
    if (tx->arena.len + vl > UINT32_MAX)
        return EM_TOOBIG;
    uint32_t roff = (uint32_t)tx->arena.len;
    if (*found && em_buf_append(&tx->arena, out->p + at, vl))
        return EM_NOMEM;
    e = &tx->e[ei];
    e->rseen = 1;
    e->rfound = (uint8_t)(*found != 0);
    e->roff = roff;
    e->rlen = (uint32_t)(*found ? vl : 0);
    return 0;
}

static int write(cl_tx *tx, st_cache *c, const uint8_t *k, size_t klen, const uint8_t *v,
                 size_t vlen, int kind)
{
    tx_ent *e;
    int rc = find_entry(tx, c, k, klen, &e);
    if (rc)
        return rc;
    uint32_t ei = (uint32_t)(e - tx->e);
    if (tx->conc == CL_TX_PESSIMISTIC && (rc = lock_entry(tx, e)) != 0)
        return rc;
    if (kind == W_PUT) {
        if (tx->arena.len + vlen > UINT32_MAX)
            return EM_TOOBIG;
        uint32_t voff = (uint32_t)tx->arena.len;
        if (em_buf_append(&tx->arena, v, vlen))
            return EM_NOMEM;
        e = &tx->e[ei];
        e->voff = voff;
        e->vlen = (uint32_t)vlen;
    }
    tx->e[ei].wkind = (uint8_t)kind;
    return 0;
}

int cl_tx_put(cl_tx *tx, st_cache *c, const uint8_t *k, size_t klen, const uint8_t *v,
              size_t vlen)
{
    return write(tx, c, k, klen, v, vlen, W_PUT);
}

int cl_tx_remove(cl_tx *tx, st_cache *c, const uint8_t *k, size_t klen)
{
    return write(tx, c, k, klen, NULL, 0, W_REMOVE);
}

/* ---- commit ------------------------------------------------------------ */

/* qsort's comparator takes no argument: the transaction being sorted. */
static _Thread_local const cl_tx *tl_sort_tx;

static int key_cmp(const void *a, const void *b)
{
    const cl_tx *tx = tl_sort_tx;
    const tx_ent *x = &tx->e[*(const uint32_t *)a], *y = &tx->e[*(const uint32_t *)b];
    if (x->cache_id != y->cache_id)
        return x->cache_id < y->cache_id ? -1 : 1;
    if (x->hash != y->hash)
        return x->hash < y->hash ? -1 : 1;
    if (x->klen != y->klen)
        return x->klen < y->klen ? -1 : 1;
    return memcmp(ekey(tx, x), ekey(tx, y), x->klen);
}

/* lock_in_order: OPTIMISTIC commit takes the locks of the keys it writes
 * (and, SERIALIZABLE, reads) in one global order, resuming where a previous
 * attempt stopped. */
static int lock_in_order(cl_tx *tx)
{
    if (!tx->norder && !tx->locked_upto) {
        if (tx->n > tx->ordercap) {
            uint32_t *no = em_realloc(tx->order, tx->n * sizeof *no);
            if (!no)
                return EM_NOMEM;
            tx->order = no;
            tx->ordercap = tx->n;
        }
        uint32_t *o = tx->order;
        for (uint32_t i = 0; i < tx->n; i++)
            if (tx->e[i].wkind || (tx->iso == CL_TX_SERIALIZABLE && tx->e[i].rseen))
                o[tx->norder++] = i;
        tl_sort_tx = tx;
        if (tx->norder > 1)         /* an empty transaction has no order array */
            qsort(o, tx->norder, sizeof *o, key_cmp);
    }
    for (; tx->locked_upto < tx->norder; tx->locked_upto++) {
        tx_ent *e = &tx->e[tx->order[tx->locked_upto]];
        int rc = lock_entry(tx, e);
        if (rc == EM_LOCKED && tx->iso == CL_TX_SERIALIZABLE) {
            tx->conflict = tx->order[tx->locked_upto];
            cl_tx_rollback(tx);
            return EM_TXCONFLICT;
        }
        if (rc)
            return rc;
    }
    return 0;
}

/* validate: SERIALIZABLE reads still hold (values compared byte for byte). */
static int validate(cl_tx *tx)
{
    for (uint32_t i = 0; i < tx->n; i++) {
        tx_ent *e = &tx->e[i];
        if (!e->rseen)
            continue;
        int found = 0;
        em_buf_reset(&tx->rd);
        int rc = st_get(e->c, NULL, ekey(tx, e), e->klen, &tx->rd, &found);
        if (rc)
            return rc;
        if ((found != 0) != (e->rfound != 0) ||
            (found && (tx->rd.len != e->rlen ||
                       memcmp(tx->rd.p, tx->arena.p + e->roff, e->rlen) != 0))) {
            tx->conflict = i;
            return EM_TXCONFLICT;
        }
    }
    return 0;
}

/* expire_at: the deadline a committed PUT gets from the cache's default
 * expiry policy (creation duration), wall-clock ms; 0 = never. */
static int64_t expire_at(const st_cache *c)
{
    const st_cache_config *g = st_cache_cfg(c);
    if (!g->has_expiry || g->expiry.create_ms < 0)
        return 0;
    return em_wall_ms() + (g->expiry.create_ms ? g->expiry.create_ms : 0);
}

int cl_tx_prepare(cl_tx *tx)
{
    if (!tx->open)
        return EM_INVAL;
    if (tx->prepared)
        return 0;
    if (cl_tx_expired(tx)) {
        cl_tx_rollback(tx);
        return EM_TIMEOUT;
    }
    int rc;
    if (tx->conc == CL_TX_OPTIMISTIC && (rc = lock_in_order(tx)) != 0)
        return rc;                      /* EM_LOCKED: keep what we hold, retry */
    /* Pin: from here no lock of ours may be taken over by a timeout. */
    for (uint32_t i = 0; i < tx->n; i++) {
        tx_ent *e = &tx->e[i];
        if (e->locked &&
            st_entry_pin(tx->m->st, e->cache_id, e->hash, ekey(tx, e), e->klen, tx->owner)) {
            e->locked = 0;              /* taken over: not ours to release */
            cl_tx_rollback(tx);
            return EM_TIMEOUT;
        }
    }
    if (tx->conc == CL_TX_OPTIMISTIC && tx->iso == CL_TX_SERIALIZABLE && (rc = validate(tx))) {
        cl_tx_rollback(tx);
        return rc;
    }
    tx->prepared = 1;
    return 0;
}

int cl_tx_prepared(const cl_tx *tx) { return tx->prepared; }

int cl_tx_updates(cl_tx *tx, const st_update **ups, uint32_t *n)
{
    int rc = cl_tx_prepare(tx);
    if (rc)
        return rc;
    uint32_t nw = 0;
    for (uint32_t i = 0; i < tx->n; i++)
        if (tx->e[i].wkind)
            nw++;
    if (nw > tx->upcap) {
        st_update *u = em_realloc(tx->ups, nw * sizeof *u);
        if (!u) {
            cl_tx_rollback(tx);
            return EM_NOMEM;
        }
        tx->ups = u;
        tx->upcap = nw;
    }
    uint32_t j = 0;
    for (uint32_t i = 0; i < tx->n; i++) {
        tx_ent *e = &tx->e[i];
        if (!e->wkind)
            continue;
        st_update *u = &tx->ups[j++];
        memset(u, 0, sizeof *u);
        u->kind = e->wkind == W_PUT ? ST_UPD_PUT : ST_UPD_REMOVE;
        u->cache_id = e->cache_id;
        u->partition = bin_partition(e->hash, st_cache_cfg(e->c)->partitions);
        u->key = ekey(tx, e);
        u->klen = e->klen;
        if (e->wkind == W_PUT) {
            u->val = tx->arena.p + e->voff;
            u->vlen = e->vlen;
            u->expire_at_ms = expire_at(e->c);
        }
    }
    *ups = tx->ups;
    *n = j;
    return 0;
}

int cl_tx_apply(cl_tx *tx)
{
    const st_update *ups;
    uint32_t n;
    int rc = cl_tx_updates(tx, &ups, &n);
    if (rc)
        return rc;
    if ((rc = st_tx_commit(tx->m->st, ups, n)) != 0)
        cl_tx_rollback(tx);             /* nothing applied: it is over */
    return rc;
}

int cl_tx_commit(cl_tx *tx)
{
    int rc = cl_tx_apply(tx);
    if (!rc)
        cl_tx_rollback(tx);             /* committed: release the locks */
    return rc;
}
