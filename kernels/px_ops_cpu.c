/* px_ops_cpu.c: the element-wise and row-wise CPU ops of the GPT engine:
 * encoder (token + position embedding), LayerNorm, residual add,
 * fused softmax + cross-entropy, AdamW, and two vector helpers (GELU is in
 * px_gelu_cpu.c, built with its own flags).
 *
 * Follows llm.c's train_gpt2.c (Karpathy, MIT) for the math; backward ops
 * accumulate into their gradient outputs (px_kernels.h). Row statistics are
 * accumulated in double where a long sum meets a small result (LayerNorm,
 * softmax sums, norms). Stateless; any thread. */
#include "px_kernels_cpu.h"
#include "px_vec_cpu.h"

#include <math.h>
#include <string.h>

void px__cpu_encoder_forward(float *out, const int32_t *inp, const float *wte, const float *wpe,
                             int B, int T, int C)
{
    for (int b = 0; b < B; b++) {
        for (int t = 0; t < T; t++) {
            float *o = out + ((size_t)b * T + t) * C;
            const float *we = wte + (size_t)inp[b * T + t] * C;
            const float *pe = wpe + (size_t)t * C;
            for (int c = 0; c < C; c++)
                o[c] = we[c] + pe[c];
        }
    }
}

void px__cpu_encoder_backward(float *dwte, float *dwpe, const float *dout, const int32_t *inp,
                              int B, int T, int C)
{
    for (int b = 0; b < B; b++) {
        for (int t = 0; t < T; t++) {
            const float *d = dout + ((size_t)b * T + t) * C;
            float *dwe = dwte + (size_t)inp[b * T + t] * C;
            float *dpe = dwpe + (size_t)t * C;
            for (int c = 0; c < C; c++) {
                dwe[c] += d[c];
                dpe[c] += d[c];
            }
        }
    }
}

/* Row statistics in double over 8 lanes (px_vec_cpu.h: the same bits on
 * every ISA and for a row whatever N is), the element loops vectorised; an
 * AVX2 clone is picked at load time. */
PX__CLONES
void px__cpu_layernorm_forward(float *restrict out, float *restrict mean, float *restrict rstd,
                               const float *restrict inp, const float *restrict weight,
                               const float *restrict bias, int N, int C)
{
    const float eps = 1e-5f;
    for (int n = 0; n < N; n++) {
        const float *x = inp + (size_t)n * C;
        float *o = out + (size_t)n * C;
        float m = (float)(px__row_sum_d(x, (size_t)C) / C);
        /* sum of (x - m)^2, each difference rounded to float as before */
        px__v4d a = {0, 0, 0, 0}, b = {0, 0, 0, 0}, lo, hi;
        px__v8f vm = px__v8f_set1(m);
        int c = 0;
        for (; c + 8 <= C; c += 8) {
            px__v8f_to_d(px__v8f_load(x + c) - vm, &lo, &hi);
            a += lo * lo;
            b += hi * hi;
        }
        double v = px__v4d_hsum(a + b);
        for (; c < C; c++) {
            float d = x[c] - m;
            v += (double)d * d;
        }
        float r = 1.0f / sqrtf((float)(v / C) + eps);
        for (c = 0; c < C; c++)
            o[c] = (x[c] - m) * r * weight[c] + bias[c];
        mean[n] = m;
        rstd[n] = r;
    }
}

PX__CLONES
void px__cpu_layernorm_backward(float *restrict dinp, float *restrict dweight,
                                float *restrict dbias, const float *restrict dout,
                                const float *restrict inp, const float *restrict weight,
                                const float *restrict mean, const float *restrict rstd, int N,
                                int C)
{
    for (int n = 0; n < N; n++) {
        const float *d = dout + (size_t)n * C;
        const float *x = inp + (size_t)n * C;
        float *dx = dinp + (size_t)n * C;
        float m = mean[n], r = rstd[n];
        /* two reductions: mean(dnorm) and mean(dnorm * norm), in double */
        px__v4d s1a = {0, 0, 0, 0}, s1b = {0, 0, 0, 0}, s2a = {0, 0, 0, 0},
                s2b = {0, 0, 0, 0}, dl, dh, nl, nh;
        px__v8f vm = px__v8f_set1(m), vr = px__v8f_set1(r);
        int c = 0;
        for (; c + 8 <= C; c += 8) {
            px__v8f norm = (px__v8f_load(x + c) - vm) * vr;
            px__v8f dnorm = px__v8f_load(weight + c) * px__v8f_load(d + c);
            px__v8f_to_d(dnorm, &dl, &dh);
            px__v8f_to_d(norm, &nl, &nh);
            s1a += dl;
            s1b += dh;
            s2a += dl * nl;
            s2b += dh * nh;
        }
        double dnorm_mean = px__v4d_hsum(s1a + s1b), dnorm_norm_mean = px__v4d_hsum(s2a + s2b);
        for (; c < C; c++) {
            float norm = (x[c] - m) * r;
            float dnorm = weight[c] * d[c];
            dnorm_mean += dnorm;
            dnorm_norm_mean += (double)dnorm * norm;
        }
        float dm = (float)(dnorm_mean / C), dnm = (float)(dnorm_norm_mean / C);
        for (c = 0; c < C; c++) {
            float norm = (x[c] - m) * r;
            float dnorm = weight[c] * d[c];
            dbias[c] += d[c];
            dweight[c] += norm * d[c];
            dx[c] += (dnorm - dm - norm * dnm) * r;
        }
    }
}

PX__CLONES
void px__cpu_residual_forward(float *out, const float *inp1, const float *inp2, size_t N)
{
    for (size_t i = 0; i < N; i++)
        out[i] = inp1[i] + inp2[i];
}

PX__CLONES
void px__cpu_residual_backward(float *dinp1, float *dinp2, const float *dout, size_t N)
{
    for (size_t i = 0; i < N; i++) {
        dinp1[i] += dout[i];
        dinp2[i] += dout[i];
    }
}

void px__cpu_crossentropy_forward(float *losses, float *probs, const float *logits,
                                  const int32_t *targets, int N, int V, int Vp)
{
    for (int n = 0; n < N; n++) {
        const float *l = logits + (size_t)n * Vp;
        float *p = probs + (size_t)n * Vp;
        const float lt = l[targets[n]]; /* before p is written: probs may be logits */
        float mx = l[0];
        for (int v = 1; v < V; v++)
            mx = l[v] > mx ? l[v] : mx;
        double sum = 0.0;
        for (int v = 0; v < V; v++) {
            p[v] = expf(l[v] - mx);
            sum += p[v];
        }
        float inv = (float)(1.0 / sum);
        for (int v = 0; v < V; v++)
            p[v] *= inv;
        for (int v = V; v < Vp; v++) /* padding: masked out */
            p[v] = 0.0f;
        losses[n] = (float)(log(sum) + mx - lt);
    }
}

/* The whole vocabulary is the one shard at column 0 of width Vp: the same
 * additions as px__cpu_crossentropy_vp_backward (px_tp_cpu.c), in place or
 * accumulating alike. */
void px__cpu_crossentropy_backward(float *dlogits, const float *probs, const int32_t *targets,
                                   float dloss, int N, int V, int Vp)
{
    px__cpu_crossentropy_vp_backward(dlogits, probs, targets, dloss, N, Vp, 0, V);
}

/* AdamW touches 4 floats per parameter: built for AVX2 too (ifunc). */
#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__)
__attribute__((target_clones("avx2", "default")))
#endif
void px__cpu_adamw_update(float *restrict params, const float *restrict grads,
                          float *restrict m, float *restrict v, size_t n, float lr, float beta1,
                          float beta2, float eps, float weight_decay, int t, float grad_scale)
{
    float bc1 = 1.0f - powf(beta1, (float)t);
    float bc2_sqrt = sqrtf(1.0f - powf(beta2, (float)t));
    float step_size = lr / bc1;
    float decay = 1.0f - lr * weight_decay;
    for (size_t i = 0; i < n; i++) {
        float g = grads[i] * grad_scale; /* exact for 1; as scale() then 1 otherwise */
        float mi = beta1 * m[i] + (1.0f - beta1) * g;
        float vi = beta2 * v[i] + (1.0f - beta2) * g * g;
        float denom = sqrtf(vi) / bc2_sqrt + eps;
        m[i] = mi;
        v[i] = vi;
        params[i] = params[i] * decay - step_size * (mi / denom);
    }
}

/* in 8 lanes of double (px_vec_cpu.h); AVX2 clone */
PX__CLONES
double px__cpu_sumsq(const float *x, size_t n)
{
    return px__row_dot_d(x, x, n);
}

PX__CLONES
void px__cpu_scale(float *x, float s, size_t n)
{
    for (size_t i = 0; i < n; i++)
        x[i] *= s;
}
