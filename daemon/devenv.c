/* devenv.c: the environment that names a rank's device (daemon.h,
 * px_supervisor_device_env), shared by the supervisor's ranks and sample.c's
 * runs. Pure; any thread. */
#include <stdio.h>
#include <string.h>

#include "daemon.h"

int px_supervisor_device_env(const char *device, char *cvd, size_t cvd_len, char *dev,
                             size_t dev_len, char *node_dev, size_t node_dev_len, char **env)
{
    int n = 0;
    /* the GPU of slot "cuda:0/1" (--gpu-share) is "cuda:0" */
    int gpu_len = (int)px_device_physical_len(device);

    if (!strncmp(device, "cuda:", 5)) {
        /* the rank sees its one GPU, as CUDA device 0 */
        snprintf(cvd, cvd_len, "CUDA_VISIBLE_DEVICES=%.*s", gpu_len - 5, device + 5);
        env[n++] = cvd;
        snprintf(dev, dev_len, "PX_DEVICE=cuda:0");
    } else {
        snprintf(dev, dev_len, "PX_DEVICE=%.*s", gpu_len, device);
    }
    env[n++] = dev;
    snprintf(node_dev, node_dev_len, "PX_NODE_DEVICE=%s", device);
    env[n++] = node_dev;
    return n;
}

int px_supervisor_physical_devices(const char *const *nodes, const char *const *devices, int n)
{
    int count = 0;
    for (int r = 0; r < n; r++) {
        size_t len = px_device_physical_len(devices[r]);
        int seen = 0;
        for (int q = 0; q < r && !seen; q++) /* a job's few ranks: quadratic is fine */
            seen = !strcmp(nodes[q], nodes[r]) && px_device_physical_len(devices[q]) == len &&
                   !strncmp(devices[q], devices[r], len);
        count += !seen;
    }
    return count;
}
