/*
 * sched/simulate.h — the ETTR simulator: an event-driven Monte Carlo of a long training job that
 * checkpoints periodically and fails at random, plus the closed-form models it is checked against.
 *
 * The job model (every quantity in seconds of wall time):
 *   - the job runs for a horizon of D seconds;
 *   - failures arrive as a Poisson process of rate 1/M, where M = MTBF of the whole job =
 *     (per-GPU MTBF in GPU-hours × 3600) / number of GPUs (independent GPUs, exponential lifetimes);
 *   - the job alternates COMPUTE phases of τ seconds (the checkpoint interval, in compute time)
 *     and SAVE phases of C seconds (the checkpoint stall: training is blocked). Work becomes safe
 *     ("committed") when a SAVE finishes;
 *   - a failure in any phase loses all work since the last commit and starts a RESTART phase of
 *     R seconds (detection + teardown + relaunch + checkpoint load), after which COMPUTE resumes.
 *     Failures can strike during RESTART and SAVE too (the rate does not stop);
 *   - at the horizon the work done since the last commit is counted as kept (the job's end saves).
 *   ETTR = committed compute / D.
 * This is the model of Young (1974) and Daly (2006), "A higher order estimate of the optimum
 * checkpoint interval for restart dumps", with R the restart time and C the dump time.
 */
#ifndef MT_SCHED_SIMULATE_H
#define MT_SCHED_SIMULATE_H

#include <stdint.h>

typedef struct {
    double job_mtbf_s;  /* M: mean time between failures of the whole job, s; <= 0 or inf = never */
    double ckpt_save_s; /* C: stall per checkpoint, s (>= 0) */
    double restart_s;   /* R: failure -> training again, s (>= 0) */
    double interval_s;  /* τ: compute seconds between checkpoints (> 0) */
    double horizon_s;   /* D: wall seconds simulated (> 0) */
} sim_params;

/* One simulated job. The five times add up to horizon_s (up to rounding). */
typedef struct {
    double ettr;      /* useful_s / horizon_s */
    double useful_s;  /* committed compute (plus the uncommitted tail at the horizon) */
    double lost_s;    /* compute thrown away by failures (recomputed later) */
    double ckpt_s;    /* time in SAVE phases, including saves cut short by a failure */
    double restart_s; /* time in RESTART phases */
    int64_t failures;
    int64_t checkpoints; /* completed saves */
} sim_result;

/* Summary of n trials. */
typedef struct {
    int trials;
    double mean, std, p5, p50, p95; /* of the per-trial ETTR; std is the sample std (n-1) */
    double mean_failures;
} sim_summary;

/* Job MTBF in seconds from G GPUs with a per-GPU MTBF of H GPU-hours: H·3600/G.
 * H <= 0 or infinite means "no failures" and returns INFINITY. */
double sim_job_mtbf_s(double gpus, double mtbf_gpu_hours);

/* Young's optimal checkpoint interval √(2·C·M) (Young 1974; Daly 2006 eq. 2), seconds.
 * Returns INFINITY when M is infinite (never fail: never checkpoint) and 0 when C = 0. */
double sim_young_daly_interval(double ckpt_save_s, double job_mtbf_s);

/* Closed-form first-order model: a fraction τ/(τ+C) of the time computes, and each failure
 * (rate 1/M) costs the restart R plus on average half a cycle (τ+C)/2 of lost work:
 *     ETTR ≈ τ/(τ+C) · (1 − (R + (τ+C)/2) / M)
 * Accurate when C, R << τ << M (second-order terms: failures during restarts, several failures
 * in one cycle). Clamped at 0. */
double sim_first_order_ettr(const sim_params *p);

/* The largest restart time R for which the first-order ETTR at τ reaches `target`:
 *     R = M·(1 − target·(τ+C)/τ) − (τ+C)/2
 * Negative means the target is out of reach with that C and τ whatever R is. */
double sim_max_restart_for(double target, double ckpt_save_s, double interval_s, double job_mtbf_s);

/* Simulate one job with the given RNG seed. Deterministic for a seed. */
void sim_run(const sim_params *p, uint64_t seed, sim_result *out);

/* n trials with seeds seed, seed+1, ...; fills out (percentiles by nearest rank). n >= 1. */
void sim_many(const sim_params *p, int n, uint64_t seed, sim_summary *out);

/* The inputs of one study (`minitrain simulate`, cmd/simulate.c). NAN = not given. */
typedef struct {
    double gpus;           /* G */
    double mtbf_gpu_hours; /* H, per GPU (INFINITY = no failures) */
    double ckpt_save_s;    /* C */
    double restart_s;      /* R */
    double interval_s;     /* τ; NAN = auto (Young/Daly) */
    double hours;          /* D / 3600; NAN = 720 */
    double target_ettr;    /* also print the largest R reaching this ETTR, per C */
    int trials;
    uint64_t seed;
    const char *from_run;  /* take C and R measured in this run directory's run.db, or NULL */
    const char *preset;    /* "llama3" | "byterobust" (published settings; given values win) */
} sim_study;

/* Fill in the preset and the measured values, check every input, then print the assumptions,
 * Young's interval, the Monte Carlo and first-order ETTR at it (and at interval_s when given)
 * and, with target_ettr, the restart time that reaches the target for a range of C. Bad input
 * (missing or out-of-range values, unknown preset, a run without the needed measurements) is a
 * user error: one line, exit 2. Returns MT_EXIT_OK. */
int sim_study_run(const sim_study *st);

#endif /* MT_SCHED_SIMULATE_H */
