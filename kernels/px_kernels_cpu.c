/* px_kernels_cpu.c: the CPU op table and its memory operations (host
 * memory: memset / memcpy / calloc / free). Static and immutable; any
 * thread. */
#include "px_kernels_cpu.h"

#include <stdlib.h>
#include <string.h>

void px__cpu_mem_set(void *dst, int byte, size_t bytes) { memset(dst, byte, bytes); }
void px__cpu_mem_copy(void *dst, const void *src, size_t bytes) { memcpy(dst, src, bytes); }
void px__cpu_synchronize(void) {}
void *px__cpu_mem_alloc(size_t bytes) { return calloc(1, bytes ? bytes : 1); }
void px__cpu_mem_free(void *ptr) { free(ptr); }

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
    .mem_set = px__cpu_mem_set,
    .mem_copy = px__cpu_mem_copy,
    .mem_copy_to_host = px__cpu_mem_copy, /* host memory is the backend's */
    .mem_copy_from_host = px__cpu_mem_copy,
    .synchronize = px__cpu_synchronize,
    .mem_alloc = px__cpu_mem_alloc,
    .mem_free = px__cpu_mem_free,
};

const px_kernel_ops_t *px_kernels_cpu(void)
{
    return &cpu_ops;
}
