/* observers.c: the dumps, test hooks and end-of-run figures that watch a
 * training run (observers.h). */
#include "observers.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "data.h"
#include "memacct.h"
#include "ring_attn.h"
#include "tp.h"
#include "px_log.h"

/* ---- dumps (tests / tools) ---- */

static px_status_t dump_raw(const char *dir, const char *name, int step, const void *buf,
                            size_t bytes)
{
    char path[4096];
    FILE *f;
    if (step > 0)
        snprintf(path, sizeof(path), "%s/%s_%d.bin", dir, name, step);
    else
        snprintf(path, sizeof(path), "%s/%s.bin", dir, name);
    f = fopen(path, "wb");
    if (!f || fwrite(buf, 1, bytes, f) != bytes) {
        px_error("dump %s: %s", path, strerror(errno));
        if (f)
            fclose(f);
        return PX_ERR_IO;
    }
    if (fclose(f)) {
        px_error("dump %s: %s", path, strerror(errno));
        return PX_ERR_IO;
    }
    return PX_OK;
}

static px_status_t dump_layout(const char *dir, const px_train_config_t *cfg,
                               const px_gpt_config_t *gc, size_t nparams)
{
    char path[4096];
    FILE *f;
    snprintf(path, sizeof(path), "%s/layout.json", dir);
    f = fopen(path, "w");
    if (!f) {
        px_error("dump %s: %s", path, strerror(errno));
        return PX_ERR_IO;
    }
    fprintf(f,
            "{\"layers\": %d, \"heads\": %d, \"dim\": %d, \"seq\": %d, \"vocab\": %d, "
            "\"padded_vocab\": %d, "
            "\"batch\": %d, \"steps\": %d, \"lr\": %.9g, \"min_lr_ratio\": %.9g, "
            "\"warmup\": %d, \"weight_decay\": %.9g, \"beta1\": %.9g, \"beta2\": %.9g, "
            "\"eps\": %.9g, \"grad_clip\": %.9g, \"seed\": %llu, \"num_params\": %zu,\n"
            " \"tensors\": [\n",
            cfg->layers, cfg->heads, cfg->dim, cfg->seq, cfg->vocab, px_model_padded_vocab(gc),
            cfg->batch, cfg->steps,
            cfg->lr, cfg->min_lr_ratio, px_train_warmup(cfg), cfg->weight_decay, cfg->beta1,
            cfg->beta2, cfg->eps, cfg->grad_clip, (unsigned long long)cfg->seed, nparams);
    for (int i = 0; i < PX_GPT_NUM_TENSORS; i++) {
        px_gpt_tensor_info_t ti;
        px_gpt_tensor_info_of(gc, i, &ti);
        fprintf(f, "  {\"name\": \"%s\", \"shape\": [", ti.name);
        for (int d = 0; d < ti.ndim; d++)
            fprintf(f, "%s%d", d ? ", " : "", ti.shape[d]);
        fprintf(f,
                "], \"offset\": %zu, \"size\": %zu, \"valid\": %zu, \"decay\": %d, "
                "\"owner\": \"%s\", \"init\": \"%s\", \"split\": \"%s\"}%s\n",
                ti.offset, ti.size, ti.valid, ti.decay, px_model_owner_name(ti.owner),
                px_model_init_name(ti.init), px_model_split_name(ti.split),
                i + 1 < PX_GPT_NUM_TENSORS ? "," : "");
    }
    fprintf(f, " ]}\n");
    if (fclose(f)) {
        px_error("dump %s: %s", path, strerror(errno));
        return PX_ERR_IO;
    }
    return PX_OK;
}

static px_status_t dump_batch(const char *dir, const px_data_t *data, const px_train_config_t *cfg,
                              int step)
{
    size_t n = (size_t)cfg->batch * cfg->seq;
    int32_t *buf = malloc(2 * n * sizeof(int32_t));
    px_status_t status;
    if (!buf)
        return PX_ERR_NO_MEMORY;
    px_data_batch(data, cfg->seed, step - 1, 0, cfg->batch, cfg->seq, buf, buf + n);
    status = dump_raw(dir, "batch", step, buf, 2 * n * sizeof(int32_t));
    free(buf);
    return status;
}

/* Validation batch k (eval.h: training step k's cut, from the validation
 * file), the global batch, as dump_batch. */
static px_status_t dump_val_batch(const char *dir, const px_data_t *val,
                                  const px_train_config_t *cfg, int k)
{
    size_t n = (size_t)cfg->batch * cfg->seq;
    int32_t *buf = malloc(2 * n * sizeof(int32_t));
    char name[64];
    px_status_t status;
    if (!buf)
        return PX_ERR_NO_MEMORY;
    px_data_batch(val, cfg->seed, k, 0, cfg->batch, cfg->seq, buf, buf + n);
    snprintf(name, sizeof(name), "val_batch_%d", k);
    status = dump_raw(dir, name, 0, buf, 2 * n * sizeof(int32_t));
    free(buf);
    return status;
}

static px_status_t dump_val_loss(const char *dir, int step, float val_loss)
{
    char path[4096];
    FILE *f;
    snprintf(path, sizeof(path), "%s/val_loss_%d.txt", dir, step);
    f = fopen(path, "w");
    if (!f || fprintf(f, "%.9g\n", (double)val_loss) < 0 || fclose(f)) {
        px_error("dump %s: %s", path, strerror(errno));
        return PX_ERR_IO;
    }
    return PX_OK;
}

/* moe_layout.json: the canonical MoE buffer's tensors (moe.h), per MoE
 * layer: {"layers": [l...], "tensors": [{name, layer, offset, shape}]}. */
static px_status_t dump_moe_layout(const char *dir, const px_moe_config_t *mc)
{
    char path[4096];
    snprintf(path, sizeof(path), "%s/moe_layout.json", dir);
    FILE *f = fopen(path, "w");
    if (!f) {
        px_error("train: cannot write %s: %s", path, strerror(errno));
        return PX_ERR_IO;
    }
    int E = mc->experts, C = mc->dim;
    const int shapes[PX_MOE_NUM_TENSORS][3] = {{E, C, 0}, {E, 4 * C, C}, {E, 4 * C, 0},
                                               {E, C, 4 * C}, {E, C, 0}};
    uint64_t off = 0;
    fprintf(f, "{\"experts\": %d, \"top_k\": %d, \"tensors\": [", E, mc->top_k);
    for (int l = 0, first = 1; l < mc->layers; l++) {
        if (!px_moe_is_layer(mc, l))
            continue;
        for (int i = 0; i < PX_MOE_NUM_TENSORS; i++) {
            fprintf(f, "%s{\"name\": \"%s\", \"layer\": %d, \"offset\": %llu, "
                    "\"shape\": [%d, %d%s", first ? "" : ", ", px_moe_tensor_name(i), l,
                    (unsigned long long)off, shapes[i][0], shapes[i][1], shapes[i][2] ? ", " : "");
            if (shapes[i][2])
                fprintf(f, "%d", shapes[i][2]);
            fprintf(f, "]}");
            off += px_moe_tensor_size(mc, i);
            first = 0;
        }
    }
    fprintf(f, "]}\n");
    return fclose(f) == 0 ? PX_OK : PX_ERR_IO;
}

/* ---- the dumps ---- */

typedef struct dump_obs {
    const char *dir;
    int steps, export_only;
    float *canon;     /* (n) host: files are written from it */
    float *moe_canon; /* (px_moe_num_params) with experts */
    size_t moe_n;
} dump_obs_t;

static px_status_t dump_init(void *arg, px_trainer_t *tr)
{
    dump_obs_t *d = arg;
    const px_train_config_t *cfg = tr->cfg;
    d->canon = calloc(tr->n, sizeof(float));
    if (tr->moe) {
        d->moe_n = (size_t)px_moe_num_params(px_moe_config(tr->moe));
        d->moe_canon = calloc(d->moe_n ? d->moe_n : 1, sizeof(float));
    }
    if (!d->canon || (tr->moe && !d->moe_canon))
        return PX_ERR_NO_MEMORY;
    PX_CHECK(px_params_canonical(&tr->params, 0, d->canon, d->moe_canon));
    if (tr->rank == 0) {
        if (mkdir(d->dir, 0755) < 0 && errno != EEXIST) {
            px_error("train: cannot create dump dir %s: %s", d->dir, strerror(errno));
            return PX_ERR_IO;
        }
        PX_CHECK(dump_layout(d->dir, cfg, &tr->gc, tr->n));
        PX_CHECK(dump_raw(d->dir, "params_init", 0, d->canon, tr->n * sizeof(float)));
        PX_CHECK(dump_batch(d->dir, tr->data, cfg, 1));
        if (tr->moe) {
            PX_CHECK(dump_moe_layout(d->dir, px_moe_config(tr->moe)));
            PX_CHECK(dump_raw(d->dir, "moe_params_init", 0, d->moe_canon,
                              d->moe_n * sizeof(float)));
        }
    }
    if (d->export_only) {
        tr->finished = 1;
        return PX_OK;
    }
    if (tr->val && tr->rank == 0)
        for (int k = 0; k < cfg->eval_batches; k++)
            PX_CHECK(dump_val_batch(d->dir, tr->val, cfg, k));
    return PX_OK;
}

/* step s's averaged gradients before clipping (collective: every rank
 * gathers) and its global batch */
static px_status_t dump_grads(void *arg, px_trainer_t *tr, int s, float loss, float norm)
{
    dump_obs_t *d = arg;
    (void)loss;
    (void)norm;
    if (s >= d->steps)
        return PX_OK;
    PX_CHECK(px_params_canonical(&tr->params, 1, d->canon, d->moe_canon));
    if (tr->rank != 0)
        return PX_OK;
    PX_CHECK(dump_raw(d->dir, "grads", s + 1, d->canon, tr->n * sizeof(float)));
    if (s > 0)
        PX_CHECK(dump_batch(d->dir, tr->data, tr->cfg, s + 1));
    if (tr->moe)
        PX_CHECK(dump_raw(d->dir, "moe_grads", s + 1, d->moe_canon, d->moe_n * sizeof(float)));
    return PX_OK;
}

/* step s's parameters after the update, its loss, norm and lr, and the
 * validation loss where one was computed */
static px_status_t dump_step(void *arg, px_trainer_t *tr, const px_step_report_t *rep)
{
    dump_obs_t *d = arg;
    const int s = rep->step - 1;
    if (s < d->steps) {
        PX_CHECK(px_params_canonical(&tr->params, 0, d->canon, d->moe_canon));
        if (tr->rank == 0) {
            char path[4096];
            PX_CHECK(dump_raw(d->dir, "params", s + 1, d->canon, tr->n * sizeof(float)));
            if (tr->moe)
                PX_CHECK(dump_raw(d->dir, "moe_params", s + 1, d->moe_canon,
                                  d->moe_n * sizeof(float)));
            snprintf(path, sizeof(path), "%s/loss_%d.txt", d->dir, s + 1);
            FILE *f = fopen(path, "w");
            if (f) {
                fprintf(f, "%.9g %.9g %.9g\n", rep->loss, rep->grad_norm, rep->lr);
                fclose(f);
            }
        }
    }
    if (tr->val && tr->rank == 0 && px_eval_due(tr->eval_every, s, tr->cfg->steps))
        PX_CHECK(dump_val_loss(d->dir, s + 1, rep->val_loss));
    return PX_OK;
}

static void dump_free(void *arg)
{
    dump_obs_t *d = arg;
    free(d->canon);
    free(d->moe_canon);
    free(d);
}

px_status_t px_observer_dump(const char *dir, int steps, int export_only,
                             px_train_observer_t *obs)
{
    dump_obs_t *d = calloc(1, sizeof(*d));
    if (!d)
        return PX_ERR_NO_MEMORY;
    d->dir = dir;
    d->steps = steps;
    d->export_only = export_only;
    *obs = (px_train_observer_t){.arg = d, .on_init = dump_init, .on_grads = dump_grads,
                                 .on_step = dump_step, .destroy = dump_free};
    return PX_OK;
}

/* ---- test hooks ---- */

static px_status_t norm_ones_init(void *arg, px_trainer_t *tr)
{
    float norm1 = 0.0f;
    (void)arg;
    PX_CHECK(px_zero_test_norm_ones(tr->zero, &norm1));
    if (tr->rank == 0) {
        printf("norm-ones %.9g params %zu\n", (double)norm1, tr->n);
        fflush(stdout);
    }
    tr->finished = 1;
    return PX_OK;
}

px_train_observer_t px_observer_norm_ones(void)
{
    return (px_train_observer_t){.on_init = norm_ones_init};
}

static px_status_t digests_init(void *arg, px_trainer_t *tr)
{
    (void)arg;
    tr->digests = 1;
    return PX_OK;
}

px_train_observer_t px_observer_digests(void)
{
    return (px_train_observer_t){.on_init = digests_init};
}

/* ---- the end-of-run figures ---- */

static px_status_t run_report_end(void *arg, px_trainer_t *tr)
{
    const px_train_config_t *cfg = tr->cfg;
    const int steps_run = cfg->steps - tr->start_step;
    px_zero_times_t zt;
    px_mem_stats_t ms;
    (void)arg;
    px_zero_times(tr->zero, &zt);
    px_mem_stats(&ms);
    px_info("train: zero %d: per step all-gather wait %.2f ms (%d gathers, %d started under "
            "compute after a reduce-scatter), reduce-scatter wait %.2f ms, other collectives "
            "%.2f ms, progress hook %.2f ms, device wait %.2f ms; peak state %.3f MB (plan %.3f "
            "MB)",
            cfg->zero, 1e3 * zt.gather_wait_s / steps_run, zt.gathers, zt.deferred_gathers,
            1e3 * zt.rs_wait_s / steps_run, 1e3 * zt.comm_other_s / steps_run,
            1e3 * zt.progress_s / steps_run, 1e3 * zt.device_wait_s / steps_run,
            ms.state_peak / 1e6,
            px_plan_state_bytes(tr->plan) / 1e6);
    if (px_zero_nbuckets(tr->zero))
        px_info("train: dp gradient buckets: %d (bucket %.3f MiB), %.2f per step started "
                "during backward (zero %d); the rest after it",
                px_zero_nbuckets(tr->zero),
                px_zero_bucket_bytes(cfg->bucket_mb, tr->plan->padded * sizeof(float)) /
                    1048576.0,
                (double)px_zero_buckets_early(tr->zero) / steps_run, cfg->zero);
    if (tr->cp > 1) {
        px_ring_times_t rt;
        px_pipe_ring_times(tr->pipe, &rt);
        px_info("train: cp %d: ring attention %d tokens of %d per sequence; per step %.2f ms "
                "of ring transfers (%.2f MB sent), %.2f ms of it blocked: %.0f%% of ring "
                "communication hidden behind compute", tr->cp, tr->Tl, tr->T,
                1e3 * rt.total_s / steps_run, rt.bytes / 1e6 / steps_run,
                1e3 * rt.wait_s / steps_run,
                rt.total_s > 0 ? 100.0 * (rt.total_s - rt.wait_s) / rt.total_s : 0.0);
    }
    if (tr->layout.tp > 1) {
        px_tp_times_t tt;
        px_pipe_tp_times(tr->pipe, &tt);
        double all = tt.comm_s + tt.hidden_s;
        px_info("train: tp %d: per step %.2f ms blocked in tensor-parallel collectives (%d "
                "per step, %d overlapped; %.2f ms of it waiting for them) and %.2f ms hidden "
                "behind compute: %.0f%% of %.2f ms of tp communication hidden",
                tr->layout.tp, 1e3 * tt.comm_s / steps_run, tt.colls / steps_run,
                tt.overlapped / steps_run, 1e3 * tt.wait_s / steps_run,
                1e3 * tt.hidden_s / steps_run, all > 0 ? 100.0 * tt.hidden_s / all : 0.0,
                1e3 * all / steps_run);
    }
    return PX_OK;
}

px_train_observer_t px_observer_run_report(void)
{
    return (px_train_observer_t){.on_end = run_report_end};
}
