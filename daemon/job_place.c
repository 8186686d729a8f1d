/* job_place.c: placement of PENDING jobs on free devices.
 *
 * The layout's world of ranks is placed with px_layout_place: nodes in
 * order, this node first, then the alive peers as listed; a tensor group
 * never spans nodes. Jobs are placed oldest first, and the first that does
 * not fit stops the round (FIFO, no overtaking). A device is free for a
 * job when its node shows it free and not blocked (a process that is not
 * its node's holds its GPU: gputelem.c), no placed job of this
 * coordinator holds it and the job's device selection (JobSpec.devices,
 * devsel.h) takes it;
 * a draining node (drain.c) offers none.
 * Loop thread only. */
#include <stdlib.h>
#include <string.h>

#include "daemon.h"
#include "job_int.h"
#include "px_log.h"
#include "jobspec.h"

/* 1 if (node, device) is held by a placed, active job of this coordinator. */
static int reserved(px_daemon_t *d, const char *node, const char *device)
{
    for (px_job_t *j = d->jobs; j; j = j->next) {
        if (!px__job_is_placed_active(j))
            continue;
        for (int r = 0; r < j->world; r++)
            if (!strcmp(j->ranks[r].node, node) && !strcmp(j->ranks[r].device, device) &&
                strcmp(j->ranks[r].state, "exited"))
                return 1;
    }
    return 0;
}

/* One node's free devices, as place() sees them. */
typedef struct {
    const char *name;
    const px_device_t *devices;
    int n_devices;
    int n_free, next; /* free devices; next device index to hand out */
    const px_devsel_t *sel; /* the job's devices (JobSpec.devices) */
} place_node_t;

/* 1 if device i of node n is free for a new job. */
static int device_free(px_daemon_t *d, const place_node_t *n, int i)
{
    return !n->devices[i].job_id[0] && !n->devices[i].blocked[0] &&
           !reserved(d, n->name, n->devices[i].name) &&
           px_devsel_match(n->sel, n->devices[i].name);
}

/* Tries to place one PENDING job; 1 if placed. The job's layout decides
 * (px_layout_place): its world of ranks in rank order, tensor groups whole
 * on one node, this node first, then the alive peers. */
static int place(px_job_t *job)
{
    px_daemon_t *d = job->d;
    px_layout_t l;
    int need, nn = 0, placed = 0;
    place_node_t *nodes = calloc((size_t)d->n_peers + 1, sizeof(*nodes));
    int *node_free = calloc((size_t)d->n_peers + 1, sizeof(*node_free));
    int *node_of_rank = NULL;
    px_job_rank_t *ranks = NULL;
    char why[512];

    px_devsel_t sel;
    px_jobspec_layout(job->spec, &l);
    need = px_layout_world(&l);
    if (!nodes || !node_free || need < 1)
        goto out;
    /* checked at SubmitJob; a stored job's selection still parses */
    if (px_devsel_parse(job->spec->devices, &sel, why, sizeof(why)) != PX_OK) {
        px_error("job %s: %s", job->id, why);
        goto out;
    }
    /* a draining node takes no new ranks (drain.c) */
    if (!d->draining)
        nodes[nn++] = (place_node_t){d->cfg.name, d->devices, d->n_devices, 0, 0, &sel};
    for (int p = 0; p < d->n_peers; p++)
        if (d->peers[p].alive && d->peers[p].name[0] && !d->peers[p].draining)
            nodes[nn++] = (place_node_t){d->peers[p].name, d->peers[p].devices,
                                         d->peers[p].n_devices, 0, 0, &sel};
    for (int n = 0; n < nn; n++) {
        for (int i = 0; i < nodes[n].n_devices; i++)
            nodes[n].n_free += device_free(d, &nodes[n], i);
        node_free[n] = nodes[n].n_free;
    }
    node_of_rank = calloc((size_t)need, sizeof(*node_of_rank));
    ranks = calloc((size_t)need, sizeof(*ranks));
    if (!node_of_rank || !ranks)
        goto out;
    if (px_layout_place(&l, node_free, nn, node_of_rank, why, sizeof(why)) != PX_OK) {
        px_debug("job %s waits: %s", job->id, why); /* devices busy: stays PENDING */
        goto out;
    }
    for (int r = 0; r < need; r++) {
        place_node_t *n = &nodes[node_of_rank[r]];
        while (!device_free(d, n, n->next))
            n->next++; /* px_layout_place counted them: one is left */
        snprintf(ranks[r].node, sizeof(ranks[r].node), "%s", n->name);
        snprintf(ranks[r].device, sizeof(ranks[r].device), "%s", n->devices[n->next].name);
        snprintf(ranks[r].state, sizeof(ranks[r].state), "pending");
        n->next++;
    }
    job->ranks = ranks;
    ranks = NULL;
    job->world = need;
    job->n_registered = 0;
    job->n_exited_ok = 0;
    job->state = PARALLAX__V1__JOB_STATE__JOB_STARTING;
    px__job_save(job);
    {
        char where[512] = "";
        size_t off = 0;
        for (int r = 0; r < need && off < sizeof(where) - 64; r++)
            off += (size_t)snprintf(where + off, sizeof(where) - off, "%s%d=%s/%s",
                                    r ? " " : "", r, job->ranks[r].node, job->ranks[r].device);
        px__job_event(job, "STARTING: placed %s", where);
    }
    px__job_watchers_notify(job, NULL);
    px__job_launch(job);
    placed = 1;
out:
    free(ranks);
    free(node_of_rank);
    free(node_free);
    free(nodes);
    return placed;
}

void px_job_schedule(px_daemon_t *d)
{
    px_job_t *pending[64];
    int n = 0;
    static int busy;

    if (busy || d->stopping)
        return;
    busy = 1; /* place() -> finish() -> schedule() must not recurse */
    for (px_job_t *j = d->jobs; j; j = j->next) {
        px__job_watchers_sweep(j);
        if (j->state == PARALLAX__V1__JOB_STATE__JOB_PENDING && !strcmp(j->coordinator, d->cfg.name)) {
            if (n == 64)
                memmove(pending, pending + 1, sizeof(pending[0]) * 63), n = 63;
            pending[n++] = j;
        }
    }
    /* list is newest first: place oldest first; stop at the first that
     * does not fit (FIFO, no overtaking) */
    for (int i = n - 1; i >= 0; i--)
        if (!place(pending[i]))
            break;
    busy = 0;
}
