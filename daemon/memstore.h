/* memstore.h: memory reports of training ranks in parallaxd (`pctl
 * mem`). (A JobSpec's ZeRO and checkpoint fields are checked by the
 * planner's one validator, px_job_config_check.)
 *
 * Every rank attaches a RankMemory (bytes per category, current and peak,
 * and the plan's prediction) to its ReportProgress; the coordinator keeps the
 * latest of each rank of each job in table rank_memory of
 * the store's database (through the store's connection) and answers
 * Control.GetMemory from it. Loop thread only. */
#ifndef PX_MEMSTORE_H
#define PX_MEMSTORE_H

#include <stddef.h>

#include "parallax.pb-c.h"
#include "px_status.h"
#include "store.h"

/* Records `mem` as rank mem->rank's latest report for job_id. Written to
 * the database when `force`, on the first two steps, every 10th step, or
 * when a peak changed since the last write (a step's report is otherwise
 * skipped: the figures are the same). PX_ERR_IO (logged) on a database
 * error. */
px_status_t px_memstore_put(px_store_t *store, const char *job_id,
                            const Parallax__V1__RankMemory *mem, int force);

/* Fills resp->ranks (ordered by rank) with the stored reports of job_id;
 * release with px_memstore_free. None stored: empty, PX_OK. */
px_status_t px_memstore_get(px_store_t *store, const char *job_id,
                            Parallax__V1__GetMemoryResponse *resp);
void px_memstore_free(Parallax__V1__GetMemoryResponse *resp);

#endif
