/*
 * tests/test_failslow.c — cmocka tests of sched/failslow (the fail-slow rounds): a steady 2x rank
 * is blamed within the majority of 5 rounds, with its mesh group; a spread within the samples'
 * own noise flags nothing; a rank slow in only 2 of 5 rounds is not the degrader.
 *
 * The samples are generated here from a seeded LCG with known mean and spread; the groups expected
 * follow from the mesh formula rank = tp_rank + tp·(cp_rank + cp·(dp_rank + dp·pp_rank)).
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <math.h>
#include <string.h>

#include "sched/failslow.h"

static uint64_t g_lcg = 12345;
static double uniform(void) { /* [0, 1) */
    g_lcg = g_lcg * 6364136223846793005ULL + 1442695040888963407ULL;
    return (double)(g_lcg >> 11) * (1.0 / 9007199254740992.0);
}

/* Feed one round: each rank 100 samples of base·factor(rank)·(1 ± jitter); returns fsl_tick's. */
static int feed_round(fsl_state *s, int world, const double *factor, double jitter, double *t,
                      fsl_round *r, fsl_verdict *v) {
    for (int k = 0; k < 100; k++)
        for (int i = 0; i < world; i++)
            fsl_sample(s, i, 10.0 * factor[i] * (1.0 + jitter * (2 * uniform() - 1)));
    *t += 10.0;
    return fsl_tick(s, *t, r, v);
}

static void test_dp4_slow_rank(void **state) {
    (void)state;
    static fsl_state s;
    static fsl_round r;
    static fsl_verdict v;
    fsl_opts o;
    fsl_opts_default(&o);
    stk_layout L = {1, 1, 1, 4, 1};
    double t = 0, f[4] = {1, 1, 2, 1};
    fsl_init(&s, &o, &L, 4, t);
    assert_int_equal(fsl_tick(&s, 5.0, &r, &v), 0); /* mid-round */
    assert_int_equal(feed_round(&s, 4, f, 0.2, &t, &r, &v), 1);
    assert_int_equal(r.slowest, 2);
    assert_true(r.ratio > 1.8 && r.ratio < 2.2);
    assert_true(r.flagged);
    assert_string_equal(r.kind, "rank"); /* dp 4: the only group holding rank 2 is the job */
    assert_int_equal(feed_round(&s, 4, f, 0.2, &t, &r, &v), 1);
    assert_int_equal(feed_round(&s, 4, f, 0.2, &t, &r, &v), 2); /* 3 of 5: the majority */
    assert_int_equal(v.nblame, 1);
    assert_int_equal(v.blame[0], 2);
    assert_int_equal(v.flagged_rounds, 3);
    assert_non_null(strstr(v.text, "rank 2 slowest in 3 of 3"));
    assert_int_equal(feed_round(&s, 4, f, 0.2, &t, &r, &v), 1); /* once per attempt */
}

static void test_tp2pp2dp2_group(void **state) {
    (void)state;
    static fsl_state s;
    static fsl_round r;
    static fsl_verdict v;
    fsl_opts o;
    fsl_opts_default(&o);
    stk_layout L = {2, 1, 2, 2, 1};
    double t = 0, f[8] = {1, 1, 1, 1, 1, 2, 1, 1};
    fsl_init(&s, &o, &L, 8, t);
    int rc = 0;
    for (int k = 0; k < 3; k++) rc = feed_round(&s, 8, f, 0.1, &t, &r, &v);
    assert_int_equal(rc, 2);
    assert_string_equal(v.kind, "tp"); /* rank 5 = tp 1 of the pair (4, 5) */
    assert_int_equal(v.nblame, 2);
    assert_int_equal(v.blame[0], 4);
    assert_int_equal(v.blame[1], 5);
}

static void test_noise_guard(void **state) {
    (void)state;
    static fsl_state s;
    static fsl_round r;
    static fsl_verdict v;
    fsl_opts o;
    fsl_opts_default(&o);
    stk_layout L = {1, 1, 1, 4, 1};
    /* rank 1 at 1.35x, but every rank's steps vary by ±95% (cv ≈ 0.55): within the noise */
    double t = 0, f[4] = {1, 1.35, 1, 1};
    fsl_init(&s, &o, &L, 4, t);
    for (int k = 0; k < 5; k++) {
        assert_int_equal(feed_round(&s, 4, f, 0.95, &t, &r, &v), 1);
        assert_true(r.noise > 0.3);
        assert_true(r.threshold > r.ratio || !r.flagged);
        assert_false(r.flagged);
    }
    /* equal ranks with small noise: never flagged in 5 rounds */
    double g[4] = {1, 1, 1, 1};
    fsl_init(&s, &o, &L, 4, t);
    for (int k = 0; k < 5; k++) {
        assert_int_equal(feed_round(&s, 4, g, 0.2, &t, &r, &v), 1);
        assert_false(r.flagged);
    }
}

static void test_minority_not_blamed(void **state) {
    (void)state;
    static fsl_state s;
    static fsl_round r;
    static fsl_verdict v;
    fsl_opts o;
    fsl_opts_default(&o);
    stk_layout L = {1, 1, 1, 4, 1};
    double t = 0, slow[4] = {1, 1, 1, 3}, ok[4] = {1, 1, 1, 1};
    fsl_init(&s, &o, &L, 4, t);
    const double *plan[5] = {slow, ok, ok, slow, ok}; /* slow in 2 of 5 */
    for (int k = 0; k < 5; k++) assert_int_equal(feed_round(&s, 4, plan[k], 0.1, &t, &r, &v), 1);
    /* a rank with too few samples does not count */
    fsl_init(&s, &o, &L, 4, t);
    fsl_sample(&s, 0, 10), fsl_sample(&s, 1, 10), fsl_sample(&s, 2, 50);
    t += 10;
    assert_int_equal(fsl_tick(&s, t, &r, &v), 1);
    assert_int_equal(r.nranks, 0);
    assert_false(r.flagged);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_dp4_slow_rank),
        cmocka_unit_test(test_tp2pp2dp2_group),
        cmocka_unit_test(test_noise_guard),
        cmocka_unit_test(test_minority_not_blamed),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
