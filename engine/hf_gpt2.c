/* hf_gpt2.c: Hugging Face GPT-2 weights in and out (hf_gpt2.h).
 *
 * In: the file is mapped read-only; a canonical run of elements is one
 * layer's slice of one tensor, read element by element where the file
 * stores it transposed (Conv1D: canonical (out, in) element [r][c] is the
 * file's [c][r]). Out: the canonical buffer is written tensor by tensor,
 * each transposed where GPT-2 stores it so, through a row buffer. */
#include "hf_gpt2.h"

#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "checkpoint.h"
#include "hfgpt2.h"
#include "px_log.h"

typedef struct hf_source {
    const px_hf_gpt2_t *hf;
    const unsigned char *map;
    const px_gpt_config_t *gc;
} hf_source_t;

/* px_canonical_read_fn over the mapped checkpoint. */
static px_status_t hf_read(void *arg, int tensor, uint64_t c, size_t n, float *dst)
{
    const hf_source_t *s = arg;
    px_gpt_tensor_info_t ti;
    px_gpt_tensor_info_of(s->gc, tensor, &ti);
    uint64_t e = c - ti.offset, l = 0;
    if (ti.owner == PX_MODEL_OWNER_BLOCK) {
        uint64_t slice = ti.size / (uint64_t)s->gc->layers;
        l = e / slice;
        e %= slice;
    }
    const px_hf_gpt2_tensor_t *t = &s->hf->t[tensor * s->hf->layers + (int)l];
    const unsigned char *base = s->map + t->offset;
    uint64_t stored = (uint64_t)t->rows * (uint64_t)t->cols;
    if (!t->transposed) { /* wte's padding rows lie past the stored ones: 0 */
        uint64_t have = e < stored ? stored - e : 0, take = n < have ? n : have;
        memcpy(dst, base + e * sizeof(float), take * sizeof(float));
        memset(dst + take, 0, (n - take) * sizeof(float));
        return PX_OK;
    }
    /* canonical (rows = t->cols, cols = t->rows); stored (t->rows, t->cols) */
    uint64_t ccols = (uint64_t)t->rows, crows = (uint64_t)t->cols;
    for (size_t k = 0; k < n; k++) {
        uint64_t idx = e + k, r = idx / ccols, col = idx % ccols;
        memcpy(dst + k, base + (col * crows + r) * sizeof(float), sizeof(float));
    }
    return PX_OK;
}

/* Sparse upcycling (Komatsuzaki et al., "Sparse Upcycling: Training
 * Mixture-of-Experts from Dense Checkpoints", 2022): every expert of MoE
 * layer l starts as layer l's dense MLP of the checkpoint (fcw, fcb,
 * fcprojw, fcprojb: the MoE tensors 1-4 have the dense shapes per expert);
 * the routers keep their seeded values. The gates are renormalised over
 * the chosen experts (moe.h), so before any step the layer computes the
 * dense MLP. Collective over the ep group (the gather of the routers). */
static px_status_t upcycle(px_experts_t *ex, hf_source_t *src)
{
    static const char *dense[PX_MOE_NUM_TENSORS] = {NULL, "fcw", "fcb", "fcprojw", "fcprojb"};
    const px_moe_config_t *mc = px_experts_config(ex);
    size_t n = (size_t)px_moe_num_params(mc);
    float *buf = malloc((n ? n : 1) * sizeof(float));
    if (!buf)
        return PX_ERR_NO_MEMORY;
    px_status_t status = px_experts_gather_canonical(ex, 0, buf);
    size_t off = 0;
    for (int l = 0; l < mc->layers && status == PX_OK; l++) {
        if (!px_moe_is_layer(mc, l))
            continue;
        for (int i = 0; i < PX_MOE_NUM_TENSORS && status == PX_OK; i++) {
            size_t size = (size_t)px_moe_tensor_size(mc, i), per = size / (size_t)mc->experts;
            for (int t = 0; dense[i] && t < PX_GPT_NUM_TENSORS; t++) {
                px_gpt_tensor_info_t ti;
                px_gpt_tensor_info_of(src->gc, t, &ti);
                if (strcmp(ti.name, dense[i]))
                    continue;
                /* expert 0 from the file, the others copies of it */
                status = hf_read(src, t, ti.offset + (uint64_t)l * per, per, buf + off);
                for (int e = 1; e < mc->experts && status == PX_OK; e++)
                    memcpy(buf + off + (size_t)e * per, buf + off, per * sizeof(float));
            }
            off += size;
        }
    }
    if (status == PX_OK)
        px_experts_set_canonical(ex, 0, buf);
    free(buf);
    return status;
}

/* An opened checkpoint, mapped: px_hf_gpt2_open and check against gc and
 * heads, the file mapped read-only, the head checked to be tied. Logs the
 * error (prefixed by `who`); on success map_close releases it. */
typedef struct hf_map {
    px_hf_gpt2_t hf;
    void *map;
} hf_map_t;

static void map_close(hf_map_t *m)
{
    if (m->map && m->map != MAP_FAILED)
        munmap(m->map, m->hf.file_bytes);
    m->map = NULL;
    px_hf_gpt2_close(&m->hf);
}

static px_status_t map_open(const char *who, const char *path, const px_gpt_config_t *gc,
                            int heads, hf_map_t *m)
{
    char err[1024];
    m->map = NULL;
    px_status_t status = px_hf_gpt2_open(path, &m->hf, err, sizeof(err));
    if (status == PX_OK && (status = px_hf_gpt2_check(&m->hf, gc, heads, err, sizeof(err))) !=
                               PX_OK)
        px_hf_gpt2_close(&m->hf);
    if (status != PX_OK) {
        px_error("%s: %s", who, err);
        return status;
    }
    int fd = open(m->hf.file, O_RDONLY | O_CLOEXEC);
    m->map = fd >= 0 ? mmap(NULL, m->hf.file_bytes, PROT_READ, MAP_SHARED, fd, 0) : MAP_FAILED;
    if (fd >= 0)
        close(fd); /* the mapping stays */
    if (m->map == MAP_FAILED) {
        px_error("%s: cannot map %s: %s", who, m->hf.file, strerror(errno));
        map_close(m);
        return PX_ERR_IO;
    }
    const px_hf_gpt2_tensor_t *wte = &m->hf.t[0];
    if (m->hf.has_lm_head &&
        memcmp((const char *)m->map + m->hf.lm_head, (const char *)m->map + wte->offset,
               (size_t)wte->rows * (size_t)wte->cols * sizeof(float))) {
        px_error("%s: %s: lm_head.weight differs from wte.weight; parallax's LM head is the "
                 "token embedding (tied)", who, m->hf.file);
        map_close(m);
        return PX_ERR_INVALID_ARGUMENT;
    }
    return PX_OK;
}

px_status_t px_hf_gpt2_load(const char *path, px_zero_t *z, const px_gpt_config_t *gc,
                            const px_plan_t *plan, int heads, px_experts_t *ex)
{
    hf_map_t m;
    px_status_t status = map_open("init", path, gc, heads, &m);
    if (status != PX_OK)
        return status;
    hf_source_t src = {&m.hf, m.map, gc};
    status = px_checkpoint_fill_params(z, gc, plan, hf_read, &src);
    if (status == PX_OK && ex)
        status = upcycle(ex, &src);
    if (status == PX_OK)
        px_info("init: parameters from the Hugging Face GPT-2 %s (n_layer %d, n_embd %d, "
                "vocab %d padded to %d%s)", m.hf.file, m.hf.layers, m.hf.dim, m.hf.vocab,
                px_model_padded_vocab(gc), ex ? "; each expert its layer's MLP" : "");
    map_close(&m);
    return status;
}

px_status_t px_hf_gpt2_read_canonical(const char *path, const px_gpt_config_t *gc, int heads,
                                      float *canon)
{
    hf_map_t m;
    px_status_t status = map_open("sample", path, gc, heads, &m);
    if (status != PX_OK)
        return status;
    hf_source_t src = {&m.hf, m.map, gc};
    for (int i = 0; i < PX_GPT_NUM_TENSORS && status == PX_OK; i++) {
        px_gpt_tensor_info_t ti;
        px_gpt_tensor_info_of(gc, i, &ti);
        /* hf_read reads within one layer's slice */
        int nl = ti.owner == PX_MODEL_OWNER_BLOCK ? gc->layers : 1;
        size_t per = ti.size / (size_t)nl;
        for (int l = 0; l < nl && status == PX_OK; l++)
            status = hf_read(&src, i, ti.offset + (uint64_t)l * per, per,
                             canon + ti.offset + (size_t)l * per);
    }
    map_close(&m);
    return status;
}

/* ---- out ---- */

static px_status_t write_all(FILE *f, const void *p, size_t n, const char *path)
{
    if (fwrite(p, 1, n, f) != n) {
        px_error("export: write %s: %s", path, strerror(errno));
        return PX_ERR_IO;
    }
    return PX_OK;
}

/* Opens path.tmp; finish() flushes, fsyncs and renames it to path. */
static FILE *open_tmp(const char *path, char *tmp, size_t len)
{
    snprintf(tmp, len, "%s.tmp", path);
    FILE *f = fopen(tmp, "wb");
    if (!f)
        px_error("export: open %s: %s", tmp, strerror(errno));
    return f;
}

static px_status_t finish(FILE *f, px_status_t status, const char *tmp, const char *path)
{
    if (status == PX_OK && (fflush(f) || fsync(fileno(f)))) {
        px_error("export: write %s: %s", tmp, strerror(errno));
        status = PX_ERR_IO;
    }
    if (fclose(f) && status == PX_OK) {
        px_error("export: close %s: %s", tmp, strerror(errno));
        status = PX_ERR_IO;
    }
    if (status == PX_OK && rename(tmp, path)) {
        px_error("export: rename %s: %s", tmp, strerror(errno));
        status = PX_ERR_IO;
    }
    if (status != PX_OK)
        unlink(tmp);
    return status;
}

/* GPT2Config's keys for this model; the math is parallax's (gpt.h): GELU's
 * tanh approximation, LayerNorm eps 1e-5, the head tied. No dropout (the
 * engine trains without). bos/eos: the last id, as GPT-2's
 * <|endoftext|> 50256. */
static json_t *config_json(const px_gpt_config_t *gc, int heads)
{
    return json_pack("{s:[s], s:s, s:s, s:i, s:i, s:i, s:i, s:i, s:n, s:f, s:f, s:f, s:f, s:f, "
                     "s:b, s:b, s:b, s:b, s:i, s:i, s:s}",
                     "architectures", "GPT2LMHeadModel", "model_type", "gpt2",
                     "activation_function", "gelu_new", "vocab_size", gc->vocab, "n_positions",
                     gc->max_seq, "n_embd", gc->dim, "n_layer", gc->layers, "n_head", heads,
                     "n_inner", "layer_norm_epsilon", 1e-5, "initializer_range", 0.02,
                     "resid_pdrop", 0.0, "embd_pdrop", 0.0, "attn_pdrop", 0.0,
                     "scale_attn_weights", 1, "scale_attn_by_inverse_layer_idx", 0,
                     "reorder_and_upcast_attn", 0, "tie_word_embeddings", 1, "bos_token_id",
                     gc->vocab - 1, "eos_token_id", gc->vocab - 1, "torch_dtype", "float32");
}

static px_status_t write_config(const char *dir, const px_gpt_config_t *gc, int heads)
{
    char path[4200], tmp[4300];
    json_t *c = config_json(gc, heads);
    char *txt = c ? json_dumps(c, JSON_INDENT(2) | JSON_SORT_KEYS) : NULL;
    json_decref(c);
    if (!txt)
        return PX_ERR_NO_MEMORY;
    snprintf(path, sizeof(path), "%s/config.json", dir);
    FILE *f = open_tmp(path, tmp, sizeof(tmp));
    px_status_t status = f ? write_all(f, txt, strlen(txt), path) : PX_ERR_IO;
    if (status == PX_OK)
        status = write_all(f, "\n", 1, path);
    free(txt);
    return f ? finish(f, status, tmp, path) : status;
}

/* One exported tensor: canonical tensor i's layer l (l 0 for the others). */
typedef struct out_tensor {
    char name[128];
    int i, l, transposed;
    int rows, cols; /* as stored in the file */
    int vec;        /* 1-d */
    uint64_t begin; /* bytes from the data's start */
} out_tensor_t;

/* Writes the stored (rows, cols) of tensor o from the canonical buffer. */
static px_status_t write_tensor(FILE *f, const px_gpt_config_t *gc, const float *canon,
                                const out_tensor_t *o, float *row, const char *path)
{
    px_gpt_tensor_info_t ti;
    px_gpt_tensor_info_of(gc, o->i, &ti);
    size_t slice = ti.owner == PX_MODEL_OWNER_BLOCK ? ti.size / (size_t)gc->layers : ti.size;
    const float *src = canon + ti.offset + (size_t)o->l * slice;
    size_t rows = (size_t)o->rows, cols = (size_t)o->cols;
    if (!o->transposed) /* wte: its first vocab rows */
        return write_all(f, src, rows * cols * sizeof(float), path);
    for (size_t r = 0; r < rows; r++) { /* stored [r][c] = canonical [c][r] */
        for (size_t c = 0; c < cols; c++)
            row[c] = src[c * rows + r];
        PX_CHECK(write_all(f, row, cols * sizeof(float), path));
    }
    return PX_OK;
}

static px_status_t write_weights(const char *dir, const px_gpt_config_t *gc,
                                 const float *canon)
{
    char path[4200], tmp[4300];
    int L = gc->layers, n = 0;
    out_tensor_t *ot = calloc((size_t)PX_GPT_NUM_TENSORS * (size_t)L, sizeof(*ot));
    float *row = malloc((size_t)(4 * gc->dim) * sizeof(float));
    json_t *h = json_object();
    px_status_t status = PX_ERR_NO_MEMORY;
    char *txt = NULL;
    FILE *f = NULL;
    uint64_t off = 0;
    if (!ot || !row || !h)
        goto out;
    for (int i = 0; i < PX_GPT_NUM_TENSORS; i++) {
        px_gpt_tensor_info_t ti;
        px_gpt_tensor_info_of(gc, i, &ti);
        int block = ti.owner == PX_MODEL_OWNER_BLOCK;
        int rows = block ? ti.shape[1] : ti.shape[0];
        int cols = block ? (ti.ndim == 3 ? ti.shape[2] : 1) : (ti.ndim == 2 ? ti.shape[1] : 1);
        if (i == 0)
            rows = gc->vocab; /* the padding rows stay behind */
        for (int l = 0; l < (block ? L : 1); l++) {
            out_tensor_t *o = &ot[n++];
            o->i = i;
            o->l = l;
            o->transposed = px_hf_gpt2_name(i, l, 1, o->name, sizeof(o->name));
            o->rows = o->transposed ? cols : rows;
            o->cols = o->transposed ? rows : cols;
            o->vec = block ? ti.ndim == 2 : ti.ndim == 1;
            o->begin = off;
            off += (uint64_t)o->rows * (uint64_t)o->cols * sizeof(float);
            json_t *shape = o->vec ? json_pack("[i]", o->rows)
                                   : json_pack("[i, i]", o->rows, o->cols);
            json_object_set_new(h, o->name,
                                json_pack("{s:s, s:o, s:[I, I]}", "dtype", "F32", "shape",
                                          shape, "data_offsets", (json_int_t)o->begin,
                                          (json_int_t)off));
        }
    }
    /* transformers reads safetensors files whose metadata says "pt" */
    json_object_set_new(h, "__metadata__", json_pack("{s:s}", "format", "pt"));
    txt = json_dumps(h, JSON_COMPACT | JSON_SORT_KEYS);
    if (!txt)
        goto out;
    size_t hl = strlen(txt), padded = (hl + 7) / 8 * 8; /* 8-byte aligned data */
    unsigned char len8[8];
    for (int b = 0; b < 8; b++)
        len8[b] = (unsigned char)(((uint64_t)padded >> (8 * b)) & 0xff);
    snprintf(path, sizeof(path), "%s/model.safetensors", dir);
    f = open_tmp(path, tmp, sizeof(tmp));
    status = f ? write_all(f, len8, 8, path) : PX_ERR_IO;
    if (status == PX_OK)
        status = write_all(f, txt, hl, path);
    if (status == PX_OK)
        status = write_all(f, "        ", padded - hl, path);
    /* the data in the order of the offsets (the tensors' order above) */
    for (int k = 0; k < n && status == PX_OK; k++)
        status = write_tensor(f, gc, canon, &ot[k], row, path);
    if (f)
        status = finish(f, status, tmp, path);
out:
    free(txt);
    json_decref(h);
    free(row);
    free(ot);
    return status;
}

px_status_t px_hf_gpt2_write(const char *dir, const px_gpt_config_t *gc, int heads,
                             const float *canon)
{
    if (mkdir(dir, 0755) < 0 && errno != EEXIST) {
        px_error("export: mkdir %s: %s", dir, strerror(errno));
        return PX_ERR_IO;
    }
    PX_CHECK(write_weights(dir, gc, canon));
    return write_config(dir, gc, heads);
}

px_status_t px_hf_gpt2_export(px_trainer_t *tr)
{
    float *canon = calloc(tr->n, sizeof(float));
    px_status_t status = canon ? PX_OK : PX_ERR_NO_MEMORY;
    if (status == PX_OK) /* collective: every rank gathers */
        status = px_params_canonical(&tr->params, 0, canon, NULL);
    if (status == PX_OK && tr->rank == 0) {
        status = px_hf_gpt2_write(tr->cfg->export_hf, &tr->gc, tr->cfg->heads, canon);
        if (status == PX_OK)
            px_info("train: weights exported as a Hugging Face GPT-2 to %s",
                    tr->cfg->export_hf);
    }
    free(canon);
    return status;
}
