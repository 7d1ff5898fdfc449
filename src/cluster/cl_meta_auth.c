/* cl_meta_auth.c - the metadata group's connections prove the cluster secret
 * (and, with cluster_tls, then speak TLS: cl_meta_tls.c).
 *
 * libraft's own TCP transport (raft_uv_tcp) accepts anyone who can reach
 * the raft port and speaks its preamble: a stranger could send votes or
 * entries.  With cluster_secret set, this wraps that transport: once the
 * preamble is through, the accepting side sends a 16-byte random nonce, the
 * connecting side answers HMAC-SHA256(secret, "ember-raft" | nonce | its raft
 * id), the accepting side checks it and answers one byte, and only then is
 * the stream handed to libraft (on both sides).  A wrong proof, a closed
 * stream or silence for CL_META_AUTH_MS closes the connection before libraft
 * sees any of it.  (The cluster transport, cl_net, proves the same secret
 * its own way; this port carries no cluster name, so the secret is the
 * check.)  Everything here runs on the metadata thread's libuv loop.
 */
#include "cluster/cl_meta_auth.h"

#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>
#include <openssl/rand.h>
#include <stdio.h>
#include <string.h>

#include "util/buf.h"
#include "util/err.h"
#include "util/log.h"
#include "util/mem.h"

#define NONCE 16
#define PROOF 32
#define LABEL "ember-raft"

struct cl_meta_auth_hs {            /* one handshake in progress */
    cl_meta_auth    *a;
    uv_stream_t     *stream;
    uv_timer_t       timer;
    int              accepting;     /* 1: the accepting side */
    raft_id          id;            /* the connecting server's */
    char             addr[256];
    struct raft_uv_connect *req;    /* connecting: libraft's request */
    uint8_t          nonce[NONCE];
    uint8_t          in[PROOF];     /* what is read: nonce, proof or the ok */
    size_t           want, got;
    int              done;          /* handed over or failed: the timer closes */
    int              refs;          /* the timer until closed, a write until done */
    struct cl_meta_auth_hs *next;
};
typedef struct cl_meta_auth_hs hs;

static void proof(const cl_meta_auth *a, const uint8_t nonce[NONCE], raft_id id,
                  uint8_t out[PROOF])
{
    uint8_t msg[sizeof LABEL - 1 + NONCE + 8];
    memcpy(msg, LABEL, sizeof LABEL - 1);
    memcpy(msg + sizeof LABEL - 1, nonce, NONCE);
    em_st64(msg + sizeof LABEL - 1 + NONCE, id);
    unsigned len = PROOF;
    (void)HMAC(EVP_sha256(), a->secret, (int)a->secret_len, msg, sizeof msg, out, &len);
}

static void list_drop(cl_meta_auth *a, hs *h)
{
    for (hs **p = &a->pending; *p; p = &(*p)->next)
        if (*p == h) {
            *p = h->next;
            return;
        }
}

static void unref(hs *h)
{
    if (--h->refs == 0)
        em_free(h);
}

static void timer_closed(uv_handle_t *t) { unref(t->data); }

static void stream_closed(uv_handle_t *s) { raft_free(s); }

/* ---- handing a connection to libraft, in TLS when configured ---- */

typedef struct hand {               /* a connection on its way to libraft */
    cl_meta_auth *a;
    int           accepting;
    raft_id       id;
    char          addr[256];
    struct raft_uv_connect *req;    /* connecting: libraft's request */
} hand;

static void deliver(cl_meta_auth *a, int accepting, raft_id id, const char *addr,
                    struct raft_uv_connect *req, uv_stream_t *stream)
{
    if (accepting) {
        if (stream)
            a->accept_cb(&a->outer, id, addr, stream);
    } else {
        req->cb(req, stream, stream ? 0 : a->closing ? RAFT_CANCELED : RAFT_NOCONNECTION);
    }
}

static void tls_done(void *arg, uv_stream_t *plain, int status)
{
    (void)status;                   /* cl_meta_tls logged why */
    hand *x = arg;
    deliver(x->a, x->accepting, x->id, x->addr, x->req, plain);
    em_free(x);
}

/* handover gives libraft stream (through TLS when configured), or fails
 * the connection (stream NULL). */
static void handover(cl_meta_auth *a, int accepting, raft_id id, const char *addr,
                     struct raft_uv_connect *req, uv_stream_t *stream)
{
    if (stream && a->tls.ctx && !a->closing) {
        hand *x = em_malloc(sizeof *x);
        if (x) {
            *x = (hand){ a, accepting, id, "", req };
            snprintf(x->addr, sizeof x->addr, "%s", addr);
            if (cl_meta_tls_start(&a->tls, stream, !accepting, addr, tls_done, x) == 0)
                return;             /* tls_done delivers */
            em_free(x);
        }
    }
    if (stream && (a->tls.ctx || a->closing)) {     /* TLS could not start, or closing */
        stream->data = NULL;
        uv_close((uv_handle_t *)stream, stream_closed);
        stream = NULL;
    }
    deliver(a, accepting, id, addr, req, stream);
}

/* finish ends h: handed over (ok) or its stream closed; a connecting
 * handshake tells libraft either way. */
static void finish(hs *h, int ok, const char *why)
{
    if (h->done)
        return;
    h->done = 1;
    list_drop(h->a, h);
    uv_read_stop(h->stream);
    uv_timer_stop(&h->timer);
    if (!ok) {
        if (why)
            EM_WARN("cluster: metadata connection %s %s refused: %s", h->accepting ? "from" : "to",
                    h->addr, why);
        h->stream->data = NULL;
        uv_close((uv_handle_t *)h->stream, stream_closed);
    }
    handover(h->a, h->accepting, h->id, h->addr, h->req, ok ? h->stream : NULL);
    uv_close((uv_handle_t *)&h->timer, timer_closed);
}

static void on_timeout(uv_timer_t *t) { finish(t->data, 0, "no proof in time"); }

static void alloc_cb(uv_handle_t *s, size_t suggested, uv_buf_t *buf)
{
    (void)suggested;
    hs *h = s->data;
    *buf = uv_buf_init((char *)h->in + h->got, (unsigned)(h->want - h->got));
}

static void read_cb(uv_stream_t *s, ssize_t n, const uv_buf_t *buf);

static void expect(hs *h, size_t n)
{
    h->want = n;
    h->got = 0;
    if (uv_read_start(h->stream, alloc_cb, read_cb))
        finish(h, 0, "cannot read");
}

/* One write: its own request and bytes (a handshake's writes may overlap:
 * the accepting side's ok can be sent before its nonce's write reports). */
typedef struct wreq {
    uv_write_t w;
    hs        *h;
    int        last;                /* the accepting side's ok */
    uint8_t    b[PROOF];
} wreq;

/* written: a write's end (it may come after finish, even cancelled by the
 * stream's close, so h lives until then). */
static void written(uv_write_t *w, int status)
{
    wreq *q = w->data;
    hs *h = q->h;
    if (!h->done && status)
        finish(h, 0, "write failed");
    else if (!h->done && q->last)
        finish(h, 1, NULL);         /* the ok went out: libraft's now */
    em_free(q);
    unref(h);
}

static void send_bytes(hs *h, const uint8_t *p, size_t n, int last)
{
    wreq *q = em_malloc(sizeof *q);
    if (!q) {
        finish(h, 0, "out of memory");
        return;
    }
    q->h = h;
    q->last = last;
    memcpy(q->b, p, n);
    q->w.data = q;
    uv_buf_t b = uv_buf_init((char *)q->b, (unsigned)n);
    h->refs++;
    if (uv_write(&q->w, h->stream, &b, 1, written)) {
        h->refs--;
        em_free(q);
        finish(h, 0, "cannot write");
    }
}

static void read_cb(uv_stream_t *s, ssize_t n, const uv_buf_t *buf)
{
    (void)buf;
    hs *h = s->data;
    if (!h || h->done)
        return;
    if (n < 0) {
        finish(h, 0, "closed during the handshake");
        return;
    }
    h->got += (size_t)n;
    if (h->got < h->want)
        return;
    uv_read_stop(s);
    if (h->accepting) {
        /* the proof */
        uint8_t want[PROOF];
        proof(h->a, h->nonce, h->id, want);
        if (CRYPTO_memcmp(want, h->in, PROOF) != 0) {
            finish(h, 0, "wrong cluster secret");
            return;
        }
        static const uint8_t okb = 1;
        send_bytes(h, &okb, 1, 1);
    } else if (h->want == NONCE) {
        uint8_t p[PROOF];
        proof(h->a, h->in, h->a->self, p);
        expect(h, 1);               /* the ok, after the proof */
        send_bytes(h, p, PROOF, 0);
    } else {
        finish(h, h->in[0] == 1, "refused by the other side");
    }
}

static hs *hs_new(cl_meta_auth *a, uv_stream_t *stream, int accepting, raft_id id,
                  const char *addr)
{
    hs *h = em_calloc(1, sizeof *h);
    if (!h)
        return NULL;
    h->a = a;
    h->refs = 1;                    /* the timer */
    h->stream = stream;
    h->accepting = accepting;
    h->id = id;
    snprintf(h->addr, sizeof h->addr, "%s", addr ? addr : "?");
    stream->data = h;
    uv_timer_init(a->loop, &h->timer);
    h->timer.data = h;
    uv_timer_start(&h->timer, on_timeout, CL_META_AUTH_MS, 0);
    h->next = a->pending;
    a->pending = h;
    return h;
}

/* ---- the transport's methods ----------------------------------------------- */

static cl_meta_auth *of(struct raft_uv_transport *t) { return t->impl; }

static int m_init(struct raft_uv_transport *t, raft_id id, const char *address)
{
    cl_meta_auth *a = of(t);
    a->self = id;
    return a->inner->init(a->inner, id, address);
}

static void inner_accept(struct raft_uv_transport *inner, raft_id id, const char *address,
                         uv_stream_t *stream)
{
    cl_meta_auth *a = inner->data;
    if (!a->secret_len) {
        handover(a, 1, id, address, NULL, stream);
        return;
    }
    hs *h = a->closing ? NULL : hs_new(a, stream, 1, id, address);
    if (!h) {
        stream->data = NULL;
        uv_close((uv_handle_t *)stream, stream_closed);
        return;
    }
    if (RAND_bytes(h->nonce, NONCE) != 1) {
        finish(h, 0, "no random nonce");
        return;
    }
    expect(h, PROOF);
    send_bytes(h, h->nonce, NONCE, 0);
}

static int m_listen(struct raft_uv_transport *t, raft_uv_accept_cb cb)
{
    cl_meta_auth *a = of(t);
    a->accept_cb = cb;
    return a->inner->listen(a->inner, inner_accept);
}

typedef struct creq {
    struct raft_uv_connect inner;   /* first: the callback casts back */
    struct raft_uv_connect *outer;
    cl_meta_auth *a;
    raft_id id;
    char addr[256];
} creq;

static void inner_connected(struct raft_uv_connect *r, uv_stream_t *stream, int status)
{
    creq *c = (creq *)r;
    cl_meta_auth *a = c->a;
    struct raft_uv_connect *req = c->outer;
    raft_id id = c->id;
    char addr[256];
    snprintf(addr, sizeof addr, "%s", c->addr);
    em_free(c);
    if (status || a->closing) {
        if (!status) {
            stream->data = NULL;
            uv_close((uv_handle_t *)stream, stream_closed);
        }
        req->cb(req, NULL, status ? status : RAFT_CANCELED);
        return;
    }
    if (!a->secret_len) {
        handover(a, 0, id, addr, req, stream);
        return;
    }
    hs *h = hs_new(a, stream, 0, id, addr);
    if (!h) {
        stream->data = NULL;
        uv_close((uv_handle_t *)stream, stream_closed);
        req->cb(req, NULL, RAFT_NOMEM);
        return;
    }
    h->req = req;
    expect(h, NONCE);
}

static int m_connect(struct raft_uv_transport *t, struct raft_uv_connect *req, raft_id id,
                     const char *address, raft_uv_connect_cb cb)
{
    cl_meta_auth *a = of(t);
    req->cb = cb;
    creq *c = em_calloc(1, sizeof *c);
    if (!c)
        return RAFT_NOMEM;
    c->outer = req;
    c->a = a;
    c->id = id;
    snprintf(c->addr, sizeof c->addr, "%s", address);
    int rv = a->inner->connect(a->inner, &c->inner, id, address, inner_connected);
    if (rv)
        em_free(c);
    return rv;
}

static void inner_closed(struct raft_uv_transport *inner)
{
    cl_meta_auth *a = inner->data;
    if (a->close_cb)
        a->close_cb(&a->outer);
}

static void m_close(struct raft_uv_transport *t, raft_uv_transport_close_cb cb)
{
    cl_meta_auth *a = of(t);
    a->closing = 1;
    a->close_cb = cb;
    while (a->pending)              /* finish takes each off the list */
        finish(a->pending, 0, NULL);
    cl_meta_tls_close_all(&a->tls);
    a->inner->close(a->inner, inner_closed);
}

int cl_meta_auth_init(cl_meta_auth *a, struct raft_uv_transport *inner, uv_loop_t *loop,
                      const char *secret, size_t secret_len, net_tls_ctx *tls)
{
    memset(a, 0, sizeof *a);
    if ((!secret_len && !tls) || secret_len > sizeof a->secret)
        return EM_INVAL;
    if (secret_len)
        memcpy(a->secret, secret, secret_len);
    a->secret_len = secret_len;
    a->tls.loop = loop;
    a->tls.ctx = tls;
    a->inner = inner;
    a->loop = loop;
    inner->data = a;
    a->outer.impl = a;
    a->outer.init = m_init;
    a->outer.listen = m_listen;
    a->outer.connect = m_connect;
    a->outer.close = m_close;
    return 0;
}
