/*
 * cmd/db.c — `minitrain db init|ship|runs`: the team's PostgreSQL database (db/db.h).
 *
 *   db init --db URL                       create or migrate the schema (idempotent)
 *   db ship --run DIR [--follow] [--db URL] ship run.db's rows not yet shipped (the sidecar)
 *   db runs --db URL [--since W] [--status S] [--json]  list the team's jobs
 *
 * URL defaults to $MINITRAIN_DB. Exit codes: 0; 2 for the user's mistakes (a URL libpq cannot
 * parse, no run.db, a schema from a newer minitrain, an unknown status); 1 when the database
 * cannot be reached or fails (the rows then wait in run.db).
 */
#define _XOPEN_SOURCE 700 /* strptime */
#define _DEFAULT_SOURCE /* timegm */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "cmd/args.h"
#include "cmd/cmd.h"
#include "core/check.h"
#include "core/rundb.h"
#include "core/timer.h"
#include "db/db.h"

static int exit_of(int code) { return code == DB_EUSAGE ? MT_EXIT_USAGE : MT_EXIT_ERROR; }

static int fail(int code, const char *err) {
    fprintf(stderr, "minitrain: error: %s\n", err);
    return exit_of(code);
}

/* --db, else $MINITRAIN_DB; NULL after the error line when neither names a database. */
static const char *need_url(const char *opt, const char *cmd) {
    const char *url = db_url_pick(opt, NULL);
    if (url == NULL)
        fprintf(stderr, "minitrain: error: db %s: no database: give --db URL or set $%s (e.g. "
                "postgresql://host:5432/minitrain)\n", cmd, DB_ENV_URL);
    return url;
}

static int do_init(int argc, char **argv) {
    const char *url = NULL;
    const args_opt opts[] = {
        {"db", KEYTAB_STRING, &url, 0, 0, "URL", "libpq connection string (default $MINITRAIN_DB)", ""},
        {0},
    };
    const args_spec spec = {.cmd = "db init", .synopsis = "usage: minitrain db init --db URL",
                            .about = "Create the schema in the database, or apply the forward "
                                     "migrations it lacks.\nRunning it again changes nothing.",
                            .opts = opts};
    int prc = args_parse(&spec, argc, argv, NULL);
    if (prc != ARGS_CONTINUE) return prc;
    if ((url = need_url(url, "init")) == NULL) return MT_EXIT_USAGE;
    char err[1400];
    db_conn *c = NULL;
    int from = 0, to = 0, rc = db_connect(url, &c, err, sizeof(err));
    if (rc == 0) rc = db_schema_migrate(c, &from, &to, err, sizeof(err));
    db_close(c);
    if (rc != 0) return fail(rc, err);
    if (from == to)
        printf("database schema already at version %d\n", to);
    else
        printf("database schema migrated from version %d to %d\n", from, to);
    return MT_EXIT_OK;
}

static int do_ship(int argc, char **argv) {
    const char *url = NULL, *run = NULL;
    int follow = 0;
    double poll = 1.0, drain = 60.0;
    const args_opt opts[] = {
        {"run", KEYTAB_STRING, &run, 0, 0, "DIR", "run directory (holds run.db)", ""},
        {"db", KEYTAB_STRING, &url, 0, 0, "URL", "libpq connection string (default $MINITRAIN_DB)", ""},
        {"follow", KEYTAB_FLAG, &follow, 0, 0, NULL, "keep shipping while the run is live (its lock "
         "held), then ship\nthe rest and exit", NULL},
        {"poll", KEYTAB_DOUBLE, &poll, 0.01, 3600, "S", "seconds between passes with --follow", NULL},
        {"drain", KEYTAB_DOUBLE, &drain, 0, 1e6, "S", "with --follow: how long the last pass retries "
         "an unreachable\ndatabase after the run ended", NULL},
        {0},
    };
    const args_spec spec = {
        .cmd = "db ship",
        .synopsis = "usage: minitrain db ship --run DIR [--follow] [--db URL]",
        .about = "Copy the rows of DIR/run.db not yet shipped to the database, in batches, each\n"
                 "one transaction; the marks in run.db move only after COMMIT. Running it again\n"
                 "ships nothing twice (keys job_id, node, rowid).",
        .opts = opts};
    int prc = args_parse(&spec, argc, argv, NULL);
    if (prc != ARGS_CONTINUE) return prc;
    if (run == NULL || run[0] == '\0')
        return mt_error("db ship: --run DIR is required (see `minitrain db ship --help`)");
    if ((url = need_url(url, "ship")) == NULL) return MT_EXIT_USAGE;
    char err[2400];
    int rc = db_ship_run(url, run, follow, poll, drain, 1, err, sizeof(err));
    return rc == 0 ? MT_EXIT_OK : fail(rc, err);
}

/* --since: unix seconds, a duration back from now (90s, 30m, 2h, 7d) or a UTC date
 * YYYY-MM-DD[THH:MM[:SS]]. NAN when it is none of these. */
static double parse_since(const char *s) {
    char *end = NULL;
    double v = strtod(s, &end);
    if (end != s && *end == '\0' && isfinite(v)) return v;
    if (end != s && isfinite(v) && v >= 0 && end[1] == '\0') {
        double unit = *end == 's' ? 1 : *end == 'm' ? 60 : *end == 'h' ? 3600 : *end == 'd' ? 86400 : 0;
        if (unit > 0) return timer_unix() - v * unit;
    }
    struct tm tm;
    memset(&tm, 0, sizeof(tm));
    const char *fmts[] = {"%Y-%m-%dT%H:%M:%S", "%Y-%m-%dT%H:%M", "%Y-%m-%d"};
    for (int i = 0; i < 3; i++) {
        memset(&tm, 0, sizeof(tm));
        const char *e = strptime(s, fmts[i], &tm);
        if (e != NULL && *e == '\0') return (double)timegm(&tm);
    }
    return NAN;
}

static int do_runs(int argc, char **argv) {
    const char *url = NULL, *since_s = NULL, *status = NULL;
    int json = 0;
    const args_opt opts[] = {
        {"db", KEYTAB_STRING, &url, 0, 0, "URL", "libpq connection string (default $MINITRAIN_DB; "
         "target_session_attrs=\nprefer-standby reads from a standby)", ""},
        {"since", KEYTAB_STRING, &since_s, 0, 0, "WHEN", "only jobs started since WHEN: unix seconds, "
         "2h / 7d ago,\nor a UTC date 2026-12-01[T12:00]", ""},
        {"status", KEYTAB_STRING, &status, 0, 0, "S", "only jobs whose newest run has status S (" RUNDB_STATUSES ")", ""},
        {"json", KEYTAB_FLAG, &json, 0, 0, NULL, "print one JSON array", NULL},
        {0},
    };
    const args_spec spec = {.cmd = "db runs",
                            .synopsis = "usage: minitrain db runs --db URL [--since WHEN] "
                                        "[--status S] [--json]",
                            .about = "List the team's jobs in the database, newest first.",
                            .opts = opts};
    int prc = args_parse(&spec, argc, argv, NULL);
    if (prc != ARGS_CONTINUE) return prc;
    double since = NAN;
    if (since_s != NULL && isnan(since = parse_since(since_s)))
        return mt_error("db runs: --since '%s' is not unix seconds, a duration (2h, 7d) or a date "
                        "(2026-12-01)", since_s);
    if (status != NULL && !rundb_status_valid(status))
        return mt_error("db runs: --status '%s' is not one of " RUNDB_STATUSES, status);
    if ((url = need_url(url, "runs")) == NULL) return MT_EXIT_USAGE;
    char err[1400];
    db_conn *c = NULL;
    int rc = db_connect(url, &c, err, sizeof(err)), v = 0;
    if (rc == 0) rc = db_schema_version(c, &v, err, sizeof(err));
    if (rc == 0 && v == 0) {
        snprintf(err, sizeof(err), "the database has no minitrain schema yet (run `minitrain db "
                 "init --db URL`)");
        rc = DB_EUSAGE;
    }
    if (rc == 0) rc = db_list_runs(c, since, status, json, stdout, err, sizeof(err));
    db_close(c);
    return rc == 0 ? MT_EXIT_OK : fail(rc, err);
}

static void usage(FILE *f) {
    fprintf(f, "minitrain db: the team's PostgreSQL database (docs/database.md)\n\n"
               "usage: minitrain db init --db URL\n"
               "  create the schema, or apply the migrations it lacks\n"
               "usage: minitrain db ship --run DIR [--follow] [--db URL]\n"
               "  ship DIR/run.db's rows not yet shipped (a sidecar with --follow)\n"
               "usage: minitrain db runs --db URL [--since WHEN] [--status S] [--json]\n"
               "  list the team's jobs\n\n"
               "URL is a libpq connection string, default $MINITRAIN_DB, e.g.\n"
               "  postgresql://h1:5432,h2:5432/minitrain?target_session_attrs=read-write\n");
}

int cmd_db(int argc, char **argv) {
    if (argc < 2 || !strcmp(argv[1], "--help") || !strcmp(argv[1], "-h")) {
        usage(argc < 2 ? stderr : stdout);
        return argc < 2 ? MT_EXIT_USAGE : MT_EXIT_OK;
    }
    const char *sub = argv[1];
    if (!strcmp(sub, "init")) return do_init(argc - 1, argv + 1);
    if (!strcmp(sub, "ship")) return do_ship(argc - 1, argv + 1);
    if (!strcmp(sub, "runs")) return do_runs(argc - 1, argv + 1);
    return mt_error("unknown db command '%s' (init, ship or runs; see `minitrain db --help`)", sub);
}
