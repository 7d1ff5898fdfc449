/* replay_main.c - runs stored inputs through a fuzz target without libFuzzer,
 * so `make test` and `make asan` check the corpus (tests/fuzz/corpus/<target>/)
 * under ASan + UBSan: the Makefile builds replay/<target> in the ASan build.
 *
 * Usage: replay/<target> DIR|FILE...  Each input runs in a forked child
 * (sorted by name, with a timeout), so a crash, a sanitizer report or a leak
 * in one input is reported with its file name and the rest still run.  The
 * whole replay is ONE test: "ok   <target>: N inputs", or a FAIL line per bad
 * input; last line "1 passed, 0 failed" or "0 passed, 1 failed".  A path that
 * does not exist, an unreadable file and a replay of no inputs at all fail.
 * EM_REPLAY_TIMEOUT: seconds per input (default 60). */
#include <dirent.h>
#include <errno.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static int ninputs, nbad;
static unsigned timeout_s = 60;

static void bad(const char *path, const char *why)
{
    printf("FAIL %s: %s\n", path, why);
    nbad++;
}

/* run_child: in the child, read the whole file and hand it to the target.
 * Returns normally so the sanitizers' exit-time checks (leaks) run. */
static int run_child(const char *path)
{
    FILE *f = fopen(path, "rb");
    if (!f) {
        fprintf(stderr, "%s: %s\n", path, strerror(errno));
        return 2;
    }
    size_t cap = 4096, n = 0;
    uint8_t *buf = malloc(cap);
    for (size_t got; buf && (got = fread(buf + n, 1, cap - n, f)) > 0;) {
        n += got;
        if (n == cap) {
            uint8_t *nb = realloc(buf, cap *= 2);
            if (!nb)
                free(buf);
            buf = nb;
        }
    }
    int err = ferror(f);
    fclose(f);
    if (!buf || err) {
        fprintf(stderr, "%s: read failed\n", path);
        free(buf);
        return 2;
    }
    /* libFuzzer hands the target a buffer of exactly size bytes: copy so
     * ASan sees a read one past the end. */
    uint8_t *exact = malloc(n ? n : 1);
    if (!exact) {
        free(buf);
        return 2;
    }
    memcpy(exact, buf, n);
    free(buf);
    LLVMFuzzerTestOneInput(exact, n);
    free(exact);
    return 0;
}

static void run_file(const char *path)
{
    ninputs++;
    fflush(NULL);
    pid_t pid = fork();
    if (pid < 0) {
        bad(path, strerror(errno));
        return;
    }
    if (pid == 0) {
        alarm(timeout_s);
        exit(run_child(path));
    }
    int st = 0;
    while (waitpid(pid, &st, 0) < 0 && errno == EINTR)
        ;
    char why[128];
    if (WIFSIGNALED(st)) {
        snprintf(why, sizeof why, "killed by signal %d%s", WTERMSIG(st),
                 WTERMSIG(st) == SIGALRM ? " (timeout)" : "");
        bad(path, why);
    } else if (WEXITSTATUS(st) == 2) {
        bad(path, "cannot read the input");
    } else if (WEXITSTATUS(st) != 0) {
        snprintf(why, sizeof why, "exit status %d (a sanitizer report or abort above)",
                 WEXITSTATUS(st));
        bad(path, why);
    }
}

static int visible(const struct dirent *e)
{
    return e->d_name[0] != '.';
}

static void run_path(const char *path)
{
    struct stat st;
    if (stat(path, &st) != 0) {
        bad(path, strerror(errno));
        return;
    }
    if (!S_ISDIR(st.st_mode)) {
        run_file(path);
        return;
    }
    struct dirent **names;
    int n = scandir(path, &names, visible, alphasort);
    if (n < 0) {
        bad(path, strerror(errno));
        return;
    }
    for (int i = 0; i < n; i++) {
        char sub[4096];
        snprintf(sub, sizeof sub, "%s/%s", path, names[i]->d_name);
        free(names[i]);
        run_path(sub);
    }
    free(names);
}

int main(int argc, char **argv)
{
    const char *target = strrchr(argv[0], '/') ? strrchr(argv[0], '/') + 1 : argv[0];
    const char *t = getenv("EM_REPLAY_TIMEOUT");
    if (t && atoi(t) > 0)
        timeout_s = (unsigned)atoi(t);
    setvbuf(stdout, NULL, _IOLBF, 0);
    for (int i = 1; i < argc; i++)
        run_path(argv[i]);
    if (ninputs == 0 && nbad == 0)
        bad(target, "no inputs to replay");
    if (nbad == 0)
        printf("ok   %s: %d inputs\n", target, ninputs);
    else
        printf("FAIL %s: %d of %d inputs failed\n", target, nbad, ninputs);
    printf("%d passed, %d failed\n", nbad == 0, nbad != 0);
    return nbad != 0;
}
