/* coll_cases.h: the collective cases the device-buffer transport tests
 * (test_stage.c: staging; test_ipc.c: CUDA IPC on a fake device) run, and
 * their expected results: each rank's inputs, the call of the collective
 * and the exact result of integer inputs, so that both tests check the
 * same cases the same way. Header-only (static functions), included by
 * each. FAIL needs an int `r` (the rank) in scope and returns 1. */
#ifndef PX_TEST_COLL_CASES_H
#define PX_TEST_COLL_CASES_H

#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "px_coll.h"

static uint64_t mix(uint64_t x)
{
    x += 0x9e3779b97f4a7c15ull;
    x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
    x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
    return x ^ (x >> 31);
}

/* Element i of rank r's input: an integer in [-50, 50] + 3(r+1) (exact sums)
 * or a random float in +-[2^-4, 2^4) (a different order of the sum shows). */
static float val(int r, size_t i, int ints)
{
    if (ints)
        return (float)((int)(i % 101) - 50 + 3 * (r + 1));
    uint64_t u = mix(((uint64_t)r << 40) ^ i);
    float m = (float)((u >> 40) & 0xffffff) / 16777216.0f; /* [0, 1) */
    float s = (float)(1 << (u & 7)) / 16.0f;
    return (u & 8 ? -m : m) * s;
}

enum { K_AR, K_AR_INPLACE, K_RS, K_RS_INPLACE, K_AG, K_BCAST, K_A2A };
static const char *const kind_names[] = {"allreduce", "allreduce-inplace", "reduce-scatter",
                                         "reduce-scatter-inplace", "allgather-inplace",
                                         "bcast", "alltoall"};

/* Runs collective `kind` on `in` (input layout) into `out` (buffers host or
 * device as given); `cnt` per the collective's count argument. */
static px_status_t run(px_comm_t *comm, int kind, px_algo_t algo, px_redop_t op, int root,
                       char *in, char *out, uint64_t cnt)
{
    px_coll_opts_t o = {algo, -1};
    const int r = comm ? px_comm_rank(comm) : 0;
    switch (kind) {
    case K_AR:
        return px_allreduce_opts(comm, in, out, cnt, PX_FLOAT32, op, &o);
    case K_AR_INPLACE:
        return px_allreduce_opts(comm, in, in, cnt, PX_FLOAT32, op, &o);
    case K_RS:
        return px_reduce_scatter(comm, in, out, cnt, PX_FLOAT32, op, &o);
    case K_RS_INPLACE:
        return px_reduce_scatter(comm, in, in + (size_t)r * cnt * 4, cnt, PX_FLOAT32, op, &o);
    case K_AG:
        return px_allgather(comm, in + (size_t)r * cnt * 4, in, cnt, PX_FLOAT32, &o);
    case K_BCAST:
        return px_bcast(comm, in, cnt, PX_FLOAT32, root, &o);
    case K_A2A:
        return px_alltoall(comm, in, out, cnt, PX_FLOAT32, &o);
    }
    return PX_ERR_INVALID_ARGUMENT;
}

/* Fills the input of `kind` (elements `in_n`) on rank r. */
static void fill(float *h, size_t in_n, int kind, int r, uint64_t cnt, int root, int ints)
{
    for (size_t i = 0; i < in_n; i++)
        h[i] = val(r, i, ints);
    if (kind == K_AG) /* only our block is input; the rest must be overwritten */
        for (size_t i = 0; i < in_n; i++)
            if (i / cnt != (size_t)r)
                h[i] = -1e30f;
    if (kind == K_BCAST && r != root)
        for (size_t i = 0; i < in_n; i++)
            h[i] = -1e30f;
}

/* The exact result of element i of the output (integer inputs). */
static float exact(int kind, int n, uint64_t cnt, int r, int root, px_redop_t op, size_t i)
{
    size_t gi = i;
    float s = 0;
    if (kind == K_RS || kind == K_RS_INPLACE)
        gi = (size_t)r * cnt + i;
    if (kind == K_AG)
        return val((int)(i / cnt), i, 1);
    if (kind == K_BCAST)
        return val(root, i, 1);
    if (kind == K_A2A) /* block q: rank q's block for us */
        return val((int)(i / cnt), (size_t)r * cnt + i % cnt, 1);
    for (int q = 0; q < n; q++)
        s += val(q, gi, 1);
    return op == PX_AVG ? s / (float)n : s;
}

#define FAIL(...)                                                                            \
    do {                                                                                     \
        fprintf(stderr, "rank %d: ", r);                                                     \
        fprintf(stderr, __VA_ARGS__);                                                        \
        fprintf(stderr, "\n");                                                               \
        return 1;                                                                            \
    } while (0)

#endif
