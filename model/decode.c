/*
 * model/decode.c — one token at a time through a whole (unsharded) model with a KV cache, for
 * sampling and serving. Each gpt_decode_state is one generation (a serving slot) with its own
 * cache; the model is only read, so states may decode concurrently from different threads.
 * The cache and scratch are device memory; per token the host copies in the token id and its
 * position (two ints) and copies out the logits (V floats) that the sampler reads.
 */
#include <math.h>
#include <string.h>

#include "core/check.h"
#include "model/model.h"
#include "ops/ops.h"

void gpt_decode_init(gpt_decode_state *s, const gpt_model *m) {
    const gpt_config *c = &m->cfg;
    size_t C = c->d_model, L = c->n_layer, maxT = c->seq_len;
    memset(s, 0, sizeof(*s));
    s->max_T = c->seq_len;
    s->n_layer = c->n_layer;
    s->k = ops_alloc(L * maxT * C * sizeof(float), "kv cache k");
    s->v = ops_alloc(L * maxT * C * sizeof(float), "kv cache v");
    s->x = ops_alloc(C * sizeof(float), "decode x");
    s->buf = ops_alloc(C * sizeof(float), "decode buf");
    s->qkv = ops_alloc(3 * C * sizeof(float), "decode qkv");
    s->h = ops_alloc(4 * C * sizeof(float), "decode h");
    s->hg = ops_alloc(4 * C * sizeof(float), "decode hg");
    s->scratch = ops_alloc((maxT + 2 * C + 2) * sizeof(float), "decode scratch");
    s->dlogits = ops_alloc((size_t)c->vocab_size * sizeof(float), "decode logits");
    s->ids = ops_alloc(2 * sizeof(int), "decode ids");
    s->logits = callocCheck((size_t)c->vocab_size, sizeof(float));
    s->moe = callocCheck(L ? L : 1, sizeof(moe_layer *));
    for (size_t l = 0; l < L; l++) {
        if (!m->blocks[l].moe) continue;
        moe_config mc = gpt_moe_config(m);
        mc.ep = NULL;
        char err[256];
        s->moe[l] = moe_create(&mc, 1, err, sizeof(err));
        mtCheck(s->moe[l] != NULL, "cannot create a MoE layer for decoding");
    }
}

void gpt_decode_reset(gpt_decode_state *s) { s->pos = 0; }

const float *gpt_decode_step(const gpt_model *m, gpt_decode_state *s, int token) {
    const gpt_config *c = &m->cfg;
    int C = c->d_model, NH = c->n_head, HS = C / NH, V = c->vocab_size, t = s->pos;
    mtCheck(c->tp == 1 && m->first && m->last,
            "KV-cache decode runs on an unsharded model (gather the TP/PP shards first)");
    mtCheck(t < s->max_T, "decode position beyond the context (caller must stop at seq_len)");
    mtCheck(token >= 0 && token < V, "token id out of vocabulary range");
    float *ln = s->scratch + s->max_T; // (C)
    float *att = ln + C;               // (C)
    float *mean = att + C, *rstd = mean + 1; // (1) each, not kept
    const int ids[2] = {token, t};
    ops_copy_h2d(s->ids, ids, sizeof ids);
    ops_embed_rows(s->x, s->ids, s->ids + 1, m->wte, m->wpe, 1, C); // (1, C)
    for (int l = 0; l < c->n_layer; l++) {
        const gpt_block *w = &m->blocks[l];
        float *kc = s->k + (size_t)l * s->max_T * C, *vc = s->v + (size_t)l * s->max_T * C;
        ops_layernorm_forward(ln, mean, rstd, s->x, w->ln1w, w->ln1b, 1, C);
        ops_matmul_forward_decode(s->qkv, ln, w->qkvw, w->qkvb, 1, C, 3 * C);
        ops_copy_d2d(kc + (size_t)t * C, s->qkv + C, C * sizeof(float));
        ops_copy_d2d(vc + (size_t)t * C, s->qkv + 2 * C, C * sizeof(float));
        ops_attention_decode(att, s->qkv, kc, vc, t, NH, HS, s->scratch);
        ops_matmul_forward_decode(s->buf, att, w->attprojw, w->attprojb, 1, C, C);
        ops_add_inplace(s->x, s->buf, C);
        ops_layernorm_forward(ln, mean, rstd, s->x, w->ln2w, w->ln2b, 1, C);
        if (w->moe) { /* one token through its top-k experts (no EP at inference) */
            moe_params mp = {w->router_w, w->efc_w, w->efc_b, w->eproj_w, w->eproj_b};
            moe_forward(s->moe[l], &mp, ln, s->buf, 1, NULL);
        } else {
            ops_matmul_forward_decode(s->h, ln, w->fcw, w->fcb, 1, C, 4 * C);
            ops_gelu_forward(s->hg, s->h, 4 * C);
            ops_matmul_forward_decode(s->buf, s->hg, w->fcprojw, w->fcprojb, 1, 4 * C, C);
        }
        ops_add_inplace(s->x, s->buf, C);
    }
    ops_layernorm_forward(ln, mean, rstd, s->x, m->lnfw, m->lnfb, 1, C);
    ops_matmul_forward_decode(s->dlogits, ln, m->wte, NULL, 1, C, V);
    ops_copy_d2h(s->logits, s->dlogits, (size_t)V * sizeof(float)); /* for the sampler */
    s->pos++;
    return s->logits;
}

void gpt_decode_hidden(const gpt_model *m, const gpt_decode_state *s, float *out) {
    /* gpt_decode_step leaves ln_f(x) in the scratch right after the attention row */
    ops_copy_d2h(out, s->scratch + s->max_T, (size_t)m->cfg.d_model * sizeof(float));
}

void gpt_decode_free(gpt_decode_state *s) {
    ops_free(s->k);
    ops_free(s->v);
    ops_free(s->x);
    ops_free(s->buf);
    ops_free(s->qkv);
    ops_free(s->h);
    ops_free(s->hg);
    ops_free(s->scratch);
    ops_free(s->dlogits);
    ops_free(s->ids);
    for (int l = 0; s->moe && l < s->n_layer; l++)
        if (s->moe[l]) moe_free(s->moe[l]);
    free(s->moe);
    free(s->logits);
    memset(s, 0, sizeof(*s));
}
