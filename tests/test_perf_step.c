/*
 * tests/test_perf_step.c — what the step-speed work changed must not change any value:
 *   - the weight initialisation draws exactly the weights of one sequential walk of rng_normal
 *     (tensors a pipeline stage does not hold only advance the generator: 2 draws per element),
 *     and rng_normal is its Box-Muller definition bit for bit;
 *   - core/mem.h's mem_prepare keeps a buffer's contents, and is harmless on small blocks and on
 *     memory that cannot be touched (PROT_NONE, as the guard backend maps it);
 *   - ops/prof.h accounts time only while on, and the statement runs either way.
 */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cmocka.h>

#include "core/mem.h"
#include "core/rng.h"
#include "model/model.h"
#include "ops/ops.h"
#include "ops/prof.h"

/* rng_normal written out (the reference). */
static float old_normal(rng_state *r) {
    float u1 = 1.0f - rng_uniform(r);
    float u2 = rng_uniform(r);
    return sqrtf(-2.0f * logf(u1)) * cosf(6.2831853071795864f * u2);
}

static void test_rng_normal_unchanged(void **state) {
    (void)state;
    rng_state a, b;
    rng_seed(&a, 42);
    rng_seed(&b, 42);
    for (int i = 0; i < 200000; i++) {
        float x = rng_normal(&a), y = old_normal(&b);
        if (memcmp(&x, &y, sizeof x) != 0) fail_msg("draw %d: %a != %a", i, x, y);
    }
}

/* gpt_init_weights against the sequential walk, tensor by tensor in the model's order. */
static void test_init_weights_sequential(void **state) {
    (void)state;
    ops_set_threads(2);
    gpt_config cfg = {.n_layer = 2, .n_head = 2, .d_model = 16, .seq_len = 8, .vocab_size = 70000};
    gpt_model m;
    char err[256];
    assert_int_equal(gpt_build(&m, &cfg, err, sizeof err), 0);
    gpt_init_weights(&m, 7);
    rng_state r;
    rng_seed(&r, 7);
    const size_t C = 16, V = 70000;
    const float resid_std = 0.02f / sqrtf(2.0f * 2);
    /* wte, then wpe, drawn in that order; "c_proj.weight" tensors get resid_std, the others 0.02 */
    for (size_t j = 0; j < V * C; j++) {
        float want = 0.02f * old_normal(&r);
        if (memcmp(&m.wte[j], &want, sizeof want) != 0) fail_msg("wte[%zu]", j);
    }
    for (size_t j = 0; j < 8 * C; j++) {
        float want = 0.02f * old_normal(&r);
        if (memcmp(&m.wpe[j], &want, sizeof want) != 0) fail_msg("wpe[%zu]", j);
    }
    /* block 0: ln_1 constants, then c_attn.weight (3C, C) at 0.02 */
    for (size_t j = 0; j < 3 * C * C; j++) {
        float want = 0.02f * old_normal(&r);
        if (memcmp(&m.blocks[0].qkvw[j], &want, sizeof want) != 0) fail_msg("qkvw[%zu]", j);
    }
    /* then c_proj.weight (C, C) at resid_std */
    for (size_t j = 0; j < C * C; j++) {
        float want = resid_std * old_normal(&r);
        if (memcmp(&m.blocks[0].attprojw[j], &want, sizeof want) != 0) fail_msg("attprojw[%zu]", j);
    }
    gpt_free(&m);
}

static void test_mem_prepare_keeps_contents(void **state) {
    (void)state;
    size_t n = (size_t)5 << 20; /* 5 MiB + a few bytes: partial huge pages at both ends */
    unsigned char *p = malloc(n + 13);
    assert_non_null(p);
    for (size_t i = 0; i < n + 13; i++) p[i] = (unsigned char)(i * 2654435761u >> 13);
    mem_prepare(p + 3, n);
    for (size_t i = 0; i < n + 13; i++)
        if (p[i] != (unsigned char)(i * 2654435761u >> 13)) fail_msg("byte %zu changed", i);
    free(p);
    float *z = calloc((size_t)4 << 20, sizeof(float)); /* fresh: must stay zero */
    assert_non_null(z);
    mem_prepare(z, ((size_t)4 << 20) * sizeof(float));
    for (size_t i = 0; i < ((size_t)4 << 20); i++)
        if (z[i] != 0.0f) fail_msg("calloc'd float %zu is %g", i, z[i]);
    free(z);
    char small[64] = {1};
    mem_prepare(small, sizeof small); /* under 1 MiB: nothing happens */
    assert_int_equal(small[0], 1);
    mem_prepare(NULL, (size_t)1 << 30);
    /* PROT_NONE (guard-style) memory: the populate is refused, nothing faults */
    size_t gn = (size_t)4 << 20;
    void *g = mmap(NULL, gn, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    assert_true(g != MAP_FAILED);
    mem_prepare(g, gn);
    assert_int_equal(mprotect(g, gn, PROT_READ), 0);
    assert_int_equal(((volatile unsigned char *)g)[gn - 1], 0);
    munmap(g, gn);
}

static void test_prof_accounts_only_when_on(void **state) {
    (void)state;
    volatile int runs = 0;
    prof_reset();
    prof_enable(0);
    PROF(PROF_ADAMW, runs++);
    assert_int_equal(runs, 1);
    assert_true(prof_acc[PROF_ADAMW] == 0.0);
    prof_enable(1);
    PROF(PROF_ADAMW, { runs++; usleep(2000); });
    prof_enable(0);
    assert_int_equal(runs, 2);
    assert_true(prof_acc[PROF_ADAMW] >= 0.0015 && prof_acc[PROF_ADAMW] < 5.0);
    assert_true(prof_acc[PROF_GELU_FWD] == 0.0);
    for (int k = 0; k < PROF_N; k++) assert_string_not_equal(prof_name((prof_kind)k), "?");
    prof_reset();
    assert_true(prof_acc[PROF_ADAMW] == 0.0);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_rng_normal_unchanged),
        cmocka_unit_test(test_init_weights_sequential),
        cmocka_unit_test(test_mem_prepare_keeps_contents),
        cmocka_unit_test(test_prof_accounts_only_when_on),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
