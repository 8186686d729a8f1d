/* px_attention_cudnn_cuda.cu: the op table's attention_bf16_forward /
 * _backward through cuDNN's fused attention (px_attention_cudnn.h), chosen
 * with PX_CUDA_ATTN=cudnn (px_attention_tc_cuda.cu's selection calls these
 * first and runs its own kernels when they return 0).
 *
 * The ops take fp32 tensors (px_kernels.h) and cuDNN's fused engines bf16
 * ones, so each call converts around the graph, in the backend's scratch
 * (px__cuda_scratch, grow-only: sized once for the largest shape, the
 * plan's work space included):
 *   forward:  qkv (B,T,3C) -> bf16, graph (out bf16, lse fp32 straight into
 *             att), out -> fp32.
 *   backward: qkv and dout -> bf16; the output rows bf16: from `out` where
 *             the caller has it (attention_bf16_backward_out: the engine
 *             keeps the output; its fp32 copy of cuDNN's bf16 output rounds
 *             back to the same bits), else the forward graph again (the
 *             plain op is given no `out`, and cuDNN's backward needs the
 *             rows for rowsum(dout * out)); the backward graph with the
 *             saved lse into bf16 dq | dk | dv; dinp (fp32) += them.
 * The rounding of q, k, v and dout to bf16 is the reference's (nearest
 * even, px_f32_to_bf16); cuDNN then rounds P and dS to bf16 for its
 * products and accumulates in fp32, and dq through fp32 atomics: the
 * backward is not bitwise repeatable (the tensor-core kernels are).
 *
 * Stream: the backend's. Runs on the rank's compute thread. */
#include "px_cuda_common.cuh"

extern "C" {
#include "px_attention_cudnn.h"
#include "px_sdpa_layout.h"
}

/* The conversions around the graphs move ~0.5 GB per step of the 124M
 * shape, a fair part of the attention's time at flash speed: 8 elements a
 * thread in 16-byte loads and stores where both pointers are 16-byte
 * aligned (vec), one at a time for the tail and otherwise. Rounding: the
 * same __float2bfloat16_rn as px_cuda_f32_to_bf16 (nearest even). */
#define CONV_THREADS 256
#define CONV_BLOCKS 2368 /* 16 blocks per SM of an H200's 132, a grid-stride loop */

/* dst (n bf16) = src (n fp32) */
__global__ static void to_bf16_kernel(__nv_bfloat16 *dst, const float *src, size_t n, int vec)
{
    const size_t tid = blockIdx.x * (size_t)blockDim.x + threadIdx.x;
    const size_t stride = (size_t)gridDim.x * blockDim.x, n8 = vec ? n / 8 : 0;
    for (size_t i = tid; i < n8; i += stride) {
        float4 a = ((const float4 *)src)[2 * i], b = ((const float4 *)src)[2 * i + 1];
        __nv_bfloat162 r[4] = {__floats2bfloat162_rn(a.x, a.y), __floats2bfloat162_rn(a.z, a.w),
                               __floats2bfloat162_rn(b.x, b.y), __floats2bfloat162_rn(b.z, b.w)};
        ((uint4 *)dst)[i] = *(const uint4 *)r;
    }
    for (size_t i = n8 * 8 + tid; i < n; i += stride)
        dst[i] = __float2bfloat16_rn(src[i]);
}

/* dst (n fp32) = src (n bf16) widened (acc 0), or dst += src (acc 1) */
__global__ static void from_bf16_kernel(float *dst, const __nv_bfloat16 *src, size_t n, int vec,
                                        int acc)
{
    const size_t tid = blockIdx.x * (size_t)blockDim.x + threadIdx.x;
    const size_t stride = (size_t)gridDim.x * blockDim.x, n8 = vec ? n / 8 : 0;
    for (size_t i = tid; i < n8; i += stride) {
        uint4 raw = ((const uint4 *)src)[i];
        const __nv_bfloat162 *h = (const __nv_bfloat162 *)&raw;
        float2 f0 = __bfloat1622float2(h[0]), f1 = __bfloat1622float2(h[1]);
        float2 f2 = __bfloat1622float2(h[2]), f3 = __bfloat1622float2(h[3]);
        float4 a = make_float4(f0.x, f0.y, f1.x, f1.y), b = make_float4(f2.x, f2.y, f3.x, f3.y);
        float4 *d = (float4 *)dst + 2 * i;
        if (acc) {
            float4 da = d[0], db = d[1];
            a.x += da.x, a.y += da.y, a.z += da.z, a.w += da.w;
            b.x += db.x, b.y += db.y, b.z += db.z, b.w += db.w;
        }
        d[0] = a;
        d[1] = b;
    }
    for (size_t i = n8 * 8 + tid; i < n; i += stride) {
        float v = __bfloat162float(src[i]);
        dst[i] = acc ? dst[i] + v : v;
    }
}

static int aligned16(const void *a, const void *b)
{
    return (((uintptr_t)a | (uintptr_t)b) & 15) == 0;
}

static void to_bf16(void *dst, const float *src, size_t n)
{
    to_bf16_kernel<<<CONV_BLOCKS, CONV_THREADS, 0, px__cuda.stream>>>(
        (__nv_bfloat16 *)dst, src, n, aligned16(dst, src));
    PX_CUDA_LAUNCHED();
}

static void from_bf16(float *dst, const void *src, size_t n, int acc)
{
    from_bf16_kernel<<<CONV_BLOCKS, CONV_THREADS, 0, px__cuda.stream>>>(
        dst, (const __nv_bfloat16 *)src, n, aligned16(dst, src), acc);
    PX_CUDA_LAUNCHED();
}

static size_t al256(size_t bytes)
{
    return (bytes + 255) & ~(size_t)255;
}

/* the keys of (B, T, C, NH), and its layout; 0 when cuDNN cannot take it */
static int keys_of(int B, int T, int C, int NH, px_sdpa_key_t *fwd, px_sdpa_key_t *bwd,
                   px_sdpa_layout_t *l)
{
    if (B <= 0 || T <= 0 || !px_sdpa_supported(C, NH))
        return 0;
    *fwd = (px_sdpa_key_t){B, NH, T, C / NH, 1, PX_SDPA_FWD};
    *bwd = *fwd;
    bwd->dir = PX_SDPA_BWD;
    return px_sdpa_layout(fwd, l) == PX_OK;
}

extern "C" int px__cuda_attention_cudnn_forward(float *out, float *att, const float *inp, int B,
                                                int T, int C, int NH)
{
    px_sdpa_key_t kf, kb;
    px_sdpa_layout_t l;
    size_t ws;
    if (!keys_of(B, T, C, NH, &kf, &kb, &l) ||
        px__cudnn_sdpa_plan(&kf, px__cuda.stream, &ws) != PX_OK)
        return 0;
    const size_t b_qkv = al256(l.qkv_elems * 2), b_o = al256(l.o_elems * 2);
    char *base = (char *)px__cuda_scratch(b_qkv + b_o + ws);
    if (!base)
        return 1; /* the sticky error reports it; a fallback would fail alike */
    px_sdpa_ptrs_t p;
    memset(&p, 0, sizeof(p));
    p.qkv = base;
    p.o = base + b_qkv;
    p.stats = att;
    p.workspace = ws ? base + b_qkv + b_o : NULL;
    to_bf16(p.qkv, inp, l.qkv_elems);
    if (px__cudnn_sdpa_run(&kf, &p, px__cuda.stream) != PX_OK)
        return 0;
    from_bf16(out, p.o, l.o_elems, 0);
    return 1;
}

extern "C" int px__cuda_attention_cudnn_backward(float *dinp, const float *dout,
                                                 const float *inp, const float *out,
                                                 const float *att, int B, int T, int C, int NH)
{
    px_sdpa_key_t kf, kb;
    px_sdpa_layout_t l;
    size_t wsf, wsb;
    if (!keys_of(B, T, C, NH, &kf, &kb, &l))
        return 0;
    wsf = 0; /* the forward's plan only where out must be recomputed */
    if ((!out && px__cudnn_sdpa_plan(&kf, px__cuda.stream, &wsf) != PX_OK) ||
        px__cudnn_sdpa_plan(&kb, px__cuda.stream, &wsb) != PX_OK)
        return 0;
    const size_t b_qkv = al256(l.qkv_elems * 2), b_o = al256(l.o_elems * 2);
    const size_t b_st = al256(l.stats_elems * 4), b_acc = al256(l.dqacc_elems * 4);
    const size_t ws = wsf > wsb ? wsf : wsb;
    char *base = (char *)px__cuda_scratch(2 * b_qkv + 2 * b_o + 2 * b_st + b_acc + ws);
    if (!base)
        return 1; /* the sticky error reports it */
    px_sdpa_ptrs_t p;
    p.qkv = base;
    p.dqkv = base + b_qkv;
    p.o = base + 2 * b_qkv;
    p.dout = base + 2 * b_qkv + b_o;
    float *lse_again = (float *)(base + 2 * b_qkv + 2 * b_o);
    p.rowsum = (float *)(base + 2 * b_qkv + 2 * b_o + b_st);
    p.dqacc = (float *)(base + 2 * b_qkv + 2 * b_o + 2 * b_st);
    p.workspace = ws ? base + 2 * b_qkv + 2 * b_o + 2 * b_st + b_acc : NULL;
    to_bf16(p.qkv, inp, l.qkv_elems);
    to_bf16(p.dout, dout, l.o_elems);
    if (out) { /* the forward's output rows, rounded as the forward rounded them */
        to_bf16(p.o, out, l.o_elems);
    } else { /* the output rows again (their lse aside: the backward takes att's) */
        p.stats = lse_again;
        if (px__cudnn_sdpa_run(&kf, &p, px__cuda.stream) != PX_OK)
            return 0;
    }
    if (px__cudnn_sdpa_dqacc_zeroed())
        PX_CUDA_CHECK(cudaMemsetAsync(p.dqacc, 0, l.dqacc_elems * 4, px__cuda.stream));
    p.stats = (float *)att; /* read only */
    if (px__cudnn_sdpa_run(&kb, &p, px__cuda.stream) != PX_OK)
        return 0;
    from_bf16(dinp, p.dqkv, l.qkv_elems, 1);
    return 1;
}

extern "C" const char *px_cuda_attention_cudnn_status(void)
{
    return px__cudnn_sdpa_unavailable();
}

extern "C" long px_cuda_attention_cudnn_version(void)
{
    return px__cudnn_sdpa_version();
}
