/*
 * train/model.c — GPT-2 forward, backward and KV-cache decode on top of train/ops.h.
 *
 * The forward keeps every activation the backward needs (nothing is recomputed). The backward
 * walks the blocks in reverse with ONE running residual-gradient buffer `dres`: because every
 * op accumulates into its input gradient, a block's LayerNorm backward adds its contribution to
 * dres in place and the skip connection costs nothing.
 */
#include "train/model.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

#include "core/check.h"
#include "train/ops.h"

static void bind(const gpt_model *m, float *base, float **wte, float **wpe, float **lnfw,
                 float **lnfb, gpt_block *blocks);

/* ---- parameter table ------------------------------------------------------------------------ */

static void add_tensor(gpt_model *m, int *cap, const char *name, int64_t d0, int64_t d1,
                       size_t *off) {
    if (m->n_tensors == *cap) {
        *cap = *cap ? *cap * 2 : 64;
        m->tensors = realloc(m->tensors, (size_t)*cap * sizeof(gpt_tensor));
        mtCheck(m->tensors != NULL, "out of memory building the parameter table");
    }
    gpt_tensor *t = &m->tensors[m->n_tensors++];
    memset(t, 0, sizeof(*t));
    snprintf(t->name, sizeof(t->name), "%s", name);
    t->ndim = d1 > 0 ? 2 : 1;
    t->shape[0] = d0;
    t->shape[1] = d1 > 0 ? d1 : 0;
    t->numel = (size_t)d0 * (size_t)(d1 > 0 ? d1 : 1);
    t->offset = *off;
    t->decay = t->ndim == 2;
    /* unsharded by default: the global tensor is the local one */
    t->g_ndim = t->ndim;
    for (int d = 0; d < t->ndim; d++) t->g_shape[d] = t->g_local[d] = t->shape[d];
    t->tp_replicated = 1;
    if (strstr(name, "attn.c_attn.")) { /* logical (3, C[, C]) view, see gpt_tensor */
        t->g_ndim = t->ndim + 1;
        t->g_shape[0] = t->g_local[0] = 3;
        t->g_shape[1] = t->g_local[1] = d0 / 3;
        if (t->ndim == 2) t->g_shape[2] = t->g_local[2] = d1;
    }
    *off += t->numel;
}

int gpt_build(gpt_model *m, const gpt_config *cfg, char *err, size_t errlen) {
    memset(m, 0, sizeof(*m));
    if (cfg->n_layer <= 0 || cfg->n_head <= 0 || cfg->d_model <= 0 || cfg->seq_len <= 0 ||
        cfg->vocab_size <= 0) {
        snprintf(err, errlen, "model sizes must be positive (n_layer %d, n_head %d, d_model %d, "
                 "seq_len %d, vocab_size %d)", cfg->n_layer, cfg->n_head, cfg->d_model,
                 cfg->seq_len, cfg->vocab_size);
        return -1;
    }
    if (cfg->d_model % cfg->n_head != 0) {
        snprintf(err, errlen, "d_model (%d) must be divisible by n_head (%d)", cfg->d_model,
                 cfg->n_head);
        return -1;
    }
    m->cfg = *cfg;
    int C = cfg->d_model, V = cfg->vocab_size, L = cfg->n_layer, maxT = cfg->seq_len;
    int cap = 0;
    size_t off = 0;
    char nm[64];
    add_tensor(m, &cap, "wte.weight", V, C, &off);
    add_tensor(m, &cap, "wpe.weight", maxT, C, &off);
    for (int l = 0; l < L; l++) {
#define T1(suffix, d0) (snprintf(nm, sizeof(nm), "h.%d.%s", l, suffix), add_tensor(m, &cap, nm, d0, 0, &off))
#define T2(suffix, d0, d1) (snprintf(nm, sizeof(nm), "h.%d.%s", l, suffix), add_tensor(m, &cap, nm, d0, d1, &off))
        T1("ln_1.weight", C);
        T1("ln_1.bias", C);
        T2("attn.c_attn.weight", 3 * C, C);
        T1("attn.c_attn.bias", 3 * C);
        T2("attn.c_proj.weight", C, C);
        T1("attn.c_proj.bias", C);
        T1("ln_2.weight", C);
        T1("ln_2.bias", C);
        T2("mlp.c_fc.weight", 4 * C, C);
        T1("mlp.c_fc.bias", 4 * C);
        T2("mlp.c_proj.weight", C, 4 * C);
        T1("mlp.c_proj.bias", C);
#undef T1
#undef T2
    }
    add_tensor(m, &cap, "ln_f.weight", C, 0, &off);
    add_tensor(m, &cap, "ln_f.bias", C, 0, &off);
    m->num_params = off;
    m->params = callocCheck(off, sizeof(float));
    m->blocks = callocCheck((size_t)L, sizeof(gpt_block));
    m->dblocks = callocCheck((size_t)L, sizeof(gpt_block));
    bind(m, m->params, &m->wte, &m->wpe, &m->lnfw, &m->lnfb, m->blocks);
    return 0;
}

/* Point wte.. and blocks[] (12 tensors per block, in table order) into a flat buffer. */
static void bind(const gpt_model *m, float *base, float **wte, float **wpe, float **lnfw,
                 float **lnfb, gpt_block *blocks) {
    const gpt_tensor *t = m->tensors;
    *wte = base + t[0].offset;
    *wpe = base + t[1].offset;
    for (int l = 0; l < m->cfg.n_layer; l++) {
        const gpt_tensor *b = &t[2 + 12 * l];
        float **p = (float **)&blocks[l];
        for (int i = 0; i < 12; i++) p[i] = base + b[i].offset;
    }
    *lnfw = base + t[m->n_tensors - 2].offset;
    *lnfb = base + t[m->n_tensors - 1].offset;
}

void gpt_init_weights(gpt_model *m, uint64_t seed) {
    rng_state rng;
    rng_seed(&rng, seed);
    float resid_std = 0.02f / sqrtf(2.0f * m->cfg.n_layer);
    for (int i = 0; i < m->n_tensors; i++) {
        const gpt_tensor *t = &m->tensors[i];
        float *p = m->params + t->offset;
        const char *name = t->name;
        size_t len = strlen(name);
        int is_bias = len > 5 && strcmp(name + len - 5, ".bias") == 0;
        int is_ln = strstr(name, "ln_") != NULL;
        if (is_ln && !is_bias) {
            for (size_t j = 0; j < t->numel; j++) p[j] = 1.0f;
        } else if (is_bias) {
            memset(p, 0, t->numel * sizeof(float));
        } else {
            float std = strstr(name, "c_proj.weight") ? resid_std : 0.02f;
            for (size_t j = 0; j < t->numel; j++) p[j] = std * rng_normal(&rng);
        }
    }
}

/* ---- activations ---------------------------------------------------------------------------- */

size_t gpt_activation_floats(const gpt_config *cfg, int B, int T) {
    size_t N = (size_t)B * T, C = cfg->d_model, NH = cfg->n_head, V = cfg->vocab_size;
    size_t per_block = N * C * 2 + N * 2 + N * 3 * C + N * C + (size_t)B * NH * T * T + N * C +
                       N * C + N * 2 + N * 4 * C * 2 + N * C;
    size_t fwd = N * C + cfg->n_layer * per_block + N * C + 2 * N + N * V + N;
    size_t bwd = N * C * 3 + N * 3 * C + (size_t)B * NH * T * T + N * 4 * C * 2;
    return fwd + bwd;
}

void gpt_alloc_training(gpt_model *m, int B, int T) {
    const gpt_config *c = &m->cfg;
    mtCheck(T <= c->seq_len, "sequence length exceeds the model's seq_len");
    size_t N = (size_t)B * T, C = c->d_model, NH = c->n_head, V = c->vocab_size;
    m->B = B;
    m->T = T;
    if (!m->grads) m->grads = callocCheck(m->num_params, sizeof(float));
    bind(m, m->params, &m->wte, &m->wpe, &m->lnfw, &m->lnfb, m->blocks);
    bind(m, m->grads, &m->dwte, &m->dwpe, &m->dlnfw, &m->dlnfb, m->dblocks);

    free(m->act_mem);
    free(m->acts);
    free(m->inputs_saved);
    size_t total = gpt_activation_floats(c, B, T);
    m->act_mem = callocCheck(total, sizeof(float));
    m->acts = callocCheck((size_t)c->n_layer, sizeof(gpt_block_acts));
    m->inputs_saved = callocCheck(N, sizeof(int));
    float *p = m->act_mem;
#define TAKE(ptr, n) (ptr = p, p += (n))
    TAKE(m->encoded, N * C);
    for (int l = 0; l < c->n_layer; l++) {
        gpt_block_acts *a = &m->acts[l];
        TAKE(a->ln1, N * C);
        TAKE(a->ln1_mean, N);
        TAKE(a->ln1_rstd, N);
        TAKE(a->qkv, N * 3 * C);
        TAKE(a->atty, N * C);
        TAKE(a->att, (size_t)B * NH * T * T);
        TAKE(a->res2, N * C);
        TAKE(a->ln2, N * C);
        TAKE(a->ln2_mean, N);
        TAKE(a->ln2_rstd, N);
        TAKE(a->fch, N * 4 * C);
        TAKE(a->fch_gelu, N * 4 * C);
        TAKE(a->res3, N * C);
    }
    TAKE(m->lnf, N * C);
    TAKE(m->lnf_mean, N);
    TAKE(m->lnf_rstd, N);
    TAKE(m->logits, N * V);
    TAKE(m->losses, N);
    /* backward scratch */
    TAKE(m->dres, N * C);
    TAKE(m->dln, N * C);
    TAKE(m->datty, N * C);
    TAKE(m->dqkv, N * 3 * C);
    TAKE(m->datt, (size_t)B * NH * T * T);
    TAKE(m->dfch, N * 4 * C);
    TAKE(m->dfch_gelu, N * 4 * C);
#undef TAKE
    mtCheck((size_t)(p - m->act_mem) <= total, "activation layout overflow");
}

void gpt_zero_grad(gpt_model *m) {
    if (m->grads) memset(m->grads, 0, m->num_params * sizeof(float));
}

/* ---- forward / backward --------------------------------------------------------------------- */

float gpt_forward(gpt_model *m, const int *inputs, const int *targets, int B, int T, float dloss) {
    const gpt_config *c = &m->cfg;
    mtCheck(m->act_mem != NULL && B <= m->B && T <= m->T,
            "gpt_alloc_training must size activations before gpt_forward");
    /* Activations are laid out for (m->B, m->T); a smaller call uses a prefix of each buffer
     * with its own (B, T) strides, which is consistent because every op takes B and T. */
    int C = c->d_model, NH = c->n_head, HS = C / NH, V = c->vocab_size, N = B * T;
    for (int i = 0; i < N; i++) {
        mtCheck(inputs[i] >= 0 && inputs[i] < V, "token id out of vocabulary range");
        m->inputs_saved[i] = inputs[i];
    }
    ops_encoder_forward(m->encoded, inputs, m->wte, m->wpe, B, T, C); // (B, T, C)
    const float *x = m->encoded;
    for (int l = 0; l < c->n_layer; l++) {
        const gpt_block *w = &m->blocks[l];
        gpt_block_acts *a = &m->acts[l];
        ops_layernorm_forward(a->ln1, a->ln1_mean, a->ln1_rstd, x, w->ln1w, w->ln1b, N, C);
        ops_matmul_forward(a->qkv, a->ln1, w->qkvw, w->qkvb, N, C, 3 * C);   // (N, 3C)
        ops_attention_forward(a->atty, a->att, a->qkv, B, T, NH, HS);        // (N, C)
        ops_matmul_forward(a->res2, a->atty, w->attprojw, w->attprojb, N, C, C);
        ops_add_inplace(a->res2, x, (size_t)N * C);                          // residual
        ops_layernorm_forward(a->ln2, a->ln2_mean, a->ln2_rstd, a->res2, w->ln2w, w->ln2b, N, C);
        ops_matmul_forward(a->fch, a->ln2, w->fcw, w->fcb, N, C, 4 * C);     // (N, 4C)
        ops_gelu_forward(a->fch_gelu, a->fch, (size_t)N * 4 * C);
        ops_matmul_forward(a->res3, a->fch_gelu, w->fcprojw, w->fcprojb, N, 4 * C, C);
        ops_add_inplace(a->res3, a->res2, (size_t)N * C);                    // residual
        x = a->res3;
    }
    ops_layernorm_forward(m->lnf, m->lnf_mean, m->lnf_rstd, x, m->lnfw, m->lnfb, N, C);
    ops_matmul_forward(m->logits, m->lnf, m->wte, NULL, N, C, V); // (N, V), tied head
    m->B_last = B;
    m->T_last = T;
    m->dloss_last = dloss;
    if (!targets) return NAN;
    double sum = ops_softmax_crossentropy(m->logits, m->losses, targets, N, V, dloss);
    int counted = 0;
    for (int i = 0; i < N; i++) counted += targets[i] >= 0;
    return counted ? (float)(sum / counted) : NAN;
}

void gpt_backward(gpt_model *m) {
    const gpt_config *c = &m->cfg;
    int B = m->B_last, T = m->T_last;
    mtCheck(m->dloss_last != 0.0f, "gpt_backward needs a forward with dloss != 0 and targets");
    int C = c->d_model, NH = c->n_head, HS = C / NH, V = c->vocab_size, N = B * T;
    size_t NC = (size_t)N * C;
    const float *x_last = c->n_layer ? m->acts[c->n_layer - 1].res3 : m->encoded;
    /* head: logits = lnf @ wteᵀ; m->logits holds dlogits now */
    memset(m->dln, 0, NC * sizeof(float));
    ops_matmul_backward(m->dln, m->dwte, NULL, m->logits, m->lnf, m->wte, N, C, V);
    memset(m->dres, 0, NC * sizeof(float));
    ops_layernorm_backward(m->dres, m->dlnfw, m->dlnfb, m->dln, x_last, m->lnfw, m->lnf_mean,
                           m->lnf_rstd, N, C);
    for (int l = c->n_layer - 1; l >= 0; l--) {
        const gpt_block *w = &m->blocks[l];
        gpt_block *g = &m->dblocks[l];
        gpt_block_acts *a = &m->acts[l];
        const float *x_in = l ? m->acts[l - 1].res3 : m->encoded;
        /* MLP: res3 = res2 + fcproj(gelu(fc(ln2(res2)))); dres holds d res3 */
        memset(m->dfch_gelu, 0, (size_t)N * 4 * C * sizeof(float));
        ops_matmul_backward(m->dfch_gelu, g->fcprojw, g->fcprojb, m->dres, a->fch_gelu,
                            w->fcprojw, N, 4 * C, C);
        memset(m->dfch, 0, (size_t)N * 4 * C * sizeof(float));
        ops_gelu_backward(m->dfch, a->fch, m->dfch_gelu, (size_t)N * 4 * C);
        memset(m->dln, 0, NC * sizeof(float));
        ops_matmul_backward(m->dln, g->fcw, g->fcb, m->dfch, a->ln2, w->fcw, N, C, 4 * C);
        ops_layernorm_backward(m->dres, g->ln2w, g->ln2b, m->dln, a->res2, w->ln2w, a->ln2_mean,
                               a->ln2_rstd, N, C); // dres = d res2
        /* attention: res2 = x + proj(attn(qkv(ln1(x)))) */
        memset(m->datty, 0, NC * sizeof(float));
        ops_matmul_backward(m->datty, g->attprojw, g->attprojb, m->dres, a->atty, w->attprojw, N,
                            C, C);
        memset(m->dqkv, 0, NC * 3 * sizeof(float));
        ops_attention_backward(m->dqkv, m->datt, m->datty, a->qkv, a->att, B, T, NH, HS);
        memset(m->dln, 0, NC * sizeof(float));
        ops_matmul_backward(m->dln, g->qkvw, g->qkvb, m->dqkv, a->ln1, w->qkvw, N, C, 3 * C);
        ops_layernorm_backward(m->dres, g->ln1w, g->ln1b, m->dln, x_in, w->ln1w, a->ln1_mean,
                               a->ln1_rstd, N, C); // dres = d x
    }
    ops_encoder_backward(m->dwte, m->dwpe, m->dres, m->inputs_saved, B, T, C);
}

void gpt_free(gpt_model *m) {
    free(m->tensors);
    free(m->params);
    free(m->grads);
    free(m->blocks);
    free(m->dblocks);
    free(m->act_mem);
    free(m->acts);
    free(m->inputs_saved);
    memset(m, 0, sizeof(*m));
}

/* ---- KV-cache decode ------------------------------------------------------------------------ */

void gpt_decode_init(gpt_decode_state *s, const gpt_model *m) {
    const gpt_config *c = &m->cfg;
    size_t C = c->d_model, L = c->n_layer, maxT = c->seq_len;
    memset(s, 0, sizeof(*s));
    s->max_T = c->seq_len;
    s->k = callocCheck(L * maxT * C, sizeof(float));
    s->v = callocCheck(L * maxT * C, sizeof(float));
    s->x = callocCheck(C, sizeof(float));
    s->buf = callocCheck(C, sizeof(float));
    s->qkv = callocCheck(3 * C, sizeof(float));
    s->h = callocCheck(4 * C, sizeof(float));
    s->hg = callocCheck(4 * C, sizeof(float));
    s->scratch = callocCheck(maxT + 2 * C, sizeof(float));
    s->logits = callocCheck((size_t)c->vocab_size, sizeof(float));
}

void gpt_decode_reset(gpt_decode_state *s) { s->pos = 0; }

const float *gpt_decode_step(const gpt_model *m, gpt_decode_state *s, int token) {
    const gpt_config *c = &m->cfg;
    int C = c->d_model, NH = c->n_head, HS = C / NH, V = c->vocab_size, t = s->pos;
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
        ops_matmul_forward(s->h, ln, w->fcw, w->fcb, 1, C, 4 * C);
        ops_gelu_forward(s->hg, s->h, 4 * C);
        ops_matmul_forward(s->buf, s->hg, w->fcprojw, w->fcprojb, 1, 4 * C, C);
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
    free(s->logits);
    memset(s, 0, sizeof(*s));
}
