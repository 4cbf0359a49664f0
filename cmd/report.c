/*
 * cmd/report.c — `minitrain report --run DIR [--json] [--svg FILE]`: the summary of a job from
 * its run database (sched/report.h), as text or JSON, and optionally its loss plot.
 */
#include <stdio.h>

#include "cmd/args.h"
#include "cmd/cmd.h"
#include "core/check.h"
#include "sched/report.h"

int cmd_report(int argc, char **argv) {
    const char *run_dir = NULL, *svg = NULL;
    int json = 0;
    const args_opt opts[] = {
        {"run", ARG_STRING, &run_dir, 0, 0, "DIR", "run directory (holds run.db)", ""},
        {"json", ARG_FLAG, &json, 0, 0, NULL, "print one JSON object instead of text", NULL},
        {"svg", ARG_STRING, &svg, 0, 0, "FILE", "also draw loss vs wall time with failures and "
         "restarts marked", ""},
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
    int ret = json ? report_print_json(&r) : report_print_text(&r);
    fflush(stdout);
    if (svg && report_svg(&r, svg, err, sizeof(err)) != 0) {
        fprintf(stderr, "minitrain: error: report --svg: %s\n", err);
        ret = MT_EXIT_USAGE;
    } else if (svg && !json) {
        printf("plot:           %s\n", svg);
    }
    report_free(&r);
    return ret;
}
