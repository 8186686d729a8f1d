/* px_shm.c: collectives through one shared-memory segment for the ranks of
 * one host (px_shm.h), as NCCL's SHM transport and Open MPI's vader/sm.
 *
 * Segment (POSIX shm_open, mapped by every rank of the communicator):
 *
 *   ctl[n]        per rank: `ctr`, the number of phases it has published (a
 *                 futex word), and `waiters`, how many ranks sleep on it
 *   hdr[n][RING]  per rank: the header (kind, dtype, op, root, count) of its
 *                 collective #seq at entry seq % RING, tagged seq + 1
 *   slot[n][3]    per rank: three staging buffers of PX_SHM_A2A_SLOT_BYTES
 *                 (an all-to-all's step); the other ops stage at most
 *                 PX_SHM_SLOT_BYTES of each
 *
 * Why shm_open and not a memfd: a memfd reaches other processes only as a
 * file descriptor (SCM_RIGHTS over a socket we do not have between ranks,
 * or pidfd_getfd, which needs ptrace rights); a name is one string sent
 * over the UCX broadcast we already have. The name is unique (creator pid,
 * communicator id, a per-process generation, random bits; O_EXCL) and is
 * unlinked by its creator as soon as every rank has mapped it (or failed
 * to), before setup returns: a crash later leaves nothing in /dev/shm (the
 * pages go with the last mapping). Only a creator killed inside setup, in
 * the window between shm_open and the agreement collective, can leave a
 * name behind.
 *
 * Algorithm (every op): the data go in steps of at most one staging buffer
 * per rank. A step: each rank copies its part into its buffer (number
 * step % 3), publishes (ctr++, FUTEX_WAKE when someone sleeps on it), waits
 * until every rank's ctr reached its own, then reads the others' buffers:
 *   all-gather     copy every rank's piece out;
 *   all-to-all     copy block `me` of every rank's buffer out;
 *   reduce-scatter reduce block `me` of every buffer, in rank order 0..n-1;
 *   broadcast      copy the root's buffer out;
 *   all-reduce     reduce part `me` (1/n of the step's elements) of every
 *                  buffer in rank order into the output, put the result in
 *                  part `me` of its own buffer, publish and wait again, copy
 *                  the other parts out; small ones (ONEPHASE_MAX_REMOTE)
 *                  in one phase: every rank reduces every element of every
 *                  buffer in rank order (one publish and wait, not two).
 * Every element is reduced in one fixed order (by one rank, or by every
 * rank the same way), so every rank gets bitwise the same result (and exactly the UCX path's where the math is
 * exact: integers, integer-valued floats). Pipelining: right after a step's
 * last wait a rank copies in and publishes the next step, and only then
 * reads the finished step's buffers, so a peer that ends its own reads
 * finds the next step already there instead of sleeping. Three buffers per
 * rank make that safe: a rank writes buffer b at step s + 3 only after it
 * saw every rank publish the last phase of step s + 2, which each does
 * after its reads of step s. Every rank publishes the same sequence of
 * phases, so "every ctr >= mine" is the barrier of each phase, across
 * collectives too.
 *
 * Single copy (px_shm_cma.h; by default all-gathers and all-to-alls with
 * blocks of 32 KiB or more on Intel CPUs, none elsewhere): one step whose
 * buffer holds only the rank's descriptor (the address of its own send
 * buffer); after the first wait each rank reads its parts straight from
 * the peers' buffers (process_vm_readv), publishes, and waits until every
 * rank has published again before it returns, so no buffer is read after
 * its owner's request completed. The step takes its turn in the buffer
 * rotation like any other, so the rules above still hold.
 *
 * Leaving a single-copy collective early: the owner's buffer is borrowed
 * from its descriptor's publish until every reader published its phase 2.
 * A request that ends before that (cancelled, aborted, past its deadline,
 * failed) must not hand the buffer back while a peer may still read it, nor
 * may a reader report data read after its owner reused the buffer. Each
 * reader stores `reading` = seq + 1 before its reads and 0 after them; an
 * owner that leaves stores `left` = seq + 1 (and wakes the sleepers on its
 * counter), then waits until no peer's `reading` is seq + 1 (futex on that
 * word in 1 ms slices; a peer whose process is gone does not read; bound
 * CMA_DRAIN_MS) before its request is freed. A reader checks every owner's
 * `left` after storing `reading` (both seq_cst: either the owner sees the
 * reader or the reader sees the owner gone, Dekker's pattern), and reads
 * nothing when one left: it fails with PX_ERR_ABORTED naming the rank, but
 * still publishes its phase 2, so readers that finished before the owner
 * left complete. Only where the drain's bound passed does the owner store
 * `abandoned`: a reader checks it after its reads (were any byte of its
 * data written after the owner left, it would see the store) and then
 * fails instead of returning that data. A reader waiting for a phase an
 * owner that left will never publish fails at once (PX_ERR_ABORTED), not
 * at its deadline.
 *
 * Ordering: shared-memory collectives of one communicator run in start
 * order (a later request waits until the earlier ones are done), as all
 * ranks start them in the same order. The headers: each rank writes its
 * header into the ring before its first publish, and after the first wait
 * compares every rank's with its own: a disagreement is PX_ERR_MISMATCH on
 * every rank naming both values. A rank whose count put it on the UCX path
 * (below the threshold) still writes the ring (px__shm_note), so both sides
 * see the disagreement; after any mismatch the communicator stops using the
 * segment (the ranks' counters may no longer agree).
 *
 * Waiting spins only where that cannot take a peer's core: by default
 * (PX_SHM_SPIN_US=-1) it polls the counter for 50 us before sleeping while
 * px__spin_allowed (the job's ranks on this node no more than its CPUs, the
 * load average not above them; measured at 2 ranks on 2 idle cores: 4-64
 * KiB collectives 1.1-2x faster, 16 KiB all-gather 8.9 -> 4.3 us; an
 * unconditional spin was 3-10x slower on 2 loaded cores); PX_SHM_SPIN_US
 * >= 0 sets the poll time (0: never). An auto spin that runs out (the
 * peer did not publish within it: the scheduler, balancing by load, had put
 * both ranks on one core whenever anything else ran) backs off: the next 16
 * waits, doubling per miss to 1024, do not spin (px__spin_backoff_try;
 * measured: other engineers' load 4-6 on 2 cores with the load
 * average taken as quiet, 4 KiB all-to-all 0.01-0.03 GB/s spinning every
 * wait, 0.44 backing off, 0.57-0.6 never spinning, while on a quiet machine
 * the spin hit every wait and made it 3.8 against 2.3 yielding), and such
 * a wait goes on to the yield window. Where it does not spin (more ranks
 * than cores, or a loaded machine) it polls the counter calling sched_yield
 * for up to PX_SHM_YIELD_US (auto 500 us), once per wait (yield_poll): the
 * peer we wait for is often runnable on our core, and a yield hands it the
 * core where a futex sleep costs a sleep and a wake-up per step. Then
 * px__sleep calls px__shm_sleep, which sleeps on the
 * futex word of the rank we wait for (FUTEX_WAIT without FUTEX_PRIVATE_FLAG
 * works across processes on a shared mapping), in slices of PX_SHM_SLICE_MS
 * (1 ms while UCX requests are pending too), so the request's step still
 * looks at pidfds and the watch fd: a dead peer fails every survivor naming
 * it, as on the UCX path. Those two descriptors cost a poll() each, so the
 * checks read them at most every 100 us (px_progress.c, check_world) and
 * right after a futex sleep that ran out its slice; a wake-up by the peer,
 * or a counter that moved before we slept, needs no look (the peer is
 * alive). A publish makes the FUTEX_WAKE syscall only when `waiters` says
 * someone sleeps on the counter (as glibc's mutex wakes only when
 * contended), so spinning peers cost the publisher no syscall.
 *
 * Cost per small blocking collective: no allocation (the communicator keeps
 * its last finished request and reuses it: px__shm_req_free) and, on a
 * machine where the peers spin, no syscall at all; measured with 4 KiB at
 * 2 ranks, spin off (perf stat -e raw_syscalls:sys_enter): 6.4 syscalls
 * per all-gather / reduce-scatter / all-to-all and 10.6 per all-reduce
 * before (5 and 8 of them poll()), 1.5 after.
 *
 * Runs on the thread using the communicator (single-threaded as the rest of
 * the transport). */
#include "px_shm.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <poll.h>
#include <sched.h>
#include <linux/futex.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "px_env.h"
#include "px_log.h"
#include "px_path.h"
#include "px_reduce.h"
#include "px_shm_cma.h"
#include "px_shm_reg.h"
#include "px_time.h"

#define RING 64           /* header entries per rank */
#define SLICE_MS 10       /* longest futex sleep before pidfds are looked at */
#define SLICE_BUSY_MS 1   /* the same while UCX requests are pending too */
#define NAME_LEN 64
#define NBUF 3           /* staging buffers per rank */
#define AUTO_SPIN_US 50   /* PX_SHM_SPIN_US=-1 (the default) where px__spin_allowed */
/* PX_SHM_YIELD_US=-1 (the default) where the spin is not allowed: 4 ranks on
 * 2 loaded cores (load 8-9), median us of 5 px-coll-bench runs, window 50 ->
 * 500 us: 4 KiB all-to-all 33 -> 14, 16 KiB 53 -> 18, 16 KiB all-gather 28
 * -> 20 (Open MPI in the same runs: 23, 87, 121); 0 (futex at once): 4 KiB
 * all-to-all 57, with 6.5 futex calls per op over the 4 ranks against 0.1
 * with the window. bench_zero dp=4 step times did not move beyond their
 * noise (best 0.9-1.7 s either way). */
#define AUTO_YIELD_US 500
/* An all-reduce whose one-phase form reads at most this many bytes of the
 * peers' buffers (bytes x (n - 1)) runs in one phase: every rank reduces
 * every element itself (in the same rank order 0..n-1, so the bits are
 * those of the two-phase form) instead of 1/n of them followed by a second
 * publish and wait. At 2 ranks both forms read the same remote bytes; at n
 * the one-phase form reads n/2 times as many, against a second barrier (a
 * cache-line round trip at best, a futex sleep and wake-up where ranks do
 * not spin). Measured (bench-small-lat, PX_SHM=1, load 11 on 2 cores,
 * median us per call, two-phase -> one-phase): 2 ranks 16 KiB 24.4 ->
 * 15.3, 32 KiB 26 -> 21; 4 ranks 16 KiB 69 -> 53 (48 KiB remote), 32 KiB
 * 80 -> 88 (96 KiB remote: left two-phase). */
#define ONEPHASE_MAX_REMOTE 49152
/* Longest time (ms) a single-copy owner that leaves its collective early
 * (cancel, abort, deadline, any failure) waits for the peers still reading
 * its buffer: a read is one process_vm_readv per peer (16 MiB: a few ms),
 * so this is reached only by a reader stopped or starved in the middle. */
#define CMA_DRAIN_MS 500

typedef struct ctl {
    _Atomic uint32_t ctr;     /* phases published */
    _Atomic uint32_t waiters; /* ranks sleeping on ctr */
    /* single copy (see "Leaving a single-copy collective early" above):
     * seq + 1 of the collective whose peers' buffers this rank is reading
     * right now (0: none), of the one it left before its readers were done,
     * and of the one it left while a reader still read (the drain's bound
     * passed): that reader's data may be stale */
    _Atomic uint32_t reading;
    _Atomic uint32_t left;
    _Atomic uint32_t abandoned;
    _Atomic int32_t left_dead; /* with `left`: comm rank + 1 of the peer whose death made
                                * this rank leave, 0 for any other cause */
    _Atomic int32_t cpu;      /* the CPU this rank last published from, + 1 (0: not yet) */
    char pad[100];
} ctl_t;

_Static_assert(sizeof(ctl_t) == 128, "one control block per two cache lines");

typedef struct hent {
    _Atomic uint32_t tag;     /* seq + 1 once complete, 0 while written */
    uint32_t kind, dtype, op;
    int32_t root;
    uint32_t reg;             /* 1: an all-reduce over a registered buffer (px_shm_reg.h) */
    uint64_t count;
} hent_t;

struct px__shm {
    char *base;
    size_t bytes;
    int n, me;
    size_t slot;              /* bytes one rank stages per step (all but all-to-all) */
    size_t stride;            /* bytes of one staging buffer: an all-to-all's step (>= slot) */
    ctl_t *ctl;               /* [n] */
    hent_t *hdr;              /* [n * RING] */
    char *slots;              /* [n][NBUF][slot] */
    uint32_t pub;             /* my ctr */
    uint64_t step;            /* steps so far (step % NBUF: its buffer) */
    int off;                  /* stopped (mismatch / cancel) */
    uint64_t min_bytes;
    struct shm_req *spare;    /* a finished request kept for the next start, or NULL */
    long spin_us;             /* poll the counter this long before sleeping */
    long yield_us;            /* where it does not spin: poll with sched_yield this long */
    int yielded_peer;         /* the wait (peer, value) whose yield window ran out: */
    uint32_t yielded_val;     /* its later sleep slices go straight to the futex */
    px__spin_backoff_t backoff; /* auto spin: waits left without it after a miss */
    px__cma_t *cma;           /* single copy (px_shm_cma.h), NULL when off */
    /* which wait tier ended each blocking wait (PX_SHM_WAIT_STATS=1 prints
     * them at px__shm_destroy): waits that came to px__shm_sleep, of them
     * those that spun and those that yielded (the tier chosen), those the
     * spin or the yield window ended, and futex sleeps made */
    uint64_t n_wait, n_spin, n_yield, n_spin_hit, n_yield_hit, n_futex;
    /* what the blocked request waits for (px__shm_sleep) */
    px_request_t *wait_req;
    int wait_peer;
    uint32_t wait_val;
};

/* One pipeline step: elements [off, off + c) of the count, in buffer buf. */
typedef struct step {
    uint64_t off, c;
    int buf;
} step_t;

/* The state of one shared-memory collective (req->shm). */
typedef struct shm_op {
    int kind;
    px_dtype_t dtype;
    px_redop_t op;
    int root;
    const char *src;
    char *dst;
    uint64_t count;           /* elements of the header's count */
    size_t esz;
    uint64_t chunk;           /* elements of `count` per step */
    step_t cur;               /* the step in flight */
    uint64_t next;            /* first element of the step after it */
    int started;
    int phase;                /* 1 after copy-in, 2 after all-reduce's reduce */
    int waiting;              /* published: waiting for every ctr >= target */
    uint32_t target;
    int checked;              /* headers compared */
    int onephase;             /* small all-reduce: every rank reduces it all (below) */
    int cma;                  /* single copy: one step; its buffer holds the descriptor */
    px__cma_bad_t bad;        /* single copy: a read that failed while its owner lived */
    uint32_t seq;
    int reg;                  /* registered all-reduce (px_shm_reg.c): three phases, one step */
    px__shm_reg_view_t rv;    /* with reg: where the buffer lies in every rank's mapping */
} shm_op_t;

/* A shared-memory request and its state in one allocation (req.shm ==
 * &op); px__shm_t keeps one finished one for the next start. */
typedef struct shm_req {
    px_request_t req;
    shm_op_t op;
} shm_req_t;

static unsigned generation;

static inline void cpu_relax(void)
{
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#elif defined(__aarch64__)
    __asm__ __volatile__("yield");
#endif
}

static long futex(_Atomic uint32_t *addr, int op, uint32_t val, const struct timespec *ts)
{
    return syscall(SYS_futex, (uint32_t *)addr, op, val, ts, NULL, 0);
}

static char *slot_of(const px__shm_t *s, int rank, int buf)
{
    return s->slots + ((size_t)rank * NBUF + (size_t)buf) * s->stride;
}

static size_t align_up(size_t x, size_t a)
{
    return (x + a - 1) / a * a;
}

/* Bytes of one staging buffer, which an all-to-all's step fills (its n
 * blocks of a step; every other op stages `slot` bytes): PX_SHM_A2A_SLOT_BYTES
 * (`want`), at least `slot`, a multiple of 4096. An all-to-all step moves
 * 1/n of its buffer to each peer, so it takes n times as many steps
 * (barriers) per byte as an all-gather. Larger all-to-all steps were
 * measured (4 ranks on the 2-core VM, px-coll-bench -n 4 --op all_to_all,
 * 60 iterations, user+sys CPU of all ranks, two rounds, load 14-19):
 * 256 KiB -> 1 MiB -> 4 MiB cut the voluntary context switches 12700 ->
 * 3100 -> 800 at 16 MiB but raised the user time 1.54-1.73 -> 1.82-1.99 ->
 * 1.78-1.95 s (a step's staging no longer stays in the 512 KiB L2), with
 * no wall-time gain against Open MPI in the same runs: so the default is
 * `slot` (0), and the knob stays for machines with larger caches. The
 * pages past `slot` are touched only by all-to-alls. */
static size_t a2a_bytes(size_t slot, size_t want)
{
    want = align_up(want, 4096);
    return want > slot ? want : slot;
}

/* --- setup ------------------------------------------------------------------ */

static void *map_fd(int fd, size_t bytes)
{
    void *p = mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    return p == MAP_FAILED ? NULL : p;
}

px_status_t px__shm_segment(px_comm_t *comm, int want, const char *prefix, const char *fallback,
                            size_t *bytes_p, int adopt_bytes, void *extra, size_t extra_len,
                            int local_ok, void **base_p)
{
    struct {
        int32_t ok;
        char name[NAME_LEN];
        uint64_t bytes;
        unsigned char extra[PX__SHM_SEG_EXTRA_MAX];
    } msg;
    int32_t ok, all_ok;
    int created = 0;
    char *base = NULL;
    px_status_t status;

    *base_p = NULL;
    if (extra_len > PX__SHM_SEG_EXTRA_MAX) {
        px_error("px__shm_segment: %zu bytes of rank 0's data: at most %d", extra_len,
                 PX__SHM_SEG_EXTRA_MAX);
        return PX_ERR_INVALID_ARGUMENT;
    }
    ok = want != 0;
    status = px_allreduce(comm, &ok, &all_ok, 1, PX_INT32, PX_MIN, -1);
    if (status != PX_OK || !all_ok)
        return status;

    memset(&msg, 0, sizeof(msg));
    if (comm->rank == 0) {
        msg.bytes = *bytes_p;
        if (extra_len)
            memcpy(msg.extra, extra, extra_len);
        for (int tries = 0; tries < 4 && !created; tries++) {
            int fd;
            struct timespec ts;
            clock_gettime(CLOCK_REALTIME, &ts);
            snprintf(msg.name, sizeof(msg.name), "/%s-%d-%u-%u-%08lx", prefix, (int)getpid(),
                     comm->id, generation++,
                     (unsigned long)(ts.tv_nsec ^ (long)rand()) & 0xffffffffUL);
            fd = shm_open(msg.name, O_CREAT | O_EXCL | O_RDWR | O_CLOEXEC, 0600);
            if (fd < 0) {
                if (errno == EEXIST)
                    continue;
                px_warn("shm_open(%s): %s: %s", msg.name, strerror(errno), fallback);
                break;
            }
            created = 1;
            if (ftruncate(fd, (off_t)*bytes_p) == 0)
                base = map_fd(fd, *bytes_p);
            if (!base)
                px_warn("shared-memory segment %s of %zu bytes: %s: %s", msg.name, *bytes_p,
                        strerror(errno), fallback);
            close(fd);
        }
        msg.ok = base != NULL;
    }
    status = px_broadcast(comm, &msg, sizeof(msg), 0, -1);
    if (status != PX_OK)
        goto out_unlink;
    if (comm->rank != 0) {
        if (adopt_bytes)
            *bytes_p = (size_t)msg.bytes;
        if (extra_len)
            memcpy(extra, msg.extra, extra_len);
    }
    if (comm->rank != 0 && msg.ok) {
        int fd = shm_open(msg.name, O_RDWR | O_CLOEXEC, 0);
        struct stat st;
        if (fd >= 0 && fstat(fd, &st) == 0 && (size_t)st.st_size == *bytes_p)
            base = map_fd(fd, *bytes_p);
        if (!base)
            px_warn("shared-memory segment %s: %s: %s", msg.name, strerror(errno), fallback);
        if (fd >= 0)
            close(fd);
    }
    ok = base != NULL && local_ok;
    status = px_allreduce(comm, &ok, &all_ok, 1, PX_INT32, PX_MIN, -1); /* every rank mapped it */
out_unlink:
    if (created)
        shm_unlink(msg.name);
    if (status != PX_OK || !all_ok) {
        if (base)
            munmap(base, *bytes_p);
        return status;
    }
    *base_p = base;
    return PX_OK;
}

/* px__shm_setup with rank 0's staging buffer size `want_slot` (bytes; 0:
 * PX_SHM_SLOT_BYTES) instead of the knob: px__shm_setup and
 * px__shm_reslot. */
static px_status_t shm_setup(px_comm_t *comm, size_t want_slot)
{
    struct {
        uint64_t slot, a2a, min_bytes; /* rank 0's knobs: every rank uses the same */
    } knobs;
    px__shm_t *s = NULL;
    void *base;
    size_t slot, a2a, ctl_bytes, hdr_bytes, bytes;
    px_status_t status;

    if (comm->size < 2 || comm->shm)
        return PX_OK;
    slot = align_up(want_slot ? want_slot : (size_t)px_env_int("PX_SHM_SLOT_BYTES"), 4096);
    if (slot < 4096)
        slot = 4096;
    a2a = a2a_bytes(slot, (size_t)px_env_int("PX_SHM_A2A_SLOT_BYTES"));
    ctl_bytes = align_up((size_t)comm->size * sizeof(ctl_t), 4096);
    hdr_bytes = align_up((size_t)comm->size * RING * sizeof(hent_t), 4096);
    bytes = ctl_bytes + hdr_bytes + (size_t)comm->size * NBUF * a2a;
    knobs.slot = slot;
    knobs.a2a = a2a;
    knobs.min_bytes = (uint64_t)px_env_int("PX_SHM_MIN_BYTES");

    /* everyone agrees whether to try: PX_SHM on every rank, one node; the
     * segment's size and the knobs are rank 0's */
    s = calloc(1, sizeof(*s));
    status = px__shm_segment(comm, px_env_int("PX_SHM") != 0 && px__comm_one_node(comm), "px",
                             "collectives use UCX", &bytes, 1, &knobs, sizeof(knobs),
                             s != NULL, &base);
    if (status != PX_OK || !base) {
        free(s);
        return status;
    }
    slot = (size_t)knobs.slot;
    a2a = (size_t)knobs.a2a;
    s->base = base;
    s->bytes = bytes;
    s->n = comm->size;
    s->me = comm->rank;
    s->slot = slot;
    s->stride = a2a;
    s->ctl = (ctl_t *)s->base;
    s->hdr = (hent_t *)(s->base + ctl_bytes);
    s->slots = s->base + ctl_bytes + hdr_bytes;
    s->min_bytes = knobs.min_bytes;
    s->spin_us = px_env_int("PX_SHM_SPIN_US"); /* < 0: auto, px__spin_allowed per wait */
    s->yield_us = px_env_int("PX_SHM_YIELD_US"); /* < 0: auto, where the spin is not allowed */
    s->wait_peer = -1;
    s->yielded_peer = -1;
    status = px__cma_setup(comm, &s->cma); /* over UCX still: comm->shm is not set */
    if (status != PX_OK) {
        munmap(s->base, bytes);
        free(s);
        return status;
    }
    comm->shm = s;
    px_debug("comm %u: shared-memory path on (%d ranks, %zu-byte slots)", comm->id, comm->size,
             slot);
    return PX_OK;
}

px_status_t px__shm_setup(px_comm_t *comm)
{
    return shm_setup(comm, 0);
}

/* Largest staging buffer px__shm_reslot makes (a sanity bound: a buffer
 * far past the caches only costs memory, 3 x n of them per communicator). */
#define RESLOT_MAX_BYTES (64u << 20)

px_status_t px__shm_reslot(px_comm_t *comm, uint64_t slot_bytes)
{
    if (slot_bytes < 4096 || slot_bytes > RESLOT_MAX_BYTES) {
        px_error("px_comm_set_shm_slot: slot of %llu bytes: must be 4096..%u",
                 (unsigned long long)slot_bytes, RESLOT_MAX_BYTES);
        return PX_ERR_INVALID_ARGUMENT;
    }
    for (px_request_t *r = comm->reqs; r; r = r->next)
        if (r->status == PX_INPROGRESS) {
            px_error("px_comm_set_shm_slot: comm %u has collective #%u pending: the segment "
                     "changes only between collectives", comm->id, (unsigned)r->seq);
            return PX_ERR_INVALID_ARGUMENT;
        }
    /* every rank has a segment, or none has (setup agreed; a mismatch or
     * cancel turns it off on every rank): the same branch everywhere */
    if (!comm->shm || comm->shm->off)
        return PX_OK;
    px__shm_destroy(comm); /* the collectives of the new setup run over UCX */
    return shm_setup(comm, (size_t)slot_bytes);
}

void px__shm_destroy(px_comm_t *comm)
{
    if (!comm || !comm->shm)
        return;
    if (px_env_int("PX_SHM_WAIT_STATS") > 0) {
        const px__shm_t *s = comm->shm;
        fprintf(stderr, "px-shm-wait-stats comm %u rank %d/%d: waits %llu spin %llu (hit %llu) "
                "yield %llu (hit %llu) futex %llu\n", comm->id, s->me, s->n,
                (unsigned long long)s->n_wait, (unsigned long long)s->n_spin,
                (unsigned long long)s->n_spin_hit, (unsigned long long)s->n_yield,
                (unsigned long long)s->n_yield_hit, (unsigned long long)s->n_futex);
    }
    munmap(comm->shm->base, comm->shm->bytes);
    free(comm->shm->spare);
    px__cma_destroy(comm->shm->cma);
    px__shm_reg_detach(comm);
    free(comm->shm);
    comm->shm = NULL;
}

void px__shm_off(px_comm_t *comm)
{
    if (comm && comm->shm && !comm->shm->off) {
        comm->shm->off = 1;
        px_debug("comm %u: shared-memory path off", comm->id);
    }
}

int px__shm_wants(const px_comm_t *comm, int kind, uint64_t bytes)
{
    const px__shm_t *s = comm->shm;

    if (!s || s->off || bytes == 0 || bytes < s->min_bytes)
        return 0;
    /* reduce-scatter and all-to-all stage a piece of every block per step */
    if ((kind == PX__COLL_REDUCE_SCATTER || kind == PX__COLL_ALLTOALL) &&
        s->slot < (size_t)s->n * 8)
        return 0;
    return 1;
}

/* --- header ring -------------------------------------------------------------- */

/* px__shm_note with the header's `reg` flag. */
static void note(px_comm_t *comm, uint32_t seq, int kind, px_dtype_t dtype, int op, int root,
                 uint64_t count, uint32_t reg)
{
    px__shm_t *s = comm->shm;
    hent_t *h;

    if (!s)
        return;
    h = &s->hdr[(size_t)s->me * RING + seq % RING];
    atomic_store(&h->tag, 0);
    h->kind = (uint32_t)kind;
    h->dtype = (uint32_t)dtype;
    h->op = (uint32_t)op;
    h->root = root;
    h->count = count;
    h->reg = reg;
    atomic_store(&h->tag, seq + 1);
}

void px__shm_note(px_comm_t *comm, uint32_t seq, int kind, px_dtype_t dtype, int op, int root,
                  uint64_t count)
{
    note(comm, seq, kind, dtype, op, root, count, 0);
}

/* Peer p's header for `seq`, copied into *out; 0 when the ring does not
 * hold it (not written yet, or overwritten by 64 later starts). */
static int peer_hdr(const px__shm_t *s, int p, uint32_t seq, hent_t *out)
{
    const hent_t *h = &s->hdr[(size_t)p * RING + seq % RING];
    if (atomic_load(&h->tag) != seq + 1)
        return 0;
    out->kind = h->kind;
    out->dtype = h->dtype;
    out->op = h->op;
    out->root = h->root;
    out->count = h->count;
    out->reg = h->reg;
    return atomic_load(&h->tag) == seq + 1; /* not rewritten while read */
}

/* Compares peer p's header for req's collective with ours. */
static px_status_t compare(px_request_t *req, int p)
{
    px_comm_t *comm = req->comm;
    hent_t h;
    hent_t mine;

    if (!peer_hdr(comm->shm, p, req->seq, &h) ||
        !peer_hdr(comm->shm, comm->rank, req->seq, &mine))
        return PX_OK;
    if (h.kind != mine.kind)
        return px__comm_set_error(comm, PX_ERR_MISMATCH,
                                  "rank %d: collective mismatch: it called %s #%u, we called "
                                  "%s #%u", p, px__coll_kind_name((int)h.kind), req->seq,
                                  px__coll_kind_name((int)mine.kind), req->seq);
    if (h.kind == PX__COLL_ALLTOALLV) /* per-peer counts: the UCX headers check them */
        return PX_OK;
    if (h.count != mine.count || h.dtype != mine.dtype || h.op != mine.op || h.root != mine.root)
        return px__comm_set_error(comm, PX_ERR_MISMATCH,
                                  "rank %d: %s #%u mismatch: it passed count %llu dtype %s op %s "
                                  "root %d, we expect count %llu dtype %s op %s root %d",
                                  p, px__coll_kind_name((int)mine.kind), req->seq,
                                  (unsigned long long)h.count,
                                  px_dtype_name((px_dtype_t)h.dtype),
                                  px_redop_name((px_redop_t)h.op), h.root,
                                  (unsigned long long)mine.count,
                                  px_dtype_name((px_dtype_t)mine.dtype),
                                  px_redop_name((px_redop_t)mine.op), mine.root);
    if (h.reg != mine.reg)
        return px__comm_set_error(comm, PX_ERR_MISMATCH,
                                  "rank %d: %s #%u mismatch: its buffer is %s, ours is %s", p,
                                  px__coll_kind_name((int)mine.kind), req->seq,
                                  h.reg ? "registered (px_shm_alloc)" : "not registered",
                                  mine.reg ? "registered (px_shm_alloc)" : "not registered");
    return PX_OK;
}

px_status_t px__shm_ring_check(px_request_t *req)
{
    px_comm_t *comm = req->comm;

    if (!comm->shm || comm->shm->off)
        return PX_OK;
    for (int p = 0; p < comm->size; p++) {
        if (p == comm->rank)
            continue;
        px_status_t status = compare(req, p);
        if (status != PX_OK)
            return status;
    }
    return PX_OK;
}

/* --- the algorithm -------------------------------------------------------------- */

static void publish(px__shm_t *s)
{
    ctl_t *c = &s->ctl[s->me];
    s->pub++;
    atomic_store_explicit(&c->cpu, sched_getcpu() + 1, memory_order_relaxed);
    atomic_store(&c->ctr, s->pub); /* seq_cst: orders the slot writes before it */
    if (atomic_load(&c->waiters))
        futex(&c->ctr, FUTEX_WAKE, INT_MAX, NULL);
}

/* Whether this rank reads rank p's buffer in single-copy collective o. */
static int reads_from(const px__shm_t *s, const shm_op_t *o, int p)
{
    return p != s->me && (o->kind != PX__COLL_BCAST || p == o->root);
}

/* The error of a single-copy collective whose owner p left it early: where
 * p left because a peer died, the peer failure naming the dead rank (as
 * every survivor's error must), else PX_ERR_ABORTED naming p. */
static px_status_t left_error(px_comm_t *comm, const shm_op_t *o, int p)
{
    int dead = (int)atomic_load(&comm->shm->ctl[p].left_dead) - 1;

    px__shm_off(comm); /* its counter stopped: ours no longer agree with it */
    if (dead >= 0 && dead < comm->size && dead != comm->rank) {
        if (comm->first_dead < 0)
            comm->first_dead = dead;
        if (comm->wrank)
            return px__comm_set_error(comm, PX_ERR_PEER_FAILURE,
                                      "rank %d (world rank %d): peer failure (process gone: seen "
                                      "by rank %d in single-copy %s #%u)", dead, comm->wrank[dead],
                                      p, px__coll_kind_name(o->kind), o->seq);
        return px__comm_set_error(comm, PX_ERR_PEER_FAILURE,
                                  "rank %d: peer failure (process gone: seen by rank %d in "
                                  "single-copy %s #%u)", dead, p, px__coll_kind_name(o->kind),
                                  o->seq);
    }
    return px__comm_set_error(comm, PX_ERR_ABORTED,
                              "rank %d left single-copy %s #%u before it ended (cancelled, "
                              "aborted or failed there)", p, px__coll_kind_name(o->kind), o->seq);
}

/* PX_OK when every rank's ctr reached o->target; else PX_INPROGRESS with
 * the wait recorded (or PX_ERR_MISMATCH when a rank we wait for wrote a
 * different header for this collective: it took the other path). */
static px_status_t reached(px_request_t *req, shm_op_t *o)
{
    px__shm_t *s = req->comm->shm;

    for (int i = 1; i < s->n; i++) {
        int p = (s->me + i) % s->n;
        uint32_t v = atomic_load(&s->ctl[p].ctr);
        if ((int32_t)(v - o->target) < 0) {
            if (!o->checked) {
                px_status_t status = compare(req, p);
                if (status != PX_OK)
                    return status;
            }
            if (o->cma && atomic_load(&s->ctl[p].left) == o->seq + 1) {
                /* it will never publish: the headers first (a mismatch is
                 * why it left, and every rank must name it), then say so */
                px_status_t status = px__shm_ring_check(req);
                if (status != PX_OK)
                    return status;
                return left_error(req->comm, o, p);
            }
            s->wait_req = req;
            s->wait_peer = p;
            s->wait_val = v;
            return PX_INPROGRESS;
        }
    }
    return PX_OK;
}

/* The reads of single-copy collective o (after every rank published its
 * descriptor), inside this rank's `reading` window: nothing is read from a
 * peer that left, and data read while an owner abandoned its drain is not
 * returned (see the top). On PX_ERR_ABORTED the caller still publishes its
 * phase 2: it reads no peer's buffer any more. */
static px_status_t cma_reads(px_request_t *req, px__shm_t *s, shm_op_t *o)
{
    ctl_t *mine = &s->ctl[s->me];
    uint32_t tag = o->seq + 1;
    px_status_t status = PX_OK;
    int gone = -1;

    atomic_store(&mine->reading, tag); /* seq_cst: before the loads of `left` */
    for (int p = 0; p < s->n && gone < 0; p++)
        if (reads_from(s, o, p) && atomic_load(&s->ctl[p].left) == tag)
            gone = p;
    if (gone < 0) {
        if (px__cma_test_read_delay_ms > 0) /* tests: a reader slow in mid-read */
            usleep((useconds_t)px__cma_test_read_delay_ms * 1000);
        status = px__cma_read(req->comm, s->cma, o->kind, o->seq, slot_of(s, 0, o->cur.buf),
                              (size_t)NBUF * s->stride, o->dst, o->count, o->esz, o->root,
                              &o->bad);
        for (int p = 0; p < s->n && gone < 0 && status == PX_OK; p++)
            if (reads_from(s, o, p) && atomic_load(&s->ctl[p].abandoned) == tag)
                gone = p;
    }
    atomic_store(&mine->reading, 0);
    for (int p = 0; p < s->n; p++) /* an owner draining its readers sleeps on our word */
        if (reads_from(s, o, p) && atomic_load(&s->ctl[p].left) == tag) {
            futex(&mine->reading, FUTEX_WAKE, INT_MAX, NULL);
            break;
        }
    if (status == PX_OK && gone >= 0)
        status = left_error(req->comm, o, gone);
    return status;
}

/* Whether the process of comm rank p is known to be gone (it reads nothing
 * any more): a failure already recorded, or its pidfd readable. */
static int peer_gone(px_comm_t *comm, int p)
{
    px__peer_t *peer = px__wpeer(comm, p);
    struct pollfd pfd = {peer->pidfd, POLLIN, 0};

    if (peer->failed)
        return 1;
    return peer->pidfd >= 0 && poll(&pfd, 1, 0) == 1 && (pfd.revents & POLLIN);
}

/* The owner's side of leaving single-copy collective o before its readers
 * were done (see the top): publishes `left`, then waits (bounded by
 * CMA_DRAIN_MS) until no live peer is still reading its buffer; where the
 * bound passes, publishes `abandoned` and says so in the log. */
static void cma_leave(px_comm_t *comm, px__shm_t *s, const shm_op_t *o, px_status_t status)
{
    ctl_t *mine = &s->ctl[s->me];
    uint32_t tag = o->seq + 1;
    int64_t end = px_time_mono_ms() + CMA_DRAIN_MS;
    int stuck = -1, dead = -1;

    if (status == PX_ERR_PEER_FAILURE)
        dead = o->bad.gone >= 0 ? o->bad.gone : comm->first_dead;
    atomic_store(&mine->left_dead, dead + 1);
    atomic_store(&mine->left, tag); /* seq_cst: before the loads of `reading` */
    if (atomic_load(&mine->waiters))
        futex(&mine->ctr, FUTEX_WAKE, INT_MAX, NULL); /* waiters for our next phase: it never comes */
    for (int p = 0; p < s->n; p++) {
        ctl_t *c = &s->ctl[p];
        if (p == s->me)
            continue;
        while (atomic_load(&c->reading) == tag && !peer_gone(comm, p)) {
            struct timespec ts = {0, 1000000L};
            if (px_time_mono_ms() >= end)
                break;
            futex(&c->reading, FUTEX_WAIT, tag, &ts);
        }
        if (atomic_load(&c->reading) == tag && !peer_gone(comm, p) && stuck < 0)
            stuck = p;
    }
    if (stuck >= 0) {
        atomic_store(&mine->abandoned, tag);
        px_warn("comm %u: single-copy %s #%u left early: rank %d still reads our buffer after "
                "%d ms; it will fail", comm->id, px__coll_kind_name(o->kind), o->seq, stuck,
                CMA_DRAIN_MS);
    }
}

/* Whether every shared-memory request started before `req` has ended. */
static int my_turn(const px_request_t *req)
{
    for (const px_request_t *r = req->comm->reqs; r && r != req; r = r->next)
        if (r->shm && r->status == PX_INPROGRESS)
            return 0;
    return 1;
}

/* Elements [start, start + len) of part `j` when `c` elements are cut into
 * n parts (the first c % n one longer). */
static void part(uint64_t c, int n, int j, uint64_t *start_p, uint64_t *len_p)
{
    uint64_t base = c / (uint64_t)n, rem = c % (uint64_t)n, uj = (uint64_t)j;
    *start_p = uj * base + (uj < rem ? uj : rem);
    *len_p = base + (uj < rem ? 1 : 0);
}

/* dst = in[0] OP in[1] OP ... OP in[n-1] (rank order), `len` elements at
 * byte offset `at` of every rank's current buffer; AVG divides once. */
static void reduce_all(const px__shm_t *s, const shm_op_t *o, const step_t *t, char *dst,
                       size_t at, uint64_t len)
{
    px_reduce_apply(o->dtype, o->op, dst, slot_of(s, 0, t->buf) + at, slot_of(s, 1, t->buf) + at,
                    (size_t)len);
    for (int p = 2; p < s->n; p++)
        px_reduce_apply(o->dtype, o->op, dst, dst, slot_of(s, p, t->buf) + at, (size_t)len);
    if (o->op == PX_AVG)
        px_reduce_avg_finish(o->dtype, dst, (size_t)len, s->n);
}

/* Copies this rank's part of the next step into its buffer. */
static void copy_in(px__shm_t *s, shm_op_t *o, const step_t *t)
{
    char *mine = slot_of(s, s->me, t->buf);
    size_t esz = o->esz, cb = (size_t)t->c * esz;

    if (o->reg) { /* the peers read our buffer itself */
        px__shm_reg_post(mine, o->seq, &o->rv);
        return;
    }
    if (o->cma) { /* the peers read our buffer itself */
        px__cma_post(mine, o->seq, o->kind == PX__COLL_BCAST ? o->dst : o->src);
        return;
    }
    switch (o->kind) {
    case PX__COLL_ALLREDUCE:
    case PX__COLL_ALLGATHER:
        memcpy(mine, o->src + (size_t)t->off * esz, cb);
        break;
    case PX__COLL_BCAST:
        if (s->me == o->root)
            memcpy(mine, o->dst + (size_t)t->off * esz, cb);
        break;
    case PX__COLL_REDUCE_SCATTER:
    case PX__COLL_ALLTOALL:
        for (int j = 0; j < s->n; j++) /* all-to-all's own block goes straight across */
            if (j != s->me || o->kind == PX__COLL_REDUCE_SCATTER)
                memcpy(mine + (size_t)j * cb, o->src + ((size_t)j * o->count + t->off) * esz, cb);
        break;
    }
}

/* After every rank published the step's data: the reads of phase 1. */
static void after_data(px__shm_t *s, shm_op_t *o, const step_t *t)
{
    size_t esz = o->esz, cb = (size_t)t->c * esz;

    switch (o->kind) {
    case PX__COLL_ALLREDUCE: {
        uint64_t st, len;
        if (o->onephase) {
            reduce_all(s, o, t, o->dst + (size_t)t->off * esz, 0, t->c);
            break;
        }
        part(t->c, s->n, s->me, &st, &len);
        if (len) {
            char *out = o->dst + (size_t)(t->off + st) * esz;
            reduce_all(s, o, t, out, (size_t)st * esz, len);
            memcpy(slot_of(s, s->me, t->buf) + (size_t)st * esz, out, (size_t)len * esz);
        }
        break;
    }
    case PX__COLL_ALLGATHER:
        for (int p = 0; p < s->n; p++)
            if (p != s->me)
                memcpy(o->dst + ((size_t)p * o->count + t->off) * esz, slot_of(s, p, t->buf), cb);
        break;
    case PX__COLL_BCAST:
        if (s->me != o->root)
            memcpy(o->dst + (size_t)t->off * esz, slot_of(s, o->root, t->buf), cb);
        break;
    case PX__COLL_REDUCE_SCATTER:
        reduce_all(s, o, t, o->dst + (size_t)t->off * esz, (size_t)s->me * cb, t->c);
        break;
    case PX__COLL_ALLTOALL:
        /* from rank me + 1 on, as the single copy reads: the n ranks
         * start on n different buffers (our own block: copy_own) */
        for (int i = 1; i < s->n; i++) {
            int p = (s->me + i) % s->n;
            memcpy(o->dst + ((size_t)p * o->count + t->off) * esz,
                   slot_of(s, p, t->buf) + (size_t)s->me * cb, cb);
        }
        break;
    }
}

/* All-reduce's phase 2: the parts the other ranks reduced. */
static void copy_parts(px__shm_t *s, shm_op_t *o, const step_t *t)
{
    for (int p = 0; p < s->n; p++) {
        uint64_t st, len;
        if (p == s->me)
            continue;
        part(t->c, s->n, p, &st, &len);
        if (len)
            memcpy(o->dst + (size_t)(t->off + st) * o->esz,
                   slot_of(s, p, t->buf) + (size_t)st * o->esz, (size_t)len * o->esz);
    }
}

/* All-gather's and all-to-all's own block of step t: from this rank's send
 * buffer straight to its place in the output (nothing of it goes through
 * the segment or a peer). Made after the step is published, while the
 * peers copy their parts in, so that it costs them no wait. */
static void copy_own(px__shm_t *s, shm_op_t *o, const step_t *t)
{
    size_t esz = o->esz, cb = (size_t)t->c * esz;
    char *to = o->dst + ((size_t)s->me * o->count + t->off) * esz;
    const char *from = o->kind == PX__COLL_ALLGATHER
                           ? o->src + (size_t)t->off * esz
                           : o->src + ((size_t)s->me * o->count + t->off) * esz;

    if ((o->kind == PX__COLL_ALLGATHER || o->kind == PX__COLL_ALLTOALL) && to != from)
        memcpy(to, from, cb); /* all-gather in place: already there */
}

/* Starts the step at o->next: copies this rank's part in, publishes, then
 * copies its own block (copy_own). */
static void begin_step(px__shm_t *s, shm_op_t *o)
{
    o->cur.off = o->next;
    o->cur.c = o->count - o->next < o->chunk ? o->count - o->next : o->chunk;
    o->cur.buf = (int)(s->step++ % NBUF);
    o->next += o->cur.c;
    copy_in(s, o, &o->cur);
    publish(s);
    copy_own(s, o, &o->cur);
    o->target = s->pub;
    o->waiting = 1;
    o->phase = 1;
}

/* The request's advance function: runs steps until it must wait. After a
 * step's last wait, the next step's part goes in and is published before
 * this step's reads, so that the peers find it there when they are done
 * with theirs (three buffers per rank make that safe: see the top). */
static px_status_t shm_advance(px_request_t *req, int *progressed_p)
{
    px__shm_t *s = req->comm->shm;
    shm_op_t *o = req->shm;

    if (s->wait_req == req)
        s->wait_req = NULL;
    if (!my_turn(req))
        return PX_INPROGRESS;
    if (!o->started) {
        o->started = 1;
        begin_step(s, o);
        *progressed_p = 1;
    }
    for (;;) {
        px_status_t status = reached(req, o);
        step_t done;
        if (status != PX_OK)
            return status;
        o->waiting = 0;
        *progressed_p = 1;
        if (!o->checked) {
            status = px__shm_ring_check(req);
            if (status != PX_OK)
                return status;
            o->checked = 1;
        }
        if (o->reg) { /* px_shm_reg.c: reduce my part, copy the others, then nobody reads */
            if (o->phase == 3)
                return PX_OK;
            if (o->phase == 1) {
                for (int p = 0; p < s->n; p++)
                    if (p != s->me &&
                        (status = px__shm_reg_check(req->comm, p, o->seq,
                                                    slot_of(s, p, o->cur.buf), &o->rv)) != PX_OK)
                        return status;
                px__shm_reg_reduce(&o->rv, s->n, s->me, o->dtype, o->op, o->count);
            } else {
                px__shm_reg_gather(&o->rv, s->n, s->me, o->count, o->esz);
            }
            publish(s);
            o->target = s->pub;
            o->waiting = 1;
            o->phase++;
            continue;
        }
        if (o->phase == 1 && ((o->kind == PX__COLL_ALLREDUCE && !o->onephase) || o->cma)) {
            if (o->cma) { /* read the peers' buffers; phase 2: we are done with them */
                status = cma_reads(req, s, o);
                if (status == PX_ERR_ABORTED)
                    publish(s); /* an owner left: we read nothing more, others may end */
                if (status != PX_OK)
                    return status;
            } else {
                after_data(s, o, &o->cur); /* reduce this rank's part */
            }
            publish(s);
            o->target = s->pub;
            o->waiting = 1;
            o->phase = 2;
            if (o->cma && o->kind == PX__COLL_BCAST && s->me != o->root && o->bad.peer < 0)
                return PX_OK; /* nobody reads our buffer: no need to wait */
            continue;
        }
        if (o->cma) /* phase 2: every reader is done with our buffer */
            return px__cma_bad_status(req->comm, &o->bad);
        done = o->cur;
        if (o->next < o->count)
            begin_step(s, o);
        if (o->kind == PX__COLL_ALLREDUCE && !o->onephase)
            copy_parts(s, o, &done);
        else
            after_data(s, o, &done);
        if (!o->waiting)
            return PX_OK;
    }
}

px_status_t px__shm_start(px_comm_t *comm, int kind, const void *src, void *dst, uint64_t count,
                          px_dtype_t dtype, px_redop_t op, int root, const px_coll_opts_t *opts,
                          px_request_t **req_p)
{
    px__shm_t *s = comm->shm;
    shm_req_t *r = s->spare ? s->spare : malloc(sizeof(*r));
    px_request_t *req;
    shm_op_t *o;
    size_t esz = px_dtype_size(dtype);

    if (!r)
        return PX_ERR_NO_MEMORY;
    s->spare = NULL;
    req = &r->req;
    o = &r->op;
    px__req_init(req, comm, kind, dtype, op, count, root, opts);
    req->path = &px__path_shm;
    memset(o, 0, sizeof(*o));
    req->seq = comm->coll_seq++ & PX__SEQ_MASK;
    req->stage = 1; /* no UCX header exchange: the ring holds the headers */
    req->advance = shm_advance;
    req->shm = o;
    o->kind = kind;
    o->dtype = dtype;
    o->op = op;
    o->root = root;
    o->src = src;
    o->dst = dst;
    o->count = count;
    o->esz = esz;
    o->seq = req->seq;
    o->bad.peer = -1;
    o->bad.gone = -1;
    o->cma = px__cma_wants(s->cma, kind,
                           (kind == PX__COLL_BCAST ? 1 : (uint64_t)s->n) * count * esz);
    o->chunk = o->cma ? count : (kind == PX__COLL_REDUCE_SCATTER || kind == PX__COLL_ALLTOALL)
                   ? (kind == PX__COLL_ALLTOALL ? s->stride : s->slot) / ((size_t)s->n * esz)
                   : s->slot / esz;
    o->onephase = kind == PX__COLL_ALLREDUCE &&
                  count * esz * (uint64_t)(s->n - 1) <= ONEPHASE_MAX_REMOTE;
    o->reg = kind == PX__COLL_ALLREDUCE && src == dst && count * esz >= PX__SHM_REG_MIN_BYTES &&
             px__shm_reg_lookup(comm, dst, count * esz, &o->rv);
    if (o->reg) { /* one step: the buffer itself; the staging buffer holds the descriptor */
        o->chunk = count;
        o->onephase = 0;
    }
    note(comm, req->seq, kind, dtype, (int)op, root, count, (uint32_t)o->reg);
    px__req_link(comm, req);
    *req_p = req;
    return PX_OK;
}

void px__shm_req_free(px_request_t *req)
{
    shm_req_t *r = (shm_req_t *)req; /* req is its first member */
    px__shm_t *s = req->comm ? req->comm->shm : NULL;

    if (s && s->wait_req == req)
        s->wait_req = NULL; /* ended while waiting (failure, cancel): the next one has not */
    if (s && r->op.cma && r->op.started && req->status != PX_OK)
        cma_leave(req->comm, s, &r->op, req->status); /* peers may still read our buffer: not before they end */
    if (s && !s->spare)
        s->spare = r;
    else
        free(r);
}

/* --- waiting ------------------------------------------------------------------------ */

int px__shm_single_copy(const px_request_t *req)
{
    return req->shm && ((const shm_op_t *)req->shm)->cma;
}

int px__shm_waiting_for(const px_request_t *req)
{
    const px__shm_t *s = req->comm->shm;
    return s && s->wait_req == req ? s->wait_peer : -1;
}

int px__spin_backoff_try(px__spin_backoff_t *b)
{
    if (b->skip > 0) {
        b->skip--;
        return 0;
    }
    return 1;
}

void px__spin_backoff_note(px__spin_backoff_t *b, int hit)
{
    if (hit) {
        b->next = 0;
        return;
    }
    b->next = b->next == 0 ? PX__SPIN_BACKOFF_MIN
              : b->next >= PX__SPIN_BACKOFF_MAX / 2 ? PX__SPIN_BACKOFF_MAX : b->next * 2;
    b->skip = b->next;
}

/* Polls *ctr until it is no longer `val`, calling sched_yield between two
 * looks, for at most `us` microseconds; 1 when it moved. Where ranks share
 * cores (more ranks than CPUs, or other load) the peer we wait for is often
 * runnable on our core: a yield hands it the core at once, where a futex
 * sleep costs a sleep, a wake-up and two context switches per step (Open
 * MPI's vader does the same without a bound: mpi_yield_when_idle). When
 * nothing else is runnable the yield returns at once and this spins, so it
 * is bounded, and only blocking waits (px__sleep) come here. */
static int yield_poll(_Atomic uint32_t *ctr, uint32_t val, long us)
{
    int64_t end = px_time_mono_us() + us;

    do {
        sched_yield();
        if (atomic_load_explicit(ctr, memory_order_acquire) != val)
            return 1;
    } while (px_time_mono_us() < end);
    return 0;
}

int px__shm_sleep(px_comm_t *comm, int timeout_ms)
{
    px__shm_t *blocked = NULL;
    int others = 0, n_blocked = 0;

    for (px_comm_t *c = comm->tr->comms; c; c = c->tr_next) {
        for (px_request_t *r = c->reqs; r; r = r->next) {
            if (r->status != PX_INPROGRESS)
                continue;
            if (r->shm && c->shm && c->shm->wait_req == r) {
                blocked = c->shm;
                n_blocked++;
            } else if (!r->shm) {
                others = 1;
            }
        }
    }
    if (!blocked)
        return 0;
    {
        int ms = others || n_blocked > 1 ? SLICE_BUSY_MS : SLICE_MS;
        ctl_t *c = &blocked->ctl[blocked->wait_peer];
        struct timespec ts;
        if (timeout_ms < ms)
            ms = timeout_ms < 0 ? 0 : timeout_ms;
        ts.tv_sec = ms / 1000;
        ts.tv_nsec = (long)(ms % 1000) * 1000000L;
        /* auto: spin where px__spin_allowed, the peer last published from
         * another CPU than ours (on ours it cannot publish while we spin:
         * measured, other engineers' load 3 on 2 cores, the two
         * ranks of px-coll-bench were on one CPU at every wait, where Open
         * MPI's ranks, never sleeping, are spread) and the last spins paid
         * (px__spin_backoff_try); a spin that ran out is noted */
        int auto_spin = blocked->spin_us < 0 && !others && px__spin_allowed(comm) &&
                        atomic_load_explicit(&c->cpu, memory_order_relaxed) != sched_getcpu() + 1 &&
                        px__spin_backoff_try(&blocked->backoff);
        long spin = blocked->spin_us >= 0 ? blocked->spin_us : auto_spin ? AUTO_SPIN_US : 0;
        blocked->n_wait++;
        if (spin > 0 && !others) {
            blocked->n_spin++;
            /* a peer with a core of its own publishes within microseconds:
             * look at its counter for a bounded time before the futex costs
             * a sleep and a wake-up (Open MPI's sm polls without a bound) */
            int64_t end = px_time_mono_us() + spin;
            do {
                for (int i = 0; i < 64; i++) {
                    if (atomic_load_explicit(&c->ctr, memory_order_relaxed) != blocked->wait_val) {
                        blocked->n_spin_hit++;
                        if (auto_spin)
                            px__spin_backoff_note(&blocked->backoff, 1);
                        return 1;
                    }
                    cpu_relax();
                }
            } while (px_time_mono_us() < end);
            if (auto_spin)
                px__spin_backoff_note(&blocked->backoff, 0);
        }
        /* after an auto spin that ran out, the yield window too: the peer
         * is most often runnable on our core, which the spin held */
        if (!others && (spin == 0 || auto_spin) && (blocked->yielded_peer != blocked->wait_peer ||
                                     blocked->yielded_val != blocked->wait_val)) {
            long yield = blocked->yield_us >= 0 ? blocked->yield_us : AUTO_YIELD_US;
            blocked->n_yield++;
            if (yield > 0 && yield_poll(&c->ctr, blocked->wait_val, yield)) {
                blocked->n_yield_hit++;
                return 1;
            }
            /* a slow peer: one window per wait, then only futex slices (a
             * rank waiting long at a barrier uses no CPU) */
            blocked->yielded_peer = blocked->wait_peer;
            blocked->yielded_val = blocked->wait_val;
        }
        blocked->n_futex++;
        atomic_fetch_add(&c->waiters, 1);
        if (atomic_load(&c->ctr) == blocked->wait_val &&
            futex(&c->ctr, FUTEX_WAIT, blocked->wait_val, &ts) != 0 && errno != EAGAIN)
            comm->root->news_us = 0; /* slept a slice (or a signal): look at the pidfds and
                                      * watch fd at the next check; a peer that woke us is
                                      * alive, and one that died never will */
        atomic_fetch_sub(&c->waiters, 1);
    }
    return 1;
}

/* --- the path's entry in the table (px_path.h) ----------------------------------- */

px_status_t px_comm_set_shm_slot(px_comm_t *comm, uint64_t slot_bytes)
{
    if (!comm)
        return PX_ERR_INVALID_ARGUMENT;
    return px__shm_reslot(comm, slot_bytes);
}

/* Host buffers of all-reduce, reduce-scatter, all-gather, broadcast and
 * all-to-all (not in place) on a communicator with a segment, sized for
 * it by px__shm_wants (bytes of the buffer that holds every rank's data);
 * not fp16/bf16 reductions (they reduce in fp32 on the host algorithms). */
static int path_wants(px_comm_t *comm, const px__coll_args_t *a)
{
    uint64_t esz = px_dtype_size(a->dtype), n = (uint64_t)comm->size, bytes;

    switch (a->kind) {
    case PX__COLL_ALLREDUCE:
    case PX__COLL_BCAST:
        bytes = a->count * esz;
        break;
    case PX__COLL_REDUCE_SCATTER:
    case PX__COLL_ALLGATHER:
        bytes = n * a->count * esz;
        break;
    case PX__COLL_ALLTOALL:
        if (!a->count || !a->sendbuf || !a->recvbuf || a->sendbuf == a->recvbuf)
            return 0;
        bytes = n * a->count * esz;
        break;
    default:
        return 0;
    }
    return comm->shm && comm->size > 1 && !(px__coll_reduces(a->kind) && px__is_half(a->dtype)) &&
           !px__on_device(a->sendbuf, a->recvbuf) && px__shm_wants(comm, a->kind, bytes);
}

static px_status_t path_enqueue(px_comm_t *comm, const px__coll_args_t *a, px_request_t **req_p)
{
    const void *src = a->kind == PX__COLL_BCAST ? NULL : a->sendbuf;
    return px__shm_start(comm, a->kind, src, a->recvbuf, a->count, a->dtype, a->op, a->root,
                         a->opts, req_p);
}

static void path_req_cancel(px_request_t *req)
{
    px__shm_off(req->comm); /* the ranks' segment counters no longer agree */
}

static int path_req_free(px_request_t *req)
{
    px__shm_req_free(req); /* one allocation with its state, maybe kept for reuse */
    return 1;
}

static int path_checks_headers(const px_comm_t *comm)
{
    return comm->shm != NULL;
}

static void path_note(const px_request_t *req)
{
    px__shm_note(req->comm, req->seq, req->kind, req->dtype, (int)req->op, req->root,
                 req->count);
}

const px__path_t px__path_shm = {
    .name = "shm",
    .wants = path_wants,
    .enqueue = path_enqueue,
    .req_cancel = path_req_cancel,
    .req_free = path_req_free,
    .waiting_for = px__shm_waiting_for,
    .comm_setup = px__shm_setup,
    .comm_destroy = px__shm_destroy,
    .checks_headers = path_checks_headers,
    .note = path_note,
    .hdr_check = px__shm_ring_check,
    .mismatch = px__shm_off,
    .sleep = px__shm_sleep,
};
