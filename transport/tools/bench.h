/* bench.h: the collectives benchmark loop (nccl-tests layout), shared by
 * parallax-rank's bench mode (daemon jobs, `pctl bench`) and the standalone
 * program px-coll-bench.
 *
 * For each size from min_bytes to max_bytes (x2 or x4), every rank of the
 * communicator runs `warmup` untimed collectives, then a barrier, `iters`
 * timed collectives and a barrier; the time per collective is rank 0's wall
 * time between the two barriers divided by `iters` (nccl-tests measures the
 * same span). Sizes and bus bandwidth follow nccl-tests doc/PERFORMANCE.md:
 *
 *   op               size (bytes)                      bus factor
 *   all_reduce       count * esize                     2(n-1)/n
 *   all_gather       recv buffer: n * sendcount * esize (n-1)/n
 *   reduce_scatter   send buffer: n * recvcount * esize (n-1)/n
 *   all_to_all       n * per-peer count * esize        (n-1)/n
 *   broadcast, reduce count * esize                    1
 *
 * algbw = size / time (GB/s, 1e9 bytes), busbw = algbw * factor. Sizes of
 * the per-rank ops are rounded down to whole elements per rank, as nccl-tests
 * and mpi_coll_bench.c do.
 *
 * --check: after timing, buffers are refilled with exact small integers
 * (exact in every dtype for world sizes up to 31, sums included), the
 * collective runs once more and each rank counts the elements that differ
 * from the exact expected value; rank 0 sums the counts (p2p). */
#ifndef PX_BENCH_H
#define PX_BENCH_H

#include <stdint.h>
#include <stdio.h>

#include "px_transport.h"

typedef enum px_bench_op {
    PX_BENCH_ALL_REDUCE = 0,
    PX_BENCH_ALL_GATHER,
    PX_BENCH_REDUCE_SCATTER,
    PX_BENCH_ALL_TO_ALL,
    PX_BENCH_BROADCAST,
    PX_BENCH_REDUCE,
} px_bench_op_t;

typedef struct px_bench_cfg {
    px_bench_op_t op;
    px_dtype_t dtype;      /* default PX_FLOAT32 */
    px_redop_t redop;      /* reductions only; default PX_SUM */
    uint64_t min_bytes;    /* >= 1 */
    uint64_t max_bytes;    /* >= min_bytes, <= PX_BENCH_MAX_BYTES */
    int step_factor;       /* 2 or 4 */
    int warmup;            /* untimed collectives per size (>= 0) */
    int iters;             /* timed collectives per size; 0: 200 below 1 MiB, 20 above */
    int check;             /* count wrong elements */
    int root;              /* broadcast / reduce root */
    /* NULL: host buffers; else the buffers live in this kernel backend's
     * (device) memory, filled and checked through host mirrors, and the
     * transport must have it registered (px_devmem.h); all_reduce,
     * all_gather, reduce_scatter, broadcast and all_to_all only (what the
     * transport stages) */
    const struct px_kernel_ops *device_ops;
} px_bench_cfg_t;

#define PX_BENCH_MAX_BYTES (1ull << 32)

/* One row of the table. `wrong` is -1 when not checked; on rank 0 it is the
 * total over all ranks, elsewhere this rank's own count. */
typedef struct px_bench_row {
    uint64_t bytes;        /* nccl-tests "size" */
    uint64_t count;        /* elements (nccl-tests "count") */
    px_dtype_t dtype;
    px_redop_t redop;
    double time_us;        /* per collective */
    double algbw_gbs;
    double busbw_gbs;
    int64_t wrong;
} px_bench_row_t;

/* Called after each size on every rank; a nonzero return stops the run
 * (px_bench_run then returns PX_ERR_ABORTED). */
typedef int (*px_bench_row_fn_t)(void *arg, const px_bench_row_t *row);

/* Fills `cfg` with the defaults (all_reduce, fp32, sum, 4 KiB..64 MiB x4,
 * warmup 5, iters 0 = auto, no check, root 0). */
void px_bench_cfg_init(px_bench_cfg_t *cfg);
/* Checks a configuration against a world size; PX_ERR_INVALID_ARGUMENT with
 * a message naming the bad field written to `err` (may be NULL). */
px_status_t px_bench_cfg_validate(const px_bench_cfg_t *cfg, int world, char *err, size_t errlen);

/* Runs the benchmark on `comm` (collective: every rank calls it with the
 * same cfg). Errors: the collective's (PX_ERR_PEER_FAILURE, PX_ERR_TIMEOUT,
 * PX_ERR_MISMATCH, ...), PX_ERR_NO_MEMORY, PX_ERR_INVALID_ARGUMENT (bad cfg,
 * or an op this transport build does not provide), PX_ERR_ABORTED when
 * `fn` asked to stop. */
px_status_t px_bench_run(px_comm_t *comm, const px_bench_cfg_t *cfg, px_bench_row_fn_t fn,
                         void *arg);

/* nccl-tests bus factor of `op` on `n` ranks. */
double px_bench_bus_factor(px_bench_op_t op, int n);
/* Whether this build's transport provides `op` (all six since the
 * collectives issue; kept so a transport without one can say so). */
int px_bench_op_available(px_bench_op_t op);

/* Names as nccl-tests spells them ("all_reduce", ...); dtype names "float",
 * "double", "half", "bfloat16", "int32", "int64", "uint8" (parse also takes
 * fp32/fp64/fp16/bf16/f32...). Parsers return PX_ERR_INVALID_ARGUMENT on an
 * unknown name. */
const char *px_bench_op_name(px_bench_op_t op);
px_status_t px_bench_op_parse(const char *name, px_bench_op_t *op_p);
const char *px_bench_dtype_name(px_dtype_t dtype);
px_status_t px_bench_dtype_parse(const char *name, px_dtype_t *dtype_p);
const char *px_bench_redop_name(px_redop_t op);
px_status_t px_bench_redop_parse(const char *name, px_redop_t *op_p);
/* Parses a byte size with an optional K/M/G suffix (binary: 4K = 4096). */
px_status_t px_bench_parse_bytes(const char *s, uint64_t *bytes_p);

/* The --check halves, public for tests. px_bench_fill writes rank `rank`'s
 * input for one collective of `count` elements (`per` = count / n for the
 * per-rank ops) into sbuf, and poisons rbuf (stale output counts as wrong).
 * px_bench_count_wrong counts the elements of this rank's output (rbuf; for
 * broadcast, sbuf) that differ from the exact result; reduce checks the
 * root only. Buffer sizes as px_bench_run allocates them. */
void px_bench_fill(const px_bench_cfg_t *cfg, int rank, int n, void *sbuf, void *rbuf,
                   uint64_t count, uint64_t per);
int64_t px_bench_count_wrong(const px_bench_cfg_t *cfg, int rank, int n, const void *sbuf,
                             const void *rbuf, uint64_t count, uint64_t per);

/* Prints the nccl-tests header / one row to `out` (rank 0 of a run). */
void px_bench_print_header(FILE *out, const px_bench_cfg_t *cfg, int world);
void px_bench_print_row(FILE *out, const px_bench_row_t *row);

/* parallax-rank's bench mode (bench_rank.c): whether argv asks for it (any
 * --bench-* flag), and its main (returns the process exit status: 0 done or
 * stopped by the coordinator, 1 failed, 2 bad arguments). */
int px_rank_bench_requested(int argc, char **argv);
int px_rank_bench_main(int argc, char **argv);

#endif
