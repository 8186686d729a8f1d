/* px_launcher.c: srun / mpirun ranks into the standalone bootstrap's
 * variables (px_launcher.h). Runs once at a rank's start, before threads. */
#include "px_launcher.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "px_log.h"

static const char *env(const char *name)
{
    const char *v = getenv(name);
    return v && *v ? v : NULL;
}

px_status_t px_launcher_first_host(const char *list, char *buf, size_t len)
{
    size_t n = 0;
    const char *p = list;

    if (!list || !*list)
        return PX_ERR_INVALID_ARGUMENT;
    /* the prefix up to '[' or the first ',' */
    while (*p && *p != ',' && *p != '[') {
        if (n + 1 >= len)
            return PX_ERR_INVALID_ARGUMENT;
        buf[n++] = *p++;
    }
    if (*p == '[') { /* the first number of the range list, padding kept */
        p++;
        if (*p < '0' || *p > '9')
            return PX_ERR_INVALID_ARGUMENT;
        while (*p >= '0' && *p <= '9') {
            if (n + 1 >= len)
                return PX_ERR_INVALID_ARGUMENT;
            buf[n++] = *p++;
        }
        p = strchr(p, ']');
        if (!p)
            return PX_ERR_INVALID_ARGUMENT;
        for (p++; *p && *p != ',' && *p != '['; p++) { /* a suffix: "a[1-2]-ib" */
            if (n + 1 >= len)
                return PX_ERR_INVALID_ARGUMENT;
            buf[n++] = *p;
        }
    }
    if (n == 0)
        return PX_ERR_INVALID_ARGUMENT;
    buf[n] = '\0';
    return PX_OK;
}

static int parse_nonneg(const char *name, const char *v, long *out)
{
    char *end;
    long x = strtol(v, &end, 10);
    if (*end || end == v || x < 0) {
        px_error("launcher: %s=%s is not a non-negative integer", name, v);
        return -1;
    }
    *out = x;
    return 0;
}

/* 20000 + FNV-1a(id) % 20000 */
static int port_of(const char *id)
{
    uint64_t h = 1469598103934665603ull;
    for (const unsigned char *p = (const unsigned char *)id; *p; p++)
        h = (h ^ *p) * 1099511628211ull;
    return 20000 + (int)(h % 20000);
}

px_status_t px_launcher_import(const char **name_p)
{
    const char *rank_v, *size_v, *name, *rank_var, *size_var;
    char host[256], id[256], num[32];
    long rank, size;

    if (name_p)
        *name_p = NULL;
    if (env("PX_RANK") || env("PX_WORLD_SIZE"))
        return PX_OK; /* torchrun-style variables win */
    if ((rank_v = env("SLURM_PROCID")) && (size_v = env("SLURM_NTASKS"))) {
        name = "slurm", rank_var = "SLURM_PROCID", size_var = "SLURM_NTASKS";
    } else if ((rank_v = env("OMPI_COMM_WORLD_RANK")) && (size_v = env("OMPI_COMM_WORLD_SIZE"))) {
        name = "openmpi", rank_var = "OMPI_COMM_WORLD_RANK", size_var = "OMPI_COMM_WORLD_SIZE";
    } else {
        return PX_OK;
    }
    if (parse_nonneg(rank_var, rank_v, &rank) || parse_nonneg(size_var, size_v, &size))
        return PX_ERR_INVALID_ARGUMENT;
    if (size < 1 || rank >= size) {
        px_error("launcher: %s=%ld is not below %s=%ld", rank_var, rank, size_var, size);
        return PX_ERR_INVALID_ARGUMENT;
    }
    if (!env("PX_MASTER_ADDR") && size > 1) {
        if (!strcmp(name, "slurm")) {
            const char *list = env("SLURM_JOB_NODELIST");
            if (!list)
                list = env("SLURM_NODELIST");
            if (!list || px_launcher_first_host(list, host, sizeof(host)) != PX_OK) {
                px_error("launcher: SLURM_JOB_NODELIST='%s' has no first host to use as the "
                         "master (set PX_MASTER_ADDR)", list ? list : "");
                return PX_ERR_INVALID_ARGUMENT;
            }
        } else {
            const char *local = env("OMPI_COMM_WORLD_LOCAL_SIZE");
            if (!local || strcmp(local, size_v)) {
                px_error("launcher: mpirun across nodes (OMPI_COMM_WORLD_LOCAL_SIZE=%s of "
                         "OMPI_COMM_WORLD_SIZE=%s): set the master's address with mpirun -x "
                         "PX_MASTER_ADDR=<host of rank 0>", local ? local : "unset", size_v);
                return PX_ERR_INVALID_ARGUMENT;
            }
            snprintf(host, sizeof(host), "127.0.0.1");
        }
        setenv("PX_MASTER_ADDR", host, 1);
    }
    if (!env("PX_MASTER_PORT") && size > 1) {
        if (!strcmp(name, "slurm"))
            snprintf(id, sizeof(id), "slurm:%s.%s", env("SLURM_JOB_ID") ? env("SLURM_JOB_ID") : "",
                     env("SLURM_STEP_ID") ? env("SLURM_STEP_ID") : "");
        else
            snprintf(id, sizeof(id), "ompi:%s:%s",
                     env("PMIX_NAMESPACE") ? env("PMIX_NAMESPACE") : "",
                     env("OMPI_MCA_ess_base_jobid") ? env("OMPI_MCA_ess_base_jobid") : "");
        snprintf(num, sizeof(num), "%d", port_of(id));
        setenv("PX_MASTER_PORT", num, 1);
    }
    snprintf(num, sizeof(num), "%ld", rank);
    setenv("PX_RANK", num, 1);
    snprintf(num, sizeof(num), "%ld", size);
    setenv("PX_WORLD_SIZE", num, 1);
    if (rank == 0)
        px_info("launcher: %s: %s=%ld ranks, master %s:%s", name, size_var, size,
                env("PX_MASTER_ADDR") ? env("PX_MASTER_ADDR") : "127.0.0.1",
                env("PX_MASTER_PORT") ? env("PX_MASTER_PORT") : "-");
    if (name_p)
        *name_p = name;
    return PX_OK;
}
