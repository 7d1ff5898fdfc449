/* mem.h - the counting allocator: the only place in ember that calls malloc.
 *
 * Every allocation is counted twice: per thread (calls and requested bytes,
 * read around any operation to report B/op and allocs/op exactly) and
 * globally (live bytes and blocks, read by the test runner to catch leaks).
 * A hook makes the Nth allocation from now fail, for out-of-memory tests.
 *
 * Block layout: a 16-byte prefix holding the requested size, then the user's
 * bytes; the prefix keeps free() exact without malloc_usable_size().
 */
#ifndef EM_MEM_H
#define EM_MEM_H

#include <stddef.h>
#include <stdint.h>

void *em_malloc(size_t size);
void *em_calloc(size_t n, size_t size);
void *em_realloc(void *ptr, size_t size);
void  em_free(void *ptr);
char *em_strndup(const char *s, size_t n);
void *em_memdup(const void *p, size_t n);

/* em_mem_stats is a snapshot of the calling thread's counters. */
typedef struct em_mem_stats {
    uint64_t allocs;    /* em_malloc/calloc/realloc calls that returned memory */
    uint64_t bytes;     /* bytes requested by those calls */
    uint64_t frees;
} em_mem_stats;

/* em_mem_thread returns the calling thread's counters since it started. */
em_mem_stats em_mem_thread(void);

/* em_mem_live_bytes / em_mem_live_blocks: memory held now, all threads. */
int64_t em_mem_live_bytes(void);
int64_t em_mem_live_blocks(void);

/* em_mem_fail_after makes the nth allocation from now (1 = the next one) fail,
 * in any thread, then disarms itself unless sticky is set, in which case
 * every later allocation fails too.  n = 0 disarms the hook.
 * em_mem_failures returns how many allocations the hook has failed so far. */
void     em_mem_fail_after(uint64_t n, int sticky);
uint64_t em_mem_failures(void);

/* em_mem_trace_flip turns the allocation trace on or off: built with
 * -DEM_ALLOC_TRACE (make trace), each allocation while on is written with a
 * backtrace to stderr; otherwise it does nothing. */
void     em_mem_trace_flip(void);

#endif
