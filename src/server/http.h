/* http.h - emberd's operator HTTP endpoint: a minimal HTTP/1.1 server on its
 * own thread serving GET /metrics (Prometheus text from a callback) and
 * GET /health (200 "ok", or 503 naming each failed component), and, through
 * a callback, the dashboard (GET /) and its JSON (GET /api/cluster, /api/node).  Every response closes the connection; requests are bounded
 * (8 KiB of request line + headers, no body) and slow clients are dropped
 * after a timeout.  A small poll loop serves up to 32 connections at once, so
 * one stalled client cannot block a scrape.  (RFC 9112 message syntax.)
 */
#ifndef EM_SRV_HTTP_H
#define EM_SRV_HTTP_H

#include "util/buf.h"

typedef struct srv_http srv_http;

/* render appends the /metrics body to out; 0 or a negative code (-> 500).
 * Called on the HTTP thread: it must be safe against the workers. */
typedef int (*srv_http_render_fn)(void *arg, em_buf *out);

#define SRV_HTTP_MAX_REQUEST 8192

/* health appends the /health body to out and returns the number of failed
 * components: 0 -> 200, > 0 -> 503 (the body says which and why, one line
 * each), negative -> 500.  Called on the HTTP thread, like render. */
typedef int (*srv_http_health_fn)(void *arg, em_buf *out);

typedef struct srv_http_options {
    const char        *host;        /* numeric address or name; NULL = 127.0.0.1 */
    int                port;        /* 0 = any free port (srv_http_port tells) */
    srv_http_render_fn render;      /* /metrics; NULL = 404 */
    void              *arg;         /* for render and health */
    int                timeout_ms;  /* whole request/response budget; 0 = 5000 */
    srv_http_health_fn health;      /* /health; NULL = always 200 "ok" */
    /* api: the dashboard page (route SRV_HTTP_ROOT) and the /api/ JSON
     * (SRV_HTTP_API_*): append the body to out, set *ctype; 0 or a negative
     * code (-> 500).  NULL = 404.  HTTP thread, like render. */
    int (*api)(void *arg, int route, em_buf *out, const char **ctype);
} srv_http_options;

/* srv_http_start binds host:port and starts the thread.  0, -errno (bind,
 * listen, thread) or EM_NOMEM; on failure nothing is left running. */
int  srv_http_start(const char *host, int port, srv_http_render_fn render, void *arg,
                    srv_http **out);
int  srv_http_start_opts(const srv_http_options *o, srv_http **out);

/* srv_http_port: the bound port. */
int  srv_http_port(const srv_http *h);

/* srv_http_stop wakes the thread, closes every connection, joins and frees.
 * NULL is ignored. */
void srv_http_stop(srv_http *h);

/* srv_http_parse: the request line of one complete request head (p, n:
 * bytes through the empty line, not NUL-terminated, not modified) decided
 * without sockets, so the parser can be fuzzed alone (tests/fuzz/fuzz_http.c).
 * status 0 = a GET or HEAD to route; 400 = malformed; 405 = other method. */
enum { SRV_HTTP_OTHER = 0, SRV_HTTP_HEALTH = 1, SRV_HTTP_METRICS = 2, SRV_HTTP_ROOT = 3,
       SRV_HTTP_API_CLUSTER = 4, SRV_HTTP_API_NODE = 5 };
typedef struct srv_http_req {
    int status;     /* 0, 400 or 405 */
    int head;       /* HEAD: headers only */
    int route;      /* SRV_HTTP_* (when status is 0) */
} srv_http_req;
void   srv_http_parse(const char *p, size_t n, srv_http_req *r);

/* srv_http_head_end: length of the request head in p[0, n) through its
 * empty line (LF LF or LF CR LF), or 0 while it is incomplete. */
size_t srv_http_head_end(const char *p, size_t n);

#endif
