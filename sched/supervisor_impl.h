/*
 * sched/supervisor_impl.h — what the two halves of the supervisor share (private to sched/).
 *
 * sched/supervisor.c is the restart loop and its policies (restart window, backoff, cordon,
 * re-plan, requeue); sched/sup_attempt.c runs one attempt (launch, watch the heartbeats, tear
 * down) and fills a sup_failure the loop decides on. Both work on one sup: the settings of
 * `minitrain run` and the job's state.
 */
#ifndef MT_SCHED_SUPERVISOR_IMPL_H
#define MT_SCHED_SUPERVISOR_IMPL_H

#include <signal.h>
#include <sys/types.h>

#include "core/check.h"
#include "core/events.h"
#include "core/rng.h"
#include "core/rundb.h"
#include "core/runlock.h"
#include "db/db.h"
#include "sched/failslow.h"
#include "sched/replan.h"
#include "sched/supervisor.h"

#define SUP_POLL_MS 20
#define SUP_MAX_ARGS 512

/* The supervisor: its flags and the job's state. */
typedef struct {
    /* flags */
    int max_restarts;
    double window_s, hb_timeout_s, backoff_min, backoff_max, grace_s, fault_mtbf_s;
    double straggler_k;
    int straggler_w, evict_stragglers;
    fsl_opts failslow;       /* the fail-slow rounds (sched/failslow.h) */
    uint64_t seed;
    const char *run_dir, *hostfile;
    int cordon_after;
    char **launch;
    int nlaunch;
    /* state */
    rundb *db;
    db_shipper *shipper; /* --db: run.db's rows to PostgreSQL on a thread (db/db.h), or NULL */
    sup_hosts hosts;
    char hb_dir[4200], active_hostfile[4200];
    replan_rankfile rf;      /* --rankfile: the active placement (sched/replan.h) */
    int have_rf;
    char active_rankfile[4200], stop_path[4300];
    double fail_times[1024]; /* monotonic, of every failure */
    int nfail;
    rng_state rng;
    runlock lock;            /* RUN_DIR/.lock, held for the whole job */
    char sup_path[4300];     /* RUN_DIR/heartbeat/supervisor: what the ranks watch */
    unsigned long long start_ticks; /* this process's start time (/proc), in that record */
    double last_beat;        /* monotonic time of the last write of that record */
} sup;

/* Why an attempt failed (sup_watch fills it; the restart loop logs it and decides). */
typedef struct {
    const char *kind; /* crash | nonfinite | io | hang | straggler | failslow */
    int code, sig, rank, step;
    double failed_at; /* unix s, best estimate of when it broke */
    int trained;      /* some rank of the attempt had trained (a heartbeat in state "run") */
    char why[256];
} sup_failure;

/* Set by the signal handlers of sup_run: the signal that asks the supervisor to stop (0: none);
 * 1 when SIGUSR1 asked for a checkpoint now, 2 once the job was asked (sup_watch). */
/* sup_stop_count: SIGINT/SIGTERM/SIGHUP received (the first asks the job to checkpoint and stop,
 * a second stops it at once) */
extern volatile sig_atomic_t sup_stop_sig, sup_ckpt_now, sup_stop_count;

/* "minitrain run: " + the message + newline on stderr, flushed. */
MT_PRINTF(1, 2) void sup_say(const char *fmt, ...);

/* Log a supervisor event (run_id 0; core/events.h) and free its detail d. */
void sup_event(sup *s, const char *kind, int rank, cJSON *d);

/* A detail {"attempt": attempt} to add to. */
cJSON *sup_attempt_detail(int attempt);

/* Rewrite the supervisor's own record about once a second (sched/heartbeat.h): ranks on another
 * host judge the supervisor alive by its age. */
void sup_beat(sup *s);

/* Sleep ms, keeping the supervisor's record fresh. */
void sup_nap(sup *s, int ms);

/* Start attempt `attempt` of the launch command in its own process group (a relaunch, or the
 * first launch of a requeued Slurm job, appends --resume auto; --run-dir is appended when the
 * command has none) and log the launch event. The pid, or -1 when fork failed (errno). */
pid_t sup_launch(sup *s, int attempt);

/* Watch one attempt until it ends. Returns 0 for a clean finish, 1 for a failure (f filled),
 * 2 for a usage error of the launch (exit 2: restarting cannot help), 3 for a clean stop after
 * SIGUSR1 asked for a checkpoint now, -1 interrupted. */
int sup_watch(sup *s, pid_t child, int attempt, double last_fail_unix, sup_failure *f);

/* Stop every process of the attempt and reap it: after a failure SIGKILL to the ranks at once
 * and the launcher after grace_s; otherwise SIGTERM, then SIGKILL after grace_s. Seconds taken. */
double sup_teardown(sup *s, pid_t child, int failed);

#endif /* MT_SCHED_SUPERVISOR_IMPL_H */
