/* plan.c: per-rank memory plan for ZeRO stages 0-3 (plan.h).
 *
 * Invariants: unit_padded[u] % dp == 0, unit_offset and shard_offset are the
 * prefix sums of unit_padded and unit_padded/dp. Pure arithmetic, no I/O
 * except the error log; any thread. */
#include "plan.h"

#include <math.h>
#include <string.h>

#include <stdlib.h>

#include "model.h"
#include "px_log.h"

static const char *cat_names[PX_MEM_NCAT] = {"params", "grads", "optimizer",
                                             "activations", "comm", "workspace"};

const char *px_mem_cat_name(px_mem_cat_t cat)
{
    return cat >= 0 && cat < PX_MEM_NCAT ? cat_names[cat] : "?";
}

void px_plan_precision_fp32(px_plan_precision_t *p)
{
    p->param_bytes = 4;
    p->grad_bytes = 4;
    p->optim_bytes = 8;
}

void px_plan_precision_mixed(px_plan_precision_t *p, double k)
{
    p->param_bytes = 2;
    p->grad_bytes = 2;
    p->optim_bytes = k;
}

uint64_t px_plan_gpt_units(int layers, int dim, int vocab, int max_seq, uint64_t **sizes_p)
{
    return px_plan_gpt_units_tp(layers, dim, vocab, max_seq, 1, sizes_p);
}

uint64_t px_plan_gpt_units_tp(int layers, int dim, int vocab, int max_seq, int tp,
                              uint64_t **sizes_p)
{
    return px_plan_gpt_units_moe(layers, dim, vocab, max_seq, tp, 0, 0, sizes_p);
}

uint64_t px_plan_gpt_units_moe(int layers, int dim, int vocab, int max_seq, int tp, int experts,
                               int moe_every, uint64_t **sizes_p)
{
    if (layers <= 0 || dim <= 0 || vocab <= 0 || max_seq <= 0 || tp <= 0)
        return 0;
    px_model_config_t cfg = {.layers = layers, .dim = dim, .heads = 1, .max_seq = max_seq,
                             .vocab = vocab, .experts = experts, .moe_every = moe_every};
    int nu = px_model_num_units(&cfg);
    uint64_t total = 0, *s = malloc((size_t)nu * sizeof(*s));
    if (!s)
        return 0;
    for (int u = 0; u < nu; u++) {
        s[u] = px_model_unit_size_tp(&cfg, u, tp);
        total += s[u];
    }
    *sizes_p = s;
    return total;
}

px_status_t px_plan_create(const uint64_t *unit_size, int nunits, int units_known, int dp,
                           int zero, const px_plan_precision_t *prec, px_plan_t **plan_p)
{
    if (nunits <= 0 || dp <= 0 || zero < 0 || zero > 3) {
        px_error("plan: bad arguments (units %d, dp %d, zero %d; zero must be 0..3)", nunits, dp,
                 zero);
        return PX_ERR_INVALID_ARGUMENT;
    }
    px_plan_t *p = calloc(1, sizeof(*p));
    if (!p)
        return PX_ERR_NO_MEMORY;
    p->zero = zero;
    p->dp = dp;
    p->nunits = nunits;
    p->units_known = units_known;
    p->prec = *prec;
    p->unit_size = calloc((size_t)nunits, sizeof(uint64_t));
    p->unit_padded = calloc((size_t)nunits, sizeof(uint64_t));
    p->unit_offset = calloc((size_t)nunits, sizeof(uint64_t));
    p->shard_offset = calloc((size_t)nunits, sizeof(uint64_t));
    if (!p->unit_size || !p->unit_padded || !p->unit_offset || !p->shard_offset) {
        px_plan_destroy(p);
        return PX_ERR_NO_MEMORY;
    }
    for (int u = 0; u < nunits; u++) {
        uint64_t n = unit_size[u];
        p->unit_size[u] = n;
        p->unit_padded[u] = (n + (uint64_t)dp - 1) / (uint64_t)dp * (uint64_t)dp;
        p->unit_offset[u] = p->padded;
        p->shard_offset[u] = p->shard;
        p->params += n;
        p->padded += p->unit_padded[u];
        p->shard += p->unit_padded[u] / (uint64_t)dp;
        if (units_known && u > 0 && u < nunits - 1 && p->unit_padded[u] > p->max_layer)
            p->max_layer = p->unit_padded[u];
    }
    if (!p->params) {
        px_error("plan: the model has no parameters");
        px_plan_destroy(p);
        return PX_ERR_INVALID_ARGUMENT;
    }
    /* E, H, M, L as plan.h; W = E + M + (L >= 2 ? max(M, H) : H) */
    /* Xg: stage 3's gradients in flight beside a layer's own (zero.c
     * rs_allowed): the unit above's, at layers 1..L-1 (layer 0 prefetches
     * nothing and waits for it): H at layer L-1, M below it */
    uint64_t E = 0, H = 0, M = p->max_layer, L = 0, W = 0, Xg = 0;
    if (units_known) {
        E = p->unit_padded[0];
        H = nunits >= 2 ? p->unit_padded[nunits - 1] : 0;
        L = nunits >= 2 ? (uint64_t)nunits - 2 : 0;
        W = E + M + (L >= 2 ? (M > H ? M : H) : H);
        Xg = L >= 3 ? (M > H ? M : H) : L == 2 ? H : 0;
        if (zero == 3)
            p->work_params = W;
        if (zero == 2)
            p->work_grads = W;
        if (zero == 3) /* the head's backward E + H, a layer's E + M + Xg */
            p->work_grads = E + M + Xg > E + H ? E + M + Xg : E + H;
    }
    double P = (double)p->padded, S = (double)p->shard;
    double Wp = (double)p->work_params, Wg = (double)p->work_grads;
    double pe = prec->param_bytes, ge = prec->grad_bytes, oe = prec->optim_bytes;
    p->bytes[PX_MEM_PARAMS] = (zero == 3 ? S + Wp : P) * pe;
    p->bytes[PX_MEM_GRADS] = (zero >= 2 ? S + Wg : P) * ge;
    p->bytes[PX_MEM_OPTIM] = (zero >= 1 ? S : P) * oe;
    p->state_peak = p->bytes[PX_MEM_PARAMS] + p->bytes[PX_MEM_GRADS] + p->bytes[PX_MEM_OPTIM];
    if (zero == 3 && units_known) {
        /* forward: params S+W, grads S; the head's backward: params S+E+H+M
         * (layer L-1 prefetched), grads S+E+H; a layer's backward: params
         * S+M, grads S+E+M, and at layers 1..L-1 one more buffer (zero.c
         * rs_allowed): the unit above's gradients (Xg) while their
         * reduce-scatter runs, then the next layer's prefetched parameters
         * (M), never both */
        double X = L >= 2 ? ((double)M * pe > (double)Xg * ge ? (double)M * pe : (double)Xg * ge)
                          : 0.0;
        double head = (S + (double)(E + H + (L >= 1 ? M : 0))) * pe + (S + (double)(E + H)) * ge;
        double fwd = (S + Wp) * pe + S * ge;
        double layer = L >= 1 ? (S + (double)M) * pe + (S + (double)(E + M)) * ge + X : 0.0;
        double peak = fwd > head ? fwd : head;
        p->state_peak = (peak > layer ? peak : layer) + S * oe;
    }
    *plan_p = p;
    return PX_OK;
}

void px_plan_destroy(px_plan_t *p)
{
    if (!p)
        return;
    free(p->unit_size);
    free(p->unit_padded);
    free(p->unit_offset);
    free(p->shard_offset);
    free(p);
}

double px_plan_state_bytes(const px_plan_t *p) { return p->state_peak; }

px_status_t px_plan_gpt_activations(int layers, int heads, int dim, int padded_vocab, int B,
                                    int T, int tp, int sequence_parallel,
                                    px_plan_gpt_acts_t *acts)
{
    if (layers <= 0 || heads <= 0 || dim <= 0 || padded_vocab <= 0 || B <= 0 || T <= 0 ||
        tp <= 0 || dim % heads || heads % tp || dim % tp || padded_vocab % tp) {
        px_error("plan: activations of layers %d heads %d dim %d padded vocab %d B %d T %d "
                 "tp %d: sizes must be positive, dim divisible by heads, heads, dim and the "
                 "padded vocab by tp", layers, heads, dim, padded_vocab, B, T, tp);
        return PX_ERR_INVALID_ARGUMENT;
    }
    uint64_t L = (uint64_t)layers, C = (uint64_t)dim, N = (uint64_t)B * T, t = (uint64_t)T;
    int sp = tp > 1 && sequence_parallel;
    if (sp && N % (uint64_t)tp) {
        px_error("plan: sequence parallelism needs B*T = %d x %d divisible by tp=%d", B, T, tp);
        return PX_ERR_INVALID_ARGUMENT;
    }
    uint64_t R = sp ? N / (uint64_t)tp : N, Cl = C / (uint64_t)tp;
    uint64_t NHl = (uint64_t)(heads / tp), Vl = (uint64_t)(padded_vocab / tp);
    const uint64_t c[PX_PLAN_GPT_NUM_ACTS] = {
        R * C,                /* encoded */
        L * R * C,            /* ln1 */
        L * R, L * R,         /* ln1 mean, rstd */
        L * N * 3 * Cl,       /* qkv */
        L * N * Cl,           /* atty */
        L * B * NHl * t * t,  /* att */
        L * R * C,            /* residual2 */
        L * R * C,            /* ln2 */
        L * R, L * R,         /* ln2 mean, rstd */
        L * N * 4 * Cl,       /* fch */
        L * N * 4 * Cl,       /* fch_gelu */
        L * R * C,            /* residual3 */
        R * C,                /* lnf */
        R, R,                 /* lnf mean, rstd */
        N * Vl, 0,            /* logits; probs: in place over them */
        N,                    /* losses */
        N * C,                /* tmp */
        R * C,                /* dres */
        N * C,                /* dbtc */
        N * 4 * Cl,           /* d4a */
        N * 4 * Cl,           /* d4b */
        0,                    /* dlogits: in place over the probs */
        t * t,                /* attention scratch */
        tp > 1 ? N : 0,       /* cross-entropy row max */
        sp ? N * C : 0,       /* spbuf */
        sp ? 4 * C : 0,       /* dln */
    };
    acts->floats = 0;
    for (int i = 0; i < PX_PLAN_GPT_NUM_ACTS; i++) {
        acts->count[i] = c[i];
        acts->floats += c[i];
    }
    acts->doubles = tp > 1 ? 2 * N : 0;
    acts->bytes = 4 * acts->floats + 8 * acts->doubles;
    acts->ring = 0;
    memset(acts->bf16, 0, sizeof(acts->bf16));
    return PX_OK;
}

px_status_t px_plan_gpt_activations_cp(int layers, int heads, int dim, int padded_vocab, int B,
                                       int T, int tp, int sequence_parallel, int cp,
                                       px_plan_gpt_acts_t *acts)
{
    enum { ATT = 6 }; /* the att entry of the table above */
    PX_CHECK(px_plan_gpt_activations(layers, heads, dim, padded_vocab, B, T, tp,
                                     sequence_parallel, acts));
    if (cp <= 1)
        return PX_OK;
    if (T % 2) {
        px_error("plan: context parallelism needs an even local sequence (two chunks), not %d",
                 T);
        return PX_ERR_INVALID_ARGUMENT;
    }
    uint64_t NHl = (uint64_t)(heads / tp), Cl = (uint64_t)(dim / tp), N = (uint64_t)B * T;
    uint64_t lse = (uint64_t)layers * B * NHl * T;
    acts->floats -= acts->count[ATT];
    acts->count[ATT] = lse;
    acts->ring = 5 * N * 2 * Cl + (uint64_t)B * NHl * T;
    acts->floats += lse + acts->ring;
    acts->bytes = 4 * acts->floats + 8 * acts->doubles;
    return PX_OK;
}

void px_plan_add_unsharded(px_plan_t *p, uint64_t elements)
{
    double n = (double)elements;
    p->bytes[PX_MEM_PARAMS] += n * p->prec.param_bytes;
    p->bytes[PX_MEM_GRADS] += n * p->prec.grad_bytes;
    p->bytes[PX_MEM_OPTIM] += n * p->prec.optim_bytes;
    p->state_peak += n * (p->prec.param_bytes + p->prec.grad_bytes + p->prec.optim_bytes);
}

uint64_t px_plan_moe_rows(int N, int ep, int experts, int top_k, int dropless,
                          double capacity_factor)
{
    uint64_t worst = (uint64_t)N * (uint64_t)ep * (uint64_t)top_k;
    if (dropless || experts <= 0 || ep <= 0)
        return worst;
    double cap = ceil((double)N * ep * top_k / experts * capacity_factor);
    double rows = (double)(experts / ep) * cap;
    return rows < (double)worst ? (uint64_t)rows : worst;
}

uint64_t px_plan_moe_activation_bytes(int moe_layers, int N, int ep, int experts, int top_k,
                                      int dim, int dropless, double capacity_factor)
{
    uint64_t R = px_plan_moe_rows(N, ep, experts, top_k, dropless, capacity_factor);
    uint64_t n = (uint64_t)N, E = (uint64_t)experts, K = (uint64_t)top_k, C = (uint64_t)dim,
             P = (uint64_t)ep, NK = n * K, big = NK > R ? NK : R;
    uint64_t per = 4 * (n * E + 2 * NK + 2 * NK + NK * C + R * C + 1 + 2 * (R * 4 * C + 1) + E) +
                   8 * (2 * P * K * E);
    uint64_t shared = 4 * (2 * big * C + n * E + NK + 2 * (R * 4 * C + 1));
    return moe_layers > 0 ? (uint64_t)moe_layers * per + shared : 0;
}

/* one linear layer's bf16 operands, backward (plan.h) */
static uint64_t gemm_elems(uint64_t N, uint64_t C, uint64_t OC)
{
    return N * OC + OC * C + N * C;
}

uint64_t px_plan_bf16_gemm_elems(int dim, int padded_vocab, int tokens, int tp)
{
    if (dim <= 0 || padded_vocab <= 0 || tokens <= 0 || tp <= 0)
        return 0;
    const uint64_t C = (uint64_t)dim, N = (uint64_t)tokens, t = (uint64_t)tp;
    uint64_t m = gemm_elems(N, C, 3 * C / t);     /* qkv (column-parallel) */
    uint64_t e = gemm_elems(N, C / t, C);         /* attention projection (row) */
    m = e > m ? e : m;
    e = gemm_elems(N, C, 4 * C / t);              /* fc (column) */
    m = e > m ? e : m;
    e = gemm_elems(N, 4 * C / t, C);              /* fc projection (row) */
    m = e > m ? e : m;
    e = gemm_elems(N, C, (uint64_t)padded_vocab / t); /* the tied head (column) */
    return e > m ? e : m;
}

/* ---- CUDA IPC scratch (plan.h) ---- */

uint64_t px_plan_ipc_slot_bytes(long slot_env)
{
    return slot_env < 4096 ? 4096 : ((uint64_t)slot_env + 255) & ~(uint64_t)255;
}

/* 1 when the group of `kind` holding `rank` has more than one member and
 * all of them on one node */
static int ipc_group(const px_layout_t *l, px_group_kind_t kind, int rank, const int *node_of_rank)
{
    int n = px_layout_group_size(l, kind), *m, one = 1;
    if (n < 2)
        return 0;
    if (!node_of_rank)
        return 1;
    m = malloc((size_t)n * sizeof(*m));
    if (!m)
        return 0;
    px_layout_group(l, kind, rank, m, NULL, NULL);
    for (int i = 1; i < n; i++)
        if (node_of_rank[m[i]] != node_of_rank[m[0]])
            one = 0;
    free(m);
    return one;
}

int px_plan_ipc_comms(const px_layout_t *l, int experts, int rank, const int *node_of_rank,
                      px_group_kind_t *kinds)
{
    px_group_kind_t cand[3] = {l->cp > 1 ? PX_GROUP_DPCP : PX_GROUP_DP, PX_GROUP_TP,
                               PX_GROUP_EDP};
    int n = 0;
    for (int i = 0; i < 3; i++) {
        if (cand[i] == PX_GROUP_EDP && !experts)
            continue;
        if (ipc_group(l, cand[i], rank, node_of_rank)) {
            if (kinds)
                kinds[n] = cand[i];
            n++;
        }
    }
    return n;
}

uint64_t px_plan_ipc_bytes(int comms, uint64_t slot_bytes)
{
    return (uint64_t)(comms > 0 ? comms : 0) * PX_PLAN_IPC_SLOTS * slot_bytes;
}

uint64_t px_plan_ipc_node_bytes(const px_layout_t *l, int experts, const int *node_of_rank,
                                int node, uint64_t slot_bytes, int *comms_p)
{
    int world = px_layout_world(l), most = 0;
    for (int r = 0; r < world; r++) {
        if (node_of_rank[r] != node)
            continue;
        int n = px_plan_ipc_comms(l, experts, r, node_of_rank, NULL);
        most = n > most ? n : most;
    }
    if (comms_p)
        *comms_p = most;
    return px_plan_ipc_bytes(most, slot_bytes);
}

px_status_t px_plan_gpt_activations_prec(int layers, int heads, int dim, int padded_vocab,
                                         int B, int T, int tp, int sequence_parallel, int cp,
                                         int bf16, px_plan_gpt_acts_t *acts)
{
    /* the table's entries (px_plan_gpt_activations' order) */
    enum { LN1 = 1, LN2 = 8, FCH_GELU = 12, LNF = 14 };
    PX_CHECK(px_plan_gpt_activations_cp(layers, heads, dim, padded_vocab, B, T, tp,
                                        sequence_parallel, cp, acts));
    if (!bf16)
        return PX_OK;
    int sp = tp > 1 && sequence_parallel;
    const int all[] = {FCH_GELU, LN1, LN2, LNF};
    for (int j = 0; j < (sp ? 1 : 4); j++) {
        int i = all[j];
        uint64_t words = (acts->count[i] + 1) / 2; /* elements -> 4-byte words */
        acts->floats -= acts->count[i] - words;
        acts->count[i] = words;
        acts->bf16[i] = 1;
    }
    acts->bytes = 4 * acts->floats + 8 * acts->doubles;
    return PX_OK;
}

px_status_t px_plan_gpt_activations_dev(int layers, int heads, int dim, int padded_vocab, int B,
                                        int T, int tp, int sequence_parallel, int cp, int bf16,
                                        int att_lse_only, px_plan_gpt_acts_t *acts)
{
    enum { ATT = 6, SCRATCH = 26 }; /* px_plan_gpt_activations' entries */
    PX_CHECK(px_plan_gpt_activations_prec(layers, heads, dim, padded_vocab, B, T, tp,
                                          sequence_parallel, cp, bf16, acts));
    if (!att_lse_only || cp > 1) /* cp > 1: lse already; the blockwise ops need the scratch */
        return PX_OK;
    uint64_t lse = (uint64_t)layers * B * (uint64_t)(heads / tp) * T;
    acts->floats -= acts->count[ATT] + acts->count[SCRATCH];
    acts->count[ATT] = lse;
    acts->count[SCRATCH] = 0;
    acts->floats += lse;
    acts->bytes = 4 * acts->floats + 8 * acts->doubles;
    return PX_OK;
}

/* n rounded up to 64 elements, as px_matmul_bf16_cuda.cu aligns its operands */
static uint64_t al64(uint64_t n)
{
    return (n + 63) & ~(uint64_t)63;
}

/* One linear layer's bf16 scratch (plan.h), bytes: inp (N,C) already
 * bf16 in memory when `stored` */
static uint64_t gemm_scratch(uint64_t N, uint64_t C, uint64_t OC, int stored, int cuda)
{
    uint64_t f, b;
    if (cuda) { /* bf16 copies; the stored input is read in place */
        f = (stored ? 0 : al64(N * C)) + OC * C;
        b = al64(N * OC) + al64(OC * C) + (stored ? 0 : N * C);
        return 2 * (f > b ? f : b);
    }
    /* doubles: every operand widened, and the fp64 accumulator */
    f = N * C + OC * C + N * OC;
    b = N * OC + OC * C + N * C + (N * C > OC * C ? N * C : OC * C);
    return 8 * (f > b ? f : b);
}

uint64_t px_plan_bf16_gemm_scratch_bytes(int dim, int padded_vocab, int tokens, int tp,
                                         int sequence_parallel, int cuda)
{
    if (dim <= 0 || padded_vocab <= 0 || tokens <= 0 || tp <= 0)
        return 0;
    const uint64_t C = (uint64_t)dim, N = (uint64_t)tokens, t = (uint64_t)tp;
    const int ln = !(tp > 1 && sequence_parallel); /* ln1, ln2, lnf stored bf16 */
    uint64_t m = gemm_scratch(N, C, 3 * C / t, ln, cuda), e; /* qkv: ln1 */
    e = gemm_scratch(N, C / t, C, 0, cuda);                 /* attention projection: atty */
    m = e > m ? e : m;
    e = gemm_scratch(N, C, 4 * C / t, ln, cuda);            /* fc: ln2 */
    m = e > m ? e : m;
    e = gemm_scratch(N, 4 * C / t, C, 1, cuda);             /* fc projection: the GELU output */
    m = e > m ? e : m;
    e = gemm_scratch(N, C, (uint64_t)padded_vocab / t, ln, cuda); /* the tied head: lnf */
    return e > m ? e : m;
}
