/* px_path.c: the table of the transport's paths (px_path.h) and the core's
 * only way to them.
 *
 * Order matters: a collective takes the first path that wants it. The
 * shared-memory path wants host buffers only, NCCL, CUDA IPC and staging
 * device buffers only; NCCL comes before the other two (where PX_COLL_BACKEND and the
 * ranks' GPUs let it run a communicator, it runs every collective it has),
 * and IPC comes before staging (staging takes every device
 * buffer IPC leaves: ranks on several nodes, IPC off, fp16/bf16
 * reductions). */
#include "px_path.h"

#include <stddef.h>
#include <stdio.h>

static const px__path_t *const paths[] = {&px__path_shm, &px__path_nccl, &px__path_ipc,
                                          &px__path_stage};
#define NPATHS (sizeof(paths) / sizeof(*paths))

const px__path_t *px__path_choose(px_comm_t *comm, const px__coll_args_t *a)
{
    for (size_t i = 0; i < NPATHS; i++)
        if (paths[i]->wants(comm, a))
            return paths[i];
    return NULL;
}

void px__path_used(px_comm_t *comm, const px__path_t *path, int device)
{
    size_t i = 0;
    while (i < NPATHS && paths[i] != path)
        i++; /* NULL (the host algorithm): NPATHS */
    comm->paths_used[device ? 1 : 0] |= 1u << i;
}

int px_comm_paths(const px_comm_t *comm, int device, char *buf, size_t len)
{
    unsigned used = comm ? comm->paths_used[device ? 1 : 0] : 0;
    int n = 0;
    if (len)
        buf[0] = '\0';
    for (size_t i = 0; i <= NPATHS; i++) {
        if (!(used & (1u << i)))
            continue;
        size_t at = (size_t)n < len ? (size_t)n : len;
        n += snprintf(len ? buf + at : NULL, len - at, "%s%s", n ? "," : "",
                      i < NPATHS ? paths[i]->name : "ucx");
    }
    return n;
}

px_status_t px__paths_comm_setup(px_comm_t *comm)
{
    for (size_t i = 0; i < NPATHS; i++) {
        if (paths[i]->comm_setup) {
            px_status_t status = paths[i]->comm_setup(comm);
            if (status != PX_OK)
                return status;
        }
    }
    /* the setup's own exchanges ran before the paths were there (the
     * host algorithm where shm runs everything after): not the
     * communicator's paths */
    comm->paths_used[0] = comm->paths_used[1] = 0;
    return PX_OK;
}

void px__paths_comm_destroy(px_comm_t *comm)
{
    for (size_t i = 0; i < NPATHS; i++)
        if (paths[i]->comm_destroy)
            paths[i]->comm_destroy(comm);
}

int px__paths_check_headers(const px_comm_t *comm)
{
    for (size_t i = 0; i < NPATHS; i++)
        if (paths[i]->checks_headers && paths[i]->checks_headers(comm))
            return 1;
    return 0;
}

void px__paths_note(const px_request_t *req)
{
    for (size_t i = 0; i < NPATHS; i++)
        if (paths[i]->note)
            paths[i]->note(req);
}

px_status_t px__paths_hdr_check(px_request_t *req)
{
    for (size_t i = 0; i < NPATHS; i++) {
        if (paths[i]->hdr_check) {
            px_status_t status = paths[i]->hdr_check(req);
            if (status != PX_OK)
                return status;
        }
    }
    return PX_OK;
}

void px__paths_mismatch(px_comm_t *comm)
{
    for (size_t i = 0; i < NPATHS; i++)
        if (paths[i]->mismatch)
            paths[i]->mismatch(comm);
}

int px__paths_sleep(px_comm_t *comm, int timeout_ms)
{
    for (size_t i = 0; i < NPATHS; i++)
        if (paths[i]->sleep && paths[i]->sleep(comm, timeout_ms))
            return 1;
    return 0;
}

void px__path_req_end(px_request_t *req, px_status_t status)
{
    if (req->path && req->path->req_end)
        req->path->req_end(req, status);
}

void px__path_req_cancel(px_request_t *req)
{
    if (req->path && req->path->req_cancel)
        req->path->req_cancel(req);
}

int px__path_req_free(px_request_t *req)
{
    return req->path && req->path->req_free ? req->path->req_free(req) : 0;
}

int px__path_waiting_for(const px_request_t *req)
{
    return req->path && req->path->waiting_for ? req->path->waiting_for(req) : -1;
}
