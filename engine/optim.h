/* optim.h: the optimizer: AdamW (Loshchilov & Hutter 2019, decoupled
 * weight decay, as torch.optim.AdamW) after clipping by the global
 * gradient norm (as torch.nn.utils.clip_grad_norm_). Every holder of
 * trainable state - ZeRO's shards (zero.c), the routers and experts
 * (moe.c), a model's own buffers (gpt.c) - updates through px_adamw_step,
 * so one formula and one clip rule serve them all. The arithmetic is the
 * device's adamw_update op (px_kernels.h), the clip coefficient folded into
 * its one pass over the gradient. */
#ifndef PX_OPTIM_H
#define PX_OPTIM_H

#include <stddef.h>

#include "px_kernels.h"

/* The hyper-parameters of one AdamW step. */
typedef struct px_adamw {
    float lr, beta1, beta2, eps;
    float weight_decay; /* applied to the tensors marked decay (matrices) */
    int t;              /* 1-based step count (bias correction) */
} px_adamw_t;

/* The gradient's scale for clipping to `clip` by the global norm `norm`
 * (before clipping): clip / (norm + 1e-6) where that is below 1, else 1;
 * 1 when clip <= 0 (no clipping). As clip_grad_norm_. */
float px_adamw_clip_coef(float clip, float norm);

/* One AdamW step over n elements of one tensor on the device of `k`:
 * params, m and v updated in place from grads x coef; weight decay only
 * when `decay`. Every pointer in k's memory. */
void px_adamw_step(const px_kernel_ops_t *k, const px_adamw_t *hp, int decay, float coef,
                   float *params, const float *grads, float *m, float *v, size_t n);

#endif
