/* wal_ckpt.c - checkpoint files: a snapshot of every cache taken while
 * writers continue, so recovery = load the newest checkpoint + replay the WAL
 * from the segment it names.  Why a fuzzy snapshot is enough: the checkpoint
 * first starts a fresh segment S, so every update that the scan may or may
 * not see is also in the WAL from S on, and every record is a whole put,
 * remove, clear, create or destroy: replaying them over the snapshot ends in
 * the live state whatever the scan saw.
 *
 * File "ckpt-<16 hex digits of S>.ckpt" (written as .tmp, fsynced, renamed):
 *   OFFSET SIZE  FIELD
 *   0      4     magic 0x4b434d45 ("EMCK")
 *   4      2     version (1)
 *   6      2     reserved, 0
 *   8      8     segment number S: the WAL replay continues with wal-S
 *   16     8     LSN of the first record of segment S
 *   24     8     wall-clock ms when the checkpoint started
 *   32     4     CRC32C of bytes [0, 32)
 *   36     4     reserved, must be 0
 *   40     ...   frames (wal.c layout): update commands CACHE_CREATE and PUT,
 *                with LSNs 1, 2, ... within the file, then one END frame
 *                (type 2) whose body is the uint64 count of update frames.
 *                Nothing may follow the END frame.
 */
#include "wal/wal_int.h"

#include "util/clock.h"
#include "util/err.h"
#include "util/hash.h"
#include "util/mem.h"

#include <inttypes.h>
#include <stdio.h>
#include <string.h>

int wal_ckpt_hdr_parse(const uint8_t *p, size_t n, wal_ckpt_hdr *h)
{
    if (n < WAL_CKPT_HDR)
        return EM_TRUNCATED;
    if (em_ld32(p) != WAL_CKPT_MAGIC || em_ld16(p + 4) != 1 ||
        em_crc32c(0, p, 32) != em_ld32(p + 32) || em_ld32(p + 36) != 0)
        return EM_CORRUPT;
    h->seg_no = em_ld64(p + 8);
    h->first_lsn = em_ld64(p + 16);
    h->wall_ms = (int64_t)em_ld64(p + 24);
    return 0;
}

/* ckpt_hdr_build fills the 40-byte header (layout above). */
static void ckpt_hdr_build(uint8_t *h, uint64_t seg, uint64_t first_lsn, int64_t wall_ms)
{
    memset(h, 0, WAL_CKPT_HDR);
    em_st32(h, WAL_CKPT_MAGIC);
    em_st16(h + 4, 1);
    em_st64(h + 8, seg);
    em_st64(h + 16, first_lsn);
    em_st64(h + 24, (uint64_t)wall_ms);
    em_st32(h + 32, em_crc32c(0, h, 32));
}

int wal_ckpt_relabel(wal *w, uint64_t seg, uint64_t first_lsn)
{
    char path[WAL_PATH_MAX];
    uint8_t h[WAL_CKPT_HDR];
    wal_ckpt_hdr ch = {0, 0, 0};
    int fd;
    wal_ckpt_path(w, seg, 0, path);
    int rc = w->ops->open(w->ops->ctx, path, WAL_O_WRITE, &fd);
    if (rc) {
        wal_seterr(w, "%s: cannot open to repair: %s", path, em_strerror(rc));
        return rc;
    }
    int64_t n = w->ops->pread(w->ops->ctx, fd, h, sizeof h, 0);
    rc = n < 0 ? (int)n : n != (int64_t)sizeof h ? EM_TRUNCATED : wal_ckpt_hdr_parse(h, sizeof h, &ch);
    if (!rc) {
        ckpt_hdr_build(h, ch.seg_no, first_lsn, ch.wall_ms);
        n = w->ops->pwrite(w->ops->ctx, fd, h, sizeof h, 0);
        rc = n < 0 ? (int)n : n != (int64_t)sizeof h ? EM_IO : w->ops->fsync(w->ops->ctx, fd);
    }
    w->ops->close(w->ops->ctx, fd);
    if (rc)
        wal_seterr(w, "%s: repairing the header failed: %s", path, em_strerror(rc));
    else
        w->repaired++;
    return rc;
}

struct wal_ckpt_writer {
    wal *w;
    int fd;
    uint64_t off, count;
    int64_t ts;
    em_buf buf;
};

static int cw_write(wal_ckpt_writer *cw)
{
    const wal_fileops *ops = cw->w->ops;
    size_t done = 0;
    while (done < cw->buf.len) {
        int64_t r = ops->pwrite(ops->ctx, cw->fd, cw->buf.p + done, cw->buf.len - done, cw->off);
        if (r <= 0)
            return r < 0 ? (int)r : EM_IO;
        done += (size_t)r;
        cw->off += (uint64_t)r;
    }
    cw->buf.len = 0;
    return 0;
}

int wal_ckpt_put(wal_ckpt_writer *cw, const st_update *u)
{
    if (u->kind != ST_UPD_PUT && u->kind != ST_UPD_CACHE_CREATE)
        return EM_INVAL;
    size_t at;
    int rc = wal_frame_begin(&cw->buf, &at);
    if (!rc)
        rc = wal_encode_update(&cw->buf, u, cw->ts);
    if (rc) {
        cw->buf.len = at < cw->buf.len ? at : cw->buf.len;
        return rc;
    }
    wal_frame_end(&cw->buf, at, WAL_REC_UPDATE, ++cw->count);
    return cw->buf.len >= WAL_PEND_FLUSH ? cw_write(cw) : 0;
}

typedef struct old_files { wal *w; uint64_t before; } old_files;

static void drop_old(void *arg, const char *name)
{
    old_files *of = arg;
    int is_ckpt;
    uint64_t no;
    if (wal_name_parse(name, &is_ckpt, &no) == 0 && no < of->before) {
        char p[WAL_PATH_MAX];
        snprintf(p, sizeof p, "%s/%s", of->w->dir, name);
        /* unlink from inside list: both file layers tolerate it (POSIX
         * readdir may or may not show later entries; none are needed) */
        of->w->ops->unlink(of->w->ops->ctx, p);
    }
}

int wal_checkpoint_run(wal *w, int (*fill)(void *arg, wal_ckpt_writer *cw), void *arg)
{
    char tmp[WAL_PATH_MAX], path[WAL_PATH_MAX];
    const wal_fileops *ops = w->ops;
    pthread_mutex_lock(&w->ckmu);
    /* No transaction commit may run across the position fixed here: its
     * record before it and its updates applied after the scan passed them
     * would be lost with the old segments (store.h, st_tx_commit). */
    st_store *gate = w->store;
    if (gate)
        st_commit_gate_lock(gate);
    pthread_mutex_lock(&w->mu);
    int rc = !w->ready ? EM_INVAL : w->err ? EM_READONLY : 0;
    /* Fix the WAL position P: everything after it lands in segment S or
     * later.  An empty current segment already is such a start.  The flush
     * releases mu while it fsyncs, so appends may be pending again when it
     * returns: the roll writes them to the old segment.  The checkpoint names
     * the LSN S's header names, so replay finds the two in agreement. */
    if (!rc)
        rc = wal_flush_locked(w);
    if (!rc && (w->seg_off > WAL_SEG_HDR || w->pend.len))
        rc = wal_roll_locked(w);
    uint64_t seg = w->seg_no, first_lsn = w->seg_first;
    if (!rc)
        w->st.ckpt_started++;
    pthread_mutex_unlock(&w->mu);
    if (gate)
        st_commit_gate_unlock(gate);
    if (rc) {
        pthread_mutex_unlock(&w->ckmu);
        return rc;
    }

    wal_ckpt_writer cw;
    memset(&cw, 0, sizeof cw);
    cw.w = w;
    cw.ts = em_wall_ms();
    wal_ckpt_path(w, seg, 1, tmp);
    wal_ckpt_path(w, seg, 0, path);
    rc = ops->open(ops->ctx, tmp, WAL_O_WRITE | WAL_O_CREATE | WAL_O_TRUNC, &cw.fd);
    if (rc) {
        pthread_mutex_unlock(&w->ckmu);
        return rc;
    }
    rc = em_buf_reserve(&cw.buf, WAL_CKPT_HDR);
    if (!rc) {
        ckpt_hdr_build(cw.buf.p, seg, first_lsn, cw.ts);
        cw.buf.len = WAL_CKPT_HDR;
        rc = fill(arg, &cw);
    }
    size_t at;
    if (!rc)
        rc = wal_frame_begin(&cw.buf, &at);
    if (!rc && !(rc = em_buf_put_le64(&cw.buf, cw.count))) {
        wal_frame_end(&cw.buf, at, WAL_REC_END, cw.count + 1);
        rc = cw_write(&cw);
    }
    /* Durable contents before the name: a crash leaves the old checkpoint
     * or the whole new one, never a prefix under the final name. */
    if (!rc)
        rc = ops->fsync(ops->ctx, cw.fd);
    ops->close(ops->ctx, cw.fd);
    if (!rc)
        rc = ops->rename(ops->ctx, tmp, path);
    if (!rc)
        rc = ops->syncdir(ops->ctx, w->dir);
    em_buf_free(&cw.buf);
    if (rc) {
        ops->unlink(ops->ctx, tmp);
        pthread_mutex_unlock(&w->ckmu);
        return rc;
    }
    /* Older checkpoints and the segments before S are now redundant. */
    old_files of = {w, seg};
    ops->list(ops->ctx, w->dir, drop_old, &of);
    ops->syncdir(ops->ctx, w->dir);
    pthread_mutex_lock(&w->mu);
    w->st.checkpoints++;
    pthread_mutex_unlock(&w->mu);
    pthread_mutex_unlock(&w->ckmu);
    return 0;
}

/* why[0] != 0 after the walk: a record of the file itself is bad. */
typedef struct load_ctx {
    wal_apply_fn fn;
    void *arg;
    int end_seen;
    uint64_t count;
    char why[160];
} load_ctx;

static int load_cb(void *arg, size_t off, const wal_frame *f)
{
    (void)off;
    load_ctx *l = arg;
    if (l->end_seen) {
        snprintf(l->why, sizeof l->why, "a record after the END record");
        return EM_CORRUPT;
    }
    if (f->type == WAL_REC_END) {
        if (f->body_len != 8 || em_ld64(f->body) != l->count) {
            snprintf(l->why, sizeof l->why, "the END record does not count %" PRIu64 " records",
                     l->count);
            return EM_CORRUPT;
        }
        l->end_seen = 1;
        return 0;
    }
    l->count++;
    return wal_apply_frame(f, l->fn, l->arg, l->why, sizeof l->why);
}

int wal_ckpt_load(wal *w, const char *path, wal_apply_fn fn, void *arg, wal_ckpt_hdr *h,
                  uint64_t *records)
{
    em_buf b = EM_BUF_INIT;
    int rc = wal_read_file(w->ops, path, &b);
    if (rc) {
        wal_seterr(w, "%s: cannot read: %s", path, em_strerror(rc));
        em_buf_free(&b);
        return rc;
    }
    if (wal_ckpt_hdr_parse(b.p, b.len, h)) {
        wal_seterr(w, "%s: corrupt checkpoint header at offset 0", path);
        em_buf_free(&b);
        return EM_CORRUPT;
    }
    load_ctx l = {fn, arg, 0, 0, ""};
    wal_scan_res r;
    rc = wal_scan(b.p, b.len, WAL_CKPT_HDR, 1, load_cb, &l, &r);
    if (rc && l.why[0]) {
        wal_seterr(w, "%s: bad checkpoint record at offset %zu: %s", path, r.end_off, l.why);
        rc = EM_CORRUPT;
    } else if (rc && r.state != WAL_SCAN_CORRUPT) {
        wal_seterr(w, "%s: loading the record at offset %zu failed: %s", path, r.end_off,
                   em_strerror(rc));
    } else if (rc || r.state != WAL_SCAN_CLEAN || !l.end_seen) {
        /* The checkpoint was renamed into place only after its fsync, so any
         * damage in it is real corruption, never a torn write. */
        wal_seterr(w, "%s: corrupt checkpoint at offset %zu", path, r.end_off);
        rc = EM_CORRUPT;
    }
    *records = l.count;
    em_buf_free(&b);
    return rc;
}
