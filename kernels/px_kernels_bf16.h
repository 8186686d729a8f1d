/* px_kernels_bf16.h: an op table's mixed-precision view.
 *
 * Mixed precision in parallax is "bf16 GEMM and attention operands, fp32
 * elsewhere", as PyTorch autocast runs a GPT (its linear layers, and
 * scaled_dot_product_attention as flash attention does): the engine keeps
 * fp32 master weights, fp32 activations in memory (except those only bf16
 * GEMMs read, stored as bf16 in mode PX_KERNELS_BF16: below), fp32
 * gradients, AdamW state, reductions and collectives; every linear layer (qkv, attention
 * projection, MLP fc / proj, the tied LM head, MoE router and experts)
 * multiplies bf16-rounded inputs into fp32 output (fp32 accumulation on
 * CUDA, double on the CPU: px_kernels.h), and so do attention's batched
 * products (q k^T, P v and the four of backward; attention_bf16_* and
 * attention_block_bf16_*, the latter for ring attention). LayerNorm, GELU,
 * softmax, cross-entropy and the optimizer stay fp32.
 *
 * The weights are rounded on the fly by each GEMM (matmul_bf16_*), not kept
 * as a bf16 copy refreshed after the optimizer: rounding is deterministic,
 * so the arithmetic is identical, and every layout gets it without
 * tracking where its weights are (ZeRO-3's gathered units, pipeline stages,
 * tensor shards, experts) or invalidating a copy on a resume. The
 * activations they only feed are stored rounded (bf16_acts, modes below). The cost is
 * one conversion of W per GEMM call (on CUDA read 4, write 2 bytes per
 * weight, against the GEMM's 2 x rows FLOPs per weight) and the scratch for
 * the rounded operands (plan.h: px_plan_bf16_gemm_elems). */
#ifndef PX_KERNELS_BF16_H
#define PX_KERNELS_BF16_H

#include "px_kernels.h"

/* The modes of px_kernels_with_precision: fp32; bf16 GEMM and attention
 * operands with the GEMM-only activations STORED as bf16 (the table's
 * bf16_acts is 1: LayerNorm and GELU outputs, as autocast saves a linear
 * layer's bf16 input cast; engine/gpt.c); the same arithmetic with those
 * activations kept fp32 (bf16_acts 0: every activation stored fp32, bit
 * for bit the same results, kept as the check of that claim). */
#define PX_KERNELS_FP32 0
#define PX_KERNELS_BF16 1
#define PX_KERNELS_BF16_F32ACTS 2

/* The table to compute a model with at `bf16` (a PX_KERNELS_* mode): `base`
 * itself for fp32; for bf16 a copy of `base` whose matmul_forward /
 * matmul_backward are base's matmul_bf16_forward / matmul_bf16_backward and
 * whose attention_forward / _backward / attention_block_forward / _backward
 * are base's attention_bf16_* / attention_block_bf16_* (every other entry,
 * the name and the memory ops are base's): the engine (gpt.c, ring_attn.c)
 * calls the same slots in both precisions, and an fp32 run is the fp32
 * table itself, untouched. The copy is static, one per base table (at most
 * 4 bases per process); NULL when `base` lacks one of those bf16 ops or the
 * slots are used up (one per base and mode). Mode PX_KERNELS_BF16 also
 * needs base's matmul_bf16in_* and bf16 conversions and sets bf16_acts;
 * any other nonzero mode is PX_KERNELS_BF16_F32ACTS. Call it from one thread
 * at start-up (not thread-safe); the result lives as long as the process.
 * Code that asks whether a table is the CPU one must ask of `base`. */
const px_kernel_ops_t *px_kernels_with_precision(const px_kernel_ops_t *base, int bf16);

#endif
