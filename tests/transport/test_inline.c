/* test_inline.c: the small all-reduce with its header in its data messages
 * (recursive doubling, px__req_create_inline), on N local ranks.
 *
 *   test_inline mismatch N   one rank disagrees with the others, in every way
 *                            a call can: count, op, dtype, algorithm hint
 *                            (header exchange against header in data),
 *                            another collective, a count past the small-
 *                            message limit. Each case: every rank returns
 *                            PX_ERR_MISMATCH within 3 s (no timeout, no
 *                            hang), the error names both values where the
 *                            case has two, nothing is written past the
 *                            buffer, and the next all-reduce is exact.
 *                            The odd rank moves around the algorithm's graph
 *                            (N 2: one exchange; 3 and 5: a folded-out rank
 *                            and its partner; 4: the butterfly).
 *   test_inline exact N      all-reduces of 1..8192 integer-valued floats
 *                            (SUM, MAX, int32 SUM, fp16 SUM exact; AVG within
 *                            1e-6): bitwise-equal on every rank.
 *
 * Values: rank r contributes r + 1 + i % 7, so sums are exact in fp32. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "px_launch.h"
#include "px_time.h"
#include "px_transport_int.h" /* PX__INLINE_MAX_BYTES */

#define FAIL(...) do { fprintf(stderr, "FAIL rank %d: ", ctx->rank); \
    fprintf(stderr, __VA_ARGS__); fprintf(stderr, "\n"); return 1; } while (0)

#define GUARD 64
#define BIG (PX__INLINE_MAX_BYTES / 4 + 1000) /* floats: past the small-message limit */

static float contrib(int r, uint64_t i)
{
    return (float)(r + 1 + (int)(i % 7));
}

/* A fresh all-reduce of 100 floats after a mismatch: exact. */
static int usable_after(px_launch_rank_t *ctx, const char *what)
{
    float buf[100];
    int n = ctx->world;
    px_status_t status;

    for (int i = 0; i < 100; i++)
        buf[i] = contrib(ctx->rank, (uint64_t)i);
    status = px_allreduce(ctx->comm, buf, buf, 100, PX_FLOAT32, PX_SUM, 10000);
    if (status != PX_OK)
        FAIL("%s: all-reduce after the mismatch: %s (%s)", what, px_status_str(status),
             px_comm_last_error(ctx->comm));
    for (int i = 0; i < 100; i++)
        if (buf[i] != (float)(n * (n + 1) / 2 + n * (i % 7)))
            FAIL("%s: all-reduce after the mismatch: [%d] = %g", what, i, buf[i]);
    return 0;
}

/* Each case: which rank is odd, and what it does differently. */
enum { C_COUNT, C_OP, C_DTYPE, C_HINT_RING, C_BCAST, C_BIG, C_NCASES };
static const char *const case_names[] = {"count", "op", "dtype", "ring hint", "broadcast",
                                         "count past the limit"};

/* Runs case `c` with rank `odd` as the odd one; checks the result. */
static int run_case(px_launch_rank_t *ctx, int c, int odd)
{
    const int me = ctx->rank, is_odd = me == odd;
    const uint64_t count = 32;
    char *mem = malloc((BIG + GUARD) * sizeof(float));
    float *buf = (float *)mem;
    uint64_t mine = count;
    px_coll_opts_t opts = {PX_ALGO_AUTO, 10000};
    px_request_t *req;
    px_status_t status;
    int64_t t0;
    const char *err;
    char what[96];

    snprintf(what, sizeof(what), "%s (rank %d odd)", case_names[c], odd);
    if (!mem)
        FAIL("out of memory");
    memset(mem, 0x5a, (BIG + GUARD) * sizeof(float));
    if (c == C_COUNT && is_odd)
        mine = count + 1;
    if (c == C_BIG && is_odd)
        mine = BIG;
    for (uint64_t i = 0; i < mine; i++)
        buf[i] = contrib(me, i);
    if (c == C_HINT_RING && is_odd)
        opts.algo = PX_ALGO_RING;
    t0 = px_time_mono_ms();
    if (c == C_BCAST && is_odd)
        status = px_bcast(ctx->comm, buf, count, PX_FLOAT32, 0, &opts);
    else {
        px_redop_t op = c == C_OP && is_odd ? PX_MAX : PX_SUM;
        px_dtype_t dt = c == C_DTYPE && is_odd ? PX_INT32 : PX_FLOAT32;
        status = px_allreduce_start(ctx->comm, buf, buf, mine, dt, op, &opts, &req);
        if (status == PX_OK)
            status = px_wait(req, -1);
    }
    err = px_comm_last_error(ctx->comm);
    if (status != PX_ERR_MISMATCH)
        FAIL("%s: got %s (%s), want mismatch", what, px_status_str(status), err);
    if (px_time_mono_ms() - t0 > 3000)
        FAIL("%s: the mismatch took %lld ms", what, (long long)(px_time_mono_ms() - t0));
    /* both values named where there are two */
    if (c == C_COUNT && !(strstr(err, "count 32") && strstr(err, "count 33")))
        FAIL("%s: the error does not name both counts: %s", what, err);
    if (c == C_OP && !(strstr(err, "op sum") && strstr(err, "op max")))
        FAIL("%s: the error does not name both ops: %s", what, err);
    if (c == C_DTYPE && !(strstr(err, "dtype fp32") && strstr(err, "dtype int32")))
        FAIL("%s: the error does not name both dtypes: %s", what, err);
    if (c == C_HINT_RING && !strstr(err, "header exchange"))
        FAIL("%s: the error does not say how the odd rank runs: %s", what, err);
    if (c == C_BCAST && !strstr(err, "broadcast") && !strstr(err, "header"))
        FAIL("%s: the error does not name the other collective: %s", what, err);
    for (size_t b = mine * sizeof(float); b < (mine + GUARD) * sizeof(float); b++)
        if ((unsigned char)mem[b] != 0x5a)
            FAIL("%s: wrote past the buffer (byte %zu)", what, b);
    if (me == 0)
        printf("  %-40s rank 0: %s\n", what, err);
    free(mem);
    return usable_after(ctx, what);
}

static int rank_mismatch(px_launch_rank_t *ctx)
{
    const int n = ctx->world;
    int odds[3] = {0, n - 1, n / 2};

    for (int c = 0; c < C_NCASES; c++)
        for (int k = 0; k < 3; k++) {
            if (k > 0 && odds[k] == odds[k - 1])
                continue;
            if (run_case(ctx, c, odds[k]))
                return 1;
        }
    if (ctx->rank == 0)
        printf("mismatch: %d ranks, every case failed on every rank with a mismatch\n", n);
    return 0;
}

/* --- exact --- */

static int rank_exact(px_launch_rank_t *ctx)
{
    const int n = ctx->world, me = ctx->rank;
    int cases = 0;

    for (uint64_t count = 1; count <= 8192; count = count * 3 + 1) {
        for (int v = 0; v < 5; v++) {
            float *f = malloc(count * sizeof(float)), *all = malloc(count * sizeof(float) * n);
            int32_t *ib = (int32_t *)f;
            uint16_t *hb = (uint16_t *)f;
            px_status_t status;
            if (!f || !all)
                FAIL("out of memory");
            for (uint64_t i = 0; i < count; i++) {
                if (v == 3)
                    ib[i] = (int32_t)contrib(me, i);
                else
                    f[i] = contrib(me, i);
            }
            if (v == 4) { /* fp16: 1..14 and their sums are exact */
                for (uint64_t i = 0; i < count; i++) {
                    float x = contrib(me, i);
                    uint32_t bits;
                    memcpy(&bits, &x, 4);
                    /* exact small integers: fp16 = sign|exp-112|mantissa top 10 */
                    hb[i] = (uint16_t)(((bits >> 16) & 0x8000) |
                                       ((((bits >> 23) & 0xff) - 112) << 10) |
                                       ((bits >> 13) & 0x3ff));
                }
            }
            status = px_allreduce(ctx->comm, f, f, count,
                                  v == 3 ? PX_INT32 : v == 4 ? PX_FLOAT16 : PX_FLOAT32,
                                  v == 1 ? PX_AVG : v == 2 ? PX_MAX : PX_SUM, -1);
            if (status != PX_OK)
                FAIL("count %llu variant %d: %s (%s)", (unsigned long long)count, v,
                     px_status_str(status), px_comm_last_error(ctx->comm));
            for (uint64_t i = 0; i < count; i++) {
                double sum = n * (n + 1) / 2.0 + n * (double)(i % 7);
                double want = v == 1 ? (double)(float)(sum / n)
                            : v == 2 ? (double)(n + (int)(i % 7)) : sum;
                double got;
                if (v == 3)
                    got = ib[i];
                else if (v == 4) {
                    uint32_t bits = ((uint32_t)(hb[i] & 0x8000) << 16) |
                                    ((((uint32_t)(hb[i] >> 10) & 0x1f) + 112) << 23) |
                                    ((uint32_t)(hb[i] & 0x3ff) << 13);
                    float x;
                    memcpy(&x, &bits, 4);
                    got = x;
                } else
                    got = f[i];
                if (v == 1 && (got - want > 1e-6 * want || want - got > 1e-6 * want))
                    FAIL("avg count %llu [%llu] = %g, want %g", (unsigned long long)count,
                         (unsigned long long)i, got, want);
                if (v != 1 && got != want)
                    FAIL("count %llu variant %d [%llu] = %g, want %g", (unsigned long long)count,
                         v, (unsigned long long)i, got, want);
            }
            /* bitwise-equal on every rank */
            status = px_allgather(ctx->comm, f, all, count, PX_FLOAT32, NULL);
            if (status != PX_OK)
                FAIL("allgather: %s", px_status_str(status));
            for (int r = 1; r < n; r++)
                if (memcmp(all, all + (size_t)r * count, count * (v == 4 ? 2 : 4)))
                    FAIL("count %llu variant %d: rank %d's result differs from rank 0's",
                         (unsigned long long)count, v, r);
            free(f);
            free(all);
            cases++;
        }
    }
    if (me == 0)
        printf("exact: %d ranks, %d cases exact and bitwise-equal on every rank\n", n, cases);
    return 0;
}

int main(int argc, char **argv)
{
    px_launch_opts_t opts = {.use_watch = 1, .limit_s = 100};
    int n, failed;

    if (argc < 3 || (n = atoi(argv[2])) < 1) {
        fprintf(stderr, "usage: %s mismatch|exact N\n", argv[0]);
        return 2;
    }
    if (!strcmp(argv[1], "mismatch") && n >= 2)
        failed = px_launch(n, rank_mismatch, NULL, &opts, NULL);
    else if (!strcmp(argv[1], "exact"))
        failed = px_launch(n, rank_exact, NULL, &opts, NULL);
    else {
        fprintf(stderr, "usage: %s mismatch|exact N (mismatch: N >= 2)\n", argv[0]);
        return 2;
    }
    return failed ? 1 : 0;
}
