/* px_attention_block_cpu.c: blockwise attention with an online softmax on
 * the CPU (px_kernels.h: attention_block_forward / _backward / _delta).
 *
 * The blocks ring attention computes (engine/ring_attn.c): a rank's query
 * rows against one key/value block that travels around the context group.
 * Forward merges the block into a running (out, lse) pair, FlashAttention-2
 * style (Dao 2023): with S = q k^T * scale (masked to -inf above the
 * diagonal of a causal block) and lse' = logaddexp(lse, logsumexp_j S),
 *     out <- out * exp(lse - lse') + exp(S - lse') v,
 * which is exact softmax attention over the union of the merged blocks.
 * Backward recomputes P = exp(S - lse_final) per block (nothing T x T is
 * kept between the passes): dv += P^T dout, dP = dout v^T,
 * dS = P (dP - delta) with delta = rowsum(dout * out), dq += dS k scale,
 * dk += dS^T q scale. Per (b, h) the matrices are sgemm calls on strided
 * views, so q, k, v are read in place from the fused qkv tensor or a
 * packed (k | v) buffer. Stateless; any thread. */
#include "px_kernels_cpu.h"
#include "px_attn_block_at.h"

#include <cblas.h>
#include <math.h>
#include <string.h>

void px__cpu_attention_block_forward(float *out, float *lse, const float *q, const float *kv,
                                     const px_attn_block_t *g, float *scratch)
{
    const int Tq = g->Tq, Tk = g->Tk, hs = g->hs;
    const float scale = 1.0f / sqrtf((float)hs);

    for (int b = 0; b < g->B; b++) {
        for (int h = 0; h < g->NH; h++) {
            const px_attn_at_t at = px_attn_block_at(g, b, h);
            const float *qb = q + at.q, *kb = kv + at.kv, *vb = kb + g->v_off;
            float *ob = out + at.o, *lb = lse + at.lse;
            float *s = scratch; /* (Tq, Tk) */
            cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, Tq, Tk, hs, scale, qb,
                        (int)g->q_ld, kb, (int)g->kv_ld, 0.0f, s, Tk);
            for (int t = 0; t < Tq; t++) {
                float *row = s + (size_t)t * Tk, *orow = ob + (size_t)t * g->o_ld;
                int n = g->causal ? t + 1 : Tk; /* keys this row sees */
                float mx = row[0];
                for (int j = 1; j < n; j++)
                    mx = row[j] > mx ? row[j] : mx;
                float sum = 0.0f;
                for (int j = 0; j < n; j++)
                    sum += expf(row[j] - mx);
                float blse = mx + logf(sum), old = lb[t], nl;
                if (g->init || old == -INFINITY) {
                    nl = blse;
                    memset(orow, 0, (size_t)hs * sizeof(float));
                } else {
                    float hi = old > blse ? old : blse, lo = old > blse ? blse : old;
                    nl = hi + log1pf(expf(lo - hi));
                    float alpha = expf(old - nl);
                    for (int c = 0; c < hs; c++)
                        orow[c] *= alpha;
                }
                lb[t] = nl;
                for (int j = 0; j < n; j++)
                    row[j] = expf(row[j] - nl);
                for (int j = n; j < Tk; j++)
                    row[j] = 0.0f;
            }
            /* out += P v */
            cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, Tq, hs, Tk, 1.0f, s, Tk, vb,
                        (int)g->kv_ld, 1.0f, ob, (int)g->o_ld);
        }
    }
}

void px__cpu_attention_block_backward(float *dq, float *dkv, const float *dout, const float *q,
                                      const float *kv, const float *lse, const float *delta,
                                      const px_attn_block_t *g, float *scratch)
{
    const int Tq = g->Tq, Tk = g->Tk, hs = g->hs;
    const float scale = 1.0f / sqrtf((float)hs);

    for (int b = 0; b < g->B; b++) {
        for (int h = 0; h < g->NH; h++) {
            const px_attn_at_t at = px_attn_block_at(g, b, h);
            const size_t qo = at.q, ko = at.kv, oo = at.o, lo = at.lse;
            const float *qb = q + qo, *kb = kv + ko, *vb = kb + g->v_off, *db = dout + oo;
            float *dqb = dq + qo, *dkb = dkv + ko, *dvb = dkb + g->v_off;
            float *p = scratch, *ds = scratch + (size_t)Tq * Tk; /* (Tq, Tk) each */
            cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, Tq, Tk, hs, scale, qb,
                        (int)g->q_ld, kb, (int)g->kv_ld, 0.0f, p, Tk);
            for (int t = 0; t < Tq; t++) {
                float *row = p + (size_t)t * Tk, l = lse[lo + t];
                int n = g->causal ? t + 1 : Tk;
                for (int j = 0; j < n; j++)
                    row[j] = expf(row[j] - l);
                for (int j = n; j < Tk; j++)
                    row[j] = 0.0f;
            }
            /* dv += P^T dout; dP = dout v^T */
            cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, Tk, hs, Tq, 1.0f, p, Tk, db,
                        (int)g->o_ld, 1.0f, dvb, (int)g->kv_ld);
            cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, Tq, Tk, hs, 1.0f, db,
                        (int)g->o_ld, vb, (int)g->kv_ld, 0.0f, ds, Tk);
            for (int t = 0; t < Tq; t++) {
                const float *prow = p + (size_t)t * Tk;
                float *drow = ds + (size_t)t * Tk, d = delta[lo + t];
                for (int j = 0; j < Tk; j++)
                    drow[j] = prow[j] * (drow[j] - d) * scale;
            }
            /* dq += dS k; dk += dS^T q */
            cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, Tq, hs, Tk, 1.0f, ds, Tk, kb,
                        (int)g->kv_ld, 1.0f, dqb, (int)g->q_ld);
            cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, Tk, hs, Tq, 1.0f, ds, Tk, qb,
                        (int)g->q_ld, 1.0f, dkb, (int)g->kv_ld);
        }
    }
}

void px__cpu_attention_block_delta(float *delta, const float *out, const float *dout,
                                   const px_attn_block_t *g)
{
    for (int b = 0; b < g->B; b++)
        for (int h = 0; h < g->NH; h++)
            for (int t = 0; t < g->Tq; t++) {
                size_t o = b * g->o_bs + (size_t)t * g->o_ld + (size_t)h * g->hs;
                float s = 0.0f;
                for (int c = 0; c < g->hs; c++)
                    s += out[o + c] * dout[o + c];
                delta[b * g->lse_bs + h * g->lse_hs + t] = s;
            }
}
