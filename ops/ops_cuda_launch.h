/*
 * ops/ops_cuda_launch.h — the grid, block and workspace arithmetic of the CUDA kernels
 * (ops/ops_cuda*.cu), in plain C.
 *
 * Why a separate C file: every launch configuration and every scratch size is a small integer
 * computation that is easy to get wrong (an off-by-one grid leaves the last rows unwritten, an
 * under-sized workspace is a silent out-of-bounds write on the device) and needs no GPU to check.
 * Kept here, it is compiled into every build and unit-tested on the host (tests/test_ops_cuda_launch.c);
 * the .cu files call these functions and nothing else decides a grid.
 *
 * Determinism: every reduction on the device (sum of squares, the cross-entropy sum, the column
 * sums behind bias, LayerNorm and position-embedding gradients) is split into a number of parts
 * that depends ONLY on the problem size, never on the device, so a rerun adds in the same order
 * and gives bit-identical results.
 */
#ifndef MT_OPS_CUDA_LAUNCH_H
#define MT_OPS_CUDA_LAUNCH_H

#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Threads per block of the element-wise and row kernels. */
#define OPS_CUDA_BLOCK 256
/* Upper bound on the blocks of a grid-stride element-wise launch (enough to fill 132 SMs x 16). */
#define OPS_CUDA_MAX_BLOCKS 4096
/* Parts of a two-stage scalar reduction (sumsq): a power of two, one block sums them at the end. */
#define OPS_CUDA_REDUCE_PARTS 1024
/* Rows one thread walks in the first stage of a column reduction (at least). */
#define OPS_CUDA_COLSUM_ROWS 64
/* Upper bound on the row chunks of a column reduction. */
#define OPS_CUDA_COLSUM_MAX_CHUNKS 256

/* Blocks of `block` threads for n elements when each thread handles `per_thread` of them,
 * capped at max_blocks (the kernels use grid-stride loops, so a cap loses nothing).
 * Returns at least 1 for n == 0 (a launch of zero blocks is an error in CUDA); 0 if block or
 * per_thread is not positive. */
unsigned ops_cuda_blocks_1d(size_t n, int block, int per_thread, unsigned max_blocks);

/* 1 if a float array of n elements at p can be processed as float4 (16-byte aligned and n a
 * multiple of 4), else 0: the 128-bit element-wise path. */
int ops_cuda_vec4_ok(const void *p, size_t n);

/* Parts of the first stage of the scalar reduction of n elements: ceil(n / (BLOCK*4)) capped at
 * OPS_CUDA_REDUCE_PARTS, at least 1. Depends on n only (determinism). */
unsigned ops_cuda_reduce_parts(size_t n);

/* Row chunks of a column reduction over N rows (dbias, LayerNorm dw/db): ceil(N / COLSUM_ROWS)
 * capped at COLSUM_MAX_CHUNKS, at least 1. Chunk i covers rows [i*rows, min(N, (i+1)*rows))
 * with rows = ops_cuda_colsum_rows(N). */
unsigned ops_cuda_colsum_chunks(int N);
/* Rows per chunk: ceil(N / chunks). Chunks * rows >= N, and (chunks-1) * rows < N (no empty chunk). */
int ops_cuda_colsum_rows(int N);

/* Rows handled by one block of a row kernel where each warp owns one row (LayerNorm, softmax
 * rows): BLOCK / 32. Blocks for N rows: ceil(N / rows_per_block). */
unsigned ops_cuda_warp_row_blocks(size_t nrows);

/* Scratch bytes the backend keeps for one call, each rounded up to 256 bytes (cudaMalloc's
 * alignment) so that sub-buffers carved from one allocation stay aligned:
 *   sumsq:  OPS_CUDA_REDUCE_PARTS doubles + one double result;
 *   CE:     N doubles (row losses in double) + the result record (sum, bad row, bad target);
 *   colsum: chunks * ncols floats, times 2 for LayerNorm (dw and db partials);
 *   encoder backward: 3*BT + 1 ints (positions sorted by token, bucket offsets, bucket tokens);
 *   decode: NH * (t+1) floats. */
size_t ops_cuda_align256(size_t bytes);
size_t ops_cuda_ws_sumsq(void);
size_t ops_cuda_ws_crossentropy(int N);
size_t ops_cuda_ws_colsum(int N, int ncols, int nbufs);
size_t ops_cuda_ws_encoder_backward(int BT);
size_t ops_cuda_ws_decode(int t, int NH);
/* bf16 staging for one GEMM (A and B operands cast from fp32): (m*k + k*n) * 2 bytes, aligned. */
size_t ops_cuda_ws_gemm_bf16(size_t m, size_t n, size_t k);

/* The host half of the deterministic encoder backward: bucket the BT positions by token id.
 * pos (BT) receives the positions sorted by token, stable (ascending position within a token);
 * tok (U) the distinct tokens in ascending order; offs (U+1) the bucket bounds: the positions of
 * token tok[u] are pos[offs[u] .. offs[u+1]). Returns U, or -1 if an id is negative (ids may be
 * any non-negative int; memory is proportional to the largest id). */
int ops_cuda_bucket_tokens(const int *inp, int BT, int *pos, int *offs, int *tok);

/* Elements spanned by a strided batch of row-major matrices (rows x cols, leading dimension ld,
 * batch matrices stride apart): (batch-1)*stride + (rows-1)*ld + cols; 0 if any size is 0. What
 * the bf16 path casts for one operand of a GEMM. */
size_t ops_cuda_matrix_span(int rows, int cols, int ld, int batch, long long stride);

/* cuBLASLt workspace: 32 MiB on Hopper (sm_90+) as NVIDIA recommends for its kernels, 4 MiB on
 * older parts. major = compute capability major. */
size_t ops_cuda_cublaslt_workspace(int major);

/* Precision of the GEMMs. */
typedef enum { OPS_CUDA_FP32 = 0, OPS_CUDA_TF32 = 1, OPS_CUDA_BF16 = 2 } ops_cuda_precision;
/* "fp32" | "tf32" | "bf16" → its value; -1 for anything else (NULL included). */
int ops_cuda_parse_precision(const char *s);

#ifdef __cplusplus
}
#endif

#endif /* MT_OPS_CUDA_LAUNCH_H */
