/*
 * ops/ops_cuda_gemm.cu — the CUDA backend's GEMM-shaped ops: matmul forward/backward through
 * cuBLAS, causal attention on the packed qkv layout through strided-batched GEMMs plus softmax
 * kernels, one-token decode attention, and the bias kernels.
 *
 * Why it is shaped so:
 *   - gemm_rm() takes the CPU backend's row-major cblas_sgemm arguments literally and maps them
 *     to column-major cuBLAS (row-major C = op(A) op(B) is column-major Cᵀ = op(B)ᵀ op(A)ᵀ, i.e.
 *     the operands swap and the transposes stay), so every GEMM here reads like its line in
 *     ops/ops_cpu.c. Backward GEMMs pass beta = 1: the `+=` convention costs nothing.
 *   - Attention needs no copies: one strided batch over the heads of each sequence (head h of Q
 *     starts h*HS floats into a row of stride 3C), B such batches per GEMM. The att buffer the
 *     caller keeps is the probability matrix, as on the CPU.
 *   - Precision (ops_cuda_set_precision) is a property of the GEMM only: fp32 = CUBLAS_COMPUTE_32F
 *     (no tensor cores), tf32 = CUBLAS_COMPUTE_32F_FAST_TF32, bf16 = the operands rounded to bf16
 *     into scratch, fp32 accumulation and fp32 outputs. Everything stored stays fp32.
 *   - In tf32 and bf16 the forward matmul with a bias runs through cuBLASLt with the BIAS
 *     epilogue (the bias is added as the tile is written: no broadcast pass over the output);
 *     if cuBLASLt offers no algorithm for a shape, the plain path runs. fp32 keeps the plain
 *     cuBLAS path, whose parity with the CPU is the reference.
 */
#include <cublasLt.h>
#include <cuda_bf16.h>
#include <math.h>
#include <stdint.h>

#include "ops/ops_cuda_impl.cuh"

__global__ void k_to_bf16(__nv_bfloat16 *dst, const float *src, size_t n) {
    const size_t stride = (size_t)gridDim.x * blockDim.x;
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride)
        dst[i] = __float2bfloat16_rn(src[i]);
}

static const __nv_bfloat16 *to_bf16(int slot, const float *src, size_t n) {
    __nv_bfloat16 *dst = (__nv_bfloat16 *)ops_cuda_i_scratch(slot, n * sizeof(__nv_bfloat16));
    k_to_bf16<<<ops_cuda_i_grid(n, 1), OPS_CUDA_BLOCK, 0, ops_cuda_i_stream()>>>(dst, src, n);
    cudaLaunchCheck();
    return dst;
}

/* Row-major, strided-batched: C (M,N) [batch] = alpha op(A) (M,K) op(B) (K,N) + beta C, with the
 * cblas_sgemm meaning of ta/tb/lda/ldb/ldc; sA/sB/sC are the batch strides in elements. */
static void gemm_rm(int ta, int tb, int M, int N, int K, float alpha, const float *A, int lda,
                    long long sA, const float *B, int ldb, long long sB, float beta, float *C,
                    int ldc, long long sC, int batch) {
    if (M <= 0 || N <= 0 || batch <= 0) return;
    const cublasOperation_t opA = ta ? CUBLAS_OP_T : CUBLAS_OP_N;
    const cublasOperation_t opB = tb ? CUBLAS_OP_T : CUBLAS_OP_N;
    cublasHandle_t h = ops_cuda_i_cublas();
    const int prec = ops_cuda_i_precision();
    if (prec == OPS_CUDA_BF16) {
        const size_t spanA = ops_cuda_matrix_span(ta ? K : M, ta ? M : K, lda, batch, sA);
        const size_t spanB = ops_cuda_matrix_span(tb ? N : K, tb ? K : N, ldb, batch, sB);
        const __nv_bfloat16 *Ab = to_bf16(OPS_CUDA_SCRATCH_BF16A, A, spanA);
        const __nv_bfloat16 *Bb = to_bf16(OPS_CUDA_SCRATCH_BF16B, B, spanB);
        cublasCheck(cublasGemmStridedBatchedEx(h, opB, opA, N, M, K, &alpha, Bb, CUDA_R_16BF, ldb,
                                               sB, Ab, CUDA_R_16BF, lda, sA, &beta, C, CUDA_R_32F,
                                               ldc, sC, batch, CUBLAS_COMPUTE_32F,
                                               CUBLAS_GEMM_DEFAULT));
    } else {
        const cublasComputeType_t ct =
            prec == OPS_CUDA_TF32 ? CUBLAS_COMPUTE_32F_FAST_TF32 : CUBLAS_COMPUTE_32F;
        cublasCheck(cublasGemmStridedBatchedEx(h, opB, opA, N, M, K, &alpha, B, CUDA_R_32F, ldb,
                                               sB, A, CUDA_R_32F, lda, sA, &beta, C, CUDA_R_32F,
                                               ldc, sC, batch, ct, CUBLAS_GEMM_DEFAULT));
    }
}

/* ------------------------------------------------------------------------------------------ */
/* cuBLASLt: forward matmul + bias epilogue (tf32, bf16)                                       */

static cublasLtHandle_t g_lt;

/* the largest power of two (<= 256) dividing the address: the pointer's alignment in bytes */
static uint32_t align_of(const void *p) {
    uint32_t a = 256;
    while (a > 1 && ((uintptr_t)p % a) != 0) a >>= 1;
    return a;
}
static void *g_lt_ws;
static size_t g_lt_ws_bytes;

/* out (N,OC) = inp (N,C) @ w(OC,C)ᵀ + bias through cuBLASLt; 0 done, -1 no algorithm (the
 * caller falls back). Column-major view: outᵀ (OC,N) = op_T(w as (C,OC)) · inpᵀ (C,N). */
static int lt_matmul_bias(float *out, const float *inp, const float *w, const float *bias, int N,
                          int C, int OC, int prec) {
    if (g_lt == NULL) {
        cublasCheck(cublasLtCreate(&g_lt));
        int dev = 0, major = 0;
        cudaCheck(cudaGetDevice(&dev));
        cudaCheck(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, dev));
        g_lt_ws_bytes = ops_cuda_cublaslt_workspace(major);
        cudaCheck(cudaMalloc(&g_lt_ws, g_lt_ws_bytes));
    }
    const int bf = prec == OPS_CUDA_BF16;
    const cudaDataType_t ab = bf ? CUDA_R_16BF : CUDA_R_32F;
    const void *A = w, *B = inp;
    if (bf) {
        A = to_bf16(OPS_CUDA_SCRATCH_BF16A, w, (size_t)OC * C);
        B = to_bf16(OPS_CUDA_SCRATCH_BF16B, inp, (size_t)N * C);
    }
    cublasLtMatmulDesc_t op = NULL;
    cublasLtMatrixLayout_t la = NULL, lb = NULL, lc = NULL;
    cublasLtMatmulPreference_t pref = NULL;
    const cublasComputeType_t ct = bf ? CUBLAS_COMPUTE_32F : CUBLAS_COMPUTE_32F_FAST_TF32;
    const cublasOperation_t tA = CUBLAS_OP_T, tB = CUBLAS_OP_N;
    const cublasLtEpilogue_t epi = CUBLASLT_EPILOGUE_BIAS;
    cublasCheck(cublasLtMatmulDescCreate(&op, ct, CUDA_R_32F));
    cublasCheck(cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_TRANSA, &tA, sizeof tA));
    cublasCheck(cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_TRANSB, &tB, sizeof tB));
    cublasCheck(cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_EPILOGUE, &epi, sizeof epi));
    cublasCheck(cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &bias, sizeof bias));
    cublasCheck(cublasLtMatrixLayoutCreate(&la, ab, C, OC, C));   /* w as (C,OC), transposed */
    cublasCheck(cublasLtMatrixLayoutCreate(&lb, ab, C, N, C));    /* inpᵀ (C,N) */
    cublasCheck(cublasLtMatrixLayoutCreate(&lc, CUDA_R_32F, OC, N, OC)); /* outᵀ (OC,N) */
    cublasCheck(cublasLtMatmulPreferenceCreate(&pref));
    cublasCheck(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES,
                                                     &g_lt_ws_bytes, sizeof g_lt_ws_bytes));
    /* parameters sit at arbitrary float offsets of one allocation: tell the heuristic the real
     * alignment of every pointer so it offers only kernels that accept it */
    const uint32_t alA = align_of(A), alB = align_of(B), alC = align_of(out), alBias = align_of(bias);
    cublasCheck(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, &alA, sizeof alA));
    cublasCheck(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES, &alB, sizeof alB));
    cublasCheck(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, &alC, sizeof alC));
    cublasCheck(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES, &alC, sizeof alC));
    (void)alBias; /* no preference attribute for the bias; a refusal below falls back */
    cublasLtMatmulHeuristicResult_t heur;
    int found = 0;
    cublasStatus_t st = cublasLtMatmulAlgoGetHeuristic(g_lt, op, la, lb, lc, lc, pref, 1, &heur, &found);
    int rc = -1;
    if (st == CUBLAS_STATUS_SUCCESS && found > 0) {
        const float one = 1.0f, zero = 0.0f;
        st = cublasLtMatmul(g_lt, op, &one, A, la, B, lb, &zero, out, lc, out, lc, &heur.algo,
                            g_lt_ws, g_lt_ws_bytes, ops_cuda_i_stream());
        rc = st == CUBLAS_STATUS_SUCCESS ? 0 : -1; /* refused (e.g. bias alignment): plain path */
    }
    cublasLtMatmulPreferenceDestroy(pref);
    cublasLtMatrixLayoutDestroy(la);
    cublasLtMatrixLayoutDestroy(lb);
    cublasLtMatrixLayoutDestroy(lc);
    cublasLtMatmulDescDestroy(op);
    return rc;
}

/* ------------------------------------------------------------------------------------------ */
/* bias and matmul                                                                            */

/* out[n, o] = (accumulate ? out[n, o] : 0) + bias[o] */
__global__ void k_bias_rows(float *out, const float *bias, size_t n, int OC, int accumulate) {
    const size_t stride = (size_t)gridDim.x * blockDim.x;
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride) {
        const float b = bias[i % OC];
        out[i] = accumulate ? out[i] + b : b;
    }
}

static void bias_rows(float *out, const float *bias, int N, int OC, int accumulate) {
    const size_t n = (size_t)N * OC;
    if (n == 0) return;
    k_bias_rows<<<ops_cuda_i_grid(n, 1), OPS_CUDA_BLOCK, 0, ops_cuda_i_stream()>>>(out, bias, n, OC, accumulate);
    cudaLaunchCheck();
}

extern "C" void ops_cuda_bias_add(float *out, const float *bias, int N, int OC) {
    bias_rows(out, bias, N, OC, 1);
}

extern "C" void ops_cuda_matmul_forward(float *out, const float *inp, const float *w,
                                        const float *bias, int N, int C, int OC) {
    // out (N,OC) = inp (N,C) @ w(OC,C)ᵀ [+ bias]: the bias goes in first and the GEMM adds to it
    // (beta = 1), so the result is the CPU's (Σ) + b with one rounding of the sum
    const int prec = ops_cuda_i_precision();
    if (bias != NULL && prec != OPS_CUDA_FP32 && N > 0 &&
        lt_matmul_bias(out, inp, w, bias, N, C, OC, prec) == 0)
        return;
    if (bias != NULL) bias_rows(out, bias, N, OC, 0);
    gemm_rm(0, 1, N, OC, C, 1.0f, inp, C, 0, w, C, 0, bias != NULL ? 1.0f : 0.0f, out, OC, 0, 1);
}

extern "C" void ops_cuda_matmul_backward_input(float *dinp, const float *dout, const float *w,
                                               int N, int C, int OC) {
    // dinp (N,C) += dout (N,OC) @ w (OC,C)
    gemm_rm(0, 0, N, C, OC, 1.0f, dout, OC, 0, w, C, 0, 1.0f, dinp, C, 0, 1);
}

extern "C" void ops_cuda_matmul_backward_weight(float *dw, float *dbias, const float *dout,
                                                const float *inp, int N, int C, int OC) {
    // dw (OC,C) += dout(N,OC)ᵀ @ inp (N,C)
    if (dw != NULL) gemm_rm(1, 0, OC, C, N, 1.0f, dout, OC, 0, inp, C, 0, 1.0f, dw, C, 0, 1);
    if (dbias != NULL) ops_cuda_i_colsum_add(dbias, dout, N, OC);
}

extern "C" void ops_cuda_matmul_backward(float *dinp, float *dw, float *dbias, const float *dout,
                                         const float *inp, const float *w, int N, int C, int OC) {
    if (dinp != NULL) ops_cuda_matmul_backward_input(dinp, dout, w, N, C, OC);
    ops_cuda_matmul_backward_weight(dw, dbias, dout, inp, N, C, OC);
}

/* ------------------------------------------------------------------------------------------ */
/* attention                                                                                  */

/* One warp per row of (B*NH*T, T): causal softmax in place (entries j > i set to 0). */
__global__ void k_causal_softmax(float *att, int T, size_t nrows) {
    const size_t row = (size_t)blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32;
    const int lane = threadIdx.x % 32;
    if (row >= nrows) return;
    const int i = (int)(row % T);
    float *p = att + row * T;
    float mx = -INFINITY;
    for (int j = lane; j <= i; j += 32) mx = fmaxf(mx, p[j]);
    mx = ops_cuda_i_warp_max(mx);
    float s = 0.0f;
    for (int j = lane; j <= i; j += 32) {
        const float e = expf(p[j] - mx);
        p[j] = e;
        s += e;
    }
    const float inv = 1.0f / ops_cuda_i_warp_sum(s);
    for (int j = lane; j < T; j += 32) p[j] = j <= i ? p[j] * inv : 0.0f;
}

/* dS = P ⊙ (dP − Σ_j dP ⊙ P) per row, in place in ds; 0 above the diagonal. */
__global__ void k_causal_softmax_bwd(float *ds, const float *att, int T, size_t nrows) {
    const size_t row = (size_t)blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32;
    const int lane = threadIdx.x % 32;
    if (row >= nrows) return;
    const int i = (int)(row % T);
    const float *p = att + row * T;
    float *d = ds + row * T;
    float dot = 0.0f;
    for (int j = lane; j <= i; j += 32) dot += p[j] * d[j];
    dot = ops_cuda_i_warp_sum(dot);
    for (int j = lane; j < T; j += 32) d[j] = j <= i ? p[j] * (d[j] - dot) : 0.0f;
}

extern "C" void ops_cuda_attention_forward(float *out, float *att, const float *qkv, int B, int T,
                                           int NH, int HS) {
    const int C = NH * HS, C3 = 3 * C;
    const float scale = 1.0f / sqrtf((float)HS);
    const long long TT = (long long)T * T;
    for (int b = 0; b < B; b++) {
        const float *q = qkv + (size_t)b * T * C3, *k = q + C;  // (T,HS) per head, stride 3C
        float *p = att + (size_t)b * NH * TT;                     // (NH,T,T)
        // S = scale * Q Kᵀ, batched over heads
        gemm_rm(0, 1, T, T, HS, scale, q, C3, HS, k, C3, HS, 0.0f, p, T, TT, NH);
    }
    const size_t nrows = (size_t)B * NH * T;
    if (nrows == 0) return;
    k_causal_softmax<<<ops_cuda_warp_row_blocks(nrows), OPS_CUDA_BLOCK, 0, ops_cuda_i_stream()>>>(att, T, nrows);
    cudaLaunchCheck();
    for (int b = 0; b < B; b++) {
        const float *v = qkv + (size_t)b * T * C3 + 2 * C;
        const float *p = att + (size_t)b * NH * TT;
        float *o = out + (size_t)b * T * C;                       // (T,HS) per head, stride C
        // O = P V
        gemm_rm(0, 0, T, HS, T, 1.0f, p, T, TT, v, C3, HS, 0.0f, o, C, HS, NH);
    }
}

extern "C" void ops_cuda_attention_backward(float *dqkv, float *datt, const float *dout,
                                            const float *qkv, const float *att, int B, int T,
                                            int NH, int HS) {
    const int C = NH * HS, C3 = 3 * C;
    const float scale = 1.0f / sqrtf((float)HS);
    const long long TT = (long long)T * T;
    for (int b = 0; b < B; b++) {
        const float *v = qkv + (size_t)b * T * C3 + 2 * C;
        float *dv = dqkv + (size_t)b * T * C3 + 2 * C;
        const float *p = att + (size_t)b * NH * TT;
        float *ds = datt + (size_t)b * NH * TT;
        const float *dob = dout + (size_t)b * T * C;
        // dP = dO Vᵀ
        gemm_rm(0, 1, T, T, HS, 1.0f, dob, C, HS, v, C3, HS, 0.0f, ds, T, TT, NH);
        // dV += Pᵀ dO
        gemm_rm(1, 0, T, HS, T, 1.0f, p, T, TT, dob, C, HS, 1.0f, dv, C3, HS, NH);
    }
    const size_t nrows = (size_t)B * NH * T;
    if (nrows == 0) return;
    k_causal_softmax_bwd<<<ops_cuda_warp_row_blocks(nrows), OPS_CUDA_BLOCK, 0, ops_cuda_i_stream()>>>(datt, att, T, nrows);
    cudaLaunchCheck();
    for (int b = 0; b < B; b++) {
        const float *q = qkv + (size_t)b * T * C3, *k = q + C;
        float *dq = dqkv + (size_t)b * T * C3, *dk = dq + C;
        const float *ds = datt + (size_t)b * NH * TT;
        // dQ += scale dS K ; dK += scale dSᵀ Q
        gemm_rm(0, 0, T, HS, T, scale, ds, T, TT, k, C3, HS, 1.0f, dq, C3, HS, NH);
        gemm_rm(1, 0, T, HS, T, scale, ds, T, TT, q, C3, HS, 1.0f, dk, C3, HS, NH);
    }
}

/* One block per head: scores (t+1) into sc, softmax, then out_h = Σ_j p_j V_j / Σ_j p_j. */
__global__ void k_attention_decode(float *out, const float *q, const float *kc, const float *vc,
                                   int t, int NH, int HS, float *scratch) {
    const int h = blockIdx.x, C = NH * HS, L = t + 1;
    const float scale = 1.0f / sqrtf((float)HS);
    const float *qh = q + (size_t)h * HS;
    float *sc = scratch + (size_t)h * L;
    for (int j = threadIdx.x; j < L; j += blockDim.x) {
        const float *kj = kc + (size_t)j * C + (size_t)h * HS;
        float s = 0.0f;
        for (int d = 0; d < HS; d++) s += kj[d] * qh[d];
        sc[j] = scale * s;
    }
    __syncthreads();
    float mx = -INFINITY;
    for (int j = threadIdx.x; j < L; j += blockDim.x) mx = fmaxf(mx, sc[j]);
    mx = ops_cuda_i_block_max(mx);
    float s = 0.0f;
    for (int j = threadIdx.x; j < L; j += blockDim.x) {
        const float e = expf(sc[j] - mx);
        sc[j] = e;
        s += e;
    }
    const float inv = 1.0f / ops_cuda_i_block_sum(s); /* the block sum synchronises: sc is ready */
    for (int d = threadIdx.x; d < HS; d += blockDim.x) {
        float acc = 0.0f;
        for (int j = 0; j < L; j++) acc += sc[j] * vc[(size_t)j * C + (size_t)h * HS + d];
        out[(size_t)h * HS + d] = inv * acc;
    }
}

extern "C" void ops_cuda_attention_decode(float *out, const float *q, const float *kcache,
                                          const float *vcache, int t, int NH, int HS,
                                          float *scratch) {
    (void)scratch; /* heads run in parallel: the backend's own NH*(t+1) scratch is used */
    mtCheck(t >= 0 && NH > 0 && HS > 0, "ops_cuda_attention_decode: need t >= 0, NH > 0, HS > 0");
    float *sc = (float *)ops_cuda_i_scratch(OPS_CUDA_SCRATCH_OP, ops_cuda_ws_decode(t, NH));
    k_attention_decode<<<NH, OPS_CUDA_BLOCK, 0, ops_cuda_i_stream()>>>(out, q, kcache, vcache, t, NH, HS, sc);
    cudaLaunchCheck();
}
