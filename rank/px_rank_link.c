/* px_rank_link.c: a rank's blocking link to its coordinator's Peer service.
 *
 * Implements px_rank_link.h with px_rpc_call_unary on a private channel:
 * RegisterRank (held by the coordinator until every rank registered) and
 * ReportProgress (one call per step). Runs on the rank's training thread
 * only; no state is shared with other threads.
 *
 * Authentication (daemon/auth.c): when the cluster has a token, the daemon
 * puts it in this process's environment as PX_CLUSTER_TOKEN (never on the
 * command line); a rank started by hand may name a file with PX_TOKEN_FILE
 * instead. It is sent as the "x-parallax-token" metadata of every call.
 * PX_TLS_CA_FILE, when set, makes the channel TLS verified by that CA. */
#include "px_rank_link.h"

#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "parallax.pb-c.h"
#include "px_env.h"
#include "px_log.h"
#include "px_rpc.h"
#include "px_time.h"

#define PX_RANK_LINK_REPORT_TIMEOUT_MS 10000

struct px_rank_link {
    px_rpc_channel_t *channel;
    char *job_id;
    char *node;
    int rank;
};

/* Reads the token from PX_CLUSTER_TOKEN, else the first line of the file
 * PX_TOKEN_FILE. *token_p malloc'd, NULL when neither is set. */
static px_status_t rank_token(char **token_p)
{
    const char *v = getenv("PX_CLUSTER_TOKEN"), *path = getenv("PX_TOKEN_FILE");
    char *t;

    *token_p = NULL;
    if (v && *v) {
        *token_p = strdup(v);
        return *token_p ? PX_OK : PX_ERR_NO_MEMORY;
    }
    if (!path || !*path)
        return PX_OK;
    t = px_rpc_read_file(path, 4096);
    if (!t) {
        px_error("PX_TOKEN_FILE %s: cannot read it", path);
        return PX_ERR_IO;
    }
    t[strcspn(t, "\r\n")] = '\0';
    *token_p = t;
    return PX_OK;
}

px_status_t px_rank_link_channel_create(const char *coord_addr, px_rpc_channel_t **channel_p)
{
    const char *ca = getenv("PX_TLS_CA_FILE");
    px_rpc_channel_t *ch = NULL;
    char *token = NULL;
    px_status_t status;

    PX_CHECK(rank_token(&token));
    status = px_rpc_channel_create_tls(coord_addr, ca && *ca ? ca : NULL, &ch);
    if (status == PX_OK && token)
        status = px_rpc_channel_set_metadata(ch, "x-parallax-token", token);
    if (token) {
        explicit_bzero(token, strlen(token));
        free(token);
    }
    if (status != PX_OK) {
        px_rpc_channel_destroy(ch);
        return status;
    }
    *channel_p = ch;
    return PX_OK;
}

px_status_t px_rank_link_open(const char *coord_addr, const char *job_id, int rank,
                              const char *node, px_rank_link_t **link_p)
{
    px_rank_link_t *link;
    px_status_t status;

    if (!coord_addr || !*coord_addr || !job_id || !*job_id || rank < 0 || !node) {
        px_error("rank link: coordinator address, job id, rank and node are required");
        return PX_ERR_INVALID_ARGUMENT;
    }
    link = calloc(1, sizeof(*link));
    if (!link)
        return PX_ERR_NO_MEMORY;
    link->rank = rank;
    link->job_id = strdup(job_id);
    link->node = strdup(node);
    if (!link->job_id || !link->node) {
        status = PX_ERR_NO_MEMORY;
        goto err_free;
    }
    PX_CHECK_GOTO(px_rank_link_channel_create(coord_addr, &link->channel), status, err_free);
    *link_p = link;
    return PX_OK;

err_free:
    free(link->job_id);
    free(link->node);
    free(link);
    return status;
}

px_status_t px_rank_link_rendezvous(px_rank_link_t *link, const void *addr, size_t len,
                                    int timeout_ms, px_addr_table_t *table)
{
    Parallax__V1__RegisterRankRequest req = PARALLAX__V1__REGISTER_RANK_REQUEST__INIT;
    Parallax__V1__RegisterRankResponse *resp = NULL;
    px_rpc_result_t result = {0};
    px_addr_table_t t = {0};
    px_status_t status;

    req.job_id = link->job_id;
    req.rank = (uint32_t)link->rank;
    req.node = link->node;
    req.ucx_address.data = (uint8_t *)addr;
    req.ucx_address.len = len;
    req.pid = (int32_t)getpid();

    status = px_rpc_call_unary(link->channel, "/parallax.v1.Peer/RegisterRank",
                               &req.base, &parallax__v1__register_rank_response__descriptor,
                               timeout_ms, (ProtobufCMessage **)&resp, &result);
    if (status != PX_OK) {
        px_error("rank %d: RegisterRank with %s failed: %s (%s)", link->rank,
                 px_rpc_channel_target(link->channel), px_status_str(status),
                 result.message ? result.message : "");
        goto out;
    }
    if (resp->world_size == 0 || resp->n_ucx_addresses != resp->world_size ||
        resp->n_nodes != resp->world_size || (uint32_t)link->rank >= resp->world_size) {
        px_error("rank %d: malformed rendezvous table (world %u, %zu addresses, %zu nodes)",
                 link->rank, resp->world_size, resp->n_ucx_addresses, resp->n_nodes);
        status = PX_ERR_INTERNAL;
        goto out;
    }
    PX_CHECK_GOTO(px_addr_table_init(&t, (int)resp->world_size), status, out);
    for (uint32_t r = 0; r < resp->world_size; r++) {
        size_t n = resp->ucx_addresses[r].len;
        t.addrs[r] = malloc(n ? n : 1);
        t.nodes[r] = strdup(resp->nodes[r]);
        if (!t.addrs[r] || !t.nodes[r]) {
            status = PX_ERR_NO_MEMORY;
            px_addr_table_free(&t);
            goto out;
        }
        memcpy(t.addrs[r], resp->ucx_addresses[r].data, n);
        t.addr_lens[r] = n;
    }
    *table = t;
    status = PX_OK;

out:
    if (resp)
        protobuf_c_message_free_unpacked(&resp->base, NULL);
    free(result.message);
    return status;
}

px_status_t px_rank_link_world_rendezvous(void *link, const void *addr, size_t len,
                                          px_addr_table_t *table)
{
    return px_rank_link_rendezvous(link, addr, len, (int)px_env_int("PX_CONNECT_TIMEOUT_MS"),
                                   table);
}

px_status_t px_rank_link_report(px_rank_link_t *link, const px_step_report_t *report,
                                double mfu, int *stop_p)
{
    Parallax__V1__ReportProgressRequest req = PARALLAX__V1__REPORT_PROGRESS_REQUEST__INIT;
    Parallax__V1__StepMetrics m = PARALLAX__V1__STEP_METRICS__INIT;
    Parallax__V1__ReportProgressResponse *resp = NULL;
    px_rpc_result_t result = {0};
    px_status_t status;

    m.step = (uint32_t)report->step;
    m.loss = report->loss;
    m.grad_norm = report->grad_norm;
    m.lr = report->lr;
    m.tokens_per_second = report->tokens_per_second;
    m.elapsed_s = report->elapsed_s;
    m.time_ms = px_time_wall_ms();
    m.val_loss = report->val_loss;
    m.mfu = mfu;
    req.job_id = link->job_id;
    req.rank = (uint32_t)link->rank;
    req.metrics = &m;
    /* this rank's memory by category (memacct.h) and the plan's */
    Parallax__V1__RankMemory mem = PARALLAX__V1__RANK_MEMORY__INIT;
    Parallax__V1__MemoryCategory cats[PX_MEM_NCAT], *catp[PX_MEM_NCAT];
    for (int c = 0; c < PX_MEM_NCAT; c++) {
        parallax__v1__memory_category__init(&cats[c]);
        cats[c].name = (char *)px_mem_cat_name((px_mem_cat_t)c);
        cats[c].current_bytes = report->mem_current[c];
        cats[c].peak_bytes = report->mem_peak[c];
        cats[c].plan_bytes = report->mem_plan[c];
        catp[c] = &cats[c];
    }
    mem.rank = (uint32_t)link->rank;
    mem.step = (uint32_t)report->step;
    mem.categories = catp;
    mem.n_categories = PX_MEM_NCAT;
    mem.state_peak_bytes = report->mem_state_peak;
    mem.plan_state_peak_bytes = report->mem_plan_state_peak;
    mem.device_used_bytes = report->mem_device_used; /* 0 / 0 on a CPU rank */
    mem.device_total_bytes = report->mem_device_total;
    mem.pp = (uint32_t)(report->pp > 0 ? report->pp : 1);
    mem.pp_stage = (uint32_t)report->pp_stage;
    mem.pp_busy_s = report->pp_busy_s;
    mem.pp_idle_s = report->pp_idle_s;
    if (report->experts > 0 && report->moe_received) { /* moe.h: borrowed for the call */
        mem.n_moe_received = mem.n_moe_dropped = (size_t)report->experts;
        mem.moe_received = (uint64_t *)report->moe_received;
        mem.moe_dropped = (uint64_t *)report->moe_dropped;
        mem.moe_alltoall_s = report->moe_alltoall_s;
    }
    int np = report->n_comm_paths;
    Parallax__V1__CommPath cps[np > 0 ? np : 1], *cpp[np > 0 ? np : 1];
    for (int i = 0; i < np; i++) { /* borrowed from the report for the call */
        parallax__v1__comm_path__init(&cps[i]);
        cps[i].comm = (char *)report->comm_paths[i].comm;
        cps[i].size = (uint32_t)report->comm_paths[i].size;
        cps[i].host = (char *)report->comm_paths[i].host;
        cps[i].device = (char *)report->comm_paths[i].device;
        cpp[i] = &cps[i];
    }
    mem.n_comm_paths = (size_t)(np > 0 ? np : 0);
    mem.comm_paths = cpp;
    req.memory = &mem;

    status = px_rpc_call_unary(link->channel, "/parallax.v1.Peer/ReportProgress", &req.base,
                               &parallax__v1__report_progress_response__descriptor,
                               PX_RANK_LINK_REPORT_TIMEOUT_MS, (ProtobufCMessage **)&resp,
                               &result);
    if (status != PX_OK) {
        px_warn("rank %d: ReportProgress step %d failed: %s (%s)", link->rank, report->step,
                px_status_str(status), result.message ? result.message : "");
        free(result.message);
        return status;
    }
    if (stop_p)
        *stop_p = resp->stop ? 1 : 0;
    protobuf_c_message_free_unpacked(&resp->base, NULL);
    free(result.message);
    return PX_OK;
}

void px_rank_link_close(px_rank_link_t *link)
{
    if (!link)
        return;
    px_rpc_channel_destroy(link->channel);
    free(link->job_id);
    free(link->node);
    free(link);
}
