/*
 * bench/bench_decode.c — batched KV-cache decode (model/decode_batch.c) of the GPT-2 124M shape,
 * without HTTP: tokens/s of one gpt_decode_batch step over S = 1, 2, 4, 8 generations, against
 * the memory-bandwidth bound of one-at-a-time decode (every step reads all weights once).
 *
 * Why this shape: on a shared machine a ratio is only meaningful when both sides see the same
 * load, so the batch sizes are interleaved round by round (each round times every S once) and
 * the table shows medians over rounds, and the median of the per-round ratios to S = 1. The
 * limit is the read bandwidth (ops/peak.h peak_bandwidth: a 256 MiB fp32 sum, passes until two
 * agree within 3%) measured in the same run — decode only reads the weights — and, beside it, a
 * STREAM-like triad (a[i] = b[i] + s·c[i], 3 × 128 MiB); bound = read bandwidth / bytes of every
 * weight (matmuls, embeddings, LayerNorms) read per step. Prints the CPU, ISA, threads and load.
 *
 *   make bench && build/bench/bench_decode [--threads 2] [--rounds 5] [--steps 8] [--layers 12]
 */
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/stats.h"
#include "core/timer.h"
#include "model/model.h"
#include "ops/ops.h"
#include "ops/peak.h"

#define NS 4
static const int SIZES[NS] = {1, 2, 4, 8};

/* STREAM triad bandwidth in bytes/s (best of 3), counting 3 arrays moved per pass. */
static double triad_bandwidth(void) {
    size_t n = (size_t)32 << 20; // 32 Mi floats = 128 MiB per array
    float *a = malloc(n * 4), *b = malloc(n * 4), *c = malloc(n * 4);
#pragma omp parallel for
    for (size_t i = 0; i < n; i++) a[i] = 0, b[i] = 1, c[i] = 2;
    double best = 0;
    for (int r = 0; r < 3; r++) {
        double t0 = timer_now();
#pragma omp parallel for simd
        for (size_t i = 0; i < n; i++) a[i] = b[i] + 0.5f * c[i];
        double bw = 3.0 * (double)n * 4 / (timer_now() - t0);
        if (bw > best) best = bw;
    }
    volatile float sink = a[n / 3];
    (void)sink;
    free(a), free(b), free(c);
    return best;
}

int main(int argc, char **argv) {
    peak_blas_reexec(argv);
    int threads = 2, rounds = 5, steps = 8, L = 12;
    for (int i = 1; i + 1 < argc; i += 2) {
        if (!strcmp(argv[i], "--threads")) threads = atoi(argv[i + 1]);
        else if (!strcmp(argv[i], "--rounds")) rounds = atoi(argv[i + 1]);
        else if (!strcmp(argv[i], "--steps")) steps = atoi(argv[i + 1]);
        else if (!strcmp(argv[i], "--layers")) L = atoi(argv[i + 1]);
        else {
            fprintf(stderr, "usage: bench_decode [--threads N] [--rounds N] [--steps N] [--layers N]\n");
            return 2;
        }
    }
    if (rounds < 1 || rounds > 64 || steps < 1) {
        fprintf(stderr, "bench_decode: --rounds 1..64, --steps >= 1\n");
        return 2;
    }
    ops_set_threads(threads);
    gpt_config cfg = {.n_layer = L, .n_head = 12, .d_model = 768, .seq_len = 1024,
                      .vocab_size = 50257};
    gpt_model m;
    char err[256];
    if (gpt_build(&m, &cfg, err, sizeof(err)) != 0) {
        fprintf(stderr, "%s\n", err);
        return 1;
    }
    gpt_init_weights(&m, 1337);
    peak_stable bst;
    double bw = peak_bandwidth(threads, (size_t)256 << 20, 3.0, &bst), triad = triad_bandwidth();
    char cpu[256];
    peak_cpu_model(cpu, sizeof(cpu));
    double load[3] = {0};
    if (getloadavg(load, 3) < 0) load[0] = -1;
    __builtin_cpu_init();
    printf("cpu: %s, %s, %d threads, load average %.2f %.2f %.2f (before the run)\n", cpu,
           __builtin_cpu_supports("avx512f") ? "AVX-512" : __builtin_cpu_supports("avx2") ? "AVX2"
                                                                                          : "SSE",
           threads, load[0], load[1], load[2]);
    double bytes = (double)m.num_params * 4; /* every weight read once per step */
    gpt_decode_state st[8];
    for (int i = 0; i < 8; i++) gpt_decode_init(&st[i], &m);
    gpt_batch *b = gpt_batch_create(&m, 8 * 16, 8);
    int prompt[16];
    for (int i = 0; i < 16; i++) prompt[i] = (i * 7919) % cfg.vocab_size;
    double tps[NS][64], ratio[NS][64], bwr[64], of_bound[64];
    printf("bench_decode: GPT-2 124M shape (%d layers), %d threads, %d rounds x %d steps per size\n",
           L, threads, rounds, steps);
    for (int r = 0; r < rounds; r++) {
        /* the limit of this round, right before it: the load moves the bandwidth too */
        bwr[r] = peak_bandwidth(threads, (size_t)256 << 20, 0.5, NULL);
        if (bwr[r] > bw) bw = bwr[r];
        for (int k = 0; k < NS; k++) {
            int S = SIZES[k], n_tok[8], next[8];
            gpt_decode_state *sp[8];
            const int *tp[8];
            for (int i = 0; i < S; i++) { /* a 16-token prompt each, as one prefill step */
                gpt_decode_reset(&st[i]);
                sp[i] = &st[i], tp[i] = prompt, n_tok[i] = 16;
            }
            gpt_decode_batch(&m, b, sp, tp, n_tok, S);
            for (int i = 0; i < S; i++) next[i] = 100 + i, tp[i] = &next[i], n_tok[i] = 1;
            double t0 = timer_now();
            for (int s = 0; s < steps; s++) gpt_decode_batch(&m, b, sp, tp, n_tok, S);
            tps[k][r] = (double)S * steps / (timer_now() - t0);
        }
        for (int k = 0; k < NS; k++) ratio[k][r] = tps[k][r] / tps[0][r];
        of_bound[r] = tps[0][r] / (bwr[r] / bytes);
        printf("  round %d: read %.1f GB/s (bound %.1f tok/s)", r + 1, bwr[r] / 1e9, bwr[r] / bytes);
        for (int k = 0; k < NS; k++) printf("  S=%d %.1f tok/s", SIZES[k], tps[k][r]);
        printf("  S=1 at %.0f%% of its round's bound\n", 100 * of_bound[r]);
    }
    printf("\nread bandwidth (%d threads, best of the start and every round): %.1f GB/s (%d passes, spread %.1f%%%s); triad %.1f GB/s;"
           " weights read per step: %.0f MB; bound for one-at-a-time decode: %.1f tok/s\n"
           "(the first probe's passes and spread; the table's last column is against the best)\n",
           threads, bw / 1e9, bst.rounds, 100 * bst.spread, bst.agreed ? "" : ", capped",
           triad / 1e9, bytes / 1e6, bw / bytes);
    printf("%-6s %14s %12s %18s\n", "slots", "tok/s (median)", "vs S=1", "of S x bound");
    for (int k = 0; k < NS; k++) {
        double t = stats_median(tps[k], (size_t)rounds), q = stats_median(ratio[k], (size_t)rounds);
        printf("%-6d %14.1f %11.2fx %17.0f%%\n", SIZES[k], t, q, 100.0 * t / (SIZES[k] * bw / bytes));
    }
    printf("S=1 against the bound of its own round (median of %d rounds): %.0f%% (target >= 70%%);"
           " S=4 vs S=1: %.2fx (target >= 3.5x); load average after: ",
           rounds, 100 * stats_median(of_bound, (size_t)rounds), stats_median(ratio[2], (size_t)rounds));
    if (getloadavg(load, 3) == 3) printf("%.2f %.2f %.2f\n", load[0], load[1], load[2]);
    else printf("unknown\n");
    gpt_batch_free(b);
    for (int i = 0; i < 8; i++) gpt_decode_free(&st[i]);
    gpt_free(&m);
    return 0;
}
