/* cl_net.c - the cluster port: links between nodes over one net/ loop.
 *
 * A link is one TCP connection, either side may have opened it.  It is
 * usable after the handshake of cl_net.h (HELLO both ways, then AUTH both
 * ways); until then any other frame closes it.  Between two nodes at most
 * one link is up: when a second completes its handshake, both ends keep the
 * one opened by the node with the smaller id (the same rule on both sides,
 * so they agree without another message) and close the other.  Liveness: a
 * link that has sent nothing for heartbeat_ms sends PING; one that has
 * received nothing for link_timeout_ms is closed.  Deciding that a NODE has
 * failed is the metadata group's business, not the transport's.
 */
#include "cluster/cl_net.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>
#include <sys/random.h>

#include "net/net.h"
#include "util/clock.h"
#include "util/err.h"
#include "util/log.h"
#include "util/mem.h"

enum link_phase { PH_HELLO, PH_AUTH, PH_UP };

/* A frame held back by the fault hook. */
typedef struct delayed {
    struct delayed *next;
    uint64_t due_ms;
    uint16_t type;
    size_t   len;
    uint8_t  payload[];
} delayed;

struct cl_net_link {
    cl_net   *net;
    net_conn *conn;
    uint8_t   phase;
    uint8_t   outgoing;
    uint8_t   sent_hello;
    uint8_t   in_data;           /* inside cb_data: the loop sends after it */
    uint8_t   kick_later;        /* written by a direct cl_net_send: cb_pass_end sends */
    uint8_t   close_req;         /* cl_net_link_close from on_frame: close after it */
    uint8_t   shared;            /* other threads write to it (net_conn_share) */
    uint8_t   nonce[CL_NET_NONCE];
    uint8_t   dial_nonce[CL_NET_NONCE]; /* the connecting side's nonce: both ends know it */
    uint64_t  peer_msb, peer_lsb;
    uint64_t  peer_major;
    uint32_t  peer_minor;
    char      peer_cid[CL_NET_MAX_NAME + 1];
    uint64_t  rx_ms, tx_ms;
    char      why[192];          /* reason given to on_down when we close it */
    delayed  *held;
    cl_net_link *next;           /* the net's list of up links */
};

struct cl_net {
    cl_net_opts  o;
    char         cluster[CL_NET_MAX_NAME + 1];
    char         consistent[CL_NET_MAX_NAME + 1];
    uint8_t     *secret;
    net_server  *srv;
    cl_net_link *up;             /* loop thread only */
    int          kicks;          /* loop thread only: links with kick_later set */
    uint64_t     slow_logged;    /* loop thread only: the last slow() line */
    _Atomic uint64_t st[8];
    /* Spare send blocks (cl_net_send): a steady stream of frames reuses
     * them, so sending allocates nothing once the pool holds enough. */
    pthread_mutex_t pool_mu;
    struct post_send *pool;
    uint32_t     npool;
    /* The links other threads write REPL_UPDATE frames to themselves
     * (send_direct): each peer's up link, rebuilt by the loop whenever one
     * comes up or closes, so a link in it is alive while dmu is held. */
    pthread_rwlock_t dmu;
    struct direct { uint64_t msb, lsb; cl_net_link *l; } *direct;
    uint32_t     ndirect, direct_cap;
    /* Frames posted to the loop and not yet written: while any is, another
     * thread's frames take the same way, so one thread's frames keep their
     * order. */
    _Atomic uint32_t posted;
};

enum { S_OUT, S_IN, S_NOLINK, S_FDROP, S_FDUP, S_FDELAY, S_REFUSED, S_UP };
static void count(cl_net *n, int i) { atomic_fetch_add_explicit(&n->st[i], 1, memory_order_relaxed); }

/* ---- sending --------------------------------------------------------------- */

static int put_frame(cl_net_link *l, uint16_t type, const void *p, size_t len)
{
    em_buf *out = net_conn_out(l->conn);
    size_t at;
    int rc = cl_net_frame_begin(out, type, &at);
    if (!rc && len)
        rc = em_buf_append(out, p, len);
    if (rc)
        return rc;
    cl_net_frame_end(out, at);
    l->tx_ms = em_now_ms();
    count(l->net, S_OUT);
    return 0;
}

int cl_net_link_send(cl_net_link *l, uint16_t type, const void *payload, size_t len)
{
    cl_net *n = l->net;
    if (l->phase != PH_UP)
        return EM_CLOSED;
    if (len + 2 > (n->o.max_frame ? n->o.max_frame : CL_NET_MAX_FRAME_DEFAULT))
        return EM_TOOBIG;
    int act = CL_NET_PASS;
    uint32_t delay = 0;
    if (n->o.fault)
        act = n->o.fault(n->o.fault_arg, l->peer_msb, l->peer_lsb, type, &delay);
    if (act == CL_NET_DROP) {
        count(n, S_FDROP);
        return 0;
    }
    if (act == CL_NET_DELAY) {
        delayed *d = em_malloc(sizeof *d + len);
        if (!d)
            return EM_NOMEM;
        d->next = NULL;
        d->due_ms = em_now_ms() + delay;
        d->type = type;
        d->len = len;
        memcpy(d->payload, payload, len);
        delayed **t = &l->held;
        while (*t)
            t = &(*t)->next;
        *t = d;
        count(n, S_FDELAY);
        return 0;
    }
    int rc = put_frame(l, type, payload, len);
    if (!rc && act == CL_NET_DUP) {
        count(n, S_FDUP);
        rc = put_frame(l, type, payload, len);
    }
    /* Inside cb_data the loop sends what was appended once it returns (a
     * kick there could close the link under the caller). */
    if (rc || l->in_data || l->kick_later)
        return rc;
    return net_conn_kick(l->conn);
}

/* release_held sends the delayed frames that are due; nonzero when that
 * closed the link (it is freed then). */
static int release_held(cl_net_link *l, uint64_t now)
{
    int sent = 0;
    for (delayed **p = &l->held; *p;) {
        delayed *d = *p;
        if (d->due_ms > now) {
            p = &d->next;
            continue;
        }
        *p = d->next;
        if (put_frame(l, d->type, d->payload, d->len) == 0)
            sent = 1;
        em_free(d);
    }
    return sent ? net_conn_kick(l->conn) != 0 : 0;
}

static int id_less(uint64_t am, uint64_t al, uint64_t bm, uint64_t bl)
{
    if (am != bm)
        return (int64_t)am < (int64_t)bm;
    return (int64_t)al < (int64_t)bl;
}

int cl_net_link_canonical(const cl_net_link *l)
{
    const cl_net *n = l->net;
    return l->outgoing == id_less(n->o.node_msb, n->o.node_lsb, l->peer_msb, l->peer_lsb);
}

/* find_up: the up link to a peer, the canonical one when there are two
 * (sends move to it the moment it is up; the other is about to close). */
static cl_net_link *find_up(cl_net *n, uint64_t msb, uint64_t lsb)
{
    cl_net_link *any = NULL;
    for (cl_net_link *l = n->up; l; l = l->next)
        if (l->peer_msb == msb && l->peer_lsb == lsb) {
            if (cl_net_link_canonical(l))
                return l;
            any = l;
        }
    return any;
}

typedef struct post_send {
    cl_net  *net;
    struct post_send *next;      /* in the pool */
    size_t   cap;                /* payload bytes the block holds */
    uint64_t msb, lsb;
    uint16_t type;
    size_t   len;
    uint8_t  payload[];
} post_send;

/* The pool keeps at most POOL_MAX blocks of at most POOL_BLOCK_MAX payload
 * bytes: enough for the frames in flight of a busy replication stream,
 * bounded so a burst of huge frames does not stay resident. */
#define POOL_MAX       64u
#define SLOW_MS        250u     /* a callback this long delays heartbeats */
#define POOL_BLOCK_MAX (256u << 10)
#define POOL_MIN_CAP   512u
#define POOL_PREFILL   16u

/* block_get: the smallest pooled block that holds len bytes (best fit, so
 * small frames leave the large blocks to large ones), else a new block. */
static post_send *block_get(cl_net *n, size_t len)
{
    pthread_mutex_lock(&n->pool_mu);
    post_send **best = NULL;
    for (post_send **p = &n->pool; *p; p = &(*p)->next)
        if ((*p)->cap >= len && (!best || (*p)->cap < (*best)->cap))
            best = p;
    if (best) {
        post_send *m = *best;
        *best = m->next;
        n->npool--;
        pthread_mutex_unlock(&n->pool_mu);
        return m;
    }
    pthread_mutex_unlock(&n->pool_mu);
    size_t cap = len < POOL_MIN_CAP ? POOL_MIN_CAP : len;
    post_send *m = em_malloc(sizeof *m + cap);
    if (m)
        m->cap = cap;
    return m;
}

/* block_put keeps m for reuse; a full pool gives up its smallest block for
 * a larger one (the pool converges on the sizes in flight). */
static void block_put(cl_net *n, post_send *m)
{
    if (m->cap <= POOL_BLOCK_MAX) {
        pthread_mutex_lock(&n->pool_mu);
        if (n->npool == POOL_MAX) {
            post_send **small = &n->pool;
            for (post_send **p = &n->pool; *p; p = &(*p)->next)
                if ((*p)->cap < (*small)->cap)
                    small = p;
            if ((*small)->cap < m->cap) {
                post_send *x = *small;
                *small = x->next;
                n->npool--;
                m->next = n->pool;
                n->pool = m;
                n->npool++;
                m = x;
            }
        } else {
            m->next = n->pool;
            n->pool = m;
            n->npool++;
            m = NULL;
        }
        pthread_mutex_unlock(&n->pool_mu);
    }
    em_free(m);
}

static void pool_free(cl_net *n)
{
    while (n->pool) {
        post_send *m = n->pool;
        n->pool = m->next;
        em_free(m);
    }
    pthread_mutex_destroy(&n->pool_mu);
}

/* later_kick: l's frames go out at the end of the loop's pass (cb_pass_end)
 * instead of now, so everything the pass appends to one link - the frames
 * other threads posted, an owner's acks, answers - leaves in one send. */
static void later_kick(cl_net_link *l)
{
    if (!l->in_data && !l->kick_later) {
        l->kick_later = 1;
        l->net->kicks++;
    }
}

static void do_send(void *arg, int cancelled)
{
    post_send *m = arg;
    if (!cancelled) {
        cl_net_link *l = find_up(m->net, m->msb, m->lsb);
        if (l)
            later_kick(l);
        if (!l || cl_net_link_send(l, m->type, m->payload, m->len) != 0)
            count(m->net, S_NOLINK);
        atomic_fetch_sub_explicit(&m->net->posted, 1, memory_order_release);
    }
    block_put(m->net, m);
}

/* direct_rebuild (loop thread): the direct table from the up links, after
 * one came up or closed. */
static void direct_rebuild(cl_net *n)
{
    pthread_rwlock_wrlock(&n->dmu);
    n->ndirect = 0;
    for (cl_net_link *l = n->up; l; l = l->next) {
        if (!l->shared || find_up(n, l->peer_msb, l->peer_lsb) != l)
            continue;
        if (n->ndirect == n->direct_cap) {
            uint32_t cap = n->direct_cap ? n->direct_cap * 2 : 8;
            struct direct *d = em_realloc(n->direct, cap * sizeof *d);
            if (!d)
                break;              /* the rest post, as before */
            n->direct = d;
            n->direct_cap = cap;
        }
        n->direct[n->ndirect++] = (struct direct){ l->peer_msb, l->peer_lsb, l };
    }
    pthread_rwlock_unlock(&n->dmu);
}

/* send_direct writes a REPL_UPDATE from a thread other than the loop
 * straight to the peer's socket.  A replication stream is written by the
 * client loops, whose every hand-off to the transport cost an eventfd
 * write, a wake-up of the transport thread and its send: one syscall here
 * instead (partition-aware FULL_SYNC puts, 3 nodes: 7 % less CPU per put
 * in the first measurement).  Only this type: its receiver orders updates
 * by their counters, so one overtaking a frame the loop still holds (a
 * retransmit) costs at most a resend.  EM_AGAIN when the frame must be
 * posted instead (no link the table holds, a fault hook, a frame posted
 * before it still queued). */
static int send_direct(cl_net *n, uint64_t msb, uint64_t lsb, uint16_t type,
                       const void *payload, size_t len)
{
    if (n->o.fault || atomic_load_explicit(&n->posted, memory_order_acquire) ||
        len + 2 > (n->o.max_frame ? n->o.max_frame : CL_NET_MAX_FRAME_DEFAULT))
        return EM_AGAIN;
    uint8_t hdr[CL_NET_HDR];
    cl_net_frame_hdr(hdr, type, len);
    int rc = EM_AGAIN;
    pthread_rwlock_rdlock(&n->dmu);
    for (uint32_t i = 0; i < n->ndirect; i++) {
        if (n->direct[i].msb != msb || n->direct[i].lsb != lsb)
            continue;
        rc = net_conn_send_any(n->direct[i].l->conn, hdr, sizeof hdr, payload, len);
        break;
    }
    pthread_rwlock_unlock(&n->dmu);
    if (rc == EM_AGAIN)
        return rc;
    if (rc) {
        count(n, S_NOLINK);         /* lost with a link going down, as a posted one */
        return 0;
    }
    count(n, S_OUT);
    return 0;
}

int cl_net_send(cl_net *n, uint64_t msb, uint64_t lsb, uint16_t type,
                const void *payload, size_t len)
{
    /* On the transport's own thread, with nothing posted waiting, the frame
     * goes out now: no copy into a block, no signal to itself and no extra
     * pass (an owner's acks, answers to forwarded calls). */
    if (net_post_needless(n->srv, 0)) {
        cl_net_link *l = find_up(n, msb, lsb);
        /* Sent at the end of the pass (cb_pass_end), not here: a failed
         * write closes the link, and its close must not run inside the
         * caller (which may hold a stream's lock, or another link). */
        if (l)
            later_kick(l);
        if (!l || cl_net_link_send(l, type, payload, len) != 0)
            count(n, S_NOLINK);
        return 0;
    }
    if (type == CL_NET_MSG_REPL_UPDATE) {
        int rc = send_direct(n, msb, lsb, type, payload, len);
        if (rc != EM_AGAIN)
            return rc;
    }
    post_send *m = block_get(n, len);
    if (!m)
        return EM_NOMEM;
    m->net = n;
    m->msb = msb;
    m->lsb = lsb;
    m->type = type;
    m->len = len;
    if (len)
        memcpy(m->payload, payload, len);
    atomic_fetch_add_explicit(&n->posted, 1, memory_order_relaxed);
    int rc = net_post(n->srv, 0, do_send, m);
    if (rc) {
        atomic_fetch_sub_explicit(&n->posted, 1, memory_order_relaxed);
        block_put(n, m);
    }
    return rc;
}

int cl_net_post(cl_net *n, void (*fn)(void *arg, int cancelled), void *arg)
{
    return net_post(n->srv, 0, fn, arg);
}

/* ---- the handshake --------------------------------------------------------- */

static int send_hello(cl_net_link *l)
{
    cl_net *n = l->net;
    cl_net_hello h = {
        .version = CL_NET_VERSION,
        .flags = n->secret ? CL_NET_HELLO_SECRET : 0,
        .node_msb = n->o.node_msb, .node_lsb = n->o.node_lsb,
        .cluster = n->cluster, .cluster_len = strlen(n->cluster),
        .consistent = n->consistent, .consistent_len = strlen(n->consistent),
    };
    memcpy(h.nonce, l->nonce, CL_NET_NONCE);
    l->sent_hello = 1;
    count(n, S_OUT);
    return cl_net_hello_encode(net_conn_out(l->conn), &h);
}

static int send_auth(cl_net_link *l, const uint8_t peer_nonce[CL_NET_NONCE])
{
    cl_net *n = l->net;
    uint8_t proof[CL_NET_PROOF];
    size_t len = 0;
    if (n->secret) {
        cl_net_proof(proof, n->secret, n->o.secret_len, l->outgoing ? 'C' : 'A',
                     peer_nonce, n->o.node_msb, n->o.node_lsb);
        len = CL_NET_PROOF;
    }
    em_buf *out = net_conn_out(l->conn);
    size_t at;
    int rc = cl_net_frame_begin(out, CL_NET_MSG_AUTH, &at);
    if (!rc && len)
        rc = em_buf_append(out, proof, len);
    if (!rc)
        cl_net_frame_end(out, at);
    count(n, S_OUT);
    return rc;
}

/* refuse: close the link with a reason (on_down reports it) and tell the
 * peer why, so its operator reads the cause in its own log. */
static int refuse(cl_net_link *l, const char *why)
{
    snprintf(l->why, sizeof l->why, "%s", why);
    count(l->net, S_REFUSED);
    em_buf *out = net_conn_out(l->conn);
    size_t at;
    if (cl_net_frame_begin(out, CL_NET_MSG_REFUSED, &at) == 0 &&
        em_buf_append(out, why, strlen(why)) == 0)
        cl_net_frame_end(out, at);
    return EM_AUTH;
}

/* Node ids compare as Java UUIDs do (signed halves), the order used everywhere. */
static int on_hello(cl_net_link *l, const uint8_t *p, size_t n)
{
    cl_net *net = l->net;
    cl_net_hello h;
    char why[160];
    if (cl_net_hello_decode(p, n, &h) != 0)
        return refuse(l, "malformed HELLO");
    if (cl_net_check_peer(&h, net->cluster, strlen(net->cluster), net->secret != NULL,
                          why, sizeof why) != 0)
        return refuse(l, why);
    if (h.node_msb == net->o.node_msb && h.node_lsb == net->o.node_lsb)
        return refuse(l, "connected to itself");
    l->peer_msb = h.node_msb;
    l->peer_lsb = h.node_lsb;
    memcpy(l->dial_nonce, l->outgoing ? l->nonce : h.nonce, CL_NET_NONCE);
    l->peer_major = h.top_major;
    l->peer_minor = h.top_minor;
    memcpy(l->peer_cid, h.consistent, h.consistent_len);
    l->peer_cid[h.consistent_len] = 0;
    int rc = 0;
    if (!l->sent_hello)
        rc = send_hello(l);
    if (!rc)
        rc = send_auth(l, h.nonce);
    if (rc)
        return rc;
    l->phase = PH_AUTH;
    return 0;
}

/* keeps: whether a new link to a peer replaces the up one, by a rule both
 * ends apply alike whatever order they see the two come up in: the link
 * opened by the smaller node id, and of two opened by the same side (a
 * redial while the first was still in its handshake) the one whose
 * connecting nonce is smaller.  Ends that chose differently would each
 * close the link the other kept, and lose both. */
static int keeps(const cl_net_link *l, const cl_net_link *old)
{
    int c = cl_net_link_canonical(l), oc = cl_net_link_canonical(old);
    if (c != oc)
        return c;
    return memcmp(l->dial_nonce, old->dial_nonce, CL_NET_NONCE) < 0;
}

static int on_auth(cl_net_link *l, const uint8_t *p, size_t n)
{
    cl_net *net = l->net;
    if (cl_net_verify_auth(p, n, net->secret, net->secret ? net->o.secret_len : 0,
                           l->outgoing ? 'A' : 'C', l->nonce, l->peer_msb, l->peer_lsb) != 0)
        return refuse(l, "cluster secret proof failed");
    cl_net_link *old = find_up(net, l->peer_msb, l->peer_lsb);
    if (old) {
        if (!keeps(l, old)) {
            snprintf(l->why, sizeof l->why, "duplicate link");
            return EM_CLOSED;
        }
        snprintf(old->why, sizeof old->why, "duplicate link");
        net_conn_close(old->conn);
    }
    l->phase = PH_UP;
    net_conn_established(l->conn);
    l->next = net->up;
    net->up = l;
    l->shared = net_conn_share(l->conn) == 0;   /* not on TLS links */
    direct_rebuild(net);
    count(net, S_UP);
    if (net->o.on_up) {
        cl_net_hello h = {
            .version = CL_NET_VERSION, .node_msb = l->peer_msb, .node_lsb = l->peer_lsb,
            .top_major = l->peer_major, .top_minor = l->peer_minor,
            .cluster = net->cluster, .cluster_len = strlen(net->cluster),
            .consistent = l->peer_cid, .consistent_len = strlen(l->peer_cid),
        };
        net->o.on_up(net->o.arg, l, &h);
    }
    return 0;
}

/* ---- net/ callbacks ------------------------------------------------------- */

static void *cb_open(void *arg, net_conn *c)
{
    cl_net *n = arg;
    cl_net_link *l = em_calloc(1, sizeof *l);
    if (!l)
        return NULL;
    l->net = n;
    l->conn = c;
    l->outgoing = (uint8_t)net_conn_outgoing(c);
    l->rx_ms = l->tx_ms = em_now_ms();
    if (getrandom(l->nonce, CL_NET_NONCE, 0) != CL_NET_NONCE) {
        em_free(l);
        return NULL;
    }
    /* The connecting side speaks first; its HELLO leaves once connected. */
    if (l->outgoing && send_hello(l) != 0) {
        em_free(l);
        return NULL;
    }
    return l;
}

/* slow logs (at most every 10 s) a callback that held the transport thread
 * long enough to delay heartbeats: everything else on the cluster port,
 * leases included, waits behind it. */
static void slow(cl_net *n, int frame_type, uint64_t since)
{
    uint64_t now = em_now_ms();
    if (now - since < SLOW_MS || now - n->slow_logged < 10000)
        return;
    n->slow_logged = now;
    if (frame_type >= 0)
        EM_WARN("cluster transport: a frame of type %d held the transport thread for %llu ms",
                frame_type, (unsigned long long)(now - since));
    else
        EM_WARN("cluster transport: the tick held the transport thread for %llu ms",
                (unsigned long long)(now - since));
}

static int cb_data(void *arg, net_conn *c, void *state, const uint8_t *p, size_t n,
                   em_buf *out, size_t out_cap, size_t *consumed)
{
    cl_net *net = arg;
    cl_net_link *l = state;
    /* Before the handshake completes a peer is anonymous: HELLO and AUTH fit
     * in a few hundred bytes, so nothing bigger is buffered for it. */
    size_t max = l->phase != PH_UP ? CL_NET_MAX_HANDSHAKE_FRAME
                                   : net->o.max_frame ? net->o.max_frame : CL_NET_MAX_FRAME_DEFAULT;
    size_t off = 0;
    int rc = 0;
    (void)c;
    l->in_data = 1;
    while (off < n && out->len < out_cap) {
        cl_net_frame f;
        rc = cl_net_frame_parse(p + off, n - off, max, &f);
        if (rc == EM_AGAIN) {
            rc = 0;
            break;
        }
        if (rc) {
            refuse(l, rc == EM_BADLEN ? "frame length out of bounds" : "unknown frame type");
            break;
        }
        off += f.total;
        l->rx_ms = em_now_ms();
        count(net, S_IN);
        if (f.type == CL_NET_MSG_REFUSED && l->phase != PH_UP) {
            /* The reason goes to a log: printable ASCII only. */
            char txt[161];
            size_t tl = f.len > 160 ? 160 : f.len;
            for (size_t i = 0; i < tl; i++)
                txt[i] = f.payload[i] >= 0x20 && f.payload[i] < 0x7f ? (char)f.payload[i] : '?';
            txt[tl] = 0;
            snprintf(l->why, sizeof l->why, "the peer refused this node: %s", txt);
            count(net, S_REFUSED);
            rc = EM_AUTH;
        } else if (l->phase == PH_HELLO) {
            rc = f.type == CL_NET_MSG_HELLO ? on_hello(l, f.payload, f.len)
                                            : refuse(l, "frame before the handshake");
        } else if (l->phase == PH_AUTH) {
            rc = f.type == CL_NET_MSG_AUTH ? on_auth(l, f.payload, f.len)
                                           : refuse(l, "frame before the handshake");
        } else if (f.type == CL_NET_MSG_HELLO || f.type == CL_NET_MSG_AUTH) {
            rc = refuse(l, "handshake frame on an up link");
        } else if (f.type != CL_NET_MSG_PING && net->o.on_frame) {
            net->o.on_frame(net->o.arg, l, f.type, f.payload, f.len);
            slow(net, f.type, l->rx_ms);
            if (l->close_req)
                rc = EM_PROTO;          /* the link closes once cb_data returns */
        }
        if (rc)
            break;
    }
    l->in_data = 0;
    *consumed = off;
    return rc;
}

static void cb_close(void *arg, void *state)
{
    cl_net *n = arg;
    cl_net_link *l = state;
    int was_up = l->phase == PH_UP;
    if (was_up) {
        for (cl_net_link **p = &n->up; *p; p = &(*p)->next)
            if (*p == l) {
                *p = l->next;
                break;
            }
        direct_rebuild(n);          /* no other thread reaches l after this */
    }
    if (n->o.on_down)
        n->o.on_down(n->o.arg, l, was_up, l->why[0] ? l->why : "connection closed");
    while (l->held) {
        delayed *d = l->held;
        l->held = d->next;
        em_free(d);
    }
    em_free(l);
}

/* cb_pass_end sends what direct cl_net_sends appended during the pass. */
static void cb_pass_end(void *arg)
{
    cl_net *n = arg;
    if (n->o.on_pass_end)
        n->o.on_pass_end(n->o.arg);
    if (!n->kicks)
        return;
    n->kicks = 0;
    cl_net_link *next;
    for (cl_net_link *l = n->up; l; l = next) {
        next = l->next;
        if (l->kick_later) {
            l->kick_later = 0;
            (void)net_conn_kick(l->conn);
        }
    }
}

static void cb_tick(void *arg, int loop, uint64_t pass_now)
{
    cl_net *n = arg;
    /* The loop's stamp is from the start of its pass, and frames of this
     * pass set rx_ms from the clock: older than them, `now - rx_ms` wrapped
     * and closed live links as silent (a redial, and the calls and
     * replication in flight on them lost).  A fresh read is never older. */
    uint64_t now = em_now_ms();
    (void)pass_now;
    uint32_t hb = n->o.heartbeat_ms ? n->o.heartbeat_ms : 1000;
    uint32_t to = n->o.link_timeout_ms ? n->o.link_timeout_ms : 10000;
    (void)loop;
    cl_net_link *next;
    for (cl_net_link *l = n->up; l; l = next) {
        next = l->next;
        if (now - l->rx_ms >= to) {
            snprintf(l->why, sizeof l->why, "no frame from the peer for %u ms", to);
            net_conn_close(l->conn);
            continue;
        }
        if (l->held && release_held(l, now))
            continue;
        if (now - l->tx_ms >= hb && put_frame(l, CL_NET_MSG_PING, NULL, 0) == 0)
            (void)net_conn_kick(l->conn);
    }
    if (n->o.on_tick) {
        n->o.on_tick(n->o.arg, now);
        slow(n, -1, now);
    }
}

/* cb_tls_fail: a peer that is not in the cluster's TLS (plaintext, another
 * CA, no certificate) is refused like any other handshake: counted and
 * logged with why, once per attempt. */
static void cb_tls_fail(void *arg, net_conn *c, const char *why)
{
    cl_net *n = arg;
    char peer[64];
    net_conn_peer(c, peer, sizeof peer);
    count(n, S_REFUSED);
    EM_WARN("cluster: link with %s refused: TLS handshake failed: %s", peer, why);
}

/* ---- lifecycle ------------------------------------------------------------ */

static int name_ok(const char *s)
{
    size_t len = s ? strlen(s) : 0;
    return len >= 1 && len <= CL_NET_MAX_NAME;
}

int cl_net_start(cl_net **out, const cl_net_opts *o)
{
    *out = NULL;
    if (!name_ok(o->cluster) || !name_ok(o->consistent))
        return EM_INVAL;
    cl_net *n = em_calloc(1, sizeof *n);
    if (!n)
        return EM_NOMEM;
    n->o = *o;
    pthread_mutex_init(&n->pool_mu, NULL);
    pthread_rwlock_init(&n->dmu, NULL);
    /* Small blocks up front: the frames in flight at once grow the pool on
     * their own, but a burst must not allocate in steady state. */
    for (uint32_t i = 0; i < POOL_PREFILL; i++) {
        post_send *m = em_malloc(sizeof *m + POOL_MIN_CAP);
        if (!m)
            break;
        m->cap = POOL_MIN_CAP;
        m->next = n->pool;
        n->pool = m;
        n->npool++;
    }
    memcpy(n->cluster, o->cluster, strlen(o->cluster) + 1);
    memcpy(n->consistent, o->consistent, strlen(o->consistent) + 1);
    n->o.cluster = n->cluster;
    n->o.consistent = n->consistent;
    if (o->secret && o->secret_len) {
        n->secret = em_memdup(o->secret, o->secret_len);
        if (!n->secret) {
            pool_free(n);
            em_free(n);
            return EM_NOMEM;
        }
    }
    n->o.secret = n->secret;
    net_options no = {
        .name = "em-cluster",
        .host = o->host, .port = o->port, .threads = 1,
        .limits = {
            .max_conns = 1024,
            .handshake_timeout_ms = o->handshake_ms ? o->handshake_ms : 10000,
            .out_soft_cap = 8u << 20,
            .out_hard_cap = 256u << 20,
            .peer = 1,
        },
        .cb = { .arg = n, .on_open = cb_open, .on_data = cb_data, .on_close = cb_close,
                .on_tick = cb_tick, .on_tls_fail = cb_tls_fail, .on_pass_end = cb_pass_end },
        .tls = o->tls,
    };
    int rc = net_server_start(&n->srv, &no);
    if (rc) {
        pool_free(n);
        em_free(n->secret);
        em_free(n);
        return rc;
    }
    *out = n;
    return 0;
}

void cl_net_stop(cl_net *n)
{
    if (!n)
        return;
    net_server_stop(n->srv);
    pool_free(n);
    pthread_rwlock_destroy(&n->dmu);
    em_free(n->direct);
    if (n->secret)
        memset(n->secret, 0, n->o.secret_len);
    em_free(n->secret);
    em_free(n);
}

void cl_net_mem_stats(cl_net *n, em_mem_stats *sum)
{
    net_mem_stats(n->srv, sum);
}

int cl_net_port(const cl_net *n) { return net_server_port(n->srv); }

int cl_net_connect(cl_net *n, const char *host, int port)
{
    return net_connect(n->srv, host, port, n);
}

void cl_net_link_peer(const cl_net_link *l, uint64_t *msb, uint64_t *lsb)
{
    *msb = l->peer_msb;
    *lsb = l->peer_lsb;
}

int cl_net_link_outgoing(const cl_net_link *l) { return l->outgoing; }

void cl_net_link_addr(const cl_net_link *l, char *buf, size_t len)
{
    net_conn_peer(l->conn, buf, len);
}

uint64_t cl_net_peer_rx_ms(cl_net *n, uint64_t msb, uint64_t lsb)
{
    /* The latest over every link to it: while a duplicate link is being
     * replaced both are up, and the older may be the one gone quiet. */
    uint64_t rx = 0;
    for (cl_net_link *l = n->up; l; l = l->next) {
        uint64_t a, b;
        cl_net_link_peer(l, &a, &b);
        if (a == msb && b == lsb && l->rx_ms > rx)
            rx = l->rx_ms;
    }
    return rx;
}

void cl_net_link_close(cl_net_link *l, const char *why)
{
    snprintf(l->why, sizeof l->why, "%s", why);
    if (l->in_data)
        l->close_req = 1;       /* the connection must outlive cb_data */
    else
        net_conn_close(l->conn);
}

void cl_net_stats_get(const cl_net *n, cl_net_stats *s)
{
    cl_net *m = (cl_net *)n;
    s->frames_out = atomic_load_explicit(&m->st[S_OUT], memory_order_relaxed);
    s->frames_in = atomic_load_explicit(&m->st[S_IN], memory_order_relaxed);
    s->dropped_no_link = atomic_load_explicit(&m->st[S_NOLINK], memory_order_relaxed);
    s->fault_dropped = atomic_load_explicit(&m->st[S_FDROP], memory_order_relaxed);
    s->fault_duplicated = atomic_load_explicit(&m->st[S_FDUP], memory_order_relaxed);
    s->fault_delayed = atomic_load_explicit(&m->st[S_FDELAY], memory_order_relaxed);
    s->refused = atomic_load_explicit(&m->st[S_REFUSED], memory_order_relaxed);
    s->links_up = atomic_load_explicit(&m->st[S_UP], memory_order_relaxed);
}
