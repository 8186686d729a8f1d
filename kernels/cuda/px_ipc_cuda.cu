/* px_ipc_cuda.cu: the CUDA backend's ops for device buffers shared between
 * the processes of one node (px_kernels.h, "device buffers shared between
 * the processes of one node"): the collectives' device reduction and CUDA
 * IPC handles, as the transport's IPC path (transport/px_ipc.c) uses them.
 *
 * Handles: cudaIpcGetMemHandle works on whole allocations, so a handle is
 * the handle of the allocation that holds the pointer (its base from
 * cuMemGetAddressRange, reached through the runtime's driver entry point,
 * so the library does not link libcuda) plus the pointer's offset.
 * Opening (cudaIpcOpenMemHandle, cudaIpcMemLazyEnablePeerAccess) costs
 * milliseconds, so mappings are cached per handle with a reference count:
 * a communicator opens each peer's scratch ring once, and two
 * communicators over the same peers share the mapping.
 *
 * Events (the IPC path's event protocol): interprocess events
 * (cudaEventInterprocess | cudaEventDisableTiming, cudaIpcGetEventHandle /
 * cudaIpcOpenEventHandle), recorded on and waited for by the backend's
 * stream; reduce_multi: every peer's slice summed in one kernel
 * (px_reduce_cuda.cu).
 *
 * Thread: the rank's compute thread, as every op of the table; ordered on
 * the backend's stream (reduce), or synchronous (handles). */
#include "px_cuda_common.cuh"

#include <string.h>

#include "px_kernels_cuda.h"
#include "px_log.h"

static_assert(sizeof(cudaIpcMemHandle_t) <= sizeof(((px_ipc_handle_t *)0)->bytes),
              "cudaIpcMemHandle_t does not fit px_ipc_handle_t");

extern "C" px_status_t px__cuda_reduce(void *dst, const void *a, const void *b, size_t count,
                                       int dtype, int op)
{
    if (px_cuda_reduce_apply((px_dtype_t)dtype, (px_redop_t)op, dst, a, b, count) != 0) {
        px_error("CUDA reduce: dtype %d / op %d not supported or backend not open", dtype, op);
        return PX_ERR_INVALID_ARGUMENT;
    }
    cudaError_t e = cudaGetLastError();
    if (e != cudaSuccess) {
        px_error("CUDA reduce of %zu elements: %s", count, cudaGetErrorString(e));
        return PX_ERR_INTERNAL;
    }
    return PX_OK;
}

extern "C" void px__cuda_reduce_avg(void *dst, size_t count, int dtype, int n)
{
    px_cuda_reduce_avg_finish((px_dtype_t)dtype, dst, count, n);
}

/* cuMemGetAddressRange (driver API, v2 since CUDA 3.2) through the runtime's
 * entry point: base and size of the allocation holding `p`. */
typedef int (*get_range_fn)(unsigned long long *base, size_t *size, unsigned long long p);

static get_range_fn get_range(void)
{
    static get_range_fn fn;
    static int tried;
    if (!tried) {
        void *f = NULL;
        cudaDriverEntryPointQueryResult q;
        tried = 1;
        if (cudaGetDriverEntryPointByVersion("cuMemGetAddressRange", &f, 12000, cudaEnableDefault,
                                             &q) == cudaSuccess &&
            q == cudaDriverEntryPointSuccess)
            fn = (get_range_fn)f;
        else
            cudaGetLastError();
    }
    return fn;
}

extern "C" px_status_t px__cuda_ipc_handle(const void *ptr, px_ipc_handle_t *handle_p)
{
    get_range_fn range = get_range();
    unsigned long long base = 0;
    size_t size = 0;
    cudaIpcMemHandle_t h;
    cudaError_t e;

    if (!range || range(&base, &size, (unsigned long long)(uintptr_t)ptr) != 0) {
        px_error("CUDA IPC handle: %p is not a device allocation (cuMemGetAddressRange %s)",
                 ptr, range ? "failed" : "unavailable");
        return PX_ERR_INVALID_ARGUMENT;
    }
    e = cudaIpcGetMemHandle(&h, (void *)(uintptr_t)base);
    if (e != cudaSuccess) {
        px_error("cudaIpcGetMemHandle(%p): %s", (void *)(uintptr_t)base, cudaGetErrorString(e));
        return PX_ERR_INTERNAL;
    }
    memset(handle_p, 0, sizeof(*handle_p));
    memcpy(handle_p->bytes, &h, sizeof(h));
    handle_p->offset = (uint64_t)((uintptr_t)ptr - (uintptr_t)base);
    return PX_OK;
}

/* The cache of opened handles: a short list (a rank maps the scratch rings
 * of its node's peers, a handful per communicator). */
typedef struct ipc_map {
    struct ipc_map *next;
    unsigned char bytes[sizeof(cudaIpcMemHandle_t)];
    void *base;
    int refs;
} ipc_map_t;

static ipc_map_t *maps;

static ipc_map_t *find(const px_ipc_handle_t *handle, ipc_map_t ***link_p)
{
    ipc_map_t **link = &maps;
    for (ipc_map_t *m = maps; m; link = &m->next, m = m->next)
        if (!memcmp(m->bytes, handle->bytes, sizeof(m->bytes))) {
            if (link_p)
                *link_p = link;
            return m;
        }
    return NULL;
}

extern "C" px_status_t px__cuda_ipc_open(const px_ipc_handle_t *handle, void **ptr_p)
{
    ipc_map_t *m = find(handle, NULL);
    if (!m) {
        cudaIpcMemHandle_t h;
        void *base = NULL;
        memcpy(&h, handle->bytes, sizeof(h));
        cudaError_t e = cudaIpcOpenMemHandle(&base, h, cudaIpcMemLazyEnablePeerAccess);
        if (e != cudaSuccess) {
            cudaGetLastError();
            px_error("cudaIpcOpenMemHandle: %s", cudaGetErrorString(e));
            return PX_ERR_INTERNAL;
        }
        m = (ipc_map_t *)calloc(1, sizeof(*m));
        if (!m) {
            cudaIpcCloseMemHandle(base);
            return PX_ERR_NO_MEMORY;
        }
        memcpy(m->bytes, handle->bytes, sizeof(m->bytes));
        m->base = base;
        m->next = maps;
        maps = m;
    }
    m->refs++;
    *ptr_p = (char *)m->base + handle->offset;
    return PX_OK;
}

extern "C" void px__cuda_ipc_close(const px_ipc_handle_t *handle)
{
    ipc_map_t **link = NULL;
    ipc_map_t *m = find(handle, &link);
    if (!m || --m->refs > 0)
        return;
    *link = m->next;
    PX_CUDA_CHECK(cudaIpcCloseMemHandle(m->base));
    free(m);
}

extern "C" px_status_t px__cuda_reduce_multi(void *dst, void *dst2, const void *const *srcs, int m,
                                             size_t count, int dtype, int op)
{
    if (px_cuda_reduce_multi((px_dtype_t)dtype, (px_redop_t)op, dst, dst2, srcs, m, count) != 0) {
        px_error("CUDA reduce of %d sources: dtype %d / op %d not supported, or backend not "
                 "open", m, dtype, op);
        return PX_ERR_INVALID_ARGUMENT;
    }
    cudaError_t e = cudaGetLastError();
    if (e != cudaSuccess) {
        px_error("CUDA reduce of %d sources, %zu elements: %s", m, count, cudaGetErrorString(e));
        return PX_ERR_INTERNAL;
    }
    return PX_OK;
}

/* --- events shared between processes (the IPC path's event protocol) ----- */

static_assert(sizeof(cudaIpcEventHandle_t) <= sizeof(((px_ipc_handle_t *)0)->bytes),
              "cudaIpcEventHandle_t does not fit px_ipc_handle_t");

extern "C" px_status_t px__cuda_event_ipc_create(void **event_p, px_ipc_handle_t *handle_p)
{
    cudaEvent_t ev;
    cudaIpcEventHandle_t h;
    cudaError_t e = cudaEventCreateWithFlags(&ev, cudaEventInterprocess | cudaEventDisableTiming);
    if (e == cudaSuccess) {
        e = cudaIpcGetEventHandle(&h, ev);
        if (e != cudaSuccess)
            cudaEventDestroy(ev);
    }
    if (e != cudaSuccess) {
        cudaGetLastError();
        px_error("CUDA interprocess event: %s", cudaGetErrorString(e));
        return PX_ERR_INTERNAL;
    }
    memset(handle_p, 0, sizeof(*handle_p));
    memcpy(handle_p->bytes, &h, sizeof(h));
    *event_p = (void *)ev;
    return PX_OK;
}

extern "C" px_status_t px__cuda_event_ipc_open(const px_ipc_handle_t *handle, void **event_p)
{
    cudaEvent_t ev;
    cudaIpcEventHandle_t h;
    memcpy(&h, handle->bytes, sizeof(h));
    cudaError_t e = cudaIpcOpenEventHandle(&ev, h);
    if (e != cudaSuccess) {
        cudaGetLastError();
        px_error("cudaIpcOpenEventHandle: %s", cudaGetErrorString(e));
        return PX_ERR_INTERNAL;
    }
    *event_p = (void *)ev;
    return PX_OK;
}

extern "C" void px__cuda_event_destroy(void *event)
{
    if (event)
        PX_CUDA_CHECK(cudaEventDestroy((cudaEvent_t)event));
}

extern "C" px_status_t px__cuda_event_record(void *event)
{
    cudaError_t e = cudaEventRecord((cudaEvent_t)event, px__cuda.stream);
    if (e != cudaSuccess) {
        cudaGetLastError();
        px_error("cudaEventRecord: %s", cudaGetErrorString(e));
        return PX_ERR_INTERNAL;
    }
    return PX_OK;
}

extern "C" px_status_t px__cuda_stream_wait_event(void *event)
{
    cudaError_t e = cudaStreamWaitEvent(px__cuda.stream, (cudaEvent_t)event, 0);
    if (e != cudaSuccess) {
        cudaGetLastError();
        px_error("cudaStreamWaitEvent: %s", cudaGetErrorString(e));
        return PX_ERR_INTERNAL;
    }
    return PX_OK;
}
