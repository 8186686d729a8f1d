/* px_comm_device.h: what a collective library that runs on the device's
 * own streams (NCCL, transport/paths/nccl) needs of the device backend,
 * beside the op table (px_kernels.h): the GPU's identity, the compute
 * stream, and a completion that a host thread can sleep on.
 *
 * The CUDA backend fills it (kernels/cuda/px_comm_cuda.cu;
 * px_kernels_comm_device() in px_kernels_select.h); a CPU or simulated
 * device has none. Tests fill it with fakes. */
#ifndef PX_COMM_DEVICE_H
#define PX_COMM_DEVICE_H

#include <stddef.h>

typedef struct px_comm_device {
    const char *name; /* "cuda": log lines */
    /* This process's GPU, unique on its node (CUDA: cudaDeviceGetPCIBusId,
     * "0000:19:00.0"), into buf (NUL-terminated, cut to len): 0, or -1
     * when the runtime cannot say. Two processes on one GPU give the same
     * text. */
    int (*gpu_id)(char *buf, size_t len);
    /* The stream every op of the backend is ordered on (CUDA: the compute
     * stream, a cudaStream_t): collectives issued on it see what the ops
     * before them wrote, and the ops after them see their results. */
    void *(*stream)(void);
    /* A fence after every op issued so far on stream(): an opaque handle,
     * NULL when it cannot be issued (logged). fence_fd is a descriptor
     * that becomes readable (POLLIN) once those ops finished (CUDA: an
     * eventfd written by a host function cudaLaunchHostFunc enqueued on
     * the stream); fence_release gives the fence back, done or not (a
     * fence whose ops never finish, as a collective stuck on a dead peer
     * until its communicator is aborted, is freed when it fires). */
    void *(*fence_issue)(void);
    int (*fence_fd)(const void *fence);
    void (*fence_release)(void *fence);
} px_comm_device_t;

#endif
