/*
 * sched/svg.h — `minitrain report --svg FILE`: loss against job wall time, failures marked.
 *
 * One hand-written SVG 1.1 file (no library): train loss of every run as a polyline (one colour
 * per run, so a restart shows as a new colour picking up from the resumed step's loss), val loss
 * as dots, each failure as a red line labelled with its kind, the downtime (failure -> first step
 * after the restart) shaded, each relaunch as a dashed green line. The title carries ETTR and
 * MTTR. Renders in browsers and with rsvg-convert.
 */
#ifndef MT_SCHED_SVG_H
#define MT_SCHED_SVG_H

#include <stddef.h>
#include <stdio.h>

#include <sqlite3.h>

#include "sched/ettr.h"

/* A panel another module draws beside the loss plot (cmd/report.c wires safety's
 * adversarial-loss-vs-eps panel): width in pixels (0 = none), and draw(user, f, x0, h), which
 * writes SVG elements into f for the region [x0, x0 + width) x [0, h). */
typedef struct {
    int width;
    void (*draw)(void *user, FILE *f, int x0, int h);
    void *user;
} svg_panel;

/* Write the plot of the job in db to path, with `beside` (may be NULL) to the right of it. e may
 * be NULL (no ETTR in the title). Returns 0, or -1 with err (no metrics to plot, cannot write
 * path). */
int svg_loss_plot(sqlite3 *db, const ettr_report *e, const svg_panel *beside, const char *path,
                  char *err, size_t errlen);

#endif /* MT_SCHED_SVG_H */
