/*
 * cmd/report.c — `minitrain report --run DIR [--json] [--svg FILE] [--html FILE]`: the summary of a job from
 * its run database (report/report.h), as text or JSON, and optionally its loss plot — with the
 * newest robustness evaluation (safety/robust.h) added to each: a table, a "robustness" key, a
 * panel beside the plot. sched/ knows nothing of safety/; this file wires the two.
 */
#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cjson/cJSON.h>

#include "cmd/args.h"
#include "cmd/cmd.h"
#include "core/check.h"
#include "safety/robust.h"
#include "report/report.h"

/* safety's adversarial-loss-vs-eps panel (user = the run database) */
static void robust_panel(void *user, FILE *f, int x0, int h) { robust_svg_panel(user, f, x0, h); }

/* HTML/picture section "robustness": the panel as its own <svg>, then (in the page) the newest
 * evaluation as a table. Returns 0 when the run has no robustness evaluation. */
static int robust_section(void *user, FILE *f, int table) {
    sqlite3 *db = user;
    int w = robust_svg_width(db);
    if (w <= 0) return 0;
    fprintf(f, "<svg xmlns=\"http://www.w3.org/2000/svg\" id=\"pic-robustness\" "
            "class=\"mt-picture\" width=\"%d\" height=\"460\" viewBox=\"0 0 %d 460\" "
            "font-family=\"sans-serif\" font-size=\"12\"><title>adversarial loss vs eps</title>"
            "<rect width=\"%d\" height=\"460\" fill=\"white\"/>\n", w, w, w);
    robust_svg_panel(db, f, 0, 460);
    fputs("</svg>\n", f);
    cJSON *j = table ? robust_report_json(db) : NULL;
    const cJSON *rows = cJSON_GetObjectItemCaseSensitive(j, "rows");
    if (cJSON_IsArray(rows) && rows->child) {
        fputs("<table class=\"robustness\"><tr>", f);
        for (const cJSON *k = rows->child->child; k; k = k->next) fprintf(f, "<th>%s</th>", k->string);
        fputs("</tr>\n", f);
        for (const cJSON *r = rows->child; r; r = r->next) {
            fputs("<tr>", f);
            for (const cJSON *k = r->child; k; k = k->next) {
                if (cJSON_IsNumber(k)) fprintf(f, "<td class=\"num\">%.4g</td>", k->valuedouble);
                else if (cJSON_IsString(k)) fprintf(f, "<td>%s</td>", k->valuestring);
                else fputs("<td>n/a</td>", f);
            }
            fputs("</tr>\n", f);
        }
        fputs("</table>\n", f);
    }
    cJSON_Delete(j);
    return 1;
}
static int robust_html(void *user, FILE *f) { return robust_section(user, f, 1); }

/* 1 when paths a and b name the same file: the same inode when both exist, else the same
 * string (an output that does not exist yet cannot be an existing input). */
static int same_file(const char *a, const char *b) {
    struct stat sa, sb;
    if (stat(a, &sa) == 0 && stat(b, &sb) == 0) return sa.st_dev == sb.st_dev && sa.st_ino == sb.st_ino;
    return strcmp(a, b) == 0;
}

/* An output (--svg, --html) must not overwrite the run database it is drawn from, nor the other
 * output: `report --html runs/x/run.db` once replaced a run's only record with a web page.
 * Returns 0, or MT_EXIT_USAGE after one line on stderr. */
static int check_outputs(const char *run_dir, const char *svg, const char *html) {
    static const char *const db_files[] = {"run.db", "run.db-wal", "run.db-shm"};
    const char *outs[2] = {svg, html}, *names[2] = {"--svg", "--html"};
    for (int o = 0; o < 2; o++) {
        if (outs[o] == NULL) continue;
        for (size_t k = 0; k < sizeof(db_files) / sizeof(db_files[0]); k++) {
            char db[4096];
            snprintf(db, sizeof(db), "%s/%s", run_dir, db_files[k]);
            if (same_file(outs[o], db)) {
                fprintf(stderr, "minitrain: error: report %s %s would overwrite the run database "
                        "(%s); write the output elsewhere\n", names[o], outs[o], db);
                return MT_EXIT_USAGE;
            }
        }
    }
    for (int o = 0; o < 2; o++) { /* before the summary is printed: a bad path fails alone */
        if (outs[o] == NULL) continue;
        char dir[4096];
        snprintf(dir, sizeof(dir), "%s", outs[o]);
        char *slash = strrchr(dir, '/');
        if (slash == NULL) snprintf(dir, sizeof(dir), ".");
        else if (slash == dir) dir[1] = '\0';
        else *slash = '\0';
        struct stat sd;
        int bad = stat(dir, &sd) != 0 ? errno : !S_ISDIR(sd.st_mode) ? ENOTDIR
                  : access(dir, W_OK) != 0 ? errno : 0;
        if (bad) {
            fprintf(stderr, "minitrain: error: report %s %s: cannot write into directory '%s' "
                    "(%s)\n", names[o], outs[o], dir, strerror(bad));
            return MT_EXIT_USAGE;
        }
    }
    if (svg && html && same_file(svg, html)) {
        fprintf(stderr, "minitrain: error: report: --svg and --html name the same file (%s); give "
                "each its own\n", svg);
        return MT_EXIT_USAGE;
    }
    return 0;
}
static int robust_picture(void *user, FILE *f) { return robust_section(user, f, 0); }

int cmd_report(int argc, char **argv) {
    const char *run_dir = NULL, *svg = NULL, *html = NULL;
    int json = 0;
    const args_opt opts[] = {
        {"run", KEYTAB_STRING, &run_dir, 0, 0, "DIR", "run directory (holds run.db)", ""},
        {"json", KEYTAB_FLAG, &json, 0, 0, NULL, "print one JSON object instead of text", NULL},
        {"svg", KEYTAB_STRING, &svg, 0, 0, "FILE", "also draw loss vs wall time with failures and "
         "restarts marked\n(adversarial loss vs eps beside it when the run has robustness evals),"
         "\nand each other picture that applies as FILE-NAME.svg: metrics,\npipeline (pp runs), "
         "moe (MoE runs), layout, robustness", ""},
        {"html", KEYTAB_STRING, &html, 0, 0, "FILE", "write one self-contained HTML page: summary, "
         "config and layout,\nevery picture, checkpoint catalog, events, ETTR and MFU tables",
         ""},
        {0},
    };
    const args_spec spec = {
        .cmd = "report",
        .synopsis = "usage: minitrain report --run DIR [--json] [--svg FILE] [--html FILE]",
        .about = "Summarise the job recorded in DIR/run.db: run status and duration, steps,\n"
                 "train/val losses, median tokens/s and MFU, events by kind, and ETTR with its\n"
                 "breakdown, failures by kind, MTBF/MTTR and recomputed steps (docs/ettr.md).",
        .opts = opts,
    };
    int prc = args_parse(&spec, argc, argv, NULL);
    if (prc != ARGS_CONTINUE) return prc;
    if (run_dir == NULL || run_dir[0] == '\0') {
        fprintf(stderr, "minitrain: error: report: --run DIR is required (see `minitrain report "
                "--help`)\n");
        return MT_EXIT_USAGE;
    }
    if (check_outputs(run_dir, svg, html) != 0) return MT_EXIT_USAGE;
    report_summary r;
    char err[8600];
    if (report_load(run_dir, &r, err, sizeof(err)) != 0) {
        fprintf(stderr, "minitrain: error: %s\n", err);
        return MT_EXIT_USAGE;
    }
    /* the newest robustness evaluation (safety/robust.h), when the run has one */
    cJSON *rob = robust_report_json(r.db);
    r.extra = cJSON_CreateObject();
    mtCheck(r.extra != NULL, "out of memory building the report");
    cJSON_AddItemToObject(r.extra, "robustness", rob ? rob : cJSON_CreateNull());
    int ret = json ? report_print_json(&r) : report_print_text(&r);
    if (!json) robust_report_print(r.db);
    fflush(stdout);
    svg_panel beside = {robust_svg_width(r.db), robust_panel, r.db};
    int drew = svg ? report_svg(&r, &beside, svg, err, sizeof(err)) : 0;
    if (drew < 0) {
        fprintf(stderr, "minitrain: error: report --svg: %s\n", err);
        ret = MT_EXIT_USAGE;
    } else if (svg) { /* drew 1: no steps logged yet; the file says so, as --html's page does */
        if (!json) printf("plot:           %s%s%s%s\n", svg, drew ? " (" : "", drew ? err : "",
                          drew ? ")" : "");
        report_section pic = {"robustness", "Robustness", robust_picture, r.db};
        if (report_svg_pictures(&r, &pic, 1, svg, !json, err, sizeof(err)) < 0) {
            fprintf(stderr, "minitrain: error: report --svg: %s\n", err);
            ret = MT_EXIT_USAGE;
        }
    }
    report_section sec = {"robustness", "Robustness: adversarial loss vs ε", robust_html, r.db};
    if (html && report_html(&r, NULL, &sec, 1, html, err, sizeof(err)) != 0) {
        fprintf(stderr, "minitrain: error: report --html: %s\n", err);
        ret = MT_EXIT_USAGE;
    } else if (html && !json) {
        printf("html:           %s\n", html);
    }
    report_free(&r);
    return ret;
}
