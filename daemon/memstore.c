/* memstore.c: the latest memory report of each rank (memstore.h).
 *
 * Table rank_memory (job_id, rank, step, data) with (job_id, rank) unique;
 * `data` is the packed RankMemory. A small in-process cache of the last
 * written peaks per (job, rank) decides which reports are worth a write.
 * The table lives in the store's database and is used through the store's
 * own connection (px_store_table). Loop thread only. */
#include "memstore.h"

#include <sqlite3.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "px_log.h"

/* ------------------------------------------------------------- storage */

/* The store's connection (px_store_table), set by the first db_open. */
static sqlite3 *db;

typedef struct cached {
    char job_id[64];
    uint32_t rank, step;
    uint64_t state_peak, sum_peaks;
    uint64_t device_used; /* a change of the device's use is written too */
} cached_t;
static cached_t cache[256];
static int cache_next;

static px_status_t db_open(px_store_t *store)
{
    if (db)
        return PX_OK;
    return px_store_table(store,
                          "CREATE TABLE IF NOT EXISTS rank_memory (job_id TEXT NOT NULL, "
                          "rank INTEGER NOT NULL, step INTEGER, data BLOB, "
                          "PRIMARY KEY (job_id, rank));",
                          "memory reports", &db);
}

static cached_t *cache_find(const char *job_id, uint32_t rank)
{
    for (int i = 0; i < (int)(sizeof(cache) / sizeof(cache[0])); i++)
        if (cache[i].rank == rank && !strcmp(cache[i].job_id, job_id))
            return &cache[i];
    return NULL;
}

px_status_t px_memstore_put(px_store_t *store, const char *job_id,
                            const Parallax__V1__RankMemory *mem, int force)
{
    uint64_t sum = 0;
    for (size_t i = 0; i < mem->n_categories; i++)
        sum += mem->categories[i]->peak_bytes;
    cached_t *c = cache_find(job_id, mem->rank);
    if (!force && c && mem->step > 2 && mem->step % 10 && c->state_peak == mem->state_peak_bytes &&
        c->sum_peaks == sum && c->device_used == mem->device_used_bytes)
        return PX_OK;

    size_t len = parallax__v1__rank_memory__get_packed_size(mem);
    uint8_t *buf = malloc(len ? len : 1);
    sqlite3_stmt *st = NULL;
    px_status_t status = PX_OK;
    if (!buf)
        return PX_ERR_NO_MEMORY;
    parallax__v1__rank_memory__pack(mem, buf);
    if (db_open(store) != PX_OK) {
        free(buf);
        return PX_ERR_IO;
    }
    if (sqlite3_prepare_v2(db, "INSERT OR REPLACE INTO rank_memory VALUES (?,?,?,?)", -1, &st,
                           NULL) != SQLITE_OK) {
        px_error("memory reports: %s", sqlite3_errmsg(db));
        free(buf);
        return PX_ERR_IO;
    }
    sqlite3_bind_text(st, 1, job_id, -1, SQLITE_STATIC);
    sqlite3_bind_int64(st, 2, mem->rank);
    sqlite3_bind_int64(st, 3, mem->step);
    sqlite3_bind_blob(st, 4, buf, (int)len, SQLITE_STATIC);
    if (sqlite3_step(st) != SQLITE_DONE) {
        px_error("memory reports: job %s rank %u: %s", job_id, mem->rank, sqlite3_errmsg(db));
        status = PX_ERR_IO;
    }
    sqlite3_finalize(st);
    free(buf);
    if (status == PX_OK) {
        if (!c) {
            c = &cache[cache_next];
            cache_next = (cache_next + 1) % (int)(sizeof(cache) / sizeof(cache[0]));
            snprintf(c->job_id, sizeof(c->job_id), "%s", job_id);
            c->rank = mem->rank;
        }
        c->step = mem->step;
        c->state_peak = mem->state_peak_bytes;
        c->sum_peaks = sum;
        c->device_used = mem->device_used_bytes;
    }
    return status;
}

px_status_t px_memstore_get(px_store_t *store, const char *job_id,
                            Parallax__V1__GetMemoryResponse *resp)
{
    sqlite3_stmt *st = NULL;
    size_t cap = 0;
    px_status_t status = PX_OK;
    int rc;

    resp->ranks = NULL;
    resp->n_ranks = 0;
    if (db_open(store) != PX_OK)
        return PX_ERR_IO;
    if (sqlite3_prepare_v2(db, "SELECT data FROM rank_memory WHERE job_id = ? ORDER BY rank",
                           -1, &st, NULL) != SQLITE_OK) {
        px_error("memory reports: %s", sqlite3_errmsg(db));
        return PX_ERR_IO;
    }
    sqlite3_bind_text(st, 1, job_id, -1, SQLITE_STATIC);
    while ((rc = sqlite3_step(st)) == SQLITE_ROW) {
        const void *b = sqlite3_column_blob(st, 0);
        int n = sqlite3_column_bytes(st, 0);
        Parallax__V1__RankMemory *m =
            parallax__v1__rank_memory__unpack(NULL, (size_t)n, b ? b : (const void *)"");
        if (!m) {
            px_warn("memory reports: job %s: an undecodable row is skipped", job_id);
            continue;
        }
        if (resp->n_ranks == cap) {
            size_t ncap = cap ? cap * 2 : 8;
            void *p = realloc(resp->ranks, ncap * sizeof(*resp->ranks));
            if (!p) {
                parallax__v1__rank_memory__free_unpacked(m, NULL);
                status = PX_ERR_NO_MEMORY;
                break;
            }
            resp->ranks = p;
            cap = ncap;
        }
        resp->ranks[resp->n_ranks++] = m;
    }
    if (status == PX_OK && rc != SQLITE_DONE && rc != SQLITE_ROW) {
        px_error("memory reports: job %s: %s", job_id, sqlite3_errmsg(db));
        status = PX_ERR_IO;
    }
    sqlite3_finalize(st);
    if (status != PX_OK)
        px_memstore_free(resp);
    return status;
}

void px_memstore_free(Parallax__V1__GetMemoryResponse *resp)
{
    for (size_t i = 0; i < resp->n_ranks; i++)
        parallax__v1__rank_memory__free_unpacked(resp->ranks[i], NULL);
    free(resp->ranks);
    resp->ranks = NULL;
    resp->n_ranks = 0;
}
