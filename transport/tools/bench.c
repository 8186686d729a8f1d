/* bench.c: the collectives benchmark loop (see bench.h for the definitions
 * of size, time, algbw and busbw; they are nccl-tests', doc/PERFORMANCE.md).
 *
 * Invariants: every rank walks the same sizes and issues the same
 * collectives in the same order; after each size rank 0 broadcasts whether
 * to go on, so a stop asked by rank 0's row callback ends every rank at the
 * same point. Buffers are allocated once for max_bytes and touched before
 * timing so page faults stay out of the figures.
 *
 * Runs on the rank's main thread (the thread that owns the communicator). */
#include "bench.h"

#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "px_coll.h"
#include "px_kernels.h"
#include "px_log.h"
#include "px_time.h"

#define BENCH_TAG 0x42454e43u /* "BENC": per-size wrong counts to rank 0 */

/* ---- names ---------------------------------------------------------------- */

static const char *const op_names[] = {"all_reduce", "all_gather", "reduce_scatter",
                                       "all_to_all", "broadcast", "reduce"};

const char *px_bench_op_name(px_bench_op_t op)
{
    return (unsigned)op < sizeof op_names / sizeof *op_names ? op_names[op] : "unknown";
}

px_status_t px_bench_op_parse(const char *name, px_bench_op_t *op_p)
{
    static const struct { const char *name; px_bench_op_t op; } alias[] = {
        {"allreduce", PX_BENCH_ALL_REDUCE}, {"allgather", PX_BENCH_ALL_GATHER},
        {"reducescatter", PX_BENCH_REDUCE_SCATTER}, {"alltoall", PX_BENCH_ALL_TO_ALL},
        {"bcast", PX_BENCH_BROADCAST},
    };
    if (!name)
        return PX_ERR_INVALID_ARGUMENT;
    for (unsigned i = 0; i < sizeof op_names / sizeof *op_names; i++)
        if (!strcasecmp(name, op_names[i])) {
            *op_p = (px_bench_op_t)i;
            return PX_OK;
        }
    for (unsigned i = 0; i < sizeof alias / sizeof *alias; i++)
        if (!strcasecmp(name, alias[i].name)) {
            *op_p = alias[i].op;
            return PX_OK;
        }
    return PX_ERR_INVALID_ARGUMENT;
}

static const struct { const char *name; px_dtype_t dtype; } dtype_names[] = {
    {"float", PX_FLOAT32}, {"double", PX_FLOAT64}, {"half", PX_FLOAT16},
    {"bfloat16", PX_BFLOAT16}, {"int32", PX_INT32}, {"int64", PX_INT64}, {"uint8", PX_UINT8},
    {"fp32", PX_FLOAT32}, {"f32", PX_FLOAT32}, {"float32", PX_FLOAT32},
    {"fp64", PX_FLOAT64}, {"f64", PX_FLOAT64}, {"float64", PX_FLOAT64},
    {"fp16", PX_FLOAT16}, {"f16", PX_FLOAT16}, {"float16", PX_FLOAT16},
    {"bf16", PX_BFLOAT16}, {"int", PX_INT32}, {"i32", PX_INT32}, {"i64", PX_INT64},
    {"u8", PX_UINT8},
};

const char *px_bench_dtype_name(px_dtype_t dtype)
{
    for (unsigned i = 0; i < 7; i++)
        if (dtype_names[i].dtype == dtype)
            return dtype_names[i].name;
    return "unknown";
}

px_status_t px_bench_dtype_parse(const char *name, px_dtype_t *dtype_p)
{
    if (!name)
        return PX_ERR_INVALID_ARGUMENT;
    for (unsigned i = 0; i < sizeof dtype_names / sizeof *dtype_names; i++)
        if (!strcasecmp(name, dtype_names[i].name)) {
            *dtype_p = dtype_names[i].dtype;
            return PX_OK;
        }
    return PX_ERR_INVALID_ARGUMENT;
}

static const char *const redop_names[] = {"sum", "prod", "min", "max", "avg"};

const char *px_bench_redop_name(px_redop_t op)
{
    return (unsigned)op < 5 ? redop_names[op] : "none";
}

px_status_t px_bench_redop_parse(const char *name, px_redop_t *op_p)
{
    for (unsigned i = 0; name && i < 5; i++)
        if (!strcasecmp(name, redop_names[i])) {
            *op_p = (px_redop_t)i;
            return PX_OK;
        }
    return PX_ERR_INVALID_ARGUMENT;
}

px_status_t px_bench_parse_bytes(const char *s, uint64_t *bytes_p)
{
    char *end;
    unsigned long long v;

    if (!s || !*s || *s == '-')
        return PX_ERR_INVALID_ARGUMENT;
    v = strtoull(s, &end, 10);
    if (end == s)
        return PX_ERR_INVALID_ARGUMENT;
    switch (*end) {
    case 'k': case 'K': v <<= 10; end++; break;
    case 'm': case 'M': v <<= 20; end++; break;
    case 'g': case 'G': v <<= 30; end++; break;
    }
    if (*end == 'i' || *end == 'I')
        end++;
    if (*end == 'b' || *end == 'B')
        end++;
    if (*end)
        return PX_ERR_INVALID_ARGUMENT;
    *bytes_p = v;
    return PX_OK;
}

/* ---- configuration ---------------------------------------------------------- */

void px_bench_cfg_init(px_bench_cfg_t *cfg)
{
    memset(cfg, 0, sizeof *cfg);
    cfg->op = PX_BENCH_ALL_REDUCE;
    cfg->dtype = PX_FLOAT32;
    cfg->redop = PX_SUM;
    cfg->min_bytes = 4096;
    cfg->max_bytes = 64ull << 20;
    cfg->step_factor = 4;
    cfg->warmup = 5;
}

static int op_reduces(px_bench_op_t op)
{
    return op == PX_BENCH_ALL_REDUCE || op == PX_BENCH_REDUCE_SCATTER || op == PX_BENCH_REDUCE;
}

static int op_per_rank(px_bench_op_t op)
{
    return op == PX_BENCH_ALL_GATHER || op == PX_BENCH_REDUCE_SCATTER || op == PX_BENCH_ALL_TO_ALL;
}

int px_bench_op_available(px_bench_op_t op)
{
    switch (op) {
    case PX_BENCH_ALL_REDUCE:
    case PX_BENCH_BROADCAST:
    case PX_BENCH_ALL_GATHER:
    case PX_BENCH_REDUCE_SCATTER:
    case PX_BENCH_ALL_TO_ALL:
    case PX_BENCH_REDUCE: return 1;
    }
    return 0;
}

px_status_t px_bench_cfg_validate(const px_bench_cfg_t *cfg, int world, char *err, size_t errlen)
{
    char dummy[8];
    if (!err) {
        err = dummy;
        errlen = sizeof dummy;
    }
#define BAD(...) do { snprintf(err, errlen, __VA_ARGS__); return PX_ERR_INVALID_ARGUMENT; } while (0)
    if (cfg->device_ops && cfg->op != PX_BENCH_ALL_REDUCE && cfg->op != PX_BENCH_ALL_GATHER &&
        cfg->op != PX_BENCH_REDUCE_SCATTER && cfg->op != PX_BENCH_BROADCAST &&
        cfg->op != PX_BENCH_ALL_TO_ALL)
        BAD("op %s on %s buffers: only all_reduce, all_gather, reduce_scatter, broadcast and "
            "all_to_all take device buffers", px_bench_op_name(cfg->op), cfg->device_ops->name);
    if ((unsigned)cfg->op > PX_BENCH_REDUCE)
        BAD("op: unknown (%d)", (int)cfg->op);
    if ((unsigned)cfg->dtype > PX_UINT8)
        BAD("dtype: unknown (%d)", (int)cfg->dtype);
    if ((unsigned)cfg->redop > PX_AVG)
        BAD("redop: unknown (%d)", (int)cfg->redop);
    if (cfg->min_bytes < 1)
        BAD("min_bytes: must be >= 1");
    if (cfg->max_bytes < cfg->min_bytes)
        BAD("max_bytes: %llu is below min_bytes %llu", (unsigned long long)cfg->max_bytes,
            (unsigned long long)cfg->min_bytes);
    if (cfg->max_bytes > PX_BENCH_MAX_BYTES)
        BAD("max_bytes: %llu is above %llu", (unsigned long long)cfg->max_bytes,
            (unsigned long long)PX_BENCH_MAX_BYTES);
    if (cfg->step_factor != 2 && cfg->step_factor != 4)
        BAD("step_factor: must be 2 or 4, not %d", cfg->step_factor);
    if (cfg->warmup < 0 || cfg->warmup > 100000)
        BAD("warmup: must be in [0, 100000], not %d", cfg->warmup);
    if (cfg->iters < 0 || cfg->iters > 1000000)
        BAD("iters: must be in [0, 1000000], not %d", cfg->iters);
    if (world < 1)
        BAD("world: %d ranks", world);
    if (cfg->root < 0 || cfg->root >= world)
        BAD("root: %d is not a rank of a %d-rank world", cfg->root, world);
    if (!px_bench_op_available(cfg->op))
        BAD("op: %s is not provided by this build's transport", px_bench_op_name(cfg->op));
#undef BAD
    return PX_OK;
}

double px_bench_bus_factor(px_bench_op_t op, int n)
{
    switch (op) {
    case PX_BENCH_ALL_REDUCE: return 2.0 * (n - 1) / n;
    case PX_BENCH_ALL_GATHER:
    case PX_BENCH_REDUCE_SCATTER:
    case PX_BENCH_ALL_TO_ALL: return (double)(n - 1) / n;
    case PX_BENCH_BROADCAST:
    case PX_BENCH_REDUCE: return 1.0;
    }
    return 1.0;
}

/* ---- exact values in every dtype ---------------------------------------------- */

/* fp32 -> fp16, round to nearest even (IEEE 754 binary16). */
static uint16_t f32_to_f16(float f)
{
    uint32_t u, sign, mant;
    int exp;
    memcpy(&u, &f, 4);
    sign = (u >> 16) & 0x8000u;
    exp = (int)((u >> 23) & 0xff) - 127 + 15;
    mant = u & 0x7fffffu;
    if (((u >> 23) & 0xff) == 0xff)
        return (uint16_t)(sign | 0x7c00u | (mant ? 0x200u : 0));
    if (exp >= 31)
        return (uint16_t)(sign | 0x7c00u);
    if (exp <= 0) {
        if (exp < -10)
            return (uint16_t)sign;
        mant |= 0x800000u;
        uint32_t shift = (uint32_t)(14 - exp), half = 1u << (shift - 1);
        uint32_t r = mant >> shift, rem = mant & ((1u << shift) - 1);
        if (rem > half || (rem == half && (r & 1)))
            r++;
        return (uint16_t)(sign | r);
    }
    uint32_t r = ((uint32_t)exp << 10) | (mant >> 13), rem = mant & 0x1fffu;
    if (rem > 0x1000u || (rem == 0x1000u && (r & 1)))
        r++; /* may carry into the exponent: still right (up to inf) */
    return (uint16_t)(sign | r);
}

static uint16_t f32_to_bf16(float f)
{
    uint32_t u;
    memcpy(&u, &f, 4);
    if ((u & 0x7fffffffu) > 0x7f800000u)
        return (uint16_t)((u >> 16) | 0x40u);
    return (uint16_t)((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);
}

/* Stores `v` (exactly representable, or already rounded as the dtype's
 * reduction rounds it) as element i. */
static void put(void *buf, px_dtype_t dt, uint64_t i, double v)
{
    switch (dt) {
    case PX_FLOAT32: ((float *)buf)[i] = (float)v; break;
    case PX_FLOAT64: ((double *)buf)[i] = v; break;
    case PX_FLOAT16: ((uint16_t *)buf)[i] = f32_to_f16((float)v); break;
    case PX_BFLOAT16: ((uint16_t *)buf)[i] = f32_to_bf16((float)v); break;
    case PX_INT32: ((int32_t *)buf)[i] = (int32_t)v; break;
    case PX_INT64: ((int64_t *)buf)[i] = (int64_t)v; break;
    case PX_UINT8: ((uint8_t *)buf)[i] = (uint8_t)v; break;
    }
}

/* Whether element i equals `v` stored as the dtype stores it. */
static int same(const void *buf, px_dtype_t dt, uint64_t i, double v)
{
    switch (dt) {
    case PX_FLOAT32: return ((const float *)buf)[i] == (float)v;
    case PX_FLOAT64: return ((const double *)buf)[i] == v;
    case PX_FLOAT16: return ((const uint16_t *)buf)[i] == f32_to_f16((float)v);
    case PX_BFLOAT16: return ((const uint16_t *)buf)[i] == f32_to_bf16((float)v);
    case PX_INT32: return ((const int32_t *)buf)[i] == (int32_t)v;
    case PX_INT64: return ((const int64_t *)buf)[i] == (int64_t)v;
    case PX_UINT8: return ((const uint8_t *)buf)[i] == (uint8_t)v;
    }
    return 0;
}

/* Input of rank r at (global) element i for reductions: 1..8 (1..2 for
 * PROD), so sums over up to 31 ranks are exact in uint8, fp16 and bf16. */
static double red_in(px_redop_t op, int r, uint64_t i)
{
    if (op == PX_PROD)
        return (double)((r + i) % 2 + 1);
    return (double)((r * 3u + i) % 8 + 1);
}

/* The exact reduction over n ranks at element i, rounded as the transport
 * rounds it: SUM/PROD/MIN/MAX exact; AVG divides the exact sum once (fp32
 * for fp32/fp16/bf16, then rounded to the dtype; fp64; integers truncate). */
static double red_expect(px_redop_t op, px_dtype_t dt, int n, uint64_t i)
{
    double acc = red_in(op, 0, i);
    for (int r = 1; r < n; r++) {
        double v = red_in(op, r, i);
        switch (op) {
        case PX_SUM: case PX_AVG: acc += v; break;
        case PX_PROD: acc *= v; break;
        case PX_MIN: acc = v < acc ? v : acc; break;
        case PX_MAX: acc = v > acc ? v : acc; break;
        }
    }
    if (op != PX_AVG)
        return acc;
    switch (dt) {
    case PX_FLOAT64: return acc / n;
    case PX_INT32: case PX_INT64: case PX_UINT8: return (double)((int64_t)acc / n);
    default: return (double)((float)acc / (float)n); /* fp32, then rounded once by put/same */
    }
}

/* Input of rank r, for destination block j, element k, for data movement
 * (all-gather, all-to-all, broadcast): 1..200, exact in every dtype. */
static double mov_in(int r, int j, uint64_t k)
{
    return (double)((r * 37u + j * 13u + k * 11u) % 200 + 1);
}

/* ---- one collective ----------------------------------------------------------------- */

/* `count` total elements, `per` = count / n for the per-rank ops. */
static px_status_t run_op(px_comm_t *comm, const px_bench_cfg_t *cfg, void *sbuf, void *rbuf,
                          uint64_t count, uint64_t per)
{
    switch (cfg->op) {
    case PX_BENCH_ALL_REDUCE:
        return px_allreduce(comm, sbuf, rbuf, count, cfg->dtype, cfg->redop, -1);
    case PX_BENCH_ALL_GATHER:
        return px_allgather(comm, sbuf, rbuf, per, cfg->dtype, NULL);
    case PX_BENCH_REDUCE_SCATTER:
        return px_reduce_scatter(comm, sbuf, rbuf, per, cfg->dtype, cfg->redop, NULL);
    case PX_BENCH_ALL_TO_ALL:
        return px_alltoall(comm, sbuf, rbuf, per, cfg->dtype, NULL);
    case PX_BENCH_BROADCAST:
        return px_bcast(comm, sbuf, count, cfg->dtype, cfg->root, NULL);
    case PX_BENCH_REDUCE:
        return px_reduce(comm, sbuf, rbuf, count, cfg->dtype, cfg->redop, cfg->root, NULL);
    }
    return PX_ERR_INVALID_ARGUMENT;
}

/* Fills the inputs for a check run. */
void px_bench_fill(const px_bench_cfg_t *cfg, int rank, int n, void *sbuf, void *rbuf,
                 uint64_t count, uint64_t per)
{
    px_dtype_t dt = cfg->dtype;
    uint64_t rcount = cfg->op == PX_BENCH_REDUCE_SCATTER ? per : count;

    switch (cfg->op) {
    case PX_BENCH_ALL_REDUCE:
    case PX_BENCH_REDUCE:
    case PX_BENCH_REDUCE_SCATTER:
        for (uint64_t i = 0; i < count; i++)
            put(sbuf, dt, i, red_in(cfg->redop, rank, i));
        break;
    case PX_BENCH_ALL_GATHER:
        for (uint64_t k = 0; k < per; k++)
            put(sbuf, dt, k, mov_in(rank, 0, k));
        break;
    case PX_BENCH_ALL_TO_ALL:
        for (int j = 0; j < n; j++)
            for (uint64_t k = 0; k < per; k++)
                put(sbuf, dt, (uint64_t)j * per + k, mov_in(rank, j, k));
        break;
    case PX_BENCH_BROADCAST:
        for (uint64_t k = 0; k < count; k++)
            put(sbuf, dt, k, rank == cfg->root ? mov_in(cfg->root, 0, k) : 0.0);
        return;
    }
    /* poison the output so stale data counts as wrong */
    memset(rbuf, 0xff, rcount * px_dtype_size(dt)); /* NaN, -1, 255: never expected */
}

/* Elements of this rank's output that differ from the exact expectation. */
int64_t px_bench_count_wrong(const px_bench_cfg_t *cfg, int rank, int n, const void *sbuf,
                           const void *rbuf, uint64_t count, uint64_t per)
{
    px_dtype_t dt = cfg->dtype;
    int64_t wrong = 0;

    switch (cfg->op) {
    case PX_BENCH_ALL_REDUCE:
        for (uint64_t i = 0; i < count; i++)
            wrong += !same(rbuf, dt, i, red_expect(cfg->redop, dt, n, i));
        break;
    case PX_BENCH_REDUCE:
        if (rank == cfg->root)
            for (uint64_t i = 0; i < count; i++)
                wrong += !same(rbuf, dt, i, red_expect(cfg->redop, dt, n, i));
        break;
    case PX_BENCH_REDUCE_SCATTER:
        for (uint64_t k = 0; k < per; k++)
            wrong += !same(rbuf, dt, k, red_expect(cfg->redop, dt, n, (uint64_t)rank * per + k));
        break;
    case PX_BENCH_ALL_GATHER:
        for (int r = 0; r < n; r++)
            for (uint64_t k = 0; k < per; k++)
                wrong += !same(rbuf, dt, (uint64_t)r * per + k, mov_in(r, 0, k));
        break;
    case PX_BENCH_ALL_TO_ALL:
        for (int r = 0; r < n; r++)
            for (uint64_t k = 0; k < per; k++)
                wrong += !same(rbuf, dt, (uint64_t)r * per + k, mov_in(r, rank, k));
        break;
    case PX_BENCH_BROADCAST:
        for (uint64_t k = 0; k < count; k++)
            wrong += !same(sbuf, dt, k, mov_in(cfg->root, 0, k));
        break;
    }
    return wrong;
}

/* ---- the loop ------------------------------------------------------------------------ */

px_status_t px_bench_run(px_comm_t *comm, const px_bench_cfg_t *cfg, px_bench_row_fn_t fn,
                         void *arg)
{
    int n = px_comm_size(comm), rank = px_comm_rank(comm);
    size_t esize = px_dtype_size(cfg->dtype);
    void *sbuf = NULL, *rbuf = NULL, *dsbuf = NULL, *drbuf = NULL; /* d*: device copies */
    const px_kernel_ops_t *dev = cfg->device_ops;
    size_t alloc;
    char err[160];
    px_status_t status;

    status = px_bench_cfg_validate(cfg, n, err, sizeof err);
    if (status != PX_OK) {
        px_error("bench: %s", err);
        return status;
    }
    alloc = (size_t)(cfg->max_bytes / esize + 1) * esize + 64;
    if (posix_memalign(&sbuf, 64, alloc) || posix_memalign(&rbuf, 64, alloc)) {
        px_error("bench: cannot allocate 2 x %zu bytes", alloc);
        status = PX_ERR_NO_MEMORY;
        goto out_free;
    }
    memset(sbuf, 0, alloc);
    memset(rbuf, 0, alloc);
    if (dev) { /* the collectives run on these; sbuf/rbuf mirror them on the host */
        dsbuf = dev->mem_alloc(alloc);
        drbuf = dev->mem_alloc(alloc);
        if (!dsbuf || !drbuf) {
            px_error("bench: cannot allocate 2 x %zu bytes of %s memory", alloc, dev->name);
            status = PX_ERR_NO_MEMORY;
            goto out_free;
        }
    }
    void *xs = dev ? dsbuf : sbuf, *xr = dev ? drbuf : rbuf; /* what the collectives see */

    for (uint64_t bytes = cfg->min_bytes; bytes <= cfg->max_bytes;
         bytes = bytes * (uint64_t)cfg->step_factor) {
        uint64_t count = bytes / esize, per = 0;
        int iters = cfg->iters ? cfg->iters : bytes < (1u << 20) ? 200 : 20;
        px_bench_row_t row = {0};
        double t0;
        int32_t go = 1;

        if (op_per_rank(cfg->op)) {
            per = count / (uint64_t)n;
            count = per * (uint64_t)n;
        }
        px_bench_fill(cfg, rank, n, sbuf, rbuf, count, per); /* the same data as the check run */
        if (dev) {
            dev->mem_copy_from_host(dsbuf, sbuf, alloc);
            dev->mem_copy_from_host(drbuf, rbuf, alloc);
        }
        for (int i = 0; i < cfg->warmup; i++)
            PX_CHECK_GOTO(run_op(comm, cfg, xs, xr, count, per), status, out_free);
        PX_CHECK_GOTO(px_barrier(comm, -1), status, out_free);
        t0 = px_time_mono_s();
        for (int i = 0; i < iters; i++)
            PX_CHECK_GOTO(run_op(comm, cfg, xs, xr, count, per), status, out_free);
        if (dev) /* the last result is in device memory: count the time to it */
            dev->synchronize();
        PX_CHECK_GOTO(px_barrier(comm, -1), status, out_free);
        row.time_us = (px_time_mono_s() - t0) / iters * 1e6;

        row.bytes = count * esize;
        row.count = count;
        row.dtype = cfg->dtype;
        row.redop = op_reduces(cfg->op) ? cfg->redop : (px_redop_t)-1; /* "none" */
        row.algbw_gbs = row.time_us > 0 ? (double)row.bytes / (row.time_us * 1e3) : 0.0;
        row.busbw_gbs = row.algbw_gbs * px_bench_bus_factor(cfg->op, n);
        row.wrong = -1;
        if (cfg->check) {
            px_bench_fill(cfg, rank, n, sbuf, rbuf, count, per);
            if (dev) {
                dev->mem_copy_from_host(dsbuf, sbuf, alloc);
                dev->mem_copy_from_host(drbuf, rbuf, alloc);
            }
            PX_CHECK_GOTO(run_op(comm, cfg, xs, xr, count, per), status, out_free);
            if (dev) {
                dev->mem_copy_to_host(sbuf, dsbuf, alloc);
                dev->mem_copy_to_host(rbuf, drbuf, alloc);
            }
            row.wrong = px_bench_count_wrong(cfg, rank, n, sbuf, rbuf, count, per);
            if (rank == 0) {
                for (int r = 1; r < n; r++) {
                    int64_t w = 0;
                    PX_CHECK_GOTO(px_recv(comm, r, BENCH_TAG, &w, sizeof w, -1), status, out_free);
                    row.wrong += w;
                }
            } else {
                PX_CHECK_GOTO(px_send(comm, 0, BENCH_TAG, &row.wrong, sizeof row.wrong, -1),
                              status, out_free);
            }
        }
        if (fn && fn(arg, &row) != 0)
            go = 0;
        if (n > 1)
            PX_CHECK_GOTO(px_broadcast(comm, &go, sizeof go, 0, -1), status, out_free);
        if (!go) {
            status = PX_ERR_ABORTED;
            goto out_free;
        }
        if (bytes > cfg->max_bytes / (uint64_t)cfg->step_factor)
            break; /* next size would pass max (or overflow) */
    }
    status = PX_OK;
out_free:
    free(sbuf);
    free(rbuf);
    if (dev) {
        dev->mem_free(dsbuf);
        dev->mem_free(drbuf);
    }
    return status;
}

/* ---- printing ------------------------------------------------------------------------- */

void px_bench_print_header(FILE *out, const px_bench_cfg_t *cfg, int world)
{
    int red = op_reduces(cfg->op);
    char iters[48];
    if (cfg->iters)
        snprintf(iters, sizeof iters, "%d", cfg->iters);
    else
        snprintf(iters, sizeof iters, "200 below 1 MiB, 20 above");
    fprintf(out, "# parallax %s, %d ranks, %s%s%s, warmup %d, iters %s, check %s\n",
            px_bench_op_name(cfg->op), world, px_bench_dtype_name(cfg->dtype), red ? " " : "",
            red ? px_bench_redop_name(cfg->redop) : "", cfg->warmup, iters,
            cfg->check ? "on" : "off");
    fprintf(out, "#%12s %12s %9s %6s %10s %8s %8s %8s\n", "size", "count", "type", "redop",
            "time", "algbw", "busbw", "#wrong");
    fprintf(out, "#%12s %12s %9s %6s %10s %8s %8s %8s\n", "(B)", "(elements)", "", "", "(us)",
            "(GB/s)", "(GB/s)", "");
}

void px_bench_print_row(FILE *out, const px_bench_row_t *row)
{
    char wrong[24];
    if (row->wrong < 0)
        snprintf(wrong, sizeof wrong, "N/A");
    else
        snprintf(wrong, sizeof wrong, "%lld", (long long)row->wrong);
    fprintf(out, " %12llu %12llu %9s %6s %10.1f %8.2f %8.2f %8s\n",
            (unsigned long long)row->bytes, (unsigned long long)row->count,
            px_bench_dtype_name(row->dtype), px_bench_redop_name(row->redop), row->time_us,
            row->algbw_gbs, row->busbw_gbs, wrong);
}
