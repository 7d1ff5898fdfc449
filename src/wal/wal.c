/* wal.c - record frames, segment files, the writer (WAL modes, group commit)
 * and recovery.  The update command inside a frame is coded in wal_codec.c,
 * checkpoint files in wal_ckpt.c.  Promises per mode: wal.h and
 * ../shared/reference/reliability.md §2.5.
 *
 * Record frame (little-endian):
 *   OFFSET SIZE  FIELD
 *   0      4     magic 0x52574d45 ("EMWR" in file order)
 *   4      2     version (1)
 *   6      2     type: 1 update command, 2 end of checkpoint
 *   8      4     body length B (<= 64 MiB)
 *   12     8     LSN (log sequence number; consecutive from 1 within a log)
 *   20     4     CRC32C of bytes [0, 20) followed by the body
 *   24     B     body (wal_codec.c)
 *
 * Segment file "wal-<16 hex digits>.seg" (numbered from 0, no gaps):
 *   OFFSET SIZE  FIELD
 *   0      4     magic 0x53574d45 ("EMWS")
 *   4      2     version (1)
 *   6      2     reserved, 0
 *   8      8     segment number (equals the file name's)
 *   16     8     LSN of the segment's first record
 *   24     4     CRC32C of bytes [0, 24)
 *   28     4     reserved, must be 0
 *   32     ...   frames, back to back, until the file ends
 * A segment is rolled when the next frame would pass segment_bytes (and by
 * every checkpoint); the old one receives every record below the new
 * header's first LSN, buffered ones included, and is fsynced before the new
 * one is created, so only the last segment can ever have a torn tail.
 */
#include "wal/wal_int.h"

#include "binary/binary.h"
#include "util/clock.h"
#include "util/err.h"
#include "util/hash.h"
#include "util/mem.h"

#include <errno.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>

/* ---- frames ------------------------------------------------------------ */

int wal_frame_begin(em_buf *b, size_t *at)
{
    int rc = em_buf_reserve(b, WAL_FRAME_HDR);
    if (rc)
        return rc;
    *at = b->len;
    b->len += WAL_FRAME_HDR;
    return 0;
}

void wal_frame_end(em_buf *b, size_t at, uint16_t type, uint64_t lsn)
{
    uint8_t *h = b->p + at;
    size_t body = b->len - at - WAL_FRAME_HDR;
    em_st32(h, WAL_FRAME_MAGIC);
    em_st16(h + 4, WAL_FRAME_VERSION);
    em_st16(h + 6, type);
    em_st32(h + 8, (uint32_t)body);
    em_st64(h + 12, lsn);
    uint32_t crc = em_crc32c(0, h, 20);
    crc = em_crc32c(crc, h + WAL_FRAME_HDR, body);
    em_st32(h + 20, crc);
}

int wal_frame_parse(const uint8_t *p, size_t n, wal_frame *f)
{
    if (n < WAL_FRAME_HDR) {
        /* A short tail is torn only if what is there could start a frame. */
        uint8_t m[4];
        em_st32(m, WAL_FRAME_MAGIC);
        return memcmp(p, m, n < 4 ? n : 4) == 0 ? EM_AGAIN : EM_CORRUPT;
    }
    if (em_ld32(p) != WAL_FRAME_MAGIC || em_ld16(p + 4) != WAL_FRAME_VERSION)
        return EM_CORRUPT;
    uint16_t type = em_ld16(p + 6);
    uint32_t len = em_ld32(p + 8);
    if ((type != WAL_REC_UPDATE && type != WAL_REC_END && type != WAL_REC_TX) ||
        len > WAL_MAX_BODY)
        return EM_CORRUPT;
    if (n - WAL_FRAME_HDR < len)
        return EM_AGAIN;
    uint32_t crc = em_crc32c(0, p, 20);
    crc = em_crc32c(crc, p + WAL_FRAME_HDR, len);
    if (crc != em_ld32(p + 20))
        return EM_CORRUPT;
    f->type = type;
    f->lsn = em_ld64(p + 12);
    f->body = p + WAL_FRAME_HDR;
    f->body_len = len;
    f->total = WAL_FRAME_HDR + len;
    return 0;
}

int wal_scan(const uint8_t *p, size_t n, size_t start, uint64_t expect_lsn,
             int (*fn)(void *arg, size_t off, const wal_frame *f), void *arg,
             wal_scan_res *r)
{
    memset(r, 0, sizeof *r);
    size_t off = start;
    while (off < n) {
        wal_frame f;
        int rc = wal_frame_parse(p + off, n - off, &f);
        if (rc == 0 && expect_lsn && f.lsn != expect_lsn) {
            /* A valid frame out of sequence is never a torn write. */
            r->state = WAL_SCAN_CORRUPT;
            r->end_off = r->next_off = off;
            return EM_CORRUPT;
        }
        if (rc) {
            r->end_off = off;
            /* Is anything valid after the bad bytes?  Then they are damage in
             * the middle of the log, not a tail torn by a crash. */
            for (size_t y = off + 1; y + WAL_FRAME_HDR <= n; y++) {
                if (p[y] != (WAL_FRAME_MAGIC & 0xff) || em_ld32(p + y) != WAL_FRAME_MAGIC)
                    continue;
                wal_frame g;
                if (wal_frame_parse(p + y, n - y, &g) == 0) {
                    r->state = WAL_SCAN_CORRUPT;
                    r->next_off = y;
                    return EM_CORRUPT;
                }
            }
            r->state = WAL_SCAN_TORN;
            return 0;
        }
        if (fn && (r->fn_rc = fn(arg, off, &f)) != 0) {
            r->end_off = off;
            return r->fn_rc;
        }
        r->frames++;
        r->last_lsn = f.lsn;
        if (expect_lsn)
            expect_lsn++;
        off += f.total;
    }
    r->end_off = off;
    r->state = WAL_SCAN_CLEAN;
    return 0;
}

int wal_seg_hdr_parse(const uint8_t *p, size_t n, wal_seg_hdr *h)
{
    if (n < WAL_SEG_HDR)
        return EM_TRUNCATED;
    if (em_ld32(p) != WAL_SEG_MAGIC || em_ld16(p + 4) != 1 ||
        em_crc32c(0, p, 24) != em_ld32(p + 24) || em_ld32(p + 28) != 0)
        return EM_CORRUPT;
    h->seg_no = em_ld64(p + 8);
    h->first_lsn = em_ld64(p + 16);
    return 0;
}

static void seg_hdr_build(uint8_t *p, uint64_t no, uint64_t first_lsn)
{
    memset(p, 0, WAL_SEG_HDR);
    em_st32(p, WAL_SEG_MAGIC);
    em_st16(p + 4, 1);
    em_st64(p + 8, no);
    em_st64(p + 16, first_lsn);
    em_st32(p + 24, em_crc32c(0, p, 24));
}

/* check_obj: p[0..n) is exactly one whole, non-null data object, as proto/
 * requires of every key and value it accepts.  The store trusts that (it
 * hashes keys by their declared lengths, replies copy values as they are),
 * so recovery holds the log's bytes to the same validator.  Nesting is
 * bounded by bin_validate's hard cap: whatever max_depth the server ran
 * with when it logged them. */
static int check_obj(const uint8_t *p, size_t n)
{
    size_t len = 0;
    int rc = bin_validate(p, n, &len, UINT32_MAX);
    if (rc)
        return rc;
    if (len != n)
        return EM_TRAILING;
    return p[0] == BIN_NULL ? EM_BADTYPE : 0;
}

static int apply_cmd(const uint8_t *body, size_t len, int tx, wal_apply_fn fn, void *arg,
                     char *why, size_t cap);

/* apply_tx: a WAL_REC_TX body.  Every command is checked before the first
 * is applied: the frame's CRC already makes it all-or-nothing on disk, and
 * this keeps a well-checksummed but malformed one from half-applying. */
static int apply_tx(const wal_frame *f, wal_apply_fn fn, void *arg, char *why, size_t cap)
{
    const uint8_t *p = f->body;
    size_t n = f->body_len;
    if (n < 4) {
        snprintf(why, cap, "transaction record too short");
        return EM_CORRUPT;
    }
    uint32_t cnt = em_ld32(p);
    for (int pass = 0; pass < 2; pass++) {
        size_t off = 4;
        for (uint32_t i = 0; i < cnt; i++) {
            if (n - off < 4 || n - off - 4 < em_ld32(p + off)) {
                snprintf(why, cap, "transaction record cut inside update %u of %u", i, cnt);
                return EM_CORRUPT;
            }
            uint32_t len = em_ld32(p + off);
            int rc = apply_cmd(p + off + 4, len, 1, pass ? fn : NULL, arg, why, cap);
            if (rc)
                return rc;
            off += 4 + (size_t)len;
        }
        if (off != n) {
            snprintf(why, cap, "%zu bytes after the transaction's updates", n - off);
            return EM_CORRUPT;
        }
    }
    return 0;
}

int wal_apply_frame(const wal_frame *f, wal_apply_fn fn, void *arg, char *why, size_t cap)
{
    if (f->type == WAL_REC_TX)
        return apply_tx(f, fn, arg, why, cap);
    if (f->type != WAL_REC_UPDATE) {
        snprintf(why, cap, "not an update record (type %u)", f->type);
        return EM_CORRUPT;
    }
    return apply_cmd(f->body, f->body_len, 0, fn, arg, why, cap);
}

static int apply_cmd(const uint8_t *body, size_t len, int tx, wal_apply_fn fn, void *arg,
                     char *why, size_t cap)
{
    wal_cmd c;
    st_update u;
    st_cache_config cfg;
    int rc = wal_cmd_unmarshal(body, len, &c);
    if (!rc)
        rc = wal_decode_update(&c, &u, &cfg);
    if (rc) {
        snprintf(why, cap, "undecodable update command (%s)", em_errname(rc));
        return EM_CORRUPT;
    }
    if (tx && u.kind != ST_UPD_PUT && u.kind != ST_UPD_REMOVE) {
        snprintf(why, cap, "transaction record holds a kind %d update", (int)u.kind);
        return EM_CORRUPT;
    }
    if (u.kind == ST_UPD_PUT || u.kind == ST_UPD_REMOVE) {
        const char *what = "key";
        rc = check_obj(u.key, u.klen);
        if (!rc && u.kind == ST_UPD_PUT) {
            what = "value";
            rc = check_obj(u.val, u.vlen);
        }
        if (rc == EM_NOMEM)
            return rc;
        if (rc) {
            snprintf(why, cap, "its %s is not a valid data object (%s)", what, em_errname(rc));
            return EM_CORRUPT;
        }
    }
    return fn ? fn(arg, &u) : 0;
}

/* ---- names and files --------------------------------------------------- */

void wal_seg_path(const wal *w, uint64_t no, char *out)
{
    snprintf(out, WAL_PATH_MAX, "%s/wal-%016" PRIx64 ".seg", w->dir, no);
}

void wal_ckpt_path(const wal *w, uint64_t no, int tmp, char *out)
{
    snprintf(out, WAL_PATH_MAX, "%s/ckpt-%016" PRIx64 ".%s", w->dir, no, tmp ? "tmp" : "ckpt");
}

int wal_name_parse(const char *name, int *is_ckpt, uint64_t *no)
{
    const char *hex, *ext;
    if (strncmp(name, "wal-", 4) == 0) {
        *is_ckpt = 0;
        hex = name + 4;
        ext = ".seg";
    } else if (strncmp(name, "ckpt-", 5) == 0) {
        *is_ckpt = 1;
        hex = name + 5;
        ext = ".ckpt";
    } else {
        return EM_INVAL;
    }
    uint64_t v = 0;
    for (int i = 0; i < 16; i++) {
        char ch = hex[i];
        int d = ch >= '0' && ch <= '9' ? ch - '0' : ch >= 'a' && ch <= 'f' ? ch - 'a' + 10 : -1;
        if (d < 0)
            return EM_INVAL;
        v = v << 4 | (uint64_t)d;
    }
    if (strcmp(hex + 16, ext) != 0)
        return EM_INVAL;
    *no = v;
    return 0;
}

int wal_read_file(const wal_fileops *ops, const char *path, em_buf *b)
{
    int fd, rc;
    uint64_t size;
    em_buf_reset(b);
    if ((rc = ops->open(ops->ctx, path, WAL_O_READ, &fd)))
        return rc;
    rc = ops->size(ops->ctx, fd, &size);
    if (!rc && size > SIZE_MAX / 2)
        rc = EM_TOOBIG;
    if (!rc)
        rc = em_buf_reserve(b, (size_t)size + 1);
    while (!rc && b->len < size) {
        int64_t r = ops->pread(ops->ctx, fd, b->p + b->len, (size_t)size - b->len, b->len);
        if (r < 0)
            rc = (int)r;
        else if (r == 0)
            break;                      /* shrank under us: take what is there */
        else
            b->len += (size_t)r;
    }
    ops->close(ops->ctx, fd);
    return rc;
}

void wal_seterr(wal *w, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(w->msg, sizeof w->msg, fmt, ap);
    va_end(ap);
}

/* ---- open -------------------------------------------------------------- */

int wal_mode_parse(const char *s, wal_mode *out)
{
    static const char *names[] = {"FSYNC", "LOG_ONLY", "BACKGROUND", "NONE"};
    for (int i = 0; i < 4; i++)
        if (strcasecmp(s, names[i]) == 0) {
            *out = (wal_mode)i;
            return 0;
        }
    return EM_CONFIG;
}

const char *wal_mode_name(wal_mode m)
{
    switch (m) {
    case WAL_FSYNC: return "FSYNC";
    case WAL_LOG_ONLY: return "LOG_ONLY";
    case WAL_BACKGROUND: return "BACKGROUND";
    case WAL_NONE: return "NONE";
    }
    return "?";
}

int wal_open(wal **out, const wal_options *o)
{
    if (!o || !o->dir || !o->dir[0] || strlen(o->dir) > WAL_PATH_MAX - 64 ||
        (unsigned)o->mode > WAL_NONE)
        return EM_INVAL;
    wal *w = em_calloc(1, sizeof *w);
    if (!w)
        return EM_NOMEM;
    w->o = *o;
    size_t dl = strlen(o->dir);
    while (dl > 1 && o->dir[dl - 1] == '/')
        dl--;
    w->dir = em_strndup(o->dir, dl);
    if (!w->dir) {
        em_free(w);
        return EM_NOMEM;
    }
    w->o.dir = w->dir;
    w->ops = o->ops ? o->ops : wal_posix_ops();
    if (!w->o.segment_bytes)
        w->o.segment_bytes = 64u << 20;
    if (!w->o.flush_ms)
        w->o.flush_ms = 2000;
    w->fd = -1;
    pthread_mutex_init(&w->mu, NULL);
    pthread_mutex_init(&w->ckmu, NULL);
    pthread_condattr_t ca;
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    pthread_cond_init(&w->cv, NULL);
    pthread_cond_init(&w->tick, &ca);
    pthread_condattr_destroy(&ca);
    if (!o->read_only) {
        int rc = w->ops->mkdir(w->ops->ctx, w->dir);
        if (rc) {
            wal_seterr(w, "%s: cannot create directory: %s", w->dir, em_strerror(rc));
            wal_close(w);
            return rc;
        }
    }
    *out = w;
    return 0;
}

/* ---- replay ------------------------------------------------------------ */

typedef struct dirlist {
    uint64_t *segs, ckpt;
    size_t nsegs, cap;
    int has_ckpt, err;
    wal *w;
} dirlist;

static void list_cb(void *arg, const char *name)
{
    dirlist *d = arg;
    int is_ckpt;
    uint64_t no;
    size_t nl = strlen(name);
    if (nl > 4 && strcmp(name + nl - 4, ".tmp") == 0 && !d->w->o.read_only) {
        /* an unfinished checkpoint from a crash: never loaded, remove */
        char p[WAL_PATH_MAX];
        snprintf(p, sizeof p, "%s/%s", d->w->dir, name);
        d->w->ops->unlink(d->w->ops->ctx, p);
        return;
    }
    if (wal_name_parse(name, &is_ckpt, &no))
        return;
    if (is_ckpt) {
        if (!d->has_ckpt || no > d->ckpt)
            d->ckpt = no;
        d->has_ckpt = 1;
        return;
    }
    if (d->nsegs == d->cap) {
        size_t nc = d->cap ? d->cap * 2 : 16;
        uint64_t *ns = em_realloc(d->segs, nc * sizeof *ns);
        if (!ns) {
            d->err = EM_NOMEM;
            return;
        }
        d->segs = ns;
        d->cap = nc;
    }
    d->segs[d->nsegs++] = no;
}

static int cmp_u64(const void *a, const void *b)
{
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return (x > y) - (x < y);
}

/* why[0] != 0 after a walk: the record itself failed (corruption), not fn. */
typedef struct apply_ctx { wal_apply_fn fn; void *arg; char why[160]; } apply_ctx;

static int apply_cb(void *arg, size_t off, const wal_frame *f)
{
    (void)off;
    apply_ctx *a = arg;
    return wal_apply_frame(f, a->fn, a->arg, a->why, sizeof a->why);
}

/* seg_relabel rewrites segment no's header at path to name first_lsn: one
 * 32-byte write, fsynced (wal_repair). */
static int seg_relabel(wal *w, const char *path, uint64_t no, uint64_t first_lsn)
{
    uint8_t h[WAL_SEG_HDR];
    int fd;
    seg_hdr_build(h, no, first_lsn);
    int rc = w->ops->open(w->ops->ctx, path, WAL_O_WRITE, &fd);
    if (rc) {
        wal_seterr(w, "%s: cannot open to repair: %s", path, em_strerror(rc));
        return rc;
    }
    int64_t n = w->ops->pwrite(w->ops->ctx, fd, h, sizeof h, 0);
    rc = n < 0 ? (int)n : n != (int64_t)sizeof h ? EM_IO : w->ops->fsync(w->ops->ctx, fd);
    w->ops->close(w->ops->ctx, fd);
    if (rc)
        wal_seterr(w, "%s: repairing the header failed: %s", path, em_strerror(rc));
    else
        w->repaired++;
    return rc;
}

/* seg_first_lsn decides where segment i's records start, given the LSN the
 * log so far expects (expect; 0 = anything: no checkpoint, first segment).
 * A segment's header names its first record's LSN.  Logs written by
 * BACKGROUND/NONE before the roll wrote pending records first can hold a
 * segment whose header names a higher LSN than its records carry: the
 * pending records of the checkpoint's fsync window open it.  The records'
 * own LSNs are right (consecutive, CRC-checked), so such a segment is read
 * by them, with a warning (wal_warnmsg), when that keeps the log whole:
 *   - its first record continues the log (the previous segment's next LSN);
 *   - it is the checkpoint's segment S and the header names the
 *     checkpoint's LSN: records below it were applied before the snapshot's
 *     scan began, and replaying a record the snapshot already reflects,
 *     followed by every later one, ends in the same state;
 *   - it is the last segment and holds no record: the pending records it
 *     should have received were lost with the unflushed tail.  Returns 1:
 *     the caller drops it and starts the next segment in its place.
 * Anything else that disagrees is corruption. */
static int seg_first_lsn(wal *w, const char *path, const em_buf *b, const wal_seg_hdr *h,
                         size_t i, int last, uint64_t expect, int note, uint64_t *first)
{
    wal_frame f;
    uint64_t rec = 0;                   /* the first record's LSN, 0 = none valid */
    if (b->len > WAL_SEG_HDR && wal_frame_parse(b->p + WAL_SEG_HDR, b->len - WAL_SEG_HDR, &f) == 0)
        rec = f.lsn;
    uint64_t hl = h->first_lsn;
    *first = hl;
    if ((!rec || rec == hl) && (!expect || hl == expect))
        return 0;                       /* the header agrees with both */
    int ok;
    if (rec)
        ok = !expect || rec == expect || (i == 0 && hl == expect && rec < expect);
    else
        ok = last && hl > expect;
    if (!ok) {
        if (rec && rec != hl)
            wal_seterr(w, "%s: segment header says first LSN %" PRIu64 " (offset 16) but its "
                       "first record has LSN %" PRIu64 ", expected LSN %" PRIu64 " (offset %d)",
                       path, hl, rec, expect, WAL_SEG_HDR);
        else
            wal_seterr(w, "%s: segment header says segment %" PRIu64 " first LSN %" PRIu64
                       ", expected LSN %" PRIu64 " (offset 16)", path, h->seg_no, hl, expect);
        return EM_CORRUPT;
    }
    *first = rec ? rec : expect;
    if (note) {
        w->st.mislabeled++;
        if (rec)
            snprintf(w->warn, sizeof w->warn, "%s: segment header says first LSN %" PRIu64
                     " but its records start at LSN %" PRIu64 " (offset %d); read by the "
                     "records' LSNs", path, hl, rec, WAL_SEG_HDR);
        else
            snprintf(w->warn, sizeof w->warn, "%s: segment header says first LSN %" PRIu64
                     " but the log before it ends at LSN %" PRIu64 " and it holds no record; "
                     "read as empty", path, hl, expect - 1);
        if (w->repair) {
            /* The checkpoint first: relabelled alone it still leaves a log
             * this function accepts; the segment alone would not. */
            int rc = 0;
            if (i == 0 && rec && rec < expect)
                rc = wal_ckpt_relabel(w, h->seg_no, rec);
            if (!rc)
                rc = seg_relabel(w, path, h->seg_no, *first);
            if (rc)
                return rc;
        }
    }
    return rec ? 0 : 1;
}

/* replay_segments walks segs[first..] once: validating only (apply == 0),
 * or applying.  *next_lsn carries the expected LSN; *cut gets the torn
 * tail's offset in the last segment (or UINT64_MAX), *drop_last = 1 if the
 * last segment's header itself is torn. */
static int replay_segments(wal *w, const uint64_t *segs, size_t n, uint64_t *next_lsn,
                           int apply, wal_apply_fn fn, void *arg, em_buf *b,
                           uint64_t *cut, int *drop_last, uint64_t *applied)
{
    char path[WAL_PATH_MAX];
    *cut = UINT64_MAX;
    *drop_last = 0;
    for (size_t i = 0; i < n; i++) {
        int last = i + 1 == n;
        wal_seg_path(w, segs[i], path);
        int rc = wal_read_file(w->ops, path, b);
        if (rc) {
            wal_seterr(w, "%s: cannot read: %s", path, em_strerror(rc));
            return rc;
        }
        wal_seg_hdr h;
        rc = wal_seg_hdr_parse(b->p, b->len, &h);
        if (rc) {
            wal_scan_res r;
            if (last && (rc == EM_TRUNCATED ||
                         (wal_scan(b->p, b->len, 0, 0, NULL, NULL, &r) == 0 && r.frames == 0))) {
                /* creating the segment was interrupted: nothing was logged in it */
                *drop_last = 1;
                return 0;
            }
            wal_seterr(w, "%s: corrupt segment header at offset 0", path);
            return EM_CORRUPT;
        }
        if (h.seg_no != segs[i]) {
            wal_seterr(w, "%s: segment header says segment %" PRIu64 ", expected segment %"
                       PRIu64 " (offset 8)", path, h.seg_no, segs[i]);
            return EM_CORRUPT;
        }
        uint64_t first;
        rc = seg_first_lsn(w, path, b, &h, i, last, *next_lsn, !apply, &first);
        if (rc == 1) {
            *drop_last = 1;             /* holds nothing: replaced like a torn header */
            return 0;
        }
        if (rc)
            return rc;
        *next_lsn = first;
        wal_scan_res r;
        apply_ctx a = {fn, arg, ""};
        rc = wal_scan(b->p, b->len, WAL_SEG_HDR, *next_lsn, apply ? apply_cb : NULL, &a, &r);
        if (rc && r.state != WAL_SCAN_CORRUPT) {
            if (a.why[0]) {
                wal_seterr(w, "%s: bad record at offset %zu: %s", path, r.end_off, a.why);
                return EM_CORRUPT;
            }
            wal_seterr(w, "%s: replaying the record at offset %zu failed: %s", path,
                       r.end_off, em_strerror(rc));
            return rc;
        }
        if (r.state == WAL_SCAN_CORRUPT) {
            if (r.next_off == r.end_off)
                wal_seterr(w, "%s: record at offset %zu is out of LSN sequence (expected %" PRIu64 ")",
                           path, r.end_off, *next_lsn + r.frames);
            else
                wal_seterr(w, "%s: corrupt record at offset %zu followed by a valid record at offset %zu",
                           path, r.end_off, r.next_off);
            return EM_CORRUPT;
        }
        if (r.state == WAL_SCAN_TORN && !last) {
            wal_seterr(w, "%s: corrupt record at offset %zu in a segment that is not the last",
                       path, r.end_off);
            return EM_CORRUPT;
        }
        if (!apply) {
            /* validate pass: every record must also decode, with keys and
             * values the store can take, before anything is applied */
            size_t off = WAL_SEG_HDR;
            for (uint64_t k = 0; k < r.frames; k++) {
                wal_frame f;
                wal_frame_parse(b->p + off, b->len - off, &f);
                a.why[0] = 0;
                if ((rc = wal_apply_frame(&f, NULL, NULL, a.why, sizeof a.why)) != 0) {
                    if (!a.why[0]) {
                        wal_seterr(w, "%s: checking the record at offset %zu failed: %s", path,
                                   off, em_strerror(rc));
                        return rc;
                    }
                    wal_seterr(w, "%s: bad record at offset %zu: %s", path, off, a.why);
                    return EM_CORRUPT;
                }
                off += f.total;
            }
        }
        if (r.state == WAL_SCAN_TORN)
            *cut = r.end_off;
        *next_lsn += r.frames;
        if (applied)
            *applied += r.frames;
    }
    return 0;
}

static int seg_create_locked(wal *w, uint64_t no);
static void *bg_main(void *arg);

/* storage_failed: the errors of a full or failing disk, which fail the log
 * instead of refusing to start it (see wal_replay). */
static int storage_failed(int rc)
{
    return rc == -ENOSPC || rc == -EDQUOT || rc == -EIO || rc == -EROFS;
}

int wal_replay(wal *w, wal_apply_fn fn, void *arg)
{
    if (w->ready)
        return EM_INVAL;
    dirlist d;
    memset(&d, 0, sizeof d);
    d.w = w;
    int rc = w->ops->list(w->ops->ctx, w->dir, list_cb, &d);
    if (!rc)
        rc = d.err;
    if (rc) {
        wal_seterr(w, "%s: cannot list: %s", w->dir, em_strerror(rc));
        em_free(d.segs);
        return rc;
    }
    if (d.nsegs)
        qsort(d.segs, d.nsegs, sizeof *d.segs, cmp_u64);
    char path[WAL_PATH_MAX];
    uint64_t next_lsn = 0, start_seg = 0, applied = 0;
    em_buf b = EM_BUF_INIT;
    w->st.replayed = w->st.cut_bytes = w->st.mislabeled = 0;
    w->warn[0] = 0;
    if (d.has_ckpt) {
        wal_ckpt_hdr h;
        uint64_t nrec = 0;
        wal_ckpt_path(w, d.ckpt, 0, path);
        rc = wal_ckpt_load(w, path, NULL, NULL, &h, &nrec);
        if (!rc && fn)
            rc = wal_ckpt_load(w, path, fn, arg, &h, &nrec);
        if (rc)
            goto out;
        next_lsn = h.first_lsn;
        start_seg = h.seg_no;
        applied += nrec;
    }
    /* Segments wholly before the checkpoint may survive a crash between the
     * checkpoint's rename and their deletion: they are already in it. */
    size_t first = 0;
    while (first < d.nsegs && d.segs[first] < start_seg)
        first++;
    const uint64_t *segs = d.segs ? d.segs + first : NULL;   /* no arithmetic on NULL */
    size_t n = d.nsegs - first;
    if (n && segs[0] != start_seg) {
        wal_seg_path(w, start_seg, path);
        wal_seterr(w, "%s: missing (the log starts at segment %" PRIu64 ")", path, segs[0]);
        rc = EM_CORRUPT;
        goto out;
    }
    for (size_t i = 1; i < n; i++)
        if (segs[i] != segs[i - 1] + 1) {
            wal_seg_path(w, segs[i - 1] + 1, path);
            wal_seterr(w, "%s: missing between existing segments", path);
            rc = EM_CORRUPT;
            goto out;
        }
    uint64_t cut, lsn0 = next_lsn;
    int drop_last;
    rc = replay_segments(w, segs, n, &next_lsn, 0, NULL, NULL, &b, &cut, &drop_last, NULL);
    if (!rc && fn) {
        next_lsn = lsn0;
        rc = replay_segments(w, segs, n, &next_lsn, 1, fn, arg, &b, &cut, &drop_last, &applied);
    }
    if (rc)
        goto out;
    if (!next_lsn)
        next_lsn = 1;
    w->st.replayed = applied;
    uint64_t new_seg = n ? segs[n - 1] + 1 : start_seg;
    if (drop_last)
        new_seg = segs[n - 1];
    int start_err = 0;                  /* the disk refused to let the writer start */
    if (cut != UINT64_MAX) {
        wal_seg_path(w, segs[n - 1 - (size_t)drop_last], path);
        int fd;
        uint64_t size = 0;
        if (!w->o.read_only && (rc = w->ops->open(w->ops->ctx, path, WAL_O_WRITE, &fd)) == 0) {
            rc = w->ops->size(w->ops->ctx, fd, &size);
            if (!rc)
                rc = w->ops->ftruncate(w->ops->ctx, fd, cut);
            if (!rc)
                rc = w->ops->fsync(w->ops->ctx, fd);
            w->ops->close(w->ops->ctx, fd);
            if (!rc)
                w->st.cut_bytes = size - cut;
        }
        if (rc && storage_failed(rc)) {
            /* Left in place, the tail is cut by the next start that can. */
            start_err = rc;
            wal_seterr(w, "%s: cannot cut the torn tail at offset %" PRIu64 ": %s; the log "
                       "takes no more writes", path, cut, em_strerror(rc));
            rc = 0;
        } else if (rc) {
            wal_seterr(w, "%s: cannot cut the torn tail at offset %" PRIu64 ": %s", path, cut,
                       em_strerror(rc));
            goto out;
        }
        if (w->o.read_only)
            wal_seterr(w, "%s: torn tail at offset %" PRIu64 " (recovery cuts it)", path, cut);
    }
    if (drop_last && !w->o.read_only) {
        wal_seg_path(w, new_seg, path);
        w->ops->unlink(w->ops->ctx, path);
    }
    w->next_lsn = next_lsn;
    w->written_lsn = w->synced_lsn = next_lsn - 1;
    if (w->o.read_only)
        goto out;
    pthread_mutex_lock(&w->mu);
    if (!start_err && (rc = seg_create_locked(w, new_seg)) != 0) {
        wal_seg_path(w, new_seg, path);
        if (storage_failed(rc)) {
            start_err = rc;
            wal_seterr(w, "%s: cannot start the segment: %s; the log takes no more writes",
                       path, em_strerror(rc));
            rc = 0;
        } else {
            wal_seterr(w, "%s: cannot start the segment: %s", path, em_strerror(rc));
        }
    }
    if (!rc) {
        /* A full or failing disk at start leaves the log as a write error
         * while running does: what was recovered serves reads, appends
         * return EM_READONLY, wal_error says why.  Refusing to start would
         * make the data unreadable until space is freed. */
        w->err = start_err;
        w->ready = 1;
    }
    pthread_mutex_unlock(&w->mu);
out:
    em_buf_free(&b);
    em_free(d.segs);
    if (!rc && w->ready && w->o.mode == WAL_BACKGROUND) {
        if (pthread_create(&w->bg, NULL, bg_main, w) == 0)
            w->bg_on = 1;
        else
            rc = -EAGAIN;
    }
    return rc;
}

/* ---- writer ------------------------------------------------------------ */

static void fail_locked(wal *w, int rc, const char *what)
{
    if (!w->err) {
        w->err = rc;
        char p[WAL_PATH_MAX];
        wal_seg_path(w, w->seg_no, p);
        wal_seterr(w, "%s: %s failed: %s; the log takes no more writes", p, what, em_strerror(rc));
    }
    pthread_cond_broadcast(&w->cv);
}

static int write_all_locked(wal *w, const uint8_t *p, size_t n)
{
    while (n) {
        int64_t r = w->ops->pwrite(w->ops->ctx, w->fd, p, n, w->seg_off);
        if (r <= 0)
            return r < 0 ? (int)r : -EIO;
        /* A short write advances: the kernel took those bytes.  A later
         * failure leaves them as a torn tail that recovery cuts. */
        w->seg_off += (uint64_t)r;
        w->st.bytes += (uint64_t)r;
        p += r;
        n -= (size_t)r;
    }
    return 0;
}

static int seg_create_locked(wal *w, uint64_t no)
{
    char path[WAL_PATH_MAX];
    uint8_t h[WAL_SEG_HDR];
    int fd, rc;
    wal_seg_path(w, no, path);
    if ((rc = w->ops->open(w->ops->ctx, path, WAL_O_WRITE | WAL_O_CREATE | WAL_O_TRUNC, &fd)))
        return rc;
    w->fd = fd;
    w->seg_no = no;
    w->seg_off = 0;
    w->st.segment = no;
    w->seg_first = w->next_lsn;
    seg_hdr_build(h, no, w->next_lsn);
    /* The header and the directory entry are durable before any record goes
     * in, so a crash never leaves records in a file recovery cannot find. */
    rc = write_all_locked(w, h, sizeof h);
    if (!rc)
        rc = w->ops->fsync(w->ops->ctx, fd);
    if (!rc)
        rc = w->ops->syncdir(w->ops->ctx, w->dir);
    return rc;
}

static int write_pending_locked(wal *w, size_t n)
{
    if (!n)
        return 0;
    int rc = write_all_locked(w, w->pend.p, n);
    if (rc)
        return rc;
    memmove(w->pend.p, w->pend.p + n, w->pend.len - n);
    w->pend.len -= n;
    return 0;
}

/* sync_upto_locked: group commit.  Whoever finds no fsync running becomes
 * the leader, fsyncs everything written so far outside the lock, and wakes
 * the followers whose records that covered. */
static int sync_upto_locked(wal *w, uint64_t lsn)
{
    while (w->synced_lsn < lsn) {
        if (w->err)
            return EM_IO;
        if (w->syncing) {
            pthread_cond_wait(&w->cv, &w->mu);
            continue;
        }
        w->syncing = 1;
        uint64_t target = w->written_lsn;
        int fd = w->fd;
        pthread_mutex_unlock(&w->mu);
        int rc = w->ops->fsync(w->ops->ctx, fd);
        pthread_mutex_lock(&w->mu);
        w->syncing = 0;
        w->st.fsyncs++;
        if (rc) {
            fail_locked(w, rc, "fsync");
            return rc;
        }
        if (target > w->synced_lsn)
            w->synced_lsn = target;
        pthread_cond_broadcast(&w->cv);
    }
    return 0;
}

/* The last record each thread appended under deferred_sync, for
 * wal_commit_wait. */
static _Thread_local wal *tl_wal;
static _Thread_local uint64_t tl_lsn;

static int buffered(const wal *w) { return w->o.mode == WAL_BACKGROUND || w->o.mode == WAL_NONE; }

int wal_roll_locked(wal *w)
{
    int rc = 0;
    while (w->syncing)      /* the leader's fd must stay open until it is done */
        pthread_cond_wait(&w->cv, &w->mu);
    if (w->err)
        return EM_READONLY;
    /* The new header says its first record is next_lsn, so every record
     * with a lower LSN must be in this segment first.  Buffered appends
     * made while the lock was released (the wait above, a caller's fsync)
     * are still pending: left there they would open the next segment below
     * its header's LSN, and recovery would refuse the log. */
    if (buffered(w) && w->pend.len) {
        if ((rc = write_pending_locked(w, w->pend.len))) {
            fail_locked(w, rc, "write");
            return rc;
        }
        w->written_lsn = w->next_lsn - 1;
    }
    rc = w->ops->fsync(w->ops->ctx, w->fd);
    w->st.fsyncs++;
    if (rc) {
        fail_locked(w, rc, "fsync");
        return rc;
    }
    w->synced_lsn = w->written_lsn;
    pthread_cond_broadcast(&w->cv);
    w->ops->close(w->ops->ctx, w->fd);
    w->fd = -1;
    if ((rc = seg_create_locked(w, w->seg_no + 1)))
        fail_locked(w, rc, "creating the next segment");
    return rc;
}

int wal_flush_locked(wal *w)
{
    if (w->err)
        return EM_READONLY;
    if (buffered(w) && w->pend.len) {
        int rc = write_pending_locked(w, w->pend.len);
        if (rc) {
            fail_locked(w, rc, "write");
            return rc;
        }
        w->written_lsn = w->next_lsn - 1;
    }
    return sync_upto_locked(w, w->written_lsn);
}

int wal_append(wal *w, const st_update *u)
{
    int64_t ts = em_wall_ms();
    pthread_mutex_lock(&w->mu);
    if (!w->ready || w->err) {
        int rc = w->ready ? EM_READONLY : EM_INVAL;
        pthread_mutex_unlock(&w->mu);
        return rc;
    }
    int buf_mode = buffered(w);
    em_buf *b = buf_mode ? &w->pend : &w->enc;
retry:
    if (!buf_mode)
        em_buf_reset(b);
    size_t start = b->len, at;
    uint32_t txn = 1;
    int rc = wal_frame_begin(b, &at);
    if (!rc && u->kind == ST_UPD_TX)
        rc = wal_encode_tx(b, u, ts, w->store ? wal_skip_cache : NULL, w->store, &txn);
    else if (!rc)
        rc = wal_encode_update(b, u, ts);
    if (!rc && b->len - at - WAL_FRAME_HDR > WAL_MAX_BODY)
        rc = EM_TOOBIG;
    if (rc || !txn) {               /* !txn: a transaction of in-memory caches only */
        b->len = start;
        pthread_mutex_unlock(&w->mu);
        return rc;
    }
    uint64_t lsn = w->next_lsn;
    wal_frame_end(b, at, u->kind == ST_UPD_TX ? WAL_REC_TX : WAL_REC_UPDATE, lsn);
    size_t rec = b->len - start;
    uint64_t logical = w->seg_off + (buf_mode ? start : 0);
    if (logical + rec > w->o.segment_bytes && logical > WAL_SEG_HDR) {
        if (w->syncing) {
            /* Rolling would wait for the running fsync and release the lock,
             * letting other appenders take LSNs in between: this record's
             * LSN would then repeat one and the new segment's header would
             * not match its first record (recovery refuses that log).  Drop
             * the encoding, wait for the fsync, and start over. */
            b->len = start;
            while (w->syncing)
                pthread_cond_wait(&w->cv, &w->mu);
            if (w->err) {
                pthread_mutex_unlock(&w->mu);
                return EM_READONLY;
            }
            goto retry;
        }
        /* The record starts the next segment; what is pending before it
         * finishes this one (the roll writes it).  The record is encoded
         * again after the roll, so pend holds only LSNs below next_lsn
         * while it runs. */
        b->len = start;
        if ((rc = wal_roll_locked(w))) {
            if (buf_mode)
                b->len = 0;
            pthread_mutex_unlock(&w->mu);
            return rc;
        }
        goto retry;
    }
    w->next_lsn++;
    w->st.appends++;
    if (buf_mode) {
        if (b->len >= WAL_PEND_FLUSH && (rc = write_pending_locked(w, b->len)) != 0)
            fail_locked(w, rc, "write");
        else if (b->len == 0)
            w->written_lsn = lsn;
        pthread_mutex_unlock(&w->mu);
        return rc;
    }
    if ((rc = write_all_locked(w, b->p, b->len))) {
        fail_locked(w, rc, "write");
        pthread_mutex_unlock(&w->mu);
        return rc;
    }
    w->written_lsn = lsn;
    if (w->o.mode == WAL_FSYNC && w->o.deferred_sync) {
        tl_wal = w;
        tl_lsn = lsn;
    } else if (w->o.mode == WAL_FSYNC) {
        rc = sync_upto_locked(w, lsn);
    }
    pthread_mutex_unlock(&w->mu);
    return rc;
}

int wal_commit_wait(wal *w)
{
    if (tl_wal != w || !tl_lsn)
        return 0;
    pthread_mutex_lock(&w->mu);
    /* an LSN above anything written is left from an earlier log that lived
     * at the same address: nothing of this log is waiting */
    uint64_t lsn = tl_lsn <= w->written_lsn ? tl_lsn : 0;
    int rc = lsn ? sync_upto_locked(w, lsn) : 0;
    pthread_mutex_unlock(&w->mu);
    /* Reported once, to the pass whose writes waited: after a failure the
     * log takes no more appends, so later passes have nothing waiting and
     * their replies (reads, memory-only regions, EM_READONLY errors) go. */
    tl_lsn = 0;
    return rc;
}

int wal_flush(wal *w)
{
    pthread_mutex_lock(&w->mu);
    int rc = w->ready ? wal_flush_locked(w) : EM_INVAL;
    pthread_mutex_unlock(&w->mu);
    return rc;
}

static void deadline_after(struct timespec *ts, uint32_t ms)
{
    clock_gettime(CLOCK_MONOTONIC, ts);
    ts->tv_sec += ms / 1000;
    ts->tv_nsec += (long)(ms % 1000) * 1000000L;
    if (ts->tv_nsec >= 1000000000L) {
        ts->tv_sec++;
        ts->tv_nsec -= 1000000000L;
    }
}

static void *bg_main(void *arg)
{
    wal *w = arg;
    pthread_setname_np(pthread_self(), "em-wal");
    pthread_mutex_lock(&w->mu);
    while (!w->closing) {
        struct timespec ts;
        deadline_after(&ts, w->o.flush_ms);
        while (!w->closing && pthread_cond_timedwait(&w->tick, &w->mu, &ts) == 0)
            ;
        if (w->closing || w->err)
            continue;
        wal_flush_locked(w);    /* a failure is sticky: appends report it */
    }
    pthread_mutex_unlock(&w->mu);
    return NULL;
}

static void *ck_main(void *arg)
{
    wal *w = arg;
    pthread_setname_np(pthread_self(), "em-checkpoint");
    pthread_mutex_lock(&w->mu);
    while (!w->closing) {
        /* Every checkpoint_ms, and whenever one is asked for (with
         * periodic checkpoints off too: only then). */
        struct timespec ts;
        deadline_after(&ts, w->o.checkpoint_ms ? w->o.checkpoint_ms : 3600u * 1000u);
        while (!w->closing && !w->ck_req &&
               pthread_cond_timedwait(&w->tick, &w->mu, &ts) == 0)
            ;
        int asked = w->ck_req;
        w->ck_req = 0;
        if (w->closing || w->err || (!w->o.checkpoint_ms && !asked))
            continue;
        pthread_mutex_unlock(&w->mu);
        w->ck_fn(w);            /* a failed checkpoint leaves the log as it was */
        pthread_mutex_lock(&w->mu);
    }
    pthread_mutex_unlock(&w->mu);
    return NULL;
}

void wal_start_checkpointer(wal *w)
{
    if (w->ck_fn && !w->ck_on && pthread_create(&w->ck, NULL, ck_main, w) == 0)
        w->ck_on = 1;
}

void wal_checkpoint_soon(wal *w)
{
    pthread_mutex_lock(&w->mu);
    w->ck_req = 1;
    pthread_cond_broadcast(&w->tick);
    pthread_mutex_unlock(&w->mu);
}

int wal_close(wal *w)
{
    if (!w)
        return 0;
    pthread_mutex_lock(&w->mu);
    w->closing = 1;
    pthread_cond_broadcast(&w->tick);
    pthread_mutex_unlock(&w->mu);
    if (w->ck_on)
        pthread_join(w->ck, NULL);
    if (w->bg_on)
        pthread_join(w->bg, NULL);
    if (w->detach)
        w->detach(w);
    int rc = 0;
    pthread_mutex_lock(&w->mu);
    if (w->ready) {
        /* Every mode, NONE included, is complete after a graceful close. */
        rc = wal_flush_locked(w);
        if (rc == EM_READONLY)
            rc = w->err;
    }
    if (w->fd >= 0)
        w->ops->close(w->ops->ctx, w->fd);
    pthread_mutex_unlock(&w->mu);
    em_buf_free(&w->enc);
    em_buf_free(&w->pend);
    pthread_cond_destroy(&w->cv);
    pthread_cond_destroy(&w->tick);
    pthread_mutex_destroy(&w->mu);
    pthread_mutex_destroy(&w->ckmu);
    em_free(w->dir);
    em_free(w);
    return rc;
}

int wal_error(const wal *w)
{
    wal *m = (wal *)(uintptr_t)w;     /* the lock, not the log, changes */
    pthread_mutex_lock(&m->mu);
    int err = m->err;
    pthread_mutex_unlock(&m->mu);
    return err;
}
const char *wal_errmsg(const wal *w) { return w->msg; }
const char *wal_warnmsg(const wal *w) { return w->warn; }

int wal_repair(wal *w, uint64_t *fixed)
{
    *fixed = 0;
    if (w->o.read_only || w->ready)
        return EM_INVAL;
    /* Read-only replays (no torn tail is cut, no writer starts): one that
     * only checks, so a log recovery refuses is left as it is, then one
     * that rewrites headers as it finds them. */
    w->o.read_only = 1;
    w->repaired = 0;
    int rc = wal_replay(w, NULL, NULL);
    w->repair = 1;
    if (!rc && w->st.mislabeled)
        rc = wal_replay(w, NULL, NULL);
    w->o.read_only = 0;
    w->repair = 0;
    *fixed = w->repaired;
    return rc;
}

void wal_stats_get(wal *w, wal_stats *out)
{
    pthread_mutex_lock(&w->mu);
    *out = w->st;
    out->next_lsn = w->next_lsn;
    pthread_mutex_unlock(&w->mu);
}
