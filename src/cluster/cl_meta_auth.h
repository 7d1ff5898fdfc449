/* cl_meta_auth.h - a raft_uv transport that makes every metadata-group
 * connection prove the cluster secret, and speak TLS, before libraft sees
 * it (wraps raft_uv_tcp; cl_meta_auth.c and cl_meta_tls.c say how).
 * Metadata thread only. */
#ifndef EM_CL_META_AUTH_H
#define EM_CL_META_AUTH_H

#include <raft.h>
#include <raft/uv.h>
#include <stddef.h>
#include <uv.h>

#include "cluster/cl_meta_tls.h"

#define CL_META_AUTH_MS 5000        /* a handshake's bound */

struct cl_meta_auth_hs;

typedef struct cl_meta_auth {
    struct raft_uv_transport outer; /* what raft_uv_init is given */
    struct raft_uv_transport *inner;
    uv_loop_t   *loop;
    uint8_t      secret[256];
    size_t       secret_len;
    raft_id      self;
    raft_uv_accept_cb accept_cb;
    raft_uv_transport_close_cb close_cb;
    struct cl_meta_auth_hs *pending;
    cl_meta_tls_set tls;            /* ctx NULL: no TLS */
    int          closing;
} cl_meta_auth;

/* cl_meta_auth_init sets a up around inner (raft_uv_tcp_init'ed on loop):
 * pass &a->outer to raft_uv_init.  With a secret, each connection proves
 * it; with tls (the cluster's peer context, cluster_tls), each is then
 * encrypted (cl_meta_tls.h).  0, or EM_INVAL for neither, or a secret
 * longer than 256 bytes. */
int cl_meta_auth_init(cl_meta_auth *a, struct raft_uv_transport *inner, uv_loop_t *loop,
                      const char *secret, size_t secret_len, net_tls_ctx *tls);

#endif
