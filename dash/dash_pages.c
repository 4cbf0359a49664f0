/*
 * dash/dash_pages.c — the dashboard's HTML (dash/dash_impl.h): the runs page, a run's page and
 * the compare page, each one whole document.
 *
 * A run's page IS the report page (report/report.h: report_html_write) with a navigation link and
 * the live-update script added; the compare page's picture is report/svg.h's svg_compare; the
 * style sheet is the report's (report_html_css) plus a few rules for the tables here and for a
 * phone's width. So the dashboard draws nothing itself: one drawing path.
 *
 * Live updates: LIVE_JS (inline, no library) fetches the page's own URL every poll_ms with
 * cache: 'no-cache' — the browser revalidates with If-None-Match and the server answers 304 when
 * no file changed — and, when the text changed, swaps the new <main> and header in (checked
 * boxes kept). Without JavaScript each page still works: sorting and filtering are links and a
 * GET form, and the runs page says when it was drawn.
 */
#define _GNU_SOURCE /* qsort_r */
#include "dash/dash_impl.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <cjson/cJSON.h>

#include "report/report.h"
#include "report/svg.h"

static const char DASH_CSS[] =
    ".scroll{overflow-x:auto}table.runs{width:100%}table.runs td small{color:#555}"
    "table.runs th a{color:#16324f}form.filter{display:flex;flex-wrap:wrap;gap:8px 16px;"
    "align-items:center;margin:8px 0}form.filter input,form.filter select,button{font-size:14px;"
    "padding:3px 6px}.status{color:#fff}#live-note{font-size:13px}"
    "tr.diff td,tr.diff th{background:#fff3c4;font-weight:700}td.mark{font-weight:700}"
    "nav{display:flex;flex-wrap:wrap;gap:4px 0}"
    "@media (max-width:700px){header,nav,main{padding-left:10px;padding-right:10px}"
    "section{padding:4px 8px}header h1{font-size:19px}header p{overflow-wrap:anywhere}"
    "table{font-size:12px;display:block;overflow-x:auto;max-width:100%}"
    "table.events td code,table.checkpoints td code{word-break:normal}"
    /* the runs table as one card per run: each cell labelled, the sort links wrapped */
    "table.runs,table.runs tbody,table.runs thead{display:block;overflow:visible}"
    "table.runs thead tr{display:flex;flex-wrap:wrap;gap:2px 10px}table.runs thead th{border:none;"
    "background:none;padding:2px}table.runs tr.run{display:block;border:1px solid #bbb;"
    "border-radius:6px;margin:8px 0;padding:4px 8px}table.runs tr.run td{display:flex;"
    "justify-content:space-between;gap:12px;border:none;border-bottom:1px dotted #ddd;"
    "text-align:right;padding:2px 0}table.runs tr.run td.name{display:block;text-align:left}"
    "table.runs tr.run td[data-label]::before{content:attr(data-label);font-weight:600;"
    "color:#444;text-align:left}table.runs tr.run td.name::before{display:none}}";

/* The live-update script; %d is the poll period in ms. */
static const char LIVE_JS[] =
    "<script>(function(){var ms=%d,note=function(t){var n=document.getElementById('live-note');"
    "if(n)n.textContent=t};function tick(){fetch(location.href,{cache:'no-cache',"
    "credentials:'same-origin'}).then(function(r){if(!r.ok)throw new Error('HTTP '+r.status);"
    "return r.text()}).then(function(t){var d=new DOMParser().parseFromString(t,'text/html');"
    "var a=document.querySelector('main'),b=d.querySelector('main');if(a&&b&&a.innerHTML!=="
    "b.innerHTML){var on={};document.querySelectorAll('main input[type=checkbox]').forEach("
    "function(c){on[c.value]=c.checked});var op=[];a.querySelectorAll('details').forEach("
    "function(x){op.push(x.open)});a.innerHTML=b.innerHTML;a.querySelectorAll('details')."
    "forEach(function(x,i){if(op[i])x.open=true});document.querySelectorAll("
    "'main input[type=checkbox]').forEach(function(c){if(c.value in on)c.checked=on[c.value]})}"
    "var h=document.querySelector('header h1'),g=d.querySelector('header h1');if(h&&g&&"
    "h.innerHTML!==g.innerHTML)h.innerHTML=g.innerHTML;document.title=d.title;note('live, "
    "updated '+new Date().toISOString().slice(11,19)+' UTC')}).catch(function(e){note('not updating ('+"
    "e.message+'): retrying')}).finally(function(){setTimeout(tick,ms)})}setTimeout(tick,ms)})()"
    "</script>";

void dash_html(FILE *f, const char *s) {
    for (; s && *s; s++) switch (*s) {
        case '&': fputs("&amp;", f); break;
        case '<': fputs("&lt;", f); break;
        case '>': fputs("&gt;", f); break;
        case '"': fputs("&quot;", f); break;
        case '\'': fputs("&#39;", f); break;
        default: fputc(*s, f);
        }
}

void dash_url(FILE *f, const char *s) {
    for (; s && *s; s++) {
        unsigned char c = (unsigned char)*s;
        if ((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
            strchr("-_.~/", c))
            fputc(c, f);
        else
            fprintf(f, "%%%02X", c);
    }
}

static const char *safe_class(const char *s) {
    return s && *s && strspn(s, "abcdefghijklmnopqrstuvwxyz_") == strlen(s) ? s : "x";
}

static void head(FILE *f, const char *title, int poll_ms) {
    fputs("<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">\n<meta name=\"viewport\" "
          "content=\"width=device-width, initial-scale=1\">\n<title>", f);
    dash_html(f, title);
    fprintf(f, "</title>\n<style>%s%s</style>", report_html_css(), DASH_CSS);
    if (poll_ms > 0) fprintf(f, LIVE_JS, poll_ms);
    fputs("</head>\n<body>\n", f);
}

void dash_page_message(FILE *f, const char *title, const char *line) {
    head(f, title, 0);
    fputs("<header><h1>", f);
    dash_html(f, title);
    fputs("</h1></header>\n<nav><a href=\"/\">All runs</a></nav>\n<main><section id=\"message\">"
          "<h2>", f);
    dash_html(f, title);
    fputs("</h2><p>", f);
    dash_html(f, line);
    fputs("</p></section></main></body></html>\n", f);
}

/* ---- the runs page ---------------------------------------------------------------------------- */

static const char *const COLS[][2] = {
    {"name", "run"},   {"status", "status"}, {"steps", "steps"},  {"loss", "train loss"},
    {"val", "val loss"}, {"tps", "tokens/s"}, {"mfu", "MFU"},     {"ettr", "ETTR"},
    {"failures", "failures"}, {"start", "started (UTC)"}, {"duration", "duration"}};
#define NCOLS (int)(sizeof(COLS) / sizeof(COLS[0]))

static double num_of(const dash_run *r, int c) {
    switch (c) {
    case 2: return (double)r->steps;
    case 3: return r->loss;
    case 4: return r->val;
    case 5: return r->tps;
    case 6: return r->mfu;
    case 7: return r->ettr;
    case 8: return r->failures;
    case 9: return r->start;
    case 10: return r->wall;
    default: return NAN;
    }
}

typedef struct {
    int col, desc;
} sort_by;

static int cmp_runs(const void *pa, const void *pb, void *ctx) {
    const dash_run *a = *(dash_run *const *)pa, *b = *(dash_run *const *)pb;
    const sort_by *sb = ctx;
    const int sort_col = sb->col, sort_desc = sb->desc;
    int c = 0;
    if (sort_col <= 1) {
        const char *x = sort_col == 0 ? (a->name ? a->name : a->dir) : (a->status ? a->status : "");
        const char *y = sort_col == 0 ? (b->name ? b->name : b->dir) : (b->status ? b->status : "");
        c = strcmp(x, y);
    } else {
        double x = a->ok ? num_of(a, sort_col) : NAN, y = b->ok ? num_of(b, sort_col) : NAN;
        if (isnan(x) || isnan(y)) return isnan(x) - isnan(y); /* n/a last either way */
        c = (x > y) - (x < y);
    }
    if (sort_desc) c = -c;
    return c ? c : strcmp(a->dir, b->dir);
}

/* <td class="num" data-label="label">v</td> (label NULL: none; the phone layout shows it). */
static void cell_num(FILE *f, double v, const char *fmt, double scale, const char *label) {
    fputs("<td class=\"num\"", f);
    if (label) fprintf(f, " data-label=\"%s\"", label);
    fputs(">", f);
    if (isfinite(v)) fprintf(f, fmt, v * scale);
    else fputs("n/a", f);
    fputs("</td>", f);
}

static void duration(FILE *f, double s) {
    if (!isfinite(s)) fputs("n/a", f);
    else if (s < 120) fprintf(f, "%.0f s", s);
    else if (s < 7200) fprintf(f, "%.0f min %02.0f s", floor(s / 60), fmod(s, 60));
    else fprintf(f, "%.0f h %02.0f min", floor(s / 3600), fmod(floor(s / 60), 60));
}

static void run_row(FILE *f, const dash_run *r) {
    const char *st = r->ok ? r->status : "unreadable";
    fprintf(f, "<tr class=\"run st-row-%s\" data-status=\"%s\" data-dir=\"", safe_class(st),
            safe_class(st));
    dash_html(f, r->dir);
    fputs("\"><td data-label=\"compare\"><input type=\"checkbox\" name=\"run\" aria-label=\"compare\" value=\"", f);
    dash_html(f, r->dir);
    fputs("\"></td><td class=\"name\" data-label=\"run\"><a href=\"/run?dir=", f);
    dash_url(f, r->dir);
    fputs("\">", f);
    dash_html(f, r->ok ? r->name : "(unreadable)");
    fputs("</a><br><small>", f);
    dash_html(f, r->dir);
    fprintf(f, "</small></td><td data-label=\"status\"><span class=\"status st-%s\">%s</span>",
            safe_class(st), st);
    if (!r->ok) {
        fputs("<br><small>", f);
        dash_html(f, r->err);
        fputs("</small>", f);
    }
    fputs("</td>", f);
    if (!r->ok) {
        fputs("<td colspan=\"9\" class=\"note\">not readable now; read again when its files "
              "change</td></tr>\n", f);
        return;
    }
    fprintf(f, "<td class=\"num\" data-label=\"steps\">%lld</td>", (long long)r->steps);
    cell_num(f, r->loss, "%.4f", 1, "train loss");
    cell_num(f, r->val, "%.4f", 1, "val loss");
    cell_num(f, r->tps, "%.0f", 1, "tokens/s");
    cell_num(f, r->mfu, "%.2f%%", 100, "MFU");
    cell_num(f, r->ettr, "%.3f", 1, "ETTR");
    cell_num(f, r->failures, "%.0f", 1, "failures");
    char when[64] = "n/a";
    if (isfinite(r->start)) {
        time_t t = (time_t)r->start;
        struct tm tm;
        gmtime_r(&t, &tm);
        strftime(when, sizeof(when), "%Y-%m-%d %H:%M", &tm);
    }
    fprintf(f, "<td data-label=\"started\">%s</td><td class=\"num\" data-label=\"duration\">",
            when);
    duration(f, r->wall);
    fputs("</td></tr>\n", f);
}

static const char *const STATUSES[] = {"running", "completed", "failed", "gave_up", "killed",
                                       "stopped", "crashed", "usage_error", "unreadable"};

void dash_page_runs(FILE *f, dash_index *ix, const char *q, const char *status, const char *sort,
                    int desc, int poll_ms) {
    int col = 9; /* newest first by default */
    if (!sort || !*sort) desc = 1;
    for (int c = 0; sort && c < NCOLS; c++)
        if (!strcmp(sort, COLS[c][0])) col = c;
    dash_run **v = calloc(ix->n ? ix->n : 1, sizeof(dash_run *));
    size_t n = 0;
    for (size_t i = 0; i < ix->n; i++) {
        dash_run *r = &ix->runs[i];
        const char *st = r->ok ? r->status : "unreadable";
        if (status && *status && strcmp(status, st) != 0) continue;
        if (q && *q && !strstr(r->dir, q) && !(r->name && strstr(r->name, q))) continue;
        v[n++] = r;
    }
    sort_by sb = {col, desc};
    qsort_r(v, n, sizeof(*v), cmp_runs, &sb); /* glibc's qsort_r: the context last */
    int running = 0;
    for (size_t i = 0; i < ix->n; i++) running += ix->runs[i].ok && !strcmp(ix->runs[i].status, "running");
    head(f, "minitrain dashboard", poll_ms);
    time_t now = time(NULL);
    struct tm tm;
    char at[32];
    gmtime_r(&now, &tm);
    strftime(at, sizeof(at), "%H:%M:%S UTC", &tm);
    fprintf(f, "<header><h1>minitrain dashboard: %zu runs, %d running</h1><p>", ix->n, running);
    for (int i = 0; i < ix->n_roots; i++) {
        fputs(i ? ", <code>" : "runs under <code>", f);
        dash_html(f, ix->roots[i]);
        fputs("</code>", f);
    }
    fprintf(f, " · <span id=\"live-note\">drawn %s%s</span></p></header>\n<nav><a href=\"/\">"
            "All runs</a><a href=\"#runs\">Runs</a></nav>\n", at,
            poll_ms > 0 ? ", live (polling)" : "");
    fputs("<main>\n<section id=\"runs\"><h2>Runs</h2>\n<form class=\"filter\" method=\"get\" "
          "action=\"/\"><label>name contains <input name=\"q\" value=\"", f);
    dash_html(f, q);
    fputs("\"></label><label>status <select name=\"status\"><option value=\"\">any</option>", f);
    for (size_t i = 0; i < sizeof(STATUSES) / sizeof(STATUSES[0]); i++)
        fprintf(f, "<option%s>%s</option>", status && !strcmp(status, STATUSES[i]) ? " selected" : "",
                STATUSES[i]);
    fputs("</select></label>", f);
    if (sort && *sort) {
        fputs("<input type=\"hidden\" name=\"sort\" value=\"", f);
        dash_html(f, sort);
        fprintf(f, "\"><input type=\"hidden\" name=\"desc\" value=\"%d\">", desc);
    }
    fprintf(f, "<button type=\"submit\">filter</button><span class=\"note\">%zu of %zu shown"
            "</span></form>\n<form method=\"get\" action=\"/compare\">\n<div class=\"scroll\">"
            "<table class=\"runs\" id=\"runs-table\"><thead><tr><th>compare</th>", n, ix->n);
    for (int c = 0; c < NCOLS; c++) {
        int here = c == col, d = here ? !desc : (c >= 2); /* numbers: largest first */
        fprintf(f, "<th data-col=\"%s\"><a href=\"/?sort=%s&amp;desc=%d&amp;q=", COLS[c][0],
                COLS[c][0], d);
        dash_url(f, q);
        fputs("&amp;status=", f);
        dash_url(f, status);
        fprintf(f, "\">%s%s</a></th>", COLS[c][1], here ? (desc ? " ▼" : " ▲") : "");
    }
    fputs("</tr></thead>\n<tbody>\n", f);
    for (size_t i = 0; i < n; i++) run_row(f, v[i]);
    if (n == 0)
        fputs("<tr><td colspan=\"12\" class=\"note\">no runs match (a run is a directory holding "
              "run.db)</td></tr>\n", f);
    fputs("</tbody></table></div>\n<p><button type=\"submit\">compare the checked runs</button> "
          "<span class=\"note\">(two or more)</span></p></form>\n</section>\n</main>\n</body>"
          "</html>\n", f);
    free(v);
}

/* ---- a run's page ------------------------------------------------------------------------------ */

int dash_page_run(FILE *f, const dash_run *run, dash_sections_fn sections, int poll_ms,
                  char *err, size_t errlen) {
    report_summary r;
    if (report_load(run->dir, &r, err, errlen) != 0) return -1;
    report_section sec[8];
    int n = sections ? sections(r.db, sec, 8) : 0;
    char headx[sizeof(LIVE_JS) + sizeof(DASH_CSS) + 64];
    int k = snprintf(headx, sizeof(headx), "<style>%s</style>", DASH_CSS);
    if (poll_ms > 0) snprintf(headx + k, sizeof(headx) - (size_t)k, LIVE_JS, poll_ms);
    report_html_opts o = {headx, "<a href=\"/\">All runs</a>", "minitrain dashboard",
                          poll_ms > 0 ? " · <span id=\"live-note\">live (polling)</span>" : NULL};
    report_html_write(f, &r, NULL, sec, n, &o);
    report_free(&r);
    return 0;
}

/* ---- compare ----------------------------------------------------------------------------------- */

/* The text a config value shows: strings as they are, numbers at fp32's 7 digits. */
static char *value_text(const cJSON *x) {
    if (!x) return strdup("—");
    if (cJSON_IsString(x)) return strdup(x->valuestring);
    if (cJSON_IsNumber(x)) {
        char b[40];
        snprintf(b, sizeof(b), "%.7g", x->valuedouble);
        return strdup(b);
    }
    return cJSON_PrintUnformatted(x);
}

/* One table of the keys that differ (same = 0) or of those that do not (same = 1). */
static int config_rows(FILE *f, const cJSON *keys, cJSON **c, const report_summary *s, int n,
                       int want_same) {
    int rows = 0;
    for (const cJSON *k = keys->child; k; k = k->next) {
        char **t = calloc((size_t)n, sizeof(char *));
        int same = 1;
        for (int i = 0; i < n; i++) {
            t[i] = value_text(cJSON_GetObjectItemCaseSensitive(c[i], k->string));
            if (i && strcmp(t[i], t[0]) != 0) same = 0;
        }
        if (same == want_same) {
            if (rows++ == 0) {
                fprintf(f, "<div class=\"scroll\"><table class=\"configs%s\"><thead><tr><th>key"
                        "</th><th>differs</th>", want_same ? " same" : "");
                for (int i = 0; i < n; i++) {
                    fputs("<th>", f);
                    dash_html(f, s[i].name ? s[i].name : "(unnamed)");
                    fputs("</th>", f);
                }
                fputs("</tr></thead><tbody>\n", f);
            }
            fprintf(f, "<tr%s><th>", same ? "" : " class=\"diff\"");
            dash_html(f, k->string);
            fprintf(f, "</th><td class=\"mark\">%s</td>", same ? "" : "≠");
            for (int i = 0; i < n; i++) {
                fputs("<td><code>", f);
                dash_html(f, t[i]);
                fputs("</code></td>", f);
            }
            fputs("</tr>\n", f);
        }
        for (int i = 0; i < n; i++) free(t[i]);
        free(t);
    }
    if (rows) fputs("</tbody></table></div>\n", f);
    return rows;
}

/* The configs side by side: the keys that differ first (marked ≠ and shaded), the identical
 * ones folded below. */
static void compare_configs(FILE *f, report_summary *s, int n) {
    cJSON **c = calloc((size_t)n, sizeof(cJSON *));
    cJSON *keys = cJSON_CreateObject(); /* the union of keys, in first-seen order */
    for (int i = 0; i < n; i++) {
        c[i] = s[i].config ? cJSON_Parse(s[i].config) : NULL;
        for (const cJSON *x = c[i] ? c[i]->child : NULL; x; x = x->next)
            if (!cJSON_GetObjectItemCaseSensitive(keys, x->string))
                cJSON_AddTrueToObject(keys, x->string);
    }
    int ndiff = config_rows(f, keys, c, s, n, 0), nkeys = cJSON_GetArraySize(keys);
    fprintf(f, "<p class=\"note\" id=\"config-diffs\">%d of %d keys differ (marked ≠ and "
            "shaded)</p>\n<details><summary>the %d identical keys</summary>\n", ndiff, nkeys,
            nkeys - ndiff);
    config_rows(f, keys, c, s, n, 1);
    fputs("</details>\n", f);
    for (int i = 0; i < n; i++) cJSON_Delete(c[i]);
    free(c);
    cJSON_Delete(keys);
}

void dash_page_compare(FILE *f, dash_run *const *runs, int n, int poll_ms) {
    report_summary *s = calloc((size_t)n, sizeof(report_summary));
    svg_compare_run *cr = calloc((size_t)n, sizeof(svg_compare_run));
    char (*err)[512] = calloc((size_t)n, sizeof(*err));
    for (int i = 0; i < n; i++) {
        if (report_load(runs[i]->dir, &s[i], err[i], sizeof(err[i])) != 0) memset(&s[i], 0, sizeof(s[i]));
        cr[i] = (svg_compare_run){s[i].db, s[i].name ? s[i].name : runs[i]->dir};
    }
    head(f, "minitrain dashboard: compare", poll_ms);
    fprintf(f, "<header><h1>compare %d runs</h1><p>minitrain dashboard · <span id=\"live-note\">"
            "live (polling)</span></p></header>\n<nav><a href=\"/\">All runs</a><a href=\"#compare\">Loss</a>"
            "<a href=\"#summaries\">Summaries</a><a href=\"#configs\">Configs</a></nav>\n<main>\n",
            n);
    fputs("<section id=\"compare\"><h2>Loss by step and by wall time</h2>\n", f);
    if (svg_compare(cr, n, f) == 0) fputs("<p class=\"note\">no losses logged yet</p>\n", f);
    fputs("</section>\n<section id=\"summaries\"><h2>Summaries</h2><div class=\"scroll\"><table "
          "class=\"summaries\"><tr><th>run</th><th>status</th><th>steps</th><th>final train loss"
          "</th><th>final val loss</th><th>best val loss</th><th>tokens/s</th><th>MFU</th><th>"
          "ETTR</th><th>failures</th></tr>\n", f);
    for (int i = 0; i < n; i++) {
        fputs("<tr><td><a href=\"/run?dir=", f);
        dash_url(f, runs[i]->dir);
        fputs("\">", f);
        dash_html(f, cr[i].label);
        fputs("</a></td>", f);
        if (!s[i].db) {
            fputs("<td colspan=\"9\">", f);
            dash_html(f, err[i]);
            fputs("</td></tr>\n", f);
            continue;
        }
        const char *st = s[i].status ? s[i].status : "unknown";
        fprintf(f, "<td><span class=\"status st-%s\">%s</span></td><td class=\"num\">%lld</td>",
                safe_class(st), safe_class(st), (long long)s[i].steps);
        cell_num(f, s[i].final_train_loss, "%.4f", 1, NULL);
        cell_num(f, s[i].final_val_loss, "%.4f", 1, NULL);
        cell_num(f, s[i].best_val_loss, "%.4f", 1, NULL);
        cell_num(f, s[i].tokens_per_s, "%.0f", 1, NULL);
        cell_num(f, s[i].mfu, "%.2f%%", 100, NULL);
        cell_num(f, s[i].ettr.ettr, "%.3f", 1, NULL);
        cell_num(f, s[i].ettr.failures, "%.0f", 1, NULL);
        fputs("</tr>\n", f);
    }
    fputs("</table></div></section>\n<section id=\"configs\"><h2>Configs side by side</h2>\n", f);
    compare_configs(f, s, n);
    fputs("</section>\n</main>\n</body></html>\n", f);
    for (int i = 0; i < n; i++)
        if (s[i].db) report_free(&s[i]);
    free(s);
    free(cr);
    free(err);
}
