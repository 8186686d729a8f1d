/* px_reduce.h: the reduction kernels the collectives use (CPU).
 *
 * Element-wise, in the buffer's dtype, deterministic (the same inputs give
 * bitwise the same output). Data types and ops are common/px_dtype.h's,
 * the same numbering the transport puts on the wire. The CUDA backend
 * will provide the same signatures. */
#ifndef PX_REDUCE_H
#define PX_REDUCE_H

#include <stddef.h>
#include <stdint.h>

#include "px_dtype.h"

/* dst[i] = a[i] OP b[i] for i < count. `dst` may be `a` or `b` (in place);
 * other overlaps are not allowed. AVG reduces as SUM (the division is
 * px_reduce_avg_finish, once, on the complete sum). Integers wrap (two's
 * complement, as NCCL); fp16/bf16 compute each element in fp32 and round
 * once to nearest even (the collectives reduce halves in fp32 buffers
 * instead, so a multi-rank result is rounded only once). Returns 0, or -1
 * for an unknown dtype/op. */
int px_reduce_apply(px_dtype_t dtype, px_redop_t op, void *dst, const void *a, const void *b, size_t count);

/* dst[i] = dst[i] / n: AVG's last step. Floats divide exactly (x / n, not
 * x * (1/n)); integers truncate toward zero (C division); fp16/bf16 divide
 * in fp32 and round once. n >= 1. */
void px_reduce_avg_finish(px_dtype_t dtype, void *dst, size_t count, int n);

/* fp16 (IEEE binary16) and bf16 to fp32 (exact) and back (round to nearest
 * even; NaN stays NaN, overflow gives inf). `count` elements; no overlap. */
void px_f16_to_f32(float *dst, const uint16_t *src, size_t count);
void px_f32_to_f16(uint16_t *dst, const float *src, size_t count);
void px_bf16_to_f32(float *dst, const uint16_t *src, size_t count);
void px_f32_to_bf16(uint16_t *dst, const float *src, size_t count);
/* dst = src rounded to the nearest bf16 (even on ties), kept as fp32: the
 * value px_bf16_to_f32(px_f32_to_bf16(src)) gives, in one pass; `count`
 * elements; dst may equal src. What the CPU bf16 GEMM feeds sgemm. */
void px_f32_round_bf16(float *dst, const float *src, size_t count);

/* Legacy fp32 helpers (dst += src; dst *= scale). */
void px_reduce_sum_f32(float *dst, const float *src, size_t count);
void px_scale_f32(float *dst, float scale, size_t count);

#endif
