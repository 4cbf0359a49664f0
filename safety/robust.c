/*
 * safety/robust.c — FGSM/PGD in embedding space, HotFlip token swaps, and their evaluation on
 * fixed validation batches (see safety/robust.h for the formulas and conventions).
 *
 * Shape: every attack is built from two pipeline-aware passes over ONE activation slot —
 * pass_forward (embed with an optional δ, run the stages in order, bring the last stage's
 * per-token losses and argmaxes to every stage) and pass_backward (gpt_stage_backward_input from
 * the last stage down; the first stage ends with ∂L/∂δ). Parameter gradients and optimizer state
 * are never touched, so an evaluation can run between two training steps. The control flow
 * (how many passes, over how many sequences) depends only on sizes, never on values held by one
 * stage, so every rank of a layout calls the collectives in the same order.
 */
#include "safety/robust.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/check.h"
#include "core/rng.h"
#include "core/timer.h"
#include "parallel/comm.h"
#include "ops/ops.h"

/* A host copy of n floats of device memory p (the caller frees it), or NULL when p is host
 * memory already (device = cpu): gradients w.r.t. the input embeddings come from the device. */
static float *host_copy(const float *p, size_t n) {
    if (!ops_is_device(p)) return NULL;
    float *h = mallocCheck((n ? n : 1) * sizeof(float));
    ops_copy_d2h(h, p, n * sizeof(float));
    return h;
}


#define TAG_FWD 40
#define TAG_BWD 41

/* ---- options ---------------------------------------------------------------------------------- */

void robust_opts_default(robust_opts *o) {
    memset(o, 0, sizeof(*o));
    o->attack = ROBUST_PGD;
    o->norm = ROBUST_L2;
    const double eps[] = {0, 0.01, 0.03, 0.1};
    o->n_eps = 4;
    memcpy(o->eps_rel, eps, sizeof(eps));
    o->steps = 5;
    o->alpha_mult = 2.5;
    o->flips = 2;
    o->beam = 1;
    o->batches = 2;
    o->batch_size = 8;
    o->seed = 1337;
}

const char *robust_attack_name(robust_attack a) {
    return a == ROBUST_FGSM ? "fgsm" : a == ROBUST_PGD ? "pgd" : "hotflip";
}

const char *robust_norm_name(robust_norm n) { return n == ROBUST_L2 ? "l2" : "linf"; }

int robust_parse_attack(const char *s, robust_attack *out, char *err, size_t errlen) {
    if (!strcmp(s, "fgsm")) *out = ROBUST_FGSM;
    else if (!strcmp(s, "pgd")) *out = ROBUST_PGD;
    else if (!strcmp(s, "hotflip")) *out = ROBUST_HOTFLIP;
    else {
        snprintf(err, errlen, "unknown attack '%s' (use fgsm, pgd or hotflip)", s);
        return -1;
    }
    return 0;
}

int robust_parse_norm(const char *s, robust_norm *out, char *err, size_t errlen) {
    if (!strcmp(s, "l2")) *out = ROBUST_L2;
    else if (!strcmp(s, "linf")) *out = ROBUST_LINF;
    else {
        snprintf(err, errlen, "unknown norm '%s' (use l2 or linf)", s);
        return -1;
    }
    return 0;
}

int robust_parse_eps(const char *list, robust_opts *o, char *err, size_t errlen) {
    int n = 0;
    const char *p = list;
    while (*p) {
        char *end;
        double v = strtod(p, &end);
        /* "0.1," and "0.1,,0.2" are refused as ",0.1" is: every comma separates two numbers */
        if (end == p || !isfinite(v) || v < 0 || v > ROBUST_EPS_MAX ||
            (*end != ',' && *end != 0) || (*end == ',' && end[1] == 0)) {
            snprintf(err, errlen, "eps must be a comma list of numbers in [0, %g] (e.g. "
                     "0,0.03,0.1), got '%s'", ROBUST_EPS_MAX, list);
            return -1;
        }
        if (n == ROBUST_MAX_EPS) {
            snprintf(err, errlen, "at most %d eps values, got more in '%s'", ROBUST_MAX_EPS, list);
            return -1;
        }
        o->eps_rel[n++] = v;
        p = *end ? end + 1 : end;
    }
    if (n == 0) {
        snprintf(err, errlen, "eps list is empty (e.g. --eps 0,0.03,0.1)");
        return -1;
    }
    o->n_eps = n;
    return 0;
}

/* ---- the ε scale -------------------------------------------------------------------------------- */

double robust_embed_norm(const gpt_model *m, const mesh *ms, int vocab_limit) {
    double e = NAN;
    if (m->first) {
        int V = m->cfg.vocab_size, C = m->cfg.d_model;
        int rows = vocab_limit > 0 && vocab_limit < V ? vocab_limit : V;
        double sum = 0;
        float *wh = host_copy(m->wte, (size_t)rows * C); /* NULL: wte is host memory */
        const float *w = wh ? wh : m->wte;
        for (int v = 0; v < rows; v++) {
            const float *r = w + (size_t)v * C; // (C)
            double sq = 0;
            for (int c = 0; c < C; c++) sq += (double)r[c] * r[c];
            sum += sqrt(sq);
        }
        free(wh);
        e = sum / rows;
    }
    if (ms && ms->pp > 1) comm_broadcast_bytes(ms->pp_group, &e, sizeof(e), 0);
    return e;
}

double robust_eps_abs(robust_norm norm, double eps_rel, double embed_norm, int T, int C) {
    return norm == ROBUST_L2 ? eps_rel * embed_norm * sqrt((double)T)
                             : eps_rel * embed_norm / sqrt((double)C);
}

/* ---- pipeline-aware passes over slot 0 ------------------------------------------------------- */

typedef struct {
    gpt_model *m;
    const mesh *ms; /* NULL: one process */
    int B, T, C;
    float *dout;  // (B·T, C) gradient received from the next stage (non-last stages)
    float *din;   // (B·T, C) host copy of the input gradient (first stage, device memory only)
    float *loss;  // (B·T) per-token loss of the last forward, on every stage
    int *pred;    // (B·T) per-token argmax of the last forward, on every stage
} passes;

static int pp_of(const passes *P) { return P->ms ? P->ms->pp : 1; }

static void passes_init(passes *P, gpt_model *m, const mesh *ms, int B, int T) {
    mtCheck(B <= m->B && T <= m->T, "attack batch larger than the model's activations");
    P->m = m;
    P->ms = ms;
    P->B = B;
    P->T = T;
    P->C = m->cfg.d_model;
    size_t N = (size_t)B * T;
    P->dout = m->last ? NULL : mallocCheck(N * P->C * sizeof(float));
    P->din = m->first ? mallocCheck(N * P->C * sizeof(float)) : NULL;
    P->loss = mallocCheck(N * sizeof(float));
    P->pred = mallocCheck(N * sizeof(int));
}

static void passes_free(passes *P) {
    free(P->dout);
    free(P->din);
    free(P->loss);
    free(P->pred);
}

/* Forward of n ≤ P->B sequences (inp, tgt (n, T)) with delta (n, T, C) on the first stage (NULL =
 * clean). dloss != 0 prepares a backward. Leaves P->loss, P->pred (n·T) on every stage. */
static void pass_forward(passes *P, const int *inp, const int *tgt, int n, const float *delta,
                         float dloss) {
    gpt_model *m = P->m;
    size_t N = (size_t)n * P->T, act = N * P->C;
    comm *pp = P->ms ? P->ms->pp_group : NULL;
    int r = P->ms ? P->ms->pp_rank : 0;
    if (!m->first) comm_recv(pp, gpt_stage_input(m, 0), act, r - 1, TAG_FWD);
    gpt_probe probe = {delta, P->pred, P->loss};
    gpt_stage_forward_ex(m, 0, inp, tgt, n, P->T, dloss, &probe, NULL);
    if (!m->last) comm_send(pp, gpt_stage_output(m, 0), act, r + 1, TAG_FWD);
    if (pp_of(P) > 1) {
        comm_broadcast_bytes(pp, P->loss, N * sizeof(float), pp_of(P) - 1);
        comm_broadcast_bytes(pp, P->pred, N * sizeof(int), pp_of(P) - 1);
    }
}

/* Input-only backward of the last pass_forward (which had dloss != 0) through every stage.
 * Returns ∂L/∂δ (n·T, C) on the first stage (valid until the next backward), NULL elsewhere. */
static const float *pass_backward(passes *P, int n) {
    gpt_model *m = P->m;
    size_t act = (size_t)n * P->T * P->C;
    comm *pp = P->ms ? P->ms->pp_group : NULL;
    int r = P->ms ? P->ms->pp_rank : 0;
    const float *din;
    if (m->last) {
        din = gpt_stage_backward_input(m, 0, NULL);
    } else {
        comm_recv(pp, P->dout, act, r + 1, TAG_BWD);
        din = gpt_stage_backward_input(m, 0, P->dout);
    }
    if (m->first && ops_is_device(din)) { /* the attacks read it on the host */
        ops_copy_d2h(P->din, din, act * sizeof(float));
        return P->din;
    }
    if (m->first) return din;
    comm_send(pp, din, act, r - 1, TAG_BWD);
    return NULL;
}

/* ---- FGSM / PGD -------------------------------------------------------------------------------- */

static double dot_d(const float *a, const float *b, size_t n) {
    double s = 0;
    for (size_t i = 0; i < n; i++) s += (double)a[i] * b[i];
    return s;
}

double robust_ascent_step(float *delta, const float *g, int B, size_t L, robust_norm norm,
                          double alpha, double eps) {
    double worst = 0;
    for (int b = 0; b < B; b++) {
        float *d = delta + (size_t)b * L;    // (T, C)
        const float *gb = g + (size_t)b * L; // (T, C)
        double size;
        if (norm == ROBUST_L2) {
            double gn = sqrt(dot_d(gb, gb, L));
            if (gn > 0) {
                const float s = (float)(alpha / gn); /* steepest ascent: g / ‖g‖₂ */
                for (size_t i = 0; i < L; i++) d[i] += s * gb[i];
            }
            size = sqrt(dot_d(d, d, L));
            if (size > eps) { /* Π onto the ball: radial scaling */
                const float s = (float)(eps / size);
                for (size_t i = 0; i < L; i++) d[i] *= s;
                size = sqrt(dot_d(d, d, L));
            }
            mtCheck(size <= eps * (1 + 1e-6), "PGD left the L2 eps-ball after a projection");
        } else {
            const float a = (float)alpha, e = (float)eps;
            float mx = 0;
            for (size_t i = 0; i < L; i++) {
                float v = d[i] + (gb[i] > 0 ? a : gb[i] < 0 ? -a : 0.0f); /* sign(g) */
                v = v > e ? e : v < -e ? -e : v;                          /* Π: clip */
                d[i] = v;
                if (fabsf(v) > mx) mx = fabsf(v);
            }
            size = mx;
            mtCheck(mx <= e, "PGD left the Linf eps-ball after a projection");
        }
        double ratio = eps > 0 ? size / eps : 0.0;
        if (ratio > worst) worst = ratio;
    }
    return worst;
}

void robust_random_start(float *d, size_t L, robust_norm norm, double eps, uint64_t seed) {
    rng_state r;
    rng_seed(&r, seed);
    if (norm == ROBUST_LINF) {
        for (size_t i = 0; i < L; i++) d[i] = (float)(eps * (2.0 * rng_uniform(&r) - 1.0));
        return;
    }
    for (size_t i = 0; i < L; i++) d[i] = rng_normal(&r);
    double n = sqrt(dot_d(d, d, L)), rad = eps * pow(rng_uniform(&r), 1.0 / (double)L);
    const float s = n > 0 ? (float)(rad / n) : 0.0f;
    for (size_t i = 0; i < L; i++) d[i] *= s;
}

static uint64_t start_seed(uint64_t seed, uint64_t seq, int eps_index) {
    return seed ^ (seq + 1) * 0x9E3779B97F4A7C15ULL ^ (uint64_t)(eps_index + 1) * 0xBF58476D1CE4E5B9ULL;
}

double robust_attack_embed(gpt_model *m, const mesh *ms, const robust_opts *o, int eps_index,
                           double eps_abs, const int *inp, const int *tgt, int B, int T,
                           uint64_t seq0, float *delta_out, float *adv_loss, int *adv_pred) {
    passes P;
    passes_init(&P, m, ms, B, T);
    const int C = P.C, N = B * T, K = o->attack == ROBUST_FGSM ? 1 : o->steps;
    const size_t L = (size_t)T * C;
    const double alpha = o->attack == ROBUST_FGSM ? eps_abs : o->alpha_mult * eps_abs / K;
    float *delta = m->first ? callocCheck((size_t)N * C, sizeof(float)) : NULL; // (B, T, C)
    if (delta && o->attack == ROBUST_PGD && o->random_start && eps_abs > 0)
        for (int b = 0; b < B; b++)
            robust_random_start(delta + b * L, L, o->norm, eps_abs, start_seed(o->seed, seq0 + b, eps_index));
    double *best = mallocCheck((size_t)B * sizeof(double));
    for (int b = 0; b < B; b++) best[b] = -INFINITY;
    double worst = 0;
    for (int k = 0;; k++) {
        pass_forward(&P, inp, tgt, B, delta, 1.0f / (float)N);
        for (int b = 0; k > 0 && b < B; b++) { /* iterate k's δ: keep each sequence's best */
            double s = 0;
            for (int t = 0; t < T; t++) s += P.loss[b * T + t];
            if (!(s > best[b])) continue;
            best[b] = s;
            if (adv_loss) memcpy(adv_loss + b * T, P.loss + b * T, (size_t)T * sizeof(float));
            if (adv_pred) memcpy(adv_pred + b * T, P.pred + b * T, (size_t)T * sizeof(int));
        }
        if (k == K) break;
        const float *g = pass_backward(&P, B);
        if (delta) {
            double w = robust_ascent_step(delta, g, B, L, o->norm, alpha, eps_abs);
            if (w > worst) worst = w;
        }
    }
    if (delta_out && delta) memcpy(delta_out, delta, (size_t)N * C * sizeof(float));
    free(delta);
    free(best);
    passes_free(&P);
    return worst;
}

/* ---- HotFlip ------------------------------------------------------------------------------------ */

/* One candidate swap: position, new token, first-order loss change. */
typedef struct {
    int t, tok;
    float score;
} flip;

/* The best swap of every unused position of one sequence, ranked, into out (≤ T entries): ΔL ≈
 * (e_b − e_a)ᵀ g_t (Ebrahimi et al. 2018, eq. 2), b ≠ a, b < Vl. scores (T, V) is scratch.
 * Returns how many positions could be swapped. */
static int rank_swaps(const gpt_model *m, const float *g, const int *tok,
                      const unsigned char *used, int T, int Vl, float *scores, flip *out) {
    const int C = m->cfg.d_model, V = m->cfg.vocab_size;
    if (ops_is_device(m->wte)) { /* g and scores are host memory: stage them */
        float *dg = ops_alloc((size_t)T * C * sizeof(float), "hotflip g");
        float *ds = ops_alloc((size_t)T * V * sizeof(float), "hotflip scores");
        ops_copy_h2d(dg, g, (size_t)T * C * sizeof(float));
        ops_matmul_forward(ds, dg, m->wte, NULL, T, C, V); // (T, V): g_t · e_b
        ops_copy_d2h(scores, ds, (size_t)T * V * sizeof(float));
        ops_free(dg);
        ops_free(ds);
    } else {
        ops_matmul_forward(scores, g, m->wte, NULL, T, C, V); // (T, V): g_t · e_b
    }
    int n = 0;
    for (int t = 0; t < T; t++) {
        if (used[t]) continue;
        const float *s = scores + (size_t)t * V, base = s[tok[t]];
        int best = -1;
        for (int b = 0; b < Vl; b++)
            if (b != tok[t] && (best < 0 || s[b] > s[best])) best = b;
        if (best < 0) continue;
        out[n++] = (flip){t, best, s[best] - base};
    }
    /* insertion sort by score, descending (T is small; ties keep position order) */
    for (int i = 1; i < n; i++) {
        flip f = out[i];
        int j = i - 1;
        while (j >= 0 && out[j].score < f.score) out[j + 1] = out[j], j--;
        out[j + 1] = f;
    }
    return n;
}

/* Beam search over token swaps of one batch: cand (B·w sequences; n_cand per original) →
 * children (B·n_cand·w) → the w best children by true loss. beam 1 = greedy (the best
 * first-order swap, no true-loss ranking). adv_inp (B, T) receives each sequence's final tokens;
 * P->loss / P->pred the final forward. */
static void hotflip_batch(passes *P, const robust_opts *o, const int *inp, const int *tgt,
                          int B, int *adv_inp) {
    gpt_model *m = P->m;
    const int T = P->T, C = P->C, V = m->cfg.vocab_size, Bm = P->B;
    const int w = o->beam < 1 ? 1 : o->beam, F = o->flips < T ? o->flips : T;
    const int Vl = o->vocab_limit > 0 && o->vocab_limit < V ? o->vocab_limit : V;
    const size_t maxc = (size_t)B * w * w; /* children per round, at most */
    int *ctok = mallocCheck((size_t)B * w * T * sizeof(int)); /* candidates */
    unsigned char *cused = callocCheck((size_t)B * w * T, 1);
    int *ktok = mallocCheck(maxc * T * sizeof(int)); /* children */
    unsigned char *kused = callocCheck(maxc * T, 1);
    double *kloss = mallocCheck(maxc * sizeof(double));
    int *btgt = mallocCheck(maxc * T * sizeof(int)), *order = mallocCheck(maxc * sizeof(int));
    float *scores = m->first ? mallocCheck((size_t)T * V * sizeof(float)) : NULL;
    flip *fl = mallocCheck((size_t)T * sizeof(flip));
    memcpy(ctok, inp, (size_t)B * T * sizeof(int));
    int nc = 1; /* candidates per original sequence */
    for (int f = 0; f < F; f++) {
        const int kids = w < T - f ? w : T - f; /* children per candidate (sizes only) */
        const int total = B * nc;
        /* 1. gradients of every candidate, in chunks of the model's batch; children from them */
        for (int q0 = 0; q0 < total; q0 += Bm) {
            int n = total - q0 < Bm ? total - q0 : Bm;
            for (int q = q0; q < q0 + n; q++)
                memcpy(btgt + (size_t)(q - q0) * T, tgt + (size_t)(q / nc) * T, T * sizeof(int));
            pass_forward(P, ctok + (size_t)q0 * T, btgt, n, NULL, 1.0f / (float)(n * T));
            const float *g = pass_backward(P, n);
            for (int q = q0; q < q0 + n; q++)
                for (int j = 0; j < kids; j++) { /* child j of q: parent + its j-th best swap */
                    size_t k = (size_t)q * kids + j;
                    memcpy(ktok + k * T, ctok + (size_t)q * T, T * sizeof(int));
                    memcpy(kused + k * T, cused + (size_t)q * T, T);
                }
            if (!g) continue; /* only the first stage holds gradients and wte */
            for (int q = q0; q < q0 + n; q++) {
                int nf = rank_swaps(m, g + (size_t)(q - q0) * T * C, ctok + (size_t)q * T,
                                    cused + (size_t)q * T, T, Vl, scores, fl);
                for (int j = 0; j < kids && j < nf; j++) {
                    size_t k = (size_t)q * kids + j;
                    ktok[k * T + fl[j].t] = fl[j].tok;
                    kused[k * T + fl[j].t] = 1;
                }
            }
        }
        /* 2. beam > 1: the true loss of every child decides which w survive per sequence */
        const int nk = total * kids, keep = w < nc * kids ? w : nc * kids;
        if (w > 1) {
            for (int q0 = 0; q0 < nk; q0 += Bm) {
                int n = nk - q0 < Bm ? nk - q0 : Bm;
                for (int q = q0; q < q0 + n; q++)
                    memcpy(btgt + (size_t)(q - q0) * T, tgt + (size_t)(q / (nc * kids)) * T,
                           T * sizeof(int));
                pass_forward(P, ktok + (size_t)q0 * T, btgt, n, NULL, 0.0f);
                for (int q = q0; q < q0 + n; q++) {
                    double s = 0;
                    for (int t = 0; t < T; t++) s += P->loss[(size_t)(q - q0) * T + t];
                    kloss[q] = s;
                }
            }
        }
        for (int b = 0; b < B; b++) {
            int *ord = order + (size_t)b * nc * kids;
            for (int i = 0; i < nc * kids; i++) ord[i] = b * nc * kids + i;
            for (int i = 1; w > 1 && i < nc * kids; i++) { /* by true loss, descending, stable */
                int x = ord[i], j = i - 1;
                while (j >= 0 && kloss[ord[j]] < kloss[x]) ord[j + 1] = ord[j], j--;
                ord[j + 1] = x;
            }
            for (int c = 0; c < keep; c++) {
                size_t dst = (size_t)b * keep + c, src = (size_t)ord[c];
                memcpy(ctok + dst * T, ktok + src * T, T * sizeof(int));
                memcpy(cused + dst * T, kused + src * T, T);
            }
        }
        nc = keep;
    }
    /* the best candidate of each sequence (the first: beams are kept sorted) */
    for (int b = 0; b < B; b++)
        memcpy(adv_inp + (size_t)b * T, ctok + (size_t)b * nc * T, T * sizeof(int));
    pass_forward(P, adv_inp, tgt, B, NULL, 0.0f);
    free(ctok);
    free(cused);
    free(ktok);
    free(kused);
    free(kloss);
    free(btgt);
    free(order);
    free(scores);
    free(fl);
}

void robust_attack_hotflip(gpt_model *m, const mesh *ms, const robust_opts *o, const int *inp,
                           const int *tgt, int B, int T, int *adv_inp, float *adv_loss,
                           int *adv_pred) {
    passes P;
    passes_init(&P, m, ms, B, T);
    hotflip_batch(&P, o, inp, tgt, B, adv_inp);
    if (adv_loss) memcpy(adv_loss, P.loss, (size_t)B * T * sizeof(float));
    if (adv_pred) memcpy(adv_pred, P.pred, (size_t)B * T * sizeof(int));
    passes_free(&P);
}

/* ---- the evaluation -------------------------------------------------------------------------- */

enum { A_CLEAN, A_ADV, A_CLEAN_OK, A_ADV_OK, A_CHANGED, A_TOKENS, A_N };

int robust_evaluate(gpt_model *m, const mesh *ms, const data_loader *val, const robust_opts *o,
                    robust_result *res, char *err, size_t errlen) {
    memset(res, 0, sizeof(*res));
    const int T = val->T, C = m->cfg.d_model;
    uint64_t nwin = data_loader_num_windows(val);
    int B = o->batch_size;
    if ((uint64_t)B > nwin) B = (int)nwin;
    if (B < 1) {
        snprintf(err, errlen, "the validation split holds no window of %d tokens", T + 1);
        return -1;
    }
    if (B > m->B || T > m->T) {
        snprintf(err, errlen, "attack batch %d x %d exceeds the model's activations %d x %d", B,
                 T, m->B, m->T);
        return -1;
    }
    if (o->attack == ROBUST_HOTFLIP && (o->vocab_limit == 1 || m->cfg.vocab_size < 2)) {
        snprintf(err, errlen, "HotFlip needs a vocabulary of at least two tokens");
        return -1;
    }
    int batches = o->batches;
    if ((uint64_t)batches * B > nwin) batches = (int)(nwin / B);
    const int dp = ms ? ms->dp : 1, dp_rank = ms ? ms->dp_rank : 0;
    const int n_rows = o->attack == ROBUST_HOTFLIP ? 1 : o->n_eps;
    const size_t N = (size_t)B * T;
    const double ebar = robust_embed_norm(m, ms, o->vocab_limit);
    gpt_moe_stats saved = m->moe_stats; /* attack routing is not a training statistic */
    double acc[ROBUST_MAX_EPS][A_N], ms_row[ROBUST_MAX_EPS], worst[ROBUST_MAX_EPS];
    memset(acc, 0, sizeof(acc));
    memset(ms_row, 0, sizeof(ms_row));
    memset(worst, 0, sizeof(worst));
    int *inp = mallocCheck(N * sizeof(int)), *tgt = mallocCheck(N * sizeof(int));
    int *cpred = mallocCheck(N * sizeof(int)), *apred = mallocCheck(N * sizeof(int));
    int *ainp = mallocCheck(N * sizeof(int));
    float *closs = mallocCheck(N * sizeof(float)), *aloss = mallocCheck(N * sizeof(float));
    passes P;
    passes_init(&P, m, ms, B, T);
    /* every rank runs the same number of rounds (expert parallelism makes the passes collective
     * across data-parallel ranks); rounds past the last batch are computed, not counted */
    int rounds = (batches + dp - 1) / dp;
    for (int it = 0; it < rounds; it++) {
        int i = it * dp + dp_rank, counts = i < batches;
        if (!counts) i %= batches;
        data_loader_get(val, (uint64_t)i * B, B, inp, tgt);
        pass_forward(&P, inp, tgt, B, NULL, 0.0f); /* clean */
        memcpy(closs, P.loss, N * sizeof(float));
        memcpy(cpred, P.pred, N * sizeof(int));
        for (int r = 0; r < n_rows; r++) {
            double t0 = timer_now();
            if (o->attack == ROBUST_HOTFLIP) {
                robust_attack_hotflip(m, ms, o, inp, tgt, B, T, ainp, aloss, apred);
            } else {
                double e = robust_eps_abs(o->norm, o->eps_rel[r], ebar, T, C);
                double wr = robust_attack_embed(m, ms, o, r, e, inp, tgt, B, T, (uint64_t)i * B,
                                                NULL, aloss, apred);
                if (wr > worst[r]) worst[r] = wr;
            }
            ms_row[r] += 1e3 * (timer_now() - t0);
            for (size_t j = 0; counts && j < N; j++) {
                acc[r][A_CLEAN] += closs[j];
                acc[r][A_ADV] += aloss[j];
                acc[r][A_CLEAN_OK] += cpred[j] == tgt[j];
                acc[r][A_ADV_OK] += apred[j] == tgt[j];
                acc[r][A_CHANGED] += cpred[j] != apred[j];
                acc[r][A_TOKENS] += 1;
            }
        }
        if (o->progress && (!ms || ms->rank == 0)) o->progress(it + 1, rounds, o->progress_user);
    }
    passes_free(&P);
    m->moe_stats = saved;
    if (ms) {
        comm_all_reduce_f64(ms->dp_group, &acc[0][0], (size_t)ROBUST_MAX_EPS * A_N, COMM_SUM);
        comm_all_reduce_f64(ms->world, worst, ROBUST_MAX_EPS, COMM_MAX);
        comm_all_reduce_f64(ms->world, ms_row, ROBUST_MAX_EPS, COMM_MAX);
    }
    res->n_rows = n_rows;
    res->embed_norm = ebar;
    res->seq_len = T;
    res->n_seqs = batches * B;
    for (int r = 0; r < n_rows; r++) {
        robust_row *w = &res->rows[r];
        double n = acc[r][A_TOKENS] > 0 ? acc[r][A_TOKENS] : NAN;
        w->eps_rel = o->attack == ROBUST_HOTFLIP ? 0 : o->eps_rel[r];
        w->eps_abs = o->attack == ROBUST_HOTFLIP ? 0 : robust_eps_abs(o->norm, w->eps_rel, ebar, T, C);
        w->k = o->attack == ROBUST_HOTFLIP ? o->flips : o->attack == ROBUST_FGSM ? 1 : o->steps;
        w->clean_loss = acc[r][A_CLEAN] / n;
        w->adv_loss = acc[r][A_ADV] / n;
        w->clean_acc = acc[r][A_CLEAN_OK] / n;
        w->adv_acc = acc[r][A_ADV_OK] / n;
        w->success_rate = acc[r][A_CHANGED] / n;
        w->n_tokens = (long long)acc[r][A_TOKENS];
        w->ms = ms_row[r];
        w->max_ball = worst[r];
    }
    free(inp);
    free(tgt);
    free(cpred);
    free(apred);
    free(ainp);
    free(closs);
    free(aloss);
    return 0;
}
