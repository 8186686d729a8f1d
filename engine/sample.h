/* sample.h: text generation from a trained GPT (parallax-rank --sample,
 * `pctl sample`).
 *
 * A job's weights (its exported safetensors file, or one of its
 * checkpoints, re-cut to one rank) are read into one single-rank model on
 * the rank's device; generation is autoregressive without a KV cache, as
 * nanoGPT's GPT.generate: each new token runs the forward over the context
 * (the prompt and the tokens generated so far, cropped to its last
 * block-size tokens: the model's max_seq), takes the logits of the last
 * position over the real vocab (the padded columns never win) and picks
 * the next token:
 *   temperature 0: greedy, the first index of the largest logit (as
 *     torch.argmax);
 *   temperature t > 0: p_i = exp((z_i - max z) / t) / sum, over the top_k
 *     largest logits when top_k > 0 (ties to the lower id) or over all;
 *     then llm.c's sample_mult: coin = px_sample_rng_f32, the first id (in
 *     increasing order) whose cumulative probability exceeds the coin.
 * So top_k 1 is greedy whatever the seed, and a seed fixes the text.
 *
 * Tokens <-> text go through a codec (px_sample_codec_t): bytes for vocab
 * 256 (pctl data prepare's byte-level files), or a Hugging Face byte-level
 * BPE tokenizer (planner/tokenizer.h) of the model's vocab.
 *
 * One thread; nothing is shared between calls. */
#ifndef PX_SAMPLE_H
#define PX_SAMPLE_H

#include <stddef.h>
#include <stdint.h>

#include "gpt.h"
#include "px_status.h"
#include "tokenizer.h"

/* The most tokens one call generates (pctl sample --tokens N). */
#define PX_SAMPLE_MAX_TOKENS 4096

/* How to pick each token (see the file comment). */
typedef struct px_sample_opts {
    int tokens;        /* new tokens, 1..PX_SAMPLE_MAX_TOKENS */
    float temperature; /* >= 0, finite; 0: greedy */
    int top_k;         /* >= 0; 0: every token of the vocab */
    uint64_t seed;     /* the generator's seed (px_sample_rng_init) */
} px_sample_opts_t;

/* Checks opts against a model of `vocab` token ids: tokens in 1..
 * PX_SAMPLE_MAX_TOKENS, temperature finite and >= 0, top_k in 0..vocab.
 * PX_ERR_INVALID_ARGUMENT with a message naming the value in err. */
px_status_t px_sample_opts_check(const px_sample_opts_t *o, int vocab, char *err, size_t errlen);

/* The generator: llm.c's random_u32 / random_f32 (train_gpt2.c), a
 * xorshift64* (Marsaglia's xorshift 12, 25, 27 then the multiplier
 * 0x2545F4914F6CDD1D, the high 32 bits), seeded with splitmix64(seed)
 * (px_init_hash) so that neighbouring seeds start far apart; the one seed
 * whose hash is 0 (a fixed point of xorshift) starts from llm.c's 1337.
 * px_sample_rng_f32 is uniform in [0, 1): the top 24 bits / 2^24. */
uint64_t px_sample_rng_init(uint64_t seed);
uint32_t px_sample_rng_u32(uint64_t *state);
float px_sample_rng_f32(uint64_t *state);

/* Bytes of the scratch px_sample_pick needs for `vocab` ids (malloc'd
 * memory: it holds doubles and the top-k ranking). */
size_t px_sample_scratch_bytes(int vocab);

/* The next token from `logits` (host, `vocab` floats: the real vocab's
 * columns) as the file comment says; `rng` advances by one draw when
 * temperature > 0 (none when greedy). `scratch`: px_sample_scratch_bytes
 * of malloc'd memory, borrowed. */
int px_sample_pick(const float *logits, int vocab, float temperature, int top_k, uint64_t *rng,
                   void *scratch);

/* Token ids <-> text. encode: text[len] into *ids_p (malloc'd, caller
 * frees) and *n_p; decode: ids[n] into *text_p (malloc'd, NUL-terminated
 * for convenience, caller frees) and *len_p bytes. Both return
 * PX_ERR_INVALID_ARGUMENT (message in err) for what they cannot code.
 * start_id: the token a generation without a prompt starts from (not part
 * of the output). */
typedef struct px_sample_codec {
    const char *name; /* "bytes" or "bpe" */
    int vocab;        /* the ids it produces are < vocab */
    int start_id;
    void *arg;
    px_status_t (*encode)(void *arg, const char *text, size_t len, int32_t **ids_p, size_t *n_p,
                          char *err, size_t errlen);
    px_status_t (*decode)(void *arg, const int32_t *ids, size_t n, char **text_p, size_t *len_p,
                          char *err, size_t errlen);
} px_sample_codec_t;

/* The codec for a model of `vocab` ids. With a tokenizer (tok, borrowed
 * while the codec is used; tok_name names it in messages): its encode and
 * decode (tokenizer.h); its vocab size must equal the model's, else
 * PX_ERR_INVALID_ARGUMENT naming both (a model trained on other tokens);
 * an empty prompt starts from the first token of "\n". Without (tok NULL):
 * bytes (byte b is id b; an empty prompt starts from "\n", nanoGPT's
 * sample.py default) when vocab is 256, else PX_ERR_INVALID_ARGUMENT
 * naming the vocab. The message is in err. */
px_status_t px_sample_codec_for(int vocab, const px_tokenizer_t *tok, const char *tok_name,
                                px_sample_codec_t *codec, char *err, size_t errlen);

/* Reads the canonical parameters (gpt.h px_gpt_tensor_info layout, host
 * memory, *canon_p malloc'd: px_model_num_params(gc) floats, caller frees)
 * of a model with dims gc (tp 1) from `path`: a safetensors file as
 * px_safetensors_write writes it (every tensor by name, F32, its shape
 * checked), a checkpoint directory step_<N>/ (checkpoint.h; any dp, tp
 * and ZeRO stage it was saved with, re-cut to one rank), or a Hugging Face
 * GPT-2 (a save_pretrained directory holding model.safetensors, or a
 * safetensors file of transformers' names: hf_gpt2.h
 * px_hf_gpt2_read_canonical). Errors:
 * PX_ERR_NOT_FOUND (no such file), PX_ERR_INVALID_ARGUMENT (another
 * model, a bad header; logged naming the tensor and both shapes),
 * PX_ERR_IO, PX_ERR_NO_MEMORY. */
px_status_t px_sample_load_weights(const char *path, const px_gpt_config_t *gc, int heads,
                                   float **canon_p);

/* Generates o->tokens tokens after prompt[nprompt] (ids < gc->vocab;
 * nprompt may be 0 with start_id set: the context starts from it) with the
 * model gc (tp 1, dims checked by px_gpt_create) holding `canon` on the op
 * table `ops` (borrowed; its memory ops move the weights and tokens).
 * out[o->tokens] gets the new ids. Errors: px_gpt_create's,
 * PX_ERR_INVALID_ARGUMENT for a prompt id out of range (logged),
 * a device kernel's (px_kernels_check), PX_ERR_NO_MEMORY. */
px_status_t px_sample_generate(const px_gpt_config_t *gc, const px_kernel_ops_t *ops,
                               const float *canon, const int32_t *prompt, size_t nprompt,
                               int start_id, const px_sample_opts_t *o, int32_t *out);

#endif
