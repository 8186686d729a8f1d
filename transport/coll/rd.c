/* coll/rd.c: recursive-doubling all-reduce for small messages, as a
 * schedule (any dtype and op).
 *
 * Latency-optimal: ceil(log2 n) exchange steps of the whole buffer instead
 * of the ring's 2(n-1) steps of 1/n of it (Thakur, Rabenseifner & Gropp,
 * "Optimization of collective communication operations in MPICH", IJHPCA
 * 2005, section 4.4). Non-power-of-two n: with p = 2^floor(log2 n) and
 * rem = n - p, ranks 2i and 2i+1 (i < rem) first fold (the even rank sends
 * its data to the odd one and sits out), the p remaining ranks run
 * recursive doubling, and the odd ranks finally hand the result back.
 *
 * Bitwise identity: at every step both partners compute (lower rank's
 * data) OP (higher rank's data), the same operands in the same order, so by
 * induction every rank of a group holds the same bits; folded ranks receive
 * a copy; AVG divides the identical sums identically.
 * Runs on the thread using the communicator. */
#include "../px_transport_int.h"

#include <string.h>

#define UNIT_FOLD   0u
#define UNIT_UNFOLD 500u /* exchange steps use 1 + k */

#define ADD(...) do { status = px__sched_add(s, __VA_ARGS__); if (status != PX_OK) return status; } while (0)

/* Recursive doubling with the header in every message (req->inl,
 * px__req_create_inline): the same exchanges, but each message is our
 * header followed by the data, sent from a staging copy (slot 1) on the
 * header tag (every message is the first between its two ranks: the
 * partners of the exchange steps are distinct, and the fold and unfold go
 * opposite ways), and received into slot 0, with room for any
 * header-in-data message, whose header is checked at the WAIT before the
 * data is reduced. A rank that finds a mismatch tells every rank it has
 * not sent to, so its later partners read the notice where they expected
 * data, and every rank fails: a rank completes only if each partner sent
 * data, which a partner does only after its own earlier partners agreed
 * with it, so by induction over the steps every header agreed. */
static px_status_t rd_inline_build(px_request_t *req, const void *sendbuf, void *recvbuf)
{
    px_comm_t *comm = req->comm;
    px__sched_t *s = &req->sched;
    const int n = comm->size, r = comm->rank;
    const uint64_t count = req->count, bytes = count * req->esz;
    const size_t h = sizeof(px__hdr_t);
    int pof2 = 1, rem, newrank;
    char *in = px__req_tmp(req, 0, h + PX__INLINE_MAX_BYTES);
    char *out = px__req_tmp(req, 1, h + (size_t)bytes);
    px_status_t status;

    if (!in || !out)
        return PX_ERR_NO_MEMORY;
    while (pof2 * 2 <= n)
        pof2 *= 2;
    rem = n - pof2;
    if (sendbuf != recvbuf)
        ADD(PX__ACT_COPY, 0, 0, recvbuf, sendbuf, bytes, 0);
    if (r < 2 * rem) {
        if (r % 2 == 0) {
            ADD(PX__ACT_HSEND, r + 1, 0, out, recvbuf, bytes, 0);
            ADD(PX__ACT_WAIT, 0, 0, NULL, NULL, 0, 0);
            newrank = -1;
        } else {
            ADD(PX__ACT_HRECV, r - 1, 0, in, NULL, bytes, 0);
            ADD(PX__ACT_WAIT, 0, 0, NULL, NULL, 0, 0);
            ADD(PX__ACT_REDUCE, 0, 0, recvbuf, in + h, count, 1);
            newrank = r / 2;
        }
    } else {
        newrank = r - rem;
    }
    if (newrank >= 0) {
        for (int mask = 1; mask < pof2; mask <<= 1) {
            int newdst = newrank ^ mask;
            int dst = newdst < rem ? newdst * 2 + 1 : newdst + rem;
            ADD(PX__ACT_HRECV, dst, 0, in, NULL, bytes, 0);
            ADD(PX__ACT_HSEND, dst, 0, out, recvbuf, bytes, 0);
            ADD(PX__ACT_WAIT, 0, 0, NULL, NULL, 0, 0);
            ADD(PX__ACT_REDUCE, 0, 0, recvbuf, in + h, count, dst < r);
        }
        ADD(PX__ACT_AVG, 0, 0, recvbuf, NULL, count, 0);
    }
    if (r < 2 * rem) {
        if (r % 2) {
            ADD(PX__ACT_HSEND, r - 1, 0, out, recvbuf, bytes, 0);
        } else {
            ADD(PX__ACT_HRECV, r + 1, 0, in, NULL, bytes, 0);
            ADD(PX__ACT_WAIT, 0, 0, NULL, NULL, 0, 0);
            ADD(PX__ACT_COPY, 0, 0, recvbuf, in + h, bytes, 0);
        }
    }
    req->advance = px__sched_advance;
    return PX_OK;
}

px_status_t px__rd_allreduce_build(px_request_t *req, const void *sendbuf, void *recvbuf)
{
    px_comm_t *comm = req->comm;
    px__sched_t *s = &req->sched;
    const int n = comm->size, r = comm->rank;
    const uint64_t count = req->count, bytes = count * req->esz;
    int pof2 = 1, rem, newrank;
    void *tmp;
    px_status_t status;

    if (req->inl)
        return rd_inline_build(req, sendbuf, recvbuf);
    tmp = px__req_tmp(req, 0, (size_t)bytes);

    if (!tmp)
        return PX_ERR_NO_MEMORY;
    while (pof2 * 2 <= n)
        pof2 *= 2;
    rem = n - pof2;
    if (sendbuf != recvbuf)
        ADD(PX__ACT_COPY, 0, 0, recvbuf, sendbuf, bytes, 0);

    if (r < 2 * rem) {
        if (r % 2 == 0) { /* fold: give our data to r + 1 and sit out */
            ADD(PX__ACT_SEND, r + 1, UNIT_FOLD, NULL, recvbuf, bytes, 0);
            ADD(PX__ACT_WAIT, 0, 0, NULL, NULL, 0, 0);
            newrank = -1;
        } else {
            ADD(PX__ACT_RECV, r - 1, UNIT_FOLD, tmp, NULL, bytes, 0);
            ADD(PX__ACT_WAIT, 0, 0, NULL, NULL, 0, 0);
            ADD(PX__ACT_REDUCE, 0, 0, recvbuf, tmp, count, 1); /* (r-1) OP r */
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
            ADD(PX__ACT_RECV, dst, 1 + step, tmp, NULL, bytes, 0);
            ADD(PX__ACT_SEND, dst, 1 + step, NULL, recvbuf, bytes, 0);
            ADD(PX__ACT_WAIT, 0, 0, NULL, NULL, 0, 0);
            ADD(PX__ACT_REDUCE, 0, 0, recvbuf, tmp, count, dst < r);
        }
        ADD(PX__ACT_AVG, 0, 0, recvbuf, NULL, count, 0);
    }
    if (r < 2 * rem) { /* unfold: the odd ranks hand the result back */
        if (r % 2)
            ADD(PX__ACT_SEND, r - 1, UNIT_UNFOLD, NULL, recvbuf, bytes, 0);
        else
            ADD(PX__ACT_RECV, r + 1, UNIT_UNFOLD, recvbuf, NULL, bytes, 0);
    }
    req->advance = px__sched_advance;
    return PX_OK;
}

/* Rabenseifner's all-reduce (Rabenseifner, "Optimization of collective
 * reduction operations", ICCS 2004; MPICH's
 * MPIR_Allreduce_intra_reduce_scatter_allgather): a reduce-scatter by
 * recursive halving (step k exchanges half of what is left with the partner
 * at distance 2^k and reduces it) then an all-gather by recursive doubling,
 * log2(p) steps each, moving 2(p-1)/p of the data like the ring but in
 * 2 log2(p) steps instead of 2(p-1). Non-power-of-two worlds fold first, as
 * recursive doubling does. The count is cut into p pieces (the first
 * count % p one element longer). Each final piece is reduced by exactly one
 * rank, with the lower rank's operand first, then copied: all ranks end
 * bitwise identical. */
px_status_t px__rabenseifner_allreduce_build(px_request_t *req, const void *sendbuf,
                                             void *recvbuf)
{
    px_comm_t *comm = req->comm;
    px__sched_t *s = &req->sched;
    const int n = comm->size, r = comm->rank;
    const uint64_t count = req->count, bytes = count * req->esz;
    const size_t esz = req->esz;
    int pof2 = 1, rem, newrank;
    char *tmp = px__req_tmp(req, 0, (size_t)bytes);
    char *rb = recvbuf;
    px_status_t status;

    if (!tmp)
        return PX_ERR_NO_MEMORY;
    while (pof2 * 2 <= n)
        pof2 *= 2;
    rem = n - pof2;
    if (sendbuf != recvbuf)
        ADD(PX__ACT_COPY, 0, 0, recvbuf, sendbuf, bytes, 0);
    if (r < 2 * rem) {
        if (r % 2 == 0) {
            ADD(PX__ACT_SEND, r + 1, UNIT_FOLD, NULL, recvbuf, bytes, 0);
            ADD(PX__ACT_WAIT, 0, 0, NULL, NULL, 0, 0);
            newrank = -1;
        } else {
            ADD(PX__ACT_RECV, r - 1, UNIT_FOLD, tmp, NULL, bytes, 0);
            ADD(PX__ACT_WAIT, 0, 0, NULL, NULL, 0, 0);
            ADD(PX__ACT_REDUCE, 0, 0, recvbuf, tmp, count, 1);
            newrank = r / 2;
        }
    } else {
        newrank = r - rem;
    }
    if (newrank >= 0) {
        uint64_t base = count / (uint64_t)pof2, extra = count % (uint64_t)pof2;
        int send_idx = 0, recv_idx = 0, last_idx = pof2, mask = 1;
        unsigned step = 0;
#define DISP(i) ((uint64_t)(i) * base + ((uint64_t)(i) < extra ? (uint64_t)(i) : extra))
#define SPAN(a, b) (DISP(b) - DISP(a))
#define REAL(nr) ((nr) < rem ? (nr) * 2 + 1 : (nr) + rem)
        while (mask < pof2) { /* reduce-scatter by recursive halving */
            int newdst = newrank ^ mask, dst = REAL(newdst);
            uint64_t scnt, rcnt;
            if (newrank < newdst) {
                send_idx = recv_idx + pof2 / (mask * 2);
                scnt = SPAN(send_idx, last_idx);
                rcnt = SPAN(recv_idx, send_idx);
            } else {
                recv_idx = send_idx + pof2 / (mask * 2);
                scnt = SPAN(send_idx, recv_idx);
                rcnt = SPAN(recv_idx, last_idx);
            }
            ADD(PX__ACT_RECV, dst, 1 + step, tmp + DISP(recv_idx) * esz, NULL, rcnt * esz, 0);
            ADD(PX__ACT_SEND, dst, 1 + step, NULL, rb + DISP(send_idx) * esz, scnt * esz, 0);
            ADD(PX__ACT_WAIT, 0, 0, NULL, NULL, 0, 0);
            ADD(PX__ACT_REDUCE, 0, 0, rb + DISP(recv_idx) * esz, tmp + DISP(recv_idx) * esz, rcnt,
                dst < r);
            send_idx = recv_idx;
            mask <<= 1;
            step++;
            if (mask < pof2)
                last_idx = recv_idx + pof2 / mask;
        }
        /* this rank owns pieces [send_idx, last_idx): AVG divides them once */
        ADD(PX__ACT_AVG, 0, 0, rb + DISP(send_idx) * esz, NULL, SPAN(send_idx, last_idx), 0);
        mask >>= 1;
        step = 100;
        while (mask > 0) { /* all-gather by recursive doubling */
            int newdst = newrank ^ mask, dst = REAL(newdst);
            uint64_t scnt, rcnt;
            if (newrank < newdst) {
                if (mask != pof2 / 2)
                    last_idx = last_idx + pof2 / (mask * 2);
                recv_idx = send_idx + pof2 / (mask * 2);
                scnt = SPAN(send_idx, recv_idx);
                rcnt = SPAN(recv_idx, last_idx);
            } else {
                recv_idx = send_idx - pof2 / (mask * 2);
                scnt = SPAN(send_idx, last_idx);
                rcnt = SPAN(recv_idx, send_idx);
            }
            ADD(PX__ACT_RECV, dst, step, rb + DISP(recv_idx) * esz, NULL, rcnt * esz, 0);
            ADD(PX__ACT_SEND, dst, step, NULL, rb + DISP(send_idx) * esz, scnt * esz, 0);
            ADD(PX__ACT_WAIT, 0, 0, NULL, NULL, 0, 0);
            if (newrank > newdst)
                send_idx = recv_idx;
            mask >>= 1;
            step++;
        }
#undef DISP
#undef SPAN
#undef REAL
    }
    if (r < 2 * rem) {
        if (r % 2)
            ADD(PX__ACT_SEND, r - 1, UNIT_UNFOLD, NULL, recvbuf, bytes, 0);
        else
            ADD(PX__ACT_RECV, r + 1, UNIT_UNFOLD, recvbuf, NULL, bytes, 0);
    }
    req->advance = px__sched_advance;
    return PX_OK;
}
