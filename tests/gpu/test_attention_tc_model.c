/* test_attention_tc_model.c: a CPU model of the tensor-core bf16 attention
 * (kernels/cuda/px_attention_tc_cuda.cu) against the CPU bf16 reference
 * (the table's attention_bf16_forward / _backward, px_attention_bf16_cpu.c).
 * Unit suite: it runs where no GPU is, and proves the algorithm and its
 * index arithmetic - the 64-row tiles, the causal and tail masks, the
 * zero-padding of the head size to 64 or 128, the online softmax in the
 * log2 domain with an integer running max, the recomputed output rows for
 * D, the two-pass dQ and the per-key-tile dK, dV - though not the CUDA
 * syntax (px-opcheck checks the kernels themselves on a GPU).
 *
 * The model is written tile by tile as the kernels are: a "block" loop per
 * (b, h, tile) with the same staging (bf16 of the fp32 input, zeros past T
 * and past hs), the same per-row work split in two 32-column halves (a
 * lane pair: their partial maxima and sums combined as the shuffles do),
 * and the same rounding points (forward: bf16(E); dq kernel: bf16(E) and
 * bf16(E (dP - D) scale) with E relative to floor(lse log2 e) and the row
 * factor c applied after; dkv kernel: bf16(P), bf16(P (dP - D) scale);
 * fp32 accumulation of every bf16 x bf16 product, in k order where the
 * tensor cores' order is unspecified). Checks (normwise: max |model - ref| / max |ref| per tensor):
 * out, lse (against the reference's natural-log lse recomputed in double
 * from the same scores) and dinp within TOL = 1e-2 (px-opcheck's bf16
 * limit), at head sizes 16, 32, 64 (padded to 64), 80, 128 (padded to
 * 128), T below, at and past multiples of 64; and, to show the check has
 * teeth, that a model with the causal mask off by one key fails it.
 *
 * Usage: test_attention_tc_model [CASE]   (forward, backward; default all) */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "px_kernels.h"
#include "px_reduce.h"

#define TILE 64
#define TOL 1e-2
#define LOG2E 1.4426950408889634f
#define LN2 0.6931471805599453f

static int failures;
static int mask_shift; /* 1: the deliberately wrong mask (key <= query + 1) */

static float rb(float x)
{
    float r;
    px_f32_round_bf16(&r, &x, 1);
    return r;
}

static uint64_t rng = 0x9e3779b97f4a7c15ull;
static float frand(void) /* uniform in [-1, 1) */
{
    rng = rng * 6364136223846793005ull + 1442695040888963407ull;
    return (float)((rng >> 40) / 8388608.0 - 1.0);
}

static void *xcalloc(size_t n, size_t size)
{
    void *p = calloc(n, size);
    if (!p) {
        fprintf(stderr, "test_attention_tc_model: out of memory\n");
        exit(1);
    }
    return p;
}

/* the kernels' stage_bf16: dst (64, HS) = bf16(src rows r0.., cols < hs) */
static void stage(float *dst, const float *src, size_t ld, int r0, int T, int hs, int HS)
{
    for (int r = 0; r < TILE; r++)
        for (int d = 0; d < HS; d++)
            dst[r * HS + d] = (r0 + r < T && d < hs) ? rb(src[(size_t)(r0 + r) * ld + d]) : 0.0f;
}

/* c (64, 64) = a (64, HS) b (64, HS)^T, fp32 sums (warp_abt) */
static void abt(float *c, const float *a, const float *b, int HS)
{
    for (int i = 0; i < TILE; i++)
        for (int j = 0; j < TILE; j++) {
            float acc = 0.0f;
            for (int d = 0; d < HS; d++)
                acc += a[i * HS + d] * b[j * HS + d];
            c[i * TILE + j] = acc;
        }
}

/* acc (64, HS) += a (64, 64) b (64, HS) (warp_ab_acc; at = 1: a^T) */
static void ab_acc(float *acc, const float *a, int at, const float *b, int HS)
{
    for (int i = 0; i < TILE; i++)
        for (int n = 0; n < HS; n++) {
            float s = acc[i * HS + n];
            for (int k = 0; k < TILE; k++)
                s += (at ? a[k * TILE + i] : a[i * TILE + k]) * b[k * HS + n];
            acc[i * HS + n] = s;
        }
}

/* the kernels' lane_col: the i-th column (of 64) the lane pair of row r
 * visits in half `half` (even / odd columns, rotated by r); every column
 * once per row, the model's sums in the kernels' order */
static int lane_col(int i, int r, int half)
{
    return 2 * ((i + r) & 31) + half;
}

static int valid(int j, int t, int T)
{
    return j <= t + mask_shift && t < T && j < T;
}

/* the forward kernel's blocks: out (B,T,C), lse (B,NH,T) natural log */
static void model_forward(float *out, float *lse, const float *inp, int B, int T, int C, int NH)
{
    const int hs = C / NH, HS = hs <= 64 ? 64 : 128, C3 = 3 * C;
    const float zscale = 1.0f / sqrtf((float)hs) * LOG2E;
    float *Qs = xcalloc(TILE * HS, 4), *Ks = xcalloc(TILE * HS, 4), *Vs = xcalloc(TILE * HS, 4);
    float *Ss = xcalloc(TILE * TILE, 4), *Ps = xcalloc(TILE * TILE, 4);
    float *Os = xcalloc(TILE * HS, 4);
    const int nq = (T + TILE - 1) / TILE;
    for (int bh = 0; bh < B * NH; bh++)
        for (int x = 0; x < nq; x++) {
            const int b = bh / NH, h = bh % NH, q0 = (nq - 1 - x) * TILE;
            const float *base = inp + (size_t)b * T * C3 + (size_t)h * hs;
            float m[TILE], l[TILE];
            stage(Qs, base, C3, q0, T, hs, HS);
            memset(Os, 0, TILE * HS * 4);
            for (int r = 0; r < TILE; r++) {
                m[r] = -INFINITY;
                l[r] = 0.0f;
            }
            const int kend = q0 + TILE < T ? q0 + TILE : T;
            for (int k0 = 0; k0 < kend; k0 += TILE) {
                stage(Ks, base + C, C3, k0, T, hs, HS);
                stage(Vs, base + 2 * C, C3, k0, T, hs, HS);
                abt(Ss, Qs, Ks, HS);
                for (int r = 0; r < TILE; r++) {
                    const int t = q0 + r;
                    float *srow = Ss + r * TILE;
                    float zmax[2] = {-INFINITY, -INFINITY}, psum[2] = {0.0f, 0.0f};
                    for (int half = 0; half < 2; half++)
                        for (int i = 0; i < 32; i++) {
                            const int c = lane_col(i, r, half);
                            float z = valid(k0 + c, t, T) ? srow[c] * zscale : -INFINITY;
                            srow[c] = z;
                            zmax[half] = fmaxf(zmax[half], z);
                        }
                    const float zm = fmaxf(zmax[0], zmax[1]);
                    const float mnew = fmaxf(m[r], floorf(zm));
                    const float corr = m[r] == -INFINITY ? 1.0f : exp2f(m[r] - mnew);
                    const float mref = mnew == -INFINITY ? 0.0f : mnew;
                    for (int half = 0; half < 2; half++)
                        for (int i = 0; i < 32; i++) {
                            const int c = lane_col(i, r, half);
                            float e = exp2f(srow[c] - mref);
                            psum[half] += e;
                            Ps[r * TILE + c] = rb(e);
                        }
                    l[r] = l[r] * corr + (psum[0] + psum[1]);
                    m[r] = mnew;
                    if (corr != 1.0f)
                        for (int d = 0; d < HS; d++)
                            Os[r * HS + d] *= corr;
                }
                ab_acc(Os, Ps, 0, Vs, HS);
            }
            for (int r = 0; r < TILE; r++) {
                const int t = q0 + r;
                if (t >= T)
                    continue;
                const float inv = l[r] > 0.0f ? 1.0f / l[r] : 0.0f;
                lse[(size_t)bh * T + t] = m[r] * LN2 + logf(l[r]);
                for (int d = 0; d < hs; d++)
                    out[((size_t)b * T + t) * C + (size_t)h * hs + d] = Os[r * HS + d] * inv;
            }
        }
    free(Qs); free(Ks); free(Vs); free(Ss); free(Ps); free(Os);
}

/* P = bf16(exp2(S zscale - L)) and dS = bf16(P (dP - D) scale) of one
 * (query tile q0, key tile k0) pair (bwd_row); dP, dS may be NULL */
static void probs(float *Ps, float *dSs, const float *Ss, const float *dPs, int q0, int k0,
                  int T, float zscale, const float *Ls, const float *Ds, float scale)
{
    for (int r = 0; r < TILE; r++)
        for (int x = 0; x < TILE; x++) {
            const int c = lane_col(x % 32, r, x / 32);
            const int ok = valid(k0 + c, q0 + r, T);
            const float p = ok ? exp2f(Ss[r * TILE + c] * zscale - Ls[r]) : 0.0f;
            if (Ps)
                Ps[r * TILE + c] = rb(p);
            if (dSs)
                dSs[r * TILE + c] = rb(p * (dPs[r * TILE + c] - Ds[r]) * scale);
        }
}

/* the dq kernel's blocks, then the dkv kernel's: dinp (B,T,3C) += */
static void model_backward(float *dinp, const float *dout, const float *inp, const float *lse,
                           int B, int T, int C, int NH)
{
    const int hs = C / NH, HS = hs <= 64 ? 64 : 128, C3 = 3 * C;
    const float scale = 1.0f / sqrtf((float)hs), zscale = scale * LOG2E;
    const int nt = (T + TILE - 1) / TILE;
    float *Dbuf = xcalloc((size_t)B * NH * T, 4);
    float *Qs = xcalloc(TILE * HS, 4), *Gs = xcalloc(TILE * HS, 4), *Ks = xcalloc(TILE * HS, 4);
    float *Vs = xcalloc(TILE * HS, 4), *Ss = xcalloc(TILE * TILE, 4), *dPs = xcalloc(TILE * TILE, 4);
    float *Ps = xcalloc(TILE * TILE, 4), *dSs = xcalloc(TILE * TILE, 4);
    float *acc = xcalloc(TILE * HS, 4), *acc2 = xcalloc(TILE * HS, 4);
    float Ls[TILE], Ds[TILE];
    /* kernel dq */
    for (int bh = 0; bh < B * NH; bh++)
        for (int x = 0; x < nt; x++) {
            const int b = bh / NH, h = bh % NH, q0 = (nt - 1 - x) * TILE;
            const float *base = inp + (size_t)b * T * C3 + (size_t)h * hs;
            const float *gbase = dout + (size_t)b * T * C + (size_t)h * hs;
            stage(Qs, base, C3, q0, T, hs, HS);
            stage(Gs, gbase, C, q0, T, hs, HS);
            float Cs[TILE]; /* c = 2^(mb - lse log2 e): P = E c, E = 2^(z - mb) */
            for (int r = 0; r < TILE; r++) {
                const float L = q0 + r < T ? lse[(size_t)bh * T + q0 + r] * LOG2E : 0.0f;
                Ls[r] = floorf(L); /* mb: E relative to it, as the forward rounded */
                Cs[r] = exp2f(Ls[r] - L);
            }
            const int kend = q0 + TILE < T ? q0 + TILE : T;
            memset(acc, 0, TILE * HS * 4);
            for (int k0 = 0; k0 < kend; k0 += TILE) { /* pass 1: O, then D */
                stage(Ks, base + C, C3, k0, T, hs, HS);
                stage(Vs, base + 2 * C, C3, k0, T, hs, HS);
                abt(Ss, Qs, Ks, HS);
                probs(Ps, NULL, Ss, NULL, q0, k0, T, zscale, Ls, NULL, 0.0f);
                ab_acc(acc, Ps, 0, Vs, HS);
            }
            for (int r = 0; r < TILE; r++) {
                const int t = q0 + r;
                float part[2] = {0.0f, 0.0f};
                if (t < T)
                    for (int d = 0; d < hs; d++)
                        part[d & 1] += gbase[(size_t)t * C + d] * (acc[r * HS + d] * Cs[r]);
                Ds[r] = part[0] + part[1];
                if (t < T)
                    Dbuf[(size_t)bh * T + t] = Ds[r];
            }
            memset(acc, 0, TILE * HS * 4);
            for (int k0 = 0; k0 < kend; k0 += TILE) { /* pass 2: dQ */
                stage(Ks, base + C, C3, k0, T, hs, HS);
                stage(Vs, base + 2 * C, C3, k0, T, hs, HS);
                abt(Ss, Qs, Ks, HS);
                abt(dPs, Gs, Vs, HS);
                probs(NULL, dSs, Ss, dPs, q0, k0, T, zscale, Ls, Ds, scale);
                ab_acc(acc, dSs, 0, Ks, HS);
            }
            float *dst = dinp + (size_t)b * T * C3 + (size_t)h * hs;
            for (int r = 0; r < TILE && q0 + r < T; r++)
                for (int d = 0; d < hs; d++)
                    dst[(size_t)(q0 + r) * C3 + d] += acc[r * HS + d] * Cs[r];
        }
    /* kernel dkv */
    for (int bh = 0; bh < B * NH; bh++)
        for (int x = 0; x < nt; x++) {
            const int b = bh / NH, h = bh % NH, k0 = x * TILE;
            const float *base = inp + (size_t)b * T * C3 + (size_t)h * hs;
            const float *gbase = dout + (size_t)b * T * C + (size_t)h * hs;
            stage(Ks, base + C, C3, k0, T, hs, HS);
            stage(Vs, base + 2 * C, C3, k0, T, hs, HS);
            memset(acc, 0, TILE * HS * 4);  /* dK */
            memset(acc2, 0, TILE * HS * 4); /* dV */
            for (int q0 = k0; q0 < T; q0 += TILE) {
                stage(Qs, base, C3, q0, T, hs, HS);
                stage(Gs, gbase, C, q0, T, hs, HS);
                for (int r = 0; r < TILE; r++) {
                    Ls[r] = q0 + r < T ? lse[(size_t)bh * T + q0 + r] * LOG2E : 0.0f;
                    Ds[r] = q0 + r < T ? Dbuf[(size_t)bh * T + q0 + r] : 0.0f;
                }
                abt(Ss, Qs, Ks, HS);
                abt(dPs, Gs, Vs, HS);
                probs(Ps, dSs, Ss, dPs, q0, k0, T, zscale, Ls, Ds, scale);
                ab_acc(acc2, Ps, 1, Gs, HS);
                ab_acc(acc, dSs, 1, Qs, HS);
            }
            float *dst = dinp + (size_t)b * T * C3 + (size_t)h * hs;
            for (int r = 0; r < TILE && k0 + r < T; r++)
                for (int d = 0; d < hs; d++) {
                    dst[(size_t)(k0 + r) * C3 + C + d] += acc[r * HS + d];
                    dst[(size_t)(k0 + r) * C3 + 2 * C + d] += acc2[r * HS + d];
                }
        }
    free(Dbuf); free(Qs); free(Gs); free(Ks); free(Vs); free(Ss); free(dPs); free(Ps);
    free(dSs); free(acc); free(acc2);
}

/* normwise error max|a - ref| / max|ref| over n floats */
static double nerr(const float *a, const float *ref, size_t n)
{
    double md = 0.0, mr = 0.0;
    for (size_t i = 0; i < n; i++) {
        double d = fabs((double)a[i] - ref[i]);
        if (!(d <= md)) /* NaN counts as infinite */
            md = isnan(d) ? INFINITY : d;
        if (fabs(ref[i]) > mr)
            mr = fabs(ref[i]);
    }
    return mr > 0 ? md / mr : md;
}

/* The reference lse of each row (natural log), in double from the same
 * rounded q^, k^ (the CPU op keeps no lse in its (T,T) att). */
static void ref_lse(float *lse, const float *inp, int B, int T, int C, int NH)
{
    const int hs = C / NH, C3 = 3 * C;
    const double scale = 1.0 / sqrt((double)hs);
    double *s = xcalloc((size_t)T, sizeof(double));
    for (int b = 0; b < B; b++)
        for (int h = 0; h < NH; h++)
            for (int t = 0; t < T; t++) {
                const float *q = inp + ((size_t)b * T + t) * C3 + (size_t)h * hs;
                double mx = -INFINITY, sum = 0.0;
                for (int j = 0; j <= t; j++) {
                    const float *k = inp + ((size_t)b * T + j) * C3 + C + (size_t)h * hs;
                    double a = 0.0;
                    for (int d = 0; d < hs; d++)
                        a += (double)rb(q[d]) * rb(k[d]);
                    s[j] = a * scale;
                    mx = s[j] > mx ? s[j] : mx;
                }
                for (int j = 0; j <= t; j++)
                    sum += exp(s[j] - mx);
                lse[((size_t)b * NH + h) * T + t] = (float)(mx + log(sum));
            }
    free(s);
}

/* One shape: returns the worst error (forward: out and lse; backward: dinp). */
static double run_case(int B, int T, int C, int NH, int backward, int quiet)
{
    const px_kernel_ops_t *K = px_kernels_cpu();
    const size_t n3 = (size_t)B * T * 3 * C, n = (size_t)B * T * C, nl = (size_t)B * NH * T;
    float *inp = xcalloc(n3, 4), *dout = xcalloc(n, 4);
    for (size_t i = 0; i < n3; i++)
        inp[i] = 2.0f * frand(); /* scores up to ~hs/sqrt(hs): peaked rows too */
    for (size_t i = 0; i < n; i++)
        dout[i] = frand();
    float *out = xcalloc(n, 4), *att = xcalloc((size_t)B * NH * T * T, 4);
    float *mout = xcalloc(n, 4), *mlse = xcalloc(nl, 4), *rlse = xcalloc(nl, 4);
    K->attention_bf16_forward(out, att, inp, B, T, C, NH);
    model_forward(mout, mlse, inp, B, T, C, NH);
    double err;
    const char *what;
    if (!backward) {
        ref_lse(rlse, inp, B, T, C, NH);
        double eo = nerr(mout, out, n), el = nerr(mlse, rlse, nl);
        err = eo > el ? eo : el;
        what = "out, lse";
        if (!quiet)
            printf("forward  B %d T %4d C %3d NH %d hs %3d: out %.2e lse %.2e\n", B, T, C, NH,
                   C / NH, eo, el);
    } else {
        float *dinp = xcalloc(n3, 4), *mdinp = xcalloc(n3, 4);
        K->attention_bf16_backward(dinp, NULL, dout, inp, att, B, T, C, NH);
        model_backward(mdinp, dout, inp, mlse, B, T, C, NH);
        err = nerr(mdinp, dinp, n3);
        /* per part, for the log */
        float *pr = xcalloc(n, 4), *pm = xcalloc(n, 4);
        double e3[3];
        for (int part = 0; part < 3; part++) {
            for (size_t i = 0; i < (size_t)B * T; i++)
                for (int c = 0; c < C; c++) {
                    pr[i * C + c] = dinp[i * 3 * C + part * C + c];
                    pm[i * C + c] = mdinp[i * 3 * C + part * C + c];
                }
            e3[part] = nerr(pm, pr, n);
            if (e3[part] > err)
                err = e3[part];
        }
        what = "dq, dk, dv";
        if (!quiet)
            printf("backward B %d T %4d C %3d NH %d hs %3d: dq %.2e dk %.2e dv %.2e\n", B, T, C,
                   NH, C / NH, e3[0], e3[1], e3[2]);
        free(dinp); free(mdinp); free(pr); free(pm);
    }
    if (!quiet && !(err <= TOL)) {
        failures++;
        fprintf(stderr, "FAIL: %s error %.3e > %.0e at B %d T %d C %d NH %d\n", what, err, TOL,
                B, T, C, NH);
    }
    free(inp); free(dout); free(out); free(att); free(mout); free(mlse); free(rlse);
    return err;
}

static const int shapes[][4] = { /* B, T, C, NH */
    {2, 100, 128, 2},  /* hs 64, T not a multiple of 64 */
    {1, 70, 256, 2},   /* hs 128 */
    {2, 130, 96, 3},   /* hs 32, padded to 64 */
    {1, 65, 160, 2},   /* hs 80, padded to 128; one row past a tile */
    {1, 128, 64, 4},   /* hs 16; T a multiple of 64 */
    {1, 1, 128, 2},    /* one token */
    {1, 200, 768, 12}, /* GPT-2's heads */
};

int main(int argc, char **argv)
{
    const char *which = argc > 1 ? argv[1] : "all";
    int fwd = !strcmp(which, "forward") || !strcmp(which, "all");
    int bwd = !strcmp(which, "backward") || !strcmp(which, "all");
    if (!fwd && !bwd) {
        fprintf(stderr, "usage: test_attention_tc_model [forward|backward|all]\n");
        return 2;
    }
    for (size_t i = 0; i < sizeof(shapes) / sizeof(shapes[0]); i++) {
        const int *s = shapes[i];
        if (fwd)
            run_case(s[0], s[1], s[2], s[3], 0, 0);
        if (bwd)
            run_case(s[0], s[1], s[2], s[3], 1, 0);
    }
    /* the check has teeth: a mask one key too wide must fail it */
    mask_shift = 1;
    double e = run_case(1, 100, 128, 2, bwd && !fwd, 1);
    mask_shift = 0;
    printf("a mask one key too wide: error %.2e (must exceed %.0e)\n", e, TOL);
    if (!(e > TOL)) {
        failures++;
        fprintf(stderr, "FAIL: the model with a wrong mask passed the check\n");
    }
    printf("%s\n", failures ? "FAIL" : "PASS");
    return failures ? 1 : 0;
}
