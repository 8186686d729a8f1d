/* pctl_mem.c: `pctl mem JOB [--json]`, the memory of a job's ranks
 * (Control.GetMemory, answered by the job's coordinator from the ranks'
 * latest reports).
 *
 * Table: one row per rank with its dp and tp coordinates (a tensor rank
 * holds its shard of the split tensors, so its plan is its own), for each
 * category "current/peak" in MB (10^6 bytes), then the peak of params +
 * grads + optimizer held at once next to the plan's prediction of it.
 * With context parallelism (cp > 1) a rank's row also gives its cp index
 * and the tokens of each sequence it holds (chunks i and 2cp-1-i of the
 * 2cp chunks, engine/ring_attn.h), so the activations column reads against
 * the context slice. A daemon from before tensor parallelism sends no tp /
 * world: tp 1, world the ranks listed. A rank on a GPU adds its device's
 * used/total memory in GB as cudaMemGetInfo reports it (column device-GB,
 * JSON "device"; the categories are then device bytes); a CPU rank shows
 * "-" (null); pctl_memfmt.c. Single-threaded; one unary RPC. */
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "pctl.h"

#define M_GET_MEMORY "/parallax.v1.Control/GetMemory"

static const Parallax__V1__MemoryCategory *cat(const Parallax__V1__RankMemory *m,
                                                const char *name)
{
    for (size_t i = 0; i < m->n_categories; i++)
        if (m->categories[i]->name && !strcmp(m->categories[i]->name, name))
            return m->categories[i];
    return NULL;
}

static const char *const cats[] = {"params", "grads", "optimizer", "activations", "comm",
                                   "workspace"};
#define N_CATS (sizeof(cats) / sizeof(cats[0]))

int pctl_cmd_mem(pctl_ctx_t *ctx, int argc, char **argv)
{
    static const struct option opts[] = {
        {"json", no_argument, NULL, 'j'}, {"help", no_argument, NULL, 'h'}, {NULL, 0, NULL, 0}};
    Parallax__V1__GetMemoryRequest req = PARALLAX__V1__GET_MEMORY_REQUEST__INIT;
    Parallax__V1__GetMemoryResponse *resp = NULL;
    int json = 0, opt, rc = PCTL_EXIT_FAIL;

    opterr = 0;
    while ((opt = getopt_long(argc, argv, ":h", opts, NULL)) != -1) {
        switch (opt) {
        case 'j': json = 1; break;
        case 'h': return pctl_help("mem");
        default: return pctl_usage_error("mem", "unknown option '%s'", argv[optind - 1]);
        }
    }
    if (optind + 1 != argc)
        return pctl_usage_error("mem", optind < argc ? "one JOB only" : "missing JOB");
    char idbuf[256];
    req.job_id = (char *)pctl_job_id(ctx, argv[optind], idbuf, sizeof(idbuf));
    if (pctl_call(ctx, "mem", M_GET_MEMORY, &req.base,
                  &parallax__v1__get_memory_response__descriptor, (ProtobufCMessage **)&resp))
        return PCTL_EXIT_FAIL;
    unsigned tp = resp->tp ? resp->tp : 1, cp = resp->cp ? resp->cp : 1;
    /* a context rank's chunks: c tokens each (0: no cp or no seq known) */
    unsigned chunk = cp > 1 && resp->seq % (2 * cp) == 0 ? resp->seq / (2 * cp) : 0;
    unsigned world = resp->world ? resp->world : (unsigned)resp->n_ranks;
    if (json) {
        json_t *ranks = json_array();
        for (size_t i = 0; i < resp->n_ranks; i++) {
            const Parallax__V1__RankMemory *m = resp->ranks[i];
            json_t *c = json_object();
            for (size_t k = 0; k < m->n_categories; k++) {
                const Parallax__V1__MemoryCategory *mc = m->categories[k];
                json_object_set_new(c, mc->name ? mc->name : "?",
                                    json_pack("{s:I, s:I, s:f}", "current",
                                              (json_int_t)mc->current_bytes, "peak",
                                              (json_int_t)mc->peak_bytes, "plan",
                                              mc->plan_bytes));
            }
            json_t *jr = json_pack("{s:i, s:i, s:i, s:i, s:o, s:I, s:f}",
                                   "rank", (int)m->rank, "dp", (int)m->dp_rank,
                                   "tp", (int)m->tp_rank, "step", (int)m->step,
                                   "categories", c, "state_peak",
                                   (json_int_t)m->state_peak_bytes,
                                   "plan_state_peak", m->plan_state_peak_bytes);
            if (jr) /* cudaMemGetInfo beside the categories; null on CPU */
                json_object_set_new(jr, "device", pctl_mem_device_json(m));
            if (jr && cp > 1) {
                unsigned i0 = m->cp_rank, i1 = 2 * cp - 1 - m->cp_rank;
                json_object_set_new(jr, "cp", json_integer(m->cp_rank));
                if (chunk)
                    json_object_set_new(jr, "tokens",
                                        json_pack("[[i,i],[i,i]]", i0 * chunk, (i0 + 1) * chunk,
                                                  i1 * chunk, (i1 + 1) * chunk));
            }
            json_array_append_new(ranks, jr);
        }
        rc = pctl_json_print(json_pack("{s:s, s:i, s:i, s:i, s:i, s:i, s:i, s:o}", "job_id",
                                       resp->job_id ? resp->job_id : "", "zero", (int)resp->zero,
                                       "dp", (int)resp->dp, "tp", (int)tp, "cp", (int)cp,
                                       "seq", (int)resp->seq, "world", (int)world,
                                       "ranks", ranks))
                 ? PCTL_EXIT_FAIL
                 : PCTL_EXIT_OK;
        goto out;
    }
    printf("job %s: zero %u, dp %u, tp %u (%u ranks); MB (10^6 bytes), current/peak\n",
           resp->job_id ? resp->job_id : "", resp->zero, resp->dp, tp, world);
    if (cp > 1)
        printf("context parallel: cp %u, seq %u: each rank holds %u tokens of every sequence "
               "(2 of %u chunks)\n", cp, resp->seq, resp->seq / cp, 2 * cp);
    if (!resp->n_ranks) {
        printf("(no memory report yet)\n");
        rc = PCTL_EXIT_OK;
        goto out;
    }
    printf("%-4s %3s %3s %5s", "rank", "dp", "tp", "step");
    for (size_t k = 0; k < N_CATS; k++)
        printf(" %15s", cats[k]);
    printf(" %10s %10s %7s %15s", "state-pk", "plan", "ratio", "device-GB");
    if (cp > 1)
        printf(" %3s %s", "cp", "tokens");
    printf("\n");
    for (size_t i = 0; i < resp->n_ranks; i++) {
        const Parallax__V1__RankMemory *m = resp->ranks[i];
        char buf[32];
        printf("%-4u %3u %3u %5u", m->rank, m->dp_rank, m->tp_rank, m->step);
        for (size_t k = 0; k < N_CATS; k++) {
            const Parallax__V1__MemoryCategory *mc = cat(m, cats[k]);
            if (mc)
                snprintf(buf, sizeof(buf), "%.2f/%.2f", mc->current_bytes / 1e6,
                         mc->peak_bytes / 1e6);
            else
                snprintf(buf, sizeof(buf), "-");
            printf(" %15s", buf);
        }
        printf(" %10.2f %10.2f %7.3f", m->state_peak_bytes / 1e6,
               m->plan_state_peak_bytes / 1e6,
               m->plan_state_peak_bytes > 0 ? m->state_peak_bytes / m->plan_state_peak_bytes
                                            : 0.0);
        printf(" %15s", pctl_mem_device_cell(m, buf, sizeof(buf)));
        if (cp > 1 && chunk) {
            unsigned i0 = m->cp_rank, i1 = 2 * cp - 1 - m->cp_rank;
            printf(" %3u [%u,%u)+[%u,%u)", m->cp_rank, i0 * chunk, (i0 + 1) * chunk,
                   i1 * chunk, (i1 + 1) * chunk);
        } else if (cp > 1)
            printf(" %3u", m->cp_rank);
        printf("\n");
    }
    rc = PCTL_EXIT_OK;
out:
    protobuf_c_message_free_unpacked(&resp->base, NULL);
    return rc;
}
