/* sample_rank.h: parallax-rank's sample mode (--sample WEIGHTS): one
 * process, no world, generates text from a job's weights (engine/sample.h)
 * and prints it on stdout. The daemon runs it for `pctl sample`. */
#ifndef PX_SAMPLE_RANK_H
#define PX_SAMPLE_RANK_H

#include "jobcfg.h"
#include "sample.h"

/* The sample mode's flags (parallax-rank --help lists them). */
typedef struct px_rank_sample_args {
    const char *weights;     /* --sample PATH: a safetensors file or a step_<N>/ checkpoint */
    const char *prompt;      /* --sample-prompt TEXT (NULL: none) */
    const char *prompt_file; /* --sample-prompt-file FILE: the prompt's bytes */
    const char *ids_out;     /* --sample-ids FILE: JSON {"prompt": [...], "ids": [...]} */
    const char *tokenizer;   /* --tokenizer FILE (NULL: the one beside the job's data,
                                px_tokenizer_sidecar_path, where there is one) */
    px_sample_opts_t opts;   /* --sample-tokens, -temperature, -top-k, -seed */
} px_rank_sample_args_t;

/* Defaults: 256 tokens, temperature 1.0, top_k 0 (all), seed 1337. */
void px_rank_sample_defaults(px_rank_sample_args_t *s);

/* Runs the sample mode for the model `cfg` describes (its dims, vocab and
 * precision; the layout is ignored; the data file only names the
 * tokenizer beside it) on `device` (NULL: cpu). The text is coded by
 * s->tokenizer, else the tokenizer beside cfg->data_path, else bytes
 * (vocab 256; engine/sample.h px_sample_codec_for).
 * Writes the generated text (decoded, without the prompt) to stdout.
 * Returns the exit status: 0 done, 1 a runtime error (logged), 2 bad
 * input (the message, naming the value, on stderr), 3 the weights not found. */
int px_rank_sample_main(const px_job_config_t *cfg, const px_rank_sample_args_t *s,
                        const char *device);

#endif
