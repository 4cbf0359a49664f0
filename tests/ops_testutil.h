/*
 * tests/ops_testutil.h — what the CPU kernel tests (tests/test_ops.c, tests/test_ops_elementwise.c)
 * share: deterministic random inputs and the fp32-vs-double comparison.
 *
 *   #include "tests/ops_testutil.h"   (after <cmocka.h>: check_close fails the running test)
 *
 * Header-only, like tests/testutil.h: each test is one file.
 */
#ifndef MT_OPS_TESTUTIL_H
#define MT_OPS_TESTUTIL_H

#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "core/check.h"

static uint64_t rng_state = 0x9E3779B97F4A7C15ull;

/* xorshift64*: uniform in [-1, 1). Deterministic so a failure reproduces. */
static inline float frand(void) {
    rng_state ^= rng_state >> 12;
    rng_state ^= rng_state << 25;
    rng_state ^= rng_state >> 27;
    const uint64_t r = rng_state * 2685821657736338717ull;
    return (float)((double)(r >> 40) / 16777216.0 * 2.0 - 1.0);
}

static inline float *frand_array(size_t n, float scale, float offset) {
    float *x = mallocCheck(n * sizeof(float));
    for (size_t i = 0; i < n; i++) {
        x[i] = offset + scale * frand();
    }
    return x;
}

static inline float *fzeros(size_t n) { return callocCheck(n, sizeof(float)); }
static inline double *dzeros(size_t n) { return callocCheck(n, sizeof(double)); }

static inline float *fcopy(const float *x, size_t n) {
    float *y = mallocCheck(n * sizeof(float));
    memcpy(y, x, n * sizeof(float));
    return y;
}

/* Fail unless |got − want| ≤ tol · max(1, max|want|) everywhere (NaN fails). */
static inline void check_close(const char *what, const float *got, const double *want, size_t n,
                               double tol) {
    double scale = 1.0;
    for (size_t i = 0; i < n; i++) {
        scale = fmax(scale, fabs(want[i]));
    }
    for (size_t i = 0; i < n; i++) {
        if (!(fabs((double)got[i] - want[i]) <= tol * scale)) {
            fail_msg("%s[%zu]: got %.9g, want %.9g (tol %.3g x %.3g)", what, i, (double)got[i],
                     want[i], tol, scale);
        }
    }
}

#endif /* MT_OPS_TESTUTIL_H */
