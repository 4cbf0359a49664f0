/*
 * tests/test_ckpt_bulkio.c — cmocka tests of the fast checkpoint write path: ckpt/bulkio.c (CRC
 * while writing, writeback windows, O_DIRECT), the commit from known CRCs (ckpt_commit_known),
 * retention of a fresh step (ckpt_retain_fresh), the writer's pool and its deferred snapshot.
 *
 * Independent checks: the bytes ckpt_io_write_st writes are compared with st_write's file of the
 * same tensors byte for byte, and its CRC with a bit-by-bit CRC-32C computed here from the
 * definition (RFC 3720) over the file as read back; odd tensor sizes, a chunk smaller than the
 * header and windows smaller than the file drive every branch (bounce-buffer tail, unaligned end,
 * window retirement). That the commit really uses the known CRCs is shown by handing it a wrong
 * one (the step then fails verification), and that it ignores a known CRC of another size.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "ckpt/bulkio.h"
#include "ckpt/ckpt.h"
#include "ckpt/writer.h"

#define TU_PREFIX "test_ckpt_bulkio"
#include "tests/testutil.h"

static unsigned char *slurp(const char *path, size_t *len) {
    char *out = NULL, err[512];
    if (fs_read_file(path, (size_t)1 << 28, &out, len, err, sizeof err) != 0) fail_msg("%s", err);
    return (unsigned char *)out;
}

/* Three tensors of odd sizes (the file's end is not 4096-aligned). */
typedef struct {
    float *a, *b;
    uint8_t *c;
    st_tensor t[3];
} fixture;

static void fixture_init(fixture *f, int64_t na, int64_t nb, int64_t nc) {
    f->a = malloc(sizeof(float) * (size_t)na);
    f->b = malloc(sizeof(float) * (size_t)nb);
    f->c = malloc((size_t)nc);
    for (int64_t i = 0; i < na; i++) f->a[i] = (float)i * 0.25f - 7.0f;
    for (int64_t i = 0; i < nb; i++) f->b[i] = (float)((i * 2654435761u) % 1000u) / 3.0f;
    for (int64_t i = 0; i < nc; i++) f->c[i] = (uint8_t)(i * 131 + 7);
    f->t[0] = (st_tensor){.name = "alpha", .dtype = ST_F32, .ndim = 1, .shape = {na}, .data = f->a};
    f->t[1] = (st_tensor){.name = "beta", .dtype = ST_F32, .ndim = 2, .shape = {nb / 3, 3},
                          .data = f->b};
    f->t[2] = (st_tensor){.name = "gamma", .dtype = ST_U8, .ndim = 1, .shape = {nc}, .data = f->c};
}

static void fixture_free(fixture *f) {
    free(f->a);
    free(f->b);
    free(f->c);
}

/* ckpt_io_write_st in directory dir with options o equals st_write; CRC and size are right. */
static void check_same_as_st_write(const char *dir, const ckpt_io_opts *o) {
    fixture f;
    fixture_init(&f, 100003, 3 * 33335, 4099);
    char ref[512], got[512], err[512];
    snprintf(ref, sizeof ref, "%s/ref.safetensors", dir);
    snprintf(got, sizeof got, "%s/fast.safetensors", dir);
    assert_int_equal(st_write(ref, f.t, 3, "{\"k\":\"v\"}", err, sizeof err), 0);
    uint32_t crc = 0;
    uint64_t bytes = 0;
    ckpt_io_stats st = {0};
    if (ckpt_io_write_st(got, f.t, 3, "{\"k\":\"v\"}", o, &crc, &bytes, &st, err, sizeof err) != 0)
        fail_msg("%s", err);
    size_t la, lb;
    unsigned char *a = slurp(ref, &la), *b = slurp(got, &lb);
    assert_int_equal(la, lb);
    assert_memory_equal(a, b, la);
    assert_int_equal(bytes, lb);
    assert_int_equal(st.bytes, lb);
    assert_int_equal(st.files, 1);
    assert_int_equal(crc, tu_crc32c_bitwise(b, lb));
    free(a);
    free(b);
    /* no partial file is left beside it */
    char part[600];
    snprintf(part, sizeof part, "%s/fast.safetensors.part.%ld.0", dir, (long)getpid());
    assert_int_not_equal(access(part, F_OK), 0);
    fixture_free(&f);
}

static void test_buffered_small_windows(void **state) {
    (void)state;
    ckpt_io_opts o = {.direct = 0, .chunk = 4096, .window = 3 * 4096};
    check_same_as_st_write(tu_dir, &o);
    ckpt_io_opts d = {0}; /* defaults: one chunk holds the whole file */
    check_same_as_st_write(tu_dir, &d);
    check_same_as_st_write(tu_dir, NULL);
}

static void test_direct(void **state) {
    (void)state;
    ckpt_io_opts o = {.direct = 1, .chunk = 8192, .window = 0};
    check_same_as_st_write(tu_dir, &o);
    ckpt_io_opts big = {.direct = 1, .chunk = 0, .window = 0};
    check_same_as_st_write(tu_dir, &big);
}

static void test_tmpfs_fallback(void **state) {
    (void)state;
    char dir[] = "/dev/shm/test_ckpt_bulkio_XXXXXX";
    if (mkdtemp(dir) == NULL) skip();
    ckpt_io_opts o = {.direct = 1, .chunk = 4096, .window = 4096}; /* tmpfs refuses O_DIRECT */
    check_same_as_st_write(dir, &o);
    tu_rmtree(dir);
}

static void test_write_error_removes_partial(void **state) {
    (void)state;
    fixture f;
    fixture_init(&f, 10, 9, 3);
    char path[512], err[512] = "";
    snprintf(path, sizeof path, "%s/no/such/dir/x.safetensors", tu_dir);
    assert_int_equal(ckpt_io_write_st(path, f.t, 3, NULL, NULL, NULL, NULL, NULL, err, sizeof err),
                     -1);
    assert_non_null(strstr(err, "x.safetensors"));
    f.t[1].name = "__metadata__"; /* st_write's header checks apply */
    snprintf(path, sizeof path, "%s/bad.safetensors", tu_dir);
    assert_int_equal(ckpt_io_write_st(path, f.t, 3, NULL, NULL, NULL, NULL, NULL, err, sizeof err),
                     -1);
    assert_int_not_equal(access(path, F_OK), 0);
    fixture_free(&f);
}

/* A step with one safetensors file and one JSON file, begun under root. */
static void make_step(const char *root, int64_t step, uint32_t *crc, uint64_t *bytes) {
    char dir[600], path[700], err[512];
    assert_int_equal(ckpt_begin(root, step, dir, sizeof dir, err, sizeof err), 0);
    fixture f;
    fixture_init(&f, 1001, 300, 17);
    snprintf(path, sizeof path, "%s/model.safetensors", dir);
    assert_int_equal(ckpt_io_write_st(path, f.t, 3, NULL, NULL, crc, bytes, NULL, err, sizeof err),
                     0);
    assert_int_equal(ckpt_write_json(dir, "state.json", "{\"step\": 1}", err, sizeof err), 0);
    fixture_free(&f);
}

static void test_commit_known(void **state) {
    (void)state;
    char root[400], err[1024];
    snprintf(root, sizeof root, "%s/ckpt", tu_dir);
    uint32_t crc;
    uint64_t bytes;
    /* the right CRC: the step verifies (ckpt_verify reads and checksums every file) */
    make_step(root, 1, &crc, &bytes);
    ckpt_known_file k = {"model.safetensors", bytes, crc};
    assert_int_equal(ckpt_commit_known(root, 1, &k, 1, err, sizeof err), 0);
    if (ckpt_verify(root, 1, err, sizeof err) != 0) fail_msg("%s", err);
    /* a wrong CRC of the right size is taken as given: proof that no second read happened */
    make_step(root, 2, &crc, &bytes);
    ckpt_known_file wrong = {"model.safetensors", bytes, crc ^ 1u};
    assert_int_equal(ckpt_commit_known(root, 2, &wrong, 1, err, sizeof err), 0);
    assert_int_equal(ckpt_verify(root, 2, err, sizeof err), -1);
    assert_non_null(strstr(err, "corrupted"));
    /* a known entry whose size differs is ignored: the file is read */
    make_step(root, 3, &crc, &bytes);
    ckpt_known_file stale = {"model.safetensors", bytes + 1, crc ^ 1u};
    assert_int_equal(ckpt_commit_known(root, 3, &stale, 1, err, sizeof err), 0);
    if (ckpt_verify(root, 3, err, sizeof err) != 0) fail_msg("%s", err);
    /* retention keeping 1: step 3 (fresh) is the newest; steps 1 and 2 go */
    int removed = 0;
    assert_int_equal(ckpt_retain_fresh(root, 1, 0, 3, &removed, NULL, NULL, err, sizeof err), 0);
    assert_int_equal(removed, 2);
    int64_t *steps;
    int n;
    assert_int_equal(ckpt_list(root, &steps, &n, err, sizeof err), 0);
    assert_int_equal(n, 1);
    assert_int_equal(steps[0], 3);
    free(steps);
}

static void test_retain_fresh_still_checks_structure(void **state) {
    (void)state;
    char root[400], err[1024], path[800];
    snprintf(root, sizeof root, "%s/ckpt", tu_dir);
    uint32_t crc;
    uint64_t bytes;
    make_step(root, 1, &crc, &bytes);
    assert_int_equal(ckpt_commit(root, 1, err, sizeof err), 0);
    make_step(root, 2, &crc, &bytes);
    ckpt_known_file k = {"model.safetensors", bytes, crc};
    assert_int_equal(ckpt_commit_known(root, 2, &k, 1, err, sizeof err), 0);
    /* the fresh step loses a byte: sizes are still checked, so step 1 must survive */
    snprintf(path, sizeof path, "%s/step_00000002/model.safetensors", root);
    assert_int_equal(truncate(path, (off_t)bytes - 1), 0);
    assert_int_equal(ckpt_retain_fresh(root, 1, 0, 2, NULL, NULL, NULL, err, sizeof err), 0);
    snprintf(path, sizeof path, "%s/step_00000001", root);
    struct stat st;
    assert_int_equal(stat(path, &st), 0);
}

/* ---- the writer: pool of threads and deferred snapshot ------------------------------------------ */

typedef struct {
    float *live, *snap;
    size_t n;
    int copies;
} snap_src;

static void copy_snap(void *user) {
    snap_src *s = user;
    usleep(50 * 1000); /* a slow copy: the caller must wait for it */
    memcpy(s->snap, s->live, s->n * sizeof(float));
    s->copies++;
}

static void test_writer_deferred_snapshot(void **state) {
    (void)state;
    char run[400], err[1024];
    snprintf(run, sizeof run, "%s/run", tu_dir);
    assert_int_equal(fs_mkdir_p(run, err, sizeof err), 0);
    ckpt_writer_opts o = {0};
    assert_int_equal(ckpt_tiers_init(&o.tiers, run, "t", 0, NULL, 2, 0), 0);
    o.async = 1;
    o.io_threads = 3;
    ckpt_writer *w = ckpt_writer_create(&o);
    snap_src s = {.n = 4097};
    s.live = malloc(s.n * sizeof(float));
    s.snap = ckpt_writer_buffer(w, 2 * s.n * sizeof(float));
    float *other = s.snap + s.n;
    for (size_t i = 0; i < s.n; i++) s.live[i] = (float)i, other[i] = -(float)i;
    st_tensor t1 = {.name = "w", .dtype = ST_F32, .ndim = 1, .shape = {(int64_t)s.n}, .data = s.snap};
    st_tensor t2 = {.name = "o", .dtype = ST_F32, .ndim = 1, .shape = {(int64_t)s.n}, .data = other};
    ckpt_file files[2] = {{"a.safetensors", &t1, 1, NULL}, {"b.safetensors", &t2, 1, NULL}};
    assert_int_equal(ckpt_writer_begin(w, 5), 0);
    ckpt_writer_start_deferred(w, files, 2, "state.json", "{\"step\": 5}", copy_snap, &s);
    ckpt_writer_snapshot_wait(w); /* blocks until the copy ran */
    assert_int_equal(s.copies, 1);
    ckpt_writer_stats ws;
    ckpt_writer_get_stats(w, &ws);
    assert_true(ws.last_snapshot_wait_ms > 0 && ws.last_snapshot_ms >= ws.last_snapshot_wait_ms);
    for (size_t i = 0; i < s.n; i++) s.live[i] = 1e6f; /* "the optimizer step" */
    ckpt_writer_progress(w, 1);
    assert_int_equal(ckpt_writer_finish(w, 0), 0);
    ckpt_writer_get_stats(w, &ws);
    assert_int_equal(ws.committed, 1);
    assert_int_equal(ws.last_io.files, 2);
    if (ckpt_verify(o.tiers.root[1], 5, err, sizeof err) != 0) fail_msg("%s", err);
    char path[CKPT_PATH_MAX + 64];
    snprintf(path, sizeof path, "%s/step_00000005/a.safetensors", o.tiers.root[1]);
    st_file f;
    assert_int_equal(st_open(&f, path, err, sizeof err), 0);
    float *back = malloc(s.n * sizeof(float));
    assert_int_equal(st_read_tensor(&f, "w", back, s.n * sizeof(float), err, sizeof err), 0);
    for (size_t i = 0; i < s.n; i++) assert_true(back[i] == (float)i); /* the state at the save */
    st_close(&f);
    free(back);
    free(s.live);
    ckpt_writer_free(w);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_buffered_small_windows, tu_setup, tu_teardown),
        cmocka_unit_test_setup_teardown(test_direct, tu_setup, tu_teardown),
        cmocka_unit_test_setup_teardown(test_tmpfs_fallback, tu_setup, tu_teardown),
        cmocka_unit_test_setup_teardown(test_write_error_removes_partial, tu_setup, tu_teardown),
        cmocka_unit_test_setup_teardown(test_commit_known, tu_setup, tu_teardown),
        cmocka_unit_test_setup_teardown(test_retain_fresh_still_checks_structure, tu_setup,
                                        tu_teardown),
        cmocka_unit_test_setup_teardown(test_writer_deferred_snapshot, tu_setup, tu_teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
