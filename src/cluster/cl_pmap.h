/* cl_pmap.h - the partition map exchange's messages: partition states, the
 * single message (one node's local partitions, to the coordinator) and the
 * full map (every node's states and the partitions' counters, from the
 * coordinator), and their byte layouts (reference/cluster.md §3.5).
 *
 * Both messages travel compressed (cl_zip.h): the encoded bytes below are
 * what is deflated.  Decoders validate every length and count against the
 * bytes present and the limits here, allocate nothing and return views into
 * the (inflated) bytes; a malformed message is an error code, never an
 * out-of-bounds read.
 *
 * Full map, encoded (all integers little-endian):
 *
 *   offset  size        field
 *   0       4           magic "EMPF"
 *   4       8           exchange id
 *   12      8           topology major version
 *   20      4           topology minor version
 *   24      4           nodes n (1..CL_PMAP_MAX_NODES)
 *   28      4           groups g (0..CL_PMAP_MAX_GROUPS)
 *   32      16 n        node ids (uuid msb, lsb), in the order states use
 *   ..      per group:
 *           4           group id
 *           4           partitions P (1..CL_PMAP_MAX_PARTS)
 *           4           diffs d (0..n x P): per-node counters that differ
 *           n P         state[node][P]: CL_PS_* per node, node-major
 *           8 P         counter[P]: the partition's update counter (owners')
 *           8 P         size[P]: entries in the partition (primary's count)
 *           16 d        diffs: u32 node index | u32 partition | u64 counter
 *
 * Single message, encoded:
 *
 *   0       4           magic "EMPS"
 *   4       8           exchange id it answers
 *   12      16          node id
 *   28      4           groups g (0..CL_PMAP_MAX_GROUPS)
 *   ..      per group:
 *           4           group id
 *           4           partitions P of the group (1..CL_PMAP_MAX_PARTS)
 *           4           local partitions k (0..P)
 *           37 k        per local partition, ascending: u32 partition |
 *                       u8 state | u64 update counter | u64 initial counter |
 *                       u64 size | u64 counter its log can replay from
 */
#ifndef EM_CL_PMAP_H
#define EM_CL_PMAP_H

#include <stddef.h>
#include <stdint.h>

#include "cluster/cl_meta_fsm.h"
#include "util/buf.h"

/* Partition states, in Ignite's GridDhtPartitionState ordinal order; NONE
 * (not on the wire in Ignite, which leaves such partitions out) marks a node
 * that holds no copy of the partition. */
enum cl_part_state {
    CL_PS_MOVING = 0, CL_PS_OWNING = 1, CL_PS_RENTING = 2, CL_PS_EVICTED = 3,
    CL_PS_LOST = 4, CL_PS_NONE = 5
};
#define CL_PS_COUNT 6

/* cl_ps_name: "MOVING", ... "NONE"; "?" for anything else. */
const char *cl_ps_name(int state);

#define CL_PMAP_MAX_NODES  4096u
#define CL_PMAP_MAX_GROUPS 65536u
#define CL_PMAP_MAX_PARTS  65536u
#define CL_PMAP_HDR        32u
#define CL_PMAP_GRP_HDR    12u
#define CL_PMAP_DIFF       16u
#define CL_PSINGLE_HDR     32u
#define CL_PSINGLE_GRP_HDR 12u
#define CL_PSINGLE_PART    37u

/* ---- the full map ------------------------------------------------------ */

typedef struct cl_pmap_diff { uint32_t node, part; uint64_t cntr; } cl_pmap_diff;

/* One group of a full map.  To encode: state, cntr, size and diff point to
 * the caller's arrays.  Decoded: they point into the encoded bytes (state is
 * bytes; cntr, size and diff are unaligned little-endian: read them with
 * cl_pmap_cntr / cl_pmap_size / cl_pmap_diff_at). */
typedef struct cl_pmap_group {
    int32_t        grp;
    uint32_t       parts;
    uint32_t       ndiff;
    const uint8_t *state;    /* nodes x parts */
    const void    *cntr;     /* parts x u64 */
    const void    *size;     /* parts x u64 */
    const void    *diff;     /* encode: cl_pmap_diff[ndiff]; decoded: ndiff x 16 bytes */
} cl_pmap_group;

typedef struct cl_pmap {
    uint64_t            exch_id;
    uint64_t            major;
    uint32_t            minor;
    uint32_t            nodes;
    const cl_meta_uuid *node;      /* encode: nodes ids; decoded: NULL, use cl_pmap_node */
    const uint8_t      *node_raw;  /* decoded: 16 x nodes bytes */
    uint32_t            ngroups;
    cl_pmap_group      *g;         /* encode: ngroups; decoded: see cl_pmap_decode */
} cl_pmap;

/* cl_pmap_size_of: the encoded size of m (for sizing one buffer exactly). */
size_t cl_pmap_size_of(const cl_pmap *m);

/* cl_pmap_encode appends m's encoding to out in one pass (reserving
 * cl_pmap_size_of(m) first): 0, EM_NOMEM, or EM_RANGE for counts over the
 * limits. */
int cl_pmap_encode(em_buf *out, const cl_pmap *m);

/* cl_pmap_decode validates p[0..n) whole and fills m as a view: m->g must
 * point to room for cap groups (a receiver keeps one array and grows it from
 * cl_pmap_peek_groups).  0, EM_PROTO (magic), EM_TRUNCATED, EM_TRAILING,
 * EM_RANGE (a count over its limit or over cap, a state over CL_PS_NONE, a
 * diff naming a node or partition out of range). */
int cl_pmap_decode(const uint8_t *p, size_t n, cl_pmap *m, uint32_t cap);

/* cl_pmap_peek_groups: the group count a well-formed header announces, so a
 * receiver can size its array (0 if the header is short or bad, or announces
 * more groups than n bytes can hold). */
uint32_t cl_pmap_peek_groups(const uint8_t *p, size_t n);

static inline uint64_t cl_pmap_cntr(const cl_pmap_group *g, uint32_t part)
{
    return em_ld64((const uint8_t *)g->cntr + 8u * part);
}
static inline uint64_t cl_pmap_size(const cl_pmap_group *g, uint32_t part)
{
    return em_ld64((const uint8_t *)g->size + 8u * part);
}
static inline uint8_t cl_pmap_state(const cl_pmap *m, const cl_pmap_group *g, uint32_t node,
                                    uint32_t part)
{
    (void)m;
    return g->state[(size_t)node * g->parts + part];
}
cl_pmap_diff cl_pmap_diff_at(const cl_pmap_group *g, uint32_t i);
cl_meta_uuid cl_pmap_node(const cl_pmap *m, uint32_t i);

/* ---- the single message ------------------------------------------------ */

typedef struct cl_psingle_part {
    uint32_t part;
    uint8_t  state;
    uint64_t cntr, init_cntr, size, hist_cntr;
} cl_psingle_part;

/* One group of a single message.  To encode: p points to k parts.  Decoded:
 * raw points at the k x 37 bytes; read them with cl_psingle_part_at. */
typedef struct cl_psingle_group {
    int32_t                grp;
    uint32_t               parts;
    uint32_t               k;
    const cl_psingle_part *p;
    const uint8_t         *raw;
} cl_psingle_group;

typedef struct cl_psingle {
    uint64_t          exch_id;
    cl_meta_uuid      node;
    uint32_t          ngroups;
    cl_psingle_group *g;
} cl_psingle;

size_t cl_psingle_size_of(const cl_psingle *s);
int    cl_psingle_encode(em_buf *out, const cl_psingle *s);
/* cl_psingle_decode: as cl_pmap_decode (partitions must ascend, each < P). */
int    cl_psingle_decode(const uint8_t *p, size_t n, cl_psingle *s, uint32_t cap);
uint32_t cl_psingle_peek_groups(const uint8_t *p, size_t n);
cl_psingle_part cl_psingle_part_at(const cl_psingle_group *g, uint32_t i);

#endif
