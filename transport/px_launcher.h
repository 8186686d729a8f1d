/* px_launcher.h: ranks started by the launchers users already run (issue
 * 14): Slurm's srun and Open MPI's mpirun, as torchrun-style standalone
 * ranks, without a wrapper script.
 *
 * When neither PX_RANK nor PX_WORLD_SIZE is set, the launcher's variables
 * are translated into the standalone bootstrap's (px_bootstrap.h):
 *   Slurm:    PX_RANK = SLURM_PROCID, PX_WORLD_SIZE = SLURM_NTASKS,
 *             PX_MASTER_ADDR = the first host of SLURM_JOB_NODELIST
 *             (Slurm's compressed host list: "gpu[07-12,20],cpu3" -> gpu07);
 *   Open MPI: PX_RANK = OMPI_COMM_WORLD_RANK, PX_WORLD_SIZE =
 *             OMPI_COMM_WORLD_SIZE, PX_MASTER_ADDR = 127.0.0.1 when every
 *             rank runs on this node (OMPI_COMM_WORLD_LOCAL_SIZE equal to the
 *             size); across nodes PX_MASTER_ADDR must be given (mpirun -x
 *             PX_MASTER_ADDR=host-of-rank-0), else an error says so.
 * PX_MASTER_ADDR and PX_MASTER_PORT already set are kept; the port is
 * otherwise derived from the launcher's job id (SLURM_JOB_ID and
 * SLURM_STEP_ID; Open MPI's PMIX_NAMESPACE / OMPI_MCA_ess_base_jobid): 20000
 * + a hash of it modulo 20000, the same on every rank of one launch and
 * different between concurrent launches most of the time.
 *
 * Reads and sets the process environment: call it before any thread
 * starts. */
#ifndef PX_LAUNCHER_H
#define PX_LAUNCHER_H

#include <stddef.h>

#include "px_status.h"

/* Translates the launcher's variables as above. *name_p (may be NULL) gets
 * "slurm", "openmpi" or NULL (nothing done: PX_* variables set, or no
 * launcher). PX_ERR_INVALID_ARGUMENT (logged, naming the variable) for a
 * malformed value or a multi-node mpirun without PX_MASTER_ADDR. */
px_status_t px_launcher_import(const char **name_p);

/* The first host of a Slurm host list into buf ("node[01-04,07],x" ->
 * "node01"; "a,b" -> "a"). PX_ERR_INVALID_ARGUMENT for an empty or
 * malformed list or one too long for buf. */
px_status_t px_launcher_first_host(const char *nodelist, char *buf, size_t len);

#endif
