/*
 * tests/test_fs.c — cmocka tests of core/fs: atomic writes (plain and as a stdio stream), copy,
 * read, mkdir -p, remove tree, the rule for user-named outputs (fs_check_output).
 *
 * Independent checks: contents are read back here with stdio and compared byte for byte with
 * what was written; "no partial file left" is checked by listing the directory here; the tree
 * removal is checked with lstat, including that a symbolic link's target outside the tree
 * survives; error paths are checked for the message naming the path and for errno.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <dirent.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "core/fs.h"

#define TU_PREFIX "test_fs"
#include "tests/testutil.h"

/* Number of entries of dir (without . and ..). */
static int count_entries(const char *dir) {
    DIR *d = opendir(dir);
    assert_non_null(d);
    int n = 0;
    struct dirent *e;
    while ((e = readdir(d)) != NULL)
        if (strcmp(e->d_name, ".") != 0 && strcmp(e->d_name, "..") != 0) n++;
    closedir(d);
    return n;
}

static int exists(const char *path) {
    struct stat st;
    return lstat(path, &st) == 0;
}

static void test_atomic_write_replace_and_abort(void **state) {
    (void)state;
    char dir[512], path[600], err[1024];
    tu_path(dir, sizeof dir, "w");
    assert_int_equal(fs_mkdir_p(dir, err, sizeof err), 0);
    snprintf(path, sizeof path, "%s/f.bin", dir);
    assert_int_equal(fs_write_atomic(path, "first", 5, err, sizeof err), 0);
    size_t n;
    unsigned char *got = tu_slurp(path, &n);
    assert_int_equal(n, 5);
    assert_memory_equal(got, "first", 5);
    free(got);
    /* a replacement written in pieces is atomic: the old file is whole until the commit */
    fs_afile a;
    assert_int_equal(fs_afile_open(&a, path, err, sizeof err), 0);
    assert_int_equal(fs_afile_write(&a, "second ", 7, err, sizeof err), 0);
    assert_int_equal(fs_afile_write(&a, "version", 7, err, sizeof err), 0);
    assert_int_equal(count_entries(dir), 2); /* f.bin and its partial file */
    got = tu_slurp(path, &n);
    assert_int_equal(n, 5);
    assert_memory_equal(got, "first", 5);
    free(got);
    assert_int_equal(fs_afile_commit(&a, err, sizeof err), 0);
    got = tu_slurp(path, &n);
    assert_int_equal(n, 14);
    assert_memory_equal(got, "second version", 14);
    free(got);
    assert_int_equal(count_entries(dir), 1);
    /* an aborted write leaves the previous file and no partial file */
    assert_int_equal(fs_afile_open(&a, path, err, sizeof err), 0);
    assert_int_equal(fs_afile_write(&a, "x", 1, err, sizeof err), 0);
    fs_afile_abort(&a);
    fs_afile_abort(&a); /* twice is fine */
    assert_int_equal(count_entries(dir), 1);
    got = tu_slurp(path, &n);
    assert_int_equal(n, 14);
    free(got);
    /* a parent that is a regular file: ENOTDIR, message naming the path */
    char bad[700];
    snprintf(bad, sizeof bad, "%s/sub/g.bin", path);
    errno = 0;
    assert_int_equal(fs_write_atomic(bad, "y", 1, err, sizeof err), -1);
    assert_int_equal(errno, ENOTDIR);
    assert_non_null(strstr(err, bad));
    assert_non_null(strstr(err, strerror(ENOTDIR)));
    assert_int_equal(fs_write_atomic("", "y", 1, err, sizeof err), -1);
}

static void test_stream(void **state) {
    (void)state;
    char dir[512], path[600], err[1024];
    tu_path(dir, sizeof dir, "s");
    assert_int_equal(fs_mkdir_p(dir, err, sizeof err), 0);
    snprintf(path, sizeof path, "%s/out.txt", dir);
    fs_afile a;
    FILE *f = fs_stream_open(&a, path, err, sizeof err);
    assert_non_null(f);
    for (int i = 0; i < 1000; i++) fprintf(f, "line %d\n", i);
    assert_false(exists(path)); /* nothing under the final name before the commit */
    assert_int_equal(fs_stream_commit(&a, f, err, sizeof err), 0);
    size_t n;
    unsigned char *got = tu_slurp(path, &n);
    char want[16];
    snprintf(want, sizeof want, "line %d\n", 999);
    assert_true(n > strlen(want));
    assert_memory_equal(got + n - strlen(want), want, strlen(want));
    assert_memory_equal(got, "line 0\nline 1\n", 14);
    free(got);
    assert_int_equal(count_entries(dir), 1);
    /* an aborted stream leaves the committed file alone and no partial file */
    f = fs_stream_open(&a, path, err, sizeof err);
    assert_non_null(f);
    fputs("garbage", f);
    fs_stream_abort(&a, f);
    assert_int_equal(count_entries(dir), 1);
    got = tu_slurp(path, &n);
    assert_memory_equal(got, "line 0\n", 7);
    free(got);
}

static void test_copy_and_read(void **state) {
    (void)state;
    const size_t n = ((size_t)9 << 20) / 2; /* 4.5 MiB: crosses the 4 MiB copy chunks */
    unsigned char *buf = malloc(n);
    tu_fill(buf, n, 7);
    char src[512], dst[512], err[1024];
    tu_path(src, sizeof src, "src.bin");
    tu_path(dst, sizeof dst, "dst.bin");
    assert_int_equal(fs_write_atomic(src, buf, n, err, sizeof err), 0);
    assert_int_equal(fs_copy_file(src, dst, err, sizeof err), 0);
    size_t m;
    unsigned char *got = tu_slurp(dst, &m);
    assert_int_equal(m, n);
    assert_memory_equal(got, buf, n);
    free(got);
    /* fs_read_file: whole file NUL-terminated, refusals named */
    char *text = NULL;
    size_t len = 0;
    assert_int_equal(fs_read_file(src, n, &text, &len, err, sizeof err), 0);
    assert_int_equal(len, n);
    assert_memory_equal(text, buf, n);
    assert_int_equal(text[n], 0);
    free(text);
    assert_int_equal(fs_read_file(src, n - 1, &text, &len, err, sizeof err), -1);
    assert_null(text);
    assert_non_null(strstr(err, src));
    assert_int_equal(fs_read_file(tu_dir, 100, &text, NULL, err, sizeof err), -1);
    assert_non_null(strstr(err, "not a readable regular file"));
    /* copying a missing file fails naming it and creates nothing */
    char missing[512], out[512];
    tu_path(missing, sizeof missing, "missing.bin");
    tu_path(out, sizeof out, "out.bin");
    assert_int_equal(fs_copy_file(missing, out, err, sizeof err), -1);
    assert_non_null(strstr(err, missing));
    assert_false(exists(out));
    free(buf);
}

static void test_mkdir_p(void **state) {
    (void)state;
    char dir[512], err[1024], file[600];
    tu_path(dir, sizeof dir, "a/b/c/");
    assert_int_equal(fs_mkdir_p(dir, err, sizeof err), 0);
    struct stat st;
    assert_int_equal(stat(dir, &st), 0);
    assert_true(S_ISDIR(st.st_mode));
    assert_int_equal(fs_mkdir_p(dir, err, sizeof err), 0); /* existing: fine */
    snprintf(file, sizeof file, "%s/plain", dir);
    assert_int_equal(fs_write_atomic(file, "p", 1, err, sizeof err), 0);
    errno = 0;
    assert_int_equal(fs_mkdir_p(file, err, sizeof err), -1); /* the path is a file */
    assert_int_equal(errno, ENOTDIR);
    assert_non_null(strstr(err, "is not a directory"));
    char below[700];
    snprintf(below, sizeof below, "%s/x/y", file); /* a component is a file */
    assert_int_equal(fs_mkdir_p(below, NULL, 0), -1);
    assert_int_equal(errno, ENOTDIR);
    assert_int_equal(fs_mkdir_p("", err, sizeof err), -1);
}

static void test_remove_tree(void **state) {
    (void)state;
    char root[512], outside[512], keep[600], p[700], err[1024];
    tu_path(root, sizeof root, "tree");
    tu_path(outside, sizeof outside, "outside");
    assert_int_equal(fs_mkdir_p(outside, err, sizeof err), 0);
    snprintf(keep, sizeof keep, "%s/keep.txt", outside);
    assert_int_equal(fs_write_atomic(keep, "k", 1, err, sizeof err), 0);
    const char *dirs[] = {"d1", "d1/d2", "d1/d2/d3", "e"};
    for (int i = 0; i < 4; i++) {
        snprintf(p, sizeof p, "%s/%s", root, dirs[i]);
        assert_int_equal(fs_mkdir_p(p, err, sizeof err), 0);
        snprintf(p, sizeof p, "%s/%s/f", root, dirs[i]);
        assert_int_equal(fs_write_atomic(p, "f", 1, err, sizeof err), 0);
    }
    snprintf(p, sizeof p, "%s/d1/link", root); /* a link to a directory outside the tree */
    assert_int_equal(symlink(outside, p), 0);
    assert_int_equal(fs_remove_tree(root, err, sizeof err), 0);
    assert_false(exists(root));
    assert_true(exists(keep)); /* the link was removed, not followed */
    assert_int_equal(fs_remove_tree(root, err, sizeof err), 0); /* missing: success */
    assert_int_equal(fs_remove_tree(keep, err, sizeof err), 0); /* a plain file */
    assert_false(exists(keep));
    /* a path that does not fit */
    char longp[FS_PATH_MAX + 16];
    memset(longp, 'a', sizeof longp - 1);
    longp[sizeof longp - 1] = 0;
    assert_int_equal(fs_join(p, 64, tu_dir, longp, err, sizeof err), -1);
    assert_non_null(strstr(err, "path too long"));
}

/* fs_check_output: the one rule for a user-named output */
static void test_check_output(void **state) {
    (void)state;
    char prot[512], in_prot[600], plain[512], fifo[512], link[512], err[2048], deep[600];
    tu_path(prot, sizeof prot, "keep/ckpt");
    assert_int_equal(fs_mkdir_p(prot, err, sizeof err), 0);
    snprintf(in_prot, sizeof in_prot, "%s/../ckpt/./x.svg", prot); /* inside, spelled around */
    tu_path(plain, sizeof plain, "plain.txt");
    assert_int_equal(fs_write_atomic(plain, "p", 1, err, sizeof err), 0);
    const char *protect[] = {prot, plain, NULL};
    char fresh[512];
    tu_path(fresh, sizeof fresh, "fresh.txt");
    assert_int_equal(fs_check_output(fresh, protect, 0, err, sizeof err), FS_OUT_ATOMIC);
    assert_int_equal(fs_check_output(in_prot, protect, 0, err, sizeof err), -1);
    assert_non_null(strstr(err, "lies inside"));
    assert_int_equal(fs_check_output(plain, protect, 0, err, sizeof err), -1);
    assert_int_equal(fs_check_output(plain, NULL, 0, err, sizeof err), FS_OUT_ATOMIC);
    tu_path(fifo, sizeof fifo, "fifo");
    assert_int_equal(mkfifo(fifo, 0600), 0);
    assert_int_equal(fs_check_output(fifo, NULL, 0, err, sizeof err), -1);
    assert_non_null(strstr(err, "a FIFO"));
    assert_int_equal(fs_check_output(fifo, NULL, FS_OUT_ALLOW_IN_PLACE, err, sizeof err),
                     FS_OUT_IN_PLACE);
    tu_path(link, sizeof link, "link");
    assert_int_equal(symlink(plain, link), 0);
    assert_int_equal(fs_check_output(link, NULL, FS_OUT_ALLOW_IN_PLACE, err, sizeof err), -1);
    assert_non_null(strstr(err, "symbolic link"));
    assert_int_equal(fs_check_output(tu_dir, NULL, 0, err, sizeof err), -1); /* a directory */
    snprintf(deep, sizeof deep, "%s/new/dirs/x", tu_dir);
    assert_int_equal(fs_check_output(deep, NULL, 0, err, sizeof err), -1); /* missing dir */
    assert_non_null(strstr(err, "cannot write into directory"));
    assert_int_equal(fs_check_output(deep, NULL, FS_OUT_MAKE_DIR, err, sizeof err), FS_OUT_ATOMIC);
    snprintf(deep, sizeof deep, "%s/new/x", plain); /* under a regular file: never creatable */
    assert_int_equal(fs_check_output(deep, NULL, FS_OUT_MAKE_DIR, err, sizeof err), -1);
    snprintf(deep, sizeof deep, "%s/new/x", prot); /* a new directory inside a protected one */
    assert_int_equal(fs_check_output(deep, protect, FS_OUT_MAKE_DIR, err, sizeof err), -1);
    assert_true(fs_same_file(plain, plain) && !fs_same_file(plain, fresh));
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_atomic_write_replace_and_abort),
        cmocka_unit_test(test_stream),
        cmocka_unit_test(test_copy_and_read),
        cmocka_unit_test(test_mkdir_p),
        cmocka_unit_test(test_remove_tree),
        cmocka_unit_test(test_check_output),
    };
    return cmocka_run_group_tests(tests, tu_setup, tu_teardown);
}
