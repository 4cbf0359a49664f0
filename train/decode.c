/*
 * train/decode.c — one token at a time through a whole (unsharded) model with a KV cache, for
 * sampling and serving. Each gpt_decode_state is one generation (a serving slot) with its own
 * cache; the model is only read, so states may decode concurrently from different threads.
 */
#include <math.h>
#include <string.h>

#include "core/check.h"
#include "train/model.h"
#include "train/ops.h"

void gpt_decode_init(gpt_decode_state *s, const gpt_model *m) {
    const gpt_config *c = &m->cfg;
    size_t C = c->d_model, L = c->n_layer, maxT = c->seq_len;
    memset(s, 0, sizeof(*s));
    s->max_T = c->seq_len;
    s->n_layer = c->n_layer;
    s->k = callocCheck(L * maxT * C, sizeof(float));
    s->v = callocCheck(L * maxT * C, sizeof(float));
    s->x = callocCheck(C, sizeof(float));
    s->buf = callocCheck(C, sizeof(float));
    s->qkv = callocCheck(3 * C, sizeof(float));
    s->h = callocCheck(4 * C, sizeof(float));
    s->hg = callocCheck(4 * C, sizeof(float));
    s->scratch = callocCheck(maxT + 2 * C, sizeof(float));
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
    float mean, rstd;
    float *ln = s->scratch + s->max_T; // (C)
    float *att = ln + C;               // (C)
    for (int i = 0; i < C; i++) s->x[i] = m->wte[(size_t)token * C + i] + m->wpe[(size_t)t * C + i];
    for (int l = 0; l < c->n_layer; l++) {
        const gpt_block *w = &m->blocks[l];
        float *kc = s->k + (size_t)l * s->max_T * C, *vc = s->v + (size_t)l * s->max_T * C;
        ops_layernorm_forward(ln, &mean, &rstd, s->x, w->ln1w, w->ln1b, 1, C);
        ops_matmul_forward(s->qkv, ln, w->qkvw, w->qkvb, 1, C, 3 * C);
        memcpy(kc + (size_t)t * C, s->qkv + C, C * sizeof(float));
        memcpy(vc + (size_t)t * C, s->qkv + 2 * C, C * sizeof(float));
        ops_attention_decode(att, s->qkv, kc, vc, t, NH, HS, s->scratch);
        ops_matmul_forward(s->buf, att, w->attprojw, w->attprojb, 1, C, C);
        ops_add_inplace(s->x, s->buf, C);
        ops_layernorm_forward(ln, &mean, &rstd, s->x, w->ln2w, w->ln2b, 1, C);
        if (w->moe) { /* one token through its top-k experts (no EP at inference) */
            moe_params mp = {w->router_w, w->efc_w, w->efc_b, w->eproj_w, w->eproj_b};
            moe_forward(s->moe[l], &mp, ln, s->buf, 1, NULL);
        } else {
            ops_matmul_forward(s->h, ln, w->fcw, w->fcb, 1, C, 4 * C);
            ops_gelu_forward(s->hg, s->h, 4 * C);
            ops_matmul_forward(s->buf, s->hg, w->fcprojw, w->fcprojb, 1, 4 * C, C);
        }
        ops_add_inplace(s->x, s->buf, C);
    }
    ops_layernorm_forward(ln, &mean, &rstd, s->x, m->lnfw, m->lnfb, 1, C);
    ops_matmul_forward(s->logits, ln, m->wte, NULL, 1, C, V);
    s->pos++;
    return s->logits;
}

void gpt_decode_free(gpt_decode_state *s) {
    free(s->k);
    free(s->v);
    free(s->x);
    free(s->buf);
    free(s->qkv);
    free(s->h);
    free(s->hg);
    free(s->scratch);
    for (int l = 0; s->moe && l < s->n_layer; l++)
        if (s->moe[l]) moe_free(s->moe[l]);
    free(s->moe);
    free(s->logits);
    memset(s, 0, sizeof(*s));
}
