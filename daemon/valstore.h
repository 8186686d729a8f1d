/* valstore.h: the validation losses (and MFU) of training jobs in parallaxd.
 *
 * A rank's step report (StepMetrics) carries val_loss > 0 after the steps
 * it evaluated (engine/eval.h). The coordinator keeps every such figure in
 * table val_loss (job, step, val_loss) of the store's database (through the
 * store's connection, px_store_table) and the last one on the job
 * (px_job_t.val_loss / val_step, Job.val_loss / val_step: `pctl status`);
 * GetMetrics answers with each step's val_loss beside its training loss.
 * Loop thread only. */
#ifndef PXD_VALSTORE_H
#define PXD_VALSTORE_H

#include "daemon.h"

/* When m->val_loss > 0: sets job->val_loss and job->val_step and appends
 * the figure to the table; when m->mfu > 0 (the ranks know the device's
 * peak) appends it to table step_mfu. PX_ERR_IO (logged) on a database
 * error. */
px_status_t px_valstore_record(px_store_t *store, px_job_t *job,
                               const Parallax__V1__StepMetrics *m);

/* Sets val_loss and mfu on the steps of resp (px_store_metrics_get's, in
 * step order) that have a stored validation loss or MFU of job_id. */
px_status_t px_valstore_fill(px_store_t *store, const char *job_id,
                             Parallax__V1__GetMetricsResponse *resp);

/* The last stored validation loss of job_id into job->val_loss / val_step
 * (a job loaded at start); none: both left as they are. */
px_status_t px_valstore_load_last(px_store_t *store, px_job_t *job);

#endif
