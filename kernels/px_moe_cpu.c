/* px_moe_cpu.c: the mixture-of-experts router ops of the CPU op table
 * (px_kernels.h): softmax gating, top-k choice and the gates' backward.
 *
 * Softmax in float with the row max subtracted (as the cross-entropy op);
 * the top-k scan is strict (>), so equal probabilities go to the lower
 * expert index on every layout. Pure loops; any thread. */
#include <math.h>
#include <string.h>

#include "px_kernels_cpu.h"

void px__cpu_moe_router_forward(float *probs, int32_t *idx, float *weights, const float *logits,
                                int N, int E, int K)
{
    for (int n = 0; n < N; n++) {
        const float *lg = logits + (size_t)n * E;
        float *p = probs + (size_t)n * E, mx = lg[0], sum = 0.0f;
        for (int e = 1; e < E; e++)
            mx = lg[e] > mx ? lg[e] : mx;
        for (int e = 0; e < E; e++) {
            p[e] = expf(lg[e] - mx);
            sum += p[e];
        }
        for (int e = 0; e < E; e++)
            p[e] /= sum;
        int32_t *ix = idx + (size_t)n * K;
        float *w = weights + (size_t)n * K;
        for (int j = 0; j < K; j++) {
            int best = -1;
            for (int e = 0; e < E; e++) {
                int taken = 0;
                for (int i = 0; i < j; i++)
                    taken |= ix[i] == e;
                if (!taken && (best < 0 || p[e] > p[best]))
                    best = e;
            }
            ix[j] = best;
        }
        if (K == 1) {
            w[0] = p[ix[0]];
        } else {
            float s = 0.0f;
            for (int j = 0; j < K; j++)
                s += p[ix[j]];
            for (int j = 0; j < K; j++)
                w[j] = p[ix[j]] / s;
        }
    }
}

void px__cpu_moe_router_backward(float *dlogits, const float *probs, const int32_t *idx,
                                 const float *weights, const float *dweights, const float *daux,
                                 int N, int E, int K)
{
    for (int n = 0; n < N; n++) {
        const float *p = probs + (size_t)n * E, *w = weights + (size_t)n * K,
                    *dw = dweights + (size_t)n * K;
        const int32_t *ix = idx + (size_t)n * K;
        float *dl = dlogits + (size_t)n * E; /* dprobs first, then the softmax backward */
        for (int e = 0; e < E; e++)
            dl[e] = daux ? daux[e] : 0.0f;
        if (K == 1) {
            dl[ix[0]] += dw[0];
        } else {
            /* w_j = p_j / S, S = sum_i p_i over the chosen: dp_j = (dw_j -
             * sum_i dw_i w_i) / S */
            float s = 0.0f, dot = 0.0f;
            for (int j = 0; j < K; j++) {
                s += p[ix[j]];
                dot += dw[j] * w[j];
            }
            for (int j = 0; j < K; j++)
                dl[ix[j]] += (dw[j] - dot) / s;
        }
        float dot = 0.0f; /* softmax: dlogit_e = p_e (dp_e - sum_e' dp_e' p_e') */
        for (int e = 0; e < E; e++)
            dot += dl[e] * p[e];
        for (int e = 0; e < E; e++)
            dl[e] = p[e] * (dl[e] - dot);
    }
}

void px__cpu_moe_dispatch(float *dst, const float *src, const int32_t *rows, int n, int C)
{
    for (int s = 0; s < n; s++)
        memcpy(dst + (size_t)s * C, src + (size_t)rows[s] * C, (size_t)C * sizeof(float));
}

void px__cpu_moe_combine(float *out, const float *y, const int32_t *rows, const float *w,
                         const int32_t *widx, int n, int C)
{
    for (int s = 0; s < n; s++) {
        float g = w ? w[widx[s]] : 1.0f, *o = out + (size_t)rows[s] * C;
        const float *ys = y + (size_t)s * C;
        for (int c = 0; c < C; c++)
            o[c] += g * ys[c];
    }
}

void px__cpu_moe_combine_backward(float *dy, float *dw, const float *dout, const float *y,
                                  const int32_t *rows, const float *w, const int32_t *widx,
                                  int n, int C)
{
    for (int s = 0; s < n; s++) {
        const float *d = dout + (size_t)rows[s] * C, *ys = y + (size_t)s * C;
        float g = w[widx[s]], dot = 0.0f, *o = dy + (size_t)s * C;
        for (int c = 0; c < C; c++) {
            o[c] = g * d[c];
            dot += d[c] * ys[c];
        }
        dw[widx[s]] = dot;
    }
}
