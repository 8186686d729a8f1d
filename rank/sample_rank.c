/* sample_rank.c: parallax-rank --sample (sample_rank.h): the model's dims
 * from the job flags or --spec-file, the weights read, the prompt encoded
 * and the continuation decoded by the vocab's codec (engine/sample.h), the
 * text on stdout. Single-threaded; no transport. */
#include "sample_rank.h"

#include <errno.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "px_file.h"
#include "px_kernels_bf16.h"
#include "px_kernels_select.h"
#include "px_log.h"
#include "px_time.h"

void px_rank_sample_defaults(px_rank_sample_args_t *s)
{
    memset(s, 0, sizeof(*s));
    s->opts = (px_sample_opts_t){.tokens = 256, .temperature = 1.0f, .top_k = 0, .seed = 1337};
}

/* The tokenizer: --tokenizer, else the one beside the data file where
 * there is one (*tok_p NULL when neither: the byte codec). 0, or -1 after
 * printing why (a file that is not a tokenizer). */
static int load_tokenizer(const px_job_config_t *cfg, const px_rank_sample_args_t *s,
                          px_tokenizer_t **tok_p, char *path, size_t len)
{
    char err[1024];
    *tok_p = NULL;
    if (s->tokenizer)
        snprintf(path, len, "%s", s->tokenizer);
    else if (!cfg->data_path || !*cfg->data_path ||
             px_tokenizer_sidecar_path(cfg->data_path, path, len) || access(path, F_OK))
        return 0;
    if (px_tokenizer_load(path, err, sizeof(err), tok_p) != PX_OK) {
        fprintf(stderr, "parallax-rank: --sample: %s%s\n", err,
                s->tokenizer ? "" : " (the tokenizer beside the job's data)");
        return -1;
    }
    px_info("sample: text coded by the tokenizer %s", path);
    return 0;
}

static json_t *ids_json(const int32_t *ids, size_t n)
{
    json_t *a = json_array();
    for (size_t i = 0; a && i < n; i++)
        json_array_append_new(a, json_integer(ids[i]));
    return a;
}

int px_rank_sample_main(const px_job_config_t *cfg, const px_rank_sample_args_t *s,
                        const char *device)
{
    char err[1024];
    px_sample_codec_t codec;
    px_tokenizer_t *tok = NULL;
    char tok_path[4200] = "";
    const px_kernel_ops_t *ops, *mops;
    char *prompt = NULL, *text = NULL;
    size_t plen = 0, nprompt = 0, tlen = 0;
    int32_t *pids = NULL, *out = NULL;
    float *canon = NULL;
    int ret = 2;
    px_status_t status;

    if (cfg->layers < 1 || cfg->heads < 1 || cfg->dim < 1 || cfg->seq < 1 || cfg->vocab < 1 ||
        cfg->dim % cfg->heads) {
        fprintf(stderr, "parallax-rank: --sample needs the model's dims: layers=%d heads=%d "
                "dim=%d seq=%d vocab=%d (dim divisible by heads)\n", cfg->layers, cfg->heads,
                cfg->dim, cfg->seq, cfg->vocab);
        return 2;
    }
    if (cfg->experts > 0) {
        fprintf(stderr, "parallax-rank: --sample: experts=%d: sampling a model with experts is "
                "not supported yet\n", cfg->experts);
        return 2;
    }
    if (load_tokenizer(cfg, s, &tok, tok_path, sizeof(tok_path)))
        return 2;
    if (px_sample_codec_for(cfg->vocab, tok, tok_path, &codec, err, sizeof(err)) != PX_OK ||
        px_sample_opts_check(&s->opts, cfg->vocab, err, sizeof(err)) != PX_OK) {
        fprintf(stderr, "parallax-rank: --sample: %s\n", err);
        px_tokenizer_destroy(tok);
        return 2;
    }
    if (s->prompt_file) {
        if (px_read_file(s->prompt_file, &prompt, &plen)) {
            fprintf(stderr, "parallax-rank: --sample-prompt-file %s: %s\n", s->prompt_file,
                    strerror(errno));
            goto out;
        }
    } else if (s->prompt) {
        plen = strlen(s->prompt);
        prompt = malloc(plen + 1);
        if (!prompt) {
            ret = 1;
            goto out;
        }
        memcpy(prompt, s->prompt, plen + 1);
    }
    if (codec.encode(codec.arg, prompt ? prompt : "", plen, &pids, &nprompt, err,
                     sizeof(err)) != PX_OK) {
        fprintf(stderr, "parallax-rank: --sample: the prompt: %s\n", err);
        goto out;
    }
    ret = 1;
    px_gpt_config_t gc = {.layers = cfg->layers, .heads = cfg->heads, .dim = cfg->dim,
                          .max_seq = cfg->seq, .vocab = cfg->vocab,
                          .padded_vocab = px_job_config_padded_vocab(cfg->vocab)};
    status = px_sample_load_weights(s->weights, &gc, cfg->heads, &canon);
    if (status != PX_OK) {
        px_error("sample: cannot read the weights %s: %s", s->weights, px_status_str(status));
        ret = status == PX_ERR_NOT_FOUND ? 3 : status == PX_ERR_INVALID_ARGUMENT ? 2 : 1;
        goto out;
    }
    status = px_kernels_select(device, &ops, err, sizeof(err));
    if (status != PX_OK) {
        px_error("sample: device %s: %s", device ? device : "cpu", err);
        goto out;
    }
    mops = px_kernels_with_precision(ops, cfg->precision == PX_PRECISION_BF16
                                              ? PX_KERNELS_BF16_F32ACTS : PX_KERNELS_FP32);
    if (!mops) {
        px_error("sample: precision=bf16: the %s op table has no bf16 GEMM", ops->name);
        goto out;
    }
    out = malloc((size_t)s->opts.tokens * sizeof(*out));
    if (!out)
        goto out;
    double t0 = px_time_mono_s();
    status = px_sample_generate(&gc, mops, canon, pids, nprompt, codec.start_id, &s->opts, out);
    if (status != PX_OK) {
        px_error("sample: generation failed: %s", px_status_str(status));
        goto out;
    }
    px_info("sample: %d tokens in %.2f s from %s (prompt %zu tokens, temperature %g, top_k %d, "
            "seed %llu, %s)", s->opts.tokens, px_time_mono_s() - t0, s->weights, nprompt,
            (double)s->opts.temperature, s->opts.top_k, (unsigned long long)s->opts.seed,
            ops->name);
    if (codec.decode(codec.arg, out, (size_t)s->opts.tokens, &text, &tlen, err, sizeof(err)) !=
        PX_OK) {
        px_error("sample: decoding: %s", err);
        goto out;
    }
    if (s->ids_out) {
        json_t *o = json_pack("{s:o, s:o, s:s}", "prompt", ids_json(pids, nprompt), "ids",
                              ids_json(out, (size_t)s->opts.tokens), "codec", codec.name);
        if (!o || json_dump_file(o, s->ids_out, JSON_COMPACT)) {
            px_error("sample: cannot write %s", s->ids_out);
            json_decref(o);
            goto out;
        }
        json_decref(o);
    }
    if (fwrite(text, 1, tlen, stdout) != tlen || fflush(stdout)) {
        px_error("sample: writing the text: %s", strerror(errno));
        goto out;
    }
    ret = 0;
out:
    free(text);
    free(out);
    free(canon);
    free(pids);
    free(prompt);
    px_tokenizer_destroy(tok);
    return ret;
}
