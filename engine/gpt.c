/* gpt.c: GPT-2 style model, forward and backward through the op table.
 *
 * Follows llm.c's train_gpt2.c (Karpathy, MIT) for the parameter layout and
 * the order of ops. Differences: the attention and MLP projection outputs
 * share one temporary (they are not needed by backward), and backward uses
 * a handful of reusable gradient buffers instead of a full mirror of the
 * activations: the residual-stream gradient `dres` accumulates from the top
 * of the network down (a residual add is the identity in backward, so it
 * needs no op).
 *
 * Layout: parameters are units (gpt.h): the root unit (wte, wpe, lnfw, lnfb)
 * and one unit per layer, so ZeRO-3 can gather one layer at a time. A model
 * either owns one flat buffer of units (params/grads/m/v, num_params each,
 * grads one more: a spare slot for the trainer) or asks its hooks for each
 * unit (px_gpt_create_external). Every pointer in `acts` points into one
 * buffer sized at create time for (B, T). One thread per model. */
#include "gpt.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "memacct.h"
#include "plan.h"
#include "px_log.h"

typedef struct gpt_acts {
    float *encoded;   /* (B,T,C) */
    float *ln1;       /* (L,B,T,C) */
    float *ln1_mean;  /* (L,B,T) */
    float *ln1_rstd;  /* (L,B,T) */
    float *qkv;       /* (L,B,T,3C) */
    float *atty;      /* (L,B,T,C) */
    float *att;       /* (L,B,NH,T,T) */
    float *residual2; /* (L,B,T,C) */
    float *ln2;       /* (L,B,T,C) */
    float *ln2_mean;  /* (L,B,T) */
    float *ln2_rstd;  /* (L,B,T) */
    float *fch;       /* (L,B,T,4C) */
    float *fch_gelu;  /* (L,B,T,4C) */
    float *residual3; /* (L,B,T,C) */
    float *lnf;       /* (B,T,C) */
    float *lnf_mean;  /* (B,T) */
    float *lnf_rstd;  /* (B,T) */
    float *logits;    /* (B,T,V) */
    float *probs;     /* (B,T,V) */
    float *losses;    /* (B,T) */
    float *tmp;       /* (B,T,C): projection outputs before the residual add */
    /* backward work space */
    float *dres;      /* (B,T,C) residual-stream gradient */
    float *dbtc;      /* (B,T,C) */
    float *d4a;       /* (B,T,4C) also dqkv (B,T,3C) */
    float *d4b;       /* (B,T,4C) */
    float *dlogits;   /* (B,T,V) */
    float *scratch;   /* (T,T) attention backward */
} gpt_acts_t;
#define GPT_NUM_ACTS (sizeof(gpt_acts_t) / sizeof(float *))

struct px_gpt {
    px_gpt_config_t cfg;
    const px_kernel_ops_t *ops;
    int B, T;
    size_t sizes[PX_GPT_NUM_TENSORS];
    size_t num_params;
    float *params, *grads, *m, *v; /* owned mode only */
    px_gpt_hooks_t hooks;          /* external mode (has_hooks) */
    int has_hooks;
    gpt_acts_t a;
    float *acts_mem;
    size_t acts_count;
    const int32_t *inputs, *targets; /* of the last forward, borrowed */
};

static const char *tensor_names[PX_GPT_NUM_TENSORS] = {
    "wte", "wpe", "ln1w", "ln1b", "qkvw", "qkvb", "attprojw", "attprojb",
    "ln2w", "ln2b", "fcw", "fcb", "fcprojw", "fcprojb", "lnfw", "lnfb"};
/* 1: 2-D matrix per layer (weight decay); 0: vector */
static const int tensor_decay[PX_GPT_NUM_TENSORS] = {1, 1, 0, 0, 1, 0, 1, 0,
                                                     0, 0, 1, 0, 1, 0, 0, 0};

static void tensor_shape(const px_gpt_config_t *c, int i, int *ndim, int shape[3])
{
    int L = c->layers, C = c->dim, V = c->vocab, T = c->max_seq;
    int tab[PX_GPT_NUM_TENSORS][4] = {
        {2, V, C, 0}, {2, T, C, 0}, {2, L, C, 0}, {2, L, C, 0},
        {3, L, 3 * C, C}, {2, L, 3 * C, 0}, {3, L, C, C}, {2, L, C, 0},
        {2, L, C, 0}, {2, L, C, 0}, {3, L, 4 * C, C}, {2, L, 4 * C, 0},
        {3, L, C, 4 * C}, {2, L, C, 0}, {1, C, 0, 0}, {1, C, 0, 0}};
    *ndim = tab[i][0];
    for (int d = 0; d < 3; d++)
        shape[d] = tab[i][1 + d];
}

/* unit tensors: root {wte, wpe, lnfw, lnfb}; layer {ln1w .. fcprojb} */
static const int root_tensors[4] = {0, 1, 14, 15};

int px_gpt_num_units(const px_gpt_config_t *cfg) { return cfg->layers + 1; }

static size_t tensor_numel(const px_gpt_config_t *c, int i)
{
    int nd, sh[3];
    size_t n = 1;
    tensor_shape(c, i, &nd, sh);
    for (int d = 0; d < nd; d++)
        n *= (size_t)sh[d];
    return n;
}

void px_gpt_tensor_info_of(const px_gpt_config_t *cfg, int i, px_gpt_tensor_info_t *info)
{
    size_t off = 0;
    for (int j = 0; j < i; j++)
        off += tensor_numel(cfg, j);
    info->name = tensor_names[i];
    tensor_shape(cfg, i, &info->ndim, info->shape);
    info->offset = off;
    info->size = tensor_numel(cfg, i);
    info->decay = tensor_decay[i];
}

int px_gpt_unit_tensors(const px_gpt_config_t *cfg, int u, px_gpt_unit_tensor_t out[12])
{
    int n = 0;
    size_t uoff = 0;
    for (int k = 0; k < (u == 0 ? 4 : 12); k++) {
        int i = u == 0 ? root_tensors[k] : 2 + k;
        px_gpt_tensor_info_t ti;
        px_gpt_tensor_info_of(cfg, i, &ti);
        size_t per = u == 0 ? ti.size : ti.size / (size_t)cfg->layers;
        out[n].tensor = i;
        out[n].unit_offset = uoff;
        out[n].size = per;
        out[n].canon_offset = ti.offset + (u == 0 ? 0 : (size_t)(u - 1) * per);
        out[n].decay = ti.decay;
        uoff += per;
        n++;
    }
    return n;
}

size_t px_gpt_unit_size(const px_gpt_config_t *cfg, int u)
{
    px_gpt_unit_tensor_t t[12];
    int n = px_gpt_unit_tensors(cfg, u, t);
    return t[n - 1].unit_offset + t[n - 1].size;
}

void px_gpt_units_to_canonical(const px_gpt_config_t *cfg, const float *units,
                               const uint64_t *unit_offset, float *dst)
{
    size_t off = 0;
    for (int u = 0; u < px_gpt_num_units(cfg); u++) {
        px_gpt_unit_tensor_t t[12];
        int n = px_gpt_unit_tensors(cfg, u, t);
        const float *base = units + (unit_offset ? unit_offset[u] : off);
        for (int k = 0; k < n; k++)
            memcpy(dst + t[k].canon_offset, base + t[k].unit_offset, t[k].size * sizeof(float));
        off += t[n - 1].unit_offset + t[n - 1].size;
    }
}

/* Per-layer parameter (or gradient) pointers into one layer unit. */
typedef struct layer_view {
    float *ln1w, *ln1b, *qkvw, *qkvb, *attprojw, *attprojb, *ln2w, *ln2b, *fcw, *fcb, *fcprojw,
        *fcprojb;
} layer_view_t;
typedef struct root_view {
    float *wte, *wpe, *lnfw, *lnfb;
} root_view_t;

static void layer_view(const px_gpt_config_t *c, float *base, layer_view_t *v)
{
    size_t C = (size_t)c->dim;
    float **f = (float **)v;
    size_t sz[12] = {C, C, 3 * C * C, 3 * C, C * C, C, C, C, 4 * C * C, 4 * C, 4 * C * C, C};
    for (int k = 0; k < 12; k++) {
        f[k] = base;
        base += sz[k];
    }
}

static void root_view(const px_gpt_config_t *c, float *base, root_view_t *v)
{
    size_t C = (size_t)c->dim;
    v->wte = base;
    v->wpe = v->wte + (size_t)c->vocab * C;
    v->lnfw = v->wpe + (size_t)c->max_seq * C;
    v->lnfb = v->lnfw + C;
}

static px_status_t gpt_create(const px_gpt_config_t *cfg, const px_kernel_ops_t *ops, int B,
                              int T, const px_gpt_hooks_t *hooks, px_gpt_t **gpt_p)
{
    px_gpt_t *gpt;
    int L = cfg->layers, C = cfg->dim, NH = cfg->heads, V = cfg->vocab;

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
    gpt = calloc(1, sizeof(*gpt));
    if (!gpt)
        return PX_ERR_NO_MEMORY;
    gpt->cfg = *cfg;
    gpt->ops = ops;
    gpt->B = B;
    gpt->T = T;
    for (int i = 0; i < PX_GPT_NUM_TENSORS; i++) {
        int nd, sh[3];
        tensor_shape(cfg, i, &nd, sh);
        gpt->sizes[i] = 1;
        for (int d = 0; d < nd; d++)
            gpt->sizes[i] *= (size_t)sh[d];
        gpt->num_params += gpt->sizes[i];
    }
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

    size_t BT = (size_t)B * T;
    size_t act_sizes[GPT_NUM_ACTS] = {
        BT * C, L * BT * C, L * BT, L * BT, L * BT * 3 * C, L * BT * C,
        (size_t)L * B * NH * T * T, L * BT * C, L * BT * C, L * BT, L * BT, L * BT * 4 * C,
        L * BT * 4 * C, L * BT * C, BT * C, BT, BT, BT * V, BT * V, BT, BT * C,
        BT * C, BT * C, BT * 4 * C, BT * 4 * C, BT * V, (size_t)T * T};
    gpt->acts_count = 0;
    for (size_t i = 0; i < GPT_NUM_ACTS; i++)
        gpt->acts_count += act_sizes[i];
    gpt->acts_mem = px_mem_calloc(PX_MEM_ACTS, gpt->acts_count, sizeof(float));
    if (!gpt->acts_mem)
        goto err_free;
    float **aptr = (float **)&gpt->a, *base = gpt->acts_mem;
    for (size_t i = 0; i < GPT_NUM_ACTS; i++) {
        aptr[i] = base;
        base += act_sizes[i];
    }
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
    return gpt_create(cfg, ops, B, T, NULL, gpt_p);
}

px_status_t px_gpt_create_external(const px_gpt_config_t *cfg, const px_kernel_ops_t *ops,
                                   int B, int T, const px_gpt_hooks_t *hooks, px_gpt_t **gpt_p)
{
    if (!hooks || !hooks->params_acquire || !hooks->params_release || !hooks->grads_acquire ||
        !hooks->grads_release) {
        px_error("gpt: external model needs all four hooks");
        return PX_ERR_INVALID_ARGUMENT;
    }
    return gpt_create(cfg, ops, B, T, hooks, gpt_p);
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

size_t px_gpt_activation_bytes(const px_gpt_t *gpt) { return gpt->acts_count * sizeof(float); }
size_t px_gpt_state_bytes(const px_gpt_t *gpt)
{
    return (4 * gpt->num_params + 1) * sizeof(float);
}

/* ---- counter-based initialisation ---- */

static uint64_t splitmix64(uint64_t x)
{
    x += 0x9E3779B97F4A7C15ull;
    x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
    x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
    return x ^ (x >> 31);
}

/* Standard normal for (key, element): Box-Muller on two hashed uniforms. */
static double normal_at(uint64_t key, uint64_t e)
{
    uint64_t a = splitmix64(key ^ splitmix64(2 * e));
    uint64_t b = splitmix64(key ^ splitmix64(2 * e + 1));
    double u1 = ((a >> 11) + 1) * (1.0 / 9007199254740992.0); /* (0, 1] */
    double u2 = (b >> 11) * (1.0 / 9007199254740992.0);       /* [0, 1) */
    return sqrt(-2.0 * log(u1)) * cos(2.0 * M_PI * u2);
}

void px_gpt_init_unit_range(const px_gpt_config_t *cfg, uint64_t seed, int u, size_t begin,
                            size_t end, float *dst)
{
    const float base_std = 0.02f;
    const float proj_std = 0.02f / sqrtf(2.0f * cfg->layers);
    px_gpt_unit_tensor_t t[12];
    int nt = px_gpt_unit_tensors(cfg, u, t);
    memset(dst, 0, (end - begin) * sizeof(float));
    for (int k = 0; k < nt; k++) {
        size_t lo = t[k].unit_offset > begin ? t[k].unit_offset : begin;
        size_t hi = t[k].unit_offset + t[k].size < end ? t[k].unit_offset + t[k].size : end;
        if (lo >= hi)
            continue;
        int i = t[k].tensor;
        const char *n = tensor_names[i];
        float *p = dst + (lo - begin);
        size_t cnt = hi - lo;
        /* element index within the canonical tensor (stacked over layers) */
        px_gpt_tensor_info_t ti;
        px_gpt_tensor_info_of(cfg, i, &ti);
        size_t e0 = t[k].canon_offset - ti.offset + (lo - t[k].unit_offset);
        if (!strcmp(n, "ln1w") || !strcmp(n, "ln2w") || !strcmp(n, "lnfw")) {
            for (size_t e = 0; e < cnt; e++)
                p[e] = 1.0f;
        } else if (tensor_decay[i]) {
            float std = (!strcmp(n, "attprojw") || !strcmp(n, "fcprojw")) ? proj_std : base_std;
            uint64_t key = splitmix64(splitmix64(seed) ^ (0xD1B54A32D192ED03ull * (i + 1)));
            for (size_t e = 0; e < cnt; e++)
                p[e] = (float)(normal_at(key, e0 + e) * std);
        } /* biases / LN bias: 0 */
    }
}

void px_gpt_init_params(px_gpt_t *gpt, uint64_t seed)
{
    size_t off = 0;
    for (int u = 0; u < px_gpt_num_units(&gpt->cfg); u++) {
        size_t n = px_gpt_unit_size(&gpt->cfg, u);
        px_gpt_init_unit_range(&gpt->cfg, seed, u, 0, n, gpt->params + off);
        off += n;
    }
    memset(gpt->m, 0, gpt->num_params * sizeof(float));
    memset(gpt->v, 0, gpt->num_params * sizeof(float));
}

/* unit pointers: own buffer, or the hooks */
static size_t unit_base(const px_gpt_t *gpt, int u)
{
    size_t off = 0;
    for (int j = 0; j < u; j++)
        off += px_gpt_unit_size(&gpt->cfg, j);
    return off;
}

static void poke(px_gpt_t *gpt)
{
    if (gpt->has_hooks && gpt->hooks.progress)
        gpt->hooks.progress(gpt->hooks.arg);
}

static px_status_t p_acquire(px_gpt_t *gpt, int u, int phase, float **p)
{
    if (gpt->has_hooks)
        return gpt->hooks.params_acquire(gpt->hooks.arg, u, phase, p);
    *p = gpt->params + unit_base(gpt, u);
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
    *g = gpt->grads + unit_base(gpt, u);
    return PX_OK;
}

static px_status_t g_release(px_gpt_t *gpt, int u)
{
    return gpt->has_hooks ? gpt->hooks.grads_release(gpt->hooks.arg, u) : PX_OK;
}

/* ---- forward / backward ---- */

px_status_t px_gpt_forward(px_gpt_t *gpt, const int32_t *inputs, const int32_t *targets,
                           float *loss_p)
{
    const px_kernel_ops_t *k = gpt->ops;
    const px_gpt_config_t *cfg = &gpt->cfg;
    gpt_acts_t *a = &gpt->a;
    int B = gpt->B, T = gpt->T, C = cfg->dim, NH = cfg->heads, V = cfg->vocab;
    int L = cfg->layers, BT = B * T;
    float *ub;
    root_view_t r;

    PX_CHECK(p_acquire(gpt, 0, 0, &ub));
    root_view(cfg, ub, &r);
    k->encoder_forward(a->encoded, inputs, r.wte, r.wpe, B, T, C);
    for (int l = 0; l < L; l++) {
        const float *res = l == 0 ? a->encoded : a->residual3 + (size_t)(l - 1) * BT * C;
        float *ln1 = a->ln1 + (size_t)l * BT * C, *qkv = a->qkv + (size_t)l * BT * 3 * C;
        float *atty = a->atty + (size_t)l * BT * C;
        float *att = a->att + (size_t)l * B * NH * T * T;
        float *res2 = a->residual2 + (size_t)l * BT * C, *ln2 = a->ln2 + (size_t)l * BT * C;
        float *fch = a->fch + (size_t)l * BT * 4 * C, *fchg = a->fch_gelu + (size_t)l * BT * 4 * C;
        float *res3 = a->residual3 + (size_t)l * BT * C;
        float *lb;
        layer_view_t p;

        PX_CHECK(p_acquire(gpt, 1 + l, 0, &lb));
        layer_view(cfg, lb, &p);
        k->layernorm_forward(ln1, a->ln1_mean + (size_t)l * BT, a->ln1_rstd + (size_t)l * BT, res,
                             p.ln1w, p.ln1b, BT, C);
        k->matmul_forward(qkv, ln1, p.qkvw, p.qkvb, BT, C, 3 * C);
        poke(gpt);
        k->attention_forward(atty, att, qkv, B, T, C, NH);
        poke(gpt);
        k->matmul_forward(a->tmp, atty, p.attprojw, p.attprojb, BT, C, C);
        poke(gpt);
        k->residual_forward(res2, res, a->tmp, (size_t)BT * C);
        k->layernorm_forward(ln2, a->ln2_mean + (size_t)l * BT, a->ln2_rstd + (size_t)l * BT, res2,
                             p.ln2w, p.ln2b, BT, C);
        k->matmul_forward(fch, ln2, p.fcw, p.fcb, BT, C, 4 * C);
        poke(gpt);
        k->gelu_forward(fchg, fch, (size_t)BT * 4 * C);
        k->matmul_forward(a->tmp, fchg, p.fcprojw, p.fcprojb, BT, 4 * C, C);
        poke(gpt);
        k->residual_forward(res3, res2, a->tmp, (size_t)BT * C);
        PX_CHECK(p_release(gpt, 1 + l, 0));
    }
    const float *last = a->residual3 + (size_t)(L - 1) * BT * C;
    k->layernorm_forward(a->lnf, a->lnf_mean, a->lnf_rstd, last, r.lnfw, r.lnfb, BT, C);
    k->matmul_forward(a->logits, a->lnf, r.wte, NULL, BT, C, V);
    poke(gpt);
    gpt->inputs = inputs;
    gpt->targets = targets;
    if (targets) {
        k->crossentropy_forward(a->losses, a->probs, a->logits, targets, BT, V);
        double s = 0.0;
        for (int i = 0; i < BT; i++)
            s += a->losses[i];
        *loss_p = (float)(s / BT);
    }
    return PX_OK;
}

void px_gpt_zero_grad(px_gpt_t *gpt)
{
    memset(gpt->grads, 0, (gpt->num_params + 1) * sizeof(float));
}

px_status_t px_gpt_backward(px_gpt_t *gpt)
{
    const px_kernel_ops_t *k = gpt->ops;
    const px_gpt_config_t *cfg = &gpt->cfg;
    gpt_acts_t *a = &gpt->a;
    int B = gpt->B, T = gpt->T, C = cfg->dim, NH = cfg->heads, V = cfg->vocab;
    int L = cfg->layers, BT = B * T;
    size_t btc = (size_t)BT * C;
    float *rb, *rgb;
    root_view_t r, rg;

    PX_CHECK(g_acquire(gpt, 0, &rgb));
    root_view(cfg, rgb, &rg);
    PX_CHECK(p_acquire(gpt, 0, 1, &rb));
    root_view(cfg, rb, &r);
    /* loss = mean over BT tokens */
    memset(a->dlogits, 0, (size_t)BT * V * sizeof(float));
    k->crossentropy_backward(a->dlogits, a->probs, gpt->targets, 1.0f / BT, BT, V);
    memset(a->dbtc, 0, btc * sizeof(float));
    k->matmul_backward(a->dbtc, rg.wte, NULL, a->dlogits, a->lnf, r.wte, BT, C, V);
    poke(gpt);
    memset(a->dres, 0, btc * sizeof(float));
    k->layernorm_backward(a->dres, rg.lnfw, rg.lnfb, a->dbtc, a->residual3 + (L - 1) * btc,
                          r.lnfw, a->lnf_mean, a->lnf_rstd, BT, C);
    PX_CHECK(p_release(gpt, 0, 1));

    for (int l = L - 1; l >= 0; l--) {
        const float *res = l == 0 ? a->encoded : a->residual3 + (size_t)(l - 1) * btc;
        const float *ln1 = a->ln1 + l * btc, *qkv = a->qkv + l * btc * 3, *atty = a->atty + l * btc;
        const float *att = a->att + (size_t)l * B * NH * T * T;
        const float *res2 = a->residual2 + l * btc, *ln2 = a->ln2 + l * btc;
        const float *fch = a->fch + l * btc * 4, *fchg = a->fch_gelu + l * btc * 4;
        float *lb, *lgb;
        layer_view_t p, g;

        PX_CHECK(p_acquire(gpt, 1 + l, 1, &lb));
        PX_CHECK(g_acquire(gpt, 1 + l, &lgb));
        layer_view(cfg, lb, &p);
        layer_view(cfg, lgb, &g);
        /* dres is d(residual3): MLP branch */
        memset(a->d4a, 0, btc * 4 * sizeof(float));
        k->matmul_backward(a->d4a, g.fcprojw, g.fcprojb, a->dres, fchg, p.fcprojw, BT, 4 * C, C);
        poke(gpt);
        memset(a->d4b, 0, btc * 4 * sizeof(float));
        k->gelu_backward(a->d4b, fch, a->d4a, btc * 4);
        memset(a->dbtc, 0, btc * sizeof(float));
        k->matmul_backward(a->dbtc, g.fcw, g.fcb, a->d4b, ln2, p.fcw, BT, C, 4 * C);
        poke(gpt);
        k->layernorm_backward(a->dres, g.ln2w, g.ln2b, a->dbtc, res2, p.ln2w,
                              a->ln2_mean + (size_t)l * BT, a->ln2_rstd + (size_t)l * BT, BT, C);
        /* dres is d(residual2): attention branch */
        memset(a->dbtc, 0, btc * sizeof(float));
        k->matmul_backward(a->dbtc, g.attprojw, g.attprojb, a->dres, atty, p.attprojw, BT, C, C);
        poke(gpt);
        memset(a->d4a, 0, btc * 3 * sizeof(float));
        k->attention_backward(a->d4a, a->scratch, a->dbtc, qkv, att, B, T, C, NH);
        poke(gpt);
        memset(a->dbtc, 0, btc * sizeof(float));
        k->matmul_backward(a->dbtc, g.qkvw, g.qkvb, a->d4a, ln1, p.qkvw, BT, C, 3 * C);
        poke(gpt);
        k->layernorm_backward(a->dres, g.ln1w, g.ln1b, a->dbtc, res, p.ln1w,
                              a->ln1_mean + (size_t)l * BT, a->ln1_rstd + (size_t)l * BT, BT, C);
        /* dres is now d(input of layer l) */
        PX_CHECK(p_release(gpt, 1 + l, 1));
        PX_CHECK(g_release(gpt, 1 + l));
    }
    k->encoder_backward(rg.wte, rg.wpe, a->dres, gpt->inputs, B, T, C);
    return g_release(gpt, 0);
}

void px_gpt_update(px_gpt_t *gpt, float lr, float beta1, float beta2, float eps, float wd,
                   int t)
{
    size_t off = 0;
    for (int u = 0; u < px_gpt_num_units(&gpt->cfg); u++) {
        px_gpt_unit_tensor_t ut[12];
        int n = px_gpt_unit_tensors(&gpt->cfg, u, ut);
        for (int j = 0; j < n; j++) {
            size_t o = off + ut[j].unit_offset;
            gpt->ops->adamw_update(gpt->params + o, gpt->grads + o, gpt->m + o, gpt->v + o,
                                   ut[j].size, lr, beta1, beta2, eps, ut[j].decay ? wd : 0.0f, t);
        }
        off += ut[n - 1].unit_offset + ut[n - 1].size;
    }
}
