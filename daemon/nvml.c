/* nvml.c: GPU discovery through NVML, dlopen'ed (nvml.h). The few NVML
 * entry points used are declared here with NVML's documented signatures
 * (nvml.h of the CUDA toolkit: nvmlInit_v2, nvmlDeviceGetCount_v2,
 * nvmlDeviceGetHandleByIndex_v2, nvmlDeviceGetName, nvmlDeviceGetMemoryInfo,
 * nvmlErrorString), so building needs no NVML header. Main loop thread. */
#include "nvml.h"

#include <dlfcn.h>
#include <stdio.h>
#include <string.h>

typedef int nvml_ret_t; /* nvmlReturn_t: 0 = NVML_SUCCESS */
typedef void *nvml_dev_t;
typedef struct { unsigned long long total, free, used; } nvml_memory_t; /* nvmlMemory_t */

static struct {
    void *lib;
    nvml_ret_t (*init)(void);
    nvml_ret_t (*count)(unsigned *);
    nvml_ret_t (*handle)(unsigned, nvml_dev_t *);
    nvml_ret_t (*name)(nvml_dev_t, char *, unsigned);
    nvml_ret_t (*mem)(nvml_dev_t, nvml_memory_t *);
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
