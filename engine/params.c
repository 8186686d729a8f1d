/* params.c: the trainable state's owner (params.h): each step's and each
 * file's work run over the dense group and the expert group. */
#include "params.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/stat.h>

#include "checkpoint.h"
#include "moe_checkpoint.h"
#include "model.h"
#include "tp.h"
#include "px_coll.h"
#include "px_log.h"

/* The sum over the pipeline group of n values of `type` at buf, in place
 * (nothing without a pipeline); `what` names it in the error. */
static px_status_t pp_sum(const px_params_t *p, void *buf, uint64_t n, px_dtype_t type,
                          const char *what)
{
    if (!p->pp || px_comm_size(p->pp) < 2)
        return PX_OK;
    px_status_t status = px_allreduce(p->pp, buf, buf, n, type, PX_SUM, -1);
    if (status != PX_OK)
        px_error("params: summing %s over the pipeline's stages failed: %s", what,
                 px_status_str(status));
    return status;
}

void px_params_begin_step(px_params_t *p)
{
    px_zero_begin_step(p->dense);
    if (p->experts)
        px_experts_zero_grads(p->experts);
}

px_status_t px_params_reduce(px_params_t *p, float local_loss, float *loss_p, float *norm_p)
{
    float norm = 0.0f;
    PX_CHECK(px_zero_reduce(p->dense, local_loss, loss_p, &norm));
    if (p->experts) { /* the global norm counts every router and expert once */
        double sx = 0.0;
        PX_CHECK(px_experts_reduce(p->experts, &sx));
        /* each stage holds its own MoE layers */
        PX_CHECK(pp_sum(p, &sx, 1, PX_FLOAT64, "the experts' squared gradient norms"));
        norm = (float)sqrt((double)norm * norm + sx);
    }
    *norm_p = norm;
    return PX_OK;
}

px_status_t px_params_update(px_params_t *p, float coef, const px_adamw_t *hp, int regather)
{
    if (p->experts)
        px_experts_update(p->experts, coef, hp);
    return px_zero_update(p->dense, coef, hp, regather);
}

px_status_t px_params_canonical(px_params_t *p, int which, float *canon, float *moe_canon)
{
    PX_CHECK(which ? px_zero_gather_grads_canonical(p->dense, canon)
                   : px_zero_gather_canonical(p->dense, canon));
    PX_CHECK(px_tp_combine_canonical(p->mp, canon, (size_t)px_model_num_params(p->gc)));
    if (!p->experts || !moe_canon)
        return PX_OK;
    /* each stage wrote its own MoE layers (zeros elsewhere): the stages'
     * buffers summed */
    PX_CHECK(px_experts_gather_canonical(p->experts, which, moe_canon));
    return pp_sum(p, moe_canon, px_moe_num_params(px_experts_config(p->experts)), PX_FLOAT32,
                  "the MoE layers");
}

px_status_t px_params_checkpoint_save(px_params_t *p, const char *dir, int step)
{
    /* over the world; the dp rank is the ZeRO shard a rank writes, the tp
     * rank (gc) the tensor shard */
    if (p->experts)
        PX_CHECK(px_moe_checkpoint_save(dir, step, p->experts,
                                        p->pp && px_comm_size(p->pp) > 1 ? p->pp : NULL,
                                        p->rank == 0));
    return px_checkpoint_save(dir, step, p->dense, p->gc, p->plan, p->heads, p->dp, p->world);
}

/* 1 when the checkpoint directory holds the MoE files (moe_checkpoint.h) */
static int moe_files_in(const char *dir)
{
    char path[4200];
    snprintf(path, sizeof(path), "%s/moe.json", dir);
    struct stat st;
    return stat(path, &st) == 0;
}

px_status_t px_params_checkpoint_load(px_params_t *p, const char *path, int *step_p)
{
    /* named before the dense units are read: a MoE model's units are not
     * a dense model's (model.h: its MoE layers hold no dense MLP) */
    if (!p->experts && moe_files_in(path)) {
        px_error("train: checkpoint %s holds a mixture of experts (moe.json); this model "
                 "has experts=0", path);
        return PX_ERR_INVALID_ARGUMENT;
    }
    PX_CHECK(px_checkpoint_load(path, p->dense, p->gc, p->plan, p->heads, step_p));
    return p->experts ? px_moe_checkpoint_load(path, p->experts) : PX_OK;
}

px_status_t px_params_export(px_params_t *p, const char *path)
{
    const size_t n = (size_t)px_model_num_params(p->gc);
    const size_t moe_n =
        p->experts ? (size_t)px_moe_num_params(px_experts_config(p->experts)) : 0;
    float *canon = calloc(n, sizeof(float));
    float *moe_canon = p->experts ? calloc(moe_n ? moe_n : 1, sizeof(float)) : NULL;
    px_status_t status = PX_ERR_NO_MEMORY;
    if (!canon || (p->experts && !moe_canon))
        goto out;
    /* collective: the routers and experts of every rank and stage */
    PX_CHECK_GOTO(px_params_canonical(p, 0, canon, moe_canon), status, out);
    if (p->rank == 0) {
        PX_CHECK_GOTO(px_safetensors_write_groups(path, p->gc, canon,
                                                  p->experts ? px_experts_config(p->experts)
                                                             : NULL,
                                                  moe_canon),
                      status, out);
        px_info("train: weights%s exported to %s", p->experts ? " and experts" : "", path);
    }
    status = PX_OK;
out:
    free(canon);
    free(moe_canon);
    return status;
}
