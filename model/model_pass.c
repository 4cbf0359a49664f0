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
#include "parallel/sp.h"
#include "parallel/tp.h"
#include "model/model.h"
#include "model/moe.h"
#include "model/ring_attention.h"
#include "ops/ops.h"
#include "ops/prof.h"

/* ---- activations ---------------------------------------------------------------------------- */

/* Floats of one block's activations for N = B·T rows, split by what recompute keeps: att is the
 * (B, NHl, T, T·cp) attention probabilities, rest everything else but the block output res3
 * (Nl, C); Nl = N/tp rows of the sequence-local regions with sp, N without. */
static void block_sizes(const gpt_model *m, int B, int T, size_t *att, size_t *rest) {
    const gpt_config *c = &m->cfg;
    size_t N = (size_t)B * T, C = c->d_model;
    size_t Cl = C / c->tp, NHl = c->n_head / c->tp; /* this rank's width and heads */
    size_t Nl = c->sp ? N / c->tp : N; /* rows of the sequence-local regions (parallel/sp.h) */
    *att = (size_t)B * NHl * T * T * (c->cp > 1 ? c->cp : 1); /* keys: all T·cp */
    *rest = Nl * C /*ln1*/ + 2 * Nl + N * 3 * Cl /*qkv*/ + N * Cl /*atty*/ + Nl * C /*res2*/ +
            Nl * C /*ln2*/ + 2 * Nl + N * 4 * Cl * 2 /*fch*/;
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
    size_t Nl = c->sp ? N / c->tp : N; /* rows of the sequence-local regions (parallel/sp.h) */
    block_sizes(m, B, T, &att, &rest);
    size_t kept = m->recompute == GPT_RECOMPUTE_FULL        ? Nl * C
                  : m->recompute == GPT_RECOMPUTE_SELECTIVE ? rest + Nl * C
                                                            : rest + att + Nl * C;
    *slot = Nl * C + (size_t)m->chunk_layers * kept +
            (m->last ? Nl * C + 2 * Nl + Nl * V + Nl : 0);
    *scratch = N * C * 2 /*dres, dln*/ + N * Cl /*datty*/ + N * 3 * Cl + att + N * 4 * Cl * 2 +
               (c->sp ? 2 * N * C : 0) /*sp_full, sp_work*/;
    if (m->recompute == GPT_RECOMPUTE_SELECTIVE) *scratch += att;
    if (m->recompute == GPT_RECOMPUTE_FULL) *scratch += rest + att + Nl * C;
}

size_t gpt_activation_floats(const gpt_model *m, int B, int T) {
    size_t slot, scratch;
    gpt_activation_sizes(m, B, T, &slot, &scratch);
    return slot * (size_t)(m->n_slots > 0 ? m->n_slots : 1) + scratch;
}

size_t gpt_activation_floats_whole_sequence(const gpt_model *m, int B, int T) {
    gpt_model one = *m; /* activation_sizes reads the config and the stage's shape only */
    one.cfg.cp = 1, one.cfg.cp_rank = 0, one.cfg.sp = 0;
    return gpt_activation_floats(&one, B, T);
}

void gpt_free_activations(gpt_model *m) {
    for (int i = 0; i < m->n_slots; i++) {
        for (int l = 0; m->slots[i].moe && l < m->chunk_layers; l++)
            if (m->slots[i].moe[l]) moe_free(m->slots[i].moe[l]);
        free(m->slots[i].moe);
        ops_free(m->slots[i].kept_mem); /* gpt_alloc_split's, when the backward is split */
        free(m->slots[i].kept);
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
 * else left as it is): N rows (Nl of them in the sequence-local regions, parallel/sp.h), width
 * C, local width Cl. Returns the float after the last. */
static float *take_block(gpt_block_acts *a, float *p, size_t N, size_t Nl, size_t C, size_t Cl,
                         size_t att_floats) {
#define TAKE(ptr, n) (ptr = p, p += (n))
    TAKE(a->ln1, Nl * C);
    TAKE(a->ln1_mean, Nl);
    TAKE(a->ln1_rstd, Nl);
    TAKE(a->qkv, N * 3 * Cl);
    TAKE(a->atty, N * Cl);
    if (att_floats) TAKE(a->att, att_floats);
    TAKE(a->res2, Nl * C);
    TAKE(a->ln2, Nl * C);
    TAKE(a->ln2_mean, Nl);
    TAKE(a->ln2_rstd, Nl);
    TAKE(a->fch, N * 4 * Cl);
    TAKE(a->fch_gelu, N * 4 * Cl);
    TAKE(a->res3, Nl * C);
#undef TAKE
    return p;
}

void gpt_alloc_slots(gpt_model *m, int B, int T, int n_slots) {
    const gpt_config *c = &m->cfg;
    mtCheck(T <= c->seq_len, "sequence length exceeds the model's seq_len");
    mtCheck(n_slots >= 1, "at least one activation slot is needed");
    size_t N = (size_t)B * T, C = c->d_model, V = c->vocab_size;
    size_t Cl = C / c->tp, NH = c->n_head / c->tp; /* local width and heads */
    mtCheck(!c->sp || (c->tp > 1 && T % c->tp == 0), "sequence parallelism needs tp > 1 dividing T");
    size_t Nl = c->sp ? N / c->tp : N; /* sequence-local rows */
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
        A->acts = callocCheck((size_t)(m->chunk_layers ? m->chunk_layers : 1), sizeof(gpt_block_acts));
        A->inputs = ops_alloc(3 * N * sizeof(int), "token ids"); /* inputs, targets, pred */
        A->targets = A->inputs + N;
        A->pred = A->inputs + 2 * N;
        p = A->mem;
        TAKE(A->encoded, Nl * C);
        for (int l = 0; l < m->chunk_layers; l++) { /* one chunk's layers (all, with one) */
            gpt_block_acts *a = &A->acts[l];
            if (m->recompute == GPT_RECOMPUTE_FULL) { /* the rest is recomputed in the work copy */
                TAKE(a->res3, Nl * C);
                continue;
            }
            size_t att = m->recompute == GPT_RECOMPUTE_NONE
                             ? (size_t)B * NH * T * T * (c->cp > 1 ? c->cp : 1) : 0;
            p = take_block(a, p, N, Nl, C, Cl, att); /* selective: att is the shared copy */
        }
        if (m->last) {
            TAKE(A->lnf, Nl * C);
            TAKE(A->lnf_mean, Nl);
            TAKE(A->lnf_rstd, Nl);
            TAKE(A->logits, Nl * V);
            TAKE(A->losses, Nl);
        }
        mtCheck((size_t)(p - A->mem) == slot_floats, "activation layout mismatch");
        A->moe = callocCheck((size_t)(m->chunk_layers ? m->chunk_layers : 1), sizeof(struct moe_layer *));
        for (int l = 0; l < m->chunk_layers; l++) {
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
    TAKE(m->datt, (size_t)B * NH * T * T * (c->cp > 1 ? c->cp : 1));
    TAKE(m->dfch, N * 4 * Cl);
    TAKE(m->dfch_gelu, N * 4 * Cl);
    m->sp_full = m->sp_work = NULL;
    if (c->sp) {
        TAKE(m->sp_full, N * C);
        TAKE(m->sp_work, N * C);
    }
    /* recompute: the one copy of what the blocks' backwards recompute (see gpt_activation_sizes;
     * refused with cp, sp and the chunked schedules, train/trainer_setup.c) */
    memset(&m->work, 0, sizeof(m->work));
    if (m->recompute != GPT_RECOMPUTE_NONE)
        TAKE(m->work.att, (size_t)B * NH * T * T * (c->cp > 1 ? c->cp : 1));
    if (m->recompute == GPT_RECOMPUTE_FULL) p = take_block(&m->work, p, N, Nl, C, Cl, 0);
    /* every slot's blocks share it: point their recomputed activations there */
    for (int s = 0; s < n_slots; s++)
        for (int l = 0; l < m->chunk_layers; l++) {
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

/* Row-parallel linear + g: out (N, C) = Σ_tp inp_local (N, Cin_l) @ w_localᵀ, then + bias,
 * N = B·T. Sequence parallel: g is a reduce-scatter and out is this rank's rows (B, T/tp, C). */
static void row_parallel_forward(const gpt_model *m, float *out, const float *inp, const float *w,
                                 const float *bias, int B, int T, int Cin_l, int C, prof_kind k) {
    const int N = B * T;
    if (m->cfg.tp == 1) {
        PROF(k, ops_matmul_forward(out, inp, w, bias, N, Cin_l, C));
        return;
    }
    if (m->cfg.sp) { /* partial products of every row, then each rank keeps its own rows summed */
        PROF(k, ops_matmul_forward(m->sp_full, inp, w, NULL, N, Cin_l, C));
        sp_reduce_scatter(m->tp_comm, m->sp_full, out, m->sp_work, B, T, C);
        ops_bias_add(out, bias, N / m->cfg.tp, C);
        return;
    }
    PROF(k, ops_matmul_forward(out, inp, w, NULL, N, Cin_l, C));
    tp_g_forward(m->tp_comm, out, (size_t)N * C);
    ops_bias_add(out, bias, N, C); /* once, after the all-reduce of the partial products */
}

/* f under sequence parallelism: the whole (B, T, C) from every rank's rows of `local` into
 * m->sp_full (returned); without sp, local itself (f is the identity forward). */
static const float *sp_gather(gpt_model *m, const float *local, int B, int T) {
    if (!m->cfg.sp) return local;
    sp_all_gather(m->tp_comm, local, m->sp_full, m->sp_work, B, T, m->cfg.d_model);
    return m->sp_full;
}

/* The backward of f: the input gradient dln (B, T, C), partial over the TP group, summed —
 * all-reduced in place (returned), or with sp reduce-scattered to this rank's rows in m->sp_work
 * (returned). */
static const float *f_backward(gpt_model *m, float *dln, int B, int T) {
    if (!m->cfg.sp) {
        tp_f_backward(m->tp_comm, dln, (size_t)B * T * m->cfg.d_model);
        return dln;
    }
    sp_reduce_scatter(m->tp_comm, dln, m->sp_work, m->sp_full, B, T, m->cfg.d_model);
    return m->sp_work;
}

/* The embedding of this rank's rows: ids (B, T) on the device; with sp, positions
 * [tp_rank·T/tp, ...) of each sequence, else the whole (B, T) (cp: ring_attention's). */
static void embed_forward(gpt_model *m, float *out, const int *ids, int B, int T) {
    const gpt_config *c = &m->cfg;
    const int C = c->d_model;
    if (c->sp) {
        const int Tl = T / c->tp, t0 = c->tp_rank * Tl;
        for (int b = 0; b < B; b++)
            ops_encoder_forward(out + (size_t)b * Tl * C, ids + (size_t)b * T + t0, m->wte,
                                m->wpe + (size_t)t0 * C, 1, Tl, C);
    } else if (c->cp > 1) { /* this shard's positions (parallel/cp.h) */
        ring_attention_embed_forward(out, ids, m->wte, m->wpe, B, T, C, c->cp, c->cp_rank);
    } else {
        ops_encoder_forward(out, ids, m->wte, m->wpe, B, T, C);
    }
}

static void embed_backward(gpt_model *m, const float *dout, const int *ids, int B, int T) {
    const gpt_config *c = &m->cfg;
    const int C = c->d_model;
    if (c->sp) {
        const int Tl = T / c->tp, t0 = c->tp_rank * Tl;
        for (int b = 0; b < B; b++)
            ops_encoder_backward(m->dwte, m->dwpe + (size_t)t0 * C, dout + (size_t)b * Tl * C,
                                 ids + (size_t)b * T + t0, 1, Tl, C);
    } else if (c->cp > 1) {
        ring_attention_embed_backward(m->dwte, m->dwpe, dout, ids, B, T, C, c->cp, c->cp_rank);
    } else {
        ops_encoder_backward(m->dwte, m->dwpe, dout, ids, B, T, C);
    }
}

void gpt_sp_reduce_grads(gpt_model *m) {
    if (!m->cfg.sp || !m->grads) return;
    const size_t C = m->cfg.d_model;
    for (int l = 0; l < m->n_local; l++) {
        gpt_block *g = &m->dblocks[l];
        float *ln[4] = {g->ln1w, g->ln1b, g->ln2w, g->ln2b};
        for (int i = 0; i < 4; i++) comm_all_reduce(m->tp_comm, ln[i], C, COMM_SUM);
    }
    if (m->last) {
        comm_all_reduce(m->tp_comm, m->dlnfw, C, COMM_SUM);
        comm_all_reduce(m->tp_comm, m->dlnfb, C, COMM_SUM);
    }
    if (m->i_wte >= 0) comm_all_reduce(m->tp_comm, m->dwte, m->tensors[m->i_wte].numel, COMM_SUM);
    if (m->i_wpe >= 0) comm_all_reduce(m->tp_comm, m->dwpe, m->tensors[m->i_wpe].numel, COMM_SUM);
}

static gpt_acts *slot_of(gpt_model *m, int slot) {
    mtCheck(m->slots != NULL && slot >= 0 && slot < m->n_slots,
            "gpt_alloc_slots must size activations before a forward (slot out of range)");
    return &m->slots[slot];
}

static double chunk_forward(gpt_model *m, int slot, int chunk, const int *inputs,
                            const int *targets, int B, int T, float dloss, const gpt_probe *probe,
                            int *n_counted);

float *gpt_stage_input(gpt_model *m, int slot) { return slot_of(m, slot)->encoded; }

const float *gpt_stage_output(const gpt_model *m, int slot) { return gpt_chunk_output(m, slot); }

const float *gpt_chunk_output(const gpt_model *m, int slot) {
    const gpt_acts *A = &m->slots[slot];
    return m->chunk_layers ? A->acts[m->chunk_layers - 1].res3 : A->encoded;
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
    int Nl = c->sp ? N / c->tp : N; /* rows of the residual stream on this rank */
    PROF(PROF_LN_FWD, ops_layernorm_forward(a->ln1, a->ln1_mean, a->ln1_rstd, x, w->ln1w,
                                            w->ln1b, Nl, C));
    /* f (identity forward; sp: all-gather), then column-parallel qkv: this rank's heads */
    PROF(PROF_MM_QKV_FWD, ops_matmul_forward(a->qkv, sp_gather(m, a->ln1, B, T), w->qkvw,
                                             w->qkvb, N, C, 3 * Cl)); // (N, 3, NHl, HS)
    if (c->cp > 1) /* the sequence is split over the ring */
        PROF(PROF_ATTN_FWD, ring_attention_forward(m->cp_comm, a->atty, a->att, a->qkv, B, T,
                                                   NHl, HS));
    else
        PROF(PROF_ATTN_FWD, ops_attention_forward(a->atty, a->att, a->qkv, B, T, NHl, HS)); // (N, Cl)
    row_parallel_forward(m, a->res2, a->atty, w->attprojw, w->attprojb, B, T, Cl, C,
                         PROF_MM_ATTPROJ_FWD); // g
    PROF(PROF_RESIDUAL, ops_add_inplace(a->res2, x, (size_t)Nl * C)); // residual
    PROF(PROF_LN_FWD, ops_layernorm_forward(a->ln2, a->ln2_mean, a->ln2_rstd, a->res2,
                                            w->ln2w, w->ln2b, Nl, C));
    if (w->moe) { /* mixture of experts, replicated over TP (model/moe.h) */
        moe_params mp = {w->router_w, w->efc_w, w->efc_b, w->eproj_w, w->eproj_b};
        moe_stats st;
        moe_forward(moe, &mp, a->ln2, a->res3, N, &st);
        if (record) record_moe_stats(m, l, &st);
    } else {
        PROF(PROF_MM_FC_FWD, ops_matmul_forward(a->fch, sp_gather(m, a->ln2, B, T), w->fcw,
                                                w->fcb, N, C, 4 * Cl)); // (N, 4Cl)
        PROF(PROF_GELU_FWD, ops_gelu_forward(a->fch_gelu, a->fch, (size_t)N * 4 * Cl));
        row_parallel_forward(m, a->res3, a->fch_gelu, w->fcprojw, w->fcprojb, B, T, 4 * Cl, C,
                             PROF_MM_FCPROJ_FWD);
    }
    PROF(PROF_RESIDUAL, ops_add_inplace(a->res3, a->res2, (size_t)Nl * C)); // residual
}

double gpt_stage_forward(gpt_model *m, int slot, const int *inputs, const int *targets, int B,
                         int T, float dloss, int *n_counted) {
    return gpt_stage_forward_ex(m, slot, inputs, targets, B, T, dloss, NULL, n_counted);
}

double gpt_stage_forward_ex(gpt_model *m, int slot, const int *inputs, const int *targets, int B,
                            int T, float dloss, const gpt_probe *probe, int *n_counted) {
    mtCheck(m->cfg.n_chunks <= 1, "a model of several chunks runs gpt_chunk_forward");
    return chunk_forward(m, slot, 0, inputs, targets, B, T, dloss, probe, n_counted);
}

double gpt_chunk_forward(gpt_model *m, int slot, int chunk, const int *inputs, const int *targets,
                         int B, int T, float dloss, int *n_counted) {
    return chunk_forward(m, slot, chunk, inputs, targets, B, T, dloss, NULL, n_counted);
}

/* The forward of chunk `chunk` of this stage (the whole stage with one chunk) into the slot. */
static double chunk_forward(gpt_model *m, int slot, int chunk, const int *inputs,
                            const int *targets, int B, int T, float dloss, const gpt_probe *probe,
                            int *n_counted) {
    const gpt_config *c = &m->cfg;
    const int nch = c->n_chunks > 1 ? c->n_chunks : 1, l0 = chunk * m->chunk_layers;
    const int first = m->first && chunk == 0, last = m->last && chunk == nch - 1;
    mtCheck(chunk >= 0 && chunk < nch, "model chunk out of range");
    gpt_acts *A = slot_of(m, slot);
    mtCheck(B <= m->B && T <= m->T, "microbatch larger than the activations were sized for");
    mtCheck(c->tp == 1 || m->tp_comm != NULL, "tensor-parallel model without a TP communicator");
    mtCheck(c->cp <= 1 || m->cp_comm != NULL, "context-parallel model without a CP communicator");
    /* A smaller (B, T) uses a prefix of each buffer with its own strides, which is consistent
     * because every op takes B and T. */
    int C = c->d_model, V = c->vocab_size, N = B * T;
    int Nl = c->sp ? N / c->tp : N; /* rows of the residual stream on this rank */
    mtCheck(!c->sp || !probe, "probes (attacks) do not run with sequence parallelism");
    A->B = B;
    A->T = T;
    A->dloss = dloss;
    if (first) {
        for (int i = 0; i < N; i++)
            mtCheck(inputs[i] >= 0 && inputs[i] < V, "token id out of vocabulary range");
        ops_copy_h2d(A->inputs, inputs, (size_t)N * sizeof(int)); /* the loader's ids, in */
        PROF(PROF_RESIDUAL, embed_forward(m, A->encoded, A->inputs, B, T));
        /* a perturbation of the token-embedding rows: (wte[tok] + wpe[t]) + delta; the host's
         * delta goes through dln, backward scratch that is free during a forward */
        if (probe && probe->delta) {
            ops_copy_h2d(m->dln, probe->delta, (size_t)N * C * sizeof(float));
            ops_add_inplace(A->encoded, m->dln, (size_t)N * C);
        }
    }
    const float *x = A->encoded;
    for (int l = 0; l < m->chunk_layers; l++) {
        layer_event(m, l0 + l, GPT_LAYER_BEFORE_FORWARD);
        block_forward(m, l0 + l, &A->acts[l], A->moe ? A->moe[l] : NULL, x, B, T, 1);
        layer_event(m, l0 + l, GPT_LAYER_AFTER_FORWARD);
        x = A->acts[l].res3;
    }
    if (n_counted) *n_counted = 0;
    if (!last) return 0.0;
    PROF(PROF_LN_FWD, ops_layernorm_forward(A->lnf, A->lnf_mean, A->lnf_rstd, x, m->lnfw, m->lnfb,
                                            Nl, C));
    PROF(PROF_MM_HEAD_FWD, ops_matmul_forward(A->logits, A->lnf, m->wte, NULL, Nl, C, V)); // (N, V)
    if (probe && probe->pred) { /* before the loss overwrites the logits */
        ops_argmax_rows(A->pred, A->logits, N, V);
        ops_copy_d2h(probe->pred, A->pred, (size_t)N * sizeof(int));
    }
    if (!targets) return 0.0;
    if (c->sp) { /* this rank's positions of each sequence: the rows of its logits */
        const int Tl = T / c->tp, t0 = c->tp_rank * Tl;
        for (int b = 0; b < B; b++) {
            ops_copy_h2d(A->targets + (size_t)b * Tl, targets + (size_t)b * T + t0,
                         (size_t)Tl * sizeof(int));
            for (int i = 0; n_counted && i < Tl; i++) *n_counted += targets[b * T + t0 + i] >= 0;
        }
    } else {
        ops_copy_h2d(A->targets, targets, (size_t)N * sizeof(int));
        for (int i = 0; n_counted && i < N; i++) *n_counted += targets[i] >= 0;
    }
    double sum;
    PROF(PROF_SOFTMAX_LOSS, sum = ops_softmax_crossentropy(A->logits, A->losses, A->targets, Nl,
                                                           V, dloss));
    if (probe && probe->losses) ops_copy_d2h(probe->losses, A->losses, (size_t)N * sizeof(float));
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

/* Before the backward of the chunk's block l (block l0 + l of the stage; slot A, input x_in): put back what the forward did not
 * keep. selective: the attention probabilities att (B, NHl, T, T) from the kept qkv, its output
 * going to datty (scratch, zeroed before its use); full: the whole block forward into the work
 * copy, MoE statistics not recorded again. The same ops on the same inputs, so the backward sees
 * the same bytes as without recompute. */
static void recompute_block(gpt_model *m, gpt_acts *A, int l0, int l, const float *x_in) {
    const gpt_config *c = &m->cfg;
    int B = A->B, T = A->T, NHl = c->n_head / c->tp, HS = c->d_model / c->n_head;
    if (m->recompute == GPT_RECOMPUTE_SELECTIVE) {
        gpt_block_acts *a = &A->acts[l];
        PROF(PROF_ATTN_FWD, ops_attention_forward(m->datty, a->att, a->qkv, B, T, NHl, HS));
    } else if (m->recompute == GPT_RECOMPUTE_FULL) {
        block_forward(m, l0 + l, &m->work, A->moe ? A->moe[l] : NULL, x_in, B, T, 0); /* PROF'd */
    }
}

/* The backward of one chunk (the whole stage with one chunk) and slot. params = 1: the training
 * backward (parameter gradients accumulated into m->grads, grads_ready called, MoE auxiliary
 * losses included). params = 0: the input gradient only — every parameter-gradient pointer is
 * NULL, so m->grads is never read or written, and the MoE auxiliary losses contribute nothing
 * (aux_grad 0). keep != 0 (with params = 0): B of a split backward, which also copies into the
 * slot's kept buffers the gradient each weight op's W will need (model/model_wgrad.c). All leave
 * the gradient w.r.t. the chunk input (first stage: the embedding output) in m->dres. */
static void stage_backward(gpt_model *m, int slot, int chunk, const float *dout, int params,
                           int keep) {
    const gpt_config *c = &m->cfg;
    gpt_acts *A = slot_of(m, slot);
    int B = A->B, T = A->T;
    int C = c->d_model, V = c->vocab_size, N = B * T;
    int Cl = C / c->tp, NHl = c->n_head / c->tp, HS = C / c->n_head;
    int Nl = c->sp ? N / c->tp : N; /* residual-stream rows on this rank (parallel/sp.h) */
    size_t NC = (size_t)N * C, NCl = (size_t)Nl * C;
    const int nch = c->n_chunks > 1 ? c->n_chunks : 1, l0 = chunk * m->chunk_layers;
    const int first = m->first && chunk == 0, last = m->last && chunk == nch - 1;
    mtCheck(chunk >= 0 && chunk < nch, "model chunk out of range");
    mtCheck(!keep || A->kept, "a split backward needs gpt_alloc_split");
    mtCheck(!keep || (!c->sp && c->cp <= 1), "the split backward (zb-h1) runs without sp and cp");
#define KEEP(dst, src, n) \
    do { if (keep) ops_copy_d2d(dst, src, (size_t)(n) * sizeof(float)); } while (0)
    if (last) {
        mtCheck(A->dloss != 0.0f, "backward needs a forward with dloss != 0 and targets");
        const float *x_last = m->chunk_layers ? A->acts[m->chunk_layers - 1].res3 : A->encoded;
        /* head: logits = lnf @ wteᵀ; A->logits holds dlogits now (and keeps them for W) */
        PROF(PROF_RESIDUAL, ops_zero(m->dln, NCl * sizeof(float)));
        PROF(PROF_MM_HEAD_BWD, ops_matmul_backward(m->dln, params ? m->dwte : NULL, NULL,
                                                   A->logits, A->lnf, m->wte, Nl, C, V));
        KEEP(A->dlnf, m->dln, NCl);
        PROF(PROF_RESIDUAL, ops_zero(m->dres, NCl * sizeof(float)));
        PROF(PROF_LN_BWD, ops_layernorm_backward(m->dres, params ? m->dlnfw : NULL,
                                                 params ? m->dlnfb : NULL, m->dln, x_last,
                                                 m->lnfw, A->lnf_mean, A->lnf_rstd, Nl, C));
        if (params) grads_ready(m, m->tensors[m->i_lnf].offset); /* ln_f is final */
    } else {
        mtCheck(dout != NULL, "a non-last pipeline stage needs the gradient of its output");
        comm_copy(m->dres, dout, NCl * sizeof(float)); /* dout: device, or a host buffer */
    }
    gpt_block none; /* input gradient only: no parameter gradient anywhere */
    memset(&none, 0, sizeof(none));
    for (int l = m->chunk_layers - 1; l >= 0; l--) {
        const gpt_block *w = &m->blocks[l0 + l];
        gpt_block *g = params ? &m->dblocks[l0 + l] : &none;
        gpt_block_acts *a = &A->acts[l];
        gpt_block_kept *k = keep ? &A->kept[l] : NULL;
        const float *x_in = l ? A->acts[l - 1].res3 : A->encoded;
        layer_event(m, l0 + l, GPT_LAYER_BEFORE_BACKWARD);
        recompute_block(m, A, l0, l, x_in);
        PROF(PROF_RESIDUAL, ops_zero(m->dln, NC * sizeof(float)));
        const float *dln = m->dln; /* the LayerNorm's output gradient, this rank's rows */
        if (w->moe) { /* replicated over TP: dln is already complete on every TP rank */
            mtCheck(!keep, "the split backward has no MoE blocks");
            moe_params mp = {w->router_w, w->efc_w, w->efc_b, w->eproj_w, w->eproj_b};
            moe_params mg = {g->router_w, g->efc_w, g->efc_b, g->eproj_w, g->eproj_b};
            moe_backward(A->moe[l], &mp, params ? &mg : NULL, m->dres, m->dln,
                         params ? m->aux_grad : 0.0f);
        } else {
            /* MLP: res3 = res2 + fcproj(gelu(fc(ln2(res2)))); dres holds d res3 (g: identity) */
            KEEP(k->dfcproj, m->dres, NC);
            /* g backward: identity (sp: all-gather of every rank's rows) */
            const float *dres_full = sp_gather(m, m->dres, B, T);
            PROF(PROF_RESIDUAL, ops_zero(m->dfch_gelu, (size_t)N * 4 * Cl * sizeof(float)));
            PROF(PROF_MM_FCPROJ_BWD, ops_matmul_backward(m->dfch_gelu, g->fcprojw, g->fcprojb,
                                                         dres_full, a->fch_gelu, w->fcprojw, N,
                                                         4 * Cl, C));
            PROF(PROF_RESIDUAL, ops_zero(m->dfch, (size_t)N * 4 * Cl * sizeof(float)));
            PROF(PROF_GELU_BWD, ops_gelu_backward(m->dfch, a->fch, m->dfch_gelu,
                                                  (size_t)N * 4 * Cl));
            KEEP(k->dfch, m->dfch, (size_t)N * 4 * Cl);
            /* sp: the input was gathered in the forward and is gathered again (not kept) */
            PROF(PROF_MM_FC_BWD, ops_matmul_backward(m->dln, g->fcw, g->fcb, m->dfch,
                                                     sp_gather(m, a->ln2, B, T), w->fcw, N, C,
                                                     4 * Cl));
            dln = f_backward(m, m->dln, B, T); /* f: sum the partial input gradients */
        }
        KEEP(k->dln2, dln, NC);
        PROF(PROF_LN_BWD, ops_layernorm_backward(m->dres, g->ln2w, g->ln2b, dln, a->res2,
                                                 w->ln2w, a->ln2_mean, a->ln2_rstd, Nl,
                                                 C)); // dres = d res2
        /* attention: res2 = x + proj(attn(qkv(ln1(x)))) */
        KEEP(k->dattproj, m->dres, NC);
        PROF(PROF_RESIDUAL, ops_zero(m->datty, (size_t)N * Cl * sizeof(float)));
        PROF(PROF_MM_ATTPROJ_BWD, ops_matmul_backward(m->datty, g->attprojw, g->attprojb,
                                                      sp_gather(m, m->dres, B, T), a->atty,
                                                      w->attprojw, N, Cl, C));
        PROF(PROF_RESIDUAL, ops_zero(m->dqkv, (size_t)N * 3 * Cl * sizeof(float)));
        if (c->cp > 1)
            PROF(PROF_ATTN_BWD, ring_attention_backward(m->cp_comm, m->dqkv, m->datt, m->datty,
                                                        a->qkv, a->atty, a->att, B, T, NHl, HS));
        else
            PROF(PROF_ATTN_BWD, ops_attention_backward(m->dqkv, m->datt, m->datty, a->qkv, a->att,
                                                       B, T, NHl, HS));
        KEEP(k->dqkv, m->dqkv, (size_t)N * 3 * Cl);
        PROF(PROF_RESIDUAL, ops_zero(m->dln, NC * sizeof(float)));
        PROF(PROF_MM_QKV_BWD, ops_matmul_backward(m->dln, g->qkvw, g->qkvb, m->dqkv,
                                                  sp_gather(m, a->ln1, B, T), w->qkvw, N, C,
                                                  3 * Cl));
        dln = f_backward(m, m->dln, B, T); /* f */
        KEEP(k->dln1, dln, NC);
        PROF(PROF_LN_BWD, ops_layernorm_backward(m->dres, g->ln1w, g->ln1b, dln, x_in, w->ln1w,
                                                 a->ln1_mean, a->ln1_rstd, Nl, C)); // dres = d x
        layer_event(m, l0 + l, GPT_LAYER_AFTER_BACKWARD);
        if (params) grads_ready(m, m->tensors[m->block_t0[l0 + l]].offset); /* block is final */
    }
    if (first) KEEP(A->dembed, m->dres, NC);
#undef KEEP
    if (!first || !params) return; /* dres: gradient of the chunk input */
    PROF(PROF_RESIDUAL, embed_backward(m, m->dres, A->inputs, B, T));
    grads_ready(m, 0);
}

const float *gpt_stage_backward(gpt_model *m, int slot, const float *dout) {
    return gpt_chunk_backward(m, slot, 0, dout);
}

const float *gpt_chunk_backward(gpt_model *m, int slot, int chunk, const float *dout) {
    stage_backward(m, slot, chunk, dout, 1, 0);
    /* the model's first chunk ran the embedding backward itself */
    return m->first && chunk == 0 ? NULL : m->dres;
}

const float *gpt_chunk_backward_b(gpt_model *m, int slot, int chunk, const float *dout) {
    stage_backward(m, slot, chunk, dout, 0, 1);
    return m->first && chunk == 0 ? NULL : m->dres;
}

const float *gpt_stage_backward_input(gpt_model *m, int slot, const float *dout) {
    stage_backward(m, slot, 0, dout, 0, 0);
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
