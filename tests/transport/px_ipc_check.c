/* px_ipc_check.c: the IPC path of device-buffer collectives on a real GPU
 * (transport/px_ipc.c with the CUDA table's cudaIpc* ops and device
 * reductions), checked bit for bit against the staged path and the host
 * path. deploy/gpu-check.sh runs it (two ranks on one GPU); the `gpu` suite
 * runs it where a GPU is present and skips (77) elsewhere.
 *
 * Each rank opens the CUDA backend after the fork, makes the world decide
 * its device path with a table that has no IPC ops (so the world stages
 * for good) and a split of the world with the full table (so the split
 * goes through IPC), then runs every collective of device buffers on both,
 * and on host buffers of the world, on random floats of mixed magnitudes
 * (a different summation order would show), and compares the results
 * byte for byte. It also checks that the split made no host copy (it did
 * go through IPC) and ran device reductions wherever the rank had elements
 * to reduce (ipc_check_case.h: an all-reduce of fewer elements than ranks
 * leaves the higher ranks none). The ranks add up their failed cases in
 * one all-reduce at the end: rank 0's PASS or FAIL line speaks for every
 * rank, each failed case has a line naming it on the rank that saw it,
 * and every rank exits 1 when any case failed anywhere, 0 otherwise.
 *
 * --protocol sync|event sets PX_IPC_PROTOCOL for every rank (the IPC
 * path's ordering: host synchronize or shared events; px_ipc.c). --bench
 * then times all-reduce, all-gather and reduce-scatter of device floats
 * through the IPC communicator from 4 KiB to 256 MiB (the staging chunk set
 * to PX_IPC_SLOT_BYTES, so chunks are the slots) and rank 0 prints each
 * size's time and bus bandwidth (NCCL's busbw: all-reduce 2(n-1)/n, the
 * others (n-1)/n of the buffer's bytes per second), beside the copy limit:
 * rank 0's device-to-device copy of the same size, timed alone.
 *
 * usage: px-ipc-check [-n RANKS] [--device cuda|cuda:K] [--protocol sync|event] [--bench]
 * Exit: 0 pass, 1 fail, 77 skip (no CUDA build or no GPU). */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "ipc_check_case.h"
#include "px_coll.h"
#include "px_devmem.h"
#include "px_env.h"
#include "px_kernels.h"
#include "px_kernels_select.h"
#include "px_launch.h"

static const char *device = "cuda";
static px_kernel_ops_t plain, counted; /* copies of the CUDA table */
static const px_kernel_ops_t *cuda;
static long host_copies, dev_reduces;
static int bench_on; /* --bench */

static void count_to_host(void *h, const void *d, size_t n)
{
    host_copies++;
    cuda->mem_copy_to_host(h, d, n);
}

static void count_from_host(void *d, const void *h, size_t n)
{
    host_copies++;
    cuda->mem_copy_from_host(d, h, n);
}

static uint64_t count_async(void *dst, const void *src, size_t n, int to_host)
{
    host_copies++;
    return cuda->mem_copy_async(dst, src, n, to_host);
}

static px_status_t count_reduce(void *dst, const void *a, const void *b, size_t n, int dtype,
                                int op)
{
    dev_reduces++;
    return cuda->reduce(dst, a, b, n, dtype, op);
}

static uint64_t mix(uint64_t x)
{
    x += 0x9e3779b97f4a7c15ull;
    x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
    x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
    return x ^ (x >> 31);
}

static float val(int r, size_t i)
{
    uint64_t u = mix(((uint64_t)r << 40) ^ i);
    float m = (float)((u >> 40) & 0xffffff) / 16777216.0f;
    float s = (float)(1 << (u & 7)) / 16.0f;
    return (u & 8 ? -m : m) * s;
}

enum { K_AR, K_RS, K_AG, K_BCAST, K_A2A };
static const char *const names[] = {"all-reduce", "reduce-scatter", "all-gather", "broadcast",
                                    "all-to-all"};

static px_status_t run(px_comm_t *c, int kind, px_redop_t op, void *in, void *out, uint64_t cnt)
{
    px_coll_opts_t o = {PX_ALGO_RING, -1};
    int r = px_comm_rank(c);
    switch (kind) {
    case K_AR: return px_allreduce_opts(c, in, out, cnt, PX_FLOAT32, op, &o);
    case K_RS: return px_reduce_scatter(c, in, out, cnt, PX_FLOAT32, op, &o);
    case K_AG: return px_allgather(c, (char *)in + (size_t)r * cnt * 4, in, cnt, PX_FLOAT32, &o);
    case K_BCAST: return px_bcast(c, in, cnt, PX_FLOAT32, 0, &o);
    case K_A2A: return px_alltoall(c, in, out, cnt, PX_FLOAT32, &o);
    }
    return PX_ERR_INVALID_ARGUMENT;
}

/* Runs `kind` on device buffers of comm `c` from host input `h` (in_n
 * floats); the result (res_n floats) into `got`. */
static int dev_run(px_comm_t *c, int kind, px_redop_t op, const float *h, size_t in_n,
                   size_t out_n, uint64_t cnt, float *got, size_t res_n)
{
    const px_kernel_ops_t *k = &counted;
    void *din = k->mem_alloc(in_n * 4), *dout = k->mem_alloc(out_n * 4);
    int rc = 1;
    if (!din || !dout) {
        fprintf(stderr, "%s count %llu: no device memory\n", names[kind], (unsigned long long)cnt);
        goto out;
    }
    k->mem_copy_from_host(din, h, in_n * 4);
    if (run(c, kind, op, din, dout, cnt) != PX_OK) {
        fprintf(stderr, "%s: %s\n", names[kind], px_comm_last_error(c));
        goto out;
    }
    k->mem_copy_to_host(got, kind == K_AG || kind == K_BCAST ? din : dout, res_n * 4);
    rc = 0;
out:
    k->mem_free(din);
    k->mem_free(dout);
    return rc;
}

/* --bench: every size's mean time over a few runs after one warm-up, on
 * device buffers of `c`; rank 0 prints. 0, or 1 when a run fails. */
static int bench(px_comm_t *c)
{
    const int r = px_comm_rank(c), n = px_comm_size(c);
    static const char *const what[] = {"all-reduce", "all-gather", "reduce-scatter"};
    const size_t slot = (size_t)px_env_int("PX_IPC_SLOT_BYTES");

    px_transport_set_stage_chunk(slot); /* every rank the same */
    for (size_t bytes = 4096; bytes <= ((size_t)256 << 20); bytes *= 4) {
        const uint64_t cnt = bytes / 4, per = cnt / (uint64_t)n; /* AG/RS: per rank */
        char *a = cuda->mem_alloc(bytes), *b = cuda->mem_alloc(bytes);
        if (!a || !b) {
            fprintf(stderr, "rank %d: bench: no device memory for %zu bytes\n", r, bytes);
            return 1;
        }
        if (r == 0) { /* the limit: a device-to-device copy of the same size, alone */
            const int iters = bytes >= ((size_t)16 << 20) ? 10 : 50;
            struct timespec t0, t1;
            cuda->mem_copy(b, a, bytes);
            cuda->synchronize();
            clock_gettime(CLOCK_MONOTONIC, &t0);
            for (int it = 0; it < iters; it++)
                cuda->mem_copy(b, a, bytes);
            cuda->synchronize();
            clock_gettime(CLOCK_MONOTONIC, &t1);
            double us = ((double)(t1.tv_sec - t0.tv_sec) * 1e9 +
                         (double)(t1.tv_nsec - t0.tv_nsec)) / 1e3 / iters;
            printf("px-ipc-check bench copy limit %24zu bytes %10.1f us copy %8.2f GB/s\n",
                   bytes, us, (double)bytes / us / 1e3);
        }
        for (int op = 0; op < 3; op++) {
            const int iters = bytes >= ((size_t)16 << 20) ? 10 : 50;
            px_coll_opts_t o = {PX_ALGO_RING, -1};
            struct timespec t0, t1;
            double us;
            for (int it = -1; it < iters; it++) {
                px_status_t st;
                if (it == 0)
                    clock_gettime(CLOCK_MONOTONIC, &t0);
                st = op == 0 ? px_allreduce_opts(c, a, b, cnt, PX_FLOAT32, PX_SUM, &o)
                   : op == 1 ? px_allgather(c, a + (size_t)r * per * 4, a, per, PX_FLOAT32, &o)
                             : px_reduce_scatter(c, a, b, per, PX_FLOAT32, PX_SUM, &o);
                if (st != PX_OK) {
                    fprintf(stderr, "rank %d: bench %s %zu bytes: %s\n", r, what[op], bytes,
                            px_comm_last_error(c));
                    return 1;
                }
            }
            clock_gettime(CLOCK_MONOTONIC, &t1);
            us = ((double)(t1.tv_sec - t0.tv_sec) * 1e9 + (double)(t1.tv_nsec - t0.tv_nsec)) /
                 1e3 / iters;
            if (r == 0)
                printf("px-ipc-check bench protocol=%s n=%d %-14s %10zu bytes %10.1f us "
                       "busbw %8.2f GB/s\n", px_env_str("PX_IPC_PROTOCOL"), n, what[op], bytes,
                       us, (op == 0 ? 2.0 : 1.0) * (n - 1) / n * (double)bytes / us / 1e3);
        }
        cuda->mem_free(a);
        cuda->mem_free(b);
    }
    return 0;
}

static int rank_main(px_launch_rank_t *ctx)
{
    const int r = ctx->rank, n = ctx->world;
    static const uint64_t counts[] = {1, 4097, (1u << 20) + 3, (16u << 20) + 5};
    char err[200];
    px_comm_t *split;
    int bad = 0, cases = 0;

    if (px_kernels_select(device, &cuda, err, sizeof err) != PX_OK) {
        fprintf(stderr, "rank %d: %s\n", r, err);
        return 1;
    }
    plain = counted = *cuda;
    plain.reduce = NULL;
    plain.reduce_avg_finish = NULL;
    plain.ipc_handle = NULL;
    plain.ipc_open = NULL;
    plain.ipc_close = NULL;
    counted.mem_copy_to_host = count_to_host;
    counted.mem_copy_from_host = count_from_host;
    counted.mem_copy_async = cuda->mem_copy_async ? count_async : NULL;
    counted.reduce = count_reduce;
    px_transport_set_pinned_memory(px_kernels_host_alloc, px_kernels_host_free);
    px_transport_set_device_memory(&plain, px_kernels_is_device_ptr);
    {
        float *d = cuda->mem_alloc(4096);
        px_coll_opts_t ring = {PX_ALGO_RING, -1}; /* a ring all-reduce decides the path */
        if (!d || px_allreduce_opts(ctx->comm, d, d, 1024, PX_FLOAT32, PX_SUM, &ring) != PX_OK) {
            fprintf(stderr, "rank %d: the world's first device all-reduce failed: %s\n", r,
                    d ? px_comm_last_error(ctx->comm) : "no device memory");
            return 1;
        }
        cuda->mem_free(d);
    }
    px_transport_set_device_memory(&counted, px_kernels_is_device_ptr);
    if (px_comm_split(ctx->comm, 0, r, &split) != PX_OK) {
        fprintf(stderr, "rank %d: split of the world failed: %s\n", r,
                px_comm_last_error(ctx->comm));
        return 1;
    }
    for (unsigned ci = 0; ci < sizeof counts / sizeof *counts; ci++)
        for (int kind = K_AR; kind <= K_A2A; kind++)
            for (int avg = 0; avg < (kind <= K_RS ? 2 : 1); avg++) {
                uint64_t cnt = counts[ci];
                px_redop_t op = avg ? PX_AVG : PX_SUM;
                int blocked = kind != K_AR && kind != K_BCAST;
                size_t in_n = blocked ? cnt * (size_t)n : cnt, out_n = kind == K_RS ? cnt : in_n;
                size_t res_n = out_n;
                float *h = malloc(in_n * 4), *want = malloc(in_n * 4), *st = malloc(in_n * 4),
                      *ip = malloc(in_n * 4);
                if (!h || !want || !st || !ip) {
                    fprintf(stderr, "rank %d: %s count %llu: no host memory\n", r, names[kind],
                            (unsigned long long)cnt);
                    return 1;
                }
                for (size_t i = 0; i < in_n; i++)
                    h[i] = (kind == K_BCAST && r) || (kind == K_AG && i / cnt != (size_t)r)
                               ? -1e30f : val(r, i);
                memcpy(want, h, in_n * 4);
                if (run(ctx->comm, kind, op, want, kind == K_AG || kind == K_BCAST ? want : st,
                        cnt) != PX_OK) {
                    fprintf(stderr, "rank %d: %s %s count %llu: host run failed: %s\n", r,
                            names[kind], px_redop_name(op), (unsigned long long)cnt,
                            px_comm_last_error(ctx->comm));
                    return 1;
                }
                if (kind != K_AG && kind != K_BCAST)
                    memcpy(want, st, res_n * 4);
                long hc0 = host_copies, dr0 = dev_reduces;
                if (dev_run(ctx->comm, kind, op, h, in_n, out_n, cnt, st, res_n))
                    return 1;
                long hc1 = host_copies, dr1 = dev_reduces;
                if (dev_run(split, kind, op, h, in_n, out_n, cnt, ip, res_n))
                    return 1;
                /* the IPC run's own copies: the input in and the result out */
                long ipc_host = host_copies - hc1 - 2, ipc_red = dev_reduces - dr1;
                int same_st = !memcmp(st, want, res_n * 4), same_ip = !memcmp(ip, want, res_n * 4);
                int what = kind == K_AR   ? PX_IPC_CASE_ALLREDUCE
                           : kind == K_RS ? PX_IPC_CASE_REDUCE_SCATTER
                                          : PX_IPC_CASE_MOVE;
                int via_ipc = px_ipc_case_went_ipc(what, cnt, n, r, ipc_host, ipc_red);
                if (!same_st || !same_ip || !via_ipc) {
                    bad++;
                    fprintf(stderr, "rank %d: %s %s count %llu: staged %s, IPC %s the host path; "
                            "IPC run made %ld host copies, %ld device reductions\n", r,
                            names[kind], px_redop_name(op), (unsigned long long)cnt,
                            same_st ? "equals" : "DIFFERS from", same_ip ? "equals" : "DIFFERS from",
                            ipc_host, ipc_red);
                }
                (void)hc0;
                (void)dr0;
                cases++;
                free(h);
                free(want);
                free(st);
                free(ip);
            }
    if (bench_on && bench(split)) /* every rank, whatever its cases gave: collectives */
        bad++;
    px_comm_destroy(split);
    px_transport_set_device_memory(NULL, NULL);
    /* every rank's failures, so that the verdict is the job's, not rank 0's */
    int32_t mine = bad, all_bad = 0;
    if (px_allreduce(ctx->comm, &mine, &all_bad, 1, PX_INT32, PX_SUM, -1) != PX_OK) {
        fprintf(stderr, "rank %d: the final count of failed cases failed: %s\n", r,
                px_comm_last_error(ctx->comm));
        return 1;
    }
    if (r == 0)
        printf("px-ipc-check n=%d on %s: %d cases on each rank, %d failed on some rank: IPC and "
               "staged results %s the host path's bit for bit: %s\n", n, device, cases,
               (int)all_bad, all_bad ? "NOT all equal to" : "equal to", all_bad ? "FAIL" : "PASS");
    return all_bad ? 1 : 0;
}

/* The number of CUDA devices, asked in a child process: a CUDA runtime
 * started before px_launch's fork would be unusable in the ranks. */
static int devices_in_child(void)
{
    int st = 0;
    pid_t pid = fork();
    if (pid == 0)
        _exit(px_kernels_cuda_devices() > 0 ? 0 : 1);
    if (pid < 0 || waitpid(pid, &st, 0) != pid)
        return 0;
    return WIFEXITED(st) && WEXITSTATUS(st) == 0;
}

int main(int argc, char **argv)
{
    int n = 2;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "-n") && i + 1 < argc)
            n = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--device") && i + 1 < argc)
            device = argv[++i];
        else if (!strcmp(argv[i], "--protocol") && i + 1 < argc &&
                 (!strcmp(argv[i + 1], "sync") || !strcmp(argv[i + 1], "event")))
            setenv("PX_IPC_PROTOCOL", argv[++i], 1); /* before any px_env read */
        else if (!strcmp(argv[i], "--protocol") && i + 1 < argc) {
            fprintf(stderr, "px-ipc-check: --protocol %s: want sync or event\n", argv[i + 1]);
            return 2;
        } else if (!strcmp(argv[i], "--bench"))
            bench_on = 1;
        else {
            fprintf(stderr, "usage: px-ipc-check [-n RANKS] [--device cuda|cuda:K] "
                    "[--protocol sync|event] [--bench]\n");
            return 2;
        }
    }
    if (!px_kernels_have_cuda()) {
        printf("px-ipc-check: SKIP: this build has no CUDA backend\n");
        return 77;
    }
    if (devices_in_child() <= 0) {
        printf("px-ipc-check: SKIP: no CUDA device visible\n");
        return 77;
    }
    if (n < 2) {
        fprintf(stderr, "px-ipc-check: -n %d: need at least 2 ranks\n", n);
        return 2;
    }
    setenv("PX_SHM", "0", 1); /* the host path is the UCX ring the others sum like */
    px_launch_opts_t opts = {.use_watch = 1, .limit_s = 200};
    int failed = px_launch(n, rank_main, NULL, &opts, NULL);
    return failed ? 1 : 0;
}
