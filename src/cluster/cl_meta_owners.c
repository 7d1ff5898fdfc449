/* cl_meta_owners.c - the metadata group's owner tables: the OWNERS_SET
 * entry (the exchange's committed decision, reference/cluster.md §3.5) and
 * the per-group table it patches.  Layouts are in cl_meta_fsm.h.
 *
 * A table is kept encoded (one blob per group, in the FSM's blob array):
 * the exchange reads it rarely (once per topology) and the snapshot writes
 * it as it is.  Applying an entry decodes the old table's offsets, patches
 * the named partitions and encodes a new blob in one pass, so a refused or
 * out-of-memory apply leaves the old table untouched.
 */
#include "cluster/cl_meta_fsm.h"

#include <string.h>

#include "util/err.h"
#include "util/hash.h"
#include "util/mem.h"

#define ENTRY_HDR 8
#define OWN_SWITCH 0x80000000u    /* in the group count: the entry switches affinity */
#define PART_HDR  3       /* u8 flags | u8 n | u8 moving */
#define ENT_PART  7       /* u32 part | u8 flags | u8 n | u8 moving */
#define EXPECT_LEN 4      /* CL_META_OWN_EXPECT: u32 the row's CRC-32C after the orders */

/* ent_len: an entry partition's bytes (h: its ENT_PART header). */
static size_t ent_len(const uint8_t *h)
{
    return ENT_PART + 8u * h[5] + (h[4] & CL_META_OWN_EXPECT ? EXPECT_LEN : 0);
}

/* ---- encoding an entry ---- */

static int put(em_buf *b, const void *p, size_t n) { return em_buf_append(b, p, n); }
static int put_u32(em_buf *b, uint32_t v) { uint8_t x[4]; em_st32(x, v); return put(b, x, 4); }
static int put_u64(em_buf *b, uint64_t v) { uint8_t x[8]; em_st64(x, v); return put(b, x, 8); }

int cl_meta_enc_owners_begin(cl_meta_owners_enc *e, em_buf *out, uint64_t exch_id)
{
    memset(e, 0, sizeof *e);
    e->out = out;
    e->at = out->len;
    e->last_part = -1;
    uint8_t h[ENTRY_HDR] = { CL_META_E_OWNERS_SET, 1, 0, 0, 0, 0, 0, 0 };
    if (put(out, h, sizeof h) || put_u64(out, exch_id) || put_u32(out, 0)) {
        out->len = e->at;
        return EM_NOMEM;
    }
    return 0;
}

int cl_meta_enc_owners_group(cl_meta_owners_enc *e, int32_t grp, uint32_t parts)
{
    if (parts == 0 || parts > CL_META_MAX_PARTS || e->ngroups >= CL_META_MAX_CACHES)
        return EM_RANGE;
    size_t at = e->out->len;
    if (put_u32(e->out, (uint32_t)grp) || put_u32(e->out, parts) || put_u32(e->out, 0)) {
        e->out->len = at;
        return EM_NOMEM;
    }
    e->grp_at = at;
    e->parts = parts;
    e->nparts = 0;
    e->last_part = -1;
    e->ngroups++;
    em_st32(e->out->p + e->at + ENTRY_HDR + 8, e->ngroups | (e->sw ? OWN_SWITCH : 0));
    return 0;
}

static int enc_part(cl_meta_owners_enc *e, uint32_t part, uint8_t flags, const uint64_t *order,
                    uint32_t n, uint32_t moving, uint32_t expect)
{
    if (!e->ngroups || part >= e->parts || (int64_t)part <= e->last_part ||
        n > CL_META_MAX_OWNERS || moving > n || (flags & ~(CL_META_OWN_LOST | CL_META_OWN_EXPECT)))
        return EM_RANGE;
    size_t at = e->out->len;
    uint8_t h[ENT_PART];
    em_st32(h, part);
    h[4] = flags;
    h[5] = (uint8_t)n;
    h[6] = (uint8_t)moving;
    int rc = put(e->out, h, sizeof h);
    for (uint32_t i = 0; i < n && !rc; i++)
        rc = put_u64(e->out, order[i]);
    if (!rc && (flags & CL_META_OWN_EXPECT))
        rc = put_u32(e->out, expect);
    if (rc) {
        e->out->len = at;
        return EM_NOMEM;
    }
    e->last_part = part;
    e->nparts++;
    em_st32(e->out->p + e->grp_at + 8, e->nparts);
    return 0;
}

int cl_meta_enc_owners_part(cl_meta_owners_enc *e, uint32_t part, uint8_t flags,
                            const uint64_t *order, uint32_t n, uint32_t moving)
{
    if (flags & CL_META_OWN_EXPECT)
        return EM_RANGE;
    return enc_part(e, part, flags, order, n, moving, 0);
}

int cl_meta_enc_owners_part_if(cl_meta_owners_enc *e, uint32_t part, uint32_t expect,
                               const uint64_t *order, uint32_t n, uint32_t moving)
{
    return enc_part(e, part, CL_META_OWN_EXPECT, order, n, moving, expect);
}

size_t cl_meta_enc_owners_size(const cl_meta_owners_enc *e) { return e->out->len - e->at; }

void cl_meta_enc_owners_switch(cl_meta_owners_enc *e)
{
    e->sw = 1;
    em_st32(e->out->p + e->at + ENTRY_HDR + 8, e->ngroups | OWN_SWITCH);
}

int cl_meta_enc_owners_end(cl_meta_owners_enc *e)
{
    size_t body = e->out->len - e->at - ENTRY_HDR;
    if (body > CL_META_MAX_BODY)
        return EM_BADLEN;
    em_st32(e->out->p + e->at + 4, (uint32_t)body);
    return 0;
}

/* ---- checking an entry (cl_meta_entry_decode) ---- */

typedef struct cur { const uint8_t *p; size_t n, off; } cur;

static int take(cur *c, size_t k, const uint8_t **at)
{
    if (c->n - c->off < k)
        return EM_TRUNCATED;
    *at = c->p + c->off;
    c->off += k;
    return 0;
}

int cl_meta_owners_check(const uint8_t *body, size_t n, uint64_t *exch_id, uint32_t *ngroups,
                         int *sw, cl_meta_bytes *raw)
{
    cur c = { body, n, 0 };
    const uint8_t *h;
    int rc = take(&c, 12, &h);
    if (rc)
        return rc;
    *exch_id = em_ld64(h);
    *ngroups = em_ld32(h + 8);
    *sw = (*ngroups & OWN_SWITCH) != 0;
    *ngroups &= ~OWN_SWITCH;
    if (*ngroups > CL_META_MAX_CACHES)
        return EM_BADLEN;
    for (uint32_t g = 0; g < *ngroups; g++) {
        if ((rc = take(&c, 12, &h)))
            return rc;
        uint32_t parts = em_ld32(h + 4), k = em_ld32(h + 8);
        if (parts == 0 || parts > CL_META_MAX_PARTS || k > parts)
            return EM_RANGE;
        int64_t last = -1;
        for (uint32_t i = 0; i < k; i++) {
            if ((rc = take(&c, ENT_PART, &h)))
                return rc;
            uint32_t part = em_ld32(h);
            if (part >= parts || (int64_t)part <= last)
                return EM_RANGE;
            if ((h[4] & ~(CL_META_OWN_LOST | CL_META_OWN_EXPECT)) || h[6] > h[5])
                return EM_INVAL;
            last = part;
            if ((rc = take(&c, ent_len(h) - ENT_PART, &h)))
                return rc;
        }
    }
    if (c.off != c.n)
        return EM_TRAILING;
    *raw = (cl_meta_bytes){ body + 12, (uint32_t)(n - 12) };
    return 0;
}

/* ---- tables ---- */

uint32_t cl_meta_owners_parts(const cl_meta_blob *t)
{
    return t && t->len >= 4 ? em_ld32(t->p) : 0;
}

int cl_meta_owners_next(const cl_meta_blob *t, uint32_t *off, cl_meta_part_owners *o)
{
    if (*off == 0)
        *off = 4;
    if (!t || *off + PART_HDR > t->len)
        return 0;
    o->flags = t->p[*off];
    o->n = t->p[*off + 1];
    o->moving = t->p[*off + 2];
    o->order = t->p + *off + PART_HDR;
    if (*off + PART_HDR + 8u * o->n > t->len)
        return 0;
    *off += PART_HDR + 8u * o->n;
    return 1;
}

int cl_meta_owners_table_check(const uint8_t *p, size_t n)
{
    cur c = { p, n, 0 };
    const uint8_t *h;
    if (take(&c, 4, &h))
        return EM_TRUNCATED;
    uint32_t parts = em_ld32(h);
    if (parts == 0 || parts > CL_META_MAX_PARTS)
        return EM_RANGE;
    for (uint32_t i = 0; i < parts; i++) {
        if (take(&c, PART_HDR, &h))
            return EM_TRUNCATED;
        if ((h[0] & ~CL_META_OWN_LOST) || h[2] > h[1])
            return EM_INVAL;
        if (take(&c, (size_t)h[1] * 8, &h))
            return EM_TRUNCATED;
    }
    return c.off == c.n ? 0 : EM_TRAILING;
}

static const uint8_t EMPTY_ROW[PART_HDR];

/* row_crc: the CRC-32C of partition part's row in old (offsets offs; an
 * empty row when there is no old table). */
static uint32_t row_crc(const cl_meta_blob *old, const uint32_t *offs, uint32_t part)
{
    if (!old)
        return em_crc32c(0, EMPTY_ROW, PART_HDR);
    return em_crc32c(0, old->p + offs[part], offs[part + 1] - offs[part]);
}

/* takes: whether entry partition s replaces its row - always, unless it
 * carries an expectation the row no longer meets (another decision came
 * first: the proposer decided on a row that is gone). */
static int takes(const uint8_t *s, const cl_meta_blob *old, const uint32_t *offs)
{
    if (!(s[4] & CL_META_OWN_EXPECT))
        return 1;
    return em_ld32(s + ENT_PART + 8u * s[5]) == row_crc(old, offs, em_ld32(s));
}

/* patch_group builds the new table of one group: old (may be NULL, or of
 * another partition count: then every partition starts with no owners) with
 * the k partitions at q (entry bytes, checked) replaced.  *out is a new blob. */
static int patch_group(const cl_meta_blob *old, uint32_t parts, const uint8_t *q, uint32_t k,
                       cl_meta_blob *out, int *changed)
{
    if (old && cl_meta_owners_parts(old) != parts)
        old = NULL;
    /* Size: the old table, minus the replaced partitions, plus the new. */
    size_t size = old ? old->len : 4 + (size_t)parts * PART_HDR;
    uint32_t *offs = em_malloc(sizeof *offs * (parts + 1u));
    if (!offs)
        return EM_NOMEM;
    if (old) {
        uint32_t off = 0, i = 0;
        cl_meta_part_owners o;
        offs[0] = 4;
        while (i < parts && cl_meta_owners_next(old, &off, &o))
            offs[++i] = off;
    } else {
        for (uint32_t i = 0; i <= parts; i++)
            offs[i] = 0;
    }
    const uint8_t *s = q;
    for (uint32_t i = 0; i < k; i++) {
        uint32_t part = em_ld32(s);
        uint8_t n = s[5];
        size_t was = old ? offs[part + 1] - offs[part] : PART_HDR;
        if (takes(s, old, offs)) {
            size += PART_HDR + 8u * n;
            size -= was;
        }
        s += ent_len(s);
    }
    uint8_t *p = em_malloc(size);
    if (!p) {
        em_free(offs);
        return EM_NOMEM;
    }
    em_st32(p, parts);
    size_t w = 4;
    s = q;
    uint32_t next = k ? em_ld32(s) : UINT32_MAX;
    for (uint32_t part = 0; part < parts; part++) {
        if (part == next && !takes(s, old, offs)) {
            s += ent_len(s);
            next = --k ? em_ld32(s) : UINT32_MAX;
        }
        if (part == next) {
            uint8_t n = s[5];
            p[w] = s[4] & CL_META_OWN_LOST;
            p[w + 1] = n;
            p[w + 2] = s[6];
            memcpy(p + w + PART_HDR, s + ENT_PART, 8u * n);
            size_t len = PART_HDR + 8u * n;
            if (!old || offs[part + 1] - offs[part] != len ||
                memcmp(old->p + offs[part], p + w, len) != 0)
                *changed = 1;
            w += len;
            s += ent_len(s);
            next = --k ? em_ld32(s) : UINT32_MAX;
        } else if (old) {
            size_t len = offs[part + 1] - offs[part];
            memcpy(p + w, old->p + offs[part], len);
            w += len;
        } else {
            p[w] = 0;
            p[w + 1] = 0;
            p[w + 2] = 0;
            w += PART_HDR;
        }
    }
    em_free(offs);
    if (!old)
        *changed = 1;
    *out = (cl_meta_blob){ 0, (uint32_t)w, p };
    return 0;
}

static int64_t find(const cl_meta_blob *a, uint32_t n, int32_t id)
{
    uint32_t lo = 0, hi = n;
    while (lo < hi) {
        uint32_t mid = lo + (hi - lo) / 2;
        if (a[mid].id == id)
            return mid;
        if (a[mid].id < id)
            lo = mid + 1;
        else
            hi = mid;
    }
    return -(int64_t)lo - 1;
}

int cl_meta_owners_apply(cl_meta_fsm *f, uint32_t ngroups, cl_meta_bytes raw, int *changed)
{
    /* Build every new table first (all or nothing), then swap them in. */
    cl_meta_blob *fresh = ngroups ? em_calloc(ngroups, sizeof *fresh) : NULL;
    if (ngroups && !fresh)
        return EM_NOMEM;
    uint32_t nf = 0;
    int rc = 0;
    const uint8_t *s = raw.p;
    for (uint32_t g = 0; g < ngroups && !rc; g++) {
        int32_t grp = (int32_t)em_ld32(s);
        uint32_t parts = em_ld32(s + 4), k = em_ld32(s + 8);
        const uint8_t *q = s + 12;
        s = q;
        for (uint32_t i = 0; i < k; i++)
            s += ent_len(s);
        if (!cl_meta_fsm_cache(f, grp))
            continue;               /* a cache stopped since: nothing to own */
        int64_t at = find(f->owners, f->n_owners, grp);
        /* A group named twice in one entry patches its own patch. */
        const cl_meta_blob *old = at >= 0 ? &f->owners[at] : NULL;
        for (uint32_t j = 0; j < nf; j++)
            if (fresh[j].id == grp)
                old = &fresh[j];
        cl_meta_blob nb;
        int ch = 0;
        if ((rc = patch_group(old, parts, q, k, &nb, &ch)) != 0)
            break;
        nb.id = grp;
        if (!ch) {
            em_free(nb.p);
            continue;
        }
        if (old >= fresh && old < fresh + nf) {
            em_free(((cl_meta_blob *)old)->p);
            *(cl_meta_blob *)old = nb;
        } else {
            fresh[nf++] = nb;
        }
    }
    /* Room for the groups that are new to the array. */
    uint32_t add = 0;
    for (uint32_t j = 0; j < nf && !rc; j++)
        if (find(f->owners, f->n_owners, fresh[j].id) < 0)
            add++;
    if (!rc && f->n_owners + add > f->cap_owners) {
        uint32_t cap = f->cap_owners ? f->cap_owners : 8;
        while (cap < f->n_owners + add)
            cap *= 2;
        cl_meta_blob *a = em_realloc(f->owners, sizeof *a * cap);
        if (!a)
            rc = EM_NOMEM;
        else {
            f->owners = a;
            f->cap_owners = cap;
        }
    }
    if (rc) {
        for (uint32_t j = 0; j < nf; j++)
            em_free(fresh[j].p);
        em_free(fresh);
        return rc;
    }
    for (uint32_t j = 0; j < nf; j++) {
        int64_t at = find(f->owners, f->n_owners, fresh[j].id);
        if (at >= 0) {
            em_free(f->owners[at].p);
            f->owners[at] = fresh[j];
        } else {
            uint32_t pos = (uint32_t)(-at - 1);
            memmove(&f->owners[pos + 1], &f->owners[pos],
                    (f->n_owners - pos) * sizeof *f->owners);
            f->owners[pos] = fresh[j];
            f->n_owners++;
        }
        *changed = 1;
    }
    em_free(fresh);
    return 0;
}

void cl_meta_owners_drop(cl_meta_fsm *f, int32_t grp)
{
    int64_t at = find(f->owners, f->n_owners, grp);
    if (at < 0)
        return;
    em_free(f->owners[at].p);
    memmove(&f->owners[at], &f->owners[at + 1],
            (f->n_owners - (uint32_t)at - 1) * sizeof *f->owners);
    f->n_owners--;
}

uint32_t cl_meta_owners_row_crc(const cl_meta_part_owners *o)
{
    return em_crc32c(0, o->order - PART_HDR, PART_HDR + 8u * o->n);
}

const cl_meta_blob *cl_meta_fsm_owners(const cl_meta_fsm *f, int32_t grp)
{
    int64_t at = find(f->owners, f->n_owners, grp);
    return at >= 0 ? &f->owners[at] : NULL;
}
