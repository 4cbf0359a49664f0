/*
 * tests/test_ops_gemv.c — the decode matmul ops_cpu_matmul_rows (ops/ops_cpu_gemv.c) against an
 * independent reference: the same product summed naively in double precision, for every row count
 * 1..8 it handles and 9 (which falls through to sgemm), with and without bias, at widths that are
 * and are not multiples of its 16-float step. Also: the result does not depend on the OpenMP thread
 * count (fixed summation order), and ops_matmul_forward_decode on the CPU backend is that kernel.
 */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>
#include <omp.h>

#include "ops/ops.h"
#include "ops/ops_cpu.h"

static float frand(uint32_t *s) {
    *s = *s * 1664525u + 1013904223u;
    return (float)((*s >> 8) & 0xffff) / 65536.0f - 0.5f;
}

static void check_shape(int N, int C, int OC, int with_bias) {
    uint32_t seed = (uint32_t)(N * 1000 + C + OC);
    float *x = malloc(sizeof(float) * N * C), *w = malloc(sizeof(float) * OC * C);
    float *b = malloc(sizeof(float) * OC), *out = malloc(sizeof(float) * N * OC);
    float *out1 = malloc(sizeof(float) * N * OC);
    for (int i = 0; i < N * C; i++) x[i] = frand(&seed);
    for (int i = 0; i < OC * C; i++) w[i] = frand(&seed);
    for (int i = 0; i < OC; i++) b[i] = frand(&seed);
    memset(out, 0xff, sizeof(float) * N * OC); /* NaN: every element must be overwritten */
    ops_cpu_matmul_rows(out, x, w, with_bias ? b : NULL, N, C, OC);
    for (int n = 0; n < N; n++)
        for (int o = 0; o < OC; o++) {
            double ref = with_bias ? b[o] : 0, mag = fabs(ref);
            for (int j = 0; j < C; j++) {
                ref += (double)x[n * C + j] * w[(size_t)o * C + j];
                mag += fabs((double)x[n * C + j] * w[(size_t)o * C + j]);
            }
            double got = out[(size_t)n * OC + o];
            if (!(fabs(got - ref) <= 1e-6 * mag + 1e-7))
                fail_msg("N=%d C=%d OC=%d row %d col %d: %.9g vs %.9g", N, C, OC, n, o, got, ref);
        }
    /* one thread: bit for bit the same (each output's sum is one thread's, in one order) */
    int saved = omp_get_max_threads();
    omp_set_num_threads(1);
    ops_cpu_matmul_rows(out1, x, w, with_bias ? b : NULL, N, C, OC);
    omp_set_num_threads(saved);
    if (N <= OPS_GEMV_MAX_ROWS) assert_memory_equal(out, out1, sizeof(float) * N * OC);
    /* the decode entry point on the CPU backend runs this kernel */
    ops_matmul_forward_decode(out1, x, w, with_bias ? b : NULL, N, C, OC);
    assert_memory_equal(out, out1, sizeof(float) * N * OC);
    free(x), free(w), free(b), free(out), free(out1);
}

static void test_rows_against_reference(void **state) {
    (void)state;
    for (int N = 1; N <= 9; N++) {
        check_shape(N, 768, 300, 1); /* 768 = 48 x 16 */
        check_shape(N, 77, 513, 0);  /* a tail of 13 after 4 steps of 16 (9 after 8) */
        check_shape(N, 5, 3, 1);     /* narrower than one step, below the threading cut */
    }
}

int main(void) {
    const struct CMUnitTest tests[] = {cmocka_unit_test(test_rows_against_reference)};
    return cmocka_run_group_tests(tests, NULL, NULL);
}
