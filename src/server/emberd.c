/* emberd.c - the ember server: parses flags and the INI config file, starts
 * the thin-client listener (127.0.0.1:10800 by default, in memory) and
 * shuts down cleanly on SIGTERM/SIGINT.  Configuration keys: srv.c.
 */
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>
#include <unistd.h>

#include "net/net.h"
#include "server/auth.h"
#include "server/srv.h"
#include "util/err.h"
#include "util/log.h"

static void usage(FILE *f)
{
    fprintf(f,
        "usage: emberd [options]\n"
        "\n"
        "Serves Apache Ignite thin clients (protocol 1.0.0-1.7.0) from memory.\n"
        "With no options it listens on 127.0.0.1:10800.\n"
        "\n"
        "  --config FILE          read settings from an INI file (key = value)\n"
        "  --host ADDR            listen address\n"
        "  --port N               listen port (0 = any free port)\n"
        "  --threads N            worker event loops (0 = one per CPU, 1 on 1-2 CPUs)\n"
        "  --log-level LEVEL      debug, info, warn, error, off\n"
        "  --debug-ops            enable the private allocation-stats op (32000)\n"
        "  --add-user USER        add USER to users_file (or --users-file FILE), or\n"
        "                         change its password; the password comes from\n"
        "                         $EMBER_PASSWORD or stdin (asked twice on a terminal)\n"
        "  --remove-user USER     delete USER from the users file\n"
        "  --KEY VALUE            any setting below (dashes or underscores)\n"
        "  --help                 this text\n"
        "\n"
        "Settings (config file keys; sizes take k/m/g, times ms or s):\n");
    srv_config_help(f);
    fprintf(f, "\nFlags override the config file.\n");
}

int main(int argc, char **argv)
{
    srv_config cfg;
    srv_config_default(&cfg);
    char err[512] = "";

    /* The config file first, so flags override it wherever they appear. */
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h")) {
            usage(stdout);
            return 0;
        }
        if (!strcmp(argv[i], "--config") || !strncmp(argv[i], "--config=", 9)) {
            const char *path = argv[i][8] == '=' ? argv[i] + 9 : (i + 1 < argc ? argv[++i] : NULL);
            if (!path) {
                fprintf(stderr, "emberd: --config needs a file\n");
                return 2;
            }
            if (srv_config_load(&cfg, path, err, sizeof err)) {
                fprintf(stderr, "emberd: %s\n", err);
                return 2;
            }
        }
    }
    /* User management (--add-user / --remove-user) runs and exits. */
    int arc = srv_auth_cli(argc, argv, cfg.users_file[0] ? cfg.users_file : NULL);
    if (arc >= 0)
        return arc;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "--config")) {
            i++;
            continue;
        }
        if (!strncmp(a, "--config=", 9))
            continue;
        if (strncmp(a, "--", 2) || !a[2]) {
            fprintf(stderr, "emberd: unexpected argument '%s' (see --help)\n", a);
            return 2;
        }
        if (!strcmp(a, "--debug-ops")) {
            cfg.debug_ops = 1;
            continue;
        }
        char key[128];
        const char *val;
        const char *eq = strchr(a, '=');
        if (eq) {
            snprintf(key, sizeof key, "%.*s", (int)(eq - a - 2), a + 2);
            val = eq + 1;
        } else {
            snprintf(key, sizeof key, "%s", a + 2);
            if (i + 1 >= argc) {
                fprintf(stderr, "emberd: %s needs a value\n", a);
                return 2;
            }
            val = argv[++i];
        }
        if (srv_config_set(&cfg, key, val, err, sizeof err)) {
            fprintf(stderr, "emberd: %s (see --help)\n", err);
            return 2;
        }
    }

    if (cfg.log_file[0] && em_log_open(cfg.log_file) != 0) {
        fprintf(stderr, "emberd: cannot open log file %s\n", cfg.log_file);
        return 2;
    }
    em_log_set_level((enum em_log_level)cfg.log_level);

    /* Signals are taken synchronously by this thread; workers never see them. */
    sigset_t set;
    sigemptyset(&set);
    sigaddset(&set, SIGTERM);
    sigaddset(&set, SIGINT);
    sigaddset(&set, SIGHUP);
    pthread_sigmask(SIG_BLOCK, &set, NULL);
    signal(SIGPIPE, SIG_IGN);

    /* Room for max_connections sockets plus the process's own descriptors,
     * as far as the hard limit allows. */
    struct rlimit rl;
    if (getrlimit(RLIMIT_NOFILE, &rl) == 0) {
        rlim_t want = (rlim_t)cfg.max_connections + 256;
        if (rl.rlim_cur < want) {
            rl.rlim_cur = rl.rlim_max < want ? rl.rlim_max : want;
            setrlimit(RLIMIT_NOFILE, &rl);
        }
    }

    srv *s;
    int rc = srv_start(&s, &cfg);
    if (rc) {
        EM_ERROR("emberd: cannot start on %s:%d: %s", cfg.host, cfg.port, em_strerror(rc));
        return 1;
    }
    long nthreads = cfg.threads > 0 ? cfg.threads : net_default_threads();
    EM_INFO("emberd listening on %s:%d (thin-client protocol 1.0.0-1.7.0, %ld worker threads)",
            cfg.host, srv_port(s), nthreads > 0 ? nthreads : 1);

    for (;;) {
        struct timespec ts = { 0, 100 * 1000 * 1000 };
        int sig = sigtimedwait(&set, NULL, &ts);
        if (sig == SIGTERM || sig == SIGINT)
            break;
        srv_maintain(s);            /* every ~100 ms: expiry */
    }
    EM_INFO("emberd shutting down");
    srv_stop(s);
    EM_INFO("emberd stopped");
    em_log_close();
    return 0;
}
