/* cli_conn.c - ember-cli's connection: TCP or TLS (OpenSSL) transport, the
 * thin-client handshake with username/password, and framed request/reply
 * exchange with both response header shapes (< 1.4.0 and >= 1.4.0).
 * Layouts: shared/reference/ignite-thin-protocol.md §1.1-1.5 and §1.9.
 */
#include "cli.h"

#include "util/err.h"

#include <errno.h>
#include <fcntl.h>
#include <netdb.h>
#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <openssl/err.h>
#include <openssl/ssl.h>
#include <openssl/x509v3.h>
#include <poll.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>

static int fail(cli_err *e, int status, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/* fail records a message; status > 0 is a server status, 0 a local error. */
static int fail(cli_err *e, int status, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(e->msg, sizeof e->msg, fmt, ap);
    va_end(ap);
    e->status = status;
    e->local = status == 0;
    return status ? CLI_ESERVER : CLI_ELOCAL;
}

static const char *ssl_errstr(void)
{
    static char buf[256];
    unsigned long code = ERR_get_error();
    if (!code)
        return "TLS connection failed";
    ERR_error_string_n(code, buf, sizeof buf);
    ERR_clear_error();
    return buf;
}

/* ---- transport ---------------------------------------------------------- */

/* tcp_connect tries every address of host:port with a bounded connect. */
static int tcp_connect(const cli_opts *o, cli_err *e)
{
    struct addrinfo hints, *res = NULL;
    memset(&hints, 0, sizeof hints);
    hints.ai_family = AF_UNSPEC;
    hints.ai_socktype = SOCK_STREAM;
    int rc = getaddrinfo(o->host, o->port, &hints, &res);
    if (rc != 0) {
        fail(e, 0, "cannot resolve %s:%s: %s", o->host, o->port, gai_strerror(rc));
        return -1;
    }
    int fd = -1, last = ECONNREFUSED;
    for (struct addrinfo *a = res; a; a = a->ai_next) {
        fd = socket(a->ai_family, a->ai_socktype | SOCK_CLOEXEC | SOCK_NONBLOCK, a->ai_protocol);
        if (fd < 0) {
            last = errno;
            continue;
        }
        if (connect(fd, a->ai_addr, a->ai_addrlen) == 0)
            break;
        if (errno == EINPROGRESS) {
            struct pollfd pf = {fd, POLLOUT, 0};
            int pr = poll(&pf, 1, o->timeout_ms);
            int soerr = 0;
            socklen_t sl = sizeof soerr;
            if (pr == 1 && getsockopt(fd, SOL_SOCKET, SO_ERROR, &soerr, &sl) == 0 && soerr == 0)
                break;
            last = pr == 0 ? ETIMEDOUT : (soerr ? soerr : errno);
        } else {
            last = errno;
        }
        close(fd);
        fd = -1;
    }
    freeaddrinfo(res);
    if (fd < 0) {
        fail(e, 0, "cannot connect to %s:%s: %s", o->host, o->port, strerror(last));
        return -1;
    }
    /* Back to blocking with timeouts: the CLI does one exchange at a time. */
    int fl = fcntl(fd, F_GETFL);
    fcntl(fd, F_SETFL, fl & ~O_NONBLOCK);
    struct timeval tv = {o->timeout_ms / 1000, (o->timeout_ms % 1000) * 1000};
    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
    setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv);
    int one = 1;
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    return fd;
}

static int is_ip_literal(const char *h)
{
    unsigned char tmp[16];
    return inet_pton(AF_INET, h, tmp) == 1 || inet_pton(AF_INET6, h, tmp) == 1;
}

static int tls_start(cli_conn *c, const cli_opts *o, cli_err *e)
{
    SSL_CTX *ctx = SSL_CTX_new(TLS_client_method());
    if (!ctx)
        return fail(e, 0, "TLS: %s", ssl_errstr());
    c->ssl_ctx = ctx;
    SSL_CTX_set_min_proto_version(ctx, TLS1_2_VERSION);
    if (o->insecure) {
        SSL_CTX_set_verify(ctx, SSL_VERIFY_NONE, NULL);
    } else {
        if (o->ca ? SSL_CTX_load_verify_locations(ctx, o->ca, NULL) != 1
                  : SSL_CTX_set_default_verify_paths(ctx) != 1)
            return fail(e, 0, "TLS: cannot load CA %s: %s", o->ca ? o->ca : "(system)", ssl_errstr());
        SSL_CTX_set_verify(ctx, SSL_VERIFY_PEER, NULL);
    }
    if (o->cert) {
        if (SSL_CTX_use_certificate_chain_file(ctx, o->cert) != 1)
            return fail(e, 0, "TLS: cannot load certificate %s: %s", o->cert, ssl_errstr());
        if (SSL_CTX_use_PrivateKey_file(ctx, o->key ? o->key : o->cert, SSL_FILETYPE_PEM) != 1)
            return fail(e, 0, "TLS: cannot load key %s: %s", o->key ? o->key : o->cert, ssl_errstr());
    }
    SSL *ssl = SSL_new(ctx);
    if (!ssl)
        return fail(e, 0, "TLS: %s", ssl_errstr());
    c->ssl = ssl;
    SSL_set_fd(ssl, c->fd);
    if (is_ip_literal(o->host)) {
        if (!o->insecure)
            X509_VERIFY_PARAM_set1_ip_asc(SSL_get0_param(ssl), o->host);
    } else {
        SSL_set_tlsext_host_name(ssl, o->host);
        if (!o->insecure)
            SSL_set1_host(ssl, o->host);
    }
    if (SSL_connect(ssl) != 1) {
        long vr = SSL_get_verify_result(ssl);
        if (vr != X509_V_OK)
            return fail(e, 0, "TLS handshake with %s:%s failed: certificate: %s", o->host,
                        o->port, X509_verify_cert_error_string(vr));
        return fail(e, 0, "TLS handshake with %s:%s failed: %s", o->host, o->port, ssl_errstr());
    }
    return 0;
}

static int io_write(cli_conn *c, const uint8_t *p, size_t n)
{
    while (n > 0) {
        ssize_t w;
        if (c->ssl) {
            int r = SSL_write(c->ssl, p, (int)(n > (1u << 30) ? (1u << 30) : n));
            w = r > 0 ? r : -1;
        } else {
            w = send(c->fd, p, n, MSG_NOSIGNAL);
            if (w < 0 && errno == EINTR)
                continue;
        }
        if (w <= 0)
            return -1;
        p += w;
        n -= (size_t)w;
    }
    return 0;
}

/* io_read_full: 0, or -1 on error/timeout, or 1 on a clean EOF. */
static int io_read_full(cli_conn *c, uint8_t *p, size_t n)
{
    while (n > 0) {
        ssize_t r;
        if (c->ssl) {
            int k = SSL_read(c->ssl, p, (int)(n > (1u << 30) ? (1u << 30) : n));
            if (k <= 0)
                return SSL_get_error(c->ssl, k) == SSL_ERROR_ZERO_RETURN ? 1 : -1;
            r = k;
        } else {
            r = recv(c->fd, p, n, 0);
            if (r < 0 && errno == EINTR)
                continue;
            if (r == 0)
                return 1;
            if (r < 0)
                return -1;
        }
        p += r;
        n -= (size_t)r;
    }
    return 0;
}

/* read_frame reads one "int length + body" frame into c->in. */
static int read_frame(cli_conn *c, cli_err *e)
{
    uint8_t hdr[4];
    int rc = io_read_full(c, hdr, 4);
    if (rc == 1)
        return fail(e, 0, "server closed the connection");
    if (rc)
        return fail(e, 0, "read failed: %s", errno == EAGAIN ? "timed out" : strerror(errno));
    int32_t len = (int32_t)em_ld32(hdr);
    if (len <= 0 || (uint32_t)len > CLI_MAX_FRAME)
        return fail(e, 0, "malformed reply: frame length %d", len);
    em_buf_reset(&c->in);
    if (em_buf_reserve(&c->in, (size_t)len))
        return fail(e, 0, "out of memory");
    rc = io_read_full(c, c->in.p, (size_t)len);
    if (rc)
        return fail(e, 0, "connection lost inside a reply");
    c->in.len = (size_t)len;
    return 0;
}

static void frame_begin(em_buf *b)
{
    em_buf_reset(b);
    em_buf_put_le32(b, 0);
}

static void frame_end(em_buf *b)
{
    em_st32(b->p, (uint32_t)(b->len - 4));
}

void cli_put_str(em_buf *b, const char *s, size_t n)
{
    em_buf_put_u8(b, 9);
    em_buf_put_le32(b, (uint32_t)n);
    em_buf_append(b, s, n);
}

/* ---- handshake ----------------------------------------------------------- */

static int supported_ver(int v)
{
    return v == CLI_VER(1, 0, 0) || v == CLI_VER(1, 1, 0) || v == CLI_VER(1, 2, 0) ||
           v == CLI_VER(1, 3, 0) || v == CLI_VER(1, 4, 0) || v == CLI_VER(1, 5, 0) ||
           v == CLI_VER(1, 6, 0) || v == CLI_VER(1, 7, 0);
}

/* handshake: 0 on success; CLI_ESERVER with *server_ver set on a refusal. */
static int handshake(cli_conn *c, const cli_opts *o, int ver, int *server_ver, cli_err *e)
{
    em_buf *b = &c->out;
    frame_begin(b);
    em_buf_put_u8(b, 1);
    em_buf_put_le16(b, (uint16_t)(ver / 10000));
    em_buf_put_le16(b, (uint16_t)(ver / 100 % 100));
    em_buf_put_le16(b, (uint16_t)(ver % 100));
    em_buf_put_u8(b, 2);
    if (ver >= CLI_VER(1, 7, 0)) {
        /* Only what the command needs (never user attributes). */
        em_buf_put_u8(b, 12);
        em_buf_put_le32(b, o->features ? 1 : 0);
        if (o->features)
            em_buf_put_u8(b, o->features);
    }
    if (o->user && ver >= CLI_VER(1, 1, 0)) {
        cli_put_str(b, o->user, strlen(o->user));
        const char *pw = o->password ? o->password : "";
        cli_put_str(b, pw, strlen(pw));
    }
    frame_end(b);
    if (io_write(c, b->p, b->len))
        return fail(e, 0, "send failed: %s", strerror(errno));
    int rc = read_frame(c, e);
    if (rc)
        return rc;
    const uint8_t *p = c->in.p;
    size_t n = c->in.len, pos = 1;
    if (p[0] == 1) {
        if (ver >= CLI_VER(1, 7, 0)) {
            if (n < pos + 5 || p[pos] != 12)
                return fail(e, 0, "malformed handshake reply (features)");
            uint32_t fl = em_ld32(p + pos + 1);
            pos += 5;
            if (fl > n - pos)
                return fail(e, 0, "malformed handshake reply (feature length %u)", fl);
            pos += fl;
        }
        if (ver >= CLI_VER(1, 4, 0)) {
            if (n >= pos + 17 && p[pos] == 10) {
                memcpy(c->node_id, p + pos + 1, 16);
                c->has_node_id = 1;
                pos += 17;
            } else if (n >= pos + 1 && p[pos] == 101) {
                pos += 1;
            } else {
                return fail(e, 0, "malformed handshake reply (node id)");
            }
        }
        if (pos != n)
            return fail(e, 0, "malformed handshake reply (%zu trailing bytes)", n - pos);
        c->ver = ver;
        return 0;
    }
    if (p[0] != 0 || n < 7)
        return fail(e, 0, "malformed handshake reply");
    *server_ver = CLI_VER(em_ld16(p + 1), em_ld16(p + 3), em_ld16(p + 5));
    pos = 7;
    const uint8_t *s = NULL;
    uint32_t slen = 0;
    if (cli_typed_string(p, n, &pos, &s, &slen))
        return fail(e, 0, "malformed handshake failure reply (message)");
    int status = 1;
    if (n - pos >= 4) {
        status = (int32_t)em_ld32(p + pos);
        pos += 4;
    }
    if (pos != n)
        return fail(e, 0, "malformed handshake failure reply (%zu trailing bytes)", n - pos);
    if (status == 0)
        status = 1;
    return fail(e, status, "handshake refused: %.*s", (int)(s ? slen : 0), s ? (const char *)s : "");
}

static int connect_once(cli_conn *c, const cli_opts *o, cli_err *e)
{
    c->fd = tcp_connect(o, e);
    if (c->fd < 0)
        return CLI_ELOCAL;
    if (o->tls)
        return tls_start(c, o, e);
    return 0;
}

static void disconnect(cli_conn *c)
{
    if (c->ssl) {
        SSL_shutdown(c->ssl);
        SSL_free(c->ssl);
        c->ssl = NULL;
    }
    if (c->ssl_ctx) {
        SSL_CTX_free(c->ssl_ctx);
        c->ssl_ctx = NULL;
    }
    if (c->fd >= 0)
        close(c->fd);
    c->fd = -1;
}

int cli_open(cli_conn *c, const cli_opts *o, cli_err *e)
{
    memset(c, 0, sizeof *c);
    c->fd = -1;
    memset(e, 0, sizeof *e);
    int ver = o->ver;
    for (int attempt = 0; attempt < 2; attempt++) {
        int rc = connect_once(c, o, e);
        if (rc)
            return rc;
        int server_ver = 0;
        rc = handshake(c, o, ver, &server_ver, e);
        if (rc == 0) {
            c->rid = 1;
            return 0;
        }
        /* A refusal naming another version we speak is an invitation to retry
         * (Java's server keeps the socket, others may not: reconnect). */
        if (rc != CLI_ESERVER || e->status == 2000 || o->ver_pinned || attempt ||
            server_ver == ver || !supported_ver(server_ver))
            return rc;
        disconnect(c);
        ver = server_ver;
    }
    return CLI_ELOCAL;
}

void cli_close(cli_conn *c)
{
    disconnect(c);
    em_buf_free(&c->out);
    em_buf_free(&c->in);
}

/* ---- requests ------------------------------------------------------------ */

int cli_call(cli_conn *c, int op, const em_buf *payload, const uint8_t **p, size_t *n,
             cli_err *e)
{
    memset(e, 0, sizeof *e);
    int64_t rid = c->rid++;
    em_buf *b = &c->out;
    frame_begin(b);
    em_buf_put_le16(b, (uint16_t)op);
    em_buf_put_le64(b, (uint64_t)rid);
    if (payload && payload->len && em_buf_append(b, payload->p, payload->len))
        return fail(e, 0, "out of memory");
    frame_end(b);
    if (io_write(c, b->p, b->len))
        return fail(e, 0, "send failed: %s", strerror(errno));
    int rc = read_frame(c, e);
    if (rc)
        return rc;
    const uint8_t *q = c->in.p;
    size_t len = c->in.len, pos = 8;
    if (len < 8)
        return fail(e, 0, "malformed reply: %zu bytes", len);
    int64_t got = (int64_t)em_ld64(q);
    if (got != rid)
        return fail(e, 0, "malformed reply: request id %lld, expected %lld", (long long)got,
                    (long long)rid);
    int error;
    if (c->ver >= CLI_VER(1, 4, 0)) {
        if (len < pos + 2)
            return fail(e, 0, "malformed reply: no flags");
        unsigned flags = em_ld16(q + pos);
        pos += 2;
        if (flags & ~7u)
            return fail(e, 0, "malformed reply: unknown flags 0x%x", flags);
        if (flags & 4)
            return fail(e, 0, "unexpected notification frame");
        if (flags & 2) {
            if (len < pos + 12)
                return fail(e, 0, "malformed reply: topology version");
            c->has_topo = 1;
            c->topo_major = (int64_t)em_ld64(q + pos);
            c->topo_minor = (int32_t)em_ld32(q + pos + 8);
            pos += 12;
        }
        error = flags & 1;
        if (error && len < pos + 4)
            return fail(e, 0, "malformed reply: no status");
    } else {
        if (len < pos + 4)
            return fail(e, 0, "malformed reply: no status");
        error = em_ld32(q + pos) != 0;
        if (!error)
            pos += 4;
    }
    if (error) {
        int32_t status = (int32_t)em_ld32(q + pos);
        pos += 4;
        const uint8_t *s = NULL;
        uint32_t slen = 0;
        if (cli_typed_string(q, len, &pos, &s, &slen) || pos != len)
            return fail(e, 0, "malformed error reply (status %d)", status);
        if (status == 0)
            return fail(e, 0, "malformed reply: error flag with status 0");
        return fail(e, status, "%.*s", (int)(s ? slen : 0), s ? (const char *)s : "");
    }
    *p = q + pos;
    *n = len - pos;
    return 0;
}
