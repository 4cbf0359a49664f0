/*
 * model/ring_attention.h — causal multi-head attention over a sequence split across a
 * context-parallel ring (ring attention: Liu et al. 2023, "Ring Attention with Blockwise
 * Transformers"; the head-tail chunking of parallel/cp.h balances the causal work).
 *
 * Each CP rank holds T/cp positions of every sequence (its two chunks, parallel/cp.h) and their
 * q, k, v for its heads. The forward passes the K/V block of every rank around the ring; each
 * rank scores its queries against the visiting keys and merges the block into its output with
 * the online softmax (Milakov & Gimelshein 2018; FlashAttention's rescaling): running max m and
 * sum l per query row, O ← O·e^(m_old − m_new) + e^(S − m_new)·V, then O /= l. The normalised
 * probabilities P = e^(S − lse) are kept in `att` (this rank's rows against all T keys, by global
 * key position), so the backward recomputes nothing: it passes K, V and the gradient accumulators
 * dK, dV around the ring once more (dK, dV end at their owners), with dS = P ⊙ (dP − D),
 * D = rowsum(dO ⊙ O) (FlashAttention-2's form of the softmax backward).
 *
 * Numerics: the same function as ops_attention_forward/backward on the whole sequence, summed in
 * another order (blocks, rescaling), so equal within fp32 rounding, not bit for bit.
 * Host memory only (the cpu device): the trainer refuses cp > 1 on other devices.
 */
#ifndef MT_RING_ATTENTION_H
#define MT_RING_ATTENTION_H

#include <stddef.h>

#include "parallel/comm.h"

/* Forward. qkv (B, Tl, 3·NH·HS) this rank's rows (Tl = T/cp, T = Tl·cp global), laid out as
 * ops_attention_forward's (q, k, v of NH heads); out (B, Tl, NH·HS); att (B, NH, Tl, T): the
 * causal softmax probabilities of each local query against every global key position (entries
 * of chunk pairs above the diagonal are not written and never read). Collective over cp (every
 * rank of the ring calls it with the same shapes). */
void ring_attention_forward(comm *cp, float *out, float *att, const float *qkv, int B, int Tl,
                            int NH, int HS);

/* Backward of ring_attention_forward. dout (B, Tl, NH·HS) the gradient of out; qkv, out and att
 * as the forward left them; datt (B, NH, Tl, T) scratch. Accumulates (+=) into dqkv
 * (B, Tl, 3·NH·HS) — the gradient of this rank's q and of its k, v summed over every rank's
 * queries. Collective over cp. */
void ring_attention_backward(comm *cp, float *dqkv, float *datt, const float *dout,
                             const float *qkv, const float *out, const float *att, int B, int Tl,
                             int NH, int HS);

/* The embedding of a context-parallel shard: out (B, Tl, C) = wte[inp] + wpe[position], with
 * the global positions of CP rank r's two chunks (parallel/cp.h; T = Tl·cp), as
 * ops_encoder_forward per chunk. inp (B, Tl) this rank's token ids. */
void ring_attention_embed_forward(float *out, const int *inp, const float *wte, const float *wpe,
                                  int B, int Tl, int C, int cp, int r);

/* Its backward: dwte[inp] += dout, dwpe[position] += dout (accumulates, as
 * ops_encoder_backward). The position gradients of the other chunks come from the other ranks:
 * summing gradients over the CP group completes dwpe and dwte. */
void ring_attention_embed_backward(float *dwte, float *dwpe, const float *dout, const int *inp,
                                   int B, int Tl, int C, int cp, int r);

#endif /* MT_RING_ATTENTION_H */
