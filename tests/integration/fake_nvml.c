/* fake_nvml.c: a test double of the NVIDIA driver's libnvidia-ml.so.1, for
 * parallaxd on machines without a GPU (tests put its directory first in
 * LD_LIBRARY_PATH; daemon/nvml.c dlopens the library by that name).
 *
 * Its GPUs are scripted in the file named by FAKE_NVML_FILE, read again at
 * every query so a test can change them while the daemon runs: one line a
 * GPU,
 *     MODEL TOTAL_BYTES USED_BYTES UTIL_PERCENT POWER_MW TEMP_C PIDS
 * PIDS a comma-separated list ("-": none), e.g.
 *     Fake-H200 150000000000 2000000000 37 215000 51 1234,5678
 * A missing file is a node without GPUs (count 0). The entry points have
 * NVML's documented signatures (nvml.h of the CUDA toolkit); the ones
 * daemon/nvml.c uses return NVML_SUCCESS (0) or NVML_ERROR_INVALID_ARGUMENT
 * (2) for an index past the count. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MAX_GPUS 8
#define MAX_PIDS 16

typedef struct {
    char model[64];
    unsigned long long total, used;
    unsigned util, power_mw, temp;
    unsigned pids[MAX_PIDS];
    unsigned n_pids;
} fake_gpu_t;

static fake_gpu_t gpus[MAX_GPUS];
static unsigned n_gpus;

/* Reads FAKE_NVML_FILE into gpus[0, n_gpus). */
static void load(void)
{
    const char *path = getenv("FAKE_NVML_FILE");
    FILE *f = path ? fopen(path, "r") : NULL;
    char line[512], pids[256];

    n_gpus = 0;
    if (!f)
        return;
    while (n_gpus < MAX_GPUS && fgets(line, sizeof(line), f)) {
        fake_gpu_t *g = &gpus[n_gpus];
        memset(g, 0, sizeof(*g));
        if (sscanf(line, "%63s %llu %llu %u %u %u %255s", g->model, &g->total, &g->used, &g->util,
                   &g->power_mw, &g->temp, pids) != 7)
            continue;
        for (char *save = NULL, *t = strtok_r(pids, ",", &save); t && g->n_pids < MAX_PIDS;
             t = strtok_r(NULL, ",", &save))
            if (strcmp(t, "-"))
                g->pids[g->n_pids++] = (unsigned)strtoul(t, NULL, 10);
        n_gpus++;
    }
    fclose(f);
}

/* the handle is the GPU's index + 1 */
static fake_gpu_t *gpu_of(void *h)
{
    unsigned i = (unsigned)(size_t)h - 1;
    load();
    return i < n_gpus ? &gpus[i] : NULL;
}

int nvmlInit_v2(void) { return 0; }

int nvmlDeviceGetCount_v2(unsigned *count)
{
    load();
    *count = n_gpus;
    return 0;
}

int nvmlDeviceGetHandleByIndex_v2(unsigned index, void **h)
{
    load();
    if (index >= n_gpus)
        return 2;
    *h = (void *)(size_t)(index + 1);
    return 0;
}

int nvmlDeviceGetName(void *h, char *name, unsigned len)
{
    fake_gpu_t *g = gpu_of(h);
    if (!g)
        return 2;
    snprintf(name, len, "%s", g->model);
    return 0;
}

typedef struct { unsigned long long total, free, used; } memory_t;

int nvmlDeviceGetMemoryInfo(void *h, memory_t *m)
{
    fake_gpu_t *g = gpu_of(h);
    if (!g)
        return 2;
    m->total = g->total;
    m->used = g->used;
    m->free = g->total - g->used;
    return 0;
}

typedef struct { unsigned gpu, memory; } util_t;

int nvmlDeviceGetUtilizationRates(void *h, util_t *u)
{
    fake_gpu_t *g = gpu_of(h);
    if (!g)
        return 2;
    u->gpu = g->util;
    u->memory = g->util / 2;
    return 0;
}

int nvmlDeviceGetPowerUsage(void *h, unsigned *mw)
{
    fake_gpu_t *g = gpu_of(h);
    if (!g)
        return 2;
    *mw = g->power_mw;
    return 0;
}

int nvmlDeviceGetTemperature(void *h, int sensor, unsigned *t)
{
    fake_gpu_t *g = gpu_of(h);
    if (!g || sensor != 0)
        return 2;
    *t = g->temp;
    return 0;
}

/* nvmlProcessInfo_t of the _v3 query */
typedef struct {
    unsigned pid;
    unsigned long long used_gpu_memory;
    unsigned gpu_instance_id, compute_instance_id;
} proc_t;

int nvmlDeviceGetComputeRunningProcesses_v3(void *h, unsigned *count, proc_t *procs)
{
    fake_gpu_t *g = gpu_of(h);
    if (!g)
        return 2;
    if (*count < g->n_pids) {
        *count = g->n_pids;
        return 7; /* NVML_ERROR_INSUFFICIENT_SIZE */
    }
    for (unsigned i = 0; i < g->n_pids; i++)
        procs[i] = (proc_t){g->pids[i], 1ull << 20, 0xffffffffu, 0xffffffffu};
    *count = g->n_pids;
    return 0;
}

const char *nvmlErrorString(int r)
{
    return r == 2 ? "Invalid Argument" : r == 7 ? "Insufficient Size" : "Unknown Error";
}
