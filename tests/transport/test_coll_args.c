/* test_coll_args.c: the collectives' argument checks (issue 16).
 *
 *   test_coll_args N   on N local ranks, for every collective (all-reduce,
 *                      reduce-scatter, all-gather, broadcast, reduce,
 *                      scatter, gather, all-to-all, all-to-all-v, send,
 *                      recv, in their nonblocking and blocking forms) and
 *                      every dtype: a count of -1 and of 2^60, and for the
 *                      rooted ones a root of -1 and of the world size, each
 *                      return PX_ERR_INVALID_ARGUMENT on the calling rank
 *                      (no crash: the buffers are 64 bytes, so a call that
 *                      went ahead would read far past them), no request is
 *                      written, and after every rejected call a real
 *                      all-reduce and broadcast on the same communicator
 *                      give the exact result (the communicator stays
 *                      usable: no sequence number was taken).
 *
 * Every rank makes the same bad calls; the checks are local, so none of
 * them involves a peer. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "px_coll.h"
#include "px_launch.h"

#define FAIL(...) do { fprintf(stderr, "FAIL rank %d: ", ctx->rank); \
    fprintf(stderr, __VA_ARGS__); fprintf(stderr, "\n"); return 1; } while (0)

static const px_dtype_t all_dtypes[] = {PX_FLOAT32, PX_FLOAT64, PX_FLOAT16, PX_BFLOAT16,
                                        PX_INT32, PX_INT64, PX_UINT8};

enum { C_ALLREDUCE, C_REDUCE_SCATTER, C_ALLGATHER, C_BCAST, C_REDUCE, C_SCATTER, C_GATHER,
       C_ALLTOALL, C_ALLTOALLV, C_SEND, C_RECV, C_N };
static const char *const coll_names[C_N] = {"allreduce", "reduce_scatter", "allgather", "bcast",
                                            "reduce", "scatter", "gather", "alltoall",
                                            "alltoallv", "send", "recv"};

static int has_root(int c)
{
    return c == C_BCAST || c == C_REDUCE || c == C_SCATTER || c == C_GATHER;
}

/* One call of collective c; blocking = 1 uses the blocking form. The
 * request pointer is preset to a sentinel that must survive a rejection. */
static px_status_t call(px_comm_t *comm, int c, int blocking, px_dtype_t dt, uint64_t count,
                        int root, void *sbuf, void *rbuf, px_request_t **req_p)
{
    uint64_t *v = calloc(4 * (size_t)px_comm_size(comm), sizeof(uint64_t));
    int n = px_comm_size(comm), peer = (px_comm_rank(comm) + 1) % n;
    px_status_t status = PX_ERR_INTERNAL;

    if (!v)
        return PX_ERR_NO_MEMORY;
    for (int p = 0; p < n; p++) /* alltoallv: every block of `count`, adjacent */
        v[p] = v[2 * n + p] = count, v[n + p] = v[3 * n + p] = (uint64_t)p;
    switch (c) {
    case C_ALLREDUCE:
        status = blocking ? px_allreduce_opts(comm, sbuf, rbuf, count, dt, PX_SUM, NULL)
                          : px_allreduce_start(comm, sbuf, rbuf, count, dt, PX_SUM, NULL, req_p);
        break;
    case C_REDUCE_SCATTER:
        status = blocking ? px_reduce_scatter(comm, sbuf, rbuf, count, dt, PX_SUM, NULL)
                          : px_reduce_scatter_start(comm, sbuf, rbuf, count, dt, PX_SUM, NULL,
                                                    req_p);
        break;
    case C_ALLGATHER:
        status = blocking ? px_allgather(comm, sbuf, rbuf, count, dt, NULL)
                          : px_allgather_start(comm, sbuf, rbuf, count, dt, NULL, req_p);
        break;
    case C_BCAST:
        status = blocking ? px_bcast(comm, rbuf, count, dt, root, NULL)
                          : px_bcast_start(comm, rbuf, count, dt, root, NULL, req_p);
        break;
    case C_REDUCE:
        status = blocking ? px_reduce(comm, sbuf, rbuf, count, dt, PX_SUM, root, NULL)
                          : px_reduce_start(comm, sbuf, rbuf, count, dt, PX_SUM, root, NULL,
                                            req_p);
        break;
    case C_SCATTER:
        status = blocking ? px_scatter(comm, sbuf, rbuf, count, dt, root, NULL)
                          : px_scatter_start(comm, sbuf, rbuf, count, dt, root, NULL, req_p);
        break;
    case C_GATHER:
        status = blocking ? px_gather(comm, sbuf, rbuf, count, dt, root, NULL)
                          : px_gather_start(comm, sbuf, rbuf, count, dt, root, NULL, req_p);
        break;
    case C_ALLTOALL:
        status = blocking ? px_alltoall(comm, sbuf, rbuf, count, dt, NULL)
                          : px_alltoall_start(comm, sbuf, rbuf, count, dt, NULL, req_p);
        break;
    case C_ALLTOALLV:
        status = blocking ? px_alltoallv(comm, sbuf, v, v + n, rbuf, v + 2 * n, v + 3 * n, dt,
                                         NULL)
                          : px_alltoallv_start(comm, sbuf, v, v + n, rbuf, v + 2 * n, v + 3 * n,
                                               dt, NULL, req_p);
        break;
    case C_SEND: /* bytes: count elements of dt */
        status = blocking ? px_send(comm, peer, 7, sbuf, (size_t)(count * px_dtype_size(dt)), -1)
                          : px_send_start(comm, peer, 7, sbuf, count * px_dtype_size(dt), NULL,
                                          req_p);
        break;
    case C_RECV:
        status = blocking ? px_recv(comm, peer, 7, rbuf, (size_t)(count * px_dtype_size(dt)), -1)
                          : px_recv_start(comm, peer, 7, rbuf, count * px_dtype_size(dt), NULL,
                                          req_p);
        break;
    }
    free(v);
    return status;
}

/* A real all-reduce and broadcast: the communicator still works and every
 * rank is at the same sequence number. */
static int still_usable(px_launch_rank_t *ctx, const char *after)
{
    int32_t x[3] = {ctx->rank, 1, -ctx->rank}, y[3] = {0, 0, 0};
    const int n = ctx->world;
    px_status_t status = px_allreduce(ctx->comm, x, y, 3, PX_INT32, PX_SUM, -1);

    if (status != PX_OK || y[0] != n * (n - 1) / 2 || y[1] != n || y[2] != -y[0])
        FAIL("after %s: all-reduce %s gave %d %d %d", after, px_status_str(status), y[0], y[1],
             y[2]);
    x[0] = ctx->rank == n - 1 ? 4242 : 0;
    status = px_bcast(ctx->comm, x, 1, PX_INT32, n - 1, NULL);
    if (status != PX_OK || x[0] != 4242)
        FAIL("after %s: broadcast %s gave %d", after, px_status_str(status), x[0]);
    return 0;
}

static int rank_args(px_launch_rank_t *ctx)
{
    /* 64-byte buffers: any of the bad counts would read or write far past */
    static char sbuf[64], rbuf[64];
    const uint64_t bad_counts[2] = {(uint64_t)-1, UINT64_C(1) << 60};
    const int bad_roots[2] = {-1, ctx->world};
    px_request_t *const sentinel = (px_request_t *)(uintptr_t)0x5eed;
    int checked = 0;

    for (size_t d = 0; d < sizeof(all_dtypes) / sizeof(*all_dtypes); d++) {
        for (int c = 0; c < C_N; c++) {
            for (int blocking = 0; blocking < 2; blocking++) {
                char what[96];
                for (int k = 0; k < 4; k++) {
                    px_request_t *req = sentinel;
                    uint64_t count = k < 2 ? bad_counts[k] : 4;
                    int root = k < 2 ? 0 : bad_roots[k - 2];
                    px_status_t status;

                    if (k >= 2 && !has_root(c))
                        continue;
                    snprintf(what, sizeof what, "%s%s %s %s %lld", coll_names[c],
                             blocking ? "" : "_start", px_dtype_name(all_dtypes[d]),
                             k < 2 ? "count" : "root", k < 2 ? (long long)count : (long long)root);
                    status = call(ctx->comm, c, blocking, all_dtypes[d], count, root, sbuf, rbuf,
                                  &req);
                    if (status != PX_ERR_INVALID_ARGUMENT)
                        FAIL("%s: %s, expected INVALID_ARGUMENT", what, px_status_str(status));
                    if (req != sentinel)
                        FAIL("%s: the request pointer was written on failure", what);
                    checked++;
                }
                if (still_usable(ctx, what))
                    return 1;
            }
        }
    }
    if (ctx->rank == 0)
        printf("coll_args: %d ranks, %d bad calls rejected with INVALID_ARGUMENT, communicator "
               "usable after each collective\n", ctx->world, checked);
    return 0;
}

int main(int argc, char **argv)
{
    int n = argc > 1 ? atoi(argv[1]) : 3;
    px_launch_opts_t opts = {.use_watch = 1, .limit_s = 110};
    int failed;

    setvbuf(stdout, NULL, _IOLBF, 0);
    if (n < 1) {
        fprintf(stderr, "usage: %s N (ranks, >= 1)\n", argv[0]);
        return 2;
    }
    failed = px_launch(n, rank_args, NULL, &opts, NULL);
    if (failed)
        fprintf(stderr, "FAIL: %d rank(s) failed\n", failed);
    return failed ? 1 : 0;
}
