/*
 * tests/test_memory.c — train/memory.h: the memory_limit parser (sizes with suffixes, auto from
 * the machine's physical memory, off, bad input named), the resident-set reader against memory
 * this test itself touches, and the formatter.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "train/memory.h"

static void test_limit_sizes(void **state) {
    (void)state;
    double b;
    char err[256];
    assert_int_equal(memory_limit_bytes("512M", 1, 0, &b, err, sizeof(err)), 0);
    assert_true(b == 512.0 * 1048576);
    assert_int_equal(memory_limit_bytes("1.5G", 1, 0, &b, err, sizeof(err)), 0);
    assert_true(b == 1.5 * 1073741824.0);
    assert_int_equal(memory_limit_bytes("6GB", 1, 0, &b, err, sizeof(err)), 0);
    assert_true(b == 6.0 * 1073741824.0);
    assert_int_equal(memory_limit_bytes("4096", 1, 0, &b, err, sizeof(err)), 0);
    assert_true(b == 4096);
    assert_int_equal(memory_limit_bytes("off", 1, 0, &b, err, sizeof(err)), 0);
    assert_true(b == 0);
    const char *bad[] = {"12Q", "-1G", "G", "", "1G2", "nan"};
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        assert_int_equal(memory_limit_bytes(bad[i], 1, 0, &b, err, sizeof(err)), -1);
        assert_non_null(strstr(err, "is not a size"));
    }
}

/* auto: physical memory (sysconf, an independent read: /proc/meminfo's MemTotal) shared by the
 * ranks on the node, or the device's memory when one is given */
static void test_limit_auto(void **state) {
    (void)state;
    double one, four, dev;
    char err[256];
    assert_int_equal(memory_limit_bytes("auto", 1, 0, &one, err, sizeof(err)), 0);
    assert_int_equal(memory_limit_bytes("auto", 4, 0, &four, err, sizeof(err)), 0);
    assert_true(one > 0 && four * 4 == one);
    FILE *f = fopen("/proc/meminfo", "r");
    assert_non_null(f);
    double kb = 0;
    char line[256];
    while (fgets(line, sizeof(line), f))
        if (sscanf(line, "MemTotal: %lf kB", &kb) == 1) break;
    fclose(f);
    assert_true(kb > 0 && one / (kb * 1024) > 0.99 && one / (kb * 1024) < 1.01);
    assert_int_equal(memory_limit_bytes("auto", 4, 80e9, &dev, err, sizeof(err)), 0);
    assert_true(dev == 80e9);
}

/* touching 64 MiB more raises the resident set and its peak by about that much */
static void test_rss(void **state) {
    (void)state;
    double before = memory_rss_bytes(0), peak0 = memory_rss_bytes(1);
    assert_true(before > 0 && peak0 >= before);
    size_t n = (size_t)64 << 20;
    char *p = malloc(n);
    assert_non_null(p);
    memset(p, 1, n);
    double after = memory_rss_bytes(0), peak1 = memory_rss_bytes(1);
    assert_true(after - before > 0.9 * n && after - before < 1.2 * n);
    assert_true(peak1 >= after);
    free(p);
}

static void test_format(void **state) {
    (void)state;
    char buf[32];
    assert_string_equal(memory_format(1.5 * 1073741824.0, buf, sizeof(buf)), "1.50 GiB");
    assert_string_equal(memory_format(3 * 1048576.0, buf, sizeof(buf)), "3.0 MiB");
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_limit_sizes),
        cmocka_unit_test(test_limit_auto),
        cmocka_unit_test(test_rss),
        cmocka_unit_test(test_format),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
