/* fuzz_wal.c - libFuzzer target for everything that reads WAL bytes
 * (src/wal/): the update command decoder, the frame scanner, and recovery
 * itself, read-only over the input as a segment file and as a checkpoint
 * file on the in-memory file layer, into a real store (wal_recover, as
 * emberd starts).  Whatever recovery accepted is then used as a server
 * would: every stored key hashed, every stored value turned into its reply
 * form.  Must never crash, leak or hang; malformed input ends in an error
 * code. */
#include "binary/binary.h"
#include "store/store.h"
#include "util/err.h"
#include "util/mem.h"
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

/* ---- use what recovery stored ------------------------------------------ */

typedef struct use_ctx { em_buf out; uint64_t sum; } use_ctx;

static int use_entry(void *arg, const uint8_t *k, size_t klen, const uint8_t *v, size_t vlen)
{
    use_ctx *u = arg;
    u->sum += (uint32_t)bin_hash(k) + klen;      /* what a lookup of the key computes */
    em_buf_reset(&u->out);
    return bin_wire_out(v, vlen, &u->out) == EM_NOMEM ? EM_NOMEM : 0;   /* a GET reply */
}

static void use_cache(void *arg, st_cache *c)
{
    st_scan *sc;
    if (st_scan_open(c, -1, &sc))
        return;
    int more = 1;
    while (more && st_scan_next_page(sc, 256, use_entry, arg, &more) == 0)
        ;
    st_scan_close(sc);
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
        st_options so = {{"default", 0, 0}};
        st_store *s = NULL;
        if (st_open(&s, &so) == 0 && wal_open(&w, &o) == 0) {
            if (wal_recover(w, s) == 0) {
                use_ctx u = {EM_BUF_INIT, 0};
                st_cache_each(s, use_cache, &u);
                em_buf_free(&u.out);
            }
            wal_close(w);
        }
        st_close(s);
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
