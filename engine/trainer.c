/* trainer.c: the trainer's assembly and its steps (trainer.h).
 *
 * The world is cut into the layout's process groups (groups.h); data
 * parallelism and ZeRO run on the dp group, the global grad norm is
 * completed over the mp group (tp x pp). With context parallelism (cp > 1)
 * the cp ranks of a dp index take the same sequences, each its two chunks
 * (cp_cut, ring_attn.h), and data parallelism and ZeRO run on the dp x cp
 * group instead: every rank holds T/cp tokens of each sequence, so the
 * average of the local means is still the global mean.
 * The runner (pipeline.h) runs every layout: a pipeline stage, or without
 * pipelining the whole model as the one stage of the one-stage list.
 * A step: for each of grad_accum rounds of the runner's M micro-batches
 * (M 1 without pipelining), cut this rank's share of each micro-batch
 * (micro j of the A x M of the global batch is sequences [j*B/(AM),
 * (j+1)*B/(AM)); dp rank r takes its r-th part), forward, backward (ZeRO
 * 2/3 reduce-scatter during backward); then px_zero_reduce
 * (stage 0: one all-reduce with the local mean loss in the spare slot;
 * equal token counts per rank, so the average of local means is the global
 * mean), the global grad norm, and AdamW after clipping (as
 * torch.nn.utils.clip_grad_norm_) with warm-up + cosine on this rank's
 * slice, parameters re-gathered where replicated. Memory is laid out by
 * the plan (planner/jobplan.h px_plan_job, the recipe pctl plan and the
 * daemon's memory check share) and tagged (memacct.h). */
#include "trainer.h"

#include <cblas.h>
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "data.h"
#include "hf_gpt2.h"
#include "jobcfg.h"
#include "jobplan.h"
#include "memacct.h"
#include "plan.h"
#include "ring_attn.h"
#include "tp.h"
#include "px_env.h"
#include "px_kernels_bf16.h"
#include "px_kernels_select.h"
#include "px_devmem.h"
#include "px_log.h"
#include "px_time.h"

/* ---- the batch cut ---- */

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
 * over: the host never writes device memory. */
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

void px_batch_cut_load(void *arg, int m, int32_t *inputs, int32_t *targets)
{
    px_batch_cut_t *ld = arg;
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

/* eval.h's loader over the validation file's cut: validation batch k is
 * cut as training step k. */
static void eval_load(void *arg, int k, int round, int micro, int32_t *inputs, int32_t *targets)
{
    px_batch_cut_t *ld = arg;
    ld->step = k;
    ld->round = round;
    px_batch_cut_load(ld, micro, inputs, targets);
}

static void set_blas_threads(void)
{
    const char *e = getenv("OPENBLAS_NUM_THREADS");
    if (!e || !*e)
        openblas_set_num_threads(1); /* several ranks share the cores */
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


/* ---- the assembly ---- */

/* Logs err under "train: " and returns status (for the assembly's
 * configuration errors). */
static px_status_t fail(px_status_t status, const char *what, const char *err)
{
    px_error("train: %s%s", what, err);
    return status;
}

/* The layers per (virtual) stage into tr->stage_layers and the layers this
 * stage holds into tr->held_layers (pipesched.h; the plan, jobplan.h,
 * zeroes the other stages' units the same way). Without pipelining: one
 * stage of every layer. */
static px_status_t assemble_stage(px_trainer_t *tr)
{
    const px_train_config_t *cfg = tr->cfg;
    const int pp = tr->pp, V = tr->V, L = tr->gc.layers;
    unsigned char held[L + 2];
    char err[512];
    tr->stage_layers = calloc((size_t)pp * V, sizeof(int));
    tr->held_layers = malloc((size_t)cfg->layers + 1);
    if (!tr->stage_layers || !tr->held_layers)
        return PX_ERR_NO_MEMORY;
    /* layers per virtual stage: pp x V of them (V = 1: the stages) */
    px_status_t status = px_pipe_stage_layers(L, pp * V, V > 1 || pp < 2 ? NULL
                                                                      : cfg->stage_layers,
                                              tr->stage_layers, err, sizeof(err));
    if (status != PX_OK)
        return fail(status, "", err);
    px_pipe_stage_units(L, pp, V, tr->stage_layers, tr->stage, held);
    for (int l = 0; l < L; l++)
        tr->held_layers[l] = held[1 + l];
    return PX_OK;
}

/* The mixture of experts: the expert parameter group (experts.h: the MoE
 * layers' routers and this rank's experts) and the routing (moe.h). The
 * router is replicated over dp x cp (dp_comm), like every dense
 * parameter: its gradient is averaged over dp x cp ranks and the A x M
 * micro-batches; a stage holds its own MoE layers, with an activation
 * slot per micro-batch in flight. */
static px_status_t assemble_moe(px_trainer_t *tr, float router_skew)
{
    px_groups_t *g = tr->groups;
    px_comm_t *ep = px_groups_comm(g, PX_GROUP_EP);
    PX_CHECK(px_experts_create(&tr->mc, tr->mops, ep, tr->dp_comm,
                               px_groups_comm(g, PX_GROUP_EDP), tr->dp * tr->cp, tr->A * tr->M,
                               tr->held_layers, &tr->experts));
    PX_CHECK(px_moe_create_stage(&tr->mc, tr->mops, tr->Bm * tr->Tl, ep, tr->dp_comm,
                                 tr->dp * tr->cp, tr->experts,
                                 px_pipe_chunk_slots_max(tr->pipe), &tr->moe));
    PX_CHECK(set_moe_blocks(tr->moe, tr->Bm, tr->cp, tr->dp_rank, tr->cp_rank));
    px_experts_init(tr->experts, tr->cfg->seed);
    if (router_skew != 0.0f)
        px_moe_set_router_skew(tr->moe, router_skew);
    return px_pipe_set_moe(tr->pipe, tr->moe);
}

/* The batch cut's buffers (the runner's slots hold the device tokens):
 * with cp whole host sequences; on a device backend host staging. */
static px_status_t assemble_batch(px_trainer_t *tr)
{
    const size_t nt = (size_t)tr->Bm * tr->T;
    if (tr->cp > 1) { /* whole sequences, cut into this rank's chunks on the host (cp_load) */
        tr->seq_in = px_mem_calloc_host(PX_MEM_WORK, nt, sizeof(int32_t));
        tr->seq_tg = px_mem_calloc_host(PX_MEM_WORK, nt, sizeof(int32_t));
        if (!tr->seq_in || !tr->seq_tg)
            return PX_ERR_NO_MEMORY;
    }
    if (tr->ops != px_kernels_cpu())
        tr->host_tokens = malloc(2 * nt * sizeof(int32_t));
    if (tr->ops != px_kernels_cpu() && !tr->host_tokens)
        return PX_ERR_NO_MEMORY;
    return PX_OK;
}

/* Resumes from cfg->resume_dir: every parameter group (params.h). */
static px_status_t resume(px_trainer_t *tr)
{
    const px_train_config_t *cfg = tr->cfg;
    PX_CHECK(px_params_checkpoint_load(&tr->params, cfg->resume_dir, &tr->start_step));
    if (tr->start_step >= cfg->steps) {
        px_error("train: checkpoint %s is at step %d; nothing left of %d steps",
                 cfg->resume_dir, tr->start_step, cfg->steps);
        return PX_ERR_INVALID_ARGUMENT;
    }
    return PX_OK;
}

static void log_assembly(const px_trainer_t *tr)
{
    const px_train_config_t *cfg = tr->cfg;
    const px_plan_t *plan = tr->plan;
    px_info("train: %zu parameters (%llu per tensor rank), zero %d, dp %d, tp %d, cp %d, "
            "grad_accum %d, pp %d (%s, %d micro-batches, %d chunks per stage), micro-batch "
            "%d x %d, precision %s%s, device %s; plan per rank: params %.2f MB, grads %.2f MB, "
            "optimizer %.2f MB, activations %.2f MB",
            tr->n, (unsigned long long)plan->params, cfg->zero, tr->dp, tr->layout.tp, tr->cp,
            tr->A, tr->pp, px_pipe_schedule_name(cfg->schedule), tr->M, tr->V, tr->Bm, tr->Tl,
            px_job_config_precision_name(cfg->precision),
            cfg->precision == PX_PRECISION_BF16
                ? " (bf16 GEMM and attention operands, fp32 elsewhere)" : "",
            tr->ops->name, plan->bytes[PX_MEM_PARAMS] / 1e6, plan->bytes[PX_MEM_GRADS] / 1e6,
            plan->bytes[PX_MEM_OPTIM] / 1e6, tr->act_bytes / 1e6);
}

/* The device's op table, the layout (checked by the one validator) and
 * its groups. */
static px_status_t assemble_layout(px_trainer_t *tr, const char *device)
{
    const px_train_config_t *cfg = tr->cfg;
    char err[512];
    px_status_t status = px_kernels_select(device, &tr->ops, err, sizeof(err));
    if (status != PX_OK)
        return fail(status, "", err);
    /* device tensors travel through the collectives staged in host memory
     * (transport/px_devmem.h) */
    if (tr->ops != px_kernels_cpu()) {
        px_transport_set_device_memory(tr->ops, px_kernels_is_device_ptr);
        px_transport_set_pinned_memory(px_kernels_host_alloc, px_kernels_host_free);
        /* a CUDA device: NCCL may run the collectives (PX_COLL_BACKEND) */
        px_transport_set_comm_device(px_kernels_comm_device());
    }
    px_mem_set_backend(tr->ops);
    const int wsize = tr->world ? px_comm_size(tr->world) : 1;
    status = px_train_layout(cfg, wsize, &tr->layout, err, sizeof(err));
    if (status == PX_OK) {
        /* the one validator (jobcfg.h), on the layout this world runs */
        px_job_config_t checked = *cfg;
        checked.layout = tr->layout;
        status = px_job_config_check(&checked, PX_JOBCFG_CHECK_DATA, err, sizeof(err));
    }
    if (status != PX_OK)
        return fail(status, "", err);
    /* the layout's groups, split from the world; the dp group carries data
     * parallelism and ZeRO, the mp group completes the global grad norm */
    PX_CHECK(px_groups_create(tr->world, &tr->layout, &tr->groups));
    const px_coord_t *co = px_groups_coord(tr->groups);
    tr->cp = tr->layout.cp > 1 ? tr->layout.cp : 1;
    /* context parallelism: the cp ranks of a dp index see the same
     * sequences (their own chunks), so the replicated parameters' gradients
     * are averaged, and ZeRO shards, over dp x cp (the DPCP group) */
    tr->dp_comm = px_groups_comm(tr->groups, tr->cp > 1 ? PX_GROUP_DPCP : PX_GROUP_DP);
    tr->canon_comm = px_groups_comm(tr->groups, PX_GROUP_MP);
    tr->dp = tr->layout.dp;
    tr->rank = px_groups_rank(tr->groups);
    tr->dp_rank = co->dp;
    tr->cp_rank = co->cp;
    tr->pp = tr->layout.pp;
    tr->stage = co->pp;
    tr->last_stage = tr->stage == tr->pp - 1;
    tr->M = tr->pp > 1 ? cfg->micro_batches : 1;
    tr->V = tr->pp > 1 && cfg->virtual_stages > 1 ? cfg->virtual_stages : 1;
    tr->T = cfg->seq;
    tr->Tl = tr->T / tr->cp;
    tr->A = cfg->grad_accum;
    tr->Bm = cfg->batch / (tr->dp * tr->A * tr->M);
    return PX_OK;
}

/* The data, the plan, ZeRO and the runner of this stage's model. */
static px_status_t assemble_model(px_trainer_t *tr, float router_skew)
{
    const px_train_config_t *cfg = tr->cfg;
    char err[512];
    px_status_t status = px_data_open(cfg->data_path, cfg->vocab, err, sizeof(err), &tr->data);
    if (status != PX_OK)
        return fail(status, "", err);
    if (cfg->val_path && *cfg->val_path) {
        status = px_data_open(cfg->val_path, cfg->vocab, err, sizeof(err), &tr->val);
        if (status != PX_OK)
            return fail(status, "validation data: ", err);
    }
    tr->gc = (px_gpt_config_t){.layers = cfg->layers, .heads = cfg->heads, .dim = cfg->dim,
                               .max_seq = cfg->seq, .vocab = cfg->vocab,
                               .padded_vocab = px_job_config_padded_vocab(cfg->vocab),
                               .tp = tr->layout.tp, .tp_rank = px_groups_coord(tr->groups)->tp,
                               .sequence_parallel = cfg->sequence_parallel, .cp = tr->cp,
                               .experts = cfg->experts, .moe_every = cfg->moe_every};
    PX_CHECK(assemble_stage(tr)); /* this stage's layers (pipeline.h) */
    /* the model computes with `mops`: the device's table, or its view whose
     * linear layers and attention products take bf16 operands
     * (px_kernels_bf16.h: "bf16 GEMM and attention operands, fp32
     * elsewhere"); weights, gradients, optimizer state and collectives stay
     * fp32 (zero, the loader and every "is it the CPU" question use ops) */
    tr->mops = px_kernels_with_precision(
        tr->ops, cfg->precision != PX_PRECISION_BF16 ? PX_KERNELS_FP32
                 : px_env_int("PX_BF16_ACTS") ? PX_KERNELS_BF16 : PX_KERNELS_BF16_F32ACTS);
    if (!tr->mops) {
        px_invalid(err, sizeof(err), "precision=bf16: the %s op table has no bf16 GEMM",
                   tr->ops->name);
        return fail(PX_ERR_INVALID_ARGUMENT, "", err);
    }
    /* the plan lays the memory out: the one recipe (jobplan.h) `pctl plan`
     * and the daemon's memory check use, for this rank's stage and device:
     * this tp rank's (stage's) units, ZeRO over dp x cp, the routers and
     * this rank's experts outside ZeRO */
    px_job_config_t job = *cfg;
    px_job_plan_t jp;
    job.layout = tr->layout;
    PX_CHECK(px_plan_job(&job, px_plan_dev_parse(tr->ops->name), tr->stage, &jp));
    tr->plan = jp.state;
    jp.state = NULL;
    tr->plan_act_bytes = jp.act_bytes;
    px_job_plan_free(&jp);
    tr->mc = (px_moe_config_t){.layers = cfg->layers, .dim = cfg->dim, .experts = cfg->experts,
                               .top_k = cfg->top_k, .moe_every = cfg->moe_every,
                               .dropless = cfg->dropless,
                               .capacity_factor = cfg->capacity_factor,
                               .aux_loss_coef = cfg->aux_loss_coef};
    PX_CHECK(px_zero_create(&tr->gc, tr->plan, tr->dp_comm, tr->ops, tr->A * tr->M,
                            cfg->prefetch, &tr->zero));
    px_zero_set_model_group(tr->zero, px_groups_comm(tr->groups, PX_GROUP_MP));
    if (tr->pp > 1 && (tr->stage == 0 || tr->last_stage))
        /* the tied wte on two stages; the copy counts on the first */
        px_zero_set_tied(tr->zero, PX_MODEL_UNIT_EMBED, tr->last_stage);
    PX_CHECK(px_pipe_create(&tr->gc, tr->mops, tr->zero, tr->groups, cfg->schedule, tr->M, tr->V,
                            tr->stage_layers, tr->Bm, tr->Tl, &tr->pipe));
    if (tr->pp == 1) /* a whole-model backward: gradient buckets reduced during it */
        PX_CHECK(px_zero_set_buckets(tr->zero, cfg->bucket_mb));
    px_zero_init_params(tr->zero, cfg->seed);
    if (cfg->experts)
        PX_CHECK(assemble_moe(tr, router_skew));
    return PX_OK;
}

px_status_t px_trainer_create(const px_train_config_t *cfg, px_comm_t *world,
                              const char *device, float router_skew, px_trainer_t **tr_p)
{
    px_trainer_t *tr = calloc(1, sizeof(*tr));
    px_status_t status;
    *tr_p = NULL;
    if (!tr)
        return PX_ERR_NO_MEMORY;
    tr->cfg = cfg;
    tr->world = world;
    tr->ops = px_kernels_cpu();
    PX_CHECK_GOTO(assemble_layout(tr, device), status, fail);
    set_blas_threads();
    PX_CHECK_GOTO(assemble_model(tr, router_skew), status, fail);
    PX_CHECK_GOTO(assemble_batch(tr), status, fail);
    /* n: the canonical model (dumps, exports); plan->params: this tp
     * rank's share of it */
    tr->n = (size_t)px_model_num_params(&tr->gc);
    tr->act_bytes = px_pipe_activation_bytes(tr->pipe);
    tr->params = (px_params_t){.dense = tr->zero, .experts = tr->experts, .gc = &tr->gc,
                               .plan = tr->plan, .heads = cfg->heads, .dp = tr->dp_comm,
                               .mp = tr->canon_comm,
                               .pp = px_groups_comm(tr->groups, PX_GROUP_PP),
                               .world = tr->world, .rank = tr->rank};
    if (tr->act_bytes != tr->plan_act_bytes) /* the recipe and the model disagree: say so */
        px_warn("train: the activation buffers take %zu bytes, the plan says %llu (jobplan.h)",
                tr->act_bytes, (unsigned long long)tr->plan_act_bytes);
    if (tr->rank == 0)
        log_assembly(tr);
    if (cfg->resume_dir && *cfg->resume_dir)
        PX_CHECK_GOTO(resume(tr), status, fail);
    else if (cfg->init_from && *cfg->init_from) /* Hugging Face weights (hf_gpt2.h) */
        PX_CHECK_GOTO(px_hf_gpt2_load(cfg->init_from, tr->zero, &tr->gc, tr->plan, cfg->heads,
                                      tr->experts), status, fail);
    /* the validation batches: the training cut of the validation file,
     * batch k in place of step k */
    tr->val_cut = (px_batch_cut_t){.data = tr->val, .seed = cfg->seed, .M = tr->M,
                                   .per_micro = cfg->batch / (tr->A * tr->M),
                                   .dp_rank = tr->dp_rank, .Bm = tr->Bm, .T = tr->T,
                                   .cp = tr->cp, .cp_rank = tr->cp_rank, .seq_in = tr->seq_in,
                                   .seq_tg = tr->seq_tg, .ops = tr->ops,
                                   .host = tr->host_tokens};
    tr->ev = (px_eval_t){.pipe = tr->pipe, .M = tr->M, .load = eval_load,
                         .load_arg = &tr->val_cut, .dp_comm = tr->dp_comm,
                         .pp_comm = px_groups_comm(tr->groups, PX_GROUP_PP),
                         .batches = cfg->eval_batches, .accum = tr->A, .dp = tr->dp,
                         .cp = tr->cp};
    tr->eval_every = px_job_config_eval_every(cfg);
    *tr_p = tr;
    return PX_OK;
fail:
    px_trainer_destroy(tr);
    return status;
}

void px_trainer_destroy(px_trainer_t *tr)
{
    if (!tr)
        return;
    free(tr->held_layers);
    px_moe_destroy(tr->moe);
    px_experts_destroy(tr->experts);
    free(tr->host_tokens);
    px_mem_free(tr->seq_in);
    px_mem_free(tr->seq_tg);
    px_pipe_destroy(tr->pipe);
    free(tr->stage_layers);
    px_zero_destroy(tr->zero);
    px_groups_destroy(tr->groups); /* after zero: its requests ride the dp group */
    px_plan_destroy(tr->plan);
    px_data_close(tr->data);
    px_data_close(tr->val);
    free(tr);
}

/* ---- the step ---- */

/* The sum over the pipeline group of n values of `type` at buf, in place
 * (a no-op without pipelining); `what` names it in the error. */
static px_status_t pp_sum(px_trainer_t *tr, int s, void *buf, uint64_t n, px_dtype_t type,
                          const char *what)
{
    px_comm_t *c = px_groups_comm(tr->groups, PX_GROUP_PP);
    if (!c || px_comm_size(c) < 2)
        return PX_OK;
    px_status_t status = px_allreduce(c, buf, buf, n, type, PX_SUM, -1);
    if (status != PX_OK)
        px_error("train: step %d: summing %s over the pipeline's stages failed: %s", s + 1, what,
                 px_status_str(status));
    return status;
}

/* Forward and backward of step s: this rank's share of the mean loss into
 * *loss_p (px_pipe_step_loss: the last stage's, plus the load-balancing
 * losses). */
static px_status_t forward_backward(px_trainer_t *tr, int s, float *loss_p)
{
    const px_train_config_t *cfg = tr->cfg;
    const int A = tr->A, M = tr->M;
    float loss_sum = 0.0f;
    px_batch_cut_t ld = {.data = tr->data, .seed = cfg->seed, .step = s, .M = M,
                         .per_micro = cfg->batch / (A * M), .dp_rank = tr->dp_rank,
                         .Bm = tr->Bm, .T = tr->T, .cp = tr->cp, .cp_rank = tr->cp_rank,
                         .seq_in = tr->seq_in, .seq_tg = tr->seq_tg, .ops = tr->ops,
                         .host = tr->host_tokens};
    for (ld.round = 0; ld.round < A; ld.round++) {
        float lsum = 0.0f;
        PX_CHECK(px_pipe_round(tr->pipe, px_batch_cut_load, &ld, &lsum));
        PX_CHECK(px_zero_end_micro(tr->zero));
        loss_sum += lsum;
    }
    PX_CHECK(px_pipe_tied_sum(tr->pipe));
    *loss_p = px_pipe_step_loss(tr->pipe, loss_sum, A);
    return PX_OK;
}

px_status_t px_trainer_grads(px_trainer_t *tr, int s, float *loss_p, float *norm_p)
{
    float loss_local = 0.0f, loss = 0.0f, norm = 0.0f;
    px_status_t status;
    px_params_begin_step(&tr->params);
    if (tr->moe)
        px_moe_begin_step(tr->moe);
    PX_CHECK(forward_backward(tr, s, &loss_local));
    status = px_params_reduce(&tr->params, loss_local, &loss, &norm);
    if (status != PX_OK) {
        px_error("train: step %d: gradient reduction failed: %s", s + 1, px_status_str(status));
        return status;
    }
    status = px_kernels_check(tr->ops); /* a device op's error (sticky), once a step */
    if (status != PX_OK) {
        px_error("train: step %d: a %s kernel failed: %s", s + 1, tr->ops->name,
                 px_status_str(status));
        return status;
    }
    /* the loss is the last stage's; the others add 0 exactly (and, with
     * experts, their load-balancing losses) */
    PX_CHECK(pp_sum(tr, s, &loss, 1, PX_FLOAT32, "the loss"));
    if (!isfinite(loss)) {
        px_error("train: step %d: loss is %f", s + 1, loss);
        return PX_ERR_INTERNAL;
    }
    *loss_p = loss;
    *norm_p = norm;
    return PX_OK;
}

px_status_t px_trainer_update(px_trainer_t *tr, int s, float norm, float lr)
{
    const px_train_config_t *cfg = tr->cfg;
    px_adamw_t hp = {.lr = lr, .beta1 = cfg->beta1, .beta2 = cfg->beta2, .eps = cfg->eps,
                     .weight_decay = cfg->weight_decay, .t = s + 1};
    const float coef = px_adamw_clip_coef(cfg->grad_clip, norm);
    px_status_t status = px_params_update(&tr->params, coef, &hp, s + 1 < cfg->steps);
    if (status != PX_OK)
        px_error("train: step %d: update failed: %s", s + 1, px_status_str(status));
    return status;
}

px_status_t px_trainer_checkpoint(px_trainer_t *tr, int s)
{
    const px_train_config_t *cfg = tr->cfg;
    if (cfg->checkpoint_every <= 0 ||
        ((s + 1) % cfg->checkpoint_every != 0 && s + 1 != cfg->steps))
        return PX_OK;
    return px_params_checkpoint_save(&tr->params, cfg->checkpoint_dir, s + 1);
}

/* The paths the world and each group of more than one rank took so far
 * (px_comm_paths) into tr->comm_paths, lent to rep. */
static void fill_paths(px_trainer_t *tr, px_step_report_t *rep)
{
    int n = 0;
    for (int k = -1; k < PX_GROUP_NKINDS; k++) {
        px_comm_t *c = k < 0 ? tr->world : px_groups_comm(tr->groups, (px_group_kind_t)k);
        if (!c || px_comm_size(c) < 2)
            continue;
        px_comm_path_report_t *p = &tr->comm_paths[n++];
        p->comm = k < 0 ? "world" : px_group_name((px_group_kind_t)k);
        p->size = px_comm_size(c);
        px_comm_paths(c, 0, p->host, sizeof(p->host));
        px_comm_paths(c, 1, p->device, sizeof(p->device));
    }
    rep->n_comm_paths = n;
    rep->comm_paths = tr->comm_paths;
}

px_status_t px_trainer_report(px_trainer_t *tr, int s, float loss, float norm, float lr,
                              double t0, double t1, uint64_t *moe_counts,
                              px_step_report_t *rep)
{
    const px_train_config_t *cfg = tr->cfg;
    px_tp_times_t tt = {0};
    double pp_busy = 0.0, pp_idle = 0.0;
    px_pipe_tp_times(tr->pipe, &tt);
    px_pipe_take_times(tr->pipe, &pp_busy, &pp_idle);
    *rep = (px_step_report_t){.step = s + 1, .loss = loss, .grad_norm = norm, .lr = lr,
                              .tokens_per_second = (double)cfg->batch * tr->T / (t1 - t0),
                              .elapsed_s = t1 - tr->t_start, .rank = tr->rank,
                              .replicated_digest =
                                  tr->digests ? px_zero_replicated_digest(tr->zero) : 0,
                              .tp_comm_s = tt.comm_s, .tp_wait_s = tt.wait_s,
                              .tp_hidden_s = tt.hidden_s, .step_s = t1 - t0, .pp = tr->pp,
                              .pp_stage = tr->stage, .pp_busy_s = pp_busy,
                              .pp_idle_s = pp_idle,
                              .tied_digest = tr->digests && tr->pp > 1 &&
                                                     (tr->stage == 0 || tr->last_stage)
                                                 ? px_zero_unit_digest(tr->zero,
                                                                       PX_MODEL_UNIT_EMBED)
                                                 : 0};
    fill_mem(rep, tr->plan, tr->act_bytes);
    fill_paths(tr, rep);
    if (!tr->moe)
        return PX_OK;
    uint64_t *mrec = moe_counts, *mdrop = moe_counts + cfg->experts;
    px_moe_token_stats(tr->moe, mrec, mdrop);
    /* each stage routed its own MoE layers: the report is the model's
     * (int64 sums of counts far below 2^63) */
    PX_CHECK(pp_sum(tr, s, mrec, 2 * (uint64_t)cfg->experts, PX_INT64,
                    "the expert token counts"));
    rep->experts = cfg->experts;
    rep->moe_received = mrec;
    rep->moe_dropped = mdrop;
    double a2a = px_moe_alltoall_s(tr->moe);
    rep->moe_alltoall_s = a2a - tr->moe_a2a_prev;
    tr->moe_a2a_prev = a2a;
    return PX_OK;
}
