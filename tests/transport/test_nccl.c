/* test_nccl.c: the NCCL engine of device-buffer collectives
 * (transport/paths/nccl, px_devmem.h) on the CPU, with test doubles of
 * libnccl.so.2 (fake_nccl.c, through PX_NCCL_LIBRARY), of the device (its
 * "device memory" an arena of host memory the transport must stage or
 * hand to NCCL, never read) and of the device's streams (px_comm_device.h:
 * a GPU id per rank, fences that are done at once).
 *
 *   test_nccl badenv              PX_COLL_BACKEND is not auto/nccl/px: a
 *                                 communicator cannot be created
 *                                 (PX_ERR_INVALID_ARGUMENT).
 *   test_nccl fallback N TEXT     every rank's device all-reduce (sum and
 *                                 avg) is right, run by parallax's own
 *                                 paths, and the engine's reason has TEXT
 *                                 (the library absent, a symbol missing,
 *                                 init failing, a shared GPU, no device).
 *   test_nccl required N TEXT     the same where PX_COLL_BACKEND=nccl: the
 *                                 device all-reduce fails with
 *                                 PX_ERR_UNAVAILABLE naming TEXT.
 *   test_nccl world1              one rank on a working fake NCCL: the
 *                                 engine is NCCL, and every collective it
 *                                 maps (all-reduce sum/avg, reduce-scatter,
 *                                 all-gather, broadcast, all-to-all(-v))
 *                                 goes through the library with the right
 *                                 result; host buffers do not.
 *   test_nccl hostonly N          ranks of a CPU job (no device registered)
 *                                 under PX_COLL_BACKEND=nccl: their host
 *                                 collectives run as ever, no engine is
 *                                 chosen and NCCL is never loaded.
 *   test_nccl stuck               one rank on a working fake NCCL whose
 *                                 collective never finishes (its fence
 *                                 never fires): the all-reduce fails by its
 *                                 deadline (PX_ERR_TIMEOUT), the NCCL
 *                                 communicator is aborted, later device
 *                                 collectives fail naming the abort.
 *   test_nccl asyncerr            the same, NCCL reporting an asynchronous
 *                                 error: PX_ERR_PEER_FAILURE naming NCCL's
 *                                 text, well before the deadline.
 *   test_nccl peerdeath           two ranks on NCCL, neither collective
 *                                 finishing: rank 1 gives up by its short
 *                                 deadline and exits; rank 0 fails with
 *                                 PX_ERR_PEER_FAILURE naming rank 1 long
 *                                 before its own deadline, aborting NCCL.
 * Environment of the doubles: FAKE_GPU=same gives every rank one GPU id;
 * FAKE_NO_COMM_DEVICE=1 registers no px_comm_device_t (a CPU rank);
 * FAKE_FENCE_NEVER=1 makes fences that never fire. */
#include <dlfcn.h>
#include <poll.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include "px_coll.h"
#include "px_devmem.h"
#include "px_env.h"
#include "px_launch.h"
#include "px_reduce.h"
#include "px_time.h"

#define ARENA_BYTES ((size_t)8 << 20)

static char *arena;
static size_t arena_used;
static int my_rank;

#define FAIL(...)                                                                          \
    do {                                                                                   \
        fprintf(stderr, "rank %d: ", my_rank);                                             \
        fprintf(stderr, __VA_ARGS__);                                                      \
        fprintf(stderr, "\n");                                                             \
        return 1;                                                                          \
    } while (0)

/* --- the device double ----------------------------------------------------- */

static int fake_is_device(const void *p)
{
    return arena && (const char *)p >= arena && (const char *)p < arena + ARENA_BYTES;
}

static void *fake_alloc(size_t bytes)
{
    size_t b = (bytes + 255) & ~(size_t)255;
    if (arena_used + b > ARENA_BYTES)
        return NULL;
    arena_used += b;
    memset(arena + arena_used - b, 0, b);
    return arena + arena_used - b;
}

static void fake_free(void *p)
{
    (void)p; /* a bump allocator */
}

static void fake_copy(void *dst, const void *src, size_t bytes)
{
    memmove(dst, src, bytes);
}

static void fake_sync(void) {}

static void fake_avg(void *dst, size_t count, int dtype, int n)
{
    px_reduce_avg_finish((px_dtype_t)dtype, dst, count, n);
}

static const px_kernel_ops_t fake_ops = {
    .name = "fake-device",
    .mem_alloc = fake_alloc,
    .mem_free = fake_free,
    .mem_copy = fake_copy,
    .mem_copy_to_host = fake_copy,
    .mem_copy_from_host = fake_copy,
    .synchronize = fake_sync,
    .reduce_avg_finish = fake_avg,
};

static int gpu_id(char *buf, size_t len)
{
    const char *same = getenv("FAKE_GPU");
    snprintf(buf, len, "0000:%02x:00.0", same && !strcmp(same, "same") ? 0 : my_rank + 1);
    return 0;
}

static void *stream(void)
{
    return (void *)(uintptr_t)0x5; /* the doubles never look at it */
}

static long fences_issued;

static void *fence_issue(void)
{
    int *fd = malloc(sizeof *fd);
    uint64_t one = 1;
    if (!fd)
        return NULL;
    *fd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
    if (*fd < 0 || (!getenv("FAKE_FENCE_NEVER") && /* the fake's work is done */
                    write(*fd, &one, sizeof one) != sizeof one)) {
        free(fd);
        return NULL;
    }
    fences_issued++;
    return fd;
}

static int fence_fd(const void *f)
{
    return *(const int *)f;
}

static void fence_release(void *f)
{
    close(*(int *)f);
    free(f);
}

static const px_comm_device_t fake_dev = {"fake", gpu_id, stream, fence_issue, fence_fd,
                                          fence_release};

static int setup_device(int rank)
{
    my_rank = rank;
    arena = malloc(ARENA_BYTES);
    if (!arena)
        return -1;
    px_transport_set_device_memory(&fake_ops, fake_is_device);
    if (!getenv("FAKE_NO_COMM_DEVICE"))
        px_transport_set_comm_device(&fake_dev);
    return 0;
}

/* A device all-reduce of `n` int32 (rank r's element i: i + r) with `op`;
 * *got the result's element 7 (host). */
static px_status_t dev_allreduce(px_comm_t *c, px_redop_t op, int32_t *got)
{
    const int n = 1000;
    int32_t h[1000];
    int32_t *d = fake_alloc(sizeof h);
    px_status_t st;

    for (int i = 0; i < n; i++)
        h[i] = i + px_comm_rank(c);
    fake_copy(d, h, sizeof h);
    st = px_allreduce(c, d, d, (uint64_t)n, PX_INT32, op, -1);
    fake_copy(h, d, sizeof h);
    *got = h[7];
    return st;
}

/* --- modes ------------------------------------------------------------------- */

static const char *want_text;

static int fallback_rank(px_launch_rank_t *ctx)
{
    const int n = ctx->world;
    char why[256];
    int32_t got;

    if (setup_device(ctx->rank))
        FAIL("no memory");
    if (px_comm_device_engine(ctx->comm, why, sizeof why) != -1)
        FAIL("the engine was decided before any device collective");
    if (dev_allreduce(ctx->comm, PX_SUM, &got) != PX_OK)
        FAIL("device all-reduce: %s", px_comm_last_error(ctx->comm));
    if (got != 7 * n + n * (n - 1) / 2)
        FAIL("device all-reduce: element 7 is %d, want %d", got, 7 * n + n * (n - 1) / 2);
    if (px_comm_device_engine(ctx->comm, why, sizeof why) != 0)
        FAIL("the engine is not parallax's own paths (%s)", why);
    if (!strstr(why, want_text))
        FAIL("the engine's reason \"%s\" does not say \"%s\"", why, want_text);
    if (dev_allreduce(ctx->comm, PX_AVG, &got) != PX_OK || got != (7 * n + n * (n - 1) / 2) / n)
        FAIL("device avg all-reduce: %d (%s)", got, px_comm_last_error(ctx->comm));
    if (fences_issued)
        FAIL("%ld fences issued: a collective went to NCCL", fences_issued);
    return 0;
}

static int required_rank(px_launch_rank_t *ctx)
{
    char why[256];
    int32_t got;
    px_status_t st;

    if (setup_device(ctx->rank))
        FAIL("no memory");
    st = dev_allreduce(ctx->comm, PX_SUM, &got);
    if (st != PX_ERR_UNAVAILABLE)
        FAIL("device all-reduce under PX_COLL_BACKEND=nccl: %s, want PX_ERR_UNAVAILABLE",
             px_status_str(st));
    if (!strstr(px_comm_last_error(ctx->comm), "NCCL") ||
        !strstr(px_comm_last_error(ctx->comm), want_text))
        FAIL("the error \"%s\" does not name NCCL and \"%s\"", px_comm_last_error(ctx->comm),
             want_text);
    if (px_comm_device_engine(ctx->comm, why, sizeof why) != 0 || !strstr(why, want_text))
        FAIL("the engine's reason \"%s\" does not say \"%s\"", why, want_text);
    return 0;
}

/* A counter of the fake library (the same handle the engine opened). */
static long *fake_counter(const char *name)
{
    void *h = dlopen(px_env_str("PX_NCCL_LIBRARY"), RTLD_NOW | RTLD_NOLOAD);
    return h ? dlsym(h, name) : NULL;
}

static long *fake_calls(void)
{
    return fake_counter("fake_nccl_calls");
}

/* A collective NCCL never finishes: it fails with `want` (the deadline,
 * or NCCL's asynchronous error) within `within_ms`, the NCCL communicator
 * is aborted once, and the next device collective fails naming it. */
static int stuck_rank(px_launch_rank_t *ctx, px_status_t want, const char *text, int within_ms)
{
    char why[256];
    float *d;
    long *aborts;
    px_status_t st;
    px_coll_opts_t o = {PX_ALGO_AUTO, 400};

    if (setup_device(ctx->rank))
        FAIL("no memory");
    d = fake_alloc(4096);
    int64_t t0 = px_time_mono_ms();
    st = px_allreduce_opts(ctx->comm, d, d, 1024, PX_FLOAT32, PX_SUM, &o);
    int64_t took = px_time_mono_ms() - t0;
    if (st != want)
        FAIL("a stuck NCCL all-reduce gave %s, want %s (%s)", px_status_str(st),
             px_status_str(want), px_comm_last_error(ctx->comm));
    if (took > within_ms)
        FAIL("it took %lld ms, want at most %d", (long long)took, within_ms);
    if (!strstr(px_comm_last_error(ctx->comm), text))
        FAIL("the error \"%s\" does not say \"%s\"", px_comm_last_error(ctx->comm), text);
    aborts = fake_counter("fake_nccl_aborts");
    if (!aborts || *aborts != 1)
        FAIL("ncclCommAbort was called %ld times, want once", aborts ? *aborts : -1);
    if (px_comm_device_engine(ctx->comm, why, sizeof why) != 0 || !strstr(why, "aborted"))
        FAIL("after the abort the engine says \"%s\"", why);
    if (px_allreduce_opts(ctx->comm, d, d, 1024, PX_FLOAT32, PX_SUM, &o) == PX_OK)
        FAIL("a device all-reduce after the abort succeeded");
    return 0;
}

static int host_only(px_launch_rank_t *ctx)
{
    const int n = ctx->world;
    int32_t mine[64], all[64 * 8];
    char why[64];

    my_rank = ctx->rank;
    if (n > 8)
        FAIL("at most 8 ranks");
    for (int i = 0; i < 64; i++)
        mine[i] = i + ctx->rank;
    if (px_allreduce(ctx->comm, mine, mine, 64, PX_INT32, PX_SUM, -1) != PX_OK ||
        mine[5] != 5 * n + n * (n - 1) / 2)
        FAIL("host all-reduce: %s", px_comm_last_error(ctx->comm));
    if (px_allgather(ctx->comm, mine, all, 64, PX_INT32, NULL) != PX_OK ||
        memcmp(all + 64 * (n - 1), mine, sizeof mine))
        FAIL("host all-gather: %s", px_comm_last_error(ctx->comm));
    if (px_comm_device_engine(ctx->comm, why, sizeof why) != -1)
        FAIL("an engine was chosen for host collectives: %s", why);
    if (dlopen(px_env_str("PX_NCCL_LIBRARY"), RTLD_NOW | RTLD_NOLOAD))
        FAIL("NCCL was loaded by a CPU rank");
    return 0;
}

static int stuck_deadline(px_launch_rank_t *ctx)
{
    return stuck_rank(ctx, PX_ERR_TIMEOUT, "timeout", 5000);
}

static int peer_death(px_launch_rank_t *ctx)
{
    float *d;
    long *aborts;
    px_status_t st;
    px_coll_opts_t o = {PX_ALGO_AUTO, ctx->rank == 1 ? 300 : 30000};

    if (setup_device(ctx->rank))
        FAIL("no memory");
    d = fake_alloc(4096);
    int64_t t0 = px_time_mono_ms();
    st = px_allreduce_opts(ctx->comm, d, d, 1024, PX_FLOAT32, PX_SUM, &o);
    int64_t took = px_time_mono_ms() - t0;
    if (ctx->rank == 1) /* gave up: its exit is rank 0's news */
        return st == PX_ERR_TIMEOUT ? 0 : 1;
    if (st != PX_ERR_PEER_FAILURE || !strstr(px_comm_last_error(ctx->comm), "rank 1"))
        FAIL("rank 1 left: the NCCL all-reduce gave %s (%s), want a peer failure naming rank 1",
             px_status_str(st), px_comm_last_error(ctx->comm));
    if (took > 15000)
        FAIL("it took %lld ms: the deadline, not rank 1's death, ended it", (long long)took);
    aborts = fake_counter("fake_nccl_aborts");
    if (!aborts || *aborts != 1)
        FAIL("ncclCommAbort was called %ld times, want once", aborts ? *aborts : -1);
    return 0;
}

static int stuck_async(px_launch_rank_t *ctx)
{
    return stuck_rank(ctx, PX_ERR_PEER_FAILURE, "remote process exited", 300);
}

static int world1_rank(px_launch_rank_t *ctx)
{
    const uint64_t cnt = 1000;
    char why[256];
    int32_t got;
    long *calls, before;
    float h[1000], *d, *e;

    if (setup_device(ctx->rank))
        FAIL("no memory");
    if (dev_allreduce(ctx->comm, PX_SUM, &got) != PX_OK || got != 7)
        FAIL("device all-reduce: %d (%s)", got, px_comm_last_error(ctx->comm));
    if (px_comm_device_engine(ctx->comm, why, sizeof why) != 1)
        FAIL("the engine is not NCCL: %s", why);
    if (!strstr(why, "NCCL 2.28.3"))
        FAIL("the engine's reason \"%s\" does not name the fake's version 2.28.3", why);
    calls = fake_calls();
    if (!calls || *calls != 1)
        FAIL("the fake NCCL saw %ld calls, want the 1 all-reduce", calls ? *calls : -1);
    before = *calls;
    /* avg over one rank: NCCL's sum, divided once on the device */
    if (dev_allreduce(ctx->comm, PX_AVG, &got) != PX_OK || got != 7)
        FAIL("device avg all-reduce: %d", got);
    d = fake_alloc(sizeof h);
    e = fake_alloc(sizeof h);
    for (uint64_t i = 0; i < cnt; i++)
        h[i] = (float)i * 0.5f;
    fake_copy(d, h, sizeof h);
    uint64_t counts[1] = {cnt}, displs[1] = {0};
    if (px_reduce_scatter(ctx->comm, d, e, cnt, PX_FLOAT32, PX_SUM, NULL) != PX_OK ||
        memcmp(e, h, sizeof h))
        FAIL("reduce-scatter: %s", px_comm_last_error(ctx->comm));
    memset(e, 0, sizeof h);
    if (px_allgather(ctx->comm, d, e, cnt, PX_FLOAT32, NULL) != PX_OK || memcmp(e, h, sizeof h))
        FAIL("all-gather: %s", px_comm_last_error(ctx->comm));
    if (px_bcast(ctx->comm, d, cnt, PX_FLOAT32, 0, NULL) != PX_OK || memcmp(d, h, sizeof h))
        FAIL("broadcast: %s", px_comm_last_error(ctx->comm));
    memset(e, 0, sizeof h);
    if (px_alltoall(ctx->comm, d, e, cnt, PX_FLOAT32, NULL) != PX_OK || memcmp(e, h, sizeof h))
        FAIL("all-to-all: %s", px_comm_last_error(ctx->comm));
    memset(e, 0, sizeof h);
    if (px_alltoallv(ctx->comm, d, counts, displs, e, counts, displs, PX_FLOAT32, NULL) != PX_OK ||
        memcmp(e, h, sizeof h))
        FAIL("all-to-all-v: %s", px_comm_last_error(ctx->comm));
    /* avg, reduce-scatter, all-gather, broadcast: one call each; the
     * all-to-alls a send and a receive each */
    if (*calls - before != 4 + 2 * 2)
        FAIL("the fake NCCL saw %ld calls, want 8", *calls - before);
    before = *calls;
    /* host buffers never reach NCCL */
    if (px_allreduce(ctx->comm, h, h, cnt, PX_FLOAT32, PX_SUM, -1) != PX_OK || *calls != before)
        FAIL("a host all-reduce went to NCCL (%ld calls)", *calls - before);
    if (fences_issued != 7) /* two all-reduces and five others */
        FAIL("%ld fences issued, want one per NCCL collective (7)", fences_issued);
    return 0;
}

static int badenv(void)
{
    px_transport_t *tr;
    px_comm_t *c = NULL;
    px_status_t st;

    if (px_transport_create(&tr) != PX_OK)
        FAIL("transport");
    st = px_comm_create_self(tr, "node", &c);
    if (st != PX_ERR_INVALID_ARGUMENT || c)
        FAIL("PX_COLL_BACKEND=%s: communicator creation gave %s, want PX_ERR_INVALID_ARGUMENT",
             px_env_str("PX_COLL_BACKEND"), px_status_str(st));
    px_transport_destroy(tr);
    return 0;
}

int main(int argc, char **argv)
{
    px_launch_opts_t opts = {.use_watch = 1, .limit_s = 60};
    int n = argc > 2 ? atoi(argv[2]) : 1;

    if (argc < 2) {
        fprintf(stderr, "usage: test_nccl badenv|fallback N TEXT|required N TEXT|world1\n");
        return 2;
    }
    want_text = argc > 3 ? argv[3] : "";
    if (!strcmp(argv[1], "badenv"))
        return badenv();
    if (!strcmp(argv[1], "fallback"))
        return px_launch(n, fallback_rank, NULL, &opts, NULL) ? 1 : 0;
    if (!strcmp(argv[1], "required"))
        return px_launch(n, required_rank, NULL, &opts, NULL) ? 1 : 0;
    if (!strcmp(argv[1], "world1"))
        return px_launch(1, world1_rank, NULL, &opts, NULL) ? 1 : 0;
    if (!strcmp(argv[1], "hostonly"))
        return px_launch(n, host_only, NULL, &opts, NULL) ? 1 : 0;
    if (!strcmp(argv[1], "peerdeath"))
        return px_launch(2, peer_death, NULL, &opts, NULL) ? 1 : 0;
    if (!strcmp(argv[1], "stuck"))
        return px_launch(1, stuck_deadline, NULL, &opts, NULL) ? 1 : 0;
    if (!strcmp(argv[1], "asyncerr"))
        return px_launch(1, stuck_async, NULL, &opts, NULL) ? 1 : 0;
    fprintf(stderr, "test_nccl: unknown mode %s\n", argv[1]);
    return 2;
}
