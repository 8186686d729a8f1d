/* pctl_jobs.c: the pctl commands that talk to parallaxd's Control service:
 * submit, list, status, watch, metrics, logs, cancel, nodes.
 *
 * Each command parses its own options (getopt_long, GNU permutation, so
 * `status JOB --json` and `status --json JOB` both work), makes blocking
 * px_rpc calls with the global deadline, and prints a table or JSON. Job
 * following (submit --follow, watch) reads Control.WatchJob and falls back
 * to polling GetJob once a second if the stream breaks. */
#include <errno.h>
#include <getopt.h>
#include <limits.h>
#include <math.h>
#include <signal.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "cluster.h"
#include "data.h"
#include "devsel.h"
#include "jobflags.h"
#include "jobplan.h"
#include "jobname.h"
#include "jobspec.h"
#include "layout.h"
#include "pctl.h"
#include "pipesched.h"
#include "px_time.h"
#include "steptime.h"

#define M_SUBMIT "/parallax.v1.Control/SubmitJob"
#define M_GET "/parallax.v1.Control/GetJob"
#define M_LIST "/parallax.v1.Control/ListJobs"
#define M_CANCEL "/parallax.v1.Control/CancelJob"
#define M_WATCH "/parallax.v1.Control/WatchJob"
#define M_NODES "/parallax.v1.Control/ListNodes"
#define M_SET_NODE "/parallax.v1.Control/SetNodeState"
#define M_METRICS "/parallax.v1.Control/GetMetrics"
#define M_LOGS "/parallax.v1.Control/GetLogs"
#define M_GET_MEMORY "/parallax.v1.Control/GetMemory"

#define POLL_INTERVAL_MS 1000
#define POLL_MAX_FAILURES 10
#define PLAIN_PROGRESS_EVERY 10

/* ------------------------------------------------------------ helpers */

/* Parses `CMD [JOB] [--json]`, the shape of most commands. `want_job`: 1 if
 * JOB is required. Returns -1 after a usage error, 1 after --help, else 0. */
static int parse_common(const char *cmd, int argc, char **argv, int want_job, int *json_p,
                        const char **job_p, int *rc_p)
{
    static const struct option opts[] = {
        {"json", no_argument, NULL, 'j'},
        {"help", no_argument, NULL, 'h'},
        {NULL, 0, NULL, 0},
    };
    int opt;
    opterr = 0;
    *json_p = 0;
    while ((opt = getopt_long(argc, argv, ":h", opts, NULL)) != -1) {
        switch (opt) {
        case 'j': *json_p = 1; break;
        case 'h': *rc_p = pctl_help(cmd); return 1;
        default:
            *rc_p = pctl_usage_error(cmd, "unknown option '%s'", argv[optind - 1]);
            return -1;
        }
    }
    if (want_job) {
        if (optind >= argc) {
            *rc_p = pctl_usage_error(cmd, "missing JOB");
            return -1;
        }
        *job_p = argv[optind++];
    }
    if (optind < argc) {
        *rc_p = pctl_usage_error(cmd, "unexpected argument '%s'", argv[optind]);
        return -1;
    }
    return 0;
}

static int job_active(const Parallax__V1__Job *j)
{
    return j->state != PARALLAX__V1__JOB_STATE__JOB_COMPLETED &&
           j->state != PARALLAX__V1__JOB_STATE__JOB_FAILED &&
           j->state != PARALLAX__V1__JOB_STATE__JOB_CANCELLED;
}

const char *pctl_job_id(pctl_ctx_t *ctx, const char *ref, char *buf, size_t len)
{
    Parallax__V1__ListJobsRequest req = PARALLAX__V1__LIST_JOBS_REQUEST__INIT;
    Parallax__V1__ListJobsResponse *resp = NULL;
    px_rpc_result_t res = {GRPC_STATUS_OK, NULL};
    px_rpc_channel_t *ch = pctl_channel(ctx);
    const Parallax__V1__Job *pick = NULL;
    size_t named = 0;

    snprintf(buf, len, "%s", ref);
    if (!ch)
        return buf;
    /* an id answers GetJob (local, or one forward to its coordinator): the
     * cluster-wide list, which asks every peer, only for what is not */
    Parallax__V1__GetJobRequest get = PARALLAX__V1__GET_JOB_REQUEST__INIT;
    Parallax__V1__Job *job = NULL;
    get.job_id = (char *)ref;
    if (px_rpc_call_unary(ch, M_GET, &get.base, &parallax__v1__job__descriptor, ctx->timeout_ms,
                          (ProtobufCMessage **)&job, &res) == PX_OK) {
        protobuf_c_message_free_unpacked(&job->base, NULL);
        free(res.message);
        return buf;
    }
    free(res.message);
    res = (px_rpc_result_t){GRPC_STATUS_OK, NULL};
    if (px_rpc_call_unary(ch, M_LIST, &req.base,
                                 &parallax__v1__list_jobs_response__descriptor, ctx->timeout_ms,
                                 (ProtobufCMessage **)&resp, &res) != PX_OK) {
        free(res.message);
        return buf;
    }
    free(res.message);
    for (size_t i = 0; i < resp->n_jobs; i++)
        if (!strcmp(resp->jobs[i]->id, ref)) { /* an id: as given */
            protobuf_c_message_free_unpacked(&resp->base, NULL);
            return buf;
        }
    for (size_t i = 0; i < resp->n_jobs; i++) {
        const Parallax__V1__Job *j = resp->jobs[i];
        if (!j->spec || !j->spec->name || strcmp(j->spec->name, ref))
            continue;
        named++;
        if (!pick || (job_active(j) && !job_active(pick)) ||
            (job_active(j) == job_active(pick) && j->created_ms > pick->created_ms))
            pick = j;
    }
    if (pick) {
        snprintf(buf, len, "%s", pick->id);
        if (named > 1 && !job_active(pick))
            fprintf(stderr, "pctl: %zu finished jobs are named '%s'; this is the newest, %s "
                    "(give an id for another)\n", named, pctl_esc(ref), pctl_esc(pick->id));
    }
    protobuf_c_message_free_unpacked(&resp->base, NULL);
    return buf;
}

/* Age of `ms` as the answering daemon saw it: now_ms is its clock when it
 * answered (Job.now_ms, NodeInfo.now_ms; 0 from an older daemon: this
 * machine's clock), so a daemon whose clock is off still shows true ages. */
static const char *fmt_age(int64_t now_ms, int64_t ms, char *buf, size_t len)
{
    if (ms <= 0) {
        snprintf(buf, len, "-");
        return buf;
    }
    return pctl_fmt_duration((double)((now_ms > 0 ? now_ms : px_time_wall_ms()) - ms) / 1000.0,
                             buf, len);
}

/* A time of the answering daemon's clock (now_ms as above) as this
 * machine's local time. */
static const char *fmt_time(int64_t now_ms, int64_t ms, char *buf, size_t len)
{
    time_t t = (time_t)((ms - (now_ms > 0 ? now_ms - px_time_wall_ms() : 0)) / 1000);
    struct tm tm;
    if (ms <= 0 || !localtime_r(&t, &tm)) {
        snprintf(buf, len, "-");
        return buf;
    }
    strftime(buf, len, "%Y-%m-%d %H:%M:%S", &tm);
    return buf;
}

static uint32_t job_steps(const Parallax__V1__Job *job)
{
    return job->spec ? job->spec->steps : 0;
}

/* Tokens of one optimizer step: global batch x sequence length. */
static double job_tokens_per_step(const Parallax__V1__Job *job)
{
    if (!job->spec || !job->spec->model)
        return 0;
    return (double)job->spec->batch * (double)job->spec->model->seq;
}

/* ---------------------------------------------------------- following */

typedef struct follow {
    int tty;
    int json;
    int bar_shown;                 /* a \r line is on screen */
    uint32_t last_printed_step;
    Parallax__V1__JobState last_state;
    Parallax__V1__Job *job;        /* latest state (owned; from GetJob) */
    Parallax__V1__JobEvent *event; /* or from the stream (owned) */
} follow_t;

/* 1 while a \r progress line is on the terminal: Ctrl-C then ends it with a
 * newline so the shell prompt starts on a clean line. */
static volatile sig_atomic_t bar_on_screen;

static void on_sigint(int sig)
{
    static const char nl = '\n';
    if (bar_on_screen && write(STDOUT_FILENO, &nl, 1) < 0)
        _exit(128 + sig);
    _exit(128 + sig);
}

static const Parallax__V1__Job *follow_job(const follow_t *f)
{
    if (f->event && f->event->job)
        return f->event->job;
    return f->job;
}

/* Prints progress for the latest state: a \r-updated bar on a TTY, a plain
 * line every PLAIN_PROGRESS_EVERY steps (and on state changes) otherwise. */
static void follow_show(follow_t *f, const Parallax__V1__StepMetrics *m)
{
    const Parallax__V1__Job *job = follow_job(f);
    uint32_t steps, step;
    double loss, tps, eta = NAN, elapsed = 0;
    char eta_s[32], tps_s[32];
    int state_changed;

    if (!job || f->json)
        return;
    steps = job_steps(job);
    step = m ? m->step : job->step;
    loss = m ? m->loss : job->loss;
    tps = m ? m->tokens_per_second : job->tokens_per_second;
    if (m)
        elapsed = m->elapsed_s;
    if (step > 0 && steps > step) {
        if (elapsed > 0)
            eta = elapsed / step * (steps - step);
        else if (tps > 0)
            eta = (steps - step) * job_tokens_per_step(job) / tps;
    } else if (steps > 0 && step >= steps) {
        eta = 0;
    }
    pctl_fmt_duration(eta, eta_s, sizeof(eta_s));
    pctl_fmt_rate(tps, tps_s, sizeof(tps_s));
    state_changed = job->state != f->last_state;
    f->last_state = job->state;

    if (f->tty) {
        char bar[31];
        int width = 30, fill = steps ? (int)((uint64_t)step * width / steps) : 0;
        if (fill > width)
            fill = width;
        memset(bar, '#', (size_t)fill);
        memset(bar + fill, '-', (size_t)(width - fill));
        bar[width] = '\0';
        if (step > 0 && job->val_step > 0) /* the last validation loss too */
            printf("\r\033[K[%s] %u/%u  loss %.4f  val %.4f  %s tok/s  ETA %s  %s", bar, step,
                   steps, loss, job->val_loss, tps_s, eta_s, pctl_state_name(job->state));
        else if (step > 0)
            printf("\r\033[K[%s] %u/%u  loss %.4f  %s tok/s  ETA %s  %s", bar, step, steps, loss,
                   tps_s, eta_s, pctl_state_name(job->state));
        else
            printf("\r\033[K[%s] %u/%u  %s", bar, step, steps, pctl_state_name(job->state));
        fflush(stdout);
        f->bar_shown = 1;
        bar_on_screen = 1;
        return;
    }
    if (state_changed || (step != f->last_printed_step &&
                          (step % PLAIN_PROGRESS_EVERY == 0 || step == steps))) {
        if (step > 0 && job->val_step > 0)
            printf("step %u/%u  loss %.4f  val %.4f  %s tok/s  ETA %s  %s\n", step, steps, loss,
                   job->val_loss, tps_s, eta_s, pctl_state_name(job->state));
        else if (step > 0)
            printf("step %u/%u  loss %.4f  %s tok/s  ETA %s  %s\n", step, steps, loss, tps_s,
                   eta_s, pctl_state_name(job->state));
        else
            printf("%s\n", pctl_state_name(job->state));
        fflush(stdout);
        f->last_printed_step = step;
    }
}

static void follow_set_event(follow_t *f, Parallax__V1__JobEvent *ev)
{
    if (f->event)
        protobuf_c_message_free_unpacked(&f->event->base, NULL);
    f->event = ev;
    if (ev->job && f->job) {
        protobuf_c_message_free_unpacked(&f->job->base, NULL);
        f->job = NULL;
    }
}

static void follow_set_job(follow_t *f, Parallax__V1__Job *job)
{
    if (f->job)
        protobuf_c_message_free_unpacked(&f->job->base, NULL);
    f->job = job;
    if (f->event) {
        protobuf_c_message_free_unpacked(&f->event->base, NULL);
        f->event = NULL;
    }
}

/* Polls GetJob until the job ends. Returns 0, or -1 after printing why. */
static int follow_poll(pctl_ctx_t *ctx, const char *cmd, const char *job_id, follow_t *f)
{
    Parallax__V1__GetJobRequest req = PARALLAX__V1__GET_JOB_REQUEST__INIT;
    int failures = 0;

    req.job_id = (char *)job_id;
    for (;;) {
        ProtobufCMessage *resp = NULL;
        px_rpc_result_t res = {GRPC_STATUS_OK, NULL};
        px_status_t status = px_rpc_call_unary(pctl_channel(ctx), M_GET, &req.base,
                                               &parallax__v1__job__descriptor, ctx->timeout_ms,
                                               &resp, &res);
        if (status == PX_OK) {
            failures = 0;
            follow_set_job(f, (Parallax__V1__Job *)resp);
            follow_show(f, NULL);
            if (pctl_state_is_final(f->job->state)) {
                free(res.message);
                return 0;
            }
        } else if ((res.code == GRPC_STATUS_UNAVAILABLE ||
                    res.code == GRPC_STATUS_DEADLINE_EXCEEDED) &&
                   ++failures < POLL_MAX_FAILURES) {
            /* The daemon may be restarting: keep trying for a while. */
        } else {
            if (f->bar_shown)
                fputc('\n', stdout);
            pctl_print_rpc_error(ctx, cmd, res.code, res.message);
            free(res.message);
            return -1;
        }
        free(res.message);
        usleep(POLL_INTERVAL_MS * 1000);
    }
}

/* Follows `job_id` until it ends and prints the outcome. Returns the exit
 * code: 0 only if the job COMPLETED. */
static int follow_job_run(pctl_ctx_t *ctx, const char *cmd, const char *job_id, int json)
{
    Parallax__V1__WatchJobRequest req = PARALLAX__V1__WATCH_JOB_REQUEST__INIT;
    follow_t f;
    px_rpc_stream_t *st = NULL;
    px_rpc_result_t res = {GRPC_STATUS_OK, NULL};
    px_rpc_channel_t *ch = pctl_channel(ctx);
    const Parallax__V1__Job *job;
    ProtobufCMessage *msg;
    px_status_t status;
    int rc = PCTL_EXIT_FAIL, need_poll = 0;
    char tps_s[32], dur_s[32];

    memset(&f, 0, sizeof(f));
    f.json = json;
    f.tty = isatty(STDOUT_FILENO);
    if (f.tty)
        signal(SIGINT, on_sigint);
    f.last_state = PARALLAX__V1__JOB_STATE__JOB_STATE_UNSPECIFIED;
    if (!ch) {
        fprintf(stderr, "pctl: %s: bad server address '%s'\n", cmd, ctx->server);
        return PCTL_EXIT_FAIL;
    }
    /* First a GetJob with the usual deadline: a missing job or a daemon that
     * does not answer fails fast here, not on a stream without deadline. */
    {
        Parallax__V1__GetJobRequest get = PARALLAX__V1__GET_JOB_REQUEST__INIT;
        Parallax__V1__Job *first = NULL;
        get.job_id = (char *)job_id;
        if (pctl_call(ctx, cmd, M_GET, &get.base, &parallax__v1__job__descriptor,
                      (ProtobufCMessage **)&first))
            return PCTL_EXIT_FAIL;
        follow_set_job(&f, first);
        follow_show(&f, NULL);
    }
    req.job_id = (char *)job_id;
    /* No deadline on the stream: training takes as long as it takes. */
    status = px_rpc_stream_open(ch, M_WATCH, &req.base, -1, &st);
    if (status != PX_OK) {
        need_poll = 1;
    } else {
        while ((status = px_rpc_stream_next(st, &parallax__v1__job_event__descriptor, &msg,
                                            &res)) == PX_OK) {
            Parallax__V1__JobEvent *ev = (Parallax__V1__JobEvent *)msg;
            follow_set_event(&f, ev);
            follow_show(&f, ev->metrics);
        }
        px_rpc_stream_close(st);
        job = follow_job(&f);
        if (res.code == GRPC_STATUS_OK) {
            /* Clean end: the job is final, or the server ended early. */
            need_poll = !job || !pctl_state_is_final(job->state);
        } else if (res.code == GRPC_STATUS_NOT_FOUND || res.code == GRPC_STATUS_INVALID_ARGUMENT ||
                   (!job && res.code == GRPC_STATUS_UNAVAILABLE)) {
            /* The job does not exist, or no daemon answers: polling won't help. */
            if (f.bar_shown)
                fputc('\n', stdout);
            pctl_print_rpc_error(ctx, cmd, res.code, res.message);
            goto out;
        } else {
            if (f.bar_shown) {
                fputc('\n', stdout);
                f.bar_shown = 0;
            }
            fprintf(stderr, "pctl: %s: watch stream broke (%s: %s); polling\n", cmd,
                    pctl_code_name(res.code), pctl_esc(res.message));
            need_poll = 1;
        }
    }
    if (need_poll && follow_poll(ctx, cmd, job_id, &f) != 0)
        goto out;

    job = follow_job(&f);
    if (!job)
        goto out;
    if (f.bar_shown)
        fputc('\n', stdout);
    if (json) {
        rc = pctl_json_print(pctl_json_job(job));
        if (rc == PCTL_EXIT_OK && job->state != PARALLAX__V1__JOB_STATE__JOB_COMPLETED)
            rc = PCTL_EXIT_FAIL;
        goto out;
    }
    pctl_fmt_rate(job->tokens_per_second, tps_s, sizeof(tps_s));
    pctl_fmt_duration(job->finished_ms > 0 && job->started_ms > 0
                          ? (double)(job->finished_ms - job->started_ms) / 1000.0
                          : NAN,
                      dur_s, sizeof(dur_s));
    printf("job %s %s: step %u/%u, loss %.4f, %s tok/s, %s%s%s\n", pctl_esc(job->id),
           pctl_state_name(job->state), job->step, job_steps(job), job->loss, tps_s, dur_s,
           job->reason && *job->reason ? "; reason: " : "", pctl_esc(job->reason));
    rc = job->state == PARALLAX__V1__JOB_STATE__JOB_COMPLETED ? PCTL_EXIT_OK : PCTL_EXIT_FAIL;
out:
    free(res.message);
    if (f.event)
        protobuf_c_message_free_unpacked(&f.event->base, NULL);
    if (f.job)
        protobuf_c_message_free_unpacked(&f.job->base, NULL);
    return rc;
}

/* ------------------------------------------------------------- submit */

/* The job flags' parsers (jobflags.h), with pctl's messages (usage errors);
 * arg: the command's name ("submit", "plan"). */
static int job_int(void *arg, const char *flag, const char *s, int lo, int *out)
{
    uint64_t v;
    if (pctl_parse_u64(arg, flag, s, (uint64_t)lo, INT32_MAX, &v))
        return -1;
    *out = (int)v;
    return 0;
}

static int job_float(void *arg, const char *flag, const char *s, double fmin, double fmax,
                     float *out)
{
    double d;
    if (pctl_parse_float(arg, flag, s, fmin, fmax, &d))
        return -1;
    *out = (float)d;
    return 0;
}

static int job_u64(void *arg, const char *flag, const char *s, uint64_t *out)
{
    return pctl_parse_u64(arg, flag, s, 0, UINT64_MAX, out) ? -1 : 0;
}

static int job_bad_name(void *arg, const char *flag, const char *s)
{
    if (!strcmp(flag, "--schedule"))
        pctl_usage_error(arg, "--schedule '%s': gpipe, 1f1b, zb1 or interleaved", s);
    else
        pctl_usage_error(arg, "%s '%s': fp32 or bf16", flag, s);
    return -1;
}

void pctl_job_defaults(px_job_config_t *cfg)
{
    /* the job's defaults are the planner's (jobcfg.h); pctl's own are the
     * quickstart model's size and run length */
    px_job_config_defaults(cfg);
    cfg->layers = 4;
    cfg->heads = 4;
    cfg->dim = 128;
    cfg->seq = 128;
    cfg->batch = 16;
    cfg->steps = 300;
}

int pctl_job_flag_apply(const char *cmd, const px_job_flag_t *f, const char *value,
                        px_job_config_t *cfg)
{
    const px_job_flag_parsers_t parsers = {job_int, job_float, job_u64, job_bad_name,
                                           (void *)cmd};
    if (px_job_flag_apply(f, PX_JOB_FLAG_PCTL, value, cfg, &parsers))
        return PCTL_EXIT_USAGE;
    if (f->offset == offsetof(px_job_config_t, warmup_steps) && cfg->warmup_steps == 0)
        cfg->warmup_steps = -1; /* 0 on the wire: steps/20 */
    return PCTL_EXIT_OK;
}

/* --layout auto: the cluster the daemon reports (its alive nodes' free
 * devices, those --devices admits; nodes x the fewest free devices of a
 * node, so every node can hold its share; device memory the smallest
 * reported) priced with the rates of `spec` (a cluster file or preset of
 * planner/cluster.h, or "local": measured, pctl_cluster_local; NULL: the
 * cpu preset for cpu and sim devices, h100-sxm for cuda), and the fastest layout pctl plan --search finds
 * there written into cfg. Says on stderr what it chose. PCTL_EXIT_OK, or
 * an exit code (printed). */
static int layout_auto(pctl_ctx_t *ctx, const char *spec, const char *devices,
                       px_job_config_t *cfg)
{
    px_cluster_t cl;
    px_step_time_t t;
    px_job_config_t best;
    char err[512];
    int nodes = 0, per_node = 0, dev = -1, rc;
    double mem = 0;
    long fit = 0;

    if (spec && !strcmp(spec, "local")) {
        if ((rc = pctl_cluster_local(ctx, cfg, devices, &cl, &dev)) != PCTL_EXIT_OK)
            return rc;
        nodes = cl.nodes;
        per_node = cl.per_node;
        mem = cl.dev.mem_bytes;
    } else if ((rc = pctl_cluster_topology(ctx, "submit", devices, &nodes, &per_node, &dev,
                                           &mem)) != PCTL_EXIT_OK)
        return rc;
    if (!spec || strcmp(spec, "local")) {
        if (spec) {
            if (px_cluster_parse(spec, &cl, err, sizeof(err)) != PX_OK)
                return pctl_usage_error("submit", "--cluster %s", err);
        } else if (px_cluster_preset(dev == PX_PLAN_DEV_CUDA ? "h100-sxm" : "cpu", 1, 1, &cl) !=
                   PX_OK)
            return PCTL_EXIT_FAIL;
        cl.nodes = nodes;
        cl.per_node = per_node;
        if (mem > 0)
            cl.dev.mem_bytes = mem;
    }
    snprintf(cl.name, sizeof(cl.name), "%d node%s x %d %s device%s", nodes, nodes == 1 ? "" : "s",
             per_node, px_plan_dev_name(dev), per_node == 1 ? "" : "s");
    if (pctl_plan_search_best(cfg, &cl, NULL, dev, &best, &t, &fit) != PCTL_EXIT_OK) {
        fprintf(stderr, "pctl: submit: --layout auto: no layout of the job fits %s (%.1f GB a "
                "device)\n", cl.name, cl.dev.mem_bytes / 1e9);
        return PCTL_EXIT_FAIL;
    }
    *cfg = best;
    fprintf(stderr, "pctl: submit: --layout auto chose dp=%d tp=%d pp=%d cp=%d ep=%d zero=%d "
            "sequence_parallel=%d grad_accum=%d micro_batches=%d schedule=%s "
            "virtual_stages=%d: predicted %.4g s a step, %.4g tokens/s on %s (rates: %s; %ld "
            "layouts fit)\n", best.layout.dp, best.layout.tp, best.layout.pp, best.layout.cp,
            best.layout.ep, best.zero, best.sequence_parallel && best.layout.tp > 1,
            best.grad_accum, best.micro_batches, px_pipe_schedule_name(best.schedule),
            best.virtual_stages, t.step_s, t.tokens_per_s, cl.name,
            spec ? spec : (dev == PX_PLAN_DEV_CUDA ? "h100-sxm" : "cpu"), fit);
    return PCTL_EXIT_OK;
}

int pctl_cmd_submit(pctl_ctx_t *ctx, int argc, char **argv)
{
    /* submit's own flags; the job flags (jobflags.h) from O_JOB_FLAG on */
    enum { O_NAME = 256, O_FOLLOW, O_JSON, O_MAX_RESTARTS, O_NO_VAL, O_DEVICES, O_DRY_RUN,
           O_LAYOUT, O_CLUSTER, O_JOB_FLAG = 1024 };
    static const struct option own[] = {
        {"name", required_argument, NULL, O_NAME},
        {"max-restarts", required_argument, NULL, O_MAX_RESTARTS},
        {"no-val", no_argument, NULL, O_NO_VAL},
        {"devices", required_argument, NULL, O_DEVICES},
        {"follow", no_argument, NULL, O_FOLLOW},
        {"json", no_argument, NULL, O_JSON},
        {"dry-run", no_argument, NULL, O_DRY_RUN},
        {"layout", required_argument, NULL, O_LAYOUT},
        {"cluster", required_argument, NULL, O_CLUSTER},
        {"help", no_argument, NULL, 'h'},
    };
    struct option opts[sizeof(own) / sizeof(own[0]) + 2 * 64 + 1];
    size_t nopt = sizeof(own) / sizeof(own[0]);
    Parallax__V1__SubmitJobRequest req = PARALLAX__V1__SUBMIT_JOB_REQUEST__INIT;
    Parallax__V1__SubmitJobResponse *resp = NULL;
    px_job_config_t cfg;
    px_jobspec_msg_t msg; /* the JobSpec, written from cfg (jobspec.h) */
    const char *data = NULL, *name = NULL, *val = NULL, *devices = NULL, *cluster = NULL;
    char *data_abs = NULL, *val_abs = NULL;
    int no_val = 0, vocab_given = 0, auto_layout = 0;
    /* checkpoint, resume and export paths made absolute: in stack buffers,
     * so the usage-error returns below leak nothing */
    char abs_buf[6][PATH_MAX + 1];
    char *abs_paths[6] = {NULL, NULL, NULL, NULL, NULL, NULL};
    const char **rel_paths[6];
    int follow = 0, json = 0, dry_run = 0, opt, rc = PCTL_EXIT_FAIL;
    uint32_t max_restarts = 0;
    uint64_t v;

    memcpy(opts, own, sizeof(own));
    nopt += px_job_flags_options(PX_JOB_FLAG_PCTL, O_JOB_FLAG, opts + nopt,
                                 sizeof(opts) / sizeof(opts[0]) - nopt - 1);
    memset(&opts[nopt], 0, sizeof(opts[nopt]));
    pctl_job_defaults(&cfg);

    opterr = 0;
    while ((opt = getopt_long(argc, argv, ":h", opts, NULL)) != -1) {
        const px_job_flag_t *f = px_job_flag_of(opt, O_JOB_FLAG);
        if (f) { /* a job flag: the table says where it goes */
            if (pctl_job_flag_apply("submit", f, optarg, &cfg))
                return PCTL_EXIT_USAGE;
            vocab_given |= !strcmp(f->name, "vocab");
            continue;
        }
        switch (opt) {
        case O_MAX_RESTARTS:
            if (pctl_parse_u64("submit", "--max-restarts", optarg, 0, 100, &v))
                return PCTL_EXIT_USAGE;
            max_restarts = (uint32_t)v;
            break;
        case O_NO_VAL: no_val = 1; break;
        case O_DEVICES: { /* the daemon applies the same rule (planner/devsel.h) */
            px_devsel_t sel;
            char why[256];
            if (px_devsel_parse(optarg, &sel, why, sizeof(why)) != PX_OK)
                return pctl_usage_error("submit", "invalid value for --devices: %s", why);
            devices = optarg;
            break;
        }
        case O_NAME: name = optarg; break;
        case O_FOLLOW: follow = 1; break;
        case O_DRY_RUN: dry_run = 1; break;
        case O_LAYOUT:
            if (strcmp(optarg, "auto"))
                return pctl_usage_error("submit", "--layout '%s': only 'auto' (the fastest "
                                        "layout pctl plan --search finds on the cluster)", optarg);
            auto_layout = 1;
            break;
        case O_CLUSTER: cluster = optarg; break;
        case O_JSON: json = 1; break;
        case 'h': return pctl_help("submit");
        case ':': return pctl_usage_error("submit", "option %s needs a value", argv[optind - 1]);
        default: return pctl_usage_error("submit", "unknown option '%s'", argv[optind - 1]);
        }
    }
    /* the files: opened here (data, validation) or sent as absolute paths
     * (the ranks may run elsewhere) */
    data = cfg.data_path;
    val = cfg.val_path;
    rel_paths[0] = &cfg.checkpoint_dir;
    rel_paths[1] = &cfg.resume_dir;
    rel_paths[2] = &cfg.export_safetensors;
    rel_paths[3] = &cfg.init_from;
    rel_paths[4] = &cfg.export_hf;
    rel_paths[5] = &cfg.tensorboard_dir;
    for (int k = 0; k < 6; k++) {
        const char *path = *rel_paths[k];
        char cwd[PATH_MAX];
        int n;
        if (!path)
            continue;
        if (path[0] == '/' || !getcwd(cwd, sizeof(cwd)))
            n = snprintf(abs_buf[k], sizeof(abs_buf[k]), "%s", path);
        else
            n = snprintf(abs_buf[k], sizeof(abs_buf[k]), "%s/%s", cwd, path);
        if (n < 0 || (size_t)n >= sizeof(abs_buf[k]))
            return pctl_usage_error("submit", "path too long: '%s'", path);
        abs_paths[k] = abs_buf[k];
    }
    if (optind < argc)
        return pctl_usage_error("submit", "unexpected argument '%s'", argv[optind]);
    if (!data)
        return pctl_usage_error("submit", "missing --data FILE");
    if (cluster && !auto_layout)
        return pctl_usage_error("submit", "--cluster prices --layout auto's search; give "
                                "--layout auto too");
    if (auto_layout) {
        char err[1024];
        /* the model and batch first: the search keeps them and varies the rest */
        px_job_config_t probe = cfg;
        probe.layout = (px_layout_t){1, 1, 1, 1, 1};
        probe.zero = 0;
        probe.sequence_parallel = 0;
        probe.grad_accum = probe.micro_batches = probe.virtual_stages = 1;
        probe.schedule = PX_PIPE_1F1B;
        probe.stage_layers = NULL;
        if (px_job_config_check(&probe, 0, err, sizeof(err)) != PX_OK)
            return pctl_usage_error("submit", "%s", err);
        cfg = probe; /* the layout flags given are replaced below */
    }
    /* the flags among themselves (a usage error, exit 2); the job's other
     * rules are the daemon's to check, with the same validator */
    if (cfg.batch % ((long long)cfg.layout.dp * cfg.grad_accum) != 0)
        return pctl_usage_error("submit", "--batch %d is not divisible by --dp %d x --grad-accum "
                                "%d", cfg.batch, cfg.layout.dp, cfg.grad_accum);
    if (cfg.batch % ((long long)cfg.layout.dp * cfg.grad_accum * cfg.micro_batches) != 0)
        return pctl_usage_error("submit", "--batch %d is not divisible by --dp %d x --grad-accum "
                                "%d x --micro-batches %d", cfg.batch, cfg.layout.dp,
                                cfg.grad_accum, cfg.micro_batches);
    {   /* the daemon applies the same rule (planner/jobname.h) */
        char why[160];
        if (px_job_name_check(name, why, sizeof(why)) != PX_OK)
            return pctl_usage_error("submit", "invalid value for --name: %s", why);
    }
    data_abs = realpath(data, NULL);
    if (!data_abs)
        return pctl_usage_error("submit", "invalid value '%s' for --data: %s", data,
                                strerror(errno));
    cfg.data_path = data_abs;
    if (!vocab_given) {
        /* a file that pctl data prepare --tokenizer wrote names its vocab */
        int recorded = px_data_header_vocab(data_abs);
        if (recorded > 0 && recorded != cfg.vocab) {
            cfg.vocab = recorded;
            fprintf(stderr, "pctl: submit: --vocab %d, the tokenizer's, from %s\n", recorded,
                    data);
        }
    }
    /* the layout once the model is whole (its vocab) and the data path
     * absolute (--cluster local's calibration jobs read it) */
    if (auto_layout && (rc = layout_auto(ctx, cluster, devices, &cfg)) != PCTL_EXIT_OK)
        goto out;
    rc = PCTL_EXIT_FAIL;
    if (val && no_val) {
        rc = pctl_usage_error("submit", "--val-data and --no-val contradict each other");
        goto out;
    }
    if (val) {
        val_abs = realpath(val, NULL);
        if (!val_abs) {
            rc = pctl_usage_error("submit", "invalid value '%s' for --val-data: %s", val,
                                  strerror(errno));
            goto out;
        }
    } else if (!no_val) {
        /* the validation file `pctl data prepare` writes beside --data
         * (every layout evaluates, eval.h) */
        char *guess = pctl_val_path(data_abs);
        if (guess && access(guess, R_OK) == 0)
            val_abs = guess;
        else
            free(guess);
    }
    cfg.val_path = val_abs;
    cfg.checkpoint_dir = abs_paths[0];
    cfg.resume_dir = abs_paths[1];
    cfg.export_safetensors = abs_paths[2];
    cfg.init_from = abs_paths[3];
    cfg.export_hf = abs_paths[4];
    cfg.tensorboard_dir = abs_paths[5];
    if (cfg.checkpoint_every && !abs_paths[0]) {
        rc = pctl_usage_error("submit", "--checkpoint-every needs --checkpoint-dir");
        goto out;
    }
    if (dry_run) {
        /* the daemon's rules without a daemon: its validator over the same
         * config (daemon/validate.c: the job's rules, the files, what the
         * engine runs); placement and memory need the cluster's devices and
         * are checked at submit */
        char err[1024];
        if (px_job_config_check(&cfg, PX_JOBCFG_CHECK_DATA | PX_JOBCFG_ABSOLUTE_PATHS, err,
                                sizeof(err)) != PX_OK) {
            rc = pctl_usage_error("submit", "%s", err);
            goto out;
        }
        if (json)
            rc = pctl_json_print(json_pack("{s:b}", "valid", 1));
        else {
            printf("valid: the job passes the daemon's checks (placement and memory are "
                   "checked when it is submitted)\n");
            rc = PCTL_EXIT_OK;
        }
        goto out;
    }
    px_jobspec_from_config(&cfg, &msg);
    /* Without --name the daemon names the job after its id: a default
     * must never collide with an active job's name (ALREADY_EXISTS is for
     * names the user chose). */
    msg.spec.name = (char *)(name ? name : "");
    msg.spec.max_restarts = max_restarts;
    msg.spec.devices = (char *)(devices ? devices : "");
    req.spec = &msg.spec;

    if (pctl_call(ctx, "submit", M_SUBMIT, &req.base,
                  &parallax__v1__submit_job_response__descriptor, (ProtobufCMessage **)&resp))
        goto out;
    if (follow) {
        if (!json) {
            printf("%s\n", resp->job_id);
            fflush(stdout);
        }
        rc = follow_job_run(ctx, "submit", resp->job_id, json);
    } else if (json) {
        json_t *o = json_object();
        json_object_set_new(o, "job_id", json_string(resp->job_id));
        rc = pctl_json_print(o);
    } else {
        printf("%s\n", resp->job_id);
        rc = PCTL_EXIT_OK;
    }
out:
    if (resp)
        protobuf_c_message_free_unpacked(&resp->base, NULL);
    free(data_abs);
    free(val_abs);
    return rc;
}

/* --------------------------------------------------------- list/status */

static int cmp_created(const void *a, const void *b)
{
    const Parallax__V1__Job *x = *(Parallax__V1__Job *const *)a;
    const Parallax__V1__Job *y = *(Parallax__V1__Job *const *)b;
    return (x->created_ms > y->created_ms) - (x->created_ms < y->created_ms);
}

/* The nodes whose jobs a cluster-wide listing lacks (they did not answer
 * the daemon we asked), one line each on stderr; stdout (the table or the
 * JSON array) stays as it is. */
static void print_unanswered(const Parallax__V1__ListJobsResponse *resp)
{
    for (size_t i = 0; i < resp->n_unanswered; i++)
        fprintf(stderr, "pctl: list: partial listing: node %s did not answer (%s): its jobs are "
                        "not listed\n",
                pctl_esc(resp->unanswered[i]->node), pctl_esc(resp->unanswered[i]->reason));
}

int pctl_cmd_list(pctl_ctx_t *ctx, int argc, char **argv)
{
    static const struct option opts[] = {
        {"json", no_argument, NULL, 'j'},
        {"strict", no_argument, NULL, 's'},
        {"help", no_argument, NULL, 'h'},
        {NULL, 0, NULL, 0},
    };
    Parallax__V1__ListJobsRequest req = PARALLAX__V1__LIST_JOBS_REQUEST__INIT;
    Parallax__V1__ListJobsResponse *resp = NULL;
    int json = 0, strict = 0, rc, opt;

    opterr = 0;
    while ((opt = getopt_long(argc, argv, ":h", opts, NULL)) != -1) {
        switch (opt) {
        case 'j': json = 1; break;
        case 's': strict = 1; break;
        case 'h': return pctl_help("list");
        default: return pctl_usage_error("list", "unknown option '%s'", argv[optind - 1]);
        }
    }
    if (optind < argc)
        return pctl_usage_error("list", "unexpected argument '%s'", argv[optind]);
    if (pctl_call(ctx, "list", M_LIST, &req.base, &parallax__v1__list_jobs_response__descriptor,
                  (ProtobufCMessage **)&resp))
        return PCTL_EXIT_FAIL;
    if (resp->n_jobs > 1) /* an empty list has jobs == NULL: not a qsort argument */
        qsort(resp->jobs, resp->n_jobs, sizeof(resp->jobs[0]), cmp_created);
    if (json) {
        json_t *a = json_array();
        for (size_t i = 0; i < resp->n_jobs; i++)
            json_array_append_new(a, pctl_json_job(resp->jobs[i]));
        rc = pctl_json_print(a);
    } else {
        printf("%-20s %-16s %-10s %13s %8s %8s %7s\n", "ID", "NAME", "STATE", "STEP", "LOSS",
               "TOK/S", "AGE");
        for (size_t i = 0; i < resp->n_jobs; i++) {
            const Parallax__V1__Job *j = resp->jobs[i];
            char steps[32], tps[32], age[32], loss[32];
            snprintf(steps, sizeof(steps), "%u/%u", j->step, job_steps(j));
            if (j->step > 0)
                snprintf(loss, sizeof(loss), "%.4f", j->loss);
            else
                snprintf(loss, sizeof(loss), "-");
            printf("%-20s %-16s %-10s %13s %8s %8s %7s\n", pctl_esc(j->id),
                   pctl_esc(j->spec ? j->spec->name : NULL), pctl_state_name(j->state), steps,
                   loss, pctl_fmt_rate(j->tokens_per_second, tps, sizeof(tps)),
                   fmt_age(j->now_ms, j->created_ms, age, sizeof(age)));
        }
        rc = PCTL_EXIT_OK;
    }
    print_unanswered(resp);
    if (strict && resp->n_unanswered && rc == PCTL_EXIT_OK)
        rc = PCTL_EXIT_FAIL;
    protobuf_c_message_free_unpacked(&resp->base, NULL);
    return rc;
}

static void print_job(const Parallax__V1__Job *j)
{
    const Parallax__V1__JobSpec *s = j->spec;
    const Parallax__V1__ModelSpec *m = s ? s->model : NULL;
    char b1[128], b2[64], b3[32];
    px_layout_t l;
    int has_layout = pctl_job_layout(j, &l);
    int reporting = has_layout ? px_layout_reporting_rank(&l) : -1;

    printf("job          %s\n", pctl_esc(j->id));
    printf("name         %s\n", pctl_esc(s ? s->name : NULL));
    printf("state        %s\n", pctl_state_name(j->state));
    if (j->reason && *j->reason)
        printf("reason       %s\n", pctl_esc(j->reason));
    printf("step         %u/%u\n", j->step, job_steps(j));
    if (j->step > 0) {
        printf("loss         %.4f\n", j->loss);
        printf("grad norm    %.4f\n", j->grad_norm);
        printf("lr           %.6g\n", j->lr);
        printf("tokens/s     %.0f\n", j->tokens_per_second);
    }
    if (j->val_step > 0)
        printf("val loss     %.4f (after step %u)\n", j->val_loss, j->val_step);
    printf("created      %s (%s ago)\n", fmt_time(j->now_ms, j->created_ms, b1, sizeof(b1)),
           fmt_age(j->now_ms, j->created_ms, b2, sizeof(b2)));
    if (j->started_ms > 0)
        printf("started      %s\n", fmt_time(j->now_ms, j->started_ms, b1, sizeof(b1)));
    if (j->finished_ms > 0)
        printf("finished     %s (ran %s)\n", fmt_time(j->now_ms, j->finished_ms, b1, sizeof(b1)),
               j->started_ms > 0
                   ? pctl_fmt_duration((double)(j->finished_ms - j->started_ms) / 1000.0, b3,
                                       sizeof(b3))
                   : "-");
    if (j->coordinator && *j->coordinator)
        printf("coordinator  %s\n", pctl_esc(j->coordinator));
    if (m)
        printf("model        layers %u, heads %u, dim %u, seq %u, vocab %u\n", m->layers,
               m->heads, m->dim, m->seq, m->vocab ? m->vocab : PX_DEFAULT_VOCAB);
    if (s) {
        printf("training     dp %u, batch %u, steps %u, lr %g, seed %llu, warmup %u, "
               "weight decay %g, min lr ratio %g\n",
               s->dp, s->batch, s->steps, s->lr, (unsigned long long)s->seed, s->warmup_steps,
               s->weight_decay, s->min_lr_ratio);
        printf("data         %s\n", pctl_esc(s->data_path));
        if (s->devices && *s->devices) /* --devices at submit */
            printf("devices      %s\n", pctl_esc(s->devices));
        /* an empty field is the default, fp32 */
        printf("precision    %s\n", s->precision && *s->precision
               ? (!strcmp(s->precision, "bf16") ? "bf16 (bf16 GEMM and attention operands, fp32 elsewhere)"
                                                : pctl_esc(s->precision))
               : "fp32");
    }
    if (has_layout) {
        printf("layout       %s%s; rank = tp + tp x (cp + cp x (dp + dp x pp)); "
               "* reports the step figures\n", px_layout_str(&l, b1, sizeof(b1)),
               s && s->parallel && s->parallel->sequence_parallel ? ", sequence parallel" : "");
    }
    if (s && s->moe && s->moe->experts) {
        const Parallax__V1__MoeSpec *e = s->moe;
        printf("moe          %u experts, top-%u, every %u layer(s), %s, aux loss coef %g\n",
               e->experts, e->top_k ? e->top_k : 2, e->moe_every ? e->moe_every : 1,
               e->dropless ? "dropless" : "capacity", e->aux_loss_coef < 0 ? 0.0 :
               (e->aux_loss_coef == 0 ? 0.01 : (double)e->aux_loss_coef));
        if (!e->dropless)
            printf("             capacity factor %g\n",
                   e->capacity_factor != 0 ? (double)e->capacity_factor : 1.25);
    }
    if (j->n_ranks > 0) {
        /* per rank its coordinates in the layout (layout.h), where it runs,
         * and how it is doing */
        printf("ranks:\n  %-6s %-3s %-3s %-3s %-3s %-3s %-16s %-8s %-8s %-10s %s\n", "RANK",
               "DP", "TP", "PP", "CP", "EP", "NODE", "DEVICE", "PID", "STATE", "EXIT");
        for (size_t i = 0; i < j->n_ranks; i++) {
            const Parallax__V1__RankInfo *r = j->ranks[i];
            char ex[16], rk[16], co[5][12];
            px_coord_t c;
            if (r->state && !strcmp(r->state, "exited"))
                snprintf(ex, sizeof(ex), "%d", r->exit_code);
            else
                snprintf(ex, sizeof(ex), "-");
            snprintf(rk, sizeof(rk), "%u%s", r->rank,
                     has_layout && (int)r->rank == reporting ? "*" : "");
            if (has_layout && (int)r->rank < px_layout_world(&l)) {
                px_layout_coord(&l, (int)r->rank, &c);
                snprintf(co[0], sizeof(co[0]), "%d", c.dp);
                snprintf(co[1], sizeof(co[1]), "%d", c.tp);
                snprintf(co[2], sizeof(co[2]), "%d", c.pp);
                snprintf(co[3], sizeof(co[3]), "%d", c.cp);
                snprintf(co[4], sizeof(co[4]), "%d", c.ep);
            } else {
                for (int k = 0; k < 5; k++)
                    snprintf(co[k], sizeof(co[k]), "-");
            }
            printf("  %-6s %-3s %-3s %-3s %-3s %-3s %-16s %-8s %-8d %-10s %s\n", rk, co[0], co[1],
                   co[2], co[3], co[4], pctl_esc(r->node), pctl_esc(r->device),
                   r->pid, pctl_esc(r->state), ex);
        }
    }
}

/* A pipeline job's measured bubble: per stage, the idle fraction (idle /
 * (busy + idle)) of the last step each of its ranks reported with its
 * memory (Control.GetMemory; pipeline.h's busy/idle times), averaged over
 * the stage's ranks, next to GPipe / 1F1B's (p-1)/(M+p-1). Prints nothing
 * when no rank reported pipeline times yet. */
static void print_bubble(const Parallax__V1__GetMemoryResponse *resp, const Parallax__V1__Job *j,
                         json_t *jo)
{
    px_layout_t l;
    if (!pctl_job_layout(j, &l) || l.pp < 2)
        return;
    if (!resp)
        return;
    double idle[l.pp], all[l.pp];
    int n[l.pp], any = 0;
    for (int s = 0; s < l.pp; s++)
        idle[s] = all[s] = n[s] = 0;
    for (size_t i = 0; i < resp->n_ranks; i++) {
        const Parallax__V1__RankMemory *m = resp->ranks[i];
        double t = m->pp_busy_s + m->pp_idle_s;
        if (m->pp < 2 || (int)m->pp_stage >= l.pp || t <= 0)
            continue;
        idle[m->pp_stage] += m->pp_idle_s / t;
        all[m->pp_stage] += t;
        n[m->pp_stage]++;
        any = 1;
    }
    const Parallax__V1__JobSpec *s = j->spec;
    int M = s && s->parallel && s->parallel->micro_batches ? (int)s->parallel->micro_batches : 1;
    const char *sched = s && s->parallel && s->parallel->schedule && *s->parallel->schedule
                            ? s->parallel->schedule : "1f1b";
    int V = s && s->parallel && s->parallel->virtual_stages ? (int)s->parallel->virtual_stages : 1;
    json_t *ja = jo ? json_array() : NULL;
    if (any && !jo)
        printf("pipeline     %s, %d micro-batches", sched, M);
    if (any && !jo && V > 1)
        printf(", %d chunks per stage", V);
    if (any && !jo)
        printf("; measured bubble (idle fraction of the last reported step) per stage:");
    for (int st = 0; any && st < l.pp; st++) {
        double f = n[st] ? idle[st] / n[st] : -1.0;
        if (jo)
            json_array_append_new(ja, json_pack("{s:i, s:f, s:f}", "stage", st, "idle_fraction",
                                                f, "step_s", n[st] ? all[st] / n[st] : 0.0));
        else if (f >= 0)
            printf(" %d: %.1f%%", st, 100.0 * f);
        else
            printf(" %d: -", st);
    }
    if (any && !jo && V > 1) /* Narayanan et al. 2021: the bubble shrinks by V */
        printf("; (p-1)/(V*M+p-1) = %.1f%% (V=%d)\n", 100.0 * (l.pp - 1) / (V * M + l.pp - 1),
               V);
    else if (any && !jo)
        printf("; (p-1)/(M+p-1) = %.1f%%\n", 100.0 * (l.pp - 1) / (M + l.pp - 1));
    if (jo)
        json_object_set_new(jo, "pipeline_bubble", ja);
}

/* A MoE job's routing in the last reported step (moe.h): per expert, the
 * choices it received and dropped, summed over the job's ep groups (each
 * group's figures from its first rank: dp index % ep == 0, tp 0), from the
 * ranks' memory reports (Control.GetMemory). Prints nothing for a dense
 * job or before the first report. */
static void print_moe(const Parallax__V1__GetMemoryResponse *resp, const Parallax__V1__Job *j,
                      json_t *jo)
{
    px_layout_t l;
    const Parallax__V1__JobSpec *s = j->spec;
    if (!s || !s->moe || !s->moe->experts || !pctl_job_layout(j, &l))
        return;
    if (!resp)
        return;
    size_t E = s->moe->experts;
    uint64_t rec[E], drop[E];
    uint32_t step = 0;
    double a2a = 0.0;
    int groups = 0;
    memset(rec, 0, sizeof(rec));
    memset(drop, 0, sizeof(drop));
    for (size_t i = 0; i < resp->n_ranks; i++) {
        const Parallax__V1__RankMemory *m = resp->ranks[i];
        if (m->n_moe_received != E || m->n_moe_dropped != E)
            continue;
        a2a = m->moe_alltoall_s > a2a ? m->moe_alltoall_s : a2a;
        if (m->tp_rank != 0 || m->dp_rank % (uint32_t)l.ep)
            continue;
        for (size_t e = 0; e < E; e++) {
            rec[e] += m->moe_received[e];
            drop[e] += m->moe_dropped[e];
        }
        step = m->step;
        groups++;
    }
    if (groups && jo) {
        json_t *r = json_array(), *d = json_array();
        for (size_t e = 0; e < E; e++) {
            json_array_append_new(r, json_integer((json_int_t)rec[e]));
            json_array_append_new(d, json_integer((json_int_t)drop[e]));
        }
        json_object_set_new(jo, "experts", json_pack("{s:i, s:i, s:o, s:o, s:f}", "step",
                                                     (int)step, "ep", l.ep, "received", r,
                                                     "dropped", d, "alltoall_s", a2a));
    } else if (groups) {
        printf("experts      %zu over ep %d, top-%u; step %u, choices received/dropped per "
               "expert:", E, l.ep, s->moe->top_k ? s->moe->top_k : 2, step);
        for (size_t e = 0; e < E; e++)
            printf(" %zu: %llu/%llu", e, (unsigned long long)rec[e],
                   (unsigned long long)drop[e]);
        printf("; all-to-all %.2f ms\n", 1e3 * a2a);
    }
}

/* Appends each name of comma-separated `list` that `acc` (len bytes) does
 * not hold yet. */
static void add_names(char *acc, size_t len, const char *list)
{
    for (const char *p = list; p && *p;) {
        size_t n = strcspn(p, ",");
        int have = 0;
        for (const char *q = acc; *q && !have;) {
            size_t m = strcspn(q, ",");
            have = m == n && !strncmp(q, p, n);
            q += m + (q[m] == ',');
        }
        size_t at = strlen(acc);
        if (!have && at + n + 2 <= len)
            snprintf(acc + at, len - at, "%s%.*s", at ? "," : "", (int)n, p);
        p += n + (p[n] == ',');
    }
}

/* A comma-separated list as a JSON array of strings. */
static json_t *names_json(const char *list)
{
    json_t *a = json_array();
    for (const char *p = list; *p;) {
        size_t n = strcspn(p, ",");
        json_array_append_new(a, json_stringn(p, n));
        p += n + (p[n] == ',');
    }
    return a;
}

/* The paths the job's communicators took (px_comm_paths: the world and
 * each group of more than one rank), for host and device buffers, from the
 * ranks' latest memory reports (Control.GetMemory): per communicator kind,
 * the union over the ranks (every rank of one communicator takes the same
 * path, but a kind has one communicator per group). Prints nothing before
 * the first report. */
static void print_paths(const Parallax__V1__GetMemoryResponse *resp, const Parallax__V1__Job *j,
                        json_t *jo)
{
    enum { MAXC = 16 };
    struct { const char *comm; uint32_t size; char host[64], device[64]; } c[MAXC];
    int nc = 0;

    if (!resp)
        return;
    for (size_t i = 0; i < resp->n_ranks; i++) {
        for (size_t k = 0; k < resp->ranks[i]->n_comm_paths; k++) {
            const Parallax__V1__CommPath *p = resp->ranks[i]->comm_paths[k];
            int at = 0;
            while (at < nc && strcmp(c[at].comm, p->comm))
                at++;
            if (at == MAXC)
                continue;
            if (at == nc) {
                c[nc].comm = p->comm;
                c[nc].size = p->size;
                c[nc].host[0] = c[nc].device[0] = '\0';
                nc++;
            }
            add_names(c[at].host, sizeof(c[at].host), p->host);
            add_names(c[at].device, sizeof(c[at].device), p->device);
        }
    }
    json_t *ja = jo && nc ? json_array() : NULL;
    for (int i = 0; i < nc; i++) {
        if (ja) {
            json_array_append_new(ja, json_pack("{s:s, s:i, s:o, s:o}", "comm", c[i].comm,
                                                "size", (int)c[i].size, "host",
                                                names_json(c[i].host), "device",
                                                names_json(c[i].device)));
            continue;
        }
        printf("%-13s%s (%u ranks):", i ? "" : "paths", c[i].comm, c[i].size);
        if (c[i].host[0])
            printf(" host %s%s", c[i].host, c[i].device[0] ? "," : "");
        if (c[i].device[0])
            printf(" device %s", c[i].device);
        if (!c[i].host[0] && !c[i].device[0])
            printf(" no collective yet");
        printf("\n");
    }
    if (ja)
        json_object_set_new(jo, "comm_paths", ja);
}

/* The job's ranks' last memory reports (Control.GetMemory), which also carry
 * their pipeline times, MoE routing and collective paths; NULL when the
 * call fails (the status prints without them). Caller frees. */
static Parallax__V1__GetMemoryResponse *job_memory(pctl_ctx_t *ctx, const Parallax__V1__Job *j)
{
    Parallax__V1__GetMemoryRequest req = PARALLAX__V1__GET_MEMORY_REQUEST__INIT;
    Parallax__V1__GetMemoryResponse *resp = NULL;
    px_rpc_result_t res = {GRPC_STATUS_OK, NULL};
    req.job_id = j->id;
    px_status_t status = px_rpc_call_unary(pctl_channel(ctx), M_GET_MEMORY, &req.base,
                                           &parallax__v1__get_memory_response__descriptor,
                                           ctx->timeout_ms, (ProtobufCMessage **)&resp, &res);
    free(res.message);
    if (status != PX_OK && resp) {
        protobuf_c_message_free_unpacked(&resp->base, NULL);
        resp = NULL;
    }
    return resp;
}

int pctl_cmd_status(pctl_ctx_t *ctx, int argc, char **argv)
{
    Parallax__V1__GetJobRequest req = PARALLAX__V1__GET_JOB_REQUEST__INIT;
    Parallax__V1__Job *job = NULL;
    const char *id = NULL;
    int json, rc;

    char idbuf[256];
    if (parse_common("status", argc, argv, 1, &json, &id, &rc))
        return rc;
    req.job_id = (char *)pctl_job_id(ctx, id, idbuf, sizeof(idbuf));
    if (pctl_call(ctx, "status", M_GET, &req.base, &parallax__v1__job__descriptor,
                  (ProtobufCMessage **)&job))
        return PCTL_EXIT_FAIL;
    Parallax__V1__GetMemoryResponse *mem = job_memory(ctx, job);
    if (json) {
        json_t *o = pctl_json_job(job);
        if (o) {
            print_bubble(mem, job, o);
            print_moe(mem, job, o);
            print_paths(mem, job, o);
        }
        rc = pctl_json_print(o);
    } else {
        print_job(job);
        print_bubble(mem, job, NULL);
        print_moe(mem, job, NULL);
        print_paths(mem, job, NULL);
        rc = PCTL_EXIT_OK;
    }
    if (mem)
        protobuf_c_message_free_unpacked(&mem->base, NULL);
    protobuf_c_message_free_unpacked(&job->base, NULL);
    return rc;
}

int pctl_cmd_watch(pctl_ctx_t *ctx, int argc, char **argv)
{
    const char *id = NULL;
    int json, rc;
    char idbuf[256];
    if (parse_common("watch", argc, argv, 1, &json, &id, &rc))
        return rc;
    return follow_job_run(ctx, "watch", pctl_job_id(ctx, id, idbuf, sizeof(idbuf)), json);
}

int pctl_cmd_cancel(pctl_ctx_t *ctx, int argc, char **argv)
{
    Parallax__V1__CancelJobRequest req = PARALLAX__V1__CANCEL_JOB_REQUEST__INIT;
    Parallax__V1__Job *job = NULL;
    const char *id = NULL;
    int json, rc;

    char idbuf[256];
    if (parse_common("cancel", argc, argv, 1, &json, &id, &rc))
        return rc;
    req.job_id = (char *)pctl_job_id(ctx, id, idbuf, sizeof(idbuf));
    if (pctl_call(ctx, "cancel", M_CANCEL, &req.base, &parallax__v1__job__descriptor,
                  (ProtobufCMessage **)&job))
        return PCTL_EXIT_FAIL;
    if (json) {
        rc = pctl_json_print(pctl_json_job(job));
    } else {
        printf("job %s: %s", pctl_esc(job->id), pctl_state_name(job->state));
        if (job->reason && *job->reason)
            printf(" (%s)", pctl_esc(job->reason));
        printf("\n");
        rc = PCTL_EXIT_OK;
    }
    protobuf_c_message_free_unpacked(&job->base, NULL);
    return rc;
}

/* ------------------------------------------------------ metrics/logs */

int pctl_cmd_logs(pctl_ctx_t *ctx, int argc, char **argv)
{
    static const struct option opts[] = {
        {"rank", required_argument, NULL, 'r'},
        {"tail", required_argument, NULL, 't'},
        {"help", no_argument, NULL, 'h'},
        {NULL, 0, NULL, 0},
    };
    Parallax__V1__GetLogsRequest req = PARALLAX__V1__GET_LOGS_REQUEST__INIT;
    Parallax__V1__GetLogsResponse *resp = NULL;
    uint64_t rank = 0, tail = 0;
    const uint8_t *p;
    size_t len;
    int opt;

    opterr = 0;
    while ((opt = getopt_long(argc, argv, ":h", opts, NULL)) != -1) {
        switch (opt) {
        case 'r':
            if (pctl_parse_u64("logs", "--rank", optarg, 0, UINT32_MAX, &rank))
                return PCTL_EXIT_USAGE;
            break;
        case 't':
            if (pctl_parse_u64("logs", "--tail", optarg, 1, 1000000, &tail))
                return PCTL_EXIT_USAGE;
            break;
        case 'h': return pctl_help("logs");
        case ':': return pctl_usage_error("logs", "option %s needs a value", argv[optind - 1]);
        default: return pctl_usage_error("logs", "unknown option '%s'", argv[optind - 1]);
        }
    }
    if (optind >= argc)
        return pctl_usage_error("logs", "missing JOB");
    char idbuf[256];
    req.job_id = (char *)pctl_job_id(ctx, argv[optind++], idbuf, sizeof(idbuf));
    if (optind < argc)
        return pctl_usage_error("logs", "unexpected argument '%s'", argv[optind]);
    req.rank = (uint32_t)rank;
    /* --tail N lines: ask for enough bytes (up to 1 KiB a line), cut here. */
    req.tail_bytes = tail ? (uint32_t)(tail * 1024 < (16u << 20) ? tail * 1024 : (16u << 20)) : 0;
    if (pctl_call(ctx, "logs", M_LOGS, &req.base, &parallax__v1__get_logs_response__descriptor,
                  (ProtobufCMessage **)&resp))
        return PCTL_EXIT_FAIL;
    p = resp->text.data;
    len = resp->text.len;
    if (tail && len > 0) {
        size_t i = len, lines = 0;
        if (p[len - 1] == '\n')
            i--; /* the final newline ends the last line */
        while (i > 0) {
            if (p[i - 1] == '\n' && ++lines == tail)
                break;
            i--;
        }
        p += i;
        len -= i;
    }
    /* on a terminal the rank's control bytes are shown, not obeyed;
     * into a pipe or file the log goes byte for byte */
    if (len > 0 && (isatty(STDOUT_FILENO) ? pctl_esc_write(stdout, p, len) != 0
                                          : fwrite(p, 1, len, stdout) != len)) {
        protobuf_c_message_free_unpacked(&resp->base, NULL);
        return PCTL_EXIT_FAIL;
    }
    protobuf_c_message_free_unpacked(&resp->base, NULL);
    return PCTL_EXIT_OK;
}

/* -------------------------------------------------------------- nodes */

/* NodeInfo.state, or (a daemon from before it) what `alive` says */
static const char *node_state(const Parallax__V1__NodeInfo *n)
{
    if (n->state && *n->state)
        return pctl_esc(n->state);
    return n->alive ? "UP" : "DOWN";
}

/* `pctl node VERB NODE`: Control.SetNodeState on any daemon (it relays to
 * NODE); prints the node's state after the change. */
int pctl_cmd_node(pctl_ctx_t *ctx, int argc, char **argv)
{
    static const struct {
        const char *verb;
        Parallax__V1__NodeAction action;
    } verbs[] = {
        {"drain", PARALLAX__V1__NODE_ACTION__NODE_DRAIN},
        {"resume", PARALLAX__V1__NODE_ACTION__NODE_RESUME},
        {"stop", PARALLAX__V1__NODE_ACTION__NODE_STOP},
    };
    Parallax__V1__SetNodeStateRequest req = PARALLAX__V1__SET_NODE_STATE_REQUEST__INIT;
    Parallax__V1__NodeInfo *resp = NULL;
    const char *verb, *job = NULL;
    int json, rc;

    for (int i = 1; i < argc; i++)
        if (!strcmp(argv[i], "--help"))
            return pctl_help("node");
    if (argc < 2)
        return pctl_usage_error("node", "missing VERB (drain, resume or stop) and NODE");
    verb = argv[1];
    for (size_t i = 0; i < sizeof(verbs) / sizeof(verbs[0]); i++)
        if (!strcmp(verb, verbs[i].verb))
            req.action = verbs[i].action;
    if (!req.action)
        return pctl_usage_error("node", "unknown verb '%s' (expected drain, resume or stop)",
                                verb);
    rc = 0;
    for (int i = 2; i < argc; i++)
        rc |= argv[i][0] != '-';
    if (!rc)
        return pctl_usage_error("node", "missing NODE (`pctl nodes` lists them)");
    /* NODE and --json after the verb; a job's parser takes NODE as its JOB */
    if (parse_common("node", argc - 1, argv + 1, 1, &json, &job, &rc))
        return rc;
    req.node = (char *)job;
    if (pctl_call(ctx, "node", M_SET_NODE, &req.base, &parallax__v1__node_info__descriptor,
                  (ProtobufCMessage **)&resp))
        return PCTL_EXIT_FAIL;
    if (json) {
        rc = pctl_json_print(pctl_json_node(resp));
    } else {
        size_t held = 0;
        for (size_t k = 0; k < resp->n_devices; k++)
            held += resp->devices[k]->job_id && *resp->devices[k]->job_id;
        printf("node %s: %s", pctl_esc(resp->name), node_state(resp));
        if (held)
            printf(" (%zu of %zu devices still held by running jobs)", held, resp->n_devices);
        printf("\n");
        rc = PCTL_EXIT_OK;
    }
    protobuf_c_message_free_unpacked(&resp->base, NULL);
    return rc;
}

/* The GPU MEM/UTIL column of `pctl nodes`: the node's GPUs' memory used /
 * total (GiB, summed) and mean utilization as last sampled, "-" without
 * any sampled GPU. */
static void node_gpu_column(const Parallax__V1__NodeInfo *n, char *buf, size_t len)
{
    double used = 0, total = 0, util = 0;
    int sampled = 0, with_util = 0;
    for (size_t k = 0; k < n->n_gpus; k++) {
        const Parallax__V1__GpuStats *g = n->gpus[k];
        if (!g->sampled_ms)
            continue;
        sampled++;
        used += (double)g->memory_used;
        total += (double)g->memory_total;
        if (g->utilization >= 0) {
            util += g->utilization;
            with_util++;
        }
    }
    if (!sampled)
        snprintf(buf, len, "-");
    else if (with_util)
        snprintf(buf, len, "%.1f/%.1fG %.0f%%", used / 1073741824.0, total / 1073741824.0,
                 100.0 * util / with_util);
    else
        snprintf(buf, len, "%.1f/%.1fG", used / 1073741824.0, total / 1073741824.0);
}

/* One line of `pctl nodes` per GPU: NVML's last sample, its processes
 * and those that are not the node's ranks. */
static void print_gpu(const Parallax__V1__GpuStats *g)
{
    char util[16] = "-", power[16] = "-", temp[16] = "-", pids[160] = "";
    size_t off = 0;
    if (!g->sampled_ms) {
        printf("  GPU %-10s not sampled (no NVML)\n", pctl_esc(g->device));
        return;
    }
    if (g->utilization >= 0)
        snprintf(util, sizeof(util), "%.0f%%", 100.0 * g->utilization);
    if (g->power_watts >= 0)
        snprintf(power, sizeof(power), "%.0f W", g->power_watts);
    if (g->temperature_celsius >= 0)
        snprintf(temp, sizeof(temp), "%.0f C", g->temperature_celsius);
    for (size_t k = 0; k < g->n_pids && off < sizeof(pids) - 16; k++)
        off += (size_t)snprintf(pids + off, sizeof(pids) - off, "%s%u", k ? "," : "", g->pids[k]);
    printf("  GPU %-10s %s  %.1f / %.1f GiB used  util %s  %s  %s  pids %s\n", pctl_esc(g->device),
           g->model && *g->model ? pctl_esc(g->model) : "?", g->memory_used / 1073741824.0,
           g->memory_total / 1073741824.0, util, power, temp, off ? pids : "-");
    for (size_t k = 0; k < g->n_foreign_pids; k++)
        printf("  GPU %-10s FOREIGN process pid %u (not a rank of this node): no rank is placed "
               "on this GPU while it is there\n", pctl_esc(g->device), g->foreign_pids[k]);
}

int pctl_cmd_nodes(pctl_ctx_t *ctx, int argc, char **argv)
{
    Parallax__V1__ListNodesRequest req = PARALLAX__V1__LIST_NODES_REQUEST__INIT;
    Parallax__V1__ListNodesResponse *resp = NULL;
    const char *job = NULL;
    int json, rc;

    if (parse_common("nodes", argc, argv, 0, &json, &job, &rc))
        return rc;
    if (pctl_call(ctx, "nodes", M_NODES, &req.base, &parallax__v1__list_nodes_response__descriptor,
                  (ProtobufCMessage **)&resp))
        return PCTL_EXIT_FAIL;
    if (json) {
        json_t *a = json_array();
        for (size_t i = 0; i < resp->n_nodes; i++)
            json_array_append_new(a, pctl_json_node(resp->nodes[i]));
        rc = pctl_json_print(a);
    } else {
        printf("%-16s %-22s %-22s %-6s %-9s %-8s %-18s %-12s %s\n", "NAME", "CONTROL", "PEER",
               "ALIVE", "STATE", "FREE/ALL", "GPU MEM/UTIL", "BLAS", "LAST SEEN");
        for (size_t i = 0; i < resp->n_nodes; i++) {
            const Parallax__V1__NodeInfo *n = resp->nodes[i];
            size_t free_devs = 0;
            char devs[32], seen[32], gpu[32];
            for (size_t k = 0; k < n->n_devices; k++)
                if (!n->devices[k]->job_id || !*n->devices[k]->job_id)
                    free_devs++;
            snprintf(devs, sizeof(devs), "%zu/%zu", free_devs, n->n_devices);
            fmt_age(n->now_ms, n->last_seen_ms, seen, sizeof(seen));
            node_gpu_column(n, gpu, sizeof(gpu));
            printf("%-16s %-22s %-22s %-6s %-9s %-8s %-18s %-12s %s%s\n", pctl_esc(n->name),
                   pctl_esc(n->control_addr), pctl_esc(n->peer_addr),
                   n->alive ? "yes" : "no", node_state(n), devs, gpu,
                   n->blas_core && *n->blas_core ? pctl_esc(n->blas_core) : "-", seen,
                   n->last_seen_ms > 0 ? " ago" : "");
            if (n->error && *n->error)
                printf("  ERROR: %s\n", pctl_esc(n->error));
            for (size_t k = 0; k < n->n_gpus; k++)
                print_gpu(n->gpus[k]);
            for (size_t k = 0; k < n->n_devices; k++) { /* GPUs: memory from NVML */
                const Parallax__V1__Device *dv = n->devices[k]; /* sim: its arena */
                if (dv->name && (!strncmp(dv->name, "cuda:", 5) || !strncmp(dv->name, "sim:", 4)))
                    printf("  %-14s %.1f / %.1f GiB used at start  %s\n", pctl_esc(dv->name),
                           dv->mem_used / 1073741824.0, dv->memory_bytes / 1073741824.0,
                           dv->job_id && *dv->job_id ? pctl_esc(dv->job_id) : "free");
                if (dv->blocked && *dv->blocked)
                    printf("  %-14s BLOCKED: %s\n", pctl_esc(dv->name), pctl_esc(dv->blocked));
            }
        }
        rc = PCTL_EXIT_OK;
    }
    protobuf_c_message_free_unpacked(&resp->base, NULL);
    return rc;
}
