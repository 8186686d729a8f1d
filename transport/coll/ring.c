/* coll/ring.c: ring all-reduce for fp32, chunked and pipelined.
 *
 * Algorithm: reduce-scatter then all-gather around the ring r -> r+1
 * (Patarasuk & Yuan, "Bandwidth optimal all-reduce algorithms for clusters
 * of workstations", JPDC 2009; the same schedule as NCCL's ring). The
 * `count` elements are cut into n blocks (the first count % n blocks one
 * element longer); block b has offset b*(count/n) + min(b, count%n).
 *
 *   reduce-scatter step s = 0..n-2: send block (r-s) to r+1, receive block
 *     (r-s-1) from r-1 and add it into recvbuf. After n-1 steps rank r holds
 *     the complete sum of block (r+1) (its "owned" block), which is scaled
 *     once (AVG) right there.
 *   all-gather step s = 0..n-2: send block (r+1-s) to r+1, receive block
 *     (r-s) from r-1 straight into recvbuf.
 *
 * Every element of the result is computed by exactly one rank (the block's
 * owner) and copied to the others, so all ranks end bitwise identical. The
 * sum order within a block is fixed by the ring, so results are also
 * run-to-run deterministic.
 *
 * Pipelining: each block is cut into chunks of PX_ALLREDUCE_CHUNK_BYTES (all
 * blocks get the same number of chunks; short blocks send empty chunks), and
 * the (step, chunk) units flow through a window of PX__WINDOW receives and
 * PX__WINDOW sends: the send of chunk c at step s starts as soon as chunk c
 * of step s-1 has been reduced, so the ring runs as a pipeline. Reduce-
 * scatter receives land in the communicator's scratch slots (PX__WINDOW x
 * chunk bytes); all-gather receives land in recvbuf. Every send of the
 * reduce-scatter completes before the all-gather writes into recvbuf.
 *
 * Bus bandwidth as nccl-tests reports it: algbw * 2(n-1)/n.
 * Runs on the thread using the communicator. */
#include "../px_transport_int.h"

#include <stdlib.h>
#include <string.h>

#include "px_reduce.h"

typedef struct {
    px_comm_t *comm;
    int n, r;
    uint64_t count, base, rem;
    uint64_t ce;   /* chunk elements */
    uint64_t nc;   /* chunks per block */
    uint32_t seq;
    int64_t deadline;
} ring_t;

static uint64_t block_off(const ring_t *g, int b)
{
    return (uint64_t)b * g->base + ((uint64_t)b < g->rem ? (uint64_t)b : g->rem);
}

static uint64_t block_len(const ring_t *g, int b)
{
    return g->base + ((uint64_t)b < g->rem ? 1 : 0);
}

/* Element range of chunk c of block b: *off_p, returns its length. */
static uint64_t chunk_range(const ring_t *g, int b, uint64_t c, uint64_t *off_p)
{
    uint64_t len = block_len(g, b), start = c * g->ce;
    if (start > len)
        start = len;
    *off_p = block_off(g, b) + start;
    return len - start < g->ce ? len - start : g->ce;
}

static ucp_tag_t unit_tag(const ring_t *g, int src, unsigned phase, uint64_t u)
{
    return px__tag(g->comm->id, PX__TAG_KIND_COLL, (unsigned)src,
                   px__coll_low(g->seq, phase, (unsigned)(u & PX__UNIT_MASK)));
}

/* Waits for the oldest in-flight send of the FIFO. */
static px_status_t reap_send(ring_t *g, px__op_t **sends, uint64_t *head, uint64_t tail)
{
    px_status_t status;
    if (*head == tail)
        return PX_OK;
    status = px__wait(g->comm, sends[*head % PX__WINDOW], g->deadline);
    if (status == PX_OK)
        (*head)++;
    return status;
}

static px_status_t reduce_scatter(ring_t *g, const float *sendbuf, float *recvbuf, float scale)
{
    px_comm_t *comm = g->comm;
    const int n = g->n, r = g->r, left = (r - 1 + n) % n, right = (r + 1) % n;
    const uint64_t U = (uint64_t)(n - 1) * g->nc;
    float *slots = comm->scratch;
    px__op_t *recvs[PX__WINDOW], *sends[PX__WINDOW];
    uint64_t next_recv = 0, next_reduce = 0, next_send = 0, send_head = 0;
    px_status_t status;

    while (next_reduce < U) {
        while (next_recv < U && next_recv < next_reduce + PX__WINDOW) {
            uint64_t s = next_recv / g->nc, c = next_recv % g->nc, off;
            int b = (int)((r - (int)s - 1 + 2 * n) % n);
            uint64_t len = chunk_range(g, b, c, &off);
            (void)off;
            status = px__recv_post(comm, left, unit_tag(g, left, PX__PHASE_RS, next_recv),
                                   slots + (next_recv % PX__WINDOW) * g->ce, len * sizeof(float),
                                   &recvs[next_recv % PX__WINDOW]);
            if (status != PX_OK)
                goto err_cancel;
            next_recv++;
        }
        /* sends whose chunk is final at this step */
        while (next_send < U && (next_send < g->nc || next_send - g->nc < next_reduce)) {
            uint64_t s = next_send / g->nc, c = next_send % g->nc, off, len;
            int b = (int)((r - (int)s + n) % n);
            if (next_send - send_head == PX__WINDOW) {
                status = reap_send(g, sends, &send_head, next_send);
                if (status != PX_OK)
                    return status;
            }
            len = chunk_range(g, b, c, &off);
            status = px__send_post(comm, right, unit_tag(g, r, PX__PHASE_RS, next_send),
                                   (s == 0 ? sendbuf : recvbuf) + off, len * sizeof(float),
                                   &sends[next_send % PX__WINDOW]);
            if (status != PX_OK)
                goto err_cancel;
            next_send++;
        }
        {
            uint64_t s = next_reduce / g->nc, c = next_reduce % g->nc, off, len;
            int b = (int)((r - (int)s - 1 + 2 * n) % n);
            status = px__wait(comm, recvs[next_reduce % PX__WINDOW], g->deadline);
            if (status != PX_OK)
                return status;
            len = chunk_range(g, b, c, &off);
            if (sendbuf != recvbuf)
                memcpy(recvbuf + off, sendbuf + off, len * sizeof(float));
            px_reduce_sum_f32(recvbuf + off, slots + (next_reduce % PX__WINDOW) * g->ce, len);
            if (s == (uint64_t)n - 2 && scale != 1.0f)
                px_scale_f32(recvbuf + off, scale, len);
            next_reduce++;
        }
    }
    /* the last sends (step n-2) become ready after the last reductions */
    while (next_send < U) {
        uint64_t s = next_send / g->nc, c = next_send % g->nc, off, len;
        int b = (int)((r - (int)s + n) % n);
        if (next_send - send_head == PX__WINDOW) {
            status = reap_send(g, sends, &send_head, next_send);
            if (status != PX_OK)
                return status;
        }
        len = chunk_range(g, b, c, &off);
        status = px__send_post(comm, right, unit_tag(g, r, PX__PHASE_RS, next_send),
                               (s == 0 ? sendbuf : recvbuf) + off, len * sizeof(float),
                               &sends[next_send % PX__WINDOW]);
        if (status != PX_OK)
            goto err_cancel;
        next_send++;
    }
    while (send_head < next_send) {
        status = reap_send(g, sends, &send_head, next_send);
        if (status != PX_OK)
            return status;
    }
    return PX_OK;

err_cancel:
    px__cancel_all(comm);
    return status;
}

static px_status_t all_gather(ring_t *g, float *recvbuf)
{
    px_comm_t *comm = g->comm;
    const int n = g->n, r = g->r, left = (r - 1 + n) % n, right = (r + 1) % n;
    const uint64_t U = (uint64_t)(n - 1) * g->nc;
    px__op_t *recvs[PX__WINDOW], *sends[PX__WINDOW];
    uint64_t next_recv = 0, next_done = 0, next_send = 0, send_head = 0;
    px_status_t status;

    while (next_send < U || next_done < U) {
        while (next_recv < U && next_recv < next_done + PX__WINDOW) {
            uint64_t s = next_recv / g->nc, c = next_recv % g->nc, off, len;
            int b = (int)((r - (int)s + n) % n);
            len = chunk_range(g, b, c, &off);
            status = px__recv_post(comm, left, unit_tag(g, left, PX__PHASE_AG, next_recv),
                                   recvbuf + off, len * sizeof(float),
                                   &recvs[next_recv % PX__WINDOW]);
            if (status != PX_OK)
                goto err_cancel;
            next_recv++;
        }
        while (next_send < U && (next_send < g->nc || next_send - g->nc < next_done)) {
            uint64_t s = next_send / g->nc, c = next_send % g->nc, off, len;
            int b = (int)((r + 1 - (int)s + n) % n);
            if (next_send - send_head == PX__WINDOW) {
                status = reap_send(g, sends, &send_head, next_send);
                if (status != PX_OK)
                    return status;
            }
            len = chunk_range(g, b, c, &off);
            status = px__send_post(comm, right, unit_tag(g, r, PX__PHASE_AG, next_send),
                                   recvbuf + off, len * sizeof(float),
                                   &sends[next_send % PX__WINDOW]);
            if (status != PX_OK)
                goto err_cancel;
            next_send++;
        }
        if (next_done < U) {
            status = px__wait(comm, recvs[next_done % PX__WINDOW], g->deadline);
            if (status != PX_OK)
                return status;
            next_done++;
        }
    }
    while (send_head < next_send) {
        status = reap_send(g, sends, &send_head, next_send);
        if (status != PX_OK)
            return status;
    }
    return PX_OK;

err_cancel:
    px__cancel_all(comm);
    return status;
}

px_status_t px__ring_allreduce_f32(px_comm_t *comm, uint32_t seq, const float *sendbuf,
                                   float *recvbuf, uint64_t count, float scale,
                                   int64_t deadline)
{
    ring_t g = {.comm = comm, .n = comm->size, .r = comm->rank, .count = count, .seq = seq,
                .deadline = deadline};
    px_status_t status;

    g.base = count / (uint64_t)g.n;
    g.rem = count % (uint64_t)g.n;
    g.ce = comm->chunk_bytes / sizeof(float);
    g.nc = (block_len(&g, 0) + g.ce - 1) / g.ce;
    if (!comm->scratch) {
        comm->scratch = malloc(PX__WINDOW * comm->chunk_bytes);
        if (!comm->scratch)
            return PX_ERR_NO_MEMORY;
    }
    status = reduce_scatter(&g, sendbuf, recvbuf, scale);
    if (status != PX_OK)
        return status;
    return all_gather(&g, recvbuf);
}
