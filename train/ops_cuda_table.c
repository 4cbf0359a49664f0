/*
 * train/ops_cuda_table.c — the cuda entry of the backend table (train/ops_backend.h), filled from
 * the ops_cuda_<name> kernels of train/ops_cuda*.cu (declared in train/ops_cuda.h, a plain C
 * header). Compiled to something only in GPU=1 builds that have those kernels
 * (MT_HAVE_CUDA_KERNELS, set by the Makefile when train/ops_cuda.h exists); elsewhere this file
 * is empty and device = cuda is refused with one line (train/ops.c).
 *
 * The memory API adapts the contract's ops_cuda_alloc(bytes) to the table's (bytes, what): the
 * name only matters to the guard device. is_device asks the CUDA runtime, so the comm split
 * (parallel/comm_dev.c) sends device buffers to NCCL and host scalars to MPI.
 */
#ifdef MT_HAVE_CUDA_KERNELS
#include <cuda_runtime.h>
#include <stddef.h>

#include "train/ops_backend.h"
#include "train/ops_cuda.h"

static void *cuda_alloc(size_t bytes, const char *what) {
    (void)what;
    return ops_cuda_alloc(bytes ? bytes : 1);
}

static int cuda_is_device(const void *p) {
    struct cudaPointerAttributes a;
    if (cudaPointerGetAttributes(&a, p) != cudaSuccess) {
        (void)cudaGetLastError(); /* clear the sticky error of a host pointer */
        return 0;
    }
    return a.type == cudaMemoryTypeDevice || a.type == cudaMemoryTypeManaged;
}

const ops_backend ops_backend_cuda = {
    .name = "cuda",
    .init = ops_cuda_init,
    .device_name = ops_cuda_device_name,
    .alloc = cuda_alloc,
    .free = ops_cuda_free,
    .zero = ops_cuda_zero,
    .copy_h2d = ops_cuda_copy_h2d,
    .copy_d2h = ops_cuda_copy_d2h,
    .copy_d2d = ops_cuda_copy_d2d,
    .sync = ops_cuda_sync,
    .is_device = cuda_is_device,
    .encoder_forward = ops_cuda_encoder_forward,
    .encoder_backward = ops_cuda_encoder_backward,
    .layernorm_forward = ops_cuda_layernorm_forward,
    .layernorm_backward = ops_cuda_layernorm_backward,
    .matmul_forward = ops_cuda_matmul_forward,
    .matmul_backward = ops_cuda_matmul_backward,
    .attention_forward = ops_cuda_attention_forward,
    .attention_backward = ops_cuda_attention_backward,
    .attention_decode = ops_cuda_attention_decode,
    .gelu_forward = ops_cuda_gelu_forward,
    .gelu_backward = ops_cuda_gelu_backward,
    .residual_forward = ops_cuda_residual_forward,
    .add_inplace = ops_cuda_add_inplace,
    .softmax_crossentropy = ops_cuda_softmax_crossentropy,
    .sumsq = ops_cuda_sumsq,
    .scale = ops_cuda_scale,
    .adamw = ops_cuda_adamw,
    .bias_add = ops_cuda_bias_add,
    .embed_rows = ops_cuda_embed_rows,
    .argmax_rows = ops_cuda_argmax_rows,
    .first_nonfinite = ops_cuda_first_nonfinite,
    .sumsq_multi = ops_cuda_sumsq_multi,
    .moe_route = ops_cuda_moe_route,
    .moe_prob_sums = ops_cuda_moe_prob_sums,
    .moe_pack = ops_cuda_moe_pack,
    .moe_combine = ops_cuda_moe_combine,
    .moe_combine_backward = ops_cuda_moe_combine_backward,
    .moe_scatter_add = ops_cuda_moe_scatter_add,
    .moe_router_backward = ops_cuda_moe_router_backward,
};
#else
typedef int ops_cuda_table_empty; /* ISO C: a translation unit must not be empty */
#endif
