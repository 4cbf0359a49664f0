/*
 * tests/testutil.h — the temporary directory that every file-writing cmocka test needs, and the
 * small helpers such tests kept copying (read a whole file, reproducible bytes and numbers, the
 * bitwise CRC-32C that checkpoint checksums are checked against).
 *
 *   #define TU_PREFIX "test_ckpt_commit"      (optional; names /tmp/<prefix>_XXXXXX)
 *   #include "tests/testutil.h"
 *   ... cmocka_run_group_tests(tests, tu_setup, tu_teardown)            one dir for the group
 *   ... cmocka_unit_test_setup_teardown(test_x, tu_setup, tu_teardown)  a fresh dir per test
 *   then tu_dir is the directory, tu_path(buf, sizeof buf, "name") a path inside it.
 *   tu_slurp(path, &len)     the whole file (malloc'd, NUL-terminated), or the test fails
 *   tu_fill(p, n, seed)      n reproducible pseudo-random bytes
 *   tu_rand()                the next of a fixed xorshift64* sequence (32 bits)
 *   tu_crc32c_bitwise(p, n)  CRC-32C from its definition, the reference for ckpt's checksums
 * Include it after <cmocka.h> (tu_slurp asserts with cmocka).
 *
 * Removal goes through fs_remove_tree (core/fs.h: nftw, never following symbolic links), not
 * system("rm -rf"), so a path with a quote in it cannot run a command. MT_KEEP_TEST_FILES=1 keeps
 * the directory for debugging (its path is printed). Header-only: each test is one file.
 */
#ifndef MT_TESTUTIL_H
#define MT_TESTUTIL_H

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#include "core/fs.h"

#ifndef TU_PREFIX
#define TU_PREFIX "minitrain_test"
#endif
#define TU_DIR_MAX 256

/* The directory of the running test (or group), set by tu_setup. */
static char tu_dir[TU_DIR_MAX];

/* A fresh directory /tmp/<prefix>_XXXXXX in buf. Returns 0, or -1 (the reason printed). */
static inline int tu_mkdtemp(char *buf, size_t len, const char *prefix) {
    snprintf(buf, len, "/tmp/%s_XXXXXX", prefix);
    if (mkdtemp(buf) == NULL) {
        perror("mkdtemp");
        return -1;
    }
    return 0;
}

/* Remove dir and everything under it; kept when MT_KEEP_TEST_FILES is set. Returns 0 or -1. */
static inline int tu_rmtree(const char *dir) {
    if (getenv("MT_KEEP_TEST_FILES") != NULL) {
        fprintf(stderr, "(test files kept in %s)\n", dir);
        return 0;
    }
    char err[1024];
    if (fs_remove_tree(dir, err, sizeof err) != 0) {
        fprintf(stderr, "%s\n", err);
        return -1;
    }
    return 0;
}

/* cmocka setup / teardown around tu_dir. */
static inline int tu_setup(void **state) {
    (void)state;
    return tu_mkdtemp(tu_dir, sizeof tu_dir, TU_PREFIX);
}

static inline int tu_teardown(void **state) {
    (void)state;
    return tu_rmtree(tu_dir);
}

/* tu_dir/name into buf; returns buf. */
static inline char *tu_path(char *buf, size_t len, const char *name) {
    snprintf(buf, len, "%s/%s", tu_dir, name);
    return buf;
}

/* The whole file at path in a malloc'd buffer with a NUL after its *len bytes (so text can be
 * searched as a string); fails the running test when the file cannot be opened or read. Plain
 * stdio on purpose: the tests of core/fs.h must not read their results back through it. */
static inline void *tu_slurp(const char *path, size_t *len) {
    FILE *fp = fopen(path, "rb");
    assert_non_null(fp);
    fseek(fp, 0, SEEK_END);
    long n = ftell(fp);
    fseek(fp, 0, SEEK_SET);
    unsigned char *buf = malloc((size_t)n + 1);
    assert_non_null(buf);
    assert_int_equal(fread(buf, 1, (size_t)n, fp), (size_t)n);
    fclose(fp);
    buf[n] = 0;
    *len = (size_t)n;
    return buf;
}

/* n pseudo-random bytes from seed: the top byte of a 32-bit linear congruential generator
 * (Numerical Recipes' constants 1664525, 1013904223) — the same bytes for the same seed. */
static inline void tu_fill(unsigned char *p, size_t n, uint32_t seed) {
    for (size_t i = 0; i < n; i++) {
        seed = seed * 1664525u + 1013904223u;
        p[i] = (unsigned char)(seed >> 24);
    }
}

/* xorshift64* (Vigna 2016), high 32 bits; one fixed sequence per test binary, so a failure
 * reproduces. */
static uint64_t tu_rand_state = 0x9e3779b97f4a7c15ull;
static inline uint32_t tu_rand(void) {
    tu_rand_state ^= tu_rand_state >> 12;
    tu_rand_state ^= tu_rand_state << 25;
    tu_rand_state ^= tu_rand_state >> 27;
    return (uint32_t)((tu_rand_state * 2685821657736338717ull) >> 32);
}

/* CRC-32C (Castagnoli) straight from the definition, one bit at a time with the reflected
 * polynomial 0x82F63B78, initial value and final xor 0xFFFFFFFF (RFC 3720 §B.4): independent of
 * ckpt's table-driven and SSE4.2 engines, which the tests compare with it. */
static inline uint32_t tu_crc32c_bitwise(const unsigned char *p, size_t n) {
    uint32_t c = 0xFFFFFFFFu;
    for (size_t i = 0; i < n; i++) {
        c ^= p[i];
        for (int k = 0; k < 8; k++) c = (c >> 1) ^ (0x82F63B78u & (0u - (c & 1u)));
    }
    return ~c;
}

#endif /* MT_TESTUTIL_H */
