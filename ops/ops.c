/*
 * ops/ops.c — the dispatch of ops/ops.h through the selected backend table
 * (ops/ops_backend.h), backend selection (config key `device`, env MINITRAIN_DEVICE), and the
 * cpu backend: host memory (64-byte aligned, zeroed) and the kernels of ops/ops_cpu*.c.
 *
 * Why every ops_<name> is a one-line forwarder rather than a macro: the public names stay real
 * functions (debuggers, profilers and the tests see them), and the table stays the only place
 * that knows which backend runs.
 */
#include "ops/ops.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/check.h"
#include "core/mem.h"
#include "parallel/comm.h"
#include "ops/ops_backend.h"
#include "ops/ops_cpu.h"

/* ---- cpu backend: host memory ------------------------------------------------------------ */

static void *cpu_alloc(size_t bytes, const char *what) {
    (void)what;
    void *p = NULL;
    size_t n = (bytes + 63) / 64 * 64;
    if (posix_memalign(&p, 64, n ? n : 64) != 0)
        return NULL;
    mem_prepare(p, n); /* huge pages, faulted now rather than by the first step (core/mem.h) */
    memset(p, 0, n ? n : 64);
    return p;
}
static void cpu_free(void *p) { free(p); }
static void cpu_zero(void *p, size_t bytes) {
    if (bytes)
        memset(p, 0, bytes);
}
static void cpu_copy(void *dst, const void *src, size_t bytes) {
    if (bytes && dst != src)
        memmove(dst, src, bytes);
}
static void cpu_sync(void) {}
static int cpu_is_device(const void *p) {
    (void)p;
    return 0;
}
static const char *cpu_device_name(void) { return "cpu"; }

const ops_backend ops_backend_cpu = {
    .name = "cpu",
    .init = NULL,
    .device_name = cpu_device_name,
    .alloc = cpu_alloc,
    .free = cpu_free,
    .zero = cpu_zero,
    .copy_h2d = cpu_copy,
    .copy_d2h = cpu_copy,
    .copy_d2d = cpu_copy,
    .sync = cpu_sync,
    .is_device = cpu_is_device,
    .encoder_forward = ops_cpu_encoder_forward,
    .encoder_backward = ops_cpu_encoder_backward,
    .layernorm_forward = ops_cpu_layernorm_forward,
    .layernorm_backward = ops_cpu_layernorm_backward,
    .matmul_forward = ops_cpu_matmul_forward,
    .matmul_backward = ops_cpu_matmul_backward,
    .matmul_backward_input = ops_cpu_matmul_backward_input,
    .matmul_backward_weight = ops_cpu_matmul_backward_weight,
    .layernorm_backward_input = ops_cpu_layernorm_backward_input,
    .layernorm_backward_weight = ops_cpu_layernorm_backward_weight,
    .attention_forward = ops_cpu_attention_forward,
    .attention_backward = ops_cpu_attention_backward,
    .attention_decode = ops_cpu_attention_decode,
    .gelu_forward = ops_cpu_gelu_forward,
    .gelu_backward = ops_cpu_gelu_backward,
    .residual_forward = ops_cpu_residual_forward,
    .add_inplace = ops_cpu_add_inplace,
    .softmax_crossentropy = ops_cpu_softmax_crossentropy,
    .sumsq = ops_cpu_sumsq,
    .scale = ops_cpu_scale,
    .adamw = ops_cpu_adamw,
    .bias_add = ops_cpu_bias_add,
    .embed_rows = ops_cpu_embed_rows,
    .argmax_rows = ops_cpu_argmax_rows,
    .first_nonfinite = ops_cpu_first_nonfinite,
    .sumsq_multi = ops_cpu_sumsq_multi,
    .moe_route = ops_cpu_moe_route,
    .moe_prob_sums = ops_cpu_moe_prob_sums,
    .moe_pack = ops_cpu_moe_pack,
    .moe_combine = ops_cpu_moe_combine,
    .moe_combine_backward = ops_cpu_moe_combine_backward,
    .moe_scatter_add = ops_cpu_moe_scatter_add,
    .moe_router_backward = ops_cpu_moe_router_backward,
};

/* ---- selection ------------------------------------------------------------------------------ */

static const ops_backend *g_backend = &ops_backend_cpu;
static int g_allocated; /* ops_alloc was called: the backend may no longer change */

const ops_backend *ops_current(void) { return g_backend; }

int ops_select(const char *device, int local_rank, char *err, size_t errlen) {
    const char *env = getenv("MINITRAIN_DEVICE");
    if (env && *env)
        device = env;
    if (!device || !*device)
        device = "cpu";
    const ops_backend *b = NULL;
    if (strcmp(device, "cpu") == 0) {
        b = &ops_backend_cpu;
    } else if (strcmp(device, "guard") == 0) {
        b = &ops_backend_guard;
    } else if (strcmp(device, "cuda") == 0) {
#ifdef MT_HAVE_CUDA
        b = &ops_backend_cuda;
#else
        snprintf(err, errlen, "device = cuda: this build has no CUDA (rebuild with make GPU=1)");
        return -1;
#endif
    } else {
        snprintf(err, errlen, "device must be cpu, guard or cuda (got '%s')", device);
        return -1;
    }
    if (b == g_backend)
        return 0;
    if (g_allocated) {
        snprintf(err, errlen, "device = %s: chosen after memory was allocated on %s", b->name,
                 g_backend->name);
        return -1;
    }
    if (b->init && b->init(local_rank, err, errlen) != 0)
        return -1;
    g_backend = b;
    /* collectives on device buffers: NCCL where a group has it, else staged through the host */
    static const comm_devmem devmem = {ops_is_device, ops_copy_h2d, ops_copy_d2h, ops_copy_d2d};
    comm_set_devmem(b == &ops_backend_cpu ? NULL : &devmem);
    return 0;
}

const char *ops_device(void) { return g_backend->name; }
const char *ops_device_name(void) { return g_backend->device_name(); }
double ops_device_memory_bytes(void) {
    return g_backend->device_memory ? g_backend->device_memory() : 0;
}

/* ---- memory API ----------------------------------------------------------------------------- */

void *ops_alloc(size_t bytes, const char *what) {
    g_allocated = 1;
    void *p = g_backend->alloc(bytes, what ? what : "?");
    if (!p) {
        fprintf(stderr, "minitrain: error: out of %s memory allocating %zu bytes for %s\n",
                g_backend->name, bytes, what ? what : "?");
        exit(MT_EXIT_ERROR);
    }
    return p;
}
void ops_free(void *p) {
    if (p)
        g_backend->free(p);
}
void ops_zero(void *p, size_t bytes) {
    if (bytes)
        g_backend->zero(p, bytes);
}
void ops_copy_h2d(void *dst, const void *src, size_t bytes) {
    if (bytes)
        g_backend->copy_h2d(dst, src, bytes);
}
void ops_copy_d2h(void *dst, const void *src, size_t bytes) {
    if (bytes)
        g_backend->copy_d2h(dst, src, bytes);
}
void ops_copy_d2d(void *dst, const void *src, size_t bytes) {
    if (bytes)
        g_backend->copy_d2d(dst, src, bytes);
}
void ops_sync(void) { g_backend->sync(); }
int ops_is_device(const void *p) { return p && g_backend->is_device(p); }
float *ops_host_copy(const float *p, size_t n) {
    if (!ops_is_device(p)) return NULL;
    float *h = mallocCheck((n ? n : 1) * sizeof(float));
    ops_copy_d2h(h, p, n * sizeof(float));
    return h;
}
float ops_get_f32(const float *dev) {
    float v;
    ops_copy_d2h(&v, dev, sizeof v);
    return v;
}
void ops_set_f32(float *dev, float v) { ops_copy_h2d(dev, &v, sizeof v); }

void ops_set_threads(int threads) { ops_cpu_set_threads(threads); }

/* ---- dispatch ------------------------------------------------------------------------------- */

void ops_encoder_forward(float *out, const int *inp, const float *wte, const float *wpe, int B,
                         int T, int C) {
    ops_current()->encoder_forward(out, inp, wte, wpe, B, T, C);
}
void ops_encoder_backward(float *dwte, float *dwpe, const float *dout, const int *inp, int B, int T,
                          int C) {
    ops_current()->encoder_backward(dwte, dwpe, dout, inp, B, T, C);
}
void ops_layernorm_forward(float *out, float *mean, float *rstd, const float *inp, const float *w,
                           const float *b, int N, int C) {
    ops_current()->layernorm_forward(out, mean, rstd, inp, w, b, N, C);
}
void ops_layernorm_backward(float *dinp, float *dw, float *db, const float *dout, const float *inp,
                            const float *w, const float *mean, const float *rstd, int N, int C) {
    ops_current()->layernorm_backward(dinp, dw, db, dout, inp, w, mean, rstd, N, C);
}
void ops_matmul_forward(float *out, const float *inp, const float *w, const float *bias, int N,
                        int C, int OC) {
    ops_current()->matmul_forward(out, inp, w, bias, N, C, OC);
}
void ops_matmul_forward_decode(float *out, const float *inp, const float *w, const float *bias,
                               int N, int C, int OC) {
    if (g_backend == &ops_backend_cpu && N <= OPS_GEMV_MAX_ROWS)
        ops_cpu_matmul_rows(out, inp, w, bias, N, C, OC);
    else
        ops_matmul_forward(out, inp, w, bias, N, C, OC);
}
void ops_matmul_backward(float *dinp, float *dw, float *dbias, const float *dout, const float *inp,
                         const float *w, int N, int C, int OC) {
    ops_current()->matmul_backward(dinp, dw, dbias, dout, inp, w, N, C, OC);
}
void ops_matmul_backward_input(float *dinp, const float *dout, const float *w, int N, int C, int OC) {
    ops_current()->matmul_backward_input(dinp, dout, w, N, C, OC);
}
void ops_matmul_backward_weight(float *dw, float *dbias, const float *dout, const float *inp, int N,
                                int C, int OC) {
    ops_current()->matmul_backward_weight(dw, dbias, dout, inp, N, C, OC);
}
void ops_layernorm_backward_input(float *dinp, const float *dout, const float *inp, const float *w,
                                  const float *mean, const float *rstd, int N, int C) {
    ops_current()->layernorm_backward_input(dinp, dout, inp, w, mean, rstd, N, C);
}
void ops_layernorm_backward_weight(float *dw, float *db, const float *dout, const float *inp,
                                   const float *mean, const float *rstd, int N, int C) {
    ops_current()->layernorm_backward_weight(dw, db, dout, inp, mean, rstd, N, C);
}
void ops_attention_forward(float *out, float *att, const float *qkv, int B, int T, int NH, int HS) {
    ops_current()->attention_forward(out, att, qkv, B, T, NH, HS);
}
void ops_attention_backward(float *dqkv, float *datt, const float *dout, const float *qkv,
                            const float *att, int B, int T, int NH, int HS) {
    ops_current()->attention_backward(dqkv, datt, dout, qkv, att, B, T, NH, HS);
}
void ops_attention_decode(float *out, const float *q, const float *kcache, const float *vcache,
                          int t, int NH, int HS, float *scratch) {
    ops_current()->attention_decode(out, q, kcache, vcache, t, NH, HS, scratch);
}
void ops_gelu_forward(float *out, const float *inp, size_t n) {
    ops_current()->gelu_forward(out, inp, n);
}
void ops_gelu_backward(float *dinp, const float *inp, const float *dout, size_t n) {
    ops_current()->gelu_backward(dinp, inp, dout, n);
}
void ops_residual_forward(float *out, const float *a, const float *b, size_t n) {
    ops_current()->residual_forward(out, a, b, n);
}
void ops_add_inplace(float *y, const float *x, size_t n) { ops_current()->add_inplace(y, x, n); }
double ops_softmax_crossentropy(float *logits, float *losses, const int *targets, int N, int V,
                                float dloss) {
    return ops_current()->softmax_crossentropy(logits, losses, targets, N, V, dloss);
}
double ops_sumsq(const float *x, size_t n) { return ops_current()->sumsq(x, n); }
void ops_scale(float *x, size_t n, float s) { ops_current()->scale(x, n, s); }
void ops_adamw(float *p, const float *g, float *m, float *v, size_t n, float lr, float b1, float b2,
               float eps, float wd, int t, float grad_scale) {
    ops_current()->adamw(p, g, m, v, n, lr, b1, b2, eps, wd, t, grad_scale);
}
void ops_bias_add(float *out, const float *bias, int N, int OC) {
    ops_current()->bias_add(out, bias, N, OC);
}
void ops_embed_rows(float *out, const int *tokens, const int *positions, const float *wte,
                    const float *wpe, int N, int C) {
    ops_current()->embed_rows(out, tokens, positions, wte, wpe, N, C);
}
void ops_argmax_rows(int *pred, const float *x, int N, int V) {
    ops_current()->argmax_rows(pred, x, N, V);
}
int64_t ops_first_nonfinite(const float *x, size_t n) {
    return ops_current()->first_nonfinite(x, n);
}
void ops_sumsq_multi(double *out, const float *const *x, const size_t *n, int count) {
    ops_current()->sumsq_multi(out, x, n, count);
}
void ops_moe_route(float *probs, float *lse, int *expert, float *gate, int N, int E, int k) {
    ops_current()->moe_route(probs, lse, expert, gate, N, E, k);
}
void ops_moe_prob_sums(double *sums, const float *probs, const float *lse, int N, int E) {
    ops_current()->moe_prob_sums(sums, probs, lse, N, E);
}
void ops_moe_pack(float *xsend, const float *x, const int *send_row, int N, int k, int C) {
    ops_current()->moe_pack(xsend, x, send_row, N, k, C);
}
void ops_moe_combine(float *y, const float *ysend, const int *send_row, const float *gate, int N,
                     int k, int C) {
    ops_current()->moe_combine(y, ysend, send_row, gate, N, k, C);
}
void ops_moe_combine_backward(float *dgate, float *dxsend, const float *dy, const float *ysend,
                              const int *send_row, const float *gate, int N, int k, int C) {
    ops_current()->moe_combine_backward(dgate, dxsend, dy, ysend, send_row, gate, N, k, C);
}
void ops_moe_scatter_add(float *dx, const float *rows, const int *send_row, int N, int k, int C) {
    ops_current()->moe_scatter_add(dx, rows, send_row, N, k, C);
}
void ops_moe_router_backward(float *dlogits, const float *probs, const float *lse,
                             const int *expert, const float *dgate, const float *daux,
                             float z_scale, int N, int E, int k) {
    ops_current()->moe_router_backward(dlogits, probs, lse, expert, dgate, daux, z_scale, N, E, k);
}
