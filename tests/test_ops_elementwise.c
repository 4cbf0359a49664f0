/*
 * tests/test_ops_elementwise.c — unit tests of the CPU optimizer and element-wise kernels in
 * ops/ops.h (ops/ops_cpu.c: AdamW, sum of squares, residual, in-place add, scale), and of two
 * properties every kernel must have: a backward called twice doubles its gradients (accumulate,
 * never overwrite), and the results do not depend on the thread count. The layer kernels against
 * double references are tests/test_ops.c; the helpers both use are tests/ops_testutil.h.
 *
 * References: AdamW's update is recomputed in double from the formula in ops/ops.h; the
 * element-wise ops from their definitions. Tolerance as in tests/test_ops.c:
 * |got − want| ≤ tol · max(1, max|want|).
 */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "core/check.h"
#include "tests/ops_testutil.h"
#include "ops/ops.h"

/* ------------------------------------------------------------------------------------------ */
/* optimizer helpers and element-wise                                                         */

static void test_adamw(void **state) {
    (void)state;
    const float lr = 0.1f, b1 = 0.9f, b2 = 0.999f, eps = 1e-8f, wd = 0.01f;
    float p[3] = {0.5f, -1.25f, 2.0f}, m[3] = {0}, v[3] = {0};
    const float g[2][3] = {{0.1f, -0.2f, 0.0f}, {0.3f, 0.05f, -0.4f}}; /* g=0: decay only */
    double pd[3], md[3] = {0}, vd[3] = {0};
    for (int i = 0; i < 3; i++) pd[i] = p[i];
    for (int t = 1; t <= 2; t++) {
        const float sc = t == 2 ? 0.5f : 1.0f; /* step 2 also exercises the fused clip scale */
        ops_adamw(p, g[t - 1], m, v, 3, lr, b1, b2, eps, wd, t, sc);
        for (int i = 0; i < 3; i++) { /* the header's formula, in double */
            const double gi = (double)sc * g[t - 1][i];
            md[i] = (double)b1 * md[i] + (1.0 - (double)b1) * gi;
            vd[i] = (double)b2 * vd[i] + (1.0 - (double)b2) * gi * gi;
            const double mhat = md[i] / (1.0 - pow((double)b1, t));
            const double vhat = vd[i] / (1.0 - pow((double)b2, t));
            pd[i] -= (double)lr * (mhat / (sqrt(vhat) + (double)eps) + (double)wd * pd[i]);
        }
        check_close("adamw p", p, pd, 3, 1e-6);
        check_close("adamw m", m, md, 3, 1e-6);
        check_close("adamw v", v, vd, 3, 1e-6);
    }
    /* step 1 moves every parameter with a non-zero gradient by ~lr: a sanity anchor */
    assert_true(fabs(pd[0] - 0.5) > 0.1);
}

static void test_sumsq_scale_residual(void **state) {
    (void)state;
    const size_t sizes[2] = {5, 100003}; /* below and above the parallel threshold */
    for (int k = 0; k < 2; k++) {
        const size_t n = sizes[k];
        float *x = frand_array(n, 3, 0.5f), *y = frand_array(n, 1, 0), *o = fzeros(n);
        double want = 0.0;
        for (size_t i = 0; i < n; i++) want += (double)x[i] * (double)x[i];
        assert_true(fabs(ops_sumsq(x, n) - want) <= 1e-12 * want);

        double *w = dzeros(n);
        for (size_t i = 0; i < n; i++) w[i] = (double)x[i] + (double)y[i];
        ops_residual_forward(o, x, y, n);
        check_close("residual", o, w, n, 1e-7);
        float *y2 = fcopy(y, n);
        ops_add_inplace(y2, x, n);
        check_close("add_inplace", y2, w, n, 1e-7);
        for (size_t i = 0; i < n; i++) w[i] = (double)x[i] * 0.25;
        ops_scale(x, n, 0.25f);
        check_close("scale", x, w, n, 0.0); /* scaling by a power of 2 is exact */
        free(x); free(y); free(o); free(w); free(y2);
    }
}

/* ------------------------------------------------------------------------------------------ */
/* accumulation: calling a backward twice doubles its gradients                               */

static void check_doubles(const char *what, const float *once, const float *twice, size_t n) {
    for (size_t i = 0; i < n; i++) {
        if (!(fabsf(twice[i] - 2.0f * once[i]) <= 1e-6f * fmaxf(1.0f, fabsf(2.0f * once[i])))) {
            fail_msg("%s[%zu]: once %.9g, twice %.9g", what, i, (double)once[i],
                     (double)twice[i]);
        }
    }
}

static void test_backward_accumulates(void **state) {
    (void)state;
    enum { B = 2, T = 5, NH = 3, HS = 4, C = NH * HS, V = 6, OC = 9, N = B * T };
    const int inp[N] = {1, 1, 2, 5, 1, 0, 0, 3, 1, 4};
    float *dout = frand_array(N * 3 * C, 1, 0), *x = frand_array(N * 3 * C, 1, 0);
    float *w = frand_array(OC * 3 * C, 1, 0), *qkv = frand_array(N * 3 * C, 1, 0);
    float *g1[3], *g2[3];
    const size_t sz[3] = {(size_t)V * 3 * C, (size_t)T * 3 * C, 0};
    /* encoder */
    for (int r = 0; r < 2; r++) {
        float **g = r ? g2 : g1;
        g[0] = fzeros(sz[0]); g[1] = fzeros(sz[1]);
        for (int k = 0; k <= r; k++) ops_encoder_backward(g[0], g[1], dout, inp, B, T, 3 * C);
    }
    check_doubles("encoder dwte", g1[0], g2[0], sz[0]);
    check_doubles("encoder dwpe", g1[1], g2[1], sz[1]);
    for (int k = 0; k < 2; k++) { free(g1[k]); free(g2[k]); }
    /* layernorm */
    float *o = fzeros(N * C), mean[N], rstd[N];
    ops_layernorm_forward(o, mean, rstd, x, w, w + C, N, C);
    for (int r = 0; r < 2; r++) {
        float **g = r ? g2 : g1;
        g[0] = fzeros(N * C); g[1] = fzeros(C); g[2] = fzeros(C);
        for (int k = 0; k <= r; k++)
            ops_layernorm_backward(g[0], g[1], g[2], dout, x, w, mean, rstd, N, C);
    }
    check_doubles("layernorm dinp", g1[0], g2[0], N * C);
    check_doubles("layernorm dw", g1[1], g2[1], C);
    check_doubles("layernorm db", g1[2], g2[2], C);
    for (int k = 0; k < 3; k++) { free(g1[k]); free(g2[k]); }
    /* matmul */
    for (int r = 0; r < 2; r++) {
        float **g = r ? g2 : g1;
        g[0] = fzeros(N * C); g[1] = fzeros(OC * C); g[2] = fzeros(OC);
        for (int k = 0; k <= r; k++) ops_matmul_backward(g[0], g[1], g[2], dout, x, w, N, C, OC);
    }
    check_doubles("matmul dinp", g1[0], g2[0], N * C);
    check_doubles("matmul dw", g1[1], g2[1], OC * C);
    check_doubles("matmul dbias", g1[2], g2[2], OC);
    for (int k = 0; k < 3; k++) { free(g1[k]); free(g2[k]); }
    /* attention */
    float *att = fzeros(B * NH * T * T), *datt = fzeros(B * NH * T * T);
    ops_attention_forward(o, att, qkv, B, T, NH, HS);
    for (int r = 0; r < 2; r++) {
        float **g = r ? g2 : g1;
        g[0] = fzeros(N * 3 * C);
        for (int k = 0; k <= r; k++)
            ops_attention_backward(g[0], datt, dout, qkv, att, B, T, NH, HS);
    }
    check_doubles("attention dqkv", g1[0], g2[0], N * 3 * C);
    free(g1[0]); free(g2[0]);
    /* gelu */
    for (int r = 0; r < 2; r++) {
        float **g = r ? g2 : g1;
        g[0] = fzeros(N * C);
        for (int k = 0; k <= r; k++) ops_gelu_backward(g[0], x, dout, N * C);
    }
    check_doubles("gelu dinp", g1[0], g2[0], N * C);
    free(g1[0]); free(g2[0]);
    free(dout); free(x); free(w); free(qkv); free(o); free(att); free(datt);
}

/* ------------------------------------------------------------------------------------------ */
/* thread-count independence                                                                  */

/* Bump allocator over one result buffer, so that every output lands in one comparable array. */
#define MAX_SEGS 32
typedef struct {
    float *base;
    size_t used, cap;
    int nseg;
    size_t seg_off[MAX_SEGS], seg_len[MAX_SEGS];
    const char *seg_name[MAX_SEGS];
} Arena;
static float *take_named(Arena *a, size_t n, const char *name) {
    mtCheck(a->used + n <= a->cap && a->nseg < MAX_SEGS, "test arena too small");
    float *p = a->base + a->used;
    a->seg_off[a->nseg] = a->used;
    a->seg_len[a->nseg] = n;
    a->seg_name[a->nseg++] = name;
    a->used += n;
    return p;
}
#define take(a, n) take_named(a, n, #n " @ line " MT_STR(__LINE__))
#define MT_STR2(x) #x
#define MT_STR(x) MT_STR2(x)

/* Runs every kernel, forward and backward, with the given thread count on inputs large enough to
 * take the parallel paths; returns all outputs as named segments of one buffer. */
static Arena run_all(int threads) {
    enum { B = 4, T = 32, NH = 4, HS = 16, C = NH * HS, C4 = 4 * C, N = B * T, OC = 200,
           V = 3000, NV = 11, NP = 60000 };
    ops_set_threads(threads);
    rng_state = 12345; /* identical inputs for both thread counts */
    int inp[N], tg[N];
    for (int i = 0; i < N; i++) {
        inp[i] = (i * 7) % NV; /* repeated tokens */
        tg[i] = i == 3 ? -1 : (i * 131) % V;
    }
    float *wte = frand_array(NV * C4, 1, 0), *wpe = frand_array(T * C4, 1, 0);
    float *x = frand_array(N * C4, 1, 0), *w = frand_array(OC * C4, 1, 0);
    float *bias = frand_array(OC, 1, 0), *qkv = frand_array(N * 3 * C, 1, 0);
    float *dout = frand_array(N * C4, 1, 0), *z = frand_array(N * V, 4, 0);
    float *mp = frand_array(NP, 1, 0), *mg = frand_array(NP, 1, 0);
    float *mm = fzeros(NP), *mv = fzeros(NP), *datt = fzeros(B * NH * T * T);
    Arena a = {.base = NULL, .used = 0, .cap = 2000000, .nseg = 0};
    a.base = fzeros(a.cap);

    ops_encoder_forward(take(&a, N * C4), inp, wte, wpe, B, T, C4);
    float *dwte = take(&a, NV * C4), *dwpe = take(&a, T * C4);
    ops_encoder_backward(dwte, dwpe, dout, inp, B, T, C4);

    float *mean = take(&a, N), *rstd = take(&a, N);
    ops_layernorm_forward(take(&a, N * C4), mean, rstd, x, w, w + C4, N, C4);
    float *ln_dx = take(&a, N * C4), *ln_dw = take(&a, C4), *ln_db = take(&a, C4);
    ops_layernorm_backward(ln_dx, ln_dw, ln_db, dout, x, w, mean, rstd, N, C4);

    ops_matmul_forward(take(&a, N * OC), x, w, bias, N, C4, OC);
    float *mm_dx = take(&a, N * C4), *mm_dw = take(&a, OC * C4), *mm_db = take(&a, OC);
    ops_matmul_backward(mm_dx, mm_dw, mm_db, dout, x, w, N, C4, OC);

    float *att = take(&a, B * NH * T * T);
    ops_attention_forward(take(&a, N * C), att, qkv, B, T, NH, HS);
    ops_attention_backward(take(&a, N * 3 * C), datt, dout, qkv, att, B, T, NH, HS);

    ops_gelu_forward(take(&a, N * C4), x, N * C4);
    ops_gelu_backward(take(&a, N * C4), x, dout, N * C4);

    float *logits = take(&a, N * V);
    memcpy(logits, z, (size_t)N * V * sizeof(float));
    float *losses = take(&a, N);
    const double ce = ops_softmax_crossentropy(logits, losses, tg, N, V, 1.0f / N);
    *take(&a, 1) = (float)ce;

    ops_adamw(mp, mg, mm, mv, NP, 1e-3f, 0.9f, 0.95f, 1e-8f, 0.1f, 1, 1.0f);
    memcpy(take(&a, NP), mp, NP * sizeof(float));
    *take(&a, 1) = (float)ops_sumsq(mg, NP);

    free(wte); free(wpe); free(x); free(w); free(bias); free(qkv); free(dout); free(z);
    free(mp); free(mg); free(mm); free(mv); free(datt);
    return a;
}

static void test_threads_equal(void **state) {
    (void)state;
    Arena a = run_all(1), b = run_all(2);
    assert_int_equal(a.used, b.used);
    /* Element-wise kernels give bit-identical results (each element is computed the same way
     * whatever thread owns it), so the 1e-6 bound is loose for them. sgemm may block its sums
     * differently per thread count, which moves a dot product of magnitude-1 terms by ~1 ulp of
     * its partial sums, not of its (possibly cancelled) result: hence the bound is relative to
     * the largest magnitude in each output tensor. A race would be off by O(1). */
    for (int s = 0; s < a.nseg; s++) {
        const float *x = a.base + a.seg_off[s], *y = b.base + b.seg_off[s];
        double scale = 1.0;
        for (size_t i = 0; i < a.seg_len[s]; i++) scale = fmax(scale, fabs((double)x[i]));
        for (size_t i = 0; i < a.seg_len[s]; i++) {
            if (!(fabs((double)x[i] - y[i]) <= 1e-6 * scale)) {
                fail_msg("threads 1 vs 2, %s [%zu]: %.9g vs %.9g (scale %.3g)", a.seg_name[s], i,
                         (double)x[i], (double)y[i], scale);
            }
        }
    }
    ops_set_threads(2);
    free(a.base);
    free(b.base);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_adamw),
        cmocka_unit_test(test_sumsq_scale_residual),
        cmocka_unit_test(test_backward_accumulates),
        cmocka_unit_test(test_threads_equal),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
