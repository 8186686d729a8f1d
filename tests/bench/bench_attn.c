/* bench_attn.c: px-attn-bench, single-thread CPU time of the causal
 * attention ops (px_kernels.h attention_forward / attention_backward) at a
 * GPT model's shapes, and of the other per-element ops of a block
 * (LayerNorm, GELU, residual) for scale. Not a test: a benchmark
 * (the per-op profile; tests/bench/bench_opsplit.py gives the
 * split in a real run).
 *
 * usage: px-attn-bench B T C NH [REPS]   (REPS default 20)
 * Times each op by the thread's CPU time (CLOCK_THREAD_CPUTIME_ID, so a
 * loaded machine's waits are left out), best of REPS calls after one warm
 * call, and prints ms per call and, for attention, the GFLOP/s of the
 * causal FLOP (forward 2 GEMMs of B*NH*T*(T+1)/2*hs multiply-adds, backward
 * 4), i.e. the useful work, whatever the kernel computes beyond the
 * diagonal. Run with OPENBLAS_NUM_THREADS=1. Main thread only. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "px_kernels.h"

static double cpu_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

/* n floats from a fixed LCG, uniform in [-a, a); caller frees */
static float *rand_buf(size_t n, float a, unsigned *seed)
{
    float *p = malloc(n * sizeof(float));
    if (!p) {
        fprintf(stderr, "px-attn-bench: out of memory (%zu floats)\n", n);
        exit(1);
    }
    for (size_t i = 0; i < n; i++) {
        *seed = *seed * 1664525u + 1013904223u;
        p[i] = a * ((float)(*seed >> 8) / 8388608.0f - 1.0f);
    }
    return p;
}

#define TIME_BEST(reps, best, stmt)                                                               \
    do {                                                                                          \
        stmt;                                                                                     \
        best = 1e30;                                                                              \
        for (int r_ = 0; r_ < (reps); r_++) {                                                     \
            double t0_ = cpu_s();                                                                 \
            stmt;                                                                                 \
            double dt_ = cpu_s() - t0_;                                                           \
            best = dt_ < best ? dt_ : best;                                                       \
        }                                                                                         \
    } while (0)

int main(int argc, char **argv)
{
    if (argc < 5) {
        fprintf(stderr, "usage: %s B T C NH [REPS]\n", argv[0]);
        return 2;
    }
    int B = atoi(argv[1]), T = atoi(argv[2]), C = atoi(argv[3]), NH = atoi(argv[4]);
    int reps = argc > 5 ? atoi(argv[5]) : 20;
    if (B < 1 || T < 1 || C < 1 || NH < 1 || C % NH || reps < 1) {
        fprintf(stderr, "px-attn-bench: bad shape B %d T %d C %d NH %d REPS %d (C %% NH must be 0)\n",
                B, T, C, NH, reps);
        return 2;
    }
    const px_kernel_ops_t *k = px_kernels_cpu();
    unsigned seed = 12345;
    size_t N = (size_t)B * T, hs = (size_t)(C / NH);
    float *qkv = rand_buf(N * 3 * C, 1.0f, &seed), *out = rand_buf(N * C, 1.0f, &seed);
    float *att = rand_buf((size_t)B * NH * T * T, 1.0f, &seed);
    float *scratch = rand_buf((size_t)T * T, 1.0f, &seed);
    float *dout = rand_buf(N * C, 0.1f, &seed), *dqkv = rand_buf(N * 3 * C, 0.0f, &seed);
    float *x = rand_buf(N * 4 * C, 2.0f, &seed), *y = rand_buf(N * 4 * C, 1.0f, &seed);
    float *w = rand_buf((size_t)C, 1.0f, &seed), *bi = rand_buf((size_t)C, 0.1f, &seed);
    float *dw = rand_buf((size_t)C, 0.0f, &seed), *db = rand_buf((size_t)C, 0.0f, &seed);
    float *mean = rand_buf(N, 0.0f, &seed), *rstd = rand_buf(N, 0.0f, &seed);
    double fwd, bwd, t;
    double causal = (double)B * NH * T * (T + 1) / 2.0 * hs * 2.0; /* one GEMM's FLOP */

    TIME_BEST(reps, fwd, k->attention_forward(out, att, qkv, B, T, C, NH));
    TIME_BEST(reps, bwd, k->attention_backward(dqkv, scratch, dout, qkv, att, B, T, C, NH));
    printf("attention B %d T %d C %d NH %d (hs %zu), CPU ms per call, best of %d\n", B, T, C, NH,
           hs, reps);
    printf("  attention_forward   %8.3f ms  %6.1f GFLOP/s (causal)\n", fwd * 1e3,
           2 * causal / fwd * 1e-9);
    printf("  attention_backward  %8.3f ms  %6.1f GFLOP/s (causal)\n", bwd * 1e3,
           4 * causal / bwd * 1e-9);
    TIME_BEST(reps, t, k->layernorm_forward(out, mean, rstd, x, w, bi, (int)N, C));
    printf("  layernorm_forward   %8.3f ms\n", t * 1e3);
    TIME_BEST(reps, t, k->layernorm_backward(y, dw, db, dout, x, w, mean, rstd, (int)N, C));
    printf("  layernorm_backward  %8.3f ms\n", t * 1e3);
    TIME_BEST(reps, t, k->gelu_forward(y, x, N * 4 * C));
    printf("  gelu_forward        %8.3f ms (N*4C)\n", t * 1e3);
    TIME_BEST(reps, t, k->gelu_backward(y, x, x, N * 4 * C));
    printf("  gelu_backward       %8.3f ms (N*4C)\n", t * 1e3);
    TIME_BEST(reps, t, k->residual_forward(out, x, y, N * C));
    printf("  residual_forward    %8.3f ms\n", t * 1e3);
    free(qkv), free(out), free(att), free(scratch), free(dout), free(dqkv), free(x), free(y);
    free(w), free(bi), free(dw), free(db), free(mean), free(rstd);
    return 0;
}
