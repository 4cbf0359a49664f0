/*
 * cmd/run.c — `minitrain run [options] -- LAUNCH...`: the flags of the supervisor, then its
 * restart loop (sched/supervisor.h).
 *
 * Everything after `--` is the launch command, passed through untouched (its own --help
 * included). The run directory is --run-dir, else the launch command's --run-dir.
 */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "cmd/args.h"
#include "cmd/cmd.h"
#include "db/db.h"
#include "core/check.h"
#include "sched/supervisor.h"

/* --backoff MIN:MAX seconds, MAX >= MIN >= 0. */
static int parse_backoff(const char *v, sup_opts *o) {
    const char *colon = strchr(v, ':');
    char min[64];
    if (!colon || colon == v || (size_t)(colon - v) >= sizeof(min)) {
        fprintf(stderr, "minitrain: error: --backoff expects MIN:MAX seconds (e.g. 1:30), got "
                "'%s'\n", v);
        return MT_EXIT_USAGE;
    }
    snprintf(min, sizeof(min), "%.*s", (int)(colon - v), v);
    int rc = args_double("backoff MIN", min, 0, 1e9, &o->backoff_min);
    if (rc == ARGS_CONTINUE) rc = args_double("backoff MAX", colon + 1, o->backoff_min, 1e9,
                                              &o->backoff_max);
    return rc;
}

/* A launch command that cannot be executed (a typo, a missing ./minitrain) fails now with one
 * line: restarting it would only repeat execvp's ENOENT max_restarts times, with backoff. As
 * execvp: a name with '/' is a path, else it is searched in PATH. */
static void check_executable(const char *cmd) {
    struct stat st;
    if (strchr(cmd, '/')) {
        if (stat(cmd, &st) != 0) mt_fail("run: cannot execute '%s': %s", cmd, strerror(errno));
        if (!S_ISREG(st.st_mode) || access(cmd, X_OK) != 0)
            mt_fail("run: cannot execute '%s': %s", cmd, S_ISREG(st.st_mode) ? strerror(errno)
                                                                              : "not a file");
        return;
    }
    const char *p = getenv("PATH");
    if (p == NULL) p = "/usr/bin:/bin";
    for (;;) {
        size_t n = strcspn(p, ":"); /* an empty entry is the current directory */
        char file[4096];
        snprintf(file, sizeof(file), "%.*s/%s", (int)(n ? n : 1), n ? p : ".", cmd);
        if (stat(file, &st) == 0 && S_ISREG(st.st_mode) && access(file, X_OK) == 0) return;
        if (p[n] == '\0') break;
        p += n + 1;
    }
    mt_fail("run: cannot execute '%s': not found in PATH", cmd);
}

int cmd_run(int argc, char **argv) {
    sup_opts o;
    sup_opts_default(&o);
    const char *backoff = NULL;
    unsigned long long seed = o.seed;
    const args_opt opts[] = {
        {"run-dir", KEYTAB_STRING, &o.run_dir, 0, 0, "DIR", "the job's run directory (default: "
         "LAUNCH's --run-dir)", ""},
        {"max-restarts", KEYTAB_INT, &o.max_restarts, 0, 1e9, "N", "give up after more than N "
         "failures in the window", NULL},
        {"restart-window", KEYTAB_DOUBLE, &o.window_s, 1, INFINITY, "S", "the window, seconds", NULL},
        {"heartbeat-timeout", KEYTAB_DOUBLE, &o.hb_timeout_s, 0.1, INFINITY, "S", "no rank made "
         "progress for S s = hang", NULL},
        {"backoff", KEYTAB_STRING, &backoff, 0, 0, "MIN:MAX", "exponential backoff between "
         "relaunches, seconds", "1:30"},
        {"grace", KEYTAB_DOUBLE, &o.grace_s, 0, INFINITY, "S", "SIGTERM -> SIGKILL grace period on "
         "teardown", NULL},
        {"hostfile", KEYTAB_STRING, &o.hostfile, 0, 0, "F", "hosts (OpenMPI format); a host blamed "
         "for 2 failures is\ncordoned: left out of RUN_DIR/hostfile.active, passed as\n"
         "$MINITRAIN_HOSTFILE and in place of a LAUNCH word {hostfile}", ""},
        {"rankfile", KEYTAB_STRING, &o.rankfile, 0, 0, "F", "a `minitrain plan` rankfile: a failed "
         "rank's host comes from it, and\nwhen a host is cordoned the layout is placed again on "
         "the\nhosts left plus a spare (RUN_DIR/rankfile.active, passed as\n$MINITRAIN_RANKFILE "
         "and in place of a LAUNCH word {rankfile});\nneeds a Slurm allocation or --hostfile",
         ""},
        {"cordon-after", KEYTAB_INT, &o.cordon_after, 1, 1e9, "N", "cordon a host after N failures "
         "blamed on it (inside a Slurm\nallocation: drain it too)", NULL},
        {"evict-stragglers", KEYTAB_FLAG, &o.evict_stragglers, 0, 0, NULL, "treat a straggler as a "
         "failure (restart without it)", NULL},
        {"straggler-factor", KEYTAB_DOUBLE, &o.straggler_k, 1, INFINITY, "K", "busy time above K x "
         "the median ...", NULL},
        {"straggler-steps", KEYTAB_INT, &o.straggler_w, 1, 1e9, "W", "... for W consecutive steps = "
         "straggler", NULL},
        {"failslow-round", KEYTAB_DOUBLE, &o.failslow_round_s, 0.1, INFINITY, "S", "fail-slow "
         "rounds: every S s flag the slowest mesh group\n(by busy time; none within the run's "
         "noise) ...", NULL},
        {"failslow-rounds", KEYTAB_INT, &o.failslow_rounds, 0, 32, "N", "... the group flagged in "
         "most of the last N rounds is\nblamed (0 = off; evicted with --evict-stragglers)", NULL},
        {"fault-mtbf", KEYTAB_DOUBLE, &o.fault_mtbf_s, 0.001, INFINITY, "S", "kill a random rank at "
         "exponential intervals of mean S s", ""},
        {"seed", KEYTAB_U64, &seed, 0, 1.8e19, "N", "seed of --fault-mtbf", NULL},
        {"db", KEYTAB_STRING, &o.db_url, 0, 0, "URL", "ship run.db's rows to this PostgreSQL "
         "(libpq URL; default $MINITRAIN_DB;\ndocs/database.md) on a thread: training never "
         "waits on it", ""},
        {0},
    };
    const args_spec spec = {
        .cmd = "run",
        .synopsis = "usage: minitrain run [options] -- LAUNCH...",
        .about = "Supervise a training job: start LAUNCH in its own process group, watch its exit\n"
                 "status and per-rank heartbeats, and on a failure kill the group, back off and "
                 "relaunch\nit with `--resume auto` appended (and `--run-dir DIR` when LAUNCH has "
                 "none).\nInside a Slurm allocation the hosts come from SLURM_*, a cordoned host is "
                 "drained\n(scontrol), and SIGUSR1 (sbatch --signal=B:USR1@S) makes the job "
                 "checkpoint now,\nstop and requeue itself. Events go to RUN_DIR/run.db; "
                 "`minitrain report --run DIR`\nshows ETTR and MTTR.",
        .opts = opts,
        .epilog = "example:\n"
                  "  minitrain run --max-restarts 5 --heartbeat-timeout 30 -- \\\n"
                  "      mpirun -np 4 ./minitrain train --config examples/shakespeare.ini --tp 2\n"
                  "  minitrain run --rankfile job.rankfile -- mpirun --rankfile {rankfile} -np 4 \\\n"
                  "      ./minitrain train --config C --rankfile {rankfile}   (examples/slurm/)",
        .dashdash = 1,
        .hint = "the launch command goes after --",
    };
    int first = argc;
    int prc = args_parse(&spec, argc, argv, &first);
    if (prc != ARGS_CONTINUE) return prc;
    if (backoff && (prc = parse_backoff(backoff, &o)) != ARGS_CONTINUE) return prc;
    o.seed = seed;
    o.db_url = db_url_pick(o.db_url, NULL);
    if (first >= argc) mt_fail("run: no launch command (usage: minitrain run [options] -- LAUNCH...)");
    char **launch = argv + first;
    int nlaunch = argc - first;
    check_executable(launch[0]);
    if (!o.run_dir) o.run_dir = sup_launch_run_dir(launch, nlaunch);
    if (!o.run_dir)
        mt_fail("run: give --run-dir DIR (or pass --run-dir DIR to the train command in LAUNCH): "
                "the supervisor keeps its events and heartbeats there");
    return sup_run(&o, launch, nlaunch);
}
