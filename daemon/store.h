/* store.h: parallaxd's SQLite database (state-dir/parallax.db, WAL).
 *
 * Tables: jobs (one row per job this node coordinates; the spec as a
 * protobuf blob plus its main figures as columns), ranks (job, rank, node,
 * device, pid, state, exit_code), events (job, time, text) and metrics (job,
 * step, figures). Statements are prepared once at open. Errors are logged
 * here with the SQLite message and returned as PX_ERR_IO. Loop thread only. */
#ifndef PXD_STORE_H
#define PXD_STORE_H

#include "daemon.h"

/* Opens (creating) the database at `path` and its tables. */
px_status_t px_store_open(const char *path, px_store_t **store_p);
void px_store_close(px_store_t *store); /* NULL no-op */

/* Runs `schema` (CREATE ... IF NOT EXISTS statements) on the store's
 * connection and returns that connection in *db_p, for modules that keep
 * their own tables in the same database (memstore.c, benchstore.c): one
 * connection, one WAL writer. Borrowed for the store's life; loop thread
 * only. PX_ERR_IO (logged with `what`) if the schema fails. */
struct sqlite3;
px_status_t px_store_table(px_store_t *store, const char *schema, const char *what,
                           struct sqlite3 **db_p);

/* Inserts or replaces the job row and its rank rows. */
px_status_t px_store_job_save(px_store_t *store, const px_job_t *job);

/* Calls `cb` for every stored job, oldest first; the callback takes
 * ownership of `spec` (free with protobuf_c_message_free_unpacked). The job
 * struct passed is a template with figures and state filled, ranks not. */
typedef void (*px_store_job_cb)(void *arg, px_job_t *tmpl, Parallax__V1__JobSpec *spec);
px_status_t px_store_jobs_load(px_store_t *store, px_store_job_cb cb, void *arg);

/* Fills job->ranks rows (job->world must be set and ranks allocated). */
px_status_t px_store_ranks_load(px_store_t *store, px_job_t *job);

/* Appends an event line with the current time. */
px_status_t px_store_event_add(px_store_t *store, const char *job_id, const char *text);

/* Appends (or replaces, same step) one step's metrics. */
px_status_t px_store_metric_add(px_store_t *store, const char *job_id,
                                const Parallax__V1__StepMetrics *m);

/* Fills resp->steps in step order (caller frees with px_store_metrics_free). */
px_status_t px_store_metrics_get(px_store_t *store, const char *job_id,
                                 Parallax__V1__GetMetricsResponse *resp);
void px_store_metrics_free(Parallax__V1__GetMetricsResponse *resp);

#endif
