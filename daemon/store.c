/* store.c: SQLite persistence of parallaxd (see store.h).
 *
 * Invariants: the jobs table is the truth across restarts; the in-memory
 * px_job_t is written through after every state change or progress report.
 * Journal mode WAL, synchronous NORMAL: a crash may lose the last few
 * metric rows, never corrupt the file. Loop thread only. */
#include "store.h"

#include <sqlite3.h>
#include <stdlib.h>
#include <string.h>

#include "px_log.h"
#include "px_time.h"

enum {
    ST_JOB_SAVE, ST_RANKS_DEL, ST_RANK_INS, ST_EVENT_INS, ST_METRIC_INS, ST_METRICS_GET,
    ST_JOBS_LOAD, ST_RANKS_LOAD, ST_COUNT
};

static const char *const sql_stmts[ST_COUNT] = {
    [ST_JOB_SAVE] =
        "INSERT OR REPLACE INTO jobs (id, name, spec, state, reason, step, loss, grad_norm, "
        "lr, tokens_per_second, created_ms, started_ms, finished_ms, coordinator, world) "
        "VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14, ?15)",
    [ST_RANKS_DEL] = "DELETE FROM ranks WHERE job = ?1",
    [ST_RANK_INS] =
        "INSERT INTO ranks (job, rank, node, device, pid, state, exit_code) "
        "VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7)",
    [ST_EVENT_INS] = "INSERT INTO events (job, time_ms, text) VALUES (?1, ?2, ?3)",
    [ST_METRIC_INS] =
        "INSERT OR REPLACE INTO metrics (job, step, loss, grad_norm, lr, tokens_per_second, "
        "elapsed_s, time_ms) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8)",
    [ST_METRICS_GET] =
        "SELECT step, loss, grad_norm, lr, tokens_per_second, elapsed_s, time_ms "
        "FROM metrics WHERE job = ?1 ORDER BY step",
    [ST_JOBS_LOAD] =
        "SELECT id, spec, state, reason, step, loss, grad_norm, lr, tokens_per_second, "
        "created_ms, started_ms, finished_ms, coordinator, world FROM jobs ORDER BY created_ms, rowid",
    [ST_RANKS_LOAD] =
        "SELECT rank, node, device, pid, state, exit_code FROM ranks WHERE job = ?1",
};

static const char schema[] =
    "PRAGMA journal_mode=WAL;"
    "PRAGMA synchronous=NORMAL;"
    "CREATE TABLE IF NOT EXISTS jobs ("
    "  id TEXT PRIMARY KEY, name TEXT, spec BLOB, state INTEGER, reason TEXT,"
    "  step INTEGER, loss REAL, grad_norm REAL, lr REAL, tokens_per_second REAL,"
    "  created_ms INTEGER, started_ms INTEGER, finished_ms INTEGER, coordinator TEXT,"
    "  world INTEGER);"
    "CREATE TABLE IF NOT EXISTS ranks ("
    "  job TEXT, rank INTEGER, node TEXT, device TEXT, pid INTEGER, state TEXT,"
    "  exit_code INTEGER, PRIMARY KEY (job, rank));"
    "CREATE TABLE IF NOT EXISTS events ("
    "  id INTEGER PRIMARY KEY AUTOINCREMENT, job TEXT, time_ms INTEGER, text TEXT);"
    "CREATE TABLE IF NOT EXISTS metrics ("
    "  job TEXT, step INTEGER, loss REAL, grad_norm REAL, lr REAL,"
    "  tokens_per_second REAL, elapsed_s REAL, time_ms INTEGER, PRIMARY KEY (job, step));";

struct px_store {
    sqlite3 *db;
    sqlite3_stmt *st[ST_COUNT];
};

static px_status_t db_fail(px_store_t *s, const char *what)
{
    px_error("sqlite %s: %s", what, sqlite3_errmsg(s->db));
    return PX_ERR_IO;
}

px_status_t px_store_table(px_store_t *store, const char *schema, const char *what,
                           sqlite3 **db_p)
{
    char *msg = NULL;
    if (sqlite3_exec(store->db, schema, NULL, NULL, &msg) != SQLITE_OK) {
        px_error("%s: cannot create the table: %s", what, msg ? msg : "");
        sqlite3_free(msg);
        return PX_ERR_IO;
    }
    *db_p = store->db;
    return PX_OK;
}

px_status_t px_store_open(const char *path, px_store_t **store_p)
{
    px_store_t *s = calloc(1, sizeof(*s));
    char *err = NULL;

    if (!s)
        return PX_ERR_NO_MEMORY;
    if (sqlite3_open_v2(path, &s->db, SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE, NULL) !=
        SQLITE_OK) {
        px_error("cannot open database %s: %s", path, s->db ? sqlite3_errmsg(s->db) : "?");
        goto err_close;
    }
    sqlite3_busy_timeout(s->db, 2000);
    if (sqlite3_exec(s->db, schema, NULL, NULL, &err) != SQLITE_OK) {
        px_error("database %s: schema: %s", path, err ? err : "?");
        sqlite3_free(err);
        goto err_close;
    }
    for (int i = 0; i < ST_COUNT; i++) {
        if (sqlite3_prepare_v2(s->db, sql_stmts[i], -1, &s->st[i], NULL) != SQLITE_OK) {
            db_fail(s, sql_stmts[i]);
            goto err_close;
        }
    }
    *store_p = s;
    return PX_OK;

err_close:
    px_store_close(s);
    return PX_ERR_IO;
}

void px_store_close(px_store_t *s)
{
    if (!s)
        return;
    for (int i = 0; i < ST_COUNT; i++)
        sqlite3_finalize(s->st[i]);
    sqlite3_close(s->db);
    free(s);
}

/* Steps a bound write statement to completion and resets it. */
static px_status_t step_done(px_store_t *s, int idx, const char *what)
{
    sqlite3_stmt *st = s->st[idx];
    int rc = sqlite3_step(st);
    px_status_t status = PX_OK;

    if (rc != SQLITE_DONE)
        status = db_fail(s, what);
    sqlite3_reset(st);
    sqlite3_clear_bindings(st);
    return status;
}

px_status_t px_store_job_save(px_store_t *s, const px_job_t *job)
{
    sqlite3_stmt *st = s->st[ST_JOB_SAVE];
    size_t len = protobuf_c_message_get_packed_size(&job->spec->base);
    uint8_t *blob = malloc(len ? len : 1);
    px_status_t status;

    if (!blob)
        return PX_ERR_NO_MEMORY;
    protobuf_c_message_pack(&job->spec->base, blob);
    sqlite3_exec(s->db, "BEGIN", NULL, NULL, NULL);
    sqlite3_bind_text(st, 1, job->id, -1, SQLITE_STATIC);
    sqlite3_bind_text(st, 2, job->spec->name ? job->spec->name : "", -1, SQLITE_STATIC);
    sqlite3_bind_blob(st, 3, blob, (int)len, SQLITE_STATIC);
    sqlite3_bind_int(st, 4, (int)job->state);
    sqlite3_bind_text(st, 5, job->reason, -1, SQLITE_STATIC);
    sqlite3_bind_int64(st, 6, job->step);
    sqlite3_bind_double(st, 7, job->loss);
    sqlite3_bind_double(st, 8, job->grad_norm);
    sqlite3_bind_double(st, 9, job->lr);
    sqlite3_bind_double(st, 10, job->tokens_per_second);
    sqlite3_bind_int64(st, 11, job->created_ms);
    sqlite3_bind_int64(st, 12, job->started_ms);
    sqlite3_bind_int64(st, 13, job->finished_ms);
    sqlite3_bind_text(st, 14, job->coordinator, -1, SQLITE_STATIC);
    sqlite3_bind_int(st, 15, job->world);
    status = step_done(s, ST_JOB_SAVE, "save job");
    if (status == PX_OK && job->ranks) {
        sqlite3_bind_text(s->st[ST_RANKS_DEL], 1, job->id, -1, SQLITE_STATIC);
        status = step_done(s, ST_RANKS_DEL, "delete ranks");
        for (int r = 0; status == PX_OK && r < job->world; r++) {
            const px_job_rank_t *jr = &job->ranks[r];
            sqlite3_stmt *ri = s->st[ST_RANK_INS];
            sqlite3_bind_text(ri, 1, job->id, -1, SQLITE_STATIC);
            sqlite3_bind_int(ri, 2, r);
            sqlite3_bind_text(ri, 3, jr->node, -1, SQLITE_STATIC);
            sqlite3_bind_text(ri, 4, jr->device, -1, SQLITE_STATIC);
            sqlite3_bind_int(ri, 5, jr->pid);
            sqlite3_bind_text(ri, 6, jr->state, -1, SQLITE_STATIC);
            sqlite3_bind_int(ri, 7, jr->exit_code);
            status = step_done(s, ST_RANK_INS, "insert rank");
        }
    }
    sqlite3_exec(s->db, status == PX_OK ? "COMMIT" : "ROLLBACK", NULL, NULL, NULL);
    free(blob);
    return status;
}

static void copy_col(sqlite3_stmt *st, int col, char *dst, size_t len)
{
    const unsigned char *t = sqlite3_column_text(st, col);
    snprintf(dst, len, "%s", t ? (const char *)t : "");
}

px_status_t px_store_jobs_load(px_store_t *s, px_store_job_cb cb, void *arg)
{
    sqlite3_stmt *st = s->st[ST_JOBS_LOAD];
    px_status_t status = PX_OK;
    int rc;

    while ((rc = sqlite3_step(st)) == SQLITE_ROW) {
        px_job_t t;
        Parallax__V1__JobSpec *spec;
        memset(&t, 0, sizeof(t));
        copy_col(st, 0, t.id, sizeof(t.id));
        spec = parallax__v1__job_spec__unpack(NULL, (size_t)sqlite3_column_bytes(st, 1),
                                              sqlite3_column_blob(st, 1));
        if (!spec) {
            px_warn("job %s: stored spec does not unpack; skipped", t.id);
            continue;
        }
        t.state = (Parallax__V1__JobState)sqlite3_column_int(st, 2);
        copy_col(st, 3, t.reason, sizeof(t.reason));
        t.step = (uint32_t)sqlite3_column_int64(st, 4);
        t.loss = (float)sqlite3_column_double(st, 5);
        t.grad_norm = (float)sqlite3_column_double(st, 6);
        t.lr = (float)sqlite3_column_double(st, 7);
        t.tokens_per_second = sqlite3_column_double(st, 8);
        t.created_ms = sqlite3_column_int64(st, 9);
        t.started_ms = sqlite3_column_int64(st, 10);
        t.finished_ms = sqlite3_column_int64(st, 11);
        copy_col(st, 12, t.coordinator, sizeof(t.coordinator));
        t.world = sqlite3_column_int(st, 13);
        cb(arg, &t, spec);
    }
    if (rc != SQLITE_DONE)
        status = db_fail(s, "load jobs");
    sqlite3_reset(st);
    return status;
}

px_status_t px_store_ranks_load(px_store_t *s, px_job_t *job)
{
    sqlite3_stmt *st = s->st[ST_RANKS_LOAD];
    px_status_t status = PX_OK;
    int rc;

    sqlite3_bind_text(st, 1, job->id, -1, SQLITE_STATIC);
    while ((rc = sqlite3_step(st)) == SQLITE_ROW) {
        int r = sqlite3_column_int(st, 0);
        px_job_rank_t *jr;
        if (r < 0 || r >= job->world)
            continue;
        jr = &job->ranks[r];
        copy_col(st, 1, jr->node, sizeof(jr->node));
        copy_col(st, 2, jr->device, sizeof(jr->device));
        jr->pid = sqlite3_column_int(st, 3);
        copy_col(st, 4, jr->state, sizeof(jr->state));
        jr->exit_code = sqlite3_column_int(st, 5);
    }
    if (rc != SQLITE_DONE)
        status = db_fail(s, "load ranks");
    sqlite3_reset(st);
    sqlite3_clear_bindings(st);
    return status;
}

px_status_t px_store_event_add(px_store_t *s, const char *job_id, const char *text)
{
    sqlite3_stmt *st = s->st[ST_EVENT_INS];
    sqlite3_bind_text(st, 1, job_id, -1, SQLITE_STATIC);
    sqlite3_bind_int64(st, 2, px_time_wall_ms());
    sqlite3_bind_text(st, 3, text, -1, SQLITE_STATIC);
    return step_done(s, ST_EVENT_INS, "insert event");
}

px_status_t px_store_metric_add(px_store_t *s, const char *job_id,
                                const Parallax__V1__StepMetrics *m)
{
    sqlite3_stmt *st = s->st[ST_METRIC_INS];
    sqlite3_bind_text(st, 1, job_id, -1, SQLITE_STATIC);
    sqlite3_bind_int64(st, 2, m->step);
    sqlite3_bind_double(st, 3, m->loss);
    sqlite3_bind_double(st, 4, m->grad_norm);
    sqlite3_bind_double(st, 5, m->lr);
    sqlite3_bind_double(st, 6, m->tokens_per_second);
    sqlite3_bind_double(st, 7, m->elapsed_s);
    sqlite3_bind_int64(st, 8, m->time_ms ? m->time_ms : px_time_wall_ms());
    return step_done(s, ST_METRIC_INS, "insert metric");
}

px_status_t px_store_metrics_get(px_store_t *s, const char *job_id,
                                 Parallax__V1__GetMetricsResponse *resp)
{
    sqlite3_stmt *st = s->st[ST_METRICS_GET];
    px_status_t status = PX_OK;
    size_t cap = 0;
    int rc;

    sqlite3_bind_text(st, 1, job_id, -1, SQLITE_STATIC);
    while ((rc = sqlite3_step(st)) == SQLITE_ROW) {
        Parallax__V1__StepMetrics *m;
        if (resp->n_steps == cap) {
            size_t ncap = cap ? cap * 2 : 64;
            Parallax__V1__StepMetrics **p = realloc(resp->steps, ncap * sizeof(*p));
            if (!p) {
                status = PX_ERR_NO_MEMORY;
                break;
            }
            resp->steps = p;
            cap = ncap;
        }
        m = malloc(sizeof(*m));
        if (!m) {
            status = PX_ERR_NO_MEMORY;
            break;
        }
        parallax__v1__step_metrics__init(m);
        m->step = (uint32_t)sqlite3_column_int64(st, 0);
        m->loss = (float)sqlite3_column_double(st, 1);
        m->grad_norm = (float)sqlite3_column_double(st, 2);
        m->lr = (float)sqlite3_column_double(st, 3);
        m->tokens_per_second = sqlite3_column_double(st, 4);
        m->elapsed_s = sqlite3_column_double(st, 5);
        m->time_ms = sqlite3_column_int64(st, 6);
        resp->steps[resp->n_steps++] = m;
    }
    if (status == PX_OK && rc != SQLITE_DONE)
        status = db_fail(s, "get metrics");
    sqlite3_reset(st);
    sqlite3_clear_bindings(st);
    return status;
}

void px_store_metrics_free(Parallax__V1__GetMetricsResponse *resp)
{
    for (size_t i = 0; i < resp->n_steps; i++)
        free(resp->steps[i]);
    free(resp->steps);
    resp->steps = NULL;
    resp->n_steps = 0;
}
