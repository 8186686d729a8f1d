/* job.c: the coordinator's job state machine.
 *
 * PENDING -> (placement of the layout's world on free devices with
 * px_layout_place: nodes in order, this node first, then the alive peers as
 * listed; a tensor group never spans nodes) STARTING -> (LaunchRanks to each node; every rank
 * registers; the held RegisterRank calls are answered with the full table)
 * RUNNING -> COMPLETED (every rank exited 0) | FAILED (a rank exited non-zero
 * or died, a node stopped heartbeating, the rendezvous deadline passed) |
 * CANCELLED. Every final state stops the job's ranks on every node, ends
 * held calls and watch streams, and schedules the next PENDING job. FAILED
 * and CANCELLED of a job with launched ranks are set only once those ranks
 * have exited (their devices free on their nodes) or were lost with their
 * node: until then the job is `ending` (reason set, ranks stopping), with a
 * deadline of PX_KILL_GRACE_MS + PX_PEER_DEAD_MS.
 *
 * Invariants: jobs live in d->jobs from submission (or load) until daemon
 * stop; async completions find their job by id, never by pointer; every
 * change is written through to the store. Loop thread only. */
#include <dirent.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "benchstore.h"
#include "jobspec.h"
#include "memstore.h"
#include "daemon.h"
#include "px_env.h"
#include "px_log.h"
#include "px_time.h"
#include "store.h"
#include "valstore.h"

static const char *state_name(Parallax__V1__JobState s)
{
    switch (s) {
    case PARALLAX__V1__JOB_STATE__JOB_PENDING: return "PENDING";
    case PARALLAX__V1__JOB_STATE__JOB_STARTING: return "STARTING";
    case PARALLAX__V1__JOB_STATE__JOB_RUNNING: return "RUNNING";
    case PARALLAX__V1__JOB_STATE__JOB_COMPLETED: return "COMPLETED";
    case PARALLAX__V1__JOB_STATE__JOB_FAILED: return "FAILED";
    case PARALLAX__V1__JOB_STATE__JOB_CANCELLED: return "CANCELLED";
    default: return "UNSPECIFIED";
    }
}

int px_job_is_active(const px_job_t *job)
{
    return job->state == PARALLAX__V1__JOB_STATE__JOB_PENDING ||
           job->state == PARALLAX__V1__JOB_STATE__JOB_STARTING ||
           job->state == PARALLAX__V1__JOB_STATE__JOB_RUNNING;
}

static int is_placed_active(const px_job_t *job)
{
    return job->state == PARALLAX__V1__JOB_STATE__JOB_STARTING ||
           job->state == PARALLAX__V1__JOB_STATE__JOB_RUNNING;
}

static void job_event(px_job_t *job, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static int ranks_alive(const px_job_t *job);
static void cancel_reply_all(px_job_t *job);
static void end_if_gone(px_job_t *job);
static int ranks_lose(px_job_t *job, const char *node);
static void job_event(px_job_t *job, const char *fmt, ...)
{
    char text[PXD_REASON_MAX + 128];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(text, sizeof(text), fmt, ap);
    va_end(ap);
    px_info("job %s: %s", job->id, text);
    px_store_event_add(job->d->store, job->id, text);
}

static void job_save(px_job_t *job)
{
    px_store_job_save(job->d->store, job);
}

px_job_t *px_job_find(px_daemon_t *d, const char *id)
{
    if (!id)
        return NULL;
    for (px_job_t *j = d->jobs; j; j = j->next)
        if (!strcmp(j->id, id))
            return j;
    return NULL;
}

void px_job_id_node(const char *id, char *node, size_t len)
{
    const char *dash = id ? strrchr(id, '-') : NULL;
    size_t n;
    if (!dash || dash == id) {
        snprintf(node, len, "%s", "");
        return;
    }
    n = (size_t)(dash - id);
    if (n >= len)
        n = len - 1;
    memcpy(node, id, n);
    node[n] = '\0';
}

/* ---------------------------------------------------------------- to msg */

void px_job_to_msg(const px_job_t *job, Parallax__V1__Job *out)
{
    parallax__v1__job__init(out);
    out->id = (char *)job->id;
    out->spec = job->spec;
    out->state = job->state;
    out->reason = (char *)job->reason;
    out->step = job->step;
    out->loss = job->loss;
    out->grad_norm = job->grad_norm;
    out->lr = job->lr;
    out->tokens_per_second = job->tokens_per_second;
    out->val_loss = job->val_loss, out->val_step = job->val_step; /* issue 14 */
    out->created_ms = job->created_ms;
    out->now_ms = px_time_wall_ms(); /* the clock of every time here (issue 16) */
    out->started_ms = job->started_ms;
    out->finished_ms = job->finished_ms;
    out->coordinator = (char *)job->coordinator;
    if (job->world > 0 && job->ranks) {
        out->ranks = calloc((size_t)job->world, sizeof(*out->ranks));
        for (int r = 0; out->ranks && r < job->world; r++) {
            Parallax__V1__RankInfo *ri = malloc(sizeof(*ri));
            if (!ri)
                break;
            parallax__v1__rank_info__init(ri);
            ri->rank = (uint32_t)r;
            ri->node = (char *)job->ranks[r].node;
            ri->device = (char *)job->ranks[r].device;
            ri->pid = job->ranks[r].pid;
            ri->state = (char *)job->ranks[r].state;
            ri->exit_code = job->ranks[r].exit_code;
            out->ranks[out->n_ranks++] = ri;
        }
    }
}

void px_job_msg_free(Parallax__V1__Job *msg)
{
    for (size_t i = 0; i < msg->n_ranks; i++)
        free(msg->ranks[i]);
    free(msg->ranks);
    msg->ranks = NULL;
    msg->n_ranks = 0;
}

/* -------------------------------------------------------------- watchers */

static void on_watch_cancel(px_rpc_call_t *call, void *arg)
{
    px_watcher_t *w = arg;
    w->call = NULL; /* ended by the next sweep (never inside this callback) */
    (void)call;
    w->cancelled_call = call;
}

static void watchers_notify(px_job_t *job, const Parallax__V1__StepMetrics *metrics)
{
    Parallax__V1__JobEvent ev = PARALLAX__V1__JOB_EVENT__INIT;
    Parallax__V1__Job msg;
    int final = !px_job_is_active(job);
    px_watcher_t **pw = &job->watchers;

    px_job_to_msg(job, &msg);
    ev.job = &msg;
    ev.metrics = (Parallax__V1__StepMetrics *)metrics;
    while (*pw) {
        px_watcher_t *w = *pw;
        if (!w->call) {
            px_rpc_call_stream_finish(w->cancelled_call);
            *pw = w->next;
            free(w);
            continue;
        }
        if (px_rpc_call_stream_send(w->call, &ev.base) != PX_OK || final) {
            px_rpc_call_stream_finish(w->call);
            *pw = w->next;
            free(w);
            continue;
        }
        pw = &w->next;
    }
    px_job_msg_free(&msg);
}

void px_job_watch(px_job_t *job, px_rpc_call_t *call)
{
    Parallax__V1__JobEvent ev = PARALLAX__V1__JOB_EVENT__INIT;
    Parallax__V1__Job msg;
    px_watcher_t *w;
    px_status_t status;

    px_job_to_msg(job, &msg);
    ev.job = &msg;
    status = px_rpc_call_stream_send(call, &ev.base);
    px_job_msg_free(&msg);
    if (status != PX_OK || !px_job_is_active(job)) {
        px_rpc_call_stream_finish(call);
        return;
    }
    w = calloc(1, sizeof(*w));
    if (!w) {
        px_rpc_call_fail(call, GRPC_STATUS_RESOURCE_EXHAUSTED, "out of memory");
        return;
    }
    w->call = call;
    w->job = job;
    w->next = job->watchers;
    job->watchers = w;
    px_rpc_call_on_cancel(call, on_watch_cancel, w);
}

/* Ends the streams of watchers whose clients went away. */
static void watchers_sweep(px_job_t *job)
{
    px_watcher_t **pw = &job->watchers;
    while (*pw) {
        px_watcher_t *w = *pw;
        if (!w->call) {
            px_rpc_call_stream_finish(w->cancelled_call);
            *pw = w->next;
            free(w);
        } else {
            pw = &w->next;
        }
    }
}

/* ----------------------------------------------------------------- load */

static px_job_t *job_alloc(px_daemon_t *d)
{
    px_job_t *job = calloc(1, sizeof(*job));
    if (!job)
        return NULL;
    job->d = d;
    uv_timer_init(d->loop, &job->rdv_timer);
    job->rdv_timer.data = job;
    return job;
}

static void note_seq(px_daemon_t *d, const char *id)
{
    char node[PXD_NAME_MAX];
    const char *dash = strrchr(id, '-');
    px_job_id_node(id, node, sizeof(node));
    if (dash && !strcmp(node, d->cfg.name)) {
        uint64_t n = strtoull(dash + 1, NULL, 10);
        if (n + 1 > d->next_job_seq)
            d->next_job_seq = n + 1;
    }
}

static void on_load(void *arg, px_job_t *t, Parallax__V1__JobSpec *spec)
{
    px_daemon_t *d = arg;
    px_job_t *job = job_alloc(d);
    uv_timer_t timer;

    if (!job) {
        protobuf_c_message_free_unpacked(&spec->base, NULL);
        return;
    }
    timer = job->rdv_timer;
    *job = *t;
    job->d = d;
    job->rdv_timer = timer;
    job->spec = spec;
    job->next = NULL;
    if (job->world > 0) {
        job->ranks = calloc((size_t)job->world, sizeof(*job->ranks));
        if (job->ranks)
            px_store_ranks_load(d->store, job);
    }
    job->next = d->jobs;
    d->jobs = job;
    note_seq(d, job->id);
    if (is_placed_active(job) && !strcmp(job->coordinator, d->cfg.name) && !d->rebooted &&
        job->state == PARALLAX__V1__JOB_STATE__JOB_RUNNING && job->ranks) {
        /* issue 5: a RUNNING job whose local ranks outlived the daemon is
         * adopted (px_job_adopt_all, once devices are known) */
        int alive = 1;
        for (int r = 0; r < job->world; r++)
            if (!strcmp(job->ranks[r].node, d->cfg.name) &&
                strcmp(job->ranks[r].state, "exited") &&
                !px_supervisor_is_rank(job->ranks[r].pid, job->id, r, d->cfg.name))
                alive = 0;
        job->adopting = alive;
    }
    if (is_placed_active(job) && !strcmp(job->coordinator, d->cfg.name) && !job->adopting) {
        job->state = PARALLAX__V1__JOB_STATE__JOB_FAILED;
        snprintf(job->reason, sizeof(job->reason), "%s",
                 d->rebooted ? "node rebooted (boot id changed) while the job was active"
                             : "coordinator daemon restarted (crashed or killed) while the "
                               "job was active; its ranks were stopped");
        job->finished_ms = px_time_wall_ms();
        job_save(job);
        job_event(job, "FAILED: %s", job->reason);
    }
}

void px_job_adopt_all(px_daemon_t *d)
{
    for (px_job_t *j = d->jobs; j; j = j->next) {
        int n_local = 0, lost = -1;
        if (!j->adopting)
            continue;
        j->adopting = 0;
        j->n_registered = j->world;
        j->n_exited_ok = j->n_exited_unknown = 0;
        for (int r = 0; r < j->world; r++) {
            px_job_rank_t *jr = &j->ranks[r];
            jr->registered = 1;
            if (!strcmp(jr->state, "exited")) {
                j->n_exited_ok += jr->exit_code == 0;
                j->n_exited_unknown += jr->exit_code == PXD_EXIT_UNKNOWN;
                continue;
            }
            if (strcmp(jr->node, d->cfg.name))
                continue;
            if (px_supervisor_adopt(d, j, r) != PX_OK && lost < 0)
                lost = r;
            else
                n_local++;
        }
        if (lost >= 0) {
            px_job_finish(j, PARALLAX__V1__JOB_STATE__JOB_FAILED,
                          "coordinator daemon restarted and could not adopt rank %d (pid %d) "
                          "of node %s: it is gone", lost, j->ranks[lost].pid, d->cfg.name);
            continue;
        }
        job_event(j, "coordinator daemon restarted: adopted %d running local rank(s); "
                  "ranks on other nodes are checked by heartbeat", n_local);
        px_info("job %s adopted after a restart (%d local ranks)", j->id, n_local);
    }
}

px_status_t px_job_load_all(px_daemon_t *d)
{
    if (d->next_job_seq == 0)
        d->next_job_seq = 1;
    return px_store_jobs_load(d->store, on_load, d);
}

static void on_job_closed(uv_handle_t *h)
{
    px_job_t *job = h->data;
    if (job->spec)
        protobuf_c_message_free_unpacked(&job->spec->base, NULL);
    if (job->ranks)
        for (int r = 0; r < job->world; r++)
            free(job->ranks[r].ucx_addr.data);
    free(job->ranks);
    free(job);
}

void px_job_free_all(px_daemon_t *d)
{
    px_job_t *job = d->jobs;
    while (job) {
        px_job_t *next = job->next;
        for (int r = 0; job->ranks && r < job->world; r++) {
            if (job->ranks[r].held) {
                px_rpc_call_fail(job->ranks[r].held, GRPC_STATUS_UNAVAILABLE, "daemon stopping");
                job->ranks[r].held = NULL;
            }
        }
        for (int i = 0; i < job->n_cancel_calls; i++)
            px_rpc_call_fail(job->cancel_calls[i], GRPC_STATUS_UNAVAILABLE, "daemon stopping");
        job->n_cancel_calls = 0;
        while (job->watchers) {
            px_watcher_t *w = job->watchers;
            job->watchers = w->next;
            px_rpc_call_stream_finish(w->call ? w->call : w->cancelled_call);
            free(w);
        }
        uv_close((uv_handle_t *)&job->rdv_timer, on_job_closed);
        job = next;
    }
    d->jobs = NULL;
}

/* --------------------------------------------------------------- submit */

ProtobufCMessage *px_msg_dup(const ProtobufCMessage *msg)
{
    size_t len = protobuf_c_message_get_packed_size(msg);
    uint8_t *buf = malloc(len ? len : 1);
    ProtobufCMessage *copy;
    if (!buf)
        return NULL;
    protobuf_c_message_pack(msg, buf);
    copy = protobuf_c_message_unpack(msg->descriptor, NULL, len, buf);
    free(buf);
    return copy;
}

px_status_t px_job_submit(px_daemon_t *d, const Parallax__V1__JobSpec *spec, px_job_t **job_p)
{
    px_job_t *job = job_alloc(d);
    Parallax__V1__JobSpec *copy;

    if (!job)
        return PX_ERR_NO_MEMORY;
    copy = (Parallax__V1__JobSpec *)px_msg_dup(&spec->base);
    if (!copy) {
        uv_close((uv_handle_t *)&job->rdv_timer, on_job_closed);
        return PX_ERR_NO_MEMORY;
    }
    job->spec = copy;
    snprintf(job->id, sizeof(job->id), "%s-%llu", d->cfg.name,
             (unsigned long long)d->next_job_seq++);
    if (!copy->name || !*copy->name) {
        if (copy->name != protobuf_c_empty_string)
            free(copy->name);
        copy->name = strdup(job->id);
    }
    if (copy->model && copy->model->vocab == 0)
        copy->model->vocab = PX_DEFAULT_VOCAB;
    if (copy->warmup_steps == 0)
        copy->warmup_steps = copy->steps / 20;
    if (!px_bench_spec_is(copy)) {
        /* the layout spelled out, also for old clients that sent dp alone
         * (no `parallel`): what GetJob shows is what the ranks run */
        px_layout_t l;
        px_jobspec_layout(copy, &l);
        if (!copy->parallel) {
            copy->parallel = malloc(sizeof(*copy->parallel)); /* freed with the message */
            if (!copy->parallel) {
                protobuf_c_message_free_unpacked(&copy->base, NULL);
                uv_close((uv_handle_t *)&job->rdv_timer, on_job_closed);
                return PX_ERR_NO_MEMORY;
            }
            parallax__v1__parallel_spec__init(copy->parallel);
        }
        copy->parallel->dp = (uint32_t)l.dp;
        copy->parallel->tp = (uint32_t)l.tp;
        copy->parallel->pp = (uint32_t)l.pp;
        copy->parallel->cp = (uint32_t)l.cp;
        copy->parallel->ep = (uint32_t)l.ep;
        copy->dp = (uint32_t)l.dp;
    }
    job->state = PARALLAX__V1__JOB_STATE__JOB_PENDING;
    job->created_ms = px_time_wall_ms();
    snprintf(job->coordinator, sizeof(job->coordinator), "%s", d->cfg.name);
    job->next = d->jobs;
    d->jobs = job;
    job_save(job);
    if (px_bench_spec_is(copy)) /* issue 3: no model */
        job_event(job, "submitted: name %s, bench %s on %u ranks, %llu..%llu bytes", copy->name,
                  copy->bench->op, copy->dp, (unsigned long long)copy->bench->min_bytes,
                  (unsigned long long)copy->bench->max_bytes);
    else {
        px_layout_t l;
        char lbuf[128];
        px_jobspec_layout(copy, &l);
        job_event(job, "submitted: name %s, layout %s, %u layers, %u heads, dim %u, seq %u, "
                  "batch %u, %u steps", copy->name, px_layout_str(&l, lbuf, sizeof(lbuf)),
                  copy->model->layers, copy->model->heads, copy->model->dim, copy->model->seq,
                  copy->batch, copy->steps);
    }
    *job_p = job;
    return PX_OK;
}

/* ---------------------------------------------------------------- finish */

/* Fails the RegisterRank calls of `job` held for the rendezvous. */
static void fail_held_registrations(px_job_t *job, Parallax__V1__JobState state)
{
    for (int r = 0; job->ranks && r < job->world; r++) {
        if (job->ranks[r].held) {
            px_rpc_call_fail(job->ranks[r].held, GRPC_STATUS_ABORTED, "job %s %s: %s", job->id,
                             state_name(state), job->reason);
            job->ranks[r].held = NULL;
        }
    }
}

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
static void stop_ranks_everywhere(px_job_t *job)
{
    px_daemon_t *d = job->d;
    Parallax__V1__StopRanksRequest req = PARALLAX__V1__STOP_RANKS_REQUEST__INIT;

    req.job_id = job->id;
    req.reason = job->reason;
    for (int r = 0; r < job->world; r++) {
        const char *node = job->ranks[r].node;
        int seen = 0;
        px_peer_t *p;
        for (int q = 0; q < r; q++)
            if (!strcmp(job->ranks[q].node, node))
                seen = 1;
        if (seen || !node[0])
            continue;
        if (!strcmp(node, d->cfg.name)) {
            px_supervisor_stop_job(d, job->id, job->reason);
            continue;
        }
        p = px_nodes_peer_by_name(d, node);
        if (p) {
            job_node_ctx_t *ctx = calloc(1, sizeof(*ctx));
            if (!ctx)
                continue;
            snprintf(ctx->job_id, sizeof(ctx->job_id), "%s", job->id);
            snprintf(ctx->node, sizeof(ctx->node), "%s", node);
            if (px_daemon_call_retry(d, p->channel, "/parallax.v1.Peer/StopRanks", &req.base,
                                     &parallax__v1__stop_ranks_response__descriptor,
                                     PXD_RPC_TIMEOUT_MS, (int)px_env_int("PX_PEER_DEAD_MS"), 1,
                                     on_stop_ranks_done, ctx) != PX_OK)
                free(ctx);
        }
    }
}

/* Newest complete checkpoint (DIR/step_<N>/ with meta.json, written last)
 * in `dir` into out; its step, or -1 if none. */
static long newest_checkpoint(const char *dir, char *out, size_t len)
{
    DIR *dh = dir && *dir ? opendir(dir) : NULL;
    struct dirent *e;
    long best = -1;

    if (!dh)
        return -1;
    while ((e = readdir(dh))) {
        char meta[1400], *end;
        long n;
        if (strncmp(e->d_name, "step_", 5))
            continue;
        n = strtol(e->d_name + 5, &end, 10);
        if (*end || end == e->d_name + 5 || n <= best)
            continue;
        snprintf(meta, sizeof(meta), "%s/%s/meta.json", dir, e->d_name);
        if (access(meta, R_OK) != 0)
            continue;
        best = n;
        snprintf(out, len, "%s/%s", dir, e->d_name);
    }
    closedir(dh);
    return best;
}

/* issue 5, --max-restarts: `job` just FAILED after placement; if it has
 * restarts left and a complete checkpoint, submit it again (a new id, same
 * spec, resume_dir = the checkpoint) and say so in its reason. A new id
 * keeps late reports of the failed attempt's ranks from touching the new
 * one (torchrun restarts its worker group the same way, from the last
 * checkpoint the script saved). */
static void restart_from_checkpoint(px_job_t *job)
{
    Parallax__V1__JobSpec *spec = job->spec, *copy;
    char ckpt[1200];
    size_t len = strlen(job->reason);
    long step;
    px_job_t *next;

    if (!spec || spec->max_restarts == 0)
        return;
    if (spec->restart >= spec->max_restarts) {
        snprintf(job->reason + len, sizeof(job->reason) - len, "; no restart left (%u of %u used)",
                 spec->restart, spec->max_restarts);
        return;
    }
    step = newest_checkpoint(spec->checkpoint_dir, ckpt, sizeof(ckpt));
    if (step < 0) {
        snprintf(job->reason + len, sizeof(job->reason) - len,
                 "; not restarted: no complete checkpoint in '%s'",
                 spec->checkpoint_dir ? spec->checkpoint_dir : "");
        return;
    }
    copy = (Parallax__V1__JobSpec *)px_msg_dup(&spec->base);
    if (!copy)
        return;
    if (copy->resume_dir != protobuf_c_empty_string)
        free(copy->resume_dir);
    copy->resume_dir = strdup(ckpt);
    if (copy->restarted_from != protobuf_c_empty_string)
        free(copy->restarted_from);
    copy->restarted_from = strdup(job->id);
    copy->restart = spec->restart + 1;
    if (copy->resume_dir && copy->restarted_from && px_job_submit(job->d, copy, &next) == PX_OK)
        snprintf(job->reason + len, sizeof(job->reason) - len,
                 "; restarted as %s (restart %u of %u) from %s (step %ld)", next->id,
                 copy->restart, copy->max_restarts, ckpt, step);
    protobuf_c_message_free_unpacked(&copy->base, NULL);
}

/* Moves `job` to `state` with job->reason as it is: stops what runs (unless
 * its ranks were stopped already: job->ending), restarts a failed job from
 * its checkpoint, answers watchers and held calls, schedules the next. */
static void finish_now(px_job_t *job, Parallax__V1__JobState state)
{
    Parallax__V1__JobState prev = job->state;
    int was_ending = job->ending;

    job->state = state;
    job->ending = 0;
    job->finished_ms = px_time_wall_ms();
    job->fail_pending = 0;
    if (job->rdv_timer_active) {
        uv_timer_stop(&job->rdv_timer);
        job->rdv_timer_active = 0;
    }
    fail_held_registrations(job, state);
    if (!was_ending && (prev == PARALLAX__V1__JOB_STATE__JOB_STARTING ||
                        prev == PARALLAX__V1__JOB_STATE__JOB_RUNNING))
        stop_ranks_everywhere(job);
    if (state == PARALLAX__V1__JOB_STATE__JOB_FAILED && !job->d->stopping &&
        (prev == PARALLAX__V1__JOB_STATE__JOB_STARTING ||
         prev == PARALLAX__V1__JOB_STATE__JOB_RUNNING))
        restart_from_checkpoint(job);
    job_save(job);
    if (job->reason[0])
        job_event(job, "%s: %s", state_name(state), job->reason);
    else
        job_event(job, "%s", state_name(state));
    watchers_notify(job, NULL);
    px_job_schedule(job->d);
    if (job->n_cancel_calls) /* CancelJob calls held for this (px_job_cancel) */
        cancel_reply_all(job);
}

/* Whether a launched rank of `job` has not reported its exit yet (a rank
 * lost with its node, "lost", has not either, but never will). */
static int ranks_alive(const px_job_t *job)
{
    for (int r = 0; job->ranks && r < job->world; r++)
        if (!strcmp(job->ranks[r].state, "launching") || !strcmp(job->ranks[r].state, "running"))
            return 1;
    return 0;
}

/* Marks the launched ranks of `job` on `node` lost: the node is dead or
 * does not hold them any more, no exit report will come. Returns the first
 * such rank, or -1. */
static int ranks_lose(px_job_t *job, const char *node)
{
    int first = -1;
    for (int r = 0; job->ranks && r < job->world; r++) {
        px_job_rank_t *jr = &job->ranks[r];
        if (strcmp(jr->node, node) || (strcmp(jr->state, "launching") && strcmp(jr->state, "running")))
            continue;
        snprintf(jr->state, sizeof(jr->state), "lost");
        if (first < 0)
            first = r;
    }
    return first;
}

/* Answers every held CancelJob call with the job as it is now. */
static void cancel_reply_all(px_job_t *job)
{
    Parallax__V1__Job msg;

    px_job_to_msg(job, &msg);
    for (int i = 0; i < job->n_cancel_calls; i++)
        px_rpc_call_reply(job->cancel_calls[i], &msg.base);
    px_job_msg_free(&msg);
    job->n_cancel_calls = 0;
}

static void on_end_deadline(uv_timer_t *t)
{
    px_job_t *job = t->data;
    long ms = px_env_int("PX_KILL_GRACE_MS") + px_env_int("PX_PEER_DEAD_MS");
    size_t len = strlen(job->reason);

    job->rdv_timer_active = 0;
    px_warn("job %s: ranks still not reported gone %ld ms after the stop", job->id, ms);
    if (job->ending && px_job_is_active(job)) {
        snprintf(job->reason + len, sizeof(job->reason) - len,
                 " (not every rank reported its exit within %ld ms)", ms);
        finish_now(job, job->end_state);
    }
    cancel_reply_all(job);
}

/* The job is to end in `state` (job->reason set) while launched ranks still
 * run: stop them everywhere; `state` once they are gone (end_if_gone) or at
 * the deadline. */
static void end_begin(px_job_t *job, Parallax__V1__JobState state)
{
    job->ending = 1;
    job->end_state = state;
    job->fail_pending = 0; /* a failure settling: this takes over */
    fail_held_registrations(job, state);
    job_event(job, "%s once its ranks are gone: stopping them: %s", state_name(state),
              job->reason);
    stop_ranks_everywhere(job);
    if (job->rdv_timer_active) /* rendezvous or settling: moot now */
        uv_timer_stop(&job->rdv_timer);
    uv_timer_start(&job->rdv_timer, on_end_deadline,
                   (uint64_t)(px_env_int("PX_KILL_GRACE_MS") + px_env_int("PX_PEER_DEAD_MS")), 0);
    job->rdv_timer_active = 1;
    job_save(job);
}

/* An ending job whose last launched rank is gone takes its final state. */
static void end_if_gone(px_job_t *job)
{
    if (job->ending && px_job_is_active(job) && !ranks_alive(job))
        finish_now(job, job->end_state);
}

void px_job_finish(px_job_t *job, Parallax__V1__JobState state, const char *fmt, ...)
{
    va_list ap;

    if (!px_job_is_active(job))
        return;
    if (job->ending) { /* already stopping: the first decision stands */
        if (job->d->stopping)
            finish_now(job, job->end_state);
        else
            end_if_gone(job);
        return;
    }
    va_start(ap, fmt);
    vsnprintf(job->reason, sizeof(job->reason), fmt, ap);
    va_end(ap);
    if (state != PARALLAX__V1__JOB_STATE__JOB_COMPLETED && is_placed_active(job) &&
        ranks_alive(job) && !job->d->stopping) {
        end_begin(job, state);
        return;
    }
    finish_now(job, state);
}

void px_job_cancel(px_job_t *job, px_rpc_call_t *call)
{
    if (px_job_is_active(job) && !job->ending)
        px_job_finish(job, PARALLAX__V1__JOB_STATE__JOB_CANCELLED, "cancelled by user");
    if (job->n_cancel_calls < PXD_CANCEL_WAITERS && job->ending) {
        job->cancel_calls[job->n_cancel_calls++] = call;
        return;
    }
    if (job->n_cancel_calls) { /* ranks gone, or too many waiters: answer now */
        cancel_reply_all(job);
    }
    {
        Parallax__V1__Job msg;
        px_job_to_msg(job, &msg);
        px_rpc_call_reply(call, &msg.base);
        px_job_msg_free(&msg);
    }
}

void px_job_fail_all_active(px_daemon_t *d, const char *reason)
{
    for (px_job_t *j = d->jobs; j; j = j->next)
        if (is_placed_active(j) && !strcmp(j->coordinator, d->cfg.name))
            px_job_finish(j, PARALLAX__V1__JOB_STATE__JOB_FAILED, "%s", reason);
}

void px_job_node_dead(px_daemon_t *d, const char *node)
{
    for (px_job_t *j = d->jobs; j; j = j->next) {
        if (!is_placed_active(j))
            continue;
        for (int r = 0; r < j->world; r++) {
            if (!strcmp(j->ranks[r].node, node)) {
                /* its ranks cannot report their exits: lost with it (the
                 * node fences them when it comes back) */
                ranks_lose(j, node);
                px_job_finish(j, PARALLAX__V1__JOB_STATE__JOB_FAILED,
                              "node %s (rank %d) stopped heartbeating for %ld ms", node, r,
                              px_env_int("PX_PEER_DEAD_MS"));
                break;
            }
        }
    }
}

void px_job_check_peer(px_daemon_t *d, const px_peer_t *peer)
{
    int64_t now = px_time_mono_ms();
    long grace = px_env_int("PX_PEER_DEAD_MS");

    for (px_job_t *j = d->jobs; j; j = j->next) {
        char gone[256] = "";
        size_t off = 0;
        if (!px_job_is_active(j) && j->world > 0 && j->ranks && peer->name[0] &&
            !strcmp(j->coordinator, d->cfg.name) && now - j->reconcile_ms > 2000 &&
            px_time_wall_ms() - j->finished_ms > px_env_int("PX_KILL_GRACE_MS") + 2000) {
            /* issue 5: the node still runs ranks of a job that ended here
             * (e.g. failed at a restart of this daemon): stop them */
            for (int i = 0; i < peer->n_devices; i++) {
                if (strcmp(peer->devices[i].job_id, j->id))
                    continue;
                px_info("node %s still runs ranks of %s job %s: stopping them", peer->name,
                        state_name(j->state), j->id);
                j->reconcile_ms = now;
                stop_ranks_everywhere(j);
                break;
            }
        }
        if (!is_placed_active(j) || !peer->name[0])
            continue;
        for (int r = 0; r < j->world; r++) {
            px_job_rank_t *jr = &j->ranks[r];
            int held = 0;
            if (strcmp(jr->node, peer->name) ||
                (strcmp(jr->state, "launching") && strcmp(jr->state, "running")))
                continue;
            for (int i = 0; i < peer->n_devices; i++)
                if (!strcmp(peer->devices[i].name, jr->device) &&
                    !strcmp(peer->devices[i].job_id, j->id))
                    held = 1;
            if (held) {
                jr->missing_since_ms = 0;
                continue;
            }
            if (!jr->missing_since_ms)
                jr->missing_since_ms = now;
            else if (now - jr->missing_since_ms > grace && off < sizeof(gone) - 16)
                off += (size_t)snprintf(gone + off, sizeof(gone) - off, "%s%d", off ? "," : "",
                                        r);
        }
        if (off) {
            for (int r = 0; r < j->world; r++)
                if (!strcmp(j->ranks[r].node, peer->name) && j->ranks[r].missing_since_ms &&
                    now - j->ranks[r].missing_since_ms > grace &&
                    (!strcmp(j->ranks[r].state, "launching") ||
                     !strcmp(j->ranks[r].state, "running")))
                    snprintf(j->ranks[r].state, sizeof(j->ranks[r].state), "lost");
            px_job_finish(j, PARALLAX__V1__JOB_STATE__JOB_FAILED,
                          "rank(s) %s on node %s vanished without an exit report (its daemon "
                          "restarted?)", gone, peer->name);
        }
    }
}

/* ------------------------------------------------------------- placement */

/* 1 if (node, device) is held by a placed, active job of this coordinator. */
static int reserved(px_daemon_t *d, const char *node, const char *device)
{
    for (px_job_t *j = d->jobs; j; j = j->next) {
        if (!is_placed_active(j))
            continue;
        for (int r = 0; r < j->world; r++)
            if (!strcmp(j->ranks[r].node, node) && !strcmp(j->ranks[r].device, device) &&
                strcmp(j->ranks[r].state, "exited"))
                return 1;
    }
    return 0;
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

    if (job && is_placed_active(job)) {
        if (code != GRPC_STATUS_OK)
            px_job_finish(job, PARALLAX__V1__JOB_STATE__JOB_FAILED,
                          "node %s could not launch ranks: %s", ctx->node,
                          message ? message : "no answer");
        else {
            apply_launch_response(job, (const Parallax__V1__LaunchRanksResponse *)response);
            job_save(job);
            if (job->ending) /* decided while this launch was on its way */
                stop_ranks_everywhere(job);
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
    for (int r = 0; r < job->world && is_placed_active(job); r++) {
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
        if (!strcmp(node, d->cfg.name)) {
            Parallax__V1__LaunchRanksResponse resp = PARALLAX__V1__LAUNCH_RANKS_RESPONSE__INIT;
            char err[512];
            if (px_supervisor_launch(d, &req, &resp, err, sizeof(err)) != PX_OK) {
                px_job_finish(job, PARALLAX__V1__JOB_STATE__JOB_FAILED,
                              "node %s could not launch ranks: %s", node, err);
            } else {
                apply_launch_response(job, &resp);
                px_supervisor_resp_free(&resp);
            }
        } else {
            px_peer_t *p = px_nodes_peer_by_name(d, node);
            job_node_ctx_t *ctx = calloc(1, sizeof(*ctx));
            px_status_t status = PX_ERR_NOT_FOUND;
            if (ctx) {
                snprintf(ctx->job_id, sizeof(ctx->job_id), "%s", job->id);
                snprintf(ctx->node, sizeof(ctx->node), "%s", node);
            }
            if (p && ctx)
                status = px_daemon_call_retry(d, p->channel, "/parallax.v1.Peer/LaunchRanks",
                                              &req.base,
                                              &parallax__v1__launch_ranks_response__descriptor,
                                              PXD_RPC_TIMEOUT_MS, 5000, 0, on_launch_done, ctx);
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
    if (is_placed_active(job))
        job_save(job);
}

/* One node's free devices, as place() sees them. */
typedef struct {
    const char *name;
    const px_device_t *devices;
    int n_devices;
    int n_free, next; /* free devices; next device index to hand out */
} place_node_t;

/* 1 if device i of node n is free for a new job. */
static int device_free(px_daemon_t *d, const place_node_t *n, int i)
{
    return !n->devices[i].job_id[0] && !reserved(d, n->name, n->devices[i].name);
}

/* Tries to place one PENDING job; 1 if placed. The job's layout decides
 * (px_layout_place): its world of ranks in rank order, tensor groups whole
 * on one node, this node first, then the alive peers. */
static int place(px_job_t *job)
{
    px_daemon_t *d = job->d;
    px_layout_t l;
    int need, nn = 0, placed = 0;
    place_node_t *nodes = calloc((size_t)d->n_peers + 1, sizeof(*nodes));
    int *node_free = calloc((size_t)d->n_peers + 1, sizeof(*node_free));
    int *node_of_rank = NULL;
    px_job_rank_t *ranks = NULL;
    char why[512];

    px_jobspec_layout(job->spec, &l);
    need = px_layout_world(&l);
    if (!nodes || !node_free || need < 1)
        goto out;
    nodes[nn++] = (place_node_t){d->cfg.name, d->devices, d->n_devices, 0, 0};
    for (int p = 0; p < d->n_peers; p++)
        if (d->peers[p].alive && d->peers[p].name[0])
            nodes[nn++] = (place_node_t){d->peers[p].name, d->peers[p].devices,
                                         d->peers[p].n_devices, 0, 0};
    for (int n = 0; n < nn; n++) {
        for (int i = 0; i < nodes[n].n_devices; i++)
            nodes[n].n_free += device_free(d, &nodes[n], i);
        node_free[n] = nodes[n].n_free;
    }
    node_of_rank = calloc((size_t)need, sizeof(*node_of_rank));
    ranks = calloc((size_t)need, sizeof(*ranks));
    if (!node_of_rank || !ranks)
        goto out;
    if (px_layout_place(&l, node_free, nn, node_of_rank, why, sizeof(why)) != PX_OK) {
        px_debug("job %s waits: %s", job->id, why); /* devices busy: stays PENDING */
        goto out;
    }
    for (int r = 0; r < need; r++) {
        place_node_t *n = &nodes[node_of_rank[r]];
        while (!device_free(d, n, n->next))
            n->next++; /* px_layout_place counted them: one is left */
        snprintf(ranks[r].node, sizeof(ranks[r].node), "%s", n->name);
        snprintf(ranks[r].device, sizeof(ranks[r].device), "%s", n->devices[n->next].name);
        snprintf(ranks[r].state, sizeof(ranks[r].state), "pending");
        n->next++;
    }
    job->ranks = ranks;
    ranks = NULL;
    job->world = need;
    job->n_registered = 0;
    job->n_exited_ok = 0;
    job->state = PARALLAX__V1__JOB_STATE__JOB_STARTING;
    job_save(job);
    {
        char where[512] = "";
        size_t off = 0;
        for (int r = 0; r < need && off < sizeof(where) - 64; r++)
            off += (size_t)snprintf(where + off, sizeof(where) - off, "%s%d=%s/%s",
                                    r ? " " : "", r, job->ranks[r].node, job->ranks[r].device);
        job_event(job, "STARTING: placed %s", where);
    }
    uv_timer_start(&job->rdv_timer, on_rdv_timeout, (uint64_t)px_env_int("PX_CONNECT_TIMEOUT_MS"),
                   0);
    job->rdv_timer_active = 1;
    watchers_notify(job, NULL);
    launch(job);
    placed = 1;
out:
    free(ranks);
    free(node_of_rank);
    free(node_free);
    free(nodes);
    return placed;
}

void px_job_schedule(px_daemon_t *d)
{
    px_job_t *pending[64];
    int n = 0;
    static int busy;

    if (busy || d->stopping)
        return;
    busy = 1; /* place() -> finish() -> schedule() must not recurse */
    for (px_job_t *j = d->jobs; j; j = j->next) {
        watchers_sweep(j);
        if (j->state == PARALLAX__V1__JOB_STATE__JOB_PENDING && !strcmp(j->coordinator, d->cfg.name)) {
            if (n == 64)
                memmove(pending, pending + 1, sizeof(pending[0]) * 63), n = 63;
            pending[n++] = j;
        }
    }
    /* list is newest first: place oldest first; stop at the first that
     * does not fit (FIFO, no overtaking) */
    for (int i = n - 1; i >= 0; i--)
        if (!place(pending[i]))
            break;
    busy = 0;
}

/* ----------------------------------------------------------- rendezvous */

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
                         state_name(job->state));
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
    job_save(job);
    job_event(job, "RUNNING: all %d ranks registered", job->world);
    watchers_notify(job, NULL);
}

/* ------------------------------------------------------------- progress */

/* The rank whose step figures the job records: px_layout_reporting_rank of
 * a training job's layout; rank 0 of a bench job (dp ranks, one stage). */
static int reporting_rank(const px_job_t *job)
{
    px_layout_t l;
    px_jobspec_layout(job->spec, &l);
    return px_layout_check(&l, NULL, 0) == PX_OK ? px_layout_reporting_rank(&l) : 0;
}

int px_job_progress(px_daemon_t *d, const Parallax__V1__ReportProgressRequest *req)
{
    px_job_t *job = px_job_find(d, req->job_id);

    if (!job)
        return 1;
    if (!is_placed_active(job))
        return 1;
    /* a step's figures come from the rank that has them after the step
     * (the last pipeline stage's first tensor rank); the others' are the
     * same or partial */
    if (req->metrics && (int)req->rank == reporting_rank(job)) {
        const Parallax__V1__StepMetrics *m = req->metrics;
        job->step = m->step;
        job->loss = m->loss;
        job->grad_norm = m->grad_norm;
        job->lr = m->lr;
        job->tokens_per_second = m->tokens_per_second;
        px_store_metric_add(d->store, job->id, m);
        px_valstore_record(d->store, job, m); /* issue 14 */
        job_save(job);
        watchers_notify(job, m);
    }
    if (req->memory) /* issue 4: every rank's memory, the last step's always kept */
        px_memstore_put(job->d->store, job->id, req->memory,
                        job->spec && req->memory->step >= job->spec->steps);
    if (req->rank == 0 && req->n_bench_rows) { /* issue 3: a bench job's rows */
        px_benchstore_add(job->d->store, job->id, req->bench_rows, req->n_bench_rows);
        watchers_notify(job, NULL);
    }
    return 0;
}

static void on_fail_settled(uv_timer_t *t)
{
    px_job_t *job = t->data;
    job->rdv_timer_active = 0;
    job->fail_pending = 0;
    px_job_finish(job, PARALLAX__V1__JOB_STATE__JOB_FAILED, "%s", job->fail_reason);
}

/* How strongly a rank's exit names the root cause of a job's failure. */
static int fail_rank_cause(int exit_code)
{
    return exit_code == -9 ? 2 : exit_code < 0 ? 1 : 0;
}

void px_job_rank_exited(px_daemon_t *d, const char *job_id, int rank, const char *node,
                        int exit_code, const char *detail)
{
    px_job_t *job = px_job_find(d, job_id);
    px_job_rank_t *jr;
    char how[64];

    if (!job || rank < 0 || rank >= job->world || !job->ranks)
        return;
    jr = &job->ranks[rank];
    if (!strcmp(jr->state, "exited"))
        return;
    snprintf(jr->state, sizeof(jr->state), "exited");
    jr->exit_code = exit_code;
    if (strcmp(jr->node, d->cfg.name))
        px_nodes_peer_device_release(d, jr->node, jr->device, job->id);
    if (job->ending && px_job_is_active(job)) { /* stopped by us: not a new failure */
        job_save(job);
        end_if_gone(job);
        return;
    }
    if (!is_placed_active(job)) {
        job_save(job);
        if (job->n_cancel_calls && !ranks_alive(job))
            cancel_reply_all(job);
        return;
    }
    if (exit_code == PXD_EXIT_UNKNOWN) {
        /* an adopted rank (issue 5): its status went to its new parent; the
         * job completed if every rank is gone and some rank that was still
         * our child, or the job's progress, says so */
        job->n_exited_unknown++;
        job_save(job);
        if (job->n_exited_ok + job->n_exited_unknown < job->world)
            return;
        if (job->n_exited_ok > 0 || (job->spec && job->step >= job->spec->steps))
            px_job_finish(job, PARALLAX__V1__JOB_STATE__JOB_COMPLETED, "%s", "");
        else
            px_job_finish(job, PARALLAX__V1__JOB_STATE__JOB_FAILED,
                          "every rank exited after the coordinator restarted, with no exit "
                          "status known and the last reported step %u of %u", job->step,
                          job->spec ? job->spec->steps : 0);
        return;
    }
    if (exit_code == 0) {
        job->n_exited_ok++;
        job_save(job);
        if (job->n_exited_ok + job->n_exited_unknown == job->world)
            px_job_finish(job, PARALLAX__V1__JOB_STATE__JOB_COMPLETED, "%s", "");
        return;
    }
    if (exit_code == PXD_EXIT_UNKNOWN)
        snprintf(how, sizeof(how), "exited early (adopted: exit status unknown)");
    else if (exit_code < 0)
        snprintf(how, sizeof(how), "was killed by signal %d", -exit_code);
    else
        snprintf(how, sizeof(how), "exited with code %d", exit_code);
    /* the first failure starts a short settling window; a signal death seen
     * in it is the root cause over ranks that exited because of it */
    /* root cause: SIGKILL (never self-inflicted: the OOM killer, a user)
     * beats other signals (a rank aborting because its peer vanished) beats
     * exit codes; among equals the first report wins */
    if (!job->fail_pending || fail_rank_cause(exit_code) > job->fail_is_signal) {
        snprintf(job->fail_reason, sizeof(job->fail_reason), "rank %d on node %s (%s) %s%s%s",
                 rank, node && *node ? node : jr->node, jr->device, how,
                 detail && *detail ? "; log: " : "", detail ? detail : "");
        job->fail_is_signal = fail_rank_cause(exit_code);
    }
    job_save(job);
    if (!job->fail_pending) {
        job->fail_pending = 1;
        if (job->rdv_timer_active)
            uv_timer_stop(&job->rdv_timer);
        uv_timer_start(&job->rdv_timer, on_fail_settled, PXD_FAIL_SETTLE_MS, 0);
        job->rdv_timer_active = 1;
    }
}
