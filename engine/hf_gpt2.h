/* hf_gpt2.h: Hugging Face GPT-2 weights in and out of the engine.
 *
 * In: the parameters start from a `transformers` GPT-2 checkpoint
 * (planner/hfgpt2.h: the names, the Conv1D transposes, the tied head)
 * instead of the seed's values, in any layout: each rank maps the
 * safetensors file and reads only the elements it holds, through the path
 * a checkpoint resume takes (checkpoint.h px_checkpoint_fill_params). The
 * wte rows past the checkpoint's vocab (the padding to the padded vocab)
 * are 0, as the engine's own initialisation leaves them. A model with
 * experts starts each expert as its layer's dense MLP (sparse upcycling).
 * Out: config.json (GPT2Config's keys, with jansson) and model.safetensors
 * (GPT2LMHeadModel's own names and layout: "transformer." prefix, Conv1D
 * weights (in, out), wte's first vocab rows, no lm_head: tied) in one
 * directory, which GPT2LMHeadModel.from_pretrained loads.
 * Runs on the training thread. */
#ifndef PX_HF_GPT2_H
#define PX_HF_GPT2_H

#include "gpt.h"
#include "experts.h"
#include "px_status.h"
#include "trainer.h"
#include "zero.h"

/* Fills this rank's parameters (z, laid out by plan for gc's tp rank) from
 * the checkpoint at `path` (a directory or a .safetensors file), checked
 * against gc and heads first (nothing is touched on a mismatch); with ex
 * (NULL: dense) every expert of a MoE layer gets that layer's MLP, the
 * routers keep their seeded values (Komatsuzaki et al. 2022's sparse
 * upcycling). AdamW's moments stay as they are (zero at the start).
 * Errors (logged, naming the file and the value): PX_ERR_NOT_FOUND,
 * PX_ERR_INVALID_ARGUMENT (not a GPT-2 of these dims; an lm_head.weight
 * that is not wte: an untied head), PX_ERR_IO, PX_ERR_NO_MEMORY, the ep
 * group's. Collective over the experts' ep group when there is one (every
 * rank calls it), else no communication. */
px_status_t px_hf_gpt2_load(const char *path, px_zero_t *z, const px_gpt_config_t *gc,
                            const px_plan_t *plan, int heads, px_experts_t *ex);

/* Reads the whole model from the checkpoint at `path` (as
 * px_hf_gpt2_load: a directory or a .safetensors file, checked against gc
 * and heads, the head tied) into `canon` (host, px_model_num_params(gc)
 * floats, the gpt.h px_gpt_tensor_info layout; the wte padding rows 0):
 * what sampling reads. Same errors, logged; no communication. */
px_status_t px_hf_gpt2_read_canonical(const char *path, const px_gpt_config_t *gc, int heads,
                                      float *canon);

/* Writes dir/config.json and dir/model.safetensors (dir made if missing;
 * each file written to .tmp and renamed) from the canonical parameters
 * `canon` (px_gpt_tensor_info layout, host memory). PX_ERR_IO (logged,
 * with the path), PX_ERR_NO_MEMORY. */
px_status_t px_hf_gpt2_write(const char *dir, const px_gpt_config_t *gc, int heads,
                             const float *canon);

/* Writes tr->cfg->export_hf (rank 0) from the gathered canonical
 * parameters. Collective over the world, as px_trainer_export. */
px_status_t px_hf_gpt2_export(px_trainer_t *tr);

#endif
