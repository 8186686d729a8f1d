/* test_devmem.c: the collectives on device buffers (transport/px_devmem.h),
 * checked without a GPU.
 *
 * A fake device: an arena of host pages that is PROT_NONE except inside
 * the fake backend's own copy functions, so any read or write of "device"
 * memory by the transport (or UCX) itself crashes the rank and fails the
 * test. The fake backend counts its staging copies. Each rank then runs what
 * the engine runs on device tensors (zero.c, tp.c): all-reduce in place and
 * out of place, reduce-scatter in place (recv = buf + rank * cnt), all-gather
 * in place, at sizes from one element to a multi-chunk ring (3 Mi floats),
 * checks every element, checks that host buffers are not staged, that
 * fp16 and bf16 all-reduce and reduce-scatter of device buffers equal the
 * host path's (reduced in fp32, rounded once) byte for byte, and that point-to-point sends and
 * receives of device buffers arrive whole through chunked staging (one
 * element, odd sizes, under, at and over a chunk, many chunks), one copy
 * per chunk each way, in buffers from the registered pinned allocator, and
 * that all-to-all-v of device buffers (uneven, empty and gapped blocks) is
 * staged and equals the host path's result byte for byte, in one chunk and
 * in many (4 KiB chunks; ranks running different numbers of them) through
 * no more host memory than three chunks' buffers.
 *
 * usage: test_devmem N   (ranks; forked by px_launch) */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#include "px_coll.h"
#include "px_devmem.h"
#include "px_kernels.h"
#include "px_launch.h"
#include "px_reduce.h"

#define ARENA_BYTES ((size_t)64 << 20)

static char *arena;
static size_t arena_used;
static int copies_to_host, copies_from_host, syncs;

static int fake_is_device(const void *p)
{
    return (const char *)p >= arena && (const char *)p < arena + ARENA_BYTES;
}

static void open_arena(void) { mprotect(arena, ARENA_BYTES, PROT_READ | PROT_WRITE); }
static void close_arena(void) { mprotect(arena, ARENA_BYTES, PROT_NONE); }

static void *fake_alloc(size_t bytes)
{
    size_t b = (bytes + 63) & ~(size_t)63;
    if (arena_used + b > ARENA_BYTES)
        return NULL;
    void *p = arena + arena_used;
    arena_used += b;
    return p;
}

static void fake_copy(void *dst, const void *src, size_t bytes)
{
    open_arena();
    memmove(dst, src, bytes);
    close_arena();
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

static void fake_sync(void) { syncs++; }

/* the pinned allocator the CUDA backend registers (cudaHostAlloc), counted */
static int pinned_allocs;
static void *fake_pinned_alloc(size_t bytes)
{
    pinned_allocs++;
    return malloc(bytes);
}

static const px_kernel_ops_t fake_ops = {
    .name = "fake-device",
    .mem_copy = fake_copy,
    .mem_copy_to_host = fake_to_host,
    .mem_copy_from_host = fake_from_host,
    .synchronize = fake_sync,
};

/* value of element i on rank r */
static float val(int r, size_t i) { return (float)((r + 1) * 1000 + (int)(i % 997)); }

static int check(const char *what, int rank, const float *got, size_t n, float (*want)(size_t, void *),
                 void *arg)
{
    for (size_t i = 0; i < n; i++) {
        float w = want(i, arg);
        if (got[i] != w) {
            fprintf(stderr, "rank %d: %s: element %zu is %g, want %g\n", rank, what, i, got[i], w);
            return 1;
        }
    }
    return 0;
}

typedef struct { int world; size_t off; } sum_arg_t;
static float want_sum(size_t i, void *a)
{
    sum_arg_t *s = a;
    float t = 0;
    for (int r = 0; r < s->world; r++)
        t += val(r, s->off + i);
    return t;
}

typedef struct { size_t cnt; } gather_arg_t;
static float want_gather(size_t i, void *a)
{
    gather_arg_t *g = a;
    return val((int)(i / g->cnt), i);
}

/* elements rank `from` sends rank `to` in alltoallv_case (0 for some pairs) */
static uint64_t a2av_count(int from, int to, uint64_t scale)
{
    return (uint64_t)((from * 3 + to * 5 + 1) % 7) * scale;
}

/* One all-to-all-v of device buffers against the host path: sends with
 * gaps of 2 elements between blocks, receives with gaps of 3, the gaps
 * holding a sentinel neither path may overwrite. pc > 0: the staging
 * chunk holds pc elements of every block, so each block of c elements
 * must come off (or go onto) the device in exactly ceil(c / pc) copies,
 * one per chunk it spans. 0: ok. */
static int alltoallv_case(px_comm_t *comm, int r, int n, uint64_t scale, uint64_t pc)
{
    uint64_t sc[64], sd[64], rc[64], rd[64], stot = 0, rtot = 0;
    if (n > 64)
        return 1;
    for (int q = 0; q < n; q++) {
        sc[q] = a2av_count(r, q, scale);
        sd[q] = stot;
        stot += sc[q] + 2;
        rc[q] = a2av_count(q, r, scale);
        rd[q] = rtot;
        rtot += rc[q] + 3;
    }
    float *hs = malloc(stot * sizeof(float)), *hr = malloc(rtot * sizeof(float)),
          *got = malloc(rtot * sizeof(float));
    arena_used = 0;
    float *ds = fake_alloc(stot * sizeof(float)), *dr = fake_alloc(rtot * sizeof(float));
    if (!hs || !hr || !got || !ds || !dr)
        return 1;
    for (uint64_t i = 0; i < stot; i++)
        hs[i] = -7.0f;
    for (int q = 0; q < n; q++)
        for (uint64_t k = 0; k < sc[q]; k++)
            hs[sd[q] + k] = val(r, (size_t)q * 100000 + k);
    for (uint64_t i = 0; i < rtot; i++)
        hr[i] = -7.0f;
    fake_from_host(ds, hs, stot * sizeof(float));
    fake_from_host(dr, hr, rtot * sizeof(float));
    int before = copies_to_host, before_back = copies_from_host;
    if (px_alltoallv(comm, ds, sc, sd, dr, rc, rd, PX_FLOAT32, NULL) != PX_OK ||
        px_alltoallv(comm, hs, sc, sd, hr, rc, rd, PX_FLOAT32, NULL) != PX_OK) {
        fprintf(stderr, "rank %d: all-to-all-v (scale %llu) failed\n", r,
                (unsigned long long)scale);
        return 1;
    }
    int fails = n > 1 && copies_to_host == before; /* it was staged */
    if (pc && n > 1) {
        long want_off = 0, want_on = 0;
        for (int q = 0; q < n; q++) {
            want_off += (long)((sc[q] + pc - 1) / pc);
            want_on += (long)((rc[q] + pc - 1) / pc);
        }
        if (copies_to_host - before != want_off || copies_from_host - before_back != want_on) {
            fprintf(stderr, "rank %d: all-to-all-v (scale %llu) made %d copies off the device "
                    "and %d onto it; in chunks of %llu elements per block it takes %ld and %ld\n",
                    r, (unsigned long long)scale, copies_to_host - before,
                    copies_from_host - before_back, (unsigned long long)pc, want_off, want_on);
            fails++;
        }
    }
    fake_to_host(got, dr, rtot * sizeof(float));
    if (memcmp(got, hr, rtot * sizeof(float))) {
        fprintf(stderr, "rank %d: staged all-to-all-v (scale %llu) differs from the host "
                "path\n", r, (unsigned long long)scale);
        fails++;
    }
    for (int q = 0; q < n && !fails; q++)
        for (uint64_t k = 0; k < rc[q] + 3; k++) {
            float want = k < rc[q] ? val(q, (size_t)r * 100000 + k) : -7.0f;
            if (got[rd[q] + k] != want) {
                fprintf(stderr, "rank %d: all-to-all-v from %d element %llu is %g, want %g\n",
                        r, q, (unsigned long long)k, got[rd[q] + k], want);
                fails++;
                break;
            }
        }
    free(hs);
    free(hr);
    free(got);
    return fails;
}

/* fp16 / bf16 reductions of device buffers against the host path on the
 * same halves: all-reduce (ring, auto; sum, avg) and reduce-scatter of
 * `cnt` elements per rank's block, byte for byte. 0: ok. */
static int half_case(px_comm_t *comm, int r, int n, px_dtype_t dt, uint64_t cnt)
{
    const uint64_t total = cnt * (uint64_t)n;
    const size_t bytes = (size_t)total * 2;
    float *f = malloc((size_t)total * sizeof(float));
    uint16_t *in = malloc(bytes), *hout = malloc(bytes), *got = malloc(bytes);
    int fails = 0;
    if (!f || !in || !hout || !got)
        return 1;
    for (uint64_t i = 0; i < total; i++) /* not exactly representable sums */
        f[i] = (float)(r + 1) * 0.3713f + (float)(i % 101) * 0.01337f - 0.5f;
    if (dt == PX_FLOAT16)
        px_f32_to_f16(in, f, (size_t)total);
    else
        px_f32_to_bf16(in, f, (size_t)total);
    static const struct { int rs; px_algo_t algo; px_redop_t op; const char *what; } k[] = {
        {0, PX_ALGO_RING, PX_SUM, "all-reduce ring sum"},
        {0, PX_ALGO_AUTO, PX_AVG, "all-reduce auto avg"},
        {1, PX_ALGO_AUTO, PX_SUM, "reduce-scatter sum"},
    };
    for (unsigned c = 0; c < sizeof k / sizeof *k && !fails; c++) {
        px_coll_opts_t o = {k[c].algo, -1};
        const uint64_t outn = k[c].rs ? cnt : total;
        arena_used = 0;
        void *din = fake_alloc(bytes), *dout = fake_alloc(bytes);
        if (!din || !dout)
            return 1;
        fake_from_host(din, in, bytes);
        px_status_t sd, sh;
        if (k[c].rs) {
            sd = px_reduce_scatter(comm, din, dout, cnt, dt, k[c].op, &o);
            sh = px_reduce_scatter(comm, in, hout, cnt, dt, k[c].op, &o);
        } else {
            sd = px_allreduce_opts(comm, din, dout, total, dt, k[c].op, &o);
            sh = px_allreduce_opts(comm, in, hout, total, dt, k[c].op, &o);
        }
        if (sd != PX_OK || sh != PX_OK) {
            fprintf(stderr, "rank %d: %s %s x %llu: device %s, host %s\n", r, k[c].what,
                    px_dtype_name(dt), (unsigned long long)cnt, px_status_str(sd),
                    px_status_str(sh));
            fails++;
            break;
        }
        fake_to_host(got, dout, (size_t)outn * 2);
        if (memcmp(got, hout, (size_t)outn * 2)) {
            uint64_t i = 0;
            while (got[i] == hout[i])
                i++;
            fprintf(stderr, "rank %d: %s %s x %llu on device differs from the host path at "
                    "element %llu: 0x%04x vs 0x%04x\n", r, k[c].what, px_dtype_name(dt),
                    (unsigned long long)cnt, (unsigned long long)i, got[i], hout[i]);
            fails++;
        }
    }
    free(f);
    free(in);
    free(hout);
    free(got);
    return fails;
}

static int rank_fn(px_launch_rank_t *ctx)
{
    const int r = ctx->rank, n = ctx->world;
    px_comm_t *comm = ctx->comm;
    int fails = 0;
    arena = mmap(NULL, ARENA_BYTES, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (arena == MAP_FAILED)
        return 1;
    px_transport_set_device_memory(&fake_ops, fake_is_device);
    px_transport_set_pinned_memory(fake_pinned_alloc, free);
    static const size_t sizes[] = {1, 7, 1000, 65536 + 3, 3u << 20};
    for (unsigned si = 0; si < sizeof sizes / sizeof *sizes; si++) {
        size_t cnt = sizes[si], total = cnt * (size_t)n;
        float *host = malloc(total * sizeof(float));
        arena_used = 0;
        float *dbuf = fake_alloc(total * sizeof(float)), *dout = fake_alloc(cnt * sizeof(float));
        if (!host || !dbuf || !dout)
            return 1;
        sum_arg_t sa = {n, 0};
        /* all-reduce in place */
        for (size_t i = 0; i < cnt; i++)
            host[i] = val(r, i);
        fake_from_host(dbuf, host, cnt * sizeof(float));
        int before = copies_to_host;
        if (px_allreduce(comm, dbuf, dbuf, cnt, PX_FLOAT32, PX_SUM, -1) != PX_OK)
            return 1;
        fails += n > 1 && copies_to_host == before; /* it was staged */
        fake_to_host(host, dbuf, cnt * sizeof(float));
        fails += check("allreduce in place", r, host, cnt, want_sum, &sa);
        /* all-reduce device -> another device buffer */
        for (size_t i = 0; i < cnt; i++)
            host[i] = val(r, i);
        fake_from_host(dbuf, host, cnt * sizeof(float));
        if (px_allreduce(comm, dbuf, dout, cnt, PX_FLOAT32, PX_SUM, -1) != PX_OK)
            return 1;
        fake_to_host(host, dout, cnt * sizeof(float));
        fails += check("allreduce out of place", r, host, cnt, want_sum, &sa);
        /* reduce-scatter in place, as ZeRO does: this rank's block of the sum */
        for (size_t i = 0; i < total; i++)
            host[i] = val(r, i);
        fake_from_host(dbuf, host, total * sizeof(float));
        px_request_t *req = NULL;
        if (px_reduce_scatter_start(comm, dbuf, dbuf + (size_t)r * cnt, cnt, PX_FLOAT32, PX_SUM,
                                    NULL, &req) != PX_OK ||
            px_wait(req, -1) != PX_OK)
            return 1;
        fake_to_host(host, dbuf + (size_t)r * cnt, cnt * sizeof(float));
        sa.off = (size_t)r * cnt;
        fails += check("reduce_scatter in place", r, host, cnt, want_sum, &sa);
        /* all-gather in place: block k from rank k */
        for (size_t i = 0; i < total; i++)
            host[i] = i / cnt == (size_t)r ? val(r, i) : -1.0f;
        fake_from_host(dbuf, host, total * sizeof(float));
        if (px_allgather_start(comm, dbuf + (size_t)r * cnt, dbuf, cnt, PX_FLOAT32, NULL, &req) !=
                PX_OK ||
            px_wait(req, -1) != PX_OK)
            return 1;
        fake_to_host(host, dbuf, total * sizeof(float));
        gather_arg_t ga = {cnt};
        fails += check("allgather in place", r, host, total, want_gather, &ga);
        free(host);
        if (fails)
            break;
    }
    /* host buffers are never staged */
    float hs[4] = {1, 2, 3, 4};
    int before = copies_to_host;
    if (px_allreduce(comm, hs, hs, 4, PX_FLOAT32, PX_SUM, -1) != PX_OK || hs[3] != 4.0f * n)
        fails++;
    fails += copies_to_host != before;
    /* issue 12: fp16 / bf16 all-reduce and reduce-scatter of device buffers,
     * staged and reduced in fp32 chunk by chunk: bit for bit the host path
     * (which reduces the whole buffer in fp32 and rounds once), in one
     * chunk and in many (4 KiB), ring and auto, sum and avg */
    static const px_dtype_t halves[] = {PX_BFLOAT16, PX_FLOAT16};
    static const uint64_t hcounts[2][3] = {{1, 1000, 20001}, {2003, 0, 0}};
    for (int ck = 0; ck < 2 && !fails; ck++) {
        px_transport_set_stage_chunk(ck ? 4096 : 0); /* 4 KiB: 2003 halves a block, 2-3 chunks */
        for (unsigned di = 0; di < 2 && !fails; di++)
            for (unsigned ci = 0; ci < 3 && hcounts[ck][ci] && !fails; ci++)
                fails += half_case(comm, r, n, halves[di], hcounts[ck][ci]);
    }
    px_transport_set_stage_chunk(0);
    if (px_allreduce(comm, hs, hs, 4, PX_FLOAT32, PX_SUM, -1) != PX_OK || hs[3] != 4.0f * n * n)
        fails++;
    /* point-to-point of device buffers, staged in chunks (4 KiB here):
     * each rank sends to the next and receives from the previous, at sizes
     * of one element, under, at and over one chunk, and many chunks with an
     * odd tail; every element checked, the chunk copies counted */
    px_transport_set_stage_chunk(4096);
    static const size_t pcounts[] = {1, 7, 1023, 1024, 1025, 3 * 1024 + 5, 100003};
    for (unsigned si = 0; n > 1 && !fails && si < sizeof pcounts / sizeof *pcounts; si++) {
        size_t cnt = pcounts[si], bytes = cnt * sizeof(float);
        int to = (r + 1) % n, from = (r + n - 1) % n;
        float *host = malloc(bytes);
        arena_used = 0;
        float *dsend = fake_alloc(bytes), *drecv = fake_alloc(bytes);
        if (!host || !dsend || !drecv)
            return 1;
        for (size_t i = 0; i < cnt; i++)
            host[i] = val(r, i);
        fake_from_host(dsend, host, bytes);
        for (size_t i = 0; i < cnt; i++)
            host[i] = -1.0f;
        fake_from_host(drecv, host, bytes);
        int to_before = copies_to_host, from_before = copies_from_host;
        px_request_t *rr = NULL, *sr = NULL;
        if (px_recv_start(comm, from, 7, drecv, bytes, NULL, &rr) != PX_OK ||
            px_send_start(comm, to, 7, dsend, bytes, NULL, &sr) != PX_OK ||
            px_wait(sr, -1) != PX_OK || px_wait(rr, -1) != PX_OK) {
            fprintf(stderr, "rank %d: staged send/recv of %zu floats failed\n", r, cnt);
            return 1;
        }
        int chunks = (int)((bytes + 4095) / 4096);
        if (copies_to_host - to_before != chunks || copies_from_host - from_before != chunks) {
            fprintf(stderr, "rank %d: %zu floats: %d copies off the device, %d onto it, want %d "
                    "chunks each\n", r, cnt, copies_to_host - to_before,
                    copies_from_host - from_before, chunks);
            fails++;
        }
        fake_to_host(host, drecv, bytes);
        for (size_t i = 0; i < cnt && !fails; i++)
            if (host[i] != val(from, i)) {
                fprintf(stderr, "rank %d: p2p %zu floats: element %zu is %g, want %g\n", r, cnt,
                        i, host[i], val(from, i));
                fails++;
            }
        free(host);
    }
    px_transport_set_stage_chunk(0);
    /* all-to-all-v of device buffers (the experts' dispatch): uneven blocks,
     * empty ones, gaps between them; the staged result must equal, byte for
     * byte with its gaps untouched, the host path's on the same data */
    for (int scale = 1; !fails && scale <= 4000; scale *= 4000)
        fails += alltoallv_case(comm, r, n, (uint64_t)scale, 0);
    /* issue 12: chunked like the other staged collectives. With 4 KiB
     * chunks (4096 / (n x 4) floats of every block per chunk), blocks of up
     * to 6 x 4000 floats take many chunks - a different number on each rank,
     * whose longest blocks differ - and every block comes off and goes onto
     * the device one slice per chunk (in one piece it would be one copy). */
    px_transport_set_stage_chunk(4096);
    static const int scales[] = {1, 20, 400, 4000};
    for (unsigned si = 0; !fails && si < sizeof scales / sizeof *scales; si++)
        fails += alltoallv_case(comm, r, n, (uint64_t)scales[si], 4096 / (4 * (uint64_t)n));
    px_transport_set_stage_chunk(0);
    if (n > 1 && pinned_allocs == 0) {
        fprintf(stderr, "rank %d: the staging buffers did not come from the pinned allocator\n",
                r);
        fails++;
    }
    if (r == 0)
        printf("devmem n=%d: %d staged copies to host, %d back, %d syncs, %d pinned "
               "allocations: %s\n", n, copies_to_host, copies_from_host, syncs, pinned_allocs,
               fails ? "FAIL" : "PASS");
    px_transport_set_device_memory(NULL, NULL);
    return fails ? 1 : 0;
}

int main(int argc, char **argv)
{
    int n = argc > 1 ? atoi(argv[1]) : 2;
    px_launch_opts_t opts = {.use_watch = 1, .limit_s = 200};
    setvbuf(stdout, NULL, _IOLBF, 0);
    int failed = px_launch(n, rank_fn, NULL, &opts, NULL);
    if (failed)
        fprintf(stderr, "FAIL: %d rank(s) failed\n", failed);
    return failed ? 1 : 0;
}
