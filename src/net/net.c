/* net.c - epoll worker loops, accept, read/write paths, backpressure, timers.
 *
 * Input path: when a connection has no buffered bytes, the loop reads into its
 * shared 64 KiB read buffer and hands the bytes straight to on_data; only an
 * incomplete tail is copied into the connection's own buffer, which grows as
 * bytes arrive (never sized from a declared length).  Output path: replies
 * are appended to one per-connection buffer and sent with one send() after
 * each read batch, so an unpipelined client gets each reply in one write.
 * Balance: whichever loop wakes for the listener accepts, then hands each
 * connection to the loop owning the fewest (its inbox + eventfd).  Durable
 * replies: with a before_send callback, replies produced in a loop pass are
 * held until the callback (e.g. a WAL group fsync) has returned 0.
 * Prefetch staging: with on_peek, a pass reads its readable connections
 * first and shows the bytes to the layer above before running any (below).
 * Why epoll and not io_uring: the floor server in both forms (ember-bench
 * floor [--uring], bench/bench_floor.c, numbers there) spent the same CPU
 * per op unpipelined and at 1 KiB pipelined, and at most ~9 % less with
 * io_uring at 64 B pipelined, inside this machine's spread (issue #22).
 */
#include "net/net.h"
#include "net/tls.h"

#include <errno.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <arpa/inet.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <unistd.h>

#include "util/clock.h"
#include "util/err.h"
#include "util/mem.h"

#define RBUF_SIZE     (64 * 1024)
#define STAGE_SIZE    (256 * 1024)  /* one pass's reads, with on_peek (below) */
#define STAGE_MAX     256           /* connections staged per pass */
#define MIN_READ      4096          /* free space ensured before a buffered read */
#define READS_PER_EV  16            /* fairness: reads per readiness event */
#define TICK_MS       200           /* timer scan period */
#define INBOX_CAP0    16            /* posts and handed-off connections queued per loop */
#define IN_SHRINK     (64u << 10)   /* drop idle input buffers larger than this */
#define OUT_SHRINK    (64u << 10)   /* drop drained output buffers larger than this:
                                       an idle connection keeps at most ~128 KiB, while
                                       replies up to 64 KiB still reuse their buffer */

typedef struct net_loop net_loop;

/* Work for one loop from another thread (the inbox): a connection accepted
 * by another loop, one this node opened (ctx set, outgoing), or a call. */
typedef struct handoff {
    int fd;                         /* -1 for a call */
    uint8_t outgoing;
    socklen_t sl;
    struct sockaddr_storage ss;
    void *ctx;                      /* net_connect's ctx, or the call's arg */
    void (*fn)(void *arg, int cancelled); /* a call posted with net_post */
} handoff;

struct net_conn {
    int       fd;
    uint32_t  events;               /* epoll interest now registered */
    uint8_t   established, closing, paused;
    uint8_t   pending;              /* on loop->pending: replies wait for before_send */
    uint8_t   close_pending;        /* close once the pending replies are out */
    uint8_t   parked;               /* a request waits (net_conn_park) */
    net_loop *loop;
    void     *state;
    em_buf    in;
    em_buf    out;
    size_t    out_off;              /* bytes of out already sent */
    uint64_t  accepted_ms, active_ms, write_ms;
    net_conn *prev, *next;          /* the loop's list of connections */
    net_conn *pnext;                /* the loop's pending list */
    struct sockaddr_storage peer;
    socklen_t peer_len;
    net_tls  *tls;                  /* NULL on a plaintext port */
    uint8_t   tls_hs;               /* TLS handshake still running */
    uint8_t   outgoing;             /* opened by net_connect */
    void     *ctx;                  /* net_connect's ctx */
    struct net_xout *xo;            /* shared output (net_conn_share), else NULL */
};

/* Shared output: another thread writes whole frames to the socket itself
 * (net_conn_send_any) while the loop owns everything else.  mu covers the
 * socket's write side - the loop's flush and the other thread's send - and
 * `closing`.  `unsent`: the loop's last flush left part of its output
 * unsent, so another thread's frames queue in buf behind it; otherwise buf
 * (which may start with the rest of a frame another thread sent in part)
 * reaches the socket before anything of the loop's.
 *
 * Nobody sleeps on mu for another thread's send(): one who finds mu taken
 * appends its whole frames to pend (pmu: held only to copy) and tries mu
 * once more; whoever holds mu sends pend, its own frames after it, and
 * after unlocking looks at pend again (under pmu), so a frame appended
 * while it sent never waits for a later sender.  On a cluster link the client
 * loop streams and the transport thread acks on one socket; a blocking
 * lock there cost a futex sleep and wake-up per collision (0.3 futex
 * calls per replicated put over 3 nodes, BENCHMARKS.md M5).  Frames of one
 * thread stay in order: pend goes before whatever its holder sends. */
#define XOUT_RESERVE 4096u         /* pend's and spare's first size */

typedef struct net_xout {
    pthread_mutex_t mu;
    em_buf   buf;
    em_buf   spare;                 /* mu's holder sends pend from here */
    uint8_t  unsent;
    pthread_mutex_t pmu;
    em_buf   pend;
    _Atomic size_t npend;           /* pend.len, read without pmu */
} net_xout;

struct net_loop {
    net_server *srv;
    int         ep;
    pthread_t   thread;
    int         started;
    uint8_t    *rbuf;
    net_conn   *conns;              /* all connections of this loop */
    net_conn   *dead;               /* closed this batch; freed at its end */
    uint64_t    next_tick_ms;
    uint64_t    accept_pause_until;
    int         listen_armed;
    int         evfd;               /* signals the inbox */
    pthread_mutex_t inbox_mu;
    handoff    *inbox;
    size_t      inbox_len, inbox_cap;
    handoff    *spare;              /* the inbox's other half (drain_inbox) */
    size_t      spare_cap;
    net_conn   *pending;            /* replies held for before_send */
    uint64_t    now_ms;             /* the clock, read once per loop pass */
    uint8_t    *stage;              /* STAGE_SIZE: with on_peek, this pass's reads */
    size_t      stage_len;
    int         nstaged;
    struct staged { net_conn *c; uint32_t off, len, full; } *staged;
    _Atomic uint32_t load;          /* connections owned + in the inbox */
    uint32_t    nparked;            /* connections with parked set */
    _Atomic int wake_posted;        /* a resume_parked call is queued */
    int         draining;           /* drain_inbox is running posted calls */
    int         self_posted;        /* the loop posted to itself: drain at the pass's end */
    _Atomic uint64_t pub_allocs, pub_bytes, pub_frees;
    int         index;              /* position in net_server.loops */
};

struct net_server {
    int           lfd;
    int           wakefd;
    int           port;
    int           nloops;
    net_loop     *loops;
    net_limits    lim;
    net_callbacks cb;
    net_tls_ctx  *tls;
    char          name[16];       /* the loop threads' name */
    _Atomic int   stop;
    _Atomic uint32_t nconns;
    /* src: the listener's own address (port 0) when it is a specific one:
     * outgoing connections leave from it, so a peer (and a firewall rule)
     * sees the address this server is known by, not the route's default. */
    struct sockaddr_storage src;
    socklen_t     srclen;
};

/* Sentinels stored in epoll_event.data.ptr for the non-connection fds. */
static char tag_listen, tag_wake;

static _Thread_local net_loop *tl_loop;

/* ---- helpers ------------------------------------------------------------ */

/* On a shared connection c->events changes under its mu, from any thread;
 * update_interest reads it without (an atomic load), hence the store. */
static int set_interest_now(net_conn *c, uint32_t ev)
{
    if (ev == c->events)
        return 0;
    struct epoll_event e = { .events = ev, .data.ptr = c };
    if (epoll_ctl(c->loop->ep, EPOLL_CTL_MOD, c->fd, &e) != 0)
        return -errno;
    __atomic_store_n(&c->events, ev, __ATOMIC_RELAXED);
    return 0;
}

static void xout_unlock(net_conn *c);

/* set_interest: the epoll interest of c; on a shared connection another
 * thread may have added EPOLLOUT (net_conn_send_any), hence the lock. */
static int set_interest(net_conn *c, uint32_t ev)
{
    if (!c->xo)
        return set_interest_now(c, ev);
    pthread_mutex_lock(&c->xo->mu);
    int rc = set_interest_now(c, ev);
    xout_unlock(c);
    return rc;
}

static void conn_close(net_conn *c)
{
    if (c->closing)
        return;
    net_loop *l = c->loop;
    if (c->xo) {
        /* No other thread is inside a send once this is set. */
        pthread_mutex_lock(&c->xo->mu);
        c->closing = 1;
        xout_unlock(c);             /* (drops what others left in pend) */
    } else {
        c->closing = 1;
    }
    if (c->parked) {
        c->parked = 0;
        l->nparked--;
    }
    epoll_ctl(l->ep, EPOLL_CTL_DEL, c->fd, NULL);
    if (c->tls) {
        net_tls_close_notify(c->tls);
        net_tls_free(c->tls);
        c->tls = NULL;
    }
    close(c->fd);
    c->fd = -1;
    if (c->state && l->srv->cb.on_close)
        l->srv->cb.on_close(l->srv->cb.arg, c->state);
    c->state = NULL;
    if (c->prev) c->prev->next = c->next; else l->conns = c->next;
    if (c->next) c->next->prev = c->prev;
    c->prev = NULL;
    c->next = l->dead;              /* events later in this batch may name c */
    l->dead = c;
    atomic_fetch_sub(&l->srv->nconns, 1);
    atomic_fetch_sub(&l->load, 1);
}

static int deferred(const net_loop *l) { return l->srv->cb.before_send != NULL; }

/* mark_pending holds c's replies until the end of the loop pass. */
static void mark_pending(net_conn *c)
{
    if (c->pending)
        return;
    c->pending = 1;
    c->pnext = c->loop->pending;
    c->loop->pending = c;
}

static void free_dead(net_loop *l)
{
    while (l->dead) {
        net_conn *c = l->dead;
        l->dead = c->next;
        em_buf_free(&c->in);
        em_buf_free(&c->out);
        if (c->xo) {
            em_buf_free(&c->xo->buf);
            em_buf_free(&c->xo->spare);
            em_buf_free(&c->xo->pend);
            pthread_mutex_destroy(&c->xo->mu);
            pthread_mutex_destroy(&c->xo->pmu);
            em_free(c->xo);
        }
        em_free(c);
    }
}

/* update_interest: EPOLLIN unless paused by backpressure, EPOLLOUT while
 * output is queued. */
/* A parked connection that holds this much unread input is not read from
 * until it goes on (its requests wait; TCP pushes back on the client). */
#define PARKED_IN_MAX (1u << 20)

static int update_interest(net_conn *c)
{
    size_t queued = c->out.len - c->out_off;
    c->paused = queued > c->loop->srv->lim.out_soft_cap ||
                (c->parked && c->in.len >= PARKED_IN_MAX);
    uint32_t ev = (c->paused ? 0 : EPOLLIN | EPOLLRDHUP) | (queued ? EPOLLOUT : 0);
    if (!c->xo)
        return set_interest_now(c, ev);
    /* What other threads queued keeps EPOLLOUT too.  Nothing to change is
     * the common case, seen without mu (another thread that queues output
     * sets EPOLLOUT itself); only dropping EPOLLOUT does not wait for mu: a
     * thread holding it may be queueing, and an EPOLLOUT left on wakes the
     * loop once, which looks again. */
    uint32_t cur = __atomic_load_n(&c->events, __ATOMIC_RELAXED);
    if (cur == ev)
        return 0;
    if ((cur & ~ev) == EPOLLOUT && !(ev & ~cur)) {
        if (pthread_mutex_trylock(&c->xo->mu) != 0)
            return 0;
    } else {
        pthread_mutex_lock(&c->xo->mu);
    }
    int rc = set_interest_now(c, ev | (c->xo->buf.len ? EPOLLOUT : 0));
    xout_unlock(c);
    return rc;
}

/* conn_send / conn_recv: send(2) / recv(2), or the TLS layer with the same
 * contract (-1 + errno EAGAIN when the socket is not ready). */
static ssize_t conn_send(net_conn *c, const void *p, size_t n)
{
    if (!c->tls)
        return send(c->fd, p, n, MSG_NOSIGNAL | MSG_DONTWAIT);
    int want;
    ssize_t w = net_tls_write(c->tls, p, n, &want);
    if (w > 0)
        return w;
    errno = w == EM_AGAIN ? EAGAIN : (w < 0 && w > -4096 ? (int)-w : EPROTO);
    return -1;
}

static ssize_t conn_recv(net_conn *c, void *p, size_t n)
{
    if (!c->tls)
        return recv(c->fd, p, n, MSG_DONTWAIT);
    int want;
    ssize_t r = net_tls_read(c->tls, p, n, &want);
    if (r >= 0)
        return r;
    errno = r == EM_AGAIN ? EAGAIN : (r > -4096 ? (int)-r : EPROTO);
    return -1;
}

/* flush_out sends queued output; returns 0, or negative when the
 * connection must be closed.  One send() for everything queued (the kernel
 * takes it whole unless the socket buffer is full). */
static int flush_out(net_conn *c)
{
    while (c->out_off < c->out.len) {
        ssize_t w = conn_send(c, c->out.p + c->out_off, c->out.len - c->out_off);
        if (w > 0) {
            c->out_off += (size_t)w;
            c->write_ms = c->loop->now_ms;
            continue;
        }
        if (w < 0 && errno == EINTR)
            continue;
        if (w < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))
            break;
        return w < 0 ? -errno : EM_CLOSED;
    }
    if (c->out_off == c->out.len) {
        if (c->out.cap > OUT_SHRINK)
            em_buf_free(&c->out);
        c->out.len = 0;
        c->out_off = 0;
    } else if (c->out.len - c->out_off > c->loop->srv->lim.out_hard_cap) {
        return EM_TOOBIG;
    } else if (c->out_off > (1u << 20) && c->out_off * 2 > c->out.len) {
        /* Compact so appends reuse the front of the buffer. */
        memmove(c->out.p, c->out.p + c->out_off, c->out.len - c->out_off);
        c->out.len -= c->out_off;
        c->out_off = 0;
    }
    return 0;
}

/* ---- shared output (net_xout) ----
 * Every function here but pend_add runs with mu held. */

/* HANDOFF_MAX: the most of its output the loop copies to pend rather than
 * wait for another thread's send (a rebalancing batch waits instead). */
#define HANDOFF_MAX (256u << 10)

static void pend_clear(net_xout *x)
{
    x->pend.len = 0;
    atomic_store_explicit(&x->npend, 0, memory_order_relaxed);
}

/* send_pend sends the frames other threads left in pend, or, when the
 * loop's output or buf must go first, queues them in buf for the loop
 * (EPOLLOUT).  Nonzero when the connection failed (the loop closes it). */
static int send_pend(net_conn *c)
{
    net_xout *x = c->xo;
    while (atomic_load_explicit(&x->npend, memory_order_acquire)) {
        pthread_mutex_lock(&x->pmu);
        em_buf t = x->spare;
        x->spare = x->pend;
        x->pend = t;
        pend_clear(x);
        pthread_mutex_unlock(&x->pmu);
        em_buf *m = &x->spare;
        size_t done = 0;
        int rc = 0;
        if (c->closing) {
            rc = EM_CLOSED;
        } else if (!x->unsent && !x->buf.len) {
            while (done < m->len) {
                ssize_t w = send(c->fd, m->p + done, m->len - done, MSG_NOSIGNAL | MSG_DONTWAIT);
                if (w > 0) {
                    done += (size_t)w;
                } else if (w < 0 && errno == EINTR) {
                    continue;
                } else {
                    if (w < 0 && errno != EAGAIN && errno != EWOULDBLOCK)
                        rc = EM_CLOSED;     /* the loop sees the error and closes it */
                    break;
                }
            }
        }
        if (!rc && done < m->len) {
            /* (a peer that stopped reading: over the hard cap, as a
             * sender's own EM_TOOBIG) */
            rc = x->buf.len + m->len - done > c->loop->srv->lim.out_hard_cap
                     ? EM_TOOBIG
                     : em_buf_append(&x->buf, m->p + done, m->len - done);
            if (rc)
                shutdown(c->fd, SHUT_RDWR);  /* frames lost: the loop closes it */
            else if (!(c->events & EPOLLOUT) && set_interest_now(c, c->events | EPOLLOUT) != 0)
                shutdown(c->fd, SHUT_RDWR);  /* cannot wake the loop for it: it closes */
        }
        m->len = 0;
        if (m->cap > OUT_SHRINK)
            em_buf_free(m);
        if (rc)
            return rc;
    }
    return 0;
}

/* xout_unlock releases mu, then sends what was appended to pend while it
 * was held (its appender found mu taken and left it to the holder).  The
 * look is under pmu, not an atomic peek: pend_add appends under pmu before
 * it tries mu, so either it finds mu free or this finds its frames; and a
 * close, which passes here, is ordered after every sender's last touch of
 * the connection (ThreadSanitizer sees no order through the socket). */
static void xout_unlock(net_conn *c)
{
    net_xout *x = c->xo;
    for (;;) {
        pthread_mutex_unlock(&x->mu);
        pthread_mutex_lock(&x->pmu);
        size_t n = x->pend.len;
        pthread_mutex_unlock(&x->pmu);
        if (!n || pthread_mutex_trylock(&x->mu) != 0)
            return;
        (void)send_pend(c);
    }
}

/* pend_add appends a[0..an) b[0..bn) to pend as one frame (any thread, mu
 * not held), then sends it if mu is free now. */
static int pend_add(net_conn *c, const void *a, size_t an, const void *b, size_t bn)
{
    net_xout *x = c->xo;
    pthread_mutex_lock(&x->pmu);
    size_t was = x->pend.len;
    int rc = was + an + bn > c->loop->srv->lim.out_hard_cap ? EM_TOOBIG : 0;
    if (!rc)
        rc = em_buf_append(&x->pend, a, an);
    if (!rc && bn)
        rc = em_buf_append(&x->pend, b, bn);
    if (rc)
        x->pend.len = was;
    atomic_store_explicit(&x->npend, x->pend.len, memory_order_relaxed);
    pthread_mutex_unlock(&x->pmu);
    if (rc)
        return rc;
    if (pthread_mutex_trylock(&x->mu) == 0) {
        rc = send_pend(c);          /* EM_CLOSED: the frame went nowhere */
        xout_unlock(c);
    }
    return rc;
}

/* flush_locked: flush_out after what other threads left queued (mu held).
 * What they queued goes first unless the loop's last flush left a frame
 * half-sent: then they queued behind it. */
static int flush_locked(net_conn *c)
{
    net_xout *x = c->xo;
    int rc = 0;
    if (atomic_load_explicit(&x->npend, memory_order_acquire)) {
        pthread_mutex_lock(&x->pmu);
        rc = em_buf_append(&x->buf, x->pend.p, x->pend.len);
        pend_clear(x);
        pthread_mutex_unlock(&x->pmu);
    }
    if (!rc && x->buf.len && !x->unsent) {
        /* buf goes first: nothing of the loop's out is on the socket yet
         * (out_off 0) */
        rc = em_buf_append(&x->buf, c->out.p + c->out_off, c->out.len - c->out_off);
        if (!rc) {
            em_buf t = c->out;
            c->out = x->buf;
            c->out_off = 0;
            x->buf = t;
        }
    } else if (!rc && x->buf.len) {
        rc = em_buf_append(&c->out, x->buf.p, x->buf.len);
    }
    x->buf.len = 0;
    if (!rc)
        rc = flush_out(c);
    x->unsent = c->out_off < c->out.len;
    return rc;
}

/* flush: flush_out, on a shared connection under its lock and after what
 * other threads left queued. */
static int flush(net_conn *c)
{
    if (c->tls_hs)
        return 0;                   /* queued until the handshake is done */
    if (!c->xo)
        return flush_out(c);
    pthread_mutex_lock(&c->xo->mu);
    int rc = flush_locked(c);
    xout_unlock(c);
    return rc;
}

/* flush_try: flush, except that while another thread is sending on a
 * shared connection the loop's whole frames go to pend for it to send,
 * instead of the loop sleeping until it is done. */
static int flush_try(net_conn *c)
{
    net_xout *x = c->xo;
    if (!x || c->tls_hs)
        return flush(c);
    if (pthread_mutex_trylock(&x->mu) == 0) {
        int rc = flush_locked(c);
        xout_unlock(c);
        return rc;
    }
    size_t n = c->out.len - c->out_off;
    if (!n)
        return 0;
    /* a half-sent frame of the loop's must be finished first (only the
     * loop sends it, and others queue behind it: mu is not held long) */
    if (x->unsent || n > HANDOFF_MAX)
        return flush(c);
    int rc = pend_add(c, c->out.p + c->out_off, n, NULL, 0);
    if (rc == EM_TOOBIG || rc == EM_NOMEM)
        return flush(c);            /* not taken: wait for mu after all */
    c->out.len = 0;
    c->out_off = 0;
    c->write_ms = c->loop->now_ms;
    if (c->out.cap > OUT_SHRINK)
        em_buf_free(&c->out);
    return rc;                      /* EM_CLOSED: the socket failed */
}

/* deliver gives p[0..n) to the layer above.  Returns bytes consumed or a
 * negative code (close). */
static int deliver(net_conn *c, const uint8_t *p, size_t n, size_t *consumed)
{
    net_server *s = c->loop->srv;
    size_t cap = s->lim.out_soft_cap + c->out_off;
    *consumed = 0;
    int rc = s->cb.on_data(s->cb.arg, c, c->state, p, n, &c->out, cap, consumed);
    if (*consumed > n)
        *consumed = n;
    return rc;
}

/* process_buffered runs on_data over bytes already held in c->in (used after
 * backpressure lifts). */
static int process_buffered(net_conn *c)
{
    if (c->in.len == 0)
        return 0;
    size_t used;
    int rc = deliver(c, c->in.p, c->in.len, &used);
    if (used) {
        memmove(c->in.p, c->in.p + used, c->in.len - used);
        c->in.len -= used;
    }
    return rc;
}

static void close_after_flush(net_conn *c)
{
    if (deferred(c->loop)) {
        /* the replies go out (or not) after before_send; read no more */
        c->close_pending = 1;
        (void)set_interest(c, 0);
        mark_pending(c);
        return;
    }
    (void)flush(c);                 /* best effort: e.g. a final error reply */
    conn_close(c);
}

/* pump sends queued output and, while the queue stays under the soft cap,
 * runs requests left buffered when backpressure stopped processing (the
 * kernel may take the whole queue at once, so no EPOLLOUT would follow). */
static void pump(net_conn *c)
{
    size_t soft = c->loop->srv->lim.out_soft_cap;
    for (;;) {
        if (flush_try(c) < 0) {
            conn_close(c);
            return;
        }
        if (!c->in.len || c->out.len - c->out_off > soft)
            break;
        size_t before = c->in.len;
        if (process_buffered(c) < 0) {
            close_after_flush(c);
            return;
        }
        if (c->in.len == before)
            break;                  /* only an incomplete frame is left */
        if (deferred(c->loop)) {
            mark_pending(c);        /* new replies wait for before_send */
            return;
        }
    }
    if (c->in.len == 0 && c->in.cap > IN_SHRINK)
        em_buf_free(&c->in);
    if (update_interest(c) < 0)
        conn_close(c);
}

/* after_read: the end of a read event (replies go now, or after
 * before_send). */
static void after_read(net_conn *c)
{
    if (c->closing || c->close_pending)
        return;
    if (deferred(c->loop))
        mark_pending(c);
    else
        pump(c);
}

static void on_readable(net_conn *c)
{
    net_loop *l = c->loop;
    /* Bytes TLS already decrypted are invisible to epoll: read them too. */
    for (int i = 0; (i < READS_PER_EV || (c->tls && net_tls_pending(c->tls))) && !c->closing;
         i++) {
        if (c->out.len - c->out_off > l->srv->lim.out_soft_cap ||
            (c->parked && c->in.len >= PARKED_IN_MAX))
            break;                  /* backpressure: leave bytes in the kernel */
        uint8_t *dst;
        size_t room;
        int direct = c->in.len == 0;
        if (direct) {
            dst = l->rbuf;
            room = RBUF_SIZE;
        } else {
            if (c->in.cap - c->in.len < MIN_READ && em_buf_grow(&c->in, MIN_READ) != 0) {
                conn_close(c);
                return;
            }
            dst = c->in.p + c->in.len;
            room = c->in.cap - c->in.len;
        }
        ssize_t r = conn_recv(c, dst, room);
        if (r == 0) {
            close_after_flush(c);   /* a half-closing client still gets its replies */
            return;
        }
        if (r < 0) {
            if (errno == EINTR)
                continue;
            if (errno == EAGAIN || errno == EWOULDBLOCK)
                break;
            conn_close(c);
            return;
        }
        c->active_ms = l->now_ms;
        size_t used;
        int rc;
        if (direct) {
            rc = deliver(c, dst, (size_t)r, &used);
            if (rc == 0 && used < (size_t)r &&
                em_buf_append(&c->in, dst + used, (size_t)r - used) != 0)
                rc = EM_NOMEM;
        } else {
            c->in.len += (size_t)r;
            rc = process_buffered(c);
        }
        if (rc < 0) {
            close_after_flush(c);
            return;
        }
        if ((size_t)r < room && !(c->tls && net_tls_pending(c->tls)))
            break;                  /* drained the socket (and the TLS buffer) */
    }
    after_read(c);
}

/* ---- staged reads (on_peek) ----------------------------------------------
 * With on_peek, a pass reads every readable plaintext connection that holds
 * no bytes into the loop's stage buffer first, shows all those buffers to
 * the layer above (which prefetches what their requests will touch), and
 * only then runs them: the store misses of one unpipelined request per
 * connection overlap instead of following each other (issue #22).  Any
 * other connection (TLS, bytes held, paused, the stage full) takes the
 * ordinary path at once. */

/* stage_read: one read of c into the stage; 1 if c was staged (or closed),
 * 0 if it must take the ordinary path. */
static int stage_read(net_loop *l, net_conn *c)
{
    size_t room = STAGE_SIZE - l->stage_len;
    if (room > RBUF_SIZE)
        room = RBUF_SIZE;
    if (c->tls || c->in.len || l->nstaged == STAGE_MAX || room < MIN_READ ||
        c->out.len - c->out_off > l->srv->lim.out_soft_cap)
        return 0;
    uint8_t *dst = l->stage + l->stage_len;
    ssize_t r;
    do
        r = conn_recv(c, dst, room);
    while (r < 0 && errno == EINTR);
    if (r == 0) {
        close_after_flush(c);
        return 1;
    }
    if (r < 0) {
        if (errno == EAGAIN || errno == EWOULDBLOCK) {
            after_read(c);          /* as on_readable with nothing to read */
            return 1;
        }
        conn_close(c);
        return 1;
    }
    c->active_ms = l->now_ms;
    struct staged *st = &l->staged[l->nstaged++];
    st->c = c;
    st->off = (uint32_t)l->stage_len;
    st->len = (uint32_t)r;
    st->full = (size_t)r == room;
    l->stage_len += (size_t)r;
    l->srv->cb.on_peek(l->srv->cb.arg, c->state, dst, (size_t)r);
    return 1;
}

/* run_staged gives each staged buffer to on_data, as on_readable's direct
 * path does, then finishes each connection's read event. */
static void run_staged(net_loop *l)
{
    l->srv->cb.on_peek_done(l->srv->cb.arg);
    for (int i = 0; i < l->nstaged; i++) {
        struct staged *st = &l->staged[i];
        net_conn *c = st->c;
        if (c->closing || c->close_pending)
            continue;               /* closed meanwhile: its bytes go with it */
        const uint8_t *p = l->stage + st->off;
        size_t used;
        int rc = deliver(c, p, st->len, &used);
        if (rc == 0 && used < st->len && em_buf_append(&c->in, p + used, st->len - used) != 0)
            rc = EM_NOMEM;
        if (rc < 0) {
            close_after_flush(c);
            continue;
        }
        if (st->full)
            on_readable(c);         /* the socket may hold more: the ordinary path */
        else
            after_read(c);
    }
    l->nstaged = 0;
    l->stage_len = 0;
}

/* tls_step advances a TLS handshake (an outgoing one starts on the event
 * that says the connect ended); once done, reads what the peer sent and
 * sends what on_open queued meanwhile. */
static void tls_step(net_conn *c)
{
    int want;
    int rc = net_tls_handshake_step(c->tls, &want);
    if (rc == EM_AGAIN) {
        if (set_interest(c, want == NET_TLS_WANT_WRITE ? EPOLLOUT : EPOLLIN | EPOLLRDHUP) < 0)
            conn_close(c);
        return;
    }
    if (rc < 0) {
        net_server *s = c->loop->srv;
        /* A connect that failed is not a handshake that failed. */
        int refused = c->outgoing && rc > -4096;    /* -errno, not an EM_ code */
        if (s->cb.on_tls_fail && !refused)
            s->cb.on_tls_fail(s->cb.arg, c, rc == EM_CLOSED ? "peer closed" : net_tls_errstr());
        conn_close(c);
        return;
    }
    c->tls_hs = 0;
    on_readable(c);
}

static void on_writable(net_conn *c)
{
    pump(c);
}

/* conn_setup makes fd a connection of l (its load was already counted). */
static void conn_setup(net_loop *l, int fd, const struct sockaddr_storage *ss, socklen_t sl,
                       int outgoing, void *ctx)
{
    net_server *s = l->srv;
    int one = 1;
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    net_conn *c = em_calloc(1, sizeof *c);
    if (!c) {
        atomic_fetch_sub(&s->nconns, 1);
        atomic_fetch_sub(&l->load, 1);
        close(fd);
        return;
    }
    c->fd = fd;
    c->loop = l;
    c->outgoing = (uint8_t)outgoing;
    c->ctx = ctx;
    c->peer = *ss;
    c->peer_len = sl;
    /* The pass's stamp, not a fresh clock read: tick() at the end of this
     * pass compares with that stamp, and a later value would underflow. */
    c->accepted_ms = c->active_ms = c->write_ms = l->now_ms;
    if (s->tls) {
        if (net_tls_new(s->tls, fd, outgoing, &c->tls) != 0) {
            atomic_fetch_sub(&s->nconns, 1);
            atomic_fetch_sub(&l->load, 1);
            close(fd);
            em_free(c);
            return;
        }
        c->tls_hs = 1;
    }
    c->next = l->conns;
    if (l->conns)
        l->conns->prev = c;
    l->conns = c;
    /* An outgoing socket may still be connecting: EPOLLOUT reports the end
     * of connect (success or an error that the next read then sees). */
    struct epoll_event e = { .events = EPOLLIN | EPOLLRDHUP | (outgoing ? EPOLLOUT : 0),
                             .data.ptr = c };
    c->events = e.events;
    if (epoll_ctl(l->ep, EPOLL_CTL_ADD, fd, &e) != 0) {
        c->events = 0;
        conn_close(c);
        return;
    }
    c->state = s->cb.on_open ? s->cb.on_open(s->cb.arg, c) : NULL;
    if (!c->state)
        conn_close(c);
}

/* least_loaded picks the loop owning the fewest connections (l on a tie). */
static net_loop *least_loaded(net_loop *l)
{
    net_server *s = l->srv;
    net_loop *best = l;
    uint32_t min = atomic_load_explicit(&l->load, memory_order_relaxed);
    for (int i = 0; i < s->nloops && min; i++) {
        uint32_t n = atomic_load_explicit(&s->loops[i].load, memory_order_relaxed);
        if (n < min) {
            min = n;
            best = &s->loops[i];
        }
    }
    return best;
}

/* hand_off queues fd (or a call, fd -1) in t's inbox and wakes t.  0 or
 * EM_NOMEM. */
static int hand_off(net_loop *t, int fd, const struct sockaddr_storage *ss, socklen_t sl,
                    int outgoing, void *ctx, void (*fn)(void *, int))
{
    pthread_mutex_lock(&t->inbox_mu);
    if (t->inbox_len == t->inbox_cap) {
        size_t cap = t->inbox_cap ? t->inbox_cap * 2 : INBOX_CAP0;
        handoff *p = em_realloc(t->inbox, cap * sizeof *p);
        if (!p) {
            pthread_mutex_unlock(&t->inbox_mu);
            return EM_NOMEM;
        }
        t->inbox = p;
        t->inbox_cap = cap;
    }
    handoff *h = &t->inbox[t->inbox_len++];
    h->fd = fd;
    if (ss)
        h->ss = *ss;
    h->sl = sl;
    h->outgoing = (uint8_t)outgoing;
    h->ctx = ctx;
    h->fn = fn;
    int first = t->inbox_len == 1;
    pthread_mutex_unlock(&t->inbox_mu);
    /* One signal per batch: while the inbox holds entries, the one that
     * made it non-empty signalled, and drain_inbox swaps until it finds it
     * empty (the eventfd write is a syscall per post otherwise). */
    if (first && tl_loop == t) {
        /* Posted by the loop itself (a transport callback's work for later
         * in the pass): it drains before its pass ends, and a signal would
         * cost an eventfd write, a read and a pass (two of each per write
         * forwarded to a primary). */
        t->self_posted = 1;
    } else if (first) {
        uint64_t one = 1;
        (void)!write(t->evfd, &one, sizeof one);
    }
    return 0;
}

/* drain_inbox sets up the connections other threads handed to l and runs
 * the calls posted to it, in the order they were queued (posted calls to
 * one loop keep their order: a sender's frames leave in sequence). */
static void drain_inbox(net_loop *l, int signalled)
{
    uint64_t v;
    if (signalled)
        (void)!read(l->evfd, &v, sizeof v);
    for (;;) {
        /* Swap the inbox with the spare array: senders keep appending while
         * this batch runs, and neither array is reallocated once grown. */
        pthread_mutex_lock(&l->inbox_mu);
        size_t n = l->inbox_len;
        handoff *batch = l->inbox;
        size_t cap = l->inbox_cap;
        l->inbox = l->spare;
        l->inbox_cap = l->spare_cap;
        l->inbox_len = 0;
        pthread_mutex_unlock(&l->inbox_mu);
        l->draining = 1;
        for (size_t i = 0; i < n; i++) {
            handoff *h = &batch[i];
            if (h->fn)
                h->fn(h->ctx, 0);
            else
                conn_setup(l, h->fd, &h->ss, h->sl, h->outgoing, h->ctx);
        }
        l->draining = 0;
        l->spare = batch;
        l->spare_cap = cap;
        if (!n)
            break;
    }
    l->self_posted = 0;             /* what it posted ran above */
}

static void accept_some(net_loop *l)
{
    net_server *s = l->srv;
    for (int i = 0; i < 64; i++) {
        struct sockaddr_storage ss;
        socklen_t sl = sizeof ss;
        int fd = accept4(s->lfd, (struct sockaddr *)&ss, &sl, SOCK_NONBLOCK | SOCK_CLOEXEC);
        if (fd < 0) {
            if (errno == EINTR || errno == ECONNABORTED)
                continue;
            if (errno == EMFILE || errno == ENFILE || errno == ENOBUFS || errno == ENOMEM) {
                /* Out of descriptors: stop polling the listener briefly
                 * instead of spinning on a level-triggered event. */
                epoll_ctl(l->ep, EPOLL_CTL_DEL, s->lfd, NULL);
                l->listen_armed = 0;
                l->accept_pause_until = em_now_ms() + 100;
            }
            return;
        }
        uint32_t n = atomic_fetch_add(&s->nconns, 1) + 1;
        if (s->lim.max_conns && n > s->lim.max_conns) {
            atomic_fetch_sub(&s->nconns, 1);
            close(fd);              /* over the cap: reject at accept */
            continue;
        }
        /* The loop that happens to wake accepts; the least loaded owns. */
        net_loop *t = least_loaded(l);
        atomic_fetch_add(&t->load, 1);
        if (t == l) {
            conn_setup(l, fd, &ss, sl, 0, NULL);
        } else if (hand_off(t, fd, &ss, sl, 0, NULL, NULL) != 0) {
            atomic_fetch_sub(&t->load, 1);
            atomic_fetch_sub(&s->nconns, 1);
            close(fd);
        }
    }
}

/* send_pending: the end of a loop pass with before_send.  Replies of this
 * pass leave only after before_send returned 0; if it failed, connections
 * holding such replies are closed (a failed fsync is never acknowledged).
 * Sending may run more buffered requests, which wait for the next round. */
static void send_pending(net_loop *l)
{
    while (l->pending) {
        int rc = l->srv->cb.before_send(l->srv->cb.arg);
        net_conn *list = l->pending;
        l->pending = NULL;
        while (list) {
            net_conn *c = list;
            list = c->pnext;
            c->pending = 0;
            c->pnext = NULL;
            if (c->closing)
                continue;
            if (rc != 0) {
                conn_close(c);
            } else if (c->close_pending) {
                (void)flush(c);     /* best effort, as close_after_flush */
                conn_close(c);
            } else {
                pump(c);
            }
        }
    }
}

/* resume_parked lets l's parked connections go on (on_resume parks each
 * anew if it still cannot); their replies leave as on_data's do. */
static void resume_parked(net_loop *l)
{
    net_server *s = l->srv;
    net_conn *next;
    for (net_conn *c = l->conns; c && l->nparked; c = next) {
        next = c->next;
        if (!c->parked)
            continue;
        c->parked = 0;
        l->nparked--;
        if (c->closing || c->close_pending || !s->cb.on_resume)
            continue;
        size_t before = c->out.len;
        int rc = s->cb.on_resume(s->cb.arg, c, c->state, &c->out,
                                 s->lim.out_soft_cap + c->out_off);
        if (rc < 0) {
            close_after_flush(c);
        } else if (c->out.len != before && deferred(l)) {
            mark_pending(c);        /* sent after before_send */
        } else if (c->out.len != before || (c->in.len && !c->parked)) {
            pump(c);                /* ... and input left unread while it was parked */
        }
    }
}

static void resume_posted(void *arg, int cancelled)
{
    net_loop *l = arg;
    atomic_store(&l->wake_posted, 0);
    if (!cancelled)
        resume_parked(l);
}

void net_conn_park(net_conn *c)
{
    if (!c->parked) {
        c->parked = 1;
        c->loop->nparked++;
    }
}

int net_wake_parked(net_server *s)
{
    int rc = 0;
    for (int i = 0; i < s->nloops; i++) {
        net_loop *l = &s->loops[i];
        if (atomic_exchange(&l->wake_posted, 1))
            continue;               /* one queued call serves every release */
        int r = net_post(s, i, resume_posted, l);
        if (r) {
            atomic_store(&l->wake_posted, 0);
            rc = r;
        }
    }
    return rc;
}

/* tick closes connections past their handshake, idle or write-stall
 * deadlines.  A scan of the loop's list every TICK_MS: cheap even at 10 000
 * connections, and bounds every timeout's lateness to TICK_MS. */
static void tick(net_loop *l, uint64_t now)
{
    const net_limits *lim = &l->srv->lim;
    net_conn *next;
    for (net_conn *c = l->conns; c; c = next) {
        next = c->next;
        if (!c->established && lim->handshake_timeout_ms &&
            now - c->accepted_ms >= lim->handshake_timeout_ms) {
            conn_close(c);
        } else if (lim->idle_timeout_ms && now - c->active_ms >= lim->idle_timeout_ms) {
            conn_close(c);
        } else if (lim->write_stall_ms && c->out.len > c->out_off &&
                   now - c->write_ms >= lim->write_stall_ms) {
            conn_close(c);
        }
    }
    /* Parked requests retry at least every tick: that is what bounds a
     * lock wait by its transaction's timeout when no release wakes it. */
    if (l->nparked)
        resume_parked(l);
    if (l->srv->cb.on_tick)
        l->srv->cb.on_tick(l->srv->cb.arg, l->index, now);
    if (!l->listen_armed && now >= l->accept_pause_until) {
        struct epoll_event e = { .events = EPOLLIN | EPOLLEXCLUSIVE, .data.ptr = &tag_listen };
        if (epoll_ctl(l->ep, EPOLL_CTL_ADD, l->srv->lfd, &e) == 0)
            l->listen_armed = 1;
    }
}

static void publish_mem(net_loop *l)
{
    em_mem_stats m = em_mem_thread();
    atomic_store_explicit(&l->pub_allocs, m.allocs, memory_order_relaxed);
    atomic_store_explicit(&l->pub_bytes, m.bytes, memory_order_relaxed);
    atomic_store_explicit(&l->pub_frees, m.frees, memory_order_relaxed);
}

static void *loop_main(void *arg)
{
    net_loop *l = arg;
    net_server *s = l->srv;
    tl_loop = l;
    pthread_setname_np(pthread_self(), s->name);
    struct epoll_event evs[256];
    l->now_ms = em_now_ms();
    l->next_tick_ms = l->now_ms + TICK_MS;
    while (!atomic_load(&s->stop)) {
        /* One clock read per pass, after the wait: the timers (handshake,
         * idle, write stall) are checked every TICK_MS, so a pass-old stamp
         * is exact enough for them, and a clock read per send and per
         * receive cost ~1-2 % of CPU unpipelined (docs/profile-net.md). */
        uint64_t now = l->now_ms;
        int timeout = l->next_tick_ms > now ? (int)(l->next_tick_ms - now) : 0;
        if (l->self_posted)
            timeout = 0;            /* posted to itself after run_staged (a tick,
                                       pass end): no signal will wake it */
        int n = epoll_wait(l->ep, evs, 256, timeout);
        if (n < 0 && errno != EINTR)
            break;
        l->now_ms = now = em_now_ms();
        for (int i = 0; i < n; i++) {
            void *tag = evs[i].data.ptr;
            uint32_t ev = evs[i].events;
            if (tag == &tag_listen) {
                accept_some(l);
                continue;
            }
            if (tag == &tag_wake)
                continue;           /* stop flag is checked by the loop */
            if (tag == l) {
                drain_inbox(l, 1);
                continue;
            }
            net_conn *c = tag;
            if (c->closing || c->close_pending)
                continue;
            if (c->tls_hs) {
                tls_step(c);
                continue;
            }
            if (ev & EPOLLOUT)
                on_writable(c);
            if (c->closing)
                continue;
            if (c->paused && (ev & (EPOLLERR | EPOLLHUP)))
                conn_close(c);      /* gone while we held its replies */
            else if (!c->paused && (ev & (EPOLLIN | EPOLLERR | EPOLLHUP | EPOLLRDHUP)) &&
                     !(l->stage && stage_read(l, c)))
                on_readable(c);
        }
        if (l->nstaged)
            run_staged(l);
        if (l->self_posted)
            drain_inbox(l, 0);
        if (l->pending)
            send_pending(l);
        if (now >= l->next_tick_ms) {
            tick(l, now);
            l->next_tick_ms = now + TICK_MS;
            if (l->pending)
                send_pending(l);    /* replies of requests the tick resumed */
        }
        if (s->cb.on_pass_end)
            s->cb.on_pass_end(s->cb.arg);
        free_dead(l);
        publish_mem(l);
    }
    return NULL;
}

/* ---- setup / teardown ----------------------------------------------------- */

static int open_listener(const net_options *o, int *out_fd, int *out_port)
{
    const char *host = o->host && *o->host ? o->host : "127.0.0.1";
    char portstr[16];
    snprintf(portstr, sizeof portstr, "%d", o->port);
    struct addrinfo hints = { .ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM,
                              .ai_flags = AI_PASSIVE | AI_NUMERICSERV };
    struct addrinfo *res = NULL;
    if (getaddrinfo(host, portstr, &hints, &res) != 0 || !res)
        return -EADDRNOTAVAIL;
    int rc = -EADDRNOTAVAIL;
    for (struct addrinfo *a = res; a; a = a->ai_next) {
        int fd = socket(a->ai_family, a->ai_socktype | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
        if (fd < 0) {
            rc = -errno;
            continue;
        }
        int one = 1;
        setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
        if (bind(fd, a->ai_addr, a->ai_addrlen) != 0 || listen(fd, 4096) != 0) {
            rc = -errno;
            close(fd);
            continue;
        }
        struct sockaddr_storage ss;
        socklen_t sl = sizeof ss;
        getsockname(fd, (struct sockaddr *)&ss, &sl);
        *out_port = ss.ss_family == AF_INET6 ? ntohs(((struct sockaddr_in6 *)&ss)->sin6_port)
                                             : ntohs(((struct sockaddr_in *)&ss)->sin_port);
        *out_fd = fd;
        rc = 0;
        break;
    }
    freeaddrinfo(res);
    return rc;
}

static void destroy(net_server *s)
{
    for (int i = 0; i < s->nloops; i++) {
        net_loop *l = &s->loops[i];
        while (l->conns)
            conn_close(l->conns);
        free_dead(l);
        /* Whatever was still queued: sockets are closed, and a posted call
         * runs now (on the stopping thread) so what it owns is freed. */
        for (size_t j = 0; j < l->inbox_len; j++) {
            if (l->inbox[j].fn) {
                l->inbox[j].fn(l->inbox[j].ctx, 1);
                continue;
            }
            close(l->inbox[j].fd);
            atomic_fetch_sub(&s->nconns, 1);
        }
        em_free(l->inbox);
        em_free(l->spare);
        pthread_mutex_destroy(&l->inbox_mu);
        if (l->evfd >= 0)
            close(l->evfd);
        if (l->ep >= 0)
            close(l->ep);
        em_free(l->rbuf);
        em_free(l->stage);
        em_free(l->staged);
    }
    em_free(s->loops);
    if (s->lfd >= 0)
        close(s->lfd);
    if (s->wakefd >= 0)
        close(s->wakefd);
    em_free(s);
}

int net_server_start(net_server **out, const net_options *opt)
{
    *out = NULL;
    net_server *s = em_calloc(1, sizeof *s);
    if (!s)
        return EM_NOMEM;
    s->lfd = s->wakefd = -1;
    s->lim = opt->limits;
    if (!s->lim.out_soft_cap)
        s->lim.out_soft_cap = 4u << 20;
    if (!s->lim.out_hard_cap)
        s->lim.out_hard_cap = 256u << 20;
    if (s->lim.out_hard_cap < s->lim.out_soft_cap)
        s->lim.out_hard_cap = s->lim.out_soft_cap;
    if (s->lim.peer)
        s->lim.out_soft_cap = SIZE_MAX / 4;     /* never reached: no pause (net.h) */
    s->cb = opt->cb;
    s->tls = opt->tls;
    snprintf(s->name, sizeof s->name, "%s", opt->name ? opt->name : "em-net");
    int n = opt->threads > 0 ? opt->threads : net_default_threads();
    if (n > 256)
        n = 256;
    int rc = open_listener(opt, &s->lfd, &s->port);
    if (rc) {
        em_free(s);
        return rc;
    }
    socklen_t sl = sizeof s->src;
    if (getsockname(s->lfd, (struct sockaddr *)&s->src, &sl) == 0) {
        if (s->src.ss_family == AF_INET) {
            struct sockaddr_in *a = (struct sockaddr_in *)&s->src;
            a->sin_port = 0;
            if (a->sin_addr.s_addr != htonl(INADDR_ANY))
                s->srclen = sl;
        } else if (s->src.ss_family == AF_INET6) {
            struct sockaddr_in6 *a = (struct sockaddr_in6 *)&s->src;
            a->sin6_port = 0;
            if (memcmp(&a->sin6_addr, &in6addr_any, sizeof in6addr_any) != 0)
                s->srclen = sl;
        }
    }
    s->wakefd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
    s->loops = em_calloc((size_t)n, sizeof *s->loops);
    if (s->wakefd < 0 || !s->loops) {
        rc = s->wakefd < 0 ? -errno : EM_NOMEM;
        destroy(s);
        return rc;
    }
    s->nloops = n;
    for (int i = 0; i < n; i++) {
        s->loops[i].ep = s->loops[i].evfd = -1;
        pthread_mutex_init(&s->loops[i].inbox_mu, NULL);
    }
    for (int i = 0; i < n; i++) {
        net_loop *l = &s->loops[i];
        l->srv = s;
        l->index = i;
        l->ep = epoll_create1(EPOLL_CLOEXEC);
        l->evfd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
        l->rbuf = em_malloc(RBUF_SIZE);
        /* Both halves of the inbox up front: the second one would otherwise
         * be allocated by whichever post first meets a drain in progress,
         * possibly long into steady state. */
        l->inbox = em_malloc(INBOX_CAP0 * sizeof *l->inbox);
        l->spare = em_malloc(INBOX_CAP0 * sizeof *l->spare);
        l->inbox_cap = l->inbox ? INBOX_CAP0 : 0;
        l->spare_cap = l->spare ? INBOX_CAP0 : 0;
        if (s->cb.on_peek && s->cb.on_peek_done) {
            l->stage = em_malloc(STAGE_SIZE);
            l->staged = em_malloc(STAGE_MAX * sizeof *l->staged);
            if (!l->stage || !l->staged) {
                destroy(s);
                return EM_NOMEM;
            }
        }
        if (l->ep < 0 || l->evfd < 0 || !l->rbuf || !l->inbox || !l->spare) {
            rc = l->ep < 0 || l->evfd < 0 ? -errno : EM_NOMEM;
            destroy(s);
            return rc;
        }
        struct epoll_event e = { .events = EPOLLIN | EPOLLEXCLUSIVE, .data.ptr = &tag_listen };
        struct epoll_event w = { .events = EPOLLIN, .data.ptr = &tag_wake };
        struct epoll_event x = { .events = EPOLLIN, .data.ptr = l };
        if (epoll_ctl(l->ep, EPOLL_CTL_ADD, s->lfd, &e) != 0 ||
            epoll_ctl(l->ep, EPOLL_CTL_ADD, s->wakefd, &w) != 0 ||
            epoll_ctl(l->ep, EPOLL_CTL_ADD, l->evfd, &x) != 0) {
            rc = -errno;
            destroy(s);
            return rc;
        }
        l->listen_armed = 1;
    }
    for (int i = 0; i < n; i++) {
        rc = pthread_create(&s->loops[i].thread, NULL, loop_main, &s->loops[i]);
        if (rc) {
            rc = -rc;
            atomic_store(&s->stop, 1);
            uint64_t one = 1;
            (void)!write(s->wakefd, &one, sizeof one);
            for (int j = 0; j < i; j++)
                pthread_join(s->loops[j].thread, NULL);
            destroy(s);
            return rc;
        }
        s->loops[i].started = 1;
    }
    *out = s;
    return 0;
}

/* One loop per CPU, except on one or two CPUs: there a single loop.  On the
 * 2-vCPU development VM with the client on the same cores (issue #22,
 * docs/profile-net.md), two loops against one gave, unpipelined (1 KiB,
 * 90/10, 50 connections), 1.37x vs 1.13x the floor server's CPU per op and
 * p99 6.7 ms vs 3.7 ms under load (1.51x vs 1.20x, 2.0 ms vs 0.74 ms on a
 * quieter box), for ~1.5x the pipelined throughput: two busy loops plus the
 * client on two cores mean every loop wakes on another CPU (~40 us here).  Machines
 * with more CPUs were not measured; they keep one loop per CPU. */
int net_default_threads(void)
{
    long cpus = sysconf(_SC_NPROCESSORS_ONLN);
    if (cpus <= 2)
        return 1;
    return cpus > 256 ? 256 : (int)cpus;
}

int net_server_port(const net_server *s) { return s->port; }

uint32_t net_conn_count(const net_server *s) { return atomic_load(&((net_server *)s)->nconns); }

void net_server_stop(net_server *s)
{
    if (!s)
        return;
    atomic_store(&s->stop, 1);
    uint64_t one = 1;
    (void)!write(s->wakefd, &one, sizeof one);   /* wakes every loop (level-triggered) */
    for (int i = 0; i < s->nloops; i++)
        if (s->loops[i].started)
            pthread_join(s->loops[i].thread, NULL);
    destroy(s);
}

void net_conn_established(net_conn *c) { c->established = 1; }

int net_conn_worker(const net_conn *c) { return c->loop->index; }

void net_conn_peer(const net_conn *c, char *buf, size_t n)
{
    char host[INET6_ADDRSTRLEN] = "?";
    int port = 0;
    if (c->peer.ss_family == AF_INET) {
        const struct sockaddr_in *a = (const struct sockaddr_in *)&c->peer;
        inet_ntop(AF_INET, &a->sin_addr, host, sizeof host);
        port = ntohs(a->sin_port);
    } else if (c->peer.ss_family == AF_INET6) {
        const struct sockaddr_in6 *a = (const struct sockaddr_in6 *)&c->peer;
        inet_ntop(AF_INET6, &a->sin6_addr, host, sizeof host);
        port = ntohs(a->sin6_port);
    }
    snprintf(buf, n, "%s:%d", host, port);
}

void net_mem_stats(net_server *s, em_mem_stats *sum)
{
    memset(sum, 0, sizeof *sum);
    for (int i = 0; i < s->nloops; i++) {
        net_loop *l = &s->loops[i];
        if (l == tl_loop) {
            em_mem_stats m = em_mem_thread();
            sum->allocs += m.allocs;
            sum->bytes += m.bytes;
            sum->frees += m.frees;
        } else {
            sum->allocs += atomic_load_explicit(&l->pub_allocs, memory_order_relaxed);
            sum->bytes += atomic_load_explicit(&l->pub_bytes, memory_order_relaxed);
            sum->frees += atomic_load_explicit(&l->pub_frees, memory_order_relaxed);
        }
    }
}

/* ---- connections this node opens, and work posted to a loop ------------- */

int net_connect(net_server *s, const char *host, int port, void *ctx)
{
    char portstr[16];
    snprintf(portstr, sizeof portstr, "%d", port);
    struct addrinfo hints = { .ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM,
                              .ai_flags = AI_NUMERICHOST | AI_NUMERICSERV };
    struct addrinfo *ai = NULL;
    if (port <= 0 || port > 65535 || getaddrinfo(host, portstr, &hints, &ai) != 0 || !ai) {
        if (ai)
            freeaddrinfo(ai);
        return EM_INVAL;
    }
    int fd = socket(ai->ai_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (fd < 0) {
        int e = -errno;
        freeaddrinfo(ai);
        return e;
    }
    struct sockaddr_storage ss;
    socklen_t sl = (socklen_t)ai->ai_addrlen;
    memcpy(&ss, ai->ai_addr, ai->ai_addrlen);
    /* Best effort: a source address of another family, or one that cannot
     * reach the peer, leaves the kernel's choice. */
    if (s->srclen && s->src.ss_family == ai->ai_family)
        (void)bind(fd, (struct sockaddr *)&s->src, s->srclen);
    int rc = connect(fd, ai->ai_addr, ai->ai_addrlen);
    freeaddrinfo(ai);
    if (rc != 0 && errno != EINPROGRESS) {
        rc = -errno;
        close(fd);
        return rc;
    }
    net_loop *t = least_loaded(&s->loops[0]);
    atomic_fetch_add(&s->nconns, 1);
    atomic_fetch_add(&t->load, 1);
    if (hand_off(t, fd, &ss, sl, 1, ctx, NULL) != 0) {
        atomic_fetch_sub(&s->nconns, 1);
        atomic_fetch_sub(&t->load, 1);
        close(fd);
        return EM_NOMEM;
    }
    return 0;
}

int net_post_needless(net_server *s, int loop)
{
    if (loop < 0 || loop >= s->nloops)
        return 0;
    net_loop *l = &s->loops[loop];
    if (tl_loop != l || l->draining)
        return 0;
    pthread_mutex_lock(&l->inbox_mu);
    int empty = l->inbox_len == 0;
    pthread_mutex_unlock(&l->inbox_mu);
    return empty;
}

int net_post(net_server *s, int loop, void (*fn)(void *arg, int cancelled), void *arg)
{
    if (loop < 0 || loop >= s->nloops)
        return EM_INVAL;
    return hand_off(&s->loops[loop], -1, NULL, 0, 0, arg, fn);
}

void *net_conn_ctx(const net_conn *c) { return c->ctx; }

int net_conn_outgoing(const net_conn *c) { return c->outgoing; }

em_buf *net_conn_out(net_conn *c) { return &c->out; }

int net_conn_kick(net_conn *c)
{
    if (c->closing)
        return EM_CLOSED;
    if (c->close_pending || c->pending || c->tls_hs)
        return 0;                   /* leaves with the pass's held replies, or after the handshake */
    if (flush_try(c) < 0 || update_interest(c) < 0) {
        conn_close(c);
        return EM_CLOSED;
    }
    return 0;
}

void net_conn_close(net_conn *c) { conn_close(c); }

int net_conn_share(net_conn *c)
{
    if (c->xo)
        return 0;
    if (c->tls || c->tls_hs)
        return EM_INVAL;            /* the TLS session is the loop's alone */
    net_xout *x = em_calloc(1, sizeof *x);
    /* pend and spare take turns (send_pend swaps them): both grown now, so
     * the first collision on the connection does not allocate (a replicated
     * put allocates nothing, asserted by tests/chaos/cluster_repl.sh). */
    if (!x || em_buf_reserve(&x->pend, XOUT_RESERVE) || em_buf_reserve(&x->spare, XOUT_RESERVE)) {
        if (x) {
            em_buf_free(&x->pend);
            em_free(x);
        }
        return EM_NOMEM;
    }
    pthread_mutex_init(&x->mu, NULL);
    pthread_mutex_init(&x->pmu, NULL);
    c->xo = x;
    return 0;
}

int net_conn_out_idle(net_conn *c)
{
    if (c->out.len != c->out_off)
        return 0;
    if (!c->xo)
        return 1;
    pthread_mutex_lock(&c->xo->mu);
    int idle = !c->xo->buf.len && !c->xo->unsent &&
               !atomic_load_explicit(&c->xo->npend, memory_order_acquire);
    xout_unlock(c);
    return idle;
}

int net_conn_send_any(net_conn *c, const void *a, size_t an, const void *b, size_t bn)
{
    net_xout *x = c->xo;
    size_t done = 0, total = an + bn;
    int rc = 0;
    if (pthread_mutex_trylock(&x->mu) != 0)
        return pend_add(c, a, an, b, bn);   /* the holder sends it */
    if (c->closing || send_pend(c) != 0) {
        rc = EM_CLOSED;
    } else if (!x->unsent && !x->buf.len) {
        struct iovec v[2] = { { (void *)a, an }, { (void *)b, bn } };
        struct msghdr m = { .msg_iov = v, .msg_iovlen = bn ? 2 : 1 };
        ssize_t w;
        do
            w = sendmsg(c->fd, &m, MSG_NOSIGNAL | MSG_DONTWAIT);
        while (w < 0 && errno == EINTR);
        if (w >= 0)
            done = (size_t)w;
        else if (errno != EAGAIN && errno != EWOULDBLOCK)
            rc = EM_CLOSED;         /* the loop sees the error and closes it */
    }
    if (!rc && done < total) {
        /* The loop sends the rest, before anything queued after it, once
         * the socket takes more: EPOLLOUT wakes it (pump, flush). */
        size_t was = x->buf.len;
        if (was + total - done > c->loop->srv->lim.out_hard_cap)
            rc = EM_TOOBIG;
        if (!rc && done < an)
            rc = em_buf_append(&x->buf, (const uint8_t *)a + done, an - done);
        if (!rc && bn)
            rc = em_buf_append(&x->buf, (const uint8_t *)b + (done > an ? done - an : 0),
                               done > an ? bn - (done - an) : bn);
        if (rc)
            x->buf.len = was;               /* no part of the frame stays queued */
        if (rc && done)
            shutdown(c->fd, SHUT_RDWR);     /* half a frame sent: the loop closes it */
        if (!rc && !(c->events & EPOLLOUT) && set_interest_now(c, c->events | EPOLLOUT) != 0)
            shutdown(c->fd, SHUT_RDWR);     /* cannot wake the loop for it: it closes */
    }
    xout_unlock(c);
    return rc;
}
