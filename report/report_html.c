/*
 * report/report_html.c — `minitrain report --html FILE` (report/report.h: report_html): one
 * self-contained page of the job: summary, config and layout, every picture that applies
 * (report/svg.h) inline, the checkpoint catalog, the events, ETTR and MFU tables.
 *
 * Why so shaped: the page must open anywhere — a laptop without network, a file attached to
 * an issue — so everything is in the one file: inline <svg> (no <img> links), one <style>
 * block, no script at all (nothing can fail in a console). Sections carry ids (summary,
 * config, ettr, metrics, pipeline, moe, robustness, checkpoints, events) that the navigation
 * links to and tests/run_report_html.sh checks in a real browser's DOM. The page is built in
 * memory and written atomically (core/fs.h). The dashboard (dash/) serves the same page
 * (report_html_write) with its own script and navigation added: one drawing path.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <cjson/cJSON.h>
#include <sqlite3.h>

#include "core/check.h"
#include "core/events.h"
#include "core/fs.h"
#include "report/report.h"
#include "report/svg.h"
#include "report/svg_draw.h"

static const char CSS[] =
    "body{font-family:system-ui,-apple-system,'Segoe UI',sans-serif;margin:0;color:#1a1a1a;"
    "background:#fafafa;line-height:1.4}"
    "header{background:#16324f;color:#fff;padding:18px 28px}header h1{margin:0;font-size:24px}"
    "header p{margin:4px 0 0;opacity:.9}header code{background:rgba(255,255,255,.18);color:#fff}"
    "nav{position:sticky;top:0;background:#fff;border-bottom:1px solid #ccc;padding:8px 28px;"
    "z-index:1}nav a{margin-right:16px;color:#16324f;text-decoration:none;font-weight:600}"
    "main{padding:8px 28px 40px;max-width:1240px}"
    "section{background:#fff;border:1px solid #ddd;border-radius:6px;margin:18px 0;"
    "padding:6px 20px 16px}h2{font-size:19px;border-bottom:2px solid #16324f;padding-bottom:4px}"
    "table{border-collapse:collapse;font-size:13px;margin:8px 0}th,td{border:1px solid #ccc;"
    "padding:3px 8px;text-align:left;vertical-align:top}th{background:#eef2f6}"
    "td.num{text-align:right;font-variant-numeric:tabular-nums}"
    ".status{display:inline-block;padding:2px 10px;border-radius:10px;font-weight:700;"
    "border:2px solid #fff}.st-completed{background:#2b7a3d}.st-failed,.st-gave_up,.st-killed,"
    ".st-crashed{background:#a3303a}.st-running,.st-stopped{background:#8a6d00}"
    ".grid{display:grid;grid-template-columns:repeat(auto-fill,minmax(260px,1fr));gap:0 18px;"
    "font-size:13px}.grid div{border-bottom:1px dotted #ccc;padding:2px 0}.grid b{color:#444}"
    "svg.mt-picture{max-width:100%;height:auto;border:1px solid #ccc;margin:6px 0}"
    ".note{color:#555;font-size:13px}code{background:#f0f0f0;padding:0 3px}"
    "details summary{cursor:pointer;font-weight:600;margin:6px 0}"
    "table.events{width:100%}table.events td code,table.checkpoints td code{white-space:pre-wrap;"
    "word-break:break-all;background:none}"
    "tr.ev-failure td,tr.ev-give_up td{background:#f6d5d8;font-weight:700}"
    "tr.ev-fault td{background:#fbe9d0;font-style:italic}tr.ev-recovered td,tr.ev-resume td{"
    "background:#dcefdc}"
    "@media print{nav{display:none}section{break-inside:avoid}}";

static void esc(FILE *f, const char *s) { svgd_text(f, s ? s : ""); }

static const char *fmtv(double v, const char *fmt, double scale, char *buf, size_t n) {
    if (!isfinite(v)) return "n/a";
    snprintf(buf, n, fmt, v * scale);
    return buf;
}

/* <tr><th>k</th><td>v</td></tr> */
static void kv(FILE *f, const char *k, const char *v) {
    fputs("<tr><th>", f);
    esc(f, k);
    fputs("</th><td>", f);
    esc(f, v);
    fputs("</td></tr>\n", f);
}

static void kvn(FILE *f, const char *k, double v, const char *fmt, double scale) {
    char b[64];
    kv(f, k, fmtv(v, fmt, scale, b, sizeof(b)));
}

static void section_open(FILE *f, const char *id, const char *heading) {
    fprintf(f, "<section id=\"%s\"><h2>", id);
    esc(f, heading);
    fputs("</h2>\n", f);
}

static void summary(FILE *f, const report_summary *r) {
    char a[64];
    section_open(f, "summary", "Summary");
    fputs("<table class=\"summary\">\n", f);
    kv(f, "run", r->name ? r->name : "(unnamed)");
    kv(f, "status", r->status ? r->status : "n/a");
    if (r->status_reason) kv(f, "why", r->status_reason);
    kvn(f, "runs (launches that started a trainer)", (double)r->runs, "%.0f", 1);
    kv(f, "supervised", r->supervised ? "yes" : "no");
    kvn(f, "world size (ranks)", (double)r->world_size, "%.0f", 1);
    kv(f, "git commit", r->git_commit ? r->git_commit : "n/a");
    if (isfinite(r->started_at)) {
        time_t t0 = (time_t)r->job_start;
        struct tm tm;
        gmtime_r(&t0, &tm);
        strftime(a, sizeof(a), "%Y-%m-%d %H:%M:%S UTC", &tm);
        kv(f, "job started", a);
    }
    kvn(f, "job wall time (s)", r->wall_s, "%.1f", 1);
    kvn(f, "distinct steps", (double)r->steps, "%.0f", 1);
    kvn(f, "first train loss", r->first_train_loss, "%.4f", 1);
    kvn(f, "final train loss", r->final_train_loss, "%.4f", 1);
    kvn(f, "final val loss", r->final_val_loss, "%.4f", 1);
    kvn(f, "best val loss", r->best_val_loss, "%.4f", 1);
    kvn(f, "tokens/s (median)", r->tokens_per_s, "%.0f", 1);
    kvn(f, "MFU, measured peak (median)", r->mfu, "%.2f%%", 100);
    kvn(f, "MFU, theoretical peak (median)", r->mfu_theoretical, "%.2f%%", 100);
    svg_memory mem;
    char line[512];
    if (svg_memory_load(r->db, &mem)) { /* ZeRO stage and memory budget (train/memory.h) */
        kvn(f, "HFU, measured peak (median; recompute counted)", r->mfu * mem.hfu_over_mfu,
            "%.2f%%", 100);
        kv(f, "memory per rank (ZeRO stage, budget)", svg_memory_text(&mem, line, sizeof(line)));
    }
    kvn(f, "ETTR", r->ettr.ettr, "%.3f", 1);
    kvn(f, "failures", r->ettr.failures, "%.0f", 1);
    fputs("</table>\n</section>\n", f);
}

static void config_section(FILE *f, const report_summary *r) {
    section_open(f, "config", "Config and parallel layout");
    if (svg_layout(r->db, f) == 0) fputs("<p class=\"note\">no layout recorded</p>\n", f);
    cJSON *c = r->config ? cJSON_Parse(r->config) : NULL;
    fputs("<h3>Config of the latest run</h3>\n<div class=\"grid config\">\n", f);
    for (const cJSON *x = c ? c->child : NULL; x; x = x->next) {
        char *v = cJSON_IsString(x) ? NULL : cJSON_PrintUnformatted(x);
        char num[32] = "";
        double d = cJSON_IsNumber(x) ? x->valuedouble : 0;
        if (cJSON_IsNumber(x) && isfinite(d) && d != floor(d)) {
            /* config floats are fp32: 7 significant digits say it (0.003, not 0.00300000003) */
            snprintf(num, sizeof(num), "%.7g", d);
            cJSON_free(v);
            v = NULL;
        }
        fputs("<div><b>", f);
        esc(f, x->string);
        fputs("</b> = ", f);
        esc(f, cJSON_IsString(x) ? (x->valuestring[0] ? x->valuestring : "\"\"") : v ? v : num);
        fputs("</div>\n", f);
        cJSON_free(v);
    }
    if (!c) esc(f, r->config ? r->config : "n/a");
    fputs("</div>\n</section>\n", f);
    cJSON_Delete(c);
}

static void ettr_section(FILE *f, const report_summary *r, const svg_panel *beside) {
    const ettr_report *e = &r->ettr;
    char err[256] = "";
    section_open(f, "ettr", "ETTR: loss over wall time, failures and restarts");
    if (svg_loss_draw(r->db, e, beside, f, err, sizeof(err)) == 0) {
        fputs("<p class=\"note\">", f);
        esc(f, err);
        fputs("</p>\n", f);
    }
    fputs("<table class=\"ettr\"><tr><th>where the wall time went</th><th>seconds</th>"
          "<th>share</th></tr>\n", f);
    static const char *NAMES[] = {"useful training", "recomputed steps", "failure detection",
                                  "localisation", "teardown", "backoff", "startup", "relaunch",
                                  "checkpoint load", "checkpoint stall", "other"};
    const double v[] = {e->useful_s, e->recompute_s, e->detect_s, e->localise_s, e->teardown_s,
                        e->backoff_s, e->startup_s, e->relaunch_s, e->ckpt_load_s,
                        e->ckpt_stall_s, e->other_s};
    for (int i = 0; i < 11; i++) {
        char a[32], b[32];
        fprintf(f, "<tr><td>%s</td><td class=\"num\">%s</td><td class=\"num\">%s</td></tr>\n",
                NAMES[i], fmtv(v[i], "%.2f", 1, a, sizeof(a)),
                fmtv(e->wall_s > 0 ? v[i] / e->wall_s : NAN, "%.1f%%", 100, b, sizeof(b)));
    }
    char a[32];
    fprintf(f, "<tr><th>wall time</th><th class=\"num\">%s</th><th></th></tr></table>\n",
            fmtv(e->wall_s, "%.2f", 1, a, sizeof(a)));
    fputs("<table class=\"ettr-summary\">\n", f);
    kvn(f, "ETTR", e->ettr, "%.4f", 1);
    kvn(f, "restarts", e->restarts, "%.0f", 1);
    kvn(f, "failures", e->failures, "%.0f", 1);
    for (int i = 0; i < e->n_kinds; i++) {
        char k[64];
        snprintf(k, sizeof(k), "failures: %s", e->by_kind[i].kind);
        kvn(f, k, e->by_kind[i].count, "%.0f", 1);
    }
    kvn(f, "recomputed steps", e->lost_steps, "%.0f", 1);
    kvn(f, "MTTR (s)", e->mttr_s, "%.2f", 1);
    kvn(f, "longest recovery (s)", e->max_recovery_s, "%.2f", 1);
    kvn(f, "MTBF (s)", e->mtbf_s, "%.1f", 1);
    fputs("</table>\n</section>\n", f);
}

/* The MFU table: per run (launch), steps and mean throughput / MFU. */
static void metrics_section(FILE *f, const report_summary *r) {
    section_open(f, "metrics", "Training: loss, throughput, MFU");
    if (svg_metrics(r->db, f) == 0) fputs("<p class=\"note\">no metrics logged</p>\n", f);
    sqlite3_stmt *st = NULL;
    if (sqlite3_prepare_v2(r->db, "SELECT run_id, COUNT(*), MIN(step), MAX(step), AVG(step_ms),"
                           " AVG(tokens_per_s), AVG(mfu), AVG(mfu_theoretical) FROM metrics"
                           " GROUP BY run_id ORDER BY run_id", -1, &st, NULL) == SQLITE_OK) {
        fputs("<table class=\"mfu\"><tr><th>run</th><th>rows</th><th>steps</th><th>mean step "
              "(ms)</th><th>mean tokens/s</th><th>mean MFU (measured peak)</th><th>mean MFU "
              "(theoretical peak)</th></tr>\n", f);
        while (sqlite3_step(st) == SQLITE_ROW) {
            char b[5][32];
            double x[4];
            for (int i = 0; i < 4; i++)
                x[i] = sqlite3_column_type(st, 4 + i) == SQLITE_NULL ? NAN : sqlite3_column_double(st, 4 + i);
            fprintf(f, "<tr><td>%lld</td><td class=\"num\">%lld</td><td class=\"num\">%lld–%lld"
                    "</td><td class=\"num\">%s</td><td class=\"num\">%s</td><td class=\"num\">%s"
                    "</td><td class=\"num\">%s</td></tr>\n", sqlite3_column_int64(st, 0),
                    sqlite3_column_int64(st, 1), sqlite3_column_int64(st, 2),
                    sqlite3_column_int64(st, 3), fmtv(x[0], "%.1f", 1, b[0], 32),
                    fmtv(x[1], "%.0f", 1, b[1], 32), fmtv(x[2], "%.2f%%", 100, b[2], 32),
                    fmtv(x[3], "%.2f%%", 100, b[3], 32));
        }
        sqlite3_finalize(st);
        fputs("</table>\n<p class=\"note\">MFU = FLOPs per token × tokens/s / (peak × ranks), "
              "docs/mfu.md; the measured peak is an sgemm probe on this machine.</p>\n", f);
    }
    fputs("</section>\n", f);
}

/* A picture section, only when the picture applies. */
static void picture_section(FILE *f, const report_summary *r, const char *id, const char *heading,
                            int (*draw)(sqlite3 *, FILE *), const char *note) {
    char *text = NULL;
    size_t len = 0;
    FILE *m = open_memstream(&text, &len);
    mtCheck(m != NULL, "out of memory");
    int drawn = draw(r->db, m);
    mtCheck(fclose(m) == 0, "out of memory");
    if (drawn) {
        section_open(f, id, heading);
        fwrite(text, 1, len, f);
        if (note) fprintf(f, "<p class=\"note\">%s</p>\n", note);
        fputs("</section>\n", f);
    }
    free(text);
}

static void checkpoints_section(FILE *f, const report_summary *r) {
    section_open(f, "checkpoints", "Checkpoint catalog");
    sqlite3_stmt *st = NULL;
    int n = 0;
    if (sqlite3_prepare_v2(r->db, "SELECT run_id, step, tier, state, bytes, snapshot_ms, write_ms,"
                           " path FROM checkpoints ORDER BY step, tier, time", -1, &st, NULL) == SQLITE_OK) {
        while (sqlite3_step(st) == SQLITE_ROW) {
            if (n == 0) /* the header only above rows: no empty table */
                fputs("<table class=\"checkpoints\"><tr><th>run</th><th>step</th><th>tier</th>"
                      "<th>state</th><th>MiB</th><th>stall (ms)</th><th>write (ms)</th><th>path"
                      "</th></tr>\n", f);
            char b[3][32];
            double x[3];
            for (int i = 0; i < 3; i++)
                x[i] = sqlite3_column_type(st, 4 + i) == SQLITE_NULL ? NAN : sqlite3_column_double(st, 4 + i);
            fprintf(f, "<tr><td>%lld</td><td class=\"num\">%lld</td><td class=\"num\">%d</td><td>",
                    sqlite3_column_int64(st, 0), sqlite3_column_int64(st, 1), sqlite3_column_int(st, 2));
            esc(f, (const char *)sqlite3_column_text(st, 3));
            fprintf(f, "</td><td class=\"num\">%s</td><td class=\"num\">%s</td><td class=\"num\">%s"
                    "</td><td><code>", fmtv(x[0], "%.2f", 1.0 / 1048576, b[0], 32),
                    fmtv(x[1], "%.1f", 1, b[1], 32), fmtv(x[2], "%.1f", 1, b[2], 32));
            esc(f, (const char *)sqlite3_column_text(st, 7));
            fputs("</code></td></tr>\n", f);
            n++;
        }
        sqlite3_finalize(st);
        if (n > 0) fputs("</table>\n", f);
    }
    if (n == 0) { /* why, from the job's own config: never a default it did not run with */
        cJSON *c = r->config ? cJSON_Parse(r->config) : NULL;
        const cJSON *ce = cJSON_GetObjectItemCaseSensitive(c, "ckpt_every");
        if (!cJSON_IsNumber(ce))
            fputs("<p class=\"note\">no checkpoints recorded (no trainer run started in this "
                  "database)</p>\n", f);
        else if (ce->valueint == 0)
            fputs("<p class=\"note\">no checkpoints recorded (ckpt_every = 0)</p>\n", f);
        else
            fprintf(f, "<p class=\"note\">no checkpoints recorded (ckpt_every = %d; none was "
                    "committed)</p>\n", ce->valueint);
        cJSON_Delete(c);
    }
    fputs("<p class=\"note\">tiers: 0 own memory, 1 run directory, 2 durable.</p>\n</section>\n", f);
}

/* Every event but the per-step picture data (moe, pp_timeline: counted, drawn above). */
static void events_section(FILE *f, const report_summary *r) {
    section_open(f, "events", "Events");
    fputs("<p class=\"note\">counts by kind:", f);
    for (const cJSON *e = r->events ? r->events->child : NULL; e; e = e->next) {
        fputs(" <code>", f);
        esc(f, e->string);
        fprintf(f, "</code> %d", (int)e->valuedouble);
    }
    fputs(". Per-step <code>" EV_MOE "</code>, <code>" EV_PP_TIMELINE "</code> and <code>"
          EV_PP_IDLE "</code> rows are drawn in the pictures, not listed.</p>\n", f);
    sqlite3_stmt *st = NULL;
    if (sqlite3_prepare_v2(r->db, "SELECT time, run_id, kind, rank, detail FROM events WHERE kind"
                           " NOT IN ('" EV_MOE "', '" EV_PP_TIMELINE "', '" EV_PP_IDLE "') ORDER BY"
                           " time, rowid LIMIT 2000", -1, &st, NULL) == SQLITE_OK) {
        double t0 = isfinite(r->job_start) ? r->job_start : NAN;
        /* t = 0 is the earlier of the job's start and its first event (an import or an earlier
         * launch logs before the supervisor's start): no negative times */
        sqlite3_stmt *q0 = NULL;
        if (sqlite3_prepare_v2(r->db, "SELECT MIN(time) FROM events", -1, &q0, NULL) == SQLITE_OK &&
            sqlite3_step(q0) == SQLITE_ROW && sqlite3_column_type(q0, 0) != SQLITE_NULL)
            t0 = isfinite(t0) ? fmin(t0, sqlite3_column_double(q0, 0)) : sqlite3_column_double(q0, 0);
        sqlite3_finalize(q0);
        fputs("<table class=\"events\"><tr><th>t (s)</th><th>run</th><th>kind</th><th>rank</th>"
              "<th>detail</th></tr>\n", f);
        while (sqlite3_step(st) == SQLITE_ROW) {
            double t = sqlite3_column_double(st, 0);
            if (!isfinite(t0)) t0 = t;
            const char *kind = (const char *)sqlite3_column_text(st, 2);
            const char *d = (const char *)sqlite3_column_text(st, 4);
            fprintf(f, "<tr class=\"ev-%s\"><td class=\"num\">%.2f</td><td>%lld</td><td>",
                    kind && strspn(kind, "abcdefghijklmnopqrstuvwxyz_") == strlen(kind) ? kind : "x",
                    t - t0, sqlite3_column_int64(st, 1));
            esc(f, kind);
            fprintf(f, "</td><td>%d</td><td><code>", sqlite3_column_int(st, 3));
            if (d && strlen(d) > 400) {
                char cut[404];
                memcpy(cut, d, 400);
                strcpy(cut + 400, "…");
                esc(f, cut);
            } else {
                esc(f, d);
            }
            fputs("</code></td></tr>\n", f);
        }
        sqlite3_finalize(st);
        fputs("</table>\n", f);
    }
    fputs("</section>\n", f);
}

const char *report_html_css(void) { return CSS; }

void report_html_write(FILE *f, const report_summary *r, const svg_panel *beside,
                       const report_section *extra, int n_extra, const report_html_opts *o) {
    const report_html_opts none = {0};
    if (!o) o = &none;
    const char *name = r->name ? r->name : "(unnamed)";
    fputs("<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">\n"
          "<meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">\n<title>"
          "minitrain report: ", f);
    esc(f, name);
    fprintf(f, "</title>\n<style>%s</style>%s</head>\n<body>\n<header><h1>minitrain report: ", CSS,
            o->head ? o->head : "");
    esc(f, name);
    const char *status = r->status ? r->status : "unknown";
    fprintf(f, " <span class=\"status st-%s\">", strspn(status, "abcdefghijklmnopqrstuvwxyz_") ==
            strlen(status) ? status : "x");
    esc(f, status);
    fputs("</span></h1><p>", f);
    esc(f, r->path);
    fprintf(f, " · generated by <code>%s</code>%s</p></header>\n<nav>%s",
            o->generator ? o->generator : "minitrain report --html", o->note ? o->note : "",
            o->nav ? o->nav : "");
    static const char *NAV[][2] = {{"summary", "Summary"}, {"config", "Config & layout"},
                                   {"ettr", "ETTR"}, {"metrics", "Loss & MFU"}};
    for (int i = 0; i < 4; i++) fprintf(f, "<a href=\"#%s\">%s</a>", NAV[i][0], NAV[i][1]);
    /* the optional pictures appear in the navigation only when they apply */
    int has_pp = 0, has_moe = 0;
    sqlite3_stmt *st = NULL;
    if (sqlite3_prepare_v2(r->db, "SELECT EXISTS(SELECT 1 FROM events WHERE kind = 'pp_timeline'),"
                           " EXISTS(SELECT 1 FROM events WHERE kind = 'moe' AND"
                           " json_extract(detail, '$.load') IS NOT NULL)", -1, &st, NULL) == SQLITE_OK) {
        if (sqlite3_step(st) == SQLITE_ROW) has_pp = sqlite3_column_int(st, 0), has_moe = sqlite3_column_int(st, 1);
        sqlite3_finalize(st);
    }
    if (has_pp) fputs("<a href=\"#pipeline\">Pipeline</a>", f);
    if (has_moe) fputs("<a href=\"#moe\">MoE</a>", f);
    /* contributed sections: drawn first, so that only those that apply are linked */
    char **xt = callocCheck(n_extra > 0 ? n_extra : 1, sizeof(char *));
    size_t *xl = callocCheck(n_extra > 0 ? n_extra : 1, sizeof(size_t));
    for (int i = 0; i < n_extra; i++) {
        FILE *m = open_memstream(&xt[i], &xl[i]);
        mtCheck(m != NULL, "out of memory");
        int drawn = extra[i].draw(extra[i].user, m);
        mtCheck(fclose(m) == 0, "out of memory");
        if (!drawn) xl[i] = 0;
        if (!xl[i]) continue;
        fprintf(f, "<a href=\"#%s\">", extra[i].id);
        esc(f, extra[i].heading);
        fputs("</a>", f);
    }
    fputs("<a href=\"#checkpoints\">Checkpoints</a><a href=\"#events\">Events</a></nav>\n<main>\n", f);
    summary(f, r);
    config_section(f, r);
    ettr_section(f, r, beside);
    metrics_section(f, r);
    picture_section(f, r, "pipeline", "Pipeline timeline (measured)", svg_pipeline,
                    "Each box is one microbatch's forward (dark) or backward (light, hatched) on "
                    "one stage, over the time the trainer measured (event pp_timeline); with "
                    "zb-h1 the backward is B (input gradient, hatched) and W (weight gradient, "
                    "green, dashed); with interleaved chunks a box reads microbatch.chunk. The "
                    "dotted background is idle time. The schedule's ideal idle fraction (1F1B, "
                    "GPipe (p−1)/(m+p−1); interleaved (p−1)/(v·m+p−1); ZB-H1 "
                    "(p−1)(F+B−W)/(m(F+B+W)+(p−1)(F+B−W)) from the measured mean pass times) "
                    "assumes equal stage times and free communication. Drawn: the logged step of median "
                    "duration, of the pipeline of tp rank 0, dp rank 0 (the others run the same "
                    "schedule).");
    picture_section(f, r, "moe", "Mixture of experts: expert load and drops", svg_moe, NULL);
    for (int i = 0; i < n_extra; i++) {
        if (xl[i]) {
            section_open(f, extra[i].id, extra[i].heading);
            fwrite(xt[i], 1, xl[i], f);
            fputs("</section>\n", f);
        }
        free(xt[i]);
    }
    free(xt);
    free(xl);
    checkpoints_section(f, r);
    events_section(f, r);
    fputs("</main>\n</body></html>\n", f);
}

int report_html(const report_summary *r, const svg_panel *beside, const report_section *extra,
                int n_extra, const char *path, char *err, size_t errlen) {
    char *text = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&text, &len);
    mtCheck(f != NULL, "out of memory");
    report_html_write(f, r, beside, extra, n_extra, NULL);
    mtCheck(fclose(f) == 0, "out of memory");
    int rc = fs_write_atomic(path, text, len, err, errlen);
    free(text);
    return rc;
}

/* "<stem>-<name>.svg" for path "<stem>.svg" (or path + "-<name>.svg"). */
static void sibling(const char *path, const char *name, char *out, size_t n) {
    size_t L = strlen(path);
    int svg = L > 4 && strcmp(path + L - 4, ".svg") == 0;
    snprintf(out, n, "%.*s-%s.svg", (int)(svg ? L - 4 : L), path, name);
}

/* Draw one picture into memory and, when it applies, write it beside path. 1 written, 0 not
 * applicable, -1 error. */
static int write_one(const char *path, const char *name, int (*draw)(void *, FILE *), void *user,
                     int print, char *err, size_t errlen) {
    char *text = NULL;
    size_t len = 0;
    FILE *m = open_memstream(&text, &len);
    mtCheck(m != NULL, "out of memory");
    int drawn = draw(user, m);
    mtCheck(fclose(m) == 0, "out of memory");
    int rc = 0;
    if (drawn && len > 0) {
        char out[4400];
        sibling(path, name, out, sizeof(out));
        rc = svg_write_file(out, text, len, err, errlen) == 0 ? 1 : -1;
        if (rc == 1 && print) printf("picture:        %s (%s)\n", out, name);
    }
    free(text);
    return rc;
}

static int draw_db_picture(void *user, FILE *f) {
    const void **u = user; /* {picture, db} */
    const svg_picture *p = u[0];
    return p->draw((sqlite3 *)u[1], f);
}

int report_svg_pictures(const report_summary *r, const report_section *extra, int n_extra,
                        const char *path, int print, char *err, size_t errlen) {
    int n = 0, rc;
    for (int i = 0; SVG_PICTURES[i].name; i++) {
        const void *u[2] = {&SVG_PICTURES[i], r->db};
        if ((rc = write_one(path, SVG_PICTURES[i].name, draw_db_picture, u, print, err, errlen)) < 0)
            return -1;
        n += rc;
    }
    for (int k = 0; k < n_extra; k++) {
        if ((rc = write_one(path, extra[k].id, extra[k].draw, extra[k].user, print, err, errlen)) < 0)
            return -1;
        n += rc;
    }
    return n;
}
