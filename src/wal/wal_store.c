/* wal_store.c - the WAL's glue to the store (store/store.h): recovery through
 * st_apply, the write observer that logs every update before it is
 * acknowledged, and checkpoints that scan every cache - of persistent data
 * regions only (st_cache_in_memory).  Formats: wal.c,
 * wal_codec.c, wal_ckpt.c.
 */
#include "wal/wal_int.h"

#include "util/err.h"
#include "util/mem.h"

#include <string.h>

/* Replaying over a fuzzy checkpoint may meet a cache the snapshot already
 * holds (created after the checkpoint's WAL position) or updates for a cache
 * the snapshot missed because it was destroyed before the scan reached it -
 * the WAL tail destroys it again.  Neither is damage. */
int wal_recover_apply(void *arg, const st_update *u)
{
    int rc = st_apply(arg, u);
    return rc == EM_CACHEEXISTS || rc == EM_NOCACHE ? 0 : rc;
}

int wal_recover(wal *w, st_store *s)
{
    return wal_replay(w, wal_recover_apply, s);
}

/* Only persistent regions are logged (Ignite's per-region persistence).  A
 * CACHE_CREATE is reported before the cache is registered, so its region
 * comes from the config; every other record names a registered cache (a
 * write racing a destroy may find none: replay would skip it anyway). */
int wal_skip_cache(void *arg, int32_t cache_id)
{
    st_cache *c = st_cache_find(arg, cache_id);
    return !c || st_cache_in_memory(c);
}

static int observe(void *arg, const st_update *u)
{
    wal *w = arg;
    if (u->in_tx || u->kind == ST_UPD_TX_END)
        return 0;                   /* in its TX record already */
    if (u->kind == ST_UPD_TX) {
        /* wal_append leaves out the updates of in-memory caches */
    } else if (u->kind == ST_UPD_CACHE_CREATE) {
        if (st_region_in_memory(w->store, u->cfg->data_region_name))
            return 0;
    } else {
        st_cache *c = st_cache_find(w->store, u->cache_id);
        if (!c || st_cache_in_memory(c))
            return 0;
    }
    return wal_append(w, u);
}

static void detach(wal *w)
{
    if (w->store)
        st_set_observer(w->store, NULL, NULL);
    w->store = NULL;
}

static int periodic(wal *w)
{
    return wal_checkpoint(w, w->store);
}

int wal_attach(wal *w, st_store *s)
{
    if (!w->ready || w->store)
        return EM_INVAL;
    w->store = s;
    w->detach = detach;
    w->ck_fn = periodic;
    st_set_observer(s, observe, w);
    wal_start_checkpointer(w);
    return 0;
}

typedef struct cache_list { st_cache **c; size_t n, cap; int err; } cache_list;

static void collect(void *arg, st_cache *c)
{
    cache_list *l = arg;
    if (l->n == l->cap) {
        size_t nc = l->cap ? l->cap * 2 : 16;
        st_cache **nn = em_realloc(l->c, nc * sizeof *nn);
        if (!nn) {
            l->err = EM_NOMEM;
            return;
        }
        l->c = nn;
        l->cap = nc;
    }
    l->c[l->n++] = c;
}

typedef struct scan_ctx { wal_ckpt_writer *cw; int32_t cache_id; uint32_t part; } scan_ctx;

static int put_entry(void *arg, const uint8_t *k, size_t klen, const uint8_t *v, size_t vlen,
                     int64_t expire_at_ms)
{
    scan_ctx *sc = arg;
    st_update u;
    memset(&u, 0, sizeof u);
    u.kind = ST_UPD_PUT;
    u.cache_id = sc->cache_id;
    u.partition = sc->part;
    u.key = k;
    u.klen = (uint32_t)klen;
    u.val = v;
    u.vlen = (uint32_t)vlen;
    /* The absolute deadline, as the WAL logs it: a restored entry expires
     * when it would have, whatever the restart took. */
    u.expire_at_ms = expire_at_ms;
    return wal_ckpt_put(sc->cw, &u);
}

static int fill_store(void *arg, wal_ckpt_writer *cw)
{
    st_store *s = arg;
    cache_list l;
    memset(&l, 0, sizeof l);
    st_cache_each(s, collect, &l);
    int rc = l.err;
    for (size_t i = 0; !rc && i < l.n; i++) {
        if (st_cache_in_memory(l.c[i]))     /* not persistent: not in snapshots */
            continue;
        /* A copy: SQL DDL may change the query entities meanwhile (a
         * change logged after the checkpoint's LSN is applied again on
         * replay; setting them is idempotent). */
        st_cache_config cc;
        if ((rc = st_cache_cfg_copy(l.c[i], &cc)))
            break;
        const st_cache_config *cfg = st_cache_cfg(l.c[i]);
        st_update u;
        memset(&u, 0, sizeof u);
        u.kind = ST_UPD_CACHE_CREATE;
        u.cache_id = st_cache_id(l.c[i]);
        u.cfg = &cc;
        rc = wal_ckpt_put(cw, &u);
        st_cache_config_free(&cc);
        if (rc)
            break;
        uint32_t parts = cfg->partitions ? cfg->partitions : 1;
        for (uint32_t p = 0; !rc && p < parts; p++) {
            st_scan *sc;
            rc = st_scan_open(l.c[i], cfg->partitions ? (int32_t)p : -1, &sc);
            if (rc == EM_NOCACHE) {     /* destroyed meanwhile: the WAL has it */
                rc = 0;
                break;
            }
            if (rc)
                break;
            scan_ctx ctx = {cw, u.cache_id, p};
            int more = 1;
            while (!rc && more)
                rc = st_scan_next_page_exp(sc, 256, put_entry, &ctx, &more);
            st_scan_close(sc);
            if (rc == EM_NOCACHE) {
                rc = 0;
                break;
            }
        }
    }
    em_free(l.c);
    return rc;
}

int wal_checkpoint(wal *w, st_store *s)
{
    return wal_checkpoint_run(w, fill_store, s);
}
