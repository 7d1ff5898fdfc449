/* test.c - the runner behind test.h: fork per test, timeout, leak check. */
#include "test.h"

#include "util/err.h"
#include "util/mem.h"

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

int test_main(int argc, char **argv)
{
    int nofork = getenv("EM_TEST_NOFORK") != NULL;
    int timeout = getenv("EM_TEST_TIMEOUT") ? atoi(getenv("EM_TEST_TIMEOUT")) : 120;
    int passed = 0, failed = 0;
    setvbuf(stdout, NULL, _IOLBF, 0);
    signal(SIGPIPE, SIG_IGN);
    for (int i = 0; i < ntests; i++) {
        if (!selected(tests[i].name, argc, argv))
            continue;
        int bad;
        struct timespec t0, t1;
        clock_gettime(CLOCK_MONOTONIC, &t0);
        if (nofork) {
            bad = run_one(i);
        } else {
            fflush(NULL);
            pid_t pid = fork();
            if (pid == 0) {
                alarm((unsigned)timeout);
                _exit(run_one(i) ? 1 : 0);
            }
            int st = 0;
            waitpid(pid, &st, 0);
            bad = !(WIFEXITED(st) && WEXITSTATUS(st) == 0);
            if (WIFSIGNALED(st))
                fprintf(stderr, "    killed by signal %d%s\n", WTERMSIG(st),
                        WTERMSIG(st) == SIGALRM ? " (timeout)" : "");
        }
        clock_gettime(CLOCK_MONOTONIC, &t1);
        long ms = (long)(t1.tv_sec - t0.tv_sec) * 1000 + (t1.tv_nsec - t0.tv_nsec) / 1000000;
        printf("%s %s (%ld ms)\n", bad ? "FAIL" : "ok  ", tests[i].name, ms);
        /* The suite runner hides ok lines; a slow test stays visible so CI
         * time has a name to it. */
        if (ms >= SLOW_MS)
            printf("  slow: %s %ld.%ld s\n", tests[i].name, ms / 1000, ms % 1000 / 100);
        if (bad) failed++; else passed++;
    }
    printf("%d passed, %d failed\n", passed, failed);
    return failed ? 1 : 0;
}
