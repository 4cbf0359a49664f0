/*
 * ops/ops_cpu.c — CPU backend of ops/ops.h: OpenBLAS sgemm for every matmul, OpenMP for the
 * element-wise kernels.
 *
 * Why it is shaped so:
 *   - All FLOPs that matter are in sgemm. Linear layers are one sgemm each way; attention runs
 *     one small sgemm per (batch, head) straight on the packed qkv layout using leading-dimension
 *     strides (no gather/scatter copies). Those per-head sgemms are issued from inside an
 *     `omp parallel for collapse(2)` over (b, h): the OpenMP build of OpenBLAS then runs each one
 *     single-threaded, so the heads, not the tiny GEMMs, are what is parallel.
 *   - Element-wise kernels use `omp parallel for` only above OPS_PAR_MIN elements (a parallel
 *     region costs a few microseconds; below that it is pure overhead) and `omp simd` inside.
 *   - Reductions that several rows feed into one parameter gradient (layernorm dw/db, matmul
 *     dbias, encoder dwte/dwpe) are parallelised over COLUMN blocks: each thread owns a disjoint
 *     range of columns and walks all rows, so there are no races, no atomics and no scratch
 *     allocation, and the result does not depend on the thread count.
 *   - Nothing allocates: attention uses the caller's att/datt buffers as its scratch.
 * Formulas follow llm.c (Karpathy) train_gpt2.c: layernorm backward, GELU tanh approximation,
 * fused softmax + cross-entropy, AdamW with bias correction.
 */
#include "ops/ops_cpu.h"

#include <cblas.h>
#include <math.h>
#include <omp.h>
#include <stdint.h>
#include <string.h>

#include "core/check.h"

/* Work below this many scalar elements runs on the calling thread. */
#define OPS_PAR_MIN 16384
/* Column block width for the column-parallel reductions (a multiple of the SIMD width). */
#define OPS_COL_BLOCK 64

/* exp(x) for float in plain C that the compiler vectorises inside `omp simd` loops (glibc's
 * expf is vectorised only under -ffast-math). Cephes expf: x = n ln2 + r, |r| <= ln2/2, with a
 * Cody-Waite split of ln2 and a degree-6 polynomial for e^r; max error about 2 ulp over the
 * range. Round-to-nearest uses the 1.5*2^23 trick (exact without -ffast-math). Inputs above 88
 * return +inf (the true value is within 2x of FLT_MAX); below -87.3 return 0 (the true value is
 * subnormal); NaN propagates. Used by softmax (attention, cross-entropy) and GELU. */
static inline float fast_expf(float x) {
    const float hi = 88.0f, lo = -87.3f;
    const float xc = x > hi ? hi : (x < lo ? lo : x);
    const float magic = 12582912.0f; /* 1.5 * 2^23 */
    const float n = (xc * 1.44269504088896341f + magic) - magic;
    float r = xc - n * 0.693359375f;
    r = r - n * -2.12194440e-4f;
    float p = 1.9875691500e-4f;
    p = p * r + 1.3981999507e-3f;
    p = p * r + 8.3334519073e-3f;
    p = p * r + 4.1665795894e-2f;
    p = p * r + 1.6666665459e-1f;
    p = p * r + 5.0000001201e-1f;
    p = p * r * r + r + 1.0f;
    const int32_t bits = ((int32_t)n + 127) << 23; /* 2^n, n in [-126, 127] */
    float scale;
    memcpy(&scale, &bits, sizeof scale);
    return x > hi ? INFINITY : (x < lo ? 0.0f : p * scale);
}

/* One sgemm per OpenMP thread (the way attention calls it) and one on all threads (the way the
 * linears do), once per process: OpenBLAS starts its threads and faults in its packing buffers
 * here instead of inside the first training step (~12k page faults, bench/bench_step). ~1 ms. */
static void blas_warm_up(void) {
    static int done;
    if (done) return;
    done = 1;
    enum { W = 192 };
    static float a[W * W], c[W * W];
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, W, W, W, 1.0f, a, W, a, W, 0.0f, c, W);
#pragma omp parallel
    {
        float cl[64 * 64];
        cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, 64, 64, 64, 1.0f, a, W, a, W, 0.0f,
                    cl, 64);
    }
}

void ops_cpu_set_threads(int threads) {
    if (threads <= 0) {
        return;
    }
    omp_set_num_threads(threads);
    openblas_set_num_threads(threads);
    blas_warm_up();
}

/* ------------------------------------------------------------------------------------------ */
/* encoder                                                                                    */

void ops_cpu_encoder_forward(float *out, const int *inp, const float *wte, const float *wpe, int B,
                         int T, int C) {
    const int BT = B * T;
#pragma omp parallel for if ((size_t)BT * C >= OPS_PAR_MIN) schedule(static)
    for (int bt = 0; bt < BT; bt++) {
        const int t = bt % T;
        float *o = out + (size_t)bt * C;                   // (C)
        const float *we = wte + (size_t)inp[bt] * C;       // (C)
        const float *pe = wpe + (size_t)t * C;             // (C)
#pragma omp simd
        for (int c = 0; c < C; c++) {
            o[c] = we[c] + pe[c];
        }
    }
}

void ops_cpu_encoder_backward(float *dwte, float *dwpe, const float *dout, const int *inp, int B,
                          int T, int C) {
    /* Column blocks: several positions may share a token id, so rows of dwte collide; columns
     * never do. Each thread walks every position for its own columns. */
    const int nblk = (C + OPS_COL_BLOCK - 1) / OPS_COL_BLOCK;
#pragma omp parallel for if ((size_t)B * T * C >= OPS_PAR_MIN && nblk > 1) schedule(static)
    for (int blk = 0; blk < nblk; blk++) {
        const int c0 = blk * OPS_COL_BLOCK;
        const int c1 = c0 + OPS_COL_BLOCK < C ? c0 + OPS_COL_BLOCK : C;
        for (int b = 0; b < B; b++) {
            for (int t = 0; t < T; t++) {
                const size_t bt = (size_t)b * T + t;
                const float *d = dout + bt * C;            // (C)
                float *gte = dwte + (size_t)inp[bt] * C;   // (C)
                float *gpe = dwpe + (size_t)t * C;         // (C)
#pragma omp simd
                for (int c = c0; c < c1; c++) {
                    gte[c] += d[c];
                    gpe[c] += d[c];
                }
            }
        }
    }
}

/* ------------------------------------------------------------------------------------------ */
/* layernorm                                                                                  */

void ops_cpu_layernorm_forward(float *out, float *mean, float *rstd, const float *inp, const float *w,
                           const float *b, int N, int C) {
    const float eps = 1e-5f;
#pragma omp parallel for if ((size_t)N * C >= OPS_PAR_MIN) schedule(static)
    for (int n = 0; n < N; n++) {
        const float *x = inp + (size_t)n * C;              // (C)
        float *o = out + (size_t)n * C;                    // (C)
        float s = 0.0f;
#pragma omp simd reduction(+ : s)
        for (int c = 0; c < C; c++) {
            s += x[c];
        }
        const float m = s / C;
        float v = 0.0f; /* two-pass variance: no cancellation for rows with a large mean */
#pragma omp simd reduction(+ : v)
        for (int c = 0; c < C; c++) {
            const float d = x[c] - m;
            v += d * d;
        }
        const float r = 1.0f / sqrtf(v / C + eps);
#pragma omp simd
        for (int c = 0; c < C; c++) {
            o[c] = (x[c] - m) * r * w[c] + b[c];
        }
        mean[n] = m;
        rstd[n] = r;
    }
}

/* The input half (llm.c layernorm_backward's dinp), over rows. */
void ops_cpu_layernorm_backward_input(float *dinp, const float *dout, const float *inp,
                                      const float *w, const float *mean, const float *rstd, int N,
                                      int C) {
#pragma omp parallel for if ((size_t)N * C >= OPS_PAR_MIN) schedule(static)
    for (int n = 0; n < N; n++) {
        const float *x = inp + (size_t)n * C;          // (C)
        const float *d = dout + (size_t)n * C;         // (C)
        float *dx = dinp + (size_t)n * C;              // (C)
        const float m = mean[n], r = rstd[n];
        float dnorm_mean = 0.0f, dnorm_norm_mean = 0.0f;
#pragma omp simd reduction(+ : dnorm_mean, dnorm_norm_mean)
        for (int c = 0; c < C; c++) {
            const float norm = (x[c] - m) * r;
            const float dnorm = w[c] * d[c];
            dnorm_mean += dnorm;
            dnorm_norm_mean += dnorm * norm;
        }
        dnorm_mean /= C;
        dnorm_norm_mean /= C;
#pragma omp simd
        for (int c = 0; c < C; c++) {
            const float norm = (x[c] - m) * r;
            const float dnorm = w[c] * d[c];
            dx[c] += (dnorm - dnorm_mean - norm * dnorm_norm_mean) * r;
        }
    }
}

/* The weight half, over column blocks: each column owned by one thread (race-free), rows summed
 * in order. */
void ops_cpu_layernorm_backward_weight(float *dw, float *db, const float *dout, const float *inp,
                                       const float *mean, const float *rstd, int N, int C) {
    const int nblk = (C + OPS_COL_BLOCK - 1) / OPS_COL_BLOCK;
#pragma omp parallel for if ((size_t)N * C >= OPS_PAR_MIN) schedule(static)
    for (int blk = 0; blk < nblk; blk++) {
        const int c0 = blk * OPS_COL_BLOCK;
        const int c1 = c0 + OPS_COL_BLOCK < C ? c0 + OPS_COL_BLOCK : C;
        for (int n = 0; n < N; n++) {
            const float *x = inp + (size_t)n * C;
            const float *d = dout + (size_t)n * C;
            const float m = mean[n], r = rstd[n];
#pragma omp simd
            for (int c = c0; c < c1; c++) {
                dw[c] += (x[c] - m) * r * d[c];
                db[c] += d[c];
            }
        }
    }
}

/* Both halves; dw == NULL skips the weight half (the input gradient only). */
void ops_cpu_layernorm_backward(float *dinp, float *dw, float *db, const float *dout, const float *inp,
                            const float *w, const float *mean, const float *rstd, int N, int C) {
    ops_cpu_layernorm_backward_input(dinp, dout, inp, w, mean, rstd, N, C);
    if (dw != NULL) ops_cpu_layernorm_backward_weight(dw, db, dout, inp, mean, rstd, N, C);
}

/* ------------------------------------------------------------------------------------------ */
/* matmul                                                                                     */

void ops_cpu_matmul_forward(float *out, const float *inp, const float *w, const float *bias, int N,
                        int C, int OC) {
    // out (N,OC) = inp (N,C) @ w(OC,C)ᵀ
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, N, OC, C, 1.0f, inp, C, w, C, 0.0f, out,
                OC);
    if (bias != NULL) {
#pragma omp parallel for if ((size_t)N * OC >= OPS_PAR_MIN) schedule(static)
        for (int n = 0; n < N; n++) {
            float *o = out + (size_t)n * OC;
#pragma omp simd
            for (int o_ = 0; o_ < OC; o_++) {
                o[o_] += bias[o_];
            }
        }
    }
}

void ops_cpu_matmul_backward_input(float *dinp, const float *dout, const float *w, int N, int C,
                                   int OC) {
    // dinp (N,C) += dout (N,OC) @ w (OC,C)
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, N, C, OC, 1.0f, dout, OC, w, C, 1.0f,
                dinp, C);
}

void ops_cpu_matmul_backward_weight(float *dw, float *dbias, const float *dout, const float *inp,
                                    int N, int C, int OC) {
    // dw (OC,C) += dout(N,OC)ᵀ @ inp (N,C)
    if (dw != NULL)
        cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, OC, C, N, 1.0f, dout, OC, inp, C,
                    1.0f, dw, C);
    if (dbias != NULL) {
        /* column sums, parallel over blocks of OC: every row read contiguously per block */
        const int nblk = (OC + OPS_COL_BLOCK - 1) / OPS_COL_BLOCK;
#pragma omp parallel for if ((size_t)N * OC >= OPS_PAR_MIN && nblk > 1) schedule(static)
        for (int blk = 0; blk < nblk; blk++) {
            const int o0 = blk * OPS_COL_BLOCK;
            const int o1 = o0 + OPS_COL_BLOCK < OC ? o0 + OPS_COL_BLOCK : OC;
            for (int n = 0; n < N; n++) {
                const float *d = dout + (size_t)n * OC;
#pragma omp simd
                for (int o = o0; o < o1; o++) {
                    dbias[o] += d[o];
                }
            }
        }
    }
}

void ops_cpu_matmul_backward(float *dinp, float *dw, float *dbias, const float *dout, const float *inp,
                         const float *w, int N, int C, int OC) {
    if (dinp != NULL) ops_cpu_matmul_backward_input(dinp, dout, w, N, C, OC);
    ops_cpu_matmul_backward_weight(dw, dbias, dout, inp, N, C, OC);
}

/* ------------------------------------------------------------------------------------------ */
/* attention                                                                                  */

void ops_cpu_attention_forward(float *out, float *att, const float *qkv, int B, int T, int NH,
                           int HS) {
    const int C = NH * HS;
    const int C3 = 3 * C;
    const float scale = 1.0f / sqrtf((float)HS);
#pragma omp parallel for collapse(2) if (B * NH > 1) schedule(static)
    for (int b = 0; b < B; b++) {
        for (int h = 0; h < NH; h++) {
            const float *q = qkv + (size_t)b * T * C3 + (size_t)h * HS; // (T,HS) row stride 3C
            const float *k = q + C;                                      // (T,HS) row stride 3C
            const float *v = q + 2 * C;                                  // (T,HS) row stride 3C
            float *p = att + ((size_t)b * NH + h) * T * T;              // (T,T)
            float *o = out + (size_t)b * T * C + (size_t)h * HS;        // (T,HS) row stride C
            // S = scale * Q Kᵀ (full square; the upper triangle is overwritten by the mask)
            cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, T, T, HS, scale, q, C3, k, C3,
                        0.0f, p, T);
            for (int i = 0; i < T; i++) {
                float *row = p + (size_t)i * T;
                float mx = row[0];
#pragma omp simd reduction(max : mx)
                for (int j = 1; j <= i; j++) {
                    mx = row[j] > mx ? row[j] : mx;
                }
                float sum = 0.0f;
#pragma omp simd reduction(+ : sum)
                for (int j = 0; j <= i; j++) {
                    row[j] = fast_expf(row[j] - mx);
                    sum += row[j];
                }
                const float inv = 1.0f / sum; /* sum >= 1: the max entry contributes exp(0) */
#pragma omp simd
                for (int j = 0; j <= i; j++) {
                    row[j] *= inv;
                }
                for (int j = i + 1; j < T; j++) {
                    row[j] = 0.0f; /* causal mask: exactly zero */
                }
            }
            // O = P V
            cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, T, HS, T, 1.0f, p, T, v, C3,
                        0.0f, o, C);
        }
    }
}

void ops_cpu_attention_backward(float *dqkv, float *datt, const float *dout, const float *qkv,
                            const float *att, int B, int T, int NH, int HS) {
    const int C = NH * HS;
    const int C3 = 3 * C;
    const float scale = 1.0f / sqrtf((float)HS);
#pragma omp parallel for collapse(2) if (B * NH > 1) schedule(static)
    for (int b = 0; b < B; b++) {
        for (int h = 0; h < NH; h++) {
            const size_t qoff = (size_t)b * T * C3 + (size_t)h * HS;
            const float *q = qkv + qoff, *k = q + C, *v = q + 2 * C;   // (T,HS) stride 3C
            float *dq = dqkv + qoff, *dk = dq + C, *dv = dq + 2 * C;   // (T,HS) stride 3C
            const float *p = att + ((size_t)b * NH + h) * T * T;      // (T,T)
            float *ds = datt + ((size_t)b * NH + h) * T * T;          // (T,T) scratch
            const float *dob = dout + (size_t)b * T * C + (size_t)h * HS; // (T,HS) stride C
            // dP = dO Vᵀ
            cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, T, T, HS, 1.0f, dob, C, v, C3,
                        0.0f, ds, T);
            // dV += Pᵀ dO
            cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, T, HS, T, 1.0f, p, T, dob, C,
                        1.0f, dv, C3);
            // dS = P ⊙ (dP − rowsum(dP ⊙ P)), softmax backward; masked entries are 0
            for (int i = 0; i < T; i++) {
                const float *prow = p + (size_t)i * T;
                float *drow = ds + (size_t)i * T;
                float dot = 0.0f;
#pragma omp simd reduction(+ : dot)
                for (int j = 0; j <= i; j++) {
                    dot += prow[j] * drow[j];
                }
#pragma omp simd
                for (int j = 0; j <= i; j++) {
                    drow[j] = prow[j] * (drow[j] - dot);
                }
                for (int j = i + 1; j < T; j++) {
                    drow[j] = 0.0f;
                }
            }
            // dQ += scale dS K ; dK += scale dSᵀ Q
            cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, T, HS, T, scale, ds, T, k, C3,
                        1.0f, dq, C3);
            cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, T, HS, T, scale, ds, T, q, C3,
                        1.0f, dk, C3);
        }
    }
}

void ops_cpu_attention_decode(float *out, const float *q, const float *kcache, const float *vcache,
                          int t, int NH, int HS, float *scratch) {
    mtCheck(t >= 0 && NH > 0 && HS > 0, "ops_attention_decode: need t >= 0, NH > 0, HS > 0");
    const int C = NH * HS;
    const int L = t + 1;
    const float scale = 1.0f / sqrtf((float)HS);
    /* Heads run one after another: scratch holds one head's (t+1) scores. */
    for (int h = 0; h < NH; h++) {
        const float *qh = q + (size_t)h * HS;
        // scores (L) = scale * K_h (L,HS, stride C) @ q_h (HS)
        cblas_sgemv(CblasRowMajor, CblasNoTrans, L, HS, scale, kcache + (size_t)h * HS, C, qh, 1,
                    0.0f, scratch, 1);
        float mx = scratch[0];
        for (int j = 1; j < L; j++) {
            mx = scratch[j] > mx ? scratch[j] : mx;
        }
        float sum = 0.0f;
        for (int j = 0; j < L; j++) {
            scratch[j] = expf(scratch[j] - mx);
            sum += scratch[j];
        }
        // out_h (HS) = V_h(L,HS)ᵀ @ p (L) / sum
        cblas_sgemv(CblasRowMajor, CblasTrans, L, HS, 1.0f / sum, vcache + (size_t)h * HS, C,
                    scratch, 1, 0.0f, out + (size_t)h * HS, 1);
    }
}

/* ------------------------------------------------------------------------------------------ */
/* element-wise                                                                               */

#define GELU_SCALE 0.7978845608028654f /* sqrt(2/pi) */
#define GELU_A 0.044715f

/* GELU(x) = 0.5 x (1 + tanh u), u = sqrt(2/pi) (x + 0.044715 x³)  (Hendrycks & Gimpel 2016).
 * Computed through the identity 0.5 (1 + tanh u) = σ(2u) = 1 / (1 + e^(−2u)) so the loop needs
 * only fast_expf and vectorises. For x < ~−10, e^(−2u) = +inf and σ = 0: output and gradient
 * are exactly 0, as tanh's saturation gives in exact arithmetic. */
void ops_cpu_gelu_forward(float *out, const float *inp, size_t n) {
#pragma omp parallel for simd if (n >= OPS_PAR_MIN) schedule(static)
    for (size_t i = 0; i < n; i++) {
        const float x = inp[i];
        const float u = GELU_SCALE * (x + GELU_A * x * x * x);
        out[i] = x / (1.0f + fast_expf(-2.0f * u));
    }
}

void ops_cpu_gelu_backward(float *dinp, const float *inp, const float *dout, size_t n) {
    /* d/dx 0.5 x (1 + tanh u) = 0.5 (1 + tanh u) + 0.5 x (1 − tanh² u) u'(x),
     * u'(x) = sqrt(2/pi) (1 + 3·0.044715 x²). With σ = σ(2u): 0.5 (1 + tanh u) = σ and
     * 1 − tanh² u = 4 σ (1 − σ), so gelu'(x) = σ + 2 x σ (1 − σ) u'(x). */
#pragma omp parallel for simd if (n >= OPS_PAR_MIN) schedule(static)
    for (size_t i = 0; i < n; i++) {
        const float x = inp[i];
        const float u = GELU_SCALE * (x + GELU_A * x * x * x);
        const float sg = 1.0f / (1.0f + fast_expf(-2.0f * u));
        const float du = GELU_SCALE * (1.0f + 3.0f * GELU_A * x * x);
        dinp[i] += (sg + 2.0f * x * sg * (1.0f - sg) * du) * dout[i];
    }
}

void ops_cpu_residual_forward(float *out, const float *a, const float *b, size_t n) {
#pragma omp parallel for simd if (n >= OPS_PAR_MIN) schedule(static)
    for (size_t i = 0; i < n; i++) {
        out[i] = a[i] + b[i];
    }
}

void ops_cpu_add_inplace(float *y, const float *x, size_t n) {
#pragma omp parallel for simd if (n >= OPS_PAR_MIN) schedule(static)
    for (size_t i = 0; i < n; i++) {
        y[i] += x[i];
    }
}

/* ------------------------------------------------------------------------------------------ */
/* loss                                                                                       */

double ops_cpu_softmax_crossentropy(float *logits, float *losses, const int *targets, int N, int V,
                                float dloss) {
    /* Validate first, on the calling thread: an id outside the vocabulary means the data and the
     * model disagree about V — a user error, reported once and clearly. */
    for (int n = 0; n < N; n++) {
        if (targets[n] < -1 || targets[n] >= V) {
            mt_fail("target token id %d at row %d is outside the vocabulary [0, %d) "
                    "(do the data shards and the model's vocab_size match?)",
                    targets[n], n, V);
        }
    }
    double total = 0.0;
#pragma omp parallel for if ((size_t)N * V >= OPS_PAR_MIN) schedule(static) reduction(+ : total)
    for (int n = 0; n < N; n++) {
        float *row = logits + (size_t)n * V;               // (V)
        const int tgt = targets[n];
        float mx = row[0];
#pragma omp simd reduction(max : mx)
        for (int i = 1; i < V; i++) {
            mx = row[i] > mx ? row[i] : mx;
        }
        const float zt = tgt >= 0 ? row[tgt] - mx : 0.0f;
        /* Σ exp in fp32 over blocks of 1024 (a float simd reduction vectorises, a double one does
         * not), blocks summed in double: error stays at fp32 rounding for any V. */
        double sum = 0.0;
        for (int i0 = 0; i0 < V; i0 += 1024) {
            const int i1 = i0 + 1024 < V ? i0 + 1024 : V;
            float bsum = 0.0f;
#pragma omp simd reduction(+ : bsum)
            for (int i = i0; i < i1; i++) {
                const float e = fast_expf(row[i] - mx);
                row[i] = e;
                bsum += e;
            }
            sum += bsum;
        }
        /* loss = -log softmax[tgt] = log Σ exp(z - max) − (z_tgt − max) */
        const double loss = tgt >= 0 ? log(sum) - (double)zt : 0.0;
        losses[n] = (float)loss;
        total += loss;
        const float inv = (float)(1.0 / sum);
        if (dloss == 0.0f) {
#pragma omp simd
            for (int i = 0; i < V; i++) {
                row[i] *= inv; /* eval: leave the probabilities */
            }
        } else if (tgt < 0) {
#pragma omp simd
            for (int i = 0; i < V; i++) {
                row[i] = 0.0f; /* ignored row: no gradient */
            }
        } else {
            const float sc = inv * dloss;
#pragma omp simd
            for (int i = 0; i < V; i++) {
                row[i] = row[i] * sc;
            }
            row[tgt] -= dloss;
        }
    }
    return total;
}

/* ------------------------------------------------------------------------------------------ */
/* optimizer helpers                                                                          */

double ops_cpu_sumsq(const float *x, size_t n) {
    double acc = 0.0;
#pragma omp parallel for simd if (n >= OPS_PAR_MIN) schedule(static) reduction(+ : acc)
    for (size_t i = 0; i < n; i++) {
        const double v = x[i];
        acc += v * v;
    }
    return acc;
}

void ops_cpu_scale(float *x, size_t n, float s) {
#pragma omp parallel for simd if (n >= OPS_PAR_MIN) schedule(static)
    for (size_t i = 0; i < n; i++) {
        x[i] *= s;
    }
}

/* Note: sqrtf may set errno, and unless the build passes -fno-math-errno GCC will not vectorise
 * this loop (measured on a 124M-parameter step: ~0.30 s scalar vs ~0.12 s vectorised, the loop
 * being memory-bound once vectorised). The function attribute optimize("no-math-errno") does not
 * take effect in GCC 12, so the flag belongs in CFLAGS. */
void ops_cpu_adamw(float *p, const float *g, float *m, float *v, size_t n, float lr, float b1,
               float b2, float eps, float wd, int t, float grad_scale) {
    mtCheck(t >= 1, "ops_adamw: the step count t is 1-based");
    /* bias corrections in double, once per call, then applied as multipliers */
    const float inv_bc1 = (float)(1.0 / (1.0 - pow((double)b1, t)));
    const float inv_bc2 = (float)(1.0 / (1.0 - pow((double)b2, t)));
    const float one_b1 = 1.0f - b1, one_b2 = 1.0f - b2;
#pragma omp parallel for simd if (n >= OPS_PAR_MIN) schedule(static)
    for (size_t i = 0; i < n; i++) {
        const float gi = g[i] * grad_scale;
        const float mi = b1 * m[i] + one_b1 * gi;
        const float vi = b2 * v[i] + one_b2 * gi * gi;
        m[i] = mi;
        v[i] = vi;
        const float mhat = mi * inv_bc1;
        const float vhat = vi * inv_bc2;
        p[i] -= lr * (mhat / (sqrtf(vhat) + eps) + wd * p[i]);
    }
}
