/* px_progress.c: outstanding UCX tag requests and the blocking progress loop.
 *
 * Every send/recv a communicator posts is a px__op_t on comm->active. Waits
 * call ucp_worker_progress until it has nothing left to do, then arm the
 * worker (ucp_worker_arm) and sleep in poll() on three descriptors: the
 * worker's event fd, the communicator's abort eventfd and the optional watch
 * fd, with the time left to the deadline as the poll timeout. Nothing spins:
 * a rank waiting for a slow peer uses no CPU, so 4 ranks run well on 2 cores.
 *
 * Failure handling: the first failure (deadline, abort, watch fd, UCX peer
 * error, truncation) cancels every active receive with ucp_request_cancel
 * and waits (bounded, DRAIN_MS) until all of them have completed, so user
 * buffers are not written after the call returns. Sends cannot be cancelled
 * in UCX 1.13: sends to live peers are waited for (bounded, SEND_DRAIN_MS)
 * because the receiver may be reading our buffer; sends to dead peers are
 * not. A send still pending is kept as an orphan record, completed (or left
 * to the worker) at destroy.
 *
 * Sub-communicators share the world's endpoints, worker, watch fd and
 * pidfds: their checks read the world's state (px__wpeer) and name their own
 * ranks.
 *
 * Runs on the thread using the communicator; only px_comm_abort() (in
 * px_comm.c) touches the comm from other threads, through an atomic flag and
 * an eventfd. */
#include "px_transport_int.h"

#include <errno.h>
#include <poll.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <arpa/inet.h>

#include "px_log.h"
#include "px_path.h"
#include "px_time.h"

/* Bound of the drain after a failure (ms): a healthy comm (mismatch) waits
 * this long for cancelled receives; a failed one waits FAILED_DRAIN_MS, then
 * force-closes the endpoints of receives still running (a matched
 * rendezvous from a live but stalled peer), which completes them. */
#define DRAIN_MS 2000
#define FAILED_DRAIN_MS 100
/* Sends to live peers are waited for up to SEND_DRAIN_MS: a receiver that
 * already matched one copies straight out of our buffer (CMA get), and if
 * the caller freed it on return the receiver's copy would fail, which UCX
 * treats as fatal on plain-mode endpoints. A send whose receive was
 * cancelled never completes and costs the whole bound. */
#define SEND_DRAIN_MS 500
/* Longest interval (us) between two reads of the watch fd and the pidfds
 * while nothing sleeps (check_world). */
#define NEWS_US 100

static void force_close_ep(px_comm_t *comm, int peer);

int64_t px__deadline(const px_comm_t *comm, int timeout_ms)
{
    if (timeout_ms < 0)
        timeout_ms = comm->default_timeout_ms;
    return px_time_mono_ms() + timeout_ms;
}

px_status_t px__comm_set_error(px_comm_t *comm, px_status_t status, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(comm->last_error, sizeof(comm->last_error), fmt, ap);
    va_end(ap);
    if (status == PX_ERR_PEER_FAILURE || status == PX_ERR_ABORTED || status == PX_ERR_TIMEOUT)
        if (!comm->failed)
            comm->failed = status;
    px_error("comm %u rank %d: %s (%s)", comm->id, comm->rank, comm->last_error,
             px_status_str(status));
    return status;
}

static px__op_t *op_get(px_comm_t *comm)
{
    px__op_t *op = comm->free_ops;
    if (op) {
        comm->free_ops = op->next;
    } else {
        if (comm->n_all == comm->cap_all) {
            size_t cap = comm->cap_all ? comm->cap_all * 2 : 32;
            px__op_t **all = realloc(comm->all_ops, cap * sizeof(*all));
            if (!all)
                return NULL;
            comm->all_ops = all;
            comm->cap_all = cap;
        }
        op = malloc(sizeof(*op));
        if (!op)
            return NULL;
        comm->all_ops[comm->n_all++] = op;
    }
    memset(op, 0, sizeof(*op));
    return op;
}

static void op_put(px_comm_t *comm, px__op_t *op)
{
    op->next = comm->free_ops;
    comm->free_ops = op;
}

static void unlink_active(px_comm_t *comm, px__op_t *op)
{
    for (px__op_t **pp = &comm->active; *pp; pp = &(*pp)->next) {
        if (*pp == op) {
            *pp = op->next;
            op->next = NULL;
            return;
        }
    }
}

static void send_cb(void *request, ucs_status_t status, void *user_data)
{
    px__op_t *op = user_data;
    op->status = status;
    op->done = 1;
    op->req = NULL;
    ucp_request_free(request);
}

static void recv_cb(void *request, ucs_status_t status, const ucp_tag_recv_info_t *info,
                    void *user_data)
{
    px__op_t *op = user_data;
    op->status = status;
    /* on truncation too: the sender's length, for the mismatch message */
    op->length = ((status == UCS_OK || status == UCS_ERR_MESSAGE_TRUNCATED) && info)
                     ? info->length : 0;
    op->done = 1;
    op->req = NULL;
    ucp_request_free(request);
}

static px_status_t post_common(px_comm_t *comm, int peer, px__op_t **op_p, px__op_t **out)
{
    if (comm->failed)
        return comm->failed;
    if (comm->first_dead >= 0)
        return px__check_async(comm); /* the comm lost a rank: fail now, naming it */
    if (peer < 0 || peer >= comm->size) {
        px_error("comm %u: peer rank %d out of range [0, %d)", comm->id, peer, comm->size);
        return PX_ERR_INVALID_ARGUMENT;
    }
    if (!px__wpeer(comm, peer)->ep)
        return px__comm_set_error(comm, PX_ERR_PEER_FAILURE, "rank %d: peer failure (%s)", peer,
                                  px__wpeer(comm, peer)->why ? px__wpeer(comm, peer)->why
                                                             : "endpoint closed");
    *out = op_get(comm);
    if (!*out)
        return PX_ERR_NO_MEMORY;
    (*out)->peer = peer;
    (void)op_p;
    return PX_OK;
}

px_status_t px__send_post(px_comm_t *comm, int peer, ucp_tag_t tag, const void *buf,
                          size_t bytes, px__op_t **op_p)
{
    ucp_request_param_t param;
    ucs_status_ptr_t req;
    px__op_t *op;
    px_status_t status = post_common(comm, peer, op_p, &op);

    if (status != PX_OK)
        return status;
    op->is_send = 1;
    memset(&param, 0, sizeof(param));
    param.op_attr_mask = UCP_OP_ATTR_FIELD_CALLBACK | UCP_OP_ATTR_FIELD_USER_DATA |
                         UCP_OP_ATTR_FIELD_DATATYPE | UCP_OP_ATTR_FLAG_NO_IMM_CMPL;
    param.cb.send = send_cb;
    param.user_data = op;
    param.datatype = ucp_dt_make_contig(1);
    req = ucp_tag_send_nbx(px__wpeer(comm, peer)->ep, buf, bytes, tag, &param);
    if (UCS_PTR_IS_ERR(req)) {
        op_put(comm, op);
        return px__comm_set_error(comm, PX_ERR_PEER_FAILURE, "rank %d: send failed: %s", peer,
                                  ucs_status_string(UCS_PTR_STATUS(req)));
    }
    if (req == NULL) { /* not expected with NO_IMM_CMPL, but handle it */
        op->done = 1;
        op->status = UCS_OK;
    }
    op->req = req;
    op->next = comm->active;
    comm->active = op;
    *op_p = op;
    return PX_OK;
}

px_status_t px__recv_post(px_comm_t *comm, int peer, ucp_tag_t tag, void *buf, size_t bytes,
                          px__op_t **op_p)
{
    ucp_request_param_t param;
    ucs_status_ptr_t req;
    px__op_t *op;
    px_status_t status = post_common(comm, peer, op_p, &op);

    if (status != PX_OK)
        return status;
    op->expect = bytes;
    memset(&param, 0, sizeof(param));
    param.op_attr_mask = UCP_OP_ATTR_FIELD_CALLBACK | UCP_OP_ATTR_FIELD_USER_DATA |
                         UCP_OP_ATTR_FIELD_DATATYPE | UCP_OP_ATTR_FLAG_NO_IMM_CMPL;
    param.cb.recv = recv_cb;
    param.user_data = op;
    param.datatype = ucp_dt_make_contig(1);
    req = ucp_tag_recv_nbx(comm->tr->worker, buf, bytes, tag, (ucp_tag_t)-1, &param);
    if (UCS_PTR_IS_ERR(req)) {
        op_put(comm, op);
        px_error("ucp_tag_recv_nbx: %s", ucs_status_string(UCS_PTR_STATUS(req)));
        return PX_ERR_INTERNAL;
    }
    if (req == NULL) {
        op->done = 1;
        op->status = UCS_OK;
        op->length = bytes;
    }
    op->req = req;
    op->next = comm->active;
    comm->active = op;
    *op_p = op;
    return PX_OK;
}

/* Drains the worker without sleeping. */
static void progress_all(px_transport_t *tr)
{
    while (ucp_worker_progress(tr->worker))
        ;
}

void px__progress_worker(px_comm_t *comm)
{
    progress_all(comm->tr);
}

void px__sleep(px_comm_t *comm, int timeout_ms)
{
    if (px__paths_sleep(comm, timeout_ms))
        return; /* slept (or spun) on a path's counter (shm) or fence (nccl) */
    px__sleep_fd(comm, -1, timeout_ms);
}

void px__sleep_fd(px_comm_t *comm, int extra_fd, int timeout_ms)
{
    px_comm_t *w = comm->root;
    struct pollfd fixed[16], *fds = fixed;
    nfds_t n = 0, cap = 5 + (nfds_t)w->n_pid;
    ucs_status_t st;

    w->news_us = 0; /* after the poll below, look at the watch fd and pidfds again */
    st = ucp_worker_arm(comm->tr->worker);
    if (st == UCS_ERR_BUSY)
        return; /* events pending: progress again */
    if (cap > 16) {
        fds = malloc(cap * sizeof(*fds));
        if (!fds) {
            fds = fixed;
            cap = 5;
        }
    }
    fds[n].fd = comm->tr->efd;
    fds[n++].events = POLLIN;
    if (extra_fd >= 0) {
        fds[n].fd = extra_fd;
        fds[n++].events = POLLIN;
    }
    if (comm->abort_efd >= 0) {
        fds[n].fd = comm->abort_efd;
        fds[n++].events = POLLIN;
    }
    if (w != comm && w->abort_efd >= 0) {
        fds[n].fd = w->abort_efd;
        fds[n++].events = POLLIN;
    }
    if (w->watch_fd >= 0 && !w->watch_closed) {
        fds[n].fd = w->watch_fd;
        fds[n++].events = POLLIN;
    }
    for (int i = 0; i < w->n_pid && n < cap; i++)
        fds[n++] = w->pid_pfds[i]; /* failed peers have fd -1: ignored */
    poll(fds, n, timeout_ms);
    if (fds != fixed)
        free(fds);
}

/* Polls the pidfds of same-node peers (one syscall) without sleeping and
 * marks the exited ones dead. */
static void check_pidfds(px_comm_t *comm)
{
    if (comm->n_pid == 0 || poll(comm->pid_pfds, (nfds_t)comm->n_pid, 0) <= 0)
        return;
    for (int i = 0; i < comm->n_pid; i++) {
        if (comm->pid_pfds[i].revents) {
            comm->pid_pfds[i].fd = -1; /* reported once */
            px__peer_dead(comm, comm->pid_ranks[i], "its process exited");
        }
    }
}

void px__peer_dead(px_comm_t *comm, int peer, const char *why)
{
    px__peer_t *p = &comm->peers[peer];

    if (!p->failed) {
        p->failed = 1;
        p->why = why;
        if (comm->first_dead < 0)
            comm->first_dead = peer;
    }
    /* UCX treats a failed copy on a plain-mode endpoint as fatal: drop the
     * endpoint before anything progresses the worker again */
    if (!p->peer_mode)
        force_close_ep(comm, peer);
}

/* Reads what the watch fd has; returns an error status when it says stop. */
static px_status_t read_watch(px_comm_t *comm)
{
    for (;;) {
        struct pollfd pfd = {.fd = comm->watch_fd, .events = POLLIN};
        ssize_t got;
        uint32_t kind;
        int32_t rank;

        if (poll(&pfd, 1, 0) <= 0)
            return PX_OK;
        got = read(comm->watch_fd, comm->watch_buf + comm->watch_have, 8 - comm->watch_have);
        if (got < 0 && (errno == EINTR || errno == EAGAIN))
            return PX_OK;
        if (got <= 0) {
            comm->watch_closed = 1;
            if (comm->watch_hup_rank >= 0 && comm->watch_hup_rank < comm->size) {
                px__peer_dead(comm, comm->watch_hup_rank, "its bootstrap connection closed");
                return PX_OK;
            }
            return px__comm_set_error(comm, PX_ERR_ABORTED, "watch fd closed: job aborted");
        }
        comm->watch_have += (size_t)got;
        if (comm->watch_have < 8)
            continue;
        comm->watch_have = 0;
        memcpy(&kind, comm->watch_buf, 4);
        memcpy(&rank, comm->watch_buf + 4, 4);
        kind = ntohl(kind);
        rank = (int32_t)ntohl((uint32_t)rank);
        if (kind == PX_WATCH_HUP_RANK) {
            comm->watch_hup_rank = rank;
            continue;
        }
        if (kind == PX_WATCH_DIED && rank >= 0 && rank < comm->size) {
            px__peer_dead(comm, rank, "reported dead through the watch fd");
            continue;
        }
        return px__comm_set_error(comm, PX_ERR_ABORTED, "job aborted (watch fd record %u)", kind);
    }
}

/* The world's watch fd, abort flag and pidfds (marks dead ranks). The
 * flags are read on every call; the descriptors (two poll() syscalls, about
 * 1 us each, several per small collective when every step of every pending
 * request looked) at most every NEWS_US, and at the first check after any
 * sleep (px__sleep and the paths' sleep hooks set news_us to 0 when they slept): a
 * wait that sleeps looks right after it wakes, so a dead peer is still seen
 * within one sleep slice; a caller polling px_test without sleeping sees it
 * within NEWS_US. */
static px_status_t check_world(px_comm_t *w)
{
    px_status_t status;
    int64_t now;

    if (w->failed)
        return w->failed;
    if (atomic_load(&w->aborted) == 2)
        return px__comm_set_error(w, PX_ERR_ABORTED, "aborted: %s", w->abort_reason);
    now = px_time_mono_us();
    if (w->news_us && now - w->news_us < NEWS_US)
        return PX_OK;
    w->news_us = now;
    /* a peer's abort notice first: sent before its exit, it says why; then
     * the watch fd: it names the rank that died first; pidfds name local
     * ranks that exited; the UCX callback marks failed endpoints */
    status = px__verdict_poll(w);
    if (status != PX_OK)
        return status;
    if (w->watch_fd >= 0 && !w->watch_closed) {
        status = read_watch(w);
        if (status != PX_OK)
            return status;
    }
    check_pidfds(w);
    return PX_OK;
}

px_status_t px__poll_async(px_comm_t *comm)
{
    px_comm_t *w = comm->root;
    px_status_t status;

    if (comm->failed)
        return comm->failed;
    if (atomic_load(&comm->aborted) == 2)
        return px__comm_set_error(comm, PX_ERR_ABORTED, "aborted: %s", comm->abort_reason);
    status = check_world(w);
    if (status == PX_OK || w == comm)
        return status;
    return px__check_async(comm); /* the world failed: say why, in our ranks */
}

px_status_t px__check_async(px_comm_t *comm)
{
    px_comm_t *w = comm->root;
    px_status_t status;

    if (comm->failed)
        return comm->failed;
    if (atomic_load(&comm->aborted) == 2)
        return px__comm_set_error(comm, PX_ERR_ABORTED, "aborted: %s", comm->abort_reason);
    status = check_world(w);
    if (status == PX_ERR_ABORTED && w != comm)
        return px__comm_set_error(comm, PX_ERR_ABORTED, "world communicator aborted: %s",
                                  w->last_error);
    if (status != PX_OK && status != PX_ERR_PEER_FAILURE && w != comm)
        return px__comm_set_error(comm, status, "world communicator failed: %s", w->last_error);
    px__verdict_settle(w); /* not a rank that exited after the one that died */
    if (w != comm && comm->first_dead < 0) {
        /* name the first of our ranks the world knows dead */
        if (w->first_dead >= 0)
            for (int r = 0; r < comm->size; r++)
                if (comm->wrank[r] == w->first_dead)
                    comm->first_dead = r;
        for (int r = 0; r < comm->size && comm->first_dead < 0; r++)
            if (px__wpeer(comm, r)->failed)
                comm->first_dead = r;
    }
    if (comm->first_dead >= 0) {
        int d = comm->first_dead;
        if (w != comm)
            return px__comm_set_error(comm, PX_ERR_PEER_FAILURE,
                                      "rank %d (world rank %d): peer failure (%s)", d,
                                      comm->wrank[d], px__wpeer(comm, d)->why);
        return px__comm_set_error(comm, PX_ERR_PEER_FAILURE, "rank %d: peer failure (%s)", d,
                                  px__wpeer(comm, d)->why);
    }
    if (status != PX_OK) /* world failed without a dead rank of ours */
        return w == comm ? status
                         : px__comm_set_error(comm, status, "world communicator failed: %s",
                                              w->last_error);
    return PX_OK;
}

/* Drops the endpoint to `peer` (force close), completing its requests. */
static void force_close_ep(px_comm_t *comm, int peer)
{
    px__peer_t *p = px__wpeer(comm, peer);
    ucp_request_param_t param = {.op_attr_mask = UCP_OP_ATTR_FIELD_FLAGS,
                                 .flags = UCP_EP_CLOSE_FLAG_FORCE};
    void *req;

    if (!p->ep)
        return;
    req = ucp_ep_close_nbx(p->ep, &param);
    if (UCS_PTR_IS_PTR(req))
        ucp_request_free(req);
    p->ep = NULL;
}

void px__cancel_ops(px_comm_t *comm, px_request_t *owner)
{
    int64_t now = px_time_mono_ms();
    int64_t end_recv = now + (comm->failed ? FAILED_DRAIN_MS : DRAIN_MS);
    px__op_t **pp;
    int64_t end_send = now + SEND_DRAIN_MS;
    int forced = 0;
    px__op_t *op, *next;

#define MINE(o) (!owner || (o)->owner == owner)
    for (op = comm->active; op; op = op->next)
        if (MINE(op) && !op->done && !op->is_send && op->req)
            ucp_request_cancel(comm->tr->worker, op->req);
    for (;;) {
        int pending_recv = 0, pending_send = 0;
        progress_all(comm->tr);
        for (op = comm->active; op; op = op->next) {
            if (op->done || !MINE(op))
                continue;
            if (!op->is_send)
                pending_recv++;
            else if (!px__wpeer(comm, op->peer)->failed && px__wpeer(comm, op->peer)->ep)
                pending_send++; /* a live receiver may be copying from it */
        }
        now = px_time_mono_ms();
        if (pending_recv && now >= end_recv && comm->failed && !forced) {
            /* receives already matched to a stalled peer: drop those
             * endpoints so UCX completes them and writes nothing more */
            for (op = comm->active; op; op = op->next)
                if (MINE(op) && !op->done && !op->is_send)
                    force_close_ep(comm, op->peer);
            forced = 1;
            end_recv = now + FAILED_DRAIN_MS;
            continue;
        }
        if ((!pending_recv || now >= end_recv) && (!pending_send || now >= end_send))
            break;
        /* sleep on the worker only: abort/watch fds may stay readable */
        if (ucp_worker_arm(comm->tr->worker) == UCS_OK) {
            struct pollfd pfd = {.fd = comm->tr->efd, .events = POLLIN};
            poll(&pfd, 1, 20);
        }
    }
    for (pp = &comm->active; (op = *pp) != NULL;) {
        next = op->next;
        if (!MINE(op)) {
            pp = &op->next;
            continue;
        }
        *pp = next;
        if (op->done) {
            op_put(comm, op);
        } else {
            if (!op->is_send)
                px_error("comm %u: receive from rank %d still pending after cancel", comm->id,
                         op->peer);
            op->owner = NULL;
            op->next = comm->orphans;
            comm->orphans = op;
        }
    }
#undef MINE
}

void px__pending_ranks(px_comm_t *comm, px_request_t *owner, char *buf, size_t len)
{
    size_t used = 0;
    int shown = 0;
    buf[0] = '\0';
    if (owner && px__path_waiting_for(owner) >= 0) { /* a path's counter (shm) it waits on */
        snprintf(buf, len, "%d", px__path_waiting_for(owner));
        return;
    }
    for (int r = 0; r < comm->size && shown < 8; r++) {
        for (px__op_t *op = comm->active; op; op = op->next) {
            if (!op->done && op->peer == r && (!owner || op->owner == owner)) {
                used += (size_t)snprintf(buf + used, used < len ? len - used : 0, "%s%d",
                                         shown ? ", " : "", r);
                shown++;
                break;
            }
        }
        if (used >= len)
            break;
    }
}

px_status_t px__op_status(px_comm_t *comm, px__op_t *op)
{
    if (op->status == UCS_OK) {
        if (!op->is_send && op->length != op->expect)
            return px__comm_set_error(comm, PX_ERR_MISMATCH, "rank %d: sent %zu bytes, %zu expected",
                                      op->peer, op->length, op->expect);
        return PX_OK;
    }
    if (op->status == UCS_ERR_MESSAGE_TRUNCATED)
        return px__comm_set_error(comm, PX_ERR_MISMATCH,
                                  "rank %d: sent more than the %zu bytes expected", op->peer,
                                  op->expect);
    /* anything else, UCS_ERR_CANCELED included (we cancel only after an
     * error is set, so here UCX cancelled it): the peer's endpoint failed */
    {
        px_status_t cause = px__check_async(comm); /* watch fd / pidfd name the culprit */
        if (cause != PX_OK)
            return cause;
    }
    return px__comm_set_error(comm, PX_ERR_PEER_FAILURE, "rank %d: peer failure (%s)", op->peer,
                              ucs_status_string(op->status));
}

void px__op_reap(px_comm_t *comm, px__op_t *op)
{
    unlink_active(comm, op);
    op_put(comm, op);
}

px_status_t px__wait_all_ops(px_comm_t *comm, int64_t deadline)
{
    px_status_t status;

    for (;;) {
        int satisfied = 1;
        int64_t now;

        /* a same-node peer that exited must be dropped before progress */
        status = px__check_async(comm);
        if (status != PX_OK)
            goto err_cancel;
        progress_all(comm->tr);
        for (px__op_t *o = comm->active; o; o = o->next) {
            if (!o->done) {
                satisfied = 0;
                continue;
            }
            status = px__op_status(comm, o);
            if (status != PX_OK)
                goto err_cancel;
        }
        if (satisfied) {
            while (comm->active) {
                px__op_t *o = comm->active;
                comm->active = o->next;
                op_put(comm, o);
            }
            return PX_OK;
        }
        now = px_time_mono_ms();
        if (now >= deadline) {
            char who[96];
            px__pending_ranks(comm, NULL, who, sizeof(who));
            status = px__comm_set_error(comm, PX_ERR_TIMEOUT,
                                        "timeout: still waiting for rank(s) %s", who);
            goto err_cancel;
        }
        px__sleep(comm, (int)(deadline - now > 1 << 30 ? 1 << 30 : deadline - now));
    }

err_cancel:
    px__cancel_all(comm);
    return status;
}
