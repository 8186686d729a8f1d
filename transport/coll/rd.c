/* coll/rd.c: recursive-doubling all-reduce for small fp32 messages.
 *
 * Latency-optimal: ceil(log2 n) exchange steps of the whole buffer instead
 * of the ring's 2(n-1) steps of 1/n of it (Thakur, Rabenseifner & Gropp,
 * "Optimization of collective communication operations in MPICH", IJHPCA
 * 2005, section 4.4). Non-power-of-two n: with p = 2^floor(log2 n) and
 * rem = n - p, ranks 2i and 2i+1 (i < rem) first fold (the even rank sends
 * its data to the odd one and sits out), the p remaining ranks run
 * recursive doubling, and the odd ranks finally hand the result back.
 *
 * Bitwise identity: at every step the two partners add the same two partial
 * sums in opposite order (a + b vs b + a), which IEEE addition makes equal,
 * so by induction every rank of a group holds the same bits; the folded
 * ranks receive a copy; AVG scales the identical sums identically.
 *
 * Receives land in the communicator's scratch (count * 4 bytes must fit in
 * PX__WINDOW * chunk bytes; px_allreduce picks this algorithm only for small
 * messages). Runs on the thread using the communicator. */
#include "../px_transport_int.h"

#include <stdlib.h>
#include <string.h>

#include "px_reduce.h"

#define UNIT_FOLD   0u
#define UNIT_UNFOLD 500u /* exchange steps use 1 + k */

/* Posts recv (into `rbuf`) and send (from `sbuf`) with `peer`, waits both. */
static px_status_t exchange(px_comm_t *comm, uint32_t seq, int peer, unsigned unit,
                            const void *sbuf, void *rbuf, size_t bytes, int64_t deadline)
{
    px__op_t *r = NULL, *s = NULL;
    px_status_t status;

    if (rbuf) {
        status = px__recv_post(comm, peer,
                               px__tag(comm->id, PX__TAG_KIND_COLL, (unsigned)peer,
                                       px__coll_low(seq, PX__PHASE_RD, unit)),
                               rbuf, bytes, &r);
        if (status != PX_OK)
            return status;
    }
    if (sbuf) {
        status = px__send_post(comm, peer,
                               px__tag(comm->id, PX__TAG_KIND_COLL, (unsigned)comm->rank,
                                       px__coll_low(seq, PX__PHASE_RD, unit)),
                               sbuf, bytes, &s);
        if (status != PX_OK) {
            px__cancel_all(comm);
            return status;
        }
    }
    if (r && (status = px__wait(comm, r, deadline)) != PX_OK)
        return status;
    if (s && (status = px__wait(comm, s, deadline)) != PX_OK)
        return status;
    return PX_OK;
}

px_status_t px__rd_allreduce_f32(px_comm_t *comm, uint32_t seq, const float *sendbuf,
                                 float *recvbuf, uint64_t count, float scale, int64_t deadline)
{
    const int n = comm->size, r = comm->rank;
    const size_t bytes = (size_t)count * sizeof(float);
    int pof2 = 1, rem, newrank;
    float *tmp;
    px_status_t status;

    while (pof2 * 2 <= n)
        pof2 *= 2;
    rem = n - pof2;
    if (!comm->scratch) {
        comm->scratch = malloc(PX__WINDOW * comm->chunk_bytes);
        if (!comm->scratch)
            return PX_ERR_NO_MEMORY;
    }
    if (bytes > PX__WINDOW * comm->chunk_bytes)
        return PX_ERR_INTERNAL; /* caller's threshold guarantees this */
    tmp = comm->scratch;
    if (sendbuf != recvbuf)
        memcpy(recvbuf, sendbuf, bytes);

    /* fold: ranks 2i (i < rem) give their data to 2i + 1 and sit out */
    if (r < 2 * rem) {
        if (r % 2 == 0) {
            status = exchange(comm, seq, r + 1, UNIT_FOLD, recvbuf, NULL, bytes, deadline);
            if (status != PX_OK)
                return status;
            newrank = -1;
        } else {
            status = exchange(comm, seq, r - 1, UNIT_FOLD, NULL, tmp, bytes, deadline);
            if (status != PX_OK)
                return status;
            px_reduce_sum_f32(recvbuf, tmp, (size_t)count);
            newrank = r / 2;
        }
    } else {
        newrank = r - rem;
    }

    if (newrank >= 0) {
        unsigned step = 0;
        for (int mask = 1; mask < pof2; mask <<= 1, step++) {
            int newdst = newrank ^ mask;
            int dst = newdst < rem ? newdst * 2 + 1 : newdst + rem;
            status = exchange(comm, seq, dst, 1 + step, recvbuf, tmp, bytes, deadline);
            if (status != PX_OK)
                return status;
            px_reduce_sum_f32(recvbuf, tmp, (size_t)count);
        }
        if (scale != 1.0f)
            px_scale_f32(recvbuf, scale, (size_t)count);
    }

    /* unfold: the odd ranks hand the result back */
    if (r < 2 * rem) {
        if (r % 2)
            return exchange(comm, seq, r - 1, UNIT_UNFOLD, recvbuf, NULL, bytes, deadline);
        return exchange(comm, seq, r + 1, UNIT_UNFOLD, NULL, recvbuf, bytes, deadline);
    }
    return PX_OK;
}
