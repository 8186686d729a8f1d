/* peer.c: the Peer service, on --peer-listen: daemon <-> daemon
 * (Heartbeat and IndirectProbe: SWIM membership, membership.c; LaunchRanks, StopRanks, RankExited, GetRankLog, ListJobs,
 * ReserveName, SetNodeState: drain.c) and rank ->
 * coordinator (RegisterRank, held until the rendezvous completes;
 * ReportProgress). Handlers run on the loop thread. */
#include <stdlib.h>
#include <string.h>

#include "daemon.h"
#include "px_log.h"

#define P_PEER "/parallax.v1.Peer/"

/* Answers a Peer call with what this node's local handler gave. */
static void answer(px_daemon_t *d, void *arg, grpc_status_code code, const char *message,
                   const ProtobufCMessage *response)
{
    px_rpc_call_t *call = arg;
    (void)d;
    if (code == GRPC_STATUS_OK)
        px_rpc_call_reply(call, response);
    else
        px_rpc_call_fail(call, code, "%s", message ? message : "");
}

/* LaunchRanks, StopRanks, RankExited: served by the handlers this node
 * registered for the Peer client (supervisor.c, job.c), the same code a
 * call from this node to itself runs (peerc.c). */
static void serve_here(px_rpc_call_t *call, const ProtobufCMessage *request, px_daemon_t *d,
                       const char *method)
{
    if (px_peerc_call(d, d->cfg.name, method, request, NULL, 0, 0, 0, answer, call) != PX_OK)
        px_rpc_call_fail(call, GRPC_STATUS_UNIMPLEMENTED, "%s not served on node %s", method,
                         d->cfg.name);
}

static void h_launch(px_rpc_call_t *call, const ProtobufCMessage *request, void *arg)
{
    serve_here(call, request, arg, "LaunchRanks");
}

static void h_stop(px_rpc_call_t *call, const ProtobufCMessage *request, void *arg)
{
    serve_here(call, request, arg, "StopRanks");
}

static void h_rank_exited(px_rpc_call_t *call, const ProtobufCMessage *request, void *arg)
{
    serve_here(call, request, arg, "RankExited");
}

static void h_register(px_rpc_call_t *call, const ProtobufCMessage *request, void *arg)
{
    px_job_register_rank(arg, call, (const Parallax__V1__RegisterRankRequest *)request);
}

static void h_progress(px_rpc_call_t *call, const ProtobufCMessage *request, void *arg)
{
    px_daemon_t *d = arg;
    Parallax__V1__ReportProgressResponse resp = PARALLAX__V1__REPORT_PROGRESS_RESPONSE__INIT;

    resp.stop = px_job_progress(d, (const Parallax__V1__ReportProgressRequest *)request) != 0;
    px_rpc_call_reply(call, &resp.base);
}

static void h_rank_log(px_rpc_call_t *call, const ProtobufCMessage *request, void *arg)
{
    px_daemon_t *d = arg;
    const Parallax__V1__GetLogsRequest *req = (const void *)request;
    Parallax__V1__GetLogsResponse resp = PARALLAX__V1__GET_LOGS_RESPONSE__INIT;
    uint8_t *text = NULL;
    size_t len = 0;
    px_status_t status;

    status = px_supervisor_read_log(d, req->job_id, (int)req->rank, req->tail_bytes, &text, &len);
    if (status != PX_OK) {
        px_rpc_call_fail(call, px_rpc_code_from_status(status),
                         "log of job %s rank %u on node %s: %s", req->job_id, req->rank,
                         d->cfg.name, px_status_str(status));
        return;
    }
    resp.text.data = text;
    resp.text.len = len;
    px_rpc_call_reply(call, &resp.base);
    free(text);
}

const px_rpc_method_t px_peer_methods[] = {
    {P_PEER "Heartbeat", &parallax__v1__heartbeat_request__descriptor, 0, px_membership_ping,
     NULL},
    {P_PEER "IndirectProbe", &parallax__v1__indirect_probe_request__descriptor, 0,
     px_membership_indirect, NULL},
    {P_PEER "LaunchRanks", &parallax__v1__launch_ranks_request__descriptor, 0, h_launch, NULL},
    {P_PEER "StopRanks", &parallax__v1__stop_ranks_request__descriptor, 0, h_stop, NULL},
    {P_PEER "RankExited", &parallax__v1__rank_exited_request__descriptor, 0, h_rank_exited, NULL},
    {P_PEER "RegisterRank", &parallax__v1__register_rank_request__descriptor, 0, h_register, NULL},
    {P_PEER "ReportProgress", &parallax__v1__report_progress_request__descriptor, 0, h_progress,
     NULL},
    {P_PEER "GetRankLog", &parallax__v1__get_logs_request__descriptor, 0, h_rank_log, NULL},
    {P_PEER "ListJobs", &parallax__v1__list_jobs_request__descriptor, 0, px_control_list_local,
     NULL},
    {P_PEER "ReserveName", &parallax__v1__reserve_name_request__descriptor, 0,
     px_jobnames_reserve, NULL},
    {P_PEER "SetNodeState", &parallax__v1__set_node_state_request__descriptor, 0, px_drain_peer,
     NULL},
};
const size_t px_peer_n_methods = sizeof(px_peer_methods) / sizeof(px_peer_methods[0]);
