/* model.c: the GPT tensor table (model.h) and what is derived from it:
 * canonical offsets, units, sizes.
 *
 * The table below is the only place that lists the model's tensors; shapes
 * are written in symbolic dims (C, 3C, 4C, Vp, maxT) and stacked over L for
 * block tensors. Pure arithmetic; any thread. */
#include "model.h"

#include "jobcfg.h"

enum { D_NONE = 0, D_C, D_3C, D_4C, D_VP, D_MAXT };

static const struct {
    const char *name;
    int rows, cols; /* one layer's slice: (rows, cols) or (rows) when cols = D_NONE */
    int parts;      /* row blocks a column split cuts separately (q | k | v) */
    int decay;
    px_model_owner_t owner;
    px_model_init_t init;
    px_model_split_t split;
} table[PX_MODEL_NUM_TENSORS] = {
    {"wte", D_VP, D_C, 1, 1, PX_MODEL_OWNER_EMBED, PX_MODEL_INIT_NORMAL, PX_MODEL_SPLIT_VOCAB},
    {"wpe", D_MAXT, D_C, 1, 1, PX_MODEL_OWNER_EMBED, PX_MODEL_INIT_NORMAL, PX_MODEL_SPLIT_REPLICATED},
    {"ln1w", D_C, D_NONE, 1, 0, PX_MODEL_OWNER_BLOCK, PX_MODEL_INIT_ONES, PX_MODEL_SPLIT_REPLICATED},
    {"ln1b", D_C, D_NONE, 1, 0, PX_MODEL_OWNER_BLOCK, PX_MODEL_INIT_ZEROS, PX_MODEL_SPLIT_REPLICATED},
    {"qkvw", D_3C, D_C, 3, 1, PX_MODEL_OWNER_BLOCK, PX_MODEL_INIT_NORMAL, PX_MODEL_SPLIT_COLUMN},
    {"qkvb", D_3C, D_NONE, 3, 0, PX_MODEL_OWNER_BLOCK, PX_MODEL_INIT_ZEROS, PX_MODEL_SPLIT_COLUMN},
    {"attprojw", D_C, D_C, 1, 1, PX_MODEL_OWNER_BLOCK, PX_MODEL_INIT_RESIDUAL, PX_MODEL_SPLIT_ROW},
    {"attprojb", D_C, D_NONE, 1, 0, PX_MODEL_OWNER_BLOCK, PX_MODEL_INIT_ZEROS,
     PX_MODEL_SPLIT_REPLICATED},
    {"ln2w", D_C, D_NONE, 1, 0, PX_MODEL_OWNER_BLOCK, PX_MODEL_INIT_ONES, PX_MODEL_SPLIT_REPLICATED},
    {"ln2b", D_C, D_NONE, 1, 0, PX_MODEL_OWNER_BLOCK, PX_MODEL_INIT_ZEROS, PX_MODEL_SPLIT_REPLICATED},
    {"fcw", D_4C, D_C, 1, 1, PX_MODEL_OWNER_BLOCK, PX_MODEL_INIT_NORMAL, PX_MODEL_SPLIT_COLUMN},
    {"fcb", D_4C, D_NONE, 1, 0, PX_MODEL_OWNER_BLOCK, PX_MODEL_INIT_ZEROS, PX_MODEL_SPLIT_COLUMN},
    {"fcprojw", D_C, D_4C, 1, 1, PX_MODEL_OWNER_BLOCK, PX_MODEL_INIT_RESIDUAL, PX_MODEL_SPLIT_ROW},
    {"fcprojb", D_C, D_NONE, 1, 0, PX_MODEL_OWNER_BLOCK, PX_MODEL_INIT_ZEROS,
     PX_MODEL_SPLIT_REPLICATED},
    {"lnfw", D_C, D_NONE, 1, 0, PX_MODEL_OWNER_HEAD, PX_MODEL_INIT_ONES, PX_MODEL_SPLIT_REPLICATED},
    {"lnfb", D_C, D_NONE, 1, 0, PX_MODEL_OWNER_HEAD, PX_MODEL_INIT_ZEROS, PX_MODEL_SPLIT_REPLICATED},
};

const char *px_model_owner_name(px_model_owner_t o)
{
    static const char *n[] = {"embed", "block", "head"};
    return o >= 0 && o <= PX_MODEL_OWNER_HEAD ? n[o] : "?";
}

const char *px_model_init_name(px_model_init_t i)
{
    static const char *n[] = {"normal", "residual", "ones", "zeros"};
    return i >= 0 && i <= PX_MODEL_INIT_ZEROS ? n[i] : "?";
}

const char *px_model_split_name(px_model_split_t sp)
{
    static const char *n[] = {"replicated", "column", "row", "vocab"};
    return sp >= 0 && sp <= PX_MODEL_SPLIT_VOCAB ? n[sp] : "?";
}

int px_model_padded_vocab(const px_model_config_t *cfg)
{
    return cfg->padded_vocab > 0 ? cfg->padded_vocab : px_job_config_padded_vocab(cfg->vocab);
}

static int dim_of(const px_model_config_t *cfg, int d)
{
    switch (d) {
    case D_C: return cfg->dim;
    case D_3C: return 3 * cfg->dim;
    case D_4C: return 4 * cfg->dim;
    case D_VP: return px_model_padded_vocab(cfg);
    case D_MAXT: return cfg->max_seq;
    default: return 0;
    }
}

/* shape and size of tensor i, without its offset */
static void shape_of(const px_model_config_t *cfg, int i, px_model_tensor_t *t)
{
    int nd = 0;
    if (table[i].owner == PX_MODEL_OWNER_BLOCK)
        t->shape[nd++] = cfg->layers;
    t->shape[nd++] = dim_of(cfg, table[i].rows);
    if (table[i].cols != D_NONE)
        t->shape[nd++] = dim_of(cfg, table[i].cols);
    t->ndim = nd;
    t->size = 1;
    for (int d = 0; d < nd; d++)
        t->size *= (size_t)t->shape[d];
    for (int d = nd; d < 3; d++)
        t->shape[d] = 0;
}

void px_model_tensor(const px_model_config_t *cfg, int i, px_model_tensor_t *t)
{
    size_t off = 0;
    for (int j = 0; j < i; j++) {
        px_model_tensor_t o;
        shape_of(cfg, j, &o);
        off += o.size;
    }
    shape_of(cfg, i, t);
    t->name = table[i].name;
    t->offset = off;
    t->valid = table[i].rows == D_VP ? (size_t)cfg->vocab * (t->size / (size_t)t->shape[0])
                                     : t->size;
    t->decay = table[i].decay;
    t->owner = table[i].owner;
    t->init = table[i].init;
    t->split = table[i].split;
}

uint64_t px_model_num_params(const px_model_config_t *cfg)
{
    px_model_tensor_t t;
    px_model_tensor(cfg, PX_MODEL_NUM_TENSORS - 1, &t);
    return t.offset + t.size;
}

int px_model_num_units(const px_model_config_t *cfg) { return cfg->layers + 2; }
int px_model_unit_layer(const px_model_config_t *cfg, int l) { (void)cfg; return 1 + l; }
int px_model_unit_head(const px_model_config_t *cfg) { return cfg->layers + 1; }

px_model_owner_t px_model_unit_owner(const px_model_config_t *cfg, int u, int *layer_p)
{
    if (layer_p)
        *layer_p = u >= 1 && u <= cfg->layers ? u - 1 : -1;
    if (u == PX_MODEL_UNIT_EMBED)
        return PX_MODEL_OWNER_EMBED;
    return u == px_model_unit_head(cfg) ? PX_MODEL_OWNER_HEAD : PX_MODEL_OWNER_BLOCK;
}

static int tp_of(const px_model_config_t *cfg) { return cfg->tp > 1 ? cfg->tp : 1; }

/* The dense MLP's tensors: the block's last four (fcw fcb fcprojw fcprojb),
 * which a MoE layer's unit leaves out. */
#define MLP_FIRST 10

int px_model_layer_is_moe(const px_model_config_t *cfg, int l)
{
    px_model_moe_t m = {.layers = cfg->layers, .dim = cfg->dim, .experts = cfg->experts,
                        .moe_every = cfg->moe_every};
    return px_model_moe_is_layer(&m, l);
}

int px_model_unit_tensors(const px_model_config_t *cfg, int u, px_model_unit_tensor_t *out)
{
    int layer, n = 0, tp = tp_of(cfg);
    px_model_owner_t owner = px_model_unit_owner(cfg, u, &layer);
    size_t uoff = 0;
    const int moe = owner == PX_MODEL_OWNER_BLOCK && px_model_layer_is_moe(cfg, layer);
    for (int i = 0; i < PX_MODEL_NUM_TENSORS; i++) {
        if (table[i].owner != owner || (moe && i >= MLP_FIRST))
            continue;
        px_model_tensor_t t;
        px_model_tensor(cfg, i, &t);
        size_t per = owner == PX_MODEL_OWNER_BLOCK ? t.size / (size_t)cfg->layers : t.size;
        px_model_split_t split = tp > 1 ? table[i].split : PX_MODEL_SPLIT_REPLICATED;
        out[n].tensor = i;
        out[n].unit_offset = uoff;
        out[n].size = split == PX_MODEL_SPLIT_REPLICATED ? per : per / (size_t)tp;
        out[n].canon_offset = t.offset + (owner == PX_MODEL_OWNER_BLOCK ? (size_t)layer * per : 0);
        out[n].decay = t.decay;
        out[n].split = split;
        out[n].rows = dim_of(cfg, table[i].rows);
        out[n].cols = table[i].cols == D_NONE ? 1 : dim_of(cfg, table[i].cols);
        out[n].parts = table[i].parts;
        out[n].tp = tp;
        out[n].tp_rank = tp > 1 ? cfg->tp_rank : 0;
        uoff += out[n].size;
        n++;
    }
    return n;
}

uint64_t px_model_unit_size(const px_model_config_t *cfg, int u)
{
    px_model_unit_tensor_t t[PX_MODEL_MAX_UNIT_TENSORS];
    int n = px_model_unit_tensors(cfg, u, t);
    return n ? t[n - 1].unit_offset + t[n - 1].size : 0;
}

uint64_t px_model_unit_size_tp(const px_model_config_t *cfg, int u, int tp)
{
    px_model_config_t c = *cfg;
    c.tp = tp;
    c.tp_rank = 0;
    return px_model_unit_size(&c, u);
}

int px_model_shard_nruns(const px_model_unit_tensor_t *t)
{
    switch (t->split) {
    case PX_MODEL_SPLIT_COLUMN: return t->parts;
    case PX_MODEL_SPLIT_ROW: return t->rows;
    default: return 1;
    }
}

void px_model_shard_run(const px_model_unit_tensor_t *t, int j, size_t *local_p, size_t *canon_p,
                        size_t *len_p)
{
    size_t rows = (size_t)t->rows, cols = (size_t)t->cols, tp = (size_t)t->tp,
           r = (size_t)t->tp_rank;
    switch (t->split) {
    case PX_MODEL_SPLIT_COLUMN: { /* block j: its rows [r rp, (r+1) rp) */
        size_t block = rows / (size_t)t->parts, rp = block / tp;
        *local_p = (size_t)j * rp * cols;
        *canon_p = ((size_t)j * block + r * rp) * cols;
        *len_p = rp * cols;
        return;
    }
    case PX_MODEL_SPLIT_ROW: { /* row j: its columns [r cp, (r+1) cp) */
        size_t cp = cols / tp;
        *local_p = (size_t)j * cp;
        *canon_p = (size_t)j * cols + r * cp;
        *len_p = cp;
        return;
    }
    case PX_MODEL_SPLIT_VOCAB:
        *local_p = 0;
        *canon_p = r * (rows / tp) * cols;
        *len_p = rows / tp * cols;
        return;
    default:
        *local_p = 0;
        *canon_p = 0;
        *len_p = rows * cols;
        return;
    }
}

/* ---- the mixture of experts (model.h) ---- */

int px_model_moe_is_layer(const px_model_moe_t *m, int l)
{
    return m->experts > 0 && m->moe_every > 0 && l >= 0 && l < m->layers &&
           (l + 1) % m->moe_every == 0;
}

int px_model_moe_num_layers(const px_model_moe_t *m)
{
    int n = 0;
    for (int l = 0; l < m->layers; l++)
        n += px_model_moe_is_layer(m, l);
    return n;
}

const char *px_model_moe_tensor_name(int i)
{
    static const char *n[PX_MODEL_MOE_NUM_TENSORS] = {"moe_router", "moe_fcw", "moe_fcb",
                                                      "moe_fcprojw", "moe_fcprojb"};
    return i >= 0 && i < PX_MODEL_MOE_NUM_TENSORS ? n[i] : "?";
}

uint64_t px_model_moe_tensor(const px_model_moe_t *m, int i, int *shape)
{
    int E = m->experts, C = m->dim;
    int sh[PX_MODEL_MOE_NUM_TENSORS][3] = {{E, C, 0}, {E, 4 * C, C}, {E, 4 * C, 0},
                                           {E, C, 4 * C}, {E, C, 0}};
    if (i < 0 || i >= PX_MODEL_MOE_NUM_TENSORS)
        return 0;
    uint64_t n = 1;
    for (int d = 0; d < 3; d++) {
        if (shape)
            shape[d] = sh[i][d];
        if (sh[i][d])
            n *= (uint64_t)sh[i][d];
    }
    return n;
}

uint64_t px_model_moe_expert_size(int dim)
{
    return 8 * (uint64_t)dim * dim + 5 * (uint64_t)dim;
}

uint64_t px_model_moe_num_params(const px_model_moe_t *m)
{
    uint64_t per = 0;
    for (int i = 0; i < PX_MODEL_MOE_NUM_TENSORS; i++)
        per += px_model_moe_tensor(m, i, NULL);
    return m->experts > 0 ? per * (uint64_t)px_model_moe_num_layers(m) : 0;
}

uint64_t px_model_moe_rank_params(const px_model_moe_t *m, int ep)
{
    uint64_t E = (uint64_t)m->experts, C = (uint64_t)m->dim;
    if (ep < 1 || m->experts <= 0)
        return 0;
    return (uint64_t)px_model_moe_num_layers(m) *
           (E * C + E / (uint64_t)ep * px_model_moe_expert_size(m->dim));
}

uint64_t px_model_moe_stage_params(const px_model_moe_t *m, int ep, const unsigned char *held)
{
    int nm = px_model_moe_num_layers(m), n = 0;
    for (int l = 0; l < m->layers; l++)
        n += px_model_moe_is_layer(m, l) && (!held || held[l]);
    return nm ? px_model_moe_rank_params(m, ep) / (uint64_t)nm * (uint64_t)n : 0;
}
