/*
 * report/svg_compare.c — two or more runs' losses on one picture (report/svg.h: svg_compare),
 * for the dashboard's compare page: (1) train loss against optimizer step, (2) train loss against
 * the job's wall time (seconds since the run's first launch started), val loss as open dots on
 * both.
 *
 * Shape: one query per run (the same placement on the job's clock as the ettr picture,
 * report/svg.c: a launch's start event + the metrics row's wall_s), the shared ranges, then both
 * panels through report/svg_draw.h. Runs differ by colour AND dash pattern (the legend shows
 * both), so the picture reads in greyscale. Each launch of a run is its own polyline (a restart
 * resumes from its checkpoint's step: the recomputed steps overlap, and no line crosses the
 * downtime on the wall-time panel).
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#include <sqlite3.h>

#include "core/check.h"
#include "report/svg.h"
#include "report/svg_draw.h"

typedef struct {
    long long launch; /* runs.id: a restart is a new launch, its curve a new polyline */
    double step, t, train, val;
} cpt;

typedef struct {
    cpt *p;
    size_t n;
} cseries;

static double colv(sqlite3_stmt *st, int i) {
    return sqlite3_column_type(st, i) == SQLITE_NULL ? NAN : sqlite3_column_double(st, i);
}

/* Every metrics row of db on the job's clock (t = 0 at the first row's launch). */
static void load(sqlite3 *db, cseries *s) {
    s->p = NULL;
    s->n = 0;
    sqlite3_stmt *st = NULL;
    const char *sql =
        "SELECT m.run_id, m.step, COALESCE((SELECT MIN(time) FROM events v WHERE v.run_id = m.run_id AND"
        " v.kind = 'start'), r.started_at) + m.wall_s, m.train_loss, m.val_loss FROM metrics m"
        " JOIN runs r ON r.id = m.run_id ORDER BY r.started_at, m.run_id, m.wall_s, m.rowid";
    if (!db || sqlite3_prepare_v2(db, sql, -1, &st, NULL) != SQLITE_OK) return;
    size_t cap = 0;
    while (sqlite3_step(st) == SQLITE_ROW) {
        if (s->n == cap) {
            cap = cap ? 2 * cap : 256;
            s->p = realloc(s->p, cap * sizeof(cpt));
            mtCheck(s->p != NULL, "out of memory");
        }
        s->p[s->n++] = (cpt){sqlite3_column_int64(st, 0), colv(st, 1), colv(st, 2), colv(st, 3),
                             colv(st, 4)};
    }
    sqlite3_finalize(st);
    double t0 = INFINITY;
    for (size_t i = 0; i < s->n; i++)
        if (isfinite(s->p[i].t)) t0 = fmin(t0, s->p[i].t);
    for (size_t i = 0; i < s->n; i++) s->p[i].t -= isfinite(t0) ? t0 : 0;
}

static const char *const DASHES[] = {NULL, "7,4", "2,3", "10,3,2,3", "4,4", "1,5"};

/* One panel: x = step (wall 0) or t (wall 1). */
static void panel(FILE *f, const svgd_frame *fr, const cseries *s, int n, int wall) {
    fprintf(f, "<g class=\"panel\" data-panel=\"%s\">\n", wall ? "wall" : "step");
    for (int r = 0; r < n; r++) {
        const char *c = SVGD_COLORS[r % 6], *d = DASHES[r % 6];
        for (size_t i = 0; i < s[r].n;) { /* one polyline per launch: no line across a restart */
            size_t j = i;
            while (j < s[r].n && s[r].p[j].launch == s[r].p[i].launch) j++;
            fprintf(f, "<polyline class=\"cmp-series\" data-run=\"%d\" data-launch=\"%lld\" "
                    "fill=\"none\" stroke=\"%s\" stroke-width=\"1.8\"%s%s%s points=\"", r,
                    s[r].p[i].launch, c, d ? " stroke-dasharray=\"" : "", d ? d : "", d ? "\"" : "");
            for (size_t q = i; q < j; q++) {
                double x = wall ? s[r].p[q].t : s[r].p[q].step, y = s[r].p[q].train;
                if (isfinite(x) && isfinite(y))
                    fprintf(f, "%.1f,%.1f ", svgd_x(fr, x), svgd_y(fr, y));
            }
            fputs("\"/>\n", f);
            i = j;
        }
        for (size_t i = 0; i < s[r].n; i++) {
            double x = wall ? s[r].p[i].t : s[r].p[i].step, y = s[r].p[i].val;
            if (isfinite(x) && isfinite(y))
                fprintf(f, "<circle class=\"cmp-val\" data-run=\"%d\" cx=\"%.1f\" cy=\"%.1f\" "
                        "r=\"3.5\" fill=\"white\" stroke=\"%s\" stroke-width=\"2\"/>\n", r,
                        svgd_x(fr, x), svgd_y(fr, y), c);
        }
    }
    fputs("</g>\n", f);
}

int svg_compare(const svg_compare_run *runs, int n, FILE *f) {
    if (n <= 0) return 0;
    cseries *s = callocCheck((size_t)n, sizeof(cseries));
    double slo = INFINITY, shi = -INFINITY, thi = 0, ylo = INFINITY, yhi = -INFINITY;
    size_t total = 0;
    for (int r = 0; r < n; r++) {
        load(runs[r].db, &s[r]);
        total += s[r].n;
        for (size_t i = 0; i < s[r].n; i++) {
            const cpt *q = &s[r].p[i];
            if (isfinite(q->step)) slo = fmin(slo, q->step), shi = fmax(shi, q->step);
            if (isfinite(q->t)) thi = fmax(thi, q->t);
            if (isfinite(q->train)) ylo = fmin(ylo, q->train), yhi = fmax(yhi, q->train);
            if (isfinite(q->val)) ylo = fmin(ylo, q->val), yhi = fmax(yhi, q->val);
        }
    }
    if (total == 0 || !isfinite(slo) || !isfinite(ylo)) {
        for (int r = 0; r < n; r++) free(s[r].p);
        free(s);
        return 0;
    }
    if (shi - slo < 1) shi = slo + 1;
    if (thi <= 0) thi = 1;
    svgd_range(&ylo, &yhi, 0.06);
    const int W = 960, ML = 80, MR = 30, PH = 220, GAP = 80, LEG = 20 * ((n + 1) / 2), MT = 50 + LEG;
    const int H = MT + 2 * PH + GAP + 50;
    char title[160];
    snprintf(title, sizeof(title), "%d runs compared: train loss (lines) and val loss (dots)", n);
    svgd_begin(f, "pic-compare", W, H, title);
    svgd_title(f, 20, 24, title);
    for (int r = 0; r < n; r++) { /* legend: two columns, colour and dash per run */
        double x = ML + (r % 2) * 440, y = 48 + 20 * (r / 2);
        svgd_legend(f, x, y, NULL, SVGD_COLORS[r % 6], DASHES[r % 6], 1,
                    runs[r].label ? runs[r].label : "(unnamed)");
    }
    svgd_frame by_step = {ML, MT, W - ML - MR, PH, slo, shi, ylo, yhi};
    svgd_axes(f, &by_step, "optimizer step", "loss (nats/token)", "%g", "%.2f");
    panel(f, &by_step, s, n, 0);
    svgd_frame by_wall = {ML, MT + PH + GAP, W - ML - MR, PH, 0, thi, ylo, yhi};
    svgd_axes(f, &by_wall, "wall time since the run's first launch (s)", "loss (nats/token)",
              "%g", "%.2f");
    panel(f, &by_wall, s, n, 1);
    svgd_end(f);
    for (int r = 0; r < n; r++) free(s[r].p);
    free(s);
    return 1;
}
