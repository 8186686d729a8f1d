/* px_nccl_lib.c: libnccl.so.2 opened with dlopen, its functions found with
 * dlsym (px_nccl_lib.h), once per process. */
#include "px_nccl_lib.h"

#include <dlfcn.h>
#include <stdio.h>
#include <string.h>

#include "px_env.h"
#include "px_log.h"

static px__nccl_lib_t lib;
static int tried, loaded;
static char load_why[320];

/* One required (or optional) symbol into *slot; 0, or -1 with load_why set. */
static int resolve(void *h, const char *path, const char *name, void *slot, int required)
{
    void *f = dlsym(h, name);
    if (!f && required) {
        snprintf(load_why, sizeof load_why, "%s has no symbol %s (not an NCCL 2.x library?)",
                 path, name);
        return -1;
    }
    memcpy(slot, &f, sizeof f); /* object to function pointer, as POSIX dlsym allows */
    return 0;
}

static int load(void)
{
    const char *path = px_env_str("PX_NCCL_LIBRARY");
    void *h;

    if (!*path)
        path = "libnccl.so.2";
    h = dlopen(path, RTLD_NOW | RTLD_LOCAL);
    if (!h) {
        const char *e = dlerror();
        snprintf(load_why, sizeof load_why, "cannot load %s: %s", path, e ? e : "dlopen failed");
        return -1;
    }
    if (resolve(h, path, "ncclGetVersion", &lib.get_version, 1) ||
        resolve(h, path, "ncclGetUniqueId", &lib.get_unique_id, 1) ||
        resolve(h, path, "ncclCommInitRank", &lib.comm_init_rank, 1) ||
        resolve(h, path, "ncclCommInitRankConfig", &lib.comm_init_rank_config, 0) ||
        resolve(h, path, "ncclCommDestroy", &lib.comm_destroy, 1) ||
        resolve(h, path, "ncclCommAbort", &lib.comm_abort, 1) ||
        resolve(h, path, "ncclCommGetAsyncError", &lib.comm_get_async_error, 1) ||
        resolve(h, path, "ncclGetErrorString", &lib.get_error_string, 1) ||
        resolve(h, path, "ncclAllReduce", &lib.all_reduce, 1) ||
        resolve(h, path, "ncclReduceScatter", &lib.reduce_scatter, 1) ||
        resolve(h, path, "ncclAllGather", &lib.all_gather, 1) ||
        resolve(h, path, "ncclBroadcast", &lib.broadcast, 1) ||
        resolve(h, path, "ncclSend", &lib.send, 1) ||
        resolve(h, path, "ncclRecv", &lib.recv, 1) ||
        resolve(h, path, "ncclGroupStart", &lib.group_start, 1) ||
        resolve(h, path, "ncclGroupEnd", &lib.group_end, 1)) {
        dlclose(h);
        memset(&lib, 0, sizeof lib);
        return -1;
    }
    if (lib.get_version(&lib.version) != PX__NCCL_SUCCESS) {
        snprintf(load_why, sizeof load_why, "%s: ncclGetVersion failed", path);
        dlclose(h);
        memset(&lib, 0, sizeof lib);
        return -1;
    }
    px_debug("NCCL %d loaded from %s", lib.version, path);
    return 0;
}

const px__nccl_lib_t *px__nccl_lib(char *why, size_t len)
{
    if (!tried) {
        tried = 1;
        loaded = load() == 0;
    }
    if (!loaded && why && len)
        snprintf(why, len, "%s", load_why);
    return loaded ? &lib : NULL;
}

const char *px__nccl_strerror(const px__nccl_lib_t *l, int result)
{
    static char buf[32];
    const char *s = l && l->get_error_string ? l->get_error_string(result) : NULL;
    if (s)
        return s;
    snprintf(buf, sizeof buf, "NCCL error %d", result);
    return buf;
}
