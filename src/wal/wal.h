/* wal.h - ember's write-ahead log: the update record codec (BENCHMARKS.md
 * §M4), record framing, segment files, WAL modes with group commit, crash
 * recovery and checkpoints (DESIGN.md §6).  Byte layouts: the update command
 * in wal_codec.c, frames/segments in wal.c, checkpoint files in wal_ckpt.c.
 * All file I/O goes through one wal_fileops table (wal_file.c) so tests can
 * drop unsynced bytes, tear writes and inject EIO/ENOSPC.
 */
#ifndef EM_WAL_H
#define EM_WAL_H

#include <stddef.h>
#include <stdint.h>

#include "store/store.h"
#include "util/buf.h"

/* ---------------------------------------------------------------------------
 * Update command codec (one encoding of a write: WAL, replicas, recovery).
 * ------------------------------------------------------------------------- */

typedef struct wal_uuid { uint64_t msb, lsb; } wal_uuid;

/* One row of a command.  In a decoded command, payload points into the
 * decoded bytes (valid as long as they are). */
typedef struct wal_row {
    wal_uuid       id;              /* row id */
    int64_t        timestamp;       /* hybrid timestamp of the row */
    int32_t        schema_version;
    const uint8_t *payload;
    uint32_t       len;
} wal_row;

/* An update command.  op is an st_update_kind (1..5).  A "single" command
 * carries exactly one row (the command's row id is rows[0].id); update_all
 * carries nrows rows keyed by their UUIDs.  CLEAR/CACHE_DESTROY carry none. */
typedef struct wal_cmd {
    uint8_t     op;
    uint8_t     update_all;
    wal_uuid    tx_id;
    int64_t     lease_start;        /* lease start time */
    int64_t     safe_time;
    int32_t     catalog_version;    /* required catalog version */
    int32_t     table_id;           /* ember: cache id */
    int32_t     partition;
    const char *coord;              /* coordinator id, coord_len bytes, no NUL needed */
    uint32_t    coord_len;
    uint32_t    nrows;
    const wal_row *rows;            /* marshal input: nrows rows */
    const uint8_t *rows_p;          /* unmarshal output: the row headers, */
    size_t         rows_len;        /*   read with wal_cmd_next_row, */
    const uint8_t *pay_p;           /*   and the payloads after them */
} wal_cmd;

/* Position in a decoded command's rows; start with {0, 0}. */
typedef struct wal_row_iter { size_t hdr, pay; } wal_row_iter;

#define WAL_MAX_ROWS (1u << 24)

/* wal_cmd_marshal appends the encoding of c to out (reuse out across calls:
 * a steady-state marshal allocates nothing).  0 or EM_NOMEM/EM_INVAL. */
int wal_cmd_marshal(em_buf *out, const wal_cmd *c);

/* wal_cmd_unmarshal validates p[0..n) completely and fills c as a view over
 * those bytes (no copies, no allocation).  EM_TRUNCATED, EM_BADLEN,
 * EM_BADTYPE or EM_TRAILING on malformed input. */
int wal_cmd_unmarshal(const uint8_t *p, size_t n, wal_cmd *c);

/* wal_cmd_next_row reads the row at *it of a command returned by
 * wal_cmd_unmarshal; returns 1 and advances *it, or 0 after the last. */
int wal_cmd_next_row(const wal_cmd *c, wal_row_iter *it, wal_row *row);

/* wal_encode_update appends the command for one st_update (ts = row
 * timestamp, wall ms).  Row payload layout is in wal_codec.c. */
int wal_encode_update(em_buf *out, const st_update *u, int64_t ts);

/* wal_decode_update turns a decoded command back into an st_update.  For
 * CACHE_CREATE, *cfg receives a view: its strings and byte arrays point into
 * the record bytes (no allocation; do not free them) and u->cfg = cfg.
 * Only single commands (nrows <= 1) map to one st_update. */
int wal_decode_update(const wal_cmd *c, st_update *u, st_cache_config *cfg);

/* wal_encode_tx appends a WAL_REC_TX body for an ST_UPD_TX update; updates
 * of caches skip() says are not logged (in-memory regions) are left out
 * (skip NULL = none); *count = updates written (0: nothing to log). */
int wal_encode_tx(em_buf *out, const st_update *u, int64_t ts,
                  int (*skip)(void *arg, int32_t cache_id), void *arg, uint32_t *count);

/* ---------------------------------------------------------------------------
 * Framing: every record on disk is HEADER + body (layout in wal.c).
 * ------------------------------------------------------------------------- */

#define WAL_FRAME_MAGIC   0x52574d45u   /* "EMWR" */
#define WAL_FRAME_VERSION 1
#define WAL_FRAME_HDR     24
#define WAL_MAX_BODY      (64u << 20)
/* WAL_REC_TX: a committed transaction (st_tx_commit), one frame so its CRC
 * covers every update: body = u32 count, then count x (u32 length, update
 * command as WAL_REC_UPDATE carries it).  Recovery applies all or none. */
enum { WAL_REC_UPDATE = 1, WAL_REC_END = 2, WAL_REC_TX = 3 };

typedef struct wal_frame {
    uint16_t type;
    uint64_t lsn;
    const uint8_t *body;
    uint32_t body_len;
    uint32_t total;                  /* header + body */
} wal_frame;

/* wal_frame_begin reserves a header in b and returns its offset; append the
 * body, then wal_frame_end fills the header (length, LSN, CRC32C). */
int  wal_frame_begin(em_buf *b, size_t *at);
void wal_frame_end(em_buf *b, size_t at, uint16_t type, uint64_t lsn);

/* wal_frame_parse: 0 and *f for a whole valid frame at p; EM_AGAIN if n is
 * too short for the frame its header announces (a torn tail, or read more);
 * EM_CORRUPT for a bad magic, version, length or checksum. */
int  wal_frame_parse(const uint8_t *p, size_t n, wal_frame *f);

/* ---------------------------------------------------------------------------
 * File operations table.  Every WAL/checkpoint byte goes through one of these.
 * Functions return 0 (or a byte count) or -errno.
 * ------------------------------------------------------------------------- */

enum { WAL_O_READ = 0, WAL_O_WRITE = 1, WAL_O_CREATE = 2, WAL_O_TRUNC = 4 };

typedef struct wal_fileops {
    void *ctx;
    int     (*open)(void *ctx, const char *path, int flags, int *fd);
    int     (*close)(void *ctx, int fd);
    /* pread/pwrite return bytes transferred (possibly short) or -errno */
    int64_t (*pread)(void *ctx, int fd, void *p, size_t n, uint64_t off);
    int64_t (*pwrite)(void *ctx, int fd, const void *p, size_t n, uint64_t off);
    int     (*fsync)(void *ctx, int fd);
    int     (*ftruncate)(void *ctx, int fd, uint64_t size);
    int     (*size)(void *ctx, int fd, uint64_t *size);
    int     (*rename)(void *ctx, const char *from, const char *to);
    int     (*unlink)(void *ctx, const char *path);
    int     (*mkdir)(void *ctx, const char *path);      /* 0 if it exists */
    int     (*syncdir)(void *ctx, const char *path);    /* makes entries durable */
    /* list calls fn for each file name (no path) in dir */
    int     (*list)(void *ctx, const char *dir, void (*fn)(void *arg, const char *name), void *arg);
} wal_fileops;

/* wal_posix_ops: the real file system. */
const wal_fileops *wal_posix_ops(void);

/* In-memory file system for tests (wal_file.c).  Keeps per file the bytes
 * written and the bytes made durable by fsync, and per directory the names
 * made durable by syncdir, so wal_memfs_crash can model a power loss.
 * Faults: the nth pwrite/fsync from now fails with err (torn: a pwrite first
 * writes half its bytes); sticky keeps failing. */
typedef struct wal_memfs wal_memfs;
int  wal_memfs_new(wal_memfs **out);
void wal_memfs_free(wal_memfs *fs);
const wal_fileops *wal_memfs_ops(wal_memfs *fs);
enum { WAL_FAULT_WRITE = 1, WAL_FAULT_FSYNC = 2 };
void wal_memfs_fault(wal_memfs *fs, int what, uint64_t nth, int err, int torn, int sticky);
/* wal_memfs_crash returns a new file system holding what a power loss would
 * leave: durable names, durable bytes, plus keep_unsynced (0..1: fraction;
 * negative = random per file from seed) of each file's unsynced suffix. */
int  wal_memfs_crash(wal_memfs *fs, double keep_unsynced, uint64_t seed, wal_memfs **out);
/* Direct access for corruption tests: the file's current bytes. */
int  wal_memfs_file(wal_memfs *fs, const char *path, uint8_t **p, size_t *len);
int  wal_memfs_set_len(wal_memfs *fs, const char *path, size_t len);
uint64_t wal_memfs_fsyncs(wal_memfs *fs);
/* wal_memfs_slow_fsync makes every fsync take us microseconds (set it before
 * threads use fs), so group-commit tests see fsyncs overlap. */
void wal_memfs_slow_fsync(wal_memfs *fs, uint32_t us);

/* ---------------------------------------------------------------------------
 * The log.
 * ------------------------------------------------------------------------- */

/* Ignite's WAL modes and promises (reliability.md §2.5). */
typedef enum wal_mode {
    WAL_FSYNC = 0,       /* ack after fsync; concurrent writers share one fsync */
    WAL_LOG_ONLY = 1,    /* ack after write(2): survives a process crash */
    WAL_BACKGROUND = 2,  /* ack after buffering; a thread writes+fsyncs every flush_ms */
    WAL_NONE = 3         /* buffered; written when the buffer fills, at checkpoints, at close */
} wal_mode;

typedef struct wal_options {
    const char *dir;             /* created if missing */
    wal_mode    mode;
    uint64_t    segment_bytes;   /* roll to a new segment past this; 0 = 64 MiB */
    uint32_t    flush_ms;        /* BACKGROUND flush period; 0 = 2000 (Ignite's walFlushFrequency) */
    uint32_t    checkpoint_ms;   /* periodic checkpoints after wal_attach; 0 = none */
    int         read_only;       /* wal_replay only reads: no truncation, no writer */
    int         deferred_sync;   /* FSYNC only: wal_append returns after write(2) and the
                                    caller waits with wal_commit_wait (see there) */
    const wal_fileops *ops;      /* NULL = wal_posix_ops() */
} wal_options;

typedef struct wal wal;

/* wal_mode_parse: "FSYNC", "LOG_ONLY", "BACKGROUND", "NONE" (any case). */
int         wal_mode_parse(const char *s, wal_mode *out);
const char *wal_mode_name(wal_mode m);

/* wal_open prepares a log in o->dir (copies the options; o->dir is copied).
 * Nothing is read until wal_replay/wal_recover. */
int  wal_open(wal **out, const wal_options *o);

/* wal_replay loads the newest checkpoint and replays the WAL after it through
 * fn, in LSN order.  A torn tail (the last records of the last segment fail
 * their checks and nothing valid follows) is cut off; corruption followed by
 * valid records, or in a non-last segment or a checkpoint, returns EM_CORRUPT
 * and wal_errmsg names the file and offset.  A segment whose header's first
 * LSN disagrees with its records is read by the records where that keeps
 * the log whole (wal_warnmsg).  On success (not read-only) the
 * log is ready to append - unless the disk refused to let it start (ENOSPC,
 * EDQUOT, EIO or EROFS while cutting a torn tail or creating the next
 * segment): then replay still succeeds, everything is recovered, and the
 * log is failed as by a write error while running (wal_error, wal_errmsg;
 * appends return EM_READONLY).  fn errors stop the replay and are returned. */
typedef int (*wal_apply_fn)(void *arg, const st_update *u);
int  wal_replay(wal *w, wal_apply_fn fn, void *arg);

/* wal_recover = wal_replay through st_apply into s (wal_store.c), which
 * is wal_recover_apply (arg: the store) for a caller's own replay. */
int  wal_recover(wal *w, st_store *s);
int  wal_recover_apply(void *store, const st_update *u);

/* wal_attach registers the log as s's write observer, so every update is
 * logged before it is acknowledged, and starts the checkpointing thread
 * (periodic checkpoints if configured, else on request).  Call after wal_recover; detached again by wal_close. */
int  wal_attach(wal *w, st_store *s);

/* wal_append logs one update under the mode's promise (the observer calls
 * it).  After any write or fsync failure the log is failed: the failing call
 * returns -errno (or EM_IO for writers sharing the failed fsync) and every
 * later append returns EM_READONLY. */
int  wal_append(wal *w, const st_update *u);

/* wal_commit_wait: with deferred_sync, waits until every record the calling
 * thread appended is on disk (group commit: one fsync covers all threads'
 * records written meanwhile).  A server calls it once per event-loop pass,
 * before sending the replies of the writes it ran, so a worker thread never
 * blocks in the store's observer (which runs under a partition lock) and
 * one fsync acknowledges every client served in that pass.  Trade-off: the
 * write is visible to readers before it is durable; if the fsync fails the
 * log is failed and the write is never acknowledged.  Returns 0, or the
 * fsync error / EM_IO / EM_READONLY.  Without deferred_sync (or in another
 * mode) it returns 0 at once. */
int  wal_commit_wait(wal *w);

/* wal_flush writes and fsyncs everything appended so far. */
int  wal_flush(wal *w);

/* Checkpoints.  wal_checkpoint snapshots every cache of s (configs, entries)
 * while writers continue: it starts a new segment S, scans the caches, writes
 * ckpt-S, fsyncs, renames it into place, then deletes the segments before S.
 * wal_checkpoint_run is the same with the snapshot produced by fill, which
 * calls wal_ckpt_put for each CACHE_CREATE and PUT (tests, tools). */
typedef struct wal_ckpt_writer wal_ckpt_writer;
int  wal_ckpt_put(wal_ckpt_writer *cw, const st_update *u);
int  wal_checkpoint_run(wal *w, int (*fill)(void *arg, wal_ckpt_writer *cw), void *arg);
int  wal_checkpoint(wal *w, st_store *s);
/* wal_checkpoint_soon asks the checkpointing thread of an attached log for
 * a checkpoint now, periodic checkpoints on or off (wal_stats: ckpt_started
 * and checkpoints say when it began and completed). */
void wal_checkpoint_soon(wal *w);

/* wal_close flushes (per mode), detaches from the store, stops threads and
 * frees w.  Returns the flush result or the log's sticky error.  Stop the
 * store's writers first (an operation already past the observer check may
 * still call into w), and close the log before st_close. */
int  wal_close(wal *w);

/* wal_error: 0 or the first write/fsync error; wal_errmsg: a message for the
 * last failure of wal_replay or the writer ("" if none).  Valid until w is
 * closed. */
int         wal_error(const wal *w);
const char *wal_errmsg(const wal *w);

/* wal_warnmsg: "" or the last thing the last wal_replay accepted that an
 * operator should hear about (wal_stats.mislabeled counts them): a segment
 * whose header's first LSN disagreed with its records, read by the records'
 * LSNs (logs written by BACKGROUND/NONE before the roll kept LSN order
 * across checkpoints).  The caller logs it; valid until w is closed. */
const char *wal_warnmsg(const wal *w);

/* wal_repair rewrites in place the header of every segment wal_replay would
 * read by its records' LSNs, so it names them - and before it, when its
 * records start below the checkpoint's LSN, the header of the checkpoint
 * that names it - each one write of 32/40 bytes, fsynced.  Nothing else is
 * written (a torn tail stays for recovery to cut), and nothing at all if
 * recovery would refuse the log.  For tools, on a log no
 * server is using; w opened with read_only = 0 and not yet replayed.
 * *fixed counts the files rewritten.  0, or what wal_replay would return. */
int wal_repair(wal *w, uint64_t *fixed);

typedef struct wal_stats {
    uint64_t next_lsn;        /* LSN the next record gets */
    uint64_t appends, fsyncs, bytes, segment, checkpoints;
    uint64_t ckpt_started;    /* checkpoints begun (checkpoints: completed) */
    uint64_t replayed;        /* records applied by the last replay (ckpt + WAL) */
    uint64_t cut_bytes;       /* bytes cut from a torn tail by the last replay */
    uint64_t mislabeled;      /* segments the last replay read by their records' LSNs,
                                 not their header's (wal_warnmsg) */
} wal_stats;
void wal_stats_get(wal *w, wal_stats *out);

/* File names: segments "wal-%016llx.seg", checkpoints "ckpt-%016llx.ckpt". */
int  wal_name_parse(const char *name, int *is_ckpt, uint64_t *no);

/* ---------------------------------------------------------------------------
 * Readers for tools (ember-wal) and the fuzz target.
 * ------------------------------------------------------------------------- */

#define WAL_SEG_MAGIC  0x53574d45u   /* "EMWS" */
#define WAL_SEG_HDR    32
#define WAL_CKPT_MAGIC 0x4b434d45u   /* "EMCK" */
#define WAL_CKPT_HDR   40

typedef struct wal_seg_hdr { uint64_t seg_no, first_lsn; } wal_seg_hdr;
typedef struct wal_ckpt_hdr { uint64_t seg_no, first_lsn; int64_t wall_ms; } wal_ckpt_hdr;
int wal_seg_hdr_parse(const uint8_t *p, size_t n, wal_seg_hdr *h);
int wal_ckpt_hdr_parse(const uint8_t *p, size_t n, wal_ckpt_hdr *h);

/* wal_scan walks the frames of one file image from offset start, calling fn
 * for each valid frame (fn may be NULL; a nonzero return stops the walk).
 * It reports where valid data ends and what follows it:
 *   WAL_SCAN_CLEAN  every byte is a valid frame;
 *   WAL_SCAN_TORN   invalid bytes at end_off and no valid frame after them;
 *   WAL_SCAN_CORRUPT invalid frame at end_off followed by a valid one at next_off.
 * expect_lsn != 0 also requires consecutive LSNs from it (a jump = CORRUPT). */
enum { WAL_SCAN_CLEAN = 0, WAL_SCAN_TORN = 1, WAL_SCAN_CORRUPT = 2 };
typedef struct wal_scan_res {
    int      state;
    size_t   end_off, next_off;
    uint64_t frames, last_lsn;
    int      fn_rc;
} wal_scan_res;
int wal_scan(const uint8_t *p, size_t n, size_t start, uint64_t expect_lsn,
             int (*fn)(void *arg, size_t off, const wal_frame *f), void *arg,
             wal_scan_res *r);

/* wal_read_file reads a whole file through ops into b (reset first). */
int wal_read_file(const wal_fileops *ops, const char *path, em_buf *b);

#endif
