/* px_coll.c: the public blocking point-to-point and collective calls.
 *
 * Thin entry points (STYLE.md, "From NCCL"): check the arguments, run the
 * collective header exchange (mismatch detection), then hand the data phase
 * to the algorithm file (all-reduce: coll/rd.c up to PX__RD_MAX_BYTES,
 * coll/ring.c above; both give bitwise-identical results on every rank, but
 * not the same bits as each other, since the sum order differs) or run the small
 * algorithm here (binomial-tree broadcast; the barrier is the header
 * exchange itself).
 *
 * Collective header: every collective starts with a 32-byte header (magic,
 * sequence number, kind, dtype, op, root, count) that each rank sends to
 * every other rank; each rank compares all of them with its own, so when any
 * two ranks disagree every rank returns PX_ERR_MISMATCH (naming the first
 * disagreeing rank and both values) before any data moves, and the
 * communicator stays usable. Cost: n-1 tiny eager messages each way per
 * collective; a log-step agreement can replace it when worlds get large.
 *
 * Runs on the thread using the communicator. */
#include "px_transport_int.h"

#include <stdlib.h>
#include <string.h>

#include "px_log.h"

#define HDR_MAGIC 0x50584844u /* "PXHD" */

enum { COLL_ALLREDUCE = 1, COLL_BCAST = 2, COLL_BARRIER = 3 };

typedef struct {
    uint32_t magic;
    uint32_t seq;
    uint32_t kind;
    uint32_t dtype;
    uint32_t op;
    int32_t root;
    uint64_t count;
} coll_hdr_t;

static const char *kind_name(uint32_t kind)
{
    switch (kind) {
    case COLL_ALLREDUCE: return "all-reduce";
    case COLL_BCAST: return "broadcast";
    case COLL_BARRIER: return "barrier";
    }
    return "unknown collective";
}

px_status_t px__coll_begin(px_comm_t *comm, unsigned kind, unsigned dtype, unsigned op,
                           uint64_t count, int root, int64_t deadline, uint32_t *seq_p)
{
    uint32_t seq = comm->coll_seq++;
    coll_hdr_t mine = {HDR_MAGIC, seq, kind, dtype, op, root, count};
    coll_hdr_t *theirs;
    px__op_t *o;
    px_status_t status = PX_OK;

    if (comm->size == 1) {
        *seq_p = seq;
        return PX_OK;
    }
    theirs = calloc((size_t)comm->size, sizeof(*theirs));
    if (!theirs)
        return PX_ERR_NO_MEMORY;
    for (int r = 0; r < comm->size; r++) {
        if (r == comm->rank)
            continue;
        PX_CHECK_GOTO(px__recv_post(comm, r,
                                    px__tag(comm->id, PX__TAG_KIND_COLL, r,
                                            px__coll_low(seq, PX__PHASE_HDR, 0)),
                                    &theirs[r], sizeof(theirs[r]), &o), status, out_cancel);
    }
    for (int i = 1; i < comm->size; i++) {
        int r = (comm->rank + i) % comm->size; /* spread the fan-out */
        PX_CHECK_GOTO(px__send_post(comm, r,
                                    px__tag(comm->id, PX__TAG_KIND_COLL, comm->rank,
                                            px__coll_low(seq, PX__PHASE_HDR, 0)),
                                    &mine, sizeof(mine), &o), status, out_cancel);
    }
    status = px__wait(comm, NULL, deadline);
    if (status != PX_OK)
        goto out_free;
    for (int r = 0; r < comm->size; r++) {
        const coll_hdr_t *h = &theirs[r];
        if (r == comm->rank)
            continue;
        if (h->magic != HDR_MAGIC || h->seq != seq || h->kind != kind) {
            status = px__comm_set_error(comm, PX_ERR_MISMATCH,
                                        "rank %d: collective mismatch: it called %s #%u, we "
                                        "called %s #%u", r, kind_name(h->kind), h->seq,
                                        kind_name(kind), seq);
            goto out_free;
        }
        if (h->count != count || h->dtype != dtype || h->op != op || h->root != root) {
            status = px__comm_set_error(comm, PX_ERR_MISMATCH,
                                        "rank %d: %s #%u mismatch: it passed count %llu dtype %u "
                                        "op %u root %d, we passed count %llu dtype %u op %u root %d",
                                        r, kind_name(kind), seq, (unsigned long long)h->count,
                                        h->dtype, h->op, h->root, (unsigned long long)count, dtype,
                                        op, root);
            goto out_free;
        }
    }
    *seq_p = seq;
    goto out_free;

out_cancel:
    px__cancel_all(comm);
out_free:
    free(theirs);
    return status;
}

/* Entry check shared by every call: a failed comm keeps failing. */
static px_status_t comm_usable(px_comm_t *comm)
{
    if (!comm)
        return PX_ERR_INVALID_ARGUMENT;
    if (comm->failed)
        return comm->failed;
    if (atomic_load(&comm->aborted) == 2) /* aborted while idle */
        return px__comm_set_error(comm, PX_ERR_ABORTED, "aborted: %s", comm->abort_reason);
    return PX_OK;
}

px_status_t px_send(px_comm_t *comm, int peer, uint32_t tag, const void *buf, size_t bytes,
                    int timeout_ms)
{
    px__op_t *op;
    px_status_t status = comm_usable(comm);

    if (status != PX_OK)
        return status;
    if (peer < 0 || peer >= comm->size || (!buf && bytes)) {
        px_error("px_send: bad peer %d or buffer", peer);
        return PX_ERR_INVALID_ARGUMENT;
    }
    status = px__send_post(comm, peer, px__tag(comm->id, PX__TAG_KIND_P2P, comm->rank, tag), buf,
                           bytes, &op);
    if (status != PX_OK)
        return status;
    return px__wait(comm, op, px__deadline(comm, timeout_ms));
}

px_status_t px_recv(px_comm_t *comm, int peer, uint32_t tag, void *buf, size_t bytes,
                    int timeout_ms)
{
    px__op_t *op;
    px_status_t status = comm_usable(comm);

    if (status != PX_OK)
        return status;
    if (peer < 0 || peer >= comm->size || (!buf && bytes)) {
        px_error("px_recv: bad peer %d or buffer", peer);
        return PX_ERR_INVALID_ARGUMENT;
    }
    status = px__recv_post(comm, peer, px__tag(comm->id, PX__TAG_KIND_P2P, peer, tag), buf, bytes,
                           &op);
    if (status != PX_OK)
        return status;
    return px__wait(comm, op, px__deadline(comm, timeout_ms));
}

px_status_t px_allreduce(px_comm_t *comm, const void *sendbuf, void *recvbuf, uint64_t count,
                         px_dtype_t dtype, px_redop_t op, int timeout_ms)
{
    px_status_t status = comm_usable(comm);
    int64_t deadline;
    uint32_t seq;

    if (status != PX_OK)
        return status;
    if (dtype != PX_FLOAT32 || (op != PX_SUM && op != PX_AVG)) {
        px_error("px_allreduce: dtype %d op %d not supported (fp32 SUM/AVG only)", dtype, op);
        return PX_ERR_INVALID_ARGUMENT;
    }
    if (count && (!sendbuf || !recvbuf || count > SIZE_MAX / sizeof(float))) {
        px_error("px_allreduce: bad buffers or count %llu", (unsigned long long)count);
        return PX_ERR_INVALID_ARGUMENT;
    }
    deadline = px__deadline(comm, timeout_ms);
    status = px__coll_begin(comm, COLL_ALLREDUCE, dtype, op, count, -1, deadline, &seq);
    if (status != PX_OK || count == 0)
        return status;
    if (comm->size == 1) {
        if (sendbuf != recvbuf)
            memcpy(recvbuf, sendbuf, count * sizeof(float));
        return PX_OK;
    }
    {
        float scale = op == PX_AVG ? 1.0f / (float)comm->size : 1.0f;
        uint64_t bytes = count * sizeof(float);
        int rd = px__allreduce_algo == 2 ? bytes <= PX__WINDOW * comm->chunk_bytes
               : px__allreduce_algo == 1 ? 0
               : bytes <= PX__RD_MAX_BYTES && bytes <= PX__WINDOW * comm->chunk_bytes;
        if (rd)
            return px__rd_allreduce_f32(comm, seq, sendbuf, recvbuf, count, scale, deadline);
        return px__ring_allreduce_f32(comm, seq, sendbuf, recvbuf, count, scale, deadline);
    }
}

int px__allreduce_algo = 0;

/* Binomial tree rooted at `root` (MPICH's MPIR_Bcast_binomial): each rank
 * receives the whole buffer from its parent, then sends it to its children,
 * largest subtree first. */
px_status_t px_broadcast(px_comm_t *comm, void *buf, size_t bytes, int root, int timeout_ms)
{
    px_status_t status = comm_usable(comm);
    int64_t deadline;
    uint32_t seq;
    int n, vr, mask;
    px__op_t *op;

    if (status != PX_OK)
        return status;
    if (root < 0 || root >= comm->size || (!buf && bytes)) {
        px_error("px_broadcast: bad root %d or buffer", root);
        return PX_ERR_INVALID_ARGUMENT;
    }
    deadline = px__deadline(comm, timeout_ms);
    status = px__coll_begin(comm, COLL_BCAST, PX_UINT8, 0, bytes, root, deadline, &seq);
    if (status != PX_OK || comm->size == 1 || bytes == 0)
        return status;
    n = comm->size;
    vr = (comm->rank - root + n) % n;
    for (mask = 1; mask < n; mask <<= 1) {
        if (vr & mask) {
            int src = (vr - mask + root) % n;
            status = px__recv_post(comm, src,
                                   px__tag(comm->id, PX__TAG_KIND_COLL, src,
                                           px__coll_low(seq, PX__PHASE_BCAST, 0)),
                                   buf, bytes, &op);
            if (status != PX_OK)
                return status;
            status = px__wait(comm, op, deadline);
            if (status != PX_OK)
                return status;
            break;
        }
    }
    for (mask >>= 1; mask > 0; mask >>= 1) {
        if (vr + mask < n) {
            int dst = (vr + mask + root) % n;
            status = px__send_post(comm, dst,
                                   px__tag(comm->id, PX__TAG_KIND_COLL, comm->rank,
                                           px__coll_low(seq, PX__PHASE_BCAST, 0)),
                                   buf, bytes, &op);
            if (status != PX_OK) {
                px__cancel_all(comm);
                return status;
            }
        }
    }
    return px__wait(comm, NULL, deadline);
}

px_status_t px_barrier(px_comm_t *comm, int timeout_ms)
{
    px_status_t status = comm_usable(comm);
    uint32_t seq;

    if (status != PX_OK)
        return status;
    /* every rank hears from every rank: the header exchange is a barrier */
    return px__coll_begin(comm, COLL_BARRIER, 0, 0, 0, -1, px__deadline(comm, timeout_ms), &seq);
}
