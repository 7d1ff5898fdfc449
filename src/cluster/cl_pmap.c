/* cl_pmap.c - encode and decode of the exchange's full map and single
 * message (layouts in cl_pmap.h).  Encoders size the output once
 * (cl_*_size_of) and write it in one pass; decoders read bytes that came
 * from another node: every count is checked against its limit and against
 * the bytes present before anything is read, and the result is a view into
 * the caller's bytes (nothing allocated, nothing copied).
 */
#include "cluster/cl_pmap.h"

#include <string.h>

#include "util/err.h"

static const uint8_t PMAP_MAGIC[4] = { 'E', 'M', 'P', 'F' };
static const uint8_t PSINGLE_MAGIC[4] = { 'E', 'M', 'P', 'S' };

const char *cl_ps_name(int state)
{
    static const char *const names[CL_PS_COUNT] = {
        "MOVING", "OWNING", "RENTING", "EVICTED", "LOST", "NONE"
    };
    return state >= 0 && state < CL_PS_COUNT ? names[state] : "?";
}

/* states_bad: nonzero if any byte is not a CL_PS_* value (0..5).  The
 * state block is most of a full map's bytes, so 8 bytes at a time: a byte
 * b is over 5 iff its top bit is set or its low 7 bits plus 0x7a carry into
 * the top bit (no carry crosses a byte: 0x7f + 0x7a < 0x100). */
static int states_bad(const uint8_t *s, size_t n)
{
    const uint64_t lo7 = 0x7f7f7f7f7f7f7f7fULL, add = 0x7a7a7a7a7a7a7a7aULL;
    uint64_t acc = 0;
    size_t i = 0;
    for (; i + 32 <= n; i += 32) {
        uint64_t a = em_ld64(s + i), b = em_ld64(s + i + 8);
        uint64_t c = em_ld64(s + i + 16), d = em_ld64(s + i + 24);
        acc |= (a | ((a & lo7) + add)) | (b | ((b & lo7) + add)) |
               (c | ((c & lo7) + add)) | (d | ((d & lo7) + add));
    }
    for (; i + 8 <= n; i += 8) {
        uint64_t a = em_ld64(s + i);
        acc |= a | ((a & lo7) + add);
    }
    uint8_t bad = 0;
    for (; i < n; i++)
        bad |= (uint8_t)(s[i] > CL_PS_NONE);
    return bad || (acc & ~lo7) != 0;
}

/* ---- the full map ------------------------------------------------------ */

static size_t pmap_group_bytes(uint32_t nodes, uint32_t parts, uint32_t ndiff)
{
    return CL_PMAP_GRP_HDR + (size_t)nodes * parts + 16u * (size_t)parts +
           CL_PMAP_DIFF * (size_t)ndiff;
}

size_t cl_pmap_size_of(const cl_pmap *m)
{
    size_t n = CL_PMAP_HDR + 16u * (size_t)m->nodes;
    for (uint32_t i = 0; i < m->ngroups; i++)
        n += pmap_group_bytes(m->nodes, m->g[i].parts, m->g[i].ndiff);
    return n;
}

/* pmap_check: the encoder refuses what the decoder would refuse, so a map
 * that leaves this node always decodes on the others. */
static int pmap_check(const cl_pmap *m)
{
    if (m->nodes < 1 || m->nodes > CL_PMAP_MAX_NODES || m->ngroups > CL_PMAP_MAX_GROUPS ||
        !m->node)
        return EM_RANGE;
    for (uint32_t i = 0; i < m->ngroups; i++) {
        const cl_pmap_group *g = &m->g[i];
        if (g->parts < 1 || g->parts > CL_PMAP_MAX_PARTS ||
            (uint64_t)g->ndiff > (uint64_t)m->nodes * g->parts)
            return EM_RANGE;
        if (states_bad(g->state, (size_t)m->nodes * g->parts))
            return EM_RANGE;
        const cl_pmap_diff *d = g->diff;
        for (uint32_t k = 0; k < g->ndiff; k++)
            if (d[k].node >= m->nodes || d[k].part >= g->parts)
                return EM_RANGE;
    }
    return 0;
}

int cl_pmap_encode(em_buf *out, const cl_pmap *m)
{
    int rc = pmap_check(m);
    if (rc)
        return rc;
    size_t total = cl_pmap_size_of(m);
    if ((rc = em_buf_reserve_exact(out, total)))
        return rc;
    uint8_t *w = out->p + out->len;
    memcpy(w, PMAP_MAGIC, 4);
    em_st64(w + 4, m->exch_id);
    em_st64(w + 12, m->major);
    em_st32(w + 20, m->minor);
    em_st32(w + 24, m->nodes);
    em_st32(w + 28, m->ngroups);
    w += CL_PMAP_HDR;
    for (uint32_t i = 0; i < m->nodes; i++, w += 16) {
        em_st64(w, m->node[i].msb);
        em_st64(w + 8, m->node[i].lsb);
    }
    for (uint32_t i = 0; i < m->ngroups; i++) {
        const cl_pmap_group *g = &m->g[i];
        em_st32(w, (uint32_t)g->grp);
        em_st32(w + 4, g->parts);
        em_st32(w + 8, g->ndiff);
        w += CL_PMAP_GRP_HDR;
        size_t ns = (size_t)m->nodes * g->parts;
        memcpy(w, g->state, ns);
        w += ns;
        /* The host is little-endian (buf.h insists), so the caller's u64
         * arrays are already in wire order. */
        memcpy(w, g->cntr, 8u * (size_t)g->parts);
        w += 8u * (size_t)g->parts;
        memcpy(w, g->size, 8u * (size_t)g->parts);
        w += 8u * (size_t)g->parts;
        const cl_pmap_diff *d = g->diff;
        for (uint32_t k = 0; k < g->ndiff; k++, w += CL_PMAP_DIFF) {
            em_st32(w, d[k].node);
            em_st32(w + 4, d[k].part);
            em_st64(w + 8, d[k].cntr);
        }
    }
    out->len += total;
    return 0;
}

/* The peeks also refuse a count the bytes cannot hold (each group takes at
 * least its header and one partition), so a receiver never sizes its array
 * from a count the message could not carry. */
uint32_t cl_pmap_peek_groups(const uint8_t *p, size_t n)
{
    if (n < CL_PMAP_HDR || memcmp(p, PMAP_MAGIC, 4) != 0)
        return 0;
    uint32_t nodes = em_ld32(p + 24), g = em_ld32(p + 28);
    if (nodes < 1 || nodes > CL_PMAP_MAX_NODES || g > CL_PMAP_MAX_GROUPS)
        return 0;
    size_t ids = 16u * (size_t)nodes, min = pmap_group_bytes(nodes, 1, 0);
    if (n - CL_PMAP_HDR < ids)
        return 0;
    return (uint64_t)g * min <= n - CL_PMAP_HDR - ids ? g : 0;
}

int cl_pmap_decode(const uint8_t *p, size_t n, cl_pmap *m, uint32_t cap)
{
    if (n < 4)
        return EM_TRUNCATED;
    if (memcmp(p, PMAP_MAGIC, 4) != 0)
        return EM_PROTO;
    if (n < CL_PMAP_HDR)
        return EM_TRUNCATED;
    uint32_t nodes = em_ld32(p + 24), ngroups = em_ld32(p + 28);
    if (nodes < 1 || nodes > CL_PMAP_MAX_NODES || ngroups > CL_PMAP_MAX_GROUPS ||
        ngroups > cap)
        return EM_RANGE;
    size_t off = CL_PMAP_HDR;
    if (n - off < 16u * (size_t)nodes)
        return EM_TRUNCATED;
    m->exch_id = em_ld64(p + 4);
    m->major = em_ld64(p + 12);
    m->minor = em_ld32(p + 20);
    m->nodes = nodes;
    m->node = NULL;
    m->node_raw = p + off;
    m->ngroups = ngroups;
    off += 16u * (size_t)nodes;
    for (uint32_t i = 0; i < ngroups; i++) {
        if (n - off < CL_PMAP_GRP_HDR)
            return EM_TRUNCATED;
        const uint8_t *h = p + off;
        uint32_t parts = em_ld32(h + 4), ndiff = em_ld32(h + 8);
        if (parts < 1 || parts > CL_PMAP_MAX_PARTS || (uint64_t)ndiff > (uint64_t)nodes * parts)
            return EM_RANGE;
        /* At most 12 + 2^12 * 2^16 + 2^20 + 2^32 bytes: no overflow in size_t. */
        if (n - off < pmap_group_bytes(nodes, parts, ndiff))
            return EM_TRUNCATED;
        cl_pmap_group *g = &m->g[i];
        g->grp = (int32_t)em_ld32(h);
        g->parts = parts;
        g->ndiff = ndiff;
        off += CL_PMAP_GRP_HDR;
        g->state = p + off;
        size_t ns = (size_t)nodes * parts;
        if (states_bad(g->state, ns))
            return EM_RANGE;
        off += ns;
        g->cntr = p + off;
        off += 8u * (size_t)parts;
        g->size = p + off;
        off += 8u * (size_t)parts;
        g->diff = p + off;
        for (uint32_t k = 0; k < ndiff; k++, off += CL_PMAP_DIFF)
            if (em_ld32(p + off) >= nodes || em_ld32(p + off + 4) >= parts)
                return EM_RANGE;
    }
    return off == n ? 0 : EM_TRAILING;
}

cl_pmap_diff cl_pmap_diff_at(const cl_pmap_group *g, uint32_t i)
{
    const uint8_t *d = (const uint8_t *)g->diff + (size_t)CL_PMAP_DIFF * i;
    return (cl_pmap_diff){ em_ld32(d), em_ld32(d + 4), em_ld64(d + 8) };
}

cl_meta_uuid cl_pmap_node(const cl_pmap *m, uint32_t i)
{
    if (m->node)
        return m->node[i];
    const uint8_t *u = m->node_raw + 16u * (size_t)i;
    return (cl_meta_uuid){ em_ld64(u), em_ld64(u + 8) };
}

/* ---- the single message ------------------------------------------------ */

size_t cl_psingle_size_of(const cl_psingle *s)
{
    size_t n = CL_PSINGLE_HDR;
    for (uint32_t i = 0; i < s->ngroups; i++)
        n += CL_PSINGLE_GRP_HDR + CL_PSINGLE_PART * (size_t)s->g[i].k;
    return n;
}

static int psingle_check(const cl_psingle *s)
{
    if (s->ngroups > CL_PMAP_MAX_GROUPS)
        return EM_RANGE;
    for (uint32_t i = 0; i < s->ngroups; i++) {
        const cl_psingle_group *g = &s->g[i];
        if (g->parts < 1 || g->parts > CL_PMAP_MAX_PARTS || g->k > g->parts)
            return EM_RANGE;
        for (uint32_t k = 0; k < g->k; k++)
            if (g->p[k].part >= g->parts || g->p[k].state > CL_PS_NONE ||
                (k && g->p[k].part <= g->p[k - 1].part))
                return EM_RANGE;
    }
    return 0;
}

int cl_psingle_encode(em_buf *out, const cl_psingle *s)
{
    int rc = psingle_check(s);
    if (rc)
        return rc;
    size_t total = cl_psingle_size_of(s);
    if ((rc = em_buf_reserve_exact(out, total)))
        return rc;
    uint8_t *w = out->p + out->len;
    memcpy(w, PSINGLE_MAGIC, 4);
    em_st64(w + 4, s->exch_id);
    em_st64(w + 12, s->node.msb);
    em_st64(w + 20, s->node.lsb);
    em_st32(w + 28, s->ngroups);
    w += CL_PSINGLE_HDR;
    for (uint32_t i = 0; i < s->ngroups; i++) {
        const cl_psingle_group *g = &s->g[i];
        em_st32(w, (uint32_t)g->grp);
        em_st32(w + 4, g->parts);
        em_st32(w + 8, g->k);
        w += CL_PSINGLE_GRP_HDR;
        for (uint32_t k = 0; k < g->k; k++, w += CL_PSINGLE_PART) {
            const cl_psingle_part *q = &g->p[k];
            em_st32(w, q->part);
            w[4] = q->state;
            em_st64(w + 5, q->cntr);
            em_st64(w + 13, q->init_cntr);
            em_st64(w + 21, q->size);
            em_st64(w + 29, q->hist_cntr);
        }
    }
    out->len += total;
    return 0;
}

uint32_t cl_psingle_peek_groups(const uint8_t *p, size_t n)
{
    if (n < CL_PSINGLE_HDR || memcmp(p, PSINGLE_MAGIC, 4) != 0)
        return 0;
    uint32_t g = em_ld32(p + 28);
    return g <= CL_PMAP_MAX_GROUPS && (uint64_t)g * CL_PSINGLE_GRP_HDR <= n - CL_PSINGLE_HDR ? g : 0;
}

int cl_psingle_decode(const uint8_t *p, size_t n, cl_psingle *s, uint32_t cap)
{
    if (n < 4)
        return EM_TRUNCATED;
    if (memcmp(p, PSINGLE_MAGIC, 4) != 0)
        return EM_PROTO;
    if (n < CL_PSINGLE_HDR)
        return EM_TRUNCATED;
    uint32_t ngroups = em_ld32(p + 28);
    if (ngroups > CL_PMAP_MAX_GROUPS || ngroups > cap)
        return EM_RANGE;
    s->exch_id = em_ld64(p + 4);
    s->node = (cl_meta_uuid){ em_ld64(p + 12), em_ld64(p + 20) };
    s->ngroups = ngroups;
    size_t off = CL_PSINGLE_HDR;
    for (uint32_t i = 0; i < ngroups; i++) {
        if (n - off < CL_PSINGLE_GRP_HDR)
            return EM_TRUNCATED;
        const uint8_t *h = p + off;
        uint32_t parts = em_ld32(h + 4), k = em_ld32(h + 8);
        if (parts < 1 || parts > CL_PMAP_MAX_PARTS || k > parts)
            return EM_RANGE;
        off += CL_PSINGLE_GRP_HDR;
        if (n - off < CL_PSINGLE_PART * (size_t)k)
            return EM_TRUNCATED;
        cl_psingle_group *g = &s->g[i];
        g->grp = (int32_t)em_ld32(h);
        g->parts = parts;
        g->k = k;
        g->p = NULL;
        g->raw = p + off;
        uint32_t prev = 0;
        for (uint32_t j = 0; j < k; j++, off += CL_PSINGLE_PART) {
            uint32_t part = em_ld32(p + off);
            if (part >= parts || p[off + 4] > CL_PS_NONE || (j && part <= prev))
                return EM_RANGE;
            prev = part;
        }
    }
    return off == n ? 0 : EM_TRAILING;
}

cl_psingle_part cl_psingle_part_at(const cl_psingle_group *g, uint32_t i)
{
    if (g->p)
        return g->p[i];
    const uint8_t *r = g->raw + (size_t)CL_PSINGLE_PART * i;
    return (cl_psingle_part){ em_ld32(r), r[4], em_ld64(r + 5), em_ld64(r + 13),
                              em_ld64(r + 21), em_ld64(r + 29) };
}
