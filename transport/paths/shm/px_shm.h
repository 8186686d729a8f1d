/* px_shm.h: the shared-memory path of the collectives for communicators
 * whose ranks all run on one host (internal to the transport; px__
 * prefixed; the path's private header: the core reaches it through its
 * entry in the table, px__path_shm (px_path.h), defined at the end of
 * px_shm.c). The CPU analogue of NCCL's SHM transport and of Open MPI's
 * vader/sm: instead of UCX messages, every rank copies its part into its
 * own slot of one POSIX shared-memory segment and reads the others' slots.
 *
 * Life: px__shm_setup at communicator creation (collective, over UCX, with
 * the communicator's deadline), px__shm_destroy at destroy. A communicator
 * without the segment (ranks on several hosts, PX_SHM=0, any setup
 * failure on any rank) has comm->shm == NULL and never calls the rest.
 *
 * Knobs (common/px_env.c): PX_SHM (1 on, 0 off), PX_SHM_MIN_BYTES (the
 * smallest collective, in bytes of its largest buffer, that takes this
 * path), PX_SHM_SLOT_BYTES (bytes one rank stages per pipeline step),
 * PX_SHM_A2A_SLOT_BYTES (the same for all-to-all, whose step sends 1/n of
 * it to each rank; the segment holds three buffers of the larger per
 * rank). Rank 0's PX_SHM_MIN_BYTES, PX_SHM_SLOT_BYTES and
 * PX_SHM_A2A_SLOT_BYTES hold for the whole communicator (sent with the
 * segment's name), so every rank picks the same path for the same call.
 * px_comm_set_shm_slot (px__shm_reslot) replaces the slot size of one
 * communicator afterwards (a new segment; rank 0's value again). */
#ifndef PX_SHM_H
#define PX_SHM_H

#include <stdint.h>

#include "px_transport_int.h"

typedef struct px__shm px__shm_t;

/* Collective over `comm` (its ranks must all call it right after creating
 * it, before any other collective): when every rank of `comm` is on one
 * node, PX_SHM is not 0 on any rank and the segment could be created and
 * mapped by all, sets comm->shm; otherwise leaves it NULL. Returns the
 * status of the UCX collectives it ran (a failure there is the
 * communicator's failure; comm->shm stays NULL). The segment's name is
 * unlinked before this returns on every path, so nothing is left in
 * /dev/shm whatever happens later (a crash included). */
px_status_t px__shm_setup(px_comm_t *comm);
/* px_comm_set_shm_slot (px_coll.h): collective over `comm`; with a
 * segment (and the path not turned off) maps a new one whose staging
 * buffers hold rank 0's `slot_bytes` (rounded up to 4096) and unmaps the
 * old; without one, PX_OK and nothing changes. PX_ERR_INVALID_ARGUMENT
 * (logged, naming the value) for a size outside 4096..64 MiB or a request
 * of `comm` still pending (every rank checks the same things, so every
 * rank returns before any collective). A failed setup of the new segment
 * leaves comm->shm NULL (the collectives take UCX) and returns the status
 * of its UCX collectives, as px__shm_setup. */
px_status_t px__shm_reslot(px_comm_t *comm, uint64_t slot_bytes);
/* Unmaps the segment; NULL-safe; comm->shm becomes NULL. */
void px__shm_destroy(px_comm_t *comm);

/* Whether a host-buffer collective of kind PX__COLL_* whose largest buffer
 * is `bytes` (bytes of the buffer holding every rank's data) takes the
 * shared-memory path on `comm`. The same arguments give the same answer on
 * every rank (a mismatch of counts may give different answers: then the
 * header ring below still names it). */
int px__shm_wants(const px_comm_t *comm, int kind, uint64_t bytes);

/* Starts a shared-memory collective: PX__COLL_ALLREDUCE (count elements,
 * src -> dst, in place allowed), PX__COLL_ALLGATHER (count = sendcount;
 * dst holds size*count), PX__COLL_REDUCE_SCATTER (count = recvcount; src
 * holds size*count; in place allowed as px_coll.h says), PX__COLL_ALLTOALL
 * (count per peer; src != dst) or PX__COLL_BCAST (dst is the buffer, src
 * ignored). count > 0, host buffers, dtype not fp16/bf16 for reductions.
 * Takes the next sequence number as every collective does and writes this
 * rank's header into the segment's header ring. The request advances
 * through req->advance like any other (px_test / px_wait / px_progress);
 * the caller's buffers are borrowed until it completes. */
px_status_t px__shm_start(px_comm_t *comm, int kind, const void *src, void *dst, uint64_t count,
                          px_dtype_t dtype, px_redop_t op, int root, const px_coll_opts_t *opts,
                          px_request_t **req_p);

/* Writes the header of a collective that runs over UCX into the segment's
 * header ring (a no-op without a segment), so that a rank that took the
 * shared-memory path for the same sequence number can name a mismatch. */
void px__shm_note(px_comm_t *comm, uint32_t seq, int kind, px_dtype_t dtype, int op, int root,
                  uint64_t count);
/* For a UCX-path request still in its header stage: PX_ERR_MISMATCH (every
 * rank's error names both values) when a peer's header for the same
 * sequence number in the ring disagrees with ours, else PX_OK. */
px_status_t px__shm_ring_check(px_request_t *req);
/* After a mismatch or a cancelled shared-memory collective the ranks'
 * counters may disagree: the communicator stops using the path (every rank
 * sees the mismatch, so every rank stops). */
void px__shm_off(px_comm_t *comm);
/* The px__sleep hook: when a pending shared-memory collective of any
 * communicator on comm's worker is waiting on a peer's counter, sleeps on
 * that futex word (never longer than `timeout_ms`, and in slices of a few
 * ms so that pidfds, the watch fd and UCX requests are looked at again)
 * and returns 1; else returns 0 (the caller polls its fds). */
int px__shm_sleep(px_comm_t *comm, int timeout_ms);
/* Most bytes of rank 0's data px__shm_segment broadcasts with the name. */
#define PX__SHM_SEG_EXTRA_MAX 64
/* Creates and agrees on one named shared-memory segment, collectively over
 * `comm` (every rank calls it, in the same order): the ranks first agree
 * that every one `want`s it (MIN), then rank 0 creates a unique name
 * ("/PREFIX-pid-comm-generation-random", O_EXCL, 4 tries), sizes it to
 * *bytes_p and maps it, and broadcasts the name, its size and `extra`
 * (extra_len bytes, at most PX__SHM_SEG_EXTRA_MAX; may be 0), which every
 * other rank takes (*extra becomes rank 0's, and *bytes_p too with
 * `adopt_bytes`; without it a rank whose *bytes_p differs from rank 0's
 * fails the size check, and so does every rank) before it opens and maps
 * the segment (its size checked against *bytes_p); at last every rank agrees that
 * every one mapped it and that its `local_ok` holds. The name is unlinked
 * before return on every path (nothing is left in /dev/shm). *base_p: the
 * mapping (*bytes_p bytes, the caller's to munmap), or NULL where any rank
 * did not want it or failed (each failure logs a warning naming the
 * segment, ending with `fallback`: what the caller does instead); returns
 * the collectives' failure, or PX_OK (also when *base_p is NULL). */
px_status_t px__shm_segment(px_comm_t *comm, int want, const char *prefix, const char *fallback,
                            size_t *bytes_p, int adopt_bytes, void *extra, size_t extra_len,
                            int local_ok, void **base_p);
/* The auto spin's back-off (PX_SHM_SPIN_US=-1): a spin that runs out
 * (the peer did not publish within it: it is off a core, or slow) costs
 * its whole bound (and held the core the peer may need), so after a miss the next
 * `next` waits (16, doubling on every further miss up to 1024; a hit
 * resets it) take the sched_yield window instead. Measured
 * (2 ranks, other engineers' load 4-13 on 2 cores): the 50 us spin then
 * caught 1 wait in 100-200 and 4 KiB all-to-all ran at 0.01-0.03 GB/s
 * against 0.6 in the yield window; the 1-minute load average
 * (px__spin_allowed) misses such load below its threshold. Zeroed: spin. */
typedef struct px__spin_backoff {
    uint32_t skip; /* waits still to take without spinning */
    uint32_t next; /* the skip the next miss sets (0: no miss since the last hit) */
} px__spin_backoff_t;
#define PX__SPIN_BACKOFF_MIN 16u
#define PX__SPIN_BACKOFF_MAX 1024u
/* 1 when this wait may spin, else 0 (and one skipped wait is counted). */
int px__spin_backoff_try(px__spin_backoff_t *b);
/* Notes how a spin ended: `hit` 1 when the peer published within it. */
void px__spin_backoff_note(px__spin_backoff_t *b, int hit);
/* Frees a shared-memory request (req->shm set; called by the request's
 * free once it is unlinked): the request and its state are one
 * allocation, which the communicator keeps for its next px__shm_start
 * while it holds none (a blocking small collective then allocates
 * nothing), else frees. */
void px__shm_req_free(px_request_t *req);
/* Whether a started request took the single-copy variant (px_shm_cma.h). */
int px__shm_single_copy(const px_request_t *req);
/* The comm rank a pending shared-memory request waits for, or -1. */
int px__shm_waiting_for(const px_request_t *req);

#endif
