/* sample.c: text generation from a trained GPT (sample.h): the generator,
 * the token pick, the byte codec, reading a job's weights, and the
 * autoregressive loop.
 *
 * Weights: a safetensors file is read tensor by tensor into the canonical
 * buffer (its header read by planner/safetensors.h); a checkpoint is loaded by
 * checkpoint.h's re-cutting reader into a one-rank ZeRO stage 0 state on
 * the CPU and gathered to the canonical layout. Either way the canonical
 * tensors are then copied into the unit layout of a px_gpt_create model on
 * the rank's device. Runs on the rank's one thread. */
#include "sample.h"

#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "checkpoint.h"
#include "hf_gpt2.h"
#include "plan.h"
#include "px_kernels_select.h"
#include "px_log.h"
#include "safetensors.h"
#include "zero.h"

px_status_t px_sample_opts_check(const px_sample_opts_t *o, int vocab, char *err, size_t errlen)
{
    if (o->tokens < 1 || o->tokens > PX_SAMPLE_MAX_TOKENS) {
        snprintf(err, errlen, "tokens=%d: must be 1..%d", o->tokens, PX_SAMPLE_MAX_TOKENS);
        return PX_ERR_INVALID_ARGUMENT;
    }
    if (!isfinite(o->temperature) || o->temperature < 0.0f) {
        snprintf(err, errlen, "temperature=%g: must be a finite number >= 0 (0: greedy)",
                 (double)o->temperature);
        return PX_ERR_INVALID_ARGUMENT;
    }
    if (o->top_k < 0 || o->top_k > vocab) {
        snprintf(err, errlen, "top_k=%d: must be 1..%d (the vocab), or 0 for no limit", o->top_k,
                 vocab);
        return PX_ERR_INVALID_ARGUMENT;
    }
    return PX_OK;
}

/* ------------------------------------------------------------ generator */

uint64_t px_sample_rng_init(uint64_t seed)
{
    uint64_t s = px_init_hash(seed);
    return s ? s : 1337;
}

uint32_t px_sample_rng_u32(uint64_t *state)
{
    /* llm.c train_gpt2.c random_u32: xorshift64* */
    *state ^= *state >> 12;
    *state ^= *state << 25;
    *state ^= *state >> 27;
    return (uint32_t)((*state * 0x2545F4914F6CDD1Dull) >> 32);
}

float px_sample_rng_f32(uint64_t *state)
{
    return (float)(px_sample_rng_u32(state) >> 8) / 16777216.0f;
}

/* ----------------------------------------------------------------- pick */

static int argmax(const float *z, int n)
{
    int best = 0;
    for (int i = 1; i < n; i++)
        if (z[i] > z[best])
            best = i;
    return best;
}

/* Sorting key of top-k: larger logit first, then the lower id. */
typedef struct {
    float z;
    int id;
} ranked_t;

static int by_rank(const void *a, const void *b)
{
    const ranked_t *x = a, *y = b;
    if (x->z != y->z)
        return x->z > y->z ? -1 : 1;
    return x->id - y->id;
}

size_t px_sample_scratch_bytes(int vocab)
{
    return (size_t)vocab * (sizeof(double) + sizeof(ranked_t) + 1);
}

int px_sample_pick(const float *logits, int vocab, float temperature, int top_k, uint64_t *rng,
                   void *scratch)
{
    if (temperature == 0.0f)
        return argmax(logits, vocab);
    double *p = scratch; /* (vocab) unnormalised probabilities, 0: left out */
    ranked_t *r = (ranked_t *)(p + vocab);        /* (vocab) the top-k ranking */
    unsigned char *keep = (unsigned char *)(r + vocab); /* (vocab) 1: among the top k */
    memset(keep, 1, (size_t)vocab);
    if (top_k > 0 && top_k < vocab) {
        for (int i = 0; i < vocab; i++)
            r[i] = (ranked_t){logits[i], i};
        qsort(r, (size_t)vocab, sizeof(*r), by_rank);
        memset(keep, 0, (size_t)vocab);
        for (int i = 0; i < top_k; i++)
            keep[r[i].id] = 1;
    }
    float zmax = logits[argmax(logits, vocab)]; /* always kept */
    double sum = 0.0;
    for (int i = 0; i < vocab; i++) {
        p[i] = keep[i] ? exp(((double)logits[i] - zmax) / temperature) : 0.0;
        sum += p[i];
    }
    /* llm.c sample_mult: the first id whose cumulative probability passes
     * the coin; rounding can leave the cdf just under it: the last kept id */
    double coin = (double)px_sample_rng_f32(rng) * sum, cdf = 0.0;
    int last = 0;
    for (int i = 0; i < vocab; i++) {
        if (p[i] == 0.0)
            continue;
        cdf += p[i];
        last = i;
        if (coin < cdf)
            return i;
    }
    return last;
}

/* ---------------------------------------------------------------- codec */

static px_status_t bytes_encode(void *arg, const char *text, size_t len, int32_t **ids_p,
                                size_t *n_p, char *err, size_t errlen)
{
    (void)arg, (void)err, (void)errlen;
    int32_t *ids = malloc((len ? len : 1) * sizeof(*ids));
    if (!ids)
        return PX_ERR_NO_MEMORY;
    for (size_t i = 0; i < len; i++)
        ids[i] = (unsigned char)text[i];
    *ids_p = ids;
    *n_p = len;
    return PX_OK;
}

static px_status_t bytes_decode(void *arg, const int32_t *ids, size_t n, char **text_p,
                                size_t *len_p, char *err, size_t errlen)
{
    (void)arg;
    char *t = malloc(n + 1);
    if (!t)
        return PX_ERR_NO_MEMORY;
    for (size_t i = 0; i < n; i++) {
        if (ids[i] < 0 || ids[i] > 255) {
            snprintf(err, errlen, "token %d at %zu is not a byte", (int)ids[i], i);
            free(t);
            return PX_ERR_INVALID_ARGUMENT;
        }
        t[i] = (char)ids[i];
    }
    t[n] = 0;
    *text_p = t;
    *len_p = n;
    return PX_OK;
}

/* The tokenizer's codec: its ids are uint32, the sampler's int32 (every id
 * is below 2^31 - 1, tokenizer.h). */
static px_status_t bpe_encode(void *arg, const char *text, size_t len, int32_t **ids_p,
                              size_t *n_p, char *err, size_t errlen)
{
    px_token_ids_t ids = {0};
    px_status_t status = px_tokenizer_encode(arg, text, len, &ids, err, errlen);
    int32_t *out = status == PX_OK ? malloc((ids.len ? ids.len : 1) * sizeof(*out)) : NULL;
    if (status == PX_OK && !out)
        status = PX_ERR_NO_MEMORY;
    for (size_t i = 0; out && i < ids.len; i++)
        out[i] = (int32_t)ids.ids[i];
    if (status == PX_OK) {
        *ids_p = out;
        *n_p = ids.len;
    }
    px_token_ids_free(&ids);
    return status;
}

static px_status_t bpe_decode(void *arg, const int32_t *ids, size_t n, char **text_p,
                              size_t *len_p, char *err, size_t errlen)
{
    uint32_t *u = malloc((n ? n : 1) * sizeof(*u));
    if (!u)
        return PX_ERR_NO_MEMORY;
    for (size_t i = 0; i < n; i++)
        u[i] = ids[i] < 0 ? UINT32_MAX : (uint32_t)ids[i]; /* refused by decode, named */
    px_status_t status = px_tokenizer_decode(arg, u, n, text_p, len_p, err, errlen);
    free(u);
    return status;
}

px_status_t px_sample_codec_for(int vocab, const px_tokenizer_t *tok, const char *tok_name,
                                px_sample_codec_t *codec, char *err, size_t errlen)
{
    if (tok) {
        uint32_t tv = px_tokenizer_vocab_size(tok);
        if (tv != (uint32_t)vocab) {
            snprintf(err, errlen, "the tokenizer has vocab %u, the model vocab %d: sample "
                     "with the tokenizer the model's data was prepared with (tokenizer %s)",
                     tv, vocab, tok_name);
            return PX_ERR_INVALID_ARGUMENT;
        }
        /* an empty prompt starts from "\n" as for bytes: its first token */
        px_token_ids_t nl = {0};
        px_status_t status = px_tokenizer_encode(tok, "\n", 1, &nl, err, errlen);
        if (status == PX_OK && nl.len == 0) {
            snprintf(err, errlen, "the tokenizer %s has no token for \"\\n\", which an "
                     "empty prompt starts from: give a prompt", tok_name);
            status = PX_ERR_INVALID_ARGUMENT;
        }
        if (status == PX_OK)
            *codec = (px_sample_codec_t){.name = "bpe", .vocab = vocab,
                                         .start_id = (int)nl.ids[0], .arg = (void *)tok,
                                         .encode = bpe_encode, .decode = bpe_decode};
        px_token_ids_free(&nl);
        return status;
    }
    if (vocab == 256) {
        *codec = (px_sample_codec_t){.name = "bytes", .vocab = 256, .start_id = '\n',
                                     .encode = bytes_encode, .decode = bytes_decode};
        return PX_OK;
    }
    snprintf(err, errlen, "vocab=%d: no tokenizer for it (text is decoded byte by byte only "
             "for vocab 256): give the tokenizer.json its data was prepared with", vocab);
    return PX_ERR_INVALID_ARGUMENT;
}

/* -------------------------------------------------------------- weights */

static px_status_t read_exact(int fd, void *buf, size_t n, off_t off, const char *path)
{
    char *p = buf;
    while (n) {
        ssize_t r = pread(fd, p, n, off);
        if (r < 0 && errno == EINTR)
            continue;
        if (r <= 0) {
            px_error("sample: read %s: %s", path, r < 0 ? strerror(errno) : "short file");
            return r < 0 ? PX_ERR_IO : PX_ERR_INVALID_ARGUMENT;
        }
        p += r;
        n -= (size_t)r;
        off += r;
    }
    return PX_OK;
}

/* A parallax export (px_safetensors_write's names) into canon; *hf_p = 1
 * (nothing read, nothing logged) when the file holds a Hugging Face GPT-2
 * instead (its wte under transformers' names). The header is read by
 * planner/safetensors.h, each tensor's shape checked against gc's. */
static px_status_t load_safetensors(const char *path, const px_gpt_config_t *gc, float *canon,
                                    int *hf_p)
{
    char err[1024];
    json_t *h = NULL;
    uint64_t data0, file_bytes;
    px_status_t status = px_safetensors_header(path, &h, &data0, &file_bytes, err, sizeof(err));
    if (status != PX_OK) {
        px_error("sample: %s", err);
        return status;
    }
    int fd = -1;
    if (!json_object_get(h, "wte") && (json_object_get(h, "wte.weight") ||
                                       json_object_get(h, "transformer.wte.weight"))) {
        *hf_p = 1;
        goto out;
    }
    if ((fd = open(path, O_RDONLY | O_CLOEXEC)) < 0) {
        px_error("sample: open %s: %s", path, strerror(errno));
        status = PX_ERR_IO;
        goto out;
    }
    for (int i = 0; i < PX_GPT_NUM_TENSORS && status == PX_OK; i++) {
        px_gpt_tensor_info_t ti;
        px_gpt_tensor_info_of(gc, i, &ti);
        long long shape[PX_SAFETENSORS_MAX_DIMS];
        uint64_t b, e;
        int nd, same;
        if (px_safetensors_entry(h, path, ti.name, PX_SAFETENSORS_MAX_DIMS, &nd, shape, data0,
                                 file_bytes, &b, &e, err, sizeof(err))) {
            px_error("sample: %s%s", err, json_object_get(h, ti.name) ? ""
                                          : " (not this model's weights)");
            status = PX_ERR_INVALID_ARGUMENT;
            break;
        }
        same = nd == ti.ndim;
        for (int d = 0; same && d < nd; d++)
            same = shape[d] == ti.shape[d];
        if (!same) {
            char want[64], have[64];
            int n = 0, m = 0;
            for (int d = 0; d < ti.ndim; d++)
                n += snprintf(want + n, sizeof(want) - (size_t)n, "%s%d", d ? "," : "",
                              ti.shape[d]);
            for (int d = 0; d < nd; d++)
                m += snprintf(have + m, sizeof(have) - (size_t)m, "%s%lld", d ? "," : "",
                              shape[d]);
            px_error("sample: %s: tensor '%s' has shape (%s), this model's is (%s)", path,
                     ti.name, have, want);
            status = PX_ERR_INVALID_ARGUMENT;
            break;
        }
        status = read_exact(fd, canon + ti.offset, ti.size * sizeof(float),
                            (off_t)(data0 + b), path);
    }
out:
    if (fd >= 0)
        close(fd);
    json_decref(h);
    return status;
}

static px_status_t load_checkpoint(const char *path, const px_gpt_config_t *gc, int heads,
                                   float *canon)
{
    px_status_t status;
    px_plan_t *plan = NULL;
    px_zero_t *z = NULL;
    px_plan_precision_t prec;
    uint64_t *units = NULL;
    int step;

    px_plan_precision_fp32(&prec);
    if (!px_plan_gpt_units(gc->layers, gc->dim, gc->vocab, gc->max_seq, &units))
        return PX_ERR_NO_MEMORY;
    status = px_plan_create(units, px_model_num_units(gc), 1, 1, 0, &prec, &plan);
    if (status == PX_OK)
        status = px_zero_create(gc, plan, NULL, px_kernels_cpu(), 1, 0, &z);
    if (status == PX_OK)
        status = px_checkpoint_load(path, z, gc, plan, heads, &step);
    if (status == PX_OK)
        status = px_zero_gather_canonical(z, canon);
    px_zero_destroy(z);
    px_plan_destroy(plan);
    free(units);
    return status;
}

px_status_t px_sample_load_weights(const char *path, const px_gpt_config_t *gc, int heads,
                                   float **canon_p)
{
    struct stat st;
    px_status_t status;
    size_t n = (size_t)px_model_num_params(gc);
    if (stat(path, &st) < 0) {
        px_error("sample: weights %s: %s", path, strerror(errno));
        return errno == ENOENT ? PX_ERR_NOT_FOUND : PX_ERR_IO;
    }
    float *canon = malloc(n * sizeof(float));
    if (!canon)
        return PX_ERR_NO_MEMORY;
    /* a directory of save_pretrained (config.json, model.safetensors), or
     * a checkpoint step_<N>/ (meta.json and the shards) */
    char probe[4200];
    snprintf(probe, sizeof(probe), "%s/model.safetensors", path);
    int hf = S_ISDIR(st.st_mode) && access(probe, F_OK) == 0;
    if (S_ISDIR(st.st_mode) && !hf)
        status = load_checkpoint(path, gc, heads, canon);
    else if (hf || (status = load_safetensors(path, gc, canon, &hf)) == PX_OK)
        status = hf ? px_hf_gpt2_read_canonical(path, gc, heads, canon) : PX_OK;
    if (status != PX_OK) {
        free(canon);
        return status;
    }
    *canon_p = canon;
    return PX_OK;
}

/* ----------------------------------------------------------- generation */

/* Copies the canonical tensors into the model's unit layout (tp 1: each
 * unit tensor is one run of its canonical slice). */
static void canonical_to_units(px_gpt_t *gpt, const px_kernel_ops_t *ops, const float *canon)
{
    const px_gpt_config_t *gc = px_gpt_config(gpt);
    float *params = px_gpt_params(gpt);
    size_t off = 0;
    for (int u = 0; u < px_gpt_num_units(gc); u++) {
        px_gpt_unit_tensor_t t[PX_MODEL_MAX_UNIT_TENSORS];
        int n = px_gpt_unit_tensors(gc, u, t);
        for (int k = 0; k < n; k++)
            for (int j = 0; j < px_model_shard_nruns(&t[k]); j++) {
                size_t lo, co, len;
                px_model_shard_run(&t[k], j, &lo, &co, &len);
                ops->mem_copy_from_host(params + off + t[k].unit_offset + lo,
                                        canon + t[k].canon_offset + co, len * sizeof(float));
            }
        off += t[n - 1].unit_offset + t[n - 1].size;
    }
    ops->synchronize();
}

px_status_t px_sample_generate(const px_gpt_config_t *gc, const px_kernel_ops_t *ops,
                               const float *canon, const int32_t *prompt, size_t nprompt,
                               int start_id, const px_sample_opts_t *o, int32_t *out)
{
    px_status_t status;
    px_gpt_t *gpt = NULL;
    int T = gc->max_seq, V = gc->vocab, Vp = px_model_padded_vocab(gc);
    size_t nctx = (nprompt ? nprompt : 1) + (size_t)o->tokens;
    int32_t *ctx_ids = malloc(nctx * sizeof(int32_t));
    float *row = malloc((size_t)Vp * sizeof(float));
    void *scratch = malloc(px_sample_scratch_bytes(V));
    int32_t *dev_in = NULL;
    uint64_t rng = px_sample_rng_init(o->seed);

    if (!ctx_ids || !row || !scratch) {
        status = PX_ERR_NO_MEMORY;
        goto out;
    }
    size_t len = 0;
    if (nprompt == 0)
        ctx_ids[len++] = start_id;
    for (size_t i = 0; i < nprompt; i++)
        ctx_ids[len++] = prompt[i];
    for (size_t i = 0; i < len; i++)
        if (ctx_ids[i] < 0 || ctx_ids[i] >= V) {
            px_error("sample: prompt token %d at %zu is not below the vocab %d", (int)ctx_ids[i],
                     i, V);
            status = PX_ERR_INVALID_ARGUMENT;
            goto out;
        }
    PX_CHECK_GOTO(px_gpt_create(gc, ops, 1, T, &gpt), status, out);
    canonical_to_units(gpt, ops, canon);
    dev_in = ops->mem_alloc((size_t)T * sizeof(int32_t));
    if (!dev_in) {
        status = PX_ERR_NO_MEMORY;
        goto out;
    }
    for (int s = 0; s < o->tokens; s++) {
        /* the context cropped to the block size (nanoGPT's generate) */
        size_t from = len > (size_t)T ? len - (size_t)T : 0;
        int t = (int)(len - from);
        px_gpt_ctx_t ctx = px_gpt_ctx_default(gpt);
        ctx.T = t;
        ops->mem_copy_from_host(dev_in, ctx_ids + from, (size_t)t * sizeof(int32_t));
        PX_CHECK_GOTO(px_gpt_forward_ctx(gpt, &ctx, dev_in, NULL, NULL), status, out);
        PX_CHECK_GOTO(px_gpt_forward_end(gpt), status, out);
        ops->mem_copy_to_host(row, px_gpt_logits(gpt) + (size_t)(t - 1) * Vp,
                              (size_t)Vp * sizeof(float));
        ops->synchronize();
        PX_CHECK_GOTO(px_kernels_check(ops), status, out);
        int id = px_sample_pick(row, V, o->temperature, o->top_k, &rng, scratch);
        out[s] = id;
        ctx_ids[len++] = id;
    }
    status = PX_OK;
out:
    ops->mem_free(dev_in);
    px_gpt_destroy(gpt);
    free(scratch);
    free(row);
    free(ctx_ids);
    return status;
}
