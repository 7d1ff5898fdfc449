/* test_wal_relabel.c - recovery of segments whose header's first LSN
 * disagrees with their records, as BACKGROUND/NONE logs written before the
 * roll kept LSN order across checkpoints left them on disks: the checkpoint
 * and segment S's header name LSN H while S's records start lower (the
 * records appended during the checkpoint's fsync).  Such a segment is read
 * by its records' LSNs with a warning where that keeps the log whole;
 * anything else that disagrees is still corruption.  Layouts: src/wal/wal.c
 * (segment header: first LSN at offset 16, CRC32C of [0, 24) at 24),
 * wal_ckpt.c (first LSN at 16, CRC32C of [0, 32) at 32). */
#include "test.h"
#include "wal_env.h"

#include "store/store.h"
#include "util/err.h"
#include "util/hash.h"
#include "util/mem.h"
#include "wal/wal.h"

#include <stdio.h>

#define SEG(n) WE_DIR "/wal-000000000000000" #n ".seg"
#define CKPT(n) WE_DIR "/ckpt-000000000000000" #n ".ckpt"

static size_t ikey(uint8_t *b, int32_t v) { b[0] = 3; em_st32(b + 1, (uint32_t)v); return 5; }
static size_t sval(uint8_t *b, int32_t k, int32_t gen)
{
    int n = snprintf((char *)b + 5, 48, "value-%d-%d", k, gen);
    b[0] = 9;
    em_st32(b + 1, (uint32_t)n);
    return 5 + (size_t)n;
}

/* relabel rewrites the first-LSN field of a segment (crc_end 24) or
 * checkpoint (crc_end 32) header, with its checksum. */
static int relabel(wal_memfs *fs, const char *path, size_t crc_end, uint64_t first)
{
    uint8_t *p;
    size_t n;
    int rc = wal_memfs_file(fs, path, &p, &n);
    if (rc || n < crc_end + 4)
        return rc ? rc : EM_TRUNCATED;
    em_st64(p + 16, first);
    em_st32(p + crc_end, em_crc32c(0, p, crc_end));
    return 0;
}

static int open_log(wal_memfs *fs, st_store *s, wal **w)
{
    wal_options o;
    memset(&o, 0, sizeof o);
    o.mode = WAL_LOG_ONLY;
    return we_open(fs, &o, s, w);
}

static void cfg_init(st_cache_config *cfg)
{
    st_cache_config_init(cfg);
    cfg->name = (char *)"lab";
    cfg->partitions = 4;
}

/* The damage the bug left, made with the real writer and then relabelled:
 * records 1..11 in segment 0, a checkpoint naming segment 1 LSN 12, records
 * 12..22 in segment 1; then the checkpoint and segment 1's header are made
 * to name LSN 15, so 12..14 look like the checkpoint's fsync window. */
TEST(wal_relabel_checkpoint_segment_read_by_its_records)
{
    wal_memfs *fs;
    REQUIRE_OK(wal_memfs_new(&fs));
    st_store *a = we_new_store(), *b = we_new_store();
    REQUIRE(a && b);
    wal *w;
    REQUIRE_OK(open_log(fs, a, &w));
    st_cache_config cfg;
    cfg_init(&cfg);
    st_cache *c = NULL;
    REQUIRE_OK(st_cache_create(a, &cfg, &c));
    uint8_t kb[5], vb[64];
    for (int32_t k = 0; k < 10; k++)
        CHECK_OK(st_put(c, NULL, kb, ikey(kb, k), vb, sval(vb, k, 1)));
    REQUIRE_OK(wal_checkpoint(w, a));
    for (int32_t k = 5; k < 16; k++)     /* 12..14 overwrite keys the snapshot has */
        CHECK_OK(st_put(c, NULL, kb, ikey(kb, k), vb, sval(vb, k, 2)));
    REQUIRE_OK(wal_close(w));
    REQUIRE_OK(relabel(fs, SEG(1), 24, 15));
    REQUIRE_OK(relabel(fs, CKPT(1), 32, 15));

    REQUIRE_OK(open_log(fs, b, &w));
    wal_stats st;
    wal_stats_get(w, &st);
    CHECK_EQ(st.mislabeled, 1);
    CHECK_EQ(st.next_lsn, 23);
    const char *m = wal_warnmsg(w);
    CHECK(strstr(m, SEG(1)) != NULL);
    CHECK(strstr(m, "header says first LSN 15 but its records start at LSN 12 (offset 32)") != NULL);
    if (!strstr(m, "LSN 12 (offset 32)"))
        printf("    warning: %s\n", m);
    st_cache *r = st_cache_find(b, st_cache_id(c));
    REQUIRE(r);
    em_buf v = EM_BUF_INIT;
    for (int32_t k = 0; k < 17; k++) {
        int found = -1;
        em_buf_reset(&v);
        CHECK_OK(st_get(r, NULL, kb, ikey(kb, k), &v, &found));
        size_t n = sval(vb, k, k < 5 ? 1 : 2);
        CHECK(k == 16 ? !found : found && v.len == n && memcmp(v.p, vb, n) == 0);
    }
    em_buf_free(&v);
    /* the log goes on from the records' LSNs, and opens again */
    CHECK_OK(st_put(r, NULL, kb, ikey(kb, 99), vb, sval(vb, 99, 3)));
    REQUIRE_OK(wal_close(w));
    st_close(b);
    b = we_new_store();
    REQUIRE(b);
    REQUIRE_OK(open_log(fs, b, &w));
    wal_stats_get(w, &st);
    CHECK_EQ(st.next_lsn, 24);
    CHECK(st_cache_find(b, st_cache_id(c)) != NULL);
    wal_close(w);
    st_close(a);
    st_close(b);
    wal_memfs_free(fs);
}

/* ---- hand-made segments ------------------------------------------------- */

/* mkseg writes segment no with a header naming hdr_first and n records with
 * LSNs from rec_first: the cache's CACHE_CREATE if rec_first is 1, then
 * PUTs of keys rec_first.. */
static int mkseg(wal_memfs *fs, uint64_t no, uint64_t hdr_first, uint64_t rec_first, int n)
{
    em_buf b = EM_BUF_INIT;
    int rc = em_buf_reserve(&b, WAL_SEG_HDR);
    if (rc)
        return rc;
    memset(b.p, 0, WAL_SEG_HDR);
    em_st32(b.p, WAL_SEG_MAGIC);
    em_st16(b.p + 4, 1);
    em_st64(b.p + 8, no);
    em_st64(b.p + 16, hdr_first);
    em_st32(b.p + 24, em_crc32c(0, b.p, 24));
    b.len = WAL_SEG_HDR;
    st_cache_config cfg;
    cfg_init(&cfg);
    for (int i = 0; i < n && !rc; i++) {
        uint64_t lsn = rec_first + (uint64_t)i;
        uint8_t kb[5], vb[64];
        st_update u;
        memset(&u, 0, sizeof u);
        u.cache_id = em_hash_java_str((const uint8_t *)"lab", 3);
        if (lsn == 1) {
            u.kind = ST_UPD_CACHE_CREATE;
            u.cfg = &cfg;
        } else {
            u.kind = ST_UPD_PUT;
            u.key = kb;
            u.klen = (uint32_t)ikey(kb, (int32_t)lsn);
            u.val = vb;
            u.vlen = (uint32_t)sval(vb, (int32_t)lsn, 0);
        }
        size_t at;
        if (!(rc = wal_frame_begin(&b, &at)) && !(rc = wal_encode_update(&b, &u, 1)))
            wal_frame_end(&b, at, WAL_REC_UPDATE, lsn);
    }
    const wal_fileops *ops = wal_memfs_ops(fs);
    char path[64];
    snprintf(path, sizeof path, WE_DIR "/wal-%016" PRIx64 ".seg", no);
    int fd;
    if (!rc)
        rc = ops->mkdir(ops->ctx, WE_DIR);
    if (!rc && !(rc = ops->open(ops->ctx, path, WAL_O_WRITE | WAL_O_CREATE | WAL_O_TRUNC, &fd))) {
        int64_t wr = ops->pwrite(ops->ctx, fd, b.p, b.len, 0);
        rc = wr == (int64_t)b.len ? 0 : EM_IO;
        ops->close(ops->ctx, fd);
    }
    em_buf_free(&b);
    return rc;
}

/* replay_rc recovers fs into a fresh store: the result, the number of
 * segments read by their records, and the store's size of cache "lab". */
static int replay_rc(wal_memfs *fs, uint64_t *mislabeled, int64_t *size, uint64_t *next_lsn)
{
    st_store *s = we_new_store();
    if (!s)
        return EM_NOMEM;
    wal *w;
    int rc = open_log(fs, s, &w);
    *size = -1;
    if (!rc) {
        wal_stats st;
        wal_stats_get(w, &st);
        *mislabeled = st.mislabeled;
        *next_lsn = st.next_lsn;
        st_cache *c = st_cache_find(s, em_hash_java_str((const uint8_t *)"lab", 3));
        if (c)
            st_size(c, 0, size);
        wal_close(w);
    }
    st_close(s);
    return rc;
}

/* segment 1 continues segment 0's records but its header names 14 */
TEST(wal_relabel_header_ahead_of_continuing_records)
{
    wal_memfs *fs;
    REQUIRE_OK(wal_memfs_new(&fs));
    REQUIRE_OK(mkseg(fs, 0, 1, 1, 10));
    REQUIRE_OK(mkseg(fs, 1, 14, 11, 6));
    uint64_t mis = 0, next = 0;
    int64_t size;
    CHECK_OK(replay_rc(fs, &mis, &size, &next));
    CHECK_EQ(mis, 1);
    CHECK_EQ(size, 15);
    CHECK_EQ(next, 17);
    wal_memfs_free(fs);
}

/* the first segment of a log with no checkpoint: anything goes, by records */
TEST(wal_relabel_first_segment_read_by_its_records)
{
    wal_memfs *fs;
    REQUIRE_OK(wal_memfs_new(&fs));
    REQUIRE_OK(mkseg(fs, 0, 7, 1, 10));
    uint64_t mis = 0, next = 0;
    int64_t size;
    CHECK_OK(replay_rc(fs, &mis, &size, &next));
    CHECK_EQ(mis, 1);
    CHECK_EQ(size, 9);
    CHECK_EQ(next, 11);
    wal_memfs_free(fs);
}

/* a kill -9 before the window's records were written: the last segment is
 * empty and its header is ahead of the log; the log goes on where it ends */
TEST(wal_relabel_empty_last_segment_ahead)
{
    wal_memfs *fs;
    REQUIRE_OK(wal_memfs_new(&fs));
    REQUIRE_OK(mkseg(fs, 0, 1, 1, 10));
    REQUIRE_OK(mkseg(fs, 1, 14, 0, 0));
    uint64_t mis = 0, next = 0;
    int64_t size;
    CHECK_OK(replay_rc(fs, &mis, &size, &next));
    CHECK_EQ(mis, 1);
    CHECK_EQ(size, 9);
    CHECK_EQ(next, 11);
    CHECK_OK(replay_rc(fs, &mis, &size, &next));   /* and again, after the restart */
    CHECK_EQ(size, 9);
    wal_memfs_free(fs);
}

/* still corruption: records that skip LSNs, wherever the header points */
TEST(wal_relabel_gap_is_still_corrupt)
{
    wal_memfs *fs;
    REQUIRE_OK(wal_memfs_new(&fs));
    REQUIRE_OK(mkseg(fs, 0, 1, 1, 10));
    REQUIRE_OK(mkseg(fs, 1, 11, 14, 3));           /* header right, records 14.. */
    uint64_t mis = 0, next = 0;
    int64_t size;
    CHECK_EQ(replay_rc(fs, &mis, &size, &next), EM_CORRUPT);
    REQUIRE_OK(mkseg(fs, 1, 14, 14, 3));           /* header and records agree: 11..13 missing */
    CHECK_EQ(replay_rc(fs, &mis, &size, &next), EM_CORRUPT);
    REQUIRE_OK(mkseg(fs, 1, 9, 9, 3));             /* overlapping segment 0 */
    CHECK_EQ(replay_rc(fs, &mis, &size, &next), EM_CORRUPT);
    REQUIRE_OK(mkseg(fs, 1, 11, 0, 0));            /* a middle segment that is empty */
    REQUIRE_OK(mkseg(fs, 2, 15, 15, 2));           /* ... before a gap */
    CHECK_EQ(replay_rc(fs, &mis, &size, &next), EM_CORRUPT);
    wal_memfs_free(fs);
}

/* what wal_errmsg says about a header that disagrees with records and log */
TEST(wal_relabel_corrupt_message_names_both)
{
    wal_memfs *fs;
    REQUIRE_OK(wal_memfs_new(&fs));
    REQUIRE_OK(mkseg(fs, 0, 1, 1, 10));
    REQUIRE_OK(mkseg(fs, 1, 20, 14, 3));
    st_store *s = we_new_store();
    REQUIRE(s);
    wal_options o;
    memset(&o, 0, sizeof o);
    o.dir = WE_DIR;
    o.ops = wal_memfs_ops(fs);
    wal *w;
    REQUIRE_OK(wal_open(&w, &o));
    CHECK_EQ(wal_recover(w, s), EM_CORRUPT);
    const char *want = SEG(1) ": segment header says first LSN 20 (offset 16) but its first "
                       "record has LSN 14, expected LSN 11 (offset 32)";
    CHECK(strcmp(wal_errmsg(w), want) == 0);
    if (strcmp(wal_errmsg(w), want))
        printf("    got: %s\n", wal_errmsg(w));
    wal_close(w);
    st_close(s);
    wal_memfs_free(fs);
}

/* ---- wal_repair (ember-wal repair) -------------------------------------- */

static int repair(wal_memfs *fs, uint64_t *fixed)
{
    wal_options o;
    memset(&o, 0, sizeof o);
    o.dir = WE_DIR;
    o.ops = wal_memfs_ops(fs);
    wal *w;
    int rc = wal_open(&w, &o);
    if (!rc)
        rc = wal_repair(w, fixed);
    wal_close(w);
    return rc;
}

/* The checkpoint case: both headers are rewritten (checkpoint first), and
 * the log then replays without a warning to the same state. */
TEST(wal_relabel_repair_checkpoint_and_segment)
{
    wal_memfs *fs;
    REQUIRE_OK(wal_memfs_new(&fs));
    st_store *a = we_new_store();
    REQUIRE(a);
    wal *w;
    REQUIRE_OK(open_log(fs, a, &w));
    st_cache_config cfg;
    cfg_init(&cfg);
    st_cache *c = NULL;
    REQUIRE_OK(st_cache_create(a, &cfg, &c));
    uint8_t kb[5], vb[64];
    for (int32_t k = 0; k < 10; k++)
        CHECK_OK(st_put(c, NULL, kb, ikey(kb, k), vb, sval(vb, k, 1)));
    REQUIRE_OK(wal_checkpoint(w, a));
    for (int32_t k = 5; k < 16; k++)
        CHECK_OK(st_put(c, NULL, kb, ikey(kb, k), vb, sval(vb, k, 2)));
    REQUIRE_OK(wal_close(w));
    st_close(a);
    REQUIRE_OK(relabel(fs, SEG(1), 24, 15));
    REQUIRE_OK(relabel(fs, CKPT(1), 32, 15));

    uint64_t fixed = 0, mis = 9, next = 0;
    CHECK_OK(repair(fs, &fixed));
    CHECK_EQ(fixed, 2);
    CHECK_OK(repair(fs, &fixed));       /* nothing left */
    CHECK_EQ(fixed, 0);
    int64_t size;
    CHECK_OK(replay_rc(fs, &mis, &size, &next));
    CHECK_EQ(mis, 0);
    CHECK_EQ(size, 16);
    CHECK_EQ(next, 23);
    wal_memfs_free(fs);
}

TEST(wal_relabel_repair_segments)
{
    wal_memfs *fs;
    REQUIRE_OK(wal_memfs_new(&fs));
    REQUIRE_OK(mkseg(fs, 0, 3, 1, 10));            /* first segment, header ahead */
    REQUIRE_OK(mkseg(fs, 1, 14, 11, 6));           /* continues, header ahead */
    REQUIRE_OK(mkseg(fs, 2, 30, 0, 0));            /* empty last, header ahead */
    uint64_t fixed = 0, mis = 9, next = 0;
    CHECK_OK(repair(fs, &fixed));
    CHECK_EQ(fixed, 3);
    int64_t size;
    CHECK_OK(replay_rc(fs, &mis, &size, &next));
    CHECK_EQ(mis, 0);
    CHECK_EQ(size, 15);
    CHECK_EQ(next, 17);
    wal_memfs_free(fs);
}

/* a log recovery refuses is left exactly as it was */
TEST(wal_relabel_repair_leaves_corruption_alone)
{
    wal_memfs *fs;
    REQUIRE_OK(wal_memfs_new(&fs));
    REQUIRE_OK(mkseg(fs, 0, 3, 1, 10));            /* repairable */
    REQUIRE_OK(mkseg(fs, 1, 20, 14, 3));           /* a gap: recovery refuses */
    uint8_t *p;
    size_t n;
    uint8_t before[2][WAL_SEG_HDR];
    REQUIRE_OK(wal_memfs_file(fs, SEG(0), &p, &n));
    memcpy(before[0], p, WAL_SEG_HDR);
    REQUIRE_OK(wal_memfs_file(fs, SEG(1), &p, &n));
    memcpy(before[1], p, WAL_SEG_HDR);
    uint64_t fixed = 9;
    CHECK_EQ(repair(fs, &fixed), EM_CORRUPT);
    CHECK_EQ(fixed, 0);
    REQUIRE_OK(wal_memfs_file(fs, SEG(0), &p, &n));
    CHECK_MEM(p, before[0], WAL_SEG_HDR);
    REQUIRE_OK(wal_memfs_file(fs, SEG(1), &p, &n));
    CHECK_MEM(p, before[1], WAL_SEG_HDR);
    wal_memfs_free(fs);
}
