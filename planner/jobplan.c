/* jobplan.c: a job's memory plan per rank from its configuration
 * (jobplan.h), the one recipe the engine, the daemon's memory check and
 * `pctl plan` share.
 *
 * Invariant: every figure is the one the engine's assembly
 * (engine/trainer.c) derives for the same rank: the same units, the same
 * ZeRO group (dp x cp), the same stage split, micro-batch and activation
 * table, so the plan the engine lays out and the prediction are one
 * computation. Pure arithmetic; any thread. */
#include "jobplan.h"

#include <stdlib.h>
#include <string.h>

#include "model.h"
#include "pipesched.h"
#include "px_env.h"
#include "px_log.h"

int px_plan_dev_parse(const char *name)
{
    if (!name || !*name || !strcmp(name, "cpu") || !strncmp(name, "cpu:", 4))
        return PX_PLAN_DEV_CPU;
    if (!strcmp(name, "cuda") || !strncmp(name, "cuda:", 5))
        return PX_PLAN_DEV_CUDA;
    if (!strcmp(name, "sim") || !strncmp(name, "sim:", 4))
        return PX_PLAN_DEV_SIM;
    return -1;
}

const char *px_plan_dev_name(int dev)
{
    return dev == PX_PLAN_DEV_CPU ? "cpu" : dev == PX_PLAN_DEV_CUDA ? "cuda"
                                         : dev == PX_PLAN_DEV_SIM  ? "sim" : "?";
}

void px_job_plan_free(px_job_plan_t *jp)
{
    if (!jp)
        return;
    px_plan_destroy(jp->state);
    free(jp->units);
    jp->state = NULL;
    jp->units = NULL;
}

static void sum_total(px_job_plan_t *jp)
{
    jp->total = px_plan_state_bytes(jp->state) + (double)jp->act_bytes +
                (double)jp->stash_bytes + (double)jp->moe_act_bytes +
                (double)jp->bf16_scratch_bytes + (double)jp->ipc_bytes;
}

/* The ZeRO plan of jp->units for cfg with `prec`, the stage's experts added
 * whole. */
static px_status_t make_state(const px_job_plan_t *jp, const px_job_config_t *cfg,
                              const px_plan_precision_t *prec, px_plan_t **state_p)
{
    const int cp = cfg->layout.cp > 1 ? cfg->layout.cp : 1;
    PX_CHECK(px_plan_create(jp->units, jp->nunits, 1, cfg->layout.dp * cp, cfg->zero, prec,
                            state_p));
    if (jp->moe_params)
        px_plan_add_unsharded(*state_p, jp->moe_params);
    return PX_OK;
}

/* The activation figures of stage s (held: its units) into jp: each chunk's
 * table times the slots the schedule gives it, zb1's stash, the MoE
 * layers', the bf16 scratch. sched NULL without pp. */
static px_status_t plan_acts(const px_job_config_t *cfg, int dev, const px_pipe_schedule_t *sched,
                             const int *sl, int s, px_job_plan_t *jp)
{
    const px_layout_t *l = &cfg->layout;
    const int tp = l->tp, cp = l->cp > 1 ? l->cp : 1, V = jp->chunks, pp = jp->stages;
    const int Vp = px_job_config_padded_vocab(cfg->vocab);
    const int bf16 = cfg->precision == PX_PRECISION_BF16;
    /* the op table's bf16 view stores the GEMM-only activations as bf16
     * unless PX_BF16_ACTS=0 (kernels/px_kernels_bf16.h) */
    const int bf16_acts = bf16 && px_env_int("PX_BF16_ACTS") != 0;
    const int lse_only = dev == PX_PLAN_DEV_CUDA; /* the CUDA fused attention */
    const uint64_t tokens = (uint64_t)jp->micro_batch * (uint64_t)jp->seq_local;
    int most_slots = 1;

    jp->act_bytes = 0;
    jp->stash_bytes = 0;
    jp->slots = 0;
    for (int c = 0; c < V; c++) {
        const int nl = sched ? sl[c * pp + s] : cfg->layers;
        const int slots = sched ? px_pipe_schedule_chunk_slots(sched, s, c) : 1;
        px_plan_gpt_acts_t a;
        PX_CHECK(px_plan_gpt_activations_dev(nl, cfg->heads, cfg->dim, Vp, jp->micro_batch,
                                             jp->seq_local, tp, cfg->sequence_parallel, cp,
                                             bf16_acts, lse_only, &a));
        if (c == 0)
            jp->acts = a;
        jp->act_bytes += (uint64_t)slots * a.bytes;
        if (sched && px_pipe_schedule_split(sched)) /* the weight pass's stash */
            jp->stash_bytes += (uint64_t)slots * 4 * (uint64_t)nl * tokens * 9 * cfg->dim;
        jp->slots += slots;
        most_slots = slots > most_slots ? slots : most_slots;
    }
    /* each held MoE layer has an activation slot per micro-batch in flight
     * (engine/moe.h px_moe_create_stage: px_pipe_chunk_slots_max) */
    jp->moe_act_bytes =
        cfg->experts ? px_plan_moe_activation_bytes(jp->moe_layers * most_slots, (int)tokens,
                                                    l->ep, cfg->experts, cfg->top_k, cfg->dim,
                                                    cfg->dropless, cfg->capacity_factor)
                     : 0;
    /* cuda: bf16 copies in device memory; cpu and sim: doubles in the host's */
    jp->bf16_scratch_bytes =
        bf16 ? px_plan_bf16_gemm_scratch_bytes(cfg->dim, Vp, (int)tokens, tp,
                                               cfg->sequence_parallel, dev == PX_PLAN_DEV_CUDA)
             : 0;
    return PX_OK;
}

/* One stage's plan into *jp (zeroed by the caller). */
static px_status_t plan_stage(const px_job_config_t *cfg, int dev, const px_pipe_schedule_t *sched,
                              const int *sl, int s, px_job_plan_t *jp)
{
    const px_layout_t *l = &cfg->layout;
    const int L = cfg->layers, pp = jp->stages;
    unsigned char held[L + 2];
    px_plan_precision_t prec;
    px_status_t status;

    jp->stage = s;
    jp->nunits = L + 2;
    /* one tensor rank's units (model.h), the engine's layout: a MoE layer's
     * without the dense MLP */
    if (!px_plan_gpt_units_moe(L, cfg->dim, cfg->vocab, cfg->seq, l->tp, cfg->experts,
                               cfg->moe_every, &jp->units))
        return PX_ERR_NO_MEMORY;
    memset(held, 1, sizeof(held));
    if (pp > 1) /* this stage's units only (pipesched.h); the others are empty */
        px_pipe_stage_units(L, pp, jp->chunks, sl, s, held);
    jp->layers = 0;
    jp->dense_params = 0;
    for (int u = 0; u < L + 2; u++) {
        if (!held[u])
            jp->units[u] = 0;
        jp->dense_params += jp->units[u];
        if (u > 0 && u <= L)
            jp->layers += held[u];
    }
    px_model_moe_t mm = {.layers = L, .dim = cfg->dim, .experts = cfg->experts,
                         .moe_every = cfg->moe_every};
    jp->moe_params = cfg->experts ? px_model_moe_stage_params(&mm, l->ep, held + 1) : 0;
    jp->moe_layers = 0;
    for (int i = 0; cfg->experts && i < L; i++)
        jp->moe_layers += held[1 + i] && px_model_moe_is_layer(&mm, i);
    /* the engine's fp32 AdamW state, whatever the compute precision */
    px_plan_precision_fp32(&prec);
    status = make_state(jp, cfg, &prec, &jp->state);
    if (status == PX_OK)
        status = plan_acts(cfg, dev, sched, sl, s, jp);
    if (status == PX_OK)
        sum_total(jp);
    return status;
}

px_status_t px_plan_job(const px_job_config_t *cfg, int dev, int stage, px_job_plan_t *out)
{
    const px_layout_t *l = &cfg->layout;
    const int pp = l->pp > 1 ? l->pp : 1, cp = l->cp > 1 ? l->cp : 1;
    const int V = pp > 1 && cfg->virtual_stages > 1 ? cfg->virtual_stages : 1;
    const int M = pp > 1 ? cfg->micro_batches : 1;
    const long long div = (long long)l->dp * cfg->grad_accum * M;
    px_pipe_schedule_t *sched = NULL;
    px_job_plan_t best = {0};
    int *sl = NULL;
    char err[256];
    px_status_t status = PX_OK;

    if (cfg->layers < 1 || cfg->dim < 1 || cfg->heads < 1 || cfg->seq < 1 || l->dp < 1 ||
        l->tp < 1 || div < 1 || cfg->batch < div || cfg->batch % div || cfg->seq % cp ||
        stage < -1 || stage >= pp || (dev != PX_PLAN_DEV_CPU && dev != PX_PLAN_DEV_CUDA &&
                                      dev != PX_PLAN_DEV_SIM)) {
        px_error("plan: cannot plan layers %d dim %d heads %d seq %d batch %d over dp %d x "
                 "grad_accum %d x micro_batches %d, tp %d, cp %d, stage %d of %d, device %d "
                 "(px_job_config_check first)", cfg->layers, cfg->dim, cfg->heads, cfg->seq,
                 cfg->batch, l->dp, cfg->grad_accum, M, l->tp, cp, stage, pp, dev);
        return PX_ERR_INVALID_ARGUMENT;
    }
    if (pp > 1) {
        /* layers per virtual stage: pp x V of them (V = 1: the stages) */
        sl = calloc((size_t)pp * V, sizeof(int));
        if (!sl)
            return PX_ERR_NO_MEMORY;
        status = px_pipe_stage_layers(cfg->layers, pp * V, V > 1 ? NULL : cfg->stage_layers, sl,
                                      err, sizeof(err));
        if (status != PX_OK) {
            px_error("plan: %s", err);
            goto out;
        }
        status = px_pipe_schedule_create_v(cfg->schedule, pp, M, V, &sched);
        if (status != PX_OK) {
            px_error("plan: cannot build schedule %s for pp %d, %d micro-batches, %d chunks",
                     px_pipe_schedule_name(cfg->schedule), pp, M, V);
            goto out;
        }
    }
    for (int s = stage < 0 ? 0 : stage; s < (stage < 0 ? pp : stage + 1); s++) {
        px_job_plan_t jp = {.device = dev, .stages = pp, .chunks = V,
                            .micro_batch = (int)(cfg->batch / div), .seq_local = cfg->seq / cp};
        status = plan_stage(cfg, dev, sched, sl, s, &jp);
        if (status != PX_OK) {
            px_job_plan_free(&jp);
            px_job_plan_free(&best);
            goto out;
        }
        if (!best.state || jp.total > best.total) {
            px_job_plan_free(&best);
            best = jp;
        } else
            px_job_plan_free(&jp);
    }
    *out = best;
out:
    px_pipe_schedule_destroy(sched);
    free(sl);
    return status;
}

px_status_t px_job_plan_reprice(px_job_plan_t *jp, const px_job_config_t *cfg,
                                const px_plan_precision_t *prec)
{
    px_plan_t *state = NULL;
    PX_CHECK(make_state(jp, cfg, prec, &state));
    px_plan_destroy(jp->state);
    jp->state = state;
    sum_total(jp);
    return PX_OK;
}

void px_plan_job_add_ipc(px_job_plan_t *jp, const px_job_config_t *cfg, const int *node_of_rank,
                         int node, uint64_t slot_bytes)
{
    int comms = 0;
    if (jp->device != PX_PLAN_DEV_CUDA)
        return;
    if (node_of_rank)
        jp->ipc_bytes = px_plan_ipc_node_bytes(&cfg->layout, cfg->experts, node_of_rank, node,
                                               slot_bytes, &comms);
    else {
        comms = px_plan_ipc_comms(&cfg->layout, cfg->experts, 0, NULL, NULL);
        jp->ipc_bytes = px_plan_ipc_bytes(comms, slot_bytes);
    }
    jp->ipc_comms = comms;
    sum_total(jp);
}
