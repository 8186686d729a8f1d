/* pipeline.h: the GPT engine's runner: one stage of a pipeline, or the
 * whole model as the one stage of a layout without pipelining (pp 1: the
 * one-stage list of pipesched.h, forward then backward of each micro-batch,
 * one slot, no messages), so every layout runs through it.
 *
 * The layers are split over the pp stages (pipesched.h,
 * px_pipe_stage_layers: 6 on 4 is 2/2/1/1); stage s holds units 1+l for
 * its layers l in [l0, l1), the first stage also the embedding (unit 0),
 * the last the final LayerNorm (the head unit) and a copy of unit 0 for
 * the tied LM head. The runner executes this stage's action list of a
 * schedule (pipesched.h) for one round of M micro-batches: the forward
 * and backward of a micro-batch through the stage's units (gpt.h blocks),
 * the activation (R,C) sent to the next stage and its gradient sent back
 * with nonblocking tagged send/receive on the pp communicator (tags carry
 * a round counter, the direction and the micro-batch), so a send runs
 * while the next micro-batch computes; every wait has the communicator's
 * deadline (a misconfigured or dead peer surfaces as an error, never a
 * hang). Each micro-batch in flight has an activation slot: a model
 * without parameter storage (px_gpt_create_external) over the same ZeRO
 * hooks, so the slots share the stage's parameters and gradients.
 *
 * Interleaved 1F1B (pipesched.h): stage s holds V model chunks, chunk c
 * being virtual stage j = c*p + s with the layers sl[j] of the pV-entry
 * split (layers / pV each); the embedding is on chunk 0 of stage 0, the
 * final LayerNorm and the tied head on chunk V-1 of stage p-1. Each chunk
 * has its own slots (px_pipe_schedule_chunk_slots) and requests; chunk
 * c's messages go to stage s+1 / come from stage s-1 (mod p), their tags
 * carry the chunk. V = 1 is every other schedule: one chunk, the stage.
 *
 * Gradients accumulate over the micro-batches (the ZeRO state averages by
 * its accum); px_pipe_tied_sum then sums the two copies of the tied
 * embedding's gradients, first stage + last stage, so both copies take the
 * same update and stay bitwise equal (IEEE addition commutes).
 *
 * Sources: Huang et al. 2019 (GPipe); Narayanan et al. 2021 (1F1B,
 * Megatron-LM's tied embedding across the first and last stage).
 * One training thread. */
#ifndef PX_PIPELINE_H
#define PX_PIPELINE_H

#include <stdint.h>

#include "gpt.h"
#include "groups.h"
#include "pipesched.h"
#include "px_status.h"
#include "zero.h"

typedef struct px_pipe px_pipe_t;

/* Fills one micro-batch: inputs and targets (Bm,T) of micro-batch `micro`
 * of the current round (either may be NULL: not needed on this stage). */
typedef void (*px_pipe_load_fn)(void *arg, int micro, int32_t *inputs, int32_t *targets);

/* Builds the runner of this rank's stage (the pp group's rank in
 * `groups`, borrowed) for schedule `kind` over M micro-batches of (Bm,T)
 * sequences with V chunks per stage (1 unless interleaved), layers per
 * virtual stage sl[pp * V] (read during the call). `zero` (borrowed) holds
 * the stage's units and gives their hooks; `gc`, `ops` as for
 * px_gpt_create_external. Allocates the schedule's slots for each chunk
 * (px_pipe_schedule_chunk_slots: GPipe M, 1F1B at most pp - s). With pp 1
 * (V 1) the stage is the whole model and runs the one-stage list
 * (px_pipe_schedule_create_single, one slot) whatever `kind`; the pp group
 * may then be NULL (a rank alone). Errors:
 * PX_ERR_INVALID_ARGUMENT (logged: a schedule that cannot be built, M x V
 * past the tags' 2^18), PX_ERR_NO_MEMORY. */
px_status_t px_pipe_create(const px_gpt_config_t *gc, const px_kernel_ops_t *ops, px_zero_t *zero,
                           px_groups_t *groups, int kind, int M, int V, const int *sl, int Bm,
                           int T, px_pipe_t **pipe_p);
void px_pipe_destroy(px_pipe_t *pipe); /* NULL no-op; cancels requests in flight */

/* Runs one round (M micro-batches) of the schedule: `load` is called for
 * each micro-batch on the stages that read data (inputs on the first,
 * targets on the last). *loss_sum_p = the sum of the micro-batches' mean
 * losses on the last stage, 0 elsewhere. Gradients are ADDED into the
 * ZeRO state. Errors: the transport's (timeout, peer failure, mismatch:
 * logged naming the peer and the micro-batch), the model's. */
px_status_t px_pipe_round(px_pipe_t *pipe, px_pipe_load_fn load, void *arg, float *loss_sum_p);

/* A forward-only round (the validation loss, eval.h): the M micro-batches
 * of `load` pass through the virtual stages one after the other (each
 * chunk's slot 0; a blocking receive and send per boundary, every wait
 * with the communicator's deadline), no gradient computed or touched.
 * *loss_sum_p = the sum of the micro-batches' mean losses on the last
 * stage, 0 elsewhere. Call between steps. Errors: as px_pipe_round. */
px_status_t px_pipe_eval_round(px_pipe_t *pipe, px_pipe_load_fn load, void *arg,
                               float *loss_sum_p);

/* This rank's share of a step's mean loss from the sum of its `rounds`
 * rounds' loss sums (px_pipe_round): on the last stage their mean over the
 * rounds x M micro-batches, 0 elsewhere; with experts over several stages
 * plus this stage's load-balancing losses of the step (moe.h
 * px_moe_aux_loss_step / (rounds x M); the pp group sums the stages'
 * shares). A stage that is the whole model counts each micro-batch's
 * load-balancing losses in its loss instead (the float sums of a model's
 * objective, loss + aux, micro-batch by micro-batch). */
float px_pipe_step_loss(const px_pipe_t *pipe, float loss_sum, int rounds);

/* After the last round of a step, before px_zero_reduce: the first and
 * the last stage exchange the accumulated gradients of the embedding unit
 * and each sets them to their sum (pp > 1; a no-op on the other stages).
 * Errors: the transport's. */
px_status_t px_pipe_tied_sum(px_pipe_t *pipe);

/* Busy (computing) and idle (waiting for a neighbour) seconds of this
 * stage since the last call; resets them. */
void px_pipe_take_times(px_pipe_t *pipe, double *busy_s_p, double *idle_s_p);

/* Ring attention's transfer times (cp > 1) summed over the stage's chunks
 * and micro-batch slots (ring_attn.h; zeros when cp is 1). */
void px_pipe_ring_times(const px_pipe_t *pipe, px_ring_times_t *out);

/* Tensor parallelism's collective times (tp.h) summed over the stage's
 * chunks and micro-batch slots, since the runner was created. */
void px_pipe_tp_times(const px_pipe_t *pipe, px_tp_times_t *out);

/* Activation bytes this stage holds (the sum over its chunks of slots x
 * one chunk model's activations). */
size_t px_pipe_activation_bytes(const px_pipe_t *pipe);

/* The most slots one chunk holds (the MoE state's slots per layer). */
int px_pipe_chunk_slots_max(const px_pipe_t *pipe);

/* The mixture of experts of this stage's MoE layers (moe.h, created with
 * px_moe_create_stage for the stage's layers and px_pipe_chunk_slots_max
 * slots; borrowed): slot k of every chunk uses the moe's activation slot
 * k, so each micro-batch in flight keeps its routing and expert
 * activations until its backward. Errors: px_gpt_set_moe_slot's (the
 * split backward, tp > 1). */
struct px_moe;
px_status_t px_pipe_set_moe(px_pipe_t *pipe, struct px_moe *moe);

int px_pipe_stage(const px_pipe_t *pipe);
int px_pipe_slots(const px_pipe_t *pipe); /* summed over the chunks */

#endif
