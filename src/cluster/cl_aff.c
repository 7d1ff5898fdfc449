/* cl_aff.c - Ignite's rendezvous affinity (reference/cluster.md §3.4).
 *
 * For partition p every node n gets the weight mix64(hash(n) | p << 32); the
 * nodes sorted by weight (signed, ascending), ties broken by node UUID, give
 * the owners: the first is the primary, then backups in order, skipping
 * neighbours of nodes already taken when excludeNeighbors is set, and filling
 * from the sorted order when that leaves the row short.
 */
#include "cluster/cl_aff.h"

#include <stdlib.h>
#include <string.h>

#include "util/err.h"
#include "util/hash.h"
#include "util/mem.h"

/* One node's place in a partition's order. */
typedef struct aff_slot {
    int64_t  w;
    uint64_t msb, lsb;
    uint32_t idx;
} aff_slot;

uint64_t cl_aff_mix(int32_t node_hash, uint32_t part)
{
    uint64_t w = (uint64_t)(uint32_t)node_hash | ((uint64_t)part << 32);
    w = ~w + (w << 21);
    w ^= w >> 24;
    w += (w << 3) + (w << 8);
    w ^= w >> 14;
    w += (w << 2) + (w << 4);
    w ^= w >> 28;
    w += w << 31;
    return w;
}

/* Java's UUID.compareTo compares the two longs as signed values. */
static int slot_cmp(const void *pa, const void *pb)
{
    const aff_slot *a = pa, *b = pb;
    if (a->w != b->w)
        return a->w < b->w ? -1 : 1;
    if (a->msb != b->msb)
        return (int64_t)a->msb < (int64_t)b->msb ? -1 : 1;
    if (a->lsb != b->lsb)
        return (int64_t)a->lsb < (int64_t)b->lsb ? -1 : 1;
    return 0;
}

/* Insertion sort for the common small clusters (no call per comparison
 * beyond the inline one); qsort past that. */
static void slots_sort(aff_slot *s, uint32_t n)
{
    if (n > 32) {
        qsort(s, n, sizeof *s, slot_cmp);
        return;
    }
    for (uint32_t i = 1; i < n; i++) {
        aff_slot x = s[i];
        uint32_t j = i;
        while (j > 0 && slot_cmp(&s[j - 1], &x) > 0) {
            s[j] = s[j - 1];
            j--;
        }
        s[j] = x;
    }
}

/* fill_row picks t->copies owners from the sorted slots. */
static void fill_row(uint16_t *row, uint32_t copies, const aff_slot *s,
                     uint32_t n, const cl_aff_node *nodes, int excl,
                     uint8_t *taken)
{
    uint32_t k = 0;
    if (!excl) {
        for (; k < copies; k++)
            row[k] = (uint16_t)s[k].idx;
        return;
    }
    memset(taken, 0, n);
    row[k++] = (uint16_t)s[0].idx;
    taken[0] = 1;
    for (uint32_t i = 1; i < n && k < copies; i++) {
        int neighbour = 0;
        for (uint32_t j = 0; j < k && !neighbour; j++)
            neighbour = nodes[row[j]].host == nodes[s[i].idx].host;
        if (!neighbour) {
            row[k++] = (uint16_t)s[i].idx;
            taken[i] = 1;
        }
    }
    /* Too few hosts for the backups asked: Ignite then ignores neighbourhood
     * and takes the next nodes of the order, so no copy is silently lost. */
    for (uint32_t i = 1; i < n && k < copies; i++)
        if (!taken[i])
            row[k++] = (uint16_t)s[i].idx;
}

int cl_aff_compute(cl_aff_table *t, const cl_aff_node *nodes, uint32_t n,
                   uint32_t parts, uint32_t backups, int exclude_neighbors)
{
    memset(t, 0, sizeof *t);
    if (n == 0 || n > CL_AFF_MAX_NODES || parts == 0 || parts > CL_AFF_MAX_PARTS)
        return EM_INVAL;
    uint32_t copies = backups >= n - 1 ? n : backups + 1;

    int32_t  *hash = em_malloc(sizeof *hash * n);
    aff_slot *slot = em_malloc(sizeof *slot * n);
    uint8_t  *taken = em_malloc(n);
    uint16_t *owner = em_malloc(sizeof *owner * (size_t)parts * copies);
    if (!hash || !slot || !taken || !owner) {
        em_free(hash); em_free(slot); em_free(taken); em_free(owner);
        return EM_NOMEM;
    }
    for (uint32_t i = 0; i < n; i++)
        hash[i] = em_hash_java_str((const uint8_t *)nodes[i].id, nodes[i].id_len);

    for (uint32_t p = 0; p < parts; p++) {
        for (uint32_t i = 0; i < n; i++) {
            slot[i].w = (int64_t)cl_aff_mix(hash[i], p);
            slot[i].msb = nodes[i].msb;
            slot[i].lsb = nodes[i].lsb;
            slot[i].idx = i;
        }
        slots_sort(slot, n);
        /* REPLICATED: the primary is the first of the order and every other
         * node holds a copy, so neighbourhood does not matter. */
        fill_row(owner + (size_t)p * copies, copies, slot, n, nodes,
                 exclude_neighbors && backups != CL_AFF_REPLICATED, taken);
    }
    em_free(hash);
    em_free(slot);
    em_free(taken);
    t->parts = parts;
    t->copies = copies;
    t->nodes = n;
    t->owner = owner;
    return 0;
}

void cl_aff_free(cl_aff_table *t)
{
    em_free(t->owner);
    memset(t, 0, sizeof *t);
}
