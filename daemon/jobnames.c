/* jobnames.c: job names unique cluster-wide, each name decided by one
 * member, its owner.
 *
 * The owner of a name is the member ranked first for it by rendezvous
 * hashing (px_jobnames_rank) among the members a node counts alive and
 * itself. A node submitting a named job reserves the name locally (an
 * entry in its in-flight list, which also serialises two submits of one
 * name to this node), then asks the owner (Peer.ReserveName; itself when it
 * is the owner); when the owner does not answer within
 * PXD_NAME_RESERVE_TIMEOUT_MS, the next member by rank, and so on. A
 * submit costs one call, not one per member.
 *
 * The owner keeps a record per name: the node it last granted it (or that
 * registered an active job of it) and the claim it is deciding now; later
 * claims of the name wait for that decision (bounded by the checks'
 * timeout). Deciding a claim, it refuses when it holds the name itself (an
 * active job or a submit in flight here); otherwise it asks the recorded
 * holder, if another node, whether it still holds it (Peer.ReserveName with
 * check: an active job, a submit in flight, a claim it decides), and grants
 * when not. A checked node whose own submit of the name is in flight
 * breaks the tie by node name, as before owners: the smaller name wins
 * (the larger gives its submit up). One loop thread serialises the owner's
 * decisions, so of two concurrent submits of one name to one owner the
 * second finds the first granted and still in flight or active at its node.
 *
 * Membership changes. The owner decides alone only when it is the first
 * of every member it knows, alive or dead, and has run for at least
 * peer-dead-ms (the time in which every holder has seen it alive and
 * registered its active names with it: px_jobnames_member_up). Otherwise -
 * it inherits the name from a member it counts dead, which may be merely
 * slow, or it joined or restarted lately and its records may miss names -
 * it asks every member it knows (dead ones too, each bounded by the
 * timeout) with check before granting. So a name is not granted twice
 * while its holder, or the owner deciding a claim of it, answers within
 * PXD_NAME_RESERVE_TIMEOUT_MS, whoever the submitters think the owner is;
 * a holder that does not answer (a partition) is logged and left out:
 * availability over a partition, as before. The O(N) round is paid only for
 * names whose first-ranked member is dead, and during an owner's first
 * peer-dead-ms. Two owners deciding claims of one name at once (members
 * disagreeing on who is alive) each find the other's claim: both refuse,
 * none grants twice. Records are kept for the daemon's life (one per name
 * ever decided here). Loop thread only. */
#include <stdlib.h>
#include <string.h>

#include "daemon.h"
#include "px_log.h"
#include "px_time.h"

#define PXD_NAME_RESERVE_TIMEOUT_MS 2000
#define PXD_NAME_WHY_MAX (PXD_NAME_MAX * 2 + PXD_JOB_ID_MAX + 512)

/* A named submit of this node in flight: its local reservation. */
typedef struct name_ctx {
    px_daemon_t *d;
    px_rpc_call_t *call;
    Parallax__V1__SubmitJobRequest *req; /* owned copy */
    uint64_t below;                      /* rank of the member last asked; the next one
                                          * asked is the first ranked below it */
    int asked;                           /* members asked so far */
    char conflict[PXD_NAME_WHY_MAX];     /* why refused; "" granted */
    struct name_ctx *next;
} name_ctx_t;

/* The owner's record of a name. */
typedef struct name_rec {
    char *name;
    char holder[PXD_NAME_MAX];   /* node granted it last or holding it; "" none */
    char claimant[PXD_NAME_MAX]; /* the claim being decided now; "" none */
    struct decide *waiting;      /* claims decided after it, first first */
    struct name_rec *next;
} name_rec_t;

/* A claim the owner decides: checks in flight. */
typedef struct decide {
    px_daemon_t *d;
    name_rec_t *rec;
    char claimant[PXD_NAME_MAX];
    px_rpc_call_t *call; /* a remote claimant's ReserveName, or NULL */
    name_ctx_t *ctx;     /* this node's own submit, or NULL */
    int pending;
    char conflict[PXD_NAME_WHY_MAX];
    struct decide *next; /* in rec->waiting */
} decide_t;

typedef struct {
    decide_t *dc;
    char node[PXD_NAME_MAX];
} check_t;

static name_ctx_t *names_in_flight; /* loop thread only */
static name_rec_t *records;         /* loop thread only */

static void ask_next(name_ctx_t *ctx);
static void decide_start(decide_t *dc);

/* The active job this node coordinates named `name`, or NULL. */
static px_job_t *active_named(px_daemon_t *d, const char *name)
{
    for (px_job_t *j = d->jobs; j; j = j->next)
        if (px_job_is_active(j) && j->spec && j->spec->name && !strcmp(j->spec->name, name))
            return j;
    return NULL;
}

/* This node's submit of `name` in flight and not given up, or NULL. */
static name_ctx_t *in_flight(const char *name)
{
    for (name_ctx_t *c = names_in_flight; c; c = c->next)
        if (!c->conflict[0] && !strcmp(c->req->spec->name, name))
            return c;
    return NULL;
}

static name_rec_t *record(const char *name)
{
    name_rec_t *r;

    for (r = records; r; r = r->next)
        if (!strcmp(r->name, name))
            return r;
    if (!(r = calloc(1, sizeof(*r))) || !(r->name = strdup(name))) {
        free(r);
        return NULL;
    }
    r->next = records;
    records = r;
    return r;
}

/* Whether this node holds `name` against `claimant` (an active job, a
 * submit of its own in flight, a claim decided here for another node); if
 * so the reason goes to why. Its own submit in flight loses to a claimant
 * with a smaller node name when `tie` (a check: two submits of one name
 * decided by two owners, or by one owner that asks the other submitter):
 * the submit is given up and the claimant not refused for it. */
static int holds(px_daemon_t *d, const char *name, const char *claimant, int tie, char *why,
                 size_t n)
{
    px_job_t *j;
    name_rec_t *r;
    name_ctx_t *own;
    int self = !strcmp(claimant, d->cfg.name);

    if ((j = active_named(d, name))) {
        snprintf(why, n, "a job named '%s' is already active on node %s: %s", name, d->cfg.name,
                 j->id);
        return 1;
    }
    if (!self && (own = in_flight(name))) {
        if (tie && strcmp(claimant, d->cfg.name) < 0) {
            snprintf(own->conflict, sizeof(own->conflict),
                     "a job named '%s' is being submitted on node %s at the same time (ties go "
                     "to the smaller node name)", name, claimant);
            px_info("SubmitJob of '%s': node %s submits it at the same time and wins the tie",
                    name, claimant);
        } else {
            snprintf(why, n, "a job named '%s' is being submitted on node %s%s", name,
                     d->cfg.name, tie ? " (ties go to the smaller node name)" : "");
            return 1;
        }
    }
    for (r = records; r; r = r->next) {
        if (!strcmp(r->name, name) && r->claimant[0] && strcmp(r->claimant, claimant)) {
            snprintf(why, n, "a job named '%s' is being submitted on node %s (its owner %s "
                     "decides it)", name, r->claimant, d->cfg.name);
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

/* This node's submit was decided: the local reservation is dropped, the job
 * stored unless refused. */
static void own_done(name_ctx_t *ctx)
{
    px_daemon_t *d = ctx->d;

    for (name_ctx_t **p = &names_in_flight; *p; p = &(*p)->next) {
        if (*p == ctx) {
            *p = ctx->next;
            break;
        }
    }
    if (ctx->conflict[0])
        px_rpc_call_fail(ctx->call, GRPC_STATUS_ALREADY_EXISTS, "%s", ctx->conflict);
    else if (d->stopping)
        px_rpc_call_fail(ctx->call, GRPC_STATUS_UNAVAILABLE, "node %s is stopping", d->cfg.name);
    else
        submit_now(d, ctx->call, ctx->req);
    protobuf_c_message_free_unpacked(&ctx->req->base, NULL);
    free(ctx);
}

/* Every check answered: the claim is granted (recorded as the holder) or
 * refused. */
static void decide_done(decide_t *dc)
{
    Parallax__V1__ReserveNameResponse resp = PARALLAX__V1__RESERVE_NAME_RESPONSE__INIT;

    name_rec_t *rec = dc->rec;
    decide_t *next;

    rec->claimant[0] = '\0';
    if (!dc->conflict[0])
        snprintf(rec->holder, sizeof(rec->holder), "%s", dc->claimant);
    if (dc->ctx) {
        if (dc->conflict[0]) /* else a conflict set meanwhile (a lost tie) stays */
            snprintf(dc->ctx->conflict, sizeof(dc->ctx->conflict), "%s", dc->conflict);
        own_done(dc->ctx);
    } else if (dc->conflict[0]) {
        px_rpc_call_fail(dc->call, GRPC_STATUS_ALREADY_EXISTS, "%s", dc->conflict);
    } else {
        px_rpc_call_reply(dc->call, &resp.base);
    }
    free(dc);
    if ((next = rec->waiting)) { /* the next claim, decided against this outcome */
        rec->waiting = next->next;
        decide_start(next);
    }
}

static void on_check_done(px_daemon_t *d, void *arg, grpc_status_code code, const char *message,
                          const ProtobufCMessage *response)
{
    check_t *ck = arg;
    decide_t *dc = ck->dc;

    (void)d;
    (void)response;
    if (code == GRPC_STATUS_ALREADY_EXISTS) {
        if (!dc->conflict[0])
            snprintf(dc->conflict, sizeof(dc->conflict), "%s", message ? message : "");
        snprintf(dc->rec->holder, sizeof(dc->rec->holder), "%s", ck->node);
    } else if (code == GRPC_STATUS_OK) {
        if (!strcmp(dc->rec->holder, ck->node)) /* it no longer holds it */
            dc->rec->holder[0] = '\0';
    } else {
        px_debug("job name '%s': node %s did not answer whether it holds it (%s); left out",
                 dc->rec->name, ck->node, message ? message : "");
    }
    free(ck);
    if (--dc->pending == 0)
        decide_done(dc);
}

/* Whether this node may decide `name` from its records alone: it is the
 * first ranked of every member it knows, alive or dead, and has run for
 * peer-dead-ms (see the file's comment). */
static int authoritative(px_daemon_t *d, const char *name)
{
    uint64_t mine = px_jobnames_rank(name, d->cfg.name);

    if (px_time_mono_ms() - d->start_mono_ms < d->cfg.peer_dead_ms)
        return 0;
    for (int p = 0; p < d->n_peers; p++)
        if (d->peers[p].name[0] && px_jobnames_rank(name, d->peers[p].name) > mine)
            return 0;
    return 1;
}

/* Answers a claim refused before any check: dc->conflict. */
static void decide_refuse(decide_t *dc)
{
    if (dc->ctx) {
        snprintf(dc->ctx->conflict, sizeof(dc->ctx->conflict), "%s", dc->conflict);
        own_done(dc->ctx);
    } else {
        px_rpc_call_fail(dc->call, GRPC_STATUS_ALREADY_EXISTS, "%s", dc->conflict);
    }
    free(dc);
}

/* Decides the claim of dc (no other claim of the name is decided now):
 * refused when this node holds the name, else checked with the recorded
 * holder (or every member when not authoritative), then decide_done. */
static void decide_start(decide_t *dc)
{
    Parallax__V1__ReserveNameRequest sub = PARALLAX__V1__RESERVE_NAME_REQUEST__INIT;
    px_daemon_t *d = dc->d;
    name_rec_t *rec = dc->rec;
    int alone;

    if (holds(d, rec->name, dc->claimant, 0, dc->conflict, sizeof(dc->conflict))) {
        decide_refuse(dc);
        if ((dc = rec->waiting)) {
            rec->waiting = dc->next;
            decide_start(dc);
        }
        return;
    }
    snprintf(rec->claimant, sizeof(rec->claimant), "%s", dc->claimant);
    alone = authoritative(d, rec->name);
    sub.name = rec->name;
    sub.node = dc->claimant;
    sub.check = 1;
    dc->pending = 1; /* held until every check is started */
    for (int p = 0; p < d->n_peers; p++) {
        px_peer_t *peer = &d->peers[p];
        check_t *ck;
        if (!peer->name[0] || !peer->channel || !strcmp(peer->name, dc->claimant))
            continue;
        if (alone && strcmp(peer->name, rec->holder))
            continue;
        if (!(ck = calloc(1, sizeof(*ck))))
            continue;
        ck->dc = dc;
        snprintf(ck->node, sizeof(ck->node), "%s", peer->name);
        if (px_daemon_call_async(d, peer->channel, "/parallax.v1.Peer/ReserveName", &sub.base,
                                 &parallax__v1__reserve_name_response__descriptor,
                                 PXD_NAME_RESERVE_TIMEOUT_MS, on_check_done, ck) != PX_OK) {
            free(ck);
            continue;
        }
        dc->pending++;
    }
    if (--dc->pending == 0)
        decide_done(dc);
}

/* This node, as the owner of `name`, decides the claim of `claimant`
 * (after the claim decided now, if any); the answer goes to `call` (a
 * remote claimant) or `ctx` (its own submit). */
static void decide(px_daemon_t *d, const char *name, const char *claimant, px_rpc_call_t *call,
                   name_ctx_t *ctx)
{
    name_rec_t *rec = record(name);
    decide_t *dc = calloc(1, sizeof(*dc)), **tail;

    if (!rec || !dc) {
        free(dc);
        if (ctx) {
            snprintf(ctx->conflict, sizeof(ctx->conflict), "out of memory deciding name '%s'",
                     name);
            own_done(ctx);
        } else {
            px_rpc_call_fail(call, GRPC_STATUS_RESOURCE_EXHAUSTED, "out of memory");
        }
        return;
    }
    dc->d = d;
    dc->rec = rec;
    dc->call = call;
    dc->ctx = ctx;
    snprintf(dc->claimant, sizeof(dc->claimant), "%s", claimant);
    if (rec->claimant[0]) { /* one at a time: bounded by the checks' timeout */
        for (tail = &rec->waiting; *tail; tail = &(*tail)->next)
            ;
        *tail = dc;
        return;
    }
    decide_start(dc);
}

static void on_owner_done(px_daemon_t *d, void *arg, grpc_status_code code, const char *message,
                          const ProtobufCMessage *response)
{
    name_ctx_t *ctx = arg;

    (void)response;
    if (code == GRPC_STATUS_OK || code == GRPC_STATUS_ALREADY_EXISTS) {
        if (code == GRPC_STATUS_ALREADY_EXISTS)
            snprintf(ctx->conflict, sizeof(ctx->conflict), "%s", message ? message : "");
        own_done(ctx);
        return;
    }
    px_warn("SubmitJob: the owner of name '%s' did not answer (%s); asking the next member",
            ctx->req->spec->name, message ? message : "");
    (void)d;
    ask_next(ctx);
}

/* Asks the alive member (or this node) ranked first below ctx->below for
 * the name of ctx's submit. */
static void ask_next(name_ctx_t *ctx)
{
    Parallax__V1__ReserveNameRequest sub = PARALLAX__V1__RESERVE_NAME_REQUEST__INIT;
    px_daemon_t *d = ctx->d;
    const char *name = ctx->req->spec->name;
    uint64_t best = px_jobnames_rank(name, d->cfg.name), r;
    px_peer_t *owner = NULL;

    if (ctx->asked && best >= ctx->below)
        best = 0;
    for (int p = 0; p < d->n_peers; p++) {
        px_peer_t *peer = &d->peers[p];
        if (!peer->alive || !peer->channel || !peer->name[0])
            continue;
        r = px_jobnames_rank(name, peer->name);
        if ((!ctx->asked || r < ctx->below) && r > best) {
            best = r;
            owner = peer;
        }
    }
    ctx->below = best;
    ctx->asked++;
    if (!owner) {
        decide(d, name, d->cfg.name, NULL, ctx);
        return;
    }
    sub.name = (char *)name;
    sub.node = d->cfg.name;
    if (px_daemon_call_async(d, owner->channel, "/parallax.v1.Peer/ReserveName", &sub.base,
                             &parallax__v1__reserve_name_response__descriptor,
                             PXD_NAME_RESERVE_TIMEOUT_MS, on_owner_done, ctx) != PX_OK)
        ask_next(ctx);
}

void px_jobnames_submit(px_daemon_t *d, px_rpc_call_t *call,
                        const Parallax__V1__SubmitJobRequest *req)
{
    const char *name = req->spec->name;
    name_ctx_t *ctx;
    px_job_t *j;

    if (!name || !*name) { /* unnamed: the id is the name */
        submit_now(d, call, req);
        return;
    }
    if ((j = active_named(d, name))) {
        px_rpc_call_fail(call, GRPC_STATUS_ALREADY_EXISTS, "a job named '%s' is already active: %s",
                         name, j->id);
        return;
    }
    if (in_flight(name)) {
        px_rpc_call_fail(call, GRPC_STATUS_ALREADY_EXISTS,
                         "a job named '%s' is being submitted on node %s", name, d->cfg.name);
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
    ctx->next = names_in_flight;
    names_in_flight = ctx;
    ask_next(ctx);
}

static void on_held_done(px_daemon_t *d, void *arg, grpc_status_code code, const char *message,
                         const ProtobufCMessage *response)
{
    (void)d;
    (void)response;
    if (code != GRPC_STATUS_OK)
        px_debug("job name '%s' not registered with its owner (%s)", (char *)arg,
                 message ? message : "");
    free(arg);
}

void px_jobnames_member_up(px_daemon_t *d, const px_peer_t *peer)
{
    Parallax__V1__ReserveNameRequest sub = PARALLAX__V1__RESERVE_NAME_REQUEST__INIT;

    if (!peer->name[0] || !peer->channel)
        return;
    for (px_job_t *j = d->jobs; j; j = j->next) {
        const char *name = j->spec ? j->spec->name : NULL;
        uint64_t theirs, mine;
        int first = 1;
        char *arg;
        if (!name || !*name || !px_job_is_active(j))
            continue;
        theirs = px_jobnames_rank(name, peer->name);
        mine = px_jobnames_rank(name, d->cfg.name);
        if (mine > theirs)
            continue;
        for (int p = 0; first && p < d->n_peers; p++)
            first = !d->peers[p].alive || !d->peers[p].name[0] ||
                    px_jobnames_rank(name, d->peers[p].name) <= theirs;
        if (!first || !(arg = strdup(name)))
            continue;
        sub.name = (char *)name;
        sub.node = d->cfg.name;
        sub.held = 1;
        if (px_daemon_call_async(d, peer->channel, "/parallax.v1.Peer/ReserveName", &sub.base,
                                 &parallax__v1__reserve_name_response__descriptor,
                                 PXD_NAME_RESERVE_TIMEOUT_MS, on_held_done, arg) != PX_OK)
            free(arg);
    }
}

void px_jobnames_reserve(px_rpc_call_t *call, const ProtobufCMessage *request, void *arg)
{
    px_daemon_t *d = arg;
    const Parallax__V1__ReserveNameRequest *req = (const void *)request;
    Parallax__V1__ReserveNameResponse resp = PARALLAX__V1__RESERVE_NAME_RESPONSE__INIT;
    char why[PXD_NAME_WHY_MAX];
    name_rec_t *rec;

    if (!req->name || !*req->name || !req->node || !*req->node) {
        px_rpc_call_fail(call, GRPC_STATUS_INVALID_ARGUMENT, "ReserveName: name and node needed");
        return;
    }
    if (req->check) {
        if (holds(d, req->name, req->node, 1, why, sizeof(why)))
            px_rpc_call_fail(call, GRPC_STATUS_ALREADY_EXISTS, "%s", why);
        else
            px_rpc_call_reply(call, &resp.base);
        return;
    }
    if (req->held) {
        if (!(rec = record(req->name))) {
            px_rpc_call_fail(call, GRPC_STATUS_RESOURCE_EXHAUSTED, "out of memory");
            return;
        }
        if (rec->holder[0] && strcmp(rec->holder, req->node))
            px_warn("job name '%s': node %s holds an active job of it, recorded for node %s",
                    req->name, req->node, rec->holder);
        snprintf(rec->holder, sizeof(rec->holder), "%s", req->node);
        px_rpc_call_reply(call, &resp.base);
        return;
    }
    decide(d, req->name, req->node, call, NULL);
}
