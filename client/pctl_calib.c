/* pctl_calib.c: the cluster a daemon reports, as a planner/cluster.h
 * description: its topology (`pctl nodes`: alive nodes, their free
 * devices) for `pctl submit --layout auto`, and with measured rates for
 * `pctl plan --cluster local`:
 *   links: a `pctl bench` all-reduce job on two ranks of one node (the
 *     intra-node link) and on every free device (the ring crosses nodes:
 *     the inter-node link), 4 KiB to 4 MiB: the alpha-beta model of the
 *     algorithm px_coll.c runs at each size fitted to the rows by least
 *     squares (relative error), efficiency 1 (a measured figure);
 *   the host (cpu devices): its cores (the affinity mask, capped by the
 *     cgroup's CPU quota) and how many of the cluster's nodes share it
 *     (alive nodes whose Control address has one host part); a rank runs
 *     one BLAS thread (the supervisor's OPENBLAS_NUM_THREADS=1). The model
 *     divides the cores among the ranks computing at once, so every other
 *     figure here is one rank's alone: a bench's fit is divided by the
 *     slowdown its own ranks had;
 *   kernels: two short training jobs of the planned model itself, data
 *     parallel over every free device, with 1 and 4 sequences a rank, each
 *     run CALIB_REPEATS times: the median of their median step times fixes
 *     the two figures of the device the model cannot know, the GEMMs'
 *     achieved rate (kept as the device's rate, efficiency 1) and the
 *     step's fixed cost (the engine's bookkeeping; a kernel's own fixed
 *     cost stays the preset's, as two dp probes cannot tell it from the
 *     step's; the step time is linear in 1 / rate and in the fixed cost:
 *     steptime.h is probed at three points and the 2 x 2 system solved).
 * Every job is waited for with a deadline (CALIB_JOB_S); progress polls
 * GetJob every 200 ms, as `pctl bench` does. One thread. */
#include <math.h>
#include <sched.h> /* sched_getaffinity, CPU_COUNT (_GNU_SOURCE: meson.build) */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "cluster.h"
#include "devsel.h"
#include "jobcfg.h"
#include "jobplan.h"
#include "jobspec.h"
#include "pctl.h"
#include "steptime.h"

#define M_NODES "/parallax.v1.Control/ListNodes"
#define M_SUBMIT "/parallax.v1.Control/SubmitJob"
#define M_GET "/parallax.v1.Control/GetJob"
#define M_METRICS "/parallax.v1.Control/GetMetrics"
#define POLL_MS 200
#define CALIB_JOB_S 300.0 /* the most one calibration job may take */
#define CALIB_STEPS 10    /* training steps of a kernel probe; the first is not timed */
#define CALIB_REPEATS 3   /* runs of each kernel probe: the median of their medians */

int pctl_cluster_topology(pctl_ctx_t *ctx, const char *cmd, const char *devices, int *nodes_p,
                          int *per_node_p, int *dev_p, double *mem_p)
{
    Parallax__V1__ListNodesRequest req = PARALLAX__V1__LIST_NODES_REQUEST__INIT;
    Parallax__V1__ListNodesResponse *resp = NULL;
    px_devsel_t sel;
    char err[512];
    int nodes = 0, per_node = 0, dev = -1;
    double mem = 0;

    if (px_devsel_parse(devices ? devices : "", &sel, err, sizeof(err)) != PX_OK)
        return pctl_usage_error(cmd, "invalid value for --devices: %s", err);
    if (pctl_call(ctx, cmd, M_NODES, &req.base, &parallax__v1__list_nodes_response__descriptor,
                  (ProtobufCMessage **)&resp))
        return PCTL_EXIT_FAIL;
    for (size_t i = 0; i < resp->n_nodes; i++) {
        const Parallax__V1__NodeInfo *n = resp->nodes[i];
        int nfree = 0;
        if (!n->alive)
            continue;
        for (size_t k = 0; k < n->n_devices; k++) {
            const Parallax__V1__Device *d = n->devices[k];
            if ((d->job_id && *d->job_id) || !px_devsel_match(&sel, d->name))
                continue;
            nfree++;
            if (dev < 0)
                dev = px_plan_dev_parse(d->name);
            if (d->memory_bytes && (mem == 0 || d->memory_bytes < mem))
                mem = (double)d->memory_bytes;
        }
        if (nfree) {
            nodes++;
            per_node = per_node ? (nfree < per_node ? nfree : per_node) : nfree;
        }
    }
    protobuf_c_message_free_unpacked(&resp->base, NULL);
    if (!nodes) {
        fprintf(stderr, "pctl: %s: the cluster has no free devices%s\n", cmd,
                devices ? " that --devices admits" : "");
        return PCTL_EXIT_FAIL;
    }
    *nodes_p = nodes;
    *per_node_p = per_node;
    *dev_p = dev < 0 ? PX_PLAN_DEV_CPU : dev;
    *mem_p = mem;
    return PCTL_EXIT_OK;
}

/* The CPUs this process's ranks may share: its affinity mask (what cpusets
 * and taskset leave), capped by the cgroup v2 CPU quota (cpu.max: "QUOTA
 * PERIOD", "max" for none), which a container's --cpus sets. */
static double host_cores(void)
{
    cpu_set_t set;
    double cores = 1;
    if (sched_getaffinity(0, sizeof(set), &set) == 0)
        cores = CPU_COUNT(&set);
    FILE *f = fopen("/sys/fs/cgroup/cpu.max", "r");
    if (f) {
        char quota[32];
        double period;
        if (fscanf(f, "%31s %lf", quota, &period) == 2 && strcmp(quota, "max") && period > 0) {
            double q = strtod(quota, NULL) / period;
            if (q > 0 && q < cores)
                cores = q;
        }
        fclose(f);
    }
    return cores;
}

/* The most alive nodes whose Control address has one host part (the
 * daemons of a local test cluster share their host); 1 when none do. */
static int nodes_per_host(pctl_ctx_t *ctx)
{
    Parallax__V1__ListNodesRequest req = PARALLAX__V1__LIST_NODES_REQUEST__INIT;
    Parallax__V1__ListNodesResponse *resp = NULL;
    int best = 1;
    if (pctl_call(ctx, "plan", M_NODES, &req.base, &parallax__v1__list_nodes_response__descriptor,
                  (ProtobufCMessage **)&resp))
        return 1;
    for (size_t i = 0; i < resp->n_nodes; i++) {
        const char *a = resp->nodes[i]->control_addr ? resp->nodes[i]->control_addr : "";
        const char *colon = strrchr(a, ':');
        size_t len = colon ? (size_t)(colon - a) : strlen(a);
        int k = 0;
        if (!resp->nodes[i]->alive)
            continue;
        for (size_t j = 0; j < resp->n_nodes; j++) {
            const char *b = resp->nodes[j]->control_addr ? resp->nodes[j]->control_addr : "";
            const char *cb = strrchr(b, ':');
            size_t lb = cb ? (size_t)(cb - b) : strlen(b);
            k += resp->nodes[j]->alive && lb == len && !strncmp(a, b, len);
        }
        best = k > best ? k : best;
    }
    protobuf_c_message_free_unpacked(&resp->base, NULL);
    return best;
}

/* steptime.h's slowdown of `k` ranks computing at once on host h. */
static double host_slowdown(const px_host_spec_t *h, double k)
{
    return h->cores > 0 ? fmax(1, k * h->threads / h->cores) : 1;
}

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec / 1e9;
}

/* Waits (deadline CALIB_JOB_S) for job `id` to end; *job_p gets it (caller
 * frees). PCTL_EXIT_OK only when it COMPLETED. */
static int wait_job(pctl_ctx_t *ctx, const char *id, Parallax__V1__Job **job_p)
{
    const double end = now_s() + CALIB_JOB_S;
    Parallax__V1__Job *job = NULL;
    for (;;) {
        Parallax__V1__GetJobRequest get = PARALLAX__V1__GET_JOB_REQUEST__INIT;
        struct timespec ts = {0, POLL_MS * 1000000L};
        if (job)
            protobuf_c_message_free_unpacked(&job->base, NULL);
        job = NULL;
        get.job_id = (char *)id;
        if (pctl_call(ctx, "plan", M_GET, &get.base, &parallax__v1__job__descriptor,
                      (ProtobufCMessage **)&job))
            return PCTL_EXIT_FAIL;
        if (pctl_state_is_final(job->state))
            break;
        if (now_s() > end) {
            fprintf(stderr, "pctl: plan: --cluster local: calibration job %s did not end within "
                    "%.0f s\n", id, CALIB_JOB_S);
            protobuf_c_message_free_unpacked(&job->base, NULL);
            return PCTL_EXIT_FAIL;
        }
        nanosleep(&ts, NULL);
    }
    if (job->state != PARALLAX__V1__JOB_STATE__JOB_COMPLETED) {
        fprintf(stderr, "pctl: plan: --cluster local: calibration job %s %s%s%s\n", id,
                pctl_state_name(job->state), job->reason && *job->reason ? ": " : "",
                job->reason ? job->reason : "");
        protobuf_c_message_free_unpacked(&job->base, NULL);
        return PCTL_EXIT_FAIL;
    }
    *job_p = job;
    return PCTL_EXIT_OK;
}

/* A `pctl bench` all-reduce on `ranks` ranks from 4 KiB to 4 MiB into the
 * link *k (alpha, beta fitted; efficiency 1). `slowdown`: how much slower
 * each rank ran than alone, its host's cores shared by the bench's ranks
 * (every rank copies and reduces at once; steptime.c applies it again to
 * a job's collectives): the fit is divided by it, the link alone. */
static int bench_link(pctl_ctx_t *ctx, int ranks, const char *devices, double slowdown,
                      px_link_spec_t *k)
{
    Parallax__V1__SubmitJobRequest req = PARALLAX__V1__SUBMIT_JOB_REQUEST__INIT;
    Parallax__V1__JobSpec spec = PARALLAX__V1__JOB_SPEC__INIT;
    Parallax__V1__BenchSpec bench = PARALLAX__V1__BENCH_SPEC__INIT;
    Parallax__V1__SubmitJobResponse *resp = NULL;
    Parallax__V1__Job *job = NULL;
    int rc = PCTL_EXIT_FAIL;

    bench.op = (char *)"all_reduce";
    bench.min_bytes = 4096;
    bench.max_bytes = 4u << 20;
    bench.step_factor = 4;
    bench.dtype = (char *)"float";
    bench.redop = (char *)"sum";
    bench.iters = 20;
    spec.name = (char *)"";
    spec.kind = (char *)"bench";
    spec.bench = &bench;
    spec.dp = (uint32_t)ranks;
    spec.batch = (uint32_t)ranks;
    spec.steps = 1;
    spec.devices = (char *)(devices ? devices : "");
    req.spec = &spec;
    if (pctl_call(ctx, "plan", M_SUBMIT, &req.base, &parallax__v1__submit_job_response__descriptor,
                  (ProtobufCMessage **)&resp))
        return PCTL_EXIT_FAIL;
    if (wait_job(ctx, resp->job_id, &job) != PCTL_EXIT_OK)
        goto out;
    if (job->n_bench_rows < 2) {
        fprintf(stderr, "pctl: plan: --cluster local: bench job %s gave %zu rows\n",
                resp->job_id, job->n_bench_rows);
        goto out;
    }
    /* t = a alpha + b / beta per row, a and b as px_coll.c's algorithm for
     * the size moves them (steptime.c cost_allreduce): least squares in
     * (alpha, 1 / beta), each row weighted by 1 / t (relative error) */
    double saa = 0, sab = 0, sbb = 0, sat = 0, sbt = 0;
    const double n = ranks, lg = ceil(log2(n));
    for (size_t i = 0; i < job->n_bench_rows; i++) {
        const Parallax__V1__BenchRow *r = job->bench_rows[i];
        double S = (double)r->size, t = r->time_us * 1e-6, a, b;
        if (t <= 0)
            continue;
        if (S <= 32768) {
            a = lg;
            b = lg * S;
        } else if (S <= 1048576 && ranks > 2) {
            a = 2 * lg;
            b = 2 * (n - 1) / n * S;
        } else {
            a = 2 * (n - 1);
            b = 2 * (n - 1) / n * S;
        }
        a /= t, b /= t;
        saa += a * a, sab += a * b, sbb += b * b, sat += a, sbt += b;
    }
    double det = saa * sbb - sab * sab, alpha = 0, inv_beta = 0;
    if (det > 0) {
        alpha = (sat * sbb - sbt * sab) / det;
        inv_beta = (saa * sbt - sab * sat) / det;
    }
    const Parallax__V1__BenchRow *hi = job->bench_rows[job->n_bench_rows - 1];
    if (!(inv_beta > 0)) /* no fit: the largest row's bus bandwidth alone */
        inv_beta = 1 / (hi->busbw * 1e9);
    k->bw = slowdown / inv_beta;
    k->latency = fmax(1e-7, alpha / slowdown);
    k->efficiency = 1;
    rc = PCTL_EXIT_OK;
out:
    if (job)
        protobuf_c_message_free_unpacked(&job->base, NULL);
    protobuf_c_message_free_unpacked(&resp->base, NULL);
    return rc;
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

/* Runs `cfg` as a training job and returns its median step time after the
 * first step (batch x seq / the step's tokens/s). */
static int probe_step(pctl_ctx_t *ctx, const px_job_config_t *cfg, const char *devices,
                      double *step_p)
{
    Parallax__V1__SubmitJobRequest req = PARALLAX__V1__SUBMIT_JOB_REQUEST__INIT;
    Parallax__V1__SubmitJobResponse *resp = NULL;
    Parallax__V1__GetMetricsRequest mreq = PARALLAX__V1__GET_METRICS_REQUEST__INIT;
    Parallax__V1__GetMetricsResponse *m = NULL;
    Parallax__V1__Job *job = NULL;
    px_jobspec_msg_t msg;
    double t[CALIB_STEPS];
    int n = 0, rc = PCTL_EXIT_FAIL;

    px_jobspec_from_config(cfg, &msg);
    msg.spec.name = (char *)"";
    msg.spec.devices = (char *)(devices ? devices : "");
    req.spec = &msg.spec;
    if (pctl_call(ctx, "plan", M_SUBMIT, &req.base, &parallax__v1__submit_job_response__descriptor,
                  (ProtobufCMessage **)&resp))
        return PCTL_EXIT_FAIL;
    if (wait_job(ctx, resp->job_id, &job) != PCTL_EXIT_OK)
        goto out;
    mreq.job_id = resp->job_id;
    if (pctl_call(ctx, "plan", M_METRICS, &mreq.base,
                  &parallax__v1__get_metrics_response__descriptor, (ProtobufCMessage **)&m))
        goto out;
    for (size_t i = 0; i < m->n_steps && n < CALIB_STEPS; i++)
        if (m->steps[i]->step > 1 && m->steps[i]->tokens_per_second > 0)
            t[n++] = (double)cfg->batch * cfg->seq / m->steps[i]->tokens_per_second;
    if (!n) {
        fprintf(stderr, "pctl: plan: --cluster local: job %s reported no timed steps\n",
                resp->job_id);
        goto out;
    }
    qsort(t, (size_t)n, sizeof(double), cmp_double);
    *step_p = n % 2 ? t[n / 2] : 0.5 * (t[n / 2 - 1] + t[n / 2]);
    rc = PCTL_EXIT_OK;
out:
    if (m)
        protobuf_c_message_free_unpacked(&m->base, NULL);
    if (job)
        protobuf_c_message_free_unpacked(&job->base, NULL);
    protobuf_c_message_free_unpacked(&resp->base, NULL);
    return rc;
}

/* The model's step of `c` on `cl` with the device's efficiency `eff` and
 * fixed step cost `fixed` (seconds); < 0 on error. */
static double model_step(const px_job_config_t *c, px_cluster_t cl, int dev, double eff,
                         double fixed)
{
    px_step_time_t t;
    char err[256];
    cl.dev.efficiency = eff;
    cl.dev.step_s = fixed;
    if (px_step_predict(c, NULL, NULL, &cl, dev, &t, err, sizeof(err)) != PX_OK)
        return -1;
    return t.step_s;
}

int pctl_cluster_local(pctl_ctx_t *ctx, const px_job_config_t *cfg, const char *devices,
                       px_cluster_t *cl, int *dev_p)
{
    int nodes, per_node, dev, rc;
    double mem;
    px_job_config_t probe[2];
    double meas[2];
    static const int per_rank[2] = {1, 4};

    if ((rc = pctl_cluster_topology(ctx, "plan", devices, &nodes, &per_node, &dev, &mem)) !=
        PCTL_EXIT_OK)
        return rc;
    if (px_cluster_preset(dev == PX_PLAN_DEV_CUDA ? "h100-sxm" : "cpu", nodes, per_node, cl) !=
        PX_OK)
        return PCTL_EXIT_FAIL;
    if (mem > 0)
        cl->dev.mem_bytes = mem;
    snprintf(cl->name, sizeof(cl->name), "local:%dx%d", nodes, per_node);
    const int world = nodes * per_node;
    if (dev != PX_PLAN_DEV_CUDA) {
        /* cpu ranks compute on the host's cores, one BLAS thread each
         * (the supervisor's OPENBLAS_NUM_THREADS=1); pctl runs on the host
         * of the daemons it calibrates (--cluster local) */
        cl->host.cores = host_cores();
        cl->host.nodes = nodes_per_host(ctx);
        cl->host.threads = 1;
    }
    const double inter_ranks = fmin(world, per_node * cl->host.nodes);
    if (per_node >= 2 && (rc = bench_link(ctx, 2, devices, host_slowdown(&cl->host, 2),
                                          &cl->intra)) != PCTL_EXIT_OK)
        return rc;
    if (nodes >= 2 && (rc = bench_link(ctx, world, devices, host_slowdown(&cl->host, inter_ranks),
                                       &cl->inter)) != PCTL_EXIT_OK)
        return rc;
    if (nodes < 2)
        cl->inter = cl->intra;
    if (per_node < 2)
        cl->intra = cl->inter;

    /* the kernel probes: the model data parallel over every device */
    for (int i = 0; i < 2; i++) {
        px_job_config_t *c = &probe[i];
        char err[512];
        *c = *cfg;
        c->layout = (px_layout_t){.dp = world, .tp = 1, .pp = 1, .cp = 1, .ep = 1};
        c->zero = 0;
        c->sequence_parallel = 0;
        c->grad_accum = c->micro_batches = c->virtual_stages = 1;
        c->schedule = 1;
        c->stage_layers = NULL;
        c->batch = world * per_rank[i];
        c->steps = CALIB_STEPS + 1;
        c->eval_every = 0;
        c->val_path = NULL;
        c->checkpoint_every = 0;
        c->checkpoint_dir = c->resume_dir = c->export_safetensors = NULL;
        if (px_job_config_check(c, 0, err, sizeof(err)) != PX_OK)
            return pctl_usage_error("plan", "--cluster local: the calibration job: %s", err);
    }
    /* the two probes' runs alternate, so that a change of the machine's
     * load falls on both alike (the fit takes their difference) */
    double rep[2][CALIB_REPEATS];
    for (int r = 0; r < CALIB_REPEATS; r++)
        for (int i = 0; i < 2; i++)
            if ((rc = probe_step(ctx, &probe[i], devices, &rep[i][r])) != PCTL_EXIT_OK)
                return rc;
    for (int i = 0; i < 2; i++) {
        qsort(rep[i], CALIB_REPEATS, sizeof(double), cmp_double);
        meas[i] = rep[i][CALIB_REPEATS / 2];
    }
    /* step = A / eff + B + K fixed at each probe: A, B, K from the model */
    double A[2], B[2], K[2];
    for (int i = 0; i < 2; i++) {
        double t1 = model_step(&probe[i], *cl, dev, 1, 0);
        double t2 = model_step(&probe[i], *cl, dev, 0.5, 0);
        double t3 = model_step(&probe[i], *cl, dev, 1, 1e-6);
        if (t1 < 0 || t2 < 0 || t3 < 0)
            return PCTL_EXIT_FAIL;
        A[i] = t2 - t1;
        B[i] = 2 * t1 - t2;
        K[i] = (t3 - t1) / 1e-6;
    }
    double det = A[0] * K[1] - A[1] * K[0];
    double u = 1, L = 0;
    if (fabs(det) > 0) {
        u = ((meas[0] - B[0]) * K[1] - (meas[1] - B[1]) * K[0]) / det;
        L = (A[0] * (meas[1] - B[1]) - A[1] * (meas[0] - B[0])) / det;
    }
    if (!(u > 0) || L < 0) {
        /* outside the model's range (a negative fixed cost): no fixed
         * cost, u by least squares over both probes */
        L = 0;
        u = (A[0] * (meas[0] - B[0]) + A[1] * (meas[1] - B[1])) / (A[0] * A[0] + A[1] * A[1]);
        if (!(u > 0)) {
            /* the probes ran faster than the model's other costs (a model
             * so small that the noise of a loaded machine is the step):
             * the preset's GEMM rate kept, said */
            fprintf(stderr, "pctl: plan: --cluster local: probe steps %.4g s and %.4g s are "
                    "below the model's other costs (%.4g s and %.4g s); the GEMMs keep the "
                    "preset's rate\n", meas[0], meas[1], B[0], B[1]);
            u = 1;
        }
    }
    /* the GEMMs' achieved rate (one rank alone on its cores: the model
     * divides the host's cores itself), as the device's rate at efficiency
     * 1: a figure above the preset's peak is kept, not capped */
    cl->dev.gemm_fp32 /= u;
    cl->dev.gemm_bf16 /= u;
    cl->dev.efficiency = 1;
    cl->dev.step_s = L;
    *dev_p = dev;
    fprintf(stderr, "pctl: plan: --cluster local calibrated on %d node%s x %d %s devices: "
            "probe steps %.4g s (1 sequence a rank) and %.4g s (4), medians of %d runs; fp32 GEMM "
            "%.3g GFLOP/s a rank alone (%.3g of the %s preset's), fixed step cost %.3g us; "
            "intra-node %.3g GB/s, %.3g us; "
            "inter-node %.3g GB/s, %.3g us; host %g cores, %g node%s a host\n",
            nodes, nodes == 1 ? "" : "s", per_node, px_plan_dev_name(dev), meas[0], meas[1],
            CALIB_REPEATS, cl->dev.gemm_fp32 / 1e9, 1 / u,
            dev == PX_PLAN_DEV_CUDA ? "h100-sxm" : "cpu", L * 1e6,
            cl->intra.bw / 1e9, cl->intra.latency * 1e6, cl->inter.bw / 1e9,
            cl->inter.latency * 1e6, cl->host.cores, cl->host.nodes,
            cl->host.nodes == 1 ? "" : "s");
    return PCTL_EXIT_OK;
}

int pctl_cluster_save(const px_cluster_t *cl, const char *path)
{
    FILE *f = fopen(path, "w");
    if (!f) {
        fprintf(stderr, "pctl: plan: --save-cluster %s: cannot open for writing\n", path);
        return PCTL_EXIT_FAIL;
    }
    fprintf(f, "; %s, written by pctl plan --save-cluster\n[cluster]\nnodes = %d\n"
            "devices_per_node = %d\n[device]\nname = %s\ngemm_bf16_tflops = %.9g\n"
            "gemm_fp32_tflops = %.9g\nattention_tflops = %.9g\nmemory_gbps = %.9g\n"
            "memory_gb = %.9g\nefficiency = %.9g\nlaunch_us = %.9g\nstep_us = %.9g\n",
            cl->name, cl->nodes, cl->per_node, cl->dev.name, cl->dev.gemm_bf16 / 1e12,
            cl->dev.gemm_fp32 / 1e12, cl->dev.attention / 1e12, cl->dev.mem_bw / 1e9,
            cl->dev.mem_bytes / 1e9, cl->dev.efficiency, cl->dev.launch_s * 1e6,
            cl->dev.step_s * 1e6);
    const px_link_spec_t *k[2] = {&cl->intra, &cl->inter};
    for (int i = 0; i < 2; i++)
        fprintf(f, "[%s]\nbandwidth_gbps = %.9g\nlatency_us = %.9g\nefficiency = %.9g\n",
                i ? "inter" : "intra", k[i]->bw / 1e9, k[i]->latency * 1e6, k[i]->efficiency);
    fprintf(f, "[host]\ncores = %.9g\nnodes_per_host = %.9g\nthreads_per_rank = %.9g\n",
            cl->host.cores, cl->host.nodes, cl->host.threads);
    if (fclose(f)) {
        fprintf(stderr, "pctl: plan: --save-cluster %s: write failed\n", path);
        return PCTL_EXIT_FAIL;
    }
    return PCTL_EXIT_OK;
}
