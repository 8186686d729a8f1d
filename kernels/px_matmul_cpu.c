/* px_matmul_cpu.c: linear layer forward/backward on the CPU, each matmul one
 * cblas_sgemm (OpenBLAS; the thread count is the caller's choice, see
 * openblas_set_num_threads). Stateless; any thread. */
#include "px_kernels_cpu.h"
#include "px_vec_cpu.h"

#include <cblas.h>
#include <string.h>

void px__cpu_matmul_forward(float *out, const float *inp, const float *weight, const float *bias,
                            int N, int C, int OC)
{
    float beta = 0.0f;
    if (bias) {
        for (int n = 0; n < N; n++)
            memcpy(out + (size_t)n * OC, bias, (size_t)OC * sizeof(float));
        beta = 1.0f;
    }
    /* out (N,OC) = inp (N,C) @ weight^T (C,OC) [+ out] */
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, N, OC, C, 1.0f, inp, C, weight, C, beta,
                out, OC);
}

/* dbias (OC) += the column sums of dout (N,OC), row by row (so the same
 * bits as before, whatever the ISA); vectorised over OC, AVX2 clone */
PX__CLONES
static void bias_backward(float *restrict dbias, const float *restrict dout, int N, int OC)
{
    for (int n = 0; n < N; n++) {
        const float *d = dout + (size_t)n * OC;
        for (int o = 0; o < OC; o++)
            dbias[o] += d[o];
    }
}

void px__cpu_matmul_backward(float *dinp, float *dweight, float *dbias, const float *dout,
                             const float *inp, const float *weight, int N, int C, int OC)
{
    /* dinp (N,C) += dout (N,OC) @ weight (OC,C) */
    if (dinp)
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, N, C, OC, 1.0f, dout, OC, weight,
                    C, 1.0f, dinp, C);
    /* dweight (OC,C) += dout^T (OC,N) @ inp (N,C) */
    if (dweight)
        cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, OC, C, N, 1.0f, dout, OC, inp, C,
                    1.0f, dweight, C);
    if (dbias)
        bias_backward(dbias, dout, N, OC);
}
