/* test_matmul_bf16.c: the CPU bf16 GEMM (matmul_bf16_forward / _backward,
 * kernels/px_kernels.h) and the mixed-precision view of a table
 * (px_kernels_bf16.h). Unit suite.
 *
 * Usage: test_matmul_bf16 CASE   (round, forward, backward, view; "all")
 *
 * The reference rounds every GEMM input to bf16 independently of the
 * kernel's code (frexp / rint to 8 significant bits, nearest even) and
 * multiplies in double. A bf16 x bf16 product is exact in fp32, so the
 * kernel may differ from it only by fp32 accumulation: each element must be
 * within K * 2^-24 * sum|a_k b_k| (K = the length of the sum + 2, the
 * classic bound for recursive summation, Higham "Accuracy and Stability of
 * Numerical Algorithms" 3.1, plus the bias add). The case also checks the
 * kernel is NOT the plain fp32 GEMM (the rounding happened): the fp32 GEMM
 * of the unrounded inputs lies outside that bound somewhere. */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "px_kernels.h"
#include "px_kernels_bf16.h"
#include "px_reduce.h"

static const px_kernel_ops_t *K;
#include "../px_check.h"

static uint64_t rng_state = 0x9e3779b97f4a7c15ull;
/* uniform [-1, 1) times 2^(random in [-6, 6)): several binades, so the
 * rounding moves bits at every scale */
static float frand(void)
{
    rng_state ^= rng_state << 13;
    rng_state ^= rng_state >> 7;
    rng_state ^= rng_state << 17;
    float u = (float)((rng_state >> 40) / (double)(1ull << 24)) * 2.0f - 1.0f;
    return ldexpf(u, (int)((rng_state >> 8) % 12) - 6);
}
static float *rand_buf(size_t n)
{
    float *p = malloc(n * sizeof(float));
    for (size_t i = 0; i < n; i++)
        p[i] = frand();
    return p;
}
static float *copy_buf(const float *x, size_t n)
{
    float *p = malloc(n * sizeof(float));
    memcpy(p, x, n * sizeof(float));
    return p;
}

/* x rounded to the nearest bf16 (8 significant bits), ties to even, by
 * arithmetic (rint rounds half to even in the default rounding mode);
 * normal numbers only, which is all the test uses */
static double ref_round(float x)
{
    if (x == 0.0f)
        return 0.0;
    int e;
    double m = frexp((double)x, &e); /* x = m 2^e, 0.5 <= |m| < 1 */
    return ldexp(rint(m * 256.0) / 256.0, e);
}

/* the bound: each element of the kernel's result within tol[i] of ref[i] */
typedef struct { double *ref, *tol; } refres_t;

/* out[r][c] = sum_k A(r,k) B(k,c) over rounded inputs, in double, with the
 * accumulation bound; A(r,k) = a[r*sar + k*sak], B(k,c) = b[k*sbk + c*sbc] */
static void ref_gemm(refres_t *o, const float *a, size_t sar, size_t sak, const float *b,
                     size_t sbk, size_t sbc, int R, int Cc, int Kk, int round)
{
    for (int r = 0; r < R; r++)
        for (int c = 0; c < Cc; c++) {
            double s = 0.0, sa = 0.0;
            for (int k = 0; k < Kk; k++) {
                double x = a[r * sar + k * sak], y = b[k * sbk + c * sbc];
                if (round) {
                    x = ref_round((float)x);
                    y = ref_round((float)y);
                }
                s += x * y;
                sa += fabs(x * y);
            }
            o->ref[(size_t)r * Cc + c] = s;
            o->tol[(size_t)r * Cc + c] = (Kk + 2) * ldexp(1.0, -24) * sa;
        }
}

/* how many elements of got (minus `base`, the accumulated-into start) lie
 * outside ref +- (tol + fp32 rounding of base + ref) */
static size_t outside(const float *got, const float *base, const refres_t *o, size_t n,
                      double *worst_p)
{
    size_t bad = 0;
    double worst = 0.0;
    for (size_t i = 0; i < n; i++) {
        double want = o->ref[i] + (base ? base[i] : 0.0);
        double tol = o->tol[i] + ldexp(fabs(want) + (base ? fabs(base[i]) : 0.0), -23);
        double d = fabs(got[i] - want);
        if (d > tol)
            bad++;
        if (tol > 0 && d / tol > worst)
            worst = d / tol;
    }
    if (worst_p)
        *worst_p = worst;
    return bad;
}

static void test_round(void)
{
    /* ties to even, above a tie, and the independent reference on many values */
    float in[6] = {1.0f + 0x1p-8f, 1.0f + 3 * 0x1p-8f, 1.0f + 0x1p-8f + 0x1p-20f, -3.0f,
                   INFINITY, NAN};
    float out[6];
    px_f32_round_bf16(out, in, 6);
    CHECK(out[0] == 1.0f, "tie 1 + 2^-8 -> 1 (even): %.9g", out[0]);
    CHECK(out[1] == 1.0f + 0x1p-6f, "tie 1 + 3 2^-8 -> 1 + 2^-6 (even): %.9g", out[1]);
    CHECK(out[2] == 1.0f + 0x1p-7f, "above the tie rounds up: %.9g", out[2]);
    CHECK(out[3] == -3.0f && isinf(out[4]) && isnan(out[5]), "exact, inf, NaN");
    float *x = rand_buf(4096), *y = malloc(4096 * sizeof(float));
    px_f32_round_bf16(y, x, 4096);
    size_t bad = 0;
    for (int i = 0; i < 4096; i++)
        bad += (double)y[i] != ref_round(x[i]);
    CHECK(!bad, "%zu of 4096 values rounded unlike the reference", bad);
    px_f32_round_bf16(x, x, 4096); /* in place */
    CHECK(!memcmp(x, y, 4096 * sizeof(float)), "in-place rounding differs");
    free(x);
    free(y);
}

static void test_forward(void)
{
    const int N = 37, C = 203, OC = 29; /* C: a long sum; odd sizes */
    float *inp = rand_buf((size_t)N * C), *w = rand_buf((size_t)OC * C), *b = rand_buf(OC);
    float *inp0 = copy_buf(inp, (size_t)N * C), *w0 = copy_buf(w, (size_t)OC * C);
    float *out = malloc((size_t)N * OC * sizeof(float)), *o32 = malloc((size_t)N * OC * 4);
    refres_t r = {malloc((size_t)N * OC * 8), malloc((size_t)N * OC * 8)};
    for (int pass = 0; pass < 2; pass++) { /* with bias, then without */
        const float *bias = pass ? NULL : b;
        K->matmul_bf16_forward(out, inp, w, bias, N, C, OC);
        ref_gemm(&r, inp, C, 1, w, 1, C, N, OC, C, 1);
        float *bb = malloc((size_t)N * OC * sizeof(float));
        for (int n = 0; n < N; n++)
            for (int o = 0; o < OC; o++)
                bb[(size_t)n * OC + o] = bias ? bias[o] : 0.0f;
        double worst;
        size_t bad = outside(out, bb, &r, (size_t)N * OC, &worst);
        CHECK(!bad, "forward (bias %d): %zu elements outside the fp32 accumulation bound "
               "(worst %.2f x bound)", !pass, bad, worst);
        printf("forward bias %d: worst |err| = %.3f x the fp32 accumulation bound\n", !pass,
               worst);
        /* the plain fp32 GEMM of the same (unrounded) inputs is not it */
        K->matmul_forward(o32, inp, w, bias, N, C, OC);
        size_t off = outside(o32, bb, &r, (size_t)N * OC, NULL);
        CHECK(off > 0, "the fp32 GEMM is within the bf16 bound everywhere: no rounding seen");
        free(bb);
    }
    CHECK(!memcmp(inp, inp0, (size_t)N * C * 4) && !memcmp(w, w0, (size_t)OC * C * 4),
           "forward modified its inputs");
    free(inp), free(w), free(b), free(inp0), free(w0), free(out), free(o32);
    free(r.ref), free(r.tol);
}

static void test_backward(void)
{
    const int N = 41, C = 23, OC = 157;
    const size_t nc = (size_t)N * C, oc = (size_t)OC * C, no = (size_t)N * OC;
    float *inp = rand_buf(nc), *w = rand_buf(oc), *dout = rand_buf(no);
    float *dinp0 = rand_buf(nc), *dw0 = rand_buf(oc), *db0 = rand_buf(OC);
    float *dinp = copy_buf(dinp0, nc), *dw = copy_buf(dw0, oc), *db = copy_buf(db0, OC);
    refres_t ri = {malloc(nc * 8), malloc(nc * 8)}, rw = {malloc(oc * 8), malloc(oc * 8)};
    K->matmul_bf16_backward(dinp, dw, db, dout, inp, w, N, C, OC);
    /* dinp (N,C) += dout (N,OC) @ w (OC,C) */
    ref_gemm(&ri, dout, OC, 1, w, C, 1, N, C, OC, 1);
    /* dweight (OC,C) += dout^T (OC,N) @ inp (N,C) */
    ref_gemm(&rw, dout, 1, OC, inp, C, 1, OC, C, N, 1);
    double wi, ww;
    size_t bi = outside(dinp, dinp0, &ri, nc, &wi), bw = outside(dw, dw0, &rw, oc, &ww);
    CHECK(!bi && !bw, "backward: dinp %zu, dweight %zu elements outside the bound", bi, bw);
    printf("backward: worst |err| dinp %.3f, dweight %.3f x the accumulation bound\n", wi, ww);
    /* dbias: fp32 column sums of the UNROUNDED dout */
    size_t bb = 0;
    for (int o = 0; o < OC; o++) {
        double s = db0[o], sa = fabs(db0[o]);
        for (int n = 0; n < N; n++) {
            s += dout[(size_t)n * OC + o];
            sa += fabs(dout[(size_t)n * OC + o]);
        }
        bb += fabs(db[o] - s) > (N + 2) * ldexp(sa, -24);
    }
    CHECK(!bb, "dbias: %zu columns are not the fp32 sums of the unrounded dout", bb);
    /* NULL outputs are skipped; each alone gives the same as together */
    float *d1 = copy_buf(dinp0, nc), *w1 = copy_buf(dw0, oc), *b1 = copy_buf(db0, OC);
    K->matmul_bf16_backward(d1, NULL, NULL, dout, NULL, w, N, C, OC);
    K->matmul_bf16_backward(NULL, w1, NULL, dout, inp, NULL, N, C, OC);
    K->matmul_bf16_backward(NULL, NULL, b1, dout, NULL, NULL, N, C, OC);
    CHECK(!memcmp(d1, dinp, nc * 4) && !memcmp(w1, dw, oc * 4) && !memcmp(b1, db, OC * 4),
           "the outputs computed one at a time differ from all at once");
    free(inp), free(w), free(dout), free(dinp0), free(dw0), free(db0), free(dinp), free(dw);
    free(db), free(d1), free(w1), free(b1), free(ri.ref), free(ri.tol), free(rw.ref);
    free(rw.tol);
}

static void test_view(void)
{
    const px_kernel_ops_t *v = px_kernels_with_precision(K, 1);
    CHECK(px_kernels_with_precision(K, 0) == K, "fp32: the table itself");
    CHECK(v && v != K && v->matmul_forward == K->matmul_bf16_forward &&
           v->matmul_backward == K->matmul_bf16_backward, "bf16 view: matmul_* are the bf16 ops");
    CHECK(v && v->layernorm_forward == K->layernorm_forward &&
           v->attention_block_delta == K->attention_block_delta &&
           v->adamw_update == K->adamw_update &&
           v->mem_alloc == K->mem_alloc && !strcmp(v->name, K->name),
           "bf16 view: every other entry is the base's (attention: test_attention_bf16.c)");
    CHECK(px_kernels_with_precision(K, 1) == v, "one view per base table");
    px_kernel_ops_t none = *K;
    none.matmul_bf16_forward = NULL;
    CHECK(!px_kernels_with_precision(&none, 1), "a table without a bf16 GEMM has no bf16 view");
}

int main(int argc, char **argv)
{
    const char *c = argc > 1 ? argv[1] : "all";
    int all = !strcmp(c, "all"), ran = 0;
    K = px_kernels_cpu();
    if (all || !strcmp(c, "round"))
        test_round(), ran++;
    if (all || !strcmp(c, "forward"))
        test_forward(), ran++;
    if (all || !strcmp(c, "backward"))
        test_backward(), ran++;
    if (all || !strcmp(c, "view"))
        test_view(), ran++;
    if (!ran) {
        fprintf(stderr, "unknown case '%s' (round, forward, backward, view, all)\n", c);
        return 2;
    }
    printf("%s\n", fails ? "FAIL" : "PASS");
    return fails ? 1 : 0;
}
