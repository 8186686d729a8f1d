/* px_shm_cma.c: single-copy reads for the shared-memory path (px_shm_cma.h):
 * process_vm_readv from the peer's own buffer into ours, as Open MPI's
 * vader/sm does for large messages with CMA.
 *
 * Invariants: a descriptor {seq, addr} sits at the start of its owner's
 * staging buffer of the step (px_shm.c rotates three per rank, so it is not
 * rewritten while a peer may still read it); the owner keeps `addr` valid
 * until every rank published the phase after its reads (px_shm.c waits for
 * it). Reads never write the peer; a read from a process that is gone fails
 * with ESRCH (a zombie has no memory left), which becomes the peer-failure
 * error naming the rank. The probe at setup decides once per communicator,
 * the same way on every rank, whether the reads are allowed at all.
 *
 * Runs on the thread using the communicator, as the rest of the transport. */
#include "px_shm_cma.h"

#include <errno.h>
#if defined(__x86_64__) || defined(__i386__)
#include <cpuid.h>
#endif
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/uio.h>
#include <time.h>
#include <unistd.h>

#include "px_coll.h"
#include "px_env.h"
#include "px_log.h"

struct px__cma {
    int n, me;
    pid_t *pid;          /* [n]: the process of each comm rank */
    int64_t min_bytes;   /* rank 0's PX_SHM_CMA_MIN_BYTES (< 0: AUTO_BLOCK_BYTES per block) */
    unsigned kinds;      /* KIND(PX__COLL_*) taking it: what every rank's PX_SHM_CMA allows */
};

#define KIND(k) (1u << (k))

/* PX_SHM_CMA_MIN_BYTES=-1 (the default): the single copy where each peer's
 * block (an all-gather's or all-to-all's count, a broadcast's buffer) has
 * at least this many bytes. Measured (Xeon, 2 vCPUs, best of 3 against
 * Open MPI in the same runs, load 1.4-2.0): at 2 ranks the single copy was
 * faster from 8 KiB blocks (64 KiB all-gather 3.2 against 4.3 us with two
 * copies, Open MPI 3.7); at 4 ranks on the 2 cores, where every extra
 * phase of the single copy costs a context switch, the two copies were
 * faster with 16 KiB blocks (64 KiB all-gather 10.8 against 19.8 us,
 * all-to-all 11.1 against 14.6) and the single copy with 64 KiB (256 KiB
 * all-to-all 28 against 41 us). */
#define AUTO_BLOCK_BYTES 32768

typedef struct desc {
    uint32_t seq;
    uint32_t pad;
    uint64_t addr;
} desc_t;

_Static_assert(sizeof(desc_t) <= PX__CMA_DESC_BYTES, "descriptor size");

/* What every rank sends at setup. */
typedef struct probe {
    int32_t pid;
    uint32_t kinds;      /* KIND(PX__COLL_*) PX_SHM_CMA allows here (0: off) */
    int64_t min_bytes;   /* this rank's PX_SHM_CMA_MIN_BYTES (rank 0's is used) */
    uint64_t addr;       /* address of this process's probe word */
    uint64_t word;       /* its value */
} probe_t;

static volatile uint64_t probe_word;

volatile int px__cma_test_read_delay_ms;

unsigned px__cma_auto_kinds(void)
{
#if defined(__x86_64__) || defined(__i386__)
    unsigned a, b, c, d;
    char vendor[13];

    if (!__get_cpuid(0, &a, &b, &c, &d))
        return 0;
    memcpy(vendor, &b, 4);
    memcpy(vendor + 4, &d, 4);
    memcpy(vendor + 8, &c, 4);
    vendor[12] = 0;
    if (!strcmp(vendor, "GenuineIntel"))
        return KIND(PX__COLL_ALLGATHER) | KIND(PX__COLL_ALLTOALL);
#endif
    return 0;
}

/* The kinds PX_SHM_CMA `mode` allows on this machine: 0 none; 1
 * all-to-all; 2 all-to-all, all-gather and broadcast; any other value
 * (-1, the default) px__cma_auto_kinds. */
static unsigned kinds_of(long mode)
{
    if (mode == 0)
        return 0;
    if (mode == 1)
        return KIND(PX__COLL_ALLTOALL);
    if (mode == 2)
        return KIND(PX__COLL_ALLTOALL) | KIND(PX__COLL_ALLGATHER) | KIND(PX__COLL_BCAST);
    return px__cma_auto_kinds();
}

/* With Yama's ptrace_scope = 1 only a declared tracer (or an ancestor) may
 * read our memory: declare any process of our user one (what ptrace_scope
 * 0 allows anyway). No Yama, or another scope: nothing to do (scope 2 and 3
 * forbid it; the probe then fails and the two-copy path stays). */
static void allow_peers(void)
{
#ifdef PR_SET_PTRACER
    FILE *f = fopen("/proc/sys/kernel/yama/ptrace_scope", "r");
    int scope = -1;

    if (!f)
        return;
    if (fscanf(f, "%d", &scope) != 1)
        scope = -1;
    fclose(f);
    if (scope == 1 && prctl(PR_SET_PTRACER, PR_SET_PTRACER_ANY, 0, 0, 0) != 0)
        px_debug("prctl(PR_SET_PTRACER): %s", strerror(errno));
#endif
}

/* Reads `bytes` at `raddr` of process `pid` into `local` (process_vm_readv
 * returns short counts only at a failing page: go on from there). 0 or an
 * errno. */
static int read_peer(pid_t pid, uint64_t raddr, void *local, size_t bytes)
{
    char *l = local;

    while (bytes > 0) {
        struct iovec lv = {l, bytes};
        struct iovec rv = {(void *)(uintptr_t)raddr, bytes};
        ssize_t got = process_vm_readv(pid, &lv, 1, &rv, 1, 0);
        if (got < 0) {
            if (errno == EINTR)
                continue;
            return errno;
        }
        if (got == 0)
            return EFAULT;
        l += got;
        raddr += (uint64_t)got;
        bytes -= (size_t)got;
    }
    return 0;
}

px_status_t px__cma_setup(px_comm_t *comm, px__cma_t **cma_p)
{
    int n = comm->size;
    probe_t mine, *all = calloc((size_t)n, sizeof(probe_t));
    px__cma_t *c = calloc(1, sizeof(*c));
    pid_t *pid = calloc((size_t)n, sizeof(pid_t));
    int32_t ok = 1, all_ok = 0;
    px_status_t status = PX_ERR_NO_MEMORY;

    *cma_p = NULL;
    if (!all || !c || !pid) /* (the peers then fail setup by their deadline) */
        goto out;
    memset(&mine, 0, sizeof(mine));
    mine.kinds = kinds_of(px_env_int("PX_SHM_CMA"));
    if (mine.kinds)
        allow_peers();
    if (!probe_word) {
        struct timespec ts;
        clock_gettime(CLOCK_MONOTONIC, &ts);
        probe_word = ((uint64_t)getpid() << 32) ^ (uint64_t)ts.tv_nsec ^ 0x9e3779b97f4a7c15ULL;
    }
    mine.pid = (int32_t)getpid();
    mine.min_bytes = (int64_t)px_env_int("PX_SHM_CMA_MIN_BYTES");
    mine.addr = (uint64_t)(uintptr_t)&probe_word;
    mine.word = probe_word;
    status = px_allgather(comm, &mine, all, sizeof(mine), PX_UINT8, NULL);
    if (status != PX_OK)
        goto out;
    for (int p = 0; p < n && ok; p++) {
        uint64_t got = 0;
        int err;
        pid[p] = (pid_t)all[p].pid;
        if (!all[p].kinds) { /* off there: off for every rank */
            ok = 0;
            break;
        }
        if (p == comm->rank)
            continue;
        err = read_peer(pid[p], all[p].addr, &got, sizeof(got));
        if (err || got != all[p].word) {
            px_info("comm %u: process_vm_readv from rank %d (pid %d): %s: single-copy "
                    "collectives off", comm->id, p, (int)pid[p],
                    err ? strerror(err) : "wrong value");
            ok = 0;
        }
    }
    status = px_allreduce(comm, &ok, &all_ok, 1, PX_INT32, PX_MIN, -1);
    if (status == PX_OK && all_ok) {
        c->n = n;
        c->me = comm->rank;
        c->pid = pid;
        c->min_bytes = all[0].min_bytes;
        c->kinds = all[0].kinds;
        for (int p = 1; p < n; p++)
            c->kinds &= all[p].kinds;
        *cma_p = c;
        px_debug("comm %u: single-copy collectives (kinds 0x%x) from %lld bytes (-1: %d per "
                 "block)", comm->id, c->kinds, (long long)c->min_bytes, AUTO_BLOCK_BYTES);
        free(all);
        return PX_OK;
    }
out:
    free(all);
    free(pid);
    free(c);
    return status;
}

void px__cma_destroy(px__cma_t *cma)
{
    if (!cma)
        return;
    free(cma->pid);
    free(cma);
}

int px__cma_wants(const px__cma_t *cma, int kind, uint64_t bytes)
{
    uint64_t block;

    if (!cma)
        return 0;
    block = kind == PX__COLL_BCAST ? bytes : bytes / (uint64_t)cma->n;
    if (cma->min_bytes >= 0 ? bytes < (uint64_t)cma->min_bytes : block < AUTO_BLOCK_BYTES)
        return 0;
    return kind >= 0 && kind < 32 && (cma->kinds & KIND(kind)) != 0;
}

void px__cma_post(void *desc, uint32_t seq, const void *addr)
{
    desc_t d = {seq, 0, (uint64_t)(uintptr_t)addr};
    memcpy(desc, &d, sizeof(d));
}

/* Reads `bytes` at byte `off` of rank p's published buffer into `to`. A
 * failure other than ESRCH is left in *bad_p (see px__cma_read). */
static px_status_t read_part(px_comm_t *comm, const px__cma_t *cma, uint32_t seq, int p,
                             const char *desc0, size_t stride, uint64_t off, void *to,
                             size_t bytes, px__cma_bad_t *bad_p)
{
    desc_t d;
    int err;
    px_status_t status;

    memcpy(&d, desc0 + (size_t)p * stride, sizeof(d));
    if (d.seq != seq)
        return px__comm_set_error(comm, PX_ERR_MISMATCH,
                                  "rank %d: single-copy collective #%u: its buffer is published "
                                  "for #%u", p, seq, d.seq);
    err = read_peer(cma->pid[p], d.addr + off, to, bytes);
    if (!err)
        return PX_OK;
    if (err == ESRCH) {
        /* the process is gone: say so the way a pidfd would (naming the
         * rank, in world terms on a sub-communicator) */
        bad_p->gone = p;
        status = px__check_async(comm);
        if (status != PX_OK)
            return status;
        if (comm->wrank)
            return px__comm_set_error(comm, PX_ERR_PEER_FAILURE,
                                      "rank %d (world rank %d): peer failure (process gone: "
                                      "process_vm_readv: %s)", p, comm->wrank[p], strerror(err));
        return px__comm_set_error(comm, PX_ERR_PEER_FAILURE,
                                  "rank %d: peer failure (process gone: process_vm_readv: %s)", p,
                                  strerror(err));
    }
    /* EFAULT: the buffer is not mapped (any more). Its owner left the
     * collective (a failure it saw first: it never publishes the phase we
     * wait for next, or a rank it waited for never does, so our wait fails
     * too, naming the cause) or passed a bad buffer (then the wait succeeds
     * and the caller reports this). */
    status = px__check_async(comm);
    if (status != PX_OK)
        return status;
    if (bad_p->peer < 0) {
        bad_p->peer = p;
        bad_p->err = err;
    }
    return PX_OK;
}

px_status_t px__cma_bad_status(px_comm_t *comm, const px__cma_bad_t *bad)
{
    if (bad->peer < 0)
        return PX_OK;
    return px__comm_set_error(comm, PX_ERR_INTERNAL,
                              "rank %d: single-copy read of its buffer (process_vm_readv): %s",
                              bad->peer, strerror(bad->err));
}

px_status_t px__cma_read(px_comm_t *comm, const px__cma_t *cma, int kind, uint32_t seq,
                         const char *desc0, size_t desc_stride, char *dst,
                         uint64_t count, size_t esz, int root, px__cma_bad_t *bad_p)
{
    int n = cma->n, me = cma->me;
    size_t cb = (size_t)count * esz;

    switch (kind) {
    case PX__COLL_BCAST:
        if (me == root)
            return PX_OK;
        return read_part(comm, cma, seq, root, desc0, desc_stride, 0, dst, cb, bad_p);
    case PX__COLL_ALLGATHER:
    case PX__COLL_ALLTOALL:
        /* (our own block is in place already: px_shm.c's copy_own) */
        for (int i = 1; i < n; i++) {
            int p = (me + i) % n;
            uint64_t off = kind == PX__COLL_ALLTOALL ? (uint64_t)me * cb : 0;
            px_status_t status = read_part(comm, cma, seq, p, desc0, desc_stride, off,
                                           dst + (size_t)p * cb, cb, bad_p);
            if (status != PX_OK)
                return status;
        }
        return PX_OK;
    default:
        return px__comm_set_error(comm, PX_ERR_INTERNAL, "single-copy path: collective kind %d",
                                  kind);
    }
}
