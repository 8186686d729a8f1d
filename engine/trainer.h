/* trainer.h: the trainer's parts, assembled once per run (trainer.c), and
 * the steps the training loop (train.c) takes with them.
 *
 * px_trainer_create reads the job's configuration and builds what its
 * layout needs: the device's op table, the process groups split from the
 * world, the data, the memory plan, the trainable state's groups
 * (params.h: ZeRO's sharded dense units, zero.h, and the routers and
 * experts, experts.h), the runner of this stage's model (pipeline.h;
 * without pipelining the one stage is the whole model), the mixture of
 * experts' routing (moe.h), the batch buffers and the evaluation; it
 * resumes from a checkpoint where the configuration says so. The loop then
 * calls px_trainer_grads, px_trainer_update, px_trainer_checkpoint and
 * px_trainer_report once a step; observers (px_train_observer_t) read the
 * parts between them. Every call is collective over the world, on the
 * rank's one training thread. */
#ifndef PX_TRAINER_H
#define PX_TRAINER_H

#include <stddef.h>
#include <stdint.h>

#include "eval.h"
#include "gpt.h"
#include "groups.h"
#include "experts.h"
#include "moe.h"
#include "params.h"
#include "pipeline.h"
#include "px_kernels.h"
#include "px_train.h"
#include "zero.h"

/* A micro-batch's cut of a step's global batch: round r of step `step`,
 * micro m is micro-batch j = r*M + m of the A*M of the step; dp rank d takes
 * its d-th part of it (the same cut as grad_accum alone with A*M). */
typedef struct px_batch_cut {
    const px_data_t *data;
    const px_kernel_ops_t *ops; /* the batch buffers are this backend's */
    int32_t *host;              /* ops not the CPU table: (2, Bm, T) host tokens, cut
                                   here and then copied to the device */
    uint64_t seed;
    int step, round, M, per_micro, dp_rank, Bm, T;
    int cp, cp_rank;          /* context parallelism: the rank computes its
                                 chunks of each sequence (ring_attn.h) */
    int32_t *seq_in, *seq_tg; /* cp > 1: (Bm, T) whole sequences, host memory */
} px_batch_cut_t;

/* The assembled parts. Plain data: the loop and observers read the
 * fields; px_trainer_destroy frees what px_trainer_create made. */
typedef struct px_trainer {
    const px_train_config_t *cfg; /* borrowed */
    px_comm_t *world;             /* borrowed; NULL: alone */
    const px_kernel_ops_t *ops;   /* the device's op table: every tensor lives
                                     in its memory */
    const px_kernel_ops_t *mops;  /* the model's view of ops (precision) */
    px_layout_t layout;
    px_groups_t *groups;
    px_comm_t *dp_comm;    /* data parallelism and ZeRO: dp, or dp x cp */
    px_comm_t *canon_comm; /* completes canonical gathers: the model-parallel
                              group (tp x pp) */
    int rank, dp, dp_rank, cp, cp_rank, pp, stage, last_stage;
    int M;  /* micro-batches per pipeline round (1 without a pipeline) */
    int V;  /* model chunks per pipeline stage (interleaved) */
    int A;  /* grad_accum rounds per step */
    int T;  /* the sequence, tokens */
    int Tl; /* this rank's tokens of a sequence (T / cp) */
    int Bm; /* sequences per micro-batch on this rank */
    px_gpt_config_t gc;
    px_moe_config_t mc;
    px_data_t *data, *val; /* val NULL without a validation file */
    int *stage_layers;     /* (pp x V) layers per virtual stage */
    unsigned char *held_layers; /* (layers) 1 where this stage holds it */
    px_plan_t *plan;
    px_zero_t *zero;
    px_pipe_t *pipe; /* the runner of this stage's model (every layout) */
    px_experts_t *experts; /* the routers and experts; NULL when dense */
    px_moe_t *moe;   /* their routing; NULL when dense */
    px_params_t params; /* the trainable state's groups: zero and experts */
    int32_t *seq_in, *seq_tg;  /* cp > 1: (Bm, T) host sequences */
    int32_t *host_tokens;      /* device backends: (2, Bm, T) host staging */
    size_t n;                  /* parameters of the canonical (whole) model */
    size_t act_bytes;          /* activation buffers, bytes */
    uint64_t plan_act_bytes;   /* what the plan (jobplan.h) says they take, bytes */
    int start_step;            /* 0, or the checkpoint's step on resume */
    int eval_every;
    px_batch_cut_t val_cut;    /* the validation file's cut */
    px_eval_t ev;
    double t_start;            /* px_time_mono_s at the first step */
    double moe_a2a_prev;       /* px_moe_alltoall_s at the last report */
    px_comm_path_report_t comm_paths[PX_GROUP_NKINDS + 1]; /* the step
                                  report's (px_trainer_report) */
    int finished;              /* set by an observer's on_init: return
                                  PX_OK without training */
    int digests;               /* fill the step report's replicated_digest
                                  and tied_digest (a full pass over the
                                  replicated parameters a step; set by an
                                  observer that wants them) */
} px_trainer_t;

/* Assembles the parts cfg's layout needs on `world` (borrowed, NULL:
 * alone) on `device` (px_kernels_select.h; NULL: the CPU) into *tr_p, and
 * resumes from cfg->resume_dir where set. router_skew: a test hook (moe.h
 * px_moe_set_router_skew; 0: off). Errors: the configuration's
 * (PX_ERR_INVALID_ARGUMENT, logged naming the value), the collectives',
 * PX_ERR_IO, PX_ERR_NO_MEMORY; nothing is left allocated then. */
px_status_t px_trainer_create(const px_train_config_t *cfg, px_comm_t *world,
                              const char *device, float router_skew, px_trainer_t **tr_p);

/* Frees every part (NULL: no-op). */
void px_trainer_destroy(px_trainer_t *tr);

/* Step s (0-based): forward and backward over the step's micro-batches,
 * the gradients reduced (px_zero_reduce) and the global grad norm
 * (*norm_p, before clipping, routers and experts included) and mean loss
 * (*loss_p, the load-balancing losses included) completed over the world.
 * Errors: the collectives', a device kernel's, PX_ERR_INTERNAL for a loss
 * that is not finite; each logged with the step. */
px_status_t px_trainer_grads(px_trainer_t *tr, int s, float *loss_p, float *norm_p);

/* AdamW (learning rate lr) on this rank's shards, the routers and experts,
 * after clipping to cfg->grad_clip by `norm`; the replicated parameters
 * re-gathered where ZeRO keeps them whole. */
px_status_t px_trainer_update(px_trainer_t *tr, int s, float norm, float lr);

/* Writes the checkpoint of step s where cfg->checkpoint_every says so (and
 * after the last step). */
px_status_t px_trainer_checkpoint(px_trainer_t *tr, int s);

/* Fills *rep with step s's figures (t0, t1: the step's start and end,
 * px_time_mono_s) and, with experts, the ep group's token counts into
 * moe_counts (2 x experts; the report borrows it). */
px_status_t px_trainer_report(px_trainer_t *tr, int s, float loss, float norm, float lr,
                              double t0, double t1, uint64_t *moe_counts,
                              px_step_report_t *rep);

/* The batch cut's loader (pipeline.h's px_pipe_load_fn): micro m of the
 * cut's step and round into inputs and targets (either may be NULL). */
void px_batch_cut_load(void *arg, int m, int32_t *inputs, int32_t *targets);

#endif
