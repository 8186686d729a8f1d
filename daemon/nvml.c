/* nvml.c: GPU discovery through NVML, dlopen'ed (nvml.h). The few NVML
 * entry points used are declared here with NVML's documented signatures
 * (nvml.h of the CUDA toolkit: nvmlInit_v2, nvmlDeviceGetCount_v2,
 * nvmlDeviceGetHandleByIndex_v2, nvmlDeviceGetName, nvmlDeviceGetMemoryInfo,
 * nvmlDeviceGetUtilizationRates, nvmlDeviceGetPowerUsage,
 * nvmlDeviceGetTemperature, nvmlDeviceGetComputeRunningProcesses_v3 or _v2,
 * nvmlErrorString), so building needs no NVML header. Main loop thread. */
#include "nvml.h"

#include <dlfcn.h>
#include <stdio.h>
#include <string.h>

typedef int nvml_ret_t; /* nvmlReturn_t: 0 = NVML_SUCCESS */
typedef void *nvml_dev_t;
typedef struct { unsigned long long total, free, used; } nvml_memory_t; /* nvmlMemory_t */
typedef struct { unsigned gpu, memory; } nvml_util_t; /* nvmlUtilization_t: percent */
/* nvmlProcessInfo_t (= nvmlProcessInfo_v2_t) of the _v2 and _v3 queries */
typedef struct {
    unsigned pid;
    unsigned long long used_gpu_memory;
    unsigned gpu_instance_id, compute_instance_id;
} nvml_proc_t;

#define NVML_ERROR_NOT_SUPPORTED 3
#define NVML_ERROR_INSUFFICIENT_SIZE 7
#define NVML_TEMPERATURE_GPU 0

static struct {
    void *lib;
    nvml_ret_t (*init)(void);
    nvml_ret_t (*count)(unsigned *);
    nvml_ret_t (*handle)(unsigned, nvml_dev_t *);
    nvml_ret_t (*name)(nvml_dev_t, char *, unsigned);
    nvml_ret_t (*mem)(nvml_dev_t, nvml_memory_t *);
    nvml_ret_t (*util)(nvml_dev_t, nvml_util_t *);        /* optional ones: NULL if absent */
    nvml_ret_t (*power)(nvml_dev_t, unsigned *);          /* milliwatts */
    nvml_ret_t (*temp)(nvml_dev_t, int, unsigned *);      /* degrees C */
    nvml_ret_t (*procs)(nvml_dev_t, unsigned *, nvml_proc_t *);
    const char *(*errstr)(nvml_ret_t);
    int ready;
} nv;

static const char *nvml_err(nvml_ret_t r)
{
    return nv.errstr ? nv.errstr(r) : "NVML error";
}

static px_status_t load(char *err, size_t errlen)
{
    if (nv.ready)
        return PX_OK;
    if (!nv.lib) {
        nv.lib = dlopen("libnvidia-ml.so.1", RTLD_NOW | RTLD_LOCAL);
        if (!nv.lib) {
            snprintf(err, errlen, "NVML (libnvidia-ml.so.1, from the NVIDIA driver) cannot be "
                     "loaded: %s", dlerror());
            return PX_ERR_NOT_FOUND;
        }
    }
    *(void **)&nv.init = dlsym(nv.lib, "nvmlInit_v2");
    *(void **)&nv.count = dlsym(nv.lib, "nvmlDeviceGetCount_v2");
    *(void **)&nv.handle = dlsym(nv.lib, "nvmlDeviceGetHandleByIndex_v2");
    *(void **)&nv.name = dlsym(nv.lib, "nvmlDeviceGetName");
    *(void **)&nv.mem = dlsym(nv.lib, "nvmlDeviceGetMemoryInfo");
    *(void **)&nv.errstr = dlsym(nv.lib, "nvmlErrorString");
    *(void **)&nv.util = dlsym(nv.lib, "nvmlDeviceGetUtilizationRates");
    *(void **)&nv.power = dlsym(nv.lib, "nvmlDeviceGetPowerUsage");
    *(void **)&nv.temp = dlsym(nv.lib, "nvmlDeviceGetTemperature");
    *(void **)&nv.procs = dlsym(nv.lib, "nvmlDeviceGetComputeRunningProcesses_v3");
    if (!nv.procs)
        *(void **)&nv.procs = dlsym(nv.lib, "nvmlDeviceGetComputeRunningProcesses_v2");
    if (!nv.init || !nv.count || !nv.handle || !nv.name || !nv.mem) {
        snprintf(err, errlen, "NVML lacks an entry point parallaxd needs (driver too old?)");
        return PX_ERR_NOT_FOUND;
    }
    nvml_ret_t r = nv.init();
    if (r) {
        snprintf(err, errlen, "nvmlInit: %s", nvml_err(r));
        return PX_ERR_NOT_FOUND;
    }
    nv.ready = 1;
    return PX_OK;
}

px_status_t px_nvml_probe(px_gpu_info_t *gpus, int max, int *n_p, char *err, size_t errlen)
{
    px_status_t status = load(err, errlen);
    unsigned count = 0;
    if (status != PX_OK)
        return status;
    nvml_ret_t r = nv.count(&count);
    if (r) {
        snprintf(err, errlen, "nvmlDeviceGetCount: %s", nvml_err(r));
        return PX_ERR_INTERNAL;
    }
    int n = (int)count < max ? (int)count : max;
    for (int i = 0; i < n; i++) {
        nvml_dev_t h;
        nvml_memory_t m;
        memset(&gpus[i], 0, sizeof(gpus[i]));
        gpus[i].index = i;
        if ((r = nv.handle((unsigned)i, &h)) || (r = nv.name(h, gpus[i].name, sizeof(gpus[i].name))) ||
            (r = nv.mem(h, &m))) {
            snprintf(err, errlen, "NVML query of GPU %d: %s", i, nvml_err(r));
            return PX_ERR_INTERNAL;
        }
        gpus[i].mem_total = m.total;
        gpus[i].mem_used = m.used;
    }
    *n_p = n;
    return PX_OK;
}

px_status_t px_nvml_sample(int index, px_gpu_sample_t *s, char *err, size_t errlen)
{
    px_status_t status = load(err, errlen);
    nvml_dev_t h;
    nvml_memory_t m;
    nvml_util_t u;
    nvml_proc_t procs[PX_NVML_MAX_PIDS];
    unsigned v, n = PX_NVML_MAX_PIDS;
    nvml_ret_t r;

    if (status != PX_OK)
        return status;
    memset(s, 0, sizeof(*s));
    s->utilization = s->power_w = s->temperature_c = -1;
    if ((r = nv.handle((unsigned)index, &h)) || (r = nv.name(h, s->name, sizeof(s->name))) ||
        (r = nv.mem(h, &m))) {
        snprintf(err, errlen, "NVML query of GPU %d: %s", index, nvml_err(r));
        return PX_ERR_INTERNAL;
    }
    s->mem_total = m.total;
    s->mem_used = m.used;
    /* the rest is optional: a board that does not report it leaves -1 */
    if (nv.util && !nv.util(h, &u))
        s->utilization = u.gpu / 100.0;
    if (nv.power && !nv.power(h, &v))
        s->power_w = v / 1000.0;
    if (nv.temp && !nv.temp(h, NVML_TEMPERATURE_GPU, &v))
        s->temperature_c = v;
    /* more processes than fit: NVML_ERROR_INSUFFICIENT_SIZE, n set to the
     * count; the first PX_NVML_MAX_PIDS are not returned then, so the
     * GPU is reported with none listed */
    if (nv.procs && !(r = nv.procs(h, &n, procs))) {
        s->n_pids = (int)(n < PX_NVML_MAX_PIDS ? n : PX_NVML_MAX_PIDS);
        for (int i = 0; i < s->n_pids; i++)
            s->pids[i] = procs[i].pid;
    }
    return PX_OK;
}
