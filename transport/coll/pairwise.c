/* coll/pairwise.c: all-to-all(v) by pairwise exchange, as a schedule.
 *
 * Step k = 1..n-1: send our block for rank (r+k) mod n and receive the block
 * of rank (r-k) mod n (MPICH's pairwise exchange, Thakur et al., IJHPCA
 * 2005, section 4.6); our own block is a local copy. With wait_each_step
 * every step completes before the next starts (bounded memory traffic on
 * large worlds: PX_ALGO_PAIRWISE); without it (PX_ALGO_LINEAR) all 2(n-1)
 * messages are posted at once, which is faster when n is small.
 * Runs on the thread using the communicator. */
#include "../px_transport_int.h"

#include <string.h>

#define ADD(...) do { status = px__sched_add(s, __VA_ARGS__); if (status != PX_OK) return status; } while (0)

px_status_t px__pairwise_alltoallv_build(px_request_t *req, const void *sendbuf,
                                         const uint64_t *sendcounts, const uint64_t *sdispls,
                                         void *recvbuf, const uint64_t *recvcounts,
                                         const uint64_t *rdispls, int wait_each_step)
{
    px_comm_t *comm = req->comm;
    px__sched_t *s = &req->sched;
    const int n = comm->size, r = comm->rank;
    const size_t esz = req->esz;
    px_status_t status;

    ADD(PX__ACT_COPY, 0, 0, (char *)recvbuf + rdispls[r] * esz,
        (const char *)sendbuf + sdispls[r] * esz, recvcounts[r] * esz, 0);
    for (int k = 1; k < n; k++) {
        int to = (r + k) % n, from = (r - k + n) % n;
        ADD(PX__ACT_RECV, from, (unsigned)k, (char *)recvbuf + rdispls[from] * esz, NULL,
            recvcounts[from] * esz, 0);
        ADD(PX__ACT_SEND, to, (unsigned)k, NULL, (const char *)sendbuf + sdispls[to] * esz,
            sendcounts[to] * esz, 0);
        if (wait_each_step)
            ADD(PX__ACT_WAIT, 0, 0, NULL, NULL, 0, 0);
    }
    req->advance = px__sched_advance;
    return PX_OK;
}

/* The same exchange without its empty messages: a block of 0 elements is
 * neither sent nor received (nor copied). Both ends of every pair must
 * agree on which blocks are empty (sendcounts[to] on the sender is
 * recvcounts[from] on the receiver), as the chunks of a staged
 * all-to-all-v do (px_stage.c): there ranks run different numbers of
 * chunks, and a rank done with its own must not be waited for. An empty
 * schedule completes at once. */
px_status_t px__pairwise_alltoallv_sparse_build(px_request_t *req, const void *sendbuf,
                                                const uint64_t *sendcounts,
                                                const uint64_t *sdispls, void *recvbuf,
                                                const uint64_t *recvcounts,
                                                const uint64_t *rdispls, int wait_each_step)
{
    px_comm_t *comm = req->comm;
    px__sched_t *s = &req->sched;
    const int n = comm->size, r = comm->rank;
    const size_t esz = req->esz;
    px_status_t status;

    if (recvcounts[r])
        ADD(PX__ACT_COPY, 0, 0, (char *)recvbuf + rdispls[r] * esz,
            (const char *)sendbuf + sdispls[r] * esz, recvcounts[r] * esz, 0);
    for (int k = 1; k < n; k++) {
        int to = (r + k) % n, from = (r - k + n) % n;
        if (recvcounts[from])
            ADD(PX__ACT_RECV, from, (unsigned)k, (char *)recvbuf + rdispls[from] * esz, NULL,
                recvcounts[from] * esz, 0);
        if (sendcounts[to])
            ADD(PX__ACT_SEND, to, (unsigned)k, NULL, (const char *)sendbuf + sdispls[to] * esz,
                sendcounts[to] * esz, 0);
        if (wait_each_step && (recvcounts[from] || sendcounts[to]))
            ADD(PX__ACT_WAIT, 0, 0, NULL, NULL, 0, 0);
    }
    req->advance = px__sched_advance;
    return PX_OK;
}
