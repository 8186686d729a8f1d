/* test_plan_dev.c: the activation plan per kind of device (planner/plan.h
 * px_plan_gpt_activations_dev and px_plan_bf16_gemm_scratch_bytes, issue
 * 12), in exact 4-byte words, for a hand-sized shape and for the GPT-2 124M
 * shape `pctl plan` reports (12 layers, 12 heads, dim 768, seq 1024, vocab
 * 50257 padded to 50304, micro-batch 8):
 *   - cpu and sim (which runs the cpu attention): att (L,B,NH,T,T) and the
 *     (T,T) scratch; cuda (the fused attention, att_lse_only): att is the
 *     (L,B,NH,T) log-sum-exp and no scratch; with cp > 1 both are the
 *     ring's lse and keep the scratch (the blockwise ops use it);
 *   - one classifier buffer (probs and dlogits in place over the logits);
 *   - the bf16 GEMM scratch: cuda's bf16 copies without the stored-bf16
 *     inputs, cpu's doubles. */
#include <stdint.h>
#include <stdio.h>

#include "plan.h"

#include "../px_check.h"

enum { ATT = 6, LOGITS = 17, PROBS = 18, DLOGITS = 25, SCRATCH = 26 };

static uint64_t al64(uint64_t n) { return (n + 63) & ~(uint64_t)63; }

int main(void)
{
    px_plan_gpt_acts_t a;

    /* L 1, NH 2, C 4, Vp 64, B 1, T 4: the cpu table is 796 words
     * (tests/engine/test_engine.c counts them); cuda: att 32 -> 8, scratch
     * 16 -> 0: 756 */
    CHECK(px_plan_gpt_activations_dev(1, 2, 4, 64, 1, 4, 1, 0, 1, 0, 0, &a) == PX_OK &&
              a.floats == 796 && a.count[ATT] == 32 && a.count[SCRATCH] == 16 &&
              a.count[LOGITS] == 256 && a.count[PROBS] == 0 && a.count[DLOGITS] == 0,
          "cpu: %llu words", (unsigned long long)a.floats);
    CHECK(px_plan_gpt_activations_dev(1, 2, 4, 64, 1, 4, 1, 0, 1, 0, 1, &a) == PX_OK &&
              a.floats == 756 && a.count[ATT] == 8 && a.count[SCRATCH] == 0 &&
              a.bytes == 756 * 4,
          "cuda: %llu words", (unsigned long long)a.floats);
    /* bf16 storage on cuda: 740 (cpu bf16) - 32 + 8 - 16 */
    CHECK(px_plan_gpt_activations_dev(1, 2, 4, 64, 1, 4, 1, 0, 1, 1, 1, &a) == PX_OK &&
              a.floats == 700 && a.bf16[1] && a.bf16[12],
          "cuda bf16: %llu words", (unsigned long long)a.floats);
    /* tp 2: NHl 1: att 16 -> lse 4, scratch 16 -> 0: 496 - 28 */
    CHECK(px_plan_gpt_activations_dev(1, 2, 4, 64, 1, 4, 2, 0, 1, 0, 1, &a) == PX_OK &&
              a.floats == 468 && a.count[ATT] == 4,
          "cuda tp 2: %llu words", (unsigned long long)a.floats);
    /* cp 2: the ring's lse and the scratch on every device: 940 */
    for (int dev = 0; dev < 2; dev++)
        CHECK(px_plan_gpt_activations_dev(1, 2, 4, 64, 1, 4, 1, 0, 2, 0, dev, &a) == PX_OK &&
                  a.floats == 940 && a.count[ATT] == 8 && a.count[SCRATCH] == 16 &&
                  a.ring == 168,
              "cp 2 device %d: %llu words", dev, (unsigned long long)a.floats);
    CHECK(px_plan_gpt_activations_dev(1, 2, 4, 64, 1, 3, 1, 0, 2, 0, 1, &a) ==
              PX_ERR_INVALID_ARGUMENT, "odd local T with cp 2");

    /* GPT-2 124M, micro-batch 8 x 1024 (N 8192 tokens) */
    const uint64_t L = 12, NH = 12, C = 768, Vp = 50304, B = 8, T = 1024, N = B * T;
    /* encoded, lnf, dres (N,C); ln1, residual2, ln2, residual3 (L,N,C); stats */
    const uint64_t stream = (3 + 4 * L) * N * C + (4 * L + 2) * N;
    const uint64_t split = 3 * L * N * C + L * N * C + 8 * L * N * C + N * Vp + 8 * N * C;
    const uint64_t whole = N + 2 * N * C;
    const uint64_t cpu = stream + split + whole + L * B * NH * T * T + T * T;
    const uint64_t cuda = stream + split + whole + L * B * NH * T;
    /* bf16: ln1, ln2 (L,N,C), lnf (N,C), the GELU output (L,N,4C) halve */
    const uint64_t halved = (2 * L * N * C + N * C + 4 * L * N * C) / 2;
    const struct { int bf16, dev; uint64_t words; const char *name; } want[] = {
        {0, 0, cpu, "cpu fp32"}, {1, 0, cpu - halved, "cpu bf16"},
        {0, 1, cuda, "cuda fp32"}, {1, 1, cuda - halved, "cuda bf16"}};
    for (int i = 0; i < 4; i++) {
        CHECK(px_plan_gpt_activations_dev((int)L, (int)NH, (int)C, (int)Vp, (int)B, (int)T, 1, 0,
                                          1, want[i].bf16, want[i].dev, &a) == PX_OK &&
                  a.floats == want[i].words && a.bytes == 4 * want[i].words,
              "124M %s: %llu words, want %llu", want[i].name, (unsigned long long)a.floats,
              (unsigned long long)want[i].words);
        printf("124M %-9s: %llu words, %.3f GB\n", want[i].name,
               (unsigned long long)a.floats, 4e-9 * (double)a.floats);
    }
    /* the bf16 GEMM scratch: the tied head's backward dominates. cuda: dout
     * (N,Vp) + W (Vp,C) bf16 (lnf stored bf16, read in place); cpu: doubles
     * of dout, W, inp and the accumulator max(N C, Vp C) */
    uint64_t s_cuda = px_plan_bf16_gemm_scratch_bytes(768, 50304, 8192, 1, 0, 1);
    uint64_t s_cpu = px_plan_bf16_gemm_scratch_bytes(768, 50304, 8192, 1, 0, 0);
    CHECK(s_cuda == 2 * (al64(N * Vp) + al64(Vp * C)), "124M cuda bf16 scratch %llu",
          (unsigned long long)s_cuda);
    CHECK(s_cpu == 8 * (N * Vp + Vp * C + N * C + Vp * C), "124M cpu bf16 scratch %llu",
          (unsigned long long)s_cpu);
    /* sequence parallelism: lnf all-gathered as fp32, so cuda rounds it */
    CHECK(px_plan_bf16_gemm_scratch_bytes(768, 50304, 8192, 2, 1, 1) ==
              2 * (al64(N * Vp / 2) + al64(Vp / 2 * C) + N * C),
          "tp 2 SP cuda bf16 scratch");
    /* dim 64, Vp 64, 16 tokens: MLP-bound. fc (N 16, C 64, OC 256; ln2
     * stored): backward dout 4096 + W 16384; fc projection (C 256, OC 64,
     * GELU stored): 1024 + 16384; the attention projection (atty fp32):
     * 1024 + 4096 + 1024: cuda 2 x 20480 */
    CHECK(px_plan_bf16_gemm_scratch_bytes(64, 64, 16, 1, 0, 1) == 2 * 20480,
          "MLP-bound cuda scratch %llu",
          (unsigned long long)px_plan_bf16_gemm_scratch_bytes(64, 64, 16, 1, 0, 1));
    CHECK(px_plan_bf16_gemm_scratch_bytes(0, 64, 16, 1, 0, 1) == 0, "bad dim");
    printf("124M bf16 GEMM scratch: cuda %llu bytes, cpu %llu bytes\n",
           (unsigned long long)s_cuda, (unsigned long long)s_cpu);
    printf(fails ? "FAIL (%d)\n" : "PASS\n", fails);
    return fails ? 1 : 0;
}
