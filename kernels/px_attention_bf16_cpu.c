/* px_attention_bf16_cpu.c: attention with bf16 products on the CPU (the op
 * table's attention_bf16_* and attention_block_bf16_*, px_kernels.h).
 *
 * As flash attention runs in bf16 (and PyTorch's scaled_dot_product_attention
 * under bf16 autocast): every operand of attention's batched products is
 * rounded to bf16 (nearest even, px_f32_round_bf16) where the product takes
 * it, and the products accumulate in fp32 or better; the softmax, its
 * normaliser, the log-sum-exp, delta and every stored tensor stay fp32.
 *   forward   S = scale * (q^ k^T^)            q^ = bf16(q), ...
 *             E = 2^(z - m), z = S log2(e), m = floor(max_j z) of the row
 *             out = (bf16(E) v^) / rowsum(E)    (the normaliser from fp32 E)
 *   backward  P = E c with E = 2^(z - mb), c = 2^mb / exp(lse) (fp32),
 *             dP = dout^ v^T^, delta = rowsum(dout * out) (fp32),
 *             dv += bf16(E)^T (c dout^),
 *             dS = P (dP - delta) scale = c bf16(E (dP - delta) scale),
 *             dq += dS k^,  dk += dS^T q^.
 * The probabilities the forward rounds are unnormalised, as flash attention
 * rounds them (it cannot know the normaliser before the last key block);
 * their reference m is snapped to a power of two, and E is computed as
 * exp2f(frac z) * 2^(floor z - m) - exact scaling by a power of two, under
 * which bf16 rounding commutes - so bf16(E) * 2^m does not depend on m.
 * The backward likewise rounds E and E (dP - delta) scale, with the row's
 * normaliser c outside the rounding (a per-row fp32 factor, as flash
 * attention applies 1/l), so lse's last bit does not decide a rounding.
 * That is what makes the result independent of how the keys are cut into
 * blocks: one rank's full attention and ring attention's blocks (cp, merged
 * in any order) round the very same values, and the parallel oracle holds
 * (tests/engine/test_bf16.py cp2). delta is rowsum(dout * out), as flash
 * attention and the ring's attention_block_delta compute it; the full
 * backward recomputes its forward's output rows to get it (the op is given
 * no out; a second q k^T and P v per backward). The block forward merges a
 * row as out alpha + (bf16(E) v^) c in double and rounds once, so that the
 * ring's merged out - and the delta taken from it - stays within a last
 * bit of one rank's (two fp32 roundings per merge there drifted cp2's grad
 * norm to 6e-5; one keeps it at 1e-6).
 *
 * Products: the rounded operands are widened to double and multiplied by
 * dgemm (as px_matmul_bf16_cpu.c, and for the same reason: a bf16 x bf16
 * product is exact, the double sum is exact to ~2^-53, so each result is
 * rounded once to fp32 whatever order BLAS adds in or how the rows are
 * blocked). Scratch: one grow-only buffer of doubles per thread
 * (_Thread_local), as the bf16 GEMM's; aborts (logged) when out of memory,
 * the op table having no error path. The `scratch` argument of the ops is
 * unused. Stateless otherwise; reentrant across threads. */
#include "px_kernels_cpu.h"
#include "px_attn_block_at.h"

#include <cblas.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "px_log.h"
#include "px_reduce.h"

#ifndef ATT_BLOCK
#define ATT_BLOCK 64 /* query rows per step of the full attention */
#endif

static _Thread_local double *scr;
static _Thread_local size_t scr_n; /* doubles */

/* `n` doubles of this thread's scratch (contents undefined) */
static double *scratch_get(size_t n)
{
    if (n <= scr_n)
        return scr;
    double *p = realloc(scr, n * sizeof(double));
    if (!p) {
        px_error("attention_bf16: out of memory for %zu scratch doubles", n);
        abort();
    }
    scr = p;
    scr_n = n;
    return p;
}

/* dst (rows, cols) contiguous = bf16(src), src rows `ld` floats apart,
 * widened exactly to double */
static void widen_rows(double *dst, const float *src, size_t ld, int rows, int cols)
{
    float buf[256];
    for (int r = 0; r < rows; r++)
        for (int c0 = 0; c0 < cols; c0 += 256) {
            int m = cols - c0 < 256 ? cols - c0 : 256;
            px_f32_round_bf16(buf, src + (size_t)r * ld + c0, (size_t)m);
            for (int j = 0; j < m; j++)
                dst[(size_t)r * cols + c0 + j] = buf[j];
        }
}

static inline double bf16d(float x)
{
    float r;
    px_f32_round_bf16(&r, &x, 1);
    return r;
}

/* 2^(z - m) for z = s log2(e), as exp2f(z - floor z) * 2^(floor z - m):
 * the fraction is exact and the power-of-two scaling is exact (normal
 * range), so bf16 of the result times 2^m is the same for every m. */
static inline float exp2_rel(float z, int m)
{
    float n = floorf(z);
    return ldexpf(exp2f(z - n), (int)n - m);
}

/* The unnormalised probabilities of one row: s[0, n) scores in, e (n
 * floats) = 2^(z - m) out, pr (n doubles) = bf16(e); returns the row's sum of
 * e (double, j ascending) and its reference m in *m_p. */
static double row_probs(float *e, double *pr, const float *s, int n, int *m_p)
{
    const float log2e = (float)M_LOG2E;
    float zmax = s[0] * log2e;
    for (int j = 1; j < n; j++) {
        float z = s[j] * log2e;
        zmax = z > zmax ? z : zmax;
    }
    int m = (int)floorf(zmax);
    double l = 0.0;
    for (int j = 0; j < n; j++) {
        e[j] = exp2_rel(s[j] * log2e, m);
        l += e[j];
        pr[j] = bf16d(e[j]);
    }
    *m_p = m;
    return l;
}

/* s (rows, cols) floats = scale * (a (rows, hs) b (cols, hs)^T), both
 * rounded operands in double; acc (rows*cols doubles) is work space */
static void scores(float *s, double *acc, const double *a, const double *b, int rows, int cols,
                   int hs, float scale)
{
    cblas_dgemm(CblasRowMajor, CblasNoTrans, CblasTrans, rows, cols, hs, 1.0, a, hs, b, hs, 0.0,
                acc, cols);
    for (size_t i = 0; i < (size_t)rows * cols; i++)
        s[i] = (float)(acc[i] * (double)scale);
}

/* ---- full causal attention (the single-rank and tp path) ---- */

/* Scratch layout of one (b, h) of the full attention, in doubles. */
typedef struct full_scr {
    double *q, *k, *v, *d;  /* (T, hs) rounded q, k, v, dout */
    double *acc;            /* (ATT_BLOCK, T) */
    double *pr;             /* (ATT_BLOCK, T) rounded probabilities / dS */
    double *o;              /* (ATT_BLOCK, hs) P v */
    float *s, *e;           /* (ATT_BLOCK, T) scores, E; floats in the doubles */
    double *l, *lse;        /* (ATT_BLOCK) each: rows' sum of E, lse as fp32 */
} full_scr_t;

static size_t full_scr_doubles(int T, int hs)
{
    const size_t th = (size_t)T * hs, bt = (size_t)ATT_BLOCK * T;
    return 4 * th + 3 * bt + (size_t)ATT_BLOCK * hs + 2 * ATT_BLOCK;
}

/* The layout of full_scr_doubles(T, hs) doubles at p */
static full_scr_t full_scr(double *p, int T, int hs)
{
    const size_t th = (size_t)T * hs, bt = (size_t)ATT_BLOCK * T;
    full_scr_t f = {.q = p, .k = p + th, .v = p + 2 * th, .d = p + 3 * th};
    f.acc = p + 4 * th;
    f.pr = f.acc + bt;
    f.s = (float *)(f.pr + bt); /* s and e: bt floats each, in bt doubles */
    f.e = f.s + bt;
    f.o = f.pr + 2 * bt;        /* (ATT_BLOCK, hs) */
    f.l = f.o + (size_t)ATT_BLOCK * hs;
    f.lse = f.l + ATT_BLOCK;
    return f;
}

/* The forward of query rows [r0, r1) of one (b, h) against keys [0, r1):
 * att rows (ld T) = E / l (normalised, fp32; zeros beyond the diagonal), o
 * (ld ldo, its first row r0's) = the output; f->s keeps the scores (M, r1)
 * and f->lse the rows' lse. f->q, k, v hold the rounded operands; att may
 * be NULL (not written). */
static void full_rows(const full_scr_t *f, float *att, float *o, size_t ldo, int r0, int r1,
                      int T, int hs, float scale)
{
    const int M = r1 - r0;
    scores(f->s, f->acc, f->q + (size_t)r0 * hs, f->k, M, r1, hs, scale);
    for (int i = 0; i < M; i++) {
        int t = r0 + i, n = t + 1, m;
        float *e = f->e + (size_t)i * r1;
        double *pr = f->pr + (size_t)i * r1;
        double l = row_probs(e, pr, f->s + (size_t)i * r1, n, &m);
        for (int j = n; j < r1; j++)
            pr[j] = 0.0;
        f->l[i] = l;
        /* as the block op stores a single block's lse (fp32) */
        f->lse[i] = (float)(log(l) + m * M_LN2);
        if (att) {
            float *a = att + (size_t)t * T;
            for (int j = 0; j < n; j++)
                a[j] = (float)(e[j] / l);
            memset(a + n, 0, (size_t)(T - n) * sizeof(float));
        }
    }
    /* o = bf16(E) v^ / l */
    cblas_dgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, M, hs, r1, 1.0, f->pr, r1, f->v, hs,
                0.0, f->o, hs);
    for (int i = 0; i < M; i++)
        for (int c = 0; c < hs; c++)
            o[(size_t)i * ldo + c] = (float)(f->o[(size_t)i * hs + c] / f->l[i]);
}

void px__cpu_attention_bf16_forward(float *out, float *att, const float *inp, int B, int T,
                                    int C, int NH)
{
    const int hs = C / NH, C3 = 3 * C;
    const float scale = 1.0f / sqrtf((float)hs);
    full_scr_t f = full_scr(scratch_get(full_scr_doubles(T, hs)), T, hs);
    for (int b = 0; b < B; b++)
        for (int h = 0; h < NH; h++) {
            const float *q = inp + (size_t)b * T * C3 + (size_t)h * hs;
            widen_rows(f.q, q, (size_t)C3, T, hs);
            widen_rows(f.k, q + C, (size_t)C3, T, hs);
            widen_rows(f.v, q + 2 * C, (size_t)C3, T, hs);
            float *a = att + ((size_t)b * NH + h) * T * T;
            float *o = out + (size_t)b * T * C + (size_t)h * hs;
            for (int r0 = 0; r0 < T; r0 += ATT_BLOCK)
                full_rows(&f, a, o + (size_t)r0 * C, (size_t)C, r0, r0 + ATT_BLOCK < T ? r0 + ATT_BLOCK : T, T,
                          hs, scale);
        }
}

/* dst (rows, cols) floats, ld ldd, += src (rows, cols) doubles rounded */
static void add_rows(float *dst, size_t ldd, const double *src, int rows, int cols)
{
    for (int r = 0; r < rows; r++)
        for (int c = 0; c < cols; c++)
            dst[(size_t)r * ldd + c] += (float)src[(size_t)r * cols + c];
}

/* One backward row: s[0, n) its scores, dp[0, n) dP, lse and delta its
 * fp32 values. pr[j] = bf16(E_j) and sr[j] = bf16(E_j (dP_j - delta)
 * scale) with E_j = 2^(z_j - mb), mb = floor(lse log2 e) (any integer
 * would do: the rounding is the same); returns c = 2^mb / exp(lse), the
 * row's fp32 normaliser: P = E c, dS = E (dP - delta) scale c. c stays out
 * of every rounding, so that the last-bit differences of lse between
 * layouts (the ring merges it block by block) flip no bf16 operand. */
static double bwd_row(double *pr, double *sr, const float *s, const double *dp, int n, float lse,
                      float delta, float scale)
{
    const float log2e = (float)M_LOG2E;
    const int mb = (int)floorf(lse * log2e);
    for (int j = 0; j < n; j++) {
        float e = exp2_rel(s[j] * log2e, mb);
        pr[j] = bf16d(e);
        sr[j] = bf16d(e * ((float)dp[j] - delta) * scale);
    }
    return exp(mb * M_LN2 - (double)lse);
}

/* dst (rows, hs) = src (rows, hs) with row r times c[r] */
static void scale_rows(double *dst, const double *src, const double *c, int rows, int hs)
{
    for (int r = 0; r < rows; r++)
        for (int k = 0; k < hs; k++)
            dst[(size_t)r * hs + k] = src[(size_t)r * hs + k] * c[r];
}

void px__cpu_attention_bf16_backward(float *dinp, float *scratch, const float *dout,
                                     const float *inp, const float *att, int B, int T, int C,
                                     int NH)
{
    (void)scratch;
    (void)att; /* recomputed with the output rows (delta needs those anyway) */
    const int hs = C / NH, C3 = 3 * C;
    const float scale = 1.0f / sqrtf((float)hs);
    const size_t th = (size_t)T * hs, bt = (size_t)ATT_BLOCK * T;
    /* the forward's scratch, then: out rows (ATT_BLOCK, hs) floats, dP (bt),
     * dS rounded (bt), the product result (T, hs), dout^ and q^ rows times
     * c (ATT_BLOCK, hs) each, c (ATT_BLOCK) */
    const size_t nf = full_scr_doubles(T, hs), bh = (size_t)ATT_BLOCK * hs;
    double *base = scratch_get(nf + bh + 2 * bt + th + 2 * bh + ATT_BLOCK);
    full_scr_t f = full_scr(base, T, hs);
    float *orow = (float *)(base + nf);
    double *dp = base + nf + bh, *dsr = dp + bt, *res = dsr + bt;
    double *dc = res + th, *qc = dc + bh, *cr = qc + bh;

    for (int b = 0; b < B; b++)
        for (int h = 0; h < NH; h++) {
            const size_t qoff = (size_t)b * T * C3 + (size_t)h * hs;
            const float *q = inp + qoff;
            float *dq = dinp + qoff, *dk = dq + C, *dv = dq + 2 * C;
            const float *d = dout + (size_t)b * T * C + (size_t)h * hs;
            widen_rows(f.q, q, (size_t)C3, T, hs);
            widen_rows(f.k, q + C, (size_t)C3, T, hs);
            widen_rows(f.v, q + 2 * C, (size_t)C3, T, hs);
            widen_rows(f.d, d, (size_t)C, T, hs);
            for (int r0 = 0; r0 < T; r0 += ATT_BLOCK) {
                int r1 = r0 + ATT_BLOCK < T ? r0 + ATT_BLOCK : T, M = r1 - r0;
                /* the forward's output rows, for delta = rowsum(dout * out) */
                full_rows(&f, NULL, orow, (size_t)hs, r0, r1, T, hs, scale);
                /* dP (M, r1) = dout^ v^T^ */
                cblas_dgemm(CblasRowMajor, CblasNoTrans, CblasTrans, M, r1, hs, 1.0,
                            f.d + (size_t)r0 * hs, hs, f.v, hs, 0.0, dp, r1);
                for (int i = 0; i < M; i++) {
                    int t = r0 + i, n = t + 1;
                    const float *dr = d + (size_t)t * C, *sr = f.s + (size_t)i * r1;
                    float delta = 0.0f;
                    for (int c = 0; c < hs; c++)
                        delta += orow[(size_t)i * hs + c] * dr[c];
                    double *prow = f.pr + (size_t)i * r1, *srow = dsr + (size_t)i * r1;
                    /* from the scores and the fp32 lse, as the block op does
                     * (not att: its E / l differs in the last bit) */
                    cr[i] = bwd_row(prow, srow, sr, dp + (size_t)i * r1, n, (float)f.lse[i],
                                    delta, scale);
                    for (int j = n; j < r1; j++)
                        prow[j] = srow[j] = 0.0;
                }
                scale_rows(dc, f.d + (size_t)r0 * hs, cr, M, hs);
                scale_rows(qc, f.q + (size_t)r0 * hs, cr, M, hs);
                /* dv[0:r1] += bf16(E)^T (c dout^) */
                cblas_dgemm(CblasRowMajor, CblasTrans, CblasNoTrans, r1, hs, M, 1.0, f.pr, r1,
                            dc, hs, 0.0, res, hs);
                add_rows(dv, (size_t)C3, res, r1, hs);
                /* dq[r0:r1] += c bf16(dS / c) k^ */
                cblas_dgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, M, hs, r1, 1.0, dsr, r1,
                            f.k, hs, 0.0, res, hs);
                scale_rows(res, res, cr, M, hs);
                add_rows(dq + (size_t)r0 * C3, (size_t)C3, res, M, hs);
                /* dk[0:r1] += bf16(dS / c)^T (c q^) */
                cblas_dgemm(CblasRowMajor, CblasTrans, CblasNoTrans, r1, hs, M, 1.0, dsr, r1,
                            qc, hs, 0.0, res, hs);
                add_rows(dk, (size_t)C3, res, r1, hs);
            }
        }
}

/* ---- blockwise attention (ring attention, cp) ---- */

void px__cpu_attention_block_bf16_forward(float *out, float *lse, const float *q,
                                          const float *kv, const px_attn_block_t *g,
                                          float *scratch)
{
    (void)scratch;
    const int Tq = g->Tq, Tk = g->Tk, hs = g->hs;
    const float scale = 1.0f / sqrtf((float)hs);
    const size_t qh = (size_t)Tq * hs, kh = (size_t)Tk * hs, qk = (size_t)Tq * Tk;
    /* q^ k^ v^, the scores' double result, S and E (floats), bf16(E), P v */
    double *p = scratch_get(qh + 2 * kh + 3 * qk + qh + 2 * (size_t)Tq);
    double *qd = p, *kd = qd + qh, *vd = kd + kh, *acc = vd + kh, *pr = acc + qk;
    float *s = (float *)(pr + qk), *e = s + qk;
    double *o = pr + 2 * qk, *coef = o + qh, *alpha = coef + Tq; /* (Tq) each */

    for (int b = 0; b < g->B; b++)
        for (int h = 0; h < g->NH; h++) {
            const px_attn_at_t at = px_attn_block_at(g, b, h);
            const float *qb = q + at.q, *kb = kv + at.kv, *vb = kb + g->v_off;
            float *ob = out + at.o, *lb = lse + at.lse;
            widen_rows(qd, qb, g->q_ld, Tq, hs);
            widen_rows(kd, kb, g->kv_ld, Tk, hs);
            widen_rows(vd, vb, g->kv_ld, Tk, hs);
            scores(s, acc, qd, kd, Tq, Tk, hs, scale);
            for (int t = 0; t < Tq; t++) {
                int n = g->causal ? t + 1 : Tk, m;
                double *prow = pr + (size_t)t * Tk;
                double l = row_probs(e + (size_t)t * Tk, prow, s + (size_t)t * Tk, n, &m);
                for (int j = n; j < Tk; j++)
                    prow[j] = 0.0;
                /* the block's log-sum-exp, merged into the running one */
                double blse = log(l) + m * M_LN2, old = lb[t], nl;
                float *orow = ob + (size_t)t * g->o_ld;
                if (g->init || old == -INFINITY) {
                    nl = blse;
                    memset(orow, 0, (size_t)hs * sizeof(float));
                    alpha[t] = 0.0;
                } else {
                    double hi = old > blse ? old : blse, lo = old > blse ? blse : old;
                    nl = hi + log1p(exp(lo - hi));
                    alpha[t] = exp(old - nl); /* applied below, in one rounding */
                }
                lb[t] = (float)nl;
                coef[t] = exp(m * M_LN2 - nl); /* bf16(E) 2^m / exp(nl) */
            }
            /* out = out alpha + bf16(E) v^ 2^m / exp(lse'), rounded once */
            cblas_dgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, Tq, hs, Tk, 1.0, pr, Tk, vd,
                        hs, 0.0, o, hs);
            for (int t = 0; t < Tq; t++)
                for (int c = 0; c < hs; c++)
                    ob[(size_t)t * g->o_ld + c] =
                        (float)(ob[(size_t)t * g->o_ld + c] * alpha[t] +
                                o[(size_t)t * hs + c] * coef[t]);
        }
}

void px__cpu_attention_block_bf16_backward(float *dq, float *dkv, const float *dout,
                                           const float *q, const float *kv, const float *lse,
                                           const float *delta, const px_attn_block_t *g,
                                           float *scratch)
{
    (void)scratch;
    const int Tq = g->Tq, Tk = g->Tk, hs = g->hs;
    const float scale = 1.0f / sqrtf((float)hs);
    const size_t qh = (size_t)Tq * hs, kh = (size_t)Tk * hs, qk = (size_t)Tq * Tk;
    const size_t big = qh > kh ? qh : kh;
    /* q^ k^ v^ dout^, dP, the products' results, bf16(E), bf16(dS / c), S
     * (floats), dout^ and q^ rows times c, c (Tq) */
    double *p = scratch_get(2 * qh + 2 * kh + qk + big + 3 * qk + 2 * qh + (size_t)Tq);
    double *qd = p, *dd = qd + qh, *kd = dd + qh, *vd = kd + kh, *acc = vd + kh;
    double *res = acc + qk, *pr = res + big, *sr = pr + qk;
    float *s = (float *)(sr + qk);
    double *dc = sr + 2 * qk, *qc = dc + qh, *cr = qc + qh;

    for (int b = 0; b < g->B; b++)
        for (int h = 0; h < g->NH; h++) {
            const px_attn_at_t at = px_attn_block_at(g, b, h);
            const size_t qo = at.q, ko = at.kv, oo = at.o, lo = at.lse;
            float *dqb = dq + qo, *dkb = dkv + ko, *dvb = dkb + g->v_off;
            widen_rows(qd, q + qo, g->q_ld, Tq, hs);
            widen_rows(dd, dout + oo, g->o_ld, Tq, hs);
            widen_rows(kd, kv + ko, g->kv_ld, Tk, hs);
            widen_rows(vd, kv + ko + g->v_off, g->kv_ld, Tk, hs);
            scores(s, acc, qd, kd, Tq, Tk, hs, scale);
            /* dP = dout^ v^T^ */
            cblas_dgemm(CblasRowMajor, CblasNoTrans, CblasTrans, Tq, Tk, hs, 1.0, dd, hs, vd, hs,
                        0.0, acc, Tk);
            /* E, dS / c and c against the FINAL lse (bwd_row) */
            for (int t = 0; t < Tq; t++) {
                int n = g->causal ? t + 1 : Tk;
                double *prow = pr + (size_t)t * Tk, *srow = sr + (size_t)t * Tk;
                cr[t] = bwd_row(prow, srow, s + (size_t)t * Tk, acc + (size_t)t * Tk, n,
                                lse[lo + t], delta[lo + t], scale);
                for (int j = n; j < Tk; j++)
                    prow[j] = srow[j] = 0.0;
            }
            scale_rows(dc, dd, cr, Tq, hs);
            scale_rows(qc, qd, cr, Tq, hs);
            /* dv += bf16(E)^T (c dout^) */
            cblas_dgemm(CblasRowMajor, CblasTrans, CblasNoTrans, Tk, hs, Tq, 1.0, pr, Tk, dc, hs,
                        0.0, res, hs);
            add_rows(dvb, g->kv_ld, res, Tk, hs);
            /* dq += c bf16(dS / c) k^; dk += bf16(dS / c)^T (c q^) */
            cblas_dgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, Tq, hs, Tk, 1.0, sr, Tk, kd,
                        hs, 0.0, res, hs);
            scale_rows(res, res, cr, Tq, hs);
            add_rows(dqb, g->q_ld, res, Tq, hs);
            cblas_dgemm(CblasRowMajor, CblasTrans, CblasNoTrans, Tk, hs, Tq, 1.0, sr, Tk, qc, hs,
                        0.0, res, hs);
            add_rows(dkb, g->kv_ld, res, Tk, hs);
        }
}
