/* px_attention_cudnn.c: causal scaled dot-product attention, forward and
 * backward, as graphs of cuDNN's backend API that its fused flash-attention
 * engines take (px_attention_cudnn.h).
 *
 * libcudnn.so.9 is opened with dlopen on first use and its entry points
 * taken with dlsym: no link-time dependency, and a build machine needs only
 * the headers (cudnn_graph.h: the enums and attribute names). Without the
 * headers this file compiles to stubs that report cuDNN as not built.
 *
 * The graphs (node by node as the cuDNN frontend's SDPA nodes lower them to
 * the backend, which is the form the fused engines recognise; shapes in
 * px_sdpa_layout.h; "virtual" tensors never reach memory):
 *
 *   forward   S = Q K^T (MATMUL, fp32)          backward  rowsum = sum_d(dO * O) * 1
 *             S = S * scale (POINTWISE MUL)               S = Q K^T * scale, masked as forward
 *             causal: r = GEN_INDEX(S, axis 2),           E = exp(S - lse)
 *               c = GEN_INDEX(S, axis 3) (int32),         dV = E^T dO (RESHAPE to a transposed
 *               m = CMP_GE(r, c) (boolean),                 bf16 view, MATMUL)
 *               S = BINARY_SELECT(S, -FLT_MAX, m)         dP = dO V^T (MATMUL) * 1
 *             M = max_j S (REDUCTION MAX)                 dS = (dP - rowsum) * E * scale
 *             E = exp(S - M), Z = sum_j E                 dK = dS^T Q (RESHAPE, MATMUL)
 *             lse = M + log Z  (the Stats output)         dQacc = dS K (MATMUL into fp32
 *             P = E / Z (bf16)                              work space), dQ = IDENTITY(dQacc)
 *             O = P V (MATMUL)
 *
 * The multiplications by a by-value 1 stand where the frontend puts its
 * dropout scale and mask; they are kept so the graph has the shape the
 * engines were matched against. The by-value scalars (scale, -FLT_MAX, 1)
 * are fp32 host values in the variant pack.
 *
 * Plans: one per px_sdpa_key_t (B, NH, T, hs, causal, direction), built on
 * first use (heuristics mode A, the first engine configuration whose plan
 * finalises) and kept with every descriptor they were made from for the
 * life of the process; the work space size comes from the plan and the
 * caller allocates it. A key whose graph cuDNN refuses, or whose plan
 * fails to execute, is remembered as failed and not retried.
 *
 * Runs on the rank's compute thread (the op table's thread); not thread
 * safe. Errors are logged once per cause. */
#include "px_attention_cudnn.h"

#include <dlfcn.h>
#include <float.h>
#include <math.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "px_log.h"

#ifndef PX_HAVE_CUDNN_H
#define PX_HAVE_CUDNN_H 0
#endif

#if PX_HAVE_CUDNN_H

#include <cudnn_graph.h>

/* ---------------------------------------------------------------- library */

typedef struct cudnn_api {
    size_t (*GetVersion)(void);
    const char *(*GetErrorString)(cudnnStatus_t);
    void (*GetLastErrorString)(char *, size_t);
    cudnnStatus_t (*Create)(cudnnHandle_t *);
    cudnnStatus_t (*SetStream)(cudnnHandle_t, cudaStream_t);
    cudnnStatus_t (*BackendCreateDescriptor)(cudnnBackendDescriptorType_t,
                                             cudnnBackendDescriptor_t *);
    cudnnStatus_t (*BackendDestroyDescriptor)(cudnnBackendDescriptor_t);
    cudnnStatus_t (*BackendFinalize)(cudnnBackendDescriptor_t);
    cudnnStatus_t (*BackendSetAttribute)(cudnnBackendDescriptor_t, cudnnBackendAttributeName_t,
                                         cudnnBackendAttributeType_t, int64_t, const void *);
    cudnnStatus_t (*BackendGetAttribute)(cudnnBackendDescriptor_t const,
                                         cudnnBackendAttributeName_t,
                                         cudnnBackendAttributeType_t, int64_t, int64_t *,
                                         void *);
    cudnnStatus_t (*BackendExecute)(cudnnHandle_t, cudnnBackendDescriptor_t,
                                    cudnnBackendDescriptor_t);
} cudnn_api_t;

static cudnn_api_t api;
static void *lib;
static cudnnHandle_t handle;
static void *handle_stream; /* the stream the handle was last bound to */
static int load_state;      /* 0 untried, 1 loaded, -1 failed */
static long lib_version;
static char why[320];       /* why cuDNN is unusable (load_state -1) */
static char key_why[320];   /* why the last refused key was refused */

static int lib_state; /* 0 untried, 1 opened with every symbol, -1 failed */

/* Opens libcudnn.so.9 and takes its entry points, once (no device needed).
 * PX_OK or PX_ERR_NOT_FOUND with `why` set. */
static px_status_t load_lib(void)
{
    if (lib_state)
        return lib_state > 0 ? PX_OK : PX_ERR_NOT_FOUND;
    lib_state = -1;
    lib = dlopen("libcudnn.so.9", RTLD_NOW | RTLD_LOCAL);
    if (!lib) {
        const char *e = dlerror();
        snprintf(why, sizeof(why), "cannot load libcudnn.so.9 (%s)", e ? e : "?");
        return PX_ERR_NOT_FOUND;
    }
    static const struct { const char *name; size_t off; } syms[] = {
#define SYM(f) {"cudnn" #f, offsetof(cudnn_api_t, f)}
        SYM(GetVersion), SYM(GetErrorString), SYM(GetLastErrorString), SYM(Create),
        SYM(SetStream), SYM(BackendCreateDescriptor), SYM(BackendDestroyDescriptor),
        SYM(BackendFinalize), SYM(BackendSetAttribute), SYM(BackendGetAttribute),
        SYM(BackendExecute),
#undef SYM
    };
    for (size_t i = 0; i < sizeof(syms) / sizeof(syms[0]); i++) {
        void *f = dlsym(lib, syms[i].name);
        if (!f) {
            snprintf(why, sizeof(why), "libcudnn.so.9 has no %s", syms[i].name);
            goto err_close;
        }
        memcpy((char *)&api + syms[i].off, &f, sizeof(f));
    }
    lib_version = (long)api.GetVersion();
    if (lib_version < 90000) {
        snprintf(why, sizeof(why), "libcudnn.so.9 reports version %ld (9.0 or later needed)",
                 lib_version);
        goto err_close;
    }
    lib_state = 1;
    return PX_OK;
err_close:
    lib_version = 0;
    dlclose(lib);
    lib = NULL;
    return PX_ERR_NOT_FOUND;
}

/* load_lib, then a handle on the current device, once. PX_OK or
 * PX_ERR_NOT_FOUND (logged once) */
static px_status_t load(void)
{
    if (load_state)
        return load_state > 0 ? PX_OK : PX_ERR_NOT_FOUND;
    load_state = -1;
    if (load_lib() != PX_OK)
        goto err;
    cudnnStatus_t s = api.Create(&handle);
    if (s != CUDNN_STATUS_SUCCESS) {
        snprintf(why, sizeof(why), "cudnnCreate failed: %s", api.GetErrorString(s));
        lib_version = 0;
        goto err;
    }
    load_state = 1;
    px_info("cuDNN %ld loaded for the fused attention (PX_CUDA_ATTN=cudnn)", lib_version);
    return PX_OK;
err:
    px_warn("PX_CUDA_ATTN=cudnn: %s; the attention runs on the tensor-core kernels", why);
    return PX_ERR_NOT_FOUND;
}

/* --------------------------------------------------------- graph building */

#define MAX_DESCS 96 /* descriptors of one graph: about 70 for the backward */
#define MAX_OPS 40

/* One graph under construction, then its plan: every descriptor made for it
 * (destroyed together), the operation nodes in order, the first failure. */
typedef struct graph {
    cudnnBackendDescriptor_t descs[MAX_DESCS];
    int ndescs;
    cudnnBackendDescriptor_t ops[MAX_OPS];
    int nops;
    int64_t next_virtual; /* the next virtual tensor's unique id */
    const char *failed;   /* the first call that failed, NULL while none */
    cudnnStatus_t status;
} graph_t;

/* Unique ids of the tensors the variant pack names (virtual ones: 100 on) */
enum {
    UID_Q = 1, UID_K, UID_V, UID_O, UID_STATS, UID_DO, UID_DQ, UID_DK, UID_DV,
    UID_SCALE, UID_NEG, UID_ONE, UID_ROWSUM, UID_DQACC, UID_VIRTUAL = 100
};

static int ok(graph_t *g, cudnnStatus_t s, const char *what)
{
    if (s == CUDNN_STATUS_SUCCESS)
        return 1;
    if (!g->failed) {
        g->failed = what;
        g->status = s;
    }
    return 0;
}

static cudnnBackendDescriptor_t create(graph_t *g, cudnnBackendDescriptorType_t type,
                                       const char *what)
{
    cudnnBackendDescriptor_t d = NULL;
    if (g->failed)
        return NULL;
    if (g->ndescs == MAX_DESCS) {
        ok(g, CUDNN_STATUS_INTERNAL_ERROR, "too many descriptors");
        return NULL;
    }
    if (!ok(g, api.BackendCreateDescriptor(type, &d), what))
        return NULL;
    g->descs[g->ndescs++] = d;
    return d;
}

static void set_attr(graph_t *g, cudnnBackendDescriptor_t d, cudnnBackendAttributeName_t name,
                     cudnnBackendAttributeType_t type, int64_t n, const void *v, const char *what)
{
    if (!g->failed && d)
        ok(g, api.BackendSetAttribute(d, name, type, n, v), what);
}

static void finalize(graph_t *g, cudnnBackendDescriptor_t d, const char *what)
{
    if (!g->failed && d)
        ok(g, api.BackendFinalize(d), what);
}

/* A tensor: dt, d's dims and strides, 16-byte aligned; uid 0 takes the next
 * virtual id. virt: never in memory; by_value: a host scalar. */
static cudnnBackendDescriptor_t tensor(graph_t *g, int64_t uid, cudnnDataType_t dt,
                                       const px_sdpa_dims_t *d, int virt, int by_value)
{
    cudnnBackendDescriptor_t t = create(g, CUDNN_BACKEND_TENSOR_DESCRIPTOR, "tensor");
    int64_t id = uid ? uid : g->next_virtual++, align = 16;
    bool v = virt != 0, bv = by_value != 0;
    set_attr(g, t, CUDNN_ATTR_TENSOR_DATA_TYPE, CUDNN_TYPE_DATA_TYPE, 1, &dt, "tensor type");
    set_attr(g, t, CUDNN_ATTR_TENSOR_DIMENSIONS, CUDNN_TYPE_INT64, 4, d->dim, "tensor dims");
    set_attr(g, t, CUDNN_ATTR_TENSOR_STRIDES, CUDNN_TYPE_INT64, 4, d->stride, "tensor strides");
    set_attr(g, t, CUDNN_ATTR_TENSOR_UNIQUE_ID, CUDNN_TYPE_INT64, 1, &id, "tensor id");
    set_attr(g, t, CUDNN_ATTR_TENSOR_BYTE_ALIGNMENT, CUDNN_TYPE_INT64, 1, &align,
             "tensor alignment");
    set_attr(g, t, CUDNN_ATTR_TENSOR_IS_VIRTUAL, CUDNN_TYPE_BOOLEAN, 1, &v, "tensor virtual");
    set_attr(g, t, CUDNN_ATTR_TENSOR_IS_BY_VALUE, CUDNN_TYPE_BOOLEAN, 1, &bv, "tensor by value");
    finalize(g, t, "tensor finalize");
    return t;
}

static cudnnBackendDescriptor_t virt(graph_t *g, cudnnDataType_t dt, const px_sdpa_dims_t *d)
{
    return tensor(g, 0, dt, d, 1, 0);
}

static void add_op(graph_t *g, cudnnBackendDescriptor_t op)
{
    if (g->failed || !op)
        return;
    if (g->nops == MAX_OPS) {
        ok(g, CUDNN_STATUS_INTERNAL_ERROR, "too many operations");
        return;
    }
    g->ops[g->nops++] = op;
}

/* y = mode(x [, b [, t]]) computed in prec; axis >= 0: GEN_INDEX's axis */
static void pointwise(graph_t *g, cudnnPointwiseMode_t mode, cudnnDataType_t prec, int64_t axis,
                      cudnnBackendDescriptor_t x, cudnnBackendDescriptor_t b,
                      cudnnBackendDescriptor_t t, cudnnBackendDescriptor_t y)
{
    cudnnBackendDescriptor_t pw = create(g, CUDNN_BACKEND_POINTWISE_DESCRIPTOR, "pointwise");
    set_attr(g, pw, CUDNN_ATTR_POINTWISE_MODE, CUDNN_TYPE_POINTWISE_MODE, 1, &mode,
             "pointwise mode");
    set_attr(g, pw, CUDNN_ATTR_POINTWISE_MATH_PREC, CUDNN_TYPE_DATA_TYPE, 1, &prec,
             "pointwise precision");
    if (axis >= 0)
        set_attr(g, pw, CUDNN_ATTR_POINTWISE_AXIS, CUDNN_TYPE_INT64, 1, &axis, "pointwise axis");
    finalize(g, pw, "pointwise finalize");
    cudnnBackendDescriptor_t op =
        create(g, CUDNN_BACKEND_OPERATION_POINTWISE_DESCRIPTOR, "pointwise op");
    float one = 1.0f;
    set_attr(g, op, CUDNN_ATTR_OPERATION_POINTWISE_PW_DESCRIPTOR, CUDNN_TYPE_BACKEND_DESCRIPTOR,
             1, &pw, "pointwise op desc");
    set_attr(g, op, CUDNN_ATTR_OPERATION_POINTWISE_XDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &x,
             "pointwise x");
    if (b)
        set_attr(g, op, CUDNN_ATTR_OPERATION_POINTWISE_BDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1,
                 &b, "pointwise b");
    if (t)
        set_attr(g, op, CUDNN_ATTR_OPERATION_POINTWISE_TDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1,
                 &t, "pointwise t");
    set_attr(g, op, CUDNN_ATTR_OPERATION_POINTWISE_YDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &y,
             "pointwise y");
    set_attr(g, op, CUDNN_ATTR_OPERATION_POINTWISE_ALPHA1, CUDNN_TYPE_FLOAT, 1, &one,
             "pointwise alpha1");
    set_attr(g, op, CUDNN_ATTR_OPERATION_POINTWISE_ALPHA2, CUDNN_TYPE_FLOAT, 1, &one,
             "pointwise alpha2");
    finalize(g, op, "pointwise op finalize");
    add_op(g, op);
}

/* c = a b, batched over (b, h), fp32 accumulation */
static void matmul(graph_t *g, cudnnBackendDescriptor_t a, cudnnBackendDescriptor_t b,
                   cudnnBackendDescriptor_t c)
{
    cudnnDataType_t comp = CUDNN_DATA_FLOAT;
    cudnnBackendDescriptor_t mm = create(g, CUDNN_BACKEND_MATMUL_DESCRIPTOR, "matmul");
    set_attr(g, mm, CUDNN_ATTR_MATMUL_COMP_TYPE, CUDNN_TYPE_DATA_TYPE, 1, &comp,
             "matmul compute type");
    finalize(g, mm, "matmul finalize");
    cudnnBackendDescriptor_t op = create(g, CUDNN_BACKEND_OPERATION_MATMUL_DESCRIPTOR,
                                         "matmul op");
    set_attr(g, op, CUDNN_ATTR_OPERATION_MATMUL_ADESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &a,
             "matmul a");
    set_attr(g, op, CUDNN_ATTR_OPERATION_MATMUL_BDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &b,
             "matmul b");
    set_attr(g, op, CUDNN_ATTR_OPERATION_MATMUL_CDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &c,
             "matmul c");
    set_attr(g, op, CUDNN_ATTR_OPERATION_MATMUL_DESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &mm,
             "matmul op desc");
    finalize(g, op, "matmul op finalize");
    add_op(g, op);
}

/* y = reduction of x over the dimensions where y has extent 1 */
static void reduction(graph_t *g, cudnnReduceTensorOp_t how, cudnnBackendDescriptor_t x,
                      cudnnBackendDescriptor_t y)
{
    cudnnDataType_t comp = CUDNN_DATA_FLOAT;
    cudnnBackendDescriptor_t r = create(g, CUDNN_BACKEND_REDUCTION_DESCRIPTOR, "reduction");
    set_attr(g, r, CUDNN_ATTR_REDUCTION_OPERATOR, CUDNN_TYPE_REDUCTION_OPERATOR_TYPE, 1, &how,
             "reduction operator");
    set_attr(g, r, CUDNN_ATTR_REDUCTION_COMP_TYPE, CUDNN_TYPE_DATA_TYPE, 1, &comp,
             "reduction compute type");
    finalize(g, r, "reduction finalize");
    cudnnBackendDescriptor_t op = create(g, CUDNN_BACKEND_OPERATION_REDUCTION_DESCRIPTOR,
                                         "reduction op");
    set_attr(g, op, CUDNN_ATTR_OPERATION_REDUCTION_XDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &x,
             "reduction x");
    set_attr(g, op, CUDNN_ATTR_OPERATION_REDUCTION_YDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &y,
             "reduction y");
    set_attr(g, op, CUDNN_ATTR_OPERATION_REDUCTION_DESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &r,
             "reduction op desc");
    finalize(g, op, "reduction op finalize");
    add_op(g, op);
}

/* y = x seen with y's dims and strides (a transposed view) */
static void reshape(graph_t *g, cudnnBackendDescriptor_t x, cudnnBackendDescriptor_t y)
{
    cudnnBackendDescriptor_t op = create(g, CUDNN_BACKEND_OPERATION_RESHAPE_DESCRIPTOR,
                                         "reshape op");
    set_attr(g, op, CUDNN_ATTR_OPERATION_RESHAPE_XDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &x,
             "reshape x");
    set_attr(g, op, CUDNN_ATTR_OPERATION_RESHAPE_YDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &y,
             "reshape y");
    finalize(g, op, "reshape op finalize");
    add_op(g, op);
}

/* S * scale, then (causal) the keys past the query row set to -FLT_MAX:
 * the scores both graphs start from (fp32, virtual) */
static cudnnBackendDescriptor_t scaled_masked_scores(graph_t *g, const px_sdpa_layout_t *l,
                                                     int causal, cudnnBackendDescriptor_t q,
                                                     cudnnBackendDescriptor_t kt,
                                                     cudnnBackendDescriptor_t scale,
                                                     cudnnBackendDescriptor_t neg)
{
    cudnnBackendDescriptor_t s = virt(g, CUDNN_DATA_FLOAT, &l->s);
    matmul(g, q, kt, s);
    cudnnBackendDescriptor_t ss = virt(g, CUDNN_DATA_FLOAT, &l->s);
    pointwise(g, CUDNN_POINTWISE_MUL, CUDNN_DATA_FLOAT, -1, s, scale, NULL, ss);
    if (!causal)
        return ss;
    cudnnBackendDescriptor_t row = virt(g, CUDNN_DATA_INT32, &l->s);
    cudnnBackendDescriptor_t col = virt(g, CUDNN_DATA_INT32, &l->s);
    cudnnBackendDescriptor_t keep = virt(g, CUDNN_DATA_BOOLEAN, &l->s);
    cudnnBackendDescriptor_t masked = virt(g, CUDNN_DATA_FLOAT, &l->s);
    pointwise(g, CUDNN_POINTWISE_GEN_INDEX, CUDNN_DATA_INT32, 2, ss, NULL, NULL, row);
    pointwise(g, CUDNN_POINTWISE_GEN_INDEX, CUDNN_DATA_INT32, 3, ss, NULL, NULL, col);
    pointwise(g, CUDNN_POINTWISE_CMP_GE, CUDNN_DATA_BOOLEAN, -1, row, col, NULL, keep);
    /* BINARY_SELECT: y = t ? x : b */
    pointwise(g, CUDNN_POINTWISE_BINARY_SELECT, CUDNN_DATA_FLOAT, -1, ss, neg, keep, masked);
    return masked;
}

static void build_forward(graph_t *g, const px_sdpa_layout_t *l, int causal)
{
    const cudnnDataType_t F = CUDNN_DATA_FLOAT, H = CUDNN_DATA_BFLOAT16;
    cudnnBackendDescriptor_t q = tensor(g, UID_Q, H, &l->q, 0, 0);
    cudnnBackendDescriptor_t kt = tensor(g, UID_K, H, &l->kt, 0, 0);
    cudnnBackendDescriptor_t v = tensor(g, UID_V, H, &l->v, 0, 0);
    cudnnBackendDescriptor_t o = tensor(g, UID_O, H, &l->o, 0, 0);
    cudnnBackendDescriptor_t stats = tensor(g, UID_STATS, F, &l->stats, 0, 0);
    cudnnBackendDescriptor_t scale = tensor(g, UID_SCALE, F, &l->scalar, 0, 1);
    cudnnBackendDescriptor_t neg = tensor(g, UID_NEG, F, &l->scalar, 0, 1);
    cudnnBackendDescriptor_t s = scaled_masked_scores(g, l, causal, q, kt, scale, neg);
    cudnnBackendDescriptor_t m = virt(g, F, &l->stats);
    reduction(g, CUDNN_REDUCE_TENSOR_MAX, s, m);
    cudnnBackendDescriptor_t sm = virt(g, F, &l->s);
    pointwise(g, CUDNN_POINTWISE_SUB, F, -1, s, m, NULL, sm);
    cudnnBackendDescriptor_t e = virt(g, F, &l->s);
    pointwise(g, CUDNN_POINTWISE_EXP, F, -1, sm, NULL, NULL, e);
    cudnnBackendDescriptor_t z = virt(g, F, &l->stats);
    reduction(g, CUDNN_REDUCE_TENSOR_ADD, e, z);
    cudnnBackendDescriptor_t logz = virt(g, F, &l->stats);
    pointwise(g, CUDNN_POINTWISE_LOG, F, -1, z, NULL, NULL, logz);
    pointwise(g, CUDNN_POINTWISE_ADD, F, -1, m, logz, NULL, stats);
    cudnnBackendDescriptor_t p = virt(g, H, &l->s); /* bf16: the second product's operand */
    pointwise(g, CUDNN_POINTWISE_DIV, F, -1, e, z, NULL, p);
    matmul(g, p, v, o);
}

static void build_backward(graph_t *g, const px_sdpa_layout_t *l, int causal)
{
    const cudnnDataType_t F = CUDNN_DATA_FLOAT, H = CUDNN_DATA_BFLOAT16;
    cudnnBackendDescriptor_t q = tensor(g, UID_Q, H, &l->q, 0, 0);
    cudnnBackendDescriptor_t kt = tensor(g, UID_K, H, &l->kt, 0, 0);
    cudnnBackendDescriptor_t vt = tensor(g, UID_V, H, &l->vt, 0, 0);
    cudnnBackendDescriptor_t o = tensor(g, UID_O, H, &l->o, 0, 0);
    cudnnBackendDescriptor_t dout = tensor(g, UID_DO, H, &l->o, 0, 0);
    cudnnBackendDescriptor_t stats = tensor(g, UID_STATS, F, &l->stats, 0, 0);
    cudnnBackendDescriptor_t dq = tensor(g, UID_DQ, H, &l->q, 0, 0);
    cudnnBackendDescriptor_t dk = tensor(g, UID_DK, H, &l->k, 0, 0);
    cudnnBackendDescriptor_t dv = tensor(g, UID_DV, H, &l->v, 0, 0);
    cudnnBackendDescriptor_t rowsum = tensor(g, UID_ROWSUM, F, &l->stats, 0, 0);
    cudnnBackendDescriptor_t dqacc = tensor(g, UID_DQACC, F, &l->dqacc, 0, 0);
    cudnnBackendDescriptor_t scale = tensor(g, UID_SCALE, F, &l->scalar, 0, 1);
    cudnnBackendDescriptor_t neg = tensor(g, UID_NEG, F, &l->scalar, 0, 1);
    cudnnBackendDescriptor_t one = tensor(g, UID_ONE, F, &l->scalar, 0, 1);
    /* rowsum = sum_d dO * O: the softmax backward's per-row term */
    cudnnBackendDescriptor_t dodo = virt(g, F, &l->dodo);
    pointwise(g, CUDNN_POINTWISE_MUL, F, -1, dout, o, NULL, dodo);
    cudnnBackendDescriptor_t dsum = virt(g, F, &l->stats);
    reduction(g, CUDNN_REDUCE_TENSOR_ADD, dodo, dsum);
    pointwise(g, CUDNN_POINTWISE_MUL, F, -1, dsum, one, NULL, rowsum);
    /* E = exp(S - lse): the probabilities again */
    cudnnBackendDescriptor_t s = scaled_masked_scores(g, l, causal, q, kt, scale, neg);
    cudnnBackendDescriptor_t sl = virt(g, F, &l->s);
    pointwise(g, CUDNN_POINTWISE_SUB, F, -1, s, stats, NULL, sl);
    cudnnBackendDescriptor_t e = virt(g, F, &l->s);
    pointwise(g, CUDNN_POINTWISE_EXP, F, -1, sl, NULL, NULL, e);
    /* dV = E^T dO */
    cudnnBackendDescriptor_t et = virt(g, H, &l->st);
    reshape(g, e, et);
    matmul(g, et, dout, dv);
    /* dS = (dO V^T - rowsum) E scale */
    cudnnBackendDescriptor_t dp = virt(g, F, &l->s);
    matmul(g, dout, vt, dp);
    cudnnBackendDescriptor_t dp1 = virt(g, F, &l->s);
    pointwise(g, CUDNN_POINTWISE_MUL, F, -1, dp, one, NULL, dp1);
    cudnnBackendDescriptor_t dp2 = virt(g, F, &l->s);
    pointwise(g, CUDNN_POINTWISE_SUB, F, -1, dp1, rowsum, NULL, dp2);
    cudnnBackendDescriptor_t dp3 = virt(g, F, &l->s);
    pointwise(g, CUDNN_POINTWISE_MUL, F, -1, dp2, e, NULL, dp3);
    cudnnBackendDescriptor_t ds = virt(g, F, &l->s);
    pointwise(g, CUDNN_POINTWISE_MUL, F, -1, dp3, scale, NULL, ds);
    /* dK = dS^T Q */
    cudnnBackendDescriptor_t dst = virt(g, H, &l->st);
    reshape(g, ds, dst);
    matmul(g, dst, q, dk);
    /* dQ = dS K, through the fp32 accumulator */
    cudnnBackendDescriptor_t k = virt(g, H, &l->k);
    reshape(g, kt, k);
    matmul(g, ds, k, dqacc);
    pointwise(g, CUDNN_POINTWISE_IDENTITY, F, -1, dqacc, NULL, NULL, dq);
}

/* The operation graph of g's nodes, heuristics, and the first plan that
 * finalises: into *plan_p (one of g's descriptors), its work space bytes */
static void make_plan(graph_t *g, cudnnBackendDescriptor_t *plan_p, int64_t *ws_p)
{
    cudnnBackendDescriptor_t og = create(g, CUDNN_BACKEND_OPERATIONGRAPH_DESCRIPTOR, "op graph");
    set_attr(g, og, CUDNN_ATTR_OPERATIONGRAPH_OPS, CUDNN_TYPE_BACKEND_DESCRIPTOR, g->nops,
             g->ops, "op graph ops");
    set_attr(g, og, CUDNN_ATTR_OPERATIONGRAPH_HANDLE, CUDNN_TYPE_HANDLE, 1, &handle,
             "op graph handle");
    finalize(g, og, "op graph finalize (cuDNN refused the graph)");
    cudnnBackendDescriptor_t heur = create(g, CUDNN_BACKEND_ENGINEHEUR_DESCRIPTOR, "heuristics");
    cudnnBackendHeurMode_t mode = CUDNN_HEUR_MODE_A;
    set_attr(g, heur, CUDNN_ATTR_ENGINEHEUR_OPERATION_GRAPH, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1,
             &og, "heuristics graph");
    set_attr(g, heur, CUDNN_ATTR_ENGINEHEUR_MODE, CUDNN_TYPE_HEUR_MODE, 1, &mode,
             "heuristics mode");
    finalize(g, heur, "heuristics finalize");
    int64_t n = 0;
    if (!g->failed)
        ok(g, api.BackendGetAttribute(heur, CUDNN_ATTR_ENGINEHEUR_RESULTS,
                                      CUDNN_TYPE_BACKEND_DESCRIPTOR, 0, &n, NULL),
           "heuristics result count");
    if (g->failed)
        return;
    if (n <= 0) {
        ok(g, CUDNN_STATUS_NOT_SUPPORTED, "heuristics: no engine takes the graph");
        return;
    }
    if (n > 8)
        n = 8; /* the best few are enough */
    cudnnBackendDescriptor_t cfg[8];
    for (int64_t i = 0; i < n; i++)
        cfg[i] = create(g, CUDNN_BACKEND_ENGINECFG_DESCRIPTOR, "engine config");
    int64_t got = 0;
    if (!g->failed)
        ok(g, api.BackendGetAttribute(heur, CUDNN_ATTR_ENGINEHEUR_RESULTS,
                                      CUDNN_TYPE_BACKEND_DESCRIPTOR, n, &got, cfg),
           "heuristics results");
    if (g->failed)
        return;
    cudnnStatus_t last = CUDNN_STATUS_NOT_SUPPORTED;
    for (int64_t i = 0; i < got && i < n; i++) {
        cudnnBackendDescriptor_t plan = create(g, CUDNN_BACKEND_EXECUTION_PLAN_DESCRIPTOR,
                                               "plan");
        if (g->failed)
            return;
        if (api.BackendSetAttribute(plan, CUDNN_ATTR_EXECUTION_PLAN_HANDLE, CUDNN_TYPE_HANDLE, 1,
                                    &handle) != CUDNN_STATUS_SUCCESS ||
            api.BackendSetAttribute(plan, CUDNN_ATTR_EXECUTION_PLAN_ENGINE_CONFIG,
                                    CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &cfg[i]) !=
                CUDNN_STATUS_SUCCESS)
            continue;
        last = api.BackendFinalize(plan);
        if (last != CUDNN_STATUS_SUCCESS)
            continue; /* this engine cannot: the next one */
        int64_t ws = 0, cnt = 0;
        if (!ok(g, api.BackendGetAttribute(plan, CUDNN_ATTR_EXECUTION_PLAN_WORKSPACE_SIZE,
                                           CUDNN_TYPE_INT64, 1, &cnt, &ws),
                "plan work space size"))
            return;
        *plan_p = plan;
        *ws_p = ws;
        return;
    }
    ok(g, last, "plan finalize: no engine configuration builds");
}

/* ------------------------------------------------------------------ cache */

#define MAX_PLANS 16

typedef struct plan_entry {
    px_sdpa_key_t key;
    graph_t *g;                    /* NULL: the key failed */
    cudnnBackendDescriptor_t plan; /* one of g's descriptors */
    int64_t ws;
    int refused;                   /* 1 once an execution failed: not run again */
} plan_entry_t;

static px_sdpa_key_t keys[MAX_PLANS];
static plan_entry_t plans[MAX_PLANS];
static int nplans;

static void graph_destroy(graph_t *g)
{
    if (!g)
        return;
    for (int i = g->ndescs - 1; i >= 0; i--)
        api.BackendDestroyDescriptor(g->descs[i]);
    free(g);
}

static px_status_t bind_stream(void *stream)
{
    if (stream == handle_stream)
        return PX_OK;
    cudnnStatus_t s = api.SetStream(handle, (cudaStream_t)stream);
    if (s != CUDNN_STATUS_SUCCESS) {
        px_error("cudnnSetStream failed: %s", api.GetErrorString(s));
        return PX_ERR_INTERNAL;
    }
    handle_stream = stream;
    return PX_OK;
}

/* key's cache entry, built now if new; NULL and *status_p on failure */
static plan_entry_t *lookup(const px_sdpa_key_t *key, void *stream, px_status_t *status_p)
{
    px_status_t status = load();
    if (status != PX_OK)
        goto err;
    if ((status = bind_stream(stream)) != PX_OK)
        goto err;
    int i = px_sdpa_cache_find(keys, nplans, key);
    if (i >= 0) {
        if (plans[i].g && !plans[i].refused)
            return &plans[i];
        status = PX_ERR_INTERNAL; /* failed before, logged then */
        goto err;
    }
    px_sdpa_layout_t l;
    if ((status = px_sdpa_layout(key, &l)) != PX_OK) {
        px_error("cuDNN attention: unsupported shape B %d T %d NH %d hs %d", key->B, key->T,
                 key->NH, key->hs);
        goto err;
    }
    if (nplans == MAX_PLANS) {
        /* a process runs a few shapes; past that, evict the oldest */
        graph_destroy(plans[0].g);
        memmove(&plans[0], &plans[1], sizeof(plans[0]) * (MAX_PLANS - 1));
        memmove(&keys[0], &keys[1], sizeof(keys[0]) * (MAX_PLANS - 1));
        nplans--;
    }
    plan_entry_t *e = &plans[nplans];
    memset(e, 0, sizeof(*e));
    e->key = *key;
    keys[nplans++] = *key;
    graph_t *g = calloc(1, sizeof(*g));
    if (!g) {
        status = PX_ERR_NO_MEMORY;
        goto err;
    }
    g->next_virtual = UID_VIRTUAL;
    if (key->dir == PX_SDPA_FWD)
        build_forward(g, &l, key->causal);
    else
        build_backward(g, &l, key->causal);
    make_plan(g, &e->plan, &e->ws);
    if (g->failed) {
        char msg[256] = "";
        api.GetLastErrorString(msg, sizeof(msg));
        snprintf(key_why, sizeof(key_why), "%s: %s%s%s", g->failed,
                 api.GetErrorString(g->status), *msg ? ": " : "", msg);
        px_warn("cuDNN attention %s, B %d T %d NH %d hs %d%s: %s; the tensor-core kernels run "
                "it", key->dir == PX_SDPA_FWD ? "forward" : "backward", key->B, key->T,
                key->NH, key->hs, key->causal ? " causal" : "", key_why);
        graph_destroy(g);
        status = PX_ERR_INTERNAL;
        goto err;
    }
    e->g = g;
    px_info("cuDNN attention %s plan, B %d T %d NH %d hs %d: %d nodes, %lld bytes of work space",
            key->dir == PX_SDPA_FWD ? "forward" : "backward", key->B, key->T, key->NH, key->hs,
            g->nops, (long long)e->ws);
    return e;
err:
    *status_p = status;
    return NULL;
}

px_status_t px__cudnn_sdpa_plan(const px_sdpa_key_t *key, void *stream, size_t *ws_bytes_p)
{
    px_status_t status;
    plan_entry_t *e = lookup(key, stream, &status);
    if (!e)
        return status;
    *ws_bytes_p = (size_t)e->ws;
    return PX_OK;
}

px_status_t px__cudnn_sdpa_run(const px_sdpa_key_t *key, const px_sdpa_ptrs_t *p, void *stream)
{
    px_status_t status;
    plan_entry_t *e = lookup(key, stream, &status);
    if (!e)
        return status;
    float scale = 1.0f / sqrtf((float)key->hs), neg = -FLT_MAX, one = 1.0f;
    int64_t uids[14];
    void *ptrs[14];
    int n = 0;
#define BIND(u, ptr) (uids[n] = (u), ptrs[n] = (void *)(ptr), n++)
    char *qkv = (char *)p->qkv;
    const size_t C = (size_t)key->NH * key->hs, el = 2; /* bf16 bytes */
    BIND(UID_Q, qkv);
    BIND(UID_K, qkv + C * el);
    BIND(UID_V, qkv + 2 * C * el);
    BIND(UID_O, p->o);
    BIND(UID_STATS, p->stats);
    BIND(UID_SCALE, &scale);
    BIND(UID_NEG, &neg);
    if (key->dir == PX_SDPA_BWD) {
        char *dqkv = (char *)p->dqkv;
        BIND(UID_DO, p->dout);
        BIND(UID_DQ, dqkv);
        BIND(UID_DK, dqkv + C * el);
        BIND(UID_DV, dqkv + 2 * C * el);
        BIND(UID_ROWSUM, p->rowsum);
        BIND(UID_DQACC, p->dqacc);
        BIND(UID_ONE, &one);
    }
#undef BIND
    cudnnBackendDescriptor_t vp = NULL;
    cudnnStatus_t s = api.BackendCreateDescriptor(CUDNN_BACKEND_VARIANT_PACK_DESCRIPTOR, &vp);
    const char *what = "variant pack";
    void *ws = p->workspace;
    if (s == CUDNN_STATUS_SUCCESS)
        s = api.BackendSetAttribute(vp, CUDNN_ATTR_VARIANT_PACK_UNIQUE_IDS, CUDNN_TYPE_INT64, n,
                                    uids);
    if (s == CUDNN_STATUS_SUCCESS)
        s = api.BackendSetAttribute(vp, CUDNN_ATTR_VARIANT_PACK_DATA_POINTERS,
                                    CUDNN_TYPE_VOID_PTR, n, ptrs);
    if (s == CUDNN_STATUS_SUCCESS)
        s = api.BackendSetAttribute(vp, CUDNN_ATTR_VARIANT_PACK_WORKSPACE, CUDNN_TYPE_VOID_PTR,
                                    1, &ws);
    if (s == CUDNN_STATUS_SUCCESS)
        s = api.BackendFinalize(vp);
    if (s == CUDNN_STATUS_SUCCESS) {
        what = "execute";
        s = api.BackendExecute(handle, e->plan, vp);
    }
    if (vp)
        api.BackendDestroyDescriptor(vp);
    if (s != CUDNN_STATUS_SUCCESS) {
        char msg[256] = "";
        api.GetLastErrorString(msg, sizeof(msg));
        snprintf(key_why, sizeof(key_why), "%s failed: %s%s%s", what, api.GetErrorString(s),
                 *msg ? ": " : "", msg);
        px_error("cuDNN attention %s, B %d T %d NH %d hs %d: %s; this shape runs on the "
                 "tensor-core kernels from now on", key->dir == PX_SDPA_FWD ? "forward" :
                 "backward", key->B, key->T, key->NH, key->hs, key_why);
        e->refused = 1;
        return PX_ERR_INTERNAL;
    }
    return PX_OK;
}

px_status_t px__cudnn_sdpa_check_graph(const px_sdpa_key_t *key, int *nodes_p, char *err,
                                       size_t errlen)
{
    px_sdpa_layout_t l;
    if (load_lib() != PX_OK) {
        snprintf(err, errlen, "%s", why);
        return PX_ERR_NOT_FOUND;
    }
    if (px_sdpa_layout(key, &l) != PX_OK) {
        snprintf(err, errlen, "unsupported shape");
        return PX_ERR_INVALID_ARGUMENT;
    }
    graph_t *g = calloc(1, sizeof(*g));
    if (!g)
        return PX_ERR_NO_MEMORY;
    g->next_virtual = UID_VIRTUAL;
    if (key->dir == PX_SDPA_FWD)
        build_forward(g, &l, key->causal);
    else
        build_backward(g, &l, key->causal);
    px_status_t status = PX_OK;
    /* the operation graph finalises without a handle: cuDNN checks that
     * the nodes connect (every virtual tensor produced once, consumed) */
    cudnnBackendDescriptor_t og = create(g, CUDNN_BACKEND_OPERATIONGRAPH_DESCRIPTOR, "op graph");
    set_attr(g, og, CUDNN_ATTR_OPERATIONGRAPH_OPS, CUDNN_TYPE_BACKEND_DESCRIPTOR, g->nops, g->ops,
             "op graph ops");
    finalize(g, og, "op graph finalize (cuDNN refused the graph)");
    if (g->failed) {
        char msg[256] = "";
        api.GetLastErrorString(msg, sizeof(msg));
        snprintf(err, errlen, "%s: %s%s%s", g->failed, api.GetErrorString(g->status),
                 *msg ? ": " : "", msg);
        status = PX_ERR_INTERNAL;
    } else {
        *nodes_p = g->nops;
    }
    graph_destroy(g);
    return status;
}

const char *px__cudnn_sdpa_unavailable(void)
{
    if (load_state < 0 || lib_state < 0)
        return why;
    return key_why[0] ? key_why : NULL;
}

long px__cudnn_sdpa_version(void)
{
    return lib_version;
}

int px__cudnn_sdpa_dqacc_zeroed(void)
{
    return lib_version < 90600;
}

#else /* no cudnn_graph.h at build time */

static const char not_built[] = "this build had no cuDNN headers (cudnn_graph.h)";

px_status_t px__cudnn_sdpa_plan(const px_sdpa_key_t *key, void *stream, size_t *ws_bytes_p)
{
    (void)key, (void)stream, (void)ws_bytes_p;
    return PX_ERR_NOT_FOUND;
}

px_status_t px__cudnn_sdpa_run(const px_sdpa_key_t *key, const px_sdpa_ptrs_t *p, void *stream)
{
    (void)key, (void)p, (void)stream;
    return PX_ERR_NOT_FOUND;
}

px_status_t px__cudnn_sdpa_check_graph(const px_sdpa_key_t *key, int *nodes_p, char *err,
                                       size_t errlen)
{
    (void)key, (void)nodes_p;
    snprintf(err, errlen, "%s", not_built);
    return PX_ERR_NOT_FOUND;
}

const char *px__cudnn_sdpa_unavailable(void)
{
    return not_built;
}

long px__cudnn_sdpa_version(void)
{
    return 0;
}

int px__cudnn_sdpa_dqacc_zeroed(void)
{
    return 0;
}

#endif
