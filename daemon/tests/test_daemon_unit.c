/* test_daemon_unit.c: unit tests of parallaxd's pure parts: job spec
 * validation (validate.c: the planner's validator at submit, placement on
 * the nodes' devices, old specs without `parallel`), the SQLite store (store.c: save, reload, ranks,
 * metrics, events), the command line / config file (config.c), the
 * memory check's CUDA IPC scratch (memfit.c) and which cgroups a daemon
 * calls its own (cgroup.c, on plain directories standing in for cgroupfs).
 * Single-threaded; writes only under a mkdtemp directory. */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <errno.h>
#include <sys/stat.h>
#include <sys/xattr.h>
#include <unistd.h>

#include "config.h"
#include "daemon.h"
#include "jobplan.h"
#include "jobspec.h"
#include "nvml.h"
#include "store.h"

static int failures;

#define EXPECT(cond, ...) do { if (!(cond)) { failures++; \
    fprintf(stderr, "FAIL %s:%d: %s: ", __FILE__, __LINE__, #cond); \
    fprintf(stderr, __VA_ARGS__); fputc('\n', stderr); } } while (0)

static char tmpdir[256];

static void write_tokens(const char *path, int32_t magic, int32_t version, int32_t count,
                         int32_t actual)
{
    int32_t header[256] = {0};
    FILE *f = fopen(path, "wb");
    header[0] = magic;
    header[1] = version;
    header[2] = count;
    fwrite(header, sizeof(header), 1, f);
    for (int32_t i = 0; i < actual; i++) {
        uint16_t t = (uint16_t)(i % 256);
        fwrite(&t, 2, 1, f);
    }
    fclose(f);
}

static void spec_init(Parallax__V1__JobSpec *s, Parallax__V1__ModelSpec *m, const char *data)
{
    parallax__v1__job_spec__init(s);
    parallax__v1__model_spec__init(m);
    m->layers = 2;
    m->heads = 2;
    m->dim = 32;
    m->seq = 32;
    s->model = m;
    s->data_path = (char *)data;
    s->dp = 4;
    s->batch = 8;
    s->steps = 20;
    s->lr = 1e-3f;
    s->weight_decay = 0.1f;
    s->min_lr_ratio = 0.1f;
}

/* px_validate_spec on a cluster of two nodes sharing `devices` (the
 * integration tests' shape: 2 + 2). */
static px_status_t validate(const Parallax__V1__JobSpec *s, int devices, char *err, size_t len)
{
    int counts[2] = {devices - devices / 2, devices / 2};
    return px_validate_spec(s, counts, 2, err, len);
}

/* Expects rejection with a message containing `needle`. */
static void expect_reject(const Parallax__V1__JobSpec *s, int devices, const char *needle)
{
    char err[1024] = "";
    px_status_t status = validate(s, devices, err, sizeof(err));
    EXPECT(status == PX_ERR_INVALID_ARGUMENT, "status %d for '%s'", status, needle);
    EXPECT(strstr(err, needle) != NULL, "message '%s' lacks '%s'", err, needle);
}

static void test_validate(void)
{
    char good[512], bad_magic[512], short_file[512], missing[512];
    Parallax__V1__JobSpec s;
    Parallax__V1__ModelSpec m;
    char err[1024];

    snprintf(good, sizeof(good), "%s/good.bin", tmpdir);
    snprintf(bad_magic, sizeof(bad_magic), "%s/magic.bin", tmpdir);
    snprintf(short_file, sizeof(short_file), "%s/short.bin", tmpdir);
    snprintf(missing, sizeof(missing), "%s/missing.bin", tmpdir);
    write_tokens(good, 20240520, 1, 1000, 1000);
    write_tokens(bad_magic, 12345, 1, 1000, 1000);
    write_tokens(short_file, 20240520, 1, 1000, 10);

    spec_init(&s, &m, good);
    EXPECT(validate(&s, 4, err, sizeof(err)) == PX_OK, "good spec rejected: %s", err);

    spec_init(&s, &m, missing);
    expect_reject(&s, 4, missing);
    spec_init(&s, &m, bad_magic);
    expect_reject(&s, 4, "bad magic 12345");
    spec_init(&s, &m, short_file);
    expect_reject(&s, 4, "does not match header token count 1000");
    spec_init(&s, &m, "relative.bin");
    expect_reject(&s, 4, "absolute");

    spec_init(&s, &m, good);
    s.dp = 8;
    expect_reject(&s, 4, "world=8 (dp=8 x tp=1 x pp=1 x cp=1) but the cluster has 4 devices");
    spec_init(&s, &m, good);
    s.max_restarts = 2;
    expect_reject(&s, 4, "max_restarts=2 needs checkpoint_dir");
    s.checkpoint_dir = (char *)"/tmp/ck";
    EXPECT(validate(&s, 4, err, sizeof(err)) == PX_OK, "restarts with a dir: %s", err);
    s.max_restarts = 101;
    expect_reject(&s, 4, "max_restarts=101 is out of range");
    spec_init(&s, &m, good);
    s.batch = 6;
    expect_reject(&s, 4, "batch=6 is not divisible by dp=4");
    spec_init(&s, &m, good);
    m.dim = 30;
    m.heads = 4;
    expect_reject(&s, 4, "dim=30 is not divisible by heads=4");
    spec_init(&s, &m, good);
    m.seq = 1000;
    expect_reject(&s, 4, "seq=1000");
    spec_init(&s, &m, good);
    m.seq = 999; /* seq+1 == tokens: exactly enough */
    EXPECT(validate(&s, 4, err, sizeof(err)) == PX_OK, "seq 999 of 1000: %s", err);
    spec_init(&s, &m, good);
    m.layers = 0;
    expect_reject(&s, 4, "layers=0");
    spec_init(&s, &m, good);
    s.steps = 0;
    expect_reject(&s, 4, "steps=0");
    spec_init(&s, &m, good);
    s.dp = 0;
    expect_reject(&s, 4, "dp=0");
    spec_init(&s, &m, good);
    s.lr = NAN;
    expect_reject(&s, 4, "lr=");
    spec_init(&s, &m, good);
    s.batch = 4000000;
    expect_reject(&s, 4, "batch=4000000");
    spec_init(&s, &m, good);
    s.model = NULL;
    expect_reject(&s, 4, "model");

    /* the layout: JobSpec.parallel, or dp alone for old clients */
    Parallax__V1__ParallelSpec par;
    parallax__v1__parallel_spec__init(&par);
    spec_init(&s, &m, good);
    s.dp = 1;
    s.batch = 4;
    s.parallel = &par;
    par.tp = 4;
    m.heads = 4;
    expect_reject(&s, 4, "layout dp=1 tp=4 pp=1 cp=1 ep=1 (world 4) cannot be placed on the 2 "
                  "nodes: tp=4 needs 4 devices on one node (a tensor group stays on one node); "
                  "the largest node has 2 free");
    par.tp = 2;
    m.heads = 3;
    m.dim = 33;
    expect_reject(&s, 4, "heads=3 is not divisible by tp=2");
    m.heads = 2;
    m.dim = 32;
    /* tp runs, with sequence parallelism too */
    EXPECT(validate(&s, 4, err, sizeof(err)) == PX_OK, "tp 2: %s", err);
    par.sequence_parallel = 1;
    EXPECT(validate(&s, 4, err, sizeof(err)) == PX_OK, "tp 2 with sequence parallelism: %s", err);
    par.sequence_parallel = 0;
    par.tp = 0; /* 0: 1 */
    par.dp = 4; /* parallel.dp wins over JobSpec.dp */
    s.batch = 6;
    expect_reject(&s, 4, "batch=6 is not divisible by dp=4 x grad_accum=1");
    s.batch = 8;
    s.grad_accum = 4;
    expect_reject(&s, 4, "batch=8 is not divisible by dp=4 x grad_accum=4");
    s.grad_accum = 2;
    EXPECT(validate(&s, 4, err, sizeof(err)) == PX_OK, "dp 4 x accum 2 of 8: %s", err);
    par.pp = 3;
    expect_reject(&s, 12, "layers=2 is fewer than pp=3 pipeline stages");
    par.pp = 1;
    par.ep = 3;
    expect_reject(&s, 4, "ep=3 does not divide dp x cp = 4");

    /* the token file against the vocab: every token is read */
    spec_init(&s, &m, good);
    m.vocab = 128; /* good.bin holds 0..255 */
    expect_reject(&s, 4, "token 128 >= vocab 128 (largest token 255;");
    spec_init(&s, &m, missing);
    EXPECT(validate(&s, 4, err, sizeof(err)) == PX_ERR_INVALID_ARGUMENT,
           "a missing data file is INVALID_ARGUMENT: %s", err);
    spec_init(&s, &m, good);
    s.zero = 4;
    expect_reject(&s, 4, "zero=4 must be 0, 1, 2 or 3");
    spec_init(&s, &m, good);
    s.checkpoint_dir = (char *)"ck";
    expect_reject(&s, 4, "checkpoint_dir='ck' must be an absolute path");
}

static void on_load(void *arg, px_job_t *t, Parallax__V1__JobSpec *spec)
{
    px_job_t *out = arg;
    int n = out->world; /* slot counter kept in world of out[0] */
    out[1 + n] = *t;
    out[1 + n].spec = spec;
    out->world = n + 1;
}

static void test_store(void)
{
    char db[512];
    px_store_t *st = NULL;
    px_job_t job, loaded[4];
    Parallax__V1__JobSpec s;
    Parallax__V1__ModelSpec m;
    Parallax__V1__GetMetricsResponse resp = PARALLAX__V1__GET_METRICS_RESPONSE__INIT;
    px_job_rank_t ranks[2];

    snprintf(db, sizeof(db), "%s/parallax.db", tmpdir);
    EXPECT(px_store_open(db, &st) == PX_OK, "open %s", db);
    if (!st)
        return;
    spec_init(&s, &m, "/data/x.bin");
    s.name = (char *)"unit-job";
    memset(&job, 0, sizeof(job));
    snprintf(job.id, sizeof(job.id), "n1-7");
    job.spec = &s;
    job.state = PARALLAX__V1__JOB_STATE__JOB_COMPLETED;
    job.step = 20;
    job.loss = 4.25f;
    job.grad_norm = 1.5f;
    job.lr = 1e-4f;
    job.tokens_per_second = 1234.5;
    job.created_ms = 1000;
    job.started_ms = 2000;
    job.finished_ms = 3000;
    snprintf(job.coordinator, sizeof(job.coordinator), "n1");
    memset(ranks, 0, sizeof(ranks));
    for (int r = 0; r < 2; r++) {
        snprintf(ranks[r].node, sizeof(ranks[r].node), "n%d", r + 1);
        snprintf(ranks[r].device, sizeof(ranks[r].device), "cpu:%d", r);
        snprintf(ranks[r].state, sizeof(ranks[r].state), "exited");
        ranks[r].pid = 100 + r;
        ranks[r].exit_code = r ? -9 : 0;
    }
    job.ranks = ranks;
    job.world = 2;
    EXPECT(px_store_job_save(st, &job) == PX_OK, "save");
    job.loss = 4.0f; /* replace, not duplicate */
    EXPECT(px_store_job_save(st, &job) == PX_OK, "save again");
    EXPECT(px_store_event_add(st, job.id, "COMPLETED") == PX_OK, "event");
    for (uint32_t i = 1; i <= 5; i++) {
        Parallax__V1__StepMetrics mm = PARALLAX__V1__STEP_METRICS__INIT;
        mm.step = i;
        mm.loss = 5.0f - 0.1f * (float)i;
        mm.lr = 1e-3f;
        EXPECT(px_store_metric_add(st, job.id, &mm) == PX_OK, "metric %u", i);
    }
    {
        Parallax__V1__StepMetrics mm = PARALLAX__V1__STEP_METRICS__INIT;
        mm.step = 3; /* a repeated step replaces its row */
        mm.loss = 9.0f;
        px_store_metric_add(st, job.id, &mm);
    }
    px_store_close(st);

    /* reopen: everything is still there */
    st = NULL;
    EXPECT(px_store_open(db, &st) == PX_OK, "reopen");
    if (!st)
        return;
    memset(loaded, 0, sizeof(loaded));
    EXPECT(px_store_jobs_load(st, on_load, loaded) == PX_OK, "load");
    EXPECT(loaded[0].world == 1, "%d jobs loaded", loaded[0].world);
    if (loaded[0].world == 1) {
        px_job_t *j = &loaded[1];
        px_job_rank_t lr[2];
        EXPECT(!strcmp(j->id, "n1-7"), "id %s", j->id);
        EXPECT(j->state == PARALLAX__V1__JOB_STATE__JOB_COMPLETED, "state %d", j->state);
        EXPECT(fabsf(j->loss - 4.0f) < 1e-6f, "loss %g", (double)j->loss);
        EXPECT(j->step == 20 && j->world == 2 && j->finished_ms == 3000, "figures");
        EXPECT(!strcmp(j->coordinator, "n1"), "coordinator %s", j->coordinator);
        EXPECT(j->spec && j->spec->model && j->spec->model->dim == 32 && j->spec->dp == 4 &&
               !strcmp(j->spec->name, "unit-job") && !strcmp(j->spec->data_path, "/data/x.bin"),
               "spec round trip");
        memset(lr, 0, sizeof(lr));
        j->ranks = lr;
        EXPECT(px_store_ranks_load(st, j) == PX_OK, "ranks load");
        EXPECT(!strcmp(lr[1].node, "n2") && !strcmp(lr[1].device, "cpu:1") &&
               lr[1].exit_code == -9 && lr[1].pid == 101 && !strcmp(lr[0].state, "exited"),
               "rank rows");
        if (j->spec)
            protobuf_c_message_free_unpacked(&j->spec->base, NULL);
    }
    EXPECT(px_store_metrics_get(st, "n1-7", &resp) == PX_OK, "metrics get");
    EXPECT(resp.n_steps == 5, "%zu metric rows", resp.n_steps);
    for (size_t i = 0; i < resp.n_steps; i++)
        EXPECT(resp.steps[i]->step == i + 1, "row %zu is step %u", i, resp.steps[i]->step);
    if (resp.n_steps == 5) {
        EXPECT(fabsf(resp.steps[2]->loss - 9.0f) < 1e-6f, "replaced step 3: %g",
               (double)resp.steps[2]->loss);
        EXPECT(fabsf(resp.steps[4]->loss - 4.5f) < 1e-5f, "step 5: %g",
               (double)resp.steps[4]->loss);
    }
    px_store_metrics_free(&resp);
    EXPECT(px_store_metrics_get(st, "other-1", &resp) == PX_OK && resp.n_steps == 0,
           "unknown job has no metrics");
    px_store_metrics_free(&resp);
    px_store_close(st);
}

static void test_config(void)
{
    char conf[512];
    FILE *f;
    px_daemon_config_t cfg;

    snprintf(conf, sizeof(conf), "%s/parallaxd.conf", tmpdir);
    f = fopen(conf, "w");
    fprintf(f, "[parallaxd]\nname = filenode\ndevices = cpu:3\npeers = h1:7071, h2:7071\n"
               "listen = 0.0.0.0:9000\n");
    fclose(f);
    {
        char *argv[] = {"parallaxd", "--config", conf, "--listen", "127.0.0.1:1234", NULL};
        EXPECT(px_daemon_config_parse(5, argv, &cfg) == PX_OK, "parse");
        EXPECT(!strcmp(cfg.name, "filenode"), "name %s", cfg.name);
        EXPECT(cfg.n_devices == 3, "devices %d", cfg.n_devices);
        EXPECT(cfg.n_peers == 2 && !strcmp(cfg.peers[1], "h2:7071"), "peers");
        EXPECT(!strcmp(cfg.listen, "127.0.0.1:1234"), "command line wins: %s", cfg.listen);
        EXPECT(!strcmp(cfg.peer_listen, "127.0.0.1:7071"), "default peer-listen %s",
               cfg.peer_listen);
        px_daemon_config_free(&cfg);
    }
    {
        char *argv[] = {"parallaxd", "--config", "/dev/null", "--devices", "cpu:0", NULL};
        EXPECT(px_daemon_config_parse(5, argv, &cfg) == PX_ERR_INVALID_ARGUMENT, "cpu:0");
    }
    /* tensorboard-dir: state-dir/tensorboard by default, off, or absolute */
    {
        char buf[256];
        char *argv[] = {"parallaxd", "--config", "/dev/null", "--state-dir", "/srv/px", NULL};
        EXPECT(px_daemon_config_parse(5, argv, &cfg) == PX_OK, "parse");
        EXPECT(px_daemon_config_tensorboard_dir(&cfg, NULL, buf, sizeof(buf)) == 0 &&
               !strcmp(buf, "/srv/px/tensorboard"), "default tensorboard-dir %s", buf);
        EXPECT(px_daemon_config_tensorboard_dir(&cfg, "/real/px", buf, sizeof(buf)) == 0 &&
               !strcmp(buf, "/real/px/tensorboard"), "resolved state %s", buf);
        px_daemon_config_free(&cfg);
    }
    {
        char buf[256];
        char *argv[] = {"parallaxd", "--config", "/dev/null", "--tensorboard-dir", "off", NULL};
        EXPECT(px_daemon_config_parse(5, argv, &cfg) == PX_OK, "parse off");
        EXPECT(px_daemon_config_tensorboard_dir(&cfg, NULL, buf, sizeof(buf)) == -1 && !buf[0],
               "tensorboard-dir off: %s", buf);
        px_daemon_config_free(&cfg);
    }
    {
        char buf[256];
        char *argv[] = {"parallaxd", "--config", "/dev/null", "--tensorboard-dir", "/tb", NULL};
        EXPECT(px_daemon_config_parse(5, argv, &cfg) == PX_OK &&
               px_daemon_config_tensorboard_dir(&cfg, "/s", buf, sizeof(buf)) == 0 &&
               !strcmp(buf, "/tb"), "tensorboard-dir /tb: %s", buf);
        px_daemon_config_free(&cfg);
    }
    {
        char *argv[] = {"parallaxd", "--config", "/dev/null", "--tensorboard-dir", "tb", NULL};
        EXPECT(px_daemon_config_parse(5, argv, &cfg) == PX_ERR_INVALID_ARGUMENT,
               "relative tensorboard-dir");
    }
    /* GPUs as devices: cuda (all), cuda:I,J, with cpu:N */
    {
        char *argv[] = {"parallaxd", "--config", "/dev/null", "--devices", "cuda:0,1,cpu:2", NULL};
        EXPECT(px_daemon_config_parse(5, argv, &cfg) == PX_OK && cfg.n_cuda == 2 &&
               cfg.cuda_ids[0] == 0 && cfg.cuda_ids[1] == 1 && cfg.n_devices == 2 &&
               !cfg.cuda_all, "cuda:0,1,cpu:2: %d gpus, %d cpus", cfg.n_cuda, cfg.n_devices);
        px_daemon_config_free(&cfg);
    }
    {
        char *argv[] = {"parallaxd", "--config", "/dev/null", "--devices", "cuda", NULL};
        EXPECT(px_daemon_config_parse(5, argv, &cfg) == PX_OK && cfg.cuda_all &&
               cfg.n_devices == 0, "cuda");
        px_daemon_config_free(&cfg);
    }
    /* simulated devices beside cpu:N (offered only with
     * PX_SIM_DEVICE=1: nodes.c, tests/integration/test_simdev.py) */
    {
        char *argv[] = {"parallaxd", "--config", "/dev/null", "--devices", "cpu:2,sim:3", NULL};
        EXPECT(px_daemon_config_parse(5, argv, &cfg) == PX_OK && cfg.n_sim == 3 &&
               cfg.n_devices == 2 && !cfg.n_cuda, "cpu:2,sim:3: %d sims, %d cpus", cfg.n_sim,
               cfg.n_devices);
        px_daemon_config_free(&cfg);
    }
    {
        static const char *bad[] = {"cuda:x", "cuda:0,0", "gpu:1", "cuda,cuda:1", "cpu:2,cpu:1",
                                    "cuda:64", "", "sim:0", "sim:65", "sim:1,sim:2", "sim",
                                    /* an index is digits only: no sign, no blank */
                                    "cuda:+1", "cuda:-1", "cuda:0,+1", "cuda: 1", "cpu:+2",
                                    "sim:+1", "cuda:-0"};
        for (unsigned i = 0; i < sizeof bad / sizeof *bad; i++) {
            char *argv[] = {"parallaxd", "--config", "/dev/null", "--devices", (char *)bad[i],
                            NULL};
            EXPECT(px_daemon_config_parse(5, argv, &cfg) == PX_ERR_INVALID_ARGUMENT,
                   "devices '%s' rejected", bad[i]);
        }
    }
    /* --gpu-share N (1..64): on the command line and in the file, a bad
     * value refused naming it */
    {
        char *argv[] = {"parallaxd", "--config", "/dev/null", "--gpu-share", "4", NULL};
        EXPECT(px_daemon_config_parse(5, argv, &cfg) == PX_OK && cfg.gpu_share == 4,
               "--gpu-share 4: %d", cfg.gpu_share);
        px_daemon_config_free(&cfg);
        char *argv1[] = {"parallaxd", "--config", "/dev/null", NULL};
        EXPECT(px_daemon_config_parse(3, argv1, &cfg) == PX_OK && cfg.gpu_share == 1,
               "gpu-share defaults to 1: %d", cfg.gpu_share);
        static const char ini[] = "[parallaxd]\ngpu-share = 3\n";
        EXPECT(px_daemon_config_apply_ini(&cfg, "f.conf", ini, sizeof(ini) - 1) == PX_OK &&
                   cfg.gpu_share == 3, "gpu-share = 3 in the file: %d", cfg.gpu_share);
        static const char bad_ini[] = "[parallaxd]\ngpu-share = 0\n";
        EXPECT(px_daemon_config_apply_ini(&cfg, "f.conf", bad_ini, sizeof(bad_ini) - 1) ==
                   PX_ERR_INVALID_ARGUMENT && cfg.gpu_share == 3,
               "gpu-share = 0 in the file refused");
        px_daemon_config_free(&cfg);
        static const char *bad[] = {"0", "65", "x", "-1", "+2", " 2", "2.5", ""};
        for (unsigned i = 0; i < sizeof bad / sizeof *bad; i++) {
            char *argv2[] = {"parallaxd", "--config", "/dev/null", "--gpu-share", (char *)bad[i],
                             NULL};
            EXPECT(px_daemon_config_parse(5, argv2, &cfg) == PX_ERR_INVALID_ARGUMENT,
                   "gpu-share '%s' rejected", bad[i]);
        }
    }
    /* a rank's device environment: a GPU slot opens its GPU as CUDA device 0 */
    {
        char cvd[64], dev[64], node[64], *env[4] = {NULL};
        int n = px_supervisor_device_env("cuda:3/1", cvd, sizeof(cvd), dev, sizeof(dev), node,
                                         sizeof(node), env);
        EXPECT(n == 3 && !strcmp(env[0], "CUDA_VISIBLE_DEVICES=3") &&
                   !strcmp(env[1], "PX_DEVICE=cuda:0") && !strcmp(env[2], "PX_NODE_DEVICE=cuda:3/1"),
               "cuda:3/1: %d %s %s %s", n, env[0], env[1], env[2]);
        n = px_supervisor_device_env("cuda:12", cvd, sizeof(cvd), dev, sizeof(dev), node,
                                     sizeof(node), env);
        EXPECT(n == 3 && !strcmp(env[0], "CUDA_VISIBLE_DEVICES=12") &&
                   !strcmp(env[1], "PX_DEVICE=cuda:0"), "cuda:12: %s %s", env[0], env[1]);
        n = px_supervisor_device_env("sim:1/2", cvd, sizeof(cvd), dev, sizeof(dev), node,
                                     sizeof(node), env);
        EXPECT(n == 2 && !strcmp(env[0], "PX_DEVICE=sim:1") &&
                   !strcmp(env[1], "PX_NODE_DEVICE=sim:1/2"), "sim:1/2: %s %s", env[0], env[1]);
        n = px_supervisor_device_env("cpu:0", cvd, sizeof(cvd), dev, sizeof(dev), node,
                                     sizeof(node), env);
        EXPECT(n == 2 && !strcmp(env[0], "PX_DEVICE=cpu:0"), "cpu:0: %s", env[0]);
    }
    /* MFU's devices: the slots of one GPU count once, the same name on
     * two nodes twice, CPU devices each */
    {
        static const struct {
            const char *nodes[4], *devs[4];
            int n, want;
        } cases[] = {
            {{"a", "a"}, {"cuda:0/0", "cuda:0/1"}, 2, 1},
            {{"a", "a", "a", "a"}, {"cuda:0/0", "cuda:1/0", "cuda:0/1", "cuda:1/1"}, 4, 2},
            {{"a", "b"}, {"cuda:0/0", "cuda:0/1"}, 2, 2},
            {{"a", "a"}, {"cuda:0", "cuda:1"}, 2, 2},
            {{"a", "a", "a"}, {"cpu:0", "cpu:1", "cpu:2"}, 3, 3},
            {{"a", "a"}, {"sim:1/0", "sim:1/1"}, 2, 1},
            {{"a", "a"}, {"cuda:1/0", "cuda:10/0"}, 2, 2},
            {{"a"}, {"cuda:0"}, 0, 0},
        };
        for (unsigned i = 0; i < sizeof cases / sizeof *cases; i++) {
            int got = px_supervisor_physical_devices(cases[i].nodes, cases[i].devs, cases[i].n);
            EXPECT(got == cases[i].want, "physical devices of case %u (%s, %s ...): %d, want %d",
                   i, cases[i].devs[0], cases[i].devs[1], got, cases[i].want);
        }
    }
    /* NVML is loaded at run time: where the driver is absent the probe says
     * so (NOT_FOUND, naming the library) instead of failing to link */
    {
        px_gpu_info_t g[4];
        int ng = -1;
        char nerr[256] = "";
        px_status_t ns = px_nvml_probe(g, 4, &ng, nerr, sizeof(nerr));
        EXPECT(ns == PX_OK ? ng >= 0 : ns == PX_ERR_NOT_FOUND && strstr(nerr, "libnvidia-ml"),
               "NVML probe: %s (%s)", px_status_str(ns), nerr);
    }
    {
        char *argv[] = {"parallaxd", "--config", "/dev/null", "--peers", "nocolon", NULL};
        EXPECT(px_daemon_config_parse(5, argv, &cfg) == PX_ERR_INVALID_ARGUMENT, "bad peer");
    }
    {
        char *argv[] = {"parallaxd", "--config", "/nonexistent/parallaxd.conf", NULL};
        EXPECT(px_daemon_config_parse(3, argv, &cfg) == PX_ERR_INVALID_ARGUMENT,
               "missing explicit config");
    }
    f = fopen(conf, "w");
    fprintf(f, "colour = blue\n");
    fclose(f);
    {
        char *argv[] = {"parallaxd", "--config", conf, NULL};
        EXPECT(px_daemon_config_parse(3, argv, &cfg) == PX_ERR_INVALID_ARGUMENT, "unknown key");
    }
    /* sources and lines (px_daemon_config_apply_ini); the env is below the file */
    setenv("PX_PEER_DEAD_MS", "4321", 1);
    setenv("PX_KILL_GRACE_MS", "not-a-number", 1);
    EXPECT(px_daemon_config_defaults(&cfg) == PX_OK, "defaults");
    EXPECT(cfg.peer_dead_ms == 4321, "env peer-dead-ms %ld", cfg.peer_dead_ms);
    EXPECT(cfg.kill_grace_ms == 3000, "a bad env value falls back: %ld", cfg.kill_grace_ms);
    {
        const char *text = "; c\n[parallaxd]\nheartbeat-ms = 250\ncontrol-remote = yes\n";
        char src[PXD_CFG_SOURCE_MAX];
        EXPECT(px_daemon_config_apply_ini(&cfg, "t.conf", text, strlen(text)) == PX_OK, "ini");
        EXPECT(cfg.heartbeat_ms == 250 && cfg.control_remote == 1, "values %ld %d",
               cfg.heartbeat_ms, cfg.control_remote);
        /* the key table's order: name listen peer-listen state-dir runtime-dir
         * devices peers heartbeat-ms peer-dead-ms ... */
        snprintf(src, sizeof(src), "%s", cfg.source[7]);
        EXPECT(!strcmp(src, "t.conf:3"), "heartbeat-ms source %s", src);
        EXPECT(!strcmp(cfg.source[8], "env PX_PEER_DEAD_MS"), "peer-dead-ms source %s",
               cfg.source[8]);
        EXPECT(!strcmp(cfg.source[1], "default"), "listen source %s", cfg.source[1]);
    }
    EXPECT(px_daemon_config_apply_ini(&cfg, "t.conf", "a\nheartbeat-ms = 5\n", 19) ==
               PX_ERR_INVALID_ARGUMENT, "syntax error at line 1");
    EXPECT(px_daemon_config_apply_ini(&cfg, "t.conf", "heartbeat-ms = 5\n", 17) ==
               PX_ERR_INVALID_ARGUMENT, "heartbeat below 10 ms");
    EXPECT(px_daemon_config_apply_ini(&cfg, "t.conf", "log-level = loud\n", 17) ==
               PX_ERR_INVALID_ARGUMENT, "bad log level");
    /* message size and TLS keys */
    EXPECT(cfg.max_message_bytes == 64 * 1024 * 1024, "default max %d", cfg.max_message_bytes);
    {
        const char *text = "max-message-bytes = 1048576\ntls-cert-file = /c.pem\n"
                           "tls-key-file = /k.pem\ntls-ca-file = /ca.pem\n";
        EXPECT(px_daemon_config_apply_ini(&cfg, "t.conf", text, strlen(text)) == PX_OK, "tls");
        EXPECT(cfg.max_message_bytes == 1048576, "max %d", cfg.max_message_bytes);
        EXPECT(cfg.tls_cert_file && !strcmp(cfg.tls_cert_file, "/c.pem") && cfg.tls_key_file &&
                   !strcmp(cfg.tls_key_file, "/k.pem") && cfg.tls_ca_file &&
                   !strcmp(cfg.tls_ca_file, "/ca.pem"), "tls files");
    }
    EXPECT(px_daemon_config_apply_ini(&cfg, "t.conf", "max-message-bytes = 100\n", 24) ==
               PX_ERR_INVALID_ARGUMENT, "max-message-bytes below 1024");
    EXPECT(px_daemon_config_apply_ini(&cfg, "t.conf", "max-message-bytes = 3000000000\n", 31) ==
               PX_ERR_INVALID_ARGUMENT, "max-message-bytes above 2^31-1");
    EXPECT(px_daemon_config_apply_ini(&cfg, "t.conf", "max-message-bytes = 1k\n", 23) ==
               PX_ERR_INVALID_ARGUMENT, "max-message-bytes not an integer");
    px_daemon_config_free(&cfg);
    unsetenv("PX_PEER_DEAD_MS");
    unsetenv("PX_KILL_GRACE_MS");
}

/* auth.c: px_auth_load_token's checks. */
static void put_file(const char *path, const char *text, size_t len, mode_t mode)
{
    FILE *f = fopen(path, "wb");
    if (!f || fwrite(text, 1, len, f) != len) {
        perror(path);
        exit(1);
    }
    fclose(f);
    chmod(path, mode);
}

static void test_token(void)
{
    char path[600], *tok = NULL, big[5000];

    snprintf(path, sizeof(path), "%s/token", tmpdir);
    put_file(path, "  s3cret-token \t\nsecond line\n", 30, 0600);
    EXPECT(px_auth_load_token(path, &tok) == PX_OK && tok && !strcmp(tok, "s3cret-token"),
           "first line, trimmed: '%s'", tok ? tok : "(null)");
    free(tok);
    tok = NULL;
    put_file(path, "s3cret", 6, 0640); /* group-readable (the service group) is fine */
    EXPECT(px_auth_load_token(path, &tok) == PX_OK && tok && !strcmp(tok, "s3cret"), "0640");
    free(tok);
    tok = NULL;
    put_file(path, "s3cret", 6, 0644);
    EXPECT(px_auth_load_token(path, &tok) == PX_ERR_INVALID_ARGUMENT && !tok, "0644 refused");
    put_file(path, "s3cret", 6, 0602);
    EXPECT(px_auth_load_token(path, &tok) == PX_ERR_INVALID_ARGUMENT, "world-writable refused");
    put_file(path, " \n\n", 3, 0600);
    EXPECT(px_auth_load_token(path, &tok) == PX_ERR_INVALID_ARGUMENT, "empty refused");
    put_file(path, "ab\001cd\n", 6, 0600);
    EXPECT(px_auth_load_token(path, &tok) == PX_ERR_INVALID_ARGUMENT, "control byte refused");
    memset(big, 'a', sizeof(big));
    put_file(path, big, sizeof(big), 0600);
    EXPECT(px_auth_load_token(path, &tok) == PX_ERR_INVALID_ARGUMENT, "over 4096 bytes refused");
    EXPECT(px_auth_load_token("/nonexistent/token", &tok) == PX_ERR_INVALID_ARGUMENT, "missing");
    EXPECT(px_auth_load_token(tmpdir, &tok) == PX_ERR_INVALID_ARGUMENT, "a directory");
    unlink(path);
}

/* memfit.c: SubmitJob's memory check counts the CUDA IPC
 * scratch of the communicators that stay on a node of GPUs. dp=4 of a
 * small model: on one node of 4 GPUs the dp group's ring holds 3 slots of
 * PX_IPC_SLOT_BYTES (4 MiB) = 12 MiB per rank, so a device with 6 MiB
 * more than the training state and activations is refused there, naming
 * the IPC figure; the same node of cpu devices (no IPC) and two nodes of
 * GPUs (dp across nodes: staged, no IPC) accept it. */
static void test_memfit_ipc(void)
{
    Parallax__V1__JobSpec s;
    Parallax__V1__ModelSpec m;
    char err[1024] = "", want[128];
    const char *one[1] = {"n0"}, *two[2] = {"n0", "n1"};
    int dev_one[1] = {4}, dev_two[2] = {2, 2}, gpu[2] = {1, 1}, cpu[2] = {0, 0};
    uint64_t tiny[2] = {1, 1}, mem[2];
    double need = 0, need_gpu = 0;

    spec_init(&s, &m, "/tmp/unused.bin");
    /* the plan's bytes without IPC, from the refusal of a 1-byte device */
    EXPECT(px_memfit_check(&s, dev_one, one, tiny, cpu, 1, err, sizeof(err)) ==
               PX_ERR_INVALID_ARGUMENT, "a 1-byte device accepted");
    const char *p = strstr(err, "MiB (");
    EXPECT(p && sscanf(p, "MiB (%lf bytes", &need) == 1 && need > 0, "no byte figure: %s", err);
    EXPECT(!strstr(err, "IPC"), "IPC counted on cpu devices: %s", err);
    /* on GPUs the plan differs (the fused attention's state): the figure
     * without IPC from two nodes of 1-byte GPUs (dp across nodes: staged) */
    EXPECT(px_memfit_check(&s, dev_two, two, tiny, gpu, 2, err, sizeof(err)) ==
               PX_ERR_INVALID_ARGUMENT, "a 1-byte GPU accepted");
    p = strstr(err, "MiB (");
    EXPECT(p && sscanf(p, "MiB (%lf bytes", &need_gpu) == 1 && need_gpu > 0 && need_gpu <= need,
           "no GPU byte figure: %s", err);
    mem[0] = mem[1] = (uint64_t)need + (6u << 20);
    EXPECT(px_memfit_check(&s, dev_one, one, mem, cpu, 1, err, sizeof(err)) == PX_OK,
           "cpu node: refused: %s", err);
    EXPECT(px_memfit_check(&s, dev_one, one, mem, NULL, 1, err, sizeof(err)) == PX_OK,
           "no cuda flags: refused: %s", err);
    err[0] = '\0';
    mem[0] = mem[1] = (uint64_t)need_gpu + (6u << 20);
    EXPECT(px_memfit_check(&s, dev_one, one, mem, gpu, 1, err, sizeof(err)) ==
               PX_ERR_INVALID_ARGUMENT, "GPU node: accepted without room for IPC scratch");
    snprintf(want, sizeof(want), "(%.0f bytes", need_gpu + 12.0 * (1 << 20));
    EXPECT(strstr(err, want) != NULL, "message lacks '%s': %s", want, err);
    EXPECT(strstr(err, "CUDA IPC scratch 12.0 MiB (1 communicator x 3 slots x 4.0 MiB)") != NULL,
           "message lacks the IPC figure: %s", err);
    printf("memfit: state + activations %.0f bytes; one node of 4 GPUs: %s\n", need, err);
    EXPECT(px_memfit_check(&s, dev_two, two, mem, gpu, 2, err, sizeof(err)) == PX_OK,
           "dp across two GPU nodes (staged, no IPC): refused: %s", err);
    mem[0] = mem[1] = (uint64_t)need_gpu + (12u << 20);
    EXPECT(px_memfit_check(&s, dev_one, one, mem, gpu, 1, err, sizeof(err)) == PX_OK,
           "GPU node with exactly room for the IPC scratch: refused: %s", err);
}

/* The byte figure of a refusal on one node of one 1-byte device (cpu or
 * GPU), or -1 when the job was accepted or the message has none. */
static double memfit_need(const Parallax__V1__JobSpec *s, int cuda)
{
    char err[1024] = "";
    const char *one[1] = {"n0"};
    int dev[1] = {1}, kind[1] = {cuda};
    uint64_t tiny[1] = {1};
    double need = -1;
    if (px_memfit_check(s, dev, one, tiny, kind, 1, err, sizeof(err)) != PX_ERR_INVALID_ARGUMENT)
        return -1;
    const char *p = strstr(err, "MiB (");
    if (!p || sscanf(p, "MiB (%lf bytes", &need) != 1)
        return -1;
    return need;
}

/* memfit counts what the engine allocates on the node's kind of
 * device. One rank (dp 1), 2 layers, 2 heads, dim 32, seq 256, batch 2
 * (N = 512 tokens), vocab 256:
 *   - GPUs run the fused CUDA attention, which keeps each row's
 *     log-sum-exp (L,B,NH,T) = 2048 floats instead of the cpu's (L,B,NH,T,T)
 *     = 524288 probabilities and (T,T) = 65536 of scratch: 587776 floats,
 *     2351104 bytes less. A GPU with 1 MiB over the GPU figure takes the job
 *     (it was refused when the T*T state was counted there too); a cpu
 *     device of that size does not.
 *   - --precision bf16 stores ln1, ln2 (L,N,C) = 32768 each, lnf (N,C) =
 *     16384 and the GELU output (L,N,4C) = 131072 as bf16: 106496 floats,
 *     425984 bytes less than fp32; the GPU's bf16 GEMM scratch is the
 *     head's backward: dout (N,Vp) 131072 + W (Vp,C) 8192 bf16 copies (lnf
 *     is read in place) = 278528 bytes (it was counted as the fp32 table
 *     plus 2 x (N Vp + Vp C + N C) = 311296 bytes); a cpu device's is
 *     doubles (px_matmul_bf16_cpu.c), counted too. */
static void test_memfit_device(void)
{
    Parallax__V1__JobSpec s;
    Parallax__V1__ModelSpec m;
    char err[1024] = "";
    const char *one[1] = {"n0"};
    int dev[1] = {1}, gpu[1] = {1}, cpu[1] = {0};
    uint64_t mem[1];

    spec_init(&s, &m, "/tmp/unused.bin");
    m.seq = 256;
    s.dp = 1;
    s.batch = 2;
    double need_cpu = memfit_need(&s, 0), need_gpu = memfit_need(&s, 1);
    EXPECT(need_cpu > 0 && need_gpu > 0, "no figures: cpu %.0f gpu %.0f", need_cpu, need_gpu);
    EXPECT(need_cpu - need_gpu == 2351104.0, "cpu %.0f - GPU %.0f bytes = %.0f, want 2351104",
           need_cpu, need_gpu, need_cpu - need_gpu);
    mem[0] = (uint64_t)need_gpu + (1u << 20);
    EXPECT(px_memfit_check(&s, dev, one, mem, gpu, 1, err, sizeof(err)) == PX_OK,
           "a GPU with room for the lse-only attention refused: %s", err);
    EXPECT(px_memfit_check(&s, dev, one, mem, cpu, 1, err, sizeof(err)) ==
               PX_ERR_INVALID_ARGUMENT, "a cpu device without room for (T,T) accepted");
    s.precision = "bf16";
    double bf16_gpu = memfit_need(&s, 1);
    EXPECT(bf16_gpu == need_gpu - 425984.0 + 278528.0,
           "bf16 on a GPU: %.0f bytes, want %.0f (fp32 %.0f - bf16 storage 425984 + GEMM "
           "scratch 278528)", bf16_gpu, need_gpu - 425984.0 + 278528.0, need_gpu);
    /* a cpu device: the cpu bf16 GEMMs' host scratch of doubles, the head's
     * backward: dout 131072 + W 8192 + inp 16384 + accumulator 16384 */
    double bf16_cpu = memfit_need(&s, 0);
    EXPECT(bf16_cpu == need_cpu - 425984.0 + 8.0 * 172032,
           "bf16 on a cpu device: %.0f bytes, want %.0f", bf16_cpu,
           need_cpu - 425984.0 + 8.0 * 172032);
    printf("memfit: seq 256 one rank: cpu %.0f, GPU %.0f, GPU bf16 %.0f, cpu bf16 %.0f bytes\n",
           need_cpu, need_gpu, bf16_gpu, bf16_cpu);
}

/* px_cgroup_key is a fixed function of the state directory (a restarted
 * daemon finds its ranks' cgroups again); px_cgroup_owned accepts only a
 * rank cgroup directly under the daemon's base that carries its state
 * directory, so a daemon never signals another's cgroup. */
static void test_cgroup_owned(void)
{
    static px_daemon_t d;
    char base[600], path[800], other_base[600];
    const char *mine = "/var/lib/parallax", *theirs = "/var/lib/parallax-b";

    EXPECT(px_cgroup_key(mine) == 0xd5b25d3eu, "key %08x", px_cgroup_key(mine));
    EXPECT(px_cgroup_key(mine) != px_cgroup_key(theirs), "same key for two state dirs");
    snprintf(base, sizeof(base), "%s/parallax-bar-a-%08x", tmpdir, px_cgroup_key(mine));
    snprintf(other_base, sizeof(other_base), "%s/parallax-bar-a-%08x", tmpdir,
             px_cgroup_key(theirs));
    mkdir(base, 0755);
    mkdir(other_base, 0755);
    snprintf(d.cgroup_base, sizeof(d.cgroup_base), "%s", base);
    snprintf(d.state_dir_real, sizeof(d.state_dir_real), "%s", mine);
    d.cgroup_marked = 0; /* no xattrs: the path decides */
    snprintf(path, sizeof(path), "%s/bar-a-1.r0", base);
    EXPECT(px_cgroup_owned(&d, path), "%s", path);
    snprintf(path, sizeof(path), "%s/bar-a-1.r0", other_base);
    EXPECT(!px_cgroup_owned(&d, path), "another daemon's base: %s", path);
    snprintf(path, sizeof(path), "%sx/bar-a-1.r0", base);
    EXPECT(!px_cgroup_owned(&d, path), "a base that only starts like ours: %s", path);
    EXPECT(!px_cgroup_owned(&d, base), "the base itself is no rank's");
    snprintf(path, sizeof(path), "%s/a/b", base);
    EXPECT(!px_cgroup_owned(&d, path), "nested: %s", path);
    EXPECT(!px_cgroup_owned(&d, ""), "empty path");

    /* with owner marks: a cgroup under our base marked by another daemon,
     * or not marked, is not ours */
    snprintf(path, sizeof(path), "%s/bar-a-1.r0", base);
    mkdir(path, 0755);
    if (setxattr(path, "user.parallax.state_dir", mine, strlen(mine), 0) != 0) {
        printf("cgroup: no user xattrs in %s (%s): marks not checked\n", tmpdir,
               strerror(errno));
        return;
    }
    d.cgroup_marked = 1;
    EXPECT(px_cgroup_owned(&d, path), "marked as ours: %s", path);
    setxattr(path, "user.parallax.state_dir", theirs, strlen(theirs), 0);
    EXPECT(!px_cgroup_owned(&d, path), "marked as another daemon's: %s", path);
    snprintf(path, sizeof(path), "%s/bar-a-2.r0", base);
    mkdir(path, 0755);
    EXPECT(!px_cgroup_owned(&d, path), "not marked: %s", path);
    printf("cgroup: key %08x; ownership by path and state-dir mark\n", px_cgroup_key(mine));
}

/* memfit sizes a rank with the plan the ranks lay out (planner/jobplan.h):
 * ZeRO shards over dp x cp, the experts held whole, the pipeline stage's
 * own units and slots. It used to shard over dp alone, leave the experts
 * out and approximate the stage: for dp 2 x cp 2, ZeRO-3, 4 experts over
 * ep 2, and for pp 2 with 1F1B, its figure on a cpu device must be the
 * plan's total for the stage that needs the most. */
static double memfit_need_world(const Parallax__V1__JobSpec *s)
{
    char err[1024] = "";
    const char *one[1] = {"n0"};
    int dev[1] = {8}, kind[1] = {0};
    uint64_t tiny[1] = {1};
    double need = -1;
    if (px_memfit_check(s, dev, one, tiny, kind, 1, err, sizeof(err)) != PX_ERR_INVALID_ARGUMENT)
        return -1;
    const char *p = strstr(err, "MiB (");
    if (!p || sscanf(p, "MiB (%lf bytes", &need) != 1)
        return -1;
    return need;
}

static void test_memfit_recipe(void)
{
    Parallax__V1__JobSpec s;
    Parallax__V1__ModelSpec m;
    Parallax__V1__ParallelSpec par;
    Parallax__V1__MoeSpec moe;
    px_job_config_t cfg;
    px_job_plan_t jp;

    spec_init(&s, &m, "/tmp/unused.bin");
    parallax__v1__parallel_spec__init(&par);
    parallax__v1__moe_spec__init(&moe);
    par.dp = 2;
    par.cp = 2;
    par.ep = 2;
    moe.experts = 4;
    s.dp = 2;
    s.zero = 3;
    s.parallel = &par;
    s.moe = &moe;
    px_jobspec_to_config(&s, &cfg);
    EXPECT(px_plan_job(&cfg, PX_PLAN_DEV_CPU, -1, &jp) == PX_OK, "no plan");
    double need = memfit_need_world(&s);
    EXPECT(jp.moe_params > 0 && need == jp.total,
           "dp 2 x cp 2 ZeRO-3 with experts: memfit %.0f bytes, the plan %.0f", need, jp.total);
    px_job_plan_free(&jp);
    /* two pipeline stages, 4 micro-batches: stage 0 holds 2 in flight */
    s.moe = NULL;
    s.zero = 1;
    par.dp = 1;
    par.cp = 1;
    par.ep = 1;
    par.pp = 2;
    par.micro_batches = 4;
    s.dp = 1;
    m.layers = 4;
    px_jobspec_to_config(&s, &cfg);
    EXPECT(px_plan_job(&cfg, PX_PLAN_DEV_CPU, -1, &jp) == PX_OK, "no pipeline plan");
    need = memfit_need_world(&s);
    EXPECT(need == jp.total && jp.slots == 2 && jp.stage == 0,
           "pp 2: memfit %.0f bytes, the plan %.0f (stage %d, %d slots)", need, jp.total,
           jp.stage, jp.slots);
    px_job_plan_free(&jp);
}

/* px_jobnames_rank: the values the integration tests' Python copy
 * (test_names_owner.py) computes, and names spread evenly over owners:
 * 8,000 names over 8 members give each 1,000 +- 15% (a binomial's
 * standard deviation is 30 here). */
static void test_jobnames_rank(void)
{
    int owned[8] = {0};
    char name[32], member[16];

    EXPECT(px_jobnames_rank("race-0", "nr1a") == 0x3662b7496cb6d62fULL, "rank(race-0, nr1a)");
    EXPECT(px_jobnames_rank("", "") == 0x25fc6dd36ce04b20ULL, "rank('', '')");
    EXPECT(px_jobnames_rank("train", "node-b") == 0xf069696a5368ca1eULL, "rank(train, node-b)");
    EXPECT(px_jobnames_rank("ab", "c") != px_jobnames_rank("a", "bc"),
           "the 0 byte between name and member tells 'ab'+'c' from 'a'+'bc'");
    for (int i = 0; i < 8000; i++) {
        uint64_t best = 0;
        int owner = 0;
        snprintf(name, sizeof(name), "job-%d", i);
        for (int m = 0; m < 8; m++) {
            uint64_t r;
            snprintf(member, sizeof(member), "node-%d", m);
            if ((r = px_jobnames_rank(name, member)) > best) {
                best = r;
                owner = m;
            }
        }
        owned[owner]++;
    }
    for (int m = 0; m < 8; m++)
        EXPECT(owned[m] >= 850 && owned[m] <= 1150, "node-%d owns %d of 8000 names", m, owned[m]);
}

int main(void)
{
    unsetenv("PX_IPC_SLOT_BYTES"); /* the default 4 MiB slots (px_env.c) */
    snprintf(tmpdir, sizeof(tmpdir), "/tmp/px-daemon-unit-XXXXXX");
    if (!mkdtemp(tmpdir)) {
        perror("mkdtemp");
        return 1;
    }
    test_validate();
    test_store();
    test_config();
    test_token();
    test_memfit_ipc();
    test_memfit_device();
    test_cgroup_owned();
    test_memfit_recipe();
    test_jobnames_rank();
    {
        char cmd[600];
        snprintf(cmd, sizeof(cmd), "rm -rf '%s'", tmpdir);
        if (system(cmd) != 0)
            fprintf(stderr, "cannot remove %s\n", tmpdir);
    }
    if (failures) {
        fprintf(stderr, "%d check(s) failed\n", failures);
        return 1;
    }
    printf("daemon unit tests passed\n");
    return 0;
}
