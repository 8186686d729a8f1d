/* px_attention_cpu.c: causal multi-head self-attention on the CPU.
 *
 * Per (batch, head), q/k/v are read from the fused qkv tensor (B,T,3C)
 * with leading dimension 3C. Forward: the scores and P@V run in register
 * tiles of 6 rows x 16 columns (panel(), below) over the causal part only
 * (a row tile's keys end at its last row, rounded up to 16), with k^T and
 * v packed once per (batch, head) into one aligned work buffer per call;
 * where that buffer cannot be had, sgemm in row blocks as the backward.
 * Backward: sgemm in row blocks of ATT_BLOCK rows (block [r0,r1) only
 * needs key columns [0,r1), which skips most of the masked upper
 * triangle); tiling it as the forward measured no faster (issue 13).
 * Invariant: att rows are zero beyond the diagonal, for every (b,h,t).
 * Stateless; any thread. */
#include "px_kernels_cpu.h"

#include "px_vec_cpu.h"

#include <cblas.h>
#include <math.h>
#include <stdlib.h>
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

/* ---- the GEMMs of one (batch, head), register-tiled ----
 *
 * At head size 64 the attention GEMMs are small (K = 64, or 64-row
 * blocks), and OpenBLAS spent about a third of their time packing operands
 * per call and zeroing C (beta 0) rather than multiplying (bench_attn.c,
 * perf). Here the operand a tile streams through (k^T for the scores, v
 * for P@V) is packed once per (batch, head) into
 * 16-column panels, each panel K rows of 16 contiguous floats, so the k
 * loop of a tile reads memory in order; the other operand is read in
 * place, one float at a time, broadcast. */

#define MR 6  /* rows of C per register tile */
#define NR 16 /* columns of C per register tile (two 8-lane vectors) */

/* c (mr, N) = alpha * a (mr, K) @ b (K, N)  [+ c when acc], mr <= MR.
 * a(i, k) = a[i * ars + k * acs] (rows of q, dout, att or dscores at any
 * stride). b is packed by pack_panels(): element (k, j) at
 * b[(j / NR) * bps + k * NR + j % NR], bps = NR * (the K it was packed
 * with), so a caller may use the first K rows of a panel. c row i at
 * c + i * ldc. Every element is summed in k order from 0, each term a
 * product then an add (no FMA contraction in ISO C), then scaled by alpha
 * once, so the bits of an element depend on neither the tile it falls in
 * nor the ISA the clone runs: the vector tiles and the scalar column tail
 * do the same operations. */
static inline __attribute__((always_inline)) void
panel(float *restrict c, size_t ldc, const float *a, size_t ars, size_t acs, const float *b,
      size_t bps, int mr, int N, int K, float alpha, int acc)
{
    const float *ar[MR];
    for (int i = 0; i < MR; i++) /* rows past mr repeat the last: computed, not stored */
        ar[i] = a + (size_t)(i < mr ? i : mr - 1) * ars;
    const px__v8f va = px__v8f_set1(alpha);
    int j = 0;
    for (; j + NR <= N; j += NR) {
        px__v8f c0[MR], c1[MR];
        for (int i = 0; i < MR; i++)
            c0[i] = c1[i] = px__v8f_set1(0.0f);
        const float *bk = b + (size_t)(j / NR) * bps;
        for (int k = 0; k < K; k++, bk += NR) {
            px__v8f b0 = px__v8f_load(bk), b1 = px__v8f_load(bk + 8);
            size_t ko = (size_t)k * acs;
#pragma GCC unroll 6
            for (int i = 0; i < MR; i++) {
                float x = ar[i][ko]; /* scalar * vector: one broadcast */
                c0[i] += x * b0;
                c1[i] += x * b1;
            }
        }
        for (int i = 0; i < mr; i++) {
            float *ci = c + (size_t)i * ldc + j;
            px__v8f r0 = va * c0[i], r1 = va * c1[i];
            if (acc) {
                r0 += px__v8f_load(ci);
                r1 += px__v8f_load(ci + 8);
            }
            px__v8f_store(ci, r0);
            px__v8f_store(ci + 8, r1);
        }
    }
    for (; j < N; j++) { /* column tail, the same operations one by one */
        const float *bj = b + (size_t)(j / NR) * bps + j % NR;
        for (int i = 0; i < mr; i++) {
            float s = 0.0f;
            for (int k = 0; k < K; k++)
                s += ar[i][(size_t)k * acs] * bj[(size_t)k * NR];
            float *ci = c + (size_t)i * ldc + j;
            *ci = acc ? alpha * s + *ci : alpha * s;
        }
    }
}

/* Pack a (K, N) operand into NR-column panels for panel(): element (k, j)
 * = src[k * sk + j * sj] goes to dst[(j / NR) * NR * K + k * NR + j % NR];
 * sk = 1, sj = ld packs the transpose of a (N, K) row-major matrix (k^T,
 * v^T: K = hs, N = T), sk = ld, sj = 1 a (K, N) one (v, k: K = T, N = hs).
 * dst holds ceil(N / NR) * NR * K floats; a last partial panel's unused
 * columns are left as they are (never read). */
static void pack_panels(float *restrict dst, const float *src, size_t sk, size_t sj, int K,
                        int N)
{
    for (int j0 = 0; j0 < N; j0 += NR) {
        int nj = N - j0 < NR ? N - j0 : NR;
        float *pd = dst + (size_t)j0 * K;
        if (sj == 1) {
            for (int k = 0; k < K; k++)
                memcpy(pd + (size_t)k * NR, src + (size_t)k * sk + j0, (size_t)nj * sizeof(float));
        } else {
            for (int jj = 0; jj < nj; jj++) { /* one source row at a time */
                const float *sr = src + (size_t)(j0 + jj) * sj;
                for (int k = 0; k < K; k++)
                    pd[(size_t)k * NR + jj] = sr[(size_t)k * sk];
            }
        }
    }
}

/* floats pack_panels() writes for N columns of K rows */
static inline size_t panels_size(int K, int N)
{
    return (size_t)(N + NR - 1) / NR * NR * K;
}

/* columns a row tile [i0, i0 + mr) needs of a (T, T) causal score matrix:
 * keys [0, i0 + mr), rounded up to whole register tiles, at most T */
static inline int tile_cols(int i0, int mr, int T)
{
    int n = (i0 + mr + NR - 1) / NR * NR;
    return n < T ? n : T;
}

/* Forward of one (b, h) with the tiled GEMMs; work: work_floats(T, hs). */
PX__CLONES
static void forward_tiled(float *o, float *a, const float *q, const float *k, const float *v,
                          float *work, int T, int C, int hs, float scale)
{
    const size_t C3 = 3 * (size_t)C;
    float *kt = work, *vp = work + panels_size(hs, T);
    pack_panels(kt, k, 1, C3, hs, T); /* k^T (hs, T) */
    pack_panels(vp, v, C3, 1, T, hs); /* v (T, hs) */
    for (int i0 = 0; i0 < T; i0 += MR) {
        int mr = T - i0 < MR ? T - i0 : MR;
        /* scores[i0:i0+mr, 0:n] = scale * q @ k^T (beyond the diagonal
         * computed, then overwritten by the softmax's zeros) */
        panel(a + (size_t)i0 * T, T, q + (size_t)i0 * C3, C3, 1, kt, (size_t)NR * hs, mr,
              tile_cols(i0, mr, T), hs, scale, 0);
        for (int t = i0; t < i0 + mr; t++)
            softmax_row(a + (size_t)t * T, t + 1, T);
        /* out[i0:i0+mr] = att[i0:i0+mr, 0:i0+mr] @ v[0:i0+mr] (the zeros
         * past a row's diagonal add exact zeros) */
        panel(o + (size_t)i0 * C, C, a + (size_t)i0 * T, T, 1, vp, (size_t)NR * T, mr, hs,
              i0 + mr, 1.0f, 0);
    }
}

/* the work buffer of forward_tiled: two packed operands,
 * 64-byte aligned (whole cache lines per packed row); NULL when out of
 * memory. Caller frees. */
static float *work_alloc(int T, int hs)
{
    size_t bytes = (panels_size(hs, T) + panels_size(T, hs)) * sizeof(float);
    return aligned_alloc(64, (bytes + 63) / 64 * 64);
}

PX__CLONES
void px__cpu_attention_forward(float *out, float *att, const float *inp, int B, int T, int C,
                               int NH)
{
    const int hs = C / NH, C3 = 3 * C;
    const float scale = 1.0f / sqrtf((float)hs);
    float *kt = work_alloc(T, hs);

    for (int b = 0; b < B; b++) {
        for (int h = 0; h < NH; h++) {
            const float *q = inp + (size_t)b * T * C3 + (size_t)h * hs;
            const float *k = q + C;
            const float *v = q + 2 * C;
            float *a = att + ((size_t)b * NH + h) * T * T;
            float *o = out + (size_t)b * T * C + (size_t)h * hs;

            if (kt) {
                forward_tiled(o, a, q, k, v, kt, T, C, hs, scale);
                continue;
            }
            /* no memory for the packed k: sgemm by row blocks (the same
             * math; results may differ in the last bits) */
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
    free(kt);
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
