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
