/*
 * tests/test_sample.c — the sampler (model/sample.h: greedy, top-k, top-p, temperature, frequencies
 * against the softmax, same seed same draws) and the RNG's normal draws (core/rng.h) that weight
 * init uses.
 */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#include "core/rng.h"
#include "model/sample.h"

#include "tests/testutil.h"

static void test_sampler(void **state) {
    (void)state;
    float logits[5] = {0.1f, 2.0f, -1.0f, 2.0f, 0.5f};
    rng_state r;
    rng_seed(&r, 1);
    sample_params greedy = {0.0f, 0, 1.0f};
    assert_int_equal(sample_token(logits, 5, &greedy, &r, NULL), 1); /* tie -> lowest id */
    sample_params k1 = {1.0f, 1, 1.0f};
    for (int i = 0; i < 20; i++) assert_int_equal(sample_token(logits, 5, &k1, &r, NULL), 1);
    /* top-k 2 only ever returns the two best (ids 1 and 3) and both appear */
    sample_params k2 = {1.0f, 2, 1.0f};
    int seen[5] = {0};
    for (int i = 0; i < 400; i++) seen[sample_token(logits, 5, &k2, &r, NULL)]++;
    assert_int_equal(seen[0] + seen[2] + seen[4], 0);
    assert_true(seen[1] > 100 && seen[3] > 100);
    /* frequencies at temperature 1 follow softmax (chi-square-free loose check, 20k draws) */
    sample_params full = {1.0f, 0, 1.0f};
    int cnt[5] = {0};
    const int n = 20000;
    for (int i = 0; i < n; i++) cnt[sample_token(logits, 5, &full, &r, NULL)]++;
    double z = 0;
    for (int i = 0; i < 5; i++) z += exp(logits[i]);
    for (int i = 0; i < 5; i++) {
        double p = exp(logits[i]) / z, sd = sqrt(p * (1 - p) / n);
        assert_true(fabs((double)cnt[i] / n - p) < 5 * sd + 1e-3);
    }
    /* top-p smaller than the best probability keeps only the argmax set's first member */
    sample_params p1 = {1.0f, 0, 0.1f};
    for (int i = 0; i < 20; i++) assert_int_equal(sample_token(logits, 5, &p1, &r, NULL), 1);
    /* same seed, same draws */
    rng_state a, b;
    rng_seed(&a, 42);
    rng_seed(&b, 42);
    for (int i = 0; i < 50; i++)
        assert_int_equal(sample_token(logits, 5, &full, &a, NULL), sample_token(logits, 5, &full, &b, NULL));
}

static void test_rng_normal_moments(void **state) {
    (void)state;
    rng_state r;
    rng_seed(&r, 7);
    double s = 0, s2 = 0;
    const int n = 200000;
    for (int i = 0; i < n; i++) {
        double x = rng_normal(&r);
        s += x;
        s2 += x * x;
    }
    assert_true(fabs(s / n) < 0.02);
    assert_true(fabs(s2 / n - 1.0) < 0.02);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_sampler),
        cmocka_unit_test(test_rng_normal_moments),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
