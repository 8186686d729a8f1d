/* test_kernels.c: unit tests of the CPU op table (kernels/px_kernels.h).
 *
 * Usage: test_kernels CASE   (one meson test per case; "all" runs every case)
 *
 * Each backward op is checked against central finite differences of the
 * scalar L = sum(out * W) with a fixed random W (so dout = W): the forward
 * runs in fp32, L is summed in double, h = 1e-2 (fp32 rounding error of L
 * is ~1e-6 relative, truncation error O(h^2) ~ 1e-4), and we require
 * ||analytic - numeric|| / ||numeric|| < 2e-3 over every element checked
 * and every single element within 5e-3 * max|numeric| + 1e-4 (the second bound
 * catches a wrong gradient hidden in a large norm). The tolerance itself is
 * checked by case fd_sensitivity: it must reject a gradient 1% off, or one
 * element off by 2% of the largest. Forward ops are checked
 * against naive double-precision loops (matmul, softmax/cross-entropy), the
 * attention mask by perturbing future tokens, AdamW by a hand-computed step. */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "px_blas_core.h"
#include "px_kernels.h"
#include "px_vec_cpu.h"

static const px_kernel_ops_t *K;
#include "../px_check.h"

static uint64_t rng_state = 0x1234567887654321ull;
static float frand(void) /* uniform [-1, 1) */
{
    rng_state ^= rng_state << 13;
    rng_state ^= rng_state >> 7;
    rng_state ^= rng_state << 17;
    return (float)((rng_state >> 40) / (double)(1ull << 24)) * 2.0f - 1.0f;
}
static float *rand_buf(size_t n, float s)
{
    float *p = malloc(n * sizeof(float));
    for (size_t i = 0; i < n; i++)
        p[i] = frand() * s;
    return p;
}
static float *zeros(size_t n)
{
    return calloc(n, sizeof(float));
}
static double dot_out(const float *out, const float *w, size_t n)
{
    double s = 0.0;
    for (size_t i = 0; i < n; i++)
        s += (double)out[i] * w[i];
    return s;
}

/* Finite differences of loss(ctx) w.r.t. x at up to `maxcheck` elements
 * spread over the buffer, compared with the analytic gradient g: writes the
 * relative error of the checked vector, the largest element error and the
 * largest |numeric| element. Returns the number of elements checked. */
typedef double (*loss_fn)(void *ctx);
static size_t fd_compare(float *x, const float *g, size_t n, loss_fn loss, void *ctx,
                         size_t maxcheck, double *rel_p, double *maxerr_p, double *maxnum_p)
{
    const float h = 1e-2f;
    size_t stride = n > maxcheck ? n / maxcheck : 1, cnt = 0;
    double num2 = 0.0, diff2 = 0.0, maxnum = 0.0, maxerr = 0.0;
    for (size_t i = 0; i < n; i += stride, cnt++) {
        float x0 = x[i];
        x[i] = x0 + h;
        double lp = loss(ctx);
        x[i] = x0 - h;
        double lm = loss(ctx);
        x[i] = x0;
        double num = (lp - lm) / (2.0 * h), e = fabs(num - g[i]);
        num2 += num * num;
        diff2 += e * e;
        maxnum = fabs(num) > maxnum ? fabs(num) : maxnum;
        maxerr = e > maxerr ? e : maxerr;
    }
    loss(ctx); /* leave the forward state of the unperturbed input */
    *rel_p = sqrt(diff2) / (sqrt(num2) + 1e-30);
    *maxerr_p = maxerr;
    *maxnum_p = maxnum;
    return cnt;
}

#define FD_TOL_REL 2e-3
#define FD_TOL_ELEM 5e-3
static int fd_ok(double rel, double maxerr, double maxnum)
{
    return maxnum > 0.0 && rel < FD_TOL_REL && maxerr < FD_TOL_ELEM * maxnum + 1e-4;
}

static void fd_check(const char *what, float *x, const float *g, size_t n, loss_fn loss,
                     void *ctx, size_t maxcheck)
{
    double rel, maxerr, maxnum;
    size_t cnt = fd_compare(x, g, n, loss, ctx, maxcheck, &rel, &maxerr, &maxnum);
    printf("  %-28s n=%-7zu checked=%-5zu rel=%.2e maxerr=%.2e (max|g|=%.2e)\n", what, n, cnt,
           rel, maxerr, maxnum);
    CHECK(maxnum > 0.0, "%s: numeric gradient is all zero", what);
    CHECK(fd_ok(rel, maxerr, maxnum), "%s: rel %.3e (tol %.0e), max element error %.3e", what,
           rel, FD_TOL_REL, maxerr);
}

/* ---- encoder ---- */
struct enc_ctx { float *out, *wte, *wpe, *w; int32_t *inp; int B, T, C; };
static double enc_loss(void *p)
{
    struct enc_ctx *c = p;
    K->encoder_forward(c->out, c->inp, c->wte, c->wpe, c->B, c->T, c->C);
    return dot_out(c->out, c->w, (size_t)c->B * c->T * c->C);
}
static void test_encoder(void)
{
    struct enc_ctx c = {.B = 2, .T = 5, .C = 8};
    int V = 7;
    size_t n = (size_t)c.B * c.T * c.C;
    c.out = zeros(n); c.wte = rand_buf((size_t)V * c.C, 1); c.wpe = rand_buf((size_t)c.T * c.C, 1);
    c.w = rand_buf(n, 1);
    c.inp = malloc(sizeof(int32_t) * c.B * c.T);
    for (int i = 0; i < c.B * c.T; i++)
        c.inp[i] = (i * 3) % V; /* token 0 repeats: accumulation is tested */
    enc_loss(&c);
    CHECK(fabsf(c.out[1 * c.C + 2] - (c.wte[3 * c.C + 2] + c.wpe[1 * c.C + 2])) < 1e-6f,
           "encoder forward value");
    float *dwte = zeros((size_t)V * c.C), *dwpe = zeros((size_t)c.T * c.C);
    K->encoder_backward(dwte, dwpe, c.w, c.inp, c.B, c.T, c.C);
    fd_check("encoder dwte", c.wte, dwte, (size_t)V * c.C, enc_loss, &c, 1000);
    fd_check("encoder dwpe", c.wpe, dwpe, (size_t)c.T * c.C, enc_loss, &c, 1000);
    free(c.out); free(c.wte); free(c.wpe); free(c.w); free(c.inp); free(dwte); free(dwpe);
}

/* ---- layernorm ---- */
struct ln_ctx { float *out, *mean, *rstd, *inp, *wt, *bs, *w; int N, C; };
static double ln_loss(void *p)
{
    struct ln_ctx *c = p;
    K->layernorm_forward(c->out, c->mean, c->rstd, c->inp, c->wt, c->bs, c->N, c->C);
    return dot_out(c->out, c->w, (size_t)c->N * c->C);
}
static void test_layernorm(void)
{
    struct ln_ctx c = {.N = 6, .C = 16};
    size_t n = (size_t)c.N * c.C;
    c.out = zeros(n); c.mean = zeros(c.N); c.rstd = zeros(c.N);
    c.inp = rand_buf(n, 2); c.wt = rand_buf(c.C, 1); c.bs = rand_buf(c.C, 1); c.w = rand_buf(n, 1);
    ln_loss(&c);
    /* forward: with weight 1, bias 0 a row has mean 0 and variance ~1 */
    double m = 0, v = 0;
    for (int i = 0; i < c.C; i++) {
        double y = (c.out[i] - c.bs[i]) / c.wt[i];
        m += y; v += y * y;
    }
    CHECK(fabs(m / c.C) < 1e-5 && fabs(v / c.C - 1.0) < 1e-3, "layernorm normalises (m=%g v=%g)",
           m / c.C, v / c.C);
    float *dinp = zeros(n), *dw = zeros(c.C), *db = zeros(c.C);
    K->layernorm_backward(dinp, dw, db, c.w, c.inp, c.wt, c.mean, c.rstd, c.N, c.C);
    fd_check("layernorm dinp", c.inp, dinp, n, ln_loss, &c, 1000);
    fd_check("layernorm dweight", c.wt, dw, c.C, ln_loss, &c, 1000);
    fd_check("layernorm dbias", c.bs, db, c.C, ln_loss, &c, 1000);
    free(c.out); free(c.mean); free(c.rstd); free(c.inp); free(c.wt); free(c.bs); free(c.w);
    free(dinp); free(dw); free(db);
}

/* ---- matmul ---- */
struct mm_ctx { float *out, *inp, *wt, *bs, *w; int N, C, OC; };
static double mm_loss(void *p)
{
    struct mm_ctx *c = p;
    K->matmul_forward(c->out, c->inp, c->wt, c->bs, c->N, c->C, c->OC);
    return dot_out(c->out, c->w, (size_t)c->N * c->OC);
}
static void test_matmul(void)
{
    struct mm_ctx c = {.N = 7, .C = 13, .OC = 9};
    c.out = zeros((size_t)c.N * c.OC); c.inp = rand_buf((size_t)c.N * c.C, 1);
    c.wt = rand_buf((size_t)c.OC * c.C, 1); c.bs = rand_buf(c.OC, 1);
    c.w = rand_buf((size_t)c.N * c.OC, 1);
    mm_loss(&c);
    double maxe = 0;
    for (int n = 0; n < c.N; n++)
        for (int o = 0; o < c.OC; o++) {
            double s = c.bs[o];
            for (int i = 0; i < c.C; i++)
                s += (double)c.inp[n * c.C + i] * c.wt[o * c.C + i];
            double e = fabs(s - c.out[n * c.OC + o]);
            maxe = e > maxe ? e : maxe;
        }
    printf("  matmul forward vs naive loop: max err %.2e\n", maxe);
    CHECK(maxe < 1e-5, "matmul forward differs from naive loop by %g", maxe);
    /* without bias */
    K->matmul_forward(c.out, c.inp, c.wt, NULL, c.N, c.C, c.OC);
    double s0 = 0;
    for (int i = 0; i < c.C; i++)
        s0 += (double)c.inp[i] * c.wt[i];
    CHECK(fabs(s0 - c.out[0]) < 1e-5, "matmul forward without bias");
    float *dinp = zeros((size_t)c.N * c.C), *dw = zeros((size_t)c.OC * c.C), *db = zeros(c.OC);
    K->matmul_backward(dinp, dw, db, c.w, c.inp, c.wt, c.N, c.C, c.OC);
    fd_check("matmul dinp", c.inp, dinp, (size_t)c.N * c.C, mm_loss, &c, 1000);
    fd_check("matmul dweight", c.wt, dw, (size_t)c.OC * c.C, mm_loss, &c, 1000);
    fd_check("matmul dbias", c.bs, db, c.OC, mm_loss, &c, 1000);
    /* split calls (tensor parallelism's overlap): dinp alone, then dweight
     * and dbias over two row blocks of (dout, inp), give the same sums */
    float *dinp2 = zeros((size_t)c.N * c.C), *dw2 = zeros((size_t)c.OC * c.C), *db2 = zeros(c.OC);
    K->matmul_backward(dinp2, NULL, NULL, c.w, c.inp, c.wt, c.N, c.C, c.OC);
    K->matmul_backward(NULL, dw2, db2, c.w, c.inp, c.wt, 3, c.C, c.OC);
    K->matmul_backward(NULL, dw2, db2, c.w + 3 * c.OC, c.inp + 3 * c.C, c.wt, c.N - 3, c.C, c.OC);
    double e_in = 0, e_w = 0, e_b = 0;
    for (int i = 0; i < c.N * c.C; i++)
        e_in = fmax(e_in, fabs(dinp2[i] - dinp[i]));
    for (int i = 0; i < c.OC * c.C; i++)
        e_w = fmax(e_w, fabs(dw2[i] - dw[i]));
    for (int i = 0; i < c.OC; i++)
        e_b = fmax(e_b, fabs(db2[i] - db[i]));
    printf("  matmul backward split (dinp alone; dweight, dbias in 2 row blocks): max err %.2e "
           "%.2e %.2e\n", e_in, e_w, e_b);
    CHECK(e_in == 0 && e_w < 1e-5 && e_b < 1e-5,
           "split matmul backward differs: dinp %g dweight %g dbias %g", e_in, e_w, e_b);
    free(dinp2); free(dw2); free(db2);
    free(c.out); free(c.inp); free(c.wt); free(c.bs); free(c.w); free(dinp); free(dw); free(db);
}

/* ---- attention ---- */
struct att_ctx { float *out, *att, *inp, *w; int B, T, C, NH; };
static double att_loss(void *p)
{
    struct att_ctx *c = p;
    K->attention_forward(c->out, c->att, c->inp, c->B, c->T, c->C, c->NH);
    return dot_out(c->out, c->w, (size_t)c->B * c->T * c->C);
}
static void attention_case(int B, int T, int C, int NH)
{
    struct att_ctx c = {.B = B, .T = T, .C = C, .NH = NH};
    size_t nin = (size_t)B * T * 3 * C, nout = (size_t)B * T * C, natt = (size_t)B * NH * T * T;
    c.out = zeros(nout); c.att = zeros(natt); c.inp = rand_buf(nin, 1); c.w = rand_buf(nout, 1);
    att_loss(&c);
    /* probabilities: rows sum to 1, zero above the diagonal */
    double maxrow = 0, maxupper = 0;
    for (size_t bh = 0; bh < (size_t)B * NH; bh++)
        for (int t = 0; t < T; t++) {
            const float *row = c.att + (bh * T + t) * T;
            double s = 0;
            for (int j = 0; j < T; j++) {
                s += row[j];
                if (j > t && fabs(row[j]) > maxupper)
                    maxupper = fabs(row[j]);
            }
            if (fabs(s - 1) > maxrow)
                maxrow = fabs(s - 1);
        }
    CHECK(maxrow < 1e-5, "attention rows sum to 1 (err %g)", maxrow);
    CHECK(maxupper == 0.0, "attention upper triangle is exactly zero (max %g)", maxupper);
    /* naive reference of the output (double) */
    int hs = C / NH;
    double maxe = 0;
    for (int b = 0; b < B; b++)
        for (int h = 0; h < NH; h++)
            for (int t = 0; t < T; t++) {
                double sc[512], mx = -1e300, sum = 0;
                const float *q = c.inp + ((size_t)b * T + t) * 3 * C + h * hs;
                for (int j = 0; j <= t; j++) {
                    const float *k = c.inp + ((size_t)b * T + j) * 3 * C + C + h * hs;
                    double d = 0;
                    for (int i = 0; i < hs; i++)
                        d += (double)q[i] * k[i];
                    sc[j] = d / sqrt((double)hs);
                    mx = sc[j] > mx ? sc[j] : mx;
                }
                for (int j = 0; j <= t; j++) {
                    sc[j] = exp(sc[j] - mx);
                    sum += sc[j];
                }
                for (int i = 0; i < hs; i++) {
                    double o = 0;
                    for (int j = 0; j <= t; j++)
                        o += sc[j] / sum * c.inp[((size_t)b * T + j) * 3 * C + 2 * C + h * hs + i];
                    double e = fabs(o - c.out[((size_t)b * T + t) * C + h * hs + i]);
                    maxe = e > maxe ? e : maxe;
                }
            }
    printf("  attention B=%d T=%d C=%d NH=%d forward vs naive: max err %.2e\n", B, T, C, NH, maxe);
    CHECK(maxe < 1e-5, "attention forward vs naive: %g", maxe);
    /* causal: changing token t0's q/k/v leaves outputs at t < t0 unchanged */
    int t0 = T / 2;
    float *out0 = malloc(nout * sizeof(float));
    memcpy(out0, c.out, nout * sizeof(float));
    float *saved = malloc(nin * sizeof(float));
    memcpy(saved, c.inp, nin * sizeof(float));
    for (int b = 0; b < B; b++)
        for (int t = t0; t < T; t++)
            for (int i = 0; i < 3 * C; i++)
                c.inp[((size_t)b * T + t) * 3 * C + i] += 0.5f;
    att_loss(&c);
    int leaked = 0, changed = 0;
    for (int b = 0; b < B; b++)
        for (int t = 0; t < T; t++)
            for (int i = 0; i < C; i++) {
                size_t idx = ((size_t)b * T + t) * C + i;
                if (t < t0 && c.out[idx] != out0[idx])
                    leaked++;
                if (t >= t0 && c.out[idx] != out0[idx])
                    changed++;
            }
    CHECK(leaked == 0, "causal mask: %d outputs before t0 changed when the future changed", leaked);
    CHECK(changed > 0, "outputs at t >= t0 must change");
    memcpy(c.inp, saved, nin * sizeof(float));
    att_loss(&c);
    float *dinp = zeros(nin), *scratch = rand_buf((size_t)T * T, 100); /* garbage must not matter */
    K->attention_backward(dinp, scratch, c.w, c.inp, c.att, B, T, C, NH);
    char what[64];
    snprintf(what, sizeof(what), "attention dinp T=%d", T);
    fd_check(what, c.inp, dinp, nin, att_loss, &c, 1500);
    free(c.out); free(c.att); free(c.inp); free(c.w); free(out0); free(saved); free(dinp);
    free(scratch);
}
/* The softmax's fast exp (px_vec_cpu.h): within 4 ulp (5e-7 relative) of
 * exp over [-87, 0] (and 0 <= result < 1e-37 below -87: clamped), and the
 * 8-lane and the scalar form give the same bits, so a row's tail (scalar)
 * matches what its vector part would have computed. */
static void exp_fast_check(void)
{
    double maxrel = 0;
    int lanes_differ = 0;
    for (int i = 0; i <= 870000; i += 8) {
        float x[8], y[8];
        for (int l = 0; l < 8; l++)
            x[l] = i + l <= 870000 ? -(float)(i + l) * 1e-4f : -87.0f;
        px__v8f_store(y, px__v8f_exp(px__v8f_load(x)));
        for (int l = 0; l < 8; l++) {
            double r = fabs(y[l] - exp((double)x[l])) / exp((double)x[l]);
            maxrel = r > maxrel ? r : maxrel;
            float s = px__exp1(x[l]);
            lanes_differ += memcmp(&s, &y[l], sizeof(s)) != 0;
        }
    }
    float lo = px__exp1(-200.0f);
    printf("  fast exp on [-87, 0]: max rel err %.2e; exp(-200) -> %g\n", maxrel, lo);
    CHECK(maxrel < 5e-7, "fast exp max relative error %g", maxrel);
    CHECK(lanes_differ == 0, "fast exp: %d vector lanes differ from the scalar form", lanes_differ);
    CHECK(lo >= 0.0f && lo < 1e-37f, "fast exp(-200) = %g", lo);
}

static void test_attention(void)
{
    exp_fast_check();
    attention_case(2, 5, 8, 2);
    attention_case(1, 70, 8, 2); /* crosses the 64-row block boundary */
    attention_case(1, 37, 64, 2); /* rows of 8-lane chunks and tails, hs 32 */
    /* hs 64, the models' head size, with T = 101: one whole 64-row block
     * and a partial one, and rows not a multiple of 6, 8 or 16 (the tile
     * sizes an optimised kernel would pick) */
    attention_case(2, 101, 128, 2);
}

/* ---- blockwise attention (ring attention's kernels) ----
 * The causal attention of B x T tokens computed block by block: query row
 * blocks of `blk` rows against key blocks merged from the diagonal one
 * (causal, init) down to the first (the reverse of the natural order, so
 * the online-softmax merge rescales earlier results), on the fused qkv
 * layout; out and the
 * gradients must equal attention_forward / attention_backward's. */
static void attention_block_case(int B, int T, int C, int NH, int blk)
{
    size_t nin = (size_t)B * T * 3 * C, nout = (size_t)B * T * C;
    int hs = C / NH, nb = T / blk;
    float *inp = rand_buf(nin, 1), *w = rand_buf(nout, 1);
    float *out = zeros(nout), *att = zeros((size_t)B * NH * T * T);
    float *bout = zeros(nout), *lse = zeros((size_t)B * NH * T), *delta = zeros((size_t)B * NH * T);
    float *dref = zeros(nin), *dblk = zeros(nin), *scratch = zeros((size_t)2 * T * T);
    K->attention_forward(out, att, inp, B, T, C, NH);
    K->attention_backward(dref, scratch, w, inp, att, B, T, C, NH);
    px_attn_block_t g = {.B = B, .NH = NH, .hs = hs, .Tq = blk, .Tk = blk,
                         .q_bs = (size_t)T * 3 * C, .q_ld = 3 * (size_t)C,
                         .kv_bs = (size_t)T * 3 * C, .kv_ld = 3 * (size_t)C, .v_off = (size_t)C,
                         .o_bs = (size_t)T * C, .o_ld = (size_t)C,
                         .lse_bs = (size_t)NH * T, .lse_hs = (size_t)T};
    for (int pass = 0; pass < 2; pass++) {
        if (pass == 1) {
            g.Tq = T;
            K->attention_block_delta(delta, bout, w, &g);
            g.Tq = blk;
        }
        for (int qb = 0; qb < nb; qb++)
            for (int kb = qb; kb >= 0; kb--) {
                g.causal = kb == qb;
                g.init = kb == qb; /* the first block merged into these rows */
                size_t qo = (size_t)qb * blk * 3 * C, ko = (size_t)kb * blk * 3 * C + C;
                if (pass == 0)
                    K->attention_block_forward(bout + (size_t)qb * blk * C, lse + qb * blk,
                                               inp + qo, inp + ko, &g, scratch);
                else
                    K->attention_block_backward(dblk + qo, dblk + ko, w + (size_t)qb * blk * C,
                                                inp + qo, inp + ko, lse + qb * blk,
                                                delta + qb * blk, &g, scratch);
            }
    }
    double eo = 0, no = 0, ed = 0, nd = 0;
    for (size_t i = 0; i < nout; i++) {
        eo += ((double)bout[i] - out[i]) * ((double)bout[i] - out[i]);
        no += (double)out[i] * out[i];
    }
    for (size_t i = 0; i < nin; i++) {
        ed += ((double)dblk[i] - dref[i]) * ((double)dblk[i] - dref[i]);
        nd += (double)dref[i] * dref[i];
    }
    eo = sqrt(eo / no);
    ed = sqrt(ed / nd);
    printf("  blockwise B=%d T=%d C=%d NH=%d blocks of %d vs attention: out rel %.2e, "
           "dqkv rel %.2e\n", B, T, C, NH, blk, eo, ed);
    CHECK(eo < 1e-6, "blockwise attention output rel err %g", eo);
    CHECK(ed < 1e-5, "blockwise attention gradient rel err %g", ed);
    free(inp); free(w); free(out); free(att); free(bout); free(lse); free(delta); free(dref);
    free(dblk); free(scratch);
}
static void test_attention_block(void)
{
    attention_block_case(2, 12, 8, 2, 4);
    attention_block_case(1, 96, 16, 4, 32);
}

/* ---- gelu / residual ---- */
struct gelu_ctx { float *out, *inp, *w; size_t n; };
static double gelu_loss(void *p)
{
    struct gelu_ctx *c = p;
    K->gelu_forward(c->out, c->inp, c->n);
    return dot_out(c->out, c->w, c->n);
}
static void test_gelu(void)
{
    struct gelu_ctx c = {.n = 64};
    c.out = zeros(c.n); c.inp = rand_buf(c.n, 3); c.w = rand_buf(c.n, 1);
    c.inp[0] = 1.0f;
    gelu_loss(&c);
    /* 0.5*(1+tanh(sqrt(2/pi)*(1+0.044715))) = 0.841191990607477 */
    CHECK(fabsf(c.out[0] - 0.8411919906f) < 1e-6f, "gelu(1) = %.9f", c.out[0]);
    /* the polynomial tanh: GELU over [-12, 12] vs libm in double */
    {
        enum { M = 24001 };
        float *x = zeros(M), *y = zeros(M);
        double maxe = 0;
        for (int i = 0; i < M; i++)
            x[i] = -12.0f + 24.0f * i / (M - 1);
        K->gelu_forward(y, x, M);
        for (int i = 0; i < M; i++) {
            double xd = x[i];
            double ref = 0.5 * xd * (1 + tanh(0.7978845608028654 * (xd + 0.044715 * xd * xd * xd)));
            double e = fabs(y[i] - ref) / (1.0 + fabs(xd));
            maxe = e > maxe ? e : maxe;
        }
        printf("  gelu forward vs double tanh on [-12,12]: max err/(1+|x|) %.2e\n", maxe);
        CHECK(maxe < 5e-7, "gelu forward accuracy %g", maxe);
        free(x);
        free(y);
    }
    float *dinp = zeros(c.n);
    K->gelu_backward(dinp, c.inp, c.w, c.n);
    fd_check("gelu dinp", c.inp, dinp, c.n, gelu_loss, &c, 1000);
    free(c.out); free(c.inp); free(c.w); free(dinp);
}
static void test_residual(void)
{
    size_t n = 10;
    float *a = rand_buf(n, 1), *b = rand_buf(n, 1), *o = zeros(n), *d = rand_buf(n, 1);
    float *da = zeros(n), *db = zeros(n);
    K->residual_forward(o, a, b, n);
    K->residual_backward(da, db, d, n);
    K->residual_backward(da, db, d, n); /* accumulates */
    for (size_t i = 0; i < n; i++) {
        CHECK(o[i] == a[i] + b[i], "residual forward %zu", i);
        CHECK(da[i] == 2 * d[i] && db[i] == 2 * d[i], "residual backward accumulates %zu", i);
    }
    free(a); free(b); free(o); free(d); free(da); free(db);
}

/* ---- softmax + cross-entropy ---- */
struct ce_ctx { float *losses, *probs, *logits; int32_t *tg; int N, V, Vp; };
static double ce_loss(void *p)
{
    struct ce_ctx *c = p;
    K->crossentropy_forward(c->losses, c->probs, c->logits, c->tg, c->N, c->V, c->Vp);
    double s = 0;
    for (int i = 0; i < c->N; i++)
        s += c->losses[i];
    return s / c->N;
}
static void test_crossentropy(void)
{
    struct ce_ctx c = {.N = 6, .V = 11, .Vp = 11};
    size_t n = (size_t)c.N * c.V;
    c.losses = zeros(c.N); c.probs = zeros(n); c.logits = rand_buf(n, 4);
    c.tg = malloc(sizeof(int32_t) * c.N);
    for (int i = 0; i < c.N; i++)
        c.tg[i] = (i * 5) % c.V;
    ce_loss(&c);
    double maxe = 0;
    for (int i = 0; i < c.N; i++) {
        double s = 0;
        for (int v = 0; v < c.V; v++)
            s += exp(c.logits[i * c.V + v]);
        double ref = -(c.logits[i * c.V + c.tg[i]] - log(s));
        maxe = fmax(maxe, fabs(ref - c.losses[i]));
    }
    CHECK(maxe < 1e-5, "cross-entropy forward vs naive: %g", maxe);
    /* uniform logits: loss = log V */
    float *u = zeros(n);
    K->crossentropy_forward(c.losses, c.probs, u, c.tg, c.N, c.V, c.Vp);
    CHECK(fabsf(c.losses[0] - logf((float)c.V)) < 1e-6f, "uniform logits give log V");
    float *dl = zeros(n);
    ce_loss(&c);
    K->crossentropy_backward(dl, c.probs, c.tg, 1.0f / c.N, c.N, c.V, c.Vp);
    fd_check("crossentropy dlogits", c.logits, dl, n, ce_loss, &c, 1000);

    /* padded vocab: the same rows in (N, Vp = 16) with large junk in the
     * padding columns give the same losses, probs 0 and gradient 0 there */
    struct ce_ctx q = {.N = c.N, .V = c.V, .Vp = 16};
    size_t np = (size_t)q.N * q.Vp;
    q.losses = zeros(q.N); q.probs = rand_buf(np, 1); q.logits = rand_buf(np, 1);
    q.tg = c.tg;
    for (int i = 0; i < q.N; i++) {
        memcpy(q.logits + (size_t)i * q.Vp, c.logits + (size_t)i * c.V, c.V * sizeof(float));
        for (int v = q.V; v < q.Vp; v++)
            q.logits[(size_t)i * q.Vp + v] = 30.0f + v; /* would dominate an unmasked softmax */
    }
    ce_loss(&c);
    ce_loss(&q);
    double pad_p = 0, real_e = 0;
    for (int i = 0; i < q.N; i++) {
        real_e = fmax(real_e, fabs(q.losses[i] - c.losses[i]));
        for (int v = 0; v < q.Vp; v++) {
            float pv = q.probs[(size_t)i * q.Vp + v];
            if (v >= q.V)
                pad_p = fmax(pad_p, fabs(pv));
            else
                real_e = fmax(real_e, fabs(pv - c.probs[(size_t)i * c.V + v]));
        }
    }
    CHECK(real_e == 0.0, "padded rows: losses and real probs equal the unpadded ones: %g",
           real_e);
    CHECK(pad_p == 0.0, "padded probs are exactly 0: %g", pad_p);
    float *dq = zeros(np);
    K->crossentropy_backward(dq, q.probs, q.tg, 1.0f / q.N, q.N, q.V, q.Vp);
    double pad_g = 0, real_g = 0;
    for (int i = 0; i < q.N; i++)
        for (int v = 0; v < q.Vp; v++) {
            float g = dq[(size_t)i * q.Vp + v];
            if (v >= q.V)
                pad_g = fmax(pad_g, fabs(g));
            else
                real_g = fmax(real_g, fabs(g - dl[(size_t)i * c.V + v]));
        }
    CHECK(pad_g == 0.0 && real_g == 0.0, "padded dlogits 0 (%g), real ones as unpadded (%g)",
           pad_g, real_g);
    free(q.losses); free(q.probs); free(q.logits); free(dq);
    free(c.losses); free(c.probs); free(c.logits); free(c.tg); free(u); free(dl);
}

/* ---- AdamW: one step by hand ---- */
static void test_adamw(void)
{
    /* lr 0.1, b1 0.9, b2 0.999, eps 1e-8, wd 0.01, t = 1, m = v = 0:
     * m = 0.1 g, v = 0.001 g^2; mhat = g, vhat = g^2;
     * p' = p (1 - 0.001) - 0.1 * g / (|g| + 1e-8).
     * p = 1.0, g = 0.5  -> 0.999 - 0.1*0.5/0.50000001 = 0.89900000199999...
     * p = -2.0, g = -3  -> -1.998 + 0.1*3/3.00000001   = -1.898000000333...
     * Second step (t = 2) from the first result with g = 0.5 again:
     * m = 0.09 + 0.05 = 0.095 -> mhat = 0.095/0.19 = 0.5
     * v = 0.999*0.00025 + 0.001*0.25 = 0.00049975 -> vhat = 0.00049975/0.001999 = 0.25
     * p'' = 0.899000002*0.999 - 0.1*0.5/(0.5 + 1e-8) = 0.798101002 - 0.0999999980 */
    float p[2] = {1.0f, -2.0f}, g[2] = {0.5f, -3.0f}, m[2] = {0, 0}, v[2] = {0, 0};
    K->adamw_update(p, g, m, v, 2, 0.1f, 0.9f, 0.999f, 1e-8f, 0.01f, 1, 1.0f);
    printf("  adamw step 1: %.9f %.9f\n", p[0], p[1]);
    CHECK(fabs(p[0] - 0.899000002) < 2e-7, "adamw p0 = %.9f", p[0]);
    CHECK(fabs(p[1] - -1.898000000) < 2e-7, "adamw p1 = %.9f", p[1]);
    CHECK(fabsf(m[0] - 0.05f) < 1e-6f * 0.05f && fabsf(v[0] - 0.00025f) < 1e-4f * 0.00025f, "adamw moments");
    K->adamw_update(p, g, m, v, 1, 0.1f, 0.9f, 0.999f, 1e-8f, 0.01f, 2, 1.0f);
    printf("  adamw step 2: %.9f\n", p[0]);
    CHECK(fabs(p[0] - (0.899000002 * 0.999 - 0.1 * 0.5 / (0.5 + 1e-8))) < 5e-7,
           "adamw step 2 p0 = %.9f", p[0]);
    /* zero weight decay, zero gradient: parameter unchanged */
    float q = 3.0f, gz = 0.0f, mq = 0, vq = 0;
    K->adamw_update(&q, &gz, &mq, &vq, 1, 0.1f, 0.9f, 0.999f, 1e-8f, 0.0f, 1, 1.0f);
    CHECK(q == 3.0f, "zero grad, zero decay leaves the parameter");
}

/* The clip coefficient folded into AdamW (grad_scale) gives the bits of
 * the two passes it replaces: scale(grads, s) then the update with 1; the
 * gradient buffer is left as it was. Lengths around the 8-lane vector body
 * (tails of 0..7), three steps, s < 1 and s = 1. */
static void test_adamw_grad_scale(void)
{
    const size_t lens[] = {1, 7, 8, 13, 64, 1003};
    const float scales[] = {0.3712f, 1.0f, 1e-3f};
    for (size_t li = 0; li < sizeof(lens) / sizeof(lens[0]); li++)
        for (size_t si = 0; si < sizeof(scales) / sizeof(scales[0]); si++) {
            size_t n = lens[li];
            float s = scales[si];
            float *g = rand_buf(n, 3), *g0 = malloc(n * sizeof(float));
            float *gs = malloc(n * sizeof(float));
            float *pa = rand_buf(n, 1), *pb = malloc(n * sizeof(float));
            float *ma = zeros(n), *mb = zeros(n), *va = zeros(n), *vb = zeros(n);
            memcpy(g0, g, n * sizeof(float));
            memcpy(pb, pa, n * sizeof(float));
            for (int t = 1; t <= 3; t++) {
                K->adamw_update(pa, g, ma, va, n, 1e-2f, 0.9f, 0.95f, 1e-8f, 0.1f, t, s);
                memcpy(gs, g, n * sizeof(float));
                K->scale(gs, s, n);
                K->adamw_update(pb, gs, mb, vb, n, 1e-2f, 0.9f, 0.95f, 1e-8f, 0.1f, t, 1.0f);
            }
            CHECK(memcmp(pa, pb, n * sizeof(float)) == 0 &&
                       memcmp(ma, mb, n * sizeof(float)) == 0 &&
                       memcmp(va, vb, n * sizeof(float)) == 0,
                   "adamw grad_scale %g, n %zu: not the bits of scale() then the update", s, n);
            CHECK(memcmp(g, g0, n * sizeof(float)) == 0,
                   "adamw grad_scale %g, n %zu: the gradient buffer was changed", s, n);
            free(g), free(g0), free(gs), free(pa), free(pb), free(ma), free(mb), free(va), free(vb);
        }
}

/* The tolerance is double-checked: the same comparison must REJECT a
 * gradient that is 1% off overall, and one with a single element off by 2%
 * of the largest gradient (so the passing figures above mean something). */
static void test_fd_sensitivity(void)
{
    struct mm_ctx c = {.N = 7, .C = 13, .OC = 9};
    double rel, maxerr, maxnum;
    size_t nw = (size_t)c.OC * c.C;
    c.out = zeros((size_t)c.N * c.OC); c.inp = rand_buf((size_t)c.N * c.C, 1);
    c.wt = rand_buf(nw, 1); c.bs = rand_buf(c.OC, 1); c.w = rand_buf((size_t)c.N * c.OC, 1);
    float *dw = zeros(nw), *bad = malloc(nw * sizeof(float));
    K->matmul_backward(NULL, dw, NULL, c.w, c.inp, c.wt, c.N, c.C, c.OC);
    fd_compare(c.wt, dw, nw, mm_loss, &c, 1000, &rel, &maxerr, &maxnum);
    CHECK(fd_ok(rel, maxerr, maxnum), "exact gradient accepted (rel %.2e)", rel);
    for (size_t i = 0; i < nw; i++)
        bad[i] = dw[i] * 1.01f;
    fd_compare(c.wt, bad, nw, mm_loss, &c, 1000, &rel, &maxerr, &maxnum);
    printf("  gradient x1.01: rel=%.2e -> %s\n", rel, fd_ok(rel, maxerr, maxnum) ? "accepted" :
           "rejected");
    CHECK(!fd_ok(rel, maxerr, maxnum), "a 1%% gradient error must be rejected");
    memcpy(bad, dw, nw * sizeof(float));
    bad[nw / 2] += 0.02f * (float)maxnum;
    fd_compare(c.wt, bad, nw, mm_loss, &c, 1000, &rel, &maxerr, &maxnum);
    printf("  one element +2%% of max: rel=%.2e maxerr=%.2e -> %s\n", rel, maxerr,
           fd_ok(rel, maxerr, maxnum) ? "accepted" : "rejected");
    CHECK(!fd_ok(rel, maxerr, maxnum), "a single wrong element must be rejected");
    free(c.out); free(c.inp); free(c.wt); free(c.bs); free(c.w); free(dw); free(bad);
}

static void test_norm(void)
{
    float x[3] = {3, 4, 12};
    CHECK(K->sumsq(x, 3) == 169.0, "sumsq");
    K->scale(x, 0.5f, 3);
    CHECK(x[0] == 1.5f && x[2] == 6.0f, "scale");
}

/* The memory ops: alloc gives zeroed, 64-byte aligned, distinct blocks;
 * set / copy / host copies move exactly the bytes asked for. */
static void test_memory(void)
{
    enum { N = 1000 };
    unsigned char *a = K->mem_alloc(N), *b = K->mem_alloc(N), host[N];
    CHECK(a && b && a != b, "two blocks");
    if (!a || !b)
        return;
    CHECK(((uintptr_t)a & 63) == 0 && ((uintptr_t)b & 63) == 0, "64-byte aligned");
    int nonzero = 0;
    K->mem_copy_to_host(host, a, N);
    K->synchronize();
    for (int i = 0; i < N; i++)
        nonzero += host[i] != 0;
    CHECK(nonzero == 0, "mem_alloc zero-fills (%d non-zero bytes)", nonzero);
    K->mem_set(a, 0x5a, N - 1);
    for (int i = 0; i < N; i++)
        host[i] = (unsigned char)i;
    K->mem_copy_from_host(b, host, N);
    K->mem_copy(b + 10, a + 10, 100);
    K->mem_copy_to_host(host, b, N);
    K->synchronize();
    CHECK(host[9] == 9 && host[10] == 0x5a && host[109] == 0x5a && host[110] == 110,
           "copy moves exactly bytes [10, 110)");
    K->mem_copy_to_host(host, a, N);
    K->synchronize();
    CHECK(host[N - 2] == 0x5a && host[N - 1] == 0, "set writes exactly N-1 bytes");
    K->mem_free(a);
    K->mem_free(b);
    K->mem_free(NULL);
}

int main(int argc, char **argv)
{
    static const struct { const char *name; void (*fn)(void); } cases[] = {
        {"encoder", test_encoder}, {"layernorm", test_layernorm}, {"matmul", test_matmul},
        {"attention", test_attention}, {"attention_block", test_attention_block},
        {"gelu", test_gelu}, {"residual", test_residual},
        {"crossentropy", test_crossentropy}, {"adamw", test_adamw},
        {"adamw_grad_scale", test_adamw_grad_scale}, {"norm", test_norm},
        {"fd_sensitivity", test_fd_sensitivity}, {"memory", test_memory},
    };
    const char *which = argc > 1 ? argv[1] : "all";
    int ran = 0;
    px_blas_core_info_t blas;
    /* the kernels run on the core the ranks choose (issue 15) */
    px_blas_core_ensure(argv, &blas);
    px_blas_core_log(&blas);
    K = px_kernels_cpu();
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        if (strcmp(which, "all") && strcmp(which, cases[i].name))
            continue;
        printf("%s:\n", cases[i].name);
        cases[i].fn();
        ran++;
    }
    if (!ran) {
        fprintf(stderr, "unknown case %s\n", which);
        return 2;
    }
    printf(fails ? "FAILED (%d)\n" : "OK\n", fails);
    return fails ? 1 : 0;
}
