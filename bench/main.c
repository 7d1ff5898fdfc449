/* main.c - ember-bench: `micro [NAME...] [--csv] [--cpu]` runs the
 * registered micro-benchmark rows (see bench.h); other commands register
 * themselves.  --cpu times the rounds with this thread's CPU clock instead
 * of the wall clock, so time spent descheduled on a shared machine is not
 * charged to the code (as `ember-bench m4` does); the header says which.
 * Every run names its source first (bench_source): on stdout as a "#"
 * line, or on stderr with --csv so the CSV stays one header and rows. */
#include "bench.h"

#include "util/clock.h"
#include "util/mem.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

#define MAX_ROWS 256
#define MAX_CMDS 16
#define ROUNDS 5

volatile uint64_t bench_sink;
static const bench_row *rows[MAX_ROWS];
static bench_note_fn notes[MAX_ROWS];
static int nrows;
struct bench_cmd { const char *name, *help; bench_cmd_fn fn; };
static struct bench_cmd cmds[MAX_CMDS];
static int ncmds;
static int csv;
static int cpu_clock;   /* --cpu: rounds timed with the thread's CPU clock */

static uint64_t round_clock(void)
{
    if (!cpu_clock)
        return em_now_ns();
    struct timespec ts;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

void bench_register(const bench_row *row)
{
    if (nrows < MAX_ROWS)
        rows[nrows++] = row;
}

void bench_register_note(const bench_row *row, bench_note_fn note)
{
    for (int i = 0; i < nrows; i++)
        if (rows[i] == row)
            notes[i] = note;
}

void bench_register_cmd(const char *name, const char *help, bench_cmd_fn fn)
{
    if (ncmds < MAX_CMDS)
        cmds[ncmds++] = (struct bench_cmd){name, help, fn};
}

/* git_line: the first line git prints for args (stderr dropped), or "". */
static void git_line(const char *args, char *out, size_t n)
{
    char cmd[256];
    out[0] = 0;
    snprintf(cmd, sizeof cmd, "git %s 2>/dev/null", args);
    FILE *f = popen(cmd, "r");
    if (!f)
        return;
    if (!fgets(out, (int)n, f))
        out[0] = 0;
    pclose(f);
    out[strcspn(out, "\n")] = 0;
}

/* binary_stale: 1 if a file git tracks here changed after this binary was
 * built (make's test), so the binary may not be what the tree holds. */
static int binary_stale(void)
{
    struct stat exe, st;
    if (stat("/proc/self/exe", &exe) != 0)
        return 0;
    FILE *f = popen("git ls-files 2>/dev/null", "r");
    if (!f)
        return 0;
    char name[1024];
    int stale = 0;
    while (!stale && fgets(name, sizeof name, f)) {
        name[strcspn(name, "\n")] = 0;
        stale = stat(name, &st) == 0 &&
                (st.st_mtim.tv_sec > exe.st_mtim.tv_sec ||
                 (st.st_mtim.tv_sec == exe.st_mtim.tv_sec &&
                  st.st_mtim.tv_nsec > exe.st_mtim.tv_nsec));
    }
    pclose(f);
    return stale;
}

const char *bench_source(void)
{
    static char src[160];
    if (src[0])
        return src;
    char rev[64], dirty[8];
    git_line("rev-parse --short HEAD", rev, sizeof rev);
    if (!rev[0]) {
        snprintf(src, sizeof src, "unknown (not a git checkout)");
        return src;
    }
    /* any change at all, untracked files included: the build takes every
     * .c under the source folders */
    git_line("status --porcelain", dirty, sizeof dirty);
    snprintf(src, sizeof src, "%s%s%s", rev, dirty[0] ? "-dirty" : "",
             binary_stale() ? " + binary older than the tree's files (run make)" : "");
    return src;
}

const char *bench_loadavg(void)
{
    static char la[64];
    FILE *f = fopen("/proc/loadavg", "r");
    double a, b, c;
    if (f && fscanf(f, "%lf %lf %lf", &a, &b, &c) == 3)
        snprintf(la, sizeof la, "%.2f %.2f %.2f", a, b, c);
    else
        snprintf(la, sizeof la, "?");
    if (f)
        fclose(f);
    return la;
}

int bench_cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

bench_result bench_measure(const bench_row *row)
{
    bench_result r = {0, 0, 0, 0};
    uint64_t n = row->ops_per_round ? row->ops_per_round : 20000;
    void *ctx = row->setup ? row->setup() : NULL;
    if (row->setup && !ctx) {
        r.error = 1;
        return r;
    }
    /* Warm-up, not measured: rounds for at least 20 ms (fills caches, grows
     * reused buffers, and gives the CPU time to leave a low clock after
     * idle - the first row of a run measured up to 1.6x slow without it). */
    for (uint64_t w0 = em_now_ns(), k = 0; k == 0 || em_now_ns() - w0 < 20000000; k++) {
        if (row->fn(ctx, n)) {
            r.error = 1;
            goto out;
        }
    }
    double ns[ROUNDS];
    em_mem_stats m0 = em_mem_thread();
    for (int i = 0; i < ROUNDS; i++) {
        uint64_t t0 = round_clock();
        if (row->fn(ctx, n)) {
            r.error = 1;
            goto out;
        }
        ns[i] = (double)(round_clock() - t0) / (double)n;
    }
    em_mem_stats m1 = em_mem_thread();
    qsort(ns, ROUNDS, sizeof ns[0], bench_cmp_double);
    r.ns_op = ns[ROUNDS / 2];
    r.b_op = (double)(m1.bytes - m0.bytes) / (double)(n * ROUNDS);
    r.allocs_op = (double)(m1.allocs - m0.allocs) / (double)(n * ROUNDS);
out:
    if (row->teardown)
        row->teardown(ctx);
    return r;
}

/* print_row: bench_print with the row's note (may be NULL) before the
 * anchor; CSV rows carry neither. */
static void print_row(const char *bench, const char *row, const char *op,
                      const bench_result *r, const char *note, const char *anchor)
{
    if (csv) {
        /* RFC 4180: a field holding a comma ("TreeMap, 12 entries") is quoted. */
        const char *q = strchr(row, ',') ? "\"" : "";
        if (r->error)
            printf("%s,%s%s%s,%s,error,error,error\n", bench, q, row, q, op);
        else
            printf("%s,%s%s%s,%s,%.1f,%.1f,%.2f\n", bench, q, row, q, op, r->ns_op,
                   r->b_op, r->allocs_op);
        return;
    }
    if (r->error) {
        printf("%-4s %-22s %-12s ERROR\n", bench, row, op);
        return;
    }
    printf("%-4s %-22s %-12s %10.1f ns/op %12.0f op/s %8.1f B/op %6.2f allocs/op%s%s%s%s\n",
           bench, row, op, r->ns_op, r->ns_op > 0 ? 1e9 / r->ns_op : 0.0, r->b_op,
           r->allocs_op, note ? "   " : "", note ? note : "", anchor ? "   anchor: " : "",
           anchor ? anchor : "");
}

void bench_print(const char *bench, const char *row, const char *op,
                 const bench_result *r, const char *anchor)
{
    print_row(bench, row, op, r, NULL, anchor);
}

static int wanted(const char *bench, int argc, char **argv)
{
    int any = 0;
    for (int i = 0; i < argc; i++) {
        if (argv[i][0] == '-')
            continue;
        any = 1;
        if (strcmp(argv[i], "all") == 0 || strcmp(argv[i], bench) == 0)
            return 1;
    }
    return !any;
}

static int micro(int argc, char **argv)
{
    int failed = 0;
    for (int i = 0; i < argc; i++) {
        if (strcmp(argv[i], "--csv") == 0)
            csv = 1;
        else if (strcmp(argv[i], "--cpu") == 0)
            cpu_clock = 1;
    }
    fprintf(csv ? stderr : stdout, "# ember-bench micro: source %s, load average %s, %s clock\n",
            bench_source(), bench_loadavg(), cpu_clock ? "thread CPU" : "wall");
    if (csv)
        printf("bench,row,op,ns_op,b_op,allocs_op\n");
    for (int i = 0; i < nrows; i++) {
        if (!wanted(rows[i]->bench, argc, argv))
            continue;
        bench_result r = bench_measure(rows[i]);
        failed |= r.error;
        char note[256] = "";
        if (notes[i] && !r.error)
            notes[i](&r, note, sizeof note);
        print_row(rows[i]->bench, rows[i]->row, rows[i]->op, &r, note[0] ? note : NULL,
                  rows[i]->anchor);
        fflush(stdout);
    }
    return failed;
}

static void usage(void)
{
    fprintf(stderr, "usage: ember-bench micro [m1|m2|...|all] [--csv] [--cpu]\n");
    for (int i = 0; i < ncmds; i++)
        fprintf(stderr, "       ember-bench %s\n", cmds[i].help);
}

int main(int argc, char **argv)
{
    if (argc < 2) {
        usage();
        return 2;
    }
    if (strcmp(argv[1], "micro") == 0)
        return micro(argc - 2, argv + 2);
    for (int i = 0; i < ncmds; i++)
        if (strcmp(argv[1], cmds[i].name) == 0)
            return cmds[i].fn(argc - 1, argv + 1);
    usage();
    return 2;
}
