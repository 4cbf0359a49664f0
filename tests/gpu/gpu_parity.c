/*
 * tests/gpu/gpu_parity.c — the device check's driver (built by `make GPU=1`, run by
 * tests/gpu/run_gpu_checks.sh on a GPU machine): op parity of the CUDA backend against the CPU
 * backend, a bit-identical rerun, the bf16 GEMM peak, and a synthetic GPT-2 training-step bench.
 *
 *   gpu_parity info                                  the device (name, capability, SMs, memory)
 *   gpu_parity parity [--precision fp32|tf32|bf16]   every op, CUDA vs CPU, on random data
 *   gpu_parity peak                                  bf16 GEMM 8192³ through cuBLAS, TFLOP/s
 *   gpu_parity bench B T [--precision P] [--steps N] [--peak TFLOPS]
 *                                                    GPT-2 124M step, tokens/s and MFU
 *
 * Parity method: the same random inputs go to ops_<op> (host) and ops_cuda_<op> (device);
 * gradient buffers start from the same random values on both sides, so the check also proves
 * accumulation (+=). Pass rule, fp32: |gpu − cpu| ≤ tol · max(1, max|cpu|) with test_ops.c's
 * tolerances (2e-6 forward, 1e-4 gradients: each side is within those of an exact reference),
 * times max(1, sqrt(K/64)) for an op summing K terms per output (GPT-2 widths: K up to 3072);
 * tf32/bf16 (GEMM inputs rounded): ≤ 1e-2 relative to max|cpu| for values and for gradients a
 * cosine similarity ≥ 0.99. Every line says op, max error, cosine and PASS/FAIL; exit 1 on any
 * FAIL. Each op is run twice on the device and the two results must be bit-identical (fp32
 * determinism).
 *
 * The bench is SYNTHETIC: it issues the op sequence of one GPT-2 small training step (12 layers,
 * d 768, 12 heads, V 50257: embedding, per layer LN → qkv → attention → proj → residual → LN → fc
 * → GELU → fc-proj → residual, final LN, tied classifier, fused loss, the whole backward, AdamW
 * over 124M parameters) through ops_cuda_* with one layer's activation buffers reused by every
 * layer: the kernels, sizes and memory traffic are those of the real step, the numbers computed
 * are not meaningful. The trainer's own step on device = cuda (gpu-backend's table) is what the
 * script's training checks run; this bench measures the kernels alone.
 */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/time.h>

#include <cublas_v2.h>
#include <cuda_runtime.h>

#include "core/check.h"
#include "model/flops.h"
#include "ops/ops.h"
#include "ops/ops_cuda.h"

static int g_fail = 0;
static int g_lowp = 0; /* tf32 or bf16 GEMMs */
/* Terms summed per output by the op under test (1 for element-wise ops): see check(). */
static double g_k = 1;
static uint64_t g_rng = 0x9E3779B97F4A7C15ull;

static float frand(void) {
    g_rng ^= g_rng >> 12;
    g_rng ^= g_rng << 25;
    g_rng ^= g_rng >> 27;
    return (float)((double)((g_rng * 2685821657736338717ull) >> 40) / 16777216.0 * 2.0 - 1.0);
}
static float *hrand(size_t n, float scale) {
    float *x = mallocCheck(n * sizeof(float) + 16);
    for (size_t i = 0; i < n; i++) x[i] = scale * frand();
    return x;
}
static float *hdup(const float *x, size_t n) {
    float *y = mallocCheck(n * sizeof(float) + 16);
    memcpy(y, x, n * sizeof(float));
    return y;
}
static void *dput(const void *h, size_t bytes) {
    void *d = ops_cuda_alloc(bytes);
    mtCheck(d != NULL, "cudaMalloc failed");
    ops_cuda_copy_h2d(d, h, bytes);
    return d;
}
static float *dget(const float *d, size_t n) {
    float *h = mallocCheck(n * sizeof(float) + 16);
    ops_cuda_copy_d2h(h, d, n * sizeof(float));
    return h;
}

/* compare device result d (n) with the CPU's want; grad selects the tolerance */
static void check(const char *name, const float *d, const float *want, size_t n, int grad) {
    float *got = dget(d, n);
    double maxw = 0, maxe = 0, dot = 0, ng = 0, nw = 0;
    for (size_t i = 0; i < n; i++) {
        const double w = want[i], g = got[i], e = fabs(g - w);
        maxw = fmax(maxw, fabs(w));
        maxe = (e > maxe || isnan(e)) ? e : maxe;
        dot += g * w;
        ng += g * g;
        nw += w * w;
    }
    const double cosv = (ng > 0 && nw > 0) ? dot / sqrt(ng * nw) : (ng == nw ? 1.0 : 0.0);
    const double scale = fmax(1.0, maxw);
    /* both sides are fp32 summing in different orders: the error of a K-term sum grows like
     * sqrt(K), so past test_ops.c's sizes (K <= 64) the bound grows by sqrt(K / 64) */
    const double tol = (g_lowp ? 1e-2 : (grad ? 1e-4 : 2e-6)) * (g_lowp ? 1.0 : fmax(1.0, sqrt(g_k / 64.0)));
    /* low precision, gradients: the cosine rule; everything else: the max-error rule */
    const int ok = (g_lowp && grad) ? cosv >= 0.99 : maxe <= tol * scale;
    printf("%-28s n=%-9zu maxerr=%.3e (tol %.2e x %.3g) cos=%.6f %s\n", name, n, maxe, tol,
           scale, cosv, ok ? "PASS" : "FAIL");
    if (!ok) g_fail = 1;
    free(got);
}

/* the device buffer must equal `prev` (a previous device result, or the CPU's) bit for bit */
static void check_same(const char *name, const float *d, const float *prev, size_t n) {
    float *got = dget(d, n);
    const int same = memcmp(got, prev, n * sizeof(float)) == 0;
    printf("%-28s n=%-9zu bit-identical: %s\n", name, n, same ? "PASS" : "FAIL");
    if (!same) g_fail = 1;
    free(got);
}

/* ------------------------------------------------------------------------------------------ */

static void parity_elementwise(void) {
    g_k = 1;
    /* odd: the scalar path; 4096: the float4 path; 8000004: float4 with the grid capped at
     * OPS_CUDA_MAX_BLOCKS (grid-stride loops go round) and sumsq's parts capped at 1024 */
    const size_t sizes[3] = {100003, 4096, 8000004};
    for (int s = 0; s < 3; s++) {
        const size_t m = sizes[s];
        char nm[64];
        float *x = hrand(m, 4.0f), *y = hrand(m, 1.0f), *g = hrand(m, 1.0f), *o = hrand(m, 1.0f);
        float *dx = dput(x, m * 4), *dy = dput(y, m * 4), *dg = dput(g, m * 4), *dq = dput(o, m * 4);
        ops_gelu_forward(o, x, m);
        ops_cuda_gelu_forward(dq, dx, m);
        snprintf(nm, sizeof nm, "gelu_forward/%zu", m);
        check(nm, dq, o, m, 0);
        ops_gelu_backward(g, x, y, m);
        ops_cuda_gelu_backward(dg, dx, dy, m);
        snprintf(nm, sizeof nm, "gelu_backward/%zu", m);
        check(nm, dg, g, m, 1);
        ops_residual_forward(o, x, y, m);
        ops_cuda_residual_forward(dq, dx, dy, m);
        snprintf(nm, sizeof nm, "residual_forward/%zu", m);
        check(nm, dq, o, m, 0);
        ops_add_inplace(o, y, m);
        ops_cuda_add_inplace(dq, dy, m);
        snprintf(nm, sizeof nm, "add_inplace/%zu", m);
        check(nm, dq, o, m, 0);
        ops_scale(o, m, 0.37f);
        ops_cuda_scale(dq, m, 0.37f);
        snprintf(nm, sizeof nm, "scale/%zu", m);
        check(nm, dq, o, m, 0);
        const double s0 = ops_sumsq(x, m), s1 = ops_cuda_sumsq(dx, m), s2 = ops_cuda_sumsq(dx, m);
        const int ok = fabs(s0 - s1) <= 1e-12 * s0 && s1 == s2;
        printf("%-28s cpu=%.15g gpu=%.15g rerun-identical=%d %s\n", "sumsq", s0, s1, s1 == s2,
               ok ? "PASS" : "FAIL");
        if (!ok) g_fail = 1;
        /* adamw: p, m, v all compared */
        float *p = hrand(m, 1.0f), *mm = hrand(m, 0.1f), *vv = hrand(m, 0.1f);
        for (size_t i = 0; i < m; i++) vv[i] = fabsf(vv[i]);
        float *dp = dput(p, m * 4), *dm = dput(mm, m * 4), *dv = dput(vv, m * 4);
        ops_adamw(p, g, mm, vv, m, 1e-3f, 0.9f, 0.95f, 1e-8f, 0.1f, 3, 0.5f);
        ops_cuda_adamw(dp, dg, dm, dv, m, 1e-3f, 0.9f, 0.95f, 1e-8f, 0.1f, 3, 0.5f);
        check("adamw p", dp, p, m, 0);
        check("adamw m", dm, mm, m, 0);
        check("adamw v", dv, vv, m, 0);
        free(x), free(y), free(g), free(o), free(p), free(mm), free(vv);
        ops_cuda_free(dx), ops_cuda_free(dy), ops_cuda_free(dg), ops_cuda_free(dq);
        ops_cuda_free(dp), ops_cuda_free(dm), ops_cuda_free(dv);
    }
}

static void parity_layer_ops(int B, int T, int C, int OC, int V, int NH) {
    const int HS = C / NH, N = B * T;
    printf("-- layer ops at B=%d T=%d C=%d OC=%d V=%d NH=%d\n", B, T, C, OC, V, NH);
    /* encoder: the same additions in the same order as the CPU (positions bucketed by token and
     * summed in position order; dwpe over b ascending): bit for bit */
    g_k = 1;
    int *tok = mallocCheck(N * sizeof(int));
    for (int i = 0; i < N; i++) tok[i] = (int)((frand() + 1.0f) * 0.5f * 40) % V; /* repeats */
    int *dtok = dput(tok, N * sizeof(int));
    float *wte = hrand((size_t)V * C, 1.0f), *wpe = hrand((size_t)T * C, 1.0f);
    float *dwte_ = dput(wte, (size_t)V * C * 4), *dwpe_ = dput(wpe, (size_t)T * C * 4);
    float *enc = hrand((size_t)N * C, 1.0f), *denc = dput(enc, (size_t)N * C * 4);
    ops_encoder_forward(enc, tok, wte, wpe, B, T, C);
    ops_cuda_encoder_forward(denc, dtok, dwte_, dwpe_, B, T, C);
    check_same("encoder_forward == cpu", denc, enc, (size_t)N * C);
    float *dout = hrand((size_t)N * C, 1.0f), *ddout = dput(dout, (size_t)N * C * 4);
    float *gte = hrand((size_t)V * C, 1.0f), *gpe = hrand((size_t)T * C, 1.0f);
    float *dgte = dput(gte, (size_t)V * C * 4), *dgpe = dput(gpe, (size_t)T * C * 4);
    ops_encoder_backward(gte, gpe, dout, tok, B, T, C);
    ops_cuda_encoder_backward(dgte, dgpe, ddout, dtok, B, T, C);
    check_same("encoder_backward dwte == cpu", dgte, gte, (size_t)V * C);
    check_same("encoder_backward dwpe == cpu", dgpe, gpe, (size_t)T * C);

    /* layernorm */
    g_k = C;
    float *x = hrand((size_t)N * C, 2.0f), *w = hrand(C, 1.0f), *b = hrand(C, 1.0f);
    for (int i = 0; i < N * C; i++) x[i] += 3.0f; /* a mean far from 0 */
    float *dx_ = dput(x, (size_t)N * C * 4), *dw_ = dput(w, C * 4), *db_ = dput(b, C * 4);
    float *ln = hrand((size_t)N * C, 1), *mean = hrand(N, 1), *rstd = hrand(N, 1);
    float *dln = dput(ln, (size_t)N * C * 4), *dmean = dput(mean, N * 4), *drstd = dput(rstd, N * 4);
    ops_layernorm_forward(ln, mean, rstd, x, w, b, N, C);
    ops_cuda_layernorm_forward(dln, dmean, drstd, dx_, dw_, db_, N, C);
    check("layernorm_forward out", dln, ln, (size_t)N * C, 0);
    check("layernorm_forward mean", dmean, mean, N, 0);
    check("layernorm_forward rstd", drstd, rstd, N, 0);
    float *gx = hrand((size_t)N * C, 1), *gw = hrand(C, 1), *gb = hrand(C, 1);
    float *dgx = dput(gx, (size_t)N * C * 4), *dgw = dput(gw, C * 4), *dgb = dput(gb, C * 4);
    float *gw0 = hdup(gw, C), *gb0 = hdup(gb, C), *gx0 = hdup(gx, (size_t)N * C);
    ops_layernorm_backward(gx, gw, gb, dout, x, w, mean, rstd, N, C);
    ops_cuda_layernorm_backward(dgx, dgw, dgb, ddout, dx_, dw_, dmean, drstd, N, C);
    check("layernorm_backward dinp", dgx, gx, (size_t)N * C, 1);
    check("layernorm_backward dw", dgw, gw, C, 1);
    check("layernorm_backward db", dgb, gb, C, 1);
    /* determinism: the same backward from the same start gives the same bits */
    float *gw1 = dget(dgw, C);
    ops_cuda_copy_h2d(dgw, gw0, C * 4);
    ops_cuda_copy_h2d(dgb, gb0, C * 4);
    ops_cuda_copy_h2d(dgx, gx0, (size_t)N * C * 4);
    ops_cuda_layernorm_backward(dgx, dgw, dgb, ddout, dx_, dw_, dmean, drstd, N, C);
    check_same("layernorm_backward rerun dw", dgw, gw1, C);
    free(gw1), free(gw0), free(gb0), free(gx0);

    /* matmul */
    g_k = N > OC ? N : OC;
    g_k = g_k > C ? g_k : C;
    float *W = hrand((size_t)OC * C, 0.2f), *bias = hrand(OC, 1.0f);
    float *dW = dput(W, (size_t)OC * C * 4), *dbias = dput(bias, OC * 4);
    float *mo = hrand((size_t)N * OC, 1), *dmo = dput(mo, (size_t)N * OC * 4);
    ops_matmul_forward(mo, x, W, bias, N, C, OC);
    ops_cuda_matmul_forward(dmo, dx_, dW, dbias, N, C, OC);
    check("matmul_forward (bias)", dmo, mo, (size_t)N * OC, 0);
    float *mo1 = dget(dmo, (size_t)N * OC);
    ops_cuda_matmul_forward(dmo, dx_, dW, dbias, N, C, OC);
    check_same("matmul_forward rerun", dmo, mo1, (size_t)N * OC);
    free(mo1);
    float *mdo = hrand((size_t)N * OC, 1), *dmdo = dput(mdo, (size_t)N * OC * 4);
    float *mgx = hrand((size_t)N * C, 1), *mgw = hrand((size_t)OC * C, 1), *mgb = hrand(OC, 1);
    float *dmgx = dput(mgx, (size_t)N * C * 4), *dmgw = dput(mgw, (size_t)OC * C * 4),
          *dmgb = dput(mgb, OC * 4);
    ops_matmul_backward(mgx, mgw, mgb, mdo, x, W, N, C, OC);
    ops_cuda_matmul_backward(dmgx, dmgw, dmgb, dmdo, dx_, dW, N, C, OC);
    check("matmul_backward dinp", dmgx, mgx, (size_t)N * C, 1);
    check("matmul_backward dw", dmgw, mgw, (size_t)OC * C, 1);
    check("matmul_backward dbias", dmgb, mgb, OC, 1);
    for (int i = 0; i < N * OC; i++) mo[i] += bias[i % OC];
    ops_cuda_bias_add(dmo, dbias, N, OC);
    check("bias_add", dmo, mo, (size_t)N * OC, 0);

    /* attention */
    g_k = T > HS ? T : HS;
    const size_t nqkv = (size_t)N * 3 * C, natt = (size_t)B * NH * T * T;
    float *qkv = hrand(nqkv, 1.0f), *ao = hrand((size_t)N * C, 1), *att = hrand(natt, 1);
    float *dqkv_ = dput(qkv, nqkv * 4), *dao = dput(ao, (size_t)N * C * 4), *datt = dput(att, natt * 4);
    ops_attention_forward(ao, att, qkv, B, T, NH, HS);
    ops_cuda_attention_forward(dao, datt, dqkv_, B, T, NH, HS);
    check("attention_forward out", dao, ao, (size_t)N * C, 0);
    check("attention_forward att", datt, att, natt, 0);
    float *gq = hrand(nqkv, 1), *scr = hrand(natt, 1), *dgq = dput(gq, nqkv * 4), *dscr = dput(scr, natt * 4);
    ops_attention_backward(gq, scr, dout, qkv, att, B, T, NH, HS);
    ops_cuda_attention_backward(dgq, dscr, ddout, dqkv_, datt, B, T, NH, HS);
    check("attention_backward dqkv", dgq, gq, nqkv, 1);

    /* decode: position t of sequence 0, caches (T, NH, HS) built from qkv's k and v */
    const int t = T - 1;
    float *kc = mallocCheck((size_t)T * C * 4), *vc = mallocCheck((size_t)T * C * 4);
    for (int i = 0; i < T; i++) {
        memcpy(kc + (size_t)i * C, qkv + (size_t)i * 3 * C + C, C * 4);
        memcpy(vc + (size_t)i * C, qkv + (size_t)i * 3 * C + 2 * C, C * 4);
    }
    float *dec = hrand(C, 1), *sc = hrand(T, 1);
    float *dkc = dput(kc, (size_t)T * C * 4), *dvc = dput(vc, (size_t)T * C * 4), *ddec = dput(dec, C * 4);
    float *dq0 = dput(qkv + (size_t)t * 3 * C, C * 4);
    ops_attention_decode(dec, qkv + (size_t)t * 3 * C, kc, vc, t, NH, HS, sc);
    ops_cuda_attention_decode(ddec, dq0, dkc, dvc, t, NH, HS, NULL);
    check("attention_decode", ddec, dec, C, 0);

    /* cross-entropy: training (with ignored rows), eval. dloss = 1 keeps dlogits O(1), so the
     * absolute bound is a relative one; per element only 1/Σ is a long sum (relative 1e-7). */
    g_k = 1;
    int *tg = mallocCheck(N * sizeof(int));
    for (int i = 0; i < N; i++) tg[i] = i % 7 == 3 ? -1 : (int)((frand() + 1.0f) * 0.5f * (V - 1));
    int *dtg = dput(tg, N * sizeof(int));
    for (int mode = 0; mode < 2; mode++) {
        float *lg = hrand((size_t)N * V, 5.0f), *loss = hrand(N, 1);
        float *dlg = dput(lg, (size_t)N * V * 4), *dloss = dput(loss, N * 4);
        const float dl = mode == 0 ? 1.0f : 0.0f;
        const double s0 = ops_softmax_crossentropy(lg, loss, tg, N, V, dl);
        const double s1 = ops_cuda_softmax_crossentropy(dlg, dloss, dtg, N, V, dl);
        const int ok = fabs(s0 - s1) <= 1e-5 * fmax(1.0, fabs(s0));
        printf("%-28s cpu=%.9g gpu=%.9g %s\n", mode == 0 ? "crossentropy sum (train)" : "crossentropy sum (eval)",
               s0, s1, ok ? "PASS" : "FAIL");
        if (!ok) g_fail = 1;
        check(mode == 0 ? "crossentropy dlogits" : "crossentropy probs", dlg, lg, (size_t)N * V, 1);
        check("crossentropy losses", dloss, loss, N, 0);
        free(lg), free(loss);
        ops_cuda_free(dlg), ops_cuda_free(dloss);
    }

    /* new ops with inline references */
    g_k = 1;
    int *pos = mallocCheck(N * sizeof(int));
    for (int i = 0; i < N; i++) pos[i] = (i * 7) % T;
    int *dpos = dput(pos, N * sizeof(int));
    for (int i = 0; i < N; i++)
        for (int c = 0; c < C; c++) enc[(size_t)i * C + c] = wte[(size_t)tok[i] * C + c] + wpe[(size_t)pos[i] * C + c];
    ops_cuda_embed_rows(denc, dtok, dpos, dwte_, dwpe_, N, C);
    check_same("embed_rows == reference", denc, enc, (size_t)N * C);
    free(pos), ops_cuda_free(dpos);

    float *lg = hrand((size_t)N * V, 1.0f);
    for (int i = 0; i < N; i += 5) lg[(size_t)i * V + 17] = lg[(size_t)i * V + 300] = 9.0f; /* ties */
    float *dlg = dput(lg, (size_t)N * V * 4);
    int *pred = mallocCheck(N * sizeof(int)), *dpred = ops_cuda_alloc(N * sizeof(int));
    ops_cuda_argmax_rows(dpred, dlg, N, V);
    ops_cuda_copy_d2h(pred, dpred, N * sizeof(int));
    int am_ok = 1;
    for (int i = 0; i < N; i++) {
        int best = 0;
        for (int j = 1; j < V; j++)
            if (lg[(size_t)i * V + j] > lg[(size_t)i * V + best]) best = j;
        am_ok &= pred[i] == best;
    }
    printf("%-28s %s\n", "argmax_rows (first max)", am_ok ? "PASS" : "FAIL");
    if (!am_ok) g_fail = 1;
    lg[12345] = NAN;
    lg[54321] = INFINITY;
    ops_cuda_copy_h2d(dlg, lg, (size_t)N * V * 4);
    const int64_t fn = ops_cuda_first_nonfinite(dlg, (size_t)N * V);
    const int64_t fn0 = ops_cuda_first_nonfinite(dlg, 12345);
    printf("%-28s got %lld and %lld (want 12345, -1) %s\n", "first_nonfinite", (long long)fn,
           (long long)fn0, fn == 12345 && fn0 == -1 ? "PASS" : "FAIL");
    if (!(fn == 12345 && fn0 == -1)) g_fail = 1;
    const float *xs[3] = {dx_, dW, dbias};
    const size_t ns[3] = {(size_t)N * C, 0, OC};
    double outs[3];
    ops_cuda_sumsq_multi(outs, xs, ns, 3);
    const double w0 = ops_sumsq(x, (size_t)N * C), w2 = ops_sumsq(bias, OC);
    const int mok = fabs(outs[0] - w0) <= 1e-12 * w0 && outs[1] == 0.0 && fabs(outs[2] - w2) <= 1e-12 * w2;
    printf("%-28s %s\n", "sumsq_multi", mok ? "PASS" : "FAIL");
    if (!mok) g_fail = 1;
    free(lg), free(pred), ops_cuda_free(dlg), ops_cuda_free(dpred);
}

/* MoE routing, combine and router backward against model/moe.c's loops, written out here */
static void parity_moe(void) {
    const int N = 300, E = 8, C = 64;
    g_k = C;
    for (int k = 1; k <= 2; k++) {
        float *pr = hrand((size_t)N * E, 3.0f), *lse = mallocCheck(N * 4), *gate = mallocCheck(N * k * 4);
        int *ex = mallocCheck(N * k * sizeof(int));
        float *dpr = dput(pr, (size_t)N * E * 4), *dlse = ops_cuda_alloc(N * 4), *dgate = ops_cuda_alloc(N * k * 4);
        int *dex = ops_cuda_alloc(N * k * sizeof(int));
        for (int t = 0; t < N; t++) {
            float *p = pr + (size_t)t * E, mx = p[0];
            for (int e = 1; e < E; e++) mx = p[e] > mx ? p[e] : mx;
            double sum = 0;
            for (int e = 0; e < E; e++) sum += (p[e] = expf(p[e] - mx));
            lse[t] = mx + (float)log(sum);
            for (int e = 0; e < E; e++) p[e] *= (float)(1.0 / sum);
            int best = 0;
            for (int e = 1; e < E; e++) best = p[e] > p[best] ? e : best;
            ex[t * k] = best;
            if (k == 1) {
                gate[t] = p[best];
            } else {
                int sec = best == 0 ? 1 : 0;
                for (int e = 0; e < E; e++) sec = (e != best && p[e] > p[sec]) ? e : sec;
                ex[t * k + 1] = sec;
                gate[t * k] = p[best] / (p[best] + p[sec]);
                gate[t * k + 1] = p[sec] / (p[best] + p[sec]);
            }
        }
        ops_cuda_moe_route(dpr, dlse, dex, dgate, N, E, k);
        check("moe_route probs", dpr, pr, (size_t)N * E, 0);
        check("moe_route lse", dlse, lse, N, 0);
        check("moe_route gate", dgate, gate, (size_t)N * k, 0);
        int *gex = mallocCheck(N * k * sizeof(int));
        ops_cuda_copy_d2h(gex, dex, N * k * sizeof(int));
        const int eok = memcmp(gex, ex, N * k * sizeof(int)) == 0;
        printf("%-28s k=%d %s\n", "moe_route experts", k, eok ? "PASS" : "FAIL");
        if (!eok) g_fail = 1;
        /* combine: every third slot dropped, rows in slot order */
        int *sr = mallocCheck(N * k * sizeof(int)), S = 0;
        for (int i = 0; i < N * k; i++) sr[i] = i % 3 == 1 ? -1 : S++;
        int *dsr = dput(sr, N * k * sizeof(int));
        float *ys = hrand((size_t)S * C, 1.0f), *dys = dput(ys, (size_t)S * C * 4);
        float *y = mallocCheck((size_t)N * C * 4), *dy_ = ops_cuda_alloc((size_t)N * C * 4);
        for (int t = 0; t < N; t++)
            for (int c = 0; c < C; c++) {
                float a = 0;
                for (int s = 0; s < k; s++)
                    if (sr[t * k + s] >= 0) a += gate[t * k + s] * ys[(size_t)sr[t * k + s] * C + c];
                y[(size_t)t * C + c] = a;
            }
        ops_cuda_moe_combine(dy_, dys, dsr, dgate, N, k, C);
        check("moe_combine", dy_, y, (size_t)N * C, 0);
        /* router backward */
        float *dg = hrand((size_t)N * k, 1.0f), *daux = hrand(E, 0.1f), *dl = mallocCheck((size_t)N * E * 4);
        float *ddg = dput(dg, N * k * 4), *ddaux = dput(daux, E * 4), *ddl = ops_cuda_alloc((size_t)N * E * 4);
        const float zs = 0.01f;
        for (int t = 0; t < N; t++) {
            const float *p = pr + (size_t)t * E;
            float *d = dl + (size_t)t * E;
            for (int e = 0; e < E; e++) d[e] = daux[e];
            const int *xe = ex + t * k;
            if (k == 1) {
                d[xe[0]] += dg[t];
            } else {
                float p1 = p[xe[0]], p2 = p[xe[1]], s = p1 + p2, inv2 = 1.0f / (s * s);
                d[xe[0]] += p2 * (dg[t * k] - dg[t * k + 1]) * inv2;
                d[xe[1]] += p1 * (dg[t * k + 1] - dg[t * k]) * inv2;
            }
            float dot = 0;
            for (int e = 0; e < E; e++) dot += p[e] * d[e];
            for (int e = 0; e < E; e++) d[e] = p[e] * (d[e] - dot) + zs * lse[t] * p[e];
        }
        ops_cuda_moe_router_backward(ddl, dpr, dlse, dex, ddg, ddaux, zs, N, E, k);
        check("moe_router_backward", ddl, dl, (size_t)N * E, 1);
        free(pr), free(lse), free(gate), free(ex), free(gex), free(sr), free(ys), free(y), free(dg), free(daux), free(dl);
        ops_cuda_free(dpr), ops_cuda_free(dlse), ops_cuda_free(dgate), ops_cuda_free(dex), ops_cuda_free(dsr);
        ops_cuda_free(dys), ops_cuda_free(dy_), ops_cuda_free(ddg), ops_cuda_free(ddaux), ops_cuda_free(ddl);
    }
}

static int parity(const char *prec) {
    g_lowp = strcmp(prec, "fp32") != 0;
    printf("== parity, GEMM precision %s, device %s\n", prec, ops_cuda_device_name());
    parity_elementwise();
    parity_layer_ops(3, 70, 96, 200, 515, 4);          /* odd sizes */
    parity_layer_ops(2, 256, 768, 3072, 50257, 12);    /* GPT-2 small's widths and vocabulary */
    parity_moe();
    printf("== parity %s: %s\n", prec, g_fail ? "FAIL" : "PASS");
    return g_fail;
}

/* ------------------------------------------------------------------------------------------ */

static double now_s(void) {
    struct timeval tv;
    gettimeofday(&tv, NULL);
    return tv.tv_sec + tv.tv_usec * 1e-6;
}

/* bf16 GEMM peak: 8192³ through cublasGemmEx, bf16 in, fp32 accumulate, bf16 out; best of 10 */
static double peak_tflops(void) {
    const int n = 8192;
    const size_t bytes = (size_t)n * n * 2;
    void *a = ops_cuda_alloc(bytes), *b = ops_cuda_alloc(bytes), *c = ops_cuda_alloc(bytes);
    mtCheck(a && b && c, "peak: cudaMalloc failed");
    cublasHandle_t h;
    mtCheck(cublasCreate(&h) == CUBLAS_STATUS_SUCCESS, "cublasCreate");
    cublasSetStream(h, (cudaStream_t)ops_cuda_stream());
    const float one = 1.0f, zero = 0.0f;
    double best = 0;
    for (int it = 0; it < 13; it++) {
        ops_cuda_sync();
        const double t0 = now_s();
        cublasStatus_t s = cublasGemmEx(h, CUBLAS_OP_N, CUBLAS_OP_N, n, n, n, &one, a, CUDA_R_16BF, n, b,
                                        CUDA_R_16BF, n, &zero, c, CUDA_R_16BF, n, CUBLAS_COMPUTE_32F,
                                        CUBLAS_GEMM_DEFAULT);
        mtCheck(s == CUBLAS_STATUS_SUCCESS, "cublasGemmEx bf16");
        ops_cuda_sync();
        const double dt = now_s() - t0;
        if (it >= 3) best = fmax(best, 2.0 * n * (double)n * n / dt / 1e12); /* 3 warm-ups */
    }
    cublasDestroy(h);
    ops_cuda_free(a), ops_cuda_free(b), ops_cuda_free(c);
    return best;
}

/* Where the step's time goes: CUDA events recorded between ops on the compute stream during one
 * extra step, each interval charged to the category of the op it starts (host round trips, e.g.
 * the encoder backward's token bucketing or the loss's 8-byte copy, count to their op). */
enum { BK_MM, BK_CLS, BK_ATT, BK_LN, BK_EW, BK_LOSS, BK_EMB, BK_OPT, BK_N };
static const char *const bk_name[BK_N] = {"matmul (cuBLAS, layers)", "classifier matmul", "attention (GEMMs + softmax)",
                                          "layernorm", "element-wise (gelu, residual, copies)", "softmax + cross-entropy",
                                          "embedding fwd/bwd", "grad zero + norm + AdamW"};
#define BK_MAX 2048
static cudaEvent_t bk_ev[BK_MAX];
static int bk_cat[BK_MAX], bk_n, bk_on;
static void bk(int cat) {
    if (!bk_on || bk_n >= BK_MAX - 1) return;
    cudaEventRecord(bk_ev[bk_n], (cudaStream_t)ops_cuda_stream());
    bk_cat[bk_n++] = cat;
}
static void bk_report(double step_s) {
    cudaEventRecord(bk_ev[bk_n], (cudaStream_t)ops_cuda_stream());
    ops_cuda_sync();
    double ms[BK_N] = {0}, total = 0;
    for (int i = 0; i < bk_n; i++) {
        float m = 0;
        cudaEventElapsedTime(&m, bk_ev[i], bk_ev[i + 1]);
        ms[bk_cat[i]] += m;
        total += m;
    }
    printf("breakdown (one step, %.1f ms on the GPU timeline, %.1f ms wall):\n", total, step_s * 1e3);
    for (int c = 0; c < BK_N; c++)
        printf("  %-40s %8.2f ms  %5.1f%%\n", bk_name[c], ms[c], total > 0 ? 100.0 * ms[c] / total : 0.0);
}

/* synthetic GPT-2 124M step (see the file comment) */
static int bench(int B, int T, const char *prec, int steps, double peak_meas) {
    const int L = 12, C = 768, NH = 12, HS = C / NH, V = 50257, N = B * T;
    const size_t NC = (size_t)N * C;
    mtCheck(ops_cuda_set_precision(prec) == 0, "bench: precision must be fp32, tf32 or bf16");
    /* parameters and their gradients, per layer: ln1 w b, qkv w b, proj w b, ln2 w b, fc w b, fcp w b */
    const size_t per_layer = 2 * C + 3 * C * C + 3 * C + C * C + C + 2 * C + 4 * C * C + 4 * C + 4 * C * C + C;
    const size_t nparams = (size_t)V * C + (size_t)T * C + L * per_layer + 2 * C;
    float *P = ops_cuda_alloc(nparams * 4), *G = ops_cuda_alloc(nparams * 4);
    float *M = ops_cuda_alloc(nparams * 4), *Vv = ops_cuda_alloc(nparams * 4);
    const size_t act = NC * (1 + 1 + 3 + 1 + 1 + 1 + 1 + 4 + 4 + 1) + (size_t)B * NH * T * T;
    float *A = ops_cuda_alloc(act * 4), *D = ops_cuda_alloc(act * 4);
    float *logits = ops_cuda_alloc((size_t)N * V * 4), *stats = ops_cuda_alloc((size_t)N * 8 * 4);
    int *tok = ops_cuda_alloc(N * sizeof(int));
    if (!P || !G || !M || !Vv || !A || !D || !logits || !stats || !tok) {
        printf("bench B=%d T=%d %s: out of device memory, skipped\n", B, T, prec);
        return 1;
    }
    int *htok = mallocCheck(N * sizeof(int));
    for (int i = 0; i < N; i++) htok[i] = (int)(((unsigned)i * 2654435761u) % V);
    ops_cuda_copy_h2d(tok, htok, N * sizeof(int));
    free(htok);
    float *wte = P, *wpe = P + (size_t)V * C, *lw = wpe + (size_t)T * C;
    float *gte = G, *gpe = G + (size_t)V * C, *lg = gpe + (size_t)T * C;
    float *x = A, *ln = x + NC, *qkv = ln + NC, *atty = qkv + 3 * NC, *res = atty + NC, *ln2 = res + NC,
          *fcp = ln2 + NC, *fc = fcp + NC, *fcg = fc + 4 * NC, *out = fcg + 4 * NC, *att = out + NC;
    float *dx = D, *dln = dx + NC, *dqkv = dln + NC, *datty = dqkv + 3 * NC, *dres = datty + NC,
          *dln2 = dres + NC, *dfcp = dln2 + NC, *dfc = dfcp + NC, *dfcg = dfc + 4 * NC, *dout = dfcg + 4 * NC,
          *datt = dout + NC;
    float *mean = stats, *rstd = stats + N, *mean2 = stats + 2 * N, *rstd2 = stats + 3 * N;
    double t_total = 0;
    for (int i = 0; i < BK_MAX; i++) cudaEventCreate(&bk_ev[i]);
    double t_bk = 0;
    for (int s = 0; s < steps + 3; s++) { /* 2 warm-up steps, steps timed, 1 with the breakdown */
        bk_on = s == steps + 2;
        bk_n = 0;
        ops_cuda_sync();
        const double t0 = now_s();
        bk(BK_OPT);
        ops_cuda_zero(G, nparams * 4);
        bk(BK_EMB);
        ops_cuda_encoder_forward(x, tok, wte, wpe, B, T, C);
        for (int l = 0; l < L; l++) {
            float *w = lw + l * per_layer;
            float *l1w = w, *l1b = w + C, *qw = w + 2 * C, *qb = qw + 3 * C * C, *pw = qb + 3 * C,
                  *pb = pw + C * C, *l2w = pb + C, *l2b = l2w + C, *fw = l2b + C, *fb = fw + 4 * C * C,
                  *fpw = fb + 4 * C, *fpb = fpw + 4 * C * C;
            bk(BK_LN);
            ops_cuda_layernorm_forward(ln, mean, rstd, x, l1w, l1b, N, C);
            bk(BK_MM);
            ops_cuda_matmul_forward(qkv, ln, qw, qb, N, C, 3 * C);
            bk(BK_ATT);
            ops_cuda_attention_forward(atty, att, qkv, B, T, NH, HS);
            bk(BK_MM);
            ops_cuda_matmul_forward(fcp, atty, pw, pb, N, C, C);
            bk(BK_EW);
            ops_cuda_residual_forward(res, x, fcp, NC);
            bk(BK_LN);
            ops_cuda_layernorm_forward(ln2, mean2, rstd2, res, l2w, l2b, N, C);
            bk(BK_MM);
            ops_cuda_matmul_forward(fc, ln2, fw, fb, N, C, 4 * C);
            bk(BK_EW);
            ops_cuda_gelu_forward(fcg, fc, 4 * NC);
            bk(BK_MM);
            ops_cuda_matmul_forward(out, fcg, fpw, fpb, N, 4 * C, C);
            bk(BK_EW);
            ops_cuda_residual_forward(x, res, out, NC);
        }
        float *lfw = lw + L * per_layer, *lfb = lfw + C;
        bk(BK_LN);
        ops_cuda_layernorm_forward(ln, mean, rstd, x, lfw, lfb, N, C);
        bk(BK_CLS);
        ops_cuda_matmul_forward(logits, ln, wte, NULL, N, C, V);
        bk(BK_LOSS);
        const double loss = ops_cuda_softmax_crossentropy(logits, (float *)(stats + 4 * N), tok, N, V, 1.0f / N);
        (void)loss;
        bk(BK_EW);
        ops_cuda_zero(D, act * 4);
        bk(BK_CLS);
        ops_cuda_matmul_backward(dln, gte, NULL, logits, ln, wte, N, C, V);
        bk(BK_LN);
        ops_cuda_layernorm_backward(dx, lg + L * per_layer, lg + L * per_layer + C, dln, x, lfw, mean, rstd, N, C);
        for (int l = L - 1; l >= 0; l--) {
            float *w = lw + l * per_layer, *g = lg + l * per_layer;
            float *l1w = w, *qw = w + 2 * C, *pw = qw + 3 * C * C + 3 * C, *l2w = pw + C * C + C,
                  *fw = l2w + 2 * C, *fpw = fw + 4 * C * C + 4 * C;
            float *gl1w = g, *gqw = g + 2 * C, *gpw = gqw + 3 * C * C + 3 * C, *gl2w = gpw + C * C + C,
                  *gfw = gl2w + 2 * C, *gfpw = gfw + 4 * C * C + 4 * C;
            bk(BK_EW);
            ops_cuda_copy_d2d(dres, dx, NC * 4);
            bk(BK_MM);
            ops_cuda_matmul_backward(dfcg, gfpw, gfpw + 4 * C * C, dx, fcg, fpw, N, 4 * C, C);
            bk(BK_EW);
            ops_cuda_gelu_backward(dfc, fc, dfcg, 4 * NC);
            bk(BK_MM);
            ops_cuda_matmul_backward(dln2, gfw, gfw + 4 * C * C, dfc, ln2, fw, N, C, 4 * C);
            bk(BK_LN);
            ops_cuda_layernorm_backward(dres, gl2w, gl2w + C, dln2, res, l2w, mean2, rstd2, N, C);
            bk(BK_EW);
            ops_cuda_copy_d2d(dx, dres, NC * 4);
            bk(BK_MM);
            ops_cuda_matmul_backward(datty, gpw, gpw + C * C, dres, atty, pw, N, C, C);
            bk(BK_ATT);
            ops_cuda_attention_backward(dqkv, datt, datty, qkv, att, B, T, NH, HS);
            bk(BK_MM);
            ops_cuda_matmul_backward(dln, gqw, gqw + 3 * C * C, dqkv, ln, qw, N, C, 3 * C);
            bk(BK_LN);
            ops_cuda_layernorm_backward(dx, gl1w, gl1w + C, dln, x, l1w, mean, rstd, N, C);
        }
        bk(BK_EMB);
        ops_cuda_encoder_backward(gte, gpe, dx, tok, B, T, C);
        bk(BK_OPT);
        const double gn = ops_cuda_sumsq(G, nparams);
        bk(BK_OPT);
        ops_cuda_adamw(P, G, M, Vv, nparams, 1e-4f, 0.9f, 0.95f, 1e-8f, 0.1f, s + 1, gn > 1.0 ? (float)(1.0 / sqrt(gn)) : 1.0f);
        ops_cuda_sync();
        if (s >= 2 && !bk_on) t_total += now_s() - t0;
        if (bk_on) t_bk = now_s() - t0;
    }
    const double dt = t_total / steps, tps = N / dt;
    const double n_matmul = (double)L * 12 * C * C + (double)V * C;
    const double fpt = flops_per_token_n(n_matmul, L, C, T); /* 6N + 12·L·d·T, model/flops.h */
    const double mfu = fpt * tps / 989e12, mfu_meas = peak_meas > 0 ? fpt * tps / (peak_meas * 1e12) : NAN;
    printf("bench B=%d T=%d precision=%s step_ms=%.1f tokens_per_s=%.0f TFLOPs=%.1f MFU_vs_989=%.3f "
           "MFU_vs_measured_peak=%.3f\n", B, T, prec, dt * 1e3, tps, fpt * tps / 1e12, mfu, mfu_meas);
    bk_on = 1;
    bk_report(t_bk);
    for (int i = 0; i < BK_MAX; i++) cudaEventDestroy(bk_ev[i]);
    ops_cuda_free(P), ops_cuda_free(G), ops_cuda_free(M), ops_cuda_free(Vv), ops_cuda_free(A);
    ops_cuda_free(D), ops_cuda_free(logits), ops_cuda_free(stats), ops_cuda_free(tok);
    return 0;
}

int main(int argc, char **argv) {
    if (argc < 2 || strcmp(argv[1], "--help") == 0) {
        printf("usage: gpu_parity info\n"
               "       gpu_parity parity [--precision fp32|tf32|bf16]\n"
               "       gpu_parity peak\n"
               "       gpu_parity bench B T [--precision P] [--steps N] [--peak TFLOPS]\n");
        return argc < 2 ? MT_EXIT_USAGE : 0;
    }
    const char *prec = "fp32";
    int steps = 5;
    double peak = 0;
    for (int i = 2; i < argc - 1; i++) {
        if (strcmp(argv[i], "--precision") == 0) prec = argv[++i];
        else if (strcmp(argv[i], "--steps") == 0) steps = atoi(argv[++i]);
        else if (strcmp(argv[i], "--peak") == 0) peak = atof(argv[++i]);
    }
    char err[256];
    if (ops_cuda_init(0, err, sizeof err) != 0) {
        fprintf(stderr, "gpu_parity: %s\n", err);
        return MT_EXIT_ERROR;
    }
    if (ops_cuda_set_precision(prec) != 0) mt_fail("unknown precision '%s' (fp32, tf32, bf16)", prec);
    if (strcmp(argv[1], "info") == 0) {
        int dev = 0, major = 0, minor = 0, sms = 0;
        size_t freeb = 0, total = 0;
        cudaGetDevice(&dev);
        cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, dev);
        cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, dev);
        cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev);
        cudaMemGetInfo(&freeb, &total);
        printf("device %d: %s, compute capability %d.%d, %d SMs, %.1f of %.1f GiB free\n", dev,
               ops_cuda_device_name(), major, minor, sms, freeb / 1073741824.0, total / 1073741824.0);
        return 0;
    }
    if (strcmp(argv[1], "parity") == 0) return parity(prec);
    if (strcmp(argv[1], "peak") == 0) {
        printf("bf16 GEMM 8192^3 peak: %.1f TFLOP/s\n", peak_tflops());
        return 0;
    }
    if (strcmp(argv[1], "bench") == 0 && argc >= 4) {
        return bench(atoi(argv[2]), atoi(argv[3]), prec, steps > 0 ? steps : 5, peak);
    }
    mt_fail("unknown command '%s' (info, parity, peak, bench B T)", argv[1]);
}
