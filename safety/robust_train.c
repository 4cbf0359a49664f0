/*
 * safety/robust_train.c — robustness inside a training run: the evaluation hook (robust_every)
 * and adversarial training (adv_train = fgsm | pgd | freelb) as the trainer's microbatch
 * function. See safety/robust.h.
 *
 * Adversarial training replaces each microbatch's forward + backward (pp = 1; dp, tp and ep
 * layouts work because every rank computes its own microbatch's δ, and TP ranks compute the same
 * one):
 *   fgsm / pgd (Madry et al. 2018): K ascent steps on δ with input-only passes
 *     (gpt_stage_backward_input: no parameter gradient, the optimizer untouched), then ONE
 *     training forward + backward at the final δ. pgd starts uniform in the ball (seeded by the
 *     global sequence index, so any layout draws the same start); fgsm is one step of size ε
 *     from 0.
 *   freelb (Zhu et al. 2020, Algorithm 1): K training forward + backward passes at δ_0..δ_{K-1}
 *     (random start), each adding 1/K of its parameter gradient (the average over the ascent
 *     path), with δ ascending along the embedding gradient of the same backward (gpt_embed_grad)
 *     — no pass is spent on δ alone.
 * ε is relative (safety/robust.h): ē is measured from the current wte at every microbatch.
 * Cost in model FLOPs per token, with the clean training pass = 6N (forward 2N + backward 4N)
 * and an input-only backward ≈ 2N (no weight-gradient matmuls): fgsm 10N, pgd (6 + 4K)N,
 * freelb 6KN. MFU keeps the clean pass convention (6N per token), so it drops by that ratio;
 * the log says so at start.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/check.h"
#include "core/log.h"
#include "parallel/comm.h"
#include "safety/robust.h"
#include "ops/ops.h"

/* A host copy of n floats of device memory p (the caller frees it), or NULL when p is host
 * memory already (device = cpu): gradients w.r.t. the input embeddings come from the device. */
static float *host_copy(const float *p, size_t n) {
    if (!ops_is_device(p)) return NULL;
    float *h = mallocCheck((n ? n : 1) * sizeof(float));
    ops_copy_d2h(h, p, n * sizeof(float));
    return h;
}


struct robust_wiring {
    robust_opts eval;       /* the evaluation hook's attack */
    int adv;                /* 0 none, 1 fgsm, 2 pgd, 3 freelb */
    robust_norm adv_norm;
    double adv_eps_rel;
    int adv_steps;
    int vocab_limit;
    uint64_t seed;
    float *delta; // (B, T, C) of the current microbatch
};

enum { ADV_NONE, ADV_FGSM, ADV_PGD, ADV_FREELB };

/* ---- the evaluation hook ------------------------------------------------------------------------ */

static void eval_hook(trainer *tr, int step, int final, void *user) {
    (void)final;
    robust_wiring *w = user;
    robust_result r;
    char err[256];
    if (robust_evaluate(&tr->model, tr->mesh, &tr->val_dl, &w->eval, &r, err, sizeof(err)) != 0) {
        log_info("step %d/%d | robustness evaluation skipped: %s", step, tr->cfg.steps, err);
        return;
    }
    if (tr->mesh->rank != 0) return;
    robust_log(tr->db, tr->run_id, step, "train", &w->eval, &r);
    char line[512];
    int n = snprintf(line, sizeof(line), "step %d/%d | robust %s%s%s:", step, tr->cfg.steps,
                     robust_attack_name(w->eval.attack),
                     w->eval.attack == ROBUST_HOTFLIP ? "" : " ",
                     w->eval.attack == ROBUST_HOTFLIP ? "" : robust_norm_name(w->eval.norm));
    for (int i = 0; i < r.n_rows && n < (int)sizeof(line) - 64; i++) {
        if (w->eval.attack == ROBUST_HOTFLIP) /* no ball: its budget is swaps, not eps */
            n += snprintf(line + n, sizeof(line) - n, "%s flips %d adv %.4f (clean %.4f)",
                          i ? " |" : "", w->eval.flips, r.rows[i].adv_loss, r.rows[i].clean_loss);
        else
            n += snprintf(line + n, sizeof(line) - n, "%s eps %g adv %.4f (clean %.4f)",
                          i ? " |" : "", r.rows[i].eps_rel, r.rows[i].adv_loss,
                          r.rows[i].clean_loss);
    }
    log_info("%s", line);
}

/* ---- adversarial training ----------------------------------------------------------------------- */

static uint64_t adv_seed(uint64_t seed, uint64_t seq) {
    return seed ^ 0xA5A5F00DULL ^ (seq + 1) * 0x9E3779B97F4A7C15ULL;
}

static float adv_micro(trainer *tr, const int *inp, const int *tgt, int B, int T, uint64_t seq0,
                       float dloss, void *user) {
    robust_wiring *w = user;
    gpt_model *m = &tr->model;
    const int C = m->cfg.d_model, N = B * T;
    const size_t L = (size_t)T * C;
    const double ebar = robust_embed_norm(m, NULL, w->vocab_limit);
    const double eps = robust_eps_abs(w->adv_norm, w->adv_eps_rel, ebar, T, C);
    const int K = w->adv == ADV_FGSM ? 1 : w->adv_steps;
    const double alpha = w->adv == ADV_FGSM ? eps : 2.5 * eps / K;
    memset(w->delta, 0, (size_t)N * C * sizeof(float));
    if (w->adv != ADV_FGSM && eps > 0)
        for (int b = 0; b < B; b++)
            robust_random_start(w->delta + b * L, L, w->adv_norm, eps, adv_seed(w->seed, seq0 + b));
    gpt_probe probe = {w->delta, NULL, NULL};
    void (*ready)(void *, size_t) = m->grads_ready;
    const gpt_moe_stats stats = m->moe_stats;
    int counted = 0;
    if (w->adv != ADV_FREELB) {
        m->grads_ready = NULL;
        for (int k = 0; k < K; k++) { /* ascent on δ alone */
            gpt_stage_forward_ex(m, 0, inp, tgt, B, T, 1.0f / (float)N, &probe, NULL);
            const float *g = gpt_stage_backward_input(m, 0, NULL);
            float *gh = host_copy(g, (size_t)N * C);
            robust_ascent_step(w->delta, gh ? gh : g, B, L, w->adv_norm, alpha, eps);
            free(gh);
        }
        m->moe_stats = stats; /* the ascent's routing is not a training statistic */
        m->grads_ready = ready;
        double sum = gpt_stage_forward_ex(m, 0, inp, tgt, B, T, dloss, &probe, &counted);
        gpt_backward(m);
        return (float)(sum / counted);
    }
    /* FreeLB: K full passes, each worth 1/K of the microbatch's gradient */
    const float aux = m->aux_grad;
    m->aux_grad = aux / (float)K;
    double loss = 0;
    for (int k = 0; k < K; k++) {
        int final = k == K - 1;
        if (final) m->moe_stats = stats; /* one pass's routing statistics, as without FreeLB */
        m->grads_ready = final ? ready : NULL;
        double sum = gpt_stage_forward_ex(m, 0, inp, tgt, B, T, dloss / (float)K, &probe, &counted);
        gpt_backward(m);
        loss += sum / counted;
        if (!final) {
            float *gh = host_copy(gpt_embed_grad(m), (size_t)N * C);
            robust_ascent_step(w->delta, gh ? gh : gpt_embed_grad(m), B, L, w->adv_norm, alpha,
                               eps);
            free(gh);
        }
    }
    m->aux_grad = aux;
    return (float)(loss / K);
}

/* ---- wiring ----------------------------------------------------------------------------------- */

robust_wiring *robust_attach_trainer(trainer *tr, char *err, size_t errlen) {
    const mt_config *c = &tr->cfg;
    robust_wiring *w = callocCheck(1, sizeof(*w));
    w->vocab_limit = tok_vocab_size(&tr->tok);
    w->seed = (uint64_t)c->seed;
    robust_opts *o = &w->eval;
    robust_opts_default(o);
    if (robust_parse_attack(c->robust_attack, &o->attack, err, errlen) != 0 ||
        robust_parse_norm(c->robust_norm, &o->norm, err, errlen) != 0 ||
        robust_parse_norm(c->adv_norm, &w->adv_norm, err, errlen) != 0 ||
        (o->attack != ROBUST_HOTFLIP && robust_parse_eps(c->robust_eps, o, err, errlen) != 0)) {
        free(w);
        return NULL;
    }
    o->steps = c->robust_steps;
    o->flips = c->robust_flips;
    o->batches = c->robust_batches;
    o->batch_size = c->batch_size; /* the activations the trainer already holds */
    o->vocab_limit = w->vocab_limit;
    o->seed = (uint64_t)c->seed;
    if (c->robust_every > 0) trainer_add_hook(tr, "robust", c->robust_every, eval_hook, w);

    w->adv = !strcmp(c->adv_train, "fgsm") ? ADV_FGSM : !strcmp(c->adv_train, "pgd") ? ADV_PGD
             : !strcmp(c->adv_train, "freelb") ? ADV_FREELB : ADV_NONE;
    if (w->adv == ADV_NONE) return w;
    if (tr->mesh->pp > 1) {
        snprintf(err, errlen, "adv_train = %s needs pp = 1 (the ascent passes run outside the "
                 "pipeline schedule)", c->adv_train);
        free(w);
        return NULL;
    }
    w->adv_eps_rel = c->adv_eps;
    w->adv_steps = c->adv_steps;
    w->delta = callocCheck((size_t)c->batch_size * c->seq_len * c->d_model, sizeof(float));
    trainer_set_microbatch(tr, adv_micro, w);
    int K = w->adv == ADV_FGSM ? 1 : w->adv_steps;
    double ratio = w->adv == ADV_FREELB ? K : (6.0 + 4.0 * K) / 6.0;
    double ebar = robust_embed_norm(&tr->model, NULL, w->vocab_limit);
    log_info("adversarial training: %s, %s ball, eps_rel %g (eps %.4g at init), %d ascent step%s "
             "per microbatch: %s | about %.2fx the model FLOPs of a clean step; MFU counts the "
             "clean pass only (6N per token)", c->adv_train, c->adv_norm, c->adv_eps,
             robust_eps_abs(w->adv_norm, c->adv_eps, ebar, c->seq_len, c->d_model), K,
             K == 1 ? "" : "s",
             w->adv == ADV_FREELB ? "K training passes averaged (FreeLB)"
                                  : "extra forward + input-only backward passes, then one "
                                    "training pass",
             ratio);
    return w;
}

void robust_detach(robust_wiring *w) {
    if (!w) return;
    free(w->delta);
    free(w);
}
