/*
 * model/model_pass.c — GPT-2 forward and backward on top of ops/ops.h, whole model or one
 * pipeline stage, one activation slot per microbatch in flight.
 *
 * The forward keeps every activation the backward needs, or, with activation recompute
 * (m->recompute; Chen et al. 2016 "full", Korthikanti et al. 2022 "selective"), only part of them:
 * the backward of a block then reruns the dropped part first (recompute_block). The backward
 * walks the blocks in reverse with ONE running residual-gradient buffer `dres`: because every
 * op accumulates into its input gradient, a block's LayerNorm backward adds its contribution to
 * dres in place and the skip connection costs nothing. Tensor parallelism adds the f/g
 * all-reduces of parallel/tp.h around the column-/row-parallel linears.
 *
 * Memory: activations, scratch, gradients and each slot's token ids live in device memory
 * (ops_alloc; on cpu that is where core/mem.h's huge pages are asked for); the host's token ids
 * and targets are copied in per microbatch, and what a probe asks for (losses, predictions) is
 * copied out — nothing here touches a tensor on the host.
 */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "core/check.h"
#include "parallel/tp.h"
#include "model/model.h"
#include "model/moe.h"
#include "ops/ops.h"
#include "ops/prof.h"

/* ---- activations ---------------------------------------------------------------------------- */

/* Floats of one block's activations for N = B·T rows, split by what recompute keeps: att is the
 * (B, NHl, T, T) attention probabilities, rest everything else but the block output res3 (N, C). */
static void block_sizes(const gpt_model *m, int B, int T, size_t *att, size_t *rest) {
    const gpt_config *c = &m->cfg;
    size_t N = (size_t)B * T, C = c->d_model;
    size_t Cl = C / c->tp, NHl = c->n_head / c->tp; /* this rank's width and heads */
    *att = (size_t)B * NHl * T * T;
    *rest = N * C /*ln1*/ + 2 * N + N * 3 * Cl /*qkv*/ + N * Cl /*atty*/ + N * C /*res2*/ +
            N * C /*ln2*/ + 2 * N + N * 4 * Cl * 2 /*fch*/;
}

/* Per-slot activation floats and shared backward scratch floats for (B, T) on m's stage. With
 * recompute, what a block's backward recomputes lives once, in the scratch, instead of once per
 * block and slot: selective keeps all but att, full keeps only each block's output res3 (the next
 * block's input) and recomputes into a work copy of the rest (res3 included, so nothing kept is
 * ever rewritten). */
void gpt_activation_sizes(const gpt_model *m, int B, int T, size_t *slot, size_t *scratch) {
    const gpt_config *c = &m->cfg;
    size_t N = (size_t)B * T, C = c->d_model, V = c->vocab_size;
    size_t Cl = C / c->tp, att, rest;
    block_sizes(m, B, T, &att, &rest);
    size_t kept = m->recompute == GPT_RECOMPUTE_FULL        ? N * C
                  : m->recompute == GPT_RECOMPUTE_SELECTIVE ? rest + N * C
                                                            : rest + att + N * C;
    *slot = N * C + (size_t)m->n_local * kept + (m->last ? N * C + 2 * N + N * V + N : 0);
    *scratch = N * C * 2 /*dres, dln*/ + N * Cl /*datty*/ + N * 3 * Cl + att + N * 4 * Cl * 2;
    if (m->recompute == GPT_RECOMPUTE_SELECTIVE) *scratch += att;
    if (m->recompute == GPT_RECOMPUTE_FULL) *scratch += rest + att + N * C;
}

size_t gpt_activation_floats(const gpt_model *m, int B, int T) {
    size_t slot, scratch;
    gpt_activation_sizes(m, B, T, &slot, &scratch);
    return slot * (size_t)(m->n_slots > 0 ? m->n_slots : 1) + scratch;
}

void gpt_free_activations(gpt_model *m) {
    for (int i = 0; i < m->n_slots; i++) {
        for (int l = 0; m->slots[i].moe && l < m->n_local; l++)
            if (m->slots[i].moe[l]) moe_free(m->slots[i].moe[l]);
        free(m->slots[i].moe);
        ops_free(m->slots[i].mem);
        free(m->slots[i].acts);
        ops_free(m->slots[i].inputs);
    }
    free(m->slots);
    ops_free(m->scratch);
    m->slots = NULL;
    m->scratch = NULL;
    m->n_slots = 0;
}

/* Point one block's activations a into consecutive floats from p (att only when att_floats > 0,
 * else left as it is): N rows, width C, local width Cl. Returns the float after the last. */
static float *take_block(gpt_block_acts *a, float *p, size_t N, size_t C, size_t Cl,
                         size_t att_floats) {
#define TAKE(ptr, n) (ptr = p, p += (n))
    TAKE(a->ln1, N * C);
    TAKE(a->ln1_mean, N);
    TAKE(a->ln1_rstd, N);
    TAKE(a->qkv, N * 3 * Cl);
    TAKE(a->atty, N * Cl);
    if (att_floats) TAKE(a->att, att_floats);
    TAKE(a->res2, N * C);
    TAKE(a->ln2, N * C);
    TAKE(a->ln2_mean, N);
    TAKE(a->ln2_rstd, N);
    TAKE(a->fch, N * 4 * Cl);
    TAKE(a->fch_gelu, N * 4 * Cl);
    TAKE(a->res3, N * C);
#undef TAKE
    return p;
}

void gpt_alloc_slots(gpt_model *m, int B, int T, int n_slots) {
    const gpt_config *c = &m->cfg;
    mtCheck(T <= c->seq_len, "sequence length exceeds the model's seq_len");
    mtCheck(n_slots >= 1, "at least one activation slot is needed");
    size_t N = (size_t)B * T, C = c->d_model, V = c->vocab_size;
    size_t Cl = C / c->tp, NH = c->n_head / c->tp; /* local width and heads */
    m->B = B;
    m->T = T;
    /* device memory; on cpu ops_alloc asks for huge pages, faulted now (core/mem.h) */
    if (!m->grads) m->grads = ops_alloc((m->capacity ? m->capacity : 1) * sizeof(float), "grads");
    gpt_rebind(m);
    gpt_free_activations(m);
    size_t slot_floats, scratch_floats;
    gpt_activation_sizes(m, B, T, &slot_floats, &scratch_floats);
    m->n_slots = n_slots;
    m->slots = callocCheck((size_t)n_slots, sizeof(gpt_acts));
    float *p;
#define TAKE(ptr, n) (ptr = p, p += (n))
    for (int s = 0; s < n_slots; s++) {
        gpt_acts *A = &m->slots[s];
        A->mem = ops_alloc(slot_floats * sizeof(float), "activations");
        A->acts = callocCheck((size_t)(m->n_local ? m->n_local : 1), sizeof(gpt_block_acts));
        A->inputs = ops_alloc(3 * N * sizeof(int), "token ids"); /* inputs, targets, pred */
        A->targets = A->inputs + N;
        A->pred = A->inputs + 2 * N;
        p = A->mem;
        TAKE(A->encoded, N * C);
        for (int l = 0; l < m->n_local; l++) {
            gpt_block_acts *a = &A->acts[l];
            if (m->recompute == GPT_RECOMPUTE_FULL) { /* the rest is recomputed in the work copy */
                TAKE(a->res3, N * C);
                continue;
            }
            size_t att = m->recompute == GPT_RECOMPUTE_NONE ? (size_t)B * NH * T * T : 0;
            p = take_block(a, p, N, C, Cl, att); /* selective: att is the shared copy */
        }
        if (m->last) {
            TAKE(A->lnf, N * C);
            TAKE(A->lnf_mean, N);
            TAKE(A->lnf_rstd, N);
            TAKE(A->logits, N * V);
            TAKE(A->losses, N);
        }
        mtCheck((size_t)(p - A->mem) == slot_floats, "activation layout mismatch");
        A->moe = callocCheck((size_t)(m->n_local ? m->n_local : 1), sizeof(struct moe_layer *));
        for (int l = 0; l < m->n_local; l++) {
            if (!m->blocks[l].moe) continue;
            moe_config mc = gpt_moe_config(m);
            char err[256];
            A->moe[l] = moe_create(&mc, (int)N, err, sizeof(err));
            if (!A->moe[l]) mt_fail("MoE layer: %s", err);
        }
    }
    m->logits = m->slots[0].logits;
    m->scratch = ops_alloc(scratch_floats * sizeof(float), "backward scratch");
    p = m->scratch;
    TAKE(m->dres, N * C);
    TAKE(m->dln, N * C);
    TAKE(m->datty, N * Cl);
    TAKE(m->dqkv, N * 3 * Cl);
    TAKE(m->datt, (size_t)B * NH * T * T);
    TAKE(m->dfch, N * 4 * Cl);
    TAKE(m->dfch_gelu, N * 4 * Cl);
    /* recompute: the one copy of what the blocks' backwards recompute (see gpt_activation_sizes) */
    memset(&m->work, 0, sizeof(m->work));
    if (m->recompute != GPT_RECOMPUTE_NONE) TAKE(m->work.att, (size_t)B * NH * T * T);
    if (m->recompute == GPT_RECOMPUTE_FULL) p = take_block(&m->work, p, N, C, Cl, 0);
    /* every slot's blocks share it: point their recomputed activations there */
    for (int s = 0; s < n_slots; s++)
        for (int l = 0; l < m->n_local; l++) {
            gpt_block_acts *a = &m->slots[s].acts[l];
            if (m->recompute == GPT_RECOMPUTE_SELECTIVE) a->att = m->work.att;
            if (m->recompute == GPT_RECOMPUTE_FULL) {
                float *res3 = a->res3;
                *a = m->work;
                a->res3 = res3;
            }
        }
#undef TAKE
    mtCheck((size_t)(p - m->scratch) == scratch_floats, "scratch layout mismatch");
}

void gpt_alloc_training(gpt_model *m, int B, int T) { gpt_alloc_slots(m, B, T, 1); }

/* dst (n) = 0 with the OpenMP threads: one core's memset does not reach the memory bandwidth
 * on 498 MB of gradients. Same bytes as one memset. */
static void zero_floats(float *dst, size_t n) {
    const size_t chunk = (size_t)1 << 18; /* 1 MiB of floats per piece */
    const long pieces = (long)((n + chunk - 1) / chunk);
#pragma omp parallel for if (pieces > 4) schedule(static)
    for (long i = 0; i < pieces; i++) {
        const size_t a = (size_t)i * chunk, b = a + chunk < n ? a + chunk : n;
        memset(dst + a, 0, (b - a) * sizeof(float));
    }
}

void gpt_zero_grad(gpt_model *m) {
    if (!m->grads) return;
    if (ops_is_device(m->grads)) PROF(PROF_ZERO_GRAD, ops_zero(m->grads, m->num_params * sizeof(float)));
    else PROF(PROF_ZERO_GRAD, zero_floats(m->grads, m->num_params));
}

/* ---- forward -------------------------------------------------------------------------------- */

/* Row-parallel linear + g: out (N, C) = Σ_tp inp_local (N, Cin_l) @ w_localᵀ, then + bias. */
static void row_parallel_forward(const gpt_model *m, float *out, const float *inp, const float *w,
                                 const float *bias, int N, int Cin_l, int C, prof_kind k) {
    if (m->cfg.tp == 1) {
        PROF(k, ops_matmul_forward(out, inp, w, bias, N, Cin_l, C));
        return;
    }
    PROF(k, ops_matmul_forward(out, inp, w, NULL, N, Cin_l, C));
    tp_g_forward(m->tp_comm, out, (size_t)N * C);
    ops_bias_add(out, bias, N, C); /* once, after the all-reduce of the partial products */
}

static gpt_acts *slot_of(gpt_model *m, int slot) {
    mtCheck(m->slots != NULL && slot >= 0 && slot < m->n_slots,
            "gpt_alloc_slots must size activations before a forward (slot out of range)");
    return &m->slots[slot];
}

float *gpt_stage_input(gpt_model *m, int slot) { return slot_of(m, slot)->encoded; }

const float *gpt_stage_output(const gpt_model *m, int slot) {
    const gpt_acts *A = &m->slots[slot];
    return m->n_local ? A->acts[m->n_local - 1].res3 : A->encoded;
}

/* Add one MoE block's forward statistics to m->moe_stats and its row of m->moe_load. */
static void record_moe_stats(gpt_model *m, int l, const moe_stats *st) {
    gpt_moe_stats *ms = &m->moe_stats;
    ms->aux_loss += st->aux_loss;
    ms->z_loss += st->z_loss;
    ms->dropped += st->dropped;
    if (ms->layers == 0 || st->tokens_min < ms->tokens_min) ms->tokens_min = st->tokens_min;
    if (st->tokens_max > ms->tokens_max) ms->tokens_max = st->tokens_max;
    if (st->tokens_cv > ms->tokens_cv) ms->tokens_cv = st->tokens_cv;
    ms->layers++;
    if (m->moe_load) { /* per-layer expert load (model/model.h) */
        int E = m->cfg.n_experts;
        double *row = m->moe_load + (size_t)l * (E + 1);
        for (int e = 0; e < E; e++) row[e] += st->tokens_per_expert[e];
        row[E] += st->dropped;
    }
}

/* The layer hook (model/model.h), when one is set. */
static void layer_event(gpt_model *m, int l, gpt_layer_event ev) {
    if (m->layer_hook) m->layer_hook(m->layer_hook_user, l, ev);
}

/* Block l's forward from its input x (N, C) into the activations a (the block's own, or the
 * recompute work copy); moe is the block's MoE state (NULL for a dense block). record = 1 adds a
 * MoE block's statistics to m->moe_stats and m->moe_load (0 for a recomputation, which must not
 * count twice). */
static void block_forward(gpt_model *m, int l, gpt_block_acts *a, moe_layer *moe, const float *x,
                          int B, int T, int record) {
    const gpt_config *c = &m->cfg;
    const gpt_block *w = &m->blocks[l];
    int C = c->d_model, N = B * T;
    int Cl = C / c->tp, NHl = c->n_head / c->tp, HS = C / c->n_head; /* local width, heads */
    PROF(PROF_LN_FWD, ops_layernorm_forward(a->ln1, a->ln1_mean, a->ln1_rstd, x, w->ln1w,
                                            w->ln1b, N, C));
    /* f (identity forward), then column-parallel qkv: this rank's heads only */
    PROF(PROF_MM_QKV_FWD, ops_matmul_forward(a->qkv, a->ln1, w->qkvw, w->qkvb, N, C,
                                             3 * Cl)); // (N, 3, NHl, HS)
    PROF(PROF_ATTN_FWD, ops_attention_forward(a->atty, a->att, a->qkv, B, T, NHl, HS)); // (N, Cl)
    row_parallel_forward(m, a->res2, a->atty, w->attprojw, w->attprojb, N, Cl, C,
                         PROF_MM_ATTPROJ_FWD); // g
    PROF(PROF_RESIDUAL, ops_add_inplace(a->res2, x, (size_t)N * C)); // residual
    PROF(PROF_LN_FWD, ops_layernorm_forward(a->ln2, a->ln2_mean, a->ln2_rstd, a->res2,
                                            w->ln2w, w->ln2b, N, C));
    if (w->moe) { /* mixture of experts, replicated over TP (model/moe.h) */
        moe_params mp = {w->router_w, w->efc_w, w->efc_b, w->eproj_w, w->eproj_b};
        moe_stats st;
        moe_forward(moe, &mp, a->ln2, a->res3, N, &st);
        if (record) record_moe_stats(m, l, &st);
    } else {
        PROF(PROF_MM_FC_FWD, ops_matmul_forward(a->fch, a->ln2, w->fcw, w->fcb, N, C,
                                                4 * Cl)); // (N, 4Cl)
        PROF(PROF_GELU_FWD, ops_gelu_forward(a->fch_gelu, a->fch, (size_t)N * 4 * Cl));
        row_parallel_forward(m, a->res3, a->fch_gelu, w->fcprojw, w->fcprojb, N, 4 * Cl, C,
                             PROF_MM_FCPROJ_FWD);
    }
    PROF(PROF_RESIDUAL, ops_add_inplace(a->res3, a->res2, (size_t)N * C)); // residual
}

double gpt_stage_forward(gpt_model *m, int slot, const int *inputs, const int *targets, int B,
                         int T, float dloss, int *n_counted) {
    return gpt_stage_forward_ex(m, slot, inputs, targets, B, T, dloss, NULL, n_counted);
}

double gpt_stage_forward_ex(gpt_model *m, int slot, const int *inputs, const int *targets, int B,
                            int T, float dloss, const gpt_probe *probe, int *n_counted) {
    const gpt_config *c = &m->cfg;
    gpt_acts *A = slot_of(m, slot);
    mtCheck(B <= m->B && T <= m->T, "microbatch larger than the activations were sized for");
    mtCheck(c->tp == 1 || m->tp_comm != NULL, "tensor-parallel model without a TP communicator");
    /* A smaller (B, T) uses a prefix of each buffer with its own strides, which is consistent
     * because every op takes B and T. */
    int C = c->d_model, V = c->vocab_size, N = B * T;
    A->B = B;
    A->T = T;
    A->dloss = dloss;
    if (m->first) {
        for (int i = 0; i < N; i++)
            mtCheck(inputs[i] >= 0 && inputs[i] < V, "token id out of vocabulary range");
        ops_copy_h2d(A->inputs, inputs, (size_t)N * sizeof(int)); /* the loader's ids, in */
        PROF(PROF_RESIDUAL, ops_encoder_forward(A->encoded, A->inputs, m->wte, m->wpe, B, T, C));
        /* a perturbation of the token-embedding rows: (wte[tok] + wpe[t]) + delta; the host's
         * delta goes through dln, backward scratch that is free during a forward */
        if (probe && probe->delta) {
            ops_copy_h2d(m->dln, probe->delta, (size_t)N * C * sizeof(float));
            ops_add_inplace(A->encoded, m->dln, (size_t)N * C);
        }
    }
    const float *x = A->encoded;
    for (int l = 0; l < m->n_local; l++) {
        layer_event(m, l, GPT_LAYER_BEFORE_FORWARD);
        block_forward(m, l, &A->acts[l], A->moe ? A->moe[l] : NULL, x, B, T, 1);
        layer_event(m, l, GPT_LAYER_AFTER_FORWARD);
        x = A->acts[l].res3;
    }
    if (n_counted) *n_counted = 0;
    if (!m->last) return 0.0;
    PROF(PROF_LN_FWD, ops_layernorm_forward(A->lnf, A->lnf_mean, A->lnf_rstd, x, m->lnfw, m->lnfb,
                                            N, C));
    PROF(PROF_MM_HEAD_FWD, ops_matmul_forward(A->logits, A->lnf, m->wte, NULL, N, C, V)); // (N, V)
    if (probe && probe->pred) { /* before the loss overwrites the logits */
        ops_argmax_rows(A->pred, A->logits, N, V);
        ops_copy_d2h(probe->pred, A->pred, (size_t)N * sizeof(int));
    }
    if (!targets) return 0.0;
    ops_copy_h2d(A->targets, targets, (size_t)N * sizeof(int));
    double sum;
    PROF(PROF_SOFTMAX_LOSS, sum = ops_softmax_crossentropy(A->logits, A->losses, A->targets, N, V,
                                                           dloss));
    if (probe && probe->losses) ops_copy_d2h(probe->losses, A->losses, (size_t)N * sizeof(float));
    if (n_counted)
        for (int i = 0; i < N; i++) *n_counted += targets[i] >= 0;
    return sum;
}

float gpt_forward(gpt_model *m, const int *inputs, const int *targets, int B, int T, float dloss) {
    mtCheck(m->first && m->last, "gpt_forward runs a whole model; pipeline stages use "
                                 "gpt_stage_forward");
    int counted = 0;
    double sum = gpt_stage_forward(m, 0, inputs, targets, B, T, dloss, &counted);
    m->logits = m->slots[0].logits;
    return targets && counted ? (float)(sum / counted) : NAN;
}

/* ---- backward ------------------------------------------------------------------------------- */

static void grads_ready(gpt_model *m, size_t offset) {
    if (m->grads_ready) m->grads_ready(m->grads_ready_user, offset);
}

/* Before block l's backward (slot A, block input x_in (N, C)): put back what the forward did not
 * keep. selective: the attention probabilities att (B, NHl, T, T) from the kept qkv, its output
 * going to datty (scratch, zeroed before its use); full: the whole block forward into the work
 * copy, MoE statistics not recorded again. The same ops on the same inputs, so the backward sees
 * the same bytes as without recompute. */
static void recompute_block(gpt_model *m, gpt_acts *A, int l, const float *x_in) {
    const gpt_config *c = &m->cfg;
    int B = A->B, T = A->T, NHl = c->n_head / c->tp, HS = c->d_model / c->n_head;
    if (m->recompute == GPT_RECOMPUTE_SELECTIVE) {
        gpt_block_acts *a = &A->acts[l];
        PROF(PROF_ATTN_FWD, ops_attention_forward(m->datty, a->att, a->qkv, B, T, NHl, HS));
    } else if (m->recompute == GPT_RECOMPUTE_FULL) {
        block_forward(m, l, &m->work, A->moe ? A->moe[l] : NULL, x_in, B, T, 0); /* ops: PROF'd */
    }
}

/* The backward of one stage and slot. params = 1: the training backward (parameter gradients
 * accumulated into m->grads, grads_ready called, MoE auxiliary losses included). params = 0: the
 * input gradient only — every parameter-gradient pointer is NULL, so m->grads is never read or
 * written, and the MoE auxiliary losses contribute nothing (aux_grad 0). Both leave the gradient
 * w.r.t. the stage input (first stage: the embedding output) in m->dres. */
static void stage_backward(gpt_model *m, int slot, const float *dout, int params) {
    const gpt_config *c = &m->cfg;
    gpt_acts *A = slot_of(m, slot);
    int B = A->B, T = A->T;
    int C = c->d_model, V = c->vocab_size, N = B * T;
    int Cl = C / c->tp, NHl = c->n_head / c->tp, HS = C / c->n_head;
    size_t NC = (size_t)N * C;
    if (m->last) {
        mtCheck(A->dloss != 0.0f, "backward needs a forward with dloss != 0 and targets");
        const float *x_last = m->n_local ? A->acts[m->n_local - 1].res3 : A->encoded;
        /* head: logits = lnf @ wteᵀ; A->logits holds dlogits now */
        PROF(PROF_RESIDUAL, ops_zero(m->dln, NC * sizeof(float)));
        PROF(PROF_MM_HEAD_BWD, ops_matmul_backward(m->dln, params ? m->dwte : NULL, NULL,
                                                   A->logits, A->lnf, m->wte, N, C, V));
        PROF(PROF_RESIDUAL, ops_zero(m->dres, NC * sizeof(float)));
        PROF(PROF_LN_BWD, ops_layernorm_backward(m->dres, params ? m->dlnfw : NULL,
                                                 params ? m->dlnfb : NULL, m->dln, x_last,
                                                 m->lnfw, A->lnf_mean, A->lnf_rstd, N, C));
        if (params) grads_ready(m, m->tensors[m->i_lnf].offset); /* ln_f is final */
    } else {
        mtCheck(dout != NULL, "a non-last pipeline stage needs the gradient of its output");
        comm_copy(m->dres, dout, NC * sizeof(float)); /* dout: device, or a host buffer */
    }
    gpt_block none; /* input gradient only: no parameter gradient anywhere */
    memset(&none, 0, sizeof(none));
    for (int l = m->n_local - 1; l >= 0; l--) {
        const gpt_block *w = &m->blocks[l];
        gpt_block *g = params ? &m->dblocks[l] : &none;
        gpt_block_acts *a = &A->acts[l];
        const float *x_in = l ? A->acts[l - 1].res3 : A->encoded;
        layer_event(m, l, GPT_LAYER_BEFORE_BACKWARD);
        recompute_block(m, A, l, x_in);
        PROF(PROF_RESIDUAL, ops_zero(m->dln, NC * sizeof(float)));
        if (w->moe) { /* replicated over TP: dln is already complete on every TP rank */
            moe_params mp = {w->router_w, w->efc_w, w->efc_b, w->eproj_w, w->eproj_b};
            moe_params mg = {g->router_w, g->efc_w, g->efc_b, g->eproj_w, g->eproj_b};
            moe_backward(A->moe[l], &mp, params ? &mg : NULL, m->dres, m->dln,
                         params ? m->aux_grad : 0.0f);
        } else {
            /* MLP: res3 = res2 + fcproj(gelu(fc(ln2(res2)))); dres holds d res3 (g: identity) */
            PROF(PROF_RESIDUAL, ops_zero(m->dfch_gelu, (size_t)N * 4 * Cl * sizeof(float)));
            PROF(PROF_MM_FCPROJ_BWD, ops_matmul_backward(m->dfch_gelu, g->fcprojw, g->fcprojb,
                                                         m->dres, a->fch_gelu, w->fcprojw, N,
                                                         4 * Cl, C));
            PROF(PROF_RESIDUAL, ops_zero(m->dfch, (size_t)N * 4 * Cl * sizeof(float)));
            PROF(PROF_GELU_BWD, ops_gelu_backward(m->dfch, a->fch, m->dfch_gelu,
                                                  (size_t)N * 4 * Cl));
            PROF(PROF_MM_FC_BWD, ops_matmul_backward(m->dln, g->fcw, g->fcb, m->dfch, a->ln2,
                                                     w->fcw, N, C, 4 * Cl));
            tp_f_backward(m->tp_comm, m->dln, NC); /* f: sum the partial input gradients */
        }
        PROF(PROF_LN_BWD, ops_layernorm_backward(m->dres, g->ln2w, g->ln2b, m->dln, a->res2,
                                                 w->ln2w, a->ln2_mean, a->ln2_rstd, N,
                                                 C)); // dres = d res2
        /* attention: res2 = x + proj(attn(qkv(ln1(x)))) */
        PROF(PROF_RESIDUAL, ops_zero(m->datty, (size_t)N * Cl * sizeof(float)));
        PROF(PROF_MM_ATTPROJ_BWD, ops_matmul_backward(m->datty, g->attprojw, g->attprojb,
                                                      m->dres, a->atty, w->attprojw, N, Cl, C));
        PROF(PROF_RESIDUAL, ops_zero(m->dqkv, (size_t)N * 3 * Cl * sizeof(float)));
        PROF(PROF_ATTN_BWD, ops_attention_backward(m->dqkv, m->datt, m->datty, a->qkv, a->att, B,
                                                   T, NHl, HS));
        PROF(PROF_RESIDUAL, ops_zero(m->dln, NC * sizeof(float)));
        PROF(PROF_MM_QKV_BWD, ops_matmul_backward(m->dln, g->qkvw, g->qkvb, m->dqkv, a->ln1,
                                                  w->qkvw, N, C, 3 * Cl));
        tp_f_backward(m->tp_comm, m->dln, NC); /* f */
        PROF(PROF_LN_BWD, ops_layernorm_backward(m->dres, g->ln1w, g->ln1b, m->dln, x_in, w->ln1w,
                                                 a->ln1_mean, a->ln1_rstd, N, C)); // dres = d x
        layer_event(m, l, GPT_LAYER_AFTER_BACKWARD);
        if (params) grads_ready(m, m->tensors[m->block_t0[l]].offset); /* block l is final */
    }
    if (!m->first || !params) return; /* dres: gradient of the stage input */
    PROF(PROF_RESIDUAL, ops_encoder_backward(m->dwte, m->dwpe, m->dres, A->inputs, B, T, C));
    grads_ready(m, 0);
}

const float *gpt_stage_backward(gpt_model *m, int slot, const float *dout) {
    stage_backward(m, slot, dout, 1);
    return m->first ? NULL : m->dres; /* the first stage ran the embedding backward itself */
}

const float *gpt_stage_backward_input(gpt_model *m, int slot, const float *dout) {
    stage_backward(m, slot, dout, 0);
    return m->dres;
}

const float *gpt_embed_grad(const gpt_model *m) {
    mtCheck(m->first, "gpt_embed_grad: only the first pipeline stage holds the embeddings");
    return m->dres;
}

void gpt_backward(gpt_model *m) { gpt_stage_backward(m, 0, NULL); }

moe_config gpt_moe_config(const gpt_model *m) {
    const gpt_config *c = &m->cfg;
    moe_config mc = {.C = c->d_model, .H = 4 * c->d_model, .E = c->n_experts, .top_k = c->top_k,
                     .capacity_factor = c->capacity_factor, .aux_coef = c->aux_coef,
                     .z_coef = c->z_coef, .ep = m->ep_comm};
    return mc;
}
