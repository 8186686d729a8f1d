/* coll/ring.c: the ring, chunked and pipelined: reduce-scatter, all-gather,
 * and all-reduce as the one followed by the other.
 *
 * Algorithm: reduce-scatter then all-gather around the ring r -> r+1
 * (Patarasuk & Yuan, "Bandwidth optimal all-reduce algorithms for clusters
 * of workstations", JPDC 2009; the same schedule as NCCL's ring). The data
 * is cut into n blocks (block b: base + (b < rem) elements, in order).
 * With owner shift o (all-reduce: 1, reduce-scatter / all-gather: 0):
 *
 *   reduce-scatter step s = 0..n-2: send block (r+o-s-1) to r+1, receive
 *     block (r+o-s-2) from r-1 and combine it with our input into the
 *     accumulation buffer. After n-1 steps rank r holds the complete
 *     reduction of block (r+o), where AVG divides it once.
 *   all-gather step s = 0..n-2: send block (r+o-s) to r+1, receive block
 *     (r+o-s-1) from r-1 into the output.
 *
 * Every element of an all-reduce is computed by exactly one rank (the
 * block's owner) and copied to the others, so all ranks end bitwise
 * identical, and the sum order is fixed by the ring (run-to-run
 * deterministic).
 *
 * Pipelining: each block is cut into chunks of PX_ALLREDUCE_CHUNK_BYTES
 * (every block gets the same number of chunks; short blocks send empty
 * ones) and the (step, chunk) units flow through windows of PX__WINDOW
 * receives and PX__WINDOW sends: the send of chunk c at step s starts as
 * soon as chunk c of step s-1 has been reduced. Reduce-scatter receives land
 * in PX__WINDOW scratch slots and are combined straight from the input
 * (dst = input OP slot: no copy of the input first). All-gather receives
 * land in the output. The all-gather starts only after every reduce-scatter
 * send completed, so it never overwrites a block still being sent.
 *
 * Nonblocking: px__ring_advance does what can be done now and returns
 * PX_INPROGRESS; the request's progress calls it again.
 * Bus bandwidth as nccl-tests reports it: all-reduce algbw * 2(n-1)/n,
 * reduce-scatter and all-gather algbw * (n-1)/n. */
#include "../px_transport_int.h"

#include <stdlib.h>
#include <string.h>

#include "px_reduce.h"

static uint64_t block_off(const px__ring_t *g, int b)
{
    return (uint64_t)b * g->base + ((uint64_t)b < g->rem ? (uint64_t)b : g->rem);
}

static uint64_t block_len(const px__ring_t *g, int b)
{
    return g->base + ((uint64_t)b < g->rem ? 1 : 0);
}

/* Element range of chunk c of block b: *off_p (in the full layout) and
 * *inblk_p (within the block); returns its length. */
static uint64_t chunk_range(const px__ring_t *g, int b, uint64_t c, uint64_t *off_p,
                            uint64_t *inblk_p)
{
    uint64_t len = block_len(g, b), start = c * g->ce;
    if (start > len)
        start = len;
    *off_p = block_off(g, b) + start;
    *inblk_p = start;
    return len - start < g->ce ? len - start : g->ce;
}

static int blk(int n, int64_t b)
{
    return (int)(((b % n) + n) % n);
}

px_status_t px__ring_setup(px_request_t *req, int o, int do_rs, int do_ag, const void *src,
                           void *acc, void *own_dst, uint64_t base, uint64_t rem)
{
    px__ring_t *g = &req->ring;
    px_comm_t *comm = req->comm;

    memset(g, 0, sizeof(*g));
    g->o = o;
    g->do_rs = do_rs;
    g->do_ag = do_ag;
    g->phase = do_rs ? 0 : 1;
    g->base = base;
    g->rem = rem;
    g->ce = comm->chunk_bytes / req->esz;
    if (g->ce == 0)
        g->ce = 1;
    g->nc = (block_len(g, 0) + g->ce - 1) / g->ce;
    g->src = src;
    g->acc = acc;
    g->own_dst = own_dst;
    if (do_rs && g->nc) {
        g->slots = px__req_tmp(req, 2, PX__WINDOW * g->ce * req->esz);
        if (!g->slots)
            return PX_ERR_NO_MEMORY;
    }
    req->advance = px__ring_advance;
    return PX_OK;
}

px_status_t px__ring_advance(px_request_t *req, int *progressed_p)
{
    px__ring_t *g = &req->ring;
    px_comm_t *comm = req->comm;
    const int n = comm->size, r = comm->rank, left = (r - 1 + n) % n, right = (r + 1) % n;
    const uint64_t U = (uint64_t)(n - 1) * g->nc;
    const size_t esz = req->esz;
    px_status_t status;

    while (g->phase < 2) {
        const int rs = g->phase == 0;
        const unsigned phase_tag = rs ? PX__PHASE_RS : PX__PHASE_AG;
        /* block received / sent at step s */
        const int64_t rshift = rs ? (int64_t)g->o - 2 : (int64_t)g->o - 1;
        const int64_t sshift = rs ? (int64_t)g->o - 1 : (int64_t)g->o;

        /* reap sends that completed, oldest first */
        while (g->send_head < g->next_send && g->sends[g->send_head % PX__WINDOW]->done) {
            px__op_t *op = g->sends[g->send_head % PX__WINDOW];
            status = px__op_status(comm, op);
            if (status != PX_OK)
                return status;
            px__op_reap(comm, op);
            g->send_head++;
            *progressed_p = 1;
        }
        /* keep PX__WINDOW receives posted */
        while (g->next_recv < U && g->next_recv < g->next_done + PX__WINDOW) {
            uint64_t s = g->next_recv / g->nc, off, inb;
            uint64_t len = chunk_range(g, blk(n, r + rshift - (int64_t)s), g->next_recv % g->nc,
                                       &off, &inb);
            char *dst = rs ? g->slots + (g->next_recv % PX__WINDOW) * g->ce * esz
                           : g->acc + off * esz;
            status = px__req_recv(req, left, px__req_tag(req, left, phase_tag,
                                                         (unsigned)g->next_recv),
                                  dst, len * esz, &g->recvs[g->next_recv % PX__WINDOW]);
            if (status != PX_OK)
                return status;
            g->next_recv++;
            *progressed_p = 1;
        }
        /* send every chunk that is final here: step 0 at once, step s once
         * chunk c of step s-1 has arrived (and been reduced) */
        while (g->next_send < U && g->next_send - g->send_head < PX__WINDOW &&
               (g->next_send < g->nc || g->next_send - g->nc < g->next_done)) {
            uint64_t s = g->next_send / g->nc, off, inb;
            uint64_t len = chunk_range(g, blk(n, r + sshift - (int64_t)s), g->next_send % g->nc,
                                       &off, &inb);
            const char *src = (rs && s == 0) ? g->src : g->acc;
            status = px__req_send(req, right, px__req_tag(req, r, phase_tag,
                                                          (unsigned)g->next_send),
                                  src + off * esz, len * esz,
                                  &g->sends[g->next_send % PX__WINDOW]);
            if (status != PX_OK)
                return status;
            g->next_send++;
            *progressed_p = 1;
        }
        /* consume the oldest receive if it is in */
        if (g->next_done < U && g->recvs[g->next_done % PX__WINDOW]->done) {
            px__op_t *op = g->recvs[g->next_done % PX__WINDOW];
            uint64_t s = g->next_done / g->nc, off, inb;
            int b = blk(n, r + rshift - (int64_t)s);
            uint64_t len = chunk_range(g, b, g->next_done % g->nc, &off, &inb);
            status = px__op_status(comm, op);
            if (status != PX_OK)
                return status;
            px__op_reap(comm, op);
            if (rs) {
                int last = s == (uint64_t)n - 2;
                char *dst = (last && g->own_dst) ? g->own_dst + inb * esz : g->acc + off * esz;
                px_reduce_apply((int)req->dtype, (int)req->op, dst, g->src + off * esz,
                          g->slots + (g->next_done % PX__WINDOW) * g->ce * esz, (size_t)len);
                if (last && req->op == PX_AVG)
                    px_reduce_avg_finish((int)req->dtype, dst, (size_t)len, n);
            }
            g->next_done++;
            *progressed_p = 1;
            continue;
        }
        if (g->next_done < U || g->send_head < g->next_send)
            return PX_INPROGRESS;
        /* phase complete: every unit received and every send completed */
        g->next_recv = g->next_done = g->next_send = g->send_head = 0;
        g->phase = (rs && g->do_ag) ? 1 : 2;
        *progressed_p = 1;
    }
    return PX_OK;
}
