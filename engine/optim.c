/* optim.c: AdamW and the clip rule (optim.h). */
#include "optim.h"

float px_adamw_clip_coef(float clip, float norm)
{
    float coef = clip > 0.0f ? clip / (norm + 1e-6f) : 1.0f;
    return coef < 1.0f ? coef : 1.0f; /* NaN too: no scaling */
}

void px_adamw_step(const px_kernel_ops_t *k, const px_adamw_t *hp, int decay, float coef,
                   float *params, const float *grads, float *m, float *v, size_t n)
{
    k->adamw_update(params, grads, m, v, n, hp->lr, hp->beta1, hp->beta2, hp->eps,
                    decay ? hp->weight_decay : 0.0f, hp->t, coef);
}
