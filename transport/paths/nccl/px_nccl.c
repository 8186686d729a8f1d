/* px_nccl.c: collectives on device buffers through NCCL (px_devmem.h says
 * when: PX_COLL_BACKEND), as a path of the table (px_path.h).
 *
 * Per communicator, at its first collective on device buffers (every rank
 * asks the paths at the same point, so the setup's host collectives line
 * up, as the IPC path's do): each rank offers its GPU's identity (its
 * node name and PCI bus id, from the registered px_comm_device_t) or why
 * it has none (not a CUDA rank, NCCL not loaded: px_nccl_lib.c), the
 * offers go round in one all-gather, and when every rank offered one and
 * no two share a GPU (px__nccl_gpus_distinct: NCCL refuses two ranks on
 * one GPU) rank 0's ncclUniqueId goes to every rank in a broadcast of the
 * communicator (the channel the bootstrap built: it reaches every rank of
 * a world and of each split of it), every rank initialises its NCCL
 * communicator, and a second all-gather says whether every rank's init
 * succeeded. Every rank thus takes the same decision; it logs it (the
 * engine and why), keeps it for the communicator's life, and reports it
 * through px_comm_device_engine.
 *
 * The init is nonblocking where the library has ncclCommInitRankConfig
 * (NCCL 2.14 and later): it is polled against the collective's deadline
 * (every millisecond; setup only), and one that does not finish in time
 * is aborted, so a rank whose peers never join does not hang in NCCL's
 * own bootstrap. A nonblocking communicator's calls may answer "in
 * progress"; they are settled the same way.
 *
 * A collective: the NCCL call (all-to-all(-v): one ncclSend/ncclRecv pair
 * per peer in a group) on the registered stream, which is the compute
 * stream, so it sees what the kernels before it wrote and the kernels
 * after it see its result; AVG is NCCL's SUM divided once by the kernel
 * table's reduce_avg_finish (integers truncate, as every path). Then a
 * fence (px_comm_device.h) whose descriptor the request's step polls and
 * the blocking waits sleep on (with the communicator's own descriptors:
 * px__sleep_fd), at most 100 ms at a time so that NCCL's asynchronous
 * errors (ncclCommGetAsyncError, read at each step) are seen. A request
 * that fails (its deadline, a dead peer, an abort) or is cancelled while
 * NCCL still runs aborts the NCCL communicator (ncclCommAbort makes its
 * kernels return); later device collectives of that communicator fail,
 * naming the abort.
 *
 * Runs on the thread using the communicator. */
#include "px_nccl.h"

#include <limits.h>
#include <poll.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>

#include "px_env.h"
#include "px_log.h"
#include "px_nccl_lib.h"
#include "px_path.h"
#include "px_time.h"

#define WHY_LEN 320
#define SLEEP_SLICE_MS 100 /* the longest sleep between two looks at NCCL's async error */

struct px__nccl {
    int state;                    /* 1 NCCL, 0 the transport's paths, -1 the device
                                   * collectives fail (PX_COLL_BACKEND=nccl without
                                   * NCCL, or the NCCL communicator was aborted) */
    char why[WHY_LEN];            /* the decision in words */
    const px__nccl_lib_t *lib;
    const px_comm_device_t *dev;
    px__nccl_comm_t nc;           /* NULL unless state 1 */
};

struct px__ncclreq {
    void *fence;                  /* after the collective on the stream */
    int fired;
};

/* --- the pure parts (px_nccl.h) ------------------------------------------------ */

int px__nccl_backend_parse(const char *value, px__coll_backend_t *backend_p)
{
    if (!value || !*value || !strcasecmp(value, "auto"))
        *backend_p = PX__BACKEND_AUTO;
    else if (!strcasecmp(value, "nccl"))
        *backend_p = PX__BACKEND_NCCL;
    else if (!strcasecmp(value, "px"))
        *backend_p = PX__BACKEND_PX;
    else
        return -1;
    return 0;
}

typedef struct {
    const char *id;
    int rank;
} gpu_t;

static int gpu_cmp(const void *x, const void *y)
{
    const gpu_t *a = x, *b = y;
    int c = strcmp(a->id, b->id);
    return c ? c : (a->rank > b->rank) - (a->rank < b->rank);
}

int px__nccl_gpus_distinct(const char *const *ids, int n, int *a_p, int *b_p)
{
    gpu_t *g = malloc((size_t)(n > 0 ? n : 1) * sizeof(*g));
    int ret = 1;

    if (!g)
        return -1;
    for (int r = 0; r < n; r++) {
        g[r].id = ids[r];
        g[r].rank = r;
    }
    qsort(g, (size_t)n, sizeof(*g), gpu_cmp);
    for (int i = 1; i < n; i++) {
        if (!strcmp(g[i - 1].id, g[i].id)) {
            *a_p = g[i - 1].rank;
            *b_p = g[i].rank;
            ret = 0;
            break;
        }
    }
    free(g);
    return ret;
}

/* --- setup --------------------------------------------------------------------- */

/* One rank's word in the setup's all-gathers: ok and its GPU's identity,
 * or not and why. */
typedef struct {
    int32_t ok;
    char text[252];
} offer_t;

static px_status_t gather(px_comm_t *comm, int ok, const char *text, offer_t *all,
                          int timeout_ms)
{
    offer_t me;
    px_coll_opts_t o = {PX_ALGO_AUTO, timeout_ms};

    memset(&me, 0, sizeof me);
    me.ok = ok;
    snprintf(me.text, sizeof me.text, "%s", text);
    return px_allgather(comm, &me, all, sizeof me, PX_UINT8, &o);
}

/* Waits out NCCL's "in progress" (a nonblocking communicator) until
 * `deadline`: the call's final result, or -1 when the deadline passed. */
static int settle(const struct px__nccl *nc, int rc, int64_t deadline)
{
    while (rc == PX__NCCL_IN_PROGRESS) {
        struct timespec ms = {0, 1000 * 1000};
        int state = PX__NCCL_IN_PROGRESS;
        int q = nc->lib->comm_get_async_error(nc->nc, &state);
        if (q != PX__NCCL_SUCCESS)
            return q;
        if (state != PX__NCCL_IN_PROGRESS)
            return state;
        if (px_time_mono_ms() >= deadline)
            return -1;
        nanosleep(&ms, NULL); /* setup and NCCL's connection set-up only */
    }
    return rc;
}

static const char *result_text(const struct px__nccl *nc, int rc)
{
    return rc == -1 ? "deadline passed" : px__nccl_strerror(nc->lib, rc);
}

/* Rank 0's unique id to every rank, then this rank's init: 1 on success,
 * else 0 with `err` saying why (nc->nc stays NULL). */
static int init(px_comm_t *comm, struct px__nccl *nc, int timeout_ms, char *err, size_t len)
{
    struct {
        int32_t ok;
        int32_t pad;
        px__nccl_uid_t uid;
    } msg;
    px_coll_opts_t o = {PX_ALGO_AUTO, timeout_ms};
    int64_t deadline = px__deadline(comm, timeout_ms);
    int rc;

    memset(&msg, 0, sizeof msg);
    if (comm->rank == 0) {
        rc = nc->lib->get_unique_id(&msg.uid);
        msg.ok = rc == PX__NCCL_SUCCESS;
        if (!msg.ok)
            snprintf(err, len, "ncclGetUniqueId: %s", result_text(nc, rc));
    }
    if (px_bcast(comm, &msg, sizeof msg, PX_UINT8, 0, &o) != PX_OK) {
        snprintf(err, len, "the broadcast of NCCL's unique id failed: %s",
                 px_comm_last_error(comm));
        return 0;
    }
    if (!msg.ok) {
        if (comm->rank != 0)
            snprintf(err, len, "rank 0's ncclGetUniqueId failed");
        return 0;
    }
    if (nc->lib->comm_init_rank_config) {
        px__nccl_config_t cfg = {sizeof cfg, 0xcafebeefu, 21403u, 0, INT_MIN, INT_MIN, INT_MIN,
                                 NULL};
        rc = nc->lib->comm_init_rank_config(&nc->nc, comm->size, msg.uid, comm->rank, &cfg);
        if (rc == PX__NCCL_SUCCESS && nc->nc)
            rc = PX__NCCL_IN_PROGRESS; /* nonblocking: its state says when it is done */
        if (nc->nc)
            rc = settle(nc, rc, deadline);
    } else {
        rc = nc->lib->comm_init_rank(&nc->nc, comm->size, msg.uid, comm->rank);
    }
    if (rc != PX__NCCL_SUCCESS) {
        snprintf(err, len, "ncclCommInitRank: %s", result_text(nc, rc));
        if (nc->nc)
            nc->lib->comm_abort(nc->nc);
        nc->nc = NULL;
        return 0;
    }
    return 1;
}

static void version_text(int v, char *buf, size_t len)
{
    if (v >= 10000) /* NCCL_VERSION from 2.9: X*10000 + Y*100 + Z */
        snprintf(buf, len, "%d.%d.%d", v / 10000, v / 100 % 100, v % 100);
    else
        snprintf(buf, len, "%d.%d.%d", v / 1000, v / 100 % 10, v % 100);
}

/* The decision of `comm` (collective; see the top of the file). */
static void decide(px_comm_t *comm, int timeout_ms)
{
    const int n = comm->size, r = comm->rank;
    struct px__nccl *nc = calloc(1, sizeof(*nc));
    offer_t *all = calloc((size_t)n, sizeof(*all));
    const char **ids = calloc((size_t)n, sizeof(*ids));
    px__coll_backend_t backend = PX__BACKEND_AUTO;
    char text[WHY_LEN] = "", bus[64] = "";
    int ok = 1, a = -1, b = -1, bad = -1;

    if (!nc || !all || !ids) {
        px__comm_set_error(comm, PX_ERR_NO_MEMORY, "no memory to choose the device engine");
        free(nc);
        goto out;
    }
    comm->nccl = nc;
    (void)px__nccl_backend_parse(px_env_str("PX_COLL_BACKEND"), &backend); /* checked at setup */
    if (backend == PX__BACKEND_PX) {
        snprintf(nc->why, sizeof nc->why, "PX_COLL_BACKEND=px");
        goto decided;
    }
    nc->dev = px__comm_device();
    if (!nc->dev) {
        ok = 0;
        snprintf(text, sizeof text, "no CUDA device (not a GPU rank)");
    } else if (nc->dev->gpu_id(bus, sizeof bus) != 0 || !*bus) {
        ok = 0;
        snprintf(text, sizeof text, "its GPU's PCI bus id is unknown");
    } else {
        const char *node = comm->root->nodes ? comm->root->nodes[px_comm_world_rank(comm, r)] : "";
        snprintf(text, sizeof text, "%s/%s", node, bus);
    }
    if (ok) {
        char lwhy[WHY_LEN];
        nc->lib = px__nccl_lib(lwhy, sizeof lwhy);
        if (!nc->lib) {
            ok = 0;
            snprintf(text, sizeof text, "NCCL not loaded: %.280s", lwhy);
        }
    }
    if (gather(comm, ok, text, all, timeout_ms) != PX_OK) {
        snprintf(nc->why, sizeof nc->why, "the engine's setup exchange failed: %s",
                 px_comm_last_error(comm));
        goto decided;
    }
    for (int q = 0; q < n && bad < 0; q++)
        if (!all[q].ok)
            bad = q;
    if (bad >= 0) {
        snprintf(nc->why, sizeof nc->why, "rank %d: %s", bad, all[bad].text);
        goto decided;
    }
    for (int q = 0; q < n; q++)
        ids[q] = all[q].text;
    switch (px__nccl_gpus_distinct(ids, n, &a, &b)) {
    case 0:
        snprintf(nc->why, sizeof nc->why, "ranks %d and %d share GPU %s (NCCL takes one rank per "
                 "GPU)", a, b, all[a].text);
        goto decided;
    case -1:
        snprintf(nc->why, sizeof nc->why, "no memory to compare the ranks' GPUs");
        goto decided;
    }
    ok = init(comm, nc, timeout_ms, text, sizeof text);
    if (gather(comm, ok, ok ? "" : text, all, timeout_ms) != PX_OK) {
        snprintf(nc->why, sizeof nc->why, "the engine's setup exchange failed: %s",
                 px_comm_last_error(comm));
    } else {
        for (int q = 0; q < n && bad < 0; q++)
            if (!all[q].ok)
                bad = q;
        if (bad < 0) {
            char v[32];
            version_text(nc->lib->version, v, sizeof v);
            nc->state = 1;
            snprintf(nc->why, sizeof nc->why, "NCCL %s, every rank its own GPU", v);
        } else {
            snprintf(nc->why, sizeof nc->why, "rank %d: %s", bad, all[bad].text);
        }
    }
    if (nc->state != 1 && nc->nc) {
        nc->lib->comm_abort(nc->nc);
        nc->nc = NULL;
    }
decided:
    if (nc->state == 1) {
        px_info("comm %u rank %d of %d: collectives on device buffers run on NCCL (%s)",
                comm->id, r, n, nc->why);
    } else if (backend == PX__BACKEND_NCCL) {
        nc->state = -1;
        px_error("comm %u rank %d of %d: PX_COLL_BACKEND=nccl, but NCCL cannot run this "
                 "communicator: %s", comm->id, r, n, nc->why);
    } else {
        px_info("comm %u rank %d of %d: collectives on device buffers run on parallax's own "
                "paths, not NCCL: %s", comm->id, r, n, nc->why);
    }
out:
    free(all);
    free(ids);
}

/* --- collectives ---------------------------------------------------------------- */

static int nccl_dtype(px_dtype_t dtype)
{
    switch (dtype) {
    case PX_FLOAT32: return PX__NCCL_FLOAT32;
    case PX_FLOAT64: return PX__NCCL_FLOAT64;
    case PX_FLOAT16: return PX__NCCL_FLOAT16;
    case PX_BFLOAT16: return PX__NCCL_BFLOAT16;
    case PX_INT32: return PX__NCCL_INT32;
    case PX_INT64: return PX__NCCL_INT64;
    case PX_UINT8: return PX__NCCL_UINT8;
    }
    return -1;
}

static int nccl_op(px_redop_t op)
{
    switch (op) {
    case PX_SUM: return PX__NCCL_SUM;
    case PX_PROD: return PX__NCCL_PROD;
    case PX_MIN: return PX__NCCL_MIN;
    case PX_MAX: return PX__NCCL_MAX;
    case PX_AVG: return PX__NCCL_AVG;
    }
    return -1;
}

/* Aborts `comm`'s NCCL communicator (its kernels return); the device
 * collectives after it fail naming `why`. */
static void abort_nccl(px_comm_t *comm, const char *why)
{
    struct px__nccl *nc = comm->nccl;

    if (!nc || !nc->nc)
        return;
    px_warn("comm %u rank %d: aborting its NCCL communicator: %s", comm->id, comm->rank, why);
    nc->lib->comm_abort(nc->nc);
    nc->nc = NULL;
    nc->state = -1;
    snprintf(nc->why, sizeof nc->why, "its NCCL communicator was aborted (%s)", why);
}

/* Issues collective `a` on the stream: PX__NCCL_SUCCESS or NCCL's error
 * (-1: a deadline passed while NCCL said "in progress"). */
static int issue(px_comm_t *comm, struct px__nccl *nc, const px__coll_args_t *a, int64_t deadline)
{
    const px_kernel_ops_t *k = px__dev_ops();
    const px__nccl_lib_t *l = nc->lib;
    void *s = nc->dev->stream();
    const int n = comm->size, dt = nccl_dtype(a->dtype);
    const size_t esz = px_dtype_size(a->dtype);
    /* AVG as every path: the SUM divided once (NCCL's own AVG where the
     * table cannot divide) */
    const int divide = a->op == PX_AVG && k && k->reduce_avg_finish;
    const int op = divide ? PX__NCCL_SUM : nccl_op(a->op);
    const char *in = a->sendbuf;
    char *out = a->recvbuf;
    int rc = PX__NCCL_SUCCESS;

    switch (a->kind) {
    case PX__COLL_ALLREDUCE:
        rc = l->all_reduce(in, out, (size_t)a->count, dt, op, nc->nc, s);
        break;
    case PX__COLL_REDUCE_SCATTER:
        rc = l->reduce_scatter(in, out, (size_t)a->count, dt, op, nc->nc, s);
        break;
    case PX__COLL_ALLGATHER:
        rc = l->all_gather(in, out, (size_t)a->count, dt, nc->nc, s);
        break;
    case PX__COLL_BCAST:
        rc = l->broadcast(out, out, (size_t)a->count, dt, a->root, nc->nc, s);
        break;
    case PX__COLL_ALLTOALL:
    case PX__COLL_ALLTOALLV:
        rc = settle(nc, l->group_start(), deadline);
        for (int p = 0; p < n && rc == PX__NCCL_SUCCESS; p++) {
            const int v = a->kind == PX__COLL_ALLTOALLV;
            uint64_t sc = v ? a->sendcounts[p] : a->count, rcn = v ? a->recvcounts[p] : a->count;
            uint64_t sd = v ? a->sdispls[p] : (uint64_t)p * a->count;
            uint64_t rd = v ? a->rdispls[p] : (uint64_t)p * a->count;
            if (sc)
                rc = settle(nc, l->send(in + sd * esz, (size_t)sc, dt, p, nc->nc, s), deadline);
            if (rc == PX__NCCL_SUCCESS && rcn)
                rc = settle(nc, l->recv(out + rd * esz, (size_t)rcn, dt, p, nc->nc, s), deadline);
        }
        {
            int end = settle(nc, l->group_end(), deadline);
            if (rc == PX__NCCL_SUCCESS)
                rc = end;
        }
        return rc;
    }
    rc = settle(nc, rc, deadline);
    if (rc == PX__NCCL_SUCCESS && divide && a->count &&
        (a->kind == PX__COLL_ALLREDUCE || a->kind == PX__COLL_REDUCE_SCATTER))
        k->reduce_avg_finish(out, (size_t)a->count, (int)a->dtype, n);
    return rc;
}

static px_status_t nccl_advance(px_request_t *req, int *progressed_p)
{
    struct px__ncclreq *nr = req->nccl;
    struct px__nccl *nc = req->comm->nccl;
    struct pollfd p = {.fd = nc->dev->fence_fd(nr->fence), .events = POLLIN};
    int e = PX__NCCL_SUCCESS;

    if (poll(&p, 1, 0) > 0) {
        nr->fired = 1;
        *progressed_p = 1;
        return PX_OK;
    }
    if (nc->nc && nc->lib->comm_get_async_error(nc->nc, &e) == PX__NCCL_SUCCESS &&
        e != PX__NCCL_SUCCESS && e != PX__NCCL_IN_PROGRESS)
        return px__comm_set_error(req->comm, PX_ERR_PEER_FAILURE, "%s: NCCL reports: %s",
                                  px__coll_kind_name(req->kind), px__nccl_strerror(nc->lib, e));
    if (px_time_mono_ms() >= req->deadline) /* before the core's check, which names no rank */
        return px__comm_set_error(req->comm, PX_ERR_TIMEOUT, "%s on device buffers: timeout: "
                                  "NCCL has not finished it (a rank missing, stuck or dead)",
                                  px__coll_kind_name(req->kind));
    return PX_INPROGRESS;
}

static px_status_t nccl_enqueue(px_comm_t *comm, const px__coll_args_t *a, px_request_t **req_p)
{
    struct px__nccl *nc = comm->nccl;
    px_request_t *req;
    struct px__ncclreq *nr;
    int rc;

    if (comm->failed) /* the setup's exchange met a dead peer, a deadline, an abort */
        return comm->failed;
    if (nc->state < 0)
        return px__comm_set_error(comm, PX_ERR_UNAVAILABLE, "%s on device buffers: NCCL cannot "
                                  "run comm %u: %s", px__coll_kind_name(a->kind), comm->id,
                                  nc->why);
    req = px__req_alloc(comm, a->kind, a->dtype, a->op, a->count, a->root, a->opts);
    nr = calloc(1, sizeof(*nr));
    if (!req || !nr) {
        free(req);
        free(nr);
        return PX_ERR_NO_MEMORY;
    }
    req->stage = 1; /* no header exchange: NCCL's ranks meet in its own kernels */
    req->path = &px__path_nccl;
    req->nccl = nr;
    req->advance = nccl_advance;
    rc = issue(comm, nc, a, req->deadline);
    if (rc != PX__NCCL_SUCCESS) {
        char why[WHY_LEN];
        snprintf(why, sizeof why, "%s failed: %s", px__coll_kind_name(a->kind),
                 result_text(nc, rc));
        free(nr);
        free(req);
        abort_nccl(comm, why);
        return px__comm_set_error(comm, rc == -1 ? PX_ERR_TIMEOUT : PX_ERR_INTERNAL,
                                  "NCCL %s", why);
    }
    nr->fence = nc->dev->fence_issue();
    if (!nr->fence) {
        free(nr);
        free(req);
        abort_nccl(comm, "no fence for the collective");
        return px__comm_set_error(comm, PX_ERR_INTERNAL, "%s on device buffers: the device "
                                  "could not fence NCCL's work", px__coll_kind_name(a->kind));
    }
    px__req_link(comm, req);
    *req_p = req;
    return PX_OK;
}

/* --- the table entry -------------------------------------------------------------- */

static int supported(int kind)
{
    return kind == PX__COLL_ALLREDUCE || kind == PX__COLL_REDUCE_SCATTER ||
           kind == PX__COLL_ALLGATHER || kind == PX__COLL_BCAST || kind == PX__COLL_ALLTOALL ||
           kind == PX__COLL_ALLTOALLV;
}

static int nccl_wants(px_comm_t *comm, const px__coll_args_t *a)
{
    if (!supported(a->kind) || !px__on_device(a->sendbuf, a->recvbuf))
        return 0;
    if ((a->sendbuf && !px__is_device(a->sendbuf)) || (a->recvbuf && !px__is_device(a->recvbuf)))
        return 0; /* one buffer on the host: staging's */
    if (!comm->nccl)
        decide(comm, a->opts && a->opts->timeout_ms > 0 ? a->opts->timeout_ms : -1);
    return comm->nccl && comm->nccl->state != 0;
}

static void nccl_req_end(px_request_t *req, px_status_t status)
{
    if (status != PX_OK && req->nccl && !req->nccl->fired)
        abort_nccl(req->comm, px_status_str(status));
}

static void nccl_req_cancel(px_request_t *req)
{
    if (req->nccl && !req->nccl->fired)
        abort_nccl(req->comm, "a collective was cancelled while NCCL ran it");
}

static int nccl_req_free(px_request_t *req)
{
    struct px__ncclreq *nr = req->nccl;

    if (nr) {
        if (nr->fence)
            req->comm->nccl->dev->fence_release(nr->fence);
        free(nr);
        req->nccl = NULL;
    }
    return 0; /* the core frees the request */
}

static px_status_t nccl_comm_setup(px_comm_t *comm)
{
    const char *v = px_env_str("PX_COLL_BACKEND");
    px__coll_backend_t b;

    if (px__nccl_backend_parse(v, &b) != 0) /* (logged there) */
        return px__comm_set_error(comm, PX_ERR_INVALID_ARGUMENT, "PX_COLL_BACKEND=%s: unknown "
                                  "engine of device collectives (auto, nccl or px)", v);
    return PX_OK;
}

static void nccl_comm_destroy(px_comm_t *comm)
{
    struct px__nccl *nc = comm->nccl;

    if (!nc)
        return;
    if (nc->nc) {
        if (comm->failed)
            nc->lib->comm_abort(nc->nc);
        else
            nc->lib->comm_destroy(nc->nc);
    }
    free(nc);
    comm->nccl = NULL;
}

/* Sleeps on the fence of the first pending NCCL collective of the worker
 * (and everything a wait watches), at most SLEEP_SLICE_MS. */
static int nccl_sleep(px_comm_t *comm, int timeout_ms)
{
    for (px_comm_t *c = comm->tr->comms; c; c = c->tr_next) {
        for (px_request_t *r = c->reqs; r; r = r->next) {
            if (r->status != PX_INPROGRESS || !r->nccl || r->nccl->fired)
                continue;
            px__sleep_fd(comm, c->nccl->dev->fence_fd(r->nccl->fence),
                         timeout_ms < SLEEP_SLICE_MS ? timeout_ms : SLEEP_SLICE_MS);
            return 1;
        }
    }
    return 0;
}

const px__path_t px__path_nccl = {
    .name = "nccl",
    .wants = nccl_wants,
    .enqueue = nccl_enqueue,
    .req_end = nccl_req_end,
    .req_cancel = nccl_req_cancel,
    .req_free = nccl_req_free,
    .comm_setup = nccl_comm_setup,
    .comm_destroy = nccl_comm_destroy,
    .sleep = nccl_sleep,
};

/* --- public ---------------------------------------------------------------------- */

int px_comm_device_engine(const px_comm_t *comm, char *why, size_t len)
{
    const struct px__nccl *nc = comm ? comm->nccl : NULL;

    if (why && len)
        snprintf(why, len, "%s", nc ? nc->why : "");
    if (!nc)
        return -1;
    return nc->state == 1 ? 1 : 0;
}
