/* px_verdict.c: which rank died first, when several look dead at once.
 *
 * A rank that fails on a peer's death usually exits soon after. A survivor
 * that learns of the death late (starved of CPU, or stopped) then finds
 * several ranks gone at the same moment: the pidfds of the victim and of the
 * ranks that exited after it are all readable, and UCX reports an endpoint
 * error toward each of them. Nothing in those events orders them, and the
 * lowest rank (or the first endpoint error) would be named: a survivor, not
 * the rank that died.
 *
 * So a rank whose world communicator failed on a peer's death tells every
 * peer it can still reach whom it saw die, once, before it closes its
 * endpoints (px__verdict_tell, at px_comm_destroy): an 8-byte notice { magic,
 * world rank } on the wire-up tag kind with low word 2 (0 is the wire-up, 1
 * the goodbye). Each world communicator keeps one receive posted per peer
 * for it (px__verdict_listen). Before a failure is named
 * (px__check_async), px__verdict_settle takes in the notices that have
 * arrived and, while the rank to be named is one that told us it saw
 * another die, names that other one instead (following the chain), marking
 * it dead if nothing else had. A notice is sent before its sender exits, so
 * it arrives before the sender's exit can be seen (pidfd) or its connection
 * closes (UCX endpoint error, in order on the same stream); evidence that a
 * rank exited is thus never read without its notice being readable too.
 *
 * Limit: a notice queued behind messages the receiver has not taken (a
 * stream backed up toward a stopped or starved rank) may still be queued
 * when its sender gives up (200 ms) and exits; that receiver then names
 * whichever rank it sees dead first, as before. Seen over plain-mode
 * (shared-memory UCX) endpoints toward a stopped rank: about 1 round in 20
 * of test_transport kill_late with PX_SHM=0 named rank 1 (peer mode and
 * the shared-memory path: none in 60).
 *
 * The same channel carries a rank's abort (px_comm_abort_peers, as
 * MPI_Abort / ncclCommAbort): a rank that fails on its own (bad argument,
 * I/O, CUDA, memory, a deadline) sends every peer an abort notice { magic,
 * its rank, its reason } before it closes, and does not wait for their
 * goodbyes. A peer takes notices in while it checks the world
 * (px__verdict_poll, every check_world of px_progress.c, so within one sleep
 * slice of a wait); an abort notice fails the whole world communicator (and
 * so every wait on it and its splits) with PX_ERR_PEER_FAILURE naming the
 * sender and its reason. The notice is sent before the sender exits, so it
 * is taken in before the sender's exit is seen (as above), and the reason,
 * not "its process exited", is what the survivors report.
 *
 * World communicators only (sub-communicators name ranks through the
 * world's records). The thread using the communicator. */
#include "px_transport_int.h"

#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "px_log.h"
#include "px_time.h"

#define NOTICE_MAGIC 0x50585644u /* "PXVD": the sender saw `dead` die first */
#define ABORT_MAGIC 0x50584142u  /* "PXAB": the sender (`dead`) aborts, for `reason` */
#define NOTICE_LOW 2u            /* low tag word: 0 wire-up, 1 goodbye, 2 notice */
#define TELL_MS 200              /* bound of the wait for our notices to leave */

typedef struct {
    uint32_t magic;
    int32_t dead; /* world rank the sender saw die first; the sender itself (abort) */
    char reason[PX__ABORT_REASON_MAX]; /* abort: the sender's error, NUL-terminated */
} notice_t;

struct px__verdict {
    int n;
    void **reqs;      /* [n] posted receive per peer (NULL: none / taken in) */
    notice_t *in;     /* [n] their notices */
    int *named;       /* [n] world rank peer r says died, -1 none yet */
    int aborted;      /* 1 + the rank whose abort notice came first, 0 none */
    notice_t out;     /* ours: lives with v, as long as its sends may */
    int told;         /* we sent ours */
};

px_status_t px__verdict_listen(px_comm_t *w)
{
    struct px__verdict *v;

    if (w->root != w || w->size < 2)
        return PX_OK;
    v = calloc(1, sizeof(*v));
    if (!v)
        return PX_ERR_NO_MEMORY;
    v->n = w->size;
    v->reqs = calloc((size_t)w->size, sizeof(*v->reqs));
    v->in = calloc((size_t)w->size, sizeof(*v->in));
    v->named = malloc((size_t)w->size * sizeof(*v->named));
    if (!v->reqs || !v->in || !v->named) {
        w->verdict = v;
        px__verdict_close(w);
        return PX_ERR_NO_MEMORY;
    }
    w->verdict = v;
    for (int r = 0; r < w->size; r++) {
        ucp_request_param_t param = {.op_attr_mask = UCP_OP_ATTR_FIELD_DATATYPE |
                                                     UCP_OP_ATTR_FLAG_NO_IMM_CMPL,
                                     .datatype = ucp_dt_make_contig(1)};
        void *req;

        v->named[r] = -1;
        if (r == w->rank)
            continue;
        req = ucp_tag_recv_nbx(w->tr->worker, &v->in[r], sizeof(v->in[r]),
                               px__tag(w->id, PX__TAG_KIND_WIREUP, (unsigned)r, NOTICE_LOW),
                               (ucp_tag_t)-1, &param);
        if (UCS_PTR_IS_ERR(req)) {
            px_error("comm %u: posting the failure notice receive from rank %d: %s", w->id, r,
                     ucs_status_string(UCS_PTR_STATUS(req)));
            return PX_ERR_INTERNAL; /* the caller destroys the comm, which closes v */
        }
        v->reqs[r] = req;
    }
    return PX_OK;
}

static void send_to_all(px_comm_t *w, struct px__verdict *v);

/* Rank r's abort notice: r is dead for us, for its own reason (which
 * replaces a "process exited" seen first), and the world fails naming it
 * unless a rank already died before (that one stays the one named). */
static void took_abort(px_comm_t *w, struct px__verdict *v, int r)
{
    px__peer_t *p = &w->peers[r];

    v->in[r].reason[sizeof(v->in[r].reason) - 1] = '\0';
    if (!v->in[r].reason[0])
        snprintf(v->in[r].reason, sizeof(v->in[r].reason), "no reason given");
    if (!p->failed)
        px__peer_dead(w, r, v->in[r].reason);
    else if (w->first_dead == r || w->first_dead < 0)
        p->why = v->in[r].reason; /* lives until px__verdict_close */
    if (w->first_dead < 0 || w->first_dead == r)
        w->first_dead = r;
    if (!v->aborted)
        v->aborted = 1 + r;
    px_debug("comm %u: rank %d aborts: %s", w->id, r, v->in[r].reason);
}

/* Takes in the notices that have completed (no progress). */
static void take_in(px_comm_t *w, struct px__verdict *v)
{
    for (int r = 0; r < v->n; r++) {
        ucs_status_t st;

        if (!v->reqs[r])
            continue;
        st = ucp_request_check_status(v->reqs[r]);
        if (st == UCS_INPROGRESS)
            continue;
        ucp_request_free(v->reqs[r]);
        v->reqs[r] = NULL;
        if (st == UCS_OK && v->in[r].magic == NOTICE_MAGIC && v->in[r].dead >= 0 &&
            v->in[r].dead < w->size && v->in[r].dead != r) {
            v->named[r] = v->in[r].dead;
            px_debug("comm %u: rank %d says rank %d died first", w->id, r, v->named[r]);
        } else if (st == UCS_OK && v->in[r].magic == ABORT_MAGIC && v->in[r].dead == r) {
            took_abort(w, v, r);
        }
    }
}

void px__verdict_settle(px_comm_t *w)
{
    struct px__verdict *v = w->verdict;
    int d = w->first_dead, hops = 0;

    if (!v || d < 0)
        return;
    take_in(w, v);
    if (v->named[d] < 0 && v->reqs[d]) {
        /* its notice (sent before it exited) may be in the worker's queue */
        px__progress_worker(w);
        take_in(w, v);
    }
    while (v->named[d] >= 0 && hops++ < v->n) {
        int next = v->named[d];
        if (next == w->rank)
            break; /* it blames us: we are alive, keep what we saw */
        d = next;
    }
    if (d == w->first_dead)
        return;
    px_debug("comm %u: rank %d exited after it saw rank %d die: naming rank %d", w->id,
             w->first_dead, d, d);
    if (!w->peers[d].failed)
        px__peer_dead(w, d, "named dead by a rank that failed on it");
    w->first_dead = d;
}

void px__verdict_tell(px_comm_t *w)
{
    struct px__verdict *v = w->verdict;

    if (!v || v->told || w->first_dead < 0)
        return;
    v->told = 1;
    v->out.magic = NOTICE_MAGIC;
    v->out.dead = w->first_dead;
    send_to_all(w, v);
}

px_status_t px__verdict_poll(px_comm_t *w)
{
    struct px__verdict *v = w->verdict;
    int d;

    if (!v)
        return PX_OK;
    if (!v->aborted)
        take_in(w, v);
    if (!v->aborted)
        return PX_OK;
    d = w->first_dead; /* the aborting rank, unless another had died before */
    if (d == v->aborted - 1)
        return px__comm_set_error(w, PX_ERR_PEER_FAILURE,
                                  "rank %d: peer failure (it aborted: %s)", d, w->peers[d].why);
    return px__comm_set_error(w, PX_ERR_PEER_FAILURE, "rank %d: peer failure (%s)", d,
                              w->peers[d].why ? w->peers[d].why : "dead");
}

/* Sends `out` to every live peer and waits (bounded, TELL_MS, sleeping on
 * the worker's event fd) until the sends have left. A send still pending
 * at the bound is released to UCX: the forced close that follows completes
 * it, and v->out outlives the endpoints (px__verdict_close runs after
 * them). */
static void send_to_all(px_comm_t *w, struct px__verdict *v)
{
    void **reqs = calloc((size_t)w->size, sizeof(*reqs));
    int64_t end = px_time_mono_ms() + TELL_MS;

    if (!reqs)
        return;
    for (int r = 0; r < w->size; r++) {
        ucp_request_param_t param = {.op_attr_mask = UCP_OP_ATTR_FIELD_DATATYPE,
                                     .datatype = ucp_dt_make_contig(1)};
        void *req;

        if (r == w->rank || w->peers[r].failed || !w->peers[r].ep)
            continue;
        req = ucp_tag_send_nbx(w->peers[r].ep, &v->out, sizeof(v->out),
                               px__tag(w->id, PX__TAG_KIND_WIREUP, (unsigned)w->rank, NOTICE_LOW),
                               &param);
        if (UCS_PTR_IS_PTR(req))
            reqs[r] = req;
    }
    for (int r = 0; r < w->size; r++) {
        while (reqs[r] && ucp_request_check_status(reqs[r]) == UCS_INPROGRESS &&
               px_time_mono_ms() < end) {
            px__progress_worker(w);
            if (ucp_worker_arm(w->tr->worker) == UCS_OK) { /* sleep, do not spin */
                struct pollfd pfd = {.fd = w->tr->efd, .events = POLLIN};
                poll(&pfd, 1, 5);
            }
        }
        if (reqs[r])
            ucp_request_free(reqs[r]);
    }
    free(reqs);
}

int px__verdict_abort(px_comm_t *w, const char *reason)
{
    struct px__verdict *v = w->verdict;

    if (!v || v->told)
        return 0;
    v->told = 1;
    memset(&v->out, 0, sizeof(v->out));
    v->out.magic = ABORT_MAGIC;
    v->out.dead = w->rank;
    snprintf(v->out.reason, sizeof(v->out.reason), "%s", reason && *reason ? reason : "");
    send_to_all(w, v);
    return 1;
}

void px__verdict_close(px_comm_t *w)
{
    struct px__verdict *v = w->verdict;

    if (!v)
        return;
    for (int r = 0; v->reqs && r < v->n; r++) {
        if (!v->reqs[r])
            continue;
        if (ucp_request_check_status(v->reqs[r]) == UCS_INPROGRESS)
            ucp_request_cancel(w->tr->worker, v->reqs[r]);
        while (ucp_request_check_status(v->reqs[r]) == UCS_INPROGRESS)
            ucp_worker_progress(w->tr->worker); /* a local cancel: completes at once */
        ucp_request_free(v->reqs[r]);
    }
    free(v->reqs);
    free(v->in);
    free(v->named);
    free(v);
    w->verdict = NULL;
}
