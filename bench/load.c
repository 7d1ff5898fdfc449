/* load.c - `ember-bench load`: a pipelining network load generator that
 * drives emberd (Ignite thin protocol), redis-server (RESP) and memcached
 * (binary protocol) with the same client code (../shared/BENCHMARKS.md §N1).
 * Threads own connections on an epoll loop; each connection keeps `pipeline`
 * requests in flight; every response is verified; latency goes into a
 * log-linear histogram; the server's CPU comes from /proc/PID/stat.
 */
#include "bench.h"
#include "load.h"

#include "util/clock.h"
#include "util/hash.h"
#include "util/mem.h"

#include <errno.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>

/* Phases, set by the main thread and read by workers once per loop turn. */
enum { PH_SETUP, PH_PREFILL, PH_WARMUP, PH_MEASURE, PH_STOP, PH_QUIT };
static const char *const phase_name[] = {"setup", "prefill", "warmup", "measure", "stop", "quit"};

#define PREFILL_DEPTH 32      /* requests in flight per connection while prefilling */
#define SLOT_BITS 16          /* Ignite request id = seq << 16 | slot */

typedef struct ld_opts {
    int proto;
    const char *host;
    int port;
    int conns, threads, pipeline;
    uint32_t value_size, keys;
    int mix;                  /* percent of GETs */
    double duration, warmup;
    uint64_t ops;             /* 0 = run for duration */
    long pid;                 /* server to account, 0 = none */
    int csv, json, prefill, int_keys;
    const char *label;
    const char *mem_eps;      /* --mem-stats: emberd nodes to read op 32000 from */
    uint32_t *keymap;         /* --key-list: the keys (o->keys of them); NULL = 0..keys-1 */
    const char *hosts;        /* --hosts H:P,...: connection i goes to host i % nhosts */
    int partition_aware;      /* --partition-aware: each key to its primary (load_pa.c) */
    uint32_t  key_max;        /* the largest key */
} ld_opts;

typedef struct slot {
    uint64_t rid, t0;
    uint32_t key;
    uint8_t op, busy, measured, was_set;
} slot;

typedef struct conn {
    int fd, dead, want_out;
    uint8_t *in, *out;
    size_t in_len, in_cap, out_off, out_len, out_cap;
    slot *slots;
    const uint32_t *keys;        /* --partition-aware: the keys its host is primary of */
    uint32_t nkeys;
    uint16_t *free_idx, *fifo;   /* free slot stack; send order (RESP, memcached) */
    int nslots, nfree, fifo_head, fifo_n, inflight;
    uint64_t seq;
    uint64_t lat_sum, lat_n;     /* measured latency of this connection */
} conn;

struct run;

typedef struct worker {
    pthread_t tid;
    struct run *R;
    int ep, nconns, inflight, last_phase, live;
    conn *conns;
    uint64_t rng;
    uint32_t pf_next, pf_end;
    uint64_t quota, issued;
    /* owned by the worker until join */
    uint64_t gets, hits, misses, puts, measured, prefill_puts;
    uint64_t err_server, err_verify, err_proto, err_conn, err_lost;
    char first_err[200];
    ld_hist hist;
    /* published for the main thread */
    _Atomic uint64_t pub_done, pub_errors;
    _Atomic int pf_done, m_done, drained;
} worker;

typedef struct run {
    ld_opts o;
    ld_cfg cfg;
    _Atomic int phase;
    _Atomic uint64_t *keyset;    /* bit per key: a PUT of it was acknowledged */
    worker *w;
    size_t max_req, max_resp;
} run;

/* ---------------------------------------------------------------- errors */

static void werr(worker *w, uint64_t *counter, const char *fmt, ...)
{
    (*counter)++;
    atomic_fetch_add_explicit(&w->pub_errors, 1, memory_order_relaxed);
    if (w->first_err[0])
        return;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(w->first_err, sizeof w->first_err, fmt, ap);
    va_end(ap);
}

static void conn_fail(worker *w, conn *c, const char *why, int err)
{
    if (c->dead)
        return;
    werr(w, &w->err_conn, "connection lost: %s%s%s", why, err ? ": " : "",
         err ? strerror(err) : "");
    /* Requests still in flight will never be answered: each is an error. */
    w->err_lost += (uint64_t)c->inflight;
    atomic_fetch_add_explicit(&w->pub_errors, (uint64_t)c->inflight, memory_order_relaxed);
    w->inflight -= c->inflight;
    c->inflight = 0;
    c->dead = 1;
    w->live--;
    epoll_ctl(w->ep, EPOLL_CTL_DEL, c->fd, NULL);
    close(c->fd);
    c->fd = -1;
}

/* ---------------------------------------------------------------- keys */

static inline uint64_t rnd(uint64_t *s) { return ld_rnd(s); }

static inline int key_is_set(run *R, uint32_t key)
{
    uint64_t word = atomic_load_explicit(&R->keyset[key >> 6], memory_order_relaxed);
    return (int)((word >> (key & 63)) & 1);
}

static inline void key_mark_set(run *R, uint32_t key)
{
    uint64_t bit = 1ull << (key & 63);
    /* Read first: after prefill every bit is set and a write per PUT would
     * bounce the cache line between threads. */
    if (!(atomic_load_explicit(&R->keyset[key >> 6], memory_order_relaxed) & bit))
        atomic_fetch_or_explicit(&R->keyset[key >> 6], bit, memory_order_relaxed);
}

/* ---------------------------------------------------------------- requests */

static void conn_fill(worker *w, conn *c, int phase, uint64_t now)
{
    run *R = w->R;
    if (c->dead || (phase != PH_PREFILL && phase != PH_WARMUP && phase != PH_MEASURE))
        return;
    int limit = phase == PH_PREFILL ? c->nslots : R->o.pipeline;
    if (c->inflight >= limit)
        return;
    if (c->out_off) {
        memmove(c->out, c->out + c->out_off, c->out_len - c->out_off);
        c->out_len -= c->out_off;
        c->out_off = 0;
    }
    while (c->inflight < limit) {
        uint32_t key;
        uint8_t op;
        if (phase == PH_PREFILL) {
            if (w->pf_next >= w->pf_end)
                break;
            key = w->pf_next++;
            if (R->o.keymap)
                key = R->o.keymap[key];
            op = LD_PUT;
        } else {
            if (phase == PH_MEASURE && R->o.ops) {
                if (w->issued >= w->quota)
                    break;
                w->issued++;
            }
            uint64_t r = rnd(&w->rng);
            if (c->keys) {
                key = c->keys[((r >> 32) * c->nkeys) >> 32];
            } else {
                key = (uint32_t)(((r >> 32) * R->o.keys) >> 32);
                if (R->o.keymap)
                    key = R->o.keymap[key];
            }
            op = (uint32_t)(((r & 0xffffffffu) * 100) >> 32) < (uint32_t)R->o.mix ? LD_GET : LD_PUT;
        }
        uint16_t idx = c->free_idx[--c->nfree];
        slot *s = &c->slots[idx];
        s->rid = (c->seq++ << SLOT_BITS) | idx;
        s->t0 = now;
        s->key = key;
        s->op = op;
        s->busy = 1;
        s->measured = phase == PH_MEASURE;
        s->was_set = op == LD_GET && key_is_set(R, key);
        uint8_t *dst = c->out + c->out_len;
        c->out_len += op == LD_GET ? ld_enc_get(&R->cfg, dst, s->rid, key)
                                   : ld_enc_put(&R->cfg, dst, s->rid, key);
        if (R->cfg.proto != LD_IGNITE) {
            c->fifo[(c->fifo_head + c->fifo_n) % c->nslots] = idx;
            c->fifo_n++;
        }
        c->inflight++;
        w->inflight++;
    }
}

static void set_events(worker *w, conn *c, int want_out)
{
    struct epoll_event ev = {.events = EPOLLIN | (want_out ? EPOLLOUT : 0u), .data.ptr = c};
    if (epoll_ctl(w->ep, EPOLL_CTL_MOD, c->fd, &ev) == 0)
        c->want_out = want_out;
}

static void conn_flush(worker *w, conn *c)
{
    while (!c->dead && c->out_off < c->out_len) {
        ssize_t k = send(c->fd, c->out + c->out_off, c->out_len - c->out_off, MSG_NOSIGNAL);
        if (k > 0) {
            c->out_off += (size_t)k;
        } else if (k < 0 && errno == EINTR) {
            continue;
        } else if (k < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
            if (!c->want_out)
                set_events(w, c, 1);
            return;
        } else {
            conn_fail(w, c, "send", k < 0 ? errno : 0);
            return;
        }
    }
    c->out_off = c->out_len = 0;
    if (c->want_out && !c->dead)
        set_events(w, c, 0);
}

/* ---------------------------------------------------------------- responses */

/* complete matches one response to its request and verifies it.  Returns -1
 * when the stream can no longer be trusted (unknown request id). */
static int complete(worker *w, conn *c, const ld_resp *r, uint64_t now, int phase)
{
    run *R = w->R;
    uint16_t idx;
    if (R->cfg.proto == LD_IGNITE) {
        idx = (uint16_t)(r->rid & ((1u << SLOT_BITS) - 1));
        if (idx >= c->nslots || !c->slots[idx].busy || c->slots[idx].rid != r->rid) {
            werr(w, &w->err_proto, "response with unknown request id %llu",
                 (unsigned long long)r->rid);
            return -1;
        }
    } else {
        if (c->fifo_n == 0) {
            werr(w, &w->err_proto, "response without a request");
            return -1;
        }
        idx = c->fifo[c->fifo_head];
        c->fifo_head = (c->fifo_head + 1) % c->nslots;
        c->fifo_n--;
        if (R->cfg.proto == LD_MEMCACHE && (uint32_t)c->slots[idx].rid != (uint32_t)r->rid) {
            werr(w, &w->err_proto, "memcached opaque %llu, expected %llu",
                 (unsigned long long)r->rid, (unsigned long long)(uint32_t)c->slots[idx].rid);
            return -1;
        }
    }
    slot *s = &c->slots[idx];
    int ok = 0;
    if (r->what) {
        werr(w, &w->err_proto, "%s", r->what);
    } else if (r->status) {
        werr(w, &w->err_server, "server error %d on %s key %u: %.*s", r->status,
             s->op == LD_GET ? "GET" : "PUT", s->key, (int)(r->msglen > 120 ? 120 : r->msglen),
             r->msg ? (const char *)r->msg : "");
    } else if (s->op == LD_GET) {
        if (r->is_value) {
            if (ld_value_ok(&R->cfg, s->key, r->val, r->vlen)) {
                ok = 1;
                if (s->measured && phase == PH_MEASURE)
                    w->hits++;
            } else {
                werr(w, &w->err_verify, "GET key %u returned %zu bytes that differ from the stored value",
                     s->key, r->vlen);
            }
        } else if (r->is_nil) {
            if (s->was_set) {
                werr(w, &w->err_verify, "GET key %u returned nil after a PUT of it was acknowledged",
                     s->key);
            } else {
                ok = 1;
                if (s->measured && phase == PH_MEASURE)
                    w->misses++;
            }
        } else {
            werr(w, &w->err_verify, "GET key %u answered without a value or nil", s->key);
        }
    } else {
        if (r->is_ok) {
            ok = 1;
            key_mark_set(R, s->key);
        } else {
            werr(w, &w->err_verify, "PUT key %u answered with something other than OK", s->key);
        }
    }
    (void)ok;
    if (s->measured && phase == PH_MEASURE) {
        w->measured++;
        if (s->op == LD_GET)
            w->gets++;
        else
            w->puts++;
        uint64_t lat = now > s->t0 ? now - s->t0 : 0;
        ld_hist_add(&w->hist, lat);
        c->lat_sum += lat;
        c->lat_n++;
    } else if (phase == PH_PREFILL) {
        w->prefill_puts++;
    }
    s->busy = 0;
    c->free_idx[c->nfree++] = idx;
    c->inflight--;
    w->inflight--;
    return 0;
}

static void conn_parse(worker *w, conn *c, uint64_t now, int phase)
{
    size_t pos = 0;
    uint64_t done = 0;
    while (pos < c->in_len) {
        ld_resp r;
        long k = ld_parse(&w->R->cfg, c->in + pos, c->in_len - pos, &r);
        if (k == 0)
            break;
        if (k < 0) {
            werr(w, &w->err_proto, "%s", r.what ? r.what : "unparsable response");
            conn_fail(w, c, "protocol error", 0);
            return;
        }
        if (complete(w, c, &r, now, phase) < 0) {
            conn_fail(w, c, "protocol error", 0);
            return;
        }
        pos += (size_t)k;
        done++;
    }
    if (pos) {
        memmove(c->in, c->in + pos, c->in_len - pos);
        c->in_len -= pos;
    }
    atomic_fetch_add_explicit(&w->pub_done, done, memory_order_relaxed);
}

static void conn_read(worker *w, conn *c, uint64_t now, int phase)
{
    while (!c->dead) {
        if (c->in_len == c->in_cap) {
            /* Only an oversized reply (a long error text) gets here; the
             * buffer is sized for a full pipeline of normal replies. */
            uint8_t *nb = em_realloc(c->in, c->in_cap * 2);
            if (!nb) {
                conn_fail(w, c, "out of memory", 0);
                return;
            }
            c->in = nb;
            c->in_cap *= 2;
        }
        size_t room = c->in_cap - c->in_len;
        ssize_t k = recv(c->fd, c->in + c->in_len, room, 0);
        if (k > 0) {
            c->in_len += (size_t)k;
            conn_parse(w, c, now, phase);
            if ((size_t)k < room)
                return;
        } else if (k == 0) {
            conn_fail(w, c, "server closed the connection", 0);
        } else if (errno == EINTR) {
            continue;
        } else if (errno == EAGAIN || errno == EWOULDBLOCK) {
            return;
        } else {
            conn_fail(w, c, "recv", errno);
        }
    }
}

/* ---------------------------------------------------------------- worker loop */

static void *worker_main(void *arg)
{
    worker *w = arg;
    run *R = w->R;
    struct epoll_event evs[64];
    int ph;
    while ((ph = atomic_load(&R->phase)) != PH_QUIT) {
        if (ph != w->last_phase) {
            uint64_t now = em_now_ns();
            w->last_phase = ph;
            for (int i = 0; i < w->nconns; i++) {
                conn_fill(w, &w->conns[i], ph, now);
                conn_flush(w, &w->conns[i]);
            }
        }
        int n = epoll_wait(w->ep, evs, 64, 2);
        uint64_t now = em_now_ns();
        ph = atomic_load(&R->phase);
        for (int i = 0; i < n; i++) {
            conn *c = evs[i].data.ptr;
            if (evs[i].events & (EPOLLIN | EPOLLERR | EPOLLHUP))
                conn_read(w, c, now, ph);
            if (c->dead)
                continue;
            if (ph == w->last_phase)
                conn_fill(w, c, ph, now);
            conn_flush(w, c);
        }
        if (ph == PH_PREFILL && (w->inflight == 0 || w->live == 0) &&
            (w->pf_next >= w->pf_end || w->live == 0))
            atomic_store(&w->pf_done, 1);
        if (ph == PH_MEASURE && R->o.ops && (w->inflight == 0 || w->live == 0) &&
            (w->issued >= w->quota || w->live == 0))
            atomic_store(&w->m_done, 1);
        if (ph == PH_STOP && w->inflight == 0)
            atomic_store(&w->drained, 1);
    }
    return NULL;
}

/* ---------------------------------------------------------------- setup */

int ld_write_all(int fd, const uint8_t *p, size_t n)
{
    while (n) {
        ssize_t k = send(fd, p, n, MSG_NOSIGNAL);
        if (k < 0 && errno == EINTR)
            continue;
        if (k <= 0)
            return -1;
        p += k;
        n -= (size_t)k;
    }
    return 0;
}

/* ignite_setup: blocking handshake (and, on the first connection, the
 * GET_OR_CREATE_WITH_NAME of the cache) before the socket goes non-blocking. */
static int ignite_setup(run *R, int fd, int create, char *err, size_t errlen)
{
    uint8_t buf[4096];
    size_t n = ld_enc_handshake(&R->cfg, buf), have = 0;
    if (ld_write_all(fd, buf, n) < 0) {
        snprintf(err, errlen, "sending the handshake: %s", strerror(errno));
        return -1;
    }
    for (;;) {
        long k = ld_parse_handshake(&R->cfg, buf, have, err, errlen);
        if (k < 0)
            return -1;
        if (k > 0)
            break;
        ssize_t r = recv(fd, buf + have, sizeof buf - have, 0);
        if (r <= 0 || have + (size_t)r >= sizeof buf) {
            snprintf(err, errlen, "reading the handshake reply: %s",
                     r < 0 ? strerror(errno) : "connection closed");
            return -1;
        }
        have += (size_t)r;
    }
    if (!create)
        return 0;
    n = ld_enc_get_or_create(&R->cfg, buf, 1);
    if (ld_write_all(fd, buf, n) < 0) {
        snprintf(err, errlen, "sending GET_OR_CREATE_WITH_NAME: %s", strerror(errno));
        return -1;
    }
    have = 0;
    for (;;) {
        ld_resp r;
        long k = ld_parse(&R->cfg, buf, have, &r);
        if (k < 0) {
            snprintf(err, errlen, "GET_OR_CREATE_WITH_NAME reply: %s", r.what);
            return -1;
        }
        if (k > 0) {
            if (r.status) {
                snprintf(err, errlen, "GET_OR_CREATE_WITH_NAME(%s) failed, status %d: %.*s",
                         R->cfg.cache_name, r.status, (int)r.msglen,
                         r.msg ? (const char *)r.msg : "");
                return -1;
            }
            if (r.rid != 1 || !r.is_ok) {
                snprintf(err, errlen, "GET_OR_CREATE_WITH_NAME: unexpected reply");
                return -1;
            }
            return 0;
        }
        ssize_t got = recv(fd, buf + have, sizeof buf - have, 0);
        if (got <= 0 || have + (size_t)got >= sizeof buf) {
            snprintf(err, errlen, "reading the GET_OR_CREATE_WITH_NAME reply: %s",
                     got < 0 ? strerror(errno) : "connection closed");
            return -1;
        }
        have += (size_t)got;
    }
}

/* ---- --mem-stats: emberd's counting allocator around the measured run ----
 *
 * One extra blocking connection per listed node (ip:port, numeric), opened
 * before the run, reads the private op 32000 (emberd --debug-ops) right
 * before the measured interval and after it drained: the allocations made
 * meanwhile, summed over the nodes, per measured op.  The connections exist
 * before and after, so their own setup is not counted. */
#define MEM_MAX 16

static int mem_open(run *R, const char *ep, size_t len, char *err, size_t errlen)
{
    char host[128], port[16];
    const char *colon = memrchr(ep, ':', len);
    if (!colon || (size_t)(colon - ep) >= sizeof host || len - (size_t)(colon - ep) > sizeof port) {
        snprintf(err, errlen, "--mem-stats wants ip:port[,ip:port...]");
        return -1;
    }
    memcpy(host, ep, (size_t)(colon - ep));
    host[colon - ep] = 0;
    memcpy(port, colon + 1, len - (size_t)(colon - ep) - 1);
    port[len - (size_t)(colon - ep) - 1] = 0;
    struct addrinfo hints = { .ai_socktype = SOCK_STREAM, .ai_flags = AI_NUMERICHOST | AI_NUMERICSERV };
    struct addrinfo *ai = NULL;
    if (getaddrinfo(host, port, &hints, &ai) != 0 || !ai) {
        snprintf(err, errlen, "--mem-stats: bad address %s:%s", host, port);
        return -1;
    }
    int fd = socket(ai->ai_family, SOCK_STREAM, 0);
    if (fd < 0 || connect(fd, ai->ai_addr, ai->ai_addrlen) < 0 ||
        ignite_setup(R, fd, 0, err, errlen) < 0) {
        if (fd >= 0)
            close(fd);
        freeaddrinfo(ai);
        if (!err[0])
            snprintf(err, errlen, "--mem-stats: cannot connect to %s:%s", host, port);
        return -1;
    }
    freeaddrinfo(ai);
    return fd;
}

/* mem_read: allocations and bytes (the reply's first two longs). */
static int mem_read(int fd, int64_t *allocs, int64_t *bytes)
{
    uint8_t req[14] = {10, 0, 0, 0, 0x00, 0x7d, 7, 0, 0, 0, 0, 0, 0, 0};  /* op 32000, rid 7 */
    if (ld_write_all(fd, req, sizeof req) < 0)
        return -1;
    uint8_t buf[256];
    size_t have = 0, need = 4;
    while (have < need) {
        ssize_t r = recv(fd, buf + have, need - have, 0);
        if (r <= 0)
            return -1;
        have += (size_t)r;
        if (have >= 4 && need == 4) {
            uint32_t l;
            memcpy(&l, buf, 4);
            if (l < 50 || l > sizeof buf - 4)     /* 1.4.0+ headers are 2 bytes shorter */
                return -1;      /* not a stats reply (no --debug-ops?) */
            need = 4 + l;
        }
    }
    /* The 5 longs end the reply, whatever header the version has. */
    memcpy(allocs, buf + need - 40, 8);
    memcpy(bytes, buf + need - 32, 8);
    return 0;
}

static int conn_open(run *R, worker *w, conn *c, const struct addrinfo *ai, int first,
                     char *err, size_t errlen)
{
    int fd = socket(ai->ai_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0) {
        snprintf(err, errlen, "socket: %s", strerror(errno));
        return -1;
    }
    c->fd = fd;
    int one = 1;
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    struct timeval tv = {.tv_sec = 5};
    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
    setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv);
    if (connect(fd, ai->ai_addr, ai->ai_addrlen) < 0) {
        snprintf(err, errlen, "connect: %s", strerror(errno));
        return -1;
    }
    if (R->cfg.proto == LD_IGNITE && ignite_setup(R, fd, first, err, errlen) < 0)
        return -1;
    if (fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_NONBLOCK) < 0) {
        snprintf(err, errlen, "fcntl: %s", strerror(errno));
        return -1;
    }
    int nslots = R->o.pipeline > PREFILL_DEPTH ? R->o.pipeline : PREFILL_DEPTH;
    c->nslots = nslots;
    c->slots = em_calloc((size_t)nslots, sizeof *c->slots);
    c->free_idx = em_malloc((size_t)nslots * sizeof *c->free_idx);
    c->fifo = em_malloc((size_t)nslots * sizeof *c->fifo);
    c->out_cap = (size_t)nslots * R->max_req;
    c->in_cap = (size_t)nslots * R->max_resp + 65536;
    c->out = em_malloc(c->out_cap);
    c->in = em_malloc(c->in_cap);
    if (!c->slots || !c->free_idx || !c->fifo || !c->out || !c->in) {
        snprintf(err, errlen, "out of memory");
        return -1;
    }
    for (int i = 0; i < nslots; i++)
        c->free_idx[i] = (uint16_t)(nslots - 1 - i);
    c->nfree = nslots;
    /* The Ignite setup used request id 1; start real requests above it. */
    c->seq = 1;
    struct epoll_event ev = {.events = EPOLLIN, .data.ptr = c};
    if (epoll_ctl(w->ep, EPOLL_CTL_ADD, fd, &ev) < 0) {
        snprintf(err, errlen, "epoll_ctl: %s", strerror(errno));
        return -1;
    }
    w->live++;
    return 0;
}

static void conn_free(conn *c)
{
    if (c->fd >= 0)
        close(c->fd);
    em_free(c->slots);
    em_free(c->free_idx);
    em_free(c->fifo);
    em_free(c->in);
    em_free(c->out);
}

/* ---------------------------------------------------------------- accounting */

/* proc_cpu_us: utime+stime of process pid in microseconds, -1 if unreadable.
 * /proc/PID/stat: fields 14 and 15 (clock ticks), counted after the ")" that
 * closes the command name (which may itself contain spaces). */
double ld_proc_cpu_us(long pid)
{
    char path[64], buf[1024];
    snprintf(path, sizeof path, "/proc/%ld/stat", pid);
    FILE *f = fopen(path, "r");
    if (!f)
        return -1;
    size_t n = fread(buf, 1, sizeof buf - 1, f);
    fclose(f);
    buf[n] = 0;
    char *p = strrchr(buf, ')');
    if (!p)
        return -1;
    unsigned long long ut = 0, st = 0;
    char state = 0;
    /* after ") ": state(3) ppid pgrp session tty tpgid flags minflt cminflt
     * majflt cmajflt utime(14) stime(15) */
    if (sscanf(p + 2, "%c %*d %*d %*d %*d %*d %*u %*u %*u %*u %*u %llu %llu", &state, &ut, &st) != 3)
        return -1;
    /* A server that exited (e.g. its port was taken, so we measured someone
     * else's) must not be reported as using no CPU. */
    if (state == 'Z' || state == 'X')
        return -1;
    return (double)(ut + st) * 1e6 / (double)sysconf(_SC_CLK_TCK);
}

static double self_cpu_us(void)
{
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    return (double)(ru.ru_utime.tv_sec + ru.ru_stime.tv_sec) * 1e6 +
           (double)(ru.ru_utime.tv_usec + ru.ru_stime.tv_usec);
}

/* ---------------------------------------------------------------- options */

static int self_test(void);

static void usage(void)
{
    fprintf(stderr,
        "usage: ember-bench load [options]\n"
        "  --proto ignite|resp|memcache   protocol (default ignite)\n"
        "  --host H --port P              server (default 127.0.0.1, port 10800/6379/11211)\n"
        "  --hosts H:P[,H:P...]           several servers (a cluster): connection i goes to\n"
        "                                 the (i mod n)-th\n"
        "  --partition-aware              with --hosts: every key to its partition's primary,\n"
        "                                 as Ignite's thin clients do (CACHE_PARTITIONS;\n"
        "                                 needs --ignite-version 1.4.0 or later)\n"
        "  --connections N                connections (default 50)\n"
        "  --threads N                    client threads (default 1)\n"
        "  --pipeline N                   requests in flight per connection (default 1)\n"
        "  --value-size B                 value bytes (default 64)\n"
        "  --keys N                       key space (default 100000)\n"
        "  --key-list FILE                only these keys, one per line (instead of 0..N-1)\n"
        "  --mix R                        percent of GETs, rest PUT/SET (default 90)\n"
        "  --duration S | --ops N         measured interval (default 5 s)\n"
        "  --warmup S                     unmeasured load before it (default 1)\n"
        "  --no-prefill                   skip writing every key first\n"
        "  --key-type int|string          Ignite key type (default string; RESP and\n"
        "                                 memcached always use the string form)\n"
        "  --ignite-version X.Y.Z         handshake version (default 1.2.0)\n"
        "  --cache NAME                   Ignite cache (default bench)\n"
        "  --pid PID                      server process: report its CPU per op\n"
        "  --resp-wait N                  RESP: follow each SET with WAIT N 0 (replicas)\n"
        "  --mem-stats EP[,EP...]         emberd --debug-ops nodes: allocations per op over\n"
        "                                 the measured run, summed (csv: server_bytes_op...)\n"
        "  --label TEXT                   first column of --csv/--json output\n"
        "  --csv | --json                 machine-readable result\n"
        "  --self-test                    check encoders, parsers, histogram; no server\n"
        "exit status: 0 ok, 1 the run had errors (still reported), 2 setup failed\n");
}

/* read_key_list: --key-list FILE, one decimal key per line - the run uses
 * only those (say, the keys one member of a cluster owns). */
static int read_key_list(const char *path, ld_opts *o)
{
    FILE *f = fopen(path, "r");
    if (!f) {
        fprintf(stderr, "--key-list %s: cannot open\n", path);
        return -1;
    }
    uint32_t n = 0, cap = 0, *k = NULL;
    unsigned long v;
    while (fscanf(f, "%lu", &v) == 1) {
        if (v > UINT32_MAX - 64)
            break;
        if (n == cap) {
            uint32_t *nk = em_realloc(k, sizeof *k * (cap = cap ? cap * 2 : 1024));
            if (!nk)
                break;
            k = nk;
        }
        k[n++] = (uint32_t)v;
        if (v > o->key_max)
            o->key_max = (uint32_t)v;
    }
    int bad = !feof(f) || n == 0;
    fclose(f);
    if (bad) {
        fprintf(stderr, "--key-list %s: want one or more keys, one per line\n", path);
        em_free(k);
        return -1;
    }
    em_free(o->keymap);
    o->keymap = k;
    o->keys = n;
    return 0;
}

static int parse_opts(int argc, char **argv, ld_opts *o, ld_cfg *cfg)
{
    *o = (ld_opts){.proto = LD_IGNITE, .host = "127.0.0.1", .port = 0, .conns = 50,
                   .threads = 1, .pipeline = 1, .value_size = 64, .keys = 100000, .mix = 90,
                   .duration = 5, .warmup = 1, .prefill = 1, .label = ""};
    cfg->ver_major = 1;
    cfg->ver_minor = 2;
    cfg->ver_patch = 0;
    cfg->cache_name = "bench";
    for (int i = 1; i < argc; i++) {   /* argv[0] is "load" */
        char *a = argv[i], *v = NULL;
        char name[64];
        snprintf(name, sizeof name, "%s", a);
        char *eq = strchr(name, '=');
        if (eq) {
            *eq = 0;
            v = a + (eq - name) + 1;
        }
#define FLAG(s) (strcmp(name, s) == 0)
#define VAL() (v ? v : (i + 1 < argc ? argv[++i] : (fprintf(stderr, "%s needs a value\n", name), (char *)NULL)))
        if (FLAG("--csv")) { o->csv = 1; continue; }
        if (FLAG("--json")) { o->json = 1; continue; }
        if (FLAG("--no-prefill")) { o->prefill = 0; continue; }
        if (FLAG("--prefill")) { o->prefill = 1; continue; }
        if (FLAG("--partition-aware")) { o->partition_aware = 1; continue; }
        if (FLAG("-h") || FLAG("--help")) { usage(); return 1; }
        if (FLAG("--self-test")) return self_test() ? 3 : 4;
        char *val = VAL();
        if (!val)
            return -1;
        char *end = NULL;
        double num = strtod(val, &end);
        int numeric = end && end != val && *end == 0;
        if (FLAG("--proto")) {
            if (strcmp(val, "ignite") == 0) o->proto = LD_IGNITE;
            else if (strcmp(val, "resp") == 0 || strcmp(val, "redis") == 0) o->proto = LD_RESP;
            else if (strcmp(val, "memcache") == 0 || strcmp(val, "memcached") == 0) o->proto = LD_MEMCACHE;
            else { fprintf(stderr, "unknown protocol %s\n", val); return -1; }
        } else if (FLAG("--host")) o->host = val;
        else if (FLAG("--hosts")) o->hosts = val;
        else if (FLAG("--label")) o->label = val;
        else if (FLAG("--mem-stats")) o->mem_eps = val;
        else if (FLAG("--key-list")) {
            if (read_key_list(val, o))
                return -1;
        }
        else if (FLAG("--cache")) cfg->cache_name = val;
        else if (FLAG("--key-type")) {
            if (strcmp(val, "int") == 0) o->int_keys = 1;
            else if (strcmp(val, "string") == 0) o->int_keys = 0;
            else { fprintf(stderr, "--key-type is int or string\n"); return -1; }
        } else if (FLAG("--ignite-version")) {
            if (sscanf(val, "%d.%d.%d", &cfg->ver_major, &cfg->ver_minor, &cfg->ver_patch) != 3) {
                fprintf(stderr, "--ignite-version wants X.Y.Z\n");
                return -1;
            }
        } else if (!numeric || num < 0) {
            fprintf(stderr, "%s: bad value or unknown option (%s)\n", name, val);
            return -1;
        } else if (FLAG("--port")) o->port = (int)num;
        else if (FLAG("--connections") || FLAG("-c")) o->conns = (int)num;
        else if (FLAG("--threads") || FLAG("-t")) o->threads = (int)num;
        else if (FLAG("--pipeline") || FLAG("-P")) o->pipeline = (int)num;
        else if (FLAG("--value-size")) o->value_size = (uint32_t)num;
        else if (FLAG("--keys")) o->keys = (uint32_t)num;
        else if (FLAG("--mix")) o->mix = (int)num;
        else if (FLAG("--duration")) { o->duration = num; o->ops = 0; }
        else if (FLAG("--ops")) o->ops = (uint64_t)num;
        else if (FLAG("--warmup")) o->warmup = num;
        else if (FLAG("--pid")) o->pid = (long)num;
        else if (FLAG("--resp-wait")) cfg->resp_wait = (int)num;
        else { fprintf(stderr, "unknown option %s\n", name); return -1; }
#undef FLAG
#undef VAL
    }
    if (!o->port)
        o->port = o->proto == LD_IGNITE ? 10800 : o->proto == LD_RESP ? 6379 : 11211;
    if (o->conns < 1 || o->threads < 1 || o->pipeline < 1 || o->pipeline > 4096 ||
        o->keys < 1 || o->mix > 100 || o->value_size > (16u << 20) || o->port > 65535 ||
        (o->ops == 0 && o->duration <= 0)) {
        fprintf(stderr, "option out of range\n");
        return -1;
    }
    if (o->threads > o->conns)
        o->threads = o->conns;
    cfg->proto = o->proto;
    cfg->int_keys = o->int_keys;
    cfg->value_size = o->value_size;
    cfg->cache_id = em_hash_java_str((const uint8_t *)cfg->cache_name, strlen(cfg->cache_name));
    return 0;
}


/* ---------------------------------------------------------------- self-test */

/* self_test checks the encoders against the wire captures of
 * ignite-thin-protocol.md §8, the parsers on hand-made replies and the
 * histogram's quantiles; `ember-bench load --self-test` (run by
 * tests/scripts/load_smoke.sh).  Returns the number of failed checks. */
static int self_test(void)
{
    int bad = 0;
#define ST(cond) do { if (!(cond)) { fprintf(stderr, "self-test: %s:%d: %s\n", __FILE__, __LINE__, #cond); bad++; } } while (0)
    uint8_t filler[64] = {0}, buf[512];
    ld_cfg cfg = {.proto = LD_IGNITE, .int_keys = 1, .ver_major = 1, .ver_minor = 2,
                  .cache_name = "myCache", .value_size = 16, .filler = filler};
    cfg.cache_id = em_hash_java_str((const uint8_t *)"myCache", 7);
    ST(cfg.cache_id == 0x585F5D36);
    static const uint8_t hs[] = {0x08, 0, 0, 0, 1, 1, 0, 2, 0, 0, 0, 2};
    ST(ld_enc_handshake(&cfg, buf) == sizeof hs && memcmp(buf, hs, sizeof hs) == 0);
    static const uint8_t goc[] = {0x16, 0, 0, 0, 0x1c, 0x04, 1, 0, 0, 0, 0, 0, 0, 0,
                                  9, 7, 0, 0, 0, 'm', 'y', 'C', 'a', 'c', 'h', 'e'};
    ST(ld_enc_get_or_create(&cfg, buf, 1) == sizeof goc && memcmp(buf, goc, sizeof goc) == 0);
    /* §8's PUT of int key 2 (request id 4), up to the value, which is a
     * byte array here: length 0x1a - 6 ("x" string) + 5 + 16 = 0x29 */
    static const uint8_t put[] = {0x29, 0, 0, 0, 0xe9, 0x03, 4, 0, 0, 0, 0, 0, 0, 0,
                                  0x36, 0x5d, 0x5f, 0x58, 0, 3, 2, 0, 0, 0, 12, 16, 0, 0, 0};
    ST(ld_enc_put(&cfg, buf, 4, 2) == sizeof put + 16 && memcmp(buf, put, sizeof put) == 0);
    ST(ld_value_ok(&cfg, 2, buf + sizeof put, 16));
    ST(!ld_value_ok(&cfg, 3, buf + sizeof put, 16));
    /* GET reply for 1.2.0: len, rid, status 0, 0c len bytes */
    uint8_t rep[64];
    size_t n = 0;
    memcpy(rep, "\x21\0\0\0\x07\0\0\0\0\0\0\0\0\0\0\0\x0c\x10\0\0\0", 21);
    memcpy(rep + 21, buf + sizeof put, 16);
    n = 37;
    ld_resp r;
    ST(ld_parse(&cfg, rep, n - 1, &r) == 0);
    ST(ld_parse(&cfg, rep, n, &r) == (long)n && r.rid == 7 && r.is_value && r.vlen == 16 &&
       ld_value_ok(&cfg, 2, r.val, r.vlen));
    /* 1.4.0+ header with ERROR flag and a message */
    cfg.ver_minor = 7;
    static const uint8_t err[] = {0x15, 0, 0, 0, 9, 0, 0, 0, 0, 0, 0, 0, 1, 0,
                                  0xe8, 3, 0, 0, 9, 2, 0, 0, 0, 'n', 'o'};
    ST(ld_parse(&cfg, err, sizeof err, &r) == (long)sizeof err && r.rid == 9 &&
       r.status == 1000 && r.msglen == 2);
    static const uint8_t nil[] = {0x0b, 0, 0, 0, 5, 0, 0, 0, 0, 0, 0, 0, 0, 0, 101};
    ST(ld_parse(&cfg, nil, sizeof nil, &r) == (long)sizeof nil && r.is_nil);
    /* RESP */
    cfg.proto = LD_RESP;
    n = ld_enc_get(&cfg, buf, 0, 42);
    ST(n == 34 && memcmp(buf, "*2\r\n$3\r\nGET\r\n$14\r\nkey:0000000042\r\n", 34) == 0);
    ST(ld_parse(&cfg, (const uint8_t *)"+OK\r\n", 5, &r) == 5 && r.is_ok);
    ST(ld_parse(&cfg, (const uint8_t *)"$-1\r\n", 5, &r) == 5 && r.is_nil);
    ST(ld_parse(&cfg, (const uint8_t *)"$3\r\nabc\r", 8, &r) == 0);
    ST(ld_parse(&cfg, (const uint8_t *)"$3\r\nabc\r\n", 9, &r) == 9 && r.is_value && r.vlen == 3);
    ST(ld_parse(&cfg, (const uint8_t *)"-ERR x\r\n", 8, &r) == 8 && r.status && r.msglen == 5);
    ST(ld_parse(&cfg, (const uint8_t *)"?\r\n", 3, &r) < 0);
    cfg.resp_wait = 2;
    n = ld_enc_put(&cfg, buf, 0, 42);
    ST(n > 30 && memcmp(buf + n - 30, "\r\n*3\r\n$4\r\nWAIT\r\n$1\r\n2\r\n$1\r\n0\r\n", 30) == 0);
    ST(ld_parse(&cfg, (const uint8_t *)"+OK\r\n:2\r\n", 9, &r) == 9 && r.is_ok);
    ST(ld_parse(&cfg, (const uint8_t *)"+OK\r\n:1\r\n", 9, &r) == 9 && !r.is_ok && r.status);
    ST(ld_parse(&cfg, (const uint8_t *)"+OK\r\n:2", 7, &r) == 0);
    cfg.resp_wait = 0;
    /* memcached: GET request header and a miss reply */
    cfg.proto = LD_MEMCACHE;
    n = ld_enc_get(&cfg, buf, 0x01020304, 1);
    ST(n == 24 + LD_KEY_LEN && buf[0] == 0x80 && buf[1] == 0 && buf[3] == LD_KEY_LEN &&
       buf[11] == LD_KEY_LEN && buf[12] == 1 && buf[15] == 4);
    uint8_t miss[33] = {0x81, 0, 0, 0, 0, 0, 0, 1, 0, 0, 0, 9, 0, 0, 0, 5};
    memcpy(miss + 24, "Not found", 9);
    ST(ld_parse(&cfg, miss, 33, &r) == 33 && r.is_nil && r.rid == 5);
    /* histogram: uniform 1..100000 ns -> quantiles within the 1/32 bucket width */
    ld_hist *h = em_calloc(1, sizeof *h);
    if (!h)
        return bad + 1;
    for (uint64_t v = 1; v <= 100000; v++)
        ld_hist_add(h, v);
    uint64_t q50 = ld_hist_quantile(h, 0.5), q99 = ld_hist_quantile(h, 0.99);
    ST(q50 >= 50000 && q50 <= 50000 + 50000 / 32 + 1);
    ST(q99 >= 99000 && q99 <= 100000);
    ST(ld_hist_quantile(h, 1.0) == 100000 && h->n == 100000);
    /* small values have exact buckets; a huge one lands near itself */
    memset(h, 0, sizeof *h);
    ST(ld_hist_quantile(h, 0.5) == 0);
    for (uint64_t v = 0; v < 32; v++)
        ld_hist_add(h, v);
    ST(ld_hist_quantile(h, 0.5) == 15 && ld_hist_quantile(h, 1.0) == 31);
    ld_hist_add(h, 1ull << 40);
    ST(h->max == 1ull << 40 && ld_hist_quantile(h, 1.0) == 1ull << 40);
    em_free(h);
#undef ST
    printf("self-test: %s\n", bad ? "FAILED" : "ok");
    return bad;
}

/* ---------------------------------------------------------------- main */

static void progress(run *R, int tty, int ph, double elapsed, uint64_t *last_done,
                     uint64_t *last_t)
{
    if (!tty)
        return;
    uint64_t done = 0, errs = 0, now = em_now_ns();
    for (int i = 0; i < R->o.threads; i++) {
        done += atomic_load_explicit(&R->w[i].pub_done, memory_order_relaxed);
        errs += atomic_load_explicit(&R->w[i].pub_errors, memory_order_relaxed);
    }
    double rate = now > *last_t ? (double)(done - *last_done) * 1e9 / (double)(now - *last_t) : 0;
    *last_done = done;
    *last_t = now;
    printf("\r%-8s %6.1f s %12.0f ops/s  errors %llu\033[K", phase_name[ph], elapsed, rate,
           (unsigned long long)errs);
    fflush(stdout);
}

static void set_phase(run *R, int ph) { atomic_store(&R->phase, ph); }

/* wait_all waits until every worker raised the flag at offset `off`, or until
 * the deadline; returns 1 when all did. */
static int wait_all(run *R, size_t off, double seconds, int tty, int ph, uint64_t start,
                    uint64_t *ld, uint64_t *lt)
{
    uint64_t deadline = em_now_ns() + (uint64_t)(seconds * 1e9);
    for (int tick = 0;; tick++) {
        int all = 1;
        for (int i = 0; i < R->o.threads; i++)
            all &= atomic_load((_Atomic int *)((char *)&R->w[i] + off));
        if (all)
            return 1;
        if (em_now_ns() > deadline)
            return 0;
        usleep(5000);
        if (tick % 50 == 49)
            progress(R, tty, ph, (double)(em_now_ns() - start) / 1e9, ld, lt);
    }
}

static int cmd_load(int argc, char **argv)
{
    run *R = em_calloc(1, sizeof *R);
    if (!R)
        return 2;
    int rc = 2, tty = isatty(STDOUT_FILENO);
    struct addrinfo *ais[LD_MAX_HOSTS] = { 0 };
    int nhosts = 0;
    uint32_t *pa_keys[LD_MAX_HOSTS] = { 0 }, pa_n[LD_MAX_HOSTS] = { 0 };
    int nst = parse_opts(argc, argv, &R->o, &R->cfg);
    if (nst) {
        if (nst < 0)
            usage();
        em_free(R);
        return nst == 3 ? 1 : nst > 0 ? 0 : 2;   /* 3/4: self-test failed/passed */
    }
    ld_opts *o = &R->o;
    R->cfg.filler = em_malloc(o->value_size + 8);
    uint64_t nbits = o->keymap ? (uint64_t)o->key_max + 1 : o->keys;
    R->keyset = em_calloc((size_t)((nbits + 63) / 64), sizeof *R->keyset);
    R->w = em_calloc((size_t)o->threads, sizeof *R->w);
    if (!R->cfg.filler || !R->keyset || !R->w)
        goto out;
    /* A fixed seed: separate runs (e.g. --no-prefill after an earlier run
     * filled the keys) agree on what every key's value must be. */
    ld_filler(R->cfg.filler, o->value_size);
    R->max_req = ld_max_request(&R->cfg);
    R->max_resp = ld_max_response(&R->cfg);

    char port[16], err[256] = "";
    int mem_fd[MEM_MAX], nmem = 0;
    snprintf(port, sizeof port, "%d", o->port);
    struct addrinfo hints = {.ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM};
    if (o->partition_aware && !o->hosts) {
        fprintf(stderr, "ember-bench load: --partition-aware needs --hosts\n");
        goto out;
    }
    for (const char *e = o->hosts ? o->hosts : ""; *e;) {
        const char *comma = strchr(e, ',');
        size_t len = comma ? (size_t)(comma - e) : strlen(e);
        char hp[160];
        snprintf(hp, sizeof hp, "%.*s", (int)len, e);
        char *colon = strrchr(hp, ':');
        int gai = colon && nhosts < LD_MAX_HOSTS ? (*colon = 0, getaddrinfo(hp, colon + 1, &hints,
                                                                           &ais[nhosts]))
                                                 : EAI_NONAME;
        if (gai) {
            fprintf(stderr, "ember-bench load: --hosts: %.*s: %s (want at most %d HOST:PORT)\n",
                    (int)len, e, gai_strerror(gai), LD_MAX_HOSTS);
            goto out;
        }
        nhosts++;
        e = comma ? comma + 1 : e + len;
    }
    if (!nhosts) {
        int gai = getaddrinfo(o->host, port, &hints, &ais[0]);
        if (gai) {
            fprintf(stderr, "ember-bench load: %s: %s\n", o->host, gai_strerror(gai));
            goto out;
        }
        nhosts = 1;
    }
    for (int t = 0; t < o->threads; t++) {
        worker *w = &R->w[t];
        w->R = R;
        w->ep = epoll_create1(EPOLL_CLOEXEC);
        w->nconns = o->conns / o->threads + (t < o->conns % o->threads);
        w->conns = em_calloc((size_t)w->nconns, sizeof *w->conns);
        w->rng = (em_now_ns() ^ (0x9e3779b97f4a7c15ull * (uint64_t)(t + 1))) | 1;
        w->last_phase = PH_SETUP;
        w->pf_next = (uint32_t)((uint64_t)o->keys * (uint64_t)t / (uint64_t)o->threads);
        w->pf_end = (uint32_t)((uint64_t)o->keys * (uint64_t)(t + 1) / (uint64_t)o->threads);
        w->quota = o->ops / (uint64_t)o->threads + ((uint64_t)t < o->ops % (uint64_t)o->threads);
        if (w->ep < 0 || !w->conns)
            goto out;
        for (int i = 0; i < w->nconns; i++)
            w->conns[i].fd = -1;
    }
    for (int i = 0; i < o->conns; i++) {
        worker *w = &R->w[i % o->threads];
        if (conn_open(R, w, &w->conns[i / o->threads], ais[i % nhosts], i == 0, err,
                      sizeof err) < 0) {
            fprintf(stderr, "ember-bench load: connection %d: %s\n", i + 1, err);
            goto out;
        }
    }
    if (o->partition_aware) {
        if (ld_pa_split(&R->cfg, ais, nhosts, o->keymap, o->keys, pa_keys, pa_n, err,
                        sizeof err)) {
            fprintf(stderr, "ember-bench load: %s\n", err);
            goto out;
        }
        for (int i = 0; i < o->conns; i++) {
            conn *c = &R->w[i % o->threads].conns[i / o->threads];
            c->keys = pa_keys[i % nhosts];
            c->nkeys = pa_n[i % nhosts];
        }
    }
    for (const char *e = o->mem_eps; e && *e && nmem < MEM_MAX;) {
        const char *comma = strchr(e, ',');
        size_t len = comma ? (size_t)(comma - e) : strlen(e);
        if ((mem_fd[nmem] = mem_open(R, e, len, err, sizeof err)) < 0) {
            fprintf(stderr, "ember-bench load: %s\n", err);
            goto out;
        }
        nmem++;
        e = comma ? comma + 1 : e + len;
    }
    set_phase(R, PH_SETUP);
    int started = 0;
    for (; started < o->threads; started++)
        if (pthread_create(&R->w[started].tid, NULL, worker_main, &R->w[started]) != 0)
            break;
    if (started < o->threads) {
        fprintf(stderr, "ember-bench load: pthread_create failed\n");
        set_phase(R, PH_QUIT);
        for (int t = 0; t < started; t++)
            pthread_join(R->w[t].tid, NULL);
        goto out;
    }

    uint64_t start = em_now_ns(), ld = 0, lt = start;
    double prefill_s = 0;
    if (o->prefill) {
        set_phase(R, PH_PREFILL);
        if (!wait_all(R, offsetof(worker, pf_done), 600, tty, PH_PREFILL, start, &ld, &lt))
            fprintf(stderr, "ember-bench load: prefill did not finish\n");
        prefill_s = (double)(em_now_ns() - start) / 1e9;
    }
    set_phase(R, PH_WARMUP);
    uint64_t warm_end = em_now_ns() + (uint64_t)(o->warmup * 1e9);
    for (int tick = 0; em_now_ns() < warm_end; tick++) {
        usleep(5000);
        if (tick % 50 == 49)
            progress(R, tty, PH_WARMUP, (double)(em_now_ns() - start) / 1e9, &ld, &lt);
    }
    int64_t ma0 = 0, mb0 = 0, ma1 = 0, mb1 = 0;
    int mem_ok = nmem > 0;
    for (int i = 0; i < nmem; i++) {
        int64_t a, b;
        if (mem_read(mem_fd[i], &a, &b) < 0)
            mem_ok = 0;
        ma0 += a;
        mb0 += b;
    }
    double srv0 = o->pid ? ld_proc_cpu_us(o->pid) : -1, cli0 = self_cpu_us();
    uint64_t t0 = em_now_ns();
    set_phase(R, PH_MEASURE);
    if (o->ops) {
        wait_all(R, offsetof(worker, m_done), 3600, tty, PH_MEASURE, t0, &ld, &lt);
    } else {
        uint64_t t_end = t0 + (uint64_t)(o->duration * 1e9);
        for (int tick = 0; em_now_ns() < t_end; tick++) {
            uint64_t left = t_end - em_now_ns();
            usleep(left < 5000000 ? (useconds_t)(left / 1000 + 1) : 5000);
            if (tick % 50 == 49)
                progress(R, tty, PH_MEASURE, (double)(em_now_ns() - t0) / 1e9, &ld, &lt);
        }
    }
    set_phase(R, PH_STOP);
    uint64_t t1 = em_now_ns();
    double srv1 = o->pid ? ld_proc_cpu_us(o->pid) : -1, cli1 = self_cpu_us();
    wait_all(R, offsetof(worker, drained), 5, tty, PH_STOP, t0, &ld, &lt);
    set_phase(R, PH_QUIT);
    for (int t = 0; t < o->threads; t++)
        pthread_join(R->w[t].tid, NULL);
    if (tty)
        printf("\r\033[K");
    if (mem_ok)
        usleep(300000);         /* server threads publish their counters per pass */
    for (int i = 0; i < nmem; i++) {
        int64_t a, b;
        if (mem_ok && mem_read(mem_fd[i], &a, &b) < 0)
            mem_ok = 0;
        ma1 += a;
        mb1 += b;
        close(mem_fd[i]);
    }

    /* ---- aggregate ---- */
    ld_hist *h = em_calloc(1, sizeof *h);
    if (!h)
        goto out;
    uint64_t gets = 0, hits = 0, misses = 0, puts = 0, ops = 0, prefill_puts = 0;
    uint64_t e_srv = 0, e_ver = 0, e_proto = 0, e_conn = 0, e_lost = 0;
    const char *first = NULL;
    for (int t = 0; t < o->threads; t++) {
        worker *w = &R->w[t];
        /* requests still unanswered after the drain window */
        w->err_lost += (uint64_t)(w->inflight > 0 ? w->inflight : 0);
        if (w->inflight > 0 && !w->first_err[0])
            snprintf(w->first_err, sizeof w->first_err,
                     "%d requests unanswered 5 s after the run", w->inflight);
        gets += w->gets; hits += w->hits; misses += w->misses; puts += w->puts;
        ops += w->measured; prefill_puts += w->prefill_puts;
        e_srv += w->err_server; e_ver += w->err_verify; e_proto += w->err_proto;
        e_conn += w->err_conn; e_lost += w->err_lost;
        if (!first && w->first_err[0])
            first = w->first_err;
        ld_hist_merge(h, &w->hist);
    }
    /* Spread of the per-connection mean latency: a server that serves some
     * connections much later than others (e.g. event loops with unequal
     * shares of the connections) shows a wide spread at the same p50. */
    double cmin = -1, cmax = 0;
    for (int t = 0; t < o->threads; t++)
        for (int i = 0; i < R->w[t].nconns; i++) {
            const conn *c = &R->w[t].conns[i];
            if (!c->lat_n)
                continue;
            double m = (double)c->lat_sum / (double)c->lat_n / 1e3;
            if (cmin < 0 || m < cmin)
                cmin = m;
            if (m > cmax)
                cmax = m;
        }
    if (cmin < 0)
        cmin = 0;
    uint64_t errors = e_srv + e_ver + e_proto + e_conn + e_lost;
    double secs = (double)(t1 - t0) / 1e9;
    double ops_s = secs > 0 ? (double)ops / secs : 0;
    double p50 = (double)ld_hist_quantile(h, 0.50) / 1e3, p99 = (double)ld_hist_quantile(h, 0.99) / 1e3;
    double p999 = (double)ld_hist_quantile(h, 0.999) / 1e3, pmax = (double)h->max / 1e3;
    double mean = h->n ? (double)h->sum / (double)h->n / 1e3 : 0;
    double srv_us = srv0 >= 0 && srv1 >= 0 ? srv1 - srv0 : -1;
    double srv_op = srv_us >= 0 && ops ? srv_us / (double)ops : -1;
    double srv_pct = srv_us >= 0 && secs > 0 ? srv_us / (secs * 1e6) * 100 : -1;
    double cli_op = ops ? (cli1 - cli0) / (double)ops : -1;
    double mem_b = mem_ok && ops ? (double)(mb1 - mb0) / (double)ops : -1;
    double mem_a = mem_ok && ops ? (double)(ma1 - ma0) / (double)ops : -1;
    static const char *const pname[] = {"ignite", "resp", "memcache"};

    if (o->csv) {
        printf("label,proto,connections,threads,pipeline,value_size,keys,mix,seconds,ops,ops_s,"
               "gets,hits,misses,puts,errors,p50_us,p99_us,p999_us,max_us,mean_us,"
               "server_cpu_us_op,server_cpu_pct,client_cpu_us_op,conn_mean_min_us,conn_mean_max_us,"
               "server_bytes_op,server_allocs_op\n");
        printf("%s,%s,%d,%d,%d,%u,%u,%d,%.3f,%llu,%.0f,%llu,%llu,%llu,%llu,%llu,"
               "%.1f,%.1f,%.1f,%.1f,%.1f,%.3f,%.1f,%.3f,%.1f,%.1f,%.3f,%.4f\n",
               o->label, pname[o->proto], o->conns, o->threads, o->pipeline, o->value_size,
               o->keys, o->mix, secs, (unsigned long long)ops, ops_s, (unsigned long long)gets,
               (unsigned long long)hits, (unsigned long long)misses, (unsigned long long)puts,
               (unsigned long long)errors, p50, p99, p999, pmax, mean, srv_op, srv_pct, cli_op,
               cmin, cmax, mem_b, mem_a);
    } else if (o->json) {
        printf("{\"label\":\"%s\",\"proto\":\"%s\",\"connections\":%d,\"threads\":%d,"
               "\"pipeline\":%d,\"value_size\":%u,\"keys\":%u,\"mix\":%d,\"seconds\":%.3f,"
               "\"ops\":%llu,\"ops_s\":%.0f,\"gets\":%llu,\"hits\":%llu,\"misses\":%llu,"
               "\"puts\":%llu,\"errors\":%llu,\"errors_server\":%llu,\"errors_verify\":%llu,"
               "\"errors_protocol\":%llu,\"errors_connection\":%llu,\"errors_lost\":%llu,"
               "\"p50_us\":%.1f,\"p99_us\":%.1f,\"p999_us\":%.1f,\"max_us\":%.1f,"
               "\"mean_us\":%.1f,\"server_cpu_us_op\":%.3f,\"server_cpu_pct\":%.1f,"
               "\"client_cpu_us_op\":%.3f,\"conn_mean_min_us\":%.1f,\"conn_mean_max_us\":%.1f}\n",
               o->label, pname[o->proto], o->conns, o->threads, o->pipeline, o->value_size,
               o->keys, o->mix, secs, (unsigned long long)ops, ops_s, (unsigned long long)gets,
               (unsigned long long)hits, (unsigned long long)misses, (unsigned long long)puts,
               (unsigned long long)errors, (unsigned long long)e_srv, (unsigned long long)e_ver,
               (unsigned long long)e_proto, (unsigned long long)e_conn,
               (unsigned long long)e_lost, p50, p99, p999, pmax, mean, srv_op, srv_pct, cli_op,
               cmin, cmax);
    } else {
        char where[64];
        if (o->hosts)
            snprintf(where, sizeof where, "%d hosts%s", nhosts,
                     o->partition_aware ? " (partition-aware)" : "");
        else
            snprintf(where, sizeof where, "%.40s:%d", o->host, o->port);
        printf("ember-bench load: %s %s  %d conns, %d threads, pipeline %d, value %u B, "
               "%u keys, %d%% GET\n",
               pname[o->proto], where, o->conns, o->threads, o->pipeline,
               o->value_size, o->keys, o->mix);
        if (o->prefill)
            printf("prefill     %llu PUTs in %.2f s\n", (unsigned long long)prefill_puts, prefill_s);
        printf("measured    %.2f s: %llu ops (%llu GET: %llu hit, %llu nil; %llu PUT)\n", secs,
               (unsigned long long)ops, (unsigned long long)gets, (unsigned long long)hits,
               (unsigned long long)misses, (unsigned long long)puts);
        printf("throughput  %.0f ops/s\n", ops_s);
        printf("latency     p50 %.1f us  p99 %.1f us  p999 %.1f us  max %.1f us  mean %.1f us\n",
               p50, p99, p999, pmax, mean);
        printf("per conn    mean latency from %.1f us (fastest connection) to %.1f us (slowest)\n",
               cmin, cmax);
        if (o->pid)
            printf("server cpu  %.3f us/op  (pid %ld, %.0f%% of one core)\n", srv_op, o->pid, srv_pct);
        printf("client cpu  %.3f us/op\n", cli_op);
        if (mem_ok)
            printf("server mem  %.3f B/op  %.4f allocs/op  (%d node%s, counting allocator)\n",
                   mem_b, mem_a, nmem, nmem == 1 ? "" : "s");
        printf("errors      %llu (server %llu, verify %llu, protocol %llu, connection %llu, "
               "unanswered %llu)\n",
               (unsigned long long)errors, (unsigned long long)e_srv, (unsigned long long)e_ver,
               (unsigned long long)e_proto, (unsigned long long)e_conn, (unsigned long long)e_lost);
    }
    if (first)
        fprintf(stderr, "ember-bench load: first error: %s\n", first);
    if (o->pid && srv_us < 0)
        fprintf(stderr, "ember-bench load: could not read /proc/%ld/stat, or the process "
                "has exited: no server CPU figure\n", o->pid);
    em_free(h);
    rc = errors ? 1 : 0;
out:
    for (int i = 0; i < LD_MAX_HOSTS; i++) {
        if (ais[i])
            freeaddrinfo(ais[i]);
        em_free(pa_keys[i]);
    }
    if (R->w) {
        for (int t = 0; t < o->threads; t++) {
            worker *w = &R->w[t];
            for (int i = 0; w->conns && i < w->nconns; i++)
                conn_free(&w->conns[i]);
            em_free(w->conns);
            if (w->ep > 0)
                close(w->ep);
        }
    }
    em_free(R->w);
    em_free(R->keyset);
    em_free(R->o.keymap);
    em_free(R->cfg.filler);
    em_free(R);
    return rc;
}

BENCH_COMMAND(load, "load", "load [--proto ignite|resp|memcache] [--help for options]",
              cmd_load)
