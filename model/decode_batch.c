/*
 * model/decode_batch.c — one forward over the next tokens of several generations at once
 * (continuous batching, as llama.cpp's server and vLLM do it), for serving.
 *
 * Why this shape: decoding one token of a 124M model reads all ~500 MB of weights for ~250 MFLOP
 * of work, so it is bound by memory bandwidth, and N generations decoded one by one read the
 * weights N times. Here the rows of every active generation — one token for a stream that is
 * decoding, a chunk of its prompt for one that is prefilling — are stacked into one (R, C)
 * activation, so each linear layer is ONE GEMM over all R rows and the weights are read once per
 * step. What differs per generation stays per generation: each row has its own position, writes
 * its K,V into its own gpt_decode_state's cache, and attends only to that cache (causal within a
 * prefill chunk because a row at position t reads cache rows 0..t, all written before attention
 * runs). The LM head runs only on the last row of each generation: prompt rows before it need no
 * logits. MoE blocks run per row through the generation's own MoE state, exactly as
 * gpt_decode_step does (a shared capacity would let one stream's tokens drop another's).
 *
 * Equality with gpt_decode_step: every per-row op (embedding, LayerNorm, GELU, residual,
 * attention, MoE) is the same code on the same row. The GEMMs compute the same dot products, but
 * OpenBLAS picks its kernel by the number of rows, so a row may differ from the one-row result in
 * the last bits of float rounding (tests/test_decode_batch.c bounds it); sampled text is equal.
 */
#include <string.h>

#include "core/check.h"
#include "model/model.h"
#include "ops/ops.h"

struct gpt_batch {
    int max_rows, max_seqs, C, V, max_T;
    float *x, *ln, *qkv, *att, *buf, *h, *hg; // (R, C) / (R, 3C) / (R, 4C) row stacks
    float *mean, *rstd;                      // (R)
    float *scratch;                          // (R, maxT + 2C) per-row attention scratch
    float *last, *logits;                    // (S, C) last rows after lnf, (S, V) their logits
    int *row_pos;                            // (R) position of each row
    int *row_seq;                            // (R) which generation each row belongs to
    int *ids, *ids_h;                        // (2R) tokens then positions: device, host
};

gpt_batch *gpt_batch_create(const gpt_model *m, int max_rows, int max_seqs) {
    mtCheck(max_rows >= 1 && max_seqs >= 1 && max_seqs <= max_rows,
            "gpt_batch_create: need 1 <= max_seqs <= max_rows");
    const gpt_config *c = &m->cfg;
    gpt_batch *b = callocCheck(1, sizeof(gpt_batch));
    size_t R = (size_t)max_rows, S = (size_t)max_seqs, C = (size_t)c->d_model;
    b->max_rows = max_rows;
    b->max_seqs = max_seqs;
    b->C = c->d_model;
    b->V = c->vocab_size;
    b->max_T = c->seq_len;
    b->x = ops_alloc(R * C * sizeof(float), "batch x");
    b->ln = ops_alloc(R * C * sizeof(float), "batch ln");
    b->qkv = ops_alloc(R * 3 * C * sizeof(float), "batch qkv");
    b->att = ops_alloc(R * C * sizeof(float), "batch att");
    b->buf = ops_alloc(R * C * sizeof(float), "batch buf");
    b->h = ops_alloc(R * 4 * C * sizeof(float), "batch h");
    b->hg = ops_alloc(R * 4 * C * sizeof(float), "batch hg");
    b->mean = ops_alloc(R * sizeof(float), "batch mean");
    b->rstd = ops_alloc(R * sizeof(float), "batch rstd");
    b->scratch = ops_alloc(R * ((size_t)c->seq_len + 2 * C) * sizeof(float), "batch scratch");
    b->last = ops_alloc(S * C * sizeof(float), "batch last");
    b->logits = ops_alloc(S * (size_t)c->vocab_size * sizeof(float), "batch logits");
    b->row_pos = callocCheck(R, sizeof(int));
    b->row_seq = callocCheck(R, sizeof(int));
    b->ids = ops_alloc(2 * R * sizeof(int), "batch ids");
    b->ids_h = callocCheck(2 * R, sizeof(int));
    return b;
}

void gpt_batch_free(gpt_batch *b) {
    if (b == NULL) return;
    ops_free(b->x);
    ops_free(b->ln);
    ops_free(b->qkv);
    ops_free(b->att);
    ops_free(b->buf);
    ops_free(b->h);
    ops_free(b->hg);
    ops_free(b->mean);
    ops_free(b->rstd);
    ops_free(b->scratch);
    ops_free(b->last);
    ops_free(b->logits);
    free(b->row_pos);
    free(b->row_seq);
    ops_free(b->ids);
    free(b->ids_h);
    free(b);
}

/* Embed every row (token + position) into b->x; returns the number of rows R. */
static int embed_rows(const gpt_model *m, gpt_batch *b, gpt_decode_state *const *st,
                      const int *const *tokens, const int *n_tok, int n_seq) {
    const int C = b->C;
    int R = 0;
    for (int s = 0; s < n_seq; s++) {
        mtCheck(n_tok[s] >= 1, "gpt_decode_batch: every generation feeds at least one token");
        mtCheck(st[s]->pos + n_tok[s] <= b->max_T,
                "decode position beyond the context (caller must stop at seq_len)");
        mtCheck(R + n_tok[s] <= b->max_rows, "gpt_decode_batch: more rows than the batch holds");
        for (int j = 0; j < n_tok[s]; j++, R++) {
            int token = tokens[s][j], t = st[s]->pos + j;
            mtCheck(token >= 0 && token < b->V, "token id out of vocabulary range");
            b->row_pos[R] = t;
            b->row_seq[R] = s;
            b->ids_h[R] = token;
        }
    }
    for (int r = 0; r < R; r++) b->ids_h[R + r] = b->row_pos[r];
    ops_copy_h2d(b->ids, b->ids_h, 2 * (size_t)R * sizeof(int)); /* ids and positions in */
    ops_embed_rows(b->x, b->ids, b->ids + R, m->wte, m->wpe, R, C); // (R, C)
    return R;
}

/* One transformer block over the R stacked rows, in place on b->x. */
static void block_rows(const gpt_model *m, gpt_batch *b, gpt_decode_state *const *st, int l,
                       int R) {
    const gpt_config *c = &m->cfg;
    const int C = c->d_model, NH = c->n_head, HS = C / NH, maxT = b->max_T;
    const gpt_block *w = &m->blocks[l];
    ops_layernorm_forward(b->ln, b->mean, b->rstd, b->x, w->ln1w, w->ln1b, R, C);
    ops_matmul_forward_decode(b->qkv, b->ln, w->qkvw, w->qkvb, R, C, 3 * C); // (R, 3C)
    for (int r = 0; r < R; r++) { /* every row's K,V into its own cache before anyone attends */
        gpt_decode_state *s = st[b->row_seq[r]];
        size_t at = ((size_t)l * s->max_T + (size_t)b->row_pos[r]) * C;
        ops_copy_d2d(s->k + at, b->qkv + (size_t)r * 3 * C + C, C * sizeof(float));
        ops_copy_d2d(s->v + at, b->qkv + (size_t)r * 3 * C + 2 * C, C * sizeof(float));
    }
    /* attention per row against its own cache; rows are independent (nested BLAS runs serial).
     * Threads only when the rows' caches hold enough work to pay for a parallel region. */
    size_t work = 0;
    for (int r = 0; r < R; r++) work += (size_t)(b->row_pos[r] + 1) * C;
#pragma omp parallel for schedule(dynamic) if (R > 1 && work >= 65536)
    for (int r = 0; r < R; r++) {
        gpt_decode_state *s = st[b->row_seq[r]];
        const float *kc = s->k + (size_t)l * s->max_T * C, *vc = s->v + (size_t)l * s->max_T * C;
        ops_attention_decode(b->att + (size_t)r * C, b->qkv + (size_t)r * 3 * C, kc, vc,
                             b->row_pos[r], NH, HS, b->scratch + (size_t)r * (maxT + 2 * C));
    }
    ops_matmul_forward_decode(b->buf, b->att, w->attprojw, w->attprojb, R, C, C);
    ops_add_inplace(b->x, b->buf, (size_t)R * C);
    ops_layernorm_forward(b->ln, b->mean, b->rstd, b->x, w->ln2w, w->ln2b, R, C);
    if (w->moe) { /* per row through its generation's own MoE state, as gpt_decode_step */
        moe_params mp = {w->router_w, w->efc_w, w->efc_b, w->eproj_w, w->eproj_b};
        for (int r = 0; r < R; r++)
            moe_forward(st[b->row_seq[r]]->moe[l], &mp, b->ln + (size_t)r * C,
                        b->buf + (size_t)r * C, 1, NULL);
    } else {
        ops_matmul_forward_decode(b->h, b->ln, w->fcw, w->fcb, R, C, 4 * C); // (R, 4C)
        ops_gelu_forward(b->hg, b->h, (size_t)R * 4 * C);
        ops_matmul_forward_decode(b->buf, b->hg, w->fcprojw, w->fcprojb, R, 4 * C, C);
    }
    ops_add_inplace(b->x, b->buf, (size_t)R * C);
}

void gpt_decode_batch(const gpt_model *m, gpt_batch *b, gpt_decode_state *const *st,
                      const int *const *tokens, const int *n_tok, int n_seq) {
    const gpt_config *c = &m->cfg;
    mtCheck(c->tp == 1 && m->first && m->last,
            "KV-cache decode runs on an unsharded model (gather the TP/PP shards first)");
    mtCheck(n_seq >= 1 && n_seq <= b->max_seqs, "gpt_decode_batch: 1..max_seqs generations");
    const int C = c->d_model, V = c->vocab_size;
    int R = embed_rows(m, b, st, tokens, n_tok, n_seq); // x (R, C)
    for (int l = 0; l < c->n_layer; l++) block_rows(m, b, st, l, R);
    /* final LayerNorm and LM head on each generation's last row only */
    int r = -1;
    for (int s = 0; s < n_seq; s++) {
        r += n_tok[s];
        ops_copy_d2d(b->ln + (size_t)s * C, b->x + (size_t)r * C, C * sizeof(float));
    }
    ops_layernorm_forward(b->last, b->mean, b->rstd, b->ln, m->lnfw, m->lnfb, n_seq, C);
    ops_matmul_forward_decode(b->logits, b->last, m->wte, NULL, n_seq, C, V); // (S, V)
    for (int s = 0; s < n_seq; s++) {
        ops_copy_d2h(st[s]->logits, b->logits + (size_t)s * V, (size_t)V * sizeof(float));
        st[s]->pos += n_tok[s];
    }
}
