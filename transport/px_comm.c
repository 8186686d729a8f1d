/* px_comm.c: communicators: endpoints to every rank, the first exchange that
 * checks them, abort, destroy.
 *
 * Endpoint error mode (PX_UCX_PEER_ERR_MODE): "auto" uses
 * UCP_ERR_HANDLING_MODE_PEER for ranks whose node name differs from ours
 * (tcp / InfiniBand carry it cheaply) and plain mode for same-node ranks,
 * whose shared-memory transports lose their speed (or refuse) in peer mode
 * (docs/notes/ucx-1.13.md); "always" and "never" force one mode. A dead
 * same-node peer is caught by a pidfd of its process (pid exchanged in the
 * wire-up message), the watch fd, an abort or the deadline; its endpoint is
 * then force-closed before the worker progresses again (px__peer_dead).
 * Residual risk (UCX 1.13): a peer dying *during* a CMA copy on a plain-mode
 * endpoint makes uct log a FATAL error and abort this process (cma_ep.c,
 * uct_base_iface_failure_log_level); measured in about 1 of 3 SIGKILLs in a
 * loop of 16 MiB all-reduces. Peer mode avoids it but uses tcp.
 *
 * Invariants: comm->peers[r].ep is valid for every r (self included) from a
 * successful create to destroy; the error callback only sets flags that the
 * waits (px_progress.c) turn into PX_ERR_PEER_FAILURE. Runs on the thread
 * using the communicator, except px_comm_abort (any thread). */
#include "px_transport_int.h"

#include <arpa/inet.h>
#include <poll.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "px_env.h"
#include "px_log.h"
#include "px_path.h"
#include "px_sha256.h"
#include "px_time.h"

#define WIREUP_MAGIC 0x50585755u /* "PXWU" */
#define CLOSE_MS 2000 /* bound of the endpoint flush at destroy */

typedef struct {
    uint32_t magic;
    uint32_t comm_id;
    int32_t rank;
    int32_t size;
    int32_t pid;    /* for same-node death detection (pidfd) */
    int32_t pad;
    /* HMAC-SHA256(PX_JOB_SECRET, the 24 bytes above): the sender holds this
     * job's secret (a rank of another job in the table is refused) */
    uint8_t proof[PX_SHA256_BYTES];
} wireup_msg_t;

/* The proof of a wire-up message (fields above it, as sent). */
static void wireup_proof(const wireup_msg_t *m, uint8_t proof[PX_SHA256_BYTES])
{
    const char *secret = getenv("PX_JOB_SECRET"); /* not a knob: never printed */

    if (!secret)
        secret = "";
    px_hmac_sha256(secret, strlen(secret), m, offsetof(wireup_msg_t, proof), proof);
}

static void ep_err_cb(void *arg, ucp_ep_h ep, ucs_status_t status)
{
    px__peer_t *peer = arg;
    (void)ep;
    if (!peer->failed) {
        px_warn("comm %u: UCX reports rank %d failed: %s", peer->comm->id, peer->rank,
                ucs_status_string(status));
        px__peer_dead(peer->comm, peer->rank, ucs_status_string(status)); /* peer mode: no close */
    }
}

static int want_peer_mode(const char *knob, const char *my_node, const char *peer_node)
{
    if (!strcmp(knob, "always"))
        return 1;
    if (!strcmp(knob, "never"))
        return 0;
    if (strcmp(knob, "auto"))
        px_warn("PX_UCX_PEER_ERR_MODE=%s unknown, using auto", knob);
    return !my_node || !peer_node || strcmp(my_node, peer_node) != 0;
}

static px_status_t create_eps(px_comm_t *comm, const px_addr_table_t *table)
{
    const char *knob = px_env_str("PX_UCX_PEER_ERR_MODE");

    for (int r = 0; r < comm->size; r++) {
        px__peer_t *peer = &comm->peers[r];
        ucp_ep_params_t params;
        ucs_status_t st;

        peer->comm = comm;
        peer->rank = r;
        peer->pidfd = -1;
        peer->peer_mode = r != comm->rank &&
                          want_peer_mode(knob, table->nodes[comm->rank], table->nodes[r]);
        memset(&params, 0, sizeof(params));
        params.field_mask = UCP_EP_PARAM_FIELD_REMOTE_ADDRESS |
                            UCP_EP_PARAM_FIELD_ERR_HANDLING_MODE;
        params.address = table->addrs[r];
        params.err_mode = peer->peer_mode ? UCP_ERR_HANDLING_MODE_PEER
                                          : UCP_ERR_HANDLING_MODE_NONE;
        if (peer->peer_mode) {
            params.field_mask |= UCP_EP_PARAM_FIELD_ERR_HANDLER;
            params.err_handler.cb = ep_err_cb;
            params.err_handler.arg = peer;
        }
        st = ucp_ep_create(comm->tr->worker, &params, &peer->ep);
        if (st != UCS_OK) {
            peer->ep = NULL;
            return px__comm_set_error(comm, PX_ERR_PEER_FAILURE,
                                      "rank %d: ucp_ep_create failed: %s", r,
                                      ucs_status_string(st));
        }
        px_debug("comm %u: endpoint to rank %d (node %s), %s error mode", comm->id, r,
                 table->nodes[r] ? table->nodes[r] : "?", peer->peer_mode ? "peer" : "plain");
    }
    return PX_OK;
}

/* First exchange: a small message to and from every other rank. */
static px_status_t wireup(px_comm_t *comm)
{
    int64_t deadline = px_time_mono_ms() + px_env_int("PX_CONNECT_TIMEOUT_MS");
    wireup_msg_t mine = {WIREUP_MAGIC, comm->id, comm->rank, comm->size, (int32_t)getpid(), 0,
                         {0}};
    wireup_msg_t *theirs = calloc((size_t)comm->size, sizeof(*theirs));
    px__op_t *op;
    px_status_t status = PX_OK;

    if (!theirs)
        return PX_ERR_NO_MEMORY;
    wireup_proof(&mine, mine.proof);
    for (int r = 0; r < comm->size; r++) {
        if (r == comm->rank)
            continue;
        PX_CHECK_GOTO(px__recv_post(comm, r, px__tag(comm->id, PX__TAG_KIND_WIREUP, r, 0),
                                    &theirs[r], sizeof(theirs[r]), &op), status, out_free);
        PX_CHECK_GOTO(px__send_post(comm, r, px__tag(comm->id, PX__TAG_KIND_WIREUP, comm->rank, 0),
                                    &mine, sizeof(mine), &op), status, out_free);
    }
    status = px__wait_all_ops(comm, deadline);
    if (status != PX_OK)
        goto out_free;
    for (int r = 0; r < comm->size; r++) {
        if (r == comm->rank)
            continue;
        if (theirs[r].magic != WIREUP_MAGIC || theirs[r].rank != r ||
            theirs[r].size != comm->size || theirs[r].comm_id != comm->id) {
            status = px__comm_set_error(comm, PX_ERR_MISMATCH,
                                        "rank %d: wire-up says rank %d of %d (comm %u), "
                                        "expected rank %d of %d (comm %u)",
                                        r, theirs[r].rank, theirs[r].size, theirs[r].comm_id, r,
                                        comm->size, comm->id);
            goto out_free;
        }
    }
    for (int r = 0; r < comm->size; r++) {
        uint8_t want[PX_SHA256_BYTES];
        if (r == comm->rank)
            continue;
        wireup_proof(&theirs[r], want);
        if (!px_secret_equal(want, theirs[r].proof, sizeof(want))) {
            status = px__comm_set_error(comm, PX_ERR_INVALID_ARGUMENT,
                                        "rank %d (pid %d, node %s): refused: its wire-up does "
                                        "not prove this job's secret (PX_JOB_SECRET)",
                                        r, theirs[r].pid, comm->nodes[r]);
            goto out_free;
        }
    }
    /* same-node peers: a pidfd turns their exit into an event the waits poll,
     * so a dead local rank is named at once even without the watch fd */
    for (int r = 0; r < comm->size; r++) {
        if (r == comm->rank || strcmp(comm->nodes[r], comm->nodes[comm->rank]) != 0)
            continue;
        comm->peers[r].pidfd = (int)syscall(SYS_pidfd_open, (pid_t)theirs[r].pid, 0);
        if (comm->peers[r].pidfd < 0)
            px_debug("comm %u: no pidfd for rank %d (pid %d)", comm->id, r, theirs[r].pid);
    }
    comm->pid_pfds = calloc((size_t)(unsigned)comm->size, sizeof(*comm->pid_pfds));
    comm->pid_ranks = calloc((size_t)(unsigned)comm->size, sizeof(int));
    if (!comm->pid_pfds || !comm->pid_ranks) {
        status = PX_ERR_NO_MEMORY;
        goto out_free;
    }
    for (int r = 0; r < comm->size; r++) {
        if (comm->peers[r].pidfd < 0)
            continue;
        comm->pid_pfds[comm->n_pid].fd = comm->peers[r].pidfd;
        comm->pid_pfds[comm->n_pid].events = POLLIN;
        comm->pid_ranks[comm->n_pid++] = r;
    }
out_free:
    if (status != PX_OK && comm->active)
        px__cancel_all(comm);
    free(theirs);
    return status;
}

px_status_t px_comm_create_world(px_transport_t *transport, const px_addr_table_t *table,
                                 int rank, int watch_fd, px_comm_t **comm_p)
{
    px_status_t status;
    px_comm_t *comm;

    if (!transport || !table || !comm_p || table->world_size <= 0 ||
        table->world_size > PX__MAX_RANKS || rank < 0 || rank >= table->world_size) {
        px_error("px_comm_create_world: bad arguments (rank %d, world %d)", rank,
                 table ? table->world_size : -1);
        return PX_ERR_INVALID_ARGUMENT;
    }
    for (int r = 0; r < table->world_size; r++) {
        if (!table->addrs[r] || !table->addr_lens[r]) {
            px_error("px_comm_create_world: no address for rank %d", r);
            return PX_ERR_INVALID_ARGUMENT;
        }
    }
    comm = calloc(1, sizeof(*comm));
    if (!comm)
        return PX_ERR_NO_MEMORY;
    comm->tr = transport;
    comm->rank = rank;
    comm->size = table->world_size;
    comm->id = 0;
    comm->root = comm;
    comm->next_id = 1;
    comm->watch_fd = watch_fd;
    comm->watch_hup_rank = -1;
    comm->first_dead = -1;
    comm->default_timeout_ms = (int)px_env_int("PX_COMM_TIMEOUT_MS");
    comm->chunk_bytes = (size_t)px_env_int("PX_ALLREDUCE_CHUNK_BYTES");
    if (comm->chunk_bytes < 64)
        comm->chunk_bytes = 64;
    comm->chunk_bytes &= ~(size_t)63;
    comm->abort_efd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
    if (comm->abort_efd < 0) {
        px_error("eventfd: failed");
        status = PX_ERR_IO;
        goto err_free;
    }
    comm->peers = calloc((size_t)comm->size, sizeof(*comm->peers));
    comm->nodes = calloc((size_t)comm->size, sizeof(*comm->nodes));
    if (!comm->peers || !comm->nodes) {
        status = PX_ERR_NO_MEMORY;
        goto err_destroy;
    }
    for (int r = 0; r < comm->size; r++)
        comm->peers[r].pidfd = -1;
    transport->n_comms++; /* px_comm_destroy undoes it once peers exist */
    for (int r = 0; r < comm->size; r++) {
        comm->nodes[r] = strdup(table->nodes[r] ? table->nodes[r] : "");
        if (!comm->nodes[r]) {
            status = PX_ERR_NO_MEMORY;
            goto err_destroy;
        }
    }
    status = create_eps(comm, table);
    if (status != PX_OK)
        goto err_destroy;
    status = wireup(comm);
    if (status != PX_OK)
        goto err_destroy;
    status = px__verdict_listen(comm);
    if (status != PX_OK)
        goto err_destroy;
    px_debug("comm %u: rank %d of %d connected", comm->id, rank, comm->size);
    px__comm_link(comm);
    status = px__paths_comm_setup(comm);
    if (status != PX_OK)
        goto err_destroy;
    *comm_p = comm;
    return PX_OK;

err_destroy:
    if (!comm->failed)
        comm->failed = status;
    px_comm_destroy(comm);
    return status;
err_free:
    free(comm);
    return status;
}

/* Closes every endpoint: flush when healthy, force when failed. Bounded. */
static void close_eps(px_comm_t *comm)
{
    void **reqs = calloc((size_t)comm->size, sizeof(void *));
    int64_t end = px_time_mono_ms() + CLOSE_MS;
    ucp_request_param_t param;

    memset(&param, 0, sizeof(param));
    param.op_attr_mask = UCP_OP_ATTR_FIELD_FLAGS;
    param.flags = comm->failed ? UCP_EP_CLOSE_FLAG_FORCE : 0;
    for (int r = 0; r < comm->size; r++) {
        void *req;
        if (!comm->peers[r].ep)
            continue;
        /* a failed peer-mode endpoint must be force-closed */
        param.flags = (comm->failed || comm->peers[r].failed || comm->orphaned_sends)
                          ? UCP_EP_CLOSE_FLAG_FORCE : 0;
        req = ucp_ep_close_nbx(comm->peers[r].ep, &param);
        comm->peers[r].ep = NULL;
        if (UCS_PTR_IS_PTR(req) && reqs)
            reqs[r] = req;
        else if (UCS_PTR_IS_PTR(req))
            ucp_request_free(req);
    }
    for (int r = 0; reqs && r < comm->size; r++) {
        while (reqs[r]) {
            ucs_status_t st;
            while (ucp_worker_progress(comm->tr->worker))
                ;
            st = ucp_request_check_status(reqs[r]);
            if (st != UCS_INPROGRESS) {
                ucp_request_free(reqs[r]);
                reqs[r] = NULL;
                break;
            }
            if (px_time_mono_ms() >= end) {
                px_warn("comm %u: closing the endpoint to rank %d did not finish", comm->id, r);
                ucp_request_free(reqs[r]); /* released: UCX finishes it (worker destroy) */
                reqs[r] = NULL;
                break;
            }
            if (ucp_worker_arm(comm->tr->worker) == UCS_OK) {
                struct pollfd p = {.fd = comm->tr->efd, .events = POLLIN};
                poll(&p, 1, 20);
            }
        }
    }
    free(reqs);
}

/* Receives and drops the messages of this communicator nobody received
 * (the rest of a collective that failed, was cancelled or mismatched), so
 * they do not stay in the worker's unexpected queue. */
static void drop_unexpected(px_comm_t *comm)
{
    const ucp_tag_t mask = (ucp_tag_t)0xfff << 52;
    ucp_tag_recv_info_t info;
    ucp_tag_message_h msg;
    int dropped = 0;

    while (ucp_worker_progress(comm->tr->worker))
        ;
    while ((msg = ucp_tag_probe_nb(comm->tr->worker, (ucp_tag_t)(comm->id & 0xfffu) << 52, mask,
                                   1, &info)) != NULL) {
        void *buf = malloc(info.length ? info.length : 1);
        ucp_request_param_t param = {.op_attr_mask = UCP_OP_ATTR_FIELD_DATATYPE,
                                     .datatype = ucp_dt_make_contig(1)};
        void *req;
        int64_t end = px_time_mono_ms() + 200;

        px_debug("comm %u: dropping an unreceived message (tag %#llx, %zu bytes)", comm->id,
                 (unsigned long long)info.sender_tag, info.length);
        if (!buf)
            break;
        req = ucp_tag_msg_recv_nbx(comm->tr->worker, buf, info.length, msg, &param);
        if (UCS_PTR_IS_PTR(req)) {
            while (ucp_request_check_status(req) == UCS_INPROGRESS && px_time_mono_ms() < end)
                ucp_worker_progress(comm->tr->worker);
            if (ucp_request_check_status(req) == UCS_INPROGRESS)
                ucp_request_cancel(comm->tr->worker, req);
            while (ucp_request_check_status(req) == UCS_INPROGRESS)
                ucp_worker_progress(comm->tr->worker);
            ucp_request_free(req);
        }
        free(buf);
        dropped++;
    }
    if (dropped)
        px_debug("comm %u: dropped %d unreceived message(s)", comm->id, dropped);
}

px_status_t px_comm_create_self(px_transport_t *transport, const char *node, px_comm_t **comm_p)
{
    px_addr_table_t table;
    const void *addr;
    size_t len;
    px_status_t status;

    PX_CHECK(px_transport_address(transport, &addr, &len));
    PX_CHECK(px_addr_table_init(&table, 1));
    table.addrs[0] = malloc(len);
    table.nodes[0] = node ? strdup(node) : NULL;
    if (!table.addrs[0] || (node && !table.nodes[0])) {
        status = PX_ERR_NO_MEMORY;
        goto out;
    }
    memcpy(table.addrs[0], addr, len);
    table.addr_lens[0] = len;
    status = px_comm_create_world(transport, &table, 0, -1, comm_p);
out:
    px_addr_table_free(&table);
    return status;
}

/* Last exchange of a healthy world communicator: a small message to and from
 * every other rank, so that no rank tears its endpoints down (or exits)
 * while a peer may still be completing an operation with it. Without it, a
 * rank that finished the last collective first and exited could make a
 * slower peer's wait fail: over a peer-mode (tcp) endpoint the close is
 * reported as "Endpoint timeout" while that peer still has the last send to
 * it in flight. A failure here (a peer already gone) only makes the close
 * forced. */
static void goodbye(px_comm_t *comm)
{
    int64_t deadline = px__deadline(comm, -1);
    uint32_t mine = comm->rank, *theirs = calloc((size_t)comm->size, sizeof(*theirs));
    px__op_t *op;
    px_status_t status = PX_OK;

    if (!theirs)
        return;
    for (int r = 0; r < comm->size && status == PX_OK; r++) {
        if (r == comm->rank)
            continue;
        status = px__recv_post(comm, r, px__tag(comm->id, PX__TAG_KIND_WIREUP, r, 1),
                               &theirs[r], sizeof(theirs[r]), &op);
        if (status == PX_OK)
            status = px__send_post(comm, r, px__tag(comm->id, PX__TAG_KIND_WIREUP, comm->rank, 1),
                                   &mine, sizeof(mine), &op);
    }
    if (status == PX_OK)
        status = px__wait_all_ops(comm, deadline);
    else if (comm->active)
        px__cancel_all(comm);
    if (status != PX_OK)
        px_debug("comm %u: goodbye exchange: %s (%s); closing by force", comm->id,
                 px_status_str(status), comm->last_error);
    free(theirs);
}

void px_comm_destroy(px_comm_t *comm)
{
    int leak_orphans = 0;

    if (!comm)
        return;
    px__comm_unlink(comm);
    px__comm_drop_requests(comm);
    px__paths_comm_destroy(comm);
    if (comm->peers && comm->size > 1 && !comm->active && !comm->failed)
        goodbye(comm);
    if (comm->active)
        px__cancel_all(comm);
    /* only sub-communicators: their id is used by no other live
     * communicator of this process, while a second world would share id 0 */
    if (!comm->failed && comm->root != comm)
        drop_unexpected(comm);
    if (comm->orphans && !comm->failed)
        comm->failed = PX_ERR_ABORTED; /* force close completes orphaned sends */
    if (comm->peers && comm->failed == PX_ERR_PEER_FAILURE)
        px__verdict_tell(comm); /* whom we saw die, before we go (px_verdict.c) */
    if (comm->peers) {
        close_eps(comm);
        comm->tr->n_comms--;
    } else if (comm->wrank) {
        comm->tr->n_comms--; /* a sub-communicator: the endpoints are the world's */
    }
    while (ucp_worker_progress(comm->tr->worker))
        ;
    px__verdict_close(comm);
    for (px__op_t *op = comm->orphans; op; op = op->next)
        if (!op->done)
            leak_orphans = 1; /* a late callback may still write the record */
    if (leak_orphans && comm->root != comm)
        comm->root->orphaned_sends = 1; /* the world's endpoints carry them: force close */
    if (leak_orphans) {
        /* a late callback may still write them: the transport frees them
         * after the worker is gone */
        void **more = realloc(comm->tr->leftover,
                              (comm->tr->n_leftover + comm->n_all) * sizeof(void *));
        if (more) {
            comm->tr->leftover = more;
            for (size_t i = 0; i < comm->n_all; i++)
                more[comm->tr->n_leftover++] = comm->all_ops[i];
            comm->n_all = 0;
        }
        px_debug("comm %u: %zu request records handed to the transport", comm->id,
                 comm->tr->n_leftover);
    }
    for (size_t i = 0; i < comm->n_all; i++)
        free(comm->all_ops[i]);
    free(comm->all_ops);
    for (int r = 0; comm->peers && r < comm->size; r++)
        if (comm->peers[r].pidfd >= 0)
            close(comm->peers[r].pidfd);
    for (int r = 0; comm->nodes && r < comm->size; r++)
        free(comm->nodes[r]);
    free(comm->nodes);
    free(comm->peers);
    free(comm->pid_pfds);
    free(comm->pid_ranks);
    for (int i = 0; i < PX__NBUF; i++)
        px__host_free(comm->bufs[i].ptr);
    free(comm->wrank);
    if (comm->abort_efd >= 0)
        close(comm->abort_efd);
    free(comm);
}

int px_comm_rank(const px_comm_t *comm)
{
    return comm->rank;
}

int px_comm_size(const px_comm_t *comm)
{
    return comm->size;
}

const char *px_comm_last_error(const px_comm_t *comm)
{
    return comm ? comm->last_error : "";
}

void px_comm_abort(px_comm_t *comm, const char *reason)
{
    int expected = 0;
    uint64_t one = 1;

    if (!comm)
        return;
    if (atomic_compare_exchange_strong(&comm->aborted, &expected, 1)) {
        snprintf(comm->abort_reason, sizeof(comm->abort_reason), "%s", reason ? reason : "");
        atomic_store(&comm->aborted, 2);
    }
    if (write(comm->abort_efd, &one, sizeof(one)) < 0) {
        /* counter saturated: already readable */
    }
}

int px_comm_abort_peers(px_comm_t *comm, const char *reason)
{
    px_comm_t *w;

    if (!comm)
        return 0;
    w = comm->root;
    /* failing because a peer died or the job was stopped: that news is
     * theirs to spread (px__verdict_tell at destroy), not an abort of ours */
    if (w->failed == PX_ERR_PEER_FAILURE || w->failed == PX_ERR_ABORTED)
        return 0;
    if (!px__verdict_abort(w, reason))
        return 0;
    px_info("comm %u rank %d: aborted the world (told %d peer(s)): %s", w->id, w->rank,
            w->size - 1, reason && *reason ? reason : "no reason given");
    /* no goodbye exchange at destroy: the peers are failing, not finishing */
    w->failed = PX_ERR_ABORTED;
    return 1;
}

/* MPI_Comm_split (MPI 4.0, section 7.4.2). One all-gather over the parent
 * of (color, key, next free id): members of a color sort by (key, parent
 * rank); the new communicator's tag id is the largest next free id of all
 * parent ranks (so no rank of it uses that id yet; the groups of one split
 * share an id, which is safe because they have no rank in common), and
 * every parent rank moves its next free id past it. Ids wrap after 4095
 * splits (id 0 is the world). */
px_status_t px_comm_split(px_comm_t *comm, int color, int key, px_comm_t **newcomm_p)
{
    px_comm_t *w, *sub = NULL;
    int32_t mine[3], *all = NULL;
    int n, count = 0, me = -1;
    unsigned id = 0;
    px_status_t status;

    if (!comm || !newcomm_p || (color < 0 && color != PX_COLOR_UNDEFINED)) {
        px_error("px_comm_split: bad arguments (color %d)", color);
        return PX_ERR_INVALID_ARGUMENT;
    }
    w = comm->root;
    n = comm->size;
    all = malloc((size_t)n * sizeof(mine));
    if (!all)
        return PX_ERR_NO_MEMORY;
    mine[0] = color;
    mine[1] = key;
    mine[2] = (int32_t)w->next_id;
    status = px_allgather(comm, mine, all, 3, PX_INT32, NULL);
    if (status != PX_OK)
        goto out;
    for (int r = 0; r < n; r++)
        if ((unsigned)all[3 * r + 2] > id)
            id = (unsigned)all[3 * r + 2];
    w->next_id = id + 1 >= PX__MAX_COMMS ? 1 : id + 1;
    if (color == PX_COLOR_UNDEFINED) {
        *newcomm_p = NULL;
        goto out;
    }
    for (int r = 0; r < n; r++)
        count += all[3 * r] == color;
    sub = calloc(1, sizeof(*sub));
    if (!sub) {
        status = PX_ERR_NO_MEMORY;
        goto out;
    }
    sub->wrank = malloc((size_t)count * sizeof(int));
    if (!sub->wrank) {
        status = PX_ERR_NO_MEMORY;
        goto err_free;
    }
    /* members in (key, parent rank) order: insertion sort of parent ranks */
    {
        int k = 0;
        for (int r = 0; r < n; r++) {
            int j;
            if (all[3 * r] != color)
                continue;
            for (j = k; j > 0; j--) {
                int q = sub->wrank[j - 1]; /* parent rank for now */
                if (all[3 * q + 1] < all[3 * r + 1] ||
                    (all[3 * q + 1] == all[3 * r + 1] && q < r))
                    break;
                sub->wrank[j] = q;
            }
            sub->wrank[j] = r;
            k++;
        }
        for (int i = 0; i < count; i++) {
            if (sub->wrank[i] == comm->rank)
                me = i;
            sub->wrank[i] = px_comm_world_rank(comm, sub->wrank[i]);
        }
    }
    sub->tr = comm->tr;
    sub->root = w;
    sub->rank = me;
    sub->size = count;
    sub->id = id;
    sub->watch_fd = -1;
    sub->watch_hup_rank = -1;
    sub->first_dead = -1;
    sub->default_timeout_ms = comm->default_timeout_ms;
    sub->chunk_bytes = comm->chunk_bytes;
    sub->abort_efd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
    if (sub->abort_efd < 0) {
        px_error("eventfd: failed");
        status = PX_ERR_IO;
        goto err_free;
    }
    comm->tr->n_comms++;
    px__comm_link(sub);
    status = px__paths_comm_setup(sub);
    if (status != PX_OK) {
        px_comm_destroy(sub);
        goto out;
    }
    px_debug("comm %u: split color %d: rank %d of %d (comm %u)", comm->id, color, me, count, id);
    *newcomm_p = sub;
    goto out;

err_free:
    free(sub->wrank);
    free(sub);
out:
    free(all);
    return status;
}

int px_comm_world_rank(const px_comm_t *comm, int rank)
{
    if (!comm || rank < 0 || rank >= comm->size)
        return -1;
    return comm->wrank ? comm->wrank[rank] : rank;
}

int px__comm_one_node(const px_comm_t *comm)
{
    const px_comm_t *w = comm->root;
    const char *first;

    if (!w->nodes)
        return 0;
    first = w->nodes[px_comm_world_rank(comm, 0)];
    for (int r = 1; r < comm->size; r++)
        if (strcmp(first, w->nodes[px_comm_world_rank(comm, r)]) != 0)
            return 0;
    return 1;
}
