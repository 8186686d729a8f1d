/* px_kernels_sim.h: the simulated device ("sim", "sim:K"), a test backend.
 *
 * The CPU op table, wrapped so that its tensors behave like a GPU's: they
 * live in an arena of their own that is PROT_NONE whenever no op of this
 * backend runs. Every op (compute, mem_set, mem_copy, the copies to and from
 * the host, the staging copies) opens the arena, runs the CPU op, and
 * protects it again, so host code that reads or writes a device tensor
 * directly (which on a real GPU segfaults or reads garbage) crashes the rank
 * with a message naming the address and the allocation, and a backtrace.
 * px_kernels_is_device_ptr says 1 for arena pointers, so the transport
 * stages them exactly as it stages CUDA buffers (transport/px_devmem.h).
 * The staging copies (mem_copy_async) are deferred until copy_wait or
 * synchronize, as a copy engine may finish them at any time before: a
 * reader that skips the wait sees stale bytes. The results are the CPU
 * table's bit for bit (the same functions on the same bytes).
 *
 * Only for tests: selected only when the environment has PX_SIM_DEVICE=1
 * (px_kernels_select.h), so a user never picks it by accident. The arena
 * reserves PX_SIM_DEVICE_MB MiB of address space (default 4096; pages are
 * committed as they are touched). One process, one arena; ops are
 * serialised by a process-wide lock (like one CUDA stream). */
#ifndef PX_KERNELS_SIM_H
#define PX_KERNELS_SIM_H

#include <stdint.h>

#include "px_kernels.h"
#include "px_status.h"

/* The simulated device's table, its arena mapped on first use: PX_OK and
 * *ops_p; PX_ERR_NO_MEMORY (logged) when the arena cannot be reserved.
 * Static; lives until the process exits. */
px_status_t px_kernels_sim_open(const px_kernel_ops_t **ops_p);

/* 1 when `p` lies in the simulated device's arena (0 before it is open). */
int px_kernels_sim_is_device_ptr(const void *p);

/* What the host asked of the simulated device since the process started
 * (how often host code waits for device results). Each of
 * `synchronize` and `to_host` (mem_copy_to_host, which on CUDA waits for
 * the compute stream) is one wait; `to_host_async` (mem_copy_to_host_async)
 * is none; `from_host` counts mem_copy_from_host. */
typedef struct px_kernels_sim_counts {
    uint64_t synchronize, to_host, to_host_async, from_host;
} px_kernels_sim_counts_t;

/* A snapshot of the counters (all zero before the table is opened). */
void px_kernels_sim_counts(px_kernels_sim_counts_t *counts_p);

/* 1 when PX_SIM_DEVICE=1 is in the environment (read once, cached). */
int px_kernels_sim_enabled(void);

#endif
