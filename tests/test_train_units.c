/*
 * tests/test_train_units.c — config parsing, LR schedule, optimizer wiring and the sampler.
 *
 * Expected values are computed here from the formulas (cosine schedule, AdamW), independently of
 * the code under test.
 */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#include "core/config.h"
#include "core/rng.h"
#include "model/model.h"
#include "model/optim.h"
#include "model/sample.h"

#include "tests/testutil.h"

/* ---- config ---- */

static void write_file(const char *path, const char *text) {
    FILE *f = fopen(path, "w");
    assert_non_null(f);
    fputs(text, f);
    fclose(f);
}

static void test_config_ini_and_overrides(void **state) {
    (void)state;
    char dir[TU_DIR_MAX];
    assert_int_equal(tu_mkdtemp(dir, sizeof dir, "test_train_units_cfg"), 0);
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

/* ---- LR schedule ---- */

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

static void test_lr_schedule(void **state) {
    (void)state;
    const int steps = 100, warm = 10;
    const float lr = 1e-3f, mn = 1e-4f;
    assert_float_equal(optim_lr(0, steps, warm, lr, mn), lr / warm, 1e-9);     /* first step */
    assert_float_equal(optim_lr(warm - 1, steps, warm, lr, mn), lr, 1e-9);     /* end of warm-up */
    assert_float_equal(optim_lr(warm, steps, warm, lr, mn), lr, 1e-9);         /* cosine start */
    assert_float_equal(optim_lr(steps - 1, steps, warm, lr, mn), mn, 1e-9);    /* floor */
    assert_float_equal(optim_lr(steps + 5, steps, warm, lr, mn), mn, 1e-9);    /* stays there */
    /* midpoint of the cosine: (lr + min_lr) / 2 */
    int span = steps - 1 - warm;
    if (span % 2 == 0) {
        assert_float_equal(optim_lr(warm + span / 2, steps, warm, lr, mn), (lr + mn) / 2, 1e-8);
    } else {
        double want = mn + 0.5 * (1 + cos(M_PI * (double)(span / 2) / span)) * (lr - mn);
        assert_float_equal(optim_lr(warm + span / 2, steps, warm, lr, mn), want, 1e-8);
    }
    /* monotone decreasing after warm-up */
    for (int s = warm; s < steps - 1; s++)
        assert_true(optim_lr(s + 1, steps, warm, lr, mn) <= optim_lr(s, steps, warm, lr, mn));
    /* no warm-up */
    assert_float_equal(optim_lr(0, steps, 0, lr, mn), lr, 1e-9);
}

static void test_clip_scale(void **state) {
    (void)state;
    assert_float_equal(optim_clip_scale(4.0, 1.0f), 0.25f, 1e-7);
    assert_float_equal(optim_clip_scale(0.5, 1.0f), 1.0f, 0);
    assert_float_equal(optim_clip_scale(4.0, 0.0f), 1.0f, 0);
    float g[4] = {3, 0, -4, 0};
    assert_float_equal(optim_grad_norm(g, 4), 5.0, 1e-12);
}

/* optim_step: decay applies to 2-D tensors only; values from the AdamW formula by hand. */
static void test_optim_step_decay_mask(void **state) {
    (void)state;
    gpt_config cfg = {.n_layer = 1, .n_head = 1, .d_model = 2, .seq_len = 2, .vocab_size = 3};
    gpt_model m;
    char err[256];
    assert_int_equal(gpt_build(&m, &cfg, err, sizeof(err)), 0);
    gpt_alloc_training(&m, 1, 2);
    for (size_t i = 0; i < m.num_params; i++) {
        m.params[i] = 0.5f;
        m.grads[i] = 0.2f;
    }
    optim_adamw o;
    const float lr = 0.1f, wd = 0.5f, b1 = 0.9f, b2 = 0.95f, eps = 1e-8f;
    optim_init(&o, m.num_params, b1, b2, eps, wd);
    optim_step(&o, &m, lr, 1.0f);
    /* step 1: mhat = g, vhat = g², update = g/(|g|+eps) = ~1 */
    double upd = 0.2 / (0.2 + 1e-8);
    for (int t = 0; t < m.n_tensors; t++) {
        const gpt_tensor *ten = &m.tensors[t];
        double want = 0.5 - lr * (upd + (ten->decay ? wd * 0.5 : 0.0));
        for (size_t j = 0; j < ten->numel; j++)
            assert_float_equal(m.params[ten->offset + j], want, 1e-6);
    }
    optim_free(&o);
    gpt_free(&m);
}

/* ---- sampler ---- */

static void test_sampler(void **state) {
    (void)state;
    float logits[5] = {0.1f, 2.0f, -1.0f, 2.0f, 0.5f};
    rng_state r;
    rng_seed(&r, 1);
    sample_params greedy = {0.0f, 0, 1.0f};
    assert_int_equal(sample_token(logits, 5, &greedy, &r, NULL), 1); /* tie -> lowest id */
    sample_params k1 = {1.0f, 1, 1.0f};
    for (int i = 0; i < 20; i++) assert_int_equal(sample_token(logits, 5, &k1, &r, NULL), 1);
    /* top-k 2 only ever returns the two best (ids 1 and 3) and both appear */
    sample_params k2 = {1.0f, 2, 1.0f};
    int seen[5] = {0};
    for (int i = 0; i < 400; i++) seen[sample_token(logits, 5, &k2, &r, NULL)]++;
    assert_int_equal(seen[0] + seen[2] + seen[4], 0);
    assert_true(seen[1] > 100 && seen[3] > 100);
    /* frequencies at temperature 1 follow softmax (chi-square-free loose check, 20k draws) */
    sample_params full = {1.0f, 0, 1.0f};
    int cnt[5] = {0};
    const int n = 20000;
    for (int i = 0; i < n; i++) cnt[sample_token(logits, 5, &full, &r, NULL)]++;
    double z = 0;
    for (int i = 0; i < 5; i++) z += exp(logits[i]);
    for (int i = 0; i < 5; i++) {
        double p = exp(logits[i]) / z, sd = sqrt(p * (1 - p) / n);
        assert_true(fabs((double)cnt[i] / n - p) < 5 * sd + 1e-3);
    }
    /* top-p smaller than the best probability keeps only the argmax set's first member */
    sample_params p1 = {1.0f, 0, 0.1f};
    for (int i = 0; i < 20; i++) assert_int_equal(sample_token(logits, 5, &p1, &r, NULL), 1);
    /* same seed, same draws */
    rng_state a, b;
    rng_seed(&a, 42);
    rng_seed(&b, 42);
    for (int i = 0; i < 50; i++)
        assert_int_equal(sample_token(logits, 5, &full, &a, NULL), sample_token(logits, 5, &full, &b, NULL));
}

static void test_rng_normal_moments(void **state) {
    (void)state;
    rng_state r;
    rng_seed(&r, 7);
    double s = 0, s2 = 0;
    const int n = 200000;
    for (int i = 0; i < n; i++) {
        double x = rng_normal(&r);
        s += x;
        s2 += x * x;
    }
    assert_true(fabs(s / n) < 0.02);
    assert_true(fabs(s2 / n - 1.0) < 0.02);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_config_ini_and_overrides),
        cmocka_unit_test(test_config_duplicate_key_refused),
        cmocka_unit_test(test_config_json),
        cmocka_unit_test(test_config_ckpt_auto),
        cmocka_unit_test(test_lr_schedule),
        cmocka_unit_test(test_clip_scale),
        cmocka_unit_test(test_optim_step_decay_mask),
        cmocka_unit_test(test_sampler),
        cmocka_unit_test(test_rng_normal_moments),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
