/* test_attn_select.c: which kernels the CUDA table's bf16 attention runs
 * (px_cuda_attention_kernels_set / _name, kernels/cuda/px_kernels_cuda.h):
 * the tensor cores where the head size C/NH is a multiple of 16 up to 128,
 * the CUDA cores elsewhere or when "simt" is asked for (PX_CUDA_ATTN), and
 * an unknown name is PX_ERR_INVALID_ARGUMENT that leaves the choice as it
 * was; "cudnn" names cuDNN's fused attention where the head size is a
 * multiple of 8 up to 128 and auto's kernels elsewhere. Needs a CUDA build, not a GPU (no device call is made); exits 77
 * (skipped) in a build without CUDA. Unit suite. */
#include <stdio.h>
#include <string.h>

#include "px_config.h"
#if PX_HAVE_CUDA
#include "px_kernels_cuda.h"
#endif

#include "../px_check.h"

int main(void)
{
#if PX_HAVE_CUDA
    static const struct { int C, NH; const char *want; } cases[] = {
        {768, 12, "tc"},   /* GPT-2: hs 64 */
        {256, 2, "tc"},    /* hs 128 */
        {160, 2, "tc"},    /* hs 80: padded to 128 */
        {64, 4, "tc"},     /* hs 16 */
        {72, 3, "simt"},   /* hs 24: not a multiple of 16 */
        {288, 1, "simt"},  /* hs 288: past 128 (the CUDA-core kernels then refuse it) */
        {100, 3, "simt"},  /* C not divisible by NH */
    };
    const size_t n = sizeof(cases) / sizeof(cases[0]);
    CHECK(px_cuda_attention_kernels_set(NULL) == PX_OK, "NULL (unset) is auto");
    for (size_t i = 0; i < n; i++) {
        const char *got = px_cuda_attention_kernels_name(cases[i].C, cases[i].NH);
        CHECK(!strcmp(got, cases[i].want), "auto, C %d NH %d: %s, want %s", cases[i].C,
               cases[i].NH, got, cases[i].want);
    }
    CHECK(px_cuda_attention_kernels_set("simt") == PX_OK, "simt accepted");
    for (size_t i = 0; i < n; i++)
        CHECK(!strcmp(px_cuda_attention_kernels_name(cases[i].C, cases[i].NH), "simt"),
               "simt forced, C %d NH %d", cases[i].C, cases[i].NH);
    /* a bad name is an error and changes nothing */
    CHECK(px_cuda_attention_kernels_set("tensorcore") == PX_ERR_INVALID_ARGUMENT,
           "an unknown name is INVALID_ARGUMENT");
    CHECK(!strcmp(px_cuda_attention_kernels_name(768, 12), "simt"), "choice kept after a bad name");
    CHECK(px_cuda_attention_kernels_set("tc") == PX_OK, "tc accepted");
    CHECK(!strcmp(px_cuda_attention_kernels_name(768, 12), "tc"), "tc: GPT-2 on the tensor cores");
    CHECK(px_cuda_attention_kernels_set("") == PX_OK &&
               !strcmp(px_cuda_attention_kernels_name(72, 3), "simt"),
           "empty is auto; hs 24 still on the CUDA cores");
    /* cudnn: cuDNN's fused attention where the head size is a multiple of 8
     * up to 128 (named so before the library is first loaded: no op has
     * run here), auto's kernels elsewhere */
    CHECK(px_cuda_attention_kernels_set("cudnn") == PX_OK, "cudnn accepted");
    CHECK(!strcmp(px_cuda_attention_kernels_name(768, 12), "cudnn"), "cudnn: GPT-2");
    CHECK(!strcmp(px_cuda_attention_kernels_name(72, 3), "cudnn"), "cudnn: hs 24");
    CHECK(!strcmp(px_cuda_attention_kernels_name(256, 2), "cudnn"), "cudnn: hs 128");
    CHECK(!strcmp(px_cuda_attention_kernels_name(24, 2), "simt"),
           "cudnn asked, hs 12: not cuDNN's, the CUDA cores' (not a multiple of 16)");
    CHECK(!strcmp(px_cuda_attention_kernels_name(288, 1), "simt"), "cudnn asked, hs 288");
    CHECK(!strcmp(px_cuda_attention_kernels_name(100, 3), "simt"), "cudnn asked, C %% NH");
    CHECK(px_cuda_attention_cudnn_version() == 0, "nothing loaded before an op runs");
    CHECK(px_cuda_attention_kernels_set("CUDNN") == PX_ERR_INVALID_ARGUMENT,
           "names are case sensitive");
    CHECK(!strcmp(px_cuda_attention_kernels_name(768, 12), "cudnn"), "cudnn kept after a bad name");
    CHECK(px_cuda_attention_kernels_set("auto") == PX_OK &&
               !strcmp(px_cuda_attention_kernels_name(768, 12), "tc"),
           "auto after cudnn: the tensor cores again");
    printf("%s\n", fails ? "FAIL" : "PASS");
    return fails ? 1 : 0;
#else
    printf("test_attn_select: SKIP: this build has no CUDA backend\n");
    return 77;
#endif
}
