/* px_attention_cuda.cu: causal multi-head self-attention on the device,
 * fused and never materialising the (T,T) matrix.
 *
 * The forward is the online-softmax recurrence of flash attention (Dao et
 * al., "FlashAttention", 2022; Milakov & Gimelshein, "Online normalizer
 * calculation for softmax", 2018): each thread owns one query row, key and
 * value tiles are staged in shared memory, the running max and sum rescale
 * the output accumulator once per tile. It saves only the log-sum-exp of
 * each row, lse (B,NH,T), in the first B*NH*T floats of the `att` buffer
 * the op table passes (sized (B,NH,T,T) for the CPU backend).
 *
 * The backward recomputes the probabilities from q, k and lse:
 *   P_ij = exp(scale q_i.k_j - lse_i), dP_ij = dO_i.v_j,
 *   D_i = sum_j P_ij dP_ij,  dS_ij = P_ij (dP_ij - D_i),
 *   dq_i += scale sum_j dS_ij k_j      (kernel 1: one thread per query),
 *   dk_j += scale sum_i dS_ij q_i, dv_j += sum_i P_ij dO_i
 *                                      (kernel 2: one thread per key).
 * Every sum runs in a fixed order: no atomics, results repeat bitwise.
 * Head sizes up to 128 (C/NH); a larger one is an error (logged, sticky).
 *
 * BF16 (the attention_bf16_* ops, px_kernels.h; the CPU reference is
 * px_attention_bf16_cpu.c): the same kernels with every operand of a product
 * rounded to bf16 (rb, nearest even) as it is loaded or formed - q, k, v,
 * dout^ for dP and dv, the probabilities, dS - and fp32 accumulation. The
 * forward's running max is snapped down to a multiple of ln 2 and the
 * unnormalised p = exp(s - m) is rounded for P v (l sums the unrounded
 * p); the backward rounds E = exp(s - m) for dv and E (dP - D) scale for dq
 * and dk, with m = lse snapped and the row's factor c = exp(m - lse) kept
 * outside the rounding, and computes D = rowsum(dout * out) from the
 * forward's weights,
 * D_i = sum_j rb(exp(s - m)) exp(m - lse) (dout_i . v^_j), m = lse snapped
 * (bf16 rounding commutes with the power-of-two exp(m)). fp32 on the CUDA
 * cores otherwise. Stream: the backend's. */
#include "px_cuda_common.cuh"

#include <float.h>
#include <math.h>

#define ATT_BQ 64 /* query (or key) rows per block = threads per block */
#define ATT_BK 32 /* rows of the staged tile */

template <bool BF16> __device__ __forceinline__ float rb(float x) { return px__rb16<BF16>(x); }
#define snap_ln2 px__snap_ln2

template <int HS, bool BF16>
__global__ void __launch_bounds__(ATT_BQ)
attention_forward_kernel(float *out, float *lse, const float *inp, int T, int C, int NH, int hs,
                         float scale)
{
    __shared__ float ks[ATT_BK][HS], vs[ATT_BK][HS];
    const int bh = blockIdx.y, b = bh / NH, h = bh % NH, C3 = 3 * C;
    const int t = blockIdx.x * ATT_BQ + threadIdx.x;
    const int tmax = min(T - 1, (int)(blockIdx.x * ATT_BQ + ATT_BQ - 1)); /* last row of block */
    const float *base = inp + (size_t)b * T * C3 + (size_t)h * hs;
    float q[HS], o[HS];
#pragma unroll
    for (int d = 0; d < HS; d++) {
        q[d] = (d < hs && t < T) ? rb<BF16>(base[(size_t)t * C3 + d]) * scale : 0.0f;
        o[d] = 0.0f;
    }
    float m = -FLT_MAX, l = 0.0f;
    for (int k0 = 0; k0 <= tmax; k0 += ATT_BK) {
        __syncthreads();
        for (int i = threadIdx.x; i < ATT_BK * hs; i += ATT_BQ) {
            int j = i / hs, d = i % hs;
            bool ok = k0 + j < T;
            ks[j][d] = ok ? rb<BF16>(base[(size_t)(k0 + j) * C3 + C + d]) : 0.0f;
            vs[j][d] = ok ? rb<BF16>(base[(size_t)(k0 + j) * C3 + 2 * C + d]) : 0.0f;
        }
        __syncthreads();
        if (t >= T || k0 > t)
            continue;
        const int nj = min(ATT_BK, t - k0 + 1);
        float s[ATT_BK];
        float tm = m;
#pragma unroll
        for (int j = 0; j < ATT_BK; j++) {
            float acc = 0.0f;
#pragma unroll
            for (int d = 0; d < HS; d++)
                acc += q[d] * ks[j][d];
            s[j] = j < nj ? acc : -FLT_MAX;
            tm = fmaxf(tm, s[j]);
        }
        if (BF16)
            tm = fmaxf(m, snap_ln2(tm));
        float corr = expf(m - tm);
        l *= corr;
#pragma unroll
        for (int d = 0; d < HS; d++)
            o[d] *= corr;
#pragma unroll
        for (int j = 0; j < ATT_BK; j++) {
            float p = j < nj ? expf(s[j] - tm) : 0.0f, pr = rb<BF16>(p);
            l += p;
#pragma unroll
            for (int d = 0; d < HS; d++)
                o[d] += pr * vs[j][d];
        }
        m = tm;
    }
    if (t < T) {
        float inv = 1.0f / l;
        float *dst = out + ((size_t)b * T + t) * C + (size_t)h * hs;
#pragma unroll
        for (int d = 0; d < HS; d++)
            if (d < hs)
                dst[d] = o[d] * inv;
        lse[(size_t)bh * T + t] = m + logf(l);
    }
}

/* kernel 1: one thread per query row i: D_i, then dq_i */
template <int HS, bool BF16>
__global__ void __launch_bounds__(ATT_BQ)
attention_dq_kernel(float *dinp, float *Dbuf, const float *dout, const float *inp,
                    const float *lse, int T, int C, int NH, int hs, float scale)
{
    __shared__ float ks[ATT_BK][HS], vs[ATT_BK][HS];
    const int bh = blockIdx.y, b = bh / NH, h = bh % NH, C3 = 3 * C;
    const int t = blockIdx.x * ATT_BQ + threadIdx.x;
    const int tmax = min(T - 1, (int)(blockIdx.x * ATT_BQ + ATT_BQ - 1));
    const float *base = inp + (size_t)b * T * C3 + (size_t)h * hs;
    const float *dbase = dout + (size_t)b * T * C + (size_t)h * hs;
    float q[HS], g[HS], dq[HS];
#pragma unroll
    for (int d = 0; d < HS; d++) {
        bool ok = d < hs && t < T;
        q[d] = ok ? rb<BF16>(base[(size_t)t * C3 + d]) * scale : 0.0f;
        g[d] = ok ? dbase[(size_t)t * C + d] : 0.0f; /* unrounded: D (BF16) */
        dq[d] = 0.0f;
    }
    const float L = t < T ? lse[(size_t)bh * T + t] : 0.0f;
    const float mL = BF16 ? snap_ln2(L) : 0.0f, wL = BF16 ? expf(mL - L) : 0.0f;
    float Di = 0.0f;
    for (int pass = 0; pass < 2; pass++) {
        for (int k0 = 0; k0 <= tmax; k0 += ATT_BK) {
            __syncthreads();
            for (int i = threadIdx.x; i < ATT_BK * hs; i += ATT_BQ) {
                int j = i / hs, d = i % hs;
                bool ok = k0 + j < T;
                ks[j][d] = ok ? rb<BF16>(base[(size_t)(k0 + j) * C3 + C + d]) : 0.0f;
                vs[j][d] = ok ? rb<BF16>(base[(size_t)(k0 + j) * C3 + 2 * C + d]) : 0.0f;
            }
            __syncthreads();
            if (t >= T || k0 > t)
                continue;
            const int nj = min(ATT_BK, t - k0 + 1);
            for (int j = 0; j < nj; j++) {
                float s = 0.0f, dp = 0.0f;
                /* BF16: pass 0 dots the unrounded dout (D), pass 1 dout^ */
                const bool gr = BF16 && pass == 1;
#pragma unroll
                for (int d = 0; d < HS; d++) {
                    s += q[d] * ks[j][d];
                    dp += (gr ? rb<BF16>(g[d]) : g[d]) * vs[j][d];
                }
                float p = expf(s - L);
                if (pass == 0) {
                    /* BF16: the forward's weight rb(exp(s - m)) exp(m - L) */
                    Di += (BF16 ? rb<BF16>(expf(s - mL)) * wL : p) * dp;
                } else {
                    /* BF16: c rb(E (dP - D) scale), E = exp(s - m), c = exp(m - L) */
                    float ds = BF16 ? rb<BF16>(expf(s - mL) * (dp - Di) * scale) * wL
                                    : p * (dp - Di) * scale;
#pragma unroll
                    for (int d = 0; d < HS; d++)
                        dq[d] += ds * ks[j][d];
                }
            }
        }
    }
    if (t < T) {
        float *dst = dinp + (size_t)b * T * C3 + (size_t)t * C3 + (size_t)h * hs;
#pragma unroll
        for (int d = 0; d < HS; d++)
            if (d < hs)
                dst[d] += dq[d];
        Dbuf[(size_t)bh * T + t] = Di;
    }
}

/* kernel 2: one thread per key row j: dk_j and dv_j over queries i >= j */
template <int HS, bool BF16>
__global__ void __launch_bounds__(ATT_BQ)
attention_dkv_kernel(float *dinp, const float *Dbuf, const float *dout, const float *inp,
                     const float *lse, int T, int C, int NH, int hs, float scale)
{
    __shared__ float qs[ATT_BK][HS], gs[ATT_BK][HS], ls[ATT_BK], Ds[ATT_BK];
    const int bh = blockIdx.y, b = bh / NH, h = bh % NH, C3 = 3 * C;
    const int j = blockIdx.x * ATT_BQ + threadIdx.x;
    const int jmin = blockIdx.x * ATT_BQ; /* first key of the block */
    const float *base = inp + (size_t)b * T * C3 + (size_t)h * hs;
    const float *dbase = dout + (size_t)b * T * C + (size_t)h * hs;
    float k[HS], v[HS], dk[HS], dv[HS];
#pragma unroll
    for (int d = 0; d < HS; d++) {
        bool ok = d < hs && j < T;
        k[d] = ok ? rb<BF16>(base[(size_t)j * C3 + C + d]) : 0.0f;
        v[d] = ok ? rb<BF16>(base[(size_t)j * C3 + 2 * C + d]) : 0.0f;
        dk[d] = 0.0f;
        dv[d] = 0.0f;
    }
    for (int i0 = jmin - jmin % ATT_BK; i0 < T; i0 += ATT_BK) {
        __syncthreads();
        for (int x = threadIdx.x; x < ATT_BK * hs; x += ATT_BQ) {
            int i = x / hs, d = x % hs;
            bool ok = i0 + i < T;
            /* BF16: q^ unscaled (dk takes the scale from the rounded dS) */
            qs[i][d] = ok ? (BF16 ? rb<BF16>(base[(size_t)(i0 + i) * C3 + d])
                                  : base[(size_t)(i0 + i) * C3 + d] * scale)
                          : 0.0f;
            gs[i][d] = ok ? rb<BF16>(dbase[(size_t)(i0 + i) * C + d]) : 0.0f;
        }
        if (threadIdx.x < ATT_BK) {
            int i = i0 + threadIdx.x;
            ls[threadIdx.x] = i < T ? lse[(size_t)bh * T + i] : 0.0f;
            Ds[threadIdx.x] = i < T ? Dbuf[(size_t)bh * T + i] : 0.0f;
        }
        __syncthreads();
        if (j >= T)
            continue;
        for (int i = 0; i < ATT_BK; i++) {
            int qi = i0 + i;
            if (qi < j || qi >= T)
                continue;
            float s = 0.0f, dp = 0.0f;
#pragma unroll
            for (int d = 0; d < HS; d++) {
                s += qs[i][d] * k[d];
                dp += gs[i][d] * v[d];
            }
            if (BF16)
                s *= scale;
            float p = expf(s - ls[i]), pr = p, ds;
            if (BF16) { /* E = exp(s - m), c = exp(m - L): c rb(E), c rb(E (dP - D) scale) */
                const float mL = snap_ln2(ls[i]), c = expf(mL - ls[i]), e = expf(s - mL);
                pr = rb<BF16>(e) * c;
                ds = rb<BF16>(e * (dp - Ds[i]) * scale) * c; /* dS carries the scale */
            } else {
                ds = p * (dp - Ds[i]); /* qs holds scale*q: dk gets the scale from it */
            }
#pragma unroll
            for (int d = 0; d < HS; d++) {
                dv[d] += pr * gs[i][d];
                dk[d] += ds * qs[i][d];
            }
        }
    }
    if (j < T) {
        float *dst = dinp + (size_t)b * T * C3 + (size_t)j * C3 + (size_t)h * hs;
#pragma unroll
        for (int d = 0; d < HS; d++) {
            if (d < hs) {
                dst[C + d] += dk[d];
                dst[2 * C + d] += dv[d];
            }
        }
    }
}

template <int HS, bool BF16>
static void launch_forward(float *out, float *lse, const float *inp, int B, int T, int C, int NH)
{
    dim3 grid((T + ATT_BQ - 1) / ATT_BQ, B * NH);
    int hs = C / NH;
    attention_forward_kernel<HS, BF16><<<grid, ATT_BQ, 0, px__cuda.stream>>>(
        out, lse, inp, T, C, NH, hs, 1.0f / sqrtf((float)hs));
    PX_CUDA_LAUNCHED();
}

template <int HS, bool BF16>
static void launch_backward(float *dinp, float *Dbuf, const float *dout, const float *inp,
                            const float *lse, int B, int T, int C, int NH)
{
    dim3 grid((T + ATT_BQ - 1) / ATT_BQ, B * NH);
    int hs = C / NH;
    float scale = 1.0f / sqrtf((float)hs);
    attention_dq_kernel<HS, BF16><<<grid, ATT_BQ, 0, px__cuda.stream>>>(dinp, Dbuf, dout, inp, lse, T,
                                                                  C, NH, hs, scale);
    PX_CUDA_LAUNCHED();
    attention_dkv_kernel<HS, BF16><<<grid, ATT_BQ, 0, px__cuda.stream>>>(dinp, Dbuf, dout, inp, lse, T,
                                                                   C, NH, hs, scale);
    PX_CUDA_LAUNCHED();
}

static int head_size_ok(int C, int NH)
{
    if (NH <= 0 || C % NH || C / NH > 128) {
        char msg[128];
        snprintf(msg, sizeof(msg), "attention: head size C/NH = %d/%d unsupported (at most 128)",
                 C, NH);
        px__cuda_fail(msg, __FILE__, __LINE__);
        return 0;
    }
    return 1;
}

template <bool BF16>
static void attention_forward(float *out, float *att, const float *inp, int B, int T, int C,
                              int NH)
{
    if (B <= 0 || T <= 0 || !head_size_ok(C, NH))
        return;
    int hs = C / NH;
    if (hs <= 32)
        launch_forward<32, BF16>(out, att, inp, B, T, C, NH);
    else if (hs <= 64)
        launch_forward<64, BF16>(out, att, inp, B, T, C, NH);
    else
        launch_forward<128, BF16>(out, att, inp, B, T, C, NH);
}

template <bool BF16>
static void attention_backward(float *dinp, const float *dout, const float *inp,
                               const float *att, int B, int T, int C, int NH)
{
    if (B <= 0 || T <= 0 || !head_size_ok(C, NH))
        return;
    float *Dbuf = (float *)px__cuda_scratch((size_t)B * NH * T * sizeof(float));
    if (!Dbuf)
        return;
    int hs = C / NH;
    if (hs <= 32)
        launch_backward<32, BF16>(dinp, Dbuf, dout, inp, att, B, T, C, NH);
    else if (hs <= 64)
        launch_backward<64, BF16>(dinp, Dbuf, dout, inp, att, B, T, C, NH);
    else
        launch_backward<128, BF16>(dinp, Dbuf, dout, inp, att, B, T, C, NH);
}

void px__cuda_attention_forward(float *out, float *att, const float *inp, int B, int T, int C,
                                int NH)
{
    attention_forward<false>(out, att, inp, B, T, C, NH);
}

void px__cuda_attention_backward(float *dinp, float *scratch, const float *dout,
                                 const float *inp, const float *att, int B, int T, int C, int NH)
{
    (void)scratch; /* the (T,T) work space of the CPU backend; not needed here */
    attention_backward<false>(dinp, dout, inp, att, B, T, C, NH);
}

void px__cuda_attention_bf16_forward(float *out, float *att, const float *inp, int B, int T,
                                     int C, int NH)
{
    attention_forward<true>(out, att, inp, B, T, C, NH);
}

void px__cuda_attention_bf16_backward(float *dinp, float *scratch, const float *dout,
                                      const float *inp, const float *att, int B, int T, int C,
                                      int NH)
{
    (void)scratch;
    attention_backward<true>(dinp, dout, inp, att, B, T, C, NH);
}
