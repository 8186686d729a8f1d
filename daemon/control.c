/* control.c: the Control service (what pctl calls), on --listen and on
 * unix:<runtime-dir>/control.sock.
 *
 * Requests about a job this node coordinates are answered from job.c and
 * the store; requests about a job coordinated by another node (the node
 * name is embedded in the job id) are forwarded to that node's Control
 * service and its answer relayed as is. Handlers run on the loop thread. */
#include <errno.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

#include "benchstore.h"
#include "memstore.h"
#include "daemon.h"
#include "px_time.h"
#include "jobspec.h"
#include "layout.h"
#include "px_log.h"
#include "px_tb.h"
#include "store.h"
#include "valstore.h"

#define P_CONTROL "/parallax.v1.Control/"

/* ------------------------------------------------------------ forwarding */

typedef struct {
    px_rpc_call_t *call;
    char node[PXD_NAME_MAX];  /* the node asked */
    char what[PXD_JOB_ID_MAX + 48]; /* what it is to the call: "job J's coordinator" */
    char target[PXD_ADDR_MAX];      /* the address asked */
} fwd_ctx_t;

/* The failure of a forwarded call that never reached `node` (UNAVAILABLE,
 * DEADLINE_EXCEEDED) as the client should read it: which node did not
 * answer, what it is to the request, and how this node sees it; gRPC's own
 * text ("failed to connect ...") last. Else the node's answer as is. */
static void forward_fail(px_daemon_t *d, fwd_ctx_t *ctx, grpc_status_code code,
                         const char *message)
{
    px_peer_t *p = px_nodes_peer_by_name(d, ctx->node);
    char seen[96] = "";

    if (code != GRPC_STATUS_UNAVAILABLE && code != GRPC_STATUS_DEADLINE_EXCEEDED) {
        px_rpc_call_fail(ctx->call, code, "%s", message ? message : "forwarded call failed");
        return;
    }
    if (p && !p->alive && p->last_seen_mono_ms)
        snprintf(seen, sizeof(seen), "; it is DOWN: node %s has not heard from it for %.1f s",
                 d->cfg.name, (double)(px_time_mono_ms() - p->last_seen_mono_ms) / 1000.0);
    else if (p && !p->alive)
        snprintf(seen, sizeof(seen), "; it is DOWN: node %s never heard from it", d->cfg.name);
    px_rpc_call_fail(ctx->call, code, "%s, node %s (%s), did not answer node %s%s (%s)",
                     ctx->what, ctx->node, ctx->target, d->cfg.name, seen,
                     message && *message ? message : "no answer");
}

static void on_forward_done(px_daemon_t *d, void *arg, grpc_status_code code,
                            const char *message, const ProtobufCMessage *response)
{
    fwd_ctx_t *ctx = arg;
    if (code == GRPC_STATUS_OK)
        px_rpc_call_reply(ctx->call, response);
    else
        forward_fail(d, ctx, code, message);
    free(ctx);
}

/* Relays `req` to `channel`'s `path` (a channel to node `node`, which is
 * `what` to the request: "job J's coordinator"); ends `call` with its
 * answer, or with an error naming that node when it did not answer. */
static void forward(px_daemon_t *d, px_rpc_call_t *call, px_rpc_channel_t *channel,
                    const char *node, const char *what, const char *path,
                    const ProtobufCMessage *req, const ProtobufCMessageDescriptor *resp_desc)
{
    fwd_ctx_t *ctx = malloc(sizeof(*ctx));
    px_status_t status;

    if (!ctx) {
        px_rpc_call_fail(call, GRPC_STATUS_RESOURCE_EXHAUSTED, "out of memory");
        return;
    }
    ctx->call = call;
    snprintf(ctx->node, sizeof(ctx->node), "%s", node);
    snprintf(ctx->what, sizeof(ctx->what), "%s", what);
    snprintf(ctx->target, sizeof(ctx->target), "%s", px_rpc_channel_target(channel));
    status = px_daemon_call_async(d, channel, path, req, resp_desc, PXD_RPC_TIMEOUT_MS,
                                  on_forward_done, ctx);
    if (status != PX_OK) {
        forward_fail(d, ctx, px_rpc_code_from_status(status), px_status_str(status));
        free(ctx);
    }
}

/* Finds the job locally, or forwards the call to its coordinator. Returns
 * the local job, or NULL when the call was ended (forwarded or failed). */
static px_job_t *route(px_daemon_t *d, px_rpc_call_t *call, const char *job_id,
                       const char *method, const ProtobufCMessage *req,
                       const ProtobufCMessageDescriptor *resp_desc)
{
    px_job_t *job = px_job_find(d, job_id);
    char node[PXD_NAME_MAX], path[128], what[PXD_JOB_ID_MAX + 48];
    px_rpc_channel_t *ch;

    if (job)
        return job;
    if (!job_id || !*job_id) {
        px_rpc_call_fail(call, GRPC_STATUS_INVALID_ARGUMENT, "job id is empty");
        return NULL;
    }
    px_job_id_node(job_id, node, sizeof(node));
    if (!node[0] || !strcmp(node, d->cfg.name)) {
        px_rpc_call_fail(call, GRPC_STATUS_NOT_FOUND, "no job %s", job_id);
        return NULL;
    }
    ch = px_nodes_control_channel(d, node);
    if (!ch) {
        px_rpc_call_fail(call, GRPC_STATUS_NOT_FOUND,
                         "no job %s here, and its coordinator node %s is unknown to node %s",
                         job_id, node, d->cfg.name);
        return NULL;
    }
    snprintf(path, sizeof(path), P_CONTROL "%s", method);
    snprintf(what, sizeof(what), "job %s's coordinator", job_id);
    forward(d, call, ch, node, what, path, req, resp_desc);
    return NULL;
}

/* --------------------------------------------------------------- handlers */

#define PXD_LIST_PEER_TIMEOUT_MS 2000 /* a peer's ListJobs (ListJobs below) */

/* SubmitJob refused `spec` with err (the cluster's devices without its
 * draining nodes): when the spec passes with them, err gains which nodes
 * are draining, so the user knows the job waits on `pctl node resume`. */
static void draining_note(px_daemon_t *d, const Parallax__V1__JobSpec *spec,
                          const px_devsel_t *sel, char *err, size_t errlen)
{
    char note[512], scratch[256];
    int *all = malloc(sizeof(*all) * (size_t)(d->n_peers + 1));
    int nn;

    px_nodes_draining_note(d, sel, note, sizeof(note));
    if (all && note[0]) {
        nn = px_nodes_device_counts(d, sel, 1, all, d->n_peers + 1);
        if (px_validate_spec(spec, all, nn, scratch, sizeof(scratch)) == PX_OK) {
            size_t len = strlen(err);
            snprintf(err + len, errlen - len, "; %s: its devices take no new ranks until "
                     "`pctl node resume`", note);
        }
    }
    free(all);
}

static void h_submit(px_rpc_call_t *call, const ProtobufCMessage *request, void *arg)
{
    px_daemon_t *d = arg;
    const Parallax__V1__SubmitJobRequest *req = (const void *)request;
    char err[1024];
    px_status_t status;

    if (d->stopping) {
        px_rpc_call_fail(call, GRPC_STATUS_UNAVAILABLE, "node %s is stopping", d->cfg.name);
        return;
    }
    if (!req->spec) {
        px_rpc_call_fail(call, GRPC_STATUS_INVALID_ARGUMENT, "spec: missing");
        return;
    }
    if (px_bench_spec_is(req->spec)) { /* a collectives benchmark job */
        status = px_bench_spec_validate(req->spec, px_nodes_cluster_devices(d), err, sizeof(err));
    } else { /* this node's devices first, then the alive peers' */
        px_devsel_t sel; /* only the devices the job asks for */
        int *counts = malloc(sizeof(*counts) * (size_t)(d->n_peers + 1));
        if (!counts) {
            px_rpc_call_fail(call, GRPC_STATUS_RESOURCE_EXHAUSTED, "out of memory");
            return;
        }
        int nn = 0;
        status = px_nodes_devsel(d, req->spec->devices, &sel, err, sizeof(err));
        if (status == PX_OK) {
            nn = px_nodes_device_counts(d, &sel, 0, counts, d->n_peers + 1);
            status = px_validate_spec(req->spec, counts, nn, err, sizeof(err));
            if (status != PX_OK) /* fits only with a draining node: say so */
                draining_note(d, req->spec, &sel, err, sizeof(err));
        }
        if (status == PX_OK) { /* each placed device's memory (memfit.c) */
            const char **names = calloc((size_t)nn + 1, sizeof(*names));
            uint64_t *mem = calloc((size_t)nn + 1, sizeof(*mem));
            int *cuda = calloc((size_t)nn + 1, sizeof(*cuda)); /* all-GPU nodes: IPC scratch */
            if (names && mem && cuda && px_nodes_device_memory(d, &sel, names, mem, nn) == nn &&
                px_nodes_device_cuda(d, &sel, cuda, nn) == nn)
                status = px_memfit_check(req->spec, counts, names, mem, cuda, nn, err,
                                         sizeof(err));
            free(names);
            free(mem);
            free(cuda);
        }
        free(counts);
    }
    if (status != PX_OK) {
        px_info("SubmitJob rejected: %s", err);
        px_rpc_call_fail(call, px_rpc_code_from_status(status), "%s", err);
        return;
    }
    if (req->spec->tensorboard_dir && *req->spec->tensorboard_dir &&
        !px_bench_spec_is(req->spec) && px_tb_mkdirs(req->spec->tensorboard_dir)) {
        /* made here, on the coordinator, once the job is otherwise valid:
         * a directory that cannot be made is said now, not as a warning
         * in rank 0's log */
        px_rpc_call_fail(call, GRPC_STATUS_INVALID_ARGUMENT,
                         "tensorboard_dir '%s': cannot create it on node %s: %s",
                         req->spec->tensorboard_dir, d->cfg.name, strerror(errno));
        return;
    }
    /* the name reserved cluster-wide (jobnames.c), then stored and answered */
    px_jobnames_submit(d, call, req);
}

static void h_get_job(px_rpc_call_t *call, const ProtobufCMessage *request, void *arg)
{
    px_daemon_t *d = arg;
    const Parallax__V1__GetJobRequest *req = (const void *)request;
    px_job_t *job = route(d, call, req->job_id, "GetJob", request,
                          &parallax__v1__job__descriptor);
    Parallax__V1__Job msg;

    if (!job)
        return;
    px_job_to_msg(job, &msg);
    px_benchstore_fill(d->store, &msg); /* a bench job's rows */
    px_rpc_call_reply(call, &msg.base);
    px_benchstore_msg_free(&msg);
    px_job_msg_free(&msg);
}

/* ListJobs across the cluster: this node's jobs plus each alive peer's
 * (Peer.ListJobs, which answers with that node's own jobs, over the Peer
 * plane every node can reach, PXD_LIST_PEER_TIMEOUT_MS each, all in
 * parallel). The answer goes out when every peer answered or failed; a
 * peer that failed, or is DOWN, is logged, its jobs are left out and the
 * answer names it (ListJobsResponse.unanswered). */

typedef struct {
    px_rpc_call_t *call;
    int pending;                             /* peer calls not yet done */
    Parallax__V1__ListJobsResponse **peer;   /* owned copies, NULL where failed */
    int n_peer;
    char (*gap)[PXD_NAME_MAX + 200];         /* per peer slot: "" or why it is missing */
} list_ctx_t;

/* Orders jobs oldest first (created_ms, then id). */
static int job_cmp(const void *a, const void *b)
{
    const Parallax__V1__Job *x = *(Parallax__V1__Job *const *)a;
    const Parallax__V1__Job *y = *(Parallax__V1__Job *const *)b;
    if (x->created_ms != y->created_ms)
        return x->created_ms < y->created_ms ? -1 : 1;
    return strcmp(x->id ? x->id : "", y->id ? y->id : "");
}

/* Answers `call` with the local jobs and the jobs of `peer` (n_peer
 * responses, NULL entries skipped; each holds only jobs its node
 * coordinates, so no job comes twice). */
static void list_reply(px_daemon_t *d, px_rpc_call_t *call,
                       Parallax__V1__ListJobsResponse *const *peer, int n_peer,
                       const list_ctx_t *ctx)
{
    Parallax__V1__ListJobsResponse resp = PARALLAX__V1__LIST_JOBS_RESPONSE__INIT;
    Parallax__V1__UnansweredNode *gaps = NULL, **gap_ptrs = NULL;
    Parallax__V1__Job *msgs;
    size_t n = 0, total, i = 0;

    if (ctx && n_peer > 0) {
        gaps = calloc((size_t)n_peer, sizeof(*gaps));
        gap_ptrs = calloc((size_t)n_peer, sizeof(*gap_ptrs));
        for (int p = 0; gaps && gap_ptrs && p < n_peer; p++) {
            if (!ctx->gap[p][0])
                continue;
            /* "NODE\0REASON": the node's name, then why */
            parallax__v1__unanswered_node__init(&gaps[resp.n_unanswered]);
            gaps[resp.n_unanswered].node = ctx->gap[p];
            gaps[resp.n_unanswered].reason = ctx->gap[p] + strlen(ctx->gap[p]) + 1;
            gap_ptrs[resp.n_unanswered] = &gaps[resp.n_unanswered];
            resp.n_unanswered++;
        }
        resp.unanswered = gap_ptrs;
    }

    for (px_job_t *j = d->jobs; j; j = j->next)
        n++;
    total = n;
    for (int p = 0; p < n_peer; p++)
        total += peer[p] ? peer[p]->n_jobs : 0;
    msgs = calloc(n ? n : 1, sizeof(*msgs));
    resp.jobs = calloc(total ? total : 1, sizeof(*resp.jobs));
    if (!msgs || !resp.jobs) {
        free(msgs);
        free(resp.jobs);
        px_rpc_call_fail(call, GRPC_STATUS_RESOURCE_EXHAUSTED, "out of memory");
        return;
    }
    /* d->jobs is newest first; answer oldest first */
    i = n;
    for (px_job_t *j = d->jobs; j; j = j->next) {
        i--;
        px_job_to_msg(j, &msgs[i]);
        resp.jobs[i] = &msgs[i];
    }
    resp.n_jobs = n;
    for (int p = 0; p < n_peer; p++) {
        for (size_t k = 0; peer[p] && k < peer[p]->n_jobs; k++)
            resp.jobs[resp.n_jobs++] = peer[p]->jobs[k];
    }
    if (resp.n_jobs > n)
        qsort(resp.jobs, resp.n_jobs, sizeof(*resp.jobs), job_cmp);
    px_rpc_call_reply(call, &resp.base);
    for (i = 0; i < n; i++)
        px_job_msg_free(&msgs[i]);
    free(msgs);
    free(resp.jobs);
    free(gaps);
    free(gap_ptrs);
}

/* Records in ctx's slot `slot` that `node` is missing from the listing
 * and why (the printf format). */
static void list_gap(list_ctx_t *ctx, int slot, const char *node, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
static void list_gap(list_ctx_t *ctx, int slot, const char *node, const char *fmt, ...)
{
    char *g = ctx->gap[slot];
    size_t size = sizeof(ctx->gap[slot]);
    size_t k = (size_t)snprintf(g, size, "%s", node) + 1;
    va_list ap;

    if (k >= size)
        return;
    va_start(ap, fmt);
    vsnprintf(g + k, size - k, fmt, ap);
    va_end(ap);
}

static void list_ctx_free(list_ctx_t *ctx)
{
    for (int p = 0; p < ctx->n_peer; p++)
        if (ctx->peer[p])
            protobuf_c_message_free_unpacked(&ctx->peer[p]->base, NULL);
    free(ctx->peer);
    free(ctx->gap);
    free(ctx);
}

typedef struct {
    list_ctx_t *ctx;
    int slot;
    char node[PXD_NAME_MAX];
} list_peer_t;

static void on_list_peer_done(px_daemon_t *d, void *arg, grpc_status_code code,
                              const char *message, const ProtobufCMessage *response)
{
    list_peer_t *lp = arg;
    list_ctx_t *ctx = lp->ctx;

    if (code == GRPC_STATUS_OK && response) {
        /* The response is borrowed until we return: keep an owned copy. */
        size_t len = protobuf_c_message_get_packed_size(response);
        uint8_t *buf = malloc(len ? len : 1);
        if (buf) {
            protobuf_c_message_pack(response, buf);
            ctx->peer[lp->slot] = (Parallax__V1__ListJobsResponse *)protobuf_c_message_unpack(
                &parallax__v1__list_jobs_response__descriptor, NULL, len, buf);
            free(buf);
        }
        /* Keep only the jobs that node coordinates: no job is listed twice
         * (nor one of ours, whatever a confused peer sends). */
        if (ctx->peer[lp->slot]) {
            Parallax__V1__ListJobsResponse *r = ctx->peer[lp->slot];
            size_t keep = 0;
            for (size_t k = 0; k < r->n_jobs; k++) {
                Parallax__V1__Job *t = r->jobs[k];
                if (t->coordinator && !strcmp(t->coordinator, lp->node) && t->id && *t->id)
                    r->jobs[keep++] = t;
                else
                    protobuf_c_message_free_unpacked(&t->base, NULL);
            }
            r->n_jobs = keep;
        }
    } else {
        px_warn("ListJobs: node %s did not answer (%s: %s); its jobs are left out", lp->node,
                px_status_str(px_rpc_status_from_code(code)), message ? message : "");
        list_gap(ctx, lp->slot, lp->node, "%s: %s",
                 px_status_str(px_rpc_status_from_code(code)), message ? message : "");
    }
    free(lp);
    if (--ctx->pending == 0) {
        list_reply(d, ctx->call, ctx->peer, ctx->n_peer, ctx);
        list_ctx_free(ctx);
    }
}

void px_control_list_local(px_rpc_call_t *call, const ProtobufCMessage *request, void *arg)
{
    list_reply(arg, call, NULL, 0, NULL);
}

static void h_list_jobs(px_rpc_call_t *call, const ProtobufCMessage *request, void *arg)
{
    px_daemon_t *d = arg;
    const Parallax__V1__ListJobsRequest *req = (const void *)request;
    Parallax__V1__ListJobsRequest sub = PARALLAX__V1__LIST_JOBS_REQUEST__INIT;
    list_ctx_t *ctx;

    if (req->local_only || d->n_peers == 0) {
        list_reply(d, call, NULL, 0, NULL);
        return;
    }
    ctx = calloc(1, sizeof(*ctx));
    if (!ctx || !(ctx->peer = calloc((size_t)d->n_peers, sizeof(*ctx->peer))) ||
        !(ctx->gap = calloc((size_t)d->n_peers, sizeof(*ctx->gap)))) {
        if (ctx)
            free(ctx->peer);
        free(ctx);
        px_rpc_call_fail(call, GRPC_STATUS_RESOURCE_EXHAUSTED, "out of memory");
        return;
    }
    ctx->call = call;
    ctx->n_peer = d->n_peers;
    ctx->pending = 1; /* held until every call is started */
    sub.local_only = 1;
    for (int p = 0; p < d->n_peers; p++) {
        px_peer_t *peer = &d->peers[p];
        px_rpc_channel_t *ch;
        list_peer_t *lp;

        /* a peer never heard from (a seed not up) has no jobs to miss */
        if (!peer->name[0] || !strcmp(peer->name, d->cfg.name) || peer->conflict[0])
            continue;
        if (!peer->alive) {
            if (peer->last_seen_mono_ms)
                list_gap(ctx, p, peer->name, "DOWN: not heard from for %.1f s",
                         (double)(px_time_mono_ms() - peer->last_seen_mono_ms) / 1000.0);
            else
                list_gap(ctx, p, peer->name, "DOWN: never reached");
            continue;
        }
        ch = peer->channel;
        if (!ch || !(lp = calloc(1, sizeof(*lp)))) {
            list_gap(ctx, p, peer->name, "not asked: out of memory");
            continue;
        }
        lp->ctx = ctx;
        lp->slot = p;
        snprintf(lp->node, sizeof(lp->node), "%s", peer->name);
        if (px_daemon_call_async(d, ch, "/parallax.v1.Peer/ListJobs", &sub.base,
                                 &parallax__v1__list_jobs_response__descriptor,
                                 PXD_LIST_PEER_TIMEOUT_MS, on_list_peer_done, lp) != PX_OK) {
            list_gap(ctx, p, peer->name, "not asked: the call could not start");
            free(lp);
            continue;
        }
        ctx->pending++;
    }
    if (--ctx->pending == 0) {
        list_reply(d, call, ctx->peer, ctx->n_peer, ctx);
        list_ctx_free(ctx);
    }
}

static void h_cancel(px_rpc_call_t *call, const ProtobufCMessage *request, void *arg)
{
    px_daemon_t *d = arg;
    const Parallax__V1__CancelJobRequest *req = (const void *)request;
    px_job_t *job = route(d, call, req->job_id, "CancelJob", request,
                          &parallax__v1__job__descriptor);

    if (!job)
        return;
    px_job_cancel(job, call); /* answers once the ranks are gone (job.c) */
}

/* ----------------------------------------------------- remote WatchJob */

/* WatchJob of a job coordinated elsewhere: this daemon polls the
 * coordinator's GetJob every PXD_REMOTE_WATCH_MS and streams each change
 * (state, or a new step with its figures as the metrics) until a final
 * state; px_rpc has no async streaming client to relay the stream itself. */
#define PXD_REMOTE_WATCH_MS 500

typedef struct remote_watch {
    px_daemon_t *d;
    px_rpc_call_t *call;
    char job_id[PXD_JOB_ID_MAX];
    char node[PXD_NAME_MAX];
    int cancelled;
    int inflight;
    int sent_any;
    Parallax__V1__JobState last_state;
    uint32_t last_step;
    uv_timer_t timer;
    struct remote_watch *next;
} remote_watch_t;

static remote_watch_t *remote_watches;

static void rw_free(uv_handle_t *h)
{
    free(h->data);
}

/* Ends the stream (OK, or `code` with `msg`) and frees the watch. */
static void rw_end(remote_watch_t *rw, grpc_status_code code, const char *msg)
{
    for (remote_watch_t **p = &remote_watches; *p; p = &(*p)->next) {
        if (*p == rw) {
            *p = rw->next;
            break;
        }
    }
    if (code == GRPC_STATUS_OK)
        px_rpc_call_stream_finish(rw->call);
    else
        px_rpc_call_fail(rw->call, code, "%s", msg);
    uv_timer_stop(&rw->timer);
    uv_close((uv_handle_t *)&rw->timer, rw_free);
}

static void on_rw_cancel(px_rpc_call_t *call, void *arg)
{
    ((remote_watch_t *)arg)->cancelled = 1; /* ended by the next tick */
}

static void on_rw_job(px_daemon_t *d, void *arg, grpc_status_code code, const char *message,
                      const ProtobufCMessage *response)
{
    remote_watch_t *rw = arg;
    const Parallax__V1__Job *job = (const void *)response;
    Parallax__V1__JobEvent ev = PARALLAX__V1__JOB_EVENT__INIT;
    Parallax__V1__StepMetrics m = PARALLAX__V1__STEP_METRICS__INIT;
    int final;

    rw->inflight = 0;
    if (rw->cancelled) {
        rw_end(rw, GRPC_STATUS_OK, "");
        return;
    }
    if (code == GRPC_STATUS_UNAVAILABLE || code == GRPC_STATUS_DEADLINE_EXCEEDED) {
        char why[PXD_JOB_ID_MAX + 2 * PXD_NAME_MAX + 400];
        snprintf(why, sizeof(why), "job %s's coordinator, node %s, did not answer node %s (%s)",
                 rw->job_id, rw->node, d->cfg.name, message && *message ? message : "no answer");
        rw_end(rw, code, why);
        return;
    }
    if (code != GRPC_STATUS_OK) {
        rw_end(rw, code, message && *message ? message : "coordinator did not answer");
        return;
    }
    final = job->state == PARALLAX__V1__JOB_STATE__JOB_COMPLETED ||
            job->state == PARALLAX__V1__JOB_STATE__JOB_FAILED ||
            job->state == PARALLAX__V1__JOB_STATE__JOB_CANCELLED;
    if (!rw->sent_any || job->state != rw->last_state || job->step != rw->last_step) {
        ev.job = (Parallax__V1__Job *)job;
        if (rw->sent_any && job->step != rw->last_step) {
            m.step = job->step;
            m.loss = job->loss;
            m.grad_norm = job->grad_norm;
            m.lr = job->lr;
            m.tokens_per_second = job->tokens_per_second;
            ev.metrics = &m;
        }
        if (px_rpc_call_stream_send(rw->call, &ev.base) != PX_OK) {
            rw_end(rw, GRPC_STATUS_OK, "");
            return;
        }
        rw->sent_any = 1;
        rw->last_state = job->state;
        rw->last_step = job->step;
    }
    if (final)
        rw_end(rw, GRPC_STATUS_OK, "");
}

static void on_rw_tick(uv_timer_t *t)
{
    remote_watch_t *rw = t->data;
    px_daemon_t *d = rw->d;
    Parallax__V1__GetJobRequest req = PARALLAX__V1__GET_JOB_REQUEST__INIT;
    px_rpc_channel_t *ch;

    if (rw->inflight)
        return;
    if (rw->cancelled || d->stopping) {
        rw_end(rw, d->stopping ? GRPC_STATUS_UNAVAILABLE : GRPC_STATUS_OK,
               "node is stopping");
        return;
    }
    ch = px_nodes_control_channel(d, rw->node);
    if (!ch) {
        char why[PXD_JOB_ID_MAX + 2 * PXD_NAME_MAX + 80];
        snprintf(why, sizeof(why), "job %s's coordinator, node %s, is unknown to node %s",
                 rw->job_id, rw->node, d->cfg.name);
        rw_end(rw, GRPC_STATUS_UNAVAILABLE, why);
        return;
    }
    req.job_id = rw->job_id;
    if (px_daemon_call_async(d, ch, "/parallax.v1.Control/GetJob", &req.base,
                             &parallax__v1__job__descriptor, PXD_RPC_TIMEOUT_MS, on_rw_job,
                             rw) == PX_OK)
        rw->inflight = 1;
}

static void watch_remote(px_daemon_t *d, px_rpc_call_t *call, const char *job_id,
                         const char *node)
{
    remote_watch_t *rw = calloc(1, sizeof(*rw));

    if (!rw) {
        px_rpc_call_fail(call, GRPC_STATUS_RESOURCE_EXHAUSTED, "out of memory");
        return;
    }
    rw->d = d;
    rw->call = call;
    snprintf(rw->job_id, sizeof(rw->job_id), "%s", job_id);
    snprintf(rw->node, sizeof(rw->node), "%s", node);
    uv_timer_init(d->loop, &rw->timer);
    rw->timer.data = rw;
    rw->next = remote_watches;
    remote_watches = rw;
    px_rpc_call_on_cancel(call, on_rw_cancel, rw);
    uv_timer_start(&rw->timer, on_rw_tick, 0, PXD_REMOTE_WATCH_MS);
}

void px_control_fini(px_daemon_t *d)
{
    while (remote_watches)
        rw_end(remote_watches, GRPC_STATUS_UNAVAILABLE, "node is stopping");
}

static void h_watch(px_rpc_call_t *call, const ProtobufCMessage *request, void *arg)
{
    px_daemon_t *d = arg;
    const Parallax__V1__WatchJobRequest *req = (const void *)request;
    px_job_t *job = px_job_find(d, req->job_id);
    char node[PXD_NAME_MAX];

    if (job) {
        px_job_watch(job, call);
        return;
    }
    px_job_id_node(req->job_id ? req->job_id : "", node, sizeof(node));
    if (node[0] && strcmp(node, d->cfg.name)) {
        if (!px_nodes_control_channel(d, node)) {
            px_rpc_call_fail(call, GRPC_STATUS_NOT_FOUND,
                             "no job %s here, and its coordinator node %s is unknown to node %s",
                             req->job_id, node, d->cfg.name);
            return;
        }
        watch_remote(d, call, req->job_id, node);
        return;
    }
    px_rpc_call_fail(call, GRPC_STATUS_NOT_FOUND, "no job %s", req->job_id);
}

static void h_list_nodes(px_rpc_call_t *call, const ProtobufCMessage *request, void *arg)
{
    px_daemon_t *d = arg;
    Parallax__V1__ListNodesResponse resp = PARALLAX__V1__LIST_NODES_RESPONSE__INIT;
    Parallax__V1__NodeInfo *infos = calloc((size_t)d->n_peers + 1, sizeof(*infos));
    Parallax__V1__NodeInfo **ptrs = calloc((size_t)d->n_peers + 1, sizeof(*ptrs));
    Parallax__V1__Device **devs = NULL;
    size_t n_devs = 0, k = 0;

    for (int i = 0; i < d->n_peers; i++)
        n_devs += (size_t)d->peers[i].n_devices;
    devs = calloc(n_devs ? n_devs : 1, sizeof(*devs));
    if (!infos || !ptrs || !devs) {
        free(infos);
        free(ptrs);
        free(devs);
        px_rpc_call_fail(call, GRPC_STATUS_RESOURCE_EXHAUSTED, "out of memory");
        return;
    }
    px_nodes_self_info(d, &infos[0]);
    infos[0].error = (char *)px_nodes_self_conflict(d);
    ptrs[0] = &infos[0];
    for (int i = 0; i < d->n_peers; i++) {
        px_peer_t *p = &d->peers[i];
        Parallax__V1__NodeInfo *ni = &infos[i + 1];
        parallax__v1__node_info__init(ni);
        ni->name = p->name[0] ? p->name : p->peer_addr;
        ni->control_addr = p->control_addr;
        ni->peer_addr = p->peer_addr;
        ni->alive = p->alive;
        ni->last_seen_ms = p->last_seen_ms;
        ni->version = p->version;
        ni->blas_core = p->blas_core;
        ni->blas_core_source = p->blas_core_source;
        ni->error = p->conflict;
        ni->draining = p->draining;
        ni->state = (char *)px_nodes_state(d, p);
        ni->devices = devs + k;
        for (int j = 0; j < p->n_devices; j++) {
            Parallax__V1__Device *dv = malloc(sizeof(*dv));
            if (!dv)
                break;
            parallax__v1__device__init(dv);
            dv->name = p->devices[j].name;
            dv->job_id = p->devices[j].job_id;
            dv->memory_bytes = p->devices[j].memory_bytes;
            dv->mem_used = p->devices[j].mem_used;
            dv->blocked = p->devices[j].blocked;
            devs[k++] = dv;
            ni->n_devices++;
        }
        px_gputelem_to_info(p->gpus, p->n_gpus, ni); /* none on failure */
        ptrs[i + 1] = ni;
    }
    for (int i = 0; i <= d->n_peers; i++) /* every last_seen_ms is in this clock */
        infos[i].now_ms = px_time_wall_ms();
    resp.nodes = ptrs;
    resp.n_nodes = (size_t)d->n_peers + 1;
    px_rpc_call_reply(call, &resp.base);
    px_nodes_info_free(&infos[0]);
    for (int i = 0; i < d->n_peers; i++)
        px_gputelem_info_free(&infos[i + 1]);
    for (size_t i = 0; i < k; i++)
        free(devs[i]);
    free(devs);
    free(infos);
    free(ptrs);
}

static void h_metrics(px_rpc_call_t *call, const ProtobufCMessage *request, void *arg)
{
    px_daemon_t *d = arg;
    const Parallax__V1__GetMetricsRequest *req = (const void *)request;
    px_job_t *job = route(d, call, req->job_id, "GetMetrics", request,
                          &parallax__v1__get_metrics_response__descriptor);
    Parallax__V1__GetMetricsResponse resp = PARALLAX__V1__GET_METRICS_RESPONSE__INIT;
    px_status_t status;

    if (!job)
        return;
    status = px_store_metrics_get(d->store, job->id, &resp);
    if (status == PX_OK)
        status = px_valstore_fill(d->store, job->id, &resp);
    if (status != PX_OK)
        px_rpc_call_fail(call, px_rpc_code_from_status(status), "metrics of %s: %s", job->id,
                         px_status_str(status));
    else
        px_rpc_call_reply(call, &resp.base);
    px_store_metrics_free(&resp);
}

/* the latest memory report of every rank (memstore.h), from the
 * coordinator, each with its dp and tp coordinates in the job's layout */
static void h_memory(px_rpc_call_t *call, const ProtobufCMessage *request, void *arg)
{
    px_daemon_t *d = arg;
    const Parallax__V1__GetMemoryRequest *req = (const void *)request;
    px_job_t *job = route(d, call, req->job_id, "GetMemory", request,
                          &parallax__v1__get_memory_response__descriptor);
    Parallax__V1__GetMemoryResponse resp = PARALLAX__V1__GET_MEMORY_RESPONSE__INIT;
    px_status_t status;

    if (!job)
        return;
    status = px_memstore_get(d->store, job->id, &resp);
    if (status != PX_OK) {
        px_rpc_call_fail(call, px_rpc_code_from_status(status), "memory of %s: %s", job->id,
                         px_status_str(status));
        return;
    }
    resp.job_id = job->id;
    resp.zero = job->spec ? job->spec->zero : 0;
    if (job->spec) {
        px_layout_t l;
        px_jobspec_layout(job->spec, &l);
        resp.dp = (uint32_t)l.dp;
        resp.tp = (uint32_t)l.tp;
        resp.cp = (uint32_t)l.cp;
        resp.seq = job->spec->model ? job->spec->model->seq : 0;
        resp.world = (uint32_t)px_layout_world(&l);
        for (size_t i = 0; i < resp.n_ranks; i++) {
            px_coord_t c;
            if (resp.ranks[i]->rank >= resp.world)
                continue; /* not this layout's rank: no coordinates */
            px_layout_coord(&l, (int)resp.ranks[i]->rank, &c);
            resp.ranks[i]->dp_rank = (uint32_t)c.dp;
            resp.ranks[i]->tp_rank = (uint32_t)c.tp;
            resp.ranks[i]->cp_rank = (uint32_t)c.cp;
        }
    }
    px_rpc_call_reply(call, &resp.base);
    px_memstore_free(&resp);
}

static void h_logs(px_rpc_call_t *call, const ProtobufCMessage *request, void *arg)
{
    px_daemon_t *d = arg;
    const Parallax__V1__GetLogsRequest *req = (const void *)request;
    px_job_t *job = route(d, call, req->job_id, "GetLogs", request,
                          &parallax__v1__get_logs_response__descriptor);
    Parallax__V1__GetLogsResponse resp = PARALLAX__V1__GET_LOGS_RESPONSE__INIT;
    const char *node;
    uint8_t *text = NULL;
    size_t len = 0;
    px_status_t status;

    if (!job)
        return;
    if (!job->ranks || req->rank >= (uint32_t)job->world) {
        px_rpc_call_fail(call, GRPC_STATUS_NOT_FOUND, "job %s has no rank %u%s", job->id,
                         req->rank, job->world ? "" : " (not placed yet)");
        return;
    }
    node = job->ranks[req->rank].node;
    if (strcmp(node, d->cfg.name)) {
        px_peer_t *p = px_nodes_peer_by_name(d, node);
        if (!p) {
            px_rpc_call_fail(call, GRPC_STATUS_UNAVAILABLE, "rank %u ran on node %s, unknown here",
                             req->rank, node);
            return;
        }
        char what[PXD_JOB_ID_MAX + 48];
        snprintf(what, sizeof(what), "the node of job %s's rank %u", job->id, req->rank);
        forward(d, call, p->channel, node, what, "/parallax.v1.Peer/GetRankLog", request,
                &parallax__v1__get_logs_response__descriptor);
        return;
    }
    status = px_supervisor_read_log(d, job->id, (int)req->rank, req->tail_bytes, &text, &len);
    if (status != PX_OK) {
        px_rpc_call_fail(call, px_rpc_code_from_status(status), "log of job %s rank %u: %s",
                         job->id, req->rank, px_status_str(status));
        return;
    }
    resp.text.data = text;
    resp.text.len = len;
    px_rpc_call_reply(call, &resp.base);
    free(text);
}

const px_rpc_method_t px_control_methods[] = {
    {P_CONTROL "SubmitJob", &parallax__v1__submit_job_request__descriptor, 0, h_submit, NULL},
    {P_CONTROL "GetJob", &parallax__v1__get_job_request__descriptor, 0, h_get_job, NULL},
    {P_CONTROL "ListJobs", &parallax__v1__list_jobs_request__descriptor, 0, h_list_jobs, NULL},
    {P_CONTROL "CancelJob", &parallax__v1__cancel_job_request__descriptor, 0, h_cancel, NULL},
    {P_CONTROL "WatchJob", &parallax__v1__watch_job_request__descriptor, 1, h_watch, NULL},
    {P_CONTROL "ListNodes", &parallax__v1__list_nodes_request__descriptor, 0, h_list_nodes, NULL},
    {P_CONTROL "GetMetrics", &parallax__v1__get_metrics_request__descriptor, 0, h_metrics, NULL},
    {P_CONTROL "GetLogs", &parallax__v1__get_logs_request__descriptor, 0, h_logs, NULL},
    {P_CONTROL "GetMemory", &parallax__v1__get_memory_request__descriptor, 0, h_memory, NULL},
    {P_CONTROL "Sample", &parallax__v1__sample_request__descriptor, 0, px_sample_handle, NULL},
    {P_CONTROL "SetNodeState", &parallax__v1__set_node_state_request__descriptor, 0,
     px_drain_control, NULL},
};
const size_t px_control_n_methods = sizeof(px_control_methods) / sizeof(px_control_methods[0]);
