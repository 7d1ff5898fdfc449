/* test_wal_validate.c - recovery holds every key and value it applies, from
 * segments and from checkpoints, to the validator the network path uses
 * (bin_validate): a record with a correct CRC whose key or value is not one
 * whole, non-null data object is corruption, reported with file and offset,
 * and nothing of the log is applied - never a crash in the store (which
 * trusts the declared lengths of the keys it hashes). */
#include "test.h"
#include "wal_env.h"

#include "store/store.h"
#include "util/err.h"
#include "util/mem.h"
#include "wal/wal.h"

#include <stdio.h>

#define SEG0 WE_DIR "/wal-0000000000000000.seg"

/* A string key (type 9) declaring 0x7ffffff0 bytes where there are none:
 * hashing it reads far past the record. */
static const uint8_t bad_key[] = {0x09, 0xf0, 0xff, 0xff, 0x7f};
static const uint8_t good_key[] = {0x03, 1, 0, 0, 0};
static const uint8_t good_val[] = {0x09, 2, 0, 0, 0, 'o', 'k'};

static int32_t cache_id(void) { return em_hash_java_str((const uint8_t *)"v", 1); }

static void cfg_init(st_cache_config *cfg)
{
    st_cache_config_init(cfg);
    cfg->name = (char *)"v";
    cfg->partitions = 8;
}

static st_update create_upd(st_cache_config *cfg)
{
    st_update u;
    memset(&u, 0, sizeof u);
    u.kind = ST_UPD_CACHE_CREATE;
    u.cache_id = cache_id();
    u.cfg = cfg;
    return u;
}

static st_update put_upd(const uint8_t *k, size_t kl, const uint8_t *v, size_t vl)
{
    st_update u;
    memset(&u, 0, sizeof u);
    u.kind = v ? ST_UPD_PUT : ST_UPD_REMOVE;
    u.cache_id = cache_id();
    u.key = k;
    u.klen = (uint32_t)kl;
    u.val = v;
    u.vlen = (uint32_t)vl;
    return u;
}

/* recover_rc recovers fs into a fresh store; msg gets wal_errmsg, *size
 * the size of cache "v" (-1 if it does not exist). */
static int recover_rc(wal_memfs *fs, char *msg, size_t cap, int64_t *size)
{
    st_store *s = we_new_store();
    if (!s)
        return EM_NOMEM;
    wal_options o;
    memset(&o, 0, sizeof o);
    o.dir = WE_DIR;
    o.ops = wal_memfs_ops(fs);
    wal *w;
    int rc = wal_open(&w, &o);
    *size = -1;
    if (!rc) {
        rc = wal_recover(w, s);
        snprintf(msg, cap, "%s", wal_errmsg(w));
        st_cache *c = st_cache_find(s, cache_id());
        if (c)
            st_size(c, 0, size);
        wal_close(w);
    }
    st_close(s);
    return rc;
}

/* seg_with writes segment 0: CACHE_CREATE, a good put, then bad, then a
 * good put; returns the offset of the third record (the bad one). */
static size_t seg_with(wal_memfs *fs, st_update bad)
{
    st_cache_config cfg;
    cfg_init(&cfg);
    st_update u[4] = {create_upd(&cfg), put_upd(good_key, sizeof good_key, good_val, sizeof good_val),
                      bad, put_upd(good_key, sizeof good_key, good_val, sizeof good_val)};
    if (we_write_seg(fs, 0, 1, u, 4))
        return 0;
    /* the bad record's offset: header + the first two frames */
    em_buf b = EM_BUF_INIT;
    size_t off = 0;
    if (wal_read_file(wal_memfs_ops(fs), SEG0, &b) == 0) {
        wal_frame f;
        off = WAL_SEG_HDR;
        for (int i = 0; i < 2 && wal_frame_parse(b.p + off, b.len - off, &f) == 0; i++)
            off += f.total;
    }
    em_buf_free(&b);
    return off;
}

static void expect_refused(st_update bad, const char *what)
{
    wal_memfs *fs;
    REQUIRE_OK(wal_memfs_new(&fs));
    size_t off = seg_with(fs, bad);
    REQUIRE(off > WAL_SEG_HDR);
    char msg[600], want[300];
    int64_t size = 0;
    CHECK_EQ(recover_rc(fs, msg, sizeof msg, &size), EM_CORRUPT);
    snprintf(want, sizeof want, SEG0 ": bad record at offset %zu: %s", off, what);
    CHECK(strncmp(msg, want, strlen(want)) == 0);
    if (strncmp(msg, want, strlen(want)))
        printf("    got:  %s\n    want: %s...\n", msg, want);
    CHECK_EQ(size, -1);                 /* nothing was applied */
    wal_memfs_free(fs);
}

TEST(wal_validate_string_key_longer_than_the_record)
{
    expect_refused(put_upd(bad_key, sizeof bad_key, good_val, sizeof good_val),
                   "its key is not a valid data object");
}

TEST(wal_validate_bad_key_of_a_remove)
{
    expect_refused(put_upd(bad_key, sizeof bad_key, NULL, 0), "its key is not a valid data object");
}

TEST(wal_validate_null_and_empty_keys)
{
    static const uint8_t null_obj[] = {0x65};
    expect_refused(put_upd(null_obj, 1, good_val, sizeof good_val), "its key is not a valid data object");
    expect_refused(put_upd(good_key, 0, good_val, sizeof good_val), "its key is not a valid data object");
}

TEST(wal_validate_key_with_trailing_bytes)
{
    static const uint8_t k[] = {0x03, 1, 0, 0, 0, 0x03};
    expect_refused(put_upd(k, sizeof k, good_val, sizeof good_val), "its key is not a valid data object");
}

TEST(wal_validate_bad_values)
{
    static const uint8_t long_str[] = {0x09, 0xff, 0xff, 0xff, 0x7f, 'a'};
    static const uint8_t bad_utf8[] = {0x09, 2, 0, 0, 0, 0xc3, 0x28};
    static const uint8_t null_obj[] = {0x65};
    static const uint8_t unknown[] = {0x63, 0, 0, 0, 0};
    const char *what = "its value is not a valid data object";
    expect_refused(put_upd(good_key, sizeof good_key, long_str, sizeof long_str), what);
    expect_refused(put_upd(good_key, sizeof good_key, bad_utf8, sizeof bad_utf8), what);
    expect_refused(put_upd(good_key, sizeof good_key, null_obj, sizeof null_obj), what);
    expect_refused(put_upd(good_key, sizeof good_key, unknown, sizeof unknown), what);
}

/* the same log with good records only recovers: the check is not too strict */
TEST(wal_validate_good_records_recover)
{
    wal_memfs *fs;
    REQUIRE_OK(wal_memfs_new(&fs));
    static const uint8_t k2[] = {0x09, 3, 0, 0, 0, 'k', 'e', 'y'};
    REQUIRE(seg_with(fs, put_upd(k2, sizeof k2, good_val, sizeof good_val)) > 0);
    char msg[600];
    int64_t size = 0;
    CHECK_OK(recover_rc(fs, msg, sizeof msg, &size));
    CHECK_EQ(size, 2);
    wal_memfs_free(fs);
}

static int fill_bad(void *arg, wal_ckpt_writer *cw)
{
    (void)arg;
    st_cache_config cfg;
    cfg_init(&cfg);
    st_update c = create_upd(&cfg);
    st_update g = put_upd(good_key, sizeof good_key, good_val, sizeof good_val);
    st_update b = put_upd(bad_key, sizeof bad_key, good_val, sizeof good_val);
    int rc = wal_ckpt_put(cw, &c);
    if (!rc)
        rc = wal_ckpt_put(cw, &g);
    if (!rc)
        rc = wal_ckpt_put(cw, &b);
    return rc;
}

TEST(wal_validate_checkpoint_with_a_bad_key)
{
    wal_memfs *fs;
    REQUIRE_OK(wal_memfs_new(&fs));
    wal_options o;
    memset(&o, 0, sizeof o);
    o.dir = WE_DIR;
    o.ops = wal_memfs_ops(fs);
    wal *w;
    REQUIRE_OK(wal_open(&w, &o));
    REQUIRE_OK(wal_replay(w, NULL, NULL));
    REQUIRE_OK(wal_checkpoint_run(w, fill_bad, NULL));
    REQUIRE_OK(wal_close(w));
    char msg[600];
    int64_t size = 0;
    CHECK_EQ(recover_rc(fs, msg, sizeof msg, &size), EM_CORRUPT);
    /* header 40, then the CACHE_CREATE and the good PUT frames */
    CHECK(strstr(msg, WE_DIR "/ckpt-0000000000000000.ckpt: bad checkpoint record at offset ") == msg);
    CHECK(strstr(msg, ": its key is not a valid data object") != NULL);
    if (!strstr(msg, "its key"))
        printf("    got: %s\n", msg);
    CHECK_EQ(size, -1);
    wal_memfs_free(fs);
}
