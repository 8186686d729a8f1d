/* train.c: the training loop (px_train.h). The trainer's parts are
 * assembled once (trainer.h); a step is its gradients, the update, the
 * checkpoint, the report and the evaluation; observers (observers.h) watch
 * the run at four points; the step callback may stop it. */
#include "px_train.h"

#include <math.h>
#include <stdlib.h>

#include "hf_gpt2.h"
#include "observers.h"
#include "trainer.h"
#include "px_log.h"
#include "px_time.h"

px_status_t px_train_layout(const px_train_config_t *cfg, int world, px_layout_t *layout_p,
                            char *errbuf, size_t errlen)
{
    const px_layout_t *l = &cfg->layout;
    px_layout_t out = *l;
    char lbuf[96];

    if (!l->dp && !l->tp && !l->pp && !l->cp && !l->ep) {
        px_layout_init(&out);
        out.dp = world;
    }
    if (px_layout_check(&out, errbuf, errlen) != PX_OK)
        return PX_ERR_INVALID_ARGUMENT;
    if (px_layout_world(&out) != world)
        return px_invalid(errbuf, errlen, "layout %s needs %d ranks, the world has %d",
                   px_layout_str(&out, lbuf, sizeof(lbuf)), px_layout_world(&out), world);
    *layout_p = out;
    return PX_OK;
}

int px_train_warmup(const px_train_config_t *cfg)
{
    return cfg->warmup_steps >= 0 ? cfg->warmup_steps : cfg->steps / 20;
}

float px_train_lr(const px_train_config_t *cfg, int step)
{
    int warmup = px_train_warmup(cfg);
    if (step < warmup)
        return cfg->lr * (float)(step + 1) / (float)warmup;
    if (cfg->steps <= warmup)
        return cfg->lr;
    double ratio = (double)(step - warmup) / (double)(cfg->steps - warmup);
    double min_lr = (double)cfg->lr * cfg->min_lr_ratio;
    double coeff = 0.5 * (1.0 + cos(M_PI * ratio));
    return (float)(min_lr + coeff * ((double)cfg->lr - min_lr));
}

/* Calls hook `h` of every observer with the arguments after it; the first
 * error ends the run. */
#define NOTIFY(obs, nobs, h, ...)                                              \
    do {                                                                       \
        for (int i_ = 0; i_ < (nobs); i_++)                                    \
            if ((obs)[i_].h)                                                   \
                PX_CHECK_GOTO((obs)[i_].h((obs)[i_].arg, __VA_ARGS__), status, out); \
    } while (0)

px_status_t px_train_observed(const px_train_config_t *cfg, px_comm_t *world,
                              const char *device, float router_skew, px_step_cb_t cb,
                              void *arg, const px_train_observer_t *obs, int nobs)
{
    px_trainer_t *tr = NULL;
    uint64_t *moe_counts = NULL;
    px_status_t status = px_trainer_create(cfg, world, device, router_skew, &tr);
    if (status != PX_OK)
        return status;
    moe_counts = calloc(2 * (size_t)(cfg->experts ? cfg->experts : 1), sizeof(uint64_t));
    if (!moe_counts) {
        status = PX_ERR_NO_MEMORY;
        goto out;
    }
    for (int i = 0; i < nobs && !tr->finished; i++) /* a hook may end the run here */
        if (obs[i].on_init)
            PX_CHECK_GOTO(obs[i].on_init(obs[i].arg, tr), status, out);
    if (tr->finished) {
        /* ended before training (parallax-rank --export-init): the weights
         * the run holds are the initial ones, and a Hugging Face export
         * still writes them (a conversion: --init-from in, --export-hf out) */
        if (cfg->export_hf && *cfg->export_hf)
            status = px_hf_gpt2_export(tr);
        goto out;
    }
    tr->t_start = px_time_mono_s();
    for (int s = tr->start_step; s < cfg->steps; s++) {
        double t0 = px_time_mono_s();
        float loss, norm, lr = px_train_lr(cfg, s);
        px_step_report_t rep;
        PX_CHECK_GOTO(px_trainer_grads(tr, s, &loss, &norm), status, out);
        NOTIFY(obs, nobs, on_grads, tr, s, loss, norm);
        PX_CHECK_GOTO(px_trainer_update(tr, s, norm, lr), status, out);
        double t1 = px_time_mono_s();
        PX_CHECK_GOTO(px_trainer_checkpoint(tr, s), status, out);
        PX_CHECK_GOTO(px_trainer_report(tr, s, loss, norm, lr, t0, t1, moe_counts, &rep),
                      status, out);
        /* after the step's expert statistics were read: the evaluation's
         * routing adds to them */
        if (tr->val && px_eval_due(tr->eval_every, s, cfg->steps)) {
            PX_CHECK_GOTO(px_eval_loss(&tr->ev, &rep.val_loss), status, out);
            if (tr->rank == 0)
                px_info("train: step %d: validation loss %.6f (%d batches)", s + 1,
                        (double)rep.val_loss, cfg->eval_batches);
        }
        NOTIFY(obs, nobs, on_step, tr, &rep);
        if (cb && cb(arg, &rep)) {
            px_info("train: stopped by the step callback after step %d", s + 1);
            status = PX_ERR_ABORTED;
            goto out;
        }
    }
    if (cfg->export_safetensors && *cfg->export_safetensors)
        PX_CHECK_GOTO(px_params_export(&tr->params, cfg->export_safetensors), status, out);
    if (cfg->export_hf && *cfg->export_hf)
        PX_CHECK_GOTO(px_hf_gpt2_export(tr), status, out);
    NOTIFY(obs, nobs, on_end, tr);
    status = PX_OK;
out:
    free(moe_counts);
    px_trainer_destroy(tr);
    return status;
}

px_status_t px_train_run(const px_train_config_t *cfg, px_comm_t *world, px_step_cb_t cb,
                         void *arg)
{
    px_train_observer_t report = px_observer_run_report();
    return px_train_observed(cfg, world, NULL, 0.0f, cb, arg, &report, 1);
}
