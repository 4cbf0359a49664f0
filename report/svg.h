/*
 * report/svg.h — the pictures of `minitrain report` (--svg FILE, --html FILE), from run.db alone.
 *
 * Each picture is hand-written SVG 1.1 (no plotting library), greyscale-safe (series differ in
 * lightness, dash or hatch as well as hue), with axis labels and units and a legend:
 *   ettr      loss against job wall time, failures and restarts marked (below; the title
 *             carries ETTR and MTTR) — report/svg.c
 *   metrics   train/val loss, tokens/s and MFU over steps — report/svg_metrics.c
 *   pipeline  the measured 1F1B / GPipe timeline of one step — report/svg_pipeline.c
 *   moe       expert load per MoE layer over steps (heat map) and drop rate — report/svg_moe.c
 *   layout    the parallel mesh: which rank holds which tp/pp/dp/ep coordinate, the groups —
 *             report/svg_layout.c
 * A drawing function writes one <svg> element (no XML prolog, ids prefixed "pic-<name>", so that
 * several sit inline in one HTML page) and returns 1, or writes nothing and returns 0 when the
 * run holds nothing it shows (no pipeline, no MoE, ...).
 *
 * The ettr picture in detail:
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

#include "report/ettr.h"

/* A panel another module draws beside the loss plot (cmd/report.c wires safety's
 * adversarial-loss-vs-eps panel): width in pixels (0 = none), and draw(user, f, x0, h), which
 * writes SVG elements into f for the region [x0, x0 + width) x [0, h). */
typedef struct {
    int width;
    void (*draw)(void *user, FILE *f, int x0, int h);
    void *user;
} svg_panel;

/* Write the plot of the job in db to path, with `beside` (may be NULL) to the right of it. e may
 * be NULL (no ETTR in the title). Returns 0; 1 with err saying why when there is nothing to plot
 * (no losses logged yet: path then holds a picture that says so); or -1 with err (cannot write
 * path). */
int svg_loss_plot(sqlite3 *db, const ettr_report *e, const svg_panel *beside, const char *path,
                  char *err, size_t errlen);

/* The ettr picture as an <svg> element into f (the loss plot above, without a file). Returns 1,
 * or 0 with err when there are no losses to plot. */
int svg_loss_draw(sqlite3 *db, const ettr_report *e, const svg_panel *beside, FILE *f, char *err,
                  size_t errlen);

/* The pictures drawn from the database alone (see the list above). */
int svg_metrics(sqlite3 *db, FILE *f);
int svg_pipeline(sqlite3 *db, FILE *f);
int svg_moe(sqlite3 *db, FILE *f);
int svg_layout(sqlite3 *db, FILE *f);

/* Two or more runs on one picture (report/svg_compare.c), the dashboard's compare page: train
 * loss (line) and val loss (dots) against optimizer step and against wall time since each run's
 * first launch; run i drawn in colour i and dash pattern i, labelled in the legend. The <svg> has
 * id "pic-compare"; each launch of run i is a polyline.cmp-series with data-run = i (and
 * data-launch = its runs.id) in each panel (g.panel data-panel = step | wall). A run whose db is NULL draws nothing. Returns 1, or 0 when
 * no run has a loss. */
typedef struct {
    sqlite3 *db;       /* read-only run database */
    const char *label; /* legend text */
} svg_compare_run;
int svg_compare(const svg_compare_run *runs, int n, FILE *f);

/* The memory budget of the latest run (events memory and memory_peak, train/memory.h): the
 * ZeRO stage and recompute it ran with, memory_limit (0 = off), and for the rank with the largest
 * predicted total its predicted columns (bytes, in train/memory.h's order: params, grads,
 * optimizer, activations, comm, workspace, checkpoint, runtime, total) and its measured peak RSS
 * (NAN before the run ended), and hfu_over_mfu = (F + R) / F from the run's training FLOPs
 * per token F and what recompute adds R (docs/mfu.md; NAN when the run did not log them).
 * Returns 1, or 0 when the run logged no budget. */
typedef struct {
    int zero, ranks, rank;
    char recompute[16];
    double limit, bytes[9], peak, hfu_over_mfu;
} svg_memory;
int svg_memory_load(sqlite3 *db, svg_memory *m);

/* "zero 3, recompute full | rank 2 predicted 1.34 GiB: params 112 MiB, ... | peak 1.28 GiB
 * (-4.8%) | limit 11.8 GiB" into buf. Returns buf. */
const char *svg_memory_text(const svg_memory *m, char *buf, size_t n);

/* The table of those pictures, in the order a report shows them, ended by {NULL}. */
typedef struct {
    const char *name;  /* "metrics", "pipeline", ...: file suffix and HTML anchor */
    const char *title; /* a heading for a person */
    int (*draw)(sqlite3 *db, FILE *f);
} svg_picture;
extern const svg_picture SVG_PICTURES[];

/* Write the SVG text (an <svg> element) to path as a standalone file: the XML prolog, then
 * text; atomically (core/fs.h). Returns 0 or -1 with err. */
int svg_write_file(const char *path, const char *text, size_t len, char *err, size_t errlen);

#endif /* MT_SCHED_SVG_H */
