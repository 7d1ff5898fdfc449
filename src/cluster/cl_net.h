/* cl_net.h - node-to-node transport: frames, message types, the handshake.
 *
 * Every byte on the cluster port arrives in a frame (little-endian):
 *
 *   offset  size  field
 *   0       4     length: bytes of type + payload (2 .. max_frame)
 *   4       2     type: one of CL_NET_MSG_LIST
 *   6       n     payload (n = length - 2)
 *
 * A link opens with a handshake, two frames each way (HELLO, then AUTH); no
 * other frame is accepted before it completes.  HELLO payload:
 *
 *   offset  size  field
 *   0       4     magic "EMBC"
 *   4       2     protocol version (CL_NET_VERSION)
 *   6       2     flags: bit 0 = the sender has a cluster secret
 *   8       16    node id (UUID msb, lsb)
 *   24      8     topology major version
 *   32      4     topology minor version
 *   36      16    nonce: random, the peer's proof covers it
 *   52      1+n   cluster name (u8 length, 1..CL_NET_MAX_NAME bytes)
 *   ..      1+n   consistent id (u8 length, 1..CL_NET_MAX_NAME bytes)
 *
 * AUTH payload: 32 bytes HMAC-SHA256(secret, role byte | peer's nonce | own
 * node id), role 'C' from the connecting side and 'A' from the accepting
 * one, so a proof cannot be reflected back; 0 bytes when no secret is set.
 * A peer with another cluster name, another protocol version or a proof that
 * fails is refused and the link closed; the rest of the cluster is untouched.
 */
#ifndef EM_CL_NET_H
#define EM_CL_NET_H

#include <stddef.h>
#include <stdint.h>

#include "util/buf.h"

#define CL_NET_VERSION    1
#define CL_NET_MAX_NAME   255
#define CL_NET_HDR        6
#define CL_NET_NONCE      16
#define CL_NET_PROOF      32
/* Default bound on one frame: a full partition map of a large cluster fits
 * (compressed); anything bigger is a broken or hostile peer. */
#define CL_NET_MAX_FRAME_DEFAULT (64u << 20)

/* Message types: X(NAME, value).  Values are on the wire: never reuse one. */
#define CL_NET_MSG_LIST(X)      \
    X(HELLO,        1)          \
    X(AUTH,         2)          \
    X(PING,         3)          \
    X(PONG,         4)          \
    X(META,         16)         \
    X(PME_SINGLE,   32)         \
    X(PME_FULL,     33)         \
    X(REPL_UPDATE,  48)         \
    X(REPL_ACK,     49)         \
    X(FWD_REQ,      64)         \
    X(FWD_RESP,     65)

enum cl_net_msg {
#define CL_NET_ENUM(name, v) CL_NET_MSG_##name = v,
    CL_NET_MSG_LIST(CL_NET_ENUM)
#undef CL_NET_ENUM
};

/* cl_net_msg_name: the type's name ("HELLO"), or NULL for an unknown type. */
const char *cl_net_msg_name(uint16_t type);

/* cl_net_frame: one parsed frame; payload points into the input. */
typedef struct cl_net_frame {
    uint16_t       type;
    const uint8_t *payload;
    size_t         len;      /* payload bytes */
    size_t         total;    /* bytes the frame occupies in the input */
} cl_net_frame;

/* cl_net_frame_parse reads the frame at p[0..n).  Returns 0, EM_AGAIN when
 * more bytes are needed, EM_BADLEN for a length below 2 or above max_frame
 * (known from the first 4 bytes: the link closes before buffering it), or
 * EM_BADOP for a type outside CL_NET_MSG_LIST. */
int cl_net_frame_parse(const uint8_t *p, size_t n, size_t max_frame, cl_net_frame *f);

/* cl_net_frame_begin appends a frame header with the length left open and
 * sets *at; cl_net_frame_end fills the length in once the payload is
 * appended, so a payload is encoded straight into the output buffer. */
int  cl_net_frame_begin(em_buf *b, uint16_t type, size_t *at);
void cl_net_frame_end(em_buf *b, size_t at);

/* cl_net_hello: the HELLO fields.  The strings point into the frame when
 * decoded (valid as long as its input). */
typedef struct cl_net_hello {
    uint16_t    version;
    uint16_t    flags;
    uint64_t    node_msb, node_lsb;
    uint64_t    top_major;
    uint32_t    top_minor;
    uint8_t     nonce[CL_NET_NONCE];
    const char *cluster;     size_t cluster_len;
    const char *consistent;  size_t consistent_len;
} cl_net_hello;
#define CL_NET_HELLO_SECRET 1u

int cl_net_hello_encode(em_buf *b, const cl_net_hello *h);
/* cl_net_hello_decode: 0, or EM_PROTO for a bad magic, EM_TRUNCATED /
 * EM_BADLEN / EM_TRAILING for a malformed payload, EM_BADUTF8 for names that
 * are not UTF-8. */
int cl_net_hello_decode(const uint8_t *p, size_t n, cl_net_hello *h);

/* cl_net_proof computes the AUTH proof: role 'C' or 'A', the nonce the peer
 * sent, the prover's own node id. */
void cl_net_proof(uint8_t out[CL_NET_PROOF], const void *secret, size_t secret_len,
                  char role, const uint8_t peer_nonce[CL_NET_NONCE],
                  uint64_t node_msb, uint64_t node_lsb);

/* cl_net_check_peer decides whether a decoded HELLO may join this node's
 * links: 0, or EM_AUTH with a reason in why (another cluster, version, a
 * secret on one side only). */
int cl_net_check_peer(const cl_net_hello *peer, const char *cluster, size_t cluster_len,
                      int have_secret, char *why, size_t why_len);

/* cl_net_verify_auth checks an AUTH payload against the proof expected
 * from the peer (constant time).  0 or EM_AUTH. */
int cl_net_verify_auth(const uint8_t *p, size_t n, const void *secret, size_t secret_len,
                       char peer_role, const uint8_t my_nonce[CL_NET_NONCE],
                       uint64_t peer_msb, uint64_t peer_lsb);

#endif
