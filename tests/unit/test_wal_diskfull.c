/* test_wal_diskfull.c - starting on a persistent directory whose disk is
 * full (the in-memory file layer returns ENOSPC on every write): recovery
 * succeeds, what was logged serves reads, and writes are refused as after a
 * write failure while running - EM_READONLY from the store, and from the
 * protocol layer the same "Persistence failed (...): data region N no
 * longer accepts writes" reply.  Once space is back, the next start writes
 * again and nothing refused was applied. */
#include "test.h"
#include "proto_env.h"
#include "wal_env.h"

#include "store/store.h"
#include "util/err.h"
#include "util/hash.h"
#include "util/mem.h"
#include "wal/wal.h"

#include <errno.h>
#include <stdio.h>

static size_t ikey(uint8_t *b, int32_t v) { b[0] = 3; em_st32(b + 1, (uint32_t)v); return 5; }
static size_t sval(uint8_t *b, int32_t k)
{
    int n = snprintf((char *)b + 5, 48, "value-%d", k);
    b[0] = 9;
    em_st32(b + 1, (uint32_t)n);
    return 5 + (size_t)n;
}

static int open_mode(wal_memfs *fs, wal_mode mode, st_store *s, wal **w)
{
    wal_options o;
    memset(&o, 0, sizeof o);
    o.mode = mode;
    o.segment_bytes = 2048;
    o.checkpoint_ms = 1;                /* the checkpointer runs, and must cope */
    return we_open(fs, &o, s, w);
}

/* present: how many of keys 0..n-1 the cache holds with their values. */
static int present(st_cache *c, int32_t n)
{
    em_buf v = EM_BUF_INIT;
    int got = 0;
    for (int32_t k = 0; k < n; k++) {
        uint8_t kb[5], want[64];
        int found = 0;
        em_buf_reset(&v);
        size_t wl = sval(want, k);
        if (st_get(c, NULL, kb, ikey(kb, k), &v, &found) == 0 && found && v.len == wl &&
            memcmp(v.p, want, wl) == 0)
            got++;
    }
    em_buf_free(&v);
    return got;
}

static void full_at_start(wal_mode mode, int fault)
{
    wal_memfs *fs;
    REQUIRE_OK(wal_memfs_new(&fs));
    st_store *a = we_new_store();
    REQUIRE(a);
    wal *w;
    REQUIRE_OK(open_mode(fs, mode, a, &w));
    st_cache_config cfg;
    st_cache_config_init(&cfg);
    cfg.name = (char *)"full";
    cfg.partitions = 8;
    st_cache *c = NULL;
    REQUIRE_OK(st_cache_create(a, &cfg, &c));
    int32_t id = st_cache_id(c);
    uint8_t kb[5], vb[64];
    for (int32_t k = 0; k < 100; k++)
        CHECK_OK(st_put(c, NULL, kb, ikey(kb, k), vb, sval(vb, k)));
    REQUIRE_OK(wal_close(w));
    st_close(a);

    /* the disk is full: every write (or every fsync) fails from now on */
    wal_memfs_fault(fs, fault, 1, ENOSPC, 0, 1);
    st_store *b = we_new_store();
    REQUIRE(b);
    REQUIRE_OK(open_mode(fs, mode, b, &w));
    CHECK_EQ(wal_error(w), -ENOSPC);
    char want[200];
    snprintf(want, sizeof want, "%s; the log takes no more writes", em_strerror(-ENOSPC));
    CHECK(strstr(wal_errmsg(w), want) != NULL);
    if (!strstr(wal_errmsg(w), want))
        printf("    errmsg: %s\n", wal_errmsg(w));
    st_cache *r = st_cache_find(b, id);
    REQUIRE(r);
    CHECK_EQ(present(r, 100), 100);
    CHECK_EQ(st_put(r, NULL, kb, ikey(kb, 500), vb, sval(vb, 500)), EM_READONLY);
    int removed = -1;
    CHECK_EQ(st_remove(r, NULL, kb, ikey(kb, 1), &removed), EM_READONLY);
    st_cache_config cfg2;
    st_cache_config_init(&cfg2);
    cfg2.name = (char *)"other";
    st_cache *o = NULL;
    CHECK_EQ(st_cache_create(b, &cfg2, &o), EM_READONLY);
    CHECK_EQ(wal_checkpoint(w, b), EM_READONLY);
    CHECK_EQ(present(r, 100), 100);     /* refused writes were not applied */
    CHECK_EQ(wal_close(w), -ENOSPC);
    st_close(b);

    /* space again: the next start writes, and holds exactly what was logged */
    wal_memfs_fault(fs, fault, 0, 0, 0, 0);
    st_store *s3 = we_new_store();
    REQUIRE(s3);
    REQUIRE_OK(open_mode(fs, mode, s3, &w));
    CHECK_EQ(wal_error(w), 0);
    r = st_cache_find(s3, id);
    REQUIRE(r);
    CHECK_EQ(present(r, 100), 100);
    int found = -1;
    em_buf v = EM_BUF_INIT;
    CHECK_OK(st_get(r, NULL, kb, ikey(kb, 500), &v, &found));
    CHECK_EQ(found, 0);
    CHECK(st_cache_find(s3, em_hash_java_str((const uint8_t *)"other", 5)) == NULL);
    CHECK_OK(st_put(r, NULL, kb, ikey(kb, 500), vb, sval(vb, 500)));
    CHECK_OK(wal_close(w));
    st_close(s3);
    s3 = we_new_store();
    REQUIRE(s3);
    REQUIRE_OK(open_mode(fs, mode, s3, &w));
    r = st_cache_find(s3, id);
    REQUIRE(r);
    em_buf_reset(&v);
    CHECK_OK(st_get(r, NULL, kb, ikey(kb, 500), &v, &found));
    CHECK_EQ(found, 1);
    em_buf_free(&v);
    CHECK_OK(wal_close(w));
    st_close(s3);
    wal_memfs_free(fs);
}

TEST(wal_diskfull_start_fsync) { full_at_start(WAL_FSYNC, WAL_FAULT_WRITE); }
TEST(wal_diskfull_start_log_only) { full_at_start(WAL_LOG_ONLY, WAL_FAULT_WRITE); }
TEST(wal_diskfull_start_background) { full_at_start(WAL_BACKGROUND, WAL_FAULT_WRITE); }
TEST(wal_diskfull_start_none) { full_at_start(WAL_NONE, WAL_FAULT_WRITE); }
TEST(wal_diskfull_start_fsync_fails) { full_at_start(WAL_LOG_ONLY, WAL_FAULT_FSYNC); }

/* A torn tail at start, and fsync failing: the tail cannot be cut durably;
 * the log starts failed, serves what it holds, and the next start (with
 * space) takes writes after the same records. */
TEST(wal_diskfull_start_with_a_torn_tail)
{
    wal_memfs *fs;
    REQUIRE_OK(wal_memfs_new(&fs));
    st_store *a = we_new_store();
    REQUIRE(a);
    wal *w;
    wal_options o;
    memset(&o, 0, sizeof o);
    o.mode = WAL_LOG_ONLY;
    REQUIRE_OK(we_open(fs, &o, a, &w));
    st_cache_config cfg;
    st_cache_config_init(&cfg);
    cfg.name = (char *)"torn";
    st_cache *c = NULL;
    REQUIRE_OK(st_cache_create(a, &cfg, &c));
    int32_t id = st_cache_id(c);
    uint8_t kb[5], vb[64];
    for (int32_t k = 0; k < 10; k++)
        CHECK_OK(st_put(c, NULL, kb, ikey(kb, k), vb, sval(vb, k)));
    REQUIRE_OK(wal_close(w));
    st_close(a);
    uint8_t *p;
    size_t len;
    REQUIRE_OK(wal_memfs_file(fs, WE_DIR "/wal-0000000000000000.seg", &p, &len));
    REQUIRE_OK(wal_memfs_set_len(fs, WE_DIR "/wal-0000000000000000.seg", len - 3));

    wal_memfs_fault(fs, WAL_FAULT_FSYNC, 1, ENOSPC, 0, 1);
    st_store *b = we_new_store();
    REQUIRE(b);
    memset(&o, 0, sizeof o);
    o.mode = WAL_LOG_ONLY;
    REQUIRE_OK(we_open(fs, &o, b, &w));
    CHECK_EQ(wal_error(w), -ENOSPC);
    CHECK(strstr(wal_errmsg(w), "cannot cut the torn tail") != NULL);
    st_cache *r = st_cache_find(b, id);
    REQUIRE(r);
    CHECK_EQ(present(r, 10), 9);        /* the torn last put is not there */
    CHECK_EQ(st_put(r, NULL, kb, ikey(kb, 50), vb, sval(vb, 50)), EM_READONLY);
    wal_close(w);
    st_close(b);

    wal_memfs_fault(fs, WAL_FAULT_FSYNC, 0, 0, 0, 0);
    b = we_new_store();
    REQUIRE(b);
    memset(&o, 0, sizeof o);
    o.mode = WAL_LOG_ONLY;
    REQUIRE_OK(we_open(fs, &o, b, &w));
    r = st_cache_find(b, id);
    REQUIRE(r);
    CHECK_EQ(present(r, 10), 9);
    CHECK_OK(st_put(r, NULL, kb, ikey(kb, 50), vb, sval(vb, 50)));
    CHECK_OK(wal_close(w));
    st_close(b);
    wal_memfs_free(fs);
}

/* ---- the protocol layer's reply ---------------------------------------- */

/* pe_call frames e->req, feeds it, and returns the reply body. */
static int pe_call(pe_env *e, const uint8_t **body, size_t *blen)
{
    em_st32(e->req.p, (uint32_t)(e->req.len - 4));
    em_buf_reset(&e->out);
    size_t used = 0;
    int rc = pr_feed(e->c, e->req.p, e->req.len, &e->out, SIZE_MAX / 2, &used);
    if (rc)
        return rc;
    if (used != e->req.len || e->out.len < 4 || em_ld32(e->out.p) + 4 != e->out.len)
        return EM_BADLEN;
    *body = e->out.p + 4;
    *blen = e->out.len - 4;
    return 0;
}

static void pe_req(pe_env *e, int op, const char *cache)
{
    em_buf_reset(&e->req);
    em_buf_put_le32(&e->req, 0);
    em_buf_put_le16(&e->req, (uint16_t)op);
    em_buf_put_le64(&e->req, (uint64_t)++e->rid);
    if (op == 1052) {                   /* GET_OR_CREATE_WITH_NAME */
        em_buf_put_u8(&e->req, 9);
        em_buf_put_le32(&e->req, (uint32_t)strlen(cache));
        em_buf_append(&e->req, cache, strlen(cache));
        return;
    }
    em_buf_put_le32(&e->req, (uint32_t)em_hash_java_str((const uint8_t *)cache, strlen(cache)));
    em_buf_put_u8(&e->req, 0);
    uint8_t kb[5], vb[64];
    em_buf_append(&e->req, kb, ikey(kb, 7));
    if (op == 1001)                     /* PUT */
        em_buf_append(&e->req, vb, sval(vb, 7));
}

/* pe_env_wal: a protocol env whose store is recovered from fs and logged to it. */
static int pe_env_wal(pe_env *e, wal_memfs *fs, wal **w)
{
    int rc = pe_open(e, NULL);
    if (rc)
        return rc;
    wal_options o;
    memset(&o, 0, sizeof o);
    o.dir = WE_DIR;
    o.ops = wal_memfs_ops(fs);
    o.mode = WAL_LOG_ONLY;
    if ((rc = wal_open(w, &o)) != 0)
        return rc;
    if ((rc = wal_recover(*w, e->st)) == 0)
        rc = wal_attach(*w, e->st);
    if (!rc) {                          /* handshake 1.2.0: replies are rid, status, body */
        uint8_t hs[12] = {8, 0, 0, 0, 1, 1, 0, 2, 0, 0, 0, 2};
        em_buf_reset(&e->out);
        rc = pr_feed(e->c, hs, sizeof hs, &e->out, SIZE_MAX / 2, &(size_t){0});
    }
    return rc;
}

TEST(wal_diskfull_start_put_reply_names_the_region)
{
    wal_memfs *fs;
    REQUIRE_OK(wal_memfs_new(&fs));
    pe_env e;
    wal *w = NULL;
    REQUIRE_OK(pe_env_wal(&e, fs, &w));
    const uint8_t *b;
    size_t n;
    pe_req(&e, 1052, "pc");
    REQUIRE_OK(pe_call(&e, &b, &n));
    CHECK_EQ(em_ld32(b + 8), 0);
    pe_req(&e, 1001, "pc");
    REQUIRE_OK(pe_call(&e, &b, &n));
    CHECK_EQ(em_ld32(b + 8), 0);
    REQUIRE_OK(wal_close(w));
    pe_close(&e);

    wal_memfs_fault(fs, WAL_FAULT_WRITE, 1, ENOSPC, 0, 1);
    REQUIRE_OK(pe_env_wal(&e, fs, &w));
    CHECK_EQ(wal_error(w), -ENOSPC);
    pe_req(&e, 1000, "pc");             /* GET: served */
    REQUIRE_OK(pe_call(&e, &b, &n));
    CHECK_EQ(em_ld32(b + 8), 0);
    uint8_t vb[64];
    size_t vl = sval(vb, 7);
    CHECK(n == 12 + vl && memcmp(b + 12, vb, vl) == 0);
    pe_req(&e, 1001, "pc");             /* PUT: refused, saying why */
    REQUIRE_OK(pe_call(&e, &b, &n));
    CHECK(em_ld32(b + 8) != 0);
    char want[300];
    snprintf(want, sizeof want, "Persistence failed (%s): data region default no longer accepts writes",
             em_strerror(EM_READONLY));
    int same = n > 17 && b[12] == 9 && em_ld32(b + 13) == strlen(want) &&
               memcmp(b + 17, want, strlen(want)) == 0;
    CHECK(same);
    if (!same && n > 17)
        printf("    reply: %.*s\n", (int)(n - 17), (const char *)b + 17);
    wal_close(w);
    pe_close(&e);
    wal_memfs_free(fs);
}
