/*
 * tests/test_robust.c — the input-embedding gradient and the attacks of safety/robust.h.
 *
 * Independent references: central finite differences of the loss for the gradient w.r.t. a δ
 * added to the token embeddings; the training backward's own embedding gradient; brute-force
 * loops for the ascent step's formula, the ball, and HotFlip's first-order choice; forward
 * passes of every candidate for HotFlip's beam. Tiny models (d_model 16, T 8, V 13) keep it fast.
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

#include <cjson/cJSON.h>

#include "core/config.h"
#include "core/rng.h"
#include "core/rundb.h"
#include "safety/robust.h"
#include "text/data.h"
#include "model/model.h"

enum { B = 2, T = 8, V = 13, C = 16, N = B * T };

static void build(gpt_model *m, int moe) {
    gpt_config c = {.n_layer = 2, .n_head = 2, .d_model = C, .seq_len = T, .vocab_size = V};
    if (moe) {
        c.moe_every = 1, c.n_experts = 4, c.top_k = 2, c.capacity_factor = 0, c.aux_coef = 0.01f;
    }
    char err[256];
    assert_int_equal(gpt_build(m, &c, err, sizeof(err)), 0);
    gpt_init_weights(m, 7);
    /* weights ~N(0, 0.06): a visibly non-linear model (LayerNorm gains 3, biases 0) */
    for (size_t i = 0; i < m->num_params; i++) m->params[i] *= 3.0f;
    gpt_alloc_training(m, B, T);
}

static void tokens(int *inp, int *tgt, uint64_t seed) {
    rng_state r;
    rng_seed(&r, seed);
    for (int i = 0; i < N; i++) inp[i] = (int)(rng_u64(&r) % V), tgt[i] = (int)(rng_u64(&r) % V);
}

/* Σ of the per-token losses with delta added, in double. */
static double loss_sum(gpt_model *m, const int *inp, const int *tgt, const float *delta) {
    float l[N];
    gpt_probe p = {delta, NULL, l};
    gpt_stage_forward_ex(m, 0, inp, tgt, B, T, 0.0f, &p, NULL);
    double s = 0;
    for (int i = 0; i < N; i++) s += l[i];
    return s;
}

/* ∂(Σ loss)/∂δ at delta by the input-only backward (dloss = 1: the gradient of the sum). */
static void input_grad(gpt_model *m, const int *inp, const int *tgt, const float *delta, float *g) {
    gpt_probe p = {delta, NULL, NULL};
    gpt_stage_forward_ex(m, 0, inp, tgt, B, T, 1.0f, &p, NULL);
    memcpy(g, gpt_stage_backward_input(m, 0, NULL), sizeof(float) * N * C);
}

static void test_input_grad_finite_differences(void **state) {
    (void)state;
    gpt_model m;
    build(&m, 0);
    int inp[N], tgt[N];
    tokens(inp, tgt, 1);
    static float d0[N * C], g[N * C], dp[N * C], dm[N * C], u[N * C];
    rng_state r;
    rng_seed(&r, 3);
    for (int i = 0; i < N * C; i++) d0[i] = 0.05f * rng_normal(&r);
    input_grad(&m, inp, tgt, d0, g);
    double gn = 0;
    for (int i = 0; i < N * C; i++) gn += (double)g[i] * g[i];
    gn = sqrt(gn);
    assert_true(gn > 1e-3);
    /* directional derivatives along random unit directions: (L(δ+hu) − L(δ−hu)) / 2h vs g·u */
    const double h = 1e-2;
    double worst_dir = 0;
    for (int k = 0; k < 4; k++) {
        double un = 0, gu = 0;
        for (int i = 0; i < N * C; i++) u[i] = rng_normal(&r), un += (double)u[i] * u[i];
        un = sqrt(un);
        for (int i = 0; i < N * C; i++) {
            u[i] = (float)(u[i] / un);
            dp[i] = d0[i] + (float)h * u[i], dm[i] = d0[i] - (float)h * u[i];
            gu += (double)g[i] * u[i];
        }
        double fd = (loss_sum(&m, inp, tgt, dp) - loss_sum(&m, inp, tgt, dm)) / (2 * h);
        double e = fabs(fd - gu) / gn;
        if (e > worst_dir) worst_dir = e;
    }
    /* single coordinates: the 6 largest |g_i| */
    double worst_coord = 0;
    for (int k = 0; k < 6; k++) {
        int at = 0;
        for (int i = 0; i < N * C; i++)
            if (fabsf(g[i]) > fabsf(g[at])) at = i;
        memcpy(dp, d0, sizeof(dp));
        memcpy(dm, d0, sizeof(dm));
        dp[at] += (float)h, dm[at] -= (float)h;
        double fd = (loss_sum(&m, inp, tgt, dp) - loss_sum(&m, inp, tgt, dm)) / (2 * h);
        double e = fabs(fd - g[at]) / fabs(g[at]);
        if (e > worst_coord) worst_coord = e;
        g[at] = 0; /* next largest */
    }
    printf("input-embedding gradient vs central differences (h = %g): directional error %.2e "
           "of |g| = %.3f, worst coordinate relative error %.2e\n", h, worst_dir, gn, worst_coord);
    assert_true(worst_dir < 2e-3);
    assert_true(worst_coord < 1e-2);
    gpt_free(&m);
}

/* The input-only backward touches no parameter gradient and equals the gradient the training
 * backward leaves at the embedding output (dense and mixture-of-experts blocks). */
static void check_input_backward(int moe) {
    gpt_model m;
    build(&m, moe);
    int inp[N], tgt[N];
    tokens(inp, tgt, 2);
    static float delta[N * C], g1[N * C];
    rng_state r;
    rng_seed(&r, 5);
    for (int i = 0; i < N * C; i++) delta[i] = 0.1f * rng_normal(&r);
    for (size_t i = 0; i < m.num_params; i++) m.grads[i] = 1e-3f * (float)(i % 97);
    float *grads0 = malloc(m.num_params * sizeof(float)), *params0 = malloc(m.num_params * sizeof(float));
    memcpy(grads0, m.grads, m.num_params * sizeof(float));
    memcpy(params0, m.params, m.num_params * sizeof(float));
    m.aux_grad = 0.0f; /* the training backward without auxiliary losses: same objective */
    gpt_probe p = {delta, NULL, NULL};
    gpt_stage_forward_ex(&m, 0, inp, tgt, B, T, 1.0f / N, &p, NULL);
    memcpy(g1, gpt_stage_backward_input(&m, 0, NULL), sizeof(g1));
    assert_memory_equal(m.grads, grads0, m.num_params * sizeof(float));
    assert_memory_equal(m.params, params0, m.num_params * sizeof(float));
    gpt_stage_forward_ex(&m, 0, inp, tgt, B, T, 1.0f / N, &p, NULL);
    gpt_backward(&m);
    const float *g2 = gpt_embed_grad(&m);
    double mx = 0, diff = 0;
    for (int i = 0; i < N * C; i++) mx = fmax(mx, fabs(g2[i])), diff = fmax(diff, fabs(g1[i] - g2[i]));
    assert_true(mx > 0);
    assert_true(diff <= 1e-6 * mx);
    int changed = 0; /* and the training backward did accumulate parameter gradients */
    for (size_t i = 0; i < m.num_params; i++) changed += m.grads[i] != grads0[i];
    assert_true(changed > (int)(m.num_params / 2));
    free(grads0);
    free(params0);
    gpt_free(&m);
}

static void test_input_backward_no_param_grads(void **state) {
    (void)state;
    check_input_backward(0);
    check_input_backward(1);
}

/* The ascent step against its formula, and the ball after every one of many steps. */
static void test_ascent_step_and_ball(void **state) {
    (void)state;
    enum { L = 200 };
    static float d[2 * L], g[2 * L];
    rng_state r;
    rng_seed(&r, 11);
    for (int i = 0; i < 2 * L; i++) g[i] = rng_normal(&r);
    g[3] = 0; /* sign(0) = 0 */
    /* from 0 with a step inside the ball: exactly alpha·g/‖g‖ (L2) and alpha·sign(g) (L∞) */
    const double eps = 0.7, alpha = 0.3;
    memset(d, 0, sizeof(d));
    robust_ascent_step(d, g, 2, L, ROBUST_L2, alpha, eps);
    for (int b = 0; b < 2; b++) {
        double gn = 0;
        for (int i = 0; i < L; i++) gn += (double)g[b * L + i] * g[b * L + i];
        gn = sqrt(gn);
        for (int i = 0; i < L; i++) assert_true(fabs(d[b * L + i] - alpha * g[b * L + i] / gn) < 1e-6);
    }
    memset(d, 0, sizeof(d));
    robust_ascent_step(d, g, 2, L, ROBUST_LINF, alpha, eps);
    for (int i = 0; i < 2 * L; i++)
        assert_true(d[i] == (g[i] > 0 ? (float)alpha : g[i] < 0 ? -(float)alpha : 0.0f));
    /* many steps with fresh random gradients: never outside the ball, on it when pushed */
    for (int norm = 0; norm < 2; norm++) {
        robust_random_start(d, L, norm, eps, 1);
        robust_random_start(d + L, L, norm, eps, 2);
        for (int s = 0; s < 100; s++) {
            for (int i = 0; i < 2 * L; i++) g[i] = rng_normal(&r);
            double w = robust_ascent_step(d, g, 2, L, norm, 2.5 * eps / 5, eps);
            for (int b = 0; b < 2; b++) {
                double size = 0;
                for (int i = 0; i < L; i++) {
                    float v = d[b * L + i];
                    size = norm == ROBUST_L2 ? size + (double)v * v : fmax(size, fabs(v));
                }
                if (norm == ROBUST_L2) size = sqrt(size);
                assert_true(size <= eps * (1 + 1e-6));
                assert_true(size / eps <= w + 1e-12);
            }
            assert_true(w >= 1 - 1e-6); /* steps of 0.5 eps in random directions reach the edge */
        }
    }
    /* random starts lie in the ball, are not degenerate, and depend only on the seed */
    static float d2[L];
    robust_random_start(d, L, ROBUST_L2, eps, 42);
    robust_random_start(d2, L, ROBUST_L2, eps, 42);
    assert_memory_equal(d, d2, sizeof(d2));
    double n2 = 0;
    for (int i = 0; i < L; i++) n2 += (double)d[i] * d[i];
    assert_true(sqrt(n2) <= eps * (1 + 1e-6) && sqrt(n2) > 0.9 * eps); /* u^(1/200) ≈ 1 */
}

/* A validation split of V-token ids from a fixed repeating pattern (a model can be surprised). */
static char g_dir[] = "/tmp/mt_robust_XXXXXX";

static int setup_dir(void **state) {
    (void)state;
    if (!mkdtemp(g_dir)) return -1;
    uint32_t tok[400];
    for (int i = 0; i < 400; i++) tok[i] = (uint32_t)((i * 7 + i / 5) % V);
    char p[256], err[256];
    snprintf(p, sizeof(p), "%s/val_000.bin", g_dir);
    return data_write_shard(p, tok, 400, V, err, sizeof(err));
}

static int teardown_dir(void **state) {
    (void)state;
    char cmd[300];
    snprintf(cmd, sizeof(cmd), "rm -rf %s", g_dir);
    return system(cmd) == 0 ? 0 : -1;
}

static void open_val(data_loader *dl) {
    char err[256];
    assert_int_equal(data_loader_open(dl, g_dir, "val", T, 0, 0, err, sizeof(err)), 0);
}

static void check_evaluate(robust_attack attack, robust_norm norm, int random_start) {
    gpt_model m;
    build(&m, 0);
    data_loader dl;
    open_val(&dl);
    robust_opts o;
    robust_opts_default(&o);
    o.attack = attack, o.norm = norm, o.random_start = random_start;
    const double eps[] = {0, 0.05, 0.2, 0.5};
    o.n_eps = 4;
    memcpy(o.eps_rel, eps, sizeof(eps));
    o.steps = 4, o.batches = 3, o.batch_size = B;
    for (size_t i = 0; i < m.num_params; i++) m.grads[i] = (float)(i % 5);
    float *grads0 = malloc(m.num_params * sizeof(float)), *params0 = malloc(m.num_params * sizeof(float));
    memcpy(grads0, m.grads, m.num_params * sizeof(float));
    memcpy(params0, m.params, m.num_params * sizeof(float));
    robust_result res;
    char err[256];
    assert_int_equal(robust_evaluate(&m, NULL, &dl, &o, &res, err, sizeof(err)), 0);
    assert_int_equal(res.n_rows, 4);
    assert_int_equal(res.n_seqs, 3 * B);
    const robust_row *r0 = &res.rows[0];
    assert_true(r0->n_tokens == 3 * N);
    /* ε = 0: exactly the clean model */
    assert_true(r0->adv_loss == r0->clean_loss);
    assert_true(r0->adv_acc == r0->clean_acc);
    assert_true(r0->success_rate == 0 && r0->max_ball == 0 && r0->eps_abs == 0);
    for (int i = 1; i < 4; i++) {
        const robust_row *w = &res.rows[i];
        assert_true(w->clean_loss == r0->clean_loss);
        assert_true(w->adv_loss >= w->clean_loss);
        assert_true(w->max_ball <= 1 + 1e-6);
        if (attack == ROBUST_PGD) assert_true(w->max_ball > 0.99); /* PGD reaches the edge */
        double want = norm == ROBUST_L2 ? w->eps_rel * res.embed_norm * sqrt((double)T)
                                        : w->eps_rel * res.embed_norm / sqrt((double)C);
        assert_true(fabs(w->eps_abs - want) <= 1e-12 * want);
    }
    assert_true(res.rows[3].adv_loss > res.rows[1].adv_loss); /* a bigger ball hurts more */
    /* parameters and their gradients are untouched by an evaluation */
    assert_memory_equal(m.grads, grads0, m.num_params * sizeof(float));
    assert_memory_equal(m.params, params0, m.num_params * sizeof(float));
    free(grads0);
    free(params0);
    data_loader_close(&dl);
    gpt_free(&m);
}

static void test_evaluate_pgd_l2(void **state) {
    (void)state;
    check_evaluate(ROBUST_PGD, ROBUST_L2, 0);
}
static void test_evaluate_pgd_linf_random_start(void **state) {
    (void)state;
    check_evaluate(ROBUST_PGD, ROBUST_LINF, 1);
}
static void test_evaluate_fgsm(void **state) {
    (void)state;
    check_evaluate(ROBUST_FGSM, ROBUST_L2, 0);
}

/* PGD is an attack, not noise: it raises the loss far more than a random δ of the same norm. */
static void test_pgd_beats_random_direction(void **state) {
    (void)state;
    gpt_model m;
    build(&m, 0);
    int inp[N], tgt[N];
    tokens(inp, tgt, 9);
    robust_opts o;
    robust_opts_default(&o);
    o.steps = 5;
    double ebar = robust_embed_norm(&m, NULL, 0);
    double eps = robust_eps_abs(ROBUST_L2, 0.2, ebar, T, C);
    float adv[N];
    robust_attack_embed(&m, NULL, &o, 0, eps, inp, tgt, B, T, 0, NULL, adv, NULL);
    double clean = loss_sum(&m, inp, tgt, NULL), pgd = 0, rnd = 0;
    for (int i = 0; i < N; i++) pgd += adv[i];
    static float d[N * C];
    for (int k = 0; k < 5; k++) { /* random points on the sphere of radius eps per sequence */
        for (int b = 0; b < B; b++) {
            robust_random_start(d + b * T * C, (size_t)T * C, ROBUST_L2, eps, 100 + k * B + b);
            double n = 0;
            for (int i = 0; i < T * C; i++) n += (double)d[b * T * C + i] * d[b * T * C + i];
            for (int i = 0; i < T * C; i++) d[b * T * C + i] *= (float)(eps / sqrt(n));
        }
        rnd = fmax(rnd, loss_sum(&m, inp, tgt, d));
    }
    printf("eps_rel 0.2 L2: clean %.4f, best of 5 random directions %.4f, PGD %.4f (nats, sum "
           "over %d tokens)\n", clean, rnd, pgd, N);
    assert_true(pgd - clean > 3 * fmax(rnd - clean, 1e-6));
    gpt_free(&m);
}

/* HotFlip greedy = the best first-order swap, computed here by brute force; beam over every
 * position with one flip = the child with the highest true loss, found by forwarding each. */
static void test_hotflip_choices(void **state) {
    (void)state;
    gpt_model m;
    build(&m, 0);
    int inp[N], tgt[N], adv[N];
    tokens(inp, tgt, 13);
    static float g[N * C];
    input_grad(&m, inp, tgt, NULL, g);
    int want_t[B], want_b[B];
    for (int s = 0; s < B; s++) { /* argmax over (t, b != a) of (e_b − e_a)·g_t */
        double best = -INFINITY;
        for (int t = 0; t < T; t++)
            for (int v = 0; v < V; v++) {
                int a = inp[s * T + t];
                if (v == a) continue;
                double sc = 0;
                for (int c = 0; c < C; c++)
                    sc += ((double)m.wte[v * C + c] - m.wte[a * C + c]) * g[(s * T + t) * C + c];
                if (sc > best) best = sc, want_t[s] = t, want_b[s] = v;
            }
    }
    robust_opts o;
    robust_opts_default(&o);
    o.attack = ROBUST_HOTFLIP, o.flips = 1, o.beam = 1;
    float aloss[N];
    robust_attack_hotflip(&m, NULL, &o, inp, tgt, B, T, adv, aloss, NULL);
    for (int s = 0; s < B; s++)
        for (int t = 0; t < T; t++)
            assert_int_equal(adv[s * T + t], t == want_t[s] ? want_b[s] : inp[s * T + t]);
    /* beam over all T positions, one flip: the best child by true loss */
    o.beam = T;
    robust_attack_hotflip(&m, NULL, &o, inp, tgt, B, T, adv, aloss, NULL);
    for (int s = 0; s < B; s++) {
        double best = -INFINITY;
        for (int t = 0; t < T; t++) { /* the child of position t: its first-order best token */
            int cand[N], a = inp[s * T + t], bt = -1;
            double bs = -INFINITY;
            for (int v = 0; v < V; v++) {
                if (v == a) continue;
                double sc = 0;
                for (int c = 0; c < C; c++)
                    sc += ((double)m.wte[v * C + c] - m.wte[a * C + c]) * g[(s * T + t) * C + c];
                if (sc > bs) bs = sc, bt = v;
            }
            memcpy(cand, inp, sizeof(cand));
            cand[s * T + t] = bt;
            float l[N];
            gpt_probe p = {NULL, NULL, l};
            gpt_stage_forward_ex(&m, 0, cand, tgt, B, T, 0.0f, &p, NULL);
            double sum = 0;
            for (int i = 0; i < T; i++) sum += l[s * T + i];
            best = fmax(best, sum);
        }
        double got = 0;
        int diff = 0;
        for (int i = 0; i < T; i++) got += aloss[s * T + i], diff += adv[s * T + i] != inp[s * T + i];
        assert_int_equal(diff, 1);
        assert_true(fabs(got - best) <= 1e-5 * fabs(best));
    }
    /* greedy with 3 flips swaps exactly 3 distinct positions */
    o.beam = 1, o.flips = 3;
    robust_attack_hotflip(&m, NULL, &o, inp, tgt, B, T, adv, NULL, NULL);
    for (int s = 0; s < B; s++) {
        int diff = 0;
        for (int t = 0; t < T; t++) diff += adv[s * T + t] != inp[s * T + t];
        assert_int_equal(diff, 3);
    }
    gpt_free(&m);
}

/* The robustness and adversarial-training keys parse, and bad values are refused by name. */
static void test_config_keys(void **state) {
    (void)state;
    mt_config c;
    config_defaults(&c);
    snprintf(c.data, sizeof(c.data), "x");
    char err[512];
    assert_int_equal(config_validate(&c, err, sizeof(err)), 0);
    assert_string_equal(c.robust_eps, "0,0.01,0.03,0.1");
    assert_string_equal(c.adv_train, "none");
    assert_int_equal(config_set(&c, "robust-eps", "0,0.5", err, sizeof(err)), 0);
    assert_int_equal(config_validate(&c, err, sizeof(err)), 0);
    const char *bad[][3] = {{"robust_eps", "0,x", "robust_eps"},
                            {"robust_eps", "0,-1", "robust_eps"},
                            {"robust_attack", "pgdd", "robust_attack"},
                            {"robust_norm", "l1", "robust_norm"},
                            {"adv_train", "madry", "adv_train"},
                            {"adv_norm", "l3", "adv_norm"}};
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        mt_config d = c;
        assert_int_equal(config_set(&d, bad[i][0], bad[i][1], err, sizeof(err)), 0);
        assert_int_equal(config_validate(&d, err, sizeof(err)), -1);
        assert_non_null(strstr(err, bad[i][2]));
    }
    mt_config d = c;
    assert_int_equal(config_set(&d, "adv_train", "pgd", err, sizeof(err)), 0);
    assert_int_equal(config_set(&d, "pp", "2", err, sizeof(err)), 0);
    assert_int_equal(config_validate(&d, err, sizeof(err)), -1);
    assert_non_null(strstr(err, "pp"));
    assert_int_equal(config_set(&d, "robust_steps", "0", err, sizeof(err)), -1);
}

/* Rows written by robust_log come back as the newest evaluation. */
static void test_evals_table(void **state) {
    (void)state;
    char err[256];
    rundb *db = rundb_open(g_dir, err, sizeof(err));
    assert_non_null(db);
    robust_opts o;
    robust_opts_default(&o);
    robust_result r = {.n_rows = 2, .embed_norm = 1, .seq_len = T, .n_seqs = 2};
    r.rows[0] = (robust_row){0, 0, 5, 2.0, 2.0, 0.5, 0.5, 0, 16, 1.0, 0};
    r.rows[1] = (robust_row){0.1, 0.3, 5, 2.0, 2.5, 0.5, 0.25, 0.5, 16, 1.0, 1};
    robust_log(db, 1, 10, "train", &o, &r);
    usleep(2000);
    r.rows[1].adv_loss = 3.0;
    robust_log(db, 1, 20, "train", &o, &r);
    struct cJSON *j = robust_report_json(rundb_sqlite(db));
    assert_non_null(j);
    char *s = cJSON_PrintUnformatted(j);
    assert_non_null(strstr(s, "\"step\":20"));
    assert_non_null(strstr(s, "\"adv_loss\":3"));
    assert_null(strstr(s, "\"adv_loss\":2.5"));
    cJSON_free(s);
    cJSON_Delete(j);
    assert_true(robust_svg_width(rundb_sqlite(db)) > 0);
    rundb_close(db);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_input_grad_finite_differences),
        cmocka_unit_test(test_input_backward_no_param_grads),
        cmocka_unit_test(test_ascent_step_and_ball),
        cmocka_unit_test(test_evaluate_pgd_l2),
        cmocka_unit_test(test_evaluate_pgd_linf_random_start),
        cmocka_unit_test(test_evaluate_fgsm),
        cmocka_unit_test(test_pgd_beats_random_direction),
        cmocka_unit_test(test_hotflip_choices),
        cmocka_unit_test(test_config_keys),
        cmocka_unit_test(test_evals_table),
    };
    return cmocka_run_group_tests(tests, setup_dir, teardown_dir);
}
