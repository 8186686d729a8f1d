/* px_coll.c: the public collective and point-to-point calls (px_coll.h,
 * px_transport.h).
 *
 * Thin entry points (STYLE.md, "From NCCL"): check the arguments, create
 * the request (which posts the header exchange, px_request.c), choose the
 * algorithm and let it build its schedule or ring state (coll/). The
 * blocking forms are start + wait.
 *
 * Algorithm choice (PX_ALGO_AUTO): all-reduce uses recursive doubling up to
 * PX__RD_MAX_BYTES (32 KiB), Rabenseifner up to 1 MiB and the pipelined ring
 * above (measured on 2 and 4 local ranks: Rabenseifner is 1.2-2.7x faster
 * than the ring from 16 KiB to 1 MiB, the ring 1.3x faster at 4 MiB; since
 * every collective overlaps its header exchange, the ring is faster on 2
 * ranks at every size above 32 KiB, so 2 ranks skip Rabenseifner); broadcast a binomial tree
 * up to 512 KiB (or with 2 ranks) and scatter + ring all-gather (van de
 * Geijn) above; reduce a binomial tree; all-gather and reduce-scatter the
 * ring; all-to-all posts every message at once up to 8 ranks (linear) and
 * runs pairwise exchange steps above. PX_ALGO_ALLREDUCE / _BCAST /
 * _ALLTOALL (environment) override auto; a per-call hint overrides both. A
 * hint the collective has no implementation for (e.g. Rabenseifner) falls
 * back to auto.
 *
 * fp16 / bf16 reductions run in fp32: the input is converted into an fp32
 * temporary, reduced there (partial sums travel as fp32), and the result is
 * rounded once into the caller's buffer when the request completes.
 *
 * Runs on the thread using the communicator. */
#include "px_transport_int.h"

#include <stdlib.h>
#include <string.h>

#include "px_devmem.h"
#include "px_env.h"
#include "px_log.h"
#include "px_reduce.h"
#include "px_ipc.h"
#include "px_shm.h"

#define BCAST_TREE_MAX_BYTES (512u * 1024u)
/* All-reduce: Rabenseifner between PX__RD_MAX_BYTES and this, ring above.
 * Two ranks use the ring from PX__RD_MAX_BYTES up: the same two halves
 * exchanged, but pipelined in chunks with the reduction straight from the
 * input (measured 32 KiB-4 MiB: 0.65-0.85x Rabenseifner's time). */
#define PX__RABENSEIFNER_MAX_BYTES (1024u * 1024u)
#define ALLTOALL_LINEAR_MAX_RANKS 8

int px__allreduce_algo = 0;
int px__inline_disable = 0;

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

static px_algo_t env_algo(const char *knob)
{
    px_algo_t a = PX_ALGO_AUTO;
    const char *v = px_env_str(knob);
    if (v && *v && px_algo_parse(v, &a) != PX_OK) {
        px_warn("%s=%s: unknown algorithm, using auto", knob, v);
        a = PX_ALGO_AUTO;
    }
    return a;
}

static px_algo_t pick(const px_coll_opts_t *opts, const char *knob)
{
    if (opts && opts->algo != PX_ALGO_AUTO)
        return opts->algo;
    return env_algo(knob);
}

static int is_half(px_dtype_t dtype)
{
    return dtype == PX_FLOAT16 || dtype == PX_BFLOAT16;
}

/* Stages a half input into an fp32 temporary (slot 3) of `count`. */
static float *stage_half(px_request_t *req, px_dtype_t dtype, const void *src, uint64_t count)
{
    float *t = px__req_tmp(req, 3, (size_t)count * sizeof(float));
    if (!t)
        return NULL;
    if (dtype == PX_FLOAT16)
        px_f16_to_f32(t, src, (size_t)count);
    else
        px_bf16_to_f32(t, src, (size_t)count);
    return t;
}

static int on_device(const void *a, const void *b);

/* Whether a collective on host buffers of `bytes` (its largest buffer)
 * takes the shared-memory path (px_shm.h); reductions of fp16/bf16 do not
 * (they reduce in fp32 temporaries on the UCX path). */
static int use_shm(px_comm_t *comm, int kind, const void *a, const void *b, px_dtype_t dtype,
                   int reduces, uint64_t bytes)
{
    return comm->shm && comm->size > 1 && !(reduces && is_half(dtype)) && !on_device(a, b) &&
           px__shm_wants(comm, kind, bytes);
}

static px_status_t start_fail(px_request_t *req, px_status_t status)
{
    px__req_discard(req);
    return status;
}

/* --- device buffers (px_devmem.h) ------------------------------------------ */

static const px_kernel_ops_t *dev_ops;
static int (*dev_is_device)(const void *p);

/* Whether a collective on device buffers goes through the peers' mapped
 * device memory (px_ipc.h) instead of staging: `a` and `b` (NULL: none, as
 * broadcast) device memory, more than one rank, elements to move, no
 * fp16/bf16 reduction, and IPC on for the communicator (whose first such
 * call is the collective setup: the same arguments on every rank make the
 * same call). */
static int use_ipc(px_comm_t *comm, const void *a, const void *b, uint64_t count,
                   px_dtype_t dtype, int reduces, const px_coll_opts_t *opts)
{
    return dev_is_device && comm->size > 1 && count > 0 && !(reduces && is_half(dtype)) && a &&
           dev_is_device(a) && (!b || dev_is_device(b)) &&
           px__ipc_ready(comm, opts && opts->timeout_ms > 0 ? opts->timeout_ms : -1);
}

void px_transport_set_device_memory(const px_kernel_ops_t *k, int (*is_device)(const void *p))
{
    dev_ops = k && is_device ? k : NULL;
    dev_is_device = k && is_device ? is_device : NULL;
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

static int on_device(const void *a, const void *b)
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
        if (on_device((a), (b))) {                                                       \
            px_error("%s: device buffers are not supported (all-reduce, reduce-scatter, " \
                     "all-gather, broadcast, all-to-all and send/recv are)", fn);        \
            return PX_ERR_INVALID_ARGUMENT;                                              \
        }                                                                                \
    } while (0)

/* --- all-reduce ------------------------------------------------------------ */

px_status_t px_allreduce_start(px_comm_t *comm, const void *sendbuf, void *recvbuf,
                               uint64_t count, px_dtype_t dtype, px_redop_t op,
                               const px_coll_opts_t *opts, px_request_t **req_p)
{
    px_request_t *req;
    px_status_t status = check_common(comm, "px_allreduce", dtype, (int)op, count, 1, 0, 0, req_p);
    const void *src = sendbuf;
    void *dst = recvbuf;
    px_algo_t algo;
    int ipc;

    if (status != PX_OK)
        return status;
    NEED(!count || (sendbuf && recvbuf), "px_allreduce");
    if (use_shm(comm, PX__COLL_ALLREDUCE, sendbuf, recvbuf, dtype, 1, count * px_dtype_size(dtype)))
        return px__shm_start(comm, PX__COLL_ALLREDUCE, sendbuf, recvbuf, count, dtype, op, -1,
                             opts, req_p);
    /* the algorithm first: a small recursive doubling on host buffers sends
     * its header in its data messages instead of a header exchange beside
     * them (not a staged device buffer: its chunks are several messages
     * between the same two ranks, and the staging keeps one header
     * exchange for the whole call; nor a communicator with a shared-memory
     * segment: its below-threshold ranks check the segment's header ring in
     * the header exchange, which the header-in-data mode has not) */
    {
        size_t wire = is_half(dtype) ? 4 : px_dtype_size(dtype); /* halves reduce in fp32 */
        algo = pick(opts, "PX_ALGO_ALLREDUCE");
        if (algo == PX_ALGO_AUTO && px__allreduce_algo)
            algo = px__allreduce_algo == 1 ? PX_ALGO_RING : PX_ALGO_RECURSIVE_DOUBLING;
        if (algo != PX_ALGO_RING && algo != PX_ALGO_RECURSIVE_DOUBLING &&
            algo != PX_ALGO_RABENSEIFNER)
            algo = count * wire <= PX__RD_MAX_BYTES ? PX_ALGO_RECURSIVE_DOUBLING
                 : count * wire <= PX__RABENSEIFNER_MAX_BYTES && comm->size > 2
                     ? PX_ALGO_RABENSEIFNER
                 : PX_ALGO_RING;
        uint64_t bytes = count * wire;
        /* IPC sums in the order of the algorithm the host path runs */
        ipc = use_ipc(comm, sendbuf, recvbuf, count, dtype, 1, opts);
        if (algo == PX_ALGO_RECURSIVE_DOUBLING && count > 0 && comm->size > 1 &&
            bytes <= PX__INLINE_MAX_BYTES && !px__inline_disable && !on_device(sendbuf, recvbuf) &&
            !comm->shm &&
            (bytes + sizeof(px__hdr_t) <= PX__EAGER_GUESS_BYTES ||
             bytes > PX__EAGER_GUESS_BYTES))
            status = px__req_create_inline(comm, PX__COLL_ALLREDUCE, dtype, op, count, -1, opts,
                                           &req);
        else
            status = px__req_create(comm, PX__COLL_ALLREDUCE, dtype, op, count, -1, NULL, NULL,
                                    opts, &req);
    }
    if (status != PX_OK)
        return status;
    if (count == 0)
        goto out;
    if (on_device(sendbuf, recvbuf) && comm->size == 1) {
        if (sendbuf != recvbuf)
            dev_ops->mem_copy(recvbuf, sendbuf, (size_t)(count * req->esz));
        goto out;
    } else if (comm->size == 1) {
        if (sendbuf != recvbuf)
            memcpy(recvbuf, sendbuf, (size_t)(count * req->esz));
        goto out; /* AVG over one rank: the input itself */
    }
    if (is_half(dtype) && !on_device(sendbuf, recvbuf)) { /* device: per chunk (px_stage.c) */
        float *t = stage_half(req, dtype, sendbuf, count);
        if (!t)
            return start_fail(req, PX_ERR_NO_MEMORY);
        req->half_dtype = dtype;
        req->half_dst = recvbuf;
        req->half_src = t;
        req->half_count = count;
        req->dtype = PX_FLOAT32;
        req->esz = 4;
        src = t;
        dst = t;
    }
    req->algo = algo;
    if (ipc) /* through the peers' mapped device memory (px_ipc.c) */
        status = px__ipc_allreduce(req, sendbuf, recvbuf, count, algo);
    else if (on_device(sendbuf, recvbuf)) /* chunked through host buffers (px_stage.c) */
        status = px__stage_allreduce(req, sendbuf, recvbuf, count, algo);
    else if (algo == PX_ALGO_RECURSIVE_DOUBLING)
        status = px__rd_allreduce_build(req, src, dst);
    else if (algo == PX_ALGO_RABENSEIFNER)
        status = px__rabenseifner_allreduce_build(req, src, dst);
    else
        status = px__ring_setup(req, 1, 1, 1, src, dst, NULL, count / (uint64_t)comm->size,
                                count % (uint64_t)comm->size);
    if (status != PX_OK)
        return start_fail(req, status);
out:
    *req_p = req;
    return PX_OK;
}

/* --- reduce-scatter / all-gather ------------------------------------------ */

px_status_t px_reduce_scatter_start(px_comm_t *comm, const void *sendbuf, void *recvbuf,
                                    uint64_t recvcount, px_dtype_t dtype, px_redop_t op,
                                    const px_coll_opts_t *opts, px_request_t **req_p)
{
    px_request_t *req;
    px_status_t status;
    uint64_t n;
    size_t esz;
    int inplace, ipc;

    status = check_common(comm, "px_reduce_scatter", dtype, (int)op, recvcount,
                          comm ? (uint64_t)comm->size : 1, 0, 0, req_p);
    if (status != PX_OK)
        return status;
    NEED(!recvcount || (sendbuf && recvbuf), "px_reduce_scatter");
    n = (uint64_t)comm->size;
    esz = px_dtype_size(dtype);
    inplace = (const char *)recvbuf == (const char *)sendbuf + (uint64_t)comm->rank * recvcount * esz;
    if (use_shm(comm, PX__COLL_REDUCE_SCATTER, sendbuf, recvbuf, dtype, 1, n * recvcount * esz))
        return px__shm_start(comm, PX__COLL_REDUCE_SCATTER, sendbuf, recvbuf, recvcount, dtype,
                             op, -1, opts, req_p);
    ipc = use_ipc(comm, sendbuf, recvbuf, recvcount, dtype, 1, opts);
    status = px__req_create(comm, PX__COLL_REDUCE_SCATTER, dtype, op, recvcount, -1, NULL, NULL,
                            opts, &req);
    if (status != PX_OK)
        return status;
    if (recvcount == 0)
        goto out;
    if (on_device(sendbuf, recvbuf)) {
        if (comm->size == 1) {
            if (!inplace)
                dev_ops->mem_copy(recvbuf, sendbuf, (size_t)recvcount * esz);
            goto out;
        }
        /* through the peers' mapped device memory (px_ipc.c), or chunked
         * through host buffers (px_stage.c) */
        status = ipc ? px__ipc_reduce_scatter(req, sendbuf, recvbuf, recvcount)
                     : px__stage_reduce_scatter(req, sendbuf, recvbuf, recvcount);
        if (status != PX_OK)
            return start_fail(req, status);
        req->algo = PX_ALGO_RING;
        goto out;
    }
    if (comm->size == 1) {
        if (!inplace)
            memcpy(recvbuf, sendbuf, (size_t)recvcount * esz);
        goto out;
    }
    if (is_half(dtype)) {
        float *t = stage_half(req, dtype, sendbuf, n * recvcount);
        if (!t)
            return start_fail(req, PX_ERR_NO_MEMORY);
        req->half_dtype = dtype;
        req->half_dst = recvbuf;
        req->half_src = t + (uint64_t)comm->rank * recvcount;
        req->half_count = recvcount;
        req->dtype = PX_FLOAT32;
        req->esz = 4;
        status = px__ring_setup(req, 0, 1, 0, t, t, NULL, recvcount, 0);
    } else if (inplace) {
        /* the whole buffer is ours: partial sums go into the other blocks */
        status = px__ring_setup(req, 0, 1, 0, sendbuf, (void *)sendbuf, NULL, recvcount, 0);
    } else {
        void *acc = px__req_tmp(req, 0, (size_t)(n * recvcount) * esz);
        if (!acc)
            return start_fail(req, PX_ERR_NO_MEMORY);
        status = px__ring_setup(req, 0, 1, 0, sendbuf, acc, recvbuf, recvcount, 0);
    }
    if (status != PX_OK)
        return start_fail(req, status);
    req->algo = PX_ALGO_RING;
out:
    *req_p = req;
    return PX_OK;
}

px_status_t px_allgather_start(px_comm_t *comm, const void *sendbuf, void *recvbuf,
                               uint64_t sendcount, px_dtype_t dtype,
                               const px_coll_opts_t *opts, px_request_t **req_p)
{
    px_request_t *req;
    px_status_t status;
    size_t esz;
    char *mine;
    int ipc;

    status = check_common(comm, "px_allgather", dtype, -1, sendcount,
                          comm ? (uint64_t)comm->size : 1, 0, 0, req_p);
    if (status != PX_OK)
        return status;
    NEED(!sendcount || (sendbuf && recvbuf), "px_allgather");
    esz = px_dtype_size(dtype);
    if (use_shm(comm, PX__COLL_ALLGATHER, sendbuf, recvbuf, dtype, 0,
                (uint64_t)comm->size * sendcount * esz))
        return px__shm_start(comm, PX__COLL_ALLGATHER, sendbuf, recvbuf, sendcount, dtype, PX_SUM,
                             -1, opts, req_p);
    ipc = use_ipc(comm, sendbuf, recvbuf, sendcount, dtype, 0, opts);
    status = px__req_create(comm, PX__COLL_ALLGATHER, dtype, PX_SUM, sendcount, -1, NULL, NULL,
                            opts, &req);
    if (status != PX_OK)
        return status;
    if (sendcount == 0)
        goto out;
    if (on_device(sendbuf, recvbuf) && comm->size == 1) {
        char *mine_dev = (char *)recvbuf + (uint64_t)comm->rank * sendcount * esz;
        if (mine_dev != (const char *)sendbuf)
            dev_ops->mem_copy(mine_dev, sendbuf, (size_t)sendcount * esz);
        goto out;
    }
    if (on_device(sendbuf, recvbuf)) {
        /* through the peers' mapped device memory (px_ipc.c), or chunked
         * through host buffers (px_stage.c) */
        status = ipc ? px__ipc_allgather(req, sendbuf, recvbuf, sendcount)
                     : px__stage_allgather(req, sendbuf, recvbuf, sendcount);
        if (status != PX_OK)
            return start_fail(req, status);
        req->algo = PX_ALGO_RING;
        goto out;
    } else {
        mine = (char *)recvbuf + (uint64_t)comm->rank * sendcount * esz;
        if (mine != (const char *)sendbuf)
            memcpy(mine, sendbuf, (size_t)sendcount * esz);
    }
    if (comm->size > 1) {
        status = px__ring_setup(req, 0, 0, 1, NULL, recvbuf, NULL, sendcount, 0);
        if (status != PX_OK)
            return start_fail(req, status);
        req->algo = PX_ALGO_RING;
    }
out:
    *req_p = req;
    return PX_OK;
}

/* --- broadcast / reduce / scatter / gather --------------------------------- */

/* Broadcast by scatter + ring all-gather: the schedule scatters, then the
 * ring runs. */
static px_status_t bcast_ring_advance(px_request_t *req, int *progressed_p)
{
    if (req->sched.acts) {
        px_status_t status = px__sched_advance(req, progressed_p);
        if (status != PX_OK)
            return status;
        px__sched_free(&req->sched);
        *progressed_p = 1;
    }
    return px__ring_advance(req, progressed_p);
}

px_status_t px_bcast_start(px_comm_t *comm, void *buf, uint64_t count, px_dtype_t dtype,
                           int root, const px_coll_opts_t *opts, px_request_t **req_p)
{
    px_request_t *req;
    px_status_t status = check_common(comm, "px_bcast", dtype, -1, count, 1, 1, root, req_p);
    px_algo_t algo;
    uint64_t bytes;
    int ipc;

    if (status != PX_OK)
        return status;
    NEED(!count || buf, "px_bcast");
    if (use_shm(comm, PX__COLL_BCAST, buf, NULL, dtype, 0, count * px_dtype_size(dtype)))
        return px__shm_start(comm, PX__COLL_BCAST, NULL, buf, count, dtype, PX_SUM, root, opts,
                             req_p);
    ipc = use_ipc(comm, buf, NULL, count, dtype, 0, opts);
    status = px__req_create(comm, PX__COLL_BCAST, dtype, PX_SUM, count, root, NULL, NULL, opts,
                            &req);
    if (status != PX_OK)
        return status;
    if (count == 0 || comm->size == 1)
        goto out;
    if (on_device(buf, NULL)) { /* peers' device memory (px_ipc.c) or staged (px_stage.c) */
        req->algo = PX_ALGO_TREE;
        status = ipc ? px__ipc_bcast(req, buf, count) : px__stage_bcast(req, buf, count);
        if (status != PX_OK)
            return start_fail(req, status);
        goto out;
    }
    bytes = count * req->esz;
    algo = pick(opts, "PX_ALGO_BCAST");
    if (algo != PX_ALGO_TREE && algo != PX_ALGO_RING)
        algo = (bytes <= BCAST_TREE_MAX_BYTES || comm->size == 2) ? PX_ALGO_TREE : PX_ALGO_RING;
    req->algo = algo;
    if (algo == PX_ALGO_TREE) {
        status = px__tree_bcast_build(req, buf, bytes);
    } else {
        /* van de Geijn: scatter the blocks of the ring layout from the root
         * (in place in buf), then all-gather them around the ring */
        uint64_t n = (uint64_t)comm->size, base = count / n, rem = count % n;
        status = px__ring_setup(req, 0, 0, 1, NULL, buf, NULL, base, rem);
        for (int p = 0; status == PX_OK && p < comm->size; p++) {
            uint64_t off = (uint64_t)p * base + ((uint64_t)p < rem ? (uint64_t)p : rem);
            uint64_t len = base + ((uint64_t)p < rem ? 1 : 0);
            char *at = (char *)buf + off * req->esz;
            if (p == root)
                continue;
            if (comm->rank == root)
                status = px__sched_add(&req->sched, PX__ACT_SEND, p, 0, NULL, at, len * req->esz, 0);
            else if (comm->rank == p)
                status = px__sched_add(&req->sched, PX__ACT_RECV, root, 0, at, NULL,
                                       len * req->esz, 0);
        }
        if (status == PX_OK && !req->sched.acts) /* nothing to scatter here: a no-op action */
            status = px__sched_add(&req->sched, PX__ACT_WAIT, 0, 0, NULL, NULL, 0, 0);
        req->advance = bcast_ring_advance;
    }
    if (status != PX_OK)
        return start_fail(req, status);
out:
    *req_p = req;
    return PX_OK;
}

px_status_t px_reduce_start(px_comm_t *comm, const void *sendbuf, void *recvbuf, uint64_t count,
                            px_dtype_t dtype, px_redop_t op, int root,
                            const px_coll_opts_t *opts, px_request_t **req_p)
{
    px_request_t *req;
    px_status_t status = check_common(comm, "px_reduce", dtype, (int)op, count, 1, 1, root, req_p);
    const void *src = sendbuf;
    void *dst = recvbuf;

    if (status != PX_OK)
        return status;
    NEED(!count || (sendbuf && (recvbuf || comm->rank != root)), "px_reduce");
    NO_DEVICE("px_reduce", sendbuf, recvbuf);
    status = px__req_create(comm, PX__COLL_REDUCE, dtype, op, count, root, NULL, NULL, opts, &req);
    if (status != PX_OK)
        return status;
    if (count == 0)
        goto out;
    if (comm->size == 1) {
        if (sendbuf != recvbuf)
            memcpy(recvbuf, sendbuf, (size_t)(count * req->esz));
        goto out;
    }
    if (is_half(dtype)) {
        float *t = stage_half(req, dtype, sendbuf, count);
        if (!t)
            return start_fail(req, PX_ERR_NO_MEMORY);
        if (comm->rank == root) {
            req->half_dtype = dtype;
            req->half_dst = recvbuf;
            req->half_src = t;
            req->half_count = count;
        }
        req->dtype = PX_FLOAT32;
        req->esz = 4;
        src = t;
        dst = t;
    }
    req->algo = PX_ALGO_TREE;
    status = px__tree_reduce_build(req, src, dst);
    if (status != PX_OK)
        return start_fail(req, status);
out:
    *req_p = req;
    return PX_OK;
}

px_status_t px_scatter_start(px_comm_t *comm, const void *sendbuf, void *recvbuf, uint64_t count,
                             px_dtype_t dtype, int root, const px_coll_opts_t *opts,
                             px_request_t **req_p)
{
    px_request_t *req;
    px_status_t status = check_common(comm, "px_scatter", dtype, -1, count,
                                      comm ? (uint64_t)comm->size : 1, 1, root, req_p);
    if (status != PX_OK)
        return status;
    NEED(!count || (recvbuf && (sendbuf || comm->rank != root)), "px_scatter");
    NO_DEVICE("px_scatter", sendbuf, recvbuf);
    status = px__req_create(comm, PX__COLL_SCATTER, dtype, PX_SUM, count, root, NULL, NULL, opts,
                            &req);
    if (status != PX_OK)
        return status;
    if (count) {
        req->algo = PX_ALGO_LINEAR;
        status = px__linear_scatter_build(req, sendbuf, recvbuf);
        if (status != PX_OK)
            return start_fail(req, status);
    }
    *req_p = req;
    return PX_OK;
}

px_status_t px_gather_start(px_comm_t *comm, const void *sendbuf, void *recvbuf, uint64_t count,
                            px_dtype_t dtype, int root, const px_coll_opts_t *opts,
                            px_request_t **req_p)
{
    px_request_t *req;
    px_status_t status = check_common(comm, "px_gather", dtype, -1, count,
                                      comm ? (uint64_t)comm->size : 1, 1, root, req_p);
    if (status != PX_OK)
        return status;
    NEED(!count || (sendbuf && (recvbuf || comm->rank != root)), "px_gather");
    NO_DEVICE("px_gather", sendbuf, recvbuf);
    status = px__req_create(comm, PX__COLL_GATHER, dtype, PX_SUM, count, root, NULL, NULL, opts,
                            &req);
    if (status != PX_OK)
        return status;
    if (count) {
        req->algo = PX_ALGO_LINEAR;
        status = px__linear_gather_build(req, sendbuf, recvbuf);
        if (status != PX_OK)
            return start_fail(req, status);
    }
    *req_p = req;
    return PX_OK;
}

/* --- all-to-all -------------------------------------------------------------- */

static px_status_t alltoallv_common(px_comm_t *comm, int kind, const void *sendbuf,
                                    const uint64_t *sendcounts, const uint64_t *sdispls,
                                    void *recvbuf, const uint64_t *recvcounts,
                                    const uint64_t *rdispls, px_dtype_t dtype, uint64_t hdr_count,
                                    const px_coll_opts_t *opts, px_request_t **req_p)
{
    px_request_t *req;
    px_status_t status;
    px_algo_t algo;
    uint64_t total_s = 0, total_r = 0;
    int ipc;

    for (int p = 0; p < comm->size; p++) {
        total_s += sendcounts[p];
        total_r += recvcounts[p];
    }
    NEED(!total_s || sendbuf, "px_alltoall");
    NEED(!total_r || recvbuf, "px_alltoall");
    NEED(!total_s || !total_r || sendbuf != recvbuf, "px_alltoall (no in-place form)");
    ipc = kind == PX__COLL_ALLTOALL && use_ipc(comm, sendbuf, recvbuf, hdr_count, dtype, 0, opts);
    status = px__req_create(comm, kind, dtype, PX_SUM, hdr_count, -1,
                            kind == PX__COLL_ALLTOALLV ? sendcounts : NULL,
                            kind == PX__COLL_ALLTOALLV ? recvcounts : NULL, opts, &req);
    if (status != PX_OK)
        return status;
    algo = pick(opts, "PX_ALGO_ALLTOALL");
    if (algo != PX_ALGO_PAIRWISE && algo != PX_ALGO_LINEAR)
        algo = comm->size <= ALLTOALL_LINEAR_MAX_RANKS ? PX_ALGO_LINEAR : PX_ALGO_PAIRWISE;
    req->algo = algo;
    if (on_device(sendbuf, recvbuf) && kind == PX__COLL_ALLTOALLV) /* staged whole (px_stage.c) */
        status = px__stage_alltoallv(req, sendbuf, sendcounts, sdispls, recvbuf, recvcounts,
                                     rdispls, algo);
    else if (ipc) /* all-to-all through the peers' mapped device memory (px_ipc.c) */
        status = px__ipc_alltoall(req, sendbuf, recvbuf, hdr_count);
    else if (on_device(sendbuf, recvbuf)) /* all-to-all: chunked through host buffers */
        status = hdr_count ? px__stage_alltoall(req, sendbuf, recvbuf, hdr_count, algo) : PX_OK;
    else
        status = px__pairwise_alltoallv_build(req, sendbuf, sendcounts, sdispls, recvbuf,
                                              recvcounts, rdispls, algo == PX_ALGO_PAIRWISE);
    if (status != PX_OK)
        return start_fail(req, status);
    *req_p = req;
    return PX_OK;
}

px_status_t px_alltoall_start(px_comm_t *comm, const void *sendbuf, void *recvbuf,
                              uint64_t count, px_dtype_t dtype, const px_coll_opts_t *opts,
                              px_request_t **req_p)
{
    px_status_t status = check_common(comm, "px_alltoall", dtype, -1, count,
                                      comm ? (uint64_t)comm->size : 1, 0, 0, req_p);
    uint64_t *v;

    if (status != PX_OK)
        return status;
    if (count && sendbuf && recvbuf && sendbuf != recvbuf &&
        use_shm(comm, PX__COLL_ALLTOALL, sendbuf, recvbuf, dtype, 0,
                (uint64_t)comm->size * count * px_dtype_size(dtype)))
        return px__shm_start(comm, PX__COLL_ALLTOALL, sendbuf, recvbuf, count, dtype, PX_SUM, -1,
                             opts, req_p);
    v = malloc(2 * (size_t)comm->size * sizeof(uint64_t));
    if (!v)
        return PX_ERR_NO_MEMORY;
    for (int p = 0; p < comm->size; p++) {
        v[p] = count;
        v[comm->size + p] = (uint64_t)p * count;
    }
    status = alltoallv_common(comm, PX__COLL_ALLTOALL, sendbuf, v, v + comm->size, recvbuf, v,
                              v + comm->size, dtype, count, opts, req_p);
    free(v); /* the schedule holds pointers and sizes, not these arrays */
    return status;
}

px_status_t px_alltoallv_start(px_comm_t *comm, const void *sendbuf, const uint64_t *sendcounts,
                               const uint64_t *sdispls, void *recvbuf, const uint64_t *recvcounts,
                               const uint64_t *rdispls, px_dtype_t dtype,
                               const px_coll_opts_t *opts, px_request_t **req_p)
{
    px_status_t status = check_common(comm, "px_alltoallv", dtype, -1, 0, 1, 0, 0, req_p);
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
    }
    return alltoallv_common(comm, PX__COLL_ALLTOALLV, sendbuf, sendcounts, sdispls, recvbuf,
                            recvcounts, rdispls, dtype, 0, opts, req_p);
}

/* --- barrier, point-to-point ------------------------------------------------ */

px_status_t px_barrier_start(px_comm_t *comm, const px_coll_opts_t *opts, px_request_t **req_p)
{
    px_status_t status = comm_usable(comm);
    if (status != PX_OK)
        return status;
    if (!req_p)
        return PX_ERR_INVALID_ARGUMENT;
    /* every rank hears from every rank: the header exchange is the barrier */
    return px__req_create(comm, PX__COLL_BARRIER, PX_UINT8, PX_SUM, 0, -1, NULL, NULL, opts,
                          req_p);
}

static px_status_t p2p_advance(px_request_t *req, int *progressed_p)
{
    px__op_t *op = req->ops[0];
    px_status_t status;

    if (!op->done)
        return PX_INPROGRESS;
    status = px__op_status(req->comm, op);
    if (status != PX_OK)
        return status;
    px__op_reap(req->comm, op);
    req->ops[0] = NULL;
    *progressed_p = 1;
    return PX_OK;
}

/* --- point-to-point on device buffers: chunks staged through host buffers ---
 *
 * A device buffer of `bytes` travels as ceil(bytes / chunk) messages of the
 * same tag (UCX matches a sender's messages of one tag in posting order, so
 * the k-th receive posted gets the k-th chunk). Two host buffers of one chunk
 * each (request slots 0 and 1: pinned where the device backend registered a
 * pinned allocator, px_transport_set_pinned_memory) alternate: the sender
 * copies chunk k+1 off the device while chunk k is on the wire; the receiver
 * has chunks k and k+1 posted and copies k onto the device while k+1
 * arrives. Both ends must stage (a device buffer on both sides, as every rank
 * of a job shares one backend): a host receiver of a staged send sees
 * only the first chunk, a short message, which fails the receive. */

static size_t stage_chunk = PX_STAGE_CHUNK_DEFAULT;

void px_transport_set_stage_chunk(size_t bytes)
{
    stage_chunk = bytes ? bytes : PX_STAGE_CHUNK_DEFAULT;
}

size_t px__stage_chunk(void)
{
    return stage_chunk;
}

static px_status_t p2p_dev_advance(px_request_t *req, int *progressed_p)
{
    px_comm_t *comm = req->comm;
    const int is_send = req->kind == PX__COLL_SEND;
    px_status_t status;
    int again = 1;

    while (again) {
        again = 0;
        for (int i = 0; i < 2; i++) {
            px__op_t *op = req->ops[i];
            if (op) {
                if (!op->done)
                    continue;
                status = px__op_status(comm, op);
                if (status != PX_OK)
                    return status;
                px__op_reap(comm, op);
                req->ops[i] = NULL;
                if (!is_send) /* the chunk is here: onto the device */
                    dev_ops->mem_copy_from_host(req->p2p_dev + req->p2p_off[i], req->tmp[i],
                                                req->p2p_len[i]);
                req->p2p_done += req->p2p_len[i];
                *progressed_p = 1;
            }
            if (req->p2p_next < req->p2p_total) {
                size_t len = req->p2p_total - req->p2p_next;
                len = len < req->p2p_chunk ? len : req->p2p_chunk;
                req->p2p_off[i] = req->p2p_next;
                req->p2p_len[i] = len;
                req->p2p_next += len;
                if (is_send) {
                    dev_ops->mem_copy_to_host(req->tmp[i], req->p2p_dev + req->p2p_off[i], len);
                    status = px__req_send(req, req->p2p_peer, req->p2p_tag, req->tmp[i], len,
                                          &req->ops[i]);
                } else {
                    status = px__req_recv(req, req->p2p_peer, req->p2p_tag, req->tmp[i], len,
                                          &req->ops[i]);
                }
                if (status != PX_OK)
                    return status;
                *progressed_p = 1;
                again = 1; /* a send may have completed at once */
            }
        }
    }
    return req->p2p_done == req->p2p_total ? PX_OK : PX_INPROGRESS;
}

static px_status_t p2p_start(px_comm_t *comm, int is_send, int peer, uint32_t tag, void *buf,
                             uint64_t bytes, const px_coll_opts_t *opts, px_request_t **req_p)
{
    px_request_t *req;
    px_status_t status = comm_usable(comm);
    ucp_tag_t t;

    if (status != PX_OK)
        return status;
    if (!req_p || peer < 0 || peer >= comm->size || (!buf && bytes) ||
        bytes > PX_COLL_MAX_BYTES) {
        px_error("px_%s: bad peer %d (size %d) or buffer (%llu bytes)", is_send ? "send" : "recv",
                 peer, comm->size, (unsigned long long)bytes);
        return PX_ERR_INVALID_ARGUMENT;
    }
    status = px__req_create(comm, is_send ? PX__COLL_SEND : PX__COLL_RECV, PX_UINT8, PX_SUM,
                            bytes, -1, NULL, NULL, opts, &req);
    if (status != PX_OK)
        return status;
    t = px__tag(comm->id, PX__TAG_KIND_P2P, (unsigned)(is_send ? comm->rank : peer), tag);
    if (bytes && on_device(buf, NULL) && px_transport_cuda_memory(comm->tr)) {
        /* UCX moves device memory itself: the pointer goes to it as it is */
        if (is_send)
            dev_ops->synchronize(); /* the kernels that wrote buf are done */
    } else if (bytes && on_device(buf, NULL)) {
        size_t chunk = stage_chunk < bytes ? stage_chunk : (size_t)bytes;
        if (!px__req_tmp(req, 0, chunk) || !px__req_tmp(req, 1, chunk))
            return start_fail(req, PX_ERR_NO_MEMORY);
        if (is_send)
            dev_ops->synchronize(); /* the kernels that wrote buf are done */
        req->p2p_dev = buf;
        req->p2p_peer = peer;
        req->p2p_tag = t;
        req->p2p_total = (size_t)bytes;
        req->p2p_chunk = chunk;
        req->advance = p2p_dev_advance;
        int progressed = 0;
        status = p2p_dev_advance(req, &progressed); /* post the first two chunks */
        if (status != PX_OK && status != PX_INPROGRESS)
            return start_fail(req, status);
        *req_p = req;
        return PX_OK;
    }
    status = is_send ? px__req_send(req, peer, t, buf, (size_t)bytes, &req->ops[0])
                     : px__req_recv(req, peer, t, buf, (size_t)bytes, &req->ops[0]);
    if (status != PX_OK)
        return start_fail(req, status);
    req->advance = p2p_advance;
    *req_p = req;
    return PX_OK;
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
