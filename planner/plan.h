/* plan.h: the memory plan of a data-parallel / ZeRO job, per rank.
 *
 * One module for the engine and for `pctl plan` (ARCHITECTURE.md §2): the
 * engine cuts its buffers with the offsets and sizes computed here, and the
 * prediction users see is the same arithmetic. Pure arithmetic: no BLAS, no
 * transport, so pctl links it alone.
 *
 * Model = units (model.h). A GPT has L+2 units: unit 0 the EMBEDDING (wte,
 * wpe), unit 1+l layer l's twelve tensors, unit L+1 the HEAD (lnfw, lnfb;
 * the LM head is tied to wte, so it reads the embedding unit). Each unit
 * is one contiguous range of the flat buffers, padded to a multiple of dp;
 * rank r's ZeRO shard of a unit is its r-th slice of padded/dp elements,
 * and a rank's shard buffer is its slices of every unit back to back. When
 * only a parameter count is known (`--params N`) the model is one unit and
 * the working buffers of stages 2/3 are not counted (as in the ZeRO
 * paper's figures).
 *
 * Bytes per rank by stage (Psi' = padded elements, S = Psi'/dp, E = the
 * embedding unit, H = the head unit, M = the largest layer unit, all
 * padded; p, g, o = bytes per element of parameters, gradients, optimizer
 * state):
 *   0: params Psi'p,      grads Psi'g,      optimizer Psi'o
 *   1: params Psi'p,      grads Psi'g,      optimizer S o
 *   2: params Psi'p,      grads (S+W)g,     optimizer S o
 *   3: params (S+W)p,     grads (S+max(E+H, E+M+Xg))g, optimizer S o
 * with W = E + M + (L >= 2 ? max(M, H) : H)  (L = layers; M = 0 if none),
 * Xg = max(M, H) for L >= 3, H for L = 2, 0 for L = 1.
 * Derivation from the engine's hook protocol (gpt.h) and zero.c:
 *   stage 3 parameters: the embedding is gathered for the whole forward
 *     (the tied head reads wte at the end); each layer is gathered with the
 *     next unit prefetched: E + M + M while a layer computes and the next
 *     layer is gathered, E + M + H at the last layer (the head prefetched).
 *     The head's backward holds E + H and prefetches layer L-1 (E + H + M
 *     <= W); the layers' backward hold M + M.
 *   stage 2 gradients: the head's backward holds the embedding's and the
 *     head's gradients (E + H); the embedding's stay to the end (the
 *     encoder's backward); one unit's reduce-scatter may be in flight while
 *     the next layer computes: E + H + M at layer L-1, E + M + M below.
 *   stage 3 gradients: the head's backward E + H; layers 1..L-1 hold the
 *     unit above's gradients (reduce-scatter in flight: Xg) only until the
 *     next layer's prefetched gather takes their place (zero.c
 *     rs_allowed), layer 0 waits for them first: E + M + Xg. The sum of
 *     the categories is no higher than when every reduce-scatter was
 *     waited for before the next layer's backward.
 * (Rajbhandari et al., "ZeRO: Memory Optimizations Toward Training Trillion
 * Parameter Models", SC'20, Figure 1: 2+2+K bytes per parameter with K = 12
 * for mixed-precision Adam.) */
#ifndef PX_PLAN_H
#define PX_PLAN_H

#include <stddef.h>
#include <stdint.h>

#include "layout.h"
#include "px_status.h"

/* Memory categories (also memacct.h's). */
typedef enum px_mem_cat {
    PX_MEM_PARAMS = 0,
    PX_MEM_GRADS,
    PX_MEM_OPTIM,
    PX_MEM_ACTS,
    PX_MEM_COMM,
    PX_MEM_WORK,
    PX_MEM_NCAT
} px_mem_cat_t;

/* "params", "grads", "optimizer", "activations", "comm", "workspace". */
const char *px_mem_cat_name(px_mem_cat_t cat);

/* Bytes per element of each state category. */
typedef struct px_plan_precision {
    double param_bytes, grad_bytes, optim_bytes;
} px_plan_precision_t;

/* The engine's fp32 AdamW: 4 / 4 / 8 (two moments, no master copy). */
void px_plan_precision_fp32(px_plan_precision_t *p);
/* Mixed precision as the ZeRO paper counts it: fp16 params and grads (2 / 2),
 * optimizer K bytes per parameter (12: fp32 master, momentum, variance). */
void px_plan_precision_mixed(px_plan_precision_t *p, double k);

/* Unit sizes (elements) of a GPT, from the tensor table (model.h): unit 0
 * the embedding, unit 1+l layer l, unit layers+1 the head. `vocab` is the
 * number of token ids; wte counts its rows padded to PX_VOCAB_PAD
 * (px_job_config_padded_vocab). `sizes_p` gets layers + 2 entries (caller
 * frees). Returns the total parameter count, 0 on bad dims or no memory.
 * max_seq = rows of wpe. */
uint64_t px_plan_gpt_units(int layers, int dim, int vocab, int max_seq, uint64_t **sizes_p);
/* The same for one rank of a tensor group of `tp` (Megatron-LM splits,
 * model.h): its tp-local unit sizes (every tp rank's are equal) and their
 * total, the parameters one rank holds. dim and the padded vocab must be
 * divisible by tp (the caller checks: jobcfg.h). */
uint64_t px_plan_gpt_units_tp(int layers, int dim, int vocab, int max_seq, int tp,
                              uint64_t **sizes_p);
/* The same for a model with `experts` > 0 experts in every moe_every-th
 * layer (model.h px_model_layer_is_moe): a MoE layer's unit holds no dense
 * MLP (8C^2 + 5C elements fewer, over tp for the split ones). experts 0:
 * px_plan_gpt_units_tp. */
uint64_t px_plan_gpt_units_moe(int layers, int dim, int vocab, int max_seq, int tp, int experts,
                               int moe_every, uint64_t **sizes_p);

/* The activation buffers the GPT engine allocates (engine/gpt.c, one flat
 * buffer of floats plus the vocab-parallel cross-entropy's doubles), in
 * the order of gpt.c's gpt_acts_t. With the shapes (L layers, NH heads,
 * C dim, Vp padded vocab, B local micro-batch, T sequence, N = B*T tokens;
 * per tensor rank Cl = C/tp, NHl = NH/tp, Vl = Vp/tp; R = N, or N/tp with
 * sequence parallelism):
 *   residual stream and LayerNorms, R rows: encoded (R,C), ln1 (L,R,C),
 *     ln1 mean/rstd (L,R) x2, residual2 (L,R,C), ln2 (L,R,C), ln2
 *     mean/rstd (L,R) x2, residual3 (L,R,C), lnf (R,C), lnf mean/rstd (R)
 *     x2, dres (R,C);
 *   split by tp: qkv (L,N,3Cl), atty (L,N,Cl), att (L,B,NHl,T,T), fch and
 *     its gelu (L,N,4Cl) x2, logits (N,Vl), backward d4a and d4b (N,4Cl)
 *     x2; probs and dlogits count 0: the cross-entropy writes the
 *     probabilities over the logits and its backward the gradient over
 *     those (in place, px_kernels.h; llm.c keeps one buffer too), so gpt.c
 *     points all three at the logits;
 *   whole: losses (N), tmp (N,C), dbtc (N,C), attention scratch (T,T);
 *   tp > 1: the cross-entropy's row max (N) and sums (N,2) doubles;
 *   sequence parallelism: spbuf (N,C), the LayerNorm gradients (4,C).
 * The table is exact for this engine (gpt.c allocates from it). Sequence
 * parallelism takes the 5 per-layer R-row tensors from N to N/tp rows
 * (Korthikanti et al., "Reducing Activation Recomputation in Large
 * Transformer Models", 2022, section 4.2.2 and Table 2: the LayerNorm and
 * dropout-free residual activations divided by t). */
#define PX_PLAN_GPT_NUM_ACTS 30
typedef struct px_plan_gpt_acts {
    uint64_t count[PX_PLAN_GPT_NUM_ACTS]; /* floats of each buffer */
    uint64_t floats;                      /* their sum */
    uint64_t doubles;                     /* the cross-entropy's sums (tp > 1) */
    uint64_t bytes;                       /* 4 floats + 8 doubles: memacct's
                                             activations category */
    uint64_t ring;                        /* of floats: ring attention's work
                                             buffers (cp > 1), outside count[] */
    unsigned char bf16[PX_PLAN_GPT_NUM_ACTS]; /* 1: the buffer holds bf16
                                             elements, 2 bytes each, count[]
                                             = its 4-byte words (elements
                                             rounded up to even, halved)
                                             (px_plan_gpt_activations_prec) */
} px_plan_gpt_acts_t;

/* Fills *acts for one rank (tp_rank does not matter: every tensor rank's
 * are equal). B, T: the local micro-batch the model is created for.
 * Errors (PX_ERR_INVALID_ARGUMENT, logged): a size not positive, heads or
 * padded_vocab or dim not divisible by tp, B*T not divisible by tp with
 * sequence parallelism. */
px_status_t px_plan_gpt_activations(int layers, int heads, int dim, int padded_vocab, int B,
                                    int T, int tp, int sequence_parallel,
                                    px_plan_gpt_acts_t *acts);

/* The table for a device: as px_plan_gpt_activations_prec, and with
 * att_lse_only (the op table's att_lse_only, px_kernels.h: the CUDA fused
 * attention) and cp <= 1, att holds each layer's log-sum-exp (L,B,NHl,T)
 * and the attention scratch counts 0 (the fused backward needs none); cp > 1
 * is the same on every device (the blockwise ops). cpu and sim (which runs
 * the cpu ops): att_lse_only 0, (L,B,NHl,T,T) and (T,T). Engine/gpt.c
 * allocates from this table. Errors as _prec. */
px_status_t px_plan_gpt_activations_dev(int layers, int heads, int dim, int padded_vocab, int B,
                                        int T, int tp, int sequence_parallel, int cp, int bf16,
                                        int att_lse_only, px_plan_gpt_acts_t *acts);

/* The bf16 GEMMs' scratch of --precision bf16 with bf16 activation storage
 * (px_plan_gpt_activations_prec), in BYTES, as the backends allocate it:
 * the most one linear layer's call takes, over a GPT layer's four GEMMs and
 * the tied head, forward and backward; N = `tokens` rows, OC and C of one
 * tensor rank's shard (as px_plan_bf16_gemm_elems).
 *   cuda 1 (px_matmul_bf16_cuda.cu): bf16 copies, 2 bytes an element, each
 *     operand's start rounded up to 64 elements: forward inp + W, backward
 *     dout + W + inp; an input STORED as bf16 (the LayerNorm outputs
 *     without sequence parallelism, the GELU output) is read in place and
 *     not counted (matmul_bf16in_*);
 *   cuda 0 (px_matmul_bf16_cpu.c, cpu and sim; host memory): every operand
 *     widened to doubles, 8 bytes, stored input included, plus the fp64
 *     accumulator: forward inp + W + out, backward dout + W + inp + max(inp,
 *     W).
 * 0 for bad sizes. */
uint64_t px_plan_bf16_gemm_scratch_bytes(int dim, int padded_vocab, int tokens, int tp,
                                         int sequence_parallel, int cuda);

/* precision=bf16 ("bf16 GEMM and attention operands, fp32 elsewhere", kernels/px_kernels_bf16.h):
 * the engine keeps no bf16 weight copy - each GEMM rounds its weight and
 * activation operands on the fly into the backend's scratch - so bf16 adds
 * to the fp32 plan only that scratch: the largest bf16 operand set one
 * linear layer's call rounds, in ELEMENTS, over a GPT layer's four GEMMs
 * and the tied head, backward counted (dout (N,OC) + W (OC,C) + inp (N,C)):
 * with N = `tokens` rows of a micro-batch (B x T of this rank, all B x T
 * with sequence parallelism), OC and C of one tensor rank's shard (3C/tp,
 * C/tp, 4C/tp, padded_vocab/tp). The head dominates for a real vocab.
 * Bytes: 2 per element on CUDA (bf16); the CPU op widens them to doubles
 * (8) plus an fp64 accumulator of the output's size. 0 for bad sizes. */
uint64_t px_plan_bf16_gemm_elems(int dim, int padded_vocab, int tokens, int tp);
/* (That count rounds every input, as matmul_bf16_* on fp32 activations do;
 * with bf16 activation storage the bf16-input GEMMs skip it: `pctl plan`
 * and memfit count px_plan_bf16_gemm_scratch_bytes, what is allocated.) */

/* The same with context parallelism (engine/ring_attn.h): B, T the LOCAL
 * micro-batch (T = seq / cp tokens, two chunks); with cp > 1 the att entry
 * holds each layer's log-sum-exp (L,B,NH/tp,T) instead of the (T,T)
 * probabilities (ring attention recomputes them in backward), and `ring`
 * the ring's buffers: five (B,T,2C/tp) k|v blocks and delta (B,NH/tp,T).
 * cp <= 1: px_plan_gpt_activations. Errors as it, and for T odd. */
px_status_t px_plan_gpt_activations_cp(int layers, int heads, int dim, int padded_vocab, int B,
                                       int T, int tp, int sequence_parallel, int cp,
                                       px_plan_gpt_acts_t *acts);

/* The same for a precision: bf16 0 is px_plan_gpt_activations_cp (fp32
 * storage: every bf16[] 0); bf16 1 (--precision bf16, kernels/
 * px_kernels_bf16.h: the activations whose only consumers are bf16 GEMMs
 * are stored as bf16, as PyTorch autocast saves a linear layer's bf16
 * input cast) marks bf16[] and halves count[] of:
 *   fch_gelu (L,N,4Cl): fcproj's input (forward and weight gradient);
 *   ln1, ln2 (L,R,C) and lnf (R,C): the inputs of qkv, fc (or the mixture
 *     of experts' router and experts, which round it likewise) and the
 *     tied head, WITHOUT sequence parallelism only: with it they are
 *     all-gathered as fp32 (engine/tp.c) and stay fp32.
 * The LayerNorm statistics, residuals, qkv, atty, fch and the work buffers
 * stay fp32. Engine/gpt.c allocates from this table. Errors as _cp. */
px_status_t px_plan_gpt_activations_prec(int layers, int heads, int dim, int padded_vocab,
                                         int B, int T, int tp, int sequence_parallel, int cp,
                                         int bf16, px_plan_gpt_acts_t *acts);

typedef struct px_plan {
    int zero, dp, nunits;
    int units_known;          /* 0: one unit from --params; W not counted */
    uint64_t params;          /* Psi, unpadded */
    uint64_t padded;          /* Psi' */
    uint64_t shard;           /* S = padded / dp */
    uint64_t *unit_size;      /* [nunits] elements */
    uint64_t *unit_padded;    /* [nunits] multiple of dp */
    uint64_t *unit_offset;    /* [nunits] in the full padded flat buffer */
    uint64_t *shard_offset;   /* [nunits] in a rank's shard buffer */
    uint64_t work_params;     /* working buffers beyond the shard, elements */
    uint64_t work_grads;      /* (0 when !units_known or not sharded) */
    uint64_t max_layer;       /* M: largest padded layer unit (0 if none) */
    px_plan_precision_t prec;
    double bytes[PX_MEM_NCAT]; /* predicted peak per rank; only the three
                                  state categories are filled */
    double state_peak;         /* peak of their sum at one time: stage 3's
                                  parameter peak (forward) and gradient peak
                                  (backward) do not coincide: the largest of
                                  the forward, the head's backward and a
                                  layer's backward */
} px_plan_t;

/* Builds the plan for units `unit_size[nunits]` (when units_known: unit 0
 * the embedding, unit nunits-1 the head, the layers between), `dp` >= 1, stage 0..3. Copies the sizes. Errors:
 * PX_ERR_INVALID_ARGUMENT (logged) for a bad stage / dp / empty model;
 * PX_ERR_NO_MEMORY. Free with px_plan_destroy. */
px_status_t px_plan_create(const uint64_t *unit_size, int nunits, int units_known, int dp,
                           int zero, const px_plan_precision_t *prec, px_plan_t **plan_p);
void px_plan_destroy(px_plan_t *plan); /* NULL no-op */

/* Predicted peak of params + grads + optimizer held at once, bytes
 * (plan->state_peak). */
double px_plan_state_bytes(const px_plan_t *plan);

/* State ZeRO does not shard (the mixture of experts' routers and this
 * rank's experts: engine/moe.h keeps them whole on every rank that holds
 * them, at every stage): adds `elements` x (p, g, o) bytes to the three
 * state categories and to the state peak (held for the whole step). */
void px_plan_add_unsharded(px_plan_t *plan, uint64_t elements);

/* The mixture of experts' receive rows per MoE layer on one rank (engine/
 * moe.c): N local tokens, an ep group of `ep` ranks, E experts, top_k K:
 * at most N ep K (every choice of the group here), and with a capacity at
 * most (E/ep) x ceil(N ep K / E x F). */
uint64_t px_plan_moe_rows(int N, int ep, int experts, int top_k, int dropless,
                          double capacity_factor);
/* Bytes of the activations and work buffers engine/moe.c allocates for
 * `moe_layers` MoE layers of width C (memacct's activations category): per
 * layer probs (N,E), gates and choices (N,K) x2, the ep group's counts and
 * kept counts (ep,K,E) int64 x2, the slots' tokens and choices (N K) x2,
 * their outputs (N K, C), the received rows (R, C) and the experts' hidden
 * (R, 4C) x2 (+1 float each), d(aux) (E); shared: the send and receive
 * buffers (max(N K, R), C) x2, logits (N,E), d gates (N K), the experts'
 * hidden gradients (R, 4C) x2 (+1 each). R = px_plan_moe_rows. */
uint64_t px_plan_moe_activation_bytes(int moe_layers, int N, int ep, int experts, int top_k,
                                      int dim, int dropless, double capacity_factor);

/* the device scratch of CUDA IPC (transport/px_ipc.c): at a
 * communicator's first collective of device buffers, when all its ranks
 * are on one node, each rank allocates PX_PLAN_IPC_SLOTS slots of
 * px_plan_ipc_slot_bytes(PX_IPC_SLOT_BYTES) of device memory (two ring
 * slots and the reducer's work slot) and keeps them for the communicator's
 * life. The rank's memory accounting shows them in the "comm" category. */
#define PX_PLAN_IPC_SLOTS 3

/* One slot's bytes for PX_IPC_SLOT_BYTES = `slot_env` as px_ipc.c rounds
 * it: at least 4096, rounded up to a multiple of 256. */
uint64_t px_plan_ipc_slot_bytes(long slot_env);

/* Which of a rank's communicators run collectives of device buffers during
 * training, and so set up IPC scratch (engine: zero.c, tp.c, moe.c): the
 * gradient group (dp, or dp x cp when cp > 1: gradient all-reduce, ZeRO's
 * reduce-scatter / all-gather, the MoE routers' gradients) when it has more
 * than one rank; the tensor group (tp > 1: the activations' all-reduce /
 * all-gather / reduce-scatter); the expert-data group (edp = dp x cp / ep
 * > 1 with experts: the experts' gradients; a communicator of its own even
 * where its members are the gradient group's). The pipeline (point to
 * point), context (ring attention's point to point), expert (all-to-all-v,
 * staged; its other collectives are host buffers), model and world
 * communicators move only host buffers or stage: none. Only groups whose
 * members `node_of_rank` (world entries, from px_layout_place; NULL: one
 * node) puts on one node count. `rank`: whose groups (any rank of a
 * uniform layout gives the same count on one node). Returns the count and
 * writes each counted group's kind into kinds[] (up to 3; may be NULL). */
int px_plan_ipc_comms(const px_layout_t *l, int experts, int rank, const int *node_of_rank,
                      px_group_kind_t *kinds);

/* Bytes of IPC scratch of `comms` communicators with slots of
 * `slot_bytes` (px_plan_ipc_slot_bytes): comms x PX_PLAN_IPC_SLOTS x slot. */
uint64_t px_plan_ipc_bytes(int comms, uint64_t slot_bytes);

/* The submit-time memory check's IPC figure (daemon/memfit.c):
 * the most IPC scratch any rank of the layout that `node_of_rank` (world
 * entries, from px_layout_place; not NULL) puts on node `node` holds,
 * px_plan_ipc_bytes(px_plan_ipc_comms(l, experts, rank, node_of_rank),
 * slot_bytes) over those ranks, in bytes; 0 when none is there. Counts
 * every group as CUDA IPC capable: call it only for a node whose devices
 * are GPUs (a cpu or sim rank has no IPC ops and holds none). *comms_p
 * (may be NULL): that rank's communicator count. */
uint64_t px_plan_ipc_node_bytes(const px_layout_t *l, int experts, const int *node_of_rank,
                                int node, uint64_t slot_bytes, int *comms_p);

#endif
