/* jobflags.c: the job flags' table and its application (jobflags.h).
 *
 * Invariant: every entry's offset and kind match the px_job_config_t field
 * (int, float, uint64_t or const char *). Constant data, any thread. */
#include "jobflags.h"

#include <stdio.h>
#include <string.h>

#include "pipesched.h"

#define F(field) offsetof(px_job_config_t, field)
#define INT(name, field, lo) {name, NULL, PX_JOB_FLAG_INT, F(field), lo, 0, 0, PX_JOB_FLAG_BOTH}
#define FLT(name, field, a, b) {name, NULL, PX_JOB_FLAG_FLOAT, F(field), 0, a, b, PX_JOB_FLAG_BOTH}

/* pctl's float ranges are the ones it always checked; the job's own rules
 * stay in px_job_config_check */
const px_job_flag_t px_job_flags[] = {
    /* the model */
    INT("layers", layers, 1), INT("heads", heads, 1), INT("dim", dim, 1), INT("seq", seq, 1),
    INT("vocab", vocab, 1),
    /* the layout (layout.h) */
    INT("dp", layout.dp, 1), INT("tp", layout.tp, 1), INT("pp", layout.pp, 1),
    INT("cp", layout.cp, 1), INT("ep", layout.ep, 1),
    {"sequence-parallel", NULL, PX_JOB_FLAG_SET, F(sequence_parallel), 1, 0, 0, PX_JOB_FLAG_BOTH},
    /* the pipeline (pipesched.h) */
    INT("micro-batches", micro_batches, 1),
    {"schedule", NULL, PX_JOB_FLAG_SCHEDULE, F(schedule), 0, 0, 0, PX_JOB_FLAG_BOTH},
    {"stage-layers", NULL, PX_JOB_FLAG_STR, F(stage_layers), 0, 0, 0, PX_JOB_FLAG_BOTH},
    INT("virtual-stages", virtual_stages, 1),
    /* experts (moe.h) */
    INT("experts", experts, 0), INT("top-k", top_k, 1),
    FLT("capacity-factor", capacity_factor, 1e-6, 1e6),
    {"dropless", NULL, PX_JOB_FLAG_SET, F(dropless), 1, 0, 0, PX_JOB_FLAG_BOTH},
    INT("moe-every", moe_every, 1), FLT("aux-loss-coef", aux_loss_coef, 0.0, 1e6),
    {"precision", NULL, PX_JOB_FLAG_PRECISION, F(precision), 0, 0, 0, PX_JOB_FLAG_BOTH},
    /* the run and the optimizer */
    INT("batch", batch, 1), INT("steps", steps, 1),
    FLT("lr", lr, 1e-12, 10.0),
    {"seed", NULL, PX_JOB_FLAG_U64, F(seed), 0, 0, 0, PX_JOB_FLAG_BOTH},
    INT("warmup", warmup_steps, 0),
    FLT("weight-decay", weight_decay, 0.0, 10.0), FLT("min-lr-ratio", min_lr_ratio, 0.0, 1.0),
    INT("zero", zero, 0), INT("grad-accum", grad_accum, 1),
    {"grad-clip", "clip", PX_JOB_FLAG_FLOAT, F(grad_clip), 0, 0.0, 1e6, PX_JOB_FLAG_BOTH},
    FLT("bucket-mb", bucket_mb, 0.0, 4096.0),
    {"no-prefetch", NULL, PX_JOB_FLAG_SET, F(prefetch), 0, 0, 0, PX_JOB_FLAG_RANK},
    /* checkpoints */
    INT("checkpoint-every", checkpoint_every, 0),
    {"checkpoint-dir", NULL, PX_JOB_FLAG_PATH, F(checkpoint_dir), 0, 0, 0, PX_JOB_FLAG_BOTH},
    {"resume", NULL, PX_JOB_FLAG_PATH, F(resume_dir), 0, 0, 0, PX_JOB_FLAG_BOTH},
    {"export-safetensors", NULL, PX_JOB_FLAG_PATH, F(export_safetensors), 0, 0, 0,
     PX_JOB_FLAG_BOTH},
    /* data and validation */
    {"data", NULL, PX_JOB_FLAG_STR, F(data_path), 0, 0, 0, PX_JOB_FLAG_BOTH},
    {"val-data", NULL, PX_JOB_FLAG_STR, F(val_path), 0, 0, 0, PX_JOB_FLAG_BOTH},
    INT("eval-every", eval_every, 0), INT("eval-batches", eval_batches, 1),
};
const size_t px_job_flags_n = sizeof(px_job_flags) / sizeof(px_job_flags[0]);

#undef INT
#undef FLT

size_t px_job_flags_options(unsigned where, int base, struct option *opts, size_t cap)
{
    size_t n = 0;

    for (size_t i = 0; i < px_job_flags_n; i++) {
        const px_job_flag_t *f = &px_job_flags[i];
        int has_arg = f->kind == PX_JOB_FLAG_SET ? no_argument : required_argument;

        if (!(f->where & where))
            continue;
        if (n < cap)
            opts[n++] = (struct option){f->name, has_arg, NULL, base + (int)i};
        if (f->pctl_alias && where == PX_JOB_FLAG_PCTL && n < cap)
            opts[n++] = (struct option){f->pctl_alias, has_arg, NULL, base + (int)i};
    }
    return n;
}

const px_job_flag_t *px_job_flag_of(int val, int base)
{
    if (val < base || (size_t)(val - base) >= px_job_flags_n)
        return NULL;
    return &px_job_flags[val - base];
}

int px_job_flag_apply(const px_job_flag_t *f, unsigned where, const char *s,
                      px_job_config_t *cfg, const px_job_flag_parsers_t *p)
{
    char *field = (char *)cfg + f->offset;
    char flag[64];

    snprintf(flag, sizeof(flag), "--%s",
             where == PX_JOB_FLAG_PCTL && f->pctl_alias ? f->pctl_alias : f->name);
    switch (f->kind) {
    case PX_JOB_FLAG_INT:
        return p->parse_int(p->arg, flag, s, f->lo, (int *)(void *)field);
    case PX_JOB_FLAG_FLOAT:
        return p->parse_float(p->arg, flag, s, f->fmin, f->fmax, (float *)(void *)field);
    case PX_JOB_FLAG_U64:
        return p->parse_u64(p->arg, flag, s, (uint64_t *)(void *)field);
    case PX_JOB_FLAG_STR:
    case PX_JOB_FLAG_PATH:
        *(const char **)(void *)field = s;
        return 0;
    case PX_JOB_FLAG_SET:
        *(int *)(void *)field = f->lo;
        return 0;
    case PX_JOB_FLAG_SCHEDULE:
        cfg->schedule = px_pipe_schedule_parse(s);
        return cfg->schedule < 0 ? p->bad_name(p->arg, flag, s) : 0;
    case PX_JOB_FLAG_PRECISION:
        cfg->precision = px_job_config_precision_parse(s);
        return cfg->precision < 0 ? p->bad_name(p->arg, flag, s) : 0;
    }
    return p->bad_name(p->arg, flag, s);
}

int px_job_config_canon(const px_job_config_t *cfg, char *buf, size_t len)
{
    size_t off = 0;

    if (!buf || !len)
        return -1;
    buf[0] = '\0';
    for (size_t i = 0; i < px_job_flags_n; i++) {
        const px_job_flag_t *f = &px_job_flags[i];
        const char *field = (const char *)cfg + f->offset;
        char val[256];
        int n;

        /* where the data and files lie may differ from node to node */
        if (f->kind == PX_JOB_FLAG_PATH || !strcmp(f->name, "data") ||
            !strcmp(f->name, "val-data"))
            continue;
        switch (f->kind) {
        case PX_JOB_FLAG_INT:
        case PX_JOB_FLAG_SET:
            snprintf(val, sizeof(val), "%d", *(const int *)(const void *)field);
            break;
        case PX_JOB_FLAG_FLOAT: /* %a: exact, so equal text is equal bits */
            snprintf(val, sizeof(val), "%.9g (%a)", (double)*(const float *)(const void *)field,
                     (double)*(const float *)(const void *)field);
            break;
        case PX_JOB_FLAG_U64:
            snprintf(val, sizeof(val), "%llu",
                     (unsigned long long)*(const uint64_t *)(const void *)field);
            break;
        case PX_JOB_FLAG_STR:
        case PX_JOB_FLAG_PATH: {
            const char *v = *(const char *const *)(const void *)field;
            snprintf(val, sizeof(val), "%s", v ? v : "");
            for (char *c = val; *c; c++)
                if (*c == '\n')
                    *c = ' '; /* one line per flag */
            break;
        }
        case PX_JOB_FLAG_SCHEDULE:
            snprintf(val, sizeof(val), "%s", px_pipe_schedule_name(cfg->schedule));
            break;
        case PX_JOB_FLAG_PRECISION:
            snprintf(val, sizeof(val), "%s", px_job_config_precision_name(cfg->precision));
            break;
        default:
            val[0] = '\0';
        }
        n = snprintf(buf + off, len - off, "--%s=%s\n", f->name, val);
        if (n < 0 || (size_t)n >= len - off)
            return -1;
        off += (size_t)n;
    }
    return (int)off;
}
