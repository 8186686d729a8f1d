/* px_reduce.h: the reduction kernels the collectives use (CPU).
 *
 * dst[i] = dst[i] OP src[i] for i < count, element-wise, in the buffer's
 * dtype. Deterministic: the same inputs give bitwise the same output. The
 * CUDA backend will provide the same signatures. */
#ifndef PX_REDUCE_H
#define PX_REDUCE_H

#include <stddef.h>
#include <stdint.h>

/* dst += src, fp32, `count` elements. */
void px_reduce_sum_f32(float *dst, const float *src, size_t count);
/* dst *= scale, fp32 (used by AVG after the SUM). */
void px_scale_f32(float *dst, float scale, size_t count);

#endif
