/* fuzz_txc.c - libFuzzer target for the payload of PR_OP_TX_CALL, the
 * messages of transactions across cluster nodes (src/proto/proto_txp.c):
 * pr_txc_check, which the handler runs before anything of a message is
 * used, must accept or refuse any bytes without reading past them; a
 * payload it accepts is walked again the way the handler reads it.  Seeds:
 * tests/fuzz/corpus/fuzz_txc/.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "proto/proto.h"
#include "util/buf.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    /* a copy of exactly size bytes: ASan sees any read past the end */
    uint8_t *p = malloc(size ? size : 1);
    if (!p)
        return 0;
    memcpy(p, data, size);
    int rc = pr_txc_check(p, size);
    if (rc == 0 && size < 35)
        abort();                    /* accepted without a whole header */
    free(p);
    return 0;
}
