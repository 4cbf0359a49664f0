/*
 * tests/test_config.c — the training config (core/config.h): INI files and `--key value`
 * overrides, keys refused by name (unknown, repeated, out of range, cross-key checks), the JSON
 * dump, and ckpt_every = auto.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#include "core/config.h"

#include "tests/testutil.h"

static void write_file(const char *path, const char *text) {
    FILE *f = fopen(path, "w");
    assert_non_null(f);
    fputs(text, f);
    fclose(f);
}

static void test_config_ini_and_overrides(void **state) {
    (void)state;
    char dir[TU_DIR_MAX];
    assert_int_equal(tu_mkdtemp(dir, sizeof dir, "test_config"), 0);
    char path[TU_DIR_MAX + 16], err[512];
    snprintf(path, sizeof(path), "%s/a.ini", dir);
    write_file(path, "; comment\n[model]\nn_layer = 6\nd_model=192\n[train]\nlr = 3e-4\ndata = d/x\n");
    mt_config c;
    config_defaults(&c);
    assert_int_equal(c.n_layer, 4);
    assert_int_equal(config_load_ini(&c, path, err, sizeof(err)), 0);
    assert_int_equal(c.n_layer, 6);
    assert_int_equal(c.d_model, 192);
    assert_float_equal(c.lr, 3e-4f, 1e-9);
    assert_string_equal(c.data, "d/x");
    assert_int_equal(config_set(&c, "warmup-steps", "7", err, sizeof(err)), 0);
    assert_int_equal(c.warmup_steps, 7);
    /* unknown key, bad numbers, out of range: refused by name */
    assert_int_equal(config_set(&c, "n_layers", "3", err, sizeof(err)), -1);
    assert_non_null(strstr(err, "n_layers"));
    assert_int_equal(config_set(&c, "n_layer", "2.5", err, sizeof(err)), -1);
    assert_non_null(strstr(err, "n_layer"));
    assert_int_equal(config_set(&c, "lr", "fast", err, sizeof(err)), -1);
    assert_int_equal(config_set(&c, "lr", "nan", err, sizeof(err)), -1);
    assert_int_equal(config_set(&c, "n_head", "0", err, sizeof(err)), -1);
    assert_non_null(strstr(err, "out of range"));
    write_file(path, "n_layer = 2\nbogus_key = 1\n");
    assert_int_equal(config_load_ini(&c, path, err, sizeof(err)), -1);
    assert_non_null(strstr(err, "bogus_key"));
    write_file(path, "this line has no equals sign\n");
    assert_int_equal(config_load_ini(&c, path, err, sizeof(err)), -1);
    assert_non_null(strstr(err, ":1"));
    /* cross-key validation */
    config_defaults(&c);
    snprintf(c.data, sizeof(c.data), "x");
    assert_int_equal(config_validate(&c, err, sizeof(err)), 0);
    c.n_head = 3; /* 128 % 3 != 0 */
    assert_int_equal(config_validate(&c, err, sizeof(err)), -1);
    assert_non_null(strstr(err, "n_head"));
    config_defaults(&c);
    snprintf(c.data, sizeof(c.data), "x");
    c.global_batch = 12, c.batch_size = 8;
    assert_int_equal(config_validate(&c, err, sizeof(err)), -1);
    assert_non_null(strstr(err, "global_batch"));
    assert_int_equal(tu_rmtree(dir), 0);
}

/* Issue 11, finding 5: a key given twice was silently "last wins". It is refused by name, in the
 * same section or another; `fault` is a list and may repeat (each line adds a spec). */
static void test_config_duplicate_key_refused(void **state) {
    (void)state;
    char dir[] = "/tmp/mt_cfg_XXXXXX";
    assert_non_null(mkdtemp(dir));
    char path[256], err[512];
    snprintf(path, sizeof(path), "%s/d.ini", dir);
    mt_config c;
    write_file(path, "[model]\nn_layer = 2\n[train]\nsteps = 3\nn_layer = 3\n");
    config_defaults(&c);
    assert_int_equal(config_load_ini(&c, path, err, sizeof(err)), -1);
    assert_non_null(strstr(err, "'n_layer' is given twice"));
    assert_non_null(strstr(err, "[model]"));
    assert_non_null(strstr(err, "[train]"));
    write_file(path, "lr = 1e-3\nlr = 2e-3\n");
    config_defaults(&c);
    assert_int_equal(config_load_ini(&c, path, err, sizeof(err)), -1);
    assert_non_null(strstr(err, "'lr'"));
    /* dashes and underscores name the same key */
    write_file(path, "warmup_steps = 1\nwarmup-steps = 2\n");
    config_defaults(&c);
    assert_int_equal(config_load_ini(&c, path, err, sizeof(err)), -1);
    assert_non_null(strstr(err, "warmup_steps"));
    write_file(path, "fault = kill@step=3\nfault = hang@step=5\n");
    config_defaults(&c);
    assert_int_equal(config_load_ini(&c, path, err, sizeof(err)), 0);
    assert_string_equal(c.fault, "kill@step=3;hang@step=5");
    unlink(path);
    rmdir(dir);
}

static void test_config_json(void **state) {
    (void)state;
    mt_config c;
    config_defaults(&c);
    snprintf(c.data, sizeof(c.data), "a\"b");
    char buf[8192];
    size_t n = config_to_json(&c, buf, sizeof(buf));
    assert_true(n < sizeof(buf));
    assert_non_null(strstr(buf, "\"n_layer\":4"));
    assert_non_null(strstr(buf, "\"data\":\"a\\\"b\""));
}

/* ckpt_every takes "auto" (Young/Daly, sched/hooks.h) and only that word; it survives the JSON
 * dump as "auto". */
static void test_config_ckpt_auto(void **state) {
    (void)state;
    mt_config c;
    char err[256], buf[16384];
    config_defaults(&c);
    assert_int_equal(config_set(&c, "ckpt-every", "auto", err, sizeof(err)), 0);
    assert_int_equal(c.ckpt_every, CONFIG_CKPT_AUTO);
    assert_int_equal(config_set(&c, "mtbf_s", "120", err, sizeof(err)), 0);
    assert_true(c.mtbf_s == 120.0f);
    config_to_json(&c, buf, sizeof(buf));
    assert_non_null(strstr(buf, "\"ckpt_every\":\"auto\""));
    assert_int_equal(config_set(&c, "ckpt_every", "sometimes", err, sizeof(err)), -1);
    assert_int_equal(config_set(&c, "ckpt_every", "-1", err, sizeof(err)), -1); /* no back door */
    assert_int_equal(config_set(&c, "ckpt_every", "25", err, sizeof(err)), 0);
    assert_int_equal(c.ckpt_every, 25);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_config_ini_and_overrides),
        cmocka_unit_test(test_config_duplicate_key_refused),
        cmocka_unit_test(test_config_json),
        cmocka_unit_test(test_config_ckpt_auto),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
