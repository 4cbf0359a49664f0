/*
 * cmd/report.c — `minitrain report --run DIR [--json] [--svg FILE]`: the summary of a job from
 * its run database (sched/report.h), as text or JSON, and optionally its loss plot — with the
 * newest robustness evaluation (safety/robust.h) added to each: a table, a "robustness" key, a
 * panel beside the plot. sched/ knows nothing of safety/; this file wires the two.
 */
#include <stdio.h>

#include "cmd/args.h"
#include "cmd/cmd.h"
#include "core/check.h"
#include "safety/robust.h"
#include "sched/report.h"

/* safety's adversarial-loss-vs-eps panel (user = the run database) */
static void robust_panel(void *user, FILE *f, int x0, int h) { robust_svg_panel(user, f, x0, h); }

int cmd_report(int argc, char **argv) {
    const char *run_dir = NULL, *svg = NULL;
    int json = 0;
    const args_opt opts[] = {
        {"run", ARG_STRING, &run_dir, 0, 0, "DIR", "run directory (holds run.db)", ""},
        {"json", ARG_FLAG, &json, 0, 0, NULL, "print one JSON object instead of text", NULL},
        {"svg", ARG_STRING, &svg, 0, 0, "FILE", "also draw loss vs wall time with failures and "
         "restarts marked\n(and adversarial loss vs eps beside it, when the run has robustness "
         "evaluations)", ""},
        {0},
    };
    const args_spec spec = {
        .cmd = "report",
        .synopsis = "usage: minitrain report --run DIR [--json] [--svg FILE]",
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
    if (svg && report_svg(&r, &beside, svg, err, sizeof(err)) != 0) {
        fprintf(stderr, "minitrain: error: report --svg: %s\n", err);
        ret = MT_EXIT_USAGE;
    } else if (svg && !json) {
        printf("plot:           %s\n", svg);
    }
    report_free(&r);
    return ret;
}
