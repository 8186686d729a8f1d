/* gpt.c: GPT-2 style model, forward and backward by blocks through the op
 * table.
 *
 * Follows llm.c's train_gpt2.c (Karpathy, MIT) for the parameter layout and
 * the order of ops. Differences: the attention and MLP projection outputs
 * share one temporary (they are not needed by backward), and backward uses
 * a handful of reusable gradient buffers instead of a full mirror of the
 * activations: the residual-stream gradient `dres` accumulates from the top
 * of the network down (a residual add is the identity in backward, so it
 * needs no op). The classifier keeps one (B,T,Vp) buffer, as llm.c does:
 * the cross-entropy writes the probabilities over the logits and its
 * backward the logits' gradient over those (in place, px_kernels.h), so a
 * forward with targets leaves no logits behind. The attention's saved state
 * is the backend's (ops->att_lse_only: (T,T) probabilities on cpu/sim, the
 * log-sum-exp on cuda), sized by the plan.
 *
 * Layout: the tensor table of planner/model.h says everything (names,
 * shapes, units, init); this file only reads it. Parameters are units:
 * the embedding (wte, wpe), one unit per layer, the head (lnfw, lnfb), so
 * ZeRO-3 can gather one unit at a time. A model either owns one flat buffer
 * of units (params/grads/m/v, num_params each, grads one more: a spare slot
 * for the trainer) or asks its hooks for each unit (px_gpt_create_external).
 * Every pointer in `acts` points into one buffer sized at create time for
 * (B, T); layer l's activations are at l times the create-time stride.
 * Tensor memory is the backend's: cleared and copied only through the op
 * table's mem_set / mem_copy. Context parallelism (cfg.cp > 1) changes only
 * the attention seam (ring_attn.h: att then holds each layer's log-sum-exp)
 * and the positions (wpe rows of this rank's two chunks). One thread per
 * model.
 *
 * bf16 activation storage (ops->bf16_acts, the bf16 view of
 * px_kernels_with_precision): the activations whose only consumers are
 * bf16 GEMMs - fch_gelu (fcproj's input), and without sequence parallelism
 * ln1, ln2, lnf (the inputs of qkv, fc or the mixture of experts, the tied
 * head) - are stored as bf16 (plan.h: px_plan_gpt_activations_prec says
 * which). The producer (layernorm_forward, gelu_forward) writes fp32 into a
 * backward work buffer that is free during the forward (tmp, dbtc, d4a),
 * then bf16_from_f32 rounds it into the activation: the producers' ops stay
 * as they are and no extra memory is needed. The GEMMs read the bf16 tensor
 * (matmul_bf16in_*), rounding the same values they rounded before, so the
 * results are bit for bit those of fp32 storage. With sequence parallelism
 * ln1 / ln2 / lnf are all-gathered for their GEMMs (fp32 collectives) and
 * stay fp32. The mixture of experts takes fp32 (moe.h): the forward gives it
 * the unrounded LayerNorm output (its GEMMs round it), the backward the
 * bf16 values widened (its router's weight gradient rounds them again: the
 * same operand). */
#include "gpt.h"

#include <math.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>

#include "groups.h"
#include "memacct.h"
#include "moe.h"
#include "plan.h"
#include "px_log.h"
#include "ring_attn.h"
#include "tp.h"

/* R: the residual stream's rows on this rank, B*T, or B*T/tp with
 * sequence parallelism (this rank's tokens, tp.h); with it the LayerNorm
 * outputs are kept for this rank's R rows only and all-gathered again
 * where a matmul needs all B*T (Korthikanti et al. 2022, section 4.2.2). */
typedef struct gpt_acts {
    float *encoded;   /* (R,C) */
    float *ln1;       /* (L,R,C) */
    float *ln1_mean;  /* (L,R) */
    float *ln1_rstd;  /* (L,R) */
    float *qkv;       /* (L,B,T,3C) */
    float *atty;      /* (L,B,T,C) */
    float *att;       /* (L,B,NH,T,T) */
    float *residual2; /* (L,R,C) */
    float *ln2;       /* (L,R,C) */
    float *ln2_mean;  /* (L,R) */
    float *ln2_rstd;  /* (L,R) */
    float *fch;       /* (L,B,T,4C) */
    float *fch_gelu;  /* (L,B,T,4C) */
    float *residual3; /* (L,R,C) */
    float *lnf;       /* (R,C) */
    float *lnf_mean;  /* (R) */
    float *lnf_rstd;  /* (R) */
    float *logits;    /* (B,T,Vp) */
    float *probs;     /* (B,T,Vp), 0 in the padding columns: == logits (the
                         softmax writes over them) */
    float *losses;    /* (B,T) */
    float *tmp;       /* (B,T,C): projection outputs before the residual add;
                         in backward, sequence parallelism's re-gathered
                         LayerNorm output */
    /* backward work space */
    float *dres;      /* (R,C) residual-stream gradient */
    float *dbtc;      /* (B,T,C) */
    float *d4a;       /* (B,T,4C) also dqkv (B,T,3C) */
    float *d4b;       /* (B,T,4C) */
    float *dlogits;   /* (B,T,Vp): == probs (written over them in backward) */
    float *scratch;   /* (T,T) attention backward; NULL with a fused
                         attention (ops->att_lse_only, cp 1) */
    float *rowmax;    /* (B,T) vocab-parallel cross-entropy's row max */
    float *spbuf;     /* (B,T,C) sequence parallelism: a gathered LayerNorm
                         output (forward) or gradient (backward), or a
                         reduce-scattered output (its first R rows) */
    float *dln;       /* (4,C) sequence parallelism: one pass's LayerNorm
                         gradients, summed over tp before they are added */
} gpt_acts_t;
#define GPT_NUM_ACTS (sizeof(gpt_acts_t) / sizeof(float *))
_Static_assert(GPT_NUM_ACTS == PX_PLAN_GPT_NUM_ACTS,
               "gpt_acts_t and the plan's activation table (plan.h) list the same buffers");

struct px_gpt {
    px_gpt_config_t cfg;
    const px_kernel_ops_t *ops;
    int B, T, Vp;
    /* tensor parallelism (tp.h): tp ranks; this rank's channels Cl = C/tp,
     * heads NHl = NH/tp, vocab rows [v0, v0 + Vl) with Vl = Vp/tp. tp 1:
     * the whole model, Cl = C, NHl = NH, v0 = 0, Vl = Vp. */
    int tp, Cl, NHl, v0, Vl;
    float *wstash;                 /* split backward (zero bubble): per layer
                                      the output gradients the weight pass
                                      needs, (nlayers, B*T, 9C): d(fcproj
                                      out) C, d(fc out) 4C, d(attproj out)
                                      C, d(qkv out) 3C; NULL: not split */
    int layer0, nlayers;           /* the layers whose activations this
                                      model holds: [layer0, layer0 +
                                      nlayers) (a pipeline stage's; all
                                      of them otherwise) */
    int sp;                        /* sequence parallelism (tp.h): the residual
                                      stream (encoded, residual2/3, LayerNorm
                                      outputs and stats, dres) holds this
                                      rank's BT/tp token rows */
    size_t att_stride;             /* floats of one layer's att: B*NHl*T*T, or
                                      B*NHl*T (the lse) with cp > 1 or a
                                      fused attention (plan.h _dev) */
    int cp;                        /* context parallelism (ring_attn.h): T is
                                      this rank's two chunks of seq/cp tokens;
                                      att holds the (L,B,NHl,T) log-sum-exp */
    px_ring_attn_t *ring;          /* cp > 1: the ring's buffers */
    float *wpe_loc;                /* cp > 1: (T,C) wpe rows of this rank's
                                      positions (forward), their gradient
                                      (backward) */
    size_t rows;                   /* R of gpt_acts_t at create time: B*T, or
                                      B*T/tp with sp; the per-layer stride */
    double *ce_stats;              /* (B,T,2) vocab-parallel CE sums (tp > 1) */
    px_tp_times_t tp_times;
    px_tp_pending_t pend;          /* the overlapped collective in flight
                                      (col_backward), poked between ops */
    size_t num_params;
    size_t *unit_off;              /* [nunits]: unit u's start in the owned buffers */
    px_gpt_unit_tensor_t embed_t[2], layer_t[12], head_t[2];
    float *params, *grads, *m, *v; /* owned mode only */
    px_gpt_hooks_t hooks;          /* external mode (has_hooks) */
    int has_hooks;
    gpt_acts_t a;
    int ln_bf16;                   /* ln1, ln2, lnf stored as bf16 (plan.h) */
    int fchg_bf16;                 /* fch_gelu stored as bf16 */
    float *acts_mem;
    size_t acts_count;
    size_t acts_bytes;             /* the plan's activation bytes (plan.h) */
    float *losses_host;            /* (B,T) host copy of a->losses for the sum */
    /* between the block calls of one pass */
    float *embed_p;                /* the embedding's parameters (tied wte), from
                                      embed_forward to head_backward */
    float *embed_g;                /* its gradients, head_backward to embed_backward */
    const int32_t *inputs, *targets; /* of the last forward, borrowed */
    px_moe_t *moe;                 /* the MoE MLP of the MoE layers (moe.h),
                                      borrowed; NULL: every MLP dense */
    int moe_slot;                  /* this model's activation slot in moe */
};

int px_gpt_num_units(const px_gpt_config_t *cfg) { return px_model_num_units(cfg); }

void px_gpt_tensor_info_of(const px_gpt_config_t *cfg, int i, px_gpt_tensor_info_t *info)
{
    px_model_tensor(cfg, i, info);
}

int px_gpt_unit_tensors(const px_gpt_config_t *cfg, int u, px_gpt_unit_tensor_t out[12])
{
    return px_model_unit_tensors(cfg, u, out);
}

size_t px_gpt_unit_size(const px_gpt_config_t *cfg, int u)
{
    return (size_t)px_model_unit_size(cfg, u);
}

void px_gpt_units_to_canonical(const px_gpt_config_t *cfg, const px_kernel_ops_t *ops,
                               const float *units, const uint64_t *unit_offset, float *dst)
{
    px_gpt_units_to_canonical_ex(cfg, ops, units, unit_offset, NULL, dst);
}

void px_gpt_units_to_canonical_ex(const px_gpt_config_t *cfg, const px_kernel_ops_t *ops,
                                  const float *units, const uint64_t *unit_offset,
                                  const unsigned char *skip, float *dst)
{
    size_t off = 0;
    /* host memory: only this rank's pieces are written (and no MoE layer's
     * dense MLP, which no unit holds) */
    if (cfg->tp > 1 || skip || cfg->experts > 0)
        memset(dst, 0, (size_t)px_model_num_params(cfg) * sizeof(float));
    for (int u = 0; u < px_gpt_num_units(cfg); u++) {
        px_gpt_unit_tensor_t t[PX_MODEL_MAX_UNIT_TENSORS];
        int n = px_gpt_unit_tensors(cfg, u, t);
        const float *base = units + (unit_offset ? unit_offset[u] : off);
        if (skip && skip[u]) {
            off += t[n - 1].unit_offset + t[n - 1].size;
            continue;
        }
        for (int k = 0; k < n; k++) {
            if (t[k].split == PX_MODEL_SPLIT_REPLICATED && t[k].tp_rank != 0)
                continue; /* tp rank 0 writes the replicated tensors */
            for (int j = 0; j < px_model_shard_nruns(&t[k]); j++) {
                size_t lo, co, len;
                px_model_shard_run(&t[k], j, &lo, &co, &len);
                ops->mem_copy_to_host(dst + t[k].canon_offset + co,
                                      base + t[k].unit_offset + lo, len * sizeof(float));
            }
        }
        off += t[n - 1].unit_offset + t[n - 1].size;
    }
    ops->synchronize(); /* dst is read by host code next */
}

/* Parameter (or gradient) pointers into one unit, set by walking the
 * unit's tensor list (model.h), in its canonical order. */
typedef struct layer_view {
    float *ln1w, *ln1b, *qkvw, *qkvb, *attprojw, *attprojb, *ln2w, *ln2b, *fcw, *fcb, *fcprojw,
        *fcprojb;
} layer_view_t;
typedef struct embed_view {
    float *wte, *wpe;
} embed_view_t;
typedef struct head_view {
    float *lnfw, *lnfb;
} head_view_t;

static void view(const px_gpt_unit_tensor_t *t, int n, float *base, void *v)
{
    float **f = v;
    for (int k = 0; k < n; k++)
        f[k] = base + t[k].unit_offset;
}

static px_status_t gpt_create(const px_gpt_config_t *cfg, const px_kernel_ops_t *ops, int B,
                              int T, const px_gpt_hooks_t *hooks, int layer0, int nlayers,
                              px_gpt_t **gpt_p)
{
    px_gpt_t *gpt;
    int L = cfg->layers, C = cfg->dim, NH = cfg->heads, V = cfg->vocab;

    if (nlayers <= 0 && L > 0)
        nlayers = L - layer0;
    if (layer0 < 0 || nlayers < 1 || layer0 + nlayers > L) {
        px_error("gpt: layers [%d, %d) are not within the model's %d", layer0, layer0 + nlayers,
                 L);
        return PX_ERR_INVALID_ARGUMENT;
    }

    if (L <= 0 || C <= 0 || NH <= 0 || V <= 0 || B <= 0 || T <= 0 || cfg->max_seq <= 0) {
        px_error("gpt: sizes must be positive (layers %d dim %d heads %d vocab %d B %d T %d)", L,
                 C, NH, V, B, T);
        return PX_ERR_INVALID_ARGUMENT;
    }
    if (C % NH) {
        px_error("gpt: dim %d is not divisible by heads %d", C, NH);
        return PX_ERR_INVALID_ARGUMENT;
    }
    if (T > cfg->max_seq) {
        px_error("gpt: sequence %d longer than max_seq %d", T, cfg->max_seq);
        return PX_ERR_INVALID_ARGUMENT;
    }
    if (cfg->padded_vocab && cfg->padded_vocab < V) {
        px_error("gpt: padded vocab %d smaller than vocab %d", cfg->padded_vocab, V);
        return PX_ERR_INVALID_ARGUMENT;
    }
    int tp = cfg->tp > 1 ? cfg->tp : 1;
    if (NH % tp || px_model_padded_vocab(cfg) % tp || cfg->tp_rank < 0 ||
        (tp > 1 && cfg->tp_rank >= tp)) {
        px_error("gpt: tp=%d (rank %d) must divide heads=%d and the padded vocab %d", tp,
                 cfg->tp_rank, NH, px_model_padded_vocab(cfg));
        return PX_ERR_INVALID_ARGUMENT;
    }
    gpt = calloc(1, sizeof(*gpt));
    if (!gpt)
        return PX_ERR_NO_MEMORY;
    gpt->cfg = *cfg;
    gpt->ops = ops;
    gpt->layer0 = layer0;
    gpt->nlayers = nlayers;
    gpt->B = B;
    gpt->T = T;
    gpt->Vp = px_model_padded_vocab(cfg);
    gpt->tp = tp;
    gpt->Cl = C / tp;
    gpt->NHl = NH / tp;
    gpt->Vl = gpt->Vp / tp;
    gpt->v0 = (tp > 1 ? cfg->tp_rank : 0) * gpt->Vl;
    gpt->sp = tp > 1 && cfg->sequence_parallel;
    if (gpt->sp && ((size_t)B * T) % tp) {
        px_error("gpt: sequence parallelism needs B*T = %d x %d divisible by tp=%d", B, T, tp);
        free(gpt->unit_off);
        free(gpt->losses_host);
        free(gpt);
        return PX_ERR_INVALID_ARGUMENT;
    }
    int nu = px_gpt_num_units(cfg);
    gpt->unit_off = calloc((size_t)nu, sizeof(size_t));
    gpt->losses_host = calloc((size_t)B * T, sizeof(float));
    if (!gpt->unit_off || !gpt->losses_host)
        goto err_free;
    for (int u = 1; u < nu; u++)
        gpt->unit_off[u] = gpt->unit_off[u - 1] + px_gpt_unit_size(cfg, u - 1);
    /* this rank's parameters: the tp-local units (all of them when tp 1) */
    gpt->num_params = gpt->unit_off[nu - 1] + px_gpt_unit_size(cfg, nu - 1);
    px_model_unit_tensors(cfg, PX_MODEL_UNIT_EMBED, gpt->embed_t);
    /* a block's twelve offsets: a MoE layer's unit (model.h) holds the
     * first eight at the same offsets and its dense MLP views are unused */
    px_model_config_t dense = *cfg;
    dense.experts = 0;
    px_model_unit_tensors(&dense, px_model_unit_layer(cfg, 0), gpt->layer_t);
    px_model_unit_tensors(cfg, px_model_unit_head(cfg), gpt->head_t);
    if (hooks) {
        gpt->hooks = *hooks;
        gpt->has_hooks = 1;
    } else {
        gpt->params = px_mem_calloc(PX_MEM_PARAMS, gpt->num_params, sizeof(float));
        gpt->grads = px_mem_calloc(PX_MEM_GRADS, gpt->num_params + 1, sizeof(float));
        gpt->m = px_mem_calloc(PX_MEM_OPTIM, gpt->num_params, sizeof(float));
        gpt->v = px_mem_calloc(PX_MEM_OPTIM, gpt->num_params, sizeof(float));
        if (!gpt->params || !gpt->grads || !gpt->m || !gpt->v)
            goto err_free;
    }

    /* the plan's table (plan.h, the arithmetic `pctl plan` prints): per tp
     * rank, split activations hold Cl channels, NHl heads, Vl vocab
     * columns; the residual stream and LayerNorms R rows */
    size_t BT = (size_t)B * T;
    gpt->rows = gpt->sp ? BT / tp : BT;
    px_plan_gpt_acts_t pa;
    gpt->cp = cfg->cp > 1 ? cfg->cp : 1;
    if (px_plan_gpt_activations_dev(nlayers, NH, C, gpt->Vp, B, T, tp, gpt->sp, gpt->cp,
                                    ops->bf16_acts, ops->att_lse_only, &pa) != PX_OK) {
        px_gpt_destroy(gpt); /* logged by the plan; the checks above make it unreachable */
        return PX_ERR_INVALID_ARGUMENT;
    }
    uint64_t *act_sizes = pa.count;
    gpt->att_stride = act_sizes[offsetof(gpt_acts_t, att) / sizeof(float *)] / (size_t)nlayers;
    gpt->ln_bf16 = pa.bf16[offsetof(gpt_acts_t, ln1) / sizeof(float *)];
    gpt->fchg_bf16 = pa.bf16[offsetof(gpt_acts_t, fch_gelu) / sizeof(float *)];
    gpt->acts_count = 0;
    for (size_t i = 0; i < GPT_NUM_ACTS; i++)
        gpt->acts_count += act_sizes[i];
    gpt->acts_bytes = pa.bytes;
    gpt->acts_mem = px_mem_calloc(PX_MEM_ACTS, gpt->acts_count, sizeof(float));
    if (!gpt->acts_mem)
        goto err_free;
    if (tp > 1) {
        gpt->ce_stats = px_mem_calloc(PX_MEM_ACTS, pa.doubles, sizeof(double));
        if (!gpt->ce_stats)
            goto err_free;
    }
    if (gpt->cp > 1) {
        if (px_ring_attn_create(ops, B, T, gpt->Cl, gpt->NHl, &gpt->ring) != PX_OK)
            goto err_free;
        gpt->wpe_loc = px_mem_calloc(PX_MEM_WORK, (size_t)T * C, sizeof(float));
        if (!gpt->wpe_loc)
            goto err_free;
    }
    float **aptr = (float **)&gpt->a, *base = gpt->acts_mem;
    for (size_t i = 0; i < GPT_NUM_ACTS; i++) {
        aptr[i] = base;
        base += act_sizes[i];
    }
    if (!act_sizes[offsetof(gpt_acts_t, scratch) / sizeof(float *)])
        gpt->a.scratch = NULL; /* the fused attention needs none */
    /* in place (px_kernels.h): the softmax over the logits, its gradient
     * over the probabilities (the plan counts one buffer) */
    gpt->a.probs = gpt->a.dlogits = gpt->a.logits;
    *gpt_p = gpt;
    return PX_OK;

err_free:
    px_error("gpt: out of memory (%zu parameters, B %d T %d)", gpt->num_params, B, T);
    px_gpt_destroy(gpt);
    return PX_ERR_NO_MEMORY;
}

px_status_t px_gpt_create(const px_gpt_config_t *cfg, const px_kernel_ops_t *ops, int B, int T,
                          px_gpt_t **gpt_p)
{
    return gpt_create(cfg, ops, B, T, NULL, 0, 0, gpt_p);
}

px_status_t px_gpt_create_stage(const px_gpt_config_t *cfg, const px_kernel_ops_t *ops, int B,
                                int T, const px_gpt_hooks_t *hooks, int layer0, int nlayers,
                                px_gpt_t **gpt_p)
{
    return gpt_create(cfg, ops, B, T, hooks, layer0, nlayers, gpt_p);
}

px_status_t px_gpt_create_external(const px_gpt_config_t *cfg, const px_kernel_ops_t *ops,
                                   int B, int T, const px_gpt_hooks_t *hooks, px_gpt_t **gpt_p)
{
    if (!hooks || !hooks->params_acquire || !hooks->params_release || !hooks->grads_acquire ||
        !hooks->grads_release) {
        px_error("gpt: external model needs all four hooks");
        return PX_ERR_INVALID_ARGUMENT;
    }
    return gpt_create(cfg, ops, B, T, hooks, 0, 0, gpt_p);
}

void px_gpt_destroy(px_gpt_t *gpt)
{
    if (!gpt)
        return;
    px_mem_free(gpt->params);
    px_mem_free(gpt->grads);
    px_mem_free(gpt->m);
    px_mem_free(gpt->v);
    px_mem_free(gpt->acts_mem);
    px_mem_free(gpt->ce_stats);
    px_mem_free(gpt->wstash);
    px_mem_free(gpt->wpe_loc);
    px_ring_attn_destroy(gpt->ring);
    free(gpt->unit_off);
    free(gpt->losses_host);
    free(gpt);
}

size_t px_gpt_num_params(const px_gpt_t *gpt) { return gpt->num_params; }
float *px_gpt_params(px_gpt_t *gpt) { return gpt->params; }
float *px_gpt_grads(px_gpt_t *gpt) { return gpt->grads; }
const px_gpt_config_t *px_gpt_config(const px_gpt_t *gpt) { return &gpt->cfg; }

void px_gpt_tensor_info(const px_gpt_t *gpt, int i, px_gpt_tensor_info_t *info)
{
    px_gpt_tensor_info_of(&gpt->cfg, i, info);
}

size_t px_gpt_activation_bytes(const px_gpt_t *gpt)
{
    return gpt->acts_bytes;
}

void px_gpt_tp_times(const px_gpt_t *gpt, px_tp_times_t *out) { *out = gpt->tp_times; }

px_status_t px_gpt_set_moe(px_gpt_t *gpt, px_moe_t *moe)
{
    return px_gpt_set_moe_slot(gpt, moe, 0);
}

px_status_t px_gpt_set_moe_slot(px_gpt_t *gpt, px_moe_t *moe, int slot)
{
    if (moe && gpt->wstash) {
        px_error("gpt: the mixture of experts runs with the plain backward only (no split "
                 "backward)");
        return PX_ERR_INVALID_ARGUMENT;
    }
    gpt->moe = moe;
    gpt->moe_slot = slot;
    return PX_OK;
}

void px_gpt_ring_times(const px_gpt_t *gpt, px_ring_times_t *out)
{
    if (gpt->ring)
        px_ring_attn_times(gpt->ring, out);
    else
        *out = (px_ring_times_t){0};
}
size_t px_gpt_state_bytes(const px_gpt_t *gpt)
{
    return (4 * gpt->num_params + 1) * sizeof(float);
}

/* ---- counter-based initialisation ---- */

uint64_t px_init_hash(uint64_t x)
{
    x += 0x9E3779B97F4A7C15ull;
    x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
    x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
    return x ^ (x >> 31);
}

double px_init_normal(uint64_t key, uint64_t e)
{
    uint64_t a = px_init_hash(key ^ px_init_hash(2 * e));
    uint64_t b = px_init_hash(key ^ px_init_hash(2 * e + 1));
    double u1 = ((a >> 11) + 1) * (1.0 / 9007199254740992.0); /* (0, 1] */
    double u2 = (b >> 11) * (1.0 / 9007199254740992.0);       /* [0, 1) */
    return sqrt(-2.0 * log(u1)) * cos(2.0 * M_PI * u2);
}

void px_gpt_init_unit_range(const px_gpt_config_t *cfg, uint64_t seed, int u, size_t begin,
                            size_t end, float *dst)
{
    const float base_std = 0.02f;
    const float proj_std = 0.02f / sqrtf(2.0f * cfg->layers);
    px_gpt_unit_tensor_t t[PX_MODEL_MAX_UNIT_TENSORS];
    int nt = px_gpt_unit_tensors(cfg, u, t);
    memset(dst, 0, (end - begin) * sizeof(float)); /* host memory */
    for (int k = 0; k < nt; k++) {
        int i = t[k].tensor;
        px_model_tensor_t ti;
        px_model_tensor(cfg, i, &ti);
        float std = ti.init == PX_MODEL_INIT_RESIDUAL ? proj_std : base_std;
        uint64_t key = px_init_hash(px_init_hash(seed) ^ (0xD1B54A32D192ED03ull * (i + 1)));
        /* the shard's runs (one unless tp splits the tensor): the element
         * index within the canonical tensor (stacked over layers) seeds */
        for (int j = 0; j < px_model_shard_nruns(&t[k]); j++) {
            size_t rl, rc, len;
            px_model_shard_run(&t[k], j, &rl, &rc, &len);
            size_t a = t[k].unit_offset + rl;
            size_t lo = a > begin ? a : begin, hi = a + len < end ? a + len : end;
            if (lo >= hi)
                continue;
            float *p = dst + (lo - begin);
            size_t cnt = hi - lo;
            size_t e0 = t[k].canon_offset - ti.offset + rc + (lo - a);
            /* padding rows of wte (elements from ti.valid on) stay 0 */
            if (e0 >= ti.valid)
                continue;
            if (e0 + cnt > ti.valid)
                cnt = ti.valid - e0;
            if (ti.init == PX_MODEL_INIT_ONES) {
                for (size_t e = 0; e < cnt; e++)
                    p[e] = 1.0f;
            } else if (ti.init == PX_MODEL_INIT_NORMAL || ti.init == PX_MODEL_INIT_RESIDUAL) {
                for (size_t e = 0; e < cnt; e++)
                    p[e] = (float)(px_init_normal(key, e0 + e) * std);
            } /* PX_MODEL_INIT_ZEROS: already 0 */
        }
    }
}

void px_gpt_init_params(px_gpt_t *gpt, uint64_t seed)
{
    const px_kernel_ops_t *k = gpt->ops;
    float host[4096]; /* host staging: generated here, copied to the backend */
    for (int u = 0; u < px_gpt_num_units(&gpt->cfg); u++) {
        size_t n = px_gpt_unit_size(&gpt->cfg, u);
        for (size_t b = 0; b < n; b += 4096) {
            size_t e = n - b < 4096 ? n : b + 4096;
            px_gpt_init_unit_range(&gpt->cfg, seed, u, b, e, host);
            k->mem_copy_from_host(gpt->params + gpt->unit_off[u] + b, host,
                                  (e - b) * sizeof(float));
        }
    }
    k->mem_set(gpt->m, 0, gpt->num_params * sizeof(float));
    k->mem_set(gpt->v, 0, gpt->num_params * sizeof(float));
}

/* unit pointers: own buffer, or the hooks */
static void poke(px_gpt_t *gpt)
{
    px_tp_poke(&gpt->pend, &gpt->tp_times);
    if (gpt->has_hooks && gpt->hooks.progress)
        gpt->hooks.progress(gpt->hooks.arg);
}

static px_status_t p_acquire(px_gpt_t *gpt, int u, int phase, float **p)
{
    if (gpt->has_hooks)
        return gpt->hooks.params_acquire(gpt->hooks.arg, u, phase, p);
    *p = gpt->params + gpt->unit_off[u];
    return PX_OK;
}

static px_status_t p_release(px_gpt_t *gpt, int u, int phase)
{
    return gpt->has_hooks ? gpt->hooks.params_release(gpt->hooks.arg, u, phase) : PX_OK;
}

static px_status_t g_acquire(px_gpt_t *gpt, int u, float **g)
{
    if (gpt->has_hooks)
        return gpt->hooks.grads_acquire(gpt->hooks.arg, u, g);
    *g = gpt->grads + gpt->unit_off[u];
    return PX_OK;
}

static px_status_t g_release(px_gpt_t *gpt, int u)
{
    return gpt->has_hooks ? gpt->hooks.grads_release(gpt->hooks.arg, u) : PX_OK;
}

/* ---- blocks: forward ---- */

px_gpt_ctx_t px_gpt_ctx_default(const px_gpt_t *gpt)
{
    return (px_gpt_ctx_t){.groups = NULL, .micro = 0, .seq_offset = 0, .B = gpt->B, .T = gpt->T};
}

static px_status_t ctx_check(const px_gpt_t *gpt, const px_gpt_ctx_t *ctx, int l)
{
    if (ctx->B <= 0 || ctx->T <= 0 || ctx->B > gpt->B || ctx->T > gpt->T || ctx->micro != 0 ||
        ctx->seq_offset < 0 || ctx->seq_offset + ctx->T > gpt->cfg.max_seq ||
        l < -1 || l >= gpt->cfg.layers ||
        (l >= 0 && (l < gpt->layer0 || l >= gpt->layer0 + gpt->nlayers))) {
        px_error("gpt: cannot run B %d T %d micro %d seq_offset %d layer %d (model: B %d T %d, "
                 "one micro-batch slot, max_seq %d, %d layers)", ctx->B, ctx->T, ctx->micro,
                 ctx->seq_offset, l, gpt->B, gpt->T, gpt->cfg.max_seq, gpt->cfg.layers);
        return PX_ERR_INVALID_ARGUMENT;
    }
    if (gpt->sp && (ctx->B * ctx->T) % gpt->tp) {
        px_error("gpt: sequence parallelism needs B*T = %d x %d divisible by tp=%d", ctx->B,
                 ctx->T, gpt->tp);
        return PX_ERR_INVALID_ARGUMENT;
    }
    if (gpt->cp > 1 && (ctx->B != gpt->B || ctx->T != gpt->T)) {
        px_error("gpt: with cp=%d the context must be the model's whole B %d x T %d (the ring's "
                 "blocks are sized for it), not %d x %d", gpt->cp, gpt->B, gpt->T, ctx->B,
                 ctx->T);
        return PX_ERR_INVALID_ARGUMENT;
    }
    return PX_OK;
}

/* Sequence parallelism: x (rows local token rows from global row row0 of
 * the (B,T) micro-batch) += wpe[t] of each row's position t. */
static void add_positions(const px_kernel_ops_t *k, float *x, const float *wpe, size_t row0,
                          size_t rows, int T, int C)
{
    for (size_t r = row0; r < row0 + rows;) {
        size_t t = r % (size_t)T, n = (size_t)T - t;
        if (n > row0 + rows - r)
            n = row0 + rows - r;
        k->residual_forward(x + (r - row0) * C, x + (r - row0) * C, wpe + t * C, n * C);
        r += n;
    }
}

/* Sequence parallelism: adds one pass's LayerNorm gradients dln[0, n*C)
 * (this rank's tokens' share), summed over the tensor group, into the n
 * gradient vectors dst[i] (C each): the same sum on every tensor rank,
 * so the replicated LayerNorms stay bitwise equal (Korthikanti et al.
 * 2022). Summed per pass, not on the accumulated gradients, so earlier
 * micro-batches are not counted twice. */
static px_status_t sp_ln_grads(px_gpt_t *gpt, px_comm_t *tpc, float *const *dst, int n)
{
    int C = gpt->cfg.dim;
    PX_CHECK(px_tp_allreduce(tpc, gpt->a.dln, (size_t)n * C, "LayerNorm gradients",
                             &gpt->tp_times));
    for (int i = 0; i < n; i++)
        gpt->ops->residual_forward(dst[i], dst[i], gpt->a.dln + (size_t)i * C, C);
    return PX_OK;
}

/* The tensor group of a model cut for tp > 1 (NULL when tp is 1): the
 * context's groups must carry one of tp ranks. */
static px_status_t tp_comm(const px_gpt_t *gpt, const px_gpt_ctx_t *ctx, px_comm_t **comm_p)
{
    px_comm_t *comm = NULL;
    *comm_p = NULL;
    if (gpt->tp == 1)
        return PX_OK;
    if (ctx->groups)
        comm = px_groups_comm(ctx->groups, PX_GROUP_TP);
    if (!comm || px_comm_size(comm) != gpt->tp) {
        px_error("gpt: the model is cut for tp=%d but the context's tensor group has %d ranks",
                 gpt->tp, comm ? px_comm_size(comm) : 1);
        return PX_ERR_INVALID_ARGUMENT;
    }
    *comm_p = comm;
    return PX_OK;
}

/* The context group of a model cut for cp > 1: the context's groups must
 * carry one of cp ranks. */
static px_status_t cp_comm(const px_gpt_t *gpt, const px_gpt_ctx_t *ctx, px_comm_t **comm_p)
{
    px_comm_t *comm = ctx->groups ? px_groups_comm(ctx->groups, PX_GROUP_CP) : NULL;
    if (!comm || px_comm_size(comm) != gpt->cp) {
        px_error("gpt: the model is cut for cp=%d but the context's context group has %d ranks",
                 gpt->cp, comm ? px_comm_size(comm) : 1);
        return PX_ERR_INVALID_ARGUMENT;
    }
    *comm_p = comm;
    return PX_OK;
}

/* Context parallelism: copies wpe's rows of this rank's T positions (its
 * two chunks, ring_attn.h) into wpe_loc (to_loc), or adds wpe_loc's rows
 * (their gradients) back into the two ranges of dwpe. */
static void cp_positions(px_gpt_t *gpt, int cp_rank, float *wpe, int to_loc)
{
    int T = gpt->T, c = T / 2, C = gpt->cfg.dim;
    for (int half = 0; half < 2; half++) {
        size_t p0 = (size_t)px_ring_position(cp_rank, gpt->cp, T, half * c) * C;
        float *loc = gpt->wpe_loc + (size_t)half * c * C;
        if (to_loc)
            gpt->ops->mem_copy(loc, wpe + p0, (size_t)c * C * sizeof(float));
        else
            gpt->ops->residual_forward(wpe + p0, wpe + p0, loc, (size_t)c * C);
    }
}

/* Row blocks a GEMM of the forward or backward is cut into, with a
 * progress poke after each, when the model has a progress hook: on one
 * host a collective's shared-memory steps move only inside a rank's
 * pokes, and a rank waiting for its peer's next step waits for the peer's
 * next poke (measured with PX_ZERO_WAIT_LOG: ZeRO-3's blocked time at dp 2
 * was mostly sleep, not copying), so pokes at a GEMM's quarters rather
 * than its end shorten that wait. Without a hook: one block. */
#define POKE_BLOCKS PX_GPT_POKE_BLOCKS

static int poke_blocks(const px_gpt_t *gpt)
{
    return gpt->has_hooks && gpt->hooks.progress ? POKE_BLOCKS : 1;
}

/* A GEMM's activation operand as stored: fp32 `f`, or bf16 bits `h`
 * (bf16 activation storage, the file's header); exactly one is set. */
typedef struct act {
    const float *f;
    const uint16_t *h;
} act_t;

/* rows [n0, ...) of a (rows, C) activation */
static act_t act_rows(act_t x, size_t n0, int C)
{
    if (x.h)
        x.h += n0 * (size_t)C;
    else
        x.f += n0 * (size_t)C;
    return x;
}

/* matmul_forward of an activation: matmul_bf16in_forward when it is bf16 */
static void mm_forward(const px_kernel_ops_t *k, float *out, act_t inp, const float *weight,
                       const float *bias, int N, int C, int OC)
{
    if (inp.h)
        k->matmul_bf16in_forward(out, inp.h, weight, bias, N, C, OC);
    else
        k->matmul_forward(out, inp.f, weight, bias, N, C, OC);
}

/* matmul_backward of an activation: matmul_bf16in_backward when bf16 */
static void mm_backward(const px_kernel_ops_t *k, float *dinp, float *dweight, float *dbias,
                        const float *dout, act_t inp, const float *weight, int N, int C, int OC)
{
    if (inp.h)
        k->matmul_bf16in_backward(dinp, dweight, dbias, dout, inp.h, weight, N, C, OC);
    else
        k->matmul_backward(dinp, dweight, dbias, dout, inp.f, weight, N, C, OC);
}

/* matmul_backward (px_kernels.h) as the input gradient's GEMM over
 * poke_blocks() row blocks of N with a progress poke after each (its rows
 * are independent: the same arithmetic as one call), then the weight's and
 * bias' in one call and a poke, so the collectives started before it
 * (ZeRO's gathers and reduce-scatters, the gradient buckets) advance
 * during a layer's backward, whose GEMMs are its longest kernels. */
static void matmul_backward_poked(px_gpt_t *gpt, float *dinp, float *dweight, float *dbias,
                                  const float *dout, act_t inp, const float *weight,
                                  int N, int C, int OC)
{
    int nb = poke_blocks(gpt);
    for (int b = 0; b < nb; b++) { /* rows of dinp: independent */
        int n0 = (int)((long)N * b / nb), n1 = (int)((long)N * (b + 1) / nb);
        mm_backward(gpt->ops, dinp + (size_t)n0 * C, NULL, NULL, dout + (size_t)n0 * OC, inp,
                    weight, n1 - n0, C, OC);
        poke(gpt);
    }
    /* dweight, dbias in one call: cut into row blocks their sums would
     * round per block, and in bf16 the single rank (no hook, one block)
     * and the parallel ranks would part by more than 1e-5 within 10 steps
     * (engine_bf16: grad norm 4.4e-5 at dp 2) */
    mm_backward(gpt->ops, NULL, dweight, dbias, dout, inp, weight, N, C, OC);
    poke(gpt);
}

/* matmul_forward (px_kernels.h; out (N,OC) = inp (N,C) @ weight^T + bias)
 * over poke_blocks() row blocks with a progress poke after each: rows are
 * independent, so the arithmetic is the one call's. */
static void matmul_forward_poked(px_gpt_t *gpt, float *out, act_t inp, const float *weight,
                                 const float *bias, int N, int C, int OC)
{
    int nb = poke_blocks(gpt);
    for (int b = 0; b < nb; b++) {
        int n0 = (int)((long)N * b / nb), n1 = (int)((long)N * (b + 1) / nb);
        mm_forward(gpt->ops, out + (size_t)n0 * OC, act_rows(inp, (size_t)n0, C), weight, bias,
                   n1 - n0, C, OC);
        poke(gpt);
    }
}

/* progress callback of the ring: the model's poke */
static void ring_poke(void *arg) { poke(arg); }

/* Row blocks the weight-gradient GEMM of a column-parallel matmul is cut
 * into, with a progress poke after each, so the input gradient's
 * collective started before it moves while it computes (the transport
 * progresses only while the caller is inside it). */
#define WGRAD_CHUNKS 8

/* Backward of a column-parallel matmul (Megatron-LM's f; Shoeybi et al.
 * 2019, section 3) with its collectives overlapped: dinp (N,C) = dout
 * (N,OC) @ weight (OC,C) (dinp zeroed here), then the collective on dinp
 * starts (all-reduce in place; with sequence parallelism a reduce-scatter
 * of this rank's N/tp rows into `local`, Korthikanti et al. 2022), then
 * dweight (OC,C) and dbias (OC) accumulate over WGRAD_CHUNKS row blocks,
 * poking between them, then the collective is waited for. inp (N,C) is
 * the forward input; with sequence parallelism it is first all-gathered
 * into `gathered` (N,C) from this rank's rows inp (N/tp,C), overlapped
 * with the dinp GEMM (Korthikanti et al. 2022, section 4.2.2); it is fp32
 * then (plan.h: no bf16 storage of the gathered tensors). tp 1: one
 * matmul_backward, no collective. */
static px_status_t col_backward(px_gpt_t *gpt, px_comm_t *tpc, float *dinp, float *local,
                                float *dweight, float *dbias, const float *dout,
                                act_t inp, float *gathered, const float *weight, int N,
                                int C, int OC, const char *what, const char *inp_what)
{
    const px_kernel_ops_t *k = gpt->ops;
    k->mem_set(dinp, 0, (size_t)N * C * sizeof(float));
    if (gpt->tp == 1) {
        matmul_backward_poked(gpt, dinp, dweight, dbias, dout, inp, weight, N, C, OC);
        return PX_OK;
    }
    if (gpt->sp) {
        if (!inp.f) {
            px_error("gpt: %s is stored as bf16 but sequence parallelism gathers fp32",
                     inp_what);
            return PX_ERR_INTERNAL;
        }
        PX_CHECK(px_tp_allgather_start(tpc, inp.f, gathered, (size_t)N / gpt->tp * C, inp_what,
                                       &gpt->tp_times, &gpt->pend));
        for (int c = 0; c < WGRAD_CHUNKS; c++) {
            int n0 = (int)((long)N * c / WGRAD_CHUNKS);
            int n1 = (int)((long)N * (c + 1) / WGRAD_CHUNKS);
            if (n1 > n0)
                k->matmul_backward(dinp + (size_t)n0 * C, NULL, NULL, dout + (size_t)n0 * OC,
                                   gathered, weight, n1 - n0, C, OC);
            poke(gpt);
        }
        PX_CHECK(px_tp_finish(&gpt->pend, &gpt->tp_times));
        inp = (act_t){.f = gathered};
    } else {
        mm_backward(k, dinp, NULL, NULL, dout, inp, weight, N, C, OC);
    }
    if (gpt->sp)
        PX_CHECK(px_tp_reduce_scatter_start(tpc, dinp, local, (size_t)N / gpt->tp * C, what,
                                            &gpt->tp_times, &gpt->pend));
    else
        PX_CHECK(px_tp_allreduce_start(tpc, dinp, (size_t)N * C, what, &gpt->tp_times,
                                       &gpt->pend));
    for (int c = 0; c < WGRAD_CHUNKS; c++) {
        int n0 = (int)((long)N * c / WGRAD_CHUNKS), n1 = (int)((long)N * (c + 1) / WGRAD_CHUNKS);
        if (n1 > n0)
            mm_backward(k, NULL, dweight, dbias, dout + (size_t)n0 * OC,
                        act_rows(inp, (size_t)n0, C), weight, n1 - n0, C, OC);
        poke(gpt);
    }
    return px_tp_finish(&gpt->pend, &gpt->tp_times);
}

/* The residual stream entering layer l (l = L: leaving the last layer). */
static float *residual_in(px_gpt_t *gpt, int l)
{
    size_t rc = gpt->rows * gpt->cfg.dim; /* create-time stride */
    /* a stage's input (layer0) lives where the embedding's output does */
    return l == gpt->layer0 ? gpt->a.encoded
                            : gpt->a.residual3 + (size_t)(l - 1 - gpt->layer0) * rc;
}

/* Layer l's slices of the per-layer activation buffers, at the create-time
 * strides: rows = the residual stream's rows (B*T, or B*T/tp with sequence
 * parallelism), B*T*Cl for the outputs of the split matrices. The one place
 * that knows those strides, for the forward and every backward. */
typedef struct layer_acts {
    float *ln1, *ln1_mean, *ln1_rstd; /* (R,C), (R), (R) */
    float *qkv, *atty, *att;          /* (B,T,3Cl), (B,T,Cl), (B,NHl,T,T) */
    float *res2;                      /* (R,C) */
    float *ln2, *ln2_mean, *ln2_rstd; /* (R,C), (R), (R) */
    float *fch, *fchg;                /* (B,T,4Cl) each */
    float *res3;                      /* (R,C) */
    /* bf16 storage (the file's header): ln1, ln2, fchg as bf16 here and
     * their float pointers above NULL; NULL where they are fp32 */
    uint16_t *ln1_h, *ln2_h, *fchg_h;
} layer_acts_t;

/* a stored activation as a GEMM operand: bf16 `h` when set, else fp32 `f` */
static act_t act_of(const float *f, const uint16_t *h)
{
    return h ? (act_t){.h = h} : (act_t){.f = f};
}

static void layer_acts(px_gpt_t *gpt, int l, layer_acts_t *v)
{
    gpt_acts_t *a = &gpt->a;
    size_t li = (size_t)(l - gpt->layer0); /* this model's slot of layer l */
    size_t sr = gpt->rows, src = sr * gpt->cfg.dim;
    size_t sbtcl = (size_t)gpt->B * gpt->T * gpt->Cl;
    v->ln1_h = v->ln2_h = v->fchg_h = NULL;
    if (gpt->ln_bf16) { /* bf16 elements at the same element strides */
        v->ln1_h = (uint16_t *)a->ln1 + li * src;
        v->ln2_h = (uint16_t *)a->ln2 + li * src;
    }
    if (gpt->fchg_bf16)
        v->fchg_h = (uint16_t *)a->fch_gelu + li * sbtcl * 4;
    v->ln1 = a->ln1 + li * src;
    v->ln1_mean = a->ln1_mean + li * sr;
    v->ln1_rstd = a->ln1_rstd + li * sr;
    v->qkv = a->qkv + li * sbtcl * 3;
    v->atty = a->atty + li * sbtcl;
    /* (B,NHl,T,T) probabilities, or (B,NHl,T) log-sum-exp per layer (cp > 1:
     * the ring's; the backend's fused attention: ops->att_lse_only) */
    v->att = a->att + li * gpt->att_stride;
    v->res2 = a->residual2 + li * src;
    v->ln2 = a->ln2 + li * src;
    v->ln2_mean = a->ln2_mean + li * sr;
    v->ln2_rstd = a->ln2_rstd + li * sr;
    v->fch = a->fch + li * sbtcl * 4;
    v->fchg = a->fch_gelu + li * sbtcl * 4;
    v->res3 = a->residual3 + li * src;
    if (v->ln1_h)
        v->ln1 = v->ln2 = NULL;
    if (v->fchg_h)
        v->fchg = NULL;
}

/* The head's LayerNorm output as a GEMM operand (bf16 or fp32) */
static act_t lnf_act(const px_gpt_t *gpt)
{
    return act_of(gpt->a.lnf, gpt->ln_bf16 ? (const uint16_t *)gpt->a.lnf : NULL);
}

void px_gpt_stage_io(px_gpt_t *gpt, int l, float **x_p, float **dx_p, size_t *n_p)
{
    *x_p = residual_in(gpt, l);
    *dx_p = gpt->a.dres;
    *n_p = gpt->rows * (size_t)gpt->cfg.dim;
}

/* ---- a block's seams: its working set, LayerNorm, the row-parallel
 * linear and attention, each in one place for the forward and every
 * backward ---- */

/* A transformer block's working set: the shapes, the tensor group, the
 * layer's activations, its input and its parameters (and gradients). */
typedef struct block {
    px_comm_t *tpc;           /* the tensor group (NULL: tp 1) */
    int B, T, BT, C, Cl, NHl; /* Cl = C/tp, NHl = NH/tp: this rank's channels
                                 and heads of the split matrices (tp.h) */
    int R;                    /* rows of the residual stream here (BT/tp with
                                 sequence parallelism: this rank's tokens) */
    int u;                    /* the layer's unit */
    size_t rc;                /* R x C */
    layer_acts_t la;
    const float *res;         /* the residual stream entering the layer */
    layer_view_t p, g;        /* parameters (phase >= 0), gradients (grads) */
} block_t;

/* Checks the context and acquires layer l's parameters for `phase` (0
 * forward, 1 backward; -1: none) and its gradients (grads), in that
 * order (ZeRO's hooks gather and reduce in it). */
static px_status_t block_begin(px_gpt_t *gpt, const px_gpt_ctx_t *ctx, int l, int phase,
                               int grads, block_t *b)
{
    float *lb, *lgb;
    PX_CHECK(ctx_check(gpt, ctx, l));
    PX_CHECK(tp_comm(gpt, ctx, &b->tpc));
    b->B = ctx->B;
    b->T = ctx->T;
    b->BT = b->B * b->T;
    b->C = gpt->cfg.dim;
    b->Cl = gpt->Cl;
    b->NHl = gpt->NHl;
    b->R = gpt->sp ? b->BT / gpt->tp : b->BT;
    b->rc = (size_t)b->R * b->C;
    b->u = px_model_unit_layer(&gpt->cfg, l);
    layer_acts(gpt, l, &b->la);
    b->res = residual_in(gpt, l);
    if (phase >= 0) {
        PX_CHECK(p_acquire(gpt, b->u, phase, &lb));
        view(gpt->layer_t, 12, lb, &b->p);
    }
    if (grads) {
        PX_CHECK(g_acquire(gpt, b->u, &lgb));
        view(gpt->layer_t, 12, lgb, &b->g);
    }
    return PX_OK;
}

/* LayerNorm of the block's R rows of x into its stored activation: fp32
 * `out`, or with bf16 storage (out_h set) fp32 in `scratch`, rounded into
 * out_h. *in_p: what the column-parallel matmul after it reads (with
 * sequence parallelism the rows all-gathered to (B,T,C) in spbuf); *f_p:
 * the same as fp32 values (the experts' router reads them). */
static px_status_t ln_forward(px_gpt_t *gpt, const block_t *b, float *out, uint16_t *out_h,
                              float *scratch, float *mean, float *rstd, const float *x,
                              const float *w, const float *bias, const char *what,
                              act_t *in_p, float **f_p)
{
    float *f = out_h ? scratch : out;
    gpt->ops->layernorm_forward(f, mean, rstd, x, w, bias, b->R, b->C);
    if (out_h)
        gpt->ops->bf16_from_f32(out_h, f, b->rc);
    *in_p = act_of(f, out_h);
    if (gpt->sp) {
        PX_CHECK(px_tp_allgather(b->tpc, out, gpt->a.spbuf, b->rc, what, &gpt->tp_times));
        f = gpt->a.spbuf;
        *in_p = act_of(f, NULL);
    }
    *f_p = f;
    return PX_OK;
}

/* Backward of a LayerNorm pass: adds its input gradient to dres (the
 * residual stream's); its gradient source is dbtc, or with sequence
 * parallelism this rank's rows in spbuf, whose weight and bias gradients
 * go to dln's pair `slot` (summed over the tensor group by sp_ln_grads)
 * instead of dw and db. */
static void ln_backward(px_gpt_t *gpt, const block_t *b, int slot, float *dw, float *db,
                        const float *x, const float *w, const float *mean, const float *rstd)
{
    gpt_acts_t *a = &gpt->a;
    if (gpt->sp)
        gpt->ops->layernorm_backward(a->dres, a->dln + (size_t)2 * slot * b->C,
                                     a->dln + (size_t)(2 * slot + 1) * b->C, a->spbuf, x, w,
                                     mean, rstd, b->R, b->C);
    else
        gpt->ops->layernorm_backward(a->dres, dw, db, a->dbtc, x, w, mean, rstd, b->BT, b->C);
}

/* Forward of a row-parallel linear (Megatron-LM's g; Shoeybi et al. 2019):
 * this rank's partial sums (BT,C) = in (BT,Cin) @ w^T, the sum over the
 * tensor group (with sequence parallelism a reduce-scatter to this rank's
 * tokens, Korthikanti et al. 2022), then the replicated bias once; tp 1:
 * one matmul with its bias. *out_p: the (R,C) result (tmp or spbuf). */
static px_status_t row_forward(px_gpt_t *gpt, const block_t *b, act_t in, const float *w,
                               const float *bias, int Cin, const char *what, float **out_p)
{
    gpt_acts_t *a = &gpt->a;
    const int split = gpt->tp > 1;
    float *out = a->tmp;
    matmul_forward_poked(gpt, a->tmp, in, w, split ? NULL : bias, b->BT, Cin, b->C);
    if (gpt->sp) {
        PX_CHECK(px_tp_reduce_scatter(b->tpc, a->tmp, a->spbuf, b->rc, what, &gpt->tp_times));
        out = a->spbuf;
    } else if (split) {
        PX_CHECK(px_tp_allreduce(b->tpc, a->tmp, (size_t)b->BT * b->C, what, &gpt->tp_times));
    }
    if (split)
        gpt->ops->bias_forward(out, bias, b->R, b->C);
    *out_p = out;
    return PX_OK;
}

/* Causal attention of this rank's heads: atty (B,T,Cl) and att (the
 * probabilities, or the log-sum-exp) from qkv (B,T,3Cl); with context
 * parallelism ring attention over the context group (ring_attn.h). */
static px_status_t attn_forward(px_gpt_t *gpt, const px_gpt_ctx_t *ctx, const block_t *b,
                                float *atty, float *att, const float *qkv)
{
    if (gpt->cp > 1) {
        px_comm_t *cpc;
        PX_CHECK(cp_comm(gpt, ctx, &cpc));
        PX_CHECK(px_ring_attn_forward(gpt->ring, cpc, atty, att, qkv, gpt->a.scratch, ring_poke,
                                      gpt));
    } else
        gpt->ops->attention_forward(atty, att, qkv, b->B, b->T, b->Cl, b->NHl);
    poke(gpt);
    return PX_OK;
}

/* Backward of attn_forward: dqkv (B,T,3Cl) from datty (B,T,Cl); atty is
 * the forward's output, which a backend's attention_backward_out reads
 * instead of computing it again. */
static px_status_t attn_backward(px_gpt_t *gpt, const px_gpt_ctx_t *ctx, const block_t *b,
                                 float *dqkv, float *datty, const float *qkv, const float *atty,
                                 const float *att)
{
    if (gpt->cp > 1) {
        px_comm_t *cpc;
        PX_CHECK(cp_comm(gpt, ctx, &cpc));
        PX_CHECK(px_ring_attn_backward(gpt->ring, cpc, dqkv, datty, qkv, atty, att,
                                       gpt->a.scratch, ring_poke, gpt));
    } else if (gpt->ops->attention_backward_out) /* the backend reads the saved output */
        gpt->ops->attention_backward_out(dqkv, gpt->a.scratch, datty, qkv, atty, att, b->B, b->T,
                                         b->Cl, b->NHl);
    else
        gpt->ops->attention_backward(dqkv, gpt->a.scratch, datty, qkv, att, b->B, b->T, b->Cl,
                                     b->NHl);
    poke(gpt);
    return PX_OK;
}

/* Whether layer l computes the mixture of experts instead of the MLP */
static int moe_layer(const px_gpt_t *gpt, int l)
{
    return gpt->moe && px_moe_is_layer(px_moe_config(gpt->moe), l);
}

px_status_t px_gpt_embed_forward(px_gpt_t *gpt, const px_gpt_ctx_t *ctx, const int32_t *inputs)
{
    embed_view_t e;
    float *ub;
    px_comm_t *tpc;
    PX_CHECK(ctx_check(gpt, ctx, -1));
    PX_CHECK(tp_comm(gpt, ctx, &tpc));
    PX_CHECK(p_acquire(gpt, PX_MODEL_UNIT_EMBED, 0, &ub));
    gpt->embed_p = ub;
    view(gpt->embed_t, 2, ub, &e);
    const float *wpe = e.wpe + (size_t)ctx->seq_offset * gpt->cfg.dim;
    gpt->inputs = inputs;
    if (gpt->cp > 1) { /* this rank's positions: its two chunks */
        px_comm_t *cpc;
        PX_CHECK(cp_comm(gpt, ctx, &cpc));
        cp_positions(gpt, px_comm_rank(cpc), e.wpe, 1);
        wpe = gpt->wpe_loc;
    }
    if (gpt->sp) { /* vocab-parallel lookup, reduce-scattered to this rank's tokens */
        size_t BT = (size_t)ctx->B * ctx->T, rows = BT / gpt->tp, C = gpt->cfg.dim;
        gpt->ops->encoder_vp_forward(gpt->a.tmp, inputs, e.wte, NULL, ctx->B, ctx->T, (int)C,
                                     gpt->v0, gpt->Vl);
        PX_CHECK(px_tp_reduce_scatter(tpc, gpt->a.tmp, gpt->a.encoded, rows * C,
                                      "the embedding lookup", &gpt->tp_times));
        add_positions(gpt->ops, gpt->a.encoded, wpe, (size_t)gpt->cfg.tp_rank * rows, rows,
                      ctx->T, (int)C);
        return PX_OK;
    }
    if (gpt->tp > 1) /* vocab-parallel: this rank's rows, summed over tp */
        return px_tp_embed_forward(gpt->ops, tpc, gpt->a.encoded, inputs, e.wte, wpe, ctx->B,
                                   ctx->T, gpt->cfg.dim, gpt->v0, gpt->Vl, &gpt->tp_times);
    gpt->ops->encoder_forward(gpt->a.encoded, inputs, e.wte, wpe, ctx->B, ctx->T, gpt->cfg.dim);
    return PX_OK;
}

px_status_t px_gpt_block_forward(px_gpt_t *gpt, const px_gpt_ctx_t *ctx, int l)
{
    const px_kernel_ops_t *k = gpt->ops;
    gpt_acts_t *a = &gpt->a;
    block_t b;
    act_t ln_in; /* what a column-parallel matmul reads */
    float *ln_f, *proj;
    PX_CHECK(block_begin(gpt, ctx, l, 0, 0, &b));
    const layer_acts_t *la = &b.la;
    const layer_view_t *p = &b.p;
    const int BT = b.BT, C = b.C, Cl = b.Cl;

    /* attention: ln1 (bf16 storage: fp32 in tmp, free until attproj), qkv
     * (B,T,3Cl) column-parallel (q | k | v of this rank's heads), attention,
     * attproj row-parallel, the residual */
    PX_CHECK(ln_forward(gpt, &b, la->ln1, la->ln1_h, a->tmp, la->ln1_mean, la->ln1_rstd, b.res,
                        p->ln1w, p->ln1b, "ln1", &ln_in, &ln_f));
    matmul_forward_poked(gpt, la->qkv, ln_in, p->qkvw, p->qkvb, BT, C, 3 * Cl);
    PX_CHECK(attn_forward(gpt, ctx, &b, la->atty, la->att, la->qkv));
    PX_CHECK(row_forward(gpt, &b, act_of(la->atty, NULL), p->attprojw, p->attprojb, Cl,
                         "attproj", &proj));
    k->residual_forward(la->res2, b.res, proj, b.rc);
    /* MLP: ln2 (bf16 storage: fp32 in dbtc, a backward work buffer free here:
     * tmp holds the experts' output below) */
    PX_CHECK(ln_forward(gpt, &b, la->ln2, la->ln2_h, a->dbtc, la->ln2_mean, la->ln2_rstd,
                        la->res2, p->ln2w, p->ln2b, "ln2", &ln_in, &ln_f));
    if (moe_layer(gpt, l)) {
        /* the mixture of experts instead of the dense MLP; with tp every
         * tensor rank computes it whole on the whole ln2 (moe.h: experts
         * replicated over the tensor group), so no tp collective follows;
         * with sequence parallelism this rank adds its R rows */
        PX_CHECK(px_moe_forward_slot(gpt->moe, gpt->moe_slot, l, ln_f, a->tmp, BT));
        k->residual_forward(la->res3, la->res2,
                            a->tmp + (gpt->sp ? (size_t)gpt->cfg.tp_rank * b.rc : 0), b.rc);
        return p_release(gpt, b.u, 0);
    }
    /* fc (B,T,4Cl) column-parallel, GELU (bf16 storage: fp32 in d4a, the
     * backward's work space, rounded), fcproj row-parallel */
    matmul_forward_poked(gpt, la->fch, ln_in, p->fcw, p->fcb, BT, C, 4 * Cl);
    if (la->fchg_h) {
        k->gelu_forward(a->d4a, la->fch, (size_t)BT * 4 * Cl);
        k->bf16_from_f32(la->fchg_h, a->d4a, (size_t)BT * 4 * Cl);
    } else {
        k->gelu_forward(la->fchg, la->fch, (size_t)BT * 4 * Cl);
    }
    PX_CHECK(row_forward(gpt, &b, act_of(la->fchg, la->fchg_h), p->fcprojw, p->fcprojb, 4 * Cl,
                         "fcproj", &proj));
    k->residual_forward(la->res3, la->res2, proj, b.rc);
    return p_release(gpt, b.u, 0);
}

px_status_t px_gpt_head_forward(px_gpt_t *gpt, const px_gpt_ctx_t *ctx, const int32_t *targets,
                                float *loss_p)
{
    const px_kernel_ops_t *k = gpt->ops;
    gpt_acts_t *a = &gpt->a;
    px_comm_t *tpc;
    PX_CHECK(ctx_check(gpt, ctx, -1));
    PX_CHECK(tp_comm(gpt, ctx, &tpc));
    /* Vl: this rank's logit columns (vocab-parallel head, tied to its wte
     * rows); Vp when tp is 1 */
    int BT = ctx->B * ctx->T, C = gpt->cfg.dim, V = gpt->cfg.vocab, Vl = gpt->Vl;
    embed_view_t e;
    head_view_t h;
    float *hb;

    if (!gpt->embed_p) /* a last pipeline stage: the tied wte without the lookup */
        PX_CHECK(p_acquire(gpt, PX_MODEL_UNIT_EMBED, 0, &gpt->embed_p));
    PX_CHECK(p_acquire(gpt, px_model_unit_head(&gpt->cfg), 0, &hb));
    view(gpt->head_t, 2, hb, &h);
    view(gpt->embed_t, 2, gpt->embed_p, &e);
    /* lnf of this rank's tokens (all-gathered with sequence parallelism) */
    int R = gpt->sp ? BT / gpt->tp : BT;
    act_t lnf_in = lnf_act(gpt);
    /* bf16 storage: fp32 in tmp (free here), rounded into lnf */
    float *lnf_f = lnf_in.h ? a->tmp : a->lnf;
    k->layernorm_forward(lnf_f, a->lnf_mean, a->lnf_rstd, residual_in(gpt, gpt->cfg.layers),
                         h.lnfw, h.lnfb, R, C);
    if (lnf_in.h)
        k->bf16_from_f32((uint16_t *)a->lnf, lnf_f, (size_t)R * C);
    if (gpt->sp) {
        PX_CHECK(px_tp_allgather(tpc, a->lnf, a->spbuf, (size_t)R * C, "lnf", &gpt->tp_times));
        lnf_in = act_of(a->spbuf, NULL);
    }
    mm_forward(k, a->logits, lnf_in, e.wte, NULL, BT, C, Vl);
    poke(gpt);
    gpt->targets = targets;
    if (targets) {
        if (gpt->tp > 1)
            PX_CHECK(px_tp_crossentropy_forward(k, tpc, a->losses, a->probs, a->logits, targets,
                                                a->rowmax, gpt->ce_stats, BT, V, gpt->v0, Vl,
                                                &gpt->tp_times));
        else
            k->crossentropy_forward(a->losses, a->probs, a->logits, targets, BT, V, Vl);
        k->mem_copy_to_host(gpt->losses_host, a->losses, (size_t)BT * sizeof(float));
        double s = 0.0;
        for (int i = 0; i < BT; i++)
            s += gpt->losses_host[i];
        *loss_p = (float)(s / BT);
    }
    return PX_OK;
}

const float *px_gpt_logits(const px_gpt_t *gpt)
{
    return gpt->a.logits;
}

px_status_t px_gpt_forward_ctx(px_gpt_t *gpt, const px_gpt_ctx_t *ctx, const int32_t *inputs,
                               const int32_t *targets, float *loss_p)
{
    PX_CHECK(px_gpt_embed_forward(gpt, ctx, inputs));
    for (int l = 0; l < gpt->cfg.layers; l++)
        PX_CHECK(px_gpt_block_forward(gpt, ctx, l));
    return px_gpt_head_forward(gpt, ctx, targets, loss_p);
}

px_status_t px_gpt_forward_end(px_gpt_t *gpt)
{
    if (!gpt->embed_p)
        return PX_OK; /* no forward in flight */
    gpt->embed_p = NULL;
    PX_CHECK(p_release(gpt, px_model_unit_head(&gpt->cfg), 0));
    return p_release(gpt, PX_MODEL_UNIT_EMBED, 0);
}

px_status_t px_gpt_forward(px_gpt_t *gpt, const int32_t *inputs, const int32_t *targets,
                           float *loss_p)
{
    px_gpt_ctx_t ctx = px_gpt_ctx_default(gpt);
    return px_gpt_forward_ctx(gpt, &ctx, inputs, targets, loss_p);
}

void px_gpt_zero_grad(px_gpt_t *gpt)
{
    gpt->ops->mem_set(gpt->grads, 0, (gpt->num_params + 1) * sizeof(float));
}

/* ---- blocks: backward ---- */

px_status_t px_gpt_head_backward(px_gpt_t *gpt, const px_gpt_ctx_t *ctx)
{
    const px_kernel_ops_t *k = gpt->ops;
    gpt_acts_t *a = &gpt->a;
    px_comm_t *tpc;
    PX_CHECK(ctx_check(gpt, ctx, -1));
    PX_CHECK(tp_comm(gpt, ctx, &tpc));
    int BT = ctx->B * ctx->T, C = gpt->cfg.dim, V = gpt->cfg.vocab, Vl = gpt->Vl;
    int E = PX_MODEL_UNIT_EMBED, H = px_model_unit_head(&gpt->cfg);
    size_t btc = (size_t)BT * C;
    float *hb, *eb, *hgb, *egb;
    embed_view_t e, eg;
    head_view_t h, hg;

    if (!gpt->targets) {
        px_error("gpt: backward needs a forward with targets");
        return PX_ERR_INVALID_ARGUMENT;
    }
    PX_CHECK(p_acquire(gpt, H, 1, &hb));
    PX_CHECK(p_acquire(gpt, E, 1, &eb));
    PX_CHECK(g_acquire(gpt, H, &hgb));
    PX_CHECK(g_acquire(gpt, E, &egb));
    gpt->embed_g = egb;
    view(gpt->head_t, 2, hb, &h);
    view(gpt->head_t, 2, hgb, &hg);
    view(gpt->embed_t, 2, eb, &e);
    view(gpt->embed_t, 2, egb, &eg);
    /* loss = mean over BT tokens; padded columns get no gradient. In
     * place: dlogits replaces the probabilities (no zeroing, px_kernels.h) */
    if (gpt->tp > 1)
        k->crossentropy_vp_backward(a->dlogits, a->probs, gpt->targets, 1.0f / BT, BT, Vl,
                                    gpt->v0, V);
    else
        k->crossentropy_backward(a->dlogits, a->probs, gpt->targets, 1.0f / BT, BT, V, Vl);
    /* the head is column-parallel over the vocab: f sums its input grad
     * (sequence parallelism: reduce-scatters it to this rank's tokens),
     * overlapped with wte's gradient GEMM */
    PX_CHECK(col_backward(gpt, tpc, a->dbtc, a->spbuf, gpt->wstash ? NULL : eg.wte, NULL,
                          a->dlogits, lnf_act(gpt), a->tmp, e.wte, BT, C, Vl,
                          "the LM head's input gradient", "lnf"));
    if (gpt->sp) {
        int R = BT / gpt->tp;
        size_t rc = (size_t)R * C;
        float *dst[2] = {hg.lnfw, hg.lnfb};
        k->mem_set(a->dres, 0, rc * sizeof(float));
        k->mem_set(a->dln, 0, 2 * (size_t)C * sizeof(float));
        k->layernorm_backward(a->dres, a->dln, a->dln + C, a->spbuf,
                              residual_in(gpt, gpt->cfg.layers), h.lnfw, a->lnf_mean,
                              a->lnf_rstd, R, C);
        PX_CHECK(sp_ln_grads(gpt, tpc, dst, 2));
    } else {
        k->mem_set(a->dres, 0, btc * sizeof(float));
        k->layernorm_backward(a->dres, hg.lnfw, hg.lnfb, a->dbtc,
                              residual_in(gpt, gpt->cfg.layers), h.lnfw, a->lnf_mean,
                              a->lnf_rstd, BT, C);
    }
    gpt->embed_p = NULL; /* released below: the next forward acquires it again */
    PX_CHECK(p_release(gpt, H, 1));
    PX_CHECK(p_release(gpt, E, 1));
    return g_release(gpt, H);
}

px_status_t px_gpt_block_backward(px_gpt_t *gpt, const px_gpt_ctx_t *ctx, int l)
{
    const px_kernel_ops_t *k = gpt->ops;
    gpt_acts_t *a = &gpt->a;
    block_t b;
    PX_CHECK(block_begin(gpt, ctx, l, 1, 1, &b));
    const layer_acts_t *la = &b.la;
    const layer_view_t *p = &b.p, *g = &b.g;
    const int BT = b.BT, C = b.C, Cl = b.Cl;
    const size_t btcl = (size_t)BT * Cl;
    const act_t ln1 = act_of(la->ln1, la->ln1_h), ln2 = act_of(la->ln2, la->ln2_h);

    /* dres is d(residual3): the MLP branch. The row-parallel matmuls read
     * the whole (B,T,C) output gradient: with sequence parallelism dres
     * holds this rank's R tokens, all-gathered here (the backward of the
     * forward's reduce-scatter); without, it is replicated, so the
     * replicated biases' gradients are the same on every tp rank */
    const float *dout = a->dres;
    if (gpt->sp) {
        PX_CHECK(px_tp_allgather(b.tpc, a->dres, a->spbuf, b.rc, "d(residual3)",
                                 &gpt->tp_times));
        dout = a->spbuf;
        k->mem_set(a->dln, 0, 4 * (size_t)C * sizeof(float));
    }
    if (moe_layer(gpt, l)) {
        /* the mixture of experts: d ln2 (B,T,C) into dbtc, the same on
         * every tensor rank (computed whole: no sum over tp); with sequence
         * parallelism on the re-gathered ln2, this rank's R rows of it to
         * spbuf (where the dense path's reduce-scatter puts them) */
        const float *x2 = ln2.f;
        if (gpt->sp) {
            PX_CHECK(px_tp_allgather(b.tpc, ln2.f, a->tmp, b.rc, "ln2", &gpt->tp_times));
            x2 = a->tmp;
        } else if (ln2.h) { /* widened: the router rounds it to these values again */
            k->bf16_to_f32(a->tmp, ln2.h, b.rc);
            x2 = a->tmp;
        }
        PX_CHECK(px_moe_backward_slot(gpt->moe, gpt->moe_slot, l, x2, dout, a->dbtc, BT));
        if (gpt->sp)
            k->mem_copy(a->spbuf, a->dbtc + (size_t)gpt->cfg.tp_rank * b.rc,
                        b.rc * sizeof(float));
    } else {
        k->mem_set(a->d4a, 0, btcl * 4 * sizeof(float));
        matmul_backward_poked(gpt, a->d4a, g->fcprojw, g->fcprojb, dout,
                              act_of(la->fchg, la->fchg_h), p->fcprojw, BT, 4 * Cl, C);
        k->mem_set(a->d4b, 0, btcl * 4 * sizeof(float));
        k->gelu_backward(a->d4b, la->fch, a->d4a, btcl * 4);
        /* fc is column-parallel: f sums its input gradient over tp (sequence
         * parallelism: reduce-scatters it to this rank's tokens), overlapped
         * with fcw's gradient GEMM */
        PX_CHECK(col_backward(gpt, b.tpc, a->dbtc, a->spbuf, g->fcw, g->fcb, a->d4b, ln2,
                              a->tmp, p->fcw, BT, C, 4 * Cl, "fc's input gradient", "ln2"));
    }
    ln_backward(gpt, &b, 1, g->ln2w, g->ln2b, la->res2, p->ln2w, la->ln2_mean, la->ln2_rstd);
    if (gpt->sp)
        PX_CHECK(px_tp_allgather(b.tpc, a->dres, a->spbuf, b.rc, "d(residual2)",
                                 &gpt->tp_times));
    /* dres is d(residual2): the attention branch; attproj row-parallel,
     * attention, qkv column-parallel (f, overlapped with qkvw's gradient
     * GEMM) */
    k->mem_set(a->dbtc, 0, btcl * sizeof(float));
    matmul_backward_poked(gpt, a->dbtc, g->attprojw, g->attprojb, dout, act_of(la->atty, NULL),
                          p->attprojw, BT, Cl, C);
    k->mem_set(a->d4a, 0, btcl * 3 * sizeof(float));
    PX_CHECK(attn_backward(gpt, ctx, &b, a->d4a, a->dbtc, la->qkv, la->atty, la->att));
    PX_CHECK(col_backward(gpt, b.tpc, a->dbtc, a->spbuf, g->qkvw, g->qkvb, a->d4a, ln1, a->tmp,
                          p->qkvw, BT, C, 3 * Cl, "qkv's input gradient", "ln1"));
    ln_backward(gpt, &b, 0, g->ln1w, g->ln1b, b.res, p->ln1w, la->ln1_mean, la->ln1_rstd);
    if (gpt->sp) {
        float *dst[4] = {g->ln1w, g->ln1b, g->ln2w, g->ln2b};
        PX_CHECK(sp_ln_grads(gpt, b.tpc, dst, 4));
    }
    /* dres is now d(input of layer l) */
    PX_CHECK(p_release(gpt, b.u, 1));
    return g_release(gpt, b.u);
}

/* ---- split backward (zero bubble: Qi et al. 2024) ---- */

px_status_t px_gpt_set_split_backward(px_gpt_t *gpt)
{
    if (gpt->tp > 1) {
        px_error("gpt: the split backward (zero-bubble schedules) runs with tp 1 only (tp %d)",
                 gpt->tp);
        return PX_ERR_INVALID_ARGUMENT;
    }
    if (gpt->wstash)
        return PX_OK;
    gpt->wstash = px_mem_calloc(PX_MEM_ACTS, (size_t)gpt->nlayers * gpt->B * gpt->T * 9 *
                                                 gpt->cfg.dim, sizeof(float));
    return gpt->wstash ? PX_OK : PX_ERR_NO_MEMORY;
}

px_status_t px_gpt_block_backward_input(px_gpt_t *gpt, const px_gpt_ctx_t *ctx, int l)
{
    const px_kernel_ops_t *k = gpt->ops;
    gpt_acts_t *a = &gpt->a;
    block_t b;
    if (!gpt->wstash) {
        px_error("gpt: block_backward_input needs px_gpt_set_split_backward");
        return PX_ERR_INVALID_ARGUMENT;
    }
    /* tp 1 here (px_gpt_set_split_backward): rows = B*T, Cl = C */
    PX_CHECK(block_begin(gpt, ctx, l, 1, 1, &b));
    const layer_acts_t *la = &b.la;
    const layer_view_t *p = &b.p, *g = &b.g;
    const int BT = b.BT, C = b.C;
    const size_t btc = (size_t)BT * C, sbt = (size_t)gpt->B * gpt->T;
    float *st = gpt->wstash + (size_t)(l - gpt->layer0) * sbt * 9 * C;
    float *d_fcproj = st, *d_fc = st + sbt * C, *d_attproj = st + sbt * 5 * C,
          *d_qkv = st + sbt * 6 * C;

    /* MLP branch: dres is d(residual3) = d(fcproj out) */
    k->mem_copy(d_fcproj, a->dres, btc * sizeof(float));
    k->mem_set(a->d4a, 0, btc * 4 * sizeof(float));
    k->matmul_backward(a->d4a, NULL, NULL, d_fcproj, NULL, p->fcprojw, BT, 4 * C, C);
    k->mem_set(d_fc, 0, btc * 4 * sizeof(float));
    k->gelu_backward(d_fc, la->fch, a->d4a, btc * 4);
    poke(gpt);
    k->mem_set(a->dbtc, 0, btc * sizeof(float));
    k->matmul_backward(a->dbtc, NULL, NULL, d_fc, NULL, p->fcw, BT, C, 4 * C);
    poke(gpt);
    ln_backward(gpt, &b, 1, g->ln2w, g->ln2b, la->res2, p->ln2w, la->ln2_mean, la->ln2_rstd);
    /* attention branch: dres is d(residual2) = d(attproj out); the ring's
     * backward is an input gradient: B, not W */
    k->mem_copy(d_attproj, a->dres, btc * sizeof(float));
    k->mem_set(a->dbtc, 0, btc * sizeof(float));
    k->matmul_backward(a->dbtc, NULL, NULL, d_attproj, NULL, p->attprojw, BT, C, C);
    k->mem_set(d_qkv, 0, btc * 3 * sizeof(float));
    PX_CHECK(attn_backward(gpt, ctx, &b, d_qkv, a->dbtc, la->qkv, la->atty, la->att));
    k->mem_set(a->dbtc, 0, btc * sizeof(float));
    k->matmul_backward(a->dbtc, NULL, NULL, d_qkv, NULL, p->qkvw, BT, C, 3 * C);
    poke(gpt);
    ln_backward(gpt, &b, 0, g->ln1w, g->ln1b, b.res, p->ln1w, la->ln1_mean, la->ln1_rstd);
    PX_CHECK(p_release(gpt, b.u, 1));
    return g_release(gpt, b.u);
}

px_status_t px_gpt_block_backward_weight(px_gpt_t *gpt, const px_gpt_ctx_t *ctx, int l)
{
    const px_kernel_ops_t *k = gpt->ops;
    block_t b;
    if (!gpt->wstash) {
        px_error("gpt: block_backward_weight needs px_gpt_set_split_backward");
        return PX_ERR_INVALID_ARGUMENT;
    }
    /* tp 1 here (px_gpt_set_split_backward): rows = B*T, Cl = C */
    PX_CHECK(block_begin(gpt, ctx, l, -1, 1, &b));
    const layer_acts_t *la = &b.la;
    const layer_view_t *g = &b.g;
    const int BT = b.BT, C = b.C;
    const size_t sbt = (size_t)gpt->B * gpt->T;
    float *st = gpt->wstash + (size_t)(l - gpt->layer0) * sbt * 9 * C;

    mm_backward(k, NULL, g->fcprojw, g->fcprojb, st, act_of(la->fchg, la->fchg_h), NULL, BT,
                4 * C, C);
    poke(gpt);
    mm_backward(k, NULL, g->fcw, g->fcb, st + sbt * C, act_of(la->ln2, la->ln2_h), NULL, BT, C,
                4 * C);
    poke(gpt);
    k->matmul_backward(NULL, g->attprojw, g->attprojb, st + sbt * 5 * C, la->atty, NULL, BT, C,
                       C);
    poke(gpt);
    mm_backward(k, NULL, g->qkvw, g->qkvb, st + sbt * 6 * C, act_of(la->ln1, la->ln1_h), NULL,
                BT, C, 3 * C);
    poke(gpt);
    return g_release(gpt, b.u);
}

px_status_t px_gpt_head_backward_weight(px_gpt_t *gpt, const px_gpt_ctx_t *ctx)
{
    float *egb;
    embed_view_t eg;
    if (!gpt->wstash) {
        px_error("gpt: head_backward_weight needs px_gpt_set_split_backward");
        return PX_ERR_INVALID_ARGUMENT;
    }
    PX_CHECK(ctx_check(gpt, ctx, -1));
    PX_CHECK(g_acquire(gpt, PX_MODEL_UNIT_EMBED, &egb));
    view(gpt->embed_t, 2, egb, &eg);
    /* d wte (Vp,C) += dlogits^T (Vp,BT) @ lnf (BT,C): the tied head */
    mm_backward(gpt->ops, NULL, eg.wte, NULL, gpt->a.dlogits, lnf_act(gpt), NULL,
                ctx->B * ctx->T, gpt->cfg.dim, gpt->Vl);
    poke(gpt);
    return g_release(gpt, PX_MODEL_UNIT_EMBED);
}

px_status_t px_gpt_embed_backward(px_gpt_t *gpt, const px_gpt_ctx_t *ctx)
{
    embed_view_t eg;
    PX_CHECK(ctx_check(gpt, ctx, -1));
    if (!gpt->inputs) {
        px_error("gpt: embed_backward needs embed_forward first");
        return PX_ERR_INVALID_ARGUMENT;
    }
    if (!gpt->embed_g) /* a first pipeline stage: no head here */
        PX_CHECK(g_acquire(gpt, PX_MODEL_UNIT_EMBED, &gpt->embed_g));
    view(gpt->embed_t, 2, gpt->embed_g, &eg);
    float *dwpe = eg.wpe + (size_t)ctx->seq_offset * gpt->cfg.dim;
    px_comm_t *cpc = NULL;
    if (gpt->cp > 1) { /* gathered in wpe_loc, added to the two chunks' rows below */
        PX_CHECK(cp_comm(gpt, ctx, &cpc));
        gpt->ops->mem_set(gpt->wpe_loc, 0, (size_t)ctx->T * gpt->cfg.dim * sizeof(float));
        dwpe = gpt->wpe_loc;
    }
    if (gpt->sp) { /* the lookup saw every token: gather their gradients */
        px_comm_t *tpc;
        size_t rows = (size_t)ctx->B * ctx->T / gpt->tp;
        PX_CHECK(tp_comm(gpt, ctx, &tpc));
        PX_CHECK(px_tp_allgather(tpc, gpt->a.dres, gpt->a.spbuf, rows * gpt->cfg.dim,
                                 "d(embedding)", &gpt->tp_times));
        gpt->ops->encoder_vp_backward(eg.wte, dwpe, gpt->a.spbuf, gpt->inputs, ctx->B, ctx->T,
                                      gpt->cfg.dim, gpt->v0, gpt->Vl);
    } else if (gpt->tp > 1) /* this rank's vocab rows; wpe's gradient is replicated */
        gpt->ops->encoder_vp_backward(eg.wte, dwpe, gpt->a.dres, gpt->inputs, ctx->B, ctx->T,
                                      gpt->cfg.dim, gpt->v0, gpt->Vl);
    else
        gpt->ops->encoder_backward(eg.wte, dwpe, gpt->a.dres, gpt->inputs, ctx->B, ctx->T,
                                   gpt->cfg.dim);
    if (cpc)
        cp_positions(gpt, px_comm_rank(cpc), eg.wpe, 0);
    gpt->embed_g = NULL;
    return g_release(gpt, PX_MODEL_UNIT_EMBED);
}

px_status_t px_gpt_backward_ctx(px_gpt_t *gpt, const px_gpt_ctx_t *ctx)
{
    PX_CHECK(px_gpt_head_backward(gpt, ctx));
    for (int l = gpt->cfg.layers - 1; l >= 0; l--)
        PX_CHECK(px_gpt_block_backward(gpt, ctx, l));
    return px_gpt_embed_backward(gpt, ctx);
}

px_status_t px_gpt_backward(px_gpt_t *gpt)
{
    px_gpt_ctx_t ctx = px_gpt_ctx_default(gpt);
    return px_gpt_backward_ctx(gpt, &ctx);
}

void px_gpt_update(px_gpt_t *gpt, const px_adamw_t *hp)
{
    for (int u = 0; u < px_gpt_num_units(&gpt->cfg); u++) {
        px_gpt_unit_tensor_t ut[PX_MODEL_MAX_UNIT_TENSORS];
        int n = px_gpt_unit_tensors(&gpt->cfg, u, ut);
        for (int j = 0; j < n; j++) {
            size_t o = gpt->unit_off[u] + ut[j].unit_offset;
            px_adamw_step(gpt->ops, hp, ut[j].decay, 1.0f, gpt->params + o, gpt->grads + o,
                          gpt->m + o, gpt->v + o, ut[j].size);
        }
    }
}
