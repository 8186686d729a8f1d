/* eval.h: the validation loss of the training engine (issue 14).
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
 * Pipeline and context parallel layouts (pp, cp > 1) and MoE models are
 * rejected by the validator (jobcfg.c). One training thread. */
#ifndef PX_EVAL_H
#define PX_EVAL_H

#include <stdint.h>

#include "data.h"
#include "gpt.h"
#include "px_status.h"
#include "px_transport.h"

/* What one evaluation needs; everything borrowed. */
typedef struct px_eval {
    px_gpt_t *gpt;           /* the model (its local batch is Bm x T) */
    const px_gpt_ctx_t *ctx; /* the model's context (the tensor group) */
    const px_data_t *val;    /* the validation tokens */
    px_comm_t *dp_comm;      /* the data-parallel group (NULL: dp 1) */
    uint64_t seed;           /* the job's seed: which sequences batch k holds */
    int batches;             /* K, eval_batches */
    int batch, accum;        /* global batch B in sequences, grad_accum A */
    int dp, dp_rank, Bm, T;  /* Bm = B / (dp x A) sequences per piece */
    int32_t *inputs, *targets; /* (Bm, T) scratch, as the training loop's */
} px_eval_t;

/* The mean validation loss into *loss_p (collective over dp_comm: every dp
 * rank must call it, with the same K). Errors: the model's and the
 * all-reduce's (timeout, peer failure). */
px_status_t px_eval_loss(const px_eval_t *ev, float *loss_p);

/* Whether to evaluate after 0-based step s of `steps` (every `every`
 * steps, 0: never, and after the last step). */
int px_eval_due(int every, int s, int steps);

#endif
