/* px_devmem.h: collectives on device (GPU) buffers, by staging.
 *
 * The transport's algorithms read and write host memory (Debian's UCX has
 * no CUDA support). A process that computes on a GPU registers its
 * device-memory operations once; from then on px_allreduce_start,
 * px_reduce_scatter_start and px_allgather_start detect a device buffer
 * (is_device) and stage it: the device stream is synchronized, the whole
 * buffer is copied into a host temporary, the collective runs there, and
 * its result is copied back into the device buffer when the request
 * completes. Other collectives on device buffers are
 * PX_ERR_INVALID_ARGUMENT. fp16/bf16 on device buffers too (fp32 only).
 *
 * Not yet: chunked staging in pinned buffers overlapping copy and send,
 * CUDA IPC between the GPUs of one node, and UCX's own CUDA support
 * (ARCHITECTURE.md section 4) -- this is the correct, simple path.
 * Process-wide; set before any collective, from the thread that runs them. */
#ifndef PX_DEVMEM_H
#define PX_DEVMEM_H

#include <stddef.h>

#include "px_kernels.h"

/* Registers the device backend: `k` (a kernel table whose memory is device
 * memory: its mem_copy_to_host / mem_copy_from_host / synchronize are used)
 * and `is_device` (1 when a pointer is that backend's device memory).
 * NULL, NULL unregisters. Borrowed; both must outlive every collective. */
void px_transport_set_device_memory(const px_kernel_ops_t *k, int (*is_device)(const void *p));

#endif
