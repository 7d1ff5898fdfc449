/* wal_env.h - the WAL over the in-memory file layer with a real store, for
 * unit tests (test_wal_store.c, test_wal_ckpt_expiry.c, test_wal_regions.c,
 * test_wal_validate.c ...), and hand-made segments. */
#ifndef EM_TEST_WAL_ENV_H
#define EM_TEST_WAL_ENV_H

#include "store/store.h"
#include "util/err.h"
#include "util/hash.h"
#include "wal/wal.h"

#include <inttypes.h>
#include <stdio.h>
#include <string.h>

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

/* we_write_seg writes segment no of WE_DIR on fs by hand: a header naming
 * first_lsn, then the n updates as records with LSNs first_lsn, ... - with
 * valid checksums whatever the updates hold (layouts: src/wal/wal.c). */
static inline int we_write_seg(wal_memfs *fs, uint64_t no, uint64_t first_lsn,
                               const st_update *u, int n)
{
    em_buf b = EM_BUF_INIT;
    int rc = em_buf_reserve(&b, WAL_SEG_HDR);
    if (rc)
        return rc;
    memset(b.p, 0, WAL_SEG_HDR);
    em_st32(b.p, WAL_SEG_MAGIC);
    em_st16(b.p + 4, 1);
    em_st64(b.p + 8, no);
    em_st64(b.p + 16, first_lsn);
    em_st32(b.p + 24, em_crc32c(0, b.p, 24));
    b.len = WAL_SEG_HDR;
    for (int i = 0; i < n && !rc; i++) {
        size_t at;
        if (!(rc = wal_frame_begin(&b, &at)) && !(rc = wal_encode_update(&b, &u[i], 1)))
            wal_frame_end(&b, at, WAL_REC_UPDATE, first_lsn + (uint64_t)i);
    }
    const wal_fileops *ops = wal_memfs_ops(fs);
    char path[64];
    snprintf(path, sizeof path, WE_DIR "/wal-%016" PRIx64 ".seg", no);
    int fd;
    if (!rc)
        rc = ops->mkdir(ops->ctx, WE_DIR);
    if (!rc && !(rc = ops->open(ops->ctx, path, WAL_O_WRITE | WAL_O_CREATE | WAL_O_TRUNC, &fd))) {
        rc = ops->pwrite(ops->ctx, fd, b.p, b.len, 0) == (int64_t)b.len ? 0 : EM_IO;
        ops->close(ops->ctx, fd);
    }
    em_buf_free(&b);
    return rc;
}

#endif
