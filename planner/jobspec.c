/* jobspec.c: JobSpec <-> px_job_config_t (jobspec.h).
 *
 * Invariant: for a config that passes px_job_config_check, to_config(
 * from_config(cfg)) == cfg except beta1/beta2/eps/prefetch (not on the
 * wire) and warmup_steps 0 (read back as -1, steps/20: the wire cannot say
 * "no warm-up"). Pure code, any thread. */
#include "jobspec.h"
#include "pipesched.h"

#include <limits.h>
#include <string.h>

/* Borrowed C string of a protobuf-c string field ("" stays "", NULL
 * stays NULL; both mean "not set" to the check). */
static const char *str_or_null(const char *s)
{
    return s && *s ? s : NULL;
}

static uint32_t u32(int v)
{
    return v > 0 ? (uint32_t)v : 0;
}

/* An unsigned wire value as an int; values past INT_MAX read as INT_MAX
 * (never negative: -1 is a sentinel), which every range check rejects. */
static int to_int(uint32_t v)
{
    return v > (uint32_t)INT_MAX ? INT_MAX : (int)v;
}

/* A degree of parallelism: 0 on the wire means 1. */
static int deg_or_1(uint32_t v)
{
    return v ? to_int(v) : 1;
}

void px_jobspec_layout(const Parallax__V1__JobSpec *spec, px_layout_t *layout)
{
    const Parallax__V1__ParallelSpec *p = spec->parallel;

    px_layout_init(layout);
    layout->dp = to_int(spec->dp);
    if (!p)
        return;
    if (p->dp)
        layout->dp = to_int(p->dp);
    layout->tp = deg_or_1(p->tp);
    layout->pp = deg_or_1(p->pp);
    layout->cp = deg_or_1(p->cp);
    layout->ep = deg_or_1(p->ep);
}

void px_jobspec_to_config(const Parallax__V1__JobSpec *spec, px_job_config_t *cfg)
{
    const Parallax__V1__ModelSpec *m = spec->model;

    px_job_config_defaults(cfg);
    if (m) {
        cfg->layers = to_int(m->layers);
        cfg->heads = to_int(m->heads);
        cfg->dim = to_int(m->dim);
        cfg->seq = to_int(m->seq);
        if (m->vocab)
            cfg->vocab = to_int(m->vocab);
    }
    px_jobspec_layout(spec, &cfg->layout);
    cfg->sequence_parallel = spec->parallel && spec->parallel->sequence_parallel;
    if (spec->parallel && spec->parallel->micro_batches)
        cfg->micro_batches = to_int(spec->parallel->micro_batches);
    if (spec->parallel && spec->parallel->schedule && *spec->parallel->schedule) {
        cfg->schedule = px_pipe_schedule_parse(spec->parallel->schedule);
        if (cfg->schedule < 0) /* the check names it as sent */
            cfg->schedule_name = spec->parallel->schedule;
    }
    if (spec->parallel)
        cfg->stage_layers = str_or_null(spec->parallel->stage_layers);
    if (spec->parallel && spec->parallel->virtual_stages)
        cfg->virtual_stages = to_int(spec->parallel->virtual_stages);
    cfg->precision = px_job_config_precision_parse(spec->precision);
    if (cfg->precision < 0) /* the check names it as sent */
        cfg->precision_name = spec->precision;
    cfg->batch = to_int(spec->batch);
    cfg->steps = to_int(spec->steps);
    if (spec->grad_accum)
        cfg->grad_accum = to_int(spec->grad_accum);
    if (spec->lr != 0.0f)
        cfg->lr = spec->lr;
    cfg->min_lr_ratio = spec->min_lr_ratio;
    if (spec->warmup_steps)
        cfg->warmup_steps = to_int(spec->warmup_steps);
    cfg->weight_decay = spec->weight_decay;
    if (spec->grad_clip < 0.0f)
        cfg->grad_clip = 0.0f;
    else if (spec->grad_clip != 0.0f)
        cfg->grad_clip = spec->grad_clip; /* NaN passes through: the check names it */
    cfg->seed = spec->seed;
    cfg->data_path = str_or_null(spec->data_path);
    cfg->zero = to_int(spec->zero);
    cfg->bucket_mb = spec->bucket_mb; /* NaN passes through: the check names it */
    cfg->checkpoint_every = to_int(spec->checkpoint_every);
    cfg->checkpoint_dir = str_or_null(spec->checkpoint_dir);
    cfg->resume_dir = str_or_null(spec->resume_dir);
    cfg->export_safetensors = str_or_null(spec->export_safetensors);
    cfg->init_from = str_or_null(spec->init_from);
    cfg->export_hf = str_or_null(spec->export_hf);
    cfg->tensorboard_dir = str_or_null(spec->tensorboard_dir);
    if (spec->moe) { /* zero fields: the defaults (proto) */
        const Parallax__V1__MoeSpec *e = spec->moe;
        cfg->experts = to_int(e->experts);
        if (e->top_k)
            cfg->top_k = to_int(e->top_k);
        if (e->capacity_factor != 0.0f)
            cfg->capacity_factor = e->capacity_factor; /* NaN: the check names it */
        cfg->dropless = e->dropless;
        if (e->moe_every)
            cfg->moe_every = to_int(e->moe_every);
        if (e->aux_loss_coef < 0.0f)
            cfg->aux_loss_coef = 0.0f;
        else if (e->aux_loss_coef != 0.0f)
            cfg->aux_loss_coef = e->aux_loss_coef;
    }
    cfg->val_path = str_or_null(spec->val_data_path);
    cfg->eval_every = spec->eval_every;
    if (spec->eval_batches)
        cfg->eval_batches = to_int(spec->eval_batches);
}

void px_jobspec_from_config(const px_job_config_t *cfg, px_jobspec_msg_t *msg)
{
    Parallax__V1__JobSpec *s = &msg->spec;
    Parallax__V1__ModelSpec *m = &msg->model;
    Parallax__V1__ParallelSpec *p = &msg->parallel;

    parallax__v1__job_spec__init(s);
    parallax__v1__model_spec__init(m);
    parallax__v1__parallel_spec__init(p);
    m->layers = u32(cfg->layers);
    m->heads = u32(cfg->heads);
    m->dim = u32(cfg->dim);
    m->seq = u32(cfg->seq);
    m->vocab = u32(cfg->vocab);
    p->dp = u32(cfg->layout.dp);
    p->tp = u32(cfg->layout.tp);
    p->pp = u32(cfg->layout.pp);
    p->cp = u32(cfg->layout.cp);
    p->ep = u32(cfg->layout.ep);
    p->sequence_parallel = cfg->sequence_parallel != 0;
    p->micro_batches = u32(cfg->micro_batches);
    p->schedule = (char *)px_pipe_schedule_name(cfg->schedule);
    p->stage_layers = (char *)(cfg->stage_layers ? cfg->stage_layers : "");
    p->virtual_stages = u32(cfg->virtual_stages);
    s->model = m;
    s->parallel = p;
    s->dp = p->dp; /* old readers: the data-parallel degree */
    s->batch = u32(cfg->batch);
    s->steps = u32(cfg->steps);
    s->grad_accum = u32(cfg->grad_accum);
    s->lr = cfg->lr;
    s->min_lr_ratio = cfg->min_lr_ratio;
    s->warmup_steps = u32(cfg->warmup_steps); /* -1 (steps/20) is 0 on the wire */
    s->weight_decay = cfg->weight_decay;
    s->grad_clip = cfg->grad_clip == 0.0f ? -1.0f : cfg->grad_clip;
    s->seed = cfg->seed;
    s->data_path = (char *)(cfg->data_path ? cfg->data_path : "");
    s->zero = u32(cfg->zero);
    s->bucket_mb = cfg->bucket_mb;
    s->precision = (char *)px_job_config_precision_name(cfg->precision);
    s->checkpoint_every = u32(cfg->checkpoint_every);
    s->checkpoint_dir = (char *)(cfg->checkpoint_dir ? cfg->checkpoint_dir : "");
    s->resume_dir = (char *)(cfg->resume_dir ? cfg->resume_dir : "");
    s->export_safetensors = (char *)(cfg->export_safetensors ? cfg->export_safetensors : "");
    s->init_from = (char *)(cfg->init_from ? cfg->init_from : "");
    s->export_hf = (char *)(cfg->export_hf ? cfg->export_hf : "");
    s->tensorboard_dir = (char *)(cfg->tensorboard_dir ? cfg->tensorboard_dir : "");
    parallax__v1__moe_spec__init(&msg->moe);
    if (cfg->experts > 0) {
        Parallax__V1__MoeSpec *e = &msg->moe;
        e->experts = u32(cfg->experts);
        e->top_k = u32(cfg->top_k);
        e->capacity_factor = cfg->capacity_factor;
        e->dropless = cfg->dropless != 0;
        e->moe_every = u32(cfg->moe_every);
        e->aux_loss_coef = cfg->aux_loss_coef == 0.0f ? -1.0f : cfg->aux_loss_coef;
        s->moe = e;
    }
    s->val_data_path = (char *)(cfg->val_path ? cfg->val_path : "");
    s->eval_every = cfg->eval_every;
    s->eval_batches = u32(cfg->eval_batches);
}
