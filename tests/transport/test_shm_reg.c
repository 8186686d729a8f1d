/* test_shm_reg.c: registered buffers of the shared-memory path
 * (transport/px_shm_reg.h) on N local ranks (px_launch).
 *
 *   equal N     in-place all-reduces over ranges of a registered buffer
 *               (offsets 0 and odd, counts not multiples of N, float32 /
 *               float64 / int32, SUM / AVG / MAX) give bitwise the result
 *               of the same data in plain memory (the slot path); 300
 *               rounds in which every rank rewrites its buffer the moment
 *               its all-reduce returns (the barrier rule: a peer still
 *               copying from it would get the next round's values);
 *               px_shm_free and a second region.
 *   mismatch N  the last rank passes a plain buffer where the others pass a
 *               registered one, then a different offset of it: every rank
 *               fails with PX_ERR_MISMATCH naming the difference, promptly,
 *               and the communicator still works.
 *   off N       PX_SHM_REG=0 on one rank: px_shm_alloc gives NULL on every
 *               rank.
 *   sizes N     rank 1 asks for two pages more than the others: NULL on
 *               every rank; then equal sizes register.
 *   bench N     (not a test) in-place all-reduce 1-64 MiB, registered vs
 *               plain memory, median ms and bus bandwidth (rank 0 prints). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "px_coll.h"
#include "px_launch.h"
#include "px_shm_reg.h"
#include "px_time.h"

#define FAIL(...) do { fprintf(stderr, "FAIL rank %d: ", ctx->rank); \
    fprintf(stderr, __VA_ARGS__); fprintf(stderr, "\n"); return 1; } while (0)

#define ELEMS (1u << 20) /* float64 elements of the region: 8 MiB per rank */

/* A value of rank r at element i that makes float sums round (not exact). */
static double val(int r, uint64_t i, int round)
{
    return 0.1 * (double)((i * 2654435761u + (uint64_t)r * 40503u + (uint64_t)round * 97u) % 1000) -
           37.3 + 1e-3 * r;
}

static void fill(px_dtype_t dt, void *buf, uint64_t off, uint64_t count, int r, int round)
{
    for (uint64_t i = 0; i < count; i++) {
        double x = val(r, off + i, round);
        if (dt == PX_FLOAT32)
            ((float *)buf)[i] = (float)x;
        else if (dt == PX_FLOAT64)
            ((double *)buf)[i] = x;
        else
            ((int32_t *)buf)[i] = (int32_t)(x * 1000.0);
    }
}

static int rank_equal(px_launch_rank_t *ctx)
{
    static const px_dtype_t dts[] = {PX_FLOAT32, PX_FLOAT64, PX_INT32};
    static const px_redop_t ops[] = {PX_SUM, PX_AVG, PX_MAX};
    static const uint64_t offs[] = {0, 17, 4093};
    static const uint64_t counts[] = {16384, 65537, 300001, 1000003};
    px_comm_t *c = ctx->comm;
    char *reg = NULL, *reg2 = NULL;
    char *plain = malloc((size_t)ELEMS * 8);
    px__shm_reg_view_t v;
    px_status_t status;

    if (!plain)
        FAIL("out of memory");
    status = px_shm_alloc(c, (size_t)ELEMS * 8, 1, (void **)&reg);
    if (status != PX_OK || !reg)
        FAIL("px_shm_alloc: %s, %p", px_status_str(status), (void *)reg);
    if (!px__shm_reg_lookup(c, reg + 8, 4096, &v) || v.offset != 8)
        FAIL("the buffer is not found as registered");
    for (size_t d = 0; d < sizeof(dts) / sizeof(dts[0]); d++)
        for (size_t o = 0; o < sizeof(ops) / sizeof(ops[0]); o++)
            for (size_t k = 0; k < sizeof(counts) / sizeof(counts[0]); k++) {
                px_dtype_t dt = dts[d];
                size_t esz = px_dtype_size(dt);
                uint64_t off = offs[(d + o + k) % 3], count = counts[k];
                if (count * esz < PX__SHM_REG_MIN_BYTES || (off + count) * esz > (size_t)ELEMS * 8)
                    continue;
                if (dt == PX_INT32 && ops[o] == PX_AVG)
                    continue;
                fill(dt, reg + off * esz, off, count, ctx->rank, (int)k);
                fill(dt, plain, off, count, ctx->rank, (int)k);
                status = px_allreduce(c, reg + off * esz, reg + off * esz, count, dt, ops[o], -1);
                if (status == PX_OK)
                    status = px_allreduce(c, plain, plain, count, dt, ops[o], -1);
                if (status != PX_OK)
                    FAIL("all-reduce %s %s count %llu: %s (%s)", px_dtype_name(dt),
                         px_redop_name(ops[o]), (unsigned long long)count, px_status_str(status),
                         px_comm_last_error(c));
                if (memcmp(reg + off * esz, plain, count * esz))
                    FAIL("%s %s count %llu offset %llu: the registered result differs from the "
                         "slot path's", px_dtype_name(dt), px_redop_name(ops[o]),
                         (unsigned long long)count, (unsigned long long)off);
            }
    /* the barrier rule: rewrite at once, every round checked exactly
     * (integer-valued floats: any order gives the same sum) */
    {
        uint64_t count = 70001;
        float *g = (float *)reg;
        int n = px_comm_size(c);
        for (int round = 0; round < 300; round++) {
            for (uint64_t i = 0; i < count; i++)
                g[i] = (float)((ctx->rank + 1) * (round + 1) + (int)(i % 7));
            status = px_allreduce(c, g, g, count, PX_FLOAT32, PX_SUM, -1);
            if (status != PX_OK)
                FAIL("round %d: %s (%s)", round, px_status_str(status), px_comm_last_error(c));
            for (uint64_t i = 0; i < count; i++) {
                float want = (float)(n * (n + 1) / 2 * (round + 1) + n * (int)(i % 7));
                if (g[i] != want)
                    FAIL("round %d element %llu: %g, want %g", round, (unsigned long long)i,
                         g[i], want);
            }
        }
    }
    /* a second region; the first freed while the second is in use */
    status = px_shm_alloc(c, 300000 * sizeof(float), 1, (void **)&reg2);
    if (status != PX_OK || !reg2)
        FAIL("second px_shm_alloc: %s", px_status_str(status));
    px_shm_free(reg);
    for (int i = 0; i < 300000; i++)
        ((float *)reg2)[i] = (float)(ctx->rank + i % 5);
    status = px_allreduce(c, reg2, reg2, 300000, PX_FLOAT32, PX_MAX, -1);
    if (status != PX_OK)
        FAIL("all-reduce over the second region: %s", px_status_str(status));
    for (int i = 0; i < 300000; i++)
        if (((float *)reg2)[i] != (float)(px_comm_size(c) - 1 + i % 5))
            FAIL("second region element %d: %g", i, ((float *)reg2)[i]);
    px_shm_free(reg2);
    free(plain);
    printf("rank %d: registered all-reduces equal the slot path's\n", ctx->rank);
    return 0;
}

static int expect_mismatch(px_launch_rank_t *ctx, px_comm_t *c, void *buf, uint64_t count,
                           const char *word)
{
    int64_t t0 = px_time_mono_ms();
    px_status_t status = px_allreduce(c, buf, buf, count, PX_FLOAT32, PX_SUM, -1);

    if (status != PX_ERR_MISMATCH)
        FAIL("got %s, want a mismatch", px_status_str(status));
    if (!strstr(px_comm_last_error(c), word))
        FAIL("the error does not say '%s': %s", word, px_comm_last_error(c));
    if (px_time_mono_ms() - t0 > 5000)
        FAIL("the mismatch took %lld ms", (long long)(px_time_mono_ms() - t0));
    printf("rank %d: %s\n", ctx->rank, px_comm_last_error(c));
    return 0;
}

static int rank_mismatch(px_launch_rank_t *ctx)
{
    px_comm_t *c1 = NULL, *c2 = NULL;
    int last = ctx->world - 1, bad;
    uint64_t count = 100000;
    float *reg1 = NULL, *reg2 = NULL, *plain = calloc(2 * count, sizeof(float));

    if (px_comm_split(ctx->comm, 0, ctx->rank, &c1) != PX_OK ||
        px_comm_split(ctx->comm, 0, ctx->rank, &c2) != PX_OK)
        FAIL("split");
    if (px_shm_alloc(c1, 2 * count * sizeof(float), 1, (void **)&reg1) != PX_OK || !reg1 ||
        px_shm_alloc(c2, 2 * count * sizeof(float), 1, (void **)&reg2) != PX_OK || !reg2)
        FAIL("px_shm_alloc");
    bad = expect_mismatch(ctx, c1, ctx->rank == last ? plain : reg1, count, "registered");
    if (!bad)
        bad = expect_mismatch(ctx, c2, ctx->rank == last ? reg2 + 1024 : reg2, count, "offset");
    if (!bad) { /* the world still works, over a registered buffer */
        float *g = NULL;
        if (px_shm_alloc(ctx->comm, count * sizeof(float), 1, (void **)&g) != PX_OK || !g)
            FAIL("px_shm_alloc on the world");
        for (uint64_t i = 0; i < count; i++)
            g[i] = 1.0f;
        if (px_allreduce(ctx->comm, g, g, count, PX_FLOAT32, PX_SUM, -1) != PX_OK ||
            g[count - 1] != (float)ctx->world)
            FAIL("all-reduce after the mismatches");
        px_shm_free(g);
    }
    px_shm_free(reg1);
    px_shm_free(reg2);
    px_comm_destroy(c2);
    px_comm_destroy(c1);
    free(plain);
    return bad;
}

static int rank_off(px_launch_rank_t *ctx)
{
    void *p = (void *)1;

    if (ctx->rank == 1)
        setenv("PX_SHM_REG", "0", 1);
    if (px_shm_alloc(ctx->comm, 1 << 20, 1, &p) != PX_OK || p)
        FAIL("PX_SHM_REG=0 on rank 1: px_shm_alloc gave %p", p);
    if (px_shm_alloc(ctx->comm, 1 << 20, ctx->rank != 0, &p) != PX_OK || p)
        FAIL("want 0 on rank 0: px_shm_alloc gave %p", p);
    return 0;
}

/* `sizes`: sizes that differ (rank 1 two pages more): no rank adopts rank
 * 0's, every rank gets NULL (px__shm_segment without adopt_bytes); then
 * equal sizes register. */
static int rank_sizes(px_launch_rank_t *ctx)
{
    void *p = (void *)1;

    if (px_shm_alloc(ctx->comm, (1 << 20) + (ctx->rank == 1 ? 8192 : 0), 1, &p) != PX_OK || p)
        FAIL("sizes differ on rank 1: px_shm_alloc gave %p", p);
    /* and the same sizes after it register */
    if (px_shm_alloc(ctx->comm, 1 << 20, 1, &p) != PX_OK || !p)
        FAIL("equal sizes after a refused region: px_shm_alloc gave NULL");
    px_shm_free(p);
    return 0;
}

static int dcmp(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

/* bench N: in-place float32 SUM all-reduce, 1-64 MiB, registered buffer vs
 * plain memory (the slot path), alternating per size; median of 15 (3
 * warm-up) in ms and the bus bandwidth 2 (n-1)/n B / t, printed by rank 0. */
static int rank_bench(px_launch_rank_t *ctx)
{
    px_comm_t *c = ctx->comm;
    size_t max = 64u << 20;
    char *reg = NULL, *plain = malloc(max);
    int n = px_comm_size(c);

    if (!plain || px_shm_alloc(c, max, 1, (void **)&reg) != PX_OK || !reg)
        FAIL("allocation");
    memset(plain, 0, max);
    memset(reg, 0, max);
    if (ctx->rank == 0)
        printf("%d ranks: bytes  registered ms (GB/s)  plain ms (GB/s)  speed-up\n", n);
    for (size_t bytes = 1u << 20; bytes <= max; bytes *= 4) {
        double t[2][15];
        for (int i = 0; i < 15; i++)
            for (int w = 0; w < 2; w++) {
                char *b = w ? plain : reg;
                px_barrier(c, -1);
                double t0 = px_time_mono_s();
                if (px_allreduce(c, b, b, bytes / 4, PX_FLOAT32, PX_SUM, -1) != PX_OK)
                    FAIL("all-reduce of %zu bytes", bytes);
                t[w][i] = px_time_mono_s() - t0;
            }
        qsort(t[0] + 3, 12, sizeof(double), dcmp);
        qsort(t[1] + 3, 12, sizeof(double), dcmp);
        double r = (t[0][9] + t[0][8]) / 2, p = (t[1][9] + t[1][8]) / 2, bus = 2.0 * (n - 1) / n * (double)bytes;
        if (ctx->rank == 0)
            printf("%9zu  %8.3f (%5.2f)  %8.3f (%5.2f)  %.2fx\n", bytes, r * 1e3, bus / r / 1e9,
                   p * 1e3, bus / p / 1e9, p / r);
    }
    px_shm_free(reg);
    free(plain);
    return 0;
}

int main(int argc, char **argv)
{
    const char *what = argc > 1 ? argv[1] : "equal";
    int n = argc > 2 ? atoi(argv[2]) : 2;
    px_launch_opts_t opts = {.use_watch = 1, .limit_s = 200};
    int failed;

    setvbuf(stdout, NULL, _IOLBF, 0);
    if (n < 2 || n > 64)
        return 2;
    if (!strcmp(what, "equal"))
        failed = px_launch(n, rank_equal, NULL, &opts, NULL);
    else if (!strcmp(what, "mismatch"))
        failed = px_launch(n, rank_mismatch, NULL, &opts, NULL);
    else if (!strcmp(what, "bench"))
        failed = px_launch(n, rank_bench, NULL, &opts, NULL);
    else if (!strcmp(what, "off"))
        failed = px_launch(n, rank_off, NULL, &opts, NULL);
    else if (!strcmp(what, "sizes"))
        failed = px_launch(n, rank_sizes, NULL, &opts, NULL);
    else {
        fprintf(stderr, "usage: %s equal|mismatch|off|sizes|bench N\n", argv[0]);
        return 2;
    }
    if (failed)
        fprintf(stderr, "FAIL: %d failure(s)\n", failed);
    return failed ? 1 : 0;
}
