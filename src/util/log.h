/* log.h - leveled, one-line-per-event logging for the edge layers (server,
 * tools).  binary/, store/ and wal/ never log: they return codes (STYLE.md 5). */
#ifndef EM_LOG_H
#define EM_LOG_H

enum em_log_level { EM_LOG_DEBUG, EM_LOG_INFO, EM_LOG_WARN, EM_LOG_ERROR, EM_LOG_OFF };

/* em_log_open sends lines to path (appending), or to stderr when path is NULL. */
int  em_log_open(const char *path);
void em_log_close(void);
void em_log_set_level(enum em_log_level lvl);
enum em_log_level em_log_get_level(void);
/* em_log_parse_level maps "debug"/"info"/"warn"/"error"/"off"; -1 if unknown. */
int  em_log_parse_level(const char *s);

void em_log(enum em_log_level lvl, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

#define EM_DEBUG(...) do { if (em_log_get_level() <= EM_LOG_DEBUG) em_log(EM_LOG_DEBUG, __VA_ARGS__); } while (0)
#define EM_INFO(...)  em_log(EM_LOG_INFO, __VA_ARGS__)
#define EM_WARN(...)  em_log(EM_LOG_WARN, __VA_ARGS__)
#define EM_ERROR(...) em_log(EM_LOG_ERROR, __VA_ARGS__)

#endif
