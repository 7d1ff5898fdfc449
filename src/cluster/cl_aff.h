/* cl_aff.h - affinity: which nodes own which partition of a cache group.
 *
 * Ignite's RendezvousAffinityFunction in its newer 2.x form (Wang/Jenkins
 * 64-bit mix; reference/cluster.md §3.4 has the rule and the test vectors
 * that tests/unit/test_cl_aff.c checks).  Every node computes the same table
 * from the same inputs (the members the metadata group agreed on), so no
 * assignment ever travels: the topology version names it.
 *
 * The table is computed once per (cache group, topology version) into a flat
 * array of node indexes, cl_aff_owners(t, p)[0] being the primary; a lookup on
 * the request path is an index into it, with no allocation.
 */
#ifndef EM_CL_AFF_H
#define EM_CL_AFF_H

#include <stddef.h>
#include <stdint.h>

/* CL_AFF_REPLICATED as backups: every node owns every partition. */
#define CL_AFF_REPLICATED UINT32_MAX

/* Limits that keep a table bounded: Ignite allows 65000 partitions. */
#define CL_AFF_MAX_PARTS 65000u
#define CL_AFF_MAX_NODES 4096u

/* cl_aff_node: what affinity reads of a member.  id is the consistent id
 * (valid UTF-8, checked by whoever admitted the member; its String.hashCode is the node's hash), msb/lsb
 * the node UUID that breaks ties as java.util.UUID.compareTo does, host the
 * neighbourhood: nodes with equal host are neighbours for excludeNeighbors. */
typedef struct cl_aff_node {
    const char *id;
    size_t      id_len;
    uint64_t    msb, lsb;
    uint64_t    host;
} cl_aff_node;

/* cl_aff_table: owners of every partition, primary first.  copies is the
 * row width, backups + 1 capped at the node count; every row is full (with
 * excludeNeighbors and too few hosts the fallback fills it). */
typedef struct cl_aff_table {
    uint32_t  parts;
    uint32_t  copies;
    uint32_t  nodes;
    uint16_t *owner;        /* parts * copies node indexes */
} cl_aff_table;

/* cl_aff_mix: the 64-bit mix of (node hash, partition), exported for tests. */
uint64_t cl_aff_mix(int32_t node_hash, uint32_t part);

/* cl_aff_compute fills t for nodes[0..n) (n in 1..CL_AFF_MAX_NODES), parts in
 * 1..CL_AFF_MAX_PARTS, backups (or CL_AFF_REPLICATED).  Returns 0, EM_INVAL
 * for out-of-range arguments, or EM_NOMEM; t is empty on failure.  Allocates
 * the table and a scratch array once; free with cl_aff_free. */
int  cl_aff_compute(cl_aff_table *t, const cl_aff_node *nodes, uint32_t n,
                    uint32_t parts, uint32_t backups, int exclude_neighbors);
void cl_aff_free(cl_aff_table *t);

/* cl_aff_owners: the row of partition p (p < t->parts). */
static inline const uint16_t *cl_aff_owners(const cl_aff_table *t, uint32_t p)
{
    return t->owner + (size_t)p * t->copies;
}

#endif
