/* test_wal_crash.c - kill -9 test of the WAL on the real file system: a child
 * process runs the store with the WAL attached and writer threads that
 * report each acknowledged put through a pipe; the parent SIGKILLs it after a
 * random number of acknowledgements, recovers the directory, and checks every acknowledged write
 * is there with its exact value - FSYNC and LOG_ONLY both promise survival of
 * a process crash (reliability.md §2.5, §3.1 item 3).  The network version
 * (emberd under load) needs the server's persistence flags; see the report. */
#include "test.h"

#include "store/store.h"
#include "util/err.h"
#include "util/mem.h"
#include "wal/wal.h"

#include <pthread.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define CACHE "crash"
#define MAXKEYS 200000

static size_t ikey(uint8_t *b, int32_t v) { b[0] = 3; em_st32(b + 1, (uint32_t)v); return 5; }
static size_t sval(uint8_t *b, int32_t k)
{
    int n = snprintf((char *)b + 5, 48, "acked-%d", k);
    b[0] = 9;
    em_st32(b + 1, (uint32_t)n);
    return 5 + (size_t)n;
}

static int open_node(const char *dir, wal_mode mode, st_store **s, wal **w, st_cache **c)
{
    st_options so = {{"default", 0, 0}};
    int rc = st_open(s, &so);
    if (rc)
        return rc;
    wal_options o;
    memset(&o, 0, sizeof o);
    o.dir = dir;
    o.mode = mode;
    o.segment_bytes = 64 * 1024;       /* small: kills land around segment rolls too */
    if ((rc = wal_open(w, &o)) == 0 && (rc = wal_recover(*w, *s)) == 0 &&
        (rc = wal_attach(*w, *s)) == 0) {
        st_cache_config cfg;
        st_cache_config_init(&cfg);
        cfg.name = (char *)CACHE;
        cfg.partitions = 32;
        rc = st_cache_get_or_create(*s, &cfg, c);
    }
    return rc;
}

typedef struct child_arg { st_cache *c; int fd; int32_t base; } child_arg;

static void *child_writer(void *p)
{
    child_arg *a = p;
    for (int32_t i = 0;; i++) {
        if (i >= MAXKEYS / 2)
            pause();                /* its key range is used up: wait for the kill */
        int32_t k = a->base + i;
        uint8_t kb[5], vb[64];
        if (st_put(a->c, NULL, kb, ikey(kb, k), vb, sval(vb, k)) != 0)
            _exit(3);
        /* only now is the write acknowledged */
        if (write(a->fd, &k, sizeof k) != (ssize_t)sizeof k)
            _exit(4);
    }
    return NULL;
}

static void run_child(const char *dir, wal_mode mode, int fd, int32_t base)
{
    st_store *s = NULL;
    wal *w = NULL;
    st_cache *c = NULL;
    if (open_node(dir, mode, &s, &w, &c))
        _exit(2);
    pthread_t th[2];
    child_arg args[2] = {{c, fd, base}, {c, fd, base + MAXKEYS / 2}};
    pthread_create(&th[0], NULL, child_writer, &args[0]);
    pthread_create(&th[1], NULL, child_writer, &args[1]);
    pthread_join(th[0], NULL);     /* never returns: the parent kills us */
    _exit(5);
}

static void crash_cycles(wal_mode mode, int cycles)
{
    char dir[] = "/tmp/ember-wal-crash-XXXXXX";
    REQUIRE(mkdtemp(dir) != NULL);
    uint8_t *acked = em_calloc(1, (size_t)cycles * MAXKEYS);
    REQUIRE(acked);
    srand((unsigned)time(NULL));
    uint64_t total = 0;
    for (int cy = 0; cy < cycles && !test_failed(); cy++) {
        int pfd[2];
        REQUIRE(pipe(pfd) == 0);
        pid_t pid = fork();
        REQUIRE(pid >= 0);
        if (pid == 0) {
            close(pfd[0]);
            run_child(dir, mode, pfd[1], cy * MAXKEYS);
        }
        close(pfd[1]);
        /* A random moment under load, as a condition: after a random number
         * of acknowledged writes (however busy the machine is). */
        int target = 20 + rand() % (mode == WAL_FSYNC ? 300 : 4000), seen = 0, killed = 0;
        int32_t k;
        for (;;) {
            if (!killed && seen >= target) {
                kill(pid, SIGKILL);
                killed = 1;
            }
            if (read(pfd[0], &k, sizeof k) != (ssize_t)sizeof k)
                break;                  /* the child is gone and the pipe drained */
            seen++;
            if (k >= 0 && k < cycles * MAXKEYS) {
                acked[k] = 1;
                total++;
            }
        }
        if (!killed)
            kill(pid, SIGKILL);
        close(pfd[0]);
        int st;
        waitpid(pid, &st, 0);
        CHECK(WIFSIGNALED(st) && WTERMSIG(st) == SIGKILL);

        /* restart and verify every acknowledged write so far */
        st_store *s = NULL;
        wal *w = NULL;
        st_cache *c = NULL;
        int rc = open_node(dir, mode, &s, &w, &c);
        if (rc) {
            test_fail(__FILE__, __LINE__, "cycle %d: recovery failed: %s (%s)", cy, em_errname(rc),
                      w ? wal_errmsg(w) : "");
        } else {
            em_buf v = EM_BUF_INIT;
            uint8_t kb[5], want[64];
            for (int32_t key = 0; key < (cy + 1) * MAXKEYS; key++) {
                if (!acked[key])
                    continue;
                int found = 0;
                em_buf_reset(&v);
                st_get(c, NULL, kb, ikey(kb, key), &v, &found);
                size_t wl = sval(want, key);
                if (!found || v.len != wl || memcmp(v.p, want, wl)) {
                    test_fail(__FILE__, __LINE__, "cycle %d: acknowledged key %d lost", cy, key);
                    break;
                }
            }
            em_buf_free(&v);
        }
        if (w)
            wal_close(w);
        if (s)
            st_close(s);
    }
    printf("    %s: %d kills, %" PRIu64 " acknowledged writes, all present after each restart\n",
           wal_mode_name(mode), cycles, total);
    CHECK(total > 0);
    em_free(acked);
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
    CHECK_EQ(system(cmd), 0);
}

TEST(wal_crash_sigkill_fsync)
{
    crash_cycles(WAL_FSYNC, 12);
}

TEST(wal_crash_sigkill_log_only)
{
    crash_cycles(WAL_LOG_ONLY, 12);
}
