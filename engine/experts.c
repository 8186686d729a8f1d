/* experts.c: the expert parameter group (experts.h): the flat buffers'
 * layout, the counter-based initialisation, the reduction over the
 * routers' and experts' replicas, AdamW and the canonical re-cut. */
#include "experts.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "gpt.h"
#include "memacct.h"
#include "model.h"
#include "px_coll.h"
#include "px_log.h"

struct px_experts {
    px_moe_config_t cfg;
    const px_kernel_ops_t *k;
    px_comm_t *ep, *dp, *edp;
    int P, me, El, dp_size, accum, nm;
    int *layer_of;        /* [layers]: local MoE index of layer l, or -1 */
    int *gmi;             /* [nm]: the model's MoE index of local MoE layer mi */
    size_t se;            /* elements of one expert */
    size_t nrouter, nexp; /* router region, local expert region (elements) */
    size_t n;             /* nrouter + nexp */
    float *params, *grads, *m, *v;
    float *hinit;         /* (max(E*C, 4C*C)) one tensor's initial values, host */
};

void px_experts_destroy(px_experts_t *ex)
{
    if (!ex)
        return;
    free(ex->layer_of);
    free(ex->gmi);
    px_mem_free(ex->params);
    px_mem_free(ex->grads);
    px_mem_free(ex->m);
    px_mem_free(ex->v);
    free(ex->hinit);
    free(ex);
}

px_status_t px_experts_create(const px_moe_config_t *cfg, const px_kernel_ops_t *ops,
                              px_comm_t *ep, px_comm_t *dp, px_comm_t *edp, int dp_size,
                              int accum, const unsigned char *held, px_experts_t **ex_p)
{
    int P = ep ? px_comm_size(ep) : 1;
    if (cfg->experts < 1 || cfg->experts % P || cfg->dim < 1 || cfg->layers < 1 ||
        dp_size < 1 || accum < 1) {
        px_error("experts: cannot hold experts=%d over ep=%d (dim %d, layers %d, dp %d, accum "
                 "%d)", cfg->experts, P, cfg->dim, cfg->layers, dp_size, accum);
        return PX_ERR_INVALID_ARGUMENT;
    }
    px_experts_t *ex = calloc(1, sizeof(*ex));
    if (!ex)
        return PX_ERR_NO_MEMORY;
    const size_t E = (size_t)cfg->experts, C = (size_t)cfg->dim;
    ex->cfg = *cfg;
    ex->k = ops;
    ex->ep = ep;
    ex->dp = dp;
    ex->edp = edp;
    ex->P = P;
    ex->me = ep ? px_comm_rank(ep) : 0;
    ex->El = cfg->experts / P;
    ex->dp_size = dp_size;
    ex->accum = accum;
    ex->layer_of = calloc((size_t)cfg->layers, sizeof(int));
    ex->gmi = calloc((size_t)cfg->layers, sizeof(int));
    if (!ex->layer_of || !ex->gmi)
        goto err_nomem;
    for (int l = 0, g = 0; l < cfg->layers; l++) {
        ex->layer_of[l] = -1;
        if (!px_moe_is_layer(cfg, l))
            continue;
        if (!held || held[l]) {
            ex->gmi[ex->nm] = g;
            ex->layer_of[l] = ex->nm++;
        }
        g++;
    }
    ex->se = px_model_moe_expert_size(cfg->dim);
    ex->nrouter = (size_t)ex->nm * E * C;
    ex->nexp = (size_t)ex->nm * ex->El * ex->se;
    ex->n = ex->nrouter + ex->nexp;
    ex->params = px_mem_calloc(PX_MEM_PARAMS, ex->n, sizeof(float));
    ex->grads = px_mem_calloc(PX_MEM_GRADS, ex->n, sizeof(float));
    ex->m = px_mem_calloc(PX_MEM_OPTIM, ex->n, sizeof(float));
    ex->v = px_mem_calloc(PX_MEM_OPTIM, ex->n, sizeof(float));
    ex->hinit = calloc(E * C > 4 * C * C ? E * C : 4 * C * C, sizeof(float));
    if (!ex->params || !ex->grads || !ex->m || !ex->v || !ex->hinit)
        goto err_nomem;
    *ex_p = ex;
    return PX_OK;
err_nomem:
    px_error("experts: out of memory (%d MoE layers, %d experts here, dim %d)", ex->nm, ex->El,
             cfg->dim);
    px_experts_destroy(ex);
    return PX_ERR_NO_MEMORY;
}

const px_moe_config_t *px_experts_config(const px_experts_t *ex) { return &ex->cfg; }

int px_experts_layers(const px_experts_t *ex) { return ex->nm; }

int px_experts_local(const px_experts_t *ex, int l)
{
    return l >= 0 && l < ex->cfg.layers ? ex->layer_of[l] : -1;
}

int px_experts_per_rank(const px_experts_t *ex) { return ex->El; }

float *px_experts_router(const px_experts_t *ex, int grads, int mi)
{
    return (grads ? ex->grads : ex->params) + (size_t)mi * ex->cfg.experts * ex->cfg.dim;
}

static px_expert_view_t expert_in(const px_experts_t *ex, float *buf, int mi, int le)
{
    size_t C = (size_t)ex->cfg.dim;
    float *b = buf + ex->nrouter + ((size_t)mi * ex->El + le) * ex->se;
    return (px_expert_view_t){b, b + 4 * C * C, b + 4 * C * C + 4 * C, b + 8 * C * C + 4 * C};
}

px_expert_view_t px_experts_expert(const px_experts_t *ex, int grads, int mi, int le)
{
    return expert_in(ex, grads ? ex->grads : ex->params, mi, le);
}

/* Canonical offset of tensor i of the model's MoE layer g. */
static size_t canon_off(const px_moe_config_t *c, int g, int i)
{
    size_t off = 0;
    for (int j = 0; j < PX_MOE_NUM_TENSORS; j++)
        off += px_moe_tensor_size(c, j);
    off *= (size_t)g;
    for (int j = 0; j < i; j++)
        off += px_moe_tensor_size(c, j);
    return off;
}

void px_experts_init(px_experts_t *ex, uint64_t seed)
{
    const px_moe_config_t *c = &ex->cfg;
    const size_t C = (size_t)c->dim, E = (size_t)c->experts;
    const double stds[PX_MOE_NUM_TENSORS] = {0.02, 0.02, 0.0, 0.02 / sqrt(2.0 * c->layers), 0.0};
    ex->k->mem_set(ex->params, 0, ex->n * sizeof(float)); /* the biases: 0 */
    for (int i = 0; i < PX_MOE_NUM_TENSORS; i++) {
        if (stds[i] == 0.0)
            continue; /* biases: 0 */
        uint64_t key = px_init_hash(px_init_hash(seed) ^ (0xD1B54A32D192ED03ull * (uint64_t)(101 + i)));
        size_t per = (size_t)px_moe_tensor_size(c, i) / E; /* one expert's (or router row) */
        for (int mi = 0; mi < ex->nm; mi++) {
            /* element index within the tensor stacked over the MoE layers */
            size_t e0 = (size_t)ex->gmi[mi] * px_moe_tensor_size(c, i);
            /* each tensor made on the host, then copied to the backend's memory */
            float *h = ex->hinit;
            if (i == 0) {
                for (size_t e = 0; e < E * C; e++)
                    h[e] = (float)(px_init_normal(key, e0 + e) * stds[i]);
                ex->k->mem_copy_from_host(px_experts_router(ex, 0, mi), h,
                                          E * C * sizeof(float));
                continue;
            }
            for (int le = 0; le < ex->El; le++) {
                size_t ge = (size_t)ex->me * ex->El + le;
                px_expert_view_t x = px_experts_expert(ex, 0, mi, le);
                for (size_t e = 0; e < per; e++)
                    h[e] = (float)(px_init_normal(key, e0 + ge * per + e) * stds[i]);
                ex->k->mem_copy_from_host(i == 1 ? x.fcw : x.fcprojw, h, per * sizeof(float));
            }
        }
    }
    ex->k->mem_set(ex->m, 0, ex->n * sizeof(float));
    ex->k->mem_set(ex->v, 0, ex->n * sizeof(float));
}

void px_experts_zero_grads(px_experts_t *ex)
{
    ex->k->mem_set(ex->grads, 0, ex->n * sizeof(float));
}

px_status_t px_experts_reduce(px_experts_t *ex, double *sumsq_p)
{
    px_status_t status = PX_OK;
    float *rg = ex->grads, *eg = ex->grads + ex->nrouter;
    if (ex->dp && px_comm_size(ex->dp) > 1 && ex->nrouter)
        status = px_allreduce(ex->dp, rg, rg, ex->nrouter, PX_FLOAT32, PX_SUM, -1);
    if (status == PX_OK && ex->edp && px_comm_size(ex->edp) > 1 && ex->nexp)
        status = px_allreduce(ex->edp, eg, eg, ex->nexp, PX_FLOAT32, PX_SUM, -1);
    if (status != PX_OK) {
        px_error("experts: the router / expert gradient reduction failed: %s",
                 px_status_str(status));
        return status;
    }
    ex->k->scale(ex->grads, 1.0f / ((float)ex->dp_size * (float)ex->accum), ex->n);
    double sx = ex->k->sumsq(eg, ex->nexp);
    if (ex->ep && ex->P > 1) {
        status = px_allreduce(ex->ep, &sx, &sx, 1, PX_FLOAT64, PX_SUM, -1);
        if (status != PX_OK) {
            px_error("experts: the expert gradient norm over the ep group failed: %s",
                     px_status_str(status));
            return status;
        }
    }
    *sumsq_p = ex->k->sumsq(rg, ex->nrouter) + sx;
    return PX_OK;
}

void px_experts_update(px_experts_t *ex, float coef, const px_adamw_t *hp)
{
    const px_kernel_ops_t *k = ex->k;
    px_adamw_step(k, hp, 1, coef, ex->params, ex->grads, ex->m, ex->v, ex->nrouter);
    size_t C = (size_t)ex->cfg.dim;
    for (int mi = 0; mi < ex->nm; mi++)
        for (int le = 0; le < ex->El; le++) {
            size_t o = ex->nrouter + ((size_t)mi * ex->El + le) * ex->se;
            /* fcw (decay), fcb, fcprojw (decay), fcprojb */
            const size_t off[4] = {0, 4 * C * C, 4 * C * C + 4 * C, 8 * C * C + 4 * C};
            const size_t len[4] = {4 * C * C, 4 * C, 4 * C * C, C};
            for (int i = 0; i < 4; i++)
                px_adamw_step(k, hp, i % 2 == 0, coef, ex->params + o + off[i],
                              ex->grads + o + off[i], ex->m + o + off[i], ex->v + o + off[i],
                              len[i]);
        }
}

px_status_t px_experts_gather_canonical(px_experts_t *ex, int which, float *dst)
{
    const px_moe_config_t *c = &ex->cfg;
    size_t n = (size_t)px_moe_num_params(c), C = (size_t)c->dim;
    float *bufs[4] = {ex->params, ex->grads, ex->m, ex->v};
    if (which < 0 || which > 3) {
        px_error("experts: no buffer %d to gather (0..3)", which);
        return PX_ERR_INVALID_ARGUMENT;
    }
    float *src = bufs[which];
    memset(dst, 0, n * sizeof(float));
    for (int mi = 0; mi < ex->nm; mi++) {
        if (ex->me == 0)
            ex->k->mem_copy_to_host(dst + canon_off(c, ex->gmi[mi], 0),
                                    src + (size_t)mi * c->experts * C,
                                    (size_t)c->experts * C * sizeof(float));
        for (int le = 0; le < ex->El; le++) {
            size_t ge = (size_t)ex->me * ex->El + le;
            px_expert_view_t x = expert_in(ex, src, mi, le);
            float *parts[4] = {x.fcw, x.fcb, x.fcprojw, x.fcprojb};
            for (int i = 1; i < PX_MOE_NUM_TENSORS; i++) {
                size_t per = (size_t)px_moe_tensor_size(c, i) / (size_t)c->experts;
                ex->k->mem_copy_to_host(dst + canon_off(c, ex->gmi[mi], i) + ge * per,
                                        parts[i - 1], per * sizeof(float));
            }
        }
    }
    ex->k->synchronize();
    if (ex->ep && ex->P > 1) {
        px_status_t status = px_allreduce(ex->ep, dst, dst, n, PX_FLOAT32, PX_SUM, -1);
        if (status != PX_OK) {
            px_error("experts: gathering the experts over the ep group failed: %s",
                     px_status_str(status));
            return status;
        }
    }
    return PX_OK;
}

void px_experts_set_canonical(px_experts_t *ex, int which, const float *src)
{
    const px_moe_config_t *c = &ex->cfg;
    size_t C = (size_t)c->dim;
    float *bufs[3] = {ex->params, ex->m, ex->v};
    float *dst = bufs[which == 0 ? 0 : which == 2 ? 1 : 2];
    for (int mi = 0; mi < ex->nm; mi++) {
        ex->k->mem_copy_from_host(dst + (size_t)mi * c->experts * C,
                                  src + canon_off(c, ex->gmi[mi], 0),
                                  (size_t)c->experts * C * sizeof(float));
        for (int le = 0; le < ex->El; le++) {
            size_t ge = (size_t)ex->me * ex->El + le;
            px_expert_view_t x = expert_in(ex, dst, mi, le);
            float *parts[4] = {x.fcw, x.fcb, x.fcprojw, x.fcprojb};
            for (int i = 1; i < PX_MOE_NUM_TENSORS; i++) {
                size_t per = (size_t)px_moe_tensor_size(c, i) / (size_t)c->experts;
                ex->k->mem_copy_from_host(parts[i - 1], src + canon_off(c, ex->gmi[mi], i) +
                                                            ge * per, per * sizeof(float));
            }
        }
    }
    ex->k->synchronize();
}

float *px_experts_params(px_experts_t *ex) { return ex->params; }
float *px_experts_grads(px_experts_t *ex) { return ex->grads; }
