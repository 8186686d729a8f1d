/* px_coll.h: the collectives, blocking and nonblocking, on any communicator.
 *
 * Semantics follow NCCL / MPI:
 *  - counts and displacements are in ELEMENTS of `dtype`, 64-bit;
 *  - reduce_scatter: sendbuf holds size*recvcount elements, rank r receives
 *    the reduced block r (recvcount elements). In place (NCCL): recvbuf ==
 *    (char *)sendbuf + rank * recvcount * dtype size; then the other blocks
 *    of the buffer are used for partial sums and hold unspecified values
 *    afterwards (no extra memory is taken). Out of place, sendbuf is only
 *    read.
 *  - allgather: each rank contributes sendcount elements, recvbuf holds
 *    size*sendcount ordered by rank. In place: sendbuf == (char *)recvbuf +
 *    rank * sendcount * dtype size.
 *  - allreduce / reduce: sendbuf == recvbuf is in place; reduce's recvbuf
 *    matters on the root only.
 *  - scatter / gather: the root's buffer holds size*count elements in rank
 *    order; other ranks' root-side buffer argument is ignored (may be NULL).
 *  - alltoall: count elements to and from every rank (blocks in rank order).
 *    alltoallv: per-peer counts and displacements (elements), as MPI; each
 *    rank's sendcounts[p] must equal rank p's recvcounts[r] (checked: the
 *    header to p carries it). No in-place form (sendbuf != recvbuf).
 *  - fp16 / bf16 reduce in fp32 and round once (round to nearest even);
 *    integer AVG truncates toward zero; AVG of floats divides the SUM once
 *    (x / n, exactly as IEEE division rounds it). Integer SUM/PROD wrap
 *    (two's complement), and integer AVG divides that wrapped sum, as NCCL.
 *  - every rank ends with bitwise-identical results for allreduce/allgather.
 *  - count 0 is a valid collective (it still synchronises headers).
 *
 * Algorithms (PX_ALGO_AUTO picks by message size and world size; the
 * environment variable PX_ALGO_<COLL> (e.g. PX_ALGO_ALLREDUCE=ring) overrides
 * auto, and a per-call hint in px_coll_opts_t overrides both): ring
 * (bandwidth-optimal, chunked and pipelined), recursive doubling and
 * Rabenseifner halving-doubling (latency-optimal; non-power-of-two sizes
 * handled), binomial tree (broadcast, reduce, scatter, gather), pairwise
 * exchange (all-to-all). Reductions go through kernels/px_reduce.h.
 * Implemented: all-reduce ring / rabenseifner / rd, broadcast tree / ring
 * (scatter + ring all-gather), all-to-all pairwise / linear; reduce is a
 * binomial tree, all-gather and reduce-scatter the ring, scatter / gather
 * linear. A hint a collective has no implementation for falls back to auto.
 * Communicators whose ranks are all on one host move all-reduce,
 * reduce-scatter, all-gather, all-to-all and broadcast of host buffers
 * (from PX_SHM_MIN_BYTES, 1 KiB, up; not fp16/bf16 reductions) through one
 * shared-memory segment instead (px_shm.h; PX_SHM=0 turns it off); results
 * are the same on every rank, reductions in rank order 0..n-1.
 *
 * Nonblocking: every `px_X_start` checks its arguments, queues the
 * collective and returns a request at once; the request progresses whenever
 * the communicator is progressed (px_test, px_wait, any blocking call on the
 * same transport). Concurrent collectives on one communicator and
 * collectives on different communicators never see each other's messages
 * (tags carry communicator id and sequence number); starts must be issued in
 * the same order on every rank of a communicator, as in MPI. Buffers are
 * borrowed until the request completes. px_comm_destroy cancels and frees
 * the communicator's pending requests (their handles become invalid).
 * Waiting never spins: it sleeps on the UCX worker's event fd (PX_SPIN_US
 * > 0 polls that long first; -1 polls 200 us only while the job's ranks on
 * this node are no more than its CPUs and the load average is not above
 * them; off by default: on the shared 2-core test machine, loaded by other
 * processes, spinning made 2-rank small all-reduces faster for a few
 * milliseconds and then 3-30x slower, as the scheduler held spinners off).
 *
 * Failure semantics: each collective's first message carries (sequence
 * number, op, dtype, count); disagreement gives PX_ERR_MISMATCH on every rank
 * within the deadline. All-reduces up to 32 KiB (recursive doubling) send
 * that header in front of their data instead of beside it; a rank that
 * finds a mismatch tells every rank it has not sent to yet, so the others
 * fail at once too, naming both values. Collectives (all-to-all-v excepted) move data while
 * the headers travel, so after a mismatch their output buffer (and the
 * input of an in-place call) may hold partial data, never past the count
 * the rank passed; all-to-all-v checks first and leaves it untouched. As
 * with MPI and NCCL, treat a failed collective's output as undefined. A dead
 * peer gives PX_ERR_PEER_FAILURE naming it on
 * every survivor; px_comm_abort makes every pending request return
 * PX_ERR_ABORTED. Buffers are never touched after a request has completed or
 * failed. */
#ifndef PX_COLL_H
#define PX_COLL_H

#include <stdint.h>

#include "px_transport.h"

/* The largest buffer one collective argument may describe, in bytes: 2^47
 * (128 TiB), the user address space of x86-64 and AArch64 with 48-bit
 * virtual addresses. A count (times the element size, times the world size
 * for the buffers that hold a block per rank) beyond it cannot describe
 * real memory (a count of -1 or 2^60 with a 1-byte type): every collective
 * rejects it with PX_ERR_INVALID_ARGUMENT on the calling rank before it
 * takes a sequence number, so the communicator stays usable. A root
 * outside [0, size) is rejected the same way. */
#define PX_COLL_MAX_BYTES (UINT64_C(1) << 47)

typedef enum px_algo {
    PX_ALGO_AUTO = 0,
    PX_ALGO_RING,
    PX_ALGO_RECURSIVE_DOUBLING,
    PX_ALGO_RABENSEIFNER,
    PX_ALGO_TREE,          /* binomial */
    PX_ALGO_PAIRWISE,
    PX_ALGO_LINEAR,        /* direct sends to/from every rank */
} px_algo_t;

/* Per-call options; NULL means all defaults. */
typedef struct px_coll_opts {
    px_algo_t algo;        /* hint; PX_ALGO_AUTO by default */
    int timeout_ms;        /* < 0 or 0: communicator default (PX_COMM_TIMEOUT_MS) */
} px_coll_opts_t;

typedef struct px_request px_request_t;

/* Progress `req` without blocking; *done_p = 1 once it finished (then the
 * request's status is returned and the request is freed). A failed request
 * returns its error and is freed. */
px_status_t px_test(px_request_t *req, int *done_p);
/* Blocks until `req` finishes or `timeout_ms` passes (< 0: the request's own
 * deadline). Frees the request on every return except PX_ERR_TIMEOUT caused
 * by a `timeout_ms` shorter than the request's deadline (then it stays
 * valid: wait again or px_request_cancel it). */
px_status_t px_wait(px_request_t *req, int timeout_ms);
/* Waits for all `n` requests (each freed); returns the first error. */
px_status_t px_wait_all(px_request_t **reqs, int n, int timeout_ms);
/* Advances every pending request of every communicator on `comm`'s worker
 * without blocking (no sleep, bounded work: it returns when nothing more
 * moves), and returns at once when none is pending. The engine calls it
 * between kernels so that nonblocking collectives run while it computes
 * (the overlap mechanism; px_request.c says why not a thread).
 * Failures are recorded in the requests and returned by their px_test /
 * px_wait; this call reports nothing. NULL: no-op. */
void px_progress(px_comm_t *comm);
/* Cancels a pending request (its peers see the collective fail by their
 * deadline); frees it. NULL no-op. */
void px_request_cancel(px_request_t *req);

/* --- nonblocking starts; *req_p written only on PX_OK ------------------- */
px_status_t px_allreduce_start(px_comm_t *comm, const void *sendbuf, void *recvbuf,
                               uint64_t count, px_dtype_t dtype, px_redop_t op,
                               const px_coll_opts_t *opts, px_request_t **req_p);
px_status_t px_reduce_scatter_start(px_comm_t *comm, const void *sendbuf, void *recvbuf,
                                    uint64_t recvcount, px_dtype_t dtype, px_redop_t op,
                                    const px_coll_opts_t *opts, px_request_t **req_p);
px_status_t px_allgather_start(px_comm_t *comm, const void *sendbuf, void *recvbuf,
                               uint64_t sendcount, px_dtype_t dtype,
                               const px_coll_opts_t *opts, px_request_t **req_p);
px_status_t px_bcast_start(px_comm_t *comm, void *buf, uint64_t count, px_dtype_t dtype,
                           int root, const px_coll_opts_t *opts, px_request_t **req_p);
px_status_t px_reduce_start(px_comm_t *comm, const void *sendbuf, void *recvbuf, uint64_t count,
                            px_dtype_t dtype, px_redop_t op, int root,
                            const px_coll_opts_t *opts, px_request_t **req_p);
px_status_t px_scatter_start(px_comm_t *comm, const void *sendbuf, void *recvbuf, uint64_t count,
                             px_dtype_t dtype, int root, const px_coll_opts_t *opts,
                             px_request_t **req_p);
px_status_t px_gather_start(px_comm_t *comm, const void *sendbuf, void *recvbuf, uint64_t count,
                            px_dtype_t dtype, int root, const px_coll_opts_t *opts,
                            px_request_t **req_p);
px_status_t px_alltoall_start(px_comm_t *comm, const void *sendbuf, void *recvbuf,
                              uint64_t count, px_dtype_t dtype, const px_coll_opts_t *opts,
                              px_request_t **req_p);
px_status_t px_alltoallv_start(px_comm_t *comm, const void *sendbuf, const uint64_t *sendcounts,
                               const uint64_t *sdispls, void *recvbuf, const uint64_t *recvcounts,
                               const uint64_t *rdispls, px_dtype_t dtype,
                               const px_coll_opts_t *opts, px_request_t **req_p);
px_status_t px_barrier_start(px_comm_t *comm, const px_coll_opts_t *opts, px_request_t **req_p);
px_status_t px_send_start(px_comm_t *comm, int peer, uint32_t tag, const void *buf,
                          uint64_t bytes, const px_coll_opts_t *opts, px_request_t **req_p);
px_status_t px_recv_start(px_comm_t *comm, int peer, uint32_t tag, void *buf, uint64_t bytes,
                          const px_coll_opts_t *opts, px_request_t **req_p);

/* --- blocking forms: start + wait --------------------------------------- */
/* (px_allreduce, px_broadcast (bytes), px_barrier, px_send, px_recv are in
 * px_transport.h and keep their signatures.) */
px_status_t px_reduce_scatter(px_comm_t *comm, const void *sendbuf, void *recvbuf,
                              uint64_t recvcount, px_dtype_t dtype, px_redop_t op,
                              const px_coll_opts_t *opts);
px_status_t px_allgather(px_comm_t *comm, const void *sendbuf, void *recvbuf, uint64_t sendcount,
                         px_dtype_t dtype, const px_coll_opts_t *opts);
px_status_t px_bcast(px_comm_t *comm, void *buf, uint64_t count, px_dtype_t dtype, int root,
                     const px_coll_opts_t *opts);
px_status_t px_reduce(px_comm_t *comm, const void *sendbuf, void *recvbuf, uint64_t count,
                      px_dtype_t dtype, px_redop_t op, int root, const px_coll_opts_t *opts);
px_status_t px_scatter(px_comm_t *comm, const void *sendbuf, void *recvbuf, uint64_t count,
                       px_dtype_t dtype, int root, const px_coll_opts_t *opts);
px_status_t px_gather(px_comm_t *comm, const void *sendbuf, void *recvbuf, uint64_t count,
                      px_dtype_t dtype, int root, const px_coll_opts_t *opts);
px_status_t px_alltoall(px_comm_t *comm, const void *sendbuf, void *recvbuf, uint64_t count,
                        px_dtype_t dtype, const px_coll_opts_t *opts);
px_status_t px_alltoallv(px_comm_t *comm, const void *sendbuf, const uint64_t *sendcounts,
                         const uint64_t *sdispls, void *recvbuf, const uint64_t *recvcounts,
                         const uint64_t *rdispls, px_dtype_t dtype, const px_coll_opts_t *opts);
/* px_allreduce with options (algorithm hint). */
px_status_t px_allreduce_opts(px_comm_t *comm, const void *sendbuf, void *recvbuf,
                              uint64_t count, px_dtype_t dtype, px_redop_t op,
                              const px_coll_opts_t *opts);

/* --- sub-communicators --------------------------------------------------- */
#define PX_COLOR_UNDEFINED (-1)
/* MPI_Comm_split: collective over `comm`; ranks with the same color form a
 * new communicator ordered by (key, old rank); color PX_COLOR_UNDEFINED gets
 * *newcomm_p = NULL. The new communicator shares the transport and
 * endpoints' worker but has its own id (tag space), sequence numbers and
 * deadline. Destroy it with px_comm_destroy before its parent. */
px_status_t px_comm_split(px_comm_t *comm, int color, int key, px_comm_t **newcomm_p);
/* The parent-communicator (world) rank of `rank` in `comm`. */
int px_comm_world_rank(const px_comm_t *comm, int rank);
/* Sets the bytes one rank stages per step of `comm`'s shared-memory
 * collectives (all but all-to-all; PX_SHM_SLOT_BYTES for every other
 * communicator): a communicator whose collectives are large and overlapped
 * with compute (ZeRO's reduce-scatters and all-gathers) takes fewer steps,
 * each of which needs every peer inside the transport once. Collective
 * over `comm`, with no request of it pending; rank 0's value holds. The
 * segment grows to 3 x size x slot_bytes (shared, host memory). A
 * communicator without the shared-memory path: PX_OK, no change.
 * PX_ERR_INVALID_ARGUMENT naming the value: slot_bytes outside 4096..64
 * MiB, or a request pending. */
px_status_t px_comm_set_shm_slot(px_comm_t *comm, uint64_t slot_bytes);

/* Buffers registered with a communicator's shared-memory path
 * (paths/shm/px_shm_reg.h): an in-place all-reduce over one reads the
 * peers' buffers where they lie instead of staging every byte through the
 * segment. */
/* Collective over `comm` (every rank calls it, same `bytes`, in the same
 * order as its other collectives): `want` says whether this rank can use
 * host memory there (0 on a device backend); the ranks agree (MIN over
 * want, PX_SHM_REG and the mapping's success on every rank). On agreement
 * *ptr_p is this rank's zero-filled part of a new region of `bytes` (page
 * aligned; the caller owns it: px_shm_free); otherwise *ptr_p is NULL on
 * every rank and the caller allocates as usual (no shared-memory path on
 * comm: several nodes or PX_SHM=0, PX_SHM_REG=0 on a rank, want 0 on a
 * rank, or shm_open/mmap failed on a rank). Returns the status of the
 * agreement's collectives (*ptr_p then NULL). bytes 0: *ptr_p NULL, no
 * collective. */
px_status_t px_shm_alloc(px_comm_t *comm, size_t bytes, int want, void **ptr_p);

/* Unmaps the region whose part `ptr` is (a px_shm_alloc result; NULL:
 * no-op). Local, no collective: the peers keep their own mappings of the
 * pages. Must not be called while a collective over ptr is in flight. A
 * pointer px_shm_alloc did not return aborts. */
void px_shm_free(void *ptr);

/* Name of an algorithm / dtype / op ("ring", "bf16", "sum"); static. And the
 * parsers for them (PX_ERR_INVALID_ARGUMENT on an unknown name). */
const char *px_algo_name(px_algo_t algo);
const char *px_dtype_name(px_dtype_t dtype);
const char *px_redop_name(px_redop_t op);
px_status_t px_algo_parse(const char *name, px_algo_t *algo_p);
px_status_t px_dtype_parse(const char *name, px_dtype_t *dtype_p);
px_status_t px_redop_parse(const char *name, px_redop_t *op_p);

#endif
