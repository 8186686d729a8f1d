/* px_kernels_cuda.cu: the CUDA op table (the signatures of px_kernels.h) and
 * its memory ops, on one device, one stream and one cuBLAS handle per
 * process (px_kernels_cuda.h).
 *
 * The math follows the CPU ops (px_ops_cpu.c, px_tp_cpu.c; llm.c's
 * train_gpt2.cu for the GPU shapes of the same ops). Invariants:
 *  - determinism: no float atomics; every sum over rows (embedding and
 *    bias/LayerNorm weight gradients, sumsq, cross-entropy) is reduced in a
 *    fixed order, so a run repeats bitwise, as on the CPU;
 *  - GEMMs are cuBLAS sgemm in strict fp32 (CUBLAS_DEFAULT_MATH: no TF32);
 *  - attention never materialises (T,T): attention.cu is flash-style
 *    (online softmax) and keeps only the log-sum-exp per row, in the first
 *    B*NH*T floats of the `att` buffer the table's signature passes;
 *  - errors: every launch is checked; the first failure is logged and kept
 *    (sticky) for px_kernels_cuda_status().
 * Runs on the rank's compute thread only. */
#include "px_cuda_common.cuh"

#include <float.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

px_cuda_backend_t px__cuda = {-1, 0, 0, 0, 0, cudaSuccess, CUBLAS_STATUS_SUCCESS, PX_OK};

void px__cuda_fail(const char *what, const char *file, int line)
{
    if (px__cuda.sticky == PX_OK)
        px__cuda.sticky = PX_ERR_INTERNAL;
    px_log_write(PX_LOG_ERROR, file, line, "CUDA: %s", what);
}

void px__cuda_check(cudaError_t e, const char *call, const char *file, int line)
{
    if (e == cudaSuccess)
        return;
    char msg[256];
    snprintf(msg, sizeof(msg), "%s: %s (%s)", call, cudaGetErrorString(e), cudaGetErrorName(e));
    px__cuda_fail(msg, file, line);
}

void px__cublas_check(cublasStatus_t s, const char *call, const char *file, int line)
{
    if (s == CUBLAS_STATUS_SUCCESS)
        return;
    char msg[256];
    snprintf(msg, sizeof(msg), "%s: cuBLAS status %d (%s)", call, (int)s,
             cublasGetStatusString(s));
    px__cuda_fail(msg, file, line);
}

void *px__cuda_scratch(size_t bytes)
{
    if (bytes <= px__cuda.scratch_bytes)
        return px__cuda.scratch;
    /* grow: the old block may still be read by queued kernels */
    PX_CUDA_CHECK(cudaStreamSynchronize(px__cuda.stream));
    if (px__cuda.scratch)
        PX_CUDA_CHECK(cudaFree(px__cuda.scratch));
    px__cuda.scratch = NULL;
    px__cuda.scratch_bytes = 0;
    size_t want = bytes < ((size_t)1 << 20) ? ((size_t)1 << 20) : bytes;
    if (cudaMalloc(&px__cuda.scratch, want) != cudaSuccess) {
        px__cuda_fail("scratch allocation failed", __FILE__, __LINE__);
        return NULL;
    }
    px__cuda.scratch_bytes = want;
    return px__cuda.scratch;
}

/* ---------------------------------------------------------------- helpers */

static unsigned blocks_for(size_t n, unsigned threads)
{
    size_t b = (n + threads - 1) / threads;
    return (unsigned)(b > 65535u * 16u ? 65535u * 16u : b); /* grid-stride loops cover the rest */
}

/* ---------------------------------------------------------------- encoder */

__global__ void encoder_forward_kernel(float *out, const int32_t *inp, const float *wte,
                                       const float *wpe, int B, int T, int C, int v0, int Vl,
                                       int has_wpe)
{
    size_t n = (size_t)B * T * C;
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n;
         i += (size_t)gridDim.x * blockDim.x) {
        int c = (int)(i % C);
        size_t bt = i / C;
        int t = (int)(bt % T);
        int id = inp[bt] - v0;
        float pe = has_wpe ? wpe[(size_t)t * C + c] : 0.0f;
        if (id >= 0 && id < Vl)
            out[i] = has_wpe ? wte[(size_t)id * C + c] + pe : wte[(size_t)id * C + c];
        else
            out[i] = pe;
    }
}

/* dwte: one thread per channel c walks the tokens in (b,t) order, exactly
 * the CPU's accumulation order, so repeated tokens sum bitwise as there */
__global__ void encoder_dwte_kernel(float *dwte, const float *dout, const int32_t *inp, int BT,
                                    int C, int v0, int Vl)
{
    int c = blockIdx.x * blockDim.x + threadIdx.x;
    if (c >= C)
        return;
    for (int i = 0; i < BT; i++) {
        int id = inp[i] - v0;
        if (id >= 0 && id < Vl)
            dwte[(size_t)id * C + c] += dout[(size_t)i * C + c];
    }
}

/* dwpe (T,C): one thread per (t,c), summing over b in order */
__global__ void encoder_dwpe_kernel(float *dwpe, const float *dout, int B, int T, int C)
{
    size_t n = (size_t)T * C;
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n;
         i += (size_t)gridDim.x * blockDim.x) {
        float acc = dwpe[i];
        for (int b = 0; b < B; b++)
            acc += dout[(size_t)b * n + i];
        dwpe[i] = acc;
    }
}

static void cuda_encoder_vp_forward(float *out, const int32_t *inp, const float *wte,
                                    const float *wpe, int B, int T, int C, int v0, int Vl)
{
    size_t n = (size_t)B * T * C;
    encoder_forward_kernel<<<blocks_for(n, 256), 256, 0, px__cuda.stream>>>(
        out, inp, wte, wpe, B, T, C, v0, Vl, wpe != NULL);
    PX_CUDA_LAUNCHED();
}

static void cuda_encoder_vp_backward(float *dwte, float *dwpe, const float *dout,
                                     const int32_t *inp, int B, int T, int C, int v0, int Vl)
{
    encoder_dwte_kernel<<<(C + 127) / 128, 128, 0, px__cuda.stream>>>(dwte, dout, inp, B * T, C,
                                                                        v0, Vl);
    PX_CUDA_LAUNCHED();
    if (dwpe) {
        encoder_dwpe_kernel<<<blocks_for((size_t)T * C, 256), 256, 0, px__cuda.stream>>>(
            dwpe, dout, B, T, C);
        PX_CUDA_LAUNCHED();
    }
}

static void cuda_encoder_forward(float *out, const int32_t *inp, const float *wte,
                                 const float *wpe, int B, int T, int C)
{
    cuda_encoder_vp_forward(out, inp, wte, wpe, B, T, C, 0, INT32_MAX);
}

static void cuda_encoder_backward(float *dwte, float *dwpe, const float *dout,
                                  const int32_t *inp, int B, int T, int C)
{
    cuda_encoder_vp_backward(dwte, dwpe, dout, inp, B, T, C, 0, INT32_MAX);
}

/* -------------------------------------------------------------- layernorm */

/* one warp per row; sums in fp32 by lanes, combined by shuffles */
__global__ void layernorm_forward_kernel(float *out, float *mean, float *rstd, const float *inp,
                                         const float *weight, const float *bias, int N, int C)
{
    int row = blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32, lane = threadIdx.x % 32;
    if (row >= N)
        return;
    const float *x = inp + (size_t)row * C;
    float s = 0.0f;
    for (int c = lane; c < C; c += 32)
        s += x[c];
    s = px__warp_sum(s);
    float m = s / C;
    float v = 0.0f;
    for (int c = lane; c < C; c += 32) {
        float d = x[c] - m;
        v += d * d;
    }
    v = px__warp_sum(v);
    float r = 1.0f / sqrtf(v / C + 1e-5f);
    float *o = out + (size_t)row * C;
    for (int c = lane; c < C; c += 32)
        o[c] = (x[c] - m) * r * weight[c] + bias[c];
    if (lane == 0) {
        mean[row] = m;
        rstd[row] = r;
    }
}

/* dinp: one warp per row (the two row means of the backward) */
__global__ void layernorm_dinp_kernel(float *dinp, const float *dout, const float *inp,
                                      const float *weight, const float *mean, const float *rstd,
                                      int N, int C)
{
    int row = blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32, lane = threadIdx.x % 32;
    if (row >= N)
        return;
    const float *d = dout + (size_t)row * C, *x = inp + (size_t)row * C;
    float *dx = dinp + (size_t)row * C;
    float m = mean[row], r = rstd[row];
    float a = 0.0f, b = 0.0f;
    for (int c = lane; c < C; c += 32) {
        float norm = (x[c] - m) * r, dnorm = weight[c] * d[c];
        a += dnorm;
        b += dnorm * norm;
    }
    a = px__warp_sum(a) / C;
    b = px__warp_sum(b) / C;
    for (int c = lane; c < C; c += 32) {
        float norm = (x[c] - m) * r, dnorm = weight[c] * d[c];
        dx[c] += (dnorm - a - norm * b) * r;
    }
}

/* Column sums over N rows, deterministic, in two passes: blocks of 32
 * columns x COLSUM_ROWS rows write partial sums (partials, (R, C)) and one
 * thread per column adds the R partials in order. Pass 1 computes, per
 * column c, sum of dout[n][c] (into part_b) and, when inp is given, of
 * (inp[n][c] - mean[n]) * rstd[n] * dout[n][c] (into part_w). */
#define COLSUM_ROWS 256
__global__ void colsum_partial_kernel(float *part_b, float *part_w, const float *dout,
                                      const float *inp, const float *mean, const float *rstd,
                                      int N, int C)
{
    int c = blockIdx.x * 32 + threadIdx.x, r0 = blockIdx.y * COLSUM_ROWS;
    int r1 = min(N, r0 + COLSUM_ROWS);
    __shared__ float sb[8][33], sw[8][33];
    float ab = 0.0f, aw = 0.0f;
    if (c < C) {
        for (int n = r0 + threadIdx.y; n < r1; n += 8) {
            float d = dout[(size_t)n * C + c];
            ab += d;
            if (inp)
                aw += (inp[(size_t)n * C + c] - mean[n]) * rstd[n] * d;
        }
    }
    sb[threadIdx.y][threadIdx.x] = ab;
    sw[threadIdx.y][threadIdx.x] = aw;
    __syncthreads();
    if (threadIdx.y == 0 && c < C) {
        for (int k = 1; k < 8; k++) {
            ab += sb[k][threadIdx.x];
            aw += sw[k][threadIdx.x];
        }
        part_b[(size_t)blockIdx.y * C + c] = ab;
        if (inp)
            part_w[(size_t)blockIdx.y * C + c] = aw;
    }
}

__global__ void colsum_finish_kernel(float *dbias, float *dweight, const float *part_b,
                                     const float *part_w, int R, int C)
{
    int c = blockIdx.x * blockDim.x + threadIdx.x;
    if (c >= C)
        return;
    float ab = 0.0f, aw = 0.0f;
    for (int r = 0; r < R; r++) {
        ab += part_b[(size_t)r * C + c];
        if (dweight)
            aw += part_w[(size_t)r * C + c];
    }
    if (dbias)
        dbias[c] += ab;
    if (dweight)
        dweight[c] += aw;
}

/* dbias (C) += column sums of dout (N,C); with inp/mean/rstd also
 * dweight (C) += column sums of norm * dout (LayerNorm) */
static void colsums(float *dbias, float *dweight, const float *dout, const float *inp,
                    const float *mean, const float *rstd, int N, int C)
{
    int R = (N + COLSUM_ROWS - 1) / COLSUM_ROWS;
    float *part = (float *)px__cuda_scratch((size_t)2 * R * C * sizeof(float));
    if (!part || N <= 0)
        return;
    dim3 grid((C + 31) / 32, R), block(32, 8);
    colsum_partial_kernel<<<grid, block, 0, px__cuda.stream>>>(part, part + (size_t)R * C, dout,
                                                               inp, mean, rstd, N, C);
    PX_CUDA_LAUNCHED();
    colsum_finish_kernel<<<(C + 255) / 256, 256, 0, px__cuda.stream>>>(
        dbias, inp ? dweight : NULL, part, part + (size_t)R * C, R, C);
    PX_CUDA_LAUNCHED();
}

static void cuda_layernorm_forward(float *out, float *mean, float *rstd, const float *inp,
                                   const float *weight, const float *bias, int N, int C)
{
    layernorm_forward_kernel<<<(N + 7) / 8, 256, 0, px__cuda.stream>>>(out, mean, rstd, inp,
                                                                       weight, bias, N, C);
    PX_CUDA_LAUNCHED();
}

static void cuda_layernorm_backward(float *dinp, float *dweight, float *dbias, const float *dout,
                                    const float *inp, const float *weight, const float *mean,
                                    const float *rstd, int N, int C)
{
    layernorm_dinp_kernel<<<(N + 7) / 8, 256, 0, px__cuda.stream>>>(dinp, dout, inp, weight,
                                                                    mean, rstd, N, C);
    PX_CUDA_LAUNCHED();
    colsums(dbias, dweight, dout, inp, mean, rstd, N, C);
}

/* ----------------------------------------------------------------- matmul */

__global__ void bias_rows_kernel(float *out, const float *bias, int N, int OC, int add)
{
    size_t n = (size_t)N * OC;
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n;
         i += (size_t)gridDim.x * blockDim.x)
        out[i] = add ? out[i] + bias[i % OC] : bias[i % OC];
}

static void cuda_bias_forward(float *out, const float *bias, int N, int OC)
{
    bias_rows_kernel<<<blocks_for((size_t)N * OC, 256), 256, 0, px__cuda.stream>>>(out, bias, N,
                                                                                 OC, 1);
    PX_CUDA_LAUNCHED();
}

/* Row-major A (N,C) is column-major A^T (C,N); cuBLAS sees every operand
 * transposed, as llm.c's matmul_forward does. */
static void cuda_matmul_forward(float *out, const float *inp, const float *weight,
                                const float *bias, int N, int C, int OC)
{
    const float one = 1.0f;
    float beta = 0.0f;
    if (bias) {
        bias_rows_kernel<<<blocks_for((size_t)N * OC, 256), 256, 0, px__cuda.stream>>>(
            out, bias, N, OC, 0);
        PX_CUDA_LAUNCHED();
        beta = 1.0f;
    }
    /* out^T (OC,N) = weight^T... : column-major out (OC x N) = W (OC x C) * inp^T (C x N) */
    PX_CUBLAS_CHECK(cublasSgemm(px__cuda.cublas, CUBLAS_OP_T, CUBLAS_OP_N, OC, N, C, &one, weight,
                                C, inp, C, &beta, out, OC));
}

static void cuda_matmul_backward(float *dinp, float *dweight, float *dbias, const float *dout,
                                 const float *inp, const float *weight, int N, int C, int OC)
{
    const float one = 1.0f;
    /* dinp (N,C) += dout (N,OC) @ weight (OC,C): col-major dinp^T (C x N) */
    if (dinp)
        PX_CUBLAS_CHECK(cublasSgemm(px__cuda.cublas, CUBLAS_OP_N, CUBLAS_OP_N, C, N, OC, &one,
                                    weight, C, dout, OC, &one, dinp, C));
    /* dweight (OC,C) += dout^T @ inp: col-major dweight^T (C x OC) = inp^T (C x N) dout (N x OC) */
    if (dweight)
        PX_CUBLAS_CHECK(cublasSgemm(px__cuda.cublas, CUBLAS_OP_N, CUBLAS_OP_T, C, OC, N, &one,
                                    inp, C, dout, OC, &one, dweight, C));
    if (dbias)
        colsums(dbias, NULL, dout, NULL, NULL, NULL, N, OC);
}

/* the fp32 bias pieces the bf16 GEMMs (px_matmul_bf16_cuda.cu) share */
void px__cuda_bias_set(float *out, const float *bias, int N, int OC)
{
    bias_rows_kernel<<<blocks_for((size_t)N * OC, 256), 256, 0, px__cuda.stream>>>(out, bias, N,
                                                                                 OC, 0);
    PX_CUDA_LAUNCHED();
}

void px__cuda_bias_grad(float *dbias, const float *dout, int N, int OC)
{
    colsums(dbias, NULL, dout, NULL, NULL, NULL, N, OC);
}

/* --------------------------------------------------------- element-wise */

/* GELU, tanh form (torch approximate='tanh') */
#define GELU_SCALE 0.7978845608028654f
__global__ void gelu_forward_kernel(float *out, const float *inp, size_t N)
{
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < N;
         i += (size_t)gridDim.x * blockDim.x) {
        float x = inp[i];
        float u = GELU_SCALE * (x + 0.044715f * x * x * x);
        out[i] = 0.5f * x * (1.0f + tanhf(u));
    }
}

__global__ void gelu_backward_kernel(float *dinp, const float *inp, const float *dout, size_t N)
{
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < N;
         i += (size_t)gridDim.x * blockDim.x) {
        float x = inp[i];
        float u = GELU_SCALE * (x + 0.044715f * x * x * x);
        float th = tanhf(u), sech2 = 1.0f - th * th;
        float g = 0.5f * (1.0f + th) +
                  0.5f * x * sech2 * GELU_SCALE * (1.0f + 3.0f * 0.044715f * x * x);
        dinp[i] += g * dout[i];
    }
}

static void cuda_gelu_forward(float *out, const float *inp, size_t N)
{
    gelu_forward_kernel<<<blocks_for(N, 256), 256, 0, px__cuda.stream>>>(out, inp, N);
    PX_CUDA_LAUNCHED();
}

static void cuda_gelu_backward(float *dinp, const float *inp, const float *dout, size_t N)
{
    gelu_backward_kernel<<<blocks_for(N, 256), 256, 0, px__cuda.stream>>>(dinp, inp, dout, N);
    PX_CUDA_LAUNCHED();
}

__global__ void residual_forward_kernel(float *out, const float *a, const float *b, size_t N)
{
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < N;
         i += (size_t)gridDim.x * blockDim.x)
        out[i] = a[i] + b[i];
}

__global__ void residual_backward_kernel(float *da, float *db, const float *dout, size_t N)
{
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < N;
         i += (size_t)gridDim.x * blockDim.x) {
        da[i] += dout[i];
        db[i] += dout[i];
    }
}

static void cuda_residual_forward(float *out, const float *inp1, const float *inp2, size_t N)
{
    residual_forward_kernel<<<blocks_for(N, 256), 256, 0, px__cuda.stream>>>(out, inp1, inp2, N);
    PX_CUDA_LAUNCHED();
}

static void cuda_residual_backward(float *dinp1, float *dinp2, const float *dout, size_t N)
{
    residual_backward_kernel<<<blocks_for(N, 256), 256, 0, px__cuda.stream>>>(dinp1, dinp2, dout,
                                                                              N);
    PX_CUDA_LAUNCHED();
}

__global__ void adamw_kernel(float *params, const float *grads, float *m, float *v, size_t n,
                             float beta1, float beta2, float eps, float step_size, float decay,
                             float bc2_sqrt, float grad_scale)
{
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n;
         i += (size_t)gridDim.x * blockDim.x) {
        /* __fmul_rn: never contracted into the FMAs below, so g is the
         * product rounded once, as cuda_scale's and the CPU op's */
        float g = __fmul_rn(grads[i], grad_scale);
        float mi = beta1 * m[i] + (1.0f - beta1) * g;
        float vi = beta2 * v[i] + (1.0f - beta2) * g * g;
        float denom = sqrtf(vi) / bc2_sqrt + eps;
        m[i] = mi;
        v[i] = vi;
        params[i] = params[i] * decay - step_size * (mi / denom);
    }
}

/* torch.optim.AdamW (Loshchilov & Hutter 2019), the CPU op's formula with
 * the clip coefficient grad_scale folded in (px_kernels.h); the bias
 * corrections are computed on the host as there */
static void cuda_adamw_update(float *params, const float *grads, float *m, float *v, size_t n,
                              float lr, float beta1, float beta2, float eps, float weight_decay,
                              int t, float grad_scale)
{
    float bc1 = 1.0f - powf(beta1, (float)t);
    float bc2_sqrt = sqrtf(1.0f - powf(beta2, (float)t));
    adamw_kernel<<<blocks_for(n, 256), 256, 0, px__cuda.stream>>>(
        params, grads, m, v, n, beta1, beta2, eps, lr / bc1, 1.0f - lr * weight_decay, bc2_sqrt,
        grad_scale);
    PX_CUDA_LAUNCHED();
}

/* sum of squares in double: fixed-size grid of block partials, then one
 * block adds them in order (deterministic) */
#define SUMSQ_BLOCKS 1024
__global__ void sumsq_partial_kernel(double *part, const float *x, size_t n)
{
    __shared__ double sh[256];
    double s = 0.0;
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n;
         i += (size_t)gridDim.x * blockDim.x)
        s += (double)x[i] * x[i];
    sh[threadIdx.x] = s;
    __syncthreads();
    for (int k = 128; k > 0; k >>= 1) {
        if (threadIdx.x < k)
            sh[threadIdx.x] += sh[threadIdx.x + k];
        __syncthreads();
    }
    if (threadIdx.x == 0)
        part[blockIdx.x] = sh[0];
}

__global__ void sum_doubles_kernel(double *out, const double *part, int n)
{
    __shared__ double sh[256];
    double s = 0.0;
    for (int i = threadIdx.x; i < n; i += blockDim.x)
        s += part[i];
    sh[threadIdx.x] = s;
    __syncthreads();
    for (int k = 128; k > 0; k >>= 1) {
        if (threadIdx.x < k)
            sh[threadIdx.x] += sh[threadIdx.x + k];
        __syncthreads();
    }
    if (threadIdx.x == 0)
        *out = sh[0];
}

static double cuda_sumsq(const float *x, size_t n)
{
    double *part = (double *)px__cuda_scratch((SUMSQ_BLOCKS + 1) * sizeof(double));
    double host = 0.0;
    if (!part || !n)
        return 0.0;
    sumsq_partial_kernel<<<SUMSQ_BLOCKS, 256, 0, px__cuda.stream>>>(part + 1, x, n);
    PX_CUDA_LAUNCHED();
    sum_doubles_kernel<<<1, 256, 0, px__cuda.stream>>>(part, part + 1, SUMSQ_BLOCKS);
    PX_CUDA_LAUNCHED();
    PX_CUDA_CHECK(cudaMemcpyAsync(&host, part, sizeof(double), cudaMemcpyDeviceToHost,
                                  px__cuda.stream));
    PX_CUDA_CHECK(cudaStreamSynchronize(px__cuda.stream));
    return host;
}

__global__ void scale_kernel(float *x, float s, size_t n)
{
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n;
         i += (size_t)gridDim.x * blockDim.x)
        x[i] *= s;
}

static void cuda_scale(float *x, float s, size_t n)
{
    scale_kernel<<<blocks_for(n, 256), 256, 0, px__cuda.stream>>>(x, s, n);
    PX_CUDA_LAUNCHED();
}

/* ----------------------------------------------------------- memory ops */

static void *cuda_mem_alloc(size_t bytes)
{
    void *p = NULL;
    if (!bytes)
        return NULL;
    if (cudaMalloc(&p, bytes) != cudaSuccess) {
        cudaGetLastError(); /* out of memory is the caller's error, not sticky */
        return NULL;
    }
    PX_CUDA_CHECK(cudaMemsetAsync(p, 0, bytes, px__cuda.stream));
    return p;
}

static void cuda_mem_free(void *ptr)
{
    if (ptr)
        PX_CUDA_CHECK(cudaFree(ptr)); /* waits for the kernels that may use it */
}

static void cuda_mem_set(void *dst, int byte, size_t bytes)
{
    PX_CUDA_CHECK(cudaMemsetAsync(dst, byte, bytes, px__cuda.stream));
}

static void cuda_mem_copy(void *dst, const void *src, size_t bytes)
{
    PX_CUDA_CHECK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDefault, px__cuda.stream));
}

/* Device -> host copies that do not wait (mem_copy_to_host_async): into
 * pageable memory cudaMemcpyAsync returns only once the copy is done (it
 * waits for the stream), so each copy goes to a pinned staging buffer,
 * where it is truly asynchronous, at a 256-byte aligned offset; the list of
 * pending copies says where each one's bytes go, and `finish_to_host`
 * (after a stream synchronize) copies them on. The buffer grows (doubling,
 * at least 64 KiB) only when empty: a copy that does not fit while others
 * are pending first waits for them (a warm-up cost, once per size). */
struct px_d2h {
    void *dst;
    size_t off, bytes;
};
static struct {
    char *pin;        /* cudaHostAlloc'd */
    size_t cap, used; /* bytes */
    px_d2h *q;        /* pending copies, issue order */
    size_t nq, qcap;
} to_host;

/* after the compute stream was synchronized: every pending copy's bytes
 * from the staging buffer to its destination, in issue order */
static void finish_to_host(void)
{
    for (size_t i = 0; i < to_host.nq; i++)
        memcpy(to_host.q[i].dst, to_host.pin + to_host.q[i].off, to_host.q[i].bytes);
    to_host.nq = 0;
    to_host.used = 0;
}

/* to host: complete on return (host code reads the result next) */
static void cuda_mem_copy_to_host(void *host_dst, const void *src, size_t bytes)
{
    if (to_host.nq) { /* earlier copies land first, should they share bytes */
        PX_CUDA_CHECK(cudaStreamSynchronize(px__cuda.stream));
        finish_to_host();
    }
    PX_CUDA_CHECK(cudaMemcpyAsync(host_dst, src, bytes, cudaMemcpyDefault, px__cuda.stream));
    PX_CUDA_CHECK(cudaStreamSynchronize(px__cuda.stream));
}

static void cuda_mem_copy_to_host_async(void *host_dst, const void *src, size_t bytes)
{
    size_t need = (bytes + 255) & ~(size_t)255;
    if (to_host.nq == to_host.qcap) {
        size_t cap = to_host.qcap ? 2 * to_host.qcap : 16;
        px_d2h *q = (px_d2h *)realloc(to_host.q, cap * sizeof(*q));
        if (!q) {
            cuda_mem_copy_to_host(host_dst, src, bytes); /* waits; still correct */
            return;
        }
        to_host.q = q;
        to_host.qcap = cap;
    }
    if (to_host.used + need > to_host.cap) {
        if (to_host.nq) { /* the pending copies still land in the old buffer */
            PX_CUDA_CHECK(cudaStreamSynchronize(px__cuda.stream));
            finish_to_host();
        }
        if (need > to_host.cap) {
            size_t cap = to_host.cap ? 2 * to_host.cap : (size_t)64 << 10;
            while (cap < need)
                cap *= 2;
            if (to_host.pin)
                PX_CUDA_CHECK(cudaFreeHost(to_host.pin));
            to_host.pin = NULL;
            to_host.cap = 0;
            if (cudaHostAlloc((void **)&to_host.pin, cap, cudaHostAllocDefault) != cudaSuccess) {
                (void)cudaGetLastError(); /* not sticky: the copy below waits instead */
                to_host.pin = NULL;
                px_error("CUDA: no %zu bytes of pinned host memory: copies to host wait",
                         cap);
            } else {
                to_host.cap = cap;
            }
        }
        if (!to_host.pin) {
            cuda_mem_copy_to_host(host_dst, src, bytes);
            return;
        }
    }
    PX_CUDA_CHECK(cudaMemcpyAsync(to_host.pin + to_host.used, src, bytes, cudaMemcpyDefault,
                                  px__cuda.stream));
    to_host.q[to_host.nq++] = {host_dst, to_host.used, bytes};
    to_host.used += need;
}

/* from host: the host buffer may be reused on return (pageable memory is
 * staged by the driver before cudaMemcpyAsync returns; pinned memory is
 * waited for) */
static void cuda_mem_copy_from_host(void *dst, const void *host_src, size_t bytes)
{
    PX_CUDA_CHECK(cudaMemcpyAsync(dst, host_src, bytes, cudaMemcpyDefault, px__cuda.stream));
    PX_CUDA_CHECK(cudaStreamSynchronize(px__cuda.stream));
    finish_to_host();
}

/* the one wait: the stream, then the pending copies to host land */
static void cuda_synchronize(void)
{
    PX_CUDA_CHECK(cudaStreamSynchronize(px__cuda.stream));
    finish_to_host();
}

/* cudaMemGetInfo on the open device: used = total - free (every context on
 * the GPU counts, as nvidia-smi shows it), bytes. */
static px_status_t cuda_mem_info(uint64_t *used_p, uint64_t *total_p)
{
    size_t free_b = 0, total_b = 0;
    cudaError_t e = cudaMemGetInfo(&free_b, &total_b);
    if (e != cudaSuccess) {
        px_error("cudaMemGetInfo: %s", cudaGetErrorString(e));
        return PX_ERR_INTERNAL;
    }
    *used_p = (uint64_t)(total_b - free_b);
    *total_p = (uint64_t)total_b;
    return PX_OK;
}

/* Asynchronous copies (the transport's staging): one copy stream, created
 * on first use, so that copies overlap the compute stream's kernels; each
 * copy first waits for an event recorded on the compute stream (what was
 * issued before it), then records its ticket's event from a ring of
 * COPY_EVENTS. Waiting for ticket t waits for the event in slot t % ring:
 * if a newer copy re-recorded it, that copy follows t on the stream, so t
 * is done too. */
#define COPY_EVENTS 64
static cudaStream_t copy_stream;
static cudaEvent_t copy_events[COPY_EVENTS], copy_after;
static uint64_t copy_next = 1;

static int copy_stream_open(void)
{
    if (copy_stream)
        return 1;
    cudaError_t e = cudaEventCreateWithFlags(&copy_after, cudaEventDisableTiming);
    for (int i = 0; e == cudaSuccess && i < COPY_EVENTS; i++)
        e = cudaEventCreateWithFlags(&copy_events[i], cudaEventDisableTiming);
    if (e == cudaSuccess)
        e = cudaStreamCreateWithFlags(&copy_stream, cudaStreamNonBlocking);
    if (e != cudaSuccess) {
        px_error("CUDA copy stream: %s (staging copies stay synchronous)",
                 cudaGetErrorString(e));
        copy_stream = NULL;
        return 0;
    }
    return 1;
}

static uint64_t cuda_mem_copy_async(void *dst, const void *src, size_t bytes, int to_host)
{
    (void)to_host; /* cudaMemcpyDefault: the pointers say the direction */
    if (!copy_stream_open())
        return 0;
    uint64_t t = copy_next++;
    if (cudaEventRecord(copy_after, px__cuda.stream) != cudaSuccess ||
        cudaStreamWaitEvent(copy_stream, copy_after, 0) != cudaSuccess ||
        cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDefault, copy_stream) != cudaSuccess ||
        cudaEventRecord(copy_events[t % COPY_EVENTS], copy_stream) != cudaSuccess) {
        px_error("CUDA staging copy of %zu bytes: %s", bytes,
                 cudaGetErrorString(cudaGetLastError()));
        PX_CUDA_CHECK(cudaStreamSynchronize(copy_stream)); /* nothing half-issued behind */
        return 0;
    }
    return t;
}

static void cuda_copy_wait(uint64_t ticket)
{
    PX_CUDA_CHECK(cudaEventSynchronize(copy_events[ticket % COPY_EVENTS]));
}

/* ---------------------------------------------------------------- table */

static const px_kernel_ops_t cuda_ops = {
    .name = "cuda",
    .encoder_forward = cuda_encoder_forward,
    .encoder_backward = cuda_encoder_backward,
    .layernorm_forward = cuda_layernorm_forward,
    .layernorm_backward = cuda_layernorm_backward,
    .matmul_forward = cuda_matmul_forward,
    .matmul_backward = cuda_matmul_backward,
    .matmul_bf16_forward = px__cuda_matmul_bf16_forward,
    .matmul_bf16_backward = px__cuda_matmul_bf16_backward,
    .attention_forward = px__cuda_attention_forward,
    .attention_backward = px__cuda_attention_backward,
    .attention_backward_out = NULL, /* fp32: no fused backward reading out */
    .attention_block_forward = px__cuda_attention_block_forward,
    .attention_block_backward = px__cuda_attention_block_backward,
    .attention_block_delta = px__cuda_attention_block_delta,
    .attention_bf16_forward = px__cuda_attention_sel_bf16_forward, /* tc or CUDA cores */
    .attention_bf16_backward = px__cuda_attention_sel_bf16_backward,
    .attention_bf16_backward_out = px__cuda_attention_sel_bf16_backward_out, /* cuDNN reads out */
    .attention_block_bf16_forward = px__cuda_attention_block_bf16_forward,
    .attention_block_bf16_backward = px__cuda_attention_block_bf16_backward,
    .matmul_bf16in_forward = px__cuda_matmul_bf16in_forward,
    .matmul_bf16in_backward = px__cuda_matmul_bf16in_backward,
    .bf16_from_f32 = px__cuda_bf16_from_f32,
    .bf16_to_f32 = px__cuda_bf16_to_f32,
    .bf16_acts = 0, /* set by the bf16 view (px_kernels_with_precision) */
    .att_lse_only = 1, /* the fused attention saves the lse only (px_attention_cuda.cu) */
    .gelu_forward = cuda_gelu_forward,
    .gelu_backward = cuda_gelu_backward,
    .residual_forward = cuda_residual_forward,
    .residual_backward = cuda_residual_backward,
    .crossentropy_forward = px__cuda_crossentropy_forward,
    .crossentropy_backward = px__cuda_crossentropy_backward,
    .adamw_update = cuda_adamw_update,
    .sumsq = cuda_sumsq,
    .scale = cuda_scale,
    .encoder_vp_forward = cuda_encoder_vp_forward,
    .encoder_vp_backward = cuda_encoder_vp_backward,
    .crossentropy_vp_max = px__cuda_crossentropy_vp_max,
    .crossentropy_vp_exp = px__cuda_crossentropy_vp_exp,
    .crossentropy_vp_finish = px__cuda_crossentropy_vp_finish,
    .crossentropy_vp_backward = px__cuda_crossentropy_vp_backward,
    .bias_forward = cuda_bias_forward,
    .moe_router_forward = px__cuda_moe_router_forward,
    .moe_router_backward = px__cuda_moe_router_backward,
    .moe_dispatch = px__cuda_moe_dispatch,
    .moe_combine = px__cuda_moe_combine,
    .moe_combine_backward = px__cuda_moe_combine_backward,
    .mem_alloc = cuda_mem_alloc,
    .mem_free = cuda_mem_free,
    .mem_set = cuda_mem_set,
    .mem_copy = cuda_mem_copy,
    .mem_copy_to_host = cuda_mem_copy_to_host,
    .mem_copy_from_host = cuda_mem_copy_from_host,
    .mem_copy_to_host_async = cuda_mem_copy_to_host_async,
    .synchronize = cuda_synchronize,
    .mem_info = cuda_mem_info,
    .mem_copy_async = cuda_mem_copy_async,
    .copy_wait = cuda_copy_wait,
    .reduce = px__cuda_reduce,
    .reduce_avg_finish = px__cuda_reduce_avg,
    .ipc_handle = px__cuda_ipc_handle,
    .ipc_open = px__cuda_ipc_open,
    .ipc_close = px__cuda_ipc_close,
    .reduce_multi = px__cuda_reduce_multi,
    .event_ipc_create = px__cuda_event_ipc_create,
    .event_ipc_open = px__cuda_event_ipc_open,
    .event_destroy = px__cuda_event_destroy,
    .event_record = px__cuda_event_record,
    .stream_wait_event = px__cuda_stream_wait_event,
};

extern "C" int px_cuda_device_count(void)
{
    int n = 0;
    if (cudaGetDeviceCount(&n) != cudaSuccess) {
        cudaGetLastError();
        return 0;
    }
    return n;
}

extern "C" int px_cuda_device_name(char *buf, size_t len)
{
    cudaDeviceProp prop;
    if (len)
        buf[0] = '\0';
    if (px__cuda.device < 0 || !len || cudaGetDeviceProperties(&prop, px__cuda.device) != cudaSuccess) {
        cudaGetLastError();
        return -1;
    }
    snprintf(buf, len, "%s", prop.name);
    return 0;
}

extern "C" px_status_t px_kernels_cuda_open(int device, const px_kernel_ops_t **ops_p)
{
    if (px__cuda.device >= 0) {
        if (device != px__cuda.device) {
            px_error("CUDA backend already open on device %d; cannot open device %d "
                     "(one device per process)", px__cuda.device, device);
            return PX_ERR_INVALID_ARGUMENT;
        }
        *ops_p = &cuda_ops;
        return PX_OK;
    }
    /* PX_CUDA_ATTN: the bf16 attention's kernels (auto / tc / simt; common/px_env.c) */
    if (px_cuda_attention_kernels_set(px_env_str("PX_CUDA_ATTN")) != PX_OK)
        return PX_ERR_INVALID_ARGUMENT;
    int n = px_cuda_device_count();
    if (device < 0 || device >= n) {
        px_error("CUDA device %d does not exist (%d visible device%s)", device, n,
                 n == 1 ? "" : "s");
        return PX_ERR_INVALID_ARGUMENT;
    }
    cudaError_t e = cudaSetDevice(device);
    if (e == cudaSuccess)
        e = cudaStreamCreateWithFlags(&px__cuda.stream, cudaStreamNonBlocking);
    if (e != cudaSuccess) {
        px_error("CUDA device %d: %s", device, cudaGetErrorString(e));
        return PX_ERR_INTERNAL;
    }
    cublasStatus_t s = cublasCreate(&px__cuda.cublas);
    if (s == CUBLAS_STATUS_SUCCESS)
        s = cublasSetStream(px__cuda.cublas, px__cuda.stream);
    /* strict fp32: TF32 would break the 1e-5 equivalence with the CPU */
    if (s == CUBLAS_STATUS_SUCCESS)
        s = cublasSetMathMode(px__cuda.cublas, CUBLAS_DEFAULT_MATH);
    if (s != CUBLAS_STATUS_SUCCESS) {
        px_error("cuBLAS on device %d: %s", device, cublasGetStatusString(s));
        return PX_ERR_INTERNAL;
    }
    px__cuda.device = device;
    *ops_p = &cuda_ops;
    return PX_OK;
}

extern "C" int px_cuda_is_device_ptr(const void *p)
{
    cudaPointerAttributes at;
    if (!p || px__cuda.device < 0)
        return 0;
    if (cudaPointerGetAttributes(&at, p) != cudaSuccess) {
        cudaGetLastError(); /* not an error of the ops: clear it */
        return 0;
    }
    return at.type == cudaMemoryTypeDevice;
}

extern "C" px_status_t px_kernels_cuda_status(void)
{
    if (px__cuda.device >= 0) {
        cudaError_t e = cudaStreamSynchronize(px__cuda.stream);
        px__cuda_check(e, "cudaStreamSynchronize", __FILE__, __LINE__);
    }
    return px__cuda.sticky;
}

extern "C" void *px_cuda_host_alloc(size_t bytes)
{
    void *p = NULL;
    if (px__cuda.device < 0)
        return NULL;
    if (cudaHostAlloc(&p, bytes ? bytes : 1, cudaHostAllocPortable) != cudaSuccess) {
        cudaGetLastError(); /* not sticky: the caller falls back to pageable memory */
        return NULL;
    }
    return p;
}

extern "C" int px_cuda_host_free(void *p)
{
    cudaPointerAttributes at;
    if (!p || px__cuda.device < 0)
        return 0;
    if (cudaPointerGetAttributes(&at, p) != cudaSuccess) {
        cudaGetLastError();
        return 0;
    }
    if (at.type != cudaMemoryTypeHost)
        return 0;
    PX_CUDA_CHECK(cudaFreeHost(p));
    return 1;
}
