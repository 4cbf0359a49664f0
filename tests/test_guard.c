/*
 * tests/test_guard.c — the guard device (ops/ops_guard.c) and backend selection (ops/ops.c).
 *
 * The guard is only worth something if it (1) computes exactly what the cpu backend computes and
 * (2) really stops a host access to device memory. So: ops on guard memory are compared bit for
 * bit with the cpu kernels on host copies; and forked children commit the three mistakes the
 * guard must catch — a stray host read, a host buffer handed to an op, an op running past the end
 * of its buffer — and must die with status 86 and a message naming the allocation. Selection:
 * unknown names and cuda in a build without CUDA are refused with one line.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmocka.h>

#include "core/rng.h"
#include "ops/ops.h"
#include "ops/ops_cpu.h"

#define GUARD_EXIT 86

static void fill(float *x, size_t n, uint64_t seed) {
    rng_state r;
    rng_seed(&r, seed);
    for (size_t i = 0; i < n; i++) x[i] = rng_normal(&r);
}

static float *to_dev(const float *h, size_t n, const char *what) {
    float *d = ops_alloc(n * sizeof(float), what);
    ops_copy_h2d(d, h, n * sizeof(float));
    return d;
}

static int setup(void **state) {
    (void)state;
    unsetenv("MINITRAIN_DEVICE");
    char err[256];
    if (ops_select("guard", 0, err, sizeof(err)) != 0) {
        fprintf(stderr, "%s\n", err);
        return -1;
    }
    return 0;
}

/* matmul, layernorm, cross-entropy, sumsq_multi, embed_rows, MoE route/combine on guard memory
 * equal the cpu kernels on host memory exactly (same kernels, so any difference is a copy bug). */
static void test_guard_ops_equal_cpu(void **state) {
    (void)state;
    assert_string_equal(ops_device(), "guard");
    enum { N = 6, C = 16, OC = 12, V = 10, E = 4, K = 2 };
    float inp[N * C], w[OC * C], bias[OC], out_ref[N * OC], out[N * OC];
    fill(inp, N * C, 1);
    fill(w, OC * C, 2);
    fill(bias, OC, 3);
    float *d_inp = to_dev(inp, N * C, "inp"), *d_w = to_dev(w, OC * C, "w");
    float *d_b = to_dev(bias, OC, "bias"), *d_out = ops_alloc(sizeof(out), "out");
    ops_cpu_matmul_forward(out_ref, inp, w, bias, N, C, OC);
    ops_matmul_forward(d_out, d_inp, d_w, d_b, N, C, OC);
    ops_copy_d2h(out, d_out, sizeof(out));
    assert_memory_equal(out, out_ref, sizeof(out));
    /* bias add after a TP all-reduce */
    ops_cpu_bias_add(out_ref, bias, N, OC);
    ops_bias_add(d_out, d_b, N, OC);
    ops_copy_d2h(out, d_out, sizeof(out));
    assert_memory_equal(out, out_ref, sizeof(out));
    /* cross-entropy returns the same sum and leaves the same gradient */
    float logits[N * V], losses[N], dl[N * V];
    int tg[N] = {1, 3, 9, -1, 0, 5};
    fill(logits, N * V, 4);
    float *d_logits = to_dev(logits, N * V, "logits"), *d_losses = ops_alloc(sizeof(losses), "l");
    int *d_tg = ops_alloc(sizeof(tg), "targets");
    ops_copy_h2d(d_tg, tg, sizeof(tg));
    double s_ref = ops_cpu_softmax_crossentropy(logits, losses, tg, N, V, 0.1f);
    double s = ops_softmax_crossentropy(d_logits, d_losses, d_tg, N, V, 0.1f);
    assert_true(s == s_ref);
    ops_copy_d2h(dl, d_logits, sizeof(dl));
    assert_memory_equal(dl, logits, sizeof(dl));
    /* multi-tensor sum of squares = one ops_sumsq per tensor */
    const float *xs[3] = {d_inp, d_w, d_b};
    size_t ns[3] = {N * C, OC * C, 0};
    double sq[3];
    ops_sumsq_multi(sq, xs, ns, 3);
    assert_true(sq[0] == ops_cpu_sumsq(inp, N * C));
    assert_true(sq[1] == ops_cpu_sumsq(w, OC * C));
    assert_true(sq[2] == 0.0);
    /* non-finite check: index of the first NaN */
    assert_int_equal(ops_first_nonfinite(d_inp, N * C), -1);
    ops_set_f32(d_inp + 17, NAN);
    assert_int_equal(ops_first_nonfinite(d_inp, N * C), 17);
    /* MoE routing: probabilities, expert ids and gates */
    float r[N * E], r_ref[N * E], lse[N], lse_ref[N], g[N * K], g_ref[N * K];
    int ex[N * K], ex_ref[N * K];
    fill(r_ref, N * E, 5);
    float *d_r = to_dev(r_ref, N * E, "router"), *d_lse = ops_alloc(sizeof(lse), "lse");
    float *d_g = ops_alloc(sizeof(g), "gates");
    int *d_ex = ops_alloc(sizeof(ex), "experts");
    ops_cpu_moe_route(r_ref, lse_ref, ex_ref, g_ref, N, E, K);
    ops_moe_route(d_r, d_lse, d_ex, d_g, N, E, K);
    ops_copy_d2h(r, d_r, sizeof(r));
    ops_copy_d2h(lse, d_lse, sizeof(lse));
    ops_copy_d2h(ex, d_ex, sizeof(ex));
    ops_copy_d2h(g, d_g, sizeof(g));
    assert_memory_equal(r, r_ref, sizeof(r));
    assert_memory_equal(lse, lse_ref, sizeof(lse));
    assert_memory_equal(ex, ex_ref, sizeof(ex));
    assert_memory_equal(g, g_ref, sizeof(g));
    for (int t = 0; t < N; t++) { /* and they are a real softmax + top-2 */
        assert_true(fabsf(g[t * K] + g[t * K + 1] - 1.0f) < 1e-6f);
        assert_true(r[t * E + ex[t * K]] >= r[t * E + ex[t * K + 1]]);
    }
    void *all[] = {d_inp, d_w, d_b, d_out, d_logits, d_losses, d_tg, d_r, d_lse, d_g, d_ex};
    for (size_t i = 0; i < sizeof(all) / sizeof(all[0]); i++) ops_free(all[i]);
}

static void test_guard_memory_api(void **state) {
    (void)state;
    float h[300], back[300];
    fill(h, 300, 9);
    float *a = ops_alloc(sizeof(h), "a"), *b = ops_alloc(sizeof(h), "b");
    assert_true(ops_is_device(a) && ops_is_device(a + 299) && !ops_is_device(h));
    ops_copy_d2h(back, a, sizeof(back)); /* fresh memory is zero */
    for (int i = 0; i < 300; i++) assert_true(back[i] == 0.0f);
    ops_copy_h2d(a, h, sizeof(h));
    ops_copy_d2d(b, a, sizeof(h));
    ops_copy_d2h(back, b, sizeof(back));
    assert_memory_equal(back, h, sizeof(h));
    ops_zero(b + 100, 100 * sizeof(float));
    ops_copy_d2h(back, b, sizeof(back));
    assert_true(back[99] == h[99] && back[100] == 0.0f && back[199] == 0.0f && back[200] == h[200]);
    assert_true(ops_get_f32(a + 7) == h[7]);
    float *hc = ops_host_copy(a + 5, 200); /* device memory: a host copy of exactly those floats */
    assert_non_null(hc);
    assert_memory_equal(hc, h + 5, 200 * sizeof(float));
    free(hc);
    assert_null(ops_host_copy(h, 300)); /* host memory: nothing to copy */
    ops_free(a);
    ops_free(b);
}

/* Run fn in a child; return its exit status (-1 if it did not exit) and its stderr in buf. */
static int in_child(void (*fn)(void), char *buf, size_t len) {
    int fd[2];
    assert_int_equal(pipe(fd), 0);
    fflush(NULL);
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        dup2(fd[1], 2);
        close(fd[0]);
        fn();
        _exit(0); /* the guard did not fire */
    }
    close(fd[1]);
    size_t n = 0;
    ssize_t k;
    while (n + 1 < len && (k = read(fd[0], buf + n, len - 1 - n)) > 0) n += (size_t)k;
    buf[n] = 0;
    close(fd[0]);
    int st = 0;
    waitpid(pid, &st, 0);
    return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

static void stray_read(void) {
    float *p = ops_alloc(64 * sizeof(float), "probe tensor");
    volatile float x = p[3]; /* host code reading device memory: must fault here */
    (void)x;
}
static void host_arg(void) {
    float *p = ops_alloc(64 * sizeof(float), "y");
    float host[64] = {0};
    ops_add_inplace(p, host, 64); /* a host buffer handed to a device op */
}
static void overrun(void) {
    float *p = ops_alloc(1024 * sizeof(float), "short buffer"); /* exactly one page */
    ops_scale(p, 1024 + 16, 2.0f); /* an op told a size larger than its buffer */
}

static void test_guard_stray_access_faults(void **state) {
    (void)state;
    char err[8192];
    assert_int_equal(in_child(stray_read, err, sizeof(err)), GUARD_EXIT);
    assert_non_null(strstr(err, "stray host access"));
    assert_non_null(strstr(err, "byte 12 of guard allocation 'probe tensor'"));
}

static void test_guard_host_pointer_refused(void **state) {
    (void)state;
    char err[8192];
    assert_int_equal(in_child(host_arg, err, sizeof(err)), GUARD_EXIT);
    assert_non_null(strstr(err, "ops_add_inplace: pointer argument 2"));
    assert_non_null(strstr(err, "is host memory"));
}

static void test_guard_overrun_faults(void **state) {
    (void)state;
    char err[8192];
    assert_int_equal(in_child(overrun, err, sizeof(err)), GUARD_EXIT);
    assert_non_null(strstr(err, "'short buffer'"));
    assert_non_null(strstr(err, "past its end"));
}

static void test_select_refusals(void **state) {
    (void)state;
    char err[256];
    assert_int_equal(ops_select("tpu", 0, err, sizeof(err)), -1);
    assert_non_null(strstr(err, "cpu, guard or cuda"));
#ifndef MT_HAVE_CUDA
    assert_int_equal(ops_select("cuda", 0, err, sizeof(err)), -1);
    assert_non_null(strstr(err, "device = cuda"));
#endif
    /* memory exists on guard now: switching to cpu would strand it */
    float *p = ops_alloc(16, "pin");
    assert_int_equal(ops_select("cpu", 0, err, sizeof(err)), -1);
    assert_non_null(strstr(err, "after memory was allocated"));
    assert_int_equal(ops_select("guard", 0, err, sizeof(err)), 0); /* same device: fine */
    ops_free(p);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_guard_ops_equal_cpu),
        cmocka_unit_test(test_guard_memory_api),
        cmocka_unit_test(test_guard_stray_access_faults),
        cmocka_unit_test(test_guard_host_pointer_refused),
        cmocka_unit_test(test_guard_overrun_faults),
        cmocka_unit_test(test_select_refusals),
    };
    return cmocka_run_group_tests(tests, setup, NULL);
}
