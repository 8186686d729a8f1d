/* test_attention_bf16.c: attention with bf16 products on the CPU
 * (attention_bf16_* and attention_block_bf16_*, kernels/px_kernels.h;
 * px_attention_bf16_cpu.c) against an fp64 reference. Unit suite.
 *
 * Usage: test_attention_bf16 CASE   (forward, backward, block; "all")
 *
 * The reference rounds every product operand to bf16 by its own arithmetic
 * (frexp / rint to 8 significant bits, nearest even) exactly where the op
 * says the products take them, and computes everything else in double:
 *   S = scale q^ k^T^; m = floor(max_j S log2 e) ln 2 per row;
 *   out = sum_j bf16(exp(S_j - m)) v^_j / sum_j exp(S_j - m);
 *   E = exp(S - mb), mb = floor(lse log2 e) ln 2, c = exp(mb - lse) (so
 *   P = E c); dP = dout^ v^T^; delta = rowsum(dout * out);
 *   dv = (c bf16(E))^T dout^; dS = c bf16(E (dP - delta) scale);
 *   dq = dS k^; dk = dS^T q^.
 * The kernel differs from it by fp32 accumulation and rounding of the fp32
 * quantities, and where an fp32 value straddles a bf16 rounding boundary
 * that the exact value does not (rare: a 2^-16 chance per element): each
 * result must be within TOL (normwise relative, per tensor) of the
 * reference, while the fp32 op lies at least 10 x TOL from it (the bf16
 * rounding happened: its effect is ~2^-9). The block case cuts the keys as
 * ring attention does (a diagonal causal block, then the earlier keys as a
 * full block merged into it) and must give the same reference, and agree
 * with the full bf16 op: the forward to TOL_SAME, both rounding the very
 * same probabilities (the power-of-two reference), which is what lets cp
 * hold the parallel oracle in bf16; the backward to TOL_SAME_BWD, where the
 * merged lse and out differ from the full op's in the last bit and so flip
 * an occasional bf16(dS) (one flip in 10^4 elements moves dqkv by ~1e-6). */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "px_kernels.h"
#include "px_kernels_bf16.h"

#define TOL 1e-4
#define TOL_SAME 1e-6      /* block vs full op, forward: the same rounded E */
#define TOL_SAME_BWD 3e-5  /* backward: a rare flip of bf16(dS) (see above) */

static const px_kernel_ops_t *K;
#include "../px_check.h"

enum { B = 2, NH = 2, HS = 24, C = NH * HS, C3 = 3 * C };

static uint64_t rng_state = 0x2545f4914f6cdd1dull;
static float frand(float amp)
{
    rng_state ^= rng_state << 13;
    rng_state ^= rng_state >> 7;
    rng_state ^= rng_state << 17;
    return ((float)((rng_state >> 40) / (double)(1ull << 24)) * 2.0f - 1.0f) * amp;
}

/* x rounded to the nearest bf16 (8 significant bits), ties to even */
static double r16(double x)
{
    if (x == 0.0)
        return 0.0;
    int e;
    double m = frexp(x, &e);
    return ldexp(rint(m * 256.0) / 256.0, e);
}

/* ||a - b|| / ||b|| over n elements, b in double */
static double nrel(const float *a, const double *b, size_t n)
{
    double d = 0.0, s = 0.0;
    for (size_t i = 0; i < n; i++) {
        d += (a[i] - b[i]) * (a[i] - b[i]);
        s += b[i] * b[i];
    }
    return sqrt(d / (s > 0.0 ? s : 1e-300));
}

static double nrel_f(const float *a, const float *b, size_t n)
{
    double d = 0.0, s = 0.0;
    for (size_t i = 0; i < n; i++) {
        d += ((double)a[i] - b[i]) * ((double)a[i] - b[i]);
        s += (double)b[i] * b[i];
    }
    return sqrt(d / (s > 0.0 ? s : 1e-300));
}

/* The reference of one problem: qkv (B,T,3C), dout (B,T,C) in; out (B,T,C),
 * lse (B,NH,T), dqkv (B,T,3C) out, all double. */
typedef struct ref {
    double *out, *lse, *dqkv;
} ref_t;

static ref_t reference(const float *qkv, const float *dout, int T)
{
    ref_t r = {calloc((size_t)B * T * C, sizeof(double)), calloc((size_t)B * NH * T, 8),
               calloc((size_t)B * T * C3, sizeof(double))};
    const double scale = 1.0f / sqrtf((float)HS);
    double *S = malloc((size_t)T * T * 8), *P = malloc((size_t)T * T * 8);
    double *dS = malloc((size_t)T * T * 8);
    for (int b = 0; b < B; b++)
        for (int h = 0; h < NH; h++) {
            const float *q = qkv + (size_t)b * T * C3 + h * HS, *k = q + C, *v = q + 2 * C;
            const float *d = dout + (size_t)b * T * C + h * HS;
            double *o = r.out + (size_t)b * T * C + h * HS;
            double *dq = r.dqkv + (size_t)b * T * C3 + h * HS, *dk = dq + C, *dv = dq + 2 * C;
            double *lse = r.lse + ((size_t)b * NH + h) * T;
            for (int t = 0; t < T; t++) {
                double mx = -INFINITY;
                for (int j = 0; j <= t; j++) {
                    double s = 0.0;
                    for (int c = 0; c < HS; c++)
                        s += r16(q[(size_t)t * C3 + c]) * r16(k[(size_t)j * C3 + c]);
                    S[(size_t)t * T + j] = s * scale;
                    mx = fmax(mx, s * scale);
                }
                double m = floor(mx * M_LOG2E) * M_LN2, l = 0.0;
                for (int j = 0; j <= t; j++)
                    l += exp(S[(size_t)t * T + j] - m);
                lse[t] = m + log(l);
                for (int c = 0; c < HS; c++) {
                    double a = 0.0;
                    for (int j = 0; j <= t; j++)
                        a += r16(exp(S[(size_t)t * T + j] - m)) * r16(v[(size_t)j * C3 + c]);
                    o[(size_t)t * C + c] = a / l;
                }
                double delta = 0.0;
                for (int c = 0; c < HS; c++)
                    delta += (double)d[(size_t)t * C + c] * o[(size_t)t * C + c];
                /* E = exp(S - mb), the normaliser c = exp(mb - lse) outside */
                double mb = floor(lse[t] * M_LOG2E) * M_LN2, cn = exp(mb - lse[t]);
                for (int j = 0; j <= t; j++) {
                    double e = exp(S[(size_t)t * T + j] - mb), dp = 0.0;
                    for (int c = 0; c < HS; c++)
                        dp += r16(d[(size_t)t * C + c]) * r16(v[(size_t)j * C3 + c]);
                    P[(size_t)t * T + j] = r16(e) * cn;
                    dS[(size_t)t * T + j] = r16(e * (dp - delta) * scale) * cn;
                }
            }
            for (int t = 0; t < T; t++)
                for (int j = 0; j <= t; j++)
                    for (int c = 0; c < HS; c++) {
                        double pp = P[(size_t)t * T + j], ds = dS[(size_t)t * T + j];
                        dv[(size_t)j * C3 + c] += pp * r16(d[(size_t)t * C + c]);
                        dq[(size_t)t * C3 + c] += ds * r16(k[(size_t)j * C3 + c]);
                        dk[(size_t)j * C3 + c] += ds * r16(q[(size_t)t * C3 + c]);
                    }
        }
    free(S), free(P), free(dS);
    return r;
}

static float *rand_buf(size_t n, float amp)
{
    float *p = malloc(n * sizeof(float));
    for (size_t i = 0; i < n; i++)
        p[i] = frand(amp);
    return p;
}

/* the dq, dk, dv parts of dqkv (B,T,3C) that are the head's: all of them */
static void check_grads(const char *what, const float *got, const double *ref, size_t n,
                        const float *fp32)
{
    double e = nrel(got, ref, n), e32 = nrel(fp32, ref, n);
    printf("%-28s bf16 vs ref %.2e (tol %.0e)   fp32 op vs ref %.2e\n", what, e, TOL, e32);
    CHECK(e < TOL, "%s: %.3e from the fp64 reference (tol %g)", what, e, TOL);
    CHECK(e32 > 10 * TOL, "%s: the fp32 op is only %.3e from the bf16 reference", what, e32);
}

static void run_case(int T, int do_fwd, int do_bwd, int do_block)
{
    const size_t nin = (size_t)B * T * C3, nout = (size_t)B * T * C;
    /* scores of a few units, as a trained model's, so softmax rows are peaked */
    float *qkv = rand_buf(nin, 2.0f), *dout = rand_buf(nout, 1.0f);
    ref_t r = reference(qkv, dout, T);
    float *out = malloc(nout * 4), *att = malloc((size_t)B * NH * T * T * 4);
    float *out32 = malloc(nout * 4), *att32 = malloc((size_t)B * NH * T * T * 4);
    float *scratch = malloc((size_t)2 * T * T * 4);
    K->attention_bf16_forward(out, att, qkv, B, T, C, NH);
    K->attention_forward(out32, att32, qkv, B, T, C, NH);
    char what[64];
    if (do_fwd) {
        snprintf(what, sizeof(what), "forward T=%d out", T);
        check_grads(what, out, r.out, nout, out32);
        /* att holds the normalised fp32 probabilities exp(S - lse) */
        double e = 0.0;
        for (int b = 0; b < B; b++)
            for (int h = 0; h < NH; h++)
                for (int t = 0; t < T; t++) {
                    double sum = 0.0;
                    const float *a = att + (((size_t)b * NH + h) * T + t) * T;
                    for (int j = 0; j < T; j++)
                        sum += a[j];
                    e = fmax(e, fabs(sum - 1.0));
                    CHECK(t + 1 >= T || a[t + 1] == 0.0f, "att beyond the diagonal is not 0");
                }
        CHECK(e < 1e-5, "att rows sum to 1 within %.2e", e);
    }
    float *dqkv = calloc(nin, 4), *dqkv32 = calloc(nin, 4);
    K->attention_bf16_backward(dqkv, scratch, dout, qkv, att, B, T, C, NH);
    K->attention_backward(dqkv32, scratch, dout, qkv, att32, B, T, C, NH);
    if (do_bwd) {
        snprintf(what, sizeof(what), "backward T=%d dqkv", T);
        check_grads(what, dqkv, r.dqkv, nin, dqkv32);
        /* accumulates: a second call adds the same again */
        float *twice = malloc(nin * 4);
        memcpy(twice, dqkv, nin * 4);
        K->attention_bf16_backward(twice, scratch, dout, qkv, att, B, T, C, NH);
        for (size_t i = 0; i < nin; i++)
            twice[i] *= 0.5f;
        CHECK(nrel_f(twice, dqkv, nin) < 1e-6, "backward does not accumulate into dinp");
        free(twice);
    }
    if (do_block) {
        /* rows [c, T) against keys [0, c) (full) merged into rows [c, T)
         * against keys [c, T) (causal diagonal block); rows [0, c) against
         * keys [0, c) causal: the cutting of ring attention's step 0 */
        const int c = T / 2;
        float *bout = calloc(nout, 4), *lse = malloc((size_t)B * NH * T * 4);
        float *delta = malloc((size_t)B * NH * T * 4), *bd = calloc(nin, 4);
        float *bs = malloc((size_t)2 * T * T * 4);
        for (size_t i = 0; i < (size_t)B * NH * T; i++)
            lse[i] = -INFINITY;
        px_attn_block_t g = {.B = B, .NH = NH, .hs = HS, .q_bs = (size_t)T * C3, .q_ld = C3,
                             .kv_bs = (size_t)T * C3, .kv_ld = C3, .v_off = C,
                             .o_bs = (size_t)T * C, .o_ld = C, .lse_bs = (size_t)NH * T,
                             .lse_hs = (size_t)T};
        /* each sub-block: q rows q0.., keys k0.. */
        struct { int q0, nq, k0, nk, causal, init; } sb[3] = {
            {0, c, 0, c, 1, 1}, {c, T - c, c, T - c, 1, 1}, {c, T - c, 0, c, 0, 0}};
        for (int pass = 0; pass < 2; pass++)
            for (int i = 0; i < 3; i++) {
                px_attn_block_t gi = g;
                gi.Tq = sb[i].nq;
                gi.Tk = sb[i].nk;
                gi.causal = sb[i].causal;
                gi.init = sb[i].init;
                size_t qo = (size_t)sb[i].q0 * C3, ko = (size_t)sb[i].k0 * C3 + C;
                size_t oo = (size_t)sb[i].q0 * C, lo = (size_t)sb[i].q0;
                if (pass == 0)
                    K->attention_block_bf16_forward(bout + oo, lse + lo, qkv + qo, qkv + ko,
                                                    &gi, bs);
                else
                    K->attention_block_bf16_backward(bd + qo, bd + ko, dout + oo, qkv + qo,
                                                     qkv + ko, lse + lo, delta + lo, &gi, bs);
                if (pass == 0 && i == 2) {
                    px_attn_block_t all = g;
                    all.Tq = T;
                    K->attention_block_delta(delta, bout, dout, &all);
                }
            }
        snprintf(what, sizeof(what), "block T=%d out", T);
        check_grads(what, bout, r.out, nout, out32);
        snprintf(what, sizeof(what), "block T=%d dqkv", T);
        check_grads(what, bd, r.dqkv, nin, dqkv32);
        double lerr = 0.0;
        for (size_t i = 0; i < (size_t)B * NH * T; i++)
            lerr = fmax(lerr, fabs(lse[i] - r.lse[i]));
        CHECK(lerr < 1e-5, "block lse %.2e from the reference", lerr);
        double so = nrel_f(bout, out, nout), sd = nrel_f(bd, dqkv, nin);
        printf("%-28s out %.2e (tol %.0e)  dqkv %.2e (tol %.0e)\n", "block vs full bf16 op", so,
               TOL_SAME, sd, TOL_SAME_BWD);
        CHECK(so < TOL_SAME && sd < TOL_SAME_BWD, "block vs full bf16: out %.2e dqkv %.2e", so,
               sd);
        free(bout), free(lse), free(delta), free(bd), free(bs);
    }
    free(qkv), free(dout), free(r.out), free(r.lse), free(r.dqkv), free(out), free(att);
    free(out32), free(att32), free(scratch), free(dqkv), free(dqkv32);
}

static void test_view(void)
{
    const px_kernel_ops_t *v = px_kernels_with_precision(K, 1);
    CHECK(v && v->attention_forward == K->attention_bf16_forward &&
           v->attention_backward == K->attention_bf16_backward &&
           v->attention_block_forward == K->attention_block_bf16_forward &&
           v->attention_block_backward == K->attention_block_bf16_backward &&
           v->attention_block_delta == K->attention_block_delta,
           "bf16 view: the attention slots are the bf16 ops (delta stays fp32)");
    px_kernel_ops_t none = *K;
    none.attention_block_bf16_backward = NULL;
    CHECK(!px_kernels_with_precision(&none, 1), "a table without bf16 attention has no view");
    /* the optional backward given out: NULL on the CPU table and its view;
     * a table offering it (the CUDA one) has it in the view's fp32 slot */
    CHECK(!K->attention_backward_out && !K->attention_bf16_backward_out && v &&
               !v->attention_backward_out,
           "the CPU table offers no attention backward with out");
    static px_kernel_ops_t with_out;
    with_out = *K;
    with_out.attention_bf16_backward_out = (void (*)(float *, float *, const float *,
                                                     const float *, const float *,
                                                     const float *, int, int, int, int))1;
    const px_kernel_ops_t *wv = px_kernels_with_precision(&with_out, 1);
    CHECK(wv && wv->attention_backward_out == with_out.attention_bf16_backward_out,
           "bf16 view: attention_backward_out is the bf16 op with out");
    CHECK(!with_out.attention_backward_out, "the fp32 table itself keeps none");
}

int main(int argc, char **argv)
{
    const char *c = argc > 1 ? argv[1] : "all";
    int all = !strcmp(c, "all"), f = all || !strcmp(c, "forward");
    int b = all || !strcmp(c, "backward"), k = all || !strcmp(c, "block");
    K = px_kernels_cpu();
    if (!f && !b && !k) {
        fprintf(stderr, "unknown case '%s' (forward, backward, block, all)\n", c);
        return 2;
    }
    /* T = 40: one row block; T = 150: three of the op's 64-row blocks */
    run_case(40, f, b, k);
    run_case(150, f, b, k);
    if (all || b)
        test_view();
    printf("%s\n", fails ? "FAIL" : "PASS");
    return fails ? 1 : 0;
}
