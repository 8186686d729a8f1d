/* px_transport.h: UCX transport, communicators and collectives.
 *
 * A px_transport_t owns one UCX context and one worker (one per rank
 * process). A px_comm_t is a group of ranks with endpoints to each peer,
 * built from an address table (the rendezvous result, from the daemon or the
 * standalone bootstrap). Endpoints to ranks on another node use UCX peer error
 * handling; endpoints on the same node do not (shared memory loses its speed
 * in peer mode: docs/notes/ucx-1.13.md), and a dead same-node peer is
 * caught by a pidfd of its process (opened at wire-up), the bootstrap's
 * watch fd, the daemon's abort, or the deadline.
 * Known UCX 1.13 limit: a same-node peer killed while this process is inside
 * a CMA copy from/to it makes UCX abort this process (unhandled transport
 * failure on a plain-mode endpoint is fatal in uct); PX_UCX_PEER_ERR_MODE=
 * always avoids it at the cost of tcp instead of shared memory (~4x slower).
 *
 * Threading: a transport and its communicators are used by one thread at a
 * time, except px_comm_abort(), which any thread (or a signal-safe path via
 * the watch fd) may call.
 *
 * Progress blocks on the worker's event fd (ucp_worker_arm + poll) instead
 * of spinning, so 4+ ranks run well on 2 cores.
 *
 * Deadlines: every blocking call takes `timeout_ms` (< 0: the communicator's
 * default, PX_COMM_TIMEOUT_MS). Errors name the peer rank in the log and in
 * px_comm_last_error(). */
#ifndef PX_TRANSPORT_H
#define PX_TRANSPORT_H

#include <stddef.h>
#include <stdint.h>

#include "px_dtype.h" /* px_dtype_t, px_redop_t, px_dtype_size */
#include "px_status.h"

typedef struct px_transport px_transport_t;
typedef struct px_comm px_comm_t;

/* The rendezvous result: every rank's UCX worker address and node name.
 * Owned by whoever filled it; release with px_addr_table_free(). */
typedef struct px_addr_table {
    int world_size;
    void **addrs;        /* addrs[r]: worker address bytes of rank r */
    size_t *addr_lens;   /* bytes */
    char **nodes;        /* nodes[r]: node name; same name = same machine */
} px_addr_table_t;

/* Allocates an empty table for `world_size` ranks (entries NULL). */
px_status_t px_addr_table_init(px_addr_table_t *table, int world_size);
/* Frees entries and arrays; leaves the struct zeroed. */
void px_addr_table_free(px_addr_table_t *table);

/* Creates the UCX context and worker (thread mode single, wakeup feature). */
px_status_t px_transport_create(px_transport_t **transport_p);
/* NULL is a no-op. Communicators must be destroyed first. */
void px_transport_destroy(px_transport_t *transport);
/* This worker's address; borrowed for the transport's life. */
px_status_t px_transport_address(px_transport_t *transport, const void **addr_p,
                                 size_t *len_p);
/* 1 when the UCX in use moves CUDA device memory itself (ucp_context_query:
 * memory_types has UCS_MEMORY_TYPE_CUDA, as a UCX built --with-cuda
 * reports; Debian's does not) and PX_UCX_CUDA is not 0; then point-to-point
 * transfers of device buffers post the device pointer to UCX instead of
 * staging it (GPUDirect RDMA across nodes). Every rank of a job must run
 * the same UCX (both ends of a transfer take the same path). 0 for NULL. */
int px_transport_cuda_memory(const px_transport_t *transport);

/* Builds the world communicator: `rank` is this process's rank in `table`,
 * `node` its node name. Connects endpoints to every other rank and checks
 * them with a first exchange (PX_CONNECT_TIMEOUT_MS) in which every rank
 * proves it holds the job's secret (PX_JOB_SECRET, "" when unset: an
 * HMAC-SHA256 of its wire-up message); a peer without it is refused, the
 * error names it, and creation fails with PX_ERR_INVALID_ARGUMENT on
 * every rank that saw it. `watch_fd` (or -1) is
 * a descriptor that becomes readable/hung-up when the job must abort (the
 * standalone bootstrap's socket): waits poll it beside the worker's event fd
 * and return PX_ERR_ABORTED (or PX_ERR_PEER_FAILURE naming the rank, when
 * the bootstrap says which one died). The table is copied. */
px_status_t px_comm_create_world(px_transport_t *transport, const px_addr_table_t *table,
                                 int rank, int watch_fd, px_comm_t **comm_p);

/* Watch fd records. Anything may write them to the watch fd: 8 bytes, a
 * big-endian uint32 kind then a big-endian int32 rank. A hang-up (EOF)
 * without a PX_WATCH_HUP_RANK record before it reads as PX_ERR_ABORTED; an
 * unknown kind too. The communicator reads the fd only inside its waits and
 * never closes it. */
#define PX_WATCH_DIED     1u /* `rank` died: waits return PX_ERR_PEER_FAILURE naming it */
#define PX_WATCH_HUP_RANK 2u /* a later hang-up of this fd means `rank` died */
#define PX_WATCH_ABORT    3u /* stop: waits return PX_ERR_ABORTED */
/* A world of one rank (this process) on `transport`, named `node` (NULL:
 * none): what px_comm_create_world makes from a one-entry table of this
 * worker's own address, for runs without a bootstrap. */
px_status_t px_comm_create_self(px_transport_t *transport, const char *node, px_comm_t **comm_p);
/* NULL is a no-op. Closes endpoints (flush if healthy, force if failed). */
void px_comm_destroy(px_comm_t *comm);

int px_comm_rank(const px_comm_t *comm);
int px_comm_size(const px_comm_t *comm);
/* Text of the last error on this communicator ("rank 2: peer failure ..."),
 * "" if none. Borrowed until the next call. */
const char *px_comm_last_error(const px_comm_t *comm);
/* The paths this rank's collectives on `comm` took so far, for buffers in
 * host memory (device 0) or in device memory (device 1): the names in the
 * order of the path table (px_path.h), comma-separated, "shm", "nccl",
 * "ipc", "stage", and "ucx" for the host algorithms over UCX (on device
 * buffers: UCX moving CUDA memory itself); "" when no such collective
 * left this rank yet (a collective a rank completes alone, on a group of
 * one or with nothing to move, counts for no path). Written into buf
 * (len bytes, always terminated when len > 0); returns the length the
 * whole text has, as snprintf. The exchanges that set the communicator
 * up count for none. Same thread as the communicator. */
int px_comm_paths(const px_comm_t *comm, int device, char *buf, size_t len);

/* Makes every pending and future operation on `comm` return PX_ERR_ABORTED.
 * Safe from any thread (writes to an eventfd the waits poll). */
void px_comm_abort(px_comm_t *comm, const char *reason);

/* This rank fails on its own (a bad argument, I/O, CUDA, memory, a
 * deadline): tells every rank of `comm`'s world, as MPI_Abort and
 * ncclCommAbort do, so that their pending and later waits on the world and
 * every split of it return PX_ERR_PEER_FAILURE naming this rank and
 * `reason` (borrowed for the call; at most 247 bytes are sent) within one
 * sleep slice, instead of running into their deadline. Waits at most
 * 200 ms for the notices to leave; afterwards `comm`'s world is failed
 * (px_comm_destroy closes without the goodbye exchange). Does nothing, and
 * returns 0, when the world already failed on a peer's death or an abort
 * (that news is spread at destroy) or when it was already called; 1 when
 * the notices went out. The thread using the communicator. */
int px_comm_abort_peers(px_comm_t *comm, const char *reason);

/* Tagged point-to-point, blocking with deadline. `bytes` may be 0. The tag
 * space is private to the communicator (collectives use their own bits).
 * Messages match by (sender, tag); a receive whose size differs from the
 * message's returns PX_ERR_MISMATCH naming the sender (the communicator stays
 * usable). px_send returns when the buffer may be reused (small messages:
 * once copied out; large ones: once the receiver has taken them). */
px_status_t px_send(px_comm_t *comm, int peer, uint32_t tag, const void *buf, size_t bytes,
                    int timeout_ms);
px_status_t px_recv(px_comm_t *comm, int peer, uint32_t tag, void *buf, size_t bytes,
                    int timeout_ms);

/* All-reduce of `count` elements (64-bit count; 0 allowed). sendbuf ==
 * recvbuf is in place. Every dtype and op of px_coll.h (which has the
 * nonblocking form and the algorithm choice: recursive doubling for small
 * messages, the chunked pipelined ring above). AVG divides the SUM by the
 * world size once. Every rank gets a bitwise-identical result.
 * Errors: PX_ERR_TIMEOUT, PX_ERR_PEER_FAILURE (naming the rank),
 * PX_ERR_ABORTED, PX_ERR_MISMATCH (peers passed another count/op/dtype). */
px_status_t px_allreduce(px_comm_t *comm, const void *sendbuf, void *recvbuf, uint64_t count,
                         px_dtype_t dtype, px_redop_t op, int timeout_ms);

/* Broadcast of `bytes` bytes from `root`. */
px_status_t px_broadcast(px_comm_t *comm, void *buf, size_t bytes, int root, int timeout_ms);

/* Barrier: returns once every rank entered it. */
px_status_t px_barrier(px_comm_t *comm, int timeout_ms);

#endif
