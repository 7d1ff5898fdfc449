/* fuzz_proto.c - the thin-client protocol decoder (framing, handshake,
 * request dispatch, every op handler) fed arbitrary bytes in-process, the
 * way net/ would deliver them: in chunks, keeping unconsumed bytes, with the
 * reply buffer drained between chunks.  A fresh store, registry and
 * connection per input; everything is freed, so leaks show under ASan.
 * Seeds: tests/fuzz/corpus/fuzz_proto/ (wire captures of reference §8).
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "binary/binary.h"
#include "proto/proto.h"
#include "store/store.h"
#include "util/buf.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    st_store *st = NULL;
    if (st_open(&st, NULL))
        return 0;
    bin_registry *reg = bin_registry_new();
    pr_options o;
    pr_options_default(&o);
    o.max_msg = 1u << 20;
    o.max_cursors = 4;
    o.debug_ops = 1;
    memset(o.node_id, 0x5a, sizeof o.node_id);
    pr_server *ps = NULL;
    pr_conn *c = NULL;
    if (!reg || pr_server_new(&ps, st, reg, &o) || !(c = pr_conn_new(ps)))
        goto done;

    /* Chunk size from the input length: deterministic, and varied across
     * inputs so frames are split at many different points. */
    size_t chunk = 1 + size % 97;
    em_buf in = EM_BUF_INIT, out = EM_BUF_INIT;
    size_t pos = 0;
    while (pos < size) {
        size_t n = size - pos < chunk ? size - pos : chunk;
        if (em_buf_append(&in, data + pos, n))
            break;
        pos += n;
        size_t used = 0;
        int rc = pr_feed(c, in.p, in.len, &out, 1u << 20, &used);
        if (used > in.len)
            abort();                /* the decoder must never overrun */
        memmove(in.p, in.p + used, in.len - used);
        in.len -= used;
        em_buf_reset(&out);         /* as if sent */
        if (rc < 0)
            break;                  /* the server would close here */
    }
    em_buf_free(&in);
    em_buf_free(&out);
done:
    pr_conn_free(c);
    pr_server_free(ps);
    if (reg)
        bin_registry_free(reg);
    st_close(st);
    return 0;
}
