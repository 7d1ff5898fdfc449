/* cl_pset.h - a set of (cache, partition) pairs kept in a file, replaced
 * whole and durably (written to a temporary file, synced, renamed over,
 * the directory synced).  Rebalancing keeps in one the partitions whose
 * copy on disk may be incomplete (cl_rebal.c): a load applied part of it,
 * and no checkpoint since took the whole.
 *
 * File: "EMPS" | u32 version 1 | u32 count | count x (i32 cache | u32 part)
 * | u32 CRC-32C of what precedes. */
#ifndef EM_CL_PSET_H
#define EM_CL_PSET_H

#include <stdint.h>

typedef struct cl_pset_item { int32_t cache; uint32_t part; } cl_pset_item;

#define CL_PSET_MAX 65536u            /* pairs a file holds, at most */

/* cl_pset_load reads path into a new array (*out, em_free it; *n pairs).
 * EM_NOTFOUND when there is no file, EM_CORRUPT when it is not one
 * (truncated, a bad checksum, more than CL_PSET_MAX pairs), EM_IO, EM_NOMEM. */
int cl_pset_load(const char *path, cl_pset_item **out, uint32_t *n);
/* cl_pset_save replaces path with the n pairs; 0 once durable, or EM_IO /
 * EM_NOMEM / EM_INVAL (n over CL_PSET_MAX). */
int cl_pset_save(const char *path, const cl_pset_item *v, uint32_t n);

#endif
