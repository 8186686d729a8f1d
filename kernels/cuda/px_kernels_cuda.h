/* px_kernels_cuda.h: the CUDA op table, the same signatures as the CPU one
 * (px_kernels.h), and the device reduction kernels the collectives use.
 *
 * Built only where meson finds nvcc (PX_HAVE_CUDA, meson option `cuda`);
 * code that must also build without CUDA goes through px_kernels_select()
 * (px_kernels_select.h) instead of calling this header.
 *
 * The backend is one per process (a rank binds one device, as
 * ARCHITECTURE.md section 1 says): one device, one compute stream every op
 * and memory op is ordered on, one cuBLAS handle, one grow-only scratch
 * block. Its ops are called from one thread at a time (the rank's compute
 * thread). Ops return void as in the CPU table: a launch or CUDA error is
 * logged with file and line where it happens and kept as a sticky status
 * that px_kernels_cuda_status() returns (the engine checks it once per
 * step). fp32 GEMMs run in strict fp32 (no TF32), so the CUDA table matches
 * the CPU one within the engine's 1e-5 oracle. */
#ifndef PX_KERNELS_CUDA_H
#define PX_KERNELS_CUDA_H

#include <stddef.h>

#include "px_comm_device.h"
#include "px_dtype.h"
#include "px_kernels.h"
#include "px_status.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Number of CUDA devices the runtime sees (honouring CUDA_VISIBLE_DEVICES);
 * 0 when there is no driver, no device, or cudaGetDeviceCount fails. */
int px_cuda_device_count(void);

/* The opened device's name (cudaDeviceProp.name, "NVIDIA H200") into
 * buf (NUL-terminated, cut to len); 0 on success, -1 when no device is
 * open or the query fails (buf then ""). */
int px_cuda_device_name(char *buf, size_t len);

/* Opens the CUDA backend on device `device` (an ordinal of the visible
 * devices): sets the device, creates the stream and the cuBLAS handle.
 * Idempotent for the same device; a second, different device is
 * PX_ERR_INVALID_ARGUMENT (one device per process). Errors:
 * PX_ERR_INVALID_ARGUMENT (no such device, naming it and the count),
 * PX_ERR_INTERNAL (a CUDA or cuBLAS call failed; logged). On success
 * *ops_p is the static CUDA table (valid until process exit). */
px_status_t px_kernels_cuda_open(int device, const px_kernel_ops_t **ops_p);

/* The first error any CUDA op met since the backend opened (PX_OK when
 * none); sticky. Also synchronizes the stream so asynchronous kernel
 * faults surface here. */
px_status_t px_kernels_cuda_status(void);

/* Device-side reductions with the semantics of px_reduce_apply() and
 * px_reduce_avg_finish() (px_reduce.h): dst[i] = a[i] OP b[i] on device
 * memory, ordered on the backend's stream (call px_kernels_cuda_open
 * first). fp16/bf16 compute in fp32 and round once. Returns 0, or -1 for
 * an unknown dtype/op or when the backend is not open. Asynchronous: the
 * result is visible to later ops on the stream, to the host after
 * synchronize. */
int px_cuda_reduce_apply(px_dtype_t dtype, px_redop_t op, void *dst, const void *a,
                         const void *b, size_t count);
void px_cuda_reduce_avg_finish(px_dtype_t dtype, void *dst, size_t count, int n);
/* The kernel table's reduce_multi (px_kernels.h) on the backend's stream:
 * 0, or -1 for an unknown dtype/op, m outside 1..PX_REDUCE_MULTI_MAX or the
 * backend not open. */
int px_cuda_reduce_multi(px_dtype_t dtype, px_redop_t op, void *dst, void *dst2,
                         const void *const *srcs, int m, size_t count);

/* 1 when `p` points into CUDA device memory (cudaPointerGetAttributes:
 * cudaMemoryTypeDevice), else 0 (host, pinned or managed memory, or no
 * CUDA runtime). Cheap after the first call; any thread. */
int px_cuda_is_device_ptr(const void *p);

/* The backend's px_comm_device_t (px_comm_device.h: PCI bus id, compute
 * stream, fences; px_comm_cuda.cu) once a device is open, else NULL. */
const px_comm_device_t *px_cuda_comm_device(void);

/* `bytes` of page-locked host memory (cudaHostAlloc) once the backend is
 * open, else NULL (the caller falls back to malloc). px_cuda_host_free
 * frees it and returns 1, or returns 0 for memory that is not
 * cudaHostAlloc'ed (NULL included: nothing done). */
void *px_cuda_host_alloc(size_t bytes);
int px_cuda_host_free(void *p);

/* fp32 <-> bf16 conversion on device memory (round to nearest even, as
 * px_f32_to_bf16), `count` elements; ordered on the stream. */
void px_cuda_f32_to_bf16(uint16_t *dst, const float *src, size_t count);
void px_cuda_bf16_to_f32(float *dst, const uint16_t *src, size_t count);

/* bf16 GEMM with fp32 accumulation (cuBLAS, CUBLAS_COMPUTE_32F):
 * out (N,OC) bf16 = inp (N,C) bf16 @ weight (OC,C)^T bf16. The bf16 path's
 * matmul and the GEMM-peak figure of deploy/gpu-check.sh. */
void px_cuda_matmul_forward_bf16(uint16_t *out, const uint16_t *inp, const uint16_t *weight,
                                 int N, int C, int OC);

/* Which kernels the bf16 attention ops (attention_bf16_forward/_backward)
 * run: "auto" or "tc" (NULL and "" too): the tensor-core kernels
 * (px_attention_tc_cuda.cu) where the head size C/NH is a multiple of 16 up
 * to 128 and the open device's shared memory per block holds their tiles
 * (not the 99 KiB of sm_86/89 at head sizes past 64), the CUDA-core ones
 * elsewhere; "simt": always the CUDA-core ones
 * (the fallback should a GPU check find a fault in the others); "cudnn":
 * cuDNN's fused flash attention (libcudnn.so.9 opened at run time;
 * px_attention_cudnn_cuda.cu) where the head size is a multiple of 8 up to
 * 128, and "auto"'s kernels wherever cuDNN is missing or refuses the
 * shape (logged once). "auto" stays on the tensor-core kernels until a GPU
 * check has shown cuDNN correct and faster there (px-opcheck --attn-rate).
 * px_kernels_cuda_open applies the environment's PX_CUDA_ATTN through it.
 * Errors: PX_ERR_INVALID_ARGUMENT for any other name (logged, naming it;
 * the choice is unchanged). Process-wide; call between ops. */
px_status_t px_cuda_attention_kernels_set(const char *name);

/* "cudnn", "tc" or "simt": the kernels the bf16 attention ops run now for
 * a model of width C with NH heads (px-opcheck's labels). "cudnn" while
 * cuDNN is asked for, takes the head size and has not failed to load (it
 * is loaded on the first op, so before that "cudnn" is the intent). */
const char *px_cuda_attention_kernels_name(int C, int NH);

/* PX_CUDA_ATTN=cudnn's state, for reports (px-opcheck): NULL while cuDNN
 * ran every shape asked of it (or none yet); else why not: libcudnn.so.9
 * not loaded (and why), or the reason of the last shape it refused (those
 * calls ran the tensor-core kernels). Borrowed, valid until the next op. */
const char *px_cuda_attention_cudnn_status(void);

/* cudnnGetVersion() of the libcudnn.so.9 that PX_CUDA_ATTN=cudnn loaded
 * (e.g. 91400); 0 while none is loaded (not yet asked, or it failed). */
long px_cuda_attention_cudnn_version(void);

#ifdef __cplusplus
}
#endif

#endif
