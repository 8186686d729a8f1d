/* validate.c: SubmitJob's checks of a training JobSpec (see daemon.h).
 *
 * The job's rules are the planner's one validator (px_job_config_check,
 * planner/jobcfg.h: sizes, the layout against the model and batch, the
 * optimizer, checkpoints, absolute paths, the token file, every token <
 * vocab); this file adds the name's rule (jobname.h) and what only a daemon knows:
 * max_restarts, and whether the layout can be placed on the cluster's
 * devices (px_layout_place, planner/layout.h). Every rejection names the
 * offending value, so pctl can print it as is; every rejection is
 * PX_ERR_INVALID_ARGUMENT (a missing data file too: the spec is wrong).
 * Pure function of its inputs and the files; any thread. */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "daemon.h"
#include "jobname.h"
#include "jobspec.h"

/* Whether the layout fits the cluster's devices when every one of them is
 * free: the world in all, and each tensor group whole on one node. A
 * layout that fits only later (devices busy now) waits PENDING. */
static px_status_t check_placement(const px_layout_t *l, const int *node_devices, int nnodes,
                                   char *errbuf, size_t errlen)
{
    int world = px_layout_world(l), total = 0, *node_of_rank;
    char lbuf[128], why[512];
    px_status_t status;

    for (int n = 0; n < nnodes; n++)
        total += node_devices[n] > 0 ? node_devices[n] : 0;
    if (world > total)
        return px_invalid(errbuf, errlen, "world=%d (dp=%d x tp=%d x pp=%d x cp=%d) but the cluster "
                    "has %d devices", world, l->dp, l->tp, l->pp, l->cp, total);
    node_of_rank = malloc((size_t)world * sizeof(*node_of_rank));
    if (!node_of_rank)
        return px_invalid(errbuf, errlen, "out of memory checking the placement of %d ranks", world);
    status = px_layout_place(l, node_devices, nnodes, node_of_rank, why, sizeof(why));
    free(node_of_rank);
    if (status != PX_OK)
        return px_invalid(errbuf, errlen, "layout %s cannot be placed on the %d nodes: %s",
                    px_layout_str(l, lbuf, sizeof(lbuf)), nnodes, why);
    return PX_OK;
}

px_status_t px_validate_spec(const Parallax__V1__JobSpec *spec, const int *node_devices,
                             int nnodes, char *errbuf, size_t errlen)
{
    px_job_config_t cfg;
    px_status_t status;

    if (!spec->model)
        return px_invalid(errbuf, errlen, "model: missing (layers, heads, dim, seq)");
    px_jobspec_to_config(spec, &cfg); /* unknown precision / schedule names: the check names them */
    /* the job's own rules, layouts the engine cannot run yet included: a
     * layout that cannot be placed is named as such first */
    status = px_job_config_check(&cfg,
                                 PX_JOBCFG_CHECK_DATA | PX_JOBCFG_ABSOLUTE_PATHS |
                                     PX_JOBCFG_LAYOUT_ONLY,
                                 errbuf, errlen);
    if (status != PX_OK)
        return PX_ERR_INVALID_ARGUMENT;
    if (px_job_name_check(spec->name, errbuf, errlen) != PX_OK) /* planner/jobname.h */
        return PX_ERR_INVALID_ARGUMENT;
    if (spec->max_restarts > 100)
        return px_invalid(errbuf, errlen, "max_restarts=%u is out of range (0..100)",
                    spec->max_restarts);
    if (spec->max_restarts && !cfg.checkpoint_dir)
        return px_invalid(errbuf, errlen, "max_restarts=%u needs checkpoint_dir (a restart resumes "
                    "from its newest checkpoint)", spec->max_restarts);
    if ((status = check_placement(&cfg.layout, node_devices, nnodes, errbuf, errlen)) != PX_OK)
        return status;
    /* then what the engine cannot run yet (the files were read above) */
    if (px_job_config_check(&cfg, PX_JOBCFG_ABSOLUTE_PATHS, errbuf, errlen) != PX_OK)
        return PX_ERR_INVALID_ARGUMENT;
    return PX_OK;
}
