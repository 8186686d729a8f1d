/* model.h: the GPT model described ONCE: its tensor table.
 *
 * Every tensor of the model with its canonical (stacked) shape, the unit it
 * lives in, its weight-decay flag, its initialisation, how tensor
 * parallelism splits it and which pipeline stage owns it. The engine's unit
 * layout (gpt.h), the canonical layout of dumps and the safetensors export,
 * the layout.json dump and the planner's byte counts (plan.h) are all
 * derived from this table; nothing else spells the layout out.
 *
 * Canonical layout: the 16 tensors below in this order, per-layer tensors
 * stacked over layers, each tensor row-major. With L layers, C dim, Vp
 * padded vocab, maxT max_seq:
 *   wte (Vp,C) wpe (maxT,C) ln1w ln1b (L,C) qkvw (L,3C,C) qkvb (L,3C)
 *   attprojw (L,C,C) attprojb (L,C) ln2w ln2b (L,C) fcw (L,4C,C) fcb (L,4C)
 *   fcprojw (L,C,4C) fcprojb (L,C) lnfw lnfb (C)
 * Matrices are (OC, C) as torch.nn.Linear. wte carries all Vp rows (as
 * llm.c's checkpoints): rows [vocab, Vp) are padding, initialised to 0 and
 * never given a gradient (their logits are masked out of the loss), so
 * they stay 0.
 *
 * Units (the contiguous pieces ZeRO shards and gathers, and the pieces a
 * pipeline stage holds): unit 0 = EMBEDDING (wte, wpe; first stage), unit
 * 1+l = block l (its twelve tensors, each the slice l of the stacked
 * tensor; the stage holding layer l), unit L+1 = HEAD (lnfw, lnfb; last
 * stage). A MoE layer's unit (px_model_config_t's experts, moe_every)
 * holds its first eight tensors only: its MLP is the experts, so the four
 * dense MLP tensors (fcw fcb fcprojw fcprojb) exist nowhere (no memory, no
 * optimizer state, no gradient, no checkpoint bytes); their slices of the
 * canonical buffer stay 0. The LM head is tied to the embedding: its matmul reads wte of
 * unit 0 and adds its gradient into unit 0's wte gradient. Units run in
 * the order of the forward pass, so a unit index is also its position in
 * the network.
 *
 * Pure code (no BLAS, no transport): pctl links it. Any thread. */
#ifndef PX_MODEL_H
#define PX_MODEL_H

#include <stddef.h>
#include <stdint.h>

#define PX_MODEL_NUM_TENSORS 16
/* The most tensors one unit holds (a block). */
#define PX_MODEL_MAX_UNIT_TENSORS 12

typedef struct px_model_config {
    int layers, heads, dim;
    int max_seq;      /* rows of wpe: the longest sequence the model takes */
    int vocab;        /* token ids are < vocab */
    int padded_vocab; /* rows of wte and columns of the logits, >= vocab;
                         0: px_job_config_padded_vocab(vocab), i.e. vocab
                         rounded up to PX_VOCAB_PAD (64) */
    int tp;           /* tensor-parallel degree the units are cut for
                         (0 or 1: whole tensors); heads, dim and the padded
                         vocab must be divisible by it (jobcfg.h checks) */
    int tp_rank;      /* this rank's index in its tensor group, 0..tp-1 */
    int sequence_parallel; /* with tp > 1: the residual stream between the
                              tensor-parallel matrices is split over the
                              tensor group's tokens (engine/tp.h); it does
                              not change the tensor table */
    int cp;           /* context-parallel degree (0 or 1: none): the model
                         holds seq/cp tokens of each sequence and runs ring
                         attention (engine/ring_attn.h); not in the table */
    int experts;      /* experts per MoE layer (0: no MoE layer) */
    int moe_every;    /* with experts > 0: layer l is a MoE layer when
                         (l + 1) % moe_every == 0 (px_model_moe_is_layer);
                         its unit drops the dense MLP tensors */
} px_model_config_t;

/* How a tensor's values start (seeded by the canonical element index, see
 * gpt.h's px_gpt_init_unit_range). */
typedef enum px_model_init {
    PX_MODEL_INIT_NORMAL = 0, /* N(0, 0.02) */
    PX_MODEL_INIT_RESIDUAL,   /* N(0, 0.02 / sqrt(2 L)): projections into the residual */
    PX_MODEL_INIT_ONES,       /* LayerNorm weights */
    PX_MODEL_INIT_ZEROS,      /* biases, LayerNorm biases */
} px_model_init_t;

/* How tensor parallelism (Megatron-LM, Shoeybi et al. 2019) splits one
 * layer's slice of the tensor over the tp ranks. */
typedef enum px_model_split {
    PX_MODEL_SPLIT_REPLICATED = 0, /* every tp rank holds it whole */
    PX_MODEL_SPLIT_COLUMN,         /* dim 0 of the (OC, C) matrix, or the (OC) bias */
    PX_MODEL_SPLIT_ROW,            /* dim 1 of the (OC, C) matrix */
    PX_MODEL_SPLIT_VOCAB,          /* the rows of wte (vocab-parallel embedding and head) */
} px_model_split_t;

/* Which part of the network (and so which pipeline stage) owns a tensor. */
typedef enum px_model_owner {
    PX_MODEL_OWNER_EMBED = 0, /* the first stage; unit 0 */
    PX_MODEL_OWNER_BLOCK,     /* the stage of layer l; unit 1 + l, stacked over L */
    PX_MODEL_OWNER_HEAD,      /* the last stage; unit L + 1 */
} px_model_owner_t;

/* One tensor of the canonical layout. */
typedef struct px_model_tensor {
    const char *name;       /* "wte", "qkvw", ... (static) */
    int ndim;               /* 1..3 */
    int shape[3];           /* canonical shape, e.g. qkvw (L, 3C, C) */
    size_t offset;          /* elements from the start of the canonical buffer */
    size_t size;            /* elements */
    size_t valid;           /* elements holding real values: size, except wte
                               (vocab * C: the padding rows follow) */
    int decay;              /* 1: a matrix (weight decay applies); 0: bias / LN */
    px_model_owner_t owner;
    px_model_init_t init;
    px_model_split_t split;
} px_model_tensor_t;

/* One tensor's piece inside a unit: with tp > 1 this tp rank's shard of
 * the layer's slice (Megatron-LM, Shoeybi et al. 2019, section 3):
 *   REPLICATED  the whole (rows, cols) slice;
 *   COLUMN      rows/tp of the rows of each of `parts` equal row blocks:
 *               qkvw (3C, C) is q | k | v, and rank r holds rows
 *               [r C/tp, (r+1) C/tp) of each, i.e. q, k and v of heads
 *               [r NH/tp, (r+1) NH/tp) (its local qkv is (3C/tp, C), the
 *               fused layout the attention kernel reads with C/tp channels
 *               and NH/tp heads); fcw (4C, C) one block; biases alike;
 *   ROW         cols/tp columns [r cols/tp, (r+1) cols/tp) of every row;
 *   VOCAB       rows [r Vp/tp, (r+1) Vp/tp) of wte.
 * The local shard is row-major; px_model_shard_run maps it to the slice. */
typedef struct px_model_unit_tensor {
    int tensor;          /* canonical tensor index */
    size_t unit_offset;  /* elements from the unit's start (tp-local) */
    size_t size;         /* elements this rank holds (tp-local) */
    size_t canon_offset; /* elements from the start of the canonical buffer
                            to the start of the layer's whole slice */
    int decay;
    px_model_split_t split;
    int rows, cols;      /* the canonical slice: (rows, cols), cols = 1 for
                            a vector */
    int parts;           /* row blocks split separately (3 for qkv, else 1) */
    int tp, tp_rank;     /* the cut (tp 1: whole) */
} px_model_unit_tensor_t;

/* Rows of wte: cfg->padded_vocab, or vocab rounded up to PX_VOCAB_PAD. */
int px_model_padded_vocab(const px_model_config_t *cfg);

/* Tensor i (0 <= i < PX_MODEL_NUM_TENSORS) of the canonical layout. Dims
 * must be positive (callers check them first). */
void px_model_tensor(const px_model_config_t *cfg, int i, px_model_tensor_t *t);

/* Parameter elements of the whole model (the canonical buffer's length). */
uint64_t px_model_num_params(const px_model_config_t *cfg);

/* Units: layers + 2. px_model_unit_embed() = 0, px_model_unit_layer(l) =
 * 1 + l, px_model_unit_head() = layers + 1. */
int px_model_num_units(const px_model_config_t *cfg);
int px_model_unit_layer(const px_model_config_t *cfg, int l);
int px_model_unit_head(const px_model_config_t *cfg);
#define PX_MODEL_UNIT_EMBED 0
/* The owner of unit u; for a block, *layer_p = its layer (else -1). */
px_model_owner_t px_model_unit_owner(const px_model_config_t *cfg, int u, int *layer_p);

/* Names for dumps (layout.json): "embed" / "block" / "head"; "normal" /
 * "residual" / "ones" / "zeros"; "replicated" / "column" / "row" / "vocab". */
const char *px_model_owner_name(px_model_owner_t owner);
const char *px_model_init_name(px_model_init_t init);
const char *px_model_split_name(px_model_split_t split);

/* 1 when layer l of cfg is a MoE layer, whose unit holds no dense MLP
 * (experts > 0 and (l + 1) % moe_every == 0, as px_model_moe_is_layer). */
int px_model_layer_is_moe(const px_model_config_t *cfg, int l);

/* Tensors of unit u into out[PX_MODEL_MAX_UNIT_TENSORS] in canonical order
 * (a MoE layer's unit: the first eight, without the dense MLP);
 * returns their count (2 for the embedding and the head, 12 for a block,
 * 8 for a MoE block).
 * With cfg->tp > 1 the list is tp rank cfg->tp_rank's: each tensor its
 * shard, back to back (the tp-local unit the engine lays out). */
int px_model_unit_tensors(const px_model_config_t *cfg, int u, px_model_unit_tensor_t *out);
/* Elements of unit u (unpadded; tp-local with cfg->tp > 1). */
uint64_t px_model_unit_size(const px_model_config_t *cfg, int u);
/* Elements of unit u on every rank of a tensor group of `tp` (the shards
 * are equal), whatever cfg->tp says. */
uint64_t px_model_unit_size_tp(const px_model_config_t *cfg, int u, int tp);

/* The shard of unit tensor t (tp-local) as contiguous runs: run j (0 <= j
 * < px_model_shard_nruns(t)) is `*len_p` elements from element *local_p of
 * the shard, which are elements from *canon_p of the canonical slice (add
 * t->canon_offset for the canonical buffer). REPLICATED, VOCAB: one run;
 * COLUMN: `parts` runs; ROW: `rows` runs. */
int px_model_shard_nruns(const px_model_unit_tensor_t *t);
void px_model_shard_run(const px_model_unit_tensor_t *t, int j, size_t *local_p, size_t *canon_p,
                        size_t *len_p);

/* The mixture of experts (engine/moe.h): in a model with experts > 0,
 * layer l is a MoE layer when (l + 1) % moe_every == 0, and each MoE layer
 * has, beyond its unit (whose dense MLP it does not use), the tensors
 *   moe_router (E,C), moe_fcw (E,4C,C), moe_fcb (E,4C),
 *   moe_fcprojw (E,C,4C), moe_fcprojb (E,C)
 * in this order; the canonical MoE buffer is the MoE layers' tensors back
 * to back. A rank of an ep group of `ep` holds every router and E/ep
 * experts of each MoE layer (8C^2 + 5C elements an expert). */
typedef struct px_model_moe {
    int layers, dim, experts, moe_every;
} px_model_moe_t;
#define PX_MODEL_MOE_NUM_TENSORS 5
int px_model_moe_is_layer(const px_model_moe_t *m, int l);
int px_model_moe_num_layers(const px_model_moe_t *m);
/* "moe_router", ...; "?" out of range */
const char *px_model_moe_tensor_name(int i);
/* Elements of MoE tensor i of ONE MoE layer (all experts); its shape into
 * shape[3] (unused dims 0) when shape is not NULL. */
uint64_t px_model_moe_tensor(const px_model_moe_t *m, int i, int *shape);
/* Elements of one expert: 8C^2 + 5C. */
uint64_t px_model_moe_expert_size(int dim);
/* The canonical MoE buffer (all experts), and what one rank of an ep group
 * of `ep` holds (routers + its experts); 0 without experts. */
uint64_t px_model_moe_num_params(const px_model_moe_t *m);
uint64_t px_model_moe_rank_params(const px_model_moe_t *m, int ep);
/* What one rank of an ep group of `ep` holds of a pipeline stage's MoE
 * layers, in elements: px_model_moe_rank_params for the MoE layers l with
 * held[l] != 0 only (held: m->layers entries; NULL: every layer). The
 * engine keeps them whole (not ZeRO-sharded) on every rank that holds them
 * (engine/moe.h px_moe_create_stage). 0 without experts. */
uint64_t px_model_moe_stage_params(const px_model_moe_t *m, int ep, const unsigned char *held);

#endif
