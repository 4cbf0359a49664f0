/*
 * cmd/dashboard.c — `minitrain dashboard [--runs DIR ...] [--port P] [--bind ADDR] [--token T]`:
 * options and wiring of the live dashboard (dash/dash.h), until SIGINT or SIGTERM.
 *
 * It wires the run page's contributed sections (safety's robustness, cmd_report_sections, the
 * same as `report --html`) and prints "dashboard: listening on http://HOST:PORT" once it listens
 * (tests parse the port of --port 0). --db URL adds the team's PostgreSQL database: its jobs are
 * mirrored as run.db files (cmd/dash_mirror.c) and read like any other run directory.
 */
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cmd/args.h"
#include "cmd/cmd.h"
#include "core/check.h"
#include "dash/dash.h"

#define MAX_ROOTS 64

typedef struct {
    const char *roots[MAX_ROOTS];
    int n, overflow;
} roots_acc;

static int known(const char *name) { return !strcmp(name, "runs"); }

static void other(void *ctx, const char *name, const char *value) {
    roots_acc *a = ctx;
    (void)name;
    if (a->n < MAX_ROOTS) a->roots[a->n++] = value;
    else a->overflow = 1;
}

static void help_tail(FILE *out) {
    fputs("  --runs DIR            a directory of run directories (or one run directory);\n"
          "                        repeat for more (default: runs)\n", out);
}

int cmd_dashboard(int argc, char **argv) {
    const char *bind = "127.0.0.1", *token = NULL, *db = NULL;
    int port = 8090, poll_ms = 2000;
    const args_opt opts[] = {
        {"port", KEYTAB_INT, &port, 0, 65535, "P", "port to listen on (0: any free port)", NULL},
        {"bind", KEYTAB_STRING, &bind, 0, 0, "ADDR", "address to listen on; other than loopback "
         "needs --token", NULL},
        {"token", KEYTAB_STRING, &token, 0, 0, "T", "bearer token every request must carry "
         "(Authorization: Bearer T,\nor open /?token=T once in a browser)", ""},
        {"poll-ms", KEYTAB_INT, &poll_ms, 200, 600000, "MS", "how often open pages ask for "
         "changes", NULL},
        {"db", KEYTAB_STRING, &db, 0, 0, "URL", "the team's PostgreSQL database (docs/database.md):\n"
         "its jobs beside the --runs directories, polled every --poll-ms", ""},
        {0},
    };
    roots_acc acc = {0};
    const args_spec spec = {
        .cmd = "dashboard",
        .synopsis = "usage: minitrain dashboard [--runs DIR ...] [--port P] [--bind ADDR] "
                    "[--token T] [--db URL]",
        .about = "Serve a live, read-only web dashboard of every run under the --runs\n"
                 "directories: the runs page (status, steps, losses, tokens/s, MFU, ETTR,\n"
                 "failures; sortable, filterable), each run's page (the report --html page,\n"
                 "updating while it trains) and a compare page (loss curves on one plot, configs\n"
                 "side by side). Databases are opened read-only (docs/dashboard.md).",
        .opts = opts,
        .known = known,
        .other = other,
        .ctx = &acc,
        .help_tail = help_tail,
    };
    int prc = args_parse(&spec, argc, argv, NULL);
    if (prc != ARGS_CONTINUE) return prc;
    if (acc.overflow || (db && db[0] && acc.n == MAX_ROOTS)) {
        fprintf(stderr, "minitrain: error: dashboard: at most %d --runs directories%s\n",
                MAX_ROOTS - (db != NULL), db ? " with --db" : "");
        return MT_EXIT_USAGE;
    }
    char err[1024];
    cmd_mirror *mirror = NULL; /* --db: the database's jobs as run.db files, one more root */
    if (db && db[0]) {
        mirror = cmd_mirror_start(db, poll_ms, err, sizeof(err));
        if (!mirror) {
            fprintf(stderr, "minitrain: error: dashboard: %s\n", err);
            return MT_EXIT_USAGE;
        }
        acc.roots[acc.n++] = cmd_mirror_root(mirror);
    } else if (acc.n == 0) {
        acc.roots[acc.n++] = "runs";
    }
    dash_opts o = {acc.roots, acc.n, bind, port, token, poll_ms, cmd_report_sections};
    /* signals: taken by sigwait below; the server's threads inherit the mask */
    sigset_t set;
    cmd_block_signals(&set);
    int bound = 0;
    dash_server *s = dash_start(&o, &bound, err, sizeof(err));
    if (!s) {
        fprintf(stderr, "minitrain: error: dashboard: %s\n", err);
        cmd_mirror_stop(mirror);
        return MT_EXIT_USAGE;
    }
    int v6 = strchr(bind, ':') != NULL;
    printf("dashboard: listening on http://%s%s%s:%d (%d director%s%s)\n", v6 ? "[" : "", bind,
           v6 ? "]" : "", bound, acc.n, acc.n == 1 ? "y" : "ies", token ? ", token required" : "");
    fflush(stdout);
    cmd_wait_signal(&set, "dashboard");
    dash_stop(s);
    cmd_mirror_stop(mirror);
    return MT_EXIT_OK;
}
