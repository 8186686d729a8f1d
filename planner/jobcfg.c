/* jobcfg.c: a training job's one set of defaults and one validator
 * (jobcfg.h), shared by pctl, parallaxd (at submit) and parallax-rank (at
 * start, and the engine before it trains).
 *
 * The checks run in a fixed order, so the first problem reported is the
 * same wherever the check runs: sizes and ranges, the layout alone, the
 * model against the layout (dim % heads, heads % tp, layers >= pp, seq and
 * cp), the batch against dp x grad_accum, the optimizer, ZeRO, checkpoints,
 * paths, then what the engine cannot run yet (unless LAYOUT_ONLY), then the
 * files (with CHECK_DATA). Every message names the value as name=value.
 *
 * Pure code; the files are only read with PX_JOBCFG_CHECK_DATA. Any thread. */
#include "jobcfg.h"
#include "pipesched.h"

#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "data.h"
#include "hfgpt2.h"

/* Upper bounds of the sizes (the daemon's historical limits). */
#define MAX_LAYERS 1024
#define MAX_HEADS 1024
#define MAX_DIM 65536
#define MAX_SEQ (1 << 20)
#define MAX_VOCAB 65536 /* tokens are uint16 */
#define MAX_BATCH (1 << 20)
#define MAX_STEPS 1000000000
#define MAX_GRAD_ACCUM 1024
#define MAX_LR 10.0f
#define MAX_WEIGHT_DECAY 10.0f
#define MAX_GRAD_CLIP 1e6f

int px_job_config_precision_parse(const char *name)
{
    if (!name || !*name || !strcmp(name, "fp32"))
        return PX_PRECISION_FP32;
    return !strcmp(name, "bf16") ? PX_PRECISION_BF16 : -1;
}

const char *px_job_config_precision_name(int precision)
{
    return precision == PX_PRECISION_FP32 ? "fp32" : precision == PX_PRECISION_BF16 ? "bf16" : "?";
}

void px_job_config_defaults(px_job_config_t *cfg)
{
    memset(cfg, 0, sizeof(*cfg));
    cfg->vocab = PX_DEFAULT_VOCAB;
    px_layout_init(&cfg->layout);
    cfg->grad_accum = 1;
    cfg->micro_batches = 1;
    cfg->schedule = PX_PIPE_1F1B;
    cfg->virtual_stages = 1;
    cfg->lr = 2e-3f;
    cfg->min_lr_ratio = 0.1f;
    cfg->warmup_steps = -1;
    cfg->weight_decay = 0.1f;
    cfg->beta1 = 0.9f;
    cfg->beta2 = 0.95f;
    cfg->eps = 1e-8f;
    cfg->grad_clip = 1.0f;
    cfg->seed = 1337;
    cfg->zero = 0;
    cfg->prefetch = 1;
    cfg->bucket_mb = 0.0f;
    cfg->top_k = 2;
    cfg->moe_every = 1;
    cfg->capacity_factor = 1.25f;
    cfg->aux_loss_coef = 0.01f;
    cfg->eval_every = -1;
    cfg->eval_batches = 4;
}

int px_job_config_eval_every(const px_job_config_t *cfg)
{
    if (cfg->eval_every >= 0)
        return cfg->eval_every;
    return cfg->steps / 10 > 1 ? cfg->steps / 10 : 1;
}

static int has(const char *s)
{
    return s && *s;
}

/* Sizes and ranges of the plain integers. */
static px_status_t check_sizes(const px_job_config_t *cfg, char *errbuf, size_t errlen)
{
    const struct { const char *name; int v, lo, hi; } r[] = {
        {"layers", cfg->layers, 1, MAX_LAYERS},
        {"heads", cfg->heads, 1, MAX_HEADS},
        {"dim", cfg->dim, 1, MAX_DIM},
        {"seq", cfg->seq, 1, MAX_SEQ},
        {"vocab", cfg->vocab, 2, MAX_VOCAB},
        {"batch", cfg->batch, 1, MAX_BATCH},
        {"steps", cfg->steps, 1, MAX_STEPS},
        {"grad_accum", cfg->grad_accum, 1, MAX_GRAD_ACCUM},
        {"micro_batches", cfg->micro_batches, 1, MAX_BATCH},
        {"virtual_stages", cfg->virtual_stages, 1, MAX_LAYERS},
    };
    for (size_t i = 0; i < sizeof(r) / sizeof(r[0]); i++)
        if (r[i].v < r[i].lo || r[i].v > r[i].hi)
            return px_invalid(errbuf, errlen, "%s=%d is out of range (%d..%d)", r[i].name, r[i].v,
                        r[i].lo, r[i].hi);
    return PX_OK;
}

/* The model and the batch against the layout. */
static px_status_t check_layout(const px_job_config_t *cfg, char *errbuf, size_t errlen)
{
    const px_layout_t *l = &cfg->layout;
    px_status_t status = px_layout_check(l, errbuf, errlen);

    if (status != PX_OK)
        return status;
    if (cfg->dim % cfg->heads)
        return px_invalid(errbuf, errlen, "dim=%d is not divisible by heads=%d", cfg->dim, cfg->heads);
    if (cfg->heads % l->tp)
        return px_invalid(errbuf, errlen, "heads=%d is not divisible by tp=%d", cfg->heads, l->tp);
    int vp = px_job_config_padded_vocab(cfg->vocab);
    if (vp % l->tp)
        return px_invalid(errbuf, errlen, "padded vocab %d (vocab=%d rounded up to %d) is not "
                          "divisible by tp=%d (each tensor rank holds vocab rows)", vp,
                          cfg->vocab, PX_VOCAB_PAD, l->tp);
    if (cfg->sequence_parallel && cfg->seq % l->tp)
        return px_invalid(errbuf, errlen, "seq=%d is not divisible by tp=%d (sequence parallelism "
                          "splits each sequence over the tensor group)", cfg->seq, l->tp);
    if (cfg->layers < l->pp)
        return px_invalid(errbuf, errlen, "layers=%d is fewer than pp=%d pipeline stages (each stage "
                    "holds at least one layer)", cfg->layers, l->pp);
    /* context parallelism cuts each sequence into 2 x cp chunks, rank i
     * holding chunks i and 2cp-1-i (Megatron-LM's load-balanced causal
     * split) */
    if (l->cp > 1 && cfg->seq % (2 * l->cp))
        return px_invalid(errbuf, errlen, "seq=%d is not divisible by 2 x cp=%d (each context rank "
                    "holds two of the 2 x cp chunks of a sequence)", cfg->seq, l->cp);
    if ((long long)cfg->batch % ((long long)l->dp * cfg->grad_accum))
        return px_invalid(errbuf, errlen, "batch=%d is not divisible by dp=%d x grad_accum=%d",
                    cfg->batch, l->dp, cfg->grad_accum);
    if ((long long)cfg->batch % ((long long)l->dp * cfg->grad_accum * cfg->micro_batches))
        return px_invalid(errbuf, errlen, "batch=%d is not divisible by dp=%d x grad_accum=%d x "
                          "micro_batches=%d", cfg->batch, l->dp, cfg->grad_accum,
                          cfg->micro_batches);
    /* sequence parallelism splits the rows of each rank's micro-batch, B x
     * seq/cp tokens, over the tensor group (engine/gpt.c): with context
     * parallelism seq % tp alone does not make them divisible */
    if (cfg->sequence_parallel && l->tp > 1 && l->cp > 1) {
        long long bm = cfg->batch / ((long long)l->dp * cfg->grad_accum *
                                     (l->pp > 1 ? cfg->micro_batches : 1));
        if (bm * (cfg->seq / l->cp) % l->tp)
            return px_invalid(errbuf, errlen, "a micro-batch of %lld x seq=%d/cp=%d tokens per "
                              "rank is not divisible by tp=%d (sequence parallelism splits "
                              "them over the tensor group)", bm, cfg->seq, l->cp, l->tp);
    }
    if (cfg->schedule < 0 && cfg->schedule_name)
        return px_invalid(errbuf, errlen, "schedule='%s' is not a pipeline schedule (gpipe, 1f1b, "
                          "zb1, interleaved)", cfg->schedule_name);
    if (cfg->schedule < 0 || cfg->schedule >= PX_PIPE_NKINDS)
        return px_invalid(errbuf, errlen, "schedule=%d is not a pipeline schedule (gpipe, 1f1b, "
                          "zb1, interleaved)", cfg->schedule);
    if (cfg->schedule != PX_PIPE_INTERLEAVED && cfg->virtual_stages != 1)
        return px_invalid(errbuf, errlen, "virtual_stages=%d with schedule %s: model chunks per "
                          "stage need schedule interleaved", cfg->virtual_stages,
                          px_pipe_schedule_name(cfg->schedule));
    if (cfg->schedule == PX_PIPE_INTERLEAVED) {
        px_status_t st = px_pipe_interleaved_check(cfg->layers, l->pp, cfg->virtual_stages,
                                                   cfg->micro_batches, errbuf, errlen);
        if (st != PX_OK)
            return st;
        if (has(cfg->stage_layers))
            return px_invalid(errbuf, errlen, "stage_layers='%s' with schedule interleaved: its "
                              "chunks split the layers evenly (layers / (pp x virtual_stages))",
                              cfg->stage_layers);
    }
    if (cfg->precision < 0 && cfg->precision_name)
        return px_invalid(errbuf, errlen, "precision='%s' is not fp32 or bf16",
                          cfg->precision_name);
    if (cfg->precision != PX_PRECISION_FP32 && cfg->precision != PX_PRECISION_BF16)
        return px_invalid(errbuf, errlen, "precision=%d is not fp32 or bf16", cfg->precision);

    if (l->pp >= 1 && cfg->layers >= l->pp) { /* layers checked above: a small array */
        int sl[l->pp];
        px_status_t st = px_pipe_stage_layers(cfg->layers, l->pp, cfg->stage_layers, sl, errbuf,
                                              errlen);
        if (st != PX_OK)
            return st;
    }
    return PX_OK;
}

static px_status_t check_optimizer(const px_job_config_t *cfg, char *errbuf, size_t errlen)
{
    if (!isfinite(cfg->lr) || !(cfg->lr > 0.0f) || cfg->lr > MAX_LR)
        return px_invalid(errbuf, errlen, "lr=%g must be in (0, %g]", (double)cfg->lr, (double)MAX_LR);
    if (!(cfg->min_lr_ratio >= 0.0f && cfg->min_lr_ratio <= 1.0f))
        return px_invalid(errbuf, errlen, "min_lr_ratio=%g must be in [0, 1]",
                    (double)cfg->min_lr_ratio);
    if (cfg->warmup_steps < -1)
        return px_invalid(errbuf, errlen, "warmup_steps=%d must be >= 0 (-1: steps/20)",
                    cfg->warmup_steps);
    if (cfg->warmup_steps > cfg->steps)
        return px_invalid(errbuf, errlen, "warmup_steps=%d exceeds steps=%d", cfg->warmup_steps,
                    cfg->steps);
    if (!(cfg->weight_decay >= 0.0f && cfg->weight_decay <= MAX_WEIGHT_DECAY))
        return px_invalid(errbuf, errlen, "weight_decay=%g must be in [0, %g]",
                    (double)cfg->weight_decay, (double)MAX_WEIGHT_DECAY);
    if (!(cfg->beta1 >= 0.0f && cfg->beta1 < 1.0f))
        return px_invalid(errbuf, errlen, "beta1=%g must be in [0, 1)", (double)cfg->beta1);
    if (!(cfg->beta2 >= 0.0f && cfg->beta2 < 1.0f))
        return px_invalid(errbuf, errlen, "beta2=%g must be in [0, 1)", (double)cfg->beta2);
    if (!(cfg->eps > 0.0f) || !isfinite(cfg->eps))
        return px_invalid(errbuf, errlen, "eps=%g must be positive", (double)cfg->eps);
    if (!(cfg->grad_clip >= 0.0f && cfg->grad_clip <= MAX_GRAD_CLIP))
        return px_invalid(errbuf, errlen, "grad_clip=%g must be in [0, %g] (0 = off)",
                    (double)cfg->grad_clip, (double)MAX_GRAD_CLIP);
    return PX_OK;
}

static px_status_t check_state(const px_job_config_t *cfg, unsigned flags, char *errbuf,
                               size_t errlen)
{
    const struct { const char *name; const char *v; } paths[] = {
        {"data", cfg->data_path}, {"checkpoint_dir", cfg->checkpoint_dir},
        {"resume_dir", cfg->resume_dir}, {"export_safetensors", cfg->export_safetensors},
        {"val_data", cfg->val_path}, {"init_from", cfg->init_from},
        {"export_hf", cfg->export_hf}, {"tensorboard_dir", cfg->tensorboard_dir}};

    if (cfg->zero < 0 || cfg->zero > 3)
        return px_invalid(errbuf, errlen, "zero=%d must be 0, 1, 2 or 3", cfg->zero);
    if (cfg->prefetch != 0 && cfg->prefetch != 1)
        return px_invalid(errbuf, errlen, "prefetch=%d must be 0 or 1", cfg->prefetch);
    if (!(cfg->bucket_mb >= 0.0f && cfg->bucket_mb <= 4096.0f))
        return px_invalid(errbuf, errlen, "bucket_mb=%g must be in [0, 4096] (0 = auto)",
                          (double)cfg->bucket_mb);
    if (cfg->checkpoint_every < 0)
        return px_invalid(errbuf, errlen, "checkpoint_every=%d must be >= 0 (0 = never)",
                    cfg->checkpoint_every);
    if (cfg->checkpoint_every > 0 && !has(cfg->checkpoint_dir))
        return px_invalid(errbuf, errlen, "checkpoint_every=%d needs checkpoint_dir",
                    cfg->checkpoint_every);
    if (!has(cfg->data_path))
        return px_invalid(errbuf, errlen, "data file: no path given (--data)");
    if (cfg->eval_every < -1)
        return px_invalid(errbuf, errlen, "eval_every=%d must be >= 0 (0: at the end only)",
                          cfg->eval_every);
    if (cfg->eval_batches < 1 || cfg->eval_batches > MAX_STEPS)
        return px_invalid(errbuf, errlen, "eval_batches=%d is out of range (1..%d)",
                          cfg->eval_batches, MAX_STEPS);
    if (flags & PX_JOBCFG_ABSOLUTE_PATHS)
        for (size_t i = 0; i < sizeof(paths) / sizeof(paths[0]); i++)
            if (has(paths[i].v) && paths[i].v[0] != '/')
                return px_invalid(errbuf, errlen, "%s='%s' must be an absolute path (the ranks run "
                            "in other directories)", paths[i].name, paths[i].v);
    return PX_OK;
}

/* The mixture of experts against the layout: experts divided over ep,
 * top-k within the experts, a capacity that admits tokens. */
static px_status_t check_moe(const px_job_config_t *cfg, char *errbuf, size_t errlen)
{
    const px_layout_t *l = &cfg->layout;
    if (cfg->experts < 0 || cfg->experts > 4096)
        return px_invalid(errbuf, errlen, "experts=%d is out of range (0..4096; 0: dense MLP)",
                          cfg->experts);
    if (!cfg->experts)
        return PX_OK; /* ep > 1 without experts: check_engine */
    if (cfg->top_k < 1 || cfg->top_k > 2)
        return px_invalid(errbuf, errlen, "top_k=%d must be 1 or 2", cfg->top_k);
    if (cfg->top_k > cfg->experts)
        return px_invalid(errbuf, errlen, "top_k=%d is larger than experts=%d", cfg->top_k,
                          cfg->experts);
    if (cfg->experts % l->ep)
        return px_invalid(errbuf, errlen, "experts=%d is not divisible by ep=%d (each expert-"
                          "parallel rank holds experts/ep of them)", cfg->experts, l->ep);
    if (cfg->moe_every < 1 || cfg->moe_every > cfg->layers)
        return px_invalid(errbuf, errlen, "moe_every=%d is out of range (1..layers=%d)",
                          cfg->moe_every, cfg->layers);
    if (!cfg->dropless && (!(cfg->capacity_factor > 0.0f) || !isfinite(cfg->capacity_factor)))
        return px_invalid(errbuf, errlen, "capacity_factor=%g must be positive (or dropless)",
                          (double)cfg->capacity_factor);
    if (!(cfg->aux_loss_coef >= 0.0f) || !isfinite(cfg->aux_loss_coef))
        return px_invalid(errbuf, errlen, "aux_loss_coef=%g must be >= 0",
                          (double)cfg->aux_loss_coef);
    return PX_OK;
}

/* Layouts the engine cannot run yet: it trains data, tensor, pipeline,
 * context and expert parallel (+ ZeRO), not every combination. */
static px_status_t check_engine(const px_job_config_t *cfg, char *errbuf, size_t errlen)
{
    /* precision=bf16 runs in every layout below: its bf16 GEMMs
     * are a property of the op table (kernels/px_kernels_bf16.h), and the
     * state and collectives every layout shares stay fp32 */
    const px_layout_t *l = &cfg->layout;
    if (l->ep > 1 && !cfg->experts)
        return px_invalid(errbuf, errlen, "ep=%d needs experts (--experts E, a multiple of ep); "
                          "the model has experts=0", l->ep);
    if (cfg->experts && l->pp > 1 && cfg->schedule == PX_PIPE_ZB1)
        return px_invalid(errbuf, errlen, "experts=%d with schedule zb1: the MoE layers have no "
                          "split backward (use gpipe, 1f1b or interleaved)", cfg->experts);
    if (l->pp > 1 && cfg->schedule == PX_PIPE_ZB1 && l->tp > 1)
        return px_invalid(errbuf, errlen, "schedule zb1 with tp=%d: the split backward runs with "
                          "tp 1 only so far", l->tp);
    if (l->pp > 1 && cfg->zero > 1)
        return px_invalid(errbuf, errlen, "zero=%d with pp=%d: pipeline parallelism runs with "
                          "ZeRO 0 and 1 so far", cfg->zero, l->pp);
    if (l->pp > 1 && (cfg->checkpoint_every > 0 || has(cfg->resume_dir)))
        return px_invalid(errbuf, errlen, "pp=%d: checkpoints of pipeline stages are not "
                          "implemented yet (checkpoint_every=%d, resume_dir '%s')", l->pp,
                          cfg->checkpoint_every, has(cfg->resume_dir) ? cfg->resume_dir : "");
    if (has(cfg->init_from) && has(cfg->resume_dir))
        return px_invalid(errbuf, errlen, "init_from '%s' and resume_dir '%s': a run starts "
                          "from one of them", cfg->init_from, cfg->resume_dir);
    if (has(cfg->export_hf) && cfg->experts)
        return px_invalid(errbuf, errlen, "experts=%d with export_hf: a Hugging Face GPT-2 has "
                          "no experts (--export-safetensors writes them)", cfg->experts);
    /* context parallelism (engine/ring_attn.h) runs with dp, tp (and sequence
     * parallelism), ZeRO 0-3, gradient accumulation, checkpoints and every
     * pipeline schedule: no rule of its own beyond the sequence's split */
    return PX_OK;
}

/* The token file (header, size, every token < vocab, seq + 1 tokens) and a
 * resume directory's completeness. */
static px_status_t check_files(const px_job_config_t *cfg, char *errbuf, size_t errlen)
{
    px_data_t *data = NULL;
    px_status_t status = px_data_open(cfg->data_path, cfg->vocab, errbuf, errlen, &data);
    size_t ntok;

    if (status != PX_OK)
        return status == PX_ERR_NOT_FOUND ? PX_ERR_NOT_FOUND : PX_ERR_INVALID_ARGUMENT;
    ntok = px_data_num_tokens(data);
    px_data_close(data);
    if ((size_t)cfg->seq + 1 > ntok)
        return px_invalid(errbuf, errlen, "seq=%d needs %d tokens but data file %s has %zu", cfg->seq,
                    cfg->seq + 1, cfg->data_path, ntok);
    if (has(cfg->val_path)) { /* the same rules as the training data */
        status = px_data_open(cfg->val_path, cfg->vocab, errbuf, errlen, &data);
        if (status != PX_OK)
            return status == PX_ERR_NOT_FOUND ? PX_ERR_NOT_FOUND : PX_ERR_INVALID_ARGUMENT;
        ntok = px_data_num_tokens(data);
        px_data_close(data);
        if ((size_t)cfg->seq + 1 > ntok)
            return px_invalid(errbuf, errlen, "seq=%d needs %d tokens but validation file %s has "
                              "%zu", cfg->seq, cfg->seq + 1, cfg->val_path, ntok);
    }
    if (has(cfg->init_from)) {
        /* the checkpoint's dims against the job's, at submit */
        px_hf_gpt2_t hf;
        px_model_config_t mc = {.layers = cfg->layers, .heads = cfg->heads, .dim = cfg->dim,
                                .max_seq = cfg->seq, .vocab = cfg->vocab};
        status = px_hf_gpt2_open(cfg->init_from, &hf, errbuf, errlen);
        if (status == PX_OK) {
            status = px_hf_gpt2_check(&hf, &mc, cfg->heads, errbuf, errlen);
            px_hf_gpt2_close(&hf);
        }
        if (status != PX_OK)
            return status == PX_ERR_NOT_FOUND ? PX_ERR_NOT_FOUND : PX_ERR_INVALID_ARGUMENT;
    }
    if (has(cfg->resume_dir)) {
        /* a resume needs a complete checkpoint, whose meta.json is written
         * last (engine/checkpoint.h): caught here, not minutes later */
        char meta[4200];
        snprintf(meta, sizeof(meta), "%s/meta.json", cfg->resume_dir);
        if (access(meta, R_OK))
            return px_invalid(errbuf, errlen, "resume_dir='%s' is an incomplete or missing checkpoint "
                        "(cannot read meta.json: %s)", cfg->resume_dir, strerror(errno));
    }
    return PX_OK;
}

px_status_t px_job_config_check(const px_job_config_t *cfg, unsigned flags, char *errbuf,
                                size_t errlen)
{
    px_status_t status;

    if (errbuf && errlen)
        errbuf[0] = '\0';
    if ((status = check_sizes(cfg, errbuf, errlen)) != PX_OK ||
        (status = check_layout(cfg, errbuf, errlen)) != PX_OK ||
        (status = check_moe(cfg, errbuf, errlen)) != PX_OK ||
        (status = check_optimizer(cfg, errbuf, errlen)) != PX_OK ||
        (status = check_state(cfg, flags, errbuf, errlen)) != PX_OK)
        return status;
    if (!(flags & PX_JOBCFG_LAYOUT_ONLY) && (status = check_engine(cfg, errbuf, errlen)) != PX_OK)
        return status;
    if (flags & PX_JOBCFG_CHECK_DATA)
        return check_files(cfg, errbuf, errlen);
    return PX_OK;
}
