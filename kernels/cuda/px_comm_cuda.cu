/* px_comm_cuda.cu: the CUDA backend's px_comm_device_t
 * (kernels/px_comm_device.h), for collectives that run on its stream
 * (NCCL): the GPU's PCI bus id, the compute stream, and fences a host
 * thread sleeps on.
 *
 * A fence is an eventfd that a host function (cudaLaunchHostFunc, run by
 * the CUDA driver's thread once the stream's earlier work finished)
 * writes. Whoever of the host function and fence_release comes second
 * frees it: the state goes pending -> fired (the host function) or
 * pending -> released (the caller); a released fence is closed by its
 * host function when that runs (a collective stuck on a dead peer runs
 * it once its NCCL communicator is aborted), so the descriptor number is
 * never written after it was closed and reused. */
#include <atomic>
#include <new>
#include <sys/eventfd.h>
#include <unistd.h>

#include "px_cuda_common.cuh"

extern "C" {
#include "px_comm_device.h"
}

namespace {

enum { FENCE_PENDING = 0, FENCE_FIRED = 1, FENCE_RELEASED = 2 };

struct fence {
    int efd;
    std::atomic<int> state;
};

void free_fence(fence *f)
{
    close(f->efd);
    delete f;
}

void CUDART_CB fence_fire(void *arg)
{
    fence *f = static_cast<fence *>(arg);
    uint64_t one = 1;
    int expected = FENCE_PENDING;

    if (write(f->efd, &one, sizeof(one)) < 0) {
        /* an eventfd write fails only on overflow: readable already */
    }
    if (!f->state.compare_exchange_strong(expected, FENCE_FIRED))
        free_fence(f); /* released before it fired: ours to free */
}

int comm_gpu_id(char *buf, size_t len)
{
    if (!len)
        return -1;
    buf[0] = '\0';
    if (px__cuda.device < 0 || cudaDeviceGetPCIBusId(buf, (int)len, px__cuda.device) != cudaSuccess) {
        buf[0] = '\0';
        return -1;
    }
    return 0;
}

void *comm_stream(void)
{
    return (void *)px__cuda.stream;
}

void *comm_fence_issue(void)
{
    fence *f = new (std::nothrow) fence;
    cudaError_t e;

    if (!f)
        return NULL;
    f->efd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
    f->state.store(FENCE_PENDING);
    if (f->efd < 0) {
        px_error("fence: eventfd failed");
        delete f;
        return NULL;
    }
    e = cudaLaunchHostFunc(px__cuda.stream, fence_fire, f);
    if (e != cudaSuccess) {
        px_error("fence: cudaLaunchHostFunc: %s", cudaGetErrorString(e));
        free_fence(f);
        return NULL;
    }
    return f;
}

int comm_fence_fd(const void *p)
{
    return p ? static_cast<const fence *>(p)->efd : -1;
}

void comm_fence_release(void *p)
{
    fence *f = static_cast<fence *>(p);
    int expected = FENCE_PENDING;

    if (!f)
        return;
    if (!f->state.compare_exchange_strong(expected, FENCE_RELEASED))
        free_fence(f); /* fired: nobody else holds it */
}

const px_comm_device_t comm_device = {"cuda", comm_gpu_id, comm_stream, comm_fence_issue,
                                      comm_fence_fd, comm_fence_release};

} // namespace

extern "C" const px_comm_device_t *px_cuda_comm_device(void)
{
    return px__cuda.device >= 0 ? &comm_device : NULL;
}
