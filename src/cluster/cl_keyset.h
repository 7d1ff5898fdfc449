/* cl_keyset.h - a set of keys (byte strings), for rebalancing: the keys the
 * live stream removed or wrote while a copy loads, and the keys a catching
 * up copy was sent (cl_rebal.c).
 *
 * Keys are stored back to back (u32 length | bytes) in one buffer and found
 * through an open-addressing table of offsets; reset keeps both allocations
 * for the next load.  Bounded: add refuses past CL_KEYSET_MAX keys. */
#ifndef EM_CL_KEYSET_H
#define EM_CL_KEYSET_H

#include <stdint.h>

#include "util/buf.h"

#define CL_KEYSET_MAX (1u << 20)

typedef struct cl_keyset {
    em_buf    keys;
    uint32_t *tab;              /* offset + 1 into keys; 0 = empty */
    uint32_t  cap, cnt;
} cl_keyset;

int  cl_keyset_has(const cl_keyset *s, const uint8_t *k, uint32_t n);
/* cl_keyset_add: 0 (added, or there already), EM_LIMIT or EM_NOMEM. */
int  cl_keyset_add(cl_keyset *s, const uint8_t *k, uint32_t n);
void cl_keyset_reset(cl_keyset *s);
void cl_keyset_free(cl_keyset *s);

#endif
