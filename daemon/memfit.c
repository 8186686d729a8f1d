/* memfit.c: SubmitJob's memory check (issue 16): the plan's bytes per rank
 * (planner/plan.h, the same figures `pctl plan` shows and the engine lays
 * out) against the memory of the devices the job would be placed on, so a
 * job that cannot fit is rejected at submit with the figures instead of
 * failing seconds later as a rank's out-of-memory.
 *
 * Bytes per rank = the training state's peak (parameters, gradients and
 * AdamW moments in fp32, sharded by the ZeRO stage over dp:
 * px_plan_state_bytes) + the activations of one local micro-batch as the
 * engine allocates them on the node's kind of device
 * (px_plan_gpt_activations_dev: on GPUs the fused attention keeps only the
 * log-sum-exp; with --precision bf16 the bf16-stored activations and the
 * bf16 GEMMs' scratch, px_plan_bf16_gemm_scratch_bytes), for the pipeline
 * stage with the most layers (embedding and head both counted: an upper
 * bound by those two units).
 * A device's memory: a GPU's own; a cpu:N device's share of the host's RAM
 * (MemTotal / the node's cpu devices), since they all draw on it. A node
 * that does not report its memory (an older daemon) is not checked.
 * On a node whose job devices are all GPUs, each rank also holds
 * the CUDA IPC scratch of its communicators whose ranks all share that
 * node (px_plan_ipc_node_bytes, the figure `pctl plan --device cuda`
 * prints): the most any rank there holds is added. A cpu or sim device has
 * no IPC ops (its device buffers are staged through host memory), so it
 * holds none. Pure function of its inputs and PX_IPC_SLOT_BYTES; any
 * thread. */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#include "daemon.h"
#include "jobspec.h"
#include "layout.h"
#include "plan.h"
#include "px_env.h"

uint64_t px_memfit_host_ram(void)
{
    long pages = sysconf(_SC_PHYS_PAGES), size = sysconf(_SC_PAGESIZE);
    return pages > 0 && size > 0 ? (uint64_t)pages * (uint64_t)size : 0;
}

static void fmt_bytes(double b, char *buf, size_t len)
{
    if (b >= 1024.0 * 1024 * 1024)
        snprintf(buf, len, "%.2f GiB", b / (1024.0 * 1024 * 1024));
    else
        snprintf(buf, len, "%.1f MiB", b / (1024.0 * 1024));
}

/* Bytes one rank of `cfg` needs (see the file comment) into *state_p and
 * *acts_p, on a GPU (cuda 1: the CUDA backend's fused attention and bf16
 * scratch) or a cpu device. PX_ERR_INVALID_ARGUMENT where the planner
 * cannot size it (the validator has named those values already; not
 * expected here). */
static px_status_t rank_bytes(const px_job_config_t *cfg, int cuda, double *state_p,
                              double *acts_p)
{
    const px_layout_t *l = &cfg->layout;
    int pp = l->pp > 0 ? l->pp : 1, tp = l->tp > 0 ? l->tp : 1, cp = l->cp > 0 ? l->cp : 1;
    int stage_layers = (cfg->layers + pp - 1) / pp;
    int div = l->dp * cfg->grad_accum * (pp > 1 ? cfg->micro_batches : 1);
    int B = div > 0 ? cfg->batch / div : 0, T = (cfg->seq + cp - 1) / cp;
    uint64_t *units = NULL, total;
    px_plan_precision_t prec;
    px_plan_gpt_acts_t acts;
    px_plan_t *plan = NULL;
    px_status_t status;

    total = tp > 1 ? px_plan_gpt_units_tp(cfg->layers, cfg->dim, cfg->vocab, cfg->seq, tp, &units)
                   : px_plan_gpt_units(cfg->layers, cfg->dim, cfg->vocab, cfg->seq, &units);
    if (!total || B < 1)
        return PX_ERR_INVALID_ARGUMENT;
    /* the largest stage: embedding, stage_layers layers, head */
    units[stage_layers + 1] = units[cfg->layers + 1];
    px_plan_precision_fp32(&prec);
    status = px_plan_create(units, stage_layers + 2, 1, l->dp, cfg->zero, &prec, &plan);
    free(units);
    if (status != PX_OK)
        return status;
    *state_p = px_plan_state_bytes(plan);
    px_plan_destroy(plan);
    /* what the engine allocates on that backend: bf16 storage of the
     * GEMM-only activations, the attention state, the bf16 GEMMs' scratch */
    const int bf16 = cfg->precision == PX_PRECISION_BF16;
    status = px_plan_gpt_activations_dev(stage_layers, cfg->heads, cfg->dim,
                                         px_job_config_padded_vocab(cfg->vocab), B, T, tp,
                                         cfg->sequence_parallel, cp, bf16, cuda, &acts);
    if (status != PX_OK)
        return status;
    *acts_p = (double)acts.bytes;
    if (bf16) /* GPU: bf16 copies in device memory; cpu: doubles in the host's */
        *acts_p += (double)px_plan_bf16_gemm_scratch_bytes(
            cfg->dim, px_job_config_padded_vocab(cfg->vocab), B * T, tp,
            cfg->sequence_parallel, cuda);
    return PX_OK;
}

px_status_t px_memfit_check(const Parallax__V1__JobSpec *spec, const int *node_devices,
                            const char *const *node_names, const uint64_t *node_dev_mem,
                            const int *node_cuda, int nnodes, char *errbuf, size_t errlen)
{
    px_job_config_t cfg;
    double state = 0, acts = 0, need, need_dev[2] = {0, 0}, acts_dev[2] = {0, 0};
    char b1[32], b2[32], b3[32], b4[32], b5[32], b6[32], ipc_why[160], why[256];
    int *node_of_rank, world, *used;
    const uint64_t slot = px_plan_ipc_slot_bytes(px_env_int("PX_IPC_SLOT_BYTES"));

    if (!spec->model)
        return PX_OK; /* px_validate_spec names it */
    px_jobspec_to_config(spec, &cfg);
    /* [0]: cpu devices, [1]: GPUs (the CUDA backend's buffers) */
    for (int c = 0; c < 2; c++) {
        if (rank_bytes(&cfg, c, &state, &acts_dev[c]) != PX_OK)
            return PX_OK; /* not sizeable: the validator's business */
        need_dev[c] = state + acts_dev[c];
    }
    /* the nodes the placement puts ranks on (as px_validate_spec placed it) */
    world = px_layout_world(&cfg.layout);
    node_of_rank = malloc((size_t)(world > 0 ? world : 1) * sizeof(*node_of_rank));
    used = calloc((size_t)(nnodes > 0 ? nnodes : 1), sizeof(*used));
    if (!node_of_rank || !used) {
        free(node_of_rank);
        free(used);
        return px_invalid(errbuf, errlen, "out of memory checking the memory of %d ranks", world);
    }
    if (px_layout_place(&cfg.layout, node_devices, nnodes, node_of_rank, why, sizeof(why)) ==
        PX_OK) {
        for (int r = 0; r < world; r++)
            if (node_of_rank[r] >= 0 && node_of_rank[r] < nnodes)
                used[node_of_rank[r]] = 1;
    }
    for (int n = 0; n < nnodes; n++) {
        int comms = 0, gpu = node_cuda && node_cuda[n];
        need = need_dev[gpu];
        acts = acts_dev[gpu];
        /* CUDA IPC scratch, where the ranks run on this node's GPUs */
        double ipc = used[n] && gpu
                         ? (double)px_plan_ipc_node_bytes(&cfg.layout, cfg.experts, node_of_rank,
                                                          n, slot, &comms)
                         : 0.0;
        if (!used[n] || !node_dev_mem[n] || need + ipc <= (double)node_dev_mem[n])
            continue;
        free(used);
        free(node_of_rank);
        ipc_why[0] = '\0';
        if (ipc > 0) {
            fmt_bytes(ipc, b5, sizeof(b5));
            fmt_bytes((double)slot, b6, sizeof(b6));
            snprintf(ipc_why, sizeof(ipc_why), ", CUDA IPC scratch %s (%d communicator%s x %d "
                     "slots x %s)", b5, comms, comms == 1 ? "" : "s", PX_PLAN_IPC_SLOTS, b6);
        }
        fmt_bytes(need + ipc, b1, sizeof(b1));
        fmt_bytes(state, b2, sizeof(b2));
        fmt_bytes(acts, b3, sizeof(b3));
        fmt_bytes((double)node_dev_mem[n], b4, sizeof(b4));
        return px_invalid(errbuf, errlen,
                          "out of memory at submit: each rank needs %s (%.0f bytes: training "
                          "state %s with zero=%d over dp=%d, activations %s for a micro-batch "
                          "of %d x seq=%d%s) but a device of node %s has %s (%" PRIu64 " bytes)",
                          b1, need + ipc, b2, cfg.zero, cfg.layout.dp, b3,
                          cfg.batch / (cfg.layout.dp * cfg.grad_accum *
                                       (cfg.layout.pp > 1 ? cfg.micro_batches : 1)),
                          cfg.seq, ipc_why, node_names[n] ? node_names[n] : "?", b4,
                          node_dev_mem[n]);
    }
    free(node_of_rank);
    free(used);
    return PX_OK;
}
