/*
 * sched/report.h — the summary of a job from its run database: what `minitrain report` prints
 * (cmd/report.c), as text or as one JSON object, and the loss plot.
 *
 * The figures and their sources are described in sched/report.c; ETTR and its breakdown come
 * from sched/ettr.h. The database stays open (read-only) while the summary lives, for the plot.
 */
#ifndef MT_SCHED_REPORT_H
#define MT_SCHED_REPORT_H

#include <stddef.h>
#include <stdint.h>

#include <cjson/cJSON.h>
#include <sqlite3.h>

#include "sched/ettr.h"
#include "sched/svg.h"

/* Everything the report prints. NAN = not available. Times are unix seconds, durations s. */
typedef struct {
    int64_t runs, run_id, world_size, metric_rows, steps, last_step;
    char *name, *status, *git_commit, *config; /* of the latest run; config is JSON text */
    double started_at, ended_at, duration_s, job_start, wall_s;
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
 * (no such file, not a minitrain run database — naming the missing table —, unreadable, no runs
 * yet, inconsistent events for the ETTR accounting); r is then freed. */
int report_load(const char *run_dir, report_summary *r, char *err, size_t errlen);

/* Print r to stdout as text / as one JSON object (keys in docs/ettr.md). Return MT_EXIT_OK. */
int report_print_text(const report_summary *r);
int report_print_json(const report_summary *r);

/* Draw loss vs wall time, failures and restarts marked, into the SVG file path (sched/svg.h),
 * with `beside` (may be NULL) drawn to its right. Returns 0 or -1 with err. */
int report_svg(const report_summary *r, const svg_panel *beside, const char *path, char *err,
               size_t errlen);

/* Close the database and free r's strings. Safe twice. */
void report_free(report_summary *r);

#endif /* MT_SCHED_REPORT_H */
