/* stress.h - wire helpers shared by the reliability drivers (ember-adversary,
 * ember-soak): raw sockets to a running emberd, frame and value builders,
 * reply parsing for both response-header styles, and /proc sampling of the
 * server's RSS and open descriptors.  Wire layouts:
 * shared/reference/ignite-thin-protocol.md §1 (framing, handshake, headers),
 * §2 (ops), §3 (values).  Prefix sx_.
 */
#ifndef EM_STRESS_H
#define EM_STRESS_H

#include "util/buf.h"

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

/* Op codes the drivers use (reference §2.1). */
enum {
    SX_OP_RESOURCE_CLOSE = 0, SX_OP_HEARTBEAT = 1,
    SX_OP_GET = 1000, SX_OP_PUT = 1001, SX_OP_GET_ALL = 1003, SX_OP_PUT_ALL = 1004,
    SX_OP_REPLACE_IF_EQUALS = 1010, SX_OP_CONTAINS_KEY = 1011, SX_OP_CLEAR = 1013,
    SX_OP_REMOVE_KEY = 1016, SX_OP_GET_SIZE = 1020,
    SX_OP_GET_NAMES = 1050, SX_OP_CREATE_WITH_NAME = 1051,
    SX_OP_GET_OR_CREATE_WITH_NAME = 1052, SX_OP_DESTROY = 1056,
    SX_OP_SCAN = 2000, SX_OP_SCAN_PAGE = 2001,
    SX_OP_GET_BINARY_TYPE = 3002, SX_OP_PUT_BINARY_TYPE = 3003
};

/* ---- sockets ------------------------------------------------------------ */

/* sx_connect: blocking TCP connection to 127.0.0.1:port with TCP_NODELAY.
 * Returns the descriptor or -errno. */
int sx_connect(int port);
/* sx_write_all writes n bytes, waiting at most timeout_ms in total.
 * 0, -errno, or EM_TIMEOUT. */
int sx_write_all(int fd, const void *p, size_t n, int timeout_ms);
/* sx_read_frame reads one frame body (without the 4-byte length) into *in
 * (reset first).  0, EM_CLOSED (EOF/reset), EM_TIMEOUT, or EM_BADLEN when the
 * declared length is < 0 or > max. */
int sx_read_frame(int fd, em_buf *in, int timeout_ms, size_t max);
/* sx_wait_closed: 1 if the peer closes within timeout_ms (anything it sends
 * meanwhile is discarded), 0 if the connection is still open after it. */
int sx_wait_closed(int fd, int timeout_ms);

/* ---- frames ------------------------------------------------------------- */

#define SX_VER(a, b, c) ((a) * 10000 + (b) * 100 + (c))

/* sx_hs_msg appends a complete handshake frame: version a.b.c, client code
 * cc, and (>= 1.7.0) a feature array of nfeat bytes. */
void sx_hs_msg(em_buf *b, int a, int bb, int c, int cc, const uint8_t *feat, int nfeat);

/* sx_req_begin appends length placeholder, op code and request id; returns
 * the offset of the frame in b, for sx_req_end to patch the length. */
size_t sx_req_begin(em_buf *b, int op, int64_t rid);
void   sx_req_end(em_buf *b, size_t start);

void sx_put_u8(em_buf *b, uint8_t v);
void sx_put_i16(em_buf *b, int16_t v);
void sx_put_i32(em_buf *b, int32_t v);
void sx_put_i64(em_buf *b, int64_t v);
void sx_put_raw(em_buf *b, const void *p, size_t n);
void sx_v_int(em_buf *b, int32_t v);
void sx_v_strn(em_buf *b, const void *s, size_t n);
void sx_v_str(em_buf *b, const char *s);
void sx_v_null(em_buf *b);
/* sx_cache_hdr: cache id + flags byte 0 (reference §2.2). */
void sx_cache_hdr(em_buf *b, int32_t cache_id);
int32_t sx_cache_id(const char *name);

/* A parsed reply.  p/n point into the frame body. */
typedef struct sx_reply {
    int64_t        rid;
    int32_t        status;      /* 0 = success */
    int            topo_changed;    /* >= 1.4.0: the header's AFFINITY_TOPOLOGY_CHANGED, */
    int64_t        topo_major;      /* with the new version */
    int32_t        topo_minor;
    const uint8_t *p;
    size_t         n;
} sx_reply;

/* sx_parse_reply parses a response body; flags_hdr selects the >= 1.4.0
 * header.  0 or EM_TRUNCATED. */
int sx_parse_reply(const uint8_t *p, size_t n, int flags_hdr, sx_reply *r);

/* ---- a blocking connection ------------------------------------------------ */

typedef struct sx_conn {
    int     fd;
    int     ver;
    int     flags_hdr;
    int64_t rid;
    em_buf  in;
    em_buf  out;
} sx_conn;

/* sx_open connects and handshakes at version a.b.c (1.7.0 sends an empty
 * feature array).  0, or negative (EM_PROTO if the server refused). */
int  sx_open(sx_conn *c, int port, int a, int b, int cc);
/* sx_open_addr: the same to ip:port (IPv4, numeric), connect and handshake
 * each bounded by timeout_ms. */
int  sx_open_addr(sx_conn *c, const char *ip, int port, int timeout_ms, int a, int b, int cc);
/* sx_connect_addr: a blocking descriptor once connected (within timeout_ms). */
int  sx_connect_addr(const char *ip, int port, int timeout_ms);
void sx_close(sx_conn *c);
/* sx_call sends c->out (a finished request) and reads its reply within
 * timeout_ms; checks the echoed request id (EM_PROTO on mismatch). */
int  sx_call(sx_conn *c, sx_reply *r, int timeout_ms);
/* sx_create_cache: GET_OR_CREATE_WITH_NAME.  0, negative, or the status. */
int  sx_create_cache(sx_conn *c, const char *name);

/* ---- reading values ----------------------------------------------------- */

typedef struct sx_rd {
    const uint8_t *p;
    size_t n, pos;
    int err;
} sx_rd;

uint8_t sx_rd_u8(sx_rd *d);
int32_t sx_rd_i32(sx_rd *d);
int64_t sx_rd_i64(sx_rd *d);
/* sx_rd_skip_value skips one data object of the simple kinds the drivers
 * store (int, long, string, byte array, null, bool); sets err otherwise. */
void sx_rd_skip_value(sx_rd *d);

/* sx_part_owners: CACHE_PARTITIONS (1101) for one cache: own[p] = the
 * primary's node id (msb, lsb) and have[p] = 1 for each partition p named
 * (below max), *maxp the highest.  0, or 1 for a malformed reply (or a
 * partition twice), or the call's error / status. */
int sx_part_owners(sx_conn *c, int32_t cache_id, int timeout_ms, uint64_t (*own)[2],
                   uint8_t *have, int32_t max, int32_t *maxp);

/* ---- the server's resources ----------------------------------------------- */

/* sx_proc_rss_kb: VmRSS of pid in KiB, or -1. */
long sx_proc_rss_kb(pid_t pid);
/* sx_proc_fds: number of open descriptors of pid, or -1. */
long sx_proc_fds(pid_t pid);
/* sx_proc_alive: 1 if pid exists and is not a zombie. */
int  sx_proc_alive(pid_t pid);

/* ---- misc ----------------------------------------------------------------- */

/* xorshift64* generator: deterministic per seed, never returns 0 state. */
static inline uint64_t sx_rand(uint64_t *s)
{
    uint64_t x = *s;
    x ^= x >> 12; x ^= x << 25; x ^= x >> 27;
    *s = x;
    return x * 0x2545F4914F6CDD1DULL;
}

double sx_now_s(void);
/* sx_raise_nofile raises RLIMIT_NOFILE to at least want (up to the hard
 * limit); returns the new soft limit. */
long sx_raise_nofile(long want);

#endif
