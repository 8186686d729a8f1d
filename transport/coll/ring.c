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

/* One ring phase. Step s receives block (r - s - recv_shift) from the left
 * and sends block (r - s - send_shift) to the right:
 *   reduce-scatter: recv_shift 1, send_shift 0, receives into scratch slots
 *                   and adds them into recvbuf (copying sendbuf first when
 *                   out of place), scaling the owned block at the last step;
 *   all-gather:     recv_shift 0, send_shift -1, receives into recvbuf.
 * Units u = s * nc + c run in order through windows of PX__WINDOW receives
 * and sends. The loop never blocks on one kind of request while the other
 * could unblock the ring: it sleeps until either the oldest receive or the
 * oldest send completes (px__wait_any), so every rank keeps posting
 * receives while its sends wait for the right neighbour. */
typedef struct {
    unsigned phase;
    int recv_shift, send_shift;
    const float *first_src; /* source of step-0 sends */
    float *recvbuf;
    const float *sendbuf;   /* reduce-scatter: original input (out of place) */
    int reduce;             /* 1: reduce-scatter; 0: all-gather */
    float scale;
} phase_t;

static int step_block(const ring_t *g, uint64_t s, int shift)
{
    return (int)(((int64_t)g->r - (int64_t)s - shift + 2 * (int64_t)g->n) % g->n);
}

static px_status_t run_phase(ring_t *g, const phase_t *ph)
{
    px_comm_t *comm = g->comm;
    const int n = g->n, r = g->r, left = (r - 1 + n) % n, right = (r + 1) % n;
    const uint64_t U = (uint64_t)(n - 1) * g->nc;
    float *slots = comm->scratch;
    px__op_t *recvs[PX__WINDOW], *sends[PX__WINDOW];
    uint64_t next_recv = 0, next_done = 0, next_send = 0, send_head = 0;
    px_status_t status;

    for (;;) {
        px__op_t *waitset[2];
        int k = 0;

        /* reap sends that completed, oldest first */
        while (send_head < next_send && sends[send_head % PX__WINDOW]->done) {
            status = px__wait(comm, sends[send_head % PX__WINDOW], g->deadline);
            if (status != PX_OK)
                return status;
            send_head++;
        }
        /* keep PX__WINDOW receives posted */
        while (next_recv < U && next_recv < next_done + PX__WINDOW) {
            uint64_t off, len = chunk_range(g, step_block(g, next_recv / g->nc, ph->recv_shift),
                                            next_recv % g->nc, &off);
            void *dst = ph->reduce ? (void *)(slots + (next_recv % PX__WINDOW) * g->ce)
                                   : (void *)(ph->recvbuf + off);
            status = px__recv_post(comm, left, unit_tag(g, left, ph->phase, next_recv), dst,
                                   len * sizeof(float), &recvs[next_recv % PX__WINDOW]);
            if (status != PX_OK)
                goto err_cancel;
            next_recv++;
        }
        /* send every chunk that is final here: step 0 at once, step s once
         * chunk c of step s-1 has arrived (and been reduced) */
        while (next_send < U && next_send - send_head < PX__WINDOW &&
               (next_send < g->nc || next_send - g->nc < next_done)) {
            uint64_t s = next_send / g->nc, off;
            uint64_t len = chunk_range(g, step_block(g, s, ph->send_shift), next_send % g->nc, &off);
            const float *src = s == 0 ? ph->first_src : ph->recvbuf;
            status = px__send_post(comm, right, unit_tag(g, r, ph->phase, next_send), src + off,
                                   len * sizeof(float), &sends[next_send % PX__WINDOW]);
            if (status != PX_OK)
                goto err_cancel;
            next_send++;
        }
        /* consume the oldest receive if it is in */
        if (next_done < U && recvs[next_done % PX__WINDOW]->done) {
            uint64_t s = next_done / g->nc, off;
            uint64_t len = chunk_range(g, step_block(g, s, ph->recv_shift), next_done % g->nc, &off);
            status = px__wait(comm, recvs[next_done % PX__WINDOW], g->deadline);
            if (status != PX_OK)
                return status;
            if (ph->reduce) {
                if (ph->sendbuf != ph->recvbuf)
                    memcpy(ph->recvbuf + off, ph->sendbuf + off, len * sizeof(float));
                px_reduce_sum_f32(ph->recvbuf + off, slots + (next_done % PX__WINDOW) * g->ce,
                                  len);
                if (s == (uint64_t)n - 2 && ph->scale != 1.0f)
                    px_scale_f32(ph->recvbuf + off, ph->scale, len);
            }
            next_done++;
            continue;
        }
        if (next_done < U)
            waitset[k++] = recvs[next_done % PX__WINDOW];
        if (send_head < next_send)
            waitset[k++] = sends[send_head % PX__WINDOW];
        if (!k)
            return PX_OK; /* every unit received and every send completed */
        status = px__wait_any(comm, waitset, k, g->deadline);
        if (status != PX_OK)
            return status;
    }

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
    {
        phase_t rs = {.phase = PX__PHASE_RS, .recv_shift = 1, .send_shift = 0,
                      .first_src = sendbuf, .recvbuf = recvbuf, .sendbuf = sendbuf,
                      .reduce = 1, .scale = scale};
        phase_t ag = {.phase = PX__PHASE_AG, .recv_shift = 0, .send_shift = -1,
                      .first_src = recvbuf, .recvbuf = recvbuf, .sendbuf = recvbuf,
                      .reduce = 0, .scale = 1.0f};
        /* run_phase returns only when all its sends completed, so the
         * all-gather never writes a block a reduce-scatter send still reads */
        status = run_phase(&g, &rs);
        if (status != PX_OK)
            return status;
        return run_phase(&g, &ag);
    }
}
