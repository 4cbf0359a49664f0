/*
 * report/svg_moe.c — mixture-of-experts routing over training (report/svg.h: svg_moe): a heat map
 * of expert load per MoE layer over steps, and the drop rate per layer below it.
 *
 * Data: the trainer's per-step event "moe" (core/events.h), whose load is the (layer, expert)
 * assignments before capacity summed over the step's microbatches and the job, and whose
 * dropped_layer counts the assignments past capacity. The heat map shows load relative to a
 * balanced router: share of the layer's assignments × E, so 1 = balanced, 0 = an expert
 * starved, 2 = twice its share (clamped there). The scale is one hue from white to dark blue,
 * monotone in lightness, so it reads the same in greyscale. A step logged twice (recomputed
 * after a restart) shows its last record.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>
#include <sqlite3.h>

#include "core/check.h"
#include "report/svg.h"
#include "report/svg_draw.h"

#define MOE_MAX_ROWS 256 /* (layers × experts) drawn at most */

typedef struct {
    int nl, E, max_step;
    int *layer;   /* (nl) global layer index */
    double *load; /* (max_step + 1, nl, E); NAN = no record */
    double *drop; /* (max_step + 1, nl) */
} moe_data;

/* Sequential white → blue → dark blue for t in [0, 1] (ColorBrewer "Blues" end points). */
static void heat(double t, char *out, size_t n) {
    static const double S[3][3] = {{247, 251, 255}, {107, 174, 214}, {8, 48, 107}};
    t = t < 0 ? 0 : t > 1 ? 1 : t;
    int k = t < 0.5 ? 0 : 1;
    double u = t < 0.5 ? t / 0.5 : (t - 0.5) / 0.5;
    snprintf(out, n, "#%02x%02x%02x", (int)(S[k][0] + u * (S[k + 1][0] - S[k][0])),
             (int)(S[k][1] + u * (S[k + 1][1] - S[k][1])), (int)(S[k][2] + u * (S[k + 1][2] - S[k][2])));
}

static int load(sqlite3 *db, moe_data *m) {
    sqlite3_stmt *st = NULL;
    *m = (moe_data){0};
    if (sqlite3_prepare_v2(db, "SELECT detail FROM events WHERE kind = 'moe' AND json_extract("
                           "detail, '$.load') IS NOT NULL ORDER BY time, rowid", -1, &st, NULL) != SQLITE_OK)
        return 0;
    int cap = 0;
    while (sqlite3_step(st) == SQLITE_ROW) {
        const char *d = (const char *)sqlite3_column_text(st, 0);
        cJSON *j = d ? cJSON_Parse(d) : NULL;
        const cJSON *js = cJSON_GetObjectItemCaseSensitive(j, "step");
        const cJSON *jl = cJSON_GetObjectItemCaseSensitive(j, "load");
        const cJSON *jd = cJSON_GetObjectItemCaseSensitive(j, "dropped_layer");
        const cJSON *jy = cJSON_GetObjectItemCaseSensitive(j, "layers");
        const cJSON *je = cJSON_GetObjectItemCaseSensitive(j, "experts");
        int nl = cJSON_GetArraySize(jy), E = cJSON_IsNumber(je) ? je->valueint : 0;
        int step = cJSON_IsNumber(js) ? js->valueint : -1;
        if (step < 0 || nl <= 0 || E <= 0 || cJSON_GetArraySize(jl) != nl * E ||
            cJSON_GetArraySize(jd) != nl || (m->nl && (nl != m->nl || E != m->E)) ||
            nl * E > MOE_MAX_ROWS || step > 10000000) {
            cJSON_Delete(j);
            continue;
        }
        if (!m->nl) {
            m->nl = nl, m->E = E;
            m->layer = mallocCheck(nl * sizeof(int));
            int i = 0;
            for (const cJSON *x = jy->child; x; x = x->next) m->layer[i++] = x->valueint;
        }
        if (step >= cap) { /* grow, new steps NAN */
            int nc = cap ? cap : 64;
            while (nc <= step) nc *= 2;
            m->load = realloc(m->load, (size_t)nc * nl * E * sizeof(double));
            m->drop = realloc(m->drop, (size_t)nc * nl * sizeof(double));
            mtCheck(m->load && m->drop, "out of memory");
            for (size_t i = (size_t)cap * nl * E; i < (size_t)nc * nl * E; i++) m->load[i] = NAN;
            for (size_t i = (size_t)cap * nl; i < (size_t)nc * nl; i++) m->drop[i] = NAN;
            cap = nc;
        }
        int i = 0;
        for (const cJSON *x = jl->child; x; x = x->next, i++)
            m->load[(size_t)step * nl * E + i] = cJSON_IsNumber(x) ? x->valuedouble : NAN;
        i = 0;
        for (const cJSON *x = jd->child; x; x = x->next, i++)
            m->drop[(size_t)step * nl + i] = cJSON_IsNumber(x) ? x->valuedouble : NAN;
        if (step > m->max_step) m->max_step = step;
        cJSON_Delete(j);
    }
    sqlite3_finalize(st);
    return m->nl > 0;
}

static void moe_free_data(moe_data *m) {
    free(m->layer);
    free(m->load);
    free(m->drop);
}

int svg_moe(sqlite3 *db, FILE *f) {
    moe_data m;
    if (!load(db, &m)) {
        moe_free_data(&m);
        return 0;
    }
    const int nl = m.nl, E = m.E, S = m.max_step;
    int s_lo = 1;
    while (s_lo < S && isnan(m.load[(size_t)s_lo * nl * E])) s_lo++;
    const int rows = nl * E, W = 960, ML = 110, MR = 110, MT = 64;
    const double rh = fmin(18, fmax(4, 300.0 / rows)), hm_h = rh * rows + (nl - 1) * 6;
    const int DH = 170, H = (int)(MT + hm_h + 70 + DH + 60);
    double tot_drop = 0, tot_load = 0;
    for (int s = s_lo; s <= S; s++)
        for (int l = 0; l < nl; l++) {
            double d = m.drop[(size_t)s * nl + l];
            if (isnan(d)) continue;
            tot_drop += d;
            for (int e = 0; e < E; e++) tot_load += m.load[((size_t)s * nl + l) * E + e];
        }
    char title[200];
    snprintf(title, sizeof(title), "MoE routing: %d layer%s × %d experts, steps %d–%d — %.1f%% of "
             "assignments dropped", nl, nl == 1 ? "" : "s", E, s_lo, S,
             tot_load > 0 ? 100 * tot_drop / tot_load : 0.0);
    svgd_begin(f, "pic-moe", W, H, title);
    svgd_title(f, 20, 24, title);
    fprintf(f, "<text x=\"20\" y=\"44\" font-size=\"12\" fill=\"#444\">expert load = its share of "
            "the layer's (token, slot) assignments × %d, before capacity: 1 = balanced, 0 = "
            "starved</text>\n", E);
    /* heat map: x = step, one row per (layer, expert) */
    svgd_frame fr = {ML, MT, W - ML - MR, hm_h, s_lo - 0.5, S + 0.5, 0, 1};
    double cw = fr.w / (S - s_lo + 1);
    fputs("<g class=\"moe-heatmap\">\n", f);
    for (int l = 0; l < nl; l++) {
        double y0 = MT + l * (E * rh + 6);
        fprintf(f, "<text x=\"%d\" y=\"%.1f\" text-anchor=\"end\" font-weight=\"bold\">layer %d"
                "</text>\n", ML - 38, y0 + E * rh / 2 + 4, m.layer[l]);
        for (int e = 0; e < E; e++) {
            double y = y0 + e * rh;
            if (rh >= 9)
                fprintf(f, "<text x=\"%d\" y=\"%.1f\" text-anchor=\"end\" font-size=\"10\">e%d"
                        "</text>\n", ML - 4, y + rh / 2 + 3.5, e);
            for (int s = s_lo; s <= S; s++) {
                const double *row = m.load + ((size_t)s * nl + l) * E;
                if (isnan(row[0])) continue;
                double sum = 0;
                for (int k = 0; k < E; k++) sum += row[k];
                double v = sum > 0 ? row[e] / sum * E : 0;
                char c[8];
                heat(v / 2, c, sizeof(c));
                fprintf(f, "<rect class=\"moe-cell\" x=\"%.2f\" y=\"%.1f\" width=\"%.2f\" "
                        "height=\"%.1f\" fill=\"%s\"><title>layer %d expert %d step %d: load %.2f "
                        "(%.0f assignments)</title></rect>\n", svgd_x(&fr, s - 0.5), y,
                        cw + 0.3, rh, c, m.layer[l], e, s, v, row[e]);
            }
        }
        fprintf(f, "<rect x=\"%.1f\" y=\"%.1f\" width=\"%.1f\" height=\"%.1f\" fill=\"none\" "
                "stroke=\"#333\"/>\n", fr.x0, y0, fr.w, E * rh);
    }
    fputs("</g>\n", f);
    double xs = svgd_nice_step(S - s_lo + 1, 10);
    for (double v = ceil(s_lo / xs) * xs; v <= S; v += xs)
        fprintf(f, "<text x=\"%.1f\" y=\"%.1f\" text-anchor=\"middle\">%g</text>\n",
                svgd_x(&fr, v), MT + hm_h + 15, v);
    fprintf(f, "<text x=\"%.1f\" y=\"%.1f\" text-anchor=\"middle\">optimizer step</text>\n",
            fr.x0 + fr.w / 2, MT + hm_h + 32);
    /* colour bar */
    double bx = W - MR + 30, bh = fmin(hm_h, 200);
    for (int i = 0; i < 40; i++) {
        char c[8];
        heat(1 - (i + 0.5) / 40, c, sizeof(c));
        fprintf(f, "<rect x=\"%.1f\" y=\"%.1f\" width=\"16\" height=\"%.2f\" fill=\"%s\"/>", bx,
                MT + i * bh / 40, bh / 40 + 0.3, c);
    }
    fprintf(f, "\n<rect x=\"%.1f\" y=\"%d\" width=\"16\" height=\"%.1f\" fill=\"none\" "
            "stroke=\"#333\"/>\n", bx, MT, bh);
    static const char *TICKS[] = {"≥2", "1.5", "1 balanced", "0.5", "0"};
    for (int i = 0; i < 5; i++)
        fprintf(f, "<text x=\"%.1f\" y=\"%.1f\" font-size=\"10\">%s</text>\n", bx + 19,
                MT + i * bh / 4 + 4, TICKS[i]);
    fprintf(f, "<text x=\"%.1f\" y=\"%d\" font-size=\"10\" text-anchor=\"middle\">load</text>\n",
            bx + 8, MT - 6);
    /* drop rate per layer over steps */
    double dmax = 0;
    for (int s = s_lo; s <= S; s++)
        for (int l = 0; l < nl; l++) {
            double d = m.drop[(size_t)s * nl + l], sum = 0;
            if (isnan(d)) continue;
            for (int e = 0; e < E; e++) sum += m.load[((size_t)s * nl + l) * E + e];
            if (sum > 0) dmax = fmax(dmax, 100 * d / sum);
        }
    double dlo = 0, dhi = dmax > 0 ? dmax : 1;
    svgd_range(&dlo, &dhi, 0.06);
    dlo = 0;
    svgd_frame dr = {ML, MT + hm_h + 70, W - ML - MR, DH, fr.xlo, fr.xhi, dlo, dhi};
    svgd_axes(f, &dr, "optimizer step", "dropped (% of assignments)", "%g", "%g");
    static const char *DASH[] = {NULL, "7,4", "2,3", "9,3,2,3"};
    fputs("<g class=\"moe-drops\">\n", f);
    double lx = ML;
    for (int l = 0; l < nl; l++) {
        const char *c = SVGD_COLORS[l % 6], *dash = DASH[(l / 1) % 4];
        fprintf(f, "<polyline fill=\"none\" stroke=\"%s\" stroke-width=\"2\"%s%s%s points=\"", c,
                dash ? " stroke-dasharray=\"" : "", dash ? dash : "", dash ? "\"" : "");
        for (int s = s_lo; s <= S; s++) {
            double d = m.drop[(size_t)s * nl + l], sum = 0;
            if (isnan(d)) continue;
            for (int e = 0; e < E; e++) sum += m.load[((size_t)s * nl + l) * E + e];
            fprintf(f, "%.1f,%.1f ", svgd_x(&dr, s), svgd_y(&dr, sum > 0 ? 100 * d / sum : 0));
        }
        fputs("\"/>\n", f);
        char lab[48];
        snprintf(lab, sizeof(lab), "layer %d", m.layer[l]);
        if (l < 8) lx = svgd_legend(f, lx, dr.y0 - 10, NULL, c, dash, 1, lab);
    }
    fputs("</g>\n", f);
    svgd_end(f);
    moe_free_data(&m);
    return 1;
}
