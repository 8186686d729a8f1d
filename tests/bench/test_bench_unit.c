/* test_bench_unit.c: the benchmark's pure parts, no communicator.
 *
 * --check: for every reduction dtype x op on 3 ranks, and for all-gather,
 * all-to-all and broadcast on 4, the inputs px_bench_fill writes are
 * combined here independently (fp16 through the compiler's _Float16, bf16
 * by hand, AVG as the transport defines it), and px_bench_count_wrong must
 * find 0 wrong elements in that result, exactly 1 after one element is
 * changed, and every element in a stale (unwritten) output. Also the
 * nccl-tests bus factors, the size parser and the name tables. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench.h"

#include "../px_check.h"

static uint16_t bf16_rne(float f)
{
    uint32_t u;
    memcpy(&u, &f, 4);
    return (uint16_t)((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);
}

static double get(const void *b, px_dtype_t dt, size_t i)
{
    switch (dt) {
    case PX_FLOAT32: return ((const float *)b)[i];
    case PX_FLOAT64: return ((const double *)b)[i];
    case PX_FLOAT16: { _Float16 h; memcpy(&h, (const char *)b + 2 * i, 2); return (double)h; }
    case PX_BFLOAT16: {
        uint32_t u = (uint32_t)((const uint16_t *)b)[i] << 16;
        float f;
        memcpy(&f, &u, 4);
        return f;
    }
    case PX_INT32: return ((const int32_t *)b)[i];
    case PX_INT64: return (double)((const int64_t *)b)[i];
    case PX_UINT8: return ((const uint8_t *)b)[i];
    }
    return NAN;
}

static void set(void *b, px_dtype_t dt, size_t i, double v)
{
    switch (dt) {
    case PX_FLOAT32: ((float *)b)[i] = (float)v; break;
    case PX_FLOAT64: ((double *)b)[i] = v; break;
    case PX_FLOAT16: { _Float16 h = (_Float16)(float)v; memcpy((char *)b + 2 * i, &h, 2); break; }
    case PX_BFLOAT16: ((uint16_t *)b)[i] = bf16_rne((float)v); break;
    case PX_INT32: ((int32_t *)b)[i] = (int32_t)v; break;
    case PX_INT64: ((int64_t *)b)[i] = (int64_t)v; break;
    case PX_UINT8: ((uint8_t *)b)[i] = (uint8_t)v; break;
    }
}

/* The reduction of in[0..n) at element i, as px_coll.h defines it. */
static double reduce_ref(px_redop_t op, px_dtype_t dt, void **in, int n, size_t i)
{
    double acc = get(in[0], dt, i);
    for (int r = 1; r < n; r++) {
        double v = get(in[r], dt, i);
        if (op == PX_SUM || op == PX_AVG) acc += v;
        else if (op == PX_PROD) acc *= v;
        else if (op == PX_MIN) acc = fmin(acc, v);
        else acc = fmax(acc, v);
    }
    if (op != PX_AVG)
        return acc;
    if (dt == PX_FLOAT64)
        return acc / n;
    if (dt == PX_INT32 || dt == PX_INT64 || dt == PX_UINT8)
        return (double)((long long)acc / n);
    return (double)((float)acc / (float)n);
}

/* Checks that a correct result gives 0, one changed element 1, stale all. */
static void expect_verdicts(const px_bench_cfg_t *cfg, int rank, int n, void *sbuf, void *rbuf,
                            uint64_t count, uint64_t per, uint64_t out_count, const char *what)
{
    void *out = cfg->op == PX_BENCH_BROADCAST ? sbuf : rbuf;
    size_t es = px_dtype_size(cfg->dtype);
    int64_t w = px_bench_count_wrong(cfg, rank, n, sbuf, rbuf, count, per);
    CHECK(w == 0, "%s: %lld wrong in a correct result", what, (long long)w);
    if (!out_count)
        return;
    double v = get(out, cfg->dtype, out_count / 2);
    set(out, cfg->dtype, out_count / 2, v == 1.0 ? 2.0 : 1.0);
    w = px_bench_count_wrong(cfg, rank, n, sbuf, rbuf, count, per);
    CHECK(w == 1, "%s: %lld wrong after changing one element", what, (long long)w);
    memset(out, 0xff, out_count * es); /* as px_bench_fill poisons */
    w = px_bench_count_wrong(cfg, rank, n, sbuf, rbuf, count, per);
    CHECK(w == (int64_t)out_count, "%s: stale output: %lld wrong of %llu", what, (long long)w,
           (unsigned long long)out_count);
}

static void test_reductions(void)
{
    const int n = 3;
    const uint64_t count = 37 * 3; /* odd per-rank blocks for reduce-scatter */
    for (int dt = PX_FLOAT32; dt <= PX_UINT8; dt++) {
        for (int op = PX_SUM; op <= PX_AVG; op++) {
            for (int bop = 0; bop < 3; bop++) {
                px_bench_op_t bo = bop == 0 ? PX_BENCH_ALL_REDUCE
                                 : bop == 1 ? PX_BENCH_REDUCE_SCATTER : PX_BENCH_REDUCE;
                px_bench_cfg_t cfg;
                void *in[3], *rbuf[3];
                uint64_t per = bo == PX_BENCH_REDUCE_SCATTER ? count / n : 0;
                char what[96];
                px_bench_cfg_init(&cfg);
                cfg.op = bo;
                cfg.dtype = (px_dtype_t)dt;
                cfg.redop = (px_redop_t)op;
                cfg.root = 1;
                for (int r = 0; r < n; r++) {
                    in[r] = calloc(count, 8);
                    rbuf[r] = calloc(count, 8);
                    px_bench_fill(&cfg, r, n, in[r], rbuf[r], count, per);
                }
                for (int r = 0; r < n; r++) {
                    uint64_t out_count = bo == PX_BENCH_REDUCE_SCATTER ? per
                                       : bo == PX_BENCH_REDUCE && r != cfg.root ? 0 : count;
                    for (uint64_t k = 0; k < out_count; k++) {
                        uint64_t g = bo == PX_BENCH_REDUCE_SCATTER ? (uint64_t)r * per + k : k;
                        set(rbuf[r], cfg.dtype, k, reduce_ref(cfg.redop, cfg.dtype, in, n, g));
                    }
                    snprintf(what, sizeof what, "%s %s %s rank %d", px_bench_op_name(bo),
                             px_bench_dtype_name(cfg.dtype), px_bench_redop_name(cfg.redop), r);
                    expect_verdicts(&cfg, r, n, in[r], rbuf[r], count, per, out_count, what);
                }
                for (int r = 0; r < n; r++) {
                    free(in[r]);
                    free(rbuf[r]);
                }
            }
        }
    }
}

static void test_movement(void)
{
    const int n = 4;
    const uint64_t per = 29, count = per * 4;
    for (int dt = PX_FLOAT32; dt <= PX_UINT8; dt++) {
        for (int bop = 0; bop < 3; bop++) {
            px_bench_op_t bo = bop == 0 ? PX_BENCH_ALL_GATHER
                             : bop == 1 ? PX_BENCH_ALL_TO_ALL : PX_BENCH_BROADCAST;
            size_t es = px_dtype_size((px_dtype_t)dt);
            px_bench_cfg_t cfg;
            void *in[4], *rbuf[4];
            char what[96];
            px_bench_cfg_init(&cfg);
            cfg.op = bo;
            cfg.dtype = (px_dtype_t)dt;
            cfg.root = 2;
            for (int r = 0; r < n; r++) {
                in[r] = calloc(count, 8);
                rbuf[r] = calloc(count, 8);
                px_bench_fill(&cfg, r, n, in[r], rbuf[r], count, bo == PX_BENCH_BROADCAST ? 0 : per);
            }
            for (int r = 0; r < n; r++) {
                if (bo == PX_BENCH_ALL_GATHER)
                    for (int q = 0; q < n; q++)
                        memcpy((char *)rbuf[r] + q * per * es, in[q], per * es);
                else if (bo == PX_BENCH_ALL_TO_ALL)
                    for (int q = 0; q < n; q++) /* block q of r's output: q's block r */
                        memcpy((char *)rbuf[r] + q * per * es, (char *)in[q] + r * per * es,
                               per * es);
            }
            if (bo == PX_BENCH_BROADCAST)
                for (int r = 0; r < n; r++)
                    if (r != cfg.root) {
                        /* before the broadcast a non-root holds no root data */
                        CHECK(px_bench_count_wrong(&cfg, r, n, in[r], rbuf[r], count, 0) > 0,
                               "broadcast: a non-root's unfilled buffer passed");
                        memcpy(in[r], in[cfg.root], count * es);
                    }
            for (int r = 0; r < n; r++) {
                snprintf(what, sizeof what, "%s %s rank %d", px_bench_op_name(bo),
                         px_bench_dtype_name(cfg.dtype), r);
                expect_verdicts(&cfg, r, n, in[r], rbuf[r], count,
                                bo == PX_BENCH_BROADCAST ? 0 : per, count, what);
            }
            for (int r = 0; r < n; r++) {
                free(in[r]);
                free(rbuf[r]);
            }
        }
    }
}

static void test_tables(void)
{
    uint64_t b = 0;
    px_bench_op_t op;
    px_dtype_t dt;
    px_bench_cfg_t cfg;
    char err[160];

    CHECK(fabs(px_bench_bus_factor(PX_BENCH_ALL_REDUCE, 4) - 1.5) < 1e-12, "all_reduce factor");
    CHECK(fabs(px_bench_bus_factor(PX_BENCH_ALL_GATHER, 4) - 0.75) < 1e-12, "all_gather factor");
    CHECK(fabs(px_bench_bus_factor(PX_BENCH_REDUCE_SCATTER, 3) - 2.0 / 3) < 1e-12, "rs factor");
    CHECK(fabs(px_bench_bus_factor(PX_BENCH_ALL_TO_ALL, 2) - 0.5) < 1e-12, "a2a factor");
    CHECK(px_bench_bus_factor(PX_BENCH_BROADCAST, 4) == 1.0, "broadcast factor");
    CHECK(px_bench_bus_factor(PX_BENCH_REDUCE, 4) == 1.0, "reduce factor");
    CHECK(px_bench_bus_factor(PX_BENCH_ALL_REDUCE, 1) == 0.0, "world 1 factor");
    CHECK(px_bench_parse_bytes("4K", &b) == PX_OK && b == 4096, "4K");
    CHECK(px_bench_parse_bytes("64MiB", &b) == PX_OK && b == 64u << 20, "64MiB");
    CHECK(px_bench_parse_bytes("1g", &b) == PX_OK && b == 1u << 30, "1g");
    CHECK(px_bench_parse_bytes("12", &b) == PX_OK && b == 12, "12");
    CHECK(px_bench_parse_bytes("-1", &b) == PX_ERR_INVALID_ARGUMENT, "-1");
    CHECK(px_bench_parse_bytes("4X", &b) == PX_ERR_INVALID_ARGUMENT, "4X");
    CHECK(px_bench_parse_bytes("", &b) == PX_ERR_INVALID_ARGUMENT, "empty");
    for (int i = 0; i <= PX_BENCH_REDUCE; i++)
        CHECK(px_bench_op_parse(px_bench_op_name((px_bench_op_t)i), &op) == PX_OK && (int)op == i,
               "op name round trip %d", i);
    CHECK(px_bench_op_parse("allreduce", &op) == PX_OK && op == PX_BENCH_ALL_REDUCE, "alias");
    CHECK(px_bench_op_parse("all-reduce", &op) == PX_ERR_INVALID_ARGUMENT, "bad op");
    for (int i = PX_FLOAT32; i <= PX_UINT8; i++)
        CHECK(px_bench_dtype_parse(px_bench_dtype_name((px_dtype_t)i), &dt) == PX_OK && (int)dt == i,
               "dtype name round trip %d", i);
    CHECK(px_bench_dtype_parse("bf16", &dt) == PX_OK && dt == PX_BFLOAT16, "bf16 alias");
    px_bench_cfg_init(&cfg);
    CHECK(px_bench_cfg_validate(&cfg, 4, err, sizeof err) == PX_OK, "defaults: %s", err);
    cfg.max_bytes = 100;
    cfg.min_bytes = 200;
    CHECK(px_bench_cfg_validate(&cfg, 4, err, sizeof err) == PX_ERR_INVALID_ARGUMENT &&
           strstr(err, "max_bytes"), "max < min: %s", err);
    px_bench_cfg_init(&cfg);
    cfg.root = 4;
    CHECK(px_bench_cfg_validate(&cfg, 4, err, sizeof err) == PX_ERR_INVALID_ARGUMENT &&
           strstr(err, "root"), "root: %s", err);
    px_bench_cfg_init(&cfg);
    cfg.step_factor = 3;
    CHECK(px_bench_cfg_validate(&cfg, 4, err, sizeof err) == PX_ERR_INVALID_ARGUMENT &&
           strstr(err, "step_factor"), "step: %s", err);
}

int main(void)
{
    test_reductions();
    test_movement();
    test_tables();
    if (fails) {
        fprintf(stderr, "%d fails\n", fails);
        return 1;
    }
    printf("bench unit: check verdicts for 7 dtypes x 5 ops x 3 reductions and 3 movements, "
           "bus factors, parsers\n");
    return 0;
}
