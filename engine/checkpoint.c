/* checkpoint.c: sharded checkpoints (save, re-cutting load) and the
 * safetensors export (checkpoint.h).
 *
 * Save: each shard owner (dp index < nshards, every tp index) writes
 * shard_tp<t>_<k>.bin.tmp, fsyncs and renames it; a barrier over the
 * world; world rank 0 writes meta.json the same way. Load: parse meta.json
 * (jansson), check dims and every shard's size, then fill this rank's
 * slices run by run: a run of its tp-local unit is a run of the canonical
 * slice (px_model_shard_run), which old_locate maps back to the saving tp
 * rank's unit and from there to a shard file and offset; pread moves the
 * pieces. Runs on the training thread. */
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
 * wte with padded rows), each tp rank's units in files of their own;
 * "parallax-zero-2" (tp 1, files shard_<k>.bin) is read as tp 1;
 * "parallax-zero-1" files had a root unit and are refused rather than
 * mis-cut. */
#define CKPT_FORMAT "parallax-zero-3"
#define CKPT_FORMAT_TP1 "parallax-zero-2"

/* The shard file of tp rank t, dp shard k ("parallax-zero-2": shard_<k>). */
static void shard_path(char *buf, size_t len, const char *sdir, int legacy, long long t,
                       long long k)
{
    if (legacy)
        snprintf(buf, len, "%s/shard_%lld.bin", sdir, k);
    else
        snprintf(buf, len, "%s/shard_tp%lld_%lld.bin", sdir, t, k);
}

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
                               px_comm_t *dp_comm, px_comm_t *world)
{
    char sdir[4096], path[4200], tmp[4300];
    px_status_t status = PX_OK;
    int rank = world ? px_comm_rank(world) : 0, nsh = px_zero_nshards(z);
    int dp_rank = dp_comm ? px_comm_rank(dp_comm) : 0;
    int tp = gc->tp > 1 ? gc->tp : 1, tp_rank = tp > 1 ? gc->tp_rank : 0;
    int many = world && px_comm_size(world) > 1;
    snprintf(sdir, sizeof(sdir), "%s/step_%d", dir, step);
    if (rank == 0 || dp_rank < nsh)
        PX_CHECK(mkdirs(sdir));
    if (many)
        PX_CHECK(px_barrier(world, -1)); /* the directory exists for everyone */
    if (dp_rank < nsh) {
        shard_path(path, sizeof(path), sdir, 0, tp_rank, dp_rank);
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
    if (many)
        PX_CHECK(px_barrier(world, -1)); /* every tp rank's shards are on disk */
    if (rank == 0) {
        json_t *units = json_array();
        for (int u = 0; u < plan->nunits; u++)
            json_array_append_new(units, json_integer((json_int_t)plan->unit_size[u]));
        json_t *m = json_pack("{s:s, s:i, s:i, s:i, s:i, s:i, s:i, s:i, s:i, s:i, s:i, s:i, s:I, "
                              "s:o}",
                              "format", CKPT_FORMAT, "step", step, "zero", plan->zero,
                              "dp", plan->dp, "tp", tp, "nshards", nsh, "layers", gc->layers,
                              "heads", heads, "dim", gc->dim, "vocab", gc->vocab, "padded_vocab",
                              px_model_padded_vocab(gc), "max_seq", gc->max_seq,
                              "num_params", (json_int_t)px_model_num_params(gc), "unit_sizes",
                              units);
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
            px_info("checkpoint: step %d written to %s (%d shard%s x tp %d)", step, sdir, nsh,
                    nsh > 1 ? "s" : "", tp);
    }
    return status;
}

/* Where canonical element c of the slice of unit tensor t (cut for t->tp
 * ranks; t->tp_rank ignored) was held: by tp rank *rank_p at element
 * *local_p of its shard, and the elements up to c + *left_p - 1 follow it
 * there contiguously. The inverse of px_model_shard_run; a replicated
 * tensor is read from tp rank 0. */
static void old_locate(const px_model_unit_tensor_t *t, size_t c, int *rank_p, size_t *local_p,
                       size_t *left_p)
{
    size_t rows = (size_t)t->rows, cols = (size_t)t->cols, tp = (size_t)t->tp;
    size_t row = c / cols, col = c % cols, r;
    switch (t->split) {
    case PX_MODEL_SPLIT_COLUMN: { /* block j, its rows [r rp, (r+1) rp) on rank r */
        size_t block = rows / (size_t)t->parts, rp = block / tp, j = row / block;
        size_t rin = row % block;
        r = rin / rp;
        *local_p = (j * rp + rin - r * rp) * cols + col;
        *left_p = (j * block + (r + 1) * rp) * cols - c;
        break;
    }
    case PX_MODEL_SPLIT_ROW: { /* columns [r cp, (r+1) cp) of every row on rank r */
        size_t cp = cols / tp;
        r = col / cp;
        *local_p = row * cp + col - r * cp;
        *left_p = (r + 1) * cp - col;
        break;
    }
    case PX_MODEL_SPLIT_VOCAB: { /* rows [r rv, (r+1) rv) on rank r */
        size_t rv = rows / tp;
        r = row / rv;
        *local_p = c - r * rv * cols;
        *left_p = (r + 1) * rv * cols - c;
        break;
    }
    default:
        r = 0;
        *local_p = c;
        *left_p = rows * cols - c;
        break;
    }
    *rank_p = (int)r;
}

/* The checkpoint's layout, from its meta.json and the model. */
typedef struct ckpt_layout {
    long long step, zero, dp, tp, nsh;
    int legacy; /* "parallax-zero-2": files shard_<k>.bin, tp 1 */
    int nunits;
    px_model_config_t ocfg; /* the model's units as the checkpoint cut them:
                               tp = its tp; experts = the model's, or 0 for a
                               checkpoint whose MoE layers' units still held
                               the unused dense MLP (read past, model.h) */
    uint64_t *osl;  /* [nunits] elements of unit u per shard file (per array) */
    uint64_t *ooff; /* [nunits] elements before unit u in a shard file */
    uint64_t per_shard; /* elements of one shard file */
    int *fds;       /* [tp * nsh] the shard files, tp rank major; -1: not open */
} ckpt_layout_t;

static int jint(json_t *m, const char *key, long long *out)
{
    json_t *v = json_object_get(m, key);
    if (!json_is_integer(v))
        return -1;
    *out = json_integer_value(v);
    return 0;
}

/* 1 when meta.json's unit_sizes `us` are the units of cfg (cut for tp). */
static int units_match(json_t *us, int nunits, const px_model_config_t *cfg, int tp)
{
    int ok = json_is_array(us) && json_array_size(us) == (size_t)nunits;
    for (int u = 0; ok && u < nunits; u++) {
        json_t *e = json_array_get(us, (size_t)u);
        ok = json_is_integer(e) &&
             (uint64_t)json_integer_value(e) == px_model_unit_size_tp(cfg, u, tp);
    }
    return ok;
}

/* Parses path/meta.json into *cl (step, zero, dp, tp, nshards, ocfg) and
 * checks it describes this model (gc, heads): its unit sizes are the
 * model's cut for the checkpoint's tp, or, for a model with MoE layers,
 * the units that still held those layers' dense MLP (cl->ocfg.experts 0:
 * their trailing four tensors are skipped). Errors as px_checkpoint_load. */
static px_status_t read_meta(const char *path, const px_gpt_config_t *gc, int heads,
                             ckpt_layout_t *cl)
{
    char mpath[4200];
    json_error_t jerr;
    long long layers, dim, vocab, maxseq, hd, vp;
    px_status_t status = PX_OK;

    snprintf(mpath, sizeof(mpath), "%s/meta.json", path);
    json_t *m = json_load_file(mpath, 0, &jerr);
    if (!m) {
        px_error("checkpoint: cannot read %s: %s (an incomplete or missing checkpoint)", mpath,
                 jerr.text);
        return access(mpath, F_OK) ? PX_ERR_NOT_FOUND : PX_ERR_INVALID_ARGUMENT;
    }
    const char *fmt = json_string_value(json_object_get(m, "format")) ?: "";
    cl->legacy = !strcmp(fmt, CKPT_FORMAT_TP1);
    cl->tp = 1;
    if (jint(m, "step", &cl->step) || jint(m, "zero", &cl->zero) || jint(m, "dp", &cl->dp) ||
        jint(m, "nshards", &cl->nsh) || jint(m, "layers", &layers) || jint(m, "dim", &dim) ||
        jint(m, "vocab", &vocab) || jint(m, "max_seq", &maxseq) || jint(m, "heads", &hd) ||
        jint(m, "padded_vocab", &vp) || (!cl->legacy && jint(m, "tp", &cl->tp)) ||
        cl->step < 0 || cl->dp < 1 || cl->nsh < 1 || cl->dp % cl->nsh || cl->tp < 1 ||
        (!cl->legacy && strcmp(fmt, CKPT_FORMAT))) {
        px_error("checkpoint: %s is not a %s (or %s) checkpoint description", mpath, CKPT_FORMAT,
                 CKPT_FORMAT_TP1);
        status = PX_ERR_INVALID_ARGUMENT;
        goto out;
    }
    const struct { const char *name; long long have; int want; } dims[] = {
        {"layers", layers, gc->layers}, {"dim", dim, gc->dim}, {"vocab", vocab, gc->vocab},
        {"padded vocab", vp, px_model_padded_vocab(gc)},
        {"seq (wpe rows)", maxseq, gc->max_seq}, {"heads", hd, heads}};
    for (size_t i = 0; i < sizeof(dims) / sizeof(dims[0]); i++) {
        if (dims[i].have != dims[i].want) {
            px_error("checkpoint: cannot re-cut %s: it has %s %lld, this job %d", path,
                     dims[i].name, dims[i].have, dims[i].want);
            status = PX_ERR_INVALID_ARGUMENT;
            goto out;
        }
    }
    if (heads % cl->tp || vp % cl->tp) {
        px_error("checkpoint: %s: tp %lld does not divide its heads %d and padded vocab %lld",
                 mpath, cl->tp, heads, vp);
        status = PX_ERR_INVALID_ARGUMENT;
        goto out;
    }
    /* the unit sizes must be this model's cut for the checkpoint's tp */
    json_t *us = json_object_get(m, "unit_sizes");
    cl->ocfg = *gc;
    cl->ocfg.tp = (int)cl->tp;
    cl->ocfg.tp_rank = 0;
    int units_ok = units_match(us, cl->nunits, gc, (int)cl->tp);
    if (!units_ok && gc->experts > 0) { /* saved with the MoE layers' dense MLP */
        cl->ocfg.experts = 0;
        units_ok = units_match(us, cl->nunits, &cl->ocfg, (int)cl->tp);
        if (units_ok)
            px_info("checkpoint: %s holds the MoE layers' unused dense MLP tensors; they are "
                    "skipped", path);
    }
    if (!units_ok) { /* same dims, other units: a layout this code does not cut */
        px_error("checkpoint: %s: its unit_sizes are not this model's %d units at tp %lld",
                 mpath, cl->nunits, cl->tp);
        status = PX_ERR_INVALID_ARGUMENT;
    }
out:
    json_decref(m);
    return status;
}

/* Opens every shard file of the checkpoint into cl->fds and checks its
 * size against the layout (cl->osl, cl->ooff, cl->per_shard, computed
 * here). */
static px_status_t open_shards(const char *path, ckpt_layout_t *cl)
{
    long long nfiles = cl->tp * cl->nsh;
    cl->per_shard = 0;
    for (int u = 0; u < cl->nunits; u++) {
        uint64_t size = px_model_unit_size(&cl->ocfg, u), dp = (uint64_t)cl->dp;
        uint64_t pad = (size + dp - 1) / dp * dp;
        cl->osl[u] = pad / (uint64_t)cl->nsh;
        cl->ooff[u] = cl->per_shard;
        cl->per_shard += 3 * cl->osl[u];
    }
    for (long long f = 0; f < nfiles; f++) {
        char sp[4300];
        struct stat st;
        shard_path(sp, sizeof(sp), path, cl->legacy, f / cl->nsh, f % cl->nsh);
        cl->fds[f] = open(sp, O_RDONLY | O_CLOEXEC);
        if (cl->fds[f] < 0) {
            px_error("checkpoint: open %s: %s", sp, strerror(errno));
            return errno == ENOENT ? PX_ERR_NOT_FOUND : PX_ERR_IO;
        }
        if (fstat(cl->fds[f], &st) < 0 ||
            (uint64_t)st.st_size != cl->per_shard * sizeof(float)) {
            px_error("checkpoint: %s has %lld bytes, expected %llu", sp, (long long)st.st_size,
                     (unsigned long long)(cl->per_shard * sizeof(float)));
            return PX_ERR_INVALID_ARGUMENT;
        }
    }
    return PX_OK;
}

/* Copies n canonical elements from c on of unit tensor ot's slice (the
 * checkpoint's cut: ot->tp = cl->tp), array w (0 params, 1 m, 2 v) of unit
 * u, into backend memory dst, through the host buffer bounce. */
static px_status_t read_canonical(const char *path, const ckpt_layout_t *cl,
                                  const px_kernel_ops_t *kops, int u, int w,
                                  const px_model_unit_tensor_t *ot, size_t c, size_t n,
                                  float *dst, float *bounce)
{
    while (n) {
        int r;
        size_t local, left;
        old_locate(ot, c, &r, &local, &left);
        uint64_t oi = ot->unit_offset + local; /* element of tp rank r's unit u */
        uint64_t k = oi / cl->osl[u], within = oi % cl->osl[u];
        uint64_t take = n;
        if (take > left)
            take = left;
        if (take > cl->osl[u] - within)
            take = cl->osl[u] - within;
        if (take > BOUNCE_FLOATS)
            take = BOUNCE_FLOATS;
        off_t off = (off_t)((cl->ooff[u] + (uint64_t)w * cl->osl[u] + within) * sizeof(float));
        ssize_t got = pread(cl->fds[(long long)r * cl->nsh + (long long)k], bounce,
                            take * sizeof(float), off);
        if (got != (ssize_t)(take * sizeof(float))) {
            char sp[4300];
            shard_path(sp, sizeof(sp), path, cl->legacy, r, (long long)k);
            px_error("checkpoint: read %s: %s", sp, got < 0 ? strerror(errno) : "short read");
            return PX_ERR_IO;
        }
        kops->mem_copy_from_host(dst, bounce, take * sizeof(float));
        kops->synchronize(); /* the bounce buffer is reused next */
        dst += take;
        c += take;
        n -= take;
    }
    return PX_OK;
}

/* Where load_held's pieces come from: read(arg, i, t, canon, n, dst) fills
 * n backend floats at dst with the canonical elements from `canon` of the
 * slice of t, the unit's tensor i (px_model_shard_run's canonical index;
 * one tensor's run). */
typedef struct held_source {
    px_status_t (*read)(void *arg, int i, const px_model_unit_tensor_t *t, size_t canon,
                        size_t n, float *dst);
    void *arg;
} held_source_t;

/* Fills the elements [b, b + cnt) of this rank's unit u at dst: padding 0,
 * each tensor run from src. The one path every load into a layout takes
 * (checkpoints, px_checkpoint_fill_params). */
static px_status_t load_held(const px_gpt_config_t *gc, const px_kernel_ops_t *kops, int u,
                             float *dst, uint64_t b, uint64_t cnt, const held_source_t *src)
{
    px_model_unit_tensor_t nt[PX_MODEL_MAX_UNIT_TENSORS];
    int nn = px_model_unit_tensors(gc, u, nt);
    kops->mem_set(dst, 0, cnt * sizeof(float));
    for (int i = 0; i < nn; i++) {
        for (int j = 0; j < px_model_shard_nruns(&nt[i]); j++) {
            size_t local, canon, len;
            px_model_shard_run(&nt[i], j, &local, &canon, &len);
            uint64_t lo = nt[i].unit_offset + local, s = lo > b ? lo : b;
            uint64_t e = lo + len < b + cnt ? lo + len : b + cnt;
            if (s >= e)
                continue;
            PX_CHECK(src->read(src->arg, i, &nt[i], canon + (s - lo), e - s, dst + (s - b)));
        }
    }
    return PX_OK;
}

/* A checkpoint as a held_source: array w of unit u of the shards
 * described by cl; ot, the unit's tensors as the checkpoint cut them (the
 * model's tensors in the same order, maybe followed by a MoE layer's dense
 * MLP). */
typedef struct ckpt_source {
    const char *path;
    const ckpt_layout_t *cl;
    const px_kernel_ops_t *kops;
    int u, w;
    float *bounce;
    px_model_unit_tensor_t ot[PX_MODEL_MAX_UNIT_TENSORS];
} ckpt_source_t;

static px_status_t ckpt_read(void *arg, int i, const px_model_unit_tensor_t *t, size_t canon,
                             size_t n, float *dst)
{
    ckpt_source_t *cs = arg;
    (void)t;
    return read_canonical(cs->path, cs->cl, cs->kops, cs->u, cs->w, &cs->ot[i], canon, n, dst,
                          cs->bounce);
}

px_status_t px_checkpoint_load(const char *path, px_zero_t *z, const px_gpt_config_t *gc,
                               const px_plan_t *plan, int heads, int *step_p)
{
    px_status_t status;
    float *bounce = NULL;
    ckpt_layout_t cl = {.nunits = plan->nunits};

    status = read_meta(path, gc, heads, &cl);
    if (status != PX_OK)
        return status;
    cl.osl = calloc((size_t)cl.nunits, sizeof(uint64_t));
    cl.ooff = calloc((size_t)cl.nunits, sizeof(uint64_t));
    cl.fds = malloc((size_t)(cl.tp * cl.nsh) * sizeof(int));
    if (!cl.osl || !cl.ooff || !cl.fds) {
        status = PX_ERR_NO_MEMORY;
        goto out;
    }
    for (long long f = 0; f < cl.tp * cl.nsh; f++)
        cl.fds[f] = -1;
    status = open_shards(path, &cl);
    if (status != PX_OK)
        goto out;
    /* everything checked: fill what this rank holds */
    bounce = malloc(BOUNCE_FLOATS * sizeof(float));
    if (!bounce) {
        status = PX_ERR_NO_MEMORY;
        goto out;
    }
    for (int u = 0; u < cl.nunits && status == PX_OK; u++) {
        for (int w = 0; w < 3 && status == PX_OK; w++) {
            uint64_t b, cnt;
            float *dst = px_zero_held(z, w, u, &b, &cnt);
            ckpt_source_t cs = {path, &cl, px_zero_ops(z), u, w, bounce, {{0}}};
            /* the same tensors in the same order; a unit saved with its
             * dense MLP has four more at its end, never read */
            px_model_unit_tensors(&cl.ocfg, u, cs.ot);
            status = load_held(gc, px_zero_ops(z), u, dst, b, cnt,
                               &(held_source_t){ckpt_read, &cs});
        }
    }
    if (status == PX_OK)
        px_info("checkpoint: loaded step %lld from %s (saved with zero %lld, dp %lld, tp %lld; "
                "now zero %d, dp %d, tp %d)", cl.step, path, cl.zero, cl.dp, cl.tp, plan->zero,
                plan->dp, gc->tp > 1 ? gc->tp : 1);
out:
    for (long long f = 0; cl.fds && f < cl.tp * cl.nsh; f++)
        if (cl.fds[f] >= 0)
            close(cl.fds[f]);
    free(cl.fds);
    free(bounce);
    free(cl.osl);
    free(cl.ooff);
    if (status == PX_OK)
        *step_p = (int)cl.step;
    return status;
}

/* A canonical reader as a held_source: host pieces staged through bounce. */
typedef struct canon_source {
    px_canonical_read_fn read;
    void *arg;
    const px_kernel_ops_t *kops;
    float *bounce;
} canon_source_t;

static px_status_t canon_read(void *arg, int i, const px_model_unit_tensor_t *t, size_t canon,
                              size_t n, float *dst)
{
    canon_source_t *cs = arg;
    (void)i;
    for (size_t o = 0; o < n; o += BOUNCE_FLOATS) {
        size_t take = n - o < BOUNCE_FLOATS ? n - o : BOUNCE_FLOATS;
        PX_CHECK(cs->read(cs->arg, t->tensor, t->canon_offset + canon + o, take, cs->bounce));
        cs->kops->mem_copy_from_host(dst + o, cs->bounce, take * sizeof(float));
        cs->kops->synchronize(); /* the bounce buffer is reused next */
    }
    return PX_OK;
}

px_status_t px_checkpoint_fill_params(px_zero_t *z, const px_gpt_config_t *gc,
                                      const px_plan_t *plan, px_canonical_read_fn read,
                                      void *arg)
{
    canon_source_t cs = {read, arg, px_zero_ops(z), malloc(BOUNCE_FLOATS * sizeof(float))};
    px_status_t status = cs.bounce ? PX_OK : PX_ERR_NO_MEMORY;
    for (int u = 0; u < plan->nunits && status == PX_OK; u++) {
        uint64_t b, cnt;
        float *dst = px_zero_held(z, 0, u, &b, &cnt);
        status = load_held(gc, cs.kops, u, dst, b, cnt, &(held_source_t){canon_read, &cs});
    }
    free(cs.bounce);
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

/* The expert group's entries after the dense ones (element offset off):
 * per MoE layer l in layer order its px_moe_tensor_name(i).<l>; returns
 * the end offset. */
static size_t st_moe_entries(json_t *h, const px_moe_config_t *mc, size_t off)
{
    const json_int_t E = mc->experts, C = mc->dim;
    const json_int_t shapes[PX_MOE_NUM_TENSORS][3] = {
        {E, C, 0}, {E, 4 * C, C}, {E, 4 * C, 0}, {E, C, 4 * C}, {E, C, 0}};
    const int ndim[PX_MOE_NUM_TENSORS] = {2, 3, 2, 3, 2};
    char name[64];
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
    return off;
}

px_status_t px_safetensors_write_groups(const char *path, const px_gpt_config_t *gc,
                                        const float *params, const px_moe_config_t *mc,
                                        const float *moe_params)
{
    json_t *h = json_object();
    size_t nd = 0;
    px_status_t status = PX_OK;
    char tmp[4300];
    for (int i = 0; i < PX_GPT_NUM_TENSORS; i++) {
        px_gpt_tensor_info_t ti;
        px_gpt_tensor_info_of(gc, i, &ti);
        json_int_t shape[8];
        for (int d = 0; d < ti.ndim && d < 8; d++)
            shape[d] = ti.shape[d];
        st_entry(h, ti.name, ti.ndim, shape, ti.offset, ti.size);
        nd = ti.offset + ti.size;
    }
    const size_t nm = mc ? st_moe_entries(h, mc, nd) - nd : 0;
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
        status = write_all(fd, params, nd * sizeof(float), path);
    if (status == PX_OK && nm)
        status = write_all(fd, moe_params, nm * sizeof(float), path);
    if (status == PX_OK)
        return commit_file(fd, tmp, path);
    close(fd);
    return status;
}

px_status_t px_safetensors_write(const char *path, const px_gpt_config_t *gc,
                                 const float *params)
{
    return px_safetensors_write_groups(path, gc, params, NULL, NULL);
}
