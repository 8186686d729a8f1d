/* cpubind.h: binding a rank process to one CPU (issue 13), as Slurm's
 * --cpu-bind=cores and Open MPI's --bind-to core do.
 *
 * The job option --cpu-bind none|cores|auto (jobcfg.h PX_CPU_BIND_*) says
 * whether to bind. The CPU comes from three things the rank knows:
 *   - the CPUs it may run on: sched_getaffinity(2) of the process, so a
 *     cpuset / cgroup / taskset the rank was started in is respected (its
 *     CPUs are used in ascending order);
 *   - its index among the job's ranks on this machine and their count:
 *     the world's ranks are grouped by the kernel they run on (boot_id, so
 *     that daemons named differently on one machine, network namespaces and
 *     containers of one host count as one machine), index = how many ranks
 *     of lower world rank share it;
 *   - under a daemon, the rank's device cpu:K (PX_DEVICE), which the daemon
 *     gives to one rank of one job at a time: its K is the index instead,
 *     so that two jobs on one node take different CPUs.
 * Rules (px_cpubind_choose): cores binds to allowed[index % n]; auto binds
 * to allowed[index] only when 2 <= count <= n and index < n (a lone rank
 * has no peer to keep in step with, and an independent job on the same
 * machine would choose the same first CPU); none never binds.
 *
 * The rank thread calls px_cpubind_apply once, after the world is up (the
 * index needs it) and before training; it binds every thread the process
 * has (/proc/self/task) and threads started later inherit the binding. */
#ifndef PX_CPUBIND_H
#define PX_CPUBIND_H

#include "px_status.h"
#include "px_transport.h"

/* The CPU for a rank: mode PX_CPU_BIND_* (jobcfg.h); allowed[0..n) the
 * allowed CPU numbers, ascending; index (>= 0) and count (>= 1) the rank's
 * place among the job's ranks on this machine (see above). Returns the CPU
 * number, or -1 (do not bind) with *why_p (may be NULL) set to a static
 * sentence saying why. Pure. */
int px_cpubind_choose(int mode, const int *allowed, int n, int index, int count,
                      const char **why_p);

/* The CPUs this process may run on (sched_getaffinity), ascending, into
 * cpus[0..cap); *n_p their number. PX_ERR_IO (logged) when the call fails. */
px_status_t px_cpubind_allowed(int *cpus, int cap, int *n_p);

/* "0-3,6" for cpus[0..n) (ascending) into buf (always terminated; a list
 * too long ends in "..."). Pure. */
void px_cpubind_format(const int *cpus, int n, char *buf, size_t len);

/* Applies mode for this rank: world is the world communicator (NULL: a
 * rank alone, index 0 of 1); device the rank's device name or NULL
 * ("cpu:K" makes K the index). Collective over world unless mode is
 * PX_CPU_BIND_NONE (an all-gather of 40 bytes per rank: which machine).
 * Logs what it chose (and the Cpus_allowed_list the kernel then reports);
 * *cpu_p (may be NULL) gets the CPU bound or -1. Errors: the all-gather's,
 * PX_ERR_IO for a failed sched_setaffinity (logged with the CPU). */
px_status_t px_cpubind_apply(int mode, px_comm_t *world, const char *device, int *cpu_p);

#endif
