/*
 * tests/test_model_json.c — the model shape as JSON (model/model.h, gpt_config_to_json /
 * gpt_config_from_json) and every reader built on it.
 *
 * Round trips of a dense and a mixture-of-experts shape (through the text, and through a real
 * model file written by model_io_save and read by model_io_load); then each of the three readers
 * — the function itself, a checkpoint state's "model" (model_ckpt_state_config) and a model
 * file's "minitrain.model" metadata (model_io_load) — must refuse every field missing, of the
 * wrong JSON type, or (integers) not whole or beyond int, naming the field. The MoE group may be
 * absent as a whole (a dense file from before it existed), never in part.
 */
#include <limits.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>
#include <cmocka.h>

#include "ckpt/safetensors.h"
#include "model/model.h"
#include "model/model_ckpt.h"
#include "model/model_io.h"
#include "tests/testutil.h"

static const char *const FIELDS[] = {"n_layer", "n_head", "d_model", "seq_len", "vocab_size",
                                     "moe_every", "n_experts", "top_k", "capacity_factor",
                                     "aux_coef", "z_coef"};
#define NF 11
#define FIRST_MOE 5

static gpt_config dense(void) {
    return (gpt_config){.n_layer = 3, .n_head = 2, .d_model = 16, .seq_len = 8, .vocab_size = 40,
                        .n_experts = 4, .top_k = 1, .capacity_factor = 1.25f, .aux_coef = 0.01f};
}

static gpt_config moe(void) {
    gpt_config c = dense();
    c.n_layer = 2;
    c.moe_every = 2;
    c.n_experts = 4;
    c.top_k = 2;
    c.capacity_factor = 0; /* dropless */
    c.aux_coef = 0.02f;
    c.z_coef = 0.001f;
    return c;
}

/* the shape fields of a and b are equal (layout fields are not part of the shape) */
static void assert_same_shape(const gpt_config *a, const gpt_config *b) {
    assert_int_equal(a->n_layer, b->n_layer);
    assert_int_equal(a->n_head, b->n_head);
    assert_int_equal(a->d_model, b->d_model);
    assert_int_equal(a->seq_len, b->seq_len);
    assert_int_equal(a->vocab_size, b->vocab_size);
    assert_int_equal(a->moe_every, b->moe_every);
    assert_int_equal(a->n_experts, b->n_experts);
    assert_int_equal(a->top_k, b->top_k);
    assert_true(a->capacity_factor == b->capacity_factor);
    assert_true(a->aux_coef == b->aux_coef);
    assert_true(a->z_coef == b->z_coef);
}

/* to_json -> text -> parse -> from_json */
static gpt_config through_text(const gpt_config *c, char **text_out) {
    cJSON *o = gpt_config_to_json(c);
    assert_non_null(o);
    char *text = cJSON_PrintUnformatted(o);
    cJSON_Delete(o);
    cJSON *p = cJSON_Parse(text);
    assert_non_null(p);
    gpt_config back;
    char err[512];
    memset(&back, 0x5A, sizeof(back));
    int rc = gpt_config_from_json(p, &back, "t", err, sizeof(err));
    if (rc) fprintf(stderr, "%s\n", err);
    assert_int_equal(rc, 0);
    assert_int_equal(back.tp + back.pp + back.ep + back.tp_rank + back.layer_end, 0);
    cJSON_Delete(p);
    if (text_out) *text_out = text;
    else free(text);
    return back;
}

static void test_round_trip(void **state) {
    (void)state;
    gpt_config d = dense(), m = moe();
    char *text;
    gpt_config back = through_text(&d, &text);
    assert_same_shape(&d, &back);
    /* every field written, floats as their shortest float text */
    for (int i = 0; i < NF; i++) {
        char key[40];
        snprintf(key, sizeof(key), "\"%s\":", FIELDS[i]);
        assert_non_null(strstr(text, key));
    }
    assert_non_null(strstr(text, "\"aux_coef\":0.00999999978"));
    free(text);
    back = through_text(&m, NULL);
    assert_same_shape(&m, &back);
}

/* a real model file: model_io_save writes the shape, model_io_load reads it back */
static void test_model_file_round_trip(void **state) {
    char path[512], err[512];
    tu_path(path, sizeof(path), "m.safetensors");
    (void)state;
    const gpt_config shapes[2] = {dense(), moe()};
    for (int s = 0; s < 2; s++) {
        gpt_model m = {0}, back = {0};
        assert_int_equal(gpt_build(&m, &shapes[s], err, sizeof(err)), 0);
        assert_int_equal(model_io_save(&m, path, NULL, 7, err, sizeof(err)), 0);
        int step = 0;
        int rc = model_io_load(&back, path, &step, err, sizeof(err));
        if (rc) fprintf(stderr, "%s\n", err);
        assert_int_equal(rc, 0);
        assert_int_equal(step, 7);
        assert_same_shape(&shapes[s], &back.cfg);
        gpt_free(&m);
        gpt_free(&back);
    }
}

/* ---- refusals ------------------------------------------------------------------------------- */

typedef int (*reader)(const cJSON *shape, char *err, size_t errlen);

static int read_direct(const cJSON *shape, char *err, size_t errlen) {
    gpt_config c;
    return gpt_config_from_json(shape, &c, "direct", err, errlen);
}

static int read_state(const cJSON *shape, char *err, size_t errlen) {
    cJSON *st = cJSON_CreateObject();
    cJSON_AddItemToObject(st, "model", cJSON_Duplicate(shape, 1));
    gpt_config c;
    int rc = model_ckpt_state_config(st, "runs/x/ckpt/step_5", &c, err, errlen);
    cJSON_Delete(st);
    return rc;
}

/* a safetensors file with one dummy tensor and the shape as its minitrain.model metadata. A
 * shape that reads gets as far as the tensor check, which refuses the dummy: that counts as the
 * shape accepted (0); any other refusal is the reader's (-1). */
static int read_model_file(const cJSON *shape, char *err, size_t errlen) {
    char path[512];
    tu_path(path, sizeof(path), "bad.safetensors");
    char *text = cJSON_PrintUnformatted(shape);
    cJSON *meta = cJSON_CreateObject();
    cJSON_AddStringToObject(meta, "format", "minitrain-gpt2");
    cJSON_AddStringToObject(meta, "minitrain.model", text);
    cJSON_AddStringToObject(meta, "minitrain.step", "1");
    char *meta_text = cJSON_PrintUnformatted(meta);
    float x = 0;
    st_tensor t = {.name = "wte", .dtype = ST_F32, .ndim = 1, .shape = {1}, .data = &x};
    assert_int_equal(st_write(path, &t, 1, meta_text, err, errlen), 0);
    free(text);
    free(meta_text);
    cJSON_Delete(meta);
    gpt_model m = {0};
    int rc = model_io_load(&m, path, NULL, err, errlen);
    if (rc == 0) gpt_free(&m);
    return rc == 0 || strstr(err, "is missing or has the wrong dtype/shape") ? 0 : -1;
}

static const struct {
    const char *name;
    reader fn;
} READERS[] = {{"gpt_config_from_json", read_direct},
               {"model_ckpt_state_config", read_state},
               {"model_io_load", read_model_file}};

static void expect_refusal(int r, const cJSON *shape, const char *field, const char *how) {
    char err[1024] = "", want[128];
    int rc = READERS[r].fn(shape, err, sizeof(err));
    snprintf(want, sizeof(want), "model shape field '%s' %s", field, how);
    if (rc == 0 || !strstr(err, want))
        fprintf(stderr, "%s, field %s: rc %d, '%s' (want '%s')\n", READERS[r].name, field, rc, err,
                want);
    assert_int_equal(rc, -1);
    assert_non_null(strstr(err, want));
}

static void test_every_reader_refuses_by_name(void **state) {
    (void)state;
    gpt_config m = moe();
    cJSON *good = gpt_config_to_json(&m);
    for (int r = 0; r < 3; r++) {
        char err[1024];
        assert_int_equal(READERS[r].fn(good, err, sizeof(err)), 0); /* the control */
        for (int i = 0; i < NF; i++) {
            cJSON *bad = cJSON_Duplicate(good, 1);
            cJSON_DeleteItemFromObjectCaseSensitive(bad, FIELDS[i]);
            expect_refusal(r, bad, FIELDS[i], "is missing");
            cJSON_AddItemToObject(bad, FIELDS[i], cJSON_CreateString("4"));
            expect_refusal(r, bad, FIELDS[i], "must be a number");
            if (i < FIRST_MOE + 3) { /* the integers */
                cJSON_ReplaceItemInObjectCaseSensitive(bad, FIELDS[i], cJSON_CreateNumber(1.5));
                expect_refusal(r, bad, FIELDS[i], "must be a whole number");
                cJSON_ReplaceItemInObjectCaseSensitive(bad, FIELDS[i],
                                                       cJSON_CreateNumber((double)INT_MAX + 1));
                expect_refusal(r, bad, FIELDS[i], "must be a whole number");
            }
            cJSON_Delete(bad);
        }
        /* not an object at all */
        cJSON *arr = cJSON_CreateArray();
        assert_int_equal(READERS[r].fn(arr, err, sizeof(err)), -1);
        cJSON_Delete(arr);
    }
    cJSON_Delete(good);
}

/* a dense shape written before the MoE fields existed: the whole group absent reads as dense */
static void test_dense_without_moe_group(void **state) {
    (void)state;
    gpt_config d = dense();
    cJSON *o = gpt_config_to_json(&d);
    for (int i = FIRST_MOE; i < NF; i++) cJSON_DeleteItemFromObjectCaseSensitive(o, FIELDS[i]);
    gpt_config back;
    char err[512];
    assert_int_equal(gpt_config_from_json(o, &back, "t", err, sizeof(err)), 0);
    assert_int_equal(back.n_layer, d.n_layer);
    assert_int_equal(back.d_model, d.d_model);
    assert_int_equal(back.moe_every + back.n_experts + back.top_k, 0);
    for (int r = 1; r < 3; r++) assert_int_equal(READERS[r].fn(o, err, sizeof(err)), 0);
    cJSON_Delete(o);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_round_trip),
        cmocka_unit_test_setup_teardown(test_model_file_round_trip, tu_setup, tu_teardown),
        cmocka_unit_test_setup_teardown(test_every_reader_refuses_by_name, tu_setup, tu_teardown),
        cmocka_unit_test_setup_teardown(test_dense_without_moe_group, tu_setup, tu_teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
