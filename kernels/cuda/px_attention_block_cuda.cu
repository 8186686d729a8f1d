/* px_attention_block_cuda.cu: blockwise attention with an online softmax on
 * the device (px_kernels.h: attention_block_forward / _backward / _delta),
 * the ops ring attention (engine/ring_attn.c) runs per key/value block.
 *
 * The same math as the CPU reference (px_attention_block_cpu.c; the merge
 * is FlashAttention-2's, Dao 2023), in the same steps: per (b, h) the
 * products are cuBLAS sgemm calls (strict fp32) on strided views of q, kv
 * and out, and the softmax rows are one warp each:
 *   forward:  S = scale q k^T (Tq,Tk) in scratch; per row t the block's
 *             log-sum-exp over the keys it sees, merged into lse[t]
 *             (logaddexp), out's row rescaled by exp(old - new) (zeroed on
 *             the first block), S <- exp(S - lse'); then out += S v;
 *   backward: P = exp(scale q k^T - lse); dv += P^T dout; dS = dout v^T;
 *             dS <- P (dS - delta) scale; dq += dS k; dk += dS^T q;
 *   delta:    one warp per (b, h, t): sum over the head's channels of
 *             out * dout.
 * Deterministic: no atomics; warp sums in a fixed butterfly order; the
 * GEMMs are cuBLAS's deterministic sgemm. The scratch the table passes
 * (Tq*Tk floats forward, 2*Tq*Tk backward) is device memory, reused for
 * every (b, h) in stream order.
 *
 * bf16 (attention_block_bf16_*, px_kernels.h; CPU reference in
 * px_attention_bf16_cpu.c): q, k, v and dout are first rounded to bf16 into
 * contiguous copies in the backend's device scratch; the products are the
 * same sgemm calls on those (a bf16 x bf16 product is exact in fp32, the
 * sums fp32). The forward's rows kernel snaps each row's max down to a
 * multiple of ln 2 (m) and writes bf16(exp(S - m)) exp(m - lse') for the
 * P v product (the rounded unnormalised probabilities, times a per-row
 * fp32 factor); the backward rounds P / c for dv and the scaled dS / c for
 * dq and dk, c = exp(m - lse) with m = lse snapped, the row's normaliser kept
 * outside the rounding as the CPU reference does. Stream: the backend's. */
#include "px_cuda_common.cuh"
#include "px_attn_block_at.h"

#include <math.h>

/* Row-major C (M,N) = alpha op(A) op(B) + beta C with op(A) (M,K), op(B)
 * (K,N); leading dimensions in floats. cuBLAS is column-major: a row-major
 * matrix is its transpose there, so this computes C^T = op(B)^T op(A)^T. */
static void rm_gemm(int ta, int tb, int M, int N, int K, float alpha, const float *A, size_t lda,
                    const float *B, size_t ldb, float beta, float *C, size_t ldc)
{
    PX_CUBLAS_CHECK(cublasSgemm(px__cuda.cublas, tb ? CUBLAS_OP_T : CUBLAS_OP_N,
                                ta ? CUBLAS_OP_T : CUBLAS_OP_N, N, M, K, &alpha, B, (int)ldb, A,
                                (int)lda, &beta, C, (int)ldc));
}

/* one warp per query row t of one (b, h): the forward's merge step; BF16:
 * the row's reference max snapped to a multiple of ln 2 and the
 * probabilities rounded as their bf16 unnormalised values (file comment) */
template <bool BF16>
__global__ void block_fwd_rows_kernel(float *s, float *orow0, float *lb, int Tq, int Tk, int hs,
                                      size_t o_ld, int causal, int init)
{
    const int t = blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32, lane = threadIdx.x % 32;
    if (t >= Tq)
        return;
    float *row = s + (size_t)t * Tk, *orow = orow0 + (size_t)t * o_ld;
    const int n = causal ? min(t + 1, Tk) : Tk; /* keys this row sees */
    float mx = -INFINITY;
    for (int j = lane; j < n; j += 32)
        mx = fmaxf(mx, row[j]);
    mx = px__warp_max(mx);
    if (BF16)
        mx = px__snap_ln2(mx);
    float sum = 0.0f;
    for (int j = lane; j < n; j += 32)
        sum += expf(row[j] - mx);
    sum = px__warp_sum(sum);
    const float blse = mx + logf(sum), old = lb[t];
    float nl;
    if (init || old == -INFINITY) {
        nl = blse;
        for (int c = lane; c < hs; c += 32)
            orow[c] = 0.0f;
    } else {
        float hi = fmaxf(old, blse), lo = fminf(old, blse);
        nl = hi + log1pf(expf(lo - hi));
        float alpha = expf(old - nl);
        for (int c = lane; c < hs; c += 32)
            orow[c] *= alpha;
    }
    __syncwarp();
    if (lane == 0)
        lb[t] = nl;
    for (int j = lane; j < Tk; j += 32)
        row[j] = j < n ? (BF16 ? px__rb16<true>(expf(row[j] - mx)) * expf(mx - nl)
                               : expf(row[j] - nl))
                       : 0.0f;
}

/* backward, P = exp(S - lse) in place (masked above the diagonal) */
__global__ void block_bwd_p_kernel(float *p, const float *lb, int Tq, int Tk, int causal)
{
    size_t total = (size_t)Tq * Tk;
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < total;
         i += (size_t)gridDim.x * blockDim.x) {
        int t = (int)(i / Tk), j = (int)(i % Tk);
        int n = causal ? t + 1 : Tk;
        p[i] = j < n ? expf(p[i] - lb[t]) : 0.0f;
    }
}

/* the row's normaliser c = exp(m - lse), m = lse snapped (BF16) */
__device__ __forceinline__ float bf16_norm(float lse) { return expf(px__snap_ln2(lse) - lse); }

/* backward, dS = P (dP - delta) scale in place over dP (BF16: c rb(dS / c)) */
template <bool BF16>
__global__ void block_bwd_ds_kernel(float *ds, const float *p, const float *db, const float *lb,
                                    int Tq, int Tk, float scale)
{
    size_t total = (size_t)Tq * Tk;
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < total;
         i += (size_t)gridDim.x * blockDim.x) {
        int t = (int)(i / Tk);
        float v = p[i] * (ds[i] - db[t]) * scale;
        if (BF16) {
            float c = bf16_norm(lb[t]);
            v = px__rb16<true>(v / c) * c;
        }
        ds[i] = v;
    }
}

/* one warp per (b, h, t): delta = sum_c out * dout over the head */
__global__ void block_delta_kernel(float *delta, const float *out, const float *dout,
                                   px_attn_block_t g)
{
    const size_t rows = (size_t)g.B * g.NH * g.Tq;
    const size_t r = blockIdx.x * (size_t)(blockDim.x / 32) + threadIdx.x / 32;
    const int lane = threadIdx.x % 32;
    if (r >= rows)
        return;
    const int t = (int)(r % g.Tq), h = (int)((r / g.Tq) % g.NH), b = (int)(r / g.Tq / g.NH);
    const size_t o = b * g.o_bs + (size_t)t * g.o_ld + (size_t)h * g.hs;
    float s = 0.0f;
    for (int c = lane; c < g.hs; c += 32)
        s += out[o + c] * dout[o + c];
    s = px__warp_sum(s);
    if (lane == 0)
        delta[b * g.lse_bs + h * g.lse_hs + t] = s;
}

/* dst (rows, cols) contiguous = bf16(src), src rows `ld` floats apart */
__global__ void round_rows_kernel(float *dst, const float *src, size_t ld, int rows, int cols)
{
    size_t total = (size_t)rows * cols;
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < total;
         i += (size_t)gridDim.x * blockDim.x)
        dst[i] = px__rb16<true>(src[(i / cols) * ld + i % cols]);
}

static unsigned grid_for(size_t n)
{
    size_t b = (n + 255) / 256;
    return (unsigned)(b > 65535u * 16u ? 65535u * 16u : (b ? b : 1));
}

void px__cuda_attention_block_forward(float *out, float *lse, const float *q,
                                                 const float *kv, const px_attn_block_t *g,
                                                 float *scratch)
{
    const int Tq = g->Tq, Tk = g->Tk, hs = g->hs;
    const float scale = 1.0f / sqrtf((float)hs);
    for (int b = 0; b < g->B; b++) {
        for (int h = 0; h < g->NH; h++) {
            const px_attn_at_t at = px_attn_block_at(g, b, h);
            const float *qb = q + at.q, *kb = kv + at.kv, *vb = kb + g->v_off;
            float *ob = out + at.o, *lb = lse + at.lse;
            rm_gemm(0, 1, Tq, Tk, hs, scale, qb, g->q_ld, kb, g->kv_ld, 0.0f, scratch, Tk);
            block_fwd_rows_kernel<false><<<(Tq + 7) / 8, 256, 0, px__cuda.stream>>>(
                scratch, ob, lb, Tq, Tk, hs, g->o_ld, g->causal, g->init);
            PX_CUDA_LAUNCHED();
            rm_gemm(0, 0, Tq, hs, Tk, 1.0f, scratch, Tk, vb, g->kv_ld, 1.0f, ob, g->o_ld);
        }
    }
}

void px__cuda_attention_block_backward(float *dq, float *dkv, const float *dout,
                                                  const float *q, const float *kv,
                                                  const float *lse, const float *delta,
                                                  const px_attn_block_t *g, float *scratch)
{
    const int Tq = g->Tq, Tk = g->Tk, hs = g->hs;
    const float scale = 1.0f / sqrtf((float)hs);
    const size_t tt = (size_t)Tq * Tk;
    for (int b = 0; b < g->B; b++) {
        for (int h = 0; h < g->NH; h++) {
            const px_attn_at_t at = px_attn_block_at(g, b, h);
            const size_t qo = at.q, ko = at.kv, oo = at.o, lo = at.lse;
            const float *qb = q + qo, *kb = kv + ko, *vb = kb + g->v_off, *db = dout + oo;
            float *dqb = dq + qo, *dkb = dkv + ko, *dvb = dkb + g->v_off;
            float *p = scratch, *ds = scratch + tt;
            rm_gemm(0, 1, Tq, Tk, hs, scale, qb, g->q_ld, kb, g->kv_ld, 0.0f, p, Tk);
            block_bwd_p_kernel<<<grid_for(tt), 256, 0, px__cuda.stream>>>(p, lse + lo, Tq, Tk,
                                                                          g->causal);
            PX_CUDA_LAUNCHED();
            rm_gemm(1, 0, Tk, hs, Tq, 1.0f, p, Tk, db, g->o_ld, 1.0f, dvb, g->kv_ld);
            rm_gemm(0, 1, Tq, Tk, hs, 1.0f, db, g->o_ld, vb, g->kv_ld, 0.0f, ds, Tk);
            block_bwd_ds_kernel<false><<<grid_for(tt), 256, 0, px__cuda.stream>>>(
                ds, p, delta + lo, lse + lo, Tq, Tk, scale);
            PX_CUDA_LAUNCHED();
            rm_gemm(0, 0, Tq, hs, Tk, 1.0f, ds, Tk, kb, g->kv_ld, 1.0f, dqb, g->q_ld);
            rm_gemm(1, 0, Tk, hs, Tq, 1.0f, ds, Tk, qb, g->q_ld, 1.0f, dkb, g->kv_ld);
        }
    }
}

void px__cuda_attention_block_delta(float *delta, const float *out, const float *dout,
                                               const px_attn_block_t *g)
{
    size_t rows = (size_t)g->B * g->NH * g->Tq;
    if (rows == 0)
        return;
    block_delta_kernel<<<(unsigned)((rows + 7) / 8), 256, 0, px__cuda.stream>>>(delta, out, dout,
                                                                                *g);
    PX_CUDA_LAUNCHED();
}

/* dst (rows, hs) contiguous = bf16 of a strided view (rows `ld` apart) */
static void round_rows(float *dst, const float *src, size_t ld, int rows, int hs)
{
    round_rows_kernel<<<grid_for((size_t)rows * hs), 256, 0, px__cuda.stream>>>(dst, src, ld,
                                                                             rows, hs);
    PX_CUDA_LAUNCHED();
}

void px__cuda_attention_block_bf16_forward(float *out, float *lse, const float *q,
                                           const float *kv, const px_attn_block_t *g,
                                           float *scratch)
{
    const int Tq = g->Tq, Tk = g->Tk, hs = g->hs;
    const float scale = 1.0f / sqrtf((float)hs);
    const size_t qh = (size_t)Tq * hs, kh = (size_t)Tk * hs;
    float *r = (float *)px__cuda_scratch((qh + 2 * kh) * sizeof(float));
    if (!r)
        return;
    float *qr = r, *kr = r + qh, *vr = kr + kh; /* the rounded operands */
    for (int b = 0; b < g->B; b++) {
        for (int h = 0; h < g->NH; h++) {
            const px_attn_at_t at = px_attn_block_at(g, b, h);
            const float *qb = q + at.q, *kb = kv + at.kv, *vb = kb + g->v_off;
            float *ob = out + at.o, *lb = lse + at.lse;
            round_rows(qr, qb, g->q_ld, Tq, hs);
            round_rows(kr, kb, g->kv_ld, Tk, hs);
            round_rows(vr, vb, g->kv_ld, Tk, hs);
            rm_gemm(0, 1, Tq, Tk, hs, scale, qr, hs, kr, hs, 0.0f, scratch, Tk);
            block_fwd_rows_kernel<true><<<(Tq + 7) / 8, 256, 0, px__cuda.stream>>>(
                scratch, ob, lb, Tq, Tk, hs, g->o_ld, g->causal, g->init);
            PX_CUDA_LAUNCHED();
            rm_gemm(0, 0, Tq, hs, Tk, 1.0f, scratch, Tk, vr, hs, 1.0f, ob, g->o_ld);
        }
    }
}

/* dst (Tq, Tk) = c rb(P / c) per row, c = bf16_norm(lse) */
__global__ void round_p_kernel(float *dst, const float *p, const float *lb, int Tq, int Tk)
{
    size_t n = (size_t)Tq * Tk;
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n;
         i += (size_t)gridDim.x * blockDim.x) {
        float c = bf16_norm(lb[i / Tk]);
        dst[i] = px__rb16<true>(p[i] / c) * c;
    }
}

void px__cuda_attention_block_bf16_backward(float *dq, float *dkv, const float *dout,
                                            const float *q, const float *kv, const float *lse,
                                            const float *delta, const px_attn_block_t *g,
                                            float *scratch)
{
    const int Tq = g->Tq, Tk = g->Tk, hs = g->hs;
    const float scale = 1.0f / sqrtf((float)hs);
    const size_t tt = (size_t)Tq * Tk, qh = (size_t)Tq * hs, kh = (size_t)Tk * hs;
    float *r = (float *)px__cuda_scratch((2 * qh + 2 * kh) * sizeof(float));
    if (!r)
        return;
    float *qr = r, *dr = r + qh, *kr = dr + qh, *vr = kr + kh; /* the rounded operands */
    for (int b = 0; b < g->B; b++) {
        for (int h = 0; h < g->NH; h++) {
            const px_attn_at_t at = px_attn_block_at(g, b, h);
            const size_t qo = at.q, ko = at.kv, oo = at.o, lo = at.lse;
            float *dqb = dq + qo, *dkb = dkv + ko, *dvb = dkb + g->v_off;
            float *p = scratch, *ds = scratch + tt;
            round_rows(qr, q + qo, g->q_ld, Tq, hs);
            round_rows(dr, dout + oo, g->o_ld, Tq, hs);
            round_rows(kr, kv + ko, g->kv_ld, Tk, hs);
            round_rows(vr, kv + ko + g->v_off, g->kv_ld, Tk, hs);
            rm_gemm(0, 1, Tq, Tk, hs, scale, qr, hs, kr, hs, 0.0f, p, Tk);
            block_bwd_p_kernel<<<grid_for(tt), 256, 0, px__cuda.stream>>>(p, lse + lo, Tq, Tk,
                                                                          g->causal);
            PX_CUDA_LAUNCHED();
            /* dv += bf16(P)^T dout^ (bf16(P) in ds for the moment) */
            round_p_kernel<<<grid_for(tt), 256, 0, px__cuda.stream>>>(ds, p, lse + lo, Tq, Tk);
            PX_CUDA_LAUNCHED();
            rm_gemm(1, 0, Tk, hs, Tq, 1.0f, ds, Tk, dr, hs, 1.0f, dvb, g->kv_ld);
            rm_gemm(0, 1, Tq, Tk, hs, 1.0f, dr, hs, vr, hs, 0.0f, ds, Tk);
            block_bwd_ds_kernel<true><<<grid_for(tt), 256, 0, px__cuda.stream>>>(
                ds, p, delta + lo, lse + lo, Tq, Tk, scale);
            PX_CUDA_LAUNCHED();
            rm_gemm(0, 0, Tq, hs, Tk, 1.0f, ds, Tk, kr, hs, 1.0f, dqb, g->q_ld);
            rm_gemm(1, 0, Tk, hs, Tq, 1.0f, ds, Tk, qr, hs, 1.0f, dkb, g->kv_ld);
        }
    }
}
