/* valstore.c: validation losses and MFU of training jobs (valstore.h).
 *
 * Tables val_loss (job TEXT, step INTEGER, val_loss REAL) and step_mfu
 * (job TEXT, step INTEGER, mfu REAL), primary key (job, step), in the
 * store's database through the store's connection: figures not every
 * step or job has, beside the metrics table.
 * Statements are prepared per call: validations are rare (every eval_every
 * steps). Loop thread only. */
#include "valstore.h"

#include <sqlite3.h>
#include <string.h>

#include "px_log.h"
#include "store.h"

static sqlite3 *db; /* the store's connection, after the first db_open */

static px_status_t db_open(px_store_t *store)
{
    if (db)
        return PX_OK;
    return px_store_table(store,
                          "CREATE TABLE IF NOT EXISTS val_loss (job TEXT NOT NULL, "
                          "step INTEGER NOT NULL, val_loss REAL, PRIMARY KEY (job, step));"
                          "CREATE TABLE IF NOT EXISTS step_mfu (job TEXT NOT NULL, "
                          "step INTEGER NOT NULL, mfu REAL, PRIMARY KEY (job, step));",
                          "validation losses", &db);
}

static px_status_t prepare(px_store_t *store, const char *sql, sqlite3_stmt **st_p)
{
    if (db_open(store) != PX_OK)
        return PX_ERR_IO;
    if (sqlite3_prepare_v2(db, sql, -1, st_p, NULL) != SQLITE_OK) {
        px_error("validation losses: %s", sqlite3_errmsg(db));
        return PX_ERR_IO;
    }
    return PX_OK;
}

/* The step's MFU into table step_mfu. */
static px_status_t record_mfu(px_store_t *store, const char *job_id,
                              const Parallax__V1__StepMetrics *m)
{
    sqlite3_stmt *st;
    px_status_t status = PX_OK;
    PX_CHECK(prepare(store, "INSERT OR REPLACE INTO step_mfu VALUES (?1, ?2, ?3)", &st));
    sqlite3_bind_text(st, 1, job_id, -1, SQLITE_STATIC);
    sqlite3_bind_int64(st, 2, m->step);
    sqlite3_bind_double(st, 3, m->mfu);
    if (sqlite3_step(st) != SQLITE_DONE) {
        px_error("step MFU: insert for %s: %s", job_id, sqlite3_errmsg(db));
        status = PX_ERR_IO;
    }
    sqlite3_finalize(st);
    return status;
}

/* Sets mfu on the steps of resp (in step order) that have one stored. */
static px_status_t fill_mfu(px_store_t *store, const char *job_id,
                            Parallax__V1__GetMetricsResponse *resp)
{
    sqlite3_stmt *st;
    size_t i = 0;
    int rc;

    PX_CHECK(prepare(store, "SELECT step, mfu FROM step_mfu WHERE job = ?1 ORDER BY step", &st));
    sqlite3_bind_text(st, 1, job_id, -1, SQLITE_STATIC);
    while ((rc = sqlite3_step(st)) == SQLITE_ROW) {
        uint32_t step = (uint32_t)sqlite3_column_int64(st, 0);
        while (i < resp->n_steps && resp->steps[i]->step < step)
            i++;
        if (i < resp->n_steps && resp->steps[i]->step == step)
            resp->steps[i]->mfu = sqlite3_column_double(st, 1);
    }
    sqlite3_finalize(st);
    if (rc != SQLITE_DONE) {
        px_error("step MFU of %s: %s", job_id, sqlite3_errmsg(db));
        return PX_ERR_IO;
    }
    return PX_OK;
}

px_status_t px_valstore_record(px_store_t *store, px_job_t *job,
                               const Parallax__V1__StepMetrics *m)
{
    sqlite3_stmt *st;
    px_status_t status = PX_OK;

    if (m->mfu > 0)
        PX_CHECK(record_mfu(store, job->id, m));
    if (!(m->val_loss > 0.0f))
        return PX_OK;
    job->val_loss = m->val_loss;
    job->val_step = m->step;
    PX_CHECK(prepare(store, "INSERT OR REPLACE INTO val_loss VALUES (?1, ?2, ?3)", &st));
    sqlite3_bind_text(st, 1, job->id, -1, SQLITE_STATIC);
    sqlite3_bind_int64(st, 2, m->step);
    sqlite3_bind_double(st, 3, m->val_loss);
    if (sqlite3_step(st) != SQLITE_DONE) {
        px_error("validation losses: insert for %s: %s", job->id, sqlite3_errmsg(db));
        status = PX_ERR_IO;
    }
    sqlite3_finalize(st);
    return status;
}

px_status_t px_valstore_fill(px_store_t *store, const char *job_id,
                             Parallax__V1__GetMetricsResponse *resp)
{
    sqlite3_stmt *st;
    size_t i = 0;
    int rc;

    PX_CHECK(prepare(store, "SELECT step, val_loss FROM val_loss WHERE job = ?1 ORDER BY step",
                     &st));
    sqlite3_bind_text(st, 1, job_id, -1, SQLITE_STATIC);
    while ((rc = sqlite3_step(st)) == SQLITE_ROW) {
        uint32_t step = (uint32_t)sqlite3_column_int64(st, 0);
        while (i < resp->n_steps && resp->steps[i]->step < step) /* both in step order */
            i++;
        if (i < resp->n_steps && resp->steps[i]->step == step)
            resp->steps[i]->val_loss = (float)sqlite3_column_double(st, 1);
    }
    sqlite3_finalize(st);
    if (rc != SQLITE_DONE) {
        px_error("validation losses of %s: %s", job_id, sqlite3_errmsg(db));
        return PX_ERR_IO;
    }
    return fill_mfu(store, job_id, resp);
}

px_status_t px_valstore_load_last(px_store_t *store, px_job_t *job)
{
    sqlite3_stmt *st;
    int rc;

    PX_CHECK(prepare(store, "SELECT step, val_loss FROM val_loss WHERE job = ?1 "
                            "ORDER BY step DESC LIMIT 1", &st));
    sqlite3_bind_text(st, 1, job->id, -1, SQLITE_STATIC);
    rc = sqlite3_step(st);
    if (rc == SQLITE_ROW) {
        job->val_step = (uint32_t)sqlite3_column_int64(st, 0);
        job->val_loss = (float)sqlite3_column_double(st, 1);
    }
    sqlite3_finalize(st);
    if (rc != SQLITE_ROW && rc != SQLITE_DONE) {
        px_error("validation losses of %s: %s", job->id, sqlite3_errmsg(db));
        return PX_ERR_IO;
    }
    return PX_OK;
}
