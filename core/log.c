/*
 * core/log.c — see core/log.h.
 */
#include "core/log.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

static int g_rank = 0;
static int g_live = 0; /* a progress line is on screen without its newline */

void log_set_rank(int rank) { g_rank = rank; }
/* Under mpirun every rank's stdout is a pseudo-terminal even when the job's output goes to a
 * file, so redrawing in place would litter logs with escape codes: plain lines there. */
int log_is_tty(void) { return isatty(STDOUT_FILENO) && !getenv("OMPI_COMM_WORLD_SIZE"); }

static void end_live(void) {
    if (g_live) {
        fputc('\n', stdout);
        g_live = 0;
    }
}

void log_info(const char *fmt, ...) {
    if (g_rank != 0) return;
    end_live();
    va_list ap;
    va_start(ap, fmt);
    vfprintf(stdout, fmt, ap);
    va_end(ap);
    fputc('\n', stdout);
    fflush(stdout);
}

void log_progress(int final, const char *fmt, ...) {
    if (g_rank != 0) return;
    va_list ap;
    va_start(ap, fmt);
    if (log_is_tty() && !final) {
        fputs("\r\033[K", stdout);
        vfprintf(stdout, fmt, ap);
        g_live = 1;
    } else {
        if (g_live) fputs("\r\033[K", stdout);
        g_live = 0;
        vfprintf(stdout, fmt, ap);
        fputc('\n', stdout);
    }
    va_end(ap);
    fflush(stdout);
}

const char *log_duration(double s, char *buf, int cap) {
    if (s < 0 || s != s) snprintf(buf, cap, "?");
    else if (s < 60) snprintf(buf, cap, "%.1fs", s);
    else if (s < 3600) snprintf(buf, cap, "%dm%02ds", (int)s / 60, (int)s % 60);
    else snprintf(buf, cap, "%dh%02dm", (int)s / 3600, ((int)s % 3600) / 60);
    return buf;
}
