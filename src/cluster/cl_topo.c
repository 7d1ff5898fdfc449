/* cl_topo.c - the published topology: one immutable snapshot of the
 * metadata group's state (members, owner tables) per applied change,
 * shared by reference count (protocol in cl_topo.h).
 *
 * A snapshot is built once, from the state machine under its lock, and
 * never changes after that except for its affinity cache (computed on first
 * use, under the snapshot's own mutex).  Readers on any thread.
 */
#include "cluster/cl_topo.h"

#include <pthread.h>
#include <stdatomic.h>
#include <string.h>

#include "util/err.h"
#include "util/mem.h"

/* A group's committed owners, resolved to member indices of the snapshot
 * (owners no longer members are left out, and the partition marked). */
#define GRP_DROPPED 0x80u
#define GRP_PRIMARY_GONE 0x40u        /* ... and that owner was its primary */
typedef struct topo_grp {
    int32_t   grp;
    uint32_t  parts;
    uint32_t *off;                /* parts + 1: partition p's owners are idx[off[p]..off[p+1]) */
    uint16_t *idx;
    uint8_t  *flags;              /* CL_META_OWN_* per partition */
    uint8_t  *mov;                /* per partition: the last mov of its idx are MOVING */
    uint32_t *crc;                /* per partition: its committed row's CRC-32C */
    uint32_t  nlost;              /* partitions flagged lost */
    uint32_t  nmoving;            /* MOVING copies in all */
} topo_grp;

typedef struct topo_ref {
    cl_topo  t;
    uint64_t index;               /* the metadata log index it was built at */
    uint64_t last_exch;           /* the last exchange committed then */
    topo_grp *grp;                /* by group id, ascending */
    uint32_t ngrp;
    _Atomic uint64_t *live;       /* the node's count of live snapshots */
    _Atomic int refs;
    pthread_mutex_t mu;           /* affinity cache */
    struct aff_cache { uint32_t parts, backups; cl_aff_table tab; struct aff_cache *next; } *aff;
    char    *str;                 /* every member string */
    char    *blstr;               /* the baseline's consistent ids */
    uint16_t *blm;                /* nbl: baseline node i's member index, or CL_TOPO_NONE */
    uint64_t *blhost;             /* nbl: its host field (an offline one's last known) */
} topo_ref;

static _Atomic uint64_t *live_counter(topo_ref *r) { return r->live; }

static void topo_free(topo_ref *r)
{
    if (r->live)
        atomic_fetch_sub(live_counter(r), 1);
    while (r->aff) {
        struct aff_cache *a = r->aff;
        r->aff = a->next;
        cl_aff_free(&a->tab);
        em_free(a);
    }
    for (uint32_t i = 0; i < r->ngrp; i++) {
        em_free(r->grp[i].off);
        em_free(r->grp[i].idx);
        em_free(r->grp[i].flags);
        em_free(r->grp[i].mov);
        em_free(r->grp[i].crc);
    }
    em_free(r->grp);
    pthread_mutex_destroy(&r->mu);
    em_free(r->str);
    em_free(r->blstr);
    em_free(r->blm);
    em_free(r->blhost);
    em_free((void *)r->t.bl);
    em_free(r->t.m);
    em_free(r);
}

void cl_topo_hold(cl_topo *t)
{
    atomic_fetch_add(&((topo_ref *)t)->refs, 1);
}

void cl_topo_release(cl_topo *t)
{
    topo_ref *r = (topo_ref *)t;
    if (r && atomic_fetch_sub(&r->refs, 1) == 1)
        topo_free(r);
}

/* aff_nodes: what affinity is computed over - every member, or the
 * baseline's nodes.  A baseline node's tie-break id is zero whether it is
 * online or not, so its rows do not change when it comes and goes. */
static cl_aff_node *aff_nodes(const topo_ref *r, uint32_t *n, int *excl)
{
    const cl_topo *t = &r->t;
    *n = t->nbl ? t->nbl : t->n;
    *excl = 0;
    cl_aff_node *nodes = em_calloc(*n, sizeof *nodes);
    if (!nodes)
        return NULL;
    for (uint32_t i = 0; i < *n; i++) {
        const cl_topo_member *m = t->nbl ? (r->blm[i] != CL_TOPO_NONE ? &t->m[r->blm[i]] : NULL)
                                         : &t->m[i];
        const char *cid = t->nbl ? t->bl[i] : m->cid;
        uint64_t host = t->nbl ? r->blhost[i] : m->host;
        nodes[i] = (cl_aff_node){ cid, strlen(cid), 0, 0, host & CL_TOPO_HOST_MASK };
        if (!t->nbl) {
            nodes[i].msb = m->id.msb;
            nodes[i].lsb = m->id.lsb;
        }
        *excl |= (host & CL_TOPO_EXCLUDE_NEIGHBORS) != 0;
    }
    return nodes;
}

/* aff_to_members rewrites a table over baseline nodes into member indices,
 * each row's online owners first, CL_TOPO_NONE after them. */
static void aff_to_members(const topo_ref *r, cl_aff_table *tab)
{
    for (uint32_t p = 0; p < tab->parts; p++) {
        uint16_t *row = tab->owner + (size_t)p * tab->copies;
        uint32_t k = 0;
        for (uint32_t i = 0; i < tab->copies; i++)
            if (r->blm[row[i]] != CL_TOPO_NONE)
                row[k++] = r->blm[row[i]];
        for (; k < tab->copies; k++)
            row[k] = CL_TOPO_NONE;
    }
}

const cl_aff_table *cl_topo_affinity(cl_topo *t, uint32_t parts, uint32_t backups)
{
    topo_ref *r = (topo_ref *)t;
    if (!t->n)
        return NULL;
    pthread_mutex_lock(&r->mu);
    struct aff_cache *a = r->aff;
    while (a && (a->parts != parts || a->backups != backups))
        a = a->next;
    if (!a) {
        uint32_t n;
        int excl;
        cl_aff_node *nodes = aff_nodes(r, &n, &excl);
        a = nodes ? em_calloc(1, sizeof *a) : NULL;
        if (a && cl_aff_compute(&a->tab, nodes, n, parts, backups, excl) == 0) {
            if (t->nbl)
                aff_to_members(r, &a->tab);
            a->parts = parts;
            a->backups = backups;
            a->next = r->aff;
            r->aff = a;
        } else {
            em_free(a);
            a = NULL;
        }
        em_free(nodes);
    }
    pthread_mutex_unlock(&r->mu);
    return a ? &a->tab : NULL;
}

uint32_t cl_topo_baseline_offline(const cl_topo *t)
{
    uint32_t n = 0;
    for (uint32_t i = 0; i < t->nbl; i++)
        n += ((const topo_ref *)t)->blm[i] == CL_TOPO_NONE;
    return n;
}

uint32_t cl_topo_data_nodes(const cl_topo *t, uint32_t *idx, uint32_t max)
{
    uint32_t k = 0;
    for (uint32_t i = 0; i < t->n && k < max; i++)
        if (t->m[i].data)
            idx[k++] = i;
    return k;
}

static const topo_grp *topo_group(const topo_ref *r, int32_t grp)
{
    uint32_t lo = 0, hi = r->ngrp;
    while (lo < hi) {
        uint32_t mid = lo + (hi - lo) / 2;
        if (r->grp[mid].grp == grp)
            return &r->grp[mid];
        if (r->grp[mid].grp < grp)
            lo = mid + 1;
        else
            hi = mid;
    }
    return NULL;
}

int cl_topo_has_owners(cl_topo *t, int32_t grp, uint32_t parts)
{
    const topo_grp *g = topo_group((topo_ref *)t, grp);
    return g && g->parts == parts;
}

uint32_t cl_topo_owners(cl_topo *t, int32_t grp, uint32_t parts, uint32_t backups,
                        int replicated, uint32_t part, uint32_t *idx, uint32_t max)
{
    if (part >= parts || !t->n)
        return 0;
    const topo_grp *g = topo_group((topo_ref *)t, grp);
    if (g && g->parts == parts) {
        uint32_t k = 0;
        for (uint32_t i = g->off[part]; i < g->off[part + 1] - g->mov[part] && k < max; i++)
            idx[k++] = g->idx[i];
        return k;
    }
    /* No decision yet (a cache the exchange has not seen): its ideal owners. */
    if (replicated)
        return cl_topo_data_nodes(t, idx, max);
    const cl_aff_table *a = cl_topo_affinity(t, parts, backups);
    if (!a)
        return 0;
    const uint16_t *row = cl_aff_owners(a, part);
    uint32_t k = 0;
    for (uint32_t i = 0; i < a->copies && k < max && row[i] != CL_TOPO_NONE; i++)
        idx[k++] = row[i];
    return k;
}

int cl_topo_part_lost(cl_topo *t, int32_t grp, uint32_t part)
{
    const topo_grp *g = topo_group((topo_ref *)t, grp);
    return g && part < g->parts && (g->flags[part] & CL_META_OWN_LOST);
}

uint32_t cl_topo_moving(cl_topo *t, int32_t grp, uint32_t parts, uint32_t part, uint32_t *idx,
                        uint32_t max)
{
    const topo_grp *g = topo_group((topo_ref *)t, grp);
    if (!g || g->parts != parts || part >= parts)
        return 0;
    uint32_t k = 0;
    for (uint32_t i = g->off[part + 1] - g->mov[part]; i < g->off[part + 1] && k < max; i++)
        idx[k++] = g->idx[i];
    return k;
}

uint32_t cl_topo_moving_count(cl_topo *t, int32_t grp)
{
    const topo_grp *g = topo_group((topo_ref *)t, grp);
    return g ? g->nmoving : 0;
}

uint32_t cl_topo_lost_count(cl_topo *t, int32_t grp)
{
    const topo_grp *g = topo_group((topo_ref *)t, grp);
    return g ? g->nlost : 0;
}

int cl_topo_part_dropped(cl_topo *t, int32_t grp, uint32_t part)
{
    const topo_grp *g = topo_group((topo_ref *)t, grp);
    return g && part < g->parts && (g->flags[part] & GRP_DROPPED);
}

int cl_topo_primary_dropped(cl_topo *t, int32_t grp, uint32_t part)
{
    const topo_grp *g = topo_group((topo_ref *)t, grp);
    return g && part < g->parts && (g->flags[part] & GRP_PRIMARY_GONE);
}

uint32_t cl_topo_row_crc(cl_topo *t, int32_t grp, uint32_t part)
{
    const topo_grp *g = topo_group((topo_ref *)t, grp);
    return g && part < g->parts ? g->crc[part] : 0;
}

uint64_t cl_topo_last_exchange(const cl_topo *t) { return ((const topo_ref *)t)->last_exch; }
uint64_t cl_topo_index(const cl_topo *t) { return ((const topo_ref *)t)->index; }

/* member_by_order: the snapshot's index of the member with that join order
 * (members are kept in join order), or -1. */
static int member_by_order(const cl_topo *t, uint64_t order)
{
    uint32_t lo = 0, hi = t->n;
    while (lo < hi) {
        uint32_t mid = lo + (hi - lo) / 2;
        if (t->m[mid].order == order)
            return (int)mid;
        if (t->m[mid].order < order)
            lo = mid + 1;
        else
            hi = mid;
    }
    return -1;
}

/* build_groups resolves the state's owner tables against the members. */
static int build_groups(topo_ref *r, const cl_meta_fsm *s)
{
    if (!s->n_owners)
        return 0;
    r->grp = em_calloc(s->n_owners, sizeof *r->grp);
    if (!r->grp)
        return EM_NOMEM;
    for (uint32_t gi = 0; gi < s->n_owners; gi++) {
        const cl_meta_blob *b = &s->owners[gi];
        topo_grp *g = &r->grp[r->ngrp++];
        g->grp = b->id;
        g->parts = cl_meta_owners_parts(b);
        size_t total = 0;
        uint32_t off = 0;
        cl_meta_part_owners o;
        while (cl_meta_owners_next(b, &off, &o))
            total += o.n;
        g->off = em_malloc(sizeof *g->off * (g->parts + 1u));
        g->flags = em_malloc(g->parts);
        g->mov = em_calloc(g->parts, 1);
        g->idx = em_malloc(sizeof *g->idx * (total ? total : 1));
        g->crc = em_calloc(g->parts, sizeof *g->crc);
        if (!g->off || !g->flags || !g->mov || !g->idx || !g->crc)
            return EM_NOMEM;
        off = 0;
        uint32_t p = 0, k = 0;
        while (p < g->parts && cl_meta_owners_next(b, &off, &o)) {
            g->off[p] = k;
            g->flags[p] = o.flags;
            g->crc[p] = cl_meta_owners_row_crc(&o);
            g->nlost += (o.flags & CL_META_OWN_LOST) != 0;
            for (uint32_t i = 0; i < o.n; i++) {
                int m = member_by_order(&r->t, cl_meta_owner_at(&o, i));
                int moving = i >= (uint32_t)(o.n - o.moving);
                if (m >= 0) {
                    g->idx[k++] = (uint16_t)m;
                    g->mov[p] += (uint8_t)moving;
                    g->nmoving += (uint32_t)moving;
                } else {
                    g->flags[p] |= GRP_DROPPED | (i == 0 && !moving ? GRP_PRIMARY_GONE : 0);
                }
            }
            p++;
        }
        for (; p <= g->parts; p++) {
            g->off[p] = k;
            if (p < g->parts)
                g->flags[p] = 0;
        }
    }
    return 0;
}

/* last_host: the host field of the newest member (left ones included:
 * the state keeps their tombstones) with consistent id cid, 0 if none - so
 * an offline baseline node keeps its machine for excludeNeighbors, and the
 * rows of partitions it does not hold do not change when it goes. */
static uint64_t last_host(const cl_meta_fsm *s, const char *cid, size_t len)
{
    uint64_t host = 0, order = 0;
    for (uint32_t i = 0; i < s->n_members; i++) {
        cl_meta_bytes c = cl_meta_member_cid(&s->members[i]);
        if (c.len == len && !memcmp(c.p, cid, len) && s->members[i].order >= order) {
            order = s->members[i].order;
            host = s->members[i].host;
        }
    }
    return host;
}

/* build_baseline copies the state's baseline (duplicates dropped) and marks
 * the members that hold data. */
static int build_baseline(topo_ref *r, const cl_meta_fsm *s)
{
    cl_topo *t = &r->t;
    for (uint32_t i = 0; i < t->n; i++)
        t->m[i].data = s->n_baseline == 0;
    if (!s->n_baseline)
        return 0;
    r->blstr = em_malloc(s->baseline.len + s->n_baseline);
    t->bl = em_calloc(s->n_baseline, sizeof *t->bl);
    r->blm = em_calloc(s->n_baseline, sizeof *r->blm);
    r->blhost = em_calloc(s->n_baseline, sizeof *r->blhost);
    if (!r->blstr || !t->bl || !r->blm || !r->blhost)
        return EM_NOMEM;
    char *o = r->blstr;
    uint32_t off = 0;
    cl_meta_bytes cid;
    while (t->nbl < s->n_baseline && cl_meta_baseline_next(s->baseline, &off, &cid)) {
        memcpy(o, cid.p, cid.len);
        o[cid.len] = 0;
        int dup = 0;
        for (uint32_t j = 0; j < t->nbl && !dup; j++)
            dup = !strcmp(t->bl[j], o);
        if (dup)
            continue;
        uint16_t m = CL_TOPO_NONE;
        for (uint32_t i = 0; i < t->n && m == CL_TOPO_NONE; i++)
            if (!strcmp(t->m[i].cid, o))
                m = (uint16_t)i;
        if (m != CL_TOPO_NONE)
            t->m[m].data = 1;
        r->blhost[t->nbl] = m != CL_TOPO_NONE ? t->m[m].host : last_host(s, o, cid.len);
        r->blm[t->nbl] = m;
        t->bl[t->nbl++] = o;
        o += cid.len + 1;
    }
    return 0;
}

static topo_ref *topo_empty(void)
{
    topo_ref *r = em_calloc(1, sizeof *r);
    if (!r)
        return NULL;
    r->refs = 1;
    r->t.self = -1;
    r->t.state = CL_META_ACTIVE;
    pthread_mutex_init(&r->mu, NULL);
    return r;
}

cl_topo *cl_topo_empty(void)
{
    topo_ref *r = topo_empty();
    return r ? &r->t : NULL;
}

cl_topo *cl_topo_build(const cl_meta_fsm *s, cl_meta_uuid self, _Atomic uint64_t *live_count)
{
    topo_ref *r = topo_empty();
    if (!r)
        return NULL;
    uint32_t live = 0;
    size_t bytes = 0;
    for (uint32_t i = 0; i < s->n_members; i++) {
        const cl_meta_member *m = &s->members[i];
        if (m->state == CL_META_LEFT)
            continue;
        live++;
        bytes += m->cid_len + 1u;
        for (uint32_t k = 0; k < 2; k++)
            bytes += (k < m->n_addrs ? cl_meta_member_addr(m, k).len : 0) + 1u;
    }
    r->index = s->last_index;
    r->t.major = s->major;
    r->t.minor = s->minor;
    r->t.state = s->state;
    r->t.m = live ? em_calloc(live, sizeof *r->t.m) : NULL;
    r->str = bytes ? em_malloc(bytes) : NULL;
    if (live && (!r->t.m || !r->str)) {
        topo_free(r);
        return NULL;
    }
    char *o = r->str;
    uint32_t k = 0;
    for (uint32_t i = 0; i < s->n_members; i++) {
        const cl_meta_member *m = &s->members[i];
        if (m->state == CL_META_LEFT)
            continue;
        cl_topo_member *t = &r->t.m[k];
        t->id = m->id;
        t->raft_id = m->raft_id;
        t->order = m->order;
        t->state = m->state;
        t->host = m->host;
        cl_meta_bytes cid = cl_meta_member_cid(m);
        t->cid = o;
        memcpy(o, cid.p, cid.len);
        o += cid.len;
        *o++ = 0;
        const char **dst[2] = { &t->cluster_addr, &t->thin_addr };
        for (uint32_t a = 0; a < 2; a++) {
            cl_meta_bytes v = a < m->n_addrs ? cl_meta_member_addr(m, a)
                                             : (cl_meta_bytes){ NULL, 0 };
            *dst[a] = o;
            if (v.len)
                memcpy(o, v.p, v.len);
            o += v.len;
            *o++ = 0;
        }
        if (cl_meta_uuid_eq(m->id, self))
            r->t.self = (int)k;
        k++;
    }
    r->t.n = live;
    r->last_exch = s->last_exch;
    if (build_baseline(r, s) || build_groups(r, s)) {
        topo_free(r);
        return NULL;
    }
    if (live_count) {
        r->live = live_count;
        atomic_fetch_add(live_count, 1);
    }
    return &r->t;
}
