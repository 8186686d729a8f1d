/* mpi_coll_bench.c: the Open MPI peer of px-coll-bench (compare_mpi.py
 * builds it with mpicc and runs it beside ours). One collective of fp32
 * SUM on MPI_COMM_WORLD, at sizes from MIN to MAX bytes, x4 per row; each
 * size is checked once (every rank contributes rank+1, so every result
 * element is known), then timed over 200 calls below 1 MiB and 20 from
 * 1 MiB up between two barriers. Rank 0 prints the nccl-tests layout:
 *
 *   #     size(B)        count   time(us)    algbw    busbw
 *
 * algbw = bytes / time (GB/s); busbw = algbw x the op's bus factor from
 * nccl-tests doc/PERFORMANCE.md (all-reduce 2(n-1)/n; reduce-scatter,
 * all-gather, all-to-all (n-1)/n; broadcast, reduce 1). Bytes are the
 * whole buffer (count x 4, count a multiple of the ranks), as px-coll-bench
 * counts them. A wrong result ends the run (exit 1) naming the op, size
 * and element.
 *
 *   mpicc -O2 -o mpi_coll_bench tests/bench/mpi_coll_bench.c
 *   mpirun --oversubscribe -np 4 ./mpi_coll_bench all_reduce [MIN [MAX]]
 *
 * Ops: all_reduce reduce_scatter all_gather broadcast reduce all_to_all.
 * Single-threaded; one MPI process per rank. */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char *const ops[] = {"all_reduce", "reduce_scatter", "all_gather",
                                  "broadcast",  "reduce",         "all_to_all"};

static double bus_factor(const char *op, int n)
{
    if (!strcmp(op, "all_reduce"))
        return 2.0 * (n - 1) / n;
    if (!strcmp(op, "broadcast") || !strcmp(op, "reduce"))
        return 1.0;
    return (double)(n - 1) / n;
}

/* one call of op over count floats (per = count / n per rank's block) */
static void run(const char *op, float *a, float *b, long count, int n)
{
    int per = (int)(count / n);

    if (!strcmp(op, "all_reduce"))
        MPI_Allreduce(a, b, (int)count, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
    else if (!strcmp(op, "reduce_scatter"))
        MPI_Reduce_scatter_block(a, b, per, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
    else if (!strcmp(op, "all_gather"))
        MPI_Allgather(a, per, MPI_FLOAT, b, per, MPI_FLOAT, MPI_COMM_WORLD);
    else if (!strcmp(op, "broadcast"))
        MPI_Bcast(a, (int)count, MPI_FLOAT, 0, MPI_COMM_WORLD);
    else if (!strcmp(op, "reduce"))
        MPI_Reduce(a, b, (int)count, MPI_FLOAT, MPI_SUM, 0, MPI_COMM_WORLD);
    else
        MPI_Alltoall(a, per, MPI_FLOAT, b, per, MPI_FLOAT, MPI_COMM_WORLD);
}

/* The index of the first wrong element after one call of op with every
 * element of a set to rank+1, or -1 when all are right. */
static long check(const char *op, const float *a, const float *b, long count, int rank, int n)
{
    long per = count / n;
    float sum = (float)n * (float)(n + 1) / 2.0f;

    for (long i = 0; i < count; i++) {
        float want, got;
        if (!strcmp(op, "all_reduce") || (!strcmp(op, "reduce") && rank == 0)) {
            want = sum, got = b[i];
        } else if (!strcmp(op, "reduce_scatter")) {
            if (i >= per)
                break;
            want = sum, got = b[i];
        } else if (!strcmp(op, "all_gather") || !strcmp(op, "all_to_all")) {
            want = (float)(i / per + 1), got = b[i];
        } else if (!strcmp(op, "broadcast")) {
            want = 1.0f, got = a[i];
        } else {
            break; /* reduce: only the root receives */
        }
        if (got != want)
            return i;
    }
    return -1;
}

int main(int argc, char **argv)
{
    const char *op = argc > 1 ? argv[1] : "all_reduce";
    long minb = argc > 2 ? atol(argv[2]) : 4096, maxb = argc > 3 ? atol(argv[3]) : 64L << 20;
    int rank, n, known = 0;

    for (size_t i = 0; i < sizeof(ops) / sizeof(ops[0]); i++)
        known |= !strcmp(op, ops[i]);
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &n);
    if (!known || minb < 4 || maxb < minb) {
        if (!rank)
            fprintf(stderr, "usage: mpi_coll_bench [all_reduce|reduce_scatter|all_gather|"
                            "broadcast|reduce|all_to_all] [MIN_BYTES [MAX_BYTES]]\n");
        MPI_Finalize();
        return 2;
    }
    if (!rank)
        printf("# Open MPI %s, %d ranks, fp32 sum\n#%12s %12s %10s %8s %8s\n", op, n, "size(B)",
               "count", "time(us)", "algbw", "busbw");
    for (long bytes = minb; bytes <= maxb; bytes *= 4) {
        long count = bytes / 4 / n * n; /* whole elements per rank */
        float *a = malloc((size_t)count * 4 + 64), *b = malloc((size_t)count * 4 + 64);
        if (!a || !b) {
            fprintf(stderr, "mpi_coll_bench: out of memory at %ld bytes\n", bytes);
            MPI_Abort(MPI_COMM_WORLD, 1);
        }
        for (long i = 0; i < count; i++)
            a[i] = (float)(rank + 1);
        run(op, a, b, count, n);
        long bad = check(op, a, b, count, rank, n);
        if (bad >= 0) {
            fprintf(stderr, "mpi_coll_bench: %s of %ld bytes: rank %d element %ld is wrong\n", op,
                    count * 4, rank, bad);
            MPI_Abort(MPI_COMM_WORLD, 1);
        }
        int iters = bytes < (1 << 20) ? 200 : 20;
        MPI_Barrier(MPI_COMM_WORLD);
        double t = MPI_Wtime();
        for (int i = 0; i < iters; i++)
            run(op, a, b, count, n);
        MPI_Barrier(MPI_COMM_WORLD);
        double s = (MPI_Wtime() - t) / iters, algbw = (double)count * 4.0 / s / 1e9;
        if (!rank)
            printf(" %12ld %12ld %10.1f %8.2f %8.2f\n", count * 4, count, s * 1e6, algbw,
                   algbw * bus_factor(op, n));
        free(a);
        free(b);
    }
    MPI_Finalize();
    return 0;
}
