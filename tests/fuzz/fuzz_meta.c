/* fuzz_meta.c - libFuzzer target for the binary metadata log replay
 * (src/server/srv_meta.c; record layout there): the input, after one mode
 * byte, becomes binary-meta.log on the WAL's in-memory file layer and is
 * replayed into a fresh registry, as emberd does at start-up after a crash.
 * Mode bit 0 recomputes each record's CRC32C first, so mutations reach the
 * payload decoders (bin_meta_decode, type names) instead of dying at the
 * checksum.  Checks: a log that opened once (its torn tail cut) opens again
 * with the same record count.  Seeds: tests/fuzz/corpus/fuzz_meta/.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "binary/binary.h"
#include "server/srv_meta.h"
#include "util/buf.h"
#include "util/err.h"
#include "util/hash.h"
#include "util/mem.h"
#include "wal/wal.h"

#define LOG_PATH "/m/binary-meta.log"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* fix_crcs: walk the records (16-byte header, payload length at 8) and
 * store a correct CRC in each whole one; stops at the first bad length. */
static void fix_crcs(uint8_t *p, size_t n)
{
    size_t off = 0;
    while (n - off >= 16) {
        uint32_t l = em_ld32(p + off + 8);
        if (l > n - off - 16)
            break;
        em_st32(p + off + 12, em_crc32c(em_crc32c(0, p + off, 12), p + off + 16, l));
        off += 16 + (size_t)l;
    }
}

/* open_once: 0 and the replayed record count, or the open's error code. */
static int open_once(const wal_fileops *ops, uint64_t *records)
{
    bin_registry *reg = bin_registry_new();
    if (!reg)
        return EM_NOMEM;
    char err[256] = "";
    srv_meta *m = NULL;
    int rc = srv_meta_open(&m, ops, "/m", reg, err, sizeof err);
    if (!rc) {
        *records = srv_meta_records(m);
        srv_meta_close(m);
    }
    bin_registry_free(reg);
    return rc;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size == 0)
        return 0;
    int mode = data[0];
    data++;
    size--;
    wal_memfs *fs = NULL;
    if (wal_memfs_new(&fs))
        return 0;
    const wal_fileops *ops = wal_memfs_ops(fs);
    uint8_t *copy = em_malloc(size ? size : 1);
    int fd = -1;
    if (!copy || ops->mkdir(ops->ctx, "/m") ||
        ops->open(ops->ctx, LOG_PATH, WAL_O_WRITE | WAL_O_CREATE, &fd))
        goto done;
    if (size) {
        memcpy(copy, data, size);
        if (mode & 1)
            fix_crcs(copy, size);
        if (ops->pwrite(ops->ctx, fd, copy, size, 0) != (int64_t)size)
            goto done;
    }
    ops->close(ops->ctx, fd);
    fd = -1;
    uint64_t first = 0, second = 0;
    if (open_once(ops, &first) == 0) {
        /* The log is now cut to its valid prefix: it must replay the same. */
        if (open_once(ops, &second) != 0 || second != first)
            abort();
    }
done:
    if (fd >= 0)
        ops->close(ops->ctx, fd);
    em_free(copy);
    wal_memfs_free(fs);
    return 0;
}
