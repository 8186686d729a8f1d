/* pctl_plan.c: `pctl plan`, the memory per device and the parallel layout
 * of a job (local, no daemon).
 *
 * It reads the job as `pctl submit` does: the shared job flags (planner/
 * jobflags.h) over the same defaults (pctl_job_defaults), checked by the one
 * validator (px_job_config_check, as the daemon checks a submitted job and
 * the ranks check it at start), so plan and submit accept the same layouts.
 * The figures come from the one recipe (planner/jobplan.h px_plan_job) that
 * the engine lays its buffers out by and the daemon's memory check fits:
 * per ZeRO stage (and per pipeline stage with pp > 1) the parameters,
 * gradients and optimizer state one rank holds, their peak at once, the
 * activations of its micro-batch slots, and the scratch of bf16 GEMMs and
 * CUDA IPC. The default accounting is the engine's: fp32 state whatever
 * --precision says (what `pctl mem` reports as the plan); --paper counts
 * as the ZeRO paper's Figure 1 does (2-byte params and grads, K optimizer
 * bytes). --params N plans a model given only by its parameter count as
 * one unit (ZeRO over dp x cp; the paper's figures).
 * Then the layout: every rank's coordinates and the node px_layout_place
 * puts it on (--nodes x --devices-per-node), summarised for large worlds
 * (--ranks lists them all). GB = 10^9 bytes. Single-threaded; no I/O but
 * stdout and stderr. */
#include <errno.h>
#include <getopt.h>
#include <limits.h>
#include <math.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cluster.h"
#include "jobcfg.h"
#include "jobflags.h"
#include "jobplan.h"
#include "layout.h"
#include "model.h"
#include "pctl.h"
#include "pipesched.h"
#include "plan.h"
#include "px_env.h"
#include "px_log.h"
#include "steptime.h"

/* Worlds up to this many ranks list every rank by default (the help says 16). */
#define PLAN_RANK_ROWS 16

/* What the command line asked beyond the job. */
typedef struct plan_args {
    px_job_config_t cfg;
    double params;        /* --params N; 0: GPT dims */
    double k;             /* --optimizer-bytes-per-param; < 0: the accounting's */
    int paper, dev, json, ranks, print_sched;
    int nodes, per_node;  /* per_node 0: world / nodes, rounded up */
    int zero_given, sched_given, have_dims, data_given;
    const char *cluster;  /* --cluster FILE|PRESET:NxG; NULL: no time model */
    const char *engine;   /* --engine; NULL: parallax */
    int search, top, dev_given, nodes_given;
    const char *save_cluster; /* --save-cluster FILE */
} plan_args_t;

enum { O_PARAMS = 256, O_NODES, O_PER_NODE, O_DEVICE, O_PAPER, O_K, O_RANKS, O_PRINT_SCHED,
       O_JSON, O_HELP, O_CLUSTER, O_SEARCH, O_ENGINE, O_TOP, O_SAVE_CLUSTER,
       O_JOB_FLAG = 1024 };

static const struct option own_opts[] = {
    {"params", required_argument, NULL, O_PARAMS},
    {"nodes", required_argument, NULL, O_NODES},
    {"devices-per-node", required_argument, NULL, O_PER_NODE},
    {"device", required_argument, NULL, O_DEVICE},
    {"paper", no_argument, NULL, O_PAPER},
    {"optimizer-bytes-per-param", required_argument, NULL, O_K},
    {"ranks", no_argument, NULL, O_RANKS},
    {"print-schedule", no_argument, NULL, O_PRINT_SCHED},
    {"json", no_argument, NULL, O_JSON},
    {"cluster", required_argument, NULL, O_CLUSTER},
    {"search", no_argument, NULL, O_SEARCH},
    {"engine", required_argument, NULL, O_ENGINE},
    {"top", required_argument, NULL, O_TOP},
    {"save-cluster", required_argument, NULL, O_SAVE_CLUSTER},
    {"help", no_argument, NULL, O_HELP},
};
#define N_OWN (sizeof(own_opts) / sizeof(own_opts[0]))

int pctl_plan_help(void)
{
    fputs(PCTL_PLAN_USAGE
          "\n"
          "Prints the memory one rank of the job holds, by category, as the engine lays it\n"
          "out (the same code), and the parallel layout. It reads the job flags of `pctl\n"
          "submit` with the same defaults and checks them with the same validator, so a\n"
          "layout plan accepts is one submit accepts. Per ZeRO stage (all the layout runs\n"
          "with unless --zero is given) and, with pp > 1, per pipeline stage: parameters,\n"
          "gradients, optimizer state (ZeRO shards over dp x cp, padded per unit), their\n"
          "peak at once (ZeRO-3 gathers layers), the activations of the rank's micro-batch\n"
          "slots, and scratch (bf16 GEMM operands, CUDA IPC rings). The accounting is the\n"
          "engine's: fp32 parameters, gradients and AdamW moments (4 + 4 + 8 bytes a\n"
          "parameter) with --precision fp32 and bf16 alike, what `pctl mem` shows as the\n"
          "plan; --paper counts as the ZeRO paper (2 + 2 + K bytes). GB = 10^9 bytes.\n"
          "\n"
          "plan's own flags:\n"
          "  --params N         a model given by its parameter count (e.g. 7.5e9) as one\n"
          "                     unit: ZeRO over dp x cp, as the ZeRO paper's Figure 1 (no\n"
          "                     GPT dims, tp, pp or experts)\n"
          "  --paper            the ZeRO paper's mixed-precision accounting: 2-byte params\n"
          "                     and grads, K optimizer bytes a parameter (default 12)\n"
          "  --optimizer-bytes-per-param K  optimizer bytes a parameter (default: 8 fp32\n"
          "                     AdamW moments; 12 with --paper)\n"
          "  --device D         cpu (default), cuda (the fused attention's state, bf16\n"
          "                     copies, and each rank's CUDA IPC scratch: 3 slots of\n"
          "                     PX_IPC_SLOT_BYTES per communicator whose ranks share a\n"
          "                     node), sim (the cpu ops; staged, no IPC)\n"
          "  --nodes N          nodes to place the ranks on (default 1)\n"
          "  --devices-per-node K  free devices per node (default: world / nodes, rounded\n"
          "                     up); a layout that does not fit is an error (exit 2)\n"
          "  --ranks            list every rank's coordinates and node (by default worlds\n"
          "                     over 16 ranks print a summary)\n"
          "  --print-schedule   pp > 1: print every stage's action list (F forward, B\n"
          "                     backward, W weight pass, >a/<a send/receive activation,\n"
          "                     >g/<g gradient)\n"
          "  --json             one JSON object with every figure and the layout\n"
          "  --cluster C        also predict the step on a described cluster: an INI file\n"
          "                     (planner/cluster.h: [cluster] preset, nodes,\n"
          "                     devices_per_node; [device] rates; [intra] / [inter]\n"
          "                     links) or PRESET:NODESxGPUS with PRESET one of\n"
          "                     a100-sxm-80g, a100-40g, h100-sxm, h200-sxm, cpu\n"
          "                     (e.g. h100-sxm:64x8): step time, tokens/s, MFU, memory\n"
          "                     per rank and the three largest costs (planner/\n"
          "                     steptime.h); its nodes and devices place the ranks and\n"
          "                     a GPU preset plans memory as --device cuda unless given\n"
          "  --search           with --cluster: every layout of all its devices (dp, tp,\n"
          "                     pp, cp, ep, ZeRO, sequence parallelism, micro-batches,\n"
          "                     schedule, virtual stages) that the validator takes and\n"
          "                     that fits the device's memory, the fastest first; the\n"
          "                     layout flags given are ignored\n"
          "  --top N            the layouts --search prints (default 10)\n"
          "  --cluster local    the cluster the daemon (--server) reports, measured: its\n"
          "                     free devices (pctl nodes), its links by two all-reduce\n"
          "                     bench jobs (within a node, across nodes), the host's\n"
          "                     cores and the daemons sharing it (cpu devices), and the\n"
          "                     GEMMs' rate and the step's fixed cost fitted to two\n"
          "                     short training jobs of this model over every free\n"
          "                     device, 3 runs each (needs --data: the token file)\n"
          "  --save-cluster F   write the cluster used as an INI file --cluster reads\n"
          "  --engine E         price the step as engine E runs it: parallax (default),\n"
          "                     or a published run's engine to compare with it: megatron\n"
          "                     (full recomputation, fp16), torchtitan (FSDP, selective\n"
          "                     recomputation), llmc; memory stays parallax's\n"
          "\n"
          "job flags (as pctl submit; its defaults: layers 4, heads 4, dim 128, seq 128,\n"
          "batch 16; --data is not read):\n",
          stdout);
    px_job_flags_help(PX_JOB_FLAG_PCTL, stdout);
    return PCTL_EXIT_OK;
}

static void fmt_gb(double bytes, char *buf, size_t len)
{
    if (bytes >= 1e9)
        snprintf(buf, len, "%.1f GB", bytes / 1e9);
    else if (bytes >= 1e6)
        snprintf(buf, len, "%.2f MB", bytes / 1e6);
    else
        snprintf(buf, len, "%.1f kB", bytes / 1e3);
}

/* Parses argv into *a. PCTL_EXIT_OK, or an exit code (usage error printed;
 * --help: its text printed, *done_p set). */
static int parse_args(int argc, char **argv, plan_args_t *a, int *done_p)
{
    struct option opts[N_OWN + 2 * 64 + 1];
    size_t nopt = N_OWN;
    int opt;
    uint64_t v;

    memcpy(opts, own_opts, sizeof(own_opts));
    nopt += px_job_flags_options(PX_JOB_FLAG_PCTL, O_JOB_FLAG, opts + nopt,
                                 sizeof(opts) / sizeof(opts[0]) - nopt - 1);
    memset(&opts[nopt], 0, sizeof(opts[nopt]));
    pctl_job_defaults(&a->cfg);
    a->k = -1;
    a->nodes = 1;
    opterr = 0;
    while ((opt = getopt_long(argc, argv, ":h", opts, NULL)) != -1) {
        const px_job_flag_t *f = px_job_flag_of(opt, O_JOB_FLAG);
        if (f) {
            size_t off = f->offset;
            if (pctl_job_flag_apply("plan", f, optarg, &a->cfg))
                return PCTL_EXIT_USAGE;
            a->zero_given |= off == offsetof(px_job_config_t, zero);
            a->sched_given |= off == offsetof(px_job_config_t, schedule);
            a->data_given |= off == offsetof(px_job_config_t, data_path);
            a->have_dims |= off == offsetof(px_job_config_t, layers) ||
                            off == offsetof(px_job_config_t, dim) ||
                            off == offsetof(px_job_config_t, heads) ||
                            off == offsetof(px_job_config_t, vocab) ||
                            off == offsetof(px_job_config_t, seq);
            continue;
        }
        switch (opt) {
        case O_PARAMS:
            if (pctl_parse_float("plan", "--params", optarg, 1, 1e15, &a->params))
                return PCTL_EXIT_USAGE;
            if (a->params != floor(a->params))
                return pctl_usage_error("plan", "--params %s is not a whole number", optarg);
            break;
        case O_NODES: case O_PER_NODE:
            if (pctl_parse_u64("plan", opt == O_NODES ? "--nodes" : "--devices-per-node",
                               optarg, 1, PX_LAYOUT_MAX_WORLD, &v))
                return PCTL_EXIT_USAGE;
            *(opt == O_NODES ? &a->nodes : &a->per_node) = (int)v;
            a->nodes_given = 1;
            break;
        case O_CLUSTER: a->cluster = optarg; break;
        case O_SEARCH: a->search = 1; break;
        case O_SAVE_CLUSTER: a->save_cluster = optarg; break;
        case O_ENGINE: a->engine = optarg; break;
        case O_TOP:
            if (pctl_parse_u64("plan", "--top", optarg, 1, 1000, &v))
                return PCTL_EXIT_USAGE;
            a->top = (int)v;
            break;
        case O_DEVICE:
            a->dev_given = 1;
            a->dev = px_plan_dev_parse(optarg);
            if (a->dev < 0 || !*optarg)
                return pctl_usage_error("plan", "--device '%s': cpu, cuda or sim", optarg);
            break;
        case O_PAPER: a->paper = 1; break;
        case O_K:
            if (pctl_parse_float("plan", "--optimizer-bytes-per-param", optarg, 0, 1024, &a->k))
                return PCTL_EXIT_USAGE;
            break;
        case O_RANKS: a->ranks = 1; break;
        case O_PRINT_SCHED: a->print_sched = 1; break;
        case O_JSON: a->json = 1; break;
        case O_HELP: case 'h':
            *done_p = 1;
            return pctl_plan_help();
        case ':': return pctl_usage_error("plan", "option %s needs a value", argv[optind - 1]);
        default: return pctl_usage_error("plan", "unknown option '%s'", argv[optind - 1]);
        }
    }
    if (optind < argc)
        return pctl_usage_error("plan", "unexpected argument '%s'", argv[optind]);
    if ((a->search || a->engine || a->top || a->save_cluster) && !a->cluster)
        return pctl_usage_error("plan", "--search, --top, --engine and --save-cluster need "
                                "--cluster");
    if (a->cluster && a->params > 0)
        return pctl_usage_error("plan", "--cluster needs the GPT dims, not --params");
    return PCTL_EXIT_OK;
}

/* The job's rules: the one validator with GPT dims; with --params only the
 * layout and the ZeRO stage mean anything. PCTL_EXIT_OK or a usage error. */
static int check_job(plan_args_t *a)
{
    px_job_config_t *c = &a->cfg;
    char err[1024];

    if (a->params > 0) {
        if (a->have_dims)
            return pctl_usage_error("plan", "give either --params or the GPT dims, not both");
        if (c->layout.tp > 1 || c->layout.pp > 1 || c->experts)
            return pctl_usage_error("plan", "--params counts the model as one unit (data "
                                    "parallelism and ZeRO over dp x cp): tp=%d, pp=%d and "
                                    "experts=%d need the GPT dims", c->layout.tp, c->layout.pp,
                                    c->experts);
        if (px_layout_check(&c->layout, err, sizeof(err)) != PX_OK)
            return pctl_usage_error("plan", "%s", err);
        if (c->zero > 3)
            return pctl_usage_error("plan", "zero=%d must be 0, 1, 2 or 3", c->zero);
        return PCTL_EXIT_OK;
    }
    if (!c->data_path)
        c->data_path = "(not read by plan)"; /* the validator asks for one; plan reads none */
    if (px_job_config_check(c, 0, err, sizeof(err)) != PX_OK)
        return pctl_usage_error("plan", "%s", err);
    return PCTL_EXIT_OK;
}

/* The node of every rank (caller frees), or NULL after a usage error. */
static int *place(const plan_args_t *a, int *rc_p)
{
    const px_layout_t *l = &a->cfg.layout;
    const int world = px_layout_world(l);
    int per_node = a->per_node ? a->per_node : (world + a->nodes - 1) / a->nodes;
    int *node_free = malloc(sizeof(int) * (size_t)a->nodes);
    int *node_of_rank = malloc(sizeof(int) * (size_t)world);
    char err[256];

    *rc_p = PCTL_EXIT_FAIL;
    if (!node_free || !node_of_rank) {
        fprintf(stderr, "pctl: plan: out of memory\n");
        goto err;
    }
    for (int n = 0; n < a->nodes; n++)
        node_free[n] = per_node;
    if (px_layout_place(l, node_free, a->nodes, node_of_rank, err, sizeof(err)) != PX_OK) {
        fprintf(stderr, "pctl: plan: %s (%d node%s x %d devices)\n", err, a->nodes,
                a->nodes == 1 ? "" : "s", per_node);
        *rc_p = PCTL_EXIT_USAGE;
        goto err;
    }
    free(node_free);
    return node_of_rank;
err:
    free(node_free);
    free(node_of_rank);
    return NULL;
}

/* The bytes per element of the chosen accounting. */
static void accounting(const plan_args_t *a, px_plan_precision_t *prec)
{
    if (a->paper)
        px_plan_precision_mixed(prec, a->k >= 0 ? a->k : 12);
    else {
        px_plan_precision_fp32(prec);
        if (a->k >= 0)
            prec->optim_bytes = a->k;
    }
}

/* The ZeRO stages to show: the one given, else every stage the validator
 * accepts for this layout (pipeline parallelism runs ZeRO 0 and 1). */
static int zero_stages(const plan_args_t *a, int *zs)
{
    int n = 0;
    char err[512];
    if (a->zero_given) {
        zs[n++] = a->cfg.zero;
        return n;
    }
    for (int z = 0; z <= 3; z++) {
        px_job_config_t c = a->cfg;
        c.zero = z;
        if (a->params > 0 || px_job_config_check(&c, 0, err, sizeof(err)) == PX_OK)
            zs[n++] = z;
    }
    return n;
}

/* The plan of ZeRO stage z, pipeline stage s, under the chosen accounting,
 * with the IPC scratch of the node its first rank is placed on. */
static px_status_t plan_one(const plan_args_t *a, int z, int s, const int *node_of_rank,
                            px_job_plan_t *jp)
{
    px_job_config_t c = a->cfg;
    px_plan_precision_t prec;
    c.zero = z;
    PX_CHECK(px_plan_job(&c, a->dev, s, jp));
    accounting(a, &prec);
    if (a->paper || a->k >= 0)
        PX_CHECK(px_job_plan_reprice(jp, &c, &prec));
    int world = px_layout_world(&c.layout);
    px_plan_job_add_ipc(jp, &c, node_of_rank, node_of_rank[s * (world / c.layout.pp)],
                        px_plan_ipc_slot_bytes(px_env_int("PX_IPC_SLOT_BYTES")));
    return PX_OK;
}

/* One rank's figures as a JSON object (new reference). */
static json_t *plan_json(const px_job_plan_t *jp, int z)
{
    const px_plan_t *p = jp->state;
    double state = p->bytes[PX_MEM_PARAMS] + p->bytes[PX_MEM_GRADS] + p->bytes[PX_MEM_OPTIM];
    json_t *o = json_pack("{s:i, s:i, s:i, s:I, s:I, s:I, s:f, s:f, s:f, s:f, s:f}", "zero", z,
                          "pipeline_stage", jp->stage, "layers", jp->layers, "params_count",
                          (json_int_t)p->params, "padded", (json_int_t)p->padded, "shard",
                          (json_int_t)p->shard, "params_bytes", p->bytes[PX_MEM_PARAMS],
                          "grads_bytes", p->bytes[PX_MEM_GRADS], "optimizer_bytes",
                          p->bytes[PX_MEM_OPTIM], "total_bytes", state, "state_peak_bytes",
                          p->state_peak);
    if (!o)
        return NULL;
    json_object_set_new(o, "activations_bytes", json_integer((json_int_t)jp->act_bytes));
    json_object_set_new(o, "micro_batches_held", json_integer(jp->slots));
    json_object_set_new(o, "stash_bytes", json_integer((json_int_t)jp->stash_bytes));
    json_object_set_new(o, "moe_params", json_integer((json_int_t)jp->moe_params));
    json_object_set_new(o, "moe_activations_bytes", json_integer((json_int_t)jp->moe_act_bytes));
    json_object_set_new(o, "bf16_scratch_bytes",
                        json_integer((json_int_t)jp->bf16_scratch_bytes));
    json_object_set_new(o, "ipc_bytes", json_integer((json_int_t)jp->ipc_bytes));
    json_object_set_new(o, "rank_bytes", json_real(jp->total));
    return o;
}

/* One table row: zero [stage] params grads optimizer total at-once
 * activations scratch per-rank. */
static void plan_row(const px_job_plan_t *jp, int z, int pp)
{
    const px_plan_t *p = jp->state;
    double v[8] = {p->bytes[PX_MEM_PARAMS], p->bytes[PX_MEM_GRADS], p->bytes[PX_MEM_OPTIM],
                   p->bytes[PX_MEM_PARAMS] + p->bytes[PX_MEM_GRADS] + p->bytes[PX_MEM_OPTIM],
                   p->state_peak,
                   (double)(jp->act_bytes + jp->stash_bytes + jp->moe_act_bytes),
                   (double)(jp->bf16_scratch_bytes + jp->ipc_bytes), jp->total};
    char b[32];
    printf("%-5d", z);
    if (pp > 1)
        printf("  %5d", jp->stage);
    for (int i = 0; i < 8; i++) {
        fmt_gb(v[i], b, sizeof(b));
        printf("  %11s", b);
    }
    printf("\n");
}

static void plan_header(int pp)
{
    printf("%-5s", "zero");
    if (pp > 1)
        printf("  %5s", "stage");
    printf("  %11s  %11s  %11s  %11s  %11s  %11s  %11s  %11s\n", "params", "grads", "optimizer",
           "total", "at once", "activations", "scratch", "per rank");
}

/* Context parallelism: each context rank's slice of a sequence (2 x cp
 * chunks; rank i holds chunks i and 2cp-1-i, ring_attn.h). */
static void print_context(int cp, int seq, double ring_bytes)
{
    int c = seq / (2 * cp);
    char b[32];
    fmt_gb(ring_bytes, b, sizeof(b));
    printf("context: cp %d, %d tokens of each %d-token sequence per rank, 2 chunks of %d "
           "(ring attention buffers %s, included above):\n", cp, seq / cp, seq, c, b);
    for (int i = 0; i < cp && i < 8; i++)
        printf("  cp rank %d: tokens [%d, %d) and [%d, %d)\n", i, i * c, (i + 1) * c,
               (2 * cp - 1 - i) * c, (2 * cp - i) * c);
    if (cp > 8)
        printf("  ... (cp rank i: chunks i and %d-i)\n", 2 * cp - 1);
}

/* The model, the micro-batch, the accounting and the device's scratch:
 * the lines above the table (GPT dims). */
static void print_job(const plan_args_t *a, const px_job_plan_t *jp, const int *node_of_rank)
{
    const px_job_config_t *c = &a->cfg;
    const px_layout_t *l = &c->layout;
    px_plan_precision_t prec;
    uint64_t *units = NULL;
    /* the dense units: a MoE layer's leave out the MLP its experts replace */
    uint64_t total = px_plan_gpt_units_moe(c->layers, c->dim, c->vocab, c->seq, 1, c->experts,
                                           c->moe_every, &units);
    free(units);
    accounting(a, &prec);
    printf("model: GPT %d layers, dim %d, heads %d, vocab %d, seq %d: %.4g parameters\n",
           c->layers, c->dim, c->heads, c->vocab, c->seq, (double)total);
    if (c->experts) {
        px_model_moe_t mm = {.layers = c->layers, .dim = c->dim, .experts = c->experts,
                             .moe_every = c->moe_every};
        printf("experts: %d per MoE layer, %d MoE layer(s) (every %d), top-%d, %s; %.4g expert "
               "parameters in all, %.4g per rank (routers + %d experts per layer, not sharded "
               "by ZeRO)\n", c->experts, px_model_moe_num_layers(&mm), c->moe_every, c->top_k,
               c->dropless ? "dropless" : "capacity", (double)px_model_moe_num_params(&mm),
               (double)px_model_moe_rank_params(&mm, l->ep), c->experts / l->ep);
    }
    printf("accounting: %s: params %g, grads %g, optimizer %g bytes a parameter\n",
           a->paper ? "the ZeRO paper's mixed precision (--paper)"
           : c->precision == PX_PRECISION_BF16
               ? "as the engine trains --precision bf16 (fp32 master weights, grads and "
                 "AdamW; bf16 GEMM and attention operands)"
               : "as the engine trains --precision fp32",
           prec.param_bytes, prec.grad_bytes, prec.optim_bytes);
    printf("activations per rank: micro-batch %d x seq %d, tp %d, sequence parallelism %s; "
           "the engine's %s; attention state: %s\n", jp->micro_batch, jp->seq_local, l->tp,
           c->sequence_parallel && l->tp > 1 ? "on" : "off",
           c->precision != PX_PRECISION_BF16 ? "fp32 buffers"
           : c->sequence_parallel && l->tp > 1 ? "buffers, the GELU output bf16"
                                               : "buffers, LayerNorm and GELU outputs bf16",
           l->cp > 1 ? "each row's log-sum-exp (ring attention)"
           : a->dev == PX_PLAN_DEV_CUDA ? "each row's log-sum-exp (fused CUDA attention)"
                                        : "the (B,NH,T,T) probabilities (cpu attention)");
    if (jp->bf16_scratch_bytes) {
        char b[32];
        fmt_gb((double)jp->bf16_scratch_bytes, b, sizeof(b));
        printf("bf16 GEMM operands per rank: %s of %s (column scratch)\n", b,
               a->dev == PX_PLAN_DEV_CUDA ? "device scratch, bf16"
                                          : "host scratch, widened to doubles");
    }
    if (l->cp > 1)
        print_context(l->cp, c->seq, (double)jp->acts.ring * 4);
    if (a->dev == PX_PLAN_DEV_CUDA) {
        px_group_kind_t kinds[3];
        char groups[64] = "", b1[32], b2[32];
        int n = px_plan_ipc_comms(l, c->experts, 0, node_of_rank, kinds);
        uint64_t slot = px_plan_ipc_slot_bytes(px_env_int("PX_IPC_SLOT_BYTES"));
        for (int i = 0; i < n; i++)
            snprintf(groups + strlen(groups), sizeof(groups) - strlen(groups), "%s%s",
                     i ? ", " : "", px_group_name(kinds[i]));
        fmt_gb((double)slot, b1, sizeof(b1));
        fmt_gb((double)px_plan_ipc_bytes(n, slot), b2, sizeof(b2));
        printf("device scratch per rank (CUDA IPC rings, category comm): %d communicator%s%s%s%s "
               "x %d slots x %s = %s (groups whose ranks share a node; the others stage)\n", n,
               n == 1 ? "" : "s", n ? " (" : "", groups, n ? ")" : "", PX_PLAN_IPC_SLOTS, b1, b2);
    } else if (a->dev == PX_PLAN_DEV_SIM)
        printf("device scratch per rank: none (the simulated device has no IPC ops: its device "
               "buffers are staged through host memory)\n");
}

/* Pipeline (pp > 1): each stage's activations (the table's, times the
 * micro-batches it holds at once, plus zb1's stash) for the schedule given,
 * or every schedule the validator accepts for the layout (interleaved with
 * --virtual-stages, 2 when not given). Printed, or into jpipe. */
static int print_pipeline(const plan_args_t *a, json_t *jpipe)
{
    const int pp = a->cfg.layout.pp;
    char err[512];
    if (!jpipe)
        printf("pipeline: pp %d, %d micro-batches of a step's part; activations per stage by "
               "schedule (xN: the micro-batches a stage holds at once; interleaved xN: chunk "
               "buffers summed over its chunks):\n", pp, a->cfg.micro_batches);
    for (int k = 0; k < PX_PIPE_NKINDS; k++) {
        px_job_config_t c = a->cfg;
        if (a->sched_given && k != c.schedule)
            continue;
        c.schedule = k;
        if (k == PX_PIPE_INTERLEAVED && c.virtual_stages < 2)
            c.virtual_stages = 2;
        if (k != PX_PIPE_INTERLEAVED)
            c.virtual_stages = 1;
        if (px_job_config_check(&c, 0, err, sizeof(err)) != PX_OK) {
            if (!jpipe)
                printf("  %-11s not possible: %s\n", px_pipe_schedule_name(k), err);
            continue;
        }
        json_t *jst = json_array();
        if (!jpipe)
            printf("  %-11s", px_pipe_schedule_name(k));
        for (int s = 0; s < pp; s++) {
            px_job_plan_t jp;
            if (px_plan_job(&c, a->dev, s, &jp) != PX_OK) {
                json_decref(jst);
                return PCTL_EXIT_FAIL;
            }
            double bytes = (double)(jp.act_bytes + jp.stash_bytes);
            if (jpipe)
                json_array_append_new(jst, json_pack("{s:i, s:i, s:i, s:i, s:f}", "stage", s,
                                                     "layers", jp.layers, "chunks", jp.chunks,
                                                     "micro_batches_held", jp.slots,
                                                     "activation_bytes", bytes));
            else {
                char b[32];
                fmt_gb(bytes, b, sizeof(b));
                printf("  stage %d (%d layer%s): %s x%d", s, jp.layers, jp.layers == 1 ? "" : "s",
                       b, jp.slots);
            }
            px_job_plan_free(&jp);
        }
        if (jpipe)
            json_object_set_new(jpipe, px_pipe_schedule_name(k), jst);
        else {
            json_decref(jst);
            printf("\n");
        }
        if (a->print_sched && !jpipe) {
            px_pipe_schedule_t *sc = NULL;
            if (px_pipe_schedule_create_v(k, pp, c.micro_batches, c.virtual_stages, &sc) == PX_OK)
                px_pipe_schedule_print(sc, stdout);
            px_pipe_schedule_destroy(sc);
        }
    }
    return PCTL_EXIT_OK;
}

/* The layout: the layout line, the placement, and a row per rank (rank,
 * dp, tp, pp, cp, ep, node), or for worlds over PLAN_RANK_ROWS without
 * --ranks a summary: the ranks on each node. */
static void print_layout(const plan_args_t *a, const int *node_of_rank)
{
    const px_layout_t *l = &a->cfg.layout;
    const int world = px_layout_world(l);
    const int per_node = a->per_node ? a->per_node : (world + a->nodes - 1) / a->nodes;
    char buf[96];

    printf("layout: %s; reporting rank %d\n", px_layout_str(l, buf, sizeof(buf)),
           px_layout_reporting_rank(l));
    printf("placement: %d node%s x %d devices (tensor groups whole on one node)\n", a->nodes,
           a->nodes == 1 ? "" : "s", per_node);
    if (world > PLAN_RANK_ROWS && !a->ranks) {
        int shown = 0;
        printf("%d ranks, tp innermost, then cp, ep, dp, pp (--ranks lists each rank):\n",
               world);
        for (int n = 0; n < a->nodes && shown < 8; n++) {
            int cnt = 0, lo = -1, hi = -1;
            for (int r = 0; r < world; r++)
                if (node_of_rank[r] == n) {
                    cnt++;
                    lo = lo < 0 ? r : lo;
                    hi = r;
                }
            if (!cnt)
                continue;
            printf("  node %d: %d ranks (%d..%d)\n", n, cnt, lo, hi);
            shown++;
        }
        if (shown == 8 && a->nodes > 8)
            printf("  ... (%d nodes in all)\n", a->nodes);
        return;
    }
    printf("%5s  %4s  %4s  %4s  %4s  %4s  %4s\n", "rank", "dp", "tp", "pp", "cp", "ep", "node");
    for (int r = 0; r < world; r++) {
        px_coord_t c;
        px_layout_coord(l, r, &c);
        printf("%5d  %4d  %4d  %4d  %4d  %4d  %4d\n", r, c.dp, c.tp, c.pp, c.cp, c.ep,
               node_of_rank[r]);
    }
}

/* The same as a JSON object (new reference; NULL when out of memory). */
static json_t *layout_json(const plan_args_t *a, const int *node_of_rank)
{
    const px_layout_t *l = &a->cfg.layout;
    const int world = px_layout_world(l);
    const int per_node = a->per_node ? a->per_node : (world + a->nodes - 1) / a->nodes;
    json_t *ranks = json_array();
    json_t *o = json_pack("{s:i, s:i, s:i, s:i, s:i, s:i, s:i, s:i, s:i}", "dp", l->dp, "tp",
                          l->tp, "pp", l->pp, "cp", l->cp, "ep", l->ep, "world", world,
                          "reporting_rank", px_layout_reporting_rank(l), "nodes", a->nodes,
                          "devices_per_node", per_node);
    if (!o || !ranks) {
        json_decref(o);
        json_decref(ranks);
        return NULL;
    }
    for (int r = 0; r < world; r++) {
        px_coord_t c;
        px_layout_coord(l, r, &c);
        json_array_append_new(ranks, json_pack("{s:i, s:i, s:i, s:i, s:i, s:i, s:i, s:i}",
                                               "rank", r, "dp", c.dp, "tp", c.tp, "pp", c.pp,
                                               "cp", c.cp, "ep", c.ep, "edp", c.edp, "node",
                                               node_of_rank[r]));
    }
    json_object_set_new(o, "ranks", ranks);
    return o;
}

/* --params: the model as one unit, ZeRO over dp x cp, the paper's terms. */
static int plan_params(const plan_args_t *a, json_t *root)
{
    const px_layout_t *l = &a->cfg.layout;
    uint64_t one = (uint64_t)a->params;
    px_plan_precision_t prec;
    int zs[4], nz = zero_stages(a, zs);
    json_t *jstages = json_array();

    accounting(a, &prec);
    if (!root) {
        printf("model: %.4g parameters as one unit (--params); accounting: %s: params %g, "
               "grads %g, optimizer %g bytes a parameter\n", a->params,
               a->paper ? "the ZeRO paper's mixed precision (--paper)"
                        : "the engine's fp32 AdamW state",
               prec.param_bytes, prec.grad_bytes, prec.optim_bytes);
        printf("%-5s  %12s  %12s  %12s  %12s  %12s\n", "zero", "params", "grads", "optimizer",
               "total", "at once");
    }
    for (int i = 0; i < nz; i++) {
        px_plan_t *p;
        if (px_plan_create(&one, 1, 0, l->dp * l->cp, zs[i], &prec, &p) != PX_OK) {
            json_decref(jstages);
            return PCTL_EXIT_FAIL;
        }
        double tot = p->bytes[PX_MEM_PARAMS] + p->bytes[PX_MEM_GRADS] + p->bytes[PX_MEM_OPTIM];
        if (root)
            json_array_append_new(
                jstages, json_pack("{s:i, s:I, s:I, s:I, s:f, s:f, s:f, s:f, s:f}", "zero", zs[i],
                                   "params_count", (json_int_t)p->params, "padded",
                                   (json_int_t)p->padded, "shard", (json_int_t)p->shard,
                                   "params_bytes", p->bytes[PX_MEM_PARAMS], "grads_bytes",
                                   p->bytes[PX_MEM_GRADS], "optimizer_bytes",
                                   p->bytes[PX_MEM_OPTIM], "total_bytes", tot,
                                   "state_peak_bytes", p->state_peak));
        else {
            char b[5][32];
            fmt_gb(p->bytes[PX_MEM_PARAMS], b[0], 32);
            fmt_gb(p->bytes[PX_MEM_GRADS], b[1], 32);
            fmt_gb(p->bytes[PX_MEM_OPTIM], b[2], 32);
            fmt_gb(tot, b[3], 32);
            fmt_gb(p->state_peak, b[4], 32);
            printf("%-5d  %12s  %12s  %12s  %12s  %12s\n", zs[i], b[0], b[1], b[2], b[3], b[4]);
        }
        px_plan_destroy(p);
    }
    if (root) {
        json_object_set_new(root, "stages", jstages);
        json_object_set_new(root, "units", json_integer(1));
        json_object_set_new(root, "working_buffers_counted", json_false());
        json_object_set_new(root, "param_bytes", json_real(prec.param_bytes));
        json_object_set_new(root, "grad_bytes", json_real(prec.grad_bytes));
        json_object_set_new(root, "optimizer_bytes", json_real(prec.optim_bytes));
    } else {
        json_decref(jstages);
        printf("(one unit from --params: the gathered / in-flight layer buffers of stages 2 and "
               "3 and the activations are not counted; give the GPT dims to count them)\n");
    }
    return PCTL_EXIT_OK;
}

/* GPT dims: every ZeRO stage shown x every pipeline stage, the job's lines,
 * the pipeline's schedules. */
static int plan_gpt(const plan_args_t *a, const int *node_of_rank, json_t *root)
{
    const px_job_config_t *c = &a->cfg;
    const int pp = c->layout.pp;
    px_plan_precision_t prec;
    int zs[4], nz = zero_stages(a, zs), rc = PCTL_EXIT_OK;
    json_t *jstages = json_array();
    px_job_plan_t first = {0};

    accounting(a, &prec);
    for (int i = 0; i < nz && rc == PCTL_EXIT_OK; i++)
        for (int s = 0; s < pp && rc == PCTL_EXIT_OK; s++) {
            px_job_plan_t jp;
            if (plan_one(a, zs[i], s, node_of_rank, &jp) != PX_OK) {
                rc = PCTL_EXIT_FAIL;
                break;
            }
            if (!root && i == 0 && s == 0) {
                print_job(a, &jp, node_of_rank);
                plan_header(pp);
            }
            if (root)
                json_array_append_new(jstages, plan_json(&jp, zs[i]));
            else
                plan_row(&jp, zs[i], pp);
            /* the top-level activations: the worst stage's, of the first ZeRO row */
            if (i == 0 && (!first.state || jp.act_bytes + jp.moe_act_bytes >
                                               first.act_bytes + first.moe_act_bytes)) {
                px_job_plan_free(&first);
                first = jp;
            } else
                px_job_plan_free(&jp);
        }
    if (rc != PCTL_EXIT_OK || !first.state) {
        json_decref(jstages);
        px_job_plan_free(&first);
        return PCTL_EXIT_FAIL;
    }
    if (!root) {
        json_decref(jstages);
        printf("(\"at once\": the peak of params + grads + optimizer, what a rank measures; "
               "activations: the micro-batch slots%s%s; scratch: %s; per rank: their sum)\n",
               c->experts ? " and the MoE layers'" : "",
               pp > 1 && c->schedule == PX_PIPE_ZB1 ? " and zb1's weight stash" : "",
               "bf16 GEMM operands, CUDA IPC rings");
        if (pp > 1)
            rc = print_pipeline(a, NULL);
        px_job_plan_free(&first);
        return rc;
    }
    json_object_set_new(root, "stages", jstages);
    json_object_set_new(root, "units", json_integer(first.nunits));
    json_object_set_new(root, "working_buffers_counted", json_true());
    json_object_set_new(root, "param_bytes", json_real(prec.param_bytes));
    json_object_set_new(root, "grad_bytes", json_real(prec.grad_bytes));
    json_object_set_new(root, "optimizer_bytes", json_real(prec.optim_bytes));
    json_object_set_new(root, "micro_batch", json_integer(first.micro_batch));
    json_object_set_new(root, "seq_per_rank", json_integer(first.seq_local));
    json_object_set_new(root, "ring_bytes", json_real((double)first.acts.ring * 4));
    json_object_set_new(root, "activations_bytes",
                        json_integer((json_int_t)(first.act_bytes + first.moe_act_bytes)));
    if (c->precision == PX_PRECISION_BF16)
        json_object_set_new(root, "bf16_scratch_bytes",
                            json_integer((json_int_t)first.bf16_scratch_bytes));
    if (a->dev != PX_PLAN_DEV_CPU) {
        px_group_kind_t kinds[3];
        uint64_t slot = px_plan_ipc_slot_bytes(px_env_int("PX_IPC_SLOT_BYTES"));
        int n = a->dev == PX_PLAN_DEV_CUDA
                    ? px_plan_ipc_comms(&c->layout, c->experts, 0, node_of_rank, kinds)
                    : 0;
        json_t *jg = json_array();
        for (int i = 0; i < n; i++)
            json_array_append_new(jg, json_string(px_group_name(kinds[i])));
        json_object_set_new(root, "ipc_scratch",
                            json_pack("{s:s, s:i, s:o, s:I, s:I}", "device",
                                      px_plan_dev_name(a->dev), "communicators", n, "groups", jg,
                                      "slot_bytes", (json_int_t)slot, "bytes",
                                      (json_int_t)px_plan_ipc_bytes(n, slot)));
    }
    if (c->experts) {
        px_model_moe_t mm = {.layers = c->layers, .dim = c->dim, .experts = c->experts,
                             .moe_every = c->moe_every};
        json_object_set_new(root, "moe",
                            json_pack("{s:i, s:i, s:i, s:I, s:I, s:I}", "experts", c->experts,
                                      "moe_layers", px_model_moe_num_layers(&mm), "top_k",
                                      c->top_k, "expert_params",
                                      (json_int_t)px_model_moe_num_params(&mm), "rank_params",
                                      (json_int_t)px_model_moe_rank_params(&mm, c->layout.ep),
                                      "activations_bytes", (json_int_t)first.moe_act_bytes));
    }
    if (pp > 1) {
        json_t *jp = json_object();
        rc = print_pipeline(a, jp);
        json_object_set_new(root, "pipeline", jp);
    }
    px_job_plan_free(&first);
    return rc;
}

int pctl_cmd_plan(pctl_ctx_t *ctx, int argc, char **argv)
{
    plan_args_t a = {0};
    px_cluster_t cl;
    px_step_engine_t eng;
    const px_step_engine_t *engp = NULL;
    int done = 0, rc;
    int *node_of_rank;
    json_t *root = NULL;

    if ((rc = parse_args(argc, argv, &a, &done)) != PCTL_EXIT_OK || done)
        return rc;
    if ((rc = check_job(&a)) != PCTL_EXIT_OK)
        return rc;
    if (a.cluster) {
        char err[512];
        int parallax = 1;
        if (!strcmp(a.cluster, "local")) {
            char *abs;
            if (!a.data_given)
                return pctl_usage_error("plan", "--cluster local needs --data FILE (the token "
                                        "file its calibration jobs read)");
            if (!(abs = realpath(a.cfg.data_path, NULL)))
                return pctl_usage_error("plan", "invalid value '%s' for --data: %s",
                                        a.cfg.data_path, strerror(errno));
            px_job_config_t c = a.cfg;
            c.data_path = abs;
            rc = pctl_cluster_local(ctx, &c, NULL, &cl, &a.dev);
            free(abs);
            if (rc != PCTL_EXIT_OK)
                return rc;
            a.dev_given = 1;
        } else if (px_cluster_parse(a.cluster, &cl, err, sizeof(err)) != PX_OK)
            return pctl_usage_error("plan", "--cluster %s", err);
        if (a.save_cluster && (rc = pctl_cluster_save(&cl, a.save_cluster)) != PCTL_EXIT_OK)
            return rc;
        if (a.engine && pctl_plan_engine_parse(a.engine, &eng, &parallax))
            return pctl_usage_error("plan", "--engine '%s': parallax, megatron, torchtitan or "
                                    "llmc", a.engine);
        engp = parallax ? NULL : &eng;
        if (!a.dev_given)
            a.dev = strcmp(cl.dev.name, "cpu") ? PX_PLAN_DEV_CUDA : PX_PLAN_DEV_CPU;
        if (!a.nodes_given) {
            a.nodes = cl.nodes;
            a.per_node = cl.per_node;
        }
        if (a.search) {
            json_t *sroot = a.json ? json_object() : NULL;
            return pctl_plan_search(&a.cfg, &cl, engp, a.dev, a.top ? a.top : 10, sroot);
        }
    }
    if (!(node_of_rank = place(&a, &rc)))
        return rc;
    if (a.json) {
        const px_layout_t *l = &a.cfg.layout;
        root = json_pack("{s:i, s:i, s:i, s:i, s:i, s:b, s:i, s:b, s:s, s:s, s:s}", "dp", l->dp,
                         "tp", l->tp, "pp", l->pp, "cp", l->cp, "ep", l->ep, "sequence_parallel",
                         a.cfg.sequence_parallel && l->tp > 1, "batch", a.cfg.batch,
                         "memory_planned", 1, "accounting", a.paper ? "paper" : "engine",
                         "precision", px_job_config_precision_name(a.cfg.precision), "device",
                         px_plan_dev_name(a.dev));
        if (!root) {
            free(node_of_rank);
            return PCTL_EXIT_FAIL;
        }
    }
    rc = a.params > 0 ? plan_params(&a, root) : plan_gpt(&a, node_of_rank, root);
    if (rc == PCTL_EXIT_OK && root) {
        json_object_set_new(root, "layout", layout_json(&a, node_of_rank));
        if (a.cluster)
            rc = pctl_plan_time(&a.cfg, &cl, engp, a.dev, root);
        if (rc == PCTL_EXIT_OK)
            rc = pctl_json_print(root) ? PCTL_EXIT_FAIL : PCTL_EXIT_OK;
        else
            json_decref(root);
    } else {
        json_decref(root);
        if (rc == PCTL_EXIT_OK)
            print_layout(&a, node_of_rank);
        if (rc == PCTL_EXIT_OK && a.cluster)
            rc = pctl_plan_time(&a.cfg, &cl, engp, a.dev, NULL);
    }
    free(node_of_rank);
    return rc;
}
