/* proto_rebal.c - what is left to rebalance on this node (proto.h
 * pr_left_*): /metrics and NODE_INFO (ember-cli cluster) read it.
 *
 * A MOVING copy loads its partition from the primary; the exchange's full
 * map holds every partition's entry count on the primary when the copy was
 * made MOVING.  What the copy still lacks is estimated as that count less
 * what it holds now, per partition this node loads: the live writes it took
 * meanwhile count as loaded, and the primary's count moves after the map,
 * so the figure is Ignite's kind of estimate (its "keys to rebalance left"
 * comes from partition sizes too), exact for a cache nobody writes. */
#include "proto/proto_int.h"

#include "cluster/cl_node.h"
#include "cluster/cl_pmap.h"
#include "cluster/cl_pme.h"
#include "cluster/cl_topo.h"
#include "util/mem.h"

#include <string.h>

#define LEFT_MAX_MOVING 64      /* MOVING copies looked at per partition */

void pr_left_open(pr_server *s, pr_left *l)
{
    memset(l, 0, sizeof *l);
    if (!s->opt.cluster || !s->pme || cl_pme_map_copy(s->pme, &l->buf) != 0)
        return;
    uint32_t cap = cl_pmap_peek_groups(l->buf.p, l->buf.len);
    if (!cap || !(l->g = em_malloc(sizeof *l->g * cap)))
        return;
    l->map.g = l->g;
    l->ok = cl_pmap_decode(l->buf.p, l->buf.len, &l->map, cap) == 0;
}

void pr_left_close(pr_left *l)
{
    em_free(l->g);
    em_buf_free(&l->buf);
    memset(l, 0, sizeof *l);
}

uint64_t pr_left_entries(pr_server *s, pr_left *l, st_cache *sc)
{
    if (!l->ok)
        return 0;
    int32_t id = st_cache_id(sc);
    uint32_t parts = st_cache_parts(sc);
    const cl_pmap_group *g = NULL;
    for (uint32_t i = 0; i < l->map.ngroups && !g; i++)
        if (l->map.g[i].grp == id && l->map.g[i].parts == parts)
            g = &l->map.g[i];
    if (!g)
        return 0;
    uint64_t left = 0;
    cl_topo *t = cl_node_topo_acquire(s->opt.cluster);
    if (t->self >= 0 && cl_topo_moving_count(t, id)) {
        uint32_t mv[LEFT_MAX_MOVING];
        for (uint32_t p = 0; p < parts; p++) {
            uint32_t n = cl_topo_moving(t, id, parts, p, mv, LEFT_MAX_MOVING), here = 0;
            for (uint32_t i = 0; i < n; i++)
                here |= mv[i] == (uint32_t)t->self;
            uint64_t cntr, have;
            if (!here || st_part_info(sc, p, &cntr, &have) != 0)
                continue;
            uint64_t want = cl_pmap_size(g, p);
            left += want > have ? want - have : 0;
        }
    }
    cl_node_topo_release(t);
    return left;
}
