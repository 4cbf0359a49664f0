/*
 * report/svg_pipeline.c — the measured pipeline timeline (report/svg.h: svg_pipeline).
 *
 * The pipeline picture of the papers (Huang et al. 2019, fig. 2; Narayanan et al. 2021, fig. 4;
 * Qi et al. 2024, fig. 3), but drawn from what happened: one row per stage, each microbatch's
 * forward and backward a box over the measured time (event pp_timeline, logged by the trainer
 * from the spans parallel/pp.c stamps), the gaps between boxes the stage's idle time. Every
 * schedule of parallel/pp.h: with interleaved chunks a box is labelled "microbatch.chunk"; with
 * zb-h1 the backward is two boxes, B (input gradient) and W (weight gradient). Which step: of the
 * steps every stage logged, the one of median duration (pick_step) — typical, neither the first
 * step's warm-up nor a step a busy machine stretched.
 *
 * Shape: pick the step, read its events (one per stage, times as ms offsets from each
 * stage's own t0, put on one clock by their unix t0), then draw rows back to front: the idle
 * background (dotted), the boxes (forward dark blue, backward light yellow with hatching, W
 * mid green with a dashed outline, so the three differ in lightness and texture, not only in
 * hue), microbatch numbers on boxes wide enough, the measured idle share per stage and the
 * schedule's ideal idle fraction (pp_idle_formula; for zb-h1 from the measured mean pass times)
 * in the title.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>
#include <sqlite3.h>

#include "core/check.h"
#include "parallel/pp.h"
#include "report/svg.h"
#include "report/svg_draw.h"

#define PP_MAX_STAGES 64

typedef struct {
    int have, M;        /* M: (microbatch, chunk) pairs, chunks · microbatches */
    int chunks, split;  /* model chunks; 1 when W spans were logged (zb-h1) */
    double t0;          /* unix s */
    double *f, *b, *w;  /* (2M) [start, end] ms after t0; w only when split */
} stage_row;

static int num_array(const cJSON *a, double *out, int n) {
    if (!cJSON_IsArray(a) || cJSON_GetArraySize(a) != n) return -1;
    int i = 0;
    for (const cJSON *x = a->child; x; x = x->next, i++) out[i] = cJSON_IsNumber(x) ? x->valuedouble : NAN;
    return 0;
}

static int cmp_win(const void *a, const void *b) {
    const double *x = a, *y = b;
    if (x[1] != y[1]) return (x[1] > y[1]) - (x[1] < y[1]);
    return (x[0] < y[0]) - (x[0] > y[0]); /* equal durations: the newer step first */
}

/* Of the steps that every stage of the newest traced run logged, the one of median duration
 * (first forward to last backward over all stages): a typical step, not the first (warm-up) nor
 * one a busy machine stretched. Returns the step, or -1 when no step is complete. */
static int pick_step(sqlite3 *db) {
    sqlite3_stmt *st = NULL;
    const char *sql = "SELECT json_extract(detail, '$.step'), json_extract(detail, '$.stages'),"
                      " 1e3 * json_extract(detail, '$.t0') + json_extract(detail, '$.forward_ms[0]'),"
                      " 1e3 * json_extract(detail, '$.t0') + MAX((SELECT MAX(value) FROM"
                      " json_each(detail, '$.backward_ms')), COALESCE((SELECT MAX(value) FROM"
                      " json_each(detail, '$.weight_ms')), 0)) FROM events"
                      " WHERE kind = 'pp_timeline' AND run_id = (SELECT MAX(run_id) FROM events"
                      " WHERE kind = 'pp_timeline') ORDER BY 1, rowid";
    if (sqlite3_prepare_v2(db, sql, -1, &st, NULL) != SQLITE_OK) return -1;
    size_t n = 0, cap = 64;
    double *w = mallocCheck(cap * 2 * sizeof(double)); /* (step, duration ms) of complete steps */
    int cur = -1, got = 0, need = 0;
    double lo = INFINITY, hi = -INFINITY;
    for (int rc = sqlite3_step(st);; rc = sqlite3_step(st)) {
        int row = rc == SQLITE_ROW, s = row ? sqlite3_column_int(st, 0) : -2;
        if (s != cur) { /* close the previous step */
            if (cur >= 0 && got == need && need > 0 && hi > lo) {
                if (n == cap) {
                    cap *= 2;
                    w = realloc(w, cap * 2 * sizeof(double));
                    mtCheck(w != NULL, "out of memory");
                }
                w[2 * n] = cur, w[2 * n + 1] = hi - lo, n++;
            }
            cur = s, got = 0, lo = INFINITY, hi = -INFINITY;
        }
        if (!row) break;
        need = sqlite3_column_int(st, 1);
        got++;
        lo = fmin(lo, sqlite3_column_double(st, 2));
        hi = fmax(hi, sqlite3_column_double(st, 3));
    }
    sqlite3_finalize(st);
    int step = -1;
    if (n > 0) {
        qsort(w, n, 2 * sizeof(double), cmp_win);
        step = (int)w[2 * ((n - 1) / 2)];
    }
    free(w);
    return step;
}

/* Step `want` of the newest traced run, one row per stage, into rows[0..P). Returns P (0: not
 * every stage logged it). */
static int load_step(sqlite3 *db, int want, stage_row *rows, int *step_out, char *schedule,
                     size_t sl) {
    sqlite3_stmt *st = NULL;
    const char *sql = "SELECT detail FROM events WHERE kind = 'pp_timeline' AND run_id = (SELECT"
                      " MAX(run_id) FROM events WHERE kind = 'pp_timeline') AND"
                      " json_extract(detail, '$.step') = ?1 ORDER BY rowid";
    if (sqlite3_prepare_v2(db, sql, -1, &st, NULL) != SQLITE_OK) return 0;
    sqlite3_bind_int(st, 1, want);
    int P = 0, step = -1, got = 0;
    while (sqlite3_step(st) == SQLITE_ROW) {
        const char *d = (const char *)sqlite3_column_text(st, 0);
        cJSON *j = d ? cJSON_Parse(d) : NULL;
        const cJSON *js = cJSON_GetObjectItemCaseSensitive(j, "step");
        const cJSON *jg = cJSON_GetObjectItemCaseSensitive(j, "stage");
        const cJSON *jp = cJSON_GetObjectItemCaseSensitive(j, "stages");
        const cJSON *jt = cJSON_GetObjectItemCaseSensitive(j, "t0");
        const cJSON *jf = cJSON_GetObjectItemCaseSensitive(j, "forward_ms");
        const cJSON *jsch = cJSON_GetObjectItemCaseSensitive(j, "schedule");
        if (!cJSON_IsNumber(js) || !cJSON_IsNumber(jg) || !cJSON_IsNumber(jp) ||
            !cJSON_IsNumber(jt) || !cJSON_IsArray(jf)) {
            cJSON_Delete(j);
            continue;
        }
        int s = js->valueint, g = jg->valueint, p = jp->valueint, M = cJSON_GetArraySize(jf) / 2;
        if (s != step) { /* a new (older) step: start over */
            for (int i = 0; i < P; i++) free(rows[i].f), rows[i] = (stage_row){0};
            step = s, got = 0;
            P = p > 0 && p <= PP_MAX_STAGES ? p : 0;
        }
        if (g >= 0 && g < P && !rows[g].have && M > 0) {
            stage_row *r = &rows[g];
            r->f = callocCheck(6 * (size_t)M, sizeof(double));
            r->b = r->f + 2 * M, r->w = r->f + 4 * M;
            const cJSON *jw = cJSON_GetObjectItemCaseSensitive(j, "weight_ms");
            const cJSON *jc = cJSON_GetObjectItemCaseSensitive(j, "chunks");
            r->split = jw != NULL;
            r->chunks = cJSON_IsNumber(jc) && jc->valueint > 0 ? jc->valueint : 1;
            if (num_array(jf, r->f, 2 * M) == 0 &&
                num_array(cJSON_GetObjectItemCaseSensitive(j, "backward_ms"), r->b, 2 * M) == 0 &&
                (!jw || num_array(jw, r->w, 2 * M) == 0) && M % r->chunks == 0) {
                r->have = 1, r->M = M, r->t0 = jt->valuedouble;
                if (cJSON_IsString(jsch)) snprintf(schedule, sl, "%s", jsch->valuestring);
                got++;
            } else {
                free(r->f), *r = (stage_row){0};
            }
        }
        cJSON_Delete(j);
        if (P > 0 && got == P) break;
    }
    sqlite3_finalize(st);
    if (P == 0 || got < P) {
        for (int i = 0; i < P; i++) free(rows[i].f);
        return 0;
    }
    *step_out = step;
    return P;
}

enum { BOX_F, BOX_B, BOX_W };
#define W_FILL "#7FBF7F"

/* One box: a forward (dark, white label), a backward (light + hatch, dark label) or a W (mid
 * green, dashed outline, dark label). label: the microbatch, "i.c" with chunks. */
static void box(FILE *f, const char *id, double x, double y, double w, double h, int kind,
                const char *label, const char *tip) {
    static const char *const cls[] = {"pp-forward", "pp-backward", "pp-weight"};
    const char *fill = kind == BOX_F ? SVGD_COLORS[0] : kind == BOX_B ? "#F2D58A" : W_FILL;
    fprintf(f, "<g class=\"%s\"><title>%s</title><rect x=\"%.2f\" y=\"%.1f\" width=\"%.2f\" "
            "height=\"%.1f\" fill=\"%s\" stroke=\"#222\" stroke-width=\"0.6\"%s/>", cls[kind],
            tip, x, y, w, h, fill, kind == BOX_W ? " stroke-dasharray=\"3 2\"" : "");
    if (kind == BOX_B)
        fprintf(f, "<rect x=\"%.2f\" y=\"%.1f\" width=\"%.2f\" height=\"%.1f\" fill=\"url(#%s-hatch)\" "
                "opacity=\"0.35\"/>", x, y, w, h, id);
    if (w >= 7.0 * strlen(label))
        fprintf(f, "<text x=\"%.2f\" y=\"%.1f\" text-anchor=\"middle\" font-size=\"11\" "
                "font-weight=\"bold\" fill=\"%s\">%s</text>", x + w / 2, y + h / 2 + 4,
                kind == BOX_F ? "white" : "#222", label);
    fputs("</g>\n", f);
}

int svg_pipeline(sqlite3 *db, FILE *f) {
    stage_row rows[PP_MAX_STAGES] = {{0}};
    int step = 0;
    char schedule[16] = "1f1b";
    int want = pick_step(db);
    int P = want >= 0 ? load_step(db, want, rows, &step, schedule, sizeof(schedule)) : 0;
    if (P == 0) return 0;
    int V = rows[0].chunks, M = rows[0].M / V, split = rows[0].split;
    /* one clock: ms after the earliest stage's t0 */
    double base = INFINITY, end = 0;
    for (int s = 0; s < P; s++) base = fmin(base, rows[s].t0);
    double busy[PP_MAX_STAGES] = {0}, lo = INFINITY, sum[3] = {0, 0, 0}; /* F, B, W ms */
    for (int s = 0; s < P; s++) {
        stage_row *r = &rows[s];
        double sh = (r->t0 - base) * 1e3;
        for (int i = 0; i < 2 * r->M; i++) r->f[i] += sh, r->b[i] += sh, r->w[i] += r->split ? sh : 0;
        for (int i = 0; i < r->M; i++) {
            double df = r->f[2 * i + 1] - r->f[2 * i], db = r->b[2 * i + 1] - r->b[2 * i];
            double dw = r->split ? r->w[2 * i + 1] - r->w[2 * i] : 0;
            lo = fmin(lo, fmin(r->f[2 * i], r->b[2 * i]));
            end = fmax(end, fmax(r->f[2 * i + 1], fmax(r->b[2 * i + 1], r->split ? r->w[2 * i + 1] : 0)));
            busy[s] += df + db + dw;
            sum[0] += df, sum[1] += db, sum[2] += dw;
        }
    }
    if (!isfinite(lo)) lo = 0;
    for (int s = 0; s < P; s++) /* origin: the first span of any stage */
        for (int i = 0; i < 2 * rows[s].M; i++)
            rows[s].f[i] -= lo, rows[s].b[i] -= lo, rows[s].w[i] -= rows[s].split ? lo : 0;
    end -= lo;
    lo = 0;
    const int W = 960, rowh = 34, gap = 10, ML = 80, MR = 120, MT = 70;
    const int H = MT + P * (rowh + gap) + 40;
    svgd_frame fr = {ML, MT, W - ML - MR, P * (rowh + gap) - gap, lo, end > lo ? end : lo + 1, 0, 1};
    char title[384];
    double win = fr.xhi - fr.xlo, idle_sum = 0;
    for (int s = 0; s < P; s++) idle_sum += 1 - busy[s] / win;
    pp_schedule sch = PP_1F1B;
    if (pp_schedule_parse(schedule, &sch) != 0) sch = PP_1F1B;
    double ideal = pp_idle_formula(sch, P, M, V, sum[0], sum[1], sum[2]); /* sums: ratios count */
    static const char *const label[] = {"1F1B", "GPipe", "interleaved 1F1B", "ZB-H1"};
    static const char *const form[] = {"(p−1)/(m+p−1)", "(p−1)/(m+p−1)", "(p−1)/(v·m+p−1)",
                                       "bubble (p−1)(F+B−W)"};
    char shape[80];
    if (V > 1) snprintf(shape, sizeof(shape), "%d stages × %d chunks × %d microbatches", P, V, M);
    else snprintf(shape, sizeof(shape), "%d stages × %d microbatches", P, M);
    /* ZB-H1's formula holds while W costs no more than B (parallel/pp.h) */
    const char *regime = sch == PP_ZBH1 && sum[2] > sum[1] ? " (assumes W ≤ B; here W > B)" : "";
    snprintf(title, sizeof(title), "pipeline timeline, step %d: %s, %s — measured idle %.0f%%, "
             "ideal %s %.0f%%%s", step, label[sch], shape, 100 * idle_sum / P, form[sch],
             100 * ideal, regime);
    svgd_begin(f, "pic-pipeline", W, H, title);
    svgd_patterns(f, "pic-pipeline");
    svgd_title(f, 20, 24, title);
    /* time axis (no y grid: the rows are stages) */
    double xs = svgd_nice_step(win, 10);
    for (double v = ceil(fr.xlo / xs) * xs; v <= fr.xhi + 1e-9; v += xs)
        fprintf(f, "<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" stroke=\"#ccc\"/>"
                "<text x=\"%.1f\" y=\"%.1f\" text-anchor=\"middle\">%g</text>\n", svgd_x(&fr, v),
                fr.y0 - 4, svgd_x(&fr, v), fr.y0 + fr.h + 4, svgd_x(&fr, v), fr.y0 + fr.h + 18, v);
    fprintf(f, "<text x=\"%.1f\" y=\"%.1f\" text-anchor=\"middle\">time (ms) since the step's "
            "first forward began, one clock for all stages</text>\n", fr.x0 + fr.w / 2, fr.y0 + fr.h + 36);
    for (int s = 0; s < P; s++) {
        double y = MT + s * (rowh + gap);
        fprintf(f, "<g class=\"pp-stage\" data-stage=\"%d\"><rect x=\"%.1f\" y=\"%.1f\" "
                "width=\"%.1f\" height=\"%d\" fill=\"url(#pic-pipeline-dots)\" stroke=\"#999\"/>"
                "<text x=\"%d\" y=\"%.1f\" text-anchor=\"end\" font-weight=\"bold\">stage %d</text>"
                "<text x=\"%.1f\" y=\"%.1f\">idle %.0f%%</text></g>\n", s, fr.x0, y, fr.w, rowh,
                ML - 8, y + rowh / 2 + 4, s, fr.x0 + fr.w + 8, y + rowh / 2 + 4,
                100 * (1 - busy[s] / win));
        for (int i = 0; i < rows[s].M; i++) {
            static const char *const what[] = {"forward", "backward", "W (weight gradient)"};
            const double *span[] = {rows[s].f, rows[s].b, rows[s].w};
            char tip[160], lab[24], ch[24] = "";
            int micro = i % M, chunk = i / M;
            if (V > 1) snprintf(lab, sizeof(lab), "%d.%d", micro, chunk);
            else snprintf(lab, sizeof(lab), "%d", micro);
            if (V > 1) snprintf(ch, sizeof(ch), ", chunk %d", chunk);
            for (int k = 0; k < (rows[s].split ? 3 : 2); k++) {
                double a = span[k][2 * i], b = span[k][2 * i + 1];
                snprintf(tip, sizeof(tip), "stage %d %s%s of microbatch %d%s: %.2f–%.2f ms", s,
                         k == 1 && rows[s].split ? "B (input gradient)" : "",
                         k == 1 && rows[s].split ? "" : what[k], micro, ch, a, b);
                box(f, "pic-pipeline", svgd_x(&fr, a), y + 2,
                    fmax(svgd_x(&fr, b) - svgd_x(&fr, a), 0.8), rowh - 4, k, lab, tip);
            }
        }
    }
    double lx = 20, ly = 50, bx;
    lx = svgd_legend(f, lx, ly, SVGD_COLORS[0], NULL, NULL, 0,
                     V > 1 ? "forward of microbatch i, chunk c (i.c)" : "forward of microbatch i");
    bx = lx;
    lx = svgd_legend(f, lx, ly, "#F2D58A", NULL, NULL, 0,
                     split ? "B: input gradient" : "backward of microbatch i");
    fprintf(f, "<rect x=\"%.1f\" y=\"%.1f\" width=\"22\" height=\"12\" "
            "fill=\"url(#pic-pipeline-hatch)\" opacity=\"0.35\"/>\n", bx, ly - 10);
    if (split) lx = svgd_legend(f, lx, ly, W_FILL, "#222", NULL, 0, "W: weight gradient");
    svgd_legend(f, lx, ly, "url(#pic-pipeline-dots)", "#999", NULL, 0,
                "idle (waiting for a neighbour stage)");
    svgd_end(f);
    for (int s = 0; s < P; s++) free(rows[s].f);
    return 1;
}
