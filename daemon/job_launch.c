/* job_launch.c: a placed job's ranks on their nodes: LaunchRanks to each
 * node (this one included), the rendezvous (every rank's RegisterRank is
 * held until all have registered, then answered with the full address
 * table, within PX_CONNECT_TIMEOUT_MS) and StopRanks to every node holding
 * ranks. Loop thread only. */
#include <stdlib.h>
#include <string.h>

#include "daemon.h"
#include "job_int.h"
#include "px_log.h"
#include "px_env.h"
#include "px_time.h"

typedef struct {
    char job_id[PXD_JOB_ID_MAX];
    char node[PXD_NAME_MAX];
} job_node_ctx_t;

static void on_stop_ranks_done(px_daemon_t *d, void *arg, grpc_status_code code,
                               const char *message, const ProtobufCMessage *response)
{
    job_node_ctx_t *ctx = arg;
    if (code != GRPC_STATUS_OK)
        px_warn("job %s: StopRanks on node %s failed: %s", ctx->job_id, ctx->node,
                message ? message : "");
    free(ctx);
}

/* Sends StopRanks to every node holding ranks of `job` (self directly). */
void px__job_stop_ranks(px_job_t *job)
{
    px_daemon_t *d = job->d;
    Parallax__V1__StopRanksRequest req = PARALLAX__V1__STOP_RANKS_REQUEST__INIT;

    req.job_id = job->id;
    req.reason = job->reason;
    for (int r = 0; r < job->world; r++) {
        const char *node = job->ranks[r].node;
        int seen = 0;
        job_node_ctx_t *ctx;
        for (int q = 0; q < r; q++)
            if (!strcmp(job->ranks[q].node, node))
                seen = 1;
        if (seen || !node[0])
            continue;
        ctx = calloc(1, sizeof(*ctx));
        if (!ctx)
            continue;
        snprintf(ctx->job_id, sizeof(ctx->job_id), "%s", job->id);
        snprintf(ctx->node, sizeof(ctx->node), "%s", node);
        if (px_peerc_call(d, node, "StopRanks", &req.base,
                          &parallax__v1__stop_ranks_response__descriptor, PXD_RPC_TIMEOUT_MS,
                          (int)px_env_int("PX_PEER_DEAD_MS"), 1, on_stop_ranks_done,
                          ctx) != PX_OK)
            free(ctx);
    }
}

static void on_rdv_timeout(uv_timer_t *t)
{
    px_job_t *job = t->data;
    char missing[256] = "";
    size_t off = 0;

    job->rdv_timer_active = 0;
    if (job->state != PARALLAX__V1__JOB_STATE__JOB_STARTING)
        return;
    for (int r = 0; r < job->world && off < sizeof(missing) - 16; r++)
        if (!job->ranks[r].registered)
            off += (size_t)snprintf(missing + off, sizeof(missing) - off, "%s%d", off ? "," : "",
                                    r);
    px_job_finish(job, PARALLAX__V1__JOB_STATE__JOB_FAILED,
                  "rendezvous timed out after %ld ms: rank(s) %s did not register",
                  px_env_int("PX_CONNECT_TIMEOUT_MS"), missing);
}

static void apply_launch_response(px_job_t *job, const Parallax__V1__LaunchRanksResponse *resp)
{
    for (size_t i = 0; i < resp->n_ranks; i++) {
        const Parallax__V1__RankInfo *ri = resp->ranks[i];
        if (ri->rank < (uint32_t)job->world) {
            px_job_rank_t *jr = &job->ranks[ri->rank];
            if (!jr->pid)
                jr->pid = ri->pid;
            if (!strcmp(jr->state, "pending"))
                snprintf(jr->state, sizeof(jr->state), "launching");
        }
    }
}

static void on_launch_done(px_daemon_t *d, void *arg, grpc_status_code code,
                           const char *message, const ProtobufCMessage *response)
{
    job_node_ctx_t *ctx = arg;
    px_job_t *job = px_job_find(d, ctx->job_id);

    if (job && px__job_is_placed_active(job)) {
        if (code != GRPC_STATUS_OK)
            px_job_finish(job, PARALLAX__V1__JOB_STATE__JOB_FAILED,
                          "node %s could not launch ranks: %s", ctx->node,
                          message ? message : "no answer");
        else {
            apply_launch_response(job, (const Parallax__V1__LaunchRanksResponse *)response);
            px__job_save(job);
            if (job->ending) /* decided while this launch was on its way */
                px__job_stop_ranks(job);
        }
    }
    free(ctx);
}

/* Sends LaunchRanks to each node of a freshly placed job. */
static void launch(px_job_t *job)
{
    px_daemon_t *d = job->d;
    Parallax__V1__LaunchRanksRequest req = PARALLAX__V1__LAUNCH_RANKS_REQUEST__INIT;
    Parallax__V1__RankAssignment *assign = calloc((size_t)job->world, sizeof(*assign));
    Parallax__V1__RankAssignment **ptrs = calloc((size_t)job->world, sizeof(*ptrs));

    if (!assign || !ptrs) {
        free(assign);
        free(ptrs);
        px_job_finish(job, PARALLAX__V1__JOB_STATE__JOB_FAILED, "out of memory at launch");
        return;
    }
    req.job_id = job->id;
    req.spec = job->spec;
    req.world_size = (uint32_t)job->world;
    req.coordinator_peer_addr = d->peer_addr;
    req.coordinator = d->cfg.name;
    req.ranks = ptrs;
    { /* the ranks' MFU counts each GPU once, however many slots it lends */
        const char **nodes = calloc((size_t)job->world, sizeof(*nodes));
        const char **devs = calloc((size_t)job->world, sizeof(*devs));
        for (int r = 0; nodes && devs && r < job->world; r++) {
            nodes[r] = job->ranks[r].node;
            devs[r] = job->ranks[r].device;
        }
        if (nodes && devs)
            req.physical_devices =
                (uint32_t)px_supervisor_physical_devices(nodes, devs, job->world);
        free(nodes);
        free(devs);
    }
    for (int r = 0; r < job->world && px__job_is_placed_active(job) && !job->ending; r++) {
        const char *node = job->ranks[r].node;
        int seen = 0;
        for (int q = 0; q < r; q++)
            if (!strcmp(job->ranks[q].node, node))
                seen = 1;
        if (seen)
            continue;
        req.n_ranks = 0;
        for (int q = r; q < job->world; q++) {
            if (strcmp(job->ranks[q].node, node))
                continue;
            parallax__v1__rank_assignment__init(&assign[req.n_ranks]);
            assign[req.n_ranks].rank = (uint32_t)q;
            assign[req.n_ranks].device = job->ranks[q].device;
            ptrs[req.n_ranks] = &assign[req.n_ranks];
            req.n_ranks++;
        }
        { /* this node's supervisor or a peer's (peerc.c) */
            job_node_ctx_t *ctx = calloc(1, sizeof(*ctx));
            px_status_t status = PX_ERR_NO_MEMORY;
            if (ctx) {
                snprintf(ctx->job_id, sizeof(ctx->job_id), "%s", job->id);
                snprintf(ctx->node, sizeof(ctx->node), "%s", node);
                status = px_peerc_call(d, node, "LaunchRanks", &req.base,
                                       &parallax__v1__launch_ranks_response__descriptor,
                                       PXD_RPC_TIMEOUT_MS, 5000, 0, on_launch_done, ctx);
            }
            if (status != PX_OK) {
                free(ctx);
                px_job_finish(job, PARALLAX__V1__JOB_STATE__JOB_FAILED,
                              "node %s could not be asked to launch ranks: %s", node,
                              px_status_str(status));
            }
        }
    }
    free(assign);
    free(ptrs);
    if (px__job_is_placed_active(job))
        px__job_save(job);
}

void px_job_register_rank(px_daemon_t *d, px_rpc_call_t *call,
                          const Parallax__V1__RegisterRankRequest *req)
{
    px_job_t *job = px_job_find(d, req->job_id);
    px_job_rank_t *jr;
    Parallax__V1__RegisterRankResponse resp = PARALLAX__V1__REGISTER_RANK_RESPONSE__INIT;

    if (!job) {
        px_rpc_call_fail(call, GRPC_STATUS_NOT_FOUND, "job %s is not coordinated by node %s",
                         req->job_id, d->cfg.name);
        return;
    }
    if (job->state != PARALLAX__V1__JOB_STATE__JOB_STARTING) {
        px_rpc_call_fail(call, GRPC_STATUS_FAILED_PRECONDITION, "job %s is %s", job->id,
                         px__job_state_name(job->state));
        return;
    }
    if (req->rank >= (uint32_t)job->world) {
        px_rpc_call_fail(call, GRPC_STATUS_INVALID_ARGUMENT, "rank %u: job %s has world size %d",
                         req->rank, job->id, job->world);
        return;
    }
    jr = &job->ranks[req->rank];
    if (jr->held)
        px_rpc_call_fail(jr->held, GRPC_STATUS_ABORTED, "rank %u registered again", req->rank);
    free(jr->ucx_addr.data);
    jr->ucx_addr.data = malloc(req->ucx_address.len ? req->ucx_address.len : 1);
    if (!jr->ucx_addr.data) {
        jr->held = NULL;
        px_rpc_call_fail(call, GRPC_STATUS_RESOURCE_EXHAUSTED, "out of memory");
        return;
    }
    memcpy(jr->ucx_addr.data, req->ucx_address.data, req->ucx_address.len);
    jr->ucx_addr.len = req->ucx_address.len;
    jr->held = call;
    if (req->pid)
        jr->pid = req->pid;
    if (!jr->registered) {
        jr->registered = 1;
        job->n_registered++;
    }
    snprintf(jr->state, sizeof(jr->state), "running");
    px_debug("job %s: rank %u registered (%d/%d)", job->id, req->rank, job->n_registered,
             job->world);
    if (job->n_registered < job->world)
        return;

    resp.world_size = (uint32_t)job->world;
    resp.n_ucx_addresses = (size_t)job->world;
    resp.ucx_addresses = calloc((size_t)job->world, sizeof(*resp.ucx_addresses));
    resp.n_nodes = (size_t)job->world;
    resp.nodes = calloc((size_t)job->world, sizeof(*resp.nodes));
    if (!resp.ucx_addresses || !resp.nodes) {
        free(resp.ucx_addresses);
        free(resp.nodes);
        px_job_finish(job, PARALLAX__V1__JOB_STATE__JOB_FAILED, "out of memory at rendezvous");
        return;
    }
    for (int r = 0; r < job->world; r++) {
        resp.ucx_addresses[r] = job->ranks[r].ucx_addr;
        resp.nodes[r] = job->ranks[r].node;
    }
    for (int r = 0; r < job->world; r++) {
        px_rpc_call_reply(job->ranks[r].held, &resp.base);
        job->ranks[r].held = NULL;
    }
    free(resp.ucx_addresses);
    free(resp.nodes);
    if (job->rdv_timer_active) {
        uv_timer_stop(&job->rdv_timer);
        job->rdv_timer_active = 0;
    }
    job->state = PARALLAX__V1__JOB_STATE__JOB_RUNNING;
    job->started_ms = px_time_wall_ms();
    px__job_save(job);
    px__job_event(job, "RUNNING: all %d ranks registered", job->world);
    px__job_watchers_notify(job, NULL);
}

void px__job_launch(px_job_t *job)
{
    uv_timer_start(&job->rdv_timer, on_rdv_timeout, (uint64_t)px_env_int("PX_CONNECT_TIMEOUT_MS"),
                   0);
    job->rdv_timer_active = 1;
    launch(job);
}
