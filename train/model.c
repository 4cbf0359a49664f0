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
#include "parallel/tp.h"
#include "train/ops.h"

static void bind(const gpt_model *m, float *base, float **wte, float **wpe, float **lnfw,
                 float **lnfb, gpt_block *blocks);

/* ---- parameter table ------------------------------------------------------------------------ */

/* Append a tensor of local shape (d0[, d1]) to the table. split: the dimension of the GLOBAL
 * (logical) tensor that tensor parallelism splits, or -1 when every TP rank holds all of it.
 * qkv tensors use the logical view (3, C[, C]) with the split on dim 1 (heads). */
static gpt_tensor *add_tensor(gpt_model *m, int *cap, const char *name, int64_t d0, int64_t d1,
                              int split, size_t *off) {
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
    t->g_ndim = t->ndim;
    for (int d = 0; d < t->ndim; d++) t->g_local[d] = t->shape[d];
    if (strstr(name, "attn.c_attn.")) { /* logical (3, C[, C]) view, see gpt_tensor */
        t->g_ndim = t->ndim + 1;
        t->g_local[0] = 3;
        t->g_local[1] = d0 / 3;
        if (t->ndim == 2) t->g_local[2] = d1;
    }
    int tp = m->cfg.tp, r = m->cfg.tp_rank;
    for (int d = 0; d < t->g_ndim; d++) {
        t->g_shape[d] = t->g_local[d] * (d == split ? tp : 1);
        t->g_offset[d] = d == split ? r * t->g_local[d] : 0;
    }
    t->tp_split = split;
    t->tp_replicated = split < 0 || tp == 1;
    *off += t->numel;
    return t;
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
    int tp = cfg->tp > 1 ? cfg->tp : 1;
    if (cfg->n_head % tp != 0) {
        snprintf(err, errlen, "n_head (%d) is not divisible by tp (%d): tensor parallelism splits "
                 "attention by heads", cfg->n_head, tp);
        return -1;
    }
    m->cfg = *cfg;
    m->cfg.tp = tp;
    m->cfg.tp_rank = tp > 1 ? cfg->tp_rank : 0;
    int C = cfg->d_model, V = cfg->vocab_size, L = cfg->n_layer, maxT = cfg->seq_len;
    int Cl = C / tp; /* this rank's share of the attention width (its heads) */
    int cap = 0;
    size_t off = 0;
    char nm[64];
    add_tensor(m, &cap, "wte.weight", V, C, -1, &off);
    add_tensor(m, &cap, "wpe.weight", maxT, C, -1, &off);
    for (int l = 0; l < L; l++) {
#define T(suffix, d0, d1, split) \
    (snprintf(nm, sizeof(nm), "h.%d.%s", l, suffix), add_tensor(m, &cap, nm, d0, d1, split, &off))
        T("ln_1.weight", C, 0, -1);
        T("ln_1.bias", C, 0, -1);
        T("attn.c_attn.weight", 3 * Cl, C, 1); /* column parallel, by heads */
        T("attn.c_attn.bias", 3 * Cl, 0, 1);
        T("attn.c_proj.weight", C, Cl, 1);     /* row parallel: input columns */
        T("attn.c_proj.bias", C, 0, -1);       /* added once, after the all-reduce */
        T("ln_2.weight", C, 0, -1);
        T("ln_2.bias", C, 0, -1);
        T("mlp.c_fc.weight", 4 * Cl, C, 0);    /* column parallel */
        T("mlp.c_fc.bias", 4 * Cl, 0, 0);
        T("mlp.c_proj.weight", C, 4 * Cl, 1);  /* row parallel */
        T("mlp.c_proj.bias", C, 0, -1);
#undef T
    }
    add_tensor(m, &cap, "ln_f.weight", C, 0, -1, &off);
    add_tensor(m, &cap, "ln_f.bias", C, 0, -1, &off);
    m->num_params = off;
    m->capacity = off;
    m->params = callocCheck(off, sizeof(float));
    m->blocks = callocCheck((size_t)L, sizeof(gpt_block));
    m->dblocks = callocCheck((size_t)L, sizeof(gpt_block));
    bind(m, m->params, &m->wte, &m->wpe, &m->lnfw, &m->lnfb, m->blocks);
    return 0;
}

void gpt_reserve(gpt_model *m, size_t total) {
    mtCheck(total >= m->num_params, "gpt_reserve cannot shrink the parameter buffer");
    m->params = realloc(m->params, total * sizeof(float));
    mtCheck(m->params != NULL, "out of memory growing the parameter buffer");
    memset(m->params + m->num_params, 0, (total - m->num_params) * sizeof(float));
    bind(m, m->params, &m->wte, &m->wpe, &m->lnfw, &m->lnfb, m->blocks);
    if (m->grads) {
        m->grads = realloc(m->grads, total * sizeof(float));
        mtCheck(m->grads != NULL, "out of memory growing the gradient buffer");
        memset(m->grads + m->num_params, 0, (total - m->num_params) * sizeof(float));
        bind(m, m->grads, &m->dwte, &m->dwpe, &m->dlnfw, &m->dlnfb, m->dblocks);
    }
    m->capacity = total;
}

/* Copy a box of a row-major logical tensor: for every index inside `box` (ndim <= 3) starting
 * at `at` within a tensor of shape `shape`, dst[global] = src[local] (to_global = 1) or the
 * reverse. src/dst of the local side are the contiguous box. */
static void box_copy(float *global, const int64_t *shape, float *local, const int64_t *box,
                     const int64_t *at, int ndim, int to_global) {
    int64_t s[3] = {1, 1, 1}, b[3] = {1, 1, 1}, a[3] = {0, 0, 0};
    for (int d = 0; d < ndim; d++) s[3 - ndim + d] = shape[d], b[3 - ndim + d] = box[d],
                                   a[3 - ndim + d] = at[d];
    size_t li = 0;
    for (int64_t i = 0; i < b[0]; i++)
        for (int64_t j = 0; j < b[1]; j++) {
            size_t g = ((size_t)(a[0] + i) * s[1] + (size_t)(a[1] + j)) * s[2] + (size_t)a[2];
            if (to_global) memcpy(global + g, local + li, b[2] * sizeof(float));
            else memcpy(local + li, global + g, b[2] * sizeof(float));
            li += b[2];
        }
}

void gpt_assemble_full(const gpt_model *m, const float *all_local, const gpt_model *full) {
    mtCheck(full->n_tensors == m->n_tensors, "full and sharded models disagree on the tensors");
    int tp = m->cfg.tp;
    for (int i = 0; i < m->n_tensors; i++) {
        const gpt_tensor *t = &m->tensors[i];
        float *dst = full->params + full->tensors[i].offset;
        for (int r = 0; r < (t->tp_replicated ? 1 : tp); r++) {
            int64_t at[3] = {0, 0, 0};
            if (!t->tp_replicated) at[t->tp_split] = r * t->g_local[t->tp_split];
            box_copy(dst, t->g_shape, (float *)all_local + (size_t)r * m->num_params + t->offset,
                     t->g_local, at, t->g_ndim, 1);
        }
    }
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
            /* Draw the whole GLOBAL tensor in row-major order and keep this rank's box, so every
             * tensor-parallel layout starts from exactly the single-process weights. */
            float std = strstr(name, "c_proj.weight") ? resid_std : 0.02f;
            size_t gnumel = 1;
            for (int d = 0; d < t->g_ndim; d++) gnumel *= (size_t)t->g_shape[d];
            if (gnumel == t->numel) {
                for (size_t j = 0; j < t->numel; j++) p[j] = std * rng_normal(&rng);
            } else {
                float *g = mallocCheck(gnumel * sizeof(float));
                for (size_t j = 0; j < gnumel; j++) g[j] = std * rng_normal(&rng);
                box_copy(g, t->g_shape, p, t->g_local, t->g_offset, t->g_ndim, 0);
                free(g);
            }
        }
    }
}

/* ---- activations ---------------------------------------------------------------------------- */

size_t gpt_activation_floats(const gpt_config *cfg, int B, int T) {
    size_t tp = cfg->tp > 1 ? (size_t)cfg->tp : 1;
    size_t N = (size_t)B * T, C = cfg->d_model, V = cfg->vocab_size;
    size_t Cl = C / tp, NHl = cfg->n_head / tp; /* this rank's width and heads */
    size_t att = (size_t)B * NHl * T * T;
    size_t per_block = N * C /*ln1*/ + 2 * N + N * 3 * Cl /*qkv*/ + N * Cl /*atty*/ + att +
                       N * C /*res2*/ + N * C /*ln2*/ + 2 * N + N * 4 * Cl * 2 /*fch*/ + N * C;
    size_t fwd = N * C + cfg->n_layer * per_block + N * C + 2 * N + N * V + N;
    size_t bwd = N * C * 2 /*dres, dln*/ + N * Cl /*datty*/ + N * 3 * Cl + att + N * 4 * Cl * 2;
    return fwd + bwd;
}

void gpt_alloc_training(gpt_model *m, int B, int T) {
    const gpt_config *c = &m->cfg;
    mtCheck(T <= c->seq_len, "sequence length exceeds the model's seq_len");
    size_t N = (size_t)B * T, C = c->d_model, V = c->vocab_size;
    size_t Cl = C / c->tp, NH = c->n_head / c->tp; /* local width and heads */
    m->B = B;
    m->T = T;
    if (!m->grads) m->grads = callocCheck(m->capacity, sizeof(float));
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
        TAKE(a->qkv, N * 3 * Cl);
        TAKE(a->atty, N * Cl);
        TAKE(a->att, (size_t)B * NH * T * T);
        TAKE(a->res2, N * C);
        TAKE(a->ln2, N * C);
        TAKE(a->ln2_mean, N);
        TAKE(a->ln2_rstd, N);
        TAKE(a->fch, N * 4 * Cl);
        TAKE(a->fch_gelu, N * 4 * Cl);
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
    TAKE(m->datty, N * Cl);
    TAKE(m->dqkv, N * 3 * Cl);
    TAKE(m->datt, (size_t)B * NH * T * T);
    TAKE(m->dfch, N * 4 * Cl);
    TAKE(m->dfch_gelu, N * 4 * Cl);
#undef TAKE
    mtCheck((size_t)(p - m->act_mem) <= total, "activation layout overflow");
}

void gpt_zero_grad(gpt_model *m) {
    if (m->grads) memset(m->grads, 0, m->num_params * sizeof(float));
}

/* ---- forward / backward --------------------------------------------------------------------- */

/* out (N, C) += bias (C) broadcast over rows: the bias of a row-parallel linear is added once,
 * after the all-reduce of the partial products. */
static void add_bias(float *out, const float *bias, int N, int C) {
    for (int i = 0; i < N; i++)
        for (int j = 0; j < C; j++) out[(size_t)i * C + j] += bias[j];
}

/* Row-parallel linear + g: out (N, C) = Σ_tp inp_local (N, Cin_l) @ w_localᵀ, then + bias. */
static void row_parallel_forward(const gpt_model *m, float *out, const float *inp, const float *w,
                                 const float *bias, int N, int Cin_l, int C) {
    if (m->cfg.tp == 1) {
        ops_matmul_forward(out, inp, w, bias, N, Cin_l, C);
        return;
    }
    ops_matmul_forward(out, inp, w, NULL, N, Cin_l, C);
    tp_g_forward(m->tp_comm, out, (size_t)N * C);
    add_bias(out, bias, N, C);
}

float gpt_forward(gpt_model *m, const int *inputs, const int *targets, int B, int T, float dloss) {
    const gpt_config *c = &m->cfg;
    mtCheck(m->act_mem != NULL && B <= m->B && T <= m->T,
            "gpt_alloc_training must size activations before gpt_forward");
    mtCheck(c->tp == 1 || m->tp_comm != NULL, "tensor-parallel model without a TP communicator");
    /* Activations are laid out for (m->B, m->T); a smaller call uses a prefix of each buffer
     * with its own (B, T) strides, which is consistent because every op takes B and T. */
    int C = c->d_model, V = c->vocab_size, N = B * T;
    int Cl = C / c->tp, NHl = c->n_head / c->tp, HS = C / c->n_head; /* local width, heads */
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
        /* f (identity forward), then column-parallel qkv: this rank's heads only */
        ops_matmul_forward(a->qkv, a->ln1, w->qkvw, w->qkvb, N, C, 3 * Cl); // (N, 3, NHl, HS)
        ops_attention_forward(a->atty, a->att, a->qkv, B, T, NHl, HS);      // (N, Cl)
        row_parallel_forward(m, a->res2, a->atty, w->attprojw, w->attprojb, N, Cl, C); // g
        ops_add_inplace(a->res2, x, (size_t)N * C);                          // residual
        ops_layernorm_forward(a->ln2, a->ln2_mean, a->ln2_rstd, a->res2, w->ln2w, w->ln2b, N, C);
        ops_matmul_forward(a->fch, a->ln2, w->fcw, w->fcb, N, C, 4 * Cl);    // (N, 4Cl)
        ops_gelu_forward(a->fch_gelu, a->fch, (size_t)N * 4 * Cl);
        row_parallel_forward(m, a->res3, a->fch_gelu, w->fcprojw, w->fcprojb, N, 4 * Cl, C); // g
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

static void grads_ready(gpt_model *m, size_t offset) {
    if (m->grads_ready) m->grads_ready(m->grads_ready_user, offset);
}

void gpt_backward(gpt_model *m) {
    const gpt_config *c = &m->cfg;
    int B = m->B_last, T = m->T_last;
    mtCheck(m->dloss_last != 0.0f, "gpt_backward needs a forward with dloss != 0 and targets");
    int C = c->d_model, V = c->vocab_size, N = B * T;
    int Cl = C / c->tp, NHl = c->n_head / c->tp, HS = C / c->n_head;
    size_t NC = (size_t)N * C;
    const float *x_last = c->n_layer ? m->acts[c->n_layer - 1].res3 : m->encoded;
    /* head: logits = lnf @ wteᵀ; m->logits holds dlogits now */
    memset(m->dln, 0, NC * sizeof(float));
    ops_matmul_backward(m->dln, m->dwte, NULL, m->logits, m->lnf, m->wte, N, C, V);
    memset(m->dres, 0, NC * sizeof(float));
    ops_layernorm_backward(m->dres, m->dlnfw, m->dlnfb, m->dln, x_last, m->lnfw, m->lnf_mean,
                           m->lnf_rstd, N, C);
    grads_ready(m, m->tensors[m->n_tensors - 2].offset); /* ln_f is final */
    for (int l = c->n_layer - 1; l >= 0; l--) {
        const gpt_block *w = &m->blocks[l];
        gpt_block *g = &m->dblocks[l];
        gpt_block_acts *a = &m->acts[l];
        const float *x_in = l ? m->acts[l - 1].res3 : m->encoded;
        /* MLP: res3 = res2 + fcproj(gelu(fc(ln2(res2)))); dres holds d res3 (g: identity) */
        memset(m->dfch_gelu, 0, (size_t)N * 4 * Cl * sizeof(float));
        ops_matmul_backward(m->dfch_gelu, g->fcprojw, g->fcprojb, m->dres, a->fch_gelu,
                            w->fcprojw, N, 4 * Cl, C);
        memset(m->dfch, 0, (size_t)N * 4 * Cl * sizeof(float));
        ops_gelu_backward(m->dfch, a->fch, m->dfch_gelu, (size_t)N * 4 * Cl);
        memset(m->dln, 0, NC * sizeof(float));
        ops_matmul_backward(m->dln, g->fcw, g->fcb, m->dfch, a->ln2, w->fcw, N, C, 4 * Cl);
        tp_f_backward(m->tp_comm, m->dln, NC); /* f: sum the partial input gradients */
        ops_layernorm_backward(m->dres, g->ln2w, g->ln2b, m->dln, a->res2, w->ln2w, a->ln2_mean,
                               a->ln2_rstd, N, C); // dres = d res2
        /* attention: res2 = x + proj(attn(qkv(ln1(x)))) */
        memset(m->datty, 0, (size_t)N * Cl * sizeof(float));
        ops_matmul_backward(m->datty, g->attprojw, g->attprojb, m->dres, a->atty, w->attprojw, N,
                            Cl, C);
        memset(m->dqkv, 0, (size_t)N * 3 * Cl * sizeof(float));
        ops_attention_backward(m->dqkv, m->datt, m->datty, a->qkv, a->att, B, T, NHl, HS);
        memset(m->dln, 0, NC * sizeof(float));
        ops_matmul_backward(m->dln, g->qkvw, g->qkvb, m->dqkv, a->ln1, w->qkvw, N, C, 3 * Cl);
        tp_f_backward(m->tp_comm, m->dln, NC); /* f */
        ops_layernorm_backward(m->dres, g->ln1w, g->ln1b, m->dln, x_in, w->ln1w, a->ln1_mean,
                               a->ln1_rstd, N, C); // dres = d x
        grads_ready(m, m->tensors[2 + 12 * l].offset); /* block l is final */
    }
    ops_encoder_backward(m->dwte, m->dwpe, m->dres, m->inputs_saved, B, T, C);
    grads_ready(m, 0);
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
    mtCheck(c->tp == 1, "KV-cache decode runs on an unsharded model (gather TP shards first)");
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
