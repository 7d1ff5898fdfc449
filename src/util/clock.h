/* clock.h - monotonic and wall clocks in the units ember uses. */
#ifndef EM_CLOCK_H
#define EM_CLOCK_H

#include <stdint.h>
#include <time.h>

/* em_now_ns: monotonic nanoseconds, for durations and deadlines. */
static inline uint64_t em_now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

/* em_now_ms: monotonic milliseconds (expiry deadlines are kept in these). */
static inline uint64_t em_now_ms(void) { return em_now_ns() / 1000000u; }

/* em_wall_ms: milliseconds since the Unix epoch (for logs and timestamps). */
static inline int64_t em_wall_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

#endif
