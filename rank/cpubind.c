/* cpubind.c: --cpu-bind for parallax-rank (cpubind.h: the rules and where
 * the index comes from).
 *
 * Invariants: the choice is a pure function of (mode, allowed CPUs, index,
 * count); the only side effects are the all-gather that finds the rank's
 * machine-mates and sched_setaffinity on this process's threads. Runs on
 * the rank's thread, once, before training starts. */
#include "cpubind.h"

#include <dirent.h>
#include <errno.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/types.h>
#include <unistd.h>

#include "jobcfg.h"
#include "px_coll.h"
#include "px_log.h"

/* bytes of the machine key every rank contributes (a boot_id is 36) */
#define KEY_LEN 40

int px_cpubind_choose(int mode, const int *allowed, int n, int index, int count,
                      const char **why_p)
{
    const char *why = NULL;
    int cpu = -1;

    if (mode == PX_CPU_BIND_NONE)
        why = "--cpu-bind none";
    else if (!allowed || n < 1 || index < 0 || count < 1)
        why = "no allowed CPU or no place on this machine";
    else if (mode == PX_CPU_BIND_CORES)
        cpu = allowed[index % n]; /* asked for: more ranks than CPUs share them in turn */
    else if (mode != PX_CPU_BIND_AUTO)
        why = "unknown --cpu-bind mode";
    else if (count < 2)
        why = "auto: the job's only rank on this machine (no peer to keep in step; "
              "an independent job here would choose the same CPU)";
    else if (count > n || index >= n)
        why = "auto: more of the job's ranks on this machine than allowed CPUs";
    else
        cpu = allowed[index];
    if (why_p)
        *why_p = why;
    return cpu;
}

px_status_t px_cpubind_allowed(int *cpus, int cap, int *n_p)
{
    cpu_set_t set;
    int n = 0;

    CPU_ZERO(&set);
    if (sched_getaffinity(0, sizeof(set), &set) != 0) {
        px_error("cpu-bind: sched_getaffinity: %s", strerror(errno));
        return PX_ERR_IO;
    }
    for (int c = 0; c < CPU_SETSIZE && n < cap; c++)
        if (CPU_ISSET(c, &set))
            cpus[n++] = c;
    *n_p = n;
    return PX_OK;
}

void px_cpubind_format(const int *cpus, int n, char *buf, size_t len)
{
    size_t off = 0;

    if (len == 0)
        return;
    buf[0] = '\0';
    for (int i = 0; i < n; i++) {
        int j = i;
        while (j + 1 < n && cpus[j + 1] == cpus[j] + 1)
            j++;
        int w = j > i ? snprintf(buf + off, len - off, "%s%d-%d", off ? "," : "", cpus[i], cpus[j])
                      : snprintf(buf + off, len - off, "%s%d", off ? "," : "", cpus[i]);
        if (w < 0 || (size_t)w >= len - off) {
            if (len >= 4)
                snprintf(buf + len - 4, 4, "...");
            return;
        }
        off += (size_t)w;
        i = j;
    }
}

/* This machine's key: the kernel's boot_id (one per running kernel, the
 * same in every namespace and container of it), else the host name. */
static void machine_key(char key[KEY_LEN])
{
    FILE *f = fopen("/proc/sys/kernel/random/boot_id", "r");

    memset(key, 0, KEY_LEN);
    if (f) {
        if (!fgets(key, KEY_LEN, f))
            key[0] = '\0';
        fclose(f);
        key[strcspn(key, "\n")] = '\0';
    }
    if (!key[0] && gethostname(key, KEY_LEN - 1) != 0)
        snprintf(key, KEY_LEN, "?");
}

/* The job's ranks on this machine: *index_p this rank's place, *count_p
 * their number (1 and 0 without a world). */
static px_status_t local_place(px_comm_t *world, int *index_p, int *count_p)
{
    char key[KEY_LEN];
    int me, size, index = 0, count = 0;
    px_status_t status;

    if (!world) {
        *index_p = 0;
        *count_p = 1;
        return PX_OK;
    }
    me = px_comm_rank(world);
    size = px_comm_size(world);
    char *all = calloc((size_t)size, KEY_LEN);
    if (!all)
        return PX_ERR_NO_MEMORY;
    machine_key(key);
    status = px_allgather(world, key, all, KEY_LEN, PX_UINT8, NULL);
    if (status != PX_OK) {
        px_error("cpu-bind: all-gather of the machine keys failed: %s", px_status_str(status));
        goto out_free;
    }
    for (int r = 0; r < size; r++)
        if (!memcmp(all + (size_t)r * KEY_LEN, key, KEY_LEN)) {
            count++;
            if (r < me)
                index++;
        }
    *index_p = index;
    *count_p = count;
out_free:
    free(all);
    return status;
}

/* sched_setaffinity on every thread of this process (the UCX or bootstrap
 * threads already started too); later threads inherit it. */
static px_status_t bind_all_threads(int cpu)
{
    cpu_set_t set;
    DIR *d;
    struct dirent *e;
    px_status_t status = PX_OK;

    CPU_ZERO(&set);
    CPU_SET(cpu, &set);
    if (sched_setaffinity(0, sizeof(set), &set) != 0) {
        px_error("cpu-bind: sched_setaffinity(CPU %d): %s", cpu, strerror(errno));
        return PX_ERR_IO;
    }
    d = opendir("/proc/self/task");
    if (!d)
        return PX_OK; /* no /proc: this thread is bound, later ones inherit */
    while ((e = readdir(d))) {
        pid_t tid = (pid_t)atoi(e->d_name);
        if (tid > 0 && sched_setaffinity(tid, sizeof(set), &set) != 0 && errno != ESRCH) {
            px_error("cpu-bind: sched_setaffinity(thread %d, CPU %d): %s", (int)tid, cpu,
                     strerror(errno));
            status = PX_ERR_IO;
        }
    }
    closedir(d);
    return status;
}

/* The kernel's word on this thread's CPUs (/proc/self/status), for the log. */
static void allowed_list(char *buf, size_t len)
{
    char line[512];
    FILE *f = fopen("/proc/self/status", "r");

    snprintf(buf, len, "?");
    if (!f)
        return;
    while (fgets(line, sizeof(line), f))
        if (!strncmp(line, "Cpus_allowed_list:", 18)) {
            char *v = line + 18;
            v += strspn(v, " \t");
            v[strcspn(v, "\n")] = '\0';
            snprintf(buf, len, "%s", v);
            break;
        }
    fclose(f);
}

px_status_t px_cpubind_apply(int mode, px_comm_t *world, const char *device, int *cpu_p)
{
    static int cpus[CPU_SETSIZE];
    char have[256], now[256];
    const char *why = NULL;
    int n = 0, index = 0, count = 1, cpu = -1;
    px_status_t status;

    if (cpu_p)
        *cpu_p = -1;
    if (mode == PX_CPU_BIND_NONE) {
        px_info("cpu-bind none: not bound");
        return PX_OK;
    }
    PX_CHECK(px_cpubind_allowed(cpus, CPU_SETSIZE, &n));
    PX_CHECK(local_place(world, &index, &count));
    int local = index;
    if (device && !strncmp(device, "cpu:", 4)) { /* the daemon's slot on this node */
        char *end;
        long k = strtol(device + 4, &end, 10);
        if (end != device + 4 && !*end && k >= 0 && k < CPU_SETSIZE)
            index = (int)k;
    }
    px_cpubind_format(cpus, n, have, sizeof(have));
    cpu = px_cpubind_choose(mode, cpus, n, index, count, &why);
    if (cpu < 0) {
        px_info("cpu-bind %s: not bound: %s (local rank %d of %d, allowed CPUs %s)",
                px_job_config_cpu_bind_name(mode), why, local, count, have);
        return PX_OK;
    }
    status = bind_all_threads(cpu);
    if (status != PX_OK)
        return status;
    allowed_list(now, sizeof(now));
    px_info("cpu-bind %s: bound to CPU %d (local rank %d of %d%s%s, allowed CPUs %s); "
            "Cpus_allowed_list %s", px_job_config_cpu_bind_name(mode), cpu, local, count,
            index != local ? ", device " : "", index != local ? device : "", have, now);
    if (cpu_p)
        *cpu_p = cpu;
    return PX_OK;
}
