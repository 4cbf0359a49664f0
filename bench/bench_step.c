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

/* The bench's options: threads, steps, the microbatch (B, T) and the model shape. */
typedef struct {
    int threads, steps, B, T, L, C, NH, V;
} step_opts;

/* One run of the bench: the model and optimizer, the batch, and what each step measured. */
typedef struct {
    step_opts o;
    gpt_config cfg;
    gpt_model m;
    optim_adamw opt;
    int *inp, *tgt;                         // (B, T) token ids and targets
    double la0, la1, peak, t_init, fpt;     // load averages, sgemm peak FLOP/s, s, FLOPs/token
    double *st, *su, *ss;                   // (steps+1) wall, user and system seconds per step
    double *kt;                             // (steps+1, PROF_N) seconds per op kind per step
    double first_phase[3];                  // the first step's fwd, bwd, norm+adamw seconds
    long first_faults[3];                   // ... and minor page faults
    /* the steady steps (bench_steady) */
    int n_on;
    double *on, *off, best, med, med_on, med_off, ksum;
    double flo[PROF_N], kmed[PROF_N];
} step_run;

/* Step 1: the flags; 0, or 2 after the usage line. */
static int parse_step_opts(step_opts *o, int argc, char **argv) {
    *o = (step_opts){.threads = 2, .steps = 8, .B = 4, .T = 64, .L = 12, .C = 768, .NH = 12,
                     .V = 50257};
    for (int i = 1; i + 1 < argc; i += 2) {
        if (!strcmp(argv[i], "--threads")) o->threads = atoi(argv[i + 1]);
        else if (!strcmp(argv[i], "--steps")) o->steps = atoi(argv[i + 1]);
        else if (!strcmp(argv[i], "--B")) o->B = atoi(argv[i + 1]);
        else if (!strcmp(argv[i], "--T")) o->T = atoi(argv[i + 1]);
        else if (!strcmp(argv[i], "--layers")) o->L = atoi(argv[i + 1]);
        else {
            fprintf(stderr, "usage: bench_step [--threads N] [--steps N] [--B N] [--T N] [--layers N]\n");
            return 2;
        }
    }
    if (argc % 2 == 0 || o->steps < 2 || o->threads < 1 || o->B < 1 || o->T < 1 || o->T > 1024 ||
        o->L < 1) {
        fprintf(stderr, "usage: bench_step [--threads N] [--steps N>=2] [--B N] [--T N<=1024] [--layers N]\n");
        return 2;
    }
    return 0;
}

/* Step 2: the sgemm peak, then the model, its training buffers and AdamW (timed: t_init), a
 * random batch, and the FLOPs per token at the T trained. 1 when the model does not build. */
static int bench_setup(step_run *b) {
    const step_opts *o = &b->o;
    const int B = o->B, T = o->T, V = o->V;
    b->la0 = loadavg1();
    ops_set_threads(o->threads);
    b->peak = peak_sgemm_probe(o->threads, 1.0);
    b->t_init = timer_now();
    b->cfg = (gpt_config){.n_layer = o->L, .n_head = o->NH, .d_model = o->C, .seq_len = 1024,
                          .vocab_size = V};
    char err[256];
    if (gpt_build(&b->m, &b->cfg, err, sizeof(err)) != 0) {
        fprintf(stderr, "%s\n", err);
        return 1;
    }
    gpt_init_weights(&b->m, 1);
    gpt_alloc_training(&b->m, B, T);
    optim_init(&b->opt, b->m.num_params, 0.9f, 0.95f, 1e-8f, 0.1f);
    b->t_init = timer_now() - b->t_init;
    b->inp = malloc(sizeof(int) * B * T), b->tgt = malloc(sizeof(int) * B * T);
    rng_state r;
    rng_seed(&r, 3);
    for (int i = 0; i < B * T; i++)
        b->inp[i] = (int)(rng_u64(&r) % V), b->tgt[i] = (int)(rng_u64(&r) % V);
    gpt_config fc = b->cfg;
    fc.seq_len = T; /* the FLOPs of the T this bench trains at, not of the context wpe allows */
    b->fpt = flops_per_token(&fc);
    return 0;
}

/* Step 3: the steps, each timed by phase with its page faults and CPU time, one line each.
 * Step 0 = the first step (profiled); then steps alternate profiled (odd) and plain (even). */
static void bench_run_steps(step_run *b) {
    const int steps = b->o.steps, B = b->o.B, T = b->o.T;
    gpt_model *m = &b->m;
    b->st = calloc((size_t)steps + 1, sizeof(double));
    b->kt = calloc((size_t)(steps + 1) * PROF_N, sizeof(double)); // (steps+1, PROF_N)
    b->su = calloc((size_t)steps + 1, sizeof(double)), b->ss = calloc((size_t)steps + 1, sizeof(double));
    for (int s = 0; s <= steps; s++) {
        prof_reset();
        prof_enable(s % 2 == 0 ? s == 0 : 1);
        long f0 = minor_faults();
        double u0, s0, u1, s1;
        cpu_seconds(&u0, &s0);
        double t0 = timer_now();
        gpt_zero_grad(m);
        float loss = gpt_forward(m, b->inp, b->tgt, B, T, 1.0f / (B * T));
        double t1 = timer_now();
        long f1 = minor_faults();
        gpt_backward(m);
        double t2 = timer_now();
        long f2 = minor_faults();
        double norm = optim_grad_norm(m->grads, m->num_params);
        optim_step(&b->opt, m, 1e-4f, optim_clip_scale(norm, 1.0f));
        double t3 = timer_now();
        long f3 = minor_faults();
        cpu_seconds(&u1, &s1);
        b->su[s] = u1 - u0, b->ss[s] = s1 - s0;
        b->st[s] = t3 - t0;
        memcpy(b->kt + (size_t)s * PROF_N, prof_acc, sizeof(prof_acc));
        if (s == 0) {
            b->first_phase[0] = t1 - t0, b->first_phase[1] = t2 - t1, b->first_phase[2] = t3 - t2;
            b->first_faults[0] = f1 - f0, b->first_faults[1] = f2 - f1, b->first_faults[2] = f3 - f2;
        }
        printf("step %d%s: loss %.4f | %.0f ms (fwd %.0f, bwd %.0f, norm+adamw %.0f) | %ld minor "
               "faults | cpu user %.2f s, sys %.2f s\n",
               s, s == 0 ? " (first)" : s % 2 ? " (profiled)" : "", loss, (t3 - t0) * 1e3,
               (t1 - t0) * 1e3, (t2 - t1) * 1e3, (t3 - t2) * 1e3, f3 - f0, b->su[s], b->ss[s]);
    }
    prof_enable(0);
    b->la1 = loadavg1();
}

/* Step 4: the steady steps (every step after the first; profiled (odd) and plain (even)
 * separately too): medians, best, and the median time per op kind with its FLOPs. */
static void bench_steady(step_run *b) {
    const step_opts *o = &b->o;
    const int steps = o->steps;
    b->n_on = 0;
    int n_off = 0;
    b->on = calloc((size_t)steps, sizeof(double)), b->off = calloc((size_t)steps, sizeof(double));
    b->best = 1e30;
    for (int s = 1; s <= steps; s++) {
        if (s % 2) b->on[b->n_on++] = b->st[s];
        else b->off[n_off++] = b->st[s];
        if (b->st[s] < b->best) b->best = b->st[s];
    }
    b->med = median(b->st + 1, steps);
    b->med_on = median(b->on, b->n_on), b->med_off = n_off ? median(b->off, n_off) : b->med_on;
    double col[64];
    kind_flops(b->flo, o->L, o->B, o->T, o->C, o->V);
    b->ksum = 0;
    for (int k = 0; k < PROF_N; k++) {
        int n = 0;
        for (int s = 1; s <= steps; s += 2) col[n++] = b->kt[(size_t)s * PROF_N + k];
        b->kmed[k] = median(col, n);
        b->ksum += b->kmed[k];
    }
}

/* Step 5: the summary: shape, load, parameters, the first step against the steady one,
 * tokens/s and GFLOP/s against the sgemm peak, peak memory. */
static void print_step_summary(const step_run *b) {
    const step_opts *o = &b->o;
    const int B = o->B, T = o->T, steps = o->steps;
    const double *st = b->st, med = b->med, best = b->best, peak = b->peak, fpt = b->fpt;
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    printf("\nGPT-2 124M shape (L=%d d=%d H=%d V=%d), B=%d T=%d, fp32, %d threads, OPENBLAS_CORETYPE=%s\n",
           o->L, o->C, o->NH, o->V, B, T, o->threads, getenv("OPENBLAS_CORETYPE") ? getenv("OPENBLAS_CORETYPE") : "(unset)");
    printf("load average        %.2f at start, %.2f at end (%d cores are shared: figures are medians)\n",
           b->la0, b->la1, (int)sysconf(_SC_NPROCESSORS_ONLN));
    printf("parameters          %.1fM (%.0f MB; grads, AdamW m and v the same again x3)\n",
           b->m.num_params / 1e6, b->m.num_params * 4 / 1e6);
    printf("FLOPs per token     %.1f MFLOP (6N + 12LdT)\n", fpt / 1e6);
    printf("build + alloc       %.0f ms\n", b->t_init * 1e3);
    printf("first step          %.0f ms = %.1fx the median steady step (fwd %.0f, bwd %.0f, "
           "norm+adamw %.0f ms; minor faults %ld / %ld / %ld)\n",
           st[0] * 1e3, st[0] / med, b->first_phase[0] * 1e3, b->first_phase[1] * 1e3,
           b->first_phase[2] * 1e3, b->first_faults[0], b->first_faults[1], b->first_faults[2]);
    printf("first step CPU      user %.2f s, sys %.2f s; steady step median user %.2f s, sys %.2f s "
           "(CPU time is what the load average does not stretch)\n",
           b->su[0], b->ss[0], median(b->su + 1, steps), median(b->ss + 1, steps));
    printf("steady step         median %.1f ms, best %.1f ms (over %d steps; profiled %.1f ms, "
           "plain %.1f ms: instrumentation %+.1f%%)\n",
           med * 1e3, best * 1e3, steps, b->med_on * 1e3, b->med_off * 1e3,
           100 * (b->med_on - b->med_off) / b->med_off);
    double tps = B * T / med, achieved = tps * fpt, achieved_best = B * T / best * fpt;
    printf("tokens/s            %.1f (median step), %.1f (best step)\n", tps, B * T / best);
    printf("achieved            %.1f GFLOP/s (median), %.1f GFLOP/s (best)\n", achieved / 1e9,
           achieved_best / 1e9);
    printf("sgemm peak          %.1f GFLOP/s (n=%d, best call, measured in this run)\n", peak / 1e9,
           PEAK_PROBE_N);
    printf("ratio               %.1f%% of the sgemm peak (median step), %.1f%% (best step); "
           "target >= 65%%\n", 100 * achieved / peak, 100 * achieved_best / peak);
    printf("peak memory (RSS)   %.2f GB (target <= 2.5 GB)\n", ru.ru_maxrss / 1048576.0);
}

/* Step 6: the time per op kind (median over the profiled steps, the first step alongside). */
static void print_step_kinds(const step_run *b) {
    const double *kt = b->kt, *kmed = b->kmed, *flo = b->flo, med_on = b->med_on;
    printf("\ntime per op kind (median over %d profiled steps; first step alongside)\n", b->n_on);
    printf("  %-22s %9s %6s %9s %7s %11s\n", "kind", "ms", "step%", "GFLOP/s", "%peak", "first ms");
    for (int k = 0; k < PROF_N; k++) {
        printf("  %-22s %9.1f %5.1f%%", prof_name((prof_kind)k), kmed[k] * 1e3, 100 * kmed[k] / med_on);
        if (flo[k] > 0 && kmed[k] > 0)
            printf(" %9.1f %6.1f%%", flo[k] / kmed[k] / 1e9, 100 * flo[k] / kmed[k] / b->peak);
        else
            printf(" %9s %7s", "", "");
        printf(" %11.1f\n", kt[k] * 1e3);
    }
    double first_sum = 0;
    for (int k = 0; k < PROF_N; k++) first_sum += kt[k];
    printf("  %-22s %9.1f %5.1f%% %9s %7s %11.1f\n", "other (untimed)", (med_on - b->ksum) * 1e3,
           100 * (med_on - b->ksum) / med_on, "", "", (b->st[0] - first_sum) * 1e3);
}

/* Step 7: the measured limit: each matmul kind alone at its own shape (best of 5 calls), and
 * the ceiling of the step at these shapes. */
static void print_matmuls_alone(const step_run *b) {
    const int B = b->o.B, T = b->o.T, C = b->o.C, V = b->o.V, L = b->o.L;
    const double *flo = b->flo, *kmed = b->kmed, peak = b->peak, fpt = b->fpt;
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
    double rest = b->med_on - mm_step; /* everything that is not a matmul, as measured */
    printf("  ceiling at these shapes: matmuls alone + the rest as measured (%.0f ms) = %.1f%% "
           "of the peak; matmuls alone + no rest = %.1f%%\n", rest * 1e3,
           100 * B * T * fpt / (mm_alone + rest) / peak, 100 * B * T * fpt / mm_alone / peak);
}

int main(int argc, char **argv) {
    peak_blas_reexec(argv);
    static step_run b; /* static: zeroed, and off the stack */
    int rc = parse_step_opts(&b.o, argc, argv);
    if (rc != 0) return rc;
    if (bench_setup(&b) != 0) return 1;
    bench_run_steps(&b);
    bench_steady(&b);
    print_step_summary(&b);
    print_step_kinds(&b);
    print_matmuls_alone(&b);
    gpt_free(&b.m);
    optim_free(&b.opt);
    free(b.st), free(b.su), free(b.ss), free(b.kt), free(b.on), free(b.off), free(b.inp), free(b.tgt);
    return 0;
}
