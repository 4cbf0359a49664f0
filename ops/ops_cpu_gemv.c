/*
 * ops/ops_cpu_gemv.c — the decode matmul: out (N,OC) = inp (N,C) @ wᵀ for a few rows (N <=
 * OPS_GEMV_MAX_ROWS), reading every weight once from memory (see ops/ops_cpu.h).
 *
 * Why not sgemm: a decode step multiplies 1..8 rows by every weight of the model, so it is bound
 * by reading the weights (GPT-2 124M: 498 MB per step). Debian's OpenBLAS 0.3.21 packs the whole
 * B operand of an M = 1..8 sgemm into a buffer first — it reads each weight, writes it, and reads
 * it again — and measured 2.8 tok/s for one stream against a read-bandwidth bound of 16.9 here
 * (bench/bench_decode, docs/benchmarks.md). Here each thread takes a contiguous block of output
 * features (blocks of 64); a weight row w[o] (C floats) is loaded once into registers 16 floats at a time and
 * multiplied into all N input rows (which stay in L1: N·C·4 <= 24 KiB at C = 768), with two
 * 8-lane accumulators per row so that for N = 1 two FMA chains are in flight. The lanes are summed
 * in one fixed order, so the result does not depend on the thread count. Blocks of 64 outputs
 * are handed out dynamically: on a shared machine a descheduled thread does not hold the step.
 */
#include "ops/ops_cpu.h"

#include <stddef.h>

/* out[n·ldo] = Σ_j w[j]·x[n·C + j] for n < NN; NN is a compile-time constant at every call (the
 * switch below), so acc lives in registers: 16 lanes (two 8-wide chains) per row up to 4 rows,
 * 8 lanes (one chain) per row beyond, which keeps 8 independent chains without spilling the 16
 * AVX2 registers. */
static inline __attribute__((always_inline)) void dot_rows(const float *restrict w,
                                                           const float *restrict x, int C, int NN,
                                                           float *restrict out, size_t ldo) {
    const int LN = NN <= 4 ? 16 : 8;
    float acc[OPS_GEMV_MAX_ROWS][16] = {{0}};
    int j = 0;
    for (; j + LN <= C; j += LN)
        for (int n = 0; n < NN; n++)
#pragma omp simd
            for (int k = 0; k < LN; k++) acc[n][k] += w[j + k] * x[(size_t)n * C + j + k];
    for (int n = 0; n < NN; n++) {
        float tail = 0;
        for (int jj = j; jj < C; jj++) tail += w[jj] * x[(size_t)n * C + jj];
        float s8[8];
        for (int k = 0; k < 8; k++) s8[k] = LN == 16 ? acc[n][k] + acc[n][k + 8] : acc[n][k];
        out[(size_t)n * ldo] = ((s8[0] + s8[4]) + (s8[2] + s8[6])) +
                               ((s8[1] + s8[5]) + (s8[3] + s8[7])) + tail;
    }
}

#define GEMV_CASE(NN)                                                                              \
    case NN:                                                                                       \
        _Pragma("omp parallel for schedule(dynamic, 64) if (OC >= 256)")                               \
        for (int o = 0; o < OC; o++) {                                                             \
            dot_rows(w + (size_t)o * C, inp, C, NN, out + o, (size_t)OC);                          \
            if (bias != NULL)                                                                      \
                for (int n = 0; n < NN; n++) out[(size_t)n * OC + o] += bias[o];                   \
        }                                                                                          \
        break;

void ops_cpu_matmul_rows(float *out, const float *inp, const float *w, const float *bias, int N,
                         int C, int OC) {
    switch (N) {
        GEMV_CASE(1)
        GEMV_CASE(2)
        GEMV_CASE(3)
        GEMV_CASE(4)
        GEMV_CASE(5)
        GEMV_CASE(6)
        GEMV_CASE(7)
        GEMV_CASE(8)
    default:
        ops_cpu_matmul_forward(out, inp, w, bias, N, C, OC);
    }
}
