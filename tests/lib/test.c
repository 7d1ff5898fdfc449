/* test.c - the runner behind test.h: fork per test, timeout, leak check. */
#include "test.h"

#include "util/err.h"
#include "util/mem.h"

#include <errno.h>
#include <signal.h>
#include <stdarg.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define MAX_TESTS 4096
#define SLOW_MS   4000   /* a test this long also prints a "slow:" line */

struct test_entry { const char *name, *file; test_fn fn; };
static struct test_entry tests[MAX_TESTS];
static int ntests;
static int cur_failed;
static int skip_leaks;

void test_register(const char *name, const char *file, test_fn fn)
{
    if (ntests < MAX_TESTS)
        tests[ntests++] = (struct test_entry){name, file, fn};
}

void test_fail(const char *file, int line, const char *fmt, ...)
{
    char msg[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    fprintf(stderr, "    %s:%d: check failed: %s\n", file, line, msg);
    cur_failed = 1;
}

void test_skip_leak_check(void) { skip_leaks = 1; }
int test_failed(void) { return cur_failed; }

static int run_one(int i)
{
    cur_failed = 0;
    skip_leaks = 0;
    int64_t bytes0 = em_mem_live_bytes(), blocks0 = em_mem_live_blocks();
    tests[i].fn();
    int64_t db = em_mem_live_bytes() - bytes0, dk = em_mem_live_blocks() - blocks0;
    if (!skip_leaks && (db != 0 || dk != 0)) {
        fprintf(stderr, "    leak: %lld bytes in %lld blocks not freed\n",
                (long long)db, (long long)dk);
        cur_failed = 1;
    }
    return cur_failed;
}

static int selected(const char *name, int argc, char **argv)
{
    if (argc <= 1)
        return 1;
    for (int k = 1; k < argc; k++)
        if (strstr(name, argv[k]))
            return 1;
    return 0;
}

/* A test that ran in a child: its pid, start time and captured output. */
typedef struct child { pid_t pid; int i; FILE *out; struct timespec t0; } child;

static long ms_since(const struct timespec *t0)
{
    struct timespec t1;
    clock_gettime(CLOCK_MONOTONIC, &t1);
    return (long)(t1.tv_sec - t0->tv_sec) * 1000 + (t1.tv_nsec - t0->tv_nsec) / 1000000;
}

/* report prints one finished test: its captured output, then its line. */
static void report(int i, int bad, long ms, FILE *out)
{
    if (out) {
        char buf[4096];
        size_t k;
        rewind(out);
        while ((k = fread(buf, 1, sizeof buf, out)) > 0)
            fwrite(buf, 1, k, stdout);
        fclose(out);
    }
    printf("%s %s (%ld ms)\n", bad ? "FAIL" : "ok  ", tests[i].name, ms);
    /* The suite runner hides ok lines; a slow test stays visible so CI
     * time has a name to it. */
    if (ms >= SLOW_MS)
        printf("  slow: %s %ld.%ld s\n", tests[i].name, ms / 1000, ms % 1000 / 100);
}

/* reap waits for one running child and reports it: 1 if it failed, 0 if
 * it passed, -1 for a child not in run (counted neither way). */
static int reap(child *run, int *nrun)
{
    int st = 0;
    pid_t pid;
    while ((pid = waitpid(-1, &st, 0)) < 0 && errno == EINTR)
        ;
    if (pid < 0) {
        perror("waitpid");          /* children reaped elsewhere: no results */
        exit(1);
    }
    for (int k = 0; k < *nrun; k++) {
        if (run[k].pid != pid)
            continue;
        int bad = !(WIFEXITED(st) && WEXITSTATUS(st) == 0);
        fflush(run[k].out);
        if (WIFSIGNALED(st))
            fprintf(run[k].out, "    killed by signal %d%s\n", WTERMSIG(st),
                    WTERMSIG(st) == SIGALRM ? " (timeout)" : "");
        report(run[k].i, bad, ms_since(&run[k].t0), run[k].out);
        run[k] = run[--*nrun];
        return bad;
    }
    return -1;                      /* not one of ours (cannot happen) */
}

/* Tests run in forked children, EM_TEST_JOBS (default 3) at a time: most
 * of the suite's time is spent waiting (timers, peers, fsync), not on the
 * CPU, so a few at once cut its wall time without crowding two cores.  A
 * child's output goes to a file and is printed, whole, once it ends. */
int test_main(int argc, char **argv)
{
    int nofork = getenv("EM_TEST_NOFORK") != NULL;
    int timeout = getenv("EM_TEST_TIMEOUT") ? atoi(getenv("EM_TEST_TIMEOUT")) : 120;
    int jobs = getenv("EM_TEST_JOBS") ? atoi(getenv("EM_TEST_JOBS")) : 3;
    if (jobs < 1)
        jobs = 1;
    if (jobs > 16)
        jobs = 16;                  /* the size of run[] */
    int passed = 0, failed = 0;
    child run[16];
    int nrun = 0;
    setvbuf(stdout, NULL, _IOLBF, 0);
    signal(SIGPIPE, SIG_IGN);
    for (int i = 0; i <= ntests; i++) {
        if (i < ntests && !selected(tests[i].name, argc, argv))
            continue;
        /* Room for the next test (or, past the last, every child done). */
        while (nrun > 0 && (nrun >= jobs || i == ntests)) {
            int r = reap(run, &nrun);
            failed += r == 1;
            passed += r == 0;
        }
        if (i == ntests)
            break;
        struct timespec t0;
        clock_gettime(CLOCK_MONOTONIC, &t0);
        if (nofork) {
            int bad = run_one(i);
            report(i, bad, ms_since(&t0), NULL);
            if (bad) failed++; else passed++;
            continue;
        }
        FILE *out = tmpfile();
        if (!out) {
            perror("tmpfile");
            return 1;
        }
        fflush(NULL);
        pid_t pid = fork();
        if (pid == 0) {
            dup2(fileno(out), 1);
            dup2(fileno(out), 2);
            alarm((unsigned)timeout);
            int bad = run_one(i);
            fflush(NULL);
            _exit(bad ? 1 : 0);
        }
        if (pid < 0) {
            perror("fork");
            fclose(out);
            return 1;
        }
        run[nrun++] = (child){ pid, i, out, t0 };
    }
    printf("%d passed, %d failed\n", passed, failed);
    return failed ? 1 : 0;
}
