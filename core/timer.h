/*
 * core/timer.h — wall-clock helpers (monotonic for durations, real time for the run database).
 */
#ifndef MT_TIMER_H
#define MT_TIMER_H

#include <time.h>

/* Seconds on a monotonic clock; only differences are meaningful. */
static inline double timer_now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}

/* Unix time in seconds (for timestamps stored in run.db). */
static inline double timer_unix(void) {
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}

#endif /* MT_TIMER_H */
