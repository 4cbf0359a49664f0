/*
 * bench/bench_robust.c — what adversarial training costs per microbatch, measured in one process.
 *
 * On the Shakespeare shape (examples/shakespeare.ini: 4 layers, d_model 192, T 128, B 16, V 256,
 * one thread) it alternates a plain microbatch (forward + training backward) with each
 * adversarial one (fgsm: 1, pgd: K = 3 forward + input-only backward ascent passes, then the
 * training pass; freelb: K = 3 training passes) and prints the median time ratio over the
 * alternations — alternating, so load from other jobs on a shared machine hits both alike. It
 * also prints the single passes: forward, forward + input-only backward, forward + training
 * backward. Expected from model FLOPs (safety/robust_train.c): fgsm 10/6, pgd (6+4K)/6 = 3,
 * freelb K = 3.
 *
 *   make bench && build/bench/bench_robust [reps]
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/stats.h"
#include "core/timer.h"
#include "model/model.h"
#include "ops/ops.h"

enum { B = 16, T = 128, C = 192, V = 256, N = B * T, K = 3 };

static gpt_model g_m;
static int g_inp[N], g_tgt[N];
static float g_delta[(size_t)N * C];

static void fwd(const float *delta) {
    gpt_probe p = {delta, NULL, NULL};
    gpt_stage_forward_ex(&g_m, 0, g_inp, g_tgt, B, T, 1.0f / N, &p, NULL);
}

static void plain(void) {
    fwd(NULL);
    gpt_backward(&g_m);
}

static void fgsm(void) {
    fwd(g_delta);
    gpt_stage_backward_input(&g_m, 0, NULL);
    fwd(g_delta);
    gpt_backward(&g_m);
}

static void pgd(void) {
    for (int k = 0; k < K; k++) {
        fwd(g_delta);
        gpt_stage_backward_input(&g_m, 0, NULL);
    }
    fwd(g_delta);
    gpt_backward(&g_m);
}

static void freelb(void) {
    for (int k = 0; k < K; k++) {
        fwd(g_delta);
        gpt_backward(&g_m);
    }
}

static double timed(void (*f)(void)) {
    double t0 = timer_now();
    f();
    return timer_now() - t0;
}

int main(int argc, char **argv) {
    int reps = argc > 1 ? atoi(argv[1]) : 9;
    if (reps < 1 || reps > 1000) reps = 9;
    ops_set_threads(1);
    gpt_config c = {.n_layer = 4, .n_head = 4, .d_model = C, .seq_len = T, .vocab_size = V};
    char err[256];
    if (gpt_build(&g_m, &c, err, sizeof(err)) != 0) {
        fprintf(stderr, "%s\n", err);
        return 1;
    }
    gpt_init_weights(&g_m, 1);
    gpt_alloc_training(&g_m, B, T);
    for (int i = 0; i < N; i++) g_inp[i] = (i * 13) % V, g_tgt[i] = (i * 7 + 3) % V;
    for (size_t i = 0; i < (size_t)N * C; i++) g_delta[i] = 1e-3f * (float)((i % 7) - 3);
    plain(); /* warm-up: page faults, BLAS buffers */
    double *r = malloc((size_t)reps * sizeof(double)), passes[3] = {0, 0, 0};
    printf("shape: 4 layers, d_model %d, T %d, B %d, V %d, 1 thread; %d alternations\n", C, T, B,
           V, reps);
    struct { const char *name; void (*f)(void); double flops; } modes[] = {
        {"fgsm", fgsm, 10.0 / 6}, {"pgd K=3", pgd, (6.0 + 4 * K) / 6}, {"freelb K=3", freelb, K}};
    for (int mo = 0; mo < 3; mo++) {
        for (int i = 0; i < reps; i++) {
            double tp = timed(plain), ta = timed(modes[mo].f);
            r[i] = ta / tp;
        }
        stats_sort(r, (size_t)reps);
        printf("%-11s / plain microbatch: median %.2fx (min %.2f, max %.2f); model FLOPs %.2fx\n",
               modes[mo].name, r[reps / 2], r[0], r[reps - 1], modes[mo].flops);
    }
    for (int i = 0; i < reps; i++) {
        double t0 = timer_now();
        fwd(g_delta);
        double t1 = timer_now();
        gpt_stage_backward_input(&g_m, 0, NULL);
        double t2 = timer_now();
        plain();
        double t3 = timer_now();
        passes[0] += t1 - t0, passes[1] += t2 - t0, passes[2] += t3 - t2;
    }
    printf("mean passes: forward %.0f ms | forward + input-only backward %.0f ms | forward + "
           "training backward %.0f ms\n", 1e3 * passes[0] / reps, 1e3 * passes[1] / reps,
           1e3 * passes[2] / reps);
    free(r);
    gpt_free(&g_m);
    return 0;
}
