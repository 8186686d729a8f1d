/* px_cuda_common.cuh: what the CUDA kernel files share (internal to
 * kernels/cuda/): the process's backend state, the check macros that log
 * with file and line and make the error sticky, a warp sum, and the ops
 * defined in the other .cu files. */
#ifndef PX_CUDA_COMMON_CUH
#define PX_CUDA_COMMON_CUH

#include <cublas_v2.h>
#include <cuda_bf16.h>
#include <cuda_runtime.h>
#include <stdint.h>
#include <stdio.h>

extern "C" {
#include "px_kernels_cuda.h"
#include "px_env.h"
#include "px_log.h"
}

/* The one backend of this process (px_kernels_cuda_open sets it). */
typedef struct px_cuda_backend {
    int device;            /* -1 until opened */
    cudaStream_t stream;   /* every op and memory op is ordered on it */
    cublasHandle_t cublas; /* bound to stream, strict fp32 math */
    void *scratch;         /* grow-only work space (px__cuda_scratch) */
    size_t scratch_bytes;
    cudaError_t last_cuda;
    cublasStatus_t last_cublas;
    px_status_t sticky;    /* first failure, PX_OK while none */
} px_cuda_backend_t;

extern px_cuda_backend_t px__cuda;

/* Logs `what` at file:line and makes the failure sticky. */
void px__cuda_fail(const char *what, const char *file, int line);
void px__cuda_check(cudaError_t e, const char *call, const char *file, int line);
void px__cublas_check(cublasStatus_t s, const char *call, const char *file, int line);
/* Device work space of at least `bytes`, valid until the next call (the
 * stream orders its uses); NULL (sticky error) when allocation fails. */
void *px__cuda_scratch(size_t bytes);

#define PX_CUDA_CHECK(call) px__cuda_check((call), #call, __FILE__, __LINE__)
#define PX_CUBLAS_CHECK(call) px__cublas_check((call), #call, __FILE__, __LINE__)
/* after a <<<>>> launch: a bad configuration is reported here */
#define PX_CUDA_LAUNCHED() px__cuda_check(cudaGetLastError(), "kernel launch", __FILE__, __LINE__)

/* x rounded to bf16 (nearest even, as px_f32_to_bf16) when BF16, else x:
 * the operand rounding of the bf16 attention kernels */
template <bool BF16> __device__ __forceinline__ float px__rb16(float x)
{
    return BF16 ? __bfloat162float(__float2bfloat16_rn(x)) : x;
}

/* m rounded down to a multiple of ln 2: the bf16 attention's power-of-two
 * reference for the unnormalised probabilities (px_kernels.h) */
__device__ __forceinline__ float px__snap_ln2(float m)
{
    return floorf(m * 1.4426950408889634f) * 0.6931471805599453f;
}

/* sum of v over the 32 lanes of a warp, in a fixed butterfly order */
static __device__ __forceinline__ float px__warp_sum(float v)
{
    for (int o = 16; o > 0; o >>= 1)
        v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}

static __device__ __forceinline__ float px__warp_max(float v)
{
    for (int o = 16; o > 0; o >>= 1)
        v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
    return v;
}

/* px_kernels_cuda.cu: out (N,OC) = bias on every row; dbias (OC) += column
 * sums of dout (N,OC) in a fixed order (fp32) */
void px__cuda_bias_set(float *out, const float *bias, int N, int OC);
void px__cuda_bias_grad(float *dbias, const float *dout, int N, int OC);

/* px_matmul_bf16_cuda.cu: the table's matmul_bf16_forward / _backward */
void px__cuda_matmul_bf16_forward(float *out, const float *inp, const float *weight,
                                  const float *bias, int N, int C, int OC);
void px__cuda_matmul_bf16_backward(float *dinp, float *dweight, float *dbias, const float *dout,
                                   const float *inp, const float *weight, int N, int C, int OC);
/* ... with the activation operand bf16 in memory, and the conversions of
 * bf16-stored activations */
void px__cuda_matmul_bf16in_forward(float *out, const uint16_t *inp, const float *weight,
                                    const float *bias, int N, int C, int OC);
void px__cuda_matmul_bf16in_backward(float *dinp, float *dweight, float *dbias,
                                     const float *dout, const uint16_t *inp,
                                     const float *weight, int N, int C, int OC);
void px__cuda_bf16_from_f32(uint16_t *dst, const float *src, size_t n);
void px__cuda_bf16_to_f32(float *dst, const uint16_t *src, size_t n);

/* px_attention_cuda.cu */
void px__cuda_attention_forward(float *out, float *att, const float *inp, int B, int T, int C,
                                int NH);
void px__cuda_attention_bf16_forward(float *out, float *att, const float *inp, int B, int T,
                                     int C, int NH);
void px__cuda_attention_bf16_backward(float *dinp, float *scratch, const float *dout,
                                      const float *inp, const float *att, int B, int T, int C,
                                      int NH);
void px__cuda_attention_block_bf16_forward(float *out, float *lse, const float *q,
                                           const float *kv, const px_attn_block_t *g,
                                           float *scratch);
void px__cuda_attention_block_bf16_backward(float *dq, float *dkv, const float *dout,
                                            const float *q, const float *kv, const float *lse,
                                            const float *delta, const px_attn_block_t *g,
                                            float *scratch);
void px__cuda_attention_backward(float *dinp, float *scratch, const float *dout,
                                 const float *inp, const float *att, int B, int T, int C,
                                 int NH);
/* px_attention_tc_cuda.cu: the table's attention_bf16_* - cuDNN's fused
 * attention with PX_CUDA_ATTN=cudnn where it takes the call, else the
 * tensor-core kernels where the head size is a multiple of 16 up to 128 and
 * PX_CUDA_ATTN is not simt, else the px_attention_cuda.cu ones above */
void px__cuda_attention_sel_bf16_forward(float *out, float *att, const float *inp, int B, int T,
                                         int C, int NH);
void px__cuda_attention_sel_bf16_backward(float *dinp, float *scratch, const float *dout,
                                          const float *inp, const float *att, int B, int T,
                                          int C, int NH);
/* ... with the forward's output (cuDNN reads it; the others ignore it) */
void px__cuda_attention_sel_bf16_backward_out(float *dinp, float *scratch, const float *dout,
                                              const float *inp, const float *out,
                                              const float *att, int B, int T, int C, int NH);
/* px_attention_cudnn_cuda.cu: the same two ops through cuDNN's fused
 * attention (PX_CUDA_ATTN=cudnn); 1 when done, 0 when cuDNN cannot (not
 * loaded, shape or graph refused, execution failed: logged; nothing written
 * then, the caller runs its own kernels). backward's out: the forward's
 * output (B,T,C), or NULL to recompute it */
extern "C" int px__cuda_attention_cudnn_forward(float *out, float *att, const float *inp, int B,
                                                int T, int C, int NH);
extern "C" int px__cuda_attention_cudnn_backward(float *dinp, const float *dout,
                                                 const float *inp, const float *out,
                                                 const float *att, int B, int T, int C, int NH);
/* px_crossentropy_cuda.cu */
void px__cuda_crossentropy_forward(float *losses, float *probs, const float *logits,
                                   const int32_t *targets, int N, int V, int Vp);
void px__cuda_crossentropy_backward(float *dlogits, const float *probs, const int32_t *targets,
                                    float dloss, int N, int V, int Vp);
void px__cuda_crossentropy_vp_max(float *rowmax, const float *logits, int N, int Vl, int v0,
                                  int V);
void px__cuda_crossentropy_vp_exp(double *stats, float *probs, const float *logits,
                                  const float *rowmax, const int32_t *targets, int N, int Vl,
                                  int v0, int V);
void px__cuda_crossentropy_vp_finish(float *losses, float *probs, const double *stats,
                                     const float *rowmax, int N, int Vl, int v0, int V);
void px__cuda_crossentropy_vp_backward(float *dlogits, const float *probs,
                                       const int32_t *targets, float dloss, int N, int Vl,
                                       int v0, int V);

/* px_attention_block_cuda.cu */
void px__cuda_attention_block_forward(float *out, float *lse, const float *q, const float *kv,
                                      const px_attn_block_t *g, float *scratch);
void px__cuda_attention_block_backward(float *dq, float *dkv, const float *dout, const float *q,
                                       const float *kv, const float *lse, const float *delta,
                                       const px_attn_block_t *g, float *scratch);
void px__cuda_attention_block_delta(float *delta, const float *out, const float *dout,
                                    const px_attn_block_t *g);
/* px_moe_cuda.cu */
void px__cuda_moe_router_forward(float *probs, int32_t *idx, float *weights, const float *logits,
                                 int N, int E, int K);
void px__cuda_moe_router_backward(float *dlogits, const float *probs, const int32_t *idx,
                                  const float *weights, const float *dweights, const float *daux,
                                  int N, int E, int K);
void px__cuda_moe_dispatch(float *dst, const float *src, const int32_t *rows, int n, int C);
void px__cuda_moe_combine(float *out, const float *y, const int32_t *rows, const float *w,
                          const int32_t *widx, int n, int C);
void px__cuda_moe_combine_backward(float *dy, float *dw, const float *dout, const float *y,
                                   const int32_t *rows, const float *w, const int32_t *widx,
                                   int n, int C);

/* px_ipc_cuda.cu: the table's reduce / reduce_avg_finish and CUDA IPC
 * handle ops (px_kernels.h, "device buffers shared between the processes
 * of one node"). */
extern "C" px_status_t px__cuda_reduce(void *dst, const void *a, const void *b, size_t count,
                                       int dtype, int op);
extern "C" void px__cuda_reduce_avg(void *dst, size_t count, int dtype, int n);
extern "C" px_status_t px__cuda_ipc_handle(const void *ptr, px_ipc_handle_t *handle_p);
extern "C" px_status_t px__cuda_ipc_open(const px_ipc_handle_t *handle, void **ptr_p);
extern "C" px_status_t px__cuda_reduce_multi(void *dst, void *dst2, const void *const *srcs, int m,
                                             size_t count, int dtype, int op);
extern "C" px_status_t px__cuda_event_ipc_create(void **event_p, px_ipc_handle_t *handle_p);
extern "C" px_status_t px__cuda_event_ipc_open(const px_ipc_handle_t *handle, void **event_p);
extern "C" void px__cuda_event_destroy(void *event);
extern "C" px_status_t px__cuda_event_record(void *event);
extern "C" px_status_t px__cuda_stream_wait_event(void *event);
extern "C" void px__cuda_ipc_close(const px_ipc_handle_t *handle);

#endif
