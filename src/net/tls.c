/* tls.c - OpenSSL for net/ (server side, and both sides of node-to-node
 * links): context setup (TLS 1.2 minimum,
 * AEAD-only TLS 1.2 ciphers, no compression, no renegotiation) and
 * non-blocking handshake / read / write steps mapped onto ember's codes.
 * Contract with the event loop: tls.h.
 */
#include "net/tls.h"

#include "util/err.h"
#include "util/mem.h"

#include <errno.h>
#include <openssl/err.h>
#include <openssl/ssl.h>
#include <openssl/x509.h>
#include <stdio.h>
#include <string.h>

struct net_tls_ctx {
    SSL_CTX *ssl;
};

struct net_tls {
    SSL *ssl;
};

/* Mozilla "intermediate" style: forward secrecy and AEAD only. */
#define DEFAULT_CIPHERS \
    "ECDHE-ECDSA-AES128-GCM-SHA256:ECDHE-RSA-AES128-GCM-SHA256:" \
    "ECDHE-ECDSA-AES256-GCM-SHA384:ECDHE-RSA-AES256-GCM-SHA384:" \
    "ECDHE-ECDSA-CHACHA20-POLY1305:ECDHE-RSA-CHACHA20-POLY1305:" \
    "DHE-RSA-AES128-GCM-SHA256:DHE-RSA-AES256-GCM-SHA384"

static _Thread_local char tls_err[256];

const char *net_tls_errstr(void) { return tls_err; }

/* take_error moves the first queued OpenSSL error into tls_err and empties
 * the queue: a stale entry would make the next SSL_get_error on this thread
 * report a failure that belongs to another connection. */
static void take_error(const char *fallback)
{
    unsigned long code = ERR_get_error();
    if (code)
        ERR_error_string_n(code, tls_err, sizeof tls_err);
    else
        snprintf(tls_err, sizeof tls_err, "%s", fallback);
    ERR_clear_error();
}

static int ctx_fail(char *err, size_t errlen, const char *what, const char *file)
{
    take_error("unknown error");
    if (err && errlen)
        snprintf(err, errlen, "TLS: %s%s%s: %s", what, file ? " " : "", file ? file : "", tls_err);
    return EM_CONFIG;
}

int net_tls_ctx_new(const net_tls_options *o, net_tls_ctx **out, char *err, size_t errlen)
{
    *out = NULL;
    if (err && errlen)
        err[0] = 0;
    ERR_clear_error();
    if (!o->cert_file) {
        if (err && errlen)
            snprintf(err, errlen, "TLS: a server certificate (tls_cert) is required");
        return EM_CONFIG;
    }
    if ((o->verify_client || o->peer) && !o->ca_file) {
        if (err && errlen)
            snprintf(err, errlen, o->peer ? "TLS: node-to-node links check each other's "
                                            "certificates: a CA file (tls_ca) is required"
                                          : "TLS: client certificate checks need a CA file (tls_ca)");
        return EM_CONFIG;
    }
    SSL_CTX *s = SSL_CTX_new(o->peer ? TLS_method() : TLS_server_method());
    if (!s)
        return ctx_fail(err, errlen, "cannot create context", NULL);
    int rc = 0;
    if (SSL_CTX_set_min_proto_version(s, TLS1_2_VERSION) != 1) {
        rc = ctx_fail(err, errlen, "cannot set minimum version", NULL);
        goto fail;
    }
    /* IGNORE_UNEXPECTED_EOF: a client that just closes its socket is an
     * ordinary close; thin-client frames carry their own lengths, so a
     * truncated stream is still detected above. */
    SSL_CTX_set_options(s, SSL_OP_NO_COMPRESSION | SSL_OP_NO_RENEGOTIATION |
                               SSL_OP_CIPHER_SERVER_PREFERENCE | SSL_OP_IGNORE_UNEXPECTED_EOF);
    /* The loop retries writes from a buffer that may grow (and move) between
     * calls, and takes partial writes like send() does. */
    SSL_CTX_set_mode(s, SSL_MODE_ENABLE_PARTIAL_WRITE | SSL_MODE_ACCEPT_MOVING_WRITE_BUFFER |
                            SSL_MODE_RELEASE_BUFFERS);
    if (SSL_CTX_set_cipher_list(s, o->ciphers ? o->ciphers : DEFAULT_CIPHERS) != 1) {
        rc = ctx_fail(err, errlen, "bad cipher list", o->ciphers);
        goto fail;
    }
    if (o->ciphersuites && SSL_CTX_set_ciphersuites(s, o->ciphersuites) != 1) {
        rc = ctx_fail(err, errlen, "bad TLS 1.3 cipher suites", o->ciphersuites);
        goto fail;
    }
    if (SSL_CTX_use_certificate_chain_file(s, o->cert_file) != 1) {
        rc = ctx_fail(err, errlen, "cannot load certificate", o->cert_file);
        goto fail;
    }
    const char *key = o->key_file ? o->key_file : o->cert_file;
    if (SSL_CTX_use_PrivateKey_file(s, key, SSL_FILETYPE_PEM) != 1) {
        rc = ctx_fail(err, errlen, "cannot load private key", key);
        goto fail;
    }
    if (SSL_CTX_check_private_key(s) != 1) {
        rc = ctx_fail(err, errlen, "private key does not match certificate", key);
        goto fail;
    }
    if (o->ca_file) {
        if (SSL_CTX_load_verify_locations(s, o->ca_file, NULL) != 1) {
            rc = ctx_fail(err, errlen, "cannot load CA file", o->ca_file);
            goto fail;
        }
        STACK_OF(X509_NAME) *names = SSL_load_client_CA_file(o->ca_file);
        if (names)
            SSL_CTX_set_client_CA_list(s, names);   /* takes ownership */
    }
    /* A peer context verifies the other end in both roles (as a client it
     * checks the server's chain; FAIL_IF_NO_PEER_CERT applies as a server).
     * Nodes name each other by node id in the cluster handshake, not by
     * host name: the chain to the cluster's CA is the check. */
    if (o->peer || o->verify_client == NET_TLS_VERIFY_REQUIRE)
        SSL_CTX_set_verify(s, SSL_VERIFY_PEER | SSL_VERIFY_FAIL_IF_NO_PEER_CERT, NULL);
    else if (o->verify_client == NET_TLS_VERIFY_OPTIONAL)
        SSL_CTX_set_verify(s, SSL_VERIFY_PEER, NULL);
    else
        SSL_CTX_set_verify(s, SSL_VERIFY_NONE, NULL);
    /* Session resumption across workers: the context's cache is shared. */
    static const unsigned char sid_ctx[] = "emberd";
    SSL_CTX_set_session_id_context(s, sid_ctx, sizeof sid_ctx - 1);

    net_tls_ctx *c = em_malloc(sizeof *c);
    if (!c) {
        rc = EM_NOMEM;
        goto fail;
    }
    c->ssl = s;
    *out = c;
    return 0;
fail:
    SSL_CTX_free(s);
    return rc;
}

void net_tls_ctx_free(net_tls_ctx *ctx)
{
    if (!ctx)
        return;
    SSL_CTX_free(ctx->ssl);
    em_free(ctx);
}

int net_tls_new(net_tls_ctx *ctx, int fd, int connect, net_tls **out)
{
    *out = NULL;
    net_tls *t = em_malloc(sizeof *t);
    if (!t)
        return EM_NOMEM;
    ERR_clear_error();
    t->ssl = SSL_new(ctx->ssl);
    if (!t->ssl || SSL_set_fd(t->ssl, fd) != 1) {
        take_error("SSL_new failed");
        if (t->ssl)
            SSL_free(t->ssl);
        em_free(t);
        return EM_NOMEM;
    }
    if (connect)
        SSL_set_connect_state(t->ssl);
    else
        SSL_set_accept_state(t->ssl);
    *out = t;
    return 0;
}

int net_tls_new_mem(net_tls_ctx *ctx, int connect, net_tls **out)
{
    *out = NULL;
    net_tls *t = em_malloc(sizeof *t);
    if (!t)
        return EM_NOMEM;
    ERR_clear_error();
    t->ssl = SSL_new(ctx->ssl);
    BIO *in = BIO_new(BIO_s_mem()), *outb = BIO_new(BIO_s_mem());
    if (!t->ssl || !in || !outb) {
        take_error("SSL_new failed");
        BIO_free(in);
        BIO_free(outb);
        if (t->ssl)
            SSL_free(t->ssl);
        em_free(t);
        return EM_NOMEM;
    }
    BIO_set_mem_eof_return(in, -1);     /* empty = "feed more", not EOF */
    SSL_set_bio(t->ssl, in, outb);      /* the SSL owns both */
    if (connect)
        SSL_set_connect_state(t->ssl);
    else
        SSL_set_accept_state(t->ssl);
    *out = t;
    return 0;
}

int net_tls_feed(net_tls *t, const void *p, size_t n)
{
    size_t put = 0;
    if (n && (BIO_write_ex(SSL_get_rbio(t->ssl), p, n, &put) != 1 || put != n))
        return EM_NOMEM;
    return 0;
}

size_t net_tls_take(net_tls *t, void *buf, size_t n)
{
    size_t got = 0;
    if (n && BIO_read_ex(SSL_get_wbio(t->ssl), buf, n, &got) != 1)
        return 0;
    return got;
}

size_t net_tls_outbound(const net_tls *t)
{
    return BIO_ctrl_pending(SSL_get_wbio(t->ssl));
}

void net_tls_free(net_tls *t)
{
    if (!t)
        return;
    SSL_free(t->ssl);
    em_free(t);
}

/* map turns an SSL_* result r <= 0 into EM_AGAIN (+ want), 0 (clean close
 * on reads), EM_CLOSED, EM_PROTO or -errno. */
static int map(net_tls *t, int r, int *want, int reading)
{
    int e = SSL_get_error(t->ssl, r);
    int saved = errno;
    switch (e) {
    case SSL_ERROR_WANT_READ:
        *want = NET_TLS_WANT_READ;
        return EM_AGAIN;
    case SSL_ERROR_WANT_WRITE:
        *want = NET_TLS_WANT_WRITE;
        return EM_AGAIN;
    case SSL_ERROR_ZERO_RETURN:
        ERR_clear_error();
        snprintf(tls_err, sizeof tls_err, "peer sent close_notify");
        return reading ? 0 : EM_CLOSED;
    case SSL_ERROR_SYSCALL:
        take_error(saved ? strerror(saved) : "peer closed the connection");
        if (saved == EAGAIN || saved == EWOULDBLOCK) {
            *want = reading ? NET_TLS_WANT_READ : NET_TLS_WANT_WRITE;
            return EM_AGAIN;
        }
        if (!saved)         /* EOF without close_notify */
            return reading ? 0 : EM_CLOSED;
        return -saved;
    default:
        take_error("TLS protocol error");
        return EM_PROTO;
    }
}

int net_tls_handshake_step(net_tls *t, int *want)
{
    *want = 0;
    ERR_clear_error();
    errno = 0;
    int r = SSL_do_handshake(t->ssl);
    if (r == 1)
        return 0;
    int rc = map(t, r, want, 0);
    /* An EOF during the handshake is a peer that went away, not a close. */
    return rc == 0 ? EM_CLOSED : rc;
}

ssize_t net_tls_read(net_tls *t, void *buf, size_t n, int *want)
{
    *want = 0;
    if (n == 0)
        return EM_INVAL;
    ERR_clear_error();
    errno = 0;
    size_t got = 0;
    int r = SSL_read_ex(t->ssl, buf, n, &got);
    if (r == 1)
        return (ssize_t)got;
    return map(t, 0, want, 1);
}

ssize_t net_tls_write(net_tls *t, const void *buf, size_t n, int *want)
{
    *want = 0;
    if (n == 0)
        return EM_INVAL;
    ERR_clear_error();
    errno = 0;
    size_t put = 0;
    int r = SSL_write_ex(t->ssl, buf, n, &put);
    if (r == 1)
        return (ssize_t)put;
    return map(t, 0, want, 0);
}

size_t net_tls_pending(const net_tls *t)
{
    int p = SSL_pending(t->ssl);
    return p > 0 ? (size_t)p : 0;
}

void net_tls_close_notify(net_tls *t)
{
    ERR_clear_error();
    /* Only after a finished handshake: SSL_shutdown mid-handshake errors. */
    if (SSL_is_init_finished(t->ssl))
        SSL_shutdown(t->ssl);
    ERR_clear_error();
}

const char *net_tls_version(const net_tls *t) { return SSL_get_version(t->ssl); }

int net_tls_peer_subject(const net_tls *t, char *buf, size_t n)
{
    if (n)
        buf[0] = 0;
    X509 *peer = SSL_get1_peer_certificate(t->ssl);
    if (!peer)
        return 0;
    if (n)
        X509_NAME_oneline(X509_get_subject_name(peer), buf, (int)(n > 0x7fffffff ? 0x7fffffff : n));
    int ok = SSL_get_verify_result(t->ssl) == X509_V_OK;
    X509_free(peer);
    return ok;
}
