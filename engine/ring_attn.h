/* ring_attn.h: context parallelism's attention, computed blockwise while
 * key/value blocks travel around the context-parallel group (ring
 * attention: Liu, Zaharia, Abbeel, "Ring Attention with Blockwise
 * Transformers for Near-Infinite Context", 2023; the load-balanced causal
 * split of Megatron-LM's context parallelism).
 *
 * The sequence (T tokens) is cut into 2 x cp chunks of c = T / (2 cp)
 * tokens; cp rank i holds chunk i (its rows [0, c)) and chunk 2cp-1-i (its
 * rows [c, 2c)), so every rank does the same causal work. The rank's
 * (B, Tl = 2c) tokens have their fused qkv (B,Tl,3C) as usual; at ring step
 * s (0..cp-1) the rank holds the k|v block of rank i-s, computes its
 * queries against it (kernels' attention_block_forward, one head at a
 * time, poking the transport between heads) while the block moves on to
 * rank i+1 and the next one arrives from i-1 (nonblocking send/recv). The
 * backward recomputes each block's probabilities from the saved
 * log-sum-exp; a block's dk|dv accumulate as it travels (one step behind
 * the k|v ring) and arrive at their owner after the last step.
 *
 * Memory: 5 (B,Tl,2C) buffers (k|v double buffer, dk|dv send double
 * buffer, one receive) and delta (B,NH,Tl), tagged activations
 * (px_plan_gpt_activations_cp counts them); the scratch (Tl,Tl) is the
 * caller's. One thread (the model's). */
#ifndef PX_RING_ATTN_H
#define PX_RING_ATTN_H

#include <stddef.h>

#include "px_coll.h"
#include "px_kernels.h"
#include "px_status.h"
#include "px_transport.h"

typedef struct px_ring_attn px_ring_attn_t;

/* Time in the ring's transfers since create: total_s from each step's
 * start of its send/recv to when they were seen complete, wait_s of it
 * blocked in px_wait (the rest was hidden behind the blocks' compute),
 * bytes sent. */
typedef struct px_ring_times {
    double total_s, wait_s;
    double bytes;
    int steps;
} px_ring_times_t;

/* Work buffers for B sequences of Tl = 2c local tokens, C channels (this
 * rank's: C/tp) in NH heads (NH/tp). ops borrowed. PX_ERR_INVALID_ARGUMENT
 * (logged) for Tl odd or a size not positive; PX_ERR_NO_MEMORY. */
px_status_t px_ring_attn_create(const px_kernel_ops_t *ops, int B, int Tl, int C, int NH,
                                px_ring_attn_t **ra_p);
void px_ring_attn_destroy(px_ring_attn_t *ra); /* NULL no-op */

/* Forward: out (B,Tl,C) = causal softmax attention of the rank's queries
 * over the whole sequence's keys; lse (B,NH,Tl) each row's log-sum-exp
 * (kept for backward); qkv (B,Tl,3C) this rank's fused projection;
 * scratch Tl*Tl floats. comm: the cp group (its rank i holds chunks i and
 * 2cp-1-i). progress(arg) (may be NULL) is called between blocks. Errors:
 * the transport's (logged naming the step and peer). */
px_status_t px_ring_attn_forward(px_ring_attn_t *ra, px_comm_t *comm, float *out, float *lse,
                                 const float *qkv, float *scratch, void (*progress)(void *),
                                 void *arg);
/* Backward: dqkv (B,Tl,3C) += the gradient of the loss w.r.t. this rank's
 * q, k, v (k, v's collected from every rank's queries); dout (B,Tl,C);
 * out, lse as the forward left them. Same comm, scratch, progress. */
px_status_t px_ring_attn_backward(px_ring_attn_t *ra, px_comm_t *comm, float *dqkv,
                                  const float *dout, const float *qkv, const float *out,
                                  const float *lse, float *scratch, void (*progress)(void *),
                                  void *arg);

void px_ring_attn_times(const px_ring_attn_t *ra, px_ring_times_t *out);

/* Global position of local row j (0 <= j < Tl) of cp rank i of cp ranks:
 * chunk i then chunk 2cp-1-i, c = Tl/2 rows each. */
int px_ring_position(int i, int cp, int Tl, int j);

#endif
