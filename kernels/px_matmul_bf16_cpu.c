/* px_matmul_bf16_cpu.c: the linear layer as a bf16 GEMM on the CPU (the op
 * table's matmul_bf16_forward / matmul_bf16_backward, px_kernels.h).
 *
 * Each GEMM input is rounded to bf16 (nearest even, as px_f32_to_bf16) and
 * widened to double in a scratch buffer, one cblas_dgemm multiplies them,
 * and each result is rounded once to fp32. A product of two bf16 values has
 * at most 16 significant bits, so every product is exact; the double sum of
 * them is exact to ~2^-53 relative, so the fp32 result is the correctly
 * rounded value of the exact bf16 dot product in all but rare near-tie
 * cases - whatever order BLAS adds in. That order independence is why this
 * is dgemm and not sgemm: OpenBLAS sums a row in an order that depends on
 * the number of rows (its kernel and blocking choice), and rounding to bf16
 * turns those fp32 last-bit differences into 2^-8 jumps of the next GEMM's
 * inputs, so with sgemm one rank's 128-row GEMM and two ranks' 64-row GEMMs
 * (dp 2, or grad_accum 2) gave step-1 gradients 2e-4 apart, and the
 * parallel oracle (tests/engine/test_bf16.py) could not hold. A bf16 tensor
 * core with an fp32 accumulator (the CUDA op) differs from this by its
 * accumulation error only (tests/gpu/px_opcheck.c: 1e-2). Bias and dbias
 * stay fp32 (dbias sums the unrounded dout, as the fp32 op does).
 *
 * matmul_bf16in_*: the same with the activation operand already bf16 in
 * memory (bf16 activation storage): it is widened instead of
 * rounded, which gives the same doubles (rounding is idempotent), so the
 * same dgemm and the same bits. One body serves both (inp or inp16).
 *
 * Scratch: one grow-only buffer of doubles per thread (C11 _Thread_local),
 * never shrunk, released by the C library's thread exit only where a thread
 * ends (the rank's compute thread lives as long as the process). The ops
 * keep no other state and are reentrant across threads. */
#include "px_kernels_cpu.h"

#include <cblas.h>
#include <stdlib.h>
#include <string.h>

#include "px_log.h"
#include "px_reduce.h"

static _Thread_local double *scratch;
static _Thread_local size_t scratch_n; /* doubles */

/* `n` doubles of this thread's scratch; aborts (logged) when out of memory:
 * the op table has no error path, and an op that cannot run must not lie */
static double *scratch_get(size_t n)
{
    if (n <= scratch_n)
        return scratch;
    double *p = realloc(scratch, n * sizeof(double));
    if (!p) {
        px_error("matmul_bf16: out of memory for %zu scratch doubles", n);
        abort();
    }
    scratch = p;
    scratch_n = n;
    return p;
}

/* dst (n doubles) = src rounded to bf16, widened exactly */
static void widen_bf16(double *dst, const float *src, size_t n)
{
    float buf[256];
    for (size_t i = 0; i < n; i += 256) {
        size_t m = n - i < 256 ? n - i : 256;
        px_f32_round_bf16(buf, src + i, m);
        for (size_t j = 0; j < m; j++)
            dst[i + j] = buf[j];
    }
}

/* dst (n doubles) = the bf16 values src16 widened exactly */
static void widen_bits(double *dst, const uint16_t *src16, size_t n)
{
    float buf[256];
    for (size_t i = 0; i < n; i += 256) {
        size_t m = n - i < 256 ? n - i : 256;
        px_bf16_to_f32(buf, src16 + i, m);
        for (size_t j = 0; j < m; j++)
            dst[i + j] = buf[j];
    }
}

/* the activation operand: fp32 (rounded here) or bf16 bits (widened) */
static void widen_act(double *dst, const float *inp, const uint16_t *inp16, size_t n)
{
    if (inp16)
        widen_bits(dst, inp16, n);
    else
        widen_bf16(dst, inp, n);
}

static void fwd(float *out, const float *inp, const uint16_t *inp16, const float *weight,
                const float *bias, int N, int C, int OC)
{
    const size_t ni = (size_t)N * C, nw = (size_t)OC * C, no = (size_t)N * OC;
    double *s = scratch_get(ni + nw + no), *ri = s, *rw = s + ni, *acc = s + ni + nw;
    widen_act(ri, inp, inp16, ni);
    widen_bf16(rw, weight, nw);
    /* acc (N,OC) = inp (N,C) @ weight^T (C,OC) */
    cblas_dgemm(CblasRowMajor, CblasNoTrans, CblasTrans, N, OC, C, 1.0, ri, C, rw, C, 0.0, acc,
                OC);
    for (int n = 0; n < N; n++)
        for (int o = 0; o < OC; o++) {
            size_t i = (size_t)n * OC + o;
            out[i] = bias ? (float)acc[i] + bias[o] : (float)acc[i];
        }
}

static void bwd(float *dinp, float *dweight, float *dbias, const float *dout, const float *inp,
                const uint16_t *inp16, const float *weight, int N, int C, int OC)
{
    if (dinp || dweight) {
        const size_t nd = (size_t)N * OC;
        const size_t nw = dinp ? (size_t)OC * C : 0, ni = dweight ? (size_t)N * C : 0;
        const size_t na_i = dinp ? (size_t)N * C : 0, na_w = dweight ? (size_t)OC * C : 0;
        const size_t na = na_i > na_w ? na_i : na_w; /* the accumulator, reused */
        double *s = scratch_get(nd + nw + ni + na);
        double *rd = s, *rw = s + nd, *ri = s + nd + nw, *acc = s + nd + nw + ni;
        widen_bf16(rd, dout, nd);
        if (dinp) {
            widen_bf16(rw, weight, nw);
            /* acc (N,C) = dout (N,OC) @ weight (OC,C); dinp += acc in fp32 */
            cblas_dgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, N, C, OC, 1.0, rd, OC, rw, C,
                        0.0, acc, C);
            for (size_t i = 0; i < (size_t)N * C; i++)
                dinp[i] += (float)acc[i];
        }
        if (dweight) {
            widen_act(ri, inp, inp16, ni);
            /* acc (OC,C) = dout^T (OC,N) @ inp (N,C); dweight += acc in fp32 */
            cblas_dgemm(CblasRowMajor, CblasTrans, CblasNoTrans, OC, C, N, 1.0, rd, OC, ri, C,
                        0.0, acc, C);
            for (size_t i = 0; i < (size_t)OC * C; i++)
                dweight[i] += (float)acc[i];
        }
    }
    if (dbias) /* fp32: column sums of the unrounded gradient */
        px__cpu_matmul_backward(NULL, NULL, dbias, dout, NULL, NULL, N, C, OC);
}

void px__cpu_matmul_bf16_forward(float *out, const float *inp, const float *weight,
                                 const float *bias, int N, int C, int OC)
{
    fwd(out, inp, NULL, weight, bias, N, C, OC);
}

void px__cpu_matmul_bf16_backward(float *dinp, float *dweight, float *dbias, const float *dout,
                                  const float *inp, const float *weight, int N, int C, int OC)
{
    bwd(dinp, dweight, dbias, dout, inp, NULL, weight, N, C, OC);
}

void px__cpu_matmul_bf16in_forward(float *out, const uint16_t *inp, const float *weight,
                                   const float *bias, int N, int C, int OC)
{
    fwd(out, NULL, inp, weight, bias, N, C, OC);
}

void px__cpu_matmul_bf16in_backward(float *dinp, float *dweight, float *dbias, const float *dout,
                                    const uint16_t *inp, const float *weight, int N, int C,
                                    int OC)
{
    bwd(dinp, dweight, dbias, dout, NULL, inp, weight, N, C, OC);
}

void px__cpu_bf16_from_f32(uint16_t *dst, const float *src, size_t n)
{
    px_f32_to_bf16(dst, src, n);
}

void px__cpu_bf16_to_f32(float *dst, const uint16_t *src, size_t n)
{
    px_bf16_to_f32(dst, src, n);
}
