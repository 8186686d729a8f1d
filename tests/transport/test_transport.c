/* test_transport.c: multi-process tests of the UCX transport, launched with
 * px_launch (N local ranks, standalone bootstrap).
 *
 *   test_transport local               single process: abort, timeout, self p2p, n=1 all-reduce
 *   test_transport allreduce N         counts 0,1,2,3,1000003, in/out of place, SUM/AVG, exact;
 *                                      results bitwise-equal across ranks (broadcast + memcmp)
 *   test_transport mismatch N          count / op mismatch -> PX_ERR_MISMATCH on every rank,
 *                                      then the communicator still works
 *   test_transport p2p N               tagged send/recv around the ring, out-of-order tags,
 *                                      truncation -> PX_ERR_MISMATCH
 *   test_transport kill N              SIGKILL one rank inside a loop of 64 MiB all-reduces:
 *                                      every survivor returns PX_ERR_PEER_FAILURE naming it
 *                                      within PX_COMM_TIMEOUT_MS + 1 s
 *   test_transport kill_nowatch N      same without the bootstrap's watch fd (pidfd, UCX, deadline)
 *   test_transport kill0 N             same, killing rank 0 (the bootstrap's master)
 *   test_transport kill_split N        same on a sub-communicator (reverse rank order): the
 *                                      errors name the victim's world rank
 *   test_transport allreduce_2nodes N  all-reduce with ranks on two fake nodes (PX_NODE): auto
 *                                      error mode mixes peer-mode and plain endpoints
 *   test_transport kill_2nodes N       kill rank 1 with two fake nodes, default (auto) mode: its
 *                                      ring successor is on the other node (peer mode)
 *   test_transport kill_late N [watch] stop rank 0, kill rank 2, let ranks 1 and 3 fail and exit,
 *                                      continue rank 0: every survivor names rank 2 (not a
 *                                      survivor that exited after it)
 *   test_transport nospin N            ranks wait 2 s at a barrier for a sleeping rank and use
 *                                      < 10% CPU meanwhile
 * Values: rank r contributes r + 1 + i % 7, so sums are exact in fp32. */
#include <arpa/inet.h>
#include <math.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "px_launch.h"
#include "px_time.h"
#include "px_transport_int.h" /* px__allreduce_algo: force ring / recursive doubling */

#define FAIL(...) do { fprintf(stderr, "FAIL rank %d: ", ctx->rank); \
    fprintf(stderr, __VA_ARGS__); fprintf(stderr, "\n"); return 1; } while (0)

static float contrib(int r, uint64_t i)
{
    return (float)(r + 1 + (int)(i % 7));
}

/* --- allreduce --- */

static int check_allreduce(px_launch_rank_t *ctx, uint64_t count, int inplace, px_redop_t op)
{
    int n = ctx->world, r = ctx->rank;
    float *send = malloc((count + 1) * sizeof(float)), *recv = malloc((count + 1) * sizeof(float));
    float *ref = malloc((count + 1) * sizeof(float));
    px_status_t status;
    int ret = 0;

    for (uint64_t i = 0; i < count; i++) {
        send[i] = contrib(r, i);
        recv[i] = -12345.0f;
    }
    send[count] = recv[count] = 777.0f; /* guard element past the end */
    status = px_allreduce(ctx->comm, send, inplace ? send : recv, count, PX_FLOAT32, op, -1);
    if (status != PX_OK) {
        fprintf(stderr, "FAIL rank %d: allreduce count %llu: %s (%s)\n", r,
                (unsigned long long)count, px_status_str(status), px_comm_last_error(ctx->comm));
        ret = 1;
        goto out;
    }
    {
        float *res = inplace ? send : recv;
        for (uint64_t i = 0; i < count; i++) {
            float sum = (float)(n * (n + 1) / 2 + n * (int)(i % 7));
            float want = op == PX_AVG ? sum / (float)n : sum;
            if (res[i] != want) {
                fprintf(stderr, "FAIL rank %d: count %llu %s %s: [%llu] = %.9g, want %.9g\n", r,
                        (unsigned long long)count, inplace ? "in-place" : "out-of-place",
                        op == PX_AVG ? "avg" : "sum", (unsigned long long)i, res[i], want);
                ret = 1;
                goto out;
            }
            if (!inplace && send[i] != contrib(r, i)) {
                fprintf(stderr, "FAIL rank %d: sendbuf modified at %llu\n", r,
                        (unsigned long long)i);
                ret = 1;
                goto out;
            }
        }
        if (send[count] != 777.0f || recv[count] != 777.0f) {
            fprintf(stderr, "FAIL rank %d: wrote past the end (count %llu)\n", r,
                    (unsigned long long)count);
            ret = 1;
            goto out;
        }
        /* bitwise equality across ranks: rank 0's result vs ours */
        memcpy(ref, res, count * sizeof(float));
        status = px_broadcast(ctx->comm, ref, count * sizeof(float), 0, -1);
        if (status != PX_OK || memcmp(ref, res, count * sizeof(float)) != 0) {
            fprintf(stderr, "FAIL rank %d: result differs from rank 0's (%s)\n", r,
                    px_status_str(status));
            ret = 1;
        }
    }
out:
    free(send);
    free(recv);
    free(ref);
    return ret;
}

/* Non-integer data: sums now round, so this checks that every rank still
 * gets the same bits (one owner per block in the ring; a + b == b + a in
 * recursive doubling) and that the result is close to a double reference. */
static int check_rounding(px_launch_rank_t *ctx, uint64_t count)
{
    int n = ctx->world, r = ctx->rank, ret = 0;
    float *buf = malloc(count * sizeof(float)), *ref = malloc(count * sizeof(float));
    px_status_t status;

    for (uint64_t i = 0; i < count; i++)
        buf[i] = sinf((float)i * 0.37f + (float)r) * 1000.0f + 0.001f * (float)r;
    status = px_allreduce(ctx->comm, buf, buf, count, PX_FLOAT32, PX_AVG, -1);
    if (status != PX_OK) {
        fprintf(stderr, "FAIL rank %d: rounding allreduce: %s\n", r, px_status_str(status));
        ret = 1;
        goto out;
    }
    for (uint64_t i = 0; i < count; i++) {
        double want = 0;
        for (int q = 0; q < n; q++)
            want += (double)(sinf((float)i * 0.37f + (float)q) * 1000.0f + 0.001f * (float)q);
        want /= n;
        if (fabs(buf[i] - want) > 1e-3 + 1e-5 * fabs(want)) {
            fprintf(stderr, "FAIL rank %d: rounding [%llu] = %.9g, want %.9g\n", r,
                    (unsigned long long)i, buf[i], want);
            ret = 1;
            goto out;
        }
    }
    memcpy(ref, buf, count * sizeof(float));
    if (px_broadcast(ctx->comm, ref, count * sizeof(float), n - 1, -1) != PX_OK ||
        memcmp(ref, buf, count * sizeof(float)) != 0) {
        fprintf(stderr, "FAIL rank %d: rounded result differs from rank %d's\n", r, n - 1);
        ret = 1;
    }
out:
    free(buf);
    free(ref);
    return ret;
}

static int rank_allreduce(px_launch_rank_t *ctx)
{
    /* 8192 / 8193 floats: either side of the recursive-doubling threshold */
    static const uint64_t counts[] = {0, 1, 2, 3, 5, 8192, 8193, 1000003};
    int checked = 0;
    for (size_t c = 0; c < sizeof(counts) / sizeof(counts[0]); c++)
        for (int inplace = 0; inplace < 2; inplace++)
            for (int op = 0; op < 2; op++) {
                if (check_allreduce(ctx, counts[c], inplace, op ? PX_AVG : PX_SUM))
                    return 1;
                checked++;
            }
    if (check_rounding(ctx, 8191) || check_rounding(ctx, 300007))
        return 1;
    checked += 2;
    if (ctx->rank == 0)
        printf("allreduce: %d ranks, %d cases exact and bitwise-equal across ranks\n", ctx->world,
               checked);
    return px_barrier(ctx->comm, -1) == PX_OK ? 0 : 1;
}

/* --- mismatch --- */

static int rank_mismatch(px_launch_rank_t *ctx)
{
    float buf[64];
    px_status_t status;
    uint64_t count = ctx->rank == 1 ? 33 : 32;

    for (int i = 0; i < 64; i++)
        buf[i] = contrib(ctx->rank, (uint64_t)i);
    status = px_allreduce(ctx->comm, buf, buf, count, PX_FLOAT32, PX_SUM, 10000);
    if (status != PX_ERR_MISMATCH)
        FAIL("count mismatch gave %s, want mismatch", px_status_str(status));
    if (!strstr(px_comm_last_error(ctx->comm), "count"))
        FAIL("mismatch error does not say what differs: %s", px_comm_last_error(ctx->comm));
    status = px_allreduce(ctx->comm, buf, buf, 16, PX_FLOAT32, ctx->rank == 0 ? PX_AVG : PX_SUM,
                          10000);
    if (status != PX_ERR_MISMATCH)
        FAIL("op mismatch gave %s, want mismatch", px_status_str(status));
    /* the communicator is still usable */
    for (int i = 0; i < 64; i++)
        buf[i] = contrib(ctx->rank, (uint64_t)i);
    status = px_allreduce(ctx->comm, buf, buf, 64, PX_FLOAT32, PX_SUM, 10000);
    if (status != PX_OK)
        FAIL("allreduce after mismatch: %s", px_status_str(status));
    for (int i = 0; i < 64; i++) {
        int n = ctx->world;
        if (buf[i] != (float)(n * (n + 1) / 2 + n * (i % 7)))
            FAIL("allreduce after mismatch: wrong value at %d", i);
    }
    if (ctx->rank == 0)
        printf("mismatch: count and op mismatches detected on every rank; comm still usable\n");
    return 0;
}

/* --- p2p --- */

static int rank_p2p(px_launch_rank_t *ctx)
{
    int n = ctx->world, r = ctx->rank, right = (r + 1) % n, left = (r - 1 + n) % n;
    int a = r * 100 + 1, b = r * 100 + 2, got_a = 0, got_b = 0;
    char big[100], small[10];
    size_t nbig = 300000;
    unsigned char *lbuf = malloc(nbig), *lrecv = malloc(nbig);
    px_status_t status;

    if (n < 2)
        FAIL("p2p needs 2 ranks or more");
    for (size_t i = 0; i < nbig; i++)
        lbuf[i] = (unsigned char)(i * 7 + r);
    /* even ranks send first, odd receive first: no deadlock with blocking calls */
    for (int phase = 0; phase < 2; phase++) {
        if ((phase == 0) == (r % 2 == 0)) {
            if (px_send(ctx->comm, right, 7, &a, sizeof(a), -1) != PX_OK ||
                px_send(ctx->comm, right, 8, &b, sizeof(b), -1) != PX_OK ||
                px_send(ctx->comm, right, 0xffffffffu, lbuf, nbig, -1) != PX_OK)
                FAIL("send to %d", right);
        } else {
            /* receive tag 8 before tag 7: matching is by tag, not arrival order */
            if (px_recv(ctx->comm, left, 8, &got_b, sizeof(got_b), -1) != PX_OK ||
                px_recv(ctx->comm, left, 7, &got_a, sizeof(got_a), -1) != PX_OK ||
                px_recv(ctx->comm, left, 0xffffffffu, lrecv, nbig, -1) != PX_OK)
                FAIL("recv from %d", left);
        }
    }
    if (got_a != left * 100 + 1 || got_b != left * 100 + 2)
        FAIL("got %d/%d from rank %d", got_a, got_b, left);
    for (size_t i = 0; i < nbig; i++)
        if (lrecv[i] != (unsigned char)(i * 7 + left))
            FAIL("large message byte %zu wrong", i);
    /* truncation: rank 0 sends 100 bytes, rank 1 expects 10 */
    memset(big, 'x', sizeof(big));
    if (r == 0) {
        status = px_send(ctx->comm, 1, 99, big, sizeof(big), 5000);
        if (status != PX_OK)
            FAIL("truncation send: %s", px_status_str(status));
    } else if (r == 1) {
        status = px_recv(ctx->comm, 0, 99, small, sizeof(small), 5000);
        if (status != PX_ERR_MISMATCH)
            FAIL("truncated recv gave %s, want mismatch", px_status_str(status));
    }
    free(lbuf);
    free(lrecv);
    if (px_barrier(ctx->comm, -1) != PX_OK)
        FAIL("barrier");
    if (r == 0)
        printf("p2p: ring exchange with out-of-order tags ok, truncation -> mismatch\n");
    return 0;
}

/* --- kill --- */

typedef struct {
    atomic_int iters[64];
    atomic_llong t_kill_ms;
    int victim;
} kill_shared_t;

static int rank_kill(px_launch_rank_t *ctx)
{
    kill_shared_t *sh = ctx->arg;
    /* the case: a loop of 64 MiB all-reduces (PX_TEST_KILL_MIB) */
    uint64_t count = (uint64_t)(getenv("PX_TEST_KILL_MIB") ? atoi(getenv("PX_TEST_KILL_MIB")) : 64)
                     << 18;
    float *buf = malloc(count * sizeof(float));
    long timeout = strtol(getenv("PX_COMM_TIMEOUT_MS"), NULL, 10);
    px_status_t status = PX_OK;
    int64_t t_err;
    char want[32];

    px_comm_t *comm = ctx->comm, *sub = NULL;

    if (getenv("PX_TEST_KILL_SPLIT") && atoi(getenv("PX_TEST_KILL_SPLIT"))) {
        /* the loop runs on a sub-communicator of every rank in reverse
         * order: its errors name the sub rank and the world rank */
        status = px_comm_split(ctx->comm, 0, -ctx->rank, &sub);
        if (status != PX_OK)
            FAIL("split: %s", px_status_str(status));
        comm = sub;
    }
    for (uint64_t i = 0; i < count; i++)
        buf[i] = 1.0f;
    for (int it = 0;; it++) {
        status = px_allreduce(comm, buf, buf, count, PX_FLOAT32, PX_AVG, -1);
        if (status != PX_OK)
            break;
        atomic_store(&sh->iters[ctx->rank], it + 1);
        if (it > 100000)
            FAIL("victim never died");
    }
    t_err = px_time_mono_ms();
    free(buf);
    if (ctx->rank == sh->victim)
        FAIL("the victim survived");
    if (!atomic_load(&sh->t_kill_ms))
        FAIL("error before the kill: %s (%s)", px_status_str(status), px_comm_last_error(comm));
    snprintf(want, sizeof(want), sub ? "world rank %d" : "rank %d", sh->victim);
    printf("rank %d: %s after %lld ms: %s\n", ctx->rank, px_status_str(status),
           (long long)(t_err - atomic_load(&sh->t_kill_ms)), px_comm_last_error(comm));
    if (t_err - atomic_load(&sh->t_kill_ms) > timeout + 1000)
        FAIL("error came %lld ms after the kill (timeout %ld)",
             (long long)(t_err - atomic_load(&sh->t_kill_ms)), timeout);
    if (getenv("PX_TEST_WATCH") && atoi(getenv("PX_TEST_WATCH"))) {
        if (status != PX_ERR_PEER_FAILURE || !strstr(px_comm_last_error(comm), want))
            FAIL("want peer failure naming %s, got %s: %s", want, px_status_str(status),
                 px_comm_last_error(comm));
    } else {
        if (status != PX_ERR_TIMEOUT && status != PX_ERR_PEER_FAILURE)
            FAIL("want timeout or peer failure, got %s", px_status_str(status));
        /* the victim's right neighbour waits on the victim itself */
        if (ctx->rank == (sh->victim + 1) % ctx->world &&
            !strstr(px_comm_last_error(comm), want))
            FAIL("right neighbour's error does not name %s: %s", want,
                 px_comm_last_error(comm));
    }
    /* a failed communicator keeps failing, quickly */
    if (px_barrier(comm, -1) == PX_OK)
        FAIL("barrier on a failed communicator succeeded");
    px_comm_destroy(sub);
    /* Linger before exiting: a survivor starved of CPU (4 ranks, 2 cores)
     * may otherwise see this rank's exit before the victim's and name us
     * (secondary failures are indistinguishable from first ones to it). */
    {
        struct timespec ts = {0, 500 * 1000 * 1000};
        nanosleep(&ts, NULL);
    }
    return 0;
}

/* Waits until every rank has finished 2 iterations; 0 if not by give_up_ms
 * (ranks that never start: port retry). */
static int wait_iters(atomic_int *iters, int n, int64_t give_up_ms)
{
    for (;;) {
        int ready = 1;
        struct timespec ts = {0, 10 * 1000 * 1000};
        for (int r = 0; r < n; r++)
            ready &= atomic_load(&iters[r]) >= 2;
        if (ready)
            return 1;
        if (px_time_mono_ms() > give_up_ms)
            return 0;
        nanosleep(&ts, NULL);
    }
}

static void kill_on_started(const pid_t *pids, int n, void *arg)
{
    kill_shared_t *sh = arg;
    if (!wait_iters(sh->iters, n, px_time_mono_ms() + 30000))
        return;
    {
        struct timespec ts = {0, 30 * 1000 * 1000}; /* land inside an all-reduce */
        nanosleep(&ts, NULL);
    }
    atomic_store(&sh->t_kill_ms, px_time_mono_ms());
    kill(pids[sh->victim], SIGKILL);
}

/* --- kill_late: a survivor that learns of the death last --- */

/* Rank 0 is stopped (SIGSTOP) before rank 2 is killed, and continued only
 * after ranks 1 and 3 have failed naming rank 2 and exited at once (no
 * linger). When it wakes, every other rank is gone at the same moment by
 * its pidfd and its UCX endpoint: only what the survivors told before they
 * exited says which of them died first. Every survivor must name rank 2. */
typedef struct {
    atomic_int iters[64];
    atomic_int left[64]; /* set right before a survivor returns */
    int victim;
} late_shared_t;

static int rank_kill_late(px_launch_rank_t *ctx)
{
    late_shared_t *sh = ctx->arg;
    /* 4 KiB all-reduces: small enough that no stream toward the stopped
     * rank is backed up, so the notices the others send before they exit
     * reach it (a notice queued behind a full stream dies with its sender:
     * see transport/px_verdict.c) */
    uint64_t count = 1024;
    float *buf = malloc(count * sizeof(float));
    px_status_t status = PX_OK;
    char want[32];

    for (uint64_t i = 0; i < count; i++)
        buf[i] = 1.0f;
    for (int it = 0;; it++) {
        status = px_allreduce(ctx->comm, buf, buf, count, PX_FLOAT32, PX_AVG, -1);
        if (status != PX_OK)
            break;
        atomic_store(&sh->iters[ctx->rank], it + 1);
        if (it > 1000000)
            FAIL("victim never died");
    }
    free(buf);
    if (ctx->rank == sh->victim)
        FAIL("the victim survived");
    snprintf(want, sizeof(want), "rank %d:", sh->victim);
    printf("rank %d: %s: %s\n", ctx->rank, px_status_str(status), px_comm_last_error(ctx->comm));
    fflush(stdout);
    atomic_store(&sh->left[ctx->rank], 1);
    if (status != PX_ERR_PEER_FAILURE || strncmp(px_comm_last_error(ctx->comm), want,
                                                 strlen(want)) != 0)
        FAIL("want peer failure naming rank %d, got %s: %s", sh->victim, px_status_str(status),
             px_comm_last_error(ctx->comm));
    return 0; /* no linger: the late rank must not need one */
}

static void kill_late_on_started(const pid_t *pids, int n, void *arg)
{
    late_shared_t *sh = arg;
    int64_t give_up = px_time_mono_ms() + 30000;
    struct timespec ts = {0, 10 * 1000 * 1000};

    if (!wait_iters(sh->iters, n, give_up))
        return;
    kill(pids[0], SIGSTOP);
    kill(pids[sh->victim], SIGKILL);
    /* the others fail on the victim and exit; WNOWAIT leaves them to
     * px_launch's reaping */
    for (int r = 1; r < n; r++) {
        siginfo_t si;
        if (r == sh->victim)
            continue;
        for (;;) {
            memset(&si, 0, sizeof(si));
            if (waitid(P_PID, (id_t)pids[r], &si, WEXITED | WNOHANG | WNOWAIT) == 0 &&
                si.si_pid == pids[r])
                break;
            if (px_time_mono_ms() > give_up)
                break;
            nanosleep(&ts, NULL);
        }
    }
    kill(pids[0], SIGCONT);
}

/* --- nospin --- */

/* nospin_shm: the wait is a 4 KiB-per-rank all-to-all on the shared-memory
 * path (px_shm.c: its sched_yield window, then futex slices) instead of a
 * barrier */
static int nospin_shm;

static int rank_nospin(px_launch_rank_t *ctx)
{
    struct timespec c0, c1;
    double w0, w1, cpu, wall;
    px_status_t status;
    float a2a_in[1024], a2a_out[1024];

    if (px_barrier(ctx->comm, -1) != PX_OK)
        FAIL("first barrier");
    if (ctx->rank == ctx->world - 1) {
        struct timespec ts = {2, 0};
        nanosleep(&ts, NULL);
    }
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &c0);
    w0 = px_time_mono_s();
    if (nospin_shm) {
        for (int i = 0; i < 1024; i++)
            a2a_in[i] = (float)(ctx->rank * 1024 + i);
        status = px_alltoall(ctx->comm, a2a_in, a2a_out, 1024 / (uint64_t)ctx->world, PX_FLOAT32,
                             NULL);
        for (int i = 0; status == PX_OK && i < 1024 / ctx->world * ctx->world; i++) {
            int blk = 1024 / ctx->world, from = i / blk;
            if (a2a_out[i] != (float)(from * 1024 + ctx->rank * blk + i % blk))
                FAIL("all-to-all element %d: %g", i, (double)a2a_out[i]);
        }
    } else {
        status = px_barrier(ctx->comm, -1);
    }
    w1 = px_time_mono_s();
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &c1);
    if (status != PX_OK)
        FAIL("barrier: %s", px_status_str(status));
    cpu = (double)(c1.tv_sec - c0.tv_sec) + (double)(c1.tv_nsec - c0.tv_nsec) * 1e-9;
    wall = w1 - w0;
    printf("rank %d: waited %.3f s at the barrier using %.4f s CPU\n", ctx->rank, wall, cpu);
    if (ctx->rank != ctx->world - 1) {
        if (wall < 1.5)
            FAIL("barrier returned after %.3f s, before the sleeping rank arrived", wall);
        if (cpu > 0.1 * wall)
            FAIL("spinning: %.3f s CPU in %.3f s wall", cpu, wall);
        /* nospin_shm (PX_SHM_YIELD_US=5000): a window or two (the peers we
         * wait for in turn), 10 ms; measured 0.107 s with a window per slice */
        if (nospin_shm && cpu > 0.05)
            FAIL("yield window repeated: %.3f s CPU in %.3f s wall", cpu, wall);
    }
    return 0;
}

/* --- local (single process, no launcher) --- */

typedef struct {
    px_comm_t *comm;
} abort_arg_t;

static void *abort_thread(void *arg)
{
    abort_arg_t *a = arg;
    struct timespec ts = {0, 200 * 1000 * 1000};
    nanosleep(&ts, NULL);
    px_comm_abort(a->comm, "test abort");
    return NULL;
}

static int run_local(void)
{
    px_transport_t *tr;
    px_comm_t *comm;
    float v[5] = {1, 2, 3, 4, 5}, out[5];
    int x = 42, y = 0;
    px_status_t status;
    double t0, dt;
    pthread_t th;
    abort_arg_t aa;

    /* bootstrap: bad environment, then a world whose rank 1 never comes */
    {
        int rk, ws;
        px_bootstrap_t *bs = NULL;
        px_addr_table_t t2;
        char port[16];
        unsetenv("PX_RANK");
        setenv("PX_WORLD_SIZE", "2", 1);
        if (px_bootstrap_from_env(&rk, &ws) != PX_ERR_INVALID_ARGUMENT) {
            fprintf(stderr, "FAIL: missing PX_RANK accepted\n");
            return 1;
        }
        setenv("PX_RANK", "2", 1);
        if (px_bootstrap_from_env(&rk, &ws) != PX_ERR_INVALID_ARGUMENT) {
            fprintf(stderr, "FAIL: PX_RANK >= PX_WORLD_SIZE accepted\n");
            return 1;
        }
        setenv("PX_RANK", "0", 1);
        {
            struct sockaddr_in sa = {.sin_family = AF_INET};
            socklen_t sl = sizeof(sa);
            int fd = socket(AF_INET, SOCK_STREAM, 0);
            sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
            if (fd < 0 || bind(fd, (struct sockaddr *)&sa, sizeof(sa)) != 0 ||
                getsockname(fd, (struct sockaddr *)&sa, &sl) != 0) {
                fprintf(stderr, "FAIL: no free port\n");
                return 1;
            }
            close(fd);
            snprintf(port, sizeof(port), "%d", ntohs(sa.sin_port));
        }
        setenv("PX_MASTER_PORT", port, 1);
        if (px_bootstrap_from_env(&rk, &ws) != PX_OK || rk != 0 || ws != 2) {
            fprintf(stderr, "FAIL: bootstrap env\n");
            return 1;
        }
        t0 = px_time_mono_s();
        status = px_bootstrap_create(0, 2, "x", 1, &bs, &t2);
        dt = px_time_mono_s() - t0;
        if (status != PX_ERR_TIMEOUT || dt < 0.35 || dt > 2.0) {
            fprintf(stderr, "FAIL: lonely bootstrap gave %s after %.3f s\n",
                    px_status_str(status), dt);
            return 1;
        }
        printf("local: bootstrap without its peer timed out after %.3f s\n", dt);
    }
    if (px_transport_create(&tr) != PX_OK) {
        fprintf(stderr, "FAIL: transport setup\n");
        return 1;
    }
    if (px_comm_create_self(tr, "local", &comm) != PX_OK) {
        fprintf(stderr, "FAIL: comm create\n");
        return 1;
    }
    if (px_comm_rank(comm) != 0 || px_comm_size(comm) != 1) {
        fprintf(stderr, "FAIL: rank/size\n");
        return 1;
    }
    /* n = 1 all-reduce, out of place and AVG */
    status = px_allreduce(comm, v, out, 5, PX_FLOAT32, PX_AVG, -1);
    if (status != PX_OK || memcmp(v, out, sizeof(v))) {
        fprintf(stderr, "FAIL: n=1 allreduce\n");
        return 1;
    }
    if (px_allreduce(comm, v, out, 5, (px_dtype_t)99, PX_SUM, -1) != PX_ERR_INVALID_ARGUMENT ||
        px_allreduce(comm, v, out, 5, PX_INT32, (px_redop_t)9, -1) != PX_ERR_INVALID_ARGUMENT) {
        fprintf(stderr, "FAIL: an unknown dtype / op must be invalid\n");
        return 1;
    }
    /* send to self */
    if (px_send(comm, 0, 5, &x, sizeof(x), 1000) != PX_OK ||
        px_recv(comm, 0, 5, &y, sizeof(y), 1000) != PX_OK || y != 42) {
        fprintf(stderr, "FAIL: self send/recv\n");
        return 1;
    }
    if (px_barrier(comm, -1) != PX_OK || px_broadcast(comm, &x, sizeof(x), 0, -1) != PX_OK) {
        fprintf(stderr, "FAIL: n=1 barrier/broadcast\n");
        return 1;
    }
    /* timeout names the peer and comes on time */
    t0 = px_time_mono_s();
    status = px_recv(comm, 0, 6, &y, sizeof(y), 300);
    dt = px_time_mono_s() - t0;
    if (status != PX_ERR_TIMEOUT || dt < 0.29 || dt > 0.8 ||
        !strstr(px_comm_last_error(comm), "rank(s) 0")) {
        fprintf(stderr, "FAIL: timeout %s after %.3f s: %s\n", px_status_str(status), dt,
                px_comm_last_error(comm));
        return 1;
    }
    printf("local: timeout after %.3f s: %s\n", dt, px_comm_last_error(comm));
    px_comm_destroy(comm);

    /* abort from another thread wakes a blocked wait */
    if (px_comm_create_self(tr, "local", &comm) != PX_OK) {
        fprintf(stderr, "FAIL: comm create 2\n");
        return 1;
    }
    aa.comm = comm;
    pthread_create(&th, NULL, abort_thread, &aa);
    t0 = px_time_mono_s();
    status = px_recv(comm, 0, 6, &y, sizeof(y), 10000);
    dt = px_time_mono_s() - t0;
    pthread_join(th, NULL);
    if (status != PX_ERR_ABORTED || dt > 1.0 || !strstr(px_comm_last_error(comm), "test abort")) {
        fprintf(stderr, "FAIL: abort gave %s after %.3f s: %s\n", px_status_str(status), dt,
                px_comm_last_error(comm));
        return 1;
    }
    if (px_barrier(comm, -1) != PX_ERR_ABORTED) {
        fprintf(stderr, "FAIL: aborted comm should stay aborted\n");
        return 1;
    }
    printf("local: abort woke the wait after %.3f s\n", dt);
    px_comm_destroy(comm);

    /* abort while idle: the next call fails, even one that needs no message */
    if (px_comm_create_self(tr, "local", &comm) != PX_OK) {
        fprintf(stderr, "FAIL: comm create 3\n");
        return 1;
    }
    px_comm_abort(comm, "idle abort");
    if (px_barrier(comm, -1) != PX_ERR_ABORTED ||
        px_allreduce(comm, v, out, 5, PX_FLOAT32, PX_SUM, -1) != PX_ERR_ABORTED) {
        fprintf(stderr, "FAIL: calls after an idle abort should return aborted\n");
        return 1;
    }
    px_comm_destroy(comm);
    px_comm_destroy(NULL);
    px_transport_destroy(tr);
    px_transport_destroy(NULL);
    printf("local: ok\n");
    return 0;
}

int main(int argc, char **argv)
{
    const char *what = argc > 1 ? argv[1] : "local";
    int n = argc > 2 ? atoi(argv[2]) : 4;
    px_launch_opts_t opts = {.use_watch = 1, .limit_s = 240};
    int failed;

    setvbuf(stdout, NULL, _IOLBF, 0);
    if (!strcmp(what, "local")) {
        setenv("PX_CONNECT_TIMEOUT_MS", "400", 1); /* read once, before anything else */
        return run_local();
    }
    if (!strcmp(what, "allreduce") || !strcmp(what, "allreduce_2nodes")) {
        if (!strcmp(what, "allreduce_2nodes"))
            opts.ranks_per_node = (n + 1) / 2;
        if (argc > 3) /* "ring" or "rd": every count through that algorithm */
            px__allreduce_algo = !strcmp(argv[3], "ring") ? 1 : !strcmp(argv[3], "rd") ? 2 : 0;
        failed = px_launch(n, rank_allreduce, NULL, &opts, NULL);
    } else if (!strcmp(what, "mismatch")) {
        failed = px_launch(n, rank_mismatch, NULL, &opts, NULL);
    } else if (!strcmp(what, "p2p")) {
        failed = px_launch(n, rank_p2p, NULL, &opts, NULL);
    } else if (!strcmp(what, "nospin") || !strcmp(what, "nospin_shm")) {
        nospin_shm = !strcmp(what, "nospin_shm");
        failed = px_launch(n, rank_nospin, NULL, &opts, NULL);
    } else if (!strcmp(what, "kill") || !strcmp(what, "kill_nowatch") || !strcmp(what, "kill0") ||
               !strcmp(what, "kill_2nodes") || !strcmp(what, "kill_split")) {
        kill_shared_t *sh = px_launch_shared(sizeof(*sh));
        int statuses[64];
        int watch = strcmp(what, "kill_nowatch") != 0;
        if (!sh || n < 2 || n > 64)
            return 1;
        sh->victim = !strcmp(what, "kill0") ? 0 : n > 2 ? 2 : 1;
        if (!strcmp(what, "kill_2nodes")) {
            if (n < 4)
                return 1;
            opts.ranks_per_node = 2; /* node0: 0 1, node1: 2 3 ... */
            sh->victim = 1;          /* its successor, rank 2, reaches it in peer mode */
        }
        setenv("PX_TEST_WATCH", watch ? "1" : "0", 1);
        setenv("PX_TEST_KILL_SPLIT", !strcmp(what, "kill_split") ? "1" : "0", 1);
        if (!getenv("PX_COMM_TIMEOUT_MS"))
            setenv("PX_COMM_TIMEOUT_MS", "3000", 1);
        opts.use_watch = watch;
        opts.on_started = kill_on_started;
        failed = px_launch(n, rank_kill, sh, &opts, statuses);
        /* the victim's SIGKILL is expected; every other rank must pass */
        if (WIFSIGNALED(statuses[sh->victim]) && WTERMSIG(statuses[sh->victim]) == SIGKILL)
            failed--;
        else
            fprintf(stderr, "FAIL: the victim was not killed by SIGKILL\n");
    } else if (!strcmp(what, "kill_late")) {
        late_shared_t *sh = px_launch_shared(sizeof(*sh));
        int statuses[64];
        if (!sh || n < 4 || n > 64)
            return 1;
        opts.use_watch = argc > 3 && !strcmp(argv[3], "watch");
        opts.on_started = kill_late_on_started;
        /* several rounds: without the notices the late rank named a
         * survivor in about 1 round of 3 */
        for (int round = 0; round < 6 && !failed; round++) {
            memset(sh, 0, sizeof(*sh));
            sh->victim = 2;
            failed = px_launch(n, rank_kill_late, sh, &opts, statuses);
            if (WIFSIGNALED(statuses[sh->victim]) && WTERMSIG(statuses[sh->victim]) == SIGKILL)
                failed--;
            else
                fprintf(stderr, "FAIL: the victim was not killed by SIGKILL\n");
            if (failed)
                fprintf(stderr, "FAIL in round %d\n", round);
        }
    } else {
        fprintf(stderr, "usage: %s local | allreduce|mismatch|p2p|kill|kill_nowatch|kill_late|"
                        "nospin N\n",
                argv[0]);
        return 2;
    }
    if (failed)
        fprintf(stderr, "FAIL: %d rank(s) failed\n", failed);
    return failed ? 1 : 0;
}
