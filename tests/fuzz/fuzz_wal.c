/* fuzz_wal.c - libFuzzer target for everything that reads WAL bytes
 * (src/wal/): the update command decoder, the frame scanner, and recovery
 * itself run read-only over the input as a segment file, and as a checkpoint
 * file, on the in-memory file layer.  Must never crash, leak or hang;
 * malformed input ends in an error code. */
#include "util/err.h"
#include "wal/wal.h"

#include <stdint.h>
#include <string.h>

static int count_apply(void *arg, const st_update *u)
{
    uint64_t *n = arg;
    *n += u->klen + u->vlen + (u->cfg ? 1 : 0);
    return 0;
}

static int frame_cb(void *arg, size_t off, const wal_frame *f)
{
    (void)off;
    wal_cmd c;
    st_update u;
    st_cache_config cfg;
    if (f->type == WAL_REC_UPDATE && wal_cmd_unmarshal(f->body, f->body_len, &c) == 0 &&
        wal_decode_update(&c, &u, &cfg) == 0)
        count_apply(arg, &u);
    return 0;
}

static void replay_as(const char *name, const uint8_t *data, size_t size)
{
    wal_memfs *fs;
    if (wal_memfs_new(&fs))
        return;
    const wal_fileops *ops = wal_memfs_ops(fs);
    int fd;
    if (ops->open(ops->ctx, name, WAL_O_WRITE | WAL_O_CREATE, &fd) == 0) {
        if (size)
            ops->pwrite(ops->ctx, fd, data, size, 0);
        ops->close(ops->ctx, fd);
        wal_options o;
        memset(&o, 0, sizeof o);
        o.dir = "/f";
        o.read_only = 1;
        o.ops = ops;
        wal *w;
        uint64_t n = 0;
        if (wal_open(&w, &o) == 0) {
            wal_replay(w, count_apply, &n);
            wal_close(w);
        }
    }
    wal_memfs_free(fs);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    wal_cmd c;
    uint64_t n = 0;
    if (wal_cmd_unmarshal(data, size, &c) == 0) {
        wal_row_iter it = {0, 0};
        wal_row r;
        while (wal_cmd_next_row(&c, &it, &r))
            n += r.len;
        st_update u;
        st_cache_config cfg;
        if (wal_decode_update(&c, &u, &cfg) == 0)
            count_apply(&n, &u);
    }
    wal_scan_res res;
    wal_scan(data, size, 0, 0, frame_cb, &n, &res);
    replay_as("/f/wal-0000000000000000.seg", data, size);
    replay_as("/f/ckpt-0000000000000000.ckpt", data, size);
    return 0;
}
