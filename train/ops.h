/*
 * train/ops.h — the kernels of a GPT-2 forward and backward pass, one backend-neutral interface.
 *
 * One backend exists: the CPU one (train/ops_cpu.c) runs every matmul through OpenBLAS sgemm —
 * attention's QKᵀ and PV included — and element-wise work with OpenMP, on host pointers. There is
 * no CUDA backend yet: `make GPU=1` adds only the NCCL communicator (parallel/comm_nccl.c), and
 * training runs these CPU kernels in every build. A CUDA backend (cuBLAS + kernels, DESIGN.md)
 * would implement these same functions on device pointers. The model (train/model.c) calls only
 * these.
 *
 * Conventions (as in llm.c):
 *   - fp32, row-major, contiguous unless a stride is given. N = number of rows = B*T.
 *   - Linear weights are stored (OC, C) — PyTorch nn.Linear layout — so out = inp @ wᵀ + b.
 *   - Backward functions ACCUMULATE (+=) into every gradient they produce, parameter and
 *     activation gradients alike; the caller zeroes buffers when a fresh sum is wanted. This makes
 *     gradient accumulation over microbatches and residual fan-out free.
 *   - Attention works on a packed qkv tensor (B, T, 3, NH, HS): Q for all heads, then K, then V,
 *     so a tensor-parallel rank holding NH/tp heads calls the same kernel with its local NH.
 */
#ifndef MT_OPS_H
#define MT_OPS_H

#include <stddef.h>
#include <stdint.h>

/* Threads used by the element-wise kernels and by sgemm. 0 = leave the library default. */
void ops_set_threads(int threads);

/* Token + position embedding.
 * out (B,T,C) = wte[inp[b,t]] (V,C) + wpe[t] (maxT,C). inp (B,T) token ids < V. */
void ops_encoder_forward(float *out, const int *inp, const float *wte, const float *wpe, int B,
                         int T, int C);
/* dwte (V,C) += scatter of dout rows by token id; dwpe (maxT,C) += sum over b of dout[b,t]. */
void ops_encoder_backward(float *dwte, float *dwpe, const float *dout, const int *inp, int B,
                          int T, int C);

/* LayerNorm over the last dimension, eps = 1e-5 (GPT-2).
 * out (N,C); mean, rstd (N) are saved for backward; w, b (C). */
void ops_layernorm_forward(float *out, float *mean, float *rstd, const float *inp, const float *w,
                           const float *b, int N, int C);
/* dinp (N,C) +=, dw (C) +=, db (C) += ; dout (N,C), inp (N,C), mean/rstd (N) from forward.
 * dw and db may both be NULL: the input gradient only (attacks on the input embeddings). */
void ops_layernorm_backward(float *dinp, float *dw, float *db, const float *dout, const float *inp,
                            const float *w, const float *mean, const float *rstd, int N, int C);

/* out (N,OC) = inp (N,C) @ wᵀ, w (OC,C), plus bias (OC) if bias != NULL. Overwrites out. */
void ops_matmul_forward(float *out, const float *inp, const float *w, const float *bias, int N,
                        int C, int OC);
/* dinp (N,C) += dout @ w; dw (OC,C) += doutᵀ @ inp; dbias (OC) += column sums of dout.
 * Any of dinp, dw, dbias may be NULL to skip it. */
void ops_matmul_backward(float *dinp, float *dw, float *dbias, const float *dout, const float *inp,
                         const float *w, int N, int C, int OC);

/* Causal multi-head self-attention (Vaswani et al. 2017, scaled by 1/sqrt(HS)).
 * qkv (B,T,3,NH,HS) → out (B,T,NH,HS) overwritten; att (B,NH,T,T) receives the softmax
 * probabilities (entries above the diagonal are 0) and is kept for backward. */
void ops_attention_forward(float *out, float *att, const float *qkv, int B, int T, int NH, int HS);
/* dqkv (B,T,3,NH,HS) += gradient; datt (B,NH,T,T) is scratch (contents on entry ignored). */
void ops_attention_backward(float *dqkv, float *datt, const float *dout, const float *qkv,
                            const float *att, int B, int T, int NH, int HS);

/* One new token's attention against a KV cache, for sampling and serving.
 * q (NH,HS) of the token at position t; kcache, vcache (maxT,NH,HS) with rows 0..t filled
 * (row t is the token's own k, v). out (NH,HS) overwritten. scratch: at least (t+1) floats. */
void ops_attention_decode(float *out, const float *q, const float *kcache, const float *vcache,
                          int t, int NH, int HS, float *scratch);

/* GELU, tanh approximation (Hendrycks & Gimpel 2016), as in GPT-2. out, inp (n). */
void ops_gelu_forward(float *out, const float *inp, size_t n);
/* dinp (n) += gelu'(inp) * dout. */
void ops_gelu_backward(float *dinp, const float *inp, const float *dout, size_t n);

/* out (n) = a + b. (Backward of a residual is an accumulate: ops_add_inplace.) */
void ops_residual_forward(float *out, const float *a, const float *b, size_t n);
/* y (n) += x. */
void ops_add_inplace(float *y, const float *x, size_t n);

/* Fused softmax + cross-entropy over V classes, numerically stable (max subtracted).
 * logits (N,V) is overwritten IN PLACE with dlogits = (softmax − onehot(target)) * dloss where
 * dloss is the gradient of the mean loss the caller wants (e.g. 1/(N*grad_accum)); if dloss == 0
 * the probabilities are left in place instead (eval only). losses (N) receives −log p[target].
 * targets (N) in [0, V); a target of −1 is ignored (loss 0, gradient 0).
 * Returns the sum of losses over the non-ignored rows. */
double ops_softmax_crossentropy(float *logits, float *losses, const int *targets, int N, int V,
                                float dloss);

/* Sum of squares of x (n), accumulated in double. Used for the global gradient norm. */
double ops_sumsq(const float *x, size_t n);
/* x (n) *= s. */
void ops_scale(float *x, size_t n, float s);

/* One AdamW step (Loshchilov & Hutter 2019) over n parameters, in place, with the gradient
 * first multiplied by grad_scale (global-norm clipping, fused to save a pass over memory):
 * g' = grad_scale·g; m = b1 m + (1-b1) g'; v = b2 v + (1-b2) g'²; mhat = m/(1-b1^t);
 * vhat = v/(1-b2^t); p -= lr * (mhat / (sqrt(vhat) + eps) + wd * p). t is the 1-based step
 * count. g is read only. */
void ops_adamw(float *p, const float *g, float *m, float *v, size_t n, float lr, float b1,
               float b2, float eps, float wd, int t, float grad_scale);

#endif /* MT_OPS_H */
