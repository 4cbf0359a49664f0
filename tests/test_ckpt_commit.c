/*
 * tests/test_ckpt_commit.c — cmocka tests of CRC-32C (ckpt/crc32c.c) and the checkpoint directory
 * commit protocol: begin, commit, verify, list, latest, retention (ckpt/ckpt.c).
 *
 * Independent checks: CRC-32C against the published vectors of RFC 3720 (B.4) and against a
 * bit-at-a-time implementation written here from the definition; manifest.json is re-parsed here
 * and its sizes/CRCs compared with stat() and the bitwise CRC of each file; corruptions are made
 * here byte by byte (flip, truncate, unlink, rewrite) and must be caught by ckpt_verify.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cjson/cJSON.h>

#include "ckpt/ckpt.h"
#include "ckpt/safetensors.h"

#define TU_PREFIX "test_ckpt_commit"
#include "tests/testutil.h"

static void test_crc_vectors(void **state) {
    (void)state;
    /* RFC 3720 §B.4 and the common "check" value of the CRC catalogue */
    unsigned char buf[32];
    assert_int_equal(ckpt_crc32c(0, "123456789", 9), 0xE3069283u);
    assert_int_equal(ckpt_crc32c_sw(0, "123456789", 9), 0xE3069283u);
    memset(buf, 0, 32);
    assert_int_equal(ckpt_crc32c(0, buf, 32), 0x8A9136AAu);
    memset(buf, 0xFF, 32);
    assert_int_equal(ckpt_crc32c(0, buf, 32), 0x62A8AB43u);
    for (int i = 0; i < 32; i++) buf[i] = (unsigned char)i;
    assert_int_equal(ckpt_crc32c(0, buf, 32), 0x46DD794Eu);
    assert_int_equal(ckpt_crc32c_sw(0, buf, 32), 0x46DD794Eu);
    for (int i = 0; i < 32; i++) buf[i] = (unsigned char)(31 - i);
    assert_int_equal(ckpt_crc32c(0, buf, 32), 0x113FDB5Cu);
    assert_int_equal(ckpt_crc32c(0, buf, 0), 0u);
    assert_int_equal(tu_crc32c_bitwise((const unsigned char *)"123456789", 9), 0xE3069283u);
}

/* Both engines equal the bitwise definition at every length 0..80 and every start alignment. */
static void test_crc_engines_match_definition(void **state) {
    (void)state;
    unsigned char buf[4200];
    tu_fill(buf, sizeof buf, 7);
    for (size_t align = 0; align < 8; align++) {
        for (size_t n = 0; n <= 80; n++) {
            uint32_t want = tu_crc32c_bitwise(buf + align, n);
            assert_int_equal(ckpt_crc32c(0, buf + align, n), want);
            assert_int_equal(ckpt_crc32c_sw(0, buf + align, n), want);
        }
        uint32_t want = tu_crc32c_bitwise(buf + align, 4100);
        assert_int_equal(ckpt_crc32c(0, buf + align, 4100), want);
        assert_int_equal(ckpt_crc32c_sw(0, buf + align, 4100), want);
    }
}

static void test_crc_incremental(void **state) {
    (void)state;
    unsigned char buf[1031];
    tu_fill(buf, sizeof buf, 99);
    uint32_t whole = tu_crc32c_bitwise(buf, sizeof buf);
    for (size_t cut = 0; cut <= sizeof buf; cut++) {
        uint32_t c = ckpt_crc32c(0, buf, cut);
        assert_int_equal(ckpt_crc32c(c, buf + cut, sizeof buf - cut), whole);
        uint32_t s = ckpt_crc32c_sw(0, buf, cut);
        assert_int_equal(ckpt_crc32c_sw(s, buf + cut, sizeof buf - cut), whole);
    }
    uint32_t c = 0; /* many small pieces */
    for (size_t i = 0; i < sizeof buf; i += 13)
        c = ckpt_crc32c(c, buf + i, sizeof buf - i < 13 ? sizeof buf - i : 13);
    assert_int_equal(c, whole);
}

static void test_crc_file(void **state) {
    (void)state;
    const size_t n = (size_t)5 << 19; /* 2.5 MiB: crosses the 1 MiB read chunks */
    unsigned char *buf = malloc(n);
    tu_fill(buf, n, 3);
    char path[512], err[512];
    snprintf(path, sizeof path, "%s/crcfile.bin", tu_dir);
    assert_int_equal(fs_write_atomic(path, buf, n, err, sizeof err), 0);
    uint32_t crc;
    uint64_t bytes;
    assert_int_equal(ckpt_crc32c_file(path, &crc, &bytes, err, sizeof err), 0);
    assert_int_equal(bytes, n);
    assert_int_equal(crc, tu_crc32c_bitwise(buf, n));
    free(buf);
    assert_int_equal(ckpt_crc32c_file("/nonexistent/x", &crc, NULL, err, sizeof err), -1);
    assert_non_null(strstr(err, "/nonexistent/x"));
}

/* ---- checkpoint helpers --------------------------------------------------------------------- */

typedef struct {
    int count;
    char last[2048];
    char all[8192];
} warn_log;

static void capture_warn(void *user, const char *msg) {
    warn_log *w = user;
    w->count++;
    snprintf(w->last, sizeof w->last, "%s", msg);
    size_t at = strlen(w->all);
    snprintf(w->all + at, sizeof w->all - at, "%s\n", msg);
}

/* One complete save: a safetensors file with two tensors and trainer_state.json. */
static void save_step(const char *root, int64_t step, float base) {
    char dir[CKPT_PATH_MAX], path[CKPT_PATH_MAX + 64], err[1024], json[128];
    assert_int_equal(ckpt_begin(root, step, dir, sizeof dir, err, sizeof err), 0);
    float w[64];
    for (int i = 0; i < 64; i++) w[i] = base + (float)i;
    st_tensor t[2] = {{"w", ST_F32, 2, {8, 8}, w}, {"b", ST_F32, 1, {4}, w}};
    snprintf(path, sizeof path, "%s/model.safetensors", dir);
    assert_int_equal(st_write(path, t, 2, NULL, err, sizeof err), 0);
    snprintf(json, sizeof json, "{\"step\": %" PRId64 ", \"rng\": [1, 2]}", step);
    assert_int_equal(ckpt_write_json(dir, "trainer_state.json", json, err, sizeof err), 0);
    if (ckpt_commit(root, step, err, sizeof err) != 0) fail_msg("commit: %s", err);
}

static void step_file(char *buf, size_t len, const char *root, int64_t step, const char *file) {
    snprintf(buf, len, "%s/step_%08" PRId64 "/%s", root, step, file);
}

static int exists(const char *path) { return access(path, F_OK) == 0; }

static void test_commit_protocol(void **state) {
    (void)state;
    char root[1024], path[CKPT_PATH_MAX + 128], err[1024];
    tu_path(root, sizeof root, "proto/ckpt"); /* nested: begin does mkdir -p */
    char dir[CKPT_PATH_MAX];
    assert_int_equal(ckpt_begin(root, 10, dir, sizeof dir, err, sizeof err), 0);
    snprintf(path, sizeof path, "%s/step_00000010.tmp", root);
    assert_string_equal(dir, path);
    assert_true(exists(path));
    float w[6] = {1, 2, 3, 4, 5, 6};
    st_tensor t[1] = {{"w", ST_F32, 2, {2, 3}, w}};
    snprintf(path, sizeof path, "%s/model.safetensors", dir);
    assert_int_equal(st_write(path, t, 1, NULL, err, sizeof err), 0);
    assert_int_equal(ckpt_write_json(dir, "trainer_state.json", "{\"step\": 10}", err,
                                     sizeof err), 0);
    assert_int_equal(ckpt_write_json(dir, "bad.json", "{\"step\": ", err, sizeof err), -1);
    assert_non_null(strstr(err, "bad.json"));
    assert_int_equal(ckpt_commit(root, 10, err, sizeof err), 0);

    snprintf(path, sizeof path, "%s/step_00000010.tmp", root);
    assert_false(exists(path));
    step_file(path, sizeof path, root, 10, "manifest.json");
    assert_true(exists(path));

    /* manifest re-parsed here: every file with its stat size and bitwise CRC */
    size_t len;
    char *text = (char *)tu_slurp(path, &len);
    cJSON *m = cJSON_Parse(text);
    free(text);
    assert_non_null(m);
    assert_string_equal(cJSON_GetObjectItem(m, "format")->valuestring, "minitrain-checkpoint");
    assert_int_equal(cJSON_GetObjectItem(m, "version")->valueint, 1);
    assert_int_equal(cJSON_GetObjectItem(m, "step")->valueint, 10);
    cJSON *files = cJSON_GetObjectItem(m, "files");
    assert_int_equal(cJSON_GetArraySize(files), 2);
    const char *names[2] = {"model.safetensors", "trainer_state.json"};
    double total = 0;
    for (int i = 0; i < 2; i++) {
        cJSON *f = cJSON_GetArrayItem(files, i);
        assert_string_equal(cJSON_GetObjectItem(f, "name")->valuestring, names[i]);
        step_file(path, sizeof path, root, 10, names[i]);
        struct stat st;
        assert_int_equal(stat(path, &st), 0);
        assert_int_equal((long long)cJSON_GetObjectItem(f, "bytes")->valuedouble,
                         (long long)st.st_size);
        unsigned char *data = tu_slurp(path, &len);
        char hex[16];
        snprintf(hex, sizeof hex, "%08x", tu_crc32c_bitwise(data, len));
        free(data);
        assert_string_equal(cJSON_GetObjectItem(f, "crc32c")->valuestring, hex);
        total += (double)st.st_size;
    }
    assert_true(cJSON_GetObjectItem(m, "total_bytes")->valuedouble == total);
    cJSON_Delete(m);

    snprintf(path, sizeof path, "%s/latest", root);
    unsigned char *latest = tu_slurp(path, &len);
    assert_string_equal((char *)latest, "step_00000010\n");
    free(latest);
    assert_int_equal(ckpt_verify(root, 10, err, sizeof err), 0);
    int64_t *steps, step = -1, got;
    int n;
    assert_int_equal(ckpt_list(root, &steps, &n, err, sizeof err), 0);
    assert_int_equal(n, 1);
    assert_int_equal(steps[0], 10);
    free(steps);
    warn_log wl = {0};
    assert_int_equal(ckpt_latest_verified(root, &step, capture_warn, &wl, err, sizeof err), 1);
    assert_int_equal(step, 10);
    assert_int_equal(wl.count, 0);
    assert_int_equal(ckpt_read_latest(root, &got, err, sizeof err), 1);
    assert_int_equal(got, 10);

    /* a later step moves latest; an empty/missing root has no steps */
    save_step(root, 20, 0.f);
    assert_int_equal(ckpt_read_latest(root, &got, err, sizeof err), 1);
    assert_int_equal(got, 20);
    tu_path(path, sizeof path, "never_created");
    assert_int_equal(ckpt_list(path, &steps, &n, err, sizeof err), 0);
    assert_int_equal(n, 0);
    assert_int_equal(ckpt_latest_verified(path, &step, capture_warn, &wl, err, sizeof err), 0);
}

typedef enum { FLIP, TRUNCATE, NO_MANIFEST, MISSING_FILE, BAD_MANIFEST, WRONG_STEP } corruption;

/* Steps 10 and 20 saved; step 20 damaged; verify(20) must fail naming `who` and `what`, and
 * ckpt_latest_verified must fall back to 10 with a warning naming step 20. */
static void check_corruption(const char *name, corruption kind, const char *who,
                             const char *what) {
    char root[1024], path[CKPT_PATH_MAX + 128], err[1024];
    tu_path(root, sizeof root, name);
    save_step(root, 10, 1.f);
    save_step(root, 20, 2.f);
    assert_int_equal(ckpt_verify(root, 20, err, sizeof err), 0);
    size_t len;
    unsigned char *b;
    FILE *fp;
    switch (kind) {
    case FLIP: /* one bit in the tensor data, same size */
        step_file(path, sizeof path, root, 20, "model.safetensors");
        b = tu_slurp(path, &len);
        b[len - 10] ^= 0x01;
        fp = fopen(path, "wb");
        fwrite(b, 1, len, fp);
        fclose(fp);
        free(b);
        break;
    case TRUNCATE:
        step_file(path, sizeof path, root, 20, "model.safetensors");
        b = tu_slurp(path, &len);
        free(b);
        assert_int_equal(truncate(path, (off_t)len - 5), 0);
        break;
    case NO_MANIFEST:
        step_file(path, sizeof path, root, 20, "manifest.json");
        assert_int_equal(unlink(path), 0);
        break;
    case MISSING_FILE: /* the manifest names a file that is gone */
        step_file(path, sizeof path, root, 20, "trainer_state.json");
        assert_int_equal(unlink(path), 0);
        break;
    case BAD_MANIFEST:
        step_file(path, sizeof path, root, 20, "manifest.json");
        fp = fopen(path, "wb");
        fputs("{\"format\": \"minitrain-checkpoint\", \"files\": [", fp);
        fclose(fp);
        break;
    case WRONG_STEP: /* a manifest copied from another step */
        step_file(path, sizeof path, root, 10, "manifest.json");
        b = tu_slurp(path, &len);
        step_file(path, sizeof path, root, 20, "manifest.json");
        fp = fopen(path, "wb");
        fwrite(b, 1, len, fp);
        fclose(fp);
        free(b);
        break;
    }
    assert_int_equal(ckpt_verify(root, 20, err, sizeof err), -1);
    if (strstr(err, who) == NULL || strstr(err, what) == NULL)
        fail_msg("verify message '%s' lacks '%s' / '%s'", err, who, what);
    assert_int_equal(ckpt_verify(root, 10, err, sizeof err), 0);
    warn_log w = {0};
    int64_t step = -1;
    assert_int_equal(ckpt_latest_verified(root, &step, capture_warn, &w, err, sizeof err), 1);
    assert_int_equal(step, 10);
    assert_true(w.count >= 1);
    assert_non_null(strstr(w.all, "step_00000020"));
    assert_non_null(strstr(w.all, who));
}

static void test_verify_flipped_byte(void **state) {
    (void)state;
    check_corruption("flip", FLIP, "step_00000020/model.safetensors", "CRC32C");
}
static void test_verify_truncated(void **state) {
    (void)state;
    check_corruption("trunc", TRUNCATE, "step_00000020/model.safetensors", "truncated");
}
static void test_verify_missing_manifest(void **state) {
    (void)state;
    check_corruption("nomanifest", NO_MANIFEST, "step_00000020/manifest.json", "missing");
}
static void test_verify_missing_file(void **state) {
    (void)state;
    check_corruption("nofile", MISSING_FILE, "step_00000020/trainer_state.json", "missing");
}
static void test_verify_bad_manifest(void **state) {
    (void)state;
    check_corruption("badmanifest", BAD_MANIFEST, "step_00000020/manifest.json", "manifest");
}
static void test_verify_wrong_step(void **state) {
    (void)state;
    check_corruption("wrongstep", WRONG_STEP, "step_00000020/manifest.json", "another step");
}

/* A tensor file truncated before the commit: commit refuses it. And one truncated after the
 * commit whose manifest entry was "fixed" to match (size and CRC agree): the structure check of
 * verify still catches it. */
static void test_truncated_tensor_file_structure(void **state) {
    (void)state;
    char root[1024], dir[CKPT_PATH_MAX], path[CKPT_PATH_MAX + 128], err[1024];
    tu_path(root, sizeof root, "torn_before");
    assert_int_equal(ckpt_begin(root, 5, dir, sizeof dir, err, sizeof err), 0);
    float w[16] = {0};
    st_tensor t[1] = {{"w", ST_F32, 1, {16}, w}};
    snprintf(path, sizeof path, "%s/model.safetensors", dir);
    assert_int_equal(st_write(path, t, 1, NULL, err, sizeof err), 0);
    struct stat st;
    assert_int_equal(stat(path, &st), 0);
    assert_int_equal(truncate(path, st.st_size - 4), 0);
    assert_int_equal(ckpt_commit(root, 5, err, sizeof err), -1);
    assert_non_null(strstr(err, "step_00000005.tmp/model.safetensors"));
    assert_true(exists(dir)); /* nothing committed */
    snprintf(path, sizeof path, "%s/step_00000005", root);
    assert_false(exists(path));

    save_step(root, 6, 0.f);
    step_file(path, sizeof path, root, 6, "model.safetensors");
    assert_int_equal(stat(path, &st), 0);
    assert_int_equal(truncate(path, st.st_size - 4), 0);
    size_t len, data_len;
    unsigned char *data = tu_slurp(path, &data_len);
    char hex[16], mpath[CKPT_PATH_MAX + 128];
    snprintf(hex, sizeof hex, "%08x", tu_crc32c_bitwise(data, data_len));
    free(data);
    step_file(mpath, sizeof mpath, root, 6, "manifest.json");
    char *text = (char *)tu_slurp(mpath, &len);
    cJSON *m = cJSON_Parse(text);
    free(text);
    cJSON *f0 = cJSON_GetArrayItem(cJSON_GetObjectItem(m, "files"), 0);
    assert_string_equal(cJSON_GetObjectItem(f0, "name")->valuestring, "model.safetensors");
    cJSON_ReplaceItemInObject(f0, "bytes", cJSON_CreateNumber((double)data_len));
    cJSON_ReplaceItemInObject(f0, "crc32c", cJSON_CreateString(hex));
    text = cJSON_Print(m);
    cJSON_Delete(m);
    assert_int_equal(fs_write_atomic(mpath, text, strlen(text), err, sizeof err), 0);
    free(text);
    assert_int_equal(ckpt_verify(root, 6, err, sizeof err), -1);
    if (strstr(err, "step_00000006/model.safetensors") == NULL || strstr(err, "truncated") == NULL)
        fail_msg("verify message: %s", err);
}

/* A save that crashed before its commit is never listed or returned, even with a manifest. */
static void test_tmp_never_returned(void **state) {
    (void)state;
    char root[1024], dir[CKPT_PATH_MAX], path[CKPT_PATH_MAX + 64], err[1024];
    tu_path(root, sizeof root, "crash");
    save_step(root, 10, 1.f);
    assert_int_equal(ckpt_begin(root, 20, dir, sizeof dir, err, sizeof err), 0);
    assert_int_equal(ckpt_write_json(dir, "trainer_state.json", "{}", err, sizeof err), 0);
    assert_int_equal(ckpt_begin(root, 30, dir, sizeof dir, err, sizeof err), 0);
    assert_int_equal(ckpt_write_json(dir, "manifest.json", "{\"format\":\"minitrain-checkpoint\","
                                     "\"version\":1,\"step\":30,\"files\":[]}", err, sizeof err),
                     0);
    int64_t *steps, step = -1;
    int n;
    assert_int_equal(ckpt_list(root, &steps, &n, err, sizeof err), 0);
    assert_int_equal(n, 1);
    assert_int_equal(steps[0], 10);
    free(steps);
    warn_log w = {0};
    assert_int_equal(ckpt_latest_verified(root, &step, capture_warn, &w, err, sizeof err), 1);
    assert_int_equal(step, 10);
    assert_int_equal(ckpt_verify(root, 30, err, sizeof err), -1); /* not committed */

    /* the restarted run begins step 20 again: the stale .tmp is emptied */
    assert_int_equal(ckpt_begin(root, 20, dir, sizeof dir, err, sizeof err), 0);
    snprintf(path, sizeof path, "%s/trainer_state.json", dir);
    assert_false(exists(path));
    assert_true(exists(dir));

    /* commit refuses what is not a finished regular file, and a missing .tmp */
    snprintf(path, sizeof path, "%s/sub", dir);
    assert_int_equal(mkdir(path, 0755), 0);
    assert_int_equal(ckpt_commit(root, 20, err, sizeof err), -1);
    assert_non_null(strstr(err, "sub"));
    assert_int_equal(ckpt_commit(root, 40, err, sizeof err), -1);
    assert_non_null(strstr(err, "step_00000040.tmp"));
    assert_int_equal(ckpt_verify(root, 40, err, sizeof err), -1);
    assert_non_null(strstr(err, "step_00000040"));
}

/* Saving a step that is already committed (its first copy was corrupt) replaces it. */
static void test_recommit_replaces(void **state) {
    (void)state;
    char root[1024], path[CKPT_PATH_MAX + 128], err[1024];
    tu_path(root, sizeof root, "replace");
    save_step(root, 10, 1.f);
    save_step(root, 10, 100.f);
    assert_int_equal(ckpt_verify(root, 10, err, sizeof err), 0);
    step_file(path, sizeof path, root, 10, "model.safetensors");
    st_file f;
    float b[4];
    assert_int_equal(st_open(&f, path, err, sizeof err), 0);
    assert_int_equal(st_read_tensor(&f, "b", b, sizeof b, err, sizeof err), 0);
    assert_true(b[0] == 100.f && b[3] == 103.f);
    st_close(&f);
    snprintf(path, sizeof path, "%s/step_00000010.old", root);
    assert_false(exists(path));
}

static void test_retention(void **state) {
    (void)state;
    char root[1024], dir[CKPT_PATH_MAX], err[1024];
    tu_path(root, sizeof root, "retain");
    for (int64_t s = 100; s <= 1000; s += 100) save_step(root, s, (float)s);
    assert_int_equal(ckpt_begin(root, 1100, dir, sizeof dir, err, sizeof err), 0); /* in flight */
    int removed = -1;
    warn_log w = {0};
    /* keep the 2 newest (900, 1000) and every multiple of 500 (500, 1000) */
    assert_int_equal(ckpt_retain(root, 2, 500, &removed, capture_warn, &w, err, sizeof err), 0);
    assert_int_equal(removed, 7);
    int64_t *steps;
    int n;
    assert_int_equal(ckpt_list(root, &steps, &n, err, sizeof err), 0);
    assert_int_equal(n, 3);
    assert_int_equal(steps[0], 500);
    assert_int_equal(steps[1], 900);
    assert_int_equal(steps[2], 1000);
    free(steps);
    assert_true(exists(dir));
    assert_int_equal(w.count, 0);
    char path[CKPT_PATH_MAX + 128];
    snprintf(path, sizeof path, "%s/step_00000100.del", root);
    assert_false(exists(path));

    /* keep_last 0, no majors: only the newest stays */
    assert_int_equal(ckpt_retain(root, 0, 0, &removed, capture_warn, &w, err, sizeof err), 0);
    assert_int_equal(removed, 2);
    assert_int_equal(ckpt_list(root, &steps, &n, err, sizeof err), 0);
    assert_int_equal(n, 1);
    assert_int_equal(steps[0], 1000);
    free(steps);
    assert_true(exists(dir));
}

/* The newest committed step is corrupt: retention also keeps the newest one that verifies. */
static void test_retention_keeps_newest_verified(void **state) {
    (void)state;
    char root[1024], path[CKPT_PATH_MAX + 128], err[1024];
    tu_path(root, sizeof root, "retain_bad");
    for (int64_t s = 1; s <= 3; s++) save_step(root, s, (float)s);
    step_file(path, sizeof path, root, 3, "manifest.json");
    assert_int_equal(unlink(path), 0);
    int removed = -1;
    warn_log w = {0};
    assert_int_equal(ckpt_retain(root, 1, 0, &removed, capture_warn, &w, err, sizeof err), 0);
    assert_int_equal(removed, 1);
    int64_t *steps;
    int n;
    assert_int_equal(ckpt_list(root, &steps, &n, err, sizeof err), 0);
    assert_int_equal(n, 2);
    assert_int_equal(steps[0], 2);
    assert_int_equal(steps[1], 3);
    free(steps);
    assert_non_null(strstr(w.all, "step_00000003"));
    int64_t step;
    assert_int_equal(ckpt_latest_verified(root, &step, capture_warn, &w, err, sizeof err), 1);
    assert_int_equal(step, 2);
}

static void test_fs_errors(void **state) {
    (void)state;
    char root[1024], err[1024];
    tu_path(root, sizeof root, "plainfile");
    assert_int_equal(fs_write_atomic(root, "x", 1, err, sizeof err), 0);
    /* root is a regular file: begin fails with the path, nothing exits */
    assert_int_equal(ckpt_begin(root, 1, NULL, 0, err, sizeof err), -1);
    assert_non_null(strstr(err, root));
    int64_t *steps;
    int n;
    assert_int_equal(ckpt_list(root, &steps, &n, err, sizeof err), -1);
    assert_non_null(strstr(err, root));
    assert_int_equal(fs_write_atomic("/nonexistent/dir/f", "x", 1, err, sizeof err), -1);
    assert_non_null(strstr(err, "/nonexistent/dir/f"));
    assert_non_null(strstr(err, strerror(ENOENT)));
    /* a malformed latest pointer is reported, and never trusted over verification */
    char r2[1024], path[CKPT_PATH_MAX + 128];
    tu_path(r2, sizeof r2, "badlatest");
    save_step(r2, 7, 0.f);
    snprintf(path, sizeof path, "%s/latest", r2);
    assert_int_equal(fs_write_atomic(path, "step_x\n", 7, err, sizeof err), 0);
    int64_t step;
    assert_int_equal(ckpt_read_latest(r2, &step, err, sizeof err), -1);
    assert_non_null(strstr(err, path));
    warn_log w = {0};
    assert_int_equal(ckpt_latest_verified(r2, &step, capture_warn, &w, err, sizeof err), 1);
    assert_int_equal(step, 7);
    assert_int_equal(w.count, 1);
    assert_non_null(strstr(w.last, "latest"));
    /* latest pointing at an older step than the newest verified one is reported too */
    assert_int_equal(fs_write_atomic(path, "step_00000003\n", 14, err, sizeof err), 0);
    assert_int_equal(ckpt_latest_verified(r2, &step, capture_warn, &w, err, sizeof err), 1);
    assert_int_equal(step, 7);
    assert_non_null(strstr(w.last, "step_00000003"));
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_crc_vectors),
        cmocka_unit_test(test_crc_engines_match_definition),
        cmocka_unit_test(test_crc_incremental),
        cmocka_unit_test(test_crc_file),
        cmocka_unit_test(test_commit_protocol),
        cmocka_unit_test(test_verify_flipped_byte),
        cmocka_unit_test(test_verify_truncated),
        cmocka_unit_test(test_verify_missing_manifest),
        cmocka_unit_test(test_verify_missing_file),
        cmocka_unit_test(test_verify_bad_manifest),
        cmocka_unit_test(test_verify_wrong_step),
        cmocka_unit_test(test_truncated_tensor_file_structure),
        cmocka_unit_test(test_tmp_never_returned),
        cmocka_unit_test(test_recommit_replaces),
        cmocka_unit_test(test_retention),
        cmocka_unit_test(test_retention_keeps_newest_verified),
        cmocka_unit_test(test_fs_errors),
    };
    return cmocka_run_group_tests(tests, tu_setup, tu_teardown);
}
