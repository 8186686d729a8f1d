/* px_kernels_cpu.c: the CPU op table. Static and immutable; any thread. */
#include "px_kernels_cpu.h"

static const px_kernel_ops_t cpu_ops = {
    .name = "cpu",
    .encoder_forward = px__cpu_encoder_forward,
    .encoder_backward = px__cpu_encoder_backward,
    .layernorm_forward = px__cpu_layernorm_forward,
    .layernorm_backward = px__cpu_layernorm_backward,
    .matmul_forward = px__cpu_matmul_forward,
    .matmul_backward = px__cpu_matmul_backward,
    .attention_forward = px__cpu_attention_forward,
    .attention_backward = px__cpu_attention_backward,
    .gelu_forward = px__cpu_gelu_forward,
    .gelu_backward = px__cpu_gelu_backward,
    .residual_forward = px__cpu_residual_forward,
    .residual_backward = px__cpu_residual_backward,
    .crossentropy_forward = px__cpu_crossentropy_forward,
    .crossentropy_backward = px__cpu_crossentropy_backward,
    .adamw_update = px__cpu_adamw_update,
    .sumsq = px__cpu_sumsq,
    .scale = px__cpu_scale,
};

const px_kernel_ops_t *px_kernels_cpu(void)
{
    return &cpu_ops;
}
