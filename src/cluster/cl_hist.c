/* cl_hist.c - the log of recent updates (contract in cl_hist.h).
 *
 * Ring: records at logical positions (they only grow; the byte is at
 * position % cap), each 8-byte aligned and never split at the ring's end
 * (a pad fills it).  A record is
 *   u32 size | u32 kind (0 record, 1 pad) | i32 cache | u32 part |
 *   u64 cntr | u64 digest | u64 prev | u32 reclen | u32 update kind | record bytes
 * where prev is the position of the partition's record before it in the
 * same run (NONE at a run's start).  Writing evicts from the tail first.
 *
 * Partitions: an open-addressing table by (cache, part), each with its run
 * (first..last counters, the position its first record was at or after,
 * the newest record's position).  A run is empty when last_pos is NONE.
 * Only a run that began with the partition's first update replayed from
 * this node's WAL can be claimed: the copy held every update up to there
 * (the checkpoint under it; cl_rebal resets the partitions its loads left
 * incomplete on disk).  A run begun by a counter jump cannot: what came
 * before it is missing. */
#include "cluster/cl_hist.h"

#include <pthread.h>
#include <string.h>

#include "util/err.h"
#include "util/hash.h"
#include "util/mem.h"
#include "wal/wal.h"

#define HDR       48u
#define NONE      UINT64_MAX
#define MAX_SEND  (1u << 22)           /* records one answer sends, at most */

typedef struct pstate {
    int32_t  cache;
    uint32_t part;
    int      used;
    int      fresh;                    /* nothing noted yet */
    int      claimable;                /* see above */
    uint64_t first, last;              /* the run's counters */
    uint64_t first_pos;                /* its records are at or after this */
    uint64_t last_pos;                 /* its newest record (NONE: empty run) */
} pstate;

struct cl_hist {
    pthread_mutex_t mu;
    uint8_t  *buf;
    size_t    cap;
    uint64_t  head, tail;              /* logical positions */
    pstate   *tab;
    uint32_t  tcap, tcnt;
    em_buf    scratch;                 /* one record being encoded */
    cl_hist_stats st;
};

int cl_hist_new(cl_hist **out, size_t bytes)
{
    *out = NULL;
    if (bytes < (64u << 10))
        return EM_INVAL;
    cl_hist *h = em_calloc(1, sizeof *h);
    if (!h)
        return EM_NOMEM;
    h->cap = bytes & ~(size_t)7;
    h->buf = em_malloc(h->cap);
    if (!h->buf) {
        em_free(h);
        return EM_NOMEM;
    }
    pthread_mutex_init(&h->mu, NULL);
    *out = h;
    return 0;
}

void cl_hist_free(cl_hist *h)
{
    if (!h)
        return;
    em_free(h->buf);
    em_free(h->tab);
    em_buf_free(&h->scratch);
    pthread_mutex_destroy(&h->mu);
    em_free(h);
}

static uint32_t slot_of(int32_t cache, uint32_t part, uint32_t cap)
{
    return (uint32_t)em_mix64((uint64_t)(uint32_t)cache << 32 | part) & (cap - 1);
}

static pstate *find(cl_hist *h, int32_t cache, uint32_t part)
{
    if (!h->tcap)
        return NULL;
    for (uint32_t i = slot_of(cache, part, h->tcap);; i = (i + 1) & (h->tcap - 1)) {
        pstate *p = &h->tab[i];
        if (!p->used)
            return NULL;
        if (p->cache == cache && p->part == part)
            return p;
    }
}

/* find_add: the partition's state, made (an empty run) if new; NULL when
 * the table cannot grow. */
static pstate *find_add(cl_hist *h, int32_t cache, uint32_t part)
{
    pstate *p = find(h, cache, part);
    if (p)
        return p;
    if (2 * (h->tcnt + 1) > h->tcap) {
        uint32_t ncap = h->tcap ? 2 * h->tcap : 1024;
        pstate *nt = em_calloc(ncap, sizeof *nt);
        if (!nt)
            return NULL;
        for (uint32_t i = 0; i < h->tcap; i++) {
            if (!h->tab[i].used)
                continue;
            uint32_t j = slot_of(h->tab[i].cache, h->tab[i].part, ncap);
            while (nt[j].used)
                j = (j + 1) & (ncap - 1);
            nt[j] = h->tab[i];
        }
        em_free(h->tab);
        h->tab = nt;
        h->tcap = ncap;
    }
    uint32_t i = slot_of(cache, part, h->tcap);
    while (h->tab[i].used)
        i = (i + 1) & (h->tcap - 1);
    h->tab[i] = (pstate){ cache, part, 1, 1, 0, 0, 0, 0, NONE };
    h->tcnt++;
    h->st.parts = h->tcnt;
    return &h->tab[i];
}

static uint8_t *at(cl_hist *h, uint64_t pos) { return h->buf + pos % h->cap; }

/* evict_one drops the oldest record; the run it began moves on. */
static void evict_one(cl_hist *h)
{
    uint8_t *r = at(h, h->tail);
    uint32_t size = em_ld32(r);
    if (em_ld32(r + 4) == 0) {
        pstate *p = find(h, (int32_t)em_ld32(r + 8), em_ld32(r + 12));
        if (p && p->last_pos != NONE && h->tail >= p->first_pos) {
            if (h->tail == p->last_pos) {
                p->last_pos = NONE;    /* its run's only record left */
            } else {
                p->first = em_ld64(r + 16) + 1;
                p->first_pos = h->tail + 1;
            }
        }
        h->st.evicted++;
    }
    h->tail += size;
}

/* room makes size bytes free at head, contiguous (a pad first when the
 * ring's end is nearer); the position to write at. */
static uint64_t room(cl_hist *h, uint32_t size)
{
    size_t off = (size_t)(h->head % h->cap);
    if (off + size > h->cap) {
        uint32_t pad = (uint32_t)(h->cap - off);
        while (h->head + pad - h->tail > h->cap)
            evict_one(h);
        em_st32(at(h, h->head), pad);
        em_st32(at(h, h->head) + 4, 1);
        h->head += pad;
    }
    while (h->head + size - h->tail > h->cap)
        evict_one(h);
    uint64_t pos = h->head;
    h->head += size;
    return pos;
}

static uint64_t digest(const st_update *u)
{
    uint64_t d = em_mix64(u->cntr ^ (uint64_t)u->kind << 56);
    if (u->kind != ST_UPD_CLEAR)
        d = em_mix64(d ^ ((uint64_t)u->klen << 32 | em_crc32c(0, u->key, u->klen)));
    if (u->kind == ST_UPD_PUT) {
        d = em_mix64(d ^ ((uint64_t)u->vlen << 32 | em_crc32c(0, u->val, u->vlen)));
        d = em_mix64(d ^ (uint64_t)(u->expire_at_ms > 0 ? u->expire_at_ms : 0));
    }
    return d;
}

static uint64_t fold(uint64_t f, uint64_t d) { return em_mix64(f + d + 0x9e3779b97f4a7c15ull); }

static void note_one(cl_hist *h, const st_update *u, int replay)
{
    if (!u->cntr || (u->kind != ST_UPD_PUT && u->kind != ST_UPD_REMOVE &&
                     u->kind != ST_UPD_CLEAR))
        return;
    pstate *p = find_add(h, u->cache_id, u->partition);
    if (!p)
        return;
    /* A counter that follows the last keeps the copy as whole as it was;
     * any other starts a run that cannot be claimed (replayed first ones
     * aside). */
    int follows = !p->fresh && u->cntr == p->last + 1;
    if (!follows)
        p->claimable = replay && p->fresh;
    p->fresh = 0;
    em_buf_reset(&h->scratch);
    st_update c = *u;
    c.in_tx = 0;
    size_t size = 0;
    if (wal_encode_update(&h->scratch, &c, 0) == 0)
        size = (HDR + h->scratch.len + 7) & ~(size_t)7;
    if (!size || size > h->cap / 4) {
        p->last = u->cntr;             /* not kept: the records start over */
        p->last_pos = NONE;
        return;
    }
    uint64_t pos = room(h, (uint32_t)size);
    int cont = follows && p->last_pos != NONE;  /* (it may have gone making room) */
    if (!cont) {
        p->first = u->cntr;
        p->first_pos = pos;
    }
    uint8_t *r = at(h, pos);
    em_st32(r, (uint32_t)size);
    em_st32(r + 4, 0);
    em_st32(r + 8, (uint32_t)u->cache_id);
    em_st32(r + 12, u->partition);
    em_st64(r + 16, u->cntr);
    em_st64(r + 24, digest(u));
    em_st64(r + 32, cont ? p->last_pos : NONE);
    em_st32(r + 40, (uint32_t)h->scratch.len);
    em_st32(r + 44, (uint32_t)u->kind);
    memcpy(r + HDR, h->scratch.p, h->scratch.len);
    p->last = u->cntr;
    p->last_pos = pos;
    h->st.noted++;
}

static void note(cl_hist *h, const st_update *u, int replay)
{
    if (!h)
        return;
    pthread_mutex_lock(&h->mu);
    if (u->kind == ST_UPD_TX) {
        for (uint32_t i = 0; i < u->nbatch; i++)
            note_one(h, &u->batch[i], replay);
    } else {
        note_one(h, u, replay);
    }
    h->st.bytes = h->head - h->tail;
    pthread_mutex_unlock(&h->mu);
}

void cl_hist_note(cl_hist *h, const st_update *u) { note(h, u, 0); }
void cl_hist_note_replayed(cl_hist *h, const st_update *u) { note(h, u, 1); }

void cl_hist_reset(cl_hist *h, int32_t cache, uint32_t part)
{
    if (!h)
        return;
    pthread_mutex_lock(&h->mu);
    pstate *p = find(h, cache, part);
    if (p) {
        p->last_pos = NONE;
        p->claimable = 0;
        p->fresh = 0;
    }
    pthread_mutex_unlock(&h->mu);
}

int cl_hist_get_claim(cl_hist *h, int32_t cache, uint32_t part, cl_hist_claim *out)
{
    if (!h)
        return EM_NOTFOUND;
    pthread_mutex_lock(&h->mu);
    pstate *p = find(h, cache, part);
    int rc = EM_NOTFOUND;
    if (p && p->last_pos != NONE && p->claimable) {
        uint64_t have = p->last - p->first + 1;
        uint32_t k = have < CL_HIST_TAIL ? (uint32_t)have : CL_HIST_TAIL;
        uint64_t f = 0, pos = p->last_pos;
        for (uint32_t i = 0; i < k; i++) {
            const uint8_t *r = at(h, pos);
            f = fold(f, em_ld64(r + 24));
            pos = em_ld64(r + 32);
        }
        *out = (cl_hist_claim){ p->last, k, f };
        rc = 0;
    }
    pthread_mutex_unlock(&h->mu);
    return rc;
}

int cl_hist_since(cl_hist *h, int32_t cache, uint32_t part, const cl_hist_claim *claim,
                  em_buf *out, uint32_t *n, uint64_t *last)
{
    *n = 0;
    *last = claim->last;
    if (!h || !claim->k || claim->k > CL_HIST_TAIL || claim->last < claim->k)
        return EM_NOTFOUND;
    pthread_mutex_lock(&h->mu);
    pstate *p = find(h, cache, part);
    uint64_t lo = claim->last - claim->k + 1;
    int rc = EM_NOTFOUND;
    uint64_t *pos = NULL;
    if (!p || p->last_pos == NONE || p->first > lo || p->last < claim->last ||
        p->last - claim->last > MAX_SEND)
        goto out;
    uint32_t cnt = (uint32_t)(p->last - claim->last);
    if (cnt && !(pos = em_malloc(sizeof *pos * cnt))) {
        rc = EM_NOMEM;
        goto out;
    }
    /* Newest to oldest: the records to send, then the claimed tail. */
    uint64_t q = p->last_pos, want = p->last, f = 0;
    for (uint32_t i = 0; i < cnt + claim->k; i++, want--) {
        if (q == NONE || q < h->tail)
            goto out;
        const uint8_t *r = at(h, q);
        if (em_ld64(r + 16) != want)
            goto out;                  /* not the run it should be: say nothing */
        if (i < cnt && em_ld32(r + 44) == ST_UPD_CLEAR)
            goto out;                  /* a clear cannot be merged: load whole */
        if (i < cnt)
            pos[cnt - 1 - i] = q;
        else
            f = fold(f, em_ld64(r + 24));
        q = em_ld64(r + 32);
    }
    if (f != claim->digest)
        goto out;                      /* other updates at those counters */
    rc = 0;
    for (uint32_t i = 0; i < cnt && !rc; i++) {
        const uint8_t *r = at(h, pos[i]);
        uint8_t l[4];
        em_st32(l, em_ld32(r + 40));
        rc = em_buf_append(out, l, 4) || em_buf_append(out, r + HDR, em_ld32(r + 40)) ? EM_NOMEM : 0;
    }
    if (!rc) {
        *n = cnt;
        *last = p->last;
    }
out:
    pthread_mutex_unlock(&h->mu);
    em_free(pos);
    return rc;
}

void cl_hist_stats_get(cl_hist *h, cl_hist_stats *s)
{
    memset(s, 0, sizeof *s);
    if (!h)
        return;
    pthread_mutex_lock(&h->mu);
    *s = h->st;
    pthread_mutex_unlock(&h->mu);
}
