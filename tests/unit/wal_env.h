/* wal_env.h - the WAL over the in-memory file layer with a real store, for
 * unit tests (test_wal_store.c, test_wal_ckpt_expiry.c, test_wal_regions.c). */
#ifndef EM_TEST_WAL_ENV_H
#define EM_TEST_WAL_ENV_H

#include "store/store.h"
#include "wal/wal.h"

#define WE_DIR "/db"

/* we_new_store: a store with the default (persistent) region only. */
static inline st_store *we_new_store(void)
{
    st_options o = {{"default", 0, 0}};
    st_store *s = NULL;
    return st_open(&s, &o) == 0 ? s : NULL;
}

/* we_open: the WAL with options o (its dir and file layer set here) over
 * fs, s recovered from it and attached to it, as emberd starts.  On failure
 * *w is NULL. */
static inline int we_open(wal_memfs *fs, wal_options *o, st_store *s, wal **w)
{
    o->dir = WE_DIR;
    o->ops = wal_memfs_ops(fs);
    int rc = wal_open(w, o);
    if (rc)
        return rc;
    if ((rc = wal_recover(*w, s)) == 0)
        rc = wal_attach(*w, s);
    if (rc) {
        wal_close(*w);
        *w = NULL;
    }
    return rc;
}

#endif
