/* fuzz_clmeta.c - libFuzzer target for the metadata group's entries and
 * snapshots (src/cluster/cl_meta_fsm.c; layouts in cl_meta_fsm.h), which
 * arrive from other members through Raft.  The input is a sequence of
 * entries, each prefixed by a 2-byte length; every one is decoded and
 * applied to a state at increasing log indexes, and at the end the state's
 * snapshot must restore to a state whose snapshot is the same bytes.  A
 * trailing remainder that is not a whole entry is restored as a snapshot
 * (it must be refused or restore cleanly).  Seeds: tests/fuzz/corpus/fuzz_clmeta/.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "cluster/cl_meta_fsm.h"
#include "util/buf.h"
#include "util/err.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    cl_meta_fsm f, g;
    cl_meta_fsm_init(&f);
    cl_meta_fsm_init(&g);
    size_t off = 0;
    uint64_t index = 1;
    while (size - off >= 2) {
        size_t len = (size_t)data[off] | (size_t)data[off + 1] << 8;
        if (len > size - off - 2)
            break;
        cl_meta_entry e;
        (void)cl_meta_entry_decode(data + off + 2, len, &e);
        cl_meta_effect eff;
        if (cl_meta_fsm_apply(&f, index++, data + off + 2, len, NULL, &eff) != 0)
            break;                          /* only EM_NOMEM, state unchanged */
        off += 2 + len;
    }
    if (off < size) {
        /* Whatever is left is tried as a snapshot on the side. */
        cl_meta_fsm h;
        cl_meta_fsm_init(&h);
        (void)cl_meta_fsm_restore(&h, data + off, size - off);
        cl_meta_fsm_free(&h);
    }
    em_buf a = EM_BUF_INIT, b = EM_BUF_INIT;
    if (cl_meta_fsm_snapshot(&f, &a) == 0) {
        if (cl_meta_fsm_restore(&g, a.p, a.len) != 0)
            abort();                        /* our own snapshot must restore */
        if (cl_meta_fsm_snapshot(&g, &b) != 0 || a.len != b.len || memcmp(a.p, b.p, a.len))
            abort();
    }
    em_buf_free(&a);
    em_buf_free(&b);
    cl_meta_fsm_free(&f);
    cl_meta_fsm_free(&g);
    return 0;
}
