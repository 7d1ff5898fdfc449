/* cl_meta_tls.c - TLS on the metadata group's connections.
 *
 * libraft reads and writes the uv_stream_t its transport hands it, with no
 * hook for a TLS layer.  So each connection gets a local socket pair:
 * libraft is handed one end (a uv_pipe_t), and this file sits between the
 * other end and the TCP stream, encrypting what libraft writes and
 * decrypting what the peer sends (OpenSSL in memory mode, net_tls_new_mem,
 * with the cluster transport's peer context: both sides present a
 * certificate of the cluster's CA, TLS 1.2+).  The handshake runs before
 * libraft sees the connection and is bounded like the secret's proof; a
 * peer without a good certificate is closed and logged.
 *
 *   libraft <-> pipe end | pair | plain end <-> TLS <-> TCP stream <-> peer
 *
 * Flow control: when more than QUEUE_MAX bytes wait to be written toward
 * one side, reading from the other stops until the queue drains (a peer
 * that stops reading cannot make this node buffer without bound).  Either
 * side closing closes the whole connection; libraft sees EOF on its end
 * and reconnects as it does after any network error.
 *
 * Everything runs on the metadata thread's libuv loop.
 */
#include "cluster/cl_meta_tls.h"

#include <raft.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "cluster/cl_meta_auth.h"
#include "util/err.h"
#include "util/log.h"
#include "util/mem.h"

#define IO_BUF    (16u << 10)       /* one TLS record */
#define QUEUE_MAX (4u << 20)

enum { T_HANDSHAKE = 0, T_OPEN = 1, T_CLOSED = 2 };

struct cl_meta_tls_conn {
    cl_meta_tls_set *set;
    uv_stream_t *wire;              /* the TCP stream (raft_malloc'd by raft_uv_tcp) */
    uv_pipe_t   *plain;             /* this side of the pair */
    uv_timer_t   timer;             /* the handshake's bound */
    net_tls     *tls;
    int          connect, state, refs;
    int          wire_paused, plain_paused;
    cl_meta_tls_cb done;
    void        *arg;
    char         addr[256];
    uint8_t      rbuf[IO_BUF];      /* read from the wire */
    uint8_t      pbuf[IO_BUF];      /* read from libraft */
    uint8_t      tmp[IO_BUF];       /* decrypted, on its way to libraft */
    struct cl_meta_tls_conn *next;
};
typedef struct cl_meta_tls_conn tconn;

static void unref(tconn *c)
{
    if (--c->refs == 0) {
        net_tls_free(c->tls);
        em_free(c);
    }
}

static void wire_closed(uv_handle_t *h)
{
    tconn *c = h->data;
    raft_free(h);
    unref(c);
}

static void plain_closed(uv_handle_t *h)
{
    tconn *c = h->data;
    em_free(h);
    unref(c);
}

static void timer_closed(uv_handle_t *h) { unref(h->data); }

static void theirs_closed(uv_handle_t *h) { raft_free(h); }     /* libraft's end, never handed */

static void list_drop(tconn *c)
{
    for (tconn **p = &c->set->conns; *p; p = &(*p)->next)
        if (*p == c) {
            *p = c->next;
            return;
        }
}

/* tc_close ends c: a handshake in progress reports status; every handle
 * closes (writes still queued are cancelled with them). */
static void tc_close(tconn *c, int status, const char *why)
{
    if (c->state == T_CLOSED)
        return;
    int was = c->state;
    c->state = T_CLOSED;
    list_drop(c);
    if (why)
        EM_WARN("cluster: metadata connection %s %s: TLS %s", c->connect ? "to" : "from",
                c->addr, why);
    uv_read_stop(c->wire);
    uv_close((uv_handle_t *)c->wire, wire_closed);
    if (c->plain) {
        uv_read_stop((uv_stream_t *)c->plain);
        uv_close((uv_handle_t *)c->plain, plain_closed);
    }
    if (was == T_HANDSHAKE) {
        uv_timer_stop(&c->timer);
        uv_close((uv_handle_t *)&c->timer, timer_closed);
        c->done(c->arg, NULL, status);
    }
}

/* ---- writes: each its own request and bytes ---- */

typedef struct twrite {
    uv_write_t w;
    tconn     *c;
    uint8_t    b[];
} twrite;

static void resume(tconn *c);

static void wrote(uv_write_t *w, int status)
{
    twrite *q = w->data;
    tconn *c = q->c;
    em_free(q);
    if (status && c->state != T_CLOSED)
        tc_close(c, EM_CLOSED, NULL);
    else if (c->state == T_OPEN)
        resume(c);
    unref(c);
}

/* send_bytes queues n bytes of p (NULL: take them from the TLS layer's
 * outbound buffer) to stream s. */
static int send_bytes(tconn *c, uv_stream_t *s, const uint8_t *p, size_t n)
{
    twrite *q = em_malloc(sizeof *q + n);
    if (!q)
        return EM_NOMEM;
    if (p)
        memcpy(q->b, p, n);
    else
        n = net_tls_take(c->tls, q->b, n);
    q->c = c;
    q->w.data = q;
    uv_buf_t b = uv_buf_init((char *)q->b, (unsigned)n);
    c->refs++;
    if (uv_write(&q->w, s, &b, 1, wrote)) {
        c->refs--;
        em_free(q);
        return EM_CLOSED;
    }
    return 0;
}

/* flush_wire sends what the TLS layer has for the peer (handshake
 * messages, records, alerts). */
static int flush_wire(tconn *c)
{
    size_t n = net_tls_outbound(c->tls);
    return n ? send_bytes(c, c->wire, NULL, n) : 0;
}

static size_t queued(void *s) { return uv_stream_get_write_queue_size((uv_stream_t *)s); }

/* ---- the peer -> libraft direction ---- */

static void wire_alloc(uv_handle_t *h, size_t sz, uv_buf_t *b)
{
    (void)sz;
    tconn *c = h->data;
    *b = uv_buf_init((char *)c->rbuf, sizeof c->rbuf);
}

/* pump_in hands libraft every byte the TLS layer can decrypt now. */
static void pump_in(tconn *c)
{
    while (c->state == T_OPEN) {
        if (queued(c->plain) > QUEUE_MAX) {
            if (!c->wire_paused) {
                c->wire_paused = 1;
                uv_read_stop(c->wire);
            }
            return;
        }
        int want;
        ssize_t r = net_tls_read(c->tls, c->tmp, sizeof c->tmp, &want);
        if (r > 0) {
            if (send_bytes(c, (uv_stream_t *)c->plain, c->tmp, (size_t)r))
                tc_close(c, EM_CLOSED, NULL);
            continue;
        }
        if (flush_wire(c)) {        /* reading may answer (a key update, an alert) */
            tc_close(c, EM_CLOSED, NULL);
            return;
        }
        if (r == EM_AGAIN)
            return;
        tc_close(c, EM_CLOSED, r == 0 ? NULL : net_tls_errstr());
        return;
    }
}

static void plain_alloc(uv_handle_t *h, size_t sz, uv_buf_t *b)
{
    (void)sz;
    tconn *c = h->data;
    *b = uv_buf_init((char *)c->pbuf, sizeof c->pbuf);
}

static void plain_read(uv_stream_t *s, ssize_t n, const uv_buf_t *buf);

/* open_pair: the handshake is through - make the pair, hand libraft its
 * end. */
static void open_pair(tconn *c)
{
    uv_os_sock_t fds[2];
    uv_pipe_t *mine = em_malloc(sizeof *mine), *theirs = raft_malloc(sizeof *theirs);
    if (!mine || !theirs || uv_socketpair(SOCK_STREAM, 0, fds, UV_NONBLOCK_PIPE,
                                          UV_NONBLOCK_PIPE)) {
        em_free(mine);
        raft_free(theirs);
        tc_close(c, EM_NOMEM, "could not make the local pair");
        return;
    }
    uv_pipe_init(c->set->loop, mine, 0);
    uv_pipe_init(c->set->loop, theirs, 0);
    mine->data = c;
    c->plain = mine;
    c->refs++;                      /* the plain handle, closed by tc_close from here */
    int bad = 0;
    if (uv_pipe_open(mine, fds[1])) {
        close(fds[1]);
        bad = 1;
    }
    if (uv_pipe_open(theirs, fds[0])) {
        close(fds[0]);
        bad = 1;
    }
    if (bad || uv_read_start((uv_stream_t *)mine, plain_alloc, plain_read)) {
        uv_close((uv_handle_t *)theirs, theirs_closed);
        tc_close(c, EM_CLOSED, "could not open the local pair");
        return;
    }
    c->state = T_OPEN;
    uv_timer_stop(&c->timer);
    uv_close((uv_handle_t *)&c->timer, timer_closed);
    c->done(c->arg, (uv_stream_t *)theirs, 0);
    pump_in(c);                     /* records that came with the last flight */
}

static void handshake(tconn *c)
{
    int want;
    int rc = net_tls_handshake_step(c->tls, &want);
    if (flush_wire(c)) {
        tc_close(c, EM_CLOSED, NULL);
        return;
    }
    if (rc == 0)
        open_pair(c);
    else if (rc != EM_AGAIN)
        tc_close(c, rc == EM_CLOSED ? EM_CLOSED : EM_PROTO,
                 rc == EM_CLOSED ? "peer closed during the handshake" : net_tls_errstr());
}

static void wire_read(uv_stream_t *s, ssize_t n, const uv_buf_t *buf)
{
    (void)buf;
    tconn *c = s->data;
    if (c->state == T_CLOSED || n == 0)
        return;
    if (n < 0) {
        tc_close(c, EM_CLOSED, c->state == T_HANDSHAKE ? "peer closed during the handshake"
                                                       : NULL);
        return;
    }
    if (net_tls_feed(c->tls, c->rbuf, (size_t)n)) {
        tc_close(c, EM_NOMEM, "out of memory");
        return;
    }
    if (c->state == T_HANDSHAKE)
        handshake(c);
    else
        pump_in(c);
}

/* ---- the libraft -> peer direction ---- */

static void plain_read(uv_stream_t *s, ssize_t n, const uv_buf_t *buf)
{
    (void)buf;
    tconn *c = s->data;
    if (c->state != T_OPEN || n == 0)
        return;
    if (n < 0) {                    /* libraft closed its end */
        tc_close(c, EM_CLOSED, NULL);
        return;
    }
    for (size_t off = 0; off < (size_t)n;) {
        int want;
        ssize_t w = net_tls_write(c->tls, c->pbuf + off, (size_t)n - off, &want);
        if (w <= 0) {               /* in memory mode only a failure */
            tc_close(c, EM_PROTO, net_tls_errstr());
            return;
        }
        off += (size_t)w;
    }
    if (flush_wire(c)) {
        tc_close(c, EM_CLOSED, NULL);
        return;
    }
    if (queued(c->wire) > QUEUE_MAX && !c->plain_paused) {
        c->plain_paused = 1;
        uv_read_stop((uv_stream_t *)c->plain);
    }
}

/* resume: a write finished - start reading again what was paused for it
 * once its queue is down to a quarter. */
static void resume(tconn *c)
{
    if (c->plain_paused && queued(c->wire) <= QUEUE_MAX / 4) {
        c->plain_paused = 0;
        if (uv_read_start((uv_stream_t *)c->plain, plain_alloc, plain_read)) {
            tc_close(c, EM_CLOSED, NULL);
            return;
        }
    }
    if (c->wire_paused && queued(c->plain) <= QUEUE_MAX / 4) {
        c->wire_paused = 0;
        if (uv_read_start(c->wire, wire_alloc, wire_read)) {
            tc_close(c, EM_CLOSED, NULL);
            return;
        }
        pump_in(c);                 /* what was fed before the pause */
    }
}

/* ---- start and close ---- */

static void on_timeout(uv_timer_t *t) { tc_close(t->data, EM_TIMEOUT, "handshake timed out"); }

int cl_meta_tls_start(cl_meta_tls_set *s, uv_stream_t *stream, int connect, const char *addr,
                      cl_meta_tls_cb done, void *arg)
{
    tconn *c = em_calloc(1, sizeof *c);
    if (!c)
        return EM_NOMEM;
    if (net_tls_new_mem(s->ctx, connect, &c->tls)) {
        em_free(c);
        return EM_NOMEM;
    }
    c->set = s;
    c->wire = stream;
    c->connect = connect;
    c->done = done;
    c->arg = arg;
    c->refs = 2;                    /* the wire handle, the timer */
    snprintf(c->addr, sizeof c->addr, "%s", addr ? addr : "?");
    stream->data = c;
    uv_timer_init(s->loop, &c->timer);
    c->timer.data = c;
    c->next = s->conns;
    s->conns = c;
    uv_timer_start(&c->timer, on_timeout, CL_META_AUTH_MS, 0);
    if (uv_read_start(stream, wire_alloc, wire_read))
        uv_timer_start(&c->timer, on_timeout, 0, 0);    /* fails from the loop */
    else if (connect)
        handshake(c);               /* the ClientHello */
    return 0;
}

void cl_meta_tls_close_all(cl_meta_tls_set *s)
{
    while (s->conns)                /* tc_close takes each off the list */
        tc_close(s->conns, EM_CLOSED, NULL);
}
