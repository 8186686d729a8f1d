/* px_attn_block_at.h: where head h of sequence b starts in the tensors of
 * one block of blockwise attention (px_attn_block_t, px_kernels.h), for
 * every backend's block forward and backward (CPU fp32 and bf16, CUDA host
 * code), so the offsets are written once. */
#ifndef PX_ATTN_BLOCK_AT_H
#define PX_ATTN_BLOCK_AT_H

#include <stddef.h>

#include "px_kernels.h"

/* Offsets in floats: q and dq at .q, k and dk at .kv (v and dv at .kv +
 * g->v_off), out and dout at .o, lse and delta at .lse. */
typedef struct px_attn_at {
    size_t q, kv, o, lse;
} px_attn_at_t;

/* The offsets of head h (0..NH-1) of sequence b (0..B-1) of block g. */
static inline px_attn_at_t px_attn_block_at(const px_attn_block_t *g, int b, int h)
{
    px_attn_at_t a;
    a.q = (size_t)b * g->q_bs + (size_t)h * (size_t)g->hs;
    a.kv = (size_t)b * g->kv_bs + (size_t)h * (size_t)g->hs;
    a.o = (size_t)b * g->o_bs + (size_t)h * (size_t)g->hs;
    a.lse = (size_t)b * g->lse_bs + (size_t)h * g->lse_hs;
    return a;
}

#endif
