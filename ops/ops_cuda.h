/*
 * ops/ops_cuda.h — the CUDA backend of ops/ops.h: the same ops on device pointers, plus the
 * device memory API and lifecycle (docs/gpu.md).
 *
 * Plain C, compilable without CUDA headers: the backend table (ops/ops_cuda_table.c, GPU=1
 * only) and the tests include it. Every ops_cuda_<op> has EXACTLY the signature and the
 * semantics of ops_<op> in ops/ops.h — read that header for shapes and conventions (backward
 * functions accumulate +=, a target of -1 is ignored, ...) — with every pointer a device pointer.
 * The implementations live in ops/ops_cuda.cu (memory API, element-wise, LayerNorm, encoder,
 * loss, optimizer) and ops/ops_cuda_gemm.cu (cuBLAS matmul, attention, decode).
 *
 * Work is queued on one compute stream (ops_cuda_stream); an op returns when its work is queued,
 * except those that return a value (softmax_crossentropy, sumsq) and the copies to/from the
 * host, which wait for it. Reductions are deterministic (no atomics; parts fixed by the problem
 * size, ops/ops_cuda_launch.h), so an fp32 rerun is bit-identical.
 *
 * Errors: a failed CUDA or cuBLAS call prints file:line, the call and a hint and exits 1 (the
 * trainer cannot go on with a broken device); a target id outside the vocabulary is a user error
 * (one line, exit 2), as on the CPU.
 */
#ifndef MT_OPS_CUDA_H
#define MT_OPS_CUDA_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* --- lifecycle and memory ------------------------------------------------------------------ */

/* Select device local_rank % device_count, create the compute stream and the cuBLAS handle.
 * The GEMM precision starts as fp32, or as the environment's MINITRAIN_PRECISION (fp32 | tf32 |
 * bf16: a run picks it without a config key). Idempotent. 0 ok; -1 with the reason in err (no
 * device, driver too old, a bad MINITRAIN_PRECISION, ...). */
int ops_cuda_init(int local_rank, char *err, size_t errlen);
/* The selected device's name ("NVIDIA H200"), or "" before ops_cuda_init. */
const char *ops_cuda_device_name(void);
/* Bytes of the selected device's memory (cudaMemGetInfo's total), or 0 before ops_cuda_init or
 * when the query fails. */
double ops_cuda_device_memory(void);
/* bytes of zeroed device memory (0 bytes: a valid 256-byte block); NULL when out of memory. */
void *ops_cuda_alloc(size_t bytes);
void ops_cuda_free(void *p);
void ops_cuda_zero(void *p, size_t bytes);
/* Copies; h2d and d2h return when the host buffer may be reused / read. */
void ops_cuda_copy_h2d(void *dst, const void *src, size_t bytes);
void ops_cuda_copy_d2h(void *dst, const void *src, size_t bytes);
void ops_cuda_copy_d2d(void *dst, const void *src, size_t bytes);
/* Wait for every queued op. */
void ops_cuda_sync(void);
/* The compute stream, as a cudaStream_t (NCCL runs its collectives on it). */
void *ops_cuda_stream(void);
/* GEMM precision: "fp32" (exact fp32 FMA), "tf32" (tensor cores, 10-bit mantissa inputs, fp32
 * accumulate), "bf16" (operands rounded to bf16, fp32 accumulate, fp32 outputs). 0 ok; -1 for an
 * unknown name. Element-wise ops, reductions, the optimizer and every stored tensor stay fp32. */
int ops_cuda_set_precision(const char *p);

/* --- the ops of ops/ops.h ---------------------------------------------------------------- */

void ops_cuda_encoder_forward(float *out, const int *inp, const float *wte, const float *wpe,
                              int B, int T, int C);
/* Deterministic without atomics: positions are bucketed by token id (a counting sort of the
 * BT ids on the host, one small copy each way), then each (token, column) is summed in position
 * order — the CPU's order, so the result matches it bit for bit. */
void ops_cuda_encoder_backward(float *dwte, float *dwpe, const float *dout, const int *inp, int B,
                               int T, int C);
void ops_cuda_layernorm_forward(float *out, float *mean, float *rstd, const float *inp,
                                const float *w, const float *b, int N, int C);
void ops_cuda_layernorm_backward(float *dinp, float *dw, float *db, const float *dout,
                                 const float *inp, const float *w, const float *mean,
                                 const float *rstd, int N, int C);
void ops_cuda_matmul_forward(float *out, const float *inp, const float *w, const float *bias,
                             int N, int C, int OC);
void ops_cuda_matmul_backward(float *dinp, float *dw, float *dbias, const float *dout,
                              const float *inp, const float *w, int N, int C, int OC);
/* The input and weight halves of the two backwards above (ops/ops.h), each the whole op's own
 * kernels for its outputs. */
void ops_cuda_matmul_backward_input(float *dinp, const float *dout, const float *w, int N, int C,
                                    int OC);
void ops_cuda_matmul_backward_weight(float *dw, float *dbias, const float *dout, const float *inp,
                                     int N, int C, int OC);
void ops_cuda_layernorm_backward_input(float *dinp, const float *dout, const float *inp,
                                       const float *w, const float *mean, const float *rstd, int N,
                                       int C);
void ops_cuda_layernorm_backward_weight(float *dw, float *db, const float *dout, const float *inp,
                                        const float *mean, const float *rstd, int N, int C);
void ops_cuda_attention_forward(float *out, float *att, const float *qkv, int B, int T, int NH,
                                int HS);
void ops_cuda_attention_backward(float *dqkv, float *datt, const float *dout, const float *qkv,
                                 const float *att, int B, int T, int NH, int HS);
/* scratch: a device buffer of at least t+1 floats, as on the CPU; the device runs all heads at
 * once and uses its own NH*(t+1) scratch instead (scratch may be NULL). */
void ops_cuda_attention_decode(float *out, const float *q, const float *kcache,
                               const float *vcache, int t, int NH, int HS, float *scratch);
void ops_cuda_gelu_forward(float *out, const float *inp, size_t n);
void ops_cuda_gelu_backward(float *dinp, const float *inp, const float *dout, size_t n);
void ops_cuda_residual_forward(float *out, const float *a, const float *b, size_t n);
void ops_cuda_add_inplace(float *y, const float *x, size_t n);
/* targets: device ints. The sum of the row losses is reduced on the device (in double, fixed
 * order) and comes back in one small copy with the first bad target, if any. */
double ops_cuda_softmax_crossentropy(float *logits, float *losses, const int *targets, int N,
                                     int V, float dloss);
double ops_cuda_sumsq(const float *x, size_t n);
void ops_cuda_scale(float *x, size_t n, float s);
void ops_cuda_adamw(float *p, const float *g, float *m, float *v, size_t n, float lr, float b1,
                    float b2, float eps, float wd, int t, float grad_scale);

/* --- row kernels, numerics checks and the MoE pieces of ops/ops.h; same semantics --------- */
/* Implemented in ops/ops_cuda_gemm.cu (bias_add) and ops/ops_cuda_extra.cu (the rest).  */

void ops_cuda_bias_add(float *out, const float *bias, int N, int OC);
void ops_cuda_embed_rows(float *out, const int *tokens, const int *positions, const float *wte,
                         const float *wpe, int N, int C);
void ops_cuda_argmax_rows(int *pred, const float *x, int N, int V);
/* The smallest index of a NaN/±Inf in x (n), or -1; one 8-byte copy back. */
int64_t ops_cuda_first_nonfinite(const float *x, size_t n);
/* x, n, out: HOST arrays (count); x[i] device pointers. One copy back of count doubles. */
void ops_cuda_sumsq_multi(double *out, const float *const *x, const size_t *n, int count);
void ops_cuda_moe_route(float *probs, float *lse, int *expert, float *gate, int N, int E, int k);
/* sums (E+1): HOST. */
void ops_cuda_moe_prob_sums(double *sums, const float *probs, const float *lse, int N, int E);
void ops_cuda_moe_pack(float *xsend, const float *x, const int *send_row, int N, int k, int C);
void ops_cuda_moe_combine(float *y, const float *ysend, const int *send_row, const float *gate,
                          int N, int k, int C);
void ops_cuda_moe_combine_backward(float *dgate, float *dxsend, const float *dy,
                                   const float *ysend, const int *send_row, const float *gate,
                                   int N, int k, int C);
void ops_cuda_moe_scatter_add(float *dx, const float *rows, const int *send_row, int N, int k,
                              int C);
void ops_cuda_moe_router_backward(float *dlogits, const float *probs, const float *lse,
                                  const int *expert, const float *dgate, const float *daux,
                                  float z_scale, int N, int E, int k);
/* 1 if p is device memory (cudaPointerGetAttributes), else 0: the comm layer's host/device split. */
int ops_cuda_is_device(const void *p);

#ifdef __cplusplus
}
#endif

#endif /* MT_OPS_CUDA_H */
