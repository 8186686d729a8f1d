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
 * Invariants: params/grads/m/v have num_params elements (grads one more, a
 * spare slot for the trainer); every pointer in `acts` points into one
 * buffer sized at create time for (B, T). One thread per model. */
#include "gpt.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

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
    float *params, *grads, *m, *v;
    px_gpt_tensors_t p, g;
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

static void point_tensors(px_gpt_tensors_t *t, float *base, const size_t *sizes)
{
    float **ptrs[PX_GPT_NUM_TENSORS] = {
        &t->wte, &t->wpe, &t->ln1w, &t->ln1b, &t->qkvw, &t->qkvb, &t->attprojw, &t->attprojb,
        &t->ln2w, &t->ln2b, &t->fcw, &t->fcb, &t->fcprojw, &t->fcprojb, &t->lnfw, &t->lnfb};
    for (int i = 0; i < PX_GPT_NUM_TENSORS; i++) {
        *ptrs[i] = base;
        base += sizes[i];
    }
}

px_status_t px_gpt_create(const px_gpt_config_t *cfg, const px_kernel_ops_t *ops, int B, int T,
                          px_gpt_t **gpt_p)
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
    gpt->params = calloc(gpt->num_params, sizeof(float));
    gpt->grads = calloc(gpt->num_params + 1, sizeof(float));
    gpt->m = calloc(gpt->num_params, sizeof(float));
    gpt->v = calloc(gpt->num_params, sizeof(float));
    if (!gpt->params || !gpt->grads || !gpt->m || !gpt->v)
        goto err_free;
    point_tensors(&gpt->p, gpt->params, gpt->sizes);
    point_tensors(&gpt->g, gpt->grads, gpt->sizes);

    size_t BT = (size_t)B * T;
    size_t act_sizes[GPT_NUM_ACTS] = {
        BT * C, L * BT * C, L * BT, L * BT, L * BT * 3 * C, L * BT * C,
        (size_t)L * B * NH * T * T, L * BT * C, L * BT * C, L * BT, L * BT, L * BT * 4 * C,
        L * BT * 4 * C, L * BT * C, BT * C, BT, BT, BT * V, BT * V, BT, BT * C,
        BT * C, BT * C, BT * 4 * C, BT * 4 * C, BT * V, (size_t)T * T};
    gpt->acts_count = 0;
    for (size_t i = 0; i < GPT_NUM_ACTS; i++)
        gpt->acts_count += act_sizes[i];
    gpt->acts_mem = calloc(gpt->acts_count, sizeof(float));
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

void px_gpt_destroy(px_gpt_t *gpt)
{
    if (!gpt)
        return;
    free(gpt->params);
    free(gpt->grads);
    free(gpt->m);
    free(gpt->v);
    free(gpt->acts_mem);
    free(gpt);
}

size_t px_gpt_num_params(const px_gpt_t *gpt) { return gpt->num_params; }
float *px_gpt_params(px_gpt_t *gpt) { return gpt->params; }
float *px_gpt_grads(px_gpt_t *gpt) { return gpt->grads; }
const px_gpt_tensors_t *px_gpt_param_tensors(const px_gpt_t *gpt) { return &gpt->p; }
const px_gpt_tensors_t *px_gpt_grad_tensors(const px_gpt_t *gpt) { return &gpt->g; }

void px_gpt_tensor_info(const px_gpt_t *gpt, int i, px_gpt_tensor_info_t *info)
{
    size_t off = 0;
    for (int j = 0; j < i; j++)
        off += gpt->sizes[j];
    info->name = tensor_names[i];
    tensor_shape(&gpt->cfg, i, &info->ndim, info->shape);
    info->offset = off;
    info->size = gpt->sizes[i];
    info->decay = tensor_decay[i];
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

void px_gpt_init_params(px_gpt_t *gpt, uint64_t seed)
{
    const float base_std = 0.02f;
    const float proj_std = 0.02f / sqrtf(2.0f * gpt->cfg.layers);
    float *p = gpt->params;
    for (int i = 0; i < PX_GPT_NUM_TENSORS; i++) {
        const char *n = tensor_names[i];
        size_t sz = gpt->sizes[i];
        if (!strcmp(n, "ln1w") || !strcmp(n, "ln2w") || !strcmp(n, "lnfw")) {
            for (size_t e = 0; e < sz; e++)
                p[e] = 1.0f;
        } else if (!tensor_decay[i]) {
            memset(p, 0, sz * sizeof(float));
        } else {
            float std = (!strcmp(n, "attprojw") || !strcmp(n, "fcprojw")) ? proj_std : base_std;
            uint64_t key = splitmix64(splitmix64(seed) ^ (0xD1B54A32D192ED03ull * (i + 1)));
            for (size_t e = 0; e < sz; e++)
                p[e] = (float)(normal_at(key, e) * std);
        }
        p += sz;
    }
    memset(gpt->m, 0, gpt->num_params * sizeof(float));
    memset(gpt->v, 0, gpt->num_params * sizeof(float));
}

/* ---- forward / backward ---- */

void px_gpt_forward(px_gpt_t *gpt, const int32_t *inputs, const int32_t *targets,
                    float *loss_p)
{
    const px_kernel_ops_t *k = gpt->ops;
    const px_gpt_tensors_t *p = &gpt->p;
    gpt_acts_t *a = &gpt->a;
    int B = gpt->B, T = gpt->T, C = gpt->cfg.dim, NH = gpt->cfg.heads, V = gpt->cfg.vocab;
    int L = gpt->cfg.layers, BT = B * T;

    k->encoder_forward(a->encoded, inputs, p->wte, p->wpe, B, T, C);
    for (int l = 0; l < L; l++) {
        const float *res = l == 0 ? a->encoded : a->residual3 + (size_t)(l - 1) * BT * C;
        float *ln1 = a->ln1 + (size_t)l * BT * C, *qkv = a->qkv + (size_t)l * BT * 3 * C;
        float *atty = a->atty + (size_t)l * BT * C;
        float *att = a->att + (size_t)l * B * NH * T * T;
        float *res2 = a->residual2 + (size_t)l * BT * C, *ln2 = a->ln2 + (size_t)l * BT * C;
        float *fch = a->fch + (size_t)l * BT * 4 * C, *fchg = a->fch_gelu + (size_t)l * BT * 4 * C;
        float *res3 = a->residual3 + (size_t)l * BT * C;

        k->layernorm_forward(ln1, a->ln1_mean + (size_t)l * BT, a->ln1_rstd + (size_t)l * BT, res,
                             p->ln1w + l * C, p->ln1b + l * C, BT, C);
        k->matmul_forward(qkv, ln1, p->qkvw + (size_t)l * 3 * C * C, p->qkvb + l * 3 * C, BT, C,
                          3 * C);
        k->attention_forward(atty, att, qkv, B, T, C, NH);
        k->matmul_forward(a->tmp, atty, p->attprojw + (size_t)l * C * C, p->attprojb + l * C, BT,
                          C, C);
        k->residual_forward(res2, res, a->tmp, (size_t)BT * C);
        k->layernorm_forward(ln2, a->ln2_mean + (size_t)l * BT, a->ln2_rstd + (size_t)l * BT, res2,
                             p->ln2w + l * C, p->ln2b + l * C, BT, C);
        k->matmul_forward(fch, ln2, p->fcw + (size_t)l * 4 * C * C, p->fcb + l * 4 * C, BT, C,
                          4 * C);
        k->gelu_forward(fchg, fch, (size_t)BT * 4 * C);
        k->matmul_forward(a->tmp, fchg, p->fcprojw + (size_t)l * C * 4 * C, p->fcprojb + l * C, BT,
                          4 * C, C);
        k->residual_forward(res3, res2, a->tmp, (size_t)BT * C);
    }
    const float *last = a->residual3 + (size_t)(L - 1) * BT * C;
    k->layernorm_forward(a->lnf, a->lnf_mean, a->lnf_rstd, last, p->lnfw, p->lnfb, BT, C);
    k->matmul_forward(a->logits, a->lnf, p->wte, NULL, BT, C, V);
    gpt->inputs = inputs;
    gpt->targets = targets;
    if (targets) {
        k->crossentropy_forward(a->losses, a->probs, a->logits, targets, BT, V);
        double s = 0.0;
        for (int i = 0; i < BT; i++)
            s += a->losses[i];
        *loss_p = (float)(s / BT);
    }
}

void px_gpt_zero_grad(px_gpt_t *gpt)
{
    memset(gpt->grads, 0, (gpt->num_params + 1) * sizeof(float));
}

void px_gpt_backward(px_gpt_t *gpt)
{
    const px_kernel_ops_t *k = gpt->ops;
    const px_gpt_tensors_t *p = &gpt->p, *g = &gpt->g;
    gpt_acts_t *a = &gpt->a;
    int B = gpt->B, T = gpt->T, C = gpt->cfg.dim, NH = gpt->cfg.heads, V = gpt->cfg.vocab;
    int L = gpt->cfg.layers, BT = B * T;
    size_t btc = (size_t)BT * C;

    /* loss = mean over BT tokens */
    memset(a->dlogits, 0, (size_t)BT * V * sizeof(float));
    k->crossentropy_backward(a->dlogits, a->probs, gpt->targets, 1.0f / BT, BT, V);
    memset(a->dbtc, 0, btc * sizeof(float));
    k->matmul_backward(a->dbtc, g->wte, NULL, a->dlogits, a->lnf, p->wte, BT, C, V);
    memset(a->dres, 0, btc * sizeof(float));
    k->layernorm_backward(a->dres, g->lnfw, g->lnfb, a->dbtc, a->residual3 + (L - 1) * btc,
                          p->lnfw, a->lnf_mean, a->lnf_rstd, BT, C);

    for (int l = L - 1; l >= 0; l--) {
        const float *res = l == 0 ? a->encoded : a->residual3 + (size_t)(l - 1) * btc;
        const float *ln1 = a->ln1 + l * btc, *qkv = a->qkv + l * btc * 3, *atty = a->atty + l * btc;
        const float *att = a->att + (size_t)l * B * NH * T * T;
        const float *res2 = a->residual2 + l * btc, *ln2 = a->ln2 + l * btc;
        const float *fch = a->fch + l * btc * 4, *fchg = a->fch_gelu + l * btc * 4;

        /* dres is d(residual3): MLP branch */
        memset(a->d4a, 0, btc * 4 * sizeof(float));
        k->matmul_backward(a->d4a, g->fcprojw + (size_t)l * C * 4 * C, g->fcprojb + l * C, a->dres,
                           fchg, p->fcprojw + (size_t)l * C * 4 * C, BT, 4 * C, C);
        memset(a->d4b, 0, btc * 4 * sizeof(float));
        k->gelu_backward(a->d4b, fch, a->d4a, btc * 4);
        memset(a->dbtc, 0, btc * sizeof(float));
        k->matmul_backward(a->dbtc, g->fcw + (size_t)l * 4 * C * C, g->fcb + l * 4 * C, a->d4b, ln2,
                           p->fcw + (size_t)l * 4 * C * C, BT, C, 4 * C);
        k->layernorm_backward(a->dres, g->ln2w + l * C, g->ln2b + l * C, a->dbtc, res2,
                              p->ln2w + l * C, a->ln2_mean + (size_t)l * BT,
                              a->ln2_rstd + (size_t)l * BT, BT, C);
        /* dres is d(residual2): attention branch */
        memset(a->dbtc, 0, btc * sizeof(float));
        k->matmul_backward(a->dbtc, g->attprojw + (size_t)l * C * C, g->attprojb + l * C, a->dres,
                           atty, p->attprojw + (size_t)l * C * C, BT, C, C);
        memset(a->d4a, 0, btc * 3 * sizeof(float));
        k->attention_backward(a->d4a, a->scratch, a->dbtc, qkv, att, B, T, C, NH);
        memset(a->dbtc, 0, btc * sizeof(float));
        k->matmul_backward(a->dbtc, g->qkvw + (size_t)l * 3 * C * C, g->qkvb + l * 3 * C, a->d4a,
                           ln1, p->qkvw + (size_t)l * 3 * C * C, BT, C, 3 * C);
        k->layernorm_backward(a->dres, g->ln1w + l * C, g->ln1b + l * C, a->dbtc, res,
                              p->ln1w + l * C, a->ln1_mean + (size_t)l * BT,
                              a->ln1_rstd + (size_t)l * BT, BT, C);
        /* dres is now d(input of layer l) */
    }
    k->encoder_backward(g->wte, g->wpe, a->dres, gpt->inputs, B, T, C);
}

void px_gpt_update(px_gpt_t *gpt, float lr, float beta1, float beta2, float eps, float wd,
                   int t)
{
    size_t off = 0;
    for (int i = 0; i < PX_GPT_NUM_TENSORS; i++) {
        size_t sz = gpt->sizes[i];
        gpt->ops->adamw_update(gpt->params + off, gpt->grads + off, gpt->m + off, gpt->v + off,
                               sz, lr, beta1, beta2, eps, tensor_decay[i] ? wd : 0.0f, t);
        off += sz;
    }
}
