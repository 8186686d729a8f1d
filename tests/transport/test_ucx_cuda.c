/* test_ucx_cuda.c: px_transport_cuda_memory asks the UCX in use, for real,
 * whether it moves CUDA memory (ucp_context_query memory types): its answer
 * must agree with `ucx_info -d` (a UCX built with CUDA lists its cuda_copy
 * transport; Debian's lists none).
 * Skipped (77) where ucx_info is not installed. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "px_transport.h"

int main(void)
{
    char line[512];
    int listed = 0, got;
    FILE *f = popen("ucx_info -d 2>/dev/null", "r");
    px_transport_t *tr = NULL;

    if (!f)
        return 77;
    while (fgets(line, sizeof line, f))
        if (strstr(line, "Transport: cuda_copy"))
            listed = 1;
    if (pclose(f) != 0) {
        printf("test_ucx_cuda: SKIP: ucx_info -d did not run\n");
        return 77;
    }
    if (px_transport_create(&tr) != PX_OK) {
        fprintf(stderr, "test_ucx_cuda: px_transport_create failed\n");
        return 1;
    }
    got = px_transport_cuda_memory(tr);
    px_transport_destroy(tr);
    printf("test_ucx_cuda: ucx_info -d lists cuda_copy: %s; px_transport_cuda_memory: %d\n",
           listed ? "yes" : "no", got);
    if (got != listed) {
        fprintf(stderr, "test_ucx_cuda: FAIL: the UCX query and ucx_info disagree\n");
        return 1;
    }
    if (px_transport_cuda_memory(NULL) != 0) {
        fprintf(stderr, "test_ucx_cuda: FAIL: NULL transport reports CUDA memory\n");
        return 1;
    }
    printf("test_ucx_cuda: PASS\n");
    return 0;
}
