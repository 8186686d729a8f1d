/* pipeline.c: one pipeline stage's runner (pipeline.h).
 *
 * State per round: for each micro-batch m its slot (slot_of[m]) and up to
 * four requests: the receive of its activation (stages > 0), the send of
 * its output activation (stages < p-1), the receive of its output gradient
 * (stages < p-1) and the send of its input gradient (stages > 0). A slot
 * is one external model (its own activations, the stage's parameters
 * through the ZeRO hooks) plus the micro-batch's token buffers. A slot is
 * reused only after both sends of its previous occupant completed (they
 * read the slot's buffers). Requests are progressed between the model's
 * big ops (the hooks' progress) and by every wait; all are complete or
 * cancelled when a round returns.
 *
 * Times: idle = inside a wait for a neighbour (receives, slot reuse, the
 * end-of-round sends); busy = the rest of the round. One training thread. */
#include "pipeline.h"

#include <stdlib.h>
#include <string.h>

#include "memacct.h"
#include "px_coll.h"
#include "px_log.h"
#include "px_time.h"

enum { REQ_ACT_RECV, REQ_ACT_SEND, REQ_GRAD_RECV, REQ_GRAD_SEND, REQ_N };

struct px_pipe {
    px_gpt_config_t gc;
    const px_kernel_ops_t *ops;
    px_zero_t *zero;
    const px_gpt_hooks_t *zh; /* the ZeRO hooks the slots' hooks forward to */
    px_gpt_hooks_t hooks;
    px_groups_t *groups;
    px_comm_t *comm; /* the pp group: rank = stage */
    px_pipe_schedule_t *sched;
    int p, s, M, l0, l1, nslots, Bm, T;
    uint32_t gen;    /* round counter, in the tags */
    px_gpt_t **slot; /* [nslots] */
    int32_t **inputs, **targets; /* [nslots] (Bm*T) */
    int *slot_of;    /* [M] */
    int *occupant;   /* [nslots] last micro-batch, -1 none */
    int *busy;       /* [nslots] */
    px_request_t **req; /* [M * REQ_N] */
    px_status_t deferred; /* first error a progress poke saw; returned by
                             the next wait */
    double idle_s, busy_s;
};

void px_pipe_stage_units(int layers, int p, const int *sl, int s, unsigned char *held)
{
    int l0 = 0;
    for (int i = 0; i < s; i++)
        l0 += sl[i];
    memset(held, 0, (size_t)layers + 2);
    held[0] = s == 0 || s == p - 1;
    held[layers + 1] = s == p - 1;
    for (int l = l0; l < l0 + sl[s]; l++)
        held[1 + l] = 1;
}

/* ---- hooks: the ZeRO state's, plus progress of the pipeline's requests ---- */

static px_status_t h_pacq(void *arg, int u, int phase, float **p)
{
    px_pipe_t *pp = arg;
    return pp->zh->params_acquire(pp->zh->arg, u, phase, p);
}

static px_status_t h_prel(void *arg, int u, int phase)
{
    px_pipe_t *pp = arg;
    return pp->zh->params_release(pp->zh->arg, u, phase);
}

static px_status_t h_gacq(void *arg, int u, float **g)
{
    px_pipe_t *pp = arg;
    return pp->zh->grads_acquire(pp->zh->arg, u, g);
}

static px_status_t h_grel(void *arg, int u)
{
    px_pipe_t *pp = arg;
    return pp->zh->grads_release(pp->zh->arg, u);
}

static const char *req_name(int kind)
{
    static const char *n[REQ_N] = {"activation receive", "activation send", "gradient receive",
                                   "gradient send"};
    return n[kind];
}

/* Tests every request in flight once; a finished one is freed and its
 * slot cleared; a failed one (px_test freed it too) is logged and its
 * error kept for the next wait. */
static void poke_all(px_pipe_t *pp)
{
    for (int i = 0; i < pp->M * REQ_N; i++)
        if (pp->req[i]) {
            int done = 0;
            px_status_t st = px_test(pp->req[i], &done);
            if (done || st != PX_OK) {
                if (st != PX_OK) {
                    px_error("pipeline: stage %d of %d: %s of micro-batch %d failed: %s (%s)",
                             pp->s, pp->p, req_name(i % REQ_N), i / REQ_N, px_status_str(st),
                             px_comm_last_error(pp->comm));
                    if (pp->deferred == PX_OK)
                        pp->deferred = st;
                }
                pp->req[i] = NULL;
            }
        }
}

static void h_progress(void *arg)
{
    px_pipe_t *pp = arg;
    if (pp->zh->progress)
        pp->zh->progress(pp->zh->arg);
    poke_all(pp);
}

/* ---- create / destroy ---- */

px_status_t px_pipe_create(const px_gpt_config_t *gc, const px_kernel_ops_t *ops, px_zero_t *zero,
                           px_groups_t *groups, int kind, int M, const int *sl, int Bm, int T,
                           px_pipe_t **pipe_p)
{
    px_status_t status;
    px_pipe_t *pp = calloc(1, sizeof(*pp));
    if (!pp)
        return PX_ERR_NO_MEMORY;
    pp->gc = *gc;
    pp->ops = ops;
    pp->zero = zero;
    pp->zh = px_zero_hooks(zero);
    pp->hooks = (px_gpt_hooks_t){.arg = pp, .params_acquire = h_pacq, .params_release = h_prel,
                                 .grads_acquire = h_gacq, .grads_release = h_grel,
                                 .progress = h_progress};
    pp->groups = groups;
    pp->comm = px_groups_comm(groups, PX_GROUP_PP);
    pp->p = px_groups_layout(groups)->pp;
    pp->s = px_groups_coord(groups)->pp;
    pp->M = M;
    pp->Bm = Bm;
    pp->T = T;
    for (int i = 0; i < pp->s; i++)
        pp->l0 += sl[i];
    pp->l1 = pp->l0 + sl[pp->s];
    if (!pp->comm || px_comm_size(pp->comm) != pp->p || px_comm_rank(pp->comm) != pp->s) {
        px_error("pipeline: the pp group does not match the layout (pp %d, stage %d)", pp->p,
                 pp->s);
        status = PX_ERR_INVALID_ARGUMENT;
        goto err;
    }
    status = px_pipe_schedule_create(kind, pp->p, M, &pp->sched);
    if (status != PX_OK) {
        px_error("pipeline: cannot build schedule %s for pp %d, %d micro-batches",
                 px_pipe_schedule_name(kind), pp->p, M);
        goto err;
    }
    pp->nslots = px_pipe_schedule_slots(pp->sched, pp->s);
    pp->slot = calloc((size_t)pp->nslots, sizeof(*pp->slot));
    pp->inputs = calloc((size_t)pp->nslots, sizeof(*pp->inputs));
    pp->targets = calloc((size_t)pp->nslots, sizeof(*pp->targets));
    pp->occupant = malloc((size_t)pp->nslots * sizeof(int));
    pp->busy = calloc((size_t)pp->nslots, sizeof(int));
    pp->slot_of = malloc((size_t)M * sizeof(int));
    pp->req = calloc((size_t)M * REQ_N, sizeof(*pp->req));
    status = PX_ERR_NO_MEMORY;
    if (!pp->slot || !pp->inputs || !pp->targets || !pp->occupant || !pp->busy || !pp->slot_of ||
        !pp->req)
        goto err;
    for (int k = 0; k < pp->nslots; k++) {
        pp->occupant[k] = -1;
        PX_CHECK_GOTO(px_gpt_create_stage(gc, ops, Bm, T, &pp->hooks, pp->l0, pp->l1 - pp->l0,
                                          &pp->slot[k]), status, err);
        if (px_pipe_schedule_split(pp->sched))
            PX_CHECK_GOTO(px_gpt_set_split_backward(pp->slot[k]), status, err);
        pp->inputs[k] = px_mem_calloc(PX_MEM_WORK, (size_t)Bm * T, sizeof(int32_t));
        pp->targets[k] = px_mem_calloc(PX_MEM_WORK, (size_t)Bm * T, sizeof(int32_t));
        if (!pp->inputs[k] || !pp->targets[k]) {
            status = PX_ERR_NO_MEMORY;
            goto err;
        }
    }
    *pipe_p = pp;
    return PX_OK;
err:
    px_pipe_destroy(pp);
    return status;
}

static void cancel_all(px_pipe_t *pp)
{
    for (int i = 0; pp->req && i < pp->M * REQ_N; i++)
        if (pp->req[i]) {
            px_request_cancel(pp->req[i]);
            pp->req[i] = NULL;
        }
}

void px_pipe_destroy(px_pipe_t *pp)
{
    if (!pp)
        return;
    cancel_all(pp);
    for (int k = 0; pp->slot && k < pp->nslots; k++) {
        px_gpt_destroy(pp->slot[k]);
        px_mem_free(pp->inputs[k]);
        px_mem_free(pp->targets[k]);
    }
    free(pp->slot);
    free(pp->inputs);
    free(pp->targets);
    free(pp->occupant);
    free(pp->busy);
    free(pp->slot_of);
    free(pp->req);
    px_pipe_schedule_destroy(pp->sched);
    free(pp);
}

/* ---- the round ---- */

static uint32_t tag_of(const px_pipe_t *pp, int kind, int m)
{
    return ((pp->gen & 0x3ffu) << 21) | ((uint32_t)kind << 18) | (uint32_t)m;
}

/* Waits for request `kind` of micro-batch m (if in flight), counting the
 * time as idle. */
static px_status_t wait_req(px_pipe_t *pp, int kind, int m)
{
    px_request_t **r = &pp->req[(size_t)m * REQ_N + kind];
    if (pp->deferred != PX_OK)
        return pp->deferred;
    if (!*r)
        return PX_OK;
    double t0 = px_time_mono_s();
    px_status_t status = px_wait(*r, -1);
    *r = NULL;
    pp->idle_s += px_time_mono_s() - t0;
    if (status != PX_OK)
        px_error("pipeline: stage %d of %d: %s of micro-batch %d with stage %d failed: %s (%s)",
                 pp->s, pp->p, req_name(kind), m,
                 kind == REQ_ACT_RECV || kind == REQ_GRAD_SEND ? pp->s - 1 : pp->s + 1,
                 px_status_str(status), px_comm_last_error(pp->comm));
    return status;
}

/* A slot for micro-batch m, once its previous occupant's sends are done. */
static px_status_t take_slot(px_pipe_t *pp, int m, int *slot_p)
{
    int k = 0;
    while (k < pp->nslots && pp->busy[k])
        k++;
    if (k == pp->nslots) {
        px_error("pipeline: stage %d: no free slot for micro-batch %d (%d slots)", pp->s, m,
                 pp->nslots);
        return PX_ERR_INTERNAL;
    }
    int q = pp->occupant[k];
    if (q >= 0) {
        PX_CHECK(wait_req(pp, REQ_ACT_SEND, q));
        PX_CHECK(wait_req(pp, REQ_GRAD_SEND, q));
    }
    pp->busy[k] = 1;
    pp->occupant[k] = m;
    pp->slot_of[m] = k;
    *slot_p = k;
    return PX_OK;
}

static px_status_t start(px_pipe_t *pp, int kind, int m, void *buf, size_t n)
{
    int peer = kind == REQ_ACT_RECV || kind == REQ_GRAD_SEND ? pp->s - 1 : pp->s + 1;
    int tk = kind == REQ_ACT_RECV || kind == REQ_ACT_SEND ? 0 : 1;
    px_request_t **r = &pp->req[(size_t)m * REQ_N + kind];
    px_status_t status;
    if (kind == REQ_ACT_SEND || kind == REQ_GRAD_SEND)
        status = px_send_start(pp->comm, peer, tag_of(pp, tk, m), buf, n * sizeof(float), NULL, r);
    else
        status = px_recv_start(pp->comm, peer, tag_of(pp, tk, m), buf, n * sizeof(float), NULL, r);
    if (status != PX_OK)
        px_error("pipeline: stage %d: cannot start the %s of micro-batch %d: %s", pp->s,
                 req_name(kind), m, px_status_str(status));
    return status;
}

static px_status_t forward(px_pipe_t *pp, int m, px_pipe_load_fn load, void *arg, float *loss_sum)
{
    const int first = pp->s == 0, last = pp->s == pp->p - 1;
    int k;
    if (first)
        PX_CHECK(take_slot(pp, m, &k));
    else {
        k = pp->slot_of[m];
        PX_CHECK(wait_req(pp, REQ_ACT_RECV, m));
    }
    px_gpt_t *g = pp->slot[k];
    px_gpt_ctx_t ctx = px_gpt_ctx_default(g);
    ctx.groups = pp->groups;
    if (first || last)
        load(arg, m, first ? pp->inputs[k] : NULL, last ? pp->targets[k] : NULL);
    if (first)
        PX_CHECK(px_gpt_embed_forward(g, &ctx, pp->inputs[k]));
    for (int l = pp->l0; l < pp->l1; l++)
        PX_CHECK(px_gpt_block_forward(g, &ctx, l));
    if (last) {
        float loss = 0.0f;
        PX_CHECK(px_gpt_head_forward(g, &ctx, pp->targets[k], &loss));
        *loss_sum += loss;
    }
    return PX_OK;
}

static px_status_t backward(px_pipe_t *pp, int m)
{
    const int first = pp->s == 0, last = pp->s == pp->p - 1;
    const int split = px_pipe_schedule_split(pp->sched);
    int k = pp->slot_of[m];
    px_gpt_t *g = pp->slot[k];
    px_gpt_ctx_t ctx = px_gpt_ctx_default(g);
    ctx.groups = pp->groups;
    if (!last)
        PX_CHECK(wait_req(pp, REQ_GRAD_RECV, m));
    else
        PX_CHECK(px_gpt_head_backward(g, &ctx));
    for (int l = pp->l1 - 1; l >= pp->l0; l--)
        PX_CHECK(split ? px_gpt_block_backward_input(g, &ctx, l)
                       : px_gpt_block_backward(g, &ctx, l));
    if (first)
        PX_CHECK(px_gpt_embed_backward(g, &ctx));
    if (!split) /* split: the slot's activations wait for the weight pass */
        pp->busy[k] = 0;
    return PX_OK;
}

/* The weight pass of micro-batch m (split schedules): the layers' matmul
 * weight gradients and, on the last stage, the tied head's wte gradient. */
static px_status_t weight_pass(px_pipe_t *pp, int m)
{
    int k = pp->slot_of[m];
    px_gpt_t *g = pp->slot[k];
    px_gpt_ctx_t ctx = px_gpt_ctx_default(g);
    ctx.groups = pp->groups;
    if (pp->s == pp->p - 1)
        PX_CHECK(px_gpt_head_backward_weight(g, &ctx));
    for (int l = pp->l1 - 1; l >= pp->l0; l--)
        PX_CHECK(px_gpt_block_backward_weight(g, &ctx, l));
    pp->busy[k] = 0;
    return PX_OK;
}

static px_status_t run_action(px_pipe_t *pp, const px_pipe_action_t *a, px_pipe_load_fn load,
                              void *arg, float *loss_sum)
{
    int m = a->micro, k;
    float *x, *dx;
    size_t n;
    switch (a->op) {
    case PX_PIPE_RECV_ACT:
        PX_CHECK(take_slot(pp, m, &k));
        px_gpt_stage_io(pp->slot[k], pp->l0, &x, &dx, &n);
        return start(pp, REQ_ACT_RECV, m, x, n);
    case PX_PIPE_FWD:
        return forward(pp, m, load, arg, loss_sum);
    case PX_PIPE_SEND_ACT:
        px_gpt_stage_io(pp->slot[pp->slot_of[m]], pp->l1, &x, &dx, &n);
        return start(pp, REQ_ACT_SEND, m, x, n);
    case PX_PIPE_RECV_GRAD:
        px_gpt_stage_io(pp->slot[pp->slot_of[m]], pp->l1, &x, &dx, &n);
        return start(pp, REQ_GRAD_RECV, m, dx, n);
    case PX_PIPE_BWD:
        return backward(pp, m);
    case PX_PIPE_SEND_GRAD:
        px_gpt_stage_io(pp->slot[pp->slot_of[m]], pp->l0, &x, &dx, &n);
        return start(pp, REQ_GRAD_SEND, m, dx, n);
    case PX_PIPE_WGT:
        return weight_pass(pp, m);
    default:
        px_error("pipeline: stage %d: unknown action %d", pp->s, a->op);
        return PX_ERR_INTERNAL;
    }
}

px_status_t px_pipe_round(px_pipe_t *pp, px_pipe_load_fn load, void *arg, float *loss_sum_p)
{
    const px_pipe_list_t *list = &pp->sched->stage[pp->s];
    px_status_t status = PX_OK;
    float loss_sum = 0.0f;
    double t0 = px_time_mono_s(), idle0 = pp->idle_s;

    pp->gen++;
    pp->deferred = PX_OK;
    for (int k = 0; k < pp->nslots; k++) {
        pp->occupant[k] = -1;
        pp->busy[k] = 0;
    }
    for (int m = 0; m < pp->M; m++)
        pp->slot_of[m] = -1;
    for (int i = 0; i < list->n && status == PX_OK; i++) {
        status = run_action(pp, &list->a[i], load, arg, &loss_sum);
        poke_all(pp);
    }
    for (int m = 0; m < pp->M && status == PX_OK; m++)
        for (int kind = 0; kind < REQ_N && status == PX_OK; kind++)
            status = wait_req(pp, kind, m);
    if (status != PX_OK)
        cancel_all(pp);
    pp->busy_s += (px_time_mono_s() - t0) - (pp->idle_s - idle0);
    if (status == PX_OK)
        *loss_sum_p = loss_sum;
    return status;
}

px_status_t px_pipe_tied_sum(px_pipe_t *pp)
{
    if (pp->p < 2 || (pp->s != 0 && pp->s != pp->p - 1))
        return PX_OK;
    uint64_t n = 0;
    float *g = px_zero_unit_grads(pp->zero, 0, &n);
    if (!g) {
        px_error("pipeline: the tied embedding's gradients are not held whole (ZeRO stage 2/3)");
        return PX_ERR_INVALID_ARGUMENT;
    }
    float *other = px_mem_calloc(PX_MEM_WORK, n, sizeof(float));
    if (!other)
        return PX_ERR_NO_MEMORY;
    int peer = pp->s == 0 ? pp->p - 1 : 0;
    uint32_t tag = ((pp->gen & 0x3ffu) << 21) | (2u << 18);
    px_request_t *rr = NULL, *sr = NULL;
    double t0 = px_time_mono_s();
    px_status_t status = px_recv_start(pp->comm, peer, tag, other, n * sizeof(float), NULL, &rr);
    if (status == PX_OK)
        status = px_send_start(pp->comm, peer, tag, g, n * sizeof(float), NULL, &sr);
    if (status == PX_OK) {
        status = px_wait(rr, -1);
        rr = NULL;
    }
    if (status == PX_OK) {
        status = px_wait(sr, -1);
        sr = NULL;
    }
    pp->idle_s += px_time_mono_s() - t0;
    px_request_cancel(rr);
    px_request_cancel(sr);
    if (status == PX_OK) /* g + other on one end, other + g on the other: equal bits */
        pp->ops->residual_forward(g, g, other, n);
    else
        px_error("pipeline: stage %d: the tied embedding's gradient exchange with stage %d "
                 "failed: %s (%s)", pp->s, peer, px_status_str(status),
                 px_comm_last_error(pp->comm));
    px_mem_free(other);
    return status;
}

void px_pipe_take_times(px_pipe_t *pp, double *busy_s_p, double *idle_s_p)
{
    *busy_s_p = pp->busy_s;
    *idle_s_p = pp->idle_s;
    pp->busy_s = pp->idle_s = 0.0;
}

size_t px_pipe_activation_bytes(const px_pipe_t *pp)
{
    return pp->nslots ? (size_t)pp->nslots * px_gpt_activation_bytes(pp->slot[0]) : 0;
}

void px_pipe_ring_times(const px_pipe_t *pp, px_ring_times_t *out)
{
    *out = (px_ring_times_t){0};
    for (int k = 0; k < pp->nslots; k++) {
        px_ring_times_t t;
        px_gpt_ring_times(pp->slot[k], &t);
        out->total_s += t.total_s;
        out->wait_s += t.wait_s;
        out->bytes += t.bytes;
        out->steps += t.steps;
    }
}

int px_pipe_stage(const px_pipe_t *pp) { return pp->s; }
int px_pipe_slots(const px_pipe_t *pp) { return pp->nslots; }
