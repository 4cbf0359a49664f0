/*
 * tests/test_ops.c — unit tests of the CPU layer kernels in ops/ops.h (ops/ops_cpu.c):
 * encoder, layernorm, matmul, attention (and its decode step), GELU, softmax + cross-entropy,
 * and the input/weight halves of the matmul and layernorm backwards (equal to the whole op).
 * The optimizer and element-wise kernels, accumulation and thread-count independence are
 * tests/test_ops_elementwise.c; the helpers both use are tests/ops_testutil.h.
 *
 * Method: every op has a small double-precision reference forward written here with plain loops
 * (independent of the fp32/BLAS implementation). Forward outputs are compared with it; every
 * backward is compared with central finite differences of the scalar L = Σ ref_forward(x) ⊙ R
 * for a random R, taken in double (h = 1e-5), so the numerical gradient is accurate to ~1e-9
 * and the error budget is all on the fp32 side.
 *
 * Tolerance for fp32-vs-double comparisons: |got − want| ≤ tol · max(1, max|want|). The kernels
 * chain at most ~20 fp32 operations per output and sum at most ~100 terms, so the expected error
 * is a few 1e-7 relative to the largest value; TOL_GRAD = 1e-4 leaves a wide margin for that while
 * any wrong formula (a missing term, a transposed index, a dropped scale) is off by O(1).
 *
 * Gradient buffers are pre-filled with random values before a backward call and the check is
 * on (after − before): that also proves the functions accumulate rather than overwrite.
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

#define TOL_FWD 2e-6  /* forward fp32 vs double, relative to the largest magnitude */
#define TOL_GRAD 1e-4 /* analytic fp32 gradient vs double finite differences */
#define FD_H 1e-5     /* finite-difference step, in double */

/* ------------------------------------------------------------------------------------------ */
/* helpers                                                                                    */

static double *to_double(const float *x, size_t n) {
    double *y = mallocCheck(n * sizeof(double));
    for (size_t i = 0; i < n; i++) {
        y[i] = x[i];
    }
    return y;
}

static double dot(const double *a, const double *b, size_t n) {
    double s = 0.0;
    for (size_t i = 0; i < n; i++) {
        s += a[i] * b[i];
    }
    return s;
}

/* The increment (after − before) of an accumulated gradient, against want. */
static void check_increment(const char *what, const float *after, const float *before,
                            const double *want, size_t n, double tol) {
    float *d = mallocCheck(n * sizeof(float));
    for (size_t i = 0; i < n; i++) {
        d[i] = after[i] - before[i];
    }
    check_close(what, d, want, n, tol);
    free(d);
}

/* Central finite differences of L(ctx) with respect to each element of x (n). */
typedef double (*loss_fn)(void *ctx);
static void fd_grad(loss_fn L, void *ctx, double *x, size_t n, double *g) {
    for (size_t i = 0; i < n; i++) {
        const double save = x[i];
        x[i] = save + FD_H;
        const double lp = L(ctx);
        x[i] = save - FD_H;
        const double lm = L(ctx);
        x[i] = save;
        g[i] = (lp - lm) / (2.0 * FD_H);
    }
}

/* ------------------------------------------------------------------------------------------ */
/* double-precision reference forwards                                                        */

static void ref_encoder(double *out, const int *inp, const double *wte, const double *wpe, int B,
                        int T, int C) {
    for (int b = 0; b < B; b++)
        for (int t = 0; t < T; t++)
            for (int c = 0; c < C; c++)
                out[(b * T + t) * C + c] = wte[inp[b * T + t] * C + c] + wpe[t * C + c];
}

static void ref_layernorm(double *out, double *mean, double *rstd, const double *x,
                          const double *w, const double *b, int N, int C) {
    for (int n = 0; n < N; n++) {
        double m = 0.0, var = 0.0;
        for (int c = 0; c < C; c++) m += x[n * C + c];
        m /= C;
        for (int c = 0; c < C; c++) var += (x[n * C + c] - m) * (x[n * C + c] - m);
        var /= C;
        const double r = 1.0 / sqrt(var + 1e-5);
        for (int c = 0; c < C; c++) out[n * C + c] = (x[n * C + c] - m) * r * w[c] + b[c];
        if (mean) mean[n] = m;
        if (rstd) rstd[n] = r;
    }
}

static void ref_matmul(double *out, const double *x, const double *w, const double *bias, int N,
                       int C, int OC) {
    for (int n = 0; n < N; n++)
        for (int o = 0; o < OC; o++) {
            double s = bias ? bias[o] : 0.0;
            for (int c = 0; c < C; c++) s += x[n * C + c] * w[o * C + c];
            out[n * OC + o] = s;
        }
}

/* qkv (B,T,3,NH,HS) → out (B,T,NH,HS); att (B,NH,T,T) may be NULL. */
static void ref_attention(double *out, double *att, const double *qkv, int B, int T, int NH,
                          int HS) {
    const int C = NH * HS;
    double *p = dzeros((size_t)T);
    for (int b = 0; b < B; b++)
        for (int h = 0; h < NH; h++)
            for (int i = 0; i < T; i++) {
                const double *q = qkv + ((size_t)(b * T + i) * 3 + 0) * C + h * HS;
                double mx = -INFINITY;
                for (int j = 0; j <= i; j++) {
                    const double *k = qkv + ((size_t)(b * T + j) * 3 + 1) * C + h * HS;
                    double s = 0.0;
                    for (int d = 0; d < HS; d++) s += q[d] * k[d];
                    p[j] = s / sqrt((double)HS);
                    mx = fmax(mx, p[j]);
                }
                double sum = 0.0;
                for (int j = 0; j <= i; j++) sum += (p[j] = exp(p[j] - mx));
                for (int j = 0; j < T; j++) {
                    p[j] = j <= i ? p[j] / sum : 0.0;
                    if (att) att[(((size_t)b * NH + h) * T + i) * T + j] = p[j];
                }
                for (int d = 0; d < HS; d++) {
                    double s = 0.0;
                    for (int j = 0; j <= i; j++)
                        s += p[j] * qkv[((size_t)(b * T + j) * 3 + 2) * C + h * HS + d];
                    out[(size_t)(b * T + i) * C + h * HS + d] = s;
                }
            }
    free(p);
}

static double ref_gelu1(double x) {
    return 0.5 * x * (1.0 + tanh(sqrt(2.0 / M_PI) * (x + 0.044715 * x * x * x)));
}

/* Σ over non-ignored rows of −log softmax(logits)[target]; losses (N) may be NULL. */
static double ref_ce(const double *logits, const int *tg, int N, int V, double *losses) {
    double total = 0.0;
    for (int n = 0; n < N; n++) {
        double l = 0.0;
        if (tg[n] >= 0) {
            const double *z = logits + (size_t)n * V;
            double mx = z[0], s = 0.0;
            for (int i = 1; i < V; i++) mx = fmax(mx, z[i]);
            for (int i = 0; i < V; i++) s += exp(z[i] - mx);
            l = mx + log(s) - z[tg[n]];
        }
        if (losses) losses[n] = l;
        total += l;
    }
    return total;
}

/* ------------------------------------------------------------------------------------------ */
/* encoder                                                                                    */

typedef struct {
    int B, T, C;
    const int *inp;
    double *wte, *wpe, *R, *out;
} EncCtx;
static double enc_loss(void *p) {
    EncCtx *c = p;
    ref_encoder(c->out, c->inp, c->wte, c->wpe, c->B, c->T, c->C);
    return dot(c->out, c->R, (size_t)c->B * c->T * c->C);
}

static void test_encoder(void **state) {
    (void)state;
    enum { B = 2, T = 3, C = 4, V = 5, MAXT = 4 };
    const int inp[B * T] = {1, 3, 1, 1, 0, 3}; /* token 1 three times, 3 twice, 2 and 4 never */
    float *wte = frand_array(V * C, 1, 0), *wpe = frand_array(MAXT * C, 1, 0);
    float *R = frand_array(B * T * C, 1, 0), *out = fzeros(B * T * C);
    EncCtx ctx = {B, T, C, inp, to_double(wte, V * C), to_double(wpe, MAXT * C),
                  to_double(R, B * T * C), dzeros(B * T * C)};
    ops_encoder_forward(out, inp, wte, wpe, B, T, C);
    enc_loss(&ctx);
    check_close("encoder out", out, ctx.out, B * T * C, TOL_FWD);

    float *dwte = frand_array(V * C, 1, 0), *dwpe = frand_array(MAXT * C, 1, 0);
    float *dwte0 = fcopy(dwte, V * C), *dwpe0 = fcopy(dwpe, MAXT * C);
    ops_encoder_backward(dwte, dwpe, R, inp, B, T, C);
    double *gte = dzeros(V * C), *gpe = dzeros(MAXT * C);
    fd_grad(enc_loss, &ctx, ctx.wte, V * C, gte);
    fd_grad(enc_loss, &ctx, ctx.wpe, MAXT * C, gpe); /* row MAXT-1 is unused: gradient 0 */
    check_increment("encoder dwte", dwte, dwte0, gte, V * C, TOL_GRAD);
    check_increment("encoder dwpe", dwpe, dwpe0, gpe, MAXT * C, TOL_GRAD);
    free(wte); free(wpe); free(R); free(out); free(dwte); free(dwpe); free(dwte0); free(dwpe0);
    free(ctx.wte); free(ctx.wpe); free(ctx.R); free(ctx.out); free(gte); free(gpe);
}

/* ------------------------------------------------------------------------------------------ */
/* layernorm                                                                                  */

typedef struct {
    int N, C;
    double *x, *w, *b, *R, *out;
} LnCtx;
static double ln_loss(void *p) {
    LnCtx *c = p;
    ref_layernorm(c->out, NULL, NULL, c->x, c->w, c->b, c->N, c->C);
    return dot(c->out, c->R, (size_t)c->N * c->C);
}

static void test_layernorm(void **state) {
    (void)state;
    enum { N = 3, C = 7 };
    float *x = frand_array(N * C, 1.5f, 2.0f); /* non-zero mean exercises the centring */
    float *w = frand_array(C, 1, 0), *b = frand_array(C, 1, 0), *R = frand_array(N * C, 1, 0);
    float *out = fzeros(N * C), *mean = fzeros(N), *rstd = fzeros(N);
    LnCtx ctx = {N, C, to_double(x, N * C), to_double(w, C), to_double(b, C),
                 to_double(R, N * C), dzeros(N * C)};
    double rmean[N], rrstd[N];
    ref_layernorm(ctx.out, rmean, rrstd, ctx.x, ctx.w, ctx.b, N, C);
    ops_layernorm_forward(out, mean, rstd, x, w, b, N, C);
    check_close("layernorm out", out, ctx.out, N * C, TOL_FWD);
    check_close("layernorm mean", mean, rmean, N, TOL_FWD);
    check_close("layernorm rstd", rstd, rrstd, N, TOL_FWD);

    float *dx = frand_array(N * C, 1, 0), *dw = frand_array(C, 1, 0), *db = frand_array(C, 1, 0);
    float *dx0 = fcopy(dx, N * C), *dw0 = fcopy(dw, C), *db0 = fcopy(db, C);
    ops_layernorm_backward(dx, dw, db, R, x, w, mean, rstd, N, C);
    double *gx = dzeros(N * C), *gw = dzeros(C), *gb = dzeros(C);
    fd_grad(ln_loss, &ctx, ctx.x, N * C, gx);
    fd_grad(ln_loss, &ctx, ctx.w, C, gw);
    fd_grad(ln_loss, &ctx, ctx.b, C, gb);
    check_increment("layernorm dinp", dx, dx0, gx, N * C, TOL_GRAD);
    check_increment("layernorm dw", dw, dw0, gw, C, TOL_GRAD);
    check_increment("layernorm db", db, db0, gb, C, TOL_GRAD);
    free(x); free(w); free(b); free(R); free(out); free(mean); free(rstd);
    free(dx); free(dw); free(db); free(dx0); free(dw0); free(db0);
    free(ctx.x); free(ctx.w); free(ctx.b); free(ctx.R); free(ctx.out); free(gx); free(gw); free(gb);
}

/* ------------------------------------------------------------------------------------------ */
/* matmul                                                                                     */

typedef struct {
    int N, C, OC;
    double *x, *w, *bias, *R, *out;
} MmCtx;
static double mm_loss(void *p) {
    MmCtx *c = p;
    ref_matmul(c->out, c->x, c->w, c->bias, c->N, c->C, c->OC);
    return dot(c->out, c->R, (size_t)c->N * c->OC);
}

static void run_matmul_case(int with_bias) {
    enum { N = 7, C = 5, OC = 3 };
    float *x = frand_array(N * C, 1, 0), *w = frand_array(OC * C, 1, 0);
    float *bias = with_bias ? frand_array(OC, 1, 0) : NULL, *R = frand_array(N * OC, 1, 0);
    float *out = frand_array(N * OC, 1, 0); /* garbage: forward must overwrite */
    MmCtx ctx = {N, C, OC, to_double(x, N * C), to_double(w, OC * C),
                 with_bias ? to_double(bias, OC) : NULL, to_double(R, N * OC), dzeros(N * OC)};
    mm_loss(&ctx);
    ops_matmul_forward(out, x, w, bias, N, C, OC);
    check_close("matmul out", out, ctx.out, N * OC, TOL_FWD);

    float *dx = frand_array(N * C, 1, 0), *dw = frand_array(OC * C, 1, 0);
    float *db = frand_array(OC, 1, 0);
    float *dx0 = fcopy(dx, N * C), *dw0 = fcopy(dw, OC * C), *db0 = fcopy(db, OC);
    ops_matmul_backward(dx, dw, with_bias ? db : NULL, R, x, w, N, C, OC);
    double *gx = dzeros(N * C), *gw = dzeros(OC * C), *gb = dzeros(OC);
    fd_grad(mm_loss, &ctx, ctx.x, N * C, gx);
    fd_grad(mm_loss, &ctx, ctx.w, OC * C, gw);
    if (with_bias) {
        fd_grad(mm_loss, &ctx, ctx.bias, OC, gb);
    }
    check_increment("matmul dinp", dx, dx0, gx, N * C, TOL_GRAD);
    check_increment("matmul dw", dw, dw0, gw, OC * C, TOL_GRAD);
    check_increment("matmul dbias", db, db0, gb, OC, TOL_GRAD); /* untouched when NULL passed */

    /* NULL skips a gradient: dw alone equals the dw increment computed above */
    float *dw2 = fzeros(OC * C);
    ops_matmul_backward(NULL, dw2, NULL, R, x, w, N, C, OC);
    check_close("matmul dw (dinp=NULL)", dw2, gw, OC * C, TOL_GRAD);
    free(x); free(w); free(bias); free(R); free(out); free(dx); free(dw); free(db);
    free(dx0); free(dw0); free(db0); free(dw2); free(ctx.x); free(ctx.w); free(ctx.bias);
    free(ctx.R); free(ctx.out); free(gx); free(gw); free(gb);
}

static void test_matmul_bias(void **state) {
    (void)state;
    run_matmul_case(1);
}

static void test_matmul_nobias(void **state) {
    (void)state;
    run_matmul_case(0);
}

/* ------------------------------------------------------------------------------------------ */
/* attention                                                                                  */

typedef struct {
    int B, T, NH, HS;
    double *qkv, *R, *out;
} AttCtx;
static double att_loss(void *p) {
    AttCtx *c = p;
    ref_attention(c->out, NULL, c->qkv, c->B, c->T, c->NH, c->HS);
    return dot(c->out, c->R, (size_t)c->B * c->T * c->NH * c->HS);
}

static void test_attention(void **state) {
    (void)state;
    enum { B = 2, T = 5, NH = 3, HS = 4, C = NH * HS };
    const size_t nqkv = (size_t)B * T * 3 * C, nout = (size_t)B * T * C, natt = (size_t)B * NH * T * T;
    float *qkv = frand_array(nqkv, 1.5f, 0), *R = frand_array(nout, 1, 0);
    float *out = frand_array(nout, 1, 0), *att = frand_array(natt, 1, 0); /* garbage in */
    AttCtx ctx = {B, T, NH, HS, to_double(qkv, nqkv), to_double(R, nout), dzeros(nout)};
    double *ratt = dzeros(natt);
    ref_attention(ctx.out, ratt, ctx.qkv, B, T, NH, HS);
    ops_attention_forward(out, att, qkv, B, T, NH, HS);
    check_close("attention out", out, ctx.out, nout, TOL_FWD);
    check_close("attention att", att, ratt, natt, TOL_FWD);
    for (size_t r = 0; r < (size_t)B * NH * T; r++) {
        const int i = (int)(r % T);
        double s = 0.0;
        for (int j = 0; j < T; j++) {
            s += att[r * T + j];
            if (j > i && att[r * T + j] != 0.0f) {
                fail_msg("att row %zu col %d above the diagonal is %g, not 0", r, j,
                         (double)att[r * T + j]);
            }
        }
        assert_true(fabs(s - 1.0) < 1e-6);
    }

    float *dqkv = frand_array(nqkv, 1, 0), *dqkv0 = fcopy(dqkv, nqkv);
    float *datt = mallocCheck(natt * sizeof(float));
    for (size_t i = 0; i < natt; i++) {
        datt[i] = NAN; /* scratch: its contents on entry must not matter */
    }
    ops_attention_backward(dqkv, datt, R, qkv, att, B, T, NH, HS);
    double *g = dzeros(nqkv);
    fd_grad(att_loss, &ctx, ctx.qkv, nqkv, g);
    check_increment("attention dqkv", dqkv, dqkv0, g, nqkv, TOL_GRAD);
    free(qkv); free(R); free(out); free(att); free(ctx.qkv); free(ctx.R); free(ctx.out);
    free(ratt); free(dqkv); free(dqkv0); free(datt); free(g);
}

static void test_attention_decode(void **state) {
    (void)state;
    enum { T = 6, NH = 3, HS = 4, C = NH * HS, MAXT = 8 };
    float *qkv = frand_array((size_t)T * 3 * C, 1.5f, 0), *out = fzeros(T * C);
    float *att = fzeros(NH * T * T);
    ops_attention_forward(out, att, qkv, 1, T, NH, HS);
    /* caches (MAXT, NH, HS): rows 0..T-1 hold K and V of each position, the rest garbage */
    float *kc = frand_array(MAXT * C, 100, 0), *vc = frand_array(MAXT * C, 100, 0);
    for (int t = 0; t < T; t++) {
        memcpy(kc + t * C, qkv + ((size_t)t * 3 + 1) * C, C * sizeof(float));
        memcpy(vc + t * C, qkv + ((size_t)t * 3 + 2) * C, C * sizeof(float));
    }
    float dec[C], scratch[T];
    double want[C];
    for (int t = 0; t < T; t++) { /* position t sees rows 0..t: row t of the causal output */
        ops_attention_decode(dec, qkv + (size_t)t * 3 * C, kc, vc, t, NH, HS, scratch);
        for (int i = 0; i < C; i++) {
            want[i] = out[t * C + i];
        }
        check_close("attention_decode", dec, want, C, 1e-6);
    }
    free(qkv); free(out); free(att); free(kc); free(vc);
}

/* ------------------------------------------------------------------------------------------ */
/* gelu                                                                                       */

typedef struct {
    size_t n;
    double *x, *R;
} GeluCtx;
static double gelu_loss(void *p) {
    GeluCtx *c = p;
    double s = 0.0;
    for (size_t i = 0; i < c->n; i++) s += ref_gelu1(c->x[i]) * c->R[i];
    return s;
}

static void test_gelu(void **state) {
    (void)state;
    enum { N = 64 };
    float *x = frand_array(N, 6, 0), *R = frand_array(N, 1, 0), *out = fzeros(N);
    x[0] = 0.0f;
    x[1] = -12.0f;
    x[2] = 12.0f;
    GeluCtx ctx = {N, to_double(x, N), to_double(R, N)};
    double want[N];
    for (int i = 0; i < N; i++) want[i] = ref_gelu1(ctx.x[i]);
    ops_gelu_forward(out, x, N);
    check_close("gelu out", out, want, N, TOL_FWD);
    float *dx = frand_array(N, 1, 0), *dx0 = fcopy(dx, N);
    ops_gelu_backward(dx, x, R, N);
    double g[N];
    fd_grad(gelu_loss, &ctx, ctx.x, N, g);
    check_increment("gelu dinp", dx, dx0, g, N, TOL_GRAD);

    /* saturated tails: gelu(x) -> x and gelu' -> 1 for x >> 0; both -> 0 for x << 0 */
    const float tail_x[4] = {-1e6f, -30.0f, 30.0f, 1e6f}, tail_g[4] = {0, 0, 1, 1};
    const float ones[4] = {1, 1, 1, 1};
    float tail_y[4], tail_d[4] = {0, 0, 0, 0};
    ops_gelu_forward(tail_y, tail_x, 4);
    ops_gelu_backward(tail_d, tail_x, ones, 4);
    for (int i = 0; i < 4; i++) {
        assert_true(fabsf(tail_y[i] - (tail_g[i] ? tail_x[i] : 0.0f)) <= 1e-6f * fabsf(tail_x[i]));
        assert_true(fabsf(tail_d[i] - tail_g[i]) <= 1e-6f);
    }

    /* a dense sweep over [-40, 40]: each value within 1e-6 relative (or 1e-6 absolute near 0) */
    enum { M = 8001 };
    float *xs = fzeros(M), *ys = fzeros(M);
    for (int i = 0; i < M; i++) xs[i] = -40.0f + 0.01f * i;
    ops_gelu_forward(ys, xs, M);
    for (int i = 0; i < M; i++) {
        const double w = ref_gelu1(xs[i]);
        if (!(fabs(ys[i] - w) <= 1e-6 * fmax(1.0, fabs(w)))) {
            fail_msg("gelu(%g) = %.9g, want %.9g", (double)xs[i], (double)ys[i], w);
        }
    }
    free(x); free(R); free(out); free(dx); free(dx0); free(ctx.x); free(ctx.R); free(xs); free(ys);
}

/* ------------------------------------------------------------------------------------------ */
/* softmax + cross-entropy                                                                    */

typedef struct {
    int N, V;
    const int *tg;
    double *z, dloss;
} CeCtx;
static double ce_loss(void *p) {
    CeCtx *c = p;
    return c->dloss * ref_ce(c->z, c->tg, c->N, c->V, NULL);
}

static void test_softmax_crossentropy(void **state) {
    (void)state;
    enum { N = 4, V = 7 };
    const int tg[N] = {2, -1, 6, 0}; /* row 1 is ignored */
    const float dloss = 0.37f;
    float *z = frand_array(N * V, 3, 0);
    for (int i = 0; i < V; i++) z[3 * V + i] += 1000.0f; /* needs the max subtraction */
    z[3 * V + 4] -= 150.0f;                               /* exp underflows to 0 */
    CeCtx ctx = {N, V, tg, to_double(z, N * V), (double)dloss};
    double rloss[N];
    const double rtotal = ref_ce(ctx.z, tg, N, V, rloss);

    float *zz = fcopy(z, N * V), losses[N];
    const double total = ops_softmax_crossentropy(zz, losses, tg, N, V, dloss);
    assert_true(fabs(total - rtotal) <= 1e-5 * fmax(1.0, fabs(rtotal)));
    check_close("ce losses", losses, rloss, N, 1e-5);
    assert_true(losses[1] == 0.0f);
    double g[N * V];
    fd_grad(ce_loss, &ctx, ctx.z, N * V, g);
    check_close("ce dlogits", zz, g, N * V, TOL_GRAD);
    for (int i = 0; i < V; i++) {
        assert_true(zz[1 * V + i] == 0.0f); /* ignored row: exactly no gradient */
    }

    /* eval mode (dloss == 0): probabilities left in place */
    float *zp = fcopy(z, N * V);
    const double total2 = ops_softmax_crossentropy(zp, losses, tg, N, V, 0.0f);
    assert_true(fabs(total2 - rtotal) <= 1e-5 * fmax(1.0, fabs(rtotal)));
    double prob[N * V];
    for (int n = 0; n < N; n++) {
        double mx = ctx.z[n * V], s = 0.0;
        for (int i = 1; i < V; i++) mx = fmax(mx, ctx.z[n * V + i]);
        for (int i = 0; i < V; i++) s += exp(ctx.z[n * V + i] - mx);
        for (int i = 0; i < V; i++) prob[n * V + i] = exp(ctx.z[n * V + i] - mx) / s;
    }
    check_close("ce probabilities", zp, prob, N * V, 1e-6);
    free(z); free(zz); free(zp); free(ctx.z);
}

/* A vocabulary spanning several of the kernel's 1024-wide blocks plus a remainder; gradient
 * against the closed form (p − onehot)·dloss in double. */
static void test_softmax_crossentropy_wide(void **state) {
    (void)state;
    enum { N = 3, V = 2500 };
    const int tg[N] = {0, 2499, 1234};
    const float dloss = 1.0f / 3.0f;
    float *z = frand_array(N * V, 8, 0);
    double *zd = to_double(z, N * V), rloss[N], *want = dzeros(N * V);
    const double rtotal = ref_ce(zd, tg, N, V, rloss);
    for (int n = 0; n < N; n++) {
        double mx = zd[n * V], s = 0.0;
        for (int i = 1; i < V; i++) mx = fmax(mx, zd[n * V + i]);
        for (int i = 0; i < V; i++) s += exp(zd[n * V + i] - mx);
        for (int i = 0; i < V; i++)
            want[n * V + i] = (exp(zd[n * V + i] - mx) / s - (i == tg[n])) * dloss;
    }
    float losses[N];
    const double total = ops_softmax_crossentropy(z, losses, tg, N, V, dloss);
    assert_true(fabs(total - rtotal) <= 1e-5 * rtotal);
    check_close("ce wide losses", losses, rloss, N, 1e-5);
    check_close("ce wide dlogits", z, want, N * V, 1e-6);
    free(z); free(zd); free(want);
}

/* The B/W halves (ops_*_backward_input / _weight, run apart by ZB-H1) give the whole backward's
 * outputs bit for bit: each output is written by one half only, with the same operands. Sizes on
 * both sides of OPS_PAR_MIN (the OpenMP threshold), accumulating into random buffers. */
static void test_backward_halves(void **state) {
    (void)state;
    const int sizes[][3] = {{5, 7, 3}, {256, 96, 80}}; /* N, C, OC */
    for (int k = 0; k < 2; k++) {
        int N = sizes[k][0], C = sizes[k][1], OC = sizes[k][2];
        float *dout = frand_array((size_t)N * OC, 1, 0), *inp = frand_array((size_t)N * C, 1, 0);
        float *w = frand_array((size_t)OC * C, 1, 0);
        float *dinp = frand_array((size_t)N * C, 1, 0), *dw = frand_array((size_t)OC * C, 1, 0);
        float *db = frand_array(OC, 1, 0);
        float *dinp2 = fcopy(dinp, (size_t)N * C), *dw2 = fcopy(dw, (size_t)OC * C);
        float *db2 = fcopy(db, OC);
        ops_matmul_backward(dinp, dw, db, dout, inp, w, N, C, OC);
        ops_matmul_backward_input(dinp2, dout, w, N, C, OC);
        ops_matmul_backward_weight(dw2, db2, dout, inp, N, C, OC);
        assert_memory_equal(dinp, dinp2, (size_t)N * C * sizeof(float));
        assert_memory_equal(dw, dw2, (size_t)OC * C * sizeof(float));
        assert_memory_equal(db, db2, (size_t)OC * sizeof(float));
        /* layernorm over (N, C): mean and rstd from a forward */
        float *out = fzeros((size_t)N * C), *mean = fzeros(N), *rstd = fzeros(N);
        float *g = frand_array(C, 1, 1), *b = frand_array(C, 1, 0), *d2 = frand_array((size_t)N * C, 1, 0);
        ops_layernorm_forward(out, mean, rstd, inp, g, b, N, C);
        float *lx = frand_array((size_t)N * C, 1, 0), *lw = frand_array(C, 1, 0), *lb = frand_array(C, 1, 0);
        float *lx2 = fcopy(lx, (size_t)N * C), *lw2 = fcopy(lw, C), *lb2 = fcopy(lb, C);
        ops_layernorm_backward(lx, lw, lb, d2, inp, g, mean, rstd, N, C);
        ops_layernorm_backward_input(lx2, d2, inp, g, mean, rstd, N, C);
        ops_layernorm_backward_weight(lw2, lb2, d2, inp, mean, rstd, N, C);
        assert_memory_equal(lx, lx2, (size_t)N * C * sizeof(float));
        assert_memory_equal(lw, lw2, (size_t)C * sizeof(float));
        assert_memory_equal(lb, lb2, (size_t)C * sizeof(float));
        /* and the halves did something: the weight half moved dw away from its start */
        float *dw0 = frand_array((size_t)OC * C, 1, 0), *dw1 = fcopy(dw0, (size_t)OC * C);
        ops_matmul_backward_weight(dw1, NULL, dout, inp, N, C, OC);
        assert_true(memcmp(dw0, dw1, (size_t)OC * C * sizeof(float)) != 0);
        float *bufs[] = {dout, inp, w, dinp, dw, db, dinp2, dw2, db2, out, mean, rstd, g, b, d2,
                         lx, lw, lb, lx2, lw2, lb2, dw0, dw1};
        for (size_t j = 0; j < sizeof(bufs) / sizeof(bufs[0]); j++) free(bufs[j]);
    }
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_encoder),
        cmocka_unit_test(test_layernorm),
        cmocka_unit_test(test_matmul_bias),
        cmocka_unit_test(test_matmul_nobias),
        cmocka_unit_test(test_attention),
        cmocka_unit_test(test_attention_decode),
        cmocka_unit_test(test_gelu),
        cmocka_unit_test(test_softmax_crossentropy),
        cmocka_unit_test(test_softmax_crossentropy_wide),
        cmocka_unit_test(test_backward_halves),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
