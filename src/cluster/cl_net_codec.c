/* cl_net_codec.c - frames and the handshake of the cluster port (layouts in
 * cl_net.h).  Everything here reads bytes from another process: every
 * length is checked before use and nothing is allocated while decoding.
 */
#include "cluster/cl_net.h"

#include <stdio.h>
#include <string.h>

#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>

#include "binary/binary.h"
#include "util/err.h"

static const uint8_t HELLO_MAGIC[4] = { 'E', 'M', 'B', 'C' };
#define HELLO_FIXED 52

const char *cl_net_msg_name(uint16_t type)
{
    switch (type) {
#define CL_NET_NAME(name, v) case v: return #name;
    CL_NET_MSG_LIST(CL_NET_NAME)
#undef CL_NET_NAME
    }
    return NULL;
}

int cl_net_frame_parse(const uint8_t *p, size_t n, size_t max_frame, cl_net_frame *f)
{
    if (n < 4)
        return EM_AGAIN;
    uint32_t len = em_ld32(p);
    if (len < 2 || len > max_frame)
        return EM_BADLEN;
    if (n < 4 + (size_t)len)
        return EM_AGAIN;
    uint16_t type = em_ld16(p + 4);
    if (!cl_net_msg_name(type))
        return EM_BADOP;
    f->type = type;
    f->payload = p + CL_NET_HDR;
    f->len = len - 2;
    f->total = 4 + (size_t)len;
    return 0;
}

void cl_net_frame_hdr(uint8_t h[CL_NET_HDR], uint16_t type, size_t len)
{
    em_st32(h, (uint32_t)(len + 2));
    em_st16(h + 4, type);
}

int cl_net_frame_begin(em_buf *b, uint16_t type, size_t *at)
{
    int rc = em_buf_reserve(b, CL_NET_HDR);
    if (rc)
        return rc;
    *at = b->len;
    cl_net_frame_hdr(b->p + b->len, type, 0);   /* the length: cl_net_frame_end */
    b->len += CL_NET_HDR;
    return 0;
}

void cl_net_frame_end(em_buf *b, size_t at)
{
    em_st32(b->p + at, (uint32_t)(b->len - at - 4));
}

static int put_name(em_buf *b, const char *s, size_t n)
{
    if (n == 0 || n > CL_NET_MAX_NAME)
        return EM_BADLEN;
    int rc = em_buf_put_u8(b, (uint8_t)n);
    return rc ? rc : em_buf_append(b, s, n);
}

int cl_net_hello_encode(em_buf *b, const cl_net_hello *h)
{
    size_t at;
    int rc = cl_net_frame_begin(b, CL_NET_MSG_HELLO, &at);
    if (rc || (rc = em_buf_reserve(b, HELLO_FIXED)))
        return rc;
    uint8_t *o = b->p + b->len;
    memcpy(o, HELLO_MAGIC, 4);
    em_st16(o + 4, h->version);
    em_st16(o + 6, h->flags);
    em_st64(o + 8, h->node_msb);
    em_st64(o + 16, h->node_lsb);
    em_st64(o + 24, h->top_major);
    em_st32(o + 32, h->top_minor);
    memcpy(o + 36, h->nonce, CL_NET_NONCE);
    b->len += HELLO_FIXED;
    if ((rc = put_name(b, h->cluster, h->cluster_len)) ||
        (rc = put_name(b, h->consistent, h->consistent_len)))
        return rc;
    cl_net_frame_end(b, at);
    return 0;
}

/* get_name reads a u8-prefixed UTF-8 name at *off. */
static int get_name(const uint8_t *p, size_t n, size_t *off, const char **s, size_t *len)
{
    if (*off >= n)
        return EM_TRUNCATED;
    size_t l = p[*off];
    if (l == 0)
        return EM_BADLEN;
    if (l > n - *off - 1)
        return EM_TRUNCATED;
    if (!bin_utf8_ok(p + *off + 1, l) || memchr(p + *off + 1, 0, l))
        return EM_BADUTF8;
    *s = (const char *)p + *off + 1;
    *len = l;
    *off += 1 + l;
    return 0;
}

int cl_net_hello_decode(const uint8_t *p, size_t n, cl_net_hello *h)
{
    if (n < 4 || memcmp(p, HELLO_MAGIC, 4) != 0)
        return EM_PROTO;
    if (n < HELLO_FIXED)
        return EM_TRUNCATED;
    h->version = em_ld16(p + 4);
    h->flags = em_ld16(p + 6);
    h->node_msb = em_ld64(p + 8);
    h->node_lsb = em_ld64(p + 16);
    h->top_major = em_ld64(p + 24);
    h->top_minor = em_ld32(p + 32);
    memcpy(h->nonce, p + 36, CL_NET_NONCE);
    size_t off = HELLO_FIXED;
    int rc = get_name(p, n, &off, &h->cluster, &h->cluster_len);
    if (!rc)
        rc = get_name(p, n, &off, &h->consistent, &h->consistent_len);
    if (!rc && off != n)
        rc = EM_TRAILING;
    return rc;
}

void cl_net_proof(uint8_t out[CL_NET_PROOF], const void *secret, size_t secret_len,
                  char role, const uint8_t peer_nonce[CL_NET_NONCE],
                  uint64_t node_msb, uint64_t node_lsb)
{
    uint8_t msg[1 + CL_NET_NONCE + 16];
    msg[0] = (uint8_t)role;
    memcpy(msg + 1, peer_nonce, CL_NET_NONCE);
    em_st64(msg + 1 + CL_NET_NONCE, node_msb);
    em_st64(msg + 9 + CL_NET_NONCE, node_lsb);
    unsigned ol = CL_NET_PROOF;
    if (!HMAC(EVP_sha256(), secret, (int)secret_len, msg, sizeof msg, out, &ol))
        memset(out, 0, CL_NET_PROOF);    /* never matches a real proof's check below */
}

int cl_net_check_peer(const cl_net_hello *peer, const char *cluster, size_t cluster_len,
                      int have_secret, char *why, size_t why_len)
{
    if (peer->version != CL_NET_VERSION) {
        snprintf(why, why_len, "cluster protocol version %u, this node speaks %u",
                 peer->version, CL_NET_VERSION);
        return EM_AUTH;
    }
    if (peer->cluster_len != cluster_len || memcmp(peer->cluster, cluster, cluster_len) != 0) {
        snprintf(why, why_len, "peer belongs to cluster '%.*s', this node to '%.*s'",
                 (int)peer->cluster_len, peer->cluster, (int)cluster_len, cluster);
        return EM_AUTH;
    }
    int peer_secret = (peer->flags & CL_NET_HELLO_SECRET) != 0;
    if (peer_secret != (have_secret != 0)) {
        snprintf(why, why_len, "%s a cluster secret and the other does not",
                 have_secret ? "this node has" : "the peer has");
        return EM_AUTH;
    }
    return 0;
}

int cl_net_verify_auth(const uint8_t *p, size_t n, const void *secret, size_t secret_len,
                       char peer_role, const uint8_t my_nonce[CL_NET_NONCE],
                       uint64_t peer_msb, uint64_t peer_lsb)
{
    if (!secret_len)
        return n == 0 ? 0 : EM_AUTH;
    if (n != CL_NET_PROOF)
        return EM_AUTH;
    uint8_t want[CL_NET_PROOF];
    cl_net_proof(want, secret, secret_len, peer_role, my_nonce, peer_msb, peer_lsb);
    /* A failed HMAC leaves an all-zero proof: refuse it rather than match it. */
    static const uint8_t zero[CL_NET_PROOF];
    if (CRYPTO_memcmp(want, zero, CL_NET_PROOF) == 0)
        return EM_AUTH;
    return CRYPTO_memcmp(want, p, CL_NET_PROOF) == 0 ? 0 : EM_AUTH;
}
