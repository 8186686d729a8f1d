/* eval.h: the validation loss of the training engine.
 *
 * Every eval_every steps and after the last step (jobcfg.h), the ranks
 * compute the mean cross-entropy over eval_batches FIXED batches of the
 * validation file: validation batch k (0-based) is cut from the validation
 * file exactly as training step k's global batch is cut from the training
 * file (data.h: px_data_batch(val, seed, k, ...)), so the same batches come
 * back at every evaluation and for every layout. Each batch is split over
 * the data-parallel ranks like a training batch (dp rank r takes sequences
 * [r*B/dp, (r+1)*B/dp)), in grad_accum pieces of the model's micro-batch;
 * the ranks of one tensor group compute on the same sequences. Forward
 * only: no gradient is computed and no optimizer state is touched (ZeRO-3
 * gathers each unit for the pass and frees it after). The result is the
 * mean over every token of the K batches, the same on every rank.
 *
 * Context parallelism (cp > 1): each cp rank computes the mean over its
 * load-balanced chunks of each sequence (ring_attn.h), Bm x T/cp tokens,
 * and the sums are all-reduced over dp x cp. Each piece is cut into the
 * runner's M micro-batches (1 without pipelining) and passed forward
 * through the stages (px_pipe_eval_round; one stage without pipelining);
 * the last stage holds the losses, summed over the pp group. Mixture of experts: the experts
 * run forward as in training (same routing and capacity); the
 * load-balancing aux loss is not part of the validation loss (it is a
 * regulariser of the router, as nanoGPT-MoE and Megatron report the LM
 * loss alone). One training thread. */
#ifndef PX_EVAL_H
#define PX_EVAL_H

#include <stdint.h>

#include "data.h"
#include "pipeline.h"
#include "px_status.h"
#include "px_transport.h"

/* Fills this rank's tokens of micro-batch `micro` of piece `round` of
 * validation batch k: inputs and targets (Bm, T/cp), either may be NULL
 * (not needed on this pipeline stage). The cut is the training step's
 * (train.c) with the validation file and step k. */
typedef void (*px_eval_load_fn)(void *arg, int k, int round, int micro, int32_t *inputs,
                                int32_t *targets);

/* What one evaluation needs; everything borrowed. */
typedef struct px_eval {
    px_pipe_t *pipe;         /* the runner (pipeline.h) */
    int M;                   /* the runner's micro-batches per piece */
    px_eval_load_fn load;    /* the batch cut */
    void *load_arg;
    px_comm_t *dp_comm;      /* the dp (x cp) group (NULL: dp x cp = 1) */
    px_comm_t *pp_comm;      /* the pipeline group (NULL or one rank: pp 1) */
    int batches;             /* K, eval_batches */
    int accum;               /* grad_accum A: pieces per batch */
    int dp, cp;              /* the divisor: dp x cp ranks hold equal tokens */
} px_eval_t;

/* The mean validation loss into *loss_p (collective over the dp, pp, tp,
 * cp and ep groups: every rank of the job calls it, with the same K). Errors: the model's and the
 * all-reduce's (timeout, peer failure). */
px_status_t px_eval_loss(const px_eval_t *ev, float *loss_p);

/* Whether to evaluate after 0-based step s of `steps` (every `every`
 * steps, 0: never, and after the last step). */
int px_eval_due(int every, int s, int steps);

#endif
