/*
 * tests/test_safetensors.c — cmocka tests of ckpt/safetensors.c and ckpt/st_shard.c.
 *
 * Independent checks: the written bytes are re-parsed here by hand (little-endian length, cJSON on
 * the header, offsets summed from the shapes in this file), the Python reference reader
 * (tests/reference/read_safetensors.py, numpy + torch) re-reads a file and its sums are compared
 * with sums computed here from the source values; every corrupt file is crafted byte by byte here.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <dirent.h>
#include <errno.h>
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cjson/cJSON.h>

#include "ckpt/ckpt.h"
#include "ckpt/safetensors.h"

#define TU_PREFIX "test_safetensors"
#include "tests/testutil.h"

/* Write a raw safetensors-like file: u64 LE header length, header text as given, then buf. */
static void write_raw(const char *path, const char *header, const void *buf, size_t len) {
    FILE *fp = fopen(path, "wb");
    assert_non_null(fp);
    uint64_t n = strlen(header);
    unsigned char le[8];
    for (int i = 0; i < 8; i++) le[i] = (unsigned char)(n >> (8 * i));
    fwrite(le, 1, 8, fp);
    fwrite(header, 1, n, fp);
    if (len) fwrite(buf, 1, len, fp);
    fclose(fp);
}

/* float -> bf16 bits by truncation (exact for the values used here). */
static uint16_t bf16_bits(float x) {
    uint32_t u;
    memcpy(&u, &x, 4);
    return (uint16_t)(u >> 16);
}

/* The seven tensors of the round-trip file and their data. */
static float g_wte[12], g_scalar = 3.25f;
static int32_t g_idx[5] = {-2, -1, 0, 1, 2};
static uint8_t g_u8[7] = {0, 1, 2, 3, 250, 251, 255};
static uint16_t g_half[6] = {0x3C00, 0x4000, 0xC000, 0x3800, 0x0000, 0x4200}; /* 1,2,-2,.5,0,3 */
static float g_bf_values[4] = {1.5f, -2.0f, 0.25f, 8.0f};
static uint16_t g_bf[4];

static int make_tensors(st_tensor *t) {
    for (int i = 0; i < 12; i++) g_wte[i] = 0.5f * (float)i - 1.0f;
    for (int i = 0; i < 4; i++) g_bf[i] = bf16_bits(g_bf_values[i]);
    t[0] = (st_tensor){"wte", ST_F32, 2, {4, 3}, g_wte};
    t[1] = (st_tensor){"idx", ST_I32, 1, {5}, g_idx};
    t[2] = (st_tensor){"raw.bytes", ST_U8, 1, {7}, g_u8};
    t[3] = (st_tensor){"half", ST_F16, 2, {2, 3}, g_half};
    t[4] = (st_tensor){"bf", ST_BF16, 1, {4}, g_bf};
    t[5] = (st_tensor){"scalar", ST_F32, 0, {0}, &g_scalar};
    t[6] = (st_tensor){"empty", ST_F32, 2, {0, 3}, NULL};
    return 7;
}

static void test_roundtrip(void **state) {
    (void)state;
    st_tensor t[8];
    int n = make_tensors(t);
    char path[512], err[1024];
    tu_path(path, sizeof path, "round.safetensors");
    const char *meta = "{\"format\":\"pt\",\"note\":\"quote \\\" and \\u00fcnicode\"}";
    assert_int_equal(st_write(path, t, n, meta, err, sizeof err), 0);

    /* independent byte-level check of the layout */
    size_t len;
    unsigned char *b = tu_slurp(path, &len);
    uint64_t hn = 0;
    for (int i = 7; i >= 0; i--) hn = (hn << 8) | b[i];
    assert_int_equal(hn % 8, 0);
    assert_int_equal(b[8], '{');
    const size_t expect_bytes[7] = {12 * 4, 5 * 4, 7, 6 * 2, 4 * 2, 4, 0};
    size_t total = 0;
    for (int i = 0; i < 7; i++) total += expect_bytes[i];
    assert_int_equal(len, 8 + hn + total);
    char *hdr = calloc(hn + 1, 1);
    memcpy(hdr, b + 8, hn);
    size_t last = hn;
    while (last > 0 && hdr[last - 1] == ' ') last--;
    assert_int_equal(hdr[last - 1], '}');
    assert_true(hn - last < 8);
    cJSON *root = cJSON_Parse(hdr);
    assert_non_null(root);
    const char *dtypes[7] = {"F32", "I32", "U8", "F16", "BF16", "F32", "F32"};
    size_t off = 0;
    for (int i = 0; i < 7; i++) {
        cJSON *e = cJSON_GetObjectItemCaseSensitive(root, t[i].name);
        assert_non_null(e);
        assert_string_equal(cJSON_GetObjectItemCaseSensitive(e, "dtype")->valuestring, dtypes[i]);
        cJSON *o = cJSON_GetObjectItemCaseSensitive(e, "data_offsets");
        assert_int_equal((size_t)cJSON_GetArrayItem(o, 0)->valuedouble, off);
        assert_int_equal((size_t)cJSON_GetArrayItem(o, 1)->valuedouble, off + expect_bytes[i]);
        assert_int_equal(cJSON_GetArraySize(cJSON_GetObjectItemCaseSensitive(e, "shape")),
                         t[i].ndim);
        off += expect_bytes[i];
    }
    cJSON *m = cJSON_GetObjectItemCaseSensitive(root, "__metadata__");
    assert_string_equal(cJSON_GetObjectItemCaseSensitive(m, "note")->valuestring,
                        "quote \" and \xc3\xbcnicode");
    cJSON_Delete(root);
    free(hdr);
    /* the tensor bytes themselves, at the offsets computed above */
    assert_memory_equal(b + 8 + hn, g_wte, sizeof g_wte);
    assert_memory_equal(b + 8 + hn + 48 + 20 + 7 + 12, g_bf, sizeof g_bf);
    free(b);

    /* our reader */
    st_file f;
    assert_int_equal(st_open(&f, path, err, sizeof err), 0);
    assert_int_equal(st_count(&f), 7);
    for (int i = 0; i < 7; i++) {
        const st_info *info = st_find(&f, t[i].name);
        assert_non_null(info);
        assert_ptr_equal(info, st_info_at(&f, i)); /* header order is write order */
        assert_int_equal(info->dtype, t[i].dtype);
        assert_int_equal(info->ndim, t[i].ndim);
        for (int d = 0; d < t[i].ndim; d++) assert_int_equal(info->shape[d], t[i].shape[d]);
        assert_int_equal(info->nbytes, expect_bytes[i]);
        unsigned char dst[64];
        assert_int_equal(st_read_tensor(&f, t[i].name, dst, expect_bytes[i], err, sizeof err), 0);
        if (expect_bytes[i]) {
            assert_memory_equal(dst, t[i].data, expect_bytes[i]);
            assert_non_null(info->data);
            assert_memory_equal(info->data, t[i].data, expect_bytes[i]);
        }
    }
    assert_int_equal(st_find(&f, "scalar")->numel, 1);
    assert_int_equal(st_find(&f, "empty")->numel, 0);
    assert_null(st_find(&f, "nope"));
    assert_string_equal(st_metadata(&f, "format"), "pt");
    assert_string_equal(st_metadata(&f, "note"), "quote \" and \xc3\xbcnicode");
    assert_null(st_metadata(&f, "absent"));
    assert_int_equal(st_metadata_count(&f), 2);
    st_close(&f);
    st_close(&f); /* idempotent */
}

static void test_large_streaming(void **state) {
    (void)state;
    const size_t n = (size_t)3 << 18; /* 786432 floats = 3 MiB */
    float *x = malloc(n * sizeof *x), *y = malloc(n * sizeof *y);
    uint32_t s = 12345;
    for (size_t i = 0; i < n; i++) {
        s = s * 1664525u + 1013904223u;
        x[i] = (float)(s >> 8) / 16777216.0f - 0.5f;
    }
    st_tensor t[2] = {{"small", ST_U8, 1, {3}, "abc"}, {"big", ST_F32, 2, {768, 1024}, x}};
    char path[512], err[1024];
    tu_path(path, sizeof path, "big.safetensors");
    assert_int_equal(st_write(path, t, 2, NULL, err, sizeof err), 0);
    st_file f;
    assert_int_equal(st_open(&f, path, err, sizeof err), 0);
    assert_int_equal(st_read_tensor(&f, "big", y, n * sizeof *y, err, sizeof err), 0);
    assert_memory_equal(x, y, n * sizeof *x);
    assert_int_equal(st_metadata_count(&f), 0);
    st_close(&f);
    free(x);
    free(y);
}

/* Run the Python reference reader on a file and compare its per-tensor sums with ours. */
static void test_python_reference(void **state) {
    (void)state;
    const char *script = "tests/reference/read_safetensors.py";
    if (access(script, R_OK) != 0 || access("/usr/bin/python3", X_OK) != 0 ||
        system("/usr/bin/python3 -c 'import numpy' 2>/dev/null") != 0) {
        skip();
    }
    st_tensor t[8];
    int n = make_tensors(t);
    char path[512], err[1024], cmd[1024];
    tu_path(path, sizeof path, "interop.safetensors");
    assert_int_equal(st_write(path, t, n, "{\"format\":\"pt\"}", err, sizeof err), 0);
    /* sums from the source values (F16 values by their known meaning, BF16 from the floats) */
    double want[7] = {0, 0, 0, 1 + 2 - 2 + 0.5 + 0 + 3, 0, 3.25, 0};
    for (int i = 0; i < 12; i++) want[0] += g_wte[i];
    for (int i = 0; i < 5; i++) want[1] += g_idx[i];
    for (int i = 0; i < 7; i++) want[2] += g_u8[i];
    for (int i = 0; i < 4; i++) want[4] += g_bf_values[i];
    snprintf(cmd, sizeof cmd, "/usr/bin/python3 %s %s", script, path);
    FILE *p = popen(cmd, "r");
    assert_non_null(p);
    char line[512];
    int seen = 0;
    while (fgets(line, sizeof line, p)) {
        char name[128], shape[128];
        double sum;
        assert_int_equal(sscanf(line, "%127s %127s %lf", name, shape, &sum), 3);
        assert_true(seen < n);
        assert_string_equal(name, t[seen].name);
        assert_true(fabs(sum - want[seen]) < 1e-9);
        seen++;
    }
    assert_int_equal(pclose(p), 0); /* also 0 only when the torch/safetensors cross-checks agree */
    assert_int_equal(seen, n);
}

typedef struct {
    const char *file;
    const char *header;   /* NULL: built from the good file by `mutate` */
    size_t buffer;        /* bytes of data after the header */
    const char *want[2];  /* fragments the message must contain (besides the path) */
} bad_case;

static void expect_open_fails(const char *path, const char *w0, const char *w1) {
    st_file f;
    char err[1024] = "";
    assert_int_equal(st_open(&f, path, err, sizeof err), -1);
    if (strstr(err, path) == NULL || (w0 && strstr(err, w0) == NULL) ||
        (w1 && strstr(err, w1) == NULL))
        fail_msg("message '%s' lacks path/'%s'/'%s'", err, w0 ? w0 : "", w1 ? w1 : "");
    st_close(&f); /* left closed and safe */
}

static void test_corrupt_headers(void **state) {
    (void)state;
    static const unsigned char zeros[64];
    const bad_case cases[] = {
        {"badjson", "{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]}", 4,
         {"JSON", NULL}},
        {"notobject", "[1,2,3]                 ", 0, {"'{'", NULL}},
        {"outside", "{\"w\":{\"dtype\":\"F32\",\"shape\":[4],\"data_offsets\":[0,16]}}", 8,
         {"'w'", "past the end"}},
        {"sizemismatch", "{\"w\":{\"dtype\":\"F32\",\"shape\":[2,2],\"data_offsets\":[0,12]}}", 12,
         {"'w'", "needs 16"}},
        {"overlap", "{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]},"
                    "\"b\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[4,12]}}", 12,
         {"overlap", "'b'"}},
        {"gap", "{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]},"
                "\"b\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[8,12]}}", 12,
         {"gap", "'b'"}},
        {"trailing", "{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]}}", 8,
         {"trailing", NULL}},
        {"dtype", "{\"a\":{\"dtype\":\"F33\",\"shape\":[1],\"data_offsets\":[0,4]}}", 4,
         {"'a'", "F33"}},
        {"negshape", "{\"a\":{\"dtype\":\"F32\",\"shape\":[-1],\"data_offsets\":[0,4]}}", 4,
         {"'a'", "shape"}},
        {"dup", "{\"a\":{\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":[0,1]},"
                "\"a\":{\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":[1,2]}}", 2,
         {"'a'", "twice"}},
        {"metavalue", "{\"__metadata__\":{\"k\":3},"
                      "\"a\":{\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":[0,1]}}", 1,
         {"'k'", "not a string"}},
        {"garbagepad", "{\"a\":{\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":[0,1]}}  x", 1,
         {"padding", NULL}},
        {"utf8", "{\"\xff\":{\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":[0,1]}}", 1,
         {"UTF-8", NULL}},
        {"offsets", "{\"a\":{\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":[1,0]}}", 1,
         {"'a'", "data_offsets"}},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        char path[512];
        tu_path(path, sizeof path, cases[i].file);
        write_raw(path, cases[i].header, zeros, cases[i].buffer);
        expect_open_fails(path, cases[i].want[0], cases[i].want[1]);
    }
    /* a minimal valid file written the same way opens: the cases above fail for their reason */
    char path[512], err[512];
    tu_path(path, sizeof path, "rawgood");
    write_raw(path, "{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]}}", zeros, 8);
    st_file f;
    assert_int_equal(st_open(&f, path, err, sizeof err), 0);
    st_close(&f);
}

static void test_corrupt_files(void **state) {
    (void)state;
    st_tensor t[8];
    int n = make_tensors(t);
    char good[512], path[512], err[1024];
    tu_path(good, sizeof good, "good.safetensors");
    assert_int_equal(st_write(good, t, n, NULL, err, sizeof err), 0);
    size_t len;
    unsigned char *b = tu_slurp(good, &len);
    FILE *fp;

    tu_path(path, sizeof path, "truncated.safetensors"); /* last 3 bytes lost */
    fp = fopen(path, "wb");
    fwrite(b, 1, len - 3, fp);
    fclose(fp);
    expect_open_fails(path, "truncated", NULL);

    tu_path(path, sizeof path, "tiny.safetensors"); /* shorter than the length field */
    fp = fopen(path, "wb");
    fwrite(b, 1, 5, fp);
    fclose(fp);
    expect_open_fails(path, "too short", NULL);

    tu_path(path, sizeof path, "empty.safetensors");
    fclose(fopen(path, "wb"));
    expect_open_fails(path, "too short", NULL);

    tu_path(path, sizeof path, "hugelen.safetensors"); /* header length = whole file */
    unsigned char *c = malloc(len);
    memcpy(c, b, len);
    for (int i = 0; i < 8; i++) c[i] = (unsigned char)((uint64_t)len >> (8 * i));
    fp = fopen(path, "wb");
    fwrite(c, 1, len, fp);
    fclose(fp);
    expect_open_fails(path, "header length", NULL);

    tu_path(path, sizeof path, "flipjson.safetensors"); /* a structural byte of the JSON broken */
    memcpy(c, b, len);
    c[8] = '[';
    fp = fopen(path, "wb");
    fwrite(c, 1, len, fp);
    fclose(fp);
    expect_open_fails(path, "'{'", NULL);

    expect_open_fails("/nonexistent/dir/x.safetensors", "No such file", NULL);
    free(c);
    free(b);
}

static void test_read_errors(void **state) {
    (void)state;
    st_tensor t[8];
    int n = make_tensors(t);
    char path[512], err[1024];
    tu_path(path, sizeof path, "readerr.safetensors");
    assert_int_equal(st_write(path, t, n, NULL, err, sizeof err), 0);
    st_file f;
    assert_int_equal(st_open(&f, path, err, sizeof err), 0);
    float dst[16];
    assert_int_equal(st_read_tensor(&f, "wte", dst, 44, err, sizeof err), -1);
    assert_non_null(strstr(err, path));
    assert_non_null(strstr(err, "'wte'"));
    assert_non_null(strstr(err, "48 bytes"));
    assert_non_null(strstr(err, "44"));
    assert_int_equal(st_read_tensor(&f, "missing", dst, 4, err, sizeof err), -1);
    assert_non_null(strstr(err, "'missing'"));
    /* the file shrinks after open: pread reports it instead of a SIGBUS */
    const st_info *bf = st_find(&f, "bf");
    assert_int_equal(truncate(path, (off_t)bf->offset + 2), 0);
    uint16_t bbuf[4];
    assert_int_equal(st_read_tensor(&f, "bf", bbuf, sizeof bbuf, err, sizeof err), -1);
    assert_non_null(strstr(err, "'bf'"));
    assert_non_null(strstr(err, "truncated"));
    st_close(&f);
}

static void expect_write_fails(const char *name, const st_tensor *t, int n, const char *meta,
                               const char *want) {
    char path[512], err[1024] = "";
    tu_path(path, sizeof path, name);
    assert_int_equal(st_write(path, t, n, meta, err, sizeof err), -1);
    if (strstr(err, path) == NULL || strstr(err, want) == NULL)
        fail_msg("st_write message '%s' lacks path or '%s'", err, want);
    assert_int_not_equal(access(path, F_OK), 0); /* nothing written */
}

static void test_writer_rejects(void **state) {
    (void)state;
    float x[4] = {1, 2, 3, 4};
    st_tensor dup[2] = {{"a", ST_F32, 1, {2}, x}, {"a", ST_F32, 1, {2}, x + 2}};
    expect_write_fails("w_dup", dup, 2, NULL, "twice");
    st_tensor nd[1] = {{"a", ST_F32, 9, {1, 1, 1, 1, 1, 1, 1, 1}, x}};
    expect_write_fails("w_ndim", nd, 1, NULL, "ndim");
    st_tensor neg[1] = {{"a", ST_F32, 1, {-4}, x}};
    expect_write_fails("w_neg", neg, 1, NULL, "shape");
    st_tensor null_data[1] = {{"a", ST_F32, 1, {4}, NULL}};
    expect_write_fails("w_null", null_data, 1, NULL, "NULL");
    st_tensor meta_name[1] = {{"__metadata__", ST_F32, 1, {4}, x}};
    expect_write_fails("w_metaname", meta_name, 1, NULL, "name");
    st_tensor ok[1] = {{"a", ST_F32, 2, {2, 2}, x}};
    expect_write_fails("w_badmeta", ok, 1, "{not json", "metadata");
    expect_write_fails("w_metanum", ok, 1, "{\"k\": 1}", "'k'");
    expect_write_fails("w_shardname", ok, 1, "{\"shard:b\": \"global=[2,2];offset=[0,0]\"}",
                       "shard:b");
    expect_write_fails("w_shardfit", ok, 1, "{\"shard:a\": \"global=[3,2];offset=[2,0]\"}",
                       "does not fit");
    expect_write_fails("w_shardndim", ok, 1, "{\"shard:a\": \"global=[4];offset=[0]\"}",
                       "does not fit");
    /* a directory that does not exist: an error return naming the path, not an exit */
    char err[1024];
    assert_int_equal(st_write("/nonexistent/dir/x.safetensors", ok, 1, NULL, err, sizeof err), -1);
    assert_non_null(strstr(err, "/nonexistent/dir/x.safetensors"));
    assert_non_null(strstr(err, strerror(ENOENT)));
}

static int count_partial_files(void) {
    DIR *d = opendir(tu_dir);
    struct dirent *e;
    int n = 0;
    while ((e = readdir(d)) != NULL) n += strstr(e->d_name, ".part.") != NULL;
    closedir(d);
    return n;
}

/* A write that runs out of space (here: RLIMIT_FSIZE -> EFBIG, the same code path as ENOSPC)
 * returns an error, and the older file at the same path survives intact. */
static void test_write_failure_keeps_old_file(void **state) {
    (void)state;
    char path[512], err[1024];
    tu_path(path, sizeof path, "keep.safetensors");
    float small[2] = {7, 8};
    st_tensor old[1] = {{"v", ST_F32, 1, {2}, small}};
    assert_int_equal(st_write(path, old, 1, NULL, err, sizeof err), 0);

    const size_t n = 16384;
    float *big = calloc(n, sizeof *big);
    st_tensor t[1] = {{"v", ST_F32, 1, {(int64_t)n}, big}};
    struct rlimit saved, lim;
    getrlimit(RLIMIT_FSIZE, &saved);
    lim = saved;
    lim.rlim_cur = 4096;
    void (*prev)(int) = signal(SIGXFSZ, SIG_IGN);
    assert_int_equal(setrlimit(RLIMIT_FSIZE, &lim), 0);
    int rc = st_write(path, t, 1, NULL, err, sizeof err);
    setrlimit(RLIMIT_FSIZE, &saved);
    signal(SIGXFSZ, prev);
    free(big);
    assert_int_equal(rc, -1);
    assert_non_null(strstr(err, path));
    assert_non_null(strstr(err, strerror(EFBIG)));
    assert_int_equal(count_partial_files(), 0);
    st_file f;
    float back[2];
    assert_int_equal(st_open(&f, path, err, sizeof err), 0);
    assert_int_equal(st_read_tensor(&f, "v", back, sizeof back, err, sizeof err), 0);
    assert_memory_equal(back, small, sizeof small);
    st_close(&f);
}

static void test_shard_metadata(void **state) {
    (void)state;
    float w[24], b[6] = {0};
    for (int i = 0; i < 24; i++) w[i] = (float)i;
    st_tensor t[2] = {{"attn.w", ST_F32, 2, {4, 6}, w}, {"attn.b", ST_F32, 1, {6}, b}};
    st_meta m;
    char err[1024], path[512];
    st_meta_init(&m);
    assert_int_equal(st_meta_set(&m, "format", "pt", err, sizeof err), 0);
    st_shard s = {2, {8, 6}, {4, 0}};
    assert_int_equal(st_meta_set_shard(&m, "attn.w", &s, err, sizeof err), 0);
    assert_int_equal(st_meta_set(&m, "format", "np", err, sizeof err), 0); /* replaces */
    char *meta = st_meta_json(&m);
    assert_non_null(meta);
    tu_path(path, sizeof path, "shard.safetensors");
    assert_int_equal(st_write(path, t, 2, meta, err, sizeof err), 0);
    free(meta);
    st_meta_free(&m);

    st_file f;
    assert_int_equal(st_open(&f, path, err, sizeof err), 0);
    /* the documented text form, literally */
    assert_string_equal(st_metadata(&f, "shard:attn.w"), "global=[8,6];offset=[4,0]");
    assert_string_equal(st_metadata(&f, "format"), "np");
    st_shard got;
    assert_int_equal(st_shard_get(&f, "attn.w", &got, err, sizeof err), 1);
    assert_int_equal(got.ndim, 2);
    assert_int_equal(got.global[0], 8);
    assert_int_equal(got.global[1], 6);
    assert_int_equal(got.offset[0], 4);
    assert_int_equal(got.offset[1], 0);
    assert_int_equal(st_shard_get(&f, "attn.b", &got, err, sizeof err), 0); /* whole tensor */
    assert_int_equal(got.ndim, 1);
    assert_int_equal(got.global[0], 6);
    assert_int_equal(got.offset[0], 0);
    assert_int_equal(st_shard_get(&f, "nope", &got, err, sizeof err), -1);
    st_close(&f);

    /* parser: scalars, spaces, and malformed values */
    assert_int_equal(st_shard_parse("global=[];offset=[]", &got, err, sizeof err), 0);
    assert_int_equal(got.ndim, 0);
    assert_int_equal(st_shard_parse("global=[3072, 768];offset=[1536, 0]", &got, err, sizeof err),
                     0);
    assert_int_equal(got.global[0], 3072);
    assert_int_equal(got.offset[0], 1536);
    const char *bad[] = {"global=[1,2];offset=[0]", "global=[1,2]", "offset=[0];global=[1]",
                         "global=[1,-2];offset=[0,0]", "global=[1,2];offset=[0,0]x",
                         "global=[1,2,3,4,5,6,7,8,9];offset=[0,0,0,0,0,0,0,0,0]", "garbage"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++)
        assert_int_equal(st_shard_parse(bad[i], &got, err, sizeof err), -1);
    char buf[64];
    st_shard three = {3, {10, 20, 30}, {1, 2, 3}};
    assert_int_equal(st_shard_format(buf, sizeof buf, &three), 0);
    assert_string_equal(buf, "global=[10,20,30];offset=[1,2,3]");
    assert_int_equal(st_shard_format(buf, 10, &three), -1);

    /* a file written by someone else with a shard that does not fit: reported on lookup */
    tu_path(path, sizeof path, "badshard.safetensors");
    write_raw(path, "{\"__metadata__\":{\"shard:a\":\"global=[2];offset=[1]\"},"
                    "\"a\":{\"dtype\":\"U8\",\"shape\":[2],\"data_offsets\":[0,2]}}", "xy", 2);
    assert_int_equal(st_open(&f, path, err, sizeof err), 0);
    assert_int_equal(st_shard_get(&f, "a", &got, err, sizeof err), -1);
    assert_non_null(strstr(err, path));
    assert_non_null(strstr(err, "'a'"));
    st_close(&f);
}

static void test_dtype_table(void **state) {
    (void)state;
    const struct { const char *name; size_t size; } want[] = {
        {"F32", 4}, {"I32", 4}, {"U8", 1}, {"F16", 2}, {"BF16", 2}, {"F64", 8}, {"I64", 8},
        {"BOOL", 1}};
    for (size_t i = 0; i < sizeof want / sizeof want[0]; i++) {
        st_dtype d;
        assert_int_equal(st_dtype_from_name(want[i].name, &d), 0);
        assert_int_equal(st_dtype_size(d), want[i].size);
        assert_string_equal(st_dtype_name(d), want[i].name);
    }
    st_dtype d;
    assert_int_equal(st_dtype_from_name("f32", &d), -1);
    assert_int_equal(st_dtype_size((st_dtype)99), 0);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_roundtrip),
        cmocka_unit_test(test_large_streaming),
        cmocka_unit_test(test_python_reference),
        cmocka_unit_test(test_corrupt_headers),
        cmocka_unit_test(test_corrupt_files),
        cmocka_unit_test(test_read_errors),
        cmocka_unit_test(test_writer_rejects),
        cmocka_unit_test(test_write_failure_keeps_old_file),
        cmocka_unit_test(test_shard_metadata),
        cmocka_unit_test(test_dtype_table),
    };
    return cmocka_run_group_tests(tests, tu_setup, tu_teardown);
}
