/* wal_int.h - private state shared by wal.c (segments, writer, recovery),
 * wal_ckpt.c (checkpoint files) and wal_store.c (the st_store glue).
 */
#ifndef EM_WAL_INT_H
#define EM_WAL_INT_H

#include "wal/wal.h"

#include <pthread.h>

#define WAL_PATH_MAX 1024
#define WAL_PEND_FLUSH (1u << 20)   /* buffered modes write once this much is pending */

struct wal {
    wal_options o;
    char *dir;
    const wal_fileops *ops;

    pthread_mutex_t mu;             /* everything below, except where noted */
    pthread_cond_t  cv;             /* sync finished / state changed */
    pthread_cond_t  tick;           /* wakes the background threads at close */
    int      ready;                 /* replayed, writer open */
    int      fd;                    /* current segment, -1 none */
    uint64_t seg_no, seg_off;       /* bytes of the segment written to fd */
    uint64_t seg_first;             /* the first LSN the segment's header names */
    uint64_t next_lsn, written_lsn, synced_lsn;
    int      syncing;               /* a leader is in fsync outside mu */
    int      err;                   /* sticky first write/fsync error */
    int      closing;
    em_buf   enc;                   /* FSYNC/LOG_ONLY: the record being written */
    em_buf   pend;                  /* BACKGROUND/NONE: records not yet written */
    char     msg[512];
    char     warn[512];             /* wal_warnmsg: the last replay's last warning */
    int      repair;                /* wal_repair: replay rewrites mislabelled headers */
    uint64_t repaired;              /*   files it rewrote */
    wal_stats st;

    pthread_t bg;                   /* BACKGROUND flusher */
    int       bg_on;
    pthread_t ck;                   /* periodic checkpoints */
    int       ck_on;
    int       ck_req;               /* a checkpoint asked for (wal_checkpoint_soon) */
    int     (*ck_fn)(wal *w);       /* set by wal_attach */
    void    (*detach)(wal *w);
    st_store *store;

    pthread_mutex_t ckmu;           /* one checkpoint at a time */
};

/* wal_path formats dir/name into out (WAL_PATH_MAX). */
void wal_seg_path(const wal *w, uint64_t no, char *out);
void wal_ckpt_path(const wal *w, uint64_t no, int tmp, char *out);
/* wal_seterr records a message for wal_errmsg (mu need not be held during replay). */
void wal_seterr(wal *w, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* Called with mu held: finish the current segment (writes every pending
 * record, fsyncs) and open the next, whose header names next_lsn.  May wait
 * for a running fsync, releasing mu meanwhile. */
int  wal_roll_locked(wal *w);
int  wal_flush_locked(wal *w);

/* wal_ckpt_load validates (fn NULL) or applies a checkpoint file. */
int  wal_ckpt_load(wal *w, const char *path, wal_apply_fn fn, void *arg, wal_ckpt_hdr *h,
                   uint64_t *records);
/* wal_ckpt_relabel rewrites checkpoint seg's header to name first_lsn, in
 * place and fsynced (wal_repair); counts it in w->repaired. */
int  wal_ckpt_relabel(wal *w, uint64_t seg, uint64_t first_lsn);

/* wal_apply_frame decodes one update frame, holds its key and value to the
 * validator the network path uses, and passes it to fn (NULL: check only).
 * A record that fails returns EM_CORRUPT and says why in why[0..cap);
 * otherwise why is untouched and fn's result (or EM_NOMEM) is returned. */
int  wal_apply_frame(const wal_frame *f, wal_apply_fn fn, void *arg, char *why, size_t cap);

void wal_start_checkpointer(wal *w);

/* wal_skip_cache (wal_store.c): nonzero if updates of the cache are not
 * logged (an in-memory region, or no such cache); arg is the st_store. */
int wal_skip_cache(void *arg, int32_t cache_id);

#endif
