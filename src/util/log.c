/* log.c - timestamped log lines, written with one write(2) each so lines from
 * several threads never interleave. */
#include "log.h"

#include <fcntl.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>
#include <strings.h>
#include <time.h>
#include <unistd.h>

static _Atomic int log_level = EM_LOG_INFO;
static _Atomic int log_fd = 2;

int em_log_open(const char *path)
{
    if (!path) {
        atomic_store(&log_fd, 2);
        return 0;
    }
    int fd = open(path, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
    if (fd < 0)
        return -1;
    int old = atomic_exchange(&log_fd, fd);
    if (old > 2)
        close(old);
    return 0;
}

void em_log_close(void)
{
    int old = atomic_exchange(&log_fd, 2);
    if (old > 2)
        close(old);
}

void em_log_set_level(enum em_log_level lvl) { atomic_store(&log_level, (int)lvl); }
enum em_log_level em_log_get_level(void) { return (enum em_log_level)atomic_load(&log_level); }

int em_log_parse_level(const char *s)
{
    static const char *names[] = {"debug", "info", "warn", "error", "off"};
    for (int i = 0; i < 5; i++)
        if (strcasecmp(s, names[i]) == 0)
            return i;
    return -1;
}

void em_log(enum em_log_level lvl, const char *fmt, ...)
{
    if ((int)lvl < atomic_load(&log_level))
        return;
    static const char tag[] = "DIWE";
    char line[1024];
    struct timespec ts;
    struct tm tm;
    clock_gettime(CLOCK_REALTIME, &ts);
    gmtime_r(&ts.tv_sec, &tm);
    int n = snprintf(line, sizeof line, "%04d-%02d-%02dT%02d:%02d:%02d.%03ldZ %c ",
                     tm.tm_year + 1900, tm.tm_mon + 1, tm.tm_mday, tm.tm_hour,
                     tm.tm_min, tm.tm_sec, ts.tv_nsec / 1000000, tag[lvl & 3]);
    va_list ap;
    va_start(ap, fmt);
    int m = vsnprintf(line + n, sizeof line - (size_t)n - 1, fmt, ap);
    va_end(ap);
    if (m < 0)
        m = 0;
    if ((size_t)(n + m) > sizeof line - 2)
        m = (int)(sizeof line - 2) - n;
    line[n + m] = '\n';
    ssize_t w = write(atomic_load(&log_fd), line, (size_t)(n + m + 1));
    (void)w;
}
