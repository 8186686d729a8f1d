/* nvml.h: the node's NVIDIA GPUs, through NVML loaded at run time.
 *
 * libnvidia-ml.so.1 comes with the GPU driver, not with the toolkit, so
 * parallaxd never links it: px_nvml_probe dlopens it, and a node without a
 * driver simply has no GPUs (cpu:N devices as before). Main loop thread. */
#ifndef PXD_NVML_H
#define PXD_NVML_H

#include <stddef.h>
#include <stdint.h>

#include "px_status.h"

#define PX_NVML_MAX_GPUS 64

typedef struct px_gpu_info {
    int index;          /* NVML index = CUDA ordinal without CUDA_VISIBLE_DEVICES */
    char name[96];      /* "NVIDIA H200" */
    uint64_t mem_total; /* bytes */
    uint64_t mem_used;  /* bytes, when probed */
} px_gpu_info_t;

/* Fills gpus[0, *n_p) (at most `max`) with the node's GPUs. Errors:
 * PX_ERR_NOT_FOUND when NVML cannot be loaded or initialised (no driver;
 * err says which), PX_ERR_INTERNAL when a query fails. Loads NVML once and
 * keeps it loaded. */
px_status_t px_nvml_probe(px_gpu_info_t *gpus, int max, int *n_p, char *err, size_t errlen);

#define PX_NVML_MAX_PIDS 64

/* One GPU's state now (px_nvml_sample). A figure the GPU does not report
 * (NVML_ERROR_NOT_SUPPORTED: power or temperature on some boards) is -1. */
typedef struct px_gpu_sample {
    char name[96];        /* "NVIDIA H200" */
    uint64_t mem_total;   /* bytes (nvmlDeviceGetMemoryInfo) */
    uint64_t mem_used;    /* bytes */
    double utilization;   /* 0..1: nvmlDeviceGetUtilizationRates' gpu percent / 100 */
    double power_w;       /* nvmlDeviceGetPowerUsage's milliwatts / 1000 */
    double temperature_c; /* nvmlDeviceGetTemperature(NVML_TEMPERATURE_GPU) */
    int n_pids;           /* nvmlDeviceGetComputeRunningProcesses, at most PX_NVML_MAX_PIDS */
    unsigned pids[PX_NVML_MAX_PIDS];
} px_gpu_sample_t;

/* Samples GPU `index` (NVML index) into *s. Loads NVML on first use.
 * Errors: PX_ERR_NOT_FOUND when NVML cannot be loaded (err says why),
 * PX_ERR_INTERNAL when the GPU or its memory cannot be queried. Each call
 * is a few NVML queries (microseconds to a millisecond): fine on the loop. */
px_status_t px_nvml_sample(int index, px_gpu_sample_t *s, char *err, size_t errlen);

#endif
