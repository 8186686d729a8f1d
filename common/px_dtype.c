/* px_dtype.c: sizes of px_dtype_t (px_dtype.h). Any thread. */
#include "px_dtype.h"

size_t px_dtype_size(px_dtype_t dtype)
{
    switch (dtype) {
    case PX_FLOAT32: return 4;
    case PX_FLOAT64: return 8;
    case PX_FLOAT16: return 2;
    case PX_BFLOAT16: return 2;
    case PX_INT32: return 4;
    case PX_INT64: return 8;
    case PX_UINT8: return 1;
    }
    return 0;
}
