/* cl_meta_tls.h - TLS on the metadata group's connections (cluster_tls):
 * each connection libraft's transport made, once its preamble (and the
 * cluster secret's proof) is through, is encrypted with the cluster's peer
 * context, and libraft is handed the plaintext end of a local socket pair
 * instead of the TCP stream (cl_meta_tls.c says why).  Metadata thread
 * only. */
#ifndef EM_CL_META_TLS_H
#define EM_CL_META_TLS_H

#include <uv.h>

#include "net/tls.h"

struct cl_meta_tls_conn;

typedef struct cl_meta_tls_set {
    uv_loop_t   *loop;
    net_tls_ctx *ctx;
    struct cl_meta_tls_conn *conns;     /* handshaking and open ones */
} cl_meta_tls_set;

/* done: the handshake is through (plain: the stream libraft reads and
 * writes, allocated with raft_malloc, as libraft frees it) or failed
 * (plain NULL; status EM_PROTO, EM_CLOSED - the peer went away or the set
 * closed -, EM_TIMEOUT or EM_NOMEM). */
typedef void (*cl_meta_tls_cb)(void *arg, uv_stream_t *plain, int status);

/* cl_meta_tls_start runs TLS over stream (a raft_malloc'd TCP stream, owned
 * from here whatever happens): the connecting side if connect.  done is
 * called exactly once, possibly before this returns; 0 or EM_NOMEM (then
 * nothing was taken: the caller still owns stream). */
int  cl_meta_tls_start(cl_meta_tls_set *s, uv_stream_t *stream, int connect, const char *addr,
                       cl_meta_tls_cb done, void *arg);
/* cl_meta_tls_close_all fails the handshakes in progress (EM_CLOSED) and
 * closes every open connection (the transport is closing). */
void cl_meta_tls_close_all(cl_meta_tls_set *s);

#endif
