/* px_attention_cudnn.h: causal attention through cuDNN's fused (flash)
 * attention engines, built as graphs of its backend API (internal to
 * kernels/cuda/; px_attention_cudnn.c). libcudnn.so.9 is opened at run time
 * (dlopen), so nothing links against cuDNN and a machine without it only
 * loses this path: the callers (px_attention_cudnn_cuda.cu) fall back to
 * the tensor-core kernels.
 *
 * Operands are bf16 copies in the op table's layouts (px_sdpa_layout.h);
 * the lse is fp32, natural log, (B,NH,T), as the other CUDA attention
 * kernels keep it, so a forward by one family and a backward by another
 * agree. Runs on the rank's compute thread; not thread safe. */
#ifndef PX_ATTENTION_CUDNN_H
#define PX_ATTENTION_CUDNN_H

#include <stddef.h>

#include "px_sdpa_layout.h"
#include "px_status.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Device pointers of one execution (px_sdpa_layout_t gives the shapes).
 * Forward reads qkv, writes o and stats. Backward reads qkv, o, stats,
 * dout; writes every element of dqkv (dq | dk | dv, qkv's layout); rowsum
 * and dqacc are its work tensors (contents on entry ignored, except that
 * dqacc must be zero where px__cudnn_sdpa_dqacc_zeroed() says so). */
typedef struct px_sdpa_ptrs {
    void *qkv;       /* bf16 (B,T,3C) */
    void *o;         /* bf16 (B,T,C) */
    float *stats;    /* fp32 (B,NH,T) lse */
    void *dout;      /* bf16 (B,T,C) */
    void *dqkv;      /* bf16 (B,T,3C) */
    float *rowsum;   /* fp32 (B,NH,T): rowsum(dout * out) */
    float *dqacc;    /* fp32 (B,NH,T,hs): dq accumulated by the engine */
    void *workspace; /* the plan's work space, px__cudnn_sdpa_plan's bytes */
} px_sdpa_ptrs_t;

/* The plan of key, built on the first call for that key (graph, engine
 * heuristics mode A, the first engine configuration that finalises) and
 * cached for the process; *ws_bytes_p: the work space it needs (bytes).
 * stream: the cudaStream_t the plan will run on. Loads libcudnn.so.9 and
 * makes a handle on first use.
 * Errors: PX_ERR_NOT_FOUND when libcudnn cannot be loaded or lacks a
 * symbol (logged once, with dlerror's reason; every later call returns
 * it at once); PX_ERR_INVALID_ARGUMENT for a shape px_sdpa_layout refuses;
 * PX_ERR_INTERNAL when cuDNN refuses the graph or no engine takes it
 * (logged once per key with cuDNN's message; that key is not retried). */
px_status_t px__cudnn_sdpa_plan(const px_sdpa_key_t *key, void *stream, size_t *ws_bytes_p);

/* Runs key's plan (px__cudnn_sdpa_plan first) on stream with p's tensors.
 * Scale 1/sqrt(hs); causal per key. Asynchronous, as a kernel launch.
 * Errors: as px__cudnn_sdpa_plan; PX_ERR_INTERNAL when cuDNN refuses the
 * variant pack or the execution (logged; the key is then refused for the
 * rest of the process, so a persistent failure is logged once). */
px_status_t px__cudnn_sdpa_run(const px_sdpa_key_t *key, const px_sdpa_ptrs_t *p, void *stream);

/* Builds key's graph (every tensor, pointwise, matmul, reduction and
 * reshape descriptor finalised: cuDNN's checks of each node's attributes
 * and shapes; then the operation graph of them, finalised without a
 * handle: its check that the nodes connect) without a device, and destroys
 * it again; the heuristics and plan, which need a device, are not made.
 * *nodes_p: the number of operation nodes. For a CPU test of the graph.
 * Errors: PX_ERR_NOT_FOUND (no libcudnn.so.9: err says why),
 * PX_ERR_INVALID_ARGUMENT (shape), PX_ERR_INTERNAL (cuDNN refused a node:
 * err names the call and cuDNN's message); err is errlen bytes. */
px_status_t px__cudnn_sdpa_check_graph(const px_sdpa_key_t *key, int *nodes_p, char *err,
                                       size_t errlen);

/* NULL while cuDNN is usable for every key tried so far (or not yet
 * tried); else why not: the load's failure, or the last key cuDNN refused
 * (the message logged). For px-opcheck's report. */
const char *px__cudnn_sdpa_unavailable(void);

/* cudnnGetVersion() of the loaded library (e.g. 91400), 0 before a load */
long px__cudnn_sdpa_version(void);

/* 1 when the backward wants dqacc zeroed before each run: cuDNN before
 * 9.6 accumulates into it as it is (the frontend clears it there); 9.6
 * and later initialise it themselves. */
int px__cudnn_sdpa_dqacc_zeroed(void);

#ifdef __cplusplus
}
#endif

#endif
