/* http.c - the operator HTTP endpoint (/metrics, /health, the dashboard at /
 * and its /api/ JSON, both from the api callback): one thread, one
 * poll loop over the listener, a wake pipe and up to HTTP_CONNS connections.
 * Each connection reads one request head (<= 8 KiB), gets one response with
 * Content-Length and "Connection: close", and is closed.  Message syntax:
 * RFC 9112 §2-3 (request line, header section ending in an empty line).
 */
#include "server/http.h"

#include "util/clock.h"
#include "util/err.h"
#include "util/mem.h"

#include <errno.h>
#include <fcntl.h>
#include <arpa/inet.h>
#include <netdb.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#define HTTP_CONNS 32

typedef struct http_conn {
    int      fd;                 /* -1 = free slot */
    uint64_t deadline_ns;
    size_t   inlen;
    int      writing;
    size_t   outpos;
    em_buf   out;
    char     in[SRV_HTTP_MAX_REQUEST];
} http_conn;

struct srv_http {
    int                lfd;
    int                wake[2];  /* pipe: stop request */
    int                port;
    srv_http_render_fn render;
    srv_http_health_fn health;
    int              (*api)(void *arg, int route, em_buf *out, const char **ctype);
    void              *arg;
    uint64_t           timeout_ns;
    pthread_t          thread;
    em_buf             body;     /* reused for every /metrics render */
    http_conn          conns[HTTP_CONNS];
};

/* ---- responses ------------------------------------------------------------ */

static void respond(srv_http *h, http_conn *c, int code, const char *reason, const char *ctype,
                    const void *body, size_t blen, int head_only, const char *extra)
{
    char hdr[512];
    int k = snprintf(hdr, sizeof hdr,
                     "HTTP/1.1 %d %s\r\nContent-Type: %s\r\nContent-Length: %zu\r\n"
                     "Cache-Control: no-store\r\nConnection: close\r\n%s\r\n",
                     code, reason, ctype, blen, extra ? extra : "");
    (void)h;
    em_buf_reset(&c->out);
    if (em_buf_append(&c->out, hdr, (size_t)k) ||
        (!head_only && em_buf_append(&c->out, body, blen))) {
        /* Out of memory: drop the connection rather than send half. */
        c->out.len = 0;
    }
    c->writing = 1;
    c->outpos = 0;
}

static void text(srv_http *h, http_conn *c, int code, const char *reason, const char *msg,
                 int head_only, const char *extra)
{
    respond(h, c, code, reason, "text/plain; charset=utf-8", msg, strlen(msg), head_only, extra);
}

size_t srv_http_head_end(const char *p, size_t n)
{
    for (size_t i = 0; i + 1 < n; i++) {
        if (p[i] != '\n')
            continue;
        if (p[i + 1] == '\n')
            return i + 2;
        if (p[i + 1] == '\r' && i + 2 < n && p[i + 2] == '\n')
            return i + 3;
    }
    return 0;
}

static int span_is(const char *p, size_t n, const char *s)
{
    return strlen(s) == n && memcmp(p, s, n) == 0;
}

void srv_http_parse(const char *p, size_t n, srv_http_req *r)
{
    r->status = 400;
    r->head = 0;
    r->route = SRV_HTTP_OTHER;
    /* request line: METHOD SP target SP HTTP/1.x (a NUL ends it early) */
    const char *eol = memchr(p, '\n', n);
    if (!eol)
        return;
    size_t len = (size_t)(eol - p);
    if (len > 0 && p[len - 1] == '\r')
        len--;
    const char *nul = memchr(p, 0, len);
    if (nul)
        len = (size_t)(nul - p);
    const char *end = p + len;
    const char *sp1 = memchr(p, ' ', len);
    const char *sp2 = sp1 ? memchr(sp1 + 1, ' ', (size_t)(end - sp1 - 1)) : NULL;
    if (!sp2)
        return;
    const char *ver = sp2 + 1;
    size_t vlen = (size_t)(end - ver);
    if (vlen < 7 || memcmp(ver, "HTTP/1.", 7) != 0 || memchr(ver, ' ', vlen))
        return;
    const char *target = sp1 + 1;
    size_t tlen = (size_t)(sp2 - target);
    const char *q = memchr(target, '?', tlen);
    if (q)
        tlen = (size_t)(q - target);
    size_t mlen = (size_t)(sp1 - p);
    r->head = span_is(p, mlen, "HEAD");
    if (!r->head && !span_is(p, mlen, "GET")) {
        r->status = 405;
        return;
    }
    r->status = 0;
    if (span_is(target, tlen, "/health"))
        r->route = SRV_HTTP_HEALTH;
    else if (span_is(target, tlen, "/metrics"))
        r->route = SRV_HTTP_METRICS;
    else if (span_is(target, tlen, "/") || span_is(target, tlen, "/index.html"))
        r->route = SRV_HTTP_ROOT;
    else if (span_is(target, tlen, "/api/cluster"))
        r->route = SRV_HTTP_API_CLUSTER;
    else if (span_is(target, tlen, "/api/node"))
        r->route = SRV_HTTP_API_NODE;
}

static void handle_request(srv_http *h, http_conn *c)
{
    srv_http_req r;
    srv_http_parse(c->in, c->inlen, &r);
    if (r.status == 400) {
        text(h, c, 400, "Bad Request", "bad request\n", 0, NULL);
        return;
    }
    if (r.status == 405) {
        text(h, c, 405, "Method Not Allowed", "method not allowed\n", 0, "Allow: GET, HEAD\r\n");
        return;
    }
    int head = r.head;
    if (r.route == SRV_HTTP_HEALTH && h->health) {
        em_buf_reset(&h->body);
        int failed = h->health(h->arg, &h->body);
        if (failed < 0) {
            char msg[128];
            snprintf(msg, sizeof msg, "health check failed: %s\n", em_strerror(failed));
            text(h, c, 500, "Internal Server Error", msg, head, NULL);
            return;
        }
        /* 503 so a load balancer or orchestrator takes the node out; the
         * body names each failed component and why. */
        respond(h, c, failed ? 503 : 200, failed ? "Service Unavailable" : "OK",
                "text/plain; charset=utf-8", h->body.p, h->body.len, head, NULL);
    } else if (r.route == SRV_HTTP_HEALTH) {
        text(h, c, 200, "OK", "ok\n", head, NULL);
    } else if (r.route == SRV_HTTP_METRICS && h->render) {
        em_buf_reset(&h->body);
        int rc = h->render(h->arg, &h->body);
        if (rc) {
            char msg[128];
            snprintf(msg, sizeof msg, "metrics failed: %s\n", em_strerror(rc));
            text(h, c, 500, "Internal Server Error", msg, head, NULL);
            return;
        }
        respond(h, c, 200, "OK", "text/plain; version=0.0.4; charset=utf-8", h->body.p,
                h->body.len, head, NULL);
    } else if (r.route >= SRV_HTTP_ROOT && h->api) {
        em_buf_reset(&h->body);
        const char *ctype = "application/json";
        int rc = h->api(h->arg, r.route, &h->body, &ctype);
        if (rc) {
            char msg[128];
            snprintf(msg, sizeof msg, "failed: %s\n", em_strerror(rc));
            text(h, c, 500, "Internal Server Error", msg, head, NULL);
            return;
        }
        respond(h, c, 200, "OK", ctype, h->body.p, h->body.len, head, NULL);
    } else {
        text(h, c, 404, "Not Found", "not found\n", head, NULL);
    }
}

/* ---- connections ------------------------------------------------------------ */

static void conn_close(http_conn *c)
{
    if (c->fd >= 0)
        close(c->fd);
    c->fd = -1;
    c->inlen = 0;
    c->writing = 0;
    c->outpos = 0;
    em_buf_reset(&c->out);
}

static void conn_read(srv_http *h, http_conn *c)
{
    for (;;) {
        size_t room = sizeof c->in - c->inlen;
        if (room == 0) {
            text(h, c, 431, "Request Header Fields Too Large", "request too large\n", 0, NULL);
            return;
        }
        ssize_t r = recv(c->fd, c->in + c->inlen, room, 0);
        if (r < 0 && errno == EINTR)
            continue;
        if (r < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))
            return;
        if (r <= 0) {
            conn_close(c);
            return;
        }
        size_t scanned_from = c->inlen > 3 ? c->inlen - 3 : 0;
        c->inlen += (size_t)r;
        if (srv_http_head_end(c->in + scanned_from, c->inlen - scanned_from)) {
            handle_request(h, c);
            return;
        }
    }
}

static void conn_write(http_conn *c)
{
    while (c->outpos < c->out.len) {
        ssize_t w = send(c->fd, c->out.p + c->outpos, c->out.len - c->outpos, MSG_NOSIGNAL);
        if (w < 0 && errno == EINTR)
            continue;
        if (w < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))
            return;
        if (w <= 0)
            break;
        c->outpos += (size_t)w;
    }
    /* Done (or the peer is gone): half-close first so the client sees the
     * whole response before the FIN, not a reset. */
    shutdown(c->fd, SHUT_WR);
    /* Unread input (an oversized request) would turn close() into a reset
     * that can destroy the response in flight: drain what has arrived. */
    char sink[4096];
    for (int i = 0; i < 64 && recv(c->fd, sink, sizeof sink, 0) > 0; i++)
        ;
    conn_close(c);
}

static void accept_all(srv_http *h)
{
    for (;;) {
        http_conn *slot = NULL;
        for (int i = 0; i < HTTP_CONNS; i++)
            if (h->conns[i].fd < 0) {
                slot = &h->conns[i];
                break;
            }
        if (!slot)
            return;
        int fd = accept4(h->lfd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC);
        if (fd < 0)
            return;     /* EAGAIN, or a transient error: poll again */
        slot->fd = fd;
        slot->inlen = 0;
        slot->writing = 0;
        slot->outpos = 0;
        slot->deadline_ns = em_now_ns() + h->timeout_ns;
    }
}

static void *http_thread(void *arg)
{
    srv_http *h = arg;
    pthread_setname_np(pthread_self(), "em-http");
    struct pollfd pf[2 + HTTP_CONNS];
    int idx[2 + HTTP_CONNS];
    for (;;) {
        uint64_t now = em_now_ns(), next = UINT64_MAX;
        int n = 0, live = 0;
        pf[n].fd = h->wake[0];
        pf[n].events = POLLIN;
        idx[n++] = -1;
        for (int i = 0; i < HTTP_CONNS; i++) {
            http_conn *c = &h->conns[i];
            if (c->fd < 0)
                continue;
            if (now >= c->deadline_ns) {
                conn_close(c);
                continue;
            }
            live++;
            if (c->deadline_ns < next)
                next = c->deadline_ns;
            pf[n].fd = c->fd;
            pf[n].events = c->writing ? POLLOUT : POLLIN;
            idx[n++] = i;
        }
        if (live < HTTP_CONNS) {
            pf[n].fd = h->lfd;
            pf[n].events = POLLIN;
            idx[n++] = -2;
        }
        int wait_ms = next == UINT64_MAX ? -1 : (int)((next - now) / 1000000u + 1);
        int pr = poll(pf, (nfds_t)n, wait_ms);
        if (pr < 0 && errno != EINTR)
            break;
        if (pr <= 0)
            continue;
        if (pf[0].revents)
            break;
        for (int k = 1; k < n; k++) {
            if (!pf[k].revents)
                continue;
            if (idx[k] == -2) {
                accept_all(h);
                continue;
            }
            http_conn *c = &h->conns[idx[k]];
            if (!c->writing)
                conn_read(h, c);
            if (c->fd >= 0 && c->writing) {
                if (c->out.len == 0)
                    conn_close(c);
                else
                    conn_write(c);
            }
        }
    }
    return NULL;
}

/* ---- start / stop ----------------------------------------------------------- */

static int listen_on(const char *host, int port, int *out_port)
{
    struct addrinfo hints, *res = NULL;
    memset(&hints, 0, sizeof hints);
    hints.ai_family = AF_UNSPEC;
    hints.ai_socktype = SOCK_STREAM;
    hints.ai_flags = AI_PASSIVE;
    char ps[16];
    snprintf(ps, sizeof ps, "%d", port);
    int grc = getaddrinfo(host ? host : "127.0.0.1", ps, &hints, &res);
    if (grc)
        return grc == EAI_SYSTEM ? -errno : -EADDRNOTAVAIL;
    int rc = -EADDRNOTAVAIL;
    int fd = -1;
    for (struct addrinfo *a = res; a; a = a->ai_next) {
        fd = socket(a->ai_family, a->ai_socktype | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
        if (fd < 0) {
            rc = -errno;
            continue;
        }
        int one = 1;
        setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
        if (bind(fd, a->ai_addr, a->ai_addrlen) == 0 && listen(fd, 64) == 0)
            break;
        rc = -errno;
        close(fd);
        fd = -1;
    }
    freeaddrinfo(res);
    if (fd < 0)
        return rc;
    struct sockaddr_storage ss;
    socklen_t sl = sizeof ss;
    if (getsockname(fd, (struct sockaddr *)&ss, &sl) == 0) {
        if (ss.ss_family == AF_INET)
            *out_port = ntohs(((struct sockaddr_in *)&ss)->sin_port);
        else if (ss.ss_family == AF_INET6)
            *out_port = ntohs(((struct sockaddr_in6 *)&ss)->sin6_port);
    }
    return fd;
}

int srv_http_start_opts(const srv_http_options *o, srv_http **out)
{
    *out = NULL;
    if (o->port < 0 || o->port > 65535)
        return EM_INVAL;
    srv_http *h = em_calloc(1, sizeof *h);
    if (!h)
        return EM_NOMEM;
    for (int i = 0; i < HTTP_CONNS; i++)
        h->conns[i].fd = -1;
    h->wake[0] = h->wake[1] = -1;
    h->render = o->render;
    h->health = o->health;
    h->api = o->api;
    h->arg = o->arg;
    h->timeout_ns = (uint64_t)(o->timeout_ms > 0 ? o->timeout_ms : 5000) * 1000000u;
    h->port = o->port;
    int fd = listen_on(o->host, o->port, &h->port);
    if (fd < 0) {
        em_free(h);
        return fd;
    }
    h->lfd = fd;
    if (pipe2(h->wake, O_CLOEXEC | O_NONBLOCK)) {
        int rc = -errno;
        close(fd);
        em_free(h);
        return rc;
    }
    int rc = pthread_create(&h->thread, NULL, http_thread, h);
    if (rc) {
        close(fd);
        close(h->wake[0]);
        close(h->wake[1]);
        em_free(h);
        return -rc;
    }
    *out = h;
    return 0;
}

int srv_http_start(const char *host, int port, srv_http_render_fn render, void *arg,
                   srv_http **out)
{
    srv_http_options o = {host, port, render, arg, 0, NULL, NULL};
    return srv_http_start_opts(&o, out);
}

int srv_http_port(const srv_http *h) { return h ? h->port : 0; }

void srv_http_stop(srv_http *h)
{
    if (!h)
        return;
    char b = 1;
    ssize_t w = write(h->wake[1], &b, 1);
    (void)w;
    pthread_join(h->thread, NULL);
    for (int i = 0; i < HTTP_CONNS; i++) {
        conn_close(&h->conns[i]);
        em_buf_free(&h->conns[i].out);
    }
    close(h->lfd);
    close(h->wake[0]);
    close(h->wake[1]);
    em_buf_free(&h->body);
    em_free(h);
}
