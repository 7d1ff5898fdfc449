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

#ifdef EM_ALLOC_TRACE
/* The trace build (make trace): while on, every allocation writes its size,
 * its thread's name and a backtrace to stderr - what finds the thread and
 * the call behind an allocation that breaks a 0 B/op check. */
#include <execinfo.h>
#include <pthread.h>
#include <stdio.h>
#include <unistd.h>
static _Atomic int trace_on;

void em_mem_trace_flip(void) { atomic_fetch_xor(&trace_on, 1); }

static void trace_alloc(size_t size)
{
    if (!atomic_load_explicit(&trace_on, memory_order_relaxed))
        return;
    void *bt[24];
    int n = backtrace(bt, 24);
    char hdr[96], name[32] = "";
    pthread_getname_np(pthread_self(), name, sizeof name);
    int k = snprintf(hdr, sizeof hdr, "ALLOCTRACE %zu %s\n", size, name);
    (void)!write(2, hdr, (size_t)k);
    backtrace_symbols_fd(bt, n, 2);
}
#else
void em_mem_trace_flip(void) {}
#define trace_alloc(s) ((void)0)
#endif

static void *account(unsigned char *raw, size_t size)
{
    trace_alloc(size);
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
    trace_alloc(size);
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
