/* px_moe_cuda.cu: the mixture-of-experts ops of the CUDA op table
 * (px_kernels.h: moe_router_forward / _backward, moe_dispatch, moe_combine,
 * moe_combine_backward), with the CPU reference's semantics
 * (px_moe_cpu.c).
 *
 * The router is one thread per token row: E is small (experts of one
 * layer), and a thread running the CPU loop keeps its order: the softmax
 * sums in expert order, the top-k scan is strict (>) so ties go to the lower
 * expert index exactly as on the CPU (routing must not depend on the
 * backend). Dispatch and the combine's backward are element-parallel
 * (every output written once). The combine scatter-adds rows that can
 * repeat (a token's K choices): one thread per column walks the slots in
 * order, so each token's choices add in slot order as on the CPU, with no
 * float atomics. The gate gradient dot products are one warp per slot
 * (fixed butterfly order). Stream: the backend's. */
#include "px_cuda_common.cuh"

#include <math.h>

static unsigned grid_for(size_t n, unsigned threads)
{
    size_t b = (n + threads - 1) / threads;
    return (unsigned)(b > 65535u * 16u ? 65535u * 16u : (b ? b : 1));
}

__global__ void moe_router_forward_kernel(float *probs, int32_t *idx, float *weights,
                                          const float *logits, int N, int E, int K)
{
    const int n = blockIdx.x * blockDim.x + threadIdx.x;
    if (n >= N)
        return;
    const float *lg = logits + (size_t)n * E;
    float *p = probs + (size_t)n * E, mx = lg[0], sum = 0.0f;
    for (int e = 1; e < E; e++)
        mx = lg[e] > mx ? lg[e] : mx;
    for (int e = 0; e < E; e++) {
        p[e] = expf(lg[e] - mx);
        sum += p[e];
    }
    for (int e = 0; e < E; e++)
        p[e] /= sum;
    int32_t *ix = idx + (size_t)n * K;
    float *w = weights + (size_t)n * K;
    for (int j = 0; j < K; j++) {
        int best = -1;
        for (int e = 0; e < E; e++) {
            int taken = 0;
            for (int i = 0; i < j; i++)
                taken |= ix[i] == e;
            if (!taken && (best < 0 || p[e] > p[best]))
                best = e;
        }
        ix[j] = best;
    }
    if (K == 1) {
        w[0] = p[ix[0]];
    } else {
        float s = 0.0f;
        for (int j = 0; j < K; j++)
            s += p[ix[j]];
        for (int j = 0; j < K; j++)
            w[j] = p[ix[j]] / s;
    }
}

__global__ void moe_router_backward_kernel(float *dlogits, const float *probs,
                                           const int32_t *idx, const float *weights,
                                           const float *dweights, const float *daux, int N,
                                           int E, int K)
{
    const int n = blockIdx.x * blockDim.x + threadIdx.x;
    if (n >= N)
        return;
    const float *p = probs + (size_t)n * E, *w = weights + (size_t)n * K,
                *dw = dweights + (size_t)n * K;
    const int32_t *ix = idx + (size_t)n * K;
    float *dl = dlogits + (size_t)n * E;
    for (int e = 0; e < E; e++)
        dl[e] = daux ? daux[e] : 0.0f;
    if (K == 1) {
        dl[ix[0]] += dw[0];
    } else {
        float s = 0.0f, dot = 0.0f;
        for (int j = 0; j < K; j++) {
            s += p[ix[j]];
            dot += dw[j] * w[j];
        }
        for (int j = 0; j < K; j++)
            dl[ix[j]] += (dw[j] - dot) / s;
    }
    float dot = 0.0f;
    for (int e = 0; e < E; e++)
        dot += dl[e] * p[e];
    for (int e = 0; e < E; e++)
        dl[e] = p[e] * (dl[e] - dot);
}

__global__ void moe_dispatch_kernel(float *dst, const float *src, const int32_t *rows, int n,
                                    int C)
{
    const size_t total = (size_t)n * C;
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < total;
         i += (size_t)gridDim.x * blockDim.x) {
        size_t s = i / C, c = i % C;
        dst[i] = src[(size_t)rows[s] * C + c];
    }
}

/* one thread per column c: the slots in order (rows may repeat) */
__global__ void moe_combine_kernel(float *out, const float *y, const int32_t *rows,
                                   const float *w, const int32_t *widx, int n, int C)
{
    const int c = blockIdx.x * blockDim.x + threadIdx.x;
    if (c >= C)
        return;
    for (int s = 0; s < n; s++) {
        float g = w ? w[widx[s]] : 1.0f;
        out[(size_t)rows[s] * C + c] += g * y[(size_t)s * C + c];
    }
}

__global__ void moe_combine_dy_kernel(float *dy, const float *dout, const int32_t *rows,
                                      const float *w, const int32_t *widx, int n, int C)
{
    const size_t total = (size_t)n * C;
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < total;
         i += (size_t)gridDim.x * blockDim.x) {
        size_t s = i / C, c = i % C;
        dy[i] = w[widx[s]] * dout[(size_t)rows[s] * C + c];
    }
}

/* one warp per slot: dw[widx[s]] = dot(dout row rows[s], y row s) */
__global__ void moe_combine_dw_kernel(float *dw, const float *dout, const float *y,
                                      const int32_t *rows, const int32_t *widx, int n, int C)
{
    const int s = blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32, lane = threadIdx.x % 32;
    if (s >= n)
        return;
    const float *d = dout + (size_t)rows[s] * C, *ys = y + (size_t)s * C;
    float dot = 0.0f;
    for (int c = lane; c < C; c += 32)
        dot += d[c] * ys[c];
    dot = px__warp_sum(dot);
    if (lane == 0)
        dw[widx[s]] = dot;
}

void px__cuda_moe_router_forward(float *probs, int32_t *idx, float *weights, const float *logits,
                                 int N, int E, int K)
{
    if (N <= 0)
        return;
    moe_router_forward_kernel<<<(N + 127) / 128, 128, 0, px__cuda.stream>>>(probs, idx, weights,
                                                                             logits, N, E, K);
    PX_CUDA_LAUNCHED();
}

void px__cuda_moe_router_backward(float *dlogits, const float *probs, const int32_t *idx,
                                  const float *weights, const float *dweights, const float *daux,
                                  int N, int E, int K)
{
    if (N <= 0)
        return;
    moe_router_backward_kernel<<<(N + 127) / 128, 128, 0, px__cuda.stream>>>(
        dlogits, probs, idx, weights, dweights, daux, N, E, K);
    PX_CUDA_LAUNCHED();
}

void px__cuda_moe_dispatch(float *dst, const float *src, const int32_t *rows, int n, int C)
{
    if (n <= 0 || C <= 0)
        return;
    moe_dispatch_kernel<<<grid_for((size_t)n * C, 256), 256, 0, px__cuda.stream>>>(dst, src, rows,
                                                                                 n, C);
    PX_CUDA_LAUNCHED();
}

void px__cuda_moe_combine(float *out, const float *y, const int32_t *rows, const float *w,
                          const int32_t *widx, int n, int C)
{
    if (n <= 0 || C <= 0)
        return;
    moe_combine_kernel<<<(C + 127) / 128, 128, 0, px__cuda.stream>>>(out, y, rows, w, widx, n, C);
    PX_CUDA_LAUNCHED();
}

void px__cuda_moe_combine_backward(float *dy, float *dw, const float *dout, const float *y,
                                   const int32_t *rows, const float *w, const int32_t *widx,
                                   int n, int C)
{
    if (n <= 0 || C <= 0)
        return;
    moe_combine_dy_kernel<<<grid_for((size_t)n * C, 256), 256, 0, px__cuda.stream>>>(
        dy, dout, rows, w, widx, n, C);
    PX_CUDA_LAUNCHED();
    moe_combine_dw_kernel<<<(n + 7) / 8, 256, 0, px__cuda.stream>>>(dw, dout, y, rows, widx, n, C);
    PX_CUDA_LAUNCHED();
}
