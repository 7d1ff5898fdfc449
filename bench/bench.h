/* bench.h - ember-bench's micro-benchmark harness.
 *
 * A benchmark file registers rows with BENCH_ROW(bench, row, op, fn, ctx-setup):
 * the harness warms up, then runs 5 rounds of `ops` calls (20 000 by default),
 * and prints the median ns/op with B/op and allocs/op read exactly from the
 * counting allocator around the measured rounds (../shared/BENCHMARKS.md).
 * Output: a human table, or CSV with --csv under the header
 * bench,row,op,ns_op,b_op,allocs_op.
 */
#ifndef EM_BENCH_H
#define EM_BENCH_H

#include <stddef.h>
#include <stdint.h>

/* One measured operation: called `n` times per round with the row's context.
 * Returning nonzero aborts the row (reported as an error, never as a figure). */
typedef int (*bench_op_fn)(void *ctx, uint64_t n);

/* Result of one row, for benchmarks that post-process (ratios etc). */
typedef struct bench_result {
    double ns_op, b_op, allocs_op;
    int error;
} bench_result;

typedef struct bench_row {
    const char *bench;    /* "m1", "m2", ... */
    const char *row;      /* "empty HashMap", "1 variant", ... */
    const char *op;       /* "toBinary", "cache.put", ... */
    const char *anchor;   /* the seed's figure, printed beside ours (may be NULL) */
    bench_op_fn fn;
    void *(*setup)(void); /* builds the context (not measured); may be NULL */
    void (*teardown)(void *ctx);
    uint64_t ops_per_round;  /* 0 = default 20 000 */
} bench_row;

void bench_register(const bench_row *row);

/* A row's note: after the row is measured, a few words printed before the
 * anchor (sizes, a ratio to an earlier row); not in CSV. */
typedef void (*bench_note_fn)(const bench_result *r, char *buf, size_t cap);
void bench_register_note(const bench_row *row, bench_note_fn note);


/* bench_measure runs one row now and returns its figures without printing. */
bench_result bench_measure(const bench_row *row);

/* bench_print prints one result line in the current output mode. */
void bench_print(const char *bench, const char *row, const char *op,
                 const bench_result *r, const char *anchor);

/* bench_cmp_double: qsort comparator for medians of doubles. */
int bench_cmp_double(const void *a, const void *b);

/* bench_source: what the figures were measured on, for every header a
 * table may be copied from: "<commit>" when the working tree has no
 * changes, "<commit>-dirty" when it has (tracked or untracked files, so a
 * table cannot claim a commit it was not built from), "+ binary older
 * than the tree's files" when a tracked file changed after this binary was
 * built (make's test: the binary may not be what the tree holds), or
 * "unknown" outside a git checkout.  Read from git in the current
 * directory at the first call (the repository root under `make bench`). */
const char *bench_source(void);
/* bench_loadavg: /proc/loadavg's 1/5/15-minute figures now, or "?". */
const char *bench_loadavg(void);

/* BENCH_REGISTER_NOTE(id, note, {row}): a row with a note. */
#define BENCH_REGISTER_NOTE(id, note, ...)                                 \
    __attribute__((constructor)) static void bench_reg_##id(void)          \
    {                                                                      \
        static const bench_row r_ = __VA_ARGS__;                           \
        bench_register(&r_);                                               \
        bench_register_note(&r_, note);                                    \
    }

/* A prevent-optimisation sink. */
extern volatile uint64_t bench_sink;

#define BENCH_REGISTER(id, ...)                                            \
    __attribute__((constructor)) static void bench_reg_##id(void)          \
    {                                                                      \
        static const bench_row r_ = __VA_ARGS__;                           \
        bench_register(&r_);                                               \
    }

/* Commands other than `micro` (e.g. `load`) register here. */
typedef int (*bench_cmd_fn)(int argc, char **argv);
void bench_register_cmd(const char *name, const char *help, bench_cmd_fn fn);

#define BENCH_COMMAND(id, name, help, fn)                                  \
    __attribute__((constructor)) static void bench_cmd_##id(void)          \
    { bench_register_cmd(name, help, fn); }

#endif
