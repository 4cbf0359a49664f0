/*
 * tests/cp_ring_driver.c — ring attention (model/ring_attention.c) against the unsharded
 * attention, under mpirun (built and run by tests/run_cp.sh; it needs MPI ranks).
 *
 * Usage: mpirun -np P cp_ring_driver      (all P ranks form one context-parallel ring)
 *
 * Every rank draws, from fixed seeds, the same whole-sequence q, k, v (B, T, 3C) and output
 * gradient dO (B, T, C), runs ops_cpu_attention_forward/backward on the whole sequence (the
 * reference a single process computes), and ring attention on its head-tail shard (its rows
 * at parallel/cp.h's positions). It compares its rows of the output, of the probabilities (against
 * every global key) and of dq, dk, dv: |Δ| ≤ 2e-5 · max|ref| + 1e-6 per tensor (fp32; the
 * blockwise online softmax sums in another order than the one-pass softmax, so bits differ).
 * Then a central finite difference of L = Σ dO ⊙ out (summed over the ring in double) for a few
 * q, k and v elements of different chunks: (L(x+ε) − L(x−ε)) / 2ε against the ring's gradient,
 * within 1e-3 · max|dqkv| + 1e-3 (ε = 1e-2; fp32 forward). Exit 0 when all pass on every rank.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/check.h"
#include "core/rng.h"
#include "model/ring_attention.h"
#include "ops/ops_cpu.h"
#include "parallel/comm.h"
#include "parallel/cp.h"

enum { B = 2, NH = 2, HS = 8, C = NH * HS, CHUNK = 4 };

static double worst(const char *what, const float *a, const float *b, size_t n, int *fail) {
    double mx = 0, d = 0;
    for (size_t i = 0; i < n; i++) {
        if (fabs(b[i]) > mx) mx = fabs(b[i]);
        if (fabs(a[i] - b[i]) > d) d = fabs(a[i] - b[i]);
    }
    if (!(d <= 2e-5 * mx + 1e-6)) {
        fprintf(stderr, "rank %d: %s: max |diff| %.3g exceeds %.3g\n", comm_world_rank(), what, d,
                2e-5 * mx + 1e-6);
        *fail = 1;
    }
    return d / (mx + 1e-30);
}

/* L = Σ over the ring of dO ⊙ ring_attention(qkv_local) */
static double ring_loss(comm *w, const float *qkv, const float *dol, float *out, float *att,
                        int Tl) {
    ring_attention_forward(w, out, att, qkv, B, Tl, NH, HS);
    double L = 0;
    for (size_t i = 0; i < (size_t)B * Tl * C; i++) L += (double)dol[i] * out[i];
    comm_all_reduce_f64(w, &L, 1, COMM_SUM);
    return L;
}

int main(int argc, char **argv) {
    comm *w = comm_init_world(&argc, &argv);
    const int cp = comm_size(w), r = comm_rank(w);
    const int T = 2 * cp * CHUNK, Tl = T / cp;
    const size_t nq = (size_t)B * T * 3 * C, no = (size_t)B * T * C, na = (size_t)B * NH * T * T;
    float *qkv = mallocCheck(nq * sizeof(float)), *dout = mallocCheck(no * sizeof(float));
    rng_state g;
    rng_seed(&g, 29);
    for (size_t i = 0; i < nq; i++) qkv[i] = rng_normal(&g);
    for (size_t i = 0; i < no; i++) dout[i] = rng_normal(&g);
    /* the reference: the whole sequence in one process */
    float *out = callocCheck(no, sizeof(float)), *att = callocCheck(na, sizeof(float));
    float *dqkv = callocCheck(nq, sizeof(float)), *datt = callocCheck(na, sizeof(float));
    ops_cpu_attention_forward(out, att, qkv, B, T, NH, HS);
    ops_cpu_attention_backward(dqkv, datt, dout, qkv, att, B, T, NH, HS);
    /* this rank's rows, at their global positions */
    const size_t lq = (size_t)B * Tl * 3 * C, lo = (size_t)B * Tl * C, la = (size_t)B * NH * Tl * T;
    float *qkvl = mallocCheck(lq * sizeof(float)), *dol = mallocCheck(lo * sizeof(float));
    float *refo = mallocCheck(lo * sizeof(float)), *refdq = mallocCheck(lq * sizeof(float));
    float *refa = callocCheck(la, sizeof(float));
    for (int b = 0; b < B; b++)
        for (int i = 0; i < Tl; i++) {
            size_t gi = (size_t)b * T + cp_position(T, cp, r, i), li = (size_t)b * Tl + i;
            memcpy(qkvl + li * 3 * C, qkv + gi * 3 * C, 3 * C * sizeof(float));
            memcpy(refdq + li * 3 * C, dqkv + gi * 3 * C, 3 * C * sizeof(float));
            memcpy(dol + li * C, dout + gi * C, C * sizeof(float));
            memcpy(refo + li * C, out + gi * C, C * sizeof(float));
            for (int h = 0; h < NH; h++)
                memcpy(refa + (((size_t)b * NH + h) * Tl + i) * T,
                       att + (((size_t)b * NH + h) * T + cp_position(T, cp, r, i)) * T,
                       T * sizeof(float));
        }
    float *o = callocCheck(lo, sizeof(float)), *a = callocCheck(la, sizeof(float));
    float *dq = callocCheck(lq, sizeof(float)), *da = callocCheck(la, sizeof(float));
    ring_attention_forward(w, o, a, qkvl, B, Tl, NH, HS);
    ring_attention_backward(w, dq, da, dol, qkvl, o, a, B, Tl, NH, HS);
    /* att: entries of masked chunk pairs are unspecified; the reference has 0 there */
    for (int b = 0; b < B; b++)
        for (int h = 0; h < NH; h++)
            for (int i = 0; i < Tl; i++)
                for (int j = 0; j < T; j++)
                    if (j > cp_position(T, cp, r, i)) a[(((size_t)b * NH + h) * Tl + i) * T + j] = 0;
    int fail = 0;
    double e_o = worst("out", o, refo, lo, &fail), e_a = worst("att", a, refa, la, &fail);
    double e_d = worst("dqkv", dq, refdq, lq, &fail);
    /* finite differences through the ring: q, k, v elements of several chunks */
    double gmax = 0;
    for (size_t i = 0; i < lq; i++) gmax = fmax(gmax, fabs(dq[i]));
    comm_all_reduce_f64(w, &gmax, 1, COMM_MAX);
    const float eps = 1e-2f;
    double fd_worst = 0;
    int probes = 0;
    for (int owner = 0; owner < cp; owner++)
        for (int part = 0; part < 3; part++) /* q, k, v */
            for (int which = 0; which < 2; which++) { /* a head-chunk and a tail-chunk row */
                int i = which ? Tl - 1 - part : part, col = part * C + (which ? C - 1 : 3);
                size_t e = ((size_t)(which) * Tl + i) * 3 * C + col; /* b = which */
                double an = owner == r ? dq[e] : 0;
                comm_all_reduce_f64(w, &an, 1, COMM_SUM);
                float keep = qkvl[e];
                if (owner == r) qkvl[e] = keep + eps;
                double Lp = ring_loss(w, qkvl, dol, o, a, Tl);
                if (owner == r) qkvl[e] = keep - eps;
                double Lm = ring_loss(w, qkvl, dol, o, a, Tl);
                if (owner == r) qkvl[e] = keep;
                double fd = (Lp - Lm) / (2.0 * eps), d = fabs(fd - an);
                if (d > fd_worst) fd_worst = d;
                probes++;
                if (!(d <= 1e-3 * gmax + 1e-3)) {
                    if (r == 0)
                        fprintf(stderr, "finite difference: owner %d part %d row %d: fd %.6g, "
                                "ring %.6g\n", owner, part, i, fd, an);
                    fail = 1;
                }
            }
    double f = fail;
    comm_all_reduce_f64(w, &f, 1, COMM_MAX);
    if (r == 0)
        printf("cp %d, T %d: rank 0 rel. error out %.2g, att %.2g, dqkv %.2g; %d finite "
               "differences, worst |fd - ring| %.2g (max|grad| %.3g): %s\n", cp, T, e_o, e_a, e_d,
               probes, fd_worst, gmax, f == 0 ? "ok" : "FAILED");
    free(qkv), free(dout), free(out), free(att), free(dqkv), free(datt), free(qkvl), free(dol);
    free(refo), free(refdq), free(refa), free(o), free(a), free(dq), free(da);
    comm_finalize();
    return f == 0 ? 0 : 1;
}
