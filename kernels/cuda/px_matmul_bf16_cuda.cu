/* px_matmul_bf16_cuda.cu: the linear layer as a bf16 tensor-core GEMM (the
 * op table's matmul_bf16_forward / matmul_bf16_backward, px_kernels.h).
 *
 * The fp32 inputs are converted to bf16 (round to nearest even,
 * px_cuda_f32_to_bf16) into the backend's device scratch, then one
 * cublasGemmEx per product: A and B CUDA_R_16BF, C CUDA_R_32F (fp32
 * output, beta = 1 accumulates gradients), CUBLAS_COMPUTE_32F. The CPU
 * reference (px_matmul_bf16_cpu.c) rounds the same inputs and runs sgemm;
 * the two agree to fp32 accumulation order (tests/gpu/px_opcheck.c checks
 * them within 1e-2). Bias and dbias are fp32 (px__cuda_bias_set / _grad).
 *
 * matmul_bf16in_*: the same GEMMs with the activation operand already bf16
 * in device memory (bf16 activation storage): cuBLAS reads it in
 * place, no conversion; the bits it reads are the ones to_bf16 would have
 * made from the fp32 tensor it was rounded from (px_cuda_f32_to_bf16 both
 * times), so the GEMMs are the same. bf16_from_f32 / bf16_to_f32 are the
 * conversions of px_reduce_cuda.cu on the stream.
 *
 * Scratch: px__cuda_scratch is one grow-only buffer shared by every op;
 * dbias (whose column sums use it) runs before the conversions take it,
 * and the stream orders every later use after these GEMMs. Runs on the
 * rank's compute thread only. */
#include "px_cuda_common.cuh"

/* n rounded up to 64 elements (128 bytes): every operand in the scratch
 * starts aligned, as cuBLAS's tensor-core kernels want (16 bytes at least) */
static size_t al(size_t n)
{
    return (n + 63) & ~(size_t)63;
}

/* bf16 copies of `n` fp32 elements at dst (device scratch) */
static uint16_t *to_bf16(uint16_t *dst, const float *src, size_t n)
{
    px_cuda_f32_to_bf16(dst, src, n);
    return dst;
}

/* out (N,OC) = inp (N,C; bf16 `ri16`, or fp32 `inp` rounded here) @ W^T + bias */
static void fwd(float *out, const float *inp, const uint16_t *ri16, const float *weight,
                const float *bias, int N, int C, int OC)
{
    const float one = 1.0f;
    float beta = 0.0f;
    const size_t ni = ri16 ? 0 : al((size_t)N * C), nw = (size_t)OC * C;
    uint16_t *s = (uint16_t *)px__cuda_scratch((ni + nw) * sizeof(uint16_t));
    if (!s)
        return; /* sticky error, logged */
    if (bias) {
        px__cuda_bias_set(out, bias, N, OC);
        beta = 1.0f;
    }
    const uint16_t *ri = ri16 ? ri16 : to_bf16(s, inp, (size_t)N * C);
    const uint16_t *rw = to_bf16(s + ni, weight, nw);
    /* column-major out^T (OC x N) = W (OC x C) inp^T (C x N), as the fp32 op */
    PX_CUBLAS_CHECK(cublasGemmEx(px__cuda.cublas, CUBLAS_OP_T, CUBLAS_OP_N, OC, N, C, &one, rw,
                                 CUDA_R_16BF, C, ri, CUDA_R_16BF, C, &beta, out, CUDA_R_32F, OC,
                                 CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
}

static void bwd(float *dinp, float *dweight, float *dbias, const float *dout, const float *inp,
                const uint16_t *ri16, const float *weight, int N, int C, int OC)
{
    const float one = 1.0f;
    if (dbias) /* first: its column sums use the scratch too */
        px__cuda_bias_grad(dbias, dout, N, OC);
    if (!dinp && !dweight)
        return;
    const size_t nd = al((size_t)N * OC);
    const size_t nw = dinp ? al((size_t)OC * C) : 0;
    const size_t ni = dweight && !ri16 ? (size_t)N * C : 0;
    uint16_t *s = (uint16_t *)px__cuda_scratch((nd + nw + ni) * sizeof(uint16_t));
    if (!s)
        return;
    const uint16_t *rd = to_bf16(s, dout, (size_t)N * OC);
    /* dinp (N,C) += dout (N,OC) @ weight (OC,C): col-major dinp^T (C x N) */
    if (dinp) {
        const uint16_t *rw = to_bf16(s + nd, weight, (size_t)OC * C);
        PX_CUBLAS_CHECK(cublasGemmEx(px__cuda.cublas, CUBLAS_OP_N, CUBLAS_OP_N, C, N, OC, &one,
                                     rw, CUDA_R_16BF, C, rd, CUDA_R_16BF, OC, &one, dinp,
                                     CUDA_R_32F, C, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
    }
    /* dweight (OC,C) += dout^T @ inp: col-major dweight^T (C x OC) = inp^T dout */
    if (dweight) {
        const uint16_t *ri = ri16 ? ri16 : to_bf16(s + nd + nw, inp, ni);
        PX_CUBLAS_CHECK(cublasGemmEx(px__cuda.cublas, CUBLAS_OP_N, CUBLAS_OP_T, C, OC, N, &one,
                                     ri, CUDA_R_16BF, C, rd, CUDA_R_16BF, OC, &one, dweight,
                                     CUDA_R_32F, C, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
    }
}

void px__cuda_matmul_bf16_forward(float *out, const float *inp, const float *weight,
                                  const float *bias, int N, int C, int OC)
{
    fwd(out, inp, NULL, weight, bias, N, C, OC);
}

void px__cuda_matmul_bf16_backward(float *dinp, float *dweight, float *dbias, const float *dout,
                                   const float *inp, const float *weight, int N, int C, int OC)
{
    bwd(dinp, dweight, dbias, dout, inp, NULL, weight, N, C, OC);
}

void px__cuda_matmul_bf16in_forward(float *out, const uint16_t *inp, const float *weight,
                                    const float *bias, int N, int C, int OC)
{
    fwd(out, NULL, inp, weight, bias, N, C, OC);
}

void px__cuda_matmul_bf16in_backward(float *dinp, float *dweight, float *dbias,
                                     const float *dout, const uint16_t *inp,
                                     const float *weight, int N, int C, int OC)
{
    bwd(dinp, dweight, dbias, dout, NULL, inp, weight, N, C, OC);
}

void px__cuda_bf16_from_f32(uint16_t *dst, const float *src, size_t n)
{
    px_cuda_f32_to_bf16(dst, src, n);
}

void px__cuda_bf16_to_f32(float *dst, const uint16_t *src, size_t n)
{
    px_cuda_bf16_to_f32(dst, src, n);
}
