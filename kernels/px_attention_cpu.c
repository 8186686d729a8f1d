/* px_attention_cpu.c: causal multi-head self-attention on the CPU.
 *
 * Per (batch, head), q/k/v are read in place from the fused qkv tensor
 * (B,T,3C) with leading dimension 3C, so no copies. The T x T score matrix
 * is computed by sgemm in row blocks of ATT_BLOCK rows: block [r0,r1) only
 * needs key columns [0,r1), which skips most of the masked upper triangle.
 * Invariant: att rows are zero beyond the diagonal, for every (b,h,t).
 * Stateless; any thread. */
#include "px_kernels_cpu.h"

#include "px_vec_cpu.h"

#include <cblas.h>
#include <math.h>
#include <string.h>

#ifndef ATT_BLOCK
#define ATT_BLOCK 64
#endif

/* In-place causal softmax of one score row: row[0, n) <- softmax, row[n,
 * T) <- 0 (n = t + 1 keys). Vectorised, exp by px__v8f_exp (~2 ulp); the
 * sum in 8 lanes (px_vec_cpu.h), so a row's result does not depend on
 * the ISA or on the rows around it. */
static inline void softmax_row(float *row, int n, int T)
{
    float mx = px__row_max(row, n), tail = 0.0f;
    px__v8f acc = px__v8f_set1(0.0f), vmx = px__v8f_set1(mx);
    int j = 0;
    for (; j + 8 <= n; j += 8) {
        px__v8f e = px__v8f_exp(px__v8f_load(row + j) - vmx);
        px__v8f_store(row + j, e);
        acc += e;
    }
    for (; j < n; j++) {
        row[j] = px__exp1(row[j] - mx);
        tail += row[j];
    }
    float inv = 1.0f / (px__v8f_hsum(acc) + tail);
    for (j = 0; j < n; j++)
        row[j] *= inv;
    if (n < T)
        memset(row + n, 0, (size_t)(T - n) * sizeof(float));
}

/* Softmax backward of one row folded with the score scale: d[0, n) <-
 * a * (d - sum_j a_j d_j) * scale; a, d (n) the probabilities and their
 * gradient. The dot in 8 lanes as above. */
static inline void softmax_row_backward(float *restrict d, const float *restrict a, int n,
                                        float scale)
{
    px__v8f acc = px__v8f_set1(0.0f);
    float tail = 0.0f;
    int j = 0;
    for (; j + 8 <= n; j += 8)
        acc += px__v8f_load(a + j) * px__v8f_load(d + j);
    for (; j < n; j++)
        tail += a[j] * d[j];
    float dot = px__v8f_hsum(acc) + tail;
    for (j = 0; j < n; j++)
        d[j] = a[j] * (d[j] - dot) * scale;
}

PX__CLONES
void px__cpu_attention_forward(float *out, float *att, const float *inp, int B, int T, int C,
                               int NH)
{
    const int hs = C / NH, C3 = 3 * C;
    const float scale = 1.0f / sqrtf((float)hs);

    for (int b = 0; b < B; b++) {
        for (int h = 0; h < NH; h++) {
            const float *q = inp + (size_t)b * T * C3 + (size_t)h * hs;
            const float *k = q + C;
            const float *v = q + 2 * C;
            float *a = att + ((size_t)b * NH + h) * T * T;
            float *o = out + (size_t)b * T * C + (size_t)h * hs;

            for (int r0 = 0; r0 < T; r0 += ATT_BLOCK) {
                int r1 = r0 + ATT_BLOCK < T ? r0 + ATT_BLOCK : T, M = r1 - r0;
                /* scores[r0:r1, 0:r1] = scale * q[r0:r1] @ k[0:r1]^T */
                cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, M, r1, hs, scale,
                            q + (size_t)r0 * C3, C3, k, C3, 0.0f, a + (size_t)r0 * T, T);
                for (int t = r0; t < r1; t++)
                    softmax_row(a + (size_t)t * T, t + 1, T);
                /* out[r0:r1] = att[r0:r1, 0:r1] @ v[0:r1] */
                cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, M, hs, r1, 1.0f,
                            a + (size_t)r0 * T, T, v, C3, 0.0f, o + (size_t)r0 * C, C);
            }
        }
    }
}

PX__CLONES
void px__cpu_attention_backward(float *dinp, float *scratch, const float *dout, const float *inp,
                                const float *att, int B, int T, int C, int NH)
{
    const int hs = C / NH, C3 = 3 * C;
    const float scale = 1.0f / sqrtf((float)hs);

    for (int b = 0; b < B; b++) {
        for (int h = 0; h < NH; h++) {
            const size_t qoff = (size_t)b * T * C3 + (size_t)h * hs;
            const float *q = inp + qoff, *k = q + C, *v = q + 2 * C;
            float *dq = dinp + qoff, *dk = dq + C, *dv = dq + 2 * C;
            const float *a = att + ((size_t)b * NH + h) * T * T;
            const float *d = dout + (size_t)b * T * C + (size_t)h * hs;
            float *ds = scratch; /* (T,T): datt, then dscores in place */

            for (int r0 = 0; r0 < T; r0 += ATT_BLOCK) {
                int r1 = r0 + ATT_BLOCK < T ? r0 + ATT_BLOCK : T, M = r1 - r0;
                const float *ab = a + (size_t)r0 * T;
                float *dsb = ds + (size_t)r0 * T;
                /* datt[r0:r1, 0:r1] = dout[r0:r1] @ v[0:r1]^T */
                cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, M, r1, hs, 1.0f,
                            d + (size_t)r0 * C, C, v, C3, 0.0f, dsb, T);
                /* dv[0:r1] += att[r0:r1, 0:r1]^T @ dout[r0:r1] */
                cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, r1, hs, M, 1.0f, ab, T,
                            d + (size_t)r0 * C, C, 1.0f, dv, C3);
                /* softmax backward, folded with the score scale */
                for (int t = r0; t < r1; t++) {
                    float *drow = ds + (size_t)t * T;
                    softmax_row_backward(drow, a + (size_t)t * T, t + 1, scale);
                    for (int j = t + 1; j < r1; j++)
                        drow[j] = 0.0f;
                }
                /* dq[r0:r1] += ds[r0:r1, 0:r1] @ k[0:r1] */
                cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, M, hs, r1, 1.0f, dsb, T, k,
                            C3, 1.0f, dq + (size_t)r0 * C3, C3);
                /* dk[0:r1] += ds[r0:r1, 0:r1]^T @ q[r0:r1] */
                cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, r1, hs, M, 1.0f, dsb, T,
                            q + (size_t)r0 * C3, C3, 1.0f, dk, C3);
            }
        }
    }
}
