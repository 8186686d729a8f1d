/* test_coll.c: every collective, data type and op against a straightforward
 * reference, on N local ranks (px_launch, standalone bootstrap). One process
 * launch per world size runs the whole matrix.
 *
 *   test_coll matrix N    all-reduce (ring, Rabenseifner, recursive doubling),
 *                         reduce, reduce-scatter (ring, in and out of place), all-gather, broadcast (tree, scatter +
 *                         ring), scatter, gather, all-to-all (linear,
 *                         pairwise), all-to-all-v, barrier; dtypes fp32 fp64
 *                         fp16 bf16 int32 int64 uint8; ops sum prod min max
 *                         avg; counts 0, 1, N-1, and a large odd one; the
 *                         issue's named cases; several nonblocking
 *                         collectives outstanding at once (px_test polling
 *                         and px_wait out of order); split; px_wait with a
 *                         short bound, px_request_cancel; abort
 *   test_coll mismatch4   rank 0 passes count 256000, the others 512000:
 *                         every rank gets PX_ERR_MISMATCH, no write past a
 *                         buffer, the communicator still works; the same for
 *                         an all-to-all-v whose counts disagree between two
 *                         ranks only
 *   test_coll exitrace N  a rank completes a barrier and exits before the
 *                         others wait for it: they still succeed
 *   test_coll leak N      300 x (split, all-reduce and fp16 reduce on the
 *                         sub-communicator, destroy) and 20 x (a second world
 *                         communicator: endpoints, wire-up, pidfds; destroy):
 *                         file descriptors, communicators and RSS do not grow
 *   test_coll secret N    a second world connects when its ranks share
 *                         PX_JOB_SECRET and is refused on every rank when
 *                         rank 1 holds another; the first world still works
 *
 * Reference: each rank fills its input from (rank, index, op) with small
 * integers, so every result is exact in every dtype; the expected output is
 * computed in double from all ranks' inputs and stored in the dtype the way
 * the library rounds (fp16/bf16: the fp32 result rounded once; float AVG:
 * the fp32 (fp64) sum divided by n; integer AVG truncated). Output bytes
 * must equal the expected bytes exactly (memcmp), and guard bytes around
 * every output must be untouched. */
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include <dirent.h>

#include "px_coll.h"
#include "px_launch.h"
#include "px_log.h"
#include "px_reduce.h"
#include "px_time.h"
#include "px_transport_int.h" /* n_comms (leak test) */

#define FAIL(...) do { fprintf(stderr, "FAIL rank %d: ", ctx->rank); \
    fprintf(stderr, __VA_ARGS__); fprintf(stderr, "\n"); return 1; } while (0)
#define GUARD 16 /* guard bytes on both sides of every output buffer */

static const px_dtype_t all_dtypes[] = {PX_FLOAT32, PX_FLOAT64, PX_FLOAT16, PX_BFLOAT16,
                                        PX_INT32, PX_INT64, PX_UINT8};
static const px_redop_t all_ops[] = {PX_SUM, PX_PROD, PX_MIN, PX_MAX, PX_AVG};

/* Input of rank r at element i for op: small integers, exact everywhere. */
static double input(int r, uint64_t i, px_redop_t op)
{
    switch (op) {
    case PX_PROD: return (double)(1 + (r + i) % 3);                 /* 1..3: product <= 81 */
    case PX_MIN:
    case PX_MAX: return (double)((r * 7 + i * 13) % 11);
    default: return (double)(r + 1 + i % 7);                        /* sum <= 4 * 11 */
    }
}

static void put(px_dtype_t dt, void *buf, uint64_t i, double v)
{
    switch (dt) {
    case PX_FLOAT32: ((float *)buf)[i] = (float)v; break;
    case PX_FLOAT64: ((double *)buf)[i] = v; break;
    case PX_FLOAT16: { float f = (float)v; px_f32_to_f16((uint16_t *)buf + i, &f, 1); break; }
    case PX_BFLOAT16: { float f = (float)v; px_f32_to_bf16((uint16_t *)buf + i, &f, 1); break; }
    case PX_INT32: ((int32_t *)buf)[i] = (int32_t)v; break;
    case PX_INT64: ((int64_t *)buf)[i] = (int64_t)v; break;
    case PX_UINT8: ((uint8_t *)buf)[i] = (uint8_t)v; break;
    }
}

/* Expected reduction of element i over n ranks. */
static double expect_reduce(px_dtype_t dt, px_redop_t op, int n, uint64_t i)
{
    double acc = input(0, i, op);
    for (int r = 1; r < n; r++) {
        double v = input(r, i, op);
        switch (op) {
        case PX_PROD: acc *= v; break;
        case PX_MIN: acc = v < acc ? v : acc; break;
        case PX_MAX: acc = v > acc ? v : acc; break;
        default: acc += v; break;
        }
    }
    if (op == PX_AVG) {
        if (dt == PX_FLOAT64)
            return acc / n;
        if (dt == PX_FLOAT32 || dt == PX_FLOAT16 || dt == PX_BFLOAT16)
            return (double)((float)acc / (float)n);
        return (double)((int64_t)acc / n); /* truncation toward zero */
    }
    return acc;
}

/* Output buffer with guards: returns the inner pointer. */
static char *gbuf(size_t bytes)
{
    char *b = malloc(bytes + 2 * GUARD);
    if (!b)
        abort();
    memset(b, 0xA5, bytes + 2 * GUARD);
    return b + GUARD;
}

static int guards_ok(const char *p, size_t bytes)
{
    for (int i = 0; i < GUARD; i++)
        if ((unsigned char)p[-1 - i] != 0xA5 || (unsigned char)p[bytes + (size_t)i] != 0xA5)
            return 0;
    return 1;
}

static void gfree(char *p)
{
    if (p)
        free(p - GUARD);
}

static int cases;

/* Compares `got` with `want` (bytes); reports the first differing element. */
static int same(px_launch_rank_t *ctx, const char *what, px_dtype_t dt, px_redop_t op,
                uint64_t count, const char *got, const char *want, size_t bytes)
{
    size_t esz = px_dtype_size(dt);
    cases++;
    if (!guards_ok(got, bytes))
        FAIL("%s %s %s count %llu: wrote outside the buffer", what, px_dtype_name(dt),
             px_redop_name(op), (unsigned long long)count);
    for (size_t b = 0; b < bytes; b++)
        if (got[b] != want[b])
            FAIL("%s %s %s count %llu: element %zu differs", what, px_dtype_name(dt),
                 px_redop_name(op), (unsigned long long)count, b / esz);
    return 0;
}

#define CALL(what, call) do { px_status_t st_ = (call); if (st_ != PX_OK) \
    FAIL("%s: %s (%s)", what, px_status_str(st_), px_comm_last_error(ctx->comm)); } while (0)

/* All-reduce, reduce and reduce-scatter of one (dtype, op, count). */
static int check_reductions(px_launch_rank_t *ctx, px_dtype_t dt, px_redop_t op, uint64_t count,
                            px_algo_t algo)
{
    const int n = ctx->world, r = ctx->rank;
    const size_t esz = px_dtype_size(dt), bytes = (size_t)count * esz;
    px_coll_opts_t opts = {algo, 0};
    int inplace = (count + (uint64_t)op) % 2 == 0;
    char *in = gbuf(bytes * (size_t)n), *out = gbuf(bytes * (size_t)n);
    char *want = malloc(bytes * (size_t)n + 1);
    int root = (int)(count % (uint64_t)n);

    /* all-reduce */
    for (uint64_t i = 0; i < count; i++) {
        put(dt, in, i, input(r, i, op));
        put(dt, want, i, expect_reduce(dt, op, n, i));
    }
    if (inplace) {
        memcpy(out, in, bytes);
        CALL("allreduce", px_allreduce_opts(ctx->comm, out, out, count, dt, op, &opts));
    } else {
        CALL("allreduce", px_allreduce_opts(ctx->comm, in, out, count, dt, op, &opts));
    }
    if (same(ctx, inplace ? "allreduce in place" : "allreduce", dt, op, count, out, want, bytes))
        return 1;

    /* reduce to root */
    memset(out - GUARD, 0xA5, bytes + 2 * GUARD);
    CALL("reduce", px_reduce(ctx->comm, in, r == root ? out : NULL, count, dt, op, root, NULL));
    if (r == root && same(ctx, "reduce", dt, op, count, out, want, bytes))
        return 1;

    /* reduce-scatter: n blocks of `count`; rank r gets block r */
    for (uint64_t i = 0; i < count * (uint64_t)n; i++)
        put(dt, in, i, input(r, i, op));
    for (uint64_t i = 0; i < count; i++)
        put(dt, want, i, expect_reduce(dt, op, n, (uint64_t)r * count + i));
    memset(out - GUARD, 0xA5, bytes * (size_t)n + 2 * GUARD);
    if (inplace) {
        memcpy(out, in, bytes * (size_t)n);
        CALL("reduce_scatter", px_reduce_scatter(ctx->comm, out, out + (size_t)r * bytes, count,
                                                 dt, op, NULL));
        if (!guards_ok(out, bytes * (size_t)n))
            FAIL("in-place reduce-scatter wrote outside the buffer");
        cases++;
        if (memcmp(out + (size_t)r * bytes, want, bytes))
            FAIL("reduce_scatter in place %s %s count %llu: wrong result", px_dtype_name(dt),
                 px_redop_name(op), (unsigned long long)count);
    } else {
        CALL("reduce_scatter", px_reduce_scatter(ctx->comm, in, out, count, dt, op, NULL));
        if (same(ctx, "reduce_scatter", dt, op, count, out, want, bytes))
            return 1;
    }
    gfree(in);
    gfree(out);
    free(want);
    return 0;
}

/* Byte-moving collectives of one (dtype, count). */
static int check_movers(px_launch_rank_t *ctx, px_dtype_t dt, uint64_t count)
{
    const int n = ctx->world, r = ctx->rank;
    const size_t esz = px_dtype_size(dt), bytes = (size_t)count * esz, all = bytes * (size_t)n;
    char *in = gbuf(all), *out = gbuf(all), *want = malloc(all + 1);
    int root = (int)((count + 1) % (uint64_t)n);
    int inplace = count % 2 == 1;
    /* value of element i of rank p's contribution: distinct per (p, i) */
#define VAL(p, i) ((double)(((p) * 31 + (i) * 7) % 97))

    /* all-gather */
    for (uint64_t i = 0; i < count; i++)
        put(dt, in, i, VAL(r, i));
    for (int p = 0; p < n; p++)
        for (uint64_t i = 0; i < count; i++)
            put(dt, want, (uint64_t)p * count + i, VAL(p, i));
    if (inplace) {
        memcpy(out + (size_t)r * bytes, in, bytes);
        CALL("allgather", px_allgather(ctx->comm, out + (size_t)r * bytes, out, count, dt, NULL));
    } else {
        CALL("allgather", px_allgather(ctx->comm, in, out, count, dt, NULL));
    }
    if (same(ctx, inplace ? "allgather in place" : "allgather", dt, PX_SUM, count, out, want, all))
        return 1;

    /* broadcast, both algorithms */
    for (int a = 0; a < 2; a++) {
        px_coll_opts_t o = {a ? PX_ALGO_RING : PX_ALGO_TREE, 0};
        memset(out - GUARD, 0xA5, all + 2 * GUARD);
        for (uint64_t i = 0; i < count; i++) {
            put(dt, want, i, VAL(root, i) + a);
            if (r == root)
                put(dt, out, i, VAL(root, i) + a);
        }
        CALL("bcast", px_bcast(ctx->comm, out, count, dt, root, &o));
        if (same(ctx, a ? "bcast ring" : "bcast tree", dt, PX_SUM, count, out, want, bytes))
            return 1;
    }

    /* scatter from root: block p of the root's buffer to rank p */
    for (uint64_t i = 0; i < count * (uint64_t)n; i++)
        put(dt, in, i, VAL(root, i));
    for (uint64_t i = 0; i < count; i++)
        put(dt, want, i, VAL(root, (uint64_t)r * count + i));
    memset(out - GUARD, 0xA5, all + 2 * GUARD);
    CALL("scatter", px_scatter(ctx->comm, r == root ? in : NULL, out, count, dt, root, NULL));
    if (same(ctx, "scatter", dt, PX_SUM, count, out, want, bytes))
        return 1;

    /* gather to root */
    for (uint64_t i = 0; i < count; i++)
        put(dt, in, i, VAL(r, i));
    for (int p = 0; p < n; p++)
        for (uint64_t i = 0; i < count; i++)
            put(dt, want, (uint64_t)p * count + i, VAL(p, i));
    memset(out - GUARD, 0xA5, all + 2 * GUARD);
    CALL("gather", px_gather(ctx->comm, in, r == root ? out : NULL, count, dt, root, NULL));
    if (r == root && same(ctx, "gather", dt, PX_SUM, count, out, want, all))
        return 1;

    /* all-to-all, both algorithms: block p of rank q's input goes to rank p */
    for (int a = 0; a < 2; a++) {
        px_coll_opts_t o = {a ? PX_ALGO_PAIRWISE : PX_ALGO_LINEAR, 0};
        for (int p = 0; p < n; p++)
            for (uint64_t i = 0; i < count; i++) {
                put(dt, in, (uint64_t)p * count + i, VAL(r * n + p, i));
                put(dt, want, (uint64_t)p * count + i, VAL(p * n + r, i));
            }
        memset(out - GUARD, 0xA5, all + 2 * GUARD);
        CALL("alltoall", px_alltoall(ctx->comm, in, out, count, dt, &o));
        if (same(ctx, a ? "alltoall pairwise" : "alltoall linear", dt, PX_SUM, count, out, want,
                 all))
            return 1;
    }
#undef VAL
    gfree(in);
    gfree(out);
    free(want);
    return 0;
}

/* All-to-all-v: rank q sends (q + p + k) % 3 * m elements to p (m = count
 * scale), packed in reverse peer order on the send side. */
static int check_alltoallv(px_launch_rank_t *ctx, px_dtype_t dt, uint64_t m)
{
    const int n = ctx->world, r = ctx->rank;
    const size_t esz = px_dtype_size(dt);
    uint64_t sc[64], sd[64], rc[64], rd[64], stot = 0, rtot = 0;
    char *in, *out, *want;

    for (int p = n - 1; p >= 0; p--) {
        sc[p] = (uint64_t)((r + p + 1) % 3) * m;
        sd[p] = stot;
        stot += sc[p];
    }
    for (int p = 0; p < n; p++) {
        rc[p] = (uint64_t)((p + r + 1) % 3) * m;
        rd[p] = rtot;
        rtot += rc[p];
    }
    in = gbuf((size_t)stot * esz + 1);
    out = gbuf((size_t)rtot * esz + 1);
    want = malloc((size_t)rtot * esz + 1);
    for (int p = 0; p < n; p++)
        for (uint64_t i = 0; i < sc[p]; i++)
            put(dt, in, sd[p] + i, (double)((r * 5 + p * 3 + i) % 89));
    for (int p = 0; p < n; p++)
        for (uint64_t i = 0; i < rc[p]; i++)
            put(dt, want, rd[p] + i, (double)((p * 5 + r * 3 + i) % 89));
    CALL("alltoallv", px_alltoallv(ctx->comm, in, sc, sd, out, rc, rd, dt, NULL));
    if (same(ctx, "alltoallv", dt, PX_SUM, m, out, want, (size_t)rtot * esz))
        return 1;
    gfree(in);
    gfree(out);
    free(want);
    return 0;
}

/* The named cases. */
static int check_named(px_launch_rank_t *ctx)
{
    const int n = ctx->world, r = ctx->rank;

    if (n == 1) { /* bf16 AVG count 1,000,003: output bitwise equal to input */
        uint64_t count = 1000003;
        uint16_t *in = malloc(count * 2), *out = malloc(count * 2);
        for (uint64_t i = 0; i < count; i++)
            in[i] = (uint16_t)(i * 2654435761u >> 7); /* every kind of bf16, NaNs aside */
        for (uint64_t i = 0; i < count; i++)
            if ((in[i] & 0x7f80u) == 0x7f80u)
                in[i] &= 0xbfffu; /* no inf/NaN */
        CALL("bf16 avg", px_allreduce(ctx->comm, in, out, count, PX_BFLOAT16, PX_AVG, -1));
        if (memcmp(in, out, count * 2))
            FAIL("world 1 bf16 AVG is not the input bit for bit");
        cases++;
        free(in);
        free(out);
    }
    if (n == 3) { /* int32 SUM, rank r contributes r+1, counts 1, 2, 10: every element 6 */
        static const uint64_t counts[] = {1, 2, 10};
        for (int c = 0; c < 3; c++) {
            int32_t buf[10];
            for (int i = 0; i < 10; i++)
                buf[i] = r + 1;
            CALL("int32 sum", px_allreduce(ctx->comm, buf, buf, counts[c], PX_INT32, PX_SUM, -1));
            for (uint64_t i = 0; i < counts[c]; i++)
                if (buf[i] != 6)
                    FAIL("int32 SUM count %llu: [%llu] = %d, want 6",
                         (unsigned long long)counts[c], (unsigned long long)i, buf[i]);
            cases++;
        }
    }
    if (n == 3 || n == 4) { /* fp32 AVG of r+1: exactly (n+1)/2, every algorithm */
        static const uint64_t counts[] = {1, 7, 5000, 300001};
        for (int a = 0; a < 4; a++)
            for (int c = 0; c < 4; c++) {
                px_coll_opts_t o = {a == 0 ? PX_ALGO_AUTO : a == 1 ? PX_ALGO_RING
                                    : a == 2 ? PX_ALGO_RABENSEIFNER : PX_ALGO_RECURSIVE_DOUBLING,
                                    0};
                float *buf = malloc(counts[c] * sizeof(float));
                float want = (float)(n + 1) / 2.0f;
                for (uint64_t i = 0; i < counts[c]; i++)
                    buf[i] = (float)(r + 1);
                CALL("fp32 avg", px_allreduce_opts(ctx->comm, buf, buf, counts[c], PX_FLOAT32,
                                                   PX_AVG, &o));
                for (uint64_t i = 0; i < counts[c]; i++)
                    if (buf[i] != want)
                        FAIL("fp32 AVG (%s) [%llu] = %.9g, want exactly %.9g",
                             px_algo_name(o.algo), (unsigned long long)i, buf[i], want);
                free(buf);
                cases++;
            }
    }
    if (n == 4) { /* count 0 all-gather, all-reduce, reduce, then a normal all-reduce */
        float buf[8];
        CALL("allgather 0", px_allgather(ctx->comm, buf, buf, 0, PX_FLOAT32, NULL));
        CALL("allreduce 0", px_allreduce(ctx->comm, buf, buf, 0, PX_FLOAT32, PX_SUM, -1));
        CALL("reduce 0", px_reduce(ctx->comm, buf, buf, 0, PX_FLOAT32, PX_SUM, 0, NULL));
        for (int i = 0; i < 8; i++)
            buf[i] = (float)(r + i);
        CALL("allreduce 8", px_allreduce(ctx->comm, buf, buf, 8, PX_FLOAT32, PX_SUM, -1));
        for (int i = 0; i < 8; i++)
            if (buf[i] != (float)(6 + 4 * i))
                FAIL("all-reduce after count 0: [%d] = %g", i, buf[i]);
        cases++;
    }
    return 0;
}

/* Several nonblocking collectives outstanding at once on one communicator:
 * in-place reduce-scatter and all-gather (the ZeRO pattern), all-reduces of
 * several sizes and a broadcast; polled with px_test, then waited in reverse
 * order. */
static int check_concurrent(px_launch_rank_t *ctx)
{
    const int n = ctx->world, r = ctx->rank;
    enum { K = 6 };
    uint64_t cnt[K] = {3, 1000, 40001, 262147, 17, 5};
    float *b[K];
    px_request_t *req[K];
    int done[K] = {0};
    uint64_t shard = 4099;
    float *zbuf = malloc(shard * (uint64_t)n * sizeof(float));
    float *gbufp = malloc(shard * (uint64_t)n * sizeof(float));
    px_request_t *rs, *ag;

    for (int k = 0; k < K; k++) {
        b[k] = malloc(cnt[k] * sizeof(float));
        for (uint64_t i = 0; i < cnt[k]; i++)
            b[k][i] = (float)(r + k + (int)(i % 5));
    }
    for (uint64_t i = 0; i < shard * (uint64_t)n; i++) {
        zbuf[i] = (float)(r + 1 + (int)(i % 3));
        gbufp[i] = -1.0f;
    }
    for (uint64_t i = 0; i < shard; i++)
        gbufp[(uint64_t)r * shard + i] = (float)(r * 1000 + (int)(i % 100));
    CALL("rs start", px_reduce_scatter_start(ctx->comm, zbuf, zbuf + (uint64_t)r * shard, shard,
                                             PX_FLOAT32, PX_AVG, NULL, &rs));
    for (int k = 0; k < K; k++) {
        if (k == 4)
            CALL("bcast start", px_bcast_start(ctx->comm, b[k], cnt[k], PX_FLOAT32, 1 % n, NULL,
                                               &req[k]));
        else
            CALL("allreduce start", px_allreduce_start(ctx->comm, b[k], b[k], cnt[k], PX_FLOAT32,
                                                       PX_SUM, NULL, &req[k]));
    }
    CALL("ag start", px_allgather_start(ctx->comm, gbufp + (uint64_t)r * shard, gbufp, shard,
                                        PX_FLOAT32, NULL, &ag));
    /* poll a while with px_test, as an overlapping engine would */
    for (int spins = 0; spins < 50; spins++) {
        int d;
        if (!done[0]) {
            CALL("test", px_test(req[0], &d));
            done[0] = d;
        }
        usleep(200);
    }
    CALL("wait ag", px_wait(ag, -1));
    for (int k = K - 1; k >= 0; k--)
        if (!done[k])
            CALL("wait", px_wait(req[k], -1));
    CALL("wait rs", px_wait(rs, -1));
    for (int k = 0; k < K; k++)
        for (uint64_t i = 0; i < cnt[k]; i++) {
            float want = k == 4 ? (float)(1 % n + k + (int)(i % 5))
                                : (float)(n * (n - 1) / 2 + n * (k + (int)(i % 5)));
            if (b[k][i] != want)
                FAIL("concurrent #%d [%llu] = %g, want %g", k, (unsigned long long)i, b[k][i],
                     want);
        }
    for (uint64_t i = 0; i < shard; i++) {
        uint64_t g = (uint64_t)r * shard + i;
        float want = (float)(n * (n + 1) / 2 + n * (int)(g % 3)) / (float)n;
        if (zbuf[g] != want)
            FAIL("concurrent reduce-scatter [%llu] = %g, want %g", (unsigned long long)g, zbuf[g],
                 want);
    }
    for (int p = 0; p < n; p++)
        for (uint64_t i = 0; i < shard; i++)
            if (gbufp[(uint64_t)p * shard + i] != (float)(p * 1000 + (int)(i % 100)))
                FAIL("concurrent all-gather block %d [%llu]", p, (unsigned long long)i);
    for (int k = 0; k < K; k++)
        free(b[k]);
    free(zbuf);
    free(gbufp);
    cases++;
    return 0;
}

/* split: color r % 2, key -r (reverse order); collectives on the
 * sub-communicator and the world at the same time. */
static int check_split(px_launch_rank_t *ctx)
{
    const int n = ctx->world, r = ctx->rank;
    px_comm_t *sub = NULL, *none = (px_comm_t *)1;
    int color = r % 2, members = 0, sum = 0, myidx = 0;
    int32_t v[3], w[3];
    px_request_t *rq_sub, *rq_world;

    CALL("split", px_comm_split(ctx->comm, color, -r, &sub));
    for (int p = n - 1; p >= 0; p--) {
        if (p % 2 != color)
            continue;
        if (p == r)
            myidx = members;
        members++;
        sum += p;
    }
    if (px_comm_size(sub) != members || px_comm_rank(sub) != myidx)
        FAIL("split: rank %d of %d, want %d of %d", px_comm_rank(sub), px_comm_size(sub), myidx,
             members);
    for (int i = 0; i < members; i++) {
        int wr = px_comm_world_rank(sub, i);
        if (wr % 2 != color || (i && wr >= px_comm_world_rank(sub, i - 1)))
            FAIL("split: member %d is world rank %d", i, wr);
    }
    for (int i = 0; i < 3; i++) {
        v[i] = r;
        w[i] = 1;
    }
    /* both outstanding at once: tags must keep them apart */
    CALL("sub start", px_allreduce_start(sub, v, v, 3, PX_INT32, PX_SUM, NULL, &rq_sub));
    CALL("world start", px_allreduce_start(ctx->comm, w, w, 3, PX_INT32, PX_SUM, NULL, &rq_world));
    CALL("world wait", px_wait(rq_world, -1));
    CALL("sub wait", px_wait(rq_sub, -1));
    for (int i = 0; i < 3; i++)
        if (v[i] != sum || w[i] != n)
            FAIL("split all-reduce: sub %d (want %d), world %d (want %d)", v[i], sum, w[i], n);
    /* a split of the sub-communicator, and an undefined color */
    {
        px_comm_t *subsub = NULL;
        int32_t x = 1;
        CALL("split 2", px_comm_split(sub, px_comm_rank(sub) == 0 ? PX_COLOR_UNDEFINED : 0, 0,
                                      &subsub));
        if (px_comm_rank(sub) == 0 && subsub)
            FAIL("undefined color gave a communicator");
        if (subsub) {
            CALL("subsub", px_allreduce(subsub, &x, &x, 1, PX_INT32, PX_SUM, -1));
            if (x != members - 1)
                FAIL("sub-sub all-reduce %d, want %d", x, members - 1);
            px_comm_destroy(subsub);
        }
    }
    CALL("split none", px_comm_split(ctx->comm, PX_COLOR_UNDEFINED, 0, &none));
    if (none)
        FAIL("undefined color gave a communicator");
    px_comm_destroy(sub);
    CALL("barrier after split", px_barrier(ctx->comm, -1));
    cases++;
    return 0;
}

/* px_wait with a bound shorter than the request's deadline returns
 * PX_ERR_TIMEOUT and leaves the request valid; px_request_cancel frees a
 * pending receive; the communicator works on. */
static int check_wait_cancel(px_launch_rank_t *ctx)
{
    const int n = ctx->world, r = ctx->rank;
    px_request_t *b, *rq;
    char byte = 0;
    px_status_t status;

    if (n > 1) {
        if (r == n - 1)
            usleep(300 * 1000);
        CALL("barrier start", px_barrier_start(ctx->comm, NULL, &b));
        if (r != n - 1) {
            status = px_wait(b, 20);
            if (status != PX_ERR_TIMEOUT)
                FAIL("short wait gave %s, want timeout", px_status_str(status));
        }
        CALL("barrier wait", px_wait(b, -1));
    }
    CALL("recv start", px_recv_start(ctx->comm, (r + 1) % n, 4242, &byte, 1, NULL, &rq));
    px_request_cancel(rq);
    CALL("barrier after cancel", px_barrier(ctx->comm, -1));
    cases++;
    return 0;
}

static void *abort_thread(void *arg)
{
    struct timespec ts = {0, 100 * 1000 * 1000};
    nanosleep(&ts, NULL);
    px_comm_abort(arg, "test abort");
    return NULL;
}

/* px_comm_abort from another thread makes pending requests return at once:
 * every rank but the last starts an all-reduce the last never joins. */
static int check_abort(px_launch_rank_t *ctx)
{
    const int n = ctx->world, r = ctx->rank;
    float buf[4] = {0};
    px_request_t *a, *b;
    pthread_t th;
    int64_t t0;
    px_status_t s1, s2;

    atomic_int *finished = ctx->arg; /* shared: ranks done with their abort check */

    if (n == 1 || r == n - 1) {
        /* outlive the others' abort: its exit would be a peer failure */
        for (int i = 0; i < 1000 && atomic_load(finished) < n - 1; i++)
            usleep(10 * 1000);
        return 0;
    }
    CALL("abort start", px_allreduce_start(ctx->comm, buf, buf, 4, PX_FLOAT32, PX_SUM, NULL, &a));
    CALL("abort start 2", px_barrier_start(ctx->comm, NULL, &b));
    t0 = px_time_mono_ms();
    pthread_create(&th, NULL, abort_thread, ctx->comm);
    s1 = px_wait(a, -1);
    s2 = px_wait(b, -1);
    pthread_join(th, NULL);
    if (s1 != PX_ERR_ABORTED || s2 != PX_ERR_ABORTED)
        FAIL("abort: requests returned %s / %s", px_status_str(s1), px_status_str(s2));
    if (px_time_mono_ms() - t0 > 2000)
        FAIL("abort took %lld ms", (long long)(px_time_mono_ms() - t0));
    if (px_allreduce(ctx->comm, buf, buf, 4, PX_FLOAT32, PX_SUM, -1) != PX_ERR_ABORTED)
        FAIL("a call after abort did not fail");
    cases++;
    /* stay until every aborting rank is through: an exit seen first would
     * be (rightly) a peer failure for a slower rank */
    atomic_fetch_add(finished, 1);
    for (int i = 0; i < 1000 && atomic_load(finished) < n - 1; i++)
        usleep(10 * 1000);
    return 0;
}

static int rank_matrix(px_launch_rank_t *ctx)
{
    const int n = ctx->world;
    uint64_t counts[4] = {0, 1, (uint64_t)(n > 1 ? n - 1 : 2), 40001};
    int64_t t0 = px_time_mono_ms();

    for (size_t d = 0; d < sizeof(all_dtypes) / sizeof(*all_dtypes); d++) {
        for (int c = 0; c < 4; c++) {
            for (size_t o = 0; o < sizeof(all_ops) / sizeof(*all_ops); o++)
                if (check_reductions(ctx, all_dtypes[d], all_ops[o], counts[c], PX_ALGO_AUTO))
                    return 1;
            if (check_movers(ctx, all_dtypes[d], counts[c]))
                return 1;
            if (check_alltoallv(ctx, all_dtypes[d], counts[c] ? counts[c] : 0))
                return 1;
        }
        /* every all-reduce algorithm, every op, on counts below the world
         * size (empty pieces) and mid-sized ones */
        for (size_t o = 0; o < sizeof(all_ops) / sizeof(*all_ops); o++)
            for (int a = 0; a < 3; a++)
                for (int c = 0; c < 3; c++)
                    if (check_reductions(ctx, all_dtypes[d], all_ops[o],
                                         c == 0 ? 1 : c == 1 ? (uint64_t)n + 1 : 1237,
                                         a == 0 ? PX_ALGO_RING : a == 1 ? PX_ALGO_RABENSEIFNER
                                                               : PX_ALGO_RECURSIVE_DOUBLING))
                        return 1;
    }
    if (check_named(ctx) || check_concurrent(ctx) || check_split(ctx) || check_wait_cancel(ctx))
        return 1;
    CALL("barrier", px_barrier(ctx->comm, -1));
    if (ctx->rank == 0)
        printf("matrix: %d ranks, %d cases exact, guards intact (%lld ms)\n", n, cases,
               (long long)(px_time_mono_ms() - t0));
    return check_abort(ctx); /* last: the communicator is unusable after it */
}

/* rank 0 passes count 256000, the others 512000 */
static int rank_mismatch4(px_launch_rank_t *ctx)
{
    const uint64_t big = 512000, mine = ctx->rank == 0 ? 256000 : big;
    float *buf = (float *)gbuf(big * sizeof(float));
    px_status_t status;
    int64_t t0 = px_time_mono_ms();

    for (uint64_t i = 0; i < mine; i++)
        buf[i] = 1.0f;
    status = px_allreduce(ctx->comm, buf, buf, mine, PX_FLOAT32, PX_SUM, 10000);
    if (status != PX_ERR_MISMATCH)
        FAIL("count mismatch gave %s, want mismatch", px_status_str(status));
    if (!strstr(px_comm_last_error(ctx->comm), "256000"))
        FAIL("mismatch error does not name the count: %s", px_comm_last_error(ctx->comm));
    /* the data phase runs while the headers travel, so the first `mine`
     * elements may hold partial sums; nothing past them may change (rank
     * 0's guard bytes start right after its own 256000 elements) */
    if (!guards_ok((char *)buf, mine * sizeof(float)) ||
        !guards_ok((char *)buf, big * sizeof(float)))
        FAIL("wrote outside the buffer");
    if (px_time_mono_ms() - t0 > 5000)
        FAIL("mismatch took %lld ms", (long long)(px_time_mono_ms() - t0));
    /* the communicator is still usable */
    status = px_allreduce(ctx->comm, buf, buf, mine == big ? 1000 : 1000, PX_FLOAT32, PX_SUM, -1);
    if (status != PX_OK || buf[999] != (float)ctx->world)
        FAIL("all-reduce after the mismatch: %s", px_status_str(status));
    if (ctx->rank == 0)
        printf("mismatch4: every rank got: %s\n", px_comm_last_error(ctx->comm));
    /* all-to-all-v: rank 0 sends 2 elements to rank 1, which expects 3; the
     * other ranks agree with everyone, and still get the mismatch */
    {
        uint64_t sc[4], sd[4], rc[4], rd[4];
        float in[16] = {0}, out[16];
        for (int p = 0; p < 4; p++) {
            sc[p] = rc[p] = 2;
            sd[p] = rd[p] = 2 * (uint64_t)p;
        }
        if (ctx->rank == 1)
            rc[0] = 3;
        status = px_alltoallv(ctx->comm, in, sc, sd, out, rc, rd, PX_FLOAT32, NULL);
        if (status != PX_ERR_MISMATCH)
            FAIL("all-to-all-v count mismatch gave %s, want mismatch", px_status_str(status));
        status = px_alltoallv(ctx->comm, in, sc, sd, out, sc, sd, PX_FLOAT32, NULL);
        if (status != PX_OK)
            FAIL("all-to-all-v after the mismatch: %s", px_status_str(status));
    }
    gfree((char *)buf);
    return 0;
}

/* A rank that finished the last collective and exited must not fail the
 * others' wait when everything they need from it has arrived: rank 0 joins
 * a barrier late, completes it and exits; the others, which started the
 * barrier before, wait only after rank 0 is gone (its pidfd readable) and
 * must still succeed. */
static int rank_exitrace(px_launch_rank_t *ctx)
{
    px_request_t *b;
    px_status_t status;

    if (ctx->rank == 0) {
        usleep(100 * 1000);
        CALL("barrier", px_barrier(ctx->comm, -1));
        _exit(0); /* at once, without closing anything */
    }
    CALL("barrier start", px_barrier_start(ctx->comm, NULL, &b));
    usleep(600 * 1000); /* rank 0 has exited by now */
    status = px_wait(b, -1);
    if (status != PX_OK)
        FAIL("barrier completed by a rank that then exited: %s (%s)", px_status_str(status),
             px_comm_last_error(ctx->comm));
    if (ctx->rank == 1)
        printf("exitrace: the barrier completed on every rank after rank 0 exited\n");
    return 0;
}

static int count_fds(void)
{
    DIR *d = opendir("/proc/self/fd");
    struct dirent *e;
    int n = 0;
    if (!d)
        return -1;
    while ((e = readdir(d)))
        n++;
    closedir(d);
    return n;
}

static long rss_kb(void)
{
    FILE *f = fopen("/proc/self/statm", "r");
    long pages = 0, rss = 0;
    if (!f)
        return -1;
    if (fscanf(f, "%ld %ld", &pages, &rss) != 2)
        rss = -1;
    fclose(f);
    return rss * (sysconf(_SC_PAGESIZE) / 1024);
}

/* A second world communicator from an address table gathered over the
 * first (a re-rendezvous): endpoints, wire-up, pidfds. The first stays idle
 * meanwhile (both use tag comm id 0). */
static px_status_t world_again(px_launch_rank_t *ctx, px_comm_t **comm_p)
{
    const int n = ctx->world;
    const void *addr;
    size_t len;
    uint64_t mylen, *lens = NULL, maxlen = 0;
    char *all = NULL, *mine = NULL;
    px_addr_table_t table;
    px_status_t status;

    PX_CHECK(px_transport_address(ctx->tr, &addr, &len));
    mylen = len;
    lens = calloc((size_t)n, sizeof(*lens));
    if (!lens)
        return PX_ERR_NO_MEMORY;
    status = px_allgather(ctx->comm, &mylen, lens, 1, PX_INT64, NULL);
    for (int r = 0; status == PX_OK && r < n; r++)
        maxlen = lens[r] > maxlen ? lens[r] : maxlen;
    if (status == PX_OK) {
        all = calloc((size_t)n, maxlen);
        mine = calloc(1, maxlen);
        if (!all || !mine)
            status = PX_ERR_NO_MEMORY;
    }
    if (status == PX_OK) {
        memcpy(mine, addr, len);
        status = px_allgather(ctx->comm, mine, all, maxlen, PX_UINT8, NULL);
    }
    if (status == PX_OK)
        status = px_addr_table_init(&table, n);
    if (status == PX_OK) {
        for (int r = 0; r < n; r++) {
            table.addrs[r] = malloc(lens[r]);
            table.nodes[r] = strdup("node0");
            if (!table.addrs[r] || !table.nodes[r])
                abort();
            memcpy(table.addrs[r], all + (size_t)r * maxlen, lens[r]);
            table.addr_lens[r] = lens[r];
        }
        status = px_comm_create_world(ctx->tr, &table, ctx->rank, -1, comm_p);
        px_addr_table_free(&table);
    }
    free(lens);
    free(all);
    free(mine);
    return status;
}

/* The world wire-up admits only ranks of this job: a second world whose
 * ranks hold the same PX_JOB_SECRET connects; one where rank 1 holds
 * another is refused on both sides (PX_ERR_INVALID_ARGUMENT), and the first
 * world still works afterwards. */
static int rank_secret(px_launch_rank_t *ctx)
{
    px_comm_t *again = NULL;
    px_status_t status;
    float x = 1.0f;

    setenv("PX_JOB_SECRET", "this job", 1);
    CALL("world with one secret", world_again(ctx, &again));
    px_comm_destroy(again);
    again = NULL;
    CALL("barrier", px_barrier(ctx->comm, -1));
    setenv("PX_JOB_SECRET", ctx->rank == 1 ? "another job" : "this job", 1);
    status = world_again(ctx, &again);
    if (status != PX_ERR_INVALID_ARGUMENT) {
        px_comm_destroy(again);
        FAIL("world with rank 1 of another job: %s, want invalid argument (refused)",
             px_status_str(status));
    }
    setenv("PX_JOB_SECRET", "this job", 1);
    CALL("all-reduce after the refusal", px_allreduce(ctx->comm, &x, &x, 1, PX_FLOAT32, PX_SUM,
                                                       -1));
    if (x != (float)ctx->world)
        FAIL("all-reduce after the refusal: %g", x);
    return 0;
}

static int rank_leak(px_launch_rank_t *ctx)
{
    int fds0 = 0, comms0 = 0;
    long rss0 = 0;
    const int warm = 20, iters = 300;
    long rss_grew = 0;

    for (int it = 0; it < warm + iters; it++) {
        px_comm_t *sub;
        float x[1000];
        if (it == warm) {
            fds0 = count_fds();
            rss0 = rss_kb();
            comms0 = ctx->tr->n_comms;
        }
        for (int i = 0; i < 1000; i++)
            x[i] = 1.0f;
        CALL("split", px_comm_split(ctx->comm, ctx->rank % 2, ctx->rank, &sub));
        CALL("sub allreduce", px_allreduce(sub, x, x, 1000, PX_FLOAT32, PX_SUM, -1));
        if (x[999] != (float)px_comm_size(sub))
            FAIL("sub all-reduce %g", x[999]);
        /* staged fp16 reduce (it once leaked its fp32 staging buffer) */
        {
            uint16_t h[2000];
            float one = 1.0f;
            for (int i = 0; i < 2000; i++)
                px_f32_to_f16(&h[i], &one, 1);
            CALL("sub reduce", px_reduce(sub, h, h, 2000, PX_FLOAT16, PX_SUM, 0, NULL));
        }
        px_comm_destroy(sub);
    }
#ifndef __SANITIZE_ADDRESS__ /* ASan's quarantine holds freed memory; LSan checks leaks */
    if ((rss_grew = rss_kb() - rss0) > 1024)
        FAIL("RSS grew %ld kB over %d create/destroy cycles", rss_kb() - rss0, iters);
#else
    (void)rss0;
#endif
    if (count_fds() != fds0 || ctx->tr->n_comms != comms0)
        FAIL("split cycles: fds %d -> %d, communicators %d -> %d", fds0, count_fds(), comms0,
             ctx->tr->n_comms);
    /* world communicators: endpoints, wire-up and pidfds, created and
     * destroyed (after a warm-up one); their memory is LSan's to check (the
     * sanitizer build): UCX's pools make RSS settle only after ~50 cycles */
    for (int it = 0; it < (getenv("PX_TEST_RSS_TRACE") ? 81 : 21); it++) {
        px_comm_t *w2;
        float y[100];
        if (it == 1) {
            fds0 = count_fds();
            comms0 = ctx->tr->n_comms;
        }
        if (getenv("PX_TEST_RSS_TRACE") && ctx->rank == 0)
            printf("world cycle %d: RSS %ld kB\n", it, rss_kb());
        for (int i = 0; i < 100; i++)
            y[i] = 2.0f;
        CALL("world again", world_again(ctx, &w2));
        CALL("allreduce on it", px_allreduce(w2, y, y, 100, PX_FLOAT32, PX_SUM, -1));
        if (y[99] != 2.0f * (float)ctx->world)
            FAIL("second world all-reduce %g", y[99]);
        CALL("barrier on it", px_barrier(w2, -1));
        px_comm_destroy(w2);
        CALL("barrier", px_barrier(ctx->comm, -1));
    }
    if (count_fds() != fds0 || ctx->tr->n_comms != comms0)
        FAIL("fds %d -> %d, communicators %d -> %d", fds0, count_fds(), comms0, ctx->tr->n_comms);

    if (ctx->rank == 0)
        printf("leak: %d split/destroy cycles (RSS +%ld kB) and 20 world create/destroy "
               "cycles: fds %d, communicators %d\n", iters, rss_grew, count_fds(),
               ctx->tr->n_comms);
    return px_barrier(ctx->comm, -1) == PX_OK ? 0 : 1;
}

int main(int argc, char **argv)
{
    const char *what = argc > 1 ? argv[1] : "matrix";
    int n = argc > 2 ? atoi(argv[2]) : 4;
    px_launch_opts_t opts = {.use_watch = 1, .limit_s = 280};
    int failed;

    setvbuf(stdout, NULL, _IOLBF, 0);
    if (!strcmp(what, "matrix")) {
        atomic_int *finished = px_launch_shared(sizeof(atomic_int));
        if (!finished)
            return 1;
        atomic_store(finished, 0);
        failed = px_launch(n, rank_matrix, finished, &opts, NULL);
    }
    else if (!strcmp(what, "mismatch4"))
        failed = px_launch(4, rank_mismatch4, NULL, &opts, NULL);
    else if (!strcmp(what, "exitrace"))
        failed = px_launch(n, rank_exitrace, NULL, &opts, NULL);
    else if (!strcmp(what, "leak"))
        failed = px_launch(n, rank_leak, NULL, &opts, NULL);
    else if (!strcmp(what, "secret"))
        failed = px_launch(n, rank_secret, NULL, &opts, NULL);
    else {
        fprintf(stderr, "usage: %s matrix|leak N | mismatch4\n", argv[0]);
        return 2;
    }
    if (failed)
        fprintf(stderr, "FAIL: %d rank(s) failed\n", failed);
    return failed ? 1 : 0;
}
