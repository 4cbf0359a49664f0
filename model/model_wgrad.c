/*
 * model/model_wgrad.c — W, the weight half of a split backward (ZB-H1, parallel/pp_zb.c; Qi et
 * al., "Zero Bubble Pipeline Parallelism", ICLR 2024), and the buffers B leaves for it.
 *
 * B (gpt_chunk_backward_b, model/model_pass.c) runs the input-gradient ops of the backward and
 * copies, per layer, the gradient w.r.t. the output of every op that has weights into the slot's
 * kept buffers (gpt_block_kept). W then runs the weight-gradient halves of the same ops
 * (ops_matmul_backward_weight, ops_layernorm_backward_weight, ops_encoder_backward) on the same
 * operands — the kept gradient and the slot's forward activations — so B followed by W
 * accumulates into m->grads exactly what the whole backward does, bit for bit. The pipeline can
 * then send B's input gradient upstream at once and run W where it would otherwise idle.
 *
 * Why a file of its own: the whole backward's step order (model/model_pass.c) stays one function;
 * W has no chain between layers (each weight gradient needs only its own op's operands), so it is
 * a plain loop here.
 */
#include <string.h>

#include "core/check.h"
#include "model/model.h"
#include "ops/ops.h"
#include "ops/prof.h"

void gpt_alloc_split(gpt_model *m) {
    const gpt_config *c = &m->cfg;
    size_t N = (size_t)m->B * m->T, C = c->d_model, Cl = C / c->tp;
    size_t per_layer = 4 * N * C + 7 * N * Cl;
    size_t floats = (size_t)m->chunk_layers * per_layer + (m->last ? N * C : 0) +
                    (m->first ? N * C : 0);
    for (int l = 0; l < m->n_local; l++)
        mtCheck(!m->blocks[l].moe, "the split backward (zb-h1) does not cover MoE blocks");
    for (int s = 0; s < m->n_slots; s++) {
        gpt_acts *A = &m->slots[s];
        ops_free(A->kept_mem);
        free(A->kept);
        A->kept_mem = ops_alloc((floats ? floats : 1) * sizeof(float), "split-backward buffers");
        A->kept = callocCheck((size_t)(m->chunk_layers ? m->chunk_layers : 1), sizeof(gpt_block_kept));
        float *p = A->kept_mem;
#define TAKE(ptr, n) (ptr = p, p += (n))
        for (int l = 0; l < m->chunk_layers; l++) {
            gpt_block_kept *k = &A->kept[l];
            TAKE(k->dln1, N * C);
            TAKE(k->dqkv, N * 3 * Cl);
            TAKE(k->dattproj, N * C);
            TAKE(k->dln2, N * C);
            TAKE(k->dfch, N * 4 * Cl);
            TAKE(k->dfcproj, N * C);
        }
        A->dlnf = A->dembed = NULL;
        if (m->last) TAKE(A->dlnf, N * C);
        if (m->first) TAKE(A->dembed, N * C);
#undef TAKE
        mtCheck((size_t)(p - A->kept_mem) == floats, "split-backward buffer layout mismatch");
    }
}

void gpt_chunk_backward_w(gpt_model *m, int slot, int chunk) {
    const gpt_config *c = &m->cfg;
    mtCheck(m->slots && slot >= 0 && slot < m->n_slots && m->slots[slot].kept,
            "W needs B's kept gradients in the slot (gpt_alloc_split, gpt_chunk_backward_b)");
    gpt_acts *A = &m->slots[slot];
    int B = A->B, T = A->T, C = c->d_model, V = c->vocab_size, N = B * T, Cl = C / c->tp;
    const int nch = c->n_chunks > 1 ? c->n_chunks : 1, l0 = chunk * m->chunk_layers;
    if (m->last && chunk == nch - 1) { /* head (dlogits kept in A->logits) and ln_f */
        const float *x_last = m->chunk_layers ? A->acts[m->chunk_layers - 1].res3 : A->encoded;
        PROF(PROF_MM_HEAD_BWD, ops_matmul_backward_weight(m->dwte, NULL, A->logits, A->lnf, N, C, V));
        PROF(PROF_LN_BWD, ops_layernorm_backward_weight(m->dlnfw, m->dlnfb, A->dlnf, x_last,
                                                        A->lnf_mean, A->lnf_rstd, N, C));
    }
    for (int l = m->chunk_layers - 1; l >= 0; l--) {
        gpt_block *g = &m->dblocks[l0 + l];
        const gpt_block_acts *a = &A->acts[l];
        const gpt_block_kept *k = &A->kept[l];
        const float *x_in = l ? A->acts[l - 1].res3 : A->encoded;
        PROF(PROF_MM_FCPROJ_BWD, ops_matmul_backward_weight(g->fcprojw, g->fcprojb, k->dfcproj,
                                                            a->fch_gelu, N, 4 * Cl, C));
        PROF(PROF_MM_FC_BWD, ops_matmul_backward_weight(g->fcw, g->fcb, k->dfch, a->ln2, N, C,
                                                        4 * Cl));
        PROF(PROF_LN_BWD, ops_layernorm_backward_weight(g->ln2w, g->ln2b, k->dln2, a->res2,
                                                        a->ln2_mean, a->ln2_rstd, N, C));
        PROF(PROF_MM_ATTPROJ_BWD, ops_matmul_backward_weight(g->attprojw, g->attprojb,
                                                             k->dattproj, a->atty, N, Cl, C));
        PROF(PROF_MM_QKV_BWD, ops_matmul_backward_weight(g->qkvw, g->qkvb, k->dqkv, a->ln1, N, C,
                                                         3 * Cl));
        PROF(PROF_LN_BWD, ops_layernorm_backward_weight(g->ln1w, g->ln1b, k->dln1, x_in,
                                                        a->ln1_mean, a->ln1_rstd, N, C));
    }
    if (m->first && chunk == 0)
        PROF(PROF_RESIDUAL, ops_encoder_backward(m->dwte, m->dwpe, A->dembed, A->inputs, B, T, C));
}
