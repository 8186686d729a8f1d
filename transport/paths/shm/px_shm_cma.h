/* px_shm_cma.h: the single-copy variant of the shared-memory path
 * (px_shm.h) for the data-movement collectives of one host's ranks:
 * all-gather, all-to-all and broadcast. Internal to the transport.
 *
 * Instead of copying its data into its staging buffer of the segment for the
 * peers to copy out (two copies), each rank publishes its buffer's address
 * through the segment, and every peer copies its part straight from that
 * buffer into its own destination with process_vm_readv (Linux cross-memory
 * attach, CMA: one copy, done by the kernel), as Open MPI's vader/sm does
 * for large messages. The phases and the waits are px_shm.c's: the owner
 * publishes the address (phase 1), readers read and publish again (phase 2),
 * and an owner returns only after every reader's phase 2 (buffer lifetime).
 *
 * Permission: process_vm_readv needs ptrace rights on the peer
 * (PTRACE_MODE_ATTACH_REALCREDS: same user, dumpable, and with Yama's
 * ptrace_scope=1 the peer must have named us its tracer). With ptrace_scope
 * 1 each rank calls prctl(PR_SET_PTRACER, PR_SET_PTRACER_ANY) first (which
 * gives back the classic same-user rule; Open MPI's vader does the same).
 * Whether it works is probed collectively when the segment is set up: every
 * rank reads a word from every peer, and the communicator uses the single
 * copy only when all reads on all ranks succeeded (the same answer on every
 * rank); otherwise it keeps the two-copy path.
 *
 * Which collectives (measured, px_shm_cma.c's px__cma_wants): it depends on
 * the CPU. On the 2-core EPYC VM we measured on a read by process_vm_readv
 * cost about two memcpys (it pins every page and copies without
 * non-temporal stores: 8.7 vs 24 GB/s at 1 MiB, 3.1 vs 5.8 GB/s at 16 MiB,
 * one reader, idle process), so one copy through the kernel moved bytes no
 * cheaper than two memcpys; what it saves is the staging's phases (one
 * wait per 256 KiB slot) and, in an all-to-all, the copy of n - 1 blocks
 * in. CPU time per collective summed over the ranks (best of 2, load
 * 13-16): all-to-all 4 ranks 1.04-1.46x less with the single copy (1-16
 * MiB), 2 ranks 0.96-1.07x; all-gather 0.76-0.95x, broadcast 0.80-1.05x;
 * wall time against Open MPI 0.96-1.07x either way at 4-16 MiB, better
 * with two copies at 1 MiB: so there it stays off. On the 2-vCPU Xeon
 * (Sapphire Rapids, KVM) a read by process_vm_readv moves 0.55-0.95 of
 * memcpy's bytes per second (the same one-process test, load 3.7: 1 MiB
 * 15 vs 28 GB/s, 4 MiB 9.0 vs 11.1, 16 MiB 7.3 vs 7.8), so the single copy
 * costs less than the two; and Open MPI's vader, which reads with CMA,
 * was 1.5-2x faster than our two copies from 64 KiB up (and 1.3-1.7x
 * slower than them with btl_vader_single_copy_mechanism=none). Best of 3
 * against Open MPI in the same runs (load 1.4-2.0), two copies -> single
 * copy, 2 ranks: all-gather 256 KiB 16.6 -> 8.9 us (Open MPI 9.1), 1 MiB
 * 77 -> 41-45 (52), 16 MiB 1488 -> 1312 (1473); all-to-all 1 MiB 98 -> 42-44
 * (52), 16 MiB 1822 -> 1339 (1638); 4 ranks, all-to-all 1 MiB 257 -> 186
 * (216). So by default (PX_SHM_CMA=-1) all-gather and all-to-all take it on
 * Intel CPUs (px__cma_auto_kinds), from 32 KiB per peer's block
 * (PX_SHM_CMA_MIN_BYTES=-1: px_shm_cma.c's AUTO_BLOCK_BYTES); broadcast was
 * not measured there and stays two-copy.
 *
 * Knobs (common/px_env.c): PX_SHM_CMA (-1, the default: auto as above; 0:
 * the two-copy path only; 1: all-to-all; 2: all-gather, all-to-all and
 * broadcast, for tests and measurement), PX_SHM_CMA_MIN_BYTES (the smallest
 * collective, in bytes of its largest buffer, that takes the single copy;
 * -1, the default: 32 KiB per block). Rank 0's PX_SHM_CMA_MIN_BYTES holds
 * for the communicator; only the kinds every rank's PX_SHM_CMA allows take
 * it (0 on any rank: off for all). */
#ifndef PX_SHM_CMA_H
#define PX_SHM_CMA_H

#include <stddef.h>
#include <stdint.h>

#include "px_transport_int.h"

typedef struct px__cma px__cma_t;

/* Bytes a rank's descriptor (sequence number and buffer address) takes at
 * the start of its staging buffer of the segment. */
#define PX__CMA_DESC_BYTES 16

/* Collective over `comm` (every rank calls it from px__shm_setup, after the
 * segment is mapped and before comm->shm is set): exchanges pids over UCX,
 * probes process_vm_readv on every peer and agrees. *cma_p: the single-copy
 * state (the caller owns it: px__cma_destroy), or NULL where it is off
 * (PX_SHM_CMA=0 on any rank, or a probe read failed on any rank). Returns
 * the status of the UCX collectives (a failure there is the communicator's
 * failure; *cma_p is then NULL). */
px_status_t px__cma_setup(px_comm_t *comm, px__cma_t **cma_p);
/* The kinds the single copy takes by default (PX_SHM_CMA=-1) on this
 * machine, as a mask of 1 << PX__COLL_*: all-gather and all-to-all on
 * Intel x86 CPUs (cpuid's vendor GenuineIntel), none elsewhere (see
 * "Which collectives" above). */
unsigned px__cma_auto_kinds(void);
/* Frees the state; NULL-safe. */
void px__cma_destroy(px__cma_t *cma);

/* Whether a collective of kind PX__COLL_* whose largest buffer is `bytes`
 * takes the single copy: a kind every rank's PX_SHM_CMA allows, from rank
 * 0's PX_SHM_CMA_MIN_BYTES up (-1: from 32 KiB per peer's block, bytes / n;
 * a broadcast's block is its buffer). The same answer on every rank for the
 * same arguments. NULL cma: 0. */
int px__cma_wants(const px__cma_t *cma, int kind, uint64_t bytes);

/* Writes this rank's descriptor for collective `seq` into `desc` (its
 * staging buffer of the segment, PX__CMA_DESC_BYTES): `addr` is the buffer
 * the peers read (all-gather: the send buffer, count elements; all-to-all:
 * the send buffer, n blocks of count; broadcast: the root's buffer). The
 * caller publishes it afterwards (a seq_cst store orders it). */
void px__cma_post(void *desc, uint32_t seq, const void *addr);

/* A read that failed while its owner's process lived (EFAULT: the owner
 * left the collective after an error of its own, or published a bad
 * buffer): reported only if the collective otherwise completes. */
typedef struct px__cma_bad {
    int peer;            /* comm rank, -1 none */
    int err;             /* errno */
    int gone;            /* comm rank whose process was gone (ESRCH), -1 none: when
                          * this rank leaves, its readers name that rank (px_shm.c) */
} px__cma_bad_t;

/* This rank's reads of collective `seq` once every rank published its
 * descriptor: rank p's descriptor is at desc0 + p * desc_stride. kind,
 * dst, count (elements as px__shm_start takes them), esz (bytes per
 * element), root (broadcast) as the collective's; this rank's own block of
 * an all-gather or all-to-all is not copied here (px_shm.c copies it while
 * the peers publish). Peers are read starting
 * at rank me + 1 (each rank at a different peer). Returns PX_OK;
 * PX_ERR_PEER_FAILURE naming the peer when its process is gone (ESRCH), or
 * the communicator's failure when one is known (pidfd, watch fd);
 * PX_ERR_MISMATCH when a descriptor is not for `seq`. Any other failed read
 * goes into *bad_p (initialised by the caller to peer -1, gone -1), and the caller
 * goes on to the phase that tells owners we are done: if that wait
 * succeeds, px__cma_bad_status gives the error. */
px_status_t px__cma_read(px_comm_t *comm, const px__cma_t *cma, int kind, uint32_t seq,
                         const char *desc0, size_t desc_stride, char *dst,
                         uint64_t count, size_t esz, int root, px__cma_bad_t *bad_p);
/* Test hook (0 in production; tests/transport/test_shm.c sets it on one
 * rank): milliseconds each single-copy read section of this process sleeps
 * after it announced its reads and before it makes them, so that a test can
 * end the owner's request while this rank is reading (px_shm.c, "Leaving a
 * single-copy collective early"). */
extern volatile int px__cma_test_read_delay_ms;

/* PX_OK when *bad holds no failure, else PX_ERR_INTERNAL naming the rank
 * and errno (set as the communicator's last error). */
px_status_t px__cma_bad_status(px_comm_t *comm, const px__cma_bad_t *bad);

#endif
