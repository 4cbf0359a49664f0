/*
 * model/flops.c — FLOPs per token of the model and MFU (the peak FLOP/s it divides by is
 * ops/peak.c's).
 */
#include "model/flops.h"

#include <math.h>

#include "core/check.h"

/* ---- FLOPs per token -------------------------------------------------------------------------- */

double flops_per_token_n(double n_matmul_params, int n_layer, int d_model, int seq_len) {
    if (!(n_matmul_params > 0) || n_layer < 1 || d_model < 1 || seq_len < 1) return -1;
    double L = n_layer, d = d_model, T = seq_len;
    return 6.0 * n_matmul_params + 12.0 * L * d * T;
}

/* Matmul parameters a token touches in the blocks (MoE: router + top_k experts), no LM head. */
static double block_matmul_params(const gpt_config *c) {
    double d = c->d_model;
    double attn = 3 * d * d /* qkv */ + d * d /* attn proj */;
    double mlp = 4 * d * d /* fc */ + 4 * d * d /* fc proj */;
    /* a MoE MLP: the router and the top_k experts a token is routed to (hidden H = 4d) */
    moe_config mc = {.C = c->d_model, .H = 4 * c->d_model, .E = c->n_experts, .top_k = c->top_k};
    double n = 0;
    for (int l = 0; l < c->n_layer; l++) {
        int moe = c->moe_every > 0 && (l + 1) % c->moe_every == 0;
        n += attn + (moe ? moe_active_matmul_params(&mc) : mlp);
    }
    return n;
}

static int flops_config_ok(const gpt_config *c) {
    if (c->n_layer < 1 || c->d_model < 1 || c->seq_len < 1 || c->vocab_size < 1) return 0;
    return !(c->moe_every > 0 && (c->n_experts < 1 || c->top_k < 1));
}

double flops_per_token(const gpt_config *c) {
    if (!flops_config_ok(c)) return -1;
    double n = (double)c->vocab_size * c->d_model /* LM head (V, d) */ + block_matmul_params(c);
    return flops_per_token_n(n, c->n_layer, c->d_model, c->seq_len);
}

double flops_recompute_per_token(const gpt_config *c, gpt_recompute recompute) {
    if (!flops_config_ok(c)) return -1;
    double core = 4.0 * c->n_layer * (double)c->d_model * c->seq_len; /* QKᵀ + A·V, forward */
    if (recompute == GPT_RECOMPUTE_SELECTIVE) return core;
    if (recompute == GPT_RECOMPUTE_FULL) return 2.0 * block_matmul_params(c) + core;
    return 0;
}

double flops_mfu(double flops_per_token, double tokens_per_s, double peak_per_rank,
                 int world_size) {
    if (!(peak_per_rank > 0) || !isfinite(peak_per_rank) || world_size < 1 ||
        !isfinite(flops_per_token) || !isfinite(tokens_per_s))
        return NAN;
    return flops_per_token * tokens_per_s / (peak_per_rank * world_size);
}
