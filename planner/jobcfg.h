/* jobcfg.h: a training job's configuration, its ONE set of defaults and its
 * ONE validator, shared by pctl, parallaxd and parallax-rank.
 *
 * pctl fills a px_job_config_t from its flags and sends it as a JobSpec
 * (jobspec.h converts); the daemon converts the JobSpec back, validates it
 * here at submit and hands the same JobSpec to the ranks; parallax-rank
 * converts and validates again (standalone ranks fill the struct from their
 * own flags). So a default or a rule is written once, here.
 *
 * Strings are borrowed: the struct never owns them. Pure code (the data
 * check reads the token file, nothing else). Any thread. */
#ifndef PX_JOBCFG_H
#define PX_JOBCFG_H

#include <stddef.h>
#include <stdint.h>

#include "layout.h"
#include "px_status.h"

/* Byte-level data (pctl data prepare) has 256 token ids. */
#define PX_DEFAULT_VOCAB 256
/* The model pads its vocab rows to a multiple of this (llm.c: 50257 ->
 * 50304); the padded logits are masked out of the loss. */
#define PX_VOCAB_PAD 64

typedef struct px_job_config {
    /* model: GPT dims; seq = T, tokens per sequence; vocab = token ids */
    int layers, heads, dim, seq, vocab;
    /* parallel layout (layout.h); world = dp x tp x pp x cp */
    px_layout_t layout;
    int sequence_parallel; /* Megatron's sequence parallelism in the tensor
                              group (1/0); a no-op with tp = 1 */
    /* batch: global batch in sequences, cut into grad_accum micro-batches */
    int batch, steps, grad_accum;
    /* pipeline (pp > 1, pipesched.h): each of the grad_accum parts is cut
     * into micro_batches micro-batches that flow through the stages by
     * `schedule` (px_pipe_schedule_kind_t); stage_layers: "2,2,1,1" or
     * NULL / "" for an even split; virtual_stages: model chunks per stage
     * (interleaved 1F1B: V >= 2, layers % (pp x V) == 0, micro_batches %
     * pp == 0; 1 with every other schedule) */
    int micro_batches, schedule, virtual_stages;
    const char *stage_layers;
    /* optimizer: AdamW with linear warm-up then cosine to lr * min_lr_ratio */
    float lr, min_lr_ratio;
    int warmup_steps;      /* -1: steps / 20 */
    float weight_decay;    /* on matrices only */
    float beta1, beta2, eps;
    float grad_clip;       /* global-norm clip; 0 = off */
    uint64_t seed;
    const char *data_path; /* llm.c-layout token file */
    int zero;              /* ZeRO stage 0..3 */
    int prefetch;          /* ZeRO-3 gather prefetch (1) */
    float bucket_mb;       /* data-parallel gradient bucket, MiB; 0 = by the model's size
                            * (engine/zero.h px_zero_bucket_bytes) */
    int checkpoint_every;  /* steps; 0 = never */
    const char *checkpoint_dir, *resume_dir, *export_safetensors;
    /* Hugging Face GPT-2 weights (planner/hfgpt2.h): init_from, a
     * transformers checkpoint (a directory with config.json and
     * model.safetensors, or the .safetensors file) the parameters start
     * from instead of the seed's; export_hf, a directory the final weights
     * go to as config.json + model.safetensors (GPT2LMHeadModel loads it).
     * NULL / "": none */
    const char *init_from, *export_hf;
    /* TensorBoard (tboard/px_tb.h): the run directory rank 0 writes the
     * step scalars to while it trains, one event file per start (a
     * restart adds steps after those already there). NULL / "": none */
    const char *tensorboard_dir;
    /* mixture of experts (engine/moe.h): experts 0 = a dense model; else
     * every moe_every-th layer (layers l with (l + 1) % moe_every == 0) has
     * `experts` MLP experts, each token routed to top_k (1 or 2) of them by
     * a softmax router; expert capacity ceil(tokens x top_k / experts x
     * capacity_factor) over the expert-parallel group's tokens, overflow
     * dropped, unless dropless; Switch's load-balancing loss times
     * aux_loss_coef. The experts are divided over layout.ep. */
    int experts, top_k, moe_every, dropless;
    float capacity_factor, aux_loss_coef;
    /* validation: val_path, a token file like data_path (NULL /
     * "": no validation); every eval_every steps (-1: steps / 10, at least
     * 1; 0: only at the end) and after the last step the ranks compute the
     * mean loss over eval_batches fixed batches of `batch` sequences
     * (engine/eval.h) */
    const char *val_path;
    int eval_every, eval_batches;
    int precision;         /* PX_PRECISION_FP32 (default) or _BF16;
                              -1 an unknown name (the check names it) */
    /* the names as given when precision / schedule could not be parsed
     * (-1), borrowed from the input (a JobSpec, argv); NULL otherwise. The
     * check names them as sent ("precision='fp64' ...") instead of the -1 */
    const char *precision_name, *schedule_name;
} px_job_config_t;

/* Compute precision: fp32 everywhere (the default and the equivalence
 * oracle), or bf16: "bf16 GEMM and attention operands, fp32 elsewhere" (kernels/px_kernels_bf16.h)
 * - every linear layer multiplies bf16-rounded activations and weights with
 * fp32 accumulation; master weights, activations in memory, gradients,
 * optimizer state, reductions and collectives stay fp32. Every layout. */
enum { PX_PRECISION_FP32 = 0, PX_PRECISION_BF16 = 1 };

/* "fp32" / "bf16" -> PX_PRECISION_*; NULL or "" -> fp32; else -1. */
int px_job_config_precision_parse(const char *name);
/* PX_PRECISION_* -> "fp32" / "bf16" ("?" otherwise); static string. */
const char *px_job_config_precision_name(int precision);

/* The defaults: vocab 256, layout all 1, grad_accum 1, micro_batches 1,
 * schedule 1F1B, virtual_stages 1, lr 2e-3,
 * min_lr_ratio 0.1, warmup -1 (steps/20), weight_decay 0.1, betas 0.9/0.95,
 * eps 1e-8, grad_clip 1.0, seed 1337, zero 0, prefetch 1, bucket_mb 0 (auto);
 * experts 0 (dense), top_k 2, moe_every 1, capacity_factor 1.25, aux_loss_coef 0.01;
 * eval_every -1 (steps / 10), eval_batches 4. Sizes, steps and paths are left 0 / NULL. */
void px_job_config_defaults(px_job_config_t *cfg);

/* What px_job_config_check looks at beyond the config itself. */
enum {
    PX_JOBCFG_CHECK_DATA = 1,     /* open the token file: header, size, seq + 1
                                     tokens, every token < vocab (names the
                                     largest token and the vocab); and a
                                     resume_dir must hold meta.json; an
                                     init_from checkpoint's dims must be the
                                     job's (hfgpt2.h) */
    PX_JOBCFG_ABSOLUTE_PATHS = 2, /* paths must be absolute (the daemon's
                                     ranks run in other directories) */
    PX_JOBCFG_LAYOUT_ONLY = 4,    /* accept layouts the engine cannot run yet
                                     (pctl plan) */
};

/* Validates the config: every size positive and in range, dim % heads, the
 * layout (px_layout_check) against the model and batch (heads % tp, layers
 * >= pp, batch % (dp x grad_accum), ...), the optimizer's values, the
 * checkpoint options, and with `flags` the data file. The first problem is
 * written into errbuf naming the value ("batch=10 is not divisible by dp=4 x
 * grad_accum=1"). Returns PX_OK, PX_ERR_INVALID_ARGUMENT, or
 * PX_ERR_NOT_FOUND for a data file that does not exist. */
px_status_t px_job_config_check(const px_job_config_t *cfg, unsigned flags, char *errbuf,
                                size_t errlen);

/* The steps between validations of cfg (eval_every, -1 resolved to
 * max(1, steps / 10)); 0: at the end only. */
int px_job_config_eval_every(const px_job_config_t *cfg);

/* Vocab rows the model allocates: vocab rounded up to PX_VOCAB_PAD. */
int px_job_config_padded_vocab(int vocab);

#endif
