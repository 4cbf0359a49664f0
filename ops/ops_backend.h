/*
 * ops/ops_backend.h — the backend table behind ops/ops.h: one function pointer per op plus
 * the memory API, filled by each backend (cpu: ops/ops.c, guard: ops/ops_guard.c, cuda:
 * ops/ops_cuda_table.c in GPU=1 builds). ops_select (ops/ops.h) picks one for the process.
 *
 * Why a table of pointers and not link-time selection: one binary runs cpu, guard and (GPU=1)
 * cuda, chosen by the config key `device`, so the test suite reruns unchanged on the guard
 * device. The cost is one indirect call per op, nothing next to a kernel.
 *
 * A backend's op has exactly the signature and semantics of ops_<name> in ops/ops.h; every
 * pointer is that backend's device memory unless ops.h says HOST.
 */
#ifndef MT_OPS_BACKEND_H
#define MT_OPS_BACKEND_H

#include <stddef.h>
#include <stdint.h>

typedef struct {
    const char *name; /* "cpu", "guard", "cuda" */
    /* lifecycle: 0 ok, -1 with err (no device); NULL = nothing to do */
    int (*init)(int local_rank, char *err, size_t errlen);
    const char *(*device_name)(void);
    /* bytes of the device's own memory (cuda: cudaMemGetInfo's total); NULL = host memory */
    double (*device_memory)(void);
    /* memory API (ops/ops.h): alloc returns zeroed memory or NULL */
    void *(*alloc)(size_t bytes, const char *what);
    void (*free)(void *p);
    void (*zero)(void *p, size_t bytes);
    void (*copy_h2d)(void *dst, const void *src, size_t bytes);
    void (*copy_d2h)(void *dst, const void *src, size_t bytes);
    void (*copy_d2d)(void *dst, const void *src, size_t bytes);
    void (*sync)(void);
    int (*is_device)(const void *p);
    /* ops */
    void (*encoder_forward)(float *out, const int *inp, const float *wte, const float *wpe, int B,
                            int T, int C);
    void (*encoder_backward)(float *dwte, float *dwpe, const float *dout, const int *inp, int B,
                             int T, int C);
    void (*layernorm_forward)(float *out, float *mean, float *rstd, const float *inp,
                              const float *w, const float *b, int N, int C);
    void (*layernorm_backward)(float *dinp, float *dw, float *db, const float *dout,
                               const float *inp, const float *w, const float *mean,
                               const float *rstd, int N, int C);
    void (*matmul_forward)(float *out, const float *inp, const float *w, const float *bias, int N,
                           int C, int OC);
    void (*matmul_backward)(float *dinp, float *dw, float *dbias, const float *dout,
                            const float *inp, const float *w, int N, int C, int OC);
    /* the two halves of each backward, for schedules that run them apart (ZB-H1: B, then W) */
    void (*matmul_backward_input)(float *dinp, const float *dout, const float *w, int N, int C,
                                  int OC);
    void (*matmul_backward_weight)(float *dw, float *dbias, const float *dout, const float *inp,
                                   int N, int C, int OC);
    void (*layernorm_backward_input)(float *dinp, const float *dout, const float *inp,
                                     const float *w, const float *mean, const float *rstd, int N,
                                     int C);
    void (*layernorm_backward_weight)(float *dw, float *db, const float *dout, const float *inp,
                                      const float *mean, const float *rstd, int N, int C);
    void (*attention_forward)(float *out, float *att, const float *qkv, int B, int T, int NH,
                              int HS);
    void (*attention_backward)(float *dqkv, float *datt, const float *dout, const float *qkv,
                               const float *att, int B, int T, int NH, int HS);
    void (*attention_decode)(float *out, const float *q, const float *kcache, const float *vcache,
                             int t, int NH, int HS, float *scratch);
    void (*gelu_forward)(float *out, const float *inp, size_t n);
    void (*gelu_backward)(float *dinp, const float *inp, const float *dout, size_t n);
    void (*residual_forward)(float *out, const float *a, const float *b, size_t n);
    void (*add_inplace)(float *y, const float *x, size_t n);
    double (*softmax_crossentropy)(float *logits, float *losses, const int *targets, int N, int V,
                                   float dloss);
    double (*sumsq)(const float *x, size_t n);
    void (*scale)(float *x, size_t n, float s);
    void (*adamw)(float *p, const float *g, float *m, float *v, size_t n, float lr, float b1,
                  float b2, float eps, float wd, int t, float grad_scale);
    void (*bias_add)(float *out, const float *bias, int N, int OC);
    void (*embed_rows)(float *out, const int *tokens, const int *positions, const float *wte,
                       const float *wpe, int N, int C);
    void (*argmax_rows)(int *pred, const float *x, int N, int V);
    int64_t (*first_nonfinite)(const float *x, size_t n);
    void (*sumsq_multi)(double *out, const float *const *x, const size_t *n, int count);
    void (*moe_route)(float *probs, float *lse, int *expert, float *gate, int N, int E, int k);
    void (*moe_prob_sums)(double *sums, const float *probs, const float *lse, int N, int E);
    void (*moe_pack)(float *xsend, const float *x, const int *send_row, int N, int k, int C);
    void (*moe_combine)(float *y, const float *ysend, const int *send_row, const float *gate, int N,
                        int k, int C);
    void (*moe_combine_backward)(float *dgate, float *dxsend, const float *dy, const float *ysend,
                                 const int *send_row, const float *gate, int N, int k, int C);
    void (*moe_scatter_add)(float *dx, const float *rows, const int *send_row, int N, int k, int C);
    void (*moe_router_backward)(float *dlogits, const float *probs, const float *lse,
                                const int *expert, const float *dgate, const float *daux,
                                float z_scale, int N, int E, int k);
} ops_backend;

/* The selected backend (cpu until ops_select chose another). */
const ops_backend *ops_current(void);

/* The backends this build has; ops_backend_cuda (ops/ops_cuda_table.c) exists only in GPU=1
 * builds. */
extern const ops_backend ops_backend_cpu;
extern const ops_backend ops_backend_guard;
#ifdef MT_HAVE_CUDA
extern const ops_backend ops_backend_cuda;
#endif

#endif /* MT_OPS_BACKEND_H */
