/* px_reduce_cuda.cu: the collectives' reduction kernels on device memory
 * (the semantics of px_reduce.h: element-wise, deterministic, integers
 * wrap, fp16/bf16 computed in fp32 and rounded once to nearest even, AVG
 * reduced as SUM and divided once by px_cuda_reduce_avg_finish), fp32 <->
 * bf16 conversions, and the bf16 GEMM (cuBLAS, fp32 accumulation).
 * Stream: the backend's (px_kernels_cuda_open first). */
#include "px_cuda_common.cuh"

#include <cuda_bf16.h>
#include <cuda_fp16.h>

template <typename T> struct acc_of { typedef T type; };
template <> struct acc_of<__half> { typedef float type; };
template <> struct acc_of<__nv_bfloat16> { typedef float type; };

template <typename T> __device__ __forceinline__ typename acc_of<T>::type to_acc(T x) { return x; }
template <> __device__ __forceinline__ float to_acc<__half>(__half x) { return __half2float(x); }
template <> __device__ __forceinline__ float to_acc<__nv_bfloat16>(__nv_bfloat16 x)
{
    return __bfloat162float(x);
}
template <typename T> __device__ __forceinline__ T from_acc(typename acc_of<T>::type x) { return x; }
template <> __device__ __forceinline__ __half from_acc<__half>(float x) { return __float2half_rn(x); }
template <> __device__ __forceinline__ __nv_bfloat16 from_acc<__nv_bfloat16>(float x)
{
    return __float2bfloat16_rn(x);
}

/* integers wrap as two's complement: add/multiply as unsigned */
template <typename A> __device__ __forceinline__ A op_sum(A a, A b) { return a + b; }
template <> __device__ __forceinline__ int32_t op_sum<int32_t>(int32_t a, int32_t b)
{
    return (int32_t)((uint32_t)a + (uint32_t)b);
}
template <> __device__ __forceinline__ int64_t op_sum<int64_t>(int64_t a, int64_t b)
{
    return (int64_t)((uint64_t)a + (uint64_t)b);
}
template <typename A> __device__ __forceinline__ A op_prod(A a, A b) { return a * b; }
template <> __device__ __forceinline__ int32_t op_prod<int32_t>(int32_t a, int32_t b)
{
    return (int32_t)((uint32_t)a * (uint32_t)b);
}
template <> __device__ __forceinline__ int64_t op_prod<int64_t>(int64_t a, int64_t b)
{
    return (int64_t)((uint64_t)a * (uint64_t)b);
}
template <> __device__ __forceinline__ uint8_t op_sum<uint8_t>(uint8_t a, uint8_t b)
{
    return (uint8_t)(a + b);
}
template <> __device__ __forceinline__ uint8_t op_prod<uint8_t>(uint8_t a, uint8_t b)
{
    return (uint8_t)(a * b);
}

template <typename T>
__global__ void reduce_kernel(int op, T *dst, const T *a, const T *b, size_t n)
{
    typedef typename acc_of<T>::type A;
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n;
         i += (size_t)gridDim.x * blockDim.x) {
        A x = to_acc<T>(a[i]), y = to_acc<T>(b[i]), r;
        switch (op) {
        case PX_PROD: r = op_prod<A>(x, y); break;
        case PX_MIN: r = y < x ? y : x; break;
        case PX_MAX: r = y > x ? y : x; break;
        default: r = op_sum<A>(x, y); break; /* SUM, AVG */
        }
        dst[i] = from_acc<T>(r);
    }
}

template <typename T>
__global__ void avg_kernel(T *dst, size_t n, int div)
{
    typedef typename acc_of<T>::type A;
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n;
         i += (size_t)gridDim.x * blockDim.x)
        dst[i] = from_acc<T>(to_acc<T>(dst[i]) / (A)div);
}

static unsigned grid_for(size_t n)
{
    size_t b = (n + 255) / 256;
    return (unsigned)(b > 1048576 ? 1048576 : b);
}

template <typename T>
static int launch_reduce(int op, void *dst, const void *a, const void *b, size_t n)
{
    if (!n)
        return 0;
    reduce_kernel<T><<<grid_for(n), 256, 0, px__cuda.stream>>>(op, (T *)dst, (const T *)a,
                                                               (const T *)b, n);
    PX_CUDA_LAUNCHED();
    return 0;
}

extern "C" int px_cuda_reduce_apply(px_dtype_t dtype, px_redop_t op, void *dst, const void *a,
                                    const void *b, size_t count)
{
    if (px__cuda.device < 0 || (int)op < 0 || (int)op >= PX_REDOP_COUNT)
        return -1;
    switch (dtype) {
    case PX_FLOAT32: return launch_reduce<float>(op, dst, a, b, count);
    case PX_FLOAT64: return launch_reduce<double>(op, dst, a, b, count);
    case PX_FLOAT16: return launch_reduce<__half>(op, dst, a, b, count);
    case PX_BFLOAT16: return launch_reduce<__nv_bfloat16>(op, dst, a, b, count);
    case PX_INT32: return launch_reduce<int32_t>(op, dst, a, b, count);
    case PX_INT64: return launch_reduce<int64_t>(op, dst, a, b, count);
    case PX_UINT8: return launch_reduce<uint8_t>(op, dst, a, b, count);
    }
    return -1;
}

/* The sources of one reduce_multi, passed by value (kernel parameters). */
struct multi_src {
    const void *p[PX_REDUCE_MULTI_MAX];
};

/* reduce_multi (px_kernels.h): acc = s[0]; acc = s[k] OP acc for k = 1..m-1,
 * each step as reduce_kernel's with x = s[k], y = acc; AVG divides the sum
 * by m as avg_kernel; the result to dst and dst2. */
template <typename T>
__global__ void reduce_multi_kernel(int op, T *dst, T *dst2, multi_src s, int m, size_t n)
{
    typedef typename acc_of<T>::type A;
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n;
         i += (size_t)gridDim.x * blockDim.x) {
        A y = to_acc<T>(((const T *)s.p[0])[i]);
        for (int k = 1; k < m; k++) {
            A x = to_acc<T>(((const T *)s.p[k])[i]);
            switch (op) {
            case PX_PROD: y = op_prod<A>(x, y); break;
            case PX_MIN: y = y < x ? y : x; break;
            case PX_MAX: y = y > x ? y : x; break;
            default: y = op_sum<A>(x, y); break; /* SUM, AVG */
            }
        }
        T r = from_acc<T>(y);
        if (op == PX_AVG)
            r = from_acc<T>(to_acc<T>(r) / (A)m);
        dst[i] = r;
        if (dst2)
            dst2[i] = r;
    }
}

template <typename T>
static void launch_multi(int op, void *dst, void *dst2, const multi_src &s, int m, size_t n)
{
    reduce_multi_kernel<T><<<grid_for(n), 256, 0, px__cuda.stream>>>(op, (T *)dst, (T *)dst2, s,
                                                                     m, n);
    PX_CUDA_LAUNCHED();
}

extern "C" int px_cuda_reduce_multi(px_dtype_t dtype, px_redop_t op, void *dst, void *dst2,
                                    const void *const *srcs, int m, size_t count)
{
    multi_src s;
    if (px__cuda.device < 0 || (int)op < 0 || (int)op >= PX_REDOP_COUNT || m < 1 ||
        m > PX_REDUCE_MULTI_MAX)
        return -1;
    if (!count)
        return 0;
    for (int k = 0; k < PX_REDUCE_MULTI_MAX; k++)
        s.p[k] = k < m ? srcs[k] : NULL;
    switch (dtype) {
    case PX_FLOAT32: launch_multi<float>(op, dst, dst2, s, m, count); return 0;
    case PX_FLOAT64: launch_multi<double>(op, dst, dst2, s, m, count); return 0;
    case PX_FLOAT16: launch_multi<__half>(op, dst, dst2, s, m, count); return 0;
    case PX_BFLOAT16: launch_multi<__nv_bfloat16>(op, dst, dst2, s, m, count); return 0;
    case PX_INT32: launch_multi<int32_t>(op, dst, dst2, s, m, count); return 0;
    case PX_INT64: launch_multi<int64_t>(op, dst, dst2, s, m, count); return 0;
    case PX_UINT8: launch_multi<uint8_t>(op, dst, dst2, s, m, count); return 0;
    }
    return -1;
}

template <typename T>
static void launch_avg(void *dst, size_t n, int div)
{
    if (!n)
        return;
    avg_kernel<T><<<grid_for(n), 256, 0, px__cuda.stream>>>((T *)dst, n, div);
    PX_CUDA_LAUNCHED();
}

extern "C" void px_cuda_reduce_avg_finish(px_dtype_t dtype, void *dst, size_t count, int n)
{
    if (px__cuda.device < 0 || n < 1)
        return;
    switch (dtype) {
    case PX_FLOAT32: launch_avg<float>(dst, count, n); break;
    case PX_FLOAT64: launch_avg<double>(dst, count, n); break;
    case PX_FLOAT16: launch_avg<__half>(dst, count, n); break;
    case PX_BFLOAT16: launch_avg<__nv_bfloat16>(dst, count, n); break;
    case PX_INT32: launch_avg<int32_t>(dst, count, n); break;
    case PX_INT64: launch_avg<int64_t>(dst, count, n); break;
    case PX_UINT8: launch_avg<uint8_t>(dst, count, n); break;
    }
}

__global__ void f32_to_bf16_kernel(__nv_bfloat16 *dst, const float *src, size_t n)
{
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n;
         i += (size_t)gridDim.x * blockDim.x)
        dst[i] = __float2bfloat16_rn(src[i]);
}

__global__ void bf16_to_f32_kernel(float *dst, const __nv_bfloat16 *src, size_t n)
{
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n;
         i += (size_t)gridDim.x * blockDim.x)
        dst[i] = __bfloat162float(src[i]);
}

extern "C" void px_cuda_f32_to_bf16(uint16_t *dst, const float *src, size_t count)
{
    if (!count)
        return;
    f32_to_bf16_kernel<<<grid_for(count), 256, 0, px__cuda.stream>>>((__nv_bfloat16 *)dst, src,
                                                                      count);
    PX_CUDA_LAUNCHED();
}

extern "C" void px_cuda_bf16_to_f32(float *dst, const uint16_t *src, size_t count)
{
    if (!count)
        return;
    bf16_to_f32_kernel<<<grid_for(count), 256, 0, px__cuda.stream>>>(
        dst, (const __nv_bfloat16 *)src, count);
    PX_CUDA_LAUNCHED();
}

extern "C" void px_cuda_matmul_forward_bf16(uint16_t *out, const uint16_t *inp,
                                            const uint16_t *weight, int N, int C, int OC)
{
    const float one = 1.0f, zero = 0.0f;
    /* column-major out^T (OC x N) = W (OC x C) inp^T (C x N), as the fp32 op */
    PX_CUBLAS_CHECK(cublasGemmEx(px__cuda.cublas, CUBLAS_OP_T, CUBLAS_OP_N, OC, N, C, &one,
                                 weight, CUDA_R_16BF, C, inp, CUDA_R_16BF, C, &zero, out,
                                 CUDA_R_16BF, OC, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
}
