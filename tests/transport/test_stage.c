/* test_stage.c: the collectives on device buffers, staged in chunks
 * (transport/px_stage.c), on a fake device, against the host path bit for
 * bit.
 *
 * The fake device is test_devmem's: an arena that is PROT_NONE except inside
 * the fake backend's copy functions, so a direct read or write of "device"
 * memory by the transport crashes the rank. Each case runs one collective
 * twice on the same inputs, once on host buffers and once on device
 * buffers, and compares the outputs byte for byte (random floats of mixed
 * magnitudes, where a different summation order shows), and, with
 * integer-valued floats, against the exact sums as well.
 *
 *   test_stage matrix N  all-reduce (auto, ring, recursive doubling,
 *                        Rabenseifner; sum and avg; in place and out of
 *                        place), reduce-scatter (in place and out), all-gather
 *                        (in place), broadcast (first and last root),
 *                        all-to-all (linear and pairwise), at
 *                        counts 1 to 65539 that do not divide by ranks x
 *                        chunks, with the staging chunk smaller than, equal
 *                        to and larger than the buffer; checks the copies
 *                        went chunk by chunk.
 *   test_stage kill N    rank N-1 kills itself in the middle of a staged
 *                        all-reduce of many chunks: every survivor fails
 *                        with PX_ERR_PEER_FAILURE naming it within a bound,
 *                        and its communicator keeps failing (no hang; run
 *                        under ASan for leaks).
 *
 *   test_stage deadline N  rank N-1 never joins a staged all-reduce: the
 *                        others fail on their 1 s deadline (PX_ERR_TIMEOUT)
 *                        naming it, with no copy left in flight.
 *   ... async            the same with a backend of asynchronous copies
 *                        (made only when waited for: a buffer used before
 *                        its copy was waited for shows as a difference).
 *
 * usage: test_stage matrix|kill|deadline N [async]   (ranks; forked by px_launch) */
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "px_coll.h"
#include "px_devmem.h"
#include "px_kernels.h"
#include "px_launch.h"

#define ARENA_BYTES ((size_t)16 << 20)

static char *arena;
static size_t arena_used;
static long copies_to_host, copies_from_host;

static int fake_is_device(const void *p)
{
    return (const char *)p >= arena && (const char *)p < arena + ARENA_BYTES;
}

static void fake_copy(void *dst, const void *src, size_t bytes)
{
    mprotect(arena, ARENA_BYTES, PROT_READ | PROT_WRITE);
    memmove(dst, src, bytes);
    mprotect(arena, ARENA_BYTES, PROT_NONE);
}

static void fake_to_host(void *h, const void *d, size_t bytes)
{
    copies_to_host++;
    fake_copy(h, d, bytes);
}

static void fake_from_host(void *d, const void *h, size_t bytes)
{
    copies_from_host++;
    fake_copy(d, h, bytes);
}

static void fake_sync(void) {}

static const px_kernel_ops_t fake_ops = {
    .name = "fake-device",
    .mem_copy = fake_copy,
    .mem_copy_to_host = fake_to_host,
    .mem_copy_from_host = fake_from_host,
    .synchronize = fake_sync,
};

/* "async": the backend also has asynchronous copies, which this fake makes
 * only when they are waited for (in issue order, up to the ticket), so a
 * staged buffer read or reused before its copy was waited for holds stale
 * data and the comparison with the host path fails. */
typedef struct {
    void *dst;
    const void *src;
    size_t bytes;
    int to_host;
} qcopy_t;
static qcopy_t *queue;
static size_t q_cap;
static uint64_t q_base, q_issued, q_done; /* queue[i] is ticket q_base + 1 + i */

static uint64_t fake_copy_async(void *dst, const void *src, size_t bytes, int to_host)
{
    if (q_issued - q_base == q_cap) {
        size_t cap = q_cap ? 2 * q_cap : 64;
        qcopy_t *q = realloc(queue, cap * sizeof *q);
        if (!q)
            return 0; /* the caller copies synchronously */
        queue = q;
        q_cap = cap;
    }
    queue[q_issued - q_base] = (qcopy_t){dst, src, bytes, to_host};
    return ++q_issued;
}

static void fake_copy_wait(uint64_t t)
{
    while (q_done < t && q_done < q_issued) {
        qcopy_t *c = &queue[q_done - q_base];
        if (c->to_host)
            fake_to_host(c->dst, c->src, c->bytes);
        else
            fake_from_host(c->dst, c->src, c->bytes);
        q_done++;
    }
    if (q_done == q_issued)
        q_base = q_done; /* all made: the queue starts over */
}

static const px_kernel_ops_t fake_async_ops = {
    .name = "fake-device-async",
    .mem_copy = fake_copy,
    .mem_copy_to_host = fake_to_host,
    .mem_copy_from_host = fake_from_host,
    .synchronize = fake_sync,
    .mem_copy_async = fake_copy_async,
    .copy_wait = fake_copy_wait,
};
static const px_kernel_ops_t *ops = &fake_ops;

static void *dev_alloc(size_t bytes)
{
    size_t b = (bytes + 63) & ~(size_t)63;
    if (arena_used + b > ARENA_BYTES)
        return NULL;
    void *p = arena + arena_used;
    arena_used += b;
    return p;
}

#include "coll_cases.h"

static int one_case(px_comm_t *comm, int kind, px_algo_t algo, px_redop_t op, int root,
                    uint64_t cnt, size_t chunk, int ints, long *cases_p)
{
    const int r = px_comm_rank(comm), n = px_comm_size(comm);
    const int blocked_in = kind == K_RS || kind == K_RS_INPLACE || kind == K_AG || kind == K_A2A;
    const size_t in_n = blocked_in ? cnt * (size_t)n : cnt;
    const size_t out_n = kind == K_RS ? cnt : in_n;
    const int out_is_in = kind != K_AR && kind != K_RS && kind != K_A2A;
    size_t out_off = kind == K_RS_INPLACE ? (size_t)r * cnt : 0;
    size_t res_n = kind == K_RS_INPLACE ? cnt : out_n;
    float *hin = malloc(in_n * 4), *hout = malloc(out_n * 4), *got = malloc(in_n * 4);
    char what[160];
    int rc = 1;

    snprintf(what, sizeof what, "%s %s %s root %d count %llu chunk %zu %s", kind_names[kind],
             px_algo_name(algo), px_redop_name(op), root, (unsigned long long)cnt, chunk,
             ints ? "ints" : "random");
    if (!hin || !hout || !got)
        goto out;
    px_transport_set_stage_chunk(chunk);
    /* host path */
    fill(hin, in_n, kind, r, cnt, root, ints);
    if (run(comm, kind, algo, op, root, (char *)hin, (char *)hout, cnt) != PX_OK) {
        fprintf(stderr, "rank %d: %s: host run failed: %s\n", r, what, px_comm_last_error(comm));
        goto out;
    }
    const float *want = (out_is_in ? hin : hout) + out_off;
    /* device path */
    arena_used = 0;
    char *din = dev_alloc(in_n * 4), *dout = dev_alloc(out_n * 4);
    if (!din || !dout) {
        fprintf(stderr, "rank %d: %s: arena too small\n", r, what);
        goto out;
    }
    fill(got, in_n, kind, r, cnt, root, ints);
    fake_from_host(din, got, in_n * 4);
    long before = copies_to_host;
    if (run(comm, kind, algo, op, root, din, dout, cnt) != PX_OK) {
        fprintf(stderr, "rank %d: %s: device run failed: %s\n", r, what,
                px_comm_last_error(comm));
        goto out;
    }
    long loads = copies_to_host - before;
    fake_to_host(got, (out_is_in ? din : dout) + out_off * 4, res_n * 4);
    if (memcmp(got, want, res_n * 4)) {
        for (size_t i = 0; i < res_n; i++)
            if (memcmp(&got[i], &want[i], 4)) {
                fprintf(stderr, "rank %d: %s: element %zu is %.9g on the device path, %.9g on "
                        "the host path\n", r, what, i, got[i], want[i]);
                break;
            }
        goto out;
    }
    if (ints)
        for (size_t i = 0; i < res_n; i++) {
            float e = exact(kind, n, cnt, r, root, op, i);
            if (got[i] != e) {
                fprintf(stderr, "rank %d: %s: element %zu is %g, want %g\n", r, what, i, got[i],
                        e);
                goto out;
            }
        }
    /* chunk by chunk: at least one copy off the device per chunk of the
     * input this rank contributes (the root's alone for broadcast) */
    size_t mine = (kind == K_AG ? cnt : in_n) * 4;
    long min_loads = (long)((mine + chunk - 1) / chunk);
    if (kind == K_BCAST && r != root)
        min_loads = 0;
    if (loads < min_loads) {
        fprintf(stderr, "rank %d: %s: %ld copies off the device, want at least %ld (one per "
                "chunk)\n", r, what, loads, min_loads);
        goto out;
    }
    (*cases_p)++;
    rc = 0;
out:
    free(hin);
    free(hout);
    free(got);
    return rc;
}

static int rank_matrix(px_launch_rank_t *ctx)
{
    const int r = ctx->rank, n = ctx->world;
    static const uint64_t counts[] = {1, 13, 1000, 4097, 65539};
    static const px_algo_t algos[] = {PX_ALGO_AUTO, PX_ALGO_RING, PX_ALGO_RECURSIVE_DOUBLING,
                                      PX_ALGO_RABENSEIFNER};
    long cases = 0;

    arena = mmap(NULL, ARENA_BYTES, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (arena == MAP_FAILED)
        return 1;
    px_transport_set_device_memory(ops, fake_is_device);
    for (unsigned ci = 0; ci < sizeof counts / sizeof *counts; ci++) {
        uint64_t cnt = counts[ci];
        /* chunk smaller than the buffer (two sizes), equal to it, larger */
        size_t bytes = (size_t)cnt * 4 * (size_t)n;
        size_t chunks[] = {256, 4096, bytes, 4 * bytes + 4};
        for (unsigned ki = 0; ki < 4; ki++) {
            size_t chunk = chunks[ki];
            if (chunk == 256 && cnt > 4097)
                continue; /* thousands of chunks: covered by 4 KiB */
            for (int ints = 0; ints < 2; ints++) {
                for (unsigned ai = 0; ai < sizeof algos / sizeof *algos; ai++) {
                    px_redop_t op = ai == 1 && !ints ? PX_AVG : PX_SUM;
                    if (one_case(ctx->comm, ai % 2 ? K_AR_INPLACE : K_AR, algos[ai], op, 0, cnt,
                                 chunk, ints, &cases))
                        return 1;
                }
                if (one_case(ctx->comm, K_RS, PX_ALGO_AUTO, PX_SUM, 0, cnt, chunk, ints, &cases) ||
                    one_case(ctx->comm, K_RS_INPLACE, PX_ALGO_AUTO, ints ? PX_SUM : PX_AVG, 0, cnt,
                             chunk, ints, &cases) ||
                    one_case(ctx->comm, K_AG, PX_ALGO_AUTO, PX_SUM, 0, cnt, chunk, ints, &cases) ||
                    one_case(ctx->comm, K_BCAST, PX_ALGO_AUTO, PX_SUM, ints ? 0 : n - 1, cnt,
                             chunk, ints, &cases) ||
                    one_case(ctx->comm, K_A2A, ints ? PX_ALGO_PAIRWISE : PX_ALGO_AUTO, PX_SUM,
                             0, cnt, chunk, ints, &cases))
                    return 1;
            }
        }
    }
    /* a staged all-reduce whose count differs between ranks (rank 0 one
     * chunk, the others two): PX_ERR_MISMATCH everywhere, naming the count;
     * then one started and cancelled on every rank; then the communicator
     * still stages correctly */
    px_transport_set_stage_chunk(4096);
    arena_used = 0;
    float *dm = dev_alloc(4096 * 4);
    px_status_t st = px_allreduce(ctx->comm, dm, dm, r == 0 ? 1000 : 2000, PX_FLOAT32, PX_SUM,
                                  -1);
    if (st != PX_ERR_MISMATCH || !strstr(px_comm_last_error(ctx->comm), "count"))
        FAIL("staged all-reduce of different counts: %s (%s), want a mismatch naming the count",
             px_status_str(st), px_comm_last_error(ctx->comm));
    px_request_t *cr = NULL;
    if (px_allreduce_start(ctx->comm, dm, dm, 4096, PX_FLOAT32, PX_SUM, NULL, &cr) != PX_OK)
        FAIL("start before cancel");
    px_request_cancel(cr);
    if (q_done != q_issued)
        FAIL("a cancelled staged request left %llu copies in flight",
             (unsigned long long)(q_issued - q_done));
    if (one_case(ctx->comm, K_AR, PX_ALGO_RING, PX_SUM, 0, 4097, 4096, 1, &cases))
        FAIL("staged all-reduce after the mismatch and the cancel");
    /* reduce on device buffers has no staged form: refused on every rank,
     * and the communicator goes on */
    arena_used = 0;
    float *d = dev_alloc(64), h[4] = {1, 2, 3, 4};
    if (px_reduce(ctx->comm, d, d, 4, PX_FLOAT32, PX_SUM, 0, NULL) != PX_ERR_INVALID_ARGUMENT)
        FAIL("reduce on a device buffer was not refused");
    if (px_allreduce(ctx->comm, h, h, 4, PX_FLOAT32, PX_SUM, -1) != PX_OK || h[3] != 4.0f * n)
        FAIL("all-reduce after the refusal");
    /* px_comm_paths: the device collectives were staged, the host ones ran
     * the host algorithm over UCX (PX_SHM=0); a new communicator has taken
     * none; a short buffer is cut, with the whole length returned */
    char dpaths[32], hpaths[32], cut[4];
    px_comm_t *fresh = NULL;
    px_comm_paths(ctx->comm, 1, dpaths, sizeof(dpaths));
    px_comm_paths(ctx->comm, 0, hpaths, sizeof(hpaths));
    if (strcmp(dpaths, "stage") || strcmp(hpaths, "ucx"))
        FAIL("px_comm_paths: device '%s' host '%s', want 'stage' and 'ucx'", dpaths, hpaths);
    if (px_comm_paths(ctx->comm, 1, cut, sizeof(cut)) != 5 || strcmp(cut, "sta"))
        FAIL("px_comm_paths into 4 bytes: '%s'", cut);
    if (px_comm_split(ctx->comm, 0, r, &fresh) != PX_OK)
        FAIL("split");
    if (px_comm_paths(fresh, 1, dpaths, sizeof(dpaths)) != 0 ||
        px_comm_paths(fresh, 0, hpaths, sizeof(hpaths)) != 0 || *dpaths || *hpaths)
        FAIL("a new communicator's paths: device '%s' host '%s', want none", dpaths, hpaths);
    px_comm_destroy(fresh);
    px_transport_set_stage_chunk(0);
    px_transport_set_device_memory(NULL, NULL);
    munmap(arena, ARENA_BYTES);
    if (q_done != q_issued)
        FAIL("%llu asynchronous copies were never waited for",
             (unsigned long long)(q_issued - q_done));
    free(queue);
    if (r == 0)
        printf("stage matrix n=%d (%s): %ld cases equal to the host path bit for bit: PASS\n",
               n, ops->name, cases);
    return 0;
}

/* --- kill ------------------------------------------------------------------------ */

static int rank_kill(px_launch_rank_t *ctx)
{
    const int r = ctx->rank, n = ctx->world, victim = n - 1;
    const uint64_t cnt = 1u << 20; /* 4 MiB in 4 KiB chunks: 1024 chunks */
    char want[32];

    arena = mmap(NULL, ARENA_BYTES, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (arena == MAP_FAILED)
        return 1;
    px_transport_set_device_memory(ops, fake_is_device);
    px_transport_set_stage_chunk(4096);
    arena_used = 0;
    char *d = dev_alloc(cnt * 4);
    float *h = malloc(cnt * 4);
    if (!d || !h)
        return 1;
    for (uint64_t i = 0; i < cnt; i++)
        h[i] = 1.0f;
    fake_from_host(d, h, cnt * 4);
    free(h);
    px_coll_opts_t o = {PX_ALGO_RING, 60000};
    px_request_t *req;
    if (px_allreduce_start(ctx->comm, d, d, cnt, PX_FLOAT32, PX_SUM, &o, &req) != PX_OK)
        FAIL("start");
    long stores0 = copies_from_host;
    if (r == victim) {
        /* a few chunks in, then die without a word */
        int done = 0;
        while (!done && copies_from_host - stores0 < 20 * n)
            if (px_test(req, &done) != PX_OK)
                FAIL("victim's test failed");
        if (done)
            FAIL("the all-reduce finished before the victim died");
        kill(getpid(), SIGKILL);
        pause();
    }
    struct timespec t0, t1;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    px_status_t status = px_wait(req, -1);
    clock_gettime(CLOCK_MONOTONIC, &t1);
    double s = (double)(t1.tv_sec - t0.tv_sec) + 1e-9 * (double)(t1.tv_nsec - t0.tv_nsec);
    snprintf(want, sizeof want, "rank %d", victim);
    printf("rank %d: %s after %.2f s and %ld chunk copies back: %s\n", r, px_status_str(status),
           s, copies_from_host - stores0, px_comm_last_error(ctx->comm));
    if (status != PX_ERR_PEER_FAILURE || !strstr(px_comm_last_error(ctx->comm), want))
        FAIL("want a peer failure naming %s, got %s: %s", want, px_status_str(status),
             px_comm_last_error(ctx->comm));
    if (copies_from_host - stores0 == 0 || copies_from_host - stores0 >= (long)(cnt * 4 / 4096))
        FAIL("the failure did not come mid-way (%ld chunk copies back)",
             copies_from_host - stores0);
    if (s > 30)
        FAIL("the failure took %.1f s", s);
    if (px_barrier(ctx->comm, -1) == PX_OK)
        FAIL("barrier on a failed communicator succeeded");
    px_transport_set_stage_chunk(0);
    px_transport_set_device_memory(NULL, NULL);
    munmap(arena, ARENA_BYTES);
    {
        struct timespec ts = {0, 300 * 1000 * 1000}; /* let the others see the victim first */
        nanosleep(&ts, NULL);
    }
    return 0;
}

/* --- deadline ---------------------------------------------------------------------- */

/* Rank N-1 never joins a staged all-reduce; the others, with a 1 s
 * deadline, fail with PX_ERR_TIMEOUT naming it among the ranks they wait
 * for, within a bound, with no staging copy left in flight. */
static int rank_deadline(px_launch_rank_t *ctx)
{
    const int r = ctx->rank, n = ctx->world, late = n - 1;
    const uint64_t cnt = 1u << 16;
    char want[16];

    if (r == late) {
        struct timespec ts = {4, 0};
        nanosleep(&ts, NULL);
        return 0;
    }
    arena = mmap(NULL, ARENA_BYTES, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (arena == MAP_FAILED)
        return 1;
    px_transport_set_device_memory(ops, fake_is_device);
    px_transport_set_stage_chunk(4096);
    arena_used = 0;
    char *d = dev_alloc(cnt * 4);
    px_coll_opts_t o = {PX_ALGO_RING, 1000};
    struct timespec t0, t1;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    px_status_t status = px_allreduce_opts(ctx->comm, d, d, cnt, PX_FLOAT32, PX_SUM, &o);
    clock_gettime(CLOCK_MONOTONIC, &t1);
    double s = (double)(t1.tv_sec - t0.tv_sec) + 1e-9 * (double)(t1.tv_nsec - t0.tv_nsec);
    const char *err = px_comm_last_error(ctx->comm);
    const char *list = strstr(err, "rank(s) ");
    snprintf(want, sizeof want, "%d", late);
    printf("rank %d: %s after %.2f s: %s\n", r, px_status_str(status), s, err);
    if (status != PX_ERR_TIMEOUT || !list || !strstr(list, want))
        FAIL("want a timeout naming rank %d, got %s: %s", late, px_status_str(status), err);
    if (s < 0.9 || s > 5)
        FAIL("the 1 s deadline fired after %.2f s", s);
    if (q_done != q_issued)
        FAIL("%llu staging copies left in flight", (unsigned long long)(q_issued - q_done));
    px_transport_set_stage_chunk(0);
    px_transport_set_device_memory(NULL, NULL);
    munmap(arena, ARENA_BYTES);
    return 0;
}

int main(int argc, char **argv)
{
    const char *what = argc > 1 ? argv[1] : "matrix";
    int n = argc > 2 ? atoi(argv[2]) : 2;
    if (argc > 3 && !strcmp(argv[3], "async"))
        ops = &fake_async_ops;
    px_launch_opts_t opts = {.use_watch = 1, .limit_s = 240};
    int failed;

    setvbuf(stdout, NULL, _IOLBF, 0);
    if (!strcmp(what, "matrix")) {
        failed = px_launch(n, rank_matrix, NULL, &opts, NULL);
    } else if (!strcmp(what, "deadline")) {
        failed = px_launch(n, rank_deadline, NULL, &opts, NULL);
        if (!failed)
            printf("stage deadline n=%d: every rank that joined timed out naming rank %d: "
                   "PASS\n", n, n - 1);
    } else if (!strcmp(what, "kill")) {
        int st[64] = {0};
        if (n < 2 || n > 64)
            return 2;
        failed = px_launch(n, rank_kill, NULL, &opts, st);
        /* the victim alone fails, killed */
        if (failed == 1 && WIFSIGNALED(st[n - 1]) && WTERMSIG(st[n - 1]) == SIGKILL) {
            printf("stage kill n=%d: every survivor failed naming rank %d: PASS\n", n, n - 1);
            failed = 0;
        }
    } else {
        fprintf(stderr, "usage: %s matrix|kill|deadline N [async]\n", argv[0]);
        return 2;
    }
    if (failed)
        fprintf(stderr, "FAIL: %d rank(s) failed\n", failed);
    return failed ? 1 : 0;
}
