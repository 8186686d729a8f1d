/* gpt.h: the GPT-2 style model of the training engine (op table), computed
 * by blocks.
 *
 * Pre-LN blocks: x += proj(attn(qkv(ln1(x)))); x += fc2(gelu(fc(ln2(x))));
 * learned positions; final LayerNorm; LM head tied to the token embedding;
 * the vocab padded to Vp rows (model.h), the padded logits masked out of
 * the loss.
 *
 * The model is described once, by the tensor table of planner/model.h;
 * this header re-exports it under px_gpt_ names. A pass is a sequence of
 * block calls, each taking a px_gpt_ctx_t:
 *   forward:  px_gpt_embed_forward, px_gpt_block_forward(l) for l = 0..L-1,
 *             px_gpt_head_forward;
 *   backward: px_gpt_head_backward, px_gpt_block_backward(l) for l =
 *             L-1..0, px_gpt_embed_backward.
 * px_gpt_forward / px_gpt_backward run the whole sequence on one rank; a
 * pipeline stage calls the embedding only on the first stage and the head
 * only on the last, and tensor / sequence / context parallelism add their
 * collectives inside the block functions, at the context's groups.
 *
 * Memory: parameters live in ONE flat buffer of units (the embedding unit,
 * one unit per layer, the head unit; see px_gpt_unit_tensors), or, for
 * ZeRO, wherever the hooks say. Gradients and both AdamW moments mirror it
 * element for element. Dumps and exports use the canonical stacked layout
 * (px_gpt_tensor_info). Activations for a fixed local batch (B, T) live in
 * a second flat buffer (memacct category activations). Every buffer is
 * memory of the op table's backend: the model clears and copies tensors
 * only through ops->mem_set / mem_copy.
 *
 * Tensor parallelism (tp.h): a config with tp > 1 makes a model of tp
 * rank tp_rank: its units hold that rank's shards (model.h), its split
 * activations Cl = C/tp channels, NH/tp heads, Vp/tp vocab columns, and
 * its blocks all-reduce over the context's tensor group (Megatron-LM's f
 * and g), so the passes need a context whose groups hold it.
 *
 * Threading: one model is used by one thread. */
#ifndef PX_GPT_H
#define PX_GPT_H

#include <stddef.h>
#include <stdint.h>

#include "model.h"
#include "optim.h"
#include "px_kernels.h"
#include "px_status.h"
#include "ring_attn.h"
#include "tp.h"

#define PX_GPT_NUM_TENSORS PX_MODEL_NUM_TENSORS

/* The model's dims (model.h): layers, heads, dim, max_seq, vocab and
 * padded_vocab (0: vocab rounded up to 64). */
typedef px_model_config_t px_gpt_config_t;

/* One tensor of the CANONICAL (stacked) layout, for dumps, safetensors
 * export and the reference test (model.h lists them):
 *   wte (Vp,C) wpe (maxT,C) ln1w ln1b (L,C) qkvw (L,3C,C) qkvb (L,3C)
 *   attprojw (L,C,C) attprojb (L,C) ln2w ln2b (L,C) fcw (L,4C,C) fcb (L,4C)
 *   fcprojw (L,C,4C) fcprojb (L,C) lnfw lnfb (C)
 * Fields used here: name, ndim, shape, offset, size (elements), decay. */
typedef px_model_tensor_t px_gpt_tensor_info_t;

/* Tensor i (0 <= i < PX_GPT_NUM_TENSORS) of the canonical layout. */
void px_gpt_tensor_info_of(const px_gpt_config_t *cfg, int i, px_gpt_tensor_info_t *info);

/* The UNIT layout the engine computes on (model.h, plan.h): unit 0 = the
 * embedding (wte, wpe); unit 1+l = layer l's ln1w, ln1b, qkvw, qkvb,
 * attprojw, attprojb, ln2w, ln2b, fcw, fcb, fcprojw, fcprojb, each one slice
 * of the canonical tensor; unit L+1 = the head (lnfw, lnfb). A unit is
 * contiguous; the flat buffer is the units back to back (each unit padded
 * to a multiple of dp under ZeRO, see plan.h). */
typedef px_model_unit_tensor_t px_gpt_unit_tensor_t;

int px_gpt_num_units(const px_gpt_config_t *cfg); /* layers + 2 */
/* Tensors of unit u into out[12]; returns their count (2 or 12). */
int px_gpt_unit_tensors(const px_gpt_config_t *cfg, int u, px_gpt_unit_tensor_t out[12]);
/* Elements of unit u (as px_plan_gpt_units). */
size_t px_gpt_unit_size(const px_gpt_config_t *cfg, int u);

/* Initial values of elements [begin, end) of unit u into HOST memory
 * dst[end - begin] (elements past the unit's size, i.e. padding, are 0).
 * Element e of canonical tensor i gets a normal from a counter-based
 * generator of (seed, i, e) (splitmix64 hashing + Box-Muller), so any
 * sharding of any layout initialises identically; the kind comes from the
 * tensor table: matrices N(0, 0.02); residual projections (attprojw,
 * fcprojw) N(0, 0.02/sqrt(2L)); biases 0; LayerNorm weight 1, bias 0. The
 * padding rows of wte (vocab..Vp-1) are 0. */
void px_gpt_init_unit_range(const px_gpt_config_t *cfg, uint64_t seed, int u, size_t begin,
                            size_t end, float *dst);

/* The counter-based generator behind every initial value (the model's and
 * the experts', moe.c): px_init_hash is splitmix64 (Steele, Lea and Flood,
 * "Fast splittable pseudorandom number generators", 2014), a bijective
 * 64-bit mix; px_init_normal(key, e) is a standard normal for element e of
 * the tensor keyed by key, Box-Muller on two hashed uniforms, so a shard
 * draws exactly the elements the whole tensor would. */
uint64_t px_init_hash(uint64_t x);
double px_init_normal(uint64_t key, uint64_t e);

/* Where a model without its own storage (px_gpt_create_external) finds its
 * parameters and gradients, unit by unit (E = unit 0, the embedding; H =
 * unit L+1, the head). The block functions call, in order:
 *   embed_forward:    params_acquire(E, 0); E is not released in forward
 *                     (the tied LM head reads wte at the end);
 *   block_forward(l): params_acquire(1+l, 0) ... params_release(1+l, 0);
 *   head_forward:     params_acquire(H, 0); H is not released in forward
 *                     (the head's backward comes next);
 *   head_backward:    params_acquire(H, 1), params_acquire(E, 1),
 *                     grads_acquire(H), grads_acquire(E), compute,
 *                     params_release(H, 1), params_release(E, 1),
 *                     grads_release(H); E's gradients stay acquired (the
 *                     encoder adds into them last);
 *   block_backward(l): params_acquire(1+l, 1), grads_acquire(1+l),
 *                     compute, params_release(1+l, 1), grads_release(1+l);
 *   embed_backward:   compute, grads_release(E).
 * acquire returns a pointer to the unit's elements (grads: the model ADDS
 * into them), valid until the matching release; a unit is never acquired
 * twice without a release in between. A non-OK status stops the pass and
 * is returned by it. */
typedef struct px_gpt_hooks {
    void *arg;
    px_status_t (*params_acquire)(void *arg, int unit, int phase, float **params_p);
    px_status_t (*params_release)(void *arg, int unit, int phase);
    px_status_t (*grads_acquire)(void *arg, int unit, float **grads_p);
    px_status_t (*grads_release)(void *arg, int unit);
    /* optional: called between the big ops (every matmul) so nonblocking
     * collectives progress while the model computes */
    void (*progress)(void *arg);
} px_gpt_hooks_t;

/* Row blocks each forward GEMM and each backward input-gradient GEMM is
 * cut into when the hooks have `progress`, with a progress call after each
 * block (gpt.c matmul_forward_poked / matmul_backward_poked; a backward
 * matmul then calls progress PX_GPT_POKE_BLOCKS + 1 times, its weight
 * gradient in one block). Hook users that count calls (ZeRO-3's deferred
 * gather, zero.c) derive their counts from it. */
#define PX_GPT_POKE_BLOCKS 4

/* What a block computes on, beyond its parameters: the seams where tensor,
 * sequence, context and pipeline parallelism plug in. */
typedef struct px_gpt_ctx {
    void *groups;   /* the rank's process groups (tp, cp, pp communicators);
                       opaque, borrowed; NULL: this rank computes alone */
    int micro;      /* micro-batch slot whose activations are used (a
                       pipeline schedule keeps several in flight); only 0
                       exists today */
    int seq_offset; /* position of token 0 of this rank's (B,T) slice in the
                       sequence: rows [seq_offset, seq_offset + T) of wpe
                       (a model cut for cp > 1 holds two chunks instead,
                       placed by its cp rank: ring_attn.h) */
    int B, T;       /* local batch and sequence length, at most the B, T
                       the model was created for */
} px_gpt_ctx_t;

typedef struct px_gpt px_gpt_t;

/* Allocates parameters, gradients, moments (all zero) and activations for a
 * local batch of B sequences of T tokens (T <= max_seq). `ops` is borrowed
 * for the model's life. PX_ERR_INVALID_ARGUMENT (logged) if dim % heads or
 * a size is not positive; PX_ERR_NO_MEMORY. */
px_status_t px_gpt_create(const px_gpt_config_t *cfg, const px_kernel_ops_t *ops, int B, int T,
                          px_gpt_t **gpt_p);
/* A model without parameter storage: forward/backward get every unit's
 * parameters and gradients through `hooks` (copied; hooks->arg borrowed).
 * Only activations are allocated. px_gpt_params/grads return NULL;
 * init_params/zero_grad/update must not be called. */
px_status_t px_gpt_create_external(const px_gpt_config_t *cfg, const px_kernel_ops_t *ops,
                                   int B, int T, const px_gpt_hooks_t *hooks, px_gpt_t **gpt_p);
/* A pipeline stage's model (pipeline.h): as px_gpt_create_external, with
 * activations for layers [layer0, layer0 + nlayers) only (the plan's
 * table for nlayers layers: px_plan_gpt_activations_dev), so a stage's
 * activation memory falls with pp. block_forward / block_backward take
 * the global layer index l within that range; the stage's input x_layer0
 * lives in the embedding's output buffer (px_gpt_stage_io).
 * PX_ERR_INVALID_ARGUMENT (logged) for a range outside the model. */
px_status_t px_gpt_create_stage(const px_gpt_config_t *cfg, const px_kernel_ops_t *ops, int B,
                                int T, const px_gpt_hooks_t *hooks, int layer0, int nlayers,
                                px_gpt_t **gpt_p);
void px_gpt_destroy(px_gpt_t *gpt); /* NULL no-op */

/* Number of parameter elements this rank holds (the length of the flat
 * buffers: the tp-local units; the canonical count when tp is 1). */
size_t px_gpt_num_params(const px_gpt_t *gpt);
/* The flat buffers (borrowed for the model's life). The gradient buffer has
 * ONE spare float after the last gradient (index num_params) that the
 * trainer may use to carry the loss through the same all-reduce. */
float *px_gpt_params(px_gpt_t *gpt);
float *px_gpt_grads(px_gpt_t *gpt);
/* Tensor i (0 <= i < PX_GPT_NUM_TENSORS) of the canonical layout. */
void px_gpt_tensor_info(const px_gpt_t *gpt, int i, px_gpt_tensor_info_t *info);
const px_gpt_config_t *px_gpt_config(const px_gpt_t *gpt);
/* Copies a unit-major buffer in `ops`' backend memory (units back to back,
 * unit u starting at unit_offset[u]; NULL offsets = unpadded) into
 * canonical order in HOST memory dst[num_params] (ops->mem_copy_to_host).
 * The dense MLP slices of MoE layers (no unit holds them, model.h) are 0. */
void px_gpt_units_to_canonical(const px_gpt_config_t *cfg, const px_kernel_ops_t *ops,
                               const float *units, const uint64_t *unit_offset, float *dst);

/* The same, leaving out the units with skip[u] != 0 (skip NULL: none):
 * their canonical elements are 0 in dst (a pipeline stage's gather:
 * units held by other stages, the tied copy of wte; zero.h). */
void px_gpt_units_to_canonical_ex(const px_gpt_config_t *cfg, const px_kernel_ops_t *ops,
                                  const float *units, const uint64_t *unit_offset,
                                  const unsigned char *skip, float *dst);

/* A pipeline stage's boundary (pipeline.h): *x_p the residual stream
 * entering layer l (l = layers: entering the head), (R,C) = *n_p floats
 * (R = B*T, or B*T/tp with sequence parallelism): a stage starting at
 * layer l receives its input there before block_forward(l), a stage
 * ending before layer l sends it from there after block_forward(l-1);
 * *dx_p the residual-stream gradient (R,C): a stage ending before layer l
 * receives d x_l there before block_backward(l-1), a stage starting at
 * layer l sends it from there after block_backward(l). Borrowed for the
 * model's life. */
void px_gpt_stage_io(px_gpt_t *gpt, int l, float **x_p, float **dx_p, size_t *n_p);

/* Initialises the parameters from `seed` (px_gpt_init_unit_range on every
 * unit) and zeroes the moments. */
void px_gpt_init_params(px_gpt_t *gpt, uint64_t seed);

/* The context of a whole (B, T) batch on one rank: no groups, slot 0,
 * offset 0, the model's B and T. */
px_gpt_ctx_t px_gpt_ctx_default(const px_gpt_t *gpt);

/* Forward pass over inputs (B,T) token ids (borrowed until the next
 * backward): px_gpt_embed_forward, every px_gpt_block_forward, then
 * px_gpt_head_forward with the default context. With targets (B,T) also
 * computes the loss, *loss_p = mean cross-entropy over the B*T tokens
 * (summed in double). targets may be NULL (then no loss; *loss_p
 * untouched). Token ids must be < vocab (the data loader checks). */
px_status_t px_gpt_forward(px_gpt_t *gpt, const int32_t *inputs, const int32_t *targets,
                           float *loss_p);

/* After a forward pass that no backward follows (the validation loss,
 * eval.h): releases the units the forward keeps acquired for the backward
 * (the embedding and the head; gpt.h's hook protocol), so a ZeRO-3 model
 * frees their gathered copies and the next forward acquires them afresh.
 * Returns the hooks' status. */
px_status_t px_gpt_forward_end(px_gpt_t *gpt);

/* The same with a context (its groups carry the tensor group a model cut
 * for tp > 1 needs; PX_ERR_INVALID_ARGUMENT without one) and its errors. */
px_status_t px_gpt_forward_ctx(px_gpt_t *gpt, const px_gpt_ctx_t *ctx, const int32_t *inputs,
                               const int32_t *targets, float *loss_p);
px_status_t px_gpt_backward_ctx(px_gpt_t *gpt, const px_gpt_ctx_t *ctx);

/* The mixture of experts (moe.h; borrowed, NULL: none) whose layers
 * (px_moe_is_layer) replace the dense MLP: block_forward / block_backward
 * call px_moe_forward / px_moe_backward on ln2's output there, collective
 * over the moe's ep group. With tp every tensor rank computes the MoE MLP
 * whole on the whole ln2 output (experts replicated over the tensor group,
 * moe.h), its output and input gradient the same on every tensor rank;
 * with sequence parallelism each rank keeps its R rows of them. The
 * unsplit backward only (PX_ERR_INVALID_ARGUMENT, logged). */
struct px_moe;
px_status_t px_gpt_set_moe(px_gpt_t *gpt, struct px_moe *moe);
/* The same for a pipeline slot's model (pipeline.h): its MoE layers use
 * the moe's activation slot `slot` (px_moe_forward_slot). */
px_status_t px_gpt_set_moe_slot(px_gpt_t *gpt, struct px_moe *moe, int slot);

/* Time this model spent in tensor-parallel collectives (tp.h). */
void px_gpt_tp_times(const px_gpt_t *gpt, px_tp_times_t *out);
/* Its ring attention's transfer times (ring_attn.h; zeros when cp is 1). */
void px_gpt_ring_times(const px_gpt_t *gpt, px_ring_times_t *out);

/* The blocks. Each returns PX_OK, a hook's error, or
 * PX_ERR_INVALID_ARGUMENT (logged) for a context the model cannot run
 * (B, T larger than created, seq_offset + T > max_seq, micro != 0, l out of
 * range, head before embed).
 *
 * embed_forward: x0 (B,T,C) = wte[inputs] + wpe[seq_offset + t]; inputs
 * (B,T) token ids < vocab, borrowed until embed_backward. */
px_status_t px_gpt_embed_forward(px_gpt_t *gpt, const px_gpt_ctx_t *ctx, const int32_t *inputs);
/* block_forward(l): x_{l+1} (B,T,C) = block l (x_l), keeping the block's
 * activations for its backward. */
px_status_t px_gpt_block_forward(px_gpt_t *gpt, const px_gpt_ctx_t *ctx, int l);
/* head_forward: logits (B,T,Vp) = lnf(x_L) @ wte^T (wte of the embedding
 * unit: tied); with targets (B,T, borrowed until head_backward) the
 * probabilities over the first vocab columns (padding 0) and *loss_p =
 * mean cross-entropy over the B*T tokens (summed in double); targets NULL:
 * no loss, *loss_p untouched. */
px_status_t px_gpt_head_forward(px_gpt_t *gpt, const px_gpt_ctx_t *ctx, const int32_t *targets,
                                float *loss_p);
/* The logits of the last head_forward without targets (with targets the
 * probabilities overwrite them): (B,T,Vl) of that context's B and T, Vl =
 * Vp/tp columns, in the backend's memory; borrowed until the next
 * forward. For sampling (sample.h). */
const float *px_gpt_logits(const px_gpt_t *gpt);
/* head_backward: d(mean loss) into the head's and wte's gradients and into
 * dx_L (the model's residual-stream gradient); needs a head_forward with
 * targets. */
px_status_t px_gpt_head_backward(px_gpt_t *gpt, const px_gpt_ctx_t *ctx);
/* block_backward(l): dx_l from dx_{l+1}; adds block l's gradients. */
px_status_t px_gpt_block_backward(px_gpt_t *gpt, const px_gpt_ctx_t *ctx, int l);
/* embed_backward: scatters dx_0 into wte's and wpe's gradients and releases
 * the embedding's gradients (acquiring them first where no head_backward
 * did: a first pipeline stage). head_forward acquires the embedding's
 * parameters itself where no embed_forward ran (a last pipeline stage). */
px_status_t px_gpt_embed_backward(px_gpt_t *gpt, const px_gpt_ctx_t *ctx);

/* The split backward of the zero-bubble schedules (Qi et al., "Zero
 * Bubble Pipeline Parallelism", 2024): backward = B (input gradients,
 * which the previous stage waits for) + W (weight gradients, which no one
 * waits for, so a schedule may run them later, in the bubble). tp 1 only.
 * px_gpt_set_split_backward allocates the per-layer stash of output
 * gradients the W pass reads ((nlayers, B*T, 9C) floats, activations
 * category) and makes head_backward leave wte's head gradient to
 * px_gpt_head_backward_weight. block_backward_input(l) is block_backward
 * without the four matmul weight/bias gradients (the LayerNorms' are
 * computed here: they need no stash); block_backward_weight(l) adds them
 * from the stash and the layer's forward activations, so B then W adds
 * exactly what block_backward adds (other summation order of nothing:
 * the same GEMMs). W of a micro-batch must run before the model's next
 * forward overwrites its activations. Errors: PX_ERR_INVALID_ARGUMENT
 * (tp > 1, not split), PX_ERR_NO_MEMORY, the hooks'. */
px_status_t px_gpt_set_split_backward(px_gpt_t *gpt);
px_status_t px_gpt_block_backward_input(px_gpt_t *gpt, const px_gpt_ctx_t *ctx, int l);
px_status_t px_gpt_block_backward_weight(px_gpt_t *gpt, const px_gpt_ctx_t *ctx, int l);
px_status_t px_gpt_head_backward_weight(px_gpt_t *gpt, const px_gpt_ctx_t *ctx);

/* Zeroes the gradient buffer (one ops->mem_set). */
void px_gpt_zero_grad(px_gpt_t *gpt);

/* Backward pass of the last forward (which must have had targets): adds
 * d(mean loss)/d(param) into the gradient buffer (head_backward, every
 * block_backward from the top, embed_backward). */
px_status_t px_gpt_backward(px_gpt_t *gpt);

/* AdamW step hp->t (optim.h) over every tensor, unclipped: weight decay on
 * matrices only (info.decay), 0 on biases and LayerNorm parameters. */
void px_gpt_update(px_gpt_t *gpt, const px_adamw_t *hp);

/* Bytes of activations (exactly px_plan_gpt_activations_dev's bytes for
 * the model's dims, local B, T, tp, sequence parallelism, cp, the table's
 * bf16 storage and attention state (ops->att_lse_only): the buffers are
 * cut from that table) and of parameter state (params + grads + 2
 * moments). */
size_t px_gpt_activation_bytes(const px_gpt_t *gpt);
size_t px_gpt_state_bytes(const px_gpt_t *gpt);

#endif
