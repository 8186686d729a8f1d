/* gpt.h: the GPT-2 style model of the training engine (CPU / op table).
 *
 * Pre-LN blocks: x += proj(attn(qkv(ln1(x)))); x += fc2(gelu(fc(ln2(x))));
 * learned positions; final LayerNorm; LM head tied to the token embedding.
 *
 * Memory: parameters live in ONE flat buffer of units (the root unit, then
 * one unit per layer; see px_gpt_unit_tensors), or, for ZeRO, wherever the
 * hooks say. Gradients and both AdamW moments mirror it element for element.
 * Dumps and exports use the canonical stacked layout (px_gpt_tensor_info).
 * Activations for a fixed local batch (B, T) live in a second flat buffer
 * (memacct category activations).
 *
 * Threading: one model is used by one thread. */
#ifndef PX_GPT_H
#define PX_GPT_H

#include <stddef.h>
#include <stdint.h>

#include "px_kernels.h"
#include "px_status.h"

#define PX_GPT_NUM_TENSORS 16

typedef struct px_gpt_config {
    int layers, heads, dim;
    int max_seq;  /* rows of wpe: the longest sequence the model takes */
    int vocab;
} px_gpt_config_t;

/* Shape of one tensor in the CANONICAL (stacked) layout, for dumps,
 * safetensors export and the reference test: tensors in the order of the list
 * below, per-layer tensors stacked over layers, e.g. qkvw is (L, 3C, C). With
 * L layers, C dim, V vocab, maxT max_seq:
 *   wte (V,C) wpe (maxT,C) ln1w ln1b (L,C) qkvw (L,3C,C) qkvb (L,3C)
 *   attprojw (L,C,C) attprojb (L,C) ln2w ln2b (L,C) fcw (L,4C,C) fcb (L,4C)
 *   fcprojw (L,C,4C) fcprojb (L,C) lnfw lnfb (C) */
typedef struct px_gpt_tensor_info {
    const char *name;  /* "wte", "qkvw", ... */
    int ndim;          /* 1..3 */
    int shape[3];
    size_t offset;     /* elements from the start of the canonical buffer */
    size_t size;       /* elements */
    int decay;         /* 1: a matrix (weight decay applies); 0: bias / LN */
} px_gpt_tensor_info_t;

/* Tensor i (0 <= i < PX_GPT_NUM_TENSORS) of the canonical layout. */
void px_gpt_tensor_info_of(const px_gpt_config_t *cfg, int i, px_gpt_tensor_info_t *info);

/* The UNIT layout the engine computes on (plan.h): unit 0 = wte, wpe, lnfw,
 * lnfb; unit 1+l = layer l's ln1w, ln1b, qkvw, qkvb, attprojw, attprojb,
 * ln2w, ln2b, fcw, fcb, fcprojw, fcprojb, each one slice of the canonical
 * tensor. A unit is contiguous; the flat buffer is the units back to back
 * (each unit padded to a multiple of dp under ZeRO, see plan.h). */
typedef struct px_gpt_unit_tensor {
    int tensor;           /* canonical tensor index */
    size_t unit_offset;   /* elements from the unit's start */
    size_t size;          /* elements */
    size_t canon_offset;  /* elements from the start of the canonical buffer */
    int decay;
} px_gpt_unit_tensor_t;

int px_gpt_num_units(const px_gpt_config_t *cfg); /* layers + 1 */
/* Tensors of unit u into out[12]; returns their count (4 or 12). */
int px_gpt_unit_tensors(const px_gpt_config_t *cfg, int u, px_gpt_unit_tensor_t out[12]);
/* Elements of unit u (as px_plan_gpt_units). */
size_t px_gpt_unit_size(const px_gpt_config_t *cfg, int u);

/* Initial values of elements [begin, end) of unit u into dst[end - begin]
 * (elements past the unit's size, i.e. padding, are 0). Element e of
 * canonical tensor i gets a normal from a counter-based generator of
 * (seed, i, e) (splitmix64 hashing + Box-Muller), so any sharding of any
 * layout initialises identically. Matrices N(0, 0.02); residual projections
 * (attprojw, fcprojw) N(0, 0.02/sqrt(2L)); biases 0; LayerNorm weight 1,
 * bias 0. */
void px_gpt_init_unit_range(const px_gpt_config_t *cfg, uint64_t seed, int u, size_t begin,
                            size_t end, float *dst);

/* Where a model without its own storage (px_gpt_create_external) finds its
 * parameters and gradients, unit by unit. The model calls, in order:
 *   forward:  params_acquire(u, 0) before it first reads unit u (root first,
 *             then layers 0..L-1; the root stays in use to the end of
 *             forward); params_release(u, 0) after layer unit u's forward
 *             (never for the root in forward);
 *   backward: grads_acquire(0) then params_acquire(0, 1) (LM head, final
 *             LN), params_release(0, 1); for l = L-1..0: params_acquire(1+l,
 *             1), grads_acquire(1+l), compute, params_release(1+l, 1),
 *             grads_release(1+l); at the end (encoder) grads_release(0).
 * acquire returns a pointer to the unit's elements (grads: the model ADDS
 * into them), valid until the matching release. A non-OK status stops the
 * pass and is returned by it. */
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
void px_gpt_destroy(px_gpt_t *gpt); /* NULL no-op */

/* Number of parameter elements (the length of the flat buffers). */
size_t px_gpt_num_params(const px_gpt_t *gpt);
/* The flat buffers (borrowed for the model's life). The gradient buffer has
 * ONE spare float after the last gradient (index num_params) that the
 * trainer may use to carry the loss through the same all-reduce. */
float *px_gpt_params(px_gpt_t *gpt);
float *px_gpt_grads(px_gpt_t *gpt);
/* Tensor i (0 <= i < PX_GPT_NUM_TENSORS) of the canonical layout. */
void px_gpt_tensor_info(const px_gpt_t *gpt, int i, px_gpt_tensor_info_t *info);
const px_gpt_config_t *px_gpt_config(const px_gpt_t *gpt);
/* Copies a unit-major buffer (units back to back, unit u starting at
 * unit_offset[u]; NULL offsets = unpadded) into canonical order dst[n]. */
void px_gpt_units_to_canonical(const px_gpt_config_t *cfg, const float *units,
                               const uint64_t *unit_offset, float *dst);

/* Initialises the parameters from `seed` (px_gpt_init_unit_range on every
 * unit) and zeroes the moments. */
void px_gpt_init_params(px_gpt_t *gpt, uint64_t seed);

/* Forward pass over inputs (B,T) token ids (borrowed until the next
 * backward); with targets (B,T) also computes
 * the loss, *loss_p = mean cross-entropy over the B*T tokens (summed in
 * double). targets may be NULL (then no loss; *loss_p untouched). Token ids
 * must be < vocab (the data loader checks). */
px_status_t px_gpt_forward(px_gpt_t *gpt, const int32_t *inputs, const int32_t *targets,
                           float *loss_p);

/* Zeroes the gradient buffer (one memset). */
void px_gpt_zero_grad(px_gpt_t *gpt);

/* Backward pass of the last forward (which must have had targets): adds
 * d(mean loss)/d(param) into the gradient buffer. */
px_status_t px_gpt_backward(px_gpt_t *gpt);

/* AdamW step t (1-based) over every tensor: weight decay `wd` on matrices
 * only (info.decay), 0 on biases and LayerNorm parameters. */
void px_gpt_update(px_gpt_t *gpt, float lr, float beta1, float beta2, float eps, float wd,
                   int t);

/* Bytes of activations and of parameter state (params + grads + 2 moments). */
size_t px_gpt_activation_bytes(const px_gpt_t *gpt);
size_t px_gpt_state_bytes(const px_gpt_t *gpt);

#endif
