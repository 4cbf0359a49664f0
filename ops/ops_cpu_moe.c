/*
 * ops/ops_cpu_moe.c — CPU kernels of the mixture-of-experts pieces of ops/ops.h: router softmax +
 * top-k + gates, probability sums, pack, combine and its backward, scatter-add, router backward
 * (docs/moe.md). Each is the loop that used to sit in model/moe.c, moved here unchanged, so the
 * cpu (and guard) results stay bit-identical: same accumulation types, same order, same OpenMP
 * thresholds.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "core/check.h"
#include "ops/ops_cpu.h"

/* Top-k of one probability row, ties to the lower id (strict > while scanning upward). */
static void top_k(const float *p, int E, int k, int *out) {
    int best = 0;
    for (int e = 1; e < E; e++)
        if (p[e] > p[best]) best = e;
    out[0] = best;
    if (k == 2) {
        int second = best == 0 ? 1 : 0;
        for (int e = 0; e < E; e++)
            if (e != best && p[e] > p[second]) second = e;
        out[1] = second;
    }
}

void ops_cpu_moe_route(float *probs, float *lse, int *expert, float *gate, int N, int E, int k) {
#pragma omp parallel for if ((size_t)N * E >= 65536) schedule(static)
    for (int t = 0; t < N; t++) {
        float *pr = probs + (size_t)t * E;
        float mx = pr[0];
        for (int e = 1; e < E; e++) mx = pr[e] > mx ? pr[e] : mx;
        double sum = 0.0;
        for (int e = 0; e < E; e++) {
            pr[e] = expf(pr[e] - mx);
            sum += pr[e];
        }
        lse[t] = mx + (float)log(sum);
        float inv = (float)(1.0 / sum);
        for (int e = 0; e < E; e++) pr[e] *= inv;
        int *ex = expert + (size_t)t * k;
        float *g = gate + (size_t)t * k;
        top_k(pr, E, k, ex);
        if (k == 1) {
            g[0] = pr[ex[0]];
        } else {
            float s = pr[ex[0]] + pr[ex[1]];
            g[0] = pr[ex[0]] / s;
            g[1] = pr[ex[1]] / s;
        }
    }
}

void ops_cpu_moe_prob_sums(double *sums, const float *probs, const float *lse, int N, int E) {
    for (int e = 0; e <= E; e++) sums[e] = 0.0;
    for (int t = 0; t < N; t++) {
        const float *pr = probs + (size_t)t * E;
        for (int e = 0; e < E; e++) sums[e] += pr[e];
        sums[E] += (double)lse[t] * lse[t];
    }
}

void ops_cpu_moe_pack(float *xsend, const float *x, const int *send_row, int N, int k, int C) {
    for (int t = 0; t < N; t++)
        for (int s = 0; s < k; s++) {
            int row = send_row[(size_t)t * k + s];
            if (row >= 0) memcpy(xsend + (size_t)row * C, x + (size_t)t * C, C * sizeof(float));
        }
}

void ops_cpu_moe_combine(float *y, const float *ysend, const int *send_row, const float *gate,
                         int N, int k, int C) {
#pragma omp parallel for if ((size_t)N * C >= 65536) schedule(static)
    for (int t = 0; t < N; t++) {
        float *yt = y + (size_t)t * C;
        memset(yt, 0, (size_t)C * sizeof(float));
        for (int s = 0; s < k; s++) {
            int row = send_row[(size_t)t * k + s];
            if (row < 0) continue;
            const float g = gate[(size_t)t * k + s], *o = ysend + (size_t)row * C;
            for (int c = 0; c < C; c++) yt[c] += g * o[c];
        }
    }
}

void ops_cpu_moe_combine_backward(float *dgate, float *dxsend, const float *dy,
                                  const float *ysend, const int *send_row, const float *gate,
                                  int N, int k, int C) {
#pragma omp parallel for if ((size_t)N * C >= 65536) schedule(static)
    for (int t = 0; t < N; t++) {
        const float *dyt = dy + (size_t)t * C;
        for (int s = 0; s < k; s++) {
            size_t i = (size_t)t * k + s;
            int row = send_row[i];
            dgate[i] = 0.0f;
            if (row < 0) continue;
            const float *o = ysend + (size_t)row * C;
            float *d = dxsend + (size_t)row * C, g = gate[i], dot = 0.0f;
            for (int c = 0; c < C; c++) {
                dot += dyt[c] * o[c];
                d[c] = g * dyt[c];
            }
            dgate[i] = dot;
        }
    }
}

void ops_cpu_moe_scatter_add(float *dx, const float *rows, const int *send_row, int N, int k,
                             int C) {
#pragma omp parallel for if ((size_t)N * C >= 65536) schedule(static)
    for (int t = 0; t < N; t++) {
        float *dxt = dx + (size_t)t * C;
        for (int s = 0; s < k; s++) {
            int row = send_row[(size_t)t * k + s];
            if (row < 0) continue;
            const float *d = rows + (size_t)row * C;
            for (int c = 0; c < C; c++) dxt[c] += d[c];
        }
    }
}

void ops_cpu_moe_router_backward(float *dlogits, const float *probs, const float *lse,
                                 const int *expert, const float *dgate, const float *daux,
                                 float z_scale, int N, int E, int k) {
#pragma omp parallel for if ((size_t)N * E >= 65536) schedule(static)
    for (int t = 0; t < N; t++) {
        const float *pr = probs + (size_t)t * E;
        float *dl = dlogits + (size_t)t * E;
        for (int e = 0; e < E; e++) dl[e] = daux[e]; /* d probs first */
        const int *ex = expert + (size_t)t * k;
        const float *dg = dgate + (size_t)t * k;
        if (k == 1) {
            dl[ex[0]] += dg[0];
        } else {
            float p1 = pr[ex[0]], p2 = pr[ex[1]], s = p1 + p2, inv2 = 1.0f / (s * s);
            dl[ex[0]] += p2 * (dg[0] - dg[1]) * inv2;
            dl[ex[1]] += p1 * (dg[1] - dg[0]) * inv2;
        }
        float dot = 0.0f;
        for (int e = 0; e < E; e++) dot += pr[e] * dl[e];
        for (int e = 0; e < E; e++) dl[e] = pr[e] * (dl[e] - dot) + z_scale * lse[t] * pr[e];
    }
}
