/* test_bf16_acts.c: the ops of bf16 activation storage
 * (kernels/px_kernels.h: matmul_bf16in_forward / _backward, bf16_from_f32,
 * bf16_to_f32) and the view modes of px_kernels_with_precision. Unit suite.
 *
 * Usage: test_bf16_acts CASE   (convert, forward, backward, view, sim; "all")
 *
 * The claim under test is exact: a GEMM reading the bf16 tensor the fp32
 * one was rounded into gives the SAME BITS as the fp32-input bf16 GEMM
 * (matmul_bf16_*) on the fp32 tensor, because both round with one function
 * and rounding a bf16 value again changes nothing. So every comparison
 * here is memcmp, never a tolerance. "sim" runs the same on the simulated
 * device's table (its wrappers of the new ops; needs PX_SIM_DEVICE=1). */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "px_kernels.h"
#include "px_kernels_bf16.h"
#include "px_kernels_sim.h"
#include "px_reduce.h"

static const px_kernel_ops_t *K;
#include "../px_check.h"

static uint64_t rng_state = 0x2545f4914f6cdd1dull;
/* uniform [-1, 1) times 2^(random in [-6, 6)): low bits set everywhere,
 * so rounding to bf16 changes almost every element */
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

/* ops' memory on the table's backend: host for cpu, the arena for sim */
static void *dev_from(const px_kernel_ops_t *k, const void *host, size_t bytes)
{
    void *d = k->mem_alloc(bytes);
    k->mem_copy_from_host(d, host, bytes);
    return d;
}
static void to_host(const px_kernel_ops_t *k, void *host, const void *d, size_t bytes)
{
    k->mem_copy_to_host(host, d, bytes);
    k->synchronize();
}

static void test_convert(const px_kernel_ops_t *k)
{
    const size_t n = 1000;
    float *x = rand_buf(n);
    x[0] = 0x1.01p0f;   /* a tie between 1 and 1 + 2^-7: to even, 1 */
    x[1] = 0x1.03p0f;   /* a tie between 1 + 2^-7 and 1 + 2^-6: to even, up */
    x[2] = -0.0f;
    x[3] = INFINITY;
    x[4] = NAN;
    uint16_t *ref = malloc(n * 2), *got = malloc(n * 2);
    float *wide = malloc(n * 4), *wref = malloc(n * 4);
    px_f32_to_bf16(ref, x, n);
    float *dx = dev_from(k, x, n * 4);
    uint16_t *dh = k->mem_alloc(n * 2);
    float *dw = k->mem_alloc(n * 4);
    k->bf16_from_f32(dh, dx, n);
    k->bf16_to_f32(dw, dh, n);
    to_host(k, got, dh, n * 2);
    to_host(k, wide, dw, n * 4);
    CHECK(!memcmp(got, ref, n * 2), "%s: bf16_from_f32 differs from px_f32_to_bf16", k->name);
    CHECK(got[0] == 0x3f80 && got[1] == 0x3f82 && got[2] == 0x8000 && got[3] == 0x7f80 &&
           (got[4] & 0x7f80) == 0x7f80 && (got[4] & 0x7f),
           "%s: ties to even, -0, inf, NaN (got %04x %04x %04x %04x %04x)", k->name, got[0],
           got[1], got[2], got[3], got[4]);
    px_f32_round_bf16(wref, x, n);
    CHECK(!memcmp(wide + 5, wref + 5, (n - 5) * 4) && isnan(wide[4]),
           "%s: bf16_to_f32(bf16_from_f32(x)) is not x rounded to bf16", k->name);
    k->mem_free(dx), k->mem_free(dh), k->mem_free(dw);
    free(x), free(ref), free(got), free(wide), free(wref);
}

/* the sizes: odd, prime-ish, so no kernel path is special */
enum { N = 37, C = 29, OC = 23 };

static void test_forward(const px_kernel_ops_t *k)
{
    float *inp = rand_buf(N * C), *w = rand_buf(OC * C), *b = rand_buf(OC);
    uint16_t *h = malloc(N * C * 2);
    px_f32_to_bf16(h, inp, N * C);
    float *ref = malloc(N * OC * 4), *got = malloc(N * OC * 4);
    float *di = dev_from(k, inp, N * C * 4), *dw = dev_from(k, w, OC * C * 4);
    float *db = dev_from(k, b, OC * 4), *dout = k->mem_alloc(N * OC * 4);
    uint16_t *dh = dev_from(k, h, N * C * 2);
    for (int bias = 0; bias < 2; bias++) {
        k->matmul_bf16_forward(dout, di, dw, bias ? db : NULL, N, C, OC);
        to_host(k, ref, dout, N * OC * 4);
        k->matmul_bf16in_forward(dout, dh, dw, bias ? db : NULL, N, C, OC);
        to_host(k, got, dout, N * OC * 4);
        CHECK(!memcmp(ref, got, N * OC * 4), "%s: forward (bias %d) not bit for bit", k->name,
               bias);
    }
    /* and it is not the fp32 GEMM: the rounding happened */
    k->matmul_forward(dout, di, dw, NULL, N, C, OC);
    to_host(k, got, dout, N * OC * 4);
    k->matmul_bf16in_forward(dout, dh, dw, NULL, N, C, OC);
    to_host(k, ref, dout, N * OC * 4);
    CHECK(memcmp(ref, got, N * OC * 4), "%s: the bf16 GEMM equals the fp32 one", k->name);
    k->mem_free(di), k->mem_free(dw), k->mem_free(db), k->mem_free(dout), k->mem_free(dh);
    free(inp), free(w), free(b), free(h), free(ref), free(got);
}

static void test_backward(const px_kernel_ops_t *k)
{
    float *inp = rand_buf(N * C), *w = rand_buf(OC * C), *d = rand_buf(N * OC);
    float *g0 = rand_buf(N * C + OC * C + OC); /* nonzero: the ops accumulate */
    uint16_t *h = malloc(N * C * 2);
    px_f32_to_bf16(h, inp, N * C);
    const size_t ng = N * C + OC * C + OC;
    float *ref = malloc(ng * 4), *got = malloc(ng * 4);
    float *di = dev_from(k, inp, N * C * 4), *dw = dev_from(k, w, OC * C * 4);
    float *dd = dev_from(k, d, N * OC * 4);
    uint16_t *dh = dev_from(k, h, N * C * 2);
    float *g = k->mem_alloc(ng * 4);
    /* all three outputs; then each alone (NULL rules: dinp alone needs no inp) */
    for (int m = 0; m < 4; m++) {
        float *gi = m == 0 || m == 1 ? g : NULL, *gw = m == 0 || m == 2 ? g + N * C : NULL;
        float *gb = m == 0 || m == 3 ? g + N * C + OC * C : NULL;
        k->mem_copy_from_host(g, g0, ng * 4);
        k->matmul_bf16_backward(gi, gw, gb, dd, di, dw, N, C, OC);
        to_host(k, ref, g, ng * 4);
        k->mem_copy_from_host(g, g0, ng * 4);
        k->matmul_bf16in_backward(gi, gw, gb, dd, m == 1 ? NULL : dh, dw, N, C, OC);
        to_host(k, got, g, ng * 4);
        CHECK(!memcmp(ref, got, ng * 4), "%s: backward (outputs %d) not bit for bit", k->name,
               m);
    }
    k->mem_free(di), k->mem_free(dw), k->mem_free(dd), k->mem_free(dh), k->mem_free(g);
    free(inp), free(w), free(d), free(g0), free(h), free(ref), free(got);
}

static void test_view(void)
{
    const px_kernel_ops_t *a = px_kernels_with_precision(K, PX_KERNELS_BF16);
    const px_kernel_ops_t *f = px_kernels_with_precision(K, PX_KERNELS_BF16_F32ACTS);
    CHECK(px_kernels_with_precision(K, PX_KERNELS_FP32) == K && !K->bf16_acts,
           "fp32: the table itself, fp32 storage");
    CHECK(a && f && a != f && a->bf16_acts == 1 && f->bf16_acts == 0,
           "bf16: two views, bf16 storage and fp32 storage");
    CHECK(a && f && a->matmul_forward == f->matmul_forward &&
           a->matmul_backward == f->matmul_backward &&
           a->attention_forward == f->attention_forward &&
           a->matmul_forward == K->matmul_bf16_forward,
           "both views compute alike (the same bf16 ops)");
    CHECK(px_kernels_with_precision(K, PX_KERNELS_BF16) == a &&
           px_kernels_with_precision(K, PX_KERNELS_BF16_F32ACTS) == f, "one view per mode");
    px_kernel_ops_t none = *K;
    none.matmul_bf16in_forward = NULL;
    CHECK(!px_kernels_with_precision(&none, PX_KERNELS_BF16) &&
           px_kernels_with_precision(&none, PX_KERNELS_BF16_F32ACTS),
           "bf16 storage needs the bf16-input GEMM; fp32 storage does not");
}

int main(int argc, char **argv)
{
    const char *c = argc > 1 ? argv[1] : "all";
    int all = !strcmp(c, "all"), ran = 0;
    K = px_kernels_cpu();
    if (all || !strcmp(c, "convert"))
        test_convert(K), ran++;
    if (all || !strcmp(c, "forward"))
        test_forward(K), ran++;
    if (all || !strcmp(c, "backward"))
        test_backward(K), ran++;
    if (all || !strcmp(c, "view"))
        test_view(), ran++;
    if (all || !strcmp(c, "sim")) {
        const px_kernel_ops_t *s;
        if (!px_kernels_sim_enabled() || px_kernels_sim_open(&s) != PX_OK) {
            fprintf(stderr, "FAIL: the sim device needs PX_SIM_DEVICE=1\n");
            return 1;
        }
        test_convert(s), test_forward(s), test_backward(s), ran++;
    }
    if (!ran) {
        fprintf(stderr, "unknown case '%s'\n", c);
        return 2;
    }
    if (fails)
        return 1;
    printf("ok %s\n", c);
    return 0;
}
