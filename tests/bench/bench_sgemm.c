/* bench_sgemm.c: px-sgemm-bench, single-thread sgemm GFLOP/s at a GPT
 * model's linear-layer shapes, on the BLAS core a rank would run (issue 15).
 * Not a test: a benchmark (tests/bench/bench_tokens.sh runs it).
 *
 * usage: px-sgemm-bench L C T B [V]     (V default 256)
 * For each linear layer of one training step (per block: qkv C->3C, proj
 * C->C, fc C->4C, fc2 4C->C; the tied LM head C->V) it times the three
 * GEMMs px_matmul_cpu.c runs (forward N x OC x C NoTrans/Trans, dinp
 * N x C x OC NoTrans/NoTrans, dweight OC x C x N Trans/NoTrans; N = B*T)
 * over at least 0.2 s each, and prints each shape's GFLOP/s and the step's
 * aggregate: all linear-layer FLOP of one step divided by their summed
 * time. The attention GEMMs (per head, T x T x C/H) are not included.
 * The last line reads "sgemm_gflops=X core=NAME". Run with
 * OPENBLAS_NUM_THREADS=1 for the single-thread figure. PX_BENCH_CLOCK=cpu
 * times by the thread's CPU time instead of the wall clock (on a loaded,
 * shared machine the time the thread waited for a core is then left out;
 * bench_tokens.sh CLOCK=cpu). Main thread only. */
#include <cblas.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "px_blas_core.h"
#include "px_time.h"

static int use_cpu_clock; /* PX_BENCH_CLOCK=cpu */

/* now in seconds: the monotonic wall clock, or this thread's CPU time */
static double now_s(void)
{
    struct timespec ts;
    if (!use_cpu_clock)
        return px_time_mono_s();
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

/* seconds per call of C (m x n) = op(A) op(B), row-major, best of several
 * timed batches over >= 0.2 s */
static double time_gemm(int ta, int tb, int m, int n, int k, float *A, float *B, float *C)
{
    int lda = ta ? m : k, ldb = tb ? k : n, reps = 1;
    double best = 1e30, total = 0;
    for (int w = 0; w < 2; w++)
        cblas_sgemm(CblasRowMajor, ta ? CblasTrans : CblasNoTrans, tb ? CblasTrans : CblasNoTrans,
                    m, n, k, 1.0f, A, lda, B, ldb, 0.0f, C, n);
    while (total < 0.2) {
        double t0 = now_s(), dt;
        for (int r = 0; r < reps; r++)
            cblas_sgemm(CblasRowMajor, ta ? CblasTrans : CblasNoTrans,
                        tb ? CblasTrans : CblasNoTrans, m, n, k, 1.0f, A, lda, B, ldb, 0.0f, C, n);
        dt = now_s() - t0;
        total += dt;
        if (dt > 0 && dt / reps < best)
            best = dt / reps;
        if (dt < 0.02)
            reps *= 2;
    }
    return best;
}

int main(int argc, char **argv)
{
    px_blas_core_info_t blas;
    int L, C, T, B, V, N;
    double flop = 0, secs = 0;

    px_blas_core_ensure(argv, &blas);
    use_cpu_clock = getenv("PX_BENCH_CLOCK") && !strcmp(getenv("PX_BENCH_CLOCK"), "cpu");
    if (argc < 5) {
        fprintf(stderr, "usage: %s L C T B [V]\n", argv[0]);
        return 2;
    }
    L = atoi(argv[1]);
    C = atoi(argv[2]);
    T = atoi(argv[3]);
    B = atoi(argv[4]);
    V = argc > 5 ? atoi(argv[5]) : 256;
    N = B * T;
    if (L < 1 || C < 1 || T < 1 || B < 1 || V < 1) {
        fprintf(stderr, "%s: sizes must be positive\n", argv[0]);
        return 2;
    }
    const struct { const char *name; int in, out, count; } layers[] = {
        {"qkv", C, 3 * C, L}, {"proj", C, C, L}, {"fc", C, 4 * C, L}, {"fc2", 4 * C, C, L},
        {"lm_head", C, V, 1},
    };
    size_t big = (size_t)(4 * C > V ? 4 * C : V) * (size_t)(N > 4 * C ? N : 4 * C);
    float *A = malloc(big * sizeof(float)), *Bm = malloc(big * sizeof(float));
    float *Cm = malloc(big * sizeof(float));
    if (!A || !Bm || !Cm) {
        fprintf(stderr, "%s: out of memory\n", argv[0]);
        return 1;
    }
    for (size_t i = 0; i < big; i++) {
        A[i] = (float)((i * 7919) % 1000) / 1000.0f - 0.5f;
        Bm[i] = (float)((i * 104729) % 1000) / 1000.0f - 0.5f;
    }
    printf("BLAS core %s (%s)\n", blas.core, blas.source);
    printf("%-8s %-22s %10s %10s %10s\n", "layer", "N x OC x C", "fwd GF/s", "dinp GF/s",
           "dW GF/s");
    for (size_t l = 0; l < sizeof(layers) / sizeof(layers[0]); l++) {
        int in = layers[l].in, out = layers[l].out;
        double f = 2.0 * N * in * out;
        double t_f = time_gemm(0, 1, N, out, in, A, Bm, Cm);   /* out = inp W^T */
        double t_di = time_gemm(0, 0, N, in, out, A, Bm, Cm);  /* dinp = dout W */
        double t_dw = time_gemm(1, 0, out, in, N, A, Bm, Cm);  /* dW = dout^T inp */
        char shape[32];
        snprintf(shape, sizeof(shape), "%dx%dx%d", N, out, in);
        printf("%-8s %-22s %10.1f %10.1f %10.1f\n", layers[l].name, shape, f / t_f / 1e9,
               f / t_di / 1e9, f / t_dw / 1e9);
        flop += 3 * f * layers[l].count;
        secs += (t_f + t_di + t_dw) * layers[l].count;
    }
    printf("sgemm_gflops=%.1f core=%s clock=%s\n", flop / secs / 1e9, blas.core,
           use_cpu_clock ? "cpu" : "wall");
    free(A);
    free(Bm);
    free(Cm);
    return 0;
}
