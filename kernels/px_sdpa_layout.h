/* px_sdpa_layout.h: the tensor shapes of the fused (flash) attention graphs
 * that the CUDA backend hands to cuDNN (kernels/cuda/px_attention_cudnn.c),
 * computed from the op's shape alone, and the key of its plan cache.
 *
 * Pure host arithmetic (no CUDA, no cuDNN) so that a CPU test checks what
 * only a GPU could otherwise show wrong: a stride that reads the wrong head.
 *
 * The layouts are those of the op table's attention_bf16_* (px_kernels.h),
 * with every bf16 operand a copy in the same element layout as its fp32
 * tensor: qkv (B,T,3C) = q | k | v, head h of q at column h*hs, of k at
 * C + h*hs, of v at 2C + h*hs; out and dout (B,T,C); the log-sum-exp
 * (B,NH,T) fp32, natural log of the scaled scores (the first B*NH*T floats
 * of `att`). cuDNN sees each as a 4-d (batch, head, row, column) view with
 * strides in elements, as its graph API takes them. */
#ifndef PX_SDPA_LAYOUT_H
#define PX_SDPA_LAYOUT_H

#include <stddef.h>
#include <stdint.h>

#include "px_status.h"

/* direction of a graph: forward (out, lse) or backward (dq, dk, dv) */
enum { PX_SDPA_FWD = 0, PX_SDPA_BWD = 1 };

/* What a plan depends on: B sequences of T rows, NH heads of hs channels
 * (C = NH * hs), causal 1/0, direction PX_SDPA_FWD / PX_SDPA_BWD. Two
 * calls with equal keys run the same plan (the data pointers differ). */
typedef struct px_sdpa_key {
    int B, NH, T, hs, causal, dir;
} px_sdpa_key_t;

/* One tensor of the graph: dims and strides in elements, (b, h, row, col) */
typedef struct px_sdpa_dims {
    int64_t dim[4], stride[4];
} px_sdpa_dims_t;

/* Every tensor shape the two graphs use (px_attention_cudnn.c names each
 * node's operands from these). q, k, v also describe dq, dk, dv, which
 * live in a bf16 (B,T,3C) buffer of qkv's layout; o also describes dout. */
typedef struct px_sdpa_layout {
    px_sdpa_dims_t q;      /* (B,NH,T,hs), strides (3CT, hs, 3C, 1), at 0 */
    px_sdpa_dims_t k;      /* the same at k_off */
    px_sdpa_dims_t kt;     /* k transposed: (B,NH,hs,T), strides (3CT, hs, 1, 3C) */
    px_sdpa_dims_t v;      /* (B,NH,T,hs) at v_off, as q */
    px_sdpa_dims_t vt;     /* v transposed, as kt */
    px_sdpa_dims_t o;      /* (B,NH,T,hs) in (B,T,C): strides (CT, hs, C, 1) */
    px_sdpa_dims_t stats;  /* (B,NH,T,1), strides (NH T, T, 1, 1): the lse */
    px_sdpa_dims_t s;      /* (B,NH,T,T) scores, probabilities, dP: packed */
    px_sdpa_dims_t st;     /* the same transposed (P^T, dS^T): (B,NH,T,T), strides (NH T T, T T, 1, T) */
    px_sdpa_dims_t dodo;   /* dout * out before its row sum: (B,NH,T,hs) strides (NH T hs, T hs, NH hs, 1) */
    px_sdpa_dims_t dqacc;  /* the fp32 dq accumulator (backward work space): packed (B,NH,T,hs) */
    px_sdpa_dims_t scalar; /* a by-value scalar: (1,1,1,1) */
    size_t k_off, v_off;   /* elements from qkv's base to k and v: C, 2C */
    size_t qkv_elems;      /* B*T*3C: the bf16 qkv copy, and dqkv */
    size_t o_elems;        /* B*T*C: out / dout copies */
    size_t stats_elems;    /* B*NH*T: lse, and the backward's row sums of dout*out */
    size_t dqacc_elems;    /* B*NH*T*hs */
} px_sdpa_layout_t;

/* 1 when the fused graphs take C channels in NH heads: C divisible by NH,
 * head size hs = C/NH a multiple of 8 (16-byte aligned bf16 rows: every
 * head's and k's / v's first element lies on 16 bytes) from 8 to 128 (the
 * flash engines' range on sm_80 and sm_90). */
int px_sdpa_supported(int C, int NH);

/* The layout of key's graphs. Errors: PX_ERR_INVALID_ARGUMENT when a size
 * is not positive, px_sdpa_supported(NH*hs, NH) is 0, or an element count
 * overflows int64 (the tensor is written nowhere then). */
px_status_t px_sdpa_layout(const px_sdpa_key_t *key, px_sdpa_layout_t *lay_p);

/* 1 when a and b are the same key (every field) */
int px_sdpa_key_equal(const px_sdpa_key_t *a, const px_sdpa_key_t *b);

/* Index of key among keys[0..n), -1 when absent: the plan cache's lookup
 * (a few entries: one per shape and direction a process runs). */
int px_sdpa_cache_find(const px_sdpa_key_t *keys, int n, const px_sdpa_key_t *key);

#endif
