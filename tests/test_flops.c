/*
 * tests/test_flops.c — FLOPs per token, MFU, the sgemm probe, the peaks (train/flops).
 *
 * flops_per_token is checked against two independent counts of N for GPT-2 124M:
 *   (1) the weight shapes of every matmul summed one by one (integers, no formula reuse);
 *   (2) GPT-2 small's published total parameter count, 124,439,808 (Radford et al. 2019 /
 *       Hugging Face "gpt2"; llm.c prints it as num_parameters), minus the parameters that are not
 *       matmul weights (position embedding, biases, LayerNorm), with the tied head counted once.
 * The probe and the theoretical peak are machine-dependent: only sanity (positive, finite, or -1
 * with a reason) and self-consistency of the reported assumptions are asserted — timings belong in
 * bench/, not in tests.
 */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include <cmocka.h>

#include "cmd/cmd.h"
#include "train/flops.h"

/* N by summing (out, in) shapes of each matmul weight explicitly. */
static int64_t matmul_params_by_shapes(int64_t L, int64_t d, int64_t V) {
    const int64_t shapes[4][2] = {
        {3 * d, d}, /* attn.c_attn   (3C, C) */
        {d, d},     /* attn.c_proj   (C, C)  */
        {4 * d, d}, /* mlp.c_fc      (4C, C) */
        {d, 4 * d}, /* mlp.c_proj    (C, 4C) */
    };
    int64_t n = 0;
    for (int64_t l = 0; l < L; l++)
        for (int k = 0; k < 4; k++) n += shapes[k][0] * shapes[k][1];
    return n + V * d; /* lm_head (V, C) */
}

static void test_gpt2_124m_by_shapes(void **state) {
    (void)state;
    const int64_t L = 12, d = 768, T = 1024, V = 50257;
    int64_t n = matmul_params_by_shapes(L, d, V);
    int64_t want = 6 * n + 12 * L * d * T; /* exact in int64, exact in double (< 2^53) */
    assert_true(flops_per_token(12, 768, 1024, 50257, 1) == (double)want);
    assert_true(flops_per_token(12, 768, 1024, 50257, 0) == (double)want); /* head counted alike */
}

static void test_gpt2_124m_from_published_total(void **state) {
    (void)state;
    const int64_t L = 12, d = 768, T = 1024, V = 50257;
    const int64_t total = 124439808; /* GPT-2 small, tied wte/lm_head counted once */
    int64_t wpe = T * d;
    int64_t biases_per_layer = 3 * d + d + 4 * d + d; /* c_attn, c_proj, c_fc, mlp.c_proj */
    int64_t ln_per_layer = 2 * (2 * d);               /* ln_1, ln_2: weight + bias */
    int64_t ln_f = 2 * d;
    /* total = wte(V·d) + wpe + L·(matmuls + biases + LN) + ln_f; the head reuses wte, so
     * N (matmuls incl. head) = total - wpe - L·(biases + LN) - ln_f. */
    int64_t n = total - wpe - L * (biases_per_layer + ln_per_layer) - ln_f;
    assert_true(flops_per_token((int)L, (int)d, (int)T, (int)V, 1) ==
                (double)(6 * n + 12 * L * d * T));
}

/* A small, lopsided config: any swap of (L, d, T, V) or a missing term changes the result. */
static void test_small_config_and_n_variant(void **state) {
    (void)state;
    const int64_t L = 3, d = 40, T = 17, V = 301;
    int64_t n = matmul_params_by_shapes(L, d, V);
    assert_true(flops_per_token(3, 40, 17, 301, 1) == (double)(6 * n + 12 * L * d * T));
    assert_true(flops_per_token_n((double)n, 3, 40, 17) == (double)(6 * n + 12 * L * d * T));
    /* bad input */
    assert_true(flops_per_token(0, 40, 17, 301, 1) == -1);
    assert_true(flops_per_token(3, 40, 17, 0, 1) == -1);
    assert_true(flops_per_token(3, -1, 17, 301, 1) == -1);
    assert_true(flops_per_token_n(0, 3, 40, 17) == -1);
}

static void test_mfu(void **state) {
    (void)state;
    /* 1e9 FLOP/token × 50 tokens/s on a 200 GFLOP/s peak = 25%. */
    assert_true(fabs(flops_mfu(1e9, 50, 200e9) - 0.25) < 1e-15);
    assert_true(isnan(flops_mfu(1e9, 50, -1))); /* unknown peak stays unknown */
    assert_true(isnan(flops_mfu(1e9, 50, 0)));
    assert_true(isnan(flops_mfu(1e9, NAN, 200e9)));
}

static void test_sgemm_probe_sane(void **state) {
    (void)state;
    double r = flops_sgemm_probe_n(1, 0.2, 512);
    assert_true(isfinite(r) && r > 0);
    r = flops_sgemm_probe(0, 0.2);
    assert_true(isfinite(r) && r > 0);
    assert_true(flops_sgemm_probe(1, 0) == -1);
    assert_true(flops_sgemm_probe_n(1, 0.1, 8) == -1);
}

static void test_theoretical_peak(void **state) {
    (void)state;
    char desc[256] = "";
    double p = flops_theoretical_peak(1, desc, sizeof(desc));
    assert_true(strlen(desc) > 0);
    if (p == -1) {
        assert_non_null(strstr(desc, "unknown"));
        return;
    }
    assert_true(isfinite(p) && p > 0);
    /* The number must be the product of the assumptions it states. */
    int cores = 0, fpc = 0;
    double ghz = 0;
    char unit[16];
    assert_int_equal(sscanf(desc, "%d %15s x %lf GHz x %d FLOP/cycle", &cores, unit, &ghz, &fpc),
                     4);
    assert_int_equal(cores, 1); /* one thread asked: one core */
    assert_true(fpc == 8 || fpc == 16 || fpc == 32 || fpc == 64);
    assert_true(fabs(p - cores * ghz * 1e9 * fpc) <= 0.005 * p); /* ghz printed to 0.01 */
    /* More threads never lower the peak. */
    char desc2[256];
    assert_true(flops_theoretical_peak(2, desc2, sizeof(desc2)) >= p);
}

static void test_gpu_table(void **state) {
    (void)state;
    assert_true(flops_gpu_peak_by_name("NVIDIA H100 80GB HBM3") == 989e12); /* SXM5 */
    assert_true(flops_gpu_peak_by_name("NVIDIA H100 SXM5 80GB") == 989e12);
    assert_true(flops_gpu_peak_by_name("NVIDIA H200") == 989e12);
    assert_true(flops_gpu_peak_by_name("NVIDIA H100 PCIe") == 756e12);
    assert_true(flops_gpu_peak_by_name("nvidia h100 pcie") == 756e12);
    assert_true(flops_gpu_peak_by_name("NVIDIA A100-SXM4-80GB") == 312e12);
    assert_true(flops_gpu_peak_by_name("NVIDIA A100-PCIE-40GB") == 312e12);
    assert_true(flops_gpu_peak_by_name("NVIDIA H100 NVL") == -1);
    assert_true(flops_gpu_peak_by_name("NVIDIA GeForce RTX 4090") == -1);
    assert_true(flops_gpu_peak_by_name(NULL) == -1);
}

static void test_bench_flags(void **state) {
    (void)state;
    char *bad[] = {"bench", "gemm", "--frobnicate", NULL};
    assert_int_equal(cmd_bench(3, bad), 2);
    char *badnum[] = {"bench", "gemm", "--threads", "two", NULL};
    assert_int_equal(cmd_bench(4, badnum), 2);
    char *missing[] = {"bench", "gemm", "--seconds", NULL};
    assert_int_equal(cmd_bench(3, missing), 2);
    char *tiny[] = {"bench", "gemm", "--size", "8", NULL};
    assert_int_equal(cmd_bench(4, tiny), 2);
    char msg[320];
    int mismatch = flops_blas_kernel_check(msg, sizeof(msg));
    assert_true(mismatch == 0 || strstr(msg, "OPENBLAS_CORETYPE=") != NULL);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_gpt2_124m_by_shapes),
        cmocka_unit_test(test_gpt2_124m_from_published_total),
        cmocka_unit_test(test_small_config_and_n_variant),
        cmocka_unit_test(test_mfu),
        cmocka_unit_test(test_sgemm_probe_sane),
        cmocka_unit_test(test_theoretical_peak),
        cmocka_unit_test(test_gpu_table),
        cmocka_unit_test(test_bench_flags),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
