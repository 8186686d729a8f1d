/* test_rpc.c: unit tests of px_rpc (proto/px_rpc.h) with a server and its
 * clients in one process.
 *
 * Threads: an "owner" thread creates the px_rpc_cq and the servers and runs
 * the loop (poll on the cq's notify eventfd and on a command pipe, then
 * px_rpc_cq_drain). The main thread is the client: blocking calls on their
 * private queues, and commands it posts to the owner (run a function on the
 * owner thread and wait for it) for everything that must happen there. */
#include <errno.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "parallax.pb-c.h"
#include "px_rpc.h"
#include "px_time.h"

static int failures;

#define CHECK(cond) do { if (!(cond)) { \
    fprintf(stderr, "FAIL %s:%d: %s\n", __FILE__, __LINE__, #cond); failures++; } } while (0)

/* ----------------------------------------------------------- owner loop */

typedef struct {
    void (*fn)(void *arg);
    void *arg;
    int done;
} cmd_t;

static px_rpc_cq_t *g_cq;
static int g_notify_fd;
static int g_cmd_pipe[2];
static volatile int g_stop;
static pthread_mutex_t g_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t g_cond = PTHREAD_COND_INITIALIZER;

static void notify_fd(void *arg)
{
    uint64_t one = 1;
    if (write(*(int *)arg, &one, sizeof(one)) < 0)
        abort();
}

static void *owner_main(void *arg)
{
    while (!g_stop) {
        struct pollfd pfd[2] = {{g_notify_fd, POLLIN, 0}, {g_cmd_pipe[0], POLLIN, 0}};
        if (poll(pfd, 2, -1) < 0 && errno != EINTR)
            abort();
        if (pfd[0].revents & POLLIN) {
            uint64_t n;
            if (read(g_notify_fd, &n, sizeof(n)) < 0)
                abort();
        }
        px_rpc_cq_drain(g_cq);
        if (pfd[1].revents & POLLIN) {
            cmd_t *cmd;
            if (read(g_cmd_pipe[0], &cmd, sizeof(cmd)) != sizeof(cmd))
                abort();
            cmd->fn(cmd->arg);
            pthread_mutex_lock(&g_lock);
            cmd->done = 1;
            pthread_cond_broadcast(&g_cond);
            pthread_mutex_unlock(&g_lock);
        }
    }
    return NULL;
}

/* Runs fn(arg) on the owner thread and waits for it. */
static void on_owner(void (*fn)(void *), void *arg)
{
    cmd_t cmd = {fn, arg, 0};
    cmd_t *p = &cmd;
    if (write(g_cmd_pipe[1], &p, sizeof(p)) != sizeof(p))
        abort();
    pthread_mutex_lock(&g_lock);
    while (!cmd.done)
        pthread_cond_wait(&g_cond, &g_lock);
    pthread_mutex_unlock(&g_lock);
}

/* Waits until *flag != 0 (set under g_lock by the owner), at most ms. */
static int wait_flag(int *flag, int ms)
{
    struct timespec ts;
    int v;
    clock_gettime(CLOCK_REALTIME, &ts);
    ts.tv_sec += ms / 1000;
    ts.tv_nsec += (long)(ms % 1000) * 1000000L;
    if (ts.tv_nsec >= 1000000000L) {
        ts.tv_sec++;
        ts.tv_nsec -= 1000000000L;
    }
    pthread_mutex_lock(&g_lock);
    while (!*flag && pthread_cond_timedwait(&g_cond, &g_lock, &ts) == 0)
        ;
    v = *flag;
    pthread_mutex_unlock(&g_lock);
    return v;
}

static void set_flag(int *flag, int v)
{
    pthread_mutex_lock(&g_lock);
    *flag = v;
    pthread_cond_broadcast(&g_cond);
    pthread_mutex_unlock(&g_lock);
}

/* -------------------------------------------------------------- handlers */

static px_rpc_call_t *g_deferred_call;
static char g_deferred_name[64];
static int g_cancel_stream_fired, g_cancel_deadline_fired, g_cancel_shutdown_fired;
static px_rpc_call_t *g_held_call;

/* GetJob: "missing" -> NOT_FOUND; else a Job echoing the id with step 42. */
static void h_get_job(px_rpc_call_t *call, const ProtobufCMessage *request, void *arg)
{
    const Parallax__V1__GetJobRequest *req = (const Parallax__V1__GetJobRequest *)request;
    Parallax__V1__Job job = PARALLAX__V1__JOB__INIT;
    if (!strcmp(req->job_id, "missing")) {
        px_rpc_call_fail(call, GRPC_STATUS_NOT_FOUND, "job %s not found", req->job_id);
        return;
    }
    job.id = req->job_id;
    job.step = 42;
    job.loss = 2.5f;
    job.state = PARALLAX__V1__JOB_STATE__JOB_RUNNING;
    px_rpc_call_reply(call, &job.base);
}

static void deferred_reply(void *arg)
{
    Parallax__V1__SubmitJobResponse resp = PARALLAX__V1__SUBMIT_JOB_RESPONSE__INIT;
    char id[80];
    snprintf(id, sizeof(id), "job-%s", g_deferred_name);
    resp.job_id = id;
    px_rpc_call_reply(g_deferred_call, &resp.base);
    g_deferred_call = NULL;
}

static void *post_deferred(void *arg)
{
    static cmd_t cmd;
    cmd_t *p = &cmd;
    cmd.fn = deferred_reply;
    cmd.arg = NULL;
    cmd.done = 0;
    if (write(g_cmd_pipe[1], &p, sizeof(p)) != sizeof(p))
        abort();
    return NULL;
}

/* SubmitJob: keeps the call and replies from a later loop iteration. */
static void h_submit(px_rpc_call_t *call, const ProtobufCMessage *request, void *arg)
{
    const Parallax__V1__SubmitJobRequest *req = (const Parallax__V1__SubmitJobRequest *)request;
    snprintf(g_deferred_name, sizeof(g_deferred_name), "%s",
             req->spec && req->spec->name ? req->spec->name : "");
    g_deferred_call = call;
    post_deferred(NULL);
}

static void on_cancel_stream(px_rpc_call_t *call, void *arg)
{
    Parallax__V1__JobEvent ev = PARALLAX__V1__JOB_EVENT__INIT;
    CHECK(px_rpc_call_is_cancelled(call));
    CHECK(px_rpc_call_stream_send(call, &ev.base) == PX_ERR_ABORTED);
    CHECK(px_rpc_call_stream_finish(call) == PX_OK);
    set_flag(&g_cancel_stream_fired, 1);
}

static void on_cancel_shutdown(px_rpc_call_t *call, void *arg)
{
    px_rpc_call_fail(call, GRPC_STATUS_UNAVAILABLE, "shutting down");
    set_flag(&g_cancel_shutdown_fired, 1);
}

/* WatchJob: "n=K" streams K events (step 1..K) then OK; "hold" sends one
 * and waits for the client to cancel; "shutdown" sends one and waits for
 * the server to go away. */
static void h_watch(px_rpc_call_t *call, const ProtobufCMessage *request, void *arg)
{
    const Parallax__V1__WatchJobRequest *req = (const Parallax__V1__WatchJobRequest *)request;
    Parallax__V1__JobEvent ev = PARALLAX__V1__JOB_EVENT__INIT;
    Parallax__V1__StepMetrics m = PARALLAX__V1__STEP_METRICS__INIT;
    Parallax__V1__Job job = PARALLAX__V1__JOB__INIT;
    int n;

    ev.metrics = &m;
    ev.job = &job;
    job.id = req->job_id;
    if (sscanf(req->job_id, "n=%d", &n) == 1) {
        for (int i = 1; i <= n; i++) {
            m.step = i;
            m.loss = 5.0f / i;
            CHECK(px_rpc_call_stream_send(call, &ev.base) == PX_OK);
        }
        px_rpc_call_stream_finish(call);
        return;
    }
    m.step = 1;
    CHECK(px_rpc_call_stream_send(call, &ev.base) == PX_OK);
    if (!strcmp(req->job_id, "hold"))
        px_rpc_call_on_cancel(call, on_cancel_stream, NULL);
    else
        px_rpc_call_on_cancel(call, on_cancel_shutdown, NULL);
}

static void on_cancel_deadline(px_rpc_call_t *call, void *arg)
{
    CHECK(px_rpc_call_is_cancelled(call));
    px_rpc_call_fail(call, GRPC_STATUS_CANCELLED, "gone");
    set_flag(&g_cancel_deadline_fired, 1);
}

/* GetLogs: never answers; the client's deadline ends it. */
static void h_get_logs(px_rpc_call_t *call, const ProtobufCMessage *request, void *arg)
{
    g_held_call = call;
    px_rpc_call_on_cancel(call, on_cancel_deadline, NULL);
}

static const px_rpc_method_t g_methods[] = {
    {"/parallax.v1.Control/GetJob", &parallax__v1__get_job_request__descriptor, 0, h_get_job, NULL},
    {"/parallax.v1.Control/SubmitJob", &parallax__v1__submit_job_request__descriptor, 0, h_submit,
     NULL},
    {"/parallax.v1.Control/WatchJob", &parallax__v1__watch_job_request__descriptor, 1, h_watch,
     NULL},
    {"/parallax.v1.Control/GetLogs", &parallax__v1__get_logs_request__descriptor, 0, h_get_logs,
     NULL},
};

/* --------------------------------------------------------- owner commands */

typedef struct {
    const char *addr;
    px_rpc_server_t *server;
    px_status_t status;
} server_cmd_t;

static void cmd_server_create(void *arg)
{
    server_cmd_t *c = arg;
    c->status = px_rpc_server_create(g_cq, &c->addr, 1, g_methods,
                                     sizeof(g_methods) / sizeof(g_methods[0]), &c->server);
}

static void cmd_stop(void *arg)
{
    px_rpc_server_destroy(NULL); /* a no-op by contract */
    g_stop = 1;
}

static void cmd_server_destroy(void *arg)
{
    px_rpc_server_destroy(arg);
}

typedef struct {
    px_rpc_channel_t *ch;
    int done;
    grpc_status_code code;
    char id[64];
    uint32_t step;
} async_cmd_t;

static void async_done(void *arg, grpc_status_code code, const char *message,
                       const ProtobufCMessage *response)
{
    async_cmd_t *a = arg;
    a->code = code;
    if (response) {
        const Parallax__V1__Job *job = (const Parallax__V1__Job *)response;
        snprintf(a->id, sizeof(a->id), "%s", job->id);
        a->step = job->step;
    }
    set_flag(&a->done, 1);
}

static void cmd_async(void *arg)
{
    async_cmd_t *a = arg;
    Parallax__V1__GetJobRequest req = PARALLAX__V1__GET_JOB_REQUEST__INIT;
    req.job_id = "async-7";
    CHECK(px_rpc_call_async(g_cq, a->ch, "/parallax.v1.Control/GetJob", &req.base,
                            &parallax__v1__job__descriptor, 5000, async_done, a) == PX_OK);
}

/* ------------------------------------------------------------------ tests */

static void test_unary(px_rpc_channel_t *ch)
{
    Parallax__V1__GetJobRequest req = PARALLAX__V1__GET_JOB_REQUEST__INIT;
    ProtobufCMessage *resp = NULL;
    px_rpc_result_t res = {0};
    px_status_t status;

    req.job_id = "abc";
    status = px_rpc_call_unary(ch, "/parallax.v1.Control/GetJob", &req.base,
                               &parallax__v1__job__descriptor, 5000, &resp, &res);
    CHECK(status == PX_OK);
    CHECK(res.code == GRPC_STATUS_OK);
    if (resp) {
        Parallax__V1__Job *job = (Parallax__V1__Job *)resp;
        CHECK(!strcmp(job->id, "abc"));
        CHECK(job->step == 42);
        CHECK(job->loss == 2.5f);
        CHECK(job->state == PARALLAX__V1__JOB_STATE__JOB_RUNNING);
        protobuf_c_message_free_unpacked(resp, NULL);
    }
    free(res.message);

    req.job_id = "missing";
    resp = NULL;
    status = px_rpc_call_unary(ch, "/parallax.v1.Control/GetJob", &req.base,
                               &parallax__v1__job__descriptor, 5000, &resp, &res);
    CHECK(status == PX_ERR_NOT_FOUND);
    CHECK(res.code == GRPC_STATUS_NOT_FOUND);
    CHECK(res.message && !strcmp(res.message, "job missing not found"));
    CHECK(resp == NULL);
    free(res.message);
    printf("ok unary + error status\n");
}

static void test_deferred(px_rpc_channel_t *ch)
{
    Parallax__V1__SubmitJobRequest req = PARALLAX__V1__SUBMIT_JOB_REQUEST__INIT;
    Parallax__V1__JobSpec spec = PARALLAX__V1__JOB_SPEC__INIT;
    ProtobufCMessage *resp = NULL;
    px_status_t status;

    spec.name = "tiny";
    req.spec = &spec;
    status = px_rpc_call_unary(ch, "/parallax.v1.Control/SubmitJob", &req.base,
                               &parallax__v1__submit_job_response__descriptor, 5000, &resp, NULL);
    CHECK(status == PX_OK);
    if (resp) {
        CHECK(!strcmp(((Parallax__V1__SubmitJobResponse *)resp)->job_id, "job-tiny"));
        protobuf_c_message_free_unpacked(resp, NULL);
    }
    printf("ok deferred reply\n");
}

static void test_stream(px_rpc_channel_t *ch)
{
    Parallax__V1__WatchJobRequest req = PARALLAX__V1__WATCH_JOB_REQUEST__INIT;
    px_rpc_stream_t *st = NULL;
    ProtobufCMessage *msg;
    px_rpc_result_t res = {0};
    px_status_t status;
    uint32_t expect = 1;

    req.job_id = "n=25";
    CHECK(px_rpc_stream_open(ch, "/parallax.v1.Control/WatchJob", &req.base, 5000, &st) == PX_OK);
    while ((status = px_rpc_stream_next(st, &parallax__v1__job_event__descriptor, &msg, &res))
           == PX_OK) {
        Parallax__V1__JobEvent *ev = (Parallax__V1__JobEvent *)msg;
        CHECK(ev->metrics && ev->metrics->step == expect);
        CHECK(ev->metrics && ev->metrics->loss == 5.0f / expect);
        CHECK(ev->job && !strcmp(ev->job->id, "n=25"));
        expect++;
        protobuf_c_message_free_unpacked(msg, NULL);
    }
    CHECK(status == PX_ERR_NOT_FOUND);
    CHECK(res.code == GRPC_STATUS_OK);
    CHECK(expect == 26);
    free(res.message);
    px_rpc_stream_close(st);
    printf("ok server streaming (%u messages)\n", expect - 1);
}

static void test_stream_cancel(px_rpc_channel_t *ch)
{
    Parallax__V1__WatchJobRequest req = PARALLAX__V1__WATCH_JOB_REQUEST__INIT;
    px_rpc_stream_t *st = NULL;
    ProtobufCMessage *msg = NULL;

    req.job_id = "hold";
    CHECK(px_rpc_stream_open(ch, "/parallax.v1.Control/WatchJob", &req.base, -1, &st) == PX_OK);
    CHECK(px_rpc_stream_next(st, &parallax__v1__job_event__descriptor, &msg, NULL) == PX_OK);
    CHECK(msg && ((Parallax__V1__JobEvent *)msg)->metrics->step == 1);
    protobuf_c_message_free_unpacked(msg, NULL);
    px_rpc_stream_close(st);
    CHECK(wait_flag(&g_cancel_stream_fired, 5000));
    printf("ok client cancel -> server on_cancel\n");
}

static void test_deadline(px_rpc_channel_t *ch)
{
    Parallax__V1__GetLogsRequest req = PARALLAX__V1__GET_LOGS_REQUEST__INIT;
    ProtobufCMessage *resp = NULL;
    px_rpc_result_t res = {0};
    int64_t t0 = px_time_mono_ms(), dt;
    px_status_t status;

    req.job_id = "x";
    status = px_rpc_call_unary(ch, "/parallax.v1.Control/GetLogs", &req.base,
                               &parallax__v1__get_logs_response__descriptor, 300, &resp, &res);
    dt = px_time_mono_ms() - t0;
    CHECK(status == PX_ERR_TIMEOUT);
    CHECK(res.code == GRPC_STATUS_DEADLINE_EXCEEDED);
    CHECK(dt >= 250 && dt < 3000);
    CHECK(wait_flag(&g_cancel_deadline_fired, 5000));
    free(res.message);
    printf("ok deadline exceeded after %lld ms, server saw the cancel\n", (long long)dt);
}

static void test_unimplemented_and_health(px_rpc_channel_t *ch)
{
    Parallax__V1__ListJobsRequest req = PARALLAX__V1__LIST_JOBS_REQUEST__INIT;
    ProtobufCMessage *resp = NULL;
    px_rpc_result_t res = {0};
    px_status_t status;

    status = px_rpc_call_unary(ch, "/parallax.v1.Control/NoSuchMethod", &req.base,
                               &parallax__v1__list_jobs_response__descriptor, 5000, &resp, &res);
    CHECK(status == PX_ERR_INTERNAL);
    CHECK(res.code == GRPC_STATUS_UNIMPLEMENTED);
    CHECK(res.message && strstr(res.message, "NoSuchMethod"));
    free(res.message);

    /* HealthCheckResponse{status=SERVING} is field 1 varint 1, which reads
     * as ModelSpec{layers=1}. */
    resp = NULL;
    status = px_rpc_call_unary(ch, "/grpc.health.v1.Health/Check", &req.base,
                               &parallax__v1__model_spec__descriptor, 5000, &resp, &res);
    CHECK(status == PX_OK);
    CHECK(resp && ((Parallax__V1__ModelSpec *)resp)->layers == 1);
    if (resp)
        protobuf_c_message_free_unpacked(resp, NULL);
    free(res.message);
    printf("ok UNIMPLEMENTED + health SERVING\n");
}

static void test_async(px_rpc_channel_t *ch)
{
    async_cmd_t a;
    memset(&a, 0, sizeof(a));
    a.ch = ch;
    a.code = GRPC_STATUS_UNKNOWN;
    on_owner(cmd_async, &a);
    CHECK(wait_flag(&a.done, 5000));
    CHECK(a.code == GRPC_STATUS_OK);
    CHECK(!strcmp(a.id, "async-7"));
    CHECK(a.step == 42);
    printf("ok async call through drain\n");
}

/* ------------------------------------------- metadata, authorization, size */

#define MD_KEY "x-parallax-token"
static int g_protected_ran;

/* GetJob on the auth server: echoes the token metadata (or "<none>") as the
 * id and px_rpc_call_peer_is_local as the step. */
static void h_echo_md(px_rpc_call_t *call, const ProtobufCMessage *request, void *arg)
{
    Parallax__V1__Job job = PARALLAX__V1__JOB__INIT;
    const char *v = NULL;
    size_t len = 0;
    char id[256];

    if (px_rpc_call_metadata(call, MD_KEY, &v, &len))
        snprintf(id, sizeof(id), "%.*s", (int)len, v);
    else
        snprintf(id, sizeof(id), "<none>");
    CHECK(!px_rpc_call_metadata(call, "x-absent-key", NULL, NULL));
    job.id = id;
    job.step = (uint64_t)px_rpc_call_peer_is_local(call);
    px_rpc_call_reply(call, &job.base);
}

/* SubmitJob on the auth server: only reached with the right token. */
static void h_protected(px_rpc_call_t *call, const ProtobufCMessage *request, void *arg)
{
    Parallax__V1__SubmitJobResponse resp = PARALLAX__V1__SUBMIT_JOB_RESPONSE__INIT;
    g_protected_ran++;
    resp.job_id = "allowed";
    px_rpc_call_reply(call, &resp.base);
}

/* WatchJob on the auth server: one event whose job id is the token. */
static void h_watch_md(px_rpc_call_t *call, const ProtobufCMessage *request, void *arg)
{
    Parallax__V1__JobEvent ev = PARALLAX__V1__JOB_EVENT__INIT;
    Parallax__V1__Job job = PARALLAX__V1__JOB__INIT;
    const char *v = NULL;
    size_t len = 0;
    char id[256] = "<none>";
    if (px_rpc_call_metadata(call, MD_KEY, &v, &len))
        snprintf(id, sizeof(id), "%.*s", (int)len, v);
    job.id = id;
    ev.job = &job;
    CHECK(px_rpc_call_stream_send(call, &ev.base) == PX_OK);
    px_rpc_call_stream_finish(call);
}

/* SubmitJob and WatchJob need the token "s3cret"; GetJob is open. */
static grpc_status_code authorize(px_rpc_call_t *call, const char *path, void *arg, char *why,
                                  size_t why_len)
{
    const char *v = NULL;
    size_t len = 0;
    (*(int *)arg)++;
    if (strstr(path, "GetJob"))
        return GRPC_STATUS_OK;
    if (!px_rpc_call_metadata(call, MD_KEY, &v, &len)) {
        snprintf(why, why_len, "no token");
        return GRPC_STATUS_UNAUTHENTICATED;
    }
    if (!px_rpc_secret_equal(v, len, "s3cret", 6)) {
        snprintf(why, why_len, "wrong token");
        return GRPC_STATUS_UNAUTHENTICATED;
    }
    return GRPC_STATUS_OK;
}

static const px_rpc_method_t g_auth_methods[] = {
    {"/parallax.v1.Control/GetJob", &parallax__v1__get_job_request__descriptor, 0, h_echo_md,
     NULL},
    {"/parallax.v1.Control/SubmitJob", &parallax__v1__submit_job_request__descriptor, 0,
     h_protected, NULL},
    {"/parallax.v1.Control/WatchJob", &parallax__v1__watch_job_request__descriptor, 1, h_watch_md,
     NULL},
};

static int g_authorize_calls;

typedef struct {
    const char *addrs[2];
    size_t n;
    int max_bytes;
    px_rpc_server_t *server;
    px_status_t status;
} auth_server_cmd_t;

static void cmd_auth_server_create(void *arg)
{
    auth_server_cmd_t *c = arg;
    px_rpc_server_opts_t opts = {c->max_bytes, authorize, &g_authorize_calls, NULL, NULL};
    c->status = px_rpc_server_create_opts(g_cq, c->addrs, c->n, g_auth_methods,
                                          sizeof(g_auth_methods) / sizeof(g_auth_methods[0]),
                                          &opts, &c->server);
}

/* GetJob `id` on ch: returns the echoed id (static buffer) or NULL, with
 * *code_p and *step_p. */
static const char *echo(px_rpc_channel_t *ch, const char *id, grpc_status_code *code_p,
                        uint64_t *step_p)
{
    static char out[256];
    Parallax__V1__GetJobRequest req = PARALLAX__V1__GET_JOB_REQUEST__INIT;
    ProtobufCMessage *resp = NULL;
    px_rpc_result_t res = {0};
    req.job_id = (char *)id;
    px_rpc_call_unary(ch, "/parallax.v1.Control/GetJob", &req.base,
                      &parallax__v1__job__descriptor, 5000, &resp, &res);
    *code_p = res.code;
    free(res.message);
    if (!resp)
        return NULL;
    snprintf(out, sizeof(out), "%s", ((Parallax__V1__Job *)resp)->id);
    if (step_p)
        *step_p = ((Parallax__V1__Job *)resp)->step;
    protobuf_c_message_free_unpacked(resp, NULL);
    return out;
}

/* SubmitJob on ch: its status code; *msg_p (optional) the message. */
static grpc_status_code submit_code(px_rpc_channel_t *ch, char *msg, size_t msg_len)
{
    Parallax__V1__SubmitJobRequest req = PARALLAX__V1__SUBMIT_JOB_REQUEST__INIT;
    ProtobufCMessage *resp = NULL;
    px_rpc_result_t res = {0};
    px_rpc_call_unary(ch, "/parallax.v1.Control/SubmitJob", &req.base,
                      &parallax__v1__submit_job_response__descriptor, 5000, &resp, &res);
    if (msg)
        snprintf(msg, msg_len, "%s", res.message ? res.message : "");
    if (resp) {
        CHECK(!strcmp(((Parallax__V1__SubmitJobResponse *)resp)->job_id, "allowed"));
        protobuf_c_message_free_unpacked(resp, NULL);
    }
    free(res.message);
    return res.code;
}

static void test_secret_equal(void)
{
    CHECK(px_rpc_secret_equal("abc", 3, "abc", 3) == 1);
    CHECK(px_rpc_secret_equal("abc", 3, "abd", 3) == 0);
    CHECK(px_rpc_secret_equal("abc", 3, "xbc", 3) == 0);
    CHECK(px_rpc_secret_equal("abc", 3, "abcd", 4) == 0);
    CHECK(px_rpc_secret_equal("abcd", 4, "abc", 3) == 0);
    CHECK(px_rpc_secret_equal("abc\0", 4, "abc", 3) == 0); /* a NUL is not an end */
    CHECK(px_rpc_secret_equal("", 0, "", 0) == 1);
    CHECK(px_rpc_secret_equal("", 0, "a", 1) == 0);
    printf("ok px_rpc_secret_equal\n");
}

static void test_metadata_and_auth(void)
{
    auth_server_cmd_t srv = {{"127.0.0.1:0", NULL}, 1, 4096, NULL, PX_OK};
    char addr[128], uaddr[128], upath[100], msg[256], big[6000];
    px_rpc_channel_t *ch = NULL, *tch = NULL, *uch = NULL;
    grpc_status_code code;
    uint64_t step = 99;
    const char *id;

    snprintf(upath, sizeof(upath), "/tmp/px-rpc-auth-%d.sock", (int)getpid());
    snprintf(uaddr, sizeof(uaddr), "unix:%s", upath);
    unlink(upath);
    srv.addrs[1] = uaddr;
    srv.n = 2;
    on_owner(cmd_auth_server_create, &srv);
    CHECK(srv.status == PX_OK);
    if (srv.status != PX_OK)
        return;
    snprintf(addr, sizeof(addr), "127.0.0.1:%d", px_rpc_server_port(srv.server, 0));

    /* No metadata set: the server sees none. Loopback is local. */
    CHECK(px_rpc_channel_create(addr, &ch) == PX_OK);
    id = echo(ch, "x", &code, &step);
    CHECK(code == GRPC_STATUS_OK && id && !strcmp(id, "<none>"));
    CHECK(step == 1);

    /* Channel metadata goes with every call; setting a key again replaces it. */
    CHECK(px_rpc_channel_create(addr, &tch) == PX_OK);
    CHECK(px_rpc_channel_set_metadata(tch, MD_KEY, "first") == PX_OK);
    id = echo(tch, "x", &code, NULL);
    CHECK(code == GRPC_STATUS_OK && id && !strcmp(id, "first"));
    CHECK(px_rpc_channel_set_metadata(tch, MD_KEY, "s3cret") == PX_OK);
    id = echo(tch, "x", &code, NULL);
    CHECK(code == GRPC_STATUS_OK && id && !strcmp(id, "s3cret"));
    id = echo(tch, "y", &code, NULL); /* and on the next call too */
    CHECK(code == GRPC_STATUS_OK && id && !strcmp(id, "s3cret"));
    printf("ok channel metadata reaches px_rpc_call_metadata (set, replaced)\n");

    /* Bad keys and too many keys are refused. */
    CHECK(px_rpc_channel_set_metadata(tch, "Bad Key", "v") == PX_ERR_INVALID_ARGUMENT);
    CHECK(px_rpc_channel_set_metadata(tch, "", "v") == PX_ERR_INVALID_ARGUMENT);
    CHECK(px_rpc_channel_set_metadata(tch, "k", NULL) == PX_ERR_INVALID_ARGUMENT);
    {
        px_status_t st = PX_OK;
        int added = 0;
        for (int i = 0; i < 10 && st == PX_OK; i++) {
            char k[16];
            snprintf(k, sizeof(k), "x-extra-%d", i);
            st = px_rpc_channel_set_metadata(tch, k, "v");
            added += st == PX_OK;
        }
        CHECK(st == PX_ERR_NO_MEMORY);
        CHECK(added == 7); /* 8 keys in all, the token among them */
        id = echo(tch, "x", &code, NULL);
        CHECK(code == GRPC_STATUS_OK && id && !strcmp(id, "s3cret"));
    }

    /* The authorize hook: no token, wrong token -> UNAUTHENTICATED with the
     * hook's reason, and the handler never ran; the right one passes. */
    g_protected_ran = 0;
    CHECK(submit_code(ch, msg, sizeof(msg)) == GRPC_STATUS_UNAUTHENTICATED);
    CHECK(!strcmp(msg, "no token"));
    {
        px_rpc_channel_t *wch = NULL;
        CHECK(px_rpc_channel_create(addr, &wch) == PX_OK);
        CHECK(px_rpc_channel_set_metadata(wch, MD_KEY, "s3cre") == PX_OK);
        CHECK(submit_code(wch, msg, sizeof(msg)) == GRPC_STATUS_UNAUTHENTICATED);
        CHECK(!strcmp(msg, "wrong token"));
        CHECK(px_rpc_channel_set_metadata(wch, MD_KEY, "s3cret!") == PX_OK);
        CHECK(submit_code(wch, msg, sizeof(msg)) == GRPC_STATUS_UNAUTHENTICATED);
        px_rpc_channel_destroy(wch);
    }
    CHECK(g_protected_ran == 0);
    CHECK(submit_code(tch, msg, sizeof(msg)) == GRPC_STATUS_OK);
    CHECK(g_protected_ran == 1);
    CHECK(px_rpc_status_from_code(GRPC_STATUS_UNAUTHENTICATED) == PX_ERR_INVALID_ARGUMENT);
    printf("ok authorize hook: no/wrong token UNAUTHENTICATED before the handler, right token "
           "passes\n");

    /* Streams carry the metadata too, and pass the hook. */
    {
        Parallax__V1__WatchJobRequest req = PARALLAX__V1__WATCH_JOB_REQUEST__INIT;
        px_rpc_stream_t *st = NULL;
        ProtobufCMessage *m = NULL;
        px_rpc_result_t res = {0};
        req.job_id = "w";
        CHECK(px_rpc_stream_open(tch, "/parallax.v1.Control/WatchJob", &req.base, 5000, &st) ==
              PX_OK);
        CHECK(px_rpc_stream_next(st, &parallax__v1__job_event__descriptor, &m, NULL) == PX_OK);
        CHECK(m && !strcmp(((Parallax__V1__JobEvent *)m)->job->id, "s3cret"));
        if (m)
            protobuf_c_message_free_unpacked(m, NULL);
        CHECK(px_rpc_stream_next(st, &parallax__v1__job_event__descriptor, &m, &res) ==
              PX_ERR_NOT_FOUND);
        CHECK(res.code == GRPC_STATUS_OK);
        free(res.message);
        px_rpc_stream_close(st);
        /* without the token the stream ends UNAUTHENTICATED */
        memset(&res, 0, sizeof(res));
        CHECK(px_rpc_stream_open(ch, "/parallax.v1.Control/WatchJob", &req.base, 5000, &st) ==
              PX_OK);
        CHECK(px_rpc_stream_next(st, &parallax__v1__job_event__descriptor, &m, &res) != PX_OK);
        CHECK(res.code == GRPC_STATUS_UNAUTHENTICATED);
        free(res.message);
        px_rpc_stream_close(st);
    }
    /* Async calls carry it as well. */
    {
        async_cmd_t a;
        memset(&a, 0, sizeof(a));
        a.ch = tch;
        a.code = GRPC_STATUS_UNKNOWN;
        on_owner(cmd_async, &a);
        CHECK(wait_flag(&a.done, 5000));
        CHECK(a.code == GRPC_STATUS_OK && !strcmp(a.id, "s3cret"));
    }
    printf("ok metadata on streams and async calls\n");

    /* Health stays open without a token. */
    {
        Parallax__V1__ModelSpec req = PARALLAX__V1__MODEL_SPEC__INIT;
        ProtobufCMessage *resp = NULL;
        CHECK(px_rpc_call_unary(ch, "/grpc.health.v1.Health/Check", &req.base,
                                &parallax__v1__model_spec__descriptor, 5000, &resp, NULL) ==
              PX_OK);
        CHECK(resp && ((Parallax__V1__ModelSpec *)resp)->layers == 1);
        if (resp)
            protobuf_c_message_free_unpacked(resp, NULL);
    }

    /* The configured maximum: 4096 bytes. A 6000-byte request is
     * RESOURCE_EXHAUSTED; a 3000-byte one passes. */
    memset(big, 'a', sizeof(big));
    big[sizeof(big) - 1] = '\0';
    id = echo(tch, big, &code, NULL);
    CHECK(code == GRPC_STATUS_RESOURCE_EXHAUSTED && id == NULL);
    big[3000] = '\0';
    id = echo(tch, big, &code, NULL);
    CHECK(code == GRPC_STATUS_OK && id && !strcmp(id, "s3cret"));
    printf("ok max-message-bytes 4096: 6000-byte request RESOURCE_EXHAUSTED, 3000 passes\n");

    /* The unix socket is local too and carries metadata. */
    CHECK(px_rpc_channel_create(uaddr, &uch) == PX_OK);
    CHECK(px_rpc_channel_set_metadata(uch, MD_KEY, "over-unix") == PX_OK);
    step = 99;
    id = echo(uch, "x", &code, &step);
    CHECK(code == GRPC_STATUS_OK && id && !strcmp(id, "over-unix") && step == 1);
    CHECK(g_authorize_calls > 0);

    /* A negative size is refused. */
    {
        auth_server_cmd_t bad = {{"127.0.0.1:0", NULL}, 1, -1, NULL, PX_OK};
        on_owner(cmd_auth_server_create, &bad);
        CHECK(bad.status == PX_ERR_INVALID_ARGUMENT);
    }
    on_owner(cmd_server_destroy, srv.server);
    px_rpc_channel_destroy(uch);
    px_rpc_channel_destroy(tch);
    px_rpc_channel_destroy(ch);
    unlink(upath);
    printf("ok unix socket: local, metadata carried\n");
}

static void test_unreachable(void)
{
    px_rpc_channel_t *ch;
    Parallax__V1__GetJobRequest req = PARALLAX__V1__GET_JOB_REQUEST__INIT;
    ProtobufCMessage *resp = NULL;
    px_rpc_result_t res = {0};
    px_status_t status;

    req.job_id = "a";
    CHECK(px_rpc_channel_create("unix:/nonexistent/px-rpc.sock", &ch) == PX_OK);
    status = px_rpc_call_unary(ch, "/parallax.v1.Control/GetJob", &req.base,
                               &parallax__v1__job__descriptor, 2000, &resp, &res);
    CHECK(status == PX_ERR_UNAVAILABLE || status == PX_ERR_TIMEOUT);
    CHECK(res.code == GRPC_STATUS_UNAVAILABLE || res.code == GRPC_STATUS_DEADLINE_EXCEEDED);
    free(res.message);
    px_rpc_channel_destroy(ch);
    printf("ok unreachable server -> %s\n", px_status_str(status));
}

int main(void)
{
    pthread_t owner;
    server_cmd_t tcp = {"127.0.0.1:0", NULL, PX_OK}, dup = {NULL, NULL, PX_OK};
    server_cmd_t ux = {NULL, NULL, PX_OK};
    char addr[128], uaddr[128], upath[100];
    px_rpc_channel_t *ch = NULL, *uch = NULL;
    struct stat sb;

    signal(SIGPIPE, SIG_IGN);
    setvbuf(stdout, NULL, _IOLBF, 0);
    g_notify_fd = eventfd(0, EFD_CLOEXEC);
    if (g_notify_fd < 0 || pipe(g_cmd_pipe) != 0)
        return 1;
    if (px_rpc_cq_create(notify_fd, &g_notify_fd, &g_cq) != PX_OK)
        return 1;
    pthread_create(&owner, NULL, owner_main, NULL);

    on_owner(cmd_server_create, &tcp);
    CHECK(tcp.status == PX_OK);
    if (tcp.status != PX_OK)
        return 1;
    CHECK(px_rpc_server_port(tcp.server, 0) > 0);
    snprintf(addr, sizeof(addr), "127.0.0.1:%d", px_rpc_server_port(tcp.server, 0));

    /* A second server on the same port must fail (SO_REUSEPORT off). */
    dup.addr = addr;
    on_owner(cmd_server_create, &dup);
    CHECK(dup.status == PX_ERR_IO);
    printf("ok second server on %s -> %s\n", addr, px_status_str(dup.status));

    CHECK(px_rpc_channel_create(addr, &ch) == PX_OK);
    CHECK(!strcmp(px_rpc_channel_target(ch), addr));
    test_unary(ch);
    test_deferred(ch);
    test_stream(ch);
    test_stream_cancel(ch);
    test_deadline(ch);
    test_unimplemented_and_health(ch);
    test_async(ch);
    test_unreachable();
    test_secret_equal();
    test_metadata_and_auth();

    /* Unix socket: mode 0660, calls work. */
    snprintf(upath, sizeof(upath), "/tmp/px-rpc-test-%d.sock", (int)getpid());
    snprintf(uaddr, sizeof(uaddr), "unix:%s", upath);
    unlink(upath);
    ux.addr = uaddr;
    on_owner(cmd_server_create, &ux);
    CHECK(ux.status == PX_OK);
    if (ux.status == PX_OK) {
        CHECK(px_rpc_server_port(ux.server, 0) == 0);
        CHECK(stat(upath, &sb) == 0 && S_ISSOCK(sb.st_mode) && (sb.st_mode & 0777) == 0660);
        CHECK(px_rpc_channel_create(uaddr, &uch) == PX_OK);
        test_unary(uch);
        on_owner(cmd_server_destroy, ux.server);
        px_rpc_channel_destroy(uch);
        printf("ok unix socket %s (mode 0660)\n", upath);
    }
    unlink(upath);

    /* Destroying the server with a stream open: the handler's on_cancel
     * runs, the client sees the stream end with an error. */
    {
        Parallax__V1__WatchJobRequest req = PARALLAX__V1__WATCH_JOB_REQUEST__INIT;
        px_rpc_stream_t *st = NULL;
        ProtobufCMessage *msg = NULL;
        px_rpc_result_t res = {0};
        px_status_t status;

        req.job_id = "shutdown";
        CHECK(px_rpc_stream_open(ch, "/parallax.v1.Control/WatchJob", &req.base, 10000, &st)
              == PX_OK);
        CHECK(px_rpc_stream_next(st, &parallax__v1__job_event__descriptor, &msg, NULL) == PX_OK);
        protobuf_c_message_free_unpacked(msg, NULL);
        on_owner(cmd_server_destroy, tcp.server);
        CHECK(g_cancel_shutdown_fired == 1);
        status = px_rpc_stream_next(st, &parallax__v1__job_event__descriptor, &msg, &res);
        CHECK(status != PX_OK && status != PX_ERR_NOT_FOUND);
        CHECK(res.code != GRPC_STATUS_OK);
        free(res.message);
        px_rpc_stream_close(st);
        printf("ok server shutdown with an open stream -> %s\n", px_status_str(status));
    }
    px_rpc_channel_destroy(ch);

    on_owner(cmd_stop, NULL);
    pthread_join(owner, NULL);
    px_rpc_cq_destroy(g_cq);
    close(g_notify_fd);
    close(g_cmd_pipe[0]);
    close(g_cmd_pipe[1]);
    if (failures) {
        fprintf(stderr, "%d check(s) failed\n", failures);
        return 1;
    }
    printf("all rpc tests passed\n");
    return 0;
}
