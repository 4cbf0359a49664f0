/*
 * bench/bench_step.c — one training step of the GPT-2 124M shape on CPU, against the sgemm peak,
 * with the time per op kind and the cost of the first step.
 *
 * Shape: 12 layers, d_model 768, 12 heads, vocab 50257, context 1024 (wpe), microbatch B=4 of
 * T=64 tokens, fp32. A step = zero grad + forward + backward + global norm + AdamW, i.e. what the
 * trainer does. Prints:
 *   - the first step (right after allocation: what a start or a resume pays) with its minor page
 *     faults and its time per op kind next to a steady step's, so the extra cost has a name;
 *   - steady steps: median and best time, tokens/s, achieved GFLOP/s (FLOPs per token from
 *     model/flops.c: 6N + 12·L·d·T) next to the sgemm peak measured in the same run, the ratio;
 *   - the time per op kind (ops/prof.h: matmuls by layer type and direction, attention,
 *     LayerNorm, GELU, softmax + loss, AdamW, ...) as medians over the profiled steps, with the
 *     GFLOP/s of each matmul kind against the peak;
 *   - the peak resident memory.
 * The machine may be shared: every figure is a median (or best) over steps of this run, and the
 * load average at start and end is printed. Profiled and unprofiled steps alternate, so the
 * cost of the instrumentation is visible as the difference of their medians.
 *
 *   make bench && build/bench/bench_step [--threads 2] [--steps 8] [--B 4] [--T 64] [--layers 12]
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <unistd.h>

#include "core/rng.h"
#include "core/stats.h"
#include "core/timer.h"
#include "model/flops.h"
#include "model/model.h"
#include "ops/ops.h"
#include "model/optim.h"
#include "ops/peak.h"
#include "ops/prof.h"

/* the median of a sample, leaving it unsorted (core/stats.h) */
#define median(v, n) stats_median_copy((v), (size_t)(n))

static long minor_faults(void) {
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    return ru.ru_minflt;
}

/* CPU seconds of the process so far: user (u) and system (s, page faults land here). */
static void cpu_seconds(double *u, double *s) {
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    *u = ru.ru_utime.tv_sec + ru.ru_utime.tv_usec * 1e-6;
    *s = ru.ru_stime.tv_sec + ru.ru_stime.tv_usec * 1e-6;
}

static double loadavg1(void) {
    double la = -1;
    FILE *f = fopen("/proc/loadavg", "r");
    if (f) {
        if (fscanf(f, "%lf", &la) != 1) la = -1;
        fclose(f);
    }
    return la;
}

/* FLOPs of one step per op kind (0 where the kind is not FLOP-bound). Matmul forward 2·N·in·out,
 * backward 4·N·in·out (input and weight gradient); attention computes full T×T squares:
 * forward QKᵀ + PV = 4·B·T²·C, backward twice that. */
static void kind_flops(double *f, int L, int B, int T, int C, int V) {
    double N = (double)B * T;
    memset(f, 0, sizeof(double) * PROF_N);
    f[PROF_MM_QKV_FWD] = 2 * N * C * 3 * C * L;
    f[PROF_MM_ATTPROJ_FWD] = 2 * N * C * C * L;
    f[PROF_MM_FC_FWD] = 2 * N * C * 4 * C * L;
    f[PROF_MM_FCPROJ_FWD] = 2 * N * 4 * C * C * L;
    f[PROF_MM_HEAD_FWD] = 2 * N * C * V;
    for (int k = PROF_MM_QKV_FWD; k <= PROF_MM_HEAD_FWD; k += 2) f[k + 1] = 2 * f[k];
    f[PROF_ATTN_FWD] = 4.0 * B * T * T * C * L;
    f[PROF_ATTN_BWD] = 2 * f[PROF_ATTN_FWD];
}

/* Best seconds of one ops_matmul_forward (dir 0) or ops_matmul_backward with input and weight
 * gradients (dir 1) at (N, C) @ (OC, C)ᵀ, alone, over reps calls: the rate this shape can reach
 * on this machine with nothing else running in the step (the measured limit of a matmul kind). */
static double matmul_alone(int N, int C, int OC, int dir, int reps) {
    float *inp = calloc((size_t)N * C, sizeof(float)), *w = calloc((size_t)OC * C, sizeof(float));
    float *out = calloc((size_t)N * OC, sizeof(float)), *dw = calloc((size_t)OC * C, sizeof(float));
    float *dinp = calloc((size_t)N * C, sizeof(float));
    for (size_t i = 0; i < (size_t)N * C; i++) inp[i] = (float)(i % 7) * 0.1f;
    for (size_t i = 0; i < (size_t)OC * C; i++) w[i] = (float)(i % 5) * 0.01f;
    double best = 1e30;
    for (int r = 0; r < reps; r++) {
        double t0 = timer_now();
        if (dir == 0) ops_matmul_forward(out, inp, w, NULL, N, C, OC);
        else ops_matmul_backward(dinp, dw, NULL, out, inp, w, N, C, OC);
        double t = timer_now() - t0;
        if (t < best) best = t;
    }
    free(inp), free(w), free(out), free(dw), free(dinp);
    return best;
}

int main(int argc, char **argv) {
    peak_blas_reexec(argv);
    int threads = 2, steps = 8, B = 4, T = 64, L = 12, C = 768, NH = 12, V = 50257;
    for (int i = 1; i + 1 < argc; i += 2) {
        if (!strcmp(argv[i], "--threads")) threads = atoi(argv[i + 1]);
        else if (!strcmp(argv[i], "--steps")) steps = atoi(argv[i + 1]);
        else if (!strcmp(argv[i], "--B")) B = atoi(argv[i + 1]);
        else if (!strcmp(argv[i], "--T")) T = atoi(argv[i + 1]);
        else if (!strcmp(argv[i], "--layers")) L = atoi(argv[i + 1]);
        else {
            fprintf(stderr, "usage: bench_step [--threads N] [--steps N] [--B N] [--T N] [--layers N]\n");
            return 2;
        }
    }
    if (argc % 2 == 0 || steps < 2 || threads < 1 || B < 1 || T < 1 || T > 1024 || L < 1) {
        fprintf(stderr, "usage: bench_step [--threads N] [--steps N>=2] [--B N] [--T N<=1024] [--layers N]\n");
        return 2;
    }
    double la0 = loadavg1();
    ops_set_threads(threads);
    double peak = peak_sgemm_probe(threads, 1.0);
    double t_init = timer_now();
    gpt_config cfg = {.n_layer = L, .n_head = NH, .d_model = C, .seq_len = 1024, .vocab_size = V};
    gpt_model m;
    char err[256];
    if (gpt_build(&m, &cfg, err, sizeof(err)) != 0) {
        fprintf(stderr, "%s\n", err);
        return 1;
    }
    gpt_init_weights(&m, 1);
    gpt_alloc_training(&m, B, T);
    optim_adamw opt;
    optim_init(&opt, m.num_params, 0.9f, 0.95f, 1e-8f, 0.1f);
    t_init = timer_now() - t_init;
    int *inp = malloc(sizeof(int) * B * T), *tgt = malloc(sizeof(int) * B * T);
    rng_state r;
    rng_seed(&r, 3);
    for (int i = 0; i < B * T; i++) inp[i] = (int)(rng_u64(&r) % V), tgt[i] = (int)(rng_u64(&r) % V);
    gpt_config fc = cfg;
    fc.seq_len = T; /* the FLOPs of the T this bench trains at, not of the context wpe allows */
    double fpt = flops_per_token(&fc);

    /* step 0 = the first step (profiled); then steps alternate profiled (odd) and plain (even) */
    double *st = calloc((size_t)steps + 1, sizeof(double));
    double *kt = calloc((size_t)(steps + 1) * PROF_N, sizeof(double)); // (steps+1, PROF_N)
    double first_phase[3] = {0, 0, 0};
    double *su = calloc((size_t)steps + 1, sizeof(double)), *ss = calloc((size_t)steps + 1, sizeof(double));
    long first_faults[3] = {0, 0, 0};
    for (int s = 0; s <= steps; s++) {
        prof_reset();
        prof_enable(s % 2 == 0 ? s == 0 : 1);
        long f0 = minor_faults();
        double u0, s0, u1, s1;
        cpu_seconds(&u0, &s0);
        double t0 = timer_now();
        gpt_zero_grad(&m);
        float loss = gpt_forward(&m, inp, tgt, B, T, 1.0f / (B * T));
        double t1 = timer_now();
        long f1 = minor_faults();
        gpt_backward(&m);
        double t2 = timer_now();
        long f2 = minor_faults();
        double norm = optim_grad_norm(m.grads, m.num_params);
        optim_step(&opt, &m, 1e-4f, optim_clip_scale(norm, 1.0f));
        double t3 = timer_now();
        long f3 = minor_faults();
        cpu_seconds(&u1, &s1);
        su[s] = u1 - u0, ss[s] = s1 - s0;
        st[s] = t3 - t0;
        memcpy(kt + (size_t)s * PROF_N, prof_acc, sizeof(prof_acc));
        if (s == 0) {
            first_phase[0] = t1 - t0, first_phase[1] = t2 - t1, first_phase[2] = t3 - t2;
            first_faults[0] = f1 - f0, first_faults[1] = f2 - f1, first_faults[2] = f3 - f2;
        }
        printf("step %d%s: loss %.4f | %.0f ms (fwd %.0f, bwd %.0f, norm+adamw %.0f) | %ld minor "
               "faults | cpu user %.2f s, sys %.2f s\n",
               s, s == 0 ? " (first)" : s % 2 ? " (profiled)" : "", loss, (t3 - t0) * 1e3,
               (t1 - t0) * 1e3, (t2 - t1) * 1e3, (t3 - t2) * 1e3, f3 - f0, su[s], ss[s]);
    }
    prof_enable(0);
    double la1 = loadavg1();

    /* steady: every step after the first; profiled (odd) and plain (even) separately too */
    int n_on = 0, n_off = 0;
    double *on = calloc((size_t)steps, sizeof(double)), *off = calloc((size_t)steps, sizeof(double));
    double best = 1e30;
    for (int s = 1; s <= steps; s++) {
        if (s % 2) on[n_on++] = st[s];
        else off[n_off++] = st[s];
        if (st[s] < best) best = st[s];
    }
    double med = median(st + 1, steps);
    double med_on = median(on, n_on), med_off = n_off ? median(off, n_off) : med_on;
    double flo[PROF_N], kmed[PROF_N], col[64];
    kind_flops(flo, L, B, T, C, V);
    double ksum = 0;
    for (int k = 0; k < PROF_N; k++) {
        int n = 0;
        for (int s = 1; s <= steps; s += 2) col[n++] = kt[(size_t)s * PROF_N + k];
        kmed[k] = median(col, n);
        ksum += kmed[k];
    }
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);

    printf("\nGPT-2 124M shape (L=%d d=%d H=%d V=%d), B=%d T=%d, fp32, %d threads, OPENBLAS_CORETYPE=%s\n",
           L, C, NH, V, B, T, threads, getenv("OPENBLAS_CORETYPE") ? getenv("OPENBLAS_CORETYPE") : "(unset)");
    printf("load average        %.2f at start, %.2f at end (%d cores are shared: figures are medians)\n",
           la0, la1, (int)sysconf(_SC_NPROCESSORS_ONLN));
    printf("parameters          %.1fM (%.0f MB; grads, AdamW m and v the same again x3)\n",
           m.num_params / 1e6, m.num_params * 4 / 1e6);
    printf("FLOPs per token     %.1f MFLOP (6N + 12LdT)\n", fpt / 1e6);
    printf("build + alloc       %.0f ms\n", t_init * 1e3);
    printf("first step          %.0f ms = %.1fx the median steady step (fwd %.0f, bwd %.0f, "
           "norm+adamw %.0f ms; minor faults %ld / %ld / %ld)\n",
           st[0] * 1e3, st[0] / med, first_phase[0] * 1e3, first_phase[1] * 1e3,
           first_phase[2] * 1e3, first_faults[0], first_faults[1], first_faults[2]);
    printf("first step CPU      user %.2f s, sys %.2f s; steady step median user %.2f s, sys %.2f s "
           "(CPU time is what the load average does not stretch)\n",
           su[0], ss[0], median(su + 1, steps), median(ss + 1, steps));
    printf("steady step         median %.1f ms, best %.1f ms (over %d steps; profiled %.1f ms, "
           "plain %.1f ms: instrumentation %+.1f%%)\n",
           med * 1e3, best * 1e3, steps, med_on * 1e3, med_off * 1e3,
           100 * (med_on - med_off) / med_off);
    double tps = B * T / med, achieved = tps * fpt, achieved_best = B * T / best * fpt;
    printf("tokens/s            %.1f (median step), %.1f (best step)\n", tps, B * T / best);
    printf("achieved            %.1f GFLOP/s (median), %.1f GFLOP/s (best)\n", achieved / 1e9,
           achieved_best / 1e9);
    printf("sgemm peak          %.1f GFLOP/s (n=%d, best call, measured in this run)\n", peak / 1e9,
           PEAK_PROBE_N);
    printf("ratio               %.1f%% of the sgemm peak (median step), %.1f%% (best step); "
           "target >= 65%%\n", 100 * achieved / peak, 100 * achieved_best / peak);
    printf("peak memory (RSS)   %.2f GB (target <= 2.5 GB)\n", ru.ru_maxrss / 1048576.0);
    printf("\ntime per op kind (median over %d profiled steps; first step alongside)\n", n_on);
    printf("  %-22s %9s %6s %9s %7s %11s\n", "kind", "ms", "step%", "GFLOP/s", "%peak", "first ms");
    for (int k = 0; k < PROF_N; k++) {
        printf("  %-22s %9.1f %5.1f%%", prof_name((prof_kind)k), kmed[k] * 1e3, 100 * kmed[k] / med_on);
        if (flo[k] > 0 && kmed[k] > 0)
            printf(" %9.1f %6.1f%%", flo[k] / kmed[k] / 1e9, 100 * flo[k] / kmed[k] / peak);
        else
            printf(" %9s %7s", "", "");
        printf(" %11.1f\n", kt[k] * 1e3);
    }
    double first_sum = 0;
    for (int k = 0; k < PROF_N; k++) first_sum += kt[k];
    printf("  %-22s %9.1f %5.1f%% %9s %7s %11.1f\n", "other (untimed)", (med_on - ksum) * 1e3,
           100 * (med_on - ksum) / med_on, "", "", (st[0] - first_sum) * 1e3);
    /* the measured limit: each matmul kind alone at its own shape (best of 5 calls) */
    {
        const int N = B * T;
        const int sh[5][2] = {{C, 3 * C}, {C, C}, {C, 4 * C}, {4 * C, C}, {C, V}}; // (in, out)
        const int mult[5] = {L, L, L, L, 1};
        double mm_flops = 0, mm_alone = 0, mm_step = 0;
        printf("\nmatmuls alone at the step's shapes (best of 5 calls; the limit of each kind)\n");
        printf("  %-22s %9s %9s %7s %11s\n", "kind", "ms", "GFLOP/s", "%peak", "step/alone");
        for (int i = 0; i < 5; i++) {
            for (int dir = 0; dir < 2; dir++) {
                const int k = PROF_MM_QKV_FWD + 2 * i + dir;
                double t = matmul_alone(N, sh[i][0], sh[i][1], dir, 5) * mult[i];
                mm_flops += flo[k], mm_alone += t, mm_step += kmed[k];
                printf("  %-22s %9.1f %9.1f %6.1f%% %10.1f%%\n", prof_name((prof_kind)k), t * 1e3,
                       flo[k] / t / 1e9, 100 * flo[k] / t / peak, 100 * t / kmed[k]);
            }
        }
        printf("  all matmuls: %.1f GFLOP/s alone = %.1f%% of the peak; in the step %.1f GFLOP/s "
               "(%.0f%% of alone)\n", mm_flops / mm_alone / 1e9, 100 * mm_flops / mm_alone / peak,
               mm_flops / mm_step / 1e9, 100 * mm_alone / mm_step);
        double rest = med_on - mm_step; /* everything that is not a matmul, as measured */
        printf("  ceiling at these shapes: matmuls alone + the rest as measured (%.0f ms) = %.1f%% "
               "of the peak; matmuls alone + no rest = %.1f%%\n", rest * 1e3,
               100 * B * T * fpt / (mm_alone + rest) / peak, 100 * B * T * fpt / mm_alone / peak);
    }
    gpt_free(&m);
    optim_free(&opt);
    free(st), free(su), free(ss), free(kt), free(on), free(off), free(inp), free(tgt);
    return 0;
}
