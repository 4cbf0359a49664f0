/*
 * core/log.h — log lines and the live progress line.
 *
 * On a terminal the trainer redraws one status line in place (step/total, loss, tokens/s, MFU,
 * ETA); when stdout is a file or pipe it prints plain lines instead, so logs stay greppable.
 * Only rank 0 prints progress (the caller decides; log_set_rank silences other ranks).
 */
#ifndef MT_LOG_H
#define MT_LOG_H

#include "core/check.h"

/* Set this process's rank; only rank 0 prints log_info / progress. */
void log_set_rank(int rank);
/* 1 if stdout is a terminal (progress is redrawn in place). */
int log_is_tty(void);

/* A plain line on stdout (rank 0 only). Ends any live progress line first. */
void log_info(const char *fmt, ...) MT_PRINTF(1, 2);

/* Redraw the live progress line (TTY) or print it as a plain line (not a TTY, or final=1). */
void log_progress(int final, const char *fmt, ...) MT_PRINTF(2, 3);

/* Format a duration in seconds as "1h02m", "3m05s" or "12.3s" into buf. */
const char *log_duration(double seconds, char *buf, int cap);

#endif /* MT_LOG_H */
