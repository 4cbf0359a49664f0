/*
 * report/svg.c — the loss-vs-wall-time picture (report/svg.h), written as SVG text by hand.
 *
 * Shape (svg_loss_draw): read the points (metrics rows placed on the job's clock: run start event + wall_s) and
 * the supervisor's failure/launch events, compute the axes' ranges, then print the elements back
 * to front (shading, grid, curves, markers, labels) into memory, and write the file atomically
 * (core/fs.h). Nothing here is clever: a fixed 960x540 view, "nice" tick steps of 1/2/5 x 10^k.
 */
#include "report/svg.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>

#include "core/check.h"
#include "core/fs.h"
#include "report/svg_draw.h"

#define W 960
#define H 540
#define ML 70
#define MR 20
#define MT 72
#define MB 60

typedef struct {
    long long run;
    double t, train, val;
} pt;

typedef struct {
    double t_detect, t_fail;
    char kind[32];
} fail_mark;

static const char *COLORS[] = {"#1f77b4", "#ff7f0e", "#9467bd", "#8c564b", "#e377c2", "#17becf",
                               "#bcbd22", "#7f7f7f"};

static double nice_step(double range, int target) {
    double raw = range / target, p = pow(10, floor(log10(raw))), f = raw / p;
    return (f < 1.5 ? 1 : f < 3.5 ? 2 : f < 7.5 ? 5 : 10) * p;
}

static double col_real(sqlite3_stmt *st, int i) {
    return sqlite3_column_type(st, i) == SQLITE_NULL ? NAN : sqlite3_column_double(st, i);
}

/* What svg_loss_draw plots: the points, the supervisor's failures and launches, the axes'
 * ranges (t: job wall time, s; loss: nats/token) and the plot area (pixels). */
typedef struct {
    pt *p;
    size_t n;
    fail_mark fm[256];
    double launches[256];
    int nf, nl;
    double t0, t1, lo, hi, pw, ph;
} loss_pic;

#define X(t) (ML + ((t) - L->t0) / (L->t1 - L->t0) * L->pw)
#define Y(v) (MT + (L->hi - (v)) / (L->hi - L->lo) * L->ph)

/* svg_loss_draw, step 1: the metrics rows on the job's clock (run start event + wall_s), in
 * L->p[0..n); 0 with err set when they cannot be read. */
static int loss_load_points(sqlite3 *db, loss_pic *L, char *err, size_t errlen) {
    sqlite3_stmt *st = NULL;
    const char *sql =
        "SELECT m.run_id, COALESCE((SELECT MIN(time) FROM events v WHERE v.run_id = m.run_id AND"
        " v.kind = 'start'), r.started_at) + m.wall_s, m.train_loss, m.val_loss FROM metrics m"
        " JOIN runs r ON r.id = m.run_id WHERE m.wall_s IS NOT NULL ORDER BY r.started_at,"
        " m.run_id, m.wall_s, m.rowid";
    if (sqlite3_prepare_v2(db, sql, -1, &st, NULL) != SQLITE_OK) {
        snprintf(err, errlen, "reading metrics: %s", sqlite3_errmsg(db));
        return 0;
    }
    size_t n = 0, cap = 1024;
    pt *p = mallocCheck(cap * sizeof(pt));
    while (sqlite3_step(st) == SQLITE_ROW) {
        if (n == cap) {
            cap *= 2;
            p = realloc(p, cap * sizeof(pt));
            mtCheck(p != NULL, "out of memory");
        }
        p[n++] = (pt){sqlite3_column_int64(st, 0), col_real(st, 1), col_real(st, 2), col_real(st, 3)};
    }
    sqlite3_finalize(st);
    L->p = p, L->n = n;
    return 1;
}

/* svg_loss_draw, step 2: the supervisor's failure (kind, failed_at from the detail) and launch
 * events, at most 256 of each. */
static void loss_load_marks(sqlite3 *db, loss_pic *L) {
    sqlite3_stmt *st = NULL;
    L->nf = L->nl = 0;
    if (sqlite3_prepare_v2(db, "SELECT time, kind, detail FROM events WHERE run_id = 0 AND kind IN"
                           " ('failure', 'launch') ORDER BY time, rowid", -1, &st, NULL) != SQLITE_OK)
        return;
    while (sqlite3_step(st) == SQLITE_ROW) {
        const char *kind = (const char *)sqlite3_column_text(st, 1);
        double t = sqlite3_column_double(st, 0);
        if (kind && !strcmp(kind, "launch") && L->nl < 256) L->launches[L->nl++] = t;
        if (kind && !strcmp(kind, "failure") && L->nf < 256) {
            fail_mark *f = &L->fm[L->nf++];
            f->t_detect = f->t_fail = t;
            snprintf(f->kind, sizeof(f->kind), "failure");
            const char *d = (const char *)sqlite3_column_text(st, 2);
            cJSON *j = d ? cJSON_Parse(d) : NULL;
            const cJSON *k = cJSON_GetObjectItemCaseSensitive(j, "kind");
            const cJSON *fa = cJSON_GetObjectItemCaseSensitive(j, "failed_at");
            if (cJSON_IsString(k)) snprintf(f->kind, sizeof(f->kind), "%s", k->valuestring);
            if (cJSON_IsNumber(fa) && fa->valuedouble <= t) f->t_fail = fa->valuedouble;
            cJSON_Delete(j);
        }
    }
    sqlite3_finalize(st);
}

/* svg_loss_draw, step 3: the axes' ranges over the points, the job's span (e) and the marks,
 * the loss axis padded 5%; 0 with err set when there is no finite loss to plot. */
static int loss_ranges(loss_pic *L, const ettr_report *e, char *err, size_t errlen) {
    const pt *p = L->p;
    double t0 = INFINITY, t1 = -INFINITY, lo = INFINITY, hi = -INFINITY;
    for (size_t i = 0; i < L->n; i++) {
        if (isfinite(p[i].t)) t0 = fmin(t0, p[i].t), t1 = fmax(t1, p[i].t);
        double ls[2] = {p[i].train, p[i].val};
        for (int k = 0; k < 2; k++)
            if (isfinite(ls[k])) lo = fmin(lo, ls[k]), hi = fmax(hi, ls[k]);
    }
    if (!isfinite(lo) || !isfinite(t0)) {
        snprintf(err, errlen, "no losses logged: nothing to plot");
        return 0;
    }
    if (e && e->wall_s > 0) t0 = e->job_start, t1 = fmax(t1, e->job_end);
    for (int i = 0; i < L->nl; i++) t0 = fmin(t0, L->launches[i]);
    for (int i = 0; i < L->nf; i++) t1 = fmax(t1, L->fm[i].t_detect);
    if (t1 - t0 < 1e-6) t1 = t0 + 1;
    if (hi - lo < 1e-6) hi = lo + 1;
    double pad = 0.05 * (hi - lo);
    lo -= pad;
    hi += pad;
    L->t0 = t0, L->t1 = t1, L->lo = lo, L->hi = hi;
    L->pw = W - ML - MR, L->ph = H - MT - MB;
    return 1;
}

/* svg_loss_draw, step 4: the downtime shading (failure -> first point after the detection),
 * the grid, axes and their labels. */
static void loss_draw_frame(FILE *f, const loss_pic *L) {
    const double t0 = L->t0, t1 = L->t1, lo = L->lo, hi = L->hi, pw = L->pw, ph = L->ph;
    for (int i = 0; i < L->nf; i++) {
        double end = t1;
        for (size_t k = 0; k < L->n; k++)
            if (L->p[k].t > L->fm[i].t_detect && isfinite(L->p[k].train)) {
                end = L->p[k].t;
                break;
            }
        fprintf(f, "<rect x=\"%.1f\" y=\"%d\" width=\"%.1f\" height=\"%.0f\" fill=\"#d62728\" "
                "fill-opacity=\"0.12\"/>\n", X(L->fm[i].t_fail), MT, X(end) - X(L->fm[i].t_fail),
                ph);
    }
    double ts = nice_step(t1 - t0, 8), ls = nice_step(hi - lo, 6);
    for (double v = ceil(lo / ls) * ls; v <= hi; v += ls)
        fprintf(f, "<line x1=\"%d\" y1=\"%.1f\" x2=\"%d\" y2=\"%.1f\" stroke=\"#ddd\"/>"
                "<text x=\"%d\" y=\"%.1f\" text-anchor=\"end\">%g</text>\n",
                ML, Y(v), W - MR, Y(v), ML - 6, Y(v) + 4, v);
    for (double v = 0; v <= t1 - t0 + 1e-9; v += ts)
        fprintf(f, "<line x1=\"%.1f\" y1=\"%d\" x2=\"%.1f\" y2=\"%d\" stroke=\"#ddd\"/>"
                "<text x=\"%.1f\" y=\"%d\" text-anchor=\"middle\">%g</text>\n",
                X(t0 + v), MT, X(t0 + v), H - MB, X(t0 + v), H - MB + 16, v);
    fprintf(f, "<rect x=\"%d\" y=\"%d\" width=\"%.0f\" height=\"%.0f\" fill=\"none\" "
            "stroke=\"#333\"/>\n", ML, MT, pw, ph);
    fprintf(f, "<text x=\"%.0f\" y=\"%d\" text-anchor=\"middle\">job wall time (s)</text>\n"
            "<text x=\"16\" y=\"%.0f\" text-anchor=\"middle\" transform=\"rotate(-90 16 %.0f)\">"
            "loss (nats/token)</text>\n", ML + pw / 2, H - 18, MT + ph / 2, MT + ph / 2);
}

/* svg_loss_draw, step 5: the relaunch lines, the train loss (one polyline per run) with its
 * val-loss dots, and the failure lines. */
static void loss_draw_curves(FILE *f, const loss_pic *L) {
    const pt *p = L->p;
    const size_t n = L->n;
    for (int i = 1; i < L->nl; i++)
        fprintf(f, "<line x1=\"%.1f\" y1=\"%d\" x2=\"%.1f\" y2=\"%d\" stroke=\"#2ca02c\" "
                "stroke-dasharray=\"5,4\"/><text x=\"%.1f\" y=\"%d\" fill=\"#2ca02c\" "
                "font-size=\"10\">restart %d</text>\n", X(L->launches[i]), MT, X(L->launches[i]),
                H - MB, X(L->launches[i]) + 3, H - MB - 6, i);
    int run_no = 0;
    for (size_t i = 0; i < n;) {
        size_t j = i;
        fprintf(f, "<polyline fill=\"none\" stroke=\"%s\" stroke-width=\"1.5\" points=\"",
                COLORS[run_no % 8]);
        for (; j < n && p[j].run == p[i].run; j++)
            if (isfinite(p[j].train)) fprintf(f, "%.1f,%.1f ", X(p[j].t), Y(p[j].train));
        fprintf(f, "\"/>\n");
        for (size_t k = i; k < j; k++)
            if (isfinite(p[k].val))
                fprintf(f, "<circle cx=\"%.1f\" cy=\"%.1f\" r=\"3.5\" fill=\"white\" stroke=\"%s\" "
                        "stroke-width=\"2\"/>\n", X(p[k].t), Y(p[k].val), SVGD_COLORS[1]);
                /* the val-loss marker of every picture (report/svg_metrics.c): one look */
        i = j;
        run_no++;
    }
    for (int i = 0; i < L->nf; i++)
        fprintf(f, "<line x1=\"%.1f\" y1=\"%d\" x2=\"%.1f\" y2=\"%d\" stroke=\"#d62728\" "
                "stroke-width=\"2\"/><text x=\"%.1f\" y=\"%d\" fill=\"#d62728\" "
                "text-anchor=\"middle\">%s</text>\n", X(L->fm[i].t_fail), MT, X(L->fm[i].t_fail),
                H - MB, X(L->fm[i].t_fail), MT - 6, L->fm[i].kind);
}
#undef X
#undef Y

/* svg_loss_draw, step 6: the title (ETTR, failures, MTTR of e when known) and the legend. */
static void loss_draw_title(FILE *f, const ettr_report *e) {
    char title[256];
    if (e && isfinite(e->ettr))
        snprintf(title, sizeof(title), "loss vs wall time: ETTR %.3f, %d failure%s, MTTR %s",
                 e->ettr, e->failures, e->failures == 1 ? "" : "s", "");
    else
        snprintf(title, sizeof(title), "loss vs wall time");
    if (e && isfinite(e->mttr_s)) {
        size_t L = strlen(title);
        snprintf(title + L, sizeof(title) - L, "%.1f s", e->mttr_s);
    } else if (e && isfinite(e->ettr)) {
        size_t L = strlen(title);
        snprintf(title + L, sizeof(title) - L, "n/a");
    }
    fprintf(f, "<text x=\"%d\" y=\"22\" font-size=\"15\" font-weight=\"bold\">%s</text>\n", ML,
            title);
    fprintf(f, "<text x=\"%d\" y=\"40\" font-size=\"11\" fill=\"#555\">lines: train loss (one "
            "colour per launch) · dots: val loss · red: failure (shaded until the next step) · "
            "dashed green: relaunch</text>\n", ML);
}

int svg_loss_draw(sqlite3 *db, const ettr_report *e, const svg_panel *beside, FILE *f, char *err,
                  size_t errlen) {
    loss_pic L;
    if (!loss_load_points(db, &L, err, errlen)) return 0;
    loss_load_marks(db, &L);
    if (!loss_ranges(&L, e, err, errlen)) {
        free(L.p);
        return 0;
    }
    const int WT = W + (beside && beside->width > 0 ? beside->width : 0);
    fprintf(f, "<svg xmlns=\"http://www.w3.org/2000/svg\" id=\"pic-ettr\" class=\"mt-picture\" width=\"%d\" height=\"%d\" viewBox=\"0 0 "
               "%d %d\" font-family=\"sans-serif\" font-size=\"12\">\n"
               "<rect width=\"%d\" height=\"%d\" fill=\"white\"/>\n", WT, H, WT, H, WT, H);
    loss_draw_frame(f, &L);
    loss_draw_curves(f, &L);
    loss_draw_title(f, e);
    if (beside && beside->width > 0) beside->draw(beside->user, f, W, H);
    fprintf(f, "</svg>\n");
    free(L.p);
    return 1;
}

int svg_write_file(const char *path, const char *text, size_t len, char *err, size_t errlen) {
    static const char PROLOG[] = "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n";
    char *all = mallocCheck(sizeof(PROLOG) + len);
    memcpy(all, PROLOG, sizeof(PROLOG) - 1);
    memcpy(all + sizeof(PROLOG) - 1, text, len);
    int rc = fs_write_atomic(path, all, sizeof(PROLOG) - 1 + len, err, errlen);
    free(all);
    return rc;
}

int svg_loss_plot(sqlite3 *db, const ettr_report *e, const svg_panel *beside, const char *path,
                  char *err, size_t errlen) {
    /* the picture is printed into memory, then written atomically (core/fs.h) */
    char *text = NULL;
    size_t text_len = 0;
    FILE *f = open_memstream(&text, &text_len);
    mtCheck(f != NULL, "out of memory");
    int drawn = svg_loss_draw(db, e, beside, f, err, errlen);
    if (!drawn) { /* nothing to plot yet: a picture that says so, as the HTML page does */
        svgd_begin(f, "pic-ettr", W, 120, "loss vs wall time");
        svgd_title(f, ML, 40, "loss vs wall time");
        fputs("<text x=\"70\" y=\"75\" fill=\"#555\">", f);
        svgd_text(f, err);
        fputs("</text>\n", f);
        svgd_end(f);
    }
    mtCheck(fclose(f) == 0, "out of memory");
    char why[256];
    snprintf(why, sizeof(why), "%s", err);
    int rc = svg_write_file(path, text, text_len, err, errlen);
    free(text);
    if (rc == 0 && !drawn) snprintf(err, errlen, "%s", why);
    return rc == 0 ? !drawn : -1;
}

const svg_picture SVG_PICTURES[] = {
    {"metrics", "Loss, throughput and MFU over steps", svg_metrics},
    {"pipeline", "Pipeline timeline (measured)", svg_pipeline},
    {"moe", "Mixture of experts: expert load and drops", svg_moe},
    {"layout", "Parallel layout", svg_layout},
    {NULL, NULL, NULL},
};
