/* px_reduce.c: CPU reduction kernels for the collectives. Any thread; no
 * state. Loops are written so the compiler vectorises them (-O2). */
#include "px_reduce.h"

void px_reduce_sum_f32(float *restrict dst, const float *restrict src, size_t count)
{
    for (size_t i = 0; i < count; i++)
        dst[i] += src[i];
}

void px_scale_f32(float *dst, float scale, size_t count)
{
    for (size_t i = 0; i < count; i++)
        dst[i] *= scale;
}
