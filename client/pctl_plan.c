/* pctl_plan.c: `pctl plan`, the per-device memory plan and the parallel
 * layout of a job (local, no daemon).
 *
 * Uses the planner's code (planner/plan.c, planner/layout.c), the same
 * arithmetic that lays out a rank's buffers and that the daemon places and
 * the ranks split their groups by, so the prediction and the job agree by
 * construction. With --params N the model is one unit and only the ZeRO
 * paper's terms are counted; with GPT dims the working buffers of stages
 * 2/3 (gathered / in-flight layer units) are counted too. GB = 10^9 bytes.
 * The memory plan covers data and tensor parallelism (dp x tp, ZeRO within
 * each tensor rank's units: px_plan_gpt_units_tp) and the activations of
 * the local micro-batch (px_plan_gpt_activations_cp: --batch / (dp x
 * --grad-accum) sequences of --seq / cp tokens, tp, --sequence-parallel,
 * the ring attention's buffers with cp; the engine's buffers (bf16:
 * px_plan_gpt_activations_prec's bf16 storage),
 * whatever --precision says of the state; ZeRO shards over dp x cp); for
 * pp or ep > 1, or tp > 1 with --params only, it says it is not planned
 * yet instead of printing figures. With cp > 1 it prints each context
 * rank's slice of the sequence (chunks i and 2cp-1-i).
 * With --device cuda it adds the CUDA IPC scratch rings a rank keeps in
 * device memory (category comm; plan.h px_plan_ipc_comms: which of its
 * communicators set one up, PX_IPC_SLOT_BYTES per slot).
 * The layout table: every rank's coordinates and the node px_layout_place
 * puts it on (--nodes x --devices-per-node). Single-threaded; no I/O but
 * stdout and stderr. */
#include <getopt.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "jobcfg.h" /* PX_DEFAULT_VOCAB */
#include "layout.h"
#include "model.h"
#include "pipesched.h"
#include "pctl.h"
#include "plan.h"
#include "px_env.h"

static void fmt_gb(double bytes, char *buf, size_t len)
{
    if (bytes >= 1e9)
        snprintf(buf, len, "%.1f GB", bytes / 1e9);
    else if (bytes >= 1e6)
        snprintf(buf, len, "%.2f MB", bytes / 1e6);
    else
        snprintf(buf, len, "%.1f kB", bytes / 1e3);
}

/* "--name" of the long option whose value is `val` (for error messages;
 * argv[optind - 1] is the value, not the flag, in the "--dp 0" form). */
static const char *opt_flag(const struct option *opts, int val, char *buf, size_t len)
{
    for (; opts->name; opts++)
        if (opts->val == val) {
            snprintf(buf, len, "--%s", opts->name);
            return buf;
        }
    return "option";
}

/* The layout table: the layout, the reporting rank, the placement, then a
 * row per rank (rank, dp, tp, pp, cp, ep, node). */
static void print_layout(const px_layout_t *l, int nodes, int per_node, const int *node_of_rank)
{
    char buf[96];
    int world = px_layout_world(l);

    printf("layout: %s; reporting rank %d\n", px_layout_str(l, buf, sizeof(buf)),
           px_layout_reporting_rank(l));
    printf("placement: %d node%s x %d devices (tensor groups whole on one node)\n", nodes,
           nodes == 1 ? "" : "s", per_node);
    printf("%5s  %4s  %4s  %4s  %4s  %4s  %4s\n", "rank", "dp", "tp", "pp", "cp", "ep", "node");
    for (int r = 0; r < world; r++) {
        px_coord_t c;
        px_layout_coord(l, r, &c);
        printf("%5d  %4d  %4d  %4d  %4d  %4d  %4d\n", r, c.dp, c.tp, c.pp, c.cp, c.ep,
               node_of_rank[r]);
    }
}

/* The same as a JSON object (new reference; NULL when out of memory). */
static json_t *layout_json(const px_layout_t *l, int nodes, int per_node, const int *node_of_rank)
{
    int world = px_layout_world(l);
    json_t *ranks = json_array();
    json_t *o = json_pack("{s:i, s:i, s:i, s:i, s:i, s:i, s:i, s:i, s:i}", "dp", l->dp, "tp",
                          l->tp, "pp", l->pp, "cp", l->cp, "ep", l->ep, "world", world,
                          "reporting_rank", px_layout_reporting_rank(l), "nodes", nodes,
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

/* Context parallelism: each context rank's slice of a sequence of seq
 * tokens (2 x cp chunks of c; rank i holds chunks i and 2cp-1-i, ring_attn.h)
 * and the ring's buffer bytes (counted in the activations). */
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

/* --device cuda: the fused attention saves only the log-sum-exp (plan.h
 * px_plan_gpt_activations_dev); set once by pctl_cmd_plan before any
 * activation figure (pctl is single-threaded). */
static int plan_att_lse_only;

/* Interleaved 1F1B's activation bytes of stage st: each of its V chunks
 * (layers / (pp V) layers: one chunk model's buffers, as the engine cuts
 * them) times the micro-batches that chunk holds at once. *held_p = the
 * chunk-sized buffers summed over the chunks. -1 on a bad table. */
static double interleaved_stage_bytes(const px_pipe_schedule_t *sc, int st, int layers, int heads,
                                      int dim, int vocab, int micro, int seq, int tp, int sp,
                                      int cp, int bf16, int *held_p)
{
    px_plan_gpt_acts_t a;
    int per_chunk = layers / (sc->p * sc->v);
    /* seq: a context rank's seq/cp tokens (pctl_cmd_plan passes them) */
    if (px_plan_gpt_activations_dev(per_chunk, heads, dim, px_job_config_padded_vocab(vocab),
                                    micro, seq, tp, sp, cp, bf16, plan_att_lse_only,
                                    &a) != PX_OK)
        return -1.0;
    *held_p = px_pipe_schedule_slots(sc, st);
    return (double)a.bytes * *held_p;
}

/* Pipeline stages (pp > 1, GPT dims): per schedule, each stage's layers,
 * the micro-batches it holds at once (pipesched.h: GPipe M, 1F1B
 * min(p-s, M), ZB1 min(p, M); interleaved: summed over its V chunks of
 * layers / (pp V) layers each) and their activation bytes, the engine's
 * buffers (px_plan_gpt_activations_prec for the stage's (chunk's) layers,
 * plus the split backward's stash of 9C floats per token and layer for
 * ZB1). Interleaved is shown where its rules hold (with --schedule
 * interleaved they must: else a usage error naming the values).
 * Returns PCTL_EXIT_OK or PCTL_EXIT_USAGE (message printed). */
static int print_pipeline(int layers, int heads, int dim, int vocab, int seq, int tp, int sp,
                          int cp, int bf16, int pp, int M, int V, int micro, int sched_sel,
                          const char *spec, int print_sched, json_t *jpipe)
{
    char err[256];
    int *sl = calloc((size_t)pp, sizeof(int));
    if (!sl)
        return PCTL_EXIT_FAIL;
    if (px_pipe_stage_layers(layers, pp, spec, sl, err, sizeof(err)) != PX_OK ||
        (sched_sel == PX_PIPE_INTERLEAVED &&
         px_pipe_interleaved_check(layers, pp, V, M, err, sizeof(err)) != PX_OK)) {
        free(sl);
        return pctl_usage_error("plan", "%s", err);
    }
    if (!jpipe)
        printf("pipeline: pp %d, %d micro-batches of %d sequences; activation bytes per stage "
               "(fp32, the engine's buffers):\n%-6s  %-6s", pp, M, micro, "sched", "");
    if (!jpipe)
        for (int st = 0; st < pp; st++)
            printf("  stage %-2d (%d layer%s)  ", st, sl[st], sl[st] == 1 ? "" : "s");
    if (!jpipe)
        printf("\n");
    for (int k = 0; k < PX_PIPE_NKINDS; k++) {
        if (sched_sel >= 0 && k != sched_sel)
            continue;
        px_pipe_schedule_t *sc = NULL;
        if (k == PX_PIPE_INTERLEAVED) {
            if (px_pipe_interleaved_check(layers, pp, V, M, err, sizeof(err)) != PX_OK) {
                if (sched_sel == k) {
                    free(sl);
                    return pctl_usage_error("plan", "%s", err);
                }
                if (!jpipe)
                    printf("interleaved (V=%d): not possible: %s\n", V, err);
                continue;
            }
            if (px_pipe_schedule_create_v(k, pp, M, V, &sc) != PX_OK) {
                free(sl);
                return PCTL_EXIT_FAIL;
            }
            json_t *jst = json_array();
            if (!jpipe)
                printf("%-6s  V=%-4d", "interl", V);
            for (int st = 0; st < pp; st++) {
                int held = 0;
                double bytes = interleaved_stage_bytes(sc, st, layers, heads, dim, vocab, micro,
                                                       seq, tp, sp, cp, bf16, &held);
                char b[32];
                if (bytes < 0) {
                    px_pipe_schedule_destroy(sc);
                    json_decref(jst);
                    free(sl);
                    return PCTL_EXIT_USAGE;
                }
                fmt_gb(bytes, b, sizeof(b));
                if (jpipe)
                    json_array_append_new(jst, json_pack("{s:i, s:i, s:i, s:i, s:f}", "stage", st,
                                                         "layers", layers / pp, "chunks", V,
                                                         "micro_batches_held", held,
                                                         "activation_bytes", bytes));
                else {
                    char h[24];
                    snprintf(h, sizeof(h), "x%d/%d", held, V);
                    printf("  %10s %-10s", b, h);
                }
            }
            if (jpipe)
                json_object_set_new(jpipe, px_pipe_schedule_name(k), jst);
            else {
                json_decref(jst);
                printf("\n");
            }
            if (print_sched && !jpipe)
                px_pipe_schedule_print(sc, stdout);
            px_pipe_schedule_destroy(sc);
            continue;
        }
        if (px_pipe_schedule_create(k, pp, M, &sc) != PX_OK) {
            free(sl);
            return PCTL_EXIT_FAIL;
        }
        json_t *jst = json_array();
        if (!jpipe)
            printf("%-6s  %-6s", px_pipe_schedule_name(k), "");
        for (int st = 0; st < pp; st++) {
            px_plan_gpt_acts_t a;
            /* seq: a context rank's seq/cp tokens (pctl_cmd_plan passes them) */
            if (px_plan_gpt_activations_dev(sl[st], heads, dim,
                                            px_job_config_padded_vocab(vocab), micro, seq, tp,
                                            sp, cp, bf16, plan_att_lse_only, &a) != PX_OK) {
                px_pipe_schedule_destroy(sc);
                json_decref(jst);
                free(sl);
                return PCTL_EXIT_USAGE;
            }
            double per = (double)a.bytes;
            if (px_pipe_schedule_split(sc))
                per += 4.0 * 9 * dim * (double)micro * seq * sl[st];
            int slots = px_pipe_schedule_slots(sc, st);
            char b[32];
            fmt_gb(per * slots, b, sizeof(b));
            if (jpipe)
                json_array_append_new(jst, json_pack("{s:i, s:i, s:i, s:f}", "stage", st,
                                                     "layers", sl[st], "micro_batches_held",
                                                     slots, "activation_bytes", per * slots));
            else
                printf("  %10s x%-3d      ", b, slots);
        }
        if (jpipe)
            json_object_set_new(jpipe, px_pipe_schedule_name(k), jst);
        else {
            json_decref(jst);
            printf("\n");
        }
        if (print_sched && !jpipe)
            px_pipe_schedule_print(sc, stdout);
        px_pipe_schedule_destroy(sc);
    }
    if (!jpipe)
        printf("(xN: the micro-batches a stage holds activations for at once; interleaved "
               "xN/V: chunk activations (layers / (pp x V) each) summed over its V chunks)\n");
    free(sl);
    return PCTL_EXIT_OK;
}

int pctl_cmd_plan(pctl_ctx_t *ctx, int argc, char **argv)
{
    char flag[48];
    enum { O_PARAMS = 256, O_LAYERS, O_DIM, O_VOCAB, O_SEQ, O_HEADS, O_DP, O_TP, O_PP, O_CP,
           O_EP, O_NODES, O_PER_NODE, O_ZERO, O_PREC, O_K, O_JSON, O_HELP, O_BATCH, O_ACCUM,
           O_SP, O_MICRO, O_SCHED, O_STAGE_LAYERS, O_PRINT_SCHED, O_VSTAGES, O_EXPERTS,
           O_TOPK, O_MOE_EVERY, O_CAPF, O_DROPLESS, O_DEVICE };
    static const struct option opts[] = {
        {"params", 1, 0, O_PARAMS}, {"layers", 1, 0, O_LAYERS}, {"dim", 1, 0, O_DIM},
        {"vocab", 1, 0, O_VOCAB}, {"seq", 1, 0, O_SEQ}, {"heads", 1, 0, O_HEADS},
        {"dp", 1, 0, O_DP}, {"tp", 1, 0, O_TP}, {"pp", 1, 0, O_PP}, {"cp", 1, 0, O_CP},
        {"ep", 1, 0, O_EP}, {"nodes", 1, 0, O_NODES}, {"devices-per-node", 1, 0, O_PER_NODE},
        {"zero", 1, 0, O_ZERO}, {"precision", 1, 0, O_PREC},
        {"optimizer-bytes-per-param", 1, 0, O_K}, {"json", 0, 0, O_JSON},
        {"batch", 1, 0, O_BATCH}, {"grad-accum", 1, 0, O_ACCUM},
        {"sequence-parallel", 0, 0, O_SP}, {"micro-batches", 1, 0, O_MICRO},
        {"schedule", 1, 0, O_SCHED}, {"stage-layers", 1, 0, O_STAGE_LAYERS},
        {"virtual-stages", 1, 0, O_VSTAGES},
        {"print-schedule", 0, 0, O_PRINT_SCHED},
        {"experts", 1, 0, O_EXPERTS},
        {"top-k", 1, 0, O_TOPK}, {"moe-every", 1, 0, O_MOE_EVERY},
        {"capacity-factor", 1, 0, O_CAPF}, {"dropless", 0, 0, O_DROPLESS},
        {"device", 1, 0, O_DEVICE},
        {"help", 0, 0, O_HELP}, {0, 0, 0, 0}};
    double params = 0, k = -1;
    uint64_t layers = 4, dim = 128, vocab = PX_DEFAULT_VOCAB, seq = 128, heads = 4, dp = 1, v;
    uint64_t tp = 1, pp = 1, cp = 1, ep = 1, nodes = 1, per_node = 0;
    uint64_t batch = 0, accum = 1; /* batch 0: dp x grad_accum (micro-batch 1) */
    int zero = -1, json = 0, fp32 = 0, bf16 = 0, have_dims = 0, sp = 0, opt;
    uint64_t mbs = 1;
    uint64_t vstages = 2; /* interleaved: model chunks per stage */
    int sched_sel = -1, print_sched = 0;
    uint64_t experts = 0, top_k = 2, moe_every = 1; /* the mixture of experts (moe.h) */
    double capf = 1.25;
    int dropless = 0;
    const char *stage_spec = NULL;
    const char *device = "cpu"; /* issue 12: cuda counts the IPC scratch */
    (void)ctx;

    opterr = 0;
    while ((opt = getopt_long(argc, argv, "", opts, NULL)) != -1) {
        switch (opt) {
        case O_PARAMS:
            if (pctl_parse_float("plan", "--params", optarg, 1, 1e15, &params))
                return PCTL_EXIT_USAGE;
            if (params != floor(params))
                return pctl_usage_error("plan", "--params %s is not a whole number", optarg);
            break;
        case O_LAYERS: case O_DIM: case O_VOCAB: case O_SEQ: case O_HEADS: case O_DP:
            if (pctl_parse_u64("plan", opt_flag(opts, opt, flag, sizeof(flag)), optarg, 1,
                               1u << 30, &v))
                return PCTL_EXIT_USAGE;
            if (opt == O_DP)
                dp = v;
            else {
                have_dims = 1;
                *(opt == O_LAYERS ? &layers : opt == O_DIM ? &dim : opt == O_VOCAB ? &vocab
                  : opt == O_SEQ ? &seq : &heads) = v;
            }
            break;
        case O_TP: case O_PP: case O_CP: case O_EP: case O_NODES: case O_PER_NODE:
            if (pctl_parse_u64("plan", opt_flag(opts, opt, flag, sizeof(flag)), optarg, 1,
                               PX_LAYOUT_MAX_WORLD, &v))
                return PCTL_EXIT_USAGE;
            *(opt == O_TP ? &tp : opt == O_PP ? &pp : opt == O_CP ? &cp : opt == O_EP ? &ep
              : opt == O_NODES ? &nodes : &per_node) = v;
            break;
        case O_ZERO:
            if (!strcmp(optarg, "all"))
                zero = -1;
            else if (pctl_parse_u64("plan", "--zero", optarg, 0, 3, &v))
                return PCTL_EXIT_USAGE;
            else
                zero = (int)v;
            break;
        case O_PREC:
            if (strcmp(optarg, "fp32") && strcmp(optarg, "mixed") && strcmp(optarg, "bf16"))
                return pctl_usage_error("plan", "--precision '%s': fp32, bf16 or mixed", optarg);
            /* bf16: the engine's --precision bf16, fp32 state (as fp32) plus
             * the bf16 GEMM operands' scratch (plan.h) */
            bf16 = !strcmp(optarg, "bf16");
            fp32 = bf16 || !strcmp(optarg, "fp32");
            break;
        case O_K:
            if (pctl_parse_float("plan", "--optimizer-bytes-per-param", optarg, 0, 1024, &k))
                return PCTL_EXIT_USAGE;
            break;
        case O_BATCH: case O_ACCUM:
            if (pctl_parse_u64("plan", opt_flag(opts, opt, flag, sizeof(flag)), optarg, 1,
                               1u << 30, &v))
                return PCTL_EXIT_USAGE;
            *(opt == O_BATCH ? &batch : &accum) = v;
            break;
        case O_EXPERTS: case O_TOPK: case O_MOE_EVERY:
            if (pctl_parse_u64("plan", opt_flag(opts, opt, flag, sizeof(flag)), optarg,
                               opt == O_EXPERTS ? 0 : 1, 4096, &v))
                return PCTL_EXIT_USAGE;
            *(opt == O_EXPERTS ? &experts : opt == O_TOPK ? &top_k : &moe_every) = v;
            break;
        case O_CAPF:
            if (pctl_parse_float("plan", "--capacity-factor", optarg, 1e-6, 1e6, &capf))
                return PCTL_EXIT_USAGE;
            break;
        case O_DROPLESS: dropless = 1; break;
        case O_DEVICE:
            if (strcmp(optarg, "cpu") && strcmp(optarg, "cuda") && strcmp(optarg, "sim"))
                return pctl_usage_error("plan", "--device '%s': cpu, cuda or sim", optarg);
            device = optarg;
            break;
        case O_SP: sp = 1; break;
        case O_MICRO:
            if (pctl_parse_u64("plan", "--micro-batches", optarg, 1, 1u << 20, &mbs))
                return PCTL_EXIT_USAGE;
            break;
        case O_SCHED:
            sched_sel = strcmp(optarg, "all") ? px_pipe_schedule_parse(optarg) : -1;
            if (strcmp(optarg, "all") && sched_sel < 0)
                return pctl_usage_error("plan", "--schedule '%s': gpipe, 1f1b, zb1, "
                                        "interleaved or all", optarg);
            break;
        case O_STAGE_LAYERS: stage_spec = optarg; break;
        case O_VSTAGES:
            if (pctl_parse_u64("plan", "--virtual-stages", optarg, 2, 1024, &vstages))
                return PCTL_EXIT_USAGE;
            break;
        case O_PRINT_SCHED: print_sched = 1; break;
        case O_JSON: json = 1; break;
        case O_HELP: return pctl_help("plan");
        default:
            return pctl_usage_error("plan", "unknown or incomplete option '%s'",
                                    argv[optind - 1]);
        }
    }
    if (optind < argc)
        return pctl_usage_error("plan", "unexpected argument '%s'", argv[optind]);
    if (params > 0 && have_dims)
        return pctl_usage_error("plan", "give either --params or the GPT dims, not both");
    if (!params && dim % heads)
        return pctl_usage_error("plan", "dim %llu is not divisible by heads %llu",
                                (unsigned long long)dim, (unsigned long long)heads);

    /* the layout: checked, and placed, before anything is printed */
    char err[256];
    px_layout_t layout = {.dp = dp > PX_LAYOUT_MAX_WORLD ? 0 : (int)dp, .tp = (int)tp,
                          .pp = (int)pp, .cp = (int)cp, .ep = (int)ep};
    if (dp > PX_LAYOUT_MAX_WORLD)
        return pctl_usage_error("plan", "dp=%llu is out of range (1..%d)",
                                (unsigned long long)dp, PX_LAYOUT_MAX_WORLD);
    if (px_layout_check(&layout, err, sizeof(err)) != PX_OK)
        return pctl_usage_error("plan", "%s", err);
    if (!params && heads % tp)
        return pctl_usage_error("plan", "heads %llu is not divisible by tp %llu",
                                (unsigned long long)heads, (unsigned long long)tp);
    if (!params && layers < pp)
        return pctl_usage_error("plan", "layers %llu are fewer than pp %llu pipeline stages",
                                (unsigned long long)layers, (unsigned long long)pp);
    if (!batch)
        batch = dp * accum * mbs;
    if (pp > 1 && batch % (dp * accum * mbs))
        return pctl_usage_error("plan", "batch=%llu is not divisible by dp=%llu x grad_accum=%llu "
                                "x micro_batches=%llu", (unsigned long long)batch,
                                (unsigned long long)dp, (unsigned long long)accum,
                                (unsigned long long)mbs);
    if (batch % (dp * accum))
        return pctl_usage_error("plan", "batch=%llu is not divisible by dp=%llu x grad_accum=%llu",
                                (unsigned long long)batch, (unsigned long long)dp,
                                (unsigned long long)accum);
    const uint64_t micro = batch / (dp * accum);
    if (!params && cp > 1 && seq % (2 * cp))
        return pctl_usage_error("plan", "seq=%llu is not divisible by 2 x cp=%llu (each context "
                                "rank holds two of the 2 x cp chunks of a sequence)",
                                (unsigned long long)seq, (unsigned long long)cp);
    const uint64_t seq_local = seq / cp; /* a context rank's tokens of each sequence */
    if (sp && tp == 1)
        return pctl_usage_error("plan", "--sequence-parallel needs --tp > 1");
    if (!params && tp > 1 &&
        ((uint64_t)px_job_config_padded_vocab((int)vocab) % tp || (sp && (micro * seq) % tp)))
        return pctl_usage_error("plan", "tp=%llu must divide the padded vocab %d%s (batch "
                                "%llu x seq %llu per micro-batch)", (unsigned long long)tp,
                                px_job_config_padded_vocab((int)vocab),
                                sp ? " and, with sequence parallelism, the micro-batch's tokens"
                                   : "",
                                (unsigned long long)micro, (unsigned long long)seq);
    if (experts && params > 0)
        return pctl_usage_error("plan", "--experts needs the GPT dims, not --params");
    if (experts && (top_k > 2 || top_k > experts))
        return pctl_usage_error("plan", "top_k=%llu must be 1 or 2 and at most experts=%llu",
                                (unsigned long long)top_k, (unsigned long long)experts);
    if (experts && experts % ep)
        return pctl_usage_error("plan", "experts=%llu is not divisible by ep=%llu",
                                (unsigned long long)experts, (unsigned long long)ep);
    const int world = px_layout_world(&layout);
    if (!per_node)
        per_node = ((uint64_t)world + nodes - 1) / nodes;
    int *node_free = malloc(sizeof(int) * nodes), *node_of_rank = malloc(sizeof(int) * world);
    if (!node_free || !node_of_rank) {
        free(node_free);
        free(node_of_rank);
        fprintf(stderr, "pctl: plan: out of memory\n");
        return PCTL_EXIT_FAIL;
    }
    for (uint64_t n = 0; n < nodes; n++)
        node_free[n] = (int)per_node;
    px_status_t placed = px_layout_place(&layout, node_free, (int)nodes, node_of_rank, err,
                                         sizeof(err));
    free(node_free);
    if (placed != PX_OK) {
        fprintf(stderr, "pctl: plan: %s (%llu node%s x %llu devices)\n", err,
                (unsigned long long)nodes, nodes == 1 ? "" : "s", (unsigned long long)per_node);
        free(node_of_rank);
        return PCTL_EXIT_USAGE;
    }
    /* the memory plan is dp x tp's; the other strategies' split is not
     * modelled yet */
    const int memory_planned = (tp == 1 || !params) && pp == 1 &&
                               (ep == 1 || (experts && tp == 1 && cp == 1));
    static const char memory_note[] =
        "memory per device is planned for data, tensor and context parallelism (dp, tp with "
        "GPT dims, cp, ZeRO) only: the split of parameters, activations and buffers by pp "
        "and ep is future work, so no figures are printed for this layout";

    px_plan_precision_t prec;
    if (fp32)
        px_plan_precision_fp32(&prec);
    else
        px_plan_precision_mixed(&prec, 12);
    if (k >= 0)
        prec.optim_bytes = k;

    uint64_t *units = NULL, one, total = 0;
    int nunits = 1, known = 0;
    if (params > 0) {
        one = (uint64_t)params;
        units = &one;
    } else {
        total = px_plan_gpt_units((int)layers, (int)dim, (int)vocab, (int)seq, &units);
        if (total && tp > 1) { /* one tensor rank's units (model.h) */
            free(units);
            units = NULL;
            total = px_plan_gpt_units_tp((int)layers, (int)dim, (int)vocab, (int)seq, (int)tp,
                                         &units);
        }
        if (!total) {
            fprintf(stderr, "pctl: plan: out of memory\n");
            free(node_of_rank);
            return PCTL_EXIT_FAIL;
        }
        nunits = (int)layers + 2; /* embedding, layers, head (plan.h) */
        known = 1;
    }
    /* activations of one rank's micro-batch (GPT dims only) */
    px_plan_gpt_acts_t acts = {0};
    plan_att_lse_only = !strcmp(device, "cuda"); /* sim runs the cpu attention: (T,T) */
    if (known && memory_planned &&
        px_plan_gpt_activations_dev((int)layers, (int)heads, (int)dim,
                                    px_job_config_padded_vocab((int)vocab), (int)micro,
                                    (int)seq_local, (int)tp, sp, (int)cp, bf16,
                                    plan_att_lse_only, &acts) != PX_OK) {
        free(units);
        free(node_of_rank);
        return PCTL_EXIT_USAGE; /* the planner named the values */
    }
    /* the mixture of experts: routers and E/ep experts per MoE layer on
     * each rank, outside ZeRO; its activations (plan.h, as moe.c) */
    px_model_moe_t mm = {.layers = (int)layers, .dim = (int)dim, .experts = (int)experts,
                         .moe_every = (int)moe_every};
    uint64_t moe_rank = experts ? px_model_moe_rank_params(&mm, (int)ep) : 0;
    /* every tensor rank computes the MoE whole (moe.h); with cp on its
     * context slice's tokens */
    uint64_t moe_acts = experts
                            ? px_plan_moe_activation_bytes(px_model_moe_num_layers(&mm),
                                                           (int)(micro * seq_local), (int)ep,
                                                           (int)experts, (int)top_k, (int)dim,
                                                           dropless, capf)
                            : 0;
    /* --precision bf16: the GEMM operands rounded per call, as the device's
     * backend allocates them (CUDA: bf16 copies, stored bf16 inputs read in
     * place; cpu and sim: doubles in host memory) */
    const uint64_t bf16_scratch =
        bf16 && known ? px_plan_bf16_gemm_scratch_bytes((int)dim,
                                                        px_job_config_padded_vocab((int)vocab),
                                                        (int)(micro * seq_local), (int)tp, sp,
                                                        !strcmp(device, "cuda"))
                      : 0;
    /* issue 12: CUDA IPC scratch ("comm"): rings of the communicators whose
     * device collectives stay on one node (plan.h px_plan_ipc_comms) */
    px_group_kind_t ipc_kinds[3];
    const int ipc_n = !strcmp(device, "cuda")
                          ? px_plan_ipc_comms(&layout, (int)experts, 0, node_of_rank, ipc_kinds)
                          : 0;
    const uint64_t ipc_slot = px_plan_ipc_slot_bytes(px_env_int("PX_IPC_SLOT_BYTES"));
    const uint64_t ipc_bytes = px_plan_ipc_bytes(ipc_n, ipc_slot);
    char ipc_groups[64] = "";
    for (int i = 0; i < ipc_n; i++)
        snprintf(ipc_groups + strlen(ipc_groups), sizeof(ipc_groups) - strlen(ipc_groups),
                 "%s%s", i ? ", " : "", px_group_name(ipc_kinds[i]));
    if (!json && !strcmp(device, "cuda")) {
        char b1[32], b2[32];
        fmt_gb((double)ipc_slot, b1, sizeof(b1));
        fmt_gb((double)ipc_bytes, b2, sizeof(b2));
        printf("device scratch per rank (CUDA IPC rings, category comm): %d communicator%s%s%s%s "
               "x %d slots x %s = %s (groups whose ranks share a node; the others stage)\n",
               ipc_n, ipc_n == 1 ? "" : "s", ipc_n ? " (" : "", ipc_groups, ipc_n ? ")" : "",
               PX_PLAN_IPC_SLOTS, b1, b2);
    } else if (!json && !strcmp(device, "sim")) {
        printf("device scratch per rank: none (the simulated device has no IPC ops: its device "
               "buffers are staged through host memory)\n");
    }
    json_t *jstages = json_array();
    if (!json) {
        if (known)
            printf("model: GPT %llu layers, dim %llu, vocab %llu, seq %llu: %.4g parameters%s\n",
                   (unsigned long long)layers, (unsigned long long)dim,
                   (unsigned long long)vocab, (unsigned long long)seq, (double)total,
                   tp > 1 ? " per tensor rank" : "");
        if (experts && known)
            printf("experts: %llu per MoE layer, %d MoE layer(s) (every %llu), top-%llu, %s; "
                   "%.4g expert parameters in all, %.4g per rank (routers + %llu experts per "
                   "layer, not sharded by ZeRO); MoE activations per rank %.3g MB\n",
                   (unsigned long long)experts, px_model_moe_num_layers(&mm),
                   (unsigned long long)moe_every, (unsigned long long)top_k,
                   dropless ? "dropless" : "capacity", (double)px_model_moe_num_params(&mm),
                   (double)moe_rank, (unsigned long long)(experts / ep), moe_acts / 1e6);
        if (memory_planned) {
            printf("dp %llu, tp %llu; bytes per parameter: params %g, grads %g, optimizer %g "
                   "(%s)\n",
                   (unsigned long long)dp, (unsigned long long)tp, prec.param_bytes,
                   prec.grad_bytes, prec.optim_bytes,
                   bf16   ? "--precision bf16: fp32 master weights, grads and AdamW; bf16 GEMM and attention operands"
                   : fp32 ? "fp32 AdamW"
                          : "mixed precision, as the ZeRO paper counts");
            if (bf16_scratch) {
                char b[32];
                fmt_gb((double)bf16_scratch, b, sizeof(b));
                printf("bf16 GEMM operands per rank: %s of %s (no bf16 weight copy: "
                       "the largest linear layer's weight and activations, rounded per GEMM)\n",
                       b, !strcmp(device, "cuda") ? "device scratch, bf16"
                                                  : "host scratch, widened to doubles");
            }
            if (known) {
                char b[32];
                fmt_gb((double)(acts.bytes + moe_acts), b, sizeof(b));
                printf("activations per rank: %s (micro-batch %llu x seq %llu, tp %llu, "
                       "sequence parallelism %s; the engine's %s, every ZeRO stage)\n",
                       b, (unsigned long long)micro, (unsigned long long)seq_local,
                       (unsigned long long)tp, sp ? "on" : "off",
                       !bf16 ? "fp32 buffers"
                       : sp  ? "buffers, the GELU output bf16, the rest fp32"
                             : "buffers, LayerNorm and GELU outputs bf16, the rest fp32");
                printf("  attention state: %s; classifier: one (N,Vp) buffer (probabilities "
                       "and their gradient in place over the logits)\n",
                       cp > 1 ? "each row's log-sum-exp (ring attention)"
                       : plan_att_lse_only ? "each row's log-sum-exp (fused CUDA attention)"
                                           : "the (B,NH,T,T) probabilities (cpu attention)");
                if (cp > 1)
                    print_context((int)cp, (int)seq, (double)acts.ring * 4);
            }
            printf("%-5s  %12s  %12s  %12s  %12s  %12s\n", "zero", "params", "grads",
                   "optimizer", "total", "at once");
        } else {
            printf("(%s)\n", memory_note);
        }
    }
    int rc = PCTL_EXIT_OK;
    for (int z = 0; z <= 3 && memory_planned; z++) {
        if (zero >= 0 && z != zero)
            continue;
        px_plan_t *p;
        /* the cp ranks of a dp index replicate the model: ZeRO shards over dp x cp */
        if (px_plan_create(units, nunits, known, (int)(dp * cp), z, &prec, &p) != PX_OK) {
            rc = PCTL_EXIT_FAIL;
            break;
        }
        if (moe_rank)
            px_plan_add_unsharded(p, moe_rank);
        double tot = p->bytes[PX_MEM_PARAMS] + p->bytes[PX_MEM_GRADS] + p->bytes[PX_MEM_OPTIM];
        if (json) {
            json_array_append_new(
                jstages, json_pack("{s:i, s:I, s:I, s:I, s:f, s:f, s:f, s:f, s:f}", "zero", z,
                                   "params_count", (json_int_t)p->params, "padded",
                                   (json_int_t)p->padded, "shard", (json_int_t)p->shard,
                                   "params_bytes", p->bytes[PX_MEM_PARAMS], "grads_bytes",
                                   p->bytes[PX_MEM_GRADS], "optimizer_bytes",
                                   p->bytes[PX_MEM_OPTIM], "total_bytes", tot,
                                   "state_peak_bytes", p->state_peak));
        } else {
            char b[5][32];
            fmt_gb(p->bytes[PX_MEM_PARAMS], b[0], 32);
            fmt_gb(p->bytes[PX_MEM_GRADS], b[1], 32);
            fmt_gb(p->bytes[PX_MEM_OPTIM], b[2], 32);
            fmt_gb(tot, b[3], 32);
            fmt_gb(p->state_peak, b[4], 32);
            printf("%-5d  %12s  %12s  %12s  %12s  %12s\n", z, b[0], b[1], b[2], b[3], b[4]);
        }
        px_plan_destroy(p);
    }
    if (json && rc == PCTL_EXIT_OK) {
        json_t *o = json_pack("{s:I, s:I, s:I, s:I, s:f, s:b, s:I, s:I, s:I, s:i, s:f, s:f, s:f, "
                              "s:b, s:o, s:b}",
                              "dp", (json_int_t)dp, "tp", (json_int_t)tp, "cp", (json_int_t)cp,
                              "seq_per_rank", (json_int_t)seq_local, "ring_bytes",
                              (double)acts.ring * 4, "sequence_parallel",
                              sp, "batch", (json_int_t)batch, "micro_batch", (json_int_t)micro,
                              "activations_bytes", (json_int_t)(acts.bytes + moe_acts),
                              "units", nunits, "param_bytes", prec.param_bytes, "grad_bytes",
                              prec.grad_bytes, "optimizer_bytes", prec.optim_bytes,
                              "working_buffers_counted", known, "stages", jstages,
                              "memory_planned", memory_planned);
        if (o && !memory_planned)
            json_object_set_new(o, "memory_note", json_string(memory_note));
        if (o && bf16)
            json_object_set_new(o, "bf16_gemm_scratch_bytes", json_integer((json_int_t)bf16_scratch));
        if (o && strcmp(device, "cpu")) {
            json_t *jg = json_array();
            for (int i = 0; i < ipc_n; i++)
                json_array_append_new(jg, json_string(px_group_name(ipc_kinds[i])));
            json_object_set_new(o, "ipc_scratch",
                                json_pack("{s:s, s:i, s:o, s:I, s:I}", "device", device,
                                          "communicators", ipc_n, "groups", jg, "slot_bytes",
                                          (json_int_t)ipc_slot, "bytes", (json_int_t)ipc_bytes));
        }
        if (o && experts)
            json_object_set_new(o, "moe", json_pack("{s:I, s:i, s:I, s:I, s:I, s:I}", "experts",
                                                    (json_int_t)experts, "moe_layers",
                                                    px_model_moe_num_layers(&mm), "top_k",
                                                    (json_int_t)top_k, "expert_params",
                                                    (json_int_t)px_model_moe_num_params(&mm),
                                                    "rank_params", (json_int_t)moe_rank,
                                                    "activations_bytes",
                                                    (json_int_t)moe_acts));
        if (o && known && pp > 1) {
            json_t *jp = json_object();
            if (print_pipeline((int)layers, (int)heads, (int)dim, (int)vocab, (int)seq_local,
                               (int)tp, sp, (int)cp, bf16, (int)pp, (int)mbs, (int)vstages,
                               (int)(micro / mbs), sched_sel, stage_spec,
                               0, jp) == PCTL_EXIT_OK)
                json_object_set_new(o, "pipeline", jp);
            else
                json_decref(jp);
        }
        if (o)
            json_object_set_new(o, "layout", layout_json(&layout, (int)nodes, (int)per_node,
                                                         node_of_rank));
        rc = pctl_json_print(o) ? PCTL_EXIT_FAIL : PCTL_EXIT_OK;
    } else {
        json_decref(jstages);
        if (!json && !known && memory_planned)
            printf("(one unit from --params: the gathered / in-flight layer buffers of stages "
                   "2 and 3 are not counted; give the GPT dims to count them)\n");
        if (!json && known && memory_planned && rc == PCTL_EXIT_OK)
            printf("(stages 2/3 count the embedding and head units and 2 layers gathered or in "
                   "flight; \"at once\" is the peak of the sum, what a rank measures)\n");
        if (!json && rc == PCTL_EXIT_OK && known && pp > 1)
            rc = print_pipeline((int)layers, (int)heads, (int)dim, (int)vocab, (int)seq_local,
                                (int)tp, sp, (int)cp, bf16, (int)pp, (int)mbs, (int)vstages,
                                (int)(micro / mbs), sched_sel, stage_spec,
                                print_sched, NULL);
        if (!json && rc == PCTL_EXIT_OK)
            print_layout(&layout, (int)nodes, (int)per_node, node_of_rank);
    }
    if (known)
        free(units);
    free(node_of_rank);
    return rc;
}
