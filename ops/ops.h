/*
 * ops/ops.h — the kernels of a GPT-2 forward and backward pass, one backend-neutral interface.
 *
 * Every ops_<name> dispatches through the backend table of ops/ops_backend.h, chosen once at
 * start-up by ops_select ("cpu" | "guard" | "cuda"; config key `device`):
 *   cpu   ops/ops_cpu.c: OpenBLAS sgemm for every matmul, OpenMP element-wise, host memory;
 *   guard ops/ops_guard.c: the cpu kernels on memory that is mmap(PROT_NONE) except inside an
 *         op or a copy of the memory API, so any host access outside them faults at once;
 *   cuda  ops/ops_cuda*.cu (GPU=1 builds): cuBLAS + kernels on device memory.
 * All tensor pointers given to ops_* are DEVICE pointers (memory from ops_alloc), except where a
 * comment says HOST. Host code reaches device memory only through the memory API below
 * (docs/gpu.md: who owns what, where host copies happen and why).
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

/* ---- backend selection and memory API ------------------------------------------------------ */

/* Select the backend for the whole process: "cpu", "guard" or "cuda". The environment variable
 * MINITRAIN_DEVICE, when set, overrides `device` (so the test suite reruns every script on the
 * guard device unchanged). local_rank picks the GPU (local_rank % device count) for cuda.
 * Call before any ops_alloc; calling it again with the same device is a no-op. Returns 0, or -1
 * with one line in err: unknown name, "cuda" in a build without CUDA (GPU=1), no usable GPU, or
 * a different device after memory was allocated. Without a call the backend is cpu. */
int ops_select(const char *device, int local_rank, char *err, size_t errlen);
/* The selected backend's name ("cpu", "guard", "cuda") and its device's name (CPU: "cpu"). */
const char *ops_device(void);
const char *ops_device_name(void);
/* Bytes of the selected device's own memory (cuda: the GPU's total, cudaMemGetInfo), or 0 when
 * the backend computes on host memory (cpu, guard) — memory_limit = auto's figure there is the
 * host's (train/memory.h). */
double ops_device_memory_bytes(void);

/* Device memory, zeroed. `what` names the allocation in guard fault reports ("params", ...).
 * Exits with a message on failure (out of memory). ops_alloc(0, ..) returns a valid pointer. */
void *ops_alloc(size_t bytes, const char *what);
void ops_free(void *p); /* NULL ok */
void ops_zero(void *p, size_t bytes);
void ops_copy_h2d(void *dst_dev, const void *src_host, size_t bytes);
void ops_copy_d2h(void *dst_host, const void *src_dev, size_t bytes);
void ops_copy_d2d(void *dst_dev, const void *src_dev, size_t bytes);
/* Wait for all device work queued by this thread's backend (a no-op on cpu and guard). */
void ops_sync(void);
/* 1 if p points into device memory of the selected backend (cpu: never), for the comm split
 * (parallel/comm.h stages device buffers through host memory where MPI must read them). */
int ops_is_device(const void *p);
/* A host copy of n floats of device memory p, which the caller frees; NULL when p is host memory
 * already (device = cpu or NULL p), so the caller reads p itself — e.g. the gradient w.r.t. the
 * input embeddings, which comes from the device (safety/robust*.c). Exits on out of memory. */
float *ops_host_copy(const float *p, size_t n);
/* Convenience: one float device→host / host→device. */
float ops_get_f32(const float *dev);
void ops_set_f32(float *dev, float v);

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
/* ops_matmul_forward for decode (model/decode*.c): on the CPU backend with N <= 8 rows a kernel
 * that reads each weight once (ops/ops_cpu.h ops_cpu_matmul_rows) instead of sgemm, which packs a
 * copy of w first; elsewhere ops_matmul_forward. Training keeps sgemm (its results unchanged). */
void ops_matmul_forward_decode(float *out, const float *inp, const float *w, const float *bias,
                               int N, int C, int OC);
/* dinp (N,C) += dout @ w; dw (OC,C) += doutᵀ @ inp; dbias (OC) += column sums of dout.
 * Any of dinp, dw, dbias may be NULL to skip it. */
void ops_matmul_backward(float *dinp, float *dw, float *dbias, const float *dout, const float *inp,
                         const float *w, int N, int C, int OC);

/* The two halves of ops_matmul_backward and ops_layernorm_backward, for a backward split into B
 * (the input gradient, which the previous pipeline stage waits for) and W (the weight gradient,
 * which can run later: ZB-H1, parallel/pp.h; Qi et al. 2024). Each half does exactly what the
 * whole op does for its outputs, so B then W gives the whole op's result bit for bit.
 *   matmul:    dinp (N,C) += dout (N,OC) @ w (OC,C);   dw (OC,C) += doutᵀ @ inp, dbias (OC) +=
 *              column sums of dout (dbias may be NULL).
 *   layernorm: dinp (N,C) += the input gradient;       dw, db (C) += Σ_n x̂·dout, Σ_n dout, with
 *              x̂ = (inp - mean)·rstd from the forward's mean, rstd (N). */
void ops_matmul_backward_input(float *dinp, const float *dout, const float *w, int N, int C, int OC);
void ops_matmul_backward_weight(float *dw, float *dbias, const float *dout, const float *inp, int N,
                                int C, int OC);
void ops_layernorm_backward_input(float *dinp, const float *dout, const float *inp, const float *w,
                                  const float *mean, const float *rstd, int N, int C);
void ops_layernorm_backward_weight(float *dw, float *db, const float *dout, const float *inp,
                                   const float *mean, const float *rstd, int N, int C);

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

/* ---- ops that replace host loops over device tensors (docs/gpu.md) -------------------------- */

/* out (N, OC) += bias (OC), broadcast over rows: the bias of a row-parallel linear, added once
 * after the tensor-parallel all-reduce of the partial products. */
void ops_bias_add(float *out, const float *bias, int N, int OC);

/* Embedding of N independent rows, each with its own position (decode, continuous batching):
 * out (N, C) = wte[tokens[i]] (V, C) + wpe[positions[i]] (maxT, C); tokens, positions (N). */
void ops_embed_rows(float *out, const int *tokens, const int *positions, const float *wte,
                    const float *wpe, int N, int C);

/* pred (N) = argmax over V of each row of x (N, V); the FIRST maximum wins a tie. */
void ops_argmax_rows(int *pred, const float *x, int N, int V);

/* Index of the first element of x (n) that is NaN or ±Inf, or -1 if all are finite (returned to
 * the host). */
int64_t ops_first_nonfinite(const float *x, size_t n);

/* Multi-tensor sum of squares, one call per step for the global gradient norm:
 * out[i] = Σ_j x[i][j]² (j < n[i]) in double, i < count. x: a HOST array of device pointers;
 * n, out: HOST arrays (count). Each out[i] equals ops_sumsq(x[i], n[i]) exactly. */
void ops_sumsq_multi(double *out, const float *const *x, const size_t *n, int count);

/* ---- mixture-of-experts pieces (model/moe.c; N tokens, E experts, k = top_k in {1, 2}) ---- */

/* probs (N, E) in: router logits, out: softmax (max subtracted, sum in double); lse (N) =
 * logsumexp; expert (N, k): top-k by probability, slot 0 highest, ties to the lower id; gate
 * (N, k): k = 1 the top-1 probability, k = 2 the two renormalised to sum to 1. */
void ops_moe_route(float *probs, float *lse, int *expert, float *gate, int N, int E, int k);
/* sums (E + 1), HOST: sums[e] = Σ_t probs[t, e], sums[E] = Σ_t lse[t]² (t ascending). */
void ops_moe_prob_sums(double *sums, const float *probs, const float *lse, int N, int E);
/* xsend[send_row[t·k+s]] (C) = x[t] (C) for every kept (t, s) (send_row >= 0; -1 = dropped). */
void ops_moe_pack(float *xsend, const float *x, const int *send_row, int N, int k, int C);
/* y (N, C) = Σ over kept s (ascending) of gate[t·k+s] · ysend[send_row[t·k+s]]; 0 if none. */
void ops_moe_combine(float *y, const float *ysend, const int *send_row, const float *gate, int N,
                     int k, int C);
/* Backward of ops_moe_combine for each kept (t, s), row r: dgate[t·k+s] = dy[t]·ysend[r],
 * dxsend[r] = gate[t·k+s]·dy[t]; dropped: dgate = 0, dxsend untouched. dgate (N, k). */
void ops_moe_combine_backward(float *dgate, float *dxsend, const float *dy, const float *ysend,
                              const int *send_row, const float *gate, int N, int k, int C);
/* dx[t] (C) += rows[send_row[t·k+s]] for each kept (t, s), s ascending. */
void ops_moe_scatter_add(float *dx, const float *rows, const int *send_row, int N, int k, int C);
/* Router backward to the logits (model/moe.h has the formulas): d[e] = daux[e] plus the gates'
 * gradient through the k = 2 renormalisation, then softmax backward, plus the z-loss term
 * z_scale · lse[t] · probs[t, e]. dlogits (N, E) overwritten; daux (E). */
void ops_moe_router_backward(float *dlogits, const float *probs, const float *lse,
                             const int *expert, const float *dgate, const float *daux,
                             float z_scale, int N, int E, int k);

#endif /* MT_OPS_H */
