/* observers.h: what watches a training run without being part of it:
 * the dumps tests compare against PyTorch, the test hooks and the
 * end-of-run figures. The program that runs the trainer (rank_main.c)
 * chooses them; the loop (train.c) calls each at four points, every rank
 * alike (a hook that gathers is collective over the world):
 *   on_init   after the assembly and a resume, before the first step
 *             (may set tr->finished: the run ends there with PX_OK)
 *   on_grads  after step s's gradients are reduced, before the update
 *   on_step   after step s's update, checkpoint and evaluation, with its
 *             report
 *   on_end    after the last step
 * Any hook may be NULL. A hook's error ends the run with that status. */
#ifndef PX_OBSERVERS_H
#define PX_OBSERVERS_H

#include "trainer.h"

typedef struct px_train_observer {
    void *arg;
    px_status_t (*on_init)(void *arg, px_trainer_t *tr);
    px_status_t (*on_grads)(void *arg, px_trainer_t *tr, int s, float loss, float norm);
    px_status_t (*on_step)(void *arg, px_trainer_t *tr, const px_step_report_t *rep);
    px_status_t (*on_end)(void *arg, px_trainer_t *tr);
    void (*destroy)(void *arg); /* frees arg (NULL: nothing to free) */
} px_train_observer_t;

/* Trains cfg (collective over `world`, borrowed; NULL: alone) on `device`
 * (px_kernels_select.h; NULL: the CPU), the observers' hooks called in
 * their order (obs borrowed), cb after every step (NULL: none; non-zero
 * stops the run with PX_ERR_ABORTED). router_skew: a test hook (moe.h
 * px_moe_set_router_skew; 0: off). Errors: as px_train_run (px_train.h)
 * and the observers'. */
px_status_t px_train_observed(const px_train_config_t *cfg, px_comm_t *world,
                              const char *device, float router_skew, px_step_cb_t cb,
                              void *arg, const px_train_observer_t *obs, int nobs);

/* The dumps tests compare against PyTorch, into `dir` (borrowed), written by
 * rank 0 only as raw little-endian arrays:
 *   layout.json            config, parameter count and every tensor's
 *                          name, shape, offset (elements) and decay flag
 *   params_init.bin        float32 (num_params) after initialisation
 *   batch_<s>.bin          int32 inputs (B,T) then targets (B,T): the
 *                          GLOBAL batch of step s (1-based)
 *   grads_<s>.bin          float32 (num_params): averaged gradient of step s,
 *                          before clipping
 *   params_<s>.bin         float32 (num_params) after step s's update
 *   loss_<s>.txt           "loss grad_norm lr" of step s (%.9g)
 * with experts (moe.h; the canonical MoE buffer, gathered over the ep
 * group):
 *   moe_layout.json        every MoE tensor's name, layer, offset, shape
 *   moe_params_init.bin, moe_grads_<s>.bin, moe_params_<s>.bin
 *   val_batch_<k>.bin      int32 inputs (B,T) then targets (B,T): validation
 *                          batch k (0-based; with a validation file)
 *   val_loss_<s>.txt       "val_loss" after step s (%.9g), when evaluated
 * for s = 1..steps (every ZeRO stage and tp: gathered to the canonical
 * layout, collective over the world). export_only: layout.json,
 * params_init.bin and batch_1.bin, then the run ends without training.
 * PX_ERR_NO_MEMORY when the observer cannot be made. */
px_status_t px_observer_dump(const char *dir, int steps, int export_only,
                             px_train_observer_t *obs);

/* Test hook: every parameter and gradient set to 1.0, the global grad norm
 * computed once and printed on rank 0 as "norm-ones <norm> params <n>", then
 * the run ends without training (zero.h px_zero_test_norm_ones). */
px_train_observer_t px_observer_norm_ones(void);

/* Test hook: the step reports carry replicated_digest and tied_digest. */
px_train_observer_t px_observer_digests(void);

/* The end-of-run figures on every rank's log: ZeRO's waits and peak state
 * against the plan, the gradient buckets, ring attention's and the tensor
 * group's hidden communication. */
px_train_observer_t px_observer_run_report(void);

#endif
