/* moe.h: the mixture-of-experts MLP of the GPT (Switch Transformer, Fedus
 * et al. 2021; GShard, Lepikhin et al. 2020) and expert parallelism.
 *
 * In a MoE layer (layer l with (l + 1) % moe_every == 0) the dense MLP
 * x -> fcproj(gelu(fc(x))) is replaced by:
 *   probs (N,E) = softmax(x @ router^T), router (E,C), no bias;
 *   each token's top_k experts (ties: lower index), gates renormalised over
 *   the two with top-2, the probability itself with top-1;
 *   out_t = sum_j gate_tj * expert_{e_tj}(x_t), expert e an MLP
 *   fcproj_e(gelu(fc_e(x))) with fcw (4C,C) fcb (4C) fcprojw (C,4C)
 *   fcprojb (C) of its own;
 *   expert capacity ceil(Ng x K / E x F) over the Ng tokens of the
 *   expert-parallel group (so every rank of it agrees), filled in the
 *   order (choice j, token in the single-rank order: the token blocks of
 *   px_moe_set_token_blocks): all first choices before any second
 *   (GShard); a choice past the capacity is dropped (it adds 0, so a token
 *   with every choice dropped leaves the block as its residual input);
 *   dropless: no capacity;
 *   Switch's load-balancing loss aux = coef x E x sum_e f_e P_e over the
 *   global batch's tokens (the dp group's: the same value as one rank),
 *   f_e the share of the choices that picked e (before dropping), P_e the
 *   mean router probability of e; it is added to the training loss.
 * The dense fcw..fcprojb of a MoE layer stay in the layer's unit (the
 * tensor table is shared by every layer) but are not used: their
 * gradients are 0.
 *
 * Expert parallelism: the ep group's rank r holds experts [r E/ep,
 * (r+1) E/ep) of every MoE layer. Tokens go to the ranks of their experts
 * by px_alltoallv (uneven and zero counts) and come back the same way; the
 * counts every rank sends are known everywhere from one all-gather of the
 * per-expert choice counts, so no count exchange precedes the data.
 * Gradients: the router is replicated over the dp group and reduced over
 * it; an expert's gradient is summed over the edp group (the ranks holding
 * replicas of the same experts: dp x cp / ep of them), then both are
 * divided by dp x accum, the same factor as every other gradient: each
 * parameter's gradient is d(global loss), never counted twice.
 *
 * With the other strategies: cp ranks hold sequence chunks
 * and are part of the ep group (ep inside dp x cp; the capacity's fill
 * order follows the single-rank token order through the token blocks);
 * pp stages hold their own MoE layers, with an activation slot per
 * micro-batch in flight (px_moe_create_stage); tp: the experts are
 * replicated over the tensor group, every tensor rank computing the whole
 * MoE MLP on the whole (B,T,C) hidden state (gpt.c) with its own ep group
 * (the ranks of its tp index): the simplest correct form, no tp
 * collective in the MoE layer and no change to the routing; splitting the
 * experts' matmuls over tp (Megatron's expert tensor parallelism) would
 * cut their memory and time by tp at the price of two tp collectives per
 * MoE layer and is not built.
 * State: the routers and this rank's experts are the expert parameter
 * group (experts.h), outside the model's units and outside ZeRO; this
 * file routes, dispatches, runs the experts' math and combines, reading
 * the group's parameters and adding into its gradients. Their
 * reduction, norm, update, initialisation and canonical re-cut are the
 * group's. One training thread; collectives on the groups given at
 * create. */
#ifndef PX_MOE_H
#define PX_MOE_H

#include <stddef.h>
#include <stdint.h>

#include "px_kernels.h"
#include "px_status.h"
#include "px_transport.h"

/* The mixture's shape (jobcfg.h's fields). */
typedef struct px_moe_config {
    int layers, dim;       /* the model's */
    int experts, top_k;    /* E >= 1, K in 1..2, K <= E */
    int moe_every;         /* layer l is MoE when (l + 1) % moe_every == 0 */
    int dropless;          /* 1: no capacity */
    float capacity_factor; /* F */
    float aux_loss_coef;   /* Switch's alpha */
} px_moe_config_t;

/* The tensor table's MoE part (planner/model.h px_model_moe_*), for a
 * px_moe_config_t. Canonical tensors of one MoE layer, in this order:
 * router (E,C), fcw (E,4C,C), fcb (E,4C), fcprojw (E,C,4C), fcprojb (E,C);
 * the canonical MoE buffer is the MoE layers' tensors back to back. */
#define PX_MOE_NUM_TENSORS 5
/* Name and element count of tensor i of one MoE layer. */
const char *px_moe_tensor_name(int i);
uint64_t px_moe_tensor_size(const px_moe_config_t *cfg, int i);
/* MoE layers of the model, and the canonical MoE parameter count (all
 * experts). */
int px_moe_num_layers(const px_moe_config_t *cfg);
uint64_t px_moe_num_params(const px_moe_config_t *cfg);
/* Parameter elements one rank of an ep group of `ep` holds (routers + its
 * E/ep experts of every MoE layer). */
uint64_t px_moe_rank_params(const px_moe_config_t *cfg, int ep);
/* 1 when layer l is a MoE layer. */
int px_moe_is_layer(const px_moe_config_t *cfg, int l);

typedef struct px_moe px_moe_t;
typedef struct px_experts px_experts_t; /* experts.h */

/* Creates the mixture for token batches of at most N tokens per forward
 * over the expert group `ex` (experts.h, made for the same cfg and ep
 * group; borrowed for the object's life: its layers are the ones run
 * here). ep: the expert-parallel group (NULL: alone); dp: the group the
 * load-balancing loss's router probabilities are summed over (the
 * data-parallel group; NULL: alone), dp_size its ranks (dp x cp). Groups
 * and ops borrowed. Memory: the activations of every MoE layer for N
 * tokens at worst-case routing (memacct activations). Errors:
 * PX_ERR_INVALID_ARGUMENT (logged: E not divisible by the ep group, K out
 * of range, an expert group of another split), PX_ERR_NO_MEMORY. */
px_status_t px_moe_create(const px_moe_config_t *cfg, const px_kernel_ops_t *ops, int N,
                          px_comm_t *ep, px_comm_t *dp, int dp_size, px_experts_t *ex,
                          px_moe_t **moe_p);
/* A stage's mixture (pipeline.h): as px_moe_create, with `slots`
 * activation slots per MoE layer (the micro-batches a schedule keeps in
 * flight: forward and backward of slot k go together,
 * px_moe_forward_slot). Errors as px_moe_create (slots < 1: invalid). */
px_status_t px_moe_create_stage(const px_moe_config_t *cfg, const px_kernel_ops_t *ops, int N,
                                px_comm_t *ep, px_comm_t *dp, int dp_size, px_experts_t *ex,
                                int slots, px_moe_t **moe_p);
void px_moe_destroy(px_moe_t *moe); /* NULL no-op */
const px_moe_config_t *px_moe_config(const px_moe_t *moe);

/* The single-rank order of this rank's tokens, for the capacity's fill
 * order: the N local tokens of every forward are nb blocks of N/nb
 * consecutive tokens, block b at place keys[b] of the order in which one
 * rank would see them (keys unique over the ep group; each block's tokens
 * in that order). The capacity is filled by choice j, then block key, then
 * token, so with the ep group holding the whole batch the same choices are
 * kept as on one rank, whichever slices (dp rows, cp chunks) the ranks
 * hold. Default: one block, key = the ep rank (the ep ranks' slices in
 * batch order, as dp x ep lays them out). Copies keys. Errors:
 * PX_ERR_INVALID_ARGUMENT (nb does not divide the create-time N; logged),
 * PX_ERR_NO_MEMORY. */
px_status_t px_moe_set_token_blocks(px_moe_t *moe, int nb, const int64_t *keys);

/* Layer l's MoE forward: out (N,C) (overwritten) from x (N,C), N <= the
 * create-time N, the same N on every rank of the ep group. Collective over
 * the ep group (one all-gather, one all-reduce, two all-to-all-v). Keeps
 * what backward needs until the next forward of l. Errors: the
 * collectives'. */
px_status_t px_moe_forward(px_moe_t *moe, int l, const float *x, float *out, int N);
/* Layer l's backward: dx (N,C) (overwritten) = d(loss)/dx through the
 * experts and the router from dout (N,C) (x as given to forward; it must
 * still hold the same values); adds the router's and the local experts'
 * gradients (and the load-balancing loss's, for the router). Collective
 * over the ep group. */
px_status_t px_moe_backward(px_moe_t *moe, int l, const float *x, const float *dout, float *dx,
                            int N);
/* px_moe_forward / px_moe_backward on activation slot `slot` (0 ..
 * slots-1): each slot keeps its own forward state until its backward, so
 * a pipeline's micro-batches in flight do not overwrite each other. The
 * forwards and backwards of the ep group's ranks must come in the same
 * order (the same schedule on the same stage). The plain calls use slot 0. */
px_status_t px_moe_forward_slot(px_moe_t *moe, int slot, int l, const float *x, float *out,
                                int N);
px_status_t px_moe_backward_slot(px_moe_t *moe, int slot, int l, const float *x,
                                 const float *dout, float *dx, int N);
/* Sum over the MoE layers of slot 0's last forward's load-balancing
 * losses. */
float px_moe_aux_loss(const px_moe_t *moe);
/* The same of activation slot `slot` (0 .. slots-1). */
float px_moe_aux_loss_slot(const px_moe_t *moe, int slot);
/* Sum of the load-balancing losses of every forward (layer, micro-batch)
 * since px_moe_begin_step. */
double px_moe_aux_loss_step(const px_moe_t *moe);

/* Before a step's first micro-batch: zero the step's token counts and
 * load-balancing losses (the gradients are the expert group's,
 * experts.h). */
void px_moe_begin_step(px_moe_t *moe);

/* Tokens of the last step's micro-batches, summed over the MoE layers, per
 * expert (E each, host memory): choices routed to it and kept (received),
 * and choices dropped at its capacity; the ep group's figures (every rank
 * of it has them). */
void px_moe_token_stats(const px_moe_t *moe, uint64_t *received, uint64_t *dropped);

/* Test hook: from now on `skew` is added to expert 0's router logit and
 * skew/2 to expert 1's (a constant: no gradient), so most tokens route to
 * them (the skewed-routing test). */
void px_moe_set_router_skew(px_moe_t *moe, float skew);

/* Seconds this rank spent in the dispatch / combine all-to-alls since
 * create. */
double px_moe_alltoall_s(const px_moe_t *moe);

#endif
