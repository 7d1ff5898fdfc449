/* store_lock.c - entry locks of TRANSACTIONAL caches and the one-unit
 * transaction commit (store.h, "transactions").
 *
 * The lock table is a chained hash of lock records, 4096 buckets guarded by
 * 64 mutexes (bucket b by mutex b % 64).  Only transactional operations use
 * it, so ATOMIC caches pay nothing.  A record is allocated when a lock is
 * taken and freed when it is released: a transaction allocates anyway (its
 * write set), and keeping the table sparse keeps an idle node's table empty.
 */
#include "store/store_int.h"

#include "util/clock.h"
#include "util/err.h"
#include "util/hash.h"
#include "util/mem.h"

#include <string.h>

#define LK_BUCKETS 4096u
#define LK_STRIPES 64u

typedef struct st_lk {
    struct st_lk *next;
    int32_t  cache_id, hash;
    uint32_t klen, cap;         /* key bytes used / room for */
    uint64_t owner;
    uint64_t deadline;      /* owner's timeout (em_now_ms), 0 = none/pinned */
    uint8_t  key[];
} st_lk;

/* Released records of short keys are kept per stripe (up to LK_SPARE) and
 * reused, so a steady stream of transactions allocates nothing here. */
#define LK_SHORT 48u
#define LK_SPARE 32u

struct st_locktab {
    pthread_mutex_t mu[LK_STRIPES];
    st_lk *spare[LK_STRIPES];
    uint32_t nspare[LK_STRIPES];
    st_lk *b[LK_BUCKETS];
    _Atomic uint64_t held;
};

int st_locks_new(st_store *s)
{
    struct st_locktab *t = em_calloc(1, sizeof *t);
    if (!t)
        return EM_NOMEM;
    for (uint32_t i = 0; i < LK_STRIPES; i++)
        pthread_mutex_init(&t->mu[i], NULL);
    s->locks = t;
    return 0;
}

void st_locks_free(st_store *s)
{
    struct st_locktab *t = s->locks;
    if (!t)
        return;
    for (uint32_t i = 0; i < LK_BUCKETS; i++) {
        st_lk *l = t->b[i];
        while (l) {
            st_lk *n = l->next;
            em_free(l);
            l = n;
        }
    }
    for (uint32_t i = 0; i < LK_STRIPES; i++) {
        st_lk *l = t->spare[i];
        while (l) {
            st_lk *n = l->next;
            em_free(l);
            l = n;
        }
        pthread_mutex_destroy(&t->mu[i]);
    }
    em_free(t);
    s->locks = NULL;
}

static inline uint32_t bucket_of(int32_t cache_id, int32_t hash)
{
    return (uint32_t)em_mix64(((uint64_t)(uint32_t)cache_id << 32) | (uint32_t)hash) &
           (LK_BUCKETS - 1);
}

/* find: the record of the key in bucket b (its stripe held), with the link
 * that points at it in *link. */
static st_lk *find(struct st_locktab *t, uint32_t b, int32_t cache_id, int32_t hash,
                   const uint8_t *k, size_t klen, st_lk ***link)
{
    st_lk **pp = &t->b[b];
    for (st_lk *l = *pp; l; pp = &l->next, l = *pp) {
        if (l->cache_id == cache_id && l->hash == hash && l->klen == klen &&
            memcmp(l->key, k, klen) == 0) {
            if (link)
                *link = pp;
            return l;
        }
    }
    return NULL;
}

int st_entry_lock(st_store *s, int32_t cache_id, int32_t hash, const uint8_t *k, size_t klen,
                  uint64_t owner, uint64_t deadline_ms, uint64_t *holder)
{
    struct st_locktab *t = s->locks;
    if (!owner || klen > UINT32_MAX)
        return EM_INVAL;
    uint32_t b = bucket_of(cache_id, hash);
    pthread_mutex_t *mu = &t->mu[b % LK_STRIPES];
    pthread_mutex_lock(mu);
    st_lk *l = find(t, b, cache_id, hash, k, klen, NULL);
    int rc = 0;
    if (l) {
        if (l->owner != owner) {
            if (l->deadline && l->deadline <= em_now_ms()) {
                /* The holder timed out: it is rolled back (it finds out on
                 * its next request), its lock is ours. */
                l->owner = owner;
            } else {
                if (holder)
                    *holder = l->owner;
                rc = EM_LOCKED;
            }
        }
        if (!rc)
            l->deadline = deadline_ms;
    } else {
        uint32_t st = b % LK_STRIPES;
        if (klen <= LK_SHORT && t->spare[st]) {
            l = t->spare[st];
            t->spare[st] = l->next;
            t->nspare[st]--;
        } else {
            uint32_t cap = klen <= LK_SHORT ? LK_SHORT : (uint32_t)klen;
            if ((l = em_malloc(sizeof *l + cap)) != NULL)
                l->cap = cap;
        }
        if (!l) {
            rc = EM_NOMEM;
        } else {
            l->cache_id = cache_id;
            l->hash = hash;
            l->klen = (uint32_t)klen;
            l->owner = owner;
            l->deadline = deadline_ms;
            memcpy(l->key, k, klen);
            l->next = t->b[b];
            t->b[b] = l;
            atomic_fetch_add_explicit(&t->held, 1, memory_order_relaxed);
        }
    }
    pthread_mutex_unlock(mu);
    return rc;
}

int st_entry_pin(st_store *s, int32_t cache_id, int32_t hash, const uint8_t *k, size_t klen,
                 uint64_t owner)
{
    struct st_locktab *t = s->locks;
    uint32_t b = bucket_of(cache_id, hash);
    pthread_mutex_t *mu = &t->mu[b % LK_STRIPES];
    pthread_mutex_lock(mu);
    st_lk *l = find(t, b, cache_id, hash, k, klen, NULL);
    int rc = EM_TIMEOUT;
    if (l && l->owner == owner) {
        l->deadline = 0;
        rc = 0;
    }
    pthread_mutex_unlock(mu);
    return rc;
}

void st_entry_unlock(st_store *s, int32_t cache_id, int32_t hash, const uint8_t *k, size_t klen,
                     uint64_t owner)
{
    struct st_locktab *t = s->locks;
    uint32_t b = bucket_of(cache_id, hash);
    pthread_mutex_t *mu = &t->mu[b % LK_STRIPES];
    pthread_mutex_lock(mu);
    st_lk **pp;
    st_lk *l = find(t, b, cache_id, hash, k, klen, &pp);
    if (l && l->owner == owner) {
        *pp = l->next;
        uint32_t st = b % LK_STRIPES;
        if (l->cap == LK_SHORT && t->nspare[st] < LK_SPARE) {
            l->next = t->spare[st];
            t->spare[st] = l;
            t->nspare[st]++;
        } else {
            em_free(l);
        }
        atomic_fetch_sub_explicit(&t->held, 1, memory_order_relaxed);
    }
    pthread_mutex_unlock(mu);
}

uint64_t st_entry_locks_held(st_store *s)
{
    return atomic_load_explicit(&s->locks->held, memory_order_relaxed);
}

/* ---- one-unit commit --------------------------------------------------- */

void st_commit_gate_lock(st_store *s) { pthread_rwlock_wrlock(&s->commit_gate); }
void st_commit_gate_unlock(st_store *s) { pthread_rwlock_unlock(&s->commit_gate); }

int st_tx_commit(st_store *s, const st_update *ups, uint32_t n)
{
    if (!n)
        return 0;
    for (uint32_t i = 0; i < n; i++)
        if (ups[i].kind != ST_UPD_PUT && ups[i].kind != ST_UPD_REMOVE)
            return EM_INVAL;
    pthread_rwlock_rdlock(&s->commit_gate);
    st_update tx;
    memset(&tx, 0, sizeof tx);
    tx.kind = ST_UPD_TX;
    tx.batch = ups;
    tx.nbatch = n;
    int rc = st_observe(s, &tx);
    /* Logged (or nothing to log): apply every update.  The keys are locked
     * by the committer, so these are the only writers of them now.  An
     * update can still fail here only for want of memory (an entry to
     * allocate, a full data region without eviction); the rest are applied
     * regardless and the first failure is reported. */
    int first = 0;
    for (uint32_t i = 0; !rc && i < n; i++) {
        st_cache *c = st_cache_find(s, ups[i].cache_id);
        int r = c ? st_tx_apply(c, &ups[i]) : 0;
        if (r && !first)
            first = r;
    }
    st_update end;
    memset(&end, 0, sizeof end);
    end.kind = ST_UPD_TX_END;
    (void)st_observe(s, &end);
    pthread_rwlock_unlock(&s->commit_gate);
    return rc ? rc : first;
}
