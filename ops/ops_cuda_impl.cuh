/*
 * ops/ops_cuda_impl.cuh — what the CUDA backend's .cu files share and nothing else sees: the
 * error checks, the compute stream, the cuBLAS handle, the precision, the scratch buffers and the
 * warp/block reductions. Internal names carry the ops_cuda_i_ prefix (not in ops_cuda.h).
 */
#ifndef MT_OPS_CUDA_IMPL_CUH
#define MT_OPS_CUDA_IMPL_CUH

#include <cublas_v2.h>
#include <cuda_runtime.h>

#include "core/check.h"
#include "ops/ops_cuda.h"
#include "ops/ops_cuda_launch.h"

/* A failed CUDA or cuBLAS call: file:line, the call, the library's text and a hint; exit 1. */
void ops_cuda_i_fail(const char *what, const char *call, const char *file, int line);
#define cudaCheck(call)                                                                            \
    do {                                                                                           \
        cudaError_t e_ = (call);                                                                   \
        if (e_ != cudaSuccess) ops_cuda_i_fail(cudaGetErrorString(e_), #call, __FILE__, __LINE__); \
    } while (0)
#define cublasCheck(call)                                                                          \
    do {                                                                                           \
        cublasStatus_t s_ = (call);                                                                \
        if (s_ != CUBLAS_STATUS_SUCCESS)                                                           \
            ops_cuda_i_fail(cublasGetStatusString(s_), #call, __FILE__, __LINE__);                 \
    } while (0)
/* After a kernel launch: a bad configuration is reported at the launch, not at the next sync. */
#define cudaLaunchCheck() cudaCheck(cudaGetLastError())

cudaStream_t ops_cuda_i_stream(void);
cublasHandle_t ops_cuda_i_cublas(void);
int ops_cuda_i_precision(void);

/* Scratch slots: one device buffer each, grown on demand (growth frees and reallocates, which
 * synchronises the device; sizes settle after the first step). Ops run in stream order, so one
 * op's scratch is free again when the next op starts. */
enum {
    OPS_CUDA_SCRATCH_OP = 0,  /* the op's own workspace */
    OPS_CUDA_SCRATCH_AUX = 1, /* a second one (final sums of a reduction) */
    OPS_CUDA_SCRATCH_BF16A = 2, /* bf16 copies of GEMM operands */
    OPS_CUDA_SCRATCH_BF16B = 3,
    OPS_CUDA_SCRATCH_N = 4
};
void *ops_cuda_i_scratch(int slot, size_t bytes);
/* 64 bytes of pinned host memory for small results copied back (one per op that returns). */
void *ops_cuda_i_pinned(void);

/* 1D launch over n elements, BLOCK threads, per_thread elements each. */
static inline unsigned ops_cuda_i_grid(size_t n, int per_thread) {
    return ops_cuda_blocks_1d(n, OPS_CUDA_BLOCK, per_thread, OPS_CUDA_MAX_BLOCKS);
}

/* --- reductions (device) --------------------------------------------------------------------- */
template <class T> __device__ __forceinline__ T ops_cuda_i_warp_sum(T v) {
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}
__device__ __forceinline__ float ops_cuda_i_warp_max(float v) {
    for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
    return v;
}
/* Block-wide sum for blockDim.x == OPS_CUDA_BLOCK; every thread gets the result. The order of
 * additions is fixed by the thread layout, so it is deterministic. */
template <class T> __device__ T ops_cuda_i_block_sum(T v) {
    __shared__ T part[OPS_CUDA_BLOCK / 32];
    const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
    v = ops_cuda_i_warp_sum(v);
    __syncthreads(); /* part may still be read by a previous call */
    if (lane == 0) part[warp] = v;
    __syncthreads();
    T r = lane < OPS_CUDA_BLOCK / 32 ? part[lane] : (T)0;
    return ops_cuda_i_warp_sum(r);
}
__device__ __forceinline__ float ops_cuda_i_block_max(float v) {
    __shared__ float part[OPS_CUDA_BLOCK / 32];
    const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
    v = ops_cuda_i_warp_max(v);
    __syncthreads();
    if (lane == 0) part[warp] = v;
    __syncthreads();
    float r = lane < OPS_CUDA_BLOCK / 32 ? part[lane] : -INFINITY;
    return ops_cuda_i_warp_max(r);
}

/* Column sums (deterministic, two stages): dst[c] += Σ_n src[n*ncols + c] for c < ncols. */
void ops_cuda_i_colsum_add(float *dst, const float *src, int N, int ncols);
/* out (count) on the HOST = Σ of each of count device double arrays of `parts` entries laid out
 * back to back in d_parts; fixed order. */
void ops_cuda_i_sum_parts(double *out, const double *d_parts, int parts, int count);
/* First stage of sumsq: parts[b] for b < ops_cuda_reduce_parts(n). */
void ops_cuda_i_sumsq_parts(double *d_parts, const float *x, size_t n);

#endif /* MT_OPS_CUDA_IMPL_CUH */
