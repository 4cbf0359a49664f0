/*
 * tests/test_reshard.c — cmocka tests of the shard region reader (ckpt/reshard.c).
 *
 * Independent checks: every shard file is made here by hand (st_write + "shard:" metadata) from a
 * logical tensor whose element at index (i, j, ...) has the known value f(i, j, ...) computed
 * here; every box read back is compared element by element with f at the box's global indices.
 * Covered: a tensor split in two along dim 1 read back whole and as a box straddling the cut; a
 * whole tensor read as a shard; a 3-D (qkv-style) tensor split along its middle dimension;
 * overlapping replicated copies; a scalar; and the errors (missing piece, different global
 * shape, absent tensor, file truncated after opening).
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

#include "ckpt/ckpt.h"
#include "ckpt/reshard.h"
#include "ckpt/safetensors.h"

#define TU_PREFIX "test_reshard"
#include "tests/testutil.h"

/* The logical tensor's value at a global row-major index (distinct for every element). */
static float f(int64_t flat) { return (float)flat * 0.5f + 1.0f; }

/* Write one file holding, for each given piece, the box [off, off+ext) of a logical tensor of
 * shape glob (values f of the global flat index), with shard metadata when the box is partial. */
typedef struct {
    const char *name;
    int ndim;
    int64_t glob[3], off[3], ext[3];
} piece;

static void write_pieces(const char *file, const piece *p, int n) {
    st_tensor t[4];
    float *bufs[4];
    st_meta meta;
    st_meta_init(&meta);
    char err[512], path[512];
    for (int k = 0; k < n; k++) {
        int64_t numel = 1, gstride[3] = {1, 1, 1};
        for (int d = 0; d < p[k].ndim; d++) numel *= p[k].ext[d];
        for (int d = p[k].ndim - 2; d >= 0; d--) gstride[d] = gstride[d + 1] * p[k].glob[d + 1];
        bufs[k] = malloc(sizeof(float) * (size_t)(numel ? numel : 1));
        for (int64_t e = 0; e < numel; e++) { /* local index -> global index, by hand */
            int64_t rem = e, g = 0;
            for (int d = p[k].ndim - 1; d >= 0; d--) {
                int64_t i = rem % p[k].ext[d];
                rem /= p[k].ext[d];
                g += (i + p[k].off[d]) * gstride[d];
            }
            bufs[k][e] = f(g);
        }
        t[k].name = p[k].name;
        t[k].dtype = ST_F32;
        t[k].ndim = p[k].ndim;
        int partial = 0;
        for (int d = 0; d < p[k].ndim; d++) {
            t[k].shape[d] = p[k].ext[d];
            partial |= p[k].ext[d] != p[k].glob[d];
        }
        t[k].data = bufs[k];
        if (partial) {
            st_shard s = {.ndim = p[k].ndim};
            for (int d = 0; d < p[k].ndim; d++) {
                s.global[d] = p[k].glob[d];
                s.offset[d] = p[k].off[d];
            }
            assert_int_equal(st_meta_set_shard(&meta, p[k].name, &s, err, sizeof err), 0);
        }
    }
    char *json = st_meta_json(&meta);
    snprintf(path, sizeof path, "%s/%s", tu_dir, file);
    assert_int_equal(st_write(path, t, n, json, err, sizeof err), 0);
    free(json);
    st_meta_free(&meta);
    for (int k = 0; k < n; k++) free(bufs[k]);
}

/* Check dst (box off/ext of a tensor of shape glob) against f. */
static void check_box(const float *dst, int ndim, const int64_t *glob, const int64_t *off,
                      const int64_t *ext) {
    int64_t numel = 1;
    for (int d = 0; d < ndim; d++) numel *= ext[d];
    for (int64_t e = 0; e < numel; e++) {
        int64_t rem = e, g = 0, stride = 1;
        for (int d = ndim - 1; d >= 0; d--) {
            int64_t i = rem % ext[d];
            rem /= ext[d];
            g += (i + off[d]) * stride;
            stride *= glob[d];
        }
        if (dst[e] != f(g)) fail_msg("element %lld: got %g, expected %g", (long long)e, dst[e], f(g));
    }
}

static void test_split_dim1_read_whole_and_straddling(void **state) {
    (void)state;
    piece a = {"w", 2, {4, 6}, {0, 0}, {4, 3}}, b = {"w", 2, {4, 6}, {0, 3}, {4, 3}};
    write_pieces("model-tp00.safetensors", &a, 1);
    write_pieces("model-tp01.safetensors", &b, 1);
    ckpt_fileset fs;
    char err[512];
    assert_int_equal(ckpt_fileset_open(&fs, tu_dir, "model-", err, sizeof err), 0);
    assert_int_equal(fs.n, 2);
    st_shard g;
    st_dtype dt;
    assert_int_equal(ckpt_fileset_global(&fs, "w", &g, &dt, err, sizeof err), 1);
    assert_int_equal(g.ndim, 2);
    assert_int_equal(g.global[0], 4);
    assert_int_equal(g.global[1], 6);
    float whole[24];
    int64_t glob[2] = {4, 6}, off0[2] = {0, 0};
    memset(whole, 0xff, sizeof whole);
    assert_int_equal(ckpt_read_region(&fs, "w", ST_F32, 2, glob, off0, glob, whole, err, sizeof err), 0);
    check_box(whole, 2, glob, off0, glob);
    int64_t off[2] = {1, 2}, ext[2] = {3, 4}; /* columns 2..5 straddle the cut at 3 */
    float box[12];
    assert_int_equal(ckpt_read_region(&fs, "w", ST_F32, 2, glob, off, ext, box, err, sizeof err), 0);
    check_box(box, 2, glob, off, ext);
    ckpt_fileset_close(&fs);
}

static void test_whole_tensor_read_as_shard(void **state) {
    (void)state;
    piece w = {"emb", 2, {4, 6}, {0, 0}, {4, 6}};
    write_pieces("model-whole.safetensors", &w, 1);
    ckpt_fileset fs;
    char err[512];
    assert_int_equal(ckpt_fileset_open(&fs, tu_dir, "model-", err, sizeof err), 0);
    int64_t glob[2] = {4, 6};
    for (int r = 0; r < 2; r++) { /* the two row halves a tp=2 rank would hold */
        int64_t off[2] = {2 * r, 0}, ext[2] = {2, 6};
        float half[12];
        assert_int_equal(ckpt_read_region(&fs, "emb", ST_F32, 2, glob, off, ext, half, err, sizeof err), 0);
        check_box(half, 2, glob, off, ext);
    }
    int64_t off[2] = {0, 3}, ext[2] = {4, 3}; /* a column half (row-parallel weights) */
    float cols[12];
    assert_int_equal(ckpt_read_region(&fs, "emb", ST_F32, 2, glob, off, ext, cols, err, sizeof err), 0);
    check_box(cols, 2, glob, off, ext);
    ckpt_fileset_close(&fs);
}

static void test_qkv_3d_split_and_replicated_overlap(void **state) {
    (void)state;
    /* (3, C=4, 5) split along dim 1 as a head-split qkv; plus a replicated bias in both files */
    piece a[2] = {{"qkv", 3, {3, 4, 5}, {0, 0, 0}, {3, 2, 5}}, {"ln", 1, {7}, {0}, {7}}};
    piece b[2] = {{"qkv", 3, {3, 4, 5}, {0, 2, 0}, {3, 2, 5}}, {"ln", 1, {7}, {0}, {7}}};
    write_pieces("model-a.safetensors", a, 2);
    write_pieces("model-b.safetensors", b, 2);
    ckpt_fileset fs;
    char err[512];
    assert_int_equal(ckpt_fileset_open(&fs, tu_dir, "model-", err, sizeof err), 0);
    int64_t glob[3] = {3, 4, 5}, off[3] = {0, 0, 0};
    float q[60];
    assert_int_equal(ckpt_read_region(&fs, "qkv", ST_F32, 3, glob, off, glob, q, err, sizeof err), 0);
    check_box(q, 3, glob, off, glob);
    int64_t off2[3] = {0, 1, 0}, ext2[3] = {3, 2, 5}; /* a tp=2 shard of another cut */
    float q2[30];
    assert_int_equal(ckpt_read_region(&fs, "qkv", ST_F32, 3, glob, off2, ext2, q2, err, sizeof err), 0);
    check_box(q2, 3, glob, off2, ext2);
    int64_t lg[1] = {7}, lo[1] = {0};
    float ln[7];
    assert_int_equal(ckpt_read_region(&fs, "ln", ST_F32, 1, lg, lo, lg, ln, err, sizeof err), 0);
    check_box(ln, 1, lg, lo, lg);
    ckpt_fileset_close(&fs);
}

static void test_scalar(void **state) {
    (void)state;
    piece s = {"s", 0, {0}, {0}, {0}};
    write_pieces("model-s.safetensors", &s, 1);
    ckpt_fileset fs;
    char err[512];
    assert_int_equal(ckpt_fileset_open(&fs, tu_dir, "model-", err, sizeof err), 0);
    float v = 0;
    assert_int_equal(ckpt_read_region(&fs, "s", ST_F32, 0, NULL, NULL, NULL, &v, err, sizeof err), 0);
    assert_true(v == f(0));
    ckpt_fileset_close(&fs);
}

static void test_errors(void **state) {
    (void)state;
    piece a = {"w", 2, {4, 6}, {0, 0}, {4, 3}}; /* the other half is missing */
    write_pieces("model-tp00.safetensors", &a, 1);
    ckpt_fileset fs;
    char err[512];
    assert_int_equal(ckpt_fileset_open(&fs, tu_dir, "model-", err, sizeof err), 0);
    int64_t glob[2] = {4, 6}, off[2] = {0, 0};
    float buf[24];
    assert_int_equal(ckpt_read_region(&fs, "w", ST_F32, 2, glob, off, glob, buf, err, sizeof err), -1);
    assert_non_null(strstr(err, "cover only part"));
    int64_t other[2] = {4, 8}; /* a model of another width */
    assert_int_equal(ckpt_read_region(&fs, "w", ST_F32, 2, other, off, glob, buf, err, sizeof err), -1);
    assert_non_null(strstr(err, "different model"));
    assert_non_null(strstr(err, "model-tp00.safetensors"));
    assert_int_equal(ckpt_read_region(&fs, "nope", ST_F32, 2, glob, off, glob, buf, err, sizeof err), -1);
    assert_non_null(strstr(err, "'nope'"));
    int64_t big[2] = {5, 6}; /* box outside the global shape */
    assert_int_equal(ckpt_read_region(&fs, "w", ST_F32, 2, glob, off, big, buf, err, sizeof err), -1);
    /* truncated after open: an error, not a crash */
    char path[512];
    snprintf(path, sizeof path, "%s/model-tp00.safetensors", tu_dir);
    assert_int_equal(truncate(path, 100), 0);
    int64_t half[2] = {4, 3};
    assert_int_equal(ckpt_read_region(&fs, "w", ST_F32, 2, glob, off, half, buf, err, sizeof err), -1);
    assert_non_null(strstr(err, "read failed"));
    ckpt_fileset_close(&fs);
    /* no matching files */
    assert_int_equal(ckpt_fileset_open(&fs, tu_dir, "optim-", err, sizeof err), -1);
    assert_non_null(strstr(err, "optim-"));
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_split_dim1_read_whole_and_straddling, tu_setup,
                                        tu_teardown),
        cmocka_unit_test_setup_teardown(test_whole_tensor_read_as_shard, tu_setup, tu_teardown),
        cmocka_unit_test_setup_teardown(test_qkv_3d_split_and_replicated_overlap, tu_setup,
                                        tu_teardown),
        cmocka_unit_test_setup_teardown(test_scalar, tu_setup, tu_teardown),
        cmocka_unit_test_setup_teardown(test_errors, tu_setup, tu_teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
