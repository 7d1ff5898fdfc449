/* cl_plan.c - the exchange's decisions, as pure functions of a topology and
 * what the members reported (protocol in cl_pme.h, entries in
 * cl_meta_fsm.h).  cl_pme runs them on the coordinator and commits what
 * they return; cl_rebal commits the promotions; the ownership simulation
 * (tests/sim/sim_own.c) runs the same functions under seeded faults.
 */
#include "cluster/cl_plan.h"

#include <string.h>

#include "util/err.h"
#include "util/mem.h"

#define MAX_OWNERS CL_PLAN_MAX_OWNERS

/* The planted bug ember-sim-own must catch (build/plant/ember-sim-own-
 * no_switch): a new primary without a new topology version, so the writes
 * the old one mapped are not fenced. */
#ifdef EM_PLANT_NO_SWITCH
#define PLANT_NO_SWITCH 1
#else
#define PLANT_NO_SWITCH 0
#endif

static int is_owner(const uint32_t *o, uint32_t n, uint32_t who)
{
    for (uint32_t i = 0; i < n; i++)
        if (o[i] == who)
            return 1;
    return 0;
}

cl_plan_group cl_plan_group_of(const st_cache_config *cfg, int32_t id, uint32_t parts)
{
    return (cl_plan_group){ .grp = id, .parts = parts,
                            .backups = cfg->backups > 0 ? (uint32_t)cfg->backups : 0,
                            .replicated = cfg->cache_mode == 1,
                            .loss_policy = (uint8_t)cfg->partition_loss_policy };
}

/* cl_plan_ideal: the group's ideal owners of part on t (primary first). */
uint32_t cl_plan_ideal(cl_topo *t, const cl_plan_group *g, uint32_t part, uint32_t *o)
{
    if (g->replicated)
        return cl_topo_data_nodes(t, o, MAX_OWNERS);
    const cl_aff_table *a = cl_topo_affinity(t, g->parts, g->backups);
    if (!a)
        return 0;
    const uint16_t *row = cl_aff_owners(a, part);
    uint32_t k = 0;
    for (; k < a->copies && row[k] != CL_TOPO_NONE; k++)
        o[k] = row[k];
    return k;
}

uint32_t cl_plan_owners(cl_topo *t, const cl_plan_group *g, uint32_t part, uint32_t *idx,
                        uint32_t max)
{
    if (t->n > 1 && !cl_topo_has_owners(t, g->grp, g->parts))
        return 0;
    return cl_topo_owners(t, g->grp, g->parts, g->backups, g->replicated, part, idx, max);
}

int cl_plan_fenced(cl_topo *t, const cl_plan_group *g, uint32_t part, uint64_t epoch,
                   cl_meta_uuid from)
{
    if (epoch >= (t->major << 32 | t->minor))
        return 0;
    uint32_t idx[1];
    return !(cl_plan_owners(t, g, part, idx, 1) == 1 && cl_meta_uuid_eq(t->m[idx[0]].id, from));
}

/* ---- the single message ---- */

int cl_plan_single_build(cl_topo *t, const cl_plan_group *g, uint32_t ng, cl_meta_uuid self,
                         uint64_t exch, cl_plan_info_fn info, void *arg, em_buf *out)
{
    cl_psingle_group *sg = em_calloc(ng ? ng : 1, sizeof *sg);
    cl_psingle_part **parts = em_calloc(ng ? ng : 1, sizeof *parts);
    int rc = sg && parts ? 0 : EM_NOMEM;
    uint32_t own[MAX_OWNERS];
    for (uint32_t i = 0; i < ng && !rc; i++) {
        parts[i] = em_malloc(sizeof **parts * g[i].parts);
        if (!parts[i]) {
            rc = EM_NOMEM;
            break;
        }
        uint32_t k = 0;
        for (uint32_t part = 0; part < g[i].parts; part++) {
            uint64_t cntr = 0, size = 0;
            int in = info(arg, g[i].grp, part, &cntr, &size);
            if (in < 0)
                break;
            uint32_t no = cl_topo_owners(t, g[i].grp, g[i].parts, g[i].backups,
                                         g[i].replicated, part, own, MAX_OWNERS);
            uint8_t st;
            if (t->self >= 0 && is_owner(own, no, (uint32_t)t->self))
                /* an owner catching up is not OWNING until it caught up */
                st = in == CL_PLAN_BEHIND ? CL_PS_MOVING : CL_PS_OWNING;
            else if (cl_topo_part_lost(t, g[i].grp, part) && size)
                st = CL_PS_LOST;
            else if (size)
                st = CL_PS_RENTING;      /* data here it no longer owns */
            else
                continue;
            /* Initial counter 0: a partition starts empty where it is
             * created, and ember moves none yet.  History: none replayable
             * below the current counter (no historical rebalance yet). */
            parts[i][k++] = (cl_psingle_part){ part, st, cntr, 0, size, cntr };
        }
        sg[i] = (cl_psingle_group){ g[i].grp, g[i].parts, k, parts[i], NULL };
    }
    if (!rc) {
        cl_psingle s = { exch, self, ng, sg };
        em_buf_reset(out);
        rc = cl_psingle_encode(out, &s);
    }
    for (uint32_t i = 0; parts && i < ng; i++)
        em_free(parts[i]);
    em_free(parts);
    em_free(sg);
    return rc;
}

/* ---- the decision ---- */


static int part_cmp(const uint8_t *raw, uint32_t k, uint32_t part, cl_psingle_part *out)
{
    uint32_t lo = 0, hi = k;
    cl_psingle_group g = { 0, 0, k, NULL, raw };
    while (lo < hi) {
        uint32_t mid = lo + (hi - lo) / 2;
        cl_psingle_part x = cl_psingle_part_at(&g, mid);
        if (x.part == part) {
            *out = x;
            return 1;
        }
        if (x.part < part)
            lo = mid + 1;
        else
            hi = mid;
    }
    return 0;
}

/* single_group: member i's group grp in its single message, or NULL. */
static const cl_psingle_group *single_group(const cl_plan_single *v, uint32_t i, int32_t grp)
{
    if (!v[i].ok)
        return NULL;
    const cl_psingle *s = &v[i].s;
    for (uint32_t g = 0; g < s->ngroups; g++)
        if (s->g[g].grp == grp)
            return &s->g[g];
    return NULL;
}

/* reported: what member i said of (grp, part): 1 and *out, or 0. */
static int reported(const cl_plan_single *v, uint32_t i, int32_t grp, uint32_t part, cl_psingle_part *out)
{
    if (!v[i].ok)
        return 0;
    const cl_psingle *s = &v[i].s;
    for (uint32_t g = 0; g < s->ngroups; g++)
        if (s->g[g].grp == grp)
            return part_cmp(s->g[g].raw, s->g[g].k, part, out);
    return 0;
}

#define PLAN_LOST UINT32_MAX

/* short_primary: the ideal order would make primary an owner still
 * catching up with the current one (after a failover, note_behind; or a
 * stream that skipped updates): its single reports counter 0 then
 * (srv_cluster.c), while the primary's is not.  As primary it would stop
 * catching up (it is the reference then), and the updates it lacks -
 * never acknowledged, but held by its backups - would stay on them alone.
 * The switch waits for its report once caught up (cl_plan_promote), or the
 * next exchange.  A lower counter alone says nothing: writes in flight. */
static int short_primary(const cl_plan_single *v, const cl_plan_group *gr, uint32_t part,
                         uint32_t cur, uint32_t next)
{
    cl_psingle_part a, b;
    return cur != next && reported(v, cur, gr->grp, part, &a) && a.cntr &&
           reported(v, next, gr->grp, part, &b) && !b.cntr;
}

/* note_behind: the primary left, and own[0] is its successor with counter
 * best_c.  An owner that reported less missed updates only the old primary
 * had sent, which nobody will send again (the new primary's stream starts
 * afresh).  Under FULL_SYNC those writes were never acknowledged, so the
 * copy stays an owner (it holds every acknowledged write, and losing an
 * owner here would lose them with the next failure); it is told to catch
 * up once the decision is committed (cl_pme_cfg.behind).  So is one whose
 * single did not come in time: nothing says it has what the new primary
 * has (a catch-up of a copy that was whole costs a load, nothing more;
 * the simulation finds such copies left short).  behind gets
 * u32 member | i32 group | u32 partition per such copy. */
static void note_behind(const cl_plan_single *v, const cl_plan_group *gr, uint32_t part, uint64_t best_c,
                        const uint32_t *own, uint32_t n, int differ, em_buf *behind)
{
    for (uint32_t i = 1; i < n; i++) {
        cl_psingle_part x;
        if (!reported(v, own[i], gr->grp, part, &x) || x.cntr < best_c ||
            (differ && x.cntr != best_c)) {
            uint8_t e[12];
            em_st32(e, own[i]);
            em_st32(e + 4, (uint32_t)gr->grp);
            em_st32(e + 8, part);
            (void)em_buf_append(behind, e, sizeof e);
        }
    }
}

/* plan_fresh decides one partition of a group without committed owners:
 * its ideal owners - unless members already hold writes of it.  Before a
 * group's first decision a lone member serves it (cl_plan_owners), and a
 * member may join before that decision commits; its ideal owners then need
 * not be the member holding the writes.  Members that report entries keep
 * it (the highest counter first) and the ideal owners they leave out load
 * it as MOVING copies, as after any other change. */
static uint32_t plan_fresh(cl_topo *t, const cl_plan_group *gr, const cl_plan_single *v,
                           uint32_t part, uint32_t *own, uint32_t *nm)
{
    uint32_t n = 0, idl[MAX_OWNERS];
    uint64_t cn[MAX_OWNERS];
    for (uint32_t i = 0; i < t->n && n < MAX_OWNERS; i++) {
        cl_psingle_part x;
        if (!reported(v, i, gr->grp, part, &x) || !x.size)
            continue;             /* entries, not a counter: a clear counts too */
        uint32_t at = n++;
        while (at && cn[at - 1] < x.cntr) {      /* highest counter first, stable */
            own[at] = own[at - 1];
            cn[at] = cn[at - 1];
            at--;
        }
        own[at] = i;
        cn[at] = x.cntr;
    }
    uint32_t ni = cl_plan_ideal(t, gr, part, idl);
    *nm = 0;
    if (!n) {
        memcpy(own, idl, ni * sizeof *own);
        return ni;
    }
    for (uint32_t i = 0; i < ni && n + *nm < CL_META_MAX_OWNERS; i++)
        if (!is_owner(own, n, idl[i]))
            own[n + (*nm)++] = idl[i];
    return n + *nm;
}

/* plan_part decides one partition of a group that has committed owners:
 * 0 when nothing changes; PLAN_LOST when every owner left; else the count
 * written to own (the owners, primary first, then *nm MOVING members).
 *  - A primary that left is replaced by the surviving owner with the
 *    highest update counter (it holds every write the others hold; ties
 *    keep the committed order); owners behind it catch up (note_behind).
 *    *moved is set when that is not the first surviving owner, which
 *    requests were routed to meanwhile.
 *  - Members the ideal assignment names that hold no copy become MOVING:
 *    they get the partition's writes at once and load its entries from the
 *    primary (cl_rebal); once loaded they own it, and when every ideal
 *    owner does, the partition switches to the ideal order.
 *  - Once every ideal owner owns it, other owners and MOVING copies are
 *    dropped and the ideal order is back (its primary may change: *moved).
 *  - MOVING copies of members that left are dropped; a partition whose
 *    owners all left is lost even if MOVING copies remain (they are not
 *    whole), or starts over on its ideal owners under IGNORE. */
static uint32_t plan_part(cl_topo *t, const cl_plan_group *gr, const cl_plan_single *v, uint32_t part,
                          uint32_t *own, uint32_t *nm, int *moved, em_buf *behind)
{
    uint32_t mov[MAX_OWNERS], idl[MAX_OWNERS];
    uint32_t n = cl_topo_owners(t, gr->grp, gr->parts, gr->backups, gr->replicated, part,
                                own, MAX_OWNERS);
    uint32_t m = cl_topo_moving(t, gr->grp, gr->parts, part, mov, MAX_OWNERS);
    uint32_t ni = cl_plan_ideal(t, gr, part, idl);
    int changed = cl_topo_part_dropped(t, gr->grp, part);
    *moved = 0;
    if (n == 0) {
        if (!changed)
            return 0;
        if (gr->loss_policy != 4)
            return PLAN_LOST;
        *nm = 0;
        return cl_plan_ideal(t, gr, part, own);      /* IGNORE: start over, empty */
    }
    if (changed) {
        uint32_t best = 0;
        uint64_t best_c = 0;
        for (uint32_t i = 0; i < n; i++) {
            cl_psingle_part x;
            uint64_t c = reported(v, own[i], gr->grp, part, &x) ? x.cntr : 0;
            if (i == 0 || c > best_c) {
                best = i;
                best_c = c;
            }
        }
        uint32_t b = own[best];
        memmove(own + 1, own, best * sizeof *own);
        own[0] = b;
        *moved = best != 0;
        if (cl_topo_primary_dropped(t, gr->grp, part))
            note_behind(v, gr, part, best_c, own, n, 0, behind);
    }
    for (uint32_t i = 0; i < ni; i++)
        if (!is_owner(own, n, idl[i]) && !is_owner(mov, m, idl[i]) && m < MAX_OWNERS) {
            mov[m++] = idl[i];
            changed = 1;
        }
    uint32_t whole = 0;
    for (uint32_t i = 0; i < ni; i++)
        whole += is_owner(own, n, idl[i]);
    int ordered = n == ni && !memcmp(own, idl, ni * sizeof *own);
    if (whole == ni && ni && (!ordered || m) && !cl_topo_primary_dropped(t, gr->grp, part) &&
        !short_primary(v, gr, part, own[0], idl[0])) {
        /* Every ideal owner owns it, and others hold copies too (the ideal
         * owners changed once more after the loads were promoted), or in
         * another order (a primary chosen by its counter when the last one
         * left): the ideal owners alone, in the ideal order, as Ignite's
         * assignment is once its owners hold the data. */
        uint32_t p0 = own[0];
        memcpy(own, idl, ni * sizeof *own);
        *moved = own[0] != p0;
        *nm = 0;
        cl_psingle_part x;
        if (*moved && !v[p0].ok && reported(v, own[0], gr->grp, part, &x))
            /* The primary it replaces sent no single (killed, not failed
             * yet: a baseline change without it): its writes in flight
             * reached some owners and not others, and no fence notice
             * will come from it.  Owners that do not hold what the new
             * primary holds catch up with it, ahead or behind. */
            note_behind(v, gr, part, x.cntr, own, ni, 1, behind);
        return ni;
    }
    if (!changed || n + m > CL_META_MAX_OWNERS)
        return 0;
    memcpy(own + n, mov, m * sizeof *mov);
    *nm = m;
    return n + m;
}

int cl_plan_decide(cl_topo *t, const cl_plan_group *g, uint32_t ng, const cl_plan_single *v,
                   uint64_t exch, em_buf *e, em_buf *behind)
{
    cl_meta_owners_enc enc;
    uint32_t own[MAX_OWNERS];
    uint64_t ord[MAX_OWNERS];
    size_t at = e->len;          /* where the entry being built starts */
    int rc = cl_meta_enc_owners_begin(&enc, e, exch);
    int any = 0;
    for (uint32_t gi = 0; gi < ng && !rc; gi++) {
        const cl_plan_group *gr = &g[gi];
        int fresh = !cl_topo_has_owners(t, gr->grp, gr->parts);
        int opened = 0;
        for (uint32_t part = 0; part < gr->parts && !rc; part++) {
            uint32_t n, nm = 0;
            uint8_t flags = 0;
            int moved = 0;
            if (fresh) {
                n = plan_fresh(t, gr, v, part, own, &nm);
            } else if (cl_topo_part_lost(t, gr->grp, part)) {
                continue;                 /* lost stays lost until reset */
            } else if (!(n = plan_part(t, gr, v, part, own, &nm, &moved, behind))) {
                continue;                 /* unchanged */
            } else if (n == PLAN_LOST) {
                n = nm = 0;
                flags = CL_META_OWN_LOST;
            }
            if (!opened) {
                if (cl_meta_enc_owners_size(&enc) > CL_PLAN_ENTRY_SPLIT) {
                    rc = cl_meta_enc_owners_end(&enc);
                    at = e->len;
                    if (!rc)
                        rc = cl_meta_enc_owners_begin(&enc, e, exch);
                }
                if (!rc)
                    rc = cl_meta_enc_owners_group(&enc, gr->grp, gr->parts);
                opened = 1;
                any = 1;
            }
            for (uint32_t i = 0; i < n; i++)
                ord[i] = t->m[own[i]].order;
            if (!rc)
                rc = cl_meta_enc_owners_part(&enc, part, flags, ord, n, nm);
            /* A primary other than the one requests were routed to since
             * the change (the first surviving owner): the topology version
             * moves with it, so writes that one mapped are fenced from now
             * on (cl_repl) rather than taken as the new primary's. */
            if (moved && !PLANT_NO_SWITCH)
                cl_meta_enc_owners_switch(&enc);
        }
    }
    if (!rc && any)
        rc = cl_meta_enc_owners_end(&enc);
    else
        e->len = at;             /* nothing in the last one: drop its start */
    return rc;
}

/* cl_plan_full_map builds the map of the committed exchange on t (which has it). */
int cl_plan_full_map(cl_topo *t, const cl_plan_group *g, uint32_t ng, const cl_plan_single *v,
                    const uint32_t *slot_of, uint64_t exch, em_buf *out)
{
    cl_meta_uuid *ids = em_malloc(sizeof *ids * (t->n ? t->n : 1));
    cl_pmap_group *mg = em_calloc(ng ? ng : 1, sizeof *mg);
    uint8_t **st = em_calloc(ng ? ng : 1, sizeof *st);
    uint64_t **cs = em_calloc(ng ? ng : 1, sizeof *cs);
    cl_pmap_diff **df = em_calloc(ng ? ng : 1, sizeof *df);
    const cl_psingle_group **sg = em_calloc(t->n ? t->n : 1, sizeof *sg);
    int rc = ids && mg && st && cs && df && sg ? 0 : EM_NOMEM;
    for (uint32_t i = 0; i < t->n && !rc; i++)
        ids[i] = t->m[i].id;
    uint32_t own[MAX_OWNERS], idl[MAX_OWNERS];
    for (uint32_t gi = 0; gi < ng && !rc; gi++) {
        const cl_plan_group *gr = &g[gi];
        uint32_t P = gr->parts;
        st[gi] = em_malloc((size_t)t->n * P);
        cs[gi] = em_malloc(sizeof **cs * 2 * P);
        df[gi] = em_malloc(sizeof **df * ((size_t)t->n * P + 1));
        if (!st[gi] || !cs[gi] || !df[gi]) {
            rc = EM_NOMEM;
            break;
        }
        memset(st[gi], CL_PS_NONE, (size_t)t->n * P);
        /* Each member's part of this group, found once (not per partition). */
        for (uint32_t i = 0; i < t->n; i++)
            sg[i] = single_group(v, slot_of[i], gr->grp);
        const cl_aff_table *aff = gr->replicated ? NULL : cl_topo_affinity(t, P, gr->backups);
        uint32_t nd = 0;
        for (uint32_t part = 0; part < P; part++) {
            uint32_t n = cl_topo_owners(t, gr->grp, P, gr->backups, gr->replicated, part, own,
                                        MAX_OWNERS);
            uint32_t ni = 0;
            if (aff) {
                const uint16_t *row = cl_aff_owners(aff, part);
                for (; ni < aff->copies && row[ni] != CL_TOPO_NONE; ni++)
                    idl[ni] = row[ni];
            } else if (gr->replicated) {
                ni = cl_plan_ideal(t, gr, part, idl);
            }
            int lost = cl_topo_part_lost(t, gr->grp, part);
            for (uint32_t i = 0; i < ni; i++)
                st[gi][(size_t)idl[i] * P + part] = lost ? CL_PS_LOST : CL_PS_MOVING;
            uint64_t maxc = 0, size = 0;
            for (uint32_t i = 0; i < n; i++) {
                st[gi][(size_t)own[i] * P + part] = CL_PS_OWNING;
                cl_psingle_part x;
                if (sg[own[i]] && part_cmp(sg[own[i]]->raw, sg[own[i]]->k, part, &x)) {
                    if (x.cntr > maxc)
                        maxc = x.cntr;
                    if (i == 0)
                        size = x.size;
                }
            }
            for (uint32_t i = 0; i < n; i++) {
                cl_psingle_part x;
                uint64_t c = sg[own[i]] && part_cmp(sg[own[i]]->raw, sg[own[i]]->k, part, &x)
                             ? x.cntr : 0;
                if (c != maxc)
                    df[gi][nd++] = (cl_pmap_diff){ own[i], part, c };
            }
            cs[gi][part] = maxc;
            cs[gi][P + part] = size;
        }
        mg[gi] = (cl_pmap_group){ gr->grp, P, nd, st[gi], cs[gi], cs[gi] + P, df[gi] };
    }
    if (!rc) {
        cl_pmap m = { exch, t->major, t->minor, t->n, ids, NULL, ng, mg };
        em_buf_reset(out);
        rc = cl_pmap_encode(out, &m);
    }
    for (uint32_t gi = 0; gi < ng; gi++) {
        if (st)
            em_free(st[gi]);
        if (cs)
            em_free(cs[gi]);
        if (df)
            em_free(df[gi]);
    }
    em_free(st);
    em_free(cs);
    em_free(df);
    em_free(sg);
    em_free(mg);
    em_free(ids);
    return rc;
}

/* ---- rebalancing's promotions, and resets ---- */

int cl_plan_report_current(cl_topo *t, const cl_plan_group *g, cl_meta_uuid sup, uint32_t part)
{
    uint32_t own[MAX_OWNERS];
    uint32_t no = cl_topo_owners(t, g->grp, g->parts, 0, 0, part, own, MAX_OWNERS);
    return no && !cl_topo_primary_dropped(t, g->grp, part) &&
           cl_meta_uuid_eq(t->m[own[0]].id, sup);
}

int cl_plan_promote(cl_topo *t, cl_meta_owners_enc *enc, const cl_plan_group *g,
                    cl_meta_uuid from, cl_meta_uuid sup, uint32_t part,
                    cl_plan_behind_fn behind, void *barg)
{
    uint32_t own[MAX_OWNERS], mv[MAX_OWNERS], idl[MAX_OWNERS];
    uint32_t no = cl_topo_owners(t, g->grp, g->parts, 0, 0, part, own, MAX_OWNERS);
    uint32_t nm = cl_topo_moving(t, g->grp, g->parts, part, mv, MAX_OWNERS);
    int at = -1;
    for (uint32_t k = 0; k < nm; k++)
        if (cl_meta_uuid_eq(t->m[mv[k]].id, from))
            at = (int)k;
    if (no == 0 || cl_topo_part_lost(t, g->grp, part) || !cl_plan_report_current(t, g, sup, part))
        return 0;
    uint32_t ni = cl_plan_ideal(t, g, part, idl);
    if (at < 0) {
        /* An owner that caught up with its primary (a failover's): the
         * ideal order may have waited for it (short_primary). */
        int all = ni > 0 && own[0] != idl[0] && cl_meta_uuid_eq(t->m[idl[0]].id, from);
        for (uint32_t k = 0; k < ni && all; k++)
            all = is_owner(own, no, idl[k]);
        if (!all)
            return 0;
    } else {
        own[no++] = mv[at];
        mv[at] = mv[--nm];
    }
    int all = ni > 0;
    for (uint32_t k = 0; k < ni && all; k++)
        all = is_owner(own, no, idl[k]);
    /* As primary an owner catching up would stop (it is the reference
     * then): the updates it lacks, never acknowledged but held by the
     * others, would stay on them alone (short_primary, the exchange's
     * case of the same rule). */
    if (all && own[0] != idl[0] && behind && behind(barg, t->m[idl[0]].id, g->grp, part))
        all = 0;
    if (all) {
        if (own[0] != idl[0])
            cl_meta_enc_owners_switch(enc);   /* a new primary: clients refetch */
        memcpy(own, idl, ni * sizeof *own);
        no = ni;
        uint32_t keep = 0;
        for (uint32_t k = 0; k < nm; k++)
            if (is_owner(idl, ni, mv[k]))
                mv[keep++] = mv[k];
        nm = keep;
    }
    uint64_t ord[MAX_OWNERS];
    for (uint32_t k = 0; k < no; k++)
        ord[k] = t->m[own[k]].order;
    for (uint32_t k = 0; k < nm; k++)
        ord[no + k] = t->m[mv[k]].order;
    /* One group per report keeps the entry valid whatever the order.  The
     * row applies only over the row it was decided on: an exchange may
     * commit another between this snapshot and this entry (a member added
     * as MOVING, a new primary), which the row built here would undo. */
    int rc = cl_meta_enc_owners_group(enc, g->grp, g->parts);
    if (!rc)
        rc = cl_meta_enc_owners_part_if(enc, part, cl_topo_row_crc(t, g->grp, part), ord,
                                        no + nm, nm);
    return rc ? rc : 1;
}

int cl_plan_reset_lost(cl_topo *t, const cl_plan_group *g, em_buf *e, uint32_t *reset)
{
    cl_meta_owners_enc enc;
    uint32_t own[MAX_OWNERS];
    uint64_t ord[MAX_OWNERS];
    size_t at = e->len;
    *reset = 0;
    int rc = cl_meta_enc_owners_begin(&enc, e, cl_topo_last_exchange(t));
    if (!rc)
        rc = cl_meta_enc_owners_group(&enc, g->grp, g->parts);
    for (uint32_t part = 0; part < g->parts && !rc; part++) {
        if (!cl_topo_part_lost(t, g->grp, part))
            continue;
        uint32_t n = cl_plan_ideal(t, g, part, own);
        for (uint32_t i = 0; i < n; i++)
            ord[i] = t->m[own[i]].order;
        rc = cl_meta_enc_owners_part(&enc, part, 0, ord, n, 0);
        (*reset)++;
    }
    if (!rc && *reset)
        return cl_meta_enc_owners_end(&enc);
    e->len = at;
    return rc;
}
