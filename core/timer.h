/*
 * core/timer.h — the house's clocks: a monotonic clock for durations and deadlines, real time for
 * timestamps stored in the run database, heartbeat records and log lines. Prefix timer_. The one
 * place that reads the monotonic and real-time clocks, so that every duration in minitrain is
 * measured on the same clock.
 */
#ifndef MT_TIMER_H
#define MT_TIMER_H

#include <time.h>

/* Seconds on a monotonic clock (CLOCK_MONOTONIC); only differences are meaningful. */
static inline double timer_now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}

/* Unix time in seconds with sub-second resolution (CLOCK_REALTIME), for timestamps stored in
 * run.db, heartbeat records and log lines. */
static inline double timer_unix(void) {
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}

/* The absolute CLOCK_MONOTONIC time after_s seconds (>= 0) from now, as pthread_cond_timedwait
 * takes it for a condition variable whose clock attribute is CLOCK_MONOTONIC
 * (pthread_condattr_setclock). */
static inline struct timespec timer_deadline(double after_s) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    double frac = (double)ts.tv_nsec * 1e-9 + after_s;
    ts.tv_sec += (time_t)frac;
    ts.tv_nsec = (long)((frac - (double)(time_t)frac) * 1e9);
    if (ts.tv_nsec >= 1000000000L) { /* rounding */
        ts.tv_sec++;
        ts.tv_nsec -= 1000000000L;
    }
    return ts;
}

#endif /* MT_TIMER_H */
