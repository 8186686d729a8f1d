/* px_world.h: a rank's world bring-up and teardown, written once for every
 * program that runs ranks (parallax-rank's training and bench modes,
 * px-coll-bench).
 *
 * Bring-up: the UCX transport, this worker's address, the rendezvous that
 * turns every rank's address into the address table (the daemon's, through
 * a callback, or the standalone bootstrap from PX_RANK / PX_WORLD_SIZE /
 * PX_MASTER_ADDR / PX_MASTER_PORT, px_bootstrap.h), the world communicator,
 * and a check that it has the size the caller expects.
 *
 * Teardown order (px_world_close): an abort when the rank failed, the
 * communicator, then the transport
 * (its worker), then, only when the rank finished, the bootstrap's clean
 * close. The worker goes first because rank 0 waits in px_bootstrap_destroy
 * for every rank's goodbye, and a worker kept alive there without progress
 * stalls the other ranks' endpoint flush. A rank that failed never closes
 * the bootstrap cleanly: its process exit hangs up the bootstrap socket,
 * which tells rank 0 (and through it every peer) that this rank died.
 *
 * One thread (the rank's). */
#ifndef PX_WORLD_H
#define PX_WORLD_H

#include <stddef.h>

#include "px_status.h"
#include "px_transport.h"

typedef struct px_world px_world_t;

/* A rendezvous: publishes this worker's address (`len` bytes, borrowed for
 * the call) and fills `table` with every rank's (the caller of px_world_open
 * frees it). Must have a deadline of its own. px_rank_link's fits. */
typedef px_status_t (*px_world_rendezvous_fn_t)(void *arg, const void *addr, size_t len,
                                                px_addr_table_t *table);

typedef struct px_world_opts {
    int rank, size;          /* this rank and the world size it expects */
    /* NULL: the standalone bootstrap (size > 1) or a world of one */
    px_world_rendezvous_fn_t rendezvous;
    void *rendezvous_arg;    /* borrowed, passed to rendezvous */
    /* size 1 without a rendezvous: 1 = a one-rank communicator on a real
     * transport (px_comm_create_self); 0 = no transport and no
     * communicator at all (px_world_comm returns NULL) */
    int self_when_alone;
    /* NULL, or text every rank of the world must hold identically (the
     * job's configuration: "--NAME=VALUE" lines, px_job_config_canon),
     * borrowed for px_world_open, at most PX_WORLD_AGREE_MAX - 1 bytes. The
     * ranks compare it right after the communicator is up; on a difference
     * every rank fails with PX_ERR_MISMATCH naming the first differing line
     * of the lowest rank that differs from rank 0, with both values.
     * PX_WORLD_CONFIG_CHECK=0 skips the comparison. */
    const char *agree;
} px_world_opts_t;

/* Largest `agree` text (bytes, with the NUL). */
#define PX_WORLD_AGREE_MAX 4096

/* The world's shape from the standalone bootstrap's environment: first,
 * with neither PX_RANK nor PX_WORLD_SIZE set, a launcher's variables
 * (srun, mpirun) are translated into them (px_launcher.h: sets the
 * environment); then PX_WORLD_SIZE > 1 reads PX_RANK and PX_WORLD_SIZE
 * (px_bootstrap_from_env, PX_ERR_INVALID_ARGUMENT naming a bad variable);
 * unset or <= 1 is rank 0 of a world of 1. Starts nothing. */
px_status_t px_world_env(int *rank_p, int *size_p);

/* Brings the world up as the header says. Collective with every other rank
 * of the world (their rendezvous / bootstrap must run too). Deadlines: the
 * rendezvous's own, PX_CONNECT_TIMEOUT_MS for the bootstrap and the
 * communicator's wire-up (and for the `agree` exchange). Errors: the
 * failing step's (logged with this rank's number), PX_ERR_MISMATCH when the
 * communicator's size is not opts->size or the ranks' `agree` texts differ,
 * PX_ERR_INVALID_ARGUMENT for a bad rank / size or a too long `agree`. On failure
 * everything is released except a bootstrap connection, which is left for
 * the process exit to hang up (see above): the caller should exit. */
px_status_t px_world_open(const px_world_opts_t *opts, px_world_t **world_p);

/* The world communicator (borrowed until px_world_close); NULL for a world
 * of one opened without self_when_alone. */
px_comm_t *px_world_comm(const px_world_t *world);
int px_world_rank(const px_world_t *world);
int px_world_size(const px_world_t *world);

/* Finish together: a barrier over the world (deadline: the communicator's
 * default), so that no rank tears its endpoints down while a peer may still
 * be completing the last collective. Call it after a successful run only.
 * A failure is logged as a warning and returned; nothing else to do. */
px_status_t px_world_finish(px_world_t *world);

/* Tears the world down in the order above; `success` (the rank finished
 * its work) allows the bootstrap's clean close. Without it the rank aborts
 * its world first (px_comm_abort_peers, with the first error this process
 * logged as the reason): every peer fails within one sleep slice naming
 * this rank and that reason, and nobody waits for anyone's goodbye; a rank
 * failing because a peer died or the job was stopped sends nothing. NULL
 * is a no-op. */
void px_world_close(px_world_t *world, int success);

#endif
