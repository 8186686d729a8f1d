/* px_kernels_cpu.h: the CPU implementations behind px_kernels_cpu().
 * Internal to kernels/ (px__ prefix); the engine uses the op table.
 * Shapes and semantics are documented in px_kernels.h. */
#ifndef PX_KERNELS_CPU_H
#define PX_KERNELS_CPU_H

#include "px_kernels.h"

void px__cpu_encoder_forward(float *out, const int32_t *inp, const float *wte, const float *wpe,
                             int B, int T, int C);
void px__cpu_encoder_backward(float *dwte, float *dwpe, const float *dout, const int32_t *inp,
                              int B, int T, int C);
void px__cpu_layernorm_forward(float *out, float *mean, float *rstd, const float *inp,
                               const float *weight, const float *bias, int N, int C);
void px__cpu_layernorm_backward(float *dinp, float *dweight, float *dbias, const float *dout,
                                const float *inp, const float *weight, const float *mean,
                                const float *rstd, int N, int C);
void px__cpu_matmul_forward(float *out, const float *inp, const float *weight, const float *bias,
                            int N, int C, int OC);
void px__cpu_matmul_backward(float *dinp, float *dweight, float *dbias, const float *dout,
                             const float *inp, const float *weight, int N, int C, int OC);
/* bf16 GEMMs (px_matmul_bf16_cpu.c) */
void px__cpu_matmul_bf16_forward(float *out, const float *inp, const float *weight,
                                 const float *bias, int N, int C, int OC);
void px__cpu_matmul_bf16_backward(float *dinp, float *dweight, float *dbias, const float *dout,
                                  const float *inp, const float *weight, int N, int C, int OC);
/* the same with the activation operand bf16 in memory, and the
 * conversions of bf16-stored activations (px_matmul_bf16_cpu.c) */
void px__cpu_matmul_bf16in_forward(float *out, const uint16_t *inp, const float *weight,
                                   const float *bias, int N, int C, int OC);
void px__cpu_matmul_bf16in_backward(float *dinp, float *dweight, float *dbias, const float *dout,
                                    const uint16_t *inp, const float *weight, int N, int C,
                                    int OC);
void px__cpu_bf16_from_f32(uint16_t *dst, const float *src, size_t n);
void px__cpu_bf16_to_f32(float *dst, const uint16_t *src, size_t n);
void px__cpu_attention_forward(float *out, float *att, const float *inp, int B, int T, int C,
                               int NH);
void px__cpu_attention_backward(float *dinp, float *scratch, const float *dout, const float *inp,
                                const float *att, int B, int T, int C, int NH);
/* blockwise attention (px_attention_block_cpu.c) */
void px__cpu_attention_block_forward(float *out, float *lse, const float *q, const float *kv,
                                     const px_attn_block_t *g, float *scratch);
void px__cpu_attention_block_backward(float *dq, float *dkv, const float *dout, const float *q,
                                      const float *kv, const float *lse, const float *delta,
                                      const px_attn_block_t *g, float *scratch);
void px__cpu_attention_block_delta(float *delta, const float *out, const float *dout,
                                   const px_attn_block_t *g);
/* attention with bf16 products (px_attention_bf16_cpu.c) */
void px__cpu_attention_bf16_forward(float *out, float *att, const float *inp, int B, int T,
                                    int C, int NH);
void px__cpu_attention_bf16_backward(float *dinp, float *scratch, const float *dout,
                                     const float *inp, const float *att, int B, int T, int C,
                                     int NH);
void px__cpu_attention_block_bf16_forward(float *out, float *lse, const float *q,
                                          const float *kv, const px_attn_block_t *g,
                                          float *scratch);
void px__cpu_attention_block_bf16_backward(float *dq, float *dkv, const float *dout,
                                           const float *q, const float *kv, const float *lse,
                                           const float *delta, const px_attn_block_t *g,
                                           float *scratch);
void px__cpu_gelu_forward(float *out, const float *inp, size_t N);
void px__cpu_gelu_backward(float *dinp, const float *inp, const float *dout, size_t N);
void px__cpu_residual_forward(float *out, const float *inp1, const float *inp2, size_t N);
void px__cpu_residual_backward(float *dinp1, float *dinp2, const float *dout, size_t N);
void px__cpu_crossentropy_forward(float *losses, float *probs, const float *logits,
                                  const int32_t *targets, int N, int V, int Vp);
void px__cpu_crossentropy_backward(float *dlogits, const float *probs, const int32_t *targets,
                                   float dloss, int N, int V, int Vp);
void px__cpu_adamw_update(float *params, const float *grads, float *m, float *v, size_t n,
                          float lr, float beta1, float beta2, float eps, float weight_decay,
                          int t, float grad_scale);
double px__cpu_sumsq(const float *x, size_t n);
void px__cpu_scale(float *x, float s, size_t n);
/* px_tp_cpu.c */
void px__cpu_encoder_vp_forward(float *out, const int32_t *inp, const float *wte,
                                const float *wpe, int B, int T, int C, int v0, int Vl);
void px__cpu_encoder_vp_backward(float *dwte, float *dwpe, const float *dout, const int32_t *inp,
                                 int B, int T, int C, int v0, int Vl);
void px__cpu_crossentropy_vp_max(float *rowmax, const float *logits, int N, int Vl, int v0,
                                 int V);
void px__cpu_crossentropy_vp_exp(double *stats, float *probs, const float *logits,
                                 const float *rowmax, const int32_t *targets, int N, int Vl,
                                 int v0, int V);
void px__cpu_crossentropy_vp_finish(float *losses, float *probs, const double *stats,
                                    const float *rowmax, int N, int Vl, int v0, int V);
void px__cpu_crossentropy_vp_backward(float *dlogits, const float *probs, const int32_t *targets,
                                      float dloss, int N, int Vl, int v0, int V);
void px__cpu_bias_forward(float *out, const float *bias, int N, int OC);
void px__cpu_moe_router_forward(float *probs, int32_t *idx, float *weights, const float *logits,
                                int N, int E, int K);
void px__cpu_moe_router_backward(float *dlogits, const float *probs, const int32_t *idx,
                                 const float *weights, const float *dweights, const float *daux,
                                 int N, int E, int K);
void px__cpu_moe_dispatch(float *dst, const float *src, const int32_t *rows, int n, int C);
void px__cpu_moe_combine(float *out, const float *y, const int32_t *rows, const float *w,
                         const int32_t *widx, int n, int C);
void px__cpu_moe_combine_backward(float *dy, float *dw, const float *dout, const float *y,
                                  const int32_t *rows, const float *w, const int32_t *widx,
                                  int n, int C);

#endif
