/* px_crossentropy_cuda.cu: fused softmax + cross-entropy over a padded vocab
 * and the three vocab-parallel steps (px_kernels.h), on the device.
 *
 * One block per row (row lengths are vocab sized: 50304 for GPT-2). The
 * arithmetic mirrors px_ops_cpu.c / px_tp_cpu.c: exp in fp32, the row sum
 * accumulated in double, 1/sum rounded to fp32 once, the loss as
 * log(sum) + max - target logit in double. Block reductions run in a fixed
 * tree order, so results repeat bitwise. Stream: the backend's. */
#include "px_cuda_common.cuh"

#include <float.h>

#define CE_THREADS 512

/* block-wide max and double sum; every thread gets the result */
static __device__ float block_max(float v, float *sh)
{
    v = px__warp_max(v);
    int w = threadIdx.x / 32, lane = threadIdx.x % 32, nw = blockDim.x / 32;
    __syncthreads(); /* sh may still be read by a previous reduction */
    if (lane == 0)
        sh[w] = v;
    __syncthreads();
    v = lane < nw ? sh[lane] : -FLT_MAX;
    return px__warp_max(v);
}

static __device__ double block_sum_d(double v, double *sh)
{
    __syncthreads();
    sh[threadIdx.x] = v;
    __syncthreads();
    for (int k = blockDim.x / 2; k > 0; k >>= 1) {
        if (threadIdx.x < k)
            sh[threadIdx.x] += sh[threadIdx.x + k];
        __syncthreads();
    }
    return sh[0];
}

__global__ void ce_forward_kernel(float *losses, float *probs, const float *logits,
                                  const int32_t *targets, int V, int Vp)
{
    __shared__ float shf[32];
    __shared__ double shd[CE_THREADS];
    const int n = blockIdx.x;
    const float *l = logits + (size_t)n * Vp;
    float *p = probs + (size_t)n * Vp;
    /* read before any thread writes p: probs may be logits (in place) */
    const float lt = threadIdx.x == 0 ? l[targets[n]] : 0.0f;
    float mx = -FLT_MAX;
    for (int v = threadIdx.x; v < V; v += blockDim.x)
        mx = fmaxf(mx, l[v]);
    mx = block_max(mx, shf); /* its __syncthreads orders lt's read before the writes */
    double s = 0.0;
    for (int v = threadIdx.x; v < V; v += blockDim.x) {
        float e = expf(l[v] - mx);
        p[v] = e;
        s += e;
    }
    double sum = block_sum_d(s, shd);
    float inv = (float)(1.0 / sum);
    for (int v = threadIdx.x; v < Vp; v += blockDim.x)
        p[v] = v < V ? p[v] * inv : 0.0f; /* padding: masked out */
    if (threadIdx.x == 0)
        losses[n] = (float)(log(sum) + mx - lt);
}

/* dlogits (N,Vl) += probs * dloss - onehot * dloss over the valid columns,
 * two roundings in the CPU's order; dlogits == probs (in place): replaced,
 * as if it had been zeroed (each element read and written by one thread) */
__global__ void ce_backward_kernel(float *dlogits, const float *probs, const int32_t *targets,
                                   float dloss, int N, int Vl, int v0, int nv)
{
    size_t total = (size_t)N * nv;
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < total;
         i += (size_t)gridDim.x * blockDim.x) {
        int n = (int)(i / nv), v = (int)(i % nv);
        size_t at = (size_t)n * Vl + v;
        float d = (dlogits == probs ? 0.0f : dlogits[at]) + probs[at] * dloss;
        if (targets[n] - v0 == v)
            d -= dloss;
        dlogits[at] = d;
    }
}

__global__ void vp_max_kernel(float *rowmax, const float *logits, int Vl, int nv)
{
    __shared__ float shf[32];
    const float *l = logits + (size_t)blockIdx.x * Vl;
    float mx = -FLT_MAX; /* no real column here: the others' max wins */
    for (int v = threadIdx.x; v < nv; v += blockDim.x)
        mx = fmaxf(mx, l[v]);
    mx = block_max(mx, shf);
    if (threadIdx.x == 0)
        rowmax[blockIdx.x] = mx;
}

__global__ void vp_exp_kernel(double *stats, float *probs, const float *logits,
                              const float *rowmax, const int32_t *targets, int Vl, int v0, int nv)
{
    __shared__ double shd[CE_THREADS];
    const int n = blockIdx.x;
    const float *l = logits + (size_t)n * Vl;
    float *p = probs + (size_t)n * Vl;
    float mx = rowmax[n];
    const int t = targets[n] - v0;
    /* the target logit before any thread writes p (probs may be logits) */
    const double lt = threadIdx.x == 0 && t >= 0 && t < Vl ? (double)l[t] : 0.0;
    __syncthreads();
    double s = 0.0;
    for (int v = threadIdx.x; v < nv; v += blockDim.x) {
        float e = expf(l[v] - mx);
        p[v] = e;
        s += e;
    }
    double sum = block_sum_d(s, shd);
    if (threadIdx.x == 0) {
        stats[2 * n] = sum;
        stats[2 * n + 1] = lt;
    }
}

__global__ void vp_finish_kernel(float *losses, float *probs, const double *stats,
                                 const float *rowmax, int Vl, int nv)
{
    const int n = blockIdx.x;
    float *p = probs + (size_t)n * Vl;
    double sum = stats[2 * n];
    float inv = (float)(1.0 / sum);
    for (int v = threadIdx.x; v < Vl; v += blockDim.x)
        p[v] = v < nv ? p[v] * inv : 0.0f;
    if (threadIdx.x == 0)
        losses[n] = (float)(log(sum) + rowmax[n] - stats[2 * n + 1]);
}

static unsigned grid_for(size_t n)
{
    size_t b = (n + 255) / 256;
    return (unsigned)(b > 1048576 ? 1048576 : b);
}

void px__cuda_crossentropy_forward(float *losses, float *probs, const float *logits,
                                   const int32_t *targets, int N, int V, int Vp)
{
    if (N <= 0)
        return;
    ce_forward_kernel<<<N, CE_THREADS, 0, px__cuda.stream>>>(losses, probs, logits, targets, V,
                                                            Vp);
    PX_CUDA_LAUNCHED();
}

void px__cuda_crossentropy_backward(float *dlogits, const float *probs, const int32_t *targets,
                                    float dloss, int N, int V, int Vp)
{
    px__cuda_crossentropy_vp_backward(dlogits, probs, targets, dloss, N, Vp, 0, V);
}

void px__cuda_crossentropy_vp_max(float *rowmax, const float *logits, int N, int Vl, int v0,
                                  int V)
{
    int nv = V - v0 < 0 ? 0 : V - v0 > Vl ? Vl : V - v0;
    if (N <= 0)
        return;
    vp_max_kernel<<<N, CE_THREADS, 0, px__cuda.stream>>>(rowmax, logits, Vl, nv);
    PX_CUDA_LAUNCHED();
}

void px__cuda_crossentropy_vp_exp(double *stats, float *probs, const float *logits,
                                  const float *rowmax, const int32_t *targets, int N, int Vl,
                                  int v0, int V)
{
    int nv = V - v0 < 0 ? 0 : V - v0 > Vl ? Vl : V - v0;
    if (N <= 0)
        return;
    vp_exp_kernel<<<N, CE_THREADS, 0, px__cuda.stream>>>(stats, probs, logits, rowmax, targets,
                                                        Vl, v0, nv);
    PX_CUDA_LAUNCHED();
}

void px__cuda_crossentropy_vp_finish(float *losses, float *probs, const double *stats,
                                     const float *rowmax, int N, int Vl, int v0, int V)
{
    int nv = V - v0 < 0 ? 0 : V - v0 > Vl ? Vl : V - v0;
    if (N <= 0)
        return;
    vp_finish_kernel<<<N, CE_THREADS, 0, px__cuda.stream>>>(losses, probs, stats, rowmax, Vl,
                                                           nv);
    PX_CUDA_LAUNCHED();
}

void px__cuda_crossentropy_vp_backward(float *dlogits, const float *probs,
                                       const int32_t *targets, float dloss, int N, int Vl,
                                       int v0, int V)
{
    int nv = V - v0 < 0 ? 0 : V - v0 > Vl ? Vl : V - v0;
    size_t total = (size_t)N * nv;
    if (!total)
        return;
    ce_backward_kernel<<<grid_for(total), 256, 0, px__cuda.stream>>>(dlogits, probs, targets,
                                                                     dloss, N, Vl, v0, nv);
    PX_CUDA_LAUNCHED();
}
