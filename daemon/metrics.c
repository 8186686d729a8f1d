/* metrics.c: the Prometheus endpoint of parallaxd (metrics.h).
 *
 * libmicrohttpd runs without a thread of its own (MHD_USE_EPOLL, external
 * polling): its epoll fd is watched by a uv_poll on the daemon's loop and
 * MHD_run() is called when it is readable and every 250 ms (connection
 * timeouts), so requests are answered on the loop thread, where all of the
 * daemon's state lives. RPC statistics are counted by the px_rpc server
 * observer (same thread) into a small table keyed by (method, code).
 * Text format: https://prometheus.io/docs/instrumenting/exposition_formats/
 * (HELP and TYPE once per family, label values escaped, histograms as
 * cumulative _bucket{le} series with _sum and _count). */
#include "metrics.h"

#include <arpa/inet.h>
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "config.h"
#include "memstore.h"
#include "px_config.h"
#include "px_log.h"
#include "px_time.h"

#ifdef PX_HAVE_MICROHTTPD
#include <microhttpd.h>
#endif

/* Histogram bounds (seconds) of the RPC durations: loopback calls take
 * well under a millisecond, streams (WatchJob) minutes. */
static const double bounds[] = {0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05,
                                0.1,    0.25,  0.5,    1,     2.5,  5,    10, 60};
#define NB (sizeof(bounds) / sizeof(bounds[0]))
#define MAX_RPC_SERIES 256

typedef struct rpc_series {
    char service[48], method[48];
    int code;
    uint64_t count, buckets[NB]; /* buckets[i]: durations <= bounds[i] */
    double sum;
} rpc_series_t;

struct px_metrics {
    px_daemon_t *d;
    rpc_series_t rpc[MAX_RPC_SERIES];
    int n_rpc;
#ifdef PX_HAVE_MICROHTTPD
    struct MHD_Daemon *mhd;
    uv_poll_t poll;
    uv_timer_t timer;
    int open_handles; /* poll and timer not yet closed */
#endif
};

/* ---------------------------------------------------------------- RPCs */

static void observe(void *arg, const char *path, grpc_status_code code, double seconds)
{
    px_metrics_t *m = arg;
    char service[48] = "", method[48] = "";
    const char *slash = path[0] == '/' ? strchr(path + 1, '/') : NULL;
    rpc_series_t *s = NULL;

    if (slash) { /* "/parallax.v1.Control/GetJob" -> Control, GetJob */
        const char *dot = memrchr(path + 1, '.', (size_t)(slash - path - 1));
        const char *svc = dot ? dot + 1 : path + 1;
        snprintf(service, sizeof(service), "%.*s", (int)(slash - svc), svc);
        snprintf(method, sizeof(method), "%s", slash + 1);
    } else {
        snprintf(method, sizeof(method), "%s", path);
    }
    for (int i = 0; i < m->n_rpc; i++)
        if (m->rpc[i].code == (int)code && !strcmp(m->rpc[i].method, method) &&
            !strcmp(m->rpc[i].service, service)) {
            s = &m->rpc[i];
            break;
        }
    if (!s) {
        if (m->n_rpc == MAX_RPC_SERIES)
            return; /* bounded: methods x codes stay far below this */
        s = &m->rpc[m->n_rpc++];
        memset(s, 0, sizeof(*s));
        snprintf(s->service, sizeof(s->service), "%s", service);
        snprintf(s->method, sizeof(s->method), "%s", method);
        s->code = (int)code;
    }
    s->count++;
    s->sum += seconds;
    for (size_t b = 0; b < NB; b++)
        if (seconds <= bounds[b])
            s->buckets[b]++;
}

/* grpc's canonical code names, as label values */
static const char *code_name(int code)
{
    static const char *const names[] = {
        "OK", "CANCELLED", "UNKNOWN", "INVALID_ARGUMENT", "DEADLINE_EXCEEDED", "NOT_FOUND",
        "ALREADY_EXISTS", "PERMISSION_DENIED", "RESOURCE_EXHAUSTED", "FAILED_PRECONDITION",
        "ABORTED", "OUT_OF_RANGE", "UNIMPLEMENTED", "INTERNAL", "UNAVAILABLE", "DATA_LOSS",
        "UNAUTHENTICATED"};
    return code >= 0 && code < (int)(sizeof(names) / sizeof(names[0])) ? names[code] : "UNKNOWN";
}

/* ---------------------------------------------------------------- page */

/* A label value with \, " and newline escaped (the format's rule). */
static void esc(FILE *f, const char *s)
{
    for (; s && *s; s++) {
        if (*s == '\\' || *s == '"')
            fputc('\\', f), fputc(*s, f);
        else if (*s == '\n')
            fputs("\\n", f);
        else
            fputc(*s, f);
    }
}

static void family(FILE *f, const char *name, const char *type, const char *help)
{
    fprintf(f, "# HELP %s %s\n# TYPE %s %s\n", name, help, name, type);
}

static void num(FILE *f, double v)
{
    if (isnan(v))
        fputs("NaN", f);
    else if (isinf(v))
        fputs(v > 0 ? "+Inf" : "-Inf", f);
    else
        fprintf(f, "%.17g", v);
}

/* name{job="..",name=".."} value */
static void job_sample(FILE *f, const char *name, const px_job_t *j, double v)
{
    fprintf(f, "%s{job=\"", name);
    esc(f, j->id);
    fputs("\",name=\"", f);
    esc(f, j->spec && j->spec->name ? j->spec->name : "");
    fputs("\"} ", f);
    num(f, v);
    fputc('\n', f);
}

static int running(const px_job_t *j)
{
    return j->state == PARALLAX__V1__JOB_STATE__JOB_RUNNING;
}

static void render_jobs(px_daemon_t *d, FILE *f)
{
    static const struct { int state; const char *name; } states[] = {
        {PARALLAX__V1__JOB_STATE__JOB_PENDING, "pending"},
        {PARALLAX__V1__JOB_STATE__JOB_STARTING, "starting"},
        {PARALLAX__V1__JOB_STATE__JOB_RUNNING, "running"},
        {PARALLAX__V1__JOB_STATE__JOB_COMPLETED, "completed"},
        {PARALLAX__V1__JOB_STATE__JOB_FAILED, "failed"},
        {PARALLAX__V1__JOB_STATE__JOB_CANCELLED, "cancelled"}};
    uint64_t restarts = 0;

    family(f, "parallax_jobs", "gauge", "Jobs this node coordinates, by state.");
    for (size_t s = 0; s < sizeof(states) / sizeof(states[0]); s++) {
        int n = 0;
        for (const px_job_t *j = d->jobs; j; j = j->next)
            n += (int)j->state == states[s].state;
        fprintf(f, "parallax_jobs{state=\"%s\"} %d\n", states[s].name, n);
    }
    for (const px_job_t *j = d->jobs; j; j = j->next)
        restarts += j->spec && j->spec->restart > 0;
    family(f, "parallax_job_restarts_total", "counter",
           "Jobs this node started again after a rank or node failure (--max-restarts).");
    fprintf(f, "parallax_job_restarts_total %llu\n", (unsigned long long)restarts);

    static const struct { const char *name, *help; } fam[] = {
        {"parallax_job_step", "Last finished step of a running job."},
        {"parallax_job_steps", "Steps a running job trains for."},
        {"parallax_job_loss", "Training loss of the last step (mean over the global batch)."},
        {"parallax_job_val_loss", "Last validation loss of a running job (when it has one)."},
        {"parallax_job_grad_norm", "Global gradient norm of the last step, before clipping."},
        {"parallax_job_tokens_per_second", "Training throughput of the last step."},
        {"parallax_job_step_seconds", "Wall time of the last step, seconds."},
        {"parallax_job_ranks", "Ranks (processes) of a running job."},
    };
    for (size_t k = 0; k < sizeof(fam) / sizeof(fam[0]); k++) {
        family(f, fam[k].name, "gauge", fam[k].help);
        for (const px_job_t *j = d->jobs; j; j = j->next) {
            if (!running(j))
                continue;
            const Parallax__V1__JobSpec *sp = j->spec;
            double tokens = sp && sp->model ? (double)sp->batch * sp->model->seq : 0;
            double v = 0;
            switch (k) {
            case 0: v = j->step; break;
            case 1: v = sp ? sp->steps : 0; break;
            case 2: v = j->loss; break;
            case 3:
                if (!j->val_step)
                    continue;
                v = j->val_loss;
                break;
            case 4: v = j->grad_norm; break;
            case 5: v = j->tokens_per_second; break;
            case 6:
                if (!(j->tokens_per_second > 0) || !(tokens > 0))
                    continue;
                v = tokens / j->tokens_per_second;
                break;
            case 7: v = j->world; break;
            }
            job_sample(f, fam[k].name, j, v);
        }
    }
}

static void device_sample(FILE *f, const char *node, const px_device_t *dev)
{
    fputs("parallax_device_busy{node=\"", f);
    esc(f, node);
    fputs("\",device=\"", f);
    esc(f, dev->name);
    fputs("\",job=\"", f);
    esc(f, dev->job_id);
    fprintf(f, "\"} %d\n", dev->job_id[0] ? 1 : 0);
}

static void render_nodes(px_daemon_t *d, FILE *f)
{
    int64_t now = px_time_mono_ms();

    family(f, "parallax_device_busy", "gauge",
           "1 when the device is held by the job labelled, 0 when free (this node and its "
           "peers as last heard).");
    for (int i = 0; i < d->n_devices; i++)
        device_sample(f, d->cfg.name, &d->devices[i]);
    for (int p = 0; p < d->n_peers; p++)
        for (int i = 0; d->peers[p].name[0] && i < d->peers[p].n_devices; i++)
            device_sample(f, d->peers[p].name, &d->peers[p].devices[i]);
    family(f, "parallax_peer_up", "gauge", "1 while the peer daemon answers heartbeats.");
    for (int p = 0; p < d->n_peers; p++) {
        fputs("parallax_peer_up{peer=\"", f);
        esc(f, d->peers[p].name[0] ? d->peers[p].name : d->peers[p].peer_addr);
        fprintf(f, "\"} %d\n", d->peers[p].alive ? 1 : 0);
    }
    family(f, "parallax_peer_heartbeat_age_seconds", "gauge",
           "Seconds since the peer daemon was last heard (peers heard at least once).");
    for (int p = 0; p < d->n_peers; p++) {
        if (!d->peers[p].last_seen_mono_ms)
            continue;
        fputs("parallax_peer_heartbeat_age_seconds{peer=\"", f);
        esc(f, d->peers[p].name[0] ? d->peers[p].name : d->peers[p].peer_addr);
        fputs("\"} ", f);
        num(f, (double)(now - d->peers[p].last_seen_mono_ms) / 1000.0);
        fputc('\n', f);
    }
}

/* One sample of GPU `g` of this node, labelled node and device. */
static void gpu_sample(FILE *f, const char *metric, const char *node, const px_gpu_telem_t *g,
                       double v)
{
    fprintf(f, "%s{node=\"", metric);
    esc(f, node);
    fputs("\",device=\"", f);
    esc(f, g->device);
    fputs("\"} ", f);
    num(f, v);
    fputc('\n', f);
}

/* This node's GPUs as NVML last showed them (gputelem.c), named after
 * DCGM-exporter's fields in base units (bytes, ratio, watts); each node
 * exports its own GPUs only, as DCGM-exporter runs on each node. A figure
 * the GPU does not report is left out. */
static void render_gpus(px_daemon_t *d, FILE *f)
{
    static const struct {
        const char *name, *help;
    } fam[] = {
        {"parallax_gpu_memory_used_bytes", "GPU memory in use, bytes (DCGM_FI_DEV_FB_USED, NVML)."},
        {"parallax_gpu_memory_total_bytes", "GPU memory, bytes (NVML nvmlDeviceGetMemoryInfo)."},
        {"parallax_gpu_utilization_ratio",
         "Fraction of NVML's last sample period a kernel ran on the GPU (DCGM_FI_DEV_GPU_UTIL / 100)."},
        {"parallax_gpu_power_watts", "GPU power draw, watts (DCGM_FI_DEV_POWER_USAGE)."},
        {"parallax_gpu_temperature_celsius", "GPU temperature, degrees C (DCGM_FI_DEV_GPU_TEMP)."},
        {"parallax_gpu_processes", "Processes with a compute context on the GPU."},
        {"parallax_gpu_foreign_processes",
         "Processes on the GPU that are not this node's ranks; while any is there no rank is "
         "placed on the GPU."},
    };
    for (size_t k = 0; k < sizeof(fam) / sizeof(fam[0]); k++) {
        family(f, fam[k].name, "gauge", fam[k].help);
        for (int i = 0; i < d->n_gpus; i++) {
            const px_gpu_telem_t *g = &d->gpus[i];
            const double v[] = {(double)g->mem_used, (double)g->mem_total, g->utilization,
                                g->power_w, g->temperature_c, g->n_pids, g->n_foreign};
            if (g->sampled_ms > 0 && v[k] >= 0)
                gpu_sample(f, fam[k].name, d->cfg.name, g, v[k]);
        }
    }
}

static void render_memory(px_daemon_t *d, FILE *f)
{
    family(f, "parallax_rank_memory_bytes", "gauge",
           "Bytes a rank of a running job holds on its device by category (its last report; "
           "kind current or peak).");
    for (const px_job_t *j = d->jobs; j; j = j->next) {
        Parallax__V1__GetMemoryResponse resp = PARALLAX__V1__GET_MEMORY_RESPONSE__INIT;
        if (!running(j) || px_memstore_get(d->store, j->id, &resp) != PX_OK)
            continue;
        for (size_t r = 0; r < resp.n_ranks; r++)
            for (size_t c = 0; c < resp.ranks[r]->n_categories; c++) {
                const Parallax__V1__MemoryCategory *mc = resp.ranks[r]->categories[c];
                unsigned rk = resp.ranks[r]->rank;
                const px_job_rank_t *jr = j->ranks && (int)rk < j->world ? &j->ranks[rk] : NULL;
                for (int kind = 0; kind < 2; kind++) {
                    fputs("parallax_rank_memory_bytes{job=\"", f);
                    esc(f, j->id);
                    fprintf(f, "\",rank=\"%u\",node=\"", rk);
                    esc(f, jr ? jr->node : "");
                    fputs("\",device=\"", f);
                    esc(f, jr ? jr->device : "");
                    fputs("\",category=\"", f);
                    esc(f, mc->name);
                    fprintf(f, "\",kind=\"%s\"} %llu\n", kind ? "peak" : "current",
                            (unsigned long long)(kind ? mc->peak_bytes : mc->current_bytes));
                }
            }
        px_memstore_free(&resp);
    }
}

static void rpc_labels(FILE *f, const rpc_series_t *s)
{
    fputs("service=\"", f);
    esc(f, s->service);
    fputs("\",method=\"", f);
    esc(f, s->method);
    fprintf(f, "\",code=\"%s\"", code_name(s->code));
}

static void render_rpc(px_metrics_t *m, FILE *f)
{
    family(f, "parallax_rpc_requests_total", "counter",
           "gRPC calls this daemon answered (Control and Peer), by method and status code.");
    for (int i = 0; i < m->n_rpc; i++) {
        fputs("parallax_rpc_requests_total{", f);
        rpc_labels(f, &m->rpc[i]);
        fprintf(f, "} %llu\n", (unsigned long long)m->rpc[i].count);
    }
    family(f, "parallax_rpc_duration_seconds", "histogram",
           "Seconds from accepting a gRPC call to sending its status (streams: their life).");
    for (int i = 0; i < m->n_rpc; i++) {
        const rpc_series_t *s = &m->rpc[i];
        for (size_t b = 0; b <= NB; b++) {
            fputs("parallax_rpc_duration_seconds_bucket{", f);
            rpc_labels(f, s);
            fputs(",le=\"", f);
            if (b < NB)
                fprintf(f, "%g", bounds[b]);
            else
                fputs("+Inf", f);
            fprintf(f, "\"} %llu\n", (unsigned long long)(b < NB ? s->buckets[b] : s->count));
        }
        fputs("parallax_rpc_duration_seconds_sum{", f);
        rpc_labels(f, s);
        fputs("} ", f);
        num(f, s->sum);
        fputs("\nparallax_rpc_duration_seconds_count{", f);
        rpc_labels(f, s);
        fprintf(f, "} %llu\n", (unsigned long long)s->count);
    }
}

px_status_t px_metrics_render(px_daemon_t *d, char **text_p, size_t *len_p)
{
    char *buf = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&buf, &len);

    if (!f)
        return PX_ERR_NO_MEMORY;
    family(f, "parallax_build_info", "gauge", "This daemon's node name and version.");
    fputs("parallax_build_info{node=\"", f);
    esc(f, d->cfg.name);
    fprintf(f, "\",version=\"%s\"} 1\n", PX_VERSION);
    render_jobs(d, f);
    render_nodes(d, f);
    render_gpus(d, f);
    render_memory(d, f);
    if (d->metrics)
        render_rpc(d->metrics, f);
    if (fclose(f)) {
        free(buf);
        return PX_ERR_NO_MEMORY;
    }
    *text_p = buf;
    *len_p = len;
    return PX_OK;
}

/* ---------------------------------------------------------------- HTTP */

#ifdef PX_HAVE_MICROHTTPD
static enum MHD_Result on_request(void *cls, struct MHD_Connection *conn, const char *url,
                                  const char *method, const char *version,
                                  const char *upload_data, size_t *upload_size, void **con_cls)
{
    px_metrics_t *m = cls;
    struct MHD_Response *resp;
    enum MHD_Result ret;
    unsigned status = MHD_HTTP_OK;
    char *body = NULL;
    size_t len = 0;
    (void)version, (void)upload_data, (void)con_cls;

    if (*upload_size) { /* a body: nothing here takes one */
        *upload_size = 0;
        return MHD_YES;
    }
    if (strcmp(method, "GET") && strcmp(method, "HEAD")) {
        static const char msg[] = "only GET /metrics\n";
        resp = MHD_create_response_from_buffer(sizeof(msg) - 1, (void *)msg,
                                               MHD_RESPMEM_PERSISTENT);
        status = MHD_HTTP_METHOD_NOT_ALLOWED;
        MHD_add_response_header(resp, "Allow", "GET, HEAD");
    } else if (strcmp(url, "/metrics")) {
        static const char msg[] = "parallaxd: the metrics are at /metrics\n";
        resp = MHD_create_response_from_buffer(sizeof(msg) - 1, (void *)msg,
                                               MHD_RESPMEM_PERSISTENT);
        status = MHD_HTTP_NOT_FOUND;
    } else if (px_metrics_render(m->d, &body, &len) != PX_OK) {
        static const char msg[] = "out of memory\n";
        resp = MHD_create_response_from_buffer(sizeof(msg) - 1, (void *)msg,
                                               MHD_RESPMEM_PERSISTENT);
        status = MHD_HTTP_INTERNAL_SERVER_ERROR;
    } else {
        resp = MHD_create_response_from_buffer(len, body, MHD_RESPMEM_MUST_FREE);
        MHD_add_response_header(resp, "Content-Type", "text/plain; version=0.0.4; charset=utf-8");
    }
    if (!resp)
        return MHD_NO;
    ret = MHD_queue_response(conn, status, resp);
    MHD_destroy_response(resp);
    return ret;
}

static void run_mhd(px_metrics_t *m)
{
    if (m->mhd)
        MHD_run(m->mhd);
}

static void on_poll(uv_poll_t *h, int status, int events)
{
    (void)status, (void)events;
    run_mhd(h->data);
}

static void on_timer(uv_timer_t *t)
{
    run_mhd(t->data);
}

/* "host:port" (an IPv4 host or "localhost"), "[v6]:port" (an IPv6 host in
 * brackets, as in URLs: RFC 3986 section 3.2.2), ":port" or "port"
 * (loopback, 127.0.0.1) into *sa; *v6_p = 1 for an IPv6 address. The
 * numeric forms are read by inet_pton; no name is resolved. */
static px_status_t parse_addr(const char *v, struct sockaddr_storage *sa, int *v6_p)
{
    char host[256] = "127.0.0.1";
    const char *colon = strrchr(v, ':');
    const char *port_s = colon ? colon + 1 : v;
    char *end;
    long port = strtol(port_s, &end, 10);
    int v6 = 0;

    if (colon && colon > v) {
        const char *h = v;
        size_t hn = (size_t)(colon - v);
        if (v[0] == '[') { /* [v6]:port: the host ends with the bracket */
            if (hn < 3 || v[hn - 1] != ']')
                goto bad;
            h = v + 1;
            hn -= 2;
            v6 = 1;
        } else if (memchr(v, ':', hn)) {
            goto bad; /* an IPv6 host without brackets: which colon is the port's? */
        }
        if (hn >= sizeof(host))
            goto bad;
        snprintf(host, sizeof(host), "%.*s", (int)hn, h);
        if (!v6 && !strcmp(host, "localhost"))
            snprintf(host, sizeof(host), "127.0.0.1");
    }
    if (!*port_s || *end || port < 1 || port > 65535)
        goto bad;
    memset(sa, 0, sizeof(*sa));
    if (v6) {
        struct sockaddr_in6 *s6 = (struct sockaddr_in6 *)sa;
        s6->sin6_family = AF_INET6;
        s6->sin6_port = htons((uint16_t)port);
        if (inet_pton(AF_INET6, host, &s6->sin6_addr) != 1)
            goto bad;
    } else {
        struct sockaddr_in *s4 = (struct sockaddr_in *)sa;
        s4->sin_family = AF_INET;
        s4->sin_port = htons((uint16_t)port);
        if (inet_pton(AF_INET, host, &s4->sin_addr) != 1)
            goto bad;
    }
    *v6_p = v6;
    return PX_OK;
bad:
    px_error("metrics-listen '%s': expected host:port with an IPv4 host, [IPv6 host]:port, "
             ":port or port", v);
    return PX_ERR_INVALID_ARGUMENT;
}

/* The address as a URL's authority: "1.2.3.4:port" or "[v6]:port". */
static void format_addr(const struct sockaddr_storage *sa, char *out, size_t len)
{
    char host[INET6_ADDRSTRLEN] = "?";
    if (sa->ss_family == AF_INET6) {
        const struct sockaddr_in6 *s6 = (const struct sockaddr_in6 *)sa;
        inet_ntop(AF_INET6, &s6->sin6_addr, host, sizeof(host));
        snprintf(out, len, "[%s]:%d", host, ntohs(s6->sin6_port));
    } else {
        const struct sockaddr_in *s4 = (const struct sockaddr_in *)sa;
        inet_ntop(AF_INET, &s4->sin_addr, host, sizeof(host));
        snprintf(out, len, "%s:%d", host, ntohs(s4->sin_port));
    }
}
#endif

px_status_t px_metrics_start(px_daemon_t *d)
{
    const char *addr = d->cfg.metrics_listen;

    if (!addr || !*addr)
        return PX_OK;
#ifndef PX_HAVE_MICROHTTPD
    px_error("metrics-listen %s: this parallaxd was built without libmicrohttpd "
             "(apt-get install libmicrohttpd-dev, then rebuild)", addr);
    return PX_ERR_IO;
#else
    struct sockaddr_storage sa;
    char where[INET6_ADDRSTRLEN + 16];
    px_metrics_t *m;
    const union MHD_DaemonInfo *info;
    int v6 = 0;

    PX_CHECK(parse_addr(addr, &sa, &v6));
    m = calloc(1, sizeof(*m));
    if (!m)
        return PX_ERR_NO_MEMORY;
    m->d = d;
    /* an IPv6 address needs libmicrohttpd's IPv6 socket (MHD_USE_IPv6) */
    m->mhd = MHD_start_daemon(MHD_USE_EPOLL | MHD_USE_ERROR_LOG | (v6 ? MHD_USE_IPv6 : 0), 0,
                              NULL, NULL, on_request, m,
                              MHD_OPTION_SOCK_ADDR, (struct sockaddr *)&sa,
                              MHD_OPTION_CONNECTION_TIMEOUT, (unsigned)10,
                              MHD_OPTION_CONNECTION_LIMIT, (unsigned)64, MHD_OPTION_END);
    if (!m->mhd) {
        px_error("metrics-listen %s: cannot listen (in use?): %s", addr, strerror(errno));
        free(m);
        return PX_ERR_IO;
    }
    info = MHD_get_daemon_info(m->mhd, MHD_DAEMON_INFO_EPOLL_FD);
    if (!info || uv_poll_init(d->loop, &m->poll, info->epoll_fd) != 0) {
        px_error("metrics-listen %s: cannot watch libmicrohttpd's epoll fd", addr);
        MHD_stop_daemon(m->mhd);
        free(m);
        return PX_ERR_IO;
    }
    m->poll.data = m;
    uv_poll_start(&m->poll, UV_READABLE, on_poll);
    uv_timer_init(d->loop, &m->timer);
    m->timer.data = m;
    uv_timer_start(&m->timer, on_timer, 250, 250);
    d->metrics = m;
    px_rpc_server_set_observer(d->control_srv, observe, m);
    px_rpc_server_set_observer(d->peer_srv, observe, m);
    format_addr(&sa, where, sizeof(where));
    px_info("metrics: Prometheus text format at http://%s/metrics", where);
    return PX_OK;
#endif
}

#ifdef PX_HAVE_MICROHTTPD
static void on_closed(uv_handle_t *h)
{
    px_metrics_t *m = h->data;
    if (--m->open_handles == 0) /* libuv finishes closes in no promised order */
        free(m);
}
#endif

void px_metrics_stop(px_daemon_t *d)
{
    px_metrics_t *m = d ? d->metrics : NULL;
    if (!m)
        return;
    d->metrics = NULL;
    if (d->control_srv)
        px_rpc_server_set_observer(d->control_srv, NULL, NULL);
    if (d->peer_srv)
        px_rpc_server_set_observer(d->peer_srv, NULL, NULL);
#ifdef PX_HAVE_MICROHTTPD
    uv_poll_stop(&m->poll);
    uv_timer_stop(&m->timer);
    MHD_stop_daemon(m->mhd); /* closes its sockets and epoll fd */
    m->mhd = NULL;
    m->open_handles = 2;
    uv_close((uv_handle_t *)&m->poll, on_closed);
    uv_close((uv_handle_t *)&m->timer, on_closed);
#else
    free(m);
#endif
}
