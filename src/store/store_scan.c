/* store_scan.c - scan cursors (QUERY_SCAN, reference §2.5).
 *
 * A cursor walks the partitions in order; on entering one it copies every
 * live entry of that partition into its own buffer under the partition lock,
 * then serves pages from the copy.  So each entry present for the whole scan
 * is returned exactly once (it is in its partition's snapshot, and every
 * partition is snapshotted once), and no lock is held while the caller
 * encodes a page.  Snapshot record layout (native endian, unaligned):
 *
 *   offset   size  field
 *   0        4     klen
 *   4        4     vlen
 *   8        8     expire_at: wall-clock ms, 0 = never (st_scan_next_page_exp)
 *   16       klen  key bytes (normalised)
 *   16+klen  vlen  value bytes
 */
#include "store/store_int.h"

#include "util/clock.h"
#include "util/err.h"
#include "util/mem.h"

#include <string.h>

enum { SNAP_HDR = 16 };

struct st_scan {
    st_cache *c;
    uint32_t  next_part, end_part;
    em_buf    snap;
    size_t    pos;
    st_snap_fn fetch;               /* NULL = this store's partitions */
    void     *fetch_arg;
};

int st_scan_open(st_cache *c, int32_t part, st_scan **out)
{
    *out = NULL;
    if (atomic_load_explicit(&c->destroyed, memory_order_relaxed))
        return EM_NOCACHE;
    if (part >= 0 && (uint32_t)part >= c->nparts)
        return EM_RANGE;
    st_scan *sc = em_calloc(1, sizeof *sc);
    if (!sc)
        return EM_NOMEM;
    sc->c = c;
    sc->next_part = part < 0 ? 0 : (uint32_t)part;
    sc->end_part = part < 0 ? c->nparts : (uint32_t)part + 1;
    *out = sc;
    return 0;
}

void st_scan_close(st_scan *sc)
{
    if (!sc)
        return;
    em_buf_free(&sc->snap);
    em_free(sc);
}

int st_scan_open_via(st_cache *c, int32_t part, st_snap_fn fetch, void *arg, st_scan **out)
{
    int rc = st_scan_open(c, part, out);
    if (!rc) {
        (*out)->fetch = fetch;
        (*out)->fetch_arg = arg;
    }
    return rc;
}

static int snapshot(st_scan *sc)
{
    em_buf_reset(&sc->snap);
    sc->pos = 0;
    uint32_t part = sc->next_part++;
    return sc->fetch ? sc->fetch(sc->fetch_arg, sc->c, part, &sc->snap)
                     : st_part_snapshot(sc->c, part, &sc->snap);
}

enum { SNAP_AHEAD = 8 };         /* entries prefetched ahead of the copy */

/* prefetch_entry: starts loading e's first three lines (header, key and a
 * value of up to ~150 bytes, so larger values add no serial misses); 1 if
 * there was an entry. */
static inline int prefetch_entry(const st_entry *e)
{
    if (!e)
        return 0;
    const char *pe = (const char *)e;
    __builtin_prefetch(pe);
    __builtin_prefetch(pe + 64);
    __builtin_prefetch(pe + 128);
    return 1;
}

int st_part_snapshot(st_cache *c, uint32_t part, em_buf *snap)
{
    if (part >= c->nparts)
        return EM_RANGE;
    st_part *p = &c->parts[part];
    int64_t now = 0;
    int rc = 0;
    st_lock_acquire(&p->lock);
    if (st_part_dead(c, p)) {
        rc = EM_NOCACHE;
        goto out;
    }
    if (!p->count)
        goto out;
    /* One pass: the entries are separate allocations, so their cache misses
     * dominate; prefetching overlaps them.  The prefetch runs a fixed number
     * of *entries* ahead (slot j), the first ones before the loop starts: a
     * distance in slots shrinks with the table's load, and left the first
     * entries of every partition to miss one after the other.  The buffer is
     * reused across partitions, so after the first ones it rarely grows. */
    uint32_t j = 0;
    for (uint32_t ahead = 0; ahead < SNAP_AHEAD && j <= p->mask; j++)
        ahead += prefetch_entry(p->slots[j].e);
    for (uint32_t i = 0; i <= p->mask; i++) {
        const st_entry *e = p->slots[i].e;
        if (!e)
            continue;
        while (j <= p->mask && !prefetch_entry(p->slots[j++].e))
            ;
        if (e->expire_at) {
            if (!now)
                now = em_wall_ms();
            if (e->expire_at <= now)
                continue;       /* invisible; reclaimed by writes or the tick */
        }
        size_t n = (size_t)e->klen + e->vlen;
        if ((rc = em_buf_reserve(snap, SNAP_HDR + n)) != 0)
            goto out;
        uint8_t *d = snap->p + snap->len;
        em_st32(d, e->klen);
        em_st32(d + 4, e->vlen);
        em_st64(d + 8, (uint64_t)e->expire_at);
        memcpy(d + SNAP_HDR, e->data, n);
        snap->len += SNAP_HDR + n;
    }
out:
    st_lock_release(&p->lock);
    return rc;
}

/* take: the next record of the current snapshot (1), none left in it (0),
 * or EM_TRUNCATED.  Bounds checked per record: a fetched snapshot came
 * over the network. */
static int take(st_scan *sc, const uint8_t **k, uint32_t *kl, const uint8_t **v, uint32_t *vl,
                int64_t *exp)
{
    if (sc->pos >= sc->snap.len)
        return 0;
    const uint8_t *d = sc->snap.p + sc->pos;
    size_t left = sc->snap.len - sc->pos;
    if (left < SNAP_HDR)
        return EM_TRUNCATED;
    uint32_t a = em_ld32(d), b = em_ld32(d + 4);
    if ((uint64_t)a + b > left - SNAP_HDR)
        return EM_TRUNCATED;
    *k = d + SNAP_HDR;
    *kl = a;
    *v = d + SNAP_HDR + a;
    *vl = b;
    if (exp)
        *exp = (int64_t)em_ld64(d + 8);
    sc->pos += SNAP_HDR + (size_t)a + b;
    return 1;
}

int st_scan_next(st_scan *sc, const uint8_t **k, uint32_t *kl, const uint8_t **v, uint32_t *vl)
{
    for (;;) {
        int rc = take(sc, k, kl, v, vl, NULL);
        if (rc)
            return rc;
        if (sc->next_part >= sc->end_part)
            return 0;
        if ((rc = snapshot(sc)) != 0)
            return rc > 0 ? EM_REMOTE : rc;     /* a fetch's status: its words are its own */
    }
}

/* One page through fn or, when fn is NULL, through fne with the deadline. */
static int next_page(st_scan *sc, uint32_t max, st_kv_fn fn, st_kve_fn fne, void *arg,
                     int *more)
{
    uint32_t emitted = 0;
    int rc;
    *more = 0;
    if (max == 0)
        max = 1024;
    for (;;) {
        const uint8_t *k, *v;
        uint32_t kl, vl;
        int64_t exp;
        while (emitted < max && (rc = take(sc, &k, &kl, &v, &vl, &exp)) != 0) {
            if (rc < 0)
                return rc;
            emitted++;
            rc = fn ? fn(arg, k, kl, v, vl) : fne(arg, k, kl, v, vl, exp);
            if (rc != 0)
                return rc;
        }
        if (emitted == max || sc->next_part >= sc->end_part)
            break;
        if ((rc = snapshot(sc)) != 0)
            return rc;
    }
    /* Look ahead past empty partitions so `more` is exact: the last page
     * says more = 0 (clients rely on it, reference §2.5). */
    while (sc->pos >= sc->snap.len && sc->next_part < sc->end_part)
        if ((rc = snapshot(sc)) != 0)
            return rc;
    *more = sc->pos < sc->snap.len;
    return 0;
}

int st_scan_next_page(st_scan *sc, uint32_t max, st_kv_fn fn, void *arg, int *more)
{
    return next_page(sc, max, fn, NULL, arg, more);
}

int st_scan_next_page_exp(st_scan *sc, uint32_t max, st_kve_fn fn, void *arg, int *more)
{
    return next_page(sc, max, NULL, fn, arg, more);
}
