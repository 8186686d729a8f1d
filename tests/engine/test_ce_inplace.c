/* test_ce_inplace.c: the cross-entropy ops in place (px_kernels.h, issue
 * 12: the engine keeps one (N,Vp) classifier buffer, the probabilities
 * written over the logits and their gradient over the probabilities).
 *
 * For the cpu table and the simulated device (which runs the cpu ops on
 * its own memory), with random logits over a padded vocab (N 7 rows, V 50
 * real columns of Vp 64), checks BYTE FOR BYTE that
 *   - crossentropy_forward with probs == logits gives the losses and
 *     probabilities of separate buffers;
 *   - crossentropy_backward in place gives the gradient a zeroed separate
 *     dlogits gets (what the engine computed before), padding columns 0;
 *   - the vocab-parallel steps (vp_max, vp_exp, vp_finish, vp_backward)
 *     likewise on two column shards [0,32) and [32,64) (the second holds
 *     the padding), with the target both inside and outside a shard;
 *   - both tables declare the cpu attention's (T,T) state (att_lse_only 0).
 * usage: test_ce_inplace */
#include <float.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "px_kernels.h"
#include "px_kernels_select.h"

#include "../px_check.h"

enum { N = 7, V = 50, VP = 64 };

/* a device copy of `bytes` of host memory */
static void *dev(const px_kernel_ops_t *k, const void *host, size_t bytes)
{
    void *d = k->mem_alloc(bytes);
    if (d && host)
        k->mem_copy_from_host(d, host, bytes);
    return d;
}

static void get(const px_kernel_ops_t *k, void *host, const void *d, size_t bytes)
{
    k->mem_copy_to_host(host, d, bytes);
    k->synchronize();
}

static void whole(const px_kernel_ops_t *k, const float *logits, const int32_t *tg)
{
    const size_t nv = (size_t)N * VP * sizeof(float);
    float *l1 = dev(k, logits, nv), *p1 = dev(k, NULL, nv), *d1 = dev(k, NULL, nv);
    float *l2 = dev(k, logits, nv), *ls1 = dev(k, NULL, N * 4), *ls2 = dev(k, NULL, N * 4);
    int32_t *t = dev(k, tg, N * sizeof(int32_t));
    static float a[N * VP], b[N * VP], la[N], lb[N];
    /* separate buffers, as before */
    k->crossentropy_forward(ls1, p1, l1, t, N, V, VP);
    k->mem_set(d1, 0, nv);
    k->crossentropy_backward(d1, p1, t, 1.0f / N, N, V, VP);
    /* one buffer */
    k->crossentropy_forward(ls2, l2, l2, t, N, V, VP);
    get(k, la, ls1, sizeof la);
    get(k, lb, ls2, sizeof lb);
    CHECK(!memcmp(la, lb, sizeof la), "%s: in-place losses differ", k->name);
    get(k, a, p1, nv);
    get(k, b, l2, nv);
    CHECK(!memcmp(a, b, nv), "%s: in-place probabilities differ", k->name);
    k->crossentropy_backward(l2, l2, t, 1.0f / N, N, V, VP);
    get(k, a, d1, nv);
    get(k, b, l2, nv);
    CHECK(!memcmp(a, b, nv), "%s: in-place gradient differs", k->name);
    int pad0 = 1;
    for (int n = 0; n < N; n++)
        for (int v = V; v < VP; v++)
            pad0 &= b[n * VP + v] == 0.0f;
    CHECK(pad0, "%s: padding columns of the in-place gradient not 0", k->name);
    CHECK(a[0] != 0.0f, "%s: gradient all zero?", k->name);
    k->mem_free(l1), k->mem_free(p1), k->mem_free(d1), k->mem_free(l2);
    k->mem_free(ls1), k->mem_free(ls2), k->mem_free(t);
}

/* one shard [v0, v0 + VL) of the vocab-parallel ops, separate vs in place;
 * the row max is the full row's (as the all-reduce MAX gives), the sums
 * the shard's own (no all-reduce needed for the comparison) */
static void shard(const px_kernel_ops_t *k, const float *logits, const int32_t *tg, int v0)
{
    enum { VL = VP / 2 };
    static float host[N * VL], a[N * VL], b[N * VL], rm[N];
    for (int n = 0; n < N; n++) {
        memcpy(host + n * VL, logits + n * VP + v0, VL * sizeof(float));
        float m = -FLT_MAX;
        for (int v = 0; v < V; v++)
            m = logits[n * VP + v] > m ? logits[n * VP + v] : m;
        rm[n] = m;
    }
    const size_t nv = (size_t)N * VL * sizeof(float);
    float *l1 = dev(k, host, nv), *p1 = dev(k, NULL, nv), *d1 = dev(k, NULL, nv);
    float *l2 = dev(k, host, nv), *rmax = dev(k, rm, sizeof rm);
    float *ls1 = dev(k, NULL, N * 4), *ls2 = dev(k, NULL, N * 4);
    double *s1 = dev(k, NULL, 2 * N * sizeof(double)), *s2 = dev(k, NULL, 2 * N * sizeof(double));
    int32_t *t = dev(k, tg, N * sizeof(int32_t));
    float lm1[N], lm2[N];
    float *m1 = dev(k, NULL, sizeof lm1), *m2 = dev(k, NULL, sizeof lm2);
    k->crossentropy_vp_max(m1, l1, N, VL, v0, V);
    k->crossentropy_vp_exp(s1, p1, l1, rmax, t, N, VL, v0, V);
    k->crossentropy_vp_finish(ls1, p1, s1, rmax, N, VL, v0, V);
    k->mem_set(d1, 0, nv);
    k->crossentropy_vp_backward(d1, p1, t, 1.0f / N, N, VL, v0, V);
    k->crossentropy_vp_max(m2, l2, N, VL, v0, V);
    k->crossentropy_vp_exp(s2, l2, l2, rmax, t, N, VL, v0, V);
    k->crossentropy_vp_finish(ls2, l2, s2, rmax, N, VL, v0, V);
    double sa[2 * N], sb[2 * N];
    get(k, sa, s1, sizeof sa);
    get(k, sb, s2, sizeof sb);
    CHECK(!memcmp(sa, sb, sizeof sa), "%s v0 %d: in-place sums / target logits differ", k->name,
          v0);
    get(k, a, ls1, N * 4);
    get(k, b, ls2, N * 4);
    CHECK(!memcmp(a, b, N * 4), "%s v0 %d: in-place losses differ", k->name, v0);
    get(k, a, p1, nv);
    get(k, b, l2, nv);
    CHECK(!memcmp(a, b, nv), "%s v0 %d: in-place probabilities differ", k->name, v0);
    k->crossentropy_vp_backward(l2, l2, t, 1.0f / N, N, VL, v0, V);
    get(k, a, d1, nv);
    get(k, b, l2, nv);
    CHECK(!memcmp(a, b, nv), "%s v0 %d: in-place gradient differs", k->name, v0);
    k->mem_free(l1), k->mem_free(p1), k->mem_free(d1), k->mem_free(l2), k->mem_free(rmax);
    k->mem_free(ls1), k->mem_free(ls2), k->mem_free(s1), k->mem_free(s2), k->mem_free(t);
    k->mem_free(m1), k->mem_free(m2);
}

int main(void)
{
    static float logits[N * VP];
    int32_t tg[N] = {0, 49, 31, 32, 7, 40, 13}; /* both shards, the edges */
    srand(12);
    for (int i = 0; i < N * VP; i++)
        logits[i] = 8.0f * ((float)rand() / (float)RAND_MAX - 0.5f);
    setenv("PX_SIM_DEVICE", "1", 1);
    const char *devs[2] = {"cpu", "sim:0"};
    for (int d = 0; d < 2; d++) {
        const px_kernel_ops_t *k = NULL;
        char err[256];
        if (px_kernels_select(devs[d], &k, err, sizeof err) != PX_OK) {
            CHECK(0, "select %s: %s", devs[d], err);
            continue;
        }
        /* both run the cpu attention, which keeps the (B,NH,T,T)
         * probabilities: the plan's (T,T) att and scratch (plan.h _dev) */
        CHECK(k->att_lse_only == 0, "%s declares the fused attention's state", k->name);
        whole(k, logits, tg);
        shard(k, logits, tg, 0);
        shard(k, logits, tg, VP / 2);
        printf("%s: in-place cross-entropy %s\n", k->name, fails ? "differs" : "bit for bit");
    }
    printf(fails ? "FAIL (%d)\n" : "PASS\n", fails);
    return fails ? 1 : 0;
}
