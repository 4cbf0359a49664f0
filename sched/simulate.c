/*
 * sched/simulate.c — event-driven Monte Carlo of ETTR at cluster scale (`minitrain simulate`,
 * cmd/simulate.c).
 *
 * The model is in sched/simulate.h. The simulation is a three-phase state machine (COMPUTE, SAVE,
 * RESTART) driven by two kinds of events: the end of the current phase and the next failure,
 * drawn from an exponential distribution (inverse CDF on xoshiro256** uniforms, core/rng.h).
 * Because failures are memoryless, one failure clock over the whole job is the same as a fresh
 * exponential after every event. A 54-day job with a failure every 3 hours and a checkpoint every
 * ~10 minutes is ~10^4 events, so hundreds of trials take milliseconds: the spread (std, 5th and
 * 95th percentiles) comes from many trials rather than from an approximation.
 *
 * The command also prints the closed-form first-order model and Young's interval beside the
 * Monte Carlo figures, and can take C and R measured by a real run (--from-run DIR, via
 * report/ettr.h). Presets reproduce published figures with every assumption printed.
 */
#include "sched/simulate.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/check.h"
#include "core/rng.h"
#include "report/ettr.h"

double sim_job_mtbf_s(double gpus, double mtbf_gpu_hours) {
    if (!(mtbf_gpu_hours > 0) || isinf(mtbf_gpu_hours) || !(gpus > 0)) return INFINITY;
    return mtbf_gpu_hours * 3600.0 / gpus;
}

double sim_young_daly_interval(double ckpt_save_s, double job_mtbf_s) {
    if (isinf(job_mtbf_s) || !(job_mtbf_s > 0)) return INFINITY;
    return sqrt(2.0 * ckpt_save_s * job_mtbf_s);
}

double sim_first_order_ettr(const sim_params *p) {
    double tau = p->interval_s, c = p->ckpt_save_s, m = p->job_mtbf_s;
    double compute = tau / (tau + c);
    double loss = (isinf(m) || !(m > 0)) ? 0.0 : (p->restart_s + 0.5 * (tau + c)) / m;
    double e = compute * (1.0 - loss);
    return e > 0 ? e : 0;
}

double sim_max_restart_for(double target, double ckpt_save_s, double interval_s,
                           double job_mtbf_s) {
    double tau = interval_s, c = ckpt_save_s;
    return job_mtbf_s * (1.0 - target * (tau + c) / tau) - 0.5 * (tau + c);
}

/* Exponential waiting time with mean m (inverse CDF; 1 - u is in (0, 1]). */
static double exp_sample(rng_state *r, double m) {
    if (isinf(m)) return INFINITY;
    double u = (double)(rng_u64(r) >> 11) * (1.0 / 9007199254740992.0); /* [0, 1), 53 bits */
    return -m * log(1.0 - u);
}

enum { PH_COMPUTE, PH_SAVE, PH_RESTART };

void sim_run(const sim_params *p, uint64_t seed, sim_result *out) {
    memset(out, 0, sizeof(*out));
    rng_state rng;
    rng_seed(&rng, seed);
    const double D = p->horizon_s, tau = p->interval_s, C = p->ckpt_save_s, R = p->restart_s;
    const double M = (p->job_mtbf_s > 0) ? p->job_mtbf_s : INFINITY;
    double t_fail = exp_sample(&rng, M);
    int ph = PH_COMPUTE;
    double ph_start = 0, ph_len = tau;
    double pending = 0; /* compute finished in this cycle, not yet committed */
    for (;;) {
        double ph_end = ph_start + ph_len;
        if (t_fail < ph_end && t_fail < D) { /* a failure inside this phase */
            double in = t_fail - ph_start;
            if (ph == PH_COMPUTE) out->lost_s += pending + in;
            if (ph == PH_SAVE) out->lost_s += pending, out->ckpt_s += in;
            if (ph == PH_RESTART) out->restart_s += in;
            out->failures++;
            pending = 0;
            ph = PH_RESTART;
            ph_start = t_fail;
            ph_len = R;
            t_fail += exp_sample(&rng, M);
            continue;
        }
        if (ph_end >= D) { /* the horizon: count the tail (the job's end saves it) */
            double in = D - ph_start;
            if (ph == PH_COMPUTE) out->useful_s += pending + in;
            if (ph == PH_SAVE) out->useful_s += pending, out->ckpt_s += in;
            if (ph == PH_RESTART) out->restart_s += in;
            if (ph == PH_SAVE && ph_end == D) out->checkpoints++;
            break;
        }
        if (ph == PH_COMPUTE) {
            pending += ph_len;
            if (C > 0) {
                ph = PH_SAVE;
                ph_len = C;
            } else { /* free checkpoints: commit at once */
                out->useful_s += pending;
                pending = 0;
                out->checkpoints++;
            }
        } else if (ph == PH_SAVE) {
            out->useful_s += pending;
            out->ckpt_s += ph_len;
            out->checkpoints++;
            pending = 0;
            ph = PH_COMPUTE;
            ph_len = tau;
        } else {
            out->restart_s += ph_len;
            ph = PH_COMPUTE;
            ph_len = tau;
        }
        ph_start = ph_end;
    }
    out->ettr = out->useful_s / D;
}

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* Nearest-rank percentile of a sorted array (q in [0, 1]). */
static double percentile(const double *s, int n, double q) {
    int k = (int)ceil(q * n) - 1;
    if (k < 0) k = 0;
    if (k >= n) k = n - 1;
    return s[k];
}

void sim_many(const sim_params *p, int n, uint64_t seed, sim_summary *out) {
    mtCheck(n >= 1, "sim_many needs at least one trial");
    double *e = mallocCheck((size_t)n * sizeof(double));
    double sum = 0, fails = 0;
    for (int i = 0; i < n; i++) {
        sim_result r;
        sim_run(p, seed + (uint64_t)i * 0x9E3779B97F4A7C15ULL, &r);
        e[i] = r.ettr;
        sum += r.ettr;
        fails += (double)r.failures;
    }
    double mean = sum / n, ss = 0;
    for (int i = 0; i < n; i++) ss += (e[i] - mean) * (e[i] - mean);
    qsort(e, (size_t)n, sizeof(double), cmp_double);
    out->trials = n;
    out->mean = mean;
    out->std = n > 1 ? sqrt(ss / (n - 1)) : 0;
    out->p5 = percentile(e, n, 0.05);
    out->p50 = percentile(e, n, 0.50);
    out->p95 = percentile(e, n, 0.95);
    out->mean_failures = fails / n;
    free(e);
}

/* ---- a study: what `minitrain simulate` prints -------------------------------------------------- */

static void print_line(const char *label, const sim_params *p, int trials, uint64_t seed) {
    sim_summary s;
    sim_many(p, trials, seed, &s);
    /* sim_first_order_ettr clamps at 0: a clamped 0 is the model out of its range, not a value */
    char fo[64];
    double e = sim_first_order_ettr(p);
    if (e > 0) snprintf(fo, sizeof(fo), "%.4f", e);
    else snprintf(fo, sizeof(fo), "n/a (losses exceed the interval)");
    printf("  %-22s interval %8.4g s | ETTR %.4f ± %.4f (p5 %.4f, p95 %.4f) | first-order %s"
           " | %.1f failures/job\n",
           label, p->interval_s, s.mean, s.std, s.p5, s.p95, fo, s.mean_failures);
}

/* --preset NAME: the published settings of a large job (Llama 3, ByteRobust) for every value
 * still NAN (flags given explicitly win). An unknown name is a user error (exit 2). */
static void apply_preset(const char *preset, double *gpus, double *hours, double *mtbf_h,
                         double *C, double *R, double *target) {
    /* Published settings. Flags given explicitly win over the preset. */
    if (!strcmp(preset, "llama3")) {
        /* Llama 3 (Dubey et al. 2024, §3.3.4): 16,384 H100 GPUs, a 54-day snapshot with 419
         * unexpected interruptions -> job MTBF = 54·24/419 h; ">90% effective training
         * time". The paper gives neither checkpoint stall nor restart time: assumed. */
        if (isnan(*gpus)) *gpus = 16384;
        if (isnan(*hours)) *hours = 54 * 24;
        if (isnan(*mtbf_h)) *mtbf_h = 54.0 * 24.0 / 419.0 * 16384.0;
        if (isnan(*C)) *C = 30;
        if (isnan(*R)) *R = 300;
        if (isnan(*target)) *target = 0.90;
    } else if (!strcmp(preset, "byterobust")) {
        /* ByteRobust (2025): 9,600 GPUs, ETTR up to 97%. Failure rate assumed equal to
         * Llama 3's per GPU (same hardware class); C and R are what we solve for. */
        if (isnan(*gpus)) *gpus = 9600;
        if (isnan(*hours)) *hours = 30 * 24;
        if (isnan(*mtbf_h)) *mtbf_h = 54.0 * 24.0 / 419.0 * 16384.0;
        if (isnan(*C)) *C = 5;
        if (isnan(*R)) *R = 120;
        if (isnan(*target)) *target = 0.97;
    } else {
        mt_fail("simulate: unknown --preset '%s' (llama3 | byterobust)", preset);
    }
}

/* --target-ettr: for a range of checkpoint stalls C, the longest restart time R that still
 * reaches target at Young's interval (sim_max_restart_for), each checked by Monte Carlo. */
static void print_restart_targets(double target, double M, double D, int trials, uint64_t seed) {
    printf("restart time that reaches ETTR %.2f (first-order model at Young's interval, "
           "checked by Monte Carlo):\n", target);
    const double cs[] = {1, 2, 5, 10, 30, 60, 120};
    for (size_t k = 0; k < sizeof(cs) / sizeof(cs[0]); k++) {
        double t = sim_young_daly_interval(cs[k], M);
        double rmax = sim_max_restart_for(target, cs[k], t, M);
        if (rmax <= 0) {
            printf("  C = %5.0f s: out of reach (interval %.0f s)\n", cs[k], t);
            continue;
        }
        sim_params q = {M, cs[k], rmax, t, D};
        sim_summary s;
        sim_many(&q, trials, seed, &s);
        printf("  C = %5.0f s: R <= %6.0f s (interval %5.0f s; Monte Carlo ETTR there "
               "%.4f ± %.4f)\n", cs[k], rmax, t, s.mean, s.std);
    }
}

int sim_study_run(const sim_study *st) {
    double gpus = st->gpus, mtbf_h = st->mtbf_gpu_hours, C = st->ckpt_save_s, R = st->restart_s,
           hours = st->hours, target = st->target_ettr;
    const char *from_run = st->from_run, *preset = st->preset;
    int trials = st->trials;
    uint64_t seed = st->seed;
    if (preset) apply_preset(preset, &gpus, &hours, &mtbf_h, &C, &R, &target);
    ettr_report er;
    int replay = 0;      /* --from-run alone: simulate that very run */
    double run_tau = NAN; /* its compute seconds per checkpoint */
    if (from_run) {
        char err[512];
        if (ettr_compute_dir(from_run, &er, err, sizeof(err)) != 0) mt_fail("simulate: %s", err);
        if (isnan(C)) {
            if (!isfinite(er.ckpt_stall_mean_s))
                mt_fail("simulate: %s logged no checkpoint stalls; give --ckpt-save-s", from_run);
            C = er.ckpt_stall_mean_s;
        }
        if (isnan(R)) {
            if (!isfinite(er.restart_overhead_s))
                mt_fail("simulate: %s recorded no failure with a restart; give --restart-s",
                        from_run);
            R = er.restart_overhead_s;
        }
        printf("measured in %s: checkpoint stall C = %.3f s (mean of %d), restart R = %.3f s "
               "(mean of %d failures: detection + teardown + backoff + relaunch + load)\n",
               from_run, er.ckpt_stall_mean_s, er.checkpoints, er.restart_overhead_s, er.failures);
        if (isnan(gpus) && isnan(mtbf_h)) {
            /* the run itself: one job (G = 1) with its own MTBF, length and interval */
            replay = 1;
            double m = isfinite(er.fault_mtbf_s) ? er.fault_mtbf_s : er.mtbf_s;
            if (!isfinite(m))
                mt_fail("simulate: %s saw no failure and had no --fault-mtbf; give --gpus and "
                        "--mtbf-gpu-hours", from_run);
            gpus = 1;
            mtbf_h = m / 3600.0;
            if (isnan(hours)) hours = er.wall_s / 3600.0;
            if (er.checkpoints > 0) run_tau = (er.useful_s + er.recompute_s) / er.checkpoints;
            printf("replaying the run: job MTBF M = %.1f s (%s), horizon %.1f s, interval %.2f s "
                   "of compute per checkpoint (%d saves, %.3f s/step)\n", m,
                   isfinite(er.fault_mtbf_s) ? "its --fault-mtbf" : "observed", er.wall_s,
                   run_tau, er.checkpoints, er.step_s);
        }
    }
    if (isnan(gpus)) mt_fail("simulate: --gpus is required (see --help)");
    if (isnan(mtbf_h)) mt_fail("simulate: --mtbf-gpu-hours is required (inf for no failures)");
    if (isnan(C)) mt_fail("simulate: --ckpt-save-s is required (or --from-run DIR)");
    if (isnan(R)) mt_fail("simulate: --restart-s is required (or --from-run DIR)");
    if (isnan(hours)) hours = 720;
    if (!(gpus >= 1)) mt_fail("simulate: --gpus must be >= 1, got %g", gpus);
    if (!(mtbf_h > 0)) mt_fail("simulate: --mtbf-gpu-hours must be > 0 (inf = no failures)");
    if (!(C >= 0) || isinf(C)) mt_fail("simulate: --ckpt-save-s must be >= 0, got %g", C);
    if (!(R >= 0) || isinf(R)) mt_fail("simulate: --restart-s must be >= 0, got %g", R);
    if (!(hours > 0) || isinf(hours)) mt_fail("simulate: --hours must be > 0, got %g", hours);
    if (trials < 1 || trials > 1000000) mt_fail("simulate: --trials must be in [1, 1000000]");
    if (!isnan(target) && !(target > 0 && target < 1))
        mt_fail("simulate: --target-ettr must be in (0, 1), got %g", target);

    if (gpus > 1e8) mt_fail("simulate: --gpus must be at most 1e8, got %g", gpus);
    if (hours > 1e6) mt_fail("simulate: --hours must be at most 1e6, got %g", hours);
    double M = sim_job_mtbf_s(gpus, mtbf_h), D = hours * 3600.0;
    /* the event loop costs O(failures): refuse jobs that would fail more than ~1e7 times */
    if (D / M * trials > 2e8)
        mt_fail("simulate: %.3g expected failures per trial x %d trials is too many to simulate "
                "(job MTBF %.3g s over %.3g s); lower --gpus, --hours or --trials, or raise "
                "--mtbf-gpu-hours", D / M, trials, M, D);
    double yd = sim_young_daly_interval(C, M);
    if (!(yd > 0) || yd > D) yd = D; /* never fails (or free checkpoints): one cycle */
    double tau = st->interval_s;
    if (isnan(tau)) {
        if (C == 0 && isfinite(M))
            mt_fail("simulate: --interval auto needs --ckpt-save-s > 0 (free checkpoints make "
                    "the optimal interval 0); give --interval S");
        tau = yd;
    } else if (!(tau > 0) || isinf(tau)) {
        mt_fail("simulate: --interval must be > 0 or auto");
    }
    printf("assumptions: %.0f GPUs, per-GPU MTBF %.6g GPU-hours -> job MTBF %.6g s (%.3g h); "
           "checkpoint stall C = %.3g s; restart R = %.3g s; horizon %.6g h; %d trials, seed %llu\n",
           gpus, mtbf_h, M, M / 3600, C, R, hours, trials, (unsigned long long)seed);
    if (preset && !strcmp(preset, "llama3"))
        printf("  preset llama3: 16,384 GPUs, 54 days, 419 unexpected interruptions (Llama 3, "
               "2024); C and R are assumptions\n");
    if (preset && !strcmp(preset, "byterobust"))
        printf("  preset byterobust: 9,600 GPUs, 97%% ETTR reported (ByteRobust, 2025); per-GPU "
               "failure rate assumed equal to Llama 3's\n");
    printf("Young/Daly interval sqrt(2*C*M) = %.4g s\n", yd);
    if (isfinite(M) && C > 0 && 2 * C > M / 2) /* Young 1974 / Daly 2006 assume C << M */
        printf("  note: the formula assumes C << M; here C = %.3g s against M = %.3g s, so "
               "sqrt(2*C*M) is only a rough guide (compare the Monte Carlo ETTR lines)\n", C, M);
    sim_params p = {M, C, R, yd, D};
    if (replay && isfinite(run_tau) && isnan(st->interval_s)) {
        sim_params q = {M, C, R, run_tau, D};
        print_line("at the run's interval:", &q, trials, seed);
        if (isfinite(er.fault_mtbf_s) && isfinite(er.mtbf_s)) {
            /* a run sees few failures: its own count is a sample; this takes it as given */
            sim_params o = {er.mtbf_s, C, R, run_tau, D};
            print_line("... at observed MTBF:", &o, trials, seed);
        }
        printf("  %-22s ETTR %.4f (%d failures in %.1f s: MTBF observed %.1f s)\n", "measured:",
               er.ettr, er.failures, er.wall_s, er.mtbf_s);
    }
    print_line("at Young/Daly:", &p, trials, seed);
    if (!isnan(st->interval_s)) {
        p.interval_s = tau;
        print_line("at --interval:", &p, trials, seed);
    }
    if (!isnan(target) && isfinite(M)) print_restart_targets(target, M, D, trials, seed);
    return MT_EXIT_OK;
}
