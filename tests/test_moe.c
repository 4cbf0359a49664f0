/*
 * tests/test_moe.c — the mixture-of-experts layer (model/moe.c) in one process.
 *
 * Independent methods:
 *   - a double-precision reference layer written here with plain loops (routing, capacity in
 *     (slot, token) order, experts with the exact tanh GELU, aux and z losses): the fp32 layer's
 *     forward is compared with it, and its backward with central finite differences of the
 *     reference's scalar L = Σ y ⊙ R + aux_grad · (aux + z), taken in double (h = 1e-5, so the
 *     numerical gradient is good to ~1e-9 and the error budget is the fp32 side's);
 *   - golden values from PyTorch (tests/reference/moe_reference.py, GShard-style dense code and
 *     autograd) for three configurations, two of them with drops;
 *   - hand-built routers whose aux loss, z-loss, kept set and outputs follow from the formulas
 *     on paper (balanced → aux = α exactly; skewed → α·E·Σ f_i P_i > α; capacity; priority).
 * The routing of every random case is checked to be far from ties (chosen vs next probability
 * ≥ 1e-3): the loss is piecewise smooth, and a perturbation of 1e-5 cannot change which experts
 * are chosen or kept, so finite differences see the smooth piece the analytic gradient describes.
 *
 * Tolerances: fp32 vs double forward 1e-5 · max(1, max|ref|) (a few dozen fp32 operations per
 * output); gradients 1e-4 · max(1, max|ref|) per tensor (sums of up to ~60 products); PyTorch
 * goldens 1e-4 · max|ref| + 1e-6 as in test_reference.c. A wrong formula is off by O(1).
 */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "ckpt/safetensors.h"
#include "core/rng.h"
#include "model/moe.h"

#define REF_DIR "build/reference"
#define TOL_FWD 1e-5
#define TOL_GRAD 1e-4
#define FD_H 1e-5

/* ---- a small problem: parameters in float (for the layer) and double (for the reference) ----- */

typedef struct {
    int N, C, H, E, k;
    float cf, alpha, beta, aux_grad;
    float *x, *R, *wr, *w1, *b1, *w2, *b2;           /* sizes below; float copies */
    double *dx_, *dR, *dwr, *dw1, *db1, *dw2, *db2;  /* double copies */
} problem;

enum { P_X, P_WR, P_W1, P_B1, P_W2, P_B2, P_COUNT };
static const char *P_NAMES[P_COUNT] = {"x", "router_w", "fc_w", "fc_b", "proj_w", "proj_b"};

static size_t psize(const problem *p, int which) {
    switch (which) {
    case P_X: return (size_t)p->N * p->C;
    case P_WR: return (size_t)p->E * p->C;
    case P_W1: return (size_t)p->E * p->H * p->C;
    case P_B1: return (size_t)p->E * p->H;
    case P_W2: return (size_t)p->E * p->C * p->H;
    default: return (size_t)p->E * p->C;
    }
}
static float **pf(problem *p, int which) {
    float **a[P_COUNT] = {&p->x, &p->wr, &p->w1, &p->b1, &p->w2, &p->b2};
    return a[which];
}
static double **pd(problem *p, int which) {
    double **a[P_COUNT] = {&p->dx_, &p->dwr, &p->dw1, &p->db1, &p->dw2, &p->db2};
    return a[which];
}

static void problem_alloc(problem *p) {
    for (int i = 0; i < P_COUNT; i++) {
        *pf(p, i) = calloc(psize(p, i), sizeof(float));
        *pd(p, i) = calloc(psize(p, i), sizeof(double));
    }
    p->R = calloc((size_t)p->N * p->C, sizeof(float));
    p->dR = calloc((size_t)p->N * p->C, sizeof(double));
}
static void problem_free(problem *p) {
    for (int i = 0; i < P_COUNT; i++) free(*pf(p, i)), free(*pd(p, i));
    free(p->R);
    free(p->dR);
}
/* float → double copies (after the float values are set) */
static void problem_sync(problem *p) {
    for (int i = 0; i < P_COUNT; i++)
        for (size_t j = 0; j < psize(p, i); j++) (*pd(p, i))[j] = (*pf(p, i))[j];
    for (size_t j = 0; j < (size_t)p->N * p->C; j++) p->dR[j] = p->R[j];
}
static void problem_random(problem *p, uint64_t seed) {
    rng_state r;
    rng_seed(&r, seed);
    const float scale[P_COUNT] = {1.0f, 0.5f, 0.3f, 0.1f, 0.3f, 0.1f};
    for (int i = 0; i < P_COUNT; i++)
        for (size_t j = 0; j < psize(p, i); j++) (*pf(p, i))[j] = scale[i] * rng_normal(&r);
    for (size_t j = 0; j < (size_t)p->N * p->C; j++) p->R[j] = rng_normal(&r);
    problem_sync(p);
}

/* ---- the double-precision reference layer ---------------------------------------------------- */

typedef struct {
    double aux, z;
    int dropped, capacity;
    double min_gap; /* smallest probability gap between a chosen expert and the next one */
} ref_out;

static double gelu_tanh(double v) {
    return 0.5 * v * (1.0 + tanh(sqrt(2.0 / M_PI) * (v + 0.044715 * v * v * v)));
}

/* Expert e on one token, in double: out (C). */
static void ref_expert(const problem *p, int e, const double *xt, double *out) {
    const int C = p->C, H = p->H;
    for (int c = 0; c < C; c++) out[c] = p->db2[(size_t)e * C + c];
    for (int h = 0; h < H; h++) {
        double a = p->db1[(size_t)e * H + h];
        for (int c = 0; c < C; c++) a += xt[c] * p->dw1[((size_t)e * H + h) * C + c];
        double g = gelu_tanh(a);
        for (int c = 0; c < C; c++) out[c] += g * p->dw2[((size_t)e * C + c) * H + h];
    }
}

/* y (N, C) (may be NULL) and the scalar L = Σ y ⊙ R + aux_grad · (aux + z). */
static double ref_forward(const problem *p, double *y, ref_out *o) {
    const int N = p->N, C = p->C, E = p->E, k = p->k;
    double *probs = calloc((size_t)N * E, sizeof(double)), *lse = calloc((size_t)N, sizeof(double));
    int *ex = calloc((size_t)N * k, sizeof(int)), *keep = calloc((size_t)N * k, sizeof(int));
    double *gate = calloc((size_t)N * k, sizeof(double)), *out = calloc((size_t)C, sizeof(double));
    o->min_gap = 1.0;
    for (int t = 0; t < N; t++) {
        double *pr = probs + (size_t)t * E, mx = -INFINITY, s = 0;
        for (int e = 0; e < E; e++) {
            double l = 0;
            for (int c = 0; c < C; c++) l += p->dx_[(size_t)t * C + c] * p->dwr[(size_t)e * C + c];
            pr[e] = l;
            mx = fmax(mx, l);
        }
        for (int e = 0; e < E; e++) s += exp(pr[e] - mx);
        lse[t] = mx + log(s);
        for (int e = 0; e < E; e++) pr[e] = exp(pr[e] - lse[t]);
        /* selection sort of expert ids by probability, ties to the lower id */
        int order[64];
        for (int e = 0; e < E; e++) order[e] = e;
        for (int a = 0; a < E; a++)
            for (int b = a + 1; b < E; b++)
                if (pr[order[b]] > pr[order[a]] ||
                    (pr[order[b]] == pr[order[a]] && order[b] < order[a])) {
                    int tmp = order[a];
                    order[a] = order[b], order[b] = tmp;
                }
        double sum = 0;
        for (int s2 = 0; s2 < k; s2++) {
            ex[t * k + s2] = order[s2];
            sum += pr[order[s2]];
            if (s2 + 1 < E) o->min_gap = fmin(o->min_gap, pr[order[s2]] - pr[order[s2 + 1]]);
        }
        for (int s2 = 0; s2 < k; s2++)
            gate[t * k + s2] = k == 2 ? pr[ex[t * k + s2]] / sum : pr[ex[t * k + s2]];
    }
    /* capacity: per expert, first choices of all tokens, then second choices */
    double xc = (double)p->cf * N * k / E;
    int cap = p->cf > 0 ? (int)ceil(xc - 1e-6 * xc) : 0;
    if (p->cf > 0 && cap < 1) cap = 1;
    o->capacity = cap;
    o->dropped = 0;
    double f[64] = {0}, P[64] = {0};
    for (int e = 0; e < E; e++) {
        int used = 0;
        for (int s2 = 0; s2 < k; s2++)
            for (int t = 0; t < N; t++)
                if (ex[t * k + s2] == e) {
                    f[e] += 1.0 / ((double)N * k);
                    if (cap == 0 || used < cap) keep[t * k + s2] = 1, used++;
                    else o->dropped++;
                }
        for (int t = 0; t < N; t++) P[e] += probs[(size_t)t * E + e] / N;
    }
    double L = 0;
    for (int t = 0; t < N; t++) {
        double yt[64] = {0};
        for (int s2 = 0; s2 < k; s2++) {
            if (!keep[t * k + s2]) continue;
            ref_expert(p, ex[t * k + s2], p->dx_ + (size_t)t * C, out);
            for (int c = 0; c < C; c++) yt[c] += gate[t * k + s2] * out[c];
        }
        for (int c = 0; c < C; c++) {
            if (y) y[(size_t)t * C + c] = yt[c];
            L += yt[c] * p->dR[(size_t)t * C + c];
        }
    }
    o->aux = 0;
    for (int e = 0; e < E; e++) o->aux += p->alpha * E * f[e] * P[e];
    o->z = 0;
    for (int t = 0; t < N; t++) o->z += p->beta * lse[t] * lse[t] / N;
    L += p->aux_grad * (o->aux + o->z);
    free(probs), free(lse), free(ex), free(keep), free(gate), free(out);
    return L;
}

/* ---- running the fp32 layer ------------------------------------------------------------------ */

static moe_config cfg_of(const problem *p) {
    moe_config c = {.C = p->C, .H = p->H, .E = p->E, .top_k = p->k, .capacity_factor = p->cf,
                    .aux_coef = p->alpha, .z_coef = p->beta, .ep = NULL};
    return c;
}
static moe_params params_of(problem *p) {
    moe_params m = {p->wr, p->w1, p->b1, p->w2, p->b2};
    return m;
}

static double max_abs_d(const double *a, size_t n) {
    double m = 0;
    for (size_t i = 0; i < n; i++) m = fmax(m, fabs(a[i]));
    return m;
}

/* got (float) vs want (double): |Δ| ≤ tol · max(1, max|want|) */
static void assert_close_fd(const char *what, const float *got, const double *want, size_t n,
                            double tol) {
    double bound = tol * fmax(1.0, max_abs_d(want, n)), worst = 0;
    size_t at = 0;
    for (size_t i = 0; i < n; i++) {
        double d = fabs(got[i] - want[i]);
        if (!(d <= worst)) worst = d, at = i;
    }
    if (!(worst <= bound))
        fail_msg("%s: |diff| %.3g at %zu (got %.8g, want %.8g) exceeds %.3g", what, worst, at,
                 got[at], want[at], bound);
}

/* Forward vs the reference, then backward vs finite differences of the reference. */
static void check_layer_vs_reference(problem *p) {
    ref_out ro;
    double *yref = calloc((size_t)p->N * p->C, sizeof(double));
    ref_forward(p, yref, &ro);
    assert_true(ro.min_gap >= 1e-3); /* routing far from ties: see the header */

    char err[256];
    moe_config cfg = cfg_of(p);
    moe_layer *l = moe_create(&cfg, p->N, err, sizeof(err));
    assert_non_null(l);
    moe_params prm = params_of(p);
    float *y = calloc((size_t)p->N * p->C, sizeof(float));
    moe_stats st;
    moe_forward(l, &prm, p->x, y, p->N, &st);
    assert_close_fd("y", y, yref, (size_t)p->N * p->C, TOL_FWD);
    assert_true(fabs(st.aux_loss - ro.aux) <= 1e-6 * fmax(1e-3, ro.aux));
    assert_true(fabs(st.z_loss - ro.z) <= 1e-5 * fmax(1e-3, ro.z));
    assert_int_equal(st.dropped, ro.dropped);
    assert_int_equal(st.capacity, ro.capacity);

    /* gradients, accumulated on top of random garbage to prove += */
    float *g[P_COUNT], *g0[P_COUNT];
    rng_state r;
    rng_seed(&r, 99);
    for (int i = 0; i < P_COUNT; i++) {
        g[i] = malloc(psize(p, i) * sizeof(float));
        g0[i] = malloc(psize(p, i) * sizeof(float));
        for (size_t j = 0; j < psize(p, i); j++) g[i][j] = g0[i][j] = rng_normal(&r);
    }
    moe_params grads = {g[P_WR], g[P_W1], g[P_B1], g[P_W2], g[P_B2]};
    moe_backward(l, &prm, &grads, p->R, g[P_X], p->aux_grad);
    for (int i = 0; i < P_COUNT; i++) {
        size_t n = psize(p, i);
        double *fd = malloc(n * sizeof(double));
        double *v = *pd(p, i);
        for (size_t j = 0; j < n; j++) {
            double keep = v[j];
            ref_out o;
            v[j] = keep + FD_H;
            double lp = ref_forward(p, NULL, &o);
            v[j] = keep - FD_H;
            double lm = ref_forward(p, NULL, &o);
            v[j] = keep;
            fd[j] = (lp - lm) / (2 * FD_H);
            g[i][j] -= g0[i][j];
        }
        char what[64];
        snprintf(what, sizeof(what), "d%s (k=%d, cf=%g)", P_NAMES[i], p->k, (double)p->cf);
        assert_close_fd(what, g[i], fd, n, TOL_GRAD);
        free(fd);
        free(g[i]), free(g0[i]);
    }
    moe_free(l);
    free(y), free(yref);
}

/* Random problem N=7, C=6, E=4, H=8 whose routing is far from ties (first seed that is). */
static void fd_case(int k, float cf) {
    problem p = {.N = 7, .C = 6, .H = 8, .E = 4, .k = k, .cf = cf, .alpha = 0.05f, .beta = 0.01f,
                 .aux_grad = 0.8f};
    problem_alloc(&p);
    for (uint64_t seed = 1;; seed++) {
        assert_true(seed < 200);
        problem_random(&p, seed);
        ref_out o;
        ref_forward(&p, NULL, &o);
        if (o.min_gap >= 1e-3 && (cf == 0 || o.dropped > 0)) break;
    }
    check_layer_vs_reference(&p);
    problem_free(&p);
}

static void test_fd_k1_dropless(void **s) { (void)s; fd_case(1, 0.0f); }
static void test_fd_k2_dropless(void **s) { (void)s; fd_case(2, 0.0f); }
static void test_fd_k1_capacity(void **s) { (void)s; fd_case(1, 1.0f); }
/* k = 2 with drops: a kept slot's renormalised gate still depends on the dropped slot's prob */
static void test_fd_k2_capacity(void **s) { (void)s; fd_case(2, 0.5f); }

/* ---- PyTorch goldens ------------------------------------------------------------------------- */

static int generate(void **state) {
    (void)state;
    int rc = system("/usr/bin/python3 tests/reference/moe_reference.py " REF_DIR " >/dev/null");
    if (rc != 0) {
        fprintf(stderr, "MoE reference generator failed (needs python3-torch: make deps)\n");
        return -1;
    }
    return 0;
}

static float *read_t(const st_file *f, const char *name, size_t want) {
    const st_info *info = st_find(f, name);
    if (!info) fail_msg("reference file lacks tensor %s", name);
    assert_int_equal(info->numel, want);
    float *buf = malloc(info->nbytes);
    char err[256];
    if (st_read_tensor(f, name, buf, info->nbytes, err, sizeof(err)) != 0) fail_msg("%s", err);
    return buf;
}
static double meta_d(const st_file *f, const char *key) {
    const char *v = st_metadata(f, key);
    assert_non_null(v);
    return atof(v);
}

/* max |a − b| ≤ 1e-4 · max|b| + 1e-6 (as tests/test_reference.c) */
static void assert_close_ref(const char *what, const float *a, const float *b, size_t n) {
    double maxref = 0, worst = 0;
    size_t at = 0;
    for (size_t i = 0; i < n; i++) {
        maxref = fmax(maxref, fabs(b[i]));
        double d = fabs((double)a[i] - b[i]);
        if (!(d <= worst)) worst = d, at = i;
    }
    if (!(worst <= 1e-4 * maxref + 1e-6))
        fail_msg("%s: max |diff| %.3g at %zu (got %.7g, want %.7g)", what, worst, at, a[at], b[at]);
}

static void golden(const char *name) {
    char path[256], err[512];
    snprintf(path, sizeof(path), REF_DIR "/moe_%s.safetensors", name);
    st_file f;
    if (st_open(&f, path, err, sizeof(err)) != 0) fail_msg("%s", err);
    problem p = {.N = (int)meta_d(&f, "N"), .C = (int)meta_d(&f, "C"), .H = (int)meta_d(&f, "H"),
                 .E = (int)meta_d(&f, "E"), .k = (int)meta_d(&f, "top_k"),
                 .cf = (float)meta_d(&f, "capacity_factor"), .alpha = (float)meta_d(&f, "aux_coef"),
                 .beta = (float)meta_d(&f, "z_coef"), .aux_grad = (float)meta_d(&f, "aux_grad")};
    float *in[P_COUNT], *gref[P_COUNT], *g[P_COUNT];
    for (int i = 0; i < P_COUNT; i++) {
        char gname[64];
        in[i] = read_t(&f, P_NAMES[i], psize(&p, i));
        snprintf(gname, sizeof(gname), "grad.%s", P_NAMES[i]);
        gref[i] = read_t(&f, gname, psize(&p, i));
        g[i] = calloc(psize(&p, i), sizeof(float));
    }
    size_t NC = (size_t)p.N * p.C;
    float *R = read_t(&f, "r", NC), *yref = read_t(&f, "ref.y", NC);
    float *aux = read_t(&f, "ref.aux", 1), *z = read_t(&f, "ref.z", 1);
    int dropped;
    assert_int_equal(st_read_tensor(&f, "ref.dropped", &dropped, sizeof(int), err, sizeof(err)), 0);

    moe_config cfg = cfg_of(&p);
    moe_layer *l = moe_create(&cfg, p.N, err, sizeof(err));
    assert_non_null(l);
    moe_params prm = {in[P_WR], in[P_W1], in[P_B1], in[P_W2], in[P_B2]};
    moe_params grads = {g[P_WR], g[P_W1], g[P_B1], g[P_W2], g[P_B2]};
    float *y = calloc(NC, sizeof(float));
    moe_stats st;
    moe_forward(l, &prm, in[P_X], y, p.N, &st);
    assert_close_ref("y", y, yref, NC);
    if (fabs(st.aux_loss - aux[0]) > 1e-5 * fabs(aux[0]) ||
        fabs(st.z_loss - z[0]) > 1e-5 * fabs(z[0]))
        fail_msg("%s: aux %.8g z %.8g vs PyTorch %.8g %.8g", name, st.aux_loss, st.z_loss, aux[0],
                 z[0]);
    assert_int_equal(st.dropped, dropped);
    assert_int_equal(st.capacity, (int)meta_d(&f, "capacity"));
    moe_backward(l, &prm, &grads, R, g[P_X], p.aux_grad);
    for (int i = 0; i < P_COUNT; i++) {
        char what[96];
        snprintf(what, sizeof(what), "%s: grad.%s", name, P_NAMES[i]);
        assert_close_ref(what, g[i], gref[i], psize(&p, i));
        free(in[i]), free(gref[i]), free(g[i]);
    }
    moe_free(l);
    free(R), free(yref), free(aux), free(z), free(y);
    st_close(&f);
}

static void test_golden_k2_dropless(void **s) { (void)s; golden("k2_dropless"); }
static void test_golden_k1_cap(void **s) { (void)s; golden("k1_cap"); }
static void test_golden_k2_cap(void **s) { (void)s; golden("k2_cap"); }

/* ---- hand-built routers ---------------------------------------------------------------------- */

static const double V4[4] = {2.0, 0.5, -1.0, 0.3}; /* one token's router logits, rotated below */

/* N = 8 tokens, C = E = 4: x[t] = one-hot(t mod 4). rotate = 1: W_r[e][c] = V4[(e − c) mod 4], so
 * token t's logits are V4 rotated by t (expert t mod 4 first, t+1 second: balanced);
 * rotate = 0: W_r[e][c] = V4[e], every token's logits are V4 (expert 0 first, 1 second). */
static void hand_router(problem *p, int k, int rotate) {
    *p = (problem){.N = 8, .C = 4, .H = 8, .E = 4, .k = k, .cf = 0.0f, .alpha = 0.03f,
                   .beta = 0.002f, .aux_grad = 1.0f};
    problem_alloc(p);
    problem_random(p, 5); /* experts and R; x and W_r overwritten next */
    for (int t = 0; t < p->N; t++)
        for (int c = 0; c < p->C; c++) p->x[t * p->C + c] = c == t % 4 ? 1.0f : 0.0f;
    for (int e = 0; e < 4; e++)
        for (int c = 0; c < 4; c++) p->wr[e * 4 + c] = (float)V4[rotate ? (e - c + 4) % 4 : e];
    problem_sync(p);
}

static moe_stats run_forward(problem *p, float *y) {
    char err[256];
    moe_config cfg = cfg_of(p);
    moe_layer *l = moe_create(&cfg, p->N, err, sizeof(err));
    assert_non_null(l);
    moe_params prm = params_of(p);
    moe_stats st;
    moe_forward(l, &prm, p->x, y, p->N, &st);
    moe_free(l);
    st.tokens_per_expert = NULL; /* freed with the layer */
    return st;
}

static void softmax4(double *pr) {
    double s = 0;
    for (int e = 0; e < 4; e++) s += exp(V4[e]);
    for (int e = 0; e < 4; e++) pr[e] = exp(V4[e]) / s;
}

static void test_aux_balanced_is_alpha(void **s) {
    (void)s;
    for (int k = 1; k <= 2; k++) {
        problem p;
        hand_router(&p, k, 1);
        float y[32];
        moe_stats st = run_forward(&p, y);
        /* f_i = P_i = 1/4 → aux = α · 4 · 4 · (1/16) = α */
        if (fabs(st.aux_loss - p.alpha) > 1e-6 * p.alpha)
            fail_msg("k=%d: balanced aux %.9g, want α = %.9g", k, st.aux_loss, (double)p.alpha);
        assert_int_equal(st.tokens_min, 2 * k);
        assert_int_equal(st.tokens_max, 2 * k);
        assert_true(st.tokens_cv == 0.0);
        /* z = β · lse(V4)² for every token */
        double lse = 0;
        for (int e = 0; e < 4; e++) lse += exp(V4[e]);
        lse = log(lse);
        assert_true(fabs(st.z_loss - p.beta * lse * lse) <= 1e-5 * p.beta * lse * lse);
        problem_free(&p);
    }
}

static void test_aux_skewed_is_larger(void **s) {
    (void)s;
    double pr[4];
    softmax4(pr);
    for (int k = 1; k <= 2; k++) {
        problem p;
        hand_router(&p, k, 0);
        float y[32];
        moe_stats st = run_forward(&p, y);
        /* every token: first choice 0 (f_0 = 1/k), second choice 1 (f_1 = 1/2 when k = 2);
         * P = softmax(V4) */
        double want = k == 1 ? p.alpha * 4 * pr[0] : p.alpha * 4 * (0.5 * pr[0] + 0.5 * pr[1]);
        if (fabs(st.aux_loss - want) > 1e-5 * want)
            fail_msg("k=%d: skewed aux %.9g, want %.9g", k, st.aux_loss, want);
        assert_true(st.aux_loss > 1.5 * p.alpha);
        assert_int_equal(st.tokens_max, 8);
        assert_int_equal(st.tokens_min, 0);
        problem_free(&p);
    }
}

/* cf = 1, k = 1, everything routed to expert 0: capacity = ceil(8·1/4) = 2 → tokens 0 and 1 are
 * processed (y = p_0 · expert_0(x)), tokens 2..7 are dropped (y exactly 0). */
static void test_capacity_one_expert(void **s) {
    (void)s;
    problem p = {.N = 8, .C = 6, .H = 8, .E = 4, .k = 1, .cf = 1.0f, .alpha = 0.01f, .aux_grad = 1};
    problem_alloc(&p);
    problem_random(&p, 11);
    const float col0[4] = {3.0f, 0.0f, -1.0f, 0.5f};
    for (int t = 0; t < p.N; t++)
        p.x[t * p.C] = 1.0f, p.x[t * p.C + 1] *= 0.3f, p.x[t * p.C + 2] *= 0.3f;
    for (int e = 0; e < p.E; e++) {
        p.wr[e * p.C] = col0[e];
        for (int c = 1; c < p.C; c++) p.wr[e * p.C + c] *= 0.1f;
    }
    problem_sync(&p);
    float y[48];
    moe_stats st = run_forward(&p, y);
    assert_int_equal(st.capacity, 2);
    assert_int_equal(st.dropped, 6);
    assert_int_equal(st.tokens_max, 8); /* the router did send everything to one expert */
    for (int t = 0; t < p.N; t++) {
        double want[6] = {0};
        if (t < 2) {
            double logit[4], mx = -INFINITY, sum = 0;
            for (int e = 0; e < 4; e++) {
                logit[e] = 0;
                for (int c = 0; c < p.C; c++) logit[e] += p.dx_[t * p.C + c] * p.dwr[e * p.C + c];
                mx = fmax(mx, logit[e]);
            }
            for (int e = 0; e < 4; e++) sum += exp(logit[e] - mx);
            assert_true(logit[0] == mx);
            ref_expert(&p, 0, p.dx_ + t * p.C, want);
            for (int c = 0; c < p.C; c++) want[c] *= exp(logit[0] - mx) / sum;
        }
        for (int c = 0; c < p.C; c++) {
            if (t >= 2) assert_true(y[t * p.C + c] == 0.0f);
            else assert_true(fabs(y[t * p.C + c] - want[c]) <= TOL_FWD * fmax(1, fabs(want[c])));
        }
        if (t < 2) {
            double n2 = 0;
            for (int c = 0; c < p.C; c++) n2 += want[c] * want[c];
            assert_true(n2 > 1e-4); /* a processed token's output is not trivially zero */
        }
    }
    problem_free(&p);
}

/* k = 2, cf = 1 → capacity ceil(8·2/4) = 4. Tokens 0–3 choose (0, 1), tokens 4–7 choose (1, 0).
 * First choices come before ANY second choice: expert 0 keeps tokens 0–3's first choices and
 * drops tokens 4–7's second; expert 1 keeps tokens 4–7's FIRST choices and drops tokens 0–3's
 * second choices although those tokens come earlier (a token-major order would keep them).
 * So y[t] = g_first · expert_first(x_t) for every t and 8 assignments are dropped. With cf = 0
 * both slots are kept. */
static void slot_case(float cf) {
    problem p = {.N = 8, .C = 6, .H = 8, .E = 4, .k = 2, .cf = cf, .alpha = 0.01f, .aux_grad = 1};
    problem_alloc(&p);
    problem_random(&p, 12);
    for (int t = 0; t < p.N; t++) {
        p.x[t * p.C] = t < 4 ? 1.0f : 0.0f;
        p.x[t * p.C + 1] = t < 4 ? 0.0f : 1.0f;
        for (int c = 2; c < p.C; c++) p.x[t * p.C + c] *= 0.3f;
    }
    const float c0[4] = {3.0f, 1.5f, -1.0f, -1.0f}, c1[4] = {1.5f, 3.0f, -1.0f, -1.0f};
    for (int e = 0; e < p.E; e++) {
        p.wr[e * p.C] = c0[e], p.wr[e * p.C + 1] = c1[e];
        for (int c = 2; c < p.C; c++) p.wr[e * p.C + c] *= 0.1f;
    }
    problem_sync(&p);
    float y[48];
    moe_stats st = run_forward(&p, y);
    assert_int_equal(st.dropped, cf > 0 ? 8 : 0);
    assert_int_equal(st.capacity, cf > 0 ? 4 : 0);
    for (int t = 0; t < p.N; t++) {
        double logit[4], mx = -INFINITY, o1[6], o2[6];
        for (int e = 0; e < 4; e++) {
            logit[e] = 0;
            for (int c = 0; c < p.C; c++) logit[e] += p.dx_[t * p.C + c] * p.dwr[e * p.C + c];
            mx = fmax(mx, logit[e]);
        }
        int first = t < 4 ? 0 : 1, second = 1 - first;
        assert_true(logit[first] == mx);
        assert_true(logit[second] > logit[2] && logit[second] > logit[3]);
        double p1 = exp(logit[first] - mx), p2 = exp(logit[second] - mx);
        ref_expert(&p, first, p.dx_ + t * p.C, o1);
        ref_expert(&p, second, p.dx_ + t * p.C, o2);
        for (int c = 0; c < p.C; c++) {
            double want = p1 / (p1 + p2) * o1[c] + (cf > 0 ? 0.0 : p2 / (p1 + p2) * o2[c]);
            if (!(fabs(y[t * p.C + c] - want) <= TOL_FWD * fmax(1, fabs(want))))
                fail_msg("cf=%g token %d col %d: y %.8g, want %.8g", (double)cf, t, c,
                         y[t * p.C + c], want);
        }
    }
    problem_free(&p);
}
static void test_capacity_slot_priority(void **s) { (void)s; slot_case(1.0f); }
static void test_dropless_keeps_all(void **s) { (void)s; slot_case(0.0f); }

/* Exact ties go to the lower expert id: logits (0.5, 2, 2, 0.5) → first choice 1, second 2;
 * logits (2, 0.5, 0.5, -1) → second choice 1. Equal logits give bit-identical probabilities. */
static void test_ties_to_lower_id(void **s) {
    (void)s;
    const float rows[2][4] = {{0.5f, 2.0f, 2.0f, 0.5f}, {2.0f, 0.5f, 0.5f, -1.0f}};
    const int want[2][2][4] = {{{0, 8, 0, 0}, {0, 8, 8, 0}}, {{8, 0, 0, 0}, {8, 8, 0, 0}}};
    for (int r = 0; r < 2; r++) {
        for (int k = 1; k <= 2; k++) {
            problem p;
            hand_router(&p, k, 0);
            for (int e = 0; e < 4; e++)
                for (int c = 0; c < 4; c++) p.wr[e * 4 + c] = rows[r][e];
            problem_sync(&p);
            char err[256];
            moe_config cfg = cfg_of(&p);
            moe_layer *l = moe_create(&cfg, p.N, err, sizeof(err));
            moe_params prm = params_of(&p);
            moe_stats st;
            float y[32];
            moe_forward(l, &prm, p.x, y, p.N, &st);
            for (int e = 0; e < 4; e++)
                assert_int_equal(st.tokens_per_expert[e], want[r][k - 1][e]);
            moe_free(l);
            problem_free(&p);
        }
    }
}

/* ---- edges ----------------------------------------------------------------------------------- */

static void test_empty_batch(void **s) {
    (void)s;
    problem p = {.N = 3, .C = 4, .H = 8, .E = 4, .k = 2, .cf = 1.0f, .alpha = 0.01f, .beta = 0.01f};
    problem_alloc(&p);
    problem_random(&p, 3);
    char err[256];
    moe_config cfg = cfg_of(&p);
    moe_layer *l = moe_create(&cfg, p.N, err, sizeof(err));
    moe_params prm = params_of(&p), grads = params_of(&p);
    moe_stats st;
    float y[1], dx[1];
    moe_forward(l, &prm, p.x, y, 0, &st);
    assert_int_equal(st.n_group, 0);
    assert_true(st.aux_loss == 0.0 && st.z_loss == 0.0);
    float before = p.wr[0];
    moe_backward(l, &prm, &grads, y, dx, 1.0f); /* grads alias params: nothing may change */
    assert_true(p.wr[0] == before);
    moe_free(l);
    problem_free(&p);
}

static void test_bad_configs(void **s) {
    (void)s;
    char err[256];
    moe_config good = {.C = 8, .H = 32, .E = 4, .top_k = 2, .capacity_factor = 1.25f,
                       .aux_coef = 0.01f};
    moe_layer *l = moe_create(&good, 16, err, sizeof(err));
    assert_non_null(l);
    moe_free(l);
    struct { moe_config c; const char *word; } bad[] = {
        {{.C = 8, .H = 32, .E = 4, .top_k = 3}, "top_k"},
        {{.C = 8, .H = 32, .E = 1, .top_k = 2}, "top_k"},
        {{.C = 8, .H = 32, .E = 0, .top_k = 1}, "n_experts"},
        {{.C = 8, .H = 32, .E = 4, .top_k = 1, .capacity_factor = -1}, "capacity_factor"},
        {{.C = 8, .H = 32, .E = 4, .top_k = 1, .aux_coef = NAN}, "aux_loss_coef"},
    };
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        err[0] = 0;
        assert_null(moe_create(&bad[i].c, 16, err, sizeof(err)));
        if (!strstr(err, bad[i].word))
            fail_msg("case %zu: '%s' does not name %s", i, err, bad[i].word);
    }
}

static void test_active_params(void **s) {
    (void)s;
    /* GPT-2 small width, 8 experts, top-2: router 8·768 + 2 experts · 2 · 3072 · 768 */
    moe_config c = {.C = 768, .H = 3072, .E = 8, .top_k = 2};
    assert_true(moe_active_matmul_params(&c) == 6144.0 + 9437184.0);
    assert_int_equal(moe_param_count(&c, 4), 6144 + 4 * (2 * 3072 * 768 + 3072 + 768));
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_fd_k1_dropless),
        cmocka_unit_test(test_fd_k2_dropless),
        cmocka_unit_test(test_fd_k1_capacity),
        cmocka_unit_test(test_fd_k2_capacity),
        cmocka_unit_test(test_golden_k2_dropless),
        cmocka_unit_test(test_golden_k1_cap),
        cmocka_unit_test(test_golden_k2_cap),
        cmocka_unit_test(test_aux_balanced_is_alpha),
        cmocka_unit_test(test_aux_skewed_is_larger),
        cmocka_unit_test(test_capacity_one_expert),
        cmocka_unit_test(test_capacity_slot_priority),
        cmocka_unit_test(test_dropless_keeps_all),
        cmocka_unit_test(test_ties_to_lower_id),
        cmocka_unit_test(test_empty_batch),
        cmocka_unit_test(test_bad_configs),
        cmocka_unit_test(test_active_params),
    };
    return cmocka_run_group_tests(tests, generate, NULL);
}
