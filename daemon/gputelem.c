/* gputelem.c: the node's GPUs as NVML shows them, every PX_GPU_SAMPLE_MS.
 *
 * One px_gpu_telem_t per GPU the node offers (cuda:I, all of whose
 * --gpu-share slots cuda:I/S it stands for; a simulated device sim:K is
 * sampled as NVML GPU K, which only a test's fake NVML provides): memory
 * used and total, utilization, power, temperature and the processes with a
 * compute context on it (nvml.h). Each sample is a few NVML queries per
 * GPU, microseconds each, run on the loop from a uv timer.
 *
 * A process on a GPU that is not this daemon's (px_supervisor_owns_pid:
 * not one of its ranks or sample runs) is foreign, if this daemon can see
 * it (kill(pid, 0) does not say ESRCH): NVML reports the host's pids, so a
 * pid it cannot see has exited since (a rank of ours just gone) or lives
 * outside the daemon's PID namespace (the daemon in a container), and is
 * listed only: a false foreign process would block a GPU for nothing. A
 * foreign process is logged when it appears
 * and when it leaves, listed in NodeInfo.gpus (pctl nodes, /metrics), and
 * every slot of that GPU is blocked (px_device_t.blocked, sent to the
 * peers in the heartbeat), so no coordinator places a rank there while it
 * is there; when it leaves, PXD_NODE_DEVICES lets pending jobs be placed.
 * Ranks already running on it go on. Loop thread only. */
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "daemon.h"
#include "nvml.h"
#include "px_env.h"
#include "px_log.h"
#include "px_time.h"

/* 1 if device `name` is a slot of (or is) GPU `gpu` */
static int on_gpu(const char *name, const char *gpu)
{
    return px_device_physical_len(name) == strlen(gpu) && !strncmp(name, gpu, strlen(gpu));
}

/* The NVML index of GPU "cuda:I" or "sim:K" */
static int nvml_index(const char *gpu)
{
    return atoi(strchr(gpu, ':') + 1);
}

/* 1 unless process `pid` does not exist in this daemon's PID namespace */
static int visible(unsigned pid)
{
    return kill((pid_t)pid, 0) == 0 || errno != ESRCH;
}

/* The process's name, "pid N (comm)", for log lines and blocked reasons. */
static void pid_name(unsigned pid, char *buf, size_t len)
{
    char path[64], comm[64] = "";
    FILE *f;

    snprintf(path, sizeof(path), "/proc/%u/comm", pid);
    if ((f = fopen(path, "re"))) {
        if (fgets(comm, sizeof(comm), f))
            comm[strcspn(comm, "\n")] = '\0';
        fclose(f);
    }
    if (comm[0])
        snprintf(buf, len, "pid %u (%s)", pid, comm);
    else
        snprintf(buf, len, "pid %u", pid);
}

/* Blocks (why != "") or frees every slot of `g`; 1 if a slot changed. */
static int set_blocked(px_daemon_t *d, const px_gpu_telem_t *g, const char *why)
{
    int changed = 0;
    for (int i = 0; i < d->n_devices; i++) {
        px_device_t *dv = &d->devices[i];
        if (!on_gpu(dv->name, g->device) || !strcmp(dv->blocked, why))
            continue;
        snprintf(dv->blocked, sizeof(dv->blocked), "%s", why);
        changed = 1;
    }
    return changed;
}

/* Samples GPU `g` once; returns 1 when its slots' blocked state changed,
 * -1 when NVML cannot be loaded at all. */
static int sample_one(px_daemon_t *d, px_gpu_telem_t *g)
{
    px_gpu_sample_t s;
    char err[256], why[PXD_BLOCKED_MAX], who[96];
    int had_foreign = g->n_foreign;
    unsigned before[PXD_GPU_MAX_PIDS];

    px_status_t status = px_nvml_sample(nvml_index(g->device), &s, err, sizeof(err));
    if (status != PX_OK) {
        if (g->sampled_ms >= 0 && strncmp(g->device, "sim:", 4)) /* once, until it works */
            px_warn("GPU %s: no telemetry: %s", g->device, err);
        else if (g->sampled_ms >= 0) /* a sim device without a (fake) NVML: none expected */
            px_debug("GPU %s: no telemetry: %s", g->device, err);
        g->sampled_ms = -1;
        return status == PX_ERR_NOT_FOUND ? -1 : 0;
    }
    snprintf(g->model, sizeof(g->model), "%s", s.name);
    g->mem_total = s.mem_total;
    g->mem_used = s.mem_used;
    g->utilization = s.utilization;
    g->power_w = s.power_w;
    g->temperature_c = s.temperature_c;
    g->sampled_ms = px_time_wall_ms();
    memcpy(before, g->foreign, sizeof(before));
    g->n_pids = g->n_foreign = 0;
    for (int i = 0; i < s.n_pids && i < PXD_GPU_MAX_PIDS; i++) {
        g->pids[g->n_pids++] = s.pids[i];
        if (!px_supervisor_owns_pid(d, (int)s.pids[i]) && visible(s.pids[i]))
            g->foreign[g->n_foreign++] = s.pids[i];
    }
    if (g->n_foreign == had_foreign && !memcmp(before, g->foreign, sizeof(unsigned) * (size_t)had_foreign))
        return 0;
    if (!g->n_foreign) {
        px_info("GPU %s: no process of another owner left on it: its devices are handed out "
                "again", g->device);
        return set_blocked(d, g, "");
    }
    pid_name(g->foreign[0], who, sizeof(who));
    snprintf(why, sizeof(why), "%s%s, not a rank of this node, holds GPU %s", who,
             g->n_foreign > 1 ? " and others" : "", g->device);
    for (int i = 0; i < g->n_foreign; i++) {
        pid_name(g->foreign[i], who, sizeof(who));
        px_warn("GPU %s: %s is not a rank of this node: no rank is placed on the GPU while it "
                "is there", g->device, who);
    }
    return set_blocked(d, g, why);
}

/* Samples every GPU; 0, or -1 when NVML cannot be loaded. */
static int sample_all(px_daemon_t *d)
{
    int changed = 0, missing = 0;
    for (int i = 0; i < d->n_gpus; i++) {
        int r = sample_one(d, &d->gpus[i]);
        changed |= r > 0;
        missing |= r < 0;
    }
    if (changed) {
        px_nodes_beat_now(d);                     /* the peers' placement sees it now */
        px_nodes_emit(d, PXD_NODE_DEVICES, NULL); /* a GPU freed: pending jobs may fit */
    }
    return missing ? -1 : 0;
}

static void on_timer(uv_timer_t *t)
{
    px_daemon_t *d = t->data;
    if (!d->stopping)
        sample_all(d);
}

px_status_t px_gputelem_start(px_daemon_t *d)
{
    long period = px_env_int("PX_GPU_SAMPLE_MS");

    uv_timer_init(d->loop, &d->gpu_timer);
    d->gpu_timer.data = d;
    for (int i = 0; i < d->n_devices; i++) {
        const char *name = d->devices[i].name;
        int known = 0;
        if (strncmp(name, "cuda:", 5) && strncmp(name, "sim:", 4))
            continue;
        for (int k = 0; k < d->n_gpus && !known; k++)
            known = on_gpu(name, d->gpus[k].device);
        if (known)
            continue;
        px_gpu_telem_t *g = realloc(d->gpus, sizeof(*g) * (size_t)(d->n_gpus + 1));
        if (!g)
            return PX_ERR_NO_MEMORY;
        d->gpus = g;
        g = &d->gpus[d->n_gpus++];
        memset(g, 0, sizeof(*g));
        snprintf(g->device, sizeof(g->device), "%.*s", (int)px_device_physical_len(name), name);
        g->utilization = g->power_w = g->temperature_c = -1;
    }
    if (!d->n_gpus)
        return PX_OK;
    /* before the first heartbeat and placement; without NVML (sim devices
     * on a machine with no driver and no fake) there is nothing to sample */
    if (sample_all(d) < 0)
        return PX_OK;
    uv_timer_start(&d->gpu_timer, on_timer, (uint64_t)(period < 50 ? 50 : period),
                   (uint64_t)(period < 50 ? 50 : period));
    return PX_OK;
}

void px_gputelem_stop(px_daemon_t *d)
{
    uv_timer_stop(&d->gpu_timer);
}

void px_gputelem_free(px_daemon_t *d)
{
    free(d->gpus);
    d->gpus = NULL;
    d->n_gpus = 0;
}

px_status_t px_gputelem_to_info(const px_gpu_telem_t *gpus, int n, Parallax__V1__NodeInfo *info)
{
    info->n_gpus = 0;
    info->gpus = NULL;
    if (n <= 0)
        return PX_OK;
    /* one block: the pointers, the messages, their pid arrays */
    size_t each = sizeof(Parallax__V1__GpuStats) + 2 * sizeof(uint32_t) * PXD_GPU_MAX_PIDS;
    char *block = calloc(1, (size_t)n * (sizeof(void *) + each));
    if (!block)
        return PX_ERR_NO_MEMORY;
    info->gpus = (Parallax__V1__GpuStats **)block;
    for (int i = 0; i < n; i++) {
        const px_gpu_telem_t *g = &gpus[i];
        char *at = block + (size_t)n * sizeof(void *) + (size_t)i * each;
        Parallax__V1__GpuStats *m = (Parallax__V1__GpuStats *)at;
        uint32_t *pids = (uint32_t *)(at + sizeof(*m));
        parallax__v1__gpu_stats__init(m);
        m->device = (char *)g->device;
        m->model = (char *)g->model;
        m->memory_total = g->mem_total;
        m->memory_used = g->mem_used;
        m->utilization = g->utilization;
        m->power_watts = g->power_w;
        m->temperature_celsius = g->temperature_c;
        m->sampled_ms = g->sampled_ms > 0 ? g->sampled_ms : 0;
        m->pids = pids;
        m->n_pids = (size_t)g->n_pids;
        for (int k = 0; k < g->n_pids; k++)
            pids[k] = g->pids[k];
        m->foreign_pids = pids + PXD_GPU_MAX_PIDS;
        m->n_foreign_pids = (size_t)g->n_foreign;
        for (int k = 0; k < g->n_foreign; k++)
            m->foreign_pids[k] = g->foreign[k];
        info->gpus[i] = m;
    }
    info->n_gpus = (size_t)n;
    return PX_OK;
}

void px_gputelem_info_free(Parallax__V1__NodeInfo *info)
{
    free(info->gpus); /* one block: px_gputelem_to_info */
    info->gpus = NULL;
    info->n_gpus = 0;
}

void px_gputelem_facts_only(Parallax__V1__GpuStats *g)
{
    g->memory_used = 0;
    g->utilization = -1.0;
    g->power_watts = -1.0;
    g->temperature_celsius = -1.0;
    g->sampled_ms = 0;
    g->n_pids = 0;
    g->pids = NULL;
}

/* The peer's telemetry entry for GPU `device` as it was, or NULL. */
static const px_gpu_telem_t *telem_of(const px_peer_t *p, const char *device)
{
    for (int i = 0; i < p->n_gpus; i++)
        if (!strcmp(p->gpus[i].device, device))
            return &p->gpus[i];
    return NULL;
}

void px_gputelem_from_info(px_peer_t *p, const Parallax__V1__NodeInfo *info)
{
    px_gpu_telem_t *g = info->n_gpus ? calloc(info->n_gpus, sizeof(*g)) : NULL;

    if (info->n_gpus && !g)
        return; /* keeps what it had */
    for (size_t i = 0; i < info->n_gpus; i++) {
        const Parallax__V1__GpuStats *m = info->gpus[i];
        const px_gpu_telem_t *old;
        snprintf(g[i].device, sizeof(g[i].device), "%s", m->device ? m->device : "");
        snprintf(g[i].model, sizeof(g[i].model), "%s", m->model ? m->model : "");
        g[i].mem_total = m->memory_total;
        if (!m->sampled_ms && (old = telem_of(p, g[i].device)) && old->sampled_ms) {
            /* gossiped facts (px_gputelem_facts_only): the samples are the
             * last ones the node sent us itself */
            g[i].mem_used = old->mem_used;
            g[i].utilization = old->utilization;
            g[i].power_w = old->power_w;
            g[i].temperature_c = old->temperature_c;
            g[i].sampled_ms = old->sampled_ms;
            memcpy(g[i].pids, old->pids, sizeof(old->pids));
            g[i].n_pids = old->n_pids;
        } else {
            g[i].mem_used = m->memory_used;
            g[i].utilization = m->utilization;
            g[i].power_w = m->power_watts;
            g[i].temperature_c = m->temperature_celsius;
            g[i].sampled_ms = m->sampled_ms;
            for (size_t k = 0; k < m->n_pids && k < PXD_GPU_MAX_PIDS; k++)
                g[i].pids[g[i].n_pids++] = m->pids[k];
        }
        for (size_t k = 0; k < m->n_foreign_pids && k < PXD_GPU_MAX_PIDS; k++)
            g[i].foreign[g[i].n_foreign++] = m->foreign_pids[k];
    }
    free(p->gpus);
    p->gpus = g;
    p->n_gpus = (int)info->n_gpus;
}
