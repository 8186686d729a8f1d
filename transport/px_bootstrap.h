/* px_bootstrap.h: standalone bootstrap without a daemon (torchrun / srun
 * style). Reads PX_RANK, PX_WORLD_SIZE, PX_MASTER_ADDR (default 127.0.0.1),
 * PX_MASTER_PORT and PX_NODE (default: hostname). Rank 0 listens on the
 * master port, every other rank connects (retrying until
 * PX_CONNECT_TIMEOUT_MS), proves it holds the job's secret (PX_JOB_SECRET,
 * "" when unset; an HMAC of rank 0's challenge, the secret never travels),
 * sends its UCX address and node name, and gets the whole table back.
 * Connections that do not prove the secret are refused and logged; setup
 * goes on (px_bootstrap.c).
 *
 * The TCP connections stay open for the job's life: when a rank dies, rank 0
 * sees its socket close and tells every other rank "rank R died" (or closes
 * their sockets when rank 0 itself dies), so the communicator's waits return
 * PX_ERR_PEER_FAILURE naming R. px_bootstrap_watch_fd() is the descriptor to
 * hand to px_comm_create_world(). */
#ifndef PX_BOOTSTRAP_H
#define PX_BOOTSTRAP_H

#include "px_transport.h"

typedef struct px_bootstrap px_bootstrap_t;

/* Reads the environment; PX_ERR_INVALID_ARGUMENT naming the variable if a
 * value is missing or bad. *rank_p / *world_p get PX_RANK / PX_WORLD_SIZE. */
px_status_t px_bootstrap_from_env(int *rank_p, int *world_p);

/* Exchanges addresses; fills `table` (caller frees with
 * px_addr_table_free). Deadline PX_CONNECT_TIMEOUT_MS. */
px_status_t px_bootstrap_create(int rank, int world_size, const void *addr, size_t len,
                                px_bootstrap_t **bootstrap_p, px_addr_table_t *table);
int px_bootstrap_watch_fd(const px_bootstrap_t *bootstrap);
/* Clean close (all ranks finished): no "died" reports. NULL no-op.
 * Rank 0 waits here (up to PX_CONNECT_TIMEOUT_MS) until every other rank
 * has closed cleanly. Call it after px_comm_destroy() and after
 * px_transport_destroy(): a worker kept alive without progress while rank 0
 * waits here can stall the other ranks' endpoint flush (up to 2 s each). */
void px_bootstrap_destroy(px_bootstrap_t *bootstrap);

#endif
