/* fake_control.c: an in-memory Control service for testing pctl and the
 * px_rpc server against real clients (pctl, Python grpcio) without
 * parallaxd.
 *
 * `fake_control [--listen ADDR] [--step-ms MS]` prints "port N" (0 for a
 * unix socket) on stdout once it listens, then serves until SIGTERM/SIGINT.
 * Jobs "train" on a timer: every --step-ms one step, with a loss that decays
 * from ln(256) and the cosine learning rate the spec asks for. Special job
 * names drive failure paths: "fail-me" fails at half the steps with a reason;
 * "break-stream" ends every WatchJob stream with UNAVAILABLE after 3 events
 * (the client must fall back to polling).
 *
 * One thread owns everything (poll on the px_rpc_cq notify eventfd, a
 * timerfd and a signalfd); the px_rpc_cq thread only queues completions. */
#include <errno.h>
#include <getopt.h>
#include <math.h>
#include <poll.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/signalfd.h>
#include <sys/timerfd.h>
#include <unistd.h>

#include "parallax.pb-c.h"
#include "px_rpc.h"
#include "px_time.h"

#define MAX_JOBS 64
#define MAX_WATCHERS 64

typedef struct fake_job {
    Parallax__V1__Job job;
    Parallax__V1__JobSpec spec;
    Parallax__V1__ModelSpec model;
    Parallax__V1__ParallelSpec parallel; /* copied: the request's is freed */
    Parallax__V1__MoeSpec moe;           /* likewise */
    Parallax__V1__JobSpec *owned;        /* a deep copy of the request's spec (packed and
                                            unpacked, so a new field is never left pointing
                                            into the freed request); spec's strings are its */
    Parallax__V1__RankInfo *ranks;
    Parallax__V1__RankInfo **rank_ptrs;
    Parallax__V1__StepMetrics *metrics; /* steps entries, [0 .. job.step) valid */
    Parallax__V1__StepMetrics **metric_ptrs;
} fake_job_t;

typedef struct watcher {
    px_rpc_call_t *call;
    fake_job_t *job;
    int sent;
} watcher_t;

static fake_job_t *jobs[MAX_JOBS];
static int n_jobs;
static watcher_t watchers[MAX_WATCHERS];
static int step_ms = 20;
static int64_t t0_ms;

static fake_job_t *find_job(const char *id)
{
    for (int i = 0; i < n_jobs; i++)
        if (id && !strcmp(jobs[i]->job.id, id))
            return jobs[i];
    return NULL;
}

static int is_final(const fake_job_t *j)
{
    return j->job.state >= PARALLAX__V1__JOB_STATE__JOB_COMPLETED;
}

static void send_event(watcher_t *w, int with_metrics)
{
    Parallax__V1__JobEvent ev = PARALLAX__V1__JOB_EVENT__INIT;
    ev.job = &w->job->job;
    if (with_metrics && w->job->job.step > 0)
        ev.metrics = &w->job->metrics[w->job->job.step - 1];
    px_rpc_call_stream_send(w->call, &ev.base);
    w->sent++;
}

static void watcher_end(watcher_t *w, int ok)
{
    if (ok)
        px_rpc_call_stream_finish(w->call);
    else
        px_rpc_call_fail(w->call, GRPC_STATUS_UNAVAILABLE, "watch stream broken on purpose");
    w->call = NULL;
    w->job = NULL;
}

/* After a change of `j`: one event to each of its watchers; streams end
 * once the job is final. */
static void notify_watchers(fake_job_t *j, int with_metrics)
{
    for (int i = 0; i < MAX_WATCHERS; i++) {
        watcher_t *w = &watchers[i];
        if (!w->call || w->job != j)
            continue;
        send_event(w, with_metrics);
        if (is_final(j))
            watcher_end(w, 1);
        else if (!strcmp(j->spec.name, "break-stream") && w->sent >= 3)
            watcher_end(w, 0);
    }
}

static void finish_job(fake_job_t *j, Parallax__V1__JobState state, const char *reason,
                       int exit_code)
{
    j->job.state = state;
    free(j->job.reason);
    j->job.reason = strdup(reason);
    j->job.finished_ms = px_time_wall_ms();
    for (size_t r = 0; r < j->job.n_ranks; r++) {
        free(j->ranks[r].state);
        j->ranks[r].state = strdup("exited");
        j->ranks[r].exit_code = (r == 1 && exit_code) ? exit_code : (exit_code < 0 ? -15 : 0);
    }
}

/* One simulated training step of every running job. */
static void tick(void)
{
    for (int i = 0; i < n_jobs; i++) {
        fake_job_t *j = jobs[i];
        Parallax__V1__StepMetrics *m;
        uint32_t s, steps = j->spec.steps, warm;
        double progress;

        if (is_final(j))
            continue;
        if (j->job.state != PARALLAX__V1__JOB_STATE__JOB_RUNNING) {
            j->job.state = PARALLAX__V1__JOB_STATE__JOB_RUNNING;
            j->job.started_ms = px_time_wall_ms();
            for (size_t r = 0; r < j->job.n_ranks; r++) {
                free(j->ranks[r].state);
                j->ranks[r].state = strdup("running");
                j->ranks[r].pid = 10000 + (int)r;
            }
            notify_watchers(j, 0);
            continue;
        }
        s = j->job.step + 1;
        m = &j->metrics[s - 1];
        warm = j->spec.warmup_steps ? j->spec.warmup_steps : steps / 20;
        if (s <= warm && warm > 0) {
            m->lr = j->spec.lr * (float)s / (float)warm;
        } else {
            progress = steps > warm ? (double)(s - warm) / (double)(steps - warm) : 1.0;
            m->lr = (float)(j->spec.lr * (j->spec.min_lr_ratio + (1.0 - j->spec.min_lr_ratio) *
                                                                   0.5 * (1.0 + cos(M_PI * progress))));
        }
        m->step = s;
        m->loss = (float)(log(256.0) * exp(-(double)s / 150.0) + 1.5 * (1 - exp(-(double)s / 150.0)));
        m->grad_norm = (float)(1.0 / sqrt((double)s));
        m->tokens_per_second = (double)j->spec.batch * j->model.seq / (step_ms / 1000.0);
        m->elapsed_s = (double)s * step_ms / 1000.0;
        m->time_ms = px_time_wall_ms();
        j->job.step = s;
        j->job.loss = m->loss;
        j->job.grad_norm = m->grad_norm;
        j->job.lr = m->lr;
        j->job.tokens_per_second = m->tokens_per_second;
        if (!strcmp(j->spec.name, "fail-me") && s >= steps / 2)
            finish_job(j, PARALLAX__V1__JOB_STATE__JOB_FAILED, "rank 1 exited with code 1", 1);
        else if (s >= steps)
            finish_job(j, PARALLAX__V1__JOB_STATE__JOB_COMPLETED, "", 0);
        notify_watchers(j, 1);
    }
}

/* ------------------------------------------------------------- handlers */

static void h_submit(px_rpc_call_t *call, const ProtobufCMessage *request, void *arg)
{
    const Parallax__V1__SubmitJobRequest *req = (const Parallax__V1__SubmitJobRequest *)request;
    const Parallax__V1__JobSpec *sp = req->spec;
    Parallax__V1__SubmitJobResponse resp = PARALLAX__V1__SUBMIT_JOB_RESPONSE__INIT;
    fake_job_t *j;
    char id[32];

    if (!sp || !sp->model)
        return (void)px_rpc_call_fail(call, GRPC_STATUS_INVALID_ARGUMENT, "missing spec/model");
    if (!sp->data_path || sp->data_path[0] != '/' || access(sp->data_path, R_OK) != 0)
        return (void)px_rpc_call_fail(call, GRPC_STATUS_INVALID_ARGUMENT,
                                      "data file '%s' is not an absolute readable path",
                                      sp->data_path ? sp->data_path : "");
    if (!sp->dp || sp->batch % sp->dp)
        return (void)px_rpc_call_fail(call, GRPC_STATUS_INVALID_ARGUMENT,
                                      "batch %u is not divisible by dp %u", sp->batch, sp->dp);
    if (!sp->model->heads || sp->model->dim % sp->model->heads)
        return (void)px_rpc_call_fail(call, GRPC_STATUS_INVALID_ARGUMENT,
                                      "dim %u is not divisible by heads %u", sp->model->dim,
                                      sp->model->heads);
    if (sp->dp > 8)
        return (void)px_rpc_call_fail(call, GRPC_STATUS_UNAVAILABLE,
                                      "dp %u needs more than the 8 free devices", sp->dp);
    if (n_jobs == MAX_JOBS || sp->steps == 0 || sp->steps > 100000)
        return (void)px_rpc_call_fail(call, GRPC_STATUS_RESOURCE_EXHAUSTED, "too many jobs");

    j = calloc(1, sizeof(*j));
    parallax__v1__job__init(&j->job);
    parallax__v1__job_spec__init(&j->spec);
    parallax__v1__model_spec__init(&j->model);
    /* every string and sub-message points into the request, which is freed
     * after this call: keep a deep copy (a job lives to the process's end) */
    {
        size_t len = parallax__v1__job_spec__get_packed_size(sp);
        uint8_t *buf = malloc(len ? len : 1);
        if (buf) {
            parallax__v1__job_spec__pack(sp, buf);
            j->owned = parallax__v1__job_spec__unpack(NULL, len, buf);
            free(buf);
        }
        if (!j->owned) {
            free(j);
            return (void)px_rpc_call_fail(call, GRPC_STATUS_RESOURCE_EXHAUSTED, "out of memory");
        }
    }
    j->spec = *j->owned;
    j->model = *j->owned->model;
    j->spec.bench = NULL;
    j->spec.model = &j->model;
    if (j->owned->parallel) {
        j->parallel = *j->owned->parallel;
        j->spec.parallel = &j->parallel;
    }
    if (j->owned->moe) {
        j->moe = *j->owned->moe;
        j->spec.moe = &j->moe;
    }
    snprintf(id, sizeof(id), "job-%d", n_jobs + 1);
    j->job.id = strdup(id);
    j->job.spec = &j->spec;
    j->job.state = PARALLAX__V1__JOB_STATE__JOB_PENDING;
    j->job.reason = strdup("");
    j->job.coordinator = strdup("fake");
    j->job.created_ms = px_time_wall_ms();
    j->ranks = calloc(sp->dp, sizeof(*j->ranks));
    j->rank_ptrs = calloc(sp->dp, sizeof(*j->rank_ptrs));
    for (uint32_t r = 0; r < sp->dp; r++) {
        char dev[16];
        parallax__v1__rank_info__init(&j->ranks[r]);
        snprintf(dev, sizeof(dev), "cpu:%u", r);
        j->ranks[r].rank = r;
        j->ranks[r].node = strdup("fake");
        j->ranks[r].device = strdup(dev);
        j->ranks[r].state = strdup("launching");
        j->rank_ptrs[r] = &j->ranks[r];
    }
    j->job.n_ranks = sp->dp;
    j->job.ranks = j->rank_ptrs;
    j->metrics = calloc(sp->steps, sizeof(*j->metrics));
    j->metric_ptrs = calloc(sp->steps, sizeof(*j->metric_ptrs));
    for (uint32_t s = 0; s < sp->steps; s++) {
        parallax__v1__step_metrics__init(&j->metrics[s]);
        j->metric_ptrs[s] = &j->metrics[s];
    }
    jobs[n_jobs++] = j;
    resp.job_id = j->job.id;
    px_rpc_call_reply(call, &resp.base);
}

static fake_job_t *job_or_fail(px_rpc_call_t *call, const char *id)
{
    fake_job_t *j = find_job(id);
    if (!j)
        px_rpc_call_fail(call, GRPC_STATUS_NOT_FOUND, "job '%s' not found", id ? id : "");
    return j;
}

static void h_get(px_rpc_call_t *call, const ProtobufCMessage *request, void *arg)
{
    fake_job_t *j = job_or_fail(call, ((const Parallax__V1__GetJobRequest *)request)->job_id);
    if (j)
        px_rpc_call_reply(call, &j->job.base);
}

static void h_list(px_rpc_call_t *call, const ProtobufCMessage *request, void *arg)
{
    Parallax__V1__ListJobsResponse resp = PARALLAX__V1__LIST_JOBS_RESPONSE__INIT;
    Parallax__V1__Job *list[MAX_JOBS];
    for (int i = 0; i < n_jobs; i++)
        list[i] = &jobs[i]->job;
    resp.n_jobs = (size_t)n_jobs;
    resp.jobs = list;
    px_rpc_call_reply(call, &resp.base);
}

static void h_cancel(px_rpc_call_t *call, const ProtobufCMessage *request, void *arg)
{
    fake_job_t *j = job_or_fail(call, ((const Parallax__V1__CancelJobRequest *)request)->job_id);
    if (!j)
        return;
    if (is_final(j))
        return (void)px_rpc_call_fail(call, GRPC_STATUS_FAILED_PRECONDITION,
                                      "job %s already ended", j->job.id);
    finish_job(j, PARALLAX__V1__JOB_STATE__JOB_CANCELLED, "cancelled by user", -15);
    notify_watchers(j, 0);
    px_rpc_call_reply(call, &j->job.base);
}

static void watcher_cancelled(px_rpc_call_t *call, void *arg)
{
    watcher_t *w = arg;
    px_rpc_call_stream_finish(call);
    w->call = NULL;
    w->job = NULL;
}

static void h_watch(px_rpc_call_t *call, const ProtobufCMessage *request, void *arg)
{
    fake_job_t *j = job_or_fail(call, ((const Parallax__V1__WatchJobRequest *)request)->job_id);
    if (!j)
        return;
    for (int i = 0; i < MAX_WATCHERS; i++) {
        watcher_t *w = &watchers[i];
        if (w->call)
            continue;
        w->call = call;
        w->job = j;
        w->sent = 0;
        px_rpc_call_on_cancel(call, watcher_cancelled, w);
        send_event(w, 1);
        if (is_final(j))
            watcher_end(w, 1);
        return;
    }
    px_rpc_call_fail(call, GRPC_STATUS_RESOURCE_EXHAUSTED, "too many watchers");
}

static void h_nodes(px_rpc_call_t *call, const ProtobufCMessage *request, void *arg)
{
    Parallax__V1__ListNodesResponse resp = PARALLAX__V1__LIST_NODES_RESPONSE__INIT;
    Parallax__V1__NodeInfo node = PARALLAX__V1__NODE_INFO__INIT;
    Parallax__V1__NodeInfo *nodes[1] = {&node};
    Parallax__V1__Device devs[8], *dev_ptrs[8];
    char names[8][16];

    for (int i = 0; i < 8; i++) {
        parallax__v1__device__init(&devs[i]);
        snprintf(names[i], sizeof(names[i]), "cpu:%d", i);
        devs[i].name = names[i];
        devs[i].job_id = "";
        dev_ptrs[i] = &devs[i];
    }
    /* Devices held by running jobs, in order. */
    for (int k = 0, d = 0; k < n_jobs; k++)
        for (size_t r = 0; !is_final(jobs[k]) && r < jobs[k]->job.n_ranks && d < 8; r++)
            devs[d++].job_id = jobs[k]->job.id;
    node.name = "fake";
    node.control_addr = "127.0.0.1:0";
    node.peer_addr = "127.0.0.1:0";
    node.alive = 1;
    node.last_seen_ms = px_time_wall_ms();
    node.version = "test";
    node.n_devices = 8;
    node.devices = dev_ptrs;
    resp.n_nodes = 1;
    resp.nodes = nodes;
    px_rpc_call_reply(call, &resp.base);
}

static void h_metrics(px_rpc_call_t *call, const ProtobufCMessage *request, void *arg)
{
    Parallax__V1__GetMetricsResponse resp = PARALLAX__V1__GET_METRICS_RESPONSE__INIT;
    fake_job_t *j = job_or_fail(call, ((const Parallax__V1__GetMetricsRequest *)request)->job_id);
    if (!j)
        return;
    resp.n_steps = j->job.step;
    resp.steps = j->metric_ptrs;
    px_rpc_call_reply(call, &resp.base);
}

static void h_logs(px_rpc_call_t *call, const ProtobufCMessage *request, void *arg)
{
    const Parallax__V1__GetLogsRequest *req = (const Parallax__V1__GetLogsRequest *)request;
    Parallax__V1__GetLogsResponse resp = PARALLAX__V1__GET_LOGS_RESPONSE__INIT;
    fake_job_t *j = job_or_fail(call, req->job_id);
    char *text = NULL;
    size_t len = 0, off = 0;
    FILE *f;

    if (!j)
        return;
    if (req->rank >= j->job.n_ranks)
        return (void)px_rpc_call_fail(call, GRPC_STATUS_INVALID_ARGUMENT,
                                      "rank %u out of range (world size %zu)", req->rank,
                                      j->job.n_ranks);
    f = open_memstream(&text, &len);
    fprintf(f, "rank %u: starting on cpu:%u\n", req->rank, req->rank);
    for (uint32_t s = 0; s < j->job.step; s++)
        fprintf(f, "rank %u: step %u loss %.4f\n", req->rank, s + 1, j->metrics[s].loss);
    fclose(f);
    if (req->tail_bytes && len > req->tail_bytes)
        off = len - req->tail_bytes;
    resp.text.data = (uint8_t *)text + off;
    resp.text.len = len - off;
    px_rpc_call_reply(call, &resp.base);
    free(text);
}

static const px_rpc_method_t methods[] = {
    {"/parallax.v1.Control/SubmitJob", &parallax__v1__submit_job_request__descriptor, 0, h_submit, NULL},
    {"/parallax.v1.Control/GetJob", &parallax__v1__get_job_request__descriptor, 0, h_get, NULL},
    {"/parallax.v1.Control/ListJobs", &parallax__v1__list_jobs_request__descriptor, 0, h_list, NULL},
    {"/parallax.v1.Control/CancelJob", &parallax__v1__cancel_job_request__descriptor, 0, h_cancel, NULL},
    {"/parallax.v1.Control/WatchJob", &parallax__v1__watch_job_request__descriptor, 1, h_watch, NULL},
    {"/parallax.v1.Control/ListNodes", &parallax__v1__list_nodes_request__descriptor, 0, h_nodes, NULL},
    {"/parallax.v1.Control/GetMetrics", &parallax__v1__get_metrics_request__descriptor, 0, h_metrics, NULL},
    {"/parallax.v1.Control/GetLogs", &parallax__v1__get_logs_request__descriptor, 0, h_logs, NULL},
};

static void notify_eventfd(void *arg)
{
    uint64_t one = 1;
    if (write(*(int *)arg, &one, sizeof(one)) < 0)
        abort();
}

static void free_job(fake_job_t *j)
{
    for (size_t r = 0; r < j->job.n_ranks; r++) {
        free(j->ranks[r].node);
        free(j->ranks[r].device);
        free(j->ranks[r].state);
    }
    free(j->ranks);
    free(j->rank_ptrs);
    free(j->metrics);
    free(j->metric_ptrs);
    free(j->job.id);
    free(j->job.reason);
    free(j->job.coordinator);
    parallax__v1__job_spec__free_unpacked(j->owned, NULL);
    free(j);
}

int main(int argc, char **argv)
{
    static const struct option opts[] = {
        {"listen", required_argument, NULL, 'l'},
        {"step-ms", required_argument, NULL, 's'},
        {NULL, 0, NULL, 0},
    };
    const char *addr = "127.0.0.1:0";
    px_rpc_cq_t *cq = NULL;
    px_rpc_server_t *server = NULL;
    struct itimerspec its;
    sigset_t mask;
    int efd, tfd, sfd, opt, running = 1;

    while ((opt = getopt_long(argc, argv, "", opts, NULL)) != -1) {
        if (opt == 'l')
            addr = optarg;
        else if (opt == 's')
            step_ms = atoi(optarg) > 0 ? atoi(optarg) : 20;
        else
            return 2;
    }
    t0_ms = px_time_wall_ms();
    sigemptyset(&mask);
    sigaddset(&mask, SIGTERM);
    sigaddset(&mask, SIGINT);
    sigprocmask(SIG_BLOCK, &mask, NULL);
    signal(SIGPIPE, SIG_IGN);
    sfd = signalfd(-1, &mask, SFD_CLOEXEC);
    efd = eventfd(0, EFD_CLOEXEC);
    tfd = timerfd_create(CLOCK_MONOTONIC, TFD_CLOEXEC);
    memset(&its, 0, sizeof(its));
    its.it_interval.tv_sec = step_ms / 1000;
    its.it_interval.tv_nsec = (long)(step_ms % 1000) * 1000000L;
    its.it_value = its.it_interval;
    if (sfd < 0 || efd < 0 || tfd < 0 || timerfd_settime(tfd, 0, &its, NULL) != 0)
        return 1;
    if (px_rpc_cq_create(notify_eventfd, &efd, &cq) != PX_OK)
        return 1;
    if (px_rpc_server_create(cq, &addr, 1, methods, sizeof(methods) / sizeof(methods[0]),
                             &server) != PX_OK) {
        px_rpc_cq_destroy(cq);
        return 1;
    }
    printf("port %d\n", px_rpc_server_port(server, 0));
    fflush(stdout);

    while (running) {
        struct pollfd pfd[3] = {{efd, POLLIN, 0}, {tfd, POLLIN, 0}, {sfd, POLLIN, 0}};
        uint64_t n;
        if (poll(pfd, 3, -1) < 0) {
            if (errno == EINTR)
                continue;
            break;
        }
        if ((pfd[0].revents & POLLIN) && read(efd, &n, sizeof(n)) < 0)
            break;
        px_rpc_cq_drain(cq);
        if (pfd[1].revents & POLLIN) {
            if (read(tfd, &n, sizeof(n)) < 0)
                break;
            tick();
        }
        if (pfd[2].revents & POLLIN)
            running = 0;
    }
    px_rpc_server_destroy(server);
    px_rpc_cq_destroy(cq);
    for (int i = 0; i < n_jobs; i++)
        free_job(jobs[i]);
    close(efd);
    close(tfd);
    close(sfd);
    return 0;
}
