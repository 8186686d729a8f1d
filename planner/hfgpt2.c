/* hfgpt2.c: Hugging Face GPT-2 checkpoints described (hfgpt2.h).
 *
 * The safetensors header is read by safetensors.h, config.json parsed with
 * jansson; the
 * dims come from the tensors' shapes (wte: vocab and n_embd, wpe:
 * n_positions, the h.<l> blocks: n_layer) and config.json, where there is
 * one, must agree with them. */
#include "hfgpt2.h"

#include <errno.h>
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "safetensors.h"

/* The names, in the canonical order of model.h (checked against it). */
static const struct {
    const char *canon, *hf;
    int transposed;
} names[PX_MODEL_NUM_TENSORS] = {
    {"wte", "wte.weight", 0},
    {"wpe", "wpe.weight", 0},
    {"ln1w", "h.%d.ln_1.weight", 0},
    {"ln1b", "h.%d.ln_1.bias", 0},
    {"qkvw", "h.%d.attn.c_attn.weight", 1},
    {"qkvb", "h.%d.attn.c_attn.bias", 0},
    {"attprojw", "h.%d.attn.c_proj.weight", 1},
    {"attprojb", "h.%d.attn.c_proj.bias", 0},
    {"ln2w", "h.%d.ln_2.weight", 0},
    {"ln2b", "h.%d.ln_2.bias", 0},
    {"fcw", "h.%d.mlp.c_fc.weight", 1},
    {"fcb", "h.%d.mlp.c_fc.bias", 0},
    {"fcprojw", "h.%d.mlp.c_proj.weight", 1},
    {"fcprojb", "h.%d.mlp.c_proj.bias", 0},
    {"lnfw", "ln_f.weight", 0},
    {"lnfb", "ln_f.bias", 0},
};

int px_hf_gpt2_name(int i, int l, int prefixed, char *buf, size_t len)
{
    if (i < 0 || i >= PX_MODEL_NUM_TENSORS)
        return -1;
    int n = snprintf(buf, len, "%s", prefixed ? "transformer." : "");
    snprintf(buf + n, len - (size_t)n, names[i].hf, l);
    return names[i].transposed;
}

/* A tensor's entry (safetensors.h), of 1 or 2 dims. */
static int entry(const px_hf_gpt2_t *hf, json_t *hdr, uint64_t data, const char *name, int *ndim,
                 long long shape[PX_SAFETENSORS_MAX_DIMS], uint64_t *begin, uint64_t *end,
                 char *err, size_t errlen)
{
    int r = px_safetensors_entry(hdr, hf->file, name, 2, ndim, shape, data, hf->file_bytes,
                                 begin, end, err, errlen);
    if (r && !json_object_get(hdr, name)) /* the plainest cause first */
        px_invalid(err, errlen, "%s has no tensor %s (not a GPT-2 checkpoint of "
                   "transformers?)", hf->file, name);
    return r;
}

/* config.json's dims and math into *cfgdims (layers, heads, dim,
 * positions, vocab; 0 where absent). Returns PX_OK, or an error in err. */
static px_status_t read_config(const char *cpath, int dims[5], char *err, size_t errlen)
{
    json_error_t jerr;
    json_t *c = json_load_file(cpath, 0, &jerr);
    px_status_t status = PX_OK;
    static const char *keys[5] = {"n_layer", "n_head", "n_embd", "n_positions", "vocab_size"};
    if (!c)
        return px_invalid(err, errlen, "%s: not JSON: %s (line %d)", cpath, jerr.text,
                          jerr.line);
    const char *type = json_string_value(json_object_get(c, "model_type"));
    const char *act = json_string_value(json_object_get(c, "activation_function"));
    json_t *eps = json_object_get(c, "layer_norm_epsilon"), *inner = json_object_get(c, "n_inner");
    for (int k = 0; k < 5; k++) {
        json_t *v = json_object_get(c, keys[k]);
        if (!json_is_integer(v) || json_integer_value(v) < 1 ||
            json_integer_value(v) > (1 << 30)) {
            status = px_invalid(err, errlen, "%s: %s is missing or not a positive integer",
                                cpath, keys[k]);
            goto out;
        }
        dims[k] = (int)json_integer_value(v);
    }
    /* the math parallax computes (gpt.h): anything else would load and
     * train a different function under the same weights */
    if (type && strcmp(type, "gpt2"))
        status = px_invalid(err, errlen, "%s: model_type '%s' is not gpt2", cpath, type);
    else if (act && strcmp(act, "gelu_new") && strcmp(act, "gelu_pytorch_tanh"))
        status = px_invalid(err, errlen, "%s: activation_function '%s': parallax computes "
                            "GELU's tanh approximation (gelu_new)", cpath, act);
    else if (eps && (!json_is_number(eps) || fabs(json_number_value(eps) - 1e-5) > 1e-12))
        status = px_invalid(err, errlen, "%s: layer_norm_epsilon %g: parallax's LayerNorm "
                            "uses 1e-5", cpath, json_is_number(eps) ? json_number_value(eps)
                                                                     : NAN);
    else if (inner && !json_is_null(inner) &&
             (!json_is_integer(inner) || json_integer_value(inner) != 4LL * dims[2]))
        status = px_invalid(err, errlen, "%s: n_inner is not 4 x n_embd = %d: parallax's "
                            "MLP is 4 x wide", cpath, 4 * dims[2]);
    else if (json_is_false(json_object_get(c, "scale_attn_weights")) ||
             json_is_true(json_object_get(c, "scale_attn_by_inverse_layer_idx")))
        status = px_invalid(err, errlen, "%s: the attention is scaled otherwise than by "
                            "1/sqrt(head size) (scale_attn_weights, "
                            "scale_attn_by_inverse_layer_idx)", cpath);
    else if (json_is_false(json_object_get(c, "tie_word_embeddings")))
        status = px_invalid(err, errlen, "%s: tie_word_embeddings is false: parallax's LM "
                            "head is the token embedding", cpath);
    else if (dims[2] % dims[1])
        status = px_invalid(err, errlen, "%s: n_embd=%d is not divisible by n_head=%d", cpath,
                            dims[2], dims[1]);
out:
    json_decref(c);
    return status;
}

/* The number of dims of tensor `name`'s shape (0: none). */
static int nd_of(json_t *hdr, const char *name)
{
    json_t *sh = json_object_get(json_object_get(hdr, name), "shape");
    return json_is_array(sh) ? (int)json_array_size(sh) : 0;
}

/* The dims from the shapes: wte (V, C), wpe (P, C), the h.<l> blocks. */
static px_status_t infer_dims(px_hf_gpt2_t *hf, json_t *hdr, uint64_t data, char *err,
                              size_t errlen)
{
    char name[128];
    int nd;
    long long s[PX_SAFETENSORS_MAX_DIMS];
    uint64_t b, e;
    hf->prefixed = json_object_get(hdr, "transformer.wte.weight") != NULL;
    px_hf_gpt2_name(0, 0, hf->prefixed, name, sizeof(name));
    if (!json_object_get(hdr, name) || nd_of(hdr, name) != 2)
        return px_invalid(err, errlen, "%s has no 2-d tensor wte.weight or "
                          "transformer.wte.weight: not a GPT-2 checkpoint of transformers",
                          hf->file);
    if (entry(hf, hdr, data, name, &nd, s, &b, &e, err, errlen))
        return PX_ERR_INVALID_ARGUMENT;
    hf->vocab = (int)s[0];
    hf->dim = (int)s[1];
    px_hf_gpt2_name(1, 0, hf->prefixed, name, sizeof(name));
    if (entry(hf, hdr, data, name, &nd, s, &b, &e, err, errlen))
        return PX_ERR_INVALID_ARGUMENT;
    hf->positions = (int)s[0];
    hf->layers = 0;
    for (;;) {
        px_hf_gpt2_name(2, hf->layers, hf->prefixed, name, sizeof(name));
        if (!json_object_get(hdr, name) || hf->layers >= 100000)
            break;
        hf->layers++;
    }
    if (!hf->layers)
        return px_invalid(err, errlen, "%s has no block (h.0.ln_1.weight)", hf->file);
    return PX_OK;
}

/* Every canonical tensor's entry: F32, the shape the dims imply, inside
 * the file (its bytes those of its shape: px_safetensors_entry). */
static px_status_t place_tensors(px_hf_gpt2_t *hf, json_t *hdr, uint64_t data, char *err,
                                 size_t errlen)
{
    px_model_config_t mc = {.layers = hf->layers, .heads = 1, .dim = hf->dim,
                            .max_seq = hf->positions, .vocab = hf->vocab,
                            .padded_vocab = hf->vocab};
    hf->t = calloc((size_t)PX_MODEL_NUM_TENSORS * (size_t)hf->layers, sizeof(*hf->t));
    if (!hf->t)
        return PX_ERR_NO_MEMORY;
    for (int i = 0; i < PX_MODEL_NUM_TENSORS; i++) {
        px_model_tensor_t mt;
        px_model_tensor(&mc, i, &mt);
        if (strcmp(mt.name, names[i].canon)) /* model.h's table changed under us */
            return px_invalid(err, errlen, "hfgpt2: canonical tensor %d is %s, not %s", i,
                              mt.name, names[i].canon);
        int block = mt.owner == PX_MODEL_OWNER_BLOCK;
        /* the canonical slice (rows, cols); cols 1 for a vector */
        int rows = block ? mt.shape[1] : mt.shape[0];
        int cols = block ? (mt.ndim == 3 ? mt.shape[2] : 1) : (mt.ndim == 2 ? mt.shape[1] : 1);
        int vec = block ? mt.ndim == 2 : mt.ndim == 1;
        for (int l = 0; l < (block ? hf->layers : 1); l++) {
            char name[128];
            int nd;
            long long s[PX_SAFETENSORS_MAX_DIMS];
            uint64_t b, e;
            px_hf_gpt2_tensor_t *t = &hf->t[i * hf->layers + l];
            t->transposed = px_hf_gpt2_name(i, l, hf->prefixed, name, sizeof(name));
            t->rows = t->transposed ? cols : rows;
            t->cols = t->transposed ? rows : cols;
            if (entry(hf, hdr, data, name, &nd, s, &b, &e, err, errlen))
                return PX_ERR_INVALID_ARGUMENT;
            if (nd != (vec ? 1 : 2) || s[0] != t->rows || (!vec && s[1] != t->cols))
                return px_invalid(err, errlen, "%s: tensor %s has shape [%lld%s%lld], a GPT-2 "
                                  "of n_embd=%d, vocab %d, n_positions %d has [%d%s%d]",
                                  hf->file, name, s[0], nd > 1 ? ", " : "", nd > 1 ? s[1] : 0,
                                  hf->dim, hf->vocab, hf->positions, t->rows,
                                  vec ? "" : ", ", vec ? 0 : t->cols);
            t->offset = data + b;
        }
    }
    char name[128];
    int nd;
    long long s[PX_SAFETENSORS_MAX_DIMS];
    uint64_t b, e;
    snprintf(name, sizeof(name), "lm_head.weight"); /* GPT2LMHeadModel's, never prefixed */
    hf->has_lm_head = json_object_get(hdr, name) != NULL;
    if (hf->has_lm_head) {
        if (entry(hf, hdr, data, name, &nd, s, &b, &e, err, errlen))
            return PX_ERR_INVALID_ARGUMENT;
        if (nd != 2 || s[0] != hf->vocab || s[1] != hf->dim)
            return px_invalid(err, errlen, "%s: lm_head.weight is not (vocab %d, n_embd %d)",
                              hf->file, hf->vocab, hf->dim);
        hf->lm_head = data + b;
    }
    return PX_OK;
}

px_status_t px_hf_gpt2_open(const char *path, px_hf_gpt2_t *hf, char *err, size_t errlen)
{
    struct stat st;
    char cpath[4200];
    int cdims[5] = {0}, have_config = 0;
    json_t *hdr = NULL;
    uint64_t data = 0;
    px_status_t status;

    memset(hf, 0, sizeof(*hf));
    if (err && errlen)
        err[0] = '\0';
    if (stat(path, &st) < 0) {
        int e = errno;
        px_invalid(err, errlen, "init_from '%s': %s", path, strerror(e));
        return e == ENOENT ? PX_ERR_NOT_FOUND : PX_ERR_IO;
    }
    if (S_ISDIR(st.st_mode)) {
        snprintf(hf->file, sizeof(hf->file), "%s/model.safetensors", path);
        snprintf(cpath, sizeof(cpath), "%s/config.json", path);
        if (stat(hf->file, &st) < 0 && errno == ENOENT) {
            px_invalid(err, errlen, "init_from '%s' has no model.safetensors (what "
                       "save_pretrained writes; pytorch_model.bin and sharded checkpoints, "
                       "model.safetensors.index.json, are not read)", path);
            return PX_ERR_NOT_FOUND;
        }
    } else {
        const char *slash = strrchr(path, '/');
        snprintf(hf->file, sizeof(hf->file), "%s", path);
        snprintf(cpath, sizeof(cpath), "%.*sconfig.json", slash ? (int)(slash - path + 1) : 0,
                 path);
    }
    if (stat(cpath, &st) == 0) {
        have_config = 1;
        if ((status = read_config(cpath, cdims, err, errlen)) != PX_OK)
            return status;
    } else if (strcmp(hf->file, path)) {
        return px_invalid(err, errlen, "init_from '%s': a directory without config.json", path);
    }
    if ((status = px_safetensors_header(hf->file, &hdr, &data, &hf->file_bytes, err,
                                        errlen)) != PX_OK)
        return status;
    if ((status = infer_dims(hf, hdr, data, err, errlen)) == PX_OK && have_config) {
        const int have[5] = {hf->layers, cdims[1], hf->dim, hf->positions, hf->vocab};
        static const char *keys[5] = {"n_layer", "n_head", "n_embd", "n_positions",
                                      "vocab_size"};
        for (int k = 0; k < 5 && status == PX_OK; k++)
            if (have[k] != cdims[k])
                status = px_invalid(err, errlen, "%s says %s=%d but the tensors of %s have "
                                    "%d", cpath, keys[k], cdims[k], hf->file, have[k]);
        hf->heads = cdims[1];
    }
    if (status == PX_OK)
        status = place_tensors(hf, hdr, data, err, errlen);
    json_decref(hdr);
    if (status != PX_OK)
        px_hf_gpt2_close(hf);
    return status;
}

void px_hf_gpt2_close(px_hf_gpt2_t *hf)
{
    free(hf->t);
    hf->t = NULL;
}

px_status_t px_hf_gpt2_check(const px_hf_gpt2_t *hf, const px_model_config_t *cfg, int heads,
                             char *err, size_t errlen)
{
    const struct { const char *hf, *job; int have, want; } d[] = {
        {"n_layer", "layers", hf->layers, cfg->layers},
        {"n_head", "heads", hf->heads ? hf->heads : heads, heads},
        {"n_embd", "dim", hf->dim, cfg->dim},
        {"n_positions", "seq", hf->positions, cfg->max_seq},
        {"vocab_size", "vocab", hf->vocab, cfg->vocab},
    };
    for (size_t k = 0; k < sizeof(d) / sizeof(d[0]); k++)
        if (d[k].have != d[k].want)
            return px_invalid(err, errlen, "init_from '%s' is a GPT-2 of %s=%d, the job has "
                              "%s=%d", hf->file, d[k].hf, d[k].have, d[k].job, d[k].want);
    return PX_OK;
}
