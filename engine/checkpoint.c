/* checkpoint.c: sharded checkpoints (save, re-cutting load) and the
 * safetensors export (checkpoint.h).
 *
 * Save: each shard owner writes shard_<k>.bin.tmp, fsyncs and renames it;
 * a barrier; rank 0 writes meta.json the same way. Load: parse meta.json
 * (jansson), check dims and every shard's size, then read this rank's
 * slices with pread, piece by piece from whichever old shards hold them.
 * Runs on the training thread. */
#include "checkpoint.h"

#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "px_log.h"

/* The unit layout of the tensor table (model.h: embedding, layers, head,
 * wte with padded rows); "parallax-zero-1" files had a root unit and are
 * refused rather than mis-cut. */
#define CKPT_FORMAT "parallax-zero-2"

static px_status_t mkdirs(const char *path)
{
    char buf[4096];
    snprintf(buf, sizeof(buf), "%s", path);
    for (char *p = buf + 1; *p; p++) {
        if (*p != '/')
            continue;
        *p = 0;
        if (mkdir(buf, 0755) < 0 && errno != EEXIST)
            goto fail;
        *p = '/';
    }
    if (mkdir(buf, 0755) < 0 && errno != EEXIST)
        goto fail;
    return PX_OK;
fail:
    px_error("checkpoint: mkdir %s: %s", buf, strerror(errno));
    return PX_ERR_IO;
}

static px_status_t write_all(int fd, const void *buf, size_t n, const char *path)
{
    const char *p = buf;
    while (n) {
        ssize_t w = write(fd, p, n);
        if (w < 0 && errno == EINTR)
            continue;
        if (w <= 0) {
            px_error("checkpoint: write %s: %s", path, strerror(errno));
            return PX_ERR_IO;
        }
        p += w;
        n -= (size_t)w;
    }
    return PX_OK;
}

/* Tensor bytes move between files and the backend's memory (host or
 * device: px_kernels.h) through a host bounce buffer of this many floats. */
#define BOUNCE_FLOATS ((size_t)1 << 18)

/* Writes n floats of backend memory `src` to fd, staged through `bounce`. */
static px_status_t write_tensor(int fd, const px_kernel_ops_t *k, const float *src, size_t n,
                                float *bounce, const char *path)
{
    px_status_t status = PX_OK;
    for (size_t i = 0; i < n && status == PX_OK; i += BOUNCE_FLOATS) {
        size_t c = n - i < BOUNCE_FLOATS ? n - i : BOUNCE_FLOATS;
        k->mem_copy_to_host(bounce, src + i, c * sizeof(float));
        k->synchronize();
        status = write_all(fd, bounce, c * sizeof(float), path);
    }
    return status;
}

/* Opens path.tmp for writing; commit_file fsyncs, closes, renames. */
static int open_tmp(const char *path, char *tmp, size_t tmplen)
{
    snprintf(tmp, tmplen, "%s.tmp", path);
    int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd < 0)
        px_error("checkpoint: open %s: %s", tmp, strerror(errno));
    return fd;
}

static px_status_t commit_file(int fd, const char *tmp, const char *path)
{
    if (fsync(fd) < 0 || close(fd) < 0 || rename(tmp, path) < 0) {
        px_error("checkpoint: finishing %s: %s", path, strerror(errno));
        return PX_ERR_IO;
    }
    return PX_OK;
}

px_status_t px_checkpoint_save(const char *dir, int step, px_zero_t *z,
                               const px_gpt_config_t *gc, const px_plan_t *plan, int heads,
                               px_comm_t *comm)
{
    char sdir[4096], path[4200], tmp[4300];
    px_status_t status = PX_OK;
    int rank = comm ? px_comm_rank(comm) : 0, nsh = px_zero_nshards(z);
    snprintf(sdir, sizeof(sdir), "%s/step_%d", dir, step);
    if (rank == 0 || rank < nsh)
        PX_CHECK(mkdirs(sdir));
    if (comm && px_comm_size(comm) > 1)
        PX_CHECK(px_barrier(comm, -1)); /* the directory exists for everyone */
    if (rank < nsh) {
        snprintf(path, sizeof(path), "%s/shard_%d.bin", sdir, rank);
        float *bounce = malloc(BOUNCE_FLOATS * sizeof(float));
        int fd = bounce ? open_tmp(path, tmp, sizeof(tmp)) : -1;
        if (fd < 0) {
            free(bounce);
            return bounce ? PX_ERR_IO : PX_ERR_NO_MEMORY;
        }
        for (int u = 0; u < plan->nunits && status == PX_OK; u++) {
            size_t n = plan->unit_padded[u] / (uint64_t)nsh;
            for (int w = 0; w < 3 && status == PX_OK; w++)
                status = write_tensor(fd, px_zero_ops(z), px_zero_slice(z, w, u), n, bounce,
                                      path);
        }
        free(bounce);
        if (status != PX_OK) {
            close(fd);
            return status;
        }
        PX_CHECK(commit_file(fd, tmp, path));
    }
    if (comm && px_comm_size(comm) > 1)
        PX_CHECK(px_barrier(comm, -1));
    if (rank == 0) {
        json_t *units = json_array();
        for (int u = 0; u < plan->nunits; u++)
            json_array_append_new(units, json_integer((json_int_t)plan->unit_size[u]));
        json_t *m = json_pack("{s:s, s:i, s:i, s:i, s:i, s:i, s:i, s:i, s:i, s:i, s:i, s:I, s:o}",
                              "format", CKPT_FORMAT, "step", step, "zero", plan->zero,
                              "dp", plan->dp, "nshards", nsh, "layers", gc->layers, "heads",
                              heads, "dim", gc->dim, "vocab", gc->vocab, "padded_vocab",
                              px_model_padded_vocab(gc), "max_seq", gc->max_seq,
                              "num_params", (json_int_t)plan->params, "unit_sizes", units);
        char *txt = m ? json_dumps(m, JSON_INDENT(1)) : NULL;
        json_decref(m);
        if (!txt)
            return PX_ERR_NO_MEMORY;
        snprintf(path, sizeof(path), "%s/meta.json", sdir);
        int fd = open_tmp(path, tmp, sizeof(tmp));
        status = fd < 0 ? PX_ERR_IO : write_all(fd, txt, strlen(txt), path);
        free(txt);
        if (status == PX_OK)
            status = commit_file(fd, tmp, path);
        else if (fd >= 0)
            close(fd);
        if (status == PX_OK)
            px_info("checkpoint: step %d written to %s (%d shard%s)", step, sdir, nsh,
                    nsh > 1 ? "s" : "");
    }
    return status;
}

static int jint(json_t *m, const char *key, long long *out)
{
    json_t *v = json_object_get(m, key);
    if (!json_is_integer(v))
        return -1;
    *out = json_integer_value(v);
    return 0;
}

px_status_t px_checkpoint_load(const char *path, px_zero_t *z, const px_gpt_config_t *gc,
                               const px_plan_t *plan, int heads, int *step_p)
{
    char mpath[4200];
    json_error_t jerr;
    px_status_t status = PX_OK;
    int *fds = NULL;
    float *bounce = NULL;
    long long step, zero, dp, nsh, layers, dim, vocab, maxseq, hd, vp;

    snprintf(mpath, sizeof(mpath), "%s/meta.json", path);
    json_t *m = json_load_file(mpath, 0, &jerr);
    if (!m) {
        px_error("checkpoint: cannot read %s: %s (an incomplete or missing checkpoint)", mpath,
                 jerr.text);
        return access(mpath, F_OK) ? PX_ERR_NOT_FOUND : PX_ERR_INVALID_ARGUMENT;
    }
    if (jint(m, "step", &step) || jint(m, "zero", &zero) || jint(m, "dp", &dp) ||
        jint(m, "nshards", &nsh) || jint(m, "layers", &layers) || jint(m, "dim", &dim) ||
        jint(m, "vocab", &vocab) || jint(m, "max_seq", &maxseq) || jint(m, "heads", &hd) ||
        jint(m, "padded_vocab", &vp) || step < 0 || dp < 1 || nsh < 1 || dp % nsh ||
        strcmp(json_string_value(json_object_get(m, "format")) ?: "", CKPT_FORMAT)) {
        px_error("checkpoint: %s is not a %s checkpoint description", mpath, CKPT_FORMAT);
        json_decref(m);
        return PX_ERR_INVALID_ARGUMENT;
    }
    /* the unit sizes must be this model's, unit by unit */
    json_t *us = json_object_get(m, "unit_sizes");
    int units_ok = json_is_array(us) && json_array_size(us) == (size_t)plan->nunits;
    for (int u = 0; units_ok && u < plan->nunits; u++) {
        json_t *e = json_array_get(us, (size_t)u);
        units_ok = json_is_integer(e) && (uint64_t)json_integer_value(e) == plan->unit_size[u];
    }
    json_decref(m);
    const struct { const char *name; long long have; int want; } dims[] = {
        {"layers", layers, gc->layers}, {"dim", dim, gc->dim}, {"vocab", vocab, gc->vocab},
        {"padded vocab", vp, px_model_padded_vocab(gc)},
        {"seq (wpe rows)", maxseq, gc->max_seq}, {"heads", hd, heads}};
    for (size_t i = 0; i < sizeof(dims) / sizeof(dims[0]); i++) {
        if (dims[i].have != dims[i].want) {
            px_error("checkpoint: cannot re-cut %s: it has %s %lld, this job %d", path,
                     dims[i].name, dims[i].have, dims[i].want);
            return PX_ERR_INVALID_ARGUMENT;
        }
    }
    if (!units_ok) { /* same dims, other units: a layout this code does not cut */
        px_error("checkpoint: %s: its unit_sizes are not this model's %d units", mpath,
                 plan->nunits);
        return PX_ERR_INVALID_ARGUMENT;
    }
    /* old layout: unit u padded to a multiple of dp, K slices */
    int nu = plan->nunits;
    uint64_t *osl = calloc((size_t)nu, sizeof(uint64_t)), *ooff = calloc((size_t)nu,
                                                                          sizeof(uint64_t));
    fds = malloc((size_t)nsh * sizeof(int));
    if (!osl || !ooff || !fds) {
        status = PX_ERR_NO_MEMORY;
        goto out;
    }
    uint64_t per_shard = 0;
    for (int u = 0; u < nu; u++) {
        uint64_t pad = (plan->unit_size[u] + (uint64_t)dp - 1) / (uint64_t)dp * (uint64_t)dp;
        osl[u] = pad / (uint64_t)nsh;
        ooff[u] = per_shard;
        per_shard += 3 * osl[u];
    }
    for (long long k = 0; k < nsh; k++)
        fds[k] = -1;
    for (long long k = 0; k < nsh; k++) {
        char sp[4300];
        struct stat st;
        snprintf(sp, sizeof(sp), "%s/shard_%lld.bin", path, k);
        fds[k] = open(sp, O_RDONLY | O_CLOEXEC);
        if (fds[k] < 0) {
            px_error("checkpoint: open %s: %s", sp, strerror(errno));
            status = errno == ENOENT ? PX_ERR_NOT_FOUND : PX_ERR_IO;
            goto out;
        }
        if (fstat(fds[k], &st) < 0 || (uint64_t)st.st_size != per_shard * sizeof(float)) {
            px_error("checkpoint: %s has %lld bytes, expected %llu", sp, (long long)st.st_size,
                     (unsigned long long)(per_shard * sizeof(float)));
            status = PX_ERR_INVALID_ARGUMENT;
            goto out;
        }
    }
    /* everything checked: read what this rank holds, piece by piece from
     * the old shards, through a host bounce buffer into the backend's
     * memory; elements past the unit's size are padding (0) */
    const px_kernel_ops_t *kops = px_zero_ops(z);
    bounce = malloc(BOUNCE_FLOATS * sizeof(float));
    if (!bounce) {
        status = PX_ERR_NO_MEMORY;
        goto out;
    }
    for (int u = 0; u < nu && status == PX_OK; u++) {
        for (int w = 0; w < 3 && status == PX_OK; w++) {
            uint64_t b, cnt;
            float *dst = px_zero_held(z, w, u, &b, &cnt);
            uint64_t idx = b, end = b + cnt;
            while (idx < end) {
                if (idx >= plan->unit_size[u]) {
                    kops->mem_set(dst + (idx - b), 0, (end - idx) * sizeof(float));
                    break;
                }
                uint64_t k = idx / osl[u], within = idx % osl[u];
                uint64_t n = osl[u] - within;
                if (n > end - idx)
                    n = end - idx;
                if (n > plan->unit_size[u] - idx)
                    n = plan->unit_size[u] - idx;
                if (n > BOUNCE_FLOATS)
                    n = BOUNCE_FLOATS;
                off_t off = (off_t)((ooff[u] + (uint64_t)w * osl[u] + within) * sizeof(float));
                ssize_t r = pread(fds[k], bounce, n * sizeof(float), off);
                if (r != (ssize_t)(n * sizeof(float))) {
                    px_error("checkpoint: read %s/shard_%llu.bin: %s", path,
                             (unsigned long long)k, r < 0 ? strerror(errno) : "short read");
                    status = PX_ERR_IO;
                    break;
                }
                kops->mem_copy_from_host(dst + (idx - b), bounce, n * sizeof(float));
                kops->synchronize(); /* the bounce buffer is reused next */
                idx += n;
            }
        }
    }
    if (status == PX_OK)
        px_info("checkpoint: loaded step %lld from %s (saved with zero %lld, dp %lld; now "
                "zero %d, dp %d)", step, path, zero, dp, plan->zero, plan->dp);
out:
    for (long long k = 0; fds && k < nsh; k++)
        if (fds[k] >= 0)
            close(fds[k]);
    free(fds);
    free(bounce);
    free(osl);
    free(ooff);
    if (status == PX_OK)
        *step_p = (int)step;
    return status;
}

px_status_t px_safetensors_write(const char *path, const px_gpt_config_t *gc,
                                 const float *params)
{
    json_t *h = json_object();
    size_t off = 0;
    px_status_t status = PX_OK;
    char tmp[4300];
    for (int i = 0; i < PX_GPT_NUM_TENSORS; i++) {
        px_gpt_tensor_info_t ti;
        px_gpt_tensor_info_of(gc, i, &ti);
        json_t *shape = json_array();
        for (int d = 0; d < ti.ndim; d++)
            json_array_append_new(shape, json_integer(ti.shape[d]));
        json_object_set_new(h, ti.name,
                            json_pack("{s:s, s:o, s:[I, I]}", "dtype", "F32", "shape", shape,
                                      "data_offsets", (json_int_t)(ti.offset * 4),
                                      (json_int_t)((ti.offset + ti.size) * 4)));
        off = ti.offset + ti.size;
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
    uint64_t n = padded;
    for (int b = 0; b < 8; b++)
        hdr[b] = (char)((n >> (8 * b)) & 0xff);
    memcpy(hdr + 8, txt, hl);
    memset(hdr + 8 + hl, ' ', padded - hl);
    free(txt);
    int fd = open_tmp(path, tmp, sizeof(tmp));
    if (fd < 0) {
        free(hdr);
        return PX_ERR_IO;
    }
    status = write_all(fd, hdr, 8 + padded, path);
    free(hdr);
    if (status == PX_OK)
        status = write_all(fd, params, off * sizeof(float), path);
    if (status == PX_OK)
        return commit_file(fd, tmp, path);
    close(fd);
    return status;
}
