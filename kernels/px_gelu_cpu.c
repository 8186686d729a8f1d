/* px_gelu_cpu.c: GELU (tanh form) forward/backward on the CPU.
 *
 * GELU is the engine's largest non-GEMM cost (2 x B*T*4C elements per layer),
 * so its loops avoid libm calls (tanh by a polynomial exp) and are built
 * with -fno-trapping-math -ffinite-math-only -fno-math-errno (this file
 * only, see meson.build) so that the clamps become min/max and the loops
 * vectorise; an AVX-512 or AVX2 clone is picked at load time where the CPU
 * has it. The project builds as ISO C11 (no FMA contraction) and the loops
 * are elementwise, so each clone does the same roundings per element: the
 * AVX-512 and AVX2 clones gave the same bits for 4M inputs, forward and
 * backward.
 * Inputs must be finite. Stateless; any thread. */
#include "px_kernels_cpu.h"

#include <stdint.h>

#define GELU_SCALE 0.7978845608028654f /* sqrt(2/pi) */

/* exp(x) for x in [-20, 20] without a libm call, so GELU loops vectorise:
 * x = n ln2 + r, |r| <= ln2/2, exp(r) by a degree-7 Taylor polynomial
 * (truncation < 3e-9 relative), times 2^n built in the exponent bits.
 * Relative error ~2 ulp, measured against expf in tests/kernels. */
static inline float exp_poly(float x)
{
    const float ln2_hi = 0.693145751953125f, ln2_lo = 1.428606765330187e-06f;
    /* round to nearest by the 1.5*2^23 trick (vectorises; |x*log2e| < 2^22) */
    float n = (x * 1.4426950408889634f + 12582912.0f) - 12582912.0f;
    float r = (x - n * ln2_hi) - n * ln2_lo;
    float p = 1.0f + r * (1.0f + r * (0.5f + r * (1.0f / 6 + r * (1.0f / 24 + r * (1.0f / 120 +
              r * (1.0f / 720 + r * (1.0f / 5040)))))));
    union { uint32_t u; float f; } sc = {.u = (uint32_t)((int32_t)n + 127) << 23};
    return p * sc.f;
}

/* tanh(u) = 1 - 2 / (exp(2u) + 1), with u clamped to [-9, 9] where fp32
 * tanh is already +-1. Absolute error ~1e-7 (what GELU needs). */
static inline float tanh_fast(float u)
{
    u = __builtin_fminf(__builtin_fmaxf(u, -9.0f), 9.0f);
    return 1.0f - 2.0f / (exp_poly(2.0f * u) + 1.0f);
}

/* GELU loops are the engine's main non-GEMM cost: built for AVX-512 and AVX2 too
 * (the AVX-512 clone 1.9x the AVX2 one on Zen 5: px-attn-bench 4 256 384 6),
 * chosen at load time (GCC target_clones / ifunc). */
#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__)
#define PX_CLONES __attribute__((target_clones("avx512f", "avx2", "default")))
#else
#define PX_CLONES
#endif

PX_CLONES
void px__cpu_gelu_forward(float *restrict out, const float *restrict inp, size_t N)
{
    for (size_t i = 0; i < N; i++) {
        float x = inp[i];
        float u = GELU_SCALE * (x + 0.044715f * x * x * x);
        out[i] = 0.5f * x * (1.0f + tanh_fast(u));
    }
}

PX_CLONES
void px__cpu_gelu_backward(float *restrict dinp, const float *restrict inp,
                           const float *restrict dout, size_t N)
{
    for (size_t i = 0; i < N; i++) {
        float x = inp[i];
        float u = GELU_SCALE * (x + 0.044715f * x * x * x);
        float th = tanh_fast(u);
        float sech2 = 1.0f - th * th;
        float g = 0.5f * (1.0f + th) +
                  0.5f * x * sech2 * GELU_SCALE * (1.0f + 3.0f * 0.044715f * x * x);
        dinp[i] += g * dout[i];
    }
}
