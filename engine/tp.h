/* tp.h: tensor parallelism of the GPT engine (Megatron-LM: Shoeybi et al.,
 * "Megatron-LM: Training Multi-Billion Parameter Language Models Using
 * Model Parallelism", 2019): the collectives gpt.c's blocks call on the
 * layout's tensor group, and the vocab-parallel embedding and
 * cross-entropy.
 *
 * What each tp rank holds is the tensor table's (model.h): column-parallel
 * qkvw/qkvb (q, k, v of its NH/tp heads) and fcw/fcb, row-parallel attprojw
 * and fcprojw, wte's rows [r Vp/tp, (r+1) Vp/tp); LayerNorms, wpe and the
 * row-parallel biases are replicated. A block's pass (gpt.c):
 *   forward:  ln1 -> qkv (column) -> attention on NH/tp heads -> attproj
 *             (row) -> g: all-reduce, + attprojb -> residual; ln2 -> fc
 *             (column) -> gelu -> fcproj (row) -> g, + fcprojb -> residual;
 *   backward: the row-parallel matmuls need their replicated output
 *             gradient only; f: the input gradient of each column-parallel
 *             matmul (qkv, fc, and the tied LM head over the vocab) is
 *             all-reduced before the LayerNorm's backward.
 * Every all-reduce leaves bitwise-identical results on every member
 * (px_coll.h), so the replicated activations, and with them the gradients
 * of the replicated parameters, are bitwise equal on every tp rank without
 * any further communication.
 *
 * Runs on the training thread; the tensor group's communicator is
 * borrowed from the layout's groups (groups.h). */
#ifndef PX_TP_H
#define PX_TP_H

#include <stddef.h>
#include <stdint.h>

#include "model.h"
#include "px_kernels.h"
#include "px_status.h"
#include "px_transport.h"

/* Time one rank spent in tensor-parallel collectives, since the model's
 * creation. */
typedef struct px_tp_times {
    double comm_s; /* blocked in tp collectives, seconds */
    int colls;     /* collectives issued */
} px_tp_times_t;

/* buf (n floats, the backend's memory) = its SUM over the tensor group,
 * in place, blocking: Megatron's g in forward and f in backward. comm NULL
 * or of one rank: nothing. Errors: the collective's (logged with `what`). */
px_status_t px_tp_allreduce(px_comm_t *comm, float *buf, size_t n, const char *what,
                            px_tp_times_t *times);

/* Vocab-parallel embedding, forward: out (B,T,C) = wte[inp] + wpe[t] with
 * wte (Vl,C) this rank's rows [v0, v0 + Vl) of the padded vocab: the local
 * lookup (0 for ids held elsewhere), an all-reduce (exactly one member
 * contributes each row, so the sum is exact), then wpe added once, so the
 * result is bitwise what one rank computes. */
px_status_t px_tp_embed_forward(const px_kernel_ops_t *ops, px_comm_t *comm, float *out,
                                const int32_t *inp, const float *wte, const float *wpe, int B,
                                int T, int C, int v0, int Vl, px_tp_times_t *times);

/* Vocab-parallel cross-entropy, forward (Megatron-LM section 3): logits,
 * probs (N,Vl) this rank's columns [v0, v0 + Vl) of the padded vocab Vp
 * (real columns < V); losses (N); targets (N) < V. The full logits are
 * never gathered: per row the max (all-reduce MAX of N floats), then the
 * sum of exp and the target's logit (all-reduce SUM of 2N doubles).
 * Work space: rowmax (N floats), stats (2N doubles), backend memory. */
px_status_t px_tp_crossentropy_forward(const px_kernel_ops_t *ops, px_comm_t *comm,
                                       float *losses, float *probs, const float *logits,
                                       const int32_t *targets, float *rowmax, double *stats,
                                       int N, int V, int v0, int Vl, px_tp_times_t *times);

/* Sequence parallelism (Korthikanti et al., "Reducing Activation
 * Recomputation in Large Transformer Models", 2022, section 4.2.2): the
 * all-reduce g becomes reduce-scatter + (next region) all-gather, f the
 * reverse pair. The split: the micro-batch's B*T tokens in (B,T) order
 * are cut into tp contiguous ranges of B*T/tp tokens, tp rank r holding
 * range r (rows [r BT/tp, (r+1) BT/tp) of every (B*T, C) tensor of the
 * residual stream). With B = 1 that is Megatron's cut of the sequence
 * dimension; with B > 1 a range may hold whole sequences or parts of
 * them, which the token-wise LayerNorm, residual and position add do not
 * mind.
 *
 * full (tp*n floats) = every rank's local (n floats) in rank order. */
px_status_t px_tp_allgather(px_comm_t *comm, const float *local, float *full, size_t n,
                            const char *what, px_tp_times_t *times);
/* local (n floats) = block r of the SUM over the group of full (tp*n). */
px_status_t px_tp_reduce_scatter(px_comm_t *comm, const float *full, float *local, size_t n,
                                 const char *what, px_tp_times_t *times);

/* A canonical-layout host buffer dst (n floats) in which each tp rank
 * wrote only its own shards and the replicated tensors were written by tp
 * rank 0 only (zeros elsewhere: px_gpt_units_to_canonical): their SUM over
 * the group is the whole model, exactly (one non-zero term per element).
 * Collective over the tensor group; comm NULL or of one rank: nothing. */
px_status_t px_tp_combine_canonical(px_comm_t *comm, float *dst, size_t n);

#endif
