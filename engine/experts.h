/* experts.h: the expert parameter group: the routers and this rank's
 * experts of the MoE layers a stage holds (moe.h), their gradients and
 * AdamW moments.
 *
 * One flat buffer each of parameters, gradients and moments m, v (the
 * backend's memory; memacct categories params / grads / optimizer):
 * [routers of every held MoE layer, (E,C) each | this rank's E/ep experts
 * of every held MoE layer, each fcw (4C,C) fcb (4C) fcprojw (C,4C) fcprojb
 * (C)]. The group lives outside ZeRO: the routers are replicated over the
 * data-parallel group (dp x cp), each expert over its expert-data group
 * (edp: the dp x cp / ep ranks holding the same experts). The trainable
 * state's owner (params.h) runs the norm, the clipping, AdamW, checkpoints
 * and canonical gathers over this group and the dense one (zero.h); the
 * mixture (moe.c) borrows the buffers for routing and the experts' math.
 * One training thread; collectives on the groups given at create. */
#ifndef PX_EXPERTS_H
#define PX_EXPERTS_H

#include <stddef.h>
#include <stdint.h>

#include "moe.h"
#include "optim.h"
#include "px_kernels.h"
#include "px_status.h"
#include "px_transport.h"

/* One expert's four tensors in a buffer laid out as the parameters. */
typedef struct px_expert_view {
    float *fcw, *fcb, *fcprojw, *fcprojb;
} px_expert_view_t;

/* The group for the MoE layers l with held[l] != 0 (cfg->layers entries,
 * read during the call; NULL: every layer) of the model `cfg`, this rank
 * holding experts [r E/ep, (r+1) E/ep) for its rank r of the ep group (NULL:
 * alone). dp: the routers' replicas (the data-parallel group; NULL: alone);
 * edp: the experts' (NULL: none); dp_size: dp (x cp) ranks and accum:
 * micro-batches per step (the 1/(dp_size x accum) of the reduction). Groups
 * and ops borrowed for the object's life. Parameters, gradients and
 * moments zeroed (planner/model.h px_model_moe_stage_params elements each,
 * what the plan counts). Errors: PX_ERR_INVALID_ARGUMENT (logged: E not
 * divisible by ep, sizes < 1), PX_ERR_NO_MEMORY. */
px_status_t px_experts_create(const px_moe_config_t *cfg, const px_kernel_ops_t *ops,
                              px_comm_t *ep, px_comm_t *dp, px_comm_t *edp, int dp_size,
                              int accum, const unsigned char *held, px_experts_t **ex_p);
void px_experts_destroy(px_experts_t *ex); /* NULL no-op */

/* The model's mixture (the create-time cfg). */
const px_moe_config_t *px_experts_config(const px_experts_t *ex);

/* The held MoE layers (nm), the local index (0 .. nm-1) of model layer l
 * (-1: not a MoE layer, or not held here) and the experts per rank (E/ep). */
int px_experts_layers(const px_experts_t *ex);
int px_experts_local(const px_experts_t *ex, int l);
int px_experts_per_rank(const px_experts_t *ex);

/* Local MoE layer mi's router (E,C) and local expert le's tensors in the
 * parameters (grads 0) or the gradients (grads 1). Borrowed. */
float *px_experts_router(const px_experts_t *ex, int grads, int mi);
px_expert_view_t px_experts_expert(const px_experts_t *ex, int grads, int mi, int le);

/* Parameters from the seed, by canonical element index (counter-based, as
 * the model's: any ep and stage split gives the same values): router and
 * fcw N(0, 0.02), fcprojw N(0, 0.02/sqrt(2L)), biases 0. Moments zeroed. */
void px_experts_init(px_experts_t *ex, uint64_t seed);

/* Before a step's first micro-batch: zero the gradients. */
void px_experts_zero_grads(px_experts_t *ex);

/* After the last micro-batch: sums the router gradients over dp and the
 * experts' over edp, scales both by 1/(dp_size x accum) and writes the
 * squared L2 norm of the group's gradients (each expert counted once:
 * summed over the ep group; routers + experts, in that order) into
 * *sumsq_p, the same on every rank of the stage. Errors: the
 * collectives' (logged). */
px_status_t px_experts_reduce(px_experts_t *ex, double *sumsq_p);

/* AdamW (optim.h; decay on router and expert matrices) with the gradients
 * scaled by coef (px_adamw_clip_coef of the global norm), folded into its
 * pass: the gradients stay unscaled. */
void px_experts_update(px_experts_t *ex, float coef, const px_adamw_t *hp);

/* The canonical MoE buffer (moe.h px_moe_num_params) of the parameters
 * (which 0), the last reduced gradients (1) or the moments m (2), v (3)
 * into HOST memory dst (this stage's MoE layers; zeros for the others);
 * collective over the ep group (an all-reduce of the pieces), the result
 * on every rank of it. Errors: PX_ERR_INVALID_ARGUMENT (which), the
 * collective's (logged). */
px_status_t px_experts_gather_canonical(px_experts_t *ex, int which, float *dst);

/* The inverse for a checkpoint's load: this rank's routers and experts of
 * the parameters (which 0) or the moments m (2) or v (3) from the
 * canonical MoE buffer src (HOST memory, px_moe_num_params elements, read
 * during the call), whatever ep and stages wrote it. No communication. */
void px_experts_set_canonical(px_experts_t *ex, int which, const float *src);

/* The flat parameter and gradient buffers (px_moe_rank_params elements
 * with every layer held; borrowed). For tests. */
float *px_experts_params(px_experts_t *ex);
float *px_experts_grads(px_experts_t *ex);

#endif
