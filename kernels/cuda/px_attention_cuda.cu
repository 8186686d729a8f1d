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
 * fp32 throughout, on the CUDA cores (the bf16 tensor-core path is a
 * separate kernel, not written yet). Stream: the backend's. */
#include "px_cuda_common.cuh"

#include <float.h>
#include <math.h>

#define ATT_BQ 64 /* query (or key) rows per block = threads per block */
#define ATT_BK 32 /* rows of the staged tile */

template <int HS>
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
        q[d] = (d < hs && t < T) ? base[(size_t)t * C3 + d] * scale : 0.0f;
        o[d] = 0.0f;
    }
    float m = -FLT_MAX, l = 0.0f;
    for (int k0 = 0; k0 <= tmax; k0 += ATT_BK) {
        __syncthreads();
        for (int i = threadIdx.x; i < ATT_BK * hs; i += ATT_BQ) {
            int j = i / hs, d = i % hs;
            bool ok = k0 + j < T;
            ks[j][d] = ok ? base[(size_t)(k0 + j) * C3 + C + d] : 0.0f;
            vs[j][d] = ok ? base[(size_t)(k0 + j) * C3 + 2 * C + d] : 0.0f;
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
        float corr = expf(m - tm);
        l *= corr;
#pragma unroll
        for (int d = 0; d < HS; d++)
            o[d] *= corr;
#pragma unroll
        for (int j = 0; j < ATT_BK; j++) {
            float p = j < nj ? expf(s[j] - tm) : 0.0f;
            l += p;
#pragma unroll
            for (int d = 0; d < HS; d++)
                o[d] += p * vs[j][d];
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
template <int HS>
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
        q[d] = ok ? base[(size_t)t * C3 + d] * scale : 0.0f;
        g[d] = ok ? dbase[(size_t)t * C + d] : 0.0f;
        dq[d] = 0.0f;
    }
    const float L = t < T ? lse[(size_t)bh * T + t] : 0.0f;
    float Di = 0.0f;
    for (int pass = 0; pass < 2; pass++) {
        for (int k0 = 0; k0 <= tmax; k0 += ATT_BK) {
            __syncthreads();
            for (int i = threadIdx.x; i < ATT_BK * hs; i += ATT_BQ) {
                int j = i / hs, d = i % hs;
                bool ok = k0 + j < T;
                ks[j][d] = ok ? base[(size_t)(k0 + j) * C3 + C + d] : 0.0f;
                vs[j][d] = ok ? base[(size_t)(k0 + j) * C3 + 2 * C + d] : 0.0f;
            }
            __syncthreads();
            if (t >= T || k0 > t)
                continue;
            const int nj = min(ATT_BK, t - k0 + 1);
            for (int j = 0; j < nj; j++) {
                float s = 0.0f, dp = 0.0f;
#pragma unroll
                for (int d = 0; d < HS; d++) {
                    s += q[d] * ks[j][d];
                    dp += g[d] * vs[j][d];
                }
                float p = expf(s - L);
                if (pass == 0) {
                    Di += p * dp;
                } else {
                    float ds = p * (dp - Di) * scale;
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
template <int HS>
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
        k[d] = ok ? base[(size_t)j * C3 + C + d] : 0.0f;
        v[d] = ok ? base[(size_t)j * C3 + 2 * C + d] : 0.0f;
        dk[d] = 0.0f;
        dv[d] = 0.0f;
    }
    for (int i0 = jmin - jmin % ATT_BK; i0 < T; i0 += ATT_BK) {
        __syncthreads();
        for (int x = threadIdx.x; x < ATT_BK * hs; x += ATT_BQ) {
            int i = x / hs, d = x % hs;
            bool ok = i0 + i < T;
            qs[i][d] = ok ? base[(size_t)(i0 + i) * C3 + d] * scale : 0.0f;
            gs[i][d] = ok ? dbase[(size_t)(i0 + i) * C + d] : 0.0f;
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
            float p = expf(s - ls[i]);
            float ds = p * (dp - Ds[i]); /* qs holds scale*q: dk gets the scale from it */
#pragma unroll
            for (int d = 0; d < HS; d++) {
                dv[d] += p * gs[i][d];
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

template <int HS>
static void launch_forward(float *out, float *lse, const float *inp, int B, int T, int C, int NH)
{
    dim3 grid((T + ATT_BQ - 1) / ATT_BQ, B * NH);
    int hs = C / NH;
    attention_forward_kernel<HS><<<grid, ATT_BQ, 0, px__cuda.stream>>>(
        out, lse, inp, T, C, NH, hs, 1.0f / sqrtf((float)hs));
    PX_CUDA_LAUNCHED();
}

template <int HS>
static void launch_backward(float *dinp, float *Dbuf, const float *dout, const float *inp,
                            const float *lse, int B, int T, int C, int NH)
{
    dim3 grid((T + ATT_BQ - 1) / ATT_BQ, B * NH);
    int hs = C / NH;
    float scale = 1.0f / sqrtf((float)hs);
    attention_dq_kernel<HS><<<grid, ATT_BQ, 0, px__cuda.stream>>>(dinp, Dbuf, dout, inp, lse, T,
                                                                  C, NH, hs, scale);
    PX_CUDA_LAUNCHED();
    attention_dkv_kernel<HS><<<grid, ATT_BQ, 0, px__cuda.stream>>>(dinp, Dbuf, dout, inp, lse, T,
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

void px__cuda_attention_forward(float *out, float *att, const float *inp, int B, int T, int C,
                                int NH)
{
    if (B <= 0 || T <= 0 || !head_size_ok(C, NH))
        return;
    int hs = C / NH;
    if (hs <= 32)
        launch_forward<32>(out, att, inp, B, T, C, NH);
    else if (hs <= 64)
        launch_forward<64>(out, att, inp, B, T, C, NH);
    else
        launch_forward<128>(out, att, inp, B, T, C, NH);
}

void px__cuda_attention_backward(float *dinp, float *scratch, const float *dout,
                                 const float *inp, const float *att, int B, int T, int C, int NH)
{
    (void)scratch; /* the (T,T) work space of the CPU backend; not needed here */
    if (B <= 0 || T <= 0 || !head_size_ok(C, NH))
        return;
    float *Dbuf = (float *)px__cuda_scratch((size_t)B * NH * T * sizeof(float));
    if (!Dbuf)
        return;
    int hs = C / NH;
    if (hs <= 32)
        launch_backward<32>(dinp, Dbuf, dout, inp, att, B, T, C, NH);
    else if (hs <= 64)
        launch_backward<64>(dinp, Dbuf, dout, inp, att, B, T, C, NH);
    else
        launch_backward<128>(dinp, Dbuf, dout, inp, att, B, T, C, NH);
}
