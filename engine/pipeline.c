/* pipeline.c: one pipeline stage's runner (pipeline.h).
 *
 * The stage's state is per model chunk (chunk_t; one chunk unless the
 * schedule is interleaved): its layers, slots and requests. Per chunk and
 * round: for each micro-batch m its slot (slot_of[m]) and up to four
 * requests: the receive of its activation (virtual stages > 0), the send
 * of its output activation (virtual stages < pV-1), the receive of its
 * output gradient (virtual stages < pV-1) and the send of its input
 * gradient (virtual stages > 0). A slot is one external model (its own
 * activations, the chunk's parameters through the ZeRO hooks) plus the
 * micro-batch's token buffers. A slot is reused only after both sends of
 * its previous occupant completed (they read the slot's buffers); the
 * gradient receive lands in the slot's own residual-gradient buffer, so
 * the interleaved schedule may post it right after the activation send.
 * Requests are progressed between the model's big ops (the hooks'
 * progress) and by every wait; all are complete or cancelled when a round
 * returns.
 *
 * Times: idle = inside a wait for a neighbour (receives, slot reuse, the
 * end-of-round sends); busy = the rest of the round. One training thread. */
#include "pipeline.h"

#include <stdlib.h>
#include <string.h>

#include "memacct.h"
#include "moe.h"
#include "px_coll.h"
#include "px_log.h"
#include "px_time.h"

enum { REQ_ACT_RECV, REQ_ACT_SEND, REQ_GRAD_RECV, REQ_GRAD_SEND, REQ_N };

/* The tags carry (chunk * M + micro-batch) in 18 bits (tag_of). */
#define TAG_MICRO_MAX (1 << 18)

/* One model chunk of this stage (virtual stage j = c * p + s; V = 1: the
 * stage itself): its layers, slots and requests. */
typedef struct chunk {
    int c, j, l0, l1, nslots;
    int first, last;  /* virtual stage 0 (embedding) / p*V - 1 (head) */
    px_gpt_t **slot;  /* [nslots] */
    int32_t **inputs, **targets; /* [nslots] (Bm*T) */
    int *slot_of;     /* [M] */
    int *occupant;    /* [nslots] last micro-batch, -1 none */
    int *busy;        /* [nslots] */
    px_request_t **req; /* [M * REQ_N] */
} chunk_t;

struct px_pipe {
    px_gpt_config_t gc;
    const px_kernel_ops_t *ops;
    px_zero_t *zero;
    const px_gpt_hooks_t *zh; /* the ZeRO hooks the slots' hooks forward to */
    px_gpt_hooks_t hooks;
    px_groups_t *groups;
    px_comm_t *comm; /* the pp group: rank = stage */
    px_pipe_schedule_t *sched;
    struct px_moe *moe; /* px_pipe_set_moe's; NULL when dense */
    int p, s, M, V, Bm, T;
    uint32_t gen;    /* round counter, in the tags */
    chunk_t *ch;     /* [V] */
    px_status_t deferred; /* first error a progress poke saw; returned by
                             the next wait */
    double idle_s, busy_s;
};

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
    for (int c = 0; c < pp->V; c++)
        for (int i = 0; i < pp->M * REQ_N; i++) {
            px_request_t **r = &pp->ch[c].req[i];
            if (!*r)
                continue;
            int done = 0;
            px_status_t st = px_test(*r, &done);
            if (done || st != PX_OK) {
                if (st != PX_OK) {
                    px_error("pipeline: stage %d of %d, chunk %d: %s of micro-batch %d failed: "
                             "%s (%s)", pp->s, pp->p, c, req_name(i % REQ_N), i / REQ_N,
                             px_status_str(st), px_comm_last_error(pp->comm));
                    if (pp->deferred == PX_OK)
                        pp->deferred = st;
                }
                *r = NULL;
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

/* Allocates chunk c's slots (as many as the schedule holds at once). */
static px_status_t chunk_init(px_pipe_t *pp, chunk_t *ch, int c, const int *sl)
{
    px_status_t status;
    ch->c = c;
    ch->j = px_pipe_virtual_stage(pp->sched, pp->s, c);
    for (int i = 0; i < ch->j; i++)
        ch->l0 += sl[i];
    ch->l1 = ch->l0 + sl[ch->j];
    ch->first = ch->j == 0;
    ch->last = ch->j == pp->p * pp->V - 1;
    ch->nslots = px_pipe_schedule_chunk_slots(pp->sched, pp->s, c);
    ch->slot = calloc((size_t)ch->nslots, sizeof(*ch->slot));
    ch->inputs = calloc((size_t)ch->nslots, sizeof(*ch->inputs));
    ch->targets = calloc((size_t)ch->nslots, sizeof(*ch->targets));
    ch->occupant = malloc((size_t)ch->nslots * sizeof(int));
    ch->busy = calloc((size_t)ch->nslots, sizeof(int));
    ch->slot_of = malloc((size_t)pp->M * sizeof(int));
    ch->req = calloc((size_t)pp->M * REQ_N, sizeof(*ch->req));
    if (!ch->slot || !ch->inputs || !ch->targets || !ch->occupant || !ch->busy || !ch->slot_of ||
        !ch->req)
        return PX_ERR_NO_MEMORY;
    for (int k = 0; k < ch->nslots; k++) {
        ch->occupant[k] = -1;
        PX_CHECK_GOTO(px_gpt_create_stage(&pp->gc, pp->ops, pp->Bm, pp->T, &pp->hooks, ch->l0,
                                          ch->l1 - ch->l0, &ch->slot[k]), status, out);
        if (px_pipe_schedule_split(pp->sched))
            PX_CHECK_GOTO(px_gpt_set_split_backward(ch->slot[k]), status, out);
        if (ch->first)
            ch->inputs[k] = px_mem_calloc(PX_MEM_WORK, (size_t)pp->Bm * pp->T, sizeof(int32_t));
        if (ch->last)
            ch->targets[k] = px_mem_calloc(PX_MEM_WORK, (size_t)pp->Bm * pp->T, sizeof(int32_t));
        if ((ch->first && !ch->inputs[k]) || (ch->last && !ch->targets[k]))
            return PX_ERR_NO_MEMORY;
    }
    return PX_OK;
out:
    return status;
}

px_status_t px_pipe_create(const px_gpt_config_t *gc, const px_kernel_ops_t *ops, px_zero_t *zero,
                           px_groups_t *groups, int kind, int M, int V, const int *sl, int Bm,
                           int T, px_pipe_t **pipe_p)
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
    pp->p = px_groups_layout(groups)->pp > 1 ? px_groups_layout(groups)->pp : 1;
    pp->s = pp->p > 1 ? px_groups_coord(groups)->pp : 0;
    pp->M = M;
    pp->V = V;
    pp->Bm = Bm;
    pp->T = T;
    if (pp->p > 1 && (!pp->comm || px_comm_size(pp->comm) != pp->p ||
                      px_comm_rank(pp->comm) != pp->s)) {
        px_error("pipeline: the pp group does not match the layout (pp %d, stage %d)", pp->p,
                 pp->s);
        status = PX_ERR_INVALID_ARGUMENT;
        goto err;
    }
    if ((long long)M * V > TAG_MICRO_MAX) {
        px_error("pipeline: micro_batches=%d x virtual_stages=%d is more than the tags carry (%d)",
                 M, V, TAG_MICRO_MAX);
        status = PX_ERR_INVALID_ARGUMENT;
        goto err;
    }
    /* one stage (no pipelining): the one-stage list whatever the kind */
    status = pp->p == 1 && V == 1 ? px_pipe_schedule_create_single(M, &pp->sched)
                                  : px_pipe_schedule_create_v(kind, pp->p, M, V, &pp->sched);
    if (status != PX_OK) {
        px_error("pipeline: cannot build schedule %s for pp %d, %d micro-batches, %d chunks per "
                 "stage", px_pipe_schedule_name(kind), pp->p, M, V);
        goto err;
    }
    pp->ch = calloc((size_t)V, sizeof(*pp->ch));
    if (!pp->ch) {
        status = PX_ERR_NO_MEMORY;
        goto err;
    }
    for (int c = 0; c < V; c++)
        PX_CHECK_GOTO(chunk_init(pp, &pp->ch[c], c, sl), status, err);
    *pipe_p = pp;
    return PX_OK;
err:
    px_pipe_destroy(pp);
    return status;
}

static void cancel_all(px_pipe_t *pp)
{
    for (int c = 0; pp->ch && c < pp->V; c++)
        for (int i = 0; pp->ch[c].req && i < pp->M * REQ_N; i++)
            if (pp->ch[c].req[i]) {
                px_request_cancel(pp->ch[c].req[i]);
                pp->ch[c].req[i] = NULL;
            }
}

void px_pipe_destroy(px_pipe_t *pp)
{
    if (!pp)
        return;
    cancel_all(pp);
    for (int c = 0; pp->ch && c < pp->V; c++) {
        chunk_t *ch = &pp->ch[c];
        for (int k = 0; ch->slot && k < ch->nslots; k++)
            px_gpt_destroy(ch->slot[k]);
        for (int k = 0; ch->inputs && k < ch->nslots; k++)
            px_mem_free(ch->inputs[k]);
        for (int k = 0; ch->targets && k < ch->nslots; k++)
            px_mem_free(ch->targets[k]);
        free(ch->slot);
        free(ch->inputs);
        free(ch->targets);
        free(ch->occupant);
        free(ch->busy);
        free(ch->slot_of);
        free(ch->req);
    }
    free(pp->ch);
    px_pipe_schedule_destroy(pp->sched);
    free(pp);
}

/* ---- the round ---- */

/* The neighbour a request of kind `kind` goes to or comes from: the
 * previous virtual stage's rank for activation receives and gradient
 * sends, the next one's otherwise. */
static int peer_of(const px_pipe_t *pp, int kind)
{
    return kind == REQ_ACT_RECV || kind == REQ_GRAD_SEND ? (pp->s + pp->p - 1) % pp->p
                                                         : (pp->s + 1) % pp->p;
}

/* The tag of a message of micro-batch m crossing the boundary between
 * virtual stages b and b+1 (b = c * p + stage): round counter, direction
 * (tk 0 activation, 1 gradient, 2 the tied sum) and (chunk of b) * M + m.
 * The receive names its peer, so the two directions never meet. */
static uint32_t tag_of(const px_pipe_t *pp, int tk, int b, int m)
{
    return ((pp->gen & 0x3ffu) << 21) | ((uint32_t)tk << 18) |
           (uint32_t)((b / pp->p) * pp->M + m);
}

/* Waits for request `kind` of micro-batch m of chunk ch (if in flight),
 * counting the time as idle. */
static px_status_t wait_req(px_pipe_t *pp, chunk_t *ch, int kind, int m)
{
    px_request_t **r = &ch->req[(size_t)m * REQ_N + kind];
    if (pp->deferred != PX_OK)
        return pp->deferred;
    if (!*r)
        return PX_OK;
    double t0 = px_time_mono_s();
    px_status_t status = px_wait(*r, -1);
    *r = NULL;
    pp->idle_s += px_time_mono_s() - t0;
    if (status != PX_OK)
        px_error("pipeline: stage %d of %d, chunk %d: %s of micro-batch %d with stage %d failed: "
                 "%s (%s)", pp->s, pp->p, ch->c, req_name(kind), m, peer_of(pp, kind),
                 px_status_str(status), px_comm_last_error(pp->comm));
    return status;
}

/* A slot of chunk ch for micro-batch m, once its previous occupant's sends
 * are done. */
static px_status_t take_slot(px_pipe_t *pp, chunk_t *ch, int m, int *slot_p)
{
    int k = 0;
    while (k < ch->nslots && ch->busy[k])
        k++;
    if (k == ch->nslots) {
        px_error("pipeline: stage %d chunk %d: no free slot for micro-batch %d (%d slots)", pp->s,
                 ch->c, m, ch->nslots);
        return PX_ERR_INTERNAL;
    }
    int q = ch->occupant[k];
    if (q >= 0) {
        PX_CHECK(wait_req(pp, ch, REQ_ACT_SEND, q));
        PX_CHECK(wait_req(pp, ch, REQ_GRAD_SEND, q));
    }
    ch->busy[k] = 1;
    ch->occupant[k] = m;
    ch->slot_of[m] = k;
    *slot_p = k;
    return PX_OK;
}

static px_status_t start(px_pipe_t *pp, chunk_t *ch, int kind, int m, void *buf, size_t n)
{
    int peer = peer_of(pp, kind);
    int tk = kind == REQ_ACT_RECV || kind == REQ_ACT_SEND ? 0 : 1;
    int b = kind == REQ_ACT_RECV || kind == REQ_GRAD_SEND ? ch->j - 1 : ch->j;
    px_request_t **r = &ch->req[(size_t)m * REQ_N + kind];
    px_status_t status;
    if (kind == REQ_ACT_SEND || kind == REQ_GRAD_SEND)
        status = px_send_start(pp->comm, peer, tag_of(pp, tk, b, m), buf, n * sizeof(float),
                               NULL, r);
    else
        status = px_recv_start(pp->comm, peer, tag_of(pp, tk, b, m), buf, n * sizeof(float),
                               NULL, r);
    if (status != PX_OK)
        px_error("pipeline: stage %d chunk %d: cannot start the %s of micro-batch %d: %s", pp->s,
                 ch->c, req_name(kind), m, px_status_str(status));
    return status;
}

/* The forward of micro-batch m through chunk ch; its loss (the last
 * chunk) added to *loss_sum. In training (`train`) a chunk that is the
 * whole model adds the micro-batch's load-balancing losses to it (the
 * objective, as px_pipe_step_loss says); the evaluation leaves them out. */
static px_status_t forward(px_pipe_t *pp, chunk_t *ch, int m, px_pipe_load_fn load, void *arg,
                           int train, float *loss_sum)
{
    int k;
    if (ch->first)
        PX_CHECK(take_slot(pp, ch, m, &k));
    else {
        k = ch->slot_of[m];
        PX_CHECK(wait_req(pp, ch, REQ_ACT_RECV, m));
    }
    px_gpt_t *g = ch->slot[k];
    px_gpt_ctx_t ctx = px_gpt_ctx_default(g);
    ctx.groups = pp->groups;
    if (ch->first || ch->last)
        load(arg, m, ch->first ? ch->inputs[k] : NULL, ch->last ? ch->targets[k] : NULL);
    if (ch->first)
        PX_CHECK(px_gpt_embed_forward(g, &ctx, ch->inputs[k]));
    for (int l = ch->l0; l < ch->l1; l++)
        PX_CHECK(px_gpt_block_forward(g, &ctx, l));
    if (ch->last) {
        float loss = 0.0f;
        PX_CHECK(px_gpt_head_forward(g, &ctx, ch->targets[k], &loss));
        if (train && ch->first && pp->moe)
            loss += px_moe_aux_loss_slot(pp->moe, k);
        *loss_sum += loss;
    }
    return PX_OK;
}

static px_status_t backward(px_pipe_t *pp, chunk_t *ch, int m)
{
    const int split = px_pipe_schedule_split(pp->sched);
    int k = ch->slot_of[m];
    px_gpt_t *g = ch->slot[k];
    px_gpt_ctx_t ctx = px_gpt_ctx_default(g);
    ctx.groups = pp->groups;
    if (!ch->last)
        PX_CHECK(wait_req(pp, ch, REQ_GRAD_RECV, m));
    else
        PX_CHECK(px_gpt_head_backward(g, &ctx));
    for (int l = ch->l1 - 1; l >= ch->l0; l--)
        PX_CHECK(split ? px_gpt_block_backward_input(g, &ctx, l)
                       : px_gpt_block_backward(g, &ctx, l));
    if (ch->first)
        PX_CHECK(px_gpt_embed_backward(g, &ctx));
    if (!split) /* split: the slot's activations wait for the weight pass */
        ch->busy[k] = 0;
    return PX_OK;
}

/* The weight pass of micro-batch m (split schedules): the layers' matmul
 * weight gradients and, on the last stage, the tied head's wte gradient. */
static px_status_t weight_pass(px_pipe_t *pp, chunk_t *ch, int m)
{
    int k = ch->slot_of[m];
    px_gpt_t *g = ch->slot[k];
    px_gpt_ctx_t ctx = px_gpt_ctx_default(g);
    ctx.groups = pp->groups;
    if (ch->last)
        PX_CHECK(px_gpt_head_backward_weight(g, &ctx));
    for (int l = ch->l1 - 1; l >= ch->l0; l--)
        PX_CHECK(px_gpt_block_backward_weight(g, &ctx, l));
    ch->busy[k] = 0;
    return PX_OK;
}

static px_status_t run_action(px_pipe_t *pp, const px_pipe_action_t *a, px_pipe_load_fn load,
                              void *arg, float *loss_sum)
{
    int m = a->micro, k;
    float *x, *dx;
    size_t n;
    if (a->chunk < 0 || a->chunk >= pp->V) {
        px_error("pipeline: stage %d: action on chunk %d of %d", pp->s, a->chunk, pp->V);
        return PX_ERR_INTERNAL;
    }
    chunk_t *ch = &pp->ch[a->chunk];
    switch (a->op) {
    case PX_PIPE_RECV_ACT:
        PX_CHECK(take_slot(pp, ch, m, &k));
        px_gpt_stage_io(ch->slot[k], ch->l0, &x, &dx, &n);
        return start(pp, ch, REQ_ACT_RECV, m, x, n);
    case PX_PIPE_FWD:
        return forward(pp, ch, m, load, arg, 1, loss_sum);
    case PX_PIPE_SEND_ACT:
        px_gpt_stage_io(ch->slot[ch->slot_of[m]], ch->l1, &x, &dx, &n);
        return start(pp, ch, REQ_ACT_SEND, m, x, n);
    case PX_PIPE_RECV_GRAD:
        px_gpt_stage_io(ch->slot[ch->slot_of[m]], ch->l1, &x, &dx, &n);
        return start(pp, ch, REQ_GRAD_RECV, m, dx, n);
    case PX_PIPE_BWD:
        return backward(pp, ch, m);
    case PX_PIPE_SEND_GRAD:
        px_gpt_stage_io(ch->slot[ch->slot_of[m]], ch->l0, &x, &dx, &n);
        return start(pp, ch, REQ_GRAD_SEND, m, dx, n);
    case PX_PIPE_WGT:
        return weight_pass(pp, ch, m);
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
    for (int c = 0; c < pp->V; c++) {
        chunk_t *ch = &pp->ch[c];
        for (int k = 0; k < ch->nslots; k++) {
            ch->occupant[k] = -1;
            ch->busy[k] = 0;
        }
        for (int m = 0; m < pp->M; m++)
            ch->slot_of[m] = -1;
    }
    for (int i = 0; i < list->n && status == PX_OK; i++) {
        status = run_action(pp, &list->a[i], load, arg, &loss_sum);
        poke_all(pp);
    }
    for (int c = 0; c < pp->V && status == PX_OK; c++)
        for (int m = 0; m < pp->M && status == PX_OK; m++)
            for (int kind = 0; kind < REQ_N && status == PX_OK; kind++)
                status = wait_req(pp, &pp->ch[c], kind, m);
    if (status != PX_OK)
        cancel_all(pp);
    pp->busy_s += (px_time_mono_s() - t0) - (pp->idle_s - idle0);
    if (status == PX_OK)
        *loss_sum_p = loss_sum;
    return status;
}

px_status_t px_pipe_eval_round(px_pipe_t *pp, px_pipe_load_fn load, void *arg,
                               float *loss_sum_p)
{
    px_status_t status = PX_OK;
    float loss_sum = 0.0f;
    float *x, *dx;
    size_t n;

    /* every rank walks (micro-batch, virtual stage) in the same order and
     * waits only on an earlier item: no cycle, so no deadlock */
    pp->gen++;
    pp->deferred = PX_OK;
    for (int m = 0; m < pp->M && status == PX_OK; m++)
        for (int c = 0; c < pp->V && status == PX_OK; c++) {
            chunk_t *ch = &pp->ch[c];
            if (ch->nslots < 1) {
                px_error("pipeline: stage %d chunk %d has no slot to evaluate in", pp->s, c);
                status = PX_ERR_INTERNAL;
                break;
            }
            ch->slot_of[m] = 0; /* the first chunk's take_slot picks slot 0 too */
            ch->busy[0] = 0;
            ch->occupant[0] = -1;
            if (!ch->first) {
                px_gpt_stage_io(ch->slot[0], ch->l0, &x, &dx, &n);
                status = start(pp, ch, REQ_ACT_RECV, m, x, n);
            }
            if (status == PX_OK) /* waits for the receive */
                status = forward(pp, ch, m, load, arg, 0, &loss_sum);
            if (status == PX_OK && ch->last) /* no backward comes: release the head's */
                status = px_gpt_forward_end(ch->slot[0]);
            if (status == PX_OK && !ch->last) {
                px_gpt_stage_io(ch->slot[0], ch->l1, &x, &dx, &n);
                status = start(pp, ch, REQ_ACT_SEND, m, x, n);
                if (status == PX_OK) /* the slot is overwritten next */
                    status = wait_req(pp, ch, REQ_ACT_SEND, m);
            }
        }
    for (int c = 0; c < pp->V; c++)
        if (pp->ch[c].nslots)
            pp->ch[c].busy[0] = 0;
    if (status != PX_OK)
        cancel_all(pp);
    else
        *loss_sum_p = loss_sum;
    return status;
}

float px_pipe_step_loss(const px_pipe_t *pp, float loss_sum, int rounds)
{
    const int n = rounds * pp->M;
    float loss = pp->s == pp->p - 1 ? loss_sum / (float)n : 0.0f;
    if (pp->moe && pp->p * pp->V > 1)
        loss += (float)(px_moe_aux_loss_step(pp->moe) / (double)n);
    return loss;
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
    uint32_t tag = tag_of(pp, 2, 0, 0);
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
    size_t sum = 0;
    for (int c = 0; c < pp->V; c++)
        if (pp->ch[c].nslots)
            sum += (size_t)pp->ch[c].nslots * px_gpt_activation_bytes(pp->ch[c].slot[0]);
    return sum;
}

void px_pipe_ring_times(const px_pipe_t *pp, px_ring_times_t *out)
{
    *out = (px_ring_times_t){0};
    for (int c = 0; c < pp->V; c++)
        for (int k = 0; k < pp->ch[c].nslots; k++) {
            px_ring_times_t t;
            px_gpt_ring_times(pp->ch[c].slot[k], &t);
            out->total_s += t.total_s;
            out->wait_s += t.wait_s;
            out->bytes += t.bytes;
            out->steps += t.steps;
        }
}

void px_pipe_tp_times(const px_pipe_t *pp, px_tp_times_t *out)
{
    *out = (px_tp_times_t){0};
    for (int c = 0; c < pp->V; c++)
        for (int k = 0; k < pp->ch[c].nslots; k++) {
            px_tp_times_t t;
            px_gpt_tp_times(pp->ch[c].slot[k], &t);
            out->comm_s += t.comm_s;
            out->wait_s += t.wait_s;
            out->hidden_s += t.hidden_s;
            out->colls += t.colls;
            out->overlapped += t.overlapped;
        }
}

int px_pipe_stage(const px_pipe_t *pp) { return pp->s; }

int px_pipe_slots(const px_pipe_t *pp)
{
    int sum = 0;
    for (int c = 0; c < pp->V; c++)
        sum += pp->ch[c].nslots;
    return sum;
}

int px_pipe_chunk_slots_max(const px_pipe_t *pp)
{
    int mx = 0;
    for (int c = 0; c < pp->V; c++)
        mx = pp->ch[c].nslots > mx ? pp->ch[c].nslots : mx;
    return mx;
}

px_status_t px_pipe_set_moe(px_pipe_t *pp, struct px_moe *moe)
{
    pp->moe = moe;
    for (int c = 0; c < pp->V; c++)
        for (int k = 0; k < pp->ch[c].nslots; k++)
            PX_CHECK(px_gpt_set_moe_slot(pp->ch[c].slot[k], moe, k));
    return PX_OK;
}
