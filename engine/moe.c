/* moe.c: the mixture-of-experts MLP and expert parallelism (moe.h).
 *
 * One forward of MoE layer l on N local tokens, P = ep ranks, El = E/P
 * experts here:
 *   1. router logits, softmax, top-k, gates (op table: moe_router_forward);
 *   2. the choice counts of each token block (px_moe_set_token_blocks)
 *      with the blocks' keys all-gathered over the ep group, and the
 *      router probabilities summed over the dp group (the load-balancing
 *      loss's P_e); every rank then computes every rank's kept counts per
 *      block and kept[p][j][e] (the capacity filled in the order j, block
 *      key, token: the single-rank order, whichever rows or sequence
 *      chunks the ranks hold), so all send and receive counts are known
 *      without a count exchange;
 *   3. the kept choices, as "slots" in send order (destination rank,
 *      its local expert, choice j, token), are packed and dispatched by
 *      px_alltoallv; each rank reorders what it received from source-major
 *      (p, expert, j) to expert-major (expert, p, j) and runs each expert's
 *      MLP on its rows; the outputs go back by the reverse all-to-all and
 *      land in slot order; out_t = sum over t's kept slots of gate * y, in
 *      expert order on every layout.
 * Backward retraces it: the gated output gradients out, the expert
 * backward, the input gradients back, the router's through the gates and
 * the load-balancing loss.
 *
 * Invariants: every rank of the ep group runs the same layers with the
 * same N; the slot order of a token's choices is the expert order, so the
 * sums are the single-rank run's. The tensor math goes through the op
 * table (router, dispatch, experts' matmuls and GELU, combine); the
 * routing bookkeeping (counts, capacity, slot lists) runs in host code on
 * host copies: the router's choices and probabilities are copied off the
 * backend after the router, and the slot lists and the aux loss's gradient
 * copied onto it (mem_copy_to_host_async, then one synchronize per layer /
 * mem_copy_from_host: host code never touches a device tensor;
 * checked on the simulated device by tests/engine/test_sim.py and, for the
 * one wait, test_moe_unit.c). The activations of every MoE
 * layer are sized at create for worst-case routing (plan.h). One training
 * thread. */
#include "moe.h"
#include "experts.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "gpt.h"
#include "memacct.h"
#include "model.h"
#include "plan.h"
#include "px_coll.h"
#include "px_log.h"
#include "px_time.h"

typedef struct moe_layer {
    float *probs;     /* (N,E) */
    int32_t *idx;     /* (N,K) */
    float *w;         /* (N,K) gates */
    int64_t *cnt;     /* (P,K,E) every ep rank's choice counts (host memory) */
    int64_t *kept;    /* (P,K,E) of them kept (host memory) */
    int32_t *slot_tok;/* (N*K) token of each slot, send order */
    int32_t *slot_g;  /* (N*K) its gate: index t*K + j into w */
    int nslots;
    float *y;         /* (N*K, C) expert outputs of the slots */
    float *xe;        /* (Rmax, C) received rows, expert-major */
    float *h, *hg;    /* (Rmax, 4C) fc output, gelu */
    int nrecv;
    float *daux;      /* (E) d(aux loss)/d(prob) per token */
    float aux;
    int N;
} moe_layer_t;

/* (key, index) pairs sorted by key: the group's blocks in token order */
typedef struct keyed {
    int64_t key;
    int i;
} keyed_t;

struct px_moe {
    px_moe_config_t cfg;
    const px_kernel_ops_t *k;
    px_comm_t *ep, *dp;
    px_experts_t *ex;     /* the routers and experts (borrowed) */
    int P, me, El, dp_size, Nmax, Rmax, nm;
    int slots;            /* activation slots per MoE layer (micro-batches in
                             flight); L[mi * slots + slot] */
    double aux_step;      /* load-balancing losses of this step's forwards */
    moe_layer_t *L;
    float *sendbuf, *recvbuf, *logits, *dw, *dg, *dh;
    uint64_t *scnt, *sdis, *rcnt, *rdis;
    uint64_t *received, *dropped; /* (E) this step */
    /* the token blocks (px_moe_set_token_blocks): nb blocks of N/nb local
     * tokens, key[b] their place in the single-rank token order */
    int nb;
    int64_t *key;   /* (nb) */
    int64_t *gbuf;  /* (P, nb + nb*K*E): every rank's [keys | block counts] */
    int64_t *keptb; /* (P, nb, K, E) kept per block */
    keyed_t *order; /* (P*nb) the group's blocks sorted by key */
    int64_t *mine;  /* (nb + nb*K*E) this rank's row of gbuf */
    /* host copies of what the routing's bookkeeping reads or writes (the
     * tensors are the backend's memory: on a device, host code copies) */
    int32_t *hidx;               /* (Nmax,K) the router's choices */
    float *hprobs;               /* (Nmax,E) its probabilities; the skewed logits */
    int32_t *hslot_tok, *hslot_g; /* (Nmax*K) the slot lists, built here */
    float *hdaux;                /* (E) */
    double a2a_s;
    float skew;           /* test hook: router logit bias of experts 0 (1/2) */
};

static px_model_moe_t model_of(const px_moe_config_t *cfg)
{
    return (px_model_moe_t){.layers = cfg->layers, .dim = cfg->dim, .experts = cfg->experts,
                            .moe_every = cfg->moe_every};
}

const char *px_moe_tensor_name(int i) { return px_model_moe_tensor_name(i); }

uint64_t px_moe_tensor_size(const px_moe_config_t *cfg, int i)
{
    px_model_moe_t m = model_of(cfg);
    return px_model_moe_tensor(&m, i, NULL);
}

int px_moe_is_layer(const px_moe_config_t *cfg, int l)
{
    px_model_moe_t m = model_of(cfg);
    return px_model_moe_is_layer(&m, l);
}

int px_moe_num_layers(const px_moe_config_t *cfg)
{
    px_model_moe_t m = model_of(cfg);
    return px_model_moe_num_layers(&m);
}

uint64_t px_moe_num_params(const px_moe_config_t *cfg)
{
    px_model_moe_t m = model_of(cfg);
    return px_model_moe_num_params(&m);
}

uint64_t px_moe_rank_params(const px_moe_config_t *cfg, int ep)
{
    px_model_moe_t m = model_of(cfg);
    return px_model_moe_rank_params(&m, ep);
}

const px_moe_config_t *px_moe_config(const px_moe_t *moe) { return &moe->cfg; }

void px_moe_destroy(px_moe_t *moe)
{
    if (!moe)
        return;
    for (int m = 0; moe->L && m < moe->nm * moe->slots; m++) {
        moe_layer_t *a = &moe->L[m];
        px_mem_free(a->probs);
        px_mem_free(a->idx);
        px_mem_free(a->w);
        px_mem_free(a->cnt);
        px_mem_free(a->kept);
        px_mem_free(a->slot_tok);
        px_mem_free(a->slot_g);
        px_mem_free(a->y);
        px_mem_free(a->xe);
        px_mem_free(a->h);
        px_mem_free(a->hg);
        px_mem_free(a->daux);
    }
    free(moe->L);
    px_mem_free(moe->sendbuf);
    px_mem_free(moe->recvbuf);
    px_mem_free(moe->logits);
    px_mem_free(moe->dw);
    px_mem_free(moe->dg);
    px_mem_free(moe->dh);
    free(moe->scnt);
    free(moe->sdis);
    free(moe->rcnt);
    free(moe->rdis);
    free(moe->received);
    free(moe->dropped);
    free(moe->hidx);
    free(moe->hprobs);
    free(moe->hslot_tok);
    free(moe->hslot_g);
    free(moe->hdaux);
    free(moe->key);
    free(moe->gbuf);
    free(moe->keptb);
    free(moe->order);
    free(moe->mine);
    free(moe);
}

/* capacity of one expert for Ng group tokens: ceil(Ng K / E F) (moe.h) */
static int64_t capacity(const px_moe_t *moe, int64_t Ng)
{
    const px_moe_config_t *c = &moe->cfg;
    if (c->dropless)
        return INT64_MAX;
    return (int64_t)ceil((double)Ng * c->top_k / c->experts * (double)c->capacity_factor);
}

px_status_t px_moe_set_token_blocks(px_moe_t *moe, int nb, const int64_t *keys)
{
    if (nb < 1 || moe->Nmax % nb) {
        px_error("moe: %d token blocks do not divide the %d local tokens", nb, moe->Nmax);
        return PX_ERR_INVALID_ARGUMENT;
    }
    const size_t P = (size_t)moe->P, KE = (size_t)moe->cfg.top_k * moe->cfg.experts;
    const size_t W = (size_t)nb + (size_t)nb * KE;
    int64_t *key = malloc((size_t)nb * sizeof(int64_t)), *gbuf = calloc(P * W, sizeof(int64_t));
    int64_t *keptb = calloc(P * nb * KE, sizeof(int64_t)), *mine = calloc(W, sizeof(int64_t));
    keyed_t *order = calloc(P * nb, sizeof(keyed_t));
    if (!key || !gbuf || !keptb || !mine || !order) {
        free(key);
        free(gbuf);
        free(keptb);
        free(mine);
        free(order);
        return PX_ERR_NO_MEMORY;
    }
    memcpy(key, keys, (size_t)nb * sizeof(int64_t));
    free(moe->key);
    free(moe->gbuf);
    free(moe->keptb);
    free(moe->mine);
    free(moe->order);
    moe->nb = nb;
    moe->key = key;
    moe->gbuf = gbuf;
    moe->keptb = keptb;
    moe->mine = mine;
    moe->order = order;
    return PX_OK;
}

static int keyed_cmp(const void *a, const void *b)
{
    const keyed_t *x = a, *y = b;
    return x->key < y->key ? -1 : x->key > y->key ? 1 : x->i - y->i;
}

px_status_t px_moe_create(const px_moe_config_t *cfg, const px_kernel_ops_t *ops, int N,
                          px_comm_t *ep, px_comm_t *dp, int dp_size, px_experts_t *ex,
                          px_moe_t **moe_p)
{
    return px_moe_create_stage(cfg, ops, N, ep, dp, dp_size, ex, 1, moe_p);
}

px_status_t px_moe_create_stage(const px_moe_config_t *cfg, const px_kernel_ops_t *ops, int N,
                                px_comm_t *ep, px_comm_t *dp, int dp_size, px_experts_t *ex,
                                int slots, px_moe_t **moe_p)
{
    int P = ep ? px_comm_size(ep) : 1;
    if (cfg->experts < 1 || cfg->top_k < 1 || cfg->top_k > 2 || cfg->top_k > cfg->experts ||
        cfg->experts % P || N < 1 || cfg->dim < 1 || cfg->layers < 1 || dp_size < 1 ||
        slots < 1 || !ex || px_experts_per_rank(ex) != cfg->experts / P) {
        px_error("moe: cannot build experts=%d top_k=%d over ep=%d (N %d, dim %d, dp %d, slots "
                 "%d, %d experts held per rank)", cfg->experts, cfg->top_k, P, N, cfg->dim,
                 dp_size, slots, ex ? px_experts_per_rank(ex) : 0);
        return PX_ERR_INVALID_ARGUMENT;
    }
    px_moe_t *moe = calloc(1, sizeof(*moe));
    if (!moe)
        return PX_ERR_NO_MEMORY;
    moe->cfg = *cfg;
    moe->k = ops;
    moe->ep = ep;
    moe->dp = dp;
    moe->ex = ex;
    moe->P = P;
    moe->me = ep ? px_comm_rank(ep) : 0;
    moe->El = cfg->experts / P;
    moe->dp_size = dp_size;
    moe->Nmax = N;
    moe->nm = px_experts_layers(ex);
    moe->slots = slots;
    const int E = cfg->experts, K = cfg->top_k, C = cfg->dim;
    /* the plan's arithmetic (plan.h), which `pctl plan` prints */
    uint64_t rows = px_plan_moe_rows(N, P, E, K, cfg->dropless, cfg->capacity_factor);
    if (rows > INT32_MAX / 4 / (uint64_t)C) {
        px_error("moe: %llu receive rows of dim %d per MoE layer are too many (N %d, ep %d, "
                 "top_k %d)", (unsigned long long)rows, C, N, P, K);
        px_moe_destroy(moe);
        return PX_ERR_INVALID_ARGUMENT;
    }
    moe->Rmax = (int)rows;
    size_t NK = (size_t)N * K, big = NK > (size_t)moe->Rmax ? NK : (size_t)moe->Rmax;
    moe->L = calloc((size_t)(moe->nm ? moe->nm * slots : 1), sizeof(moe_layer_t));
    moe->scnt = calloc((size_t)P, sizeof(uint64_t));
    moe->sdis = calloc((size_t)P, sizeof(uint64_t));
    moe->rcnt = calloc((size_t)P, sizeof(uint64_t));
    moe->rdis = calloc((size_t)P, sizeof(uint64_t));
    moe->received = calloc((size_t)E, sizeof(uint64_t));
    moe->dropped = calloc((size_t)E, sizeof(uint64_t));
    moe->sendbuf = px_mem_calloc(PX_MEM_ACTS, big * C, sizeof(float));
    moe->recvbuf = px_mem_calloc(PX_MEM_ACTS, big * C, sizeof(float));
    moe->logits = px_mem_calloc(PX_MEM_ACTS, (size_t)N * E, sizeof(float));
    moe->dw = px_mem_calloc(PX_MEM_ACTS, NK, sizeof(float));
    moe->dg = px_mem_calloc(PX_MEM_ACTS, (size_t)moe->Rmax * 4 * C + 1, sizeof(float));
    moe->dh = px_mem_calloc(PX_MEM_ACTS, (size_t)moe->Rmax * 4 * C + 1, sizeof(float));
    moe->hidx = calloc(NK, sizeof(int32_t));
    moe->hprobs = calloc((size_t)N * E, sizeof(float));
    moe->hslot_tok = calloc(NK, sizeof(int32_t));
    moe->hslot_g = calloc(NK, sizeof(int32_t));
    moe->hdaux = calloc((size_t)E, sizeof(float));
    if (!moe->hidx || !moe->hprobs || !moe->hslot_tok || !moe->hslot_g || !moe->hdaux)
        goto err_nomem;
    if (!moe->L || !moe->scnt || !moe->sdis || !moe->rcnt || !moe->rdis ||
        !moe->received || !moe->dropped || !moe->sendbuf || !moe->recvbuf || !moe->logits || !moe->dw || !moe->dg || !moe->dh)
        goto err_nomem;
    /* one block per rank, in ep rank order (dp x ep: the ranks' slices of
     * the batch follow the ep ranks) until the caller says otherwise */
    int64_t key0 = moe->me;
    if (px_moe_set_token_blocks(moe, 1, &key0) != PX_OK)
        goto err_nomem;
    for (int mi = 0; mi < moe->nm * slots; mi++) {
        moe_layer_t *a = &moe->L[mi];
        a->probs = px_mem_calloc(PX_MEM_ACTS, (size_t)N * E, sizeof(float));
        a->idx = px_mem_calloc(PX_MEM_ACTS, NK, sizeof(int32_t));
        a->w = px_mem_calloc(PX_MEM_ACTS, NK, sizeof(float));
        a->cnt = px_mem_calloc_host(PX_MEM_ACTS, (size_t)P * K * E, sizeof(int64_t));
        a->kept = px_mem_calloc_host(PX_MEM_ACTS, (size_t)P * K * E, sizeof(int64_t));
        a->slot_tok = px_mem_calloc(PX_MEM_ACTS, NK, sizeof(int32_t));
        a->slot_g = px_mem_calloc(PX_MEM_ACTS, NK, sizeof(int32_t));
        a->y = px_mem_calloc(PX_MEM_ACTS, NK * C, sizeof(float));
        a->xe = px_mem_calloc(PX_MEM_ACTS, (size_t)moe->Rmax * C + 1, sizeof(float));
        a->h = px_mem_calloc(PX_MEM_ACTS, (size_t)moe->Rmax * 4 * C + 1, sizeof(float));
        a->hg = px_mem_calloc(PX_MEM_ACTS, (size_t)moe->Rmax * 4 * C + 1, sizeof(float));
        a->daux = px_mem_calloc(PX_MEM_ACTS, (size_t)E, sizeof(float));
        if (!a->probs || !a->idx || !a->w || !a->cnt || !a->kept || !a->slot_tok ||
            !a->slot_g || !a->y || !a->xe || !a->h || !a->hg || !a->daux)
            goto err_nomem;
    }
    *moe_p = moe;
    return PX_OK;

err_nomem:
    px_error("moe: out of memory (%d MoE layers, %d experts here, %d tokens, %d receive rows)",
             moe->nm, moe->El, N, moe->Rmax);
    px_moe_destroy(moe);
    return PX_ERR_NO_MEMORY;
}

/* ---- forward ---- */

static px_status_t a2a(px_moe_t *moe, const float *send, float *recv, const char *what)
{
    if (!moe->ep || moe->P == 1) {
        moe->k->mem_copy(recv, send, moe->scnt[0] * sizeof(float));
        return PX_OK;
    }
    double t0 = px_time_mono_s();
    px_status_t status = px_alltoallv(moe->ep, send, moe->scnt, moe->sdis, recv, moe->rcnt,
                                      moe->rdis, PX_FLOAT32, NULL);
    moe->a2a_s += px_time_mono_s() - t0;
    if (status != PX_OK)
        px_error("moe: the %s all-to-all over the ep group failed: %s", what,
                 px_status_str(status));
    return status;
}

/* Counts for the slot-order (send) and source-major (receive) all-to-all
 * of rows of `width` floats, from the kept counts. */
static void set_counts(px_moe_t *moe, const moe_layer_t *a, size_t width)
{
    const int E = moe->cfg.experts, K = moe->cfg.top_k, P = moe->P, El = moe->El;
    uint64_t so = 0, ro = 0;
    for (int p = 0; p < P; p++) {
        uint64_t s = 0, r = 0;
        for (int le = 0; le < El; le++)
            for (int j = 0; j < K; j++) {
                s += (uint64_t)a->kept[((size_t)moe->me * K + j) * E + p * El + le];
                r += (uint64_t)a->kept[((size_t)p * K + j) * E + moe->me * El + le];
            }
        moe->scnt[p] = s * width;
        moe->sdis[p] = so;
        moe->rcnt[p] = r * width;
        moe->rdis[p] = ro;
        so += s * width;
        ro += r * width;
    }
}

/* Reorders received rows between source-major (p, le, j) and expert-major
 * (le, p, j) blocks: to_expert 1: src -> dst expert-major; 0: back. */
static void reorder(px_moe_t *moe, const moe_layer_t *a, const float *src, float *dst,
                    size_t width, int to_expert)
{
    const int E = moe->cfg.experts, K = moe->cfg.top_k, P = moe->P, El = moe->El;
    size_t eo = 0; /* expert-major offset (rows) */
    for (int le = 0; le < El; le++)
        for (int p = 0; p < P; p++)
            for (int j = 0; j < K; j++) {
                size_t n = (size_t)a->kept[((size_t)p * K + j) * E + moe->me * El + le];
                /* source-major offset of block (p, le, j) */
                size_t so = 0;
                for (int q = 0; q < p; q++)
                    for (int l2 = 0; l2 < El; l2++)
                        for (int j2 = 0; j2 < K; j2++)
                            so += (size_t)a->kept[((size_t)q * K + j2) * E + moe->me * El + l2];
                for (int l2 = 0; l2 < le; l2++)
                    for (int j2 = 0; j2 < K; j2++)
                        so += (size_t)a->kept[((size_t)p * K + j2) * E + moe->me * El + l2];
                for (int j2 = 0; j2 < j; j2++)
                    so += (size_t)a->kept[((size_t)p * K + j2) * E + moe->me * El + le];
                if (n) {
                    if (to_expert)
                        moe->k->mem_copy(dst + eo * width, src + so * width,
                                         n * width * sizeof(float));
                    else
                        moe->k->mem_copy(dst + so * width, src + eo * width,
                                         n * width * sizeof(float));
                }
                eo += n;
            }
}

/* Rows local expert le received (expert-major), and the first of them. */
static size_t expert_rows(const px_moe_t *moe, const moe_layer_t *a, int le, size_t *first_p)
{
    const int E = moe->cfg.experts, K = moe->cfg.top_k;
    size_t first = 0, n = 0;
    for (int l2 = 0; l2 <= le; l2++) {
        size_t c = 0;
        for (int p = 0; p < moe->P; p++)
            for (int j = 0; j < K; j++)
                c += (size_t)a->kept[((size_t)p * K + j) * E + moe->me * moe->El + l2];
        if (l2 < le)
            first += c;
        else
            n = c;
    }
    *first_p = first;
    return n;
}

/* A device -> host copy without a wait (px_kernels.h
 * mem_copy_to_host_async): host_dst holds the bytes after the next
 * k->synchronize. Tables without the op copy synchronously. */
static void copy_to_host_async(const px_kernel_ops_t *k, void *host_dst, const void *src,
                               size_t bytes)
{
    if (k->mem_copy_to_host_async)
        k->mem_copy_to_host_async(host_dst, src, bytes);
    else
        k->mem_copy_to_host(host_dst, src, bytes);
}

px_status_t px_moe_forward(px_moe_t *moe, int l, const float *x, float *out, int N)
{
    return px_moe_forward_slot(moe, 0, l, x, out, N);
}

px_status_t px_moe_forward_slot(px_moe_t *moe, int slot, int l, const float *x, float *out,
                                int N)
{
    const px_kernel_ops_t *k = moe->k;
    const int E = moe->cfg.experts, K = moe->cfg.top_k, C = moe->cfg.dim, P = moe->P,
              El = moe->El;
    px_status_t status;
    int mi = px_experts_local(moe->ex, l);
    if (mi < 0 || N < 1 || N > moe->Nmax || slot < 0 || slot >= moe->slots) {
        px_error("moe: layer %d is not a MoE layer held here, or N %d is outside 1..%d, or "
                 "slot %d outside 0..%d", l, N, moe->Nmax, slot, moe->slots - 1);
        return PX_ERR_INVALID_ARGUMENT;
    }
    moe_layer_t *a = &moe->L[(size_t)mi * moe->slots + slot];
    a->N = N;
    /* 1. router */
    k->matmul_forward(moe->logits, x, px_experts_router(moe->ex, 0, mi), NULL, N, C, E);
    if (moe->skew != 0.0f) { /* on the host: the logits are the backend's */
        float *lg = moe->hprobs;
        k->mem_copy_to_host(lg, moe->logits, (size_t)N * E * sizeof(float));
        for (int t = 0; t < N; t++) {
            lg[(size_t)t * E] += moe->skew;
            if (E > 1)
                lg[(size_t)t * E + 1] += 0.5f * moe->skew;
        }
        k->mem_copy_from_host(moe->logits, lg, (size_t)N * E * sizeof(float));
    }
    k->moe_router_forward(a->probs, a->idx, a->w, moe->logits, N, E, K);
    /* the bookkeeping below reads the choices and probabilities on the host */
    const int32_t *idx = moe->hidx;
    const float *probs = moe->hprobs;
    copy_to_host_async(k, moe->hidx, a->idx, (size_t)N * K * sizeof(int32_t));
    copy_to_host_async(k, moe->hprobs, a->probs, (size_t)N * E * sizeof(float));
    k->synchronize(); /* one wait for both copies */
    /* 2. counts over the group, per token block (moe.h: the blocks' keys
     * give the single-rank token order), probability sums for the aux loss */
    const int nb = moe->nb, Tb = N / nb;
    const size_t KE = (size_t)K * E, W = (size_t)nb + (size_t)nb * KE;
    if (N % nb) {
        px_error("moe: layer %d: %d tokens are not %d equal blocks", l, N, nb);
        return PX_ERR_INVALID_ARGUMENT;
    }
    int64_t *mine = moe->mine, *bcnt = moe->mine + nb;
    memcpy(mine, moe->key, (size_t)nb * sizeof(int64_t));
    memset(bcnt, 0, (size_t)nb * KE * sizeof(int64_t));
    double psum[E];
    memset(psum, 0, sizeof(psum));
    for (int t = 0; t < N; t++) {
        for (int j = 0; j < K; j++)
            bcnt[(size_t)(t / Tb) * KE + (size_t)j * E + idx[(size_t)t * K + j]]++;
        for (int e = 0; e < E; e++)
            psum[e] += probs[(size_t)t * E + e];
    }
    /* the load-balancing loss's statistics over the whole global batch
     * (the dp group): [prob sums (E) | choice counts (E)] */
    double stat[2 * E];
    for (int e = 0; e < E; e++) {
        stat[e] = psum[e];
        stat[E + e] = 0.0;
    }
    for (int b = 0; b < nb; b++)
        for (int j = 0; j < K; j++)
            for (int e = 0; e < E; e++)
                stat[E + e] += (double)bcnt[(size_t)b * KE + (size_t)j * E + e];
    status = PX_OK;
    if (moe->ep && P > 1)
        status = px_allgather(moe->ep, mine, moe->gbuf, W, PX_INT64, NULL);
    else
        memcpy(moe->gbuf, mine, W * sizeof(int64_t));
    if (status == PX_OK && moe->dp && px_comm_size(moe->dp) > 1)
        status = px_allreduce(moe->dp, stat, stat, 2 * (uint64_t)E, PX_FLOAT64, PX_SUM, -1);
    if (status != PX_OK) {
        px_error("moe: layer %d: the routing counts over the ep / dp group failed: %s", l,
                 px_status_str(status));
        return status;
    }
    /* every rank's choice counts (P,K,E), and the group's blocks in order */
    keyed_t *ord = moe->order;
    memset(a->cnt, 0, (size_t)P * KE * sizeof(int64_t));
    for (int p = 0; p < P; p++)
        for (int b = 0; b < nb; b++) {
            const int64_t *row = moe->gbuf + (size_t)p * W;
            ord[(size_t)p * nb + b] = (keyed_t){row[b], p * nb + b};
            for (size_t je = 0; je < KE; je++)
                a->cnt[(size_t)p * KE + je] += row[nb + (size_t)b * KE + je];
        }
    qsort(ord, (size_t)P * nb, sizeof(keyed_t), keyed_cmp);
    const int64_t Ng = (int64_t)N * P, cap = capacity(moe, Ng);
    const double Nall = (double)N * moe->dp_size; /* the global batch's tokens */
    double aux = 0.0;
    memset(a->kept, 0, (size_t)P * KE * sizeof(int64_t));
    for (int e = 0; e < E; e++) {
        double f = stat[E + e] / (Nall * K), pe = stat[e] / Nall;
        aux += f * pe;
        /* d aux / d prob_te = coef E f_e / Nall for each token, times dp:
         * this rank's gradient is averaged over the dp ranks */
        moe->hdaux[e] = (float)((double)moe->cfg.aux_loss_coef * E * f / (double)N);
        /* kept counts: the capacity filled in the order j, block key,
         * token (the single-rank order: all first choices, then seconds) */
        int64_t pos = 0;
        for (int j = 0; j < K; j++)
            for (int o = 0; o < P * nb; o++) {
                int p = ord[o].i / nb, b = ord[o].i % nb;
                size_t at = (size_t)j * E + e;
                int64_t n = moe->gbuf[(size_t)p * W + nb + (size_t)b * KE + at];
                int64_t kk = cap - pos < 0 ? 0 : (cap - pos < n ? cap - pos : n);
                moe->keptb[((size_t)p * nb + b) * KE + at] = kk;
                a->kept[(size_t)p * KE + at] += kk;
                pos += n;
                moe->received[e] += (uint64_t)kk;
                moe->dropped[e] += (uint64_t)(n - kk);
            }
    }
    k->mem_copy_from_host(a->daux, moe->hdaux, (size_t)E * sizeof(float));
    a->aux = (float)(moe->cfg.aux_loss_coef * E * aux);
    moe->aux_step += a->aux;
    /* 3. slots in send order: destination, its expert (= expert order),
     * choice, token; in each block the first keptb[me][b][j][e] choices of
     * (j, e) are kept */
    a->nslots = 0;
    for (int e = 0; e < E; e++)
        for (int j = 0; j < K; j++)
            for (int b = 0; b < nb; b++) {
                int64_t left = moe->keptb[((size_t)moe->me * nb + b) * KE + (size_t)j * E + e];
                for (int t = b * Tb; t < (b + 1) * Tb && left > 0; t++)
                    if (idx[(size_t)t * K + j] == e) {
                        moe->hslot_tok[a->nslots] = t;
                        moe->hslot_g[a->nslots] = t * K + j;
                        a->nslots++;
                        left--;
                    }
            }
    if (a->nslots) { /* the slot lists go to the backend's memory */
        k->mem_copy_from_host(a->slot_tok, moe->hslot_tok, (size_t)a->nslots * sizeof(int32_t));
        k->mem_copy_from_host(a->slot_g, moe->hslot_g, (size_t)a->nslots * sizeof(int32_t));
    }
    k->moe_dispatch(moe->sendbuf, x, a->slot_tok, a->nslots, C);
    set_counts(moe, a, (size_t)C);
    PX_CHECK(a2a(moe, moe->sendbuf, moe->recvbuf, "dispatch"));
    a->nrecv = 0;
    for (int p = 0; p < P; p++)
        a->nrecv += (int)(moe->rcnt[p] / (uint64_t)C);
    reorder(moe, a, moe->recvbuf, a->xe, (size_t)C, 1);
    /* the experts, on their rows */
    for (int le = 0; le < El; le++) {
        size_t r0, n = expert_rows(moe, a, le, &r0);
        if (!n)
            continue;
        px_expert_view_t p = px_experts_expert(moe->ex, 0, mi, le);
        float *h = a->h + r0 * 4 * C, *hg = a->hg + r0 * 4 * C;
        k->matmul_forward(h, a->xe + r0 * C, p.fcw, p.fcb, (int)n, C, 4 * C);
        k->gelu_forward(hg, h, n * 4 * C);
        k->matmul_forward(moe->sendbuf + r0 * C, hg, p.fcprojw, p.fcprojb, (int)n, 4 * C, C);
    }
    reorder(moe, a, moe->sendbuf, moe->recvbuf, (size_t)C, 0);
    /* back: the receive counts become the send counts */
    for (int p = 0; p < P; p++) {
        uint64_t c = moe->scnt[p], d = moe->sdis[p];
        moe->scnt[p] = moe->rcnt[p];
        moe->sdis[p] = moe->rdis[p];
        moe->rcnt[p] = c;
        moe->rdis[p] = d;
    }
    PX_CHECK(a2a(moe, moe->recvbuf, a->y, "combine"));
    /* combine in slot (= expert) order */
    k->mem_set(out, 0, (size_t)N * C * sizeof(float));
    k->moe_combine(out, a->y, a->slot_tok, a->w, a->slot_g, a->nslots, C);
    return PX_OK;
}

float px_moe_aux_loss(const px_moe_t *moe) { return px_moe_aux_loss_slot(moe, 0); }

float px_moe_aux_loss_slot(const px_moe_t *moe, int slot)
{
    float s = 0.0f;
    for (int mi = 0; mi < moe->nm; mi++)
        s += moe->L[(size_t)mi * moe->slots + slot].aux;
    return s;
}

double px_moe_aux_loss_step(const px_moe_t *moe) { return moe->aux_step; }

/* ---- backward ---- */

px_status_t px_moe_backward(px_moe_t *moe, int l, const float *x, const float *dout, float *dx,
                            int N)
{
    return px_moe_backward_slot(moe, 0, l, x, dout, dx, N);
}

px_status_t px_moe_backward_slot(px_moe_t *moe, int slot, int l, const float *x,
                                 const float *dout, float *dx, int N)
{
    const px_kernel_ops_t *k = moe->k;
    const int E = moe->cfg.experts, K = moe->cfg.top_k, C = moe->cfg.dim, P = moe->P,
              El = moe->El;
    int mi = px_experts_local(moe->ex, l);
    if (mi < 0 || slot < 0 || slot >= moe->slots ||
        N != moe->L[(size_t)mi * moe->slots + slot].N) {
        px_error("moe: backward of layer %d slot %d with N %d does not follow its forward", l,
                 slot, N);
        return PX_ERR_INVALID_ARGUMENT;
    }
    moe_layer_t *a = &moe->L[(size_t)mi * moe->slots + slot];
    /* gated output gradients of the slots, and the gates' gradients */
    k->mem_set(moe->dw, 0, (size_t)N * K * sizeof(float));
    k->moe_combine_backward(moe->sendbuf, moe->dw, dout, a->y, a->slot_tok, a->w, a->slot_g,
                            a->nslots, C);
    set_counts(moe, a, (size_t)C);
    PX_CHECK(a2a(moe, moe->sendbuf, moe->recvbuf, "gradient dispatch"));
    float *dy = a->y; /* reused: the forward's outputs are read above for the last time */
    reorder(moe, a, moe->recvbuf, moe->sendbuf, (size_t)C, 1);
    for (int le = 0; le < El; le++) {
        size_t r0, n = expert_rows(moe, a, le, &r0);
        if (!n)
            continue;
        px_expert_view_t p = px_experts_expert(moe->ex, 0, mi, le);
        px_expert_view_t g = px_experts_expert(moe->ex, 1, mi, le);
        float *dg = moe->dg, *dh = moe->dh;
        k->mem_set(dg, 0, n * 4 * C * sizeof(float));
        k->matmul_backward(dg, g.fcprojw, g.fcprojb, moe->sendbuf + r0 * C, a->hg + r0 * 4 * C,
                           p.fcprojw, (int)n, 4 * C, C);
        k->mem_set(dh, 0, n * 4 * C * sizeof(float));
        k->gelu_backward(dh, a->h + r0 * 4 * C, dg, n * 4 * C);
        k->mem_set(moe->recvbuf + r0 * C, 0, n * C * sizeof(float));
        k->matmul_backward(moe->recvbuf + r0 * C, g.fcw, g.fcb, dh, a->xe + r0 * C, p.fcw,
                           (int)n, C, 4 * C);
    }
    reorder(moe, a, moe->recvbuf, moe->sendbuf, (size_t)C, 0);
    for (int p = 0; p < P; p++) {
        uint64_t c = moe->scnt[p], d = moe->sdis[p];
        moe->scnt[p] = moe->rcnt[p];
        moe->sdis[p] = moe->rdis[p];
        moe->rcnt[p] = c;
        moe->rdis[p] = d;
    }
    PX_CHECK(a2a(moe, moe->sendbuf, dy, "gradient combine"));
    k->mem_set(dx, 0, (size_t)N * C * sizeof(float));
    k->moe_combine(dx, dy, a->slot_tok, NULL, NULL, a->nslots, C);
    /* the router: through the gates and the load-balancing loss */
    k->moe_router_backward(moe->logits, a->probs, a->idx, a->w, moe->dw, a->daux, N, E, K);
    k->matmul_backward(dx, px_experts_router(moe->ex, 1, mi), NULL, moe->logits, x,
                       px_experts_router(moe->ex, 0, mi), N, C, E);
    return PX_OK;
}

/* ---- the step ---- */

void px_moe_begin_step(px_moe_t *moe)
{
    memset(moe->received, 0, (size_t)moe->cfg.experts * sizeof(uint64_t));
    memset(moe->dropped, 0, (size_t)moe->cfg.experts * sizeof(uint64_t));
    moe->aux_step = 0.0;
}

void px_moe_token_stats(const px_moe_t *moe, uint64_t *received, uint64_t *dropped)
{
    memcpy(received, moe->received, (size_t)moe->cfg.experts * sizeof(uint64_t));
    memcpy(dropped, moe->dropped, (size_t)moe->cfg.experts * sizeof(uint64_t));
}

double px_moe_alltoall_s(const px_moe_t *moe) { return moe->a2a_s; }

void px_moe_set_router_skew(px_moe_t *moe, float skew) { moe->skew = skew; }
