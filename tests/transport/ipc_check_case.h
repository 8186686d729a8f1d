/* ipc_check_case.h: px-ipc-check's verdict on one case (px_ipc_check.c),
 * apart so that its rule is unit-tested on the CPU (test_ipc_check_case.c).
 *
 * A case ran through the IPC path on rank r of n when that run copied
 * nothing through host memory and, for a reduction, ran device
 * reductions wherever this rank has elements to reduce: the IPC path
 * (transport/paths/ipc) gives rank r block r of an all-reduce's `count`
 * elements (count / n, one more for r < count % n: an all-reduce of fewer
 * elements than ranks leaves the higher ranks nothing to reduce) and a
 * reduce-scatter's `count` (recvcount) elements. Header-only. */
#ifndef PX_IPC_CHECK_CASE_H
#define PX_IPC_CHECK_CASE_H

#include <stdint.h>

/* What a case reduces: none (all-gather, broadcast, all-to-all), an
 * all-reduce of `count` elements, a reduce-scatter of `count` per rank. */
enum { PX_IPC_CASE_MOVE = 0, PX_IPC_CASE_ALLREDUCE, PX_IPC_CASE_REDUCE_SCATTER };

/* The elements rank r of n reduces in a case of kind `what` (above). */
static inline uint64_t px_ipc_case_owned(int what, uint64_t count, int n, int r)
{
    if (what == PX_IPC_CASE_ALLREDUCE)
        return count / (uint64_t)n + ((uint64_t)r < count % (uint64_t)n ? 1 : 0);
    return what == PX_IPC_CASE_REDUCE_SCATTER ? count : 0;
}

/* 1 when the IPC run of a case (`host_copies` made through host memory
 * beside the input's and the result's own, `dev_reduces` device
 * reductions) went through IPC on rank r of n, else 0. */
static inline int px_ipc_case_went_ipc(int what, uint64_t count, int n, int r, long host_copies,
                                       long dev_reduces)
{
    if (host_copies != 0)
        return 0;
    return px_ipc_case_owned(what, count, n, r) == 0 || dev_reduces > 0;
}

#endif
