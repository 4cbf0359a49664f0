/*
 * tests/test_ops_cuda_launch.c — host unit tests of the CUDA backend's launch arithmetic
 * (ops/ops_cuda_launch.c): grids cover every element exactly once, reductions are split by
 * problem size only, workspaces hold what the kernels write, the token bucketing of the
 * deterministic encoder backward is a stable sort. No GPU and no CUDA headers needed: this runs
 * in every `make unit`.
 *
 * Method: each grid/chunk formula is checked against a brute-force simulation of what the kernel
 * does with it (which indices a grid-stride loop visits, which rows a chunk covers), and the
 * bucketing against a plain O(BT²) reference.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "ops/ops.h"
#include "ops/ops_cuda_launch.h"

/* Simulate a grid-stride loop of `blocks` x `block` threads, per_thread = 1: every index in
 * [0, n) is visited exactly once. */
static void check_grid_stride(size_t n, unsigned blocks, int block) {
    unsigned char *seen = calloc(n + 1, 1);
    assert_non_null(seen);
    const size_t stride = (size_t)blocks * block;
    for (size_t tid = 0; tid < stride; tid++)
        for (size_t i = tid; i < n; i += stride) seen[i]++;
    for (size_t i = 0; i < n; i++) assert_int_equal(seen[i], 1);
    free(seen);
}

static void test_blocks_1d(void **state) {
    (void)state;
    assert_int_equal(ops_cuda_blocks_1d(0, 256, 1, 4096), 1);     /* never a 0-block launch */
    assert_int_equal(ops_cuda_blocks_1d(1, 256, 1, 4096), 1);
    assert_int_equal(ops_cuda_blocks_1d(256, 256, 1, 4096), 1);
    assert_int_equal(ops_cuda_blocks_1d(257, 256, 1, 4096), 2);
    assert_int_equal(ops_cuda_blocks_1d(1024, 256, 4, 4096), 1);   /* float4: 4 per thread */
    assert_int_equal(ops_cuda_blocks_1d(1025, 256, 4, 4096), 2);
    assert_int_equal(ops_cuda_blocks_1d((size_t)1 << 40, 256, 1, 4096), 4096); /* capped */
    assert_int_equal(ops_cuda_blocks_1d(10, 0, 1, 4096), 0);       /* bad block size */
    const size_t sizes[] = {1, 7, 255, 256, 257, 1000, 65536, 100003, 1048577 + 3};
    for (size_t s = 0; s < sizeof sizes / sizeof *sizes; s++) {
        const unsigned b = ops_cuda_blocks_1d(sizes[s], OPS_CUDA_BLOCK, 1, 64);
        assert_true(b >= 1 && b <= 64);
        check_grid_stride(sizes[s], b, OPS_CUDA_BLOCK);
    }
}

static void test_vec4(void **state) {
    (void)state;
    float buf[16] __attribute__((aligned(16))) = {0};
    assert_int_equal(ops_cuda_vec4_ok(buf, 8), 1);
    assert_int_equal(ops_cuda_vec4_ok(buf, 6), 0);      /* tail not a multiple of 4 */
    assert_int_equal(ops_cuda_vec4_ok(buf + 1, 8), 0);  /* 4-byte, not 16-byte, aligned */
    assert_int_equal(ops_cuda_vec4_ok(buf + 4, 12), 1);
}

static void test_reduce_parts(void **state) {
    (void)state;
    assert_int_equal(ops_cuda_reduce_parts(0), 1);
    assert_int_equal(ops_cuda_reduce_parts(1), 1);
    assert_int_equal(ops_cuda_reduce_parts(OPS_CUDA_BLOCK * 4), 1);
    assert_int_equal(ops_cuda_reduce_parts(OPS_CUDA_BLOCK * 4 + 1), 2);
    assert_int_equal(ops_cuda_reduce_parts((size_t)124000000), OPS_CUDA_REDUCE_PARTS);
    /* the sumsq workspace holds every part plus the result */
    assert_true(ops_cuda_ws_sumsq() >= (OPS_CUDA_REDUCE_PARTS + 1) * sizeof(double));
    check_grid_stride(100003, ops_cuda_reduce_parts(100003), OPS_CUDA_BLOCK);
}

/* every row in exactly one chunk, no chunk empty, chunks within the cap */
static void test_colsum_chunks(void **state) {
    (void)state;
    const int Ns[] = {1, 2, 63, 64, 65, 1000, 4096, 16384, 32768, 100001};
    for (size_t s = 0; s < sizeof Ns / sizeof *Ns; s++) {
        const int N = Ns[s];
        const unsigned chunks = ops_cuda_colsum_chunks(N);
        const int rows = ops_cuda_colsum_rows(N);
        assert_true(chunks >= 1 && chunks <= OPS_CUDA_COLSUM_MAX_CHUNKS);
        assert_true((size_t)chunks * rows >= (size_t)N);
        assert_true((size_t)(chunks - 1) * rows < (size_t)N); /* last chunk not empty */
        int covered = 0;
        for (unsigned c = 0; c < chunks; c++) {
            const int n0 = (int)c * rows, n1 = n0 + rows < N ? n0 + rows : N;
            assert_true(n1 > n0);
            covered += n1 - n0;
        }
        assert_int_equal(covered, N);
        /* the workspace holds chunks x ncols floats for each buffer, 256-aligned */
        const size_t ws = ops_cuda_ws_colsum(N, 768, 2);
        assert_true(ws >= 2 * (size_t)chunks * 768 * sizeof(float));
        assert_int_equal(ws % 256, 0);
    }
    assert_int_equal(ops_cuda_colsum_chunks(64), 1);
    assert_int_equal(ops_cuda_colsum_chunks(65), 2);
}

static void test_warp_rows(void **state) {
    (void)state;
    const int per = OPS_CUDA_BLOCK / 32;
    assert_int_equal(ops_cuda_warp_row_blocks(1), 1);
    assert_int_equal(ops_cuda_warp_row_blocks((size_t)per), 1);
    assert_int_equal(ops_cuda_warp_row_blocks((size_t)per + 1), 2);
    /* B*NH*T rows of attention for GPT-2 124M at B=32, T=1024 */
    const size_t rows = (size_t)32 * 12 * 1024;
    assert_true((size_t)ops_cuda_warp_row_blocks(rows) * per >= rows);
    assert_true((size_t)(ops_cuda_warp_row_blocks(rows) - 1) * per < rows);
}

static void test_workspaces(void **state) {
    (void)state;
    assert_int_equal(ops_cuda_align256(0), 0);
    assert_int_equal(ops_cuda_align256(1), 256);
    assert_int_equal(ops_cuda_align256(256), 256);
    assert_int_equal(ops_cuda_align256(257), 512);
    /* CE: N doubles, then the 16-byte result at an aligned offset */
    const size_t ce = ops_cuda_ws_crossentropy(1000);
    assert_true(ce >= ops_cuda_align256(1000 * sizeof(double)) + 16);
    assert_true(ops_cuda_ws_encoder_backward(4096) >= (3 * 4096 + 1) * sizeof(int));
    assert_true(ops_cuda_ws_decode(1023, 12) >= 1024 * 12 * sizeof(float));
    assert_int_equal(ops_cuda_ws_decode(-1, 12), 0);
    assert_true(ops_cuda_ws_gemm_bf16(1024, 768, 64) >= (1024 * 64 + 64 * 768) * 2);
    assert_int_equal(ops_cuda_cublaslt_workspace(9), (size_t)32 << 20);
    assert_int_equal(ops_cuda_cublaslt_workspace(8), (size_t)4 << 20);
}

/* the span a strided batch touches: simulate it */
static void test_matrix_span(void **state) {
    (void)state;
    const int cases[][4] = {{64, 64, 2304, 12}, {1, 5, 5, 1}, {3, 2, 7, 4}, {1024, 768, 768, 1}};
    const long long strides[] = {64, 0, 50, 0};
    for (int c = 0; c < 4; c++) {
        const int rows = cases[c][0], cols = cases[c][1], ld = cases[c][2], batch = cases[c][3];
        size_t maxidx = 0;
        for (int b = 0; b < batch; b++)
            for (int r = 0; r < rows; r++)
                for (int k = 0; k < cols; k++) {
                    const size_t idx = (size_t)b * strides[c] + (size_t)r * ld + k;
                    if (idx + 1 > maxidx) maxidx = idx + 1;
                }
        assert_int_equal(ops_cuda_matrix_span(rows, cols, ld, batch, strides[c]), maxidx);
    }
    assert_int_equal(ops_cuda_matrix_span(0, 5, 5, 1, 0), 0);
}

static void test_bucket_tokens(void **state) {
    (void)state;
    enum { BT = 500 };
    int inp[BT], pos[BT], offs[BT + 1], tok[BT];
    uint64_t s = 12345;
    for (int i = 0; i < BT; i++) {
        s = s * 6364136223846793005ull + 1442695040888963407ull;
        inp[i] = (int)((s >> 33) % 37) * 3; /* 37 distinct ids, gaps between them */
    }
    const int U = ops_cuda_bucket_tokens(inp, BT, pos, offs, tok);
    /* reference: distinct ids ascending, each bucket the positions of that id in order */
    int want_u = 0, k = 0;
    for (int v = 0; v <= 36 * 3; v++) {
        int any = 0;
        for (int i = 0; i < BT; i++) {
            if (inp[i] != v) continue;
            if (!any) {
                assert_true(want_u < U);
                assert_int_equal(tok[want_u], v);
                assert_int_equal(offs[want_u], k);
                any = 1;
            }
            assert_int_equal(pos[k], i); /* stable: ascending positions */
            k++;
        }
        want_u += any;
    }
    assert_int_equal(U, want_u);
    assert_int_equal(offs[U], BT);
    assert_int_equal(k, BT);
    int bad[3] = {1, -1, 2};
    assert_int_equal(ops_cuda_bucket_tokens(bad, 3, pos, offs, tok), -1);
    assert_int_equal(ops_cuda_bucket_tokens(inp, 0, pos, offs, tok), 0);
    assert_int_equal(offs[0], 0);
}

/* The device's encoder backward (k_encoder_bwd_wte: per bucket, per column, acc = dwte; acc +=
 * dout of each position in bucket order) replayed on the host from ops_cuda_bucket_tokens'
 * output gives the CPU backend's dwte BIT FOR BIT: the claim in ops_cuda.h. */
static void test_bucketed_encoder_backward_matches_cpu(void **state) {
    (void)state;
    enum { B = 3, T = 40, C = 16, V = 11, BT = B * T };
    int inp[BT], pos[BT], offs[BT + 1], tok[BT];
    static float dout[BT * C], want[V * C], got[V * C], wpe[T * C];
    uint64_t s = 99;
    for (int i = 0; i < BT; i++) {
        s = s * 6364136223846793005ull + 1442695040888963407ull;
        inp[i] = (int)((s >> 33) % V);
    }
    for (int i = 0; i < BT * C; i++) {
        s = s * 6364136223846793005ull + 1442695040888963407ull;
        dout[i] = (float)((double)(s >> 40) / 16777216.0 - 0.5) * 3.0f;
    }
    for (int i = 0; i < V * C; i++) want[i] = got[i] = 0.1f * (float)(i % 7) - 0.3f;
    ops_encoder_backward(want, wpe, dout, inp, B, T, C);
    const int U = ops_cuda_bucket_tokens(inp, BT, pos, offs, tok);
    for (int u = 0; u < U; u++)
        for (int c = 0; c < C; c++) {
            float acc = got[tok[u] * C + c];
            for (int j = offs[u]; j < offs[u + 1]; j++) acc += dout[pos[j] * C + c];
            got[tok[u] * C + c] = acc;
        }
    assert_memory_equal(got, want, sizeof got);
}

static void test_precision(void **state) {
    (void)state;
    assert_int_equal(ops_cuda_parse_precision("fp32"), OPS_CUDA_FP32);
    assert_int_equal(ops_cuda_parse_precision("tf32"), OPS_CUDA_TF32);
    assert_int_equal(ops_cuda_parse_precision("bf16"), OPS_CUDA_BF16);
    assert_int_equal(ops_cuda_parse_precision("fp16"), -1);
    assert_int_equal(ops_cuda_parse_precision(""), -1);
    assert_int_equal(ops_cuda_parse_precision(NULL), -1);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_blocks_1d),     cmocka_unit_test(test_vec4),
        cmocka_unit_test(test_reduce_parts),  cmocka_unit_test(test_colsum_chunks),
        cmocka_unit_test(test_warp_rows),     cmocka_unit_test(test_workspaces),
        cmocka_unit_test(test_matrix_span),   cmocka_unit_test(test_bucket_tokens),
        cmocka_unit_test(test_precision),
        cmocka_unit_test(test_bucketed_encoder_backward_matches_cpu),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
