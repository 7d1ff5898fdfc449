/* fuzz_cluster.c - libFuzzer target for the cluster port's decoders
 * (src/cluster/cl_net_codec.c; layouts in cl_net.h): the input is read as
 * the byte stream a peer sends, frame after frame, the way a link consumes
 * it.  Checks: a HELLO that decodes re-encodes to the same bytes; an AUTH
 * never verifies against a proof nobody computed.  Seeds:
 * tests/fuzz/corpus/fuzz_cluster/.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "cluster/cl_net.h"
#include "util/buf.h"
#include "util/err.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static const uint8_t nonce[CL_NET_NONCE] = { 7 };
    em_buf b = EM_BUF_INIT;
    size_t off = 0;
    for (int frames = 0; frames < 64 && off < size; frames++) {
        cl_net_frame f;
        if (cl_net_frame_parse(data + off, size - off, 1u << 20, &f) != 0)
            break;
        if (f.total > size - off || f.len + CL_NET_HDR != f.total)
            abort();
        if (f.type == CL_NET_MSG_HELLO) {
            cl_net_hello h;
            if (cl_net_hello_decode(f.payload, f.len, &h) == 0) {
                em_buf_reset(&b);
                if (cl_net_hello_encode(&b, &h) != 0 || b.len != f.total ||
                    memcmp(b.p + CL_NET_HDR, f.payload, f.len) != 0)
                    abort();
            }
        } else if (f.type == CL_NET_MSG_AUTH) {
            if (f.len == CL_NET_PROOF &&
                cl_net_verify_auth(f.payload, f.len, "k", 1, 'C', nonce, 1, 2) == 0) {
                uint8_t want[CL_NET_PROOF];
                cl_net_proof(want, "k", 1, 'C', nonce, 1, 2);
                if (memcmp(want, f.payload, CL_NET_PROOF) != 0)
                    abort();
            }
        }
        off += f.total;
    }
    em_buf_free(&b);
    return 0;
}
