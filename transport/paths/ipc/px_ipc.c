/* px_ipc.c: collectives on device buffers between the ranks of one node,
 * through scratch rings in device memory that every peer maps (px_ipc.h;
 * CUDA IPC as NCCL's P2P transport uses it: each GPU's buffers opened by
 * its node's other processes with cudaIpcOpenMemHandle, data moved by
 * device-to-device copies, reductions by device kernels).
 *
 * Per communicator (setup at first use, px__ipc_ready): each rank owns a
 * ring of PX__IPC_NSLOT slots of `slot` bytes of device memory; every rank
 * maps every peer's ring. A collective runs chunk by chunk; chunk i uses
 * slot i % 2 of every rank. Chunks are cut as the staged path cuts them
 * (px_stage.c): for the blocked layouts (all-reduce, reduce-scatter,
 * all-gather, all-to-all) chunk i is slice i of each of the n blocks, laid
 * out block after block in the slot; broadcast's chunks are contiguous.
 * A chunk is PX_IPC_CHUNK_BYTES as agreed at setup (the smallest any rank
 * asked for; 0: the staging chunk of the collective's start) and at most a
 * slot.
 *
 *   all-reduce / reduce-scatter, chunk i: copy our slices of every block
 *     into our slot; doorbell READY; rank r reduces block r's slice reading
 *     every rank's slot in the ring's order (below) into its output; the
 *     all-reduce copies that result into its own slot, rings DONE, and
 *     every rank copies block q's result from rank q's slot. Under the
 *     event protocol an all-reduce of one small chunk is one-shot: every
 *     rank reduces every block itself, in each block's order, with no
 *     DONE round.
 *   all-gather / all-to-all: copy in, READY, every rank copies what it
 *     needs straight from the peers' slots into its output.
 *   broadcast: the root copies in and rings READY to every rank; each
 *     copies out and answers ACK to the root.
 *   the last chunk of every collective ends with a FIN round, so that when
 *     a collective completes nobody reads anyone's ring any more.
 * A doorbell is an 8-byte UCX message per peer (tag kind STAGE, chunk
 * index, unit = the round). What a rank issued on the device before its
 * doorbell must be done before what its receivers issue after theirs; two
 * protocols make it so (PX_IPC_PROTOCOL, agreed at setup: event only where
 * every rank asks for it and its backend has the event ops):
 *   sync (the default): the host `synchronize`s before sending, so the
 *     device ops that wrote the slot, or read the peers', are finished;
 *   event: each rank owns an interprocess event (CUDA:
 *     cudaEventInterprocess, its handle exchanged with the rings' at
 *     setup), records it on its stream before sending, and after a
 *     doorbell arrives its stream waits on the sender's event
 *     (cudaStreamWaitEvent: on the device; the host never waits inside a
 *     collective, only at its end, px__ipc_req_end). A wait may see a
 *     later record of the sender than the one before its doorbell; that
 *     record only orders more work before ours (the sender cannot have
 *     issued anything after it that waits for what we issue now). The
 *     ring-order sums of a chunk are one reduce_multi kernel (every
 *     rank's slot, AVG's division and the all-reduce's copy into our slot
 *     in one pass), the same bits as the chain of reduce steps.
 * Slot reuse: a rank
 * writes slot i % 2 again at chunk i + 2 only after every peer's READY of
 * chunk i + 1, which each peer sends after finishing chunk i. Concurrent
 * device collectives on one communicator share the rings, so they run one
 * at a time, in start order (the same on every rank).
 *
 * Sum order: the ring (coll/ring.c) with owner shift o reduces block b
 * starting at rank b - o + 1 and combining rank q's input as x_q OP acc
 * around the ring; the reducer of block b here does exactly that
 * (acc = x_{b-o+1}; acc = x_q OP acc for the next n - 1 ranks; AVG divides
 * once), so every element is bit for bit the staged path's and the UCX
 * host ring's. An all-reduce the host path runs by recursive doubling or
 * Rabenseifner (coll/rd.c: both fold ranks 2v and 2v+1, then combine
 * virtual ranks v and v ^ 2^k at step k) is summed as that balanced tree
 * instead (tree_sum), its partial sums in a work slot after the ring's
 * slots, each pair with the lower ranks' operand first as there (so even
 * MIN/MAX of signed zeros match). The order is fixed by (n, algo,
 * element), so every rank gets the same bits, run after run.
 *
 * Failure: the request's deadline, dead peers, abort and mismatch work as
 * for every request (px_request.c): the doorbells are its messages. A
 * failed or cancelled IPC collective turns the path off for the
 * communicator (px__ipc_req_end).
 *
 * Runs on the thread using the communicator. */
#include "px_ipc.h"

#include <stdlib.h>
#include <string.h>

#include "px_env.h"
#include "px_log.h"
#include "px_path.h"

struct px__ipc {
    const px_kernel_ops_t *k; /* the backend that allocated and mapped */
    char *mine;               /* this rank's ring (mem_alloc), NULL when off */
    size_t mine_bytes;        /* its size (counted in scratch_now) */
    char **ring;              /* [n]: every rank's ring as mapped here (ring[rank] = mine) */
    px_ipc_handle_t *handles; /* [n] */
    size_t slot;              /* bytes per slot (the smallest any rank offered) */
    int event;                /* the event protocol (every rank asked for it and has the ops) */
    size_t chunk;             /* PX_IPC_CHUNK_BYTES as agreed (the smallest asked; 0: the
                               * staging chunk at each collective) */
    void **ev;                /* [n]: every rank's event as opened here (ev[rank] ours) */
};

enum { IPC_AR = 1, IPC_RS, IPC_AG, IPC_BCAST, IPC_A2A };

/* The largest one-shot all-reduce (build_reduce), bytes: where the saved
 * doorbell round outweighs reading every block n times (PyTorch's
 * intra-node custom all-reduce switches from one-shot at a few hundred
 * KiB; the figure awaits a measurement on a GPU). */
#define PX__IPC_ONESHOT_BYTES ((uint64_t)256 << 10)
enum { U_READY = 0, U_DONE = 1, U_FIN = 2 };

struct px__ipcreq {
    int what;             /* IPC_* */
    int o;                /* the ring's owner shift (all-reduce 1, reduce-scatter 0) */
    int tree;             /* all-reduce in recursive doubling's order (not the ring's) */
    const char *src;      /* device input (broadcast: the buffer) */
    char *dst;            /* device output (broadcast: the buffer) */
    size_t esz;
    uint64_t blen, brem;  /* blocked: block b has blen + (b < brem) elements */
    uint64_t count;       /* broadcast: elements */
    uint64_t pc;          /* elements per chunk (blocked: per block slice) */
    uint64_t nchunks, next;
    int running;          /* chunk next - 1's schedule is in req->sched */
    int turn;             /* this request holds the rings */
    int finished;         /* its last chunk is done */
    uint64_t *rbuf;       /* [n] doorbell receive words */
    const void **srcs;    /* [n][n + 1] block b's reduce_multi sources and copy */
};

static const uint64_t bell_word = 0x7078697063626c6cull; /* "pxipcbll" */

/* The device bytes every communicator's ring holds now, and the most ever
 * (px_transport_device_scratch); atomics: communicators may live on
 * different threads. */
static uint64_t scratch_now, scratch_peak;

static void scratch_add(int64_t bytes)
{
    uint64_t now = __atomic_add_fetch(&scratch_now, (uint64_t)bytes, __ATOMIC_RELAXED);
    uint64_t peak = __atomic_load_n(&scratch_peak, __ATOMIC_RELAXED);
    while (now > peak &&
           !__atomic_compare_exchange_n(&scratch_peak, &peak, now, 1, __ATOMIC_RELAXED,
                                        __ATOMIC_RELAXED))
        ;
}

void px_transport_device_scratch(uint64_t *current_p, uint64_t *peak_p)
{
    *current_p = __atomic_load_n(&scratch_now, __ATOMIC_RELAXED);
    *peak_p = __atomic_load_n(&scratch_peak, __ATOMIC_RELAXED);
}

/* --- setup ------------------------------------------------------------------- */

static int has_ipc_ops(const px_kernel_ops_t *k)
{
    return k && k->reduce && k->reduce_avg_finish && k->ipc_handle && k->ipc_open &&
           k->ipc_close && k->mem_alloc && k->mem_free && k->mem_copy && k->synchronize;
}

static int has_event_ops(const px_kernel_ops_t *k)
{
    return k->reduce_multi && k->event_ipc_create && k->event_ipc_open && k->event_destroy &&
           k->event_record && k->stream_wait_event;
}

/* Whether this rank asks for the event protocol: PX_IPC_PROTOCOL event or
 * sync (the default); another value is logged and taken as sync. */
static int want_events(void)
{
    const char *p = px_env_str("PX_IPC_PROTOCOL");
    if (!p || !*p || !strcmp(p, "sync"))
        return 0;
    if (!strcmp(p, "event"))
        return 1;
    px_error("PX_IPC_PROTOCOL=%s: not event or sync; IPC collectives use sync", p);
    return 0;
}

/* One rank's offer in the setup all-gather. */
typedef struct {
    int32_t ok;
    int32_t event; /* asks for the event protocol and created its event */
    uint64_t slot;
    uint64_t chunk; /* PX_IPC_CHUNK_BYTES (0: the staging chunk) */
    px_ipc_handle_t handle;
    px_ipc_handle_t ev_handle;
} offer_t;

static void ipc_free(px_comm_t *comm)
{
    struct px__ipc *ipc = comm->ipc;
    if (!ipc)
        return;
    if (ipc->ring)
        for (int q = 0; q < comm->size; q++)
            if (q != comm->rank && ipc->ring[q])
                ipc->k->ipc_close(&ipc->handles[q]);
    if (ipc->mine)
        ipc->k->synchronize(); /* nothing of ours waits on an event or uses the ring */
    if (ipc->ev) /* (events exist only where the backend has the ops) */
        for (int q = 0; q < comm->size; q++)
            if (ipc->ev[q])
                ipc->k->event_destroy(ipc->ev[q]);
    if (ipc->mine) {
        ipc->k->mem_free(ipc->mine);
        scratch_add(-(int64_t)ipc->mine_bytes);
    }
    free(ipc->ring);
    free(ipc->handles);
    free(ipc->ev);
    free(ipc);
    comm->ipc = NULL;
}

void px__ipc_destroy(px_comm_t *comm)
{
    if (comm)
        ipc_free(comm);
}

int px__ipc_ready(px_comm_t *comm, int timeout_ms)
{
    const px_kernel_ops_t *k = px__dev_ops();
    const int n = comm->size, r = comm->rank;
    struct px__ipc *ipc;
    offer_t me = {0}, *all;
    int32_t opened, agreed = 0;
    long slot_env;
    px_coll_opts_t o = {PX_ALGO_AUTO, timeout_ms};

    if (comm->ipc_state)
        return comm->ipc_state > 0;
    comm->ipc_state = -1;
    all = calloc((size_t)n, sizeof(*all));
    ipc = calloc(1, sizeof(*ipc));
    if (ipc) {
        ipc->ring = calloc((size_t)n, sizeof(*ipc->ring));
        ipc->handles = calloc((size_t)n, sizeof(*ipc->handles));
        ipc->ev = calloc((size_t)n, sizeof(*ipc->ev));
    }
    comm->ipc = ipc;
    slot_env = px_env_int("PX_IPC_SLOT_BYTES");
    me.slot = slot_env < 4096 ? 4096 : ((uint64_t)slot_env + 255) & ~(uint64_t)255;
    me.chunk = px_env_int("PX_IPC_CHUNK_BYTES") > 0 ? (uint64_t)px_env_int("PX_IPC_CHUNK_BYTES")
                                                    : 0;
    me.ok = all && ipc && ipc->ring && ipc->handles && ipc->ev && px_env_int("PX_IPC") != 0 &&
            has_ipc_ops(k) && px__comm_one_node(comm);
    if (me.ok) {
        ipc->k = k;
        /* the slots, then a work slot for the reducer's partial sums */
        ipc->mine = k->mem_alloc((PX__IPC_NSLOT + 1) * (size_t)me.slot);
        if (ipc->mine) {
            ipc->mine_bytes = (PX__IPC_NSLOT + 1) * (size_t)me.slot;
            scratch_add((int64_t)ipc->mine_bytes);
        }
        me.ok = ipc->mine && k->ipc_handle(ipc->mine, &me.handle) == PX_OK;
        me.event = me.ok && want_events() && has_event_ops(k) &&
                   k->event_ipc_create(&ipc->ev[r], &me.ev_handle) == PX_OK;
    }
    if (!all) {
        px_error("comm %u rank %d: no memory for the IPC setup", comm->id, r);
        ipc_free(comm);
        return 0;
    }
    if (px_allgather(comm, &me, all, sizeof(me), PX_UINT8, &o) != PX_OK)
        goto out;
    opened = 1;
    ipc->event = 1;
    for (int q = 0; q < n; q++) {
        if (!all[q].ok)
            opened = 0;
        if (!all[q].event)
            ipc->event = 0;
    }
    if (!ipc->event && ipc->ev[r]) { /* some rank syncs: all do */
        k->event_destroy(ipc->ev[r]);
        ipc->ev[r] = NULL;
    }
    if (opened) {
        ipc->slot = (size_t)all[0].slot;
        ipc->chunk = (size_t)all[0].chunk;
        for (int q = 0; q < n; q++) {
            if ((size_t)all[q].slot < ipc->slot)
                ipc->slot = (size_t)all[q].slot;
            if ((size_t)all[q].chunk < ipc->chunk) /* a rank without one: the staging chunk */
                ipc->chunk = (size_t)all[q].chunk;
            ipc->handles[q] = all[q].handle;
        }
        ipc->ring[r] = ipc->mine;
        for (int q = 0; opened && q < n; q++) {
            void *p = NULL;
            if (q == r)
                continue;
            if (k->ipc_open(&all[q].handle, &p) != PX_OK) {
                px_warn("comm %u rank %d: cannot map rank %d's device ring: device buffers "
                        "are staged through host memory", comm->id, r, q);
                opened = 0;
                break;
            }
            ipc->ring[q] = p;
            if (ipc->event && k->event_ipc_open(&all[q].ev_handle, &ipc->ev[q]) != PX_OK) {
                px_warn("comm %u rank %d: cannot open rank %d's device event: device buffers "
                        "are staged through host memory", comm->id, r, q);
                opened = 0;
                break;
            }
        }
    }
    if (px_allreduce(comm, &opened, &agreed, 1, PX_INT32, PX_MIN, timeout_ms) != PX_OK)
        agreed = 0;
out:
    free(all);
    if (agreed) {
        comm->ipc_state = 1;
        px_debug("comm %u: device buffers go through IPC (%d ranks, slot %zu bytes, %s "
                 "protocol)", comm->id, n, ipc->slot, ipc->event ? "event" : "sync");
        return 1;
    }
    ipc_free(comm);
    return 0;
}

/* --- chunk geometry (px_stage.c's) ------------------------------------------------ */

static uint64_t blk_len(const struct px__ipcreq *ir, int b)
{
    return ir->blen + ((uint64_t)b < ir->brem ? 1 : 0);
}

static uint64_t blk_off(const struct px__ipcreq *ir, int b)
{
    return (uint64_t)b * ir->blen + ((uint64_t)b < ir->brem ? (uint64_t)b : ir->brem);
}

/* Elements of block b's slice in chunk i. */
static uint64_t slice_len(const struct px__ipcreq *ir, int b, uint64_t i)
{
    uint64_t len = blk_len(ir, b), start = i * ir->pc;
    if (start >= len)
        return 0;
    return len - start < ir->pc ? len - start : ir->pc;
}

/* Byte offset of block b's slice in a slot (slices block after block). */
static size_t slice_at(const struct px__ipcreq *ir, int b, uint64_t i)
{
    uint64_t off = 0;
    for (int c = 0; c < b; c++)
        off += slice_len(ir, c, i);
    return (size_t)off * ir->esz;
}

/* Rank q's slot for chunk i, as mapped here. */
static char *slot_of(const px_request_t *req, int q, uint64_t i)
{
    return req->comm->ipc->ring[q] + (size_t)(i % PX__IPC_NSLOT) * req->comm->ipc->slot;
}

/* --- one chunk's schedule ------------------------------------------------------------ */

#define ADDS(kind, peer, unit, dst, src, n, swap)                                            \
    do {                                                                                      \
        status = px__sched_add(&req->sched, (kind), (peer), (unit), (dst), (src), (n), (swap)); \
        if (status != PX_OK)                                                                  \
            return status;                                                                    \
    } while (0)
#define ADD(kind, peer, unit, dst, src, n) ADDS(kind, peer, unit, dst, src, n, 0)

/* A doorbell round: send one word to `to` (-1: every other rank, -2: none,
 * else that rank), receive one from `from` (same coding), wait for all of
 * them. Before the sends, the device work issued so far is made visible:
 * sync protocol, the host synchronizes; event protocol, our event is
 * recorded on the stream, and after the receives the stream waits (on the
 * device) for every sender's event, so what the sender issued before its
 * bell runs before what we issue after ours. Either way everything issued
 * before a bell, on any rank, happens before everything its receivers
 * issue after it. */
static px_status_t bell(px_request_t *req, unsigned unit, int to, int from)
{
    const int n = req->comm->size, r = req->comm->rank;
    struct px__ipcreq *ir = req->ipc;
    px_status_t status;

    const struct px__ipc *ipc = req->comm->ipc;

    if (ipc->event)
        ADD(PX__ACT_DEV_RECORD, 0, 0, ipc->ev[r], NULL, 0);
    else
        ADD(PX__ACT_DEV_SYNC, 0, 0, NULL, NULL, 0);
    for (int q = 0; q < n; q++)
        if (q != r && (to == -1 || to == q))
            ADD(PX__ACT_SEND, q, unit, NULL, &bell_word, sizeof(bell_word));
    for (int q = 0; q < n; q++)
        if (q != r && (from == -1 || from == q))
            ADD(PX__ACT_RECV, q, unit, &ir->rbuf[q], NULL, sizeof(bell_word));
    ADD(PX__ACT_WAIT, 0, 0, NULL, NULL, 0);
    if (ipc->event)
        for (int q = 0; q < n; q++)
            if (q != r && (from == -1 || from == q))
                ADD(PX__ACT_DEV_WAITEV, 0, 0, NULL, ipc->ev[q], 0);
    return PX_OK;
}

/* Rank q's input slice at `at` of chunk i, as the tree below takes it. */
static const char *in_of(const px_request_t *req, int q, uint64_t i, size_t at)
{
    return slot_of(req, q, i) + at;
}

/* Recursive doubling's (and Rabenseifner's) sum of one slice (coll/rd.c):
 * with p = 2^floor(log2 n) and rem = n - p, virtual rank v < rem holds
 * x_{2v} OP x_{2v+1} (the fold), v >= rem holds x_{v+rem}, and the p
 * values combine as a balanced binary tree over v (step k pairs v with
 * v ^ 2^k). Into `dst` for virtual ranks [lo, hi); `work` holds one
 * partial sum per tree level below (len elements each). */
static px_status_t tree_sum(px_request_t *req, uint64_t i, size_t at, int lo, int hi, int rem,
                            char *dst, char *work, uint64_t len)
{
    const size_t bytes = (size_t)len * req->esz;
    px_status_t status;

    if (hi - lo == 1) {
        if (lo < rem) { /* the fold: x_{2v} OP x_{2v+1}, the lower rank's first */
            ADD(PX__ACT_DEV_COPY, 0, 0, dst, in_of(req, 2 * lo + 1, i, at), bytes);
            ADD(PX__ACT_DEV_REDUCE, 0, 0, dst, in_of(req, 2 * lo, i, at), len);
        } else {
            ADD(PX__ACT_DEV_COPY, 0, 0, dst, in_of(req, lo + rem, i, at), bytes);
        }
        return PX_OK;
    }
    status = tree_sum(req, i, at, lo, (lo + hi) / 2, rem, dst, work + bytes, len);
    if (status == PX_OK)
        status = tree_sum(req, i, at, (lo + hi) / 2, hi, rem, work, work + bytes, len);
    if (status == PX_OK) /* lower half OP upper half, as every step of coll/rd.c */
        ADDS(PX__ACT_DEV_REDUCE, 0, 0, dst, work, len, 1);
    return status;
}

/* Block b's slice of chunk i summed from every rank's slot into `acc`, in
 * the order of the host algorithm (the ring's from rank b - o + 1 around,
 * or recursive doubling's tree), AVG divided; `copy` (NULL: none) gets the
 * result too. */
static px_status_t reduce_block(px_request_t *req, struct px__ipcreq *ir, int b, uint64_t i,
                                char *acc, char *copy, uint64_t len)
{
    const int n = req->comm->size;
    const size_t at = slice_at(ir, b, i), esz = ir->esz;
    const int multi = !ir->tree && req->comm->ipc->event && n <= PX_REDUCE_MULTI_MAX;
    int q = ((b - ir->o + 1) % n + n) % n;
    px_status_t status;

    if (ir->tree) {
        int p = 1;
        while (p * 2 <= n)
            p *= 2;
        status = tree_sum(req, i, at, 0, p, n - p, acc,
                          req->comm->ipc->ring[req->comm->rank] +
                              PX__IPC_NSLOT * req->comm->ipc->slot,
                          len);
        if (status != PX_OK)
            return status;
    } else if (multi) {
        /* one kernel: every rank's slice in the ring's order, AVG's
         * division and the copy (block b's own sources: a schedule may hold
         * one such kernel per block) */
        const void **srcs = ir->srcs + (size_t)b * (size_t)(n + 1);
        for (int k = 0; k < n; k++, q = (q + 1) % n)
            srcs[k] = slot_of(req, q, i) + at;
        srcs[n] = copy;
        ADD(PX__ACT_DEV_REDUCE_N, n, 0, acc, srcs, len);
        return PX_OK;
    } else {
        ADD(PX__ACT_DEV_COPY, 0, 0, acc, slot_of(req, q, i) + at, len * esz);
        for (int k = 1; k < n; k++) {
            q = (q + 1) % n;
            ADD(PX__ACT_DEV_REDUCE, 0, 0, acc, slot_of(req, q, i) + at, len);
        }
    }
    if (req->op == PX_AVG)
        ADD(PX__ACT_DEV_AVG, 0, 0, acc, NULL, len);
    if (copy)
        ADD(PX__ACT_DEV_COPY, 0, 0, copy, acc, len * esz);
    return PX_OK;
}

/* Chunk i of a reduction (all-reduce, reduce-scatter). An all-reduce of one
 * chunk of at most PX__IPC_ONESHOT_BYTES under the event protocol is
 * one-shot: every rank sums every block itself from the peers' slots (n
 * times the reads, one doorbell round fewer: what bounds a small one). */
static px_status_t build_reduce(px_request_t *req, struct px__ipcreq *ir, uint64_t i)
{
    const int n = req->comm->size, r = req->comm->rank;
    const size_t esz = ir->esz;
    char *mine = slot_of(req, r, i);
    const int oneshot = ir->what == IPC_AR && req->comm->ipc->event && ir->nchunks == 1 &&
                        (ir->blen * (uint64_t)n + ir->brem) * esz <= PX__IPC_ONESHOT_BYTES;
    px_status_t status;
    uint64_t len;

    for (int b = 0; b < n; b++)
        if ((len = slice_len(ir, b, i)))
            ADD(PX__ACT_DEV_COPY, 0, 0, mine + slice_at(ir, b, i),
                ir->src + (blk_off(ir, b) + i * ir->pc) * esz, len * esz);
    status = bell(req, U_READY, -1, -1);
    if (status != PX_OK)
        return status;
    if (oneshot) {
        for (int b = 0; b < n && status == PX_OK; b++)
            if ((len = slice_len(ir, b, i)))
                status = reduce_block(req, ir, b, i, ir->dst + blk_off(ir, b) * esz, NULL, len);
        return status;
    }
    if ((len = slice_len(ir, r, i))) {
        char *acc = ir->what == IPC_AR ? ir->dst + (blk_off(ir, r) + i * ir->pc) * esz
                                       : ir->dst + i * ir->pc * esz;
        status = reduce_block(req, ir, r, i, acc,
                              ir->what == IPC_AR ? mine + slice_at(ir, r, i) : NULL, len);
        if (status != PX_OK)
            return status;
    }
    if (ir->what != IPC_AR)
        return PX_OK;
    status = bell(req, U_DONE, -1, -1);
    if (status != PX_OK)
        return status;
    for (int q = 0; q < n; q++)
        if (q != r && (len = slice_len(ir, q, i)))
            ADD(PX__ACT_DEV_COPY, 0, 0, ir->dst + (blk_off(ir, q) + i * ir->pc) * esz,
                slot_of(req, q, i) + slice_at(ir, q, i), len * esz);
    return PX_OK;
}

/* Chunk i of an all-gather or all-to-all. */
static px_status_t build_move(px_request_t *req, struct px__ipcreq *ir, uint64_t i)
{
    const int n = req->comm->size, r = req->comm->rank;
    const size_t esz = ir->esz;
    char *mine = slot_of(req, r, i);
    px_status_t status;
    uint64_t len;

    if (ir->what == IPC_AG) {
        if ((len = slice_len(ir, r, i)))
            ADD(PX__ACT_DEV_COPY, 0, 0, mine, ir->src + i * ir->pc * esz, len * esz);
    } else {
        for (int b = 0; b < n; b++)
            if ((len = slice_len(ir, b, i)))
                ADD(PX__ACT_DEV_COPY, 0, 0, mine + slice_at(ir, b, i),
                    ir->src + (blk_off(ir, b) + i * ir->pc) * esz, len * esz);
    }
    status = bell(req, U_READY, -1, -1);
    if (status != PX_OK)
        return status;
    for (int q = 0; q < n; q++) {
        char *out = ir->dst + (blk_off(ir, q) + i * ir->pc) * esz;
        if (!(len = slice_len(ir, q, i)))
            continue;
        if (ir->what == IPC_A2A) /* block r of rank q's send buffer is ours */
            ADD(PX__ACT_DEV_COPY, 0, 0, out, slot_of(req, q, i) + slice_at(ir, r, i), len * esz);
        else if (q != r)
            ADD(PX__ACT_DEV_COPY, 0, 0, out, slot_of(req, q, i), len * esz);
        else if (out != ir->src + i * ir->pc * esz) /* ours, unless in place */
            ADD(PX__ACT_DEV_COPY, 0, 0, out, ir->src + i * ir->pc * esz, len * esz);
    }
    return PX_OK;
}

/* Chunk i of a broadcast: the root's slot to every rank, one ACK back. */
static px_status_t build_bcast(px_request_t *req, struct px__ipcreq *ir, uint64_t i)
{
    const int r = req->comm->rank, root = req->root;
    const size_t esz = ir->esz;
    uint64_t start = i * ir->pc, len = ir->count - start < ir->pc ? ir->count - start : ir->pc;
    char *at = ir->dst + start * esz;
    px_status_t status;

    if (r == root) {
        ADD(PX__ACT_DEV_COPY, 0, 0, slot_of(req, root, i), at, len * esz);
        status = bell(req, U_READY, -1, -2);
        if (status == PX_OK)
            status = bell(req, U_DONE, -2, -1);
        return status;
    }
    status = bell(req, U_READY, -2, root);
    if (status != PX_OK)
        return status;
    ADD(PX__ACT_DEV_COPY, 0, 0, at, slot_of(req, root, i), len * esz);
    return bell(req, U_DONE, root, -2);
}

/* --- progress ------------------------------------------------------------------------- */

/* Whether `req` is the oldest unfinished IPC collective of its
 * communicator (the one that may use the rings now). */
static int my_turn(const px_request_t *req)
{
    for (const px_request_t *o = req->comm->reqs; o; o = o->next)
        if (o->ipc && !o->ipc->finished && o->status == PX_INPROGRESS)
            return o == req;
    return 1;
}

static px_status_t ipc_advance(px_request_t *req, int *progressed_p)
{
    struct px__ipcreq *ir = req->ipc;
    px_status_t status;

    if (ir->finished)
        return PX_OK;
    if (!ir->turn) {
        if (!my_turn(req))
            return PX_INPROGRESS;
        ir->turn = 1;
    }
    for (;;) {
        if (!ir->running) {
            uint64_t i = ir->next;
            req->stage_tag = 1;
            req->stage_chunk_idx = i;
            status = ir->what == IPC_AR || ir->what == IPC_RS ? build_reduce(req, ir, i)
                   : ir->what == IPC_BCAST                    ? build_bcast(req, ir, i)
                                                              : build_move(req, ir, i);
            if (status == PX_OK && i + 1 == ir->nchunks && ir->what != IPC_BCAST)
                status = bell(req, U_FIN, -1, -1); /* nobody reads our ring after this */
            if (status != PX_OK)
                return status;
            ir->running = 1;
            ir->next++;
        }
        status = px__sched_advance(req, progressed_p);
        if (status != PX_OK)
            return status;
        px__sched_free(&req->sched);
        ir->running = 0;
        *progressed_p = 1;
        if (ir->next == ir->nchunks) {
            ir->finished = 1;
            req->stage_tag = 0;
            return PX_OK;
        }
    }
}

/* --- entry points ---------------------------------------------------------------------- */

static px_status_t begin(px_request_t *req, int what, const void *src, void *dst,
                         uint64_t blen, uint64_t brem, uint64_t count)
{
    const int n = req->comm->size;
    const size_t slot = req->comm->ipc->slot;
    size_t want = req->comm->ipc->chunk ? req->comm->ipc->chunk : px__dev_chunk();
    size_t chunk = want < slot ? want : slot;
    struct px__ipcreq *ir = calloc(1, sizeof(*ir));

    if (!ir || !(ir->rbuf = calloc((size_t)n, sizeof(uint64_t))) ||
        !(ir->srcs = calloc((size_t)n * ((size_t)n + 1), sizeof(*ir->srcs)))) {
        if (ir)
            free(ir->rbuf);
        free(ir);
        return PX_ERR_NO_MEMORY;
    }
    ir->what = what;
    ir->o = what == IPC_AR ? 1 : 0;
    ir->src = src;
    ir->dst = dst;
    ir->esz = req->esz;
    ir->blen = blen;
    ir->brem = brem;
    ir->count = count;
    if (what == IPC_BCAST) {
        ir->pc = chunk / ir->esz ? chunk / ir->esz : 1;
        ir->nchunks = (count + ir->pc - 1) / ir->pc;
    } else {
        /* n slices of at least one element each in a slot (the slot is
         * 4 KiB at least; one element per block fits below 512 ranks of
         * 8-byte elements) */
        uint64_t maxlen = blen + (brem ? 1 : 0);
        ir->pc = chunk / ((size_t)n * ir->esz) ? chunk / ((size_t)n * ir->esz) : 1;
        if ((uint64_t)n * ir->pc * ir->esz > slot) {
            px_error("IPC: %d ranks of %zu-byte elements do not fit a %zu-byte slot", n,
                     ir->esz, slot);
            px__ipc_req_free(ir);
            return PX_ERR_INVALID_ARGUMENT;
        }
        ir->nchunks = (maxlen + ir->pc - 1) / ir->pc;
    }
    req->ipc = ir;
    req->advance = ipc_advance;
    return PX_OK;
}

px_status_t px__ipc_allreduce(px_request_t *req, const void *sendbuf, void *recvbuf,
                              uint64_t count, px_algo_t algo)
{
    const uint64_t n = (uint64_t)req->comm->size;
    px_status_t status = begin(req, IPC_AR, sendbuf, recvbuf, count / n, count % n, 0);
    if (status == PX_OK)
        req->ipc->tree = algo != PX_ALGO_RING;
    return status;
}

px_status_t px__ipc_reduce_scatter(px_request_t *req, const void *sendbuf, void *recvbuf,
                                   uint64_t recvcount)
{
    return begin(req, IPC_RS, sendbuf, recvbuf, recvcount, 0, 0);
}

px_status_t px__ipc_allgather(px_request_t *req, const void *sendbuf, void *recvbuf,
                              uint64_t sendcount)
{
    return begin(req, IPC_AG, sendbuf, recvbuf, sendcount, 0, 0);
}

px_status_t px__ipc_bcast(px_request_t *req, void *buf, uint64_t count)
{
    return begin(req, IPC_BCAST, buf, buf, 0, 0, count);
}

px_status_t px__ipc_alltoall(px_request_t *req, const void *sendbuf, void *recvbuf,
                             uint64_t count)
{
    return begin(req, IPC_A2A, sendbuf, recvbuf, count, 0, 0);
}

void px__ipc_req_end(px_request_t *req, px_status_t status)
{
    struct px__ipcreq *ir = req ? req->ipc : NULL;
    if (!ir)
        return;
    if (ir->turn && req->comm->ipc)
        req->comm->ipc->k->synchronize(); /* no device op of ours still runs */
    ir->finished = 1;
    if (status != PX_OK && req->comm->ipc_state > 0) {
        px_debug("comm %u: IPC off after %s #%u failed (%s)", req->comm->id,
                 px__coll_kind_name(req->kind), req->seq, px_status_str(status));
        req->comm->ipc_state = -1; /* the rings stay mapped until destroy */
    }
}

void px__ipc_req_free(struct px__ipcreq *ir)
{
    if (!ir)
        return;
    free(ir->rbuf);
    free(ir->srcs);
    free(ir);
}

/* --- the path's entry in the table (px_path.h) ----------------------------------- */

/* Device buffers (both, where the collective has two) of all-reduce,
 * reduce-scatter, all-gather, broadcast and all-to-all with elements to
 * move on more than one rank, not an fp16/bf16 reduction, and IPC on for
 * the communicator: px__ipc_ready, whose first call on a communicator is
 * the collective setup (the same arguments on every rank make the same
 * call), with the call's own timeout. */
static int path_wants(px_comm_t *comm, const px__coll_args_t *a)
{
    const void *b = a->kind == PX__COLL_BCAST ? NULL : a->recvbuf;

    if (a->kind != PX__COLL_ALLREDUCE && a->kind != PX__COLL_REDUCE_SCATTER &&
        a->kind != PX__COLL_ALLGATHER && a->kind != PX__COLL_BCAST &&
        a->kind != PX__COLL_ALLTOALL)
        return 0;
    return px__dev_ops() && comm->size > 1 && a->count > 0 &&
           !(px__coll_reduces(a->kind) && px__is_half(a->dtype)) && px__is_device(a->sendbuf) &&
           (!b || px__is_device(b)) &&
           px__ipc_ready(comm, a->opts && a->opts->timeout_ms > 0 ? a->opts->timeout_ms : -1);
}

/* req->algo as the host path reports it: all-reduce and all-to-all the
 * algorithm chosen (whose order the sums follow), reduce-scatter and
 * all-gather the ring, broadcast the tree. */
static px_status_t path_start(px_request_t *req, const px__coll_args_t *a)
{
    px_status_t status;

    switch (a->kind) {
    case PX__COLL_ALLREDUCE:
        req->algo = a->algo;
        return px__ipc_allreduce(req, a->sendbuf, a->recvbuf, a->count, a->algo);
    case PX__COLL_REDUCE_SCATTER:
        status = px__ipc_reduce_scatter(req, a->sendbuf, a->recvbuf, a->count);
        break;
    case PX__COLL_ALLGATHER:
        status = px__ipc_allgather(req, a->sendbuf, a->recvbuf, a->count);
        break;
    case PX__COLL_BCAST:
        req->algo = PX_ALGO_TREE;
        return px__ipc_bcast(req, a->recvbuf, a->count);
    default: /* all-to-all */
        req->algo = a->algo;
        return px__ipc_alltoall(req, a->sendbuf, a->recvbuf, a->count);
    }
    if (status == PX_OK)
        req->algo = PX_ALGO_RING;
    return status;
}

static void path_req_cancel(px_request_t *req)
{
    px__ipc_req_end(req, PX_ERR_ABORTED); /* the device rings' state no longer agrees */
}

static int path_req_free(px_request_t *req)
{
    px__ipc_req_free(req->ipc);
    return 0;
}

const px__path_t px__path_ipc = {
    .name = "ipc",
    .wants = path_wants,
    .start = path_start,
    .req_end = px__ipc_req_end,
    .req_cancel = path_req_cancel,
    .req_free = path_req_free,
    .comm_destroy = px__ipc_destroy,
};
