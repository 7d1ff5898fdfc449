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
 * fails is refused: a REFUSED frame (payload: the reason, UTF-8 text) goes
 * back, best effort, and the link closes; the rest of the cluster is
 * untouched.
 */
#ifndef EM_CL_NET_H
#define EM_CL_NET_H

#include <stddef.h>
#include <stdint.h>

#include "util/buf.h"

#define CL_NET_VERSION    4
#define CL_NET_MAX_NAME   255
#define CL_NET_HDR        6
#define CL_NET_NONCE      16
#define CL_NET_PROOF      32
/* Default bound on one frame: a full partition map of a large cluster fits
 * (compressed); anything bigger is a broken or hostile peer. */
#define CL_NET_MAX_FRAME_DEFAULT (64u << 20)
/* Before the handshake: HELLO is at most 52 + 2 * 256 bytes, AUTH 32. */
#define CL_NET_MAX_HANDSHAKE_FRAME 1024u

/* Message types: X(NAME, value).  Values are on the wire: never reuse one. */
#define CL_NET_MSG_LIST(X)      \
    X(HELLO,        1)          \
    X(AUTH,         2)          \
    X(PING,         3)          \
    X(PONG,         4)          \
    X(REFUSED,      5)          \
    X(META,         16)         \
    X(JOIN_REQ,     17)         \
    X(LEAVE_REQ,    18)         \
    X(META_RESP,    19)         \
    X(NOT_MEMBER,   20)         \
    X(PME_SINGLE,   32)         \
    X(PME_FULL,     33)         \
    X(PME_SREQ,     34)         \
    X(PME_FREQ,     35)         \
    X(REPL_UPDATE,  48)         \
    X(REPL_ACK,     49)         \
    X(REPL_FENCED,  54)         \
    X(REPL_TAKEOVER, 55)        \
    X(REPL_TAKEN,   56)         \
    X(REBAL_DEMAND, 50)         \
    X(REBAL_SUPPLY, 51)         \
    X(REBAL_DONE,   52)         \
    X(REBAL_STALE,  53)         \
    X(FWD_REQ,      64)         \
    X(FWD_RESP,     65)         \
    X(TX_WAKE,      66)

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
/* cl_net_frame_hdr writes the header of a frame with len payload bytes
 * (a payload sent from its own buffer). */
void cl_net_frame_hdr(uint8_t h[CL_NET_HDR], uint16_t type, size_t len);

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

/* ---- the transport (cl_net.c) -------------------------------------------
 *
 * One net/ server for the cluster port with one loop thread: every callback
 * below runs on that thread, in the order frames arrived per link.  Any
 * thread may send; a send is posted to the loop and leaves in posting order.
 */
typedef struct cl_net cl_net;
typedef struct cl_net_link cl_net_link;

/* What the fault hook decides for one outgoing frame (handshake frames are
 * never touched): tests use it for drops, delays (and so reordering) and
 * duplicates on top of real kills and firewall partitions. */
enum cl_net_fault { CL_NET_PASS, CL_NET_DROP, CL_NET_DUP, CL_NET_DELAY };
typedef int (*cl_net_fault_fn)(void *arg, uint64_t to_msb, uint64_t to_lsb,
                               uint16_t type, uint32_t *delay_ms);

typedef struct cl_net_opts {
    const char *host;            /* cluster port address (numeric), NULL = 127.0.0.1 */
    int         port;            /* 0 = any free port (cl_net_port) */
    const char *cluster;         /* cluster name, 1..255 bytes */
    const void *secret;          /* NULL/0 = no secret */
    size_t      secret_len;
    uint64_t    node_msb, node_lsb;
    const char *consistent;      /* consistent id, 1..255 bytes */
    size_t      max_frame;       /* 0 = CL_NET_MAX_FRAME_DEFAULT */
    uint32_t    handshake_ms;    /* 0 = 10 000 */
    uint32_t    heartbeat_ms;    /* PING after this long without sending; 0 = 1 000 */
    uint32_t    link_timeout_ms; /* close a link silent this long; 0 = 10 000 */
    void       *arg;
    /* on_up: the handshake completed; link is valid until on_down. */
    void (*on_up)(void *arg, cl_net_link *l, const cl_net_hello *peer);
    /* on_frame: one frame of an up link (PING excepted); p valid during the call. */
    void (*on_frame)(void *arg, cl_net_link *l, uint16_t type, const uint8_t *p, size_t n);
    /* on_down: a link closed; was_up tells whether on_up had run for it.  A
     * refused peer or failed connect arrives here with was_up 0 and why. */
    void (*on_down)(void *arg, cl_net_link *l, int was_up, const char *why);
    /* on_tick (optional): every timer scan of the loop (about 200 ms). */
    void (*on_tick)(void *arg, uint64_t now_ms);
    /* on_pass_end (optional): the end of every pass of the loop, before
     * the links written to directly during it are flushed. */
    void (*on_pass_end)(void *arg);
    cl_net_fault_fn fault;       /* NULL = pass everything */
    void           *fault_arg;
    struct net_tls_ctx *tls;     /* a peer context (net/tls.h): every link in TLS,
                                  * both ways; NULL = plaintext (borrowed) */
} cl_net_opts;

/* cl_net_start listens and starts the loop.  0, EM_INVAL, -errno, EM_NOMEM.
 * cl_net_stop closes every link (on_down for each) and joins the loop. */
int  cl_net_start(cl_net **out, const cl_net_opts *o);
void cl_net_stop(cl_net *n);
int  cl_net_port(const cl_net *n);

/* cl_net_connect opens a link to host:port (numeric).  Any thread. */
int  cl_net_connect(cl_net *n, const char *host, int port);

/* cl_net_send queues one frame for the up link to node (msb, lsb); the
 * payload is copied into a pooled block (a steady stream allocates
 * nothing).  Any thread.  A frame for a node with no up link when it
 * reaches the loop is dropped and counted (cl_net_stats).  0 or EM_NOMEM. */
int  cl_net_send(cl_net *n, uint64_t msb, uint64_t lsb, uint16_t type,
                 const void *payload, size_t len);

/* cl_net_link_send: the same from the loop thread on a link it holds. */
int  cl_net_link_send(cl_net_link *l, uint16_t type, const void *payload, size_t len);

/* cl_net_post runs fn(arg, cancelled) on the loop thread (see net_post). */
int  cl_net_post(cl_net *n, void (*fn)(void *arg, int cancelled), void *arg);

/* Link facts, loop thread only. */
void cl_net_link_peer(const cl_net_link *l, uint64_t *msb, uint64_t *lsb);
int  cl_net_link_outgoing(const cl_net_link *l);
/* cl_net_link_canonical: 1 for the link opened by the smaller node id, the
 * one that stays when both nodes connected (a joining node's link to its
 * seed is often the other one: it closes once the seed dials back, and the
 * frames it held unread go with it). */
int  cl_net_link_canonical(const cl_net_link *l);
void cl_net_link_addr(const cl_net_link *l, char *buf, size_t len);
/* cl_net_peer_rx_ms: when the up link to node (msb, lsb) last received a
 * frame (PINGs included), on em_now_ms's clock; 0 when no link is up.
 * Loop thread only. */
uint64_t cl_net_peer_rx_ms(cl_net *n, uint64_t msb, uint64_t lsb);

/* cl_net_link_close closes the link (on_down follows with why): a frame
 * that decoded but broke the protocol of a module above the transport. */
void cl_net_link_close(cl_net_link *l, const char *why);

typedef struct cl_net_stats {
    uint64_t frames_out, frames_in, dropped_no_link, fault_dropped,
             fault_duplicated, fault_delayed, refused, links_up;
} cl_net_stats;
/* cl_net_mem_stats: the loop thread's allocation counters (net_mem_stats). */
struct em_mem_stats;
void cl_net_mem_stats(cl_net *n, struct em_mem_stats *sum);

/* cl_net_stats_get: counters (read with relaxed atomics; any thread). */
void cl_net_stats_get(const cl_net *n, cl_net_stats *s);

#endif
