/* px_request.c: nonblocking collective requests and their progress.
 *
 * A request is a collective in flight on one communicator. It runs in two
 * stages: (0) the header exchange, where every rank sends its collective
 * header (sequence number, kind, dtype, op, root, count) to every other rank
 * and checks what it receives, so a disagreement fails the collective on
 * every rank (PX_ERR_MISMATCH) before any data moves; (1) the algorithm,
 * an `advance` function that never blocks: it posts sends/receives, looks at
 * which are done, does local reductions and copies, and reports whether it
 * finished (a schedule, px_sched.c, or the ring machine, coll/ring.c).
 *
 * Collectives (all-to-all-v excepted: its header count is not its size) do
 * not wait for the headers before the algorithm starts: both run at once and
 * the request completes when both have, failing with PX_ERR_MISMATCH if the
 * headers disagree (then the output buffer may hold partial data, never
 * beyond its bounds: receives are posted with our own sizes, and a message
 * of the wrong size is held as a mismatch until the headers name it).
 * All-to-all-v checks the headers first.
 *
 * Header in data: an all-reduce of at most PX__INLINE_MAX_BYTES
 * run by recursive doubling posts no header exchange at all
 * (px__req_create_inline): each of its messages is the first and only one
 * from its sender to its receiver in that collective, so it travels on the
 * header tag with the sender's header in front of the data, and the
 * receiver checks it before reducing (px__inline_check). A rank that finds
 * a mismatch, or is told of one, sends a notice (a header with `notice`
 * set, naming the rank that disagreed and its values) to every rank it has
 * not sent to yet, in place of the message they would have had from it,
 * and fails. So every rank fails: one that completes has had data from
 * each partner, which each sends only once its own earlier partners agreed
 * with it, so by induction over the steps every rank agreed. Ranks that run
 * the header exchange (another count, algorithm or collective) read a
 * notice as a header and a header-in-data message as a truncated header
 * (named by its length); the small-message ranks read their plain headers
 * as too short and name their values.
 *
 * Progress: px_test / px_wait / px_progress progress the worker and then
 * step every pending request of every communicator on that worker (the
 * transport's list), each communicator's in start order (a collective
 * started earlier may be what the peers wait for), until nothing moves;
 * px_wait then sleeps on the worker's event fd (px__sleep). Nothing spins.
 *
 * Asynchronous progress is by progress calls between kernels:
 * the engine calls px_progress after every op of its forward and backward
 * (gpt.c's poke, through zero.c's progress hook), so requests started
 * before a layer's compute (gradient buckets, ZeRO gathers and
 * reduce-scatters, tensor-parallel collectives) advance while it runs. Why
 * not a progress thread sleeping on the worker's event fd: (1) on the
 * machines we test on, 4 ranks share 2 cores, and a second runnable thread
 * per rank that wakes on every message costs two context switches per
 * wake-up and takes cores from the compute it is meant to hide behind;
 * (2) the worker would have to be made thread-safe (UCS_THREAD_MODE_MULTI:
 * a lock in every UCX call) and every request, op list and communicator
 * structure here guarded, on every call of the training thread; (3) the
 * engine's kernels are a few milliseconds each on CPU, so a poke between
 * them bounds the delay of a ring step to one kernel, and a poke with
 * nothing pending costs a walk of an empty list. What it does not do:
 * advance during one long kernel (a GPU stream or a very large GEMM); a
 * thread (or a helper core) is the lever there. Single-threaded: the
 * caller's thread runs all of it.
 *
 * Failure: a request fails on its own deadline (PX_ERR_TIMEOUT, sticky on
 * the communicator), on a mismatch (only this request; the communicator
 * stays usable), or when the communicator fails (peer death, abort, watch
 * fd): then every pending request returns that error. A failed request's
 * receives are cancelled and its sends drained (bounded) before it reports,
 * so no buffer is touched after completion.
 *
 * Runs on the thread using the communicators of the transport (one thread
 * per transport). */
#include "px_transport_int.h"

#include <sched.h> /* sched_getaffinity, CPU_COUNT (_GNU_SOURCE: meson.build) */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "px_env.h"
#include "px_log.h"
#include "px_path.h"
#include "px_reduce.h"
#include "px_time.h"

#define HDR_MAGIC 0x50584844u /* "PXHD" */

const char *px__coll_kind_name(int kind)
{
    switch (kind) {
    case PX__COLL_ALLREDUCE: return "all-reduce";
    case PX__COLL_BCAST: return "broadcast";
    case PX__COLL_BARRIER: return "barrier";
    case PX__COLL_REDUCE: return "reduce";
    case PX__COLL_ALLGATHER: return "all-gather";
    case PX__COLL_REDUCE_SCATTER: return "reduce-scatter";
    case PX__COLL_SCATTER: return "scatter";
    case PX__COLL_GATHER: return "gather";
    case PX__COLL_ALLTOALL: return "all-to-all";
    case PX__COLL_ALLTOALLV: return "all-to-all-v";
    case PX__COLL_SEND: return "send";
    case PX__COLL_RECV: return "recv";
    }
    return "unknown collective";
}

px_status_t px__req_send(px_request_t *req, int peer, ucp_tag_t tag, const void *buf,
                         size_t bytes, px__op_t **op_p)
{
    px__op_t *op;
    px_status_t status = px__send_post(req->comm, peer, tag, buf, bytes, &op);
    if (status != PX_OK)
        return status;
    op->owner = req;
    if (op_p)
        *op_p = op;
    return PX_OK;
}

px_status_t px__req_recv(px_request_t *req, int peer, ucp_tag_t tag, void *buf, size_t bytes,
                         px__op_t **op_p)
{
    px__op_t *op;
    px_status_t status = px__recv_post(req->comm, peer, tag, buf, bytes, &op);
    if (status != PX_OK)
        return status;
    op->owner = req;
    if (op_p)
        *op_p = op;
    return PX_OK;
}

void *px__req_tmp(px_request_t *req, int i, size_t bytes)
{
    px_comm_t *comm = req->comm;
    px__buf_t *fit = NULL, *grow = NULL;

    if (req->tmp[i]) {
        px_error("px__req_tmp: slot %d already in use", i);
        return NULL;
    }
    if (bytes == 0)
        bytes = 1;
    /* the smallest free cached buffer that fits, else the largest free one
     * (grown) */
    for (int k = 0; k < PX__NBUF; k++) {
        px__buf_t *b = &comm->bufs[k];
        if (b->busy)
            continue;
        if (b->bytes >= bytes && (!fit || b->bytes < fit->bytes))
            fit = b;
        if (!grow || b->bytes > grow->bytes)
            grow = b;
    }
    if (!fit && grow) {
        px__host_free(grow->ptr);
        grow->ptr = px__host_alloc(bytes);
        grow->bytes = grow->ptr ? bytes : 0;
        if (!grow->ptr)
            return NULL;
        fit = grow;
    }
    if (fit) {
        fit->busy = 1;
        req->tmp[i] = fit->ptr;
        return fit->ptr;
    }
    req->tmp[i] = px__host_alloc(bytes); /* every cache slot in use: a private one */
    return req->tmp[i];
}

void px__req_tmp_release(px_request_t *req, int i)
{
    px_comm_t *comm = req->comm;
    int cached = 0;

    if (!req->tmp[i])
        return;
    for (int k = 0; k < PX__NBUF; k++) {
        if (comm->bufs[k].busy && comm->bufs[k].ptr == req->tmp[i]) {
            comm->bufs[k].busy = 0;
            cached = 1;
        }
    }
    if (!cached)
        px__host_free(req->tmp[i]);
    req->tmp[i] = NULL;
}

static void release_tmps(px_request_t *req)
{
    for (int i = 0; i < 4; i++)
        px__req_tmp_release(req, i);
}

static void unlink_req(px_request_t *req)
{
    px_comm_t *comm = req->comm;
    px_request_t *prev = NULL;

    if (!req->linked)
        return;
    for (px_request_t *r = comm->reqs; r; prev = r, r = r->next) {
        if (r != req)
            continue;
        if (prev)
            prev->next = r->next;
        else
            comm->reqs = r->next;
        if (comm->reqs_tail == r)
            comm->reqs_tail = prev;
        break;
    }
    req->linked = 0;
}

static void req_free(px_request_t *req)
{
    unlink_req(req);
    release_tmps(req);
    px__sched_free(&req->sched);
    free(req->hdr_out);
    free(req->hdr_in);
    free(req->hdr_expect);
    free(req->sent_to);
    if (!px__path_req_free(req)) /* a path that made the request frees (or keeps) it */
        free(req);
}

void px__req_discard(px_request_t *req)
{
    if (!req)
        return;
    px__cancel_ops(req->comm, req);
    req_free(req);
}

void px__req_link(px_comm_t *comm, px_request_t *req)
{
    if (comm->reqs_tail)
        comm->reqs_tail->next = req;
    else
        comm->reqs = req;
    comm->reqs_tail = req;
    req->linked = 1;
}

px_request_t *px__req_alloc(px_comm_t *comm, int kind, px_dtype_t dtype, px_redop_t op,
                            uint64_t count, int root, const px_coll_opts_t *opts)
{
    px_request_t *req = malloc(sizeof(*req));

    if (req)
        px__req_init(req, comm, kind, dtype, op, count, root, opts);
    return req;
}

void px__req_init(px_request_t *req, px_comm_t *comm, int kind, px_dtype_t dtype,
                  px_redop_t op, uint64_t count, int root, const px_coll_opts_t *opts)
{
    memset(req, 0, sizeof(*req));
    req->comm = comm;
    req->kind = kind;
    req->status = PX_INPROGRESS;
    req->dtype = dtype;
    req->op = op;
    req->root = root;
    req->count = count;
    req->esz = px_dtype_size(dtype);
    req->half_dtype = -1;
    req->algo = opts ? opts->algo : PX_ALGO_AUTO;
    req->deadline = px__deadline(comm, opts && opts->timeout_ms > 0 ? opts->timeout_ms : -1);
}

px_status_t px__req_create(px_comm_t *comm, int kind, px_dtype_t dtype, px_redop_t op,
                           uint64_t count, int root, const uint64_t *send_counts,
                           const uint64_t *expect, const px_coll_opts_t *opts,
                           px_request_t **req_p)
{
    px_request_t *req = px__req_alloc(comm, kind, dtype, op, count, root, opts);
    px_status_t status = PX_OK;
    int n = comm->size;

    if (!req)
        return PX_ERR_NO_MEMORY;
    req->overlap = kind != PX__COLL_ALLTOALLV && /* its header count is not its size */
                   count <= PX__OVERLAP_MAX_BYTES / (req->esz ? req->esz : 1);
    if (kind == PX__COLL_SEND || kind == PX__COLL_RECV) {
        req->stage = 1; /* point-to-point: no header, no sequence number */
        goto link;
    }
    req->seq = comm->coll_seq++ & PX__SEQ_MASK;
    if (n == 1) {
        req->stage = 1;
        goto link;
    }
    px__paths_note(req); /* a path's ranks that skip the header exchange compare it */
    req->hdr_out = calloc((size_t)n, sizeof(px__hdr_t));
    req->hdr_in = calloc((size_t)n, sizeof(px__hdr_t));
    if (!req->hdr_out || !req->hdr_in) {
        status = PX_ERR_NO_MEMORY;
        goto err_free;
    }
    if (expect) {
        req->hdr_expect = malloc((size_t)n * sizeof(uint64_t));
        if (!req->hdr_expect) {
            status = PX_ERR_NO_MEMORY;
            goto err_free;
        }
        memcpy(req->hdr_expect, expect, (size_t)n * sizeof(uint64_t));
    }
    for (int r = 0; r < n; r++) {
        px__hdr_t h = {HDR_MAGIC, req->seq, (uint32_t)kind, (uint32_t)dtype, (uint32_t)op,
                       root, send_counts ? send_counts[r] : count};
        h.bad_rank = -1;
        req->hdr_out[r] = h;
    }
    for (int r = 0; r < n; r++) {
        if (r == comm->rank)
            continue;
        px__op_t *op;
        status = px__req_recv(req, r, px__req_tag(req, r, PX__PHASE_HDR, 0), &req->hdr_in[r],
                              sizeof(px__hdr_t), &op);
        if (status != PX_OK)
            goto err_cancel;
        op->hdr = 1;
    }
    for (int i = 1; i < n; i++) {
        int r = (comm->rank + i) % n; /* spread the fan-out */
        px__op_t *op;
        status = px__req_send(req, r, px__req_tag(req, comm->rank, PX__PHASE_HDR, 0),
                              &req->hdr_out[r], sizeof(px__hdr_t), &op);
        if (status != PX_OK)
            goto err_cancel;
        op->hdr = 1;
    }
link:
    px__req_link(comm, req);
    *req_p = req;
    return PX_OK;

err_cancel:
    px__cancel_ops(comm, req);
err_free:
    req_free(req);
    return status;
}

px_status_t px__req_create_inline(px_comm_t *comm, int kind, px_dtype_t dtype, px_redop_t op,
                                  uint64_t count, int root, const px_coll_opts_t *opts,
                                  px_request_t **req_p)
{
    px_request_t *req = px__req_alloc(comm, kind, dtype, op, count, root, opts);
    int n = comm->size;

    if (!req)
        return PX_ERR_NO_MEMORY;
    req->seq = comm->coll_seq++ & PX__SEQ_MASK;
    req->stage = 1; /* the algorithm checks the headers it receives */
    req->inl = 1;
    /* hdr_out: the notices a rank that finds a mismatch sends (one per rank) */
    req->hdr_out = calloc((size_t)n, sizeof(px__hdr_t));
    req->sent_to = calloc((size_t)n, 1);
    if (!req->hdr_out || !req->sent_to) {
        req_free(req);
        return PX_ERR_NO_MEMORY;
    }
    for (int r = 0; r < n; r++)
        px__inline_header(req, &req->hdr_out[r]);
    px__req_link(comm, req);
    *req_p = req;
    return PX_OK;
}

void px__inline_header(const px_request_t *req, px__hdr_t *h)
{
    memset(h, 0, sizeof(*h));
    h->magic = HDR_MAGIC;
    h->seq = req->seq;
    h->kind = (uint32_t)req->kind;
    /* the caller's dtype (an fp16 reduction travels as fp32: the header
     * still says fp16, as the header exchange does) */
    h->dtype = (uint32_t)(req->half_dtype >= 0 ? req->half_dtype : (int)req->dtype);
    h->op = (uint32_t)req->op;
    h->root = req->root;
    h->count = req->count;
    h->inl = 1;
    h->bad_rank = -1;
}

static const char *mode_name(uint32_t inl)
{
    return inl ? "header in data" : "header exchange";
}

/* "count 33 dtype fp32 op sum root -1 (header in data)" of a header's values. */
static void vals_text(char *buf, size_t len, const px__hdr_t *h)
{
    snprintf(buf, len, "count %llu dtype %s op %s root %d (%s)", (unsigned long long)h->count,
             px_dtype_name((px_dtype_t)h->dtype), px_redop_name((px_redop_t)h->op), h->root,
             mode_name(h->inl));
}

/* Compares the header `h` rank `r` sent with ours (`mine`; `want`: the
 * count we expect from it). PX_OK, or PX_ERR_MISMATCH naming both ranks'
 * values; *kind_level_p = 1 when the disagreement is about which
 * collective runs, or how (a notice, the wrong collective or mode), which
 * every rank sees, not only the two concerned. */
static px_status_t check_one(px_request_t *req, int r, const px__hdr_t *h, const px__hdr_t *mine,
                             uint64_t want, int *kind_level_p)
{
    px_comm_t *comm = req->comm;
    char theirs[128], ours[128];

    *kind_level_p = 1;
    if (h->magic != HDR_MAGIC || h->seq != req->seq || h->kind != mine->kind)
        return px__comm_set_error(comm, PX_ERR_MISMATCH,
                                  "rank %d: collective mismatch: it called %s #%u, we "
                                  "called %s #%u", r, px__coll_kind_name((int)h->kind), h->seq,
                                  px__coll_kind_name((int)mine->kind), req->seq);
    if (h->notice) {
        /* rank h->found_by found a mismatch with rank h->bad_rank and
         * stopped; rank r tells us (it found it, or was told) */
        if (h->bad.magic == HDR_MAGIC) {
            px__hdr_t b = {0};
            size_t used;
            b.count = h->bad.count;
            b.dtype = h->bad.dtype;
            b.op = h->bad.op;
            b.root = h->bad.root;
            b.inl = h->bad.seq; /* notices keep the bad rank's mode in bad.seq */
            used = (size_t)snprintf(theirs, sizeof(theirs), "%s ", px__coll_kind_name((int)h->bad.kind));
            vals_text(theirs + used, sizeof(theirs) - used, &b);
        } else if (h->bad.count) {
            snprintf(theirs, sizeof(theirs), "a first message of %llu bytes, longer than "
                     "its own", (unsigned long long)h->bad.count);
        } else {
            snprintf(theirs, sizeof(theirs), "values it could not read");
        }
        vals_text(ours, sizeof(ours), h);
        return px__comm_set_error(comm, PX_ERR_MISMATCH,
                                  "rank %d: %s #%u mismatch: rank %d found that rank %d passed "
                                  "%s where rank %d passed %s", r, px__coll_kind_name((int)mine->kind),
                                  req->seq, h->found_by, h->bad_rank, theirs, h->found_by, ours);
    }
    if (h->count != want || h->dtype != mine->dtype || h->op != mine->op ||
        h->root != mine->root || h->inl != mine->inl) {
        px__hdr_t w = *mine;
        w.count = want;
        *kind_level_p = h->inl != mine->inl;
        vals_text(theirs, sizeof(theirs), h);
        vals_text(ours, sizeof(ours), &w);
        return px__comm_set_error(comm, PX_ERR_MISMATCH,
                                  "rank %d: %s #%u mismatch: it passed %s, we expect %s", r,
                                  px__coll_kind_name((int)mine->kind), req->seq, theirs, ours);
    }
    *kind_level_p = 0;
    return PX_OK;
}

/* Compares the received headers with ours; PX_ERR_MISMATCH naming the
 * first disagreeing rank. */
static px_status_t compare_headers(px_request_t *req)
{
    px_comm_t *comm = req->comm;

    for (int r = 0; r < comm->size; r++) {
        int kind_level;
        px_status_t status;
        if (r == comm->rank)
            continue;
        status = check_one(req, r, &req->hdr_in[r], &req->hdr_out[r],
                           req->hdr_expect ? req->hdr_expect[r] : req->hdr_out[r].count,
                           &kind_level);
        if (status != PX_OK)
            return status;
    }
    return PX_OK;
}

/* A header-in-data request found a mismatch with rank `peer` (its header
 * `h`, or NULL with `len` the length of a message we could not read): tells
 * every rank we have not sent to yet (each expects at most one message from
 * us, on the header tag, so the notice is what it reads in place of our
 * data: a rank later in the algorithm's graph, or a rank that runs the
 * header exchange, learns it at once instead of waiting for data that will
 * not come), and returns PX_ERR_MISMATCH. The error text is set by the
 * caller. */
static px_status_t inline_fail(px_request_t *req, int peer, const px__hdr_t *h, size_t len)
{
    px_comm_t *comm = req->comm;

    for (int r = 0; r < comm->size; r++) {
        px__hdr_t *nt = &req->hdr_out[r];
        px__op_t *op;
        if (r == comm->rank || req->sent_to[r])
            continue;
        if (h && h->notice && h->magic == HDR_MAGIC && h->seq == req->seq &&
            h->kind == (uint32_t)req->kind) {
            *nt = *h; /* pass the finder's notice on as it is */
            req->sent_to[r] = 1;
            if (px__req_send(req, r, px__req_tag(req, comm->rank, PX__PHASE_HDR, 0), nt,
                             sizeof(*nt), &op) != PX_OK)
                break;
            op->hdr = 1;
            continue;
        }
        px__inline_header(req, nt);
        nt->notice = 1;
        nt->bad_rank = peer;
        nt->found_by = comm->rank;
        if (h) {
            nt->bad.magic = HDR_MAGIC;
            nt->bad.seq = h->inl;
            nt->bad.kind = h->kind;
            nt->bad.dtype = h->dtype;
            nt->bad.op = h->op;
            nt->bad.root = h->root;
            nt->bad.count = h->count;
        } else {
            nt->bad.count = len;
        }
        req->sent_to[r] = 1;
        if (px__req_send(req, r, px__req_tag(req, comm->rank, PX__PHASE_HDR, 0), nt,
                         sizeof(*nt), &op) != PX_OK)
            break; /* the comm failed: that error wins anyway */
        op->hdr = 1;
    }
    return PX_ERR_MISMATCH;
}

px_status_t px__inline_check(px_request_t *req, px__op_t *o)
{
    px_comm_t *comm = req->comm;
    const px__hdr_t *h = o->buf;
    px__hdr_t mine;
    px_status_t status;
    size_t want = sizeof(px__hdr_t) + (size_t)(req->count * req->esz);
    int kind_level;

    if (o->status == UCS_ERR_MESSAGE_TRUNCATED) {
        px__comm_set_error(comm, PX_ERR_MISMATCH, "rank %d: %s #%u mismatch: its message (%zu "
                           "bytes) is longer than any header-in-data message", o->peer,
                           px__coll_kind_name(req->kind), req->seq, o->length);
        return inline_fail(req, o->peer, NULL, o->length);
    }
    if (o->status != UCS_OK)
        return px__op_status(comm, o); /* the peer failed */
    if (o->length < sizeof(px__hdr_t)) {
        px__comm_set_error(comm, PX_ERR_MISMATCH, "rank %d: %s #%u mismatch: it sent %zu bytes, "
                           "less than a header", o->peer, px__coll_kind_name(req->kind),
                           req->seq, o->length);
        return inline_fail(req, o->peer, NULL, o->length);
    }
    px__inline_header(req, &mine);
    status = check_one(req, o->peer, h, &mine, mine.count, &kind_level);
    if (status != PX_OK)
        return inline_fail(req, o->peer, h, o->length);
    if (o->length != want) { /* same header, other length: cannot be, but never read past */
        px__comm_set_error(comm, PX_ERR_MISMATCH, "rank %d: %s #%u: sent %zu bytes, %zu "
                           "expected", o->peer, px__coll_kind_name(req->kind), req->seq,
                           o->length, want);
        return inline_fail(req, o->peer, NULL, o->length);
    }
    return PX_OK;
}

/* Stage 0: all header messages in? Then compare. The headers of
 * all-to-all-v carry per-peer counts, so a disagreement is seen only by the
 * two ranks concerned: a second round tells every rank every rank's
 * verdict, so that all of them fail together. */
static px_status_t header_step(px_request_t *req, int *progressed_p)
{
    px_comm_t *comm = req->comm;
    px_status_t status;
    int all = 1;

    for (px__op_t *o = comm->active; o; o = o->next) {
        int kind_level;
        if (o->owner != req || !o->hdr)
            continue;
        if (!o->done) {
            all = 0;
            continue;
        }
        if (!o->is_send && o->status == UCS_ERR_MESSAGE_TRUNCATED) {
            /* a header-in-data message: the peer runs the small all-reduce */
            const px__hdr_t *mine = &req->hdr_out[o->peer];
            char ours[128];
            vals_text(ours, sizeof(ours), mine);
            return px__comm_set_error(comm, PX_ERR_MISMATCH,
                                      "rank %d: %s #%u mismatch: it sent %zu bytes where we "
                                      "expect a header (it runs a small all-reduce, header "
                                      "in data, with %zu bytes of data); we passed %s",
                                      o->peer, px__coll_kind_name((int)mine->kind), req->seq, o->length,
                                      o->length > sizeof(px__hdr_t)
                                          ? o->length - sizeof(px__hdr_t) : 0,
                                      ours);
        }
        status = px__op_status(comm, o);
        if (status != PX_OK)
            return status;
        /* a notice, or another collective: fail now, without waiting for
         * the other headers (their senders may be waiting on us) */
        if (!o->is_send && !req->verdict_posted) {
            const px__hdr_t *h = &req->hdr_in[o->peer], *mine = &req->hdr_out[o->peer];
            /* all-to-all-v: only what every rank sees fails early; a count
             * disagreement goes through the verdict round */
            int early = !req->hdr_expect || h->magic != HDR_MAGIC || h->seq != req->seq ||
                        h->kind != mine->kind || h->notice || h->inl != mine->inl;
            if (early && check_one(req, o->peer, h, mine,
                                   req->hdr_expect ? req->hdr_expect[o->peer] : mine->count,
                                   &kind_level) != PX_OK)
                return PX_ERR_MISMATCH;
        }
    }
    if (!all)
        return PX_INPROGRESS;
    /* reap the header ops */
    for (px__op_t *o = comm->active, *next; o; o = next) {
        next = o->next;
        if (o->owner == req && o->hdr)
            px__op_reap(comm, o);
    }
    *progressed_p = 1;
    if (!req->hdr_expect)
        status = compare_headers(req);
    else if (!req->verdict_posted) {
        /* round 2: our verdict to every rank, theirs from every rank */
        req->verdict_err = compare_headers(req);
        req->verdict_posted = 1;
        for (int r = 0; r < comm->size; r++) {
            px__op_t *op;
            if (r == comm->rank)
                continue;
            req->hdr_out[r].count = req->verdict_err != PX_OK; /* reused as the verdict */
            status = px__req_recv(req, r, px__req_tag(req, r, PX__PHASE_HDR, 1), &req->hdr_in[r],
                                  sizeof(px__hdr_t), &op);
            if (status != PX_OK)
                return status;
            op->hdr = 1;
            status = px__req_send(req, r, px__req_tag(req, comm->rank, PX__PHASE_HDR, 1),
                                  &req->hdr_out[r], sizeof(px__hdr_t), &op);
            if (status != PX_OK)
                return status;
            op->hdr = 1;
        }
        return PX_INPROGRESS;
    } else {
        status = req->verdict_err;
        for (int r = 0; status == PX_OK && r < comm->size; r++)
            if (r != comm->rank && req->hdr_in[r].count)
                status = px__comm_set_error(comm, PX_ERR_MISMATCH,
                                            "rank %d: all-to-all-v #%u: its send and receive "
                                            "counts disagree with a peer's", r, req->seq);
    }
    if (status != PX_OK)
        return status;
    req->stage = 1;
    return PX_OK;
}

/* Converts the fp32 result of a staged fp16/bf16 reduction back. */
static void half_finish(px_request_t *req)
{
    if (req->half_dtype == PX_FLOAT16)
        px_f32_to_f16(req->half_dst, req->half_src, (size_t)req->half_count);
    else if (req->half_dtype == PX_BFLOAT16)
        px_f32_to_bf16(req->half_dst, req->half_src, (size_t)req->half_count);
}

/* Ends `req` with `status` (cancelling its remaining ops on failure). */
static void req_end(px_request_t *req, px_status_t status)
{
    if (status == PX_ERR_MISMATCH)
        px__paths_mismatch(req->comm); /* every rank sees it: all leave the paths' state */
    if (status != PX_OK)
        px__cancel_ops(req->comm, req);
    else
        half_finish(req);
    px__path_req_end(req, status); /* nothing of the path still uses the buffers */
    req->status = status;
    release_tmps(req);
}

/* One step of `req`: returns its status (PX_INPROGRESS while running). */
static px_status_t req_step(px_request_t *req, int *progressed_p)
{
    px_comm_t *comm = req->comm;
    px_status_t status;

    if (req->status != PX_INPROGRESS)
        return req->status;
    if (comm->failed) {
        req_end(req, comm->failed);
        return req->status;
    }
    if (req->stage == 0) {
        /* a rank that took a path without the header exchange (shm) sends
         * no UCX header: that path compares ours */
        status = px__paths_hdr_check(req);
        if (status == PX_OK)
            status = header_step(req, progressed_p);
        if (status != PX_OK && status != PX_INPROGRESS) {
            req_end(req, status);
            return status;
        }
        if (status == PX_INPROGRESS && !req->overlap)
            goto check_time;
    }
    if (!req->algo_done) {
        status = req->advance ? req->advance(req, progressed_p) : PX_OK;
        if (status == PX_ERR_MISMATCH && req->stage == 0) {
            /* a message of the wrong size: the headers will say what differs */
            req->algo_err = status;
            status = PX_OK;
        }
        if (status != PX_OK && status != PX_INPROGRESS) {
            req_end(req, status);
            return status;
        }
        req->algo_done = status == PX_OK;
    }
    if (req->algo_done && req->stage == 1) {
        req_end(req, req->algo_err);
        return req->status;
    }
check_time:
    /* a rank died that this request still needs, or its deadline passed */
    status = px__check_async(comm);
    if (status != PX_OK) {
        req_end(req, status);
        return status;
    }
    if (px_time_mono_ms() >= req->deadline) {
        char who[96];
        px__pending_ranks(comm, req, who, sizeof(who));
        status = px__comm_set_error(comm, PX_ERR_TIMEOUT, "%s #%u: timeout: still waiting for "
                                    "rank(s) %s", px__coll_kind_name(req->kind), req->seq,
                                    who);
        req_end(req, status);
        return status;
    }
    return PX_INPROGRESS;
}

void px__comm_link(px_comm_t *comm)
{
    if (comm->tr_linked)
        return;
    comm->tr_next = comm->tr->comms;
    comm->tr->comms = comm;
    comm->tr_linked = 1;
}

void px__comm_unlink(px_comm_t *comm)
{
    if (!comm->tr_linked)
        return;
    for (px_comm_t **pp = &comm->tr->comms; *pp; pp = &(*pp)->tr_next) {
        if (*pp == comm) {
            *pp = comm->tr_next;
            break;
        }
    }
    comm->tr_next = NULL;
    comm->tr_linked = 0;
}

/* Steps every pending request of `comm` once, in start order. */
static void comm_step(px_comm_t *comm, int *progressed_p)
{
    for (px_request_t *r = comm->reqs; r; r = r->next)
        if (r->status == PX_INPROGRESS)
            req_step(r, progressed_p);
}

/* Progresses the worker and steps every pending request of every
 * communicator on it until nothing moves. Progress is per worker, not per
 * communicator: a rank blocked on communicator A must still advance its
 * part of B, which a peer may be waiting on before it can serve A
 * (test_progress twocomm). `comm` first (it is what the caller waits on),
 * then the others. */
static void comm_progress(px_comm_t *comm)
{
    px_transport_t *tr = comm->tr;

    for (int rounds = 0; rounds < 1000; rounds++) {
        int progressed = 0;
        px__progress_worker(comm);
        comm_step(comm, &progressed);
        for (px_comm_t *c = tr->comms; c; c = c->tr_next)
            if (c != comm && c->reqs)
                comm_step(c, &progressed);
        if (!progressed)
            return;
    }
}

void px_progress(px_comm_t *comm)
{
    int pending = 0;

    if (!comm)
        return;
    for (px_comm_t *c = comm->tr->comms; c && !pending; c = c->tr_next)
        for (px_request_t *r = c->reqs; r && !pending; r = r->next)
            pending = r->status == PX_INPROGRESS;
    if (!pending)
        return;
    /* dead same-node peers are dropped before the worker is progressed;
     * their requests learn it in their own step */
    (void)px__poll_async(comm);
    comm_progress(comm);
}

static px_status_t req_finish(px_request_t *req)
{
    px_status_t status = req->status;
    req_free(req);
    return status;
}

px_status_t px_test(px_request_t *req, int *done_p)
{
    if (!req || !done_p)
        return PX_ERR_INVALID_ARGUMENT;
    if (req->status == PX_INPROGRESS) {
        px_status_t async = px__poll_async(req->comm);
        if (async != PX_OK) {
            req_end(req, async);
        } else {
            comm_progress(req->comm);
        }
    }
    if (req->status == PX_INPROGRESS) {
        *done_p = 0;
        return PX_OK;
    }
    *done_p = 1;
    return req_finish(req);
}

/* The CPUs this process may run on (its affinity mask, which cpusets and
 * taskset narrow). */
static int node_cpus(void)
{
    cpu_set_t set;
    if (sched_getaffinity(0, sizeof(set), &set) == 0)
        return CPU_COUNT(&set);
    return (int)sysconf(_SC_NPROCESSORS_ONLN);
}

/* Whether the ranks of this job on this node (world ranks with our node
 * name) outnumber the CPUs this process may run on (node_cpus): then a
 * spinning rank takes the core its peer needs, as Open MPI's rule has it
 * (it yields only when oversubscribed, mpi_yield_when_idle). */
static int node_oversubscribed(const px_comm_t *comm)
{
    const px_comm_t *w = comm->root;
    int local = 0, cpus;

    for (int r = 0; r < w->size; r++)
        if (w->nodes && w->nodes[r] && w->nodes[w->rank] &&
            !strcmp(w->nodes[r], w->nodes[w->rank]))
            local++;
    cpus = node_cpus();
    return local > cpus;
}

/* Whether other processes load the machine: the 1-minute load average
 * above its CPUs (plus a half, for our own spinning ranks, which count as
 * runnable), read at most once a second. Measured (bench-small-lat, 2
 * ranks, load 10 on 2 CPUs): a 200 us spin cut the median 4 KiB call from
 * 33 to 8 us for the first few thousand calls, then the scheduler, which
 * charges a spinner its whole slice, held both ranks off the CPUs and the
 * median rose to 0.9 ms; so auto spins only on a machine with CPUs to
 * spare. */
static int machine_loaded(void)
{
    static int64_t next_us;
    static int loaded;
    int64_t now = px_time_mono_us();
    double load[1];

    if (now >= next_us) {
        next_us = now + 1000000;
        loaded = getloadavg(load, 1) == 1 && load[0] > node_cpus() + 0.5;
    }
    return loaded;
}

int px__spin_allowed(const px_comm_t *comm)
{
    static int oversubscribed = -1;

    if (oversubscribed < 0)
        oversubscribed = node_oversubscribed(comm);
    return !oversubscribed && !machine_loaded();
}

/* The spin bound in microseconds: PX_SPIN_US when >= 0, else (auto)
 * PX__AUTO_SPIN_US while neither our ranks oversubscribe the node (checked
 * once) nor other processes load it (machine_loaded), and 0 otherwise. */
static long spin_bound_us(const px_comm_t *comm)
{
    static long spin_us = -2;
    static int auto_ok;

    if (spin_us == -2) {
        spin_us = px_env_int("PX_SPIN_US");
        auto_ok = spin_us < 0 && !node_oversubscribed(comm);
    }
    if (spin_us >= 0)
        return spin_us;
    return auto_ok && !machine_loaded() ? PX__AUTO_SPIN_US : 0;
}

/* Bounded spin before sleeping (PX_SPIN_US, microseconds): a reply that
 * comes within a few microseconds is taken without the cost of a sleep and
 * wake-up (two context switches, tens of microseconds on a loaded
 * machine). Progress is polled only while something moved in the last
 * pass or the bound has not passed; then the caller sleeps on the event fd,
 * so a rank waiting for a slow peer uses no CPU. Returns 1 if `req` may
 * have finished. */
static int spin_then_done(px_request_t *req)
{
    long spin_us = spin_bound_us(req->comm);
    int64_t end;

    if (spin_us <= 0)
        return 0;
    end = px_time_mono_us() + spin_us;
    do {
        comm_progress(req->comm);
        if (req->status != PX_INPROGRESS)
            return 1;
    } while (px_time_mono_us() < end);
    return 0;
}

/* px_wait's body; *freed_p = 1 when the request was freed. */
static px_status_t wait_impl(px_request_t *req, int timeout_ms, int *freed_p)
{
    px_comm_t *comm = req->comm;
    int64_t user_deadline = timeout_ms < 0 ? INT64_MAX : px_time_mono_ms() + timeout_ms;

    *freed_p = 0;
    for (;;) {
        int64_t now, until;

        if (req->status == PX_INPROGRESS) {
            /* a same-node peer that exited must be dropped before progress */
            px_status_t async = px__poll_async(comm);
            if (async != PX_OK)
                req_end(req, async);
            else
                comm_progress(comm);
        }
        if (req->status != PX_INPROGRESS) {
            *freed_p = 1;
            return req_finish(req);
        }
        now = px_time_mono_ms();
        if (now >= user_deadline && user_deadline < req->deadline)
            return PX_ERR_TIMEOUT; /* the request stays valid */
        until = req->deadline < user_deadline ? req->deadline : user_deadline;
        for (px_comm_t *c = comm->tr->comms; c; c = c->tr_next)
            for (px_request_t *r = c->reqs; r; r = r->next)
                if (r->status == PX_INPROGRESS && r->deadline < until)
                    until = r->deadline;
        if (until <= now)
            continue; /* the step sees the deadline */
        if (spin_then_done(req))
            continue;
        px__sleep(comm, until - now > (1 << 30) ? (1 << 30) : (int)(until - now));
    }
}

px_status_t px_wait(px_request_t *req, int timeout_ms)
{
    int freed;
    if (!req)
        return PX_ERR_INVALID_ARGUMENT;
    return wait_impl(req, timeout_ms, &freed);
}

px_status_t px_wait_all(px_request_t **reqs, int n, int timeout_ms)
{
    px_status_t first = PX_OK;
    for (int i = 0; i < n; i++) {
        px_status_t status;
        int freed;
        if (!reqs[i])
            continue;
        status = wait_impl(reqs[i], timeout_ms, &freed);
        if (!freed) /* the caller's bound passed: cancel so that all are freed */
            px_request_cancel(reqs[i]);
        reqs[i] = NULL;
        if (status != PX_OK && first == PX_OK)
            first = status;
    }
    return first;
}

void px_request_cancel(px_request_t *req)
{
    if (!req)
        return;
    if (req->status == PX_INPROGRESS)
        px__path_req_cancel(req); /* the ranks' path state no longer agrees */
    px__cancel_ops(req->comm, req);
    req_free(req);
}

/* Frees every pending request of a communicator being destroyed. */
void px__comm_drop_requests(px_comm_t *comm)
{
    while (comm->reqs)
        px_request_cancel(comm->reqs);
}
