/* px_devmem.h: collectives on device (GPU) buffers, by staging.
 *
 * The transport's algorithms read and write host memory (Debian's UCX has
 * no CUDA support). A process that computes on a GPU registers its
 * device-memory operations once; from then on px_allreduce_start,
 * px_reduce_scatter_start and px_allgather_start detect a device buffer
 * (is_device) and stage it: the device stream is synchronized, the whole
 * buffer is copied into a host temporary, the collective runs there, and
 * its result is copied back into the device buffer when the request
 * completes. Point-to-point sends and receives (px_send_start,
 * px_recv_start) of a device buffer travel in chunks of
 * px_transport_set_stage_chunk bytes through two host buffers, the copy of
 * one chunk overlapping the transfer of the other (both ends must be device
 * buffers). Other collectives on device buffers are
 * PX_ERR_INVALID_ARGUMENT; so are fp16/bf16 on device buffers (fp32 only).
 * Host temporaries (staging included) come from the registered pinned
 * allocator (cudaHostAlloc through the CUDA backend) when one is set.
 *
 * Not yet: the collectives' staging in chunks (they copy whole buffers),
 * CUDA IPC between the GPUs of one node, and UCX's own CUDA support
 * (ARCHITECTURE.md section 4).
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

/* Default staging chunk of a device buffer's point-to-point transfer: 4 MiB
 * (large enough that a chunk's message runs at the link's bandwidth, small
 * enough that two per request stay cheap in pinned memory). */
#define PX_STAGE_CHUNK_DEFAULT ((size_t)4 << 20)

/* Sets the staging chunk in bytes (0: the default). Every rank of a job must
 * use the same value (the receiver posts the sender's chunk sizes). */
void px_transport_set_stage_chunk(size_t bytes);

/* Registers the allocator of the transport's host temporaries (staging
 * buffers included): `alloc` returns `bytes` of host memory (pinned: page-
 * locked, so device copies run at full speed and asynchronously) or NULL,
 * `release` frees it (NULL no-op). NULL, NULL: malloc/free. Set once,
 * before any communicator exists, and never changed while one lives (its
 * cached temporaries are freed with the allocator current at that time). */
void px_transport_set_pinned_memory(void *(*alloc)(size_t bytes), void (*release)(void *p));

#endif
