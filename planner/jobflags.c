/* jobflags.c: the job flags' table and its application (jobflags.h).
 *
 * Invariant: every entry's offset and kind match the px_job_config_t field
 * (int, float, uint64_t or const char *). Constant data, any thread. */
#include "jobflags.h"

#include <stdio.h>
#include <string.h>

#include "pipesched.h"

#define F(field) offsetof(px_job_config_t, field)
#define INT(name, field, lo, arg, help)                                                      \
    {name, NULL, PX_JOB_FLAG_INT, F(field), lo, 0, 0, PX_JOB_FLAG_BOTH, arg, help}
#define FLT(name, field, a, b, arg, help)                                                    \
    {name, NULL, PX_JOB_FLAG_FLOAT, F(field), 0, a, b, PX_JOB_FLAG_BOTH, arg, help}
#define SET(name, field, v, help)                                                            \
    {name, NULL, PX_JOB_FLAG_SET, F(field), v, 0, 0, PX_JOB_FLAG_BOTH, NULL, help}
#define STR(name, kind, field, arg, help)                                                    \
    {name, NULL, kind, F(field), 0, 0, 0, PX_JOB_FLAG_BOTH, arg, help}

/* pctl's float ranges are the ones it always checked; the job's own rules
 * stay in px_job_config_check. The help texts are pctl's (its --help is
 * generated from them) and state the defaults of px_job_config_defaults. */
const px_job_flag_t px_job_flags[] = {
    /* the model */
    INT("layers", layers, 1, "N", "transformer blocks"),
    INT("heads", heads, 1, "N", "attention heads"),
    INT("dim", dim, 1, "N", "model width"),
    INT("seq", seq, 1, "N", "sequence length in tokens"),
    INT("vocab", vocab, 1, "N", "token ids (default 256, bytes); every token of the data file "
                                "must be below it"),
    /* the layout (layout.h) */
    INT("dp", layout.dp, 1, "N", "data-parallel degree (default 1)"),
    INT("tp", layout.tp, 1, "N", "tensor-parallel degree (default 1); each tensor group on one "
                                 "node"),
    INT("pp", layout.pp, 1, "N", "pipeline stages (default 1)"),
    INT("cp", layout.cp, 1, "N", "context-parallel degree: each sequence cut into 2 x cp chunks "
                                 "(default 1)"),
    INT("ep", layout.ep, 1, "N", "expert-parallel degree, dividing dp x cp (default 1)"),
    SET("sequence-parallel", sequence_parallel, 1,
        "split the activations between the tensor-parallel matrices along the sequence "
        "(Megatron-LM); seq divisible by tp"),
    /* the pipeline (pipesched.h) */
    INT("micro-batches", micro_batches, 1, "M", "pipeline (pp > 1): micro-batches per step "
                                                "(per grad-accum part) (default 1)"),
    {"schedule", NULL, PX_JOB_FLAG_SCHEDULE, F(schedule), 0, 0, 0, PX_JOB_FLAG_BOTH,
     "gpipe|1f1b|zb1|interleaved", "pipeline schedule (default 1f1b)"},
    STR("stage-layers", PX_JOB_FLAG_STR, stage_layers, "2,2,1,1",
        "layers of each pipeline stage (default: as even as possible, the first stages one "
        "more)"),
    INT("virtual-stages", virtual_stages, 1, "V", "interleaved 1F1B: model chunks per stage "
                                                  "(>= 2; layers divisible by pp x V, M a "
                                                  "multiple of pp)"),
    /* experts (moe.h) */
    INT("experts", experts, 0, "E", "mixture of experts: every --moe-every-th block has E MLP "
                                    "experts, E/ep per rank of the --ep group (default 0: "
                                    "dense)"),
    INT("top-k", top_k, 1, "K", "experts each token is routed to, 1 or 2 (default 2)"),
    FLT("capacity-factor", capacity_factor, 1e-6, 1e6, "F",
        "expert capacity ceil(tokens x k / E x F), overflow dropped (default 1.25)"),
    SET("dropless", dropless, 1, "no expert capacity: no token dropped"),
    INT("moe-every", moe_every, 1, "N", "every N-th block is a MoE block (default 1)"),
    FLT("aux-loss-coef", aux_loss_coef, 0.0, 1e6, "C",
        "Switch's load-balancing loss coefficient (default 0.01)"),
    {"precision", NULL, PX_JOB_FLAG_PRECISION, F(precision), 0, 0, 0, PX_JOB_FLAG_BOTH,
     "fp32|bf16", "fp32 (default) or bf16: bf16 GEMM and attention operands, fp32 weights, "
                  "gradients and AdamW state"},
    /* the run and the optimizer */
    INT("batch", batch, 1, "N", "GLOBAL batch in sequences, divisible by dp x grad-accum "
                                "(x micro-batches)"),
    INT("steps", steps, 1, "N", "optimizer steps"),
    FLT("lr", lr, 1e-12, 10.0, "F", "peak learning rate (default 2e-3)"),
    {"seed", NULL, PX_JOB_FLAG_U64, F(seed), 0, 0, 0, PX_JOB_FLAG_BOTH, "N",
     "initialisation and data seed (default 1337)"},
    INT("warmup", warmup_steps, 0, "N", "linear warmup steps (default 0: steps/20)"),
    FLT("weight-decay", weight_decay, 0.0, 10.0, "F",
        "AdamW decoupled weight decay (default 0.1)"),
    FLT("min-lr-ratio", min_lr_ratio, 0.0, 1.0, "F",
        "cosine floor as a fraction of lr (default 0.1)"),
    INT("zero", zero, 0, "Z", "ZeRO stage: 0 replicate, 1 shard optimizer state, 2 also "
                              "gradients, 3 also parameters (FSDP) (default 0)"),
    INT("grad-accum", grad_accum, 1, "N", "micro-batches per step; batch divisible by dp x N "
                                          "(default 1)"),
    {"grad-clip", "clip", PX_JOB_FLAG_FLOAT, F(grad_clip), 0, 0.0, 1e6, PX_JOB_FLAG_BOTH, "F",
     "clip the global gradient norm at F; 0 = off (default 1.0)"},
    FLT("bucket-mb", bucket_mb, 0.0, 4096.0, "F",
        "data-parallel gradient bucket in MiB, all-reduced while backward goes on (0: DDP's "
        "25 MiB spread evenly) (default 0)"),
    {"no-prefetch", NULL, PX_JOB_FLAG_SET, F(prefetch), 0, 0, 0, PX_JOB_FLAG_RANK, NULL,
     "ZeRO-3: gather each layer when it is needed, not the next one ahead"},
    /* checkpoints */
    INT("checkpoint-every", checkpoint_every, 0, "N",
        "write DIR/step_<N>/ every N steps and at the end (needs --checkpoint-dir)"),
    STR("checkpoint-dir", PX_JOB_FLAG_PATH, checkpoint_dir, "DIR", "where checkpoints go"),
    STR("resume", PX_JOB_FLAG_PATH, resume_dir, "DIR",
        "start from checkpoint DIR (a step_<N>/ directory), also with another dp or ZeRO "
        "stage"),
    STR("export-safetensors", PX_JOB_FLAG_PATH, export_safetensors, "FILE",
        "write the final weights as one safetensors file"),
    STR("init-from", PX_JOB_FLAG_PATH, init_from, "PATH",
        "start from Hugging Face GPT-2 weights: a directory with config.json and "
        "model.safetensors (transformers' save_pretrained), or the .safetensors file; its "
        "n_layer, n_head, n_embd, n_positions and vocab_size must be --layers, --heads, --dim, "
        "--seq and --vocab; with --experts each expert starts as its layer's MLP"),
    STR("export-hf", PX_JOB_FLAG_PATH, export_hf, "DIR",
        "write the final weights as a Hugging Face GPT-2 (config.json + model.safetensors, "
        "for GPT2LMHeadModel.from_pretrained(DIR))"),
    STR("tensorboard", PX_JOB_FLAG_PATH, tensorboard_dir, "DIR",
        "write TensorBoard event files while training (train/loss, val/loss, train/lr, "
        "train/grad_norm, train/tokens_per_second, train/mfu where the device's peak is known, "
        "per step; `tensorboard --logdir DIR`): "
        "pctl submit into DIR/<job id>/, parallax-rank into DIR itself"),
    /* data and validation */
    STR("data", PX_JOB_FLAG_STR, data_path, "FILE",
        "token file (llm.c layout, see `pctl data prepare`)"),
    STR("val-data", PX_JOB_FLAG_STR, val_path, "FILE", "validation token file"),
    INT("eval-every", eval_every, 0, "N",
        "validation loss every N steps and after the last (default steps/10; 0: last only)"),
    INT("eval-batches", eval_batches, 1, "K",
        "fixed validation batches of --batch sequences (default 4)"),
};
const size_t px_job_flags_n = sizeof(px_job_flags) / sizeof(px_job_flags[0]);

#undef INT
#undef FLT
#undef SET
#undef STR

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

/* Appends `s` to the help line, wrapping at 79 columns under column 22. */
static void help_wrap(FILE *out, int col, const char *s)
{
    const int indent = 21, width = 79;
    while (*s) {
        int n = 0, last = -1;
        while (s[n] && col + n < width) {
            if (s[n] == ' ')
                last = n;
            n++;
        }
        if (s[n] && last > 0)
            n = last;
        fprintf(out, "%.*s\n", n, s);
        s += n;
        while (*s == ' ')
            s++;
        if (*s)
            fprintf(out, "%*s", indent, "");
        col = indent;
    }
}

void px_job_flags_help(unsigned where, FILE *out)
{
    for (size_t i = 0; i < px_job_flags_n; i++) {
        const px_job_flag_t *f = &px_job_flags[i];
        char head[96];
        int n;
        if (!(f->where & where))
            continue;
        if (f->pctl_alias && where == PX_JOB_FLAG_PCTL)
            n = snprintf(head, sizeof(head), "  --%s %s (or --%s)", f->pctl_alias, f->arg,
                         f->name);
        else
            n = snprintf(head, sizeof(head), "  --%s%s%s", f->name, f->arg ? " " : "",
                         f->arg ? f->arg : "");
        if (n < 0 || (size_t)n >= sizeof(head))
            n = (int)strlen(head);
        if (n <= 19)
            fprintf(out, "%-21s", head);
        else
            fprintf(out, "%s\n%21s", head, "");
        help_wrap(out, 21, f->help ? f->help : "");
    }
}
