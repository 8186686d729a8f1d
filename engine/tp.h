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
 *             all-reduced before the LayerNorm's backward; it runs
 *             nonblocking while the matmul's weight gradient computes
 *             (gpt.c col_backward: dinp first, start, dweight in row
 *             blocks with a progress poke after each, wait).
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
#include "px_coll.h"
#include "px_transport.h"

/* Time one rank spent in tensor-parallel collectives, since the model's
 * creation. The communication time of the collectives is comm_s + hidden_s:
 * comm_s the rank could not compute (blocking calls, and inside the
 * transport for the overlapped ones: start, the px_test of every progress
 * poke, px_wait), hidden_s what an overlapped collective was in flight
 * while the rank computed (from its start to the poke that saw it done, or
 * to its wait; an upper bound by at most one poke interval). */
typedef struct px_tp_times {
    double comm_s;   /* blocked in tp collectives (wait_s included), seconds */
    double wait_s;   /* of comm_s: in px_wait on overlapped collectives, s */
    double hidden_s; /* overlapped collectives in flight during compute, s */
    int colls;       /* collectives issued */
    int overlapped;  /* of colls: started nonblocking */
} px_tp_times_t;

/* One nonblocking tensor-parallel collective in flight (at most one per
 * model at a time): started by px_tp_*_start, progressed by px_tp_poke
 * between compute ops, finished by px_tp_finish. Zero-initialise; a
 * pending with req NULL and status PX_OK is idle. Buffers are borrowed
 * until px_tp_finish returns. */
typedef struct px_tp_pending {
    px_request_t *req;  /* NULL: idle, or completed (seen by a poke) */
    px_comm_t *comm;
    const char *what;   /* for the error message; static string */
    size_t n;           /* elements, for the error message */
    double t_start;     /* when start returned, px_time_mono_s */
    double t_done;      /* when a poke saw it complete; 0: not yet */
    double test_s;      /* time inside px_test since start */
    px_status_t status; /* first error seen by a poke (reported by finish) */
    int active;         /* started and not finished */
} px_tp_pending_t;

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

/* Nonblocking forms of px_tp_allreduce / px_tp_reduce_scatter /
 * px_tp_allgather, for the overlap of Megatron's f with the weight-
 * gradient GEMM (Shoeybi et al. 2019, section 3; Korthikanti et al. 2022,
 * section 4.2.2 for the sequence-parallel pair): the collective is queued
 * and returns at once, `p` (idle) becomes active. comm NULL or of one rank:
 * nothing is queued, p still becomes active (finish returns PX_OK). The
 * transport progresses the request only while the caller is inside it:
 * call px_tp_poke between compute ops, then px_tp_finish before the
 * result is read. Errors: the start's (logged; p stays idle). */
px_status_t px_tp_allreduce_start(px_comm_t *comm, float *buf, size_t n, const char *what,
                                  px_tp_times_t *times, px_tp_pending_t *p);
px_status_t px_tp_reduce_scatter_start(px_comm_t *comm, const float *full, float *local,
                                       size_t n, const char *what, px_tp_times_t *times,
                                       px_tp_pending_t *p);
px_status_t px_tp_allgather_start(px_comm_t *comm, const float *local, float *full, size_t n,
                                  const char *what, px_tp_times_t *times, px_tp_pending_t *p);
/* Progresses p's request once without blocking (px_test); an error is kept
 * in p->status for px_tp_finish. Idle or completed p: nothing. */
void px_tp_poke(px_tp_pending_t *p, px_tp_times_t *times);
/* Blocks until p's collective completed (px_wait with the communicator's
 * deadline), adds its times to `times`, and makes p idle. Returns the
 * collective's status (logged with p->what). Idle p: PX_OK. */
px_status_t px_tp_finish(px_tp_pending_t *p, px_tp_times_t *times);

/* A canonical-layout host buffer dst (n floats) in which each tp rank
 * wrote only its own shards and the replicated tensors were written by tp
 * rank 0 only (zeros elsewhere: px_gpt_units_to_canonical): their SUM over
 * the group is the whole model, exactly (one non-zero term per element).
 * Collective over the tensor group; comm NULL or of one rank: nothing. */
px_status_t px_tp_combine_canonical(px_comm_t *comm, float *dst, size_t n);

#endif
