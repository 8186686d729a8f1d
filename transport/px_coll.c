/* px_coll.c: the public collective and point-to-point calls (px_coll.h,
 * px_transport.h).
 *
 * Thin entry points (STYLE.md, "From NCCL"): check the arguments, then one
 * enqueue. The enqueue asks the paths in table order (px_path.h: shared
 * memory, CUDA IPC, staging) and, when none wants the collective, runs the
 * host algorithm (px_algo.c, coll/): it creates the request (which posts the
 * header exchange, px_request.c), does what needs no peer (no elements, one
 * rank) and lets the path or the algorithm set up the rest. The blocking
 * forms are start + wait.
 *
 * Runs on the thread using the communicator. */
#include "px_transport_int.h"

#include <stdlib.h>
#include <string.h>

#include "px_devmem.h"
#include "px_log.h"
#include "px_path.h"

/* --- names ---------------------------------------------------------------- */

static const char *const algo_names[] = {"auto", "ring", "rd", "rabenseifner", "tree",
                                         "pairwise", "linear"};
static const char *const dtype_names[] = {"fp32", "fp64", "fp16", "bf16", "int32", "int64",
                                          "uint8"};
static const char *const op_names[] = {"sum", "prod", "min", "max", "avg"};

const char *px_algo_name(px_algo_t algo)
{
    return (unsigned)algo < sizeof(algo_names) / sizeof(*algo_names) ? algo_names[algo] : "?";
}

const char *px_dtype_name(px_dtype_t dtype)
{
    return (unsigned)dtype < sizeof(dtype_names) / sizeof(*dtype_names) ? dtype_names[dtype] : "?";
}

const char *px_redop_name(px_redop_t op)
{
    return (unsigned)op < sizeof(op_names) / sizeof(*op_names) ? op_names[op] : "?";
}

static int lookup(const char *name, const char *const *names, int n, const char *const *alias,
                  const int *alias_val, int nalias)
{
    if (!name)
        return -1;
    for (int i = 0; i < n; i++)
        if (!strcasecmp(name, names[i]))
            return i;
    for (int i = 0; i < nalias; i++)
        if (!strcasecmp(name, alias[i]))
            return alias_val[i];
    return -1;
}

px_status_t px_algo_parse(const char *name, px_algo_t *algo_p)
{
    static const char *const alias[] = {"recursive_doubling", "recursive-doubling", "binomial",
                                        "halving_doubling"};
    static const int val[] = {PX_ALGO_RECURSIVE_DOUBLING, PX_ALGO_RECURSIVE_DOUBLING,
                              PX_ALGO_TREE, PX_ALGO_RABENSEIFNER};
    int v = lookup(name, algo_names, 7, alias, val, 4);
    if (v < 0)
        return PX_ERR_INVALID_ARGUMENT;
    *algo_p = (px_algo_t)v;
    return PX_OK;
}

px_status_t px_dtype_parse(const char *name, px_dtype_t *dtype_p)
{
    static const char *const alias[] = {"float32", "float", "float64", "double", "float16",
                                        "half", "bfloat16", "int", "int8u", "u8", "uint8_t"};
    static const int val[] = {PX_FLOAT32, PX_FLOAT32, PX_FLOAT64, PX_FLOAT64, PX_FLOAT16,
                              PX_FLOAT16, PX_BFLOAT16, PX_INT32, PX_UINT8, PX_UINT8, PX_UINT8};
    int v = lookup(name, dtype_names, 7, alias, val, 11);
    if (v < 0)
        return PX_ERR_INVALID_ARGUMENT;
    *dtype_p = (px_dtype_t)v;
    return PX_OK;
}

px_status_t px_redop_parse(const char *name, px_redop_t *op_p)
{
    static const char *const alias[] = {"product", "mean", "average"};
    static const int val[] = {PX_PROD, PX_AVG, PX_AVG};
    int v = lookup(name, op_names, 5, alias, val, 3);
    if (v < 0)
        return PX_ERR_INVALID_ARGUMENT;
    *op_p = (px_redop_t)v;
    return PX_OK;
}

/* --- argument checks ---------------------------------------------------- */

/* Entry check shared by every call: a failed comm keeps failing. */
static px_status_t comm_usable(px_comm_t *comm)
{
    if (!comm)
        return PX_ERR_INVALID_ARGUMENT;
    if (comm->failed)
        return comm->failed;
    if (atomic_load(&comm->aborted) == 2) /* aborted while idle */
        return px__comm_set_error(comm, PX_ERR_ABORTED, "aborted: %s", comm->abort_reason);
    if (comm->root != comm && (comm->root->failed || atomic_load(&comm->root->aborted) == 2))
        return px__check_async(comm);
    return PX_OK;
}

/* Whether `count` elements of `esz` bytes, `mult` times over, fit in one
 * buffer: at most PX_COLL_MAX_BYTES in all. Division, not multiplication,
 * so that no product overflows (count may be (uint64_t)-1). */
static int count_fits(uint64_t count, size_t esz, uint64_t mult)
{
    return !count || !esz || count <= PX_COLL_MAX_BYTES / esz / (mult ? mult : 1);
}

/* The checks every collective makes before it takes a sequence number (so
 * a rejected call leaves the communicator as it was, on every rank): the
 * dtype and op (op < 0: none), the element count (times `mult` for the
 * buffers that hold one block per rank) against PX_COLL_MAX_BYTES, and the
 * root where the collective has one (has_root; then 0 <= root < size, so
 * -1 is no longer the "no root" marker it was). Logs the bad value. */
static px_status_t check_common(px_comm_t *comm, const char *fn, px_dtype_t dtype, int op,
                                uint64_t count, uint64_t mult, int has_root, int root,
                                px_request_t **req_p)
{
    px_status_t status = comm_usable(comm);
    size_t esz = px_dtype_size(dtype);
    if (status != PX_OK)
        return status;
    if (!req_p || esz == 0 || (op >= 0 && (unsigned)op > PX_AVG)) {
        px_error("%s: bad argument (dtype %d, op %d%s)", fn, (int)dtype, op,
                 req_p ? "" : ", no request pointer");
        return PX_ERR_INVALID_ARGUMENT;
    }
    if (!count_fits(count, esz, mult)) {
        px_error("%s: count %llu (%lld as signed) of %s x %llu block(s) exceeds the %llu-byte "
                 "limit of one buffer",
                 fn, (unsigned long long)count, (long long)count, px_dtype_name(dtype),
                 (unsigned long long)(mult ? mult : 1), (unsigned long long)PX_COLL_MAX_BYTES);
        return PX_ERR_INVALID_ARGUMENT;
    }
    if (has_root && (root < 0 || root >= comm->size)) {
        px_error("%s: root %d outside the communicator (size %d)", fn, root, comm->size);
        return PX_ERR_INVALID_ARGUMENT;
    }
    return PX_OK;
}

#define NEED(cond, fn)                                                                   \
    do {                                                                                 \
        if (!(cond)) {                                                                   \
            px_error("%s: bad buffer argument (%s)", fn, #cond);                       \
            return PX_ERR_INVALID_ARGUMENT;                                              \
        }                                                                                \
    } while (0)

static px_status_t start_fail(px_request_t *req, px_status_t status)
{
    px__req_discard(req);
    return status;
}

/* --- device buffers (px_devmem.h) ------------------------------------------ */

static const px_kernel_ops_t *dev_ops;
static int (*dev_is_device)(const void *p);

void px_transport_set_device_memory(const px_kernel_ops_t *k, int (*is_device)(const void *p))
{
    dev_ops = k && is_device ? k : NULL;
    dev_is_device = k && is_device ? is_device : NULL;
}

static const px_comm_device_t *comm_device;

void px_transport_set_comm_device(const px_comm_device_t *dev)
{
    comm_device = dev;
}

const px_comm_device_t *px__comm_device(void)
{
    return comm_device;
}

static void *(*pinned_alloc)(size_t bytes);
static void (*pinned_free)(void *p);

void px_transport_set_pinned_memory(void *(*alloc)(size_t bytes), void (*release)(void *p))
{
    pinned_alloc = alloc && release ? alloc : NULL;
    pinned_free = alloc && release ? release : NULL;
}

void *px__host_alloc(size_t bytes)
{
    return pinned_alloc ? pinned_alloc(bytes) : malloc(bytes);
}

void px__host_free(void *p)
{
    if (!p)
        return;
    if (pinned_free)
        pinned_free(p);
    else
        free(p);
}

int px__is_device(const void *p)
{
    return dev_is_device && p && dev_is_device(p);
}

int px__on_device(const void *a, const void *b)
{
    return dev_is_device && ((a && dev_is_device(a)) || (b && dev_is_device(b)));
}

const px_kernel_ops_t *px__dev_ops(void)
{
    return dev_ops;
}

/* Refuses a collective that has no staged form on device buffers. */
#define NO_DEVICE(fn, a, b)                                                              \
    do {                                                                                 \
        if (px__on_device((a), (b))) {                                                   \
            px_error("%s: device buffers are not supported (all-reduce, reduce-scatter, " \
                     "all-gather, broadcast, all-to-all and send/recv are)", fn);        \
            return PX_ERR_INVALID_ARGUMENT;                                              \
        }                                                                                \
    } while (0)

/* --- the one enqueue ---------------------------------------------------------- */

/* `n` bytes from src to dst, on the device where the collective's buffers are. */
static void local_copy(const px__coll_args_t *a, void *dst, const void *src, size_t n)
{
    if (px__on_device(a->sendbuf, a->recvbuf))
        dev_ops->mem_copy(dst, src, n);
    else
        memcpy(dst, src, n);
}

/* The part of collective `a` on `req` that needs no peer: nothing to move,
 * or one rank (its input is the result; AVG over one rank too). Returns 1
 * when that is all there is, 0 when a path or an algorithm runs the rest. */
static int run_local(px_request_t *req, const px__coll_args_t *a)
{
    const px_comm_t *comm = req->comm;
    size_t esz = px_dtype_size(a->dtype);

    switch (a->kind) {
    case PX__COLL_ALLREDUCE:
    case PX__COLL_REDUCE:
        if (a->count == 0)
            return 1;
        if (comm->size > 1)
            return 0;
        if (a->sendbuf != a->recvbuf)
            local_copy(a, a->recvbuf, a->sendbuf, (size_t)(a->count * esz));
        return 1;
    case PX__COLL_REDUCE_SCATTER:
    case PX__COLL_ALLGATHER: /* one rank: its block of the buffer holding every rank's */
        if (a->count == 0)
            return 1;
        if (comm->size > 1)
            return 0;
        if (a->recvbuf != a->sendbuf) /* rank 0's block is at the buffer's start */
            local_copy(a, a->recvbuf, a->sendbuf, (size_t)a->count * esz);
        return 1;
    case PX__COLL_BCAST:
        return a->count == 0 || comm->size == 1;
    case PX__COLL_SCATTER:
    case PX__COLL_GATHER:
        return a->count == 0;
    case PX__COLL_BARRIER: /* every rank hears from every rank: the header exchange is it */
        return 1;
    default: /* all-to-all(-v), send / receive: the path or the algorithm, even on
              * one rank (a message of no bytes is still a message) */
        return 0;
    }
}

/* Creates the request of `a`: header-in-data for a small all-reduce of the
 * host algorithm on a communicator no path reads the headers of, else with
 * the header exchange (all-to-all-v: its per-peer counts). */
static px_status_t create(px_comm_t *comm, const px__coll_args_t *a, const px__path_t *path,
                          px_request_t **req_p)
{
    int v = a->kind == PX__COLL_ALLTOALLV;

    if (!path && !px__paths_check_headers(comm) && px__algo_inline(comm, a))
        return px__req_create_inline(comm, a->kind, a->dtype, a->op, a->count, a->root, a->opts,
                                     req_p);
    return px__req_create(comm, a->kind, a->dtype, a->op, a->count, a->root,
                          v ? a->sendcounts : NULL, v ? a->recvcounts : NULL, a->opts, req_p);
}

/* Starts checked collective `a`: the first path of the table that wants it
 * (px_path.h: shm, ipc, stage), else the host algorithm. */
static px_status_t enqueue(px_comm_t *comm, px__coll_args_t *a, px_request_t **req_p)
{
    const px__path_t *path = px__path_choose(comm, a);
    px_request_t *req;
    px_status_t status;
    int device = px__on_device(a->sendbuf, a->recvbuf);

    if (path && path->enqueue) {
        px__path_used(comm, path, device);
        return path->enqueue(comm, a, req_p);
    }
    /* the algorithm first: the device paths sum in its order */
    a->algo = px__algo_choose(comm, a);
    status = create(comm, a, path, &req);
    if (status != PX_OK)
        return status;
    if (!run_local(req, a)) {
        px__path_used(comm, path, device);
        req->path = path;
        status = path ? path->start(req, a) : px__algo_start(req, a);
        if (status != PX_OK)
            return start_fail(req, status);
    }
    *req_p = req;
    return PX_OK;
}

/* The arguments every collective has; the rest zero. */
static px__coll_args_t args(int kind, const void *sendbuf, void *recvbuf, uint64_t count,
                            px_dtype_t dtype, px_redop_t op, int root,
                            const px_coll_opts_t *opts)
{
    px__coll_args_t a = {.kind = kind, .sendbuf = sendbuf, .recvbuf = recvbuf, .count = count,
                         .dtype = dtype, .op = op, .root = root, .algo = PX_ALGO_AUTO,
                         .opts = opts};
    return a;
}

/* --- the collectives ------------------------------------------------------------ */

px_status_t px_allreduce_start(px_comm_t *comm, const void *sendbuf, void *recvbuf,
                               uint64_t count, px_dtype_t dtype, px_redop_t op,
                               const px_coll_opts_t *opts, px_request_t **req_p)
{
    px_status_t status = check_common(comm, "px_allreduce", dtype, (int)op, count, 1, 0, 0, req_p);
    px__coll_args_t a = args(PX__COLL_ALLREDUCE, sendbuf, recvbuf, count, dtype, op, -1, opts);

    if (status != PX_OK)
        return status;
    NEED(!count || (sendbuf && recvbuf), "px_allreduce");
    return enqueue(comm, &a, req_p);
}

px_status_t px_reduce_scatter_start(px_comm_t *comm, const void *sendbuf, void *recvbuf,
                                    uint64_t recvcount, px_dtype_t dtype, px_redop_t op,
                                    const px_coll_opts_t *opts, px_request_t **req_p)
{
    px_status_t status = check_common(comm, "px_reduce_scatter", dtype, (int)op, recvcount,
                                      comm ? (uint64_t)comm->size : 1, 0, 0, req_p);
    px__coll_args_t a = args(PX__COLL_REDUCE_SCATTER, sendbuf, recvbuf, recvcount, dtype, op, -1,
                             opts);

    if (status != PX_OK)
        return status;
    NEED(!recvcount || (sendbuf && recvbuf), "px_reduce_scatter");
    return enqueue(comm, &a, req_p);
}

px_status_t px_allgather_start(px_comm_t *comm, const void *sendbuf, void *recvbuf,
                               uint64_t sendcount, px_dtype_t dtype,
                               const px_coll_opts_t *opts, px_request_t **req_p)
{
    px_status_t status = check_common(comm, "px_allgather", dtype, -1, sendcount,
                                      comm ? (uint64_t)comm->size : 1, 0, 0, req_p);
    px__coll_args_t a = args(PX__COLL_ALLGATHER, sendbuf, recvbuf, sendcount, dtype, PX_SUM, -1,
                             opts);

    if (status != PX_OK)
        return status;
    NEED(!sendcount || (sendbuf && recvbuf), "px_allgather");
    return enqueue(comm, &a, req_p);
}

px_status_t px_bcast_start(px_comm_t *comm, void *buf, uint64_t count, px_dtype_t dtype,
                           int root, const px_coll_opts_t *opts, px_request_t **req_p)
{
    px_status_t status = check_common(comm, "px_bcast", dtype, -1, count, 1, 1, root, req_p);
    px__coll_args_t a = args(PX__COLL_BCAST, buf, buf, count, dtype, PX_SUM, root, opts);

    if (status != PX_OK)
        return status;
    NEED(!count || buf, "px_bcast");
    return enqueue(comm, &a, req_p);
}

px_status_t px_reduce_start(px_comm_t *comm, const void *sendbuf, void *recvbuf, uint64_t count,
                            px_dtype_t dtype, px_redop_t op, int root,
                            const px_coll_opts_t *opts, px_request_t **req_p)
{
    px_status_t status = check_common(comm, "px_reduce", dtype, (int)op, count, 1, 1, root, req_p);
    px__coll_args_t a = args(PX__COLL_REDUCE, sendbuf, recvbuf, count, dtype, op, root, opts);

    if (status != PX_OK)
        return status;
    NEED(!count || (sendbuf && (recvbuf || comm->rank != root)), "px_reduce");
    NO_DEVICE("px_reduce", sendbuf, recvbuf);
    return enqueue(comm, &a, req_p);
}

px_status_t px_scatter_start(px_comm_t *comm, const void *sendbuf, void *recvbuf, uint64_t count,
                             px_dtype_t dtype, int root, const px_coll_opts_t *opts,
                             px_request_t **req_p)
{
    px_status_t status = check_common(comm, "px_scatter", dtype, -1, count,
                                      comm ? (uint64_t)comm->size : 1, 1, root, req_p);
    px__coll_args_t a = args(PX__COLL_SCATTER, sendbuf, recvbuf, count, dtype, PX_SUM, root, opts);

    if (status != PX_OK)
        return status;
    NEED(!count || (recvbuf && (sendbuf || comm->rank != root)), "px_scatter");
    NO_DEVICE("px_scatter", sendbuf, recvbuf);
    return enqueue(comm, &a, req_p);
}

px_status_t px_gather_start(px_comm_t *comm, const void *sendbuf, void *recvbuf, uint64_t count,
                            px_dtype_t dtype, int root, const px_coll_opts_t *opts,
                            px_request_t **req_p)
{
    px_status_t status = check_common(comm, "px_gather", dtype, -1, count,
                                      comm ? (uint64_t)comm->size : 1, 1, root, req_p);
    px__coll_args_t a = args(PX__COLL_GATHER, sendbuf, recvbuf, count, dtype, PX_SUM, root, opts);

    if (status != PX_OK)
        return status;
    NEED(!count || (sendbuf && (recvbuf || comm->rank != root)), "px_gather");
    NO_DEVICE("px_gather", sendbuf, recvbuf);
    return enqueue(comm, &a, req_p);
}

/* The buffer checks of all-to-all(-v): a buffer where elements go, and
 * no in-place form. `total_s` / `total_r`: elements sent / received. */
static px_status_t alltoall_bufs(const void *sendbuf, const void *recvbuf, uint64_t total_s,
                                 uint64_t total_r)
{
    NEED(!total_s || sendbuf, "px_alltoall");
    NEED(!total_r || recvbuf, "px_alltoall");
    NEED(!total_s || !total_r || sendbuf != recvbuf, "px_alltoall (no in-place form)");
    return PX_OK;
}

px_status_t px_alltoall_start(px_comm_t *comm, const void *sendbuf, void *recvbuf,
                              uint64_t count, px_dtype_t dtype, const px_coll_opts_t *opts,
                              px_request_t **req_p)
{
    px_status_t status = check_common(comm, "px_alltoall", dtype, -1, count,
                                      comm ? (uint64_t)comm->size : 1, 0, 0, req_p);
    px__coll_args_t a = args(PX__COLL_ALLTOALL, sendbuf, recvbuf, count, dtype, PX_SUM, -1, opts);

    if (status == PX_OK)
        status = alltoall_bufs(sendbuf, recvbuf, (uint64_t)comm->size * count,
                               (uint64_t)comm->size * count);
    return status == PX_OK ? enqueue(comm, &a, req_p) : status;
}

px_status_t px_alltoallv_start(px_comm_t *comm, const void *sendbuf, const uint64_t *sendcounts,
                               const uint64_t *sdispls, void *recvbuf, const uint64_t *recvcounts,
                               const uint64_t *rdispls, px_dtype_t dtype,
                               const px_coll_opts_t *opts, px_request_t **req_p)
{
    px_status_t status = check_common(comm, "px_alltoallv", dtype, -1, 0, 1, 0, 0, req_p);
    px__coll_args_t a = args(PX__COLL_ALLTOALLV, sendbuf, recvbuf, 0, dtype, PX_SUM, -1, opts);
    uint64_t total_s = 0, total_r = 0;

    if (status != PX_OK)
        return status;
    NEED(sendcounts && sdispls && recvcounts && rdispls, "px_alltoallv");
    for (int p = 0; p < comm->size; p++) {
        size_t esz = px_dtype_size(dtype);
        /* each block, and the end of each block, inside one buffer's limit */
        if (!count_fits(sendcounts[p], esz, 1) || !count_fits(recvcounts[p], esz, 1) ||
            !count_fits(sdispls[p], esz, 1) || !count_fits(rdispls[p], esz, 1) ||
            !count_fits(sdispls[p] + sendcounts[p], esz, 1) ||
            !count_fits(rdispls[p] + recvcounts[p], esz, 1)) {
            px_error("px_alltoallv: rank %d's block (send %llu at %llu, recv %llu at %llu "
                     "elements of %s) exceeds the %llu-byte limit of one buffer",
                     p, (unsigned long long)sendcounts[p], (unsigned long long)sdispls[p],
                     (unsigned long long)recvcounts[p], (unsigned long long)rdispls[p],
                     px_dtype_name(dtype), (unsigned long long)PX_COLL_MAX_BYTES);
            return PX_ERR_INVALID_ARGUMENT;
        }
        total_s += sendcounts[p];
        total_r += recvcounts[p];
    }
    status = alltoall_bufs(sendbuf, recvbuf, total_s, total_r);
    if (status != PX_OK)
        return status;
    a.sendcounts = sendcounts;
    a.sdispls = sdispls;
    a.recvcounts = recvcounts;
    a.rdispls = rdispls;
    return enqueue(comm, &a, req_p);
}

/* --- barrier, point-to-point ------------------------------------------------ */

px_status_t px_barrier_start(px_comm_t *comm, const px_coll_opts_t *opts, px_request_t **req_p)
{
    px_status_t status = comm_usable(comm);
    px__coll_args_t a = args(PX__COLL_BARRIER, NULL, NULL, 0, PX_UINT8, PX_SUM, -1, opts);

    if (status != PX_OK)
        return status;
    if (!req_p)
        return PX_ERR_INVALID_ARGUMENT;
    return enqueue(comm, &a, req_p);
}

/* The chunk of a device buffer's transfer (px_devmem.h): collectives and
 * point-to-point on device buffers staged through host buffers
 * (paths/stage), and the IPC path's chunks. */
static size_t stage_chunk = PX_STAGE_CHUNK_DEFAULT;

void px_transport_set_stage_chunk(size_t bytes)
{
    stage_chunk = bytes ? bytes : PX_STAGE_CHUNK_DEFAULT;
}

size_t px__dev_chunk(void)
{
    return stage_chunk;
}

static px_status_t p2p_start(px_comm_t *comm, int is_send, int peer, uint32_t tag, void *buf,
                             uint64_t bytes, const px_coll_opts_t *opts, px_request_t **req_p)
{
    px_status_t status = comm_usable(comm);
    px__coll_args_t a = args(is_send ? PX__COLL_SEND : PX__COLL_RECV, is_send ? buf : NULL,
                             is_send ? NULL : buf, bytes, PX_UINT8, PX_SUM, -1, opts);

    if (status != PX_OK)
        return status;
    if (!req_p || peer < 0 || peer >= comm->size || (!buf && bytes) ||
        bytes > PX_COLL_MAX_BYTES) {
        px_error("px_%s: bad peer %d (size %d) or buffer (%llu bytes)", is_send ? "send" : "recv",
                 peer, comm->size, (unsigned long long)bytes);
        return PX_ERR_INVALID_ARGUMENT;
    }
    a.peer = peer;
    a.p2p_tag = px__tag(comm->id, PX__TAG_KIND_P2P, (unsigned)(is_send ? comm->rank : peer), tag);
    return enqueue(comm, &a, req_p);
}

px_status_t px_send_start(px_comm_t *comm, int peer, uint32_t tag, const void *buf,
                          uint64_t bytes, const px_coll_opts_t *opts, px_request_t **req_p)
{
    return p2p_start(comm, 1, peer, tag, (void *)buf, bytes, opts, req_p);
}

px_status_t px_recv_start(px_comm_t *comm, int peer, uint32_t tag, void *buf, uint64_t bytes,
                          const px_coll_opts_t *opts, px_request_t **req_p)
{
    return p2p_start(comm, 0, peer, tag, buf, bytes, opts, req_p);
}

/* --- blocking forms ------------------------------------------------------------ */

#define BLOCKING(startcall)                                                              \
    do {                                                                                 \
        px_request_t *req_;                                                              \
        px_status_t st_ = (startcall);                                                   \
        if (st_ != PX_OK)                                                                \
            return st_;                                                                  \
        return px_wait(req_, -1);                                                        \
    } while (0)

static px_coll_opts_t timeout_opts(int timeout_ms)
{
    px_coll_opts_t o = {PX_ALGO_AUTO, timeout_ms};
    return o;
}

px_status_t px_send(px_comm_t *comm, int peer, uint32_t tag, const void *buf, size_t bytes,
                    int timeout_ms)
{
    px_coll_opts_t o = timeout_opts(timeout_ms);
    BLOCKING(px_send_start(comm, peer, tag, buf, bytes, &o, &req_));
}

px_status_t px_recv(px_comm_t *comm, int peer, uint32_t tag, void *buf, size_t bytes,
                    int timeout_ms)
{
    px_coll_opts_t o = timeout_opts(timeout_ms);
    BLOCKING(px_recv_start(comm, peer, tag, buf, bytes, &o, &req_));
}

px_status_t px_allreduce(px_comm_t *comm, const void *sendbuf, void *recvbuf, uint64_t count,
                         px_dtype_t dtype, px_redop_t op, int timeout_ms)
{
    px_coll_opts_t o = timeout_opts(timeout_ms);
    BLOCKING(px_allreduce_start(comm, sendbuf, recvbuf, count, dtype, op, &o, &req_));
}

px_status_t px_allreduce_opts(px_comm_t *comm, const void *sendbuf, void *recvbuf,
                              uint64_t count, px_dtype_t dtype, px_redop_t op,
                              const px_coll_opts_t *opts)
{
    BLOCKING(px_allreduce_start(comm, sendbuf, recvbuf, count, dtype, op, opts, &req_));
}

px_status_t px_broadcast(px_comm_t *comm, void *buf, size_t bytes, int root, int timeout_ms)
{
    px_coll_opts_t o = timeout_opts(timeout_ms);
    BLOCKING(px_bcast_start(comm, buf, bytes, PX_UINT8, root, &o, &req_));
}

px_status_t px_barrier(px_comm_t *comm, int timeout_ms)
{
    px_coll_opts_t o = timeout_opts(timeout_ms);
    BLOCKING(px_barrier_start(comm, &o, &req_));
}

px_status_t px_reduce_scatter(px_comm_t *comm, const void *sendbuf, void *recvbuf,
                              uint64_t recvcount, px_dtype_t dtype, px_redop_t op,
                              const px_coll_opts_t *opts)
{
    BLOCKING(px_reduce_scatter_start(comm, sendbuf, recvbuf, recvcount, dtype, op, opts, &req_));
}

px_status_t px_allgather(px_comm_t *comm, const void *sendbuf, void *recvbuf, uint64_t sendcount,
                         px_dtype_t dtype, const px_coll_opts_t *opts)
{
    BLOCKING(px_allgather_start(comm, sendbuf, recvbuf, sendcount, dtype, opts, &req_));
}

px_status_t px_bcast(px_comm_t *comm, void *buf, uint64_t count, px_dtype_t dtype, int root,
                     const px_coll_opts_t *opts)
{
    BLOCKING(px_bcast_start(comm, buf, count, dtype, root, opts, &req_));
}

px_status_t px_reduce(px_comm_t *comm, const void *sendbuf, void *recvbuf, uint64_t count,
                      px_dtype_t dtype, px_redop_t op, int root, const px_coll_opts_t *opts)
{
    BLOCKING(px_reduce_start(comm, sendbuf, recvbuf, count, dtype, op, root, opts, &req_));
}

px_status_t px_scatter(px_comm_t *comm, const void *sendbuf, void *recvbuf, uint64_t count,
                       px_dtype_t dtype, int root, const px_coll_opts_t *opts)
{
    BLOCKING(px_scatter_start(comm, sendbuf, recvbuf, count, dtype, root, opts, &req_));
}

px_status_t px_gather(px_comm_t *comm, const void *sendbuf, void *recvbuf, uint64_t count,
                      px_dtype_t dtype, int root, const px_coll_opts_t *opts)
{
    BLOCKING(px_gather_start(comm, sendbuf, recvbuf, count, dtype, root, opts, &req_));
}

px_status_t px_alltoall(px_comm_t *comm, const void *sendbuf, void *recvbuf, uint64_t count,
                        px_dtype_t dtype, const px_coll_opts_t *opts)
{
    BLOCKING(px_alltoall_start(comm, sendbuf, recvbuf, count, dtype, opts, &req_));
}

px_status_t px_alltoallv(px_comm_t *comm, const void *sendbuf, const uint64_t *sendcounts,
                         const uint64_t *sdispls, void *recvbuf, const uint64_t *recvcounts,
                         const uint64_t *rdispls, px_dtype_t dtype, const px_coll_opts_t *opts)
{
    BLOCKING(px_alltoallv_start(comm, sendbuf, sendcounts, sdispls, recvbuf, recvcounts, rdispls,
                                dtype, opts, &req_));
}
