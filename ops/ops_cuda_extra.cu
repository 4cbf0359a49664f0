/*
 * ops/ops_cuda_extra.cu — the CUDA versions of these ops of ops/ops.h: embedding rows with their own positions, argmax rows, the
 * first non-finite element, multi-tensor sum of squares, and the mixture-of-experts pieces
 * (router softmax + top-k + gates, probability sums, pack, combine and its backward, scatter-add,
 * router backward).
 *
 * Why it is shaped so: MoE routing works on tiny rows (E experts, k <= 2), so one thread owns a
 * token and runs the CPU's loop (model/moe.c) unchanged — same tie rules (strict > scanning up:
 * the lower id wins), same double sums. Row copies (pack, combine, scatter) give one thread to
 * each (token, column) and walk the k slots in ascending order, as the CPU. The only atomic is
 * first_nonfinite's atomicMin on an index, whose result does not depend on the order.
 */
#include <math.h>

#include "ops/ops_cuda_impl.cuh"

extern "C" int ops_cuda_is_device(const void *p) {
    cudaPointerAttributes a;
    if (p == NULL || cudaPointerGetAttributes(&a, p) != cudaSuccess) {
        (void)cudaGetLastError();
        return 0;
    }
    return a.type == cudaMemoryTypeDevice;
}

/* ------------------------------------------------------------------------------------------ */
/* embedding rows, argmax, non-finite, multi sumsq                                            */

__global__ void k_embed_rows(float *out, const int *tokens, const int *positions,
                             const float *wte, const float *wpe, int N, int C) {
    const size_t n = (size_t)N * C, stride = (size_t)gridDim.x * blockDim.x;
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride) {
        const size_t r = i / C;
        const int c = (int)(i % C);
        out[i] = wte[(size_t)tokens[r] * C + c] + wpe[(size_t)positions[r] * C + c];
    }
}

extern "C" void ops_cuda_embed_rows(float *out, const int *tokens, const int *positions,
                                    const float *wte, const float *wpe, int N, int C) {
    const size_t n = (size_t)N * C;
    if (n == 0) return;
    k_embed_rows<<<ops_cuda_i_grid(n, 1), OPS_CUDA_BLOCK, 0, ops_cuda_i_stream()>>>(out, tokens, positions, wte, wpe, N, C);
    cudaLaunchCheck();
}

/* one block per row; (value, index) pairs combine to the larger value, ties to the lower index */
__global__ void k_argmax_rows(int *pred, const float *x, int V) {
    __shared__ float sv[OPS_CUDA_BLOCK];
    __shared__ int si[OPS_CUDA_BLOCK];
    const float *row = x + (size_t)blockIdx.x * V;
    float bv = -INFINITY;
    int bi = V; /* "none yet": loses every comparison below */
    for (int i = threadIdx.x; i < V; i += blockDim.x) {
        if (bi == V || row[i] > bv) {
            bv = row[i];
            bi = i;
        }
    }
    sv[threadIdx.x] = bv;
    si[threadIdx.x] = bi;
    __syncthreads();
    for (int s = blockDim.x / 2; s > 0; s >>= 1) {
        if (threadIdx.x < s) {
            const float ov = sv[threadIdx.x + s];
            const int oi = si[threadIdx.x + s];
            const int mine = si[threadIdx.x];
            if (oi != V && (mine == V || ov > sv[threadIdx.x] || (ov == sv[threadIdx.x] && oi < mine))) {
                sv[threadIdx.x] = ov;
                si[threadIdx.x] = oi;
            }
        }
        __syncthreads();
    }
    if (threadIdx.x == 0) pred[blockIdx.x] = si[0] == V ? 0 : si[0];
}

extern "C" void ops_cuda_argmax_rows(int *pred, const float *x, int N, int V) {
    if (N <= 0 || V <= 0) return;
    k_argmax_rows<<<N, OPS_CUDA_BLOCK, 0, ops_cuda_i_stream()>>>(pred, x, V);
    cudaLaunchCheck();
}

__global__ void k_first_nonfinite(unsigned long long *first, const float *x, size_t n) {
    const size_t stride = (size_t)gridDim.x * blockDim.x;
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride) {
        if (!isfinite(x[i])) {
            atomicMin(first, (unsigned long long)i);
            return; /* later indices of this thread are larger */
        }
    }
}

extern "C" int64_t ops_cuda_first_nonfinite(const float *x, size_t n) {
    if (n == 0) return -1;
    unsigned long long *d = (unsigned long long *)ops_cuda_i_scratch(OPS_CUDA_SCRATCH_OP, 256);
    cudaCheck(cudaMemsetAsync(d, 0xff, sizeof *d, ops_cuda_i_stream()));
    k_first_nonfinite<<<ops_cuda_i_grid(n, 1), OPS_CUDA_BLOCK, 0, ops_cuda_i_stream()>>>(d, x, n);
    cudaLaunchCheck();
    unsigned long long *h = (unsigned long long *)ops_cuda_i_pinned();
    ops_cuda_copy_d2h(h, d, sizeof *h);
    return *h == ~0ull ? -1 : (int64_t)*h;
}

extern "C" void ops_cuda_sumsq_multi(double *out, const float *const *x, const size_t *n,
                                     int count) {
    if (count <= 0) return;
    /* tensor i's parts at i*REDUCE_PARTS; unused parts stay 0 (adding 0.0 changes nothing) */
    const size_t bytes = (size_t)count * OPS_CUDA_REDUCE_PARTS * sizeof(double);
    double *parts = (double *)ops_cuda_i_scratch(OPS_CUDA_SCRATCH_OP, bytes);
    cudaCheck(cudaMemsetAsync(parts, 0, bytes, ops_cuda_i_stream()));
    for (int i = 0; i < count; i++)
        if (n[i] > 0) ops_cuda_i_sumsq_parts(parts + (size_t)i * OPS_CUDA_REDUCE_PARTS, x[i], n[i]);
    ops_cuda_i_sum_parts(out, parts, OPS_CUDA_REDUCE_PARTS, count);
}

/* ------------------------------------------------------------------------------------------ */
/* mixture of experts                                                                         */

/* one thread per token: model/moe.c's router loop */
__global__ void k_moe_route(float *probs, float *lse, int *expert, float *gate, int N, int E, int k) {
    const int t = blockIdx.x * blockDim.x + threadIdx.x;
    if (t >= N) return;
    float *pr = probs + (size_t)t * E;
    float mx = pr[0];
    for (int e = 1; e < E; e++) mx = pr[e] > mx ? pr[e] : mx;
    double sum = 0.0;
    for (int e = 0; e < E; e++) {
        pr[e] = expf(pr[e] - mx);
        sum += pr[e];
    }
    lse[t] = mx + (float)log(sum);
    const float inv = (float)(1.0 / sum);
    for (int e = 0; e < E; e++) pr[e] *= inv;
    int *ex = expert + (size_t)t * k;
    float *g = gate + (size_t)t * k;
    int best = 0;
    for (int e = 1; e < E; e++)
        if (pr[e] > pr[best]) best = e;
    ex[0] = best;
    if (k == 1) {
        g[0] = pr[best];
        return;
    }
    int second = best == 0 ? 1 : 0;
    for (int e = 0; e < E; e++)
        if (e != best && pr[e] > pr[second]) second = e;
    ex[1] = second;
    const float s = pr[best] + pr[second];
    g[0] = pr[best] / s;
    g[1] = pr[second] / s;
}

extern "C" void ops_cuda_moe_route(float *probs, float *lse, int *expert, float *gate, int N,
                                   int E, int k) {
    if (N <= 0) return;
    mtCheck((k == 1 || k == 2) && E >= k, "ops_cuda_moe_route: top_k must be 1 or 2, E >= k");
    k_moe_route<<<ops_cuda_i_grid((size_t)N, 1), OPS_CUDA_BLOCK, 0, ops_cuda_i_stream()>>>(probs, lse, expert, gate, N, E, k);
    cudaLaunchCheck();
}

/* block e < E: Σ_t probs[t, e]; block E: Σ_t lse[t]²; double, fixed order */
__global__ void k_moe_prob_sums(double *out, const float *probs, const float *lse, int N, int E) {
    const int e = blockIdx.x;
    double acc = 0.0;
    for (int t = threadIdx.x; t < N; t += blockDim.x) {
        if (e < E) {
            acc += probs[(size_t)t * E + e];
        } else {
            acc += (double)lse[t] * lse[t];
        }
    }
    acc = ops_cuda_i_block_sum(acc);
    if (threadIdx.x == 0) out[e] = acc;
}

extern "C" void ops_cuda_moe_prob_sums(double *sums, const float *probs, const float *lse, int N,
                                       int E) {
    double *d = (double *)ops_cuda_i_scratch(OPS_CUDA_SCRATCH_OP, (size_t)(E + 1) * sizeof(double));
    k_moe_prob_sums<<<E + 1, OPS_CUDA_BLOCK, 0, ops_cuda_i_stream()>>>(d, probs, lse, N, E);
    cudaLaunchCheck();
    ops_cuda_copy_d2h(sums, d, (size_t)(E + 1) * sizeof(double));
}

__global__ void k_moe_pack(float *xsend, const float *x, const int *send_row, int N, int k, int C) {
    const size_t n = (size_t)N * k * C, stride = (size_t)gridDim.x * blockDim.x;
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride) {
        const size_t ts = i / C;
        const int c = (int)(i % C);
        const int r = send_row[ts];
        if (r >= 0) xsend[(size_t)r * C + c] = x[(ts / k) * C + c];
    }
}

extern "C" void ops_cuda_moe_pack(float *xsend, const float *x, const int *send_row, int N, int k,
                                  int C) {
    const size_t n = (size_t)N * k * C;
    if (n == 0) return;
    k_moe_pack<<<ops_cuda_i_grid(n, 1), OPS_CUDA_BLOCK, 0, ops_cuda_i_stream()>>>(xsend, x, send_row, N, k, C);
    cudaLaunchCheck();
}

/* one thread per (t, c); mode 0: y = Σ_s gate·ysend[r] (overwrite); mode 1: y += Σ_s rows[r] */
__global__ void k_moe_gather(float *y, const float *rows, const int *send_row, const float *gate,
                             int N, int k, int C, int mode) {
    const size_t n = (size_t)N * C, stride = (size_t)gridDim.x * blockDim.x;
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride) {
        const size_t t = i / C;
        const int c = (int)(i % C);
        float acc = mode == 0 ? 0.0f : y[i];
        for (int s = 0; s < k; s++) {
            const int r = send_row[t * k + s];
            if (r < 0) continue;
            const float v = rows[(size_t)r * C + c];
            acc += mode == 0 ? gate[t * k + s] * v : v;
        }
        y[i] = acc;
    }
}

extern "C" void ops_cuda_moe_combine(float *y, const float *ysend, const int *send_row,
                                     const float *gate, int N, int k, int C) {
    const size_t n = (size_t)N * C;
    if (n == 0) return;
    k_moe_gather<<<ops_cuda_i_grid(n, 1), OPS_CUDA_BLOCK, 0, ops_cuda_i_stream()>>>(y, ysend, send_row, gate, N, k, C, 0);
    cudaLaunchCheck();
}

extern "C" void ops_cuda_moe_scatter_add(float *dx, const float *rows, const int *send_row, int N,
                                         int k, int C) {
    const size_t n = (size_t)N * C;
    if (n == 0) return;
    k_moe_gather<<<ops_cuda_i_grid(n, 1), OPS_CUDA_BLOCK, 0, ops_cuda_i_stream()>>>(dx, rows, send_row, NULL, N, k, C, 1);
    cudaLaunchCheck();
}

/* one warp per (t, s): dgate = dy[t]·ysend[r]; dxsend[r] = gate·dy[t] */
__global__ void k_moe_combine_bwd(float *dgate, float *dxsend, const float *dy, const float *ysend,
                                  const int *send_row, const float *gate, int NK, int k, int C) {
    const int ts = blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32, lane = threadIdx.x % 32;
    if (ts >= NK) return;
    const int r = send_row[ts];
    if (r < 0) {
        if (lane == 0) dgate[ts] = 0.0f;
        return;
    }
    const float *d = dy + (size_t)(ts / k) * C;
    const float *ys = ysend + (size_t)r * C;
    float *dx = dxsend + (size_t)r * C;
    const float g = gate[ts];
    float dot = 0.0f;
    for (int c = lane; c < C; c += 32) {
        dot += d[c] * ys[c];
        dx[c] = g * d[c];
    }
    dot = ops_cuda_i_warp_sum(dot);
    if (lane == 0) dgate[ts] = dot;
}

extern "C" void ops_cuda_moe_combine_backward(float *dgate, float *dxsend, const float *dy,
                                              const float *ysend, const int *send_row,
                                              const float *gate, int N, int k, int C) {
    const int NK = N * k;
    if (NK <= 0) return;
    k_moe_combine_bwd<<<ops_cuda_warp_row_blocks((size_t)NK), OPS_CUDA_BLOCK, 0, ops_cuda_i_stream()>>>(dgate, dxsend, dy, ysend, send_row, gate, NK, k, C);
    cudaLaunchCheck();
}

/* one thread per token: model/moe.c's router backward loop, the d row staged in dlogits */
__global__ void k_moe_router_bwd(float *dlogits, const float *probs, const float *lse,
                                 const int *expert, const float *dgate, const float *daux,
                                 float z_scale, int N, int E, int k) {
    const int t = blockIdx.x * blockDim.x + threadIdx.x;
    if (t >= N) return;
    const float *pr = probs + (size_t)t * E;
    float *dl = dlogits + (size_t)t * E;
    for (int e = 0; e < E; e++) dl[e] = daux[e];
    const int *ex = expert + (size_t)t * k;
    const float *dg = dgate + (size_t)t * k;
    if (k == 1) {
        dl[ex[0]] += dg[0];
    } else {
        const float p1 = pr[ex[0]], p2 = pr[ex[1]], s = p1 + p2, inv2 = 1.0f / (s * s);
        dl[ex[0]] += p2 * (dg[0] - dg[1]) * inv2;
        dl[ex[1]] += p1 * (dg[1] - dg[0]) * inv2;
    }
    float dot = 0.0f;
    for (int e = 0; e < E; e++) dot += pr[e] * dl[e];
    for (int e = 0; e < E; e++) dl[e] = pr[e] * (dl[e] - dot) + z_scale * lse[t] * pr[e];
}

extern "C" void ops_cuda_moe_router_backward(float *dlogits, const float *probs, const float *lse,
                                             const int *expert, const float *dgate,
                                             const float *daux, float z_scale, int N, int E,
                                             int k) {
    if (N <= 0) return;
    k_moe_router_bwd<<<ops_cuda_i_grid((size_t)N, 1), OPS_CUDA_BLOCK, 0, ops_cuda_i_stream()>>>(dlogits, probs, lse, expert, dgate, daux, z_scale, N, E, k);
    cudaLaunchCheck();
}
