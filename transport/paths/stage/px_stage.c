/* px_stage.c: collectives on device buffers, staged through pinned host
 * buffers in chunks (px_devmem.h; ARCHITECTURE.md section 4, "GPU buffers
 * travel ... otherwise staged through pinned host buffers in chunks,
 * overlapping copy and send"). The core reaches it only through its
 * entry in the table, px__path_stage (px_path.h), at the end of this file.
 *
 * The transport's algorithms read and write host memory. A collective on
 * device buffers is cut into chunks of about px_transport_set_stage_chunk
 * bytes; each chunk is copied off the device into one of (up to) three
 * pinned host buffers, the host algorithm runs on it, and its result is
 * copied back. The three buffers rotate: while chunk i's collective is on
 * the wire, chunk i-1's result goes back onto the device and chunk i+1
 * comes off it. Where the backend has asynchronous copies (kernel table
 * mem_copy_async / copy_wait: CUDA's copy stream) they run on the copy
 * engine meanwhile, and a buffer's copy is waited for only when its
 * contents are needed (a loaded chunk before its collective, a stored one
 * before the buffer takes the chunk three later, all of them before the
 * request completes or fails); otherwise the copies are synchronous, made
 * while the peers and the network move chunk i's messages. The request
 * completes when the last chunk is back in device memory.
 *
 * Bit-for-bit the host result. A reduction's sum order per element must be
 * the one the host algorithm on the whole buffer gives:
 *   - the ring (coll/ring.c) sums block b (of the n blocks of the whole
 *     buffer) around the ring starting from a rank fixed by b, so a chunk is
 *     not a contiguous range but slice i of every block: chunk i holds
 *     elements [i*pc, (i+1)*pc) of each block (pc = chunk / (n * element)
 *     elements), laid out block after block on the host, and the ring runs
 *     on it with the same owner shift; every element stays in its block and
 *     is summed in the host's order. The slices of one chunk differ in
 *     length by at most one element, longer first, which is exactly the
 *     ring's (base, rem) layout.
 *   - recursive doubling and Rabenseifner (coll/rd.c) combine every element
 *     by the same butterfly of ranks wherever it lies (lower rank's operand
 *     first), so their chunks are contiguous ranges; the algorithm is the one
 *     the host path picks for the whole buffer.
 * Reduce-scatter and all-gather are the ring's halves and are cut the same
 * way as the ring all-reduce; broadcast (binomial tree per chunk) and
 * all-to-all (slice i of every rank's block, sent and received by the
 * algorithm the host path picks, into the receive half of the host buffer)
 * move bytes only. Every rank cuts the same chunks: they depend only on the
 * count, the element size, the communicator size and the staging chunk
 * (which every rank of a job must set alike).
 *   - all-to-all-v: chunk i holds elements [i*pc, (i+1)*pc) of every send
 *     block and of every receive block (pc = chunk / (n * element)), packed
 *     block after block (sends, then receives). The slice a rank sends q in
 *     chunk i is exactly the slice q receives from it in chunk i (both are
 *     cut from the same block length), so the slices line up without an
 *     exchange; a rank runs as many chunks as its own longest block needs,
 *     and a chunk's exchange leaves out its empty slices
 *     (px__pairwise_alltoallv_sparse_build), so nobody waits for a rank that
 *     has finished. Gaps between the receive blocks are never written.
 *
 * Messages: the request keeps its one sequence number and header exchange
 * (mismatch detection covers the whole collective); while a chunk runs its
 * messages carry tag kind STAGE with the low 12 bits of the sequence number
 * and the chunk index modulo 256 (px__req_tag), so the chunks of one
 * collective, and staged collectives beside host ones, never match each
 * other's messages. (A rank can run ahead of a peer by more than 256
 * chunks only where its sends complete without the peer, as a broadcast
 * root's eager sends of small chunks do; then the peer's receives rest on
 * UCX matching one sender's messages of one tag in order, as the staged
 * point-to-point transfers do.)
 *
 * fp16 / bf16 reductions (all-reduce, reduce-scatter) run in fp32 as on
 * host buffers (px_coll.c): each buffer has an fp32 area, where the host
 * algorithm runs, and behind it a half area the copies use; a chunk is
 * copied off the device as halves, widened into the fp32 area before its
 * collective, and rounded once back into the half area before it is
 * copied onto the device. Every element is widened, summed in the same
 * order and rounded once, as the host path does with the whole buffer, so
 * the result is the host path's bit for bit.
 *
 * Failure: cancel, abort, deadlines, mismatch and dead peers are the
 * request's (px_request.c): its posted messages are cancelled and its
 * temporaries, the staging buffers among them (slot 3), released.
 *
 * Runs on the thread using the communicator. */
#include "px_transport_int.h"

#include <stdlib.h>
#include <string.h>

#include "px_devmem.h"
#include "px_log.h"
#include "px_path.h"
#include "px_reduce.h"

enum { ST_AR_RING = 1, ST_AR_FLAT, ST_RS, ST_AG, ST_BCAST, ST_A2A, ST_A2AV };

#define ST_NBUF 3

typedef struct px__stage {
    int what;            /* ST_* */
    px_algo_t algo;      /* ST_AR_FLAT: recursive doubling or Rabenseifner; ST_A2A:
                          * linear or pairwise */
    uint64_t *a2a;       /* ST_A2A: a chunk's counts [n] and displacements [n];
                          * ST_A2AV: the call's send counts, send displacements,
                          * receive counts, receive displacements [n] each, then
                          * the same four [n] of the chunk running */
    uint64_t sext;       /* ST_A2AV: elements of a buffer's send half (the
                          * receive half follows it) */
    const char *dsrc;    /* device input (bcast: the buffer) */
    char *ddst;          /* device output (bcast: the buffer) */
    size_t esz;
    /* blocked layouts (ring, RS, AG): block b of the device layout has
     * blen + (b < brem) elements at b * blen + min(b, brem) */
    uint64_t blen, brem;
    uint64_t count;      /* flat layouts: elements in all */
    uint64_t pc;         /* elements per chunk (blocked: per block slice) */
    uint64_t nchunks;
    uint64_t loaded, ran, stored; /* chunks copied in / reduced / copied out */
    int running;         /* chunk `ran` has its algorithm set up */
    px_status_t (*inner)(px_request_t *req, int *progressed_p);
    char *buf[ST_NBUF];
    uint64_t tload[ST_NBUF], tstore[ST_NBUF]; /* async copy tickets per buffer, 0: none */
    int nbuf;
    uint64_t restore_count; /* req->count of the whole collective */
    px_dtype_t half;     /* PX_FLOAT16 / PX_BFLOAT16 reduced in fp32 (esz 2), else 0 */
    int n;               /* the communicator's size */
    size_t half_off;     /* half: byte offset of each buffer's half area */
} px__stage_t;

/* Waits for ticket *t (async copies) and clears it. */
static void copy_wait(uint64_t *t)
{
    if (*t)
        px__dev_ops()->copy_wait(*t);
    *t = 0;
}

/* Waits for the staging copies still in flight (asynchronous copies of
 * the device backend), so that the host buffers may be reused: called when
 * a staged request ends, failed or not, before its temporaries go back.
 * NULL no-op. */
static void stage_drain(struct px__stage *st)
{
    if (!st)
        return;
    for (int b = 0; b < ST_NBUF; b++) {
        copy_wait(&st->tload[b]);
        copy_wait(&st->tstore[b]);
    }
}

/* Frees the staging state of a request (drains first); NULL no-op. */
static void stage_free(struct px__stage *st)
{
    stage_drain(st);
    if (st)
        free(st->a2a);
    free(st);
}

/* The newer of two tickets (0: a synchronous copy, nothing to wait for). */
static uint64_t keep(uint64_t t, uint64_t c)
{
    return c ? c : t;
}

/* One copy between the device and a staging buffer: asynchronous where the
 * backend has it (the ticket, newest wins), else synchronous (0). */
static uint64_t copy(void *dst, const void *src, size_t bytes, int to_host)
{
    const px_kernel_ops_t *k = px__dev_ops();
    if (k->mem_copy_async && k->copy_wait) {
        uint64_t t = k->mem_copy_async(dst, src, bytes, to_host);
        if (t)
            return t;
    }
    if (to_host)
        k->mem_copy_to_host(dst, src, bytes);
    else
        k->mem_copy_from_host(dst, src, bytes);
    return 0;
}

/* --- chunk geometry ---------------------------------------------------------- */

static uint64_t blk_len(const px__stage_t *st, int b)
{
    return st->blen + ((uint64_t)b < st->brem ? 1 : 0);
}

static uint64_t blk_off(const px__stage_t *st, int b)
{
    return (uint64_t)b * st->blen + ((uint64_t)b < st->brem ? (uint64_t)b : st->brem);
}

/* Elements of block b's slice in chunk i. */
static uint64_t slice_len(const px__stage_t *st, int b, uint64_t i)
{
    uint64_t len = blk_len(st, b), start = i * st->pc;
    if (start >= len)
        return 0;
    return len - start < st->pc ? len - start : st->pc;
}

/* Element offset of block b's slice in chunk i's host buffer (slices laid
 * out block after block). */
static uint64_t slice_hoff(const px__stage_t *st, int b, uint64_t i)
{
    uint64_t off = 0;
    for (int c = 0; c < b; c++)
        off += slice_len(st, c, i);
    return off;
}

/* Elements of chunk i of a flat layout. */
static uint64_t flat_len(const px__stage_t *st, uint64_t i)
{
    uint64_t start = i * st->pc;
    return st->count - start < st->pc ? st->count - start : st->pc;
}

/* All-to-all-v: elements of a block of `len` in chunk i. */
static uint64_t v_slice(const px__stage_t *st, uint64_t len, uint64_t i)
{
    uint64_t start = i * st->pc;
    if (start >= len)
        return 0;
    return len - start < st->pc ? len - start : st->pc;
}

static int blocked(const px__stage_t *st)
{
    return st->what == ST_AR_RING || st->what == ST_RS || st->what == ST_AG ||
           st->what == ST_A2A;
}

/* Elements of chunk i in its host buffer (reductions: blocked or flat). */
static uint64_t chunk_elems(const px__stage_t *st, int n, uint64_t i)
{
    return blocked(st) ? slice_hoff(st, n, i) : flat_len(st, i);
}

/* fp16 / bf16: chunk i's halves (the buffer's half area) widened into its
 * fp32 area `h`. */
static void half_widen(const px__stage_t *st, char *h, int n, uint64_t i)
{
    const uint16_t *src = (const uint16_t *)(h + st->half_off);
    if (st->half == PX_FLOAT16)
        px_f16_to_f32((float *)h, src, (size_t)chunk_elems(st, n, i));
    else
        px_bf16_to_f32((float *)h, src, (size_t)chunk_elems(st, n, i));
}

/* fp16 / bf16: chunk i's fp32 result (area `h`) rounded into the half area. */
static void half_round(const px__stage_t *st, char *h, uint64_t i)
{
    uint16_t *dst = (uint16_t *)(h + st->half_off);
    if (st->half == PX_FLOAT16)
        px_f32_to_f16(dst, (const float *)h, (size_t)chunk_elems(st, st->n, i));
    else
        px_f32_to_bf16(dst, (const float *)h, (size_t)chunk_elems(st, st->n, i));
}

/* --- copies -------------------------------------------------------------------- */

/* Chunk i off the device into its host buffer (after the buffer's last
 * store has finished); the copies' ticket goes to tload. */
static void chunk_load(px_request_t *req, px__stage_t *st, uint64_t i)
{
    const int n = req->comm->size, r = req->comm->rank, b = (int)(i % (uint64_t)st->nbuf);
    char *h = st->buf[b] + st->half_off; /* halves: widened at chunk_setup */
    const size_t esz = st->esz;
    uint64_t t = 0;

    copy_wait(&st->tstore[b]);
    switch (st->what) {
    case ST_AR_RING:
    case ST_RS:
    case ST_A2A: /* the send half: our block for each rank */
        for (int q = 0, hoff = 0; q < n; q++) {
            uint64_t len = slice_len(st, q, i);
            if (len)
                t = keep(t, copy(h + (size_t)hoff * esz,
                                 st->dsrc + (blk_off(st, q) + i * st->pc) * esz, len * esz, 1));
            hoff += (int)len;
        }
        break;
    case ST_AG: {
        uint64_t len = slice_len(st, r, i);
        if (len)
            t = keep(t, copy(h + slice_hoff(st, r, i) * esz, st->dsrc + i * st->pc * esz,
                             len * esz, 1));
        break;
    }
    case ST_AR_FLAT:
        t = keep(t, copy(h, st->dsrc + i * st->pc * esz, flat_len(st, i) * esz, 1));
        break;
    case ST_BCAST:
        if (r == req->root)
            t = keep(t, copy(h, st->dsrc + i * st->pc * esz, flat_len(st, i) * esz, 1));
        break;
    case ST_A2AV: /* slice i of every send block, packed */
        for (int q = 0, hoff = 0; q < n; q++) {
            uint64_t len = v_slice(st, st->a2a[q], i);
            if (len)
                t = keep(t, copy(h + (size_t)hoff * esz,
                                 st->dsrc + (st->a2a[n + q] + i * st->pc) * esz, len * esz, 1));
            hoff += (int)len;
        }
        break;
    }
    st->tload[b] = t;
}

/* Chunk i's result from its host buffer back onto the device; the copies'
 * ticket goes to tstore (waited for before the buffer is reused and before
 * the request completes). */
static void chunk_store(px_request_t *req, px__stage_t *st, uint64_t i)
{
    const int n = req->comm->size, r = req->comm->rank, b = (int)(i % (uint64_t)st->nbuf);
    const char *h = st->buf[b] + st->half_off;
    const size_t esz = st->esz;
    uint64_t t = 0;

    if (st->half) /* the fp32 result rounded once into the half area */
        half_round(st, st->buf[b], i);

    if (st->what == ST_A2A) /* the receive half follows the send half */
        h += slice_hoff(st, n, i) * esz;
    switch (st->what) {
    case ST_AR_RING:
    case ST_AG:
    case ST_A2A:
        for (int q = 0, hoff = 0; q < n; q++) {
            uint64_t len = slice_len(st, q, i);
            if (len)
                t = keep(t, copy(st->ddst + (blk_off(st, q) + i * st->pc) * esz,
                                 h + (size_t)hoff * esz, len * esz, 0));
            hoff += (int)len;
        }
        break;
    case ST_RS: {
        uint64_t len = slice_len(st, r, i);
        if (len)
            t = keep(t, copy(st->ddst + i * st->pc * esz, h + slice_hoff(st, r, i) * esz,
                             len * esz, 0));
        break;
    }
    case ST_AR_FLAT:
        t = keep(t, copy(st->ddst + i * st->pc * esz, h, flat_len(st, i) * esz, 0));
        break;
    case ST_BCAST:
        if (r != req->root)
            t = keep(t, copy(st->ddst + i * st->pc * esz, h, flat_len(st, i) * esz, 0));
        break;
    case ST_A2AV: /* slice i of every receive block (never the gaps between them) */
        h += st->sext * esz;
        for (int q = 0, hoff = 0; q < n; q++) {
            uint64_t len = v_slice(st, st->a2a[2 * n + q], i);
            if (len)
                t = keep(t, copy(st->ddst + (st->a2a[3 * n + q] + i * st->pc) * esz,
                                 h + (size_t)hoff * esz, len * esz, 0));
            hoff += (int)len;
        }
        break;
    }
    st->tstore[b] = t;
}

/* --- one chunk's collective ------------------------------------------------------ */

/* Sets up chunk i's host algorithm on its buffer (the request's ring state
 * or schedule, and its tag namespace). */
static px_status_t chunk_setup(px_request_t *req, px__stage_t *st, uint64_t i)
{
    const int n = req->comm->size;
    char *h = st->buf[i % (uint64_t)st->nbuf];
    px_status_t status;

    copy_wait(&st->tload[i % (uint64_t)st->nbuf]); /* issued a chunk ago: done by now */
    if (st->half)
        half_widen(st, h, n, i);
    req->stage_tag = 1;
    req->stage_chunk_idx = i;
    if (blocked(st)) {
        /* the slices: (base, rem) with the longer ones first */
        uint64_t base = slice_len(st, n - 1, i), rem = 0;
        for (int b = 0; b < n && slice_len(st, b, i) > base; b++)
            rem++;
        if (st->what == ST_A2A) {
            for (int q = 0; q < n; q++) {
                st->a2a[q] = base; /* every slice is as long (no rem) */
                st->a2a[n + q] = (uint64_t)q * base;
            }
            status = px__pairwise_alltoallv_build(req, h, st->a2a, st->a2a + n,
                                                  h + (size_t)n * base * st->esz, st->a2a,
                                                  st->a2a + n, st->algo == PX_ALGO_PAIRWISE);
        } else if (st->what == ST_AR_RING)
            status = px__ring_setup(req, 1, 1, 1, h, h, NULL, base, rem);
        else if (st->what == ST_RS)
            status = px__ring_setup(req, 0, 1, 0, h, h, NULL, base, rem);
        else
            status = px__ring_setup(req, 0, 0, 1, NULL, h, NULL, base, rem);
    } else if (st->what == ST_A2AV) {
        /* chunk i's counts and packed displacements: sends, then receives */
        uint64_t *v = st->a2a, *c = st->a2a + 4 * n, soff = 0, roff = 0;
        for (int q = 0; q < n; q++) {
            c[q] = v_slice(st, v[q], i);
            c[n + q] = soff;
            soff += c[q];
            c[2 * n + q] = v_slice(st, v[2 * n + q], i);
            c[3 * n + q] = roff;
            roff += c[2 * n + q];
        }
        status = px__pairwise_alltoallv_sparse_build(req, h, c, c + n, h + st->sext * st->esz,
                                                     c + 2 * n, c + 3 * n,
                                                     st->algo == PX_ALGO_PAIRWISE);
    } else if (st->what == ST_AR_FLAT) {
        req->count = flat_len(st, i);
        status = st->algo == PX_ALGO_RABENSEIFNER ? px__rabenseifner_allreduce_build(req, h, h)
                                                  : px__rd_allreduce_build(req, h, h);
    } else {
        status = px__tree_bcast_build(req, h, flat_len(st, i) * st->esz);
    }
    if (status != PX_OK)
        return status;
    st->inner = req->advance; /* the caller puts stage_advance back */
    return PX_OK;
}

/* Frees what chunk's algorithm held (schedule, scratch slots 0 and 2). */
static void chunk_teardown(px_request_t *req, px__stage_t *st)
{
    px__sched_free(&req->sched);
    px__req_tmp_release(req, 0);
    px__req_tmp_release(req, 2);
    req->stage_tag = 0;
    req->count = st->restore_count;
}

static px_status_t stage_advance(px_request_t *req, int *progressed_p)
{
    px__stage_t *st = req->staged;
    px_status_t status;
    int moved;

    do {
        moved = 0;
        if (st->running) {
            int inner_progress = 0;
            status = st->inner(req, &inner_progress);
            if (status != PX_OK && status != PX_INPROGRESS)
                return status;
            if (inner_progress)
                *progressed_p = 1;
            if (status == PX_OK) {
                chunk_teardown(req, st);
                st->running = 0;
                st->ran++;
                moved = 1;
            }
        }
        if (!st->running && st->ran < st->nchunks && st->ran < st->loaded) {
            status = chunk_setup(req, st, st->ran);
            req->advance = stage_advance;
            if (status != PX_OK)
                return status;
            st->running = 1;
            moved = 1;
            continue; /* post its first messages before the copies below */
        }
        /* while chunk `ran` is on the wire: the result before it goes back
         * onto the device, the chunk after it comes off */
        while (st->stored < st->ran) {
            chunk_store(req, st, st->stored++);
            moved = 1;
        }
        if (st->loaded < st->nchunks && st->loaded < st->stored + (uint64_t)st->nbuf &&
            st->loaded <= st->ran + 1) {
            chunk_load(req, st, st->loaded++);
            moved = 1;
        }
        if (moved)
            *progressed_p = 1;
    } while (moved);
    if (st->stored < st->nchunks)
        return PX_INPROGRESS;
    stage_drain(st); /* the last results are in device memory */
    return PX_OK;
}

/* --- entry points ------------------------------------------------------------------ */

/* Common part: the state, the host buffers (one allocation in slot 3, cut in
 * `nbuf` buffers of `buf_elems` elements) and the first chunk copied in. */
static px_status_t stage_begin(px_request_t *req, px__stage_t *st, uint64_t buf_elems)
{
    const px_kernel_ops_t *k = px__dev_ops();
    size_t one;
    char *all;

    st->esz = req->esz;
    st->n = req->comm->size;
    st->restore_count = req->count;
    st->nbuf = st->nchunks < ST_NBUF ? (int)st->nchunks : ST_NBUF;
    one = ((size_t)buf_elems * st->esz + 63) & ~(size_t)63; /* cache-line aligned */
    if (req->dtype == PX_FLOAT16 || req->dtype == PX_BFLOAT16) {
        /* reduced in fp32: the fp32 area, then the half area */
        st->half = req->dtype;
        st->half_off = ((size_t)buf_elems * 4 + 63) & ~(size_t)63;
        one += st->half_off;
        req->dtype = PX_FLOAT32; /* what the chunks' host algorithm reduces */
        req->esz = 4;
    }
    all = px__req_tmp(req, 3, one * (size_t)st->nbuf);
    if (!all) {
        px_error("staged %s: no memory for %d host buffers of %zu bytes", "collective",
                 st->nbuf, one);
        stage_free(st);
        return PX_ERR_NO_MEMORY;
    }
    for (int b = 0; b < st->nbuf; b++)
        st->buf[b] = all + (size_t)b * one;
    req->staged = st;
    req->advance = stage_advance;
    if (!k->mem_copy_async || !k->copy_wait)
        k->synchronize(); /* the kernels that wrote the input are done (async copies
                           * are ordered after them by the backend) */
    chunk_load(req, st, st->loaded++);
    return PX_OK;
}

/* Elements per block slice of a chunk: the staging chunk over n blocks,
 * at least one. */
static uint64_t blocked_pc(const px_request_t *req)
{
    uint64_t pc = (uint64_t)px__dev_chunk() / ((uint64_t)req->comm->size * req->esz);
    return pc ? pc : 1;
}

static px_status_t begin_blocked(px_request_t *req, int what, const void *src, void *dst,
                                 uint64_t blen, uint64_t brem)
{
    px__stage_t *st = calloc(1, sizeof(*st));
    uint64_t maxlen = blen + (brem ? 1 : 0);

    if (!st)
        return PX_ERR_NO_MEMORY;
    st->what = what;
    st->dsrc = src;
    st->ddst = dst;
    st->blen = blen;
    st->brem = brem;
    st->pc = blocked_pc(req);
    st->nchunks = (maxlen + st->pc - 1) / st->pc;
    return stage_begin(req, st,
                       (uint64_t)req->comm->size * (st->pc < maxlen ? st->pc : maxlen));
}

static px_status_t begin_flat(px_request_t *req, int what, px_algo_t algo, const void *src,
                              void *dst, uint64_t count)
{
    px__stage_t *st = calloc(1, sizeof(*st));
    uint64_t pc = (uint64_t)px__dev_chunk() / req->esz;

    if (!st)
        return PX_ERR_NO_MEMORY;
    st->what = what;
    st->algo = algo;
    st->dsrc = src;
    st->ddst = dst;
    st->count = count;
    st->pc = pc ? pc : 1;
    st->nchunks = (count + st->pc - 1) / st->pc;
    return stage_begin(req, st, st->pc < count ? st->pc : count);
}

/* The collectives on device buffers: make `req` (created, nothing posted
 * but its headers) run chunk by chunk through pinned host buffers. The
 * arguments are those of the public call (elements; all-reduce: `algo` the
 * algorithm the host path picks for the whole buffer). Copies the first
 * chunk off the device. PX_ERR_NO_MEMORY; the caller discards req on error. */
static px_status_t stage_allreduce(px_request_t *req, const void *sendbuf, void *recvbuf,
                                   uint64_t count, px_algo_t algo)
{
    const uint64_t n = (uint64_t)req->comm->size;
    if (algo == PX_ALGO_RING)
        return begin_blocked(req, ST_AR_RING, sendbuf, recvbuf, count / n, count % n);
    return begin_flat(req, ST_AR_FLAT, algo, sendbuf, recvbuf, count);
}

static px_status_t stage_reduce_scatter(px_request_t *req, const void *sendbuf, void *recvbuf,
                                        uint64_t recvcount)
{
    return begin_blocked(req, ST_RS, sendbuf, recvbuf, recvcount, 0);
}

static px_status_t stage_allgather(px_request_t *req, const void *sendbuf, void *recvbuf,
                                   uint64_t sendcount)
{
    return begin_blocked(req, ST_AG, sendbuf, recvbuf, sendcount, 0);
}

static px_status_t stage_bcast(px_request_t *req, void *buf, uint64_t count)
{
    return begin_flat(req, ST_BCAST, PX_ALGO_TREE, buf, buf, count);
}

static px_status_t stage_alltoall(px_request_t *req, const void *sendbuf, void *recvbuf,
                                  uint64_t count, px_algo_t algo)
{
    px__stage_t *st = calloc(1, sizeof(*st));
    const int n = req->comm->size;

    if (!st || !(st->a2a = malloc(2 * (size_t)n * sizeof(uint64_t)))) {
        free(st);
        return PX_ERR_NO_MEMORY;
    }
    st->what = ST_A2A;
    st->algo = algo;
    st->dsrc = sendbuf;
    st->ddst = recvbuf;
    st->blen = count;
    st->pc = blocked_pc(req);
    st->nchunks = (count + st->pc - 1) / st->pc;
    /* a chunk's send half, then its receive half */
    return stage_begin(req, st, 2 * (uint64_t)n * (st->pc < count ? st->pc : count));
}

/* All-to-all-v on device buffers: chunk i carries slice i of every send
 * and receive block (see the top of this file), the host algorithm (`algo`:
 * linear or pairwise, as the host path picks) run on each; bit for bit the
 * host path (bytes only). */
static px_status_t stage_alltoallv(px_request_t *req, const void *sendbuf,
                                   const uint64_t *sendcounts, const uint64_t *sdispls,
                                   void *recvbuf, const uint64_t *recvcounts,
                                   const uint64_t *rdispls, px_algo_t algo)
{
    px__stage_t *st = calloc(1, sizeof(*st));
    const int n = req->comm->size;
    uint64_t smax = 0, rmax = 0;

    if (!st || !(st->a2a = malloc(8 * (size_t)n * sizeof(uint64_t)))) {
        free(st);
        return PX_ERR_NO_MEMORY;
    }
    st->what = ST_A2AV;
    st->algo = algo;
    st->dsrc = sendbuf;
    st->ddst = recvbuf;
    for (int q = 0; q < n; q++) {
        st->a2a[q] = sendcounts[q];
        st->a2a[n + q] = sdispls[q];
        st->a2a[2 * n + q] = recvcounts[q];
        st->a2a[3 * n + q] = rdispls[q];
        if (sendcounts[q] > smax)
            smax = sendcounts[q];
        if (recvcounts[q] > rmax)
            rmax = recvcounts[q];
    }
    /* slice i of every block per chunk: as many chunks as our longest
     * block needs (at least one, which may move nothing) */
    st->pc = blocked_pc(req);
    st->nchunks = ((smax > rmax ? smax : rmax) + st->pc - 1) / st->pc;
    if (!st->nchunks)
        st->nchunks = 1;
    st->sext = (uint64_t)n * (smax < st->pc ? smax : st->pc);
    uint64_t rhalf = (uint64_t)n * (rmax < st->pc ? rmax : st->pc);
    return stage_begin(req, st, st->sext + rhalf ? st->sext + rhalf : 1);
}

/* --- point-to-point on device buffers: chunks staged through host buffers ---
 *
 * A device buffer of `bytes` travels as ceil(bytes / chunk) messages of the
 * same tag (UCX matches a sender's messages of one tag in posting order, so
 * the k-th receive posted gets the k-th chunk). Two host buffers of one chunk
 * each (request slots 0 and 1: pinned where the device backend registered a
 * pinned allocator, px_transport_set_pinned_memory) alternate: the sender
 * copies chunk k+1 off the device while chunk k is on the wire; the receiver
 * has chunks k and k+1 posted and copies k onto the device while k+1
 * arrives. Both ends must stage (a device buffer on both sides, as every rank
 * of a job shares one backend): a host receiver of a staged send sees
 * only the first chunk, a short message, which fails the receive. */

static px_status_t p2p_dev_advance(px_request_t *req, int *progressed_p)
{
    px_comm_t *comm = req->comm;
    const px_kernel_ops_t *dev_ops = px__dev_ops();
    const int is_send = req->kind == PX__COLL_SEND;
    px_status_t status;
    int again = 1;

    while (again) {
        again = 0;
        for (int i = 0; i < 2; i++) {
            px__op_t *op = req->ops[i];
            if (op) {
                if (!op->done)
                    continue;
                status = px__op_status(comm, op);
                if (status != PX_OK)
                    return status;
                px__op_reap(comm, op);
                req->ops[i] = NULL;
                if (!is_send) /* the chunk is here: onto the device */
                    dev_ops->mem_copy_from_host(req->p2p_dev + req->p2p_off[i], req->tmp[i],
                                                req->p2p_len[i]);
                req->p2p_done += req->p2p_len[i];
                *progressed_p = 1;
            }
            if (req->p2p_next < req->p2p_total) {
                size_t len = req->p2p_total - req->p2p_next;
                len = len < req->p2p_chunk ? len : req->p2p_chunk;
                req->p2p_off[i] = req->p2p_next;
                req->p2p_len[i] = len;
                req->p2p_next += len;
                if (is_send) {
                    dev_ops->mem_copy_to_host(req->tmp[i], req->p2p_dev + req->p2p_off[i], len);
                    status = px__req_send(req, req->p2p_peer, req->p2p_tag, req->tmp[i], len,
                                          &req->ops[i]);
                } else {
                    status = px__req_recv(req, req->p2p_peer, req->p2p_tag, req->tmp[i], len,
                                          &req->ops[i]);
                }
                if (status != PX_OK)
                    return status;
                *progressed_p = 1;
                again = 1; /* a send may have completed at once */
            }
        }
    }
    return req->p2p_done == req->p2p_total ? PX_OK : PX_INPROGRESS;
}

/* Starts a staged send or receive of a->count bytes: the two host buffers,
 * the device's work on the buffer done (send), the first two chunks
 * posted. */
static px_status_t stage_p2p(px_request_t *req, const px__coll_args_t *a)
{
    const int is_send = a->kind == PX__COLL_SEND;
    size_t chunk = px__dev_chunk() < a->count ? px__dev_chunk() : (size_t)a->count;
    px_status_t status;
    int progressed = 0;

    if (!px__req_tmp(req, 0, chunk) || !px__req_tmp(req, 1, chunk))
        return PX_ERR_NO_MEMORY;
    if (is_send)
        px__dev_ops()->synchronize(); /* the kernels that wrote buf are done */
    req->p2p_dev = is_send ? (char *)a->sendbuf : a->recvbuf;
    req->p2p_peer = a->peer;
    req->p2p_tag = a->p2p_tag;
    req->p2p_total = (size_t)a->count;
    req->p2p_chunk = chunk;
    req->advance = p2p_dev_advance;
    status = p2p_dev_advance(req, &progressed); /* post the first two chunks */
    return status == PX_INPROGRESS ? PX_OK : status;
}

/* --- the path's entry in the table (px_path.h) ----------------------------------- */

/* Every collective with a staged form whose buffer (either one) is device
 * memory and that no path before this one took (CUDA IPC: ranks on
 * several nodes, IPC off, fp16/bf16 reductions, one rank); a send or
 * receive of a device buffer where UCX does not move CUDA memory itself. */
static int path_wants(px_comm_t *comm, const px__coll_args_t *a)
{
    switch (a->kind) {
    case PX__COLL_SEND:
    case PX__COLL_RECV:
        return a->count && px__on_device(a->sendbuf, a->recvbuf) &&
               !px_transport_cuda_memory(comm->tr);
    case PX__COLL_ALLREDUCE:
    case PX__COLL_REDUCE_SCATTER:
    case PX__COLL_ALLGATHER:
    case PX__COLL_BCAST:
    case PX__COLL_ALLTOALL:
    case PX__COLL_ALLTOALLV:
        return px__on_device(a->sendbuf, a->recvbuf);
    default:
        return 0;
    }
}

/* req->algo as the host path reports it: all-reduce and all-to-all(-v)
 * the algorithm chosen (whose order the chunks follow), reduce-scatter and
 * all-gather the ring, broadcast the tree. */
static px_status_t path_start(px_request_t *req, const px__coll_args_t *a)
{
    px_status_t status;

    switch (a->kind) {
    case PX__COLL_ALLREDUCE:
        req->algo = a->algo;
        return stage_allreduce(req, a->sendbuf, a->recvbuf, a->count, a->algo);
    case PX__COLL_REDUCE_SCATTER:
        status = stage_reduce_scatter(req, a->sendbuf, a->recvbuf, a->count);
        break;
    case PX__COLL_ALLGATHER:
        status = stage_allgather(req, a->sendbuf, a->recvbuf, a->count);
        break;
    case PX__COLL_BCAST:
        req->algo = PX_ALGO_TREE;
        return stage_bcast(req, a->recvbuf, a->count);
    case PX__COLL_ALLTOALL:
        req->algo = a->algo;
        return a->count ? stage_alltoall(req, a->sendbuf, a->recvbuf, a->count, a->algo) : PX_OK;
    case PX__COLL_SEND:
    case PX__COLL_RECV:
        return stage_p2p(req, a);
    default: /* all-to-all-v */
        req->algo = a->algo;
        return stage_alltoallv(req, a->sendbuf, a->sendcounts, a->sdispls, a->recvbuf,
                               a->recvcounts, a->rdispls, a->algo);
    }
    if (status == PX_OK)
        req->algo = PX_ALGO_RING;
    return status;
}

static void path_req_end(px_request_t *req, px_status_t status)
{
    (void)status;
    stage_drain(req->staged); /* no staging copy still uses the buffers */
}

static int path_req_free(px_request_t *req)
{
    stage_free(req->staged);
    return 0;
}

const px__path_t px__path_stage = {
    .name = "stage",
    .wants = path_wants,
    .start = path_start,
    .req_end = path_req_end,
    .req_free = path_req_free,
};
