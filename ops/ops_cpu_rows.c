/*
 * ops/ops_cpu_rows.c — CPU kernels of the small per-row ops that replaced host loops over model
 * tensors: bias add after the TP all-reduce, per-row embedding for decode, argmax, the first
 * non-finite element, multi-tensor sum of squares. (The MoE routing kernels: ops/ops_cpu_moe.c.)
 *
 * Each kernel is the loop that used to sit in model/model_pass.c, model/model.c or
 * model/decode*.c, moved here unchanged, so the cpu (and guard) results stay bit-identical to
 * what those files computed before: same accumulation types, same order, same OpenMP
 * thresholds.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "core/check.h"
#include "ops/ops_cpu.h"

void ops_cpu_bias_add(float *out, const float *bias, int N, int OC) {
    for (int i = 0; i < N; i++)
        for (int j = 0; j < OC; j++) out[(size_t)i * OC + j] += bias[j];
}

void ops_cpu_embed_rows(float *out, const int *tokens, const int *positions, const float *wte,
                        const float *wpe, int N, int C) {
    for (int i = 0; i < N; i++) {
        const float *te = wte + (size_t)tokens[i] * C, *pe = wpe + (size_t)positions[i] * C;
        float *o = out + (size_t)i * C; // (C)
        for (int c = 0; c < C; c++) o[c] = te[c] + pe[c];
    }
}

void ops_cpu_argmax_rows(int *pred, const float *x, int N, int V) {
#pragma omp parallel for if ((size_t)N * V >= 65536) schedule(static)
    for (int i = 0; i < N; i++) {
        const float *row = x + (size_t)i * V;
        int best = 0;
        for (int v = 1; v < V; v++)
            if (row[v] > row[best]) best = v;
        pred[i] = best;
    }
}

int64_t ops_cpu_first_nonfinite(const float *x, size_t n) {
    for (size_t i = 0; i < n; i++)
        if (!isfinite(x[i])) return (int64_t)i;
    return -1;
}

void ops_cpu_sumsq_multi(double *out, const float *const *x, const size_t *n, int count) {
    for (int i = 0; i < count; i++) out[i] = n[i] ? ops_cpu_sumsq(x[i], n[i]) : 0.0;
}
