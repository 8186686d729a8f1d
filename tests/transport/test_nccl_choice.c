/* test_nccl_choice.c: the pure parts of the NCCL engine's choice
 * (transport/paths/nccl/px_nccl.h): PX_COLL_BACKEND's values, and whether
 * every rank of a communicator has a GPU of its own. */
#include <stdlib.h>
#include <string.h>

#include "../px_check.h"
#include "px_nccl.h"

int main(void)
{
    px__coll_backend_t b = PX__BACKEND_PX;
    int a = -1, c = -1;

    CHECK(px__nccl_backend_parse(NULL, &b) == 0 && b == PX__BACKEND_AUTO, "unset is auto");
    CHECK(px__nccl_backend_parse("", &b) == 0 && b == PX__BACKEND_AUTO, "empty is auto");
    CHECK(px__nccl_backend_parse("NCCL", &b) == 0 && b == PX__BACKEND_NCCL, "nccl");
    CHECK(px__nccl_backend_parse("px", &b) == 0 && b == PX__BACKEND_PX, "px");
    CHECK(px__nccl_backend_parse("Auto", &b) == 0 && b == PX__BACKEND_AUTO, "auto");
    b = PX__BACKEND_PX;
    CHECK(px__nccl_backend_parse("ncc", &b) == -1 && b == PX__BACKEND_PX,
          "a bad value is refused and leaves the choice alone");
    CHECK(px__nccl_backend_parse("ucx", &b) == -1, "ucx is no engine");

    {
        const char *ids[] = {"a/0000:19:00.0", "a/0000:3b:00.0", "b/0000:19:00.0",
                             "b/0000:3b:00.0"};
        CHECK(px__nccl_gpus_distinct(ids, 4, &a, &c) == 1,
              "two nodes, two GPUs each: the same bus ids on other nodes are other GPUs");
    }
    {
        const char *ids[] = {"a/0000:19:00.0", "a/0000:19:00.0"};
        CHECK(px__nccl_gpus_distinct(ids, 2, &a, &c) == 0 && a == 0 && c == 1,
              "two ranks on one GPU: ranks %d and %d", a, c);
    }
    {
        const char *ids[] = {"b/1", "a/2", "c/3", "a/1", "c/3", "a/2"};
        CHECK(px__nccl_gpus_distinct(ids, 6, &a, &c) == 0 && a == 1 && c == 5,
              "the first shared GPU by id (a/2: ranks 1 and 5), got ranks %d and %d", a, c);
    }
    {
        const char *one[] = {"a/0"};
        CHECK(px__nccl_gpus_distinct(one, 1, &a, &c) == 1, "one rank has its own GPU");
        CHECK(px__nccl_gpus_distinct(one, 0, &a, &c) == 1, "no rank: nothing shared");
    }
    {
        /* many ranks, one duplicate at the end */
        enum { N = 5000 };
        static char buf[N][32];
        static const char *ids[N];
        for (int r = 0; r < N; r++) {
            snprintf(buf[r], sizeof buf[r], "node%d/0000:%02x:00.0", r / 8, r % 8);
            ids[r] = buf[r];
        }
        CHECK(px__nccl_gpus_distinct(ids, N, &a, &c) == 1, "5000 ranks, 8 GPUs a node");
        ids[N - 1] = ids[3];
        CHECK(px__nccl_gpus_distinct(ids, N, &a, &c) == 0 && a == 3 && c == N - 1,
              "rank %d shares rank 3's GPU: got %d and %d", N - 1, a, c);
    }
    return fails ? 1 : 0;
}
