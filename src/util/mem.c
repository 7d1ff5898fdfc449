/* mem.c - counting, fault-injecting allocator (see mem.h for the block layout). */
#include "mem.h"

#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#define PREFIX 16   /* keeps the user pointer 16-byte aligned */

static _Thread_local em_mem_stats tl_stats;
static _Atomic int64_t live_bytes;
static _Atomic int64_t live_blocks;
static _Atomic uint64_t fail_countdown;   /* 0 = hook off */
static _Atomic int fail_sticky;
static _Atomic uint64_t fail_count;

static int should_fail(void)
{
    if (atomic_load_explicit(&fail_countdown, memory_order_relaxed) == 0)
        return 0;
    uint64_t n = atomic_fetch_sub(&fail_countdown, 1);
    if (n == 1) {
        if (atomic_load(&fail_sticky))
            atomic_store(&fail_countdown, 1);  /* next call fails again */
        atomic_fetch_add(&fail_count, 1);
        return 1;
    }
    if (n == 0)                                /* raced with a disarm */
        atomic_store(&fail_countdown, 0);
    return 0;
}

static void *account(unsigned char *raw, size_t size)
{
    memcpy(raw, &size, sizeof size);
    tl_stats.allocs++;
    tl_stats.bytes += size;
    atomic_fetch_add_explicit(&live_bytes, (int64_t)size, memory_order_relaxed);
    atomic_fetch_add_explicit(&live_blocks, 1, memory_order_relaxed);
    return raw + PREFIX;
}

void *em_malloc(size_t size)
{
    if (size > SIZE_MAX - PREFIX || should_fail())
        return NULL;
    unsigned char *raw = malloc(size + PREFIX);
    return raw ? account(raw, size) : NULL;
}

void *em_calloc(size_t n, size_t size)
{
    if (size && n > (SIZE_MAX - PREFIX) / size)
        return NULL;
    size_t total = n * size;
    if (should_fail())
        return NULL;
    unsigned char *raw = calloc(1, total + PREFIX);
    return raw ? account(raw, total) : NULL;
}

void em_free(void *ptr)
{
    if (!ptr)
        return;
    unsigned char *raw = (unsigned char *)ptr - PREFIX;
    size_t size;
    memcpy(&size, raw, sizeof size);
    tl_stats.frees++;
    atomic_fetch_sub_explicit(&live_bytes, (int64_t)size, memory_order_relaxed);
    atomic_fetch_sub_explicit(&live_blocks, 1, memory_order_relaxed);
    free(raw);
}

void *em_realloc(void *ptr, size_t size)
{
    if (!ptr)
        return em_malloc(size);
    if (size > SIZE_MAX - PREFIX || should_fail())
        return NULL;
    unsigned char *raw = (unsigned char *)ptr - PREFIX;
    size_t old;
    memcpy(&old, raw, sizeof old);
    unsigned char *nraw = realloc(raw, size + PREFIX);
    if (!nraw)
        return NULL;
    memcpy(nraw, &size, sizeof size);
    tl_stats.allocs++;
    tl_stats.bytes += size;
    atomic_fetch_add_explicit(&live_bytes, (int64_t)size - (int64_t)old, memory_order_relaxed);
    return nraw + PREFIX;
}

char *em_strndup(const char *s, size_t n)
{
    char *p = em_malloc(n + 1);
    if (p) {
        memcpy(p, s, n);
        p[n] = 0;
    }
    return p;
}

void *em_memdup(const void *p, size_t n)
{
    void *q = em_malloc(n ? n : 1);
    if (q && n)
        memcpy(q, p, n);
    return q;
}

em_mem_stats em_mem_thread(void) { return tl_stats; }
int64_t em_mem_live_bytes(void) { return atomic_load(&live_bytes); }
int64_t em_mem_live_blocks(void) { return atomic_load(&live_blocks); }
uint64_t em_mem_failures(void) { return atomic_load(&fail_count); }

void em_mem_fail_after(uint64_t n, int sticky)
{
    atomic_store(&fail_sticky, sticky);
    atomic_store(&fail_countdown, n);
}
