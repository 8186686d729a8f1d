/* checkpoint.h: sharded training checkpoints and safetensors export.
 *
 * A checkpoint is a directory DIR/step_<N>/:
 *   meta.json      written last by world rank 0 after every shard is on
 *                  disk: a checkpoint without it is incomplete and never
 *                  loaded. {"format": "parallax-zero-3", "step": N,
 *                  "zero": Z, "dp": D, "tp": P, "nshards": K, "layers",
 *                  "heads", "dim", "vocab", "padded_vocab", "max_seq",
 *                  "num_params" (the canonical model's), "unit_sizes":
 *                  [...]} (each tp rank's units as model.h: embedding,
 *                  layers, head; elements, tp-local for P > 1)
 *   shard_tp<t>_<k>.bin  t < P, k < K (K = D for stage >= 1, 1 for stage
 *                  0): written by the rank at tp index t and dp index k;
 *                  for each unit u in order, three float32 arrays of S_u =
 *                  ceil(size_u / D) * D / K elements: parameters, AdamW m,
 *                  AdamW v of slice k of tp rank t's unit u (model.h's
 *                  tp-local layout; padding zeros). The tensors replicated
 *                  over the tensor group are in every tp rank's file
 *                  (equal bitwise); loads read tp rank 0's.
 * "parallax-zero-2" checkpoints (before tensor parallelism: no "tp", files
 * shard_<k>.bin) load as tp 1.
 * Loading re-cuts (as Megatron-LM's distributed checkpoints): any dp, tp
 * and stage may load any checkpoint of the same model dims. Every element
 * a rank holds is mapped to its canonical position (px_model_shard_run)
 * and from there to the tp rank, file and offset that saved it; AdamW is
 * elementwise, so the state moves exactly. Every file is checked (meta,
 * sizes) before any state is touched, and a model mismatch is
 * PX_ERR_INVALID_ARGUMENT naming both values (no partial load). */
#ifndef PX_CHECKPOINT_H
#define PX_CHECKPOINT_H

#include "gpt.h"
#include "moe.h"
#include "px_status.h"
#include "px_transport.h"
#include "zero.h"

/* Collective over `world` (NULL: alone; every rank calls it): writes
 * DIR/step_<step>/ (mkdir -p). z holds this rank's state for gc (gc->tp,
 * gc->tp_rank: its tensor-group coordinate) laid out by plan; the rank's
 * index in dp_comm (NULL: 0) is its ZeRO shard. PX_ERR_IO (logged, with
 * the path) on any file error; PX_ERR_NO_MEMORY. */
px_status_t px_checkpoint_save(const char *dir, int step, px_zero_t *z,
                               const px_gpt_config_t *gc, const px_plan_t *plan, int heads,
                               px_comm_t *dp_comm, px_comm_t *world);

/* Loads the checkpoint directory `path` (a step_<N>/ directory) into z
 * (this rank's slices of tp rank gc->tp_rank's units, whatever the
 * checkpoint's dp, tp and stage); *step_p = N. A checkpoint of a MoE
 * model saved when its MoE layers' units still held the unused dense MLP
 * (fcw fcb fcprojw fcprojb, model.h) loads too, those tensors skipped.
 * Errors: PX_ERR_NOT_FOUND (no meta.json / shard), PX_ERR_INVALID_ARGUMENT
 * (other model, bad meta, short shard), PX_ERR_IO. Every rank reads for
 * itself; no communication. */
px_status_t px_checkpoint_load(const char *path, px_zero_t *z, const px_gpt_config_t *gc,
                               const px_plan_t *plan, int heads, int *step_p);

/* A source of canonical parameters: fills host dst[n] with the elements
 * [c, c + n) of the canonical buffer (px_gpt_tensor_info layout), all of
 * them in canonical tensor `tensor` and one layer's slice of it. Returns
 * PX_OK or an error it logged. */
typedef px_status_t (*px_canonical_read_fn)(void *arg, int tensor, uint64_t c, size_t n,
                                            float *dst);

/* Fills the parameters this rank holds (px_zero_held: the whole units at
 * ZeRO 0-2, its slices at ZeRO 3; its tp rank's shards; its pipeline
 * stage's units) from `read`, through the path px_checkpoint_load takes
 * (each held tensor run mapped to its canonical elements); padding 0.
 * AdamW's moments are left as they are. Every rank reads for itself; no
 * communication. Errors: read's, PX_ERR_NO_MEMORY. */
px_status_t px_checkpoint_fill_params(px_zero_t *z, const px_gpt_config_t *gc,
                                      const px_plan_t *plan, px_canonical_read_fn read,
                                      void *arg);

/* Writes the canonical parameters `params` (px_gpt_tensor_info layout, host
 * memory; wte with all padded_vocab rows, as llm.c's checkpoints: rows from
 * vocab on are the zero padding) as a safetensors file (8-byte little-endian header length, JSON header with
 * dtype F32, shape and data_offsets per tensor, then the data), loadable by
 * safetensors.torch.load_file. Names as px_gpt_tensor_info ("wte", "qkvw"
 * (L, 3C, C) ...). PX_ERR_IO on a file error. */
px_status_t px_safetensors_write(const char *path, const px_gpt_config_t *gc,
                                 const float *params);

/* The same file over the parameter groups (params.h): the dense tensors,
 * then with experts (mc non-NULL) for each MoE layer l in layer order
 * "moe_router.<l>" (E,C), "moe_fcw.<l>" (E,4C,C), "moe_fcb.<l>" (E,4C),
 * "moe_fcprojw.<l>" (E,C,4C), "moe_fcprojb.<l>" (E,C) from the canonical
 * MoE buffer moe_params (moe.h px_moe_num_params floats, HOST memory);
 * one file, data contiguous. The dense fcw..fcprojb of a MoE layer
 * (unused, moe.h) are written as the model holds them. Errors as
 * px_safetensors_write. */
px_status_t px_safetensors_write_groups(const char *path, const px_gpt_config_t *gc,
                                        const float *params, const px_moe_config_t *mc,
                                        const float *moe_params);

#endif
