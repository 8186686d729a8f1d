/* px_path.h: the table of the transport's paths (internal; px__ prefixed).
 *
 * A path moves a collective's data by other means than the host
 * algorithms over UCX (coll/): the shared-memory segment of one host's
 * ranks (paths/shm), the peers' device memory mapped through CUDA IPC
 * (paths/ipc), device buffers staged chunk by chunk through host memory
 * (paths/stage). As NCCL's `struct ncclTransport` (transport.h: canConnect,
 * setup, connect, free, ...), each path fills one px__path_t with its
 * operations and the core (px_coll.c, px_request.c, px_comm.c,
 * px_progress.c) reaches it only through the table in px_path.c: it never
 * names a path's functions nor includes a path's header. Adding a path (the
 * NCCL engine, UCX with CUDA memory) is a folder under paths/ and one line
 * of the table.
 *
 * A collective's start, and a send's or a receive's (px_coll.c), asks the
 * paths in table order whether they want it (shm, ipc, stage); the first
 * that does runs it (shm, nccl, ipc, stage), and when none does the host algorithm (px_algo.c)
 * runs it. Every operation but `wants` may be
 * NULL (nothing to do). Runs on the thread using the communicator. */
#ifndef PX_PATH_H
#define PX_PATH_H

#include <stdint.h>

#include "px_transport_int.h"

/* One path's operations. */
typedef struct px__path {
    const char *name; /* "shm", "ipc", "stage": log lines */

    /* --- per collective ---------------------------------------------------- */
    /* 1 when this path runs collective `a` on `comm`, else 0. The same
     * arguments give the same answer on every rank. May run collectives of
     * its own (the IPC path's setup at its first call; every rank asks at
     * the same point), so it is asked before the request takes its
     * sequence number. */
    int (*wants)(px_comm_t *comm, const px__coll_args_t *a);
    /* A path that makes its own request (shm: its requests skip the UCX
     * header exchange): starts `a` and returns it in *req_p. NULL for a
     * path that runs on a request the core created. */
    px_status_t (*enqueue)(px_comm_t *comm, const px__coll_args_t *a, px_request_t **req_p);
    /* A path on a core-made request: `req` is created (sequence number
     * taken, header exchange posted, req->path set), has elements to move
     * and more than one rank unless the path's collective says otherwise;
     * sets req->advance and its own state (req_free frees it).
     * PX_ERR_NO_MEMORY and the like: the caller discards req. */
    px_status_t (*start)(px_request_t *req, const px__coll_args_t *a);

    /* --- per request of this path (req->path) ------------------------------- */
    /* The request ends with `status` (failed or not, before its temporaries
     * go back): wait for what the path still has in flight on the caller's
     * buffers. */
    void (*req_end)(px_request_t *req, px_status_t status);
    /* A request still in progress is cancelled (px_request_cancel): the
     * ranks' path state no longer agrees; turn the path off for the comm. */
    void (*req_cancel)(px_request_t *req);
    /* Frees the path's state of `req` and, where the path made the request
     * (enqueue), the request itself: returns 1 then, else 0 (the core frees
     * it). */
    int (*req_free)(px_request_t *req);
    /* The comm rank a pending request of this path waits for, or -1 (error
     * messages name it). */
    int (*waiting_for)(const px_request_t *req);

    /* --- per communicator (every path, in table order) ----------------------- */
    /* Collective over a new communicator, right after it is connected:
     * sets up what the path keeps for it (or nothing, where the path is not
     * for it). Returns the failure of the collectives it ran. */
    px_status_t (*comm_setup)(px_comm_t *comm);
    /* Undoes comm_setup and whatever the path set up later; idempotent. */
    void (*comm_destroy)(px_comm_t *comm);
    /* 1 when the path compares the headers of collectives that do not take
     * it (shm: the segment's header ring), so that those must keep the
     * header exchange (no header-in-data all-reduce). */
    int (*checks_headers)(const px_comm_t *comm);
    /* A collective that does not take the path got sequence number
     * req->seq: write its header where the path's ranks look (shm). */
    void (*note)(const px_request_t *req);
    /* A request in its header stage: PX_ERR_MISMATCH when the path's ranks
     * disagree with its header (naming both values), else PX_OK. */
    px_status_t (*hdr_check)(px_request_t *req);
    /* A collective of `comm` failed with a mismatch, seen by every rank:
     * the path's counters may disagree; stop using it on `comm`. */
    void (*mismatch)(px_comm_t *comm);
    /* The sleep hook of blocking progress: when the path has a pending
     * request on comm's worker waiting on a peer, sleeps on it (at most
     * `timeout_ms`) and returns 1; else 0 (the caller polls its fds). */
    int (*sleep)(px_comm_t *comm, int timeout_ms);
} px__path_t;

/* The paths, defined in their folders (paths/NAME/); px_path.c orders them. */
extern const px__path_t px__path_shm;
extern const px__path_t px__path_nccl;
extern const px__path_t px__path_ipc;
extern const px__path_t px__path_stage;

/* --- px_path.c: the table, asked by the core ---------------------------------- */

/* The first path (table order) that wants `a` on `comm`, or NULL: the
 * host algorithm runs it. */
const px__path_t *px__path_choose(px_comm_t *comm, const px__coll_args_t *a);
/* Records that a collective of `comm` on host (device 0) or device (1)
 * buffers runs on `path` (NULL: the host algorithm), for px_comm_paths. */
void px__path_used(px_comm_t *comm, const px__path_t *path, int device);
/* Every path's comm_setup, in order; stops at the first failure. The paths
 * its exchanges took are forgotten (px_comm_paths counts from there). */
px_status_t px__paths_comm_setup(px_comm_t *comm);
/* Every path's comm_destroy, in order. */
void px__paths_comm_destroy(px_comm_t *comm);
/* 1 when some path checks the headers of the collectives it does not run. */
int px__paths_check_headers(const px_comm_t *comm);
/* Every path's note / hdr_check (first failure) / mismatch. */
void px__paths_note(const px_request_t *req);
px_status_t px__paths_hdr_check(px_request_t *req);
void px__paths_mismatch(px_comm_t *comm);
/* The first path that slept on comm's behalf: 1, else 0. */
int px__paths_sleep(px_comm_t *comm, int timeout_ms);
/* req->path's operations where it has them (no-op, -1 or 0 otherwise). */
void px__path_req_end(px_request_t *req, px_status_t status);
void px__path_req_cancel(px_request_t *req);
int px__path_req_free(px_request_t *req);
int px__path_waiting_for(const px_request_t *req);

#endif
