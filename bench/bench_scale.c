/* bench_scale.c - `ember-bench scale`: store put/get throughput with 1..N
 * threads on one shared cache (issue 3's scaling figure).
 *
 * Keys: ints over a shared key space (default 100 000, all present before
 * timing, so puts overwrite in place); each thread picks keys with its own
 * xorshift generator, so threads collide on partitions only by chance.
 * Value: a 64-byte byte array object.  Each cell runs for --ms milliseconds
 * and prints total op/s, op/s per thread, process CPU ns per op, and the
 * share of wall time x threads the threads actually ran (on a machine shared
 * with other work, CPU/op is the fairer figure).
 */
#include "bench.h"

#include "store/store.h"
#include "util/buf.h"
#include "util/clock.h"
#include "util/mem.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

typedef struct sc_shared {
    st_cache *c;
    uint32_t keys;
    int put;
    uint64_t ms;
    atomic_int go;
    atomic_int ready;
} sc_shared;

typedef struct sc_thread {
    sc_shared *sh;
    int id;
    uint64_t ops;
    int err;
} sc_thread;

static void *sc_worker(void *arg)
{
    sc_thread *t = arg;
    sc_shared *sh = t->sh;
    uint64_t rng = 0x9e3779b97f4a7c15ULL * (uint64_t)(t->id + 7);
    uint8_t k[5], v[69];
    em_buf out = EM_BUF_INIT;
    v[0] = 12;                          /* byte array of 64 */
    em_st32(v + 1, 64);
    memset(v + 5, t->id, 64);
    k[0] = 3;
    if (em_buf_reserve(&out, 128)) {
        t->err = 1;
        return NULL;
    }
    atomic_fetch_add(&sh->ready, 1);
    while (!atomic_load_explicit(&sh->go, memory_order_acquire))
        ;
    uint64_t end = em_now_ns() + sh->ms * 1000000u, ops = 0;
    for (;;) {
        for (int i = 0; i < 1024; i++) {
            rng ^= rng << 13; rng ^= rng >> 7; rng ^= rng << 17;
            em_st32(k + 1, (uint32_t)(rng % sh->keys));
            int rc, found;
            if (sh->put) {
                rc = st_put(sh->c, NULL, k, 5, v, sizeof v);
            } else {
                out.len = 0;
                rc = st_get(sh->c, NULL, k, 5, &out, &found);
            }
            if (rc) {
                t->err = rc;
                goto done;
            }
        }
        ops += 1024;
        if (em_now_ns() >= end)
            break;
    }
done:
    t->ops = ops;
    em_buf_free(&out);
    return NULL;
}

static uint64_t proc_cpu_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

static int sc_cell(st_cache *c, uint32_t keys, int put, int nthreads, uint64_t ms)
{
    sc_shared sh = {c, keys, put, ms, 0, 0};
    sc_thread th[16];
    pthread_t tid[16];
    for (int i = 0; i < nthreads; i++) {
        th[i] = (sc_thread){&sh, i, 0, 0};
        if (pthread_create(&tid[i], NULL, sc_worker, &th[i]))
            return 1;
    }
    while (atomic_load(&sh.ready) < nthreads)
        ;
    uint64_t t0 = em_now_ns(), c0 = proc_cpu_ns();
    atomic_store_explicit(&sh.go, 1, memory_order_release);
    uint64_t total = 0;
    int err = 0;
    for (int i = 0; i < nthreads; i++) {
        pthread_join(tid[i], NULL);
        total += th[i].ops;
        err |= th[i].err;
    }
    double secs = (double)(em_now_ns() - t0) / 1e9;
    double cpu = (double)(proc_cpu_ns() - c0);
    if (err) {
        printf("scale %-4s threads=%d ERROR\n", put ? "put" : "get", nthreads);
        return 1;
    }
    /* cpu-share: CPU the threads got / (wall time x threads); below 1 the
     * machine was busy with other work and op/s understates the store. */
    printf("scale %-4s threads=%d %12.0f op/s %12.0f op/s/thread %8.1f cpu-ns/op  cpu-share %.2f\n",
           put ? "put" : "get", nthreads, (double)total / secs,
           (double)total / secs / nthreads, cpu / (double)total, cpu / 1e9 / secs / nthreads);
    fflush(stdout);
    return 0;
}

static int sc_main(int argc, char **argv)
{
    uint32_t keys = 100000;
    uint64_t ms = 1000;
    int maxt = 2;
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--keys") == 0 && i + 1 < argc)
            keys = (uint32_t)strtoul(argv[++i], NULL, 10);
        else if (strcmp(argv[i], "--ms") == 0 && i + 1 < argc)
            ms = strtoull(argv[++i], NULL, 10);
        else if (strcmp(argv[i], "--threads") == 0 && i + 1 < argc)
            maxt = atoi(argv[++i]);
    }
    if (maxt < 1 || maxt > 16 || keys == 0) {
        fprintf(stderr, "scale: --threads 1..16, --keys > 0\n");
        return 2;
    }
    st_store *s;
    st_cache *c;
    st_cache_config cfg;
    st_cache_config_init(&cfg);
    cfg.name = "scale";
    if (st_open(&s, NULL) || st_cache_create(s, &cfg, &c))
        return 1;
    uint8_t k[5], v[69];
    memset(v, 0, sizeof v);
    v[0] = 12;
    em_st32(v + 1, 64);
    k[0] = 3;
    for (uint32_t i = 0; i < keys; i++) {
        em_st32(k + 1, i);
        if (st_put(c, NULL, k, 5, v, sizeof v)) {
            st_close(s);
            return 1;
        }
    }
    printf("# ember-bench scale: %u keys, 64-byte values, %llu ms per cell; source %s, "
           "load average %s\n", keys, (unsigned long long)ms, bench_source(), bench_loadavg());
    int rc = 0;
    for (int put = 0; put <= 1 && !rc; put++)
        for (int t = 1; t <= maxt && !rc; t++)
            rc = sc_cell(c, keys, put, t, ms);
    st_close(s);
    return rc;
}

BENCH_COMMAND(scale, "scale", "scale [--threads N] [--keys N] [--ms N]  store put/get throughput, 1..N threads",
              sc_main)
