/* bench_small_lat.c: latency of small all-reduces, header exchange against
 * header in data (issue 13), in one binary, on N local ranks.
 *
 *   bench-small-lat [-n N] [-i ITERS] [-r ROUNDS] [--json]
 *
 * For each size (4, 8, 16, 32 KiB of fp32, SUM) and each round, every rank
 * runs ITERS all-reduces (after a barrier and 20 untimed ones) with the
 * header exchange (px__inline_disable = 1: what the small all-reduce did
 * before issue 13) and then ITERS with the header in the data, and rank 0
 * times each call. Per mode it prints the minimum, median, 90th percentile
 * and mean of the round with the lowest median: on a shared, loaded
 * machine the mean is mostly the scheduler (a wake-up waits for a core),
 * the minimum and median show the protocol. Modes alternate inside a
 * round so load drifts hit both. Not a timed test: run by hand (suite
 * 'bench' registers a short run). Both modes are UCX paths: the bench
 * sets PX_SHM=0 (unless set) so one host's shared-memory segment, which
 * takes every all-reduce from 1 KiB up, stays out of the comparison. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "px_launch.h"
#include "px_transport_int.h" /* px__inline_disable */

static int iters = 2000, rounds = 3, json;

static double now_us(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1e6 + ts.tv_nsec / 1e3;
}

static int cmp_d(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

typedef struct stats {
    double min, med, p90, mean;
} stats_t;

/* Sorts t[0..k) and summarises it. */
static stats_t summarise(double *t, int k)
{
    stats_t s = {0};
    qsort(t, (size_t)k, sizeof(*t), cmp_d);
    for (int i = 0; i < k; i++)
        s.mean += t[i] / k;
    s.min = t[0];
    s.med = t[k / 2];
    s.p90 = t[k * 9 / 10];
    return s;
}

static int rank_main(px_launch_rank_t *ctx)
{
    static const size_t sizes[] = {4096, 8192, 16384, 32768};
    float *buf = malloc(32768);
    double *t = malloc((size_t)iters * sizeof(double));

    if (!buf || !t)
        return 1;
    if (ctx->rank == 0 && !json)
        printf("# all-reduce fp32 sum, %d ranks, %d iterations x %d rounds; us per call "
               "(rank 0), round with the lowest median\n#%8s %-16s %8s %8s %8s %8s\n",
               ctx->world, iters, rounds, "bytes", "mode", "min", "median", "p90", "mean");
    for (size_t z = 0; z < sizeof(sizes) / sizeof(*sizes); z++) {
        stats_t best[2];
        for (int m = 0; m < 2; m++)
            best[m].med = 1e30;
        for (int r = 0; r < rounds; r++) {
            for (int m = 0; m < 2; m++) {
                uint64_t count = sizes[z] / 4;
                px__inline_disable = m == 0;
                for (uint64_t i = 0; i < count; i++)
                    buf[i] = (float)(ctx->rank + 1);
                if (px_barrier(ctx->comm, -1) != PX_OK)
                    return 1;
                for (int i = 0; i < 20 + iters; i++) {
                    double t0 = now_us();
                    px_status_t status = px_allreduce(ctx->comm, buf, buf, count, PX_FLOAT32,
                                                      PX_SUM, -1);
                    if (status != PX_OK) {
                        fprintf(stderr, "rank %d: all-reduce: %s\n", ctx->rank,
                                px_status_str(status));
                        return 1;
                    }
                    if (i >= 20)
                        t[i - 20] = now_us() - t0;
                }
                {
                    stats_t s = summarise(t, iters);
                    if (s.med < best[m].med)
                        best[m] = s;
                }
            }
        }
        if (ctx->rank != 0)
            continue;
        for (int m = 0; m < 2; m++) {
            const char *mode = m == 0 ? "header-exchange" : "header-in-data";
            if (json)
                printf("{\"ranks\": %d, \"bytes\": %zu, \"mode\": \"%s\", \"min_us\": %.2f, "
                       "\"median_us\": %.2f, \"p90_us\": %.2f, \"mean_us\": %.2f}\n",
                       ctx->world, sizes[z], mode, best[m].min, best[m].med, best[m].p90,
                       best[m].mean);
            else
                printf(" %8zu %-16s %8.1f %8.1f %8.1f %8.1f\n", sizes[z], mode, best[m].min,
                       best[m].med, best[m].p90, best[m].mean);
        }
        fflush(stdout);
    }
    free(buf);
    free(t);
    return 0;
}

int main(int argc, char **argv)
{
    px_launch_opts_t opts = {.use_watch = 1, .limit_s = 600};
    int n = 2;

    setenv("PX_SHM", "0", 0); /* the ranks inherit it */

    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "-n") && i + 1 < argc)
            n = atoi(argv[++i]);
        else if (!strcmp(argv[i], "-i") && i + 1 < argc)
            iters = atoi(argv[++i]);
        else if (!strcmp(argv[i], "-r") && i + 1 < argc)
            rounds = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--json"))
            json = 1;
        else {
            fprintf(stderr, "usage: %s [-n N] [-i ITERS] [-r ROUNDS] [--json]\n", argv[0]);
            return 2;
        }
    }
    if (n < 2 || iters < 10 || rounds < 1) {
        fprintf(stderr, "bench-small-lat: need -n >= 2, -i >= 10, -r >= 1 (got %d, %d, %d)\n", n,
                iters, rounds);
        return 2;
    }
    return px_launch(n, rank_main, NULL, &opts, NULL) ? 1 : 0;
}
