/* train.c: the training loop (px_train.h): data-parallel GPT training under
 * ZeRO stage 0-3 (zero.h), with gradient accumulation and checkpoints.
 *
 * The world is cut into the layout's process groups (groups.h); data
 * parallelism and ZeRO run on the dp group, the global grad norm is
 * completed over the mp group (a no-op until tensor / pipeline parallelism
 * give it more than one rank). With context parallelism (cp > 1) the cp
 * ranks of a dp index take the same sequences, each its two chunks
 * (cp_cut, ring_attn.h), and data parallelism and ZeRO run on the dp x cp
 * group instead: every rank holds T/cp tokens of each sequence, so the
 * average of the local means is still the global mean.
 * Per step: for each of grad_accum micro-batches, cut this rank's share of
 * the micro-batch (micro m of the global batch is sequences [m*B/A,
 * (m+1)*B/A); dp rank r takes its r-th part), forward, backward (ZeRO 2/3
 * reduce-scatter during backward); then px_zero_reduce (stage 0: one
 * all-reduce with the local mean loss in the spare slot; equal token counts
 * per rank, so the average of local means is the global mean), global grad
 * norm and clipping (as torch.nn.utils.clip_grad_norm_), AdamW with warm-up
 * + cosine on this rank's slice, parameters re-gathered where replicated.
 * Memory is laid out by plan.h and tagged (memacct.h); the step report
 * carries this rank's figures and the plan's.
 *
 * Runs on the rank's one training thread. */
#include "px_train.h"

#include <cblas.h>
#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "checkpoint.h"
#include "data.h"
#include "eval.h"
#include "gpt.h"
#include "groups.h"
#include "jobcfg.h"
#include "memacct.h"
#include "moe.h"
#include "moe_checkpoint.h"
#include "pipeline.h"
#include "plan.h"
#include "ring_attn.h"
#include "tp.h"
#include "zero.h"
#include "px_kernels.h"
#include "px_env.h"
#include "px_kernels_bf16.h"
#include "px_kernels_select.h"
#include "px_devmem.h"
#include "px_log.h"
#include "px_time.h"


px_status_t px_train_layout(const px_train_config_t *cfg, int world, px_layout_t *layout_p,
                            char *errbuf, size_t errlen)
{
    const px_layout_t *l = &cfg->layout;
    px_layout_t out = *l;
    char lbuf[96];

    if (!l->dp && !l->tp && !l->pp && !l->cp && !l->ep) {
        px_layout_init(&out);
        out.dp = world;
    }
    if (px_layout_check(&out, errbuf, errlen) != PX_OK)
        return PX_ERR_INVALID_ARGUMENT;
    if (px_layout_world(&out) != world)
        return px_invalid(errbuf, errlen, "layout %s needs %d ranks, the world has %d",
                   px_layout_str(&out, lbuf, sizeof(lbuf)), px_layout_world(&out), world);
    *layout_p = out;
    return PX_OK;
}

static int warmup_of(const px_train_config_t *cfg)
{
    return cfg->warmup_steps >= 0 ? cfg->warmup_steps : cfg->steps / 20;
}

float px_train_lr(const px_train_config_t *cfg, int step)
{
    int warmup = warmup_of(cfg);
    if (step < warmup)
        return cfg->lr * (float)(step + 1) / (float)warmup;
    if (cfg->steps <= warmup)
        return cfg->lr;
    double ratio = (double)(step - warmup) / (double)(cfg->steps - warmup);
    double min_lr = (double)cfg->lr * cfg->min_lr_ratio;
    double coeff = 0.5 * (1.0 + cos(M_PI * ratio));
    return (float)(min_lr + coeff * ((double)cfg->lr - min_lr));
}

/* ---- dumps (tests / tools) ---- */

static px_status_t dump_raw(const char *dir, const char *name, int step, const void *buf,
                            size_t bytes)
{
    char path[4096];
    FILE *f;
    if (step > 0)
        snprintf(path, sizeof(path), "%s/%s_%d.bin", dir, name, step);
    else
        snprintf(path, sizeof(path), "%s/%s.bin", dir, name);
    f = fopen(path, "wb");
    if (!f || fwrite(buf, 1, bytes, f) != bytes) {
        px_error("dump %s: %s", path, strerror(errno));
        if (f)
            fclose(f);
        return PX_ERR_IO;
    }
    if (fclose(f)) {
        px_error("dump %s: %s", path, strerror(errno));
        return PX_ERR_IO;
    }
    return PX_OK;
}

static px_status_t dump_layout(const char *dir, const px_train_config_t *cfg,
                               const px_gpt_config_t *gc, size_t nparams)
{
    char path[4096];
    FILE *f;
    snprintf(path, sizeof(path), "%s/layout.json", dir);
    f = fopen(path, "w");
    if (!f) {
        px_error("dump %s: %s", path, strerror(errno));
        return PX_ERR_IO;
    }
    fprintf(f,
            "{\"layers\": %d, \"heads\": %d, \"dim\": %d, \"seq\": %d, \"vocab\": %d, "
            "\"padded_vocab\": %d, "
            "\"batch\": %d, \"steps\": %d, \"lr\": %.9g, \"min_lr_ratio\": %.9g, "
            "\"warmup\": %d, \"weight_decay\": %.9g, \"beta1\": %.9g, \"beta2\": %.9g, "
            "\"eps\": %.9g, \"grad_clip\": %.9g, \"seed\": %llu, \"num_params\": %zu,\n"
            " \"tensors\": [\n",
            cfg->layers, cfg->heads, cfg->dim, cfg->seq, cfg->vocab, px_model_padded_vocab(gc),
            cfg->batch, cfg->steps,
            cfg->lr, cfg->min_lr_ratio, warmup_of(cfg), cfg->weight_decay, cfg->beta1,
            cfg->beta2, cfg->eps, cfg->grad_clip, (unsigned long long)cfg->seed, nparams);
    for (int i = 0; i < PX_GPT_NUM_TENSORS; i++) {
        px_gpt_tensor_info_t ti;
        px_gpt_tensor_info_of(gc, i, &ti);
        fprintf(f, "  {\"name\": \"%s\", \"shape\": [", ti.name);
        for (int d = 0; d < ti.ndim; d++)
            fprintf(f, "%s%d", d ? ", " : "", ti.shape[d]);
        fprintf(f,
                "], \"offset\": %zu, \"size\": %zu, \"valid\": %zu, \"decay\": %d, "
                "\"owner\": \"%s\", \"init\": \"%s\", \"split\": \"%s\"}%s\n",
                ti.offset, ti.size, ti.valid, ti.decay, px_model_owner_name(ti.owner),
                px_model_init_name(ti.init), px_model_split_name(ti.split),
                i + 1 < PX_GPT_NUM_TENSORS ? "," : "");
    }
    fprintf(f, " ]}\n");
    if (fclose(f)) {
        px_error("dump %s: %s", path, strerror(errno));
        return PX_ERR_IO;
    }
    return PX_OK;
}

static px_status_t dump_batch(const char *dir, const px_data_t *data, const px_train_config_t *cfg,
                              int step)
{
    size_t n = (size_t)cfg->batch * cfg->seq;
    int32_t *buf = malloc(2 * n * sizeof(int32_t));
    px_status_t status;
    if (!buf)
        return PX_ERR_NO_MEMORY;
    px_data_batch(data, cfg->seed, step - 1, 0, cfg->batch, cfg->seq, buf, buf + n);
    status = dump_raw(dir, "batch", step, buf, 2 * n * sizeof(int32_t));
    free(buf);
    return status;
}

/* Validation batch k (eval.h: training step k's cut, from the validation
 * file), the global batch, as dump_batch. */
static px_status_t dump_val_batch(const char *dir, const px_data_t *val,
                                  const px_train_config_t *cfg, int k)
{
    size_t n = (size_t)cfg->batch * cfg->seq;
    int32_t *buf = malloc(2 * n * sizeof(int32_t));
    char name[64];
    px_status_t status;
    if (!buf)
        return PX_ERR_NO_MEMORY;
    px_data_batch(val, cfg->seed, k, 0, cfg->batch, cfg->seq, buf, buf + n);
    snprintf(name, sizeof(name), "val_batch_%d", k);
    status = dump_raw(dir, name, 0, buf, 2 * n * sizeof(int32_t));
    free(buf);
    return status;
}

static px_status_t dump_val_loss(const char *dir, int step, float val_loss)
{
    char path[4096];
    FILE *f;
    snprintf(path, sizeof(path), "%s/val_loss_%d.txt", dir, step);
    f = fopen(path, "w");
    if (!f || fprintf(f, "%.9g\n", (double)val_loss) < 0 || fclose(f)) {
        px_error("dump %s: %s", path, strerror(errno));
        return PX_ERR_IO;
    }
    return PX_OK;
}

/* ---- the loop ---- */

/* A pipeline round's micro-batches: round r of step `step`, micro m is
 * micro-batch j = r*M + m of the A*M of the step; dp rank d takes its
 * d-th part of it (the same cut as grad_accum alone with A*M). */
typedef struct pipe_load {
    const px_data_t *data;
    const px_kernel_ops_t *ops; /* the stage's buffers are this backend's */
    int32_t *host;              /* ops not the CPU table: (2, Bm, T) host tokens, cut
                                   here and then copied to the device */
    uint64_t seed;
    int step, round, M, per_micro, dp_rank, Bm, T;
    int cp, cp_rank;          /* context parallelism: the stage computes this
                                 rank's chunks of each sequence (cp_cut) */
    int32_t *seq_in, *seq_tg; /* cp > 1: (Bm, T) whole sequences */
} pipe_load_t;

static void cp_cut(const int32_t *src, int32_t *dst, int B, int T, int cp, int i);
static void cp_load(const px_kernel_ops_t *ops, int32_t *host, const int32_t *seq_in,
                    const int32_t *seq_tg, int32_t *inputs, int32_t *targets, int B, int T,
                    int cp, int i);
static void pipe_load(void *arg, int m, int32_t *inputs, int32_t *targets);

/* eval.h's loader over a pipe_load_t of the validation file: validation
 * batch k is cut as training step k. */
static void eval_load(void *arg, int k, int round, int micro, int32_t *inputs, int32_t *targets)
{
    pipe_load_t *ld = arg;
    ld->step = k;
    ld->round = round;
    pipe_load(ld, micro, inputs, targets);
}

static void pipe_load(void *arg, int m, int32_t *inputs, int32_t *targets)
{
    pipe_load_t *ld = arg;
    int first = (ld->round * ld->M + m) * ld->per_micro + ld->dp_rank * ld->Bm;
    size_t n = (size_t)ld->Bm * ld->T;
    if (ld->cp > 1) {
        px_data_batch(ld->data, ld->seed, ld->step, first, ld->Bm, ld->T, ld->seq_in,
                      ld->seq_tg);
        cp_load(ld->ops, ld->host, ld->seq_in, ld->seq_tg, inputs, targets, ld->Bm, ld->T,
                ld->cp, ld->cp_rank);
        return;
    }
    if (ld->ops != px_kernels_cpu()) { /* device buffers: cut on the host, then copy */
        px_data_batch(ld->data, ld->seed, ld->step, first, ld->Bm, ld->T, ld->host,
                      ld->host + n);
        if (inputs)
            ld->ops->mem_copy_from_host(inputs, ld->host, n * sizeof(int32_t));
        if (targets)
            ld->ops->mem_copy_from_host(targets, ld->host + n, n * sizeof(int32_t));
        return;
    }
    int32_t *tmp_in = inputs, *tmp_tg = targets, *spare = NULL;
    if (!inputs || !targets) { /* px_data_batch writes both */
        spare = malloc(n * sizeof(int32_t));
        if (!spare)
            return; /* the stage then computes on stale tokens; never on small n */
        if (!tmp_in)
            tmp_in = spare;
        else
            tmp_tg = spare;
    }
    px_data_batch(ld->data, ld->seed, ld->step, first, ld->Bm, ld->T, tmp_in, tmp_tg);
    free(spare);
}

/* moe_layout.json: the canonical MoE buffer's tensors (moe.h), per MoE
 * layer: {"layers": [l...], "tensors": [{name, layer, offset, shape}]}. */
static px_status_t dump_moe_layout(const char *dir, const px_moe_config_t *mc)
{
    char path[4096];
    snprintf(path, sizeof(path), "%s/moe_layout.json", dir);
    FILE *f = fopen(path, "w");
    if (!f) {
        px_error("train: cannot write %s: %s", path, strerror(errno));
        return PX_ERR_IO;
    }
    int E = mc->experts, C = mc->dim;
    const int shapes[PX_MOE_NUM_TENSORS][3] = {{E, C, 0}, {E, 4 * C, C}, {E, 4 * C, 0},
                                               {E, C, 4 * C}, {E, C, 0}};
    uint64_t off = 0;
    fprintf(f, "{\"experts\": %d, \"top_k\": %d, \"tensors\": [", E, mc->top_k);
    for (int l = 0, first = 1; l < mc->layers; l++) {
        if (!px_moe_is_layer(mc, l))
            continue;
        for (int i = 0; i < PX_MOE_NUM_TENSORS; i++) {
            fprintf(f, "%s{\"name\": \"%s\", \"layer\": %d, \"offset\": %llu, "
                    "\"shape\": [%d, %d%s", first ? "" : ", ", px_moe_tensor_name(i), l,
                    (unsigned long long)off, shapes[i][0], shapes[i][1], shapes[i][2] ? ", " : "");
            if (shapes[i][2])
                fprintf(f, "%d", shapes[i][2]);
            fprintf(f, "]}");
            off += px_moe_tensor_size(mc, i);
            first = 0;
        }
    }
    fprintf(f, "]}\n");
    return fclose(f) == 0 ? PX_OK : PX_ERR_IO;
}

/* Context parallelism: dst (B, T/cp) = the tokens of cp rank i in src (B,
 * T): chunk i then chunk 2cp-1-i of each sequence (ring_attn.h). */
static void cp_cut(const int32_t *src, int32_t *dst, int B, int T, int cp, int i)
{
    int Tl = T / cp, c = Tl / 2;
    for (int b = 0; b < B; b++)
        for (int half = 0; half < 2; half++)
            memcpy(dst + (size_t)b * Tl + half * c,
                   src + (size_t)b * T + px_ring_position(i, cp, Tl, half * c),
                   (size_t)c * sizeof(int32_t));
}

/* Context parallelism's batch: this rank's chunks (cp_cut) of the whole
 * sequences seq_in, seq_tg (B, T; host memory) into inputs and targets (B,
 * T/cp; either may be NULL: skipped), the backend's memory. A device backend
 * (host non-NULL: 2 B T host int32s) has them cut on the host, then copied
 * over: the host never writes device memory (issue 12). */
static void cp_load(const px_kernel_ops_t *ops, int32_t *host, const int32_t *seq_in,
                    const int32_t *seq_tg, int32_t *inputs, int32_t *targets, int B, int T,
                    int cp, int i)
{
    const size_t nl = (size_t)B * (T / cp);
    if (inputs) {
        cp_cut(seq_in, host ? host : inputs, B, T, cp, i);
        if (host)
            ops->mem_copy_from_host(inputs, host, nl * sizeof(int32_t));
    }
    if (targets) {
        cp_cut(seq_tg, host ? host + nl : targets, B, T, cp, i);
        if (host)
            ops->mem_copy_from_host(targets, host + nl, nl * sizeof(int32_t));
    }
}

/* The capacity's fill order (moe.h px_moe_set_token_blocks): this rank's
 * Bm x Tl tokens of a micro-batch are, with cp, 2 Bm blocks (row b, chunk
 * half) at global row dp_rank x Bm + b and chunk px_ring_position's; the
 * single-rank order is (row, chunk). Without cp: one block per row. */
static px_status_t set_moe_blocks(px_moe_t *moe, int Bm, int cp, int dp_rank, int cp_rank)
{
    const int halves = cp > 1 ? 2 : 1, nb = Bm * halves, chunks = 2 * cp;
    int64_t *keys = malloc((size_t)nb * sizeof(int64_t));
    if (!keys)
        return PX_ERR_NO_MEMORY;
    for (int b = 0; b < Bm; b++)
        for (int h = 0; h < halves; h++) {
            int64_t row = (int64_t)dp_rank * Bm + b;
            int chunk = cp > 1 ? (h == 0 ? cp_rank : chunks - 1 - cp_rank) : 0;
            keys[b * halves + h] = row * chunks + chunk;
        }
    px_status_t status = px_moe_set_token_blocks(moe, nb, keys);
    free(keys);
    return status;
}

/* The canonical MoE buffer (moe.h px_moe_gather_canonical) on every
 * rank: with pp, each stage wrote its own MoE layers (zeros elsewhere), so
 * the stages' buffers are summed. */
static px_status_t moe_canonical(px_moe_t *moe, int which, float *dst, px_groups_t *groups,
                                 int pp)
{
    PX_CHECK(px_moe_gather_canonical(moe, which, dst));
    if (pp < 2)
        return PX_OK;
    px_status_t status = px_allreduce(px_groups_comm(groups, PX_GROUP_PP), dst, dst,
                                      px_moe_num_params(px_moe_config(moe)), PX_FLOAT32, PX_SUM,
                                      -1);
    if (status != PX_OK)
        px_error("train: summing the stages' MoE layers failed: %s", px_status_str(status));
    return status;
}

/* 1 when the checkpoint directory holds the MoE files (moe_checkpoint.h) */
static int moe_files_in(const char *dir)
{
    char path[4200];
    snprintf(path, sizeof(path), "%s/moe.json", dir);
    struct stat st;
    return stat(path, &st) == 0;
}

static void set_blas_threads(void)
{
    const char *e = getenv("OPENBLAS_NUM_THREADS");
    if (!e || !*e)
        openblas_set_num_threads(1); /* several ranks share the cores */
}

px_status_t px_train_run(const px_train_config_t *cfg, px_comm_t *world, px_step_cb_t cb,
                         void *arg)
{
    return px_train_run_ex(cfg, world, cb, arg, NULL);
}

static void fill_mem(px_step_report_t *rep, const px_plan_t *plan, size_t act_bytes)
{
    px_mem_stats_t ms;
    px_mem_stats(&ms);
    for (int c = 0; c < PX_MEM_NCAT; c++) {
        rep->mem_current[c] = ms.current[c];
        rep->mem_peak[c] = ms.peak[c];
        rep->mem_plan[c] = plan->bytes[c];
    }
    /* the activation buffers are laid out by the plan's table (plan.h) */
    rep->mem_plan[PX_MEM_ACTS] = (double)act_bytes;
    rep->mem_state_peak = ms.state_peak;
    rep->mem_plan_state_peak = px_plan_state_bytes(plan);
    rep->mem_device_used = ms.device_used;
    rep->mem_device_total = ms.device_total;
}

px_status_t px_train_run_ex(const px_train_config_t *cfg, px_comm_t *world, px_step_cb_t cb,
                            void *arg, const px_train_options_t *opts)
{
    px_status_t status;
    int dp, rank = 0, dp_rank = 0, wsize = world ? px_comm_size(world) : 1;
    char err[512];
    px_layout_t layout;
    px_groups_t *groups = NULL;
    px_comm_t *dp_comm;
    px_data_t *data = NULL, *val = NULL;
    px_gpt_t *gpt = NULL;
    px_plan_t *plan = NULL;
    px_zero_t *zero = NULL;
    px_moe_t *moe = NULL;
    float *moe_canon = NULL;
    size_t moe_n = 0;
    uint64_t *usizes = NULL;
    px_pipe_t *pipe = NULL;
    int *stage_layers = NULL;
    unsigned char *held_layers = NULL; /* pp > 1: the layers this stage holds */
    int32_t *inputs = NULL, *targets = NULL, *seq_in = NULL, *seq_tg = NULL;
    float *canon = NULL;
    const char *dump_dir = opts && opts->dump_dir && *opts->dump_dir ? opts->dump_dir : NULL;
    int dump_steps = opts ? opts->dump_steps : 0;
    const int digests = opts && opts->replica_digests;
    int start_step = 0;
    const px_kernel_ops_t *ops = px_kernels_cpu();
    int32_t *host_tokens = NULL; /* the batch cut on the host, for a device backend */
    px_train_config_t alone;

    if (opts && opts->export_only && !world) {
        /* an export is rank-local: one rank's view of the model and batch */
        alone = *cfg;
        memset(&alone.layout, 0, sizeof(alone.layout));
        cfg = &alone;
    }
    /* the device's op table; every tensor below lives in its memory */
    status = px_kernels_select(opts ? opts->device : NULL, &ops, err, sizeof(err));
    if (status != PX_OK) {
        px_error("train: %s", err);
        return status;
    }
    /* device tensors travel through the collectives staged in host memory
     * (transport/px_devmem.h) */
    if (ops != px_kernels_cpu()) {
        px_transport_set_device_memory(ops, px_kernels_is_device_ptr);
        px_transport_set_pinned_memory(px_kernels_host_alloc, px_kernels_host_free);
    }
    px_mem_set_backend(ops);
    status = px_train_layout(cfg, wsize, &layout, err, sizeof(err));
    if (status == PX_OK) {
        /* the one validator (jobcfg.h), on the layout this world runs */
        px_job_config_t checked = *cfg;
        checked.layout = layout;
        status = px_job_config_check(&checked, PX_JOBCFG_CHECK_DATA, err, sizeof(err));
    }
    if (status != PX_OK) {
        px_error("train: %s", err);
        return status;
    }
    /* the layout's groups, split from the world; the dp group carries data
     * parallelism and ZeRO, the mp group completes the global grad norm */
    status = px_groups_create(world, &layout, &groups);
    if (status != PX_OK)
        return status;
    /* context parallelism: the cp ranks of a dp index see the same
     * sequences (their own chunks), so the replicated parameters' gradients
     * are averaged, and ZeRO shards, over dp x cp (the DPCP group) */
    const int cp = layout.cp > 1 ? layout.cp : 1;
    dp_comm = px_groups_comm(groups, cp > 1 ? PX_GROUP_DPCP : PX_GROUP_DP);
    dp = layout.dp;
    rank = px_groups_rank(groups);
    dp_rank = px_groups_coord(groups)->dp;
    set_blas_threads();
    const int pp = layout.pp, M = pp > 1 ? cfg->micro_batches : 1;
    const int V = pp > 1 && cfg->virtual_stages > 1 ? cfg->virtual_stages : 1;
    /* T: the sequence; Tl: this rank's tokens of it (two chunks with cp) */
    const int T = cfg->seq, Tl = T / cp, A = cfg->grad_accum, Bm = cfg->batch / (dp * A * M);
    const int cp_rank = px_groups_coord(groups)->cp;
    status = px_data_open(cfg->data_path, cfg->vocab, err, sizeof(err), &data);
    if (status != PX_OK) {
        px_error("train: %s", err);
        goto out;
    }
    if (cfg->val_path && *cfg->val_path) {
        status = px_data_open(cfg->val_path, cfg->vocab, err, sizeof(err), &val);
        if (status != PX_OK) {
            px_error("train: validation data: %s", err);
            goto out;
        }
    }
    px_gpt_config_t gc = {.layers = cfg->layers, .heads = cfg->heads, .dim = cfg->dim,
                          .max_seq = cfg->seq, .vocab = cfg->vocab,
                          .padded_vocab = px_job_config_padded_vocab(cfg->vocab),
                          .tp = layout.tp, .tp_rank = px_groups_coord(groups)->tp,
                          .sequence_parallel = cfg->sequence_parallel, .cp = cp};
    /* the plan lays the memory out (plan.h), the same code as `pctl plan`:
     * this tp rank's units */
    uint64_t total = px_plan_gpt_units_tp(gc.layers, gc.dim, gc.vocab, gc.max_seq, layout.tp,
                                          &usizes);
    if (!total) {
        status = PX_ERR_NO_MEMORY;
        goto out;
    }
    if (pp > 1) { /* this stage's units only (pipeline.h); the others are empty */
        unsigned char held[gc.layers + 2];
        /* layers per virtual stage: pp x V of them (V = 1: the stages) */
        stage_layers = calloc((size_t)pp * V, sizeof(int));
        if (!stage_layers) {
            status = PX_ERR_NO_MEMORY;
            goto out;
        }
        status = px_pipe_stage_layers(gc.layers, pp * V, V > 1 ? NULL : cfg->stage_layers,
                                      stage_layers, err, sizeof(err));
        if (status != PX_OK) {
            px_error("train: %s", err);
            goto out;
        }
        px_pipe_stage_units(gc.layers, pp, V, stage_layers, px_groups_coord(groups)->pp, held);
        for (int u = 0; u < gc.layers + 2; u++)
            if (!held[u])
                usizes[u] = 0;
        held_layers = malloc((size_t)cfg->layers + 1);
        if (!held_layers) {
            status = PX_ERR_NO_MEMORY;
            goto out;
        }
        for (int l = 0; l < gc.layers; l++)
            held_layers[l] = held[1 + l];
    }
    px_plan_precision_t prec;
    px_plan_precision_fp32(&prec);
    /* the model computes with `mops`: the device's table, or its view whose
     * linear layers and attention products take bf16 operands
     * (px_kernels_bf16.h: "bf16 GEMM and attention operands, fp32
     * elsewhere"); weights, gradients, optimizer state and collectives stay
     * fp32 (zero, the loader and every "is it the CPU" question use ops) */
    const px_kernel_ops_t *mops = px_kernels_with_precision(
        ops, cfg->precision != PX_PRECISION_BF16 ? PX_KERNELS_FP32
             : px_env_int("PX_BF16_ACTS") ? PX_KERNELS_BF16 : PX_KERNELS_BF16_F32ACTS);
    if (!mops) {
        status = px_invalid(err, sizeof(err), "precision=bf16: the %s op table has no bf16 "
                            "GEMM", ops->name);
        px_error("train: %s", err);
        goto out;
    }
    PX_CHECK_GOTO(px_plan_create(usizes, px_gpt_num_units(&gc), 1, dp * cp, cfg->zero, &prec,
                                 &plan), status, out);
    px_moe_config_t mc = {.layers = cfg->layers, .dim = cfg->dim, .experts = cfg->experts,
                          .top_k = cfg->top_k, .moe_every = cfg->moe_every,
                          .dropless = cfg->dropless, .capacity_factor = cfg->capacity_factor,
                          .aux_loss_coef = cfg->aux_loss_coef};
    if (cfg->experts) /* the routers and this rank's (stage's) experts, outside ZeRO (moe.h) */
        px_plan_add_unsharded(plan, px_moe_stage_params(&mc, layout.ep, held_layers));
    PX_CHECK_GOTO(px_zero_create(&gc, plan, dp_comm, ops, A * M, cfg->prefetch, &zero), status,
                  out);
    px_zero_set_model_group(zero, px_groups_comm(groups, PX_GROUP_MP));
    const int stage = px_groups_coord(groups)->pp, last_stage = stage == pp - 1;
    if (pp > 1) {
        if (stage == 0 || last_stage) /* the tied wte; the copy counts on the first stage */
            px_zero_set_tied(zero, PX_MODEL_UNIT_EMBED, last_stage);
        PX_CHECK_GOTO(px_pipe_create(&gc, mops, zero, groups, cfg->schedule, M, V, stage_layers,
                                     Bm, Tl, &pipe), status, out);
    } else {
        PX_CHECK_GOTO(px_gpt_create_external(&gc, mops, Bm, Tl, px_zero_hooks(zero), &gpt),
                      status, out);
        /* whole-model backward: gradient buckets reduced during it */
        PX_CHECK_GOTO(px_zero_set_buckets(zero, cfg->bucket_mb), status, out);
    }
    px_zero_init_params(zero, cfg->seed);
    if (cfg->experts) { /* the MoE layers' router and this rank's experts (moe.h) */
        /* the router is replicated over dp x cp (dp_comm), like every
         * dense parameter: its gradient is averaged over dp x cp ranks and
         * the A x M micro-batches; a pipeline stage holds its own MoE
         * layers, with an activation slot per micro-batch in flight */
        PX_CHECK_GOTO(px_moe_create_stage(&mc, mops, Bm * Tl, px_groups_comm(groups, PX_GROUP_EP),
                                          dp_comm, px_groups_comm(groups, PX_GROUP_EDP), dp * cp,
                                          A * M, held_layers,
                                          pipe ? px_pipe_chunk_slots_max(pipe) : 1, &moe),
                      status, out);
        PX_CHECK_GOTO(set_moe_blocks(moe, Bm, cp, dp_rank, cp_rank), status, out);
        px_moe_init_params(moe, cfg->seed);
        if (opts && opts->router_skew != 0.0f)
            px_moe_set_router_skew(moe, opts->router_skew);
        if (pipe)
            PX_CHECK_GOTO(px_pipe_set_moe(pipe, moe), status, out);
        else
            PX_CHECK_GOTO(px_gpt_set_moe(gpt, moe), status, out);
    }
    inputs = px_mem_calloc(PX_MEM_WORK, (size_t)Bm * T, sizeof(int32_t));
    targets = px_mem_calloc(PX_MEM_WORK, (size_t)Bm * T, sizeof(int32_t));
    if (cp > 1) { /* whole sequences, cut into this rank's chunks on the host (cp_load) */
        seq_in = px_mem_calloc_host(PX_MEM_WORK, (size_t)Bm * T, sizeof(int32_t));
        seq_tg = px_mem_calloc_host(PX_MEM_WORK, (size_t)Bm * T, sizeof(int32_t));
        if (!seq_in || !seq_tg) {
            status = PX_ERR_NO_MEMORY;
            goto out;
        }
    }
    if (ops != px_kernels_cpu())
        host_tokens = malloc(2 * (size_t)Bm * T * sizeof(int32_t));
    if (!inputs || !targets || (ops != px_kernels_cpu() && !host_tokens)) {
        status = PX_ERR_NO_MEMORY;
        goto out;
    }
    /* n: the canonical model (dumps, exports); plan->params: this tp
     * rank's share of it */
    const size_t n = (size_t)px_model_num_params(&gc);
    px_gpt_ctx_t ctx = {0};
    if (gpt) {
        ctx = px_gpt_ctx_default(gpt);
        ctx.groups = groups; /* the tensor group, for the blocks' collectives */
    }
    /* canonical gathers are completed over the model-parallel group (tp x
     * pp): each rank wrote its shards and stage's units, zeros elsewhere */
    px_comm_t *canon_comm = px_groups_comm(groups, PX_GROUP_MP);
    size_t act_bytes = gpt ? px_gpt_activation_bytes(gpt) : px_pipe_activation_bytes(pipe);
    if (rank == 0)
        px_info("train: %zu parameters (%llu per tensor rank), zero %d, dp %d, tp %d, cp %d, "
                "grad_accum %d, pp %d (%s, %d micro-batches, %d chunks per stage), micro-batch "
                "%d x %d, precision %s%s, device %s; plan per rank: params %.2f MB, grads %.2f MB, "
                "optimizer %.2f MB, activations %.2f MB",
                n, (unsigned long long)plan->params, cfg->zero, dp, layout.tp, cp, A, pp,
                px_pipe_schedule_name(cfg->schedule), M, V, Bm, Tl,
                px_job_config_precision_name(cfg->precision),
                cfg->precision == PX_PRECISION_BF16 ? " (bf16 GEMM and attention operands, fp32 elsewhere)" : "",
                ops->name, plan->bytes[PX_MEM_PARAMS] / 1e6,
                plan->bytes[PX_MEM_GRADS] / 1e6, plan->bytes[PX_MEM_OPTIM] / 1e6,
                act_bytes / 1e6);
    if (cfg->resume_dir && *cfg->resume_dir) {
        PX_CHECK_GOTO(px_checkpoint_load(cfg->resume_dir, zero, &gc, plan, cfg->heads,
                                         &start_step), status, out);
        /* the routers, experts and their moments (moe_checkpoint.h) */
        if (moe)
            PX_CHECK_GOTO(px_moe_checkpoint_load(cfg->resume_dir, moe), status, out);
        else if (moe_files_in(cfg->resume_dir)) {
            px_error("train: checkpoint %s holds a mixture of experts (moe.json); this model "
                     "has experts=0", cfg->resume_dir);
            status = PX_ERR_INVALID_ARGUMENT;
            goto out;
        }
        if (start_step >= cfg->steps) {
            px_error("train: checkpoint %s is at step %d; nothing left of %d steps",
                     cfg->resume_dir, start_step, cfg->steps);
            status = PX_ERR_INVALID_ARGUMENT;
            goto out;
        }
    }

    int need_canon = (dump_dir != NULL) || (cfg->export_safetensors && *cfg->export_safetensors);
    if (need_canon) { /* host memory: files are written from it */
        canon = calloc(n, sizeof(float));
        if (!canon) {
            status = PX_ERR_NO_MEMORY;
            goto out;
        }
    }
    if (opts && opts->test_norm_ones) {
        float norm1 = 0.0f;
        PX_CHECK_GOTO(px_zero_test_norm_ones(zero, &norm1), status, out);
        if (rank == 0) {
            printf("norm-ones %.9g params %zu\n", (double)norm1, n);
            fflush(stdout);
        }
        goto out;
    }
    if (dump_dir) {
        PX_CHECK_GOTO(px_zero_gather_canonical(zero, canon), status, out);
        PX_CHECK_GOTO(px_tp_combine_canonical(canon_comm, canon, n), status, out);
        if (rank == 0) {
            if (mkdir(dump_dir, 0755) < 0 && errno != EEXIST) {
                px_error("train: cannot create dump dir %s: %s", dump_dir, strerror(errno));
                status = PX_ERR_IO;
                goto out;
            }
            PX_CHECK_GOTO(dump_layout(dump_dir, cfg, &gc, n), status, out);
            PX_CHECK_GOTO(dump_raw(dump_dir, "params_init", 0, canon, n * sizeof(float)), status,
                          out);
            PX_CHECK_GOTO(dump_batch(dump_dir, data, cfg, 1), status, out);
        }
        if (moe) {
            moe_n = (size_t)px_moe_num_params(px_moe_config(moe));
            moe_canon = calloc(moe_n ? moe_n : 1, sizeof(float));
            if (!moe_canon) {
                status = PX_ERR_NO_MEMORY;
                goto out;
            }
            PX_CHECK_GOTO(moe_canonical(moe, 0, moe_canon, groups, pp), status, out);
            if (rank == 0) {
                PX_CHECK_GOTO(dump_moe_layout(dump_dir, px_moe_config(moe)), status, out);
                PX_CHECK_GOTO(dump_raw(dump_dir, "moe_params_init", 0, moe_canon,
                                       moe_n * sizeof(float)), status, out);
            }
        }
    }
    if (opts && opts->export_only)
        goto out;
    /* the validation batches: the training cut (pipe_load) of the
     * validation file, batch k in place of step k */
    pipe_load_t val_ld = {.data = val, .seed = cfg->seed, .M = M,
                          .per_micro = cfg->batch / (A * M), .dp_rank = dp_rank, .Bm = Bm,
                          .T = T, .cp = cp, .cp_rank = cp_rank, .seq_in = seq_in,
                          .seq_tg = seq_tg, .ops = ops, .host = host_tokens};
    px_eval_t ev = {.gpt = gpt, .ctx = &ctx, .pipe = pipe, .M = M, .load = eval_load,
                    .load_arg = &val_ld, .dp_comm = dp_comm,
                    .pp_comm = pipe ? px_groups_comm(groups, PX_GROUP_PP) : NULL,
                    .batches = cfg->eval_batches, .accum = A, .dp = dp, .cp = cp,
                    .inputs = inputs, .targets = targets};
    const int eval_every = px_job_config_eval_every(cfg);
    if (val && dump_dir && rank == 0)
        for (int k = 0; k < cfg->eval_batches; k++)
            PX_CHECK_GOTO(dump_val_batch(dump_dir, val, cfg, k), status, out);

    double t_start = px_time_mono_s(), moe_a2a_prev = 0.0;
    for (int s = start_step; s < cfg->steps; s++) {
        double t0 = px_time_mono_s();
        float loss_local = 0.0f, loss = 0.0f, norm = 0.0f;
        px_zero_begin_step(zero);
        if (moe)
            px_moe_begin_step(moe);
        double pp_busy = 0.0, pp_idle = 0.0;
        if (pipe) {
            pipe_load_t ld = {.data = data, .seed = cfg->seed, .step = s, .M = M,
                              .per_micro = cfg->batch / (A * M), .dp_rank = dp_rank, .Bm = Bm,
                              .T = T, .cp = cp, .cp_rank = cp_rank, .seq_in = seq_in,
                              .seq_tg = seq_tg, .ops = ops, .host = host_tokens};
            for (ld.round = 0; ld.round < A; ld.round++) {
                float lsum = 0.0f;
                PX_CHECK_GOTO(px_pipe_round(pipe, pipe_load, &ld, &lsum), status, out);
                loss_local += lsum;
            }
            PX_CHECK_GOTO(px_zero_end_micro(zero), status, out);
            PX_CHECK_GOTO(px_pipe_tied_sum(pipe), status, out);
            px_pipe_take_times(pipe, &pp_busy, &pp_idle);
            loss_local = last_stage ? loss_local / (float)(A * M) : 0.0f;
            if (moe) /* every stage's load-balancing losses (summed over pp below) */
                loss_local += (float)(px_moe_aux_loss_step(moe) / (double)(A * M));
        }
        for (int mb = 0; !pipe && mb < A; mb++) {
            float l = 0.0f;
            int first = mb * (cfg->batch / A) + dp_rank * Bm;
            if (cp > 1) {
                px_data_batch(data, cfg->seed, s, first, Bm, T, seq_in, seq_tg);
                cp_load(ops, host_tokens, seq_in, seq_tg, inputs, targets, Bm, T, cp, cp_rank);
            } else if (host_tokens) { /* a device backend: cut on the host, copy over */
                const size_t nt = (size_t)Bm * T;
                px_data_batch(data, cfg->seed, s, first, Bm, T, host_tokens, host_tokens + nt);
                ops->mem_copy_from_host(inputs, host_tokens, nt * sizeof(int32_t));
                ops->mem_copy_from_host(targets, host_tokens + nt, nt * sizeof(int32_t));
            } else
                px_data_batch(data, cfg->seed, s, first, Bm, T, inputs, targets);
            PX_CHECK_GOTO(px_gpt_forward_ctx(gpt, &ctx, inputs, targets, &l), status, out);
            if (moe) /* the load-balancing losses join the objective */
                l += px_moe_aux_loss(moe);
            PX_CHECK_GOTO(px_gpt_backward_ctx(gpt, &ctx), status, out);
            PX_CHECK_GOTO(px_zero_end_micro(zero), status, out);
            loss_local += l;
        }
        if (!pipe)
            loss_local /= (float)A;
        status = px_zero_reduce(zero, loss_local, &loss, &norm);
        if (status != PX_OK) {
            px_error("train: step %d: gradient reduction failed: %s", s + 1,
                     px_status_str(status));
            goto out;
        }
        if (moe) { /* the global norm counts the router and every expert once */
            double sx = 0.0;
            PX_CHECK_GOTO(px_moe_reduce(moe, &sx), status, out);
            if (pipe) /* each stage holds its own MoE layers */
                PX_CHECK_GOTO(px_allreduce(px_groups_comm(groups, PX_GROUP_PP), &sx, &sx, 1,
                                           PX_FLOAT64, PX_SUM, -1), status, out);
            norm = (float)sqrt((double)norm * norm + sx);
        }
        status = px_kernels_check(ops); /* a device op's error (sticky), once a step */
        if (status != PX_OK) {
            px_error("train: step %d: a %s kernel failed: %s", s + 1, ops->name,
                     px_status_str(status));
            goto out;
        }
        if (pipe) { /* the loss is the last stage's; the others add 0 exactly */
            status = px_allreduce(px_groups_comm(groups, PX_GROUP_PP), &loss, &loss, 1,
                                  PX_FLOAT32, PX_SUM, -1);
            if (status != PX_OK) {
                px_error("train: step %d: the pipeline's loss all-reduce failed: %s", s + 1,
                         px_status_str(status));
                goto out;
            }
        }
        if (!isfinite(loss)) {
            px_error("train: step %d: loss is %f", s + 1, loss);
            status = PX_ERR_INTERNAL;
            goto out;
        }
        if (dump_dir && s < dump_steps) { /* collective: every rank gathers */
            PX_CHECK_GOTO(px_zero_gather_grads_canonical(zero, canon), status, out);
            PX_CHECK_GOTO(px_tp_combine_canonical(canon_comm, canon, n), status, out);
            if (rank == 0) {
                PX_CHECK_GOTO(dump_raw(dump_dir, "grads", s + 1, canon, n * sizeof(float)),
                              status, out);
                if (s > 0)
                    PX_CHECK_GOTO(dump_batch(dump_dir, data, cfg, s + 1), status, out);
            }
            if (moe) {
                PX_CHECK_GOTO(moe_canonical(moe, 1, moe_canon, groups, pp), status, out);
                if (rank == 0)
                    PX_CHECK_GOTO(dump_raw(dump_dir, "moe_grads", s + 1, moe_canon,
                                           moe_n * sizeof(float)), status, out);
            }
        }
        float lr = px_train_lr(cfg, s);
        px_zero_adamw_t hp = {.lr = lr, .beta1 = cfg->beta1, .beta2 = cfg->beta2,
                              .eps = cfg->eps, .weight_decay = cfg->weight_decay, .t = s + 1,
                              .more = s + 1 < cfg->steps};
        if (moe)
            px_moe_update(moe, cfg->grad_clip, norm, lr, cfg->beta1, cfg->beta2, cfg->eps,
                          cfg->weight_decay, s + 1);
        status = px_zero_update(zero, cfg->grad_clip, norm, &hp);
        if (status != PX_OK) {
            px_error("train: step %d: update failed: %s", s + 1, px_status_str(status));
            goto out;
        }
        double t1 = px_time_mono_s();
        if (dump_dir && s < dump_steps) {
            char path[4096];
            FILE *f;
            PX_CHECK_GOTO(px_zero_gather_canonical(zero, canon), status, out);
            PX_CHECK_GOTO(px_tp_combine_canonical(canon_comm, canon, n), status, out);
            if (rank == 0) {
                PX_CHECK_GOTO(dump_raw(dump_dir, "params", s + 1, canon, n * sizeof(float)),
                              status, out);
            }
            if (moe) {
                PX_CHECK_GOTO(moe_canonical(moe, 0, moe_canon, groups, pp), status, out);
                if (rank == 0)
                    PX_CHECK_GOTO(dump_raw(dump_dir, "moe_params", s + 1, moe_canon,
                                           moe_n * sizeof(float)), status, out);
            }
            if (rank == 0) {
                snprintf(path, sizeof(path), "%s/loss_%d.txt", dump_dir, s + 1);
                f = fopen(path, "w");
                if (f) {
                    fprintf(f, "%.9g %.9g %.9g\n", loss, norm, lr);
                    fclose(f);
                }
            }
        }
        /* over the world; the dp rank is the ZeRO shard a rank writes, the
         * tp rank (gc) the tensor shard */
        if (cfg->checkpoint_every > 0 && moe &&
            ((s + 1) % cfg->checkpoint_every == 0 || s + 1 == cfg->steps))
            /* before the dense shards: their meta.json, written last,
             * marks the whole step directory complete */
            PX_CHECK_GOTO(px_moe_checkpoint_save(cfg->checkpoint_dir, s + 1, moe,
                                                 pp > 1 ? px_groups_comm(groups, PX_GROUP_PP)
                                                        : NULL,
                                                 rank == 0), status, out);
        if (cfg->checkpoint_every > 0 &&
            ((s + 1) % cfg->checkpoint_every == 0 || s + 1 == cfg->steps))
            PX_CHECK_GOTO(px_checkpoint_save(cfg->checkpoint_dir, s + 1, zero, &gc, plan,
                                             cfg->heads, dp_comm, world), status, out);
        px_tp_times_t tt = {0};
        if (gpt)
            px_gpt_tp_times(gpt, &tt);
        px_step_report_t rep = {.step = s + 1, .loss = loss, .grad_norm = norm, .lr = lr,
                                .tokens_per_second = (double)cfg->batch * T / (t1 - t0),
                                .elapsed_s = t1 - t_start, .rank = rank,
                                .replicated_digest =
                                    digests ? px_zero_replicated_digest(zero) : 0,
                                .tp_comm_s = tt.comm_s, .tp_wait_s = tt.wait_s,
                                .tp_hidden_s = tt.hidden_s, .step_s = t1 - t0,
                                .pp = pp, .pp_stage = stage, .pp_busy_s = pp_busy,
                                .pp_idle_s = pp_idle,
                                .tied_digest = digests && pipe && (stage == 0 || last_stage)
                                                   ? px_zero_unit_digest(zero,
                                                                         PX_MODEL_UNIT_EMBED)
                                                   : 0};
        fill_mem(&rep, plan, act_bytes);
        uint64_t *mrec = NULL, *mdrop = NULL;
        if (moe) {
            mrec = calloc(2 * (size_t)cfg->experts, sizeof(uint64_t));
            if (!mrec) {
                status = PX_ERR_NO_MEMORY;
                goto out;
            }
            mdrop = mrec + cfg->experts;
            px_moe_token_stats(moe, mrec, mdrop);
            /* each stage routed its own MoE layers: the report is the
             * model's (int64 sums of counts far below 2^63) */
            if (pipe && (status = px_allreduce(px_groups_comm(groups, PX_GROUP_PP), mrec, mrec,
                                               2 * (uint64_t)cfg->experts, PX_INT64, PX_SUM,
                                               -1)) != PX_OK) {
                free(mrec);
                px_error("train: step %d: summing the stages' expert token counts failed: %s",
                         s + 1, px_status_str(status));
                goto out;
            }
            rep.experts = cfg->experts;
            rep.moe_received = mrec;
            rep.moe_dropped = mdrop;
            double a2a = px_moe_alltoall_s(moe);
            rep.moe_alltoall_s = a2a - moe_a2a_prev;
            moe_a2a_prev = a2a;
        }
        /* after the step's expert statistics were read: the evaluation's
         * routing adds to them */
        if (val && px_eval_due(eval_every, s, cfg->steps)) {
            status = px_eval_loss(&ev, &rep.val_loss);
            if (status != PX_OK) {
                free(mrec);
                goto out;
            }
            if (dump_dir && rank == 0)
                if ((status = dump_val_loss(dump_dir, s + 1, rep.val_loss)) != PX_OK) {
                    free(mrec);
                    goto out;
                }
            if (rank == 0)
                px_info("train: step %d: validation loss %.6f (%d batches)", s + 1,
                        (double)rep.val_loss, cfg->eval_batches);
        }
        int stop = cb && cb(arg, &rep);
        free(mrec);
        if (stop) {
            px_info("train: stopped by the step callback after step %d", s + 1);
            status = PX_ERR_ABORTED;
            goto out;
        }
    }
    if (cfg->export_safetensors && *cfg->export_safetensors) {
        PX_CHECK_GOTO(px_zero_gather_canonical(zero, canon), status, out);
        PX_CHECK_GOTO(px_tp_combine_canonical(canon_comm, canon, n), status, out);
        if (moe && !moe_canon) {
            moe_n = (size_t)px_moe_num_params(px_moe_config(moe));
            moe_canon = calloc(moe_n ? moe_n : 1, sizeof(float));
            if (!moe_canon) {
                status = PX_ERR_NO_MEMORY;
                goto out;
            }
        }
        if (moe) /* collective: the routers and experts of every rank and stage */
            PX_CHECK_GOTO(moe_canonical(moe, 0, moe_canon, groups, pp), status, out);
        if (rank == 0 && moe) {
            PX_CHECK_GOTO(px_moe_safetensors_write(cfg->export_safetensors, &gc, canon,
                                                   px_moe_config(moe), moe_canon), status, out);
            px_info("train: weights and experts exported to %s", cfg->export_safetensors);
        } else if (rank == 0) {
            PX_CHECK_GOTO(px_safetensors_write(cfg->export_safetensors, &gc, canon), status, out);
            px_info("train: weights exported to %s", cfg->export_safetensors);
        }
    }
    {
        px_zero_times_t zt;
        px_mem_stats_t ms;
        px_zero_times(zero, &zt);
        px_mem_stats(&ms);
        int steps_run = cfg->steps - start_step;
        px_info("train: zero %d: per step all-gather wait %.2f ms (%d gathers, %d started under "
                "compute after a reduce-scatter), reduce-scatter "
                "wait %.2f ms, other collectives %.2f ms, progress hook %.2f ms; peak state %.3f MB (plan %.3f MB)",
                cfg->zero, 1e3 * zt.gather_wait_s / steps_run, zt.gathers, zt.deferred_gathers,
                1e3 * zt.rs_wait_s / steps_run, 1e3 * zt.comm_other_s / steps_run,
                1e3 * zt.progress_s / steps_run, ms.state_peak / 1e6, px_plan_state_bytes(plan) / 1e6);
        if (px_zero_nbuckets(zero))
            px_info("train: dp gradient buckets: %d (bucket %.3f MiB), %.2f per step started "
                    "during backward (zero %d); the rest after it",
                    px_zero_nbuckets(zero),
                    px_zero_bucket_bytes(cfg->bucket_mb, plan->padded * sizeof(float)) /
                        1048576.0,
                    (double)px_zero_buckets_early(zero) / steps_run, cfg->zero);
        if (cp > 1) {
            px_ring_times_t rt;
            if (gpt)
                px_gpt_ring_times(gpt, &rt);
            else
                px_pipe_ring_times(pipe, &rt);
            px_info("train: cp %d: ring attention %d tokens of %d per sequence; per step %.2f ms "
                    "of ring transfers (%.2f MB sent), %.2f ms of it blocked: %.0f%% of ring "
                    "communication hidden behind compute", cp, Tl, T,
                    1e3 * rt.total_s / steps_run, rt.bytes / 1e6 / steps_run,
                    1e3 * rt.wait_s / steps_run,
                    rt.total_s > 0 ? 100.0 * (rt.total_s - rt.wait_s) / rt.total_s : 0.0);
        }
        if (layout.tp > 1 && gpt) {
            px_tp_times_t tt;
            px_gpt_tp_times(gpt, &tt);
            double all = tt.comm_s + tt.hidden_s;
            px_info("train: tp %d: per step %.2f ms blocked in tensor-parallel collectives (%d "
                    "per step, %d overlapped; %.2f ms of it waiting for them) and %.2f ms hidden "
                    "behind compute: %.0f%% of %.2f ms of tp communication hidden",
                    layout.tp, 1e3 * tt.comm_s / steps_run, tt.colls / steps_run,
                    tt.overlapped / steps_run, 1e3 * tt.wait_s / steps_run,
                    1e3 * tt.hidden_s / steps_run, all > 0 ? 100.0 * tt.hidden_s / all : 0.0,
                    1e3 * all / steps_run);
        }
    }
    status = PX_OK;

out:
    free(canon);
    free(moe_canon);
    free(held_layers);
    px_moe_destroy(moe);
    free(host_tokens);
    px_mem_free(inputs);
    px_mem_free(targets);
    px_mem_free(seq_in);
    px_mem_free(seq_tg);
    px_gpt_destroy(gpt);
    px_pipe_destroy(pipe);
    free(stage_layers);
    px_zero_destroy(zero);
    px_groups_destroy(groups); /* after zero: its requests ride the dp group */
    px_plan_destroy(plan);
    free(usizes);
    px_data_close(data);
    px_data_close(val);
    return status;
}
