/* test_wal.c - the WAL's update command codec, st_update mapping, record
 * frames and the frame scanner (src/wal/wal_codec.c, wal.c). */
#include "test.h"

#include "util/err.h"
#include "util/mem.h"
#include "wal/wal.h"

#include <stdlib.h>

static const char COORD[] = "node_foo_bar_123_yes";

static void fill_cmd(wal_cmd *c, wal_row *rows, uint32_t n, int update_all, uint8_t *payload, uint32_t plen)
{
    memset(c, 0, sizeof *c);
    c->op = ST_UPD_PUT;
    c->update_all = (uint8_t)update_all;
    c->tx_id = (wal_uuid){0x0123456789abcdefULL, 0xfedcba9876543210ULL};
    c->lease_start = 1700000000123LL << 16;
    c->safe_time = -5;
    c->catalog_version = 10000;
    c->table_id = -123456;
    c->partition = 2048;
    c->coord = COORD;
    c->coord_len = (uint32_t)strlen(COORD);
    c->nrows = n;
    c->rows = rows;
    for (uint32_t i = 0; i < n; i++) {
        rows[i].id = (wal_uuid){i * 7919ULL, ~(uint64_t)i};
        rows[i].timestamp = (int64_t)i * 1000003;
        rows[i].schema_version = 128;
        rows[i].payload = payload + i;
        rows[i].len = plen - i;
    }
}

static void check_same(const wal_cmd *a, const wal_cmd *b)
{
    CHECK_EQ(a->op, b->op);
    CHECK_EQ(a->update_all, b->update_all);
    CHECK(a->tx_id.msb == b->tx_id.msb && a->tx_id.lsb == b->tx_id.lsb);
    CHECK_EQ(a->lease_start, b->lease_start);
    CHECK_EQ(a->safe_time, b->safe_time);
    CHECK_EQ(a->catalog_version, b->catalog_version);
    CHECK_EQ(a->table_id, b->table_id);
    CHECK_EQ(a->partition, b->partition);
    REQUIRE_EQ(a->coord_len, b->coord_len);
    CHECK_MEM(a->coord, b->coord, a->coord_len);
    REQUIRE_EQ(a->nrows, b->nrows);
    wal_row_iter pos = {0, 0};
    wal_row r;
    for (uint32_t i = 0; i < a->nrows; i++) {
        REQUIRE(wal_cmd_next_row(b, &pos, &r));
        CHECK(r.id.msb == a->rows[i].id.msb && r.id.lsb == a->rows[i].id.lsb);
        CHECK_EQ(r.timestamp, a->rows[i].timestamp);
        CHECK_EQ(r.schema_version, a->rows[i].schema_version);
        REQUIRE_EQ(r.len, a->rows[i].len);
        CHECK_MEM(r.payload, a->rows[i].payload, r.len);
    }
    CHECK(!wal_cmd_next_row(b, &pos, &r));
}

TEST(wal_codec_roundtrip_single_and_update_all)
{
    uint8_t payload[8192 + 100];
    for (size_t i = 0; i < sizeof payload; i++)
        payload[i] = (uint8_t)(i * 31 + 7);
    wal_row rows[100];
    em_buf b = EM_BUF_INIT;
    for (int all = 0; all <= 1; all++) {
        uint32_t sizes[] = {0, 1, 127, 128, 2048, 8192};
        for (size_t s = 0; s < sizeof sizes / sizeof sizes[0]; s++) {
            wal_cmd c, d;
            uint32_t n = all ? 100 : 1;
            fill_cmd(&c, rows, n, all, payload, sizes[s] + (all ? 100 : 0));
            em_buf_reset(&b);
            REQUIRE_OK(wal_cmd_marshal(&b, &c));
            REQUIRE_OK(wal_cmd_unmarshal(b.p, b.len, &d));
            check_same(&c, &d);
            /* the view points into the bytes: no copy was made */
            CHECK(d.coord >= (const char *)b.p && d.coord < (const char *)b.p + b.len);
        }
    }
    em_buf_free(&b);
}

TEST(wal_codec_rejects_every_truncation_and_trailing_byte)
{
    uint8_t payload[300];
    memset(payload, 0xab, sizeof payload);
    wal_row rows[3];
    wal_cmd c, d;
    fill_cmd(&c, rows, 3, 1, payload, 200);
    em_buf b = EM_BUF_INIT;
    REQUIRE_OK(wal_cmd_marshal(&b, &c));
    for (size_t n = 0; n < b.len; n++)
        CHECK(wal_cmd_unmarshal(b.p, n, &d) < 0);
    REQUIRE_OK(em_buf_put_u8(&b, 0));
    CHECK_EQ(wal_cmd_unmarshal(b.p, b.len, &d), EM_TRAILING);
    /* a single command with two rows is not a single command */
    c.update_all = 0;
    CHECK_EQ(wal_cmd_marshal(&b, &c), EM_INVAL);
    b.p[0] = 9;
    CHECK_EQ(wal_cmd_unmarshal(b.p, b.len, &d), EM_BADTYPE);
    em_buf_free(&b);
}

TEST(wal_codec_garbage_never_crashes)
{
    uint8_t buf[512];
    uint64_t s = 88172645463325252ULL;
    wal_cmd d;
    for (int it = 0; it < 20000; it++) {
        size_t n = (size_t)(s % sizeof buf);
        for (size_t i = 0; i < n; i++) {
            s ^= s << 13; s ^= s >> 7; s ^= s << 17;
            buf[i] = (uint8_t)s;
        }
        buf[0] = (uint8_t)(1 + it % 5);
        if (n > 1)
            buf[1] = (uint8_t)(it & 1);
        if (wal_cmd_unmarshal(buf, n, &d) == 0) {
            wal_row_iter pos = {0, 0};
            wal_row r;
            uint32_t k = 0;
            while (wal_cmd_next_row(&d, &pos, &r))
                k++;
            CHECK_EQ(k, d.nrows);
        }
    }
}

TEST(wal_codec_allocates_nothing)
{
    uint8_t payload[2048];
    memset(payload, 1, sizeof payload);
    wal_row rows[100];
    wal_cmd c, d;
    fill_cmd(&c, rows, 100, 1, payload, 1900);
    em_buf b = EM_BUF_INIT;
    REQUIRE_OK(wal_cmd_marshal(&b, &c));
    em_mem_stats m0 = em_mem_thread();
    for (int i = 0; i < 100; i++) {
        em_buf_reset(&b);
        REQUIRE_OK(wal_cmd_marshal(&b, &c));
        REQUIRE_OK(wal_cmd_unmarshal(b.p, b.len, &d));
    }
    CHECK_EQ(em_mem_thread().allocs - m0.allocs, 0);
    em_buf_free(&b);
}

static int upd_equal(const st_update *a, const st_update *b)
{
    return a->kind == b->kind && a->cache_id == b->cache_id && a->partition == b->partition &&
           a->klen == b->klen && (!a->klen || memcmp(a->key, b->key, a->klen) == 0) &&
           a->vlen == b->vlen && (!a->vlen || memcmp(a->val, b->val, a->vlen) == 0) &&
           a->expire_at_ms == b->expire_at_ms && a->cntr == b->cntr;
}

TEST(wal_update_roundtrip_all_kinds)
{
    const uint8_t key[] = {9, 1, 0, 0, 0}, val[] = {9, 3, 0, 0, 0, 'a', 'b', 'c'};
    st_update u[4];
    memset(u, 0, sizeof u);
    u[0] = (st_update){ST_UPD_PUT, 77, 1023, key, sizeof key, val, sizeof val, 1234567, NULL, 42, NULL, 0, 0, 0};
    u[1] = (st_update){ST_UPD_REMOVE, -5, 3, key, sizeof key, NULL, 0, 0, NULL, 7, NULL, 0, 0, 0};
    u[2] = (st_update){ST_UPD_CLEAR, 77, 0, NULL, 0, NULL, 0, 0, NULL, 0, NULL, 0, 0, 0};
    u[3] = (st_update){ST_UPD_CACHE_DESTROY, 77, 0, NULL, 0, NULL, 0, 0, NULL, 0, NULL, 0, 0, 0};
    em_buf b = EM_BUF_INIT;
    for (int i = 0; i < 4; i++) {
        wal_cmd c;
        st_update v;
        st_cache_config cfg;
        em_buf_reset(&b);
        REQUIRE_OK(wal_encode_update(&b, &u[i], 42));
        REQUIRE_OK(wal_cmd_unmarshal(b.p, b.len, &c));
        CHECK_EQ(c.safe_time, 42);
        REQUIRE_OK(wal_decode_update(&c, &v, &cfg));
        CHECK(upd_equal(&u[i], &v));
    }
    em_buf_free(&b);
}

TEST(wal_update_cache_config_roundtrip)
{
    st_cache_config cfg;
    memset(&cfg, 0, sizeof cfg);
    cfg.name = (char *)"people";
    cfg.cache_mode = 2;
    cfg.atomicity_mode = 1;
    cfg.backups = 3;
    cfg.copy_on_read = 1;
    cfg.data_region_name = NULL;
    cfg.sql_schema = (char *)"PUBLIC";
    cfg.sql_index_inline_max_size = -1;
    cfg.rebalance_timeout = 10000;
    cfg.rebalance_batches_prefetch_count = -2;
    cfg.default_lock_timeout = INT64_MIN;
    cfg.has_expiry = 1;
    cfg.expiry = (st_expiry){-1, -2, 5000};
    cfg.partitions = 1024;
    uint8_t kc[] = {1, 2, 3, 4};
    cfg.key_configs = kc;
    cfg.key_configs_len = sizeof kc;
    st_update u;
    memset(&u, 0, sizeof u);
    u.kind = ST_UPD_CACHE_CREATE;
    u.cache_id = 1234;
    u.cfg = &cfg;
    em_buf b = EM_BUF_INIT;
    REQUIRE_OK(wal_encode_update(&b, &u, 1));
    wal_cmd c;
    st_update v;
    st_cache_config d;
    REQUIRE_OK(wal_cmd_unmarshal(b.p, b.len, &c));
    REQUIRE_OK(wal_decode_update(&c, &v, &d));
    CHECK(v.cfg == &d);
    CHECK(strcmp(d.name, "people") == 0);
    CHECK(d.data_region_name == NULL);
    CHECK(d.group_name == NULL);
    CHECK(strcmp(d.sql_schema, "PUBLIC") == 0);
    CHECK_EQ(d.backups, 3);
    CHECK_EQ(d.sql_index_inline_max_size, -1);
    CHECK_EQ(d.rebalance_batches_prefetch_count, -2);
    CHECK(d.default_lock_timeout == INT64_MIN);
    CHECK_EQ(d.expiry.update_ms, -2);
    CHECK_EQ(d.expiry.access_ms, 5000);
    CHECK_EQ(d.partitions, 1024);
    REQUIRE_EQ(d.key_configs_len, 4);
    CHECK_MEM(d.key_configs, kc, 4);
    CHECK(d.query_entities == NULL);
    em_buf_free(&b);
}

static size_t frame_of(em_buf *b, uint64_t lsn, int i)
{
    size_t at;
    uint8_t key[4];
    memcpy(key, &i, 4);
    st_update u;
    memset(&u, 0, sizeof u);
    u.kind = ST_UPD_PUT;
    u.cache_id = 1;
    u.key = key;
    u.klen = 4;
    u.val = key;
    u.vlen = 4;
    if (wal_frame_begin(b, &at) || wal_encode_update(b, &u, 7))
        return 0;
    wal_frame_end(b, at, WAL_REC_UPDATE, lsn);
    return b->len - at;
}

TEST(wal_frame_crc_catches_every_bit_flip)
{
    em_buf b = EM_BUF_INIT;
    size_t n = frame_of(&b, 5, 1);
    REQUIRE(n > WAL_FRAME_HDR);
    wal_frame f;
    REQUIRE_OK(wal_frame_parse(b.p, b.len, &f));
    CHECK_EQ(f.lsn, 5);
    CHECK_EQ(f.total, n);
    for (size_t bit = 0; bit < n * 8; bit++) {
        b.p[bit / 8] ^= (uint8_t)(1u << (bit % 8));
        int rc = wal_frame_parse(b.p, b.len, &f);
        CHECK(rc == EM_CORRUPT || rc == EM_AGAIN);
        b.p[bit / 8] ^= (uint8_t)(1u << (bit % 8));
    }
    for (size_t k = 0; k < n; k++)
        CHECK_EQ(wal_frame_parse(b.p, k, &f), EM_AGAIN);
    em_buf_free(&b);
}

TEST(wal_scan_clean_torn_corrupt)
{
    em_buf b = EM_BUF_INIT;
    size_t offs[6];
    for (int i = 0; i < 5; i++) {
        offs[i] = b.len;
        REQUIRE(frame_of(&b, (uint64_t)i + 1, i));
    }
    offs[5] = b.len;
    wal_scan_res r;
    REQUIRE_OK(wal_scan(b.p, b.len, 0, 1, NULL, NULL, &r));
    CHECK_EQ(r.state, WAL_SCAN_CLEAN);
    CHECK_EQ(r.frames, 5);
    CHECK_EQ(r.last_lsn, 5);
    /* cut inside the last frame: torn */
    REQUIRE_OK(wal_scan(b.p, offs[5] - 3, 0, 1, NULL, NULL, &r));
    CHECK_EQ(r.state, WAL_SCAN_TORN);
    CHECK_EQ(r.end_off, offs[4]);
    /* damage frame 2: corrupt, pointing at frame 3 */
    b.p[offs[2] + 30] ^= 0x40;
    CHECK_EQ(wal_scan(b.p, b.len, 0, 1, NULL, NULL, &r), EM_CORRUPT);
    CHECK_EQ(r.state, WAL_SCAN_CORRUPT);
    CHECK_EQ(r.end_off, offs[2]);
    CHECK_EQ(r.next_off, offs[3]);
    b.p[offs[2] + 30] ^= 0x40;
    /* LSN gap: corrupt */
    CHECK_EQ(wal_scan(b.p, b.len, 0, 2, NULL, NULL, &r), EM_CORRUPT);
    em_buf_free(&b);
}

TEST(wal_names_and_modes)
{
    int ck;
    uint64_t no;
    REQUIRE_OK(wal_name_parse("wal-00000000000000ff.seg", &ck, &no));
    CHECK(!ck && no == 255);
    REQUIRE_OK(wal_name_parse("ckpt-0000000000000010.ckpt", &ck, &no));
    CHECK(ck && no == 16);
    CHECK(wal_name_parse("wal-00000000000000ff.seg.x", &ck, &no) < 0);
    CHECK(wal_name_parse("ckpt-0000000000000010.tmp", &ck, &no) < 0);
    wal_mode m;
    REQUIRE_OK(wal_mode_parse("log_only", &m));
    CHECK_EQ(m, WAL_LOG_ONLY);
    CHECK(wal_mode_parse("sometimes", &m) < 0);
    CHECK(strcmp(wal_mode_name(WAL_BACKGROUND), "BACKGROUND") == 0);
}
