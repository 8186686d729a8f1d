/* px_kernels_bf16.c: the mixed-precision view of an op table
 * (px_kernels_bf16.h). A few static slots, filled once at start-up on the
 * rank's main thread. */
#include "px_kernels_bf16.h"

#include <stddef.h>

#define SLOTS 8

static const px_kernel_ops_t *bases[SLOTS];
static int modes[SLOTS];
static px_kernel_ops_t views[SLOTS];

const px_kernel_ops_t *px_kernels_with_precision(const px_kernel_ops_t *base, int bf16)
{
    if (!bf16)
        return base;
    if (!base || !base->matmul_bf16_forward || !base->matmul_bf16_backward ||
        !base->attention_bf16_forward || !base->attention_bf16_backward ||
        !base->attention_block_bf16_forward || !base->attention_block_bf16_backward)
        return NULL;
    int store = bf16 == PX_KERNELS_BF16;
    if (store && (!base->matmul_bf16in_forward || !base->matmul_bf16in_backward ||
                  !base->bf16_from_f32 || !base->bf16_to_f32))
        return NULL;
    int mode = store ? PX_KERNELS_BF16 : PX_KERNELS_BF16_F32ACTS;
    for (int i = 0; i < SLOTS; i++) {
        if (bases[i] == base && modes[i] == mode)
            return &views[i];
        if (!bases[i]) {
            views[i] = *base;
            views[i].matmul_forward = base->matmul_bf16_forward;
            views[i].matmul_backward = base->matmul_bf16_backward;
            views[i].attention_forward = base->attention_bf16_forward;
            views[i].attention_backward = base->attention_bf16_backward;
            views[i].attention_backward_out = base->attention_bf16_backward_out;
            views[i].attention_block_forward = base->attention_block_bf16_forward;
            views[i].attention_block_backward = base->attention_block_bf16_backward;
            views[i].bf16_acts = store;
            bases[i] = base;
            modes[i] = mode;
            return &views[i];
        }
    }
    return NULL;
}
