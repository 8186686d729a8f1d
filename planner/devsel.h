/* devsel.h: which devices a job may run on (JobSpec.devices, `pctl submit
 * --devices`), one rule shared by pctl (rejected before the call) and
 * parallaxd (rejected at SubmitJob, then used by placement).
 *
 * A selection is "" (any free device, as before the field existed) or a
 * comma-separated list of items, each a device kind (cpu, cuda, sim: every
 * device of that kind) or KIND:I (the device of that kind with index I,
 * 0..4095; further bare indices continue the list: "sim:0,1" is sim:0 and
 * sim:1). Device names are per node, as the daemons offer them (cpu:K,
 * cuda:K = the GPU with NVML index K, sim:K = a simulated device): on a
 * cluster, "cuda:0,1" means GPUs 0 and 1 of every node (as
 * CUDA_VISIBLE_DEVICES means it per node). A GPU that parallaxd --gpu-share
 * offers as slots cuda:K/0, cuda:K/1, ... is selected, every slot, by
 * cuda:K (or cuda). A kind given whole and by index
 * in one selection is an error. Pure code; any thread. */
#ifndef PX_DEVSEL_H
#define PX_DEVSEL_H

#include <stddef.h>

#include "px_status.h"

#define PX_DEVSEL_MAX 64      /* items of one selection */
#define PX_DEVSEL_MAX_INDEX 4095

typedef struct px_devsel {
    int n; /* items; 0: every device */
    struct {
        char kind[8]; /* "cpu", "cuda", "sim" */
        int index;    /* -1: every device of the kind */
    } item[PX_DEVSEL_MAX];
} px_devsel_t;

/* Parses `spec` (NULL or "" selects every device) into *sel_p, written
 * only on success. PX_ERR_INVALID_ARGUMENT with a message in errbuf naming
 * the whole value and the bad item: an unknown kind, an index out of
 * 0..4095, a device given twice, a kind whole and by index, too long. */
px_status_t px_devsel_parse(const char *spec, px_devsel_t *sel_p, char *errbuf, size_t errlen);

/* 1 when the device named `name` ("cpu:0", "sim:1", "cuda:3", "cuda:3/1") is in the
 * selection (every name is in an empty one), else 0. */
int px_devsel_match(const px_devsel_t *sel, const char *name);

/* The length in bytes of the physical device's part of device name `name`:
 * "cuda:0" of the slot "cuda:0/1" (parallaxd --gpu-share), the whole name
 * of one without a slot. Two names are on one physical device (of one
 * node) when these parts are equal. */
size_t px_device_physical_len(const char *name);

#endif
