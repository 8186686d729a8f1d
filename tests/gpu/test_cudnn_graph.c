/* test_cudnn_graph.c: the cuDNN attention graphs (kernels/cuda/
 * px_attention_cudnn.c) node by node, without a GPU: libcudnn.so.9 is
 * opened as PX_CUDA_ATTN=cudnn opens it, every tensor and operation
 * descriptor of the forward and backward graphs is built and finalised
 * (cuDNN then checks each node's attributes, types and shape
 * compatibility), and the node count is the one the design lists (forward
 * 14 causal / 10 not; backward 23 / 19). What only a device can check (the
 * operation graph, an engine taking it, the numbers) is px-opcheck's.
 * Exits 77 (skipped) in a build without CUDA or cuDNN headers, or where
 * libcudnn.so.9 cannot be loaded. Unit suite. */
#include <stdio.h>
#include <string.h>

#include "px_config.h"
#if PX_HAVE_CUDA
#include "px_attention_cudnn.h"
#endif

#include "../px_check.h"

int main(void)
{
#if PX_HAVE_CUDA
    static const struct { int B, NH, T, hs, causal, dir, nodes; } cases[] = {
        {8, 12, 1024, 64, 1, PX_SDPA_FWD, 14}, /* GPT-2 124M at batch 8 */
        {8, 12, 1024, 64, 1, PX_SDPA_BWD, 23},
        {1, 2, 70, 128, 1, PX_SDPA_FWD, 14},   /* hs 128, T not a tile multiple */
        {1, 2, 70, 128, 1, PX_SDPA_BWD, 23},
        {2, 3, 100, 24, 1, PX_SDPA_BWD, 23},   /* hs 24 */
        {2, 3, 100, 32, 0, PX_SDPA_FWD, 10},   /* not causal: no mask nodes */
        {2, 3, 100, 32, 0, PX_SDPA_BWD, 19},
    };
    char err[400];
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        px_sdpa_key_t k = {cases[i].B, cases[i].NH, cases[i].T, cases[i].hs, cases[i].causal,
                           cases[i].dir};
        int nodes = -1;
        err[0] = 0;
        px_status_t s = px__cudnn_sdpa_check_graph(&k, &nodes, err, sizeof(err));
        if (s == PX_ERR_NOT_FOUND) {
            printf("test_cudnn_graph: SKIP: %s\n", err);
            return 77;
        }
        CHECK(s == PX_OK, "%s B %d NH %d T %d hs %d%s: %s",
               k.dir == PX_SDPA_FWD ? "forward" : "backward", k.B, k.NH, k.T, k.hs,
               k.causal ? " causal" : "", err);
        CHECK(s != PX_OK || nodes == cases[i].nodes, "case %zu: %d nodes, want %d", i, nodes,
               cases[i].nodes);
    }
    px_sdpa_key_t bad = {1, 2, 70, 12, 1, PX_SDPA_FWD};
    int nodes = -1;
    CHECK(px__cudnn_sdpa_check_graph(&bad, &nodes, err, sizeof(err)) ==
               PX_ERR_INVALID_ARGUMENT, "hs 12 refused before cuDNN sees it");
    printf("test_cudnn_graph: cuDNN %ld: %s\n", px__cudnn_sdpa_version(),
           fails ? "FAIL" : "PASS");
    return fails ? 1 : 0;
#else
    printf("test_cudnn_graph: SKIP: this build has no CUDA backend\n");
    return 77;
#endif
}
