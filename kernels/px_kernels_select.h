/* px_kernels_select.h: picks the op table for a rank's device.
 *
 * A device is named as the daemon and the job flags name it: "cpu" or
 * "cpu:N" (the CPU table; N is the daemon's virtual-device index and does
 * not change the table), "cuda" (= "cuda:0") or "cuda:K", K an ordinal of
 * the CUDA devices this process sees (after CUDA_VISIBLE_DEVICES, which the
 * daemon sets to the one GPU it binds, so a daemon-launched rank is
 * always cuda:0). "sim" or "sim:K" is the simulated device
 * (px_kernels_sim.h: the CPU ops on memory the host cannot touch), for tests,
 * accepted only where PX_SIM_DEVICE=1 is set. Link kernels_device_dep
 * (kernels/meson.build). */
#ifndef PX_KERNELS_SELECT_H
#define PX_KERNELS_SELECT_H

#include <stddef.h>

#include "px_comm_device.h"
#include "px_kernels.h"
#include "px_status.h"

/* Sets *ops_p to the table for `device` (NULL or "" means "cpu"); for a CUDA
 * device, opens the CUDA backend on it (one device per process). Errors:
 * PX_ERR_INVALID_ARGUMENT with a message in err naming the value: an
 * unknown device name, a CUDA device in a build without CUDA, a CUDA
 * ordinal this process does not see, "sim" without PX_SIM_DEVICE=1; PX_ERR_INTERNAL: the CUDA runtime
 * failed to start (logged). */
px_status_t px_kernels_select(const char *device, const px_kernel_ops_t **ops_p, char *err,
                              size_t errlen);

/* 1 when this build has the CUDA backend (meson found nvcc), else 0. */
int px_kernels_have_cuda(void);

/* The number of CUDA devices this process sees (0 in a build without CUDA,
 * or without a driver or a GPU). */
int px_kernels_cuda_devices(void);

/* The name of the CUDA device this process opened (px_kernels_select
 * with a cuda device: cudaDeviceProp.name, "NVIDIA H200") into buf; 0 on
 * success, -1 (buf "") where none is open: a CPU or simulated device, a
 * build without CUDA. */
int px_kernels_cuda_device_name(char *buf, size_t len);

/* 1 when `p` is device memory of the CUDA backend this process opened
 * (px_kernels_select with a cuda device) or of the simulated device, else
 * 0.
 * What the transport uses to stage device buffers (transport/px_devmem.h). */
int px_kernels_is_device_ptr(const void *p);

/* Page-locked host memory for device staging (transport/px_devmem.h:
 * px_transport_set_pinned_memory): `bytes` from cudaHostAlloc where the
 * CUDA backend is open, else malloc; NULL when out of memory. Free with
 * px_kernels_host_free (NULL no-op), which frees either kind. */
void *px_kernels_host_alloc(size_t bytes);
void px_kernels_host_free(void *p);

/* The device's px_comm_device_t (px_comm_device.h), for collectives that
 * run on its stream (transport/px_devmem.h px_transport_set_comm_device:
 * NCCL): the CUDA backend's once a cuda device is open, else NULL (a CPU
 * or simulated device, a build without CUDA). */
const px_comm_device_t *px_kernels_comm_device(void);

/* PX_OK, or the first error the table's ops met (the CUDA backend keeps a
 * sticky status, checked here after a sync; the CPU table never fails). */
px_status_t px_kernels_check(const px_kernel_ops_t *ops);

#endif
