/* memfit.c: SubmitJob's memory check: the plan's bytes per rank
 * (planner/jobplan.h px_plan_job, the one recipe `pctl plan` prints and the
 * engine lays its buffers out by) against the memory of the devices the
 * job would be placed on, so a job that cannot fit is rejected at submit
 * with the figures instead of failing seconds later as a rank's
 * out-of-memory.
 *
 * Bytes per rank = the plan's total for the pipeline stage that needs the
 * most (stage -1): the training state's peak (fp32 parameters, gradients
 * and AdamW moments of the stage's tp-local units, ZeRO-sharded over dp x
 * cp, the experts whole), the activations of the stage's slots as the
 * engine allocates them on the node's kind of device (on GPUs the fused
 * attention keeps only the log-sum-exp; --precision bf16: the bf16-stored
 * activations and the bf16 GEMMs' scratch), zb1's stash and the MoE
 * layers' buffers.
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
#include "jobplan.h"
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

px_status_t px_memfit_check(const Parallax__V1__JobSpec *spec, const int *node_devices,
                            const char *const *node_names, const uint64_t *node_dev_mem,
                            const int *node_cuda, int nnodes, char *errbuf, size_t errlen)
{
    px_job_config_t cfg;
    px_job_plan_t jp[2] = {{0}, {0}};
    double state = 0, acts = 0, need;
    char b1[32], b2[32], b3[32], b4[32], b5[32], b6[32], ipc_why[160], why[256];
    int *node_of_rank, world, *used;
    const uint64_t slot = px_plan_ipc_slot_bytes(px_env_int("PX_IPC_SLOT_BYTES"));

    if (!spec->model)
        return PX_OK; /* px_validate_spec names it */
    px_jobspec_to_config(spec, &cfg);
    /* [0]: cpu devices, [1]: GPUs (the CUDA backend's buffers) */
    for (int c = 0; c < 2; c++)
        if (px_plan_job(&cfg, c ? PX_PLAN_DEV_CUDA : PX_PLAN_DEV_CPU, -1, &jp[c]) != PX_OK) {
            px_job_plan_free(&jp[0]);
            return PX_OK; /* not sizeable: the validator's business */
        }
    /* the nodes the placement puts ranks on (as px_validate_spec placed it) */
    world = px_layout_world(&cfg.layout);
    node_of_rank = malloc((size_t)(world > 0 ? world : 1) * sizeof(*node_of_rank));
    used = calloc((size_t)(nnodes > 0 ? nnodes : 1), sizeof(*used));
    if (!node_of_rank || !used) {
        free(node_of_rank);
        free(used);
        px_job_plan_free(&jp[0]);
        px_job_plan_free(&jp[1]);
        return px_invalid(errbuf, errlen, "out of memory checking the memory of %d ranks", world);
    }
    if (px_layout_place(&cfg.layout, node_devices, nnodes, node_of_rank, why, sizeof(why)) ==
        PX_OK) {
        for (int r = 0; r < world; r++)
            if (node_of_rank[r] >= 0 && node_of_rank[r] < nnodes)
                used[node_of_rank[r]] = 1;
    }
    for (int n = 0; n < nnodes; n++) {
        int gpu = node_cuda && node_cuda[n];
        px_job_plan_t *p = &jp[gpu];
        if (!used[n])
            continue;
        /* CUDA IPC scratch, where the ranks run on this node's GPUs */
        px_plan_job_add_ipc(p, &cfg, node_of_rank, n, slot);
        double ipc = (double)p->ipc_bytes;
        int comms = p->ipc_comms;
        state = px_plan_state_bytes(p->state);
        need = p->total - ipc;
        acts = need - state;
        if (!node_dev_mem[n] || need + ipc <= (double)node_dev_mem[n])
            continue;
        free(used);
        free(node_of_rank);
        px_job_plan_free(&jp[0]);
        px_job_plan_free(&jp[1]);
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
                          "state %s with zero=%d over dp x cp=%d, activations %s for a "
                          "micro-batch of %d x seq=%d%s) but a device of node %s has %s (%" PRIu64
                          " bytes)",
                          b1, need + ipc, b2, cfg.zero, cfg.layout.dp * cfg.layout.cp, b3,
                          p->micro_batch, p->seq_local, ipc_why,
                          node_names[n] ? node_names[n] : "?", b4, node_dev_mem[n]);
    }
    free(node_of_rank);
    free(used);
    px_job_plan_free(&jp[0]);
    px_job_plan_free(&jp[1]);
    return PX_OK;
}
