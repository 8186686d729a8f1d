/* px_matmul_bf16_cpu.c: the linear layer as a bf16 GEMM on the CPU (the op
 * table's matmul_bf16_forward / matmul_bf16_backward, px_kernels.h).
 *
 * Each GEMM input is rounded to bf16 (nearest even, px_f32_round_bf16) into
 * a scratch buffer of floats and the fp32 GEMM (px__cpu_matmul_*, one
 * sgemm) runs on the rounded copies. A product of two bf16 values has at
 * most 16 significant bits, so it is exact in fp32: what sgemm computes is
 * what a bf16 x bf16 -> fp32 tensor-core GEMM computes (cublasGemmEx with
 * CUDA_R_16BF inputs and CUBLAS_COMPUTE_32F), up to the order in which the
 * fp32 accumulator adds the products. Bias and dbias stay fp32 (dbias sums
 * the unrounded dout, as the fp32 op does).
 *
 * Scratch: one grow-only buffer per thread (C11 _Thread_local), never
 * shrunk, released by the C library's thread exit only where a thread ends
 * (the rank's compute thread lives as long as the process). The ops keep no
 * other state and are reentrant across threads. */
#include "px_kernels_cpu.h"

#include <stdlib.h>

#include "px_log.h"
#include "px_reduce.h"

static _Thread_local float *scratch;
static _Thread_local size_t scratch_n; /* floats */

/* `n` floats of this thread's scratch, or NULL (logged) when out of memory */
static float *scratch_get(size_t n)
{
    if (n <= scratch_n)
        return scratch;
    float *p = realloc(scratch, n * sizeof(float));
    if (!p) {
        px_error("matmul_bf16: out of memory for %zu scratch floats", n);
        return NULL;
    }
    scratch = p;
    scratch_n = n;
    return p;
}

void px__cpu_matmul_bf16_forward(float *out, const float *inp, const float *weight,
                                 const float *bias, int N, int C, int OC)
{
    const size_t ni = (size_t)N * C, nw = (size_t)OC * C;
    float *s = scratch_get(ni + nw);
    if (!s)
        abort(); /* the op table has no error path; an op that cannot run must not lie */
    px_f32_round_bf16(s, inp, ni);
    px_f32_round_bf16(s + ni, weight, nw);
    px__cpu_matmul_forward(out, s, s + ni, bias, N, C, OC);
}

void px__cpu_matmul_bf16_backward(float *dinp, float *dweight, float *dbias, const float *dout,
                                  const float *inp, const float *weight, int N, int C, int OC)
{
    if (dinp || dweight) {
        const size_t nd = (size_t)N * OC;
        const size_t nw = dinp ? (size_t)OC * C : 0, ni = dweight ? (size_t)N * C : 0;
        float *s = scratch_get(nd + nw + ni);
        if (!s)
            abort();
        float *rdout = s, *rw = s + nd, *rinp = s + nd + nw;
        px_f32_round_bf16(rdout, dout, nd);
        if (dinp)
            px_f32_round_bf16(rw, weight, nw);
        if (dweight)
            px_f32_round_bf16(rinp, inp, ni);
        px__cpu_matmul_backward(dinp, dweight, NULL, rdout, dweight ? rinp : NULL,
                                dinp ? rw : NULL, N, C, OC);
    }
    if (dbias) /* fp32: column sums of the unrounded gradient */
        px__cpu_matmul_backward(NULL, NULL, dbias, dout, NULL, NULL, N, C, OC);
}
