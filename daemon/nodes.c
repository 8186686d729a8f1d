/* nodes.c: this node's devices and the peer table.
 *
 * A peer is another daemon: from --peers (the seeds; name unknown until it
 * answers) or learned by membership (membership.c: SWIM over Peer.Heartbeat
 * and Peer.IndirectProbe), which decides whether it is alive
 * (px_nodes_peer_alive: a peer declared dead fails the jobs this node
 * coordinates with ranks there and stops the ranks this node runs for it).
 * Its facts (name, addresses, devices and the jobs holding them, draining,
 * version) come from its NodeInfo, carried by its pings and acks and
 * gossiped with its membership rumours (px_nodes_heard). Two daemons
 * reporting one name are a conflict: logged, shown, never used. Loop
 * thread only. */
#include <stdlib.h>
#include <string.h>

#include "daemon.h"
#include "nvml.h"
#include "px_config.h"
#include "px_env.h"
#include "px_log.h"
#include "px_time.h"

px_peer_t *px_nodes_peer_add(px_daemon_t *d, const char *peer_addr)
{
    px_peer_t *p = realloc(d->peers, sizeof(*p) * (size_t)(d->n_peers + 1));
    px_peer_t *np;
    if (!p)
        return NULL;
    d->peers = p;
    np = &d->peers[d->n_peers];
    memset(np, 0, sizeof(*np));
    snprintf(np->peer_addr, sizeof(np->peer_addr), "%s", peer_addr);
    if (px_auth_channel_create(d, peer_addr, 1, &np->channel) != PX_OK)
        return NULL;
    d->n_peers++;
    return np;
}

/* The GPUs --devices asks for (cuda, cuda:I,...), found through NVML:
 * gpus[0, *n_p). A node without a driver, or without GPU I, is an error
 * naming it (the daemon does not start). */
static px_status_t nodes_gpus(px_daemon_t *d, px_gpu_info_t *gpus, int *n_p)
{
    px_gpu_info_t all[PX_NVML_MAX_GPUS];
    char err[256];
    int n = 0;

    *n_p = 0;
    if (!d->cfg.cuda_all && !d->cfg.n_cuda)
        return PX_OK;
    px_status_t status = px_nvml_probe(all, PX_NVML_MAX_GPUS, &n, err, sizeof(err));
    if (status != PX_OK) {
        px_error("devices %s: no GPUs: %s", d->cfg.devices, err);
        return PX_ERR_INVALID_ARGUMENT;
    }
    if (d->cfg.cuda_all) {
        if (!n) {
            px_error("devices %s: NVML finds no GPU on this node", d->cfg.devices);
            return PX_ERR_INVALID_ARGUMENT;
        }
        memcpy(gpus, all, sizeof(*all) * (size_t)n);
        *n_p = n;
        return PX_OK;
    }
    for (int i = 0; i < d->cfg.n_cuda; i++) {
        int k = d->cfg.cuda_ids[i];
        if (k >= n) {
            px_error("devices %s: cuda:%d: this node has %d GPU%s", d->cfg.devices, k, n,
                     n == 1 ? "" : "s");
            return PX_ERR_INVALID_ARGUMENT;
        }
        gpus[i] = all[k];
    }
    *n_p = d->cfg.n_cuda;
    return PX_OK;
}

/* The simulated devices --devices sim:N asks for: offered only
 * where PX_SIM_DEVICE=1, as the ranks accept them only there
 * (kernels/px_kernels_sim.h); else an error naming both (the daemon does
 * not start). Each is one rank's own arena of PX_SIM_DEVICE_MB MiB, so a
 * rank needs no CUDA_VISIBLE_DEVICES analogue: PX_DEVICE=sim:K names it. */
static px_status_t nodes_sims(px_daemon_t *d, uint64_t *bytes_p)
{
    *bytes_p = 0;
    if (!d->cfg.n_sim)
        return PX_OK;
    if (px_env_int("PX_SIM_DEVICE") != 1) {
        px_error("devices %s: sim:%d: simulated devices are for tests only; set PX_SIM_DEVICE=1 "
                 "in parallaxd's environment to offer them", d->cfg.devices, d->cfg.n_sim);
        return PX_ERR_INVALID_ARGUMENT;
    }
    *bytes_p = (uint64_t)px_env_int("PX_SIM_DEVICE_MB") << 20;
    return PX_OK;
}

/* Names `dv` KIND:I, or KIND:I/S (slot S of GPU I) when the node shares
 * its GPUs among `share` > 1 ranks (--gpu-share). */
static void nodes_slot_name(px_device_t *dv, const char *kind, int index, int slot, int share)
{
    if (share > 1)
        snprintf(dv->name, sizeof(dv->name), "%s:%d/%d", kind, index, slot);
    else
        snprintf(dv->name, sizeof(dv->name), "%s:%d", kind, index);
}

px_status_t px_nodes_init(px_daemon_t *d)
{
    px_gpu_info_t gpus[PX_NVML_MAX_GPUS];
    int ngpu = 0;
    uint64_t sim_bytes = 0;
    px_status_t status = nodes_gpus(d, gpus, &ngpu);
    if (status != PX_OK)
        return status;
    if ((status = nodes_sims(d, &sim_bytes)) != PX_OK)
        return status;
    /* --gpu-share N: each GPU (and sim device) is N slots, named
     * KIND:I/S, each with 1/N of its memory */
    const int share = d->cfg.gpu_share > 1 ? d->cfg.gpu_share : 1;
    d->n_devices = (ngpu + d->cfg.n_sim) * share + d->cfg.n_devices;
    d->devices = calloc((size_t)d->n_devices, sizeof(*d->devices));
    if (!d->devices)
        return PX_ERR_NO_MEMORY;
    px_device_t *dv = d->devices;
    for (int i = 0; i < ngpu; i++)
        px_info("device cuda:%d: %s, %.1f GiB (%.1f GiB used)%s", gpus[i].index, gpus[i].name,
                gpus[i].mem_total / 1073741824.0, gpus[i].mem_used / 1073741824.0,
                share > 1 ? ", offered as --gpu-share slots" : "");
    /* GPUs first, then the cpu:N devices, the sim devices last (a job
     * naming no devices takes them last); slot 0 of every GPU before slot
     * 1 of any, so that placement fills whole GPUs before it shares one */
    for (int s = 0; s < share; s++)
        for (int i = 0; i < ngpu; i++, dv++) {
            nodes_slot_name(dv, "cuda", gpus[i].index, s, share);
            dv->memory_bytes = gpus[i].mem_total / (uint64_t)share;
            dv->mem_used = gpus[i].mem_used / (uint64_t)share;
        }
    for (int i = 0; i < d->cfg.n_devices; i++, dv++) {
        snprintf(dv->name, sizeof(dv->name), "cpu:%d", i);
        /* cpu devices share the host's RAM (memfit.c) */
        dv->memory_bytes = px_memfit_host_ram() / (uint64_t)d->cfg.n_devices;
    }
    for (int i = 0; i < d->cfg.n_sim; i++)
        px_info("device sim:%d: simulated, %.1f GiB", i, sim_bytes / 1073741824.0);
    for (int s = 0; s < share; s++)
        for (int i = 0; i < d->cfg.n_sim; i++, dv++) {
            nodes_slot_name(dv, "sim", i, s, share);
            /* the arena's share, none used at start: each rank reserves an
             * arena of its own, the share is what the memory check allows */
            dv->memory_bytes = sim_bytes / (uint64_t)share;
        }
    for (int i = 0; i < d->cfg.n_peers; i++) {
        if (!strcmp(d->cfg.peers[i], d->peer_addr))
            continue; /* ourselves in a shared peer list */
        if (!px_nodes_peer_add(d, d->cfg.peers[i]))
            return PX_ERR_NO_MEMORY;
    }
    return PX_OK;
}

void px_nodes_fini(px_daemon_t *d)
{
    for (int i = 0; i < d->n_peers; i++) {
        px_rpc_channel_destroy(d->peers[i].channel);
        px_rpc_channel_destroy(d->peers[i].control);
        free(d->peers[i].devices);
        free(d->peers[i].gpus);
    }
    free(d->peers);
    d->peers = NULL;
    px_membership_fini(d);
    d->n_peers = 0;
    free(d->devices);
    d->devices = NULL;
}

int px_nodes_cluster_devices(px_daemon_t *d)
{
    int n = d->draining ? 0 : d->n_devices;
    for (int i = 0; i < d->n_peers; i++)
        if (d->peers[i].alive && !d->peers[i].draining)
            n += d->peers[i].n_devices;
    return n;
}

/* 1 if one of devs[0, n) is held by a job */
static int any_held(const px_device_t *devs, int n)
{
    for (int i = 0; i < n; i++)
        if (devs[i].job_id[0])
            return 1;
    return 0;
}

const char *px_nodes_state(px_daemon_t *d, const px_peer_t *p)
{
    if (p && !p->alive)
        return "DOWN";
    if (!p && d->stopping)
        return "STOPPING";
    if (!(p ? p->draining : d->draining))
        return "UP";
    return (p ? any_held(p->devices, p->n_devices) : any_held(d->devices, d->n_devices))
               ? "DRAINING"
               : "DRAINED";
}

/* appends `name`'s kind ("cpu" of "cpu:3") to the list `kinds` unless there */
static void add_kind(char *kinds, size_t len, const char *name)
{
    char k[16];
    const char *colon = strchr(name, ':');
    size_t have = strlen(kinds);
    snprintf(k, sizeof(k), "%.*s", colon ? (int)(colon - name) : (int)strlen(name), name);
    for (const char *p = kinds; (p = strstr(p, k)); p += strlen(k))
        if ((p == kinds || p[-1] == ' ') && (p[strlen(k)] == ',' || !p[strlen(k)]))
            return;
    snprintf(kinds + have, len - have, "%s%s", have ? ", " : "", k);
}

px_status_t px_nodes_devsel(px_daemon_t *d, const char *spec, px_devsel_t *sel_p, char *errbuf,
                            size_t errlen)
{
    px_devsel_t sel;
    char kinds[128] = "";
    int n = 0;

    if (px_devsel_parse(spec, &sel, errbuf, errlen) != PX_OK)
        return PX_ERR_INVALID_ARGUMENT;
    for (int i = 0; i < d->n_devices; i++) {
        n += px_devsel_match(&sel, d->devices[i].name);
        add_kind(kinds, sizeof(kinds), d->devices[i].name);
    }
    for (int p = 0; p < d->n_peers; p++)
        for (int i = 0; d->peers[p].alive && i < d->peers[p].n_devices; i++) {
            n += px_devsel_match(&sel, d->peers[p].devices[i].name);
            add_kind(kinds, sizeof(kinds), d->peers[p].devices[i].name);
        }
    if (!n)
        return px_invalid(errbuf, errlen, "devices='%s': no node of the cluster offers such a "
                          "device (it offers: %s; `pctl nodes` lists them)", spec,
                          kinds[0] ? kinds : "none");
    *sel_p = sel;
    return PX_OK;
}

static int count_selected(const px_devsel_t *sel, const px_device_t *devs, int n)
{
    int k = 0;
    for (int i = 0; i < n; i++)
        k += !sel || px_devsel_match(sel, devs[i].name);
    return k;
}

int px_nodes_device_counts(px_daemon_t *d, const px_devsel_t *sel, int with_draining,
                           int *counts, int max)
{
    int n = 0;
    if (n < max)
        counts[n++] = d->draining && !with_draining
                          ? 0
                          : count_selected(sel, d->devices, d->n_devices);
    for (int i = 0; i < d->n_peers && n < max; i++)
        if (d->peers[i].alive)
            counts[n++] = d->peers[i].draining && !with_draining
                              ? 0
                              : count_selected(sel, d->peers[i].devices, d->peers[i].n_devices);
    return n;
}

void px_nodes_draining_note(px_daemon_t *d, const px_devsel_t *sel, char *buf, size_t len)
{
    char names[400] = "";
    size_t off = 0;
    int k = 0;

    if (d->draining && count_selected(sel, d->devices, d->n_devices)) {
        off += (size_t)snprintf(names + off, sizeof(names) - off, "%s", d->cfg.name);
        k++;
    }
    for (int i = 0; i < d->n_peers && off < sizeof(names); i++) {
        const px_peer_t *p = &d->peers[i];
        if (p->alive && p->draining && count_selected(sel, p->devices, p->n_devices)) {
            off += (size_t)snprintf(names + off, sizeof(names) - off, "%s%s", k ? ", " : "",
                                    p->name);
            k++;
        }
    }
    if (!k)
        buf[0] = '\0';
    else
        snprintf(buf, len, "node%s %s %s draining", k == 1 ? "" : "s", names,
                 k == 1 ? "is" : "are");
}

static uint64_t min_memory(const px_devsel_t *sel, const px_device_t *devs, int n)
{
    uint64_t m = 0;
    for (int i = 0; i < n; i++)
        if (sel && !px_devsel_match(sel, devs[i].name))
            continue;
        else if (!devs[i].memory_bytes)
            return 0;
        else if (!m || devs[i].memory_bytes < m)
            m = devs[i].memory_bytes;
    return m;
}

int px_nodes_device_memory(px_daemon_t *d, const px_devsel_t *sel, const char **names,
                           uint64_t *mem, int max)
{
    int n = 0;
    if (n < max) {
        names[n] = d->cfg.name;
        mem[n++] = min_memory(sel, d->devices, d->n_devices);
    }
    for (int i = 0; i < d->n_peers && n < max; i++)
        if (d->peers[i].alive) {
            names[n] = d->peers[i].name;
            mem[n++] = min_memory(sel, d->peers[i].devices, d->peers[i].n_devices);
        }
    return n;
}

/* 1 when devs has a device in sel and every such one is "cuda:K" */
static int all_cuda(const px_devsel_t *sel, const px_device_t *devs, int n)
{
    int seen = 0;
    for (int i = 0; i < n; i++) {
        if (sel && !px_devsel_match(sel, devs[i].name))
            continue;
        if (strncmp(devs[i].name, "cuda:", 5))
            return 0;
        seen = 1;
    }
    return seen;
}

int px_nodes_device_cuda(px_daemon_t *d, const px_devsel_t *sel, int *cuda, int max)
{
    int n = 0;
    if (n < max)
        cuda[n++] = all_cuda(sel, d->devices, d->n_devices);
    for (int i = 0; i < d->n_peers && n < max; i++)
        if (d->peers[i].alive)
            cuda[n++] = all_cuda(sel, d->peers[i].devices, d->peers[i].n_devices);
    return n;
}

void px_nodes_peer_device_release(px_daemon_t *d, const char *node, const char *device,
                                  const char *job_id)
{
    px_peer_t *p = px_nodes_peer_by_name(d, node);
    for (int i = 0; p && i < p->n_devices; i++)
        if (!strcmp(p->devices[i].name, device) && !strcmp(p->devices[i].job_id, job_id))
            p->devices[i].job_id[0] = '\0';
}

px_peer_t *px_nodes_peer_by_name(px_daemon_t *d, const char *name)
{
    for (int i = 0; i < d->n_peers; i++)
        if (d->peers[i].name[0] && !strcmp(d->peers[i].name, name))
            return &d->peers[i];
    return NULL;
}

px_rpc_channel_t *px_nodes_control_channel(px_daemon_t *d, const char *name)
{
    px_peer_t *p = px_nodes_peer_by_name(d, name);
    if (!p || !p->control_addr[0])
        return NULL;
    if (!p->control && px_auth_channel_create(d, p->control_addr, 0, &p->control) != PX_OK)
        return NULL;
    return p->control;
}

void px_nodes_self_info(px_daemon_t *d, Parallax__V1__NodeInfo *info)
{
    parallax__v1__node_info__init(info);
    info->name = d->cfg.name;
    info->control_addr = d->control_addr;
    info->peer_addr = d->peer_addr;
    info->alive = 1;
    info->last_seen_ms = px_time_wall_ms();
    info->version = (char *)PX_VERSION;
    info->blas_core = d->blas.node_core; /* blas.c */
    info->blas_core_source = d->blas.source;
    info->draining = d->draining;
    info->state = (char *)px_nodes_state(d, NULL);
    info->n_devices = (size_t)d->n_devices;
    info->devices = calloc((size_t)d->n_devices, sizeof(*info->devices));
    for (int i = 0; info->devices && i < d->n_devices; i++) {
        Parallax__V1__Device *dev = malloc(sizeof(*dev));
        if (!dev) {
            info->n_devices = (size_t)i;
            break;
        }
        parallax__v1__device__init(dev);
        dev->name = d->devices[i].name;
        dev->job_id = d->devices[i].job_id;
        dev->memory_bytes = d->devices[i].memory_bytes;
        dev->mem_used = d->devices[i].mem_used;
        dev->blocked = d->devices[i].blocked;
        info->devices[i] = dev;
    }
    if (!info->devices)
        info->n_devices = 0;
    px_gputelem_to_info(d->gpus, d->n_gpus, info); /* none on failure */
}

void px_nodes_info_free(Parallax__V1__NodeInfo *info)
{
    for (size_t i = 0; i < info->n_devices; i++)
        free(info->devices[i]);
    free(info->devices);
    info->devices = NULL;
    info->n_devices = 0;
    px_gputelem_info_free(info);
}

/* Whether `p`'s name (just reported) collides with this node's or with
 * another live peer's: two daemons started without --name on one host both
 * take the host name, and the cluster would count them as one node. Such a
 * peer is an error: logged once (its peer address, the name, whose it is),
 * kept in p->conflict for ListNodes (pctl nodes), and not used. Both
 * daemons see it through their own heartbeats, so both log it. */
static int name_conflict(px_daemon_t *d, px_peer_t *p)
{
    char why[sizeof(p->conflict)];

    why[0] = '\0';
    if (!strcmp(p->name, d->cfg.name)) {
        snprintf(why, sizeof(why), "peer at %s reports the name '%s', which is this node's "
                 "name: every daemon needs its own --name", p->peer_addr, p->name);
    } else {
        for (int i = 0; i < d->n_peers; i++) {
            const px_peer_t *q = &d->peers[i];
            if (q != p && q->alive && !strcmp(q->name, p->name)) {
                snprintf(why, sizeof(why), "peer at %s reports the name '%s', which live peer "
                         "%s has: every daemon needs its own --name", p->peer_addr, p->name,
                         q->peer_addr);
                break;
            }
        }
    }
    if (why[0] && strcmp(why, p->conflict))
        px_error("%s; the peer is not used", why);
    else if (!why[0] && p->conflict[0])
        px_info("peer at %s: name conflict resolved, now '%s'", p->peer_addr, p->name);
    snprintf(p->conflict, sizeof(p->conflict), "%s", why);
    return why[0] != '\0';
}

const char *px_nodes_self_conflict(px_daemon_t *d)
{
    for (int i = 0; i < d->n_peers; i++)
        if (d->peers[i].conflict[0] && !strcmp(d->peers[i].name, d->cfg.name))
            return d->peers[i].conflict;
    return "";
}

/* Refreshes `p` from its NodeInfo. Only an answer to our own heartbeat
 * (`reachable`) makes a peer alive: an incoming heartbeat proves it can
 * reach us, not that our channel to it works. */
/* Refreshes `p`'s facts (name, addresses, devices, draining) from its
 * NodeInfo; whether it is alive is membership.c's (px_nodes_peer_alive). */
static void peer_update(px_daemon_t *d, px_peer_t *p, const Parallax__V1__NodeInfo *info)
{
    px_device_t *devs;

    if (info->name && *info->name)
        snprintf(p->name, sizeof(p->name), "%s", info->name);
    if (name_conflict(d, p)) {
        if (p->alive) {
            p->alive = 0; /* its devices leave the cluster's count */
            px_nodes_emit(d, PXD_NODE_DEVICES, NULL);
        }
        return;
    }
    if (info->control_addr && strcmp(p->control_addr, info->control_addr)) {
        snprintf(p->control_addr, sizeof(p->control_addr), "%s", info->control_addr);
        px_rpc_channel_destroy(p->control);
        p->control = NULL;
    }
    if (info->version)
        snprintf(p->version, sizeof(p->version), "%s", info->version);
    if (info->blas_core)
        snprintf(p->blas_core, sizeof(p->blas_core), "%s", info->blas_core);
    if (info->blas_core_source)
        snprintf(p->blas_core_source, sizeof(p->blas_core_source), "%s", info->blas_core_source);
    if (p->draining != (int)info->draining) {
        px_info("peer %s %s", p->name, info->draining ? "is draining: no new ranks there"
                                                      : "resumed: jobs are placed there again");
        p->draining = info->draining;
        px_nodes_emit(d, PXD_NODE_DEVICES, NULL); /* resumed: pending jobs may fit */
    }
    devs = calloc(info->n_devices ? info->n_devices : 1, sizeof(*devs));
    if (devs) {
        for (size_t i = 0; i < info->n_devices; i++) {
            snprintf(devs[i].name, sizeof(devs[i].name), "%s", info->devices[i]->name);
            snprintf(devs[i].job_id, sizeof(devs[i].job_id), "%s",
                     info->devices[i]->job_id ? info->devices[i]->job_id : "");
            devs[i].memory_bytes = info->devices[i]->memory_bytes;
            devs[i].mem_used = info->devices[i]->mem_used;
            snprintf(devs[i].blocked, sizeof(devs[i].blocked), "%s",
                     info->devices[i]->blocked ? info->devices[i]->blocked : "");
        }
        free(p->devices);
        p->devices = devs;
        p->n_devices = (int)info->n_devices;
    }
    px_gputelem_from_info(p, info);
}

void px_nodes_peer_alive(px_daemon_t *d, px_peer_t *p, int alive)
{
    if (alive)
        px_nodes_peer_seen(p);
    if (alive == p->alive || (alive && p->conflict[0]))
        return;
    p->alive = alive;
    if (alive) {
        px_info("peer %s (%s) is alive with %d devices", p->name, p->peer_addr, p->n_devices);
        px_rpc_channel_reconnect_now(p->channel); /* it may have waited out a backoff */
        px_nodes_emit(d, PXD_NODE_DEVICES, NULL);
        p->up_pending = 1; /* membership.c: names registered once our channel works */
    } else {
        px_warn("peer %s (%s) is dead (SWIM: suspected and not refuted)", p->name, p->peer_addr);
        px_nodes_emit(d, PXD_NODE_DEAD, p); /* its jobs fail, its jobs' ranks stop */
    }
}

void px_nodes_peer_seen(px_peer_t *p)
{
    p->last_seen_ms = px_time_wall_ms();
    p->last_seen_mono_ms = px_time_mono_ms();
}

px_peer_t *px_nodes_peer_by_addr(px_daemon_t *d, const char *addr)
{
    for (int i = 0; addr && i < d->n_peers; i++)
        if (!strcmp(d->peers[i].peer_addr, addr))
            return &d->peers[i];
    return NULL;
}

px_peer_t *px_nodes_heard(px_daemon_t *d, const Parallax__V1__NodeInfo *info)
{
    px_peer_t *p;

    if (!info || !info->name || !*info->name)
        return NULL;
    if (!strcmp(info->name, d->cfg.name) &&
        (!info->peer_addr || !*info->peer_addr || !strcmp(info->peer_addr, d->peer_addr)))
        return NULL; /* this node (another one taking its name is a conflict: below) */
    /* by address first: a name may be in conflict (name_conflict) */
    p = px_nodes_peer_by_addr(d, info->peer_addr);
    if (!p)
        p = px_nodes_peer_by_name(d, info->name);
    if (!p) {
        if (!info->peer_addr || !*info->peer_addr)
            return NULL;
        p = px_nodes_peer_add(d, info->peer_addr);
        if (!p)
            return NULL;
    }
    peer_update(d, p, info);
    return p;
}

void px_nodes_device_set(px_daemon_t *d, const char *device, const char *job_id)
{
    for (int i = 0; i < d->n_devices; i++)
        if (!strcmp(d->devices[i].name, device))
            snprintf(d->devices[i].job_id, sizeof(d->devices[i].job_id), "%s", job_id);
}

