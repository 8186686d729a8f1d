/* moe_checkpoint.h: the mixture of experts' part of a training checkpoint
 * (checkpoint.h holds the dense model's ZeRO shards).
 *
 * In the checkpoint's step directory DIR/step_<N>/, beside meta.json and
 * the shards:
 *   moe.json  {"format": "parallax-moe-1", "layers", "dim", "experts",
 *             "moe_every", "num_params"} (num_params: px_moe_num_params,
 *             the canonical MoE buffer's elements, moe.h)
 *   moe.bin   three float32 arrays of num_params elements, canonical
 *             order (moe.h: per MoE layer router (E,C), fcw (E,4C,C), fcb
 *             (E,4C), fcprojw (E,C,4C), fcprojb (E,C)): parameters, AdamW
 *             m, AdamW v.
 * Both are written (to .tmp, fsynced, renamed) by world rank 0 before
 * px_checkpoint_save, whose meta.json is written last: a step directory
 * with meta.json has its MoE files. Canonical order makes the load a
 * re-cut: any ep, dp, cp, tp and pipeline split loads any checkpoint of
 * the same model (AdamW is elementwise, so the state moves exactly). The
 * checkpoint's routing settings (top_k, capacity) are the job's, not the
 * checkpoint's: they are not state. */
#ifndef PX_MOE_CHECKPOINT_H
#define PX_MOE_CHECKPOINT_H

#include "gpt.h"
#include "experts.h"
#include "moe.h"
#include "px_status.h"
#include "px_transport.h"

/* Collective over the moe's ep group and `pp` (the pipeline group; NULL:
 * one stage): gathers the canonical parameters and moments; the rank with
 * `writer` != 0 (world rank 0) writes DIR/step_<step>/moe.json and moe.bin
 * (creating the directories). Errors: the collectives', PX_ERR_IO (logged
 * with the path), PX_ERR_NO_MEMORY. */
px_status_t px_moe_checkpoint_save(const char *dir, int step, px_experts_t *ex, px_comm_t *pp,
                                   int writer);

/* Loads `path` (a step_<N>/ directory)'s MoE files into this rank's
 * routers, experts and moments. Errors: PX_ERR_NOT_FOUND (no moe.json:
 * a checkpoint of a dense model, named), PX_ERR_INVALID_ARGUMENT (another
 * model: the mismatched value and both sides named; a short moe.bin),
 * PX_ERR_IO. Nothing is changed on error. Every rank reads for itself. */
px_status_t px_moe_checkpoint_load(const char *path, px_experts_t *ex);

#endif
