/* px_attention_cpu.c: causal multi-head self-attention on the CPU.
 *
 * Per (batch, head), q/k/v are read from the fused qkv tensor (B,T,3C)
 * with leading dimension 3C. The score, P@V, dP and dQ products run in
 * register tiles of 6 rows x 16 columns (panel(), below) over the causal
 * part only (a row tile's keys end at its last row, rounded up to 16),
 * with the operand walked by rows packed once per (batch, head) (k and v
 * transposed, k/v/dout/q rows made contiguous) into one malloc'd work
 * buffer per call; dV and dK are sgemm over row blocks of ATT_BLOCK rows.
 * Where that buffer cannot be had, everything falls back to sgemm in row
 * blocks (block [r0,r1) only needs key columns [0,r1)).
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
 * At head size 64 the score GEMMs are small (K = 64; 64-row blocks), and
 * OpenBLAS spent about a third of their time packing operands per call and
 * zeroing C (beta 0) rather than multiplying (bench_attn.c, perf). Here the
 * one operand that needs a transposed layout (k or v as (hs, T)) is packed
 * once per (batch, head) and reused by every row tile; the others are read
 * in place. */

#define MR 6  /* rows of C per register tile */
#define NR 16 /* columns of C per register tile (two 8-lane vectors) */

/* c (mr, N) = alpha * a (mr, K) @ b (K, N)  [+ c when acc], mr <= MR.
 * a(i, k) = a[i * ars + k * acs] (any strides: rows of q, or a transposed
 * view of att / dscores), b row k at b + k * ldb (unit stride), c row i at
 * c + i * ldc. Every element is summed in k order from 0, each term a
 * product then an add (no FMA contraction in ISO C), then scaled by alpha
 * once, so the bits of an element depend on neither the tile it falls in
 * nor the ISA the clone runs: the vector tiles and the scalar column tail
 * do the same operations. */
static inline __attribute__((always_inline)) void panel(float *restrict c, size_t ldc, const float *a, size_t ars, size_t acs,
                         const float *b, size_t ldb, int mr, int N, int K, float alpha, int acc)
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
        const float *bk = b + j;
        for (int k = 0; k < K; k++, bk += ldb) {
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
    for (; j < N; j++) /* column tail, the same operations one by one */
        for (int i = 0; i < mr; i++) {
            float s = 0.0f;
            for (int k = 0; k < K; k++)
                s += ar[i][(size_t)k * acs] * b[(size_t)k * ldb + j];
            float *ci = c + (size_t)i * ldc + j;
            *ci = acc ? alpha * s + *ci : alpha * s;
        }
}

/* dst (hs, T) <- src (T, hs) rows at stride ld: k or v transposed, packed;
 * by 8 rows at a time, so the writes are 8 floats long and the 8 source
 * rows stay in L1 */
static void pack_t(float *restrict dst, const float *src, size_t ld, int T, int hs)
{
    for (int t0 = 0; t0 < T; t0 += 8) {
        int n = T - t0 < 8 ? T - t0 : 8;
        for (int d = 0; d < hs; d++)
            for (int i = 0; i < n; i++)
                dst[(size_t)d * T + t0 + i] = src[(size_t)(t0 + i) * ld + d];
    }
}

/* dst (T, hs) <- src (T, hs) rows at stride ld, made contiguous (a GEMM
 * operand walked row by row: 4 KiB apart in the fused qkv tensor they
 * would cost a TLB entry each) */
static void pack_rows(float *restrict dst, const float *src, size_t ld, int T, int hs)
{
    for (int t = 0; t < T; t++)
        memcpy(dst + (size_t)t * hs, src + (size_t)t * ld, (size_t)hs * sizeof(float));
}

/* columns a row tile [i0, i0 + mr) needs of a (T, T) causal score matrix:
 * keys [0, i0 + mr), rounded up to whole register tiles, at most T */
static inline int tile_cols(int i0, int mr, int T)
{
    int n = (i0 + mr + NR - 1) / NR * NR;
    return n < T ? n : T;
}

/* Forward of one (b, h) with the tiled GEMMs; kt: 2*hs*T floats of work
 * (k transposed, then v's rows packed). */
PX__CLONES
static void forward_tiled(float *o, float *a, const float *q, const float *k, const float *v,
                          float *kt, int T, int C, int hs, float scale)
{
    const size_t C3 = 3 * (size_t)C;
    float *vc = kt + (size_t)hs * T;
    pack_t(kt, k, C3, T, hs);
    pack_rows(vc, v, C3, T, hs);
    for (int i0 = 0; i0 < T; i0 += MR) {
        int mr = T - i0 < MR ? T - i0 : MR;
        /* scores[i0:i0+mr, 0:n] = scale * q @ k^T (beyond the diagonal
         * computed, then overwritten by the softmax's zeros) */
        panel(a + (size_t)i0 * T, T, q + (size_t)i0 * C3, C3, 1, kt, T, mr,
              tile_cols(i0, mr, T), hs, scale, 0);
        for (int t = i0; t < i0 + mr; t++)
            softmax_row(a + (size_t)t * T, t + 1, T);
        /* out[i0:i0+mr] = att[i0:i0+mr, 0:i0+mr] @ v[0:i0+mr] (the zeros
         * past a row's diagonal add exact zeros) */
        panel(o + (size_t)i0 * C, C, a + (size_t)i0 * T, T, 1, vc, hs, mr, hs, i0 + mr, 1.0f,
              0);
    }
}

/* Backward of one (b, h) with the tiled GEMMs (dq, dk, dv accumulate);
 * ds: T*T floats of work, vt: 5*hs*T floats of work (v transposed, the
 * rows of k, dout and q packed, dv^T; dk^T reuses the first). */
PX__CLONES
static void backward_tiled(float *dq, float *dk, float *dv, float *ds, float *vt,
                           const float *q, const float *k, const float *v, const float *a,
                           const float *d, int T, int C, int hs, float scale)
{
    const size_t C3 = 3 * (size_t)C;
    const size_t th = (size_t)T * hs;
    float *kc = vt + th, *dc = vt + 2 * th, *qc = vt + 3 * th;
    pack_t(vt, v, C3, T, hs);
    pack_rows(kc, k, C3, T, hs);
    pack_rows(dc, d, (size_t)C, T, hs);
    pack_rows(qc, q, C3, T, hs);
    for (int i0 = 0; i0 < T; i0 += MR) {
        int mr = T - i0 < MR ? T - i0 : MR;
        /* datt[i0:i0+mr, 0:n] = dout @ v^T, then dscores in place */
        panel(ds + (size_t)i0 * T, T, d + (size_t)i0 * C, C, 1, vt, T, mr,
              tile_cols(i0, mr, T), hs, 1.0f, 0);
        for (int t = i0; t < i0 + mr; t++) {
            float *drow = ds + (size_t)t * T;
            softmax_row_backward(drow, a + (size_t)t * T, t + 1, scale);
            if (t + 1 < T)
                memset(drow + t + 1, 0, (size_t)(T - t - 1) * sizeof(float));
        }
        /* dq[i0:i0+mr] += ds[i0:i0+mr, 0:i0+mr] @ k[0:i0+mr] */
        panel(dq + (size_t)i0 * C3, C3, ds + (size_t)i0 * T, T, 1, kc, hs, mr, hs, i0 + mr,
              1.0f, 1);
    }
    /* dv += att^T @ dout, dk += ds^T @ q by sgemm over row blocks of
     * ATT_BLOCK queries (block [r0, r1) touches keys [0, r1) only) */
    for (int r0 = 0; r0 < T; r0 += ATT_BLOCK) {
        int r1 = r0 + ATT_BLOCK < T ? r0 + ATT_BLOCK : T, M = r1 - r0;
        cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, r1, hs, M, 1.0f, a + (size_t)r0 * T,
                    T, dc + (size_t)r0 * hs, hs, 1.0f, dv, (int)C3);
        cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, r1, hs, M, 1.0f,
                    ds + (size_t)r0 * T, T, qc + (size_t)r0 * hs, hs, 1.0f, dk, (int)C3);
    }
}

PX__CLONES
void px__cpu_attention_forward(float *out, float *att, const float *inp, int B, int T, int C,
                               int NH)
{
    const int hs = C / NH, C3 = 3 * C;
    const float scale = 1.0f / sqrtf((float)hs);
    float *kt = malloc(2 * (size_t)hs * T * sizeof(float));

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
    float *vt = malloc(5 * (size_t)hs * T * sizeof(float));

    for (int b = 0; b < B; b++) {
        for (int h = 0; h < NH; h++) {
            const size_t qoff = (size_t)b * T * C3 + (size_t)h * hs;
            const float *q = inp + qoff, *k = q + C, *v = q + 2 * C;
            float *dq = dinp + qoff, *dk = dq + C, *dv = dq + 2 * C;
            const float *a = att + ((size_t)b * NH + h) * T * T;
            const float *d = dout + (size_t)b * T * C + (size_t)h * hs;
            float *ds = scratch; /* (T,T): datt, then dscores in place */

            if (vt) {
                backward_tiled(dq, dk, dv, ds, vt, q, k, v, a, d, T, C, hs, scale);
                continue;
            }
            /* no memory for the packed v: sgemm by row blocks */

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
    free(vt);
}
