/* zero.c: ZeRO stages 0-3 for the GPT engine (zero.h).
 *
 * Buffers (memacct categories), per stage:
 *   full_params  [plan->padded]   PARAMS  stages 0-2
 *   shard_params [plan->shard]    PARAMS  stage 3
 *   full_grads   [padded + 1]     GRADS   stages 0-1 (the spare float carries
 *                                          the loss through stage 0's all-reduce)
 *   shard_grads  [plan->shard]    GRADS   stages 2-3
 *   m, v         [padded / shard] OPTIM   (stage 0 / stages 1-3)
 *   pbuf[u]      [unit_padded[u]] PARAMS  stage 3, a gathered unit, transient
 *   gbuf[u]      [unit_padded[u]] GRADS   stages 2-3, a unit's gradients until
 *                                          reduce-scattered, transient
 * Invariant: padding elements of every buffer stay 0 (the model never
 * writes them; reduce-scatters of zeros give zeros), so norms and updates
 * may run over whole slices.
 * Units (model.h): 0 the embedding, 1+l layer l, L+1 the head; the
 * embedding's gradient buffer lives from the head's backward (tied wte) to
 * the end of backward, every other unit's only through its own backward.
 * Tensor bytes are cleared and copied through the op table (mem_set,
 * mem_copy, mem_copy_from_host / to_host), never with memset/memcpy.
 *
 * Nonblocking requests are recorded in gather_req[u], the reduce-scatter
 * FIFO and bucket_req[b]; every pending request of the worker is advanced
 * by px_progress from the model's progress hook (between kernels) and each
 * is completed, and its error taken, with px_wait; on destroy, pending ones
 * are cancelled before their buffers are freed. One training thread. */
#include "zero.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "memacct.h"
#include "px_coll.h"
#include "model.h"
#include "px_env.h"
#include "px_kernels.h"
#include "px_log.h"
#include "px_time.h"


/* Pokes (progress hooks) of a unit's backward before the reduce-scatter
 * in flight is completed and the deferred gather starts (deferred_gather).
 * A dense layer's backward (gpt.c, tp 1) runs four matmul backwards, fcproj,
 * fc, attproj and qkv, each poking PX_GPT_POKE_BLOCKS times in its input
 * gradient's row blocks and once after its weight gradient, plus once after
 * the attention: 4 * (PX_GPT_POKE_BLOCKS + 1) + 1 pokes (21 at 4 blocks).
 * The switch comes after attproj's input gradient: fcproj's and fc's
 * PX_GPT_POKE_BLOCKS + 1 each and attproj's PX_GPT_POKE_BLOCKS (14 at 4
 * blocks). The reduce-scatter of a unit moves twice the bytes of its
 * gather per rank, so about 2/3 of the layer's compute for the one and 1/3
 * for the other. */
#define DEFER_POKES (3 * PX_GPT_POKE_BLOCKS + 2)

/* Where a stage-3 wait happens (the per-wait log, PX_ZERO_WAIT_LOG). */
enum {
    W_AG_FWD,      /* all-gather, forward params_acquire */
    W_AG_BWD,      /* all-gather, backward params_acquire */
    W_RS_DEFER,    /* reduce-scatter, deferred_gather (a poke of the next unit) */
    W_RS_GRADS,    /* reduce-scatter, grads_acquire (no room for one in flight) */
    W_RS_PARAMS,   /* reduce-scatter, params_acquire (a deferred gather never started) */
    W_RS_END,      /* reduce-scatter, end of the micro-batch */
    WAIT_SITES
};
static const char *const wait_site_name[WAIT_SITES] = {
    "AG fwd", "AG bwd", "RS defer", "RS grads", "RS params", "RS end"};

/* Sum of the waits at one site of one unit: count, wall time and this
 * thread's CPU time inside them (s). Wall minus CPU is time the rank slept
 * (the peer had not published yet, or the scheduler ran someone else);
 * CPU is the copies and reductions the wait made itself. */
typedef struct wait_stat {
    long n;
    double wall_s, cpu_s;
} wait_stat_t;

static double cpu_now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

typedef struct rs_entry {
    int unit;
    px_request_t *req; /* NULL: already complete */
} rs_entry_t;

struct px_zero {
    px_gpt_config_t gc;
    const px_plan_t *plan;
    px_comm_t *comm;     /* the dp group */
    px_comm_t *mp;       /* the model-parallel group (NULL: none) */
    int stage, dp, rank, accum, prefetch, nunits;
    int tied_copy;       /* unit held as a copy of another rank's (-1 none):
                            outside the norm and the canonical dumps */
    int tied_unit;       /* unit with a copy on another rank (-1 none):
                            stage 0 all-reduces it on its own */
    int nsh, me;                                      /* slices: count, mine */
    const px_kernel_ops_t *k;
    float *full_params, *shard_params, *full_grads, *shard_grads, *m, *v;
    float **pbuf, **gbuf;
    px_request_t **gather_req;
    int *gathering;      /* 1 while gather_req[u] has not been waited */
    rs_entry_t *rs;      /* FIFO, capacity nunits */
    int rs_head, rs_count;
    int prefetch_next;   /* stage 3 backward: unit whose gather waits for a
                            reduce-scatter (deferred_gather; -1 none) */
    int pokes;           /* progress hooks since prefetch_next was set */
    px_status_t hook_err; /* a failure in the progress hook, returned by the
                             next params/grads hook */
    px_gpt_hooks_t hooks;
    px_zero_times_t times;
    int phase;           /* 0 forward, 1 backward: of the last params_acquire */
    long update_gathers; /* gathers started by px_zero_update (hp->more) */
    double step_wall_s;  /* wait log: this step's blocked wall time so far */
    double *steps_wall;  /* wait log: each finished step's (s) */
    int nsteps, steps_cap;
    int step_open;     /* wait log: a step has begun (its total is due) */
    wait_stat_t *wlog;   /* PX_ZERO_WAIT_LOG: [WAIT_SITES][nunits] (NULL: off) */

    /* stage 0-1 gradient buckets (px_zero_set_buckets; nbuckets 0: off).
     * Bucket b holds units [bucket_lo[b], bucket_hi[b]], contiguous in
     * full_grads, formed from the head down (reverse layer order, the order
     * backward finishes them); unit 0 (the embedding, finished last and
     * written by the head's backward too) and the loss are reduced in
     * px_zero_reduce; stage 1: one unit per bucket, unit 0 included. */
    int nbuckets, bstarted;
    long buckets_early;  /* buckets started from the grads_release hook (during
                          * backward), over all steps */
    int *bucket_lo, *bucket_hi, *unit_bucket; /* unit_bucket[u]: -1 none */
    int *bucket_left;    /* grads_release calls bucket b still needs this step */
    px_request_t **bucket_req;
};

static uint64_t sl(const px_zero_t *z, int u) { return z->plan->unit_padded[u] / (uint64_t)z->nsh; }

/* ---- collectives (px_coll.h, nonblocking) ---- */

static px_status_t coll_fail(px_zero_t *z, const char *what, int u, px_status_t st)
{
    px_error("zero: %s of unit %d failed: %s (%s)", what, u, px_status_str(st),
             z->comm ? px_comm_last_error(z->comm) : "");
    return st;
}

/* In-place reduce-scatter (AVG) of unit buffer buf: my slice ends at
 * buf + rank * count. */
static px_status_t rs_start(px_zero_t *z, float *buf, int u, px_request_t **req_p)
{
    uint64_t cnt = z->plan->unit_padded[u] / (uint64_t)z->dp;
    *req_p = NULL;
    if (z->dp == 1 || !cnt) /* a unit another pipeline stage holds: nothing */
        return PX_OK;
    return px_reduce_scatter_start(z->comm, buf, buf + (uint64_t)z->rank * cnt, cnt, PX_FLOAT32,
                                   PX_AVG, NULL, req_p);
}

/* In-place all-gather of unit buffer buf whose slice `rank` is filled. */
static px_status_t ag_start(px_zero_t *z, float *buf, int u, px_request_t **req_p)
{
    uint64_t cnt = z->plan->unit_padded[u] / (uint64_t)z->dp;
    *req_p = NULL;
    if (z->dp == 1 || !cnt)
        return PX_OK;
    return px_allgather_start(z->comm, buf + (uint64_t)z->rank * cnt, buf, cnt, PX_FLOAT32, NULL,
                              req_p);
}

static px_status_t req_wait(px_request_t *req)
{
    return req ? px_wait(req, -1) : PX_OK;
}

/* Starts `start` on every unit of the flat buffer `flat` (unit u at
 * plan->unit_offset[u]), all in flight at once, then waits for each; after a
 * failed start the started ones are cancelled. PX_ERR_NO_MEMORY or the first
 * collective error. */
static px_status_t all_units(px_zero_t *z,
                             px_status_t (*start)(px_zero_t *, float *, int, px_request_t **),
                             float *flat)
{
    px_status_t status = PX_OK;
    px_request_t **reqs = calloc((size_t)z->nunits, sizeof(*reqs));
    int started = 0;

    if (!reqs)
        return PX_ERR_NO_MEMORY;
    for (int u = 0; u < z->nunits && status == PX_OK; u++, started++)
        status = start(z, flat + z->plan->unit_offset[u], u, &reqs[u]);
    for (int u = 0; u < started; u++) {
        if (status != PX_OK) {
            if (reqs[u])
                px_request_cancel(reqs[u]);
            continue;
        }
        status = req_wait(reqs[u]);
    }
    free(reqs);
    return status;
}

/* Completes a squared gradient norm over the model-parallel group: the other
 * ranks of it hold other parameters of the same model copy. A no-op for a
 * group of one (pure data parallelism / ZeRO). */
static px_status_t model_sumsq(px_zero_t *z, double *ss)
{
    px_status_t status;

    if (!z->mp || px_comm_size(z->mp) < 2)
        return PX_OK;
    status = px_allreduce(z->mp, ss, ss, 1, PX_FLOAT64, PX_SUM, -1);
    if (status != PX_OK)
        px_error("zero: model-parallel norm all-reduce failed: %s (%s)", px_status_str(status),
                 px_comm_last_error(z->mp));
    return status;
}

/* Sum of squares of elements [b, e) of unit u, held at g (g points at
 * element b). With tp > 1 a tensor replicated over the tensor group counts
 * on tp rank 0 only (its copies are bitwise equal, tp.h), so after the
 * model-parallel sum every parameter is counted once; a split tensor's
 * shards count on their own ranks. */
static double unit_sumsq(const px_zero_t *z, const float *g, int u, uint64_t b, uint64_t e)
{
    if (u == z->tied_copy)
        return 0.0;
    if (z->gc.tp <= 1 || z->gc.tp_rank == 0)
        return z->k->sumsq(g, e - b);
    px_gpt_unit_tensor_t t[PX_MODEL_MAX_UNIT_TENSORS];
    int nt = px_gpt_unit_tensors(&z->gc, u, t);
    double ss = 0.0;
    for (int j = 0; j < nt; j++) {
        uint64_t lo = t[j].unit_offset > b ? t[j].unit_offset : b;
        uint64_t hi = t[j].unit_offset + t[j].size < e ? t[j].unit_offset + t[j].size : e;
        if (lo < hi && t[j].split != PX_MODEL_SPLIT_REPLICATED)
            ss += z->k->sumsq(g + (lo - b), hi - lo);
    }
    return ss;
}

/* ---- stage 3: gathered units ---- */

static px_status_t gather_start(px_zero_t *z, int u)
{
    px_status_t status;
    float *b = px_mem_calloc(PX_MEM_PARAMS, z->plan->unit_padded[u], sizeof(float));
    if (!b)
        return PX_ERR_NO_MEMORY;
    z->k->mem_copy(b + (uint64_t)z->rank * sl(z, u), z->shard_params + z->plan->shard_offset[u],
                   sl(z, u) * sizeof(float));
    status = ag_start(z, b, u, &z->gather_req[u]);
    if (status != PX_OK) {
        px_mem_free(b);
        return coll_fail(z, "all-gather", u, status);
    }
    z->pbuf[u] = b;
    z->gathering[u] = 1;
    z->times.gathers++;
    return PX_OK;
}

/* Adds one wait (wall since t0, CPU since c0) to the per-wait log. */
static void wait_note(px_zero_t *z, int site, int u, double t0, double c0)
{
    wait_stat_t *w = &z->wlog[site * z->nunits + u];
    w->n++;
    w->wall_s += px_time_mono_s() - t0;
    z->step_wall_s += px_time_mono_s() - t0;
    w->cpu_s += cpu_now_s() - c0;
}

static px_status_t gather_wait(px_zero_t *z, int u)
{
    if (!z->gathering[u])
        return PX_OK;
    double t0 = px_time_mono_s(), c0 = z->wlog ? cpu_now_s() : 0.0;
    px_status_t status = req_wait(z->gather_req[u]);
    z->times.gather_wait_s += px_time_mono_s() - t0;
    if (z->wlog)
        wait_note(z, z->phase ? W_AG_BWD : W_AG_FWD, u, t0, c0);
    z->gather_req[u] = NULL;
    z->gathering[u] = 0;
    return status == PX_OK ? PX_OK : coll_fail(z, "all-gather", u, status);
}

/* The unit the model asks for after u (gpt.h's hook protocol), to
 * prefetch: forward embedding -> layer 0 -> ... -> layer L-1 -> head;
 * backward head -> layer L-1 -> ... -> layer 0 (the embedding's parameters
 * are acquired by the head's backward while still gathered from the
 * forward, and the encoder's backward does not read them). */
static int next_unit(const px_zero_t *z, int u, int phase)
{
    int head = px_model_unit_head(&z->gc);
    if (phase == 0)
        return u < head ? u + 1 : -1;
    if (u == head)
        return px_model_unit_layer(&z->gc, z->gc.layers - 1);
    return u > px_model_unit_layer(&z->gc, 0) ? u - 1 : -1;
}

/* ---- stages 2-3: gradient buffers ---- */

/* Waits for the oldest reduce-scatter in flight and takes its slice; site:
 * where (W_RS_*, for the per-wait log). */
static px_status_t rs_complete_oldest(px_zero_t *z, int site)
{
    rs_entry_t *e = &z->rs[z->rs_head];
    int u = e->unit;
    double t0 = px_time_mono_s(), c0 = z->wlog ? cpu_now_s() : 0.0;
    px_status_t status = req_wait(e->req);
    z->times.rs_wait_s += px_time_mono_s() - t0;
    if (z->wlog)
        wait_note(z, site, u, t0, c0);
    e->req = NULL;
    z->rs_head = (z->rs_head + 1) % z->nunits;
    z->rs_count--;
    if (status != PX_OK)
        return coll_fail(z, "reduce-scatter", u, status);
    float *dst = z->shard_grads + z->plan->shard_offset[u];
    float *src_w = z->gbuf[u] + (uint64_t)z->rank * sl(z, u);
    uint64_t n = sl(z, u);
    if (z->accum > 1) /* the buffer is freed below: scale it in place */
        z->k->scale(src_w, 1.0f / (float)z->accum, n);
    z->k->residual_forward(dst, dst, src_w, n); /* dst += slice */
    px_mem_free(z->gbuf[u]);
    z->gbuf[u] = NULL;
    return PX_OK;
}

/* Units other than the embedding whose reduce-scatter is in flight (the
 * head's and the layers'; the embedding's buffer is held to the end). */
static int layers_in_flight(const px_zero_t *z)
{
    int n = 0;
    for (int i = 0; i < z->rs_count; i++)
        n += z->rs[(z->rs_head + i) % z->nunits].unit != PX_MODEL_UNIT_EMBED;
    return n;
}

/* Stage 3's backward keeps at most one of these beyond the unit it
 * computes: a layer's reduce-scatter in flight (its whole gradient buffer)
 * or the next unit's gathered parameters (prefetch), never both, so the
 * state peak is the one of a wait-first schedule (plan.h) while each
 * collective still runs under a layer's compute: the reduce-scatter of
 * unit u+1 under the first part of u's backward, then the gather of u-1
 * (deferred_gather) under the rest. The switch happens at a fixed poke of
 * the unit's backward (DEFER_POKES), never on local completion: every
 * rank must start its collectives in the same order. Layer reduce-scatters
 * allowed in flight when a unit's gradient buffer is taken: */
static int rs_allowed(const px_zero_t *z, int u)
{
    if (z->stage == 2)
        return 1;
    /* stage 3: only while the next unit's gather waits (no prefetched
     * buffer held); without prefetch, none (every wait exposed). Layer 0
     * (no next unit to gather) waits for layer 1's reduce-scatter before
     * taking its gradient buffer: letting it run under layer 0's backward
     * held E + 2M of gradients at the embedding's backward, above plan.h's
     * stage-3 gradient peak (engine_pctl_mem, engine_tp_memory) */
    return z->prefetch && z->prefetch_next >= 0 ? 1 : 0;
}

/* At poke DEFER_POKES of a unit's backward (the progress hook): completes
 * the layer reduce-scatter in flight (taking its slice, freeing its
 * buffer; it has had the unit's first kernels to run), then starts the
 * deferred gather of unit z->prefetch_next in that memory. An error is
 * kept in z->hook_err and returned by the next hook that can return one. */
static void deferred_gather(px_zero_t *z)
{
    px_status_t status = PX_OK;
    int nx = z->prefetch_next;

    z->prefetch_next = -1;
    while (status == PX_OK && layers_in_flight(z) > 0)
        status = rs_complete_oldest(z, W_RS_DEFER);
    if (status == PX_OK && !z->pbuf[nx]) {
        status = gather_start(z, nx);
        z->times.deferred_gathers += status == PX_OK;
    }
    if (status != PX_OK && z->hook_err == PX_OK)
        z->hook_err = status;
}

/* ---- stages 0-1: gradient buckets ---- */

/* Starts bucket b's collective: stage 0 an all-reduce (AVG, in place over
 * its units' range of full_grads), stage 1 its unit's in-place
 * reduce-scatter (one unit per bucket there). */
static px_status_t bucket_start(px_zero_t *z, int b)
{
    if (z->stage == 1) {
        int u = z->bucket_lo[b];
        px_status_t st = rs_start(z, z->full_grads + z->plan->unit_offset[u], u,
                                  &z->bucket_req[b]);
        return st == PX_OK ? PX_OK : coll_fail(z, "reduce-scatter", u, st);
    }
    uint64_t off = z->plan->unit_offset[z->bucket_lo[b]];
    uint64_t end = z->plan->unit_offset[z->bucket_hi[b]] + z->plan->unit_padded[z->bucket_hi[b]];
    px_status_t status = px_allreduce_start(z->comm, z->full_grads + off, z->full_grads + off,
                                            end - off, PX_FLOAT32, PX_AVG, NULL,
                                            &z->bucket_req[b]);
    return status == PX_OK ? PX_OK : coll_fail(z, "bucket all-reduce", z->bucket_hi[b], status);
}

/* Starts, in bucket order, every bucket whose units the last micro-batch's
 * backward has finished (all of them when `all`). Every dp rank runs the
 * same backward, so all start the same all-reduces in the same order. */
static px_status_t buckets_start_ready(px_zero_t *z, int all)
{
    while (z->bstarted < z->nbuckets && (all || z->bucket_left[z->bstarted] == 0))
        PX_CHECK(bucket_start(z, z->bstarted++));
    return PX_OK;
}

/* grads_release of unit u: each unit is released once per micro-batch
 * (whole backward, no pipeline: px_zero_set_buckets' precondition). */
static px_status_t bucket_released(px_zero_t *z, int u)
{
    int b = z->unit_bucket[u];
    if (b < 0 || z->bucket_left[b] == 0)
        return PX_OK;
    z->bucket_left[b]--;
    int before = z->bstarted;
    px_status_t status = buckets_start_ready(z, 0);
    z->buckets_early += z->bstarted - before;
    return status;
}

static void buckets_reset(px_zero_t *z)
{
    z->bstarted = 0;
    for (int b = 0; b < z->nbuckets; b++) {
        z->bucket_left[b] = 0;
        for (int u = z->bucket_lo[b]; u <= z->bucket_hi[b]; u++)
            z->bucket_left[b] += z->accum;
    }
}

/* Waits for every bucket (starting those not started yet); then the first
 * error. */
static px_status_t buckets_wait(px_zero_t *z)
{
    px_status_t status = buckets_start_ready(z, 1), st;
    for (int b = 0; b < z->nbuckets; b++) {
        if (!z->bucket_req[b])
            continue;
        st = px_wait(z->bucket_req[b], -1);
        z->bucket_req[b] = NULL;
        if (st != PX_OK && status == PX_OK)
            status = coll_fail(z, z->stage == 1 ? "reduce-scatter" : "bucket all-reduce",
                               z->bucket_hi[b], st);
    }
    return status;
}

static void buckets_free(px_zero_t *z)
{
    for (int b = 0; z->bucket_req && b < z->nbuckets; b++)
        if (z->bucket_req[b])
            px_request_cancel(z->bucket_req[b]);
    free(z->bucket_lo);
    free(z->bucket_hi);
    free(z->unit_bucket);
    free(z->bucket_left);
    free(z->bucket_req);
    z->bucket_lo = z->bucket_hi = z->unit_bucket = z->bucket_left = NULL;
    z->bucket_req = NULL;
    z->nbuckets = 0;
}

uint64_t px_zero_bucket_bytes(double bucket_mb, uint64_t grad_bytes)
{
    if (bucket_mb > 0.0)
        return (uint64_t)(bucket_mb * 1024.0 * 1024.0);
    /* DDP's cap, the gradients cut into the fewest buckets of at most it,
     * all of one size: ceil(grad / cap) buckets of grad / that (whole units
     * round each up; the last holds the rest) */
    const uint64_t cap = 25u << 20;
    uint64_t n = grad_bytes / cap + (grad_bytes % cap != 0);
    uint64_t b = n > 1 ? grad_bytes / n : grad_bytes;
    return b > 0 ? b : 1;
}

px_status_t px_zero_set_buckets(px_zero_t *z, double bucket_mb)
{
    int nu = z->nunits;
    buckets_free(z);
    if (z->stage > 1 || z->dp == 1 || z->tied_unit >= 0 || nu < 2)
        return PX_OK;
    uint64_t cap = px_zero_bucket_bytes(bucket_mb, z->plan->padded * sizeof(float));
    z->bucket_lo = calloc((size_t)nu, sizeof(int));
    z->bucket_hi = calloc((size_t)nu, sizeof(int));
    z->unit_bucket = calloc((size_t)nu, sizeof(int));
    z->bucket_left = calloc((size_t)nu, sizeof(int));
    z->bucket_req = calloc((size_t)nu, sizeof(px_request_t *));
    if (!z->bucket_lo || !z->bucket_hi || !z->unit_bucket || !z->bucket_left || !z->bucket_req) {
        buckets_free(z);
        return PX_ERR_NO_MEMORY;
    }
    /* from the head (last unit) down to layer 0 (unit 1); unit 0 apart at
     * stage 0 (with the loss, in px_zero_reduce); stage 1: one unit per
     * bucket, the embedding's last */
    uint64_t bytes = 0;
    int n = 0;
    z->unit_bucket[0] = -1;
    if (z->stage == 1)
        cap = 0;
    for (int u = nu - 1; u >= (z->stage == 1 ? 0 : 1); u--) {
        if (bytes == 0)
            z->bucket_hi[n] = u;
        z->bucket_lo[n] = u;
        z->unit_bucket[u] = n;
        bytes += z->plan->unit_padded[u] * sizeof(float);
        if (bytes >= cap || u <= 1) {
            n++;
            bytes = 0;
        }
    }
    z->nbuckets = n;
    buckets_reset(z);
    return PX_OK;
}

int px_zero_nbuckets(const px_zero_t *z) { return z->nbuckets; }
long px_zero_buckets_early(const px_zero_t *z) { return z->buckets_early; }

/* ---- hooks ---- */

static px_status_t h_params_acquire(void *arg, int u, int phase, float **p)
{
    px_zero_t *z = arg;
    if (z->hook_err != PX_OK)
        return z->hook_err;
    if (z->stage < 3) {
        *p = z->full_params + z->plan->unit_offset[u];
        return PX_OK;
    }
    z->phase = phase;
    if (!z->pbuf[u]) {
        /* a deferred prefetch that never started: the reduce-scatter it
         * waited for first (the one started by the unit just done stays) */
        while (phase == 1 && layers_in_flight(z) > 1)
            PX_CHECK(rs_complete_oldest(z, W_RS_PARAMS));
        PX_CHECK(gather_start(z, u));
    }
    int nx = next_unit(z, u, phase);
    z->prefetch_next = -1;
    if (z->prefetch && nx >= 0 && !z->pbuf[nx]) {
        /* backward with a layer's reduce-scatter in flight: the gather
         * waits for it (deferred_gather), so that the reduce-scatter runs
         * under this unit's compute in the buffer the gather would take */
        if (phase == 1 && layers_in_flight(z) > 0) {
            z->prefetch_next = nx;
            z->pokes = 0;
        } else
            PX_CHECK(gather_start(z, nx));
    }
    PX_CHECK(gather_wait(z, u));
    *p = z->pbuf[u];
    return PX_OK;
}

/* Stage 3 with prefetch keeps the last layer's parameters gathered from
 * its forward to its backward (FSDP's reshard_after_forward=False for the
 * unit the backward needs first after the head): no gather for it at the
 * forward->backward turn. The head's backward holds it then anyway (as its
 * prefetch), and the head's forward holds fewer buffers than its backward,
 * so the state peak (plan.h) is unchanged. Freed by its backward's release
 * or, without one (a forward alone), by the next update (kept_free). */
static int keep_gathered(const px_zero_t *z, int u, int phase)
{
    return z->stage == 3 && z->prefetch && phase == 0 && z->dp > 1 &&
           u == px_model_unit_layer(&z->gc, z->gc.layers - 1);
}

/* Frees stage 3's gathered buffers no gather is pending on (the last
 * layer's, kept by keep_gathered): before parameters change. */
static void kept_free(px_zero_t *z)
{
    for (int u = 0; z->stage == 3 && u < z->nunits; u++)
        if (z->pbuf[u] && !z->gathering[u]) {
            px_mem_free(z->pbuf[u]);
            z->pbuf[u] = NULL;
        }
}

static px_status_t h_params_release(void *arg, int u, int phase)
{
    px_zero_t *z = arg;
    if (keep_gathered(z, u, phase))
        return PX_OK;
    if (z->stage == 3 && z->pbuf[u]) {
        px_mem_free(z->pbuf[u]);
        z->pbuf[u] = NULL;
    }
    return PX_OK;
}

static px_status_t h_grads_acquire(void *arg, int u, float **g)
{
    px_zero_t *z = arg;
    if (z->hook_err != PX_OK)
        return z->hook_err;
    if (z->stage < 2) {
        *g = z->full_grads + z->plan->unit_offset[u];
        return PX_OK;
    }
    /* stage 2: one unit's reduce-scatter (the head's or a layer's) runs
     * while the next layer's backward computes; stage 3 too, while the
     * next unit's gather waits for it (rs_allowed; plan.h counts exactly
     * these buffers) */
    while (u != PX_MODEL_UNIT_EMBED && layers_in_flight(z) > rs_allowed(z, u))
        PX_CHECK(rs_complete_oldest(z, W_RS_GRADS));
    z->gbuf[u] = px_mem_calloc(PX_MEM_GRADS, z->plan->unit_padded[u], sizeof(float));
    if (!z->gbuf[u])
        return PX_ERR_NO_MEMORY;
    *g = z->gbuf[u];
    return PX_OK;
}

static px_status_t h_grads_release(void *arg, int u)
{
    px_zero_t *z = arg;
    if (z->hook_err != PX_OK)
        return z->hook_err;
    if (z->stage < 2)
        return z->nbuckets ? bucket_released(z, u) : PX_OK;
    rs_entry_t *e = &z->rs[(z->rs_head + z->rs_count) % z->nunits];
    px_status_t status = rs_start(z, z->gbuf[u], u, &e->req);
    if (status != PX_OK)
        return coll_fail(z, "reduce-scatter", u, status);
    e->unit = u;
    z->rs_count++;
    return PX_OK;
}

/* Between the model's kernels: advance every pending request of the
 * worker (gathers, reduce-scatters, gradient buckets, and the tensor
 * group's), so that they run under the compute (px_progress); their
 * completion and errors are taken by the waits. */
static void h_progress(void *arg)
{
    px_zero_t *z = arg;
    if (z->dp > 1) {
        double t0 = px_time_mono_s();
        px_progress(z->comm);
        z->times.progress_s += px_time_mono_s() - t0; /* (the waits count apart) */
        if (z->prefetch_next >= 0 && ++z->pokes == DEFER_POKES && z->hook_err == PX_OK)
            deferred_gather(z);
    }
}

/* ---- life ---- */

px_status_t px_zero_create(const px_gpt_config_t *gc, const px_plan_t *plan, px_comm_t *comm,
                           const px_kernel_ops_t *ops, int accum, int prefetch, px_zero_t **z_p)
{
    px_zero_t *z = calloc(1, sizeof(*z));
    if (!z)
        return PX_ERR_NO_MEMORY;
    z->gc = *gc;
    z->plan = plan;
    z->comm = comm;
    z->stage = plan->zero;
    z->dp = plan->dp;
    z->rank = comm ? px_comm_rank(comm) : 0;
    z->accum = accum > 0 ? accum : 1;
    z->tied_copy = -1;
    z->tied_unit = -1;
    z->prefetch = prefetch;
    z->prefetch_next = -1;
    z->nunits = plan->nunits;
    z->nsh = z->stage >= 1 ? z->dp : 1;
    z->me = z->stage >= 1 ? z->rank : 0;
    z->k = ops;
    if (z->dp > 1 && (!comm || px_comm_size(comm) != z->dp)) {
        px_error("zero: plan for dp %d but communicator of %d ranks", z->dp,
                 comm ? px_comm_size(comm) : 1);
        free(z);
        return PX_ERR_INVALID_ARGUMENT;
    }
    if (z->nunits != px_gpt_num_units(gc)) {
        px_error("zero: plan has %d units, model %d", z->nunits, px_gpt_num_units(gc));
        free(z);
        return PX_ERR_INVALID_ARGUMENT;
    }
    size_t P = plan->padded, S = plan->shard, nu = (size_t)z->nunits;
    int ok = 1;
    if (z->stage <= 2)
        ok &= !!(z->full_params = px_mem_calloc(PX_MEM_PARAMS, P, sizeof(float)));
    else
        ok &= !!(z->shard_params = px_mem_calloc(PX_MEM_PARAMS, S, sizeof(float)));
    if (z->stage == 0 && z->dp > 1) {
        /* stage 0's buckets are in-place all-reduces over full_grads: where
         * the dp ranks share a node, the gradients live in memory they all
         * map (px_shm_reg.h), so the all-reduce reads the peers' buckets
         * where they lie; else (or PX_SHM_REG=0) plain memory */
        void *g = NULL;
        px_status_t st = px_shm_alloc(comm, (P + 1) * sizeof(float), ops->mem_info == NULL, &g);
        if (st != PX_OK) {
            px_zero_destroy(z);
            return st;
        }
        if (g && !(z->full_grads = px_mem_adopt(PX_MEM_GRADS, g, (P + 1) * sizeof(float),
                                                px_shm_free)))
            px_shm_free(g);
    }
    if (z->stage <= 1) {
        if (!z->full_grads)
            ok &= !!(z->full_grads = px_mem_calloc(PX_MEM_GRADS, P + 1, sizeof(float)));
    } else {
        ok &= !!(z->shard_grads = px_mem_calloc(PX_MEM_GRADS, S, sizeof(float)));
    }
    size_t on = z->stage == 0 ? P : S;
    ok &= !!(z->m = px_mem_calloc(PX_MEM_OPTIM, on, sizeof(float)));
    ok &= !!(z->v = px_mem_calloc(PX_MEM_OPTIM, on, sizeof(float)));
    z->pbuf = calloc(nu, sizeof(float *));
    z->gbuf = calloc(nu, sizeof(float *));
    z->gather_req = calloc(nu, sizeof(px_request_t *));
    z->gathering = calloc(nu, sizeof(int));
    z->rs = calloc(nu, sizeof(rs_entry_t));
    ok &= z->pbuf && z->gbuf && z->gather_req && z->gathering && z->rs;
    if (!ok) {
        px_error("zero: out of memory for stage %d state (%zu elements, shard %zu)", z->stage, P,
                 S);
        px_zero_destroy(z);
        return PX_ERR_NO_MEMORY;
    }
    if (z->stage == 3 && z->dp > 1 && px_env_int("PX_ZERO_WAIT_LOG") > 0 &&
        !(z->wlog = calloc((size_t)WAIT_SITES * nu, sizeof(wait_stat_t)))) {
        px_zero_destroy(z);
        return PX_ERR_NO_MEMORY;
    }
    if (z->stage >= 2 && z->dp > 1) {
        /* fewer, larger shared-memory steps for the reduce-scatters and
         * gathers that run under compute: each step needs every peer
         * inside the transport (a poke) once */
        long slot = px_env_int("PX_ZERO_SHM_SLOT_BYTES");
        px_status_t st = slot > 0 ? px_comm_set_shm_slot(comm, (uint64_t)slot) : PX_OK;
        if (st != PX_OK) {
            px_error("zero: PX_ZERO_SHM_SLOT_BYTES=%ld: %s", slot, px_status_str(st));
            px_zero_destroy(z);
            return st;
        }
        if (slot > 0)
            px_info("zero: data-parallel group's shared-memory steps of %ld bytes "
                    "(PX_ZERO_SHM_SLOT_BYTES)", slot);
    }
    z->hooks = (px_gpt_hooks_t){.arg = z, .params_acquire = h_params_acquire,
                                .params_release = h_params_release,
                                .grads_acquire = h_grads_acquire,
                                .grads_release = h_grads_release, .progress = h_progress};
    *z_p = z;
    return PX_OK;
}

/* Wait log: the step's blocked wall time into steps_wall (a step's waits
 * lie between two px_zero_begin_step calls, the last before the log). */
static void step_note(px_zero_t *z)
{
    if (z->nsteps == z->steps_cap) {
        int cap = z->steps_cap ? 2 * z->steps_cap : 64;
        double *n = realloc(z->steps_wall, (size_t)cap * sizeof(double));
        if (!n)
            return; /* a diagnostic: the step goes unrecorded */
        z->steps_wall = n;
        z->steps_cap = cap;
    }
    z->steps_wall[z->nsteps++] = z->step_wall_s;
    z->step_wall_s = 0.0;
}

static int dcmp(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

/* The per-wait log (PX_ZERO_WAIT_LOG): the gathers px_zero_update started,
 * then one info line per site and unit with waits: their number and the
 * mean wall and CPU ms of one. */
static void wait_log_print(const px_zero_t *z)
{
    px_info("zero wait log: %ld gathers started in the update, for the next step",
            z->update_gathers);
    /* blocked per step, from the third (as bench_zero.py's step times);
     * the trimmed mean drops the n/4 least and the n/4 most blocked steps
     * (the interquartile mean: a robust estimate of the mean on shared
     * cores, where a few steps stall on other load) */
    if (z->nsteps > 2) {
        int n = z->nsteps - 2, cut = n / 4;
        double *v = z->steps_wall + 2, tm = 0.0;
        qsort(v, (size_t)n, sizeof(double), dcmp);
        for (int i = cut; i < n - cut; i++)
            tm += v[i] / (double)(n - 2 * cut);
        px_info("zero wait log: blocked per step (all-gathers + reduce-scatters), steps 3-%d: "
                "min %.2f ms, median %.2f ms, trimmed mean %.2f ms", z->nsteps, 1e3 * v[0],
                1e3 * (n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2])), 1e3 * tm);
    }
    for (int s = 0; s < WAIT_SITES; s++)
        for (int u = 0; u < z->nunits; u++) {
            const wait_stat_t *w = &z->wlog[s * z->nunits + u];
            if (w->n)
                px_info("zero wait log: %-9s unit %2d: %4ld waits, %.3f ms wall, %.3f ms cpu "
                        "each", wait_site_name[s], u, w->n, 1e3 * w->wall_s / (double)w->n,
                        1e3 * w->cpu_s / (double)w->n);
        }
}

void px_zero_destroy(px_zero_t *z)
{
    if (!z)
        return;
    if (z->wlog) {
        if (z->step_open)
            step_note(z); /* the last step's */
        wait_log_print(z);
        free(z->wlog);
        free(z->steps_wall);
    }
    buckets_free(z);
    for (int u = 0; z->gather_req && u < z->nunits; u++)
        if (z->gather_req[u])
            px_request_cancel(z->gather_req[u]);
    for (int i = 0; z->rs && i < z->rs_count; i++) {
        rs_entry_t *e = &z->rs[(z->rs_head + i) % z->nunits];
        if (e->req)
            px_request_cancel(e->req);
    }
    for (int u = 0; z->pbuf && u < z->nunits; u++)
        px_mem_free(z->pbuf[u]);
    for (int u = 0; z->gbuf && u < z->nunits; u++)
        px_mem_free(z->gbuf[u]);
    px_mem_free(z->full_params);
    px_mem_free(z->shard_params);
    px_mem_free(z->full_grads);
    px_mem_free(z->shard_grads);
    px_mem_free(z->m);
    px_mem_free(z->v);
    free(z->pbuf);
    free(z->gbuf);
    free(z->gather_req);
    free(z->gathering);
    free(z->rs);
    free(z);
}

const px_gpt_hooks_t *px_zero_hooks(px_zero_t *z) { return &z->hooks; }
int px_zero_nshards(const px_zero_t *z) { return z->nsh; }

float *px_zero_slice(px_zero_t *z, int which, int u)
{
    const px_plan_t *p = z->plan;
    if (which == 0) {
        if (z->stage == 3)
            return z->shard_params + p->shard_offset[u];
        return z->full_params + p->unit_offset[u] + (uint64_t)z->me * sl(z, u);
    }
    float *b = which == 1 ? z->m : z->v;
    return b + (z->stage == 0 ? p->unit_offset[u] : p->shard_offset[u]);
}

float *px_zero_held(px_zero_t *z, int which, int u, uint64_t *begin_p, uint64_t *count_p)
{
    if (which == 0 && z->stage < 3) {
        *begin_p = 0;
        *count_p = z->plan->unit_padded[u];
        return z->full_params + z->plan->unit_offset[u];
    }
    *begin_p = (uint64_t)z->me * sl(z, u);
    *count_p = sl(z, u);
    return px_zero_slice(z, which, u);
}

static float *grad_slice(px_zero_t *z, int u)
{
    const px_plan_t *p = z->plan;
    if (z->stage >= 2)
        return z->shard_grads + p->shard_offset[u];
    return z->full_grads + p->unit_offset[u] + (uint64_t)z->me * sl(z, u);
}

/* Initial values of elements [b, b + n) of unit u into backend memory dst,
 * generated on the host in chunks (px_gpt_init_unit_range writes host
 * memory). */
static void init_range(px_zero_t *z, uint64_t seed, int u, uint64_t b, uint64_t n, float *dst)
{
    float host[4096];
    for (uint64_t o = 0; o < n; o += 4096) {
        uint64_t c = n - o < 4096 ? n - o : 4096;
        px_gpt_init_unit_range(&z->gc, seed, u, b + o, b + o + c, host);
        z->k->mem_copy_from_host(dst + o, host, c * sizeof(float));
    }
}

void px_zero_init_params(px_zero_t *z, uint64_t seed)
{
    for (int u = 0; u < z->nunits; u++) {
        if (z->stage < 3) /* every rank holds the whole unit */
            init_range(z, seed, u, 0, z->plan->unit_padded[u],
                       z->full_params + z->plan->unit_offset[u]);
        else
            init_range(z, seed, u, (uint64_t)z->me * sl(z, u), sl(z, u), px_zero_slice(z, 0, u));
    }
}

static void buckets_reset(px_zero_t *z);

void px_zero_begin_step(px_zero_t *z)
{
    if (z->wlog && z->step_open)
        step_note(z);
    z->step_open = z->wlog != NULL;
    buckets_reset(z);
    if (z->full_grads)
        z->k->mem_set(z->full_grads, 0, (z->plan->padded + 1) * sizeof(float));
    if (z->shard_grads)
        z->k->mem_set(z->shard_grads, 0, z->plan->shard * sizeof(float));
}

px_status_t px_zero_end_micro(px_zero_t *z)
{
    z->prefetch_next = -1;
    if (z->hook_err != PX_OK)
        return z->hook_err;
    while (z->rs_count)
        PX_CHECK(rs_complete_oldest(z, W_RS_END));
    return PX_OK;
}

px_status_t px_zero_reduce(px_zero_t *z, float local_loss, float *loss_p, float *norm_p)
{
    px_status_t status;
    const px_plan_t *p = z->plan;
    double t0 = px_time_mono_s();
    float loss = local_loss;

    /* the backward's kernels still queued on a device finish here, so what
     * the collectives' figures count below is theirs alone (a no-op on the
     * CPU; the reduction's first device-buffer access would wait anyway) */
    z->k->synchronize();
    z->times.device_wait_s += px_time_mono_s() - t0;
    t0 = px_time_mono_s();

    if (z->stage == 0) {
        z->k->mem_copy_from_host(z->full_grads + p->padded, &local_loss, sizeof(float));
        /* a tied unit (unit 0) on its own: its copies on other ranks go
         * through the same all-reduce (count, algorithm, data), so they
         * stay bitwise equal whatever the rest of each buffer holds */
        uint64_t skip = z->tied_unit == 0 ? p->unit_padded[0] : 0;
        if (z->dp > 1 && skip) {
            status = px_allreduce(z->comm, z->full_grads, z->full_grads, skip, PX_FLOAT32,
                                  PX_AVG, -1);
            if (status != PX_OK)
                return coll_fail(z, "all-reduce", 0, status);
        }
        if (z->dp > 1 && z->nbuckets) {
            /* the embedding and the loss (2 requests, in flight at once
             * with the last buckets), then the buckets started during
             * backward: only the last ones can still be running */
            float *lossp = z->full_grads + p->padded;
            px_request_t *er = NULL, *lr = NULL;
            status = px_allreduce_start(z->comm, z->full_grads, z->full_grads, p->unit_padded[0],
                                        PX_FLOAT32, PX_AVG, NULL, &er);
            if (status == PX_OK)
                status = px_allreduce_start(z->comm, lossp, lossp, 1, PX_FLOAT32, PX_AVG, NULL,
                                            &lr);
            px_status_t bst = buckets_wait(z);
            if (status == PX_OK)
                status = bst;
            if (er) {
                px_status_t st = status == PX_OK ? px_wait(er, -1) : PX_OK;
                if (status != PX_OK)
                    px_request_cancel(er);
                status = status == PX_OK ? st : status;
            }
            if (lr) {
                px_status_t st = status == PX_OK ? px_wait(lr, -1) : PX_OK;
                if (status != PX_OK)
                    px_request_cancel(lr);
                status = status == PX_OK ? st : status;
            }
            if (status != PX_OK)
                return coll_fail(z, "all-reduce", -1, status);
        } else if (z->dp > 1) {
            status = px_allreduce(z->comm, z->full_grads + skip, z->full_grads + skip,
                                  p->padded + 1 - skip, PX_FLOAT32, PX_AVG, -1);
            if (status != PX_OK)
                return coll_fail(z, "all-reduce", -1, status);
        }
        z->times.comm_other_s += px_time_mono_s() - t0;
        z->k->mem_copy_to_host(&loss, z->full_grads + p->padded, sizeof(float));
        if (z->accum > 1)
            z->k->scale(z->full_grads, 1.0f / (float)z->accum, p->padded);
        double ss = 0.0;
        if (z->gc.tp > 1 || z->tied_copy >= 0)
            for (int u = 0; u < z->nunits; u++)
                ss += unit_sumsq(z, z->full_grads + p->unit_offset[u], u, 0, p->unit_padded[u]);
        else
            ss = z->k->sumsq(z->full_grads, p->padded);
        t0 = px_time_mono_s();
        status = model_sumsq(z, &ss);
        z->times.comm_other_s += px_time_mono_s() - t0;
        if (status != PX_OK)
            return status;
        *norm_p = (float)sqrt(ss);
        *loss_p = loss;
        return PX_OK;
    }
    if (z->stage == 1) {
        status = z->nbuckets ? buckets_wait(z) : all_units(z, rs_start, z->full_grads);
        z->times.rs_wait_s += px_time_mono_s() - t0;
        if (status != PX_OK)
            return coll_fail(z, "reduce-scatter", -1, status);
        if (z->accum > 1)
            for (int u = 0; u < z->nunits; u++)
                z->k->scale(grad_slice(z, u), 1.0f / (float)z->accum, sl(z, u));
    }
    double ss = 0.0;
    for (int u = 0; u < z->nunits; u++)
        ss += unit_sumsq(z, grad_slice(z, u), u, (uint64_t)z->me * sl(z, u),
                         (uint64_t)(z->me + 1) * sl(z, u));
    float pair[2] = {(float)ss, local_loss};
    t0 = px_time_mono_s();
    if (z->dp > 1) {
        status = px_allreduce(z->comm, pair, pair, 2, PX_FLOAT32, PX_SUM, -1);
        if (status != PX_OK)
            return coll_fail(z, "norm all-reduce", -1, status);
    }
    ss = pair[0];
    status = model_sumsq(z, &ss);
    z->times.comm_other_s += px_time_mono_s() - t0;
    if (status != PX_OK)
        return status;
    *norm_p = sqrtf((float)ss);
    *loss_p = pair[1] / (float)z->dp;
    return PX_OK;
}

void px_zero_set_model_group(px_zero_t *z, px_comm_t *mp) { z->mp = mp; }

void px_zero_set_tied(px_zero_t *z, int u, int is_copy)
{
    z->tied_unit = u;
    z->tied_copy = is_copy ? u : -1;
}

float *px_zero_unit_grads(px_zero_t *z, int u, uint64_t *count_p)
{
    if (z->stage >= 2 || u < 0 || u >= z->nunits)
        return NULL;
    *count_p = z->plan->unit_padded[u];
    return z->full_grads + z->plan->unit_offset[u];
}

const float *px_zero_full_grads(px_zero_t *z) { return z->stage == 0 ? z->full_grads : NULL; }

px_status_t px_zero_sync_params(px_zero_t *z)
{
    if (z->stage == 0 || z->stage == 3 || z->dp == 1)
        return PX_OK;
    double t0 = px_time_mono_s();
    px_status_t status = all_units(z, ag_start, z->full_params);
    z->times.comm_other_s += px_time_mono_s() - t0;
    return status == PX_OK ? PX_OK : coll_fail(z, "parameter all-gather", -1, status);
}

/* The unit after which px_zero_update starts the next step's first
 * forward gathers (units 0 .. it, in the forward's order; -1 none): stage 3
 * with prefetch, dp > 1, a step following, and this rank holding the
 * embedding and the first layer (a whole model or a first pipeline stage). */
static int update_prefetch_upto(const px_zero_t *z, int more)
{
    int l0 = px_model_unit_layer(&z->gc, 0);
    if (z->stage != 3 || !z->prefetch || z->dp < 2 || !more || l0 != 1 ||
        !z->plan->unit_size[0] || !z->plan->unit_size[l0])
        return -1;
    return l0;
}

px_status_t px_zero_update(px_zero_t *z, float coef, const px_adamw_t *hp, int more)
{
    int upto = update_prefetch_upto(z, more);
    kept_free(z);
    for (int u = 0; u < z->nunits; u++) {
        if (upto >= 0 && u > upto) /* the gathers below move under this unit's update */
            px_progress(z->comm);
        px_gpt_unit_tensor_t t[PX_MODEL_MAX_UNIT_TENSORS];
        int nt = px_gpt_unit_tensors(&z->gc, u, t);
        uint64_t b = (uint64_t)z->me * sl(z, u), e = b + sl(z, u);
        float *P = px_zero_slice(z, 0, u), *G = grad_slice(z, u);
        float *M = px_zero_slice(z, 1, u), *V = px_zero_slice(z, 2, u);
        for (int j = 0; j < nt; j++) {
            uint64_t lo = t[j].unit_offset > b ? t[j].unit_offset : b;
            uint64_t hi = t[j].unit_offset + t[j].size < e ? t[j].unit_offset + t[j].size : e;
            if (lo >= hi)
                continue;
            uint64_t o = lo - b;
            /* the clip coefficient rides in AdamW's one pass over the
             * gradient: no pass of its own over the slices */
            px_adamw_step(z->k, hp, t[j].decay, coef, P + o, G + o, M + o, V + o, hi - lo);
        }
        /* the next forward's first units, updated: their gathers start
         * (every rank the same ones, in the same order); the forward's
         * params_acquire finds them in flight and waits */
        if (u == upto)
            for (int f = 0; f <= upto; f++, z->update_gathers++)
                PX_CHECK(gather_start(z, f));
    }
    return px_zero_sync_params(z);
}

/* The whole units of parameters (grads 0) or gradients (grads 1) in
 * canonical layout into host dst: straight from the full buffer where this
 * rank holds one, else every dp rank's slices all-gathered into a
 * temporary full buffer first (collective over the dp group). */
static void to_canonical(px_zero_t *z, const float *units, float *dst)
{
    unsigned char skip[z->nunits]; /* nunits = layers + 2, bounded by jobcfg */
    for (int u = 0; u < z->nunits; u++)
        skip[u] = u == z->tied_copy ||
                  (z->plan->unit_size[u] == 0 && px_gpt_unit_size(&z->gc, u) > 0);
    px_gpt_units_to_canonical_ex(&z->gc, z->k, units, z->plan->unit_offset, skip, dst);
}

static px_status_t gather_canonical(px_zero_t *z, int grads, float *dst)
{
    if (!grads && z->stage < 3) {
        to_canonical(z, z->full_params, dst);
        return PX_OK;
    }
    if (grads && z->stage == 0) {
        to_canonical(z, z->full_grads, dst);
        return PX_OK;
    }
    float *full = px_mem_calloc(PX_MEM_WORK, z->plan->padded, sizeof(float));
    px_status_t status = PX_OK;
    if (!full)
        return PX_ERR_NO_MEMORY;
    for (int u = 0; u < z->nunits && status == PX_OK; u++) {
        float *b = full + z->plan->unit_offset[u];
        px_request_t *req;
        z->k->mem_copy(b + (uint64_t)z->rank * sl(z, u),
                       grads ? grad_slice(z, u) : px_zero_slice(z, 0, u),
                       sl(z, u) * sizeof(float));
        status = ag_start(z, b, u, &req);
        if (status == PX_OK)
            status = req_wait(req);
    }
    if (status == PX_OK)
        to_canonical(z, full, dst);
    else
        coll_fail(z, grads ? "gradient all-gather" : "export all-gather", -1, status);
    px_mem_free(full);
    return status;
}

px_status_t px_zero_gather_canonical(px_zero_t *z, float *dst)
{
    return gather_canonical(z, 0, dst);
}

px_status_t px_zero_gather_grads_canonical(px_zero_t *z, float *dst)
{
    return gather_canonical(z, 1, dst);
}

/* dst[0, n) = 1.0f (backend memory), through a host staging block */
static void fill_ones(px_zero_t *z, float *dst, uint64_t n)
{
    float host[1024];
    for (int i = 0; i < 1024; i++)
        host[i] = 1.0f;
    for (uint64_t o = 0; o < n; o += 1024)
        z->k->mem_copy_from_host(dst + o, host, (n - o < 1024 ? n - o : 1024) * sizeof(float));
}

/* Elements [b, b + n) of unit u that are real (not padding to a multiple
 * of dp) set to 1 at dst (which holds element b). */
static void ones_in_range(px_zero_t *z, float *dst, int u, uint64_t b, uint64_t n)
{
    uint64_t size = z->plan->unit_size[u];
    if (b < size)
        fill_ones(z, dst, size - b < n ? size - b : n);
}

px_status_t px_zero_test_norm_ones(px_zero_t *z, float *norm_p)
{
    float loss;
    px_zero_begin_step(z);
    for (int u = 0; u < z->nunits; u++) {
        uint64_t b, n;
        float *p = px_zero_held(z, 0, u, &b, &n);
        ones_in_range(z, p, u, b, n);
        if (z->stage < 2)
            ones_in_range(z, z->full_grads + z->plan->unit_offset[u], u, 0,
                          z->plan->unit_padded[u]);
        else
            ones_in_range(z, grad_slice(z, u), u, (uint64_t)z->me * sl(z, u), sl(z, u));
    }
    return px_zero_reduce(z, 0.0f, &loss, norm_p);
}

uint64_t px_zero_replicated_digest(px_zero_t *z)
{
    uint64_t h = 0xcbf29ce484222325ull; /* FNV-1a, 64 bit */
    float host[1024];
    for (int u = 0; u < z->nunits; u++) {
        px_gpt_unit_tensor_t t[PX_MODEL_MAX_UNIT_TENSORS];
        int nt = px_gpt_unit_tensors(&z->gc, u, t);
        uint64_t b, n;
        const float *p = px_zero_held(z, 0, u, &b, &n);
        for (int j = 0; j < nt; j++) {
            uint64_t lo = t[j].unit_offset > b ? t[j].unit_offset : b;
            uint64_t hi = t[j].unit_offset + t[j].size < b + n ? t[j].unit_offset + t[j].size
                                                                : b + n;
            if (t[j].split != PX_MODEL_SPLIT_REPLICATED)
                continue;
            for (uint64_t o = lo; o < hi; o += 1024) {
                uint64_t c = hi - o < 1024 ? hi - o : 1024;
                z->k->mem_copy_to_host(host, p + (o - b), c * sizeof(float));
                z->k->synchronize();
                const unsigned char *by = (const unsigned char *)host;
                for (uint64_t i = 0; i < c * sizeof(float); i++)
                    h = (h ^ by[i]) * 0x100000001b3ull;
            }
        }
    }
    return h;
}

uint64_t px_zero_unit_digest(px_zero_t *z, int u)
{
    uint64_t h = 0xcbf29ce484222325ull, b, n;
    float host[1024];
    const float *p = px_zero_held(z, 0, u, &b, &n);
    for (uint64_t o = 0; o < n; o += 1024) {
        uint64_t c = n - o < 1024 ? n - o : 1024;
        z->k->mem_copy_to_host(host, p + o, c * sizeof(float));
        z->k->synchronize();
        const unsigned char *by = (const unsigned char *)host;
        for (uint64_t i = 0; i < c * sizeof(float); i++)
            h = (h ^ by[i]) * 0x100000001b3ull;
    }
    return h;
}

void px_zero_times(const px_zero_t *z, px_zero_times_t *out) { *out = z->times; }

const px_kernel_ops_t *px_zero_ops(const px_zero_t *z) { return z->k; }
