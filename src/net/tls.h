/* tls.h - TLS for net/'s event loops (OpenSSL): a server context (TLS 1.2
 * and 1.3 only, server certificate, optional client-certificate checks), or
 * a peer context for node-to-node links (both ends, mutual certificates), and
 * non-blocking per-connection wrappers that never block and report what the
 * socket must become ready for next.  A plaintext client on a TLS port fails
 * its handshake (net_tls_handshake_step < 0) and is closed by the loop; nothing
 * else is affected.
 *
 * Event-loop contract:
 *   accept -> net_tls_new(ctx, fd, 0); connected -> net_tls_new(ctx, fd, 1)
 *   while net_tls_handshake_step() == EM_AGAIN: wait for *want (READ/WRITE)
 *   then net_tls_read / net_tls_write in place of recv / send;
 *   after a read, if net_tls_pending() > 0 read again before waiting
 *   (those bytes are already out of the kernel: epoll will not report them);
 *   close: net_tls_close_notify (best effort), net_tls_free, close(fd).
 */
#ifndef EM_NET_TLS_H
#define EM_NET_TLS_H

#include <stddef.h>
#include <sys/types.h>

typedef struct net_tls_ctx net_tls_ctx;
typedef struct net_tls net_tls;

enum net_tls_verify {
    NET_TLS_VERIFY_NONE = 0,      /* no client certificate asked for */
    NET_TLS_VERIFY_OPTIONAL = 1,  /* asked for; if sent, it must verify */
    NET_TLS_VERIFY_REQUIRE = 2,   /* a verified client certificate is required */
};

typedef struct net_tls_options {
    const char *cert_file;        /* PEM certificate chain (server first) */
    const char *key_file;         /* PEM private key; NULL = in cert_file */
    const char *ca_file;          /* PEM CAs for client certificates */
    int         verify_client;    /* enum net_tls_verify */
    const char *ciphers;          /* TLS 1.2 cipher list; NULL = ECDHE/DHE AEAD only */
    const char *ciphersuites;     /* TLS 1.3 suites; NULL = OpenSSL's default */
    int         peer;             /* node-to-node links: the context serves both
                                   * ends (net_tls_new's connect), presents the
                                   * certificate either way and requires a peer
                                   * certificate that verifies against ca_file */
} net_tls_options;

/* Which readiness an EM_AGAIN result waits for. */
enum { NET_TLS_WANT_READ = 1, NET_TLS_WANT_WRITE = 2 };

/* net_tls_ctx_new loads certificates and keys.  Returns 0, or EM_CONFIG with
 * a one-line reason in err (missing file, key does not match, ...). */
int  net_tls_ctx_new(const net_tls_options *o, net_tls_ctx **out, char *err, size_t errlen);
void net_tls_ctx_free(net_tls_ctx *ctx);

/* net_tls_new starts the server side of a connection on the non-blocking
 * socket fd (not owned: the caller closes it), or with connect the client
 * side (a peer context's, once the socket is connected).  0 or EM_NOMEM. */
int  net_tls_new(net_tls_ctx *ctx, int fd, int connect, net_tls **out);
void net_tls_free(net_tls *t);

/* net_tls_handshake_step advances the handshake.  0 = done; EM_AGAIN = wait
 * for *want; EM_CLOSED = the peer went away; EM_PROTO = the handshake failed
 * (plaintext client, protocol version below 1.2, certificate refused, ...):
 * net_tls_errstr() says why.  Close the connection on any negative result. */
int  net_tls_handshake_step(net_tls *t, int *want);

/* net_tls_read: > 0 bytes read into buf; 0 = the peer closed (close_notify
 * or EOF); EM_AGAIN = nothing now, wait for *want; EM_PROTO / -errno on
 * failure. */
ssize_t net_tls_read(net_tls *t, void *buf, size_t n, int *want);

/* net_tls_write: > 0 bytes taken from buf (may be fewer than n); EM_AGAIN =
 * wait for *want and call again with the same bytes (the buffer may have
 * moved: the context allows it); EM_CLOSED / EM_PROTO / -errno on failure. */
ssize_t net_tls_write(net_tls *t, const void *buf, size_t n, int *want);

/* Memory mode, for a loop that owns the socket itself (libuv's): the
 * caller moves the ciphertext.  net_tls_new_mem starts a side as
 * net_tls_new does, without a socket; net_tls_feed hands it the bytes that
 * arrived; handshake_step / read / write work as above (EM_AGAIN with
 * NET_TLS_WANT_READ: feed more); after every call, send what net_tls_take
 * returns (net_tls_outbound: how much waits).  0 or EM_NOMEM. */
int    net_tls_new_mem(net_tls_ctx *ctx, int connect, net_tls **out);
int    net_tls_feed(net_tls *t, const void *p, size_t n);
size_t net_tls_take(net_tls *t, void *buf, size_t n);
size_t net_tls_outbound(const net_tls *t);

/* net_tls_pending: decrypted bytes buffered inside the TLS layer. */
size_t net_tls_pending(const net_tls *t);

/* net_tls_close_notify sends the TLS close alert without waiting for the
 * peer's (best effort; a full socket buffer just skips it). */
void net_tls_close_notify(net_tls *t);

/* net_tls_version: "TLSv1.3", "TLSv1.2" (after the handshake). */
const char *net_tls_version(const net_tls *t);

/* net_tls_peer_subject writes the client certificate's subject (one line)
 * or "" if none.  Returns 1 if a verified certificate was presented. */
int  net_tls_peer_subject(const net_tls *t, char *buf, size_t n);

/* net_tls_errstr: the reason of this thread's last failure (static per
 * thread, valid until the next net_tls_ call on the thread). */
const char *net_tls_errstr(void);

#endif
