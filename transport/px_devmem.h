/* px_devmem.h: collectives on device (GPU) buffers, by staging.
 *
 * The transport's algorithms read and write host memory (Debian's UCX has
 * no CUDA support). A process that computes on a GPU registers its
 * device-memory operations once; from then on px_allreduce_start,
 * px_reduce_scatter_start, px_allgather_start, px_bcast_start and
 * px_alltoall_start detect a device buffer (is_device) and run chunk by
 * chunk (px_stage.c): chunks of
 * about px_transport_set_stage_chunk bytes are copied off the device into
 * one of three pinned host buffers, the host algorithm runs on each, and
 * each result is copied back, the copies of chunks i-1 and i+1 made while
 * chunk i's messages are on the wire. The result is bit for bit the host
 * path's on the same data (each element summed in the same order; see
 * px_stage.c). The request completes when the last chunk is back on the
 * device. Point-to-point sends and receives (px_send_start, px_recv_start)
 * of a device buffer travel in chunks of the same size through two host
 * buffers, the copy of one chunk overlapping the transfer of the other
 * (both ends must be device buffers). px_alltoallv_start on device
 * buffers is staged in chunks too: chunk i carries elements [i*pc,
 * (i+1)*pc) of every send and receive block (pc = the staging chunk over
 * n elements), so host memory stays at three chunks whatever the blocks'
 * sizes, and a rank runs as many chunks as its longest block needs (the
 * gaps between receive blocks are never written).
 * Reduce, scatter and gather on device buffers are
 * PX_ERR_INVALID_ARGUMENT. fp16/bf16 all-reduce and reduce-scatter of
 * device buffers are staged and reduced in fp32 chunk by chunk, rounded
 * once, bit for bit the host path's (they do not take the IPC path).
 * Host temporaries (staging included) come from the registered pinned
 * allocator (cudaHostAlloc through the CUDA backend) when one is set.
 *
 * Between the ranks of one node, when the registered backend has the IPC
 * ops (px_kernels.h: reduce, ipc_handle, ipc_open ...: the CUDA table),
 * those five collectives go device to device through the peers' mapped
 * scratch rings instead (px_ipc.h; PX_IPC=0 turns it off; PX_IPC_PROTOCOL
 * chooses host waits or shared events for the ranks' ordering,
 * PX_IPC_CHUNK_BYTES the chunk), with the same
 * results bit for bit; staging stays for ranks on several nodes.
 * Where UCX itself moves CUDA memory (px_transport_cuda_memory),
 * point-to-point transfers of device buffers go to UCX unstaged; the
 * collectives across nodes still stage.
 * Process-wide; set before any collective, from the thread that runs them. */
#ifndef PX_DEVMEM_H
#define PX_DEVMEM_H

#include <stddef.h>
#include <stdint.h>

#include "px_comm_device.h"
#include "px_kernels.h"
#include "px_transport.h"

/* Registers the device backend: `k` (a kernel table whose memory is device
 * memory: its mem_copy_to_host / mem_copy_from_host / synchronize are used)
 * and `is_device` (1 when a pointer is that backend's device memory).
 * NULL, NULL unregisters. Borrowed; both must outlive every collective. */
void px_transport_set_device_memory(const px_kernel_ops_t *k, int (*is_device)(const void *p));

/* Registers what collectives that run on the device's own stream need
 * (px_comm_device.h: the GPU's identity, the compute stream, fences):
 * the NCCL engine below runs only where one is registered. NULL
 * unregisters. Borrowed; must outlive every collective. Set beside
 * px_transport_set_device_memory.
 *
 * The engine between GPUs (paths/nccl): PX_COLL_BACKEND chooses it for
 * collectives on device buffers: "px" never, "nccl" always, "auto" (the
 * default) where every rank of the communicator has a GPU of its own
 * (node name and PCI bus id, exchanged at the communicator's first
 * device collective) and NCCL loads and initialises on every rank.
 * libnccl.so.2 (or PX_NCCL_LIBRARY) is opened with dlopen at that first
 * collective, never at build time. Where auto does not take NCCL, the
 * paths above run the collective (IPC, staging) and each rank logs why;
 * where "nccl" cannot, every collective on device buffers of that
 * communicator fails with PX_ERR_UNAVAILABLE naming the reason (its host
 * collectives go on). A value other than these
 * three makes communicator creation fail with PX_ERR_INVALID_ARGUMENT
 * naming it. NCCL runs all-reduce, reduce-scatter, all-gather, broadcast
 * and all-to-all(-v) (grouped ncclSend/ncclRecv) of device buffers, on
 * the registered stream; send/recv stay on the paths above (tags and
 * nonblocking pairs have no faithful NCCL form on one stream). Its
 * results are NCCL's (its summation order; fp16/bf16 reduce in their own
 * precision); AVG is a SUM divided once on the device, as elsewhere. A
 * mismatch of arguments between ranks is not detected (no header
 * exchange): it runs into the deadline. A deadline, a dead peer, an abort
 * or a cancelled request abort the NCCL communicator (ncclCommAbort), so
 * nothing hangs; the error is the one the other paths give. */
void px_transport_set_comm_device(const px_comm_device_t *dev);

/* Which engine runs `comm`'s collectives on device buffers: 1 NCCL, 0
 * the transport's own paths, -1 not decided yet (no device collective so
 * far). `why` (len bytes, may be NULL) gets the reason in words ("NCCL
 * 2.28.3, every rank its own GPU", "PX_COLL_BACKEND=px", "rank 1: NCCL
 * library not loaded: ..."), the text the rank log shows. */
int px_comm_device_engine(const px_comm_t *comm, char *why, size_t len);

/* The device memory the transport itself holds, process-wide, in bytes:
 * the CUDA IPC scratch rings (px_ipc.h: (PX__IPC_NSLOT + 1) slots of
 * PX_IPC_SLOT_BYTES per communicator that set one up, until it is
 * destroyed) now (*current_p) and at the most (*peak_p). Engine memory
 * accounting shows them as the "comm" category (engine/memacct.h); the
 * plan predicts them (planner/plan.h px_plan_ipc_comms). Any thread. */
void px_transport_device_scratch(uint64_t *current_p, uint64_t *peak_p);

/* Default staging chunk of a device buffer's transfer (collectives and
 * point-to-point): 4 MiB
 * (large enough that a chunk's message runs at the link's bandwidth, small
 * enough that two per request stay cheap in pinned memory). */
#define PX_STAGE_CHUNK_DEFAULT ((size_t)4 << 20)

/* Sets the staging chunk in bytes (0: the default). Every rank of a job must
 * use the same value (the receiver posts the sender's chunk sizes, and the
 * collectives' chunks are cut from it). A collective's chunk is cut into
 * whole elements (at least one) and, where the algorithm works on one block
 * per rank, into n equal slices of at least one element each, so a chunk
 * may hold a little less (or, below n elements, more) than this. */
void px_transport_set_stage_chunk(size_t bytes);

/* Registers the allocator of the transport's host temporaries (staging
 * buffers included): `alloc` returns `bytes` of host memory (pinned: page-
 * locked, so device copies run at full speed and asynchronously) or NULL,
 * `release` frees it (NULL no-op). NULL, NULL: malloc/free. Set once,
 * before any communicator exists, and never changed while one lives (its
 * cached temporaries are freed with the allocator current at that time). */
void px_transport_set_pinned_memory(void *(*alloc)(size_t bytes), void (*release)(void *p));

#endif
