/* px_kernels.h: the compute ops of the GPT engine, behind one op table.
 *
 * Every op is a forward/backward pair in the llm.c style: outputs first, then
 * inputs and weights, sizes last. Shapes are given as (B, T, C) etc. with the
 * last index fastest (row-major). N is a number of rows (usually B*T).
 * Weights of a linear layer are (OC, C) as in torch.nn.Linear.
 *
 * Conventions shared by every backward op:
 *   - gradients are ACCUMULATED (+=) into dinp / dweight / dbias, so the
 *     caller zeroes gradient buffers once per step (one memset each);
 *   - an optional gradient output (documented as "may be NULL") is skipped.
 *
 * The engine calls ops only through a px_kernel_ops_t, chosen once
 * (px_kernels_cpu() today; a CUDA table with the same signatures later).
 * Whether a pointer is host or device memory is the backend's business:
 * tensors are allocated, set and copied through the table's memory ops.
 * All CPU ops are reentrant and keep no state. */
#ifndef PX_KERNELS_H
#define PX_KERNELS_H

#include <stddef.h>
#include <stdint.h>

#include "px_status.h"

/* Geometry of one block of blockwise attention (the ops below): B
 * sequences, NH heads of hs channels each; Tq query rows against Tk key
 * rows. Head h of row t of sequence b is at  base + b*bs + t*ld + h*hs
 * for q (q_*), k (kv_*; v at the same place + v_off) and out / dout / dq
 * (o_*); lse and delta of (b, h, t) at lse[b*lse_bs + h*lse_hs + t].
 * causal: query row i sees key rows j <= i only (a diagonal block, Tq ==
 * Tk, rows aligned); 0: every key. init (forward): 1 writes out and lse
 * (the rows' first block) instead of merging into them. Strides in floats. */
typedef struct px_attn_block {
    int B, NH, hs, Tq, Tk, causal, init;
    size_t q_bs, q_ld, kv_bs, kv_ld, v_off, o_bs, o_ld, lse_bs, lse_hs;
} px_attn_block_t;

/* An opaque inter-process handle of device memory (ipc_handle below):
 * `bytes` as the backend fills them (CUDA: a cudaIpcMemHandle_t, 64 bytes,
 * of the allocation's base), `offset` the pointer's distance in bytes from
 * that base. Plain data: it travels between processes as it is. */
typedef struct px_ipc_handle {
    unsigned char bytes[64];
    uint64_t offset;
} px_ipc_handle_t;

typedef struct px_kernel_ops {
    const char *name; /* "cpu", "cuda" */

    /* out (B,T,C) = wte[inp[b,t]] + wpe[t]; inp (B,T) token ids < V,
     * wte (V,C), wpe (>=T, C). */
    void (*encoder_forward)(float *out, const int32_t *inp, const float *wte, const float *wpe,
                            int B, int T, int C);
    /* dwte (V,C) and dwpe (T,C) += scatter of dout (B,T,C). */
    void (*encoder_backward)(float *dwte, float *dwpe, const float *dout, const int32_t *inp,
                             int B, int T, int C);

    /* LayerNorm over the last dim, eps 1e-5, biased variance (as torch).
     * out (N,C); mean, rstd (N) saved for backward; inp (N,C); weight,
     * bias (C). */
    void (*layernorm_forward)(float *out, float *mean, float *rstd, const float *inp,
                              const float *weight, const float *bias, int N, int C);
    /* dinp (N,C), dweight (C), dbias (C) += ...; dout, inp (N,C). */
    void (*layernorm_backward)(float *dinp, float *dweight, float *dbias, const float *dout,
                               const float *inp, const float *weight, const float *mean,
                               const float *rstd, int N, int C);

    /* out (N,OC) = inp (N,C) @ weight(OC,C)^T + bias (OC; may be NULL).
     * One sgemm (OpenBLAS on CPU). */
    void (*matmul_forward)(float *out, const float *inp, const float *weight, const float *bias,
                           int N, int C, int OC);
    /* dinp (N,C) += dout @ weight; dweight (OC,C) += dout^T @ inp;
     * dbias (OC) += column sums of dout. Any of dinp, dweight, dbias may
     * be NULL (not computed): tensor parallelism computes dinp alone,
     * starts its all-reduce, then dweight and dbias (tp.h). Row blocks of
     * dout and inp may be passed separately (N split): dweight and dbias
     * accumulate. */
    void (*matmul_backward)(float *dinp, float *dweight, float *dbias, const float *dout,
                            const float *inp, const float *weight, int N, int C, int OC);

    /* ---- the same linear layer as a bf16 GEMM (mixed precision, as
     * PyTorch autocast and Megatron-LM run linear layers): the GEMMs'
     * inputs are rounded to bf16 (nearest even) - inp and weight in
     * forward; dout and weight (dinp), dout and inp (dweight) in backward -
     * and multiplied into fp32 outputs; the bias add and dbias (column
     * sums of the unrounded dout) stay fp32. A bf16 x bf16 product is exact
     * in fp32. CUDA: a bf16 tensor-core GEMM with an fp32 accumulator; CPU:
     * the exact products summed in double and rounded once to fp32, so the
     * result does not depend on BLAS's summation order (px_matmul_bf16_cpu.c).
     * Same arguments, shapes, accumulation and NULL rules as matmul_forward
     * / matmul_backward; the inputs are not modified (rounded copies go to
     * the backend's scratch: CPU, a per-thread grow-only buffer of doubles;
     * CUDA, bf16 in the device scratch). px_kernels_with_precision
     * (px_kernels_bf16.h) makes a table whose matmul_* are these. */
    void (*matmul_bf16_forward)(float *out, const float *inp, const float *weight,
                                const float *bias, int N, int C, int OC);
    void (*matmul_bf16_backward)(float *dinp, float *dweight, float *dbias, const float *dout,
                                 const float *inp, const float *weight, int N, int C, int OC);

    /* Causal multi-head self-attention. inp (B,T,3C) is the fused qkv
     * projection (q | k | v, each C = NH heads of C/NH); out (B,T,C) is
     * the heads concatenated; att (B,NH,T,T) receives the softmax
     * probabilities (row t has zeros beyond column t), kept for backward.
     * Scale 1/sqrt(C/NH). O(T^2) per head, matmuls by sgemm. */
    void (*attention_forward)(float *out, float *att, const float *inp, int B, int T, int C,
                              int NH);
    /* dinp (B,T,3C) += ...; scratch: T*T floats of work space (any
     * content); dout (B,T,C); inp, att as saved by forward. */
    void (*attention_backward)(float *dinp, float *scratch, const float *dout, const float *inp,
                               const float *att, int B, int T, int C, int NH);
    /* Optional (NULL where not offered: every fp32 table): the same
     * backward given also the forward's output out (B,T,C), as the forward
     * wrote it (the engine keeps it for the projection's backward). A
     * backend whose fused backward needs the output rows, for FlashAttention-
     * 2's D = rowsum(dout * out), reads them instead of running the forward
     * again. Same op, arguments and accumulation otherwise. The precision
     * view (px_kernels_with_precision) fills it from
     * attention_bf16_backward_out. */
    void (*attention_backward_out)(float *dinp, float *scratch, const float *dout,
                                   const float *inp, const float *out, const float *att, int B,
                                   int T, int C, int NH);

    /* ---- blockwise attention with an online softmax (context parallelism:
     * ring attention, Liu et al. 2023; the merge is FlashAttention-2's,
     * Dao 2023). A block is Tq query rows against Tk key/value rows of
     * one or more heads; geometry and strides in px_attn_block_t. The
     * forward MERGES the block into a running result: out (rows, normalised
     * over every block merged so far) and lse (each row's log-sum-exp of
     * the scaled scores so far; -INFINITY: nothing yet, then out's row is
     * ignored and overwritten). Merging every key block of a row in any
     * order gives softmax(q k^T * scale) v over their union.
     * scratch: Tq*Tk floats. */
    void (*attention_block_forward)(float *out, float *lse, const float *q, const float *kv,
                                    const px_attn_block_t *g, float *scratch);
    /* Its backward against the FINAL lse and delta (attention_block_delta):
     * dq (q's layout) += dS k * scale, dkv (kv's layout, dk at dkv, dv at
     * dkv + v_off) += dS^T q * scale and P^T dout, with P = exp(S - lse),
     * dS = P (dout v^T - delta). scratch: 2*Tq*Tk floats. */
    void (*attention_block_backward)(float *dq, float *dkv, const float *dout, const float *q,
                                     const float *kv, const float *lse, const float *delta,
                                     const px_attn_block_t *g, float *scratch);
    /* delta (lse's layout, Tq rows) = per row and head sum over the head's
     * channels of dout * out (out, dout in the o layout). */
    void (*attention_block_delta)(float *delta, const float *out, const float *dout,
                                  const px_attn_block_t *g);

    /* ---- attention with bf16 products (mixed precision, as
     * flash attention and PyTorch's scaled_dot_product_attention run under
     * bf16 autocast): the same ops, arguments and layouts as the four
     * above, with every operand of the batched products rounded to bf16
     * (nearest even) where the product takes it and fp32 (CPU: double)
     * accumulation: q, k for S = q k^T; the unnormalised probabilities E =
     * exp(S - m) and v for E v (normalised by the fp32 sum of E); in
     * backward E and dout for dv, dout and v for dP, E (dP - delta) scale
     * for dq and dk, the row's normaliser exp(m - lse) applied outside the
     * rounding. Softmax, lse, delta = rowsum(dout * out) and every stored
     * tensor stay fp32. m is a multiple of ln 2 (the row's max, or lse,
     * snapped down), so bf16(E) exp(m) does not depend on m: the full op and
     * any cutting of the keys into blocks round the same values
     * (px_attention_bf16_cpu.c).
     * att / lse / scratch as the fp32 ops' (the CPU ops use scratch of
     * their own). px_kernels_with_precision puts them in the fp32 slots. */
    void (*attention_bf16_forward)(float *out, float *att, const float *inp, int B, int T, int C,
                                   int NH);
    void (*attention_bf16_backward)(float *dinp, float *scratch, const float *dout,
                                    const float *inp, const float *att, int B, int T, int C,
                                    int NH);
    /* Optional: attention_bf16_backward with the forward's out, as
     * attention_backward_out above (the CUDA table: cuDNN's fused backward,
     * PX_CUDA_ATTN=cudnn, reads it; its other kernels ignore it). */
    void (*attention_bf16_backward_out)(float *dinp, float *scratch, const float *dout,
                                        const float *inp, const float *out, const float *att,
                                        int B, int T, int C, int NH);
    void (*attention_block_bf16_forward)(float *out, float *lse, const float *q, const float *kv,
                                         const px_attn_block_t *g, float *scratch);
    void (*attention_block_bf16_backward)(float *dq, float *dkv, const float *dout,
                                          const float *q, const float *kv, const float *lse,
                                          const float *delta, const px_attn_block_t *g,
                                          float *scratch);

    /* ---- bf16 activations in memory (as PyTorch autocast saves
     * a linear layer's bf16 input cast for its backward): an activation
     * whose only consumers are bf16 GEMMs (LayerNorm outputs, GELU output)
     * is stored as bf16 bits (uint16_t, round to nearest even), 2 bytes an
     * element. Since matmul_bf16_* round their fp32 inputs with the same
     * function, and rounding a bf16 value again is the identity, these ops
     * give the SAME BITS as matmul_bf16_forward / matmul_bf16_backward on
     * the fp32 tensor the bf16 one was rounded from.
     * matmul_bf16in_forward: out (N,OC) = inp (N,C, bf16) @ weight^T + bias,
     *   as matmul_bf16_forward. matmul_bf16in_backward: as
     *   matmul_bf16_backward with inp (N,C) in bf16 (read by dweight only;
     *   may be NULL when dweight is). Same NULL and accumulation rules. */
    void (*matmul_bf16in_forward)(float *out, const uint16_t *inp, const float *weight,
                                  const float *bias, int N, int C, int OC);
    void (*matmul_bf16in_backward)(float *dinp, float *dweight, float *dbias, const float *dout,
                                   const uint16_t *inp, const float *weight, int N, int C,
                                   int OC);
    /* dst (n bf16) = src (n fp32) rounded to nearest even (NaN stays a
     * quiet NaN), as px_f32_to_bf16 (px_reduce.h); the producer's write of a
     * bf16-stored activation: layernorm_forward / gelu_forward write fp32
     * into a work buffer, this rounds it into the activation. */
    void (*bf16_from_f32)(uint16_t *dst, const float *src, size_t n);
    /* dst (n fp32) = src (n bf16) widened (exact), as px_bf16_to_f32: for a
     * consumer that takes fp32 but only rounds it to bf16 (the mixture of
     * experts' router and experts, moe.h). */
    void (*bf16_to_f32)(float *dst, const uint16_t *src, size_t n);
    /* 1 in the bf16 view of a table (px_kernels_with_precision) that asks
     * the engine to store those activations as bf16; 0 otherwise (fp32
     * tables, and the view that keeps fp32 storage, PX_KERNELS_BF16_F32ACTS). */
    int bf16_acts;
    /* What attention_forward / attention_bf16_forward save in `att` for
     * their backward, and so what the engine allocates (plan.h
     * px_plan_gpt_activations_dev):
     *   0 (cpu, and sim, which runs the cpu ops): the (B,NH,T,T)
     *     probabilities, and attention_backward uses T*T floats of scratch;
     *   1 (cuda: fused kernels that never materialise (T,T), online
     *     softmax as flash attention): only each row's log-sum-exp, the
     *     first B*NH*T floats of att, (B,NH,T); attention_backward ignores
     *     its scratch (may be NULL).
     * The blockwise ops (ring attention) are the same on every backend:
     * lse (B,NH,T) and Tq*Tk (forward) / 2*Tq*Tk (backward) scratch. Views
     * (px_kernels_with_precision) copy it with the table. */
    int att_lse_only;

    /* GELU, tanh approximation (torch approximate='tanh'); N elements. */
    void (*gelu_forward)(float *out, const float *inp, size_t N);
    void (*gelu_backward)(float *dinp, const float *inp, const float *dout, size_t N);

    /* out = inp1 + inp2 (N elements); backward: dinp1 += dout, dinp2 += dout. */
    void (*residual_forward)(float *out, const float *inp1, const float *inp2, size_t N);
    void (*residual_backward)(float *dinp1, float *dinp2, const float *dout, size_t N);

    /* Fused softmax + cross-entropy over a PADDED vocab (llm.c: V = 50257
     * real tokens in rows of Vp = 50304): logits and probs are (N,Vp); the
     * softmax runs over the first V columns of each row only, probs of the
     * padding columns [V, Vp) are written as exactly 0 (masked out of the
     * loss); losses (N) = -log probs[n, targets[n]] (computed as logsumexp -
     * logit, for accuracy). targets (N) in [0,V); 1 <= V <= Vp.
     * probs may be logits (in place, as llm.c's classifier: the engine
     * keeps one (N,Vp) buffer): each row's logits, the target's
     * included, are read before its probabilities are written, so the
     * results are the same bits as with separate buffers. */
    void (*crossentropy_forward)(float *losses, float *probs, const float *logits,
                                 const int32_t *targets, int N, int V, int Vp);
    /* dlogits (N,Vp) += (probs - onehot(targets)) * dloss over the first V
     * columns, where dloss is the gradient of the total loss w.r.t. each
     * token's loss (1/N_total for a mean); the padding columns [V, Vp) get
     * nothing (their gradient is 0, so a zeroed dlogits stays 0 there).
     * dlogits may be probs (in place): the gradient then REPLACES the
     * probabilities, computed as if dlogits had been zeroed (0 + probs *
     * dloss, then - dloss at the target: the same bits), and the padding
     * columns keep the probabilities' exact 0. */
    void (*crossentropy_backward)(float *dlogits, const float *probs, const int32_t *targets,
                                  float dloss, int N, int V, int Vp);

    /* One AdamW step on n elements, as torch.optim.AdamW (decoupled decay),
     * with g = grads * grad_scale (the float product, rounded once):
     *   p *= 1 - lr*wd; m = b1 m + (1-b1) g; v = b2 v + (1-b2) g^2;
     *   p -= lr/(1-b1^t) * m / (sqrt(v)/sqrt(1-b2^t) + eps)
     * t is the 1-based step count. grad_scale is the gradient clipping
     * coefficient (clip_grad_norm_'s max_norm / (norm + 1e-6) where it is
     * below 1, else 1) folded into the update's one pass over the gradient:
     * the same bits as scaling grads first (scale) and updating with 1,
     * and g == grads exactly for 1. grads is only read (left unscaled).
     * Loshchilov & Hutter, "Decoupled Weight Decay Regularization" (2019). */
    void (*adamw_update)(float *params, const float *grads, float *m, float *v, size_t n,
                         float lr, float beta1, float beta2, float eps, float weight_decay,
                         int t, float grad_scale);

    /* Sum of squares of x (n elements), accumulated in double. */
    double (*sumsq)(const float *x, size_t n);
    /* x *= s (n elements). */
    void (*scale)(float *x, float s, size_t n);

    /* ---- tensor parallelism (Megatron-LM, Shoeybi et al. 2019) ----
     * A rank of a tensor group holds vocab rows [v0, v0 + Vl) of wte (Vl =
     * Vp / tp) and so the logit columns [v0, v0 + Vl); of the padded vocab
     * Vp only the first V columns are real. With v0 = 0, Vl = Vp these
     * compute what the whole-vocab ops above compute. */
    /* out (B,T,C) = (v0 <= id < v0 + Vl ? wte[id - v0] : 0) + wpe[t];
     * wte (Vl,C) the local rows; wpe (>=T,C) or NULL (then no position
     * term: the caller all-reduces the partial lookups over the tensor
     * group and adds wpe once, so the sum is exact). */
    void (*encoder_vp_forward)(float *out, const int32_t *inp, const float *wte,
                               const float *wpe, int B, int T, int C, int v0, int Vl);
    /* dwte (Vl,C) += dout of the tokens whose id is in [v0, v0 + Vl);
     * dwpe (T,C) += dout (may be NULL). Same accumulation order as
     * encoder_backward. */
    void (*encoder_vp_backward)(float *dwte, float *dwpe, const float *dout, const int32_t *inp,
                                int B, int T, int C, int v0, int Vl);
    /* Vocab-parallel cross-entropy in three steps around two all-reduces
     * over the tensor group (logits, probs (N,Vl) the local columns):
     *   vp_max:    rowmax (N) = max of the local real columns (-FLT_MAX when
     *              none); the caller all-reduces MAX;
     *   vp_exp:    probs = exp(logits - rowmax) on the real columns, stats
     *              (N,2) doubles = (sum of those, the target's logit if
     *              local else 0); the caller all-reduces SUM;
     *   vp_finish: probs /= sum (padding columns 0), losses (N) =
     *              log(sum) + rowmax - target logit.
     * probs may be logits (in place; vp_exp reads a row's target logit
     * before it writes the row), as crossentropy_forward. */
    void (*crossentropy_vp_max)(float *rowmax, const float *logits, int N, int Vl, int v0, int V);
    void (*crossentropy_vp_exp)(double *stats, float *probs, const float *logits,
                                const float *rowmax, const int32_t *targets, int N, int Vl,
                                int v0, int V);
    void (*crossentropy_vp_finish)(float *losses, float *probs, const double *stats,
                                   const float *rowmax, int N, int Vl, int v0, int V);
    /* dlogits (N,Vl) += (probs - onehot(targets - v0)) * dloss over the
     * local real columns (targets outside the range add no one-hot).
     * dlogits may be probs (in place): replaces them as
     * crossentropy_backward does. */
    void (*crossentropy_vp_backward)(float *dlogits, const float *probs, const int32_t *targets,
                                     float dloss, int N, int Vl, int v0, int V);
    /* out (N,OC) += bias (OC) on every row: a row-parallel matmul's bias,
     * added once after its all-reduce. */
    void (*bias_forward)(float *out, const float *bias, int N, int OC);

    /* ---- mixture of experts (engine/moe.h) ----
     * Router: probs (N,E) = softmax over the E experts of logits (N,E);
     * idx (N,K) the K (1 or 2) largest probabilities of each row, in
     * decreasing order, ties to the lower expert index (so every layout
     * routes identically); weights (N,K) the gate of each choice: with
     * K = 2 renormalised over the two (p_j / (p_0 + p_1)), with K = 1 the
     * probability itself (Switch Transformer, Fedus et al. 2021). */
    void (*moe_router_forward)(float *probs, int32_t *idx, float *weights, const float *logits,
                               int N, int E, int K);
    /* Router backward: dlogits (N,E) = (overwritten) the softmax backward of
     * dprobs, where dprobs (N,E) = the gates' backward of dweights (N,K)
     * (through the renormalisation with K = 2) plus daux (E) on every row
     * (the load-balancing loss's d/dprob, the same for every token; NULL:
     * none). probs, idx, weights as the forward wrote them. */
    void (*moe_router_backward)(float *dlogits, const float *probs, const int32_t *idx,
                                const float *weights, const float *dweights, const float *daux,
                                int N, int E, int K);
    /* Dispatch: dst (n,C) row s = src row rows[s] (n slots, rows < the
     * tokens of src). */
    void (*moe_dispatch)(float *dst, const float *src, const int32_t *rows, int n, int C);
    /* Combine: out row rows[s] += gate_s * y row s, for s = 0..n-1 in order
     * (so a token's choices add in slot order); gate_s = w[widx[s]], or 1
     * when w is NULL (the input gradients' scatter-add). */
    void (*moe_combine)(float *out, const float *y, const int32_t *rows, const float *w,
                        const int32_t *widx, int n, int C);
    /* Combine backward: dy (n,C) row s = gate_s * dout row rows[s]; dw[widx[s]]
     * = dot(dout row rows[s], y row s) (the gate's gradient; dw's other
     * entries untouched). */
    void (*moe_combine_backward)(float *dy, float *dw, const float *dout, const float *y,
                                 const int32_t *rows, const float *w, const int32_t *widx,
                                 int n, int C);

    /* ---- memory: the engine never touches tensor memory with libc ----
     * Tensors live in this backend's memory (host memory for "cpu", device
     * memory for "cuda"); sizes are BYTES. Every op is ordered on the
     * backend's one compute stream (CUDA: the stream the kernels run on; CPU:
     * program order), so a kernel issued after a copy sees its result;
     * `synchronize` waits for everything issued so far (a no-op on CPU),
     * which host code must call before reading results it copied to host. */
    /* A zero-filled block of `bytes` (> 0); NULL when out of memory. Free
     * with mem_free (NULL no-op). */
    void *(*mem_alloc)(size_t bytes);
    void (*mem_free)(void *ptr);
    /* dst[0, bytes) = byte (memset semantics). */
    void (*mem_set)(void *dst, int byte, size_t bytes);
    /* Copies within this backend's memory; src and dst do not overlap. */
    void (*mem_copy)(void *dst, const void *src, size_t bytes);
    /* Copies between this backend's memory and host memory. */
    void (*mem_copy_to_host)(void *host_dst, const void *src, size_t bytes);
    void (*mem_copy_from_host)(void *dst, const void *host_src, size_t bytes);
    /* A copy of `bytes` from this backend's memory to host memory that
     * does not wait (engine/moe.c issues the router's two copies,
     * then one `synchronize`): ordered on the compute stream like every op
     * above (it copies src as the ops issued before it left it, whatever
     * later ops write there); host_dst (any host memory: pageable or
     * pinned) holds the bytes only after the next `synchronize` returns,
     * and must stay valid and untouched until then. CPU: a plain copy;
     * CUDA: cudaMemcpyAsync into a pinned staging buffer, the bytes
     * copied on to host_dst at `synchronize` (into pageable memory
     * cudaMemcpyAsync itself would wait); sim: deferred to `synchronize`,
     * so a reader that skips the wait sees stale bytes. NULL in tables
     * without it: callers use mem_copy_to_host. */
    void (*mem_copy_to_host_async)(void *host_dst, const void *src, size_t bytes);
    /* Waits until every op issued on the compute stream has finished. */
    void (*synchronize)(void);
    /* The device's memory as its runtime reports it (CUDA: cudaMemGetInfo
     * on the open device, *used_p = total - free), bytes: PX_OK, or an
     * error when the runtime fails. NULL for backends without device
     * memory (cpu). */
    px_status_t (*mem_info)(uint64_t *used_p, uint64_t *total_p);
    /* Asynchronous copies for the transport's staging (px_stage.c): copies
     * `bytes` between this backend's memory and (pinned) host memory on a
     * copy stream of its own, ordered after every op issued so far on the
     * compute stream, so that copies overlap kernels and communication.
     * Returns a ticket (> 0), or 0 when the copy could not be issued (the
     * caller then copies synchronously). copy_wait blocks until copy
     * `ticket` and every copy issued before it have finished; only then may
     * the host read (to host) or reuse (from host) its buffer, and later
     * ops on the compute stream see the result. NULL (cpu): none. */
    uint64_t (*mem_copy_async)(void *dst, const void *src, size_t bytes, int to_host);
    void (*copy_wait)(uint64_t ticket);

    /* ---- device buffers shared between the processes of one node (issue
     * 12; the transport's CUDA IPC path, transport/px_ipc.c, as NCCL's P2P
     * transport). NULL in backends without them (cpu): the transport then
     * stages device buffers through host memory. Ordered on the compute
     * stream like every op above; `synchronize` makes their results
     * visible to other processes. */
    /* dst[i] = a[i] OP b[i] for i < count elements of `dtype` (px_dtype_t)
     * with `op` (px_redop_t): the semantics and operand order of
     * px_reduce_apply (kernels/px_reduce.h: AVG adds, integers wrap,
     * fp16/bf16 in fp32 rounded once), on this backend's memory; dst may
     * be a or b. a and b may be a peer's memory opened by ipc_open.
     * PX_ERR_INVALID_ARGUMENT for an unknown dtype/op, PX_ERR_INTERNAL when
     * the launch fails. CUDA: px_reduce_cuda.cu's kernel. */
    px_status_t (*reduce)(void *dst, const void *a, const void *b, size_t count, int dtype,
                          int op);
    /* dst[i] /= n (count elements): AVG's last step, as
     * px_reduce_avg_finish (floats divide exactly, integers truncate). */
    void (*reduce_avg_finish)(void *dst, size_t count, int dtype, int n);
    /* A handle other processes of this node can open for the allocation
     * that holds `ptr` (CUDA: cudaIpcGetMemHandle of the allocation's base,
     * from cuMemGetAddressRange, and ptr's offset from that base). The
     * handle is plain bytes (copy it anywhere); it stays valid while the
     * allocation lives. PX_ERR_INVALID_ARGUMENT when ptr is not this
     * backend's memory, PX_ERR_INTERNAL when the runtime refuses. */
    px_status_t (*ipc_handle)(const void *ptr, px_ipc_handle_t *handle_p);
    /* Maps a peer's handle into this process: *ptr_p = the peer's ptr as
     * seen here (the base mapping plus the handle's offset), usable as a
     * source or destination of mem_copy and reduce. Opening is expensive
     * (CUDA: cudaIpcOpenMemHandle), so the backend caches mappings per
     * handle and counts references; every successful ipc_open is paired
     * with one ipc_close of the same handle. Errors: PX_ERR_INTERNAL (the
     * runtime cannot open it: another node's handle, a freed allocation, a
     * device without peer access), logged. */
    px_status_t (*ipc_open)(const px_ipc_handle_t *handle, void **ptr_p);
    /* Drops one reference to `handle`'s mapping (unmapped at the last);
     * an unknown handle is a no-op. The caller has synchronized every op
     * that used the mapping. */
    void (*ipc_close)(const px_ipc_handle_t *handle);

    /* ---- ordering device work between the processes of one node without
     * a host wait (the IPC path's `event` protocol, PX_IPC_PROTOCOL; as
     * PyTorch shares CUDA events between processes). NULL in backends
     * without them: the path then synchronizes (`sync` protocol). */
    /* dst[i] = s[m-1] OP (... OP (s[1] OP s[0])) for i < count elements,
     * each step px_reduce_apply's (the operand order of `reduce` with a =
     * the next source, b = the partial result), in one pass; AVG adds and
     * then divides once by m as reduce_avg_finish. Written to dst and, when
     * dst2 is not NULL, to dst2 as well. srcs: m host-held pointers (1 <= m
     * <= PX_REDUCE_MULTI_MAX) to this backend's memory or ipc_open'ed peer
     * memory; dst may be one of them. PX_ERR_INVALID_ARGUMENT for an unknown
     * dtype/op or m out of range, PX_ERR_INTERNAL when the launch fails. */
    px_status_t (*reduce_multi)(void *dst, void *dst2, const void *const *srcs, int m,
                                size_t count, int dtype, int op);
    /* A new event other processes of this node can open (CUDA:
     * cudaEventCreateWithFlags(cudaEventInterprocess | cudaEventDisableTiming)
     * and cudaIpcGetEventHandle): *event_p owned by the caller
     * (event_destroy), *handle_p plain bytes (offset 0). PX_ERR_INTERNAL
     * when the runtime refuses. */
    px_status_t (*event_ipc_create)(void **event_p, px_ipc_handle_t *handle_p);
    /* Opens a peer's event handle (cudaIpcOpenEventHandle) into *event_p
     * (event_destroy when done). PX_ERR_INTERNAL when the runtime refuses. */
    px_status_t (*event_ipc_open)(const px_ipc_handle_t *handle, void **event_p);
    /* Destroys an event of event_ipc_create or event_ipc_open; NULL no-op. */
    void (*event_destroy)(void *event);
    /* Records `event` on the compute stream: it completes when every op
     * issued before it has. PX_ERR_INTERNAL when the runtime fails. */
    px_status_t (*event_record)(void *event);
    /* Makes the compute stream wait, on the device, for the most recent
     * record of `event` made before this call (by any process), without
     * blocking the host. PX_ERR_INTERNAL when the runtime fails. */
    px_status_t (*stream_wait_event)(void *event);
} px_kernel_ops_t;

/* The most sources one reduce_multi takes. */
#define PX_REDUCE_MULTI_MAX 16

/* The CPU op table (OpenBLAS). Static; never NULL. */
const px_kernel_ops_t *px_kernels_cpu(void);

#endif
