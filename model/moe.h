/*
 * model/moe.h — a mixture-of-experts MLP layer (top-k routing, capacity, load-balancing loss)
 * with optional expert parallelism. It replaces the dense MLP of a transformer block; the
 * caller adds the residual.
 *
 *   logits = x @ W_rᵀ (N, E), no bias;  probs = softmax(logits) per token (max subtracted)
 *   top-k (k = 1 or 2) experts by probability, ties to the lower expert id; gates = the top-k
 *   probs, renormalised to sum to 1 when k = 2 (Shazeer et al. 2017 / GShard); for k = 1 the
 *   gate is the raw top-1 probability (Switch Transformer, Fedus et al. 2021). Renormalisation
 *   happens BEFORE capacity: a kept slot's gate still counts a dropped slot's probability.
 *   expert e: out = gelu_tanh(x @ W1[e]ᵀ + b1[e]) @ W2[e]ᵀ + b2[e]  (a GPT-2 MLP)
 *   y[t] = Σ over the KEPT slots s of t: gate[t,s] · expert_{e(t,s)}(x[t])   (0 if none kept)
 *
 * Capacity (capacity_factor cf > 0): per expert ceil(cf · N_group · k / E) assignments, N_group
 * = tokens over the EP group for this microbatch (Σ of every rank's N; N·ep when ranks hold N
 * each; N without EP). Assignments are ranked per expert by (slot, global token index) — ALL
 * first choices before any second choice, then token position, where the group's tokens are the
 * concatenation of its ranks' tokens in rank order — and those past capacity are DROPPED (the
 * token passes through the caller's residual only). cf = 0: dropless. So ep ranks each holding a
 * slice of a batch produce exactly what one process holding the whole batch produces.
 *
 * Scope (moe_config.per_rank): the above is the default, GROUP scope — capacity, aux and z over
 * the EP group's tokens, so ep ranks together equal ONE process running the group's
 * concatenated microbatch. per_rank = 1 (GShard's local groups, Megatron-LM's default) applies
 * capacity ceil(cf · N · k / E) to each rank's own tokens (priority (slot, position) among them)
 * and averages aux and z over this rank's N tokens: a rank's result then depends on its own
 * tokens only, so any ep equals one process running the SAME per-rank microbatches one after
 * another (the parity a trainer gets with a fixed per-rank batch size and gradient
 * accumulation). Experts are sharded and tokens exchanged identically in both scopes.
 *
 * Auxiliary losses, over the tokens of the scope (group scope: identical on every rank of the
 * group; n_scope = N_group, or N with per_rank):
 *   aux = α · E · Σ_i f_i · P_i   (Switch Transformer, Fedus et al. 2021, eq. 4) with
 *     f_i = (assignments to expert i over all k slots, BEFORE dropping) / (n_scope · k), Σ f = 1;
 *     P_i = mean over the scope's tokens of probs[t, i]. f is not differentiable (gradient only
 *     through P). Perfectly balanced routing (f_i = P_i = 1/E) gives exactly α; skew raises it.
 *   z = β · mean_t logsumexp(logits_t)²   (router z-loss, ST-MoE, Zoph et al. 2022, eq. 5).
 * Group scope: the caller adds aux + z to its loss ONCE per EP group and microbatch (every rank
 * of the group reports the same value: count it on one rank, or divide by ep) and passes
 * d(total)/d(aux + z) as aux_grad to every rank's moe_backward: each rank back-propagates the
 * group loss through its own tokens only, so the sum of router gradients over the group (the
 * data-parallel reduction) is the full gradient. per_rank: each rank's aux + z is its own
 * (count it on every rank, like the cross-entropy of its tokens).
 *
 * Expert parallelism (cfg.ep of size ep > 1; E % ep == 0): rank r holds experts
 * [r·E/ep, (r+1)·E/ep) and routes its own tokens; kept token rows go to their expert's rank with
 * all-to-all-v, experts run there, outputs come back the same way and are combined with the
 * gates locally (parallel/ep.h). Backward mirrors it. moe_forward/moe_backward are then
 * collective over cfg.ep: every rank of the group calls them, with its own N (may differ, may
 * be 0).
 *
 * Which gradients are which (for the trainer's reductions):
 *   DENSE  (replicated on every rank; reduce over the data-parallel group, like attention):
 *          router_w (E, C)
 *   EXPERT (this rank's E_local = E/ep experts; reduce over the expert-data-parallel group, the
 *          dp/ep ranks holding the same experts): fc_w (E_local, H, C), fc_b (E_local, H),
 *          proj_w (E_local, C, H), proj_b (E_local, C)
 * Without EP, E_local = E and every gradient is reduced over dp as usual.
 * With tensor parallelism the layer is replicated across the TP group (every TP rank holds and
 * computes the whole layer on the same replicated input; its gradients are identical there).
 */
#ifndef MT_MOE_H
#define MT_MOE_H

#include <stddef.h>

#include "parallel/comm.h"

typedef struct {
    int C;                 /* d_model */
    int H;                 /* expert hidden size (4·C for GPT-2) */
    int E;                 /* experts in the layer (over the whole EP group) */
    int top_k;             /* 1 or 2 (≤ E) */
    float capacity_factor; /* > 0, or 0 = dropless */
    float aux_coef;        /* α, ≥ 0 */
    float z_coef;          /* β, ≥ 0 */
    int per_rank;          /* 0: capacity and aux/z over the EP group; 1: over this rank's tokens */
    comm *ep;              /* expert-parallel group; NULL or size 1 = no EP */
} moe_config;

/* Pointers into the caller's flat parameter (or gradient) buffer. */
typedef struct {
    float *router_w; // (E, C)             dense
    float *fc_w;     // (E_local, H, C)    expert
    float *fc_b;     // (E_local, H)       expert
    float *proj_w;   // (E_local, C, H)    expert
    float *proj_b;   // (E_local, C)       expert
} moe_params;

/* Statistics of the last forward. Group values are the same on every rank of the EP group;
 * aux_loss and z_loss are group values in group scope, this rank's with per_rank. */
typedef struct {
    double aux_loss;   /* α · E · Σ f_i P_i over the scope (includes α) */
    double z_loss;     /* β · mean lse² over the scope (includes β) */
    int n_group;       /* tokens over the group */
    int capacity;      /* assignments per expert at most (per_rank: from this rank's tokens);
                          0 = dropless */
    int dropped;       /* this rank's (token, slot) assignments dropped (sum over ranks = total) */
    int dropped_group; /* assignments dropped over the group */
    int tokens_min, tokens_max; /* assignments per expert over the group, before capacity */
    double tokens_cv; /* their coefficient of variation (population std / mean; 0 if none) */
    const int *tokens_per_expert; /* (E) those assignments; points into the layer, valid until
                                     the next moe_forward of this layer */
} moe_stats;

typedef struct moe_layer moe_layer;

/* Check a configuration: sizes positive, top_k in {1, 2} and ≤ E, E divisible by the EP group
 * size, capacity_factor ≥ 0, coefficients ≥ 0 and finite. Returns 0, or -1 with one line in err
 * naming the offending value. */
int moe_config_check(const moe_config *cfg, char *err, size_t errlen);

/* A layer instance: the activations one forward keeps for its backward and the scratch memory,
 * for up to max_N tokens per rank (buffers that depend on how many tokens other ranks send are
 * grown on demand). Parameters are NOT owned: they come with every call. For several
 * microbatches in flight (pipeline schedules) create one instance per microbatch in flight.
 * Returns NULL with err on a bad config (see moe_config_check) or max_N < 0. */
moe_layer *moe_create(const moe_config *cfg, int max_N, char *err, size_t errlen);

/* Forward. x (N, C) → y (N, C), overwritten. N ≤ max_N; 0 allowed. x and p must stay
 * unchanged until the matching moe_backward (x is not copied). st may be NULL. With EP:
 * collective over cfg.ep. */
void moe_forward(moe_layer *l, const moe_params *p, const float *x, float *y, int N, moe_stats *st);

/* Backward of the last forward (consumes its saved state: one backward per forward).
 * dy (N, C); dx (N, C) += input gradient; grads += parameter gradients (every pointer set, same
 * shapes as the parameters), or grads = NULL for the input gradient only (attacks on the input). aux_grad = d(total loss)/d(aux + z) for this layer and microbatch
 * (0 = the auxiliary losses do not train the router). With EP: collective over cfg.ep. */
void moe_backward(moe_layer *l, const moe_params *p, moe_params *grads, const float *dy, float *dx,
                  float aux_grad);

void moe_free(moe_layer *l);

/* Matmul parameters a token touches in one MoE layer, for MFU (docs/mfu.md): the router E·C
 * plus top_k experts of 2·H·C each. Biases excluded, as for dense layers. */
double moe_active_matmul_params(const moe_config *cfg);

/* Total parameters of one layer's tensors for E_local experts: router E·C (dense) plus
 * E_local · (2·H·C + H + C) (expert). */
size_t moe_param_count(const moe_config *cfg, int E_local);

#endif /* MT_MOE_H */
