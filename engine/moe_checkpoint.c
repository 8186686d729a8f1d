/* moe_checkpoint.c: the MoE files of a checkpoint (moe_checkpoint.h).
 *
 * Save: the canonical parameters, m and v are gathered (experts.h
 * px_experts_gather_canonical over the ep group, summed over the pipeline
 * stages, each of which wrote only its MoE layers), then one rank writes
 * moe.bin and moe.json through .tmp files, fsync and rename. Load: moe.json
 * is parsed (jansson) and checked against the model, moe.bin's size
 * against num_params, the three arrays read whole and scattered into this
 * rank's layers and experts (px_experts_set_canonical). Runs on the training
 * thread. */
#include "moe_checkpoint.h"

#include <errno.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "gpt.h"
#include "px_coll.h"
#include "px_log.h"

#define MOE_CKPT_FORMAT "parallax-moe-1"

/* mkdir -p */
static px_status_t make_dirs(const char *path)
{
    char buf[4096];
    snprintf(buf, sizeof(buf), "%s", path);
    for (char *p = buf + 1;; p++) {
        if (*p && *p != '/')
            continue;
        char c = *p;
        *p = 0;
        if (mkdir(buf, 0755) < 0 && errno != EEXIST) {
            px_error("moe checkpoint: mkdir %s: %s", buf, strerror(errno));
            return PX_ERR_IO;
        }
        if (!c)
            return PX_OK;
        *p = c;
    }
}

/* Writes n chunks (ptr[i], bytes[i]) to path via path.tmp, fsync, rename. */
static px_status_t write_file(const char *path, int n, const void *const *ptr,
                              const size_t *bytes)
{
    char tmp[4200];
    snprintf(tmp, sizeof(tmp), "%s.tmp", path);
    FILE *f = fopen(tmp, "wb");
    if (!f) {
        px_error("moe checkpoint: open %s: %s", tmp, strerror(errno));
        return PX_ERR_IO;
    }
    int ok = 1;
    for (int i = 0; i < n && ok; i++)
        ok = fwrite(ptr[i], 1, bytes[i], f) == bytes[i];
    ok = ok && fflush(f) == 0 && fsync(fileno(f)) == 0;
    ok = (fclose(f) == 0) && ok;
    if (!ok || rename(tmp, path) < 0) {
        px_error("moe checkpoint: writing %s: %s", path, strerror(errno));
        return PX_ERR_IO;
    }
    return PX_OK;
}

static px_status_t gather(px_experts_t *ex, int which, float *dst, px_comm_t *pp, size_t n)
{
    PX_CHECK(px_experts_gather_canonical(ex, which, dst));
    if (!pp || px_comm_size(pp) < 2)
        return PX_OK;
    px_status_t status = px_allreduce(pp, dst, dst, n, PX_FLOAT32, PX_SUM, -1);
    if (status != PX_OK)
        px_error("moe checkpoint: summing the stages' MoE layers failed: %s",
                 px_status_str(status));
    return status;
}

px_status_t px_moe_checkpoint_save(const char *dir, int step, px_experts_t *ex, px_comm_t *pp,
                                   int writer)
{
    const px_moe_config_t *c = px_experts_config(ex);
    size_t n = (size_t)px_moe_num_params(c);
    px_status_t status = PX_OK;
    float *buf = calloc(3 * (n ? n : 1), sizeof(float));
    if (!buf)
        return PX_ERR_NO_MEMORY;
    const int which[3] = {0, 2, 3}; /* parameters, m, v */
    for (int i = 0; i < 3 && status == PX_OK; i++)
        status = gather(ex, which[i], buf + i * n, pp, n);
    if (status != PX_OK || !writer)
        goto out;
    char sdir[4096], path[4200];
    snprintf(sdir, sizeof(sdir), "%s/step_%d", dir, step);
    PX_CHECK_GOTO(make_dirs(sdir), status, out);
    snprintf(path, sizeof(path), "%s/moe.bin", sdir);
    const void *ptr[1] = {buf};
    size_t bytes[1] = {3 * n * sizeof(float)};
    PX_CHECK_GOTO(write_file(path, 1, ptr, bytes), status, out);
    char meta[512];
    int len = snprintf(meta, sizeof(meta),
                       "{\"format\": \"%s\", \"layers\": %d, \"dim\": %d, \"experts\": %d, "
                       "\"moe_every\": %d, \"num_params\": %zu}\n",
                       MOE_CKPT_FORMAT, c->layers, c->dim, c->experts, c->moe_every, n);
    snprintf(path, sizeof(path), "%s/moe.json", sdir);
    ptr[0] = meta;
    bytes[0] = (size_t)len;
    status = write_file(path, 1, ptr, bytes);
out:
    free(buf);
    return status;
}

px_status_t px_moe_checkpoint_load(const char *path, px_experts_t *ex)
{
    const px_moe_config_t *c = px_experts_config(ex);
    size_t n = (size_t)px_moe_num_params(c);
    char mpath[4200];
    snprintf(mpath, sizeof(mpath), "%s/moe.json", path);
    json_error_t jerr;
    json_t *m = json_load_file(mpath, 0, &jerr);
    if (!m) {
        px_error("moe checkpoint: %s: %s (a checkpoint of a model without experts, or not "
                 "a checkpoint)", mpath, jerr.text);
        return access(mpath, F_OK) == 0 ? PX_ERR_INVALID_ARGUMENT : PX_ERR_NOT_FOUND;
    }
    px_status_t status = PX_OK;
    const char *fmt = json_string_value(json_object_get(m, "format"));
    if (!fmt || strcmp(fmt, MOE_CKPT_FORMAT)) {
        px_error("moe checkpoint: %s: format %s, expected %s", mpath, fmt ? fmt : "(none)",
                 MOE_CKPT_FORMAT);
        status = PX_ERR_INVALID_ARGUMENT;
        goto out_meta;
    }
    const struct {
        const char *key;
        long long want;
    } dims[] = {{"layers", c->layers}, {"dim", c->dim}, {"experts", c->experts},
                {"moe_every", c->moe_every}, {"num_params", (long long)n}};
    for (size_t i = 0; i < sizeof(dims) / sizeof(dims[0]); i++) {
        json_t *v = json_object_get(m, dims[i].key);
        if (!json_is_integer(v) || json_integer_value(v) != dims[i].want) {
            px_error("moe checkpoint: %s: %s=%lld, the model has %s=%lld", mpath, dims[i].key,
                     json_is_integer(v) ? (long long)json_integer_value(v) : -1LL, dims[i].key,
                     dims[i].want);
            status = PX_ERR_INVALID_ARGUMENT;
            goto out_meta;
        }
    }
    char bpath[4200];
    snprintf(bpath, sizeof(bpath), "%s/moe.bin", path);
    FILE *f = fopen(bpath, "rb");
    if (!f) {
        px_error("moe checkpoint: open %s: %s", bpath, strerror(errno));
        status = errno == ENOENT ? PX_ERR_NOT_FOUND : PX_ERR_IO;
        goto out_meta;
    }
    float *buf = malloc(3 * (n ? n : 1) * sizeof(float) + 1);
    if (!buf) {
        status = PX_ERR_NO_MEMORY;
        goto out_file;
    }
    /* exactly 3 n floats: one byte more must not be there */
    size_t got = fread(buf, 1, 3 * n * sizeof(float) + 1, f);
    if (got != 3 * n * sizeof(float)) {
        px_error("moe checkpoint: %s holds %zu bytes, expected %zu (3 x %zu floats)", bpath,
                 got, 3 * n * sizeof(float), n);
        status = PX_ERR_INVALID_ARGUMENT;
        goto out_buf;
    }
    const int which[3] = {0, 2, 3};
    for (int i = 0; i < 3; i++)
        px_experts_set_canonical(ex, which[i], buf + i * n);
out_buf:
    free(buf);
out_file:
    fclose(f);
out_meta:
    json_decref(m);
    return status;
}

/* the header's entry for a tensor of `nd` dims at element offset off */
static void st_entry(json_t *h, const char *name, int nd, const json_int_t *shape, size_t off,
                     size_t size)
{
    json_t *sh = json_array();
    for (int d = 0; d < nd; d++)
        json_array_append_new(sh, json_integer(shape[d]));
    json_object_set_new(h, name, json_pack("{s:s, s:o, s:[I, I]}", "dtype", "F32", "shape", sh,
                                           "data_offsets", (json_int_t)(off * 4),
                                           (json_int_t)((off + size) * 4)));
}

px_status_t px_moe_safetensors_write(const char *path, const px_gpt_config_t *gc,
                                     const float *params, const px_moe_config_t *mc,
                                     const float *moe_params)
{
    json_t *h = json_object();
    size_t nd = 0, nm = (size_t)px_moe_num_params(mc);
    char name[64];
    for (int i = 0; i < PX_GPT_NUM_TENSORS; i++) {
        px_gpt_tensor_info_t ti;
        px_gpt_tensor_info_of(gc, i, &ti);
        json_int_t shape[8];
        for (int d = 0; d < ti.ndim && d < 8; d++)
            shape[d] = ti.shape[d];
        st_entry(h, ti.name, ti.ndim, shape, ti.offset, ti.size);
        nd = ti.offset + ti.size;
    }
    const json_int_t E = mc->experts, C = mc->dim;
    const json_int_t shapes[PX_MOE_NUM_TENSORS][3] = {
        {E, C, 0}, {E, 4 * C, C}, {E, 4 * C, 0}, {E, C, 4 * C}, {E, C, 0}};
    const int ndim[PX_MOE_NUM_TENSORS] = {2, 3, 2, 3, 2};
    size_t off = nd;
    for (int l = 0; l < mc->layers; l++) {
        if (!px_moe_is_layer(mc, l))
            continue;
        for (int i = 0; i < PX_MOE_NUM_TENSORS; i++) {
            size_t sz = (size_t)px_moe_tensor_size(mc, i);
            snprintf(name, sizeof(name), "%s.%d", px_moe_tensor_name(i), l); /* moe_router.1 */
            st_entry(h, name, ndim[i], shapes[i], off, sz);
            off += sz;
        }
    }
    json_object_set_new(h, "__metadata__", json_pack("{s:s}", "format", "pt"));
    char *txt = json_dumps(h, JSON_COMPACT | JSON_SORT_KEYS);
    json_decref(h);
    if (!txt)
        return PX_ERR_NO_MEMORY;
    size_t hl = strlen(txt), padded = (hl + 7) / 8 * 8; /* 8-byte aligned data */
    char *hdr = malloc(8 + padded);
    if (!hdr) {
        free(txt);
        return PX_ERR_NO_MEMORY;
    }
    for (int b = 0; b < 8; b++)
        hdr[b] = (char)(((uint64_t)padded >> (8 * b)) & 0xff);
    memcpy(hdr + 8, txt, hl);
    memset(hdr + 8 + hl, ' ', padded - hl);
    free(txt);
    const void *ptr[3] = {hdr, params, moe_params};
    size_t bytes[3] = {8 + padded, nd * sizeof(float), nm * sizeof(float)};
    px_status_t status = write_file(path, 3, ptr, bytes);
    free(hdr);
    return status;
}
