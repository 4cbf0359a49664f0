/*
 * ops/ops_guard.c — the guard device: the cpu kernels on memory the host cannot touch.
 *
 * Every ops_alloc is its own mmap(PROT_NONE) region (plus one never-opened page after it, so an
 * op that runs past the end of its buffer faults too). The guard's ops and the memory API's
 * copies open exactly the allocations their pointer arguments point into (mprotect
 * PROT_READ|PROT_WRITE, reference-counted so concurrent decode threads can share one), call the
 * cpu kernel, and close them again. So any host code that reads or writes model memory outside
 * ops/ops.h faults at once, and the SIGSEGV handler names the address, the allocation it lies
 * in and the backtrace, then exits with status 86. A pointer argument that is NOT guard memory
 * (a host buffer handed to an op, which a GPU would reject) is refused the same way, naming the
 * op and the argument's position.
 *
 * This is what makes the CPU-only test suite prove the memory model of a GPU build: the same
 * suite reruns with device = guard (MINITRAIN_DEVICE=guard) and must give identical results.
 */
#define _GNU_SOURCE
#include <execinfo.h>
#include <pthread.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "core/check.h"
#include "ops/ops_backend.h"
#include "ops/ops_cpu.h"

#define GUARD_EXIT 86

typedef struct {
    char *base;
    size_t bytes;  /* what the caller asked for */
    size_t mapped; /* pages mapped, the trailing guard page included */
    int open;      /* reference count of ops/copies inside it */
    char what[40];
} guard_region;

static pthread_mutex_t g_lock = PTHREAD_MUTEX_INITIALIZER;
static guard_region *g_regions;
static volatile int g_n; /* read without the lock by the signal handler */
static int g_cap;
static size_t g_page;

/* Index of the region holding p (one past the end counts: zero-length views), -1 if none.
 * Caller holds g_lock (or is the signal handler). */
static int find_region(const void *p) {
    const char *c = p;
    for (int i = 0; i < g_n; i++)
        if (c >= g_regions[i].base && c <= g_regions[i].base + g_regions[i].bytes)
            return i;
    return -1;
}

static void set_prot(guard_region *r, int prot) {
    size_t len = (r->bytes + g_page - 1) / g_page * g_page;
    if (len && mprotect(r->base, len, prot) != 0) {
        perror("minitrain: guard: mprotect");
        exit(MT_EXIT_ERROR);
    }
}

static void fault_handler(int sig, siginfo_t *si, void *ctx) {
    (void)ctx;
    char msg[512];
    int i = find_region(si->si_addr);
    if (i < 0) { /* not ours: the default action (a crash with a core, as without the guard) */
        signal(sig, SIG_DFL);
        raise(sig);
        return;
    }
    const guard_region *r = &g_regions[i];
    int n = snprintf(msg, sizeof msg,
                     "minitrain: guard: stray host access to %p, byte %zu of guard allocation "
                     "'%s' (%zu bytes at %p%s): host code touched device memory outside "
                     "ops/ops.h and its memory API\n",
                     si->si_addr, (size_t)((char *)si->si_addr - r->base), r->what, r->bytes,
                     (void *)r->base,
                     (size_t)((char *)si->si_addr - r->base) >= r->bytes
                         ? ", past its end: an op overran its buffer"
                         : "");
    if (n > 0)
        (void)!write(2, msg, (size_t)n < sizeof msg ? (size_t)n : sizeof msg - 1);
    void *frames[32];
    int nf = backtrace(frames, 32);
    backtrace_symbols_fd(frames, nf, 2);
    _exit(GUARD_EXIT);
}

/* Install the fault handler unless it is in place already (another library, a test harness or
 * MPI may have installed its own since): checked at every allocation, so the first stray access
 * to any allocation is reported by the guard. Returns 0, or -1 if sigaction fails. */
static int install_handler(void) {
    struct sigaction old;
    if (sigaction(SIGSEGV, NULL, &old) == 0 && (old.sa_flags & SA_SIGINFO) &&
        old.sa_sigaction == fault_handler)
        return 0;
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_sigaction = fault_handler;
    sa.sa_flags = SA_SIGINFO;
    sigemptyset(&sa.sa_mask);
    if (sigaction(SIGSEGV, &sa, NULL) != 0 || sigaction(SIGBUS, &sa, NULL) != 0) return -1;
    return 0;
}

static int guard_init(int local_rank, char *err, size_t errlen) {
    (void)local_rank;
    g_page = (size_t)sysconf(_SC_PAGESIZE);
    if (install_handler() != 0) {
        snprintf(err, errlen, "device = guard: cannot install the SIGSEGV handler");
        return -1;
    }
    return 0;
}

static const char *guard_device_name(void) { return "guard (cpu kernels, PROT_NONE memory)"; }

static void *guard_alloc(size_t bytes, const char *what) {
    if (!g_page)
        g_page = (size_t)sysconf(_SC_PAGESIZE);
    (void)install_handler();
    size_t mapped = (bytes + g_page - 1) / g_page * g_page + g_page;
    void *p = mmap(NULL, mapped, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED)
        return NULL;
    pthread_mutex_lock(&g_lock);
    if (g_n == g_cap) {
        int cap = g_cap ? 2 * g_cap : 256;
        guard_region *q = realloc(g_regions, (size_t)cap * sizeof *q);
        mtCheck(q != NULL, "guard: out of memory for the allocation table");
        g_regions = q; /* the handler may read a stale pointer only while this runs */
        g_cap = cap;
    }
    guard_region *r = &g_regions[g_n];
    r->base = p;
    r->bytes = bytes;
    r->mapped = mapped;
    r->open = 0;
    snprintf(r->what, sizeof r->what, "%s", what);
    g_n++;
    pthread_mutex_unlock(&g_lock);
    return p;
}

static void guard_free(void *p) {
    pthread_mutex_lock(&g_lock);
    int i = find_region(p);
    mtCheck(i >= 0 && g_regions[i].base == (char *)p, "guard: ops_free of a pointer that is not "
                                                      "the start of a guard allocation");
    munmap(g_regions[i].base, g_regions[i].mapped);
    g_regions[i] = g_regions[g_n - 1];
    g_n--;
    pthread_mutex_unlock(&g_lock);
}

static int guard_is_device(const void *p) {
    pthread_mutex_lock(&g_lock);
    int i = find_region(p);
    pthread_mutex_unlock(&g_lock);
    return i >= 0;
}

/* Open the regions of every non-NULL pointer in d (n of them) for op; a pointer outside every
 * guard allocation is a host buffer handed to a device op: refused. */
static void guard_enter(const char *op, const void *const *d, int n) {
    pthread_mutex_lock(&g_lock);
    for (int j = 0; j < n; j++) {
        if (!d[j])
            continue;
        int i = find_region(d[j]);
        if (i < 0) {
            fprintf(stderr,
                    "minitrain: guard: %s: pointer argument %d (%p) is host memory, not device "
                    "memory from ops_alloc\n",
                    op, j + 1, d[j]);
            void *frames[32];
            backtrace_symbols_fd(frames, backtrace(frames, 32), 2);
            _exit(GUARD_EXIT);
        }
        if (g_regions[i].open++ == 0)
            set_prot(&g_regions[i], PROT_READ | PROT_WRITE);
    }
    pthread_mutex_unlock(&g_lock);
}

static void guard_leave(const void *const *d, int n) {
    pthread_mutex_lock(&g_lock);
    for (int j = 0; j < n; j++) {
        if (!d[j])
            continue;
        int i = find_region(d[j]);
        if (i >= 0 && --g_regions[i].open == 0)
            set_prot(&g_regions[i], PROT_NONE);
    }
    pthread_mutex_unlock(&g_lock);
}

/* A host pointer given where the memory API expects one must not be guard memory. */
static void guard_host(const char *op, const void *p) {
    if (guard_is_device(p)) {
        fprintf(stderr, "minitrain: guard: %s: the host argument %p is device memory\n", op, p);
        void *frames[32];
        backtrace_symbols_fd(frames, backtrace(frames, 32), 2);
        _exit(GUARD_EXIT);
    }
}

static void guard_zero(void *p, size_t bytes) {
    const void *d_[] = {p};
    guard_enter("ops_zero", d_, 1);
    memset(p, 0, bytes);
    guard_leave(d_, 1);
}
static void guard_copy_h2d(void *dst, const void *src, size_t bytes) {
    const void *d_[] = {dst};
    guard_host("ops_copy_h2d", src);
    guard_enter("ops_copy_h2d", d_, 1);
    memcpy(dst, src, bytes);
    guard_leave(d_, 1);
}
static void guard_copy_d2h(void *dst, const void *src, size_t bytes) {
    const void *d_[] = {src};
    guard_host("ops_copy_d2h", dst);
    guard_enter("ops_copy_d2h", d_, 1);
    memcpy(dst, src, bytes);
    guard_leave(d_, 1);
}
static void guard_copy_d2d(void *dst, const void *src, size_t bytes) {
    const void *d_[] = {dst, src};
    guard_enter("ops_copy_d2d", d_, 2);
    memmove(dst, src, bytes);
    guard_leave(d_, 2);
}
static void guard_sync(void) {}

/* ---- ops: open the arguments' regions, run the cpu kernel, close them ---------------------- */

static void g_encoder_forward(float *out, const int *inp, const float *wte, const float *wpe, int B,
                              int T, int C) {
    const void *d_[] = {out, inp, wte, wpe};
    guard_enter("ops_encoder_forward", d_, 4);
    ops_cpu_encoder_forward(out, inp, wte, wpe, B, T, C);
    guard_leave(d_, 4);
}

static void g_encoder_backward(float *dwte, float *dwpe, const float *dout, const int *inp, int B,
                               int T, int C) {
    const void *d_[] = {dwte, dwpe, dout, inp};
    guard_enter("ops_encoder_backward", d_, 4);
    ops_cpu_encoder_backward(dwte, dwpe, dout, inp, B, T, C);
    guard_leave(d_, 4);
}

static void g_layernorm_forward(float *out, float *mean, float *rstd, const float *inp,
                                const float *w, const float *b, int N, int C) {
    const void *d_[] = {out, mean, rstd, inp, w, b};
    guard_enter("ops_layernorm_forward", d_, 6);
    ops_cpu_layernorm_forward(out, mean, rstd, inp, w, b, N, C);
    guard_leave(d_, 6);
}

static void g_layernorm_backward(float *dinp, float *dw, float *db, const float *dout,
                                 const float *inp, const float *w, const float *mean,
                                 const float *rstd, int N, int C) {
    const void *d_[] = {dinp, dw, db, dout, inp, w, mean, rstd};
    guard_enter("ops_layernorm_backward", d_, 8);
    ops_cpu_layernorm_backward(dinp, dw, db, dout, inp, w, mean, rstd, N, C);
    guard_leave(d_, 8);
}

static void g_matmul_forward(float *out, const float *inp, const float *w, const float *bias, int N,
                             int C, int OC) {
    const void *d_[] = {out, inp, w, bias};
    guard_enter("ops_matmul_forward", d_, 4);
    ops_cpu_matmul_forward(out, inp, w, bias, N, C, OC);
    guard_leave(d_, 4);
}

static void g_matmul_backward(float *dinp, float *dw, float *dbias, const float *dout,
                              const float *inp, const float *w, int N, int C, int OC) {
    const void *d_[] = {dinp, dw, dbias, dout, inp, w};
    guard_enter("ops_matmul_backward", d_, 6);
    ops_cpu_matmul_backward(dinp, dw, dbias, dout, inp, w, N, C, OC);
    guard_leave(d_, 6);
}

static void g_matmul_backward_input(float *dinp, const float *dout, const float *w, int N, int C,
                                    int OC) {
    const void *d_[] = {dinp, dout, w};
    guard_enter("ops_matmul_backward_input", d_, 3);
    ops_cpu_matmul_backward_input(dinp, dout, w, N, C, OC);
    guard_leave(d_, 3);
}

static void g_matmul_backward_weight(float *dw, float *dbias, const float *dout, const float *inp,
                                     int N, int C, int OC) {
    const void *d_[] = {dw, dbias, dout, inp};
    guard_enter("ops_matmul_backward_weight", d_, 4);
    ops_cpu_matmul_backward_weight(dw, dbias, dout, inp, N, C, OC);
    guard_leave(d_, 4);
}

static void g_layernorm_backward_input(float *dinp, const float *dout, const float *inp,
                                       const float *w, const float *mean, const float *rstd, int N,
                                       int C) {
    const void *d_[] = {dinp, dout, inp, w, mean, rstd};
    guard_enter("ops_layernorm_backward_input", d_, 6);
    ops_cpu_layernorm_backward_input(dinp, dout, inp, w, mean, rstd, N, C);
    guard_leave(d_, 6);
}

static void g_layernorm_backward_weight(float *dw, float *db, const float *dout, const float *inp,
                                        const float *mean, const float *rstd, int N, int C) {
    const void *d_[] = {dw, db, dout, inp, mean, rstd};
    guard_enter("ops_layernorm_backward_weight", d_, 6);
    ops_cpu_layernorm_backward_weight(dw, db, dout, inp, mean, rstd, N, C);
    guard_leave(d_, 6);
}

static void g_attention_forward(float *out, float *att, const float *qkv, int B, int T, int NH,
                                int HS) {
    const void *d_[] = {out, att, qkv};
    guard_enter("ops_attention_forward", d_, 3);
    ops_cpu_attention_forward(out, att, qkv, B, T, NH, HS);
    guard_leave(d_, 3);
}

static void g_attention_backward(float *dqkv, float *datt, const float *dout, const float *qkv,
                                 const float *att, int B, int T, int NH, int HS) {
    const void *d_[] = {dqkv, datt, dout, qkv, att};
    guard_enter("ops_attention_backward", d_, 5);
    ops_cpu_attention_backward(dqkv, datt, dout, qkv, att, B, T, NH, HS);
    guard_leave(d_, 5);
}

static void g_attention_decode(float *out, const float *q, const float *kcache, const float *vcache,
                               int t, int NH, int HS, float *scratch) {
    const void *d_[] = {out, q, kcache, vcache, scratch};
    guard_enter("ops_attention_decode", d_, 5);
    ops_cpu_attention_decode(out, q, kcache, vcache, t, NH, HS, scratch);
    guard_leave(d_, 5);
}

static void g_gelu_forward(float *out, const float *inp, size_t n) {
    const void *d_[] = {out, inp};
    guard_enter("ops_gelu_forward", d_, 2);
    ops_cpu_gelu_forward(out, inp, n);
    guard_leave(d_, 2);
}

static void g_gelu_backward(float *dinp, const float *inp, const float *dout, size_t n) {
    const void *d_[] = {dinp, inp, dout};
    guard_enter("ops_gelu_backward", d_, 3);
    ops_cpu_gelu_backward(dinp, inp, dout, n);
    guard_leave(d_, 3);
}

static void g_residual_forward(float *out, const float *a, const float *b, size_t n) {
    const void *d_[] = {out, a, b};
    guard_enter("ops_residual_forward", d_, 3);
    ops_cpu_residual_forward(out, a, b, n);
    guard_leave(d_, 3);
}

static void g_add_inplace(float *y, const float *x, size_t n) {
    const void *d_[] = {y, x};
    guard_enter("ops_add_inplace", d_, 2);
    ops_cpu_add_inplace(y, x, n);
    guard_leave(d_, 2);
}

static double g_softmax_crossentropy(float *logits, float *losses, const int *targets, int N, int V,
                                     float dloss) {
    const void *d_[] = {logits, losses, targets};
    guard_enter("ops_softmax_crossentropy", d_, 3);
    double r_ = ops_cpu_softmax_crossentropy(logits, losses, targets, N, V, dloss);
    guard_leave(d_, 3);
    return r_;
}

static double g_sumsq(const float *x, size_t n) {
    const void *d_[] = {x};
    guard_enter("ops_sumsq", d_, 1);
    double r_ = ops_cpu_sumsq(x, n);
    guard_leave(d_, 1);
    return r_;
}

static void g_scale(float *x, size_t n, float s) {
    const void *d_[] = {x};
    guard_enter("ops_scale", d_, 1);
    ops_cpu_scale(x, n, s);
    guard_leave(d_, 1);
}

static void g_adamw(float *p, const float *g, float *m, float *v, size_t n, float lr, float b1,
                    float b2, float eps, float wd, int t, float grad_scale) {
    const void *d_[] = {p, g, m, v};
    guard_enter("ops_adamw", d_, 4);
    ops_cpu_adamw(p, g, m, v, n, lr, b1, b2, eps, wd, t, grad_scale);
    guard_leave(d_, 4);
}

static void g_bias_add(float *out, const float *bias, int N, int OC) {
    const void *d_[] = {out, bias};
    guard_enter("ops_bias_add", d_, 2);
    ops_cpu_bias_add(out, bias, N, OC);
    guard_leave(d_, 2);
}

static void g_embed_rows(float *out, const int *tokens, const int *positions, const float *wte,
                         const float *wpe, int N, int C) {
    const void *d_[] = {out, tokens, positions, wte, wpe};
    guard_enter("ops_embed_rows", d_, 5);
    ops_cpu_embed_rows(out, tokens, positions, wte, wpe, N, C);
    guard_leave(d_, 5);
}

static void g_argmax_rows(int *pred, const float *x, int N, int V) {
    const void *d_[] = {pred, x};
    guard_enter("ops_argmax_rows", d_, 2);
    ops_cpu_argmax_rows(pred, x, N, V);
    guard_leave(d_, 2);
}

static int64_t g_first_nonfinite(const float *x, size_t n) {
    const void *d_[] = {x};
    guard_enter("ops_first_nonfinite", d_, 1);
    int64_t r_ = ops_cpu_first_nonfinite(x, n);
    guard_leave(d_, 1);
    return r_;
}

static void g_moe_route(float *probs, float *lse, int *expert, float *gate, int N, int E, int k) {
    const void *d_[] = {probs, lse, expert, gate};
    guard_enter("ops_moe_route", d_, 4);
    ops_cpu_moe_route(probs, lse, expert, gate, N, E, k);
    guard_leave(d_, 4);
}

static void g_moe_prob_sums(double *sums, const float *probs, const float *lse, int N, int E) {
    const void *d_[] = {probs, lse};
    guard_enter("ops_moe_prob_sums", d_, 2);
    ops_cpu_moe_prob_sums(sums, probs, lse, N, E);
    guard_leave(d_, 2);
}

static void g_moe_pack(float *xsend, const float *x, const int *send_row, int N, int k, int C) {
    const void *d_[] = {xsend, x, send_row};
    guard_enter("ops_moe_pack", d_, 3);
    ops_cpu_moe_pack(xsend, x, send_row, N, k, C);
    guard_leave(d_, 3);
}

static void g_moe_combine(float *y, const float *ysend, const int *send_row, const float *gate,
                          int N, int k, int C) {
    const void *d_[] = {y, ysend, send_row, gate};
    guard_enter("ops_moe_combine", d_, 4);
    ops_cpu_moe_combine(y, ysend, send_row, gate, N, k, C);
    guard_leave(d_, 4);
}

static void g_moe_combine_backward(float *dgate, float *dxsend, const float *dy, const float *ysend,
                                   const int *send_row, const float *gate, int N, int k, int C) {
    const void *d_[] = {dgate, dxsend, dy, ysend, send_row, gate};
    guard_enter("ops_moe_combine_backward", d_, 6);
    ops_cpu_moe_combine_backward(dgate, dxsend, dy, ysend, send_row, gate, N, k, C);
    guard_leave(d_, 6);
}

static void g_moe_scatter_add(float *dx, const float *rows, const int *send_row, int N, int k,
                              int C) {
    const void *d_[] = {dx, rows, send_row};
    guard_enter("ops_moe_scatter_add", d_, 3);
    ops_cpu_moe_scatter_add(dx, rows, send_row, N, k, C);
    guard_leave(d_, 3);
}

static void g_moe_router_backward(float *dlogits, const float *probs, const float *lse,
                                  const int *expert, const float *dgate, const float *daux,
                                  float z_scale, int N, int E, int k) {
    const void *d_[] = {dlogits, probs, lse, expert, dgate, daux};
    guard_enter("ops_moe_router_backward", d_, 6);
    ops_cpu_moe_router_backward(dlogits, probs, lse, expert, dgate, daux, z_scale, N, E, k);
    guard_leave(d_, 6);
}

static void g_sumsq_multi(double *out, const float *const *x, const size_t *n, int count) {
    for (int i = 0; i < count; i++) {
        const void *d_[] = {n[i] ? x[i] : NULL};
        guard_enter("ops_sumsq_multi", d_, 1);
        out[i] = n[i] ? ops_cpu_sumsq(x[i], n[i]) : 0.0;
        guard_leave(d_, 1);
    }
}

const ops_backend ops_backend_guard = {
    .name = "guard",
    .init = guard_init,
    .device_name = guard_device_name,
    .alloc = guard_alloc,
    .free = guard_free,
    .zero = guard_zero,
    .copy_h2d = guard_copy_h2d,
    .copy_d2h = guard_copy_d2h,
    .copy_d2d = guard_copy_d2d,
    .sync = guard_sync,
    .is_device = guard_is_device,
    .encoder_forward = g_encoder_forward,
    .encoder_backward = g_encoder_backward,
    .layernorm_forward = g_layernorm_forward,
    .layernorm_backward = g_layernorm_backward,
    .matmul_forward = g_matmul_forward,
    .matmul_backward = g_matmul_backward,
    .matmul_backward_input = g_matmul_backward_input,
    .matmul_backward_weight = g_matmul_backward_weight,
    .layernorm_backward_input = g_layernorm_backward_input,
    .layernorm_backward_weight = g_layernorm_backward_weight,
    .attention_forward = g_attention_forward,
    .attention_backward = g_attention_backward,
    .attention_decode = g_attention_decode,
    .gelu_forward = g_gelu_forward,
    .gelu_backward = g_gelu_backward,
    .residual_forward = g_residual_forward,
    .add_inplace = g_add_inplace,
    .softmax_crossentropy = g_softmax_crossentropy,
    .sumsq = g_sumsq,
    .scale = g_scale,
    .adamw = g_adamw,
    .bias_add = g_bias_add,
    .embed_rows = g_embed_rows,
    .argmax_rows = g_argmax_rows,
    .first_nonfinite = g_first_nonfinite,
    .sumsq_multi = g_sumsq_multi,
    .moe_route = g_moe_route,
    .moe_prob_sums = g_moe_prob_sums,
    .moe_pack = g_moe_pack,
    .moe_combine = g_moe_combine,
    .moe_combine_backward = g_moe_combine_backward,
    .moe_scatter_add = g_moe_scatter_add,
    .moe_router_backward = g_moe_router_backward,
};
