/*
 * ops/ops_cuda.cu — the CUDA backend's runtime (device selection, stream, cuBLAS handle,
 * memory API, scratch) and its non-GEMM kernels: element-wise (GELU, residual, add, scale),
 * LayerNorm, the encoder, fused softmax + cross-entropy, sum of squares and AdamW.
 *
 * Why it is shaped so (llm.c's CUDA path, trimmed to fp32 and to ops/ops.h's contract):
 *   - Every kernel computes the CPU backend's formula (ops/ops_cpu.c) in the same fp32 steps,
 *     with IEEE division and square root (no --use_fast_math), so parity is at rounding level.
 *   - Element-wise kernels are grid-stride loops capped at OPS_CUDA_MAX_BLOCKS blocks; when
 *     pointers are 16-byte aligned and n % 4 == 0 they move float4 (128-bit) per access.
 *   - Row kernels (LayerNorm, loss) give one warp (LayerNorm) or one block (softmax over V) to a
 *     row; reductions are warp shuffles then shared memory, in a fixed order.
 *   - No atomics on values: parameter-gradient reductions over rows (LayerNorm dw/db, matmul
 *     dbias, encoder dwpe) are two-stage column sums whose chunking depends on N only, and the
 *     token-embedding gradient is bucketed by token id. Reruns are bit-identical.
 * Grid/block/workspace arithmetic lives in ops/ops_cuda_launch.c (host unit-tested).
 */
#include <cuda_runtime.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ops/ops_cuda_impl.cuh"

/* ------------------------------------------------------------------------------------------ */
/* runtime                                                                                    */

static struct {
    int ready;
    int device;
    char name[256];
    cudaStream_t stream;
    cublasHandle_t cublas;
    int precision;
    void *scratch[OPS_CUDA_SCRATCH_N];
    size_t scratch_bytes[OPS_CUDA_SCRATCH_N];
    void *pinned;
} g_cuda;

void ops_cuda_i_fail(const char *what, const char *call, const char *file, int line) {
    fprintf(stderr,
            "minitrain: error: CUDA: %s\n  in %s\n  at %s:%d\n"
            "  hint: out of memory? reduce batch_size or seq_len; otherwise check nvidia-smi "
            "and the driver (CUDA 13 needs driver >= 580)\n",
            what, call, file, line);
    fflush(stderr);
    exit(MT_EXIT_ERROR);
}

static void require_ready(void) {
    if (!g_cuda.ready) {
        fprintf(stderr, "minitrain: error: a CUDA op was called before ops_cuda_init\n");
        exit(MT_EXIT_ERROR);
    }
}

cudaStream_t ops_cuda_i_stream(void) { return g_cuda.stream; }
cublasHandle_t ops_cuda_i_cublas(void) { return g_cuda.cublas; }
int ops_cuda_i_precision(void) { return g_cuda.precision; }

void *ops_cuda_i_scratch(int slot, size_t bytes) {
    require_ready();
    if (bytes > g_cuda.scratch_bytes[slot]) {
        if (g_cuda.scratch[slot] != NULL) cudaCheck(cudaFree(g_cuda.scratch[slot]));
        g_cuda.scratch[slot] = NULL;
        const size_t want = ops_cuda_align256(bytes + bytes / 4); /* 25% headroom: fewer regrows */
        cudaCheck(cudaMalloc(&g_cuda.scratch[slot], want));
        g_cuda.scratch_bytes[slot] = want;
    }
    return g_cuda.scratch[slot];
}

void *ops_cuda_i_pinned(void) { return g_cuda.pinned; }

extern "C" int ops_cuda_init(int local_rank, char *err, size_t errlen) {
    if (g_cuda.ready) return 0;
    int ndev = 0;
    cudaError_t e = cudaGetDeviceCount(&ndev);
    if (e != cudaSuccess || ndev == 0) {
        mt_errf(err, errlen, "no CUDA device (%s)",
                e != cudaSuccess ? cudaGetErrorString(e) : "device count is 0");
        return -1;
    }
    g_cuda.device = (local_rank < 0 ? 0 : local_rank) % ndev;
    cudaDeviceProp prop;
    if ((e = cudaSetDevice(g_cuda.device)) != cudaSuccess ||
        (e = cudaGetDeviceProperties(&prop, g_cuda.device)) != cudaSuccess ||
        (e = cudaStreamCreateWithFlags(&g_cuda.stream, cudaStreamNonBlocking)) != cudaSuccess ||
        (e = cudaMallocHost(&g_cuda.pinned, 64)) != cudaSuccess) {
        mt_errf(err, errlen, "CUDA device %d: %s", g_cuda.device, cudaGetErrorString(e));
        return -1;
    }
    snprintf(g_cuda.name, sizeof g_cuda.name, "%s", prop.name);
    cublasStatus_t s = cublasCreate(&g_cuda.cublas);
    if (s == CUBLAS_STATUS_SUCCESS) s = cublasSetStream(g_cuda.cublas, g_cuda.stream);
    if (s != CUBLAS_STATUS_SUCCESS) {
        mt_errf(err, errlen, "cuBLAS: %s", cublasGetStatusString(s));
        return -1;
    }
    g_cuda.precision = OPS_CUDA_FP32;
    const char *env = getenv("MINITRAIN_PRECISION");
    if (env != NULL && *env != '\0') {
        const int v = ops_cuda_parse_precision(env);
        if (v < 0) {
            mt_errf(err, errlen, "MINITRAIN_PRECISION must be fp32, tf32 or bf16 (got '%s')", env);
            return -1;
        }
        g_cuda.precision = v;
    }
    g_cuda.ready = 1;
    return 0;
}

extern "C" const char *ops_cuda_device_name(void) { return g_cuda.ready ? g_cuda.name : ""; }

extern "C" double ops_cuda_device_memory(void) {
    size_t free_b = 0, total_b = 0;
    if (!g_cuda.ready || cudaMemGetInfo(&free_b, &total_b) != cudaSuccess) {
        (void)cudaGetLastError(); /* a failed query is not a sticky error for the next call */
        return 0;
    }
    return (double)total_b;
}

extern "C" void *ops_cuda_alloc(size_t bytes) {
    require_ready();
    if (bytes == 0) bytes = 256; /* a valid pointer for an empty tensor, as the cpu backend */
    void *p = NULL;
    if (cudaMalloc(&p, bytes) != cudaSuccess) {
        (void)cudaGetLastError(); /* clear the sticky-free out-of-memory error */
        return NULL;
    }
    cudaCheck(cudaMemsetAsync(p, 0, bytes, g_cuda.stream));
    cudaCheck(cudaStreamSynchronize(g_cuda.stream));
    return p;
}

extern "C" void ops_cuda_free(void *p) {
    if (p != NULL) cudaCheck(cudaFree(p));
}

extern "C" void ops_cuda_zero(void *p, size_t bytes) {
    if (bytes > 0) cudaCheck(cudaMemsetAsync(p, 0, bytes, g_cuda.stream));
}

extern "C" void ops_cuda_copy_h2d(void *dst, const void *src, size_t bytes) {
    if (bytes == 0) return;
    cudaCheck(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyHostToDevice, g_cuda.stream));
    cudaCheck(cudaStreamSynchronize(g_cuda.stream));
}

extern "C" void ops_cuda_copy_d2h(void *dst, const void *src, size_t bytes) {
    if (bytes == 0) return;
    cudaCheck(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToHost, g_cuda.stream));
    cudaCheck(cudaStreamSynchronize(g_cuda.stream));
}

extern "C" void ops_cuda_copy_d2d(void *dst, const void *src, size_t bytes) {
    if (bytes > 0) cudaCheck(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice, g_cuda.stream));
}

extern "C" void ops_cuda_sync(void) {
    require_ready();
    cudaCheck(cudaStreamSynchronize(g_cuda.stream));
}

extern "C" void *ops_cuda_stream(void) { return (void *)g_cuda.stream; }

extern "C" int ops_cuda_set_precision(const char *p) {
    const int v = ops_cuda_parse_precision(p);
    if (v < 0) return -1;
    g_cuda.precision = v;
    return 0;
}

/* ------------------------------------------------------------------------------------------ */
/* element-wise: a functor per op, one kernel template with a scalar and a float4 path          */

template <class Op> __global__ void k_map(Op op, size_t n, int vec4) {
    const size_t stride = (size_t)gridDim.x * blockDim.x;
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (vec4) {
        for (; i < n / 4; i += stride) op.vec(i);
    } else {
        for (; i < n; i += stride) op.one(i);
    }
}

template <class Op> static void launch_map(const Op &op, size_t n, int vec4) {
    if (n == 0) return;
    k_map<<<ops_cuda_i_grid(n, vec4 ? 4 : 1), OPS_CUDA_BLOCK, 0, ops_cuda_i_stream()>>>(op, n, vec4);
    cudaLaunchCheck();
}

#define GELU_SCALE 0.7978845608028654f /* sqrt(2/pi) */
#define GELU_A 0.044715f

/* GELU(x) = x σ(2u), u = sqrt(2/π)(x + 0.044715 x³): the CPU's form (ops_cpu.c). */
__device__ __forceinline__ float gelu_f(float x) {
    const float u = GELU_SCALE * (x + GELU_A * x * x * x);
    return x / (1.0f + expf(-2.0f * u));
}
__device__ __forceinline__ float gelu_df(float x) {
    const float u = GELU_SCALE * (x + GELU_A * x * x * x);
    const float sg = 1.0f / (1.0f + expf(-2.0f * u));
    const float du = GELU_SCALE * (1.0f + 3.0f * GELU_A * x * x);
    return sg + 2.0f * x * sg * (1.0f - sg) * du;
}

struct GeluFwd {
    float *out;
    const float *inp;
    __device__ void one(size_t i) const { out[i] = gelu_f(inp[i]); }
    __device__ void vec(size_t i) const {
        float4 x = ((const float4 *)inp)[i];
        ((float4 *)out)[i] = make_float4(gelu_f(x.x), gelu_f(x.y), gelu_f(x.z), gelu_f(x.w));
    }
};
struct GeluBwd {
    float *dinp;
    const float *inp, *dout;
    __device__ void one(size_t i) const { dinp[i] += gelu_df(inp[i]) * dout[i]; }
    __device__ void vec(size_t i) const {
        float4 x = ((const float4 *)inp)[i], d = ((const float4 *)dout)[i];
        float4 g = ((float4 *)dinp)[i];
        g.x += gelu_df(x.x) * d.x;
        g.y += gelu_df(x.y) * d.y;
        g.z += gelu_df(x.z) * d.z;
        g.w += gelu_df(x.w) * d.w;
        ((float4 *)dinp)[i] = g;
    }
};
struct Residual {
    float *out;
    const float *a, *b;
    __device__ void one(size_t i) const { out[i] = a[i] + b[i]; }
    __device__ void vec(size_t i) const {
        float4 x = ((const float4 *)a)[i], y = ((const float4 *)b)[i];
        ((float4 *)out)[i] = make_float4(x.x + y.x, x.y + y.y, x.z + y.z, x.w + y.w);
    }
};
struct Scale {
    float *x;
    float s;
    __device__ void one(size_t i) const { x[i] *= s; }
    __device__ void vec(size_t i) const {
        float4 v = ((float4 *)x)[i];
        ((float4 *)x)[i] = make_float4(v.x * s, v.y * s, v.z * s, v.w * s);
    }
};
struct AdamW {
    float *p, *m, *v;
    const float *g;
    float lr, b1, b2, eps, wd, inv_bc1, inv_bc2, one_b1, one_b2, grad_scale;
    __device__ void one(size_t i) const {
        const float gi = g[i] * grad_scale;
        const float mi = b1 * m[i] + one_b1 * gi;
        const float vi = b2 * v[i] + one_b2 * gi * gi;
        m[i] = mi;
        v[i] = vi;
        const float mhat = mi * inv_bc1;
        const float vhat = vi * inv_bc2;
        p[i] -= lr * (mhat / (sqrtf(vhat) + eps) + wd * p[i]);
    }
    __device__ void vec(size_t i) const {
        for (int j = 0; j < 4; j++) one(4 * i + j);
    }
};

static int al(const void *p, size_t n) { return ops_cuda_vec4_ok(p, n); }

extern "C" void ops_cuda_gelu_forward(float *out, const float *inp, size_t n) {
    launch_map(GeluFwd{out, inp}, n, al(out, n) && al(inp, n));
}
extern "C" void ops_cuda_gelu_backward(float *dinp, const float *inp, const float *dout, size_t n) {
    launch_map(GeluBwd{dinp, inp, dout}, n, al(dinp, n) && al(inp, n) && al(dout, n));
}
extern "C" void ops_cuda_residual_forward(float *out, const float *a, const float *b, size_t n) {
    launch_map(Residual{out, a, b}, n, al(out, n) && al(a, n) && al(b, n));
}
extern "C" void ops_cuda_add_inplace(float *y, const float *x, size_t n) {
    launch_map(Residual{y, y, x}, n, al(y, n) && al(x, n));
}
extern "C" void ops_cuda_scale(float *x, size_t n, float s) {
    launch_map(Scale{x, s}, n, al(x, n));
}

extern "C" void ops_cuda_adamw(float *p, const float *g, float *m, float *v, size_t n, float lr,
                               float b1, float b2, float eps, float wd, int t, float grad_scale) {
    mtCheck(t >= 1, "ops_cuda_adamw: the step count t is 1-based");
    AdamW op;
    op.p = p;
    op.m = m;
    op.v = v;
    op.g = g;
    op.lr = lr;
    op.b1 = b1;
    op.b2 = b2;
    op.eps = eps;
    op.wd = wd;
    op.inv_bc1 = (float)(1.0 / (1.0 - pow((double)b1, t))); /* as ops_cpu.c: once, in double */
    op.inv_bc2 = (float)(1.0 / (1.0 - pow((double)b2, t)));
    op.one_b1 = 1.0f - b1;
    op.one_b2 = 1.0f - b2;
    op.grad_scale = grad_scale;
    launch_map(op, n, al(p, n) && al(g, n) && al(m, n) && al(v, n));
}

/* ------------------------------------------------------------------------------------------ */
/* deterministic reductions                                                                   */

/* stage 1 of a column sum: part[chunk*ncols + c] = Σ rows of the chunk */
__global__ void k_colsum_part(float *part, const float *src, int N, int ncols, int rows) {
    const int c = blockIdx.x * blockDim.x + threadIdx.x, chunk = blockIdx.y;
    if (c >= ncols) return;
    const int n0 = chunk * rows, n1 = min(N, n0 + rows);
    float acc = 0.0f;
    for (int n = n0; n < n1; n++) acc += src[(size_t)n * ncols + c];
    part[(size_t)chunk * ncols + c] = acc;
}
/* stage 2: dst[c] += Σ_chunk part[chunk*ncols + c], chunks in order */
__global__ void k_colsum_finish(float *dst, const float *part, int chunks, int ncols) {
    const int c = blockIdx.x * blockDim.x + threadIdx.x;
    if (c >= ncols) return;
    float acc = 0.0f;
    for (int k = 0; k < chunks; k++) acc += part[(size_t)k * ncols + c];
    dst[c] += acc;
}

void ops_cuda_i_colsum_add(float *dst, const float *src, int N, int ncols) {
    if (N <= 0 || ncols <= 0) return;
    const unsigned chunks = ops_cuda_colsum_chunks(N);
    const int rows = ops_cuda_colsum_rows(N);
    float *part = (float *)ops_cuda_i_scratch(OPS_CUDA_SCRATCH_OP, ops_cuda_ws_colsum(N, ncols, 1));
    const dim3 grid((ncols + OPS_CUDA_BLOCK - 1) / OPS_CUDA_BLOCK, chunks);
    k_colsum_part<<<grid, OPS_CUDA_BLOCK, 0, ops_cuda_i_stream()>>>(part, src, N, ncols, rows);
    cudaLaunchCheck();
    k_colsum_finish<<<grid.x, OPS_CUDA_BLOCK, 0, ops_cuda_i_stream()>>>(dst, part, chunks, ncols);
    cudaLaunchCheck();
}

/* sumsq stage 1: grid of exactly ops_cuda_reduce_parts(n) blocks, each a fixed slice order */
__global__ void k_sumsq_part(double *parts, const float *x, size_t n) {
    const size_t stride = (size_t)gridDim.x * blockDim.x;
    double acc = 0.0;
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride) {
        const double v = x[i];
        acc += v * v;
    }
    acc = ops_cuda_i_block_sum(acc);
    if (threadIdx.x == 0) parts[blockIdx.x] = acc;
}
/* one block per array: out[b] = Σ parts[b*nparts .. +nparts) */
__global__ void k_sum_parts(double *out, const double *parts, int nparts) {
    double acc = 0.0;
    for (int i = threadIdx.x; i < nparts; i += blockDim.x) acc += parts[(size_t)blockIdx.x * nparts + i];
    acc = ops_cuda_i_block_sum(acc);
    if (threadIdx.x == 0) out[blockIdx.x] = acc;
}

void ops_cuda_i_sumsq_parts(double *d_parts, const float *x, size_t n) {
    k_sumsq_part<<<ops_cuda_reduce_parts(n), OPS_CUDA_BLOCK, 0, ops_cuda_i_stream()>>>(d_parts, x, n);
    cudaLaunchCheck();
}

void ops_cuda_i_sum_parts(double *out, const double *d_parts, int parts, int count) {
    if (count <= 0) return;
    double *d_out = (double *)ops_cuda_i_scratch(OPS_CUDA_SCRATCH_AUX, (size_t)count * sizeof(double));
    k_sum_parts<<<count, OPS_CUDA_BLOCK, 0, ops_cuda_i_stream()>>>(d_out, d_parts, parts);
    cudaLaunchCheck();
    ops_cuda_copy_d2h(out, d_out, (size_t)count * sizeof(double));
}

extern "C" double ops_cuda_sumsq(const float *x, size_t n) {
    if (n == 0) return 0.0;
    const unsigned parts = ops_cuda_reduce_parts(n);
    double *d_parts = (double *)ops_cuda_i_scratch(OPS_CUDA_SCRATCH_OP, ops_cuda_ws_sumsq());
    ops_cuda_i_sumsq_parts(d_parts, x, n);
    double out = 0.0;
    ops_cuda_i_sum_parts(&out, d_parts, (int)parts, 1);
    return out;
}

/* ------------------------------------------------------------------------------------------ */
/* encoder                                                                                    */

__global__ void k_encoder_fwd(float *out, const int *inp, const float *wte, const float *wpe,
                              int BT, int T, int C) {
    const size_t n = (size_t)BT * C, stride = (size_t)gridDim.x * blockDim.x;
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride) {
        const size_t bt = i / C;
        const int c = (int)(i % C), t = (int)(bt % T);
        out[i] = wte[(size_t)inp[bt] * C + c] + wpe[(size_t)t * C + c];
    }
}

extern "C" void ops_cuda_encoder_forward(float *out, const int *inp, const float *wte,
                                         const float *wpe, int B, int T, int C) {
    const size_t n = (size_t)B * T * C;
    if (n == 0) return;
    k_encoder_fwd<<<ops_cuda_i_grid(n, 1), OPS_CUDA_BLOCK, 0, ops_cuda_i_stream()>>>(out, inp, wte, wpe, B * T, T, C);
    cudaLaunchCheck();
}

/* dwte: block x = one token bucket, threads over columns; positions summed in order. */
__global__ void k_encoder_bwd_wte(float *dwte, const float *dout, const int *pos, const int *offs,
                                  const int *tok, int C) {
    const int u = blockIdx.x;
    const int c = blockIdx.y * blockDim.x + threadIdx.x;
    if (c >= C) return;
    float *g = dwte + (size_t)tok[u] * C + c;
    float acc = *g;
    for (int j = offs[u]; j < offs[u + 1]; j++) acc += dout[(size_t)pos[j] * C + c];
    *g = acc;
}
/* dwpe[t, c] += Σ_b dout[b, t, c], b ascending (the CPU's order) */
__global__ void k_encoder_bwd_wpe(float *dwpe, const float *dout, int B, int T, int C) {
    const size_t n = (size_t)T * C, stride = (size_t)gridDim.x * blockDim.x;
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride) {
        float acc = dwpe[i];
        for (int b = 0; b < B; b++) acc += dout[(size_t)b * n + i];
        dwpe[i] = acc;
    }
}

extern "C" void ops_cuda_encoder_backward(float *dwte, float *dwpe, const float *dout,
                                          const int *inp, int B, int T, int C) {
    const int BT = B * T;
    if (BT <= 0 || C <= 0) return;
    /* bucket by token on the host (BT ints each way, once per backward) */
    const size_t ws = ops_cuda_ws_encoder_backward(BT);
    int *h = (int *)mallocCheck((size_t)BT * sizeof(int) + ws);
    int *h_inp = h, *h_pos = h + BT, *h_offs = h_pos + BT;
    ops_cuda_copy_d2h(h_inp, inp, (size_t)BT * sizeof(int));
    int *h_tok = h_offs + BT + 1;
    const int U = ops_cuda_bucket_tokens(h_inp, BT, h_pos, h_offs, h_tok);
    mtCheck(U >= 0, "ops_cuda_encoder_backward: a negative token id");
    /* pack pos (BT) | offs (U+1) | tok (U) contiguously and upload */
    memmove(h_offs + U + 1, h_tok, (size_t)U * sizeof(int));
    int *d = (int *)ops_cuda_i_scratch(OPS_CUDA_SCRATCH_OP, ws);
    ops_cuda_copy_h2d(d, h_pos, (size_t)(BT + 2 * U + 1) * sizeof(int));
    free(h);
    const dim3 grid(U, (C + OPS_CUDA_BLOCK - 1) / OPS_CUDA_BLOCK);
    if (U > 0) {
        k_encoder_bwd_wte<<<grid, OPS_CUDA_BLOCK, 0, ops_cuda_i_stream()>>>(dwte, dout, d, d + BT, d + BT + U + 1, C);
        cudaLaunchCheck();
    }
    k_encoder_bwd_wpe<<<ops_cuda_i_grid((size_t)T * C, 1), OPS_CUDA_BLOCK, 0, ops_cuda_i_stream()>>>(dwpe, dout, B, T, C);
    cudaLaunchCheck();
}

/* ------------------------------------------------------------------------------------------ */
/* layernorm: one warp per row                                                                */

__global__ void k_layernorm_fwd(float *out, float *mean, float *rstd, const float *inp,
                                const float *w, const float *b, int N, int C) {
    const int row = blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32, lane = threadIdx.x % 32;
    if (row >= N) return;
    const float *x = inp + (size_t)row * C;
    float *o = out + (size_t)row * C;
    float s = 0.0f;
    for (int c = lane; c < C; c += 32) s += x[c];
    const float m = ops_cuda_i_warp_sum(s) / C;
    float v = 0.0f; /* two-pass variance, as the CPU */
    for (int c = lane; c < C; c += 32) {
        const float d = x[c] - m;
        v += d * d;
    }
    v = ops_cuda_i_warp_sum(v);
    const float r = 1.0f / sqrtf(v / C + 1e-5f);
    for (int c = lane; c < C; c += 32) o[c] = (x[c] - m) * r * w[c] + b[c];
    if (lane == 0) {
        mean[row] = m;
        rstd[row] = r;
    }
}

__global__ void k_layernorm_bwd_dinp(float *dinp, const float *dout, const float *inp,
                                     const float *w, const float *mean, const float *rstd, int N,
                                     int C) {
    const int row = blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32, lane = threadIdx.x % 32;
    if (row >= N) return;
    const float *x = inp + (size_t)row * C, *d = dout + (size_t)row * C;
    float *dx = dinp + (size_t)row * C;
    const float m = mean[row], r = rstd[row];
    float dm = 0.0f, dnm = 0.0f;
    for (int c = lane; c < C; c += 32) {
        const float norm = (x[c] - m) * r, dnorm = w[c] * d[c];
        dm += dnorm;
        dnm += dnorm * norm;
    }
    dm = ops_cuda_i_warp_sum(dm) / C;
    dnm = ops_cuda_i_warp_sum(dnm) / C;
    for (int c = lane; c < C; c += 32) {
        const float norm = (x[c] - m) * r, dnorm = w[c] * d[c];
        dx[c] += (dnorm - dm - norm * dnm) * r;
    }
}

/* dw/db stage 1: per row chunk, per column: Σ norm·dout and Σ dout */
__global__ void k_layernorm_bwd_part(float *pw, float *pb, const float *dout, const float *inp,
                                     const float *mean, const float *rstd, int N, int C, int rows) {
    const int c = blockIdx.x * blockDim.x + threadIdx.x, chunk = blockIdx.y;
    if (c >= C) return;
    const int n0 = chunk * rows, n1 = min(N, n0 + rows);
    float aw = 0.0f, ab = 0.0f;
    for (int n = n0; n < n1; n++) {
        const float d = dout[(size_t)n * C + c];
        aw += (inp[(size_t)n * C + c] - mean[n]) * rstd[n] * d;
        ab += d;
    }
    pw[(size_t)chunk * C + c] = aw;
    pb[(size_t)chunk * C + c] = ab;
}

extern "C" void ops_cuda_layernorm_forward(float *out, float *mean, float *rstd, const float *inp,
                                           const float *w, const float *b, int N, int C) {
    if (N <= 0) return;
    k_layernorm_fwd<<<ops_cuda_warp_row_blocks(N), OPS_CUDA_BLOCK, 0, ops_cuda_i_stream()>>>(out, mean, rstd, inp, w, b, N, C);
    cudaLaunchCheck();
}

extern "C" void ops_cuda_layernorm_backward_input(float *dinp, const float *dout, const float *inp,
                                                  const float *w, const float *mean,
                                                  const float *rstd, int N, int C) {
    if (N <= 0) return;
    k_layernorm_bwd_dinp<<<ops_cuda_warp_row_blocks(N), OPS_CUDA_BLOCK, 0, ops_cuda_i_stream()>>>(dinp, dout, inp, w, mean, rstd, N, C);
    cudaLaunchCheck();
}

extern "C" void ops_cuda_layernorm_backward_weight(float *dw, float *db, const float *dout,
                                                   const float *inp, const float *mean,
                                                   const float *rstd, int N, int C) {
    if (N <= 0) return;
    const unsigned chunks = ops_cuda_colsum_chunks(N);
    const size_t half = ops_cuda_ws_colsum(N, C, 1);
    char *ws = (char *)ops_cuda_i_scratch(OPS_CUDA_SCRATCH_OP, 2 * half);
    float *pw = (float *)ws, *pb = (float *)(ws + half);
    const dim3 grid((C + OPS_CUDA_BLOCK - 1) / OPS_CUDA_BLOCK, chunks);
    k_layernorm_bwd_part<<<grid, OPS_CUDA_BLOCK, 0, ops_cuda_i_stream()>>>(pw, pb, dout, inp, mean, rstd, N, C, ops_cuda_colsum_rows(N));
    cudaLaunchCheck();
    k_colsum_finish<<<grid.x, OPS_CUDA_BLOCK, 0, ops_cuda_i_stream()>>>(dw, pw, chunks, C);
    cudaLaunchCheck();
    k_colsum_finish<<<grid.x, OPS_CUDA_BLOCK, 0, ops_cuda_i_stream()>>>(db, pb, chunks, C);
    cudaLaunchCheck();
}

extern "C" void ops_cuda_layernorm_backward(float *dinp, float *dw, float *db, const float *dout,
                                            const float *inp, const float *w, const float *mean,
                                            const float *rstd, int N, int C) {
    ops_cuda_layernorm_backward_input(dinp, dout, inp, w, mean, rstd, N, C);
    if (dw != NULL) ops_cuda_layernorm_backward_weight(dw, db, dout, inp, mean, rstd, N, C);
}

/* ------------------------------------------------------------------------------------------ */
/* fused softmax + cross-entropy: one block per row                                           */

struct ce_result {
    double sum;
    int bad_row; /* smallest row with a target outside [-1, V), INT_MAX if none */
    int pad;
};

__global__ void k_ce_rows(float *logits, float *losses, double *rowloss, const int *targets,
                          int V, float dloss, ce_result *res) {
    const int n = blockIdx.x;
    float *row = logits + (size_t)n * V;
    int tgt = targets[n];
    if (tgt < -1 || tgt >= V) {
        if (threadIdx.x == 0) atomicMin(&res->bad_row, n); /* error path only */
        tgt = -1;
    }
    float mx = -INFINITY;
    for (int i = threadIdx.x; i < V; i += blockDim.x) mx = fmaxf(mx, row[i]);
    mx = ops_cuda_i_block_max(mx);
    const float zt = tgt >= 0 ? row[tgt] - mx : 0.0f; /* read before the row is overwritten */
    __syncthreads();
    float s = 0.0f;
    for (int i = threadIdx.x; i < V; i += blockDim.x) {
        const float e = expf(row[i] - mx);
        row[i] = e;
        s += e;
    }
    const double sum = ops_cuda_i_block_sum((double)s);
    const double loss = tgt >= 0 ? log(sum) - (double)zt : 0.0;
    if (threadIdx.x == 0) {
        losses[n] = (float)loss;
        rowloss[n] = loss;
    }
    const float inv = (float)(1.0 / sum);
    if (dloss == 0.0f) {
        for (int i = threadIdx.x; i < V; i += blockDim.x) row[i] *= inv;
    } else if (tgt < 0) {
        for (int i = threadIdx.x; i < V; i += blockDim.x) row[i] = 0.0f;
    } else {
        const float sc = inv * dloss;
        for (int i = threadIdx.x; i < V; i += blockDim.x) {
            const float g = __fmul_rn(row[i], sc); /* two roundings, as the CPU */
            row[i] = i == tgt ? g - dloss : g;
        }
    }
}

__global__ void k_ce_sum(ce_result *res, const double *rowloss, int N) {
    double acc = 0.0;
    for (int i = threadIdx.x; i < N; i += blockDim.x) acc += rowloss[i];
    acc = ops_cuda_i_block_sum(acc);
    if (threadIdx.x == 0) res->sum = acc;
}

extern "C" double ops_cuda_softmax_crossentropy(float *logits, float *losses, const int *targets,
                                                int N, int V, float dloss) {
    if (N <= 0) return 0.0;
    char *ws = (char *)ops_cuda_i_scratch(OPS_CUDA_SCRATCH_OP, ops_cuda_ws_crossentropy(N));
    double *rowloss = (double *)ws;
    ce_result *res = (ce_result *)(ws + ops_cuda_align256((size_t)N * sizeof(double)));
    cudaStream_t st = ops_cuda_i_stream();
    cudaCheck(cudaMemsetAsync(res, 0x7f, sizeof(ce_result), st)); /* bad_row = 0x7f7f7f7f */
    k_ce_rows<<<N, OPS_CUDA_BLOCK, 0, st>>>(logits, losses, rowloss, targets, V, dloss, res);
    cudaLaunchCheck();
    k_ce_sum<<<1, OPS_CUDA_BLOCK, 0, st>>>(res, rowloss, N);
    cudaLaunchCheck();
    ce_result *h = (ce_result *)ops_cuda_i_pinned();
    ops_cuda_copy_d2h(h, res, sizeof(ce_result));
    if (h->bad_row != 0x7f7f7f7f) {
        int bad = 0;
        ops_cuda_copy_d2h(&bad, targets + h->bad_row, sizeof(int));
        mt_fail("target token id %d at row %d is outside the vocabulary [0, %d) "
                "(do the data shards and the model's vocab_size match?)",
                bad, h->bad_row, V);
    }
    return h->sum;
}
