/*
 * cmd/report.c — `minitrain report --run DIR [--json] [--svg FILE] [--html FILE]`: the summary of a job from
 * its run database (report/report.h), as text or JSON, and optionally its loss plot — with the
 * newest robustness evaluation (safety/robust.h) added to each: a table, a "robustness" key, a
 * panel beside the plot. sched/ knows nothing of safety/; this file wires the two.
 */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cjson/cJSON.h>

#include "cmd/args.h"
#include "cmd/cmd.h"
#include "core/check.h"
#include "core/fs.h"
#include "db/db.h"
#include "safety/robust.h"
#include "report/report.h"
#include "train/checkpoint.h"

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

/* An output (--svg, --html) goes through the one output rule (checkpoint_catalog_check_output):
 * never the run database it is drawn from (`report --html runs/x/run.db` once replaced a run's
 * only record with a web page), never into a checkpoint (`--svg RUN/ckpt/step_N/manifest.json`
 * made `ckpt verify` fail), never renamed over a FIFO or a link; nor the other output. Checked
 * before the summary is printed, so a bad path fails alone. Returns 0, or MT_EXIT_USAGE after one
 * line on stderr. */
static int check_outputs(const char *run_dir, const char *svg, const char *html) {
    const char *outs[2] = {svg, html}, *names[2] = {"--svg", "--html"};
    checkpoint_catalog cat;
    checkpoint_catalog_open(&cat, run_dir);
    int rc = 0;
    for (int o = 0; o < 2 && rc == 0; o++) {
        char err[8192];
        if (outs[o] && checkpoint_catalog_check_output(&cat, run_dir, outs[o], 0, err,
                                                       sizeof(err)) < 0) {
            fprintf(stderr, "minitrain: error: report %s %s\n", names[o], err);
            rc = MT_EXIT_USAGE;
        }
    }
    checkpoint_catalog_close(&cat);
    if (rc == 0 && svg && html && fs_same_file(svg, html)) {
        fprintf(stderr, "minitrain: error: report: --svg and --html name the same file (%s); give "
                "each its own\n", svg);
        rc = MT_EXIT_USAGE;
    }
    return rc;
}
static int robust_picture(void *user, FILE *f) { return robust_section(user, f, 0); }

int cmd_report_sections(sqlite3 *db, report_section *out, int max) {
    if (max < 1) return 0;
    out[0] = (report_section){"robustness", "Robustness: adversarial loss vs ε", robust_html, db};
    return 1;
}

/* --db: connect, note which server answered, and materialise job (a run name or job id) into an
 * in-memory run database that the one report path reads (report_load_db). Returns MT_EXIT_OK,
 * MT_EXIT_USAGE (bad URL, no such job) or MT_EXIT_ERROR (unreachable), with err. */
static int load_from_db(const char *url, const char *job, report_summary *r, cJSON **source,
                        char *err, size_t errlen) {
    db_conn *c = NULL;
    db_server sv;
    sqlite3 *mem = NULL;
    char job_id[37] = "";
    int rc = db_connect(url, &c, err, errlen), v = 0;
    if (rc == 0) rc = db_server_info(c, &sv, err, errlen);
    if (rc == 0) rc = db_schema_version(c, &v, err, errlen);
    if (rc == 0 && v == 0) {
        snprintf(err, errlen, "the database has no minitrain schema yet (run `minitrain db init`)");
        rc = DB_EUSAGE;
    }
    if (rc == 0) rc = db_read_job(c, job, &mem, job_id, err, errlen);
    db_close(c);
    if (rc != 0) return rc == DB_EUSAGE ? MT_EXIT_USAGE : MT_EXIT_ERROR;
    char label[400];
    snprintf(label, sizeof(label), "job %s at %.255s:%d", job_id, sv.host, sv.port);
    if (report_load_db(mem, NULL, label, r, err, errlen) != 0) return MT_EXIT_USAGE;
    cJSON *o = cJSON_CreateObject();
    mtCheck(o != NULL, "out of memory building the report");
    cJSON_AddStringToObject(o, "job_id", job_id);
    cJSON_AddStringToObject(o, "host", sv.host);
    cJSON_AddNumberToObject(o, "port", sv.port);
    cJSON_AddBoolToObject(o, "in_recovery", sv.in_recovery);
    cJSON_AddItemToObject(o, "replication_lag_s", sv.in_recovery && isfinite(sv.lag_s)
                                                      ? cJSON_CreateNumber(sv.lag_s)
                                                      : cJSON_CreateNull());
    *source = o;
    return MT_EXIT_OK;
}

/* The text report's line naming the server that answered --db. */
static void print_source(const cJSON *s) {
    const cJSON *lag = cJSON_GetObjectItemCaseSensitive(s, "replication_lag_s");
    int standby = cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(s, "in_recovery"));
    printf("database:       %s:%d (%s", cJSON_GetObjectItemCaseSensitive(s, "host")->valuestring,
           (int)cJSON_GetObjectItemCaseSensitive(s, "port")->valuedouble,
           standby ? "standby" : "primary");
    if (standby && cJSON_IsNumber(lag)) printf(", replication lag %.3f s", lag->valuedouble);
    else if (standby) printf(", replication lag unknown");
    printf("), job %s\n", cJSON_GetObjectItemCaseSensitive(s, "job_id")->valuestring);
}

int cmd_report(int argc, char **argv) {
    const char *run_dir = NULL, *svg = NULL, *html = NULL, *db_url = NULL;
    int json = 0;
    const args_opt opts[] = {
        {"run", KEYTAB_STRING, &run_dir, 0, 0, "DIR", "run directory (holds run.db); with --db: a "
         "run name or job id", ""},
        {"db", KEYTAB_STRING, &db_url, 0, 0, "URL", "read the job from the team's PostgreSQL "
         "instead (libpq URL;\ntarget_session_attrs=prefer-standby reads a standby; "
         "docs/database.md)", ""},
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
        .synopsis = "usage: minitrain report --run DIR [--json] [--svg FILE] [--html FILE]\n"
                    "       minitrain report --db URL --run NAME|JOB_ID [--json] [--svg FILE] "
                    "[--html FILE]",
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
    report_summary r;
    char err[8600];
    cJSON *source = NULL;
    if (db_url != NULL) {
        if (svg && html && fs_same_file(svg, html))
            return mt_error("report: --svg and --html name the same file (%s); give each its own",
                            svg);
        int rc = load_from_db(db_url, run_dir, &r, &source, err, sizeof(err));
        if (rc != MT_EXIT_OK) {
            fprintf(stderr, "minitrain: error: %s\n", err);
            return rc;
        }
    } else {
        if (check_outputs(run_dir, svg, html) != 0) return MT_EXIT_USAGE;
        if (report_load(run_dir, &r, err, sizeof(err)) != 0) {
            fprintf(stderr, "minitrain: error: %s\n", err);
            return MT_EXIT_USAGE;
        }
    }
    /* the newest robustness evaluation (safety/robust.h), when the run has one */
    cJSON *rob = robust_report_json(r.db);
    r.extra = cJSON_CreateObject();
    mtCheck(r.extra != NULL, "out of memory building the report");
    cJSON_AddItemToObject(r.extra, "robustness", rob ? rob : cJSON_CreateNull());
    if (source != NULL) { /* which server answered (--db) */
        cJSON_AddItemToObject(r.extra, "source", source);
        if (!json) print_source(source);
    }
    int ret = json ? report_print_json(&r) : report_print_text(&r);
    if (!json) robust_report_print(r.db);
    fflush(stdout);
    svg_panel beside = {robust_svg_width(r.db), robust_panel, r.db};
    int drew = svg ? report_svg(&r, &beside, svg, err, sizeof(err)) : 0;
    if (drew < 0) {
        fprintf(stderr, "minitrain: error: report --svg: %s\n", err);
        ret = MT_EXIT_IO; /* the path passed check_outputs: a write that failed */
    } else if (svg) { /* drew 1: no steps logged yet; the file says so, as --html's page does */
        if (!json) printf("plot:           %s%s%s%s\n", svg, drew ? " (" : "", drew ? err : "",
                          drew ? ")" : "");
        report_section pic = {"robustness", "Robustness", robust_picture, r.db};
        if (report_svg_pictures(&r, &pic, 1, svg, !json, err, sizeof(err)) < 0) {
            fprintf(stderr, "minitrain: error: report --svg: %s\n", err);
            ret = MT_EXIT_IO;
        }
    }
    report_section sec[1];
    int nsec = cmd_report_sections(r.db, sec, 1);
    if (html && report_html(&r, NULL, sec, nsec, html, err, sizeof(err)) != 0) {
        fprintf(stderr, "minitrain: error: report --html: %s\n", err);
        ret = MT_EXIT_IO;
    } else if (html && !json) {
        printf("html:           %s\n", html);
    }
    report_free(&r);
    return ret;
}
