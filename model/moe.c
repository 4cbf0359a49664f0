/*
 * model/moe.c — the mixture-of-experts layer of model/moe.h: router, top-k gates, capacity,
 * experts (GPT-2 MLPs through ops/), combine, the Switch load-balancing loss and the ST-MoE
 * z-loss, forward and backward, with or without expert parallelism.
 *
 * Shape of the computation (same code for ep = 1 and ep > 1; parallel/ep does the moving):
 *   router (N, E) → top-k → per-(expert, slot) counts → ep_plan_build (one all-gather: capacity
 *   and kept set agreed by the whole group) → kept x rows packed in send order (S, C) →
 *   ep_dispatch → expert-order rows (R, C), one contiguous block per local expert, so each
 *   expert is two sgemms over its block → ep_combine → outputs back in send order (S, C) →
 *   y[t] = Σ gate · row.
 * Backward: dgate[t,s] = dy[t]·out_row; gate·dy rows travel the same way as x rows did; the
 * experts' backward accumulates their parameter gradients; input-gradient rows travel back and
 * are added to dx; the router gets the gates' gradient (through the k = 2 renormalisation),
 * the aux loss's (through P only) and the z-loss's, then softmax and the router matmul backward.
 *
 * Saved between forward and backward: probs (N, E), lse (N), expert ids, gates and send rows
 * (N, k), expert inputs xe (R, C), pre-GELU and post-GELU activations (R, H), and the expert
 * outputs in send order (S, C) for the gates' gradient. The post-GELU buffer is reused as the
 * pre-GELU gradient in backward (so one backward per forward).
 *
 * Memory: every per-token and per-row buffer is device memory (ops_alloc) and every loop over
 * them is an op (ops_moe_*, ops/ops.h). What stays on the host is the small integer planning:
 * the chosen expert ids are copied out (N·k ints), counted, turned into send rows by the EP plan
 * and copied back in; the aux/z statistics come back as E + 1 doubles.
 */
#include "model/moe.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

#include "core/check.h"
#include "parallel/ep.h"
#include "ops/ops.h"

struct moe_layer {
    moe_config cfg;
    int max_N, E_local;
    ep_plan plan;
    /* per token, max_N rows */
    float *probs;   // (max_N, E) softmax of the router logits
    float *dlogits; // (max_N, E) backward scratch
    float *lse;     // (max_N) logsumexp of the logits
    int *expert;    // (max_N, k) chosen experts, slot 0 = highest probability
    float *gate;    // (max_N, k)
    float *dgate;   // (max_N, k) backward scratch
    int *send_row;  // (max_N, k) row in the send-order buffers, -1 = dropped
    int *count;     // (E, k) this rank's assignments per (expert, slot), host
    int *expert_h;  // (max_N, k) host copy of expert, for the plan
    int *send_row_h; // (max_N, k) host send rows, copied into send_row
    float *daux;    // (E) device: the aux loss's d/dprobs per expert (backward)
    float *daux_h;  // (E) host
    /* send order: at most max_N·k rows */
    float *xsend; // (S, C) x rows out; gate·dy rows out and input-gradient rows back in backward
    float *ysend; // (S, C) expert outputs for this rank's kept assignments (kept for backward)
    /* expert order: rows this rank's experts receive, grown on demand */
    int rows_cap;
    float *xe;   // (R, C) expert inputs (kept)
    float *pre;  // (R, H) before GELU (kept)
    float *h;    // (R, H) after GELU (kept); pre-GELU gradient in backward
    float *ye;   // (R, C) expert outputs; output gradient, then input gradient in backward
    float *dh;   // (R, H) backward scratch
    float *recv; // (R, C) all-to-all scratch (EP only)
    /* the last forward */
    const float *x;
    int N, fwd_valid;
    int n_scope;         /* tokens the aux and z losses average over: N_group, or N with per_rank */
    double *f;           // (E) f_i = assignments to i / (n_scope · k), for the aux gradient
    double *extra;       // (E + 1) Σ probs per expert and Σ lse² over this rank's tokens
    double *extra_group; // (E + 1) the same summed over the EP group
    moe_stats st;
};

int moe_config_check(const moe_config *c, char *err, size_t errlen) {
    int ep = c->ep ? comm_size(c->ep) : 1;
    if (c->C <= 0 || c->H <= 0 || c->E <= 0) {
        snprintf(err, errlen,
                 "moe: d_model (%d), expert hidden size (%d) and n_experts (%d) must be positive",
                 c->C, c->H, c->E);
        return -1;
    }
    if (c->top_k != 1 && c->top_k != 2) {
        snprintf(err, errlen, "moe: top_k must be 1 or 2 (got %d)", c->top_k);
        return -1;
    }
    if (c->top_k > c->E) {
        snprintf(err, errlen, "moe: top_k (%d) exceeds n_experts (%d)", c->top_k, c->E);
        return -1;
    }
    if (c->E % ep != 0) {
        snprintf(err, errlen, "moe: n_experts (%d) must be divisible by ep (%d)", c->E, ep);
        return -1;
    }
    if (!(c->capacity_factor >= 0.0f) || !isfinite(c->capacity_factor)) {
        snprintf(err, errlen, "moe: capacity_factor must be >= 0 (0 = dropless), got %g",
                 (double)c->capacity_factor);
        return -1;
    }
    if (!(c->aux_coef >= 0.0f) || !isfinite(c->aux_coef) || !(c->z_coef >= 0.0f) ||
        !isfinite(c->z_coef)) {
        snprintf(err, errlen,
                 "moe: aux_loss_coef (%g) and z_loss_coef (%g) must be finite and >= 0",
                 (double)c->aux_coef, (double)c->z_coef);
        return -1;
    }
    return 0;
}

moe_layer *moe_create(const moe_config *cfg, int max_N, char *err, size_t errlen) {
    if (moe_config_check(cfg, err, errlen) != 0) return NULL;
    if (max_N < 0) {
        snprintf(err, errlen, "moe: max tokens per rank must be >= 0 (got %d)", max_N);
        return NULL;
    }
    moe_layer *l = callocCheck(1, sizeof(moe_layer));
    l->cfg = *cfg;
    l->max_N = max_N;
    ep_plan_init(&l->plan, cfg->ep, cfg->E, cfg->top_k, cfg->per_rank);
    l->E_local = l->plan.E_local;
    const size_t N = (size_t)max_N, E = (size_t)cfg->E, k = (size_t)cfg->top_k;
    const size_t C = (size_t)cfg->C;
    l->probs = ops_alloc(N * E * sizeof(float), "moe probs");
    l->dlogits = ops_alloc(N * E * sizeof(float), "moe dlogits");
    l->lse = ops_alloc(N * sizeof(float), "moe lse");
    l->expert = ops_alloc(N * k * sizeof(int), "moe expert ids");
    l->gate = ops_alloc(N * k * sizeof(float), "moe gates");
    l->dgate = ops_alloc(N * k * sizeof(float), "moe dgates");
    l->send_row = ops_alloc(N * k * sizeof(int), "moe send rows");
    l->count = mallocCheck(E * k * sizeof(int));
    l->expert_h = mallocCheck((N * k + 1) * sizeof(int));
    l->send_row_h = mallocCheck((N * k + 1) * sizeof(int));
    l->daux = ops_alloc(E * sizeof(float), "moe daux");
    l->daux_h = mallocCheck(E * sizeof(float));
    l->xsend = ops_alloc(N * k * C * sizeof(float), "moe xsend");
    l->ysend = ops_alloc(N * k * C * sizeof(float), "moe ysend");
    l->f = callocCheck(E, sizeof(double));
    l->extra = callocCheck(E + 1, sizeof(double));
    l->extra_group = callocCheck(E + 1, sizeof(double));
    return l;
}

void moe_free(moe_layer *l) {
    if (!l) return;
    ep_plan_free(&l->plan);
    ops_free(l->probs);
    ops_free(l->dlogits);
    ops_free(l->lse);
    ops_free(l->expert);
    ops_free(l->gate);
    ops_free(l->dgate);
    ops_free(l->send_row);
    free(l->count);
    free(l->expert_h);
    free(l->send_row_h);
    ops_free(l->daux);
    free(l->daux_h);
    ops_free(l->xsend);
    ops_free(l->ysend);
    ops_free(l->xe);
    ops_free(l->pre);
    ops_free(l->h);
    ops_free(l->ye);
    ops_free(l->dh);
    ops_free(l->recv);
    free(l->f);
    free(l->extra);
    free(l->extra_group);
    free(l);
}

/* A device buffer of n floats holding the first `keep` of p (freed). */
static float *grow(float *p, size_t keep, size_t n, const char *what) {
    float *q = ops_alloc((n == 0 ? 1 : n) * sizeof(float), what);
    if (p) ops_copy_d2d(q, p, keep * sizeof(float));
    ops_free(p);
    return q;
}

/* Make the expert-order buffers hold R rows (contents kept). */
static void ensure_rows(moe_layer *l, int R) {
    if (R <= l->rows_cap && l->xe) return;
    int cap = R + R / 4 + 1;
    const size_t C = (size_t)l->cfg.C, H = (size_t)l->cfg.H;
    const size_t old = (size_t)(l->xe ? l->rows_cap : 0);
    l->xe = grow(l->xe, old * C, (size_t)cap * C, "moe expert inputs");
    l->pre = grow(l->pre, old * H, (size_t)cap * H, "moe pre-gelu");
    l->h = grow(l->h, old * H, (size_t)cap * H, "moe gelu");
    l->ye = grow(l->ye, old * C, (size_t)cap * C, "moe expert outputs");
    l->dh = grow(l->dh, old * H, (size_t)cap * H, "moe dh");
    if (l->plan.ep > 1) l->recv = grow(l->recv, old * C, (size_t)cap * C, "moe all-to-all");
    l->rows_cap = cap;
}

void moe_forward(moe_layer *l, const moe_params *p, const float *x, float *y, int N,
                 moe_stats *st) {
    const moe_config *cfg = &l->cfg;
    const int C = cfg->C, H = cfg->H, E = cfg->E, k = cfg->top_k;
    mtCheck(N >= 0 && N <= l->max_N, "moe_forward: N exceeds the max_N given to moe_create");
    l->x = x;
    l->N = N;

    /* 1. router: logits → probs in place, lse; top-k; gates */
    if (N > 0) ops_matmul_forward(l->probs, x, p->router_w, NULL, N, C, E); // (N, E)
    ops_moe_route(l->probs, l->lse, l->expert, l->gate, N, E, k);

    /* 2. counts in token order (idx of each assignment among this rank's (e, s) ones) and the
     * sums the aux and z losses need: Σ_t probs[t, e] (E) and Σ_t lse² */
    memset(l->count, 0, (size_t)E * k * sizeof(int));
    ops_copy_d2h(l->expert_h, l->expert, (size_t)N * k * sizeof(int)); /* host-side planning */
    for (int t = 0; t < N; t++) {
        for (int s = 0; s < k; s++) {
            int e = l->expert_h[(size_t)t * k + s];
            l->send_row_h[(size_t)t * k + s] = l->count[e * k + s]++;
        }
    }
    ops_moe_prob_sums(l->extra, l->probs, l->lse, N, E);
    ep_plan_build(&l->plan, l->count, N, cfg->capacity_factor, l->extra, l->extra_group, E + 1);
    const ep_plan *pl = &l->plan;

    /* 3. kept x rows in send order; dispatch to the experts' ranks */
    for (int t = 0; t < N; t++) {
        for (int s = 0; s < k; s++) {
            size_t i = (size_t)t * k + s;
            l->send_row_h[i] = ep_plan_send_row(pl, l->expert_h[i], s, l->send_row_h[i]);
        }
    }
    ops_copy_h2d(l->send_row, l->send_row_h, (size_t)N * k * sizeof(int));
    ops_moe_pack(l->xsend, x, l->send_row, N, k, C);
    ensure_rows(l, pl->recv_total);
    ep_dispatch(pl, l->xsend, l->recv, l->xe, C);

    /* 4. each local expert on its contiguous block of rows */
    for (int le = 0, base = 0; le < l->E_local; le++) {
        int n = pl->expert_rows[pl->rank * l->E_local + le];
        if (n > 0) {
            float *pre = l->pre + (size_t)base * H, *h = l->h + (size_t)base * H;
            ops_matmul_forward(pre, l->xe + (size_t)base * C, p->fc_w + (size_t)le * H * C,
                               p->fc_b + (size_t)le * H, n, C, H); // (n, H)
            ops_gelu_forward(h, pre, (size_t)n * H);
            ops_matmul_forward(l->ye + (size_t)base * C, h, p->proj_w + (size_t)le * C * H,
                               p->proj_b + (size_t)le * C, n, H, C); // (n, C)
        }
        base += n;
    }

    /* 5. outputs back to their tokens' ranks; y = Σ gate · expert output */
    ep_combine(pl, l->ye, l->recv, l->ysend, C);
    ops_moe_combine(y, l->ysend, l->send_row, l->gate, N, k, C);

    /* 6. aux and z losses over the group (or this rank), statistics */
    moe_stats *S = &l->st;
    memset(S, 0, sizeof(*S));
    const int per_rank = cfg->per_rank != 0, NS = per_rank ? N : pl->n_group;
    const double *sums = per_rank ? l->extra : l->extra_group;
    l->n_scope = NS;
    S->n_group = pl->n_group;
    S->capacity = pl->capacity;
    S->dropped = pl->dropped_local;
    S->dropped_group = pl->dropped_group;
    S->tokens_per_expert = pl->assigned;
    double fp = 0.0, mean = 0.0, var = 0.0;
    S->tokens_min = S->tokens_max = pl->assigned[0];
    for (int e = 0; e < E; e++) {
        int a = pl->assigned[e], mine = 0;
        for (int s = 0; s < k; s++) mine += l->count[e * k + s];
        l->f[e] = NS > 0 ? (double)(per_rank ? mine : a) / ((double)NS * k) : 0.0;
        fp += l->f[e] * (NS > 0 ? sums[e] / NS : 0.0);
        S->tokens_min = a < S->tokens_min ? a : S->tokens_min;
        S->tokens_max = a > S->tokens_max ? a : S->tokens_max;
        mean += a;
    }
    mean /= E;
    for (int e = 0; e < E; e++) var += (pl->assigned[e] - mean) * (pl->assigned[e] - mean);
    S->tokens_cv = mean > 0 ? sqrt(var / E) / mean : 0.0;
    S->aux_loss = (double)cfg->aux_coef * E * fp;
    S->z_loss = NS > 0 ? (double)cfg->z_coef * sums[E] / NS : 0.0;
    if (st) *st = *S;
    l->fwd_valid = 1;
}

void moe_backward(moe_layer *l, const moe_params *p, moe_params *grads, const float *dy, float *dx,
                  float aux_grad) {
    const moe_config *cfg = &l->cfg;
    const int C = cfg->C, H = cfg->H, E = cfg->E, k = cfg->top_k, N = l->N;
    mtCheck(l->fwd_valid, "moe_backward: needs a moe_forward first (one backward per forward)");
    l->fwd_valid = 0;
    const ep_plan *pl = &l->plan;

    /* 1. gates' gradient; gate·dy rows in send order (into xsend, free after the forward) */
    ops_moe_combine_backward(l->dgate, l->xsend, dy, l->ysend, l->send_row, l->gate, N, k, C);

    /* 2. to the experts; their backward; input-gradient rows back in send order */
    ep_dispatch(pl, l->xsend, l->recv, l->ye, C);
    for (int le = 0, base = 0; le < l->E_local; le++) {
        int n = pl->expert_rows[pl->rank * l->E_local + le];
        if (n > 0) {
            float *xe = l->xe + (size_t)base * C, *ye = l->ye + (size_t)base * C;
            float *pre = l->pre + (size_t)base * H, *h = l->h + (size_t)base * H;
            ops_zero(l->dh, (size_t)n * H * sizeof(float));
            ops_matmul_backward(l->dh, grads ? grads->proj_w + (size_t)le * C * H : NULL,
                                grads ? grads->proj_b + (size_t)le * C : NULL, ye, h,
                                p->proj_w + (size_t)le * C * H, n, H, C);
            ops_zero(h, (size_t)n * H * sizeof(float)); /* h becomes d(pre) */
            ops_gelu_backward(h, pre, l->dh, (size_t)n * H);
            ops_zero(ye, (size_t)n * C * sizeof(float)); /* ye becomes d(xe) */
            ops_matmul_backward(ye, grads ? grads->fc_w + (size_t)le * H * C : NULL,
                                grads ? grads->fc_b + (size_t)le * H : NULL, h, xe,
                                p->fc_w + (size_t)le * H * C, n, C, H);
        }
        base += n;
    }
    ep_combine(pl, l->ye, l->recv, l->xsend, C);
    ops_moe_scatter_add(dx, l->xsend, l->send_row, N, k, C);

    /* 3. router: d probs from the gates (k = 2: g_s = p_s / (p_1 + p_2)), from the aux loss
     * (d aux / d p[t,i] = α E f_i / n_scope), softmax backward, then the z-loss
     * (d z / d logit[t,j] = β · 2 · lse_t · p[t,j] / n_scope) and the router matmul. */
    const int NS = l->n_scope;
    const double aux_scale = NS > 0 ? (double)aux_grad * cfg->aux_coef * E / NS : 0.0;
    const float z_scale = NS > 0 ? (float)(2.0 * aux_grad * cfg->z_coef / NS) : 0.0f;
    for (int e = 0; e < E; e++) l->daux_h[e] = (float)(aux_scale * l->f[e]); /* d probs */
    ops_copy_h2d(l->daux, l->daux_h, (size_t)E * sizeof(float));
    ops_moe_router_backward(l->dlogits, l->probs, l->lse, l->expert, l->dgate, l->daux, z_scale, N,
                            E, k);
    if (N > 0)
        ops_matmul_backward(dx, grads ? grads->router_w : NULL, NULL, l->dlogits, l->x,
                            p->router_w, N, C, E);
}

double moe_active_matmul_params(const moe_config *cfg) {
    return (double)cfg->E * cfg->C + (double)cfg->top_k * 2.0 * cfg->H * cfg->C;
}

size_t moe_param_count(const moe_config *cfg, int E_local) {
    const size_t C = (size_t)cfg->C, H = (size_t)cfg->H;
    return (size_t)cfg->E * C + (size_t)E_local * (2 * H * C + H + C);
}
