/*
 * tests/test_optim.c — the optimizer (model/optim.h): the LR schedule (linear warm-up, cosine to
 * min_lr), gradient clipping, and one AdamW step with decay on 2-D tensors only.
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

#include "model/model.h"
#include "model/optim.h"

#include "tests/testutil.h"

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

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_lr_schedule),
        cmocka_unit_test(test_clip_scale),
        cmocka_unit_test(test_optim_step_decay_mask),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
