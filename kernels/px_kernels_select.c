/* px_kernels_select.c: device name -> op table (px_kernels_select.h). The
 * one place that knows whether this build has CUDA (PX_HAVE_CUDA from
 * px_config.h). Called once per process, on the rank's main thread. */
#include "px_kernels_select.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "px_config.h"
#include "px_kernels_sim.h"
#if PX_HAVE_CUDA
#include "px_kernels_cuda.h"
#endif

/* "cuda", "cuda:K" -> K (>= 0); -1 when malformed */
static int cuda_ordinal(const char *device)
{
    if (!strcmp(device, "cuda"))
        return 0;
    const char *s = device + 5; /* after "cuda:" */
    char *end = NULL;
    if (!*s)
        return -1;
    long k = strtol(s, &end, 10);
    return *end || k < 0 || k > 1023 ? -1 : (int)k;
}

px_status_t px_kernels_select(const char *device, const px_kernel_ops_t **ops_p, char *err,
                              size_t errlen)
{
    if (!device || !*device || !strcmp(device, "cpu") || !strncmp(device, "cpu:", 4)) {
        *ops_p = px_kernels_cpu();
        return PX_OK;
    }
    if (!strcmp(device, "sim") || !strncmp(device, "sim:", 4)) {
        /* the simulated device (px_kernels_sim.h): tests only */
        if (!px_kernels_sim_enabled())
            return px_invalid(err, errlen, "device '%s': the simulated device is for tests "
                              "only; set PX_SIM_DEVICE=1 to use it", device);
        return px_kernels_sim_open(ops_p);
    }
    if (strcmp(device, "cuda") && strncmp(device, "cuda:", 5))
        return px_invalid(err, errlen, "unknown device '%s' (cpu, cpu:N, cuda or cuda:K)",
                          device);
    int k = cuda_ordinal(device);
    if (k < 0)
        return px_invalid(err, errlen, "bad CUDA device '%s' (cuda or cuda:K, K >= 0)", device);
#if PX_HAVE_CUDA
    int n = px_cuda_device_count();
    if (k >= n)
        return px_invalid(err, errlen, "device '%s': this process sees %d CUDA device%s", device,
                          n, n == 1 ? "" : "s");
    px_status_t status = px_kernels_cuda_open(k, ops_p);
    if (status != PX_OK) {
        snprintf(err, errlen, "device '%s' could not be opened (%s)", device,
                 px_status_str(status));
        return status;
    }
    return PX_OK;
#else
    return px_invalid(err, errlen, "device '%s': this build has no CUDA backend (meson -Dcuda "
                      "found no nvcc)", device);
#endif
}

int px_kernels_have_cuda(void)
{
    return PX_HAVE_CUDA;
}

int px_kernels_cuda_devices(void)
{
#if PX_HAVE_CUDA
    return px_cuda_device_count();
#else
    return 0;
#endif
}

int px_kernels_cuda_device_name(char *buf, size_t len)
{
#if PX_HAVE_CUDA
    return px_cuda_device_name(buf, len);
#else
    if (len)
        buf[0] = '\0';
    return -1;
#endif
}

int px_kernels_is_device_ptr(const void *p)
{
    if (px_kernels_sim_is_device_ptr(p))
        return 1;
#if PX_HAVE_CUDA
    return px_cuda_is_device_ptr(p);
#else
    return 0;
#endif
}

void *px_kernels_host_alloc(size_t bytes)
{
#if PX_HAVE_CUDA
    void *p = px_cuda_host_alloc(bytes);
    if (p)
        return p;
#endif
    return malloc(bytes);
}

void px_kernels_host_free(void *p)
{
#if PX_HAVE_CUDA
    if (px_cuda_host_free(p))
        return;
#endif
    free(p);
}

const px_comm_device_t *px_kernels_comm_device(void)
{
#if PX_HAVE_CUDA
    return px_cuda_comm_device();
#else
    return NULL;
#endif
}

px_status_t px_kernels_check(const px_kernel_ops_t *ops)
{
#if PX_HAVE_CUDA
    if (ops && !strcmp(ops->name, "cuda"))
        return px_kernels_cuda_status();
#endif
    (void)ops;
    return PX_OK;
}
