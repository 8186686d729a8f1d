/* coll/tree.c: binomial trees (broadcast, reduce) and the linear scatter and
 * gather, as schedules.
 *
 * Binomial tree rooted at `root` (MPICH's MPIR_Bcast_binomial and
 * MPIR_Reduce_binomial; Thakur, Rabenseifner & Gropp, IJHPCA 2005): ranks
 * are renumbered vr = (r - root) mod n; in broadcast each rank receives the
 * whole buffer from vr - lowbit(vr) and sends it to vr + 2^k for the 2^k
 * below its low bit, largest subtree first; reduce runs the same tree
 * backwards, combining (own OP child) in a fixed order, so results are
 * deterministic. log2(n) rounds.
 *
 * Scatter / gather: the root sends (receives) each rank's block directly;
 * every message is posted at once (n-1 messages at the root), which on the
 * worlds of one machine beats a tree's extra copies.
 * Runs on the thread using the communicator. */
#include "../px_transport_int.h"

#include <string.h>

#define ADD(...) do { status = px__sched_add(s, __VA_ARGS__); if (status != PX_OK) return status; } while (0)

px_status_t px__tree_bcast_build(px_request_t *req, void *buf, uint64_t bytes)
{
    px_comm_t *comm = req->comm;
    px__sched_t *s = &req->sched;
    const int n = comm->size, root = req->root;
    const int vr = (comm->rank - root + n) % n;
    int mask;
    px_status_t status;

    for (mask = 1; mask < n; mask <<= 1) {
        if (vr & mask) {
            int src = (vr - mask + root) % n;
            ADD(PX__ACT_RECV, src, 0, buf, NULL, bytes, 0);
            ADD(PX__ACT_WAIT, 0, 0, NULL, NULL, 0, 0);
            break;
        }
    }
    for (mask >>= 1; mask > 0; mask >>= 1)
        if (vr + mask < n)
            ADD(PX__ACT_SEND, (vr + mask + root) % n, 0, NULL, buf, bytes, 0);
    req->advance = px__sched_advance;
    return PX_OK;
}

px_status_t px__tree_reduce_build(px_request_t *req, const void *sendbuf, void *recvbuf)
{
    px_comm_t *comm = req->comm;
    px__sched_t *s = &req->sched;
    const int n = comm->size, root = req->root, r = comm->rank;
    const int vr = (r - root + n) % n;
    const uint64_t count = req->count, bytes = count * req->esz;
    void *acc = r == root ? recvbuf : px__req_tmp(req, 0, (size_t)bytes);
    void *tmp = px__req_tmp(req, 1, (size_t)bytes);
    px_status_t status;

    if (!acc || !tmp)
        return PX_ERR_NO_MEMORY;
    if (acc != sendbuf)
        ADD(PX__ACT_COPY, 0, 0, acc, sendbuf, bytes, 0);
    for (int mask = 1; mask < n; mask <<= 1) {
        if (vr & mask) { /* send the partial result to the parent, done */
            ADD(PX__ACT_SEND, (vr - mask + root) % n, 0, NULL, acc, bytes, 0);
            break;
        }
        if (vr + mask < n) { /* combine the child's subtree: acc = acc OP child */
            ADD(PX__ACT_RECV, (vr + mask + root) % n, 0, tmp, NULL, bytes, 0);
            ADD(PX__ACT_WAIT, 0, 0, NULL, NULL, 0, 0);
            ADD(PX__ACT_REDUCE, 0, 0, acc, tmp, count, 0);
        }
    }
    if (r == root)
        ADD(PX__ACT_AVG, 0, 0, acc, NULL, count, 0);
    req->advance = px__sched_advance;
    return PX_OK;
}

px_status_t px__linear_scatter_build(px_request_t *req, const void *sendbuf, void *recvbuf)
{
    px_comm_t *comm = req->comm;
    px__sched_t *s = &req->sched;
    const uint64_t bytes = req->count * req->esz;
    px_status_t status;

    if (comm->rank != req->root) {
        ADD(PX__ACT_RECV, req->root, 0, recvbuf, NULL, bytes, 0);
    } else {
        for (int i = 1; i < comm->size; i++) {
            int p = (comm->rank + i) % comm->size;
            ADD(PX__ACT_SEND, p, 0, NULL, (const char *)sendbuf + (uint64_t)p * bytes, bytes, 0);
        }
        if (recvbuf != (const char *)sendbuf + (uint64_t)comm->rank * bytes)
            ADD(PX__ACT_COPY, 0, 0, recvbuf, (const char *)sendbuf + (uint64_t)comm->rank * bytes,
                bytes, 0);
    }
    req->advance = px__sched_advance;
    return PX_OK;
}

px_status_t px__linear_gather_build(px_request_t *req, const void *sendbuf, void *recvbuf)
{
    px_comm_t *comm = req->comm;
    px__sched_t *s = &req->sched;
    const uint64_t bytes = req->count * req->esz;
    px_status_t status;

    if (comm->rank != req->root) {
        ADD(PX__ACT_SEND, req->root, 0, NULL, sendbuf, bytes, 0);
    } else {
        for (int i = 1; i < comm->size; i++) {
            int p = (comm->rank + i) % comm->size;
            ADD(PX__ACT_RECV, p, 0, (char *)recvbuf + (uint64_t)p * bytes, NULL, bytes, 0);
        }
        if (sendbuf != (char *)recvbuf + (uint64_t)comm->rank * bytes)
            ADD(PX__ACT_COPY, 0, 0, (char *)recvbuf + (uint64_t)comm->rank * bytes, sendbuf,
                bytes, 0);
    }
    req->advance = px__sched_advance;
    return PX_OK;
}
