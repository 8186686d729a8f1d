/* px_ipc.h: collectives on device buffers between the ranks of one node
 * through device memory the peers map (CUDA IPC, as NCCL's P2P transport;
 * internal to the transport, px__ prefixed; ARCHITECTURE.md section 4: "GPU
 * buffers travel ... CUDA IPC between the GPUs of one node"). The path's
 * private header: the core reaches it through its entry in the table,
 * px__path_ipc (px_path.h), defined at the end of px_ipc.c.
 *
 * Life: the first collective on device buffers of a communicator (all
 * ranks call it at the same point, as every collective) runs the setup:
 * each rank allocates a scratch ring of PX__IPC_NSLOT slots of
 * PX_IPC_SLOT_BYTES in device memory, gets an IPC handle for it (kernel
 * table ipc_handle), the handles go round in one all-gather, every rank
 * maps its peers' rings (ipc_open) and one all-reduce (MIN) decides for
 * all: IPC is on only when every rank is on one node, has PX_IPC not 0, a
 * backend with the IPC ops (reduce, reduce_avg_finish, ipc_handle,
 * ipc_open, ipc_close) and opened every peer's ring; otherwise it is off on
 * every rank and device buffers are staged through host memory
 * (px_stage.c). Chunks are PX_IPC_CHUNK_BYTES (the smallest any rank
 * asks for; 0: the staging chunk) and at most a slot. With PX_IPC_PROTOCOL=event on every rank and a backend
 * with the event ops (reduce_multi, event_*, stream_wait_event), each rank
 * also shares an interprocess event in the same all-gather, and the ranks
 * order their device work by those events instead of host waits (px_ipc.c,
 * "doorbell"). The decision is kept for the communicator's life;
 * px__ipc_destroy (communicator destroy) unmaps and frees.
 *
 * Runs on the thread using the communicator. */
#ifndef PX_IPC_H
#define PX_IPC_H

#include <stdint.h>

#include "px_transport_int.h"

/* Slots of one rank's scratch ring: a chunk is written into slot i % 2
 * while the peers may still read chunk i - 1 from the other one. */
#define PX__IPC_NSLOT 2

/* Whether device-buffer collectives on `comm` take the IPC path: 1 or 0,
 * the same on every rank. The first call on a communicator is collective
 * (two blocking host collectives, each with `timeout_ms` (< 0: the
 * communicator's default; the calling collective's own timeout): every
 * rank must call it at the same point of its sequence of collectives);
 * later calls return the kept answer. A failure of those collectives is
 * the communicator's (sticky) failure; the answer is then 0. */
int px__ipc_ready(px_comm_t *comm, int timeout_ms);
/* Unmaps the peers' rings and frees this rank's; NULL-safe, idempotent. */
void px__ipc_destroy(px_comm_t *comm);

/* Make `req` (created by px__req_create: sequence number taken, header
 * exchange posted) run its collective through the peers' rings, chunk by
 * chunk; all buffers device memory, count > 0, comm size > 1,
 * px__ipc_ready(comm) true. Arguments as the public calls (elements).
 * Reductions sum every element in the order of the host algorithm: the
 * ring's (coll/ring.c) for reduce-scatter and for an all-reduce whose
 * `algo` (the one the host path picks for the whole buffer) is the ring,
 * recursive doubling's balanced tree (coll/rd.c; Rabenseifner's is the
 * same) otherwise, so the result is bit for bit the staged and the UCX
 * host path's. PX_ERR_NO_MEMORY; the caller discards req on error. */
px_status_t px__ipc_allreduce(px_request_t *req, const void *sendbuf, void *recvbuf,
                              uint64_t count, px_algo_t algo);
px_status_t px__ipc_reduce_scatter(px_request_t *req, const void *sendbuf, void *recvbuf,
                                   uint64_t recvcount);
px_status_t px__ipc_allgather(px_request_t *req, const void *sendbuf, void *recvbuf,
                              uint64_t sendcount);
px_status_t px__ipc_bcast(px_request_t *req, void *buf, uint64_t count);
px_status_t px__ipc_alltoall(px_request_t *req, const void *sendbuf, void *recvbuf,
                             uint64_t count);

/* The request ends with `status` (px_request.c's req_end): waits for the
 * device ops it issued (so the caller's buffers are free), and on a failure
 * turns the path off for the communicator (the ranks' rings may be in any
 * state; every rank sees the same failure, a mismatch or an abort, so all
 * stop using it). NULL-safe. */
void px__ipc_req_end(px_request_t *req, px_status_t status);
/* Frees the request's IPC state (req_free); NULL-safe. */
void px__ipc_req_free(struct px__ipcreq *ir);

#endif
