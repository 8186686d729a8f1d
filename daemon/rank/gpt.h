/* gpt.h: the GPT-2 style model of the training engine (CPU / op table).
 *
 * Pre-LN blocks: x += proj(attn(qkv(ln1(x)))); x += fc2(gelu(fc(ln2(x))));
 * learned positions; final LayerNorm; LM head tied to the token embedding.
 *
 * Memory (llm.c layout): the PX_GPT_NUM_TENSORS parameter tensors live in ONE
 * flat buffer, in the order of px_gpt_tensor_names, each tensor stacked over
 * layers where it is per-layer (e.g. qkvw is (L, 3C, C)). Gradients and both
 * AdamW moments mirror it element for element. Activations for a fixed local
 * batch (B, T) live in a second flat buffer.
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

/* Pointers into one flat buffer (parameters or their gradients). Shapes with
 * L layers, C dim, V vocab, maxT max_seq: */
typedef struct px_gpt_tensors {
    float *wte;      /* (V, C)       token embedding = LM head */
    float *wpe;      /* (maxT, C)    positions */
    float *ln1w;     /* (L, C) */
    float *ln1b;     /* (L, C) */
    float *qkvw;     /* (L, 3C, C) */
    float *qkvb;     /* (L, 3C) */
    float *attprojw; /* (L, C, C) */
    float *attprojb; /* (L, C) */
    float *ln2w;     /* (L, C) */
    float *ln2b;     /* (L, C) */
    float *fcw;      /* (L, 4C, C) */
    float *fcb;      /* (L, 4C) */
    float *fcprojw;  /* (L, C, 4C) */
    float *fcprojb;  /* (L, C) */
    float *lnfw;     /* (C) */
    float *lnfb;     /* (C) */
} px_gpt_tensors_t;

/* Shape of one tensor, for dumps and the reference test. */
typedef struct px_gpt_tensor_info {
    const char *name;  /* "wte", "qkvw", ... */
    int ndim;          /* 1..3 */
    int shape[3];
    size_t offset;     /* elements from the start of the flat buffer */
    size_t size;       /* elements */
    int decay;         /* 1: a matrix (weight decay applies); 0: bias / LN */
} px_gpt_tensor_info_t;

typedef struct px_gpt px_gpt_t;

/* Allocates parameters, gradients, moments (all zero) and activations for a
 * local batch of B sequences of T tokens (T <= max_seq). `ops` is borrowed
 * for the model's life. PX_ERR_INVALID_ARGUMENT (logged) if dim % heads or
 * a size is not positive; PX_ERR_NO_MEMORY. */
px_status_t px_gpt_create(const px_gpt_config_t *cfg, const px_kernel_ops_t *ops, int B, int T,
                          px_gpt_t **gpt_p);
void px_gpt_destroy(px_gpt_t *gpt); /* NULL no-op */

/* Number of parameter elements (the length of the flat buffers). */
size_t px_gpt_num_params(const px_gpt_t *gpt);
/* The flat buffers (borrowed for the model's life). The gradient buffer has
 * ONE spare float after the last gradient (index num_params) that the
 * trainer may use to carry the loss through the same all-reduce. */
float *px_gpt_params(px_gpt_t *gpt);
float *px_gpt_grads(px_gpt_t *gpt);
/* Named views of the parameters / gradients. */
const px_gpt_tensors_t *px_gpt_param_tensors(const px_gpt_t *gpt);
const px_gpt_tensors_t *px_gpt_grad_tensors(const px_gpt_t *gpt);
/* Tensor i (0 <= i < PX_GPT_NUM_TENSORS) of this model's layout. */
void px_gpt_tensor_info(const px_gpt_t *gpt, int i, px_gpt_tensor_info_t *info);

/* Initialises the parameters from `seed` by global element index: element e
 * of tensor i gets a normal from a counter-based generator of (seed, i, e)
 * (splitmix64 hashing + Box-Muller), independent of how the model might be
 * sharded. Matrices N(0, 0.02); residual projections (attprojw, fcprojw)
 * N(0, 0.02/sqrt(2L)); biases 0; LayerNorm weight 1, bias 0. */
void px_gpt_init_params(px_gpt_t *gpt, uint64_t seed);

/* Forward pass over inputs (B,T) token ids (borrowed until the next
 * backward); with targets (B,T) also computes
 * the loss, *loss_p = mean cross-entropy over the B*T tokens (summed in
 * double). targets may be NULL (then no loss; *loss_p untouched). Token ids
 * must be < vocab (the data loader checks). */
void px_gpt_forward(px_gpt_t *gpt, const int32_t *inputs, const int32_t *targets,
                    float *loss_p);

/* Zeroes the gradient buffer (one memset). */
void px_gpt_zero_grad(px_gpt_t *gpt);

/* Backward pass of the last forward (which must have had targets): adds
 * d(mean loss)/d(param) into the gradient buffer. */
void px_gpt_backward(px_gpt_t *gpt);

/* AdamW step t (1-based) over every tensor: weight decay `wd` on matrices
 * only (info.decay), 0 on biases and LayerNorm parameters. */
void px_gpt_update(px_gpt_t *gpt, float lr, float beta1, float beta2, float eps, float wd,
                   int t);

/* Bytes of activations and of parameter state (params + grads + 2 moments). */
size_t px_gpt_activation_bytes(const px_gpt_t *gpt);
size_t px_gpt_state_bytes(const px_gpt_t *gpt);

#endif
