/* jobnames.c: job names unique cluster-wide, with no node holding a
 * registry.
 *
 * A node submitting a named job first reserves the name for itself: an
 * entry in its in-flight list, which also serialises two submits of one
 * name to this node. It then asks every alive peer for the name
 * (Peer.ReserveName, in parallel, PXD_NAME_RESERVE_TIMEOUT_MS each). A peer
 *   - refuses when it coordinates an active job of that name;
 *   - when it is itself submitting that name (its own reservation), breaks
 *     the tie by node name: the smaller name wins. Asked by a smaller node,
 *     it grants and gives its own reservation up (its submit then fails);
 *     asked by a larger one, it refuses;
 *   - otherwise grants, and keeps nothing.
 * The submit goes on only if no peer refused and its own reservation was
 * not given up meanwhile; the job is then stored (active) at once, which
 * is what every later ReserveName finds. A failed submit just drops its
 * reservation: peers hold none, so nothing is left to release, and a node
 * that dies mid-submit blocks nobody.
 *
 * Why two submits of one name, to nodes A < B, cannot both pass: each asks
 * the other. When A's request reaches B, B is (1) not submitting it yet:
 * B grants, and B's own later request reaches A while A still holds its
 * reservation (refused: B > A) or its active job (refused); (2) submitting
 * it: B gives its reservation up and fails; (3) past its submit: B has the
 * active job and refuses A. The loop is single-threaded, so each step is
 * atomic. A peer that does not answer (a partition) is logged and left
 * out: availability over a partition, as before. Loop thread only. */
#include <stdlib.h>
#include <string.h>

#include "daemon.h"
#include "px_log.h"

#define PXD_NAME_RESERVE_TIMEOUT_MS 2000

/* A named submit of this node in flight: its reservation of the name. */
typedef struct name_ctx {
    px_daemon_t *d;
    px_rpc_call_t *call;
    Parallax__V1__SubmitJobRequest *req; /* owned copy */
    int pending;                         /* ReserveName calls not answered yet */
    char conflict[PXD_NAME_MAX + PXD_JOB_ID_MAX + 96]; /* why refused; "" granted */
    struct name_ctx *next;
} name_ctx_t;

static name_ctx_t *names_in_flight; /* loop thread only */

typedef struct {
    name_ctx_t *ctx;
    char node[PXD_NAME_MAX];
} name_peer_t;

/* The active job this node coordinates named `name`, or NULL. */
static px_job_t *active_named(px_daemon_t *d, const char *name)
{
    for (px_job_t *j = d->jobs; j; j = j->next)
        if (px_job_is_active(j) && j->spec && j->spec->name && !strcmp(j->spec->name, name))
            return j;
    return NULL;
}

/* This node's own reservation of `name` (not given up), or NULL. */
static name_ctx_t *own_reservation(const char *name)
{
    for (name_ctx_t *c = names_in_flight; c; c = c->next)
        if (!c->conflict[0] && !strcmp(c->req->spec->name, name))
            return c;
    return NULL;
}

/* Whether `name` is held here (an active job, or a submit in flight); if
 * so `call` is failed (ALREADY_EXISTS). */
static int local_name_taken(px_daemon_t *d, px_rpc_call_t *call, const char *name)
{
    px_job_t *j;

    if (!name || !*name)
        return 0;
    if ((j = active_named(d, name))) {
        px_rpc_call_fail(call, GRPC_STATUS_ALREADY_EXISTS, "a job named '%s' is already active: %s",
                         name, j->id);
        return 1;
    }
    for (name_ctx_t *c = names_in_flight; c; c = c->next) {
        if (!strcmp(c->req->spec->name, name)) {
            px_rpc_call_fail(call, GRPC_STATUS_ALREADY_EXISTS,
                             "a job named '%s' is being submitted on node %s", name, d->cfg.name);
            return 1;
        }
    }
    return 0;
}

/* Stores the job of `req` and answers `call` with its id. */
static void submit_now(px_daemon_t *d, px_rpc_call_t *call,
                       const Parallax__V1__SubmitJobRequest *req)
{
    Parallax__V1__SubmitJobResponse resp = PARALLAX__V1__SUBMIT_JOB_RESPONSE__INIT;
    px_job_t *job;
    px_status_t status = px_job_submit(d, req->spec, &job);

    if (status != PX_OK) {
        px_rpc_call_fail(call, px_rpc_code_from_status(status), "cannot store the job: %s",
                         px_status_str(status));
        return;
    }
    resp.job_id = job->id;
    px_rpc_call_reply(call, &resp.base);
    px_job_schedule(d);
}

/* Every peer answered: the reservation is dropped, the job stored unless
 * refused. */
static void name_ctx_done(name_ctx_t *ctx)
{
    px_daemon_t *d = ctx->d;

    for (name_ctx_t **p = &names_in_flight; *p; p = &(*p)->next) {
        if (*p == ctx) {
            *p = ctx->next;
            break;
        }
    }
    if (ctx->conflict[0])
        px_rpc_call_fail(ctx->call, GRPC_STATUS_ALREADY_EXISTS, "a job named '%s' %s",
                         ctx->req->spec->name, ctx->conflict);
    else if (d->stopping)
        px_rpc_call_fail(ctx->call, GRPC_STATUS_UNAVAILABLE, "node %s is stopping", d->cfg.name);
    else
        submit_now(d, ctx->call, ctx->req);
    protobuf_c_message_free_unpacked(&ctx->req->base, NULL);
    free(ctx);
}

static void on_reserve_done(px_daemon_t *d, void *arg, grpc_status_code code,
                            const char *message, const ProtobufCMessage *response)
{
    name_peer_t *np = arg;
    name_ctx_t *ctx = np->ctx;

    (void)d;
    (void)response;
    if (code == GRPC_STATUS_ALREADY_EXISTS) {
        if (!ctx->conflict[0])
            snprintf(ctx->conflict, sizeof(ctx->conflict), "is refused by node %s: %s", np->node,
                     message ? message : "");
    } else if (code != GRPC_STATUS_OK) {
        px_warn("SubmitJob: node %s did not answer the reservation of name '%s' (%s); going "
                "on without it", np->node, ctx->req->spec->name, message ? message : "");
    }
    free(np);
    if (--ctx->pending == 0)
        name_ctx_done(ctx);
}

void px_jobnames_submit(px_daemon_t *d, px_rpc_call_t *call,
                        const Parallax__V1__SubmitJobRequest *req)
{
    Parallax__V1__ReserveNameRequest sub = PARALLAX__V1__RESERVE_NAME_REQUEST__INIT;
    const char *name = req->spec->name;
    name_ctx_t *ctx;
    int alive = 0;

    if (local_name_taken(d, call, name))
        return;
    for (int p = 0; name && *name && p < d->n_peers; p++)
        alive += d->peers[p].alive && d->peers[p].channel && d->peers[p].name[0];
    if (!alive) { /* unnamed (the id is the name), or no peer to ask */
        submit_now(d, call, req);
        return;
    }
    ctx = calloc(1, sizeof(*ctx));
    if (!ctx || !(ctx->req = (Parallax__V1__SubmitJobRequest *)px_msg_dup(&req->base))) {
        free(ctx);
        px_rpc_call_fail(call, GRPC_STATUS_RESOURCE_EXHAUSTED, "out of memory");
        return;
    }
    ctx->d = d;
    ctx->call = call;
    ctx->pending = 1; /* held until every call is started */
    ctx->next = names_in_flight;
    names_in_flight = ctx;
    sub.name = ctx->req->spec->name;
    sub.node = d->cfg.name;
    for (int p = 0; p < d->n_peers; p++) {
        px_peer_t *peer = &d->peers[p];
        name_peer_t *np;
        if (!peer->alive || !peer->channel || !peer->name[0] || !(np = calloc(1, sizeof(*np))))
            continue;
        np->ctx = ctx;
        snprintf(np->node, sizeof(np->node), "%s", peer->name);
        if (px_daemon_call_async(d, peer->channel, "/parallax.v1.Peer/ReserveName", &sub.base,
                                 &parallax__v1__reserve_name_response__descriptor,
                                 PXD_NAME_RESERVE_TIMEOUT_MS, on_reserve_done, np) != PX_OK) {
            free(np);
            continue;
        }
        ctx->pending++;
    }
    if (--ctx->pending == 0)
        name_ctx_done(ctx);
}

void px_jobnames_reserve(px_rpc_call_t *call, const ProtobufCMessage *request, void *arg)
{
    px_daemon_t *d = arg;
    const Parallax__V1__ReserveNameRequest *req = (const void *)request;
    Parallax__V1__ReserveNameResponse resp = PARALLAX__V1__RESERVE_NAME_RESPONSE__INIT;
    px_job_t *j;
    name_ctx_t *own;

    if (!req->name || !*req->name || !req->node || !*req->node) {
        px_rpc_call_fail(call, GRPC_STATUS_INVALID_ARGUMENT, "ReserveName: name and node needed");
        return;
    }
    if ((j = active_named(d, req->name))) {
        px_rpc_call_fail(call, GRPC_STATUS_ALREADY_EXISTS, "a job named '%s' is active: %s",
                         req->name, j->id);
        return;
    }
    own = own_reservation(req->name);
    if (own && strcmp(req->node, d->cfg.name) > 0) {
        px_rpc_call_fail(call, GRPC_STATUS_ALREADY_EXISTS,
                         "node %s is submitting a job named '%s' (ties go to the smaller "
                         "node name)", d->cfg.name, req->name);
        return;
    }
    if (own) { /* the smaller node wins the tie: ours is given up */
        snprintf(own->conflict, sizeof(own->conflict),
                 "is being submitted on node %s at the same time (ties go to the smaller node "
                 "name)", req->node);
        px_info("SubmitJob of '%s': node %s submits it at the same time and wins the tie",
                req->name, req->node);
    }
    px_rpc_call_reply(call, &resp.base);
}
