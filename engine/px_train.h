/* px_train.h: the training engine's entry point, as the rank process calls it.
 *
 * One call trains a GPT for cfg->steps steps on the WORLD communicator,
 * cut into process groups by cfg->layout (groups.h). With `world` NULL (or
 * of size 1) it trains alone. Today the engine runs data parallelism,
 * ZeRO and tensor parallelism (tp.h: the tp ranks of one dp index see the
 * same batch and each holds its shards of the model, ZeRO cuts each tp
 * rank's own units over the dp group): the layout's dp group is the
 * data-parallel communicator: dp rank r
 * takes sequences [r*B/dp, (r+1)*B/dp) of each global batch of B sequences,
 * gradients are averaged over the dp group, the loss reported is the mean
 * over the global batch, and the grad norm is the global one (summed over
 * the dp shards, then over the model-parallel group), so every layout
 * reports the same figures as one rank (ARCHITECTURE.md §4). */
#ifndef PX_TRAIN_H
#define PX_TRAIN_H

#include <stdint.h>

#include "jobcfg.h"
#include "px_status.h"
#include "px_transport.h"

/* The engine trains the job's configuration as the planner defines it
 * (jobcfg.h: one set of defaults, px_job_config_defaults, and one
 * validator, px_job_config_check, shared with pctl and parallaxd). */
typedef px_job_config_t px_train_config_t;

/* The layout cfg runs with on `world` ranks into *layout_p: cfg->layout, or
 * dp = world when it is all zeros. PX_ERR_INVALID_ARGUMENT with a message
 * naming the values when it fails px_layout_check, needs another number of
 * ranks than `world` (the combinations the engine cannot run yet are the
 * validator's, jobcfg.h). */
px_status_t px_train_layout(const px_train_config_t *cfg, int world, px_layout_t *layout_p,
                            char *errbuf, size_t errlen);

#include "plan.h"

/* The paths one of the rank's communicators took (px_comm_paths): the
 * world or a group of the layout of more than one rank. */
typedef struct px_comm_path_report {
    const char *comm; /* "world", or the group's kind (px_group_name: "dp",
                         "tp", "pp", "cp", "ep", "edp", "dpcp", "mp");
                         static */
    int size;         /* the communicator's ranks */
    char host[32];    /* collectives on host buffers: "shm", "ucx", both
                         comma-separated, or "" (none yet) */
    char device[32];  /* on device buffers: "nccl", "ipc", "stage", "ucx" */
} px_comm_path_report_t;

/* One finished step's figures (identical on every rank, except the memory
 * figures, which are this rank's). */
typedef struct px_step_report {
    int step;                  /* 1-based */
    float loss;
    float grad_norm;           /* global, before clipping */
    float lr;
    double tokens_per_second;  /* global tokens / step wall time */
    double elapsed_s;
    int rank;
    uint64_t mem_current[PX_MEM_NCAT]; /* bytes, memacct.h */
    uint64_t mem_peak[PX_MEM_NCAT];
    uint64_t mem_state_peak;           /* params + grads + optimizer at once */
    double mem_plan[PX_MEM_NCAT];      /* plan.h prediction (state categories) */
    double mem_plan_state_peak;        /* plan.h prediction of mem_state_peak */
    uint64_t mem_device_used;          /* the device's memory in use
                                          and its size (cudaMemGetInfo), bytes;
                                          0 / 0 on a CPU rank (memacct.h) */
    uint64_t mem_device_total;
    uint64_t replicated_digest;        /* px_zero_replicated_digest after the
                                          update: equal on the tensor ranks
                                          of one dp index */
    double tp_comm_s;                  /* this rank's time in tensor-parallel
                                          collectives since the start, s */
    double tp_wait_s;                  /* of tp_comm_s: waiting for overlapped
                                          collectives (tp.h), s */
    double tp_hidden_s;                /* overlapped collectives in flight while
                                          the rank computed, since the start,
                                          s: tp communication time is
                                          tp_comm_s + tp_hidden_s */
    double step_s;                     /* this step's wall time, s */
    int pp, pp_stage;                  /* pipeline stages, this rank's stage */
    double pp_busy_s, pp_idle_s;       /* this step on this stage (pp > 1):
                                          computing, and waiting for a
                                          neighbour stage (the bubble), s */
    uint64_t tied_digest;              /* px_zero_unit_digest of the embedding
                                          (wte, wpe) after the update, on the
                                          first and last stage (pp > 1; else
                                          0): the two copies must agree */
    int experts;                       /* the MoE's experts (0: dense) */
    const uint64_t *moe_received;      /* (experts) choices each expert took
                                          in this step, summed over the MoE
                                          layers and micro-batches: this
                                          rank's ep group's figures; borrowed
                                          for the callback; NULL when dense */
    const uint64_t *moe_dropped;       /* (experts) choices dropped at each
                                          expert's capacity, likewise */
    double moe_alltoall_s;             /* this step's time in the dispatch /
                                          combine all-to-alls, s */
    int n_comm_paths;                  /* entries of comm_paths */
    const px_comm_path_report_t *comm_paths; /* the world's and each group's
                                          paths so far (borrowed for the
                                          callback); none alone */
    float val_loss;                    /* the validation loss after
                                          this step (eval.h), 0 when the step
                                          was not followed by an evaluation */
} px_step_report_t;

/* Called after every step on every rank. Return non-zero to stop training
 * (the run then returns PX_ERR_ABORTED). */
typedef int (*px_step_cb_t)(void *arg, const px_step_report_t *report);

/* Trains (collective over `world`, which may be NULL: alone). The groups of
 * cfg->layout are split from `world` inside and destroyed before return;
 * `world` is borrowed. Errors: the config's (px_train_config_check), the
 * collectives' (timeout, peer failure, abort), PX_ERR_ABORTED when cb asked
 * to stop, PX_ERR_IO / PX_ERR_NO_MEMORY. */
px_status_t px_train_run(const px_train_config_t *cfg, px_comm_t *world, px_step_cb_t cb,
                         void *arg);

/* The warm-up steps: cfg->warmup_steps, or steps / 20 when it is negative
 * (the default). */
int px_train_warmup(const px_train_config_t *cfg);

/* Learning rate of 0-based step `step`: linear warm-up lr*(step+1)/warmup
 * over the warm-up steps, then cosine from lr down to lr*min_lr_ratio at
 * step `steps` (llm.c / nanoGPT schedule). */
float px_train_lr(const px_train_config_t *cfg, int step);

#endif
