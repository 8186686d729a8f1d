/* test_shm.c: the shared-memory path of the collectives (transport/px_shm.c)
 * on N local ranks (px_launch), checked against the UCX path.
 *
 *   test_shm equal N     all-reduce (in and out of place), reduce-scatter (in
 *                        and out of place), all-gather (in and out of place),
 *                        all-to-all, broadcast; dtypes fp32 fp64 fp16 bf16
 *                        int32 int64 uint8; ops sum prod min max avg; counts
 *                        below the threshold, above it, larger than a slot,
 *                        not divisible by N: the world (segment on) gives
 *                        bitwise the output of a split of it with the path
 *                        off (UCX). All-to-all from PX_SHM_CMA_MIN_BYTES up
 *                        takes the single copy (px_shm_cma.c), all-gather and
 *                        broadcast too with PX_SHM_CMA=2; below it the two
 *                        copies: both are checked. Every rank's inputs are
 *                        small integers, so both orders of reduction are exact. Also checks
 *                        which path each request took, requests outstanding
 *                        at once (waited in reverse order, polled with
 *                        px_test / px_progress) and a UCX request on
 *                        another communicator in flight beside them, and
 *                        that px_comm_paths names the segment.
 *   test_shm mismatch N  the last rank passes another count: (a) below the
 *                        threshold (it takes the UCX path, the others the
 *                        segment), (b) above it (all on the segment), (c)
 *                        an all-gather below PX_SHM_CMA_MIN_BYTES on the
 *                        last rank only (two copies there, one elsewhere): every
 *                        rank gets PX_ERR_MISMATCH naming both counts, long
 *                        before the deadline; the communicator then works
 *                        (over UCX).
 *   test_shm kill N      rank 1 publishes its part of a shared-memory
 *                        all-reduce and dies by SIGKILL: every survivor
 *                        fails with PX_ERR_PEER_FAILURE naming rank 1 within
 *                        the deadline.
 *   test_shm kill_a2a N  the same during a single-copy all-to-all: rank 1
 *                        publishes its buffer and dies; the survivors'
 *                        reads of it (process_vm_readv: ESRCH) or their
 *                        waits fail with PX_ERR_PEER_FAILURE naming rank 1.
 *   test_shm off N       PX_SHM=0: no segment; collectives still right.
 *   test_shm reslot N    px_comm_set_shm_slot: refused (INVALID_ARGUMENT,
 *                        nothing changed) for sizes outside 4096..64 MiB and
 *                        while a request of the communicator is pending;
 *                        then the world's segment is remapped with 64 KiB
 *                        slots (4x meson's 16 KiB) and every `equal` case is
 *                        bitwise the UCX path's, twice (remapped to 4 KiB in
 *                        between: steps of one page, a segment smaller than
 *                        the old one); on a communicator without a segment
 *                        it is a no-op.
 *   test_shm cma_eperm N PX_SHM_CMA=2, but the last rank may not use
 *                        process_vm_readv (a seccomp filter answers EPERM, as
 *                        the kernel does without ptrace rights): a
 *                        communicator made afterwards probes, every rank
 *                        agrees on the two copies, and every `equal` case is
 *                        bitwise the UCX path's with none single-copy.
 *   test_shm cma_leave N rank 0 leaves a single-copy all-to-all early while
 *                        a peer may read its send buffer, then overwrites
 *                        the buffer (as a caller reusing it would): (a)
 *                        px_request_cancel while rank 1 is reading (a test
 *                        hook holds it 350 ms inside its reads): the cancel
 *                        returns only after rank 1's reads, and rank 1 (and
 *                        every other rank) gets the exact result; (b) the
 *                        same with px_comm_abort and px_wait; (c) the cancel
 *                        before any peer started reading: the others read
 *                        nothing from rank 0 and fail with PX_ERR_ABORTED
 *                        naming it, long before their deadline.
 *
 * After every launch the parent checks that /dev/shm holds no segment named
 * after any of its ranks (names start "px-<creator pid>-"), the killed run
 * included. meson sets PX_SHM_MIN_BYTES=4096 and PX_SHM_SLOT_BYTES=16384
 * so that small buffers cross the threshold and span many slots. */
#include <dirent.h>
#include <errno.h>
#include <linux/filter.h>
#include <linux/seccomp.h>
#include <stddef.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <sys/uio.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "px_coll.h"
#include "px_env.h"
#include "px_launch.h"
#include "px_log.h"
#include "px_reduce.h"
#include "px_shm.h" /* px__shm_off, comm->shm, req->shm: which path ran */
#include "px_shm_cma.h" /* px__cma_test_read_delay_ms */
#include "px_time.h"

/* cma_leave: an error that comes this long after its cause (ms) came by a
 * deadline (meson sets PX_COMM_TIMEOUT_MS well above it), not promptly. */
#define CMA_LEAVE_SLOW_MS 2000

#define FAIL(...) do { fprintf(stderr, "FAIL rank %d: ", ctx->rank); \
    fprintf(stderr, __VA_ARGS__); fprintf(stderr, "\n"); return 1; } while (0)

static const px_dtype_t dtypes[] = {PX_FLOAT32, PX_FLOAT64, PX_FLOAT16, PX_BFLOAT16,
                                    PX_INT32, PX_INT64, PX_UINT8};
static const px_redop_t ops[] = {PX_SUM, PX_PROD, PX_MIN, PX_MAX, PX_AVG};

/* Stores small integer v as element i of a dtype buffer (exact in all). */
static void put(px_dtype_t dt, void *buf, uint64_t i, int v)
{
    switch (dt) {
    case PX_FLOAT32: ((float *)buf)[i] = (float)v; break;
    case PX_FLOAT64: ((double *)buf)[i] = v; break;
    case PX_FLOAT16: { float f = (float)v; px_f32_to_f16((uint16_t *)buf + i, &f, 1); break; }
    case PX_BFLOAT16: { float f = (float)v; px_f32_to_bf16((uint16_t *)buf + i, &f, 1); break; }
    case PX_INT32: ((int32_t *)buf)[i] = v; break;
    case PX_INT64: ((int64_t *)buf)[i] = v; break;
    case PX_UINT8: ((uint8_t *)buf)[i] = (uint8_t)v; break;
    }
}

/* Rank r's input element i: 1..3 for products (no overflow in any dtype
 * at 4 ranks), -4..4 (0..8 unsigned) otherwise. */
static void fill(px_dtype_t dt, px_redop_t op, void *buf, uint64_t n, int r)
{
    for (uint64_t i = 0; i < n; i++) {
        int v = op == PX_PROD ? (int)((i + (uint64_t)r) % 3) + 1
                              : (int)((i * 7 + (uint64_t)r * 131) % 9) - (dt == PX_UINT8 ? 0 : 4);
        put(dt, buf, i, v);
    }
}

/* The request of a started collective took the segment? */
static int on_shm(const px_request_t *req)
{
    return req->shm != NULL;
}

enum { AR, AR_IN, RS, RS_IN, AG, AG_IN, A2A, BC, NFORM };
static const char *form_name[] = {"allreduce", "allreduce-inplace", "reduce-scatter",
                                  "reduce-scatter-inplace", "allgather", "allgather-inplace",
                                  "alltoall", "bcast"};

/* Runs one collective of `form` on comm into out (whose size is returned in
 * *out_bytes), from the same inputs on every call. *shm_p: the path taken
 * (0 UCX, 1 the segment's two copies, 2 the single copy). */
static px_status_t run_form(px_comm_t *comm, int form, px_dtype_t dt, px_redop_t op,
                            uint64_t count, char *in, char *out, size_t *out_bytes, int *shm_p)
{
    int n = px_comm_size(comm), r = px_comm_rank(comm);
    size_t esz = px_dtype_size(dt);
    px_request_t *req = NULL;
    px_status_t status;

    switch (form) {
    case AR:
    case AR_IN:
        fill(dt, op, in, count, r);
        *out_bytes = count * esz;
        if (form == AR_IN) {
            memcpy(out, in, *out_bytes);
            status = px_allreduce_start(comm, out, out, count, dt, op, NULL, &req);
        } else {
            status = px_allreduce_start(comm, in, out, count, dt, op, NULL, &req);
        }
        break;
    case RS:
    case RS_IN:
        fill(dt, op, in, count * (uint64_t)n, r);
        *out_bytes = count * esz;
        if (form == RS_IN) { /* result at block r of the input buffer */
            status = px_reduce_scatter_start(comm, in, in + (size_t)r * count * esz, count, dt,
                                             op, NULL, &req);
        } else {
            status = px_reduce_scatter_start(comm, in, out, count, dt, op, NULL, &req);
        }
        break;
    case AG:
    case AG_IN:
        *out_bytes = count * (uint64_t)n * esz;
        memset(out, 0x5a, *out_bytes);
        if (form == AG_IN) {
            fill(dt, PX_SUM, out + (size_t)r * count * esz, count, r);
            status = px_allgather_start(comm, out + (size_t)r * count * esz, out, count, dt, NULL,
                                        &req);
        } else {
            fill(dt, PX_SUM, in, count, r);
            status = px_allgather_start(comm, in, out, count, dt, NULL, &req);
        }
        break;
    case A2A:
        fill(dt, PX_SUM, in, count * (uint64_t)n, r);
        *out_bytes = count * (uint64_t)n * esz;
        status = px_alltoall_start(comm, in, out, count, dt, NULL, &req);
        break;
    default: /* BC */
        *out_bytes = count * esz;
        if (r == (int)(count % (uint64_t)n))
            fill(dt, PX_SUM, out, count, r);
        else
            memset(out, 0x5a, *out_bytes);
        status = px_bcast_start(comm, out, count, dt, (int)(count % (uint64_t)n), NULL, &req);
        break;
    }
    if (status != PX_OK)
        return status;
    *shm_p = on_shm(req) ? 1 + px__shm_single_copy(req) : 0;
    status = px_wait(req, -1);
    if (form == RS_IN)
        memcpy(out, in + (size_t)r * count * esz, *out_bytes);
    return status;
}

/* The `equal` checks on communicator w (segment on); cma: whether the
 * single copy is expected (PX_SHM_CMA on and the probe succeeded). */
static int equal_on(px_launch_rank_t *ctx, px_comm_t *w, int cma)
{
    static const uint64_t counts[] = {1, 1000, 1025, 5003, 20011};
    px_comm_t *u = NULL;
    int n = ctx->world, cases = 0, shm_cases = 0, cma_cases = 0;
    long cma_mode = px_env_int("PX_SHM_CMA"); /* 1: all-to-all only; 2: also all-gather, bcast */
    /* the kinds expected single-copy (-1, auto: px__cma_auto_kinds) and from
     * which size: PX_SHM_CMA_MIN_BYTES bytes of the largest buffer, or
     * (-1, auto) 32 KiB per peer's block */
    unsigned kinds = cma_mode == 0 ? 0
                     : cma_mode == 1 ? 1u << PX__COLL_ALLTOALL
                     : cma_mode == 2 ? (1u << PX__COLL_ALLTOALL) | (1u << PX__COLL_ALLGATHER) |
                                           (1u << PX__COLL_BCAST)
                                     : px__cma_auto_kinds();
    long min_env = px_env_int("PX_SHM_CMA_MIN_BYTES");
    uint64_t cma_min = kinds && cma ? (min_env >= 0 ? (uint64_t)min_env : 0) : UINT64_MAX;
    size_t max = 20011 * 8 * (size_t)n + 64;
    char *in = malloc(max), *a = malloc(max), *b = malloc(max);

    if (!in || !a || !b)
        FAIL("out of memory");
    if (!w->shm)
        FAIL("no shared-memory segment");
    if (px_comm_split(w, 0, ctx->rank, &u) != PX_OK || !u->shm)
        FAIL("split: no segment on the sub-communicator");
    px__shm_off(u); /* the reference: the same ranks over UCX */
    for (size_t d = 0; d < sizeof(dtypes) / sizeof(*dtypes); d++) {
        px_dtype_t dt = dtypes[d];
        size_t esz = px_dtype_size(dt);
        int half = dt == PX_FLOAT16 || dt == PX_BFLOAT16;
        for (size_t c = 0; c < sizeof(counts) / sizeof(*counts); c++) {
            uint64_t count = counts[c];
            for (int form = 0; form < NFORM; form++) {
                int reduces = form == AR || form == AR_IN || form == RS || form == RS_IN;
                int nops = reduces ? (int)(sizeof(ops) / sizeof(*ops)) : 1;
                uint64_t big = (form == AR || form == AR_IN || form == BC ? 1 : (uint64_t)n) *
                               count * esz;
                for (int k = 0; k < nops; k++) {
                    size_t na, nb;
                    int sa = 0, sb = 0;
                    px_status_t status = run_form(w, form, dt, ops[k], count, in, a, &na, &sa);
                    if (status != PX_OK)
                        FAIL("%s %s %s count %llu on the segment: %s (%s)", form_name[form],
                             px_dtype_name(dt), px_redop_name(ops[k]),
                             (unsigned long long)count, px_status_str(status),
                             px_comm_last_error(w));
                    status = run_form(u, form, dt, ops[k], count, in, b, &nb, &sb);
                    if (status != PX_OK)
                        FAIL("%s over UCX: %s", form_name[form], px_status_str(status));
                    if (sb)
                        FAIL("the UCX reference took the segment");
                    int want = big >= 4096 && !(reduces && half);
                    int kind = form == A2A ? PX__COLL_ALLTOALL
                               : form == AG || form == AG_IN ? PX__COLL_ALLGATHER
                               : form == BC ? PX__COLL_BCAST : 0;
                    uint64_t block = form == BC ? big : big / (uint64_t)n;
                    if (want && kind && (kinds & (1u << kind)) && big >= cma_min &&
                        (min_env >= 0 || block >= 32768))
                        want = 2;
                    if (sa != want)
                        FAIL("%s %s count %llu (%llu bytes): path %d, expected %d (0 ucx, 1 "
                             "shm, 2 single copy)", form_name[form], px_dtype_name(dt),
                             (unsigned long long)count, (unsigned long long)big, sa, want);
                    if (na != nb || memcmp(a, b, na) != 0) {
                        size_t i = 0;
                        while (i < na && a[i] == b[i])
                            i++;
                        FAIL("%s %s %s count %llu: shm and UCX outputs differ at byte %zu",
                             form_name[form], px_dtype_name(dt), px_redop_name(ops[k]),
                             (unsigned long long)count, i);
                    }
                    cases++;
                    shm_cases += sa != 0;
                    cma_cases += sa == 2;
                }
            }
        }
    }

    /* three on the segment outstanding at once, one over UCX beside them;
     * waited in reverse order, then polled */
    {
        uint64_t count = 12345;
        float *x = malloc(count * sizeof(float) * (size_t)n * 6);
        float *y = x + count * (size_t)n, *z = y + count * (size_t)n;
        float *ref = z + count * (size_t)n, *g = ref + count * (size_t)n;
        float *t = g + count * (size_t)n;
        px_request_t *r[4];
        px_status_t status = PX_OK;
        if (!x)
            FAIL("out of memory");
        for (uint64_t i = 0; i < count; i++)
            x[i] = t[i] = (float)((i + (uint64_t)ctx->rank) % 17);
        for (int it = 0; it < 20 && status == PX_OK; it++) {
            int done = 0;
            status = px_allreduce_start(w, x, y, count, PX_FLOAT32, PX_SUM, NULL, &r[0]);
            if (status == PX_OK)
                status = px_allgather_start(w, x, g, count, PX_FLOAT32, NULL, &r[1]);
            if (status == PX_OK)
                status = px_allreduce_start(u, t, ref, count, PX_FLOAT32, PX_SUM, NULL, &r[2]);
            if (status == PX_OK)
                status = px_allreduce_start(w, x, z, count, PX_FLOAT32, PX_MAX, NULL, &r[3]);
            if (status != PX_OK)
                FAIL("start: %s", px_status_str(status));
            if (!on_shm(r[0]) || !on_shm(r[1]) || on_shm(r[2]) || !on_shm(r[3]))
                FAIL("paths: expected shm, shm, ucx, shm");
            if (it % 2) {
                for (int i = 3; i >= 0 && status == PX_OK; i--)
                    status = px_wait(r[i], -1);
            } else {
                for (int i = 0; i < 4; i++) {
                    for (done = 0; !done && status == PX_OK;) {
                        px_progress(w);
                        status = px_test(r[i], &done);
                    }
                }
            }
            if (status != PX_OK)
                FAIL("concurrent: %s (%s)", px_status_str(status), px_comm_last_error(w));
            for (uint64_t i = 0; i < count; i++) {
                float mx = 0;
                for (int p = 0; p < n; p++) {
                    float v = (float)((i + (uint64_t)p) % 17);
                    mx = v > mx ? v : mx;
                    if (g[(uint64_t)p * count + i] != v)
                        FAIL("concurrent all-gather: element %llu of rank %d", (unsigned long long)i, p);
                }
                if (y[i] != ref[i] || z[i] != mx)
                    FAIL("concurrent: element %llu: sum %g (UCX %g), max %g (want %g)",
                         (unsigned long long)i, y[i], ref[i], z[i], mx);
            }
        }
        free(x);
    }
    px_comm_destroy(u);
    free(in);
    free(a);
    free(b);
    printf("rank %d: %d cases equal (%d on the segment, %d of them single-copy)\n", ctx->rank,
           cases, shm_cases, cma_cases);
    if (cma_min != UINT64_MAX && !cma_cases)
        FAIL("no case took the single copy");
    return shm_cases ? 0 : 1;
}

static int rank_equal(px_launch_rank_t *ctx)
{
    char host[32], dev[32];
    if (equal_on(ctx, ctx->comm, 1))
        return 1;
    /* px_comm_paths: the segment ran the world's host collectives (those
     * below its threshold UCX), no device buffer was seen */
    px_comm_paths(ctx->comm, 0, host, sizeof(host));
    px_comm_paths(ctx->comm, 1, dev, sizeof(dev));
    if (strncmp(host, "shm", 3) || (host[3] && strcmp(host + 3, ",ucx")) || *dev) {
        fprintf(stderr, "rank %d: px_comm_paths: host '%s' device '%s', want shm[,ucx] and none\n",
                ctx->rank, host, dev);
        return 1;
    }
    return 0;
}

/* Makes process_vm_readv fail with EPERM in this process from now on (a
 * seccomp filter: what the kernel answers where ptrace rights are missing);
 * 0 or -1. */
static int deny_vm_readv(void)
{
    struct sock_filter f[] = {
        BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(struct seccomp_data, nr)),
        BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, __NR_process_vm_readv, 0, 1),
        BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ERRNO | (EPERM & SECCOMP_RET_DATA)),
        BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW),
    };
    struct sock_fprog prog = {(unsigned short)(sizeof(f) / sizeof(*f)), f};

    if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0)
        return -1;
    return prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, &prog);
}

/* cma_eperm: the last rank may not read its peers (EPERM); a communicator
 * made afterwards keeps the segment, takes the two copies on every rank,
 * and every op stays exact. */
static int rank_cma_eperm(px_launch_rank_t *ctx)
{
    px_comm_t *c = NULL;
    int bad;

    if (ctx->rank == ctx->world - 1) {
        uint64_t word = 0, mine = 42;
        struct iovec lv = {&word, sizeof(word)}, rv = {&mine, sizeof(mine)};
        if (deny_vm_readv() != 0)
            FAIL("seccomp: %s", strerror(errno));
        if (process_vm_readv(getpid(), &lv, 1, &rv, 1, 0) >= 0 || errno != EPERM)
            FAIL("process_vm_readv still allowed after the seccomp filter");
    }
    if (px_comm_split(ctx->comm, 0, ctx->rank, &c) != PX_OK || !c->shm)
        FAIL("split: no segment");
    {
        uint64_t per = 1 << 16; /* 256 KiB per peer: far above PX_SHM_CMA_MIN_BYTES */
        float *in = calloc(per * (uint64_t)ctx->world, sizeof(float));
        float *out = calloc(per * (uint64_t)ctx->world, sizeof(float));
        px_request_t *req = NULL;
        if (!in || !out || px_alltoall_start(c, in, out, per, PX_FLOAT32, NULL, &req) != PX_OK)
            FAIL("all-to-all start");
        if (!on_shm(req) || px__shm_single_copy(req))
            FAIL("the all-to-all took %s, want the two copies of the segment",
                 on_shm(req) ? "the single copy" : "UCX");
        if (px_wait(req, -1) != PX_OK)
            FAIL("all-to-all: %s", px_comm_last_error(c));
        free(in);
        free(out);
    }
    bad = equal_on(ctx, c, 0);
    px_comm_destroy(c);
    return bad;
}

/* --- mismatch ------------------------------------------------------------------ */

/* ag: an all-gather (else an all-reduce) with these counts. */
static int mismatch_case(px_launch_rank_t *ctx, px_comm_t *c, uint64_t mine, uint64_t theirs,
                         int ag)
{
    int last = px_comm_size(c) - 1;
    uint64_t count = px_comm_rank(c) == last ? mine : theirs;
    uint64_t maxc = theirs > mine ? theirs : mine;
    float *buf = calloc(maxc * (uint64_t)(px_comm_size(c) + 1), sizeof(float));
    int64_t t0 = px_time_mono_ms();
    char a[32], b[32];
    px_status_t status = ag ? px_allgather(c, buf, buf + maxc, count, PX_FLOAT32, NULL)
                            : px_allreduce(c, buf, buf, count, PX_FLOAT32, PX_SUM, -1);

    snprintf(a, sizeof(a), "count %llu", (unsigned long long)mine);
    snprintf(b, sizeof(b), "count %llu", (unsigned long long)theirs);
    if (status != PX_ERR_MISMATCH)
        FAIL("counts %llu / %llu: got %s, want mismatch", (unsigned long long)theirs,
             (unsigned long long)mine, px_status_str(status));
    if (!strstr(px_comm_last_error(c), a) || !strstr(px_comm_last_error(c), b))
        FAIL("the error does not name both counts: %s", px_comm_last_error(c));
    if (px_time_mono_ms() - t0 > 5000)
        FAIL("the mismatch took %lld ms", (long long)(px_time_mono_ms() - t0));
    /* the communicator still works (the same count everywhere now) */
    for (uint64_t i = 0; i < theirs; i++)
        buf[i] = (float)(px_comm_rank(c) + 1);
    status = px_allreduce(c, buf, buf, theirs, PX_FLOAT32, PX_SUM, -1);
    if (status != PX_OK)
        FAIL("all-reduce after the mismatch: %s (%s)", px_status_str(status),
             px_comm_last_error(c));
    for (uint64_t i = 0; i < theirs; i++)
        if (buf[i] != (float)(px_comm_size(c) * (px_comm_size(c) + 1) / 2))
            FAIL("all-reduce after the mismatch: element %llu is %g", (unsigned long long)i,
                 buf[i]);
    printf("rank %d: %s\n", ctx->rank, px_comm_last_error(c));
    free(buf);
    return 0;
}

static int rank_mismatch(px_launch_rank_t *ctx)
{
    px_comm_t *c1 = NULL, *c2 = NULL;
    int bad;

    if (px_comm_split(ctx->comm, 0, ctx->rank, &c1) != PX_OK ||
        px_comm_split(ctx->comm, 0, ctx->rank, &c2) != PX_OK || !c1->shm || !c2->shm)
        FAIL("split: no segment");
    bad = mismatch_case(ctx, c1, 100, 8192, 0) || /* 400 bytes: the UCX path on the last rank */
          mismatch_case(ctx, c2, 4096, 8192, 0);   /* all on the segment */
    /* an all-gather whose last rank takes the two copies (below
     * PX_SHM_CMA_MIN_BYTES), the others the single copy */
    if (!bad) {
        px_comm_t *c3 = NULL;
        if (px_comm_split(ctx->comm, 0, ctx->rank, &c3) != PX_OK || !c3->shm)
            FAIL("split: no segment");
        bad = mismatch_case(ctx, c3, 1024, 8192, 1);
        px_comm_destroy(c3);
    }
    px_comm_destroy(c2);
    px_comm_destroy(c1);
    return bad;
}

/* --- kill ------------------------------------------------------------------------ */

typedef struct {
    atomic_llong t_kill_ms;
    int a2a;           /* the victim dies in an all-to-all (else an all-reduce) */
} kill_shared_t;

static int rank_kill(px_launch_rank_t *ctx)
{
    kill_shared_t *sh = ctx->arg;
    uint64_t count = 1 << 18; /* 1 MiB: many slots */
    float *buf = malloc(count * sizeof(float));
    px_status_t status = PX_OK;
    int64_t t_err;

    float *out = malloc(count * sizeof(float));
    int a2a = sh->a2a;

    for (uint64_t i = 0; i < count; i++)
        buf[i] = 1.0f;
    for (int it = 0; it < 1000; it++) {
        uint64_t per = count / (uint64_t)ctx->world;
        if (ctx->rank == 1 && it == 3) {
            px_request_t *req;
            int done;
            status = a2a ? px_alltoall_start(ctx->comm, buf, out, per, PX_FLOAT32, NULL, &req)
                         : px_allreduce_start(ctx->comm, buf, buf, count, PX_FLOAT32, PX_AVG, NULL,
                                              &req);
            if (status != PX_OK || !on_shm(req) || (a2a && !px__shm_single_copy(req)))
                FAIL("the victim's collective is not on the segment%s",
                     a2a ? " (single copy)" : "");
            px_test(req, &done); /* its first part (or its buffer) is published */
            atomic_store(&sh->t_kill_ms, px_time_mono_ms());
            raise(SIGKILL);
        }
        status = a2a ? px_alltoall(ctx->comm, buf, out, per, PX_FLOAT32, NULL)
                     : px_allreduce(ctx->comm, buf, buf, count, PX_FLOAT32, PX_AVG, -1);
        if (status != PX_OK)
            break;
        if (a2a && (out[0] != 1.0f || out[count - 1 - count % (uint64_t)ctx->world] != 1.0f))
            FAIL("all-to-all result %g", out[0]);
    }
    t_err = px_time_mono_ms();
    if (a2a) /* stay a while, as a rank whose daemon stops the job does: this
              * survivor's own exit must not be the first death a slower one
              * sees (its UCX endpoint error would name this rank); the single
              * copy's reads see rank 1 gone (ESRCH) within a few ms, sooner
              * than the watch fd, so the survivors' errors are further apart */
        usleep(300 * 1000);
    if (status == PX_OK)
        FAIL("no error in 1000 collectives");
    if (!atomic_load(&sh->t_kill_ms))
        FAIL("error before the kill: %s (%s)", px_status_str(status),
             px_comm_last_error(ctx->comm));
    printf("rank %d: %s %lld ms after the kill: %s\n", ctx->rank, px_status_str(status),
           (long long)(t_err - atomic_load(&sh->t_kill_ms)), px_comm_last_error(ctx->comm));
    if (status != PX_ERR_PEER_FAILURE || !strstr(px_comm_last_error(ctx->comm), "rank 1"))
        FAIL("want a peer failure naming rank 1");
    if (t_err - atomic_load(&sh->t_kill_ms) > px_env_int("PX_COMM_TIMEOUT_MS"))
        FAIL("the error came after the deadline");
    free(out);
    free(buf);
    return 0;
}

/* --- leaving a single-copy collective early ---------------------------------------- */

/* Value rank r sends to rank j in the cma_leave all-to-all (exact in fp32). */
static float a2a_val(int r, int j)
{
    return (float)(r * 1000 + j + 1);
}

/* One case of cma_leave: how = 0 cancel while rank 1 reads, 1 abort while
 * rank 1 reads, 2 cancel before anyone reads. */
static int leave_case(px_launch_rank_t *ctx, int how)
{
    static const char *name[] = {"cancel while read", "abort while read", "cancel before reads"};
    int n = ctx->world, me = ctx->rank;
    uint64_t per = 1 << 16; /* 256 KiB per peer */
    float *in = malloc(per * (uint64_t)n * sizeof(float)), *out = calloc(per * (uint64_t)n, sizeof(float));
    px_comm_t *c = NULL;
    px_request_t *req = NULL;
    px_status_t status;
    int64_t t0;

    if (!in || !out)
        FAIL("out of memory");
    for (int j = 0; j < n; j++)
        for (uint64_t i = 0; i < per; i++)
            in[(uint64_t)j * per + i] = a2a_val(me, j);
    if (px_comm_split(ctx->comm, 0, me, &c) != PX_OK || !c->shm)
        FAIL("%s: split: no segment", name[how]);
    t0 = px_time_mono_ms();
    if (me == 0) {
        int done = 0;
        int64_t dt;
        status = px_alltoall_start(c, in, out, per, PX_FLOAT32, NULL, &req);
        if (status != PX_OK || !px__shm_single_copy(req))
            FAIL("%s: the all-to-all is not single-copy", name[how]);
        /* (a), (b): our reads and phase 2 are done long before rank 1 has
         * slept out its 350 ms; (c): every peer waits for rank 1 */
        while (px_time_mono_ms() - t0 < (how == 2 ? 100 : 150) && !done && status == PX_OK) {
            status = px_test(req, &done);
            usleep(1000);
        }
        if (done || status != PX_OK)
            FAIL("%s: the all-to-all ended early: %s", name[how], px_status_str(status));
        t0 = px_time_mono_ms();
        if (how == 1) {
            px_comm_abort(c, "test");
            status = px_wait(req, -1);
            if (status != PX_ERR_ABORTED)
                FAIL("%s: px_wait gave %s, want aborted", name[how], px_status_str(status));
        } else {
            px_request_cancel(req);
        }
        dt = px_time_mono_ms() - t0;
        for (uint64_t i = 0; i < per * (uint64_t)n; i++)
            in[i] = -7.0f; /* the caller reuses its buffer */
        printf("rank 0: %s: returned after %lld ms\n", name[how], (long long)dt);
        if (how < 2 && dt < 50)
            FAIL("%s: returned after %lld ms while rank 1 still read our buffer", name[how],
                 (long long)dt);
        if (how == 2 && dt > CMA_LEAVE_SLOW_MS)
            FAIL("%s: took %lld ms with nobody reading", name[how], (long long)dt);
    } else {
        if (me == 1 && how < 2)
            px__cma_test_read_delay_ms = 350;
        if (me == 1 && how == 2)
            usleep(300 * 1000); /* rank 0 leaves before anyone can read */
        status = px_alltoall(c, in, out, per, PX_FLOAT32, NULL);
        px__cma_test_read_delay_ms = 0;
        if (how < 2) {
            if (status != PX_OK)
                FAIL("%s: %s (%s)", name[how], px_status_str(status), px_comm_last_error(c));
            for (int r = 0; r < n; r++)
                for (uint64_t i = 0; i < per; i++)
                    if (out[(uint64_t)r * per + i] != a2a_val(r, me))
                        FAIL("%s: element %llu from rank %d is %g, want %g", name[how],
                             (unsigned long long)i, r, out[(uint64_t)r * per + i], a2a_val(r, me));
        } else {
            int64_t dt = px_time_mono_ms() - t0;
            if (status != PX_ERR_ABORTED || !strstr(px_comm_last_error(c), "rank 0"))
                FAIL("%s: got %s (%s), want aborted naming rank 0", name[how],
                     px_status_str(status), px_comm_last_error(c));
            if (dt > 300 + CMA_LEAVE_SLOW_MS)
                FAIL("%s: the error came after %lld ms", name[how], (long long)dt);
            for (uint64_t i = 0; i < per; i++)
                if (out[i] == -7.0f)
                    FAIL("%s: read rank 0's buffer after it left", name[how]);
        }
        printf("rank %d: %s: %s after %lld ms\n", me, name[how], px_status_str(status),
               (long long)(px_time_mono_ms() - t0));
    }
    px_comm_destroy(c);
    free(in);
    free(out);
    return 0;
}

static int rank_cma_leave(px_launch_rank_t *ctx)
{
    for (int how = 0; how < 3; how++)
        if (leave_case(ctx, how))
            return 1;
    return 0;
}

static int rank_off(px_launch_rank_t *ctx)
{
    uint64_t count = 1 << 18;
    float *buf = malloc(count * sizeof(float));

    if (ctx->comm->shm)
        FAIL("PX_SHM=0 but the world has a segment");
    for (uint64_t i = 0; i < count; i++)
        buf[i] = (float)ctx->rank;
    if (px_allreduce(ctx->comm, buf, buf, count, PX_FLOAT32, PX_SUM, -1) != PX_OK)
        FAIL("all-reduce");
    for (uint64_t i = 0; i < count; i++)
        if (buf[i] != (float)(ctx->world * (ctx->world - 1) / 2))
            FAIL("element %llu is %g", (unsigned long long)i, buf[i]);
    free(buf);
    return 0;
}

static int rank_reslot(px_launch_rank_t *ctx)
{
    px_comm_t *w = ctx->comm, *u = NULL;
    px_request_t *req = NULL;
    float x = 1.0f, y[64];

    if (!w->shm)
        FAIL("no segment on the world");
    if (px_comm_set_shm_slot(w, 100) != PX_ERR_INVALID_ARGUMENT ||
        px_comm_set_shm_slot(w, (uint64_t)1 << 40) != PX_ERR_INVALID_ARGUMENT)
        FAIL("a slot of 100 bytes or 1 TiB was not refused");
    /* a request pending (a small all-gather over UCX): refused on every rank */
    if (px_allgather_start(w, &x, y, 1, PX_FLOAT32, NULL, &req) != PX_OK)
        FAIL("all-gather start");
    if (px_comm_set_shm_slot(w, 65536) != PX_ERR_INVALID_ARGUMENT)
        FAIL("remapped with a request pending");
    if (px_wait(req, -1) != PX_OK)
        FAIL("all-gather");
    if (px_comm_set_shm_slot(w, 65536) != PX_OK || !w->shm)
        FAIL("remap to 64 KiB slots");
    if (equal_on(ctx, w, 1))
        return 1;
    if (px_comm_set_shm_slot(w, 4096) != PX_OK || !w->shm)
        FAIL("remap to 4 KiB slots");
    if (equal_on(ctx, w, 1))
        return 1;
    /* without a segment (PX_SHM_MIN_BYTES counts only at the call; a
     * communicator of one rank has none): nothing to do */
    if (px_comm_split(w, ctx->rank, 0, &u) != PX_OK || u->shm)
        FAIL("split into single ranks");
    if (px_comm_set_shm_slot(u, 65536) != PX_OK || u->shm)
        FAIL("set_shm_slot on a communicator without a segment");
    px_comm_destroy(u);
    return 0;
}

/* --- /dev/shm ---------------------------------------------------------------------- */

static pid_t pids[64];
static int n_pids;

static void remember(const pid_t *p, int n, void *arg)
{
    kill_shared_t *sh = arg;
    (void)sh;
    n_pids = n < 64 ? n : 64;
    memcpy(pids, p, (size_t)n_pids * sizeof(pid_t));
}

/* Names in /dev/shm made by one of our ranks. */
static int leftovers(void)
{
    DIR *d = opendir("/dev/shm");
    struct dirent *e;
    int found = 0;

    if (!d)
        return 0;
    while ((e = readdir(d))) {
        for (int i = 0; i < n_pids; i++) {
            char prefix[32];
            snprintf(prefix, sizeof(prefix), "px-%d-", (int)pids[i]);
            if (!strncmp(e->d_name, prefix, strlen(prefix))) {
                fprintf(stderr, "FAIL: /dev/shm/%s left behind\n", e->d_name);
                found++;
            }
        }
    }
    closedir(d);
    return found;
}

int main(int argc, char **argv)
{
    const char *what = argc > 1 ? argv[1] : "equal";
    int n = argc > 2 ? atoi(argv[2]) : 4;
    px_launch_opts_t opts = {.use_watch = 1, .limit_s = 200, .on_started = remember};
    int failed, statuses[64];

    setvbuf(stdout, NULL, _IOLBF, 0);
    if (n < 2 || n > 64)
        return 2;
    if (!strcmp(what, "equal")) {
        failed = px_launch(n, rank_equal, NULL, &opts, NULL);
    } else if (!strcmp(what, "mismatch")) {
        failed = px_launch(n, rank_mismatch, NULL, &opts, NULL);
    } else if (!strcmp(what, "kill") || !strcmp(what, "kill_a2a")) {
        kill_shared_t *sh = px_launch_shared(sizeof(*sh));
        if (!sh)
            return 1;
        sh->a2a = !strcmp(what, "kill_a2a");
        failed = px_launch(n, rank_kill, sh, &opts, statuses);
        if (failed == 1 && WIFSIGNALED(statuses[1]) && WTERMSIG(statuses[1]) == SIGKILL)
            failed = 0; /* the victim */
    } else if (!strcmp(what, "cma_eperm")) {
        failed = px_launch(n, rank_cma_eperm, NULL, &opts, NULL);
    } else if (!strcmp(what, "cma_leave")) {
        failed = px_launch(n, rank_cma_leave, NULL, &opts, NULL);
    } else if (!strcmp(what, "reslot")) {
        failed = px_launch(n, rank_reslot, NULL, &opts, NULL);
    } else if (!strcmp(what, "off")) {
        setenv("PX_SHM", "0", 1);
        failed = px_launch(n, rank_off, NULL, &opts, NULL);
    } else {
        fprintf(stderr, "usage: %s equal|mismatch|kill|kill_a2a|cma_leave|cma_eperm|reslot|off N\n", argv[0]);
        return 2;
    }
    failed += leftovers();
    if (failed)
        fprintf(stderr, "FAIL: %d failure(s)\n", failed);
    return failed ? 1 : 0;
}
