/* rank_main.c: parallax-rank, one rank process of a training job.
 *
 * Spawned by its daemon:
 *   parallax-rank --spec-file PATH --coord HOST:PORT --job ID --rank R
 *                 --world N --node NAME
 * the job's JobSpec, packed (protobuf-c) by the supervisor into the job's
 * run directory, converted with jobspec.h: the rank trains exactly the spec
 * the daemon validated, with the same defaults.
 *
 * Standalone (tests, Slurm / mpirun launches):
 *   parallax-rank --layers N --heads N --dim N --seq N [--vocab N] --batch N
 *                 --steps N [--lr F] [--seed N] --data PATH [--warmup N]
 *                 [--weight-decay F] [--min-lr-ratio F] [--grad-clip F]
 *                 [--metrics-out FILE] [--export-init DIR] [--dump-dir DIR]
 *                 [--dump-steps N] [--zero 0-3] [--grad-accum N]
 *                 [--checkpoint-every N --checkpoint-dir DIR] [--resume DIR]
 *                 [--export-safetensors FILE] [--no-prefetch] [--bucket-mb F]
 *                 [--init-from HF_DIR_OR_FILE] [--export-hf DIR] [--tensorboard DIR]
 *                 [--dp N] [--tp N] [--pp N] [--cp N] [--ep N]
 * (or --spec-file PATH instead of the job flags). The layout's world must be
 * PX_WORLD_SIZE (1 when unset); --dp defaults to PX_WORLD_SIZE / (tp x pp x
 * cp), so the data-parallel invocations of old keep working.
 *
 * Either way the config is checked by px_job_config_check (jobcfg.h), the
 * validator pctl and parallaxd use. Modes: with --coord (daemon mode) the
 * rank registers with its coordinator (px_rank_link.h) and reports every
 * step; otherwise with PX_WORLD_SIZE > 1 the standalone bootstrap
 * (px_bootstrap.h) builds the world; otherwise it trains alone (comm NULL).
 * --export-init DIR writes the initial parameters, the layout and the first
 * global batch (observers.h px_observer_dump) and exits; with --export-hf
 * the initial weights are exported there too (with --init-from: a
 * Hugging Face GPT-2 read in and written out, no step taken).
 *
 * Output: one line per step on stdout; with --metrics-out one JSON object
 * per line. Exit status: 0 success, 1 runtime error (logged), 2 bad
 * arguments. Single-threaded (OpenBLAS runs 1 thread unless
 * OPENBLAS_NUM_THREADS says otherwise). */
#include <errno.h>
#include <getopt.h>
#include <jansson.h>
#include <limits.h>
#include <math.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/time.h>
#include <unistd.h>

#include "cluster.h"
#include "jobflags.h"
#include "jobspec.h"
#include "px_blas_core.h"
#include "px_env.h"
#include "px_kernels_select.h"
#include "px_log.h"
#include "pipesched.h"
#include "steptime.h"
#include "observers.h"
#include "px_tb.h"
#include "px_train.h"
#include "px_rank_link.h"
#include "px_world.h"
#include "sample_rank.h"
#include "bench.h" /* --bench-* flags: collectives benchmark mode (bench_rank.c) */

typedef struct rank_args {
    px_train_config_t cfg;
    const char *metrics_out, *export_dir, *dump_dir;
    int dump_steps;
    int print_all_ranks;         /* --print-all-ranks: every rank prints its step lines */
    int test_norm_ones;          /* --test-norm-ones (observers.h px_observer_norm_ones) */
    int replica_digests;         /* --replica-digests (observers.h px_observer_digests) */
    float router_skew;           /* --test-router-skew B (moe.h px_moe_set_router_skew) */
    const char *device;          /* --device cpu[:N] | cuda[:K] | sim (px_kernels_select.h) */
    const char *coord, *job, *node;
    int rank, world;
    const char *spec_file;
    Parallax__V1__JobSpec *spec; /* unpacked --spec-file; cfg's strings point into it */
    const char *job_flag;        /* first job flag given (not allowed with --spec-file) */
    int dp_set;                  /* --dp given */
    px_rank_sample_args_t sample; /* --sample WEIGHTS: the sample mode (sample_rank.h) */
} rank_args_t;

/* The observers (observers.h) the flags ask for into obs (4), in the order
 * they run: the test hooks first (norm-ones ends the run at its start), the
 * dumps (export_only: --export-init's, which end it too), the end-of-run
 * figures. Their count, or -1 when one cannot be made; free them with
 * observers_free. */
static int observers_of(const rank_args_t *a, int export_only, px_train_observer_t *obs)
{
    int n = 0;
    if (a->test_norm_ones)
        obs[n++] = px_observer_norm_ones();
    if (a->replica_digests)
        obs[n++] = px_observer_digests();
    const char *dir = export_only ? a->export_dir : a->dump_dir;
    if (dir && *dir) {
        if (px_observer_dump(dir, export_only ? 0 : a->dump_steps, export_only, &obs[n]) != PX_OK)
            return -1;
        n++;
    }
    obs[n++] = px_observer_run_report();
    return n;
}

static void observers_free(px_train_observer_t *obs, int n)
{
    for (int i = 0; i < n; i++)
        if (obs[i].destroy)
            obs[i].destroy(obs[i].arg);
}

typedef struct step_ctx {
    FILE *metrics;
    int rank;
    int print; /* print the step line on stdout */
    px_rank_link_t *link;
    px_tb_t *tb;       /* rank 0 with --tensorboard: the run's event file */
    int64_t tb_after;  /* steps up to this one the run's files already hold */
    double flops_per_token; /* px_step_model_flops_per_token of the job */
    double peak;       /* one device's peak FLOP/s (PX_PEAK_TFLOPS, else by the
                          CUDA device's name at the precision); 0: none known */
    int precision;     /* the job's (jobcfg.h), for the peak by name */
    int world;
    int devices;       /* the physical devices the world runs on
                          (PX_JOB_DEVICES, else world): MFU's peaks */
    int peak_known;    /* 1 once peak is decided (the first step: the CUDA
                          device is open by then) */
} step_ctx_t;

/* PX_PEAK_TFLOPS into *peak_p in FLOP/s (0 when unset); -1 with an error
 * naming the value when it is not a finite number > 0. */
static int peak_knob(double *peak_p)
{
    const char *v = px_env_str("PX_PEAK_TFLOPS");
    char *end;
    *peak_p = 0;
    if (!*v)
        return 0;
    errno = 0;
    double t = strtod(v, &end);
    if (end == v || *end || errno || !isfinite(t) || t <= 0) {
        px_error("PX_PEAK_TFLOPS=%s: not a peak in TFLOP/s (a number > 0)", v);
        return -1;
    }
    *peak_p = t * 1e12;
    return 0;
}

/* The devices MFU counts peaks of: PX_JOB_DEVICES, the physical devices
 * the daemon placed the job's ranks on (several ranks on the slots of one
 * GPU share its one peak), else the world (a rank a device). A value out of
 * 1..world is a warning and the world. */
static int mfu_devices(int world)
{
    long d = px_env_int("PX_JOB_DEVICES");
    if (d >= 1 && d <= world)
        return (int)d;
    if (*px_env_str("PX_JOB_DEVICES") && strcmp(px_env_str("PX_JOB_DEVICES"), "0"))
        px_warn("PX_JOB_DEVICES=%s: not a device count in 1..%d (the world); MFU counts "
                "a device a rank", px_env_str("PX_JOB_DEVICES"), world);
    return world;
}

/* Model FLOPs utilisation of step r (PaLM's MFU, Chowdhery et al. 2022,
 * appendix B): the model FLOPs of the step's tokens a second over the
 * peak of the devices the job runs on, flops_per_token x tokens/s /
 * (devices x peak), devices the physical ones (mfu_devices). 0 where no
 * peak is known (a CPU, an unknown GPU, without PX_PEAK_TFLOPS): there the
 * step has no MFU, not a zero one. */
static double step_mfu(step_ctx_t *ctx, const px_step_report_t *r)
{
    if (!ctx->peak_known) {
        char name[256];
        if (!(ctx->peak > 0) && px_kernels_cuda_device_name(name, sizeof(name)) == 0)
            ctx->peak = px_cluster_device_peak(name, ctx->precision);
        ctx->peak_known = 1;
    }
    if (!(ctx->peak > 0) || !(r->tokens_per_second > 0))
        return 0;
    return ctx->flops_per_token * r->tokens_per_second / (ctx->devices * ctx->peak);
}

/* --tensorboard DIR on rank 0: DIR's new event file, after the steps an
 * earlier start of the job (a restart resuming from a checkpoint) wrote
 * there. A DIR that cannot be written is a warning: training goes on. */
static void tb_open(step_ctx_t *ctx, const char *dir)
{
    char err[4600];
    if (ctx->rank != 0 || !dir || !*dir)
        return;
    ctx->tb = px_tb_open(dir, err, sizeof(err));
    if (!ctx->tb) {
        px_warn("tensorboard: %s; training goes on without event files", err);
        return;
    }
    ctx->tb_after = px_tb_last_step(ctx->tb);
    px_info("tensorboard: writing %s%s", px_tb_path(ctx->tb),
            ctx->tb_after >= 0 ? " (after the steps the run already holds)" : "");
}

/* The step's scalars into the event file, flushed so `tensorboard
 * --logdir` sees the step now; a step the run already holds is skipped.
 * A failed write closes the file with a warning. */
static void tb_step(step_ctx_t *ctx, const px_step_report_t *r, double mfu)
{
    struct timeval now;
    if (!ctx->tb || r->step <= ctx->tb_after)
        return;
    gettimeofday(&now, NULL);
    double t = (double)now.tv_sec + now.tv_usec / 1e6;
    int64_t s = r->step;
    int bad = px_tb_scalar(ctx->tb, "train/loss", s, t, r->loss) ||
              px_tb_scalar(ctx->tb, "train/grad_norm", s, t, r->grad_norm) ||
              px_tb_scalar(ctx->tb, "train/lr", s, t, r->lr) ||
              px_tb_scalar(ctx->tb, "train/tokens_per_second", s, t,
                           (float)r->tokens_per_second) ||
              (r->val_loss > 0.0f && px_tb_scalar(ctx->tb, "val/loss", s, t, r->val_loss)) ||
              (mfu > 0 && px_tb_scalar(ctx->tb, "train/mfu", s, t, (float)mfu)) ||
              px_tb_flush(ctx->tb);
    if (bad) {
        px_warn("tensorboard: cannot write %s: %s; no more event files", px_tb_path(ctx->tb),
                strerror(errno));
        px_tb_close(ctx->tb);
        ctx->tb = NULL;
    }
}

static void usage(FILE *out)
{
    fprintf(out,
            "usage: parallax-rank --layers N --heads N --dim N --seq N [--vocab N]\n"
            "         --batch N --steps N [--lr F] [--seed N] --data PATH [--warmup N]\n"
            "         [--weight-decay F] [--min-lr-ratio F] [--grad-clip F]\n"
            "         [--metrics-out FILE (%%r: the rank)] [--print-all-ranks] [--export-init DIR]\n"
            "         [--dump-dir DIR] [--dump-steps N] [--zero 0-3] [--grad-accum N]\n"
            "         [--checkpoint-every N --checkpoint-dir DIR] [--resume STEP_DIR]\n"
            "         [--export-safetensors FILE] [--no-prefetch] [--test-norm-ones]\n"
            "         [--init-from HF_DIR_OR_FILE] [--export-hf DIR (Hugging Face GPT-2)]\n"
            "         [--tensorboard DIR (rank 0 writes TensorBoard events into DIR)]\n"
            "         [--bucket-mb F (data-parallel gradient bucket, MiB; 0 = auto)]\n"
            "         [--replica-digests] [--test-router-skew B]\n"
            "         [--val-data PATH [--eval-every N] [--eval-batches K]]\n"
            "         [--device cpu|cuda|cuda:K|sim] (default cpu; sim: the simulated\n"
            "          device for tests, with PX_SIM_DEVICE=1)\n"
            "         [--precision fp32|bf16] (default fp32; bf16: bf16 GEMM and attention operands, fp32 elsewhere)\n"
            "         [--dp N] [--tp N] [--pp N] [--cp N] [--ep N] [--sequence-parallel]\n"
            "         [--micro-batches M] [--schedule gpipe|1f1b|zb1|interleaved]\n"
            "         [--virtual-stages V] (interleaved: model chunks per stage) [--stage-layers 2,2,1,1]\n"
            "         [--print-schedule] (prints the pp x micro-batches schedule and exits)\n"
            "         [--experts E [--top-k 1|2] [--capacity-factor F | --dropless]\n"
            "          [--moe-every N] [--aux-loss-coef C]] (mixture of experts, over --ep)\n"
            "         [--coord HOST:PORT --job ID --rank R --world N --node NAME]\n"
            "   or: parallax-rank (--spec-file PATH | the model flags) --sample WEIGHTS\n"
            "         [--sample-prompt TEXT | --sample-prompt-file FILE] [--sample-tokens N]\n"
            "         [--sample-temperature T (0: greedy)] [--sample-top-k K (0: all)]\n"
            "         [--sample-seed S] [--sample-ids FILE] [--tokenizer tokenizer.json]\n"
            "         (text from a safetensors file, a step_<N>/ checkpoint or a Hugging Face\n"
            "          GPT-2 directory of the model on stdout; coded by --tokenizer, else the\n"
            "          tokenizer beside --data (book.bin: book.tokenizer.json), else bytes;\n"
            "          defaults 256 tokens, temperature 1, seed 1337)\n"
            "   or: parallax-rank --spec-file PATH [--coord ... --job ... --rank ... --world ...\n"
            "         --node ...] (the job's packed JobSpec instead of the job flags)\n"
            "   or: parallax-rank --blas-core (prints, for parallaxd, the OpenBLAS core this\n"
            "         environment's ranks run: \"blas-core CHILD NODE SOURCE\", and exits)\n"
            "Defaults: --vocab %d --lr 2e-3 --seed 1337 --warmup steps/20 --weight-decay 0.1\n"
            "--min-lr-ratio 0.1 --grad-clip 1.0 --dump-steps 5 --eval-every steps/10 (0: at the end)\n"
            "--eval-batches 4, --dp PX_WORLD_SIZE / (tp x pp x cp),\n"
            "--tp/--pp/--cp/--ep 1.\n"
            "Without --coord, PX_RANK/PX_WORLD_SIZE/PX_MASTER_ADDR/PX_MASTER_PORT select\n"
            "the standalone bootstrap (PX_WORLD_SIZE > 1); without those, srun's\n"
            "SLURM_PROCID/SLURM_NTASKS/SLURM_JOB_NODELIST or mpirun's\n"
            "OMPI_COMM_WORLD_RANK/SIZE do (mpirun -np 4 parallax-rank ...).\n", PX_DEFAULT_VOCAB);
}

static int parse_int(const char *opt, const char *s, int min, int *out)
{
    char *end;
    errno = 0;
    long v = strtol(s, &end, 10);
    if (errno || end == s || *end || v < min || v > INT_MAX) {
        fprintf(stderr, "parallax-rank: --%s: bad value '%s' (integer >= %d expected)\n", opt, s,
                min);
        return -1;
    }
    *out = (int)v;
    return 0;
}

/* An integer of any sign (the range is the caller's check, which names it). */
static int parse_int_any(const char *opt, const char *s, int *out)
{
    char *end;
    errno = 0;
    long v = strtol(s, &end, 10);
    if (errno || end == s || *end || v < INT_MIN || v > INT_MAX) {
        fprintf(stderr, "parallax-rank: --%s: bad value '%s' (integer expected)\n", opt, s);
        return -1;
    }
    *out = (int)v;
    return 0;
}

static int parse_float(const char *opt, const char *s, float *out)
{
    char *end;
    errno = 0;
    float v = strtof(s, &end);
    if (errno || end == s || *end) {
        fprintf(stderr, "parallax-rank: --%s: bad value '%s' (number expected)\n", opt, s);
        return -1;
    }
    *out = v;
    return 0;
}

/* Reads and unpacks the packed JobSpec at `path` into a->spec and converts
 * it into a->cfg (its strings borrowed from a->spec). Returns 0, or -1
 * after printing why. */
static int read_spec_file(const char *path, rank_args_t *a)
{
    FILE *f = fopen(path, "rb");
    uint8_t *buf = NULL;
    long len;
    int ret = -1;

    if (!f) {
        fprintf(stderr, "parallax-rank: --spec-file %s: %s\n", path, strerror(errno));
        return -1;
    }
    if (fseek(f, 0, SEEK_END) || (len = ftell(f)) < 0 || fseek(f, 0, SEEK_SET)) {
        fprintf(stderr, "parallax-rank: --spec-file %s: %s\n", path, strerror(errno));
        goto out;
    }
    if (len > (16l << 20)) {
        fprintf(stderr, "parallax-rank: --spec-file %s: %ld bytes, more than a JobSpec (16 MiB)\n",
                path, len);
        goto out;
    }
    buf = malloc(len ? (size_t)len : 1);
    if (!buf || fread(buf, 1, (size_t)len, f) != (size_t)len) {
        fprintf(stderr, "parallax-rank: --spec-file %s: cannot read %ld bytes\n", path, len);
        goto out;
    }
    a->spec = parallax__v1__job_spec__unpack(NULL, (size_t)len, buf);
    if (!a->spec) {
        fprintf(stderr, "parallax-rank: --spec-file %s: not a packed parallax.v1.JobSpec "
                "(%ld bytes)\n", path, len);
        goto out;
    }
    px_jobspec_to_config(a->spec, &a->cfg);
    ret = 0;
out:
    free(buf);
    fclose(f);
    return ret;
}

/* The job flags' parsers (jobflags.h), with parallax-rank's messages. */
static int flag_int(void *arg, const char *flag, const char *s, int lo, int *out)
{
    (void)arg;
    return parse_int(flag + 2, s, lo, out);
}

static int flag_float(void *arg, const char *flag, const char *s, double fmin, double fmax,
                      float *out)
{
    (void)arg, (void)fmin, (void)fmax; /* ranges: the validator's (jobcfg.h) */
    return parse_float(flag + 2, s, out);
}

static int flag_u64(void *arg, const char *flag, const char *s, uint64_t *out)
{
    char *end;
    unsigned long long v;

    (void)arg;
    errno = 0;
    v = strtoull(s, &end, 10);
    if (errno || end == s || *end || s[0] == '-') {
        fprintf(stderr, "parallax-rank: %s: bad value '%s'\n", flag, s);
        return -1;
    }
    *out = v;
    return 0;
}

static int flag_bad_name(void *arg, const char *flag, const char *s)
{
    (void)arg;
    if (!strcmp(flag, "--schedule"))
        fprintf(stderr, "parallax-rank: --schedule: '%s' is not gpipe, 1f1b, zb1 or interleaved\n",
                s);
    else
        fprintf(stderr, "parallax-rank: %s: '%s' is not fp32 or bf16\n", flag, s);
    return -1;
}

/* Returns 0, or -1 after printing why (exit 2). */
static int parse_args(int argc, char **argv, rank_args_t *a)
{
    /* the rank's own flags; the job flags (jobflags.h) from O_JOB_FLAG on */
    enum { O_METRICS = 256, O_EXPORT, O_DUMP, O_DUMPSTEPS, O_COORD, O_JOB, O_RANK, O_WORLD, O_NODE,
           O_HELP, O_SPEC_FILE, O_NORM_ONES, O_PRINT_SCHED, O_DIGESTS, O_SKEW, O_DEVICE,
           O_PRINT_ALL, O_SAMPLE, O_S_PROMPT, O_S_PROMPT_FILE, O_S_TOKENS, O_S_TEMP, O_S_TOPK,
           O_S_SEED, O_S_IDS, O_S_TOKENIZER, O_JOB_FLAG = 1024 };
    static const struct option own[] = {
        {"metrics-out", 1, 0, O_METRICS}, {"export-init", 1, 0, O_EXPORT},
        {"dump-dir", 1, 0, O_DUMP}, {"dump-steps", 1, 0, O_DUMPSTEPS},
        {"coord", 1, 0, O_COORD}, {"job", 1, 0, O_JOB}, {"rank", 1, 0, O_RANK},
        {"world", 1, 0, O_WORLD}, {"node", 1, 0, O_NODE}, {"help", 0, 0, O_HELP},
        {"print-schedule", 0, 0, O_PRINT_SCHED},
        {"spec-file", 1, 0, O_SPEC_FILE}, {"test-norm-ones", 0, 0, O_NORM_ONES},
        {"replica-digests", 0, 0, O_DIGESTS}, {"test-router-skew", 1, 0, O_SKEW},
        {"device", 1, 0, O_DEVICE}, {"print-all-ranks", 0, 0, O_PRINT_ALL},
        {"sample", 1, 0, O_SAMPLE}, {"sample-prompt", 1, 0, O_S_PROMPT},
        {"sample-prompt-file", 1, 0, O_S_PROMPT_FILE}, {"sample-tokens", 1, 0, O_S_TOKENS},
        {"sample-temperature", 1, 0, O_S_TEMP}, {"sample-top-k", 1, 0, O_S_TOPK},
        {"sample-seed", 1, 0, O_S_SEED}, {"sample-ids", 1, 0, O_S_IDS},
        {"tokenizer", 1, 0, O_S_TOKENIZER}};
    const px_job_flag_parsers_t parsers = {flag_int, flag_float, flag_u64, flag_bad_name, NULL};
    struct option opts[sizeof(own) / sizeof(own[0]) + 2 * 64 + 1];
    size_t nopt = sizeof(own) / sizeof(own[0]);
    int c, idx, r = 0, print_sched = 0;

    memcpy(opts, own, sizeof(own));
    nopt += px_job_flags_options(PX_JOB_FLAG_RANK, O_JOB_FLAG, opts + nopt,
                                 sizeof(opts) / sizeof(opts[0]) - nopt - 1);
    memset(&opts[nopt], 0, sizeof(opts[nopt]));
    memset(a, 0, sizeof(*a));
    px_job_config_defaults(&a->cfg);
    px_rank_sample_defaults(&a->sample);
    a->rank = -1;
    a->world = 0;
    a->dump_steps = 5;
    opterr = 0;
    while ((c = getopt_long(argc, argv, "", opts, &idx)) != -1) {
        const px_job_flag_t *f = px_job_flag_of(c, O_JOB_FLAG);
        const char *name = NULL;
        for (int i = 0; opts[i].name; i++)
            if (opts[i].val == c)
                name = opts[i].name;
        if (f) { /* a job flag: the table says where it goes */
            if (!a->job_flag)
                a->job_flag = f->name;
            r = px_job_flag_apply(f, PX_JOB_FLAG_RANK, optarg, &a->cfg, &parsers);
            if (f->offset == offsetof(px_job_config_t, layout.dp))
                a->dp_set = 1;
            if (r)
                return -1;
            continue;
        }
        switch (c) {
        case O_METRICS: a->metrics_out = optarg; break;
        case O_EXPORT: a->export_dir = optarg; break;
        case O_DUMP: a->dump_dir = optarg; break;
        case O_DUMPSTEPS: r = parse_int(name, optarg, 0, &a->dump_steps); break;
        case O_COORD: a->coord = optarg; break;
        case O_JOB: a->job = optarg; break;
        case O_RANK: r = parse_int(name, optarg, 0, &a->rank); break;
        case O_WORLD: r = parse_int(name, optarg, 1, &a->world); break;
        case O_NODE: a->node = optarg; break;
        case O_PRINT_SCHED: print_sched = 1; break;
        case O_SPEC_FILE: a->spec_file = optarg; break;
        case O_NORM_ONES: a->test_norm_ones = 1; break;
        case O_DIGESTS: a->replica_digests = 1; break;
        case O_SKEW: r = parse_float(name, optarg, &a->router_skew); break;
        case O_DEVICE: a->device = optarg; break;
        case O_PRINT_ALL: a->print_all_ranks = 1; break;
        case O_SAMPLE: a->sample.weights = optarg; break;
        case O_S_PROMPT: a->sample.prompt = optarg; break;
        case O_S_PROMPT_FILE: a->sample.prompt_file = optarg; break;
        case O_S_TOKENS: r = parse_int(name, optarg, 0, &a->sample.opts.tokens); break;
        case O_S_TEMP: r = parse_float(name, optarg, &a->sample.opts.temperature); break;
        case O_S_TOPK: r = parse_int_any(name, optarg, &a->sample.opts.top_k); break;
        case O_S_SEED: r = flag_u64(NULL, "--sample-seed", optarg, &a->sample.opts.seed); break;
        case O_S_IDS: a->sample.ids_out = optarg; break;
        case O_S_TOKENIZER: a->sample.tokenizer = optarg; break;
        case O_HELP: usage(stdout); exit(0);
        default:
            fprintf(stderr, "parallax-rank: unknown or incomplete option '%s'\n",
                    argv[optind - 1]);
            usage(stderr);
            return -1;
        }
        if (r)
            return -1;
    }
    if (optind < argc) {
        fprintf(stderr, "parallax-rank: unexpected argument '%s'\n", argv[optind]);
        return -1;
    }
    if (a->spec_file) {
        if (a->job_flag) {
            fprintf(stderr, "parallax-rank: --%s cannot be given with --spec-file (the spec "
                    "file carries the whole job)\n", a->job_flag);
            return -1;
        }
        if (read_spec_file(a->spec_file, a))
            return -1;
    }
    if (print_sched) { /* the schedule as data, without running it */
        px_pipe_schedule_t *sc = NULL;
        char err[256];
        int pp = a->cfg.layout.pp > 0 ? a->cfg.layout.pp : 1;
        if (a->cfg.schedule == PX_PIPE_INTERLEAVED &&
            px_pipe_interleaved_check(a->cfg.layers > 0 ? a->cfg.layers : pp * a->cfg.virtual_stages,
                                      pp, a->cfg.virtual_stages, a->cfg.micro_batches, err,
                                      sizeof(err)) != PX_OK) {
            fprintf(stderr, "parallax-rank: --print-schedule: %s\n", err);
            return -1;
        }
        if (px_pipe_schedule_create_v(a->cfg.schedule, pp, a->cfg.micro_batches,
                                      a->cfg.virtual_stages, &sc) != PX_OK) {
            fprintf(stderr, "parallax-rank: --print-schedule: cannot build it (virtual_stages=%d "
                    "needs schedule interleaved)\n", a->cfg.virtual_stages);
            return -1;
        }
        px_pipe_schedule_print(sc, stdout);
        px_status_t st = px_pipe_schedule_check(sc, err, sizeof(err));
        printf("check: %s\n", st == PX_OK ? "ok (deadlock-free, forward before backward)" : err);
        px_pipe_schedule_destroy(sc);
        exit(st == PX_OK ? 0 : 1);
    }
    if (a->coord && (!a->job || a->rank < 0 || a->world < 1 || !a->node)) {
        fprintf(stderr, "parallax-rank: --coord needs --job, --rank, --world and --node\n");
        return -1;
    }
    if (a->coord && a->rank >= a->world) {
        fprintf(stderr, "parallax-rank: --rank %d is not below --world %d\n", a->rank, a->world);
        return -1;
    }
    return 0;
}

/* The layout's dp when not given (standalone): the ranks of the world
 * (PX_WORLD_SIZE) left after tp x pp x cp. */
static void default_dp(rank_args_t *a, int world)
{
    px_layout_t *l = &a->cfg.layout;
    long inner = (long)l->tp * l->pp * l->cp;

    if (!a->spec && !a->dp_set)
        l->dp = inner > 0 && world % inner == 0 ? (int)(world / inner) : world;
}

/* Returns 0 if the (checked) layout fills the world this rank belongs to
 * (--world, or PX_WORLD_SIZE standalone), else -1 after printing why. */
static int check_world(const rank_args_t *a, int world)
{
    char lbuf[128];

    if (px_layout_world(&a->cfg.layout) == world)
        return 0;
    fprintf(stderr, "parallax-rank: layout %s does not match the world of %d ranks (%s)\n",
            px_layout_str(&a->cfg.layout, lbuf, sizeof(lbuf)), world,
            a->coord ? "--world" : "PX_WORLD_SIZE, 1 when unset");
    return -1;
}

static int on_step(void *arg, const px_step_report_t *r)
{
    step_ctx_t *ctx = arg;
    int stop = 0;
    double mfu = step_mfu(ctx, r);

    if (ctx->print) {
        printf("step %d loss %.6f grad_norm %.4f lr %.6g tok/s %.0f", r->step, r->loss,
               r->grad_norm, r->lr, r->tokens_per_second);
        if (mfu > 0)
            printf(" mfu %.4g", mfu);
        if (r->val_loss > 0.0f)
            printf(" val_loss %.6f", r->val_loss);
        printf("\n");
        fflush(stdout);
    }
    if (ctx->metrics) {
        json_t *o = json_pack("{s:i, s:f, s:f, s:f, s:f, s:f}", "step", r->step, "loss",
                              (double)r->loss, "grad_norm", (double)r->grad_norm, "lr",
                              (double)r->lr, "tokens_per_second", r->tokens_per_second,
                              "elapsed_s", r->elapsed_s);
        if (o) { /* memory by category (memacct.h), this rank's, and the plan's */
            json_t *mem = json_object();
            for (int c = 0; c < PX_MEM_NCAT; c++)
                json_object_set_new(mem, px_mem_cat_name(c),
                                    json_pack("{s:I, s:I, s:f}", "current",
                                              (json_int_t)r->mem_current[c], "peak",
                                              (json_int_t)r->mem_peak[c], "plan",
                                              r->mem_plan[c]));
            json_object_set_new(mem, "state_peak", json_integer((json_int_t)r->mem_state_peak));
            json_object_set_new(mem, "plan_state_peak", json_real(r->mem_plan_state_peak));
            if (r->mem_device_total) /* cudaMemGetInfo on a device rank */
                json_object_set_new(mem, "device", json_pack("{s:I, s:I}", "used",
                                                             (json_int_t)r->mem_device_used,
                                                             "total",
                                                             (json_int_t)r->mem_device_total));
            json_object_set_new(o, "memory", mem);
            char dig[20];
            snprintf(dig, sizeof(dig), "%016llx", (unsigned long long)r->replicated_digest);
            json_object_set_new(o, "replicated_digest", json_string(dig));
            json_object_set_new(o, "tp_comm_s", json_real(r->tp_comm_s));
            if (r->val_loss > 0.0f)
                json_object_set_new(o, "val_loss", json_real(r->val_loss));
            json_object_set_new(o, "tp_wait_s", json_real(r->tp_wait_s));
            json_object_set_new(o, "tp_hidden_s", json_real(r->tp_hidden_s));
            json_object_set_new(o, "step_s", json_real(r->step_s));
            if (mfu > 0)
                json_object_set_new(o, "mfu", json_real(mfu));
            if (r->experts && r->moe_received) { /* moe.h: this step's tokens per expert */
                json_t *rec = json_array(), *drop = json_array();
                for (int e = 0; e < r->experts; e++) {
                    json_array_append_new(rec, json_integer((json_int_t)r->moe_received[e]));
                    json_array_append_new(drop, json_integer((json_int_t)r->moe_dropped[e]));
                }
                json_object_set_new(o, "moe_received", rec);
                json_object_set_new(o, "moe_dropped", drop);
                json_object_set_new(o, "moe_alltoall_s", json_real(r->moe_alltoall_s));
            }
            if (r->pp > 1) { /* pipeline.h: this stage's step, and its tied wte copy */
                json_object_set_new(o, "pp_stage", json_integer(r->pp_stage));
                json_object_set_new(o, "pp_busy_s", json_real(r->pp_busy_s));
                json_object_set_new(o, "pp_idle_s", json_real(r->pp_idle_s));
                snprintf(dig, sizeof(dig), "%016llx", (unsigned long long)r->tied_digest);
                json_object_set_new(o, "tied_digest", json_string(dig));
            }
        }
        if (o) {
            json_dumpf(o, ctx->metrics, JSON_COMPACT | JSON_REAL_PRECISION(9));
            fputc('\n', ctx->metrics);
            fflush(ctx->metrics);
            json_decref(o);
        }
    }
    tb_step(ctx, r, mfu);
    if (ctx->link && px_rank_link_report(ctx->link, r, mfu, &stop) == PX_OK && stop)
        px_info("coordinator says the job is ending; stopping after step %d", r->step);
    return stop;
}

/* --help and --print-schedule answer from the arguments alone and exit in
 * parse_args: they need no BLAS core, so nothing is probed or logged before
 * their output (a log line used to open both). */
static int answers_from_args(int argc, char **argv)
{
    for (int i = 1; i < argc; i++)
        if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "--print-schedule"))
            return 1;
    return 0;
}

int main(int argc, char **argv)
{
    rank_args_t a;
    px_status_t status;
    char err[512], tag[64];
    int rank = 0, world = 1, ret = 1;
    step_ctx_t ctx = {0};
    px_world_t *pw = NULL;
    px_blas_core_info_t blas;

    /* parallaxd asks once which core its ranks will run (it loads no
     * OpenBLAS itself): decided in this environment, before any re-exec */
    if (argc == 2 && !strcmp(argv[1], "--blas-core")) {
        px_blas_probe_t probe;
        char line[128];
        px_blas_core_probe(&probe);
        px_blas_probe_format(&probe, line, sizeof(line));
        fputs(line, stdout);
        return fflush(stdout) == 0 ? 0 : 1;
    }
    /* OpenBLAS's best kernels for this CPU, before anything else
     * runs (may re-execute this process once or twice) */
    if (!answers_from_args(argc, argv)) {
        px_blas_core_ensure(argv, &blas);
        px_blas_core_log(&blas);
    }
    if (px_rank_bench_requested(argc, argv))
        return px_rank_bench_main(argc, argv);
    if (parse_args(argc, argv, &a))
        goto out_args;
    if (a.sample.weights) { /* one process, no world: text from the job's weights */
        ret = px_rank_sample_main(&a.cfg, &a.sample, a.device ? a.device : getenv("PX_DEVICE"));
        goto out_spec;
    }
    if (a.coord) {
        rank = a.rank;
        world = a.world;
    } else if (px_world_env(&rank, &world) != PX_OK) {
        goto out_args;
    }
    snprintf(tag, sizeof(tag), "rank %d", rank);
    px_log_set_tag(tag);

    /* the one validator (jobcfg.h), as pctl and parallaxd ran it */
    default_dp(&a, world);
    status = px_job_config_check(&a.cfg, PX_JOBCFG_CHECK_DATA, err, sizeof(err));
    if (status != PX_OK) {
        fprintf(stderr, "parallax-rank: %s\n", err);
        goto out_args;
    }
    if (check_world(&a, world))
        goto out_args;
    if (a.export_dir) { /* rank-local: one rank's view of the model and batch */
        px_train_config_t alone = a.cfg;
        px_train_observer_t obs[4];
        int nobs = observers_of(&a, 1, obs);
        memset(&alone.layout, 0, sizeof(alone.layout));
        status = nobs < 0 ? PX_ERR_NO_MEMORY
                          : px_train_observed(&alone, NULL, NULL, a.router_skew, NULL, NULL, obs,
                                              nobs);
        observers_free(obs, nobs);
        ret = status == PX_OK ? 0 : 1;
        goto out_spec;
    }
    if (a.metrics_out) {
        /* "%r" is the rank (one command line for every rank: mpirun, srun) */
        char mpath[4096];
        const char *pr = strstr(a.metrics_out, "%r");
        if (pr)
            snprintf(mpath, sizeof(mpath), "%.*s%d%s", (int)(pr - a.metrics_out), a.metrics_out,
                     rank, pr + 2);
        else
            snprintf(mpath, sizeof(mpath), "%s", a.metrics_out);
        ctx.metrics = fopen(mpath, "w");
        if (!ctx.metrics) {
            px_error("cannot open metrics file %s: %s", mpath, strerror(errno));
            goto out_spec;
        }
    }
    ctx.rank = rank;
    ctx.world = world;
    ctx.devices = mfu_devices(world);
    ctx.precision = a.cfg.precision;
    ctx.flops_per_token = px_step_model_flops_per_token(&a.cfg, NULL);
    if (peak_knob(&ctx.peak))
        goto out_spec;
    /* Standalone (torchrun, mpirun, srun) every rank shares one terminal:
     * rank 0 alone prints the step lines, which are the job's (the loss
     * and norm are global), unless --print-all-ranks. Under a daemon each
     * rank's stdout is its own log (pctl logs JOB --rank N): all print. */
    ctx.print = rank == 0 || a.print_all_ranks || a.coord;
    tb_open(&ctx, a.cfg.tensorboard_dir);

    /* daemon mode: the coordinator's rendezvous; otherwise the standalone
     * bootstrap, or alone without a transport */
    /* the job flags every rank must share, compared at world start so that
     * a flag given differently is named, not found as a collective's count */
    char agree[PX_WORLD_AGREE_MAX];
    if (px_job_config_canon(&a.cfg, agree, sizeof(agree)) < 0) {
        px_error("the job config does not fit %d bytes", PX_WORLD_AGREE_MAX);
        goto out_spec;
    }
    px_world_opts_t wo = {.rank = rank, .size = world, .agree = agree};
    if (a.coord) {
        PX_CHECK_GOTO(px_rank_link_open(a.coord, a.job, a.rank, a.node, &ctx.link), status, out);
        wo.rendezvous = px_rank_link_world_rendezvous;
        wo.rendezvous_arg = ctx.link;
    }
    PX_CHECK_GOTO(px_world_open(&wo, &pw), status, out);

    px_train_observer_t obs[4];
    int nobs = observers_of(&a, 0, obs);
    /* the daemon names the rank's device in PX_DEVICE (cpu:K, or cuda:0 with
     * CUDA_VISIBLE_DEVICES its one GPU) */
    status = nobs < 0 ? PX_ERR_NO_MEMORY
                      : px_train_observed(&a.cfg, px_world_comm(pw),
                                          a.device ? a.device : getenv("PX_DEVICE"),
                                          a.router_skew, on_step, &ctx, obs, nobs);
    observers_free(obs, nobs);
    if (status == PX_OK || status == PX_ERR_ABORTED)
        ret = 0;
    else { /* the last line of the log (what the daemon reports) holds the cause */
        char first[PX_LOG_FIRST_ERROR_MAX];
        px_log_first_error(first, sizeof(first));
        px_error("training failed: %s (first error: %s)", px_status_str(status), first);
    }
    if (status == PX_OK)
        px_world_finish(pw);

    goto out_ok;
out:
    px_error("rank %d: setup failed: %s", rank, px_status_str(status));
out_ok:
    px_world_close(pw, ret == 0);
    px_rank_link_close(ctx.link);
    if (ctx.tb) {
        char tbpath[4400];
        snprintf(tbpath, sizeof(tbpath), "%s", px_tb_path(ctx.tb));
        if (px_tb_close(ctx.tb))
            px_warn("tensorboard: closing %s: %s", tbpath, strerror(errno));
    }
    if (ctx.metrics && fclose(ctx.metrics)) {
        px_error("metrics file %s: %s", a.metrics_out, strerror(errno));
        ret = 1;
    }
out_spec:
    if (a.spec)
        parallax__v1__job_spec__free_unpacked(a.spec, NULL);
    return ret;
out_args:
    ret = 2;
    goto out_spec;
}
