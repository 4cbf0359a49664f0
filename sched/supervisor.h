/*
 * sched/supervisor.h — the restart loop around a training job (`minitrain run`, cmd/run.c).
 *
 *   minitrain run [--max-restarts N] [--heartbeat-timeout S] [--backoff MIN:MAX] [--run-dir DIR]
 *                 [--hostfile F] [--evict-stragglers] [--fault-mtbf S --seed N] -- LAUNCH...
 *
 * The supervisor starts LAUNCH (e.g. `mpirun -np 4 ./minitrain train --config X`) in its own
 * process group, watches it (exit status, per-rank heartbeats and pids, stragglers), and on a
 * failure kills the whole job (the ranks at once, a launcher like mpirun after a grace period),
 * relaunches it with `--resume auto` appended — at once for the first failure of the restart
 * window, after an exponential backoff for later ones. Every event goes to RUN_DIR/run.db with run_id 0
 * (see docs/ettr.md). The pieces that are pure functions are exposed here for the unit tests.
 */
#ifndef MT_SCHED_SUPERVISOR_H
#define MT_SCHED_SUPERVISOR_H

#include <stddef.h>
#include <stdint.h>

#include "sched/heartbeat.h"
#include "sched/hostfile.h"

/* Backoff before relaunch number `consecutive` (1 = after the first failure in the window):
 * min(max_s, min_s · 2^(consecutive-1)). */
double sup_backoff_s(double min_s, double max_s, int consecutive);

/* The rank to blame for a failure from the last heartbeats: the one furthest behind (lowest
 * step, then oldest record), since the fault hook runs before the heartbeat hook. -1 when n = 0. */
int sup_blame(const hb_record *r, int n);

/* Lower median of the busy_ms of records with state "run" (NAN when none). */
double sup_median_busy(const hb_record *r, int n);

/* The supervisor's settings (the flags of `minitrain run`, cmd/run.c). */
typedef struct {
    int max_restarts;         /* give up after more than this many failures in window_s */
    double window_s;          /* s */
    double hb_timeout_s;      /* no rank made progress for this long = hang, s */
    double backoff_min, backoff_max; /* exponential backoff between relaunches, s */
    double grace_s;           /* SIGTERM -> SIGKILL on teardown, s */
    double fault_mtbf_s;      /* > 0: kill a random rank at exponential intervals of this mean */
    double straggler_k;       /* busy time above k x the median ... */
    int straggler_w;          /* ... for w consecutive steps = straggler */
    int evict_stragglers;     /* 1: a straggler is a failure (restart without it); so is a
                               * fail-slow verdict */
    double failslow_round_s;  /* fail-slow rounds (sched/failslow.h): length of a round, s */
    int failslow_rounds;      /* ... rounds in the majority window (0 = off) */
    uint64_t seed;            /* of fault_mtbf_s */
    const char *run_dir;      /* the job's run directory (required) */
    const char *hostfile;     /* OpenMPI hostfile, or NULL */
    const char *rankfile;     /* a `minitrain plan` rankfile: ranks -> hosts, re-planned on a
                               * cordon (sched/replan.h), or NULL */
    int cordon_after;         /* failures blamed on a host before it is cordoned (default 2) */
    const char *db_url;       /* PostgreSQL the supervisor ships run.db to (db/db.h), or NULL */
} sup_opts;

/* The defaults of `minitrain run`: 5 restarts in 3600 s, heartbeat timeout 60 s, backoff 1..30 s,
 * grace 5 s, stragglers at 2x the median for 10 steps, fail-slow rounds of 10 s over 5, seed 1, no faults, no hostfile, no
 * rankfile, a host cordoned after 2 failures blamed on it. */
void sup_opts_default(sup_opts *o);

/* The run directory a launch command names (`--run-dir DIR`, `--run-dir=DIR`, or with an
 * underscore), or NULL. */
const char *sup_launch_run_dir(char **launch, int nlaunch);

/* The file a supervisor creates in the heartbeat directory to ask the ranks to checkpoint now and
 * stop (on SIGUSR1: `sbatch --signal=B:USR1@S`, time limit near or preemption; sched/preempt.h). */
#define SUP_STOP_REQUEST_FILE "checkpoint_now"

/* Run the restart loop around launch_argv[0..nlaunch-1] until the job finishes, the supervisor gives
 * up, or SIGINT/SIGTERM/SIGHUP. SIGUSR1 asks the job to checkpoint now and stop (the ranks agree on
 * the step, sched/preempt.h); once it has, inside a Slurm allocation the supervisor requeues the
 * job (`scontrol requeue`, sched/slurm.h) and the requeued job resumes from that checkpoint.
 * Returns the process exit code: 0 when the job finished cleanly or stopped on SIGUSR1,
 * 1 when it gave up (restarts exhausted, usage error of the launch, no hosts left), 128+signal
 * when interrupted. A bad hostfile or run directory, or a run directory another job holds
 * (RUN_DIR/.lock, core/runlock.h), is a user error (one line, exit 2). */
int sup_run(const sup_opts *o, char **launch_argv, int nlaunch);

#endif /* MT_SCHED_SUPERVISOR_H */
