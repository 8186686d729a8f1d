/* zero.h: the data-parallel state of a GPT under ZeRO stage 0, 1, 2 or 3.
 *
 * Owns the parameters, gradients and AdamW moments of one rank, laid out by
 * plan.h (units padded to a multiple of dp; rank r's shard is its r-th slice
 * of every unit), and feeds them to the model through px_gpt_hooks_t:
 *   0: everything replicated; the flat gradients all-reduced (AVG) in
 *      buckets started during backward (px_zero_set_buckets), else in one
 *      all-reduce after it.
 *   1: AdamW moments sharded; each unit's gradients are reduce-scattered
 *      in place, started as soon as the last micro-batch's backward has
 *      finished the unit (px_zero_set_buckets), each rank updates its slice,
 *      the parameters are all-gathered in place.
 *   2: gradients sharded too: each unit's gradient buffer is reduce-scattered
 *      (nonblocking) as soon as backward has finished it and is freed when
 *      its slice has been added to the gradient shard; at most one buffer
 *      (the head's or a layer's) is in flight while the next layer is
 *      computed; the embedding's is held from the head's backward (tied
 *      wte) to the end of backward.
 *   3: parameters sharded too (FSDP): a unit is all-gathered into a fresh
 *      buffer right before its forward and again before its backward and
 *      freed after; the next unit's gather is started (prefetch) before
 *      waiting for this one, and the model pokes the transport between ops,
 *      so the gather overlaps compute.
 * Gradient accumulation: micro-batch gradients are averaged (1/accum).
 * Clipping: by the global norm over all shards (one all-reduce of sumsq and
 * loss per step over the dp group, then of sumsq over the model-parallel
 * group when it has more than one rank); every rank sees the same norm.
 *
 * Collectives: px_reduce_scatter_start / px_allgather_start (in place, as
 * NCCL), px_test / px_wait / px_request_cancel (px_coll.h); the loss and the
 * norm ride one 2-float px_allreduce per step. One training thread. */
#ifndef PX_ZERO_H
#define PX_ZERO_H

#include <stdint.h>

#include "gpt.h"
#include "px_kernels.h"
#include "plan.h"
#include "px_status.h"
#include "px_transport.h"
#include "optim.h"

typedef struct px_zero px_zero_t;


/* Times of one rank, seconds, since create. */
typedef struct px_zero_times {
    double gather_wait_s;  /* blocked waiting for all-gathers (stage 3) */
    double rs_wait_s;      /* blocked waiting for reduce-scatters */
    double comm_other_s;   /* other collectives (all-reduce, norm, stage 1/2 gathers) */
    double device_wait_s;  /* waiting, before the gradient reduction, for the
                              kernels still queued on a device (the
                              backward's compute, not a collective's: 0 on
                              the CPU) */
    double progress_s;     /* inside the progress hook between kernels: the
                              collectives' own CPU work (shared-memory copies
                              and reductions) done under the compute */
    int gathers;           /* unit gathers issued */
    int deferred_gathers;  /* of them, stage 3 backward gathers started from
                              the progress hook after the reduce-scatter
                              before them ran under the compute (zero.c
                              deferred_gather) */
} px_zero_times_t;

/* `plan` (borrowed for z's life) must be px_plan_create'd for this model's
 * units, comm's size and the stage; comm may be NULL when dp == 1. `ops`
 * (borrowed) is the op table of the model's backend: its memory operations
 * clear and copy the state, its sumsq / scale / adamw_update compute on it.
 * `prefetch` 0 disables stage 3's prefetch (for measuring the overlap).
 * Allocates all state (memacct tagged) and zeroes it. */
px_status_t px_zero_create(const px_gpt_config_t *gc, const px_plan_t *plan, px_comm_t *comm,
                           const px_kernel_ops_t *ops, int accum, int prefetch, px_zero_t **z_p);
void px_zero_destroy(px_zero_t *z); /* NULL no-op; waits nothing: only after a failure-free
                                       step or a comm abort */

/* Data-parallel gradient buckets (stages 0 and 1; as PyTorch DDP's
 * bucket_cap_mb): the units from the head down to layer 0 are grouped into
 * buckets of at least px_zero_bucket_bytes(bucket_mb, gradient bytes)
 * (whole units, contiguous in the flat gradient buffer), and each bucket's
 * all-reduce (AVG) is started as soon as the last micro-batch's backward
 * has released all its units, so it runs (through the progress hook)
 * while backward computes the layers below; px_zero_reduce then starts the
 * embedding's (finished last) and the loss's and waits for all. Stage 1
 * does the same with each unit's reduce-scatter (one unit per bucket,
 * the embedding's included). Only for a whole-model backward (no
 * pipeline: each unit released once per micro-batch) with dp > 1 and no
 * tied copy; otherwise (and without this call) the collectives run after
 * backward. Call after px_zero_set_tied. PX_ERR_NO_MEMORY. */
px_status_t px_zero_set_buckets(px_zero_t *z, double bucket_mb);
/* Number of buckets in use (0: off). */
int px_zero_nbuckets(const px_zero_t *z);
/* Bucket all-reduces started during backward (from the grads_release
 * hook, not by px_zero_reduce), summed over all steps so far. */
long px_zero_buckets_early(const px_zero_t *z);
/* Bucket bytes for `bucket_mb` MiB (> 0), or by default (0) PyTorch DDP's
 * bucket_cap_mb (25 MiB) spread evenly: grad_bytes / ceil(grad_bytes /
 * 25 MiB), so a model of up to 25 MiB of gradients gets one bucket and a
 * larger one the fewest buckets DDP's cap allows, none of them a small
 * remainder. Why not smaller: on CPU ranks the all-reduce's copies run on
 * the cores backward computes on (overlap hides little), while each bucket
 * adds a collective and its blocking wake-ups; tests/bench/bench_ddp.py
 * measured one bucket ahead of a quarter of the gradients (3 buckets) on
 * both of its models. */
uint64_t px_zero_bucket_bytes(double bucket_mb, uint64_t grad_bytes);

/* The model-parallel group (layout.h PX_GROUP_MP: the ranks that together
 * hold one copy of the model; borrowed for z's life; NULL or a group of one:
 * none). px_zero_reduce sums the squared gradient norm over it after the
 * dp reduction, so the norm is global. Each parameter is counted once
 * there: a tensor split by tensor parallelism (the model config's tp > 1,
 * model.h) adds its shard's squares on each tp rank, a tensor replicated
 * over the tp group adds its squares on tp rank 0 only. */
void px_zero_set_model_group(px_zero_t *z, px_comm_t *mp);

/* Pipeline parallelism (pipeline.h): unit u (the embedding, 0) has a copy
 * on another rank of the model-parallel group (the first and the last
 * stage, whose gradients the pipeline sums before px_zero_reduce). Both
 * reduce it over dp by the same collective of its own (stage 0: its own
 * all-reduce; stages 1-3 reduce every unit on its own anyway), so the
 * copies take bitwise-equal updates. is_copy (the last stage): it is left
 * out of the grad norm (counted once, on the first stage) and written as
 * zeros into canonical gathers (px_tp_combine_canonical over the group
 * then counts it once). u = -1: none (the default). Units of size 0 in the
 * plan (held by other stages) are always left out of canonical gathers. */
void px_zero_set_tied(px_zero_t *z, int u, int is_copy);

/* The accumulated (not yet reduced or averaged) gradients of unit u,
 * stages 0 and 1 only (else NULL): backend memory of *count_p elements
 * (the padded unit), borrowed; for the pipeline's tied-embedding sum
 * between px_zero_end_micro and px_zero_reduce. */
float *px_zero_unit_grads(px_zero_t *z, int u, uint64_t *count_p);

/* The kernel table z was created with (borrowed): its memory ops move the
 * state's bytes, wherever the backend keeps them. */
const px_kernel_ops_t *px_zero_ops(const px_zero_t *z);

/* The hooks for px_gpt_create_external (arg = z). */
const px_gpt_hooks_t *px_zero_hooks(px_zero_t *z);

/* Initialise this rank's parameters (its shard, or all) from the seed. */
void px_zero_init_params(px_zero_t *z, uint64_t seed);

/* Before the first micro-batch of a step: zero the gradients. */
void px_zero_begin_step(px_zero_t *z);
/* After each micro-batch's backward: completes its in-flight
 * reduce-scatters (stages 2/3). */
px_status_t px_zero_end_micro(px_zero_t *z);
/* After the last micro-batch: reduces the gradients (stages 0/1), averages
 * the accumulation, and computes the global loss (mean of `local_loss`, the
 * rank's mean loss over its micro-batches) and the global gradient L2 norm
 * before clipping. Same values on every rank. */
px_status_t px_zero_reduce(px_zero_t *z, float local_loss, float *loss_p, float *norm_p);
/* AdamW (optim.h) on this rank's slice (decay on matrices only) with the
 * gradients scaled by coef (px_adamw_clip_coef); the scale is applied
 * inside the update's pass, so the gradient buffers keep their unclipped
 * values; stages 1/2 all-gather the parameters. more: 1 when a training
 * step follows; stage 3 with prefetch then starts its first forward
 * gathers (the embedding's and the first layer's) inside the update, as
 * soon as their slices are updated, so they run under the rest of it; 0
 * (the last step): none left in flight. */
px_status_t px_zero_update(px_zero_t *z, float coef, const px_adamw_t *hp, int more);

/* Full parameters in canonical layout into HOST memory dst[num_params]
 * (collective for stage 3: every rank must call it; the result is on every
 * rank). */
px_status_t px_zero_gather_canonical(px_zero_t *z, float *dst);
/* Full averaged gradients of the last reduce (before clipping) in
 * canonical layout into HOST memory dst[num_params]: the full buffer at
 * stage 0, every dp rank's slices all-gathered at stages 1-3 (collective
 * over the dp group then: every rank must call it, after px_zero_reduce
 * and before px_zero_update). With tp > 1 dst holds this tp rank's pieces
 * only (px_gpt_units_to_canonical; tp.h's px_tp_combine_canonical
 * completes it). */
px_status_t px_zero_gather_grads_canonical(px_zero_t *z, float *dst);

/* Test hook for the norm's accounting: sets every real parameter and
 * gradient element this rank holds to 1.0 (ZeRO padding stays 0) and runs
 * px_zero_reduce's norm (collective as it is). With every parameter
 * counted once the global norm is exactly sqrt(number of parameters of
 * the canonical model). Destroys the state: train nothing after it. */
px_status_t px_zero_test_norm_ones(px_zero_t *z, float *norm_p);

/* FNV-1a digest of the bytes of this rank's parameters of the tensors
 * replicated over the tensor group (LayerNorms, wpe, row-parallel biases;
 * the elements of them this rank holds under ZeRO). Tensor ranks with the
 * same dp index must agree after every step (tp.h). */
uint64_t px_zero_replicated_digest(px_zero_t *z);

/* FNV-1a digest of the bytes of the parameters of unit u this rank holds
 * (the whole unit at stages 0-2, the slice at stage 3): the pipeline's two
 * copies of the tied embedding must agree after every step. */
uint64_t px_zero_unit_digest(px_zero_t *z, int u);

/* Full averaged gradients of the last reduce (stage 0 only; else NULL). */
const float *px_zero_full_grads(px_zero_t *z);

/* This rank's slice of unit u: parameters, AdamW m, v (padded slice of
 * plan->unit_padded[u]/nshards elements; nshards = dp for stage >= 1, 1 for
 * stage 0, where every rank holds the whole unit). For checkpoints. */
int px_zero_nshards(const px_zero_t *z);
float *px_zero_slice(px_zero_t *z, int which /* 0 params 1 m 2 v */, int u);
/* The elements of unit u this rank holds of `which` (0 params, 1 m, 2 v):
 * returns a pointer to element *begin_p of the unit and *count_p elements
 * (the whole padded unit where it is replicated). For checkpoint loads. */
float *px_zero_held(px_zero_t *z, int which, int u, uint64_t *begin_p, uint64_t *count_p);
/* After parameters were written into the slices (checkpoint load), makes
 * the replicated copies consistent (stages 1/2: all-gather). */
px_status_t px_zero_sync_params(px_zero_t *z);

void px_zero_times(const px_zero_t *z, px_zero_times_t *out);

#endif
