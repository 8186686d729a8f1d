/* px_shm_reg.h: buffers registered once with a communicator's
 * shared-memory path and reused, so that an in-place all-reduce over one
 * reads the peers' buffers where they lie instead of staging every byte
 * through the segment's slots (px_shm.h).
 *
 * A registered buffer is one rank's part of a region every rank of the
 * communicator maps: the same number of bytes on every rank, rank p's part
 * at the same place in everyone's mapping, so a buffer offset means the
 * same bytes of the gradient on every rank. The engine allocates its
 * stage-0 gradients there (engine/zero.c). See px_shm_reg.c for the
 * algorithm and its barrier rules.
 *
 * The public calls, px_shm_alloc / px_shm_free, are declared in px_coll.h;
 * the px__ functions here are the hooks the shared-memory collectives
 * (px_shm.c) call. */
#ifndef PX_SHM_REG_H
#define PX_SHM_REG_H

#include <stddef.h>
#include <stdint.h>

#include "px_dtype.h"
#include "px_status.h"
#include "px_transport.h"

/* --- hooks for px_shm.c (internal) ------------------------------------------- */

/* Where an in-place collective's buffer lies in a region: peer[p] is rank
 * p's copy of the same bytes (peer[me] the buffer itself). */
typedef struct px__shm_reg_view {
    uint32_t region;      /* the region's id on this communicator (same on every rank) */
    uint64_t offset;      /* bytes from the start of this rank's part */
    char **peer;          /* [n], owned by the region */
} px__shm_reg_view_t;

/* Smallest all-reduce (bytes) that takes the registered path: below it the
 * slot path's one-phase form (everything in cache) is as fast. */
#define PX__SHM_REG_MIN_BYTES 65536

/* Whether `buf` .. buf + bytes lies inside one region of `comm` (fills *v);
 * 0 otherwise. */
int px__shm_reg_lookup(const px_comm_t *comm, const void *buf, uint64_t bytes,
                       px__shm_reg_view_t *v);

/* Bytes px__shm_reg_post writes (the descriptor a rank publishes in its
 * staging buffer, so that the peers can check they use the same bytes). */
#define PX__SHM_REG_DESC_BYTES 24

/* Writes this rank's descriptor of collective `seq` over view v into desc. */
void px__shm_reg_post(void *desc, uint32_t seq, const px__shm_reg_view_t *v);
/* Compares peer p's descriptor (at `desc`) with ours: PX_OK, or
 * PX_ERR_MISMATCH naming both offsets (set as comm's error). */
px_status_t px__shm_reg_check(px_comm_t *comm, int p, uint32_t seq, const void *desc,
                              const px__shm_reg_view_t *v);

/* Phase 1 of the registered all-reduce: part `me` (of n, the first
 * count % n parts one element longer) of the result, reduced in rank order
 * 0..n-1 from every rank's buffer into this rank's own (bitwise the slot
 * path's result); AVG divides once at the end. */
void px__shm_reg_reduce(const px__shm_reg_view_t *v, int n, int me, px_dtype_t dtype,
                        px_redop_t op, uint64_t count);
/* Phase 2: copies part p of rank p's buffer into ours, for every p != me. */
void px__shm_reg_gather(const px__shm_reg_view_t *v, int n, int me, uint64_t count, size_t esz);

/* Called by px__shm_destroy: the regions of `comm` are no longer found by
 * lookups (their mappings stay until px_shm_free). */
void px__shm_reg_detach(const px_comm_t *comm);

#endif
