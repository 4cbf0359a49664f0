/*
 * bench/bench_step.c — one training step of the GPT-2 124M shape on CPU, against the sgemm peak.
 *
 * Shape: 12 layers, d_model 768, 12 heads, vocab 50257, context 1024 (wpe), microbatch B=4 of
 * T=64 tokens, fp32. A step = forward + backward + global norm + AdamW, i.e. what the trainer
 * does. Prints tokens/s, achieved GFLOP/s (FLOPs per token from train/flops.c: 6N + 12·L·d·T)
 * next to the sgemm peak measured in the same run, the ratio, a time breakdown, and the peak
 * resident memory (parameters + grads + AdamW state + activations).
 *
 *   make bench && build/bench/bench_step [--threads 2] [--steps 5] [--B 4] [--T 64]
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>

#include "core/rng.h"
#include "core/timer.h"
#include "train/flops.h"
#include "train/model.h"
#include "train/ops.h"
#include "train/optim.h"

int main(int argc, char **argv) {
    flops_blas_reexec(argv);
    int threads = 2, steps = 5, B = 4, T = 64, L = 12, C = 768, NH = 12, V = 50257;
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
    ops_set_threads(threads);
    double peak = flops_sgemm_probe(threads, 1.0);
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
    int *inp = malloc(sizeof(int) * B * T), *tgt = malloc(sizeof(int) * B * T);
    rng_state r;
    rng_seed(&r, 3);
    for (int i = 0; i < B * T; i++) inp[i] = (int)(rng_u64(&r) % V), tgt[i] = (int)(rng_u64(&r) % V);
    gpt_config fc = cfg;
    fc.seq_len = T; /* the FLOPs of the T this bench trains at, not of the context wpe allows */
    double fpt = flops_per_token(&fc);
    double tf = 0, tb = 0, to = 0, best = 1e30;
    for (int s = 0; s < steps + 1; s++) { /* step 0 is warm-up (page faults, thread start) */
        double t0 = timer_now();
        gpt_zero_grad(&m);
        float loss = gpt_forward(&m, inp, tgt, B, T, 1.0f / (B * T));
        double t1 = timer_now();
        gpt_backward(&m);
        double t2 = timer_now();
        double norm = optim_grad_norm(m.grads, m.num_params);
        optim_step(&opt, &m, 1e-4f, optim_clip_scale(norm, 1.0f));
        double t3 = timer_now();
        if (s == 0) continue;
        tf += t1 - t0, tb += t2 - t1, to += t3 - t2;
        if (t3 - t0 < best) best = t3 - t0;
        printf("step %d: loss %.4f | %.0f ms (fwd %.0f, bwd %.0f, norm+adamw %.0f)\n", s, loss,
               (t3 - t0) * 1e3, (t1 - t0) * 1e3, (t2 - t1) * 1e3, (t3 - t2) * 1e3);
    }
    double mean = (tf + tb + to) / steps;
    double tps = B * T / mean, achieved = tps * fpt;
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    printf("\nGPT-2 124M shape (L=%d d=%d H=%d V=%d), B=%d T=%d, fp32, %d threads\n", L, C, NH, V,
           B, T, threads);
    printf("parameters          %.1fM (%.0f MB; grads, AdamW m and v the same again x3)\n",
           m.num_params / 1e6, m.num_params * 4 / 1e6);
    printf("FLOPs per token     %.1f MFLOP (6N + 12LdT)\n", fpt / 1e6);
    printf("step time (mean)    %.1f ms (best %.1f ms): fwd %.0f%%, bwd %.0f%%, optimizer %.0f%%\n",
           mean * 1e3, best * 1e3, 100 * tf / steps / mean, 100 * tb / steps / mean,
           100 * to / steps / mean);
    printf("tokens/s            %.0f\n", tps);
    printf("achieved            %.1f GFLOP/s\n", achieved / 1e9);
    printf("sgemm peak          %.1f GFLOP/s (measured in this run)\n", peak / 1e9);
    printf("ratio               %.1f%% of the sgemm peak (target >= 60%%)\n", 100 * achieved / peak);
    printf("peak memory (RSS)   %.2f GB (target <= 2.5 GB)\n", ru.ru_maxrss / 1048576.0);
    gpt_free(&m);
    optim_free(&opt);
    return 0;
}
