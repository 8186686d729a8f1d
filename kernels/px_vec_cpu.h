/* px_vec_cpu.h: small vector helpers the CPU kernels share (internal to
 * kernels/, not part of the op table).
 *
 * Row reductions and element-wise maps written on 8-lane GCC vector
 * extensions (px__v8f): the compiler lowers them to one AVX register in a
 * function built for AVX2 (target_clones, PX__CLONES) and to two SSE
 * registers otherwise. Each lane accumulates every 8th element and the lanes
 * are added in a fixed order at the end, so a reduction gives the same bits
 * on every ISA the clones pick (the build uses ISO C11, so no FMA
 * contraction), and the same bits for a row whatever the rows around it:
 * every layout that splits rows (tensor, sequence, pipeline parallel) sees
 * the single-rank result. Only the lane order differs from a plain left to
 * right loop: results move in the last bits.
 *
 * Pointers need no alignment (loads and stores go through memcpy, which
 * GCC turns into unaligned vector moves). Header-only, stateless. */
#ifndef PX_VEC_CPU_H
#define PX_VEC_CPU_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>

/* Build the marked function for AVX2+FMA and for the baseline, picked at
 * load time (GCC target_clones / ifunc); nothing elsewhere. */
#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__)
#define PX__CLONES __attribute__((target_clones("avx2", "default")))
#else
#define PX__CLONES
#endif

/* the helpers are always inlined into their (cloned) callers, so no vector
 * crosses a call boundary: the ABI note GCC gives for 32-byte vectors on a
 * non-AVX baseline does not apply */
#pragma GCC diagnostic ignored "-Wpsabi"

typedef float px__v8f __attribute__((vector_size(32)));
typedef int32_t px__v8i __attribute__((vector_size(32)));
typedef float px__v4f __attribute__((vector_size(16)));
typedef double px__v4d __attribute__((vector_size(32)));

static inline px__v8f px__v8f_load(const float *p)
{
    px__v8f v;
    memcpy(&v, p, sizeof(v));
    return v;
}

static inline void px__v8f_store(float *p, px__v8f v)
{
    memcpy(p, &v, sizeof(v));
}

static inline px__v8f px__v8f_set1(float x)
{
    return (px__v8f){x, x, x, x, x, x, x, x};
}

/* lanes added pairwise in a fixed order: ((0+4)+(2+6)) + ((1+5)+(3+7)) */
/* lane-wise max(a, b); b where a is NaN */
static inline px__v8f px__v8f_max(px__v8f a, px__v8f b)
{
    px__v8i m = a > b, ai, bi; /* all ones where a > b */
    memcpy(&ai, &a, sizeof(ai));
    memcpy(&bi, &b, sizeof(bi));
    ai = (ai & m) | (bi & ~m);
    memcpy(&a, &ai, sizeof(a));
    return a;
}

static inline float px__v8f_hsum(px__v8f v)
{
    float a = (v[0] + v[4]) + (v[2] + v[6]), b = (v[1] + v[5]) + (v[3] + v[7]);
    return a + b;
}

static inline float px__v8f_hmax(px__v8f v)
{
    float m = v[0];
    for (int i = 1; i < 8; i++)
        m = v[i] > m ? v[i] : m;
    return m;
}

/* max of x[0, n), n >= 1 */
static inline float px__row_max(const float *x, int n)
{
    int j = 0;
    float m = x[0];
    if (n >= 8) {
        px__v8f v = px__v8f_load(x);
        for (j = 8; j + 8 <= n; j += 8)
            v = px__v8f_max(px__v8f_load(x + j), v);
        m = px__v8f_hmax(v);
    }
    for (; j < n; j++)
        m = x[j] > m ? x[j] : m;
    return m;
}

/* exp(x) of every lane for x <= 88 (the callers pass x <= 0; above, the
 * result overflows its exponent bits): x = n ln2 + r with |r| <= ln2/2 (n
 * by the round-to-nearest 1.5*2^23 trick), exp(r) by its degree-7 Taylor
 * polynomial (truncation < 3e-9 relative), times 2^n built in the exponent
 * bits (n >= -126 there, so no shift goes below the smallest normal). x
 * below -87 is clamped there: the result is exp(-87) = 1.6e-38 instead of
 * something smaller, an absolute error under 1.7e-38 (the callers add
 * such values to sums of at least 1). Relative error about 1 ulp on
 * [-87, 0] (the same scheme as GELU's exp_poly,
 * px_gelu_cpu.c; measured in tests/kernels "attention"). Cody & Waite's
 * two-constant range reduction (ln2 split in a high and a low part). */
static inline px__v8f px__v8f_exp(px__v8f x)
{
    x = px__v8f_max(x, px__v8f_set1(-87.0f));
    px__v8f n = (x * 1.4426950408889634f + 12582912.0f) - 12582912.0f;
    px__v8f r = (x - n * 0.693145751953125f) - n * 1.428606765330187e-06f;
    px__v8f p = 1.0f + r * (1.0f + r * (0.5f + r * (1.0f / 6 + r * (1.0f / 24 + r * (1.0f / 120 +
                r * (1.0f / 720 + r * (1.0f / 5040)))))));
    px__v8i e = (__builtin_convertvector(n, px__v8i) + 127) << 23;
    px__v8f s;
    memcpy(&s, &e, sizeof(s));
    return p * s;
}

/* The same for one float (row tails). */
static inline float px__exp1(float x)
{
    x = x < -87.0f ? -87.0f : x;
    float n = (x * 1.4426950408889634f + 12582912.0f) - 12582912.0f;
    float r = (x - n * 0.693145751953125f) - n * 1.428606765330187e-06f;
    float p = 1.0f + r * (1.0f + r * (0.5f + r * (1.0f / 6 + r * (1.0f / 24 + r * (1.0f / 120 +
              r * (1.0f / 720 + r * (1.0f / 5040)))))));
    union { uint32_t u; float f; } s = {.u = (uint32_t)((int32_t)n + 127) << 23};
    return p * s.f;
}

/* the 8 floats at p as two 4-double vectors (lo: p[0..3], hi: p[4..7]) */
static inline void px__v8f_to_d(px__v8f v, px__v4d *lo, px__v4d *hi)
{
    px__v4f a = {v[0], v[1], v[2], v[3]}, b = {v[4], v[5], v[6], v[7]};
    *lo = __builtin_convertvector(a, px__v4d);
    *hi = __builtin_convertvector(b, px__v4d);
}

static inline double px__v4d_hsum(px__v4d v)
{
    return (v[0] + v[2]) + (v[1] + v[3]);
}

/* sum of x[0, n) in double: 8 lanes of double (two 4-lane accumulators),
 * then the tail left to right; same bits on every ISA */
static inline double px__row_sum_d(const float *x, size_t n)
{
    px__v4d a = {0, 0, 0, 0}, b = {0, 0, 0, 0}, lo, hi;
    size_t j = 0;
    for (; j + 8 <= n; j += 8) {
        px__v8f_to_d(px__v8f_load(x + j), &lo, &hi);
        a += lo;
        b += hi;
    }
    double s = px__v4d_hsum(a + b);
    for (; j < n; j++)
        s += x[j];
    return s;
}

/* sum of (double)x[j] * y[j] over [0, n), lanes as px__row_sum_d */
static inline double px__row_dot_d(const float *x, const float *y, size_t n)
{
    px__v4d a = {0, 0, 0, 0}, b = {0, 0, 0, 0}, xl, xh, yl, yh;
    size_t j = 0;
    for (; j + 8 <= n; j += 8) {
        px__v8f_to_d(px__v8f_load(x + j), &xl, &xh);
        px__v8f_to_d(px__v8f_load(y + j), &yl, &yh);
        a += xl * yl;
        b += xh * yh;
    }
    double s = px__v4d_hsum(a + b);
    for (; j < n; j++)
        s += (double)x[j] * y[j];
    return s;
}

#endif
