/* test_ipc_check_case.c: px-ipc-check's verdict on one case
 * (ipc_check_case.h). Two ranks on one H200 failed the check on rank 1
 * alone: a 1-element all-reduce leaves rank 1 no element to reduce (the
 * IPC path gives it an empty block), and the check wanted a device
 * reduction from every rank. */
#include "../px_check.h"
#include "ipc_check_case.h"

int main(void)
{
    /* 1 element over 2 ranks: rank 0 owns it, rank 1 none */
    CHECK(px_ipc_case_owned(PX_IPC_CASE_ALLREDUCE, 1, 2, 0) == 1, "rank 0 owns the element");
    CHECK(px_ipc_case_owned(PX_IPC_CASE_ALLREDUCE, 1, 2, 1) == 0, "rank 1 owns nothing");
    CHECK(px_ipc_case_went_ipc(PX_IPC_CASE_ALLREDUCE, 1, 2, 1, 0, 0),
          "rank 1 of a 1-element all-reduce went through IPC without reducing");
    CHECK(!px_ipc_case_went_ipc(PX_IPC_CASE_ALLREDUCE, 1, 2, 0, 0, 0),
          "rank 0 owns an element: no device reduction means it did not go through IPC");
    /* 4097 over 3: 1366, 1366, 1365 */
    CHECK(px_ipc_case_owned(PX_IPC_CASE_ALLREDUCE, 4097, 3, 0) == 1366, "block 0");
    CHECK(px_ipc_case_owned(PX_IPC_CASE_ALLREDUCE, 4097, 3, 1) == 1366, "block 1");
    CHECK(px_ipc_case_owned(PX_IPC_CASE_ALLREDUCE, 4097, 3, 2) == 1365, "block 2");
    CHECK(!px_ipc_case_went_ipc(PX_IPC_CASE_ALLREDUCE, 4097, 3, 2, 0, 0),
          "a rank with elements that reduced nothing staged");
    /* reduce-scatter: every rank reduces its recvcount */
    CHECK(!px_ipc_case_went_ipc(PX_IPC_CASE_REDUCE_SCATTER, 1, 2, 1, 0, 0),
          "a reduce-scatter rank that reduced nothing staged");
    CHECK(px_ipc_case_went_ipc(PX_IPC_CASE_REDUCE_SCATTER, 1, 2, 1, 0, 1), "one reduction");
    /* moves reduce nothing; host copies always mean staging */
    CHECK(px_ipc_case_went_ipc(PX_IPC_CASE_MOVE, 5, 2, 1, 0, 0), "all-gather without copies");
    CHECK(!px_ipc_case_went_ipc(PX_IPC_CASE_MOVE, 5, 2, 1, 2, 0), "host copies are staging");
    CHECK(!px_ipc_case_went_ipc(PX_IPC_CASE_ALLREDUCE, 8, 2, 0, 1, 4),
          "host copies are staging even with reductions");
    return fails ? 1 : 0;
}
