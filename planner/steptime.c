/* steptime.c: the step-time model (steptime.h).
 *
 * Sizes: N tokens of a micro-batch on one rank (b sequences of Tl = seq/cp
 * tokens), C dim, F the MLP width, Ckv the k/v width (C x kv_heads /
 * heads), NH heads, Vp padded vocab; tp-split quantities divide by tp.
 * Every cost function returns seconds; bytes are bytes, FLOPs are FLOPs.
 * One call is pure arithmetic plus px_plan_job and px_layout_place; any
 * thread. */
#include "steptime.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "jobplan.h"
#include "layout.h"
#include "model.h"
#include "pipesched.h"
#include "px_log.h"

/* px_coll.c's all-reduce choice: recursive doubling up to 32 KiB,
 * Rabenseifner up to 1 MiB (not with 2 ranks), the ring above. */
#define RD_MAX_BYTES 32768.0
#define RABENSEIFNER_MAX_BYTES 1048576.0
#define ALLTOALL_LINEAR_MAX_RANKS 8

typedef struct {
    double c[PX_STEP_NCOSTS];
} costs_t;

static double sum_costs(const costs_t *k)
{
    double s = 0;
    for (int i = 0; i < PX_STEP_NCOSTS; i++)
        s += k->c[i];
    return s;
}

static void add_costs(costs_t *a, const costs_t *b, double times)
{
    for (int i = 0; i < PX_STEP_NCOSTS; i++)
        a->c[i] += b->c[i] * times;
}

/* What one prediction needs at hand. */
typedef struct {
    const px_job_config_t *cfg;
    px_step_arch_t arch;
    const px_step_engine_t *e;
    const px_cluster_t *cl;
    int tp, cp, pp, dp, ep, sp, v;
    double b, Tl, T, N, C, F, Ckv, NH, Vp;
    double gemm_rate, attn_rate;
    double hide; /* 1: a transfer started before a compute runs under it; 0
                    on a shared host (cpu devices: its copies run on the
                    cores that compute, advanced only between kernels,
                    transport/px_request.c), where nothing hides */
    const px_link_spec_t *tp_link, *cp_link, *pp_link, *dp_link, *ep_link, *edp_link;
} ctx_t;

static const char *const cost_names[PX_STEP_NCOSTS] = {
    "compute", "kernel launches", "tp collectives", "cp ring", "moe all-to-all",
    "zero gathers/scatters", "pipeline bubble", "dp reduction", "optimizer",
    "fixed step cost", "host cpu sharing"};

const char *px_step_cost_name(int kind)
{
    return kind >= 0 && kind < PX_STEP_NCOSTS ? cost_names[kind] : "?";
}

/* ------------------------------------------------------------ engines */

void px_step_engine_parallax(int dev, int precision, px_step_engine_t *e)
{
    (void)precision;
    *e = (px_step_engine_t){.name = "parallax", .recompute = 0,
                            .act_bytes = 4, .grad_bytes = 4, .param_bytes = 4,
                            .optim_bytes = 28, .elementwise = 1,
                            .fused_attention = dev == PX_PLAN_DEV_CUDA, .dp_overlap = 1,
                            .bucket_bytes = 25.0 * 1024 * 1024, .kernels_per_layer = 60, .max_zero = 3, .sequence_parallel = 1,
                            .context_parallel = 1, .schedules = (1u << PX_PIPE_NKINDS) - 1};
}

void px_step_engine_megatron(px_step_engine_t *e)
{
    /* Adam's fp32 master, m and v plus the fp16 weight: read 4 + 4 + 4 + 2
     * (grad), write 4 + 4 + 4 + 2 */
    *e = (px_step_engine_t){.name = "megatron-lm 2021", .recompute = 1,
                            .act_bytes = 2, .grad_bytes = 2, .param_bytes = 2,
                            .optim_bytes = 28, .elementwise = 0.5, .fused_attention = 0,
                            .dp_overlap = 0, .kernels_per_layer = 40, .max_zero = 0,
                            .schedules = 1u << PX_PIPE_1F1B | 1u << PX_PIPE_INTERLEAVED};
}

void px_step_engine_torchtitan(px_step_engine_t *e)
{
    *e = (px_step_engine_t){.name = "torchtitan", .recompute = 0.5,
                            .act_bytes = 2, .grad_bytes = 4, .param_bytes = 2,
                            .optim_bytes = 28, .elementwise = 3, .fused_attention = 1,
                            .dp_overlap = 1, .kernels_per_layer = 60, .max_zero = 3,
                            .sequence_parallel = 1, .context_parallel = 1,
                            .schedules = 1u << PX_PIPE_1F1B | 1u << PX_PIPE_GPIPE |
                                         1u << PX_PIPE_INTERLEAVED};
}

void px_step_engine_llmc(px_step_engine_t *e)
{
    *e = (px_step_engine_t){.name = "llm.c", .recompute = 0,
                            .act_bytes = 2, .grad_bytes = 2, .param_bytes = 2,
                            .optim_bytes = 28, .elementwise = 0.5, .fused_attention = 1,
                            .dp_overlap = 0, .kernels_per_layer = 30, .max_zero = 1};
}

/* ------------------------------------------------------- collectives */

/* The bandwidth a collective reaches on link k, bytes/s. */
static double beta(const px_link_spec_t *k)
{
    return k->bw * k->efficiency;
}

/* One point-to-point message of `bytes`: alpha + bytes / beta. */
static double cost_p2p(double bytes, const px_link_spec_t *k)
{
    return bytes > 0 ? k->latency + bytes / beta(k) : 0;
}

/* An all-reduce of `bytes` (each rank's buffer) over n ranks as px_coll.c
 * runs it: recursive doubling (log2 n steps of the whole buffer), up to
 * 32 KiB; Rabenseifner (reduce-scatter by halving, all-gather by doubling:
 * 2 log2 n messages, 2 (n-1)/n of the buffer) up to 1 MiB with more than 2
 * ranks; else the pipelined ring (2 (n-1) steps of 1/n of the buffer).
 * (Thakur, Rabenseifner and Gropp, "Optimization of Collective
 * Communication Operations in MPICH", 2005.) */
static double cost_allreduce(double bytes, int n, const px_link_spec_t *k)
{
    if (n <= 1 || bytes <= 0)
        return 0;
    double lg = ceil(log2((double)n)), a = k->latency, bb = beta(k);
    if (bytes <= RD_MAX_BYTES)
        return lg * (a + bytes / bb);
    if (bytes <= RABENSEIFNER_MAX_BYTES && n > 2)
        return 2 * lg * a + 2.0 * (n - 1) / n * bytes / bb;
    return 2.0 * (n - 1) * a + 2.0 * (n - 1) / n * bytes / bb;
}

/* A ring all-gather (or reduce-scatter) whose whole (gathered) buffer is
 * `bytes`: n - 1 steps, each 1/n of it. */
static double cost_ring_half(double bytes, int n, const px_link_spec_t *k)
{
    if (n <= 1 || bytes <= 0)
        return 0;
    return (n - 1) * k->latency + (double)(n - 1) / n * bytes / beta(k);
}

/* An all-to-all(-v) where each rank sends `bytes` in all, evenly over the
 * n ranks (the part for itself stays): up to 8 ranks every message posted
 * at once (one alpha), above pairwise exchange (n - 1 steps). */
static double cost_alltoall(double bytes, int n, const px_link_spec_t *k)
{
    if (n <= 1 || bytes <= 0)
        return 0;
    double wire = (double)(n - 1) / n * bytes / beta(k);
    return (n <= ALLTOALL_LINEAR_MAX_RANKS ? k->latency : (n - 1) * k->latency) + wire;
}

/* ------------------------------------------------------------ compute */

/* Time of GEMM FLOPs, fused-attention FLOPs and elementwise bytes at the
 * device's rates: GEMMs at efficiency x the peak, the fused attention at
 * its (achieved) rate, memory traffic at the bandwidth. */
static double cost_kernels(const ctx_t *x, double gemm_flops, double attn_flops, double bytes)
{
    const px_device_spec_t *d = &x->cl->dev;
    return gemm_flops / (x->gemm_rate * d->efficiency) + attn_flops / x->attn_rate +
           bytes / d->mem_bw;
}

/* The forward of one transformer layer on one rank for one micro-batch,
 * what it computes (PX_STEP_COMPUTE):
 *   GEMMs 2N (C (C + 2 Ckv) + C^2) / tp for qkv and the projection, and the
 *   MLP's 2N (2 or 3) C F / tp (a MoE layer: the router 2 N C E and its
 *   experts' MLP over the N K rows routed to this rank, at most the
 *   capacity factor's share);
 *   attention: QK^T and AV, 4 b Tl T C / tp (each local query against every
 *   key of its sequence; cp > 1 included), the causal half at the attention
 *   rate when fused, else all of it as GEMMs plus the T x T scores written,
 *   softmaxed (read, write) and read: 4 passes of b NH/tp Tl T elements;
 *   elementwise: two LayerNorms and two residual adds over R rows (N, or
 *   N/tp with sequence parallelism) of C (10 C elements moved a token), the
 *   biases and the activation over the tp-local widths (2 (5C + F) / tp + 2F
 *   / tp, 3F / tp gated), times the engine's fusion factor. */
static double layer_forward_compute(const ctx_t *x, int moe)
{
    const px_job_config_t *c = x->cfg;
    double N = x->N, C = x->C, F = x->F, tp = x->tp, ab = x->e->act_bytes;
    double gemm = 0, attn_fused = 0, bytes = 0;
    double att = 4 * x->b * x->Tl * x->T * C / tp;

    if (x->e->fused_attention)
        attn_fused = 0.5 * att;
    else {
        gemm += att;
        bytes += 4 * x->b * x->NH / tp * x->Tl * x->T * ab;
    }
    gemm += 2 * N * (C * (C + 2 * x->Ckv) + C * C) / tp;
    double mats = x->arch.glu ? 3 : 2;
    if (moe) {
        double cf = c->dropless ? 1 : fmin(1.0, c->capacity_factor);
        double rows = N * c->top_k * cf;
        gemm += 2 * N * C * c->experts + 2 * rows * mats * C * F;
    } else
        gemm += 2 * N * mats * C * F / tp;
    double R = x->sp ? N / tp : N;
    bytes += x->e->elementwise * ab *
             (10 * C * R + N * (2 * (5 * C + F) + (x->arch.glu ? 3 : 2) * F) / tp);
    return cost_kernels(x, gemm, attn_fused, bytes);
}

/* The tensor group's collectives of one layer's forward (PX_STEP_TP):
 * Megatron's f/g pair twice (after the attention's projection and the
 * MLP): two all-reduces of the N x C activation (act_bytes each), or with
 * sequence parallelism an all-gather and a reduce-scatter each (the same
 * volume, Korthikanti et al. 2022, section 4.2.2). The backward runs as
 * many. engine/tp.c waits for each, so none is overlapped. */
static double layer_tp(const ctx_t *x)
{
    if (x->tp <= 1)
        return 0;
    double bytes = x->N * x->C * x->e->act_bytes;
    if (x->sp)
        return 2 * (cost_ring_half(bytes, x->tp, x->tp_link) * 2);
    return 2 * cost_allreduce(bytes, x->tp, x->tp_link);
}

/* Ring attention's exposed transfer time in one layer's forward
 * (PX_STEP_CP, engine/ring_attn.h): cp - 1 steps, each passing the k|v
 * block of b Tl tokens (2 Ckv / tp wide) to the next rank while the block
 * in hand is computed (the causal half of 1/cp of the layer's attention);
 * a step costs the longer of the two, so only the transfer's excess
 * counts. `bwd`: the backward passes k|v and their gradients (twice the
 * bytes) against twice the compute. */
static double layer_cp(const ctx_t *x, int bwd)
{
    if (x->cp <= 1)
        return 0;
    double msg = x->b * x->Tl * 2 * x->Ckv / x->tp * x->e->act_bytes * (bwd ? 2 : 1);
    double att = 4 * x->b * x->Tl * x->T * x->C / x->tp * 0.5 / x->cp * (bwd ? 2 : 1);
    double block = cost_kernels(x, x->e->fused_attention ? 0 : att,
                                x->e->fused_attention ? att : 0, 0);
    return (x->cp - 1) * fmax(0, cost_p2p(msg, x->cp_link) - x->hide * block);
}

/* The experts' all-to-all-v of one MoE layer's forward (PX_STEP_A2A,
 * engine/moe.c): the dispatch and the combine, each sending this rank's
 * N top_k routed rows of C (at most the capacity factor's share kept) over
 * the ep group; the backward sends as much again. */
static double layer_a2a(const ctx_t *x)
{
    const px_job_config_t *c = x->cfg;
    if (x->ep <= 1)
        return 0;
    double cf = c->dropless ? 1 : fmin(1.0, c->capacity_factor);
    double bytes = x->N * c->top_k * cf * x->C * x->e->act_bytes;
    return 2 * cost_alltoall(bytes, x->ep, x->ep_link);
}

/* One layer's forward (bwd 0) or backward (bwd 1) for a micro-batch, by
 * cost: the backward computes twice the forward's FLOPs and bytes (input
 * and weight gradients), plus the recomputed share of the forward
 * (engine->recompute); kernels: a third of kernels_per_layer in the forward,
 * two thirds in the backward (plus the recomputed forward's). */
static void layer_costs(const ctx_t *x, int moe, int bwd, costs_t *out)
{
    const px_step_engine_t *e = x->e;
    double launch = x->cl->dev.launch_s * e->kernels_per_layer / 3.0;
    memset(out, 0, sizeof(*out));
    double f = layer_forward_compute(x, moe);
    if (!bwd) {
        out->c[PX_STEP_COMPUTE] = f;
        out->c[PX_STEP_LAUNCH] = launch;
        out->c[PX_STEP_TP] = layer_tp(x);
        out->c[PX_STEP_CP] = layer_cp(x, 0);
        out->c[PX_STEP_A2A] = moe ? layer_a2a(x) : 0;
        return;
    }
    out->c[PX_STEP_COMPUTE] = 2 * f;
    out->c[PX_STEP_LAUNCH] = 2 * launch;
    out->c[PX_STEP_TP] = layer_tp(x);
    out->c[PX_STEP_CP] = layer_cp(x, 1);
    out->c[PX_STEP_A2A] = moe ? layer_a2a(x) : 0;
    if (e->recompute > 0) {
        double r = e->recompute;
        out->c[PX_STEP_COMPUTE] += r * f;
        out->c[PX_STEP_LAUNCH] += r * launch;
        out->c[PX_STEP_TP] += r * layer_tp(x);
        out->c[PX_STEP_CP] += r * layer_cp(x, 0);
        out->c[PX_STEP_A2A] += moe ? r * layer_a2a(x) : 0;
    }
}

/* The embedding (first virtual stage) and the tied head with its
 * cross-entropy (last), forward or backward, for a micro-batch
 * (PX_STEP_COMPUTE): the head's GEMM 2 N C Vp / tp (backward twice), the
 * logits' softmax and loss over N x Vp/tp (3 passes of 4-byte logits; the
 * backward 2), the embedding's lookup and its gradient's scatter (N x C,
 * read and write), and their vocab-parallel statistics' all-reduces
 * (PX_STEP_TP, two of N doubles). */
static void ends_costs(const ctx_t *x, int first, int last, int bwd, costs_t *out)
{
    memset(out, 0, sizeof(*out));
    double N = x->N, C = x->C, Vl = x->Vp / x->tp;
    double gemm = 0, bytes = 0;
    if (first)
        bytes += 2 * N * C * x->e->act_bytes;
    if (last) {
        gemm += (bwd ? 4 : 2) * N * C * Vl;
        bytes += (bwd ? 2 : 3) * N * Vl * 4 + 10 * C * N * x->e->act_bytes;
        if (!bwd && x->tp > 1)
            out->c[PX_STEP_TP] = 2 * cost_allreduce(8 * N, x->tp, x->tp_link);
    }
    out->c[PX_STEP_COMPUTE] = cost_kernels(x, gemm, 0, bytes);
    out->c[PX_STEP_LAUNCH] = (first + last) * 5 * x->cl->dev.launch_s * (bwd ? 2 : 1);
}

/* ------------------------------------------------- one virtual stage */

/* A virtual stage's per-micro-batch forward and backward: its layers
 * (layer indices [l0, l0 + nl)) and, on the first / last virtual stage,
 * the embedding / head; for ZeRO-3 each unit's gather (param_bytes x its
 * tp-local elements, ring all-gather over the gradient group) prefetched
 * under the previous unit's compute, and for ZeRO 2 / 3 each unit's
 * gradient reduce-scatter under the next unit's backward (PX_STEP_ZERO,
 * only what sticks out). `units`: the stage's unit sizes (elements,
 * px_plan_job's). */
static void vstage_costs(const ctx_t *x, int l0, int nl, int first, int last,
                         const uint64_t *units, costs_t *fwd, costs_t *bwd)
{
    const px_job_config_t *c = x->cfg;
    px_model_moe_t mm = {.layers = c->layers, .dim = c->dim, .experts = c->experts,
                         .moe_every = c->moe_every};
    costs_t lf, lb;
    const int ng = x->dp * x->cp;
    double prev_f = 0, prev_b = 0, zf = 0, zb = 0;

    ends_costs(x, first, last, 0, fwd);
    ends_costs(x, first, last, 1, bwd);
    for (int l = l0; l < l0 + nl; l++) {
        int moe = c->experts > 0 && px_model_moe_is_layer(&mm, l);
        layer_costs(x, moe, 0, &lf);
        layer_costs(x, moe, 1, &lb);
        add_costs(fwd, &lf, 1);
        add_costs(bwd, &lb, 1);
        if (c->zero >= 2 && ng > 1 && units) {
            double elems = (double)units[1 + l];
            if (c->zero == 3) {
                double g = cost_ring_half(elems * x->e->param_bytes, ng, x->dp_link);
                zf += fmax(0, g - prev_f);
                zb += fmax(0, g - prev_b);
            }
            zb += fmax(0, cost_ring_half(elems * x->e->grad_bytes, ng, x->dp_link) -
                              x->hide * sum_costs(&lb));
            prev_f = x->hide * sum_costs(&lf);
            prev_b = x->hide * sum_costs(&lb);
        }
    }
    if (c->zero >= 2 && ng > 1 && units && first) {
        /* the embedding: gathered first (nothing to hide under) and its
         * gradient reduce-scattered last */
        double elems = (double)units[0];
        if (c->zero == 3) {
            zf += cost_ring_half(elems * x->e->param_bytes, ng, x->dp_link);
            zb += cost_ring_half(elems * x->e->param_bytes, ng, x->dp_link);
        }
        zb += cost_ring_half(elems * x->e->grad_bytes, ng, x->dp_link);
    }
    fwd->c[PX_STEP_ZERO] += zf;
    bwd->c[PX_STEP_ZERO] += zb;
}

/* ---------------------------------------------------- data parallelism */

/* The gradient reduction of one rank of a stage after its last backward
 * (PX_STEP_DP), as engine/zero.c runs it: ZeRO 0 an all-reduce of the
 * stage's gradients (grad_bytes a parameter) over the gradient group (dp x
 * cp), ZeRO 1 a reduce-scatter and, after the update, the parameters'
 * all-gather; the experts' gradients all-reduced over the expert-data
 * group; the loss and norm's 2-float all-reduce. With dp_overlap the
 * reduction (not the all-gather) runs under the last micro-batch's
 * backward, `window` seconds, except the last bucket's share (a bucket
 * a unit, or engine->bucket_bytes of gradients each). ZeRO 2 / 3
 * reduced during backward (vstage_costs). Returns the exposed seconds. */
static double dp_exposed(const ctx_t *x, double dense, double moe, int nunits, double window)
{
    const px_job_config_t *c = x->cfg;
    const int ng = x->dp * x->cp;
    double red = 0, gather = 0;

    if (c->zero == 0)
        red = cost_allreduce(dense * x->e->grad_bytes, ng, x->dp_link);
    else if (c->zero == 1) {
        red = cost_ring_half(dense * x->e->grad_bytes, ng, x->dp_link);
        gather = cost_ring_half(dense * x->e->param_bytes, ng, x->dp_link);
    }
    if (moe > 0 && c->experts)
        red += cost_allreduce(moe * x->e->grad_bytes, ng / x->ep, x->edp_link);
    double exposed = red;
    if (x->e->bucket_bytes > 0)
        nunits = (int)ceil(dense * x->e->grad_bytes / x->e->bucket_bytes);
    if (x->e->dp_overlap && nunits > 0)
        exposed = fmax(red / nunits, red - x->hide * window);
    return exposed + gather + cost_allreduce(8, ng, x->dp_link);
}

/* The optimizer step of one rank (PX_STEP_OPTIM): AdamW over its shard
 * (all its parameters for ZeRO 0), optim_bytes moved a parameter, at the
 * memory bandwidth, plus the gradient norm's read (4 bytes). */
static double optim_cost(const ctx_t *x, double dense, double moe)
{
    double shard = x->cfg->zero >= 1 ? dense / (x->dp * x->cp) : dense;
    return (shard + moe) * (x->e->optim_bytes + 4) / x->cl->dev.mem_bw;
}

/* ----------------------------------------------------- the pipeline */

/* Runs the schedule's lists (pipesched.h) as a discrete-event simulation:
 * (busy_from, busy_to get each action's interval, *nbusy_p counting them:
 * room for every action of every list)
 * each rank does its compute actions in list order, one at a time; a
 * forward of virtual stage j > 0 starts once the activation from j - 1 has
 * arrived (its forward's end plus the transfer `p2p`), a backward of j <
 * last once the gradient from j + 1 has; zb1's backward is its input pass
 * (half of it) and W the weight pass (the other half). Fills end_p[p] (each
 * rank's last action's end) and returns the makespan, < 0 if the lists
 * stall (a schedule px_pipe_schedule_check rejects). */
static double simulate(const px_pipe_schedule_t *sc, const double *F, const double *B,
                       double p2p, double *end_p, double *busy_from, double *busy_to,
                       int *nbusy_p)
{
    const int p = sc->p, m = sc->m, nv = sc->p * sc->v;
    const int split = px_pipe_schedule_split(sc);
    double *fdone = malloc(sizeof(double) * (size_t)(nv * m));
    double *bdone = malloc(sizeof(double) * (size_t)(nv * m));
    int *pos = calloc((size_t)p, sizeof(int));
    double makespan = -1;

    if (!fdone || !bdone || !pos)
        goto out;
    for (int i = 0; i < nv * m; i++)
        fdone[i] = bdone[i] = -1;
    for (int s = 0; s < p; s++)
        end_p[s] = 0;
    for (int progress = 1; progress;) {
        progress = 0;
        for (int s = 0; s < p; s++) {
            const px_pipe_list_t *L = &sc->stage[s];
            while (pos[s] < L->n) {
                const px_pipe_action_t *a = &L->a[pos[s]];
                int j = px_pipe_virtual_stage(sc, s, a->chunk);
                double start = end_p[s];
                if (a->op == PX_PIPE_FWD) {
                    if (j > 0) {
                        if (fdone[(j - 1) * m + a->micro] < 0)
                            break;
                        start = fmax(start, fdone[(j - 1) * m + a->micro] + p2p);
                    }
                    end_p[s] = fdone[j * m + a->micro] = start + F[j];
                    busy_from[*nbusy_p] = start, busy_to[(*nbusy_p)++] = end_p[s];
                } else if (a->op == PX_PIPE_BWD) {
                    if (j < nv - 1) {
                        if (bdone[(j + 1) * m + a->micro] < 0)
                            break;
                        start = fmax(start, bdone[(j + 1) * m + a->micro] + p2p);
                    }
                    end_p[s] = bdone[j * m + a->micro] = start + B[j] * (split ? 0.5 : 1);
                    busy_from[*nbusy_p] = start, busy_to[(*nbusy_p)++] = end_p[s];
                } else if (a->op == PX_PIPE_WGT) {
                    end_p[s] = start + B[j] * 0.5;
                    busy_from[*nbusy_p] = start, busy_to[(*nbusy_p)++] = end_p[s];
                }
                pos[s]++;
                progress = 1;
            }
        }
    }
    makespan = 0;
    for (int s = 0; s < p; s++) {
        if (pos[s] < sc->stage[s].n) {
            makespan = -1;
            break;
        }
        makespan = fmax(makespan, end_p[s]);
    }
out:
    free(fdone);
    free(bdone);
    free(pos);
    return makespan;
}

/* ------------------------------------------------------- shared host */

/* How much slower a rank computes while `k` ranks of its host compute at
 * once: they divide the host's cores (each wants threads_per_rank), so
 * max(1, k x threads / cores); 1 where devices do not share (cores 0). */
static double host_slowdown(const px_host_spec_t *h, double k)
{
    if (h->cores <= 0 || k <= 0)
        return 1;
    return fmax(1, k * h->threads / h->cores);
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

/* The pipeline round's makespan on a shared host: the simulated round
 * (one rank alone on its cores) cut at every action's start and end; a
 * piece during which k stages compute takes max(1, k x `per_stage` x
 * threads / cores) times as long (`per_stage`: the host's ranks of one
 * stage, the dp / tp / cp replicas that compute in step with it). Pieces
 * with no stage computing (transfers) keep their length. A first-order
 * model: stretching a piece does not move the schedule's dependencies. */
static double shared_makespan(const px_host_spec_t *h, double per_stage, const double *from,
                              const double *to, int n, double makespan)
{
    double *cut = malloc(sizeof(double) * (size_t)(2 * n + 2));
    if (!cut)
        return makespan * host_slowdown(h, per_stage * n); /* the worst case */
    int nc = 0;
    cut[nc++] = 0;
    cut[nc++] = makespan;
    for (int i = 0; i < n; i++)
        cut[nc++] = from[i], cut[nc++] = to[i];
    qsort(cut, (size_t)nc, sizeof(double), cmp_double);
    double t = 0;
    for (int i = 0; i + 1 < nc; i++) {
        double a = cut[i], b = cut[i + 1], mid = 0.5 * (a + b);
        int k = 0;
        if (b <= a)
            continue;
        for (int j = 0; j < n; j++)
            k += from[j] <= mid && mid < to[j];
        t += (b - a) * host_slowdown(h, k * per_stage);
    }
    free(cut);
    return t;
}

/* The most ranks of the job on one host (nodes i .. i + host.nodes - 1
 * share one), from the placement. */
static int host_ranks(const px_cluster_t *cl, const int *node_of_rank, int world)
{
    int per_host = cl->host.nodes >= 1 ? (int)cl->host.nodes : 1, best = 0;
    for (int h = 0; h * per_host < cl->nodes; h++) {
        int k = 0;
        for (int r = 0; r < world; r++)
            k += node_of_rank[r] / per_host == h;
        best = k > best ? k : best;
    }
    return best;
}

/* ------------------------------------------------------------ predict */

/* Is every member of rank 0's group of `kind` on rank 0's node? */
static int group_one_node(const px_layout_t *l, px_group_kind_t kind, const int *node_of_rank,
                          int *members)
{
    int n = px_layout_group(l, kind, 0, members, NULL, NULL);
    for (int i = 1; i < n; i++)
        if (node_of_rank[members[i]] != node_of_rank[members[0]])
            return 0;
    return 1;
}

/* Parameters a token meets (for model FLOPs): the dense model's, with a
 * MoE layer's MLP counted top_k times (its router too), k/v at Ckv. */
/* The parameters one token's forward multiplies by: every layer's
 * attention and MLP matrices (an MoE layer its top_k experts and its
 * router) and the output head (padded vocabulary); no embedding lookups,
 * norms or biases. */
static double active_params(const px_job_config_t *c, const px_step_arch_t *arch)
{
    px_model_moe_t mm = {.layers = c->layers, .dim = c->dim, .experts = c->experts,
                         .moe_every = c->moe_every};
    double C = c->dim, F = arch->ffn > 0 ? arch->ffn : 4.0 * c->dim, mats = arch->glu ? 3 : 2;
    double Ckv = arch->kv_heads > 0 ? C * arch->kv_heads / c->heads : C;
    double attn = C * (C + 2 * Ckv) + C * C, mlp = mats * C * F;
    double nmoe = c->experts ? px_model_moe_num_layers(&mm) : 0;
    return (c->layers - nmoe) * (attn + mlp) + nmoe * (attn + c->top_k * mlp + C * c->experts) +
           (double)px_job_config_padded_vocab(c->vocab) * C;
}

double px_step_model_flops_per_token(const px_job_config_t *cfg, const px_step_arch_t *arch)
{
    static const px_step_arch_t gpt = {0};
    return 6 * active_params(cfg, arch ? arch : &gpt) + 6.0 * cfg->layers * cfg->dim * cfg->seq;
}

static void top3(px_step_time_t *o)
{
    int used[PX_STEP_NCOSTS] = {0};
    for (int t = 0; t < 3; t++) {
        int best = -1;
        for (int k = 0; k < PX_STEP_NCOSTS; k++)
            if (!used[k] && (best < 0 || o->cost[k] > o->cost[best]))
                best = k;
        used[best] = 1;
        o->top[t] = best;
    }
}

px_status_t px_step_predict(const px_job_config_t *cfg, const px_step_arch_t *arch,
                            const px_step_engine_t *eng, const px_cluster_t *cl, int dev,
                            px_step_time_t *time_p, char *errbuf, size_t errlen)
{
    const px_layout_t *l = &cfg->layout;
    const int world = px_layout_world(l);
    px_step_engine_t own;
    ctx_t x = {.cfg = cfg, .cl = cl};
    px_status_t status = PX_ERR_NO_MEMORY;
    int *node_free = NULL, *node_of_rank = NULL, *members = NULL, *sl = NULL;
    double *F = NULL, *B = NULL, *ends = NULL, *bfrom = NULL, *bto = NULL;
    costs_t *fc = NULL, *bc = NULL;
    px_job_plan_t *jps = NULL;
    px_pipe_schedule_t *sc = NULL;
    px_step_time_t o;

    memset(&o, 0, sizeof(o));
    if (world > cl->nodes * cl->per_node) {
        snprintf(errbuf, errlen, "world=%d needs %d devices; cluster %s has %d (%d x %d)", world,
                 world, cl->name, cl->nodes * cl->per_node, cl->nodes, cl->per_node);
        return PX_ERR_INVALID_ARGUMENT;
    }
    if (!eng) {
        px_step_engine_parallax(dev, cfg->precision, &own);
        eng = &own;
    }
    x.e = eng;
    if (arch)
        x.arch = *arch;
    x.tp = l->tp, x.cp = l->cp, x.pp = l->pp, x.dp = l->dp, x.ep = l->ep;
    x.sp = cfg->sequence_parallel && l->tp > 1;
    x.v = cfg->schedule == PX_PIPE_INTERLEAVED && l->pp > 1 ? cfg->virtual_stages : 1;
    x.C = cfg->dim, x.NH = cfg->heads, x.T = cfg->seq, x.Tl = (double)cfg->seq / l->cp;
    x.F = x.arch.ffn > 0 ? x.arch.ffn : 4.0 * cfg->dim;
    x.Ckv = x.arch.kv_heads > 0 ? x.C * x.arch.kv_heads / cfg->heads : x.C;
    x.Vp = px_job_config_padded_vocab(cfg->vocab);
    x.gemm_rate = cfg->precision == PX_PRECISION_BF16 ? cl->dev.gemm_bf16 : cl->dev.gemm_fp32;
    x.attn_rate = cfg->precision == PX_PRECISION_BF16 ? cl->dev.attention : cl->dev.gemm_fp32;
    x.hide = cl->host.cores > 0 ? 0 : 1;

    /* placement: which groups share a node */
    node_free = malloc(sizeof(int) * (size_t)cl->nodes);
    node_of_rank = malloc(sizeof(int) * (size_t)world);
    members = malloc(sizeof(int) * (size_t)world);
    if (!node_free || !node_of_rank || !members)
        goto out;
    for (int n = 0; n < cl->nodes; n++)
        node_free[n] = cl->per_node;
    if (px_layout_place(l, node_free, cl->nodes, node_of_rank, errbuf, errlen) != PX_OK) {
        status = PX_ERR_INVALID_ARGUMENT;
        goto out;
    }
    x.tp_link = px_cluster_link(cl, group_one_node(l, PX_GROUP_TP, node_of_rank, members));
    x.cp_link = px_cluster_link(cl, group_one_node(l, PX_GROUP_CP, node_of_rank, members));
    x.pp_link = px_cluster_link(cl, group_one_node(l, PX_GROUP_PP, node_of_rank, members));
    x.dp_link = px_cluster_link(cl, group_one_node(l, PX_GROUP_DPCP, node_of_rank, members));
    x.ep_link = px_cluster_link(cl, group_one_node(l, PX_GROUP_EP, node_of_rank, members));
    x.edp_link = px_cluster_link(cl, group_one_node(l, PX_GROUP_EDP, node_of_rank, members));

    /* every stage's plan: its memory, micro-batch and units */
    jps = calloc((size_t)l->pp, sizeof(*jps));
    if (!jps)
        goto out;
    for (int s = 0; s < l->pp; s++)
        if ((status = px_plan_job(cfg, dev, s, &jps[s])) != PX_OK) {
            snprintf(errbuf, errlen, "the memory plan of stage %d failed", s);
            goto out;
        }
    status = PX_ERR_NO_MEMORY;
    x.b = jps[0].micro_batch;
    x.N = x.b * x.Tl;

    /* per virtual stage: layers and per-micro-batch costs */
    const int nv = l->pp * x.v;
    sl = malloc(sizeof(int) * (size_t)nv);
    F = malloc(sizeof(double) * (size_t)nv);
    B = malloc(sizeof(double) * (size_t)nv);
    ends = malloc(sizeof(double) * (size_t)l->pp);
    fc = calloc((size_t)nv, sizeof(costs_t));
    bc = calloc((size_t)nv, sizeof(costs_t));
    if (!sl || !F || !B || !ends || !fc || !bc)
        goto out;
    if (px_pipe_stage_layers(cfg->layers, nv, x.v > 1 ? NULL : cfg->stage_layers, sl, errbuf,
                             errlen) != PX_OK) {
        status = PX_ERR_INVALID_ARGUMENT;
        goto out;
    }
    for (int j = 0, l0 = 0; j < nv; l0 += sl[j], j++) {
        vstage_costs(&x, l0, sl[j], j == 0, j == nv - 1, jps[j % l->pp].units, &fc[j], &bc[j]);
        F[j] = sum_costs(&fc[j]);
        B[j] = sum_costs(&bc[j]);
    }

    /* the pipeline round: the schedule's lists simulated (pp 1: one
     * micro-batch's forward and backward) */
    const int M = l->pp > 1 ? cfg->micro_batches : 1;
    const int hr = host_ranks(cl, node_of_rank, world);
    double makespan, shared;
    if (l->pp > 1) {
        double act = x.N * x.C * eng->act_bytes / (x.sp ? x.tp : 1);
        if ((status = px_pipe_schedule_create_v(cfg->schedule, l->pp, M, x.v, &sc)) != PX_OK) {
            snprintf(errbuf, errlen, "schedule %s with pp=%d, %d micro-batches, v=%d",
                     px_pipe_schedule_name(cfg->schedule), l->pp, M, x.v);
            goto out;
        }
        status = PX_ERR_NO_MEMORY;
        int nact = 0, nbusy = 0;
        for (int s = 0; s < l->pp; s++)
            nact += sc->stage[s].n;
        bfrom = malloc(sizeof(double) * (size_t)(nact + 1));
        bto = malloc(sizeof(double) * (size_t)(nact + 1));
        if (!bfrom || !bto)
            goto out;
        makespan = simulate(sc, F, B, cost_p2p(act, x.pp_link), ends, bfrom, bto, &nbusy);
        if (makespan < 0) {
            snprintf(errbuf, errlen, "schedule %s with pp=%d, %d micro-batches stalls",
                     px_pipe_schedule_name(cfg->schedule), l->pp, M);
            status = PX_ERR_INVALID_ARGUMENT;
            goto out;
        }
        shared = shared_makespan(&cl->host, (double)hr / l->pp, bfrom, bto, nbusy, makespan);
    } else {
        makespan = F[0] + B[0];
        ends[0] = makespan;
        shared = makespan * host_slowdown(&cl->host, hr);
    }

    /* the busiest rank's work by kind; what is left of the makespan is idle */
    int crit = 0;
    double busy_max = -1;
    costs_t crit_c;
    for (int s = 0; s < l->pp; s++) {
        costs_t k;
        memset(&k, 0, sizeof(k));
        for (int c = 0; c < x.v; c++) {
            add_costs(&k, &fc[c * l->pp + s], M);
            add_costs(&k, &bc[c * l->pp + s], M);
        }
        double busy = sum_costs(&k);
        if (busy > busy_max) {
            busy_max = busy;
            crit = s;
            crit_c = k;
        }
    }
    (void)crit;
    const int accum = cfg->grad_accum > 0 ? cfg->grad_accum : 1;
    for (int k = 0; k < PX_STEP_NCOSTS; k++)
        o.cost[k] = crit_c.c[k] * accum;
    o.cost[PX_STEP_BUBBLE] = fmax(0, makespan - busy_max) * accum;

    /* the reduction and the optimizer after the last round: the stage whose
     * reduction ends last */
    double tail = 0, dp_part = 0, opt_part = 0;
    for (int s = 0; s < l->pp; s++) {
        double dense = (double)jps[s].dense_params, moe = (double)jps[s].moe_params;
        double window = 0;
        int nunits = 0;
        for (int c = 0; c < x.v; c++)
            window += bc[c * l->pp + s].c[PX_STEP_COMPUTE];
        for (int u = 0; u < jps[s].nunits; u++)
            nunits += jps[s].units[u] > 0;
        double dpx = dp_exposed(&x, dense, moe, nunits, window);
        double opt = optim_cost(&x, dense, moe);
        double t = ends[s] - makespan + dpx + opt;
        if (s == 0 || t > tail) {
            tail = t;
            dp_part = fmax(0, ends[s] - makespan + dpx);
            opt_part = opt;
        }
    }
    o.cost[PX_STEP_DP] = dp_part;
    o.cost[PX_STEP_OPTIM] = opt_part;
    o.cost[PX_STEP_FIXED] = cl->dev.step_s;
    /* a shared host: the round stretched where its ranks compute at once,
     * the reduction, the optimizer and the fixed cost (all ranks at once)
     * by the whole host's slowdown */
    o.cost[PX_STEP_HOST] = fmax(0, shared - makespan) * accum +
                           (dp_part + opt_part + cl->dev.step_s) *
                               (host_slowdown(&cl->host, hr) - 1);
    for (int k = 0; k < PX_STEP_NCOSTS; k++)
        o.step_s += o.cost[k];

    const double tokens = (double)cfg->batch * cfg->seq;
    o.world = world;
    o.tokens_per_s = tokens / o.step_s;
    o.model_flops = tokens * px_step_model_flops_per_token(cfg, &x.arch);
    o.mfu = o.model_flops / (o.step_s * world * x.gemm_rate);
    top3(&o);
    for (int s = 0; s < l->pp; s++)
        o.mem_bytes = fmax(o.mem_bytes, jps[s].total);
    o.fits = o.mem_bytes <= cl->dev.mem_bytes;
    *time_p = o;
    status = PX_OK;
out:
    if (jps)
        for (int s = 0; s < l->pp; s++)
            px_job_plan_free(&jps[s]);
    free(jps);
    px_pipe_schedule_destroy(sc);
    free(node_free);
    free(node_of_rank);
    free(members);
    free(sl);
    free(F);
    free(B);
    free(ends);
    free(bfrom);
    free(bto);
    free(fc);
    free(bc);
    return status;
}
