/*
 * ops/ops_cpu.h — the CPU kernels (ops/ops_cpu.c, ops/ops_cpu_rows.c, ops/ops_cpu_moe.c):
 * ops_cpu_<name> has exactly the signature and semantics of ops_<name> in ops/ops.h, on host
 * memory. The cpu backend calls them directly; the guard backend (ops/ops_guard.c) calls them between opening
 * and closing its PROT_NONE memory. Nothing else includes this header: the model goes through
 * ops/ops.h.
 */
#ifndef MT_OPS_CPU_H
#define MT_OPS_CPU_H

#include <stddef.h>
#include <stdint.h>

void ops_cpu_set_threads(int threads);
void ops_cpu_encoder_forward(float *out, const int *inp, const float *wte, const float *wpe, int B,
                             int T, int C);
void ops_cpu_encoder_backward(float *dwte, float *dwpe, const float *dout, const int *inp, int B,
                              int T, int C);
void ops_cpu_layernorm_forward(float *out, float *mean, float *rstd, const float *inp,
                               const float *w, const float *b, int N, int C);
void ops_cpu_layernorm_backward(float *dinp, float *dw, float *db, const float *dout,
                                const float *inp, const float *w, const float *mean,
                                const float *rstd, int N, int C);
void ops_cpu_matmul_forward(float *out, const float *inp, const float *w, const float *bias, int N,
                            int C, int OC);

/* The decode matmul (ops/ops_cpu_gemv.c): out (N,OC) = inp (N,C) @ wᵀ (+ bias) for N <=
 * OPS_GEMV_MAX_ROWS rows, each weight read once (no packing copy), threads over OC; the same
 * dot products as ops_cpu_matmul_forward in a different summation order (fp32 rounding differs
 * in the last bits). Larger N falls through to ops_cpu_matmul_forward (sgemm). */
#define OPS_GEMV_MAX_ROWS 8
void ops_cpu_matmul_rows(float *out, const float *inp, const float *w, const float *bias, int N,
                         int C, int OC);
void ops_cpu_matmul_backward(float *dinp, float *dw, float *dbias, const float *dout,
                             const float *inp, const float *w, int N, int C, int OC);
void ops_cpu_matmul_backward_input(float *dinp, const float *dout, const float *w, int N, int C,
                                   int OC);
void ops_cpu_matmul_backward_weight(float *dw, float *dbias, const float *dout, const float *inp,
                                    int N, int C, int OC);
void ops_cpu_layernorm_backward_input(float *dinp, const float *dout, const float *inp,
                                      const float *w, const float *mean, const float *rstd, int N,
                                      int C);
void ops_cpu_layernorm_backward_weight(float *dw, float *db, const float *dout, const float *inp,
                                       const float *mean, const float *rstd, int N, int C);
void ops_cpu_attention_forward(float *out, float *att, const float *qkv, int B, int T, int NH,
                               int HS);
void ops_cpu_attention_backward(float *dqkv, float *datt, const float *dout, const float *qkv,
                                const float *att, int B, int T, int NH, int HS);
void ops_cpu_attention_decode(float *out, const float *q, const float *kcache, const float *vcache,
                              int t, int NH, int HS, float *scratch);
void ops_cpu_gelu_forward(float *out, const float *inp, size_t n);
void ops_cpu_gelu_backward(float *dinp, const float *inp, const float *dout, size_t n);
void ops_cpu_residual_forward(float *out, const float *a, const float *b, size_t n);
void ops_cpu_add_inplace(float *y, const float *x, size_t n);
double ops_cpu_softmax_crossentropy(float *logits, float *losses, const int *targets, int N, int V,
                                    float dloss);
double ops_cpu_sumsq(const float *x, size_t n);
void ops_cpu_scale(float *x, size_t n, float s);
void ops_cpu_adamw(float *p, const float *g, float *m, float *v, size_t n, float lr, float b1,
                   float b2, float eps, float wd, int t, float grad_scale);
void ops_cpu_bias_add(float *out, const float *bias, int N, int OC);
void ops_cpu_embed_rows(float *out, const int *tokens, const int *positions, const float *wte,
                        const float *wpe, int N, int C);
void ops_cpu_argmax_rows(int *pred, const float *x, int N, int V);
int64_t ops_cpu_first_nonfinite(const float *x, size_t n);
void ops_cpu_sumsq_multi(double *out, const float *const *x, const size_t *n, int count);
void ops_cpu_moe_route(float *probs, float *lse, int *expert, float *gate, int N, int E, int k);
void ops_cpu_moe_prob_sums(double *sums, const float *probs, const float *lse, int N, int E);
void ops_cpu_moe_pack(float *xsend, const float *x, const int *send_row, int N, int k, int C);
void ops_cpu_moe_combine(float *y, const float *ysend, const int *send_row, const float *gate,
                         int N, int k, int C);
void ops_cpu_moe_combine_backward(float *dgate, float *dxsend, const float *dy, const float *ysend,
                                  const int *send_row, const float *gate, int N, int k, int C);
void ops_cpu_moe_scatter_add(float *dx, const float *rows, const int *send_row, int N, int k,
                             int C);
void ops_cpu_moe_router_backward(float *dlogits, const float *probs, const float *lse,
                                 const int *expert, const float *dgate, const float *daux,
                                 float z_scale, int N, int E, int k);

#endif /* MT_OPS_CPU_H */
