/* test_reduce.c: the reduction kernels the collectives use
 * (kernels/px_reduce.h): fp16/bf16 conversions against known bit patterns
 * and exhaustive round trips, rounding to nearest even, every dtype x op of
 * px_reduce_apply, AVG division (exact for floats, truncation toward zero
 * for integers), integer wrap-around. Single process, unit suite. */
#include <math.h>
#include <stdio.h>
#include <stdint.h>
#include <string.h>

#include "px_reduce.h"

static int fails;

#define CHECK(cond, ...) do { if (!(cond)) { fprintf(stderr, "FAIL: " __VA_ARGS__); \
    fprintf(stderr, "\n"); fails++; } } while (0)

static uint16_t h(float f)
{
    uint16_t out;
    px_f32_to_f16(&out, &f, 1);
    return out;
}

static uint16_t b(float f)
{
    uint16_t out;
    px_f32_to_bf16(&out, &f, 1);
    return out;
}

static float fbits(uint32_t u)
{
    float f;
    memcpy(&f, &u, 4);
    return f;
}

int main(void)
{
    /* fp16 known values */
    CHECK(h(1.0f) == 0x3C00, "fp16(1) = %#x", h(1.0f));
    CHECK(h(-2.0f) == 0xC000, "fp16(-2)");
    CHECK(h(65504.0f) == 0x7BFF, "fp16(65504) = %#x", h(65504.0f));
    CHECK(h(65520.0f) == 0x7C00, "fp16(65520) must overflow to inf: %#x", h(65520.0f));
    CHECK(h(65519.0f) == 0x7BFF, "fp16(65519) = %#x", h(65519.0f));
    CHECK(h(1.0f / 3.0f) == 0x3555, "fp16(1/3) = %#x", h(1.0f / 3.0f));
    CHECK(h(0x1p-24f) == 0x0001, "fp16(2^-24) = %#x", h(0x1p-24f));
    CHECK(h(0x1p-25f) == 0x0000, "fp16(2^-25) ties to even 0: %#x", h(0x1p-25f));
    CHECK(h(0x1.8p-24f) == 0x0002, "fp16(1.5*2^-24) ties to even 2: %#x", h(0x1.8p-24f));
    CHECK(h(0x1p-14f) == 0x0400, "fp16(smallest normal) = %#x", h(0x1p-14f));
    CHECK(h(1.0f + 0x1p-11f) == 0x3C00, "fp16 tie 1+2^-11 -> even: %#x", h(1.0f + 0x1p-11f));
    CHECK(h(1.0f + 0x1.8p-10f) == 0x3C02, "fp16 tie 1+3*2^-11 -> even: %#x",
          h(1.0f + 0x1.8p-10f));
    CHECK((h(NAN) & 0x7C00) == 0x7C00 && (h(NAN) & 0x3FF), "fp16(NaN) = %#x", h(NAN));
    CHECK(h(INFINITY) == 0x7C00 && h(-INFINITY) == 0xFC00, "fp16(inf)");
    /* bf16 known values */
    CHECK(b(1.0f) == 0x3F80, "bf16(1)");
    CHECK(b(1.0f / 3.0f) == 0x3EAB, "bf16(1/3) = %#x", b(1.0f / 3.0f));
    CHECK(b(fbits(0x3F808000u)) == 0x3F80, "bf16 tie -> even (down)");
    CHECK(b(fbits(0x3F818000u)) == 0x3F82, "bf16 tie -> even (up)");
    CHECK(b(fbits(0x3F808001u)) == 0x3F81, "bf16 above tie -> up");
    CHECK(b(fbits(0x7F7FFFFFu)) == 0x7F80, "bf16(FLT_MAX) rounds to inf");
    CHECK((b(NAN) & 0x7F80) == 0x7F80 && (b(NAN) & 0x7F), "bf16(NaN) = %#x", b(NAN));
    /* exhaustive round trips (NaNs aside) */
    for (uint32_t u = 0; u < 65536; u++) {
        uint16_t x = (uint16_t)u, y;
        float f;
        if ((x & 0x7C00) != 0x7C00 || !(x & 0x3FF)) {
            px_f16_to_f32(&f, &x, 1);
            px_f32_to_f16(&y, &f, 1);
            CHECK(x == y, "fp16 round trip %#x -> %g -> %#x", x, f, y);
        }
        if ((x & 0x7F80) != 0x7F80 || !(x & 0x7F)) {
            px_bf16_to_f32(&f, &x, 1);
            px_f32_to_bf16(&y, &f, 1);
            CHECK(x == y, "bf16 round trip %#x -> %g -> %#x", x, f, y);
        }
    }
    /* px_reduce_apply: every op on floats, in place and with swapped operands */
    {
        float a[4] = {1, -2, 3.5f, 0}, c[4] = {4, 5, -1, 0}, d[4];
        px_reduce_apply(PX_FLOAT32, PX_SUM, d, a, c, 4);
        CHECK(d[0] == 5 && d[1] == 3 && d[2] == 2.5f, "f32 sum");
        px_reduce_apply(PX_FLOAT32, PX_PROD, d, a, c, 4);
        CHECK(d[0] == 4 && d[1] == -10 && d[2] == -3.5f, "f32 prod");
        px_reduce_apply(PX_FLOAT32, PX_MIN, d, a, c, 4);
        CHECK(d[0] == 1 && d[1] == -2 && d[2] == -1, "f32 min");
        px_reduce_apply(PX_FLOAT32, PX_MAX, a, a, c, 4); /* in place */
        CHECK(a[0] == 4 && a[1] == 5 && a[2] == 3.5f, "f32 max in place");
    }
    /* integers wrap; AVG truncates toward zero */
    {
        int32_t x[3] = {INT32_MAX, -7, 7}, y[3] = {1, 0, 0};
        uint8_t u[2] = {200, 3}, v[2] = {100, 250};
        int64_t l[2] = {-9, 9};
        px_reduce_apply(PX_INT32, PX_SUM, x, x, y, 3);
        CHECK(x[0] == INT32_MIN, "int32 sum wraps");
        px_reduce_avg_finish(PX_INT32, x + 1, 2, 2);
        CHECK(x[1] == -3 && x[2] == 3, "int32 avg truncates toward zero: %d %d", x[1], x[2]);
        px_reduce_apply(PX_UINT8, PX_SUM, u, u, v, 2);
        CHECK(u[0] == 44 && u[1] == 253, "uint8 sum wraps");
        px_reduce_avg_finish(PX_INT64, l, 2, 4);
        CHECK(l[0] == -2 && l[1] == 2, "int64 avg");
    }
    /* float AVG divides exactly: 10 / 3 rounds as IEEE division does,
     * not as 10 * (1/3) */
    {
        float f[2] = {10.0f, 6.0f};
        double g[1] = {10.0};
        uint16_t hb[1] = {b(7.0f)};
        px_reduce_avg_finish(PX_FLOAT32, f, 2, 3);
        CHECK(f[0] == 10.0f / 3.0f && f[1] == 2.0f, "f32 avg: %.9g", f[0]);
        px_reduce_avg_finish(PX_FLOAT64, g, 1, 3);
        CHECK(g[0] == 10.0 / 3.0, "f64 avg");
        px_reduce_avg_finish(PX_BFLOAT16, hb, 1, 2);
        CHECK(hb[0] == b(3.5f), "bf16 avg");
    }
    /* halves reduce in fp32, rounded once per call */
    {
        uint16_t p[1] = {h(1.0f)}, q[1] = {h(0x1p-11f)};
        px_reduce_apply(PX_FLOAT16, PX_SUM, p, p, q, 1);
        CHECK(p[0] == h(1.0f + 0x1p-11f), "fp16 sum rounds once");
    }
    if (fails)
        return 1;
    printf("reduce kernels: ok\n");
    return 0;
}
