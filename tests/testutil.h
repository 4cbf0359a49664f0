/*
 * tests/testutil.h — the temporary directory that every file-writing cmocka test needs.
 *
 *   #define TU_PREFIX "test_ckpt_commit"      (optional; names /tmp/<prefix>_XXXXXX)
 *   #include "tests/testutil.h"
 *   ... cmocka_run_group_tests(tests, tu_setup, tu_teardown)            one dir for the group
 *   ... cmocka_unit_test_setup_teardown(test_x, tu_setup, tu_teardown)  a fresh dir per test
 *   then tu_dir is the directory, tu_path(buf, sizeof buf, "name") a path inside it.
 *
 * Removal goes through fs_remove_tree (core/fs.h: nftw, never following symbolic links), not
 * system("rm -rf"), so a path with a quote in it cannot run a command. MT_KEEP_TEST_FILES=1 keeps
 * the directory for debugging (its path is printed). Header-only: each test is one file.
 */
#ifndef MT_TESTUTIL_H
#define MT_TESTUTIL_H

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

#endif /* MT_TESTUTIL_H */
