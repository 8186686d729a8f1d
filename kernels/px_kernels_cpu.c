/* px_kernels_cpu.c: the CPU op table. Static and immutable; any thread.
 * Memory ops on the CPU backend are the C library's on host memory; the one
 * "stream" is program order, so synchronize has nothing to wait for. */
#include "px_kernels_cpu.h"

#include <stdlib.h>
#include <string.h>

/* 64-byte aligned, so the vector kernels get whole cache lines */
static void *cpu_mem_alloc(size_t bytes)
{
    void *p = NULL;
    if (!bytes || posix_memalign(&p, 64, bytes))
        return NULL;
    memset(p, 0, bytes);
    return p;
}

static void cpu_mem_free(void *ptr)
{
    free(ptr);
}

static void cpu_mem_set(void *dst, int byte, size_t bytes)
{
    memset(dst, byte, bytes);
}

static void cpu_mem_copy(void *dst, const void *src, size_t bytes)
{
    memcpy(dst, src, bytes);
}

static void cpu_synchronize(void)
{
}

static const px_kernel_ops_t cpu_ops = {
    .name = "cpu",
    .encoder_forward = px__cpu_encoder_forward,
    .encoder_backward = px__cpu_encoder_backward,
    .layernorm_forward = px__cpu_layernorm_forward,
    .layernorm_backward = px__cpu_layernorm_backward,
    .matmul_forward = px__cpu_matmul_forward,
    .matmul_backward = px__cpu_matmul_backward,
    .matmul_bf16_forward = px__cpu_matmul_bf16_forward,
    .matmul_bf16_backward = px__cpu_matmul_bf16_backward,
    .attention_forward = px__cpu_attention_forward,
    .attention_backward = px__cpu_attention_backward,
    .attention_block_forward = px__cpu_attention_block_forward,
    .attention_block_backward = px__cpu_attention_block_backward,
    .attention_block_delta = px__cpu_attention_block_delta,
    .attention_bf16_forward = px__cpu_attention_bf16_forward,
    .attention_bf16_backward = px__cpu_attention_bf16_backward,
    .attention_block_bf16_forward = px__cpu_attention_block_bf16_forward,
    .attention_block_bf16_backward = px__cpu_attention_block_bf16_backward,
    .matmul_bf16in_forward = px__cpu_matmul_bf16in_forward,
    .matmul_bf16in_backward = px__cpu_matmul_bf16in_backward,
    .bf16_from_f32 = px__cpu_bf16_from_f32,
    .bf16_to_f32 = px__cpu_bf16_to_f32,
    .gelu_forward = px__cpu_gelu_forward,
    .gelu_backward = px__cpu_gelu_backward,
    .residual_forward = px__cpu_residual_forward,
    .residual_backward = px__cpu_residual_backward,
    .crossentropy_forward = px__cpu_crossentropy_forward,
    .crossentropy_backward = px__cpu_crossentropy_backward,
    .adamw_update = px__cpu_adamw_update,
    .sumsq = px__cpu_sumsq,
    .scale = px__cpu_scale,
    .encoder_vp_forward = px__cpu_encoder_vp_forward,
    .encoder_vp_backward = px__cpu_encoder_vp_backward,
    .crossentropy_vp_max = px__cpu_crossentropy_vp_max,
    .crossentropy_vp_exp = px__cpu_crossentropy_vp_exp,
    .crossentropy_vp_finish = px__cpu_crossentropy_vp_finish,
    .crossentropy_vp_backward = px__cpu_crossentropy_vp_backward,
    .bias_forward = px__cpu_bias_forward,
    .moe_router_forward = px__cpu_moe_router_forward,
    .moe_router_backward = px__cpu_moe_router_backward,
    .moe_dispatch = px__cpu_moe_dispatch,
    .moe_combine = px__cpu_moe_combine,
    .moe_combine_backward = px__cpu_moe_combine_backward,
    .mem_alloc = cpu_mem_alloc,
    .mem_free = cpu_mem_free,
    .mem_set = cpu_mem_set,
    .mem_copy = cpu_mem_copy,
    .mem_copy_to_host = cpu_mem_copy,
    .mem_copy_from_host = cpu_mem_copy,
    .mem_copy_to_host_async = cpu_mem_copy, /* program order: done on return */
    .synchronize = cpu_synchronize,
};

const px_kernel_ops_t *px_kernels_cpu(void)
{
    return &cpu_ops;
}
