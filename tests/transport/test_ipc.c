/* test_ipc.c: collectives on device buffers between the ranks of one node
 * through the peers' mapped device memory (transport/px_ipc.c), on a fake
 * device with the kernel table's IPC ops, against the staged path and the
 * host path bit for bit.
 *
 * The fake device: each rank's "device memory" is a POSIX shared-memory
 * object mapped PROT_NONE, readable and writable only inside the fake
 * backend's ops (copies, reductions), so a direct access by the transport
 * crashes the rank. An IPC handle is the object's name plus an offset;
 * ipc_open maps the peer's object (PROT_NONE too, cached with a reference
 * count); reduce is px_reduce_apply on the arenas with the protection
 * lifted. The launcher unlinks every rank's object at the end.
 *
 *   test_ipc matrix N    every collective (all-reduce ring / auto, sum and
 *                        avg, in place and out; reduce-scatter in and out;
 *                        all-gather in place; broadcast first and last
 *                        root; all-to-all) at counts 1 to 65539 and chunks
 *                        smaller than, equal to and larger than the buffer:
 *                        the IPC communicator's result equals the staged
 *                        communicator's and the host path's bit for bit
 *                        (random floats) and the exact sums (integers), and
 *                        it copied nothing through host memory.
 *   test_ipc fallback N  rank 1's backend has no IPC ops: every rank stages.
 *   test_ipc openfail N  rank N-1 cannot open its peers' handles: every rank
 *                        stages.
 *   test_ipc nodes N     two fake nodes: every rank stages.
 *   test_ipc kill N      rank N-1 dies in the middle of an IPC all-reduce:
 *                        every survivor fails naming it.
 *   test_ipc mismatch N  rank 0 all-reduces another count: PX_ERR_MISMATCH
 *                        on every rank naming both counts; then the
 *                        communicator still gives the right result.
 *
 *   test_ipc mixed N     matrix, where only rank 0 sets PX_IPC_PROTOCOL=event
 *                        and PX_IPC_CHUNK_BYTES=4096: every rank uses the
 *                        sync protocol and 4 KiB chunks.
 * With PX_IPC_PROTOCOL=event every mode runs the event protocol (shared
 * events for ordering, one-kernel reductions); the fake device checks that
 * each wait on a peer's event follows that peer's record, and the matrix
 * that a collective made no host wait but its last.
 *
 * usage: test_ipc matrix|mixed|fallback|openfail|nodes|kill|mismatch N */
#include <fcntl.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "plan.h"
#include "px_coll.h"
#include "px_devmem.h"
#include "px_env.h"
#include "px_kernels.h"
#include "px_launch.h"
#include "px_reduce.h"

#define ARENA_BYTES ((size_t)64 << 20)
#define SCRATCH_AT (ARENA_BYTES / 2) /* the transport's allocations live above */

static pid_t launcher;
static char *arena;
static size_t arena_used, scratch_used;
static long to_host, from_host, reduces, opens;
static long syncs, records, waits, multis; /* the event protocol's ops (and host waits) */
static int event_proto;                    /* PX_IPC_PROTOCOL=event */
static int fail_open;
static int must_stage; /* fallback modes: the IPC communicator must stage */

/* Mapped arenas: ours first, then the peers' (name, base, references). */
typedef struct {
    char name[64];
    char *base;
    int refs;
} map_t;
static map_t maps[64];
static int nmaps;

static void arena_name(char *buf, size_t len, int rank)
{
    snprintf(buf, len, "/px-ipctest-%ld-%d", (long)launcher, rank);
}

static void open_all(void)
{
    for (int i = 0; i < nmaps; i++)
        if (maps[i].base)
            mprotect(maps[i].base, ARENA_BYTES, PROT_READ | PROT_WRITE);
}

static void close_all(void)
{
    for (int i = 0; i < nmaps; i++)
        if (maps[i].base)
            mprotect(maps[i].base, ARENA_BYTES, PROT_NONE);
}

static int fake_is_device(const void *p)
{
    return (const char *)p >= arena && (const char *)p < arena + ARENA_BYTES;
}

static void fake_copy(void *dst, const void *src, size_t bytes)
{
    open_all();
    memmove(dst, src, bytes);
    close_all();
}

static void fake_to_host(void *h, const void *d, size_t bytes)
{
    to_host++;
    fake_copy(h, d, bytes);
}

static void fake_from_host(void *d, const void *h, size_t bytes)
{
    from_host++;
    fake_copy(d, h, bytes);
}

static void fake_sync(void)
{
    syncs++;
}

static void *fake_alloc(size_t bytes)
{
    size_t b = (bytes + 255) & ~(size_t)255;
    if (SCRATCH_AT + scratch_used + b > ARENA_BYTES)
        return NULL;
    scratch_used += b;
    return arena + SCRATCH_AT + scratch_used - b;
}

static void fake_free(void *p)
{
    (void)p; /* a bump allocator: the arena goes at exit */
}

static px_status_t fake_reduce(void *dst, const void *a, const void *b, size_t count, int dtype,
                               int op)
{
    reduces++;
    open_all();
    int ret = px_reduce_apply((px_dtype_t)dtype, (px_redop_t)op, dst, a, b, count);
    close_all();
    return ret ? PX_ERR_INVALID_ARGUMENT : PX_OK;
}

static void fake_avg(void *dst, size_t count, int dtype, int n)
{
    open_all();
    px_reduce_avg_finish((px_dtype_t)dtype, dst, count, n);
    close_all();
}

static px_status_t fake_ipc_handle(const void *ptr, px_ipc_handle_t *h)
{
    if (!fake_is_device(ptr))
        return PX_ERR_INVALID_ARGUMENT;
    memset(h, 0, sizeof(*h));
    snprintf((char *)h->bytes, sizeof(h->bytes), "%s", maps[0].name);
    h->offset = (uint64_t)((const char *)ptr - arena);
    return PX_OK;
}

static px_status_t fake_ipc_open(const px_ipc_handle_t *h, void **ptr_p)
{
    const char *name = (const char *)h->bytes;
    int i;

    if (fail_open)
        return PX_ERR_INTERNAL;
    for (i = 1; i < nmaps; i++)
        if (!strcmp(maps[i].name, name) && maps[i].base)
            break;
    if (i == nmaps) {
        int fd = shm_open(name, O_RDWR, 0);
        void *p;
        if (fd < 0 || nmaps == 64)
            return PX_ERR_INTERNAL;
        p = mmap(NULL, ARENA_BYTES, PROT_NONE, MAP_SHARED, fd, 0);
        close(fd);
        if (p == MAP_FAILED)
            return PX_ERR_INTERNAL;
        snprintf(maps[i].name, sizeof(maps[i].name), "%s", name);
        maps[i].base = p;
        maps[i].refs = 0;
        nmaps++;
    }
    opens++;
    maps[i].refs++;
    *ptr_p = maps[i].base + h->offset;
    return PX_OK;
}

static void fake_ipc_close(const px_ipc_handle_t *h)
{
    for (int i = 1; i < nmaps; i++)
        if (!strcmp(maps[i].name, (const char *)h->bytes) && maps[i].base &&
            --maps[i].refs == 0) {
            munmap(maps[i].base, ARENA_BYTES);
            maps[i].base = NULL;
        }
}

/* reduce_multi (px_kernels.h) as the chain of px_reduce_apply steps it
 * stands for, then AVG's division, into a host temporary and out to dst
 * and dst2. */
static px_status_t fake_reduce_multi(void *dst, void *dst2, const void *const *srcs, int m,
                                     size_t count, int dtype, int op)
{
    const size_t bytes = count * px_dtype_size((px_dtype_t)dtype);
    char *acc = malloc(bytes ? bytes : 1);
    int ret = 0;

    if (!acc || m < 1 || m > PX_REDUCE_MULTI_MAX) {
        free(acc);
        return PX_ERR_INVALID_ARGUMENT;
    }
    reduces++;
    multis++;
    open_all();
    memcpy(acc, srcs[0], bytes);
    for (int k = 1; k < m && !ret; k++)
        ret = px_reduce_apply((px_dtype_t)dtype, (px_redop_t)op, acc, srcs[k], acc, count);
    if (op == PX_AVG)
        px_reduce_avg_finish((px_dtype_t)dtype, acc, count, m);
    memcpy(dst, acc, bytes);
    if (dst2)
        memcpy(dst2, acc, bytes);
    close_all();
    free(acc);
    return ret ? PX_ERR_INVALID_ARGUMENT : PX_OK;
}

/* Fake interprocess events: every op here completes at once, so an event
 * is only a record count in the owner's arena (shared memory), and a wait
 * checks what the protocol promises: the n-th wait on a peer's event comes
 * after that peer's n-th record at least (the peer records before it rings
 * the doorbell we waited for). */
typedef struct {
    uint64_t *count; /* in the owner's arena */
    px_ipc_handle_t handle;
    long waited;
    int own;
} fake_event_t;

static px_status_t fake_event_create(void **event_p, px_ipc_handle_t *handle_p)
{
    fake_event_t *e = calloc(1, sizeof(*e));
    if (!e || !(e->count = fake_alloc(sizeof(uint64_t))) ||
        fake_ipc_handle(e->count, &e->handle) != PX_OK) {
        free(e);
        return PX_ERR_INTERNAL;
    }
    e->own = 1;
    *handle_p = e->handle;
    *event_p = e;
    return PX_OK;
}

static px_status_t fake_event_open(const px_ipc_handle_t *h, void **event_p)
{
    fake_event_t *e = calloc(1, sizeof(*e));
    void *p;
    if (!e || fake_ipc_open(h, &p) != PX_OK) {
        free(e);
        return PX_ERR_INTERNAL;
    }
    opens--; /* (the rings' opens are counted; this mapping is the ring's) */
    e->count = p;
    e->handle = *h;
    *event_p = e;
    return PX_OK;
}

static void fake_event_destroy(void *event)
{
    fake_event_t *e = event;
    if (!e)
        return;
    if (!e->own)
        fake_ipc_close(&e->handle);
    free(e);
}

static px_status_t fake_event_record(void *event)
{
    fake_event_t *e = event;
    records++;
    open_all();
    __atomic_add_fetch(e->count, 1, __ATOMIC_RELEASE);
    close_all();
    return PX_OK;
}

static px_status_t fake_stream_wait(void *event)
{
    fake_event_t *e = event;
    uint64_t have;
    waits++;
    open_all();
    have = __atomic_load_n(e->count, __ATOMIC_ACQUIRE);
    close_all();
    if (have < (uint64_t)++e->waited) {
        fprintf(stderr, "fake device: wait %ld on a peer's event that it recorded only %llu "
                "times\n", e->waited, (unsigned long long)have);
        return PX_ERR_INTERNAL;
    }
    return PX_OK;
}

static const px_kernel_ops_t ipc_ops = {
    .name = "fake-device-ipc",
    .mem_alloc = fake_alloc,
    .mem_free = fake_free,
    .mem_copy = fake_copy,
    .mem_copy_to_host = fake_to_host,
    .mem_copy_from_host = fake_from_host,
    .synchronize = fake_sync,
    .reduce = fake_reduce,
    .reduce_avg_finish = fake_avg,
    .ipc_handle = fake_ipc_handle,
    .ipc_open = fake_ipc_open,
    .ipc_close = fake_ipc_close,
    .reduce_multi = fake_reduce_multi,
    .event_ipc_create = fake_event_create,
    .event_ipc_open = fake_event_open,
    .event_destroy = fake_event_destroy,
    .event_record = fake_event_record,
    .stream_wait_event = fake_stream_wait,
};

/* The same device without the IPC ops (staging only). */
static const px_kernel_ops_t plain_ops = {
    .name = "fake-device",
    .mem_alloc = fake_alloc,
    .mem_free = fake_free,
    .mem_copy = fake_copy,
    .mem_copy_to_host = fake_to_host,
    .mem_copy_from_host = fake_from_host,
    .synchronize = fake_sync,
};

static int arena_create(int rank)
{
    char name[64];
    int fd;

    arena_name(name, sizeof name, rank);
    fd = shm_open(name, O_RDWR | O_CREAT | O_EXCL, 0600);
    if (fd < 0 || ftruncate(fd, (off_t)ARENA_BYTES) != 0)
        return -1;
    arena = mmap(NULL, ARENA_BYTES, PROT_NONE, MAP_SHARED, fd, 0);
    close(fd);
    if (arena == MAP_FAILED)
        return -1;
    snprintf(maps[0].name, sizeof(maps[0].name), "%s", name);
    maps[0].base = arena;
    maps[0].refs = 1;
    nmaps = 1;
    return 0;
}

static void *dev_alloc(size_t bytes)
{
    size_t b = (bytes + 63) & ~(size_t)63;
    if (arena_used + b > SCRATCH_AT)
        return NULL;
    arena_used += b;
    return arena + arena_used - b;
}

#include "coll_cases.h"

/* Runs one case on device buffers of `comm` into got (host copy of the
 * result); *staged_p: copies through host memory it made. */
static int dev_case(px_comm_t *comm, int kind, px_algo_t algo, px_redop_t op, int root,
                    uint64_t cnt, int ints, float *got, size_t in_n, size_t out_n,
                    size_t out_off, size_t res_n, long *staged_p, long *reduces_p)
{
    const int r = px_comm_rank(comm);
    const int out_is_in = kind != K_AR && kind != K_RS && kind != K_A2A;
    arena_used = 0;
    char *din = dev_alloc(in_n * 4), *dout = dev_alloc(out_n * 4);
    if (!din || !dout)
        FAIL("arena too small");
    fill(got, in_n, kind, r, cnt, root, ints);
    fake_from_host(din, got, in_n * 4);
    long th = to_host, fh = from_host, rd = reduces;
    px_status_t st = run(comm, kind, algo, op, root, din, dout, cnt);
    *staged_p = (to_host - th) + (from_host - fh);
    *reduces_p = reduces - rd;
    if (st != PX_OK)
        FAIL("%s: device run failed: %s", kind_names[kind], px_comm_last_error(comm));
    fake_to_host(got, (out_is_in ? din : dout) + out_off * 4, res_n * 4);
    return 0;
}

static int compare(int r, const char *what, const char *path, const float *got,
                   const float *want, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if (memcmp(&got[i], &want[i], 4)) {
            fprintf(stderr, "rank %d: %s: element %zu is %.9g on the %s path, %.9g on the host "
                    "path\n", r, what, i, got[i], path, want[i]);
            return 1;
        }
    return 0;
}

/* One case: host path on `hostc`, staged on `stagec`, IPC on `ipcc` (NULL:
 * skipped); expect_ipc: the IPC communicator must not stage. */
static int one_case(px_comm_t *hostc, px_comm_t *stagec, px_comm_t *ipcc, int kind,
                    px_algo_t algo, px_redop_t op, int root, uint64_t cnt, size_t chunk, int ints,
                    long *cases_p, long *ipc_cases_p)
{
    const int r = px_comm_rank(hostc), n = px_comm_size(hostc);
    const int blocked_in = kind == K_RS || kind == K_RS_INPLACE || kind == K_AG || kind == K_A2A;
    const size_t in_n = blocked_in ? cnt * (size_t)n : cnt;
    const size_t out_n = kind == K_RS ? cnt : in_n;
    const int out_is_in = kind != K_AR && kind != K_RS && kind != K_A2A;
    size_t out_off = kind == K_RS_INPLACE ? (size_t)r * cnt : 0;
    size_t res_n = kind == K_RS_INPLACE ? cnt : out_n;
    float *hin = malloc(in_n * 4), *hout = malloc(out_n * 4), *got = malloc(in_n * 4);
    const int reduction = kind == K_AR || kind == K_AR_INPLACE || kind == K_RS ||
                          kind == K_RS_INPLACE;
    const int expect_ipc = 1; /* every collective here goes through IPC */
    char what[160];
    long staged, nred;
    int rc = 1;

    snprintf(what, sizeof what, "%s %s %s root %d count %llu chunk %zu %s", kind_names[kind],
             px_algo_name(algo), px_redop_name(op), root, (unsigned long long)cnt, chunk,
             ints ? "ints" : "random");
    if (!hin || !hout || !got)
        goto out;
    px_transport_set_stage_chunk(chunk);
    fill(hin, in_n, kind, r, cnt, root, ints);
    if (run(hostc, kind, algo, op, root, (char *)hin, (char *)hout, cnt) != PX_OK) {
        fprintf(stderr, "rank %d: %s: host run failed\n", r, what);
        goto out;
    }
    const float *want = (out_is_in ? hin : hout) + out_off;
    if (dev_case(stagec, kind, algo, op, root, cnt, ints, got, in_n, out_n, out_off, res_n,
                 &staged, &nred) ||
        compare(r, what, "staged", got, want, res_n))
        goto out;
    if (ipcc) {
        long s0 = syncs, rec0 = records, w0 = waits, m0 = multis;
        if (dev_case(ipcc, kind, algo, op, root, cnt, ints, got, in_n, out_n, out_off, res_n,
                     &staged, &nred) ||
            compare(r, what, "IPC", got, want, res_n))
            goto out;
        /* the event protocol: no host wait but the one at the end, events
         * recorded and waited for, ring-order sums in one reduce_multi;
         * the sync protocol records none */
        if (!must_stage && event_proto &&
            (syncs - s0 > 1 || records == rec0 || waits == w0 ||
             ((kind == K_RS || kind == K_RS_INPLACE || (kind == K_AR && algo == PX_ALGO_RING)) &&
              nred && multis == m0))) {
            fprintf(stderr, "rank %d: %s: event protocol made %ld host waits, %ld records, %ld "
                    "waits, %ld one-kernel reductions\n", r, what, syncs - s0, records - rec0,
                    waits - w0, multis - m0);
            goto out;
        }
        if (!event_proto && (records != rec0 || multis != m0)) {
            fprintf(stderr, "rank %d: %s: sync protocol recorded %ld events\n", r, what,
                    records - rec0);
            goto out;
        }
        if (must_stage && (!staged || nred)) {
            fprintf(stderr, "rank %d: %s: the communicator went through IPC (%ld host copies, "
                    "%ld device reductions)\n", r, what, staged, nred);
            goto out;
        }
        /* (an all-reduce of fewer elements than ranks leaves some ranks
         * nothing to reduce) */
        if (!must_stage && expect_ipc &&
            (staged || (reduction && !nred && (kind > K_AR_INPLACE || cnt >= (uint64_t)n)))) {
            fprintf(stderr, "rank %d: %s: the IPC communicator staged (%ld host copies, %ld "
                    "device reductions)\n", r, what, staged, nred);
            goto out;
        }
        if (!must_stage && expect_ipc)
            (*ipc_cases_p)++;
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
    (*cases_p)++;
    rc = 0;
out:
    free(hin);
    free(hout);
    free(got);
    return rc;
}

/* Sets up the two device communicators: `stagec` decides without IPC ops
 * (staging for good), `ipcc` (a split of the world) with `ops`. */
static int setup(px_launch_rank_t *ctx, const px_kernel_ops_t *ops, px_comm_t **ipcc_p)
{
    const int r = ctx->rank;
    float *d;

    if (arena_create(r) != 0)
        FAIL("cannot create the fake device arena");
    px_transport_set_device_memory(&plain_ops, fake_is_device);
    arena_used = 0;
    d = dev_alloc(4096);
    px_coll_opts_t ring = {PX_ALGO_RING, -1}; /* a ring all-reduce decides the path */
    if (px_allreduce_opts(ctx->comm, d, d, 1024, PX_FLOAT32, PX_SUM, &ring) != PX_OK)
        FAIL("first device all-reduce on the world");
    px_transport_set_device_memory(ops, fake_is_device);
    if (px_comm_split(ctx->comm, 0, r, ipcc_p) != PX_OK)
        FAIL("split");
    return 0;
}

/* Three IPC collectives in flight at once on one communicator (as ZeRO-3's
 * prefetched gather beside a reduce-scatter): they share the scratch
 * rings, so they must run one after the other in start order, each with
 * the exact result (integer inputs). */
static int concurrent(px_comm_t *c, long *cases_p)
{
    const int r = px_comm_rank(c), n = px_comm_size(c);
    const uint64_t cnt = 5003;
    px_request_t *req[3];
    float *h = malloc(cnt * (size_t)n * 4);

    px_transport_set_stage_chunk(4096);
    arena_used = 0;
    char *a = dev_alloc(cnt * 4), *g = dev_alloc(cnt * (size_t)n * 4),
         *s = dev_alloc(cnt * (size_t)n * 4), *so = dev_alloc(cnt * 4);
    if (!h || !a || !g || !s || !so)
        FAIL("concurrent: no memory");
    for (uint64_t i = 0; i < cnt; i++)
        h[i] = val(r, i, 1);
    fake_from_host(a, h, cnt * 4);
    fake_from_host(g + (size_t)r * cnt * 4, h, cnt * 4);
    for (uint64_t i = 0; i < cnt * (uint64_t)n; i++)
        h[i] = val(r, i, 1);
    fake_from_host(s, h, cnt * (size_t)n * 4);
    px_coll_opts_t ring = {PX_ALGO_RING, -1};
    if (px_allreduce_start(c, a, a, cnt, PX_FLOAT32, PX_SUM, &ring, &req[0]) != PX_OK ||
        px_allgather_start(c, g + (size_t)r * cnt * 4, g, cnt, PX_FLOAT32, NULL, &req[1]) !=
            PX_OK ||
        px_reduce_scatter_start(c, s, so, cnt, PX_FLOAT32, PX_SUM, NULL, &req[2]) != PX_OK)
        FAIL("concurrent: start");
    if (px_wait_all(req, 3, -1) != PX_OK)
        FAIL("concurrent: %s", px_comm_last_error(c));
    fake_to_host(h, a, cnt * 4);
    for (uint64_t i = 0; i < cnt; i++)
        if (h[i] != exact(K_AR, n, cnt, r, 0, PX_SUM, i))
            FAIL("concurrent all-reduce: element %llu is %g", (unsigned long long)i, h[i]);
    fake_to_host(h, g, cnt * (size_t)n * 4);
    for (uint64_t i = 0; i < cnt * (uint64_t)n; i++)
        if (h[i] != val((int)(i / cnt), i % cnt, 1))
            FAIL("concurrent all-gather: element %llu is %g", (unsigned long long)i, h[i]);
    fake_to_host(h, so, cnt * 4);
    for (uint64_t i = 0; i < cnt; i++)
        if (h[i] != exact(K_RS, n, cnt, r, 0, PX_SUM, i))
            FAIL("concurrent reduce-scatter: element %llu is %g", (unsigned long long)i, h[i]);
    free(h);
    (*cases_p) += 3;
    return 0;
}

/* issue 12: the IPC scratch the transport holds (px_transport_device_scratch)
 * is what the plan predicts (planner/plan.h: PX_PLAN_IPC_SLOTS slots of
 * px_plan_ipc_slot_bytes(PX_IPC_SLOT_BYTES) per communicator through IPC):
 * one communicator (ipcc) now; a second one's first device collective adds
 * as much; destroying it gives it back (the peak stays). */
static int scratch_check(px_launch_rank_t *ctx, px_comm_t *ipcc)
{
    const int r = ctx->rank; /* FAIL names it */
    const uint64_t slot = px_plan_ipc_slot_bytes(px_env_int("PX_IPC_SLOT_BYTES"));
    const uint64_t one = px_plan_ipc_bytes(1, slot);
    uint64_t cur, peak;
    px_comm_t *c2;

    px_transport_device_scratch(&cur, &peak);
    if (cur != one || peak != one)
        FAIL("scratch with one IPC communicator: %llu now, %llu peak; the plan says %llu",
             (unsigned long long)cur, (unsigned long long)peak, (unsigned long long)one);
    if (px_comm_split(ctx->comm, 0, ctx->rank, &c2) != PX_OK)
        FAIL("split of the second communicator");
    arena_used = 0;
    float *d = dev_alloc(4096);
    if (px_allreduce(c2, d, d, 1024, PX_FLOAT32, PX_SUM, -1) != PX_OK)
        FAIL("first all-reduce on the second communicator: %s", px_comm_last_error(c2));
    px_transport_device_scratch(&cur, &peak);
    if (cur != px_plan_ipc_bytes(2, slot) || peak != cur)
        FAIL("scratch with two IPC communicators: %llu now, %llu peak; the plan says %llu",
             (unsigned long long)cur, (unsigned long long)peak,
             (unsigned long long)px_plan_ipc_bytes(2, slot));
    px_comm_destroy(c2);
    px_transport_device_scratch(&cur, &peak);
    if (cur != one || peak != px_plan_ipc_bytes(2, slot))
        FAIL("scratch after destroying one: %llu now, %llu peak", (unsigned long long)cur,
             (unsigned long long)peak);
    (void)ipcc;
    if (r == 0)
        printf("ipc scratch: %llu bytes per communicator (%d x %llu-byte slots), 1 -> 2 -> 1 "
               "communicators as the plan counts: PASS\n", (unsigned long long)one,
               PX_PLAN_IPC_SLOTS, (unsigned long long)slot);
    return 0;
}

static int rank_matrix(px_launch_rank_t *ctx)
{
    const int r = ctx->rank, n = ctx->world;
    static const uint64_t counts[] = {1, 13, 1000, 4097, 65539};
    long cases = 0, ipc_cases = 0;
    px_comm_t *ipcc;

    /* mixed: only rank 0 asks for the event protocol, so every rank must
     * sync (one_case checks that none records an event); and it asks for
     * 4 KiB chunks where the others ask for PX_IPC_CHUNK_BYTES: all must
     * cut the smaller, or their chunks would not pair */
    if (!strcmp(ctx->arg, "mixed") && r == 0) {
        setenv("PX_IPC_PROTOCOL", "event", 1);
        setenv("PX_IPC_CHUNK_BYTES", "4096", 1);
    }
    if (setup(ctx, &ipc_ops, &ipcc))
        return 1;
    for (unsigned ci = 0; ci < sizeof counts / sizeof *counts; ci++) {
        uint64_t cnt = counts[ci];
        size_t bytes = (size_t)cnt * 4 * (size_t)n;
        size_t chunks[] = {256, 4096, bytes, 4 * bytes + 4};
        for (unsigned ki = 0; ki < 4; ki++) {
            size_t chunk = chunks[ki];
            if (chunk == 256 && cnt > 4097)
                continue;
            for (int ints = 0; ints < 2; ints++) {
                px_redop_t avg = ints ? PX_SUM : PX_AVG;
                if (one_case(ctx->comm, ctx->comm, ipcc, K_AR, PX_ALGO_RING, avg, 0, cnt, chunk,
                             ints, &cases, &ipc_cases) ||
                    one_case(ctx->comm, ctx->comm, ipcc, K_AR_INPLACE, PX_ALGO_AUTO, PX_SUM, 0,
                             cnt, chunk, ints, &cases, &ipc_cases) ||
                    one_case(ctx->comm, ctx->comm, ipcc, K_RS, PX_ALGO_AUTO, PX_SUM, 0, cnt, chunk,
                             ints, &cases, &ipc_cases) ||
                    one_case(ctx->comm, ctx->comm, ipcc, K_RS_INPLACE, PX_ALGO_AUTO, avg, 0, cnt,
                             chunk, ints, &cases, &ipc_cases) ||
                    one_case(ctx->comm, ctx->comm, ipcc, K_AG, PX_ALGO_AUTO, PX_SUM, 0, cnt, chunk,
                             ints, &cases, &ipc_cases) ||
                    one_case(ctx->comm, ctx->comm, ipcc, K_BCAST, PX_ALGO_AUTO, PX_SUM,
                             ints ? 0 : n - 1, cnt, chunk, ints, &cases, &ipc_cases) ||
                    one_case(ctx->comm, ctx->comm, ipcc, K_A2A, PX_ALGO_AUTO, PX_SUM, 0, cnt,
                             chunk, ints, &cases, &ipc_cases))
                    return 1;
            }
        }
    }
    if (concurrent(ipcc, &cases))
        return 1;
    if (opens != n - 1)
        FAIL("%ld peer rings opened, want %d (once per peer)", opens, n - 1);
    if (scratch_check(ctx, ipcc))
        return 1;
    px_comm_destroy(ipcc);
    px_transport_set_device_memory(NULL, NULL);
    if (r == 0)
        printf("ipc matrix n=%d: %ld cases (%ld through IPC) equal to the staged and host paths "
               "bit for bit: PASS\n", n, cases, ipc_cases);
    return 0;
}

/* fallback / openfail / nodes: the IPC communicator must stage, correctly. */
static int rank_fallback(px_launch_rank_t *ctx)
{
    const int r = ctx->rank, n = ctx->world;
    const char *mode = ctx->arg;
    const px_kernel_ops_t *ops = &ipc_ops;
    long cases = 0, ipc_cases = 0;
    px_comm_t *ipcc;

    if (!strcmp(mode, "fallback") && r == 1)
        ops = &plain_ops;
    if (!strcmp(mode, "openfail") && r == n - 1)
        fail_open = 1;
    if (setup(ctx, ops, &ipcc))
        return 1;
    must_stage = 1;
    if (one_case(ctx->comm, ctx->comm, ipcc, K_AR, PX_ALGO_RING, PX_SUM, 0, 65539, 4096, 0,
                 &cases, &ipc_cases) ||
        one_case(ctx->comm, ctx->comm, ipcc, K_A2A, PX_ALGO_AUTO, PX_SUM, 0, 4097, 4096, 1,
                 &cases, &ipc_cases))
        return 1;
    for (int i = 1; i < nmaps; i++)
        if (maps[i].base)
            FAIL("%s: %s still mapped after the collective decision to stage", mode,
                 maps[i].name);
    {   /* a communicator that stages keeps no IPC scratch (issue 12) */
        uint64_t cur, peak;
        px_transport_device_scratch(&cur, &peak);
        if (cur != 0)
            FAIL("%s: %llu bytes of IPC scratch kept by a staging communicator", mode,
                 (unsigned long long)cur);
    }
    px_comm_destroy(ipcc);
    px_transport_set_device_memory(NULL, NULL);
    if (r == 0)
        printf("ipc %s n=%d: every rank staged, results equal to the host path: PASS\n", mode, n);
    return 0;
}

static int rank_kill(px_launch_rank_t *ctx)
{
    const int r = ctx->rank, n = ctx->world, victim = n - 1;
    const uint64_t cnt = 1u << 20; /* 4 MiB in 4 KiB chunks */
    px_comm_t *ipcc;
    char want[32];

    if (setup(ctx, &ipc_ops, &ipcc))
        return 1;
    px_transport_set_stage_chunk(4096);
    arena_used = 0;
    char *d = dev_alloc(cnt * 4);
    float *h = malloc(cnt * 4);
    for (uint64_t i = 0; i < cnt; i++)
        h[i] = 1.0f;
    fake_from_host(d, h, cnt * 4);
    free(h);
    px_coll_opts_t o = {PX_ALGO_RING, 60000};
    px_request_t *req;
    if (px_allreduce_start(ipcc, d, d, cnt, PX_FLOAT32, PX_SUM, &o, &req) != PX_OK)
        FAIL("start");
    long red0 = reduces;
    if (r == victim) {
        int done = 0;
        while (!done && reduces - red0 < 20 * (n - 1))
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
    printf("rank %d: %s after %.2f s and %ld device reductions: %s\n", r, px_status_str(status),
           s, reduces - red0, px_comm_last_error(ipcc));
    if (status != PX_ERR_PEER_FAILURE || !strstr(px_comm_last_error(ipcc), want))
        FAIL("want a peer failure naming %s, got %s: %s", want, px_status_str(status),
             px_comm_last_error(ipcc));
    if (reduces - red0 == 0)
        FAIL("the failure came before any device reduction");
    if (s > 30)
        FAIL("the failure took %.1f s", s);
    px_comm_destroy(ipcc);
    px_transport_set_device_memory(NULL, NULL);
    struct timespec ts = {0, 300 * 1000 * 1000};
    nanosleep(&ts, NULL);
    return 0;
}

static int rank_mismatch(px_launch_rank_t *ctx)
{
    const int r = ctx->rank;
    px_comm_t *ipcc;
    long cases = 0, ipc_cases = 0;

    if (setup(ctx, &ipc_ops, &ipcc))
        return 1;
    px_transport_set_stage_chunk(4096);
    arena_used = 0;
    float *d = dev_alloc(8192 * 4);
    px_coll_opts_t o = {PX_ALGO_RING, -1};
    px_status_t st = px_allreduce_opts(ipcc, d, d, r == 0 ? 3000 : 5000, PX_FLOAT32, PX_SUM, &o);
    const char *err = px_comm_last_error(ipcc);
    printf("rank %d: %s: %s\n", r, px_status_str(st), err);
    if (st != PX_ERR_MISMATCH || !strstr(err, "3000") || !strstr(err, "5000"))
        FAIL("IPC all-reduce of counts 3000 / 5000: %s (%s), want a mismatch naming both",
             px_status_str(st), err);
    /* the communicator goes on (staged now), bit for bit */
    if (one_case(ctx->comm, ipcc, NULL, K_AR, PX_ALGO_RING, PX_SUM, 0, 4097, 4096, 0, &cases,
                 &ipc_cases))
        FAIL("all-reduce after the mismatch");
    px_comm_destroy(ipcc);
    px_transport_set_device_memory(NULL, NULL);
    if (r == 0)
        printf("ipc mismatch n=%d: every rank named both counts: PASS\n", ctx->world);
    return 0;
}

int main(int argc, char **argv)
{
    const char *what = argc > 1 ? argv[1] : "matrix";
    int n = argc > 2 ? atoi(argv[2]) : 2, failed, st[64] = {0};
    px_launch_opts_t opts = {.use_watch = 1, .limit_s = 240};

    setvbuf(stdout, NULL, _IOLBF, 0);
    launcher = getpid();
    /* getenv, not px_env_str: that caches the value before the fork, and
     * mixed's rank 0 sets its own */
    event_proto = getenv("PX_IPC_PROTOCOL") && !strcmp(getenv("PX_IPC_PROTOCOL"), "event");
    if (n < 2 || n > 64)
        return 2;
    if (!strcmp(what, "matrix") || !strcmp(what, "mixed"))
        failed = px_launch(n, rank_matrix, (void *)what, &opts, NULL);
    else if (!strcmp(what, "fallback") || !strcmp(what, "openfail") || !strcmp(what, "nodes")) {
        if (!strcmp(what, "nodes"))
            opts.ranks_per_node = (n + 1) / 2;
        failed = px_launch(n, rank_fallback, (void *)what, &opts, NULL);
    } else if (!strcmp(what, "mismatch"))
        failed = px_launch(n, rank_mismatch, NULL, &opts, NULL);
    else if (!strcmp(what, "kill")) {
        failed = px_launch(n, rank_kill, NULL, &opts, st);
        if (failed == 1 && WIFSIGNALED(st[n - 1]) && WTERMSIG(st[n - 1]) == SIGKILL) {
            printf("ipc kill n=%d: every survivor failed naming rank %d: PASS\n", n, n - 1);
            failed = 0;
        }
    } else {
        fprintf(stderr, "usage: %s matrix|mixed|fallback|openfail|nodes|kill|mismatch N\n",
                argv[0]);
        return 2;
    }
    for (int q = 0; q < n; q++) { /* nothing left in /dev/shm */
        char name[64];
        arena_name(name, sizeof name, q);
        shm_unlink(name);
    }
    if (failed)
        fprintf(stderr, "FAIL: %d rank(s) failed\n", failed);
    return failed ? 1 : 0;
}
