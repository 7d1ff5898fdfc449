/* test_balance.c - connections spread evenly over emberd's worker loops
 * (net.c hands each accepted connection to the loop owning the fewest).
 * Counted from outside: each loop's epoll instance lists its registered
 * descriptors as "tfd:" lines in /proc/PID/fdinfo (Linux).
 */
#include "client.h"
#include "test.h"

#include "util/err.h"

#include <dirent.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#define NCONN 40

/* epoll_counts fills counts[] with the registered fds of each epoll fd of
 * pid; returns how many epoll fds there are. */
static int epoll_counts(int pid, int *counts, int max)
{
    char dpath[64], lpath[128], link[128], line[256];
    snprintf(dpath, sizeof dpath, "/proc/%d/fd", pid);
    DIR *d = opendir(dpath);
    if (!d)
        return -1;
    int n = 0;
    struct dirent *e;
    while ((e = readdir(d)) != NULL && n < max) {
        if (e->d_name[0] == '.')
            continue;
        snprintf(lpath, sizeof lpath, "%s/%s", dpath, e->d_name);
        ssize_t l = readlink(lpath, link, sizeof link - 1);
        if (l <= 0)
            continue;
        link[l] = 0;
        if (strcmp(link, "anon_inode:[eventpoll]"))
            continue;
        snprintf(lpath, sizeof lpath, "/proc/%d/fdinfo/%s", pid, e->d_name);
        FILE *f = fopen(lpath, "r");
        if (!f)
            continue;
        int tfd = 0;
        while (fgets(line, sizeof line, f))
            tfd += strncmp(line, "tfd:", 4) == 0;
        fclose(f);
        counts[n++] = tfd;
    }
    closedir(d);
    return n;
}

TEST(balance_connections_over_loops)
{
    const char *args[] = { TC_FLAG_THREADS, "2", NULL };
    tc_server s;
    REQUIRE_OK(tc_server_start(&s, args));
    static tc_conn c[NCONN];
    for (int i = 0; i < NCONN; i++)
        REQUIRE_OK(tc_open(&c[i], s.port));
    int counts[8];
    int n = epoll_counts(s.pid, counts, 8);
    REQUIRE_EQ(n, 2);
    /* each loop also watches the listener, the stop eventfd and its inbox */
    int a = counts[0] - 3, b = counts[1] - 3;
    CHECK_EQ(a + b, NCONN);
    CHECK(a - b <= 1 && b - a <= 1);
    if (a - b > 1 || b - a > 1)
        fprintf(stderr, "loops own %d and %d connections\n", a, b);
    /* every connection still works */
    REQUIRE_OK(tc_create_cache(&c[0], "bal"));
    for (int i = 0; i < NCONN; i++) {
        char v[16];
        snprintf(v, sizeof v, "%d", i);
        CHECK_OK(tc_put_int_str(&c[i], "bal", i, v));
    }
    for (int i = 0; i < NCONN; i++)
        tc_close(&c[i]);
    CHECK_EQ(tc_server_stop(&s), 0);
}
