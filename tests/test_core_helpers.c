/*
 * tests/test_core_helpers.c — cmocka tests of the small shared helpers of core/: the FNV-1a hash
 * (core/hash.h), the clocks' deadline (core/timer.h), median and percentile (core/stats.h),
 * strict UTF-8 (core/utf8.h).
 *
 * Independent references: the FNV-1a values are the published test vectors (draft-eastlake-fnv:
 * FNV-1a of "", "a", "foobar") plus all 256 byte values computed with Python's integers (the
 * command is above the test); a hash a file format stores (tokenizer.bin's checksum, a heartbeat
 * record's sum and host id) must keep exactly these values.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/hash.h"
#include "core/rng.h"
#include "core/stats.h"
#include "core/timer.h"
#include "core/utf8.h"

/* python3 -c "h=2166136261
 * for c in range(256): h=((h^c)*16777619)&0xffffffff
 * print(hex(h))"   (and the same with the 64-bit basis and prime) */
static void test_fnv1a_vectors(void **state) {
    (void)state;
    static const struct {
        const char *s;
        uint32_t h32;
        uint64_t h64;
    } v[] = {
        {"", 0x811c9dc5u, 0xcbf29ce484222325ull},
        {"a", 0xe40c292cu, 0xaf63dc4c8601ec8cull},
        {"foobar", 0xbf9cf968u, 0x85944171f73967e8ull},
    };
    for (size_t i = 0; i < sizeof v / sizeof v[0]; i++) {
        assert_int_equal(hash_fnv1a32(v[i].s, strlen(v[i].s)), v[i].h32);
        assert_int_equal(hash_fnv1a32_str(v[i].s), v[i].h32);
        assert_true(hash_fnv1a64(v[i].s, strlen(v[i].s)) == v[i].h64);
        assert_true(hash_fnv1a64_str(v[i].s) == v[i].h64);
    }
    uint8_t all[256];
    for (int i = 0; i < 256; i++) all[i] = (uint8_t)i;
    assert_int_equal(hash_fnv1a32(all, sizeof all), 0x90a458c5u);
    assert_true(hash_fnv1a64(all, sizeof all) == 0x4242dc5249c33625ull);
}

/* timer_deadline: a normalised timespec (0 <= tv_nsec < 1e9) lying after_s ahead of timer_now on
 * the same clock, including an after_s whose fraction carries into the seconds. */
static void test_timer_deadline(void **state) {
    (void)state;
    const double after[] = {0, 0.25, 0.999999999, 1.5, 7.75};
    for (size_t i = 0; i < sizeof after / sizeof after[0]; i++) {
        double t0 = timer_now();
        struct timespec d = timer_deadline(after[i]);
        double t1 = timer_now();
        assert_true(d.tv_nsec >= 0 && d.tv_nsec < 1000000000L);
        double at = (double)d.tv_sec + 1e-9 * (double)d.tv_nsec;
        assert_true(at >= t0 + after[i] - 1e-6 && at <= t1 + after[i] + 1e-6);
    }
    assert_true(timer_unix() > 1.6e9); /* after 2020: the real-time clock, not the monotonic one */
}

/* The nearest-rank percentile by its definition, without sorting: the smallest sample value x with
 * count(v <= x) >= q·n (q·n rounded up, at least 1). */
static double rank_reference(const double *v, size_t n, double q) {
    double need = ceil(q * (double)n), best = INFINITY;
    if (need < 1) need = 1;
    for (size_t i = 0; i < n; i++) {
        size_t le = 0;
        for (size_t j = 0; j < n; j++) le += v[j] <= v[i];
        if ((double)le >= need && v[i] < best) best = v[i];
    }
    return best;
}

/* stats_median / stats_percentile_sorted against their definitions on random samples with ties,
 * odd and even sizes; the median of an even sample is the mean of the two middle order statistics
 * (each found by rank_reference); the empty sample is NAN; stats_median_copy leaves its input. */
static void test_stats_order(void **state) {
    (void)state;
    rng_state r;
    rng_seed(&r, 23);
    for (size_t n = 1; n <= 40; n++) {
        double v[40], s[40], c[40];
        for (size_t i = 0; i < n; i++) v[i] = (double)(rng_u64(&r) % 17) - 8.5; /* ties */
        memcpy(s, v, sizeof v);
        memcpy(c, v, sizeof v);
        stats_sort(s, n);
        for (size_t i = 1; i < n; i++) assert_true(s[i - 1] <= s[i]);
        const double qs[] = {0, 0.05, 0.25, 0.5, 0.95, 1};
        for (size_t k = 0; k < sizeof qs / sizeof qs[0]; k++)
            assert_true(stats_percentile_sorted(s, n, qs[k]) == rank_reference(v, n, qs[k]));
        double lo = rank_reference(v, n, 0.5), want = lo;
        if (n % 2 == 0) { /* the order statistic after the lower median */
            double hi = INFINITY;
            for (size_t i = 0; i < n; i++) {
                size_t le = 0;
                for (size_t j = 0; j < n; j++) le += v[j] <= v[i];
                if (le >= n / 2 + 1 && v[i] < hi) hi = v[i];
            }
            want = 0.5 * (lo + hi);
        }
        assert_true(stats_median_copy(v, n) == want);
        assert_memory_equal(v, c, n * sizeof(double));
        assert_true(stats_median(c, n) == want);
    }
    double none[1] = {0};
    assert_true(isnan(stats_median(none, 0)) && isnan(stats_percentile_sorted(none, 0, 0.5)));
}

/* utf8_invalid_at / utf8_valid on the ill-formed classes of RFC 3629 §3-4 and Unicode Table 3-7
 * (overlong, surrogate, above U+10FFFF, stray continuation, truncated), each after a valid prefix
 * so the offset is checked; utf8_maximal_subpart on Unicode 15 §3.9's Table 3-8 example, whose
 * decoding is a, FFFD, FFFD, FFFD, b, FFFD, c, FFFD, FFFD, d (subparts 3, 2, 1, 1, 1, 1). */
static void test_utf8_strict(void **state) {
    (void)state;
    static const struct {
        const char *s;
        long bad;
    } v[] = {
        {"plain", -1}, {"\xE2\x82\xAC 20", -1}, {"\xF0\x9F\x98\x80", -1}, {"\xF4\x8F\xBF\xBF", -1},
        {"ab\xC0\x80", 2},          /* overlong NUL */
        {"a\xE0\x9F\xBF", 1},       /* overlong 3-byte */
        {"abc\xED\xA0\x80", 3},     /* surrogate U+D800 */
        {"\xF4\x90\x80\x80", 0},    /* U+110000 */
        {"x\xF5\x80\x80\x80", 1},   /* F5 never starts a sequence */
        {"xy\x80", 2},              /* stray continuation */
        {"\xE2\x82", 0},            /* truncated */
        {"ok\xE2\x82\xACok\xE2", 7},
    };
    for (size_t i = 0; i < sizeof v / sizeof v[0]; i++) {
        const uint8_t *s = (const uint8_t *)v[i].s;
        assert_int_equal(utf8_invalid_at(s, strlen(v[i].s)), v[i].bad);
        assert_int_equal(utf8_valid(s, strlen(v[i].s)), v[i].bad < 0);
    }
    static const uint8_t t38[] = {0x61, 0xF1, 0x80, 0x80, 0xE1, 0x80, 0xC2, 0x62, 0x80,
                                  0x63, 0x80, 0xBF, 0x64};
    const size_t want[] = {3, 2, 1, 1, 1, 1};
    size_t i = 0, k = 0, n_ascii = 0;
    while (i < sizeof t38) {
        int L = utf8_seq_len(t38 + i, sizeof t38 - i);
        if (L > 0) {
            i += (size_t)L;
            n_ascii++;
            continue;
        }
        assert_true(k < 6);
        size_t m = utf8_maximal_subpart(t38 + i, sizeof t38 - i);
        assert_int_equal(m, want[k++]);
        i += m;
    }
    assert_int_equal(k, 6);
    assert_int_equal(n_ascii, 4);
    /* an incomplete tail is held back; a complete or invalid one is not */
    assert_int_equal(utf8_incomplete_tail((const uint8_t *)"ab\xF0\x9F\x98", 5), 3);
    assert_int_equal(utf8_incomplete_tail((const uint8_t *)"ab\xF0\x9F\x98\x80", 6), 0);
    assert_int_equal(utf8_incomplete_tail((const uint8_t *)"ab\xED\xA0", 4), 0);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_fnv1a_vectors),
        cmocka_unit_test(test_timer_deadline),
        cmocka_unit_test(test_stats_order),
        cmocka_unit_test(test_utf8_strict),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
