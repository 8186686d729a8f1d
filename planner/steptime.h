/* steptime.h: the predicted time of one training step of a job on a
 * described cluster (cluster.h), by cost, and its memory per rank.
 *
 * The model walks what one rank of each pipeline stage does in a step and
 * prices every piece with the device's rates or the link's alpha-beta cost
 * (Hockney: alpha + bytes / beta per message); steptime.c has one function
 * per cost with what it counts. In outline:
 *   - compute: per layer and micro-batch the GEMMs' FLOPs at the GEMM rate
 *     of the precision, the attention's matmuls at the attention rate
 *     (fused) or as GEMMs (unfused), the elementwise ops' bytes at the
 *     memory bandwidth, and a fixed cost per kernel; backward twice the
 *     forward's FLOPs; recomputation adds forwards;
 *   - tensor / sequence parallelism: the activations' all-reduces (or
 *     all-gathers and reduce-scatters) of every layer, on the tensor
 *     group's link, not overlapped (engine/tp.c waits for each);
 *   - context parallelism: ring attention's k|v blocks passed cp - 1 times
 *     a layer, overlapped with the block computed meanwhile;
 *   - experts: the all-to-all-v dispatch and combine of each MoE layer;
 *   - ZeRO-3: each unit's all-gather before its forward and backward, the
 *     next prefetched under the current unit's compute; ZeRO-2/3: each
 *     unit's reduce-scatter under the next unit's backward;
 *   - data parallelism: the gradients' all-reduce (ZeRO 0) or reduce-
 *     scatter plus the parameters' all-gather (ZeRO 1), by the algorithm
 *     px_coll.c's auto choice runs for the size (recursive doubling,
 *     Rabenseifner, ring), overlapped with the last micro-batch's backward
 *     (buckets, engine/zero.h);
 *   - the pipeline: the schedule's own action lists (pipesched.h) run as a
 *     discrete-event simulation with each stage's forward and backward
 *     times and the point-to-point transfers between stages: its makespan
 *     gives the bubble and the stages' imbalance;
 *   - the optimizer: AdamW's passes over the rank's shard at memory speed;
 *   - the step's fixed cost (the engine's bookkeeping; measured);
 *   - a shared host (cpu devices, cluster.h px_host_spec_t): every piece
 *     above is priced for one rank computing alone; while k ranks of a
 *     host compute at once on its c cores (threads_per_rank each), each
 *     runs max(1, k x threads / c) times slower (the kernel divides the
 *     cores fairly; ranks waiting for a message sleep, transport/
 *     px_request.c, and leave theirs to the others); and no transfer hides
 *     under compute there: its copies run on the same cores, advanced only
 *     between kernels (the ZeRO gathers and scatters, the dp reduction and
 *     the cp ring count whole).
 * The memory per rank is px_plan_job's (jobplan.h), the engine's own.
 *
 * Engines differ in what they recompute, the bytes of their activations
 * and messages and the fusion of their elementwise ops; px_step_engine_t
 * names those, with profiles for parallax itself and for the published
 * runs the model is checked against (tests/planner/test_steptime.c).
 * Pure arithmetic; any thread. */
#ifndef PX_STEPTIME_H
#define PX_STEPTIME_H

#include "cluster.h"
#include "jobcfg.h"
#include "px_status.h"

/* What the model's layer looks like beyond jobcfg's GPT dims (all 0: the
 * GPT parallax trains: MLP 4C with GELU, every head its own k and v). */
typedef struct px_step_arch {
    int ffn;      /* MLP hidden width; 0: 4 x dim */
    int glu;      /* 1: gated MLP (SwiGLU: three matrices, Llama) */
    int kv_heads; /* grouped-query attention's k/v heads; 0: heads */
} px_step_arch_t;

/* How a training engine runs, where engines differ. */
typedef struct px_step_engine {
    const char *name;
    double recompute;        /* activation recomputation: the fraction of
                                each layer's forward (compute, kernels and
                                collectives) run again in its backward: 0
                                none, 1 full (Megatron's), 0.5 selective
                                (torchtitan's "op" policy: every other
                                matmul and the elementwise ops between) */
    double act_bytes;        /* bytes of an activation element in the
                                elementwise ops' traffic and in tp / pp / cp /
                                all-to-all messages */
    double grad_bytes;       /* bytes of a gradient element in the dp
                                reduction and ZeRO reduce-scatters */
    double param_bytes;      /* bytes of a parameter element in ZeRO gathers */
    double optim_bytes;      /* bytes the optimizer step moves per parameter
                                of its shard */
    double elementwise;      /* the elementwise traffic relative to one read
                                and one write per op (1: unfused; < 1: fused) */
    int fused_attention;     /* 1: a fused (flash) attention: the causal half
                                of the matmuls at the attention rate, no
                                T x T traffic; 0: full T x T GEMMs and softmax */
    int dp_overlap;          /* 1: the dp reduction runs under the last
                                micro-batch's backward; 0: after the step's
                                backward */
    double bucket_bytes;     /* the dp reduction's bucket (bytes of gradients;
                                the last bucket's reduction is exposed); 0:
                                each unit its own bucket */
    int kernels_per_layer;   /* kernels a layer's forward + backward launches */
    /* what the engine can run (a layout search keeps to it) */
    int max_zero;            /* the highest ZeRO stage (0: none) */
    int sequence_parallel;   /* 1: Megatron's sequence parallelism */
    int context_parallel;    /* 1: ring attention (cp > 1) */
    unsigned schedules;      /* bit k: pipeline schedule k (pipesched.h) */
} px_step_engine_t;

/* parallax's engine as it runs on device kind `dev` (px_plan_dev_t) at
 * `precision` (jobcfg.h), every layout jobcfg.h validates: no recomputation; fp32 activations and
 * collectives (4 bytes; bf16 only rounds GEMM operands); fp32 AdamW
 * (reads p, g, m, v and writes p, m, v: 28 bytes a parameter); unfused
 * elementwise ops; the fused attention on cuda, the unfused (T x T) on cpu
 * and sim; buckets overlapping backward, as few as PyTorch DDP's 25 MiB cap
 * allows (engine/zero.h px_zero_bucket_bytes: a model of up to 25 MiB of
 * gradients reduces in one bucket, after its backward). */
void px_step_engine_parallax(int dev, int precision, px_step_engine_t *e);

/* Megatron-LM as Narayanan et al. 2021 ran it (arXiv 2104.04473,
 * sections 4-5): full activation recomputation (1), fp16 activations and
 * gradients (2 bytes), fused elementwise kernels (bias-GeLU, bias-dropout-
 * add, scale-mask-softmax: 0.5), the unfused T x T attention matmuls, the
 * data-parallel all-reduce after the pipeline flush (no overlap); it ran
 * tp, pp (1F1B, interleaved) and dp only: no ZeRO (the distributed
 * optimizer came in 2022), no sequence or context parallelism. */
void px_step_engine_megatron(px_step_engine_t *e);

/* torchtitan (FSDP2, bf16 mixed precision; benchmarks/
 * llama3_h100_202412_torchtitan.md: selective activation checkpointing,
 * torchtitan's "op" policy, 0.5): bf16 activations and all-gathers, fp32
 * reduce-scatters, flash attention (SDPA), overlapped reductions, eager
 * elementwise ops (3): the eager RMSNorm upcasts to fp32 and runs x.float,
 * pow, mean, rsqrt, mul, type_as and the weight's mul (about 9 passes, 4
 * of them 4-byte, where the model counts one 2-byte read and write), and
 * the rotary embedding's complex multiply likewise. FSDP (ZeRO 3), tp with
 * sequence parallelism, cp, 1F1B / GPipe / interleaved. */
void px_step_engine_torchtitan(px_step_engine_t *e);

/* llm.c (train_gpt2.cu): bf16 activations and gradients, fused kernels
 * (0.5), cuDNN flash attention, ZeRO-1 with the reduction after backward,
 * no recomputation; dp and ZeRO 0-1 only. */
void px_step_engine_llmc(px_step_engine_t *e);

/* The costs a step is split into (each in seconds of the step). */
typedef enum px_step_cost_kind {
    PX_STEP_COMPUTE = 0, /* GEMMs, attention and elementwise ops */
    PX_STEP_LAUNCH,      /* kernels' fixed costs */
    PX_STEP_TP,          /* tensor / sequence-parallel collectives */
    PX_STEP_CP,          /* ring attention's exposed transfers */
    PX_STEP_A2A,         /* experts' all-to-all-v */
    PX_STEP_ZERO,        /* ZeRO-3 gathers and ZeRO-2/3 reduce-scatters, exposed */
    PX_STEP_BUBBLE,      /* pipeline idle: bubble, imbalance, p2p waits */
    PX_STEP_DP,          /* data-parallel gradient reduction, exposed */
    PX_STEP_OPTIM,       /* the optimizer step */
    PX_STEP_FIXED,       /* the device's fixed cost of a step (cluster.h step_s) */
    PX_STEP_HOST,        /* ranks waiting for a share of their host's cores
                            (cluster.h px_host_spec_t; 0 on GPUs) */
    PX_STEP_NCOSTS
} px_step_cost_kind_t;

/* "compute", "kernel launches", "tp collectives", ... (static). */
const char *px_step_cost_name(int kind);

typedef struct px_step_time {
    double step_s;              /* one optimizer step, seconds */
    double tokens_per_s;        /* batch x seq / step_s */
    double model_flops;         /* per step: tokens x
                                   px_step_model_flops_per_token */
    double mfu;                 /* model_flops / (step_s x world x the
                                   precision's GEMM peak) */
    double cost[PX_STEP_NCOSTS];/* seconds of step_s by kind (they sum to it) */
    int top[3];                 /* the three largest cost kinds, largest first */
    double mem_bytes;           /* per rank, the largest stage's (px_plan_job total) */
    int fits;                   /* mem_bytes <= the device's memory */
    int world;
} px_step_time_t;

/* Model FLOPs of one trained token of `cfg` with model `arch` (NULL:
 * parallax's GPT), forward and backward, as llm.c's gpt2_estimate_mfu
 * counts them (Kaplan et al. 2020, section 2.1; PaLM, Chowdhery et al.
 * 2022, appendix B): 6 x N + 6 x L x C x T, N the parameters the token
 * multiplies by (every layer's attention and MLP matrices, an MoE layer's
 * top_k experts and router, the output head over the padded vocabulary:
 * no embedding lookups, norms or biases), L layers, C = dim, T = seq. The
 * attention term is PaLM's 12 x L x H x Q x T (H x Q = C) halved for the
 * causal mask, which llm.c's and the fused kernels skip. Recomputation is
 * not counted (model FLOPs, not hardware FLOPs). Pure. */
double px_step_model_flops_per_token(const px_job_config_t *cfg, const px_step_arch_t *arch);

/* Predicts one step of `cfg` (which must pass px_job_config_check with
 * PX_JOBCFG_LAYOUT_ONLY) with model `arch` (NULL: parallax's GPT) run by
 * `eng` (NULL: px_step_engine_parallax for dev and cfg->precision) on
 * cluster `cl`, its ranks placed by px_layout_place, memory planned for
 * device kind `dev` (px_plan_dev_t). Fills *time_p (only on success).
 * Errors (errbuf names the values): PX_ERR_INVALID_ARGUMENT when the layout needs more devices
 * than the cluster has or does not place, PX_ERR_NO_MEMORY. */
px_status_t px_step_predict(const px_job_config_t *cfg, const px_step_arch_t *arch,
                            const px_step_engine_t *eng, const px_cluster_t *cl, int dev,
                            px_step_time_t *time_p, char *errbuf, size_t errlen);

#endif
