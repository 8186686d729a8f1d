/* px_algo.c: the host algorithms (coll/) chosen and set up for a
 * collective that no path (px_path.h) took: host buffers over UCX; and a
 * send or receive no path took: one UCX message of the caller's buffer.
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

#include "px_env.h"
#include "px_log.h"
#include "px_reduce.h"

#define BCAST_TREE_MAX_BYTES (512u * 1024u)
/* All-reduce: Rabenseifner between PX__RD_MAX_BYTES and this, ring above.
 * Two ranks use the ring from PX__RD_MAX_BYTES up: the same two halves
 * exchanged, but pipelined in chunks with the reduction straight from the
 * input (measured 32 KiB-4 MiB: 0.65-0.85x Rabenseifner's time). */
#define PX__RABENSEIFNER_MAX_BYTES (1024u * 1024u)
#define ALLTOALL_LINEAR_MAX_RANKS 8

int px__allreduce_algo = 0;
int px__inline_disable = 0;

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

/* fp16/bf16 travel and reduce as fp32: 4 bytes an element on the wire. */
static size_t wire_size(px_dtype_t dtype)
{
    return px__is_half(dtype) ? 4 : px_dtype_size(dtype);
}

px_algo_t px__algo_choose(const px_comm_t *comm, const px__coll_args_t *a)
{
    px_algo_t algo;

    if (a->kind == PX__COLL_ALLREDUCE) {
        uint64_t bytes = a->count * wire_size(a->dtype);
        algo = pick(a->opts, "PX_ALGO_ALLREDUCE");
        if (algo == PX_ALGO_AUTO && px__allreduce_algo)
            algo = px__allreduce_algo == 1 ? PX_ALGO_RING : PX_ALGO_RECURSIVE_DOUBLING;
        if (algo != PX_ALGO_RING && algo != PX_ALGO_RECURSIVE_DOUBLING &&
            algo != PX_ALGO_RABENSEIFNER)
            algo = bytes <= PX__RD_MAX_BYTES ? PX_ALGO_RECURSIVE_DOUBLING
                 : bytes <= PX__RABENSEIFNER_MAX_BYTES && comm->size > 2
                     ? PX_ALGO_RABENSEIFNER
                 : PX_ALGO_RING;
        return algo;
    }
    if (a->kind == PX__COLL_ALLTOALL || a->kind == PX__COLL_ALLTOALLV) {
        algo = pick(a->opts, "PX_ALGO_ALLTOALL");
        if (algo != PX_ALGO_PAIRWISE && algo != PX_ALGO_LINEAR)
            algo = comm->size <= ALLTOALL_LINEAR_MAX_RANKS ? PX_ALGO_LINEAR : PX_ALGO_PAIRWISE;
        return algo;
    }
    return PX_ALGO_AUTO;
}

/* A small recursive doubling sends its header in its data messages unless
 * the header would push the data over UCX's eager limit. (The caller
 * leaves out the device paths, whose chunks are several messages between
 * the same two ranks under one header exchange, and communicators with a
 * path that reads the header exchange: shm's below-threshold ranks.) */
int px__algo_inline(const px_comm_t *comm, const px__coll_args_t *a)
{
    uint64_t bytes = a->count * wire_size(a->dtype);
    return a->kind == PX__COLL_ALLREDUCE && a->algo == PX_ALGO_RECURSIVE_DOUBLING &&
           a->count > 0 && comm->size > 1 && bytes <= PX__INLINE_MAX_BYTES &&
           !px__inline_disable &&
           (bytes + sizeof(px__hdr_t) <= PX__EAGER_GUESS_BYTES || bytes > PX__EAGER_GUESS_BYTES);
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

/* Reduces in fp32 from here: `t` (the staged input) is the request's
 * buffer, rounded into `dst` (`n` elements from t + off) when it ends. */
static void half_setup(px_request_t *req, px_dtype_t dtype, void *dst, const float *t,
                       uint64_t n)
{
    req->half_dtype = dtype;
    req->half_dst = dst;
    req->half_src = t;
    req->half_count = n;
}

static px_status_t allreduce(px_request_t *req, const px__coll_args_t *a)
{
    px_comm_t *comm = req->comm;
    const void *src = a->sendbuf;
    void *dst = a->recvbuf;

    if (px__is_half(a->dtype)) {
        float *t = stage_half(req, a->dtype, a->sendbuf, a->count);
        if (!t)
            return PX_ERR_NO_MEMORY;
        half_setup(req, a->dtype, a->recvbuf, t, a->count);
        req->dtype = PX_FLOAT32;
        req->esz = 4;
        src = t;
        dst = t;
    }
    req->algo = a->algo;
    if (a->algo == PX_ALGO_RECURSIVE_DOUBLING)
        return px__rd_allreduce_build(req, src, dst);
    if (a->algo == PX_ALGO_RABENSEIFNER)
        return px__rabenseifner_allreduce_build(req, src, dst);
    return px__ring_setup(req, 1, 1, 1, src, dst, NULL, a->count / (uint64_t)comm->size,
                          a->count % (uint64_t)comm->size);
}

static px_status_t reduce_scatter(px_request_t *req, const px__coll_args_t *a)
{
    px_comm_t *comm = req->comm;
    uint64_t n = (uint64_t)comm->size, recvcount = a->count;
    size_t esz = px_dtype_size(a->dtype);
    int inplace = (const char *)a->recvbuf ==
                  (const char *)a->sendbuf + (uint64_t)comm->rank * recvcount * esz;
    px_status_t status;

    if (px__is_half(a->dtype)) {
        float *t = stage_half(req, a->dtype, a->sendbuf, n * recvcount);
        if (!t)
            return PX_ERR_NO_MEMORY;
        half_setup(req, a->dtype, a->recvbuf, t + (uint64_t)comm->rank * recvcount, recvcount);
        req->dtype = PX_FLOAT32;
        req->esz = 4;
        status = px__ring_setup(req, 0, 1, 0, t, t, NULL, recvcount, 0);
    } else if (inplace) {
        /* the whole buffer is ours: partial sums go into the other blocks */
        status = px__ring_setup(req, 0, 1, 0, a->sendbuf, (void *)a->sendbuf, NULL, recvcount, 0);
    } else {
        void *acc = px__req_tmp(req, 0, (size_t)(n * recvcount) * esz);
        if (!acc)
            return PX_ERR_NO_MEMORY;
        status = px__ring_setup(req, 0, 1, 0, a->sendbuf, acc, a->recvbuf, recvcount, 0);
    }
    if (status == PX_OK)
        req->algo = PX_ALGO_RING;
    return status;
}

static px_status_t allgather(px_request_t *req, const px__coll_args_t *a)
{
    px_comm_t *comm = req->comm;
    size_t esz = px_dtype_size(a->dtype);
    char *mine = (char *)a->recvbuf + (uint64_t)comm->rank * a->count * esz;
    px_status_t status;

    if (mine != (const char *)a->sendbuf)
        memcpy(mine, a->sendbuf, (size_t)a->count * esz);
    status = px__ring_setup(req, 0, 0, 1, NULL, a->recvbuf, NULL, a->count, 0);
    if (status == PX_OK)
        req->algo = PX_ALGO_RING;
    return status;
}

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

static px_status_t bcast(px_request_t *req, const px__coll_args_t *a)
{
    px_comm_t *comm = req->comm;
    void *buf = a->recvbuf;
    uint64_t count = a->count, bytes = count * req->esz;
    int root = a->root;
    px_algo_t algo = pick(a->opts, "PX_ALGO_BCAST");
    px_status_t status;

    if (algo != PX_ALGO_TREE && algo != PX_ALGO_RING)
        algo = (bytes <= BCAST_TREE_MAX_BYTES || comm->size == 2) ? PX_ALGO_TREE : PX_ALGO_RING;
    req->algo = algo;
    if (algo == PX_ALGO_TREE)
        return px__tree_bcast_build(req, buf, bytes);
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
    return status;
}

static px_status_t reduce(px_request_t *req, const px__coll_args_t *a)
{
    px_comm_t *comm = req->comm;
    const void *src = a->sendbuf;
    void *dst = a->recvbuf;

    if (px__is_half(a->dtype)) {
        float *t = stage_half(req, a->dtype, a->sendbuf, a->count);
        if (!t)
            return PX_ERR_NO_MEMORY;
        if (comm->rank == a->root)
            half_setup(req, a->dtype, a->recvbuf, t, a->count);
        req->dtype = PX_FLOAT32;
        req->esz = 4;
        src = t;
        dst = t;
    }
    req->algo = PX_ALGO_TREE;
    return px__tree_reduce_build(req, src, dst);
}

static px_status_t alltoall(px_request_t *req, const px__coll_args_t *a)
{
    px_comm_t *comm = req->comm;
    uint64_t *v = malloc(2 * (size_t)comm->size * sizeof(uint64_t));
    px_status_t status;

    if (!v)
        return PX_ERR_NO_MEMORY;
    for (int p = 0; p < comm->size; p++) {
        v[p] = a->count;
        v[comm->size + p] = (uint64_t)p * a->count;
    }
    status = px__pairwise_alltoallv_build(req, a->sendbuf, v, v + comm->size, a->recvbuf, v,
                                          v + comm->size, a->algo == PX_ALGO_PAIRWISE);
    free(v); /* the schedule holds pointers and sizes, not these arrays */
    return status;
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

/* One UCX message of the caller's buffer: host memory, or device memory
 * where UCX moves it itself (px_transport_cuda_memory; the staging path
 * took the other device buffers). */
static px_status_t p2p(px_request_t *req, const px__coll_args_t *a)
{
    px_status_t status;

    if (a->kind == PX__COLL_SEND) {
        if (a->count && px__on_device(a->sendbuf, NULL))
            px__dev_ops()->synchronize(); /* the kernels that wrote buf are done */
        status = px__req_send(req, a->peer, a->p2p_tag, a->sendbuf, (size_t)a->count,
                              &req->ops[0]);
    } else {
        status = px__req_recv(req, a->peer, a->p2p_tag, a->recvbuf, (size_t)a->count,
                              &req->ops[0]);
    }
    if (status == PX_OK)
        req->advance = p2p_advance;
    return status;
}

px_status_t px__algo_start(px_request_t *req, const px__coll_args_t *a)
{
    switch (a->kind) {
    case PX__COLL_ALLREDUCE:
        return allreduce(req, a);
    case PX__COLL_REDUCE_SCATTER:
        return reduce_scatter(req, a);
    case PX__COLL_ALLGATHER:
        return allgather(req, a);
    case PX__COLL_BCAST:
        return bcast(req, a);
    case PX__COLL_REDUCE:
        return reduce(req, a);
    case PX__COLL_SCATTER:
        req->algo = PX_ALGO_LINEAR;
        return px__linear_scatter_build(req, a->sendbuf, a->recvbuf);
    case PX__COLL_GATHER:
        req->algo = PX_ALGO_LINEAR;
        return px__linear_gather_build(req, a->sendbuf, a->recvbuf);
    case PX__COLL_ALLTOALL:
        req->algo = a->algo;
        return alltoall(req, a);
    case PX__COLL_ALLTOALLV:
        req->algo = a->algo;
        return px__pairwise_alltoallv_build(req, a->sendbuf, a->sendcounts, a->sdispls,
                                            a->recvbuf, a->recvcounts, a->rdispls,
                                            a->algo == PX_ALGO_PAIRWISE);
    case PX__COLL_SEND:
    case PX__COLL_RECV:
        return p2p(req, a);
    default: /* barrier: the header exchange is all */
        return PX_OK;
    }
}
