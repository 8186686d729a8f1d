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

/* dinp[i] += x[i] (bf16), n elements */
__global__ static void acc_bf16_kernel(float *dinp, const __nv_bfloat16 *x, size_t n)
{
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n;
         i += (size_t)gridDim.x * blockDim.x)
        dinp[i] += __bfloat162float(x[i]);
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
    px__cuda_bf16_from_f32((uint16_t *)p.qkv, inp, l.qkv_elems);
    if (px__cudnn_sdpa_run(&kf, &p, px__cuda.stream) != PX_OK)
        return 0;
    px__cuda_bf16_to_f32(out, (const uint16_t *)p.o, l.o_elems);
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
    px__cuda_bf16_from_f32((uint16_t *)p.qkv, inp, l.qkv_elems);
    px__cuda_bf16_from_f32((uint16_t *)p.dout, dout, l.o_elems);
    if (out) { /* the forward's output rows, rounded as the forward rounded them */
        px__cuda_bf16_from_f32((uint16_t *)p.o, out, l.o_elems);
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
    acc_bf16_kernel<<<1184, 256, 0, px__cuda.stream>>>(dinp, (const __nv_bfloat16 *)p.dqkv,
                                                       l.qkv_elems);
    PX_CUDA_LAUNCHED();
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
