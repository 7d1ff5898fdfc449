/* sim_lib.h - what the deterministic simulations share: the seeded random
 * source, the first violation kept, the trace digest (one seed replays
 * exactly: the same lines, the same digest) and the command line
 *   NAME [--seeds A:B | --seed N] [--steps K] [-v]
 */
#ifndef EM_SIM_LIB_H
#define EM_SIM_LIB_H

#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "util/hash.h"

typedef struct sim_base {
    uint64_t rng;
    uint64_t trace;                 /* digest of everything that happened */
    int      verbose;
    char     why[256];              /* the first violation */
    unsigned violations;
} sim_base;

static inline void sim_seed(sim_base *b, uint64_t seed, int verbose)
{
    b->rng = seed * 0x9E3779B97F4A7C15ULL + 1;
    b->trace = seed;
    b->verbose = verbose;
    b->why[0] = 0;
    b->violations = 0;
}

static inline uint64_t sim_rnd(sim_base *b)
{
    uint64_t x = b->rng;            /* xorshift64* */
    x ^= x >> 12;
    x ^= x << 25;
    x ^= x >> 27;
    b->rng = x;
    return x * 0x2545F4914F6CDD1DULL;
}

/* sim_violation keeps the first violation's text and counts them all. */
static inline void sim_violation(sim_base *b, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
static inline void sim_violation(sim_base *b, const char *fmt, ...)
{
    if (!b->violations++) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(b->why, sizeof b->why, fmt, ap);
        va_end(ap);
    }
}

/* sim_note folds one trace line into the digest, and prints it with -v
 * (after the simulated time t, when t >= 0). */
static inline void sim_note(sim_base *b, long long t, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static inline void sim_note(sim_base *b, long long t, const char *fmt, ...)
{
    char line[200];
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(line, sizeof line, fmt, ap);
    va_end(ap);
    if (n > 0)
        b->trace = (b->trace ^ em_crc32c(0, line, strlen(line))) * 0x100000001B3ULL;
    if (b->verbose && t >= 0)
        printf("  t=%-8lld %s\n", t, line);
    else if (b->verbose)
        printf("  %s\n", line);
}

/* sim_failed prints a failed seed and how to replay it. */
static inline void sim_failed(const char *name, uint64_t seed, unsigned steps, const sim_base *b)
{
    printf("FAIL seed %llu: %s (%u violations; replay: %s --seed %llu --steps %u -v)\n",
           (unsigned long long)seed, b->why, b->violations, name, (unsigned long long)seed,
           steps);
}

typedef struct sim_args { uint64_t from, to; unsigned steps; int verbose; } sim_args;

/* A simulation: run one seed (0 passed, 1 failed, 2 could not run) and
 * leave its base where base() finds it; done prints the summary line. */
typedef struct sim_def {
    const char *name;
    int       (*run)(uint64_t seed, unsigned steps, int verbose);
    sim_base *(*base)(void);
    void      (*done)(unsigned ran, unsigned steps, unsigned failed);
} sim_def;

static inline int sim_parse(int argc, char **argv, const char *name, sim_args *a);

/* sim_main runs the seeds the command line names: 0 when none failed. */
static inline int sim_main(int argc, char **argv, const sim_def *d)
{
    sim_args a;
    if (sim_parse(argc, argv, d->name, &a))
        return 2;
    unsigned failed = 0, ran = 0;
    for (uint64_t seed = a.from; seed < a.to; seed++) {
        int rc = d->run(seed, a.steps, a.verbose);
        ran++;
        if (rc == 2)
            return 2;
        if (rc) {
            failed++;
            sim_failed(d->name, seed, a.steps, d->base());
        }
    }
    d->done(ran, a.steps, failed);
    return failed ? 1 : 0;
}

/* sim_parse: 0, or 2 after printing the usage. */
static inline int sim_parse(int argc, char **argv, const char *name, sim_args *a)
{
    *a = (sim_args){ 0, 100, 300, 0 };
    for (int i = 1; i < argc; i++) {
        const char *o = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!strcmp(o, "-v")) {
            a->verbose = 1;
        } else if (!strcmp(o, "--seed") && v) {
            a->from = strtoull(v, NULL, 10);
            a->to = a->from + 1;
            i++;
        } else if (!strcmp(o, "--seeds") && v && strchr(v, ':')) {
            a->from = strtoull(v, NULL, 10);
            a->to = strtoull(strchr(v, ':') + 1, NULL, 10);
            i++;
        } else if (!strcmp(o, "--steps") && v) {
            a->steps = (unsigned)strtoul(v, NULL, 10);
            i++;
        } else {
            fprintf(stderr, "usage: %s [--seeds A:B | --seed N] [--steps K] [-v]\n", name);
            return 2;
        }
    }
    setvbuf(stdout, NULL, _IOLBF, 0);  /* a crash keeps the trace so far */
    return 0;
}

#endif
