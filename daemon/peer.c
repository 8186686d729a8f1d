/* peer.c: the Peer service, on --peer-listen: daemon <-> daemon
 * (Heartbeat, LaunchRanks, StopRanks, RankExited, GetRankLog) and rank ->
 * coordinator (RegisterRank, held until the rendezvous completes;
 * ReportProgress). Handlers run on the loop thread. */
#include <stdlib.h>
#include <string.h>

#include "daemon.h"
#include "px_log.h"

#define P_PEER "/parallax.v1.Peer/"

static void h_heartbeat(px_rpc_call_t *call, const ProtobufCMessage *request, void *arg)
{
    px_daemon_t *d = arg;
    const Parallax__V1__HeartbeatRequest *req = (const void *)request;
    Parallax__V1__HeartbeatResponse resp = PARALLAX__V1__HEARTBEAT_RESPONSE__INIT;
    Parallax__V1__NodeInfo self;

    px_nodes_heard(d, req->node);
    px_nodes_self_info(d, &self);
    resp.node = &self;
    px_rpc_call_reply(call, &resp.base);
    px_nodes_info_free(&self);
}

static void h_launch(px_rpc_call_t *call, const ProtobufCMessage *request, void *arg)
{
    px_daemon_t *d = arg;
    const Parallax__V1__LaunchRanksRequest *req = (const void *)request;
    Parallax__V1__LaunchRanksResponse resp = PARALLAX__V1__LAUNCH_RANKS_RESPONSE__INIT;
    char err[512] = "";
    px_status_t status = px_supervisor_launch(d, req, &resp, err, sizeof(err));

    if (status != PX_OK) {
        px_rpc_call_fail(call, px_rpc_code_from_status(status), "%s", err);
        return;
    }
    px_rpc_call_reply(call, &resp.base);
    px_supervisor_resp_free(&resp);
}

static void h_stop(px_rpc_call_t *call, const ProtobufCMessage *request, void *arg)
{
    px_daemon_t *d = arg;
    const Parallax__V1__StopRanksRequest *req = (const void *)request;
    Parallax__V1__StopRanksResponse resp = PARALLAX__V1__STOP_RANKS_RESPONSE__INIT;

    px_supervisor_stop_job(d, req->job_id, req->reason);
    px_rpc_call_reply(call, &resp.base);
}

static void h_rank_exited(px_rpc_call_t *call, const ProtobufCMessage *request, void *arg)
{
    px_daemon_t *d = arg;
    const Parallax__V1__RankExitedRequest *req = (const void *)request;
    Parallax__V1__RankExitedResponse resp = PARALLAX__V1__RANK_EXITED_RESPONSE__INIT;

    px_job_rank_exited(d, req->job_id, (int)req->rank, req->node, req->exit_code, req->detail);
    px_rpc_call_reply(call, &resp.base);
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
    {P_PEER "Heartbeat", &parallax__v1__heartbeat_request__descriptor, 0, h_heartbeat, NULL},
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
};
const size_t px_peer_n_methods = sizeof(px_peer_methods) / sizeof(px_peer_methods[0]);
