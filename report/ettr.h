/*
 * report/ettr.h — ETTR accounting: where the wall time of a job went, from its run database.
 *
 * ETTR (effective training time ratio) = time spent in training steps whose results were kept /
 * wall time of the whole job. A job is one RUN_DIR: every (re)launch of the trainer adds a `runs`
 * row, and the supervisor (`minitrain run`, sched/supervisor.c) logs its own events with run_id 0.
 *
 * The wall time [job start, job end] is split into categories that add up to it exactly:
 *   useful        step time (metrics.step_ms) of the occurrence of each step number that was kept:
 *                 the one logged by the LAST run that logged that step (earlier ones were
 *                 thrown away by a restart and recomputed);
 *   recompute     step time of the occurrences that were thrown away, plus the partial work between
 *                 a run's last logged step and its failure;
 *   detection     failure (fault/nonfinite/sdc event, or the supervisor's estimate) -> the
 *                 supervisor notices it (its `failure` event), less the localisation in it;
 *   localisation  finding WHICH rank or machine is at fault once something is wrong: the
 *                 supervisor's stack capture of a stuck job (`stacks` event, "seconds", source
 *                 supervisor: part of the detection window it ran in) and the silent-corruption
 *                 checks (`sdc_ok` / `sdc` events, "ms": hook time between steps). The fail-slow
 *                 rounds run in the supervisor while the job trains on: they cost no wall time of
 *                 their own (the slow steps until the verdict are counted as steps);
 *   teardown      killing the process group (supervisor `teardown` event, detail "seconds");
 *   backoff       waiting before the relaunch (supervisor `backoff` event, detail "seconds");
 *   startup       job start -> first step of the first launch (process start, data, model init);
 *   relaunch      relaunch -> first step after a restart, minus the checkpoint load;
 *   ckpt_load     checkpoint load time logged by the trainer on resume;
 *   ckpt_stall    time training was blocked by checkpoint saves (snapshot/stall time logged by the
 *                 trainer per save);
 *   other         the rest: evaluation, sampling, logging, the final save, anything unaccounted.
 * Where the supervisor left no record (a job restarted by hand), gaps between runs land in "other".
 *
 * Event kinds read (the EV_* / EVK_* names of core/events.h, which says who writes each):
 *   trainer:    start (time base for metrics.wall_s), fault (detail "kind"), nonfinite, sdc and
 *               sdc_ok ("ms"),
 *               checkpoint (detail "snapshot_ms", one per tier), ckpt_wait ("waited_ms"), resume
 *               ("load_ms"); the `checkpoints` table's snapshot_ms when no event carries a stall;
 *   supervisor: supervisor_start, launch, mtbf_kill, failure (detail "kind", "failed_at"),
 *               stacks ("seconds", "source"), teardown, supervisor_end.
 */
#ifndef MT_SCHED_ETTR_H
#define MT_SCHED_ETTR_H

#include <stddef.h>

#include <sqlite3.h>

#define ETTR_MAX_KINDS 8

typedef struct {
    double job_start, job_end; /* unix seconds */
    double wall_s;
    /* the breakdown: sums to wall_s (other = the remainder, may be slightly negative from clock
     * jitter between processes) */
    double useful_s, recompute_s, detect_s, localise_s, teardown_s, backoff_s, startup_s,
        relaunch_s, ckpt_load_s, ckpt_stall_s, other_s;
    int localisations; /* stack captures by the supervisor + silent-corruption checks */
    double ettr; /* useful_s / wall_s; NAN when wall_s <= 0 */
    int launches;    /* supervisor launches (or runs rows when unsupervised) */
    int restarts;    /* launches - 1 */
    int failures;    /* supervisor failure events */
    int checkpoints; /* checkpoint saves with a measured stall */
    struct {
        char kind[32];
        int count;
    } by_kind[ETTR_MAX_KINDS];
    int n_kinds;
    int kept_steps, lost_steps; /* step occurrences kept / recomputed (thrown away) */
    double mttr_s;       /* mean over failures of (end of the first step after it - failure time) */
    double max_recovery_s;
    int recoveries;      /* failures followed by a step */
    double mtbf_s;       /* wall_s / failures; NAN without failures */
    double restart_overhead_s; /* mean per failure of detection+teardown+backoff+relaunch+load */
    double fault_mtbf_s; /* the supervisor's --fault-mtbf (injected MTBF), NAN when off */
    double step_s;       /* mean step time of the kept steps; NAN without steps */
    double ckpt_stall_mean_s;  /* mean stall per checkpoint; NAN without checkpoints */
} ettr_report;

/* Compute the report from an open run database (read-only use). Returns 0, or -1 with a one-line
 * message in err (missing tables, SQLite error). A database without runs gives wall_s = 0 and
 * ettr = NAN. */
int ettr_compute(sqlite3 *db, ettr_report *out, char *err, size_t errlen);

/* Open RUN_DIR/run.db read-only and compute. Returns 0 or -1 with err naming the path. */
int ettr_compute_dir(const char *run_dir, ettr_report *out, char *err, size_t errlen);

/* Print the human-readable breakdown (several lines, each prefixed by indent). */
void ettr_print(const ettr_report *r, const char *indent);

#endif /* MT_SCHED_ETTR_H */
