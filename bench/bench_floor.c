/* bench_floor.c - `ember-bench floor`: the yardstick of the N1 grid
 * (../shared/BENCHMARKS.md §N1, issue #22).  A one-thread epoll server that
 * speaks just enough of the Ignite thin protocol for `ember-bench load` and
 * stores nothing: handshake (§1.2-1.3), GET_OR_CREATE_WITH_NAME (1052), GET
 * (1000) and PUT (1001).  A GET is answered with the value every writer of
 * the load generator puts under its key (the key as 8 LE bytes, then the
 * run's filler: ld_filler), so the client verifies the floor's replies
 * exactly as emberd's.  Everything a real server adds above this (a store,
 * metrics, timeouts, several loops) is what the floor leaves out.
 *
 * Per readiness event: read until the socket is drained (or 16 reads),
 * answer every whole frame into one reply buffer, and send it with one
 * send(); an unsent tail waits in the connection for EPOLLOUT, and the
 * connection is not read meanwhile (backpressure).  Input bytes go into one
 * shared 64 KiB buffer; only an incomplete frame's tail is copied into the
 * connection's own buffer, as emberd's net.c does.
 *
 * The input is hostile like any server's: a frame longer than the largest
 * PUT the configured value size allows (or not positive) closes the
 * connection before anything is allocated for it.
 */
#include "bench.h"
#include "load.h"

#include "util/mem.h"

#include <errno.h>
#include <liburing.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <unistd.h>

#define FL_RBUF      (64u * 1024)
#define FL_READS     16              /* reads per readiness event (fairness) */
#define FL_MAX_VALUE (16u << 20)     /* the load generator's own limit */

/* Ignite op and type codes (reference §2.1, §3.1). */
#define OP_GET 1000
#define OP_PUT 1001
#define OP_GET_OR_CREATE_WITH_NAME 1052
#define T_INT 3
#define T_STRING 9
#define T_UUID 10
#define T_BYTE_ARR 12

typedef struct fl_buf {
    uint8_t *p;
    size_t len, cap;
} fl_buf;

typedef struct fl_conn {
    int fd;
    int ready;                       /* handshake done */
    int ver;                         /* major*10000 + minor*100 + patch */
    uint32_t events;
    fl_buf in;                       /* an incomplete frame's bytes */
    fl_buf out;                      /* replies the kernel did not take yet */
    size_t out_off;
} fl_conn;

typedef struct fl_srv {
    int ep, lfd;
    uint32_t vsize;
    uint32_t max_frame;
    uint8_t *rbuf;
    fl_buf reply;                    /* this batch's replies */
    uint8_t *gtpl;                   /* GET reply payload: 0c, int len, value */
    size_t gtpl_len;
    uint64_t conns, frames;
} fl_srv;

static void st32(uint8_t *p, uint32_t v)
{
    p[0] = (uint8_t)v; p[1] = (uint8_t)(v >> 8); p[2] = (uint8_t)(v >> 16); p[3] = (uint8_t)(v >> 24);
}
static void st64(uint8_t *p, uint64_t v) { st32(p, (uint32_t)v); st32(p + 4, (uint32_t)(v >> 32)); }
static uint16_t ld16(const uint8_t *p) { return (uint16_t)(p[0] | p[1] << 8); }
static uint32_t ld32(const uint8_t *p)
{
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

/* reserve: room for n more bytes; 0 or -1 (out of memory). */
static int reserve(fl_buf *b, size_t n)
{
    if (b->cap - b->len >= n)
        return 0;
    size_t cap = b->cap ? b->cap : 4096;
    while (cap - b->len < n)
        cap *= 2;
    uint8_t *p = em_realloc(b->p, cap);
    if (!p)
        return -1;
    b->p = p;
    b->cap = cap;
    return 0;
}

static int append(fl_buf *b, const void *p, size_t n)
{
    if (reserve(b, n))
        return -1;
    memcpy(b->p + b->len, p, n);
    b->len += n;
    return 0;
}

/* ---- replies ------------------------------------------------------------
 * Handshake success (§1.3): int len, byte 1, [features 0c int32 0 if
 * >= 1.7.0], [UUID 0a + 16 bytes if >= 1.4.0].
 * Response header (§1.5): int len, long rid, then int status (< 1.4.0) or
 * short flags (>= 1.4.0); an error adds a typed string message. */

static int reply_handshake(fl_srv *s, fl_conn *c)
{
    uint8_t m[4 + 1 + 5 + 17];
    size_t n = 4;
    m[n++] = 1;
    if (c->ver >= 10700) {
        m[n++] = T_BYTE_ARR;
        st32(m + n, 0);
        n += 4;
    }
    if (c->ver >= 10400) {
        m[n++] = T_UUID;
        memset(m + n, 0x42, 16);
        n += 16;
    }
    st32(m, (uint32_t)(n - 4));
    return append(&s->reply, m, n);
}

/* header writes the response header for rid at dst; returns its length. */
static size_t header(const fl_conn *c, uint8_t *dst, uint64_t rid, int status)
{
    st64(dst + 4, rid);
    if (c->ver < 10400) {
        st32(dst + 12, (uint32_t)status);
        return 16;
    }
    dst[12] = status ? 1 : 0;
    dst[13] = 0;
    if (!status)
        return 14;
    st32(dst + 14, (uint32_t)status);
    return 18;
}

static int reply_empty(fl_srv *s, const fl_conn *c, uint64_t rid)
{
    if (reserve(&s->reply, 18))
        return -1;
    uint8_t *d = s->reply.p + s->reply.len;
    size_t n = header(c, d, rid, 0);
    st32(d, (uint32_t)(n - 4));
    s->reply.len += n;
    return 0;
}

static int reply_error(fl_srv *s, const fl_conn *c, uint64_t rid, int op)
{
    char msg[80];
    int ml = snprintf(msg, sizeof msg, "op code %d is not served by ember-bench floor", op);
    if (reserve(&s->reply, 18 + 5 + (size_t)ml))
        return -1;
    uint8_t *d = s->reply.p + s->reply.len;
    size_t n = header(c, d, rid, 1);
    d[n] = T_STRING;
    st32(d + n + 1, (uint32_t)ml);
    memcpy(d + n + 5, msg, (size_t)ml);
    n += 5 + (size_t)ml;
    st32(d, (uint32_t)(n - 4));
    s->reply.len += n;
    return 0;
}

/* key_number: the load generator's key index from a typed key (int, or the
 * string "key:" + 10 digits); 0 for anything else, whose GET then carries
 * key 0's value (the floor stores nothing to say otherwise). */
static uint32_t key_number(const uint8_t *k, size_t n)
{
    if (n >= 5 && k[0] == T_INT)
        return ld32(k + 1);
    if (n >= 5 + LD_KEY_LEN && k[0] == T_STRING && ld32(k + 1) == LD_KEY_LEN &&
        memcmp(k + 5, "key:", 4) == 0) {
        uint32_t v = 0;
        for (int i = 9; i < 5 + LD_KEY_LEN; i++) {
            if (k[i] < '0' || k[i] > '9')
                return 0;
            v = v * 10 + (uint32_t)(k[i] - '0');
        }
        return v;
    }
    return 0;
}

static int reply_get(fl_srv *s, const fl_conn *c, uint64_t rid, const uint8_t *key, size_t kn)
{
    if (reserve(&s->reply, 16 + s->gtpl_len))
        return -1;
    uint8_t *d = s->reply.p + s->reply.len;
    size_t n = header(c, d, rid, 0);
    memcpy(d + n, s->gtpl, s->gtpl_len);
    uint8_t k8[8];
    st64(k8, key_number(key, kn));
    memcpy(d + n + 5, k8, s->vsize < 8 ? s->vsize : 8);
    n += s->gtpl_len;
    st32(d, (uint32_t)(n - 4));
    s->reply.len += n;
    return 0;
}

/* frame answers one whole frame (body without its length); -1 = close. */
static int frame(fl_srv *s, fl_conn *c, const uint8_t *b, size_t len)
{
    s->frames++;
    if (!c->ready) {
        /* byte 1, three shorts, client code 2 (§1.2) */
        if (len < 8 || b[0] != 1 || b[7] != 2 || ld16(b + 1) != 1)
            return -1;
        c->ver = 10000 + ld16(b + 3) * 100 + ld16(b + 5);
        c->ready = 1;
        return reply_handshake(s, c);
    }
    if (len < 10)
        return -1;
    int op = ld16(b);
    uint64_t rid = (uint64_t)ld32(b + 2) | (uint64_t)ld32(b + 6) << 32;
    switch (op) {
    case OP_GET:
        /* cache id (4) and flags (1), then the key */
        if (len < 15)
            return reply_error(s, c, rid, op);
        return reply_get(s, c, rid, b + 15, len - 15);
    case OP_PUT:
    case OP_GET_OR_CREATE_WITH_NAME:
        return reply_empty(s, c, rid);
    default:
        return reply_error(s, c, rid, op);
    }
}

/* feed answers every whole frame in p[0..n); returns the bytes consumed, or
 * -1 to close. */
static long feed(fl_srv *s, fl_conn *c, const uint8_t *p, size_t n)
{
    size_t pos = 0;
    while (n - pos >= 4) {
        uint32_t len = ld32(p + pos);
        if (len == 0 || len > s->max_frame)
            return -1;
        if (n - pos - 4 < len)
            break;
        if (frame(s, c, p + pos + 4, len) < 0)
            return -1;
        pos += 4 + len;
    }
    return (long)pos;
}

/* ---- connections ---------------------------------------------------------- */

static void conn_close(fl_srv *s, fl_conn *c)
{
    epoll_ctl(s->ep, EPOLL_CTL_DEL, c->fd, NULL);
    close(c->fd);
    em_free(c->in.p);
    em_free(c->out.p);
    em_free(c);
}

static int set_events(fl_srv *s, fl_conn *c, uint32_t ev)
{
    if (ev == c->events)
        return 0;
    struct epoll_event e = {.events = ev, .data.ptr = c};
    if (epoll_ctl(s->ep, EPOLL_CTL_MOD, c->fd, &e) != 0)
        return -1;
    c->events = ev;
    return 0;
}

/* send_out sends p[0..n) with one send(); keeps what the kernel did not
 * take in c->out.  0, or -1 to close. */
static int send_out(fl_srv *s, fl_conn *c, const uint8_t *p, size_t n)
{
    size_t off = 0;
    while (off < n) {
        ssize_t w = send(c->fd, p + off, n - off, MSG_NOSIGNAL | MSG_DONTWAIT);
        if (w > 0) {
            off += (size_t)w;
            continue;
        }
        if (w < 0 && errno == EINTR)
            continue;
        if (w < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))
            break;
        return -1;
    }
    if (off == n)
        return 0;
    if (p != c->out.p + c->out_off) {
        c->out.len = c->out_off = 0;
        if (append(&c->out, p + off, n - off))
            return -1;
    } else {
        c->out_off += off;
    }
    return set_events(s, c, EPOLLOUT);
}

static void on_writable(fl_srv *s, fl_conn *c)
{
    if (send_out(s, c, c->out.p + c->out_off, c->out.len - c->out_off) < 0) {
        conn_close(s, c);
        return;
    }
    if (c->events & EPOLLOUT && c->out_off < c->out.len)
        return;
    c->out.len = c->out_off = 0;
    if (set_events(s, c, EPOLLIN | EPOLLRDHUP) < 0)
        conn_close(s, c);
}

static void on_readable(fl_srv *s, fl_conn *c)
{
    s->reply.len = 0;
    for (int i = 0; i < FL_READS; i++) {
        int direct = c->in.len == 0;
        uint8_t *dst;
        size_t room;
        if (direct) {
            dst = s->rbuf;
            room = FL_RBUF;
        } else {
            if (reserve(&c->in, 4096))
                goto fail;
            dst = c->in.p + c->in.len;
            room = c->in.cap - c->in.len;
        }
        ssize_t r = recv(c->fd, dst, room, MSG_DONTWAIT);
        if (r == 0)
            goto fail;
        if (r < 0) {
            if (errno == EINTR)
                continue;
            if (errno == EAGAIN || errno == EWOULDBLOCK)
                break;
            goto fail;
        }
        long used;
        if (direct) {
            used = feed(s, c, dst, (size_t)r);
            if (used < 0 || ((size_t)used < (size_t)r &&
                             append(&c->in, dst + used, (size_t)r - (size_t)used)))
                goto fail;
        } else {
            c->in.len += (size_t)r;
            used = feed(s, c, c->in.p, c->in.len);
            if (used < 0)
                goto fail;
            memmove(c->in.p, c->in.p + used, c->in.len - (size_t)used);
            c->in.len -= (size_t)used;
            if (c->in.len == 0 && c->in.cap > FL_RBUF) {
                em_free(c->in.p);
                c->in = (fl_buf){0};
            }
        }
        if ((size_t)r < room)
            break;                   /* drained */
    }
    if (s->reply.len && send_out(s, c, s->reply.p, s->reply.len) < 0)
        goto fail;
    return;
fail:
    if (s->reply.len)
        (void)send(c->fd, s->reply.p, s->reply.len, MSG_NOSIGNAL | MSG_DONTWAIT);
    conn_close(s, c);
}

static void accept_all(fl_srv *s)
{
    for (;;) {
        int fd = accept4(s->lfd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC);
        if (fd < 0)
            return;
        int one = 1;
        setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
        fl_conn *c = em_calloc(1, sizeof *c);
        if (!c) {
            close(fd);
            continue;
        }
        c->fd = fd;
        c->events = EPOLLIN | EPOLLRDHUP;
        struct epoll_event e = {.events = c->events, .data.ptr = c};
        if (epoll_ctl(s->ep, EPOLL_CTL_ADD, fd, &e) != 0) {
            close(fd);
            em_free(c);
            continue;
        }
        s->conns++;
    }
}

/* ---- io_uring mode (--uring) ----------------------------------------------
 * The same protocol code over io_uring (Debian's liburing 2.3): a multishot
 * accept, then per connection a recv into its own buffer, the replies to
 * what it read built into the connection's output buffer, one send of all of
 * them, and the next recv once the send completed; every SQE of a loop pass
 * goes to the kernel in one io_uring_submit_and_wait.  It answers whether
 * the kernel path gets cheaper with io_uring than with epoll, before net.c
 * is rebuilt on it.  Measured 2026-12-02 00:16 UTC (load 4.2-4.5),
 * interleaved rounds of 3 s, server CPU µs/op per round, 1 KiB, 90/10:
 *   P1:        epoll 6.683 6.687 6.652 7.001   io_uring 7.194 6.412 5.562 6.895
 *   P16:       epoll 0.544 0.517 0.530 0.589   io_uring 0.549 0.547 0.544 0.553
 *   P16, 64 B: epoll 0.487 0.492 0.465         io_uring 0.459 0.444 0.438
 * No difference at 1 KiB, perhaps 5-9 % at 64 B P16 (inside the spread of
 * this machine): not enough to move emberd's loops off epoll (net.c). */

#define UR_ACCEPT ((uint64_t)1)
#define UR_RECV   2u
#define UR_SEND   3u

typedef struct ur_conn {
    fl_conn c;                       /* protocol state; c.in for partial frames */
    uint8_t *rb;                     /* FL_RBUF receive buffer */
    fl_buf out;                      /* replies being sent */
    size_t out_off;
} ur_conn;

static uint64_t ur_tag(const ur_conn *u, unsigned kind) { return (uint64_t)(uintptr_t)u | kind; }

static int ur_recv(struct io_uring *r, ur_conn *u)
{
    struct io_uring_sqe *q = io_uring_get_sqe(r);
    if (!q)
        return -1;
    io_uring_prep_recv(q, u->c.fd, u->rb, FL_RBUF, 0);
    io_uring_sqe_set_data64(q, ur_tag(u, UR_RECV));
    return 0;
}

static int ur_send(struct io_uring *r, ur_conn *u)
{
    struct io_uring_sqe *q = io_uring_get_sqe(r);
    if (!q)
        return -1;
    io_uring_prep_send(q, u->c.fd, u->out.p + u->out_off, u->out.len - u->out_off, MSG_NOSIGNAL);
    io_uring_sqe_set_data64(q, ur_tag(u, UR_SEND));
    return 0;
}

static void ur_close(ur_conn *u)
{
    close(u->c.fd);
    em_free(u->c.in.p);
    em_free(u->out.p);
    em_free(u->rb);
    em_free(u);
}

/* ur_got handles n received bytes: replies into u->out; 0, or -1 = close. */
static int ur_got(fl_srv *s, ur_conn *u, size_t n)
{
    /* feed() appends to s->reply: lend it the connection's buffer */
    fl_buf keep = s->reply;
    s->reply = u->out;
    s->reply.len = 0;
    long used;
    int rc = 0;
    if (u->c.in.len == 0) {
        used = feed(s, &u->c, u->rb, n);
        if (used < 0 || ((size_t)used < n && append(&u->c.in, u->rb + used, n - (size_t)used)))
            rc = -1;
    } else if (append(&u->c.in, u->rb, n)) {
        rc = -1;
    } else {
        used = feed(s, &u->c, u->c.in.p, u->c.in.len);
        if (used < 0) {
            rc = -1;
        } else {
            memmove(u->c.in.p, u->c.in.p + used, u->c.in.len - (size_t)used);
            u->c.in.len -= (size_t)used;
        }
    }
    u->out = s->reply;
    u->out_off = 0;
    s->reply = keep;
    return rc;
}

static int run_uring(fl_srv *s)
{
    struct io_uring r;
    int rc = io_uring_queue_init(4096, &r, 0);
    if (rc < 0) {
        fprintf(stderr, "ember-bench floor: io_uring_queue_init: %s\n", strerror(-rc));
        return 1;
    }
    struct io_uring_sqe *q = io_uring_get_sqe(&r);
    io_uring_prep_multishot_accept(q, s->lfd, NULL, NULL, SOCK_CLOEXEC);
    io_uring_sqe_set_data64(q, UR_ACCEPT);
    for (;;) {
        rc = io_uring_submit_and_wait(&r, 1);
        if (rc < 0 && rc != -EINTR)
            break;
        struct io_uring_cqe *cqe;
        unsigned head, seen = 0;
        io_uring_for_each_cqe(&r, head, cqe) {
            seen++;
            uint64_t d = io_uring_cqe_get_data64(cqe);
            int res = cqe->res;
            if (d == UR_ACCEPT) {
                if (!(cqe->flags & IORING_CQE_F_MORE)) {   /* re-arm */
                    q = io_uring_get_sqe(&r);
                    if (q) {
                        io_uring_prep_multishot_accept(q, s->lfd, NULL, NULL, SOCK_CLOEXEC);
                        io_uring_sqe_set_data64(q, UR_ACCEPT);
                    }
                }
                if (res < 0)
                    continue;
                int one = 1;
                setsockopt(res, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
                ur_conn *u = em_calloc(1, sizeof *u);
                uint8_t *rb = u ? em_malloc(FL_RBUF) : NULL;
                if (!u || !rb) {
                    em_free(u);
                    close(res);
                    continue;
                }
                u->c.fd = res;
                u->rb = rb;
                if (ur_recv(&r, u) < 0)
                    ur_close(u);
                s->conns++;
                continue;
            }
            ur_conn *u = (ur_conn *)(uintptr_t)(d & ~(uint64_t)3);
            if ((d & 3) == UR_RECV) {
                if (res <= 0 || ur_got(s, u, (size_t)res) < 0) {
                    ur_close(u);
                    continue;
                }
                if ((u->out.len ? ur_send(&r, u) : ur_recv(&r, u)) < 0)
                    ur_close(u);
            } else {                  /* UR_SEND */
                if (res <= 0) {
                    ur_close(u);
                    continue;
                }
                u->out_off += (size_t)res;
                if ((u->out_off < u->out.len ? ur_send(&r, u) : ur_recv(&r, u)) < 0)
                    ur_close(u);
            }
        }
        io_uring_cq_advance(&r, seen);
    }
    fprintf(stderr, "ember-bench floor: io_uring_submit_and_wait: %s\n", strerror(-rc));
    return 1;
}

/* ---- command -------------------------------------------------------------- */

static int listen_on(const char *host, int port)
{
    char ps[16];
    snprintf(ps, sizeof ps, "%d", port);
    struct addrinfo hints = {.ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM,
                             .ai_flags = AI_PASSIVE | AI_NUMERICSERV};
    struct addrinfo *ai = NULL;
    if (getaddrinfo(host, ps, &hints, &ai) != 0 || !ai)
        return -1;
    int fd = socket(ai->ai_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    int one = 1;
    if (fd >= 0)
        setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    if (fd >= 0 && (bind(fd, ai->ai_addr, ai->ai_addrlen) != 0 || listen(fd, 4096) != 0)) {
        close(fd);
        fd = -1;
    }
    freeaddrinfo(ai);
    return fd;
}

static int cmd_floor(int argc, char **argv)
{
    const char *host = "127.0.0.1";
    long port = 10800, vsize = 64;
    int uring = 0;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (strcmp(a, "--uring") == 0) {
            uring = 1;
            continue;
        }
        if (i + 1 >= argc) {
            fprintf(stderr, "usage: ember-bench floor [--host H] [--port P] [--value-size N] [--uring]\n");
            return 2;
        }
        if (strcmp(a, "--host") == 0) {
            host = argv[++i];
            continue;
        }
        char *end;
        long v = strtol(argv[++i], &end, 10);
        if (*end || v < 0) {
            fprintf(stderr, "ember-bench floor: %s wants a number\n", a);
            return 2;
        }
        if (strcmp(a, "--port") == 0)
            port = v;
        else if (strcmp(a, "--value-size") == 0)
            vsize = v;
        else {
            fprintf(stderr, "ember-bench floor: unknown option %s\n", a);
            return 2;
        }
    }
    if (port < 1 || port > 65535 || vsize > (long)FL_MAX_VALUE) {
        fprintf(stderr, "ember-bench floor: option out of range\n");
        return 2;
    }
    signal(SIGPIPE, SIG_IGN);
    fl_srv s = {.vsize = (uint32_t)vsize};
    /* The longest frame the load generator sends: a PUT of a string key. */
    s.max_frame = (uint32_t)ld_max_request(&(ld_cfg){.value_size = s.vsize});
    s.gtpl_len = 5 + s.vsize;
    s.rbuf = em_malloc(FL_RBUF);
    s.gtpl = em_malloc(s.gtpl_len);
    if (!s.rbuf || !s.gtpl)
        return 1;
    s.gtpl[0] = T_BYTE_ARR;
    st32(s.gtpl + 1, s.vsize);
    ld_filler(s.gtpl + 5, s.vsize);
    s.lfd = listen_on(host, (int)port);
    if (s.lfd < 0) {
        fprintf(stderr, "ember-bench floor: cannot listen on %s:%ld: %s\n", host, port,
                strerror(errno));
        return 1;
    }
    if (uring) {
        fprintf(stderr, "ember-bench floor: listening on %s:%ld, values of %ld B, io_uring\n",
                host, port, vsize);
        return run_uring(&s);
    }
    s.ep = epoll_create1(EPOLL_CLOEXEC);
    struct epoll_event le = {.events = EPOLLIN, .data.ptr = NULL};
    if (s.ep < 0 || epoll_ctl(s.ep, EPOLL_CTL_ADD, s.lfd, &le) != 0) {
        fprintf(stderr, "ember-bench floor: epoll: %s\n", strerror(errno));
        return 1;
    }
    fprintf(stderr, "ember-bench floor: listening on %s:%ld, values of %ld B\n", host, port, vsize);
    struct epoll_event evs[256];
    for (;;) {
        int n = epoll_wait(s.ep, evs, 256, -1);
        if (n < 0 && errno != EINTR)
            break;
        for (int i = 0; i < n; i++) {
            fl_conn *c = evs[i].data.ptr;
            if (!c) {
                accept_all(&s);
                continue;
            }
            /* A connection closed earlier in this batch is not reported
             * again: epoll drops a closed fd's pending events only for
             * later calls, but each fd appears at most once per call. */
            if (evs[i].events & EPOLLOUT)
                on_writable(&s, c);
            else if (evs[i].events & (EPOLLIN | EPOLLERR | EPOLLHUP | EPOLLRDHUP))
                on_readable(&s, c);
        }
    }
    return 1;
}

BENCH_COMMAND(floor, "floor", "floor [--host H] [--port P] [--value-size N] [--uring]: the N1 floor server",
              cmd_floor)
