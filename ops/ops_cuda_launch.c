/*
 * ops/ops_cuda_launch.c — grid, block and workspace sizes of the CUDA kernels (see
 * ops_cuda_launch.h). Plain C, compiled in every build, so the host unit tests check it.
 */
#include "ops/ops_cuda_launch.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

static size_t ceil_div(size_t a, size_t b) { return (a + b - 1) / b; }

unsigned ops_cuda_blocks_1d(size_t n, int block, int per_thread, unsigned max_blocks) {
    if (block <= 0 || per_thread <= 0) {
        return 0;
    }
    size_t blocks = ceil_div(n, (size_t)block * (size_t)per_thread);
    if (blocks == 0) {
        blocks = 1;
    }
    if (max_blocks > 0 && blocks > max_blocks) {
        blocks = max_blocks;
    }
    return (unsigned)blocks;
}

int ops_cuda_vec4_ok(const void *p, size_t n) {
    return ((uintptr_t)p % 16 == 0) && (n % 4 == 0);
}

unsigned ops_cuda_reduce_parts(size_t n) {
    return ops_cuda_blocks_1d(n, OPS_CUDA_BLOCK, 4, OPS_CUDA_REDUCE_PARTS);
}

unsigned ops_cuda_colsum_chunks(int N) {
    if (N <= 0) {
        return 1;
    }
    return ops_cuda_blocks_1d((size_t)N, OPS_CUDA_COLSUM_ROWS, 1, OPS_CUDA_COLSUM_MAX_CHUNKS);
}

int ops_cuda_colsum_rows(int N) {
    if (N <= 0) {
        return 1;
    }
    const unsigned chunks = ops_cuda_colsum_chunks(N);
    return (int)ceil_div((size_t)N, chunks);
}

unsigned ops_cuda_warp_row_blocks(size_t nrows) {
    return ops_cuda_blocks_1d(nrows, OPS_CUDA_BLOCK / 32, 1, 0);
}

size_t ops_cuda_align256(size_t bytes) { return ceil_div(bytes, 256) * 256; }

size_t ops_cuda_ws_sumsq(void) {
    return ops_cuda_align256((OPS_CUDA_REDUCE_PARTS + 1) * sizeof(double));
}

size_t ops_cuda_ws_crossentropy(int N) {
    const size_t n = N > 0 ? (size_t)N : 0;
    /* row losses in double, then a 16-byte result record: double sum, int bad row, int target */
    return ops_cuda_align256(n * sizeof(double)) + ops_cuda_align256(sizeof(double) + 2 * sizeof(int));
}

size_t ops_cuda_ws_colsum(int N, int ncols, int nbufs) {
    if (ncols <= 0 || nbufs <= 0) {
        return 0;
    }
    return ops_cuda_align256((size_t)ops_cuda_colsum_chunks(N) * (size_t)ncols * sizeof(float)) *
           (size_t)nbufs;
}

size_t ops_cuda_ws_encoder_backward(int BT) {
    const size_t bt = BT > 0 ? (size_t)BT : 0;
    /* sorted positions (BT), bucket offsets (at most BT+1), bucket tokens (at most BT) */
    return ops_cuda_align256((3 * bt + 1) * sizeof(int));
}

int ops_cuda_bucket_tokens(const int *inp, int BT, int *pos, int *offs, int *tok) {
    int maxid = -1;
    for (int i = 0; i < BT; i++) {
        if (inp[i] < 0) return -1;
        if (inp[i] > maxid) maxid = inp[i];
    }
    if (BT <= 0) {
        offs[0] = 0;
        return 0;
    }
    /* counting sort: start[v] = first slot of token v; stable because positions go in order */
    int *start = calloc((size_t)maxid + 2, sizeof(int));
    if (start == NULL) return -1;
    for (int i = 0; i < BT; i++) start[inp[i] + 1]++;
    int U = 0;
    for (int v = 0; v <= maxid; v++) {
        if (start[v + 1] > 0) {
            tok[U] = v;
            offs[U] = start[v];
            U++;
        }
        start[v + 1] += start[v];
    }
    offs[U] = BT;
    for (int i = 0; i < BT; i++) pos[start[inp[i]]++] = i;
    free(start);
    return U;
}

size_t ops_cuda_matrix_span(int rows, int cols, int ld, int batch, long long stride) {
    if (rows <= 0 || cols <= 0 || batch <= 0) return 0;
    return (size_t)(batch - 1) * (size_t)stride + (size_t)(rows - 1) * (size_t)ld + (size_t)cols;
}

size_t ops_cuda_ws_decode(int t, int NH) {
    if (t < 0 || NH <= 0) {
        return 0;
    }
    return ops_cuda_align256((size_t)(t + 1) * (size_t)NH * sizeof(float));
}

size_t ops_cuda_ws_gemm_bf16(size_t m, size_t n, size_t k) {
    return ops_cuda_align256(m * k * 2) + ops_cuda_align256(k * n * 2);
}

size_t ops_cuda_cublaslt_workspace(int major) {
    return major >= 9 ? (size_t)32 << 20 : (size_t)4 << 20;
}

int ops_cuda_parse_precision(const char *s) {
    if (s == NULL) {
        return -1;
    }
    if (strcmp(s, "fp32") == 0) return OPS_CUDA_FP32;
    if (strcmp(s, "tf32") == 0) return OPS_CUDA_TF32;
    if (strcmp(s, "bf16") == 0) return OPS_CUDA_BF16;
    return -1;
}
