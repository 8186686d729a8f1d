/* px_tp_cpu.c: the CPU ops tensor parallelism needs beyond the dense ones:
 * the vocab-parallel embedding lookup and cross-entropy (each rank holds
 * vocab rows [v0, v0 + Vl) of wte and the matching logit columns) and the
 * bias add of a row-parallel matmul (after its all-reduce).
 *
 * The vocab-parallel cross-entropy follows Megatron-LM (Shoeybi et al.
 * 2019, section 3: "fuse the output embedding GEMM with the cross-entropy
 * loss ... communicate scalar losses instead of logits"): per row the local
 * max, then (after the caller's MAX all-reduce) the local sum of exp and
 * the target's logit, then (after a SUM all-reduce) the probabilities and
 * the loss. The loops mirror px_ops_cpu.c's crossentropy ops, so with one
 * rank (v0 0, Vl Vp) they compute the same values, and the row sums are
 * accumulated in double as there. Stateless; any thread. */
#include "px_kernels_cpu.h"

#include <float.h>
#include <math.h>

/* valid local columns of a rank holding [v0, v0 + Vl) of a padded vocab
 * whose first V columns are real */
static int valid_cols(int Vl, int v0, int V)
{
    int n = V - v0;
    return n < 0 ? 0 : n > Vl ? Vl : n;
}

void px__cpu_encoder_vp_forward(float *out, const int32_t *inp, const float *wte,
                                const float *wpe, int B, int T, int C, int v0, int Vl)
{
    for (int b = 0; b < B; b++) {
        for (int t = 0; t < T; t++) {
            float *o = out + ((size_t)b * T + t) * C;
            int id = inp[b * T + t] - v0;
            const float *pe = wpe ? wpe + (size_t)t * C : NULL;
            if (id >= 0 && id < Vl) {
                const float *we = wte + (size_t)id * C;
                for (int c = 0; c < C; c++)
                    o[c] = pe ? we[c] + pe[c] : we[c];
            } else {
                for (int c = 0; c < C; c++)
                    o[c] = pe ? pe[c] : 0.0f;
            }
        }
    }
}

void px__cpu_encoder_vp_backward(float *dwte, float *dwpe, const float *dout, const int32_t *inp,
                                 int B, int T, int C, int v0, int Vl)
{
    for (int b = 0; b < B; b++) {
        for (int t = 0; t < T; t++) {
            const float *d = dout + ((size_t)b * T + t) * C;
            int id = inp[b * T + t] - v0;
            if (id >= 0 && id < Vl) {
                float *dwe = dwte + (size_t)id * C;
                for (int c = 0; c < C; c++)
                    dwe[c] += d[c];
            }
            if (dwpe) {
                float *dpe = dwpe + (size_t)t * C;
                for (int c = 0; c < C; c++)
                    dpe[c] += d[c];
            }
        }
    }
}

void px__cpu_crossentropy_vp_max(float *rowmax, const float *logits, int N, int Vl, int v0,
                                 int V)
{
    int nv = valid_cols(Vl, v0, V);
    for (int n = 0; n < N; n++) {
        const float *l = logits + (size_t)n * Vl;
        float mx = -FLT_MAX; /* no real column here: the others' max wins */
        for (int v = 0; v < nv; v++)
            mx = l[v] > mx ? l[v] : mx;
        rowmax[n] = mx;
    }
}

void px__cpu_crossentropy_vp_exp(double *stats, float *probs, const float *logits,
                                 const float *rowmax, const int32_t *targets, int N, int Vl,
                                 int v0, int V)
{
    int nv = valid_cols(Vl, v0, V);
    for (int n = 0; n < N; n++) {
        const float *l = logits + (size_t)n * Vl;
        float *p = probs + (size_t)n * Vl;
        float mx = rowmax[n];
        int t = targets[n] - v0;
        /* the target logit before p is written: probs may be logits */
        stats[2 * n + 1] = t >= 0 && t < Vl ? (double)l[t] : 0.0;
        double sum = 0.0;
        for (int v = 0; v < nv; v++) {
            p[v] = expf(l[v] - mx);
            sum += p[v];
        }
        stats[2 * n] = sum;
    }
}

void px__cpu_crossentropy_vp_finish(float *losses, float *probs, const double *stats,
                                    const float *rowmax, int N, int Vl, int v0, int V)
{
    int nv = valid_cols(Vl, v0, V);
    for (int n = 0; n < N; n++) {
        float *p = probs + (size_t)n * Vl;
        double sum = stats[2 * n];
        float inv = (float)(1.0 / sum);
        for (int v = 0; v < nv; v++)
            p[v] *= inv;
        for (int v = nv; v < Vl; v++) /* padding: masked out */
            p[v] = 0.0f;
        losses[n] = (float)(log(sum) + rowmax[n] - stats[2 * n + 1]);
    }
}

void px__cpu_crossentropy_vp_backward(float *dlogits, const float *probs, const int32_t *targets,
                                      float dloss, int N, int Vl, int v0, int V)
{
    int nv = valid_cols(Vl, v0, V);
    for (int n = 0; n < N; n++) {
        const float *p = probs + (size_t)n * Vl;
        float *d = dlogits + (size_t)n * Vl;
        if (d == p) /* in place: as if dlogits had been zeroed (px_kernels.h) */
            for (int v = 0; v < nv; v++)
                d[v] = 0.0f + p[v] * dloss;
        else
            for (int v = 0; v < nv; v++)
                d[v] += p[v] * dloss;
        int t = targets[n] - v0;
        if (t >= 0 && t < Vl)
            d[t] -= dloss;
    }
}

void px__cpu_bias_forward(float *out, const float *bias, int N, int OC)
{
    for (int n = 0; n < N; n++) {
        float *o = out + (size_t)n * OC;
        for (int c = 0; c < OC; c++)
            o[c] += bias[c];
    }
}
