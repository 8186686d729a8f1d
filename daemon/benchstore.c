/* benchstore.c: bench jobs in parallaxd (see benchstore.h).
 *
 * The op / dtype / redop names are those of transport/tools/bench.c (nccl-tests
 * spelling plus short aliases); the daemon checks them here so a bad value
 * is INVALID_ARGUMENT at submit time, not a rank failure later.
 *
 * Rows live in table bench_rows of the store's database, written through the
 * store's connection (px_store_table); the store's own schema and statements
 * stay untouched. Runs on the daemon's loop thread only. */
#include "benchstore.h"

#include <sqlite3.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "px_log.h"

static const char *const ops[] = {"all_reduce", "all_gather", "reduce_scatter", "all_to_all",
                                  "broadcast", "reduce", "allreduce", "allgather",
                                  "reducescatter", "alltoall", "bcast", NULL};
static const char *const dtypes[] = {"float", "double", "half", "bfloat16", "int32", "int64",
                                     "uint8", "fp32", "f32", "float32", "fp64", "f64", "float64",
                                     "fp16", "f16", "float16", "bf16", "int", "i32", "i64", "u8",
                                     NULL};
static const char *const redops[] = {"sum", "prod", "min", "max", "avg", NULL};

static int known(const char *const *names, const char *s)
{
    for (int i = 0; names[i]; i++)
        if (!strcasecmp(names[i], s))
            return 1;
    return 0;
}

int px_bench_spec_is(const Parallax__V1__JobSpec *spec)
{
    return spec && spec->kind && !strcmp(spec->kind, "bench");
}

px_status_t px_bench_spec_validate(const Parallax__V1__JobSpec *spec, int cluster_devices,
                                   char *errbuf, size_t errlen)
{
    const Parallax__V1__BenchSpec *b = spec->bench;

    if (!b)
        return px_invalid(errbuf, errlen, "bench: missing (kind is \"bench\")");
    if (!b->op || !*b->op)
        return px_invalid(errbuf, errlen, "bench.op: missing");
    if (!known(ops, b->op))
        return px_invalid(errbuf, errlen, "bench.op: unknown op '%s' (all_reduce, all_gather, "
                    "reduce_scatter, all_to_all, broadcast, reduce)", b->op);
    if (b->dtype && *b->dtype && !known(dtypes, b->dtype))
        return px_invalid(errbuf, errlen, "bench.dtype: unknown type '%s' (float, double, half, "
                    "bfloat16, int32, int64, uint8)", b->dtype);
    if (b->redop && *b->redop && !known(redops, b->redop))
        return px_invalid(errbuf, errlen, "bench.redop: unknown op '%s' (sum, prod, min, max, avg)",
                    b->redop);
    if (b->min_bytes < 1)
        return px_invalid(errbuf, errlen, "bench.min_bytes: must be >= 1");
    if (b->max_bytes < b->min_bytes)
        return px_invalid(errbuf, errlen, "bench.max_bytes: %llu is below min_bytes %llu",
                    (unsigned long long)b->max_bytes, (unsigned long long)b->min_bytes);
    if (b->max_bytes > (1ull << 32))
        return px_invalid(errbuf, errlen, "bench.max_bytes: %llu is above 4 GiB",
                    (unsigned long long)b->max_bytes);
    if (b->step_factor && b->step_factor != 2 && b->step_factor != 4)
        return px_invalid(errbuf, errlen, "bench.step_factor: must be 2 or 4, not %u", b->step_factor);
    if (b->iters > 1000000)
        return px_invalid(errbuf, errlen, "bench.iters: %u is above 1000000", b->iters);
    if (b->warmup > 100000)
        return px_invalid(errbuf, errlen, "bench.warmup: %u is above 100000", b->warmup);
    if (spec->dp < 1)
        return px_invalid(errbuf, errlen, "ranks: must be >= 1 (dp)");
    if ((int64_t)spec->dp > cluster_devices)
        return px_invalid(errbuf, errlen, "ranks=%u but the cluster has %d devices", spec->dp,
                    cluster_devices);
    if (spec->name && strlen(spec->name) > 200)
        return px_invalid(errbuf, errlen, "name: %zu characters (at most 200)", strlen(spec->name));
    return PX_OK;
}

int px_bench_spec_args(const Parallax__V1__JobSpec *spec, char **args, int n, char (*bufs)[32],
                       int nbufs)
{
    const Parallax__V1__BenchSpec *b = spec->bench;
    int k = 0;
#define NUM(flag, fmt, val) do { if (k < nbufs) { snprintf(bufs[k], 32, fmt, val); \
    args[n++] = (char *)(flag); args[n++] = bufs[k++]; } } while (0)
#define STR(flag, val) do { args[n++] = (char *)(flag); args[n++] = (char *)(val); } while (0)
    if (!b)
        return n;
    STR("--bench-op", b->op);
    NUM("--bench-min-bytes", "%llu", (unsigned long long)b->min_bytes);
    NUM("--bench-max-bytes", "%llu", (unsigned long long)b->max_bytes);
    if (b->dtype && *b->dtype)
        STR("--bench-dtype", b->dtype);
    if (b->redop && *b->redop)
        STR("--bench-redop", b->redop);
    NUM("--bench-iters", "%u", b->iters);
    NUM("--bench-warmup", "%u", b->warmup ? b->warmup : 5);
    NUM("--bench-step-factor", "%u", b->step_factor ? b->step_factor : 2);
    if (b->check)
        args[n++] = (char *)"--bench-check";
#undef NUM
#undef STR
    return n;
}

/* ------------------------------------------------------------------ rows */

/* The store's connection (px_store_table), set by the first db_open. */
static sqlite3 *db;

static px_status_t db_open(px_store_t *store)
{
    if (db)
        return PX_OK;
    return px_store_table(store,
                          "CREATE TABLE IF NOT EXISTS bench_rows (job_id TEXT NOT NULL, "
                          "size INTEGER, count INTEGER, type TEXT, redop TEXT, time_us REAL, "
                          "algbw REAL, busbw REAL, wrong INTEGER);"
                          "CREATE INDEX IF NOT EXISTS bench_rows_job ON bench_rows (job_id);",
                          "bench rows", &db);
}

px_status_t px_benchstore_add(px_store_t *store, const char *job_id,
                              Parallax__V1__BenchRow *const *rows, size_t n)
{
    sqlite3_stmt *st = NULL;
    px_status_t status = PX_OK;

    if (db_open(store) != PX_OK)
        return PX_ERR_IO;
    if (sqlite3_prepare_v2(db, "INSERT INTO bench_rows VALUES (?,?,?,?,?,?,?,?,?)", -1, &st,
                           NULL) != SQLITE_OK) {
        px_error("bench rows: %s", sqlite3_errmsg(db));
        return PX_ERR_IO;
    }
    for (size_t i = 0; i < n; i++) {
        const Parallax__V1__BenchRow *r = rows[i];
        sqlite3_reset(st);
        sqlite3_bind_text(st, 1, job_id, -1, SQLITE_STATIC);
        sqlite3_bind_int64(st, 2, (sqlite3_int64)r->size);
        sqlite3_bind_int64(st, 3, (sqlite3_int64)r->count);
        sqlite3_bind_text(st, 4, r->type ? r->type : "", -1, SQLITE_STATIC);
        sqlite3_bind_text(st, 5, r->redop ? r->redop : "", -1, SQLITE_STATIC);
        sqlite3_bind_double(st, 6, r->time_us);
        sqlite3_bind_double(st, 7, r->algbw);
        sqlite3_bind_double(st, 8, r->busbw);
        sqlite3_bind_int64(st, 9, r->wrong);
        if (sqlite3_step(st) != SQLITE_DONE) {
            px_error("bench rows: insert for job %s: %s", job_id, sqlite3_errmsg(db));
            status = PX_ERR_IO;
            break;
        }
    }
    sqlite3_finalize(st);
    return status;
}

static char *dup_col(sqlite3_stmt *st, int col)
{
    const unsigned char *s = sqlite3_column_text(st, col);
    return strdup(s ? (const char *)s : "");
}

px_status_t px_benchstore_fill(px_store_t *store, Parallax__V1__Job *msg)
{
    sqlite3_stmt *st = NULL;
    size_t cap = 0;
    px_status_t status = PX_OK;
    int rc;

    msg->bench_rows = NULL;
    msg->n_bench_rows = 0;
    if (!msg->id || !px_bench_spec_is(msg->spec))
        return PX_OK;
    if (db_open(store) != PX_OK)
        return PX_ERR_IO;
    if (sqlite3_prepare_v2(db, "SELECT size, count, type, redop, time_us, algbw, busbw, wrong "
                           "FROM bench_rows WHERE job_id = ? ORDER BY rowid", -1, &st,
                           NULL) != SQLITE_OK) {
        px_error("bench rows: %s", sqlite3_errmsg(db));
        return PX_ERR_IO;
    }
    sqlite3_bind_text(st, 1, msg->id, -1, SQLITE_STATIC);
    while ((rc = sqlite3_step(st)) == SQLITE_ROW) {
        Parallax__V1__BenchRow *r;
        if (msg->n_bench_rows == cap) {
            size_t ncap = cap ? cap * 2 : 16;
            void *p = realloc(msg->bench_rows, ncap * sizeof(*msg->bench_rows));
            if (!p) {
                status = PX_ERR_NO_MEMORY;
                break;
            }
            msg->bench_rows = p;
            cap = ncap;
        }
        r = malloc(sizeof(*r));
        if (!r) {
            status = PX_ERR_NO_MEMORY;
            break;
        }
        parallax__v1__bench_row__init(r);
        r->size = (uint64_t)sqlite3_column_int64(st, 0);
        r->count = (uint64_t)sqlite3_column_int64(st, 1);
        r->type = dup_col(st, 2);
        r->redop = dup_col(st, 3);
        r->time_us = sqlite3_column_double(st, 4);
        r->algbw = sqlite3_column_double(st, 5);
        r->busbw = sqlite3_column_double(st, 6);
        r->wrong = sqlite3_column_int64(st, 7);
        msg->bench_rows[msg->n_bench_rows++] = r;
    }
    if (status == PX_OK && rc != SQLITE_DONE) {
        px_error("bench rows: read for job %s: %s", msg->id, sqlite3_errmsg(db));
        status = PX_ERR_IO;
    }
    sqlite3_finalize(st);
    return status;
}

void px_benchstore_msg_free(Parallax__V1__Job *msg)
{
    for (size_t i = 0; i < msg->n_bench_rows; i++) {
        free(msg->bench_rows[i]->type);
        free(msg->bench_rows[i]->redop);
        free(msg->bench_rows[i]);
    }
    free(msg->bench_rows);
    msg->bench_rows = NULL;
    msg->n_bench_rows = 0;
}
