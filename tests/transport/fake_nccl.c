/* fake_nccl.c: test doubles of libnccl.so.2 for the NCCL engine's loader
 * and setup (transport/paths/nccl; test_nccl.c points PX_NCCL_LIBRARY at
 * them). The NCCL functions the engine resolves, with NCCL's C signatures
 * (the types reduced to what they are in the ABI: enums as int, pointers,
 * the 128-byte unique id by value). Built three ways:
 *   FAKE_NCCL_NO_REDUCE_SCATTER  a library without ncclReduceScatter;
 *   FAKE_NCCL_INIT_FAILS         ncclCommInitRank(Config) answers
 *                                ncclInternalError (3);
 *   neither                      a working NCCL of one rank: its
 *                                collectives copy on the host (what a
 *                                world of one rank does), in a group too;
 *                                more ranks are "invalid usage" (5).
 * fake_nccl_calls counts the collectives and sends/receives called,
 * fake_nccl_aborts the ncclCommAbort calls. FAKE_NCCL_ASYNC_ERROR=1 in the
 * environment makes ncclCommGetAsyncError report a remote error (6) once
 * a collective was called (a peer's NCCL failing); FAKE_NCCL_ANY_N=1 lets
 * the working one start a communicator of any size (its collectives then
 * only do what one rank's would: for tests whose collectives never end). */
#include <stdlib.h>
#include <string.h>

typedef struct {
    char internal[128];
} uid_t128;

long fake_nccl_calls, fake_nccl_aborts;
#ifndef FAKE_NCCL_INIT_FAILS
static int the_comm;
#endif
static const char *pending_send;
static size_t pending_bytes;

static size_t dsize(int dt)
{
    switch (dt) {
    case 0: case 1: return 1;
    case 2: case 3: case 7: return 4;
    case 4: case 5: case 8: return 8;
    default: return 2; /* 6 fp16, 9 bf16 */
    }
}

int ncclGetVersion(int *v)
{
    *v = 22803;
    return 0;
}

const char *ncclGetErrorString(int r)
{
    return r == 3 ? "internal error (fake)" : r == 5 ? "invalid usage (fake)"
         : r == 6 ? "remote process exited or there was a network error (fake)" : "fake result";
}

int ncclGetUniqueId(uid_t128 *uid)
{
    memset(uid->internal, 7, sizeof uid->internal);
    return 0;
}

static int init(void **comm, int n)
{
#ifdef FAKE_NCCL_INIT_FAILS
    (void)comm;
    (void)n;
    return 3;
#else
    if (n != 1 && !getenv("FAKE_NCCL_ANY_N"))
        return 5;
    *comm = &the_comm;
    return 0;
#endif
}

int ncclCommInitRank(void **comm, int n, uid_t128 uid, int rank)
{
    (void)uid;
    (void)rank;
    return init(comm, n);
}

int ncclCommInitRankConfig(void **comm, int n, uid_t128 uid, int rank, void *config)
{
    (void)uid;
    (void)rank;
    (void)config;
    return init(comm, n);
}

int ncclCommDestroy(void *comm)
{
    (void)comm;
    return 0;
}

int ncclCommAbort(void *comm)
{
    (void)comm;
    fake_nccl_aborts++;
    return 0;
}

int ncclCommGetAsyncError(void *comm, int *r)
{
    (void)comm;
    *r = getenv("FAKE_NCCL_ASYNC_ERROR") && fake_nccl_calls > 0 ? 6 : 0;
    return 0;
}

static void copy(void *dst, const void *src, size_t bytes)
{
    fake_nccl_calls++;
    if (dst != src && bytes)
        memmove(dst, src, bytes);
}

int ncclAllReduce(const void *s, void *r, size_t n, int dt, int op, void *c, void *st)
{
    (void)op, (void)c, (void)st;
    copy(r, s, n * dsize(dt));
    return 0;
}

#ifndef FAKE_NCCL_NO_REDUCE_SCATTER
int ncclReduceScatter(const void *s, void *r, size_t n, int dt, int op, void *c, void *st)
{
    (void)op, (void)c, (void)st;
    copy(r, s, n * dsize(dt));
    return 0;
}
#endif

int ncclAllGather(const void *s, void *r, size_t n, int dt, void *c, void *st)
{
    (void)c, (void)st;
    copy(r, s, n * dsize(dt));
    return 0;
}

int ncclBroadcast(const void *s, void *r, size_t n, int dt, int root, void *c, void *st)
{
    (void)root, (void)c, (void)st;
    copy(r, s, n * dsize(dt));
    return 0;
}

int ncclSend(const void *s, size_t n, int dt, int peer, void *c, void *st)
{
    (void)peer, (void)c, (void)st;
    fake_nccl_calls++;
    pending_send = s;
    pending_bytes = n * dsize(dt);
    return 0;
}

int ncclRecv(void *r, size_t n, int dt, int peer, void *c, void *st)
{
    (void)peer, (void)c, (void)st;
    if (!pending_send || pending_bytes != n * dsize(dt))
        return 5;
    copy(r, pending_send, pending_bytes);
    pending_send = NULL;
    return 0;
}

int ncclGroupStart(void)
{
    return 0;
}

int ncclGroupEnd(void)
{
    return 0;
}
