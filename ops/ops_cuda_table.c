/*
 * ops/ops_cuda_table.c — the cuda entry of the backend table (ops/ops_backend.h):
 * ops/ops_cuda.h's free functions in ops_backend's slots. GPU=1 builds only.
 *
 * Why a separate file: ops_cuda*.cu stay free of the table's type (they implement ops/ops_cuda.h,
 * plain C names), and the table's shape can change without touching a kernel. The one adapter is alloc, whose table slot also takes a label for error messages.
 */
#include "ops/ops_backend.h"

#include "ops/ops_cuda.h"

static void *cuda_alloc(size_t bytes, const char *what) {
    (void)what; /* ops.c reports the failure with the label; the device has no use for it */
    return ops_cuda_alloc(bytes);
}

const ops_backend ops_backend_cuda = {
    .name = "cuda",
    .init = ops_cuda_init,
    .device_name = ops_cuda_device_name,
    .device_memory = ops_cuda_device_memory,
    .alloc = cuda_alloc,
    .free = ops_cuda_free,
    .zero = ops_cuda_zero,
    .copy_h2d = ops_cuda_copy_h2d,
    .copy_d2h = ops_cuda_copy_d2h,
    .copy_d2d = ops_cuda_copy_d2d,
    .sync = ops_cuda_sync,
    .is_device = ops_cuda_is_device,
    .encoder_forward = ops_cuda_encoder_forward,
    .encoder_backward = ops_cuda_encoder_backward,
    .layernorm_forward = ops_cuda_layernorm_forward,
    .layernorm_backward = ops_cuda_layernorm_backward,
    .matmul_forward = ops_cuda_matmul_forward,
    .matmul_backward = ops_cuda_matmul_backward,
    .matmul_backward_input = ops_cuda_matmul_backward_input,
    .matmul_backward_weight = ops_cuda_matmul_backward_weight,
    .layernorm_backward_input = ops_cuda_layernorm_backward_input,
    .layernorm_backward_weight = ops_cuda_layernorm_backward_weight,
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
