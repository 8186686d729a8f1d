/* px_launch.h: a tiny torchrun for tests and benchmarks: forks N rank
 * processes on this machine with the standalone bootstrap's environment
 * (PX_RANK, PX_WORLD_SIZE, PX_MASTER_ADDR, PX_MASTER_PORT on a free port).
 *
 * Each child sets up a transport + bootstrap + world communicator, calls the
 * rank function and exits with its return value (0 = pass). The parent waits
 * for all children, killing them all at `limit_s`. */
#ifndef PX_LAUNCH_H
#define PX_LAUNCH_H

#include <sys/types.h>

#include "px_bootstrap.h"
#include "px_transport.h"

typedef struct px_launch_rank {
    int rank, world;
    px_transport_t *tr;
    px_bootstrap_t *bs;
    px_comm_t *comm;
    void *arg;
} px_launch_rank_t;

/* Rank body: returns 0 on success, nonzero on failure (printed). */
typedef int (*px_launch_fn_t)(px_launch_rank_t *ctx);

/* Options: use_watch = 0 creates the communicator without the bootstrap's
 * watch fd. on_started (optional) runs in the parent after the fork with
 * the children's pids, e.g. to kill one. */
typedef struct px_launch_opts {
    int use_watch;
    int limit_s;
    int ranks_per_node;   /* > 0: PX_NODE=node<r / ranks_per_node> (fake nodes) */
    void (*on_started)(const pid_t *pids, int n, void *arg);
} px_launch_opts_t;

/* Runs `fn` in `n` processes. Returns the number of failed ranks (0 = all
 * passed); *status_out[r] (optional, n entries) gets each waitpid status. */
int px_launch(int n, px_launch_fn_t fn, void *arg, const px_launch_opts_t *opts, int *statuses);

/* Shared anonymous memory visible to all ranks (allocate before px_launch). */
void *px_launch_shared(size_t bytes);

#endif
