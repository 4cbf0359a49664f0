/*
 * dash/dash_impl.h — what the dashboard's files share (private to dash/; the face is dash/dash.h):
 * the run index (dash/dash_index.c) and the page writers (dash/dash_pages.c) that the HTTP
 * layer (dash/dash_http.c) calls.
 */
#ifndef MT_DASH_IMPL_H
#define MT_DASH_IMPL_H

#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <sys/types.h>

#include "dash/dash.h"

/* What a file looked like: a change to any field means "read it again". */
typedef struct {
    uint64_t dev, ino, size;
    int64_t mtime_ns;
} dash_stamp;

/* One run directory the index knows, with the runs page's row of its report summary. */
typedef struct {
    char *dir;                  /* run directory (root joined with the relative path) */
    dash_stamp db, wal;         /* run.db and run.db-wal when last read */
    int locked;                 /* RUN_DIR/.lock held by some process when last read */
    uint64_t seen;              /* the scan that last found it */
    int ok;                     /* 1: the fields below hold a summary; 0: err says why not */
    char err[320];
    char *name, *status, *config; /* config: JSON text of the latest run */
    int64_t steps;
    double loss, val, tps, mfu, ettr, failures, start, wall; /* NAN = n/a */
} dash_run;

/* The runs under the roots; a mutex guards every field (handlers run on many threads). */
typedef struct {
    pthread_mutex_t mu;
    char **roots;
    int n_roots;
    dash_run *runs;
    size_t n, cap;
    uint64_t scan;
    double scanned_at; /* monotonic seconds of the last scan */
} dash_index;

void dash_index_init(dash_index *ix, const char *const *roots, int n_roots);
void dash_index_free(dash_index *ix);

/* Walk the roots again (a root that holds run.db is a run; else its subdirectories, two levels deep),
 * drop runs whose run.db is gone, and re-read the summary of each run whose run.db, WAL or lock
 * changed. Called with ix->mu held. Cheap when nothing changed: a stat per file and one read of
 * /proc/locks. */
void dash_index_refresh(dash_index *ix);

/* The run with directory dir, or NULL (only directories the index found are ever served). */
dash_run *dash_index_find(dash_index *ix, const char *dir);

/* An entity tag for the state of the n runs: equal tags, equal pages. Writes "\"...\"" to buf. */
void dash_etag(dash_run *const *runs, int n, const char *salt, char *buf, size_t len);

/* ---- pages (dash/dash_pages.c): each writes one whole HTML document into f ---- */

/* The runs page, filtered by q (substring of the name or directory, "" = all) and status ("" =
 * all), sorted by column sort ("name", "status", "steps", "loss", "val", "tps", "mfu", "ettr",
 * "failures", "start", "duration"), descending when desc. token: appended to links, or NULL. */
void dash_page_runs(FILE *f, dash_index *ix, const char *q, const char *status, const char *sort,
                    int desc, int poll_ms);

/* A run's page: report_html_write with the dashboard's navigation and live-update script.
 * Returns 0, or -1 with err (the run cannot be read now). */
int dash_page_run(FILE *f, const dash_run *run, dash_sections_fn sections, int poll_ms,
                  char *err, size_t errlen);

/* The compare page of the n runs: the svg_compare picture and their configs side by side. */
void dash_page_compare(FILE *f, dash_run *const *runs, int n, int poll_ms);

/* A small page with a heading and one line (errors: 404, 401, ...). */
void dash_page_message(FILE *f, const char *title, const char *line);

/* Print s into f escaped for HTML text and attribute values; for URL query values: */
void dash_html(FILE *f, const char *s);
void dash_url(FILE *f, const char *s);

#endif /* MT_DASH_IMPL_H */
