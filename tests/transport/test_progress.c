/* test_progress.c: progress is per worker, and requests advance while the
 * caller computes (issue 13), on N local ranks (px_launch).
 *
 *   test_progress twocomm 4   two communicators A and B (both splits of the
 *                             world with every rank); ranks 0-1 start a
 *                             nonblocking all-reduce on A then on B, ranks
 *                             2-3 on B then on A; odd iterations wait on
 *                             each request in start order, even ones with
 *                             px_wait_all over both. 1000 iterations, counts
 *                             cycling through small (recursive doubling) and
 *                             large (ring) sizes; every result exact. Before
 *                             per-worker progress a wait on A advanced only
 *                             A's requests, so ranks 2-3 (waiting on B)
 *                             never served A and every rank hung to the
 *                             deadline (PX_COMM_TIMEOUT_MS, short here).
 *   test_progress compute N   a 1 MiB all-reduce is started, then each rank
 *                             "computes" (a busy loop of 2 s wall time,
 *                             calling px_progress every millisecond as the
 *                             engine does between kernels; 2 s because 4
 *                             busy ranks share 2 loaded cores); the request
 *                             must be complete (px_test done on its first
 *                             call) when the compute ends, and exact.
 *
 * Inputs are small integers (exact in int32 and fp32). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "px_coll.h"
#include "px_launch.h"
#include "px_time.h"

#define FAIL(...) do { fprintf(stderr, "FAIL rank %d: ", ctx->rank); \
    fprintf(stderr, __VA_ARGS__); fprintf(stderr, "\n"); goto out; } while (0)
#define CALL(what, x) do { px_status_t st_ = (x); if (st_ != PX_OK) \
    FAIL("%s: %s", what, px_status_str(st_)); } while (0)

static const uint64_t counts[] = {1, 3, 1000, 70000, 17, 300000};

static int rank_twocomm(px_launch_rank_t *ctx)
{
    const int n = ctx->world, r = ctx->rank;
    const int iters = 1000;
    px_comm_t *a = NULL, *b = NULL;
    int32_t *va = NULL, *vb = NULL;
    int rc = 1;

    CALL("split A", px_comm_split(ctx->comm, 0, r, &a));
    CALL("split B", px_comm_split(ctx->comm, 0, r, &b));
    va = malloc(300000 * sizeof(int32_t));
    vb = malloc(300000 * sizeof(int32_t));
    if (!va || !vb)
        FAIL("out of memory");
    for (int it = 0; it < iters; it++) {
        uint64_t ca = counts[it % 6], cb = counts[(it + 3) % 6];
        px_request_t *ra = NULL, *rb = NULL, *both[2];
        for (uint64_t i = 0; i < ca; i++)
            va[i] = (int32_t)((r + 1) * (int)(i % 7 + 1) + it % 5);
        for (uint64_t i = 0; i < cb; i++)
            vb[i] = (int32_t)((r + 2) * (int)(i % 5 + 1) - it % 3);
        if (r < n / 2) {
            CALL("start A", px_allreduce_start(a, va, va, ca, PX_INT32, PX_SUM, NULL, &ra));
            CALL("start B", px_allreduce_start(b, vb, vb, cb, PX_INT32, PX_SUM, NULL, &rb));
        } else {
            CALL("start B", px_allreduce_start(b, vb, vb, cb, PX_INT32, PX_SUM, NULL, &rb));
            CALL("start A", px_allreduce_start(a, va, va, ca, PX_INT32, PX_SUM, NULL, &ra));
        }
        if (it % 2) {
            if (r < n / 2) {
                CALL("wait A", px_wait(ra, -1));
                CALL("wait B", px_wait(rb, -1));
            } else {
                CALL("wait B", px_wait(rb, -1));
                CALL("wait A", px_wait(ra, -1));
            }
        } else {
            both[0] = r < n / 2 ? ra : rb;
            both[1] = r < n / 2 ? rb : ra;
            CALL("wait all", px_wait_all(both, 2, -1));
        }
        for (uint64_t i = 0; i < ca; i++) {
            int32_t want = 0;
            for (int p = 0; p < n; p++)
                want += (int32_t)((p + 1) * (int)(i % 7 + 1) + it % 5);
            if (va[i] != want)
                FAIL("iteration %d: A[%llu] = %d, want %d", it, (unsigned long long)i, va[i],
                     want);
        }
        for (uint64_t i = 0; i < cb; i++) {
            int32_t want = 0;
            for (int p = 0; p < n; p++)
                want += (int32_t)((p + 2) * (int)(i % 5 + 1) - it % 3);
            if (vb[i] != want)
                FAIL("iteration %d: B[%llu] = %d, want %d", it, (unsigned long long)i, vb[i],
                     want);
        }
    }
    if (r == 0)
        printf("twocomm: %d iterations on 2 communicators in opposite orders, all exact\n",
               iters);
    rc = 0;
out:
    free(va);
    free(vb);
    px_comm_destroy(b);
    px_comm_destroy(a);
    return rc;
}

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

static int rank_compute(px_launch_rank_t *ctx)
{
    const int n = ctx->world, r = ctx->rank;
    const uint64_t count = 1 << 18; /* 1 MiB of fp32 */
    float *v = malloc(count * sizeof(float));
    px_request_t *req = NULL;
    volatile double sink = 0;
    int done = 0, rc = 1;

    if (!v)
        FAIL("out of memory");
    for (uint64_t i = 0; i < count; i++)
        v[i] = (float)((r + 1) * (int)(i % 11));
    CALL("barrier", px_barrier(ctx->comm, -1));
    CALL("start", px_allreduce_start(ctx->comm, v, v, count, PX_FLOAT32, PX_SUM, NULL, &req));
    {
        double end = now_s() + 2.0, next = 0;
        while (now_s() < end) {
            for (int i = 0; i < 20000; i++)
                sink += i * 1e-9;
            if (now_s() >= next) {
                px_progress(ctx->comm);
                next = now_s() + 0.001;
            }
        }
    }
    CALL("test", px_test(req, &done));
    if (!done) {
        CALL("wait", px_wait(req, -1));
        FAIL("the all-reduce was not complete after 2 s of compute with px_progress");
    }
    for (uint64_t i = 0; i < count; i++) {
        float want = (float)((n * (n + 1) / 2) * (int)(i % 11));
        if (v[i] != want)
            FAIL("v[%llu] = %g, want %g", (unsigned long long)i, v[i], want);
    }
    if (r == 0)
        printf("compute: 1 MiB all-reduce finished under compute with px_progress\n");
    rc = px_barrier(ctx->comm, -1) == PX_OK ? 0 : 1;
out:
    free(v);
    return rc;
}

int main(int argc, char **argv)
{
    const char *what = argc > 1 ? argv[1] : "twocomm";
    int n = argc > 2 ? atoi(argv[2]) : 4;
    px_launch_opts_t opts = {.use_watch = 1, .limit_s = 280};
    int failed;

    setvbuf(stdout, NULL, _IOLBF, 0);
    if (!strcmp(what, "twocomm"))
        failed = px_launch(n, rank_twocomm, NULL, &opts, NULL);
    else if (!strcmp(what, "compute"))
        failed = px_launch(n, rank_compute, NULL, &opts, NULL);
    else {
        fprintf(stderr, "usage: %s twocomm|compute N\n", argv[0]);
        return 2;
    }
    if (failed)
        fprintf(stderr, "FAIL: %d rank(s) failed\n", failed);
    return failed ? 1 : 0;
}
