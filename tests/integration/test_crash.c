/* test_crash.c - the durability crash test (issue 7): emberd with
 * persistence on, under concurrent PUT load from WRITERS connections, is
 * killed with SIGKILL at random moments and restarted, many times.  Each
 * writer logs every acknowledged key (write(2) per ack, so the log survives
 * the writer); after each restart every acknowledged write of every round so
 * far must be present with its exact value, and each writer's one
 * unacknowledged in-flight write must be fully present or absent.
 * Runs for FSYNC and LOG_ONLY; EMBER_CRASH_KILLS (default 10; 5 under ASan,
 * 3 under TSan, which only sees the writer's threads here) kills per mode.
 * EMBER_CRASH_MODE=NONE (or BACKGROUND) runs both tests in that mode instead:
 * they must then fail, which shows the verifier catches lost writes.
 * crash_ckpt_* (below) run every mode through checkpoints and segment rolls
 * under load with kill -9 and SIGTERM cycles.
 */
#include "client.h"
#include "test.h"

#include "util/err.h"
#include "util/mem.h"

#include <dirent.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define WRITERS    8
#define PER_WRITER 1000000
#define PER_ROUND  (WRITERS * PER_WRITER)
#define CACHE      "crash"

/* value_of: the deterministic value of key (so a read proves it is whole). */
static void value_of(int32_t key, char *out, size_t cap)
{
    int n = snprintf(out, cap, "val-%d-", key);
    for (size_t i = (size_t)n; i + 1 < cap && i < 100; i++)
        out[i] = (char)('a' + (key + (int32_t)i) % 26);
    out[cap - 1 < 100 ? cap - 1 : 100] = 0;
}

/* writer: PUTs base, base+1, ... until the connection fails; after each
 * acknowledgement appends the key to fd. */
static void writer(int port, int32_t base, int fd)
{
    tc_conn c;
    if (tc_open(&c, port) != 0)
        _exit(0);
    char v[128];
    for (int32_t k = base; k < base + PER_WRITER; k++) {
        value_of(k, v, sizeof v);
        if (tc_put_int_str(&c, CACHE, k, v) != 0)
            break;
        if (write(fd, &k, sizeof k) != (ssize_t)sizeof k)
            break;
    }
    _exit(0);
}

static long long acks_so_far(const int *fds)
{
    long long n = 0;
    for (int w = 0; w < WRITERS; w++)
        n += lseek(fds[w], 0, SEEK_END) / 4;
    return n;
}

typedef struct round_log { int32_t base[WRITERS]; int32_t acked[WRITERS]; } round_log;

static int start(tc_server *s, const char *dir, const char *mode)
{
    const char *args[] = { "--persistence", "true", "--wal-path", dir, "--wal-mode", mode,
                           "--wal-segment-size", "1m", "--checkpoint-frequency", "700",
                           "--log-level", "error", "--threads", "2", NULL };
    return tc_server_start(s, args);
}

static void crash_test(const char *mode)
{
    const char *force = getenv("EMBER_CRASH_MODE");
    if (force && *force)
        mode = force;
    /* Under a sanitizer (make asan, make tsan) fewer: the recovery path it
     * checks is the same each kill, and make test runs the full count. */
    const char *san = getenv("EM_SANITIZER");
    int kills = !san ? 10 : strcmp(san, "tsan") ? 5 : 3;
    const char *e = getenv("EMBER_CRASH_KILLS");
    if (e && atoi(e) > 0)
        kills = atoi(e);
    char dir[256];
    snprintf(dir, sizeof dir, "/tmp/ember-crash-XXXXXX");
    REQUIRE(mkdtemp(dir) != NULL);
    unsigned seed = (unsigned)time(NULL) ^ (unsigned)getpid();
    srand(seed);
    round_log *logs = em_calloc((size_t)kills, sizeof *logs);
    REQUIRE(logs);
    uint64_t total_acked = 0, inflight_present = 0;
    int failures = 0;

    for (int round = 0; round < kills && !failures; round++) {
        tc_server s;
        REQUIRE_OK(start(&s, dir, mode));
        if (round == 0) {
            tc_conn c;
            REQUIRE_OK(tc_open(&c, s.port));
            REQUIRE_OK(tc_activate(&c));    /* first start with persistence */
            REQUIRE_OK(tc_create_cache(&c, CACHE));
            tc_close(&c);
        }
        pid_t kids[WRITERS];
        int fds[WRITERS];
        for (int w = 0; w < WRITERS; w++) {
            char path[300];
            snprintf(path, sizeof path, "%s/acks-%d-%d", dir, round, w);
            fds[w] = open(path, O_RDWR | O_CREAT | O_TRUNC, 0644);
            REQUIRE(fds[w] >= 0);
            logs[round].base[w] = round * PER_ROUND + w * PER_WRITER;
            kids[w] = fork();
            REQUIRE(kids[w] >= 0);
            if (kids[w] == 0)
                writer(s.port, logs[round].base[w], fds[w]);
        }
        /* a random moment under load: after a random number of acks (a
         * condition, so a busy machine still kills mid-load) */
        long long target = 50 + rand() % 3000;
        int64_t deadline = tc_now_ms() + 60000;
        while (acks_so_far(fds) < target && tc_now_ms() < deadline && tc_server_alive(&s))
            tc_sleep_ms(1);
        kill(s.pid, SIGKILL);
        int st;
        waitpid(s.pid, &st, 0);
        for (int w = 0; w < WRITERS; w++) {
            waitpid(kids[w], &st, 0);
            off_t len = lseek(fds[w], 0, SEEK_END);
            logs[round].acked[w] = (int32_t)(len / 4);
            /* the log holds base, base+1, ... in order */
            int32_t last = -1;
            if (len >= 4 && pread(fds[w], &last, 4, len - 4) == 4)
                CHECK_EQ(last, logs[round].base[w] + logs[round].acked[w] - 1);
            close(fds[w]);
            total_acked += (uint64_t)logs[round].acked[w];
        }

        /* restart and verify every round so far */
        REQUIRE_OK(start(&s, dir, mode));
        tc_conn c;
        REQUIRE_OK(tc_open(&c, s.port));
        char got[128], want[128];
        for (int r = 0; r <= round && !failures; r++) {
            for (int w = 0; w < WRITERS && !failures; w++) {
                int32_t b = logs[r].base[w], a = logs[r].acked[w];
                for (int32_t k = b; k < b + a; k++) {
                    value_of(k, want, sizeof want);
                    int g = tc_get_int_str(&c, CACHE, k, got, sizeof got);
                    if (g != 1 || strcmp(got, want) != 0) {
                        fprintf(stderr, "%s round %d (seed %u): acknowledged key %d %s\n", mode,
                                r, seed, k, g == 1 ? "has a wrong value" : "is missing");
                        failures++;
                        break;
                    }
                }
                /* the in-flight write: whole or absent */
                value_of(b + a, want, sizeof want);
                int g = tc_get_int_str(&c, CACHE, b + a, got, sizeof got);
                if (g == 1 && strcmp(got, want) != 0) {
                    fprintf(stderr, "%s round %d: in-flight key %d is torn\n", mode, r, b + a);
                    failures++;
                } else if (g < 0) {
                    failures++;
                } else if (r == round && g == 1) {
                    inflight_present++;
                }
                /* nothing past it was ever sent */
                CHECK_EQ(tc_get_int_str(&c, CACHE, b + a + 1, got, sizeof got), 0);
            }
        }
        tc_close(&c);
        CHECK_EQ(tc_server_stop(&s), 0);
    }
    CHECK_EQ(failures, 0);
    CHECK(total_acked > 0);
    fprintf(stderr, "  %s: %d kills, %llu acknowledged writes verified, "
            "%llu unacknowledged in-flight writes found present\n", mode, kills,
            (unsigned long long)total_acked, (unsigned long long)inflight_present);
    em_free(logs);
    tc_rm_dir(dir);
}

TEST(crash_sigkill_fsync) { crash_test("FSYNC"); }
TEST(crash_sigkill_log_only) { crash_test("LOG_ONLY"); }

/* ---- checkpoints and segment rolls under load, every mode ----------------
 * emberd checkpoints every 200 ms on 64 KiB segments while WRITERS
 * connections write; each cycle waits until two checkpoints have completed
 * under that load (and a random number of further acks), then stops the
 * server - kill -9 or SIGTERM in turn - and restarts it.  Every mode must
 * start again.  What must be back:
 *   FSYNC, LOG_ONLY, and any mode after a clean stop: every acknowledged
 *     write of every round so far;
 *   BACKGROUND, NONE after kill -9: per writer a prefix of its acknowledged
 *     writes (the log lost only its unflushed tail), which later restarts
 *     keep exactly.
 * EMBER_CRASH_CYCLES (default 3: kill -9, SIGTERM, kill -9) cycles per
 * mode. */

#define CK_MAXROUNDS 64

typedef struct ck_state {
    const char *mode, *dir;
    int strict_mode;                    /* FSYNC / LOG_ONLY */
    int32_t base[CK_MAXROUNDS][WRITERS], acked[CK_MAXROUNDS][WRITERS];
    int32_t kept[CK_MAXROUNDS][WRITERS];  /* -1: not yet checked */
    int clean[CK_MAXROUNDS];            /* the round ended with SIGTERM */
    int starts;
} ck_state;

/* ck_start starts emberd on the state's directory, logging to a fresh file
 * (printed if the start fails, so the refusal is in the test output). */
static int ck_start(ck_state *st, tc_server *s)
{
    char log[300];
    snprintf(log, sizeof log, "%s/emberd-%d.log", st->dir, st->starts++);
    const char *args[] = { "--persistence", "true", "--wal-path", st->dir, "--wal-mode", st->mode,
                           "--wal-segment-size", "64k", "--checkpoint-frequency", "200",
                           "--log-level", "warn", "--log-file", log, "--threads", "2", NULL };
    int rc = tc_server_start(s, args);
    if (rc) {
        char line[512];
        FILE *f = fopen(log, "r");
        while (f && fgets(line, sizeof line, f))
            fprintf(stderr, "    emberd: %s", line);
        if (f)
            fclose(f);
    }
    return rc;
}

/* ckpt_max: the highest checkpoint number in dir, -1 if none. */
static long long ckpt_max(const char *dir)
{
    long long m = -1;
    DIR *d = opendir(dir);
    struct dirent *e;
    while (d && (e = readdir(d)) != NULL) {
        unsigned long long no;
        char tail[8];
        if (sscanf(e->d_name, "ckpt-%16llx.%5s", &no, tail) == 2 && strcmp(tail, "ckpt") == 0 &&
            (long long)no > m)
            m = (long long)no;
    }
    if (d)
        closedir(d);
    return m;
}

/* ck_verify checks every round so far against what must be back. */
static int ck_verify(ck_state *st, int port, int rounds)
{
    tc_conn c;
    if (tc_open(&c, port) != 0)
        return 1;
    char got[128], want[128];
    int failures = 0;
    for (int r = 0; r < rounds && !failures; r++) {
        for (int w = 0; w < WRITERS && !failures; w++) {
            int32_t b = st->base[r][w], a = st->acked[r][w], p = 0;
            /* The present keys: a prefix of the writer's sequence, whole.
             * b + a is the one in flight (present or not), b + a + 1 was
             * never sent. */
            for (; p <= a + 1 && !failures; p++) {
                int g = tc_get_int_str(&c, CACHE, b + p, got, sizeof got);
                value_of(b + p, want, sizeof want);
                if (g < 0 || (g == 1 && (strcmp(got, want) != 0 || p == a + 1))) {
                    fprintf(stderr, "    %s round %d: key %d %s\n", st->mode, r, b + p,
                            g < 0 ? "unreadable" : p > a ? "was never written" : "has a wrong value");
                    failures++;
                }
                if (g != 1)
                    break;
            }
            for (int32_t k = b + p + 1; k <= b + a + 1 && !failures; k++)
                if (tc_get_int_str(&c, CACHE, k, got, sizeof got) != 0) {
                    fprintf(stderr, "    %s round %d: key %d present after missing key %d\n",
                            st->mode, r, k, b + p);
                    failures++;
                }
            if (p > a)
                p = a;                  /* the in-flight write was applied */
            if ((st->strict_mode || st->clean[r]) && p < a) {
                fprintf(stderr, "    %s round %d: acknowledged key %d is missing (%s)\n",
                        st->mode, r, b + p, st->clean[r] ? "after a clean stop" : "after kill -9");
                failures++;
            } else if (st->kept[r][w] >= 0 && p != st->kept[r][w]) {
                fprintf(stderr, "    %s round %d: %d of writer %d's writes were back, now %d\n",
                        st->mode, r, st->kept[r][w], w, p);
                failures++;
            }
            st->kept[r][w] = p;
        }
    }
    tc_close(&c);
    return failures;
}

static void ckpt_cycles(const char *mode)
{
    const char *san = getenv("EM_SANITIZER");  /* 1: a kill -9; 2: and a clean stop */
    int cycles = !san ? 3 : strcmp(san, "tsan") ? 2 : 1;
    const char *e = getenv("EMBER_CRASH_CYCLES");
    if (e && atoi(e) > 0)
        cycles = atoi(e) < CK_MAXROUNDS ? atoi(e) : CK_MAXROUNDS;
    ck_state *st = em_calloc(1, sizeof *st);
    REQUIRE(st);
    char dir[256];
    snprintf(dir, sizeof dir, "/tmp/ember-ckcrash-XXXXXX");
    REQUIRE(mkdtemp(dir) != NULL);
    st->mode = mode;
    st->dir = dir;
    st->strict_mode = strcmp(mode, "FSYNC") == 0 || strcmp(mode, "LOG_ONLY") == 0;
    memset(st->kept, 0xff, sizeof st->kept);
    unsigned seed = (unsigned)time(NULL) ^ (unsigned)getpid();
    srand(seed);
    int failures = 0;
    long long total = 0;
    for (int round = 0; round < cycles && !failures; round++) {
        tc_server s;
        if (ck_start(st, &s) != 0) {
            test_fail(__FILE__, __LINE__, "%s: emberd refused to start before round %d (seed %u)",
                      mode, round, seed);
            break;
        }
        if (round == 0) {
            tc_conn c;
            REQUIRE_OK(tc_open(&c, s.port));
            REQUIRE_OK(tc_activate(&c));    /* first start with persistence: INACTIVE */
            REQUIRE_OK(tc_create_cache(&c, CACHE));
            tc_close(&c);
        }
        pid_t kids[WRITERS];
        int fds[WRITERS];
        for (int w = 0; w < WRITERS; w++) {
            char path[300];
            snprintf(path, sizeof path, "%s/acks-%d-%d", dir, round, w);
            fds[w] = open(path, O_RDWR | O_CREAT | O_TRUNC, 0644);
            REQUIRE(fds[w] >= 0);
            st->base[round][w] = round * PER_ROUND + w * PER_WRITER;
            kids[w] = fork();
            REQUIRE(kids[w] >= 0);
            if (kids[w] == 0)
                writer(s.port, st->base[round][w], fds[w]);
        }
        /* Conditions, not times: writes acknowledged, then two checkpoints
         * completed while they go on, then a random number of further acks
         * (so the stop lands anywhere between checkpoints and rolls). */
        int64_t deadline = tc_now_ms() + 60000;
        long long ck0 = -1, extra = 50 + rand() % 2000, at = 0;
        int phase = 0;
        while (phase < 3 && tc_now_ms() < deadline && tc_server_alive(&s)) {
            long long acks = acks_so_far(fds), ck = ckpt_max(dir);
            if (phase == 0 && acks > 100) {
                ck0 = ck;
                phase = 1;
            } else if (phase == 1 && ck > ck0) {
                ck0 = ck;
                phase = 2;
            } else if (phase == 2 && ck > ck0) {
                at = acks + extra;
                phase = 3;
            }
            tc_sleep_ms(2);
        }
        while (phase == 3 && acks_so_far(fds) < at && tc_now_ms() < deadline)
            tc_sleep_ms(1);
        CHECK_EQ(phase, 3);
        st->clean[round] = round % 2 == 1;
        if (st->clean[round])
            CHECK_EQ(tc_server_stop(&s), 0);
        else
            tc_server_kill9(&s);
        for (int w = 0; w < WRITERS; w++) {
            int ws;
            waitpid(kids[w], &ws, 0);
            st->acked[round][w] = (int32_t)(lseek(fds[w], 0, SEEK_END) / 4);
            total += st->acked[round][w];
            close(fds[w]);
        }
        if (ck_start(st, &s) != 0) {
            test_fail(__FILE__, __LINE__, "%s: emberd refused to restart after round %d (%s, seed %u)",
                      mode, round, st->clean[round] ? "SIGTERM" : "kill -9", seed);
            break;
        }
        failures += ck_verify(st, s.port, round + 1);
        if (failures)
            test_fail(__FILE__, __LINE__, "%s: round %d (%s, seed %u) lost writes", mode, round,
                      st->clean[round] ? "SIGTERM" : "kill -9", seed);
        CHECK_EQ(tc_server_stop(&s), 0);
    }
    fprintf(stderr, "  %s: %d stop/restart cycles across checkpoints, %lld acknowledged writes\n",
            mode, cycles, total);
    CHECK(total > 0);
    if (!test_failed())
        tc_rm_dir(dir);
    else
        fprintf(stderr, "  kept %s for inspection\n", dir);
    em_free(st);
}

TEST(crash_ckpt_fsync) { ckpt_cycles("FSYNC"); }
TEST(crash_ckpt_log_only) { ckpt_cycles("LOG_ONLY"); }
TEST(crash_ckpt_background) { ckpt_cycles("BACKGROUND"); }
TEST(crash_ckpt_none) { ckpt_cycles("NONE"); }
