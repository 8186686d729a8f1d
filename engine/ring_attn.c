/* ring_attn.c: ring attention over the context-parallel group (ring_attn.h).
 *
 * Invariants: rank i holds sequence chunks i (rows [0,c)) and 2cp-1-i (rows
 * [c,2c)); at step s of a pass it computes against the block of owner
 * o = i-s (mod cp). The causal mask then falls on whole chunks, so each
 * step is at most three dense or diagonal sub-blocks:
 *   o == i: (rows A, keys A) causal, (B, A) full, (B, B) causal;
 *   o <  i: (rows A and B, keys A) full: o's chunk A precedes both of
 *           ours, its chunk B follows both;
 *   o >  i: (rows B, keys A and B) full: both of o's chunks precede our
 *           B and follow our A.
 * Every step costs the same 2c^2 scores per head: the load balance.
 * Tags: pass counter << 12 | step << 4 | kind, so messages of different
 * layers, passes and steps never meet; one thread, the model's. */
#include "ring_attn.h"

#include <math.h>
#include <stdlib.h>

#include "memacct.h"
#include "px_log.h"
#include "px_time.h"

enum { TAG_KV = 1, TAG_DKV = 2 };
/* the tag of a message of kind k at step s of the pass whose base is tag */
#define TAG(k) (tag | (uint32_t)(s & 0xff) << 4 | (uint32_t)(k))

struct px_ring_attn {
    const px_kernel_ops_t *ops;
    int B, Tl, C, NH;
    size_t n;          /* floats of one (B,Tl,2C) buffer */
    float *kv[2];      /* travelling k|v blocks */
    float *dkv[2];     /* a block's dk|dv, accumulated and sent on */
    float *dkv_in;     /* dk|dv arriving from the previous rank */
    float *delta;      /* (B,NH,Tl) */
    uint32_t pass;     /* tag counter */
    px_ring_times_t times;
};

int px_ring_position(int i, int cp, int Tl, int j)
{
    int c = Tl / 2;
    return j < c ? i * c + j : (2 * cp - 1 - i) * c + (j - c);
}

px_status_t px_ring_attn_create(const px_kernel_ops_t *ops, int B, int Tl, int C, int NH,
                                px_ring_attn_t **ra_p)
{
    if (B <= 0 || Tl <= 0 || Tl % 2 || C <= 0 || NH <= 0 || C % NH) {
        px_error("ring attention: B %d, local tokens %d (must be even: two chunks), C %d, "
                 "heads %d", B, Tl, C, NH);
        return PX_ERR_INVALID_ARGUMENT;
    }
    px_ring_attn_t *ra = calloc(1, sizeof(*ra));
    if (!ra)
        return PX_ERR_NO_MEMORY;
    ra->ops = ops;
    ra->B = B;
    ra->Tl = Tl;
    ra->C = C;
    ra->NH = NH;
    ra->n = (size_t)B * Tl * 2 * C;
    for (int i = 0; i < 2; i++) {
        ra->kv[i] = px_mem_calloc(PX_MEM_ACTS, ra->n, sizeof(float));
        ra->dkv[i] = px_mem_calloc(PX_MEM_ACTS, ra->n, sizeof(float));
    }
    ra->dkv_in = px_mem_calloc(PX_MEM_ACTS, ra->n, sizeof(float));
    ra->delta = px_mem_calloc(PX_MEM_ACTS, (size_t)B * NH * Tl, sizeof(float));
    if (!ra->kv[0] || !ra->kv[1] || !ra->dkv[0] || !ra->dkv[1] || !ra->dkv_in || !ra->delta) {
        px_ring_attn_destroy(ra);
        return PX_ERR_NO_MEMORY;
    }
    *ra_p = ra;
    return PX_OK;
}

void px_ring_attn_destroy(px_ring_attn_t *ra)
{
    if (!ra)
        return;
    for (int i = 0; i < 2; i++) {
        px_mem_free(ra->kv[i]);
        px_mem_free(ra->dkv[i]);
    }
    px_mem_free(ra->dkv_in);
    px_mem_free(ra->delta);
    free(ra);
}

void px_ring_attn_times(const px_ring_attn_t *ra, px_ring_times_t *out) { *out = ra->times; }

/* The transfers of one step: up to 3 requests, their start time, and when
 * a poke saw all of them done. */
typedef struct xfer {
    px_request_t *req[3];
    int n;
    double t0, t_done;
    px_status_t status; /* the first error a poke saw (its request is freed) */
} xfer_t;

static void xfer_poke(xfer_t *x)
{
    int all = 1;
    for (int i = 0; i < x->n; i++) {
        int done = 0;
        if (!x->req[i])
            continue;
        px_status_t s = px_test(x->req[i], &done);
        if (s != PX_OK || done) { /* finished, or failed: freed either way */
            x->req[i] = NULL;
            if (s != PX_OK && x->status == PX_OK)
                x->status = s; /* reported by the wait */
        } else
            all = 0;
    }
    if (all && x->n && !x->t_done)
        x->t_done = px_time_mono_s();
}

/* Waits for the step's transfers; records how long they took and how much
 * of it this rank was blocked. */
static px_status_t xfer_wait(px_ring_attn_t *ra, xfer_t *x, const char *what, int step)
{
    px_status_t status = x->status;
    double t = px_time_mono_s();
    for (int i = 0; i < x->n; i++) {
        if (!x->req[i])
            continue;
        px_status_t s = px_wait(x->req[i], -1);
        x->req[i] = NULL;
        if (s != PX_OK && status == PX_OK)
            status = s;
    }
    double end = px_time_mono_s();
    if (x->n) {
        ra->times.total_s += (x->t_done ? x->t_done : end) - x->t0;
        ra->times.wait_s += x->t_done ? 0.0 : end - t;
        ra->times.steps++;
    }
    if (status != PX_OK)
        px_error("ring attention: %s of step %d failed: %s", what, step, px_status_str(status));
    x->n = 0;
    x->t_done = 0.0;
    x->status = PX_OK;
    return status;
}

static void xfer_cancel(xfer_t *x)
{
    for (int i = 0; i < x->n; i++)
        px_request_cancel(x->req[i]); /* NULL (done or failed): no-op */
    x->n = 0;
}

static px_status_t xfer_send(px_ring_attn_t *ra, xfer_t *x, px_comm_t *comm, int peer,
                             uint32_t tag, const float *buf, size_t n)
{
    if (!x->n)
        x->t0 = px_time_mono_s();
    ra->times.bytes += (double)n * sizeof(float);
    PX_CHECK(px_send_start(comm, peer, tag, buf, n * sizeof(float), NULL, &x->req[x->n]));
    x->n++;
    return PX_OK;
}

static px_status_t xfer_recv(xfer_t *x, px_comm_t *comm, int peer, uint32_t tag, float *buf,
                             size_t n)
{
    if (!x->n)
        x->t0 = px_time_mono_s();
    PX_CHECK(px_recv_start(comm, peer, tag, buf, n * sizeof(float), NULL, &x->req[x->n]));
    x->n++;
    return PX_OK;
}

/* One sub-block: query rows [q0, q0+nq) against key rows [k0, k0+nk) of
 * the block, causal or full, head by head with a poke after each. */
typedef struct pass {
    px_ring_attn_t *ra;
    const float *qkv, *kv; /* kv: k at kv, v at kv + C; row stride kv_ld */
    size_t kv_ld;
    float *out, *lse;      /* forward */
    float *dqkv, *dkv;     /* backward; dkv in kv's layout */
    const float *dout, *lse_c;
    float *scratch;
    int backward;
    xfer_t *x[2];
    void (*progress)(void *);
    void *arg;
} pass_t;

static void sub_block(pass_t *p, int q0, int nq, int k0, int nk, int causal, int init)
{
    px_ring_attn_t *ra = p->ra;
    const int C = ra->C, hs = C / ra->NH, Tl = ra->Tl;
    for (int h = 0; h < ra->NH; h++) {
        px_attn_block_t g = {.B = ra->B, .NH = 1, .hs = hs, .Tq = nq, .Tk = nk,
                             .causal = causal, .init = init,
                             .q_bs = (size_t)Tl * 3 * C, .q_ld = 3 * (size_t)C,
                             .kv_bs = (size_t)Tl * p->kv_ld, .kv_ld = p->kv_ld,
                             .v_off = (size_t)C, .o_bs = (size_t)Tl * C, .o_ld = (size_t)C,
                             .lse_bs = (size_t)ra->NH * Tl, .lse_hs = (size_t)Tl};
        size_t qo = (size_t)q0 * 3 * C + (size_t)h * hs, ko = (size_t)k0 * p->kv_ld + (size_t)h * hs;
        size_t oo = (size_t)q0 * C + (size_t)h * hs, lo = (size_t)h * Tl + q0;
        if (!p->backward)
            ra->ops->attention_block_forward(p->out + oo, p->lse + lo, p->qkv + qo, p->kv + ko,
                                             &g, p->scratch);
        else
            ra->ops->attention_block_backward(p->dqkv + qo, p->dkv + ko, p->dout + oo,
                                              p->qkv + qo, p->kv + ko, p->lse_c + lo,
                                              ra->delta + lo, &g, p->scratch);
        for (int i = 0; i < 2; i++)
            if (p->x[i])
                xfer_poke(p->x[i]);
        if (p->progress)
            p->progress(p->arg);
    }
}

/* The sub-blocks of ring step with the block of `owner` on rank `me`. */
static void step_blocks(pass_t *p, int me, int owner)
{
    int c = p->ra->Tl / 2;
    if (owner == me) {
        sub_block(p, 0, c, 0, c, 1, 1);
        sub_block(p, c, c, 0, c, 0, 1);
        sub_block(p, c, c, c, c, 1, 0);
    } else if (owner < me) {
        sub_block(p, 0, 2 * c, 0, c, 0, 0);
    } else {
        sub_block(p, c, c, 0, 2 * c, 0, 0);
    }
}

/* dst (B,Tl,2C) = the k|v columns of qkv (B,Tl,3C), row by row. */
static void pack_kv(px_ring_attn_t *ra, float *dst, const float *qkv)
{
    size_t C = (size_t)ra->C, rows = (size_t)ra->B * ra->Tl;
    for (size_t r = 0; r < rows; r++)
        ra->ops->mem_copy(dst + r * 2 * C, qkv + r * 3 * C + C, 2 * C * sizeof(float));
}

px_status_t px_ring_attn_forward(px_ring_attn_t *ra, px_comm_t *comm, float *out, float *lse,
                                 const float *qkv, float *scratch, void (*progress)(void *),
                                 void *arg)
{
    const int N = px_comm_size(comm), me = px_comm_rank(comm);
    const int next = (me + 1) % N, prev = (me + N - 1) % N;
    const uint32_t tag = (ra->pass++ & 0xfffffu) << 12;
    xfer_t x = {0};
    pass_t p = {.ra = ra, .qkv = qkv, .out = out, .lse = lse, .scratch = scratch,
                .x = {&x, NULL}, .progress = progress, .arg = arg};
    px_status_t status = PX_OK;

    if (N > 1)
        pack_kv(ra, ra->kv[0], qkv);
    for (int s = 0; s < N; s++) {
        int owner = (me - s + N) % N;
        if (s + 1 < N) { /* the next block comes in while this one computes */
            PX_CHECK_GOTO(xfer_recv(&x, comm, prev, TAG(TAG_KV), ra->kv[(s + 1) % 2], ra->n),
                          status, err);
            PX_CHECK_GOTO(xfer_send(ra, &x, comm, next, TAG(TAG_KV), ra->kv[s % 2], ra->n),
                          status, err);
        }
        if (s == 0) { /* our own block, read in place */
            p.kv = qkv + ra->C;
            p.kv_ld = 3 * (size_t)ra->C;
        } else {
            p.kv = ra->kv[s % 2];
            p.kv_ld = 2 * (size_t)ra->C;
        }
        step_blocks(&p, me, owner);
        PX_CHECK_GOTO(xfer_wait(ra, &x, "the k|v exchange", s), status, err);
    }
    return PX_OK;
err:
    xfer_cancel(&x);
    return status;
}

px_status_t px_ring_attn_backward(px_ring_attn_t *ra, px_comm_t *comm, float *dqkv,
                                  const float *dout, const float *qkv, const float *out,
                                  const float *lse, float *scratch, void (*progress)(void *),
                                  void *arg)
{
    const int N = px_comm_size(comm), me = px_comm_rank(comm);
    const int next = (me + 1) % N, prev = (me + N - 1) % N;
    const uint32_t tag = (ra->pass++ & 0xfffffu) << 12;
    const size_t C = (size_t)ra->C, rows = (size_t)ra->B * ra->Tl;
    const px_kernel_ops_t *k = ra->ops;
    xfer_t xkv = {0}, xd = {0};
    pass_t p = {.ra = ra, .qkv = qkv, .dqkv = dqkv, .dout = dout, .lse_c = lse,
                .scratch = scratch, .backward = 1, .x = {&xkv, &xd}, .progress = progress,
                .arg = arg};
    px_status_t status = PX_OK;
    px_attn_block_t all = {.B = ra->B, .NH = ra->NH, .hs = ra->C / ra->NH, .Tq = ra->Tl,
                           .o_bs = rows / ra->B * C, .o_ld = C,
                           .lse_bs = (size_t)ra->NH * ra->Tl, .lse_hs = (size_t)ra->Tl};

    k->attention_block_delta(ra->delta, out, dout, &all);
    pack_kv(ra, ra->kv[0], qkv);
    for (int s = 0; s < N; s++) {
        int owner = (me - s + N) % N;
        float *dkv = ra->dkv[s % 2];
        if (s + 1 < N) {
            PX_CHECK_GOTO(xfer_recv(&xkv, comm, prev, TAG(TAG_KV), ra->kv[(s + 1) % 2], ra->n),
                          status, err);
            PX_CHECK_GOTO(xfer_send(ra, &xkv, comm, next, TAG(TAG_KV), ra->kv[s % 2], ra->n),
                          status, err);
        }
        p.kv = ra->kv[s % 2];
        p.kv_ld = 2 * C;
        p.dkv = dkv;
        /* dkv[s % 2] was last sent at step s-2, waited for at step s-1 */
        k->mem_set(dkv, 0, ra->n * sizeof(float));
        step_blocks(&p, me, owner);
        if (s > 0) { /* the block's dk|dv from the ranks that held it before */
            PX_CHECK_GOTO(xfer_wait(ra, &xd, "the dk|dv exchange", s - 1), status, err);
            k->residual_forward(dkv, dkv, ra->dkv_in, ra->n);
        }
        PX_CHECK_GOTO(xfer_wait(ra, &xkv, "the k|v exchange", s), status, err);
        if (N > 1) { /* on to the next holder (after the last step: the owner) */
            PX_CHECK_GOTO(xfer_send(ra, &xd, comm, next, TAG(TAG_DKV), dkv, ra->n), status,
                          err);
            PX_CHECK_GOTO(xfer_recv(&xd, comm, prev, TAG(TAG_DKV), ra->dkv_in, ra->n), status,
                          err);
        }
    }
    const float *mine = ra->dkv[(N - 1) % 2]; /* N == 1: our own, computed locally */
    if (N > 1) {
        PX_CHECK_GOTO(xfer_wait(ra, &xd, "the dk|dv return", N - 1), status, err);
        mine = ra->dkv_in;
    }
    for (size_t r = 0; r < rows; r++)
        k->residual_forward(dqkv + r * 3 * C + C, dqkv + r * 3 * C + C, mine + r * 2 * C, 2 * C);
    return PX_OK;
err:
    xfer_cancel(&xkv);
    xfer_cancel(&xd);
    return status;
}
