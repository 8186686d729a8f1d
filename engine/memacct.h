/* memacct.h: the rank's memory accounting: every engine allocation tagged
 * with a category (plan.h's px_mem_cat_t), current and peak bytes per
 * category, and the peak of params + grads + optimizer held at once.
 *
 * The "comm" category is the transport's own device memory (the CUDA
 * IPC scratch rings, px_devmem.h px_transport_device_scratch), added at
 * each snapshot; planner/plan.h px_plan_ipc_comms predicts it.
 *
 * Process-wide counters; the engine runs on one training thread, so the
 * functions are not thread-safe. Bytes are the requested sizes (the C
 * library's own overhead is not counted). */
#ifndef PX_MEMACCT_H
#define PX_MEMACCT_H

#include <stddef.h>
#include <stdint.h>

#include "plan.h"
#include "px_kernels.h"

typedef struct px_mem_stats {
    uint64_t current[PX_MEM_NCAT];
    uint64_t peak[PX_MEM_NCAT];
    uint64_t state_peak; /* peak of params + grads + optimizer at one time */
    /* the backend's device memory at the snapshot as its runtime
     * reports it (kernel table mem_info: cudaMemGetInfo), bytes; both 0 on
     * a backend without device memory (cpu) or when the runtime failed */
    uint64_t device_used, device_total;
} px_mem_stats_t;

/* The backend whose memory ops (px_kernels.h mem_alloc / mem_free) serve
 * every tagged block; px_kernels_cpu() until set. Set it once, before the
 * first allocation; `k` is borrowed for the process's life. */
void px_mem_set_backend(const px_kernel_ops_t *k);

/* A zero-filled block of n * size bytes of the backend's memory, tagged
 * `cat`; NULL when out of memory or n * size overflows.
 * Free with px_mem_free. */
void *px_mem_calloc(px_mem_cat_t cat, size_t n, size_t size);
/* The same for host memory (calloc) whatever the backend: bookkeeping the
 * host reads (on a device backend, tensor memory is the device's,
 * which host code must not touch), counted in `cat` as px_mem_calloc's.
 * Free with px_mem_free. */
void *px_mem_calloc_host(px_mem_cat_t cat, size_t n, size_t size);
/* Counts a block allocated elsewhere (host memory the kernels can use,
 * e.g. a transport's registered buffer, px_shm_alloc) in `cat` as
 * px_mem_calloc's: bytes its size; px_mem_free then calls release(ptr)
 * instead of the backend's free. Returns ptr, or NULL (nothing counted,
 * ptr still the caller's) when out of memory or an argument is bad. */
void *px_mem_adopt(px_mem_cat_t cat, void *ptr, size_t bytes, void (*release)(void *));
/* Frees a px_mem_calloc block and subtracts it; NULL no-op. Any other
 * pointer aborts (a double free must not corrupt the counters). */
void px_mem_free(void *ptr);
/* Snapshot of the counters (and of the device's memory, see above). */
void px_mem_stats(px_mem_stats_t *out);
/* Resets the peaks to the current values (e.g. between runs in one process). */
void px_mem_reset_peaks(void);

#endif
