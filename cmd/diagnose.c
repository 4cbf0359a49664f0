/*
 * cmd/diagnose.c — `minitrain diagnose --run DIR [--json]`: where is every rank of a running job
 * right now? Captures the stack of each rank that runs on this host (from the job's heartbeat
 * files, sched/heartbeat.h), groups equal stacks and names the odd ones out with their mesh group
 * (sched/stacks.h), prints the verdict and records it in run.db (event EV_STACKS). The
 * supervisor does the same by itself when a job stops making progress.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include <cjson/cJSON.h>

#include "cmd/args.h"
#include "cmd/cmd.h"
#include "core/check.h"
#include "core/events.h"
#include "core/rundb.h"
#include "core/timer.h"
#include "sched/stacks.h"

int cmd_diagnose(int argc, char **argv) {
    const char *run = NULL;
    int json = 0, no_record = 0;
    const args_opt opts[] = {
        {"run", KEYTAB_STRING, &run, 0, 0, "DIR", "the job's run directory (RUN_DIR/heartbeat lists "
         "its ranks)", ""},
        {"json", KEYTAB_FLAG, &json, 0, 0, NULL, "print the stacks and the verdict as JSON", NULL},
        {"no-record", KEYTAB_FLAG, &no_record, 0, 0, NULL, "do not log the capture in run.db",
         NULL},
        {0},
    };
    const args_spec spec = {
        .cmd = "diagnose",
        .synopsis = "usage: minitrain diagnose --run DIR [--json] [--no-record]",
        .about = "Captures the stack of every rank of the job in DIR that runs on this host "
                 "(eu-stack,\nor gdb), groups equal stacks and names the ranks that are "
                 "elsewhere, with the\nmesh group they share and the machines that group "
                 "would evict. Needs ptrace\n(root, or kernel.yama.ptrace_scope = 0).",
        .opts = opts,
        .epilog = "example:\n  minitrain diagnose --run runs/shakespeare\n",
    };
    int prc = args_parse(&spec, argc, argv, NULL);
    if (prc != ARGS_CONTINUE) return prc;
    if (!run) {
        fprintf(stderr, "minitrain: error: diagnose needs --run DIR (see `minitrain diagnose "
                "--help`)\n");
        return MT_EXIT_USAGE;
    }
    struct stat st;
    if (stat(run, &st) != 0 || !S_ISDIR(st.st_mode)) {
        fprintf(stderr, "minitrain: error: --run %s is not a directory\n", run);
        return MT_EXIT_USAGE;
    }
    char hb_dir[4200];
    snprintf(hb_dir, sizeof(hb_dir), "%s/heartbeat", run);
    static stk_stack stacks[STK_MAX_RANKS];
    double t0 = timer_now();
    int n = stk_capture_heartbeats(hb_dir, timer_unix(), stacks, STK_MAX_RANKS);
    if (n <= 0) {
        fprintf(stderr, "minitrain: error: %s has no heartbeat records (%s): is a job running "
                "there under `minitrain run` or with %s set?\n", run,
                n < 0 ? "no heartbeat directory" : "empty", "MINITRAIN_HEARTBEAT_DIR");
        return MT_EXIT_ERROR;
    }
    stk_layout L = {0, 0, 0, 0, 0};
    char err[256];
    rundb *db = rundb_open(run, err, sizeof(err));
    if (db) stk_layout_of_db(rundb_sqlite(db), &L);
    stk_verdict v;
    int vrc = stk_verdict_of(stacks, n, &L, &v);
    cJSON *d = stk_verdict_json(stacks, n, &v, timer_now() - t0);
    cJSON_AddStringToObject(d, "source", "diagnose");
    if (json) {
        char *txt = cJSON_Print(d);
        mtCheck(txt != NULL, "out of memory");
        printf("%s\n", txt);
        free(txt);
    } else {
        for (int i = 0; i < n; i++)
            if (!stacks[i].ok) printf("rank %d: not captured: %s\n", stacks[i].rank, stacks[i].err);
        printf("%s\n", v.text);
    }
    ev_log(no_record ? NULL : db, 0, EV_STACKS, v.noutliers ? v.outliers[0] : -1, d);
    if (db) rundb_close(db);
    return vrc == 0 ? MT_EXIT_OK : MT_EXIT_ERROR;
}
