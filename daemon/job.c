/* job.c: the coordinator's job state machine.
 *
 * PENDING -> STARTING (placed: job_place.c) -> RUNNING (every rank
 * registered: job_launch.c) -> COMPLETED (every rank exited 0) | FAILED (a
 * rank exited non-zero or died, a node was declared dead, the
 * rendezvous deadline passed) | CANCELLED. Every final state stops the
 * job's ranks on every node, ends held calls and watch streams
 * (job_watch.c), restarts a failed job from its checkpoint when it may
 * (job_restart.c) and schedules the next PENDING job. FAILED and CANCELLED
 * of a job with launched ranks are set only once those ranks have exited
 * (their devices free on their nodes) or were lost with their node: until
 * then the job is `ending` (reason set, ranks stopping), with a deadline
 * of PX_KILL_GRACE_MS + PX_PEER_DEAD_MS. Jobs found at start: job_load.c.
 *
 * Invariants: jobs live in d->jobs from submission (or load) until daemon
 * stop; async completions find their job by id, never by pointer; every
 * change is written through to the store. Loop thread only. */
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

#include "benchstore.h"
#include "jobspec.h"
#include "memstore.h"
#include "daemon.h"
#include "job_int.h"
#include "px_env.h"
#include "px_log.h"
#include "px_time.h"
#include "store.h"
#include "valstore.h"

const char *px__job_state_name(Parallax__V1__JobState s)
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

int px__job_is_placed_active(const px_job_t *job)
{
    return job->state == PARALLAX__V1__JOB_STATE__JOB_STARTING ||
           job->state == PARALLAX__V1__JOB_STATE__JOB_RUNNING;
}

static int ranks_alive(const px_job_t *job);
static void cancel_reply_all(px_job_t *job);
static void end_if_gone(px_job_t *job);
static int ranks_lose(px_job_t *job, const char *node);
void px__job_event(px_job_t *job, const char *fmt, ...)
{
    char text[PXD_REASON_MAX + 128];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(text, sizeof(text), fmt, ap);
    va_end(ap);
    px_info("job %s: %s", job->id, text);
    px_store_event_add(job->d->store, job->id, text);
}

void px__job_save(px_job_t *job)
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
    out->val_loss = job->val_loss, out->val_step = job->val_step;
    out->created_ms = job->created_ms;
    out->now_ms = px_time_wall_ms(); /* the clock of every time here */
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

/* ------------------------------------------------------------ lifetime */

px_job_t *px__job_alloc(px_daemon_t *d)
{
    px_job_t *job = calloc(1, sizeof(*job));
    if (!job)
        return NULL;
    job->d = d;
    uv_timer_init(d->loop, &job->rdv_timer);
    job->rdv_timer.data = job;
    return job;
}

void px__job_on_closed(uv_handle_t *h)
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
        uv_close((uv_handle_t *)&job->rdv_timer, px__job_on_closed);
        job = next;
    }
    d->jobs = NULL;
}

/* --------------------------------------------------------------- submit */

/* The TensorBoard run of a newly submitted training job: the given
 * directory, or this node's tensorboard-dir (config.h), with the job id
 * appended, so each job is its own run of `tensorboard --logdir DIR`. A
 * restart (spec->restart > 0) keeps its job's run: its steps go on in the
 * same directory (rank 0 skips the steps already there, rank_main.c). */
static px_status_t tensorboard_run(px_daemon_t *d, Parallax__V1__JobSpec *spec, const char *id)
{
    char base[1100], run[1200];
    if (spec->restart > 0 || px_bench_spec_is(spec))
        return PX_OK;
    if (spec->tensorboard_dir && *spec->tensorboard_dir)
        snprintf(base, sizeof(base), "%s", spec->tensorboard_dir);
    else if (px_daemon_config_tensorboard_dir(&d->cfg, d->state_dir_real, base, sizeof(base)))
        return PX_OK; /* "off" */
    snprintf(run, sizeof(run), "%s/%s", base, id);
    char *dup = strdup(run);
    if (!dup)
        return PX_ERR_NO_MEMORY;
    if (spec->tensorboard_dir != protobuf_c_empty_string)
        free(spec->tensorboard_dir);
    spec->tensorboard_dir = dup;
    return PX_OK;
}

px_status_t px_job_submit(px_daemon_t *d, const Parallax__V1__JobSpec *spec, px_job_t **job_p)
{
    px_job_t *job = px__job_alloc(d);
    Parallax__V1__JobSpec *copy;

    if (!job)
        return PX_ERR_NO_MEMORY;
    copy = (Parallax__V1__JobSpec *)px_msg_dup(&spec->base);
    if (!copy) {
        uv_close((uv_handle_t *)&job->rdv_timer, px__job_on_closed);
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
    if (tensorboard_run(d, copy, job->id) != PX_OK) {
        protobuf_c_message_free_unpacked(&copy->base, NULL);
        uv_close((uv_handle_t *)&job->rdv_timer, px__job_on_closed);
        return PX_ERR_NO_MEMORY;
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
                uv_close((uv_handle_t *)&job->rdv_timer, px__job_on_closed);
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
    px__job_save(job);
    if (px_bench_spec_is(copy)) /* no model */
        px__job_event(job, "submitted: name %s, bench %s on %u ranks, %llu..%llu bytes", copy->name,
                  copy->bench->op, copy->dp, (unsigned long long)copy->bench->min_bytes,
                  (unsigned long long)copy->bench->max_bytes);
    else {
        px_layout_t l;
        char lbuf[128];
        px_jobspec_layout(copy, &l);
        px__job_event(job, "submitted: name %s, layout %s, %u layers, %u heads, dim %u, seq %u, "
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
                             px__job_state_name(state), job->reason);
            job->ranks[r].held = NULL;
        }
    }
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
        px__job_stop_ranks(job);
    if (state == PARALLAX__V1__JOB_STATE__JOB_FAILED && !job->d->stopping &&
        (prev == PARALLAX__V1__JOB_STATE__JOB_STARTING ||
         prev == PARALLAX__V1__JOB_STATE__JOB_RUNNING))
        px__job_restart(job);
    px__job_save(job);
    if (job->reason[0])
        px__job_event(job, "%s: %s", px__job_state_name(state), job->reason);
    else
        px__job_event(job, "%s", px__job_state_name(state));
    px__job_watchers_notify(job, NULL);
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
    px__job_event(job, "%s once its ranks are gone: stopping them: %s", px__job_state_name(state),
              job->reason);
    px__job_stop_ranks(job);
    if (job->rdv_timer_active) /* rendezvous or settling: moot now */
        uv_timer_stop(&job->rdv_timer);
    uv_timer_start(&job->rdv_timer, on_end_deadline,
                   (uint64_t)(px_env_int("PX_KILL_GRACE_MS") + px_env_int("PX_PEER_DEAD_MS")), 0);
    job->rdv_timer_active = 1;
    px__job_save(job);
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
    if (state != PARALLAX__V1__JOB_STATE__JOB_COMPLETED && px__job_is_placed_active(job) &&
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
        if (px__job_is_placed_active(j) && !strcmp(j->coordinator, d->cfg.name))
            px_job_finish(j, PARALLAX__V1__JOB_STATE__JOB_FAILED, "%s", reason);
}

void px_job_node_dead(px_daemon_t *d, const char *node)
{
    for (px_job_t *j = d->jobs; j; j = j->next) {
        if (!px__job_is_placed_active(j))
            continue;
        for (int r = 0; r < j->world; r++) {
            if (!strcmp(j->ranks[r].node, node)) {
                /* its ranks cannot report their exits: lost with it (the
                 * node fences them when it comes back) */
                ranks_lose(j, node);
                px_job_finish(j, PARALLAX__V1__JOB_STATE__JOB_FAILED,
                              "node %s (rank %d) is dead: it answered no membership probe, "
                              "direct or indirect, and did not refute the suspicion "
                              "(peer-dead-ms %ld)", node, r, px_env_int("PX_PEER_DEAD_MS"));
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
            /* the node still runs ranks of a job that ended here
             * (e.g. failed at a restart of this daemon): stop them */
            for (int i = 0; i < peer->n_devices; i++) {
                if (strcmp(peer->devices[i].job_id, j->id))
                    continue;
                px_info("node %s still runs ranks of %s job %s: stopping them", peer->name,
                        px__job_state_name(j->state), j->id);
                j->reconcile_ms = now;
                px__job_stop_ranks(j);
                break;
            }
        }
        if (!px__job_is_placed_active(j) || !peer->name[0])
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
    if (!px__job_is_placed_active(job))
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
        px_valstore_record(d->store, job, m);
        px__job_save(job);
        px__job_watchers_notify(job, m);
    }
    if (req->memory) /* every rank's memory, the last step's always kept */
        px_memstore_put(job->d->store, job->id, req->memory,
                        job->spec && req->memory->step >= job->spec->steps);
    if (req->rank == 0 && req->n_bench_rows) { /* a bench job's rows */
        px_benchstore_add(job->d->store, job->id, req->bench_rows, req->n_bench_rows);
        px__job_watchers_notify(job, NULL);
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
        px__job_save(job);
        end_if_gone(job);
        return;
    }
    if (!px__job_is_placed_active(job)) {
        px__job_save(job);
        if (job->n_cancel_calls && !ranks_alive(job))
            cancel_reply_all(job);
        return;
    }
    if (exit_code == PXD_EXIT_UNKNOWN) {
        /* an adopted rank: its status went to its new parent; the
         * job completed if every rank is gone and some rank that was still
         * our child, or the job's progress, says so */
        job->n_exited_unknown++;
        px__job_save(job);
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
        px__job_save(job);
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
    px__job_save(job);
    if (!job->fail_pending) {
        job->fail_pending = 1;
        if (job->rdv_timer_active)
            uv_timer_stop(&job->rdv_timer);
        uv_timer_start(&job->rdv_timer, on_fail_settled, PXD_FAIL_SETTLE_MS, 0);
        job->rdv_timer_active = 1;
    }
}

/* ------------------------------------------------- node events, RankExited */

/* RankExited aimed at this coordinator (peerc.c: from this node's
 * supervisor), or arriving from a peer's (peer.c). */
static void serve_rank_exited(px_daemon_t *d, const ProtobufCMessage *request,
                              px_daemon_done_fn done, void *arg)
{
    const Parallax__V1__RankExitedRequest *req = (const void *)request;
    Parallax__V1__RankExitedResponse resp = PARALLAX__V1__RANK_EXITED_RESPONSE__INIT;

    px_job_rank_exited(d, req->job_id, (int)req->rank, req->node, req->exit_code, req->detail);
    if (done)
        done(d, arg, GRPC_STATUS_OK, NULL, &resp.base);
}

static void on_node_event(px_daemon_t *d, px_node_event_t ev, const px_peer_t *peer, void *arg)
{
    (void)arg;
    switch (ev) {
    case PXD_NODE_DEVICES: px_job_schedule(d); break;
    case PXD_NODE_HEARD: px_job_check_peer(d, peer); break;
    case PXD_NODE_DEAD: px_job_node_dead(d, peer->name); break;
    }
}

void px_job_attach(px_daemon_t *d)
{
    px_peerc_serve(d, "RankExited", serve_rank_exited);
    px_nodes_subscribe(d, on_node_event, NULL);
}
