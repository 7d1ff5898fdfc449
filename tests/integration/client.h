/* client.h - a small blocking Ignite thin-client for ember's integration tests.
 *
 * Starts emberd processes on free loopback ports (tc_server_*), opens raw
 * connections, performs handshakes at any protocol version with any feature
 * bitmask, frames requests and reads exactly one framed reply at a time, and
 * builds binary values.  Wire layouts: shared/reference/ignite-thin-protocol.md
 * §1 (framing, handshake, headers), §2 (ops), §3 (values).
 */
#ifndef TC_CLIENT_H
#define TC_CLIENT_H

#include "util/buf.h"

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

/* ---- emberd processes ------------------------------------------------- */

/* emberd flags the tests pass (src/server/ defines them). */
#define TC_FLAG_HANDSHAKE_TIMEOUT "--handshake-timeout"   /* ms */
#define TC_FLAG_MAX_CONNS         "--max-connections"
#define TC_FLAG_THREADS           "--threads"
#define TC_FLAG_DEBUG_OPS         "--debug-ops"

typedef struct tc_server {
    pid_t pid;
    int   port;
} tc_server;

/* tc_now_ms: CLOCK_MONOTONIC in milliseconds; tc_sleep_ms sleeps ms. */
int64_t tc_now_ms(void);
void    tc_sleep_ms(int ms);

/* tc_server_start forks and execs $EMBER_BUILD/emberd (default build/emberd)
 * with --host 127.0.0.1 --port <free port> plus the NULL-terminated extra
 * arguments (may be NULL), then waits until that process itself listens on
 * the port (up to 90 s, or until it exits: then another port is tried, as
 * another process may have taken the first).  Returns 0 or a negative code;
 * on failure nothing is left running. */
int tc_server_start(tc_server *s, const char *const *extra);

/* tc_server_alive: 1 if the process has not exited. */
int tc_server_alive(tc_server *s);

/* tc_server_stop sends SIGTERM and waits up to 90 s (then SIGKILL).
 * Returns the exit status (0 = clean), or 128+signal if it died by a signal,
 * or -1 if it had already exited before the call. */
int tc_server_stop(tc_server *s);

/* tc_server_kill9: SIGKILL and reap (a crash); s->pid is left as it was. */
void tc_server_kill9(tc_server *s);

/* tc_rm_dir removes the regular files directly in path, then path itself. */
void tc_rm_dir(const char *path);

/* ---- connections ---------------------------------------------------- */

typedef struct tc_conn {
    int      fd;
    int      ver;          /* negotiated version as major*10000+minor*100+patch */
    int      flags_hdr;    /* 1 once the >= 1.4.0 response header applies */
    int64_t  rid;          /* next request id */
    uint8_t  features[16]; /* negotiated feature bytes (>= 1.7.0) */
    int      nfeatures;
    uint8_t  node_id[16];  /* from the >= 1.4.0 handshake reply */
    int      has_node_id;
    em_buf   in;           /* body of the last frame read */
} tc_conn;

#define TC_VER(a, b, c) ((a) * 10000 + (b) * 100 + (c))

/* tc_connect opens a TCP connection to 127.0.0.1:port.  0 or -errno. */
int  tc_connect(tc_conn *c, int port);
void tc_close(tc_conn *c);

/* tc_send writes all n bytes (blocking).  0 or -errno. */
int tc_send(tc_conn *c, const void *p, size_t n);

/* tc_recv_frame reads one frame (int length + body) into c->in (body only,
 * without the length).  Waits at most timeout_ms.  0, EM_CLOSED on EOF or
 * reset, EM_TIMEOUT, EM_BADLEN if the declared length is < 0 or > 256 MiB. */
int tc_recv_frame(tc_conn *c, int timeout_ms);

/* tc_wait_closed: 1 if the peer closes (EOF/reset) within timeout_ms while we
 * discard whatever it sends, 0 if the connection is still open afterwards. */
int tc_wait_closed(tc_conn *c, int timeout_ms);

/* tc_handshake_msg appends a complete handshake frame for version a.b.c
 * (features only if >= 1.7.0; feat may be NULL with nfeat >= 0). */
void tc_handshake_msg(em_buf *b, int a, int bb, int cc, const uint8_t *feat, int nfeat);

/* tc_handshake sends a handshake and reads the reply.  Returns 1 on success
 * (c->ver, features and node id filled), 0 on a failure reply (c->in holds it:
 * byte 0, 3 shorts version, typed string message, [int status]), negative on
 * I/O errors. */
int tc_handshake(tc_conn *c, int a, int b, int cc, const uint8_t *feat, int nfeat);

/* tc_open = tc_connect + tc_handshake at 1.2.0 (what Node 1.0.0 speaks). */
int tc_open(tc_conn *c, int port);

/* ---- requests and replies ----------------------------------------------- */

typedef struct tc_reply {
    int64_t        rid;
    int            flags;       /* >= 1.4.0 header flags, else 0 or 1 (error) */
    int            topo_changed;
    int64_t        topo_major;
    int32_t        topo_minor;
    int32_t        status;      /* 0 = success */
    char           msg[512];    /* error message, NUL-terminated (truncated) */
    const uint8_t *p;           /* payload (points into c->in) */
    size_t         n;
} tc_reply;

/* tc_req_begin starts a request frame in b (reset first): length placeholder,
 * op code and request id (c->rid++).  tc_req_end patches the length. */
int64_t tc_req_begin(tc_conn *c, em_buf *b, int op);
void    tc_req_end(em_buf *b);

/* tc_parse_reply parses c->in as a response in c's header format. 0 or
 * EM_TRUNCATED. */
int tc_parse_reply(tc_conn *c, tc_reply *r);

/* tc_call sends the request in b (already finished with tc_req_end), reads one
 * frame within 60 s and parses it.  0 or a negative code (EM_CLOSED, ...).
 * Also checks the echoed request id (EM_PROTO on mismatch). */
int tc_call(tc_conn *c, em_buf *b, tc_reply *r);

/* ---- value builders (append a complete data object) ---------------------- */

void tc_put_u8(em_buf *b, uint8_t v);
void tc_put_i16(em_buf *b, int16_t v);
void tc_put_i32(em_buf *b, int32_t v);
void tc_put_i64(em_buf *b, int64_t v);
void tc_put_bytes(em_buf *b, const void *p, size_t n);

void tc_v_int(em_buf *b, int32_t v);
void tc_v_long(em_buf *b, int64_t v);
void tc_v_bool(em_buf *b, int v);
void tc_v_str(em_buf *b, const char *s);          /* typed string (9) */
void tc_v_strn(em_buf *b, const void *s, size_t n);
void tc_v_null(em_buf *b);
/* tc_v_bytes: byte array (12) of n bytes, all set to fill. */
void tc_v_bytes(em_buf *b, size_t n, uint8_t fill);

/* tc_cache_hdr: cache id + flags byte (no expiry / tx parts). */
void tc_cache_hdr(em_buf *b, int32_t cache_id, uint8_t flags);

/* tc_cache_id: Java String.hashCode of the name. */
int32_t tc_cache_id(const char *name);

/* ---- readers over a reply payload ----------------------------------------- */

typedef struct tc_rd {
    const uint8_t *p;
    size_t         n, pos;
    int            err;
} tc_rd;

static inline tc_rd tc_rd_of(const tc_reply *r) { tc_rd d = {r->p, r->n, 0, 0}; return d; }
uint8_t tc_rd_u8(tc_rd *d);
int16_t tc_rd_i16(tc_rd *d);
int32_t tc_rd_i32(tc_rd *d);
int64_t tc_rd_i64(tc_rd *d);
/* tc_rd_str reads a typed string (or null -> "") into out (NUL-terminated). */
void tc_rd_str(tc_rd *d, char *out, size_t cap);

/* ---- whole operations used by many tests ---------------------------------- */

/* tc_op sends op with body (may be NULL) and fills *r: the reply status,
 * or a negative code when no reply came. */
int tc_op(tc_conn *c, int op, const em_buf *body, tc_reply *r);
/* tc_open_features: connect and handshake at 1.7.0 asking for the feature
 * bits in `features` (ids 0-7); 0 once accepted. */
int tc_open_features(tc_conn *c, int port, uint8_t features);

/* tc_activate: CHANGE_STATE (5001) to ACTIVE, for a persistent emberd's
 * first start (it starts INACTIVE, as Ignite does).  0 or negative / status. */
int tc_activate(tc_conn *c);
/* tc_create_cache: GET_OR_CREATE_WITH_NAME (1052).  0 or negative / status. */
int tc_create_cache(tc_conn *c, const char *name);
/* tc_sql_fields_msg: a QUERY_SQL_FIELDS (2004) request in b: schema PUBLIC,
 * no arguments, page size, timeout (0 = none), no field names. */
void tc_sql_fields_msg(tc_conn *c, em_buf *b, const char *sql, int32_t page,
                       int64_t timeout_ms);
/* tc_put_int_str / tc_get_int_str: PUT / GET of int key -> string value. */
int tc_put_int_str(tc_conn *c, const char *cache, int32_t key, const char *val);
/* tc_get_int_str: 1 if found (copied to out), 0 if null, negative on error. */
int tc_get_int_str(tc_conn *c, const char *cache, int32_t key, char *out, size_t cap);

/* tc_sanity: a well-behaved client opens a new connection, writes and reads
 * back a value in cache "sanity" and closes.  0 if every answer was right. */
int tc_sanity(int port);

/* tc_hex prints n bytes as hex into out (for failure messages). */
const char *tc_hex(const void *p, size_t n, char *out, size_t cap);

/* tc_emberd_path: $EMBER_BUILD/emberd or build/emberd. */
const char *tc_emberd_path(void);

#endif
