/*
 * report/svg_metrics.c — training figures over steps (report/svg.h: svg_metrics): three panels
 * sharing the step axis, (1) train loss as a line and val loss as dots, (2) tokens/s, (3) MFU
 * as a percentage of the measured sgemm peak (solid) and of the theoretical peak (dashed).
 *
 * Shape: one query over the metrics of every run (a restarted job repeats the steps it
 * recomputes, so each run is its own polyline and the overlap is visible), then one panel at a
 * time through the shared helpers (report/svg_draw.h). Series differ by dash and marker, not only
 * by colour.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <sqlite3.h>

#include "core/check.h"
#include "report/svg.h"
#include "report/svg_draw.h"

typedef struct {
    long long run;
    double step, train, val, tps, mfu, mfu_th;
} mrow;

enum { F_TRAIN, F_VAL, F_TPS, F_MFU, F_MFU_TH };

static double field(const mrow *r, int k) {
    switch (k) {
    case F_TRAIN: return r->train;
    case F_VAL: return r->val;
    case F_TPS: return r->tps;
    case F_MFU: return 100 * r->mfu;
    default: return 100 * r->mfu_th;
    }
}

static double col(sqlite3_stmt *st, int i) {
    return sqlite3_column_type(st, i) == SQLITE_NULL ? NAN : sqlite3_column_double(st, i);
}

/* The first step any run after the one ending at index end (exclusive) logged: where a later
 * launch resumed, so steps from there on of this run were recomputed. INFINITY when none. */
static double resumed_at(const mrow *p, size_t n, size_t end) {
    double m = INFINITY;
    for (size_t j = end; j < n; j++) m = fmin(m, p[j].step);
    return m;
}

/* One polyline (or dots) of field k over p[i..j) with steps in [lo, hi]. */
static void piece(FILE *f, const svgd_frame *fr, const mrow *p, size_t i, size_t j, int k,
                  double lo, double hi, const char *color, const char *dash, int faint, int dots) {
    if (!dots)
        fprintf(f, "<polyline class=\"series\" fill=\"none\" stroke=\"%s\" stroke-width=\"1.8\"%s%s%s%s "
                "points=\"", color, dash ? " stroke-dasharray=\"" : "", dash ? dash : "",
                dash ? "\"" : "", faint ? " stroke-opacity=\"0.55\"" : "");
    for (size_t q = i; q < j; q++) {
        double v = field(&p[q], k);
        if (!isfinite(v) || p[q].step < lo || p[q].step > hi) continue;
        if (dots)
            fprintf(f, "<circle cx=\"%.1f\" cy=\"%.1f\" r=\"3.5\" fill=\"white\" stroke=\"%s\" "
                    "stroke-width=\"2\"%s/>\n", svgd_x(fr, p[q].step), svgd_y(fr, v), color,
                    faint ? " stroke-opacity=\"0.55\"" : "");
        else
            fprintf(f, "%.1f,%.1f ", svgd_x(fr, p[q].step), svgd_y(fr, v));
    }
    if (!dots) fputs("\"/>\n", f);
}

/* A polyline of field k per run (dash NULL = solid), or dots when dots. A run's steps that a
 * later launch logged again (from the step it resumed at) are the recomputed ones: drawn faint
 * and dotted; the rest of that run, kept, is drawn full like the latest launch. */
static void series(FILE *f, const svgd_frame *fr, const mrow *p, size_t n, int k,
                   const char *color, const char *dash, int dots) {
    for (size_t i = 0; i < n;) {
        size_t j = i;
        while (j < n && p[j].run == p[i].run) j++;
        double r = resumed_at(p, n, j);
        /* kept: up to the resume point (a line reaches it; a dot there is the recomputed one) */
        piece(f, fr, p, i, j, k, -INFINITY, dots ? nextafter(r, -INFINITY) : r, color, dash, 0,
              dots);
        if (isfinite(r)) /* recomputed: from the resume point on, the boundary point shared */
            piece(f, fr, p, i, j, k, r, INFINITY, color, "2,3", 1, dots);
        i = j;
    }
}

static void range_of(const mrow *p, size_t n, int k0, int k1, double *lo, double *hi) {
    *lo = INFINITY, *hi = -INFINITY;
    for (size_t i = 0; i < n; i++)
        for (int k = k0; k <= k1; k++) {
            double v = field(&p[i], k);
            if (isfinite(v)) *lo = fmin(*lo, v), *hi = fmax(*hi, v);
        }
}

int svg_metrics(sqlite3 *db, FILE *f) {
    sqlite3_stmt *st = NULL;
    const char *sql = "SELECT m.run_id, m.step, m.train_loss, m.val_loss, m.tokens_per_s, m.mfu,"
                      " m.mfu_theoretical FROM metrics m LEFT JOIN runs r ON r.id = m.run_id"
                      " ORDER BY r.started_at, m.run_id, m.wall_s, m.rowid";
    if (sqlite3_prepare_v2(db, sql, -1, &st, NULL) != SQLITE_OK) return 0;
    size_t n = 0, cap = 256;
    mrow *p = mallocCheck(cap * sizeof(mrow));
    while (sqlite3_step(st) == SQLITE_ROW) {
        if (n == cap) {
            cap *= 2;
            p = realloc(p, cap * sizeof(mrow));
            mtCheck(p != NULL, "out of memory");
        }
        p[n++] = (mrow){sqlite3_column_int64(st, 0), col(st, 1), col(st, 2), col(st, 3),
                        col(st, 4), col(st, 5), col(st, 6)};
    }
    sqlite3_finalize(st);
    double slo = INFINITY, shi = -INFINITY;
    for (size_t i = 0; i < n; i++) slo = fmin(slo, p[i].step), shi = fmax(shi, p[i].step);
    if (n == 0 || !isfinite(slo)) {
        free(p);
        return 0;
    }
    if (shi - slo < 1) shi = slo + 1;
    const int W = 960, ML = 92, MR = 30, PH = 150, GAP = 70, MT = 60;
    const int H = MT + 3 * PH + 2 * GAP + 50;
    char title[160];
    snprintf(title, sizeof(title), "training over steps: loss, throughput, MFU (%zu metric rows)", n);
    svgd_begin(f, "pic-metrics", W, H, title);
    svgd_title(f, 20, 24, title);
    static const struct {
        int k0, k1;
        const char *ylabel, *yfmt;
    } PANELS[3] = {{F_TRAIN, F_VAL, "loss (nats/token)", "%.2f"},
                   {F_TPS, F_TPS, "throughput (tokens/s)", "%g"},
                   {F_MFU, F_MFU_TH, "MFU (% of peak)", "%g"}};
    for (int q = 0; q < 3; q++) {
        double lo, hi;
        range_of(p, n, PANELS[q].k0, PANELS[q].k1, &lo, &hi);
        if (q > 0 && isfinite(lo)) lo = fmin(lo, 0); /* rates from zero: honest heights */
        svgd_range(&lo, &hi, 0.06);
        if (q > 0 && lo < 0) lo = 0;
        svgd_frame fr = {ML, MT + q * (PH + GAP), W - ML - MR, PH, slo, shi, lo, hi};
        svgd_axes(f, &fr, "optimizer step", PANELS[q].ylabel, "%g", PANELS[q].yfmt);
        fprintf(f, "<g class=\"panel\" data-panel=\"%s\">\n", q == 0 ? "loss" : q == 1 ? "tps" : "mfu");
        if (q == 0) {
            series(f, &fr, p, n, F_TRAIN, SVGD_COLORS[0], NULL, 0);
            series(f, &fr, p, n, F_VAL, SVGD_COLORS[1], NULL, 1);
        } else if (q == 1) {
            series(f, &fr, p, n, F_TPS, SVGD_COLORS[3], NULL, 0);
        } else {
            series(f, &fr, p, n, F_MFU, SVGD_COLORS[0], NULL, 0);
            series(f, &fr, p, n, F_MFU_TH, SVGD_COLORS[1], "6,4", 0);
        }
        fputs("</g>\n", f);
    }
    double y = MT - 14, x = ML;
    int launches = 1;
    for (size_t i = 1; i < n; i++) launches += p[i].run != p[i - 1].run;
    x = svgd_legend(f, x, y, NULL, SVGD_COLORS[0], NULL, 1, "train loss");
    fprintf(f, "<circle cx=\"%.1f\" cy=\"%.1f\" r=\"3.5\" fill=\"white\" stroke=\"%s\" "
            "stroke-width=\"2\"/>", x + 11, y - 4, SVGD_COLORS[1]);
    fprintf(f, "<text x=\"%.1f\" y=\"%.1f\">val loss</text>\n", x + 27, y);
    if (launches > 1) {
        fprintf(f, "<g stroke-opacity=\"0.55\">");
        svgd_legend(f, x + 110, y, NULL, SVGD_COLORS[0], "2,3", 1,
                    "an earlier launch's steps after its last checkpoint (dotted, faint): "
                    "recomputed");
        fputs("</g>\n", f);
    }
    y = MT + PH + GAP - 14, x = ML;
    svgd_legend(f, x, y, NULL, SVGD_COLORS[3], NULL, 1, "tokens/s of the whole job, per step");
    y = MT + 2 * (PH + GAP) - 14;
    x = svgd_legend(f, x, y, NULL, SVGD_COLORS[0], NULL, 1, "MFU of the measured sgemm peak");
    svgd_legend(f, x, y, NULL, SVGD_COLORS[1], "6,4", 1, "MFU of the theoretical peak");
    svgd_end(f);
    free(p);
    return 1;
}
