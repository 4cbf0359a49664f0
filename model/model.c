/*
 * model/model.c — GPT-2 forward, backward and KV-cache decode on top of ops/ops.h.
 *
 * The forward keeps every activation the backward needs (nothing is recomputed). The backward
 * walks the blocks in reverse with ONE running residual-gradient buffer `dres`: because every
 * op accumulates into its input gradient, a block's LayerNorm backward adds its contribution to
 * dres in place and the skip connection costs nothing.
 */
#include "model/model.h"

#include <math.h>
#include <stddef.h>
#include <stdio.h>
#include <string.h>

#include "core/check.h"
#include "parallel/tp.h"
#include "ops/ops.h"

static void bind(const gpt_model *m, float *base, float **wte, float **wpe, float **lnfw,
                 float **lnfb, gpt_block *blocks);

/* ---- parameter table ------------------------------------------------------------------------ */

/* Append a tensor of local shape dims[0..ndim) to the table. split: the dimension of the GLOBAL
 * (logical) tensor that tensor parallelism splits, or -1 when every TP rank holds all of it.
 * qkv tensors use the logical view (3, C[, C]) with the split on dim 1 (heads). Expert tensors
 * (name contains "experts.") are split over the EP group along dim 0 instead. */
static gpt_tensor *add_tensor_nd(gpt_model *m, int *cap, const char *name, int ndim,
                                 const int64_t *dims, int split, size_t *off) {
    if (m->n_tensors == *cap) {
        *cap = *cap ? *cap * 2 : 64;
        m->tensors = realloc(m->tensors, (size_t)*cap * sizeof(gpt_tensor));
        mtCheck(m->tensors != NULL, "out of memory building the parameter table");
    }
    gpt_tensor *t = &m->tensors[m->n_tensors++];
    memset(t, 0, sizeof(*t));
    snprintf(t->name, sizeof(t->name), "%s", name);
    t->ndim = ndim;
    t->numel = 1;
    for (int d = 0; d < ndim; d++) t->shape[d] = dims[d], t->numel *= (size_t)dims[d];
    t->offset = *off;
    size_t len = strlen(name);
    /* decoupled weight decay on weight matrices only (not biases, not LayerNorm) */
    t->decay = len > 7 && strcmp(name + len - 7, ".weight") == 0 && !strstr(name, "ln_");
    t->g_ndim = t->ndim;
    for (int d = 0; d < t->ndim; d++) t->g_local[d] = t->shape[d];
    if (strstr(name, "attn.c_attn.")) { /* logical (3, C[, C]) view, see gpt_tensor */
        t->g_ndim = t->ndim + 1;
        t->g_local[0] = 3;
        t->g_local[1] = dims[0] / 3;
        if (t->ndim == 2) t->g_local[2] = dims[1];
    }
    int tp = m->cfg.tp, r = m->cfg.tp_rank;
    t->expert = strstr(name, "experts.") != NULL;
    for (int d = 0; d < t->g_ndim; d++) {
        t->g_shape[d] = t->g_local[d] * (d == split ? tp : 1);
        t->g_offset[d] = d == split ? r * t->g_local[d] : 0;
    }
    if (t->expert) { /* this rank's experts: a slice of dim 0 of the (E, ...) tensor */
        t->g_shape[0] = t->g_local[0] * m->cfg.ep;
        t->g_offset[0] = (int64_t)m->cfg.ep_rank * t->g_local[0];
    }
    t->tp_split = split;
    t->tp_replicated = split < 0 || tp == 1;
    *off += t->numel;
    return t;
}

static gpt_tensor *add_tensor(gpt_model *m, int *cap, const char *name, int64_t d0, int64_t d1,
                              int split, size_t *off) {
    int64_t dims[2] = {d0, d1};
    return add_tensor_nd(m, cap, name, d1 > 0 ? 2 : 1, dims, split, off);
}

int gpt_global_layer(const gpt_model *m, int l) {
    int per = m->chunk_layers > 0 ? m->chunk_layers : 1;
    return m->cfg.layer_begin + (l / per) * m->cfg.chunk_stride + l % per;
}

/* 1 if global block l has a mixture-of-experts MLP. */
static int block_is_moe(const gpt_config *c, int l) {
    return c->moe_every > 0 && c->n_experts > 0 && (l + 1) % c->moe_every == 0;
}

/* gpt_build, step 1: the sizes checked and the stage's share set in m->cfg: tp/pp/ep ranks, the
 * layer range [layer_begin, layer_end) and its chunks, the MoE routing; -1 with err otherwise. */
static int build_layout(gpt_model *m, const gpt_config *cfg, char *err, size_t errlen) {
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
    int pp = cfg->pp > 1 ? cfg->pp : 1;
    m->cfg.pp = pp;
    m->cfg.pp_rank = pp > 1 ? cfg->pp_rank : 0;
    if (pp == 1 || cfg->layer_end <= cfg->layer_begin) {
        m->cfg.layer_begin = 0;
        m->cfg.layer_end = cfg->n_layer;
    }
    int nch = pp > 1 && cfg->n_chunks > 1 ? cfg->n_chunks : 1;
    m->cfg.n_chunks = nch;
    m->cfg.chunk_stride = nch > 1 ? cfg->chunk_stride : 0;
    int last_end = m->cfg.layer_end + (nch - 1) * m->cfg.chunk_stride;
    if (m->cfg.layer_begin < 0 || last_end > cfg->n_layer ||
        (nch > 1 && m->cfg.chunk_stride < m->cfg.layer_end - m->cfg.layer_begin)) {
        snprintf(err, errlen, "stage layers [%d, %d) x %d chunks (stride %d) outside the model's "
                 "%d layers", m->cfg.layer_begin, m->cfg.layer_end, nch, m->cfg.chunk_stride,
                 cfg->n_layer);
        return -1;
    }
    int ep = cfg->ep > 1 ? cfg->ep : 1;
    m->cfg.ep = ep;
    m->cfg.ep_rank = ep > 1 ? cfg->ep_rank : 0;
    if (cfg->moe_every > 0) {
        if (cfg->n_experts < 1 || cfg->n_experts % ep != 0) {
            snprintf(err, errlen, "n_experts (%d) must be positive and divisible by ep (%d)",
                     cfg->n_experts, ep);
            return -1;
        }
        if (cfg->top_k < 1 || cfg->top_k > 2 || cfg->top_k > cfg->n_experts) {
            snprintf(err, errlen, "top_k (%d) must be 1 or 2 and at most n_experts (%d)",
                     cfg->top_k, cfg->n_experts);
            return -1;
        }
    }
    return 0;
}

/* gpt_build, step 2: the tensors of global block l (dense or MoE MLP, column/row parallel over
 * tp, experts El = n_experts / ep on this rank), appended at *off. Shapes are (out, in). */
static void add_block_tensors(gpt_model *m, int *cap, size_t *off, int l) {
    const gpt_config *cfg = &m->cfg;
    int C = cfg->d_model;
    int Cl = C / cfg->tp;              /* this rank's share of the attention width (its heads) */
    int El = cfg->n_experts / cfg->ep; /* experts on this rank */
    char nm[64];
#define T(suffix, d0, d1, split) \
    (snprintf(nm, sizeof(nm), "h.%d.%s", l, suffix), add_tensor(m, cap, nm, d0, d1, split, off))
#define T3(suffix, d0, d1, d2)                                                                     \
    do {                                                                                           \
        int64_t dims_[3] = {d0, d1, d2};                                                           \
        snprintf(nm, sizeof(nm), "h.%d.%s", l, suffix);                                            \
        add_tensor_nd(m, cap, nm, d2 > 0 ? 3 : 2, dims_, -1, off);                                 \
    } while (0)
    T("ln_1.weight", C, 0, -1);
    T("ln_1.bias", C, 0, -1);
    T("attn.c_attn.weight", 3 * Cl, C, 1); /* column parallel, by heads */
    T("attn.c_attn.bias", 3 * Cl, 0, 1);
    T("attn.c_proj.weight", C, Cl, 1);     /* row parallel: input columns */
    T("attn.c_proj.bias", C, 0, -1);       /* added once, after the all-reduce */
    T("ln_2.weight", C, 0, -1);
    T("ln_2.bias", C, 0, -1);
    if (block_is_moe(cfg, l)) { /* experts replicated over TP, sharded over EP */
        T("mlp.router.weight", cfg->n_experts, C, -1);
        T3("mlp.experts.c_fc.weight", El, 4 * C, C);
        T3("mlp.experts.c_fc.bias", El, 4 * C, 0);
        T3("mlp.experts.c_proj.weight", El, C, 4 * C);
        T3("mlp.experts.c_proj.bias", El, C, 0);
    } else {
        T("mlp.c_fc.weight", 4 * Cl, C, 0);   /* column parallel */
        T("mlp.c_fc.bias", 4 * Cl, 0, 0);
        T("mlp.c_proj.weight", C, 4 * Cl, 1); /* row parallel */
        T("mlp.c_proj.bias", C, 0, -1);
    }
#undef T
#undef T3
}

int gpt_build(gpt_model *m, const gpt_config *cfg, char *err, size_t errlen) {
    memset(m, 0, sizeof(*m));
    if (build_layout(m, cfg, err, errlen) != 0) return -1;
    int pp = m->cfg.pp, nch = m->cfg.n_chunks;
    m->first = m->cfg.pp_rank == 0;
    m->last = m->cfg.pp_rank == pp - 1;
    m->chunk_layers = m->cfg.layer_end - m->cfg.layer_begin;
    m->n_local = m->chunk_layers * nch;
    int C = cfg->d_model, V = cfg->vocab_size, maxT = cfg->seq_len;
    int cap = 0;
    size_t off = 0;
    m->i_wte = m->i_wpe = m->i_lnf = -1;
    if (m->first || m->last) { /* the last stage keeps a copy of the tied wte for its head */
        m->i_wte = m->n_tensors;
        gpt_tensor *t = add_tensor(m, &cap, "wte.weight", V, C, -1, &off);
        t->pp_tied_copy = !m->first;
    }
    if (m->first) {
        m->i_wpe = m->n_tensors;
        add_tensor(m, &cap, "wpe.weight", maxT, C, -1, &off);
    }
    m->block_t0 = callocCheck((size_t)(m->n_local ? m->n_local : 1), sizeof(int));
    for (int li = 0; li < m->n_local; li++) {
        int l = gpt_global_layer(m, li);
        m->block_t0[li] = m->n_tensors;
        add_block_tensors(m, &cap, &off, l);
    }
    if (m->last) {
        m->i_lnf = m->n_tensors;
        add_tensor(m, &cap, "ln_f.weight", C, 0, -1, &off);
        add_tensor(m, &cap, "ln_f.bias", C, 0, -1, &off);
    }
    m->num_params = off;
    m->capacity = off;
    m->params = ops_alloc((off ? off : 1) * sizeof(float), "params");
    m->blocks = callocCheck((size_t)(m->n_local ? m->n_local : 1), sizeof(gpt_block));
    m->dblocks = callocCheck((size_t)(m->n_local ? m->n_local : 1), sizeof(gpt_block));
    bind(m, m->params, &m->wte, &m->wpe, &m->lnfw, &m->lnfb, m->blocks);
    return 0;
}

/* Point wte.. and blocks[] into a flat buffer, each block's tensors found by name suffix. */
static void bind(const gpt_model *m, float *base, float **wte, float **wpe, float **lnfw,
                 float **lnfb, gpt_block *blocks) {
    const gpt_tensor *t = m->tensors;
    *wte = m->i_wte >= 0 ? base + t[m->i_wte].offset : NULL;
    *wpe = m->i_wpe >= 0 ? base + t[m->i_wpe].offset : NULL;
    static const struct { const char *suffix; size_t field; } F[] = {
        {"ln_1.weight", offsetof(gpt_block, ln1w)}, {"ln_1.bias", offsetof(gpt_block, ln1b)},
        {"attn.c_attn.weight", offsetof(gpt_block, qkvw)},
        {"attn.c_attn.bias", offsetof(gpt_block, qkvb)},
        {"attn.c_proj.weight", offsetof(gpt_block, attprojw)},
        {"attn.c_proj.bias", offsetof(gpt_block, attprojb)},
        {"ln_2.weight", offsetof(gpt_block, ln2w)}, {"ln_2.bias", offsetof(gpt_block, ln2b)},
        {"mlp.c_fc.weight", offsetof(gpt_block, fcw)}, {"mlp.c_fc.bias", offsetof(gpt_block, fcb)},
        {"mlp.c_proj.weight", offsetof(gpt_block, fcprojw)},
        {"mlp.c_proj.bias", offsetof(gpt_block, fcprojb)},
        {"mlp.router.weight", offsetof(gpt_block, router_w)},
        {"mlp.experts.c_fc.weight", offsetof(gpt_block, efc_w)},
        {"mlp.experts.c_fc.bias", offsetof(gpt_block, efc_b)},
        {"mlp.experts.c_proj.weight", offsetof(gpt_block, eproj_w)},
        {"mlp.experts.c_proj.bias", offsetof(gpt_block, eproj_b)}};
    for (int l = 0; l < m->n_local; l++) {
        gpt_block *b = &blocks[l];
        memset(b, 0, sizeof(*b));
        int end = l + 1 < m->n_local ? m->block_t0[l + 1] : (m->i_lnf >= 0 ? m->i_lnf : m->n_tensors);
        for (int i = m->block_t0[l]; i < end; i++) {
            const char *suffix = strchr(strchr(t[i].name, '.') + 1, '.') + 1; /* past "h.N." */
            for (size_t f = 0; f < sizeof(F) / sizeof(F[0]); f++)
                if (strcmp(suffix, F[f].suffix) == 0)
                    *(float **)((char *)b + F[f].field) = base + t[i].offset;
        }
        b->moe = b->router_w != NULL;
    }
    *lnfw = m->i_lnf >= 0 ? base + t[m->i_lnf].offset : NULL;
    *lnfb = m->i_lnf >= 0 ? base + t[m->i_lnf + 1].offset : NULL;
}

void gpt_rebind(gpt_model *m) {
    bind(m, m->params, &m->wte, &m->wpe, &m->lnfw, &m->lnfb, m->blocks);
    if (m->grads) bind(m, m->grads, &m->dwte, &m->dwpe, &m->dlnfw, &m->dlnfb, m->dblocks);
}

/* A device buffer of `total` floats holding the first `keep` of old (freed), the tail zero. */
static float *grow_device(float *old, size_t keep, size_t total, const char *what) {
    float *p = ops_alloc(total * sizeof(float), what);
    ops_copy_d2d(p, old, keep * sizeof(float));
    ops_free(old);
    return p;
}

float *gpt_params_host(gpt_model *m) {
    if (!ops_is_device(m->params)) return m->params; /* cpu: the parameters are host memory */
    if (!m->params_host) m->params_host = mallocCheck((m->capacity ? m->capacity : 1) * sizeof(float));
    ops_copy_d2h(m->params_host, m->params, m->capacity * sizeof(float));
    return m->params_host;
}

void gpt_params_upload(gpt_model *m) {
    if (m->params_host && m->params_host != m->params)
        ops_copy_h2d(m->params, m->params_host, m->capacity * sizeof(float));
}

void gpt_reserve(gpt_model *m, size_t total) {
    mtCheck(total >= m->num_params, "gpt_reserve cannot shrink the parameter buffer");
    m->params = grow_device(m->params, m->num_params, total, "params");
    bind(m, m->params, &m->wte, &m->wpe, &m->lnfw, &m->lnfb, m->blocks);
    if (m->grads) {
        m->grads = grow_device(m->grads, m->num_params, total, "grads");
        bind(m, m->grads, &m->dwte, &m->dwpe, &m->dlnfw, &m->dlnfb, m->dblocks);
    }
    if (m->params_host && m->params_host != m->params) {
        free(m->params_host);
        m->params_host = NULL;
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

static int find_tensor(const gpt_model *m, const char *name) {
    for (int i = 0; i < m->n_tensors; i++)
        if (strcmp(m->tensors[i].name, name) == 0) return i;
    return -1;
}

void gpt_place_into_full(const gpt_model *src, const float *src_params, gpt_model *full) {
    float *fp = gpt_params_host(full);
    for (int i = 0; i < src->n_tensors; i++) {
        const gpt_tensor *t = &src->tensors[i];
        if (t->pp_tied_copy) continue; /* the first stage's wte is the one that counts */
        int j = find_tensor(full, t->name);
        mtCheck(j >= 0, "a stage tensor is missing from the full model");
        box_copy(fp + full->tensors[j].offset, t->g_shape, (float *)src_params + t->offset,
                 t->g_local, t->g_offset, t->g_ndim, 1);
    }
    gpt_params_upload(full);
}

void gpt_take_from_full(gpt_model *dst, const gpt_model *full) {
    const float *fp = gpt_params_host((gpt_model *)full);
    float *dp = gpt_params_host(dst);
    for (int i = 0; i < dst->n_tensors; i++) {
        const gpt_tensor *t = &dst->tensors[i];
        int j = find_tensor(full, t->name);
        mtCheck(j >= 0, "a shard tensor is missing from the full model");
        box_copy((float *)fp + full->tensors[j].offset, t->g_shape, dp + t->offset, t->g_local,
                 t->g_offset, t->g_ndim, 0);
    }
    gpt_params_upload(dst);
}

/* Fill one tensor (or draw and discard its values when this rank does not hold it) so the random
 * stream advances exactly as for the whole, unsharded model. */
static void init_tensor(gpt_model *m, float *hp, rng_state *rng, const char *name,
                        size_t gnumel, float resid_std) {
    size_t len = strlen(name);
    int is_bias = len > 5 && strcmp(name + len - 5, ".bias") == 0;
    int is_ln = strstr(name, "ln_") != NULL;
    int i = find_tensor(m, name);
    if (is_ln || is_bias) { /* constants: no random draws */
        if (i < 0) return;
        const gpt_tensor *t = &m->tensors[i];
        for (size_t j = 0; j < t->numel; j++) hp[t->offset + j] = is_bias ? 0.0f : 1.0f;
        return;
    }
    float std = strstr(name, "c_proj.weight") ? resid_std : 0.02f;
    if (i < 0) {
        for (size_t j = 0; j < 2 * gnumel; j++) (void)rng_u64(rng); /* rng_normal's 2 draws */
        return;
    }
    const gpt_tensor *t = &m->tensors[i];
    float *p = hp + t->offset;
    if (gnumel == t->numel) {
        for (size_t j = 0; j < t->numel; j++) p[j] = std * rng_normal(rng);
    } else { /* tensor-parallel shard: draw the global tensor, keep this rank's box */
        float *g = mallocCheck(gnumel * sizeof(float));
        for (size_t j = 0; j < gnumel; j++) g[j] = std * rng_normal(rng);
        box_copy(g, t->g_shape, p, t->g_local, t->g_offset, t->g_ndim, 0);
        free(g);
    }
}

void gpt_init_weights(gpt_model *m, uint64_t seed) {
    /* Walk the WHOLE model's tensors in order, so every tensor-/pipeline-parallel layout starts
     * from exactly the single-process weights (and both copies of the tied wte agree). */
    rng_state rng;
    rng_seed(&rng, seed);
    float *hp = gpt_params_host(m); /* the host mirror: weights drawn on the host, then uploaded */
    const gpt_config *c = &m->cfg;
    size_t C = c->d_model, V = c->vocab_size;
    float resid_std = 0.02f / sqrtf(2.0f * c->n_layer);
    init_tensor(m, hp, &rng, "wte.weight", V * C, resid_std);
    init_tensor(m, hp, &rng, "wpe.weight", (size_t)c->seq_len * C, resid_std);
    static const struct { const char *suffix; size_t rows, cols; } B[12] = {
        {"ln_1.weight", 1, 1}, {"ln_1.bias", 1, 1}, {"attn.c_attn.weight", 3, 1},
        {"attn.c_attn.bias", 3, 0}, {"attn.c_proj.weight", 1, 1}, {"attn.c_proj.bias", 1, 0},
        {"ln_2.weight", 1, 1}, {"ln_2.bias", 1, 0}, {"mlp.c_fc.weight", 4, 1},
        {"mlp.c_fc.bias", 4, 0}, {"mlp.c_proj.weight", 1, 4}, {"mlp.c_proj.bias", 1, 0}};
    char nm[64];
    size_t E = (size_t)c->n_experts;
    for (int l = 0; l < c->n_layer; l++) {
        int moe = block_is_moe(c, l);
        for (int k = 0; k < (moe ? 8 : 12); k++) { /* MoE blocks: attention part only here */
            snprintf(nm, sizeof(nm), "h.%d.%s", l, B[k].suffix);
            /* weights: (rows·C, cols·C); vectors: rows·C */
            size_t n = B[k].rows * C * (B[k].cols ? B[k].cols * C : 1);
            init_tensor(m, hp, &rng, nm, n, resid_std);
        }
        if (!moe) continue;
        snprintf(nm, sizeof(nm), "h.%d.mlp.router.weight", l);
        init_tensor(m, hp, &rng, nm, E * C, resid_std);
        snprintf(nm, sizeof(nm), "h.%d.mlp.experts.c_fc.weight", l);
        init_tensor(m, hp, &rng, nm, E * 4 * C * C, resid_std);
        snprintf(nm, sizeof(nm), "h.%d.mlp.experts.c_fc.bias", l);
        init_tensor(m, hp, &rng, nm, E * 4 * C, resid_std);
        snprintf(nm, sizeof(nm), "h.%d.mlp.experts.c_proj.weight", l);
        init_tensor(m, hp, &rng, nm, E * C * 4 * C, resid_std);
        snprintf(nm, sizeof(nm), "h.%d.mlp.experts.c_proj.bias", l);
        init_tensor(m, hp, &rng, nm, E * C, resid_std);
    }
    init_tensor(m, hp, &rng, "ln_f.weight", C, resid_std);
    init_tensor(m, hp, &rng, "ln_f.bias", C, resid_std);
    gpt_params_upload(m);
}

void gpt_free(gpt_model *m) {
    free(m->tensors);
    if (m->params_host != m->params) free(m->params_host);
    ops_free(m->params);
    ops_free(m->grads);
    free(m->blocks);
    free(m->dblocks);
    free(m->block_t0);
    gpt_free_activations(m);
    memset(m, 0, sizeof(*m));
}

int gpt_first_nonfinite(const gpt_model *m) {
    for (int i = 0; i < m->n_tensors; i++) {
        if (ops_first_nonfinite(m->params + m->tensors[i].offset, m->tensors[i].numel) >= 0)
            return i;
    }
    return -1;
}
