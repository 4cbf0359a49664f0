/*
 * report/report.h — the summary of a job from its run database: what `minitrain report` prints
 * (cmd/report.c), as text or as one JSON object, and the loss plot.
 *
 * The figures and their sources are described in report/report.c; ETTR and its breakdown come
 * from report/ettr.h. The database stays open (read-only) while the summary lives, for the plot.
 */
#ifndef MT_SCHED_REPORT_H
#define MT_SCHED_REPORT_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include <cjson/cJSON.h>
#include <sqlite3.h>

#include "report/ettr.h"
#include "report/svg.h"

/* Everything the report prints. NAN = not available. Times are unix seconds, durations s. */
typedef struct {
    int64_t runs, run_id, world_size, metric_rows, steps, last_step;
    char *name, *git_commit, *config; /* of the latest run; config is JSON text */
    char *run_status;                 /* of the latest run's row */
    /* The job's status. Under a supervisor it owns it (supervisor_end: completed | gave_up |
     * usage_error | killed, with a reason); a supervisor that left no end event is "running"
     * while RUN_DIR/.lock is held and "killed" once it is not. Unsupervised: the latest run's
     * row, except that a "running" row whose lock is free is "killed" (the trainer died). */
    char *status, *status_reason;
    int supervised;                   /* the supervisor logged its start */
    double started_at, ended_at, duration_s, job_start, wall_s; /* ended_at: the job's end */
    double first_train_loss, final_train_loss, final_val_loss, best_val_loss;
    double tokens_per_s, mfu, mfu_theoretical; /* medians over every metrics row */
    cJSON *events;                             /* {kind: count}, ordered by kind */
    ettr_report ettr;
    sqlite3 *db;                               /* read-only, until report_free */
    char path[4200];                           /* of run.db */
    /* Sections other modules contribute (cmd/report.c wires them; sched/ knows none of them):
     * extra's items become top-level keys of the JSON object (e.g. "robustness"); owned, freed
     * by report_free. NULL = none. */
    cJSON *extra;
} report_summary;

/* Open RUN_DIR/run.db read-only and fill r. Returns 0, or -1 with a user-facing message in err
 * (no such file, not a minitrain run database — naming the missing table —, unreadable, neither
 * runs nor supervisor events yet, inconsistent events for the ETTR accounting); r is then freed.
 * A job whose launches never started a trainer (only the supervisor's events) is reported with
 * what is known: its status, failures and events. */
int report_load(const char *run_dir, report_summary *r, char *err, size_t errlen);

/* The same summary from an open database db with run.db's schema: report_load's path once it has
 * opened RUN_DIR/run.db, and `report --db`'s, whose db is a job materialised from PostgreSQL into
 * ":memory:" (db/db.h: db_read_job) — one report, whichever store the rows come from. r owns db
 * from here (report_free closes it, also on failure). run_dir: where to probe the job's lock for
 * a live/killed status, or NULL (no run directory: the rows' own statuses stand). label names the
 * database in messages and in r->path. Returns 0, or -1 with err as report_load. */
int report_load_db(sqlite3 *db, const char *run_dir, const char *label, report_summary *r,
                   char *err, size_t errlen);

/* Print r to stdout as text / as one JSON object (keys in docs/ettr.md). Return MT_EXIT_OK. */
int report_print_text(const report_summary *r);
int report_print_json(const report_summary *r);

/* Draw loss vs wall time, failures and restarts marked, into the SVG file path (report/svg.h),
 * with `beside` (may be NULL) drawn to its right. Returns 0, 1 with err when there was nothing
 * to plot (path says so), or -1 with err. */
int report_svg(const report_summary *r, const svg_panel *beside, const char *path, char *err,
               size_t errlen);

/* A section another module contributes to the HTML page and the pictures (cmd/report.c wires
 * safety's robustness): id (HTML anchor and file suffix), heading, and draw(user, f), which
 * writes HTML — here an inline <svg> element, so the same text is also a standalone picture —
 * and returns 1, or returns 0 when it does not apply. */
typedef struct {
    const char *id, *heading;
    int (*draw)(void *user, FILE *f);
    void *user;
} report_section;

/* Write the self-contained HTML page of r (report/report_html.c) to path, atomically: summary,
 * config and layout, the ETTR picture (with `beside`, may be NULL) and tables, the metrics and
 * MFU table, the pipeline and MoE pictures when they apply, the n_extra contributed sections,
 * the checkpoint catalog and the events. Returns 0 or -1 with err (cannot write path). */
int report_html(const report_summary *r, const svg_panel *beside, const report_section *extra,
                int n_extra, const char *path, char *err, size_t errlen);

/* What a caller adds to the page report_html_write draws (all may be NULL): head, extra HTML in
 * <head> (the dashboard's live-update script); nav, links put first in the navigation bar;
 * generator, the command named in the header ("minitrain report --html" when NULL); note, HTML
 * ending the header's line (the dashboard's "live, updated ..."). */
typedef struct {
    const char *head, *nav, *generator, *note;
} report_html_opts;

/* The page report_html writes, into f (o may be NULL): the one HTML drawing path that `report
 * --html` and the dashboard (dash/) share. */
void report_html_write(FILE *f, const report_summary *r, const svg_panel *beside,
                       const report_section *extra, int n_extra, const report_html_opts *o);

/* The page's style sheet (one CSS text), for other pages that should look the same. */
const char *report_html_css(void);

/* Beside the ettr picture at path ("plot.svg"), write every other picture that applies
 * (report/svg.h's table, then the contributed sections) as "plot-<name>.svg", printing each
 * path when print. Returns how many were written, or -1 with err. */
int report_svg_pictures(const report_summary *r, const report_section *extra, int n_extra,
                        const char *path, int print, char *err, size_t errlen);

/* Close the database and free r's strings. Safe twice. */
void report_free(report_summary *r);

#endif /* MT_SCHED_REPORT_H */
