/* test_sdpa_layout.c: the tensor views the cuDNN attention graphs are given
 * (px_sdpa_layout.h) address exactly the elements of the op table's
 * layouts, and the plan cache's key lookup. No GPU, no cuDNN: unit suite.
 *
 * For every element (b, h, row, col) of each 4-d view, the offset its
 * strides give must be the offset the op's own layout formula gives:
 *   q[b,h,t,d] = qkv[b*T*3C + t*3C + h*hs + d]       (k: + C, v: + 2C)
 *   kt[b,h,d,t] = k[b,h,t,d], vt likewise
 *   o[b,h,t,d]  = out[b*T*C + t*C + h*hs + d]
 *   stats[b,h,t,0] = lse[(b*NH + h)*T + t]
 *   s packed (B,NH,T,T); st[b,h,i,j] = s[b,h,j,i]
 * plus the element counts, the shapes refused, and the cache lookup. */
#include <stdio.h>
#include <string.h>

#include "px_sdpa_layout.h"

#include "../px_check.h"

static int64_t at(const px_sdpa_dims_t *t, int64_t i0, int64_t i1, int64_t i2, int64_t i3)
{
    return i0 * t->stride[0] + i1 * t->stride[1] + i2 * t->stride[2] + i3 * t->stride[3];
}

static int dims_are(const px_sdpa_dims_t *t, int64_t d0, int64_t d1, int64_t d2, int64_t d3)
{
    return t->dim[0] == d0 && t->dim[1] == d1 && t->dim[2] == d2 && t->dim[3] == d3;
}

static void check_shape(int B, int T, int NH, int hs)
{
    px_sdpa_key_t key = {B, NH, T, hs, 1, PX_SDPA_FWD};
    px_sdpa_layout_t l;
    const int64_t C = (int64_t)NH * hs, C3 = 3 * C;
    CHECK(px_sdpa_layout(&key, &l) == PX_OK, "B %d T %d NH %d hs %d accepted", B, T, NH, hs);
    CHECK(dims_are(&l.q, B, NH, T, hs) && dims_are(&l.k, B, NH, T, hs) &&
               dims_are(&l.v, B, NH, T, hs) && dims_are(&l.o, B, NH, T, hs),
           "q, k, v, o are (B,NH,T,hs)");
    CHECK(dims_are(&l.kt, B, NH, hs, T) && dims_are(&l.vt, B, NH, hs, T),
           "kt, vt are (B,NH,hs,T)");
    CHECK(dims_are(&l.stats, B, NH, T, 1), "stats (B,NH,T,1)");
    CHECK(dims_are(&l.s, B, NH, T, T) && dims_are(&l.st, B, NH, T, T), "scores (B,NH,T,T)");
    CHECK(dims_are(&l.scalar, 1, 1, 1, 1), "scalar (1,1,1,1)");
    CHECK(l.k_off == (size_t)C && l.v_off == (size_t)(2 * C), "k at C, v at 2C");
    CHECK(l.qkv_elems == (size_t)(B * T * C3) && l.o_elems == (size_t)(B * T * C) &&
               l.stats_elems == (size_t)B * NH * T && l.dqacc_elems == (size_t)(B * T * C),
           "element counts");
    CHECK(l.q.stride[3] == 1 && l.o.stride[3] == 1 && l.kt.stride[2] == 1,
           "the head's channels are contiguous (cuDNN's requirement)");
    int64_t bad = 0, n = 0;
    for (int64_t b = 0; b < B; b++)
        for (int64_t h = 0; h < NH; h++)
            for (int64_t t = 0; t < T; t++) {
                for (int64_t d = 0; d < hs; d++) {
                    int64_t qkv = b * T * C3 + t * C3 + h * hs + d;
                    int64_t out = b * T * C + t * C + h * hs + d;
                    bad += at(&l.q, b, h, t, d) != qkv;
                    bad += at(&l.k, b, h, t, d) + (int64_t)l.k_off != qkv + C;
                    bad += at(&l.v, b, h, t, d) + (int64_t)l.v_off != qkv + 2 * C;
                    bad += at(&l.kt, b, h, d, t) != at(&l.k, b, h, t, d);
                    bad += at(&l.vt, b, h, d, t) != at(&l.v, b, h, t, d);
                    bad += at(&l.o, b, h, t, d) != out;
                    bad += at(&l.dqacc, b, h, t, d) != ((b * NH + h) * T + t) * hs + d;
                    n += 7;
                }
                bad += at(&l.stats, b, h, t, 0) != (b * NH + h) * T + t;
                for (int64_t j = 0; j < T; j += 1 + T / 7) {
                    bad += at(&l.s, b, h, t, j) != ((b * NH + h) * T + t) * T + j;
                    bad += at(&l.st, b, h, j, t) != at(&l.s, b, h, t, j);
                    n += 2;
                }
                n++;
            }
    CHECK(bad == 0, "B %d T %d NH %d hs %d: %lld of %lld element offsets wrong", B, T, NH, hs,
           (long long)bad, (long long)n);
    /* the direction does not change a shape */
    px_sdpa_layout_t lb;
    key.dir = PX_SDPA_BWD;
    CHECK(px_sdpa_layout(&key, &lb) == PX_OK && !memcmp(&l, &lb, sizeof(l)),
           "backward layout equals forward");
}

int main(void)
{
    check_shape(2, 5, 3, 8);    /* tiny: every element */
    check_shape(1, 70, 2, 128); /* hs 128 */
    check_shape(2, 33, 12, 64); /* GPT-2's heads */
    {   /* GPT-2 124M at batch 8: the strides the GPU check runs */
        px_sdpa_key_t k = {8, 12, 1024, 64, 1, PX_SDPA_FWD};
        px_sdpa_layout_t l;
        CHECK(px_sdpa_layout(&k, &l) == PX_OK, "124M shape");
        const int64_t q[4] = {1024 * 2304, 64, 2304, 1}, kt[4] = {1024 * 2304, 64, 1, 2304};
        const int64_t o[4] = {1024 * 768, 64, 768, 1}, st[4] = {12 * 1024 * 1024, 1024 * 1024,
                                                                 1, 1024};
        CHECK(!memcmp(l.q.stride, q, sizeof(q)), "q strides (T 3C, hs, 3C, 1)");
        CHECK(!memcmp(l.kt.stride, kt, sizeof(kt)), "kt strides (T 3C, hs, 1, 3C)");
        CHECK(!memcmp(l.o.stride, o, sizeof(o)), "o strides (T C, hs, C, 1)");
        CHECK(!memcmp(l.st.stride, st, sizeof(st)), "s^T strides");
        CHECK(l.k_off * 2 % 16 == 0 && l.q.stride[2] * 2 % 16 == 0,
               "bf16 k, v and rows 16-byte aligned");
    }
    /* refused: head size not a multiple of 8, past 128, sizes not positive */
    static const int badc[][4] = {{1, 8, 2, 12}, {1, 8, 1, 136}, {0, 8, 2, 64}, {1, 0, 2, 64},
                                  {1, 8, 0, 64}, {1, 8, 2, 0}, {1, 8, 2, 4}};
    for (size_t i = 0; i < sizeof(badc) / sizeof(badc[0]); i++) {
        px_sdpa_key_t k = {badc[i][0], badc[i][2], badc[i][1], badc[i][3], 1, PX_SDPA_FWD};
        px_sdpa_layout_t l;
        memset(&l, 0x5a, sizeof(l));
        px_sdpa_layout_t before = l;
        CHECK(px_sdpa_layout(&k, &l) == PX_ERR_INVALID_ARGUMENT,
               "B %d T %d NH %d hs %d refused", k.B, k.T, k.NH, k.hs);
        CHECK(!memcmp(&l, &before, sizeof(l)), "a refused layout writes nothing");
    }
    CHECK(px_sdpa_supported(768, 12) && px_sdpa_supported(72, 3) && px_sdpa_supported(256, 2),
           "hs 64, 24, 128 supported");
    CHECK(!px_sdpa_supported(100, 3) && !px_sdpa_supported(48, 4) &&
               !px_sdpa_supported(288, 1) && !px_sdpa_supported(768, 0),
           "C %% NH, hs 12, hs 288, NH 0 not supported");
    {   /* the plan cache key: every field counts */
        px_sdpa_key_t ks[4] = {{8, 12, 1024, 64, 1, PX_SDPA_FWD}, {8, 12, 1024, 64, 1, PX_SDPA_BWD},
                               {8, 12, 1024, 64, 0, PX_SDPA_FWD}, {4, 12, 1024, 64, 1, PX_SDPA_FWD}};
        for (int i = 0; i < 4; i++)
            CHECK(px_sdpa_cache_find(ks, 4, &ks[i]) == i, "key %d found at its slot", i);
        px_sdpa_key_t other = {8, 12, 512, 64, 1, PX_SDPA_FWD};
        CHECK(px_sdpa_cache_find(ks, 4, &other) == -1, "another T is a miss");
        other = (px_sdpa_key_t){8, 6, 1024, 128, 1, PX_SDPA_FWD};
        CHECK(px_sdpa_cache_find(ks, 4, &other) == -1, "same C, other heads: a miss");
        CHECK(px_sdpa_cache_find(ks, 0, &ks[0]) == -1, "empty cache: a miss");
    }
    printf("%s\n", fails ? "FAIL" : "PASS");
    return fails ? 1 : 0;
}
