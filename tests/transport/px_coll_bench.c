/* px_coll_bench.c: ring all-reduce bandwidth of the parallax transport,
 * printed in the nccl-tests layout (as /work/shared/peers/mpi_coll_bench.c
 * prints Open MPI's), so the two read side by side.
 *
 *   px_coll_bench [-n RANKS] [-b MIN_BYTES] [-e MAX_BYTES] [-i ITERS] [-a auto|ring|rd]
 *
 * Forks RANKS local ranks (standalone bootstrap, px_launch). Sizes go up by 4x from 4 KiB to 64 MiB; fp32, SUM; busbw =
 * algbw * 2(n-1)/n (nccl-tests doc/PERFORMANCE.md). Out-of-place and
 * in-place are timed separately; #wrong counts elements that differ from
 * the exact expected sum. -a forces the algorithm (auto: recursive
 * doubling up to 32 KiB, ring above). Not a timed test: run it by hand. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "px_launch.h"
#include "px_time.h"
#include "px_transport_int.h" /* px__allreduce_algo */

typedef struct {
    long minb, maxb;
    int iters;
} bench_args_t;

static long check(const float *buf, long count, int n)
{
    long wrong = 0;
    for (long i = 0; i < count; i++)
        wrong += buf[i] != (float)(n * (n + 1) / 2);
    return wrong;
}

static double time_one(px_comm_t *comm, float *a, float *b, long count, int iters, int rank)
{
    double t;
    for (long i = 0; i < count; i++)
        a[i] = (float)(rank + 1);
    px_barrier(comm, -1);
    t = px_time_mono_s();
    for (int i = 0; i < iters; i++) {
        if (px_allreduce(comm, a, b, (uint64_t)count, PX_FLOAT32, PX_SUM, -1) != PX_OK)
            return -1.0;
    }
    px_barrier(comm, -1);
    return (px_time_mono_s() - t) / iters;
}

static int bench_rank(px_launch_rank_t *ctx)
{
    bench_args_t *args = ctx->arg;
    int n = ctx->world, r = ctx->rank;
    double factor = 2.0 * (n - 1) / n;

    if (r == 0) {
        printf("# parallax all_reduce (%s), %d ranks, fp32 sum, chunk %s bytes\n",
               px__allreduce_algo == 1 ? "ring" : px__allreduce_algo == 2 ? "recursive doubling"
                                        : "recursive doubling <= 32 KiB, ring above", n,
               getenv("PX_ALLREDUCE_CHUNK_BYTES") ? getenv("PX_ALLREDUCE_CHUNK_BYTES") : "1048576");
        printf("#%68s %30s\n", "out-of-place", "in-place");
        printf("# %12s %12s %6s %6s %9s %8s %8s %6s %9s %8s %8s %6s\n", "size", "count", "type",
               "redop", "time", "algbw", "busbw", "#wrong", "time", "algbw", "busbw", "#wrong");
        printf("# %12s %12s %6s %6s %9s %8s %8s %6s %9s %8s %8s %6s\n", "(B)", "(elements)", "",
               "", "(us)", "(GB/s)", "(GB/s)", "", "(us)", "(GB/s)", "(GB/s)", "");
    }
    for (long bytes = args->minb; bytes <= args->maxb; bytes *= 4) {
        long count = bytes / 4 / n * n;
        float *a = malloc((size_t)count * 4 + 64), *b = malloc((size_t)count * 4 + 64);
        int iters = args->iters ? args->iters : (bytes < (1 << 20) ? 200 : 20);
        double t_oop, t_ip;
        long wrong_oop, wrong_ip;

        /* warm-up, then out of place */
        time_one(ctx->comm, a, b, count, 1, r);
        t_oop = time_one(ctx->comm, a, b, count, iters, r);
        wrong_oop = check(b, count, n);
        /* in place: one checked call, then timed calls (values grow; not checked) */
        for (long i = 0; i < count; i++)
            a[i] = (float)(r + 1);
        px_allreduce(ctx->comm, a, a, (uint64_t)count, PX_FLOAT32, PX_SUM, -1);
        wrong_ip = check(a, count, n);
        t_ip = time_one(ctx->comm, a, a, count, iters, r);
        if (t_oop < 0 || t_ip < 0) {
            fprintf(stderr, "rank %d: allreduce failed: %s\n", r, px_comm_last_error(ctx->comm));
            return 1;
        }
        if (r == 0) {
            double bw_o = count * 4.0 / t_oop / 1e9, bw_i = count * 4.0 / t_ip / 1e9;
            printf("  %12ld %12ld %6s %6s %9.1f %8.2f %8.2f %6ld %9.1f %8.2f %8.2f %6ld\n",
                   count * 4, count, "float", "sum", t_oop * 1e6, bw_o, bw_o * factor, wrong_oop,
                   t_ip * 1e6, bw_i, bw_i * factor, wrong_ip);
        }
        free(a);
        free(b);
    }
    return 0;
}

int main(int argc, char **argv)
{
    bench_args_t args = {4096, 64L << 20, 0};
    int n = 0, opt;

    while ((opt = getopt(argc, argv, "n:b:e:i:a:")) != -1) {
        switch (opt) {
        case 'n': n = atoi(optarg); break;
        case 'b': args.minb = atol(optarg); break;
        case 'e': args.maxb = atol(optarg); break;
        case 'i': args.iters = atoi(optarg); break;
        case 'a': px__allreduce_algo = !strcmp(optarg, "ring") ? 1 : !strcmp(optarg, "rd") ? 2 : 0;
            break;
        default:
            fprintf(stderr, "usage: %s [-n ranks] [-b min_bytes] [-e max_bytes] [-i iters] "
                            "[-a auto|ring|rd]\n",
                    argv[0]);
            return 2;
        }
    }
    setvbuf(stdout, NULL, _IOLBF, 0);
    if (n <= 0) {
        fprintf(stderr, "%s: give -n RANKS (external launch is not wired up yet)\n", argv[0]);
        return 2;
    }
    {
        px_launch_opts_t o = {.use_watch = 1, .limit_s = 1800};
        return px_launch(n, bench_rank, &args, &o, NULL) ? 1 : 0;
    }
}
