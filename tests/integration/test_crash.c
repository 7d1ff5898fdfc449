/* test_crash.c - the durability crash test (issue 7): emberd with
 * persistence on, under concurrent PUT load from WRITERS connections, is
 * killed with SIGKILL at random moments and restarted, many times.  Each
 * writer logs every acknowledged key (write(2) per ack, so the log survives
 * the writer); after each restart every acknowledged write of every round so
 * far must be present with its exact value, and each writer's one
 * unacknowledged in-flight write must be fully present or absent.
 * Runs for FSYNC and LOG_ONLY; EMBER_CRASH_KILLS (default 10) kills per mode.
 * EMBER_CRASH_MODE=NONE (or BACKGROUND) runs both tests in that mode instead:
 * they must then fail, which shows the verifier catches lost writes.
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
    int kills = 10;
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
        tc_sleep_ms(30 + rand() % 300);               /* a random moment under load */
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
