/* test_planner.c: unit tests of the job configuration (planner/jobcfg.h:
 * the defaults, px_job_config_check's every rule and its message, the
 * flags) and of the JobSpec conversion (planner/jobspec.h: wire zeros as
 * defaults, old specs without `parallel`, and the round trip config ->
 * JobSpec -> packed bytes -> JobSpec -> config).
 *
 * Usage: test_planner CASE | all (CASE: defaults, check, flags, data,
 * jobspec, jobflags: the job flags' one table, planner/jobflags.h). Writes scratch files under $TMPDIR (or /tmp). Single-threaded. */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "jobcfg.h"
#include "jobflags.h"
#include "jobspec.h"
#include "pipesched.h"

#include "../px_check.h"

static char tmpdir[512], good[600];

/* A token file of `ntok` tokens i % modulo, plus `bad` at index bad_at
 * (bad_at < 0: none). */
static void write_tokens(const char *path, int ntok, int modulo, int bad_at, int bad)
{
    int32_t header[256] = {20240520, 1, ntok};
    FILE *f = fopen(path, "wb");
    fwrite(header, sizeof(header), 1, f);
    for (int i = 0; i < ntok; i++) {
        uint16_t t = (uint16_t)(i == bad_at ? bad : i % modulo);
        fwrite(&t, 2, 1, f);
    }
    fclose(f);
}

/* A valid dp=4 config on `good` (1000 tokens < 200). */
static void base(px_job_config_t *c)
{
    px_job_config_defaults(c);
    c->layers = 2;
    c->heads = 4;
    c->dim = 64;
    c->seq = 32;
    c->batch = 8;
    c->steps = 10;
    c->layout.dp = 4;
    c->data_path = good;
}

static void expect_check(const px_job_config_t *c, unsigned flags, px_status_t want,
                         const char *needle, int line)
{
    char err[512] = "";
    px_status_t st = px_job_config_check(c, flags, err, sizeof(err));
    if (st != want || (needle && !strstr(err, needle))) {
        fails++;
        fprintf(stderr, "FAIL %s:%d: status %d (want %d), message '%s' (want '%s')\n", __FILE__,
                line, st, want, err, needle ? needle : "");
    }
}
#define REJECT(c, flags, needle) expect_check(c, flags, PX_ERR_INVALID_ARGUMENT, needle, __LINE__)
#define ACCEPT(c, flags) expect_check(c, flags, PX_OK, NULL, __LINE__)

static void test_defaults(void)
{
    px_job_config_t c;
    memset(&c, 0x5a, sizeof(c));
    px_job_config_defaults(&c);
    CHECK(c.vocab == PX_DEFAULT_VOCAB && PX_DEFAULT_VOCAB == 256, "vocab %d", c.vocab);
    CHECK(c.layout.dp == 1 && c.layout.tp == 1 && c.layout.pp == 1 && c.layout.cp == 1 &&
           c.layout.ep == 1, "layout all 1");
    CHECK(c.grad_accum == 1 && c.lr == 2e-3f && c.min_lr_ratio == 0.1f && c.warmup_steps == -1 &&
           c.weight_decay == 0.1f && c.beta1 == 0.9f && c.beta2 == 0.95f && c.eps == 1e-8f &&
           c.grad_clip == 1.0f && c.seed == 1337 && c.zero == 0 && c.prefetch == 1,
           "optimizer and state defaults");
    CHECK(c.layers == 0 && c.heads == 0 && c.dim == 0 && c.seq == 0 && c.batch == 0 &&
           c.steps == 0 && c.checkpoint_every == 0 && !c.data_path && !c.checkpoint_dir &&
           !c.resume_dir && !c.export_safetensors, "sizes, steps and paths 0 / NULL");
    CHECK(px_job_config_padded_vocab(256) == 256 && px_job_config_padded_vocab(50257) == 50304 &&
           px_job_config_padded_vocab(1) == 64, "padded vocab");
}

static void test_check(void)
{
    px_job_config_t c;
    const unsigned D = PX_JOBCFG_CHECK_DATA;

    base(&c);
    ACCEPT(&c, D);
    /* sizes and ranges */
    const struct { int *field; int v; const char *want; } sizes[] = {
        {&c.layers, 0, "layers=0 is out of range (1..1024)"},
        {&c.heads, 2000, "heads=2000 is out of range (1..1024)"},
        {&c.dim, -1, "dim=-1 is out of range (1..65536)"},
        {&c.seq, 0, "seq=0 is out of range (1..1048576)"},
        {&c.vocab, 1, "vocab=1 is out of range (2..65536)"},
        {&c.vocab, 70000, "vocab=70000 is out of range (2..65536)"},
        {&c.batch, 0, "batch=0 is out of range (1..1048576)"},
        {&c.steps, 0, "steps=0 is out of range (1..1000000000)"},
        {&c.grad_accum, 0, "grad_accum=0 is out of range (1..1024)"},
    };
    for (size_t i = 0; i < sizeof(sizes) / sizeof(sizes[0]); i++) {
        base(&c);
        *sizes[i].field = sizes[i].v;
        REJECT(&c, 0, sizes[i].want);
    }
    /* the layout alone, then against the model and batch */
    base(&c);
    c.layout.dp = 0;
    REJECT(&c, 0, "dp=0 is out of range (1..65536)");
    base(&c);
    c.layout.ep = 3;
    REJECT(&c, PX_JOBCFG_LAYOUT_ONLY, "ep=3 does not divide dp x cp = 4");
    base(&c);
    c.dim = 130;
    REJECT(&c, 0, "dim=130 is not divisible by heads=4");
    base(&c);
    c.heads = 6;
    c.dim = 96;
    c.layout.dp = 1;
    c.layout.tp = 4;
    REJECT(&c, PX_JOBCFG_LAYOUT_ONLY, "heads=6 is not divisible by tp=4");
    /* the vocab rows (padded to 64) are split over the tensor group */
    base(&c);
    c.heads = 5;
    c.dim = 80;
    c.layout.dp = 1;
    c.layout.tp = 5;
    c.vocab = 50257;
    REJECT(&c, PX_JOBCFG_LAYOUT_ONLY, "padded vocab 50304 (vocab=50257 rounded up to 64) is not "
           "divisible by tp=5");
    /* sequence parallelism splits each sequence over the tensor group */
    base(&c);
    c.layout.dp = 1;
    c.layout.tp = 4;
    c.seq = 30;
    c.sequence_parallel = 1;
    REJECT(&c, PX_JOBCFG_LAYOUT_ONLY, "seq=30 is not divisible by tp=4 (sequence parallelism");
    c.sequence_parallel = 0;
    ACCEPT(&c, PX_JOBCFG_LAYOUT_ONLY);
    /* with context parallelism the tensor group splits each rank's B x
     * seq/cp tokens: seq 24 over cp 2 is 12 tokens a sequence, one sequence
     * a micro-batch, which tp 8 cannot split (the engine's gpt.c refuses it
     * at start) though seq % tp = 0; two sequences a micro-batch can */
    base(&c);
    c.layout = (px_layout_t){1, 8, 1, 2, 1};
    c.heads = 8;
    c.dim = 64;
    c.seq = 24;
    c.batch = 1;
    c.sequence_parallel = 1;
    REJECT(&c, 0, "a micro-batch of 1 x seq=24/cp=2 tokens per rank is not divisible by tp=8");
    c.batch = 2;
    ACCEPT(&c, 0);
    base(&c);
    c.layout.pp = 3;
    REJECT(&c, PX_JOBCFG_LAYOUT_ONLY, "layers=2 is fewer than pp=3 pipeline stages");
    base(&c);
    c.layout.cp = 3;
    c.layout.dp = 1;
    c.seq = 32;
    REJECT(&c, PX_JOBCFG_LAYOUT_ONLY, "seq=32 is not divisible by 2 x cp=3");
    c.seq = 30; /* 30 = 2 x 3 x 5 */
    ACCEPT(&c, PX_JOBCFG_LAYOUT_ONLY);
    base(&c);
    c.batch = 10;
    REJECT(&c, 0, "batch=10 is not divisible by dp=4 x grad_accum=1");
    c.batch = 8;
    c.grad_accum = 4;
    REJECT(&c, 0, "batch=8 is not divisible by dp=4 x grad_accum=4");
    c.batch = 16;
    ACCEPT(&c, D);
    /* the optimizer */
    base(&c);
    c.lr = 0.0f;
    REJECT(&c, 0, "lr=0 must be in (0, 10]");
    c.lr = NAN;
    REJECT(&c, 0, "lr=nan");
    base(&c);
    c.min_lr_ratio = 1.5f;
    REJECT(&c, 0, "min_lr_ratio=1.5 must be in [0, 1]");
    base(&c);
    c.warmup_steps = -2;
    REJECT(&c, 0, "warmup_steps=-2 must be >= 0");
    c.warmup_steps = 11;
    REJECT(&c, 0, "warmup_steps=11 exceeds steps=10");
    c.warmup_steps = 10;
    ACCEPT(&c, 0);
    base(&c);
    c.weight_decay = -0.1f;
    REJECT(&c, 0, "weight_decay=-0.1 must be in [0, 10]");
    base(&c);
    c.beta1 = 1.0f;
    REJECT(&c, 0, "beta1=1 must be in [0, 1)");
    base(&c);
    c.beta2 = -0.5f;
    REJECT(&c, 0, "beta2=-0.5 must be in [0, 1)");
    base(&c);
    c.eps = 0.0f;
    REJECT(&c, 0, "eps=0 must be positive");
    base(&c);
    c.grad_clip = -1.0f;
    REJECT(&c, 0, "grad_clip=-1 must be in [0, 1e+06] (0 = off)");
    c.grad_clip = 0.0f;
    ACCEPT(&c, 0);
    /* ZeRO and checkpoints */
    base(&c);
    c.zero = 4;
    REJECT(&c, 0, "zero=4 must be 0, 1, 2 or 3");
    base(&c);
    c.prefetch = 2;
    REJECT(&c, 0, "prefetch=2 must be 0 or 1");
    base(&c);
    c.bucket_mb = -1.0f;
    REJECT(&c, 0, "bucket_mb=-1 must be in [0, 4096] (0 = auto)");
    c.bucket_mb = NAN;
    REJECT(&c, 0, "bucket_mb=nan must be in [0, 4096]");
    c.bucket_mb = 0.5f;
    ACCEPT(&c, 0);
    base(&c);
    c.checkpoint_every = -1;
    REJECT(&c, 0, "checkpoint_every=-1 must be >= 0");
    c.checkpoint_every = 5;
    REJECT(&c, 0, "checkpoint_every=5 needs checkpoint_dir");
    c.checkpoint_dir = "/tmp/ck";
    ACCEPT(&c, 0);
    base(&c);
    c.data_path = NULL;
    REJECT(&c, 0, "data file: no path given (--data)");
    c.data_path = "";
    REJECT(&c, 0, "data file: no path given (--data)");
}

static void test_flags(void)
{
    px_job_config_t c;
    /* what the engine cannot run yet: rejected unless LAYOUT_ONLY */
    const struct { int tp, pp, cp, ep, dp; const char *want; } deg[] = {
        {1, 1, 1, 2, 2, "ep=2 needs experts (--experts E, a multiple of ep)"},
    };
    for (size_t i = 0; i < sizeof(deg) / sizeof(deg[0]); i++) {
        base(&c);
        c.layout = (px_layout_t){deg[i].dp, deg[i].tp, deg[i].pp, deg[i].cp, deg[i].ep};
        c.batch = 8;
        ACCEPT(&c, PX_JOBCFG_LAYOUT_ONLY);
        REJECT(&c, 0, deg[i].want);
    }
    /* the mixture of experts (issue 11): experts divided over ep, top-k
     * within the experts, a positive capacity unless dropless; dp and ep
     * only */
    base(&c);
    c.layout = (px_layout_t){4, 1, 1, 1, 4};
    c.batch = 8;
    c.experts = 8;
    ACCEPT(&c, 0);
    c.experts = 6;
    REJECT(&c, 0, "experts=6 is not divisible by ep=4");
    REJECT(&c, PX_JOBCFG_LAYOUT_ONLY, "experts=6 is not divisible by ep=4");
    c.experts = 1;
    c.layout.ep = 1;
    REJECT(&c, 0, "top_k=2 is larger than experts=1");
    c.top_k = 3;
    c.experts = 8;
    REJECT(&c, 0, "top_k=3 must be 1 or 2");
    c.top_k = 1;
    c.capacity_factor = 0.0f;
    REJECT(&c, 0, "capacity_factor=0 must be positive (or dropless)");
    c.dropless = 1;
    ACCEPT(&c, 0);
    c.moe_every = 0;
    REJECT(&c, 0, "moe_every=0 is out of range (1..layers=");
    c.moe_every = 1;
    c.layout = (px_layout_t){2, 1, 1, 1, 4};
    REJECT(&c, 0, "ep=4 does not divide dp x cp = 2");
    c.layout = (px_layout_t){2, 2, 1, 1, 2};
    ACCEPT(&c, 0); /* dp 2 x tp 2 x ep 2: experts replicated over tp (issue 11) */
    c.layout = (px_layout_t){1, 1, 1, 2, 2}; /* cp 2 x ep 2 (issue 11) */
    ACCEPT(&c, 0);
    c.layout = (px_layout_t){2, 1, 2, 1, 2}; /* dp 2 x ep 2 x pp 2 */
    c.micro_batches = 2;
    ACCEPT(&c, 0);
    c.schedule = PX_PIPE_ZB1;
    REJECT(&c, 0, "experts=8 with schedule zb1: the MoE layers have no split backward");
    c.schedule = PX_PIPE_1F1B;
    c.micro_batches = 1;
    c.layout = (px_layout_t){2, 1, 1, 1, 2};
    c.checkpoint_every = 5;
    c.checkpoint_dir = "/tmp/ck";
    ACCEPT(&c, 0); /* checkpoints carry the experts (moe_checkpoint.h) */
    c.export_safetensors = "/tmp/m.safetensors"; /* with the experts (moe_checkpoint.h) */
    ACCEPT(&c, 0);
    c.export_safetensors = NULL;
    /* context parallelism (issue 11): with dp, tp, sequence parallelism
     * ZeRO, checkpoints and every pipeline schedule */
    base(&c);
    c.layout = (px_layout_t){2, 2, 1, 2, 1};
    c.zero = 3;
    c.sequence_parallel = 1;
    ACCEPT(&c, 0);
    c.seq = 34;
    REJECT(&c, 0, "seq=34 is not divisible by 2 x cp=2");
    c.seq = 32;
    c.layout = (px_layout_t){1, 1, 2, 2, 1};
    c.zero = 0;
    c.micro_batches = 4;
    ACCEPT(&c, 0);
    c.schedule = PX_PIPE_ZB1;
    ACCEPT(&c, 0);
    c.schedule = PX_PIPE_GPIPE;
    c.micro_batches = 1;
    c.layout = (px_layout_t){1, 1, 1, 2, 1};
    c.checkpoint_every = 5;
    c.checkpoint_dir = "/tmp/ck";
    ACCEPT(&c, 0);
    /* pipeline parallelism: with dp, tp, ZeRO 0/1 and micro-batches */
    base(&c);
    c.layout = (px_layout_t){2, 1, 2, 1, 1};
    c.layers = 4;
    c.batch = 16;
    c.micro_batches = 4;
    c.zero = 1;
    ACCEPT(&c, 0);
    c.micro_batches = 3;
    REJECT(&c, 0, "batch=16 is not divisible by dp=2 x grad_accum=1 x micro_batches=3");
    c.micro_batches = 4;
    c.stage_layers = "3,2";
    REJECT(&c, 0, "stage_layers='3,2' sums to 5, layers=4");
    c.stage_layers = "3,1";
    ACCEPT(&c, 0);
    c.zero = 2;
    REJECT(&c, 0, "zero=2 with pp=2: pipeline parallelism runs with ZeRO 0 and 1 so far");
    c.zero = 0;
    c.layers = 1;
    c.stage_layers = NULL;
    REJECT(&c, 0, "layers=1 is fewer than pp=2 pipeline stages");
    /* interleaved 1F1B: Megatron-LM's rules, named */
    c.layers = 8;
    c.schedule = PX_PIPE_INTERLEAVED;
    c.virtual_stages = 2;
    ACCEPT(&c, 0);
    c.layers = 6;
    REJECT(&c, 0, "layers=6 is not divisible by pp=2 x virtual_stages=2");
    c.layers = 8;
    c.micro_batches = 1;
    REJECT(&c, 0, "micro_batches=1 is not a multiple of pp=2");
    c.micro_batches = 4;
    c.virtual_stages = 1;
    REJECT(&c, 0, "schedule interleaved with virtual_stages=1");
    c.virtual_stages = 2;
    c.stage_layers = "4,4";
    REJECT(&c, 0, "stage_layers='4,4' with schedule interleaved");
    c.stage_layers = NULL;
    c.schedule = PX_PIPE_GPIPE;
    REJECT(&c, 0, "virtual_stages=2 with schedule gpipe");
    c.schedule = PX_PIPE_1F1B;
    c.virtual_stages = 1;
    /* tensor parallelism runs with dp, ZeRO, sequence parallelism and
     * checkpoints */
    base(&c);
    c.layout = (px_layout_t){2, 2, 1, 1, 1};
    c.batch = 8;
    c.zero = 3;
    ACCEPT(&c, 0);
    c.sequence_parallel = 1;
    ACCEPT(&c, 0);
    c.seq = 15;
    REJECT(&c, 0, "seq=15 is not divisible by tp=2 (sequence parallelism");
    c.seq = 16;
    c.sequence_parallel = 0;
    c.checkpoint_every = 5;
    c.checkpoint_dir = "/tmp/ck";
    ACCEPT(&c, 0); /* tensor-parallel checkpoints re-cut (engine/checkpoint.h) */
    c.resume_dir = "/tmp/ck/step_5";
    ACCEPT(&c, 0);
    /* absolute paths, each named */
    const char *rel = "ck";
    const char **fields[] = {&c.data_path, &c.checkpoint_dir, &c.resume_dir,
                             &c.export_safetensors};
    const char *names[] = {"data='ck'", "checkpoint_dir='ck'", "resume_dir='ck'",
                           "export_safetensors='ck'"};
    for (int i = 0; i < 4; i++) {
        base(&c);
        *fields[i] = rel;
        REJECT(&c, PX_JOBCFG_ABSOLUTE_PATHS, names[i]);
        if (i > 0)
            ACCEPT(&c, 0); /* standalone ranks may use relative paths */
    }
}

static void test_data(void)
{
    char path[800], dir[700];
    px_job_config_t c;

    base(&c);
    snprintf(path, sizeof(path), "%s/big.bin", tmpdir);
    write_tokens(path, 500, 200, 42, 300);
    c.data_path = path;
    ACCEPT(&c, 0); /* not read without CHECK_DATA */
    REJECT(&c, PX_JOBCFG_CHECK_DATA,
           "token 300 >= vocab 256 (largest token 300; the first token >= vocab is at index 42)");
    c.vocab = 301;
    ACCEPT(&c, PX_JOBCFG_CHECK_DATA);
    base(&c);
    c.vocab = 100; /* good.bin: tokens 0..199, the first >= 100 at index 100 */
    REJECT(&c, PX_JOBCFG_CHECK_DATA, "token 100 >= vocab 100 (largest token 199;");
    base(&c);
    c.seq = 1000;
    REJECT(&c, PX_JOBCFG_CHECK_DATA, "seq=1000 needs 1001 tokens but data file");
    c.seq = 999;
    ACCEPT(&c, PX_JOBCFG_CHECK_DATA);
    base(&c);
    c.data_path = "/nonexistent/tokens.bin";
    expect_check(&c, PX_JOBCFG_CHECK_DATA, PX_ERR_NOT_FOUND, "/nonexistent/tokens.bin",
                 __LINE__);
    /* a resume needs meta.json */
    base(&c);
    snprintf(dir, sizeof(dir), "%s/step_5", tmpdir);
    mkdir(dir, 0700);
    c.resume_dir = dir;
    REJECT(&c, PX_JOBCFG_CHECK_DATA, "is an incomplete or missing checkpoint (cannot read "
           "meta.json");
    snprintf(path, sizeof(path), "%s/meta.json", dir);
    fclose(fopen(path, "w"));
    ACCEPT(&c, PX_JOBCFG_CHECK_DATA);
}

/* Packs and unpacks a spec (what crosses the wire and the spec file). */
static Parallax__V1__JobSpec *wire(const Parallax__V1__JobSpec *s)
{
    size_t n = parallax__v1__job_spec__get_packed_size(s);
    uint8_t *buf = malloc(n ? n : 1);
    parallax__v1__job_spec__pack(s, buf);
    Parallax__V1__JobSpec *out = parallax__v1__job_spec__unpack(NULL, n, buf);
    free(buf);
    return out;
}

static void test_jobspec(void)
{
    px_job_config_t c, back;
    px_jobspec_msg_t msg;
    Parallax__V1__JobSpec *u;

    /* the round trip of every field the wire carries */
    base(&c);
    c.vocab = 300;
    c.layout = (px_layout_t){2, 2, 3, 2, 4};
    c.batch = 24;
    c.grad_accum = 3;
    c.steps = 77;
    c.lr = 3e-4f;
    c.min_lr_ratio = 0.0f; /* 0 is a value here, not "default" */
    c.warmup_steps = 7;
    c.weight_decay = 0.0f;
    c.grad_clip = 0.5f;
    c.seed = 0;
    c.zero = 3;
    c.checkpoint_every = 5;
    c.checkpoint_dir = "/ck";
    c.resume_dir = "/ck/step_5";
    c.export_safetensors = "/out.safetensors";
    c.init_from = "/hf/gpt2";
    c.export_hf = "/hf/out";
    c.sequence_parallel = 1;
    c.bucket_mb = 0.25f;
    c.schedule = PX_PIPE_INTERLEAVED;
    c.virtual_stages = 3;
    c.micro_batches = 6;
    px_jobspec_from_config(&c, &msg);
    CHECK(msg.spec.dp == 2 && msg.spec.parallel == &msg.parallel && msg.parallel.tp == 2 &&
           msg.parallel.pp == 3 && msg.parallel.cp == 2 && msg.parallel.ep == 4,
           "JobSpec.dp is the data-parallel degree, parallel the layout");
    u = wire(&msg.spec);
    CHECK(u != NULL, "unpack");
    px_jobspec_to_config(u, &back);
    CHECK(back.layers == c.layers && back.heads == c.heads && back.dim == c.dim &&
           back.seq == c.seq && back.vocab == 300, "model round trip");
    CHECK(!memcmp(&back.layout, &c.layout, sizeof(c.layout)), "layout round trip: %d %d %d %d %d",
           back.layout.dp, back.layout.tp, back.layout.pp, back.layout.cp, back.layout.ep);
    CHECK(msg.parallel.sequence_parallel && back.sequence_parallel == 1,
           "sequence parallelism round trip");
    CHECK(back.schedule == PX_PIPE_INTERLEAVED && back.virtual_stages == 3 &&
           back.micro_batches == 6, "interleaved round trip: %d %d %d", back.schedule,
           back.virtual_stages, back.micro_batches);
    CHECK(back.batch == 24 && back.grad_accum == 3 && back.steps == 77 && back.lr == 3e-4f &&
           back.min_lr_ratio == 0.0f && back.warmup_steps == 7 && back.weight_decay == 0.0f &&
           back.grad_clip == 0.5f && back.seed == 0 && back.zero == 3 &&
           back.checkpoint_every == 5 && back.bucket_mb == 0.25f, "training round trip");
    CHECK(!strcmp(back.data_path, good) && !strcmp(back.checkpoint_dir, "/ck") &&
           !strcmp(back.resume_dir, "/ck/step_5") &&
           !strcmp(back.export_safetensors, "/out.safetensors") &&
           !strcmp(back.init_from, "/hf/gpt2") && !strcmp(back.export_hf, "/hf/out"),
           "paths round trip");
    CHECK(back.beta1 == 0.9f && back.beta2 == 0.95f && back.eps == 1e-8f && back.prefetch == 1,
           "not on the wire: defaults");
    parallax__v1__job_spec__free_unpacked(u, NULL);

    /* defaults survive the trip: clip off, warmup steps/20, no paths */
    base(&c);
    c.grad_clip = 0.0f;
    px_jobspec_from_config(&c, &msg);
    CHECK(msg.spec.grad_clip < 0.0f && msg.spec.warmup_steps == 0 &&
           !strcmp(msg.spec.checkpoint_dir, ""), "clip off is < 0, warmup -1 is 0");
    u = wire(&msg.spec);
    px_jobspec_to_config(u, &back);
    CHECK(back.grad_clip == 0.0f && back.warmup_steps == -1 && !back.checkpoint_dir &&
           !back.resume_dir && !back.export_safetensors && !back.init_from && !back.export_hf,
           "defaults round trip");
    parallax__v1__job_spec__free_unpacked(u, NULL);

    /* the mixture of experts (JobSpec.moe, issue 11): absent when dense; every
     * field round trips, aux loss coef 0 as < 0, zero fields the defaults */
    base(&c);
    px_jobspec_from_config(&c, &msg);
    CHECK(msg.spec.moe == NULL, "a dense job sends no MoeSpec");
    c.experts = 16;
    c.top_k = 1;
    c.capacity_factor = 2.5f;
    c.dropless = 1;
    c.moe_every = 2;
    c.aux_loss_coef = 0.0f;
    px_jobspec_from_config(&c, &msg);
    u = wire(&msg.spec);
    px_jobspec_to_config(u, &back);
    CHECK(back.experts == 16 && back.top_k == 1 && back.capacity_factor == 2.5f &&
           back.dropless == 1 && back.moe_every == 2 && back.aux_loss_coef == 0.0f,
           "moe round trip: %d %d %g %d %d %g", back.experts, back.top_k,
           (double)back.capacity_factor, back.dropless, back.moe_every,
           (double)back.aux_loss_coef);
    parallax__v1__job_spec__free_unpacked(u, NULL);
    {
        Parallax__V1__JobSpec s0 = PARALLAX__V1__JOB_SPEC__INIT;
        Parallax__V1__MoeSpec e0 = PARALLAX__V1__MOE_SPEC__INIT;
        e0.experts = 4;
        s0.moe = &e0;
        px_jobspec_to_config(&s0, &back);
        CHECK(back.experts == 4 && back.top_k == 2 && back.capacity_factor == 1.25f &&
               !back.dropless && back.moe_every == 1 && back.aux_loss_coef == 0.01f,
               "MoeSpec zeros: the defaults");
    }

    /* proto3 zeros mean "default"; an old client's spec has dp alone */
    Parallax__V1__JobSpec s = PARALLAX__V1__JOB_SPEC__INIT;
    Parallax__V1__ModelSpec m = PARALLAX__V1__MODEL_SPEC__INIT;
    m.layers = 2;
    m.heads = 2;
    m.dim = 32;
    m.seq = 16;
    s.model = &m;
    s.dp = 4;
    s.batch = 8;
    s.steps = 10;
    px_jobspec_to_config(&s, &c);
    CHECK(c.vocab == PX_DEFAULT_VOCAB && c.grad_accum == 1 && c.warmup_steps == -1 &&
           c.grad_clip == 1.0f && c.lr == 2e-3f && c.virtual_stages == 1, "wire zeros: vocab %d accum %d warmup %d "
           "clip %g lr %g", c.vocab, c.grad_accum, c.warmup_steps, c.grad_clip, c.lr);
    CHECK(c.layout.dp == 4 && c.layout.tp == 1 && c.layout.pp == 1 && c.layout.cp == 1 &&
           c.layout.ep == 1, "no `parallel`: dp = JobSpec.dp");
    /* issue 12: precision "" (an old client) is fp32; names round trip; an
     * unknown name is rejected, named; bf16 passes the whole check (the
     * engine runs it in every layout: "bf16 GEMM and attention operands, fp32 elsewhere") */
    CHECK(c.precision == PX_PRECISION_FP32, "precision \"\" is fp32");
    {
        px_job_config_t pc, pb;
        px_jobspec_msg_t pm;
        char perr[256];
        base(&pc);
        pc.precision = PX_PRECISION_BF16;
        px_jobspec_from_config(&pc, &pm);
        Parallax__V1__JobSpec *pu = wire(&pm.spec);
        CHECK(pu && !strcmp(pu->precision, "bf16"), "precision on the wire");
        px_jobspec_to_config(pu, &pb);
        CHECK(pb.precision == PX_PRECISION_BF16, "precision round trip");
        CHECK(px_job_config_check(&pb, 0, perr, sizeof(perr)) == PX_OK, "bf16 rejected: %s",
               perr);
        CHECK(px_job_config_check(&pb, PX_JOBCFG_LAYOUT_ONLY, perr, sizeof(perr)) == PX_OK,
               "bf16 planned: %s", perr);
        parallax__v1__job_spec__free_unpacked(pu, NULL);
        s.precision = "fp16";
        px_jobspec_to_config(&s, &pb);
        CHECK(pb.precision == -1 && px_job_config_check(&pb, PX_JOBCFG_LAYOUT_ONLY, perr,
               sizeof(perr)) == PX_ERR_INVALID_ARGUMENT &&
               strstr(perr, "precision='fp16' is not fp32 or bf16"),
               "unknown precision rejected, named as sent: %s", perr);
        s.precision = "";
        CHECK(px_job_config_precision_parse("fp32") == PX_PRECISION_FP32 &&
               px_job_config_precision_parse(NULL) == PX_PRECISION_FP32 &&
               !strcmp(px_job_config_precision_name(PX_PRECISION_BF16), "bf16"), "names");
    }
    Parallax__V1__ParallelSpec p = PARALLAX__V1__PARALLEL_SPEC__INIT;
    s.parallel = &p;
    p.tp = 2;
    px_jobspec_to_config(&s, &c);
    CHECK(c.layout.dp == 4 && c.layout.tp == 2 && c.layout.pp == 1,
           "parallel.dp 0: JobSpec.dp; other zeros: 1");
    p.dp = 2;
    s.grad_clip = -3.0f;
    px_jobspec_to_config(&s, &c);
    CHECK(c.layout.dp == 2 && c.grad_clip == 0.0f, "parallel.dp wins; clip < 0 is off");
    s.dp = 0;
    s.parallel = NULL;
    px_jobspec_to_config(&s, &c);
    c.data_path = good;
    REJECT(&c, 0, "dp=0 is out of range");
    s.model = NULL;
    px_jobspec_to_config(&s, &c);
    c.data_path = good;
    REJECT(&c, 0, "layers=0 is out of range");
}

/* --- the job flags' table (jobflags.h) --- */

static char last_flag[64]; /* the flag name the last parser was handed */

static int jf_int(void *arg, const char *flag, const char *s, int lo, int *out)
{
    (void)arg;
    snprintf(last_flag, sizeof(last_flag), "%s", flag);
    if (atoi(s) < lo)
        return -1;
    *out = atoi(s);
    return 0;
}

static int jf_float(void *arg, const char *flag, const char *s, double fmin, double fmax,
                    float *out)
{
    (void)arg;
    snprintf(last_flag, sizeof(last_flag), "%s", flag);
    if (fmin > fmax)
        return -1;
    *out = strtof(s, NULL);
    return 0;
}

static int jf_u64(void *arg, const char *flag, const char *s, uint64_t *out)
{
    (void)arg;
    snprintf(last_flag, sizeof(last_flag), "%s", flag);
    *out = strtoull(s, NULL, 10);
    return 0;
}

static int jf_bad(void *arg, const char *flag, const char *s)
{
    (void)arg;
    snprintf(last_flag, sizeof(last_flag), "%s=%s", flag, s);
    return -2;
}

/* The help the table generates: pctl's aliases, value names, wrapping. */
static void test_jobflags_help(void)
{
    char *buf = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&buf, &len);
    if (!f)
        return;
    px_job_flags_help(PX_JOB_FLAG_PCTL, f);
    fclose(f);
    CHECK(strstr(buf, "  --clip F (or --grad-clip)") &&
               strstr(buf, "\n  --precision fp32|bf16\n                     fp32 (default) or bf16") &&
               strstr(buf, "\n  --stage-layers 2,2,1,1\n") && !strstr(buf, "--no-prefetch"),
           "pctl's job flags help:\n%s", buf);
    for (char *line = buf; line && *line;) {
        char *nl = strchr(line, '\n');
        size_t n = nl ? (size_t)(nl - line) : strlen(line);
        CHECK(n <= 79, "help line of %zu columns: %.*s", n, (int)n, line);
        line = nl ? nl + 1 : NULL;
    }
    free(buf);
}

static void test_jobflags(void)
{
    const px_job_flag_parsers_t p = {jf_int, jf_float, jf_u64, jf_bad, NULL};
    struct option po[256], ro[256];
    size_t np = px_job_flags_options(PX_JOB_FLAG_PCTL, 1000, po, 256);
    size_t nr = px_job_flags_options(PX_JOB_FLAG_RANK, 1000, ro, 256);
    size_t both = 0, rank_only = 0, aliases = 0;

    CHECK(px_job_flags_n >= 40, "only %zu job flags", px_job_flags_n);
    for (size_t i = 0; i < px_job_flags_n; i++) {
        const px_job_flag_t *f = &px_job_flags[i];
        px_job_config_t c;
        char *field;

        CHECK(f->where && f->offset < sizeof(px_job_config_t), "--%s: where %u offset %zu",
               f->name, f->where, f->offset);
        /* pctl's help is generated from the table: every flag says what it is */
        CHECK(f->help && *f->help && (f->kind == PX_JOB_FLAG_SET) == !f->arg,
               "--%s: help '%s', value name '%s'", f->name, f->help ? f->help : "",
               f->arg ? f->arg : "");
        for (size_t j = 0; j < i; j++)
            CHECK(strcmp(f->name, px_job_flags[j].name) != 0, "--%s twice", f->name);
        CHECK(px_job_flag_of(1000 + (int)i, 1000) == f, "--%s: px_job_flag_of", f->name);
        both += f->where == PX_JOB_FLAG_BOTH;
        rank_only += f->where == PX_JOB_FLAG_RANK;
        aliases += f->pctl_alias != NULL && (f->where & PX_JOB_FLAG_PCTL);
        /* each kind lands in its field */
        px_job_config_defaults(&c);
        field = (char *)&c + f->offset;
        switch (f->kind) {
        case PX_JOB_FLAG_INT:
            CHECK(px_job_flag_apply(f, PX_JOB_FLAG_RANK, "77", &c, &p) == 0 &&
                   *(int *)(void *)field == 77, "--%s 77", f->name);
            break;
        case PX_JOB_FLAG_FLOAT:
            CHECK(px_job_flag_apply(f, PX_JOB_FLAG_RANK, "0.25", &c, &p) == 0 &&
                   *(float *)(void *)field == 0.25f, "--%s 0.25", f->name);
            break;
        case PX_JOB_FLAG_U64:
            CHECK(px_job_flag_apply(f, PX_JOB_FLAG_RANK, "99", &c, &p) == 0 && c.seed == 99,
                   "--%s 99", f->name);
            break;
        case PX_JOB_FLAG_STR:
        case PX_JOB_FLAG_PATH: {
            const char *v = "some/path";
            CHECK(px_job_flag_apply(f, PX_JOB_FLAG_RANK, v, &c, &p) == 0 &&
                   *(const char **)(void *)field == v, "--%s borrows its value", f->name);
            break;
        }
        case PX_JOB_FLAG_SET:
            *(int *)(void *)field = 5;
            CHECK(px_job_flag_apply(f, PX_JOB_FLAG_RANK, NULL, &c, &p) == 0 &&
                   *(int *)(void *)field == f->lo, "--%s sets %d", f->name, f->lo);
            break;
        case PX_JOB_FLAG_SCHEDULE:
            CHECK(px_job_flag_apply(f, PX_JOB_FLAG_RANK, "gpipe", &c, &p) == 0 &&
                   c.schedule == PX_PIPE_GPIPE, "--schedule gpipe");
            CHECK(px_job_flag_apply(f, PX_JOB_FLAG_RANK, "zigzag", &c, &p) == -2 &&
                   !strcmp(last_flag, "--schedule=zigzag"), "--schedule zigzag: %s", last_flag);
            break;
        case PX_JOB_FLAG_PRECISION:
            CHECK(px_job_flag_apply(f, PX_JOB_FLAG_RANK, "bf16", &c, &p) == 0 &&
                   c.precision == PX_PRECISION_BF16, "--precision bf16");
            CHECK(px_job_flag_apply(f, PX_JOB_FLAG_RANK, "fp64", &c, &p) == -2 &&
                   !strcmp(last_flag, "--precision=fp64"), "--precision fp64: %s", last_flag);
            break;
        }
    }
    /* pctl registers every shared flag and its aliases, parallax-rank every
     * shared flag and its own; getopt_long hands back base + index */
    CHECK(np == both + aliases && nr == both + rank_only, "options: pctl %zu (want %zu), rank "
           "%zu (want %zu)", np, both + aliases, nr, both + rank_only);
    for (size_t i = 0; i < nr; i++)
        CHECK(px_job_flag_of(ro[i].val, 1000) &&
               !strcmp(px_job_flag_of(ro[i].val, 1000)->name, ro[i].name) &&
               ro[i].has_arg == (px_job_flag_of(ro[i].val, 1000)->kind == PX_JOB_FLAG_SET
                                     ? no_argument : required_argument),
               "rank option --%s", ro[i].name);
    CHECK(px_job_flag_of(999, 1000) == NULL && px_job_flag_of(1000 + (int)px_job_flags_n,
                                                                1000) == NULL,
           "px_job_flag_of out of range");
    /* pctl's messages say --clip for --grad-clip; parallax-rank's --grad-clip */
    for (size_t i = 0; i < px_job_flags_n; i++) {
        px_job_config_t c;
        if (strcmp(px_job_flags[i].name, "grad-clip"))
            continue;
        px_job_config_defaults(&c);
        px_job_flag_apply(&px_job_flags[i], PX_JOB_FLAG_PCTL, "1", &c, &p);
        CHECK(!strcmp(last_flag, "--clip"), "pctl's label: %s", last_flag);
        px_job_flag_apply(&px_job_flags[i], PX_JOB_FLAG_RANK, "1", &c, &p);
        CHECK(!strcmp(last_flag, "--grad-clip"), "rank's label: %s", last_flag);
    }
    for (size_t i = 0; i < np; i++)
        if (!strcmp(po[i].name, "clip"))
            aliases--;
    CHECK(aliases == 0, "pctl's --clip alias not registered");
}

/* The canonical job text ranks compare at world start: one line per flag
 * that must agree, a changed flag changes exactly its line, file paths are
 * left out (they may differ between nodes), floats are exact. */
static void test_canon(void)
{
    px_job_config_t a, b;
    char ta[4096], tb[4096];
    int la, lb;

    px_job_config_defaults(&a);
    a.layers = 4, a.heads = 4, a.dim = 64, a.seq = 32, a.batch = 8, a.steps = 5;
    a.data_path = "/node-a/tokens.bin";
    b = a;
    b.data_path = "/node-b/tokens.bin";
    b.checkpoint_dir = "/node-b/ckpt";
    la = px_job_config_canon(&a, ta, sizeof(ta));
    lb = px_job_config_canon(&b, tb, sizeof(tb));
    CHECK(la > 0 && la == lb && !strcmp(ta, tb), "paths changed the text:\n%s\n%s", ta, tb);
    CHECK(strstr(ta, "--seq=32\n") && strstr(ta, "--tp=1\n") && strstr(ta, "--schedule=") &&
           !strstr(ta, "--data=") && !strstr(ta, "--checkpoint-dir="), "text:\n%s", ta);
    b.seq = 16;
    px_job_config_canon(&b, tb, sizeof(tb));
    CHECK(strstr(tb, "--seq=16\n") && strcmp(ta, tb), "--seq 16 not in:\n%s", tb);
    b = a;
    b.lr = nextafterf(a.lr, 1.0f); /* one ulp: a different run */
    px_job_config_canon(&b, tb, sizeof(tb));
    CHECK(strcmp(ta, tb) != 0, "lr one ulp apart gave the same text");
    CHECK(px_job_config_canon(&a, ta, 16) == -1, "a 16-byte buffer did not fail");
}

int main(int argc, char **argv)
{
    static const struct { const char *name; void (*fn)(void); } cases[] = {
        {"defaults", test_defaults}, {"check", test_check}, {"flags", test_flags},
        {"data", test_data}, {"jobspec", test_jobspec}, {"jobflags", test_jobflags},
        {"canon", test_canon}, {"jobflags_help", test_jobflags_help}};
    const char *which = argc > 1 ? argv[1] : "all";
    const char *t = getenv("TMPDIR");
    int ran = 0;
    char cmd[700];

    snprintf(tmpdir, sizeof(tmpdir), "%s/px_test_planner_XXXXXX", t && *t ? t : "/tmp");
    if (!mkdtemp(tmpdir)) {
        perror("mkdtemp");
        return 1;
    }
    snprintf(good, sizeof(good), "%s/good.bin", tmpdir);
    write_tokens(good, 1000, 200, -1, 0);
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        if (strcmp(which, "all") && strcmp(which, cases[i].name))
            continue;
        printf("%s\n", cases[i].name);
        cases[i].fn();
        ran++;
    }
    snprintf(cmd, sizeof(cmd), "rm -rf '%s'", tmpdir);
    if (system(cmd) != 0)
        fprintf(stderr, "could not remove %s\n", tmpdir);
    if (!ran)
        return 2;
    printf(fails ? "FAILED (%d)\n" : "OK\n", fails);
    return fails ? 1 : 0;
}
