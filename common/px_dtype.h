/* px_dtype.h: element types and reduction operators, shared by the kernels
 * (reductions, the engine's tensors) and the transport (collectives), so
 * neither layer has to mirror the other's numbering.
 *
 * The numbering is part of the wire: a collective's header carries the dtype
 * and op, and a peer that disagrees fails it (ARCHITECTURE.md section 4). */
#ifndef PX_DTYPE_H
#define PX_DTYPE_H

#include <stddef.h>

typedef enum px_dtype {
    PX_FLOAT32 = 0,
    PX_FLOAT64,
    PX_FLOAT16,  /* IEEE binary16 */
    PX_BFLOAT16, /* bfloat16 */
    PX_INT32,
    PX_INT64,
    PX_UINT8,
} px_dtype_t;
#define PX_DTYPE_COUNT 7

typedef enum px_redop {
    PX_SUM = 0,
    PX_PROD,
    PX_MIN,
    PX_MAX,
    PX_AVG,
} px_redop_t;
#define PX_REDOP_COUNT 5

/* Size of one element of `dtype` in bytes; 0 for an unknown dtype. (Names
 * and parsers: transport/px_coll.h.) */
size_t px_dtype_size(px_dtype_t dtype);

#endif
