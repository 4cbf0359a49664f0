/*
 * safety/robust_report.c — robustness results out: the table and JSON of an evaluation, its rows
 * in run.db (table evals, core/rundb.h), and what `minitrain report` shows of them (the newest
 * evaluation's table, and the adversarial-loss-vs-ε panel of `report --svg`).
 *
 * Everything here reads or writes results; nothing attacks. The SVG panel is plain text drawn
 * with report/svg_draw.h's tick rule (svgd_nice_step) and sequential ramp (svgd_shade), into the
 * caller's open file so the loss plot and this panel are one picture.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>

#include "core/check.h"
#include "core/timer.h"
#include "safety/robust.h"
#include "report/svg_draw.h"

/* ---- one evaluation, printed ------------------------------------------------------------------ */

static void describe(const robust_opts *o, char *buf, size_t n) {
    if (o->attack == ROBUST_HOTFLIP)
        snprintf(buf, n, "hotflip, %d flip%s per sequence, %s", o->flips, o->flips == 1 ? "" : "s",
                 o->beam > 1 ? "beam search" : "greedy");
    else if (o->attack == ROBUST_FGSM)
        snprintf(buf, n, "fgsm, %s ball (%s), one step of size eps", o->norm == ROBUST_L2 ? "L2" : "Linf",
                 o->norm == ROBUST_L2 ? "per sequence" : "per element");
    else
        snprintf(buf, n, "pgd, %s ball (%s), K = %d steps of %.3g eps/K%s",
                 o->norm == ROBUST_L2 ? "L2" : "Linf",
                 o->norm == ROBUST_L2 ? "per sequence" : "per element", o->steps, o->alpha_mult,
                 o->random_start ? ", random start" : "");
}

/* "12.34%" into buf (16 bytes). */
static const char *pct(double v, char *buf) {
    snprintf(buf, 16, "%.2f%%", 100 * v);
    return buf;
}

static cJSON *row_json(const robust_row *w) {
    cJSON *o = cJSON_CreateObject();
    mtCheck(o != NULL, "out of memory building JSON");
    cJSON_AddNumberToObject(o, "eps_rel", w->eps_rel);
    cJSON_AddNumberToObject(o, "eps_abs", w->eps_abs);
    cJSON_AddNumberToObject(o, "k", w->k);
    cJSON_AddNumberToObject(o, "clean_loss", w->clean_loss);
    cJSON_AddNumberToObject(o, "adv_loss", w->adv_loss);
    cJSON_AddNumberToObject(o, "clean_ppl", exp(w->clean_loss));
    cJSON_AddNumberToObject(o, "adv_ppl", exp(w->adv_loss));
    cJSON_AddNumberToObject(o, "clean_acc", w->clean_acc);
    cJSON_AddNumberToObject(o, "adv_acc", w->adv_acc);
    cJSON_AddNumberToObject(o, "success_rate", w->success_rate);
    cJSON_AddNumberToObject(o, "n_tokens", (double)w->n_tokens);
    cJSON_AddNumberToObject(o, "max_ball", w->max_ball);
    cJSON_AddNumberToObject(o, "ms", w->ms);
    return o;
}

void robust_print(const robust_result *r, const robust_opts *o, const char *run_dir, int step,
                  int json) {
    if (json) {
        cJSON *j = cJSON_CreateObject();
        mtCheck(j != NULL, "out of memory building JSON");
        cJSON_AddStringToObject(j, "run", run_dir ? run_dir : "");
        cJSON_AddNumberToObject(j, "step", step);
        cJSON_AddStringToObject(j, "attack", robust_attack_name(o->attack));
        if (o->attack == ROBUST_HOTFLIP) {
            cJSON_AddNullToObject(j, "norm");
            cJSON_AddNumberToObject(j, "flips", o->flips);
            cJSON_AddNumberToObject(j, "beam", o->beam);
        } else {
            cJSON_AddStringToObject(j, "norm", robust_norm_name(o->norm));
            cJSON_AddNumberToObject(j, "k", o->attack == ROBUST_FGSM ? 1 : o->steps);
            cJSON_AddNumberToObject(j, "alpha_mult", o->alpha_mult);
            cJSON_AddBoolToObject(j, "random_start", o->random_start);
        }
        cJSON_AddNumberToObject(j, "seq_len", r->seq_len);
        cJSON_AddNumberToObject(j, "sequences", r->n_seqs);
        cJSON_AddNumberToObject(j, "embed_norm", r->embed_norm);
        cJSON *rows = cJSON_AddArrayToObject(j, "rows");
        for (int i = 0; i < r->n_rows; i++) cJSON_AddItemToArray(rows, row_json(&r->rows[i]));
        char *s = cJSON_Print(j);
        mtCheck(s != NULL, "out of memory printing JSON");
        printf("%s\n", s);
        cJSON_free(s);
        cJSON_Delete(j);
        return;
    }
    char d[160];
    describe(o, d, sizeof(d));
    printf("robustness of %s at step %d: %s\n", run_dir ? run_dir : "the model", step, d);
    printf("  %d validation sequences x %d tokens; mean token-embedding row norm %.4f (eps_rel is "
           "relative to it)\n", r->n_seqs, r->seq_len, r->embed_norm);
    const int hf = o->attack == ROBUST_HOTFLIP;
    printf("  %-8s %-9s %-9s %-9s %-9s %-9s %-9s %-9s %-8s %s\n", hf ? "flips" : "eps_rel",
           hf ? "beam" : "eps_abs", "clean NLL", "adv NLL", "clean ppl", "adv ppl", "clean acc",
           "adv acc", "success", "ms");
    for (int i = 0; i < r->n_rows; i++) {
        const robust_row *w = &r->rows[i];
        char ca[16], aa[16], sr[16];
        printf("  %-8.4g %-9.4g %-9.4f %-9.4f %-9.3f %-9.3f %-9s %-9s %-8s %.0f\n",
               hf ? w->k : w->eps_rel, hf ? o->beam : w->eps_abs, w->clean_loss, w->adv_loss,
               exp(w->clean_loss), exp(w->adv_loss), pct(w->clean_acc, ca), pct(w->adv_acc, aa),
               pct(w->success_rate, sr), w->ms);
    }
    printf("  (NLL in nats/token; acc = next-token accuracy; success = positions whose argmax "
           "changed)\n");
}

void robust_log(rundb *db, int64_t run_id, int step, const char *kind, const robust_opts *o,
                const robust_result *r) {
    double now = timer_unix();
    rundb_begin_batch(db);
    for (int i = 0; i < r->n_rows; i++) {
        const robust_row *w = &r->rows[i];
        rundb_eval e = {.step = step, .kind = kind, .attack = robust_attack_name(o->attack),
                        .norm = o->attack == ROBUST_HOTFLIP ? NULL : robust_norm_name(o->norm),
                        .eps_rel = w->eps_rel, .eps_abs = w->eps_abs, .k = w->k,
                        .clean_loss = w->clean_loss, .adv_loss = w->adv_loss,
                        .clean_acc = w->clean_acc, .adv_acc = w->adv_acc,
                        .success_rate = w->success_rate, .n_tokens = w->n_tokens, .ms = w->ms,
                        .time = now};
        rundb_log_eval(db, run_id, &e);
    }
    rundb_commit_batch(db);
}

/* ---- the newest evaluation in run.db ------------------------------------------------------------ */

#define NEWEST_SQL                                                                               \
    "SELECT run_id, step, kind, attack, norm, k, eps_rel, eps_abs, clean_loss, adv_loss,"        \
    " clean_acc, adv_acc, success_rate, n_tokens, ms FROM evals WHERE time ="                    \
    " (SELECT MAX(time) FROM evals) ORDER BY eps_rel, rowid"

static double col(sqlite3_stmt *st, int i) {
    return sqlite3_column_type(st, i) == SQLITE_NULL ? NAN : sqlite3_column_double(st, i);
}

static const char *text(sqlite3_stmt *st, int i) {
    const unsigned char *s = sqlite3_column_text(st, i);
    return s ? (const char *)s : "";
}

int robust_report_print(sqlite3 *db) {
    sqlite3_stmt *st = NULL;
    if (sqlite3_prepare_v2(db, NEWEST_SQL, -1, &st, NULL) != SQLITE_OK) return 0; /* no table */
    int n = 0;
    while (sqlite3_step(st) == SQLITE_ROW) {
        if (n++ == 0) {
            const char *attack = text(st, 3), *norm = text(st, 4);
            printf("robustness (newest evaluation: step %d, %s, %s%s%s, k %d):\n",
                   sqlite3_column_int(st, 1), !strcmp(text(st, 2), "train") ? "during training"
                                                                            : "minitrain robust",
                   attack, norm[0] ? " " : "", norm, sqlite3_column_int(st, 5));
            printf("  %-8s %-9s %-9s %-9s %-9s %-9s %-8s %-8s\n", "eps_rel", "eps_abs", "clean NLL",
                   "adv NLL", "clean acc", "adv acc", "success", "tokens");
        }
        char ca[16], aa[16], sr[16];
        printf("  %-8.4g %-9.4g %-9.4f %-9.4f %-9s %-9s %-8s %lld\n", col(st, 6), col(st, 7),
               col(st, 8), col(st, 9), pct(col(st, 10), ca), pct(col(st, 11), aa),
               pct(col(st, 12), sr), (long long)sqlite3_column_int64(st, 13));
    }
    sqlite3_finalize(st);
    return n;
}

static void add_real(cJSON *o, const char *k, double v) {
    if (isfinite(v)) cJSON_AddNumberToObject(o, k, v);
    else cJSON_AddNullToObject(o, k);
}

cJSON *robust_report_json(sqlite3 *db) {
    sqlite3_stmt *st = NULL;
    if (sqlite3_prepare_v2(db, NEWEST_SQL, -1, &st, NULL) != SQLITE_OK) return NULL;
    cJSON *o = NULL, *rows = NULL;
    while (sqlite3_step(st) == SQLITE_ROW) {
        if (!o) {
            o = cJSON_CreateObject();
            mtCheck(o != NULL, "out of memory building JSON");
            cJSON_AddNumberToObject(o, "run_id", (double)sqlite3_column_int64(st, 0));
            cJSON_AddNumberToObject(o, "step", sqlite3_column_int(st, 1));
            cJSON_AddStringToObject(o, "kind", text(st, 2));
            cJSON_AddStringToObject(o, "attack", text(st, 3));
            if (sqlite3_column_type(st, 4) == SQLITE_NULL) cJSON_AddNullToObject(o, "norm");
            else cJSON_AddStringToObject(o, "norm", text(st, 4));
            cJSON_AddNumberToObject(o, "k", sqlite3_column_int(st, 5));
            rows = cJSON_AddArrayToObject(o, "rows");
        }
        cJSON *r = cJSON_CreateObject();
        mtCheck(r != NULL, "out of memory building JSON");
        static const char *K[] = {"eps_rel", "eps_abs", "clean_loss", "adv_loss", "clean_acc",
                                  "adv_acc", "success_rate", "n_tokens", "ms"};
        for (int i = 0; i < 9; i++) add_real(r, K[i], col(st, 6 + i));
        cJSON_AddItemToArray(rows, r);
    }
    sqlite3_finalize(st);
    return o;
}

/* ---- the SVG panel: adversarial loss vs ε, one line per evaluated step ----------------------- */

#define PW 600
#define PL 70
#define PR 150
#define PT 72
#define PB 60

/* The group drawn: the newest embedding-attack evaluation's (kind, attack, norm, k). */
#define GROUP_SQL                                                                                \
    "SELECT kind, attack, norm, k FROM evals WHERE attack != 'hotflip' ORDER BY time DESC,"      \
    " rowid DESC LIMIT 1"

int robust_svg_width(sqlite3 *db) {
    sqlite3_stmt *st = NULL;
    if (sqlite3_prepare_v2(db, GROUP_SQL, -1, &st, NULL) != SQLITE_OK) return 0;
    int any = sqlite3_step(st) == SQLITE_ROW;
    sqlite3_finalize(st);
    return any ? PW : 0;
}

typedef struct {
    int step;
    double eps, adv, clean;
} evpt;

/* The panel's group (the newest evaluation's kind, attack, norm and k, into the 16-byte buffers)
 * and, per step, that group's newest evaluation: (step, eps, adv, clean) sorted by step then eps,
 * *n of them (malloc'd; NULL when run.db has no evaluation). */
static evpt *panel_points(sqlite3 *db, char *kind, char *attack, char *norm, int *k, size_t *n) {
    sqlite3_stmt *st = NULL;
    *n = 0;
    if (sqlite3_prepare_v2(db, GROUP_SQL, -1, &st, NULL) != SQLITE_OK) return NULL;
    if (sqlite3_step(st) != SQLITE_ROW) {
        sqlite3_finalize(st);
        return NULL;
    }
    snprintf(kind, 16, "%s", text(st, 0));
    snprintf(attack, 16, "%s", text(st, 1));
    snprintf(norm, 16, "%s", text(st, 2));
    *k = sqlite3_column_int(st, 3);
    sqlite3_finalize(st);
    /* per step, the newest evaluation of the group */
    const char *sql = "SELECT step, eps_rel, adv_loss, clean_loss FROM evals e WHERE kind = ?1 AND"
                      " attack = ?2 AND norm = ?3 AND k = ?4 AND time = (SELECT MAX(time) FROM"
                      " evals x WHERE x.step = e.step AND x.kind = ?1 AND x.attack = ?2 AND"
                      " x.norm = ?3 AND x.k = ?4) ORDER BY step, eps_rel";
    if (sqlite3_prepare_v2(db, sql, -1, &st, NULL) != SQLITE_OK) return NULL;
    sqlite3_bind_text(st, 1, kind, -1, SQLITE_STATIC);
    sqlite3_bind_text(st, 2, attack, -1, SQLITE_STATIC);
    sqlite3_bind_text(st, 3, norm, -1, SQLITE_STATIC);
    sqlite3_bind_int(st, 4, *k);
    size_t cap = 64;
    evpt *p = mallocCheck(cap * sizeof(evpt));
    while (sqlite3_step(st) == SQLITE_ROW) {
        if (*n == cap) {
            cap *= 2;
            p = realloc(p, cap * sizeof(evpt));
            mtCheck(p != NULL, "out of memory");
        }
        p[(*n)++] = (evpt){sqlite3_column_int(st, 0), col(st, 1), col(st, 2), col(st, 3)};
    }
    sqlite3_finalize(st);
    return p;
}

void robust_svg_panel(sqlite3 *db, FILE *f, int x0, int h) {
    char kind[16], attack[16], norm[16];
    int k;
    size_t n;
    evpt *p = panel_points(db, kind, attack, norm, &k, &n);
    if (p == NULL) return;
    double e0 = 0, e1 = -INFINITY, lo = INFINITY, hi = -INFINITY;
    int lines = 0;
    for (size_t i = 0; i < n; i++) {
        if (i == 0 || p[i].step != p[i - 1].step) lines++;
        if (isfinite(p[i].eps)) e1 = fmax(e1, p[i].eps);
        if (isfinite(p[i].adv)) lo = fmin(lo, p[i].adv), hi = fmax(hi, p[i].adv);
        if (isfinite(p[i].clean)) lo = fmin(lo, p[i].clean), hi = fmax(hi, p[i].clean);
    }
    if (n == 0 || !isfinite(lo) || !isfinite(e1)) {
        free(p);
        return;
    }
    if (e1 - e0 < 1e-12) e1 = e0 + 1;
    if (hi - lo < 1e-6) hi = lo + 1;
    double pad = 0.05 * (hi - lo);
    lo -= pad, hi += pad;
    const double pw = PW - PL - PR, ph = h - PT - PB;
#define X(v) (x0 + PL + ((v) - e0) / (e1 - e0) * pw)
#define Y(v) (PT + (hi - (v)) / (hi - lo) * ph)
    fprintf(f, "<g>\n");
    double es = svgd_nice_step(e1 - e0, 5), ls = svgd_nice_step(hi - lo, 6);
    for (double v = ceil(lo / ls) * ls; v <= hi; v += ls)
        fprintf(f, "<line x1=\"%d\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" stroke=\"#ddd\"/>"
                "<text x=\"%d\" y=\"%.1f\" text-anchor=\"end\">%g</text>\n",
                x0 + PL, Y(v), x0 + PL + pw, Y(v), x0 + PL - 6, Y(v) + 4, v);
    for (double v = 0; v <= e1 - e0 + 1e-12; v += es)
        fprintf(f, "<line x1=\"%.1f\" y1=\"%d\" x2=\"%.1f\" y2=\"%.0f\" stroke=\"#ddd\"/>"
                "<text x=\"%.1f\" y=\"%.0f\" text-anchor=\"middle\">%g</text>\n",
                X(e0 + v), PT, X(e0 + v), PT + ph, X(e0 + v), PT + ph + 16, e0 + v);
    fprintf(f, "<rect x=\"%d\" y=\"%d\" width=\"%.0f\" height=\"%.0f\" fill=\"none\" "
            "stroke=\"#333\"/>\n", x0 + PL, PT, pw, ph);
    fprintf(f, "<text x=\"%.0f\" y=\"%d\" text-anchor=\"middle\">eps (relative to the mean "
            "token-embedding norm)</text>\n"
            "<text x=\"%d\" y=\"%.0f\" text-anchor=\"middle\" transform=\"rotate(-90 %d %.0f)\">"
            "adversarial val loss (nats/token)</text>\n",
            x0 + PL + pw / 2, h - 18, x0 + 16, PT + ph / 2, x0 + 16, PT + ph / 2);
    fprintf(f, "<text x=\"%d\" y=\"22\" font-size=\"15\" font-weight=\"bold\">adversarial loss vs "
            "eps: %s %s, k %d</text>\n", x0 + PL, attack, norm, k);
    fprintf(f, "<text x=\"%d\" y=\"40\" font-size=\"11\" fill=\"#555\">one line per evaluated "
            "step (%s); dashed: that step's clean loss</text>\n", x0 + PL,
            !strcmp(kind, "train") ? "during training" : "minitrain robust");
    int li = 0;
    for (size_t i = 0; i < n;) {
        size_t j = i;
        while (j < n && p[j].step == p[i].step) j++;
        char c[16];
        svgd_shade(li, lines, c, sizeof(c)); /* early steps light, late dark */
        if (isfinite(p[i].clean))
            fprintf(f, "<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" stroke=\"%s\" "
                    "stroke-dasharray=\"4,3\"/>\n", X(e0), Y(p[i].clean), X(e1), Y(p[i].clean), c);
        fprintf(f, "<polyline fill=\"none\" stroke=\"%s\" stroke-width=\"2\" points=\"", c);
        for (size_t q = i; q < j; q++)
            if (isfinite(p[q].adv)) fprintf(f, "%.1f,%.1f ", X(p[q].eps), Y(p[q].adv));
        fprintf(f, "\"/>\n");
        for (size_t q = i; q < j; q++)
            if (isfinite(p[q].adv))
                fprintf(f, "<circle cx=\"%.1f\" cy=\"%.1f\" r=\"3\" fill=\"%s\"/>\n", X(p[q].eps),
                        Y(p[q].adv), c);
        /* legend entry (at most 20 lines listed) */
        if (li < 20)
            fprintf(f, "<line x1=\"%.0f\" y1=\"%d\" x2=\"%.0f\" y2=\"%d\" stroke=\"%s\" "
                    "stroke-width=\"2\"/><text x=\"%.0f\" y=\"%d\">step %d</text>\n",
                    x0 + PL + pw + 12, PT + 10 + 18 * li, x0 + PL + pw + 36, PT + 10 + 18 * li, c,
                    x0 + PL + pw + 42, PT + 14 + 18 * li, p[i].step);
        li++;
        i = j;
    }
    fprintf(f, "</g>\n");
#undef X
#undef Y
    free(p);
}
