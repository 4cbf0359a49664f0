/*
 * model/flops.h — FLOPs per token and MFU; the peak FLOP/s (measured and theoretical) is
 * ops/peak.h's. Together the one place both sides of the MFU fraction are defined (the trainer
 * and bench/ only call these).
 *
 * MFU = flops_per_token × tokens/s ÷ peak FLOP/s (docs/design.md, "What good means").
 * The numerator is the model's FLOPs (what the math needs, not what the kernels happen to do);
 * the denominator is, on CPUs, both a measured sgemm peak (the best this machine's BLAS reaches on
 * a large square matmul) and a theoretical peak (cores × clock × FLOP/cycle of the ISA); on GPUs a
 * table by device name. For a job, the denominator is the per-rank peak × world size.
 * docs/mfu.md explains every choice and its sources.
 */
#ifndef MT_FLOPS_H
#define MT_FLOPS_H

#include <stddef.h>

#include "model/model.h"

/* Training FLOPs per token of the WHOLE model cfg describes (forward + backward; its tp/pp/ep
 * split changes who does the work, not how much), following PaLM (Chowdhery et al. 2022,
 * appendix B) and Kaplan et al. 2020 (section 2.1, the "6N" rule):
 *
 *     flops = 6·N + 12·L·d·T
 *
 *   N   = matmul parameters one token touches:
 *         dense layer: 12·d² (qkv 3d², attention out-proj d², fc 4d², fc-proj 4d²);
 *         MoE layer (cfg->moe_every > 0 and (l + 1) % moe_every == 0): 4·d² of attention, the
 *         router E·d, and only the top_k ACTIVE experts' fc and fc-proj, top_k·2·H·d with
 *         H = 4·d (model/moe.h moe_active_matmul_params; a dropped assignment is still counted);
 *         plus the LM head V·d. The head is counted although it is tied to the token embedding:
 *         tying shares the storage, but the head is still a (T,d)×(d,V) matmul.
 *         Excluded: embedding lookups (token, position: a gather, no FLOPs), biases, LayerNorm,
 *         GELU, softmax, top-k routing — not matmuls, O(d) per token.
 *   6·N = 2 FLOPs per multiply-add × (1 forward + 2 backward: input and weight gradients).
 *   12·L·d·T = attention scores QKᵀ and the weighted sum A·V: 2·T·d FLOPs each per token per
 *         layer forward, ×3 for forward + backward, over the FULL T×T matrix — no halving for the
 *         causal mask (PaLM's convention; a causal-aware count would be 6·L·d·T).
 *   T   = cfg->seq_len (the trainer trains full windows of seq_len tokens; bench/ sets the T it
 *         runs).
 * Units: FLOPs per token (a training token, i.e. one position of one sequence).
 * Returns -1 when n_layer, d_model, seq_len or vocab_size is < 1, or a MoE config has
 * n_experts or top_k < 1. */
double flops_per_token(const gpt_config *cfg);

/* The same formula from an explicit N (matmul parameters a token touches): 6·N + 12·L·d·T.
 * Returns -1 when n_matmul_params <= 0 or any int argument is < 1. */
double flops_per_token_n(double n_matmul_params, int n_layer, int d_model, int seq_len);

/* The FLOPs per token that activation recompute (model/model.h gpt_recompute) adds, for
 * hardware FLOPs utilisation (HFU; Chowdhery et al. 2022, PaLM, appendix B: HFU counts the
 * recomputation, MFU does not):
 *   NONE      0
 *   SELECTIVE 4·L·d·T: QKᵀ and A·V of every layer again (2·T·d each per token, full T×T as in
 *             flops_per_token)
 *   FULL      2·N_blocks + 4·L·d·T: every block's forward again (N_blocks = the blocks' matmul
 *             parameters a token touches, MoE: router + top_k experts; not the LM head).
 * HFU = (flops_per_token + flops_recompute_per_token) × tokens/s ÷ peak (flops_mfu's form).
 * Returns -1 for a config flops_per_token refuses. */
double flops_recompute_per_token(const gpt_config *cfg, gpt_recompute recompute);

/* MFU as a fraction of the job's peak:
 *     flops_per_token × tokens_per_s ÷ (peak_per_rank × world_size)
 * tokens_per_s is the job's (global batch tokens per step ÷ step time), so the numerator is the
 * FLOP/s of the whole job, and every rank — whatever its tp/pp/dp/ep coordinate — adds one
 * per-rank peak to the denominator. NAN when peak_per_rank <= 0, world_size < 1 or an input is
 * not finite (an unknown peak must show as unknown, never as 0 or a silent -1). */
double flops_mfu(double flops_per_token, double tokens_per_s, double peak_per_rank,
                 int world_size);

#endif /* MT_FLOPS_H */
