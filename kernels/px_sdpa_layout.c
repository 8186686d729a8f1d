/* px_sdpa_layout.c: the fused attention graphs' tensor shapes and the plan
 * cache key (px_sdpa_layout.h). Pure arithmetic; reentrant, no state. */
#include "px_sdpa_layout.h"

#include <string.h>

int px_sdpa_supported(int C, int NH)
{
    if (C <= 0 || NH <= 0 || C % NH)
        return 0;
    int hs = C / NH;
    return hs % 8 == 0 && hs >= 8 && hs <= 128;
}

static void set(px_sdpa_dims_t *t, int64_t d0, int64_t d1, int64_t d2, int64_t d3, int64_t s0,
                int64_t s1, int64_t s2, int64_t s3)
{
    t->dim[0] = d0, t->dim[1] = d1, t->dim[2] = d2, t->dim[3] = d3;
    t->stride[0] = s0, t->stride[1] = s1, t->stride[2] = s2, t->stride[3] = s3;
}

px_status_t px_sdpa_layout(const px_sdpa_key_t *key, px_sdpa_layout_t *lay_p)
{
    if (!key || !lay_p || key->B <= 0 || key->T <= 0 || key->NH <= 0 || key->hs <= 0)
        return PX_ERR_INVALID_ARGUMENT;
    const int64_t B = key->B, T = key->T, H = key->NH, D = key->hs;
    if (H > INT32_MAX / D || !px_sdpa_supported((int)(H * D), (int)H))
        return PX_ERR_INVALID_ARGUMENT;
    const int64_t C = H * D, C3 = 3 * C;
    /* the largest tensor: (B,NH,T,T) scores; every count below fits when it does */
    if (T > INT64_MAX / T || T * T > INT64_MAX / (B * H) || B * T > INT64_MAX / C3)
        return PX_ERR_INVALID_ARGUMENT;
    px_sdpa_layout_t l;
    memset(&l, 0, sizeof(l));
    /* q, k, v: head h's row t at t*3C + h*hs (+ C for k, 2C for v) */
    set(&l.q, B, H, T, D, T * C3, D, C3, 1);
    l.k = l.v = l.q;
    set(&l.kt, B, H, D, T, T * C3, D, 1, C3);
    l.vt = l.kt;
    /* out / dout (B,T,C): head h's row t at t*C + h*hs */
    set(&l.o, B, H, T, D, T * C, D, C, 1);
    set(&l.stats, B, H, T, 1, H * T, T, 1, 1);
    set(&l.s, B, H, T, T, H * T * T, T * T, T, 1);
    set(&l.st, B, H, T, T, H * T * T, T * T, 1, T);
    /* A virtual tensor (never in memory): these strides are the ones the
     * cuDNN frontend's SDPA backward gives its dO*O product, the form the
     * fused engines were matched against, kept as is. */
    set(&l.dodo, B, H, T, D, H * T * D, T * D, H * D, 1);
    set(&l.dqacc, B, H, T, D, H * T * D, T * D, D, 1);
    set(&l.scalar, 1, 1, 1, 1, 1, 1, 1, 1);
    l.k_off = (size_t)C;
    l.v_off = (size_t)(2 * C);
    l.qkv_elems = (size_t)(B * T * C3);
    l.o_elems = (size_t)(B * T * C);
    l.stats_elems = (size_t)(B * H * T);
    l.dqacc_elems = (size_t)(B * H * T * D);
    *lay_p = l;
    return PX_OK;
}

int px_sdpa_key_equal(const px_sdpa_key_t *a, const px_sdpa_key_t *b)
{
    return a->B == b->B && a->NH == b->NH && a->T == b->T && a->hs == b->hs &&
           a->causal == b->causal && a->dir == b->dir;
}

int px_sdpa_cache_find(const px_sdpa_key_t *keys, int n, const px_sdpa_key_t *key)
{
    for (int i = 0; i < n; i++)
        if (px_sdpa_key_equal(&keys[i], key))
            return i;
    return -1;
}
