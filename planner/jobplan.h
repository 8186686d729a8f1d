/* jobplan.h: the one recipe from a job's configuration to its memory plan
 * per rank, shared by the engine (which lays its buffers out by it), the
 * daemon's submit-time memory check (daemon/memfit.c) and `pctl plan`.
 *
 * From a px_job_config_t (jobcfg.h) and the kind of device the ranks run
 * on, px_plan_job derives what each of them used to write out for itself:
 *   - the dense units one rank holds: one tensor rank's units
 *     (px_plan_gpt_units_tp), and of those the pipeline stage's only
 *     (px_pipe_stage_units; the other units are kept with size 0, so unit
 *     indices stay the model's);
 *   - the ZeRO plan of those units over dp x cp ranks (the cp ranks of a dp
 *     index replicate the model, so ZeRO shards over both, as the engine
 *     does), fp32 AdamW state (the engine keeps fp32 master weights, grads
 *     and moments whatever --precision says: px_plan_precision_fp32);
 *   - the mixture of experts' routers and this rank's experts of the
 *     stage's MoE layers, held whole on every rank (not ZeRO-sharded:
 *     px_model_moe_stage_params, px_plan_add_unsharded);
 *   - the activation buffers of the local micro-batch (batch / (dp x
 *     grad_accum x micro_batches) sequences of seq / cp tokens) as the
 *     engine allocates them for the device kind and precision
 *     (px_plan_gpt_activations_dev), times the slots the pipeline schedule
 *     keeps in flight (px_pipe_schedule_chunk_slots per chunk);
 *   - the split backward's weight stash (zb1), the MoE layers' activations
 *     (px_plan_moe_activation_bytes), the bf16 GEMMs' scratch
 *     (px_plan_bf16_gemm_scratch_bytes, --precision bf16), and on request
 *     the CUDA IPC scratch of a node (px_plan_job_add_ipc).
 * Every byte figure is in BYTES, every count in ELEMENTS. Pure arithmetic
 * (reads the PX_BF16_ACTS knob, as the engine's op table does); any
 * thread. */
#ifndef PX_JOBPLAN_H
#define PX_JOBPLAN_H

#include <stdint.h>

#include "jobcfg.h"
#include "plan.h"

/* The device kind a rank runs on: it decides the attention state (the CUDA
 * fused attention keeps the log-sum-exp only), where the bf16 scratch lives
 * and its size (bf16 copies on CUDA, doubles on cpu and sim), and whether
 * CUDA IPC scratch exists (cuda only; sim stages through host memory). */
typedef enum { PX_PLAN_DEV_CPU = 0, PX_PLAN_DEV_CUDA, PX_PLAN_DEV_SIM } px_plan_dev_t;

/* "cpu" / "cpu:N", "cuda" / "cuda:K", "sim" / "sim:N" -> the kind; NULL or
 * "" -> cpu; -1 for anything else. */
int px_plan_dev_parse(const char *name);
/* "cpu", "cuda", "sim" ("?" otherwise); a static string. */
const char *px_plan_dev_name(int dev);

typedef struct px_job_plan {
    int device;            /* px_plan_dev_t */
    int stage, stages;     /* the planned pipeline stage of `stages` (pp) */
    int chunks;            /* model chunks per stage (virtual stages; 1 unless
                              interleaved) */
    int layers;            /* the stage's layers (all of them without pp) */
    int micro_batch;       /* Bm: sequences of a micro-batch on one rank */
    int seq_local;         /* Tl: tokens of each sequence on one rank (seq / cp) */
    int slots;             /* activation slots the stage holds, over its chunks
                              (1 without pp) */
    int moe_layers;        /* the stage's MoE layers */
    int nunits;            /* layers + 2 (embedding, layers, head) */
    uint64_t *units;       /* [nunits] this rank's unit sizes, elements (tp-local,
                              0 for units of other stages); owned */
    uint64_t dense_params; /* their sum, elements */
    uint64_t moe_params;   /* routers + this rank's experts of the stage's MoE
                              layers, elements, not sharded */
    px_plan_t *state;      /* the ZeRO plan (params, grads, optimizer; owned):
                              the engine lays its flat buffers out by it */
    px_plan_gpt_acts_t acts; /* one slot's activation table (the first chunk's) */
    uint64_t act_bytes;    /* the activation buffers of every slot: what the
                              engine reports as its activations plan
                              (px_gpt_activation_bytes / px_pipe_activation_bytes) */
    uint64_t stash_bytes;  /* zb1's weight-pass stash, 9C floats a token and a
                              layer per slot (gpt.c px_gpt_set_split_backward) */
    uint64_t moe_act_bytes;  /* the MoE layers' activations and work buffers */
    uint64_t bf16_scratch_bytes; /* --precision bf16: the GEMM operands' scratch */
    uint64_t ipc_bytes;    /* CUDA IPC scratch (0 until px_plan_job_add_ipc) */
    int ipc_comms;         /* its communicators */
    double total;          /* state peak + every byte figure above: what one
                              rank needs at once */
} px_job_plan_t;

/* Plans pipeline stage `stage` (0 .. pp-1; -1: the stage whose total is the
 * largest, the one a memory check must fit) of the job `cfg` on a device of
 * kind `dev` (px_plan_dev_t). cfg must pass px_job_config_check (the sizes,
 * the layout against the model and the batch; the data file is not read);
 * then the result is what the engine allocates on that rank. Fills *out
 * (caller frees with px_job_plan_free); out untouched on error. Errors:
 * PX_ERR_INVALID_ARGUMENT (logged, naming the values) for a config the
 * planner cannot size, PX_ERR_NO_MEMORY. */
px_status_t px_plan_job(const px_job_config_t *cfg, int dev, int stage, px_job_plan_t *out);

/* Frees what px_plan_job allocated (NULL and a zeroed plan are no-ops). */
void px_job_plan_free(px_job_plan_t *jp);

/* Rebuilds jp->state with other bytes per element (the ZeRO paper's
 * mixed-precision accounting for `pctl plan --paper`), the same units and
 * ZeRO stage; updates total. PX_OK or px_plan_create's errors (jp->state
 * then unchanged). */
px_status_t px_job_plan_reprice(px_job_plan_t *jp, const px_job_config_t *cfg,
                                const px_plan_precision_t *prec);

/* Adds the CUDA IPC scratch (plan.h px_plan_ipc_node_bytes: the most any
 * rank that node_of_rank (world entries, px_layout_place's) puts on node
 * `node` holds; NULL node_of_rank: one node, rank 0's) with slots of
 * `slot_bytes`, for a cuda plan only (cpu and sim hold none), into
 * ipc_bytes, ipc_comms and total. */
void px_plan_job_add_ipc(px_job_plan_t *jp, const px_job_config_t *cfg, const int *node_of_rank,
                         int node, uint64_t slot_bytes);

#endif
