/* test.h - ember's unit-test framework.
 *
 * TEST(name) { ... } registers a test at load time (no central list to edit).
 * The runner (test.c) runs each test in a forked child with a timeout, checks
 * that the test freed every byte it allocated through em_malloc, and ends with
 * the line "N passed, N failed".  `build/unit-tests foo bar` runs only tests
 * whose name contains foo or bar; EM_TEST_NOFORK=1 runs in-process (for gdb).
 */
#ifndef EM_TEST_H
#define EM_TEST_H

#include <inttypes.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

typedef void (*test_fn)(void);

void test_register(const char *name, const char *file, test_fn fn);
void test_fail(const char *file, int line, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
/* test_skip_leak_check: for tests that deliberately keep global state alive. */
void test_skip_leak_check(void);
/* test_failed: nonzero once the current test has failed a check. */
int  test_failed(void);
/* test_main: runs the registered tests; returns the process exit code. */
int  test_main(int argc, char **argv);

#define TEST(name)                                                         \
    static void test_##name(void);                                         \
    __attribute__((constructor)) static void test_reg_##name(void)         \
    { test_register(#name, __FILE__, test_##name); }                       \
    static void test_##name(void)

/* CHECK records a failure and continues; REQUIRE returns from the test. */
#define CHECK(c) do { if (!(c)) test_fail(__FILE__, __LINE__, "%s", #c); } while (0)
#define REQUIRE(c) do { if (!(c)) { test_fail(__FILE__, __LINE__, "%s", #c); return; } } while (0)
#define CHECK_EQ(a, b) do {                                                  \
        long long a_ = (long long)(a), b_ = (long long)(b);                  \
        if (a_ != b_) test_fail(__FILE__, __LINE__, "%s == %s (%lld != %lld)", #a, #b, a_, b_); \
    } while (0)
#define REQUIRE_EQ(a, b) do {                                                \
        long long a_ = (long long)(a), b_ = (long long)(b);                  \
        if (a_ != b_) { test_fail(__FILE__, __LINE__, "%s == %s (%lld != %lld)", #a, #b, a_, b_); return; } \
    } while (0)
/* CHECK_OK: the expression returns 0; prints the error name otherwise. */
#define CHECK_OK(e) do {                                                     \
        int rc_ = (e);                                                       \
        if (rc_ != 0) test_fail(__FILE__, __LINE__, "%s -> %d (%s)", #e, rc_, em_errname(rc_)); \
    } while (0)
#define REQUIRE_OK(e) do {                                                   \
        int rc_ = (e);                                                       \
        if (rc_ != 0) { test_fail(__FILE__, __LINE__, "%s -> %d (%s)", #e, rc_, em_errname(rc_)); return; } \
    } while (0)
#define CHECK_MEM(a, b, n) do {                                              \
        if (memcmp((a), (b), (n)) != 0) test_fail(__FILE__, __LINE__, "memcmp(%s, %s, %s) != 0", #a, #b, #n); \
    } while (0)

#endif
