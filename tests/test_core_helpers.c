/*
 * tests/test_core_helpers.c — cmocka tests of the small shared helpers of core/: the FNV-1a hash
 * (core/hash.h), median and percentile (core/stats.h), strict UTF-8 (core/utf8.h).
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

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_fnv1a_vectors),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
