/* params.h: the one owner of a rank's trainable state, as parameter groups.
 *
 *   dense:   the model's units (gpt.h), sharded by ZeRO 0-3 over the dp
 *            (x cp) group (zero.h);
 *   experts: the MoE layers' routers and this rank's experts (experts.h),
 *            replicated over their data-parallel / expert-data groups.
 *
 * A step's gradients are zeroed, reduced and measured, then clipped and
 * updated (AdamW, optim.h) over both groups here; the checkpoint's shards
 * and files (checkpoint.h, moe_checkpoint.h), the canonical gathers (dumps,
 * exports) and the safetensors export run over them too. With a pipeline
 * each stage holds its own layers, so what a stage measures or gathers of
 * the expert group is summed over the pp group. Every call is collective
 * over the groups it names; one training thread. */
#ifndef PX_PARAMS_H
#define PX_PARAMS_H

#include <stddef.h>

#include "experts.h"
#include "gpt.h"
#include "optim.h"
#include "plan.h"
#include "px_transport.h"
#include "zero.h"

/* The groups and what the checkpoints and gathers need; all borrowed. */
typedef struct px_params {
    px_zero_t *dense;        /* the dense units' group */
    px_experts_t *experts;   /* the routers and experts; NULL for a dense model */
    const px_gpt_config_t *gc;
    const px_plan_t *plan;   /* the dense group's memory plan */
    int heads;               /* the model's (the checkpoint's meta) */
    px_comm_t *dp;           /* the dense group's dp (x cp) group (NULL: alone) */
    px_comm_t *mp;           /* completes canonical gathers: tp x pp (NULL: alone) */
    px_comm_t *pp;           /* the pipeline group (NULL or one rank: no pipeline) */
    px_comm_t *world;        /* the checkpoint's barrier (NULL: alone) */
    int rank;                /* the world rank: rank 0 writes the shared files */
} px_params_t;

/* Before a step's first micro-batch: every group's gradients zeroed. */
void px_params_begin_step(px_params_t *p);

/* After the last micro-batch: reduces every group's gradients, *loss_p =
 * local_loss averaged over the dense group's ranks (px_zero_reduce) and
 * *norm_p = the global L2 norm of the gradients, the dense group's then
 * the experts' (sqrt(dense^2 + experts' sum of squares), the experts'
 * summed over the pp group). Errors: the collectives' (logged). */
px_status_t px_params_reduce(px_params_t *p, float local_loss, float *loss_p, float *norm_p);

/* AdamW with hyper-parameters hp on every group, the gradients scaled by
 * coef (px_adamw_clip_coef of the global norm); `regather`: the dense
 * group re-gathers what it keeps whole (zero.h px_zero_update's `more`).
 * Errors: the dense group's collectives'. */
px_status_t px_params_update(px_params_t *p, float coef, const px_adamw_t *hp, int regather);

/* The canonical (whole-model, px_model layout) dense parameters (which
 * 0) or averaged gradients (which 1) into canon (n floats, host memory) on
 * every rank, and with experts the canonical MoE buffer (moe.h
 * px_moe_num_params floats; NULL: skipped) into moe_canon. Collective. */
px_status_t px_params_canonical(px_params_t *p, int which, float *canon, float *moe_canon);

/* Writes step `step`'s checkpoint under dir: the expert group's files
 * (moe_checkpoint.h) before the dense shards (checkpoint.h), whose
 * meta.json, written last, marks the step directory complete.
 * Collective over the world. Errors: the collectives', PX_ERR_IO,
 * PX_ERR_NO_MEMORY. */
px_status_t px_params_checkpoint_save(px_params_t *p, const char *dir, int step);

/* Loads the step directory `path` into every group; *step_p = its step.
 * A checkpoint with experts into a dense model is refused
 * (PX_ERR_INVALID_ARGUMENT, logged). Errors as px_checkpoint_load /
 * px_moe_checkpoint_load. */
px_status_t px_params_checkpoint_load(px_params_t *p, const char *path, int *step_p);

/* The safetensors export of the canonical parameters of every group to
 * `path` (written by world rank 0; the gather is collective). Errors: the
 * gather's, PX_ERR_IO, PX_ERR_NO_MEMORY. */
px_status_t px_params_export(px_params_t *p, const char *path);

#endif
