/*
 * tests/test_data.c — token shards and the data loader.
 *
 * Written shards are checked byte by byte with plain stdio reads (not the loader), windows are
 * checked against the source token array, bad files are hand-built headers, the shuffle is
 * checked to be a permutation per epoch, and a sparse file over 2 GiB checks 64-bit offsets
 * without using the disk space.
 */
#include <dirent.h>
#include <fcntl.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cmocka.h>

#include "text/data.h"

#define TU_PREFIX "test_data"
#include "tests/testutil.h"

/* a fresh directory under the test root */
static char *newdir(const char *name) {
    char *d = malloc(512);
    snprintf(d, 512, "%s/%s", tu_dir, name);
    assert_int_equal(mkdir(d, 0755), 0);
    return d;
}

/* remove a test's directory and what a failed test left in it */
static void rmdir_all(const char *d) { assert_int_equal(tu_rmtree(d), 0); }

static uint32_t *random_tokens(size_t n, uint32_t vocab) {
    uint32_t *t = malloc(n * sizeof(uint32_t) + 4);
    for (size_t i = 0; i < n; i++)
        t[i] = tu_rand() % vocab;
    return t;
}

static void write_shard(const char *dir, const char *name, const uint32_t *tok, size_t n,
                        int vocab) {
    char p[600], err[512];
    snprintf(p, sizeof(p), "%s/%s", dir, name);
    if (data_write_shard(p, tok, n, vocab, err, sizeof(err)) != 0)
        fail_msg("%s", err);
}

/* a raw shard with any header, written without the library */
static void write_raw(const char *path, int32_t magic, int32_t version, int32_t count,
                      size_t body_bytes) {
    FILE *f = fopen(path, "wb");
    assert_non_null(f);
    int32_t h[256] = {0};
    h[0] = magic, h[1] = version, h[2] = count;
    assert_int_equal(fwrite(h, 4, 256, f), 256);
    for (size_t i = 0; i < body_bytes; i++)
        fputc((int)(i % 7), f);
    fclose(f);
}

/* every window of a loader (shuffle off) equals the source stream */
static void check_windows(const data_loader *dl, const uint32_t *src, size_t n, int T) {
    assert_int_equal(data_loader_num_tokens(dl), n);
    uint64_t nwin = data_loader_num_windows(dl);
    assert_int_equal(nwin, (n - 1) / (size_t)T);
    int *x = malloc((size_t)T * sizeof(int)), *y = malloc((size_t)T * sizeof(int));
    for (uint64_t w = 0; w < nwin; w++) {
        data_loader_get(dl, w, 1, x, y);
        for (int t = 0; t < T; t++) {
            assert_int_equal(x[t], src[w * T + t]);
            assert_int_equal(y[t], src[w * T + t + 1]);
        }
    }
    free(x), free(y);
}

/* ---- tests ------------------------------------------------------------------------------ */

static void test_v1_shard_and_windows(void **state) {
    (void)state;
    char *d = newdir("v1");
    size_t n = 5003;
    uint32_t *tok = random_tokens(n, 1000);
    tok[7] = 999, tok[8] = 0;
    write_shard(d, "train_000.bin", tok, n, 1000);
    /* bytes on disk: llm.c header + uint16 little-endian tokens */
    char p[600];
    snprintf(p, sizeof(p), "%s/train_000.bin", d);
    FILE *f = fopen(p, "rb");
    int32_t h[256];
    assert_int_equal(fread(h, 4, 256, f), 256);
    assert_int_equal(h[0], 20240520), assert_int_equal(h[1], 1), assert_int_equal(h[2], n);
    uint16_t *body = malloc(n * 2 + 2);
    assert_int_equal(fread(body, 2, n + 1, f), n); /* exactly n tokens, nothing after */
    fclose(f);
    for (size_t i = 0; i < n; i++)
        assert_int_equal(body[i], tok[i]);

    data_loader dl;
    char err[512];
    int T = 16;
    if (data_loader_open(&dl, d, "train", T, 1, 0, err, sizeof(err)) != 0)
        fail_msg("%s", err);
    check_windows(&dl, tok, n, T);
    /* count > 1 equals single reads; sequence numbers wrap around epochs */
    int x[4 * 16], y[4 * 16], x1[16], y1[16];
    uint64_t nwin = data_loader_num_windows(&dl);
    data_loader_get(&dl, 3 * nwin + 10, 4, x, y);
    for (int b = 0; b < 4; b++) {
        data_loader_get(&dl, 10 + (uint64_t)b, 1, x1, y1);
        assert_memory_equal(x + b * T, x1, sizeof(x1));
        assert_memory_equal(y + b * T, y1, sizeof(y1));
    }
    assert_int_equal(data_loader_check_vocab(&dl, 1000, err, sizeof(err)), 0);
    assert_int_equal(data_loader_check_vocab(&dl, 999, err, sizeof(err)), -1);
    assert_non_null(strstr(err, p));
    data_loader_close(&dl);
    free(tok), free(body);
    rmdir_all(d);
    free(d);
}

static void test_v2_shard(void **state) {
    (void)state;
    char *d = newdir("v2");
    size_t n = 3001;
    int vocab = 70000;
    uint32_t *tok = random_tokens(n, (uint32_t)vocab);
    tok[0] = 69999, tok[1] = 65536, tok[2] = 65535;
    write_shard(d, "val_000.bin", tok, n, vocab);
    char p[600];
    snprintf(p, sizeof(p), "%s/val_000.bin", d);
    struct stat st;
    assert_int_equal(stat(p, &st), 0);
    assert_int_equal(st.st_size, 1024 + 4 * n); /* uint32 tokens */
    FILE *f = fopen(p, "rb");
    int32_t h[256];
    assert_int_equal(fread(h, 4, 256, f), 256);
    fclose(f);
    assert_int_equal(h[1], 2);
    data_loader dl;
    char err[512];
    if (data_loader_open(&dl, d, "val", 10, 1, 0, err, sizeof(err)) != 0)
        fail_msg("%s", err);
    check_windows(&dl, tok, n, 10);
    data_loader_close(&dl);
    /* vocab exactly 65536 still fits uint16 */
    for (int i = 0; i < 100; i++)
        tok[i] %= 65536;
    tok[0] = 65535;
    write_shard(d, "val_000.bin", tok, 100, 65536);
    assert_int_equal(stat(p, &st), 0);
    assert_int_equal(st.st_size, 1024 + 2 * 100);
    free(tok);
    rmdir_all(d);
    free(d);
}

static void test_multi_shard_straddle(void **state) {
    (void)state;
    char *d = newdir("multi");
    size_t sizes[] = {100, 0, 37, 250}, n = 387;
    uint32_t *all = random_tokens(n, 500);
    size_t off = 0;
    for (int k = 0; k < 4; k++) {
        char name[32];
        snprintf(name, sizeof(name), "train_%03d.bin", k);
        write_shard(d, name, all + off, sizes[k], 500);
        off += sizes[k];
    }
    write_shard(d, "val_000.bin", all, 50, 500); /* must not leak into the train split */
    data_loader dl;
    char err[512];
    if (data_loader_open(&dl, d, "train", 7, 1, 0, err, sizeof(err)) != 0)
        fail_msg("%s", err);
    check_windows(&dl, all, n, 7); /* window 14 = tokens 98..105 crosses 000 -> 002 */
    data_loader_close(&dl);
    free(all);
    rmdir_all(d);
    free(d);
}

static void test_glob_patterns(void **state) {
    (void)state;
    char *d0 = newdir("val"), *d = malloc(600); /* "val" in a directory name is left alone */
    snprintf(d, 600, "%s/llmc", d0);
    assert_int_equal(mkdir(d, 0755), 0);
    uint32_t *a = random_tokens(300, 50257), *b = random_tokens(200, 50257);
    write_shard(d, "fineweb_train_000001.bin", a, 150, 50257);
    write_shard(d, "fineweb_train_000002.bin", a + 150, 150, 50257);
    write_shard(d, "fineweb_val_000000.bin", b, 200, 50257);
    char pat[600], err[512];
    data_loader dl;
    snprintf(pat, sizeof(pat), "%s/fineweb_train_*.bin", d);
    if (data_loader_open(&dl, pat, "train", 8, 1, 0, err, sizeof(err)) != 0)
        fail_msg("%s", err);
    check_windows(&dl, a, 300, 8);
    data_loader_close(&dl);
    if (data_loader_open(&dl, pat, "val", 8, 1, 0, err, sizeof(err)) != 0)
        fail_msg("%s", err);
    check_windows(&dl, b, 200, 8); /* "train" in the pattern became "val" */
    data_loader_close(&dl);
    snprintf(pat, sizeof(pat), "%s/fineweb_{split}_*.bin", d);
    if (data_loader_open(&dl, pat, "val", 8, 1, 0, err, sizeof(err)) != 0)
        fail_msg("%s", err);
    assert_int_equal(data_loader_num_tokens(&dl), 200);
    data_loader_close(&dl);
    snprintf(pat, sizeof(pat), "%s/nothing_*.bin", d);
    assert_int_equal(data_loader_open(&dl, pat, "train", 8, 1, 0, err, sizeof(err)), -1);
    assert_non_null(strstr(err, pat));
    free(a), free(b);
    rmdir_all(d0);
    free(d), free(d0);
}

/* open DIR (split train) must fail and the message must hold the path and the needle */
static void expect_open_error(const char *dir, const char *path, int T, const char *needle) {
    data_loader dl;
    char err[1024] = "";
    assert_int_equal(data_loader_open(&dl, dir, "train", T, 1, 1, err, sizeof(err)), -1);
    if (strstr(err, path) == NULL || strstr(err, needle) == NULL)
        fail_msg("expected '%s' and '%s' in: %s", path, needle, err);
    data_loader_close(&dl); /* safe on a failed open */
}

static void test_bad_files(void **state) {
    (void)state;
    char *d = newdir("bad");
    char p[600];
    snprintf(p, sizeof(p), "%s/train_000.bin", d);

    FILE *f = fopen(p, "wb");
    fwrite("0123456789", 1, 10, f);
    fclose(f);
    expect_open_error(d, p, 4, "truncated");
    write_raw(p, 12345, 1, 10, 20);
    expect_open_error(d, p, 4, "magic");
    write_raw(p, 20240520, 3, 10, 40);
    expect_open_error(d, p, 4, "version");
    write_raw(p, 20240520, 1, 50, 80);
    expect_open_error(d, p, 4, "header says 50 tokens but file holds 40");
    write_raw(p, 20240520, 1, 10, 40); /* more bytes than the header's count */
    expect_open_error(d, p, 4, "header says 10 tokens but file holds 20");
    write_raw(p, 20240520, 2, 50, 80);
    expect_open_error(d, p, 4, "header says 50 tokens but file holds 20");
    write_raw(p, 20240520, 1, -3, 0);
    expect_open_error(d, p, 4, "negative");
    write_raw(p, 20240520, 1, 10, 20); /* valid, but 10 tokens < T+1 = 17 */
    expect_open_error(d, p, 16, "17");

    /* a bad shard after a good one is the one named */
    uint32_t *tok = random_tokens(1000, 100);
    write_shard(d, "train_000.bin", tok, 1000, 100);
    char p1[600];
    snprintf(p1, sizeof(p1), "%s/train_001.bin", d);
    write_raw(p1, 20240520, 1, 10, 19);
    expect_open_error(d, p1, 4, "holds 9 and a fraction");
    unlink(p1);

    /* B*T+1 check: 1000 tokens, T=16: B=62 needs 993 (fits), B=63 needs 1009 (does not) */
    data_loader dl;
    char err[1024];
    assert_int_equal(data_loader_open(&dl, d, "train", 16, 1, 1, err, sizeof(err)), 0);
    assert_int_equal(data_loader_check_fit(&dl, 62, err, sizeof(err)), 0);
    assert_int_equal(data_loader_check_fit(&dl, 63, err, sizeof(err)), -1);
    if (!strstr(err, p) || !strstr(err, "1000") || !strstr(err, "1009"))
        fail_msg("%s", err);
    data_loader_close(&dl);

    /* the writer refuses out-of-vocab tokens and leaves nothing behind */
    char p2[600];
    snprintf(p2, sizeof(p2), "%s/val_000.bin", d);
    tok[500] = 100;
    assert_int_equal(data_write_shard(p2, tok, 1000, 100, err, sizeof(err)), -1);
    assert_non_null(strstr(err, p2));
    assert_int_equal(access(p2, F_OK), -1);
    free(tok);
    rmdir_all(d);
    free(d);
}

/* a loader over nwin windows: T = 1, nwin + 1 tokens (token i = i) */
static void open_nwin(data_loader *dl, const char *d, uint64_t nwin, uint64_t seed) {
    uint32_t *tok = malloc((nwin + 1) * sizeof(uint32_t));
    for (uint64_t i = 0; i <= nwin; i++)
        tok[i] = (uint32_t)i;
    write_shard(d, "train_000.bin", tok, nwin + 1, (int)nwin + 1);
    free(tok);
    char err[512];
    if (data_loader_open(dl, d, "train", 1, seed, 1, err, sizeof(err)) != 0)
        fail_msg("%s", err);
    assert_int_equal(data_loader_num_windows(dl), nwin);
}

static void test_shuffle_is_permutation(void **state) {
    (void)state;
    char *d = newdir("perm");
    uint64_t sizes[] = {1, 2, 3, 4, 5, 7, 16, 17, 100, 257, 1000, 4097};
    for (size_t s = 0; s < sizeof(sizes) / sizeof(sizes[0]); s++) {
        uint64_t nwin = sizes[s];
        data_loader dl;
        open_nwin(&dl, d, nwin, 42 + s);
        uint32_t *seen = calloc(nwin, sizeof(uint32_t));
        for (uint64_t e = 0; e < 3; e++) {
            memset(seen, 0, nwin * sizeof(uint32_t));
            uint64_t fixed = 0;
            for (uint64_t i = 0; i < nwin; i++) {
                uint64_t w = data_loader_window(&dl, e * nwin + i);
                assert_true(w < nwin);
                seen[w]++;
                fixed += w == i;
                /* the tokens read are those of window w (token value = index here) */
                int x, y;
                data_loader_get(&dl, e * nwin + i, 1, &x, &y);
                assert_int_equal(x, w);
                assert_int_equal(y, w + 1);
            }
            for (uint64_t w = 0; w < nwin; w++)
                assert_int_equal(seen[w], 1);
            if (nwin >= 100)
                assert_true(fixed < nwin / 20); /* ~1 expected for a shuffle */
        }
        free(seen);
        data_loader_close(&dl);
    }
    rmdir_all(d);
    free(d);
}

static void test_determinism(void **state) {
    (void)state;
    char *d = newdir("det");
    const uint64_t nwin = 500;
    data_loader a, b, c;
    open_nwin(&a, d, nwin, 7);
    open_nwin(&b, d, nwin, 7);
    open_nwin(&c, d, nwin, 8);
    uint64_t diff_seed = 0, diff_epoch = 0;
    for (uint64_t i = 0; i < 3 * nwin; i++)
        assert_int_equal(data_loader_window(&a, i), data_loader_window(&b, i));
    for (uint64_t i = 0; i < nwin; i++) {
        diff_seed += data_loader_window(&a, i) != data_loader_window(&c, i);
        diff_epoch += data_loader_window(&a, i) != data_loader_window(&a, nwin + i);
    }
    assert_true(diff_seed > nwin / 2);
    assert_true(diff_epoch > nwin / 2);
    /* shuffle off is the identity (validation order) */
    data_loader v;
    char err[512];
    assert_int_equal(data_loader_open(&v, d, "train", 1, 7, 0, err, sizeof(err)), 0);
    for (uint64_t i = 0; i < 2 * nwin; i++)
        assert_int_equal(data_loader_window(&v, i), i % nwin);
    data_loader_close(&a), data_loader_close(&b), data_loader_close(&c), data_loader_close(&v);
    rmdir_all(d);
    free(d);
}

/* A shard over 2 GiB, made sparse: only the header and the last tokens are real bytes. */
static void test_large_sparse_shard(void **state) {
    (void)state;
    char *d = newdir("big");
    char p[600];
    snprintf(p, sizeof(p), "%s/train_000.bin", d);
    const int64_t n = 1100000000; /* uint16 -> 2.2e9 bytes of tokens, past 2^31 */
    const int64_t tail = 1000;
    int fd = open(p, O_CREAT | O_WRONLY | O_TRUNC, 0644);
    assert_true(fd >= 0);
    int32_t h[256] = {20240520, 1, (int32_t)n};
    assert_int_equal(pwrite(fd, h, sizeof(h), 0), (ssize_t)sizeof(h));
    uint16_t *t = malloc(tail * sizeof(uint16_t));
    for (int64_t i = 0; i < tail; i++)
        t[i] = (uint16_t)(((n - tail + i) * 7 + 3) % 60000);
    if (ftruncate(fd, 1024 + 2 * n) != 0 ||
        pwrite(fd, t, tail * 2, (off_t)(1024 + 2 * (n - tail))) != tail * 2) {
        close(fd);
        rmdir_all(d);
        skip(); /* file system without sparse files or large files */
    }
    close(fd);
    data_loader dl;
    char err[512];
    const int T = 64;
    if (data_loader_open(&dl, d, "train", T, 1, 0, err, sizeof(err)) != 0)
        fail_msg("%s", err);
    assert_int_equal(data_loader_num_tokens(&dl), n);
    uint64_t nwin = data_loader_num_windows(&dl);
    assert_int_equal(nwin, (uint64_t)(n - 1) / T);
    int x[64], y[64];
    data_loader_get(&dl, nwin - 1, 1, x, y); /* last window: tokens (nwin-1)*T .. nwin*T */
    for (int j = 0; j < T; j++) {
        int64_t gi = (int64_t)(nwin - 1) * T + j;
        assert_true(gi >= n - tail);
        assert_int_equal(x[j], ((gi * 7 + 3) % 60000));
        assert_int_equal(y[j], (((gi + 1) * 7 + 3) % 60000));
    }
    data_loader_get(&dl, 0, 1, x, y); /* the hole reads as zeros */
    assert_int_equal(x[0], 0);
    data_loader_close(&dl);
    free(t);
    rmdir_all(d);
    free(d);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_v1_shard_and_windows),
        cmocka_unit_test(test_v2_shard),
        cmocka_unit_test(test_multi_shard_straddle),
        cmocka_unit_test(test_glob_patterns),
        cmocka_unit_test(test_bad_files),
        cmocka_unit_test(test_shuffle_is_permutation),
        cmocka_unit_test(test_determinism),
        cmocka_unit_test(test_large_sparse_shard),
    };
    return cmocka_run_group_tests(tests, tu_setup, tu_teardown);
}
