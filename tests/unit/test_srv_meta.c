/* test_srv_meta.c - emberd's binary metadata log (src/server/srv_meta.c):
 * type records and type names replay into a fresh registry; a torn tail is
 * cut and appending continues; a damaged record followed by a valid one
 * refuses with file and offset; a failed fsync fails every later append.
 */
#include "test.h"

#include <errno.h>
#include <string.h>

#include "binary/binary.h"
#include "server/srv_meta.h"
#include "util/err.h"
#include "wal/wal.h"

#define PERSON_ID ((int32_t)0xC4E39B55)
#define LOGF "/m/binary-meta.log"

/* PUT_BINARY_TYPE body for Person{id:int, name:string}. */
static const uint8_t person_meta[] = {
    0x55, 0x9b, 0xe3, 0xc4, 0x09, 0x06, 0, 0, 0, 'P', 'e', 'r', 's', 'o', 'n', 0x65,
    0x02, 0, 0, 0,
    0x09, 0x02, 0, 0, 0, 'i', 'd', 0x03, 0, 0, 0, 0x1b, 0x0d, 0, 0,
    0x09, 0x04, 0, 0, 0, 'n', 'a', 'm', 'e', 0x09, 0, 0, 0, 0x8b, 0x7a, 0x33, 0,
    0x00, 0x01, 0, 0, 0, 0xf3, 0xf1, 0xdc, 0x39, 0x02, 0, 0, 0, 0x1b, 0x0d, 0, 0,
    0x8b, 0x7a, 0x33, 0,
};
static const uint8_t name_rec[] = { 0, 0x55, 0x9b, 0xe3, 0xc4, 'o', '.', 'P' };

/* reopen: a fresh registry from the log; *records and the registry's view. */
static int reopen(wal_memfs *fs, uint64_t *records, int *has_type, int *has_name, char *err)
{
    bin_registry *reg = bin_registry_new();
    if (!reg)
        return EM_NOMEM;
    srv_meta *m = NULL;
    err[0] = 0;
    int rc = srv_meta_open(&m, wal_memfs_ops(fs), "/m", reg, err, 256);
    if (!rc) {
        *records = srv_meta_records(m);
        *has_type = bin_registry_get(reg, PERSON_ID) != NULL;
        size_t n = 0;
        const char *nm = bin_registry_name_get(reg, 0, PERSON_ID, &n);
        *has_name = nm && n == 3 && !memcmp(nm, "o.P", 3);
        srv_meta_close(m);
    }
    bin_registry_free(reg);
    return rc;
}

static void write_two(wal_memfs *fs)
{
    bin_registry *reg = bin_registry_new();
    srv_meta *m = NULL;
    char err[256] = "";
    REQUIRE_OK(srv_meta_open(&m, wal_memfs_ops(fs), "/m", reg, err, sizeof err));
    CHECK_OK(srv_meta_append(m, SRV_META_TYPE, person_meta, sizeof person_meta));
    CHECK_OK(srv_meta_append(m, SRV_META_NAME, name_rec, sizeof name_rec));
    srv_meta_close(m);
    bin_registry_free(reg);
}

TEST(srv_meta_replays_types_and_names)
{
    wal_memfs *fs;
    REQUIRE_OK(wal_memfs_new(&fs));
    write_two(fs);
    /* what a power loss leaves: both records were fsynced */
    wal_memfs *after;
    REQUIRE_OK(wal_memfs_crash(fs, 0.0, 1, &after));
    uint64_t n = 0;
    int t = 0, nm = 0;
    char err[256];
    CHECK_OK(reopen(after, &n, &t, &nm, err));
    CHECK_EQ(n, 2);
    CHECK(t && nm);
    wal_memfs_free(after);
    wal_memfs_free(fs);
}

TEST(srv_meta_torn_tail_is_cut)
{
    wal_memfs *fs;
    REQUIRE_OK(wal_memfs_new(&fs));
    write_two(fs);
    uint8_t *p;
    size_t len;
    REQUIRE_OK(wal_memfs_file(fs, LOGF, &p, &len));
    REQUIRE_OK(wal_memfs_set_len(fs, LOGF, len - 3));     /* tear the name record */
    uint64_t n = 0;
    int t = 0, nm = 0;
    char err[256];
    CHECK_OK(reopen(fs, &n, &t, &nm, err));
    CHECK_EQ(n, 1);
    CHECK(t && !nm);
    /* appending continues after the cut */
    write_two(fs);
    CHECK_OK(reopen(fs, &n, &t, &nm, err));
    CHECK_EQ(n, 3);
    CHECK(t && nm);
    wal_memfs_free(fs);
}

TEST(srv_meta_corrupt_middle_refuses)
{
    wal_memfs *fs;
    REQUIRE_OK(wal_memfs_new(&fs));
    write_two(fs);
    uint8_t *p;
    size_t len;
    REQUIRE_OK(wal_memfs_file(fs, LOGF, &p, &len));
    p[20] ^= 1;                                          /* first record's payload */
    uint64_t n = 0;
    int t = 0, nm = 0;
    char err[256];
    CHECK_EQ(reopen(fs, &n, &t, &nm, err), EM_CORRUPT);
    CHECK(strstr(err, LOGF) != NULL);
    CHECK(strstr(err, "offset 0") != NULL);
    wal_memfs_free(fs);
}

TEST(srv_meta_failed_fsync_is_sticky)
{
    wal_memfs *fs;
    REQUIRE_OK(wal_memfs_new(&fs));
    bin_registry *reg = bin_registry_new();
    srv_meta *m = NULL;
    char err[256] = "";
    REQUIRE_OK(srv_meta_open(&m, wal_memfs_ops(fs), "/m", reg, err, sizeof err));
    wal_memfs_fault(fs, WAL_FAULT_FSYNC, 1, EIO, 0, 0);
    CHECK(srv_meta_append(m, SRV_META_TYPE, person_meta, sizeof person_meta) < 0);
    CHECK(srv_meta_append(m, SRV_META_NAME, name_rec, sizeof name_rec) < 0);
    srv_meta_close(m);
    bin_registry_free(reg);
    wal_memfs_free(fs);
}

/* open_state: a fresh open of the log; its replayed cluster state. */
static int open_state(wal_memfs *fs, int *state, srv_meta **keep)
{
    bin_registry *reg = bin_registry_new();
    srv_meta *m = NULL;
    char err[256] = "";
    int rc = srv_meta_open(&m, wal_memfs_ops(fs), "/m", reg, err, sizeof err);
    if (!rc)
        *state = srv_meta_state(m);
    if (!rc && keep)
        *keep = m;
    else
        srv_meta_close(m);
    bin_registry_free(reg);
    return rc;
}

TEST(srv_meta_cluster_state_last_record_wins)
{
    wal_memfs *fs;
    REQUIRE_OK(wal_memfs_new(&fs));
    int st = 9;
    srv_meta *m = NULL;
    REQUIRE_OK(open_state(fs, &st, &m));
    CHECK_EQ(st, -1);                               /* never set: none */
    uint8_t b = 1;
    CHECK_OK(srv_meta_append(m, SRV_META_STATE, &b, 1));
    CHECK_OK(srv_meta_append(m, SRV_META_TYPE, person_meta, sizeof person_meta));
    b = 2;
    CHECK_OK(srv_meta_append(m, SRV_META_STATE, &b, 1));
    srv_meta_close(m);
    wal_memfs *after;
    REQUIRE_OK(wal_memfs_crash(fs, 0.0, 1, &after));
    CHECK_OK(open_state(after, &st, NULL));
    CHECK_EQ(st, 2);
    wal_memfs_free(after);
    /* a state byte out of range is a corrupt record */
    REQUIRE_OK(open_state(fs, &st, &m));
    b = 7;
    CHECK_OK(srv_meta_append(m, SRV_META_STATE, &b, 1));
    b = 0;
    CHECK_OK(srv_meta_append(m, SRV_META_STATE, &b, 1));
    srv_meta_close(m);
    CHECK(open_state(fs, &st, NULL) != 0);
    wal_memfs_free(fs);
}
