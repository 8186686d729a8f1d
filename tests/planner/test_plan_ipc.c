/* test_plan_ipc.c: the plan's CUDA IPC scratch (planner/plan.h, issue 12):
 * which communicators of a layout set up IPC rings, on one node and across
 * nodes, the slot rounding px_ipc.c applies, the bytes, and the submit
 * check's figure per node (px_plan_ipc_node_bytes, daemon/memfit.c). (That the
 * transport holds exactly px_plan_ipc_bytes per such communicator is
 * checked against the transport itself by tests/transport/test_ipc.c.) */
#include <stdio.h>
#include <string.h>

#include "plan.h"

#include "../px_check.h"

/* layout dp,tp,pp,cp,ep with `experts` on nodes `node_of_rank` (NULL: one)
 * counts exactly the group kinds `want` (a string of names, "dp tp") */
static void expect(int dp, int tp, int pp, int cp, int ep, int experts, const int *node_of_rank,
                   const char *want)
{
    px_layout_t l = {dp, tp, pp, cp, ep};
    px_group_kind_t k[3];
    char got[64] = "";
    int n = px_plan_ipc_comms(&l, experts, 0, node_of_rank, k);
    for (int i = 0; i < n; i++)
        snprintf(got + strlen(got), sizeof(got) - strlen(got), "%s%s", i ? " " : "",
                 px_group_name(k[i]));
    CHECK(!strcmp(got, want), "dp%d tp%d pp%d cp%d ep%d experts %d %s: '%s', want '%s'", dp, tp,
          pp, cp, ep, experts, node_of_rank ? "on nodes" : "one node", got, want);
    printf("dp%d tp%d pp%d cp%d ep%d experts %-2d %-9s -> %d: %s\n", dp, tp, pp, cp, ep,
           experts, node_of_rank ? "2 nodes" : "one node", n, got);
}

int main(void)
{
    static const int two_by_rank[4] = {0, 1, 0, 1}; /* dp 2: one rank per node */
    static const int two_by_pair[4] = {0, 0, 1, 1}; /* tp groups whole per node */

    expect(1, 1, 1, 1, 1, 0, NULL, "");
    expect(2, 1, 1, 1, 1, 0, NULL, "dp");
    expect(1, 2, 1, 1, 1, 0, NULL, "tp");
    expect(2, 2, 1, 1, 1, 0, NULL, "dp tp");
    expect(1, 1, 2, 1, 1, 0, NULL, "");          /* pipeline: point to point */
    expect(2, 1, 2, 1, 1, 0, NULL, "dp");
    expect(1, 1, 1, 2, 1, 0, NULL, "dpcp");      /* ring attention: p2p; grads over dp x cp */
    expect(4, 1, 1, 1, 2, 8, NULL, "dp edp");    /* edp = 2 */
    expect(2, 1, 1, 1, 2, 8, NULL, "dp");        /* edp = 1 */
    expect(2, 1, 1, 1, 1, 8, NULL, "dp edp");    /* ep 1: edp its own communicator */
    expect(2, 1, 1, 1, 1, 0, two_by_rank, "");   /* dp across nodes: staged */
    expect(2, 2, 1, 1, 1, 0, two_by_pair, "tp"); /* tp on a node, dp across */
    CHECK(px_plan_ipc_slot_bytes(4194304) == 4194304, "default slot");
    CHECK(px_plan_ipc_slot_bytes(1000) == 4096, "small slot: %llu",
          (unsigned long long)px_plan_ipc_slot_bytes(1000));
    CHECK(px_plan_ipc_slot_bytes(65537) == 65792, "rounded slot: %llu",
          (unsigned long long)px_plan_ipc_slot_bytes(65537));
    CHECK(px_plan_ipc_bytes(2, 4194304) == 2ull * 3 * 4194304, "bytes");
    CHECK(px_plan_ipc_bytes(0, 4194304) == 0, "no communicator");

    /* the submit check's figure per node (px_plan_ipc_node_bytes) */
    static const int one_node[8] = {0, 0, 0, 0, 0, 0, 0, 0};
    static const int pairs[8] = {0, 0, 1, 1, 0, 0, 1, 1}; /* dp2 x tp2 x pp2: tp whole */
    const uint64_t S = 4194304;
    px_layout_t dp4 = {4, 1, 1, 1, 1}, dp2tp2 = {2, 2, 1, 1, 1}, dp4ep2 = {4, 1, 1, 1, 2},
                dp2tp2pp2 = {2, 2, 2, 1, 1};
    int comms = -1;
    CHECK(px_plan_ipc_node_bytes(&dp4, 0, one_node, 0, S, &comms) == 3 * S && comms == 1,
          "dp4 on one node: one ring (%d)", comms);
    CHECK(px_plan_ipc_node_bytes(&dp2tp2, 0, one_node, 0, S, &comms) == 6 * S && comms == 2,
          "dp2 tp2 on one node: two rings (%d)", comms);
    CHECK(px_plan_ipc_node_bytes(&dp4ep2, 8, one_node, 0, S, &comms) == 6 * S && comms == 2,
          "dp4 ep2 with experts: dp and edp rings (%d)", comms);
    CHECK(px_plan_ipc_node_bytes(&dp4, 0, two_by_rank, 1, S, &comms) == 0 && comms == 0,
          "dp across nodes: none (%d)", comms);
    CHECK(px_plan_ipc_node_bytes(&dp2tp2pp2, 0, pairs, 1, S, &comms) == 3 * S && comms == 1,
          "tp on a node, dp across: the tp ring only (%d)", comms);
    CHECK(px_plan_ipc_node_bytes(&dp4, 0, one_node, 1, S, &comms) == 0 && comms == 0,
          "a node without ranks: none");
    printf("node figures: dp4 one node %llu, dp2 tp2 %llu bytes per rank\n",
           (unsigned long long)px_plan_ipc_node_bytes(&dp4, 0, one_node, 0, S, NULL),
           (unsigned long long)px_plan_ipc_node_bytes(&dp2tp2, 0, one_node, 0, S, NULL));
    printf("%s\n", fails ? "FAILED" : "PASS");
    return fails ? 1 : 0;
}
